#!/bin/sh
# The README's library quick start, extracted verbatim, compiles warning-free as C99 and as C++
# and runs; its dcp-plan examples and its Python quick start print what it shows; the
# integration example (docs/integration.md) builds as documented. Ends with "N passed, M
# failed". Needs build/dcp-plan and build/libdcp.so (make test builds them).
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

# Every `$ build/dcp-plan ...` example of the README prints what the README shows (the plan
# time, which differs run to run, left out): the summary and the rank view line by line, the
# JSON (wrapped in the README) as the same object.
if command -v python3 >/dev/null 2>&1; then
    python3 - README.md "$work" >"$work/examples.out" 2>&1 <<'PY'
import json, re, subprocess, sys
text = open(sys.argv[1]).read()
blocks = re.findall(r"```(?:json)?\n(\$ build/dcp-plan[^\n]*)\n(.*?)```", text, re.S)
assert blocks, "no dcp-plan example found"
for command, shown in blocks:
    got = subprocess.run(command[2:].split(), capture_output=True, text=True, check=True).stdout
    if '--json' in command.split():
        want, have = json.loads("".join(shown.split("\n"))), json.loads(got)
        want.pop("plan_seconds"), have.pop("plan_seconds")
        same = want == have
    else:
        keep = lambda lines: [l for l in lines.splitlines() if not l.startswith("  plan time")]
        same = keep(shown) == keep(got)
    print(f"{'ok  ' if same else 'FAIL'} README example: {command}")
PY
    cat "$work/examples.out"
    passed=$((passed + $(grep -c '^ok ' "$work/examples.out")))
    failed=$((failed + $(grep -c '^FAIL' "$work/examples.out")))
    grep -q '^ok ' "$work/examples.out" || fail "README dcp-plan examples ran"
else
    echo "skip README dcp-plan examples: python3 not found"
fi

# The Python quick start ("## From Python") prints what the README shows after it.
if command -v python3 >/dev/null 2>&1 && [ -f build/libdcp.so ]; then
    awk '/^## From Python/ { section = 1 }
         section && /^```python$/ { inside = 1; next }
         inside && /^```$/ { exit }
         inside { print }' README.md >"$work/quick_start.py"
    awk '/^## From Python/ { section = 1 }
         section && /^prints/ { after = 1 }
         after && /^```$/ { if (inside) exit; inside = 1; next }
         inside { print }' README.md >"$work/quick_start.expected"
    if (cd "$work" && PYTHONPATH=../../python DCP_LIBRARY=../libdcp.so python3 quick_start.py) \
            >"$work/quick_start.out" 2>&1 &&
        [ -s "$work/quick_start.expected" ] && cmp -s "$work/quick_start.out" "$work/quick_start.expected"; then
        pass "Python quick start prints what the README shows"
    else
        fail "Python quick start ($(diff "$work/quick_start.expected" "$work/quick_start.out" | head -5))"
    fi
else
    echo "skip the Python quick start: python3 or build/libdcp.so missing"
fi

# docs/integration.md: the C example builds with its documented command and its arguments are
# the CLI's view of the same batch.
if $CC -std=c99 -O2 examples/attention_args.c -o "$work/attention_args" -lm 2>"$work/args.err" &&
    "$work/attention_args" 5 0 >"$work/args.out" &&
    build/dcp-plan --lognormal 16384,1.0,512,131072,256 --ranks 64 --max-tokens-per-rank 16384 \
        --rank 5 --microbatch 0 >"$work/view.out" &&
    cu=$(sed -n 's/^  cu_seqlens  *//p' "$work/view.out" | tr ' ' ',' | sed 's/,/, /g') &&
    grep -q "cu_seqlens_q = cu_seqlens_kv = \[$cu\]" "$work/args.out" &&
    grep -q "CP group of pool ranks 4-7 (cp 4), rank 1 in it" "$work/args.out"; then
    pass "examples/attention_args.c builds as documented and agrees with dcp-plan --rank"
else
    fail "examples/attention_args.c ($(head -3 "$work/args.err"))"
fi
# Every in-page link of the README and of docs/*.md ("(#anchor)", "(FILE.md#anchor)") names a
# heading that exists there, spelled as GitHub derives anchors (lower case, punctuation but
# hyphens dropped, spaces to hyphens), so the newcomer path's links do not rot when sections move;
# every relative link of those and of bench/*.md ("(PATH)") names a file that exists.
if command -v python3 >/dev/null 2>&1; then
    python3 - README.md docs/*.md bench/*.md >"$work/anchors.out" 2>&1 <<'PY'
import os, re, sys
def anchors(path):
    heads = re.findall(r"^#+ (.*)$", open(path).read(), re.M)
    slug = lambda h: re.sub(r"[^\w\- ]", "", h.lower().replace("`", "")).replace(" ", "-")
    return {slug(h) for h in heads}
bad = 0
for path in sys.argv[1:]:
    for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", open(path).read()):
        where = os.path.normpath(os.path.join(os.path.dirname(path), target)) if target else path
        if not os.path.exists(where) or anchor not in anchors(where):
            bad += 1
            print(f"FAIL {path}: link to {target or ''}#{anchor} names no heading")
    text = re.sub(r"```.*?```", "", open(path).read(), flags=re.S)
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)", text):
        if not re.match(r"[a-z]+:", target) and \
                not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(path), target))):
            print(f"FAIL {path}: link to {target} names no file")
PY
    cat "$work/anchors.out"
    if [ -s "$work/anchors.out" ]; then fail "in-page links"; else pass "every in-page link names a heading, every relative link a file"; fi
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
