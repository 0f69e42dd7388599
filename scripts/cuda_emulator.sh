#!/usr/bin/env bash
# Runs the CUDA kernels without a GPU: crates/cuda/emulator/libcuda.cpp, the kernels compiled as
# C++ behind the few driver calls cudarc makes, is built as a fake libcuda.so, and the kernel
# check program (crates/cuda/examples/cuda_check.rs) runs through it: every launch of
# crates/cuda/src/ops.rs, against the CPU scalar reference, bit for bit (--exact).
#
#   scripts/cuda_emulator.sh [OUT_DIR]     (default target/cuda-emulator/check)
#
# Exit status 2 (SKIPPED) where there is no g++. This checks the kernels' logic (indexing,
# shuffles, reduction order, argument order), not the hardware: scripts/gpu_check.sh does that.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LIB=$REPO/target/cuda-emulator
OUT=${1:-$LIB/check}
CXX=${CXX:-g++}
if ! command -v "$CXX" >/dev/null; then
  echo "cuda_emulator: no $CXX: SKIPPED" >&2
  exit 2
fi
mkdir -p "$LIB"
# -ffp-contract=off: a product and a sum stay two roundings, as the kernels' --fmad=false.
"$CXX" -std=c++17 -O2 -ffp-contract=off -fPIC -shared -pthread -Wall -Wno-unknown-pragmas \
  -o "$LIB/libcuda.so" "$REPO/crates/cuda/emulator/libcuda.cpp"
cd "$REPO"
LD_LIBRARY_PATH=$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
  cargo run -q -p vllm-rs-cuda --features cuda --example cuda_check -- --exact "$OUT" | tail -n 3
