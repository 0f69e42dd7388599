#!/usr/bin/env bash
# Sourced by the benchmark scripts: `wait_healthy PORT LOG [SECONDS]` waits until the server on
# PORT answers GET /health (default at most 300 s), else prints LOG and exits 1.
wait_healthy() {
  local port=$1 log=$2 seconds=${3:-300} i
  for ((i = 0; i < seconds * 10; i++)); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "server on port $port not healthy after ${seconds} s; log:" >&2
  cat "$log" >&2
  exit 1
}
