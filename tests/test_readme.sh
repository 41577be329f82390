#!/bin/sh
# The README's library quick start, extracted verbatim, compiles warning-free as C99 and as C++
# and runs. Ends with "N passed, M failed".
cd "$(dirname "$0")/.." || exit 1
work=build/readme-test
mkdir -p "$work"
passed=0 failed=0
pass() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }
CC=${CC:-cc}
CXX=${CXX:-c++}

# the first ```c block after the "## Library quick start" heading
awk '/^## Library quick start/ { section = 1 }
     section && /^```c$/ { inside = 1; next }
     inside && /^```$/ { exit }
     inside { print }' README.md >"$work/quick_start.c"
if grep -q "dcp_config_init()" "$work/quick_start.c" && grep -q "int main" "$work/quick_start.c"; then
    pass "quick start extracted"
else
    fail "quick start extracted"
fi
if $CC -std=c99 -Wall -Wextra -Wpedantic -Werror -I. "$work/quick_start.c" -o "$work/quick_start_c" -lm \
    2>"$work/c.err"; then
    pass "quick start as C99 -Wall -Wextra -Wpedantic -Werror"
else
    fail "quick start as C99: $(head -3 "$work/c.err")"
fi
if $CXX -x c++ -Wall -Wextra -Werror -I. "$work/quick_start.c" -o "$work/quick_start_cxx" -lm \
    2>"$work/cxx.err"; then
    pass "quick start as C++ -Wall -Wextra -Werror"
else
    fail "quick start as C++: $(head -3 "$work/cxx.err")"
fi
# both run and print the same plan
if [ -x "$work/quick_start_c" ] && [ -x "$work/quick_start_cxx" ] &&
    "$work/quick_start_c" >"$work/c.out" && "$work/quick_start_cxx" >"$work/cxx.out" &&
    grep -q "^step [0-9.]* ms, efficiency" "$work/c.out" && cmp -s "$work/c.out" "$work/cxx.out"; then
    pass "quick start runs, C and C++ agree"
else
    fail "quick start runs, C and C++ agree"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
