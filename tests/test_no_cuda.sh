#!/bin/sh
# make test without CUDA (issue 36): a user of the header alone has neither nvcc nor the CUDA
# toolkit, and make test must pass there, every CUDA-dependent check saying it skipped and why.
# This runs, on whatever machine, the checks whose behaviour depends on CUDA in that
# configuration: make's CUDA detection pointed at nothing (NVCC and CUDA_HOME overridden in
# MAKEFLAGS, which every make below inherits, those the scripts start included), then
#   - make names what it skips (report-skips) and its test list holds no CUDA program;
#   - tests/test_gpu_round.sh and tests/test_calibrate_benches.sh pass, skipping their CUDA
#     checks with the reason make gives.
# The scripts decide from make's detection, not from which binaries lie in build/, so the
# build folder make test filled serves as it is (the no-CUDA programs are a subset of it: nothing
# is rebuilt); each script works in its own folder under this test's (DCP_TEST_WORK), apart from
# its own run in make test beside this one. Seconds. Ends with "N passed, M failed".
cd "$(dirname "$0")/.." || exit 1
work=build/no-cuda-test
mkdir -p "$work" || exit 1
passed=0 failed=0
pass() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }

hidden=/nonexistent-cuda
MAKEFLAGS="${MAKEFLAGS:+$MAKEFLAGS }NVCC=$hidden/bin/nvcc CUDA_HOME=$hidden"
export MAKEFLAGS
make="make --no-print-directory -s"
reason="nvcc not found (NVCC=$hidden/bin/nvcc); set NVCC or PATH to build them"

if [ "$($make cuda-skip-reason)" = "$reason" ]; then
    pass "make's CUDA detection, pointed at nothing, gives the reason"
else
    fail "make cuda-skip-reason: '$($make cuda-skip-reason)'"
fi
$make report-skips >"$work/skips" 2>&1
if grep -q "^skipped (CUDA): .*build/test_cuda .*: $reason" "$work/skips" &&
    grep -q "^skipped (NCCL): .*: $reason" "$work/skips" &&
    grep -q "^skipped (CPU execution model): " "$work/skips"; then
    pass "make names the CUDA, NCCL and execution-model parts it skips, and why"
else
    fail "report-skips: $(cat "$work/skips")"
fi
# the test runner's list: the CPU programs and scripts, no nvcc build among them
$make -n test >"$work/test-n" 2>&1
runner=$(grep 'tests/run_tests.sh' "$work/test-n")
cuda_programs='test_cuda|header-nvcc|test_nccl_gpu|test_wgmma|-cpu-profiles|-cpu-check'
if [ -n "$runner" ] && ! echo "$runner" | grep -qE "$cuda_programs" &&
    echo "$runner" | grep -q 'build/test_planner ' &&
    ! grep -q "^$hidden/bin/nvcc " "$work/test-n"; then
    pass "make test's list holds no CUDA program and nothing calls nvcc"
else
    fail "make -n test: $(grep -E 'nvcc|run_tests' "$work/test-n" | head -3)"
fi

# the scripts whose checks need CUDA builds: each passes, its CUDA checks skipped with the reason
for script in tests/test_gpu_round.sh tests/test_calibrate_benches.sh; do
    name=$(basename "$script" .sh)
    out=$work/$name.out
    DCP_TEST_WORK=$work/$name sh "$script" >"$out" 2>&1
    status=$?
    if [ "$status" = 0 ] && tail -n 1 "$out" | grep -qE '^[0-9]+ passed, 0 failed$' &&
        grep -qF ": $reason" "$out" && ! grep '^skip ' "$out" | grep -vqF ": $reason"; then
        pass "$script passes without CUDA, skipping its CUDA checks ($(grep -c '^skip ' "$out"))"
    else
        fail "$script without CUDA: exit $status; $(grep -E '^FAIL|^skip|passed' "$out" | head -5)"
    fi
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
