#!/bin/sh
# dcp.h is generated from src/ (tools/amalgamate.py): it must be what src/ makes now, so that an
# edit of src/ without `make amalgamate` fails here, and an edit of dcp.h itself (lost at the
# next generation) too. The generator's own refusals are checked on a copy of src/: a part
# marker it does not know, and a skeleton without its parts line. Ends with "N passed, M failed".
cd "$(dirname "$0")/.." || exit 1
passed=0 failed=0
pass() { echo "ok   $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; failed=$((failed + 1)); }
python=${PYTHON3:-python3}

if output=$($python tools/amalgamate.py --check 2>&1); then
    pass "dcp.h is what src/ makes"
else
    fail "dcp.h is stale: $output"
fi

# A copy of the tree's generator inputs, to plant faults in.
work=build/amalgamation-test
rm -rf "$work" && mkdir -p "$work/tools" && cp -r src "$work/" && cp tools/amalgamate.py "$work/tools/"
cp dcp.h "$work/dcp.h"
if $python "$work/tools/amalgamate.py" --check >/dev/null 2>&1; then
    pass "the copy checks clean"
else
    fail "the copy of src/ does not make dcp.h"
fi
first_part=$(ls "$work"/src/*.h | head -n 1)
printf '/* one line more */\n' >>"$first_part"
if $python "$work/tools/amalgamate.py" --check >/dev/null 2>&1; then
    fail "an edit of $(basename "$first_part") went unnoticed"
else
    pass "an edit of src/ without amalgamate fails the check"
fi
printf '//@@ nonsense\n' >>"$first_part"
if $python "$work/tools/amalgamate.py" 2>"$work/err" >/dev/null; then
    fail "an unknown part marker was accepted"
elif grep -q 'unknown or repeated part marker' "$work/err"; then
    pass "an unknown part marker is refused, naming it"
else
    fail "an unknown part marker: $(cat "$work/err")"
fi
sed -i '/^@@ parts/d' "$work/src/dcp.h.in"
cp src/*.h "$work/src/"
if $python "$work/tools/amalgamate.py" 2>"$work/err" >/dev/null; then
    fail "a skeleton without its parts line was accepted"
elif grep -q "expected '@@ parts" "$work/err"; then
    pass "a skeleton without its parts line is refused"
else
    fail "a skeleton without its parts line: $(cat "$work/err")"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
