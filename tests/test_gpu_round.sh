#!/bin/sh
# The GPU round's dry run (make gpu-round DRY_RUN=1; tests/gpu_round.py) in make test, so that
# the round cannot rot between GPU draws: every step's commands are wired (make can build what
# they run, the binaries and scripts accept their arguments, the Python benches find every
# function they call in build/libdcp_cuda.so), the summary marks every step "not run: no GPU",
# and two calls (STEPS=1-4, then 5-8) merge into one summary. Then the checks that the dry run
# can fail: a build folder without the binaries, a bench argument out of range, a STEPS outside
# 1-8, a real run without a GPU; and a real run's machinery on a stand-in nvidia-smi. Runs
# after make test's builds; a few seconds. Where make finds no CUDA (nvcc or the toolkit
# missing: `make cuda-skip-reason` says why), the round skips the commands of CUDA builds and
# so does this test, naming the reason, as make test skips the CUDA programs. Ends with
# "N passed, M failed" (and "K skipped" before it when some were). DCP_TEST_WORK: its folder
# (relative to the checkout; tests/test_no_cuda.sh runs it beside make test's own run).
cd "$(dirname "$0")/.." || exit 1
work=${DCP_TEST_WORK:-build/gpu-round-test}
passed=0 failed=0 skipped=0
pass() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }
skip() { skipped=$((skipped + 1)); echo "skip $1: $no_cuda"; }
rm -rf "$work"
mkdir -p "$work/empty" || exit 1
make="make --no-print-directory -s"
round="$make gpu-round DRY_RUN=1 OUT=$work/round.md GPU_ROUND_LOGS=$work/logs"
no_cuda=$($make cuda-skip-reason)

if $round STEPS=1-4 >"$work/first.out" 2>&1 && $round STEPS=5-8 >"$work/second.out" 2>&1; then
    pass "make gpu-round DRY_RUN=1, STEPS=1-4 then STEPS=5-8: exit 0"
else
    fail "make gpu-round DRY_RUN=1: exit status $? (wiring failed)"
    cat "$work/first.out" "$work/second.out"
fi
# every step wired; without CUDA, steps 6 and 8 (the benches, the calibration) skipped and
# step 7 wired but for the CUDA library's ops, each naming the reason
wired=$(grep -cE '^\| [1-8] \| .* \| not run: no GPU; wired \| ' "$work/round.md")
if [ -z "$no_cuda" ] && [ "$wired" = 8 ]; then
    pass "the merged summary marks all 8 steps 'not run: no GPU; wired'"
elif [ -n "$no_cuda" ] && [ "$wired" = 5 ] &&
     grep -qF "| not run: no GPU; skipped: $no_cuda |" "$work/round.md" &&
     grep -q "^| 6 | benches: .* | not run: no GPU; skipped: " "$work/round.md" &&
     grep -q "^| 7 | .* | not run: no GPU; wired (1 of 2 commands skipped: " "$work/round.md" &&
     grep -q "^| 8 | calibration, .* | not run: no GPU; skipped: " "$work/round.md"; then
    pass "without CUDA: steps 1-5 wired, 6 and 8 skipped, 7 wired but its CUDA command, saying why"
else
    fail "$wired of 8 steps 'not run: no GPU; wired' in $work/round.md (no CUDA: '$no_cuda')"
    grep -E '^\| [1-8] \|' "$work/round.md"
fi
if [ -s "$work/round.json" ] &&
   tar -tzf "$work/round-logs.tar.gz" | grep -q '1-1-the-GPU-tests-alone.*\.log'; then
    pass "the JSON and the logs' .tar.gz lie beside the summary"
else
    fail "no $work/round.json or no logs in $work/round-logs.tar.gz"
fi
if [ -n "$no_cuda" ]; then
    skip "the Python benches' dry runs find their entry points in libdcp_cuda.so"
elif grep -q 'exports all [0-9]* functions called' "$work/logs/6-2-"*.log &&
   grep -q 'exports all [0-9]* functions called' "$work/logs/6-4-"*.log; then
    pass "the Python benches' dry runs find their entry points in libdcp_cuda.so"
else
    fail "the Python benches' dry runs: $(cat "$work/logs/6-2-"*.log "$work/logs/6-4-"*.log)"
fi

# the planted faults: each must fail the dry run (or refuse the arguments), naming the cause
GPU_ROUND_GPU_TESTS="build/test_cuda" python3 tests/gpu_round.py --dry-run --steps 6,8 \
    --build "$work/empty" --out "$work/broken.md" --logs "$work/broken-logs" >/dev/null 2>&1
status=$?
broken=$(grep -c 'wiring FAILED' "$work/broken.md" 2>/dev/null)
if [ "$status" = 1 ] && grep -q '^| 6 | .* wiring FAILED' "$work/broken.md" &&
   grep -q '^| 8 | .* wiring FAILED' "$work/broken.md"; then
    pass "a build folder without the binaries fails steps 6 and 8 ($broken lines say why)"
else
    fail "a build folder without the binaries: exit $status, $broken lines 'wiring FAILED'"
fi
python3 tests/gpu_round.py --merge "$work/round.json" "$work/broken.json" \
    --out "$work/merged.md" >/dev/null 2>&1
calls=$(grep -c '^| `make gpu-round' "$work/merged.md" 2>/dev/null)
if grep -q '^| 6 | .* wiring FAILED' "$work/merged.md" &&
   grep -q '^| 5 | .* not run: no GPU; wired' "$work/merged.md" && [ "$calls" = 3 ]; then
    pass "--merge: each step from the latest of 3 calls that ran it"
else
    fail "--merge: $calls calls; $(grep -E '^\| [1-8] \|' "$work/merged.md" | tr '\n' ' ')"
fi
# expect_refused NAME NEEDLE COMMAND...: exit status 2, NEEDLE in what it printed to stderr
expect_refused() {
    name=$1 needle=$2
    shift 2
    "$@" >/dev/null 2>"$work/err"
    status=$?
    if [ "$status" = 2 ] && grep -qF -- "$needle" "$work/err"; then
        pass "$name"
    else
        fail "$name (exit $status: $(tail -n 1 "$work/err"))"
    fi
}
for bench in build/attention_bench build/kernels_bench; do
    if [ -n "$no_cuda" ]; then
        skip "$bench --repeat 0 refused before any device work"
    else
        expect_refused "$bench --repeat 0 refused before any device work" \
            "got '0'" "$bench" --repeat 0
    fi
done
for script in attention_bench kernels_bench; do
    expect_refused "bench/$script.py --repeat 0 refused" "at least 1, got 0" \
        python3 "bench/$script.py" --repeat 0 --dry-run
done
expect_refused "STEPS=2-9 refused" "STEPS: '2-9' is outside 1-8" \
    python3 tests/gpu_round.py --dry-run --steps 2-9 --out "$work/bad.md"
if ! nvidia-smi -L 2>/dev/null | grep -q GPU; then
    expect_refused "a real run without a GPU refuses" "no GPU (nvidia-smi lists none)" \
        python3 tests/gpu_round.py --steps 4 --out "$work/real.md"
    [ -e "$work/real.md" ] && fail "a real run without a GPU wrote $work/real.md"
fi

# A real run's machinery on a stand-in GPU (an nvidia-smi that lists one): the build runs into
# its time limit and is killed, the round goes on to step 8, whose calibration "passes" (the
# bench finds no device, says so and exits 0: its output is the figure) and whose two
# plan_vs_exec commands fail for want of the fitted flags; the peak memory is nvidia-smi's.
mkdir -p "$work/fake-gpu"
cat >"$work/fake-gpu/nvidia-smi" <<'END'
#!/bin/sh
case "$*" in
    -L) echo "GPU 0: Stand-in GPU (UUID: GPU-0)" ;;
    *memory.used*) echo 1234 ;;
    *--query-gpu*) echo "Stand-in GPU, 0.0, 81559 MiB, 9.0" ;;
    *) echo "| NVIDIA-SMI 0.0    Driver Version: 0.0    CUDA Version: 13.0 |" ;;
esac
END
chmod +x "$work/fake-gpu/nvidia-smi"
if [ -n "$no_cuda" ]; then
    skip "on a stand-in GPU: the build killed at its limit, step 8 run and judged (build/calibrate)"
else
    start=$(date +%s)
    # (CUDA_VISIBLE_DEVICES empty: on a machine with a real GPU the calibration must not run)
    PATH="$PWD/$work/fake-gpu:$PATH" CUDA_VISIBLE_DEVICES= GPU_ROUND_GPU_TESTS=build/test_cuda \
        python3 tests/gpu_round.py --steps 8 --make 'sleep 30; true' --build-limit 1 \
        --out "$work/stand-in.md" --logs "$work/stand-in-logs" >/dev/null 2>&1
    status=$? seconds=$(($(date +%s) - start))
    md=$work/stand-in.md
    if [ "$status" = 1 ] && [ "$seconds" -lt 20 ] && grep -q 'timeout: killed at 1 s' "$md" &&
       grep -q '^| 8 | .* | FAIL (2 of 3 commands) |' "$md" &&
       grep -q '^| 8.1 | calibrate | pass | .* | 1234 | 8-1-calibrate.log |' "$md" &&
       grep -q 'no fitted dcp-plan flags' "$md" && grep -q '^no CUDA device: skipped' "$md" &&
       grep -q '^| device | Stand-in GPU |' "$md"; then
        pass "on a stand-in GPU: the build killed at its limit, step 8 run and judged ($seconds s)"
    else
        fail "on a stand-in GPU: exit $status after $seconds s; see $md"
    fi
fi
# TIME_BUDGET: 47 s, of which 15 are kept for the summary; the build killed at its 3 s leaves
# 29, under the 30 a longer command needs to start: step 8 waits for the next call, named
PATH="$PWD/$work/fake-gpu:$PATH" CUDA_VISIBLE_DEVICES= GPU_ROUND_GPU_TESTS=build/test_cuda \
    python3 tests/gpu_round.py --steps 8 --make 'sleep 30; true' --build-limit 3 --time-budget 47 \
    --out "$work/budget.md" --logs "$work/budget-logs" >"$work/budget.out" 2>&1
status=$?
if [ "$status" = 0 ] && grep -q 'out of time: STEPS=8.1,8.2,8.3 not run' "$work/budget.out" &&
   grep -q '^| 8 | .* | not run yet |' "$work/budget.md" &&
   grep -q 'Not run yet: `make gpu-round STEPS=4,1,6,7,8,2,5,3` runs the rest' \
       "$work/budget.md"; then
    pass "TIME_BUDGET: what does not fit is left for the next call, named"
else
    fail "TIME_BUDGET: exit $status; $(cat "$work/budget.out")"
fi

[ "$skipped" -gt 0 ] && echo "$skipped skipped"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
