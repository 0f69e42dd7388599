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
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "install_chromium: missing ${need[*]} (apt-get install them as root)" >&2
  exit 2
fi
echo "install_chromium: installing ${need[*]}" >&2
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"; } >&2; then
  echo "install_chromium: could not install ${need[*]}" >&2
  exit 2
fi
