#!/usr/bin/env bash
# vllm.rs vs llama.cpp on the same GGUF file, same threads, same machine, interleaved:
# prompt processing (pp) and token generation (tg), medians over rounds, and the ratio table.
#
#   scripts/bench_vs_llamacpp.sh MODEL.gguf [ROUNDS] [THREADS]
#
# Env: LLAMA_BENCH (default ~/peers/llamacpp-bin/llama-bench), VLLM_RS (default
# target/release/vllm-rs), PP (default 512), TG (default 128), REPS per round (default 3).
# Each round runs llama-bench and `vllm-rs bench pp-tg` once each, alternating which goes first.
set -euo pipefail
MODEL=${1:?usage: bench_vs_llamacpp.sh MODEL.gguf [ROUNDS] [THREADS]}
ROUNDS=${2:-3}
THREADS=${3:-2}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LLAMA_BENCH=${LLAMA_BENCH:-$HOME/peers/llamacpp-bin/llama-bench}
VLLM_RS=${VLLM_RS:-$REPO/target/release/vllm-rs}
PP=${PP:-512}
TG=${TG:-128}
REPS=${REPS:-3}
[ -x "$LLAMA_BENCH" ] || { echo "llama-bench not found at $LLAMA_BENCH (see ../shared/PEERS.md)" >&2; exit 1; }
[ -x "$VLLM_RS" ] || (cd "$REPO" && cargo build --release -q -p vllm-rs)
OUT=$(mktemp -d)
echo "model $MODEL, $THREADS threads, pp$PP / tg$TG, $ROUNDS rounds x $REPS reps; load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

run_llama() {
  "$LLAMA_BENCH" -m "$MODEL" -t "$THREADS" -p "$PP" -n "$TG" -r "$REPS" -o json 2>/dev/null >"$OUT/llama-$1.json"
}
run_ours() {
  VLLM_RS_THREADS=$THREADS "$VLLM_RS" --log-level error bench pp-tg --model "$MODEL" -p "$PP" -n "$TG" -r "$REPS" \
    -o json --kv-cache-memory 1GiB >"$OUT/ours-$1.json"
}
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then run_llama "$r"; run_ours "$r"; else run_ours "$r"; run_llama "$r"; fi
  echo "round $r done" >&2
done

python3 - "$OUT" "$PP" "$TG" <<'EOF'
import json, statistics, sys, glob, os
out, pp, tg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def rates(prefix):
    r = {"pp": [], "tg": []}
    for f in sorted(glob.glob(os.path.join(out, prefix + "-*.json"))):
        for row in json.load(open(f)):
            kind = "pp" if row.get("n_gen", 0) == 0 else "tg"
            r[kind].append(row["avg_ts"])
    return r
ours, llama = rates("ours"), rates("llama")
print(f"| test | llama.cpp t/s (median) | vllm.rs t/s (median) | ratio |")
print(f"|---|---:|---:|---:|")
for kind, n in (("pp", pp), ("tg", tg)):
    l, o = statistics.median(llama[kind]), statistics.median(ours[kind])
    print(f"| {kind}{n} | {l:.1f} | {o:.1f} | {o / l:.2f}x |")
EOF
