#!/usr/bin/env bash
# Headless Chromium and its WebDriver for the chat page's browser test
# (crates/cli/tests/chat_page.rs): Debian's chromium and chromium-driver, installed with apt as
# root when missing.
#
# Exit status 2 (and a line saying what is missing) when they cannot be installed here;
# scripts/test.sh then lets the browser test skip, saying so, rather than fail the run.
set -euo pipefail
need=()
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
[ ${#need[@]} -eq 0 ] || exec bash "$(dirname "${BASH_SOURCE[0]}")/apt_install.sh" install_chromium "${need[@]}"
