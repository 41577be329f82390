#!/bin/sh
# Runs a test program of the CPU execution model under two device profiles at once (each run
# is one core's work: the model runs a grid on the thread that launched it), shows both outputs
# one after the other, and ends with the lines tests/run_tests.sh reads: "N skipped" and
# "N passed, M failed" summed over both. Exits non-zero when either run failed.
#   usage: sh tests/cuda_cpu/profiles.sh PROGRAM [PROFILE...]   (default profiles: sm_80 sm_89)
program=$1
shift
[ $# -gt 0 ] || set -- sm_80 sm_89
dir=$(mktemp -d) || exit 1
for profile in "$@"; do
    (DCP_CUDA_CPU_DEVICE=$profile "$program" >"$dir/$profile" 2>&1; echo $? >"$dir/$profile.status") &
done
wait
passed=0 failed=0 skipped=0 status=0
for profile in "$@"; do
    echo "-- $program on $profile"
    grep -Ev '^[0-9]+ passed, [0-9]+ failed$|^[0-9]+ skipped$' "$dir/$profile"
    summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$dir/$profile" | tail -n 1)
    skips=$(grep -E '^[0-9]+ skipped$' "$dir/$profile" | tail -n 1 | cut -d' ' -f1)
    if [ -z "$summary" ]; then
        echo "$program on $profile: exited with status $(cat "$dir/$profile.status") and no summary line"
        failed=$((failed + 1))
    else
        passed=$((passed + $(echo "$summary" | cut -d' ' -f1)))
        failed=$((failed + $(echo "$summary" | cut -d' ' -f3)))
    fi
    skipped=$((skipped + ${skips:-0}))
    [ "$(cat "$dir/$profile.status")" -eq 0 ] || status=1
done
rm -rf "$dir"
[ "$skipped" -gt 0 ] && echo "$skipped skipped"
echo "$passed passed, $failed failed"
[ "$status" -eq 0 ] && [ "$failed" -eq 0 ]
