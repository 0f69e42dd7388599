#!/usr/bin/env python3
"""Start-up benchmark: time from launching a server process until `GET /health` answers 200.

    python3 scripts/bench_startup.py [--runs N] [--name NAME] -- COMMAND ARGS...

`{port}` in the command is replaced by a free port. Each run launches the command, polls
http://127.0.0.1:{port}/health every 5 ms (one persistent poller, started before the server, so
its own start-up is not counted), records when the port first accepts connections and when
/health first returns 200, then sends SIGTERM and waits for the exit. The same procedure is used
for every engine (vllm-rs serve, llama-server, vllm serve), so the numbers compare.

Prints one line per run and the median; stdlib only.
"""

import argparse
import http.client
import os
import signal
import socket
import statistics
import subprocess
import sys
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def probe(port: int) -> int | None:
    """HTTP status of /health, or None when nothing listens yet."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        c.request("GET", "/health")
        status = c.getresponse().status
        c.close()
        return status
    except (ConnectionError, OSError, http.client.HTTPException):
        return None


def one_run(cmd: list[str], timeout: float) -> tuple[float | None, float]:
    port = free_port()
    argv = [a.replace("{port}", str(port)) for a in cmd]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    listening = None
    try:
        while time.monotonic() - t0 < timeout:
            if proc.poll() is not None:
                raise RuntimeError(f"exited with {proc.returncode}: {' '.join(argv)}")
            status = probe(port)
            now = time.monotonic() - t0
            if status is not None and listening is None:
                listening = now
            if status == 200:
                return listening, now
            time.sleep(0.005)
        raise RuntimeError(f"not healthy after {timeout} s: {' '.join(argv)}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--name", default=None)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        ap.error("give the server command after --")
    name = a.name or os.path.basename(cmd[0])
    ready = []
    for i in range(a.runs):
        listening, healthy = one_run(cmd, a.timeout)
        ready.append(healthy)
        lst = f"{listening:.3f} s" if listening is not None else "-"
        print(f"{name} run {i + 1}: listening {lst}, /health 200 after {healthy:.3f} s", flush=True)
    print(f"{name}: median {statistics.median(ready):.3f} s, min {min(ready):.3f} s, max {max(ready):.3f} s "
          f"over {len(ready)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
