#!/usr/bin/env bash
# Decode speed with and without speculative decoding (n-gram by default; any SPEC_JSON, e.g.
# a draft model) on a code-editing request and on free chat (scripts/spec_prompts.py), greedy,
# one request at a time.
#
#   scripts/bench_speculative.sh [MODEL] [ROUNDS] [SPEC_JSON]
#
# MODEL defaults to qwen05 (Qwen2.5-Coder-0.5B-Instruct, fetched if absent). Decode tok/s is
# (N - 1) / (t(N) - t(1)) from `vllm-rs generate` runs of N and 1 output tokens, so prompt
# processing and start-up cancel out; rounds alternate the two modes. A draft model's own pass
# over the prompt comes after the first token, so this method counts it as decode time;
# scripts/bench_speculative_serve.sh times it apart. Env: N (default 384),
# VLLM_RS (default target/release/vllm-rs), THREADS (2), VLLM_RS_ARGS (more flags for both
# modes, e.g. `--activation-bits 8`).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODEL=${1:-qwen05}
ROUNDS=${2:-3}
SPEC=${3:-'{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 4}'}
N=${N:-384}
THREADS=${THREADS:-2}
VLLM_RS=${VLLM_RS:-$REPO/target/release/vllm-rs}
[ -x "$VLLM_RS" ] || (cd "$REPO" && cargo build --release -q -p vllm-rs)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
python3 "$REPO/scripts/spec_prompts.py" "$OUT"
echo "model $MODEL, $THREADS threads, N=$N, $ROUNDS rounds; cpu:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2);" \
  "load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# Seconds for one greedy generation of $3 tokens of prompt file $1, speculation $2 (on/off).
gen() {
  local args=(--log-level error generate --model "$MODEL" --chat --prompt "$(cat "$1")" --max-tokens "$3"
    --temperature 0 --ignore-eos --threads "$THREADS" --max-model-len 8192)
  [ "$2" = on ] && args+=(--speculative-config "$SPEC")
  # shellcheck disable=SC2206 # flags, split as words
  args+=(${VLLM_RS_ARGS:-})
  local t0 t1
  t0=$(date +%s.%N)
  "$VLLM_RS" "${args[@]}" >/dev/null
  t1=$(date +%s.%N)
  python3 -c "print($t1 - $t0)"
}
for r in $(seq 1 "$ROUNDS"); do
  for task in code chat; do
    for mode in $([ $((r % 2)) -eq 1 ] && echo "off on" || echo "on off"); do
      t1=$(gen "$OUT/$task.txt" "$mode" 1)
      tn=$(gen "$OUT/$task.txt" "$mode" "$N")
      rate=$(python3 -c "print(($N - 1) / ($tn - $t1))")
      echo "$task $mode $rate" >>"$OUT/rates"
      echo "round $r: $task speculation $mode: $rate tok/s" >&2
    done
  done
done
python3 - "$OUT/rates" <<'EOF'
import statistics, sys
rates = {}
for line in open(sys.argv[1]):
    task, mode, rate = line.split()
    rates.setdefault((task, mode), []).append(float(rate))
for task in ["code", "chat"]:
    off, on = statistics.median(rates[(task, "off")]), statistics.median(rates[(task, "on")])
    print(f"{task}: decode {off:.1f} tok/s without speculation, {on:.1f} with it: {on / off:.2f}x")
EOF
