#!/usr/bin/env bash
# Speculative decoding as a client of `vllm-rs serve` sees it: the prompts of
# scripts/spec_prompts.py (code editing, chat), greedy, one streamed request at a time, with and
# without SPEC_JSON (default: n-gram, k = 4, lookups as vLLM defaults them: 5 tokens), rounds
# alternating the two.
#
#   scripts/bench_speculative_serve.sh MODEL [ROUNDS] [SPEC_JSON]
#
# Per request it prints the time to the first token (TTFT), the gap to the next chunk (a draft
# model's own pass over the prompt falls there: it runs once the first token is out), decode
# tok/s after the first chunk (the gap included, as TPOT counts it) and after the second (the gap
# excluded, as llama-server's `predicted_per_second` excludes its draft's prompt pass), and the
# request's wall time; then the medians. Token counts come from the stream's usage
# (`continuous_usage_stats`). Env: N (output tokens, default 384), THREADS (2), VLLM_RS (default
# target/release/vllm-rs), VLLM_RS_ARGS (more serve flags for both modes), PORT (8095), TASKS
# ("code chat"), PROMPT_LINES (the code prompt's file cut to that many lines: shorter rounds).
# With VLLM_RS_B or SPEC_B set, both modes speculate: "a" runs VLLM_RS with SPEC_JSON, "b"
# VLLM_RS_B (default VLLM_RS) with SPEC_B (default SPEC_JSON): an A/B of two builds or two
# configs, alternating as the modes do.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$REPO/scripts/wait_healthy.sh"
MODEL=${1:?usage: bench_speculative_serve.sh MODEL [ROUNDS] [SPEC_JSON]}
ROUNDS=${2:-3}
SPEC=${3:-'{"method": "ngram", "num_speculative_tokens": 4}'}
N=${N:-384}
THREADS=${THREADS:-2}
PORT=${PORT:-8095}
VLLM_RS=${VLLM_RS:-$REPO/target/release/vllm-rs}
[ -x "$VLLM_RS" ] || (cd "$REPO" && cargo build --release -q -p vllm-rs)
OUT=$(mktemp -d)
PID=
trap 'kill "$PID" 2>/dev/null || true; rm -rf "$OUT"' EXIT
python3 "$REPO/scripts/spec_prompts.py" "$OUT" ${PROMPT_LINES:-}
MODES=(off on)
[ -n "${VLLM_RS_B:-}${SPEC_B:-}" ] && MODES=(a b)
echo "model $MODEL, spec $SPEC${SPEC_B:+ (b: $SPEC_B)}, $THREADS threads, N=$N, $ROUNDS rounds;" \
  "cpu:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for r in $(seq 1 "$ROUNDS"); do
  for mode in $([ $((r % 2)) -eq 1 ] && echo "${MODES[0]} ${MODES[1]}" || echo "${MODES[1]} ${MODES[0]}"); do
    args=(--log-level warn serve "$MODEL" --port "$PORT" --threads "$THREADS" --max-model-len 8192
      --no-enable-prefix-caching)
    case $mode in
      on | a) args+=(--speculative-config "$SPEC") ;;
      b) args+=(--speculative-config "${SPEC_B:-$SPEC}") ;;
    esac
    # shellcheck disable=SC2206 # flags, split as words
    args+=(${VLLM_RS_ARGS:-})
    bin=$VLLM_RS
    [ "$mode" = b ] && bin=${VLLM_RS_B:-$VLLM_RS}
    "$bin" "${args[@]}" >"$OUT/server-$mode.log" 2>&1 &
    PID=$!
    wait_healthy "$PORT" "$OUT/server-$mode.log"
    python3 - "$OUT" "$PORT" "$N" "$mode" "$r" ${TASKS:-code chat} >>"$OUT/results" <<'PYEOF'
import json, sys, time, urllib.request
out, port, n, mode, r = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
for task in sys.argv[6:]:
    body = {"messages": [{"role": "user", "content": open(f"{out}/{task}.txt").read()}], "max_tokens": n,
            "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t0, chunks = time.time(), []  # (seconds since the request, completion tokens so far)
    with urllib.request.urlopen(req, timeout=3600) as resp:
        for line in resp:
            line = line.decode().strip()
            if not line.startswith("data: {"):
                continue
            usage = json.loads(line[6:]).get("usage") or {}
            got = usage.get("completion_tokens", 0)
            if got and (not chunks or got > chunks[-1][1]):
                chunks.append((time.time() - t0, got))
    (t1, n1), (t2, n2), (te, ne) = chunks[0], chunks[1], chunks[-1]
    assert ne == n, f"{task}: {ne} tokens, not {n}"
    row = {"task": task, "mode": mode, "ttft": t1, "gap": t2 - t1, "after_first": (ne - n1) / (te - t1),
           "after_second": (ne - n2) / (te - t2), "wall": te}
    print(json.dumps(row))
    print(f"round {r}: {task} speculation {mode}: TTFT {t1:.2f} s, next gap {t2 - t1:.2f} s, decode "
          f"{row['after_first']:.1f} tok/s after the first chunk, {row['after_second']:.1f} after the second, "
          f"wall {te:.1f} s", file=sys.stderr)
PYEOF
    kill "$PID"; wait "$PID" 2>/dev/null || true
  done
done
python3 - "$OUT/results" "${MODES[@]}" ${TASKS:-code chat} <<'PYEOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
first, second = sys.argv[2], sys.argv[3]
def med(task, mode, key):
    return statistics.median(r[key] for r in rows if r["task"] == task and r["mode"] == mode)
for task in sys.argv[4:]:
    parts = []
    for key, unit in [("ttft", "s"), ("gap", "s"), ("after_first", "tok/s"), ("after_second", "tok/s"), ("wall", "s")]:
        off, on = med(task, first, key), med(task, second, key)
        parts.append(f"{key} {off:.2f} -> {on:.2f} {unit} ({on / off:.2f}x)")
    print(f"{task}: " + ", ".join(parts))
PYEOF
