#!/bin/sh
# bench/plan_vs_exec's host path end to end without a GPU: --dry-run lets the model's
# durations stand in for the measured ones, so for every workload and strategy the predicted
# and "measured" step times must agree and the rankings must be the same; bad flags must be
# refused before any GPU work. The bench is built only where nvcc is (make's CUDA part):
# where make finds no nvcc (`make cuda-skip-reason` says why) the test is skipped with that
# reason, as make skips the bench. Ends with "N passed, M failed". DCP_TEST_WORK: its folder
# (tests/test_no_cuda.sh runs it beside make test's own run).
cd "$(dirname "$0")/.." || exit 1
bench=build/plan_vs_exec
work=${DCP_TEST_WORK:-build/calibrate-benches-test}
passed=0 failed=0
pass() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }

no_cuda=$(make --no-print-directory -s cuda-skip-reason)
[ -z "$no_cuda" ] && [ ! -x "$bench" ] && no_cuda="no $bench (make tests builds it)"
if [ -n "$no_cuda" ]; then
    echo "skip $bench --dry-run (predicted = executed, flags refused): $no_cuda"
    echo "1 skipped"
    echo "0 passed, 0 failed"
    exit 0
fi
mkdir -p "$work"

# Workload rows: "name strategy groups K | predicted measured error | rank mb"
check_dry_run() {
    name=$1
    shift
    if ! "$bench" --dry-run "$@" >"$work/out" 2>"$work/err"; then
        fail "$name: exit status $? ($(head -1 "$work/err"))"
        return
    fi
    rows=$(grep -cE ' (static|greedy|dynamic) +[0-9]+ +[0-9]+ \|' "$work/out")
    exact=$(grep -E ' (static|greedy|dynamic) +[0-9]+ +[0-9]+ \|' "$work/out" |
        grep -cE '[+-]0\.00% \| +0\.00% +0\.00%$')
    same=$(grep -c 'ranking predicted .*: same$' "$work/out")
    workloads=$(grep -c 'ranking predicted' "$work/out")
    if [ "$rows" -gt 0 ] && [ "$rows" -eq "$exact" ] && [ "$rows" -eq $((3 * workloads)) ] &&
        [ "$same" -eq "$workloads" ]; then
        pass "$name ($workloads workloads, $rows plans: predicted = executed)"
    else
        fail "$name ($rows rows, $exact exact, $same of $workloads rankings same)"
        cat "$work/out"
    fi
}

check_dry_run "dry run, E = 1"
check_dry_run "dry run, E = D" --sync-ranks 0
check_dry_run "dry run, E = 2, pasted cost flags" --sync-ranks 2 --attn-coeff 1e-11 \
    --linear-coeff 2e-7 --ring-step-cost 3e-5

# refused before the device is touched, with a message naming the flag or value
expect_refused() {
    name=$1 needle=$2
    shift 2
    "$bench" "$@" >"$work/out" 2>"$work/err"
    status=$?
    if [ "$status" -eq 2 ] && grep -qF -- "$needle" "$work/err"; then
        pass "$name"
    else
        fail "$name (exit $status: $(head -1 "$work/err"))"
    fi
}
expect_refused "cost out of range" "attn_coeff = 1e-200" --dry-run --attn-coeff 1e-200
expect_refused "unknown workload" "--workload nope" --dry-run --workload nope
expect_refused "head dim the kernels lack" "--head-dim 96" --dry-run --head-dim 96
expect_refused "bad sync ranks" "--sync-ranks" --dry-run --sync-ranks -1

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
