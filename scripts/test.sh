#!/usr/bin/env bash
# The test command: fetches the real test models if they are absent (quick when present), then
# runs every test of the workspace (and, on x86-64, the kernels' tests for aarch64 under qemu).
#
#   scripts/test.sh [cargo test args...]     e.g. scripts/test.sh -p vllm-rs-models
#
# Models go to $VLLM_RS_TEST_MODELS (default <repo>/.models); see scripts/fetch_test_models.sh.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export VLLM_RS_TEST_MODELS=${VLLM_RS_TEST_MODELS:-$REPO/.models}
# Each part's time, so that a log shows where CI's minutes go (its limit is 90).
part_start=$SECONDS
took() {
  echo "test.sh: $1 took $((SECONDS - part_start)) s" >&2
  part_start=$SECONDS
}
bash "$REPO/scripts/fetch_test_models.sh" "$VLLM_RS_TEST_MODELS"
took "fetching the test models"
# Headless Chromium for the chat page's test: once installed, its absence fails that test;
# where it cannot be installed, the test skips, saying so.
rc=0
bash "$REPO/scripts/install_chromium.sh" || rc=$?
if [ $rc -eq 0 ]; then
  export VLLM_RS_REQUIRE_BROWSER=1
elif [ $rc -eq 2 ]; then
  echo "test.sh: the chat page's browser test will be SKIPPED (see above)" >&2
else
  exit $rc
fi
took "installing the browser"
cd "$REPO"
if [ $# -gt 0 ]; then
  exec cargo test "$@"
fi
cargo test --workspace
took "cargo test --workspace"
# The CUDA backend's groundwork, checked without a GPU (issue 31): the committed PTX is what the
# pinned NVRTC gives for crates/cuda/kernels, with no ptxas error or spill on sm_80/sm_90; the
# cuda feature builds (the crate, its kernel check program, whose test says SKIPPED without a
# GPU, and the binary). scripts/gpu_check.sh runs the checks on a GPU machine.
"$VLLM_RS_TEST_MODELS/venv/bin/python" "$REPO/scripts/build_ptx.py" --check
cargo test -p vllm-rs-cuda --features cuda -- --nocapture
cargo check -p vllm-rs --features cuda
took "the CUDA groundwork"
# The kernels themselves, on the CPU through a CUDA driver emulator (scripts/cuda_emulator.sh):
# every kernel against the CPU reference, bit for bit.
rc=0
bash "$REPO/scripts/cuda_emulator.sh" || rc=$?
if [ $rc -eq 2 ]; then
  echo "test.sh: the CUDA kernels' emulated run was SKIPPED (see above)" >&2
elif [ $rc -ne 0 ]; then
  exit $rc
fi
took "the CUDA emulator"
# On x86-64, the NEON tier's kernels too, under qemu (scripts/test_aarch64.sh; skipped, saying
# so, where its tools cannot be installed).
if [ "$(uname -m)" = x86_64 ] && [ "${VLLM_RS_TEST_AARCH64:-1}" != 0 ]; then
  rc=0
  bash "$REPO/scripts/test_aarch64.sh" || rc=$?
  if [ $rc -eq 2 ]; then
    echo "test.sh: the aarch64 kernel tests were SKIPPED (see above)" >&2
  elif [ $rc -ne 0 ]; then
    exit $rc
  fi
  took "the aarch64 kernel tests"
fi
# The fuzz targets' short run (fuzz/run_all.sh: the regression inputs replayed, then 60 s per
# target from a fixed seed); VLLM_RS_TEST_FUZZ=0 leaves it out.
if [ "${VLLM_RS_TEST_FUZZ:-1}" != 0 ]; then
  bash "$REPO/fuzz/run_all.sh" "${VLLM_RS_FUZZ_SECONDS:-60}"
  took "the fuzz targets"
fi
