#!/bin/sh
# Runs the given test programs under COUNT seeds: DCP_TEST_SEED = FIRST, FIRST + 1, ...
# (FIRST from SEED_FIRST, default 1), each pass through tests/run_tests.sh. Every program
# prints the seed in force: the CPU tests shift their fixed seeds by it, the GPU tests use it
# instead of the clock. Each seed's full output goes to $SEED_LOGS/seed-N.log (default
# build/seeds); one line per seed is shown, and the last line is "N seeds passed, M failed".
# Exits non-zero when any seed failed, naming the seeds so that each repeats.
#   usage: sh tests/run_seeds.sh COUNT PROGRAM...
count=$1
shift
first=${SEED_FIRST:-1}
logs=${SEED_LOGS:-build/seeds}
here=$(dirname "$0")
mkdir -p "$logs" || exit 1
passed=0 failed=0 failing=""
seed=$first
while [ "$seed" -lt $((first + count)) ]; do
    log="$logs/seed-$seed.log"
    if DCP_TEST_SEED=$seed sh "$here/run_tests.sh" "$@" >"$log" 2>&1; then
        passed=$((passed + 1))
        echo "seed $seed: $(tail -n 1 "$log")"
    else
        failed=$((failed + 1))
        failing="$failing $seed"
        echo "seed $seed: $(tail -n 1 "$log")  FAILED (log: $log)"
        grep -E '^FAIL |check failed|failed:|rule failed' "$log" | head -n 20 | sed 's/^/    /'
    fi
    seed=$((seed + 1))
done
[ -n "$failing" ] && echo "failing seeds:$failing (repeat one with DCP_TEST_SEED=S PROGRAM)"
echo "$passed seeds passed, $failed failed"
[ "$failed" -eq 0 ]
