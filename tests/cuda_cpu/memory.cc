/* memory.cc - the CPU execution model's global memory (tests/cuda_cpu): where cudaMalloc's
   bytes live, and, in the checked build, the global-memory race checker.

   Device memory is one reserved region of the address space (MAP_NORESERVE: only touched pages
   cost memory), handed out upwards and never reused, so that "is this a device address?" is a
   subtraction and a compare on every access the instrumented kernels make, and the shadow of a
   byte sits at a fixed place. An allocation starts on a cudaMalloc boundary (256 bytes) and is
   followed by at least a redzone: under ASan the bytes past the requested size (the rounding
   and the redzone) are poisoned, so that a one-element overrun of a buffer fails as on a device
   where the next allocation starts right there (a plain malloc of the rounded size let overruns
   inside the slack pass). Freed allocations are poisoned whole (use after cudaFree fails) and
   their pages returned.

   The global shadow (DCP_CUDA_CPU_SHADOW): per byte of device memory, its last writer in a
   kernel (the block, as the serial number of the block's run; the thread; whether by an
   atomic; where). A write (or atomic) by a thread races the byte's last write when both are in
   one grid and nothing orders them: different blocks of a grid are never ordered; two warps of
   one block are ordered by a barrier both passed after the earlier write (the shared shadow's
   synchronisation stamps, checkers.cc); only atomics do not race other atomics. A kernel
   boundary orders everything (a later grid sees a serial from before its first block). Reads
   are not tracked: a read-modify-write (`+=` where an atomicAdd belongs) is found at its write,
   whatever order the blocks ran in. */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <string>
#include <vector>

/* The checked build links ASan's runtime; this file itself is not instrumented (the shadow's
   own stores would be most of its cost), so it poisons through ASan's interface directly. */
#ifdef DCP_CUDA_CPU_SHADOW
extern "C" void __asan_poison_memory_region(void const volatile *address, size_t bytes);
static void poison(const void *p, size_t bytes) { __asan_poison_memory_region(p, bytes); }
#else
static void poison(const void *, size_t) {}
#endif

static const size_t MALLOC_ALIGNMENT = 256;       /* cudaMalloc's */
static const size_t REDZONE_BYTES = 256;          /* poisoned after every allocation */
static const size_t REGION_BYTES = (size_t)256 << 30; /* address space, not memory */
static const unsigned char FRESH = 0xFF; /* new device memory: NaN in every float type */

uintptr_t dcp_cuda_cpu_device_begin, dcp_cuda_cpu_device_span;
static uintptr_t next_free; /* offset of the next allocation in the region */

static size_t round_up(size_t bytes, size_t unit) { return (bytes + unit - 1) / unit * unit; }

#ifdef DCP_CUDA_CPU_SHADOW
struct global_record;
static global_record *shadow; /* one record per byte of the region */
static void shadow_reserve(void);
static void shadow_release(uintptr_t offset, size_t bytes);
#endif

static bool reserve_region(void)
{
    void *p = mmap(NULL, REGION_BYTES, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        perror("dcp cuda-cpu: reserving the device memory region");
        return false;
    }
    dcp_cuda_cpu_device_begin = (uintptr_t)p;
    dcp_cuda_cpu_device_span = REGION_BYTES;
#ifdef DCP_CUDA_CPU_SHADOW
    shadow_reserve();
#endif
    return true;
}

void *dcp_cuda_cpu_device_malloc(size_t bytes)
{
    if (!dcp_cuda_cpu_device_span && !reserve_region()) return NULL;
    const size_t rounded = round_up(bytes ? bytes : 1, MALLOC_ALIGNMENT);
    if (next_free + rounded + REDZONE_BYTES > dcp_cuda_cpu_device_span) {
        fprintf(stderr, "dcp cuda-cpu: the model's %zu GiB of device address space are used up "
                        "(freed allocations are not reused)\n", REGION_BYTES >> 30);
        return NULL;
    }
    unsigned char *p = (unsigned char *)(dcp_cuda_cpu_device_begin + next_free);
    next_free += rounded + REDZONE_BYTES;
    memset(p, FRESH, bytes);
    poison(p + bytes, rounded + REDZONE_BYTES - bytes);
    return p;
}

void dcp_cuda_cpu_device_free(void *pointer, size_t bytes)
{
    const uintptr_t offset = (uintptr_t)pointer - dcp_cuda_cpu_device_begin;
    const size_t rounded = round_up(bytes ? bytes : 1, MALLOC_ALIGNMENT);
    poison(pointer, rounded);
    /* whole pages inside the allocation go back to the system (their shadow too) */
    const size_t page = 4096;
    const uintptr_t first = round_up(offset, page), last = (offset + rounded) / page * page;
    if (last > first) madvise((void *)(dcp_cuda_cpu_device_begin + first), last - first,
                              MADV_DONTNEED);
#ifdef DCP_CUDA_CPU_SHADOW
    shadow_release(offset, rounded);
#endif
}

#ifndef DCP_CUDA_CPU_SHADOW

void dcp_cuda_cpu_global_launch(void) {}
void dcp_cuda_cpu_global_block(uint3) {}
void dcp_cuda_cpu_global_write(const void *, size_t, bool, uintptr_t) {}

#else

/* ------------------------------------------------------------------ the global shadow */

enum { ATOMIC = 1 };
struct global_record {
    uint32_t block;  /* serial of the block's run (0: not written by a kernel) */
    uint32_t stamp;  /* the block's synchronisation count at the write (checkers.cc) */
    int32_t pc;      /* the write's place, relative to TEXT_ANCHOR (0: unknown) */
    uint16_t thread; /* linear thread index in its block */
    uint16_t flags;
};
static_assert(sizeof(global_record) == 16, "a record is 16 bytes: a power of two per byte");

/* Places are kept as 32-bit offsets from a function of the model (one executable's code). */
static uintptr_t text_anchor(void) { return (uintptr_t)&dcp_cuda_cpu_global_write; }
static int32_t pc_offset(uintptr_t pc)
{
    const intptr_t d = (intptr_t)(pc - text_anchor());
    return d > INT32_MIN && d < INT32_MAX ? (int32_t)d : 0;
}
static uintptr_t pc_of(int32_t offset) { return offset ? text_anchor() + (intptr_t)offset : 0; }

static void shadow_reserve(void)
{
    void *p = mmap(NULL, REGION_BYTES * sizeof(global_record), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        perror("dcp cuda-cpu: reserving the global-memory shadow");
        abort();
    }
    shadow = (global_record *)p;
}

static void shadow_release(uintptr_t offset, size_t bytes)
{
    const size_t page = 4096;
    const uintptr_t first = round_up(offset * sizeof(global_record), page);
    const uintptr_t last = (offset + bytes) * sizeof(global_record) / page * page;
    if (last > first) madvise((unsigned char *)shadow + first, last - first, MADV_DONTNEED);
}

/* The running grid: serials of its blocks (the first, the running one) and their indices. */
static uint32_t block_serial, launch_first;
static std::vector<uint3> launch_blocks;
struct printed_pair {
    uintptr_t earlier, later;
};
static std::vector<printed_pair> printed;

void dcp_cuda_cpu_global_launch(void)
{
    launch_first = block_serial + 1;
    launch_blocks.clear();
    printed.clear();
}

void dcp_cuda_cpu_global_block(uint3 index)
{
    if (block_serial == UINT32_MAX - 1) { /* 4 billion blocks: forget, rather than wrap */
        fprintf(stderr, "dcp cuda-cpu: the global shadow's block serials wrapped: reset\n");
        abort();
    }
    block_serial++;
    launch_blocks.push_back(index);
}

static void report_race(uintptr_t address, const global_record &earlier, bool atomic,
                        uintptr_t pc)
{
    for (const printed_pair &p : printed)
        if (p.earlier == pc_of(earlier.pc) && p.later == pc) return;
    printed.push_back({pc_of(earlier.pc), pc});
    char where[256], who[96], whom[96], at_a[1024], at_b[1024], block[64];
    dcp_cuda_cpu_block_name(where, sizeof where);
    dcp_cuda_cpu_thread_name(dcp_cuda_cpu_running_thread(), who, sizeof who);
    dcp_cuda_cpu_thread_name(earlier.thread, whom, sizeof whom);
    const uint3 &b = launch_blocks[earlier.block - launch_first];
    if (earlier.block == block_serial) snprintf(block, sizeof block, "this block");
    else snprintf(block, sizeof block, "block (%u,%u,%u)", b.x, b.y, b.z);
    dcp_cuda_cpu_symbolize(pc_of(earlier.pc), at_a, sizeof at_a);
    dcp_cuda_cpu_symbolize(pc, at_b, sizeof at_b);
    dcp_cuda_cpu_report("racecheck",
                        "global write-after-write hazard at %p (device memory) in %s:\n"
                        "    %-6s by %s of %s\n       at %s\n    %-6s by %s\n       at %s\n"
                        "    with nothing ordering them (blocks of a grid never are; warps of a "
                        "block at a barrier both passed; only atomics do not race atomics): a "
                        "read-modify-write such as += where an atomicAdd belongs?",
                        (void *)address, where, earlier.flags & ATOMIC ? "atomic" : "write", whom,
                        block, at_a, atomic ? "atomic" : "write", who, at_b);
}

/* Whether the byte's last write races this one (thread t of warp `warp`, this block). */
static inline bool races(const global_record &r, int warp, bool atomic)
{
    if (r.block < launch_first) return false; /* an earlier grid, or the host */
    if (atomic && (r.flags & ATOMIC)) return false;
    if (r.block != block_serial) return true;
    const int writer_warp = r.thread / DCP_CUDA_CPU_WARP_SIZE;
    return writer_warp != warp && !dcp_cuda_cpu_shadow_ordered(r.stamp, writer_warp, warp);
}

void dcp_cuda_cpu_global_write(const void *address, size_t bytes, bool atomic, uintptr_t pc)
{
    const int t = dcp_cuda_cpu_running_thread();
    if (t < 0) return;
    const uintptr_t offset = (uintptr_t)address - dcp_cuda_cpu_device_begin;
    const int warp = t / DCP_CUDA_CPU_WARP_SIZE;
    const global_record now = {block_serial, dcp_cuda_cpu_shadow_stamp(), pc_offset(pc),
                               (uint16_t)t, (uint16_t)(atomic ? ATOMIC : 0)};
    bool reported = false;
    uint32_t checked_block = 0, checked_stamp = 0; /* bytes of one access share their history */
    uint16_t checked_thread = 0, checked_flags = 0;
    for (size_t i = 0; i < bytes; i++) {
        global_record &r = shadow[offset + i];
        const bool seen = i > 0 && r.block == checked_block && r.stamp == checked_stamp &&
                          r.thread == checked_thread && r.flags == checked_flags;
        if (!seen && !reported && races(r, warp, atomic)) {
            report_race((uintptr_t)address + i, r, atomic, pc);
            reported = true;
        }
        checked_block = r.block, checked_stamp = r.stamp;
        checked_thread = r.thread, checked_flags = r.flags;
        r = now;
    }
}

#endif /* DCP_CUDA_CPU_SHADOW */
