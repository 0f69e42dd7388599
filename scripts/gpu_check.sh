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
# summary.txt), and checks that `vllm-rs --device cuda` finds the GPU and still refuses to
# start, naming what is missing, while `--device auto` says it takes the CPU.
# Exit status: 0 when every check passed.
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$REPO/target/gpu-check

prepare() {
  set -e
  cd "$REPO"
  cargo build --release -p vllm-rs --features cuda
  cargo build --release -p vllm-rs-cuda --features cuda --example cuda_check
  rm -rf "$DIR"
  mkdir -p "$DIR"
  cp target/release/vllm-rs target/release/examples/cuda_check "$DIR/"
  strip "$DIR/vllm-rs" "$DIR/cuda_check"
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
  # 2. The binary sees the GPU, refuses --device cuda saying why, and --device auto takes the CPU.
  local log=$out/device.log
  "$DIR/vllm-rs" generate --model /nonexistent --prompt x --device cuda >"$log" 2>&1
  local cuda_rc=$?
  if [ $cuda_rc -ne 0 ] && grep -q "does not run on a GPU yet" "$log" && grep -q "the GPU is there" "$log"; then
    echo "device cuda: refused, naming the GPU (ok)"
  else
    echo "device cuda: unexpected (exit $cuda_rc), see device.log" >&2
    rc=1
  fi
  "$DIR/vllm-rs" generate --model /nonexistent --prompt x --device auto >>"$log" 2>&1
  if grep -q -- "--device auto: .* found; running on the CPU" "$log"; then
    echo "device auto: the GPU is found, the CPU is used, and the log says so (ok)"
  else
    echo "device auto: no log line naming the GPU, see device.log" >&2
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
