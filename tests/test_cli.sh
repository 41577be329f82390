#!/bin/sh
# dcp-plan end to end: the summary, the JSON object, the SVG, and one-line errors with a
# non-zero exit for every kind of bad input. Ends with "N passed, M failed".
cd "$(dirname "$0")/.." || exit 1
plan=build/dcp-plan
work=build/cli-test
mkdir -p "$work"
passed=0 failed=0

pass() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }

# expect_error NAME EXIT NEEDLE ARGS...: exits with EXIT, prints exactly one stderr line
# containing NEEDLE, and nothing on stdout.
expect_error() {
    name=$1 code=$2 needle=$3
    shift 3
    "$plan" "$@" >"$work/out" 2>"$work/err"
    status=$?
    lines=$(wc -l <"$work/err")
    if [ "$status" -eq "$code" ] && [ "$lines" -eq 1 ] && grep -qF -- "$needle" "$work/err" &&
        [ ! -s "$work/out" ]; then
        pass "$name"
    else
        fail "$name (exit $status, $lines stderr lines: $(cat "$work/err"))"
    fi
}

common="--ranks 16 --max-tokens-per-rank 4096"
# shellcheck disable=SC2086
if "$plan" --lognormal 4096,1.1,1024,8192,256 $common --svg "$work/plan.svg" >"$work/out" &&
    grep -q "efficiency" "$work/out" && grep -q "speed-up over static" "$work/out" &&
    grep -q "cp histogram" "$work/out" && grep -q "plan time" "$work/out"; then
    pass "summary"
else
    fail "summary"
fi
if grep -q "<svg" "$work/plan.svg" && grep -q "<rect" "$work/plan.svg" &&
    grep -q "time (ms)" "$work/plan.svg" && grep -q "</svg>" "$work/plan.svg"; then
    pass "svg timeline"
else
    fail "svg timeline"
fi

# shellcheck disable=SC2086
"$plan" --lognormal 4096,1.1,1024,8192,64 --seed 3 $common --json >"$work/plan.json"
if command -v python3 >/dev/null 2>&1; then
    if python3 - "$work/plan.json" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
plan = json.loads(text)
assert text.count("\n") == 1, "one line"
assert set(plan) == {"ranks", "max_tokens_per_rank", "strategy", "samples", "microbatches",
                     "sync_ranks", "step_seconds", "dag_seconds", "barrier_seconds",
                     "lower_bound_seconds", "efficiency", "dag_efficiency", "barrier_efficiency",
                     "plan_seconds"}, sorted(plan)
assert plan["sync_ranks"] == 16, "default E = D"
assert plan["dag_seconds"] <= plan["step_seconds"] <= plan["barrier_seconds"] * (1 + 1e-12)
assert 0 < plan["dag_efficiency"] <= 1 and 0 < plan["barrier_efficiency"] <= 1
assert plan["ranks"] == 16 and plan["max_tokens_per_rank"] == 4096
assert plan["strategy"] == "dynamic" and plan["samples"] == 64
seen = sorted(s for mb in plan["microbatches"] for g in mb for s in g["samples"])
assert seen == list(range(64)), "every sample exactly once"
for mb in plan["microbatches"]:
    end = 0
    for g in mb:
        assert g["first_rank"] % g["cp"] == 0 and g["first_rank"] >= end
        end = g["first_rank"] + g["cp"]
    assert end <= 16
assert plan["step_seconds"] >= plan["lower_bound_seconds"] > 0
assert 0 < plan["efficiency"] <= 1
PY
    then pass "json schema"; else fail "json schema"; fi
else
    echo "skip json schema: python3 not found"
fi

printf '# lengths\n4096\n9000\n100\n' >"$work/lengths.txt"
printf 'id,seq_len\n0,4096\n1,9000\n2,100\n' >"$work/lengths.csv"
a=$("$plan" --lengths "$work/lengths.txt" $common --json | sed 's/"plan_seconds":[^}]*//')
b=$("$plan" --lengths "$work/lengths.csv" $common --json | sed 's/"plan_seconds":[^}]*//')
if [ -n "$a" ] && [ "$a" = "$b" ]; then pass "text and csv files agree"; else fail "text and csv files agree"; fi
for strategy in static greedy; do
    if "$plan" --lengths "$work/lengths.txt" $common --strategy $strategy --json |
        grep -q "\"strategy\":\"$strategy\""; then
        pass "strategy $strategy"
    else
        fail "strategy $strategy"
    fi
done

# --rank/--microbatch: the view's keys, and over a group's ranks each valid position of each
# sample appears exactly once
view_args="--lognormal 3000,1.2,100,30000,40 --seed 7 --ranks 8 --max-tokens-per-rank 4096"
# shellcheck disable=SC2086
"$plan" $view_args --json >"$work/view-plan.json"
for r in 0 1 2 3 4 5 6 7; do
    # shellcheck disable=SC2086
    "$plan" $view_args --rank $r --microbatch 0 --json >"$work/view-$r.json" || fail "view rank $r"
done
# shellcheck disable=SC2086
if "$plan" $view_args --rank 3 --microbatch 0 | grep -q "local rows:"; then
    pass "view summary"
else
    fail "view summary"
fi
if command -v python3 >/dev/null 2>&1; then
    if python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
plan = json.load(open(f"{work}/view-plan.json"))
views = [json.load(open(f"{work}/view-{r}.json")) for r in range(8)]
keys = {"rank", "microbatch", "first_rank", "cp", "rank_in_group", "samples", "cu_seqlens",
        "cu_seqlens_padded", "local_offsets", "max_seqlen", "local_tokens", "positions"}
for v in views:
    assert keys <= set(v), sorted(keys - set(v))
    assert len(v["positions"]) == v["local_tokens"] == v["local_offsets"][-1]
    assert v["cu_seqlens_padded"][-1] == v["cp"] * v["local_tokens"]
for group in plan["microbatches"][0]:
    members = views[group["first_rank"]:group["first_rank"] + group["cp"]]
    assert all(m["samples"] == group["samples"] for m in members)
    for i, s in enumerate(group["samples"]):
        length = members[0]["cu_seqlens"][i + 1] - members[0]["cu_seqlens"][i]
        held = []
        for m in members:
            lo, hi = m["local_offsets"][i], m["local_offsets"][i + 1]
            held += [p for p in m["positions"][lo:hi] if p >= 0]
        assert sorted(held) == list(range(length)), (s, len(held), length)
PY
    then pass "views cover each sample once"; else fail "views cover each sample once"; fi
else
    echo "skip views cover each sample once: python3 not found"
fi

# sums beyond 32 bits: three samples of 2^31 - 1 tokens plan and report their tokens
printf '2147483647\n2147483647\n2147483647\n' >"$work/huge.txt"
if "$plan" --lengths "$work/huge.txt" --ranks 4 --max-tokens-per-rank 2147483647 |
    grep -q "6442450941 valid tokens"; then
    pass "sums beyond 32 bits"
else
    fail "sums beyond 32 bits"
fi

: >"$work/empty.txt"
printf '10\n0\n' >"$work/zero.txt"
printf '10\n-3\n' >"$work/negative.txt"
printf '10\nten\n' >"$work/word.txt"
printf '4294967296\n' >"$work/overflow.txt"
printf '70000\n' >"$work/long.txt"
expect_error "empty input" 2 "empty input" --lengths "$work/empty.txt" $common
expect_error "zero length" 2 "line 2: length 0 must be >= 1" --lengths "$work/zero.txt" $common
expect_error "negative length" 2 "length -3 must be >= 1" --lengths "$work/negative.txt" $common
expect_error "non-numeric length" 2 "not a positive integer" --lengths "$work/word.txt" $common
expect_error "length beyond 32 bits" 2 "exceeds the maximum" --lengths "$work/overflow.txt" $common
expect_error "missing file" 2 "cannot open" --lengths "$work/none.txt" $common
expect_error "length above max_cp x M" 1 "sample 0 has length 70000 > max_cp 16 x max_tokens_per_rank 4096" \
    --lengths "$work/long.txt" $common
expect_error "min_cp not a power of two" 1 "min_cp must be a power of two" \
    --lengths "$work/lengths.txt" $common --min-cp 3
expect_error "max_cp not a power of two" 1 "max_cp must be a power of two" \
    --lengths "$work/lengths.txt" $common --max-cp 12
expect_error "max_cp above ranks" 1 "max_cp 32 exceeds ranks 16" \
    --lengths "$work/lengths.txt" $common --max-cp 32
expect_error "sync ranks not dividing" 1 "sync_ranks must be a power of two dividing ranks 16" \
    --lengths "$work/lengths.txt" $common --sync-ranks 32
expect_error "sync ranks zero" 2 "--sync-ranks must be >= 1" \
    --lengths "$work/lengths.txt" $common --sync-ranks 0
expect_error "ranks zero" 2 "--ranks must be >= 1" --lengths "$work/lengths.txt" \
    --ranks 0 --max-tokens-per-rank 4096
expect_error "ranks negative" 1 "ranks must be in [1," --lengths "$work/lengths.txt" \
    --ranks -4 --max-tokens-per-rank 4096
expect_error "max tokens zero" 2 "--max-tokens-per-rank must be >= 1" \
    --lengths "$work/lengths.txt" --ranks 4 --max-tokens-per-rank 0
expect_error "ranks not a number" 2 "--ranks expects an integer, got '4x'" \
    --lengths "$work/lengths.txt" --ranks 4x --max-tokens-per-rank 4096
expect_error "ranks beyond 32 bits" 2 "--ranks must be in" \
    --lengths "$work/lengths.txt" --ranks 99999999999 --max-tokens-per-rank 4096
expect_error "bad strategy" 2 "--strategy must be dynamic, static or greedy" \
    --lengths "$work/lengths.txt" $common --strategy best
expect_error "bad coefficient" 2 "--attn-coeff expects a finite number" \
    --lengths "$work/lengths.txt" $common --attn-coeff nan
expect_error "negative coefficient" 1 "attn_coeff must be finite and >= 0" \
    --lengths "$work/lengths.txt" $common --attn-coeff -1
expect_error "both sources" 2 "exactly one of --lengths" \
    --lengths "$work/lengths.txt" --lognormal 1,1,1,1,1 $common
expect_error "no source" 2 "exactly one of --lengths" $common
expect_error "bad lognormal" 2 "--lognormal expects MEAN,SIGMA,MIN,MAX,COUNT" \
    --lognormal 4096,1.1 $common
expect_error "lognormal count zero" 2 "--lognormal COUNT must be in [1," \
    --lognormal 4096,1.1,1,10,0 $common
expect_error "lognormal min above max" 2 "min 10 <= max 5" --lognormal 4096,1.1,10,5,8 $common
expect_error "unknown option" 2 "unknown option --frobnicate" --frobnicate 1 $common
expect_error "missing value" 2 "--ranks needs a value" --lengths "$work/lengths.txt" --ranks
expect_error "rank without microbatch" 2 "--rank and --microbatch go together" \
    --lengths "$work/lengths.txt" $common --rank 1
expect_error "rank out of range" 2 "rank 16 outside [0, 16)" \
    --lengths "$work/lengths.txt" $common --rank 16 --microbatch 0
expect_error "microbatch out of range" 2 "microbatch 9 outside" \
    --lengths "$work/lengths.txt" $common --rank 0 --microbatch 9

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
