#!/usr/bin/env bash
# The CUDA checks that need a GPU (issue 31), in two halves so that the GPU machine builds nothing:
#
#   scripts/gpu_check.sh prepare    here (no GPU needed): builds the release binaries with
#                                   --features cuda into target/gpu-check/ (stripped, a few MB)
#   scripts/gpu_check.sh run        on the GPU machine, with target/gpu-check carried there:
#                                   writes everything under $OUT (default ./gpu-check-out)
#
# With the device tool: run prepare, then one call
#   run(command="bash scripts/gpu_check.sh run", carry=["target/gpu-check"], timeout_s=300)
#
# `run` records nvidia-smi, runs the kernel check program (every CUDA kernel against the CPU
# scalar reference on random data, and batch invariance: $OUT/kernels/results.tsv and
# summary.txt), the models on the CUDA backend (crates/cuda/tests/models.rs: tiny checkpoints
# against transformers' goldens and the CPU's bits), and checks that `vllm-rs generate
# --device cuda` gives `--device cpu`'s output and that `--device auto` takes the GPU.
# Exit status: 0 when every check passed.
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$REPO/target/gpu-check

prepare() {
  set -e
  cd "$REPO"
  cargo build --release -p vllm-rs --features cuda
  cargo build --release -p vllm-rs-cuda --features cuda --example cuda_check
  local models
  models=$(cargo test --release -p vllm-rs-cuda --features cuda --test models --no-run --message-format=json |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
  rm -rf "$DIR"
  mkdir -p "$DIR/tokenizer"
  cp target/release/vllm-rs target/release/examples/cuda_check "$DIR/"
  cp "$models" "$DIR/models"
  strip "$DIR/vllm-rs" "$DIR/cuda_check" "$DIR/models"
  # SmolLM2's tokenizer for the tiny Llama's generate check (the fetched models are not carried).
  cp "${VLLM_RS_TEST_MODELS:-$REPO/.models}"/hf/smollm2-135m-instruct-from-q4_1/tokenizer*.json "$DIR/tokenizer/"
  git rev-parse HEAD >"$DIR/commit"
  du -sh "$DIR"
  echo "gpu_check: prepared $DIR (carry it: carry=[\"target/gpu-check\"])"
}

run() {
  local out=${OUT:-$REPO/gpu-check-out} rc=0
  mkdir -p "$out"
  [ -x "$DIR/cuda_check" ] || {
    echo "gpu_check: $DIR/cuda_check missing: run 'scripts/gpu_check.sh prepare' first and carry target/gpu-check" >&2
    exit 1
  }
  cp "$DIR/commit" "$out/commit" 2>/dev/null || true
  nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed" >>"$out/nvidia-smi.txt"
  # 1. Every kernel against the CPU reference.
  "$DIR/cuda_check" "$out/kernels" >"$out/kernels.log" 2>&1 || rc=1
  tail -n 5 "$out/kernels.log"
  # The emulator gives the CPU's bits everywhere (scripts/cuda_emulator.sh); so should the GPU.
  if grep -q " 0 not bit-identical" "$out/kernels/summary.txt" 2>/dev/null; then
    echo "kernels: bit-identical to the CPU reference everywhere"
  else
    echo "kernels: NOTE: some values differ in their bits from the CPU's (results.tsv, bits_differ)" >&2
  fi
  # 2. The models on the CUDA backend.
  VLLM_RS_REPO=$REPO "$DIR/models" --test-threads 1 --nocapture >"$out/models.log" 2>&1 || rc=1
  grep -E "^test |GPU ids|test result" "$out/models.log"
  # 3. The binary on the GPU: --device cuda gives --device cpu's output; --device auto takes the GPU.
  local gen=("$DIR/vllm-rs" generate --model "$REPO/tests/data/tiny/llama" --tokenizer "$DIR/tokenizer"
    --prompt "a b c d e" --max-tokens 8 --temperature 0 --ignore-eos --json)
  for device in cpu cuda auto; do
    "${gen[@]}" --device $device >"$out/generate-$device.json" 2>"$out/generate-$device.log" || rc=1
  done
  if cmp -s "$out/generate-cpu.json" "$out/generate-cuda.json" && grep -q "running on cuda" "$out/generate-cuda.log"; then
    echo "device cuda: the CPU's output (ok)"
  else
    echo "device cuda: other output than the CPU's, or not on the GPU: see generate-*.json/log" >&2
    rc=1
  fi
  # The K/V cache sized from the GPU's memory after the weights went up at load.
  if grep -E "KV cache sized from the GPU's memory" "$out/generate-cuda.log"; then
    echo "device cuda: K/V cache sized from the GPU's memory (ok)"
  else
    echo "device cuda: no K/V sizing from the GPU's memory, see generate-cuda.log" >&2
    rc=1
  fi
  if grep -q -- "--device auto: running on cuda" "$out/generate-auto.log"; then
    echo "device auto: takes the GPU and says so (ok)"
  else
    echo "device auto: no log line naming the GPU, see generate-auto.log" >&2
    rc=1
  fi
  echo "gpu_check: $([ $rc -eq 0 ] && echo PASSED || echo FAILED); results in $out"
  exit $rc
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  *)
    echo "usage: scripts/gpu_check.sh prepare|run" >&2
    exit 2
    ;;
esac
