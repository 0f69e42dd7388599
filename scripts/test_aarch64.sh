#!/usr/bin/env bash
# The kernels' tests built for aarch64 and run under qemu-aarch64 (user mode), so the NEON tier
# is checked against the scalar reference on a machine without an ARM CPU. Installs what is
# missing: the Rust target (rustup), the cross linker and qemu (Debian's apt, as root).
#
#   scripts/test_aarch64.sh [cargo test args...]
#
# Exit status 2 (and a line saying what is missing) when the tools cannot be installed here;
# scripts/test.sh then reports the aarch64 tests as skipped rather than failing the run.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGET=aarch64-unknown-linux-gnu
need=()
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
if [ ${#need[@]} -gt 0 ]; then
  bash "$REPO/scripts/apt_install.sh" test_aarch64 "${need[@]}" || exit $?
fi
if ! rustup target list --installed 2>/dev/null | grep -qx "$TARGET"; then
  rustup target add "$TARGET" >&2 || { echo "test_aarch64: could not add the Rust target $TARGET" >&2; exit 2; }
fi
cd "$REPO"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
exec cargo test --target "$TARGET" -p vllm-rs-kernels "$@"
