#!/bin/sh
# One input, one plan, whichever front end (issue 30): every case of tests/frontend_cases.c is
# planned through the C API, through dcp-plan (--save-plan) and through Python (Plan.to_bytes),
# and the three serialized plans must be equal byte for byte. The cases cover what the front
# ends used to read differently: 0 as every field's default, the all-zero and the partial cost
# model, the default seed. Also: every dcp_config field is a dcp-plan option and a Python
# keyword of the same name. Ends with "N passed, M failed".
cd "$(dirname "$0")/.." || exit 1
work=build/frontends-test
rm -rf "$work" && mkdir -p "$work/c" "$work/cli"
passed=0 failed=0
pass() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }
tab=$(printf '\t')

if ! build/frontend-cases "$work/c" >"$work/cases.tsv"; then
    fail "the C side plans every case"
    echo "$passed passed, $failed failed"
    exit 1
fi
while IFS="$tab" read -r name cli python; do
    # shellcheck disable=SC2086
    if build/dcp-plan $cli --save-plan "$work/cli/$name.plan" >/dev/null 2>"$work/err" &&
        cmp -s "$work/c/$name.plan" "$work/cli/$name.plan"; then
        pass "$name: C and dcp-plan give one plan ($cli)"
    else
        fail "$name: C and dcp-plan differ ($cli; $(head -c 300 "$work/err"))"
    fi
done <"$work/cases.tsv"

PYTHON=${PYTHON:-python3}
if command -v "$PYTHON" >/dev/null 2>&1; then
    PYTHONPATH=python DCP_LIBRARY=build/libdcp.so "$PYTHON" - "$work" >"$work/python.out" 2>&1 <<'PY'
import json, sys
import libdcp
work = sys.argv[1]
for line in open(f"{work}/cases.tsv"):
    name, cli, python = line.rstrip("\n").split("\t")
    kwargs = json.loads(python)
    mean, sigma, low, high, count = kwargs.pop("lognormal")
    seed = {"seed": kwargs.pop("seed")} if "seed" in kwargs else {}
    lengths = libdcp.lognormal_lengths(mean, sigma, low, high, count, **seed)
    ranks, tokens = kwargs.pop("ranks"), kwargs.pop("max_tokens_per_rank")
    ours = libdcp.plan(lengths, ranks, tokens, **kwargs).to_bytes()
    same = ours == open(f"{work}/c/{name}.plan", "rb").read()
    print(f"{'ok  ' if same else 'FAIL'} {name}: C and Python give one plan ({python})")
PY
    cat "$work/python.out"
    passed=$((passed + $(grep -c '^ok ' "$work/python.out")))
    failed=$((failed + $(grep -c '^FAIL' "$work/python.out")))
    if ! grep -q "^ok " "$work/python.out"; then fail "the Python side ran"; fi
    # every dcp_config field (Python's CONFIG_FIELDS, built from the ctypes mirror the layout
    # test checks against C) is a dcp-plan option of the same name, and the reverse
    build/dcp-plan --help >"$work/help"
    if PYTHONPATH=python "$PYTHON" - "$work/help" <<'PY'
import re, sys
import libdcp
options = set(re.findall(r"^  --([a-z0-9-]+)", open(sys.argv[1]).read(), re.M))
fields = {f.replace("_", "-") for f in libdcp.CONFIG_FIELDS if f != "cost"}
fields |= {"attn-coeff", "linear-coeff", "ring-step-cost"}
missing = sorted(fields - options)
assert not missing, f"dcp_config fields without a dcp-plan option: {missing}"
others = {"lengths", "lognormal", "seed", "json", "svg", "compare", "save-plan", "rank",
          "microbatch", "version", "help", "output"}
unknown = sorted(options - fields - others)
assert not unknown, f"dcp-plan options that are no dcp_config field: {unknown}"
PY
    then pass "every dcp_config field is a dcp-plan option and a Python keyword"; else fail "every dcp_config field is a dcp-plan option and a Python keyword"; fi
else
    echo "skip the Python side: $PYTHON not found"
    echo "1 skipped"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
