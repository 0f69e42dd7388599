#!/usr/bin/env bash
# Runs the CUDA kernels without a GPU: crates/cuda/emulator/libcuda.cpp, the kernels compiled as
# C++ behind the few driver calls cudarc makes, is built as a fake libcuda.so, and through it:
# 1. the kernel check program (crates/cuda/examples/cuda_check.rs): every launch of
#    crates/cuda/src/ops.rs against the CPU scalar reference, bit for bit (--exact);
# 2. the models on the CUDA backend (crates/cuda/tests/models.rs): tiny checkpoints against
#    transformers' goldens and the CPU's bits;
# 3. the binary: `vllm-rs generate --device cuda` gives the ids of `--device cpu`, the K/V cache
#    is sized from the GPU's memory after the weights, and a cache the GPU cannot hold stops
#    start-up;
# 4. the server: a CUDA error in a step fails the running request with it, then /health and new
#    requests.
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
# The weights went to the GPU at load, and the cache was sized from what the GPU had left.
grep -E "KV cache sized from the GPU's memory: 0.9 of 1024.0 MiB, less [0-9.]+ MiB in use" "$OUT/generate-cuda.log" |
  grep -vq "less 0.0 MiB" || { echo "cuda_emulator: the KV cache was not sized from the GPU after the weights:" >&2; cat "$OUT/generate-cuda.log" >&2; exit 1; }
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
# A CUDA error in a step (the emulator fails every launch after the first 60) ends the engine
# cleanly: the running request gets the error (HTTP 500 naming it), /health fails, and a new
# request is refused with the same reason; the server does not hang.
source scripts/wait_healthy.sh
PORT=${CUDA_EMULATOR_PORT:-18347}
VLLM_RS_EMULATOR_FAIL_AFTER=60 target/debug/vllm-rs serve tests/data/tiny/llama --tokenizer "$TOKENIZER" \
  --device cuda --port "$PORT" >"$OUT/serve-fail.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
wait_healthy "$PORT" "$OUT/serve-fail.log" 120
ask() {
  curl -s -m 120 -o "$OUT/$1.json" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/completions" \
    -H 'content-type: application/json' \
    -d '{"model": "tests/data/tiny/llama", "prompt": "a b c", "max_tokens": 64, "ignore_eos": true}'
}
first=$(ask fail-running)
health=$(curl -s -m 10 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")
second=$(ask fail-next)
kill $SERVER
if [ "$first $health $second" != "500 503 500" ] || ! grep -q "engine failed.*CUDA_ERROR_LAUNCH_FAILED" "$OUT/fail-running.json" \
  || ! grep -q "engine failed.*CUDA_ERROR_LAUNCH_FAILED" "$OUT/fail-next.json"; then
  echo "cuda_emulator: a CUDA error in a step was not reported as such (HTTP $first, health $health, then $second):" >&2
  cat "$OUT/fail-running.json" "$OUT/fail-next.json" "$OUT/serve-fail.log" >&2
  exit 1
fi
echo "cuda_emulator: a CUDA error in a step fails the running request (HTTP 500 naming it), /health and new requests"
