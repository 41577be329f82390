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
expect_error "length above max_cp x M" 1 "long.txt line 1: sample 0 has length 70000 > max_cp 16 x max_tokens_per_rank 4096" \
    --lengths "$work/long.txt" $common
expect_error "min_cp not a power of two" 2 "min_cp must be a power of two" \
    --lengths "$work/lengths.txt" $common --min-cp 3
expect_error "max_cp not a power of two" 2 "max_cp must be a power of two" \
    --lengths "$work/lengths.txt" $common --max-cp 12
expect_error "max_cp above ranks" 2 "max_cp 32 exceeds ranks 16" \
    --lengths "$work/lengths.txt" $common --max-cp 32
expect_error "sync ranks not dividing" 2 "sync_ranks must be a power of two dividing ranks 16" \
    --lengths "$work/lengths.txt" $common --sync-ranks 32
expect_error "sync ranks zero" 2 "--sync-ranks must be in [1, 1048576], got 0" \
    --lengths "$work/lengths.txt" $common --sync-ranks 0
expect_error "ranks zero" 2 "--ranks must be in [1, 1048576], got 0" --lengths "$work/lengths.txt" \
    --ranks 0 --max-tokens-per-rank 4096
expect_error "ranks negative" 2 "--ranks must be in [1, 1048576], got -4" --lengths "$work/lengths.txt" \
    --ranks -4 --max-tokens-per-rank 4096
expect_error "max tokens zero" 2 "--max-tokens-per-rank must be in [1, 2147483647], got 0" \
    --lengths "$work/lengths.txt" --ranks 4 --max-tokens-per-rank 0
expect_error "ranks not a number" 2 "--ranks expects an integer, got '4x'" \
    --lengths "$work/lengths.txt" --ranks 4x --max-tokens-per-rank 4096
expect_error "ranks beyond 32 bits" 2 "--ranks must be in [1, 1048576], got 99999999999" \
    --lengths "$work/lengths.txt" --ranks 99999999999 --max-tokens-per-rank 4096
expect_error "bad strategy" 2 "--strategy must be dynamic, static or greedy" \
    --lengths "$work/lengths.txt" $common --strategy best
expect_error "bad coefficient" 2 "--attn-coeff expects a number, got 'nan'" \
    --lengths "$work/lengths.txt" $common --attn-coeff nan
expect_error "negative coefficient" 2 "attn_coeff must be finite and >= 0" \
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

# The contract on every path (issue 15): exit 2 for usage and input, 1 for no plan, one line
# on stderr, nothing on stdout.
printf '100\n200\n' >"$work/two.txt"
expect_error "cost beyond the tick range" 2 "attn_coeff = 1e+300 is outside the supported range: 0 or [1e-100, 1e+100]" \
    --lengths "$work/lengths.txt" $common --attn-coeff 1e300
expect_error "largest finite double reaches the library" 2 "attn_coeff = 1e+308 is outside" \
    --lengths "$work/lengths.txt" $common --attn-coeff 1e308
expect_error "denormal reaches the library" 2 "attn_coeff = 9.99989e-321 is outside" \
    --lengths "$work/lengths.txt" $common --attn-coeff 1e-320
expect_error "tiny coefficient" 2 "attn_coeff = 1e-300 is outside" \
    --lengths "$work/lengths.txt" $common --attn-coeff 1e-300 --linear-coeff 0 --ring-step-cost 0
expect_error "not a finite double" 2 "--attn-coeff must be a finite double" \
    --lengths "$work/lengths.txt" $common --attn-coeff 1e400
expect_error "min-cp zero" 2 "--min-cp must be in [1, 1048576], got 0" \
    --lengths "$work/lengths.txt" $common --min-cp 0
expect_error "max-cp zero" 2 "--max-cp must be in [1, 1048576], got 0" \
    --lengths "$work/lengths.txt" $common --max-cp 0
expect_error "microbatch-multiple zero" 2 "--microbatch-multiple must be in [1, 1048576], got 0" \
    --lengths "$work/lengths.txt" $common --microbatch-multiple 0
expect_error "microbatch-multiple negative" 2 "--microbatch-multiple must be in [1, 1048576], got -2" \
    --lengths "$work/lengths.txt" $common --microbatch-multiple -2
expect_error "ranks minus one" 2 "--ranks must be in [1, 1048576], got -1" \
    --lengths "$work/lengths.txt" --ranks -1 --max-tokens-per-rank 4096
expect_error "unknown flag at the end" 2 "unknown option --jsn" --lengths "$work/lengths.txt" $common --jsn
expect_error "--version is unknown" 2 "unknown option --version" --lengths "$work/lengths.txt" $common --version
expect_error "stray argument" 2 "unexpected argument 'extra'" --lengths "$work/lengths.txt" $common --json extra
expect_error "value is an option" 2 "--lengths needs a value, got the option --ranks" --lengths --ranks 32
expect_error "switch with a value" 2 "--json takes no value" --lengths "$work/lengths.txt" $common --json=1
expect_error "seed with lengths" 2 "--seed applies to --lognormal only" --lengths "$work/lengths.txt" $common --seed 3
expect_error "svg to an unwritable path" 2 "--svg: cannot write /nonexistent/x.svg: No such file or directory" \
    --lognormal 4096,1.1,1024,8192,64 $common --svg /nonexistent/x.svg
expect_error "svg unwritable with json" 2 "cannot write /nonexistent/x.svg" \
    --lognormal 4096,1.1,1024,8192,64 $common --json --svg /nonexistent/x.svg
expect_error "compare needs svg" 2 "--compare draws into --svg" --lengths "$work/lengths.txt" $common --compare
expect_error "missing file says why" 2 "none.txt: No such file or directory" --lengths "$work/none.txt" $common
expect_error "directory as file" 2 "cannot read $work: Is a directory" --lengths "$work" $common
printf 'abc\n200\n' >"$work/abc.txt"
expect_error "first line neither length nor header" 2 "abc.txt: line 1: \"abc\" is neither a length nor a header" \
    --lengths "$work/abc.txt" $common
printf '100\n200\n70000\n' >"$work/long3.txt"
expect_error "oversized sample named by its line" 1 "long3.txt line 3: sample 2 has length 70000" \
    --lengths "$work/long3.txt" $common
printf '# comment\n\n100\n70000\n' >"$work/long4.txt"
expect_error "line counts comments and blanks" 1 "long4.txt line 4: sample 1 has length 70000" \
    --lengths "$work/long4.txt" $common
# the plan failed: no SVG is left behind
rm -f "$work/failed.svg"
expect_error "no svg after a failed plan" 1 "sample 2 has length 70000" \
    --lengths "$work/long3.txt" $common --svg "$work/failed.svg"
if [ ! -e "$work/failed.svg" ]; then pass "failed plan leaves no svg"; else fail "failed plan leaves no svg"; fi

# --flag=value, a UTF-8 BOM, a CSV header naming a column
printf '\357\273\277100\n200\n' >"$work/bom.txt"
printf 'length\n100\n200\n' >"$work/header.txt"
a=$("$plan" --lengths="$work/two.txt" --ranks=4 --max-tokens-per-rank=1000 --json | sed 's/"plan_seconds":[^}]*//')
b=$("$plan" --lengths "$work/bom.txt" --ranks 4 --max-tokens-per-rank 1000 --json | sed 's/"plan_seconds":[^}]*//')
c=$("$plan" --lengths "$work/header.txt" --ranks 4 --max-tokens-per-rank 1000 --json | sed 's/"plan_seconds":[^}]*//')
if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ] && echo "$a" | grep -q '"samples":2,'; then
    pass "--flag=value, BOM and header agree"
else
    fail "--flag=value, BOM and header agree ($a | $b | $c)"
fi

# --help: every option with a description, defaults and units, on stdout, exit 0
if "$plan" --help >"$work/help" 2>"$work/err" && [ ! -s "$work/err" ] &&
    grep -q "^  --attn-coeff A" "$work/help" && grep -q "default 2.048e-11" "$work/help" &&
    grep -q "seconds per" "$work/help" && grep -q "^  --compare" "$work/help" &&
    grep -q "(default 1)" "$work/help" && grep -q "Exit status" "$work/help"; then
    pass "help describes options"
else
    fail "help describes options"
fi
for flag in $(sed -n 's/^  \(--[a-z-]*\).*/\1/p' "$work/help"); do
    grep -q -- "$flag" examples/dcp_plan.c || fail "help lists unknown $flag"
done

# SVG: microbatch numbers and ends, sample ids and lengths in the hover text, the lower bound,
# a legend of only the CP sizes used; --compare draws three panels on one time scale
# shellcheck disable=SC2086
"$plan" --lognormal 4096,1.1,1024,8192,64 --seed 2 $common --svg "$work/one.svg" >/dev/null
used=$("$plan" --lognormal 4096,1.1,1024,8192,64 --seed 2 $common | sed -n 's/.*cp histogram *//p' |
    grep -o 'cp=[0-9]*' | sed 's/cp=/cp /' | sort | tr '\n' ' ')
drawn=$(grep -o "font-size='12'>cp [0-9]*<" "$work/one.svg" | sed "s/.*>\(cp [0-9]*\)</\1/" | sort | tr '\n' ' ')
if [ -n "$used" ] && [ "$used" = "$drawn" ]; then pass "svg legend lists the CP sizes used"; else fail "svg legend ($used) vs ($drawn)"; fi
if grep -q "<title>microbatch 0, rank[s]* [0-9-]* (cp [0-9]*), [0-9]* samples*: [0-9]* ([0-9]* tokens)" "$work/one.svg" &&
    grep -q "<title>lower bound [0-9.]* ms</title>" "$work/one.svg" &&
    grep -q "<title>microbatch [0-9]* ends at" "$work/one.svg" &&
    ! grep -q "ranks \([0-9]*\)-\1 " "$work/one.svg" && ! grep -q " 1 samples" "$work/one.svg"; then
    pass "svg hover text, lower bound, microbatch ends"
else
    fail "svg hover text, lower bound, microbatch ends"
fi
# shellcheck disable=SC2086
"$plan" --lognormal 4096,1.1,1024,8192,64 --seed 2 $common --svg "$work/compare.svg" --compare >/dev/null
if [ "$(grep -c "lower bound [0-9.]* ms (red)" "$work/compare.svg")" -eq 3 ] &&
    grep -q ">static CP=" "$work/compare.svg" && grep -q ">greedy: " "$work/compare.svg" &&
    grep -q ">dynamic: " "$work/compare.svg" && grep -q "dynamic is [0-9.]*x faster" "$work/compare.svg"; then
    pass "svg --compare draws three panels"
else
    fail "svg --compare draws three panels"
fi

# Memory follows the input (under a 1 GB address-space limit): the view of a 2^31 - 2 token
# rank with M = 2^31 - 1, and the summary (with its static baseline) at 2^18 ranks
printf '2147483646\n100\n' >"$work/huge-view.txt"
if (ulimit -v 1000000 && "$plan" --lengths "$work/huge-view.txt" --ranks 1 \
        --max-tokens-per-rank 2147483647 --rank 0 --microbatch 0) >"$work/out" 2>"$work/err" &&
    grep -q "local_tokens       2147483646" "$work/out" &&
    grep -q "rows 0-2147483645: sample 0, positions 0-2147483645" "$work/out"; then
    pass "huge rank view in constant memory"
else
    fail "huge rank view in constant memory ($(cat "$work/err"))"
fi
if (ulimit -v 1000000 && "$plan" --lognormal 2000,1.0,100,4000,600 --ranks 262144 \
        --max-tokens-per-rank 4096) >"$work/out" 2>"$work/err" &&
    grep -q "speed-up over static" "$work/out"; then
    pass "static baseline at 2^18 ranks in 1 GB"
else
    fail "static baseline at 2^18 ranks in 1 GB ($(cat "$work/err"))"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
