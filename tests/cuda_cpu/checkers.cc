/* checkers.cc - the CPU execution model's shared-memory checkers (tests/cuda_cpu).

   Every build checks that the addresses shared-memory instructions (ldmatrix, cp.async) are
   given lie in the block's valid shared memory. The checked build (clang with ASan,
   DCP_CUDA_CPU_SHADOW) keeps a shadow record per byte of the block's shared arena and sees
   every access to it: the twins report theirs (ldmatrix, cp.async, atomics), and dcp_cuda.cu,
   compiled with

     -fsanitize=address -mllvm -asan-instrumentation-with-call-threshold=0
     -mllvm -asan-memory-access-callback-prefix=dcp_cuda_cpu_access_

   calls dcp_cuda_cpu_access_load4 (store8, loadN, memcpy, ...) for each of its own loads,
   stores and memory intrinsics; those below look the address up and then do ASan's own check.
   This file itself is not instrumented (the shadow's own copies would be most of its cost).
   (Sanitizer coverage's trace-loads/trace-stores misses the memcpy of a struct copy into
   shared memory, which ASan's memory-intrinsic callbacks catch.) Reports:
   - racecheck: a write and a read or write of the same byte by two threads with no
     synchronisation between them that both took part in (__syncthreads, a named barrier
     over both warps, or a warp collective when both are lanes of one warp);
   - initcheck: a read of a byte no thread of the block wrote;
   - cp.async: a read (or plain write) of a cp.async destination before the issuing thread's
     cp.async.wait_group completed it, or a second cp.async to it before then;
   - bounds: an access to the arena outside the dynamic and static shared memory the block
     has (ASan then stops the program: the arena is poisoned there). */
#include "model.h"
#include "profile.h"

#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <string>
#include <vector>

#ifdef DCP_CUDA_CPU_SHADOW
#include <sanitizer/common_interface_defs.h>
#endif

enum { MAX_REGIONS = 80, MAX_WARPS = 32, WARP_SIZE = 32, NOBODY = 0xFFFF, SEVERAL = 0xFFFE };

static inline int warp_of(int thread) { return thread / WARP_SIZE; }

/* ------------------------------------------------------------------ valid regions */

struct region {
    size_t offset, bytes;
};

static unsigned char *arena;
static size_t capacity;
static region regions[MAX_REGIONS];
static int region_count;
/* The arena of the block this OS thread runs (empty elsewhere): the access callbacks' fast
   test, safe to read on threads that run host code meanwhile. */
static __thread uintptr_t arena_begin, arena_span;

static void add_region(size_t offset, size_t bytes)
{
    if (region_count < MAX_REGIONS) regions[region_count++] = {offset, bytes};
}

static bool in_region(size_t offset, size_t bytes)
{
    for (int i = 0; i < region_count; i++)
        if (offset >= regions[i].offset && offset + bytes <= regions[i].offset + regions[i].bytes)
            return true;
    return false;
}

/* Where an offset lies: "dynamic shared memory + 96", "static __shared__ variable 2 (256
   bytes) + 4", or outside both. */
static void describe_offset(size_t offset, char *out, size_t size)
{
    for (int i = 0; i < region_count; i++)
        if (offset >= regions[i].offset && offset < regions[i].offset + regions[i].bytes) {
            if (i == 0) snprintf(out, size, "dynamic shared memory + %zu", offset);
            else
                snprintf(out, size, "static __shared__ variable %d (%zu bytes) + %zu", i,
                         regions[i].bytes, offset - regions[i].offset);
            return;
        }
    snprintf(out, size, "outside the block's %zu bytes of dynamic and its static shared memory",
             regions[0].bytes);
}

/* "file:line:column in function", the innermost frame first and the ones it was inlined into
   after it (the twin's wrapper, the helper, the kernel), at most SYMBOL_FRAMES of them. */
enum { SYMBOL_FRAMES = 4 };
void dcp_cuda_cpu_symbolize(uintptr_t pc, char *out, size_t size)
{
#ifdef DCP_CUDA_CPU_SHADOW /* linked with ASan's runtime, which symbolizes */
    if (pc) {
        char frames[2048];
        size_t used = 0;
        int n = 0;
        /* NUL-separated frames, an empty one last */
        __sanitizer_symbolize_pc((void *)(pc - 1), "%L in %f", frames, sizeof frames);
        out[0] = 0;
        for (const char *f = frames; *f && n < SYMBOL_FRAMES && used < size; f += strlen(f) + 1)
            used += (size_t)snprintf(out + used, size - used, "%s%s", n++ ? "\n          <- " : "",
                                     f);
        return;
    }
#endif
    snprintf(out, size, "pc %p", (void *)pc);
}

long dcp_cuda_cpu_shared_check(const void *address, size_t bytes, const char *instruction,
                               uintptr_t pc)
{
    const unsigned char *p = (const unsigned char *)address;
    char where[256], who[96], what[160], at[512];
    if (p >= arena && p + bytes <= arena + capacity && in_region((size_t)(p - arena), bytes))
        return (long)(p - arena);
    dcp_cuda_cpu_block_name(where, sizeof where);
    dcp_cuda_cpu_thread_name(dcp_cuda_cpu_running_thread(), who, sizeof who);
    dcp_cuda_cpu_symbolize(pc, at, sizeof at);
    if (p >= arena && p < arena + capacity) describe_offset((size_t)(p - arena), what, sizeof what);
    else snprintf(what, sizeof what, "not a shared-memory address");
    dcp_cuda_cpu_report("bounds", "%s of %zu bytes at %p (%s) by %s in %s, at %s", instruction,
                        bytes, address, what, who, where, at);
    return -1;
}

static void bind_arena(unsigned char *base, size_t bytes)
{
    arena = base;
    capacity = bytes;
    region_count = 0;
    arena_begin = (uintptr_t)base;
    arena_span = bytes;
}

static inline bool shared_address(uintptr_t a) { return a - arena_begin < arena_span; }

/* ------------------------------------------------------------------------ alignment
   An access wider than 4 bytes (an 8- or 16-byte vector, a pack: LDG/STG/LDS/STS .64/.128 on
   the device) must be aligned to its width, or the device faults with a misaligned address;
   the host would just do it. dcp_cuda.cu's wide accesses name their width
   (dcp_cuda_cpu_vector_access); in the checked build the access callbacks also check every
   8- and 16-byte load and store the compiler kept whole. A misaligned access stops its block,
   as the device's fault does (the host access would not be reached on a device). */
enum { NATURAL_ABOVE = 4 }; /* accesses wider than this are vectors */
static void misaligned(uintptr_t a, size_t bytes, int kind, uintptr_t pc)
{
    const int t = dcp_cuda_cpu_running_thread();
    if (t < 0) return; /* host code */
    char where[256], who[96], at[1024];
    dcp_cuda_cpu_block_name(where, sizeof where);
    dcp_cuda_cpu_thread_name(t, who, sizeof who);
    dcp_cuda_cpu_symbolize(pc, at, sizeof at);
    const char *space = shared_address(a)                ? "shared"
                        : dcp_cuda_cpu_device_address(a) ? "global"
                                                         : "local";
    dcp_cuda_cpu_report("alignment", "%zu-byte %s of %s memory at %p, which is not %zu-byte "
                        "aligned (misaligned address on a device) in %s, %s, at %s", bytes,
                        kind == DCP_CUDA_CPU_READ ? "load" : "store", space, (void *)a, bytes,
                        where, who, at);
    dcp_cuda_cpu_abort_block();
}

static int memory_class_of(uintptr_t a, bool store)
{
    if (shared_address(a)) return store ? DCP_CUDA_CPU_SHARED_STORE : DCP_CUDA_CPU_SHARED_LOAD;
    if (dcp_cuda_cpu_device_address(a))
        return store ? DCP_CUDA_CPU_GLOBAL_STORE : DCP_CUDA_CPU_GLOBAL_LOAD;
    return -1; /* a local: not profiled */
}

void dcp_cuda_cpu_vector_access(const void *p, size_t bytes, bool store)
{
    const uintptr_t a = (uintptr_t)p, pc = (uintptr_t)__builtin_return_address(0);
    if (bytes > NATURAL_ABOVE && !(bytes & (bytes - 1)) && (a & (bytes - 1)))
        misaligned(a, bytes, store ? DCP_CUDA_CPU_WRITE : DCP_CUDA_CPU_READ, pc);
    const int memory_class = dcp_cuda_cpu_profiling ? memory_class_of(a, store) : -1;
    if (memory_class >= 0) dcp_cuda_cpu_profile_wide(a, bytes, memory_class, pc);
}

#ifndef DCP_CUDA_CPU_SHADOW

void dcp_cuda_cpu_shadow_block(unsigned char *base, size_t bytes) { bind_arena(base, bytes); }
void dcp_cuda_cpu_shadow_allocated(size_t offset, size_t bytes) { add_region(offset, bytes); }
void dcp_cuda_cpu_shadow_unbind(void) { arena_begin = arena_span = 0; }
void dcp_cuda_cpu_shadow_sync_all(void) {}
void dcp_cuda_cpu_shadow_sync_warps(uint32_t) {}
void dcp_cuda_cpu_shadow_access(const void *, size_t, int, uintptr_t) {}

#else

/* ------------------------------------------------------------------------ the shadow
   Happens-before among a block's threads from its synchronisations: `sequence` counts them;
   an access is stamped with the count at the time; two accesses by threads of warps a and b
   are ordered when a synchronisation both warps took part in has a higher number than the
   earlier access's stamp (a block-wide barrier counts for every pair).
   One record of 16 bytes per byte of shared memory (small: the checks walk them on every
   access), reset when its region is allocated (the dynamic memory at a block's start, a static
   variable at its first use): the last write (thread, stamp, whether it was an atomic or a
   pending cp.async) and the reads since (one thread, or SEVERAL and their warps). */
enum {
    WRITTEN = 0x8000, ATOMIC = 0x4000, PENDING = 0x2000, /* flags of `writer` */
    THREAD = 0x1FFF                                        /* its thread id */
};
struct record {
    uint32_t write_stamp, read_stamp;
    uint32_t reader_warps; /* the warps of the readers since the write */
    uint16_t writer;       /* flags | thread; THREAD == NOBODY while never written */
    uint16_t reader;       /* thread, SEVERAL, or NOBODY */
};
static const record FRESH = {0, 0, 0, NOBODY & THREAD, NOBODY};

/* Where the last write and read were (only reports read them: kept apart from the records). */
struct record_pcs {
    uintptr_t write, read;
};

static inline bool same(const record &a, const record &b)
{
    return a.write_stamp == b.write_stamp && a.read_stamp == b.read_stamp &&
           a.reader_warps == b.reader_warps && a.writer == b.writer && a.reader == b.reader;
}

static std::vector<record> records;
static std::vector<record_pcs> pcs;
static uint32_t sequence, all_synced;
static uint32_t pair_synced[MAX_WARPS][MAX_WARPS];

/* Hazards already printed in this launch: kind and both places (one place inlined at many
   sites has many pcs). */
struct printed {
    int kind;
    std::string first, second;
};
static std::vector<printed> printed_hazards;

void dcp_cuda_cpu_shadow_unbind(void)
{
    arena_begin = arena_span = 0;
    printed_hazards.clear();
}

void dcp_cuda_cpu_shadow_sync_all(void) { all_synced = ++sequence; }

void dcp_cuda_cpu_shadow_sync_warps(uint32_t warps)
{
    const uint32_t stamp = ++sequence;
    for (int a = 0; a < MAX_WARPS; a++)
        if (warps >> a & 1)
            for (int b = 0; b < MAX_WARPS; b++)
                if (warps >> b & 1) pair_synced[a][b] = stamp;
}

static inline bool ordered(uint32_t stamp, int earlier_warp, int later_warp)
{
    return all_synced > stamp || pair_synced[earlier_warp][later_warp] > stamp;
}
uint32_t dcp_cuda_cpu_shadow_stamp(void) { return sequence; }
bool dcp_cuda_cpu_shadow_ordered(uint32_t stamp, int earlier_warp, int later_warp)
{
    return ordered(stamp, earlier_warp, later_warp);
}

void dcp_cuda_cpu_shadow_block(unsigned char *base, size_t bytes)
{
    bind_arena(base, bytes);
    if (records.size() < capacity) records.resize(capacity), pcs.resize(capacity);
    sequence = all_synced = 0;
    memset(pair_synced, 0, sizeof pair_synced);
}

void dcp_cuda_cpu_shadow_allocated(size_t offset, size_t bytes)
{
    add_region(offset, bytes);
    std::fill(records.begin() + (long)offset, records.begin() + (long)(offset + bytes), FRESH);
}

enum hazard_kind { RAW, WAR, WAW, UNINITIALIZED, PENDING_READ, PENDING_WRITE, PENDING_AGAIN };
static const char *const HAZARD_NAMES[] = {
    "racecheck: read-after-write hazard",
    "racecheck: write-after-read hazard",
    "racecheck: write-after-write hazard",
    "initcheck: read of shared memory no thread of the block wrote",
    "cp.async: read of a cp.async destination before its cp.async.wait_group",
    "cp.async: write to a cp.async destination before its cp.async.wait_group",
    "cp.async: a second cp.async to a destination before the first one's wait_group"};

static void hazard(int kind, size_t offset, int earlier, uintptr_t earlier_pc, int later,
                   uintptr_t later_pc, const char *earlier_what, const char *later_what)
{
    char where[256], what[160], a[128], b[96], at_a[1024], at_b[1024];
    at_a[0] = 0;
    if (earlier >= 0) dcp_cuda_cpu_symbolize(earlier_pc, at_a, sizeof at_a);
    dcp_cuda_cpu_symbolize(later_pc, at_b, sizeof at_b);
    for (const printed &p : printed_hazards)
        if (p.kind == kind && p.first == at_a && p.second == at_b) return;
    printed_hazards.push_back({kind, at_a, at_b});
    dcp_cuda_cpu_block_name(where, sizeof where);
    describe_offset(offset, what, sizeof what);
    dcp_cuda_cpu_thread_name(later, b, sizeof b);
    if (earlier < 0) {
        dcp_cuda_cpu_report(kind == UNINITIALIZED ? "initcheck" : "racecheck",
                            "%s at shared offset %zu (%s) in %s:\n    %-5s by %s\n       at %s",
                            strchr(HAZARD_NAMES[kind], ':') + 2, offset, what, where, later_what,
                            b, at_b);
        return;
    }
    if (earlier == SEVERAL) snprintf(a, sizeof a, "several threads");
    else dcp_cuda_cpu_thread_name(earlier, a, sizeof a);
    dcp_cuda_cpu_report(kind <= WAW ? "racecheck" : "cp.async",
                        "%s at shared offset %zu (%s) in %s:\n    %-5s by %s\n       at %s\n    "
                        "%-5s by %s\n       at %s\n    %s",
                        strchr(HAZARD_NAMES[kind], ':') + 2, offset, what, where, earlier_what,
                        a, at_a, later_what, b, at_b,
                        kind <= WAW ? "with no barrier between them that both threads passed"
                                    : "before the issuing thread's wait completed the copy");
}

/* Readers of r the thread of warp `warp` is not ordered after: any? */
static inline bool unordered_readers(const record &r, int thread, int warp)
{
    if (r.reader == NOBODY || r.reader == thread) return false;
    if (r.reader != SEVERAL) return !ordered(r.read_stamp, warp_of(r.reader), warp);
    for (int w = 0; w < MAX_WARPS; w++)
        if ((r.reader_warps >> w & 1) && !ordered(r.read_stamp, w, warp)) return true;
    return false;
}

static inline int writer_of(const record &r) { return r.writer & THREAD; }

static void read_byte(record &r, size_t offset, int t, int warp, uintptr_t pc, bool *reported)
{
    record_pcs &at = pcs[offset];
    if (!*reported) {
        if (r.writer & PENDING) {
            hazard(PENDING_READ, offset, writer_of(r), at.write, t, pc, "copy", "read");
            *reported = true;
        } else if (!(r.writer & WRITTEN)) {
            hazard(UNINITIALIZED, offset, -1, 0, t, pc, "", "read");
            *reported = true;
        } else if (writer_of(r) != t && !ordered(r.write_stamp, warp_of(writer_of(r)), warp)) {
            hazard(RAW, offset, writer_of(r), at.write, t, pc,
                   r.writer & ATOMIC ? "atomic" : "write", "read");
            *reported = true;
        }
    }
    if (r.reader == NOBODY || r.reader == t ||
        (r.reader != SEVERAL && ordered(r.read_stamp, warp_of(r.reader), warp))) {
        r.reader = (uint16_t)t;
        r.reader_warps = 1u << warp;
    } else {
        r.reader = SEVERAL;
        r.reader_warps |= 1u << warp;
    }
    r.read_stamp = sequence;
    at.read = pc;
}

static void write_byte(record &r, size_t offset, int kind, int t, int warp, uintptr_t pc,
                       bool *reported)
{
    record_pcs &at = pcs[offset];
    const bool atomic = kind == DCP_CUDA_CPU_ATOMIC;
    const char *what = atomic ? "atomic" : kind == DCP_CUDA_CPU_PENDING ? "copy" : "write";
    if (!*reported) {
        if (r.writer & PENDING) {
            hazard(kind == DCP_CUDA_CPU_PENDING ? PENDING_AGAIN : PENDING_WRITE, offset,
                   writer_of(r), at.write, t, pc, "copy", what);
            *reported = true;
        } else if ((r.writer & WRITTEN) && writer_of(r) != t &&
                   !(atomic && (r.writer & ATOMIC)) &&
                   !ordered(r.write_stamp, warp_of(writer_of(r)), warp)) {
            hazard(WAW, offset, writer_of(r), at.write, t, pc,
                   r.writer & ATOMIC ? "atomic" : "write", what);
            *reported = true;
        } else if (unordered_readers(r, t, warp)) {
            hazard(WAR, offset, r.reader, at.read, t, pc, "read", what);
            *reported = true;
        }
    }
    r.writer = (uint16_t)(t | WRITTEN | (atomic ? ATOMIC : 0) |
                          (kind == DCP_CUDA_CPU_PENDING ? PENDING : 0));
    r.write_stamp = sequence;
    at.write = pc;
    r.reader = NOBODY;
    r.reader_warps = 0;
}

/* A cp.async lands: written by its thread now (reads of it before were reported). */
static void complete_byte(record &r, size_t offset, int t, uintptr_t pc)
{
    r.writer = (uint16_t)(t | WRITTEN);
    r.write_stamp = sequence;
    r.reader = NOBODY;
    r.reader_warps = 0;
    pcs[offset].write = pc;
}

void dcp_cuda_cpu_shadow_access(const void *address, size_t bytes, int kind, uintptr_t pc)
{
    const int t = dcp_cuda_cpu_running_thread();
    const unsigned char *p = (const unsigned char *)address;
    if (t < 0 || p < arena || p >= arena + capacity) return;
    const size_t offset = (size_t)(p - arena);
    const int warp = warp_of(t);
    bool reported = false;
    if (!in_region(offset, bytes)) {
        if (kind != DCP_CUDA_CPU_COMPLETE) dcp_cuda_cpu_shared_check(address, bytes, "access", pc);
        return;
    }
    /* The bytes of one access mostly share their history (a 16-byte row one thread copied):
       a byte whose record equals the previous byte's old record gets its new record. */
    record before = FRESH, after = FRESH;
    for (size_t i = 0; i < bytes; i++) {
        record &r = records[offset + i];
        if (i > 0 && same(r, before)) {
            r = after;
            (kind == DCP_CUDA_CPU_READ ? pcs[offset + i].read : pcs[offset + i].write) = pc;
            continue;
        }
        before = r;
        if (kind == DCP_CUDA_CPU_READ) read_byte(r, offset + i, t, warp, pc, &reported);
        else if (kind == DCP_CUDA_CPU_COMPLETE) complete_byte(r, offset + i, t, pc);
        else write_byte(r, offset + i, kind, t, warp, pc, &reported);
        after = r;
    }
}

/* ------------------------------------------------------------- the access callbacks
   Called by the instrumented dcp_cuda.cu for each load and store (size in the name, or
   loadN/storeN) and memory intrinsic, before ASan's own check of the same access. */
extern "C" {
void __asan_load1(uintptr_t);
void __asan_load2(uintptr_t);
void __asan_load4(uintptr_t);
void __asan_load8(uintptr_t);
void __asan_load16(uintptr_t);
void __asan_loadN(uintptr_t, uintptr_t);
void __asan_store1(uintptr_t);
void __asan_store2(uintptr_t);
void __asan_store4(uintptr_t);
void __asan_store8(uintptr_t);
void __asan_store16(uintptr_t);
void __asan_storeN(uintptr_t, uintptr_t);
void *__asan_memcpy(void *, const void *, uintptr_t);
void *__asan_memmove(void *, const void *, uintptr_t);
void *__asan_memset(void *, int, uintptr_t);
}


/* One access of the instrumented code: shared memory to its shadow, writes of global memory
   to the global shadow (memory.cc); `natural`: the access must be aligned to its size. Most
   accesses are the kernels' own locals (fiber stacks): a narrow load of one costs a compare. */
/* A plain access of the instrumented code as a request of its lane, unless it is part of the
   wide access the thread just named (dcp_cuda_cpu_vector_access). */
static void profile(uintptr_t a, size_t bytes, int kind, uintptr_t pc)
{
    const int memory_class = memory_class_of(a, kind == DCP_CUDA_CPU_WRITE);
    if (memory_class >= 0 && !dcp_cuda_cpu_profile_split(a, bytes))
        dcp_cuda_cpu_profile_access(a, bytes, memory_class, pc);
}

static inline void access(uintptr_t a, size_t bytes, int kind, bool natural, uintptr_t pc)
{
    if (dcp_cuda_cpu_profiling) profile(a, bytes, kind, pc);
    if (shared_address(a)) {
        if (natural && (a & (bytes - 1))) misaligned(a, bytes, kind, pc);
        dcp_cuda_cpu_shadow_access((const void *)a, bytes, kind, pc);
    } else if ((natural || kind == DCP_CUDA_CPU_WRITE) && dcp_cuda_cpu_device_address(a)) {
        if (natural && (a & (bytes - 1))) misaligned(a, bytes, kind, pc);
        if (kind == DCP_CUDA_CPU_WRITE) dcp_cuda_cpu_global_write((const void *)a, bytes, false, pc);
    }
}

#define DCP_CUDA_CPU_ACCESS(name, bytes, kind)                                                     \
    extern "C" void dcp_cuda_cpu_access_##name(uintptr_t a)                                        \
    {                                                                                              \
        access(a, bytes, kind, bytes > NATURAL_ABOVE, (uintptr_t)__builtin_return_address(0));    \
        __asan_##name(a);                                                                          \
    }
DCP_CUDA_CPU_ACCESS(load1, 1, DCP_CUDA_CPU_READ)
DCP_CUDA_CPU_ACCESS(load2, 2, DCP_CUDA_CPU_READ)
DCP_CUDA_CPU_ACCESS(load4, 4, DCP_CUDA_CPU_READ)
DCP_CUDA_CPU_ACCESS(load8, 8, DCP_CUDA_CPU_READ)
DCP_CUDA_CPU_ACCESS(load16, 16, DCP_CUDA_CPU_READ)
DCP_CUDA_CPU_ACCESS(store1, 1, DCP_CUDA_CPU_WRITE)
DCP_CUDA_CPU_ACCESS(store2, 2, DCP_CUDA_CPU_WRITE)
DCP_CUDA_CPU_ACCESS(store4, 4, DCP_CUDA_CPU_WRITE)
DCP_CUDA_CPU_ACCESS(store8, 8, DCP_CUDA_CPU_WRITE)
DCP_CUDA_CPU_ACCESS(store16, 16, DCP_CUDA_CPU_WRITE)
#undef DCP_CUDA_CPU_ACCESS

extern "C" void dcp_cuda_cpu_access_loadN(uintptr_t a, uintptr_t n)
{
    access(a, n, DCP_CUDA_CPU_READ, false, (uintptr_t)__builtin_return_address(0));
    __asan_loadN(a, n);
}
extern "C" void dcp_cuda_cpu_access_storeN(uintptr_t a, uintptr_t n)
{
    access(a, n, DCP_CUDA_CPU_WRITE, false, (uintptr_t)__builtin_return_address(0));
    __asan_storeN(a, n);
}
extern "C" void *dcp_cuda_cpu_access_memcpy(void *d, const void *s, uintptr_t n)
{
    const uintptr_t pc = (uintptr_t)__builtin_return_address(0);
    access((uintptr_t)s, n, DCP_CUDA_CPU_READ, false, pc);
    access((uintptr_t)d, n, DCP_CUDA_CPU_WRITE, false, pc);
    return __asan_memcpy(d, s, n);
}
extern "C" void *dcp_cuda_cpu_access_memmove(void *d, const void *s, uintptr_t n)
{
    const uintptr_t pc = (uintptr_t)__builtin_return_address(0);
    access((uintptr_t)s, n, DCP_CUDA_CPU_READ, false, pc);
    access((uintptr_t)d, n, DCP_CUDA_CPU_WRITE, false, pc);
    return __asan_memmove(d, s, n);
}
extern "C" void *dcp_cuda_cpu_access_memset(void *d, int value, uintptr_t n)
{
    access((uintptr_t)d, n, DCP_CUDA_CPU_WRITE, false, (uintptr_t)__builtin_return_address(0));
    return __asan_memset(d, value, n);
}

#endif /* DCP_CUDA_CPU_SHADOW */
