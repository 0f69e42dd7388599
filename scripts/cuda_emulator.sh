#!/usr/bin/env bash
# Runs the CUDA kernels without a GPU: crates/cuda/emulator/libcuda.cpp, the kernels compiled as
# C++ behind the few driver calls cudarc makes, is built as a fake libcuda.so, and through it:
# 1. the kernel check program (crates/cuda/examples/cuda_check.rs): every launch of
#    crates/cuda/src/ops.rs against the CPU scalar reference, bit for bit (--exact);
# 2. the models on the CUDA backend (crates/cuda/tests/models.rs): tiny checkpoints against
#    transformers' goldens and the CPU's bits;
# 3. the binary: `vllm-rs generate --device cuda` gives the ids of `--device cpu`, and a KV cache
#    the GPU cannot hold stops start-up.
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
export LD_LIBRARY_PATH=$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
cargo run -q -p vllm-rs-cuda --features cuda --example cuda_check -- --exact "$OUT" | tail -n 3
cargo test -q -p vllm-rs-cuda --features cuda --test models
# A tiny Llama (vocabulary 320) with SmolLM2's tokenizer, whose single letters stay below 320.
cargo build -q -p vllm-rs --features cuda
TOKENIZER=${VLLM_RS_TEST_MODELS:-$REPO/.models}/hf/smollm2-135m-instruct-from-q4_1
for device in cpu cuda; do
  target/debug/vllm-rs generate --model tests/data/tiny/llama --tokenizer "$TOKENIZER" --prompt "a b c d e" \
    --max-tokens 8 --temperature 0 --ignore-eos --json --device $device >"$OUT/generate-$device.json" 2>"$OUT/generate-$device.log"
done
grep -q "device cuda: running on cuda" "$OUT/generate-cuda.log" || { cat "$OUT/generate-cuda.log"; exit 1; }
if ! cmp -s "$OUT/generate-cpu.json" "$OUT/generate-cuda.json"; then
  echo "cuda_emulator: vllm-rs generate --device cuda differs from --device cpu:" >&2
  cat "$OUT/generate-cpu.json" "$OUT/generate-cuda.json" >&2
  exit 1
fi
echo "cuda_emulator: vllm-rs generate --device cuda gives --device cpu's output: $(cat "$OUT/generate-cuda.json")"
# A KV cache larger than the (emulated, 1 GiB) GPU stops start-up, naming the flags that size it.
if target/debug/vllm-rs generate --model tests/data/tiny/llama --tokenizer "$TOKENIZER" --prompt "a" --device cuda \
  --kv-cache-memory 2GiB >"$OUT/generate-oom.log" 2>&1 || ! grep -q "cannot be placed on cuda.*--kv-cache-memory" "$OUT/generate-oom.log"; then
  echo "cuda_emulator: a KV cache larger than the GPU was not refused at start-up:" >&2
  cat "$OUT/generate-oom.log" >&2
  exit 1
fi
