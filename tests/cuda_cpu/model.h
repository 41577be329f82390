/* model.h - the CPU execution model's internal interfaces (tests/cuda_cpu): what the runtime
   (runtime.cc) asks of the executor (executor.cc), and what the executor and the checkers
   (checkers.cc) ask of each other. Kernel code never includes this. */
#ifndef DCP_CUDA_CPU_MODEL_H
#define DCP_CUDA_CPU_MODEL_H

#include "cuda_cpu.h"

#include <stdarg.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DCP_CUDA_CPU_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(DCP_CUDA_CPU_ASAN)
#define DCP_CUDA_CPU_ASAN 1
#endif

enum { DCP_CUDA_CPU_WARP_SIZE = 32 };

/* The model's own arithmetic on its own arrays (a collective's operands): not worth ASan's
   checks, which would dominate the cost of every mma.sync. */
#ifdef DCP_CUDA_CPU_ASAN
#define DCP_CUDA_CPU_UNCHECKED __attribute__((no_sanitize("address")))
#else
#define DCP_CUDA_CPU_UNCHECKED
#endif

/* -------------------------------------------------------------------- device profiles
   Real devices' limits: what cudaGetDeviceProperties and cudaDeviceGetAttribute report and
   what a launch is checked against. DCP_CUDA_CPU_DEVICE picks one per process. */
struct dcp_cuda_cpu_profile {
    const char *name;        /* sm_80, sm_89, sm_90 */
    const char *device_name; /* the device it models */
    int major, minor;
    int multiprocessors;
    int max_threads_per_block, max_threads_per_multiprocessor, max_blocks_per_multiprocessor;
    int max_block_dim[3], max_grid_dim[3];
    size_t shared_per_block;          /* without opting in (48 KB) */
    size_t shared_per_block_optin;    /* cudaDevAttrMaxSharedMemoryPerBlockOptin */
    size_t shared_per_multiprocessor;
    size_t reserved_shared_per_block; /* the runtime's own per block */
    int registers_per_block, registers_per_multiprocessor;
    size_t global_memory;
    int l2_bytes;
    int clock_khz, memory_clock_khz, memory_bus_bits;
};

const dcp_cuda_cpu_profile *dcp_cuda_cpu_profile_in_force(void);

/* ------------------------------------------------------------ the error state (device.cc)
   Shared by the stream runtime the program links (runtime.cc, or the host NCCL transport's). */
cudaError_t dcp_cuda_cpu_fail(cudaError_t error); /* kept for cudaGetLastError; returned */
cudaError_t dcp_cuda_cpu_sticky(void); /* cudaErrorLaunchFailure from the first device fault */
void dcp_cuda_cpu_clear_errors(void);  /* cudaDeviceReset */

/* ------------------------------------------------------------ kernel attributes (executor) */
cudaError_t dcp_cuda_cpu_func_set_attribute(const void *function, cudaFuncAttribute attribute,
                                            int value);
cudaError_t dcp_cuda_cpu_func_get_attributes(cudaFuncAttributes *attributes,
                                             const void *function);
cudaError_t dcp_cuda_cpu_occupancy(int *blocks, const void *function, int block_size,
                                   size_t dynamic_shared);

/* ------------------------------------------------------------- executor <-> checkers
   The executor tells the checkers where the running block's shared memory is and which
   synchronisations happened; the checkers ask who is running. All of it runs on the OS
   thread that runs the grid (grids are serialised), never concurrently. */

/* The running thread: linear thread index (its warp is index / 32), and a printable
   "(x,y,z)" of threadIdx. */
int dcp_cuda_cpu_running_thread(void);
void dcp_cuda_cpu_thread_name(int thread, char *out, size_t size);
/* "kernel name, block (x,y,z)" of the running block. */
void dcp_cuda_cpu_block_name(char *out, size_t size);
/* A device fault (checker finding, trap, deadlock): printed with the prefix
   "dcp cuda-cpu <checker>: " and counted (dcp_cuda_cpu_faults). */
void dcp_cuda_cpu_report(const char *checker, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
/* The running block stops where it is (after a report of a fault a device would stop at: a
   misaligned address); the grid's remaining blocks do not run. */
[[noreturn]] void dcp_cuda_cpu_abort_block(void);

/* The shared arena of the block about to run, [base, base + capacity); bytes outside the
   allocated regions are out of bounds. A new block forgets every access of the last one. */
void dcp_cuda_cpu_shadow_block(unsigned char *base, size_t capacity);
void dcp_cuda_cpu_shadow_allocated(size_t offset, size_t bytes); /* a region becomes valid */
void dcp_cuda_cpu_shadow_unbind(void);                           /* no block runs */
/* Synchronisations: a barrier that every thread of the block passed, or one among the warps
   of a mask (a warp collective: one bit). */
void dcp_cuda_cpu_shadow_sync_all(void);
void dcp_cuda_cpu_shadow_sync_warps(uint32_t warps);
/* The running thread's accesses from the twins (the instrumented code reports its own plain
   loads and stores through the access callbacks): read, write, atomic read-modify-write;
   `pending` marks a cp.async destination, `complete` its arrival at the wait. */
enum { DCP_CUDA_CPU_READ, DCP_CUDA_CPU_WRITE, DCP_CUDA_CPU_ATOMIC, DCP_CUDA_CPU_PENDING,
       DCP_CUDA_CPU_COMPLETE };
void dcp_cuda_cpu_shadow_access(const void *address, size_t bytes, int kind, uintptr_t pc);
/* The running block's synchronisation count, and whether an access of warp `earlier_warp`
   stamped with `stamp` is ordered before the running access of warp `later_warp` (a barrier
   both took part in came after it): the shared shadow's happens-before, which the global
   shadow shares. The checked build only. */
uint32_t dcp_cuda_cpu_shadow_stamp(void);
bool dcp_cuda_cpu_shadow_ordered(uint32_t stamp, int earlier_warp, int later_warp);
/* "file:line:column in function" of a place in the checked build's code (its pc), the frames
   it was inlined into after it; "pc 0x..." where nothing symbolizes. */
void dcp_cuda_cpu_symbolize(uintptr_t pc, char *out, size_t size);
/* The shared offset of an address the running block's code gave a shared-memory instruction;
   a report (and -1) when it lies outside the block's valid shared memory. */
long dcp_cuda_cpu_shared_check(const void *address, size_t bytes, const char *instruction,
                               uintptr_t pc);

/* ------------------------------------------------------ global memory (memory.cc)
   Device memory is one reserved region: [begin, begin + span) (0, 0 before the first
   cudaMalloc, and in programs whose runtime allocates elsewhere). */
extern uintptr_t dcp_cuda_cpu_device_begin, dcp_cuda_cpu_device_span;
static inline bool dcp_cuda_cpu_device_address(uintptr_t a)
{
    return a - dcp_cuda_cpu_device_begin < dcp_cuda_cpu_device_span;
}
/* cudaMalloc's bytes (256-byte aligned, filled with 0xFF, the bytes past `bytes` poisoned
   under ASan; NULL when the region is used up) and cudaFree's (poisoned, never reused). */
void *dcp_cuda_cpu_device_malloc(size_t bytes);
void dcp_cuda_cpu_device_free(void *pointer, size_t bytes);
/* The global shadow (checked build; no-ops elsewhere): a grid starts, a block of it starts,
   the running thread writes device memory (a plain store, or an atomic). */
void dcp_cuda_cpu_global_launch(void);
void dcp_cuda_cpu_global_block(uint3 index);
void dcp_cuda_cpu_global_write(const void *address, size_t bytes, bool atomic, uintptr_t pc);

/* ------------------------------------------------------ the kernel profile (profile.cc)
   Collected while dcp_cuda_cpu_profiling is set (profile.h's begin and end); the executor
   and the checkers report to it: a grid starts, a block of it starts and ends, warps
   synchronise (their requests are complete), a lane's memory access (a class of profile.h's
   dcp_cuda_cpu_memory_class), an mma, collective or barrier of some warps. */
extern bool dcp_cuda_cpu_profiling;
enum { DCP_CUDA_CPU_EVENT_MMA, DCP_CUDA_CPU_EVENT_COLLECTIVE, DCP_CUDA_CPU_EVENT_BARRIER };
void dcp_cuda_cpu_profile_launch(const void *function, const char *name, dim3 grid, dim3 block,
                                 size_t shared);
void dcp_cuda_cpu_profile_block(int warps);
void dcp_cuda_cpu_profile_block_end(void);
void dcp_cuda_cpu_profile_sync(uint32_t warps);
void dcp_cuda_cpu_profile_access(uintptr_t address, size_t bytes, int memory_class, uintptr_t pc);
/* A wide access as the device issues it (one instruction: dcp_cuda_cpu_vector_access), and
   whether a host access lies inside the running thread's last one (its split part: skipped). */
void dcp_cuda_cpu_profile_wide(uintptr_t address, size_t bytes, int memory_class, uintptr_t pc);
bool dcp_cuda_cpu_profile_split(uintptr_t address, size_t bytes);
void dcp_cuda_cpu_profile_event(int what, int warps);

#endif
