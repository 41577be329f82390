#!/bin/sh
# The CPU execution model's table of the kernels' registers, launch bounds and static shared
# memory (tests/cuda_cpu/kernel_limits.inc) must be what the device build says now: regenerated
# from build/dcp_cuda-keep (kept by build/dcp_cuda.o's rule) and compared with the checked-in
# one. A kernel changed without `make kernel-limits` fails here, naming the rows that differ.
# Skips where nvcc did not build build/dcp_cuda.o. Ends with "N passed, M failed".
cd "$(dirname "$0")/.." || exit 1
keep=build/dcp_cuda-keep
table=tests/cuda_cpu/kernel_limits.inc
if [ ! -f "$keep/ptxas.txt" ]; then
    echo "skip kernel_limits_current: no device build ($keep/ptxas.txt; needs nvcc)"
    echo "1 skipped"
    echo "0 passed, 0 failed"
    exit 0
fi
fresh=build/kernel_limits.inc
if ! ${PYTHON3:-python3} tests/cuda_cpu/kernel_limits.py "$keep" > "$fresh"; then
    echo "FAIL kernel_limits_current: kernel_limits.py failed on $keep"
    echo "0 passed, 1 failed"
    exit 1
fi
if diff -u "$table" "$fresh" > build/kernel_limits.diff; then
    echo "ok   kernel_limits_current: $table matches the device build ($(grep -c '^{' "$table") kernels x architectures)"
    echo "1 passed, 0 failed"
    exit 0
fi
echo "FAIL kernel_limits_current: $table is stale (run make kernel-limits and commit it):"
grep '^[-+]{' build/kernel_limits.diff | head -20
echo "0 passed, 1 failed"
exit 1
