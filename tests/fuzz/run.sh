#!/bin/sh
# Run each fuzz harness named for SECONDS seconds:
#   BUILD=build sh tests/fuzz/run.sh SECONDS NAME...
# Each runs on a scratch copy of tests/fuzz/corpus/NAME and tests/fuzz/regress/NAME
# in $BUILD/fuzz/work/NAME (the repository's corpus is never written to) and
# prints one line: executions per second and libFuzzer's final coverage
# (cov: edges, ft: features). A crash, leak or timeout fails the run; its input
# is left in $BUILD/fuzz/crash/NAME/ and the log in $BUILD/fuzz/NAME.log.
set -u
BUILD=${BUILD:-build}
secs=$1
shift
dir="$BUILD/fuzz"
status=0
for name in "$@"; do
    work="$dir/work/$name"
    art="$dir/crash/$name"
    log="$dir/$name.log"
    rm -rf "$work"
    mkdir -p "$work" "$art"
    for src in "tests/fuzz/corpus/$name" "tests/fuzz/regress/$name"; do
        [ -d "$src" ] && cp "$src"/* "$work"/ 2>/dev/null
    done
    "$dir/$name" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$art/" "$work" >"$log" 2>&1
    rc=$?
    last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
    cov=$(echo "$last" | sed -nE 's/.*cov: ([0-9]+).*/\1/p')
    ft=$(echo "$last" | sed -nE 's/.*ft: ([0-9]+).*/\1/p')
    eps=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+).*/\1/p' "$log" | tail -n 1)
    runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -n 1)
    if [ $rc -eq 0 ]; then
        echo "fuzz $name: ok, ${runs:-?} runs, ${eps:-?} exec/s, cov: ${cov:-?} ft: ${ft:-?}"
    else
        status=1
        found=$(ls -t "$art" 2>/dev/null | head -n 1)
        echo "fuzz $name: FAILED (exit $rc), ${eps:-?} exec/s, cov: ${cov:-?} ft: ${ft:-?}"
        grep -E '^(==[0-9]+==ERROR|SUMMARY|.*invariant failed)' "$log" | head -n 5
        echo "  input: $art/${found:-?}  log: $log"
        echo "  replay: $dir/$name $art/${found:-?}"
    fi
done
exit $status
