#!/usr/bin/env python3
"""The serving scoreboard: vllm-rs serve against vLLM-cpu and llama-server on SmolLM2-135M.

    scripts/scoreboard.sh [--reps 3] [--concurrency 1 4 16 64] [--shapes 128x128 512x128]
                          [--servers vllm-rs-gguf vllm-rs-hf vllm llama-server] [--out DIR]

Servers: vllm-rs-gguf (the Q4_1 GGUF), vllm-rs-gguf-int8 (the same with `--activation-bits 8`,
as llama.cpp quantizes activations), vllm-rs-hf (its bf16 hf directory, computed in float32,
our default), vllm-rs-hf-bf16 (the same with `--dtype bfloat16`, as vLLM computes it), vllm,
llama-server.

For each repetition, for each server (the order rotates between repetitions, so the servers
interleave): start it, time the cold start to the first `GET /health` 200, sample the RSS of its
process tree, warm it up, then run vLLM's own `vllm bench serve` (random dataset, --ignore-eos,
a seed of its own per run, the same for every server) at every concurrency and shape; in the
first repetition our `vllm-rs bench serve` runs the first shape at concurrency 4 as a
cross-check of the client. Then SIGTERM and the next server.

Writes OUT/scoreboard.json (every run) and OUT/scoreboard.md (medians and ratios: ours/peer for
throughput, peer/ours for latency and memory). Stdlib only; the peers are found as
/work/shared/PEERS.md installs them ($VLLM_VENV, $VLLM_CLI, $LLAMA_SERVER). A benchmark, not a
test: run it on a quiet machine.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench_startup import free_port, probe  # same folder: one way to find a port and poll /health

REPO = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("VLLM_RS_TEST_MODELS", REPO / ".models"))
GGUF = MODELS / "gguf/smollm2-135m-instruct-q4_1/SmolLM2-135M-Instruct.Q4_1.gguf"
HF_DIR = MODELS / "hf/smollm2-135m-instruct-from-q4_1"
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
BIN = TARGET / "release/vllm-rs"
VLLM_VENV = Path(os.environ.get("VLLM_VENV", Path.home() / "peers/venvs/vllm-cpu"))
VLLM_CLI = Path(os.environ.get("VLLM_CLI", "/work/shared/peers/vllm_cli.py"))
LLAMA_SERVER = Path(os.environ.get("LLAMA_SERVER", Path.home() / "peers/llamacpp-bin/llama-server"))
THREADS = os.environ.get("THREADS", "2")
NAME = "smollm2"
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


def server_command(server: str, port: int) -> tuple[list[str], dict[str, str]]:
    """argv and extra environment of one server, each at its best settings for 2 threads."""
    common = ["--host", "127.0.0.1", "--port", str(port)]
    if server in ("vllm-rs-gguf", "vllm-rs-gguf-int8", "vllm-rs-hf", "vllm-rs-hf-bf16"):
        model = GGUF if server.startswith("vllm-rs-gguf") else HF_DIR
        argv = [str(BIN), "serve", str(model), "--served-model-name", NAME, "--threads", THREADS]
        if server == "vllm-rs-hf-bf16":
            argv += ["--dtype", "bfloat16"]
        if server == "vllm-rs-gguf-int8":
            argv += ["--activation-bits", "8"]
        # A 16-bit KV cache, as each peer keeps (llama.cpp f16, vLLM bf16 for a bf16 model).
        return argv + ["--max-model-len", "2048", "--kv-cache-dtype", "float16"] + common, {}
    if server == "vllm":
        argv = [str(VLLM_VENV / "bin/python"), str(VLLM_CLI), "serve", str(HF_DIR), "--served-model-name", NAME]
        env = {"VLLM_CPU_OMP_THREADS_BIND": f"0-{int(THREADS) - 1}", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
        return argv + ["--max-model-len", "2048", "--dtype", "bfloat16"] + common, env | {"VLLM_CPU_KVCACHE_SPACE": "2"}
    if server == "llama-server":
        # 64 slots of 768 tokens: every concurrency and shape fits without eviction (512 + 128
        # exactly filled 640-token slots, and re-tokenized prompts can be longer).
        argv = [str(LLAMA_SERVER), "-m", str(GGUF), "-a", NAME, "-t", THREADS, "-tb", THREADS]
        return argv + ["-np", "64", "-c", str(64 * 768)] + common, {}
    raise SystemExit(f"unknown server {server!r}")


class RssSampler(threading.Thread):
    """Peak total RSS (MiB) of a process and all its descendants, sampled every 0.2 s."""

    def __init__(self, root: int):
        super().__init__(daemon=True)
        self.root, self.peak, self.done = root, 0.0, threading.Event()

    def tree(self) -> list[int]:
        kids: dict[int, list[int]] = {}
        for p in filter(str.isdigit, os.listdir("/proc")):
            try:
                ppid = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(p))
            except (OSError, IndexError, ValueError):
                pass
        out = [self.root]
        for pid in out:
            out += kids.get(pid, [])
        return out

    def run(self):
        while not self.done.is_set():
            total = 0
            for pid in self.tree():
                try:
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1])
                except OSError:
                    pass
            self.peak = max(self.peak, total / 1024)
            self.done.wait(0.2)


def start(server: str, out: Path, rep: int):
    port = free_port()
    argv, env = server_command(server, port)
    log = open(out / f"{server}-rep{rep}-server.log", "w")
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=os.environ | OFFLINE | env,
                            start_new_session=True)
    sampler = RssSampler(proc.pid)
    sampler.start()
    while probe(port) != 200:
        if proc.poll() is not None:
            raise SystemExit(f"{server} exited with {proc.returncode}; see {log.name}")
        if time.monotonic() - t0 > 600:
            raise SystemExit(f"{server} not healthy after 600 s; see {log.name}")
        time.sleep(0.01)
    return proc, sampler, port, time.monotonic() - t0


def stop(proc: subprocess.Popen):
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def bench(client: str, server: str, port: int, shape: tuple[int, int], conc: int, prompts: int, out: Path,
          tag: str, seed: int) -> dict:
    """One `bench serve` run; returns its result JSON. Every run of a server gets its own seed: runs
    with equal seeds send the same prompts, which prefix caching would then serve from the cache."""
    if client == "vllm":
        cmd = [str(VLLM_VENV / "bin/python"), str(VLLM_CLI), "bench", "serve"]
    else:
        cmd = [str(BIN), "bench", "serve", "--disable-tqdm"]
    cmd += ["--backend", "vllm", "--base-url", f"http://127.0.0.1:{port}", "--model", NAME,
            "--tokenizer", str(HF_DIR), "--dataset-name", "random", "--random-input-len", str(shape[0]),
            "--random-output-len", str(shape[1]), "--num-prompts", str(prompts), "--max-concurrency", str(conc),
            "--ignore-eos", "--seed", str(seed), "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", "50,99", "--save-result", "--result-dir", str(out),
            "--result-filename", f"{tag}.json"]
    # llama-server drops kept-alive connections; vLLM's client then needs one connection per request.
    env = os.environ | OFFLINE | ({"PEER_BENCH_FORCE_CLOSE": "1"} if server == "llama-server" else {})
    with open(out / f"{tag}.log", "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    if rc != 0:
        raise SystemExit(f"{client} bench serve failed against {server}; see {out / tag}.log")
    return json.loads((out / f"{tag}.json").read_text())


def num_prompts(args, conc: int) -> int:
    # Requests per run: every slot filled --prompts-per-slot times, at least --min-prompts.
    return max(args.min_prompts, args.prompts_per_slot * conc)


def version(server: str) -> str:
    try:
        if server.startswith("vllm-rs"):
            return subprocess.run([str(BIN), "--version"], capture_output=True, text=True).stdout.strip()
        if server == "vllm":
            code = "import importlib.metadata as m; print('vllm-cpu', m.version('vllm-cpu'))"
            return subprocess.run([str(VLLM_VENV / "bin/python"), "-c", code], capture_output=True,
                                  text=True).stdout.strip()
        r = subprocess.run([str(LLAMA_SERVER), "--version"], capture_output=True, text=True)
        # The whole line: llama-server prints e.g. "version: 0.6.0-dev (build 0, commit unknown)".
        return "llama.cpp " + (r.stdout + r.stderr).split("version:")[-1].strip().splitlines()[0]
    except OSError as e:
        return f"unknown ({e})"


def run_all(args) -> dict:
    out = args.out
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes]
    runs, starts = [], []
    for rep in range(args.reps):
        k = rep % len(args.servers)
        for server in args.servers[k:] + args.servers[:k]:
            proc, sampler, port, cold = start(server, out, rep)
            print(f"rep {rep} {server}: /health 200 after {cold:.2f} s", flush=True)
            try:
                bench("vllm", server, port, (64, 16), 4, 8, out, f"{server}-rep{rep}-warmup", seed=0)
                seed = 1000 * rep  # the same seeds for every server: the same prompts
                for shape in shapes:
                    for c in args.concurrency:
                        seed += 1
                        tag = f"{server}-rep{rep}-{shape[0]}x{shape[1]}-c{c}"
                        r = bench("vllm", server, port, shape, c, num_prompts(args, c), out, tag, seed)
                        runs.append({"rep": rep, "server": server, "client": "vllm", "shape": list(shape), "c": c,
                                     **{m: r.get(m) for m in METRICS}})
                        print(f"  {tag}: {r['output_throughput']:.1f} output tok/s, TTFT median "
                              f"{r['median_ttft_ms']:.0f} ms, failed {r['failed']}", flush=True)
                if rep == 0 and server.startswith("vllm-rs"):
                    tag = f"{server}-rep0-crosscheck"
                    r = bench("vllm-rs", server, port, shapes[0], 4, num_prompts(args, 4), out, tag, seed=999)
                    runs.append({"rep": rep, "server": server, "client": "vllm-rs", "shape": list(shapes[0]), "c": 4,
                                 **{m: r.get(m) for m in METRICS}})
            finally:
                stop(proc)
                sampler.done.set()
                sampler.join()
            starts.append({"rep": rep, "server": server, "cold_start_s": cold, "peak_rss_mib": sampler.peak})
    return {"runs": runs, "starts": starts}


METRICS = ["completed", "failed", "output_throughput", "median_ttft_ms", "median_tpot_ms", "median_itl_ms"]
LABELS = {"vllm-rs-gguf": "vllm-rs (GGUF Q4_1)", "vllm-rs-gguf-int8": "vllm-rs (GGUF Q4_1, --activation-bits 8)",
          "vllm-rs-hf": "vllm-rs (hf, bf16)",
          "vllm-rs-hf-bf16": "vllm-rs (hf, bf16, --dtype bfloat16)", "vllm": "vLLM-cpu (bf16)",
          "llama-server": "llama-server (GGUF Q4_1)"}
# Which peer each of our servers is compared with: same weights file where possible.
PAIRS = [("vllm-rs-gguf", "llama-server"), ("vllm-rs-gguf-int8", "llama-server"), ("vllm-rs-hf", "vllm"),
         ("vllm-rs-hf-bf16", "vllm"), ("vllm-rs-gguf", "vllm"), ("vllm-rs-gguf-int8", "vllm")]


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, nd=1):
    return "—" if x is None else f"{x:.{nd}f}"


def report(data: dict, args, meta: dict) -> str:
    servers = [s for s in args.servers]
    pairs = [p for p in PAIRS if p[0] in servers and p[1] in servers]
    med = {}
    for r in data["runs"]:
        if r["client"] == "vllm":
            med.setdefault((r["server"], tuple(r["shape"]), r["c"]), []).append(r)
    get = lambda s, shape, c, m: median([r[m] for r in med.get((s, shape, c), [])])  # noqa: E731
    lines = [f"Run {meta['date']}, {args.reps} repetition(s), requests per run max({args.min_prompts}, "
             f"{args.prompts_per_slot}×c), load average before/after "
             f"{meta['load_before']} / {meta['load_after']}; {meta['versions']}.", ""]
    head = ["in×out", "c"] + [f"{LABELS[s]} tok/s" for s in servers] + [f"{LABELS[a]} / {LABELS[b]}" for a, b in pairs]
    lines += ["Output throughput (median, tok/s) and ratios ours / peer:", "", "| " + " | ".join(head) + " |",
              "|" + "---|" * len(head)]
    shapes = sorted({tuple(r["shape"]) for r in data["runs"] if r["client"] == "vllm"})
    for shape in shapes:
        for c in args.concurrency:
            row = [f"{shape[0]}×{shape[1]}", str(c)] + [fmt(get(s, shape, c, "output_throughput")) for s in servers]
            for a, b in pairs:
                x, y = get(a, shape, c, "output_throughput"), get(b, shape, c, "output_throughput")
                row.append(f"{x / y:.2f}×" if x and y else "—")
            lines.append("| " + " | ".join(row) + " |")
    head = ["in×out", "c"] + [f"{LABELS[s]} TTFT / TPOT ms" for s in servers] + \
        [f"TTFT {LABELS[b]} / {LABELS[a]}" for a, b in pairs]
    lines += ["", "Median TTFT and TPOT (ms) and TTFT ratios peer / ours:", "", "| " + " | ".join(head) + " |",
              "|" + "---|" * len(head)]
    for shape in shapes:
        for c in args.concurrency:
            row = [f"{shape[0]}×{shape[1]}", str(c)]
            row += [f"{fmt(get(s, shape, c, 'median_ttft_ms'), 0)} / {fmt(get(s, shape, c, 'median_tpot_ms'))}"
                    for s in servers]
            for a, b in pairs:
                x, y = get(a, shape, c, "median_ttft_ms"), get(b, shape, c, "median_ttft_ms")
                row.append(f"{y / x:.2f}×" if x and y else "—")
            lines.append("| " + " | ".join(row) + " |")
    failed = sum(r["failed"] or 0 for r in data["runs"])
    lines += ["", f"Failed requests over all runs: {failed}.", "",
              "| server | cold start to /health 200 (median) | peak RSS of the process tree (median) |",
              "|---|---|---|"]
    for s in servers:
        st = [x for x in data["starts"] if x["server"] == s]
        lines.append(f"| {LABELS[s]} | {fmt(median([x['cold_start_s'] for x in st]), 2)} s | "
                     f"{fmt(median([x['peak_rss_mib'] for x in st]), 0)} MiB |")
    cross = [r for r in data["runs"] if r["client"] == "vllm-rs"]
    if cross:
        lines += ["", "Client cross-check (same server, rep 0, first shape, c=4): output tok/s by vLLM's "
                  "`vllm bench serve` / by `vllm-rs bench serve`:"]
        for r in cross:
            v = [x for x in data["runs"] if x["client"] == "vllm" and x["server"] == r["server"] and x["rep"] == 0
                 and x["c"] == 4 and x["shape"] == r["shape"]]
            lines.append(f"- {LABELS[r['server']]}: {fmt(v[0]['output_throughput'] if v else None)} / "
                         f"{fmt(r['output_throughput'])} (completed {r['completed']}, failed {r['failed']})")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64])
    p.add_argument("--shapes", nargs="+", default=["128x128", "512x128"])
    p.add_argument("--servers", nargs="+", default=["vllm-rs-gguf", "vllm-rs-hf", "vllm", "llama-server"])
    p.add_argument("--prompts-per-slot", type=int, default=2, help="requests per run = this × concurrency")
    p.add_argument("--min-prompts", type=int, default=8, help="but at least this many requests per run")
    p.add_argument("--out", type=Path, default=TARGET / "scoreboard")
    args = p.parse_args()
    need = [GGUF, HF_DIR, BIN] + ([VLLM_VENV / "bin/python", VLLM_CLI] if "vllm" in args.servers else []) + \
        ([LLAMA_SERVER] if "llama-server" in args.servers else [])
    missing = [str(f) for f in need if not f.exists()]
    if missing:
        sys.exit("missing: " + ", ".join(missing) + " (models: scripts/fetch_test_models.sh; peers: "
                 "/work/shared/PEERS.md)")
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "load_before": f"{os.getloadavg()[0]:.1f}",
            "versions": "; ".join(sorted({version(s) for s in args.servers}))}
    data = run_all(args)
    meta["load_after"] = f"{os.getloadavg()[0]:.1f}"
    (args.out / "scoreboard.json").write_text(json.dumps({"meta": meta, **data}, indent=1))
    md = report(data, args, meta)
    (args.out / "scoreboard.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
