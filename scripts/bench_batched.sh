#!/usr/bin/env bash
# Batched decode scaling: output tokens/s of BATCH concurrent sequences against one, for
# vllm.rs (`vllm-rs bench latency`) and, when installed, llama.cpp (`llama-batched-bench`), on
# the same GGUF file and threads, in paired rounds (the machine's speed drifts within minutes,
# so each round's ratio divides runs made seconds apart).
#
#   scripts/bench_batched.sh MODEL.gguf [ROUNDS] [THREADS]
#
# Env: BATCH (default 32), INPUT (prompt tokens, 8), OUTPUT (tokens generated, 128), ITERS
# (timed iterations of ours per run, 2), KV_DTYPE (ours, `auto`), VLLM_RS_ARGS (more flags for
# ours, e.g. `--activation-bits 8`), VLLM_RS (default
# target/release/vllm-rs), LLAMA_BATCHED (default ~/peers/llamacpp-bin/llama-batched-bench;
# skipped when absent, see ../shared/PEERS.md).
# Tokens/s is BATCH · OUTPUT over the whole batch's time, prompts included, for both engines.
set -euo pipefail
MODEL=${1:?usage: bench_batched.sh MODEL.gguf [ROUNDS] [THREADS]}
ROUNDS=${2:-6}
THREADS=${3:-2}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VLLM_RS=${VLLM_RS:-$REPO/target/release/vllm-rs}
LLAMA_BATCHED=${LLAMA_BATCHED:-$HOME/peers/llamacpp-bin/llama-batched-bench}
BATCH=${BATCH:-32}
INPUT=${INPUT:-8}
OUTPUT=${OUTPUT:-128}
ITERS=${ITERS:-2}
KV_DTYPE=${KV_DTYPE:-auto}
[ -x "$VLLM_RS" ] || (cd "$REPO" && cargo build --release -q -p vllm-rs)
OUT=$(mktemp -d)
echo "model $MODEL, $THREADS threads, batch 1 and $BATCH, $INPUT in / $OUTPUT out, $ROUNDS rounds;" \
  "load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# Seconds for one batch of `$1` requests (the mean of the timed iterations).
ours() {
  "$VLLM_RS" --log-level error bench latency --model "$MODEL" --batch-size "$1" --input-len "$INPUT" \
    --output-len "$OUTPUT" --threads "$THREADS" --num-iters "$ITERS" --num-iters-warmup 1 \
    --kv-cache-memory 1GiB --kv-cache-dtype "$KV_DTYPE" ${VLLM_RS_ARGS:-} | awk '/^Avg latency:/ {print $3}'
}
# Seconds for batches of 1 and $BATCH requests (prompt and generation), one line each.
llama() {
  "$LLAMA_BATCHED" -m "$MODEL" -c $(((INPUT + OUTPUT) * BATCH + 256)) -b 2048 -ub 512 -npp "$INPUT" \
    -ntg "$OUTPUT" -npl "1,$BATCH" -t "$THREADS" --output-format jsonl 2>/dev/null |
    python3 -c 'import json, sys; [print(json.loads(l)["t"]) for l in sys.stdin if l.startswith("{")]'
}
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then a=$(ours 1); b=$(ours "$BATCH"); else b=$(ours "$BATCH"); a=$(ours 1); fi
  line="ours $a $b"
  echo "$line" >>"$OUT/times"
  if [ -x "$LLAMA_BATCHED" ]; then
    l="llama $(llama | tr '\n' ' ')"
    echo "$l" >>"$OUT/times"
    line="$line; $l"
  fi
  echo "round $r: $line" >&2
done

python3 - "$OUT/times" "$BATCH" "$OUTPUT" <<'EOF'
import statistics, sys
path, batch, output = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
runs = {}
for line in open(path):
    name, t1, tb = line.split()[:3]
    runs.setdefault(name, []).append((float(t1), float(tb)))
print(f"| engine | rounds | tok/s at 1 (median) | tok/s at {batch} (median) | per-round ratios | median ratio |")
print("|---|---:|---:|---:|---|---:|")
for name, label in (("ours", "vllm.rs"), ("llama", "llama.cpp")):
    if name not in runs:
        continue
    rs = runs[name]
    ratios = [batch * t1 / tb for t1, tb in rs]
    s1 = statistics.median(output / t1 for t1, _ in rs)
    sb = statistics.median(batch * output / tb for _, tb in rs)
    per = " ".join(f"{x:.2f}" for x in ratios)
    print(f"| {label} | {len(rs)} | {s1:.1f} | {sb:.1f} | {per} | **{statistics.median(ratios):.2f}x** |")
EOF
