#!/bin/sh
# Mutation check of the GPU suite: does it catch the bugs it exists to catch? Each mutant is
# dcp_cuda.cu with one planted bug -- a wrong softmax scale, a causal mask off by one row, a
# dropped key tile, a dq without its scale, a conv1d tap missing in the forward and in dx.
# For each: the source is patched into $BUILD/mutants/NAME/ (the text to replace must occur
# exactly once, else the script fails: a kernel was rewritten, update its mutant here),
# compiled, linked with the GPU test that must catch it, and run under DCP_TEST_SEED (default
# 1). The test must FAIL; a mutant it passes SURVIVED and the script exits non-zero.
# Without a GPU it checks that every mutant still applies, compiles nothing, and prints
# "no CUDA device: skipped" (MUTANTS_COMPILE=1: compiles them too). Nothing here touches the
# working tree's dcp_cuda.cu.
#   usage: sh tests/mutants.sh [NAME...]       (make test-mutants; all mutants when no NAME)
#   env:   NVCC, NVCC_FLAGS (the arch: one is enough), BUILD (default build), DCP_TEST_SEED
NVCC=${NVCC:-nvcc}
NVCC_FLAGS=${NVCC_FLAGS:--std=c++14 -O2 -Xcompiler -Wall,-Wextra,-Werror}
BUILD=${BUILD:-build}
export DCP_TEST_SEED=${DCP_TEST_SEED:-1}
root=$(cd "$(dirname "$0")/.." && pwd)

# name | test program | test names | text in dcp_cuda.cu | its replacement
MUTANTS=$(cat <<'END'
scale_without_log2e|test_cuda_attention|attention_steps|a.scale_log2 = (float)(p->softmax_scale * DCP_CUDA__LOG2E);|a.scale_log2 = (float)(p->softmax_scale);
mask_past_diagonal|test_cuda_attention|attention_steps|    const int64_t seen = dcp_cuda__valid_rows(s.padded, q_pos + 1, a.cp, a.kv_rank);|    const int64_t seen = dcp_cuda__valid_rows(s.padded, q_pos + 2, a.cp, a.kv_rank);
drop_second_key_tile|test_cuda_attention|attention_steps|        if (k0 + K::TILE_KEYS > unmasked_end) dcp_cuda__mask_keys(sc, k0, limit);|        if (k0 + K::TILE_KEYS > unmasked_end) dcp_cuda__mask_keys(sc, k0, limit); { const int32_t none[2] = {0, 0}; if (tile == 1) dcp_cuda__mask_keys(sc, k0, none); }
dq_without_scale|test_cuda_attention|attention_steps|            a.dq[at + d * 8] += a.scale * dq[d][2 * e];|            a.dq[at + d * 8] += dq[d][2 * e];
conv_forward_missing_tap|test_cuda_kernels|conv1d_shapes|for (int k = 0; k < W; k++) pre = fmaf(w[k][v], window[i + k][v], pre);|for (int k = 0; k < W; k++) if (k != W - 2) pre = fmaf(w[k][v], window[i + k][v], pre);
conv_dx_missing_tap|test_cuda_kernels|conv1d_shapes|for (int k = 0; k < W; k++) sum = fmaf(w[k][v], gw[H - k][v], sum);|for (int k = 0; k < W; k++) if (k != 1) sum = fmaf(w[k][v], gw[H - k][v], sum);
END
)

gpu=1
"$root/$BUILD/test_cuda" 2>&1 | grep -q "no CUDA device" && gpu=0
killed=0 survived=0 broken=0
for name_and_rest in $(printf '%s\n' "$MUTANTS" | cut -d'|' -f1); do
    line=$(printf '%s\n' "$MUTANTS" | grep "^$name_and_rest|")
    name=$name_and_rest
    if [ $# -gt 0 ]; then
        case " $* " in *" $name "*) ;; *) continue ;; esac
    fi
    program=$(printf '%s' "$line" | cut -d'|' -f2)
    tests=$(printf '%s' "$line" | cut -d'|' -f3)
    dir="$root/$BUILD/mutants/$name"
    mkdir -p "$dir"
    # exact-text replacement, exactly one occurrence
    if ! MUTANT_OLD=$(printf '%s' "$line" | cut -d'|' -f4) \
         MUTANT_NEW=$(printf '%s' "$line" | cut -d'|' -f5) \
         python3 - "$root/dcp_cuda.cu" "$dir/dcp_cuda.cu" <<'PY'
import os, sys
source = open(sys.argv[1]).read()
old, new = os.environ["MUTANT_OLD"], os.environ["MUTANT_NEW"]
if source.count(old) != 1:
    sys.exit(f"found {source.count(old)} times, not once: {old}")
open(sys.argv[2], "w").write(source.replace(old, new))
PY
    then
        echo "mutant $name: does not apply to dcp_cuda.cu (update it)"
        broken=$((broken + 1))
        continue
    fi
    if [ "$gpu" -eq 0 ] && [ "${MUTANTS_COMPILE:-0}" != 1 ]; then
        echo "mutant $name: applies"
        continue
    fi
    if ! $NVCC $NVCC_FLAGS -I"$root" -c "$dir/dcp_cuda.cu" -o "$dir/dcp_cuda.o" ||
       ! $NVCC $NVCC_FLAGS "$root/tests/$program.cu" "$dir/dcp_cuda.o" -o "$dir/$program"; then
        echo "mutant $name: does not compile"
        broken=$((broken + 1))
        continue
    fi
    if [ "$gpu" -eq 0 ]; then
        echo "mutant $name: applies and compiles"
        continue
    fi
    if "$dir/$program" $tests >"$dir/output.txt" 2>&1; then
        echo "mutant $name: SURVIVED $program $tests (output: $dir/output.txt)"
        survived=$((survived + 1))
    else
        echo "mutant $name: killed by $program $tests: $(grep -m 1 'rule failed\|check failed' "$dir/output.txt")"
        killed=$((killed + 1))
    fi
done
[ "$gpu" -eq 0 ] && echo "no CUDA device: skipped (the mutants above were not run)"
echo "$killed killed, $survived survived, $broken broken"
[ "$survived" -eq 0 ] && [ "$broken" -eq 0 ]
