#!/usr/bin/env bash
# Before/after: two vllm-rs binaries on the same GGUF in alternated rounds (which goes first
# alternates too), for "no speed may be lost" checks of a change that should not move speed.
#
#   scripts/bench_ab.sh OLD_BINARY NEW_BINARY MODEL.gguf [ROUNDS] [THREADS]
#
# Each round runs, for each binary: `bench pp-tg -p 512 -n 128 -r 3` (prefill and batch-1 decode
# tokens/s, llama-bench's shape) and `bench latency --batch-size 32` (batched decode: 8 prompt
# tokens, 128 out). Prints every round and the median of the per-round new/old ratios (above
# 1 = the new binary is faster).
set -euo pipefail
OLD=${1:?usage: bench_ab.sh OLD NEW MODEL.gguf [ROUNDS] [THREADS]}
NEW=${2:?}
MODEL=${3:?}
ROUNDS=${4:-5}
THREADS=${5:-2}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "model $MODEL, $THREADS threads, $ROUNDS rounds; cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2);" \
  "load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# "pp tg b32" tokens/s of one binary.
run() {
  local pp tg lat
  read -r pp tg < <(VLLM_RS_THREADS=$THREADS "$1" --log-level error bench pp-tg --model "$MODEL" -p 512 -n 128 -r 3 |
    awk '/pp512/ {pp=$(NF-3)} /tg128/ {tg=$(NF-3)} END {print pp, tg}')
  lat=$("$1" --log-level error bench latency --model "$MODEL" --batch-size 32 --input-len 8 --output-len 128 \
    --threads "$THREADS" --num-iters 2 --num-iters-warmup 1 --kv-cache-memory 1GiB | awk '/^Avg latency:/ {print $3}')
  echo "$pp $tg $(python3 -c "print(32 * 128 / $lat)")"
}
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then o=$(run "$OLD"); n=$(run "$NEW"); else n=$(run "$NEW"); o=$(run "$OLD"); fi
  echo "$o $n" >>"$OUT/rounds"
  echo "round $r: old pp/tg/b32 $o; new $n" >&2
done
python3 - "$OUT/rounds" <<'EOF'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
for i, name in enumerate(["pp512", "tg128", "batch-32 decode"]):
    old = [r[i] for r in rows]
    new = [r[3 + i] for r in rows]
    ratios = [n / o for o, n in zip(old, new)]
    print(f"{name}: old median {statistics.median(old):.1f} tok/s, new {statistics.median(new):.1f}; "
          f"new/old per round median {statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f})")
EOF
