#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 60), after replaying the regression inputs.
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`). Exit 1 on a crash;
# the crashing input is left in fuzz/artifacts/<target>/.
#
#   bash fuzz/run_all.sh          # CI's short run
#   bash fuzz/run_all.sh 3600     # the long run BENCHMARKS.md records
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-60}"
cargo +nightly fuzz build -O
for t in $(cargo +nightly fuzz list); do
    mkdir -p "corpus/$t"
    if [ -d "regressions/$t" ]; then
        cargo +nightly fuzz run -O "$t" regressions/"$t"/* -- -runs=0
    fi
    echo "== $t: ${secs} s"
    cargo +nightly fuzz run -O "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=4096 -timeout=10 \
        -print_final_stats=1 2>&1 | grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|==|SUMMARY|thread)' || true
    if ls "artifacts/$t"/crash-* "artifacts/$t"/timeout-* "artifacts/$t"/oom-* >/dev/null 2>&1; then
        echo "$t: found a failing input:"; ls "artifacts/$t"
        exit 1
    fi
done
