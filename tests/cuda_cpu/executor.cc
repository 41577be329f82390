/* executor.cc - the CPU execution model's kernel executor (tests/cuda_cpu/cuda_cpu.h says
   what the model is). A grid runs inside a host function on a stream: block after block in
   an order drawn from the seed, each block's threads as cooperative fibers on the calling OS
   thread (one grid at a time in the process). A fiber runs until it reaches a barrier or a
   warp collective it must wait at; the last thread to arrive completes the operation for all
   of them, so a collective's result is computed once, from every lane's operands, as the PTX
   ISA's layouts say. The executor's own loads and stores do not reach the shadow (checkers.cc):
   the twins report their shared accesses explicitly, attributed to the kernel code that issued
   them. */
#include "model.h"
#include "profile.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

#ifdef DCP_CUDA_CPU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

/* ------------------------------------------------------------------------ constants */

enum {
    WARP_SIZE = 32,
    MAX_THREADS = 1024,
    MAX_WARPS = MAX_THREADS / WARP_SIZE,
    NAMED_BARRIERS = 16,   /* bar.sync ids 0..15; 0 is __syncthreads */
    STATIC_VARIABLES = 64, /* static __shared__ declarations a block may reach */
    COPY_BYTES = 16,       /* cp.async.cg moves 16 bytes */
    LDMATRIX_ROW_BYTES = 16,
    REPORTS_PER_LAUNCH = 8 /* printed; the rest are counted */
};
static const size_t STACK_BYTES = 256 * 1024; /* per fiber: sanitizer frames are large */
static const size_t GUARD_BYTES = 64 * 1024;  /* unmapped below each stack: overflow faults */
static const size_t ARENA_ALIGNMENT = 1024;   /* a 128-byte swizzle atom (wgmma tiles) */
static const size_t STATIC_REDZONE = 64;      /* between dynamic and static shared memory */
static const size_t STATIC_ALIGNMENT = 16;
static const size_t DEFAULT_DYNAMIC_SHARED = 48 * 1024; /* without cudaFuncSetAttribute */
static const unsigned char POISON = 0xFF; /* NaN in float32, bf16 and fp16, every byte */
static const unsigned FULL_MASK = 0xffffffffu;

/* ------------------------------------------------------------------------- profiles
   In the order of dcp_cuda_cpu_profile's fields: name, device; compute capability; SMs;
   threads per block, per SM, blocks per SM; block and grid dimensions; shared memory per
   block, per block opted in, per SM, reserved per block; registers per block, per SM; global
   memory; L2; clocks (kHz); memory bus width (bits). From the devices' data sheets and the
   CUDA programming guide's table of compute capabilities. */
static const dcp_cuda_cpu_profile PROFILES[] = {
    {"sm_80", "NVIDIA A100-SXM4-80GB (dcp CPU execution model)", 8, 0, 108, 1024, 2048, 32,
     {1024, 1024, 64}, {2147483647, 65535, 65535}, 49152, 166912, 167936, 1024, 65536, 65536,
     (size_t)80 << 30, 40 << 20, 1410000, 1593000, 5120},
    {"sm_89", "NVIDIA L40S (dcp CPU execution model)", 8, 9, 142, 1024, 1536, 24,
     {1024, 1024, 64}, {2147483647, 65535, 65535}, 49152, 101376, 102400, 1024, 65536, 65536,
     (size_t)48 << 30, 96 << 20, 2520000, 9001000, 384},
    {"sm_90", "NVIDIA H100 80GB HBM3 (dcp CPU execution model)", 9, 0, 132, 1024, 2048, 32,
     {1024, 1024, 64}, {2147483647, 65535, 65535}, 49152, 232448, 233472, 1024, 65536, 65536,
     (size_t)80 << 30, 50 << 20, 1980000, 2619000, 5120},
};

const dcp_cuda_cpu_profile *dcp_cuda_cpu_profile_in_force(void)
{
    static const dcp_cuda_cpu_profile *chosen = [] {
        const char *name = getenv("DCP_CUDA_CPU_DEVICE");
        if (!name || !*name) return &PROFILES[0];
        for (const dcp_cuda_cpu_profile &p : PROFILES)
            if (strcmp(p.name, name) == 0) return &p;
        fprintf(stderr, "dcp cuda-cpu: DCP_CUDA_CPU_DEVICE=%s is not sm_80, sm_89 or sm_90\n",
                name);
        exit(2);
    }();
    return chosen;
}

const char *dcp_cuda_cpu_profile_name(void) { return dcp_cuda_cpu_profile_in_force()->name; }

/* ----------------------------------------------------------------- process-wide state
   The registry of kernels (their attributes), the seed, the counters: shared by every OS
   thread that launches; one grid runs at a time (grid_lock). */
/* What the device build says of a kernel (tests/cuda_cpu/kernel_limits.inc, generated from
   ptxas's resource usage and the PTX by kernel_limits.py; test_kernel_limits.sh fails when it
   is stale): per mangled name and architecture of its SASS. */
struct kernel_limits {
    const char *name;
    int arch;        /* 80: the sm_80 SASS (A100, L40S profiles), 90: sm_90a (H100) */
    int registers;   /* per thread */
    int max_threads; /* __launch_bounds__'s first argument (.maxntid), 0 without */
    int min_blocks;  /* its second (.minnctapersm), 0 without */
    int static_shared, barriers, stack, spill_stores, spill_loads; /* bytes, except barriers */
};
static const kernel_limits KERNEL_LIMITS[] = {
#include "kernel_limits.inc"
};

/* Register allocation as the CUDA occupancy calculator has it for compute capability 8.x and
   9.0: registers go to warps in units of 256 (8 per thread), and warps to an SM's schedulers
   in groups of 4; shared memory to blocks in units of 128 bytes. */
enum { REGISTER_UNIT = 256, WARP_ALLOCATION_GRANULARITY = 4, SHARED_ALLOCATION_UNIT = 128 };
static const int HOPPER_MAJOR = 9; /* profiles from this compute capability run sm_90a SASS */
static const int ARCH_AMPERE = 80, ARCH_HOPPER = 90;

struct function_info {
    int max_dynamic_shared = -1; /* cudaFuncAttributeMaxDynamicSharedMemorySize, once set */
    long static_shared = -1;     /* bytes, once a block has run to its end */
    const kernel_limits *limits = nullptr; /* none for a kernel outside dcp_cuda.cu */
    const void *address = nullptr;         /* the kernel's function */
    char name[160] = "";
};

/* Static shared memory of a kernel: the device build's, else as the model has seen it so far;
   and the dynamic shared memory a launch may ask: what the attribute allows, else 48 KB less
   the static. */
static size_t static_of(const function_info &f)
{
    if (f.limits) return (size_t)f.limits->static_shared;
    return f.static_shared > 0 ? (size_t)f.static_shared : 0;
}
static size_t max_dynamic_of(const function_info &f)
{
    return f.max_dynamic_shared >= 0 ? (size_t)f.max_dynamic_shared
                                      : DEFAULT_DYNAMIC_SHARED - static_of(f);
}

static std::mutex registry_lock;
static std::unordered_map<const void *, function_info> registry;
static std::mutex grid_lock;
static std::atomic<uint64_t> seed{1}, launches{0}, faults{0};
static std::atomic<int> seed_set{0};

void dcp_cuda_cpu_set_seed(uint64_t value)
{
    seed = value;
    seed_set = 1;
}
uint64_t dcp_cuda_cpu_faults(void) { return faults; }

/* The device build's limits of a kernel (by its mangled name) for the profile in force. */
static const kernel_limits *limits_of(const char *mangled)
{
    const int arch = dcp_cuda_cpu_profile_in_force()->major >= HOPPER_MAJOR ? ARCH_HOPPER
                                                                            : ARCH_AMPERE;
    for (const kernel_limits &k : KERNEL_LIMITS)
        if (k.arch == arch && strcmp(k.name, mangled) == 0) return &k;
    return nullptr;
}

/* The kernel's demangled name and its limits (its symbol: executables link with -rdynamic). */
static void describe_function(const void *function, function_info &f)
{
    Dl_info info;
    snprintf(f.name, sizeof f.name, "kernel %p", function);
    if (dladdr(function, &info) && info.dli_sname) {
        int status = 0;
        char *demangled = abi::__cxa_demangle(info.dli_sname, NULL, NULL, &status);
        snprintf(f.name, sizeof f.name, "%s",
                 status == 0 && demangled ? demangled : info.dli_sname);
        free(demangled);
        f.limits = limits_of(info.dli_sname);
    }
}

static function_info &info_of(const void *function)
{
    function_info &info = registry[function];
    info.address = function;
    if (!info.name[0]) describe_function(function, info);
    return info;
}

/* Registers a warp of the kernel holds, as allocated (0 when unknown). */
static int warp_registers(const function_info &f)
{
    if (!f.limits) return 0;
    const int per_warp = f.limits->registers * WARP_SIZE;
    return (per_warp + REGISTER_UNIT - 1) / REGISTER_UNIT * REGISTER_UNIT;
}

/* Threads a block of the kernel may have: its __launch_bounds__, and what its registers
   allow, within the device's limit. */
static int max_threads_of(const function_info &f)
{
    const dcp_cuda_cpu_profile &p = *dcp_cuda_cpu_profile_in_force();
    int n = p.max_threads_per_block;
    if (f.limits && f.limits->max_threads > 0 && f.limits->max_threads < n)
        n = f.limits->max_threads;
    const int per_warp = warp_registers(f);
    if (per_warp > 0 && p.registers_per_block / per_warp * WARP_SIZE < n)
        n = p.registers_per_block / per_warp * WARP_SIZE;
    return n;
}

/* ------------------------------------------------------------------------- fibers
   A fiber is a stack and a saved stack pointer. x86-64: a hand-written switch saves the
   callee-saved registers on the old stack and returns on the new one (no signal mask, no
   system call, unlike swapcontext); elsewhere ucontext. Under ASan every switch is announced
   (__sanitizer_start_switch_fiber / __sanitizer_finish_switch_fiber) so that its stack
   checks follow the fiber. */
struct fiber {
    unsigned char *stack = nullptr; /* lowest address; STACK_BYTES above it is the top */
    void *fake_stack = nullptr;     /* ASan's, across a switch */
#if defined(__x86_64__)
    void *sp = nullptr;
#else
    ucontext_t context;
#endif
};

#if defined(__x86_64__)
extern "C" void dcp_cuda_cpu_switch(void **save_sp, void *load_sp);
extern "C" void dcp_cuda_cpu_fiber_start(void);
/* switch: push rbp rbx r12-r15 on the old stack, save rsp, load the new, pop, return.
   fiber_start: the first return of a new fiber lands here with r12 = its thread and r13 =
   the entry function; rsp is 16-byte aligned before the call, as the ABI wants. */
__asm__(".text\n"
        ".globl dcp_cuda_cpu_switch\n"
        ".hidden dcp_cuda_cpu_switch\n"
        ".type dcp_cuda_cpu_switch,@function\n"
        "dcp_cuda_cpu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size dcp_cuda_cpu_switch,.-dcp_cuda_cpu_switch\n"
        ".globl dcp_cuda_cpu_fiber_start\n"
        ".hidden dcp_cuda_cpu_fiber_start\n"
        ".type dcp_cuda_cpu_fiber_start,@function\n"
        "dcp_cuda_cpu_fiber_start:\n"
        "  movq %r12, %rdi\n"
        "  callq *%r13\n"
        "  ud2\n"
        ".size dcp_cuda_cpu_fiber_start,.-dcp_cuda_cpu_fiber_start\n");
#endif

struct thread;
static void fiber_main(thread *t);

/* ------------------------------------------------------------------ block state */

enum thread_state { RUNNABLE, AT_BARRIER, AT_COLLECTIVE, DONE };

/* A cp.async of the thread not yet complete: the bytes were read at issue (where ASan checks
   the source) and land at the wait that completes `group`. */
struct pending_copy {
    unsigned char *destination;
    unsigned char data[COPY_BYTES];
    uint64_t group;
    uintptr_t pc;
};

struct thread {
    dcp_cuda_cpu_thread_view view;
    fiber f;
    thread_state state = DONE;
    int id = 0, warp = 0, lane = 0;
    int barrier = 0; /* the id it waits at */
    std::vector<pending_copy> copies;
    uint64_t committed = 0; /* cp.async groups committed: the open group's number */
};

enum collective_kind { SYNCWARP, SHUFFLE, BALLOT, LDMATRIX, MMA };
static const char *const COLLECTIVE_NAMES[] = {"__syncwarp", "shuffle", "vote", "ldmatrix",
                                               "mma.sync"};
enum { COLLECTIVE_IN = 10, COLLECTIVE_OUT = 4 };

/* One warp's collective in progress: every lane's operands, then its results. */
struct warp_state {
    unsigned arrived = 0, exited = 0;
    int kind = 0;
    unsigned mask = 0;
    int parameter = 0; /* the same on every lane: shuffle mode and width, ldmatrix .trans */
    uint32_t in[WARP_SIZE][COLLECTIVE_IN];
    const unsigned char *address[WARP_SIZE];
    uintptr_t pc[WARP_SIZE];
    uint32_t out[WARP_SIZE][COLLECTIVE_OUT];
};

struct barrier_state {
    int arrived = 0, expected = 0;
    uint32_t warps = 0;
    uintptr_t pc = 0; /* where the phase's first thread reached it */
};

struct static_variable {
    const void *key;
    size_t offset;
};

/* Everything one grid's execution needs; one per process, owned by whoever holds grid_lock. */
struct engine {
    thread threads[MAX_THREADS];
    fiber runner; /* the OS thread's own stack */
#ifdef DCP_CUDA_CPU_ASAN
    const void *runner_bottom = nullptr;
    size_t runner_size = 0;
    bool from_runner = false;
#endif
    /* the grid */
    dcp_cuda_cpu_kernel *kernel = nullptr;
    function_info *function = nullptr;
    dim3 grid, block;
    size_t dynamic_shared = 0;
    uint64_t launch = 0;
    int reports = 0;
    bool failed = false; /* a fatal fault: the remaining blocks do not run */
    /* the block */
    uint3 block_index;
    int count = 0, warps = 0, live = 0;
    thread *running = nullptr;
    bool aborted = false;
    barrier_state barriers[NAMED_BARRIERS];
    warp_state warp[MAX_WARPS];
    unsigned char *arena = nullptr; /* ARENA_ALIGNMENT aligned, capacity bytes */
    size_t capacity = 0, static_end = 0;
    static_variable statics[STATIC_VARIABLES];
    int static_count = 0;
};

static engine *the_engine;
static __thread engine *running_engine; /* set while this OS thread runs a grid */
__thread const dcp_cuda_cpu_thread_view *dcp_cuda_cpu_self;

static engine &self_engine() { return *running_engine; }
static thread &self_thread() { return *running_engine->running; }

/* -------------------------------------------------------------------- reports */

int dcp_cuda_cpu_running_thread(void)
{
    return running_engine && running_engine->running ? running_engine->running->id : -1;
}

void dcp_cuda_cpu_thread_name(int t, char *out, size_t size)
{
    const uint3 &i = running_engine->threads[t].view.thread_index;
    snprintf(out, size, "thread (%u,%u,%u) [warp %d lane %d]", i.x, i.y, i.z, t / WARP_SIZE,
             t % WARP_SIZE);
}

void dcp_cuda_cpu_block_name(char *out, size_t size)
{
    const engine &e = *running_engine;
    snprintf(out, size, "%s, launch %llu, block (%u,%u,%u) of grid (%u,%u,%u)", e.function->name,
             (unsigned long long)e.launch, e.block_index.x, e.block_index.y, e.block_index.z,
             e.grid.x, e.grid.y, e.grid.z);
}

void dcp_cuda_cpu_report(const char *checker, const char *format, ...)
{
    engine *e = running_engine;
    faults++;
    if (e && ++e->reports > REPORTS_PER_LAUNCH) {
        if (e->reports == REPORTS_PER_LAUNCH + 1)
            fprintf(stderr, "dcp cuda-cpu: more reports of this launch are counted, not printed\n");
        return;
    }
    va_list args;
    va_start(args, format);
    fprintf(stderr, "dcp cuda-cpu %s: ", checker);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    va_end(args);
}

/* --------------------------------------------------------------------- switching */

static void prepare_fiber(thread &t)
{
    if (!t.f.stack) {
        unsigned char *stack = (unsigned char *)mmap(NULL, GUARD_BYTES + STACK_BYTES,
                                                     PROT_READ | PROT_WRITE,
                                                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                                                     -1, 0);
        if (stack == MAP_FAILED || mprotect(stack, GUARD_BYTES, PROT_NONE) != 0) {
            perror("dcp cuda-cpu: fiber stack");
            abort();
        }
        t.f.stack = stack + GUARD_BYTES;
    }
#if defined(__x86_64__)
    void **top = (void **)(t.f.stack + STACK_BYTES);
    *--top = (void *)dcp_cuda_cpu_fiber_start; /* where the first switch returns */
    *--top = NULL;                              /* rbp */
    *--top = NULL;                              /* rbx */
    *--top = (void *)&t;                        /* r12: the thread */
    *--top = (void *)fiber_main;                /* r13: the entry */
    *--top = NULL;                              /* r14 */
    *--top = NULL;                              /* r15 */
    t.f.sp = top;
#else
    getcontext(&t.f.context);
    t.f.context.uc_stack.ss_sp = t.f.stack;
    t.f.context.uc_stack.ss_size = STACK_BYTES;
    t.f.context.uc_link = NULL;
    makecontext(&t.f.context, (void (*)(void))fiber_main, 1, &t); /* glibc passes a pointer */
#endif
}

/* Leaves `from` (for good when `finished`) for `to`; returns when something switches back. */
static void switch_fiber(fiber &from, fiber &to, bool finished, const void *to_bottom,
                         size_t to_size)
{
#ifdef DCP_CUDA_CPU_ASAN
    __sanitizer_start_switch_fiber(finished ? NULL : &from.fake_stack, to_bottom, to_size);
#else
    (void)finished, (void)to_bottom, (void)to_size;
#endif
#if defined(__x86_64__)
    dcp_cuda_cpu_switch(&from.sp, to.sp);
#else
    swapcontext(&from.context, &to.context);
#endif
#ifdef DCP_CUDA_CPU_ASAN
    __sanitizer_finish_switch_fiber(from.fake_stack, NULL, NULL);
#endif
}

static void switch_to_thread(fiber &from, thread &to, bool finished)
{
    engine &e = self_engine();
    e.running = &to;
    dcp_cuda_cpu_self = &to.view;
    switch_fiber(from, to.f, finished, to.f.stack, STACK_BYTES);
}

static void switch_to_runner(fiber &from, bool finished)
{
    engine &e = self_engine();
    e.running = NULL;
    dcp_cuda_cpu_self = NULL;
#ifdef DCP_CUDA_CPU_ASAN
    switch_fiber(from, e.runner, finished, e.runner_bottom, e.runner_size);
#else
    switch_fiber(from, e.runner, finished, NULL, 0);
#endif
}

/* The running thread waits (its state says for what): the next runnable thread after it
   runs; with none, the block is finished (every thread done) or deadlocked. */
[[noreturn]] static void deadlock(void);
static void schedule(bool finished)
{
    engine &e = self_engine();
    thread &me = *e.running;
    for (int step = 1, id = me.id + 1; step <= e.count; step++, id++) {
        if (id == e.count) id = 0;
        thread &next = e.threads[id];
        if (next.state == RUNNABLE) {
            if (&next != &me) switch_to_thread(me.f, next, finished);
            return;
        }
    }
    if (e.live > 0) deadlock();
    switch_to_runner(me.f, true);
}

[[noreturn]] static void abort_block(void);
void dcp_cuda_cpu_abort_block(void) { abort_block(); }

[[noreturn]] static void abort_block(void)
{
    engine &e = self_engine();
    e.aborted = true;
    e.failed = true;
    switch_to_runner(e.running->f, true);
    abort(); /* never resumed */
}

/* ------------------------------------------------------------------ fiber entry */

static void barrier_try_complete(int id);

static void fiber_main(thread *t)
{
#ifdef DCP_CUDA_CPU_ASAN
    {
        engine &e = self_engine();
        const void *bottom = NULL;
        size_t size = 0;
        __sanitizer_finish_switch_fiber(NULL, &bottom, &size);
        if (e.from_runner) {
            e.runner_bottom = bottom, e.runner_size = size;
            e.from_runner = false;
        }
    }
#endif
    engine &e = self_engine();
    e.kernel->run_thread();
    /* exit: the warp's collectives and the block's barriers stop counting this thread */
    t->state = DONE;
    e.live--;
    e.warp[t->warp].exited |= 1u << t->lane;
    barrier_try_complete(0);
    schedule(true);
    abort(); /* a finished fiber is never resumed */
}

/* --------------------------------------------------------------------- barriers
   bar.sync id, count: complete when `count` threads arrived (id 0 without a count: every
   thread still running, as __syncthreads on a device where exited threads no longer count).
   Completion is a synchronisation for the shadow: of the whole block, or of the warps that
   took part. */
static void barrier_release(int id)
{
    engine &e = self_engine();
    barrier_state &b = e.barriers[id];
    const uint32_t all = e.warps == 32 ? FULL_MASK : (1u << e.warps) - 1;
    for (int i = 0; i < e.count; i++)
        if (e.threads[i].state == AT_BARRIER && e.threads[i].barrier == id)
            e.threads[i].state = RUNNABLE;
    if ((b.warps & all) == all) dcp_cuda_cpu_shadow_sync_all();
    else dcp_cuda_cpu_shadow_sync_warps(b.warps);
    if (dcp_cuda_cpu_profiling) {
        dcp_cuda_cpu_profile_sync(b.warps);
        dcp_cuda_cpu_profile_event(DCP_CUDA_CPU_EVENT_BARRIER, __builtin_popcount(b.warps));
    }
    b.arrived = 0, b.warps = 0;
}

static void barrier_try_complete(int id)
{
    engine &e = self_engine();
    barrier_state &b = e.barriers[id];
    if (b.arrived > 0 && b.arrived == (id == 0 && b.expected < 0 ? e.live : b.expected))
        barrier_release(id);
}

/* Threads of one phase must reach the barrier at one place: __syncthreads in divergent code
   (one in each branch) is undefined on a device (synccheck's "divergent barrier"); the model,
   which counts arrivals per barrier, would take the two for one. The place is the call's pc,
   which holds in the checked build (clang -O1); g++'s optimiser duplicated a barrier of
   test_cuda_primitives into two copies, so the plain build does not check. */
static void check_place(barrier_state &b, int id, uintptr_t pc)
{
#ifndef DCP_CUDA_CPU_SHADOW
    (void)b, (void)id, (void)pc;
    return;
#endif
    if (b.arrived == 0) b.pc = pc;
    if (b.pc == pc) return;
    char first[1024], second[1024];
    dcp_cuda_cpu_symbolize(b.pc, first, sizeof first);
    dcp_cuda_cpu_symbolize(pc, second, sizeof second);
    dcp_cuda_cpu_report("synccheck", "barrier %d reached at two places in one phase (divergent "
                        "__syncthreads: undefined on a device):\n    %s\n    %s", id, first,
                        second);
    abort_block();
}

static void bar_sync(int id, int count, uintptr_t pc)
{
    engine &e = self_engine();
    thread &me = self_thread();
    if (id < 0 || id >= NAMED_BARRIERS || (count >= 0 && (count % WARP_SIZE || count == 0)))
        dcp_cuda_cpu_trap("bar.sync with a barrier id outside 0..15 or a count that is not a "
                          "positive multiple of 32");
    barrier_state &b = e.barriers[id];
    check_place(b, id, pc);
    if (b.arrived == 0) b.expected = count;
    else if (b.expected != count) {
        dcp_cuda_cpu_report("barrier", "bar.sync %d reached with thread counts %d and %d in the "
                            "same phase", id, b.expected, count);
        abort_block();
    }
    b.arrived++;
    b.warps |= 1u << me.warp;
    me.state = AT_BARRIER;
    me.barrier = id;
    barrier_try_complete(id);
    if (me.state != RUNNABLE) schedule(false);
}

void dcp_cuda_cpu_bar_sync(int id, int count)
{
    bar_sync(id, count, (uintptr_t)__builtin_return_address(0));
}
void dcp_cuda_cpu_syncthreads(void) { bar_sync(0, -1, (uintptr_t)__builtin_return_address(0)); }

/* ------------------------------------------------------------------- collectives */

typedef void (*collective_fn)(warp_state &w);

static void complete_collective(warp_state &w, int warp, collective_fn fn)
{
    engine &e = self_engine();
    fn(w);
    for (int lane = 0; lane < WARP_SIZE; lane++)
        if (w.mask >> lane & 1) e.threads[warp * WARP_SIZE + lane].state = RUNNABLE;
    /* only __syncwarp orders memory among its lanes: a shuffle, vote, ldmatrix or mma is a
       rendezvous of values, not a fence (the PTX memory model), so the shadow is not told */
    if (w.kind == SYNCWARP) dcp_cuda_cpu_shadow_sync_warps(1u << warp);
    if (dcp_cuda_cpu_profiling) {
        dcp_cuda_cpu_profile_sync(1u << warp);
        if (w.kind != LDMATRIX) /* a memory instruction: measured as one */
            dcp_cuda_cpu_profile_event(w.kind == MMA ? DCP_CUDA_CPU_EVENT_MMA
                                                     : DCP_CUDA_CPU_EVENT_COLLECTIVE, 1);
    }
    w.arrived = 0;
}

/* The running lane takes part in a collective over `mask`: its operands go in, and when every
   lane of the mask has arrived the last one computes all results (fn); `out` is this lane's. */
DCP_CUDA_CPU_UNCHECKED static void collective(int kind, unsigned mask, int parameter,
                                              const uint32_t *in, int in_words,
                       const void *address, uintptr_t pc, uint32_t *out, int out_words,
                       collective_fn fn)
{
    engine &e = self_engine();
    thread &me = self_thread();
    warp_state &w = e.warp[me.warp];
    const unsigned present = e.count - me.warp * WARP_SIZE >= WARP_SIZE
                                 ? FULL_MASK
                                 : (1u << (e.count - me.warp * WARP_SIZE)) - 1;
    if (!(mask >> me.lane & 1)) {
        dcp_cuda_cpu_report("collective", "%s with mask 0x%08x on lane %d, which the mask leaves "
                            "out", COLLECTIVE_NAMES[kind], mask, me.lane);
        abort_block();
    }
    if (mask & (~present | w.exited)) {
        dcp_cuda_cpu_report("collective", "%s with mask 0x%08x over lanes that do not exist or "
                            "have exited (0x%08x): it can never complete",
                            COLLECTIVE_NAMES[kind], mask, mask & (~present | w.exited));
        abort_block();
    }
    if (w.arrived == 0) {
        w.kind = kind, w.mask = mask, w.parameter = parameter;
    } else if (w.kind != kind || w.mask != mask || w.parameter != parameter) {
        dcp_cuda_cpu_report("collective", "warp %d: lane %d reached %s (mask 0x%08x) while lanes "
                            "0x%08x wait at %s (mask 0x%08x): divergent warp collectives",
                            me.warp, me.lane, COLLECTIVE_NAMES[kind], mask, w.arrived,
                            COLLECTIVE_NAMES[w.kind], w.mask);
        abort_block();
    }
    for (int i = 0; i < in_words; i++) w.in[me.lane][i] = in[i];
    w.address[me.lane] = (const unsigned char *)address;
    w.pc[me.lane] = pc;
    w.arrived |= 1u << me.lane;
    me.state = AT_COLLECTIVE;
    if (w.arrived == mask) complete_collective(w, me.warp, fn);
    else schedule(false);
    for (int i = 0; i < out_words; i++) out[i] = w.out[me.lane][i];
}

static void syncwarp_fn(warp_state &) {}

void dcp_cuda_cpu_syncwarp(unsigned mask)
{
    collective(SYNCWARP, mask, 0, NULL, 0, NULL, (uintptr_t)__builtin_return_address(0), NULL, 0,
               syncwarp_fn);
}

/* Shuffles: in[0] the value, in[1] the lane operand; parameter = mode + 4 x width. A source
   lane outside the segment or the mask gives the lane its own value, as the PTX ISA says of
   an out-of-range shfl (the device returns the own value for up/down/xor past the edge). */
static void shuffle_fn(warp_state &w)
{
    const int mode = w.parameter & 3, width = w.parameter >> 2;
    for (int lane = 0; lane < WARP_SIZE; lane++) {
        if (!(w.mask >> lane & 1)) continue;
        const int operand = (int)w.in[lane][1], segment = lane & ~(width - 1);
        int source = lane;
        switch (mode) {
        case DCP_CUDA_CPU_SHFL_IDX: source = segment + (operand & (width - 1)); break;
        case DCP_CUDA_CPU_SHFL_UP: source = lane - operand >= segment ? lane - operand : lane; break;
        case DCP_CUDA_CPU_SHFL_DOWN:
            source = lane + operand < segment + width ? lane + operand : lane;
            break;
        default: source = (lane ^ operand) < segment + width ? lane ^ operand : lane; break;
        }
        if (!(w.mask >> source & 1)) {
            dcp_cuda_cpu_report("collective", "shuffle: lane %d reads lane %d, outside the mask "
                                "0x%08x (undefined on the device)", lane, source, w.mask);
            source = lane;
        }
        w.out[lane][0] = w.in[source][0];
    }
}

uint32_t dcp_cuda_cpu_shfl(unsigned mask, uint32_t value, int mode, int operand, int width)
{
    const uint32_t in[2] = {value, (uint32_t)operand};
    uint32_t out = 0;
    if (width < 1 || width > WARP_SIZE || (width & (width - 1)))
        dcp_cuda_cpu_trap("shuffle width is not a power of two in [1, 32]");
    collective(SHUFFLE, mask, mode + 4 * width, in, 2, NULL, (uintptr_t)__builtin_return_address(0),
               &out, 1, shuffle_fn);
    return out;
}

static void ballot_fn(warp_state &w)
{
    uint32_t bits = 0;
    for (int lane = 0; lane < WARP_SIZE; lane++)
        if ((w.mask >> lane & 1) && w.in[lane][0]) bits |= 1u << lane;
    for (int lane = 0; lane < WARP_SIZE; lane++) w.out[lane][0] = bits;
}

unsigned dcp_cuda_cpu_ballot(unsigned mask, int predicate)
{
    const uint32_t in = predicate != 0;
    uint32_t out = 0;
    collective(BALLOT, mask, 0, &in, 1, NULL, (uintptr_t)__builtin_return_address(0), &out, 1,
               ballot_fn);
    return out;
}

/* The lanes of the running warp that have not exited (the model keeps a warp converged). */
unsigned dcp_cuda_cpu_activemask(void)
{
    engine &e = self_engine();
    thread &me = self_thread();
    const int lanes = e.count - me.warp * WARP_SIZE;
    const unsigned present = lanes >= WARP_SIZE ? FULL_MASK : (1u << lanes) - 1;
    return present & ~e.warp[me.warp].exited;
}

/* ------------------------------------------------------------------ shared memory */

unsigned char *dcp_cuda_cpu_dynamic_shared(void) { return self_engine().arena; }

void *dcp_cuda_cpu_static_shared(const void *key, size_t bytes, size_t alignment)
{
    engine &e = self_engine();
    for (int i = 0; i < e.static_count; i++)
        if (e.statics[i].key == key) return e.arena + e.statics[i].offset;
    if (alignment < STATIC_ALIGNMENT) alignment = STATIC_ALIGNMENT;
    const size_t offset = (e.static_end + alignment - 1) / alignment * alignment;
    if (e.static_count == STATIC_VARIABLES || offset + bytes > e.capacity) {
        dcp_cuda_cpu_report("launch", "static shared memory: a variable of %zu bytes after %zu "
                            "bytes (dynamic %zu) exceeds the %s's %zu bytes per block",
                            bytes, e.static_end, e.dynamic_shared, dcp_cuda_cpu_profile_name(),
                            e.capacity);
        abort_block();
    }
    e.statics[e.static_count].key = key;
    e.statics[e.static_count].offset = offset;
    e.static_count++;
    e.static_end = offset + bytes;
#ifdef DCP_CUDA_CPU_ASAN
    ASAN_UNPOISON_MEMORY_REGION(e.arena + offset, bytes);
#endif
    memset(e.arena + offset, POISON, bytes);
    dcp_cuda_cpu_shadow_allocated(offset, bytes);
    return e.arena + offset;
}

size_t dcp_cuda_cpu_shared_offset(const void *p)
{
    engine &e = self_engine();
    const unsigned char *c = (const unsigned char *)p;
    if (c < e.arena || c >= e.arena + e.capacity)
        dcp_cuda_cpu_trap("__cvta_generic_to_shared of an address outside the block's shared "
                          "memory");
    return (size_t)(c - e.arena);
}

/* ------------------------------------------------------------------------ atomics
   Real atomics (a host thread of a multi-rank program may touch the same memory while a grid
   runs), recorded as atomics by the shadows: atomics do not race each other, and a plain
   access races an atomic as it would any write. */
template <typename T> static T atomic_fetch_add(T *address, T value)
{
    return __atomic_fetch_add(address, value, __ATOMIC_RELAXED);
}
static float atomic_fetch_add(float *address, float value)
{
    float old, sum;
    __atomic_load(address, &old, __ATOMIC_RELAXED);
    do sum = old + value;
    while (!__atomic_compare_exchange(address, &old, &sum, true, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED));
    return old;
}
template <typename T> static T atomic_add(T *address, T value, uintptr_t pc)
{
    dcp_cuda_cpu_shadow_access(address, sizeof(T), DCP_CUDA_CPU_ATOMIC, pc);
    if (dcp_cuda_cpu_device_address((uintptr_t)address)) {
        dcp_cuda_cpu_global_write(address, sizeof(T), true, pc);
        if (dcp_cuda_cpu_profiling)
            dcp_cuda_cpu_profile_access((uintptr_t)address, sizeof(T), DCP_CUDA_CPU_GLOBAL_ATOMIC,
                                        pc);
    }
    return atomic_fetch_add(address, value);
}
int dcp_cuda_cpu_atomic_add_int(int *a, int v)
{
    return atomic_add(a, v, (uintptr_t)__builtin_return_address(0));
}
unsigned dcp_cuda_cpu_atomic_add_unsigned(unsigned *a, unsigned v)
{
    return atomic_add(a, v, (uintptr_t)__builtin_return_address(0));
}
float dcp_cuda_cpu_atomic_add_float(float *a, float v)
{
    return atomic_add(a, v, (uintptr_t)__builtin_return_address(0));
}

/* ---------------------------------------------------------------------- PTX twins */

/* ex2.approx.ftz.f32: 2^x with subnormal inputs and results flushed to +0 (a subnormal input
   is 0, whose power is 1, so only the result needs it); -inf gives +0, NaN stays NaN. The
   device's approximation error (2^-22 relative at most) is not modelled: tests compare with
   tolerances far above it. */
float dcp_cuda_cpu_ex2_approx_ftz(float x)
{
    const float y = exp2f(x);
    return y < 1.17549435e-38f ? 0.0f : y; /* FLT_MIN: below it the result is subnormal */
}

/* cp.async.cg.shared.global: the 16-byte destination aligned in valid shared memory, the
   source aligned; src_bytes in [0, 16], the rest of the destination zero-filled. The source
   is read now (an out-of-bounds source is ASan's error here, in the kernel's frame). */
void dcp_cuda_cpu_cp_async16(void *shared, const void *global, int32_t src_bytes)
{
    thread &me = self_thread();
    const uintptr_t pc = (uintptr_t)__builtin_return_address(0);
    if (src_bytes < 0 || src_bytes > COPY_BYTES)
        dcp_cuda_cpu_trap("cp.async with a source size outside [0, 16]");
    if ((uintptr_t)shared % COPY_BYTES || (src_bytes > 0 && (uintptr_t)global % COPY_BYTES))
        dcp_cuda_cpu_trap("cp.async.cg 16 with a shared or global address that is not "
                          "16-byte aligned");
    if (dcp_cuda_cpu_shared_check(shared, COPY_BYTES, "cp.async", pc) < 0) abort_block();
    pending_copy c;
    c.destination = (unsigned char *)shared;
    memset(c.data, 0, sizeof c.data);
    if (src_bytes > 0) memcpy(c.data, global, (size_t)src_bytes);
    c.group = me.committed;
    c.pc = pc;
    me.copies.push_back(c);
    dcp_cuda_cpu_shadow_access(shared, COPY_BYTES, DCP_CUDA_CPU_PENDING, pc);
    if (dcp_cuda_cpu_profiling) {
        if (src_bytes > 0) /* a zero fill reads nothing */
            dcp_cuda_cpu_profile_access((uintptr_t)global, (size_t)src_bytes,
                                        DCP_CUDA_CPU_CP_ASYNC_GLOBAL, pc);
        dcp_cuda_cpu_profile_access((uintptr_t)shared, COPY_BYTES, DCP_CUDA_CPU_CP_ASYNC_SHARED, pc);
    }
    memset(shared, POISON, COPY_BYTES);
}

void dcp_cuda_cpu_cp_async_commit(void) { self_thread().committed++; }

/* cp.async.wait_group n: every committed group but the n most recent is complete. Copies not
   yet committed stay pending (they belong to no group). */
void dcp_cuda_cpu_cp_async_wait(int pending_groups)
{
    thread &me = self_thread();
    const uint64_t complete_below =
        me.committed > (uint64_t)pending_groups ? me.committed - (uint64_t)pending_groups : 0;
    size_t kept = 0;
    for (size_t i = 0; i < me.copies.size(); i++) {
        pending_copy &c = me.copies[i];
        if (c.group < complete_below) {
            memcpy(c.destination, c.data, COPY_BYTES);
            dcp_cuda_cpu_shadow_access(c.destination, COPY_BYTES, DCP_CUDA_CPU_COMPLETE, c.pc);
        } else {
            me.copies[kept++] = c;
        }
    }
    me.copies.resize(kept);
}

/* ldmatrix x4: in[] unused, address[lane] = the row lane gives (row lane % 8 of matrix
   lane / 8). Fragment of each 8 x 8 matrix: lane t holds row t / 4, columns 2 (t % 4) and
   2 (t % 4) + 1, the first in the low half; .trans: the matrix transposed (row and column
   swapped on the way). */
DCP_CUDA_CPU_UNCHECKED static void ldmatrix_fn(warp_state &w)
{
    uint16_t m[4][8][8];
    const bool transpose = w.parameter != 0;
    for (int lane = 0; lane < WARP_SIZE; lane++) /* rows checked in bounds at issue */
        for (int i = 0; i < 8; i++)
            m[lane / 8][lane % 8][i] = (uint16_t)(w.address[lane][2 * i] |
                                                  w.address[lane][2 * i + 1] << 8);
    for (int lane = 0; lane < WARP_SIZE; lane++) {
        const int row = lane / 4, column = 2 * (lane % 4);
        for (int i = 0; i < 4; i++) {
            const uint16_t lo = transpose ? m[i][column][row] : m[i][row][column];
            const uint16_t hi = transpose ? m[i][column + 1][row] : m[i][row][column + 1];
            w.out[lane][i] = (uint32_t)lo | (uint32_t)hi << 16;
        }
    }
}

void dcp_cuda_cpu_ldmatrix_x4(uint32_t (&r)[4], const void *row, bool transpose)
{
    const uintptr_t pc = (uintptr_t)__builtin_return_address(0);
    if ((uintptr_t)row % LDMATRIX_ROW_BYTES)
        dcp_cuda_cpu_trap("ldmatrix with a row address that is not 16-byte aligned");
    if (dcp_cuda_cpu_shared_check(row, LDMATRIX_ROW_BYTES, "ldmatrix", pc) < 0) abort_block();
    /* the row is read by the lane that names it */
    dcp_cuda_cpu_shadow_access(row, LDMATRIX_ROW_BYTES, DCP_CUDA_CPU_READ, pc);
    if (dcp_cuda_cpu_profiling)
        dcp_cuda_cpu_profile_access((uintptr_t)row, LDMATRIX_ROW_BYTES, DCP_CUDA_CPU_LDMATRIX, pc);
    collective(LDMATRIX, FULL_MASK, transpose, NULL, 0, row, pc, r, 4, ldmatrix_fn);
}

/* A 16-bit float (the low half of `bits`) as a float: bf16 by shifting, fp16 by a table made
   once with the toolkit's conversion (an mma reads 384 of them). */
template <bool BF16> static inline float float_of(uint32_t bits)
{
    if (BF16) {
        const uint32_t f = (bits & 0xFFFF) << 16;
        float x;
        memcpy(&x, &f, sizeof x);
        return x;
    }
    static const std::vector<float> table = [] {
        std::vector<float> t(1u << 16);
        for (uint32_t i = 0; i < t.size(); i++) {
            __half_raw raw;
            raw.x = (unsigned short)i;
            t[i] = __half2float(__half(raw));
        }
        return t;
    }();
    return table[bits & 0xFFFF];
}

/* mma.m16n8k16.row.col, fragments (g = lane / 4, t = lane % 4): A a0..a7 = rows g (a0, a1,
   a4, a5) and g + 8, columns 2t + (i & 1) (+ 8 for a4..a7), two per register; B b0..b3 =
   rows 2t + (i & 1) (+ 8 for b2, b3), column g; C c0..c3 = rows g (c0, c1) and g + 8, columns
   2t + (i & 1). Products of 16-bit values are exact in double and so is a sum of 16 of them
   at these magnitudes: each output is c plus the exact dot product, rounded once to float. */
template <bool BF16> DCP_CUDA_CPU_UNCHECKED static void mma_fn(warp_state &w)
{
    float a[16][16], b[16][8], c[16][8];
    for (int lane = 0; lane < WARP_SIZE; lane++) {
        const int g = lane / 4, t = lane % 4;
        const uint32_t *in = w.in[lane];
        for (int i = 0; i < 8; i++)
            a[g + ((i / 2) & 1) * 8][2 * t + (i & 1) + (i >= 4) * 8] =
                float_of<BF16>(in[i / 2] >> (16 * (i & 1)));
        for (int i = 0; i < 4; i++)
            b[2 * t + (i & 1) + (i >= 2) * 8][g] = float_of<BF16>(in[4 + i / 2] >> (16 * (i & 1)));
        for (int i = 0; i < 4; i++) memcpy(&c[g + (i >= 2) * 8][2 * t + (i & 1)], &in[6 + i], 4);
    }
    float d[16][8];
    for (int row = 0; row < 16; row++) {
        double sum[8]; /* the row's 8 sums side by side (the compiler vectorises them), each in
                          k order */
        for (int column = 0; column < 8; column++) sum[column] = c[row][column];
        for (int k = 0; k < 16; k++)
            for (int column = 0; column < 8; column++)
                sum[column] += (double)a[row][k] * (double)b[k][column];
        for (int column = 0; column < 8; column++) d[row][column] = (float)sum[column];
    }
    for (int lane = 0; lane < WARP_SIZE; lane++) {
        const int g = lane / 4, t = lane % 4;
        for (int i = 0; i < 4; i++) memcpy(&w.out[lane][i], &d[g + (i >= 2) * 8][2 * t + (i & 1)], 4);
    }
}

DCP_CUDA_CPU_UNCHECKED void dcp_cuda_cpu_mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4],
                                                      uint32_t b0, uint32_t b1, bool bf16)
{
    uint32_t in[COLLECTIVE_IN];
    for (int i = 0; i < 4; i++) in[i] = a[i];
    in[4] = b0, in[5] = b1;
    memcpy(in + 6, c, sizeof c);
    uint32_t out[4];
    collective(MMA, FULL_MASK, bf16, in, COLLECTIVE_IN, NULL,
               (uintptr_t)__builtin_return_address(0), out, 4, bf16 ? mma_fn<true> : mma_fn<false>);
    memcpy(c, out, sizeof c);
}

/* ------------------------------------------------------------------------ faults */

void dcp_cuda_cpu_trap(const char *why)
{
    char where[256], who[96];
    dcp_cuda_cpu_block_name(where, sizeof where);
    dcp_cuda_cpu_thread_name(dcp_cuda_cpu_running_thread(), who, sizeof who);
    dcp_cuda_cpu_report("trap", "%s in %s, %s", why, where, who);
    abort_block();
}

[[noreturn]] static void deadlock(void)
{
    engine &e = self_engine();
    char where[256];
    dcp_cuda_cpu_block_name(where, sizeof where);
    dcp_cuda_cpu_report("deadlock", "no thread can run in %s (%d still running):", where, e.live);
    for (int w = 0; w < e.warps; w++) {
        int at_barrier = -1, waiting = 0, done = 0;
        for (int lane = 0; lane < WARP_SIZE && w * WARP_SIZE + lane < e.count; lane++) {
            const thread &t = e.threads[w * WARP_SIZE + lane];
            if (t.state == AT_BARRIER) at_barrier = t.barrier, waiting++;
            if (t.state == DONE) done++;
        }
        fprintf(stderr, "  warp %d: %d exited, %d at barrier %d, lanes 0x%08x at %s\n", w, done,
                waiting, at_barrier, e.warp[w].arrived,
                e.warp[w].arrived ? COLLECTIVE_NAMES[e.warp[w].kind] : "no collective");
    }
    abort_block();
}

/* ---------------------------------------------------------------------------- grids */

struct grid_job {
    dcp_cuda_cpu_kernel *kernel;
    function_info *function;
    dim3 grid, block;
    size_t shared;
    uint64_t launch;
};

static uint64_t splitmix(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void begin_block(engine &e, uint64_t linear)
{
    e.block_index.x = (unsigned)(linear % e.grid.x);
    e.block_index.y = (unsigned)(linear / e.grid.x % e.grid.y);
    e.block_index.z = (unsigned)(linear / e.grid.x / e.grid.y);
    e.live = e.count;
    e.aborted = false;
    for (barrier_state &b : e.barriers) b = barrier_state();
    for (int w = 0; w < e.warps; w++) {
        e.warp[w].arrived = 0;
        e.warp[w].exited = 0;
    }
    e.static_count = 0;
    e.static_end = e.dynamic_shared + STATIC_REDZONE;
#ifdef DCP_CUDA_CPU_ASAN
    ASAN_POISON_MEMORY_REGION(e.arena, e.capacity);
    ASAN_UNPOISON_MEMORY_REGION(e.arena, e.dynamic_shared);
#endif
    memset(e.arena, POISON, e.dynamic_shared);
    dcp_cuda_cpu_shadow_block(e.arena, e.capacity);
    dcp_cuda_cpu_shadow_allocated(0, e.dynamic_shared);
    dcp_cuda_cpu_global_block(e.block_index);
    if (dcp_cuda_cpu_profiling) dcp_cuda_cpu_profile_block(e.warps);
    for (int i = 0; i < e.count; i++) {
        thread &t = e.threads[i];
        t.id = i, t.warp = i / WARP_SIZE, t.lane = i % WARP_SIZE;
        t.view.thread_index.x = (unsigned)(i % e.block.x);
        t.view.thread_index.y = (unsigned)(i / e.block.x % e.block.y);
        t.view.thread_index.z = (unsigned)(i / e.block.x / e.block.y);
        t.view.block_index = e.block_index;
        t.view.block_dim = e.block;
        t.view.grid_dim = e.grid;
        t.state = RUNNABLE;
        t.copies.clear();
        t.committed = 0;
        prepare_fiber(t);
    }
}

static void run_block(engine &e, uint64_t linear)
{
    begin_block(e, linear);
#ifdef DCP_CUDA_CPU_ASAN
    e.from_runner = true;
#endif
    e.running = &e.threads[0];
    dcp_cuda_cpu_self = &e.threads[0].view;
    switch_fiber(e.runner, e.threads[0].f, false, e.threads[0].f.stack, STACK_BYTES);
    if (dcp_cuda_cpu_profiling) dcp_cuda_cpu_profile_block_end();
    if (e.aborted) {
#ifdef DCP_CUDA_CPU_ASAN
        /* fibers left mid-frame keep their frames' redzones poisoned */
        for (int i = 0; i < e.count; i++)
            ASAN_UNPOISON_MEMORY_REGION(e.threads[i].f.stack, STACK_BYTES);
#endif
        return;
    }
    if (e.function->static_shared < 0) {
        std::lock_guard<std::mutex> lock(registry_lock);
        e.function->static_shared =
            (long)(e.static_count ? e.static_end - e.dynamic_shared - STATIC_REDZONE : 0);
    }
}

static void run_grid(void *data)
{
    grid_job *job = (grid_job *)data;
    {
        std::lock_guard<std::mutex> lock(grid_lock);
        if (!the_engine) the_engine = new engine;
        engine &e = *the_engine;
        running_engine = &e;
        e.kernel = job->kernel;
        e.function = job->function;
        e.grid = job->grid, e.block = job->block;
        e.dynamic_shared = job->shared;
        e.launch = job->launch;
        e.reports = 0;
        e.failed = false;
        e.count = (int)(job->block.x * job->block.y * job->block.z);
        e.warps = (e.count + WARP_SIZE - 1) / WARP_SIZE;
        if (!e.arena) {
            e.capacity = dcp_cuda_cpu_profile_in_force()->shared_per_block_optin;
            e.arena = (unsigned char *)aligned_alloc(ARENA_ALIGNMENT,
                                                     (e.capacity + ARENA_ALIGNMENT - 1) /
                                                         ARENA_ALIGNMENT * ARENA_ALIGNMENT);
        }
        dcp_cuda_cpu_global_launch();
        if (dcp_cuda_cpu_profiling)
            dcp_cuda_cpu_profile_launch(e.function->address, e.function->name, e.grid, e.block,
                                        e.dynamic_shared);
        /* blocks in an order drawn from the seed and the launch number */
        const uint64_t blocks = (uint64_t)e.grid.x * e.grid.y * e.grid.z;
        std::vector<uint64_t> order(blocks);
        uint64_t state = seed * 0x2545F4914F6CDD1Dull + job->launch;
        for (uint64_t i = 0; i < blocks; i++) order[i] = i;
        for (uint64_t i = blocks; i > 1; i--) std::swap(order[i - 1], order[splitmix(&state) % i]);
        for (uint64_t i = 0; i < blocks && !e.failed; i++) run_block(e, order[i]);
        dcp_cuda_cpu_shadow_unbind();
        running_engine = NULL;
        e.kernel = NULL;
    }
    delete job->kernel;
    delete job;
}

/* ------------------------------------------------------------------------ launches */

static cudaError_t check_launch(const function_info &f, dim3 grid, dim3 block, size_t shared)
{
    const dcp_cuda_cpu_profile &p = *dcp_cuda_cpu_profile_in_force();
    const uint64_t threads = (uint64_t)block.x * block.y * block.z;
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 ||
        block.z == 0 || threads > (uint64_t)p.max_threads_per_block ||
        block.x > (unsigned)p.max_block_dim[0] || block.y > (unsigned)p.max_block_dim[1] ||
        block.z > (unsigned)p.max_block_dim[2] || grid.x > (unsigned)p.max_grid_dim[0] ||
        grid.y > (unsigned)p.max_grid_dim[1] || grid.z > (unsigned)p.max_grid_dim[2])
        return cudaErrorInvalidConfiguration;
    /* dynamic shared memory: within what the kernel opted into (48 KB otherwise) and, with
       its static shared memory, within the device's limit per block */
    if (shared > max_dynamic_of(f) || shared + static_of(f) > p.shared_per_block_optin)
        return cudaErrorInvalidValue;
    /* more threads than its __launch_bounds__ or its registers allow: "too many resources
       requested for launch" */
    if (threads > (uint64_t)max_threads_of(f)) return cudaErrorLaunchOutOfResources;
    return cudaSuccess;
}

cudaError_t dcp_cuda_cpu_submit(dcp_cuda_cpu_kernel *kernel, const void *function, dim3 grid,
                                dim3 block, size_t shared, cudaStream_t stream)
{
    grid_job *job;
    if (!seed_set) {
        const char *env = getenv("DCP_TEST_SEED");
        if (env && *env) dcp_cuda_cpu_set_seed(strtoull(env, NULL, 10));
    }
    {
        std::lock_guard<std::mutex> lock(registry_lock);
        function_info &f = info_of(function);
        const cudaError_t status = check_launch(f, grid, block, shared);
        if (status != cudaSuccess) {
            delete kernel;
            return status;
        }
        job = new grid_job{kernel, &f, grid, block, shared, ++launches};
    }
    const cudaError_t status = cudaLaunchHostFunc(stream, run_grid, job);
    if (status != cudaSuccess) {
        delete job->kernel;
        delete job;
    }
    return status;
}

/* --------------------------------------------------------------- kernel attributes */

cudaError_t dcp_cuda_cpu_func_set_attribute(const void *function, cudaFuncAttribute attribute,
                                            int value)
{
    const dcp_cuda_cpu_profile &p = *dcp_cuda_cpu_profile_in_force();
    std::lock_guard<std::mutex> lock(registry_lock);
    if (!function) return cudaErrorInvalidDeviceFunction;
    function_info &f = info_of(function);
    switch (attribute) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize:
        if (value < 0 || (size_t)value + static_of(f) > p.shared_per_block_optin)
            return cudaErrorInvalidValue;
        f.max_dynamic_shared = value;
        return cudaSuccess;
    case cudaFuncAttributePreferredSharedMemoryCarveout:
        return value >= -1 && value <= 100 ? cudaSuccess : cudaErrorInvalidValue;
    default: return cudaErrorInvalidValue;
    }
}

/* The device build's figures of the kernel's SASS for this profile (kernel_limits.inc); a
   kernel the table does not have (a test's own): sm_80 code, no registers, and the static
   shared size the model has seen once a block of it ran (0 before). */
cudaError_t dcp_cuda_cpu_func_get_attributes(cudaFuncAttributes *a, const void *function)
{
    std::lock_guard<std::mutex> lock(registry_lock);
    if (!a) return cudaErrorInvalidValue;
    if (!function) return cudaErrorInvalidDeviceFunction;
    const function_info &f = info_of(function);
    memset(a, 0, sizeof *a);
    a->sharedSizeBytes = static_of(f);
    a->maxThreadsPerBlock = max_threads_of(f);
    a->numRegs = f.limits ? f.limits->registers : 0;
    a->localSizeBytes = f.limits ? (size_t)f.limits->stack : 0;
    a->ptxVersion = f.limits ? f.limits->arch : ARCH_AMPERE;
    a->binaryVersion = a->ptxVersion;
    a->maxDynamicSharedSizeBytes = (int)max_dynamic_of(f);
    a->preferredShmemCarveout = -1;
    return cudaSuccess;
}

/* Blocks per multiprocessor as threads, block slots, registers (the device build's, as
   allocated: REGISTER_UNIT per warp, warps in WARP_ALLOCATION_GRANULARITY) and shared memory
   (in SHARED_ALLOCATION_UNIT, with the runtime's reserve per block) allow. */
cudaError_t dcp_cuda_cpu_occupancy(int *blocks, const void *function, int block_size,
                                   size_t dynamic_shared)
{
    const dcp_cuda_cpu_profile &p = *dcp_cuda_cpu_profile_in_force();
    if (!blocks || block_size <= 0 || block_size > p.max_threads_per_block)
        return cudaErrorInvalidValue;
    size_t statics;
    int per_warp, max_threads;
    {
        std::lock_guard<std::mutex> lock(registry_lock);
        const function_info &f = info_of(function);
        statics = static_of(f);
        per_warp = warp_registers(f);
        max_threads = max_threads_of(f);
    }
    const int warps = (block_size + WARP_SIZE - 1) / WARP_SIZE;
    int n = p.max_blocks_per_multiprocessor;
    const int by_threads = p.max_threads_per_multiprocessor / (warps * WARP_SIZE);
    const size_t used = dynamic_shared + statics;
    const size_t per_block = (used + SHARED_ALLOCATION_UNIT - 1) / SHARED_ALLOCATION_UNIT *
                                 SHARED_ALLOCATION_UNIT + p.reserved_shared_per_block;
    const int by_shared = (int)(p.shared_per_multiprocessor / per_block);
    if (by_threads < n) n = by_threads;
    if (by_shared < n) n = by_shared;
    if (per_warp > 0) {
        const int warps_by_registers = p.registers_per_multiprocessor / per_warp /
                                       WARP_ALLOCATION_GRANULARITY * WARP_ALLOCATION_GRANULARITY;
        if (warps_by_registers / warps < n) n = warps_by_registers / warps;
    }
    *blocks = used > p.shared_per_block_optin || block_size > max_threads ? 0 : n;
    return cudaSuccess;
}
