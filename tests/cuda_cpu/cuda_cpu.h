/* cuda_cpu.h - the CPU execution model of dcp_cuda.cu: what kernel code sees when dcp_cuda.cu
   (or a test with kernels of its own) is compiled as host C++ with -DDCP_CUDA_CPU
   -Itests/cuda_cpu.

   The model's parts (docs/cpu-model.md says what each checks):
   - executor.cc: a grid runs block after block (in an order drawn from the seed); the threads
     of a block run as cooperative fibers; barriers and warp collectives (shuffles, votes,
     ldmatrix, mma) are rendezvous of the threads they name; every PTX instruction dcp_cuda.cu
     wraps has a twin here that follows the PTX ISA's per-lane layouts; static and dynamic
     shared memory live in one arena per block; device profiles (sm_80, sm_89, sm_90) bound
     the launches as those devices do. In the checked build (clang, ASan) a shadow of the
     arena reports races, reads of unwritten bytes and of cp.async destinations before their
     wait, and out-of-bounds shared accesses (checkers.cc).
   - checkers.cc: the shadows' checks every instrumented access goes through (shared memory;
     global memory with memory.cc).
   - memory.cc: where cudaMalloc's bytes live (one device region, exact sizes, redzones) and the
     global-memory race checker.
   - profile.cc (profile.h): the kernel profile, off unless asked (coalescing, bank conflicts,
     DRAM sectors, the speed-of-light bounds of make kernel-report).
   - device.cc: what the device is (profiles, attributes, occupancy, error state), for either
     stream runtime.
   - runtime.cc: the CUDA runtime API over host memory for one process (cudaMalloc, streams in
     order, events); the host NCCL transport's fake_runtime.c is the other stream runtime, one
     device thread per simulated rank. A launch reaches either only as a host function
     enqueued on a stream (cudaLaunchHostFunc), so any runtime that runs host functions in
     stream order can carry the executor's grids.
   - model.h: the interface between these parts.
   - this header: the CUDA builtins kernels use (threadIdx, __syncthreads, __shfl_xor_sync,
     atomicAdd, ...), the PTX twins, the static shared memory macro and the launch template.

   Declarations and types come from the CUDA toolkit's own headers (cuda_runtime.h,
   cuda_bf16.h, cuda_fp16.h): the model implements the runtime functions, not their types, so
   every enum value and struct layout is the real one, and bf16/fp16 conversions are the
   toolkit's host conversions (round to nearest even). */
#ifndef DCP_CUDA_CPU_H
#define DCP_CUDA_CPU_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <tuple>
#include <type_traits>
#include <utility>

/* ----------------------------------------------------------------------- qualifiers
   The toolkit's headers define __device__, __global__, __host__ and __shared__ empty for a
   host compiler; the rest is ours. __forceinline__ becomes a plain inline: always_inline over
   every template of dcp_cuda.cu only makes the sanitizer build slow to compile. */
#define __launch_bounds__(...)
#undef __forceinline__
#define __forceinline__ inline

/* ------------------------------------------------------------- the running thread
   What kernel code reads of the thread it runs as. One per fiber; dcp_cuda_cpu_self points at
   the running one (per OS thread: simulated ranks may run grids on their own threads). */
struct dcp_cuda_cpu_thread_view {
    uint3 thread_index, block_index;
    dim3 block_dim, grid_dim;
};
extern __thread const dcp_cuda_cpu_thread_view *dcp_cuda_cpu_self;

#define threadIdx (dcp_cuda_cpu_self->thread_index)
#define blockIdx (dcp_cuda_cpu_self->block_index)
#define blockDim (dcp_cuda_cpu_self->block_dim)
#define gridDim (dcp_cuda_cpu_self->grid_dim)

/* ------------------------------------------------------------- barriers, collectives
   Out of line (executor.cc, never instrumented), so that the checked build's shadow sees
   their shared-memory effects as the instruction's, not as the plain accesses of a helper. */
void dcp_cuda_cpu_syncthreads(void);
void dcp_cuda_cpu_syncwarp(unsigned mask);
/* bar.sync id, count: the first `count` threads (whole warps) that reach barrier `id`. */
void dcp_cuda_cpu_bar_sync(int id, int count);
uint32_t dcp_cuda_cpu_shfl(unsigned mask, uint32_t value, int mode, int operand, int width);
unsigned dcp_cuda_cpu_ballot(unsigned mask, int predicate);
unsigned dcp_cuda_cpu_activemask(void);
int dcp_cuda_cpu_atomic_add_int(int *address, int value);
unsigned dcp_cuda_cpu_atomic_add_unsigned(unsigned *address, unsigned value);
float dcp_cuda_cpu_atomic_add_float(float *address, float value);
/* The thread stops its kernel with a report (trap, an unmodelled instruction). */
[[noreturn]] void dcp_cuda_cpu_trap(const char *why);

enum { DCP_CUDA_CPU_SHFL_IDX, DCP_CUDA_CPU_SHFL_UP, DCP_CUDA_CPU_SHFL_DOWN, DCP_CUDA_CPU_SHFL_XOR };

/* inlined where the kernel calls it: the barrier checks where each thread reached it */
__attribute__((always_inline)) static inline void __syncthreads(void)
{
    dcp_cuda_cpu_syncthreads();
}
static inline void __syncwarp(unsigned mask = 0xffffffffu) { dcp_cuda_cpu_syncwarp(mask); }

template <typename T> static inline T dcp_cuda_cpu_shfl_of(unsigned mask, T var, int mode,
                                                          int operand, int width)
{
    static_assert(sizeof(T) == sizeof(uint32_t), "32-bit shuffles");
    uint32_t bits;
    memcpy(&bits, &var, sizeof bits);
    bits = dcp_cuda_cpu_shfl(mask, bits, mode, operand, width);
    memcpy(&var, &bits, sizeof bits);
    return var;
}
template <typename T> static inline T __shfl_sync(unsigned mask, T var, int lane, int width = 32)
{
    return dcp_cuda_cpu_shfl_of(mask, var, DCP_CUDA_CPU_SHFL_IDX, lane, width);
}
template <typename T>
static inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32)
{
    return dcp_cuda_cpu_shfl_of(mask, var, DCP_CUDA_CPU_SHFL_UP, (int)delta, width);
}
template <typename T>
static inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32)
{
    return dcp_cuda_cpu_shfl_of(mask, var, DCP_CUDA_CPU_SHFL_DOWN, (int)delta, width);
}
template <typename T>
static inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32)
{
    return dcp_cuda_cpu_shfl_of(mask, var, DCP_CUDA_CPU_SHFL_XOR, lane_mask, width);
}
static inline unsigned __ballot_sync(unsigned mask, int p) { return dcp_cuda_cpu_ballot(mask, p); }
static inline int __any_sync(unsigned mask, int p) { return dcp_cuda_cpu_ballot(mask, p) != 0; }
static inline int __all_sync(unsigned mask, int p)
{
    return dcp_cuda_cpu_ballot(mask, p) == (mask & dcp_cuda_cpu_activemask());
}
static inline unsigned __activemask(void) { return dcp_cuda_cpu_activemask(); }

static inline int atomicAdd(int *address, int value)
{
    return dcp_cuda_cpu_atomic_add_int(address, value);
}
static inline unsigned atomicAdd(unsigned *address, unsigned value)
{
    return dcp_cuda_cpu_atomic_add_unsigned(address, value);
}
static inline float atomicAdd(float *address, float value)
{
    return dcp_cuda_cpu_atomic_add_float(address, value);
}
[[noreturn]] static inline void __trap(void) { dcp_cuda_cpu_trap("__trap()"); }

/* ------------------------------------------------------------------ arithmetic builtins
   Pure functions: inline. Where the device computes an approximation, the twin computes the
   instruction the device runs (ex2.approx.ftz for __expf), not the accurate libm function. */
float dcp_cuda_cpu_ex2_approx_ftz(float x);

static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline unsigned __float_as_uint(float x)
{
    unsigned u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static inline float __uint_as_float(unsigned u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}
/* __expf: ex2.approx.ftz of x log2(e), as the device library computes it (a macro: glibc's
   math.h declares a __expf of its own, the accurate one). */
static inline float dcp_cuda_cpu_expf(float x)
{
    return dcp_cuda_cpu_ex2_approx_ftz(x * 1.44269504088896341f);
}
#define __expf(x) dcp_cuda_cpu_expf(x)
/* __fdividef: x / y, except 0 for 2^126 < |y| < 2^128 (the device's documented behaviour). */
static inline float __fdividef(float x, float y)
{
    const float big = 8.50705917302346159e+37f; /* 2^126 */
    return fabsf(y) > big && isfinite(y) ? 0.0f : x / y;
}
/* An access of `bytes` (a vector or pack wider than 4 bytes: one instruction on the device)
   at p: reported unless p is aligned to its width (dcp_cuda.cu's dcp_cuda__vload/vstore). */
void dcp_cuda_cpu_vector_access(const void *p, size_t bytes, bool store);
template <typename V> __attribute__((always_inline)) static inline void __stwb(V *address, V value)
{
    dcp_cuda_cpu_vector_access(address, sizeof(V), true);
    *address = value;
}
/* A shared address's offset in the 32-bit shared window (the block's arena). */
size_t dcp_cuda_cpu_shared_offset(const void *p);
static inline size_t __cvta_generic_to_shared(const void *p) { return dcp_cuda_cpu_shared_offset(p); }

/* ----------------------------------------------------------------- shared memory
   Dynamic shared memory starts the block's arena; each static __shared__ variable (declared
   with DCP_CUDA_CPU_SHARED, which dcp_cuda.cu's DCP_CUDA__SHARED maps to) is placed after it
   the first time a thread of the block reaches its declaration, keyed by the address of a
   static byte unique to the declaration (and to each template instantiation). */
unsigned char *dcp_cuda_cpu_dynamic_shared(void);
void *dcp_cuda_cpu_static_shared(const void *key, size_t bytes, size_t alignment);

#define DCP_CUDA_CPU_SHARED(type, name, dims)                                                 \
    static char name##_dcp_cuda_cpu_key;                                                       \
    typedef type name##_dcp_cuda_cpu_type dims;                                                \
    name##_dcp_cuda_cpu_type &name = *static_cast<name##_dcp_cuda_cpu_type *>(                 \
        dcp_cuda_cpu_static_shared(&name##_dcp_cuda_cpu_key, sizeof(name##_dcp_cuda_cpu_type), \
                                   alignof(name##_dcp_cuda_cpu_type)))

/* -------------------------------------------------------------------- PTX twins
   Each follows the PTX ISA's description of the instruction dcp_cuda.cu's wrapper issues. */

/* cp.async.cg.shared.global [shared], [global], 16, src_bytes: the destination holds the
   poison pattern (0xFF bytes: NaN in every float type) and is marked pending until the
   thread's cp.async.wait_group that completes its group. */
void dcp_cuda_cpu_cp_async16(void *shared, const void *global, int32_t src_bytes);
void dcp_cuda_cpu_cp_async_commit(void);
void dcp_cuda_cpu_cp_async_wait(int pending_groups);
/* ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lane l gives row l % 8 of matrix l / 8. */
void dcp_cuda_cpu_ldmatrix_x4(uint32_t (&r)[4], const void *row, bool transpose);
/* mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}: c += a b over the warp's fragments. */
void dcp_cuda_cpu_mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                               bool bf16);

/* ---------------------------------------------------------------------- launches
   A launch checks its configuration against the device profile and the kernel's attributes
   (an error is returned at once, nothing enqueued, as cudaGetLastError reports it after
   <<<>>>), then enqueues the grid on the stream as a host function (cudaLaunchHostFunc). */
struct dcp_cuda_cpu_kernel {
    virtual ~dcp_cuda_cpu_kernel() {}
    virtual void run_thread() = 0; /* one thread's body: the kernel with its arguments */
};

cudaError_t dcp_cuda_cpu_submit(dcp_cuda_cpu_kernel *kernel, const void *function, dim3 grid,
                                dim3 block, size_t shared, cudaStream_t stream);

template <typename... P> struct dcp_cuda_cpu_bound_kernel : dcp_cuda_cpu_kernel {
    void (*function)(P...);
    std::tuple<typename std::decay<P>::type...> arguments;
    template <typename... A>
    explicit dcp_cuda_cpu_bound_kernel(void (*f)(P...), A &&...a)
        : function(f), arguments(std::forward<A>(a)...)
    {
    }
    template <size_t... I> void call(std::index_sequence<I...>) { function(std::get<I>(arguments)...); }
    void run_thread() override { call(std::index_sequence_for<P...>()); }
};

/* kernel<<<grid, block, shared, stream>>>(arguments...) on the model; the arguments are
   copied (kernel parameters are passed by value). */
template <typename... P, typename... A>
cudaError_t dcp_cuda_cpu_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared,
                                cudaStream_t stream, A &&...arguments)
{
    return dcp_cuda_cpu_submit(
        new dcp_cuda_cpu_bound_kernel<P...>(kernel, std::forward<A>(arguments)...),
        reinterpret_cast<const void *>(kernel), grid, block, shared, stream);
}

/* ------------------------------------------------------------------ test controls */

/* The seed the block order of every later launch is drawn from (launch n: seed and n). */
void dcp_cuda_cpu_set_seed(uint64_t seed);
/* Device faults so far (checker reports, traps, deadlocks, configuration faults found while
   running): the runtime turns a new one into a sticky cudaErrorLaunchFailure. */
uint64_t dcp_cuda_cpu_faults(void);
/* The profile in force: "sm_80", "sm_89" or "sm_90" (DCP_CUDA_CPU_DEVICE, default sm_80). */
const char *dcp_cuda_cpu_profile_name(void);

#endif
