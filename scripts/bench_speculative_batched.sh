#!/usr/bin/env bash
# Serving throughput with and without speculative decoding at several concurrencies, to check
# that speculation never costs throughput when many requests run (`disable_by_batch_size`):
# `vllm-rs serve` once without and once with SPEC_JSON, each loaded by `vllm-rs bench serve`
# (random prompts, greedy, EOS ignored) at every concurrency in CONCURRENCY.
#
#   scripts/bench_speculative_batched.sh MODEL [SPEC_JSON]
#
# Env: CONCURRENCY (default "1 16 64"), PROMPTS (requests per run, default 2 x concurrency, at
# least 8), INPUT (256), OUTPUT (128), VLLM_RS (default target/release/vllm-rs), PORT (8094).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$REPO/scripts/wait_healthy.sh"
MODEL=${1:?usage: bench_speculative_batched.sh MODEL [SPEC_JSON]}
SPEC=${2:-'{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 4}'}
CONCURRENCY=${CONCURRENCY:-1 16 64}
INPUT=${INPUT:-256}
OUTPUT=${OUTPUT:-128}
PORT=${PORT:-8094}
VLLM_RS=${VLLM_RS:-$REPO/target/release/vllm-rs}
OUT=$(mktemp -d)
PID=
trap 'kill "$PID" 2>/dev/null || true; rm -rf "$OUT"' EXIT
echo "model $MODEL, concurrency $CONCURRENCY, $INPUT in / $OUTPUT out; load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for mode in off on; do
  args=(--log-level warn serve "$MODEL" --port "$PORT" --max-model-len 4096 --max-num-seqs 64)
  [ "$mode" = on ] && args+=(--speculative-config "$SPEC")
  "$VLLM_RS" "${args[@]}" >"$OUT/server-$mode.log" 2>&1 &
  PID=$!
  wait_healthy "$PORT" "$OUT/server-$mode.log"
  for c in $CONCURRENCY; do
    n=${PROMPTS:-$((c * 2 > 8 ? c * 2 : 8))}
    "$VLLM_RS" --log-level warn bench serve --port "$PORT" --dataset-name random --random-input-len "$INPUT" \
      --random-output-len "$OUTPUT" --num-prompts "$n" --max-concurrency "$c" --temperature 0 --ignore-eos \
      --seed 0 --disable-tqdm --save-result --result-dir "$OUT" --result-filename "$mode-$c.json" \
      --ready-check-timeout-sec 300 >/dev/null
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(f'speculation $mode, c$c: {r[\"output_throughput\"]:.1f} output tok/s')" "$OUT/$mode-$c.json" >&2
  done
  kill "$PID"; wait "$PID" 2>/dev/null || true
done
python3 - "$OUT" $CONCURRENCY <<'PYEOF'
import json, sys
out, cs = sys.argv[1], sys.argv[2:]
print("| concurrency | without (tok/s) | with (tok/s) | ratio |")
print("|---:|---:|---:|---:|")
for c in cs:
    off, on = (json.load(open(f"{out}/{m}-{c}.json"))["output_throughput"] for m in ("off", "on"))
    print(f"| {c} | {off:.1f} | {on:.1f} | {on / off:.2f}x |")
PYEOF
