#!/usr/bin/env bash
# Installs Debian packages with apt-get, as root, for a test script that needs them:
#
#   scripts/apt_install.sh WHO PACKAGE...     (WHO: the calling script, named in messages)
#
# Exit status 2, with a line saying what is missing, when they cannot be installed here (not
# root, no apt-get, or apt-get failed); the caller then reports its tests as skipped.
set -euo pipefail
who=$1
shift
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "$who: missing $* (apt-get install them as root)" >&2
  exit 2
fi
echo "$who: installing $*" >&2
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; } >&2; then
  echo "$who: could not install $*" >&2
  exit 2
fi
