#!/bin/sh
# Mutation check of the kernel tests on the CPU execution model (tests/cuda_cpu): do they catch
# the bugs they exist to catch? Each mutant is dcp_cuda.cu with one planted bug: a wrong
# softmax scale, a causal mask off by one row, a dropped key tile, a dq without its scale, a
# conv1d tap missing in the forward and in dx; and faults only a checker or a bound finds: a
# missing __syncthreads in the attention forward's tile loop (racecheck), a read of a cp.async
# buffer before its wait (the cp.async check), a key-tile count one short (a wrong result), the
# backward's atomicAdd into dq as a plain += (the global shadow: blocks race), the conv1d
# alignment guard removed (16-byte loads of misaligned tensors: the alignment check), a fill
# one element past its buffer's end (the poisoned bytes after a cudaMalloc's size); and two
# that only cost speed, which the kernel profile's thresholds catch (build/kernel_report-cpu
# --check): conv1d lanes strided across channel groups (uncoalesced loads) and the attention
# tiles' row padding removed (ldmatrix rows in the same banks). For each: the source is patched into $BUILD/mutants/NAME/ (the text to replace must
# occur exactly once, else the script fails: a kernel was rewritten, update its mutant here),
# compiled as the model's checked build, linked with the test program's object, and run under
# DCP_TEST_SEED (default 1) with the test names given. The test must FAIL (a wrong result, a
# checker's report, an ASan error); a mutant it passes SURVIVED and the script exits non-zero.
# No GPU is needed. Nothing here touches the working tree's dcp_cuda.cu.
#   usage: sh tests/mutants.sh [NAME...]       (make test-mutants; all mutants when no NAME)
#          MUTANTS_PART=K/N: the K-th of N equal parts of the list (make test-mutants MUTANTS_PART=1/2)
#          MUTANTS_APPLY_ONLY=1: only check that every mutant's text occurs once in dcp_cuda.cu
#          (seconds, no compile: make test runs it, tests/test_mutants_apply.sh, so that a rewrite
#          of a kernel cannot leave a mutant that no longer applies)
#   env:   CUDA_CPU_COMPILE (compiler and flags of build/cuda_cpu/dcp_cuda-checked.o),
#          CUDA_CPU_LINK (linker, flags and the model's objects), BUILD (default build),
#          DCP_TEST_SEED
BUILD=${BUILD:-build}
export DCP_TEST_SEED=${DCP_TEST_SEED:-1}
root=$(cd "$(dirname "$0")/.." && pwd)
apply_only=${MUTANTS_APPLY_ONLY:-0}
if [ "$apply_only" != 1 ] && { [ -z "$CUDA_CPU_COMPILE" ] || [ -z "$CUDA_CPU_LINK" ]; }; then
    echo "CUDA_CPU_COMPILE and CUDA_CPU_LINK are not set: run it as make test-mutants"
    exit 1
fi

# name | test program | test names | text in dcp_cuda.cu | its replacement
MUTANTS=$(cat <<'END'
scale_without_log2e|test_cuda_attention|attention_steps|a.scale_log2 = (float)(p->softmax_scale * DCP_CUDA__LOG2E);|a.scale_log2 = (float)(p->softmax_scale);
mask_past_diagonal|test_cuda_attention|attention_ring_step_views|    const int64_t seen = dcp_cuda__valid_rows(s.padded, q_pos + 1, a.cp, a.kv_rank);|    const int64_t seen = dcp_cuda__valid_rows(s.padded, q_pos + 2, a.cp, a.kv_rank);
drop_second_key_tile|test_cuda_attention|attention_long_pack|        if (k0 + K::TILE_KEYS > unmasked_end) dcp_cuda__mask_keys(sc, k0, limit);|        if (k0 + K::TILE_KEYS > unmasked_end) dcp_cuda__mask_keys(sc, k0, limit); { const int32_t none[2] = {0, 0}; if (tile == 1) dcp_cuda__mask_keys(sc, k0, none); }
dq_without_scale|test_cuda_attention|attention_steps|            dcp_cuda__add_pair(a.dq + at + d * DCP_CUDA__MMA_N, a.scale * dq[d][2 * e],|            dcp_cuda__add_pair(a.dq + at + d * DCP_CUDA__MMA_N, dq[d][2 * e],
conv_forward_missing_tap|test_cuda_kernels|conv1d_boundaries|for (int k = 0; k < W; k++) pre = fmaf(w[k][v], window[i + k][v], pre);|for (int k = 0; k < W; k++) if (k != W - 2) pre = fmaf(w[k][v], window[i + k][v], pre);
conv_dx_missing_tap|test_cuda_kernels|conv1d_boundaries|for (int k = 0; k < W; k++) sum = fmaf(w[k][v], gw[H - k][v], sum);|for (int k = 0; k < W; k++) if (k != 1) sum = fmaf(w[k][v], gw[H - k][v], sum);
forward_missing_syncthreads|test_cuda_attention|attention_long_pack|        __syncthreads(); /* this stage is free for the load two tiles ahead */|        /* the barrier that frees this stage is missing */
read_before_cp_async_wait|test_cuda_attention|attention_ring_step_views|    dcp_cuda__cp_async_wait<1>(); /* Q has landed */|    dcp_cuda__cp_async_wait<2>(); /* Q may still be in flight */
key_tiles_one_short|test_cuda_attention|attention_ring_step_views|    return k_stop > s.k_begin ? (int32_t)((k_stop - s.k_begin + K::TILE_KEYS - 1) / K::TILE_KEYS)|    return k_stop > s.k_begin ? (int32_t)((k_stop - s.k_begin) / K::TILE_KEYS)
dq_plain_add|test_cuda_attention|attention_steps|                    atomicAdd(a.dq + at[e >> 1] + (2 * dp + j) * 8 + (e & 1),|                    [](float *p, float v) { *p += v; }(a.dq + at[e >> 1] + (2 * dp + j) * 8 + (e & 1),
conv_alignment_guard_removed|test_cuda_kernels|conv1d_boundaries|    g->vector_width = vector && p->channels % V == 0 ? V : 1;|    g->vector_width = (vector + 1) && p->channels % V == 0 ? V : 1;
fill_one_past_the_end|test_cuda_kernels|merge_shapes|    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;|    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i <= count;
conv_loads_uncoalesced|kernel_report|--check tests/cuda_cpu/kernel_thresholds.txt|    run->c0 = ((int64_t)blockIdx.y * DCP_CUDA__CONV_LANES + threadIdx.x) * V;|    run->c0 = ((int64_t)threadIdx.x * gridDim.y + blockIdx.y) * V;
attention_tile_bank_conflicts|kernel_report|--check tests/cuda_cpu/kernel_thresholds.txt|    static constexpr int ROW_PAD = DCP_CUDA__VECTOR_BYTES / 2; /* elements of 2 bytes */|    static constexpr int ROW_PAD = 0;
END
)

# MUTANTS_PART=K/N: only the K-th of N equal parts of the list (in order)
part=${MUTANTS_PART:-1/1}
part_index=${part%/*} part_count=${part#*/}
total=$(printf '%s\n' "$MUTANTS" | grep -c .)
killed=0 survived=0 broken=0 index=0
for name in $(printf '%s\n' "$MUTANTS" | cut -d'|' -f1); do
    line=$(printf '%s\n' "$MUTANTS" | grep "^$name|")
    index=$((index + 1))
    # mutant `index` (from 1) belongs to part ceil(index * part_count / total)
    [ $(((index * part_count + total - 1) / total)) -eq "$part_index" ] || continue
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
    if [ "$apply_only" = 1 ]; then
        echo "ok   mutant $name applies"
        killed=$((killed + 1))
        continue
    fi
    # -I the tree's root: the copy includes dcp.h by a relative name
    if ! $CUDA_CPU_COMPILE -I"$root" -c "$dir/dcp_cuda.cu" -o "$dir/dcp_cuda.o" ||
       ! $CUDA_CPU_LINK "$root/$BUILD/cuda_cpu/$program.o" "$dir/dcp_cuda.o" -o "$dir/$program" -lm; then
        echo "mutant $name: does not compile"
        broken=$((broken + 1))
        continue
    fi
    if "$dir/$program" $tests >"$dir/output.txt" 2>&1; then
        echo "mutant $name: SURVIVED $program $tests (output: $dir/output.txt)"
        survived=$((survived + 1))
    else
        echo "mutant $name: killed by $program $tests: $(grep -m 1 \
            'rule failed\|check failed\|failed: got\|dcp cuda-cpu\|ERROR: AddressSanitizer' \
            "$dir/output.txt")"
        killed=$((killed + 1))
    fi
done
if [ "$apply_only" = 1 ]; then
    echo "$killed passed, $broken failed"
    [ "$broken" -eq 0 ]
    exit
fi
echo "$killed killed, $survived survived, $broken broken"
[ "$survived" -eq 0 ] && [ "$broken" -eq 0 ]
