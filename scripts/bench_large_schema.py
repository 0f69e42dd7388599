#!/usr/bin/env python3
"""Time to first token with a large JSON schema (issue 30): a strict 50-property object schema
(strings, bounded integers, numbers, booleans, enums, arrays, nested objects) against the same
chat request unconstrained, through `vllm-rs serve`; the grammar's compile time read from the
server's debug log ("grammar compiled in X ms"), so it shows separately.

  python3 scripts/bench_large_schema.py MODEL [--binary target/release/vllm-rs] [--runs 7]

Each run sends one unconstrained and one constrained streaming request (alternating, a fresh
prompt each so no prefix is cached, max_tokens 8, greedy) and measures the time from sending to
the first content token. Prints medians as a Markdown table.
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def schema(n=50):
    kinds = [
        {"type": "string"},
        {"type": "integer", "minimum": 0, "maximum": 1000},
        {"type": "number"},
        {"type": "boolean"},
        {"type": "string", "enum": ["red", "green", "blue", "black"]},
        {"type": "array", "items": {"type": "string"}, "maxItems": 4},
        {"type": "object", "additionalProperties": False, "required": ["id", "label"],
         "properties": {"id": {"type": "integer"}, "label": {"type": "string"}}},
    ]
    props = {f"field_{i:02d}": kinds[i % len(kinds)] for i in range(n)}
    return {"type": "object", "additionalProperties": False, "required": list(props), "properties": props}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ttft(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            delta = json.loads(line[6:])["choices"][0]["delta"]
            if delta.get("content"):
                return time.perf_counter() - start
    raise RuntimeError("no content token")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--binary", default=os.path.join(REPO, "target", "release", "vllm-rs"))
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args()
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    server = subprocess.Popen([a.binary, "--log-level", "debug", "serve", a.model, "--port", str(port),
                               "--max-model-len", "4096", "--no-enable-prefix-caching"], stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if urllib.request.urlopen(base + "/health", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.1)
        url = base + "/v1/chat/completions"
        fmt = {"type": "json_schema", "json_schema": {"name": "record", "strict": True, "schema": schema()}}
        times = {"plain": [], "schema": []}
        for i in range(a.runs + 1):  # the first round warms up
            for mode in ("plain", "schema"):
                prompt = f"Record {i} ({mode}): fill in every field for a made-up person."
                body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 8, "temperature": 0,
                        "stream": True}
                if mode == "schema":
                    body["response_format"] = fmt
                t = ttft(url, body)
                if i:
                    times[mode].append(t)
        log.flush()
        compiles = [float(m) for m in re.findall(r"grammar compiled in ([0-9.]+) ms", open(log.name).read())][1:]
    finally:
        server.terminate()
        server.wait()
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(f"model {os.path.basename(a.model)}, {a.runs} runs, load {os.getloadavg()[0]:.2f}")
    print("| TTFT unconstrained (ms) | TTFT 50-property schema (ms) | difference (ms) | grammar compile (ms) |")
    print("|---:|---:|---:|---:|")
    print(f"| {med['plain']:.1f} | {med['schema']:.1f} | {med['schema'] - med['plain']:.1f} | "
          f"{statistics.median(compiles):.1f} |")


if __name__ == "__main__":
    sys.exit(main())
