#!/usr/bin/env python3
"""Soak test for `vllm-rs serve` (not in CI): hours of mixed traffic on loopback.

C clients (default 32) send completion and chat requests with random prompt lengths, random
max_tokens, random stop strings and logprobs, streaming or not; a share of them (default 20 %)
hang up at a random point. Every --restart-every seconds the server gets SIGTERM while traffic
goes on, must exit 0, and is started again. Every --sample-every seconds the script prints the
server's RSS, open file descriptors, KV-cache usage and running requests, and the p50/p99
latency of the requests that finished in that interval.

It fails (exit 1) when a request that should have succeeded did not (anything but a deliberate
hang-up or a refusal while the server restarts), when a shutdown does not exit 0, or when RSS
grows by more than --rss-slack-mib between the first sample after warm-up and the last sample of
one server's life.

Standard library only. Traffic goes to 127.0.0.1 only; every loop stops at the deadline.

    python3 scripts/soak.py --duration 3600            # the full run
    python3 scripts/soak.py --duration 600 --restart-every 300
"""

import argparse
import http.client
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

WORDS = ("the cat sat on a mat while rain fell over quiet hills and rivers ran to the sea "
         "one two three four five six seven eight nine ten story model server token").split()
STOPS = [".", "\n", " the", ",", "!", " and", "ing"]


def parse_args():
    here = os.path.dirname(os.path.abspath(__file__))
    models = os.environ.get("VLLM_RS_TEST_MODELS", os.path.join(here, "..", ".models"))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default=os.path.join(here, "..", "target", "debug", "vllm-rs"))
    p.add_argument("--model", default=os.path.join(
        models, "gguf", "smollm2-135m-instruct-q4_1", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("--server-args", default="--max-model-len 2048 --kv-cache-memory 256MiB",
                   help="extra flags for vllm-rs serve")
    p.add_argument("--duration", type=float, default=3600, help="seconds of traffic (default 3600)")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--disconnect-rate", type=float, default=0.2)
    p.add_argument("--restart-every", type=float, default=600, help="seconds between SIGTERM/restart (0: never)")
    p.add_argument("--sample-every", type=float, default=60)
    p.add_argument("--warmup", type=float, default=60, help="seconds after each start before RSS counts")
    p.add_argument("--rss-slack-mib", type=float, default=64)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write the samples and the summary here as JSON")
    return p.parse_args()


class Server:
    """One `vllm-rs serve` process."""

    def __init__(self, args):
        cmd = [args.binary, "serve", args.model, "--host", "127.0.0.1", "--port", "0"] + args.server_args.split()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.addr = None
        self.log_tail = []
        ready = threading.Event()

        def pump():
            for line in self.proc.stderr:
                self.log_tail = (self.log_tail + [line.rstrip()])[-50:]
                if self.addr is None and "listening on http://" in line:
                    self.addr = line.split("listening on http://", 1)[1].split()[0]
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(60) or self.addr is None:
            self.proc.kill()
            sys.exit("the server did not start:\n" + "\n".join(self.log_tail))
        self.host, port = self.addr.rsplit(":", 1)
        self.port = int(port)
        self.started = time.time()
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        sys.exit("the server did not become healthy:\n" + "\n".join(self.log_tail))

    def get(self, path):
        c = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read().decode()
        finally:
            c.close()

    def sample(self):
        pid = self.proc.pid
        rss = 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        kv = running = None
        try:
            _, text = self.get("/metrics")
            for line in text.splitlines():
                if line.startswith("vllm:kv_cache_usage_perc{"):
                    kv = float(line.rsplit(" ", 1)[1])
                elif line.startswith("vllm:num_requests_running{"):
                    running = float(line.rsplit(" ", 1)[1])
        except OSError:
            pass
        return {"rss_mib": rss / 2**20, "fds": fds, "kv_usage": kv, "running": running}

    def stop(self):
        """SIGTERM; (exit code, seconds to exit)."""
        t0 = time.time()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = "killed after 60 s"
        return code, time.time() - t0


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.latencies = []  # this interval's successful requests
        self.counts = {"ok": 0, "hung_up": 0, "refused_while_restarting": 0, "failed": 0}
        self.failures = []

    def add(self, kind, latency=None, why=None):
        with self.lock:
            self.counts[kind] += 1
            if latency is not None:
                self.latencies.append(latency)
            if why and len(self.failures) < 50:
                self.failures.append(why)

    def take_latencies(self):
        with self.lock:
            out, self.latencies = self.latencies, []
            return out


def random_request(rng, max_tokens):
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 400)))
    chat = rng.random() < 0.5
    body = {"max_tokens": rng.randint(1, max_tokens), "stream": rng.random() < 0.6}
    if rng.random() < 0.5:
        body["temperature"] = 0
    if rng.random() < 0.3:
        body["stop"] = rng.sample(STOPS, rng.randint(1, 3))
    if chat:
        body["messages"] = [{"role": "user", "content": words}]
        if rng.random() < 0.3:
            body["logprobs"] = True
            body["top_logprobs"] = rng.randint(0, 5)
        return "/v1/chat/completions", body
    body["prompt"] = words
    if rng.random() < 0.3:
        body["logprobs"] = rng.randint(0, 5)
    return "/v1/completions", body


def one_request(server, rng, stats, args, restarting):
    path, body = random_request(rng, args.max_tokens)
    hang_up = rng.random() < args.disconnect_rate
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {server.addr}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode()
    t0 = time.time()
    try:
        s = socket.create_connection((server.host, server.port), timeout=120)
    except OSError as e:
        stats.add("refused_while_restarting" if restarting.is_set() else "failed", why=f"connect: {e}")
        if restarting.is_set():
            time.sleep(0.2)
        return
    with s:
        try:
            if hang_up and rng.random() < 0.25:
                s.sendall(head + data[: rng.randint(0, len(data))])  # mid-body
                stats.add("hung_up")
                return
            s.sendall(head + data)
            limit = rng.randint(0, 4000) if hang_up else None
            raw = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                raw += chunk
                if limit is not None and len(raw) >= limit:
                    stats.add("hung_up")
                    return
        except OSError as e:
            why = f"{path}: {e}"
            stats.add("refused_while_restarting" if restarting.is_set() else "failed", why=why)
            return
    if hang_up:
        stats.add("hung_up")  # the response was shorter than the hang-up point
        return
    text = raw.decode(errors="replace")
    status_line = text.split("\r\n", 1)[0]
    if (not raw or status_line.startswith("HTTP/1.1 503")) and restarting.is_set():
        stats.add("refused_while_restarting")
        return
    ok = status_line.startswith("HTTP/1.1 200") and ("finish_reason\":\"" in text) and "\"abort\"" not in text
    if body["stream"]:
        ok = ok and "data: [DONE]" in text
    if ok:
        stats.add("ok", latency=time.time() - t0)
    else:
        stats.add("failed", why=f"{path} {json.dumps(body)[:200]} -> {text[:300]}")


def main():
    args = parse_args()
    rng = random.Random(args.seed)
    stats = Stats()
    restarting = threading.Event()
    holder = {"server": Server(args)}
    deadline = time.time() + args.duration
    print(f"server at {holder['server'].addr}; {args.concurrency} clients for {args.duration:.0f} s", flush=True)

    def client(i):
        crng = random.Random(rng.random() + i)
        while time.time() < deadline:
            one_request(holder["server"], crng, stats, args, restarting)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.concurrency)]
    for t in threads:
        t.start()

    samples, lives, shutdowns = [], [[]], []
    next_sample = time.time() + args.sample_every
    next_restart = time.time() + args.restart_every if args.restart_every > 0 else float("inf")
    print(f"{'t_s':>6} {'rss_mib':>8} {'fds':>5} {'kv':>6} {'run':>4} {'done':>5} {'p50_s':>6} {'p99_s':>6}"
          f" {'ok':>6} {'hung':>5} {'restart':>7} {'failed':>6}", flush=True)
    t_start = time.time()
    while time.time() < deadline:
        time.sleep(0.2)
        now = time.time()
        if now >= next_sample:
            next_sample += args.sample_every
            srv = holder["server"]
            s = srv.sample()
            lat = sorted(stats.take_latencies())
            s.update({
                "t_s": round(now - t_start), "since_start_s": now - srv.started, "done": len(lat),
                "p50_s": statistics.median(lat) if lat else None,
                "p99_s": lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else None,
                **dict(stats.counts),
            })
            samples.append(s)
            lives[-1].append(s)
            fmt = lambda v, f: format(v, f) if v is not None else "-"  # noqa: E731
            print(f"{s['t_s']:>6} {s['rss_mib']:>8.1f} {s['fds']:>5} {fmt(s['kv_usage'], '>6.3f')} "
                  f"{fmt(s['running'], '>4.0f')} {s['done']:>5} {fmt(s['p50_s'], '>6.2f')} {fmt(s['p99_s'], '>6.2f')} "
                  f"{s['ok']:>6} {s['hung_up']:>5} {s['refused_while_restarting']:>7} {s['failed']:>6}", flush=True)
        if now >= next_restart and now < deadline - 30:
            next_restart += args.restart_every
            restarting.set()
            code, took = holder["server"].stop()
            shutdowns.append({"exit": code, "seconds": round(took, 2)})
            print(f"SIGTERM: exit {code} after {took:.2f} s; restarting", flush=True)
            holder["server"] = Server(args)
            lives.append([])
            time.sleep(1)
            restarting.clear()
    for t in threads:
        t.join(150)
    code, took = holder["server"].stop()
    shutdowns.append({"exit": code, "seconds": round(took, 2)})

    problems = []
    if stats.counts["failed"]:
        problems.append(f"{stats.counts['failed']} requests failed: " + "\n  ".join(stats.failures[:10]))
    bad = [s for s in shutdowns if s["exit"] != 0]
    if bad:
        problems.append(f"shutdowns not exiting 0: {bad}")
    for i, life in enumerate(lives):
        warm = [s for s in life if s["since_start_s"] >= args.warmup]
        if len(warm) >= 2 and warm[-1]["rss_mib"] - warm[0]["rss_mib"] > args.rss_slack_mib:
            problems.append(f"server {i}: RSS grew {warm[0]['rss_mib']:.0f} -> {warm[-1]['rss_mib']:.0f} MiB")
    summary = {"counts": stats.counts, "shutdowns": shutdowns, "problems": problems, "args": vars(args)}
    print(json.dumps({k: summary[k] for k in ("counts", "shutdowns", "problems")}, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"samples": samples, **summary}, f, indent=1)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
