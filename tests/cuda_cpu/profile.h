/* profile.h - the CPU execution model's kernel profile (tests/cuda_cpu/profile.cc): what
   Nsight Compute's memory tables would say of a kernel, computed from the addresses every lane
   of every warp gives each memory instruction, in the checked build.

   A lane's accesses are grouped into warp-level instructions by place and occurrence: the k-th
   execution of an instruction by each lane of a warp is one request (lanes of a warp run the
   same instruction stream; the model runs them one after another between the warp's
   synchronisations). Per request:
   - global memory (loads, stores, atomics, the source of cp.async): the 32-byte sectors its
     lanes' bytes touch, against the fewest that hold those bytes (coalescing);
   - shared memory (loads, stores, ldmatrix, the destination of cp.async): wavefronts, the
     bank-conflict passes (per phase of 32 lanes for accesses of up to 4 bytes, 16 for 8, 8 for
     16 and for each ldmatrix matrix: the most distinct 4-byte words one of the 32 banks must
     serve), against one per 128 bytes.
   Per kernel also: mma.sync m16n8k16 count, shuffles and votes, barriers (per warp), and the
   distinct 32-byte sectors of device memory it touched (what DRAM must move at least once).
   The host compiler's access widths stand for the device's (they agree for the explicit
   vectors and packs of dcp_cuda.cu; the device may merge adjacent scalars the host keeps). */
#ifndef DCP_CUDA_CPU_PROFILE_H
#define DCP_CUDA_CPU_PROFILE_H

#include <stddef.h>
#include <stdint.h>

enum dcp_cuda_cpu_memory_class {
    DCP_CUDA_CPU_GLOBAL_LOAD,
    DCP_CUDA_CPU_GLOBAL_STORE,
    DCP_CUDA_CPU_GLOBAL_ATOMIC,
    DCP_CUDA_CPU_CP_ASYNC_GLOBAL, /* cp.async's source */
    DCP_CUDA_CPU_SHARED_LOAD,
    DCP_CUDA_CPU_SHARED_STORE,
    DCP_CUDA_CPU_LDMATRIX,
    DCP_CUDA_CPU_CP_ASYNC_SHARED, /* cp.async's destination */
    DCP_CUDA_CPU_MEMORY_CLASSES,
    DCP_CUDA_CPU_FIRST_SHARED_CLASS = DCP_CUDA_CPU_SHARED_LOAD
};
extern const char *const dcp_cuda_cpu_memory_class_names[DCP_CUDA_CPU_MEMORY_CLASSES];

struct dcp_cuda_cpu_memory_figures {
    uint64_t requests;    /* warp-level instructions */
    uint64_t bytes;       /* distinct bytes the lanes of each request named, summed */
    uint64_t units;       /* global: sectors moved; shared: wavefronts */
    uint64_t ideal_units; /* the fewest those bytes need: ceil(bytes / 32) or ceil(bytes / 128) */
};

enum { DCP_CUDA_CPU_KERNEL_NAME = 192 };
struct dcp_cuda_cpu_kernel_profile {
    char name[DCP_CUDA_CPU_KERNEL_NAME]; /* demangled */
    const void *function;
    uint64_t launches, blocks, warps; /* warps: of every block, summed */
    unsigned block_threads;           /* of the last launch */
    size_t dynamic_shared;            /* of the last launch */
    struct dcp_cuda_cpu_memory_figures memory[DCP_CUDA_CPU_MEMORY_CLASSES];
    uint64_t mma;         /* mma.sync.m16n8k16, per warp */
    uint64_t collectives; /* shuffles, votes, __syncwarp: per warp */
    uint64_t barriers;    /* bar.sync arrivals of warps */
    uint64_t dram_bytes;  /* distinct 32-byte sectors of device memory touched, x 32 */
};

/* Collect from now on (what was collected is forgotten). */
void dcp_cuda_cpu_profile_begin(void);
/* Leave the grids run from now on out of the profile (true), or take them again (false); the
   work enqueued before runs first. */
void dcp_cuda_cpu_profile_pause(bool paused);
/* Stop; the kernels launched since the begin, in order of their first launch: up to
   `capacity` into out; returns how many there were. */
int dcp_cuda_cpu_profile_end(struct dcp_cuda_cpu_kernel_profile *out, int capacity);

#endif
