#!/bin/sh
# Runs a test program of the CPU execution model under two device profiles at once (each run
# is one core's work: the model runs a grid on the thread that launched it), shows both outputs
# one after the other, and ends with the lines tests/run_tests.sh reads: "N skipped" and
# "N passed, M failed" summed over both. Exits non-zero when either run failed.
#   usage: sh tests/cuda_cpu/profiles.sh PROGRAM [PROFILE[=NAME,...]...]
# (default profiles: sm_80 sm_89). PROFILE=NAME,... runs under that profile only the tests the
# NAMEs select (the program's own selection, tests/test.h: NAME the tests whose names contain
# it, -NAME all but those), so that a program whose cases do not depend on the profile can
# share its cases out between the two instead of running all twice.
program=$1
shift
[ $# -gt 0 ] || set -- sm_80 sm_89
dir=$(mktemp -d) || exit 1
for spec in "$@"; do
    profile=${spec%%=*}
    names=
    [ "$profile" = "$spec" ] || names=$(echo "${spec#*=}" | tr ',' ' ')
    # shellcheck disable=SC2086 # the names are separate arguments
    (DCP_CUDA_CPU_DEVICE=$profile "$program" $names >"$dir/$profile" 2>&1; echo $? >"$dir/$profile.status") &
done
wait
passed=0 failed=0 skipped=0 status=0
for spec in "$@"; do
    profile=${spec%%=*}
    echo "-- $program on $spec"
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
