#!/bin/sh
# examples/loader.c end to end: a length file with comments, a CSV header and two samples too
# long for any CP size; the loader drops and names them by line, plans the rest, pairs every
# send with its receive, checks every rank's packed buffer against the exchange, and restores
# the serialized plan. Ends with "N passed, M failed".
cd "$(dirname "$0")/.." || exit 1
loader=build/loader
work=build/loader-test
mkdir -p "$work"
passed=0 failed=0
pass() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }

# 400 lengths from 1 to ~30000 (a fixed sequence, so the run is the same everywhere), with
# 70000 on line 3 and 99999 near the end: above 16 ranks x 4096 tokens
{
    echo "length"
    echo "# comment lines count as lines"
    echo 70000
    awk 'BEGIN { x = 12345; for (i = 0; i < 400; i++) { x = (x * 1103515245 + 12345) % 2147483648;
        print 1 + int(exp((x / 2147483648) * 10.3)) } }'
    echo 99999
} >"$work/lengths.csv"
if "$loader" "$work/lengths.csv" 16 4096 >"$work/out" 2>"$work/err"; then
    pass "loader runs"
else
    fail "loader runs ($(cat "$work/err"))"
fi
grep -q "read 402 samples" "$work/out" && grep -q "dropped 2 that no CP size can hold" "$work/out" &&
    grep -q "dropped line 3 (sample 0): length 70000 > max_cp 16" "$work/out" &&
    grep -q "dropped line 404 (sample 401): length 99999" "$work/out" &&
    pass "oversized samples dropped and named by line" || fail "oversized samples dropped and named by line"
grep -q "planned 400 samples on 16 ranks" "$work/out" && pass "the rest planned" || fail "the rest planned"
sends=$(sed -n 's/^reroute: \([0-9]*\) sends matched one to one.*/\1/p' "$work/out")
[ -n "$sends" ] && [ "$sends" -gt 0 ] && pass "sends matched ($sends)" || fail "sends matched"
grep -q "rows equal to the exchange" "$work/out" && pass "packed buffers equal the exchange" ||
    fail "packed buffers equal the exchange"
grep -q "every sample found in its microbatch and group" "$work/out" && pass "sample locations" ||
    fail "sample locations"
grep -q "restored identically" "$work/out" && pass "plan round trip" || fail "plan round trip"

# nothing fits: one line on stderr, exit 1; bad usage: exit 2
printf '70000\n80000\n' >"$work/none.txt"
"$loader" "$work/none.txt" 16 4096 >/dev/null 2>"$work/err"
[ $? -eq 1 ] && grep -q "no sample fits" "$work/err" && pass "nothing fits" || fail "nothing fits"
"$loader" "$work/none.txt" 0 4096 >/dev/null 2>&1
[ $? -eq 2 ] && pass "bad usage" || fail "bad usage"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
