#!/bin/sh
# The Python package's type hints, checked by mypy (pinned in
# python/tests/typecheck-requirements.txt, installed from PyPI into build/venv-typecheck once
# and reused while the list is unchanged): --strict on the planner side (libdcp, _library,
# _structs, planner, loader, _json, _extras, _cli, __main__), the default checks on the torch ops (torch's own types are not
# installed here) and libdcp.megatron (which reads megatron-core's objects untyped). A call with a wrong argument type must be reported, so the hints are not
# decoration. Skips, saying so, where PyPI cannot be reached. Ends with "N passed, M failed".
cd "$(dirname "$0")/.." || exit 1
PYTHON=${PYTHON:-python3}
venv=build/venv-typecheck
requirements=python/tests/typecheck-requirements.txt
skip() {
    echo "skip type check: $1"
    echo "1 skipped"
    echo "0 passed, 0 failed"
    exit 0
}
command -v "$PYTHON" >/dev/null 2>&1 || skip "$PYTHON not found"
if ! cmp -s "$requirements" "$venv/installed" 2>/dev/null; then
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv" >/dev/null 2>&1 || skip "$PYTHON -m venv failed"
    if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check --timeout 20 \
            --retries 1 -r "$requirements" >"$venv/pip.log" 2>&1; then
        skip "cannot install $(cat "$requirements") from PyPI ($(tail -n 1 "$venv/pip.log"))"
    fi
    cp "$requirements" "$venv/installed"
fi
passed=0 failed=0
pass() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }
mypy="$venv/bin/python -m mypy --ignore-missing-imports --cache-dir $venv/mypy-cache"
p=python/libdcp
# shellcheck disable=SC2086
if $mypy --strict $p/__init__.py $p/_library.py $p/_structs.py $p/planner.py $p/loader.py \
    $p/_json.py $p/_extras.py $p/_cli.py $p/__main__.py; then
    pass "mypy --strict: the planner side"
else
    fail "mypy --strict: the planner side"
fi
# shellcheck disable=SC2086
if $mypy $p/ops.py $p/megatron.py; then
    pass "mypy: the torch ops and libdcp.megatron"
else
    fail "mypy: the torch ops and libdcp.megatron"
fi
work=build/typecheck-test
mkdir -p "$work"
cat >"$work/misuse.py" <<'PY'
import libdcp
plan = libdcp.plan([100, 200], ranks="4", max_tokens_per_rank=4096)
seconds: str = plan.step_time(1)
PY
# shellcheck disable=SC2086
if MYPYPATH=python $mypy --strict "$work/misuse.py" >"$work/misuse.out" 2>&1 ||
    ! grep -q 'Argument "ranks" to "plan" has incompatible type "str"; expected "int"' "$work/misuse.out" ||
    ! grep -q 'Incompatible types in assignment (expression has type "float", variable has type "str")' "$work/misuse.out"; then
    fail "mypy reports a wrong argument and a wrong result type ($(cat "$work/misuse.out"))"
else
    pass "mypy reports a wrong argument and a wrong result type"
fi
# PEP 561: a user's type checker reads an installed package's hints only when the package
# ships py.typed. A package found on PYTHONPATH counts as installed (MYPYPATH would read any
# source), so from there, without --ignore-missing-imports, the same misuse must be reported;
# without the marker mypy says "missing library stubs or py.typed marker" instead.
# shellcheck disable=SC2086
if (cd "$work" && PYTHONPATH=../../python ../../$venv/bin/python -m mypy --strict \
        --cache-dir ../../$venv/mypy-cache-installed misuse.py >misuse-installed.out 2>&1) ||
    ! grep -q 'Argument "ranks" to "plan" has incompatible type "str"; expected "int"' \
        "$work/misuse-installed.out"; then
    fail "an installed libdcp is typed: py.typed ($(cat "$work/misuse-installed.out"))"
else
    pass "an installed libdcp is typed: py.typed"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
