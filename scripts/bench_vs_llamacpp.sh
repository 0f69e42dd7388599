#!/usr/bin/env bash
# vllm.rs vs llama.cpp on the same GGUF file, same threads, same machine, interleaved:
# prompt processing (pp) and token generation (tg), medians over rounds, and the ratio table;
# and the decode roof of the same run: DRAM read bandwidth (the `membw` example, THREADS threads,
# the better of one and four streams each, measured each round) over the bytes of weights one
# decoded token reads (every tensor of the GGUF file but an untied token embedding, of which a
# token reads one row; of a MoE's 3-D `*_exps` expert tensors only the share its routed experts
# hold: expert_used_count / expert_count).
#
#   scripts/bench_vs_llamacpp.sh MODEL.gguf [ROUNDS] [THREADS]
#
# Env: LLAMA_BENCH (default ~/peers/llamacpp-bin/llama-bench), VLLM_RS (default
# target/release/vllm-rs), VLLM_RS_ARGS (more flags for ours, e.g. `--activation-bits 8`), PP
# (default 512), TG (default 128), REPS per round (default 3).
# Each round runs llama-bench and `vllm-rs bench pp-tg` once each, alternating which goes first.
set -euo pipefail
MODEL=${1:?usage: bench_vs_llamacpp.sh MODEL.gguf [ROUNDS] [THREADS]}
ROUNDS=${2:-3}
THREADS=${3:-2}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LLAMA_BENCH=${LLAMA_BENCH:-$HOME/peers/llamacpp-bin/llama-bench}
VLLM_RS=${VLLM_RS:-$REPO/target/release/vllm-rs}
MEMBW=${MEMBW:-$REPO/target/release/examples/membw}
PP=${PP:-512}
TG=${TG:-128}
REPS=${REPS:-3}
[ -x "$LLAMA_BENCH" ] || { echo "llama-bench not found at $LLAMA_BENCH (see ../shared/PEERS.md)" >&2; exit 1; }
[ -x "$VLLM_RS" ] || (cd "$REPO" && cargo build --release -q -p vllm-rs)
[ -x "$MEMBW" ] || (cd "$REPO" && cargo build --release -q -p vllm-rs-kernels --example membw)
OUT=$(mktemp -d)
echo "model $MODEL, $THREADS threads, pp$PP / tg$TG, $ROUNDS rounds x $REPS reps; load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

run_llama() {
  "$LLAMA_BENCH" -m "$MODEL" -t "$THREADS" -p "$PP" -n "$TG" -r "$REPS" -o json 2>/dev/null >"$OUT/llama-$1.json"
}
run_ours() {
  VLLM_RS_THREADS=$THREADS "$VLLM_RS" --log-level error bench pp-tg --model "$MODEL" -p "$PP" -n "$TG" -r "$REPS" \
    -o json --kv-cache-memory 1GiB --max-model-len 4096 ${VLLM_RS_ARGS:-} >"$OUT/ours-$1.json"
}
for r in $(seq 1 "$ROUNDS"); do
  # The better of one and four streams a thread: which reads faster depends on the CPU (one did
  # on Zen 4, where four under-read what both engines then achieved).
  for streams in 1 4; do "$MEMBW" "$THREADS" 1024 "$streams" | sed -n 's/.*: \([0-9.]*\) GB\/s.*/\1/p'; done |
    sort -g | tail -1 >>"$OUT/membw"
  if [ $((r % 2)) -eq 1 ]; then run_llama "$r"; run_ours "$r"; else run_ours "$r"; run_llama "$r"; fi
  echo "round $r done" >&2
done

python3 - "$OUT" "$PP" "$TG" "$MODEL" <<'EOF'
import json, statistics, struct, sys, glob, os
out, pp, tg, model = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

def tensor_bytes(path):
    """Each tensor's bytes in a GGUF file, by name (from the offsets of the tensor infos), and the
    metadata."""
    with open(path, "rb") as f:
        data = f.read(64 << 20)  # headers of the files used here fit in 64 MiB
        size = os.fstat(f.fileno()).st_size
    at = 0
    def take(fmt):
        nonlocal at
        v = struct.unpack_from("<" + fmt, data, at)
        at += struct.calcsize("<" + fmt)
        return v[0]
    def string():
        nonlocal at
        n = take("Q")
        at += n
        return data[at - n:at].decode(errors="replace")
    fixed = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    def value(t):
        if t in fixed:
            return take(fixed[t])
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        raise ValueError(f"unknown GGUF value type {t}")
    assert data[:4] == b"GGUF", f"{path} is not a GGUF file"
    at = 8
    n_tensors, n_kv = take("Q"), take("Q")
    meta = {}
    for _ in range(n_kv):
        key = string()
        meta[key] = value(take("I"))
    align = meta.get("general.alignment", 32)
    infos = []
    for _ in range(n_tensors):
        name = string()
        n_dims = take("I")
        at += 8 * n_dims + 4  # dims, type
        infos.append((take("Q"), name))
    base = (at + align - 1) // align * align
    infos.sort()
    ends = [o for o, _ in infos[1:]] + [size - base]
    return {name: end - o for (o, name), end in zip(infos, ends)}, meta

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
sizes, meta = tensor_bytes(model)
if "output.weight" in sizes:
    sizes.pop("token_embd.weight", None)
arch = meta.get("general.architecture", "")
used = meta.get(f"{arch}.expert_used_count", 1) / meta.get(f"{arch}.expert_count", 1)
per_token = sum(b * used if "_exps." in name else b for name, b in sizes.items())
bw = [float(x) for x in open(os.path.join(out, "membw")).read().split()]
roof = statistics.median(bw) * 1e9 / per_token
l, o = statistics.median(llama["tg"]), statistics.median(ours["tg"])
print(f"\nroof: DRAM {statistics.median(bw):.1f} GB/s (median; rounds {' '.join(f'{b:.1f}' for b in bw)}) / "
      f"{per_token / 1e6:.1f} MB of weights per token = {roof:.1f} tok/s; "
      f"tg{tg}: vllm.rs {100 * o / roof:.0f} %, llama.cpp {100 * l / roof:.0f} % of it")
EOF
