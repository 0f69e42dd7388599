#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 60), after replaying the regression inputs.
# Exit 1 on a crash, a timeout or an out-of-memory input; the input is left in
# fuzz/artifacts/<target>/. Installs cargo-fuzz when it is missing. Builds with the nightly
# toolchain where there is one, else with the stable one told to accept nightly flags
# (RUSTC_BOOTSTRAP=1: libFuzzer's instrumentation and AddressSanitizer need them).
#
#   bash fuzz/run_all.sh                # CI's short run: a fixed seed, so CI repeats what passed here
#   bash fuzz/run_all.sh 3600 random    # the long run BENCHMARKS.md records, a new seed each time
#   FUZZ_TARGETS="gguf safetensors" bash fuzz/run_all.sh 60   # some targets only
#
# Each target fuzzes corpus/<target>/ (grown by the runs, not committed) seeded with
# regressions/<target>/ (committed, read only). Final stats per target go to
# artifacts/<target>/stats.txt.
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-60}"
seed_mode="${2:-fixed}"
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz"
    cargo install --locked cargo-fuzz
fi
if cargo +nightly --version >/dev/null 2>&1; then
    fuzz=(cargo +nightly fuzz)
else
    echo "fuzz: no nightly toolchain; building with the stable one (RUSTC_BOOTSTRAP=1)"
    export RUSTC_BOOTSTRAP=1
    fuzz=(cargo fuzz)
fi
"${fuzz[@]}" build -O
targets="${FUZZ_TARGETS:-$("${fuzz[@]}" list)}"
for t in $targets; do
    mkdir -p "corpus/$t" "artifacts/$t"
    seeds=()
    if [ -d "regressions/$t" ]; then
        if ! "${fuzz[@]}" run -O "$t" regressions/"$t"/* -- -runs=0 >"artifacts/$t/replay.txt" 2>&1; then
            echo "$t: a regression input fails again:"
            tail -40 "artifacts/$t/replay.txt"
            exit 1
        fi
        seeds=("regressions/$t")
    fi
    seed=12345
    [ "$seed_mode" = random ] && seed=0  # libFuzzer: 0 picks one
    echo "== $t: ${secs} s (seed $seed)"
    "${fuzz[@]}" run -O "$t" "corpus/$t" "${seeds[@]}" -- -seed="$seed" -max_total_time="$secs" \
        -rss_limit_mb=4096 -timeout=10 -print_final_stats=1 >"artifacts/$t/log.txt" 2>&1 || true
    grep -E '^(stat::|#[0-9]+ +DONE|INFO: Seed|==[0-9]+==|SUMMARY)' "artifacts/$t/log.txt" | tee "artifacts/$t/stats.txt"
    if ls "artifacts/$t"/crash-* "artifacts/$t"/timeout-* "artifacts/$t"/oom-* "artifacts/$t"/leak-* >/dev/null 2>&1; then
        echo "$t: found a failing input:"
        ls "artifacts/$t"
        tail -40 "artifacts/$t/log.txt"
        exit 1
    fi
    if ! grep -q 'Done [0-9]* runs\|stat::number_of_executed_units' "artifacts/$t/log.txt"; then
        echo "$t: the fuzzer did not finish its run:"
        tail -40 "artifacts/$t/log.txt"
        exit 1
    fi
done
