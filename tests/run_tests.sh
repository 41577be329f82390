#!/bin/sh
# Runs every test program given on the command line, shows their output, and ends with the
# plain line "N passed, M failed" summed over all of them (skipped tests are counted apart).
# A program that crashes or exits non-zero without a summary line counts as one failure.
# DCP_TEST_NO_SKIPS=1 (on a machine with a GPU: every GPU test must run) makes any skipped
# test a failure.
passed=0 failed=0 skipped=0 skips=""
for program in "$@"; do
    echo "== $program"
    output=$("$program" 2>&1)
    status=$?
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
