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
if "$plan" --lognormal 4096,1.1,1024,8192,256 $common --svg "$work/plan.svg" >"$work/out" 2>"$work/err" &&
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

# The JSON carries what the summary says (docs/cli-json.md), checked against the schema
# docs/dcp-plan.schema.json and against the summary's own numbers.
# shellcheck disable=SC2086
"$plan" --lognormal 4096,1.1,1024,8192,64 --seed 3 $common --json >"$work/plan.json"
# shellcheck disable=SC2086
"$plan" --lognormal 4096,1.1,1024,8192,64 --seed 3 $common >"$work/plan.txt"
if command -v python3 >/dev/null 2>&1; then
    if python3 tests/json_schema.py docs/dcp-plan.schema.json "$work/plan.json" &&
        python3 - "$work/plan.json" "$work/plan.txt" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
plan = json.loads(text)
summary = open(sys.argv[2]).read()
assert text.count("\n") == 1, "one line"
c = plan["config"]
assert c["ranks"] == 16 and c["max_tokens_per_rank"] == 4096 and c["strategy"] == "dynamic"
assert c["sync_ranks"] == plan["sync_ranks"] == 16, "default E = D, resolved"
assert c["max_cp"] == 16 and c["min_cp"] == 1 and c["cost"]["attn_coeff"] == 2.048e-11
assert plan["dag_seconds"] <= plan["step_seconds"] <= plan["barrier_seconds"] * (1 + 1e-12)
assert plan["samples"] == 64 == len(plan["sample_lengths"]) == len(plan["padded_lengths"])
assert plan["valid_tokens"] == sum(plan["sample_lengths"])
assert plan["padded_tokens"] == sum(plan["padded_lengths"])
seen = sorted(s for mb in plan["microbatches"] for g in mb for s in g["samples"])
assert seen == list(range(64)), "every sample exactly once"
assert plan["num_microbatches"] == len(plan["microbatches"])
assert plan["num_groups"] == sum(len(mb) for mb in plan["microbatches"])
histogram = {}
for mb in plan["microbatches"]:
    end = 0
    for g in mb:
        assert g["first_rank"] % g["cp"] == 0 and g["first_rank"] >= end
        end = g["first_rank"] + g["cp"]
        assert 0 <= g["start_seconds"] < g["end_seconds"] <= plan["step_seconds"] * (1 + 1e-9)
        for s in g["samples"]:
            valid, padded = plan["sample_lengths"][s], plan["padded_lengths"][s]
            step = 2 * g["cp"] if g["cp"] > 1 else 1
            assert padded >= valid and padded % step == 0 and padded - valid < step, (s, g)
            histogram[str(g["cp"])] = histogram.get(str(g["cp"]), 0) + 1
    assert end <= 16
assert histogram == plan["cp_histogram"], (histogram, plan["cp_histogram"])
assert plan["step_seconds"] >= plan["lower_bound_seconds"] > 0
# the numbers of the text summary, rounded as it prints them
def ms(x): return f"{x * 1e3:.3f} ms"
b = plan["baselines"]
for line in (f"step time       {ms(plan['step_seconds'])} under sync ranks E = 16",
             f"E = 1 (DAG)     {ms(plan['dag_seconds'])}", f"efficiency {plan['dag_efficiency']:.4f}",
             f"lower bound     {ms(plan['lower_bound_seconds'])}",
             f"static CP={b['static']['cp']:<5d} {ms(b['static']['step_seconds'])}, "
             f"speed-up over static {b['static']['speedup']:.3f}x",
             f"greedy          {ms(b['greedy']['step_seconds'])}, "
             f"speed-up over greedy {b['greedy']['speedup']:.3f}x",
             f"{plan['valid_tokens']} valid tokens",
             f"microbatches    {plan['num_microbatches']} ({plan['num_groups']} groups, "
             f"{plan['idle_rank_microbatches']} idle"):
    assert line in summary, line
assert abs(b["static"]["speedup"] - b["static"]["step_seconds"] / plan["step_seconds"]) < 1e-5
PY
    then pass "json: schema, lengths, group times, baselines as the summary"; else fail "json: schema, lengths, group times, baselines as the summary"; fi
    # the validator itself: a plan without a key, with an extra key, with a wrong type
    python3 - "$work/plan.json" "$work" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
broken = [dict(plan), dict(plan, extra=1), dict(plan, samples="64")]
del broken[0]["baselines"]
for i, doc in enumerate(broken):
    json.dump(doc, open(f"{sys.argv[2]}/broken-{i}.json", "w"))
PY
    rejected=0
    for i in 0 1 2; do
        python3 tests/json_schema.py docs/dcp-plan.schema.json "$work/broken-$i.json" >/dev/null ||
            rejected=$((rejected + 1))
    done
    if [ "$rejected" -eq 3 ]; then pass "schema rejects a missing key, an extra key, a wrong type"; else fail "schema rejects broken documents ($rejected of 3)"; fi
    # every key of the schema is described in docs/cli-json.md
    if python3 - <<'PY'
import json
schema = json.load(open("docs/dcp-plan.schema.json"))
doc = open("docs/cli-json.md").read()
keys = set()
def walk(node):
    if isinstance(node, dict):
        keys.update(node.get("properties", {}))
        for v in node.values(): walk(v)
    elif isinstance(node, list):
        for v in node: walk(v)
walk(schema)
missing = sorted(k for k in keys if f"`{k}`" not in doc)
assert not missing, missing
PY
    then pass "docs/cli-json.md describes every key of the schema"; else fail "docs/cli-json.md describes every key of the schema"; fi
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
    if python3 tests/json_schema.py docs/dcp-plan.schema.json "$work"/view-[0-7].json &&
        python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
plan = json.load(open(f"{work}/view-plan.json"))
assert all(len(v["samples"]) for mb in plan["microbatches"] for v in mb)
views = [json.load(open(f"{work}/view-{r}.json")) for r in range(8)]
for v in views:
    positions = [-1] * v["local_tokens"]
    row = 0
    for run in v["runs"]:  # in row order, covering every row once
        assert run["first_row"] == row, (run, row)
        for i in range(run["rows"]):
            positions[row + i] = run["position"] + i if run["position"] >= 0 else -1
        row += run["rows"]
    assert row == v["local_tokens"] == v["local_offsets"][-1]
    assert v["cu_seqlens_padded"][-1] == v["cp"] * v["local_tokens"]
    v["positions"] = positions
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
expect_error "sync ranks negative" 2 "--sync-ranks must be in [0, 1048576], got -1" \
    --lengths "$work/lengths.txt" $common --sync-ranks -1
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
# strict numbers: no white space around a value (strtoll/strtod would skip it in front only)
expect_error "ranks with a leading space" 2 "--ranks expects an integer, got ' 4'" \
    --lengths "$work/lengths.txt" --ranks " 4" --max-tokens-per-rank 4096
expect_error "ranks with a trailing space" 2 "--ranks expects an integer, got '4 '" \
    --lengths "$work/lengths.txt" --ranks "4 " --max-tokens-per-rank 4096
expect_error "ranks with a leading tab after =" 2 "--ranks expects an integer, got '	4'" \
    --lengths "$work/lengths.txt" "--ranks=	4" --max-tokens-per-rank 4096
expect_error "coefficient with a leading space" 2 "--attn-coeff expects a number, got ' 1e-9'" \
    --lengths "$work/lengths.txt" $common --attn-coeff " 1e-9"
expect_error "coefficient with a trailing tab" 2 "--linear-coeff expects a number, got '1e-9	'" \
    --lengths "$work/lengths.txt" $common --linear-coeff "1e-9	"
expect_error "lognormal field with a space" 2 "--lognormal MIN expects an integer, got ' 1024'" \
    --lognormal "4096,1.1, 1024,8192,16" $common
expect_error "cp size with a space" 2 "--cp-sizes expects an integer, got ' 2'" \
    --lengths "$work/lengths.txt" $common --cp-sizes "1, 2"
# a repeated option is an error naming it, never "the last one wins"
expect_error "repeated option" 2 "--ranks is given more than once" \
    --lengths "$work/lengths.txt" --ranks 4 --max-tokens-per-rank 4096 --ranks=8
expect_error "repeated option, same value" 2 "--max-tokens-per-rank is given more than once" \
    --lengths "$work/lengths.txt" $common --max-tokens-per-rank 4096
expect_error "repeated switch" 2 "--json is given more than once" \
    --lengths "$work/lengths.txt" $common --json --json
expect_error "repeated output" 2 "--svg is given more than once" \
    --lengths "$work/lengths.txt" $common --svg "$work/a.svg" --svg "$work/b.svg"
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
expect_error "min-cp negative" 2 "--min-cp must be in [0, 1048576], got -1" \
    --lengths "$work/lengths.txt" $common --min-cp -1
expect_error "pad-multiple beyond the limit" 2 "--pad-multiple must be in [0, 1048576], got 2000000" \
    --lengths "$work/lengths.txt" $common --pad-multiple 2000000
expect_error "pad-multiple-cp1 not a number" 2 "--pad-multiple-cp1 expects an integer, got '2.5'" \
    --lengths "$work/lengths.txt" $common --pad-multiple-cp1 2.5
expect_error "improve-moves beyond int32" 2 "--improve-moves must be in [-2147483648, 2147483647]" \
    --lengths "$work/lengths.txt" $common --improve-moves 3000000000
expect_error "microbatch-multiple negative" 2 "--microbatch-multiple must be in [0, 1048576], got -2" \
    --lengths "$work/lengths.txt" $common --microbatch-multiple -2
expect_error "ranks minus one" 2 "--ranks must be in [1, 1048576], got -1" \
    --lengths "$work/lengths.txt" --ranks -1 --max-tokens-per-rank 4096
expect_error "unknown flag at the end" 2 "unknown option --jsn" --lengths "$work/lengths.txt" $common --jsn
expect_error "--version takes no value" 2 "--version takes no value" --version=1
expect_error "stray argument" 2 "unexpected argument 'extra'" --lengths "$work/lengths.txt" $common --json extra
expect_error "value is an option" 2 "--lengths needs a value, got the option --ranks" --lengths --ranks 32
expect_error "switch with a value" 2 "--json takes no value" --lengths "$work/lengths.txt" $common --json=1
expect_error "seed with lengths" 2 "--seed applies to --lognormal only" --lengths "$work/lengths.txt" $common --seed 3
expect_error "svg to an unwritable path" 2 "--svg: cannot write /nonexistent/x.svg: No such file or directory" \
    --lognormal 4096,1.1,1024,8192,64 $common --svg /nonexistent/x.svg
expect_error "svg unwritable with json" 2 "cannot write /nonexistent/x.svg" \
    --lognormal 4096,1.1,1024,8192,64 $common --json --svg /nonexistent/x.svg
expect_error "saved plan unwritable" 2 "--save-plan: cannot write /nonexistent/p.bin" \
    --lognormal 4096,1.1,1024,8192,64 $common --save-plan /nonexistent/p.bin
expect_error "svg and saved plan on one path" 2 "--svg and --save-plan both name $work/same" \
    --lognormal 4096,1.1,1024,8192,64 $common --svg "$work/same" --save-plan "$work/same"
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
# the plan failed: no file is left behind, and none that was there before is touched
rm -f "$work/failed.svg" "$work/failed.bin"
expect_error "no svg after a failed plan" 1 "sample 2 has length 70000" \
    --lengths "$work/long3.txt" $common --svg "$work/failed.svg" --save-plan "$work/failed.bin"
if [ ! -e "$work/failed.svg" ] && [ ! -e "$work/failed.bin" ]; then
    pass "failed plan leaves no svg and no saved plan"
else
    fail "failed plan leaves no svg and no saved plan"
fi
echo keep >"$work/kept.svg"
expect_error "unwritable saved plan after an svg" 2 "cannot write /nonexistent/p.bin" \
    --lengths "$work/two.txt" $common --svg "$work/kept.svg" --save-plan /nonexistent/p.bin
if [ "$(cat "$work/kept.svg")" = keep ]; then pass "a file named by a failed run keeps its bytes"; else fail "a file named by a failed run keeps its bytes"; fi

# Outputs are atomic and last (issue 36): for each output kind, alone and all three at once,
# and each failure class, a file that was there survives byte for byte, stderr has exactly
# one line, and its folder holds no temporary afterwards.
atomic=$work/atomic
rm -rf "$atomic"
mkdir -p "$atomic"
printf 'precious\nbytes\n' >"$work/precious"
# check_survives NAME EXIT NEEDLE OUTPUT-ARGS -- RUN-ARGS: the targets (svg, plan, out in
# $atomic) start as $work/precious; after the failing run each is unchanged and the folder
# lists only them.
check_survives() {
    what=$1 code=$2 needle=$3 kind=$4
    shift 4
    rm -f "$atomic"/* "$atomic"/.[!.]*
    for target in svg plan out; do cp "$work/precious" "$atomic/$target"; done
    case $kind in
        svg) outputs="--svg $atomic/svg" ;;
        plan) outputs="--save-plan $atomic/plan" ;;
        json) outputs="--json --output $atomic/out" ;;
        text) outputs="--output $atomic/out" ;;
        all) outputs="--svg $atomic/svg --save-plan $atomic/plan --json --output $atomic/out" ;;
    esac
    # shellcheck disable=SC2086
    expect_error "$what, $kind" "$code" "$needle" "$@" $outputs
    changed=""
    for target in svg plan out; do
        cmp -s "$work/precious" "$atomic/$target" || changed="$changed $target"
    done
    left=$(ls -A "$atomic" | tr '\n' ' ')
    if [ -z "$changed" ] && [ "$left" = "out plan svg " ]; then
        pass "$what, $kind: files byte-identical, no temporary"
    else
        fail "$what, $kind: changed:$changed; folder: $left"
    fi
}
for kind in svg plan json text all; do
    check_survives "bad option" 2 "--ranks expects an integer, got 'x'" $kind \
        --lengths "$work/two.txt" --ranks x --max-tokens-per-rank 4096
    check_survives "bad lengths file" 2 'line 2: length "ten" is not a positive integer' $kind \
        --lengths "$work/word.txt" $common
    check_survives "infeasible plan" 1 "sample 2 has length 70000" $kind \
        --lengths "$work/long3.txt" $common
    check_survives "rank out of range" 2 "rank 16 outside [0, 16)" $kind \
        --lengths "$work/two.txt" $common --rank 16 --microbatch 0
    check_survives "microbatch out of range" 2 "microbatch 9 outside" $kind \
        --lengths "$work/two.txt" $common --rank 0 --microbatch 9
    check_survives "memory cap" 1 "> memory limit 0.0 GiB (--memory-limit)" $kind \
        --lengths "$work/two.txt" $common --memory-limit 1K
    # another output: unwritable (found at the start), or failing as the last step writes it
    # (/dev/full, a device, is written in place after the temporaries)
    case $kind in svg) other=--save-plan ;; all) continue ;; *) other=--svg ;; esac
    check_survives "another output unwritable" 2 "$other: cannot write /nonexistent/x" $kind \
        --lengths "$work/two.txt" $common $other /nonexistent/x
    if [ -w /dev/full ]; then
        check_survives "another output's write fails" 2 "$other: cannot write /dev/full" $kind \
            --lengths "$work/two.txt" $common $other /dev/full
    fi
done

# ... and a run that succeeds replaces them: the SVG, the saved plan and --output's JSON (the
# same object stdout shows without it), keeping each file's permissions, writing through a
# symbolic link (the link stays), into /dev/null in place, and no temporary left behind
rm -f "$atomic"/* "$atomic"/.[!.]*
for target in svg plan out; do cp "$work/precious" "$atomic/$target"; done
chmod 640 "$atomic/svg"
ln -s plan "$atomic/link"
# shellcheck disable=SC2086
"$plan" --lengths "$work/two.txt" $common --json >"$work/stdout.json"
# shellcheck disable=SC2086
if "$plan" --lengths "$work/two.txt" $common --json --svg "$atomic/svg" --save-plan "$atomic/link" \
        --output "$atomic/out" >"$work/out" 2>"$work/err" && [ ! -s "$work/out" ] &&
    [ "$(wc -l <"$work/err")" -eq 3 ] && grep -q "wrote $atomic/out (" "$work/err" &&
    grep -q "^<svg" "$atomic/svg" && head -c 8 "$atomic/plan" | grep -q DCPPLAN &&
    [ -L "$atomic/link" ] && [ "$(stat -c %a "$atomic/svg")" = 640 ] &&
    [ "$(sed 's/"plan_seconds":[^}]*//' "$atomic/out")" = "$(sed 's/"plan_seconds":[^}]*//' "$work/stdout.json")" ] &&
    [ "$(ls -A "$atomic" | tr '\n' ' ')" = "link out plan svg " ]; then
    pass "a run that succeeds replaces its files (mode kept, through a link, no temporary)"
else
    fail "a run that succeeds replaces its files ($(cat "$work/err"); $(ls -lA "$atomic"))"
fi
# shellcheck disable=SC2086
if "$plan" --lengths "$work/two.txt" $common --svg /dev/null >"$work/out" 2>&1 &&
    [ -c /dev/null ] && grep -q "wrote /dev/null" "$work/out"; then
    pass "a device (/dev/null) is written in place"
else
    fail "a device (/dev/null) is written in place ($(cat "$work/out"))"
fi
expect_error "a folder as output" 2 "--output: cannot write $atomic: Is a directory" \
    --lengths "$work/two.txt" $common --output "$atomic"
expect_error "--output and --svg on one path" 2 "--svg and --output both name $atomic/x" \
    --lengths "$work/two.txt" $common --output "$atomic/x" --svg "$atomic/x"


# Memory bounded up front (issue 36): 10^8 samples on 1,024 ranks are refused in under a
# second with the estimate and the limit, before the lengths are allocated; --memory-limit
# raises the cap (suffixes K, M, G, T) and the JSON config carries it
start=$(date +%s%N)
expect_error "10^8 samples refused" 1 "100000000 samples on 1024 ranks need about" \
    --lognormal 4096,1.1,1024,8192,100000000 --ranks 1024 --max-tokens-per-rank 4096
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
if [ "$elapsed_ms" -lt 1000 ] && grep -q "GiB (lengths and 3 plans) > memory limit 8.0 GiB (--memory-limit)$" "$work/err"; then
    pass "10^8 samples refused in $elapsed_ms ms, naming the estimate and the limit"
else
    fail "10^8 samples refused in $elapsed_ms ms: $(cat "$work/err")"
fi
expect_error "a limit below the plan's estimate" 1 "> memory limit 0.1 GiB (--memory-limit)" \
    --lognormal 4096,1.1,1024,8192,100000 --ranks 1024 --max-tokens-per-rank 4096 --memory-limit 100M
expect_error "--lengths checked after reading" 1 "3 samples on 16 ranks need about" \
    --lengths "$work/lengths.txt" $common --memory-limit 2K
expect_error "memory limit with a space" 2 "--memory-limit expects a byte count (digits, then optionally K, M, G or T), got '8 G'" \
    --lengths "$work/lengths.txt" $common --memory-limit "8 G"
expect_error "memory limit beyond int64" 2 "--memory-limit must be at most 9223372036854775807 bytes, got '9999999999T'" \
    --lengths "$work/lengths.txt" $common --memory-limit 9999999999T
if "$plan" --lengths "$work/lengths.txt" $common --memory-limit 3G --json | grep -q '"memory_limit":3221225472}' &&
    "$plan" --lengths "$work/lengths.txt" $common --json | grep -q '"memory_limit":8589934592}'; then
    pass "--memory-limit 3G in the JSON config, 8 GiB by default"
else
    fail "--memory-limit in the JSON config"
fi

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
    grep -q "^  --attn-coeff A" "$work/help" && grep -q "attn-coeff 2.048e-11 --linear-coeff 1.00663e-06 --ring-step-cost 1.5e-05" "$work/help" &&
    grep -q "seconds per" "$work/help" && grep -q "^  --compare" "$work/help" &&
    grep -q "(default 0: 1)" "$work/help" && grep -q "Exit status" "$work/help" &&
    grep -q "^  --version" "$work/help" && grep -q "^  --save-plan FILE" "$work/help"; then
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
"$plan" --lognormal 4096,1.1,1024,8192,64 --seed 2 $common --svg "$work/one.svg" >/dev/null 2>&1
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
"$plan" --lognormal 4096,1.1,1024,8192,64 --seed 2 $common --svg "$work/compare.svg" --compare >/dev/null 2>&1
if [ "$(grep -c "lower bound [0-9.]* ms (red)" "$work/compare.svg")" -eq 3 ] &&
    grep -q ">static CP=" "$work/compare.svg" && grep -q ">greedy: " "$work/compare.svg" &&
    grep -q ">dynamic: " "$work/compare.svg" && grep -q "dynamic is [0-9.]*x faster" "$work/compare.svg"; then
    pass "svg --compare draws three panels"
else
    fail "svg --compare draws three panels"
fi

# 0 is the library's default for every dcp_config field, as in C and Python: the same plan
# with and without each (tests/test_frontends.sh compares all three front ends byte for byte)
base=$("$plan" --lengths "$work/lengths.txt" $common --json | sed 's/"plan_seconds":[^}]*//')
for zero in "--sync-ranks 0" "--min-cp 0" "--max-cp 0" "--microbatch-multiple 0" \
    "--pad-multiple 0" "--pad-multiple-cp1 0" "--improve-moves 0" \
    "--attn-coeff 0 --linear-coeff 0 --ring-step-cost 0"; do
    # shellcheck disable=SC2086
    got=$("$plan" --lengths "$work/lengths.txt" $common $zero --json | sed 's/"plan_seconds":[^}]*//')
    if [ -n "$got" ] && [ "$got" = "$base" ]; then pass "$zero is the default"; else fail "$zero is the default"; fi
done
# a coefficient given alone leaves the other two at 0, as a C or Python config does
if "$plan" --lengths "$work/lengths.txt" $common --attn-coeff 1e-10 --json |
    grep -q '"cost":{"attn_coeff":1e-10,"linear_coeff":0,"ring_step_cost":0}'; then
    pass "one coefficient given: the others 0"
else
    fail "one coefficient given: the others 0"
fi
# the default seed is DCP_DEFAULT_SEED (1), Python's too
a=$("$plan" --lognormal 4096,1.1,1024,8192,64 $common --json | sed 's/"plan_seconds":[^}]*//')
b=$("$plan" --lognormal 4096,1.1,1024,8192,64 --seed 1 $common --json | sed 's/"plan_seconds":[^}]*//')
c=$("$plan" --lognormal 4096,1.1,1024,8192,64 --seed 0 $common --json | sed 's/"plan_seconds":[^}]*//')
if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" != "$c" ]; then pass "default seed is 1"; else fail "default seed is 1"; fi

# --version: one line on stdout, the header's version and plan format
if "$plan" --version >"$work/out" 2>"$work/err" && [ ! -s "$work/err" ] &&
    grep -qx "dcp-plan [0-9]*\.[0-9]*\.[0-9]* (dcp.h, plan format [0-9]*)" "$work/out" &&
    grep -q "DCP_VERSION_MINOR $(sed 's/dcp-plan [0-9]*\.\([0-9]*\)\..*/\1/' "$work/out")$" dcp.h; then
    pass "--version"
else
    fail "--version ($(cat "$work/out" "$work/err"))"
fi

# --save-plan and --svg name what they wrote on stderr (one line each), stdout unchanged
rm -f "$work/saved.bin" "$work/saved.svg"
# shellcheck disable=SC2086
if "$plan" --lengths "$work/lengths.txt" $common --json --save-plan "$work/saved.bin" \
        --svg "$work/saved.svg" >"$work/out" 2>"$work/err" &&
    [ "$(wc -l <"$work/err")" -eq 2 ] &&
    grep -qx "dcp-plan: wrote $work/saved.bin ($(wc -c <"$work/saved.bin") bytes)" "$work/err" &&
    grep -qx "dcp-plan: wrote $work/saved.svg ($(wc -c <"$work/saved.svg") bytes)" "$work/err" &&
    [ "$(wc -l <"$work/out")" -eq 1 ] && head -c 8 "$work/saved.bin" | grep -q "DCPPLAN"; then
    pass "files written are named on stderr"
else
    fail "files written are named on stderr ($(cat "$work/err"))"
fi

# an idle rank's view cannot be mistaken for a group: cp 0, first_rank and rank_in_group -1
printf '100\n' >"$work/one.txt"
if "$plan" --lengths "$work/one.txt" --ranks 4 --max-tokens-per-rank 4096 --rank 3 --microbatch 0 \
        --json >"$work/idle.json" &&
    grep -q '"first_rank":-1,"cp":0,"rank_in_group":-1,"idle":true,"samples":\[\]' "$work/idle.json" &&
    grep -q '"cu_seqlens":\[0\],.*"local_tokens":0,"pad_multiple":0,"runs":\[\]' "$work/idle.json" &&
    "$plan" --lengths "$work/one.txt" --ranks 4 --max-tokens-per-rank 4096 --rank 3 --microbatch 0 |
        grep -q "^rank 3, microbatch 0: idle (no group"; then
    pass "idle view"
else
    fail "idle view ($(cat "$work/idle.json"))"
fi
if command -v python3 >/dev/null 2>&1; then
    if python3 tests/json_schema.py docs/dcp-plan.schema.json "$work/idle.json"; then pass "idle view fits the schema"; else fail "idle view fits the schema"; fi
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
