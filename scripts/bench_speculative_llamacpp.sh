#!/usr/bin/env bash
# llama.cpp's speculative decoding on the prompts of scripts/spec_prompts.py (a code-editing
# request and free chat, greedy, one at a time), for the same-run comparison the speculative
# issue asks for: llama-server without speculation, with its n-gram mode, and with a draft model
# (`--spec-type draft-simple`: without it this llama.cpp loads `-md` and never drafts).
#
#   scripts/bench_speculative_llamacpp.sh TARGET.gguf [DRAFT.gguf] [ROUNDS]
#
# Decode tok/s two ways, both leaving out prompt processing (which includes the draft model's
# pass over the prompt; stderr shows its time and the request's wall time): llama-server's own
# `timings.predicted_per_second`, and as the client sees the stream, the measure
# scripts/bench_speculative_serve.sh takes of vllm-rs ("after the first chunk"). Env: N (output tokens,
# default 384), THREADS (2), LLAMA_SERVER (default ~/peers/llamacpp-bin/llama-server), NGRAM
# (llama.cpp's n-gram flags, default `--spec-type ngram-simple`), DRAFT_MAX (4).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$REPO/scripts/wait_healthy.sh"
TARGET=${1:?usage: bench_speculative_llamacpp.sh TARGET.gguf [DRAFT.gguf] [ROUNDS]}
DRAFT=${2:-}
ROUNDS=${3:-3}
N=${N:-384}
THREADS=${THREADS:-2}
LLAMA_SERVER=${LLAMA_SERVER:-$HOME/peers/llamacpp-bin/llama-server}
NGRAM=${NGRAM:---spec-type ngram-simple}
DRAFT_MAX=${DRAFT_MAX:-4}
PORT=${PORT:-8093}
[ -x "$LLAMA_SERVER" ] || { echo "llama-server not found at $LLAMA_SERVER (see ../shared/PEERS.md)" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'kill "$PID" 2>/dev/null || true; rm -rf "$OUT"' EXIT
PID=
python3 "$REPO/scripts/spec_prompts.py" "$OUT"
echo "target $TARGET, draft ${DRAFT:-none}, $THREADS threads, N=$N, $ROUNDS rounds;" \
  "cpu:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

modes=(off ngram)
[ -n "$DRAFT" ] && modes+=(draft)
for r in $(seq 1 "$ROUNDS"); do
  for mode in "${modes[@]}"; do
    args=(-m "$TARGET" -t "$THREADS" -c 8192 --port "$PORT" -np 1)
    case $mode in
      ngram) read -r -a extra <<<"$NGRAM"; args+=("${extra[@]}") ;;
      draft) args+=(-md "$DRAFT" --spec-type draft-simple --spec-draft-n-max "$DRAFT_MAX" -td "$THREADS") ;;
    esac
    "$LLAMA_SERVER" "${args[@]}" >"$OUT/server.log" 2>&1 &
    PID=$!
    wait_healthy "$PORT" "$OUT/server.log" 120
    python3 - "$OUT" "$PORT" "$N" "$mode" "$r" >>"$OUT/rates" <<'PYEOF'
import json, sys, time, urllib.request
out, port, n, mode, r = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
for task in ["code", "chat"]:
    body = {"messages": [{"role": "user", "content": open(f"{out}/{task}.txt").read()}], "max_tokens": n,
            "temperature": 0, "ignore_eos": True, "cache_prompt": False, "stream": True}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t0, seen, t = time.time(), [], {}  # seen: when each chunk with text came
    with urllib.request.urlopen(req, timeout=3600) as resp:
        for line in resp:
            line = line.decode().strip()
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            t = chunk.get("timings") or t
            if any(c.get("delta", {}).get("content") for c in chunk.get("choices", [])):
                seen.append(time.time() - t0)
    assert t.get("predicted_n") == n, f"{task}: {t.get('predicted_n')} tokens, not {n}"
    # As bench_speculative_serve.sh's "after the first chunk": the tokens after the first over
    # the time from the first chunk to the last, seen by this client.
    client = (n - 1) / (seen[-1] - seen[0])
    print(task, mode, t["predicted_per_second"], client)
    print(f"round {r}: {task} {mode}: {t['predicted_per_second']:.1f} tok/s ({client:.1f} client-seen), "
          f"prompt {t['prompt_ms'] / 1000:.1f} s, wall {seen[-1]:.1f} s, drafted {t.get('draft_n', '-')}, "
          f"accepted {t.get('draft_n_accepted', '-')}", file=sys.stderr)
PYEOF
    kill "$PID"; wait "$PID" 2>/dev/null || true
  done
done
python3 - "$OUT/rates" <<'PYEOF'
import statistics, sys
rates = {}
for line in open(sys.argv[1]):
    task, mode, internal, client = line.split()
    rates.setdefault((task, mode), []).append((float(internal), float(client)))
for task in ["code", "chat"]:
    for i, measure in enumerate(["llama-server's predicted_per_second", "client-seen after the first chunk"]):
        off = statistics.median(r[i] for r in rates[(task, "off")])
        parts = [f"{task}, {measure}: {off:.1f} tok/s without speculation"]
        for mode in ["ngram", "draft"]:
            if (task, mode) in rates:
                on = statistics.median(r[i] for r in rates[(task, mode)])
                parts.append(f"{mode} {on:.1f} ({on / off:.2f}x)")
        print(", ".join(parts))
PYEOF
