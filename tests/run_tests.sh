#!/bin/sh
# Runs every test program given on the command line, DCP_TEST_JOBS at a time (default: one per
# core), shows each one's output whole and in the order given (what it prints does not depend
# on which finished first), and ends with the plain line "N passed, M failed" summed over all
# of them (skipped tests are counted apart). A program that crashes or exits non-zero without
# a summary line counts as one failure. DCP_TEST_NO_SKIPS=1 (on a machine with a GPU: every
# GPU test must run) makes any skipped test a failure. DCP_TEST_TIMES=FILE writes each
# program's seconds there (tab-separated; make test: build/test-times.tsv), to find the slow.
jobs=${DCP_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
case $jobs in '' | *[!0-9]* | 0) echo "DCP_TEST_JOBS must be a positive integer, not '$jobs'"; exit 2 ;; esac
logs=$(mktemp -d "${TMPDIR:-/tmp}/dcp-tests.XXXXXX") || exit 2
launcher=
# When we stop early (Ctrl-C, a TERM from a time limit), the launcher and the programs still
# running (the shell and the program of K in $logs/K.pid) and their children stop with us.
cleanup() {
    if [ -n "$launcher" ]; then
        kill "$launcher" 2>/dev/null
        for pid_file in "$logs"/*.pid; do
            [ -f "$pid_file" ] || continue
            read -r wrapper pid <"$pid_file"
            kill "$wrapper" 2>/dev/null
            pkill -P "$pid" 2>/dev/null
            kill "$pid" 2>/dev/null
        done
    fi
    rm -rf "$logs"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The launcher: program K's output goes to $logs/K.out, then its status and seconds to
# $logs/K.done (written last, under another name first, so that its presence means complete).
index=0
for program in "$@"; do
    index=$((index + 1))
    printf '%d %s\n' "$index" "$program"
done | xargs -P "$jobs" -L 1 sh -c '
    start=$(date +%s)
    "$2" >"$0/$1.out" 2>&1 &
    echo "$$ $!" >"$0/$1.pid"
    wait $!
    status=$?
    rm -f "$0/$1.pid"
    printf "%s %s\n" "$status" "$(( $(date +%s) - start ))" >"$0/$1.tmp"
    mv "$0/$1.tmp" "$0/$1.done"' "$logs" &
launcher=$!

passed=0 failed=0 skipped=0 skips=""
[ -n "${DCP_TEST_TIMES:-}" ] && : >"$DCP_TEST_TIMES"
index=0
for program in "$@"; do
    index=$((index + 1))
    while [ ! -f "$logs/$index.done" ]; do
        if ! kill -0 "$launcher" 2>/dev/null && [ ! -f "$logs/$index.done" ]; then
            echo "$program: the launcher stopped before it ran"
            printf '1 0\n' >"$logs/$index.done"
            break
        fi
        sleep 0.2
    done
    read -r status seconds <"$logs/$index.done"
    [ -n "${DCP_TEST_TIMES:-}" ] && printf '%s\t%s\n' "$seconds" "$program" >>"$DCP_TEST_TIMES"
    echo "== $program"
    output=$(cat "$logs/$index.out" 2>/dev/null)
    printf '%s\n' "$output"
    summary=$(printf '%s\n' "$output" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    skips_here=$(printf '%s\n' "$output" | grep -E '^[0-9]+ skipped$' | tail -n 1 | cut -d' ' -f1)
    listed=$(printf '%s\n' "$output" | grep '^skip ' | sed "s|^skip |  $program: |")
    skips="$skips$listed
"
    unlisted=$((${skips_here:-0} - $(printf '%s' "$listed" | grep -c .)))
    [ "$unlisted" -gt 0 ] && skips="$skips  $program: $unlisted skipped (its output above says which)
"
    if [ -z "$summary" ]; then
        echo "$program: exited with status $status and no summary line"
        failed=$((failed + 1))
        continue
    fi
    p=$(echo "$summary" | cut -d' ' -f1)
    f=$(echo "$summary" | cut -d' ' -f3)
    passed=$((passed + p))
    failed=$((failed + f))
    skipped=$((skipped + ${skips_here:-0}))
    if [ "$status" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "$program: exited with status $status"
        failed=$((failed + 1))
    fi
done
wait "$launcher" 2>/dev/null
launcher=
echo "== total"
if [ "$skipped" -gt 0 ]; then
    echo "$skipped skipped:"
    printf '%s' "$skips" | grep -v '^$'
fi
if [ "$skipped" -gt 0 ] && [ "${DCP_TEST_NO_SKIPS:-0}" = 1 ]; then
    echo "DCP_TEST_NO_SKIPS=1: $skipped skipped tests count as failures"
    failed=$((failed + skipped))
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
