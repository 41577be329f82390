/* dcp_cuda.cu - the CUDA kernels of libdcp, one translation unit.

   Build: nvcc -O2 -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90a,code=sm_90a \
          -c dcp_cuda.cu -o dcp_cuda.o      (or `make cuda`, as build/dcp_cuda.o)
   and link it with the file that defines DCP_IMPLEMENTATION (this unit calls public dcp_
   functions of dcp.h: the operation contracts, which every switch keeps, so that file must
   only not define DCP_STATIC). Every
   kernel has a CPU reference in dcp.h with the same contract; tests/test_cuda_kernels.cu and
   tests/test_cuda_attention.cu compare them. Entry points take device pointers and a stream,
   check every argument on the host (a failing call enqueues nothing) and return a
   dcp_status; none allocates, none synchronises.

   Device-side robustness: the cu_seqlens arrays live in device memory, so the host cannot
   check them without a copy. Kernels bound every row they touch by layout.local_rows (and
   total_rows), so arrays that disagree with the host sizes give wrong values but never an
   access outside the buffers. dcp_cuda_layout_init builds a layout from checked host arrays.

   Sections: basics (errors, host checks, element types, rows of a layout) -> RoPE -> conv1d ->
   LSE merge and conversion -> attention (tile schedule, tensor-core primitives, forward,
   backward, host side, the virtual ring driver) -> ring helpers -> head-parallel all-to-all ->
   MTP roll -> attention on Hopper (sm_90a: swizzled tiles, wgmma, forward, TMA). */
#include "dcp.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <type_traits>
#include <utility>

/* The host build (DCP_CUDA_CPU): the CPU execution model's builtins, PTX twins and launch
   (tests/cuda_cpu/cuda_cpu.h, on the include path of that build only). */
#ifdef DCP_CUDA_CPU
#include "cuda_cpu.h"
#endif

/* ==================================================================================== basics */

/* Facts of the hardware and of the CUDA programming model the launches rely on. */
#define DCP_CUDA__WARP_SIZE 32            /* lanes of a warp */
#define DCP_CUDA__FULL_WARP 0xffffffffu   /* shuffle mask: every lane of a warp */
#define DCP_CUDA__MAX_BLOCK_THREADS 1024  /* threads of one block, at most */
#define DCP_CUDA__MAX_GRID_Y 65535        /* blocks along a grid's y dimension, at most */
#define DCP_CUDA__VECTOR_BYTES 16         /* the widest single access (one LDG.128 / STG.128) */

/* The attention kernels keep exponentials and LSEs in base 2 (ex2.approx): log2(e) takes a
   natural-log quantity to base 2 and ln(2) takes it back. */
#define DCP_CUDA__LOG2E 1.4426950408889634
#define DCP_CUDA__LN2 0.69314718055994531

/* The one checking macro: a failing CUDA call becomes DCP_ERROR_CUDA with file, line and the
   call's text. Used in functions that have a `dcp_error *error` in scope. */
#define DCP_CUDA_CHECK(call)                                                                       \
    do {                                                                                           \
        const cudaError_t dcp_cuda_result_ = (call);                                               \
        if (dcp_cuda_result_ != cudaSuccess)                                                       \
            return dcp_error_set(error, DCP_ERROR_CUDA, "%s:%d: %s: %s (%s)", __FILE__, __LINE__,  \
                                 #call, cudaGetErrorString(dcp_cuda_result_),                      \
                                 cudaGetErrorName(dcp_cuda_result_));                              \
    } while (0)

/* The one launch of every kernel: kernel<<<grid, block, shared, stream>>>(arguments...) on the
   GPU, the CPU execution model's launch in the host build (a grid enqueued on the stream).
   Returns the launch's configuration error as cudaGetLastError reports it after <<<>>>;
   asynchronous faults surface at the caller's next synchronisation, as with every CUDA
   library. Callers check it with DCP_CUDA_CHECK. */
template <typename... P, typename... A>
static cudaError_t dcp_cuda__launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared,
                                    cudaStream_t stream, A &&...arguments)
{
#ifdef DCP_CUDA_CPU
    return dcp_cuda_cpu_launch(kernel, grid, block, shared, stream,
                               std::forward<A>(arguments)...);
#else
    kernel<<<grid, block, shared, stream>>>(std::forward<A>(arguments)...);
    return cudaGetLastError();
#endif
}

extern "C" dcp_status dcp_cuda_device_count(int32_t *count, dcp_error *error)
{
    int devices = 0;
    cudaError_t result;
    if (!count) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "count must not be NULL");
    result = cudaGetDeviceCount(&devices);
    /* no driver or no device is an answer (zero), not a failure */
    if (result == cudaErrorNoDevice || result == cudaErrorInsufficientDriver) {
        (void)cudaGetLastError();
        devices = 0;
    } else if (result != cudaSuccess)
        return dcp_error_set(error, DCP_ERROR_CUDA, "cudaGetDeviceCount: %s (%d)",
                             cudaGetErrorString(result), (int)result);
    *count = devices;
    return dcp_error_clear(error);
}

/* ------------------------------------------------------------------------- host checks */

static dcp_status dcp_cuda__check_dtype(const char *name, dcp_dtype dtype, int allow_float32,
                                        dcp_error *error)
{
    if (dtype == DCP_DTYPE_BFLOAT16 || dtype == DCP_DTYPE_FLOAT16 ||
        (allow_float32 && dtype == DCP_DTYPE_FLOAT32))
        return DCP_OK;
    return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "%s %d is not %s", name, (int)dtype,
                         allow_float32 ? "DCP_DTYPE_FLOAT32, _BFLOAT16 or _FLOAT16"
                                       : "DCP_DTYPE_BFLOAT16 or DCP_DTYPE_FLOAT16");
}

static int dcp_cuda__aligned(const void *p, size_t bytes)
{
    return ((uintptr_t)p % bytes) == 0;
}

/* The host-side facts of a device layout: what can be checked without reading the device. */
static dcp_status dcp_cuda__check_layout(const dcp_cuda_layout *layout, dcp_error *error)
{
    int32_t n;
    if (!layout) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "layout must not be NULL");
    n = layout->thd.num_sequences;
    if (n < 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "layout num_sequences must be >= 0, got %d", (int)n);
    /* any group size: the zigzag split and the kernels' positions hold for every cp (a plan
       of DCP_CP_SIZES_ANY groups any number of ranks) */
    if (layout->thd.cp < 1 || layout->thd.cp > DCP_MAX_RANKS)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "layout cp must be in [1, %d], got %d", DCP_MAX_RANKS,
                             (int)layout->thd.cp);
    if (!layout->thd.cu_seqlens || !layout->thd.cu_seqlens_padded)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "layout cu_seqlens and cu_seqlens_padded (device arrays) must not "
                             "be NULL");
    if (layout->local_rows < 0 || layout->local_rows > INT32_MAX / layout->thd.cp)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "layout local_rows %lld x cp %d must be in [0, INT32_MAX]",
                             (long long)layout->local_rows, (int)layout->thd.cp);
    if (layout->max_seqlen_padded < 0 ||
        (int64_t)layout->max_seqlen_padded > layout->local_rows * layout->thd.cp ||
        (int64_t)layout->max_seqlen_padded * n < layout->local_rows * layout->thd.cp)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "layout max_seqlen_padded %d is inconsistent with %d sequences "
                             "of %lld local rows at cp %d",
                             (int)layout->max_seqlen_padded, (int)n, (long long)layout->local_rows,
                             (int)layout->thd.cp);
    return DCP_OK;
}

/* rows x width elements of `element` bytes must be addressable (width >= 1). */
static dcp_status dcp_cuda__check_elements(const char *name, int64_t rows, int64_t width,
                                           size_t element, dcp_error *error)
{
    const int64_t limit = (int64_t)(SIZE_MAX / 8 < INT64_MAX / 8 ? SIZE_MAX / 8 : INT64_MAX / 8);
    if (width < 1 || rows > limit / width / (int64_t)element)
        return dcp_error_set(error, DCP_ERROR_OVERFLOW,
                             "%s: %lld rows x %lld elements of %zu bytes are too many", name,
                             (long long)rows, (long long)width, element);
    return DCP_OK;
}

/* Every kernel's arguments, zeroed, with the device layout's sequence arrays filled in. */
template <typename Args>
static void dcp_cuda__args_of_layout(Args *a, const dcp_cuda_layout *layout)
{
    memset(a, 0, sizeof *a);
    a->cu_seqlens = layout->thd.cu_seqlens;
    a->cu_seqlens_padded = layout->thd.cu_seqlens_padded;
    a->num_sequences = layout->thd.num_sequences;
}

/* count float32 values in two device buffers a and b (`names` names them): count >= 0 and,
   when it is not 0, both given and the bytes addressable. */
static dcp_status dcp_cuda__check_values(int64_t count, const void *a, const void *b,
                                         const char *names, dcp_error *error)
{
    if (count < 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "count must be >= 0, got %lld",
                             (long long)count);
    if (count == 0) return DCP_OK;
    if (!a || !b)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "%s must not be NULL", names);
    if ((uint64_t)count > SIZE_MAX / sizeof(float))
        return dcp_error_set(error, DCP_ERROR_OVERFLOW, "count %lld is too large",
                             (long long)count);
    return DCP_OK;
}

/* fn(T()) for the element type T of dtype, the one switch of every launch that takes the
   three dtypes (`name` is the argument's name, for a value the caller did not check). */
template <typename Fn>
static dcp_status dcp_cuda__with_dtype(const char *name, dcp_dtype dtype, dcp_error *error,
                                       Fn fn)
{
    switch (dtype) {
    case DCP_DTYPE_FLOAT32: return fn(float());
    case DCP_DTYPE_BFLOAT16: return fn(__nv_bfloat16());
    case DCP_DTYPE_FLOAT16: return fn(__half());
    }
    return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "%s %d is not a dcp_dtype", name,
                         (int)dtype);
}

extern "C" dcp_status dcp_cuda_layout_init(const dcp_thd_layout *host,
                                           const int32_t *device_cu_seqlens,
                                           const int32_t *device_cu_seqlens_padded,
                                           dcp_cuda_layout *layout, dcp_error *error)
{
    int64_t rows = 0;
    int32_t i, longest = 0;
    dcp_status status;
    if (!layout) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "layout must not be NULL");
    if (!device_cu_seqlens || !device_cu_seqlens_padded)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "device_cu_seqlens and device_cu_seqlens_padded must not be NULL");
    if ((status = dcp_thd_layout_validate(host, &rows, error)) != DCP_OK) return status;
    for (i = 0; i < host->num_sequences; i++) {
        const int32_t padded = host->cu_seqlens_padded[i + 1] - host->cu_seqlens_padded[i];
        if (padded > longest) longest = padded;
    }
    memset(layout, 0, sizeof *layout);
    layout->thd = *host;
    layout->thd.cu_seqlens = device_cu_seqlens;
    layout->thd.cu_seqlens_padded = device_cu_seqlens_padded;
    layout->local_rows = rows;
    layout->max_seqlen_padded = longest;
    return dcp_error_clear(error);
}

/* ------------------------------------------------------------------ device: element types */

__device__ __forceinline__ float dcp_cuda__to_float(float x) { return x; }
__device__ __forceinline__ float dcp_cuda__to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float dcp_cuda__to_float(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T dcp_cuda__from_float(float x);
template <> __device__ __forceinline__ float dcp_cuda__from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 dcp_cuda__from_float<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half dcp_cuda__from_float<__half>(float x)
{
    return __float2half_rn(x);
}

/* Every access wider than 4 bytes (a vector type, a pack of elements) goes through these two:
   one load or store of the type's whole width on the device (LDG/STG/LDS/STS .64 or .128),
   which faults unless the address is aligned to that width. On the CPU execution model the
   model checks that alignment first: the host compiler splits an aggregate into its fields,
   so the access itself would pass at any address. */
#ifdef DCP_CUDA_CPU /* inlined where the access is, so that the model's report names its line */
#define DCP_CUDA__AT_CALLER __attribute__((always_inline))
#else
#define DCP_CUDA__AT_CALLER
#endif
template <typename V> __device__ __forceinline__ DCP_CUDA__AT_CALLER V dcp_cuda__vload(const V *p)
{
#ifdef DCP_CUDA_CPU
    dcp_cuda_cpu_vector_access(p, sizeof(V), false);
#endif
    return *p;
}
template <typename V>
__device__ __forceinline__ DCP_CUDA__AT_CALLER void dcp_cuda__vstore(V *p, const V &value)
{
#ifdef DCP_CUDA_CPU
    dcp_cuda_cpu_vector_access(p, sizeof(V), true);
#endif
    *p = value;
}

/* V consecutive elements moved as one access: 16 bytes when V * sizeof(T) == 16 (the
   pointer must then be 16-byte aligned, which every launcher checks before choosing V). */
template <typename T, int V> struct alignas(sizeof(T) * V) dcp_cuda__pack {
    T v[V];
};

template <typename T, int V>
__device__ __forceinline__ void dcp_cuda__load(const T *p, float (&out)[V])
{
    const dcp_cuda__pack<T, V> pack =
        dcp_cuda__vload(reinterpret_cast<const dcp_cuda__pack<T, V> *>(p));
#pragma unroll
    for (int i = 0; i < V; i++) out[i] = dcp_cuda__to_float(pack.v[i]);
}

template <typename T, int V>
__device__ __forceinline__ void dcp_cuda__store(T *p, const float (&in)[V])
{
    dcp_cuda__pack<T, V> pack;
#pragma unroll
    for (int i = 0; i < V; i++) pack.v[i] = dcp_cuda__from_float<T>(in[i]);
    dcp_cuda__vstore(reinterpret_cast<dcp_cuda__pack<T, V> *>(p), pack);
}

template <typename T, int V> __device__ __forceinline__ void dcp_cuda__store_zero(T *p)
{
    float zero[V];
#pragma unroll
    for (int i = 0; i < V; i++) zero[i] = 0.0f;
    dcp_cuda__store<T, V>(p, zero);
}

/* One dynamic shared-memory symbol for every kernel (each casts it to its own layout). On the
   CPU execution model: the start of the running block's shared arena. */
#ifdef DCP_CUDA_CPU
#define dcp_cuda__smem (dcp_cuda_cpu_dynamic_shared())
#else
extern __shared__ __align__(16) unsigned char dcp_cuda__smem[];
#endif

/* A static shared variable of a kernel: `__shared__ type name dims` on the GPU; on the CPU
   execution model a reference into the block's shared arena, where its checkers see it. */
#ifdef DCP_CUDA_CPU
#define DCP_CUDA__SHARED(type, name, dims) DCP_CUDA_CPU_SHARED(type, name, dims)
#else
#define DCP_CUDA__SHARED(type, name, dims) __shared__ type name dims
#endif

/* -------------------------------------------------------------- device: rows of a layout
   A local row's sequence is found by binary search in cu_seqlens_padded (sequence j holds
   local rows [cu_padded[j] / cp, cu_padded[j + 1] / cp)); the arrays are small and stay in
   L1/L2, so a search per row (or per block of rows) costs a few cached loads. */

/* The largest j in [0, n] with cu_padded[j] <= scaled_row (scaled_row = row x cp), or -1. */
__device__ __forceinline__ int32_t dcp_cuda__find_sequence(const int32_t *cu_padded, int32_t n,
                                                           int64_t scaled_row)
{
    int32_t lo = 0, hi = n;
    if ((int64_t)cu_padded[0] > scaled_row) return -1;
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo + 1) / 2;
        if ((int64_t)cu_padded[mid] <= scaled_row) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* dcp_zigzag_position for a well-formed layout (checked by the caller's layout). */
__host__ __device__ __forceinline__ int64_t dcp_cuda__zigzag(int64_t padded, int32_t cp,
                                                             int32_t rank, int64_t index)
{
    int64_t half;
    if (cp == 1) return index;
    half = padded / (2 * (int64_t)cp);
    return index < half ? rank * half + index : (2 * (int64_t)cp - 1 - rank) * half + index - half;
}

/* One local row: its sequence (-1 past the last one), the sequence's first local row and
   local row count, and the row's global position (-1 for a padding row). */
struct dcp_cuda__row {
    int32_t seq;
    int64_t offset;
    int64_t rows;
    int64_t position;
};

__device__ __forceinline__ dcp_cuda__row dcp_cuda__row_info(const int32_t *cu,
                                                            const int32_t *cu_padded, int32_t n,
                                                            int32_t cp, int32_t rank,
                                                            int64_t row)
{
    dcp_cuda__row info;
    const int32_t j = dcp_cuda__find_sequence(cu_padded, n, row * cp);
    info.seq = -1, info.offset = row, info.rows = 0, info.position = -1;
    if (j < 0 || j >= n) return info;
    const int64_t padded = (int64_t)cu_padded[j + 1] - cu_padded[j];
    const int64_t valid = (int64_t)cu[j + 1] - cu[j];
    info.seq = j;
    info.offset = cu_padded[j] / cp;
    info.rows = padded / cp;
    const int64_t position = dcp_cuda__zigzag(padded, cp, rank, row - info.offset);
    info.position = position < valid ? position : -1;
    return info;
}

/* ====================================================================================== RoPE
   Design. A block owns `rows_per_block` consecutive local rows (chosen so that a block has
   about DCP_CUDA__ROPE_UNITS pieces of work; the grid covers the local rows, real tokens and
   their padding, never max_seqlen x sequences). First its threads find each row's global
   position (binary search in cu_seqlens_padded, then the zigzag map of the CP split), then
   compute every (row, frequency) angle once in double -- position x inv_freq, with sincos in
   double, so the angle is exact to ~1e-16 relative even at positions of millions -- and keep
   cos and +-sin as floats in shared memory for all the heads of q and k. Then each thread
   takes units of work: a rotated unit is V pairs (rotate-half: V elements of the first half
   and the V matching ones of the second half, two 16-byte loads; interleaved: V elements, V/2
   adjacent pairs, one 16-byte load), a copy unit is V elements past rotary_dim. V is 16 bytes
   of elements when every size and pointer allows it, else 1 (a slower, general path). Each
   input element is read once and each output element written once; a unit reads all its
   inputs before writing, so an output may be its input. Padding rows are written 0. */

#define DCP_CUDA__ROPE_THREADS 256
#define DCP_CUDA__ROPE_MAX_ROWS 64    /* rows per block, at most */
#define DCP_CUDA__ROPE_UNITS 2048     /* units of work a block aims at */
#define DCP_CUDA__ROPE_MAX_ANGLES 4096 /* rows x pairs of (cos, sin) per block: 32 KB */
#define DCP_CUDA__ROPE_MAX_ROW_UNITS (1 << 30) /* heads x units of a row: int32 unit indices */

struct dcp_cuda__rope_args {
    const int32_t *cu_seqlens, *cu_seqlens_padded;
    int32_t num_sequences, cp, rank;
    int64_t rows;
    int32_t head_dim, rotary_dim, pairs; /* pairs = rotary_dim / 2 */
    int32_t q_heads, k_heads;            /* 0 for an absent tensor */
    int32_t rows_per_block;
    int32_t pair_units, copy_units;      /* per head */
    const void *q, *k;
    void *q_out, *k_out;
    const double *inv_freq;              /* device table or NULL */
    double theta_base;
    double direction;                    /* +1 forward, -1 backward */
};

/* Where pair `pair` of a row sits in the block's (cos, sin) table: the G pairs one unit rotates
   (G = V rotate-half, V / 2 interleaved) lie pairs / G slots apart, so that the lanes of a warp,
   which hold consecutive units, read consecutive words for the same i. (The kernel report:
   stored in pair order, a lane's G consecutive pairs put the lanes 2G words apart, an 8-way
   bank conflict on every angle read.) */
template <int STYLE, int V> struct dcp_cuda__rope_angles {
    static constexpr int G = STYLE == DCP_ROPE_ROTATE_HALF ? V : (V == 1 ? 1 : V / 2);
    static __device__ __forceinline__ int32_t slot(int32_t pair, int32_t pairs)
    {
        return (pair % G) * (pairs / G) + pair / G;
    }
};

/* Rotated unit `unit` of one head: x and y point at the head's first element. */
template <typename T, int STYLE, int V>
__device__ __forceinline__ void dcp_cuda__rope_pairs(const dcp_cuda__rope_args &a, const T *x,
                                                     T *y, int32_t unit, const float2 *angle)
{
    if (STYLE == DCP_ROPE_ROTATE_HALF) {
        const int32_t first = unit * V, second = a.pairs + unit * V;
        if (!angle) {
            dcp_cuda__store_zero<T, V>(y + first);
            dcp_cuda__store_zero<T, V>(y + second);
            return;
        }
        float u[V], w[V];
        dcp_cuda__load<T, V>(x + first, u);
        dcp_cuda__load<T, V>(x + second, w);
#pragma unroll
        for (int i = 0; i < V; i++) {
            const float2 cs =
                dcp_cuda__vload(angle + dcp_cuda__rope_angles<STYLE, V>::slot(first + i, a.pairs));
            const float p = u[i], q = w[i];
            u[i] = p * cs.x - q * cs.y;
            w[i] = q * cs.x + p * cs.y;
        }
        dcp_cuda__store<T, V>(y + first, u);
        dcp_cuda__store<T, V>(y + second, w);
    } else {
        /* interleaved: a unit of PV elements holds PV / 2 adjacent pairs; the general path
           (V = 1) moves its pair as two single elements, which need no alignment */
        constexpr int PV = V == 1 ? 2 : V;
        constexpr int LOADS = V == 1 ? 2 : 1;
        const int32_t first = unit * PV;
        float u[PV];
        if (!angle) {
#pragma unroll
            for (int i = 0; i < PV; i++) u[i] = 0.0f;
        } else {
#pragma unroll
            for (int l = 0; l < LOADS; l++)
                dcp_cuda__load<T, PV / LOADS>(x + first + l * (PV / LOADS),
                                              *reinterpret_cast<float(*)[PV / LOADS]>(
                                                  u + l * (PV / LOADS)));
#pragma unroll
            for (int i = 0; i < PV / 2; i++) {
                const float2 cs = dcp_cuda__vload(
                    angle + dcp_cuda__rope_angles<STYLE, V>::slot(first / 2 + i, a.pairs));
                const float p = u[2 * i], q = u[2 * i + 1];
                u[2 * i] = p * cs.x - q * cs.y;
                u[2 * i + 1] = q * cs.x + p * cs.y;
            }
        }
#pragma unroll
        for (int l = 0; l < LOADS; l++)
            dcp_cuda__store<T, PV / LOADS>(y + first + l * (PV / LOADS),
                                           *reinterpret_cast<const float(*)[PV / LOADS]>(
                                               u + l * (PV / LOADS)));
    }
}

template <typename T, int STYLE, int V>
__global__ void __launch_bounds__(DCP_CUDA__ROPE_THREADS)
    dcp_cuda__rope_kernel(const dcp_cuda__rope_args a)
{
    DCP_CUDA__SHARED(long long, position, [DCP_CUDA__ROPE_MAX_ROWS]);
    float2 *angles = reinterpret_cast<float2 *>(dcp_cuda__smem);
    const int64_t first_row = (int64_t)blockIdx.x * a.rows_per_block;
    for (int32_t r = threadIdx.x; r < a.rows_per_block; r += blockDim.x) {
        const int64_t row = first_row + r;
        position[r] = row < a.rows ? dcp_cuda__row_info(a.cu_seqlens, a.cu_seqlens_padded,
                                                        a.num_sequences, a.cp, a.rank, row)
                                         .position
                                   : -1;
    }
    __syncthreads();
    for (int32_t i = threadIdx.x; i < a.rows_per_block * a.pairs; i += blockDim.x) {
        const int32_t r = i / a.pairs, f = i - r * a.pairs;
        const long long p = position[r];
        if (p < 0) continue;
        const double inv_freq = a.inv_freq ? a.inv_freq[f]
                                           : pow(a.theta_base, -2.0 * f / a.rotary_dim);
        double s, c;
        sincos((double)p * inv_freq, &s, &c);
        dcp_cuda__vstore(angles + r * a.pairs + dcp_cuda__rope_angles<STYLE, V>::slot(f, a.pairs),
                         make_float2((float)c, (float)(a.direction * s)));
    }
    __syncthreads();
    const int32_t heads = a.q_heads + a.k_heads, units = a.pair_units + a.copy_units;
    const int32_t row_units = heads * units, total = a.rows_per_block * row_units;
    for (int32_t u = threadIdx.x; u < total; u += blockDim.x) {
        const int32_t r = u / row_units, rest = u - r * row_units;
        const int32_t h = rest / units, unit = rest - h * units;
        const int64_t row = first_row + r;
        if (row >= a.rows) break; /* u only grows, and so does row */
        const bool is_q = h < a.q_heads;
        const int32_t head = is_q ? h : h - a.q_heads, count = is_q ? a.q_heads : a.k_heads;
        const int64_t at = (row * count + head) * (int64_t)a.head_dim;
        const T *x = static_cast<const T *>(is_q ? a.q : a.k) + at;
        T *y = static_cast<T *>(is_q ? a.q_out : a.k_out) + at;
        const bool valid = position[r] >= 0;
        if (unit < a.pair_units) {
            dcp_cuda__rope_pairs<T, STYLE, V>(a, x, y, unit,
                                              valid ? angles + (int64_t)r * a.pairs : NULL);
        } else {
            const int32_t d = a.rotary_dim + (unit - a.pair_units) * V;
            if (valid) {
                float v[V];
                dcp_cuda__load<T, V>(x + d, v);
                dcp_cuda__store<T, V>(y + d, v);
            } else {
                dcp_cuda__store_zero<T, V>(y + d);
            }
        }
    }
}

template <typename T>
static dcp_status dcp_cuda__rope_launch(dcp_cuda__rope_args a, int32_t style, int vector,
                                        cudaStream_t stream, dcp_error *error)
{
    const unsigned blocks = (unsigned)((a.rows + a.rows_per_block - 1) / a.rows_per_block);
    const size_t shared = (size_t)a.rows_per_block * a.pairs * sizeof(float2);
    constexpr int V = (int)(DCP_CUDA__VECTOR_BYTES / sizeof(T));
    void (*kernel)(const dcp_cuda__rope_args) =
        style == DCP_ROPE_ROTATE_HALF
            ? (vector ? dcp_cuda__rope_kernel<T, DCP_ROPE_ROTATE_HALF, V>
                      : dcp_cuda__rope_kernel<T, DCP_ROPE_ROTATE_HALF, 1>)
            : (vector ? dcp_cuda__rope_kernel<T, DCP_ROPE_INTERLEAVED, V>
                      : dcp_cuda__rope_kernel<T, DCP_ROPE_INTERLEAVED, 1>);
    DCP_CUDA_CHECK(dcp_cuda__launch(kernel, blocks, DCP_CUDA__ROPE_THREADS, shared, stream, a));
    return dcp_error_clear(error);
}

/* The tensors of one RoPE call (q or k may be absent) and their names for messages:
   q, q_out, k, k_out as the entry point calls them. */
struct dcp_cuda__rope_tensors {
    int32_t q_heads, k_heads;
    const void *q, *k;
    void *q_out, *k_out;
    const char *const *names;
};

/* The options resolved on the host: the inv_freq table is a device array, so the rest is
   resolved without it and the pointer put back. */
static dcp_status dcp_cuda__rope_resolve(const dcp_rope_options *options, int32_t head_dim,
                                         dcp_rope_options *o, dcp_error *error)
{
    dcp_rope_options host_options = options ? *options : dcp_rope_options(); /* zero: defaults */
    dcp_status status;
    host_options.inv_freq = NULL;
    status = dcp_rope_options_resolve(&host_options, head_dim, o, error);
    if (status == DCP_OK) o->inv_freq = options ? options->inv_freq : NULL;
    return status;
}

static dcp_status dcp_cuda__rope_check(const dcp_rope_options *o, const dcp_cuda_layout *layout,
                                       int32_t rank, dcp_dtype dtype, int32_t head_dim,
                                       const dcp_cuda__rope_tensors *x, dcp_error *error)
{
    const char *const *names = x->names;
    dcp_status status;
    if ((status = dcp_cuda__check_layout(layout, error)) != DCP_OK ||
        (status = dcp_check_rank("rank", rank, layout->thd.cp, error)) != DCP_OK ||
        (status = dcp_cuda__check_dtype("dtype", dtype, 1, error)) != DCP_OK)
        return status;
    if (!x->q != !x->q_out || !x->k != !x->k_out)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "%s and %s, and %s and %s, must both be given or both be NULL",
                             names[0], names[1], names[2], names[3]);
    if (!x->q && !x->k)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "at least one of %s and %s must be given", names[0], names[2]);
    if ((x->q && x->q_heads < 1) || (x->k && x->k_heads < 1))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "num_q_heads and num_k_heads of given tensors must be >= 1, got "
                             "%d and %d",
                             (int)x->q_heads, (int)x->k_heads);
    if ((x->q && (status = dcp_cuda__check_elements(names[0], layout->local_rows,
                                                    (int64_t)x->q_heads * head_dim,
                                                    dcp_dtype_size(dtype), error)) != DCP_OK) ||
        (x->k && (status = dcp_cuda__check_elements(names[2], layout->local_rows,
                                                    (int64_t)x->k_heads * head_dim,
                                                    dcp_dtype_size(dtype), error)) != DCP_OK))
        return status;
    if (o->rotary_dim / 2 > DCP_CUDA__ROPE_MAX_ANGLES)
        return dcp_error_set(error, DCP_ERROR_UNSUPPORTED,
                             "rotary_dim %d: the kernel keeps at most %d pairs per row",
                             (int)o->rotary_dim, DCP_CUDA__ROPE_MAX_ANGLES);
    return DCP_OK;
}

static dcp_cuda__rope_args dcp_cuda__rope_args_of(const dcp_rope_options *o,
                                                  const dcp_cuda_layout *layout, int32_t rank,
                                                  int32_t head_dim,
                                                  const dcp_cuda__rope_tensors *x,
                                                  double direction)
{
    dcp_cuda__rope_args a;
    dcp_cuda__args_of_layout(&a, layout);
    a.cp = layout->thd.cp;
    a.rank = rank;
    a.rows = layout->local_rows;
    a.head_dim = head_dim;
    a.rotary_dim = o->rotary_dim;
    a.pairs = o->rotary_dim / 2;
    a.q_heads = x->q ? x->q_heads : 0;
    a.k_heads = x->k ? x->k_heads : 0;
    a.q = x->q, a.q_out = x->q_out, a.k = x->k, a.k_out = x->k_out;
    a.inv_freq = o->inv_freq;
    a.theta_base = o->theta_base;
    a.direction = direction;
    return a;
}

/* Units of work and rows per block (DCP_CUDA__ROPE_UNITS a block, bounded by the rows and the
   angles it keeps); *vector says whether the units are 16 bytes wide (every size and pointer
   allows) or single elements. */
static dcp_status dcp_cuda__rope_units(dcp_cuda__rope_args *a, int32_t style, size_t element,
                                       int *vector, dcp_error *error)
{
    int32_t V = (int32_t)(DCP_CUDA__VECTOR_BYTES / element), heads, units;
    *vector = (style == DCP_ROPE_ROTATE_HALF ? a->pairs % V == 0 : a->rotary_dim % V == 0) &&
              (a->head_dim - a->rotary_dim) % V == 0 &&
              dcp_cuda__aligned(a->q, DCP_CUDA__VECTOR_BYTES) &&
              dcp_cuda__aligned(a->q_out, DCP_CUDA__VECTOR_BYTES) &&
              dcp_cuda__aligned(a->k, DCP_CUDA__VECTOR_BYTES) &&
              dcp_cuda__aligned(a->k_out, DCP_CUDA__VECTOR_BYTES);
    if (!*vector) V = 1;
    a->pair_units = style == DCP_ROPE_ROTATE_HALF ? a->pairs / V
                                                  : a->rotary_dim / (V == 1 ? 2 : V);
    a->copy_units = (a->head_dim - a->rotary_dim) / V;
    heads = a->q_heads + a->k_heads;
    units = a->pair_units + a->copy_units;
    if ((int64_t)heads * units > DCP_CUDA__ROPE_MAX_ROW_UNITS)
        return dcp_error_set(error, DCP_ERROR_UNSUPPORTED,
                             "RoPE rows of %d heads x %d units are too wide", (int)heads,
                             (int)units);
    a->rows_per_block = DCP_CUDA__ROPE_UNITS / (heads * units);
    if (a->rows_per_block > DCP_CUDA__ROPE_MAX_ROWS) a->rows_per_block = DCP_CUDA__ROPE_MAX_ROWS;
    if (a->rows_per_block > DCP_CUDA__ROPE_MAX_ANGLES / a->pairs)
        a->rows_per_block = DCP_CUDA__ROPE_MAX_ANGLES / a->pairs;
    if (a->rows_per_block < 1) a->rows_per_block = 1;
    if ((a->rows + a->rows_per_block - 1) / a->rows_per_block > INT32_MAX)
        return dcp_error_set(error, DCP_ERROR_UNSUPPORTED, "%lld local rows are too many",
                             (long long)a->rows);
    return DCP_OK;
}

static dcp_status dcp_cuda__rope(const dcp_rope_options *options, const dcp_cuda_layout *layout,
                                 int32_t rank, dcp_dtype dtype, int32_t head_dim,
                                 const dcp_cuda__rope_tensors *x, double direction, void *stream,
                                 dcp_error *error)
{
    const cudaStream_t s = (cudaStream_t)stream;
    dcp_rope_options o;
    dcp_cuda__rope_args a;
    int vector;
    dcp_status status;
    if ((status = dcp_cuda__rope_resolve(options, head_dim, &o, error)) != DCP_OK ||
        (status = dcp_cuda__rope_check(&o, layout, rank, dtype, head_dim, x, error)) != DCP_OK)
        return status;
    a = dcp_cuda__rope_args_of(&o, layout, rank, head_dim, x, direction);
    if ((status = dcp_cuda__rope_units(&a, o.style, dcp_dtype_size(dtype), &vector, error)) !=
        DCP_OK)
        return status;
    if (a.rows == 0) return dcp_error_clear(error);
    return dcp_cuda__with_dtype("dtype", dtype, error, [&](auto element) {
        return dcp_cuda__rope_launch<decltype(element)>(a, o.style, vector, s, error);
    });
}

/* The forward and backward entry points differ only in the names their errors give the
   tensors and in the rotation's sign (the backward rotates by -theta, since R(theta)^T =
   R(-theta)), so one macro writes both and their checks cannot drift apart. */
#define DCP_CUDA__ROPE_ENTRY(function, sign, q_in, q_out, k_in, k_out)                           \
    extern "C" dcp_status function(const dcp_rope_options *options,                              \
                                   const dcp_cuda_layout *layout, int32_t rank, dcp_dtype dtype, \
                                   int32_t head_dim, int32_t num_q_heads, const void *q_in,      \
                                   void *q_out, int32_t num_k_heads, const void *k_in,           \
                                   void *k_out, void *stream, dcp_error *error)                  \
    {                                                                                            \
        static const char *const names[] = {#q_in, #q_out, #k_in, #k_out};                       \
        const dcp_cuda__rope_tensors x = {num_q_heads, num_k_heads, q_in, k_in,                  \
                                          q_out, k_out, names};                                  \
        return dcp_cuda__rope(options, layout, rank, dtype, head_dim, &x, sign, stream,          \
                              error);                                                            \
    }
DCP_CUDA__ROPE_ENTRY(dcp_cuda_rope_forward, 1.0, q, q_out, k, k_out)
DCP_CUDA__ROPE_ENTRY(dcp_cuda_rope_backward, -1.0, dq_out, dq, dk_out, dk)
#undef DCP_CUDA__ROPE_ENTRY

/* ==================================================================================== conv1d
   Design (forward and backward share it). The unit of work is a warp: its 32 lanes hold 32
   consecutive vectors of V channels (V x sizeof(T) = 16 bytes when the channel count and the
   pointers allow, 8 in the backward of 16-bit tensors: dcp_cuda__conv_lane_width; else
   V = 1), so one warp access is 512 (256) contiguous bytes of a row, and the warp streams a
   contiguous run of rows_per_warp rows from top to bottom. A block is
   DCP_CUDA__CONV_WARPS warps on one channel group and consecutive runs (a slice); the grid is
   slices x channel groups, a pure function of the shape (dcp_cuda_conv1d_launch_geometry), so
   nothing is tuned or compiled per shape. Sequence boundaries: one binary search in
   cu_seqlens_padded for the run's first row, then the warp walks the boundaries as it goes;
   every lane of a warp is on the same row, so each branch on a row is warp-uniform. Within a
   sequence a lane keeps the W - 1 previous input rows in registers (a sliding window: every x
   row is loaded once, plus W - 1 rows of halo where a run starts inside a sequence) and loads
   CHUNK rows before it uses any, so a warp keeps CHUNK x 512 bytes in flight. The window is
   zeroed where a sequence starts: taps before the start add 0, and padding rows, never
   loaded, cannot leak into the next sequence. W is a template parameter (one kernel per
   width up to DCP_CUDA_CONV1D_MAX_WIDTH), so width 4 runs the code it would run alone. fp32
   math; the sigmoid of SiLU uses the fast exponential for 16-bit tensors (error ~1e-6
   relative, far below their rounding) and the accurate one for fp32.
   Forward: y = act(bias + sum of taps); padding rows are written 0.
   Backward: a lane recomputes each row's pre-activation and g = dy act'(pre), keeps the last
   W values of g in registers and writes dx[t] = sum_k w[k] g[t + W - 1 - k] (the transposed
   taps, over rows of t's sequence) W - 1 rows behind, so a run reads x and dy W - 1 rows past
   its end. dweight and dbias of a run's own rows stay in registers; a block sums its warps in
   a fixed order (double) into one float partial per slice, value and channel (workspace), and
   a second kernel sums the slices in order in double. No atomics: bitwise reproducible. */

#define DCP_CUDA__CONV_LANES 32           /* channel vectors per warp */
#define DCP_CUDA__CONV_WARPS 4            /* warps per block: consecutive runs of one group */
#define DCP_CUDA__CONV_THREADS (DCP_CUDA__CONV_LANES * DCP_CUDA__CONV_WARPS)
#define DCP_CUDA__CONV_TARGET_WARPS 16384 /* runs a launch aims at: several waves on any GPU */
#define DCP_CUDA__CONV_MIN_RUN 8          /* rows per run at least: small launches still spread */
#define DCP_CUDA__CONV_MAX_GROUPS DCP_CUDA__MAX_GRID_Y /* channel groups: grid.y */
#define DCP_CUDA__CONV_REDUCE_THREADS 256
#define DCP_CUDA__CONV_BACKWARD_16BIT_BYTES 8 /* a lane's access, backward of 16-bit tensors */
static_assert(DCP_CUDA__CONV_LANES == DCP_CUDA__WARP_SIZE, "a lane of the warp per vector");

/* Channels per lane on the vector path: 16 bytes in the forward; the backward keeps three
   float rows of state per channel (the x and g windows and the gradients), so 16-bit tensors
   move 4 channels (8 bytes, 256 contiguous bytes a warp) per lane there and the state stays
   in registers at the occupancy that keeps enough bytes in flight. */
__host__ __device__ constexpr int dcp_cuda__conv_lane_width(int element, int backward)
{
    return (backward && element < (int)sizeof(float) ? DCP_CUDA__CONV_BACKWARD_16BIT_BYTES
                                                      : DCP_CUDA__VECTOR_BYTES) /
           element;
}

/* Every shape constant of one kernel configuration. */
template <typename T, int V, int W> struct dcp_cuda__conv_traits {
    static constexpr int kHalo = W - 1;     /* previous rows a row taps */
    /* rows loaded before any is used: 8 x 16 bytes a lane in the forward (4 x 16 for 8
       channels a lane, whose float state is twice as large); the backward loads x and dy */
    static constexpr int kForwardChunk = W > 4 ? 2 : V >= 8 ? 4 : 8;
    static constexpr int kBackwardChunk = W > 4 ? 2 : 4;
    static constexpr int kValues = W + 1;   /* gradient values per channel: taps and bias */
    /* blocks per SM the register budget is set for (65536 registers / 128 threads / blocks,
       checked with -Xptxas -v: no spills): up to width 4 the occupancy that keeps bytes in
       flight; wider kernels give occupancy up rather than spill */
    static constexpr int kForwardBlocks = W > 4 ? 2 : V >= 8 ? 3 : 4;
    static constexpr int kBackwardBlocks = W > 4 ? 2 : 3;
    static_assert(W >= 1 && W <= DCP_CUDA_CONV1D_MAX_WIDTH, "width out of range");
    static_assert(V == 1 || V * sizeof(T) == DCP_CUDA__VECTOR_BYTES ||
                      V * sizeof(T) == DCP_CUDA__CONV_BACKWARD_16BIT_BYTES,
                  "a lane moves 16 or 8 bytes, or one element");
};

struct dcp_cuda__conv_args {
    const int32_t *cu_seqlens, *cu_seqlens_padded;
    int32_t num_sequences;
    int64_t total_rows;
    int64_t rows_per_warp;
    int32_t channels, silu;
    int32_t vector_weights; /* weight and bias 16-byte aligned (the lane's taps by vectors) */
    const void *x, *dy;
    const float *weight, *bias;
    void *out;      /* y (forward) or dx (backward) */
    float *partial; /* backward: [slices][width + 1][channels] */
};

/* The rows of sequence j as a walk at row t sees them: [start, end), valid [start, valid_end).
   j outside [0, n) (the buffer tail, or device arrays that disagree with the host's) is
   padding up to total_rows. Clamped so that a walk always advances and stays in the buffer. */
struct dcp_cuda__conv_seq {
    int64_t start, valid_end, end;
};

__device__ __forceinline__ dcp_cuda__conv_seq dcp_cuda__conv_seq_at(const dcp_cuda__conv_args &a,
                                                                    int32_t j, int64_t t)
{
    dcp_cuda__conv_seq s;
    s.start = t, s.valid_end = t, s.end = a.total_rows;
    if (j < 0 || j >= a.num_sequences) return s;
    const int64_t start = a.cu_seqlens_padded[j], end = a.cu_seqlens_padded[j + 1];
    const int64_t valid_end = start + ((int64_t)a.cu_seqlens[j + 1] - a.cu_seqlens[j]);
    s.start = start < 0 ? 0 : start < t ? start : t;
    s.end = end <= t ? t + 1 : end < a.total_rows ? end : a.total_rows;
    s.valid_end = valid_end < s.end ? valid_end : s.end;
    return s;
}

/* The sequence after j that holds row t (empty ones skipped), or n. */
__device__ __forceinline__ int32_t dcp_cuda__conv_next_seq(const dcp_cuda__conv_args &a,
                                                           int32_t j, int64_t t)
{
    j++;
    while (j < a.num_sequences && (int64_t)a.cu_seqlens_padded[j + 1] <= t) j++;
    return j;
}

/* The run of one warp and lane: the rows [first, last) and the lane's first channel c0. */
struct dcp_cuda__conv_run {
    int64_t c0, first, last;
};

/* This thread's run; false when its lane is past the channels or its warp past the rows. */
template <int V>
__device__ __forceinline__ bool dcp_cuda__conv_run_of(const dcp_cuda__conv_args &a,
                                                      dcp_cuda__conv_run *run)
{
    run->c0 = ((int64_t)blockIdx.y * DCP_CUDA__CONV_LANES + threadIdx.x) * V;
    run->first = ((int64_t)blockIdx.x * DCP_CUDA__CONV_WARPS + threadIdx.y) * a.rows_per_warp;
    if (run->c0 >= a.channels || run->first >= a.total_rows) return false;
    run->last = run->first + a.rows_per_warp < a.total_rows ? run->first + a.rows_per_warp
                                                            : a.total_rows;
    return true;
}

template <typename T, int V>
__device__ __forceinline__ void dcp_cuda__conv_unpack(const dcp_cuda__pack<T, V> &pack,
                                                      float (&out)[V])
{
#pragma unroll
    for (int v = 0; v < V; v++) out[v] = dcp_cuda__to_float(pack.v[v]);
}

/* V floats stored as dtype in one 16-, 8- or 4-byte access. Plain stores of a struct or a
   uint4 were split into 2- and 4-byte stores in these kernels' PTX; the values are packed
   into 32-bit words and stored with __stwb (st.global.wb: the default cache policy, one
   vector instruction). */
template <typename T> __device__ __forceinline__ uint32_t dcp_cuda__conv_word(const float *in);
template <> __device__ __forceinline__ uint32_t dcp_cuda__conv_word<float>(const float *in)
{
    return __float_as_uint(in[0]);
}
template <> __device__ __forceinline__ uint32_t dcp_cuda__conv_word<__nv_bfloat16>(const float *in)
{
    const __nv_bfloat162 pair = __floats2bfloat162_rn(in[0], in[1]);
    return *reinterpret_cast<const uint32_t *>(&pair);
}
template <> __device__ __forceinline__ uint32_t dcp_cuda__conv_word<__half>(const float *in)
{
    const __half2 pair = __floats2half2_rn(in[0], in[1]);
    return *reinterpret_cast<const uint32_t *>(&pair);
}

template <typename T, int V, int BYTES = (int)(V * sizeof(T))> struct dcp_cuda__conv_storer {
    static __device__ __forceinline__ void store(T *p, const float (&in)[V])
    {
        dcp_cuda__store<T, V>(p, in); /* one element of 2 bytes */
    }
};
template <typename T, int V> struct dcp_cuda__conv_storer<T, V, 4> {
    static __device__ __forceinline__ void store(T *p, const float (&in)[V])
    {
        *reinterpret_cast<uint32_t *>(p) = dcp_cuda__conv_word<T>(in);
    }
};
template <typename T, int V> struct dcp_cuda__conv_storer<T, V, 8> {
    static __device__ __forceinline__ void store(T *p, const float (&in)[V])
    {
        constexpr int PER_WORD = V / 2;
        __stwb(reinterpret_cast<uint2 *>(p),
               make_uint2(dcp_cuda__conv_word<T>(in), dcp_cuda__conv_word<T>(in + PER_WORD)));
    }
};
template <typename T, int V> struct dcp_cuda__conv_storer<T, V, 16> {
    static __device__ __forceinline__ void store(T *p, const float (&in)[V])
    {
        constexpr int PER_WORD = V / 4;
        __stwb(reinterpret_cast<uint4 *>(p),
               make_uint4(dcp_cuda__conv_word<T>(in), dcp_cuda__conv_word<T>(in + PER_WORD),
                          dcp_cuda__conv_word<T>(in + 2 * PER_WORD),
                          dcp_cuda__conv_word<T>(in + 3 * PER_WORD)));
    }
};

template <typename T, int V>
__device__ __forceinline__ void dcp_cuda__conv_store(T *p, const float (&in)[V])
{
    dcp_cuda__conv_storer<T, V>::store(p, in);
}

template <typename T, int V> __device__ __forceinline__ void dcp_cuda__conv_store_zero(T *p)
{
    float zero[V];
#pragma unroll
    for (int v = 0; v < V; v++) zero[v] = 0.0f;
    dcp_cuda__conv_store<T, V>(p, zero);
}

template <int V> __device__ __forceinline__ void dcp_cuda__conv_zero(float (&row)[V])
{
#pragma unroll
    for (int v = 0; v < V; v++) row[v] = 0.0f;
}

/* The walk of a run, forward and backward alike: sequence after sequence, valid_rows(s, t,
   own_end) on the run's valid rows [t, own_end) of sequence s (when there are any), then the
   run's padding rows of s written 0 in out (y or dx, already offset to the lane's channels). */
template <typename T, int V, typename ValidRows>
__device__ __forceinline__ void dcp_cuda__conv_walk(const dcp_cuda__conv_args &a,
                                                    const dcp_cuda__conv_run &run, T *out,
                                                    ValidRows valid_rows)
{
    int32_t j = dcp_cuda__find_sequence(a.cu_seqlens_padded, a.num_sequences, run.first);
    for (int64_t t = run.first; t < run.last;) {
        const dcp_cuda__conv_seq s = dcp_cuda__conv_seq_at(a, j, t);
        const int64_t stop = s.end < run.last ? s.end : run.last;
        const int64_t own_end = s.valid_end < stop ? s.valid_end : stop;
        if (t < own_end) valid_rows(s, t, own_end);
        for (int64_t r = t > own_end ? t : own_end; r < stop; r++)
            dcp_cuda__conv_store_zero<T, V>(out + r * a.channels);
        t = stop;
        j = dcp_cuda__conv_next_seq(a, j, t);
    }
}

template <typename T> __device__ __forceinline__ float dcp_cuda__conv_sigmoid(float z)
{
    return __fdividef(1.0f, 1.0f + __expf(-z));
}
template <> __device__ __forceinline__ float dcp_cuda__conv_sigmoid<float>(float z)
{
    return 1.0f / (1.0f + expf(-z));
}

/* Weights of the lane's V channels ([channels, W] in memory) and their biases. The lane's V x W
   taps and V biases are contiguous: with V a multiple of 4 they move as 16-byte vectors (the
   kernel report: a scalar tap per lane and request touched 32 sectors for 128 bytes, most of
   the forward's load sectors at the runs' lengths), else one float at a time. */
template <int V, int W>
__device__ __forceinline__ void dcp_cuda__conv_weights(const dcp_cuda__conv_args &a, int64_t c0,
                                                       float (&w)[W][V], float (&b)[V])
{
    constexpr int FLOATS = DCP_CUDA__VECTOR_BYTES / (int)sizeof(float);
    if (V % FLOATS == 0 && a.vector_weights) {
        float taps[V * W];
#pragma unroll
        for (int i = 0; i < V * W; i += FLOATS)
            dcp_cuda__load<float, FLOATS>(a.weight + c0 * W + i,
                                          *reinterpret_cast<float(*)[FLOATS]>(taps + i));
#pragma unroll
        for (int v = 0; v < V; v++)
#pragma unroll
            for (int k = 0; k < W; k++) w[k][v] = taps[v * W + k];
#pragma unroll
        for (int v = 0; v < V; v += FLOATS) {
            if (a.bias) dcp_cuda__load<float, FLOATS>(a.bias + c0 + v,
                                                      *reinterpret_cast<float(*)[FLOATS]>(b + v));
            else
#pragma unroll
                for (int i = 0; i < FLOATS; i++) b[v + i] = 0.0f;
        }
        return;
    }
#pragma unroll
    for (int v = 0; v < V; v++) {
#pragma unroll
        for (int k = 0; k < W; k++) w[k][v] = a.weight[(c0 + v) * W + k];
        b[v] = a.bias ? a.bias[c0 + v] : 0.0f;
    }
}

/* Slots 0..W-2 of the window: rows t - W + 1 .. t - 1, those before `start` 0. */
template <typename T, int V, int W, int N>
__device__ __forceinline__ void dcp_cuda__conv_halo(const T *__restrict__ x, int64_t channels,
                                                    int64_t t, int64_t start,
                                                    float (&window)[N][V])
{
#pragma unroll
    for (int k = 0; k < W - 1; k++) {
        const int64_t r = t - (W - 1) + k;
        if (r >= start) dcp_cuda__load<T, V>(x + r * channels, window[k]);
        else dcp_cuda__conv_zero<V>(window[k]);
    }
}

/* bias + the W taps ending at window slot i + W - 1, for channel v. */
template <int V, int W, int N>
__device__ __forceinline__ float dcp_cuda__conv_pre(const float (&w)[W][V], const float (&b)[V],
                                                    const float (&window)[N][V], int i, int v)
{
    float pre = b[v];
#pragma unroll
    for (int k = 0; k < W; k++) pre = fmaf(w[k][v], window[i + k][v], pre);
    return pre;
}

/* The window's last W - 1 rows become its first. */
template <int V, int W, int N>
__device__ __forceinline__ void dcp_cuda__conv_slide(float (&window)[N][V])
{
#pragma unroll
    for (int k = 0; k < W - 1; k++)
#pragma unroll
        for (int v = 0; v < V; v++) window[k][v] = window[N - (W - 1) + k][v];
}

/* Forward over the valid rows [t, end) of one sequence. window[0..W-2] hold the rows before t
   (dcp_cuda__conv_halo); slot W - 1 takes each row as it is converted, and the window moves
   down one row per output (register renaming in the unrolled loop, not copies). */
template <typename T, int V, int W>
__device__ __forceinline__ void dcp_cuda__conv_forward_rows(
    const T *__restrict__ x, T *__restrict__ y, int64_t channels, int64_t t, int64_t end,
    const float (&w)[W][V], const float (&b)[V], bool silu, float (&window)[W][V])
{
    constexpr int CHUNK = dcp_cuda__conv_traits<T, V, W>::kForwardChunk;
    for (; t < end; t += CHUNK) {
        dcp_cuda__pack<T, V> raw[CHUNK];
#pragma unroll
        for (int i = 0; i < CHUNK; i++)
            if (t + i < end)
                raw[i] = dcp_cuda__vload(
                    reinterpret_cast<const dcp_cuda__pack<T, V> *>(x + (t + i) * channels));
#pragma unroll
        for (int i = 0; i < CHUNK; i++) {
            if (t + i >= end) break;
            float out[V];
            dcp_cuda__conv_unpack<T, V>(raw[i], window[W - 1]);
#pragma unroll
            for (int v = 0; v < V; v++) {
                const float pre = dcp_cuda__conv_pre<V, W>(w, b, window, 0, v);
                out[v] = silu ? pre * dcp_cuda__conv_sigmoid<T>(pre) : pre;
            }
            dcp_cuda__conv_store<T, V>(y + (t + i) * channels, out);
            dcp_cuda__conv_slide<V, W>(window);
        }
    }
}

template <typename T, int V, int W>
__global__ void __launch_bounds__(DCP_CUDA__CONV_THREADS,
                                  dcp_cuda__conv_traits<T, V, W>::kForwardBlocks)
    dcp_cuda__conv_forward_kernel(const dcp_cuda__conv_args a)
{
    dcp_cuda__conv_run run;
    if (!dcp_cuda__conv_run_of<V>(a, &run)) return; /* no barrier follows */
    const T *x = static_cast<const T *>(a.x) + run.c0;
    T *y = static_cast<T *>(a.out) + run.c0;
    float w[W][V], b[V], window[W][V];
    dcp_cuda__conv_weights<V, W>(a, run.c0, w, b);
    dcp_cuda__conv_walk<T, V>(a, run, y,
                              [&](const dcp_cuda__conv_seq &s, int64_t t, int64_t valid_stop) {
                                  dcp_cuda__conv_halo<T, V, W>(x, a.channels, t, s.start, window);
                                  dcp_cuda__conv_forward_rows<T, V, W>(
                                      x, y, a.channels, t, valid_stop, w, b, a.silu != 0, window);
                              });
}

/* The rows [t, own_end) of one sequence that a run owns, backward: g of the rows [t,
   compute_end) (own_end <= compute_end <= own_end + W - 1: valid rows past the run's end),
   0 after; dx of the owned rows, W - 1 rows behind; their dweight and dbias terms. xw[0..W-2]
   hold the x rows before t (dcp_cuda__conv_halo); xw and gw (g of the same rows) move down
   one row per row, as in the forward. */
template <typename T, int V, int W>
__device__ __forceinline__ void dcp_cuda__conv_backward_rows(
    const T *__restrict__ x, const T *__restrict__ dy, T *__restrict__ dx, int64_t channels,
    int64_t t, int64_t own_end, int64_t compute_end, const float (&w)[W][V],
    const float (&b)[V], bool silu, float (&xw)[W][V], float (&dw)[W][V], float (&db)[V])
{
    constexpr int CHUNK = dcp_cuda__conv_traits<T, V, W>::kBackwardChunk, H = W - 1;
    float gw[W][V];
#pragma unroll
    for (int k = 0; k < W; k++) dcp_cuda__conv_zero<V>(gw[k]);
    const int64_t stream_end = own_end + H, first_dx = t + H;
    for (int64_t r0 = t; r0 < stream_end; r0 += CHUNK) {
        dcp_cuda__pack<T, V> raw_x[CHUNK], raw_dy[CHUNK];
#pragma unroll
        for (int i = 0; i < CHUNK; i++)
            if (r0 + i < compute_end) {
                raw_x[i] = dcp_cuda__vload(
                    reinterpret_cast<const dcp_cuda__pack<T, V> *>(x + (r0 + i) * channels));
                raw_dy[i] = dcp_cuda__vload(
                    reinterpret_cast<const dcp_cuda__pack<T, V> *>(dy + (r0 + i) * channels));
            }
#pragma unroll
        for (int i = 0; i < CHUNK; i++) {
            const int64_t r = r0 + i;
            if (r >= stream_end) break;
            if (r < compute_end) {
                dcp_cuda__conv_unpack<T, V>(raw_x[i], xw[H]);
                dcp_cuda__conv_unpack<T, V>(raw_dy[i], gw[H]);
                if (silu)
#pragma unroll
                    for (int v = 0; v < V; v++) {
                        const float pre = dcp_cuda__conv_pre<V, W>(w, b, xw, 0, v);
                        const float s = dcp_cuda__conv_sigmoid<T>(pre);
                        gw[H][v] *= s * (1.0f + pre * (1.0f - s));
                    }
            } else {
                dcp_cuda__conv_zero<V>(xw[H]);
                dcp_cuda__conv_zero<V>(gw[H]);
            }
            if (r < own_end)
#pragma unroll
                for (int v = 0; v < V; v++) {
                    db[v] += gw[H][v];
#pragma unroll
                    for (int k = 0; k < W; k++) dw[k][v] = fmaf(gw[H][v], xw[k][v], dw[k][v]);
                }
            if (r >= first_dx) { /* row r - H: its readers r - H + d are in slot d */
                float out[V];
#pragma unroll
                for (int v = 0; v < V; v++) {
                    float sum = 0.0f;
#pragma unroll
                    for (int k = 0; k < W; k++) sum = fmaf(w[k][v], gw[H - k][v], sum);
                    out[v] = sum;
                }
                dcp_cuda__conv_store<T, V>(dx + (r - H) * channels, out);
            }
            dcp_cuda__conv_slide<V, W>(xw);
            dcp_cuda__conv_slide<V, W>(gw);
        }
    }
}

template <typename T, int V, int W>
__global__ void __launch_bounds__(DCP_CUDA__CONV_THREADS,
                                  dcp_cuda__conv_traits<T, V, W>::kBackwardBlocks)
    dcp_cuda__conv_backward_kernel(const dcp_cuda__conv_args a)
{
    typedef dcp_cuda__conv_traits<T, V, W> K;
    DCP_CUDA__SHARED(float, sums, [DCP_CUDA__CONV_WARPS][K::kValues][DCP_CUDA__CONV_LANES * V]);
    dcp_cuda__conv_run run;
    float dw[W][V], db[V];
#pragma unroll
    for (int k = 0; k < W; k++) dcp_cuda__conv_zero<V>(dw[k]);
    dcp_cuda__conv_zero<V>(db);
    if (dcp_cuda__conv_run_of<V>(a, &run)) { /* else: zero partials, and the barrier */
        const T *x = static_cast<const T *>(a.x) + run.c0;
        const T *dy = static_cast<const T *>(a.dy) + run.c0;
        T *dx = static_cast<T *>(a.out) + run.c0;
        const int64_t ahead = run.last + K::kHalo; /* the rows dx of the run's rows reads */
        float w[W][V], b[V], xw[W][V];
        dcp_cuda__conv_weights<V, W>(a, run.c0, w, b);
        dcp_cuda__conv_walk<T, V>(
            a, run, dx, [&](const dcp_cuda__conv_seq &s, int64_t t, int64_t own_end) {
                dcp_cuda__conv_halo<T, V, W>(x, a.channels, t, s.start, xw);
                dcp_cuda__conv_backward_rows<T, V, W>(
                    x, dy, dx, a.channels, t, own_end, s.valid_end < ahead ? s.valid_end : ahead,
                    w, b, a.silu != 0, xw, dw, db);
            });
    }
    /* the block's partial: its warps summed in order, in double */
#pragma unroll
    for (int v = 0; v < V; v++) {
#pragma unroll
        for (int k = 0; k < W; k++) sums[threadIdx.y][k][threadIdx.x * V + v] = dw[k][v];
        sums[threadIdx.y][W][threadIdx.x * V + v] = db[v];
    }
    __syncthreads();
    for (int32_t i = threadIdx.y * DCP_CUDA__CONV_LANES + threadIdx.x;
         i < K::kValues * DCP_CUDA__CONV_LANES * V; i += DCP_CUDA__CONV_THREADS) {
        const int32_t q = i / (DCP_CUDA__CONV_LANES * V);
        const int32_t lane_value = i % (DCP_CUDA__CONV_LANES * V);
        const int64_t c = (int64_t)blockIdx.y * DCP_CUDA__CONV_LANES * V + lane_value;
        if (c >= a.channels) continue;
        double sum = 0.0;
        for (int warp = 0; warp < DCP_CUDA__CONV_WARPS; warp++) sum += sums[warp][q][lane_value];
        a.partial[((int64_t)blockIdx.x * K::kValues + q) * a.channels + c] = (float)sum;
    }
}

/* Thread i sums value i / channels (weight taps, then the bias) of channel i % channels over
   the slices, in slice order. */
__global__ void __launch_bounds__(DCP_CUDA__CONV_REDUCE_THREADS)
    dcp_cuda__conv_reduce_kernel(const float *partial, int64_t slices, int32_t channels,
                                 int32_t width, float *dweight, float *dbias)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)(width + 1) * channels) return;
    const int32_t q = (int32_t)(i / channels), c = (int32_t)(i - (int64_t)q * channels);
    double sum = 0.0;
    for (int64_t s = 0; s < slices; s++) sum += partial[(s * (width + 1) + q) * channels + c];
    if (q < width) dweight[(int64_t)c * width + q] = (float)sum;
    else if (dbias) dbias[c] = (float)sum;
}

/* ------------------------------------------------------------------------ conv1d: host */

static dcp_status dcp_cuda__conv_width(const dcp_conv1d_params *params, dcp_conv1d_params *p,
                                       dcp_error *error)
{
    dcp_status status;
    if ((status = dcp_conv1d_params_resolve(params, p, error)) != DCP_OK) return status;
    if (p->width > DCP_CUDA_CONV1D_MAX_WIDTH)
        return dcp_error_set(error, DCP_ERROR_UNSUPPORTED,
                             "conv1d width %d: the CUDA kernels serve widths 1 to %d",
                             (int)p->width, DCP_CUDA_CONV1D_MAX_WIDTH);
    return DCP_OK;
}

/* The launch for a resolved shape: see dcp_cuda_conv1d_launch_geometry. */
static dcp_status dcp_cuda__conv_geometry(const dcp_conv1d_params *p, int64_t total_rows,
                                          size_t element, int32_t backward, int32_t vector,
                                          dcp_cuda_conv1d_geometry *g, dcp_error *error)
{
    const int32_t V = dcp_cuda__conv_lane_width((int)element, backward != 0);
    int64_t vectors, run, runs;
    memset(g, 0, sizeof *g);
    g->vector_width = vector && p->channels % V == 0 ? V : 1;
    g->warps_per_block = DCP_CUDA__CONV_WARPS;
    vectors = p->channels / g->vector_width;
    if ((vectors + DCP_CUDA__CONV_LANES - 1) / DCP_CUDA__CONV_LANES > DCP_CUDA__CONV_MAX_GROUPS)
        return dcp_error_set(error, DCP_ERROR_UNSUPPORTED,
                             "conv1d channels %d: at most %lld vectors of %d channels",
                             (int)p->channels,
                             (long long)DCP_CUDA__CONV_MAX_GROUPS * DCP_CUDA__CONV_LANES,
                             (int)g->vector_width);
    g->channel_groups = (int32_t)((vectors + DCP_CUDA__CONV_LANES - 1) / DCP_CUDA__CONV_LANES);
    if (total_rows <= 0) return DCP_OK; /* nothing to launch */
    run = (total_rows * g->channel_groups + DCP_CUDA__CONV_TARGET_WARPS - 1) /
          DCP_CUDA__CONV_TARGET_WARPS;
    if (run < DCP_CUDA__CONV_MIN_RUN) run = DCP_CUDA__CONV_MIN_RUN;
    runs = (total_rows + run - 1) / run;
    if (backward && runs > (int64_t)DCP_CUDA_CONV1D_SLICES * DCP_CUDA__CONV_WARPS) {
        /* one partial per slice: longer runs instead of more slices */
        run = (total_rows + (int64_t)DCP_CUDA_CONV1D_SLICES * DCP_CUDA__CONV_WARPS - 1) /
              ((int64_t)DCP_CUDA_CONV1D_SLICES * DCP_CUDA__CONV_WARPS);
        runs = (total_rows + run - 1) / run;
    }
    g->rows_per_warp = run;
    g->slices = (runs + DCP_CUDA__CONV_WARPS - 1) / DCP_CUDA__CONV_WARPS;
    if (g->slices > INT32_MAX)
        return dcp_error_set(error, DCP_ERROR_UNSUPPORTED, "total_rows %lld is too many",
                             (long long)total_rows);
    return DCP_OK;
}

/* The shape of a conv1d call: params (resolved into *p, a width the kernels serve), dtype,
   and total_rows x channels addressable. */
static dcp_status dcp_cuda__conv_shape(const dcp_conv1d_params *params, int64_t total_rows,
                                       dcp_dtype dtype, dcp_conv1d_params *p, dcp_error *error)
{
    dcp_status status;
    if ((status = dcp_cuda__conv_width(params, p, error)) != DCP_OK ||
        (status = dcp_cuda__check_dtype("dtype", dtype, 1, error)) != DCP_OK)
        return status;
    if (total_rows < 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "total_rows must be >= 0, got %lld", (long long)total_rows);
    return dcp_cuda__check_elements("x", total_rows, p->channels, dcp_dtype_size(dtype), error);
}

extern "C" dcp_status dcp_cuda_conv1d_launch_geometry(const dcp_conv1d_params *params,
                                                      int64_t total_rows, dcp_dtype dtype,
                                                      int32_t backward, int32_t vector,
                                                      dcp_cuda_conv1d_geometry *geometry,
                                                      dcp_error *error)
{
    dcp_conv1d_params p;
    dcp_status status = dcp_cuda__conv_shape(params, total_rows, dtype, &p, error);
    if (status != DCP_OK) return status;
    if (!geometry)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "geometry must not be NULL");
    status = dcp_cuda__conv_geometry(&p, total_rows, dcp_dtype_size(dtype), backward != 0,
                                     vector != 0, geometry, error);
    return status == DCP_OK ? dcp_error_clear(error) : status;
}

static dcp_status dcp_cuda__conv_check(const dcp_conv1d_params *params,
                                       const dcp_cuda_layout *layout, int64_t total_rows,
                                       dcp_dtype dtype, dcp_conv1d_params *p, dcp_error *error)
{
    dcp_status status;
    if ((status = dcp_cuda__conv_shape(params, total_rows, dtype, p, error)) != DCP_OK ||
        (status = dcp_cuda__check_layout(layout, error)) != DCP_OK)
        return status;
    if (layout->thd.cp != 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "conv1d needs a layout of whole sequences (cp 1), got layout cp %d",
                             (int)layout->thd.cp);
    if (total_rows < layout->local_rows)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "total_rows %lld < the layout's local_rows %lld",
                             (long long)total_rows, (long long)layout->local_rows);
    return DCP_OK;
}

static dcp_cuda__conv_args dcp_cuda__conv_args_of(const dcp_conv1d_params *p,
                                                  const dcp_cuda_layout *layout,
                                                  int64_t total_rows,
                                                  const dcp_cuda_conv1d_geometry *g)
{
    dcp_cuda__conv_args a;
    dcp_cuda__args_of_layout(&a, layout);
    a.total_rows = total_rows;
    a.rows_per_warp = g->rows_per_warp;
    a.channels = p->channels;
    a.silu = p->silu;
    a.vector_weights = 0; /* the caller's pointers decide (dcp_cuda__conv_bind_weights) */
    return a;
}

/* The weights and biases of a call, and whether they may move as 16-byte vectors. */
static void dcp_cuda__conv_bind_weights(dcp_cuda__conv_args *a, const float *weight,
                                        const float *bias)
{
    a->weight = weight, a->bias = bias;
    a->vector_weights = dcp_cuda__aligned(weight, DCP_CUDA__VECTOR_BYTES) &&
                        (!bias || dcp_cuda__aligned(bias, DCP_CUDA__VECTOR_BYTES));
}

/* The kernel of one direction and width, and the kernel for a width known at run time: W's, or
   the next width down's (so every width up to the maximum is instantiated, once per
   direction, and only in its direction). */
typedef void (*dcp_cuda__conv_kernel_fn)(const dcp_cuda__conv_args);
template <typename T, int V, int W, bool BACKWARD> struct dcp_cuda__conv_kernel {
    static dcp_cuda__conv_kernel_fn get() { return dcp_cuda__conv_forward_kernel<T, V, W>; }
};
template <typename T, int V, int W> struct dcp_cuda__conv_kernel<T, V, W, true> {
    static dcp_cuda__conv_kernel_fn get() { return dcp_cuda__conv_backward_kernel<T, V, W>; }
};
template <typename T, int V, int W, bool BACKWARD> struct dcp_cuda__conv_kernels {
    static dcp_cuda__conv_kernel_fn of(int32_t width)
    {
        return width == W ? dcp_cuda__conv_kernel<T, V, W, BACKWARD>::get()
                          : dcp_cuda__conv_kernels<T, V, W - 1, BACKWARD>::of(width);
    }
};
template <typename T, int V, bool BACKWARD> struct dcp_cuda__conv_kernels<T, V, 0, BACKWARD> {
    static dcp_cuda__conv_kernel_fn of(int32_t) { return NULL; } /* widths are checked */
};

template <typename T, bool BACKWARD>
static dcp_status dcp_cuda__conv_launch_typed(const dcp_cuda__conv_args &a, int32_t width,
                                              const dcp_cuda_conv1d_geometry *g,
                                              cudaStream_t stream, dcp_error *error)
{
    constexpr int V = dcp_cuda__conv_lane_width((int)sizeof(T), BACKWARD);
    const dim3 grid((unsigned)g->slices, (unsigned)g->channel_groups);
    const dcp_cuda__conv_kernel_fn kernel =
        g->vector_width == V
            ? dcp_cuda__conv_kernels<T, V, DCP_CUDA_CONV1D_MAX_WIDTH, BACKWARD>::of(width)
            : dcp_cuda__conv_kernels<T, 1, DCP_CUDA_CONV1D_MAX_WIDTH, BACKWARD>::of(width);
    DCP_CUDA_CHECK(dcp_cuda__launch(kernel, grid, dim3(DCP_CUDA__CONV_LANES, DCP_CUDA__CONV_WARPS),
                                    0, stream, a));
    return dcp_error_clear(error);
}

static dcp_status dcp_cuda__conv_launch(const dcp_cuda__conv_args &a, dcp_dtype dtype,
                                        int32_t width, int32_t backward,
                                        const dcp_cuda_conv1d_geometry *g, cudaStream_t stream,
                                        dcp_error *error)
{
    return dcp_cuda__with_dtype("dtype", dtype, error, [&](auto element) {
        typedef decltype(element) T;
        return backward ? dcp_cuda__conv_launch_typed<T, true>(a, width, g, stream, error)
                        : dcp_cuda__conv_launch_typed<T, false>(a, width, g, stream, error);
    });
}

/* The backward's workspace: a float partial per slice, value (taps and bias) and channel. */
static size_t dcp_cuda__conv_partial_bytes(int64_t slices, const dcp_conv1d_params *p)
{
    return (size_t)slices * (size_t)(p->width + 1) * (size_t)p->channels * sizeof(float);
}

extern "C" dcp_status dcp_cuda_conv1d_workspace_size(const dcp_conv1d_params *params,
                                                     size_t *bytes, dcp_error *error)
{
    dcp_conv1d_params p;
    dcp_status status;
    if (!bytes) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "bytes must not be NULL");
    if ((status = dcp_cuda__conv_width(params, &p, error)) != DCP_OK) return status;
    *bytes = dcp_cuda__conv_partial_bytes(DCP_CUDA_CONV1D_SLICES, &p);
    return dcp_error_clear(error);
}

extern "C" dcp_status dcp_cuda_conv1d_forward(const dcp_conv1d_params *params,
                                              const dcp_cuda_layout *layout, int64_t total_rows,
                                              dcp_dtype dtype, const void *x,
                                              const float *weight, const float *bias, void *y,
                                              void *stream, dcp_error *error)
{
    dcp_conv1d_params p;
    dcp_cuda_conv1d_geometry g;
    dcp_cuda__conv_args a;
    dcp_status status;
    if ((status = dcp_cuda__conv_check(params, layout, total_rows, dtype, &p, error)) != DCP_OK)
        return status;
    if (!x || !weight || !y)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "x, weight and y must not be NULL");
    if ((status = dcp_cuda__conv_geometry(&p, total_rows, dcp_dtype_size(dtype), 0,
                                          dcp_cuda__aligned(x, DCP_CUDA__VECTOR_BYTES) &&
                                              dcp_cuda__aligned(y, DCP_CUDA__VECTOR_BYTES),
                                          &g, error)) != DCP_OK)
        return status;
    if (g.slices == 0) return dcp_error_clear(error);
    a = dcp_cuda__conv_args_of(&p, layout, total_rows, &g);
    a.x = x, a.out = y;
    dcp_cuda__conv_bind_weights(&a, weight, bias);
    return dcp_cuda__conv_launch(a, dtype, p.width, 0, &g, (cudaStream_t)stream, error);
}

extern "C" dcp_status dcp_cuda_conv1d_backward(const dcp_conv1d_params *params,
                                               const dcp_cuda_layout *layout,
                                               int64_t total_rows, dcp_dtype dtype,
                                               const void *x, const float *weight,
                                               const float *bias, const void *dy, void *dx,
                                               float *dweight, float *dbias, void *workspace,
                                               size_t workspace_bytes, void *stream,
                                               dcp_error *error)
{
    dcp_conv1d_params p;
    dcp_cuda_conv1d_geometry g;
    dcp_cuda__conv_args a;
    size_t needed;
    cudaStream_t s = (cudaStream_t)stream;
    dcp_status status;
    if ((status = dcp_cuda__conv_check(params, layout, total_rows, dtype, &p, error)) != DCP_OK)
        return status;
    if (!x || !weight || !dy || !dx || !dweight)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "x, weight, dy, dx and dweight must not be NULL");
    if (bias && !dbias)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "dbias must not be NULL when bias is given");
    if ((status = dcp_cuda__conv_geometry(&p, total_rows, dcp_dtype_size(dtype), 1,
                                          dcp_cuda__aligned(x, DCP_CUDA__VECTOR_BYTES) &&
                                              dcp_cuda__aligned(dy, DCP_CUDA__VECTOR_BYTES) &&
                                              dcp_cuda__aligned(dx, DCP_CUDA__VECTOR_BYTES),
                                          &g, error)) != DCP_OK)
        return status;
    needed = dcp_cuda__conv_partial_bytes(g.slices, &p);
    if (needed > 0 && (!workspace || workspace_bytes < needed ||
                       !dcp_cuda__aligned(workspace, DCP_CUDA__VECTOR_BYTES)))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "workspace %p of %zu bytes: need %zu bytes, %d-byte aligned "
                             "(dcp_cuda_conv1d_workspace_size)",
                             workspace, workspace_bytes, needed, DCP_CUDA__VECTOR_BYTES);
    a = dcp_cuda__conv_args_of(&p, layout, total_rows, &g);
    a.x = x, a.dy = dy, a.out = dx;
    dcp_cuda__conv_bind_weights(&a, weight, bias);
    a.partial = (float *)workspace;
    if (g.slices > 0 &&
        (status = dcp_cuda__conv_launch(a, dtype, p.width, 1, &g, s, error)) != DCP_OK)
        return status;
    {   /* with no rows the slices are 0 and the sums 0: dweight and dbias are still written */
        const int64_t values = (int64_t)(p.width + 1) * p.channels;
        const unsigned blocks = (unsigned)((values + DCP_CUDA__CONV_REDUCE_THREADS - 1) /
                                           DCP_CUDA__CONV_REDUCE_THREADS);
        DCP_CUDA_CHECK(dcp_cuda__launch(dcp_cuda__conv_reduce_kernel, blocks,
                                        DCP_CUDA__CONV_REDUCE_THREADS, 0, s,
                                        (const float *)a.partial, (int64_t)g.slices, p.channels,
                                        p.width, dweight, dbias));
    }
    return dcp_error_clear(error);
}

/* ================================================================= LSE merge and conversion
   Design. Merge: a warp owns one (head, row) of the [rows, heads, dim] tensors, its lanes 4
   consecutive floats each with 16-byte accesses (1 when dim or a pointer does not allow it);
   consecutive warps take consecutive rows of one head, so the LSE [heads, rows] accesses of a
   block are contiguous too. The row's sequence comes from a binary search in
   cu_seqlens_padded (cached). Every lane reads both LSEs, computes the weights in float32 as
   1 / (1 + e) and e / (1 + e) with e = exp(low - high) (accurate whatever the LSEs'
   magnitude), a side at -inf is skipped (a row nothing saw stays 0 and -inf), and lane 0
   writes the merged LSE after __syncwarp, when every lane has read the old one.
   Finalize and convert move bytes only, so they are built for bytes in flight: a thread
   moves units of 8 values (two 16-byte float loads, one 16-byte store of bf16/fp16), loads
   DCP_CUDA__FINAL_UNITS units before it stores any, and blocks stride over the work (grid
   capped, so a block keeps its registers busy instead of paying a launch per few rows).
   Finalize: a block takes a tile of consecutive rows, all heads and dims of them (a flat,
   contiguous range of the [rows, heads, dim] tensor), finds whether each row is valid
   (zigzag position of `rank` below the valid length: one search per row, by as many threads
   as rows, into shared memory), then converts the tile, padding rows written 0 and -inf; the
   accumulator is read whatever the row (it is ours, zeroed by init), so loads never wait on
   the search's answer. out may be acc_out (float32): each element is read by the thread that
   writes it. Init: cudaMemsetAsync for the zeros and a fill for -inf. */

#define DCP_CUDA__WARPS 8 /* warps per block of the row kernels */
#define DCP_CUDA__ROW_THREADS (DCP_CUDA__WARPS * DCP_CUDA__WARP_SIZE)
#define DCP_CUDA__MERGE_VALUES 4 /* floats a lane moves per access on the vector path */
static_assert(DCP_CUDA__MERGE_VALUES * sizeof(float) == DCP_CUDA__VECTOR_BYTES,
              "a merge lane moves one 16-byte vector");
#define DCP_CUDA__FILL_THREADS 256
#define DCP_CUDA__FILL_MAX_BLOCKS 65536 /* grid cap of the fill's grid-stride loop */

struct dcp_cuda__merge_args {
    const int32_t *cu_seqlens, *cu_seqlens_padded;
    int32_t num_sequences, cp, rank;
    int64_t rows;
    int32_t heads, dim;
    int32_t half;
    const float *out, *lse; /* merge: the partial; finalize: the accumulator */
    float *acc_out, *acc_lse;
    void *final_out;
    float *final_lse;
};

__global__ void dcp_cuda__fill_kernel(float *p, int64_t count, float value)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (int64_t)gridDim.x * blockDim.x)
        p[i] = value;
}

template <int V>
__global__ void __launch_bounds__(DCP_CUDA__ROW_THREADS)
    dcp_cuda__merge_kernel(const dcp_cuda__merge_args a)
{
    const int64_t unit = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / DCP_CUDA__WARP_SIZE;
    const int32_t lane = threadIdx.x % DCP_CUDA__WARP_SIZE;
    if (unit >= (int64_t)a.heads * a.rows) return; /* whole warps leave together */
    const int32_t head = (int32_t)(unit / a.rows);
    const int64_t row = unit - (int64_t)head * a.rows;
    const dcp_cuda__row info = dcp_cuda__row_info(a.cu_seqlens, a.cu_seqlens_padded,
                                                  a.num_sequences, a.cp, 0, row);
    if (info.seq < 0) return;
    const int64_t index = row - info.offset;
    if ((a.half == DCP_HALF_FIRST && index >= info.rows / 2) ||
        (a.half == DCP_HALF_SECOND && index < info.rows / 2))
        return;
    const int64_t lse_at = (int64_t)head * a.rows + row;
    const float lse = a.lse[lse_at], acc = a.acc_lse[lse_at];
    if (lse == -INFINITY) return;
    const bool copy = acc == -INFINITY;
    const float high = fmaxf(acc, lse), low = fminf(acc, lse);
    const float e = expf(low - high), inv = 1.0f / (1.0f + e);
    const float w_acc = acc >= lse ? inv : e * inv, w_out = acc >= lse ? e * inv : inv;
    const float merged = high + log1pf(e);
    const int64_t at = (row * a.heads + head) * (int64_t)a.dim;
    for (int32_t d = lane * V; d < a.dim; d += DCP_CUDA__WARP_SIZE * V) {
        float o[V], c[V];
        dcp_cuda__load<float, V>(a.out + at + d, o);
        if (!copy) {
            dcp_cuda__load<float, V>(a.acc_out + at + d, c);
#pragma unroll
            for (int i = 0; i < V; i++) o[i] = w_acc * c[i] + w_out * o[i];
        }
        dcp_cuda__store<float, V>(a.acc_out + at + d, o);
    }
    __syncwarp();
    if (lane == 0) a.acc_lse[lse_at] = copy ? lse : merged;
}

#define DCP_CUDA__FINAL_THREADS 256
#define DCP_CUDA__FINAL_VALUES 8       /* values per unit on the vector path: 16 bytes of bf16 */
#define DCP_CUDA__FINAL_UNITS 4        /* units a thread loads before it stores any */
#define DCP_CUDA__FINAL_TILE_UNITS 2048 /* units a finalize tile aims at: two rounds */
#define DCP_CUDA__FINAL_MAX_ROWS 64    /* rows per tile at most (their flags in shared memory) */
#define DCP_CUDA__FINAL_MAX_BLOCKS 8192 /* grid cap of the grid-stride loops: ~60 blocks/SM */

/* Units [base, base + UNITS x THREADS) of a flat range, thread-strided: loads first. */
template <int V> struct dcp_cuda__final_units {
    float v[DCP_CUDA__FINAL_UNITS][V];
};

template <typename T, int V>
__global__ void __launch_bounds__(DCP_CUDA__FINAL_THREADS)
    dcp_cuda__finalize_kernel(const dcp_cuda__merge_args a, int32_t tile_rows)
{
    DCP_CUDA__SHARED(unsigned char, valid, [DCP_CUDA__FINAL_MAX_ROWS]);
    const int64_t row_units = (int64_t)a.heads * a.dim / V;
    const int64_t tiles = (a.rows + tile_rows - 1) / tile_rows;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int64_t r0 = tile * tile_rows;
        const int32_t rows = (int32_t)(a.rows - r0 < tile_rows ? a.rows - r0 : tile_rows);
        const uint32_t units = (uint32_t)(rows * row_units); /* < 2^31: checked on the host */
        const float *in = a.acc_out + r0 * row_units * V;
        T *out = static_cast<T *>(a.final_out) + r0 * row_units * V;
        __syncthreads(); /* the previous tile's flags are read */
        if ((int32_t)threadIdx.x < rows)
            valid[threadIdx.x] = dcp_cuda__row_info(a.cu_seqlens, a.cu_seqlens_padded,
                                                    a.num_sequences, a.cp, a.rank,
                                                    r0 + threadIdx.x)
                                     .position >= 0;
        __syncthreads();
        for (uint32_t base = threadIdx.x; base < units;
             base += DCP_CUDA__FINAL_UNITS * DCP_CUDA__FINAL_THREADS) {
            dcp_cuda__final_units<V> u;
#pragma unroll
            for (int k = 0; k < DCP_CUDA__FINAL_UNITS; k++) {
                const uint32_t unit = base + k * DCP_CUDA__FINAL_THREADS;
                if (unit < units) dcp_cuda__load<float, V>(in + (int64_t)unit * V, u.v[k]);
            }
#pragma unroll
            for (int k = 0; k < DCP_CUDA__FINAL_UNITS; k++) {
                const uint32_t unit = base + k * DCP_CUDA__FINAL_THREADS;
                if (unit >= units) break;
                if (!valid[unit / (uint32_t)row_units])
#pragma unroll
                    for (int i = 0; i < V; i++) u.v[k][i] = 0.0f;
                dcp_cuda__store<T, V>(out + (int64_t)unit * V, u.v[k]);
            }
        }
        for (int32_t i = threadIdx.x; i < rows * a.heads; i += DCP_CUDA__FINAL_THREADS) {
            const int32_t head = i / rows, r = i - head * rows;
            const int64_t lse_at = (int64_t)head * a.rows + r0 + r;
            a.final_lse[lse_at] = valid[r] ? a.acc_lse[lse_at] : -INFINITY;
        }
    }
}

template <typename T, int V>
__global__ void __launch_bounds__(DCP_CUDA__FINAL_THREADS)
    dcp_cuda__convert_kernel(const float *in, T *out, int64_t count)
{
    const int64_t units = count / V;
    const int64_t step = (int64_t)gridDim.x * DCP_CUDA__FINAL_UNITS * DCP_CUDA__FINAL_THREADS;
    const int64_t first =
        (int64_t)blockIdx.x * DCP_CUDA__FINAL_UNITS * DCP_CUDA__FINAL_THREADS + threadIdx.x;
    for (int64_t base = first; base < units; base += step) {
        dcp_cuda__final_units<V> u;
#pragma unroll
        for (int k = 0; k < DCP_CUDA__FINAL_UNITS; k++) {
            const int64_t unit = base + k * DCP_CUDA__FINAL_THREADS;
            if (unit < units) dcp_cuda__load<float, V>(in + unit * V, u.v[k]);
        }
#pragma unroll
        for (int k = 0; k < DCP_CUDA__FINAL_UNITS; k++) {
            const int64_t unit = base + k * DCP_CUDA__FINAL_THREADS;
            if (unit < units) dcp_cuda__store<T, V>(out + unit * V, u.v[k]);
        }
    }
    /* the last count % V values, one per thread of the first block */
    if (blockIdx.x == 0 && threadIdx.x < count - units * V)
        out[units * V + threadIdx.x] = dcp_cuda__from_float<T>(in[units * V + threadIdx.x]);
}

/* Blocks for `work` pieces of DCP_CUDA__FINAL_UNITS x DCP_CUDA__FINAL_THREADS units (or
   tiles), capped: the kernels stride over the rest. */
static unsigned dcp_cuda__final_blocks(int64_t work)
{
    return (unsigned)(work < DCP_CUDA__FINAL_MAX_BLOCKS ? (work > 0 ? work : 1)
                                                       : DCP_CUDA__FINAL_MAX_BLOCKS);
}

/* A launch with a warp per (head, row) unit and `warps` warps a block: its units, heads x
   rows, at most INT32_MAX / 32 blocks' worth, so block and thread indices stay far from
   overflow. */
static dcp_status dcp_cuda__check_row_units(int32_t heads, int64_t rows, int32_t warps,
                                            dcp_error *error)
{
    if ((int64_t)heads * rows > (int64_t)INT32_MAX / DCP_CUDA__WARP_SIZE * warps)
        return dcp_error_set(error, DCP_ERROR_UNSUPPORTED,
                             "%lld rows x %d heads are too many for one launch",
                             (long long)rows, (int)heads);
    return DCP_OK;
}

/* Checks shared by the merge entry points: params (num_heads, head_dim), layout, sizes. */
static dcp_status dcp_cuda__merge_check(const dcp_attention_params *params,
                                        const dcp_cuda_layout *layout,
                                        dcp_attention_params *p, dcp_error *error)
{
    dcp_status status;
    if ((status = dcp_attention_params_resolve(params, p, error)) != DCP_OK ||
        (status = dcp_cuda__check_layout(layout, error)) != DCP_OK ||
        (status = dcp_cuda__check_elements("acc_out", layout->local_rows,
                                           (int64_t)p->num_heads * p->head_dim, sizeof(float),
                                           error)) != DCP_OK)
        return status;
    return dcp_cuda__check_row_units(p->num_heads, layout->local_rows, DCP_CUDA__WARPS, error);
}

static dcp_cuda__merge_args dcp_cuda__merge_args_of(const dcp_attention_params *p,
                                                    const dcp_cuda_layout *layout)
{
    dcp_cuda__merge_args a;
    dcp_cuda__args_of_layout(&a, layout);
    a.cp = layout->thd.cp;
    a.rows = layout->local_rows;
    a.heads = p->num_heads;
    a.dim = p->head_dim;
    return a;
}

static unsigned dcp_cuda__row_blocks(const dcp_cuda__merge_args &a)
{
    return (unsigned)(((int64_t)a.heads * a.rows + DCP_CUDA__WARPS - 1) / DCP_CUDA__WARPS);
}

extern "C" dcp_status dcp_cuda_acc_init(const dcp_attention_params *params,
                                        const dcp_cuda_layout *layout, float *acc_out,
                                        float *acc_lse, void *stream, dcp_error *error)
{
    dcp_attention_params p;
    cudaStream_t s = (cudaStream_t)stream;
    int64_t values, lses;
    dcp_status status;
    if ((status = dcp_cuda__merge_check(params, layout, &p, error)) != DCP_OK) return status;
    if (!acc_out || !acc_lse)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "acc_out and acc_lse must not be NULL");
    values = layout->local_rows * p.num_heads * p.head_dim;
    lses = layout->local_rows * p.num_heads;
    if (values == 0) return dcp_error_clear(error);
    DCP_CUDA_CHECK(cudaMemsetAsync(acc_out, 0, (size_t)values * sizeof(float), s));
    {
        const int64_t blocks = (lses + DCP_CUDA__FILL_THREADS - 1) / DCP_CUDA__FILL_THREADS;
        DCP_CUDA_CHECK(dcp_cuda__launch(
            dcp_cuda__fill_kernel,
            (unsigned)(blocks < DCP_CUDA__FILL_MAX_BLOCKS ? blocks : DCP_CUDA__FILL_MAX_BLOCKS),
            DCP_CUDA__FILL_THREADS, 0, s, acc_lse, lses, -INFINITY));
    }
    return dcp_error_clear(error);
}

extern "C" dcp_status dcp_cuda_acc_merge(const dcp_attention_params *params,
                                         const dcp_cuda_layout *layout, dcp_half half,
                                         const float *out, const float *lse, float *acc_out,
                                         float *acc_lse, void *stream, dcp_error *error)
{
    dcp_attention_params p;
    dcp_cuda__merge_args a;
    cudaStream_t s = (cudaStream_t)stream;
    dcp_status status;
    if ((status = dcp_cuda__merge_check(params, layout, &p, error)) != DCP_OK) return status;
    if (half != DCP_HALF_ALL && half != DCP_HALF_FIRST && half != DCP_HALF_SECOND)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "half %d is not a dcp_half",
                             (int)half);
    if (half != DCP_HALF_ALL && layout->thd.cp == 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "half %d needs cp > 1 (at layout cp 1 a sequence has no halves)",
                             (int)half);
    if (!out || !lse || !acc_out || !acc_lse)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "out, lse, acc_out and acc_lse must not be NULL");
    a = dcp_cuda__merge_args_of(&p, layout);
    a.half = half;
    a.out = out, a.lse = lse, a.acc_out = acc_out, a.acc_lse = acc_lse;
    if (a.rows == 0) return dcp_error_clear(error);
    const bool vector = p.head_dim % DCP_CUDA__MERGE_VALUES == 0 &&
                        dcp_cuda__aligned(out, DCP_CUDA__VECTOR_BYTES) &&
                        dcp_cuda__aligned(acc_out, DCP_CUDA__VECTOR_BYTES);
    DCP_CUDA_CHECK(dcp_cuda__launch(vector ? dcp_cuda__merge_kernel<DCP_CUDA__MERGE_VALUES>
                                           : dcp_cuda__merge_kernel<1>,
                                    dcp_cuda__row_blocks(a), DCP_CUDA__ROW_THREADS, 0, s, a));
    return dcp_error_clear(error);
}

template <typename T>
static dcp_status dcp_cuda__finalize_launch(const dcp_cuda__merge_args &a, cudaStream_t s,
                                            dcp_error *error)
{
    const int64_t row_values = (int64_t)a.heads * a.dim;
    const int vector = row_values % DCP_CUDA__FINAL_VALUES == 0 &&
                       dcp_cuda__aligned(a.acc_out, DCP_CUDA__FINAL_VALUES * sizeof(float)) &&
                       dcp_cuda__aligned(a.final_out, DCP_CUDA__FINAL_VALUES * sizeof(T));
    const int64_t row_units = vector ? row_values / DCP_CUDA__FINAL_VALUES : row_values;
    int64_t tile_rows = DCP_CUDA__FINAL_TILE_UNITS / row_units;
    if (tile_rows < 1) tile_rows = 1;
    if (tile_rows > DCP_CUDA__FINAL_MAX_ROWS) tile_rows = DCP_CUDA__FINAL_MAX_ROWS;
    if (tile_rows * row_units > INT32_MAX)
        return dcp_error_set(error, DCP_ERROR_UNSUPPORTED,
                             "finalize rows of %lld values are too long", (long long)row_values);
    {
        const unsigned blocks = dcp_cuda__final_blocks((a.rows + tile_rows - 1) / tile_rows);
        DCP_CUDA_CHECK(dcp_cuda__launch(vector ? dcp_cuda__finalize_kernel<T, DCP_CUDA__FINAL_VALUES>
                                               : dcp_cuda__finalize_kernel<T, 1>,
                                        blocks, DCP_CUDA__FINAL_THREADS, 0, s, a,
                                        (int32_t)tile_rows));
    }
    return dcp_error_clear(error);
}

extern "C" dcp_status dcp_cuda_acc_finalize(const dcp_attention_params *params,
                                            const dcp_cuda_layout *layout, int32_t rank,
                                            const float *acc_out, const float *acc_lse,
                                            dcp_dtype out_dtype, void *out, float *lse,
                                            void *stream, dcp_error *error)
{
    dcp_attention_params p;
    dcp_cuda__merge_args a;
    cudaStream_t s = (cudaStream_t)stream;
    dcp_status status;
    if ((status = dcp_cuda__merge_check(params, layout, &p, error)) != DCP_OK ||
        (status = dcp_check_rank("rank", rank, layout->thd.cp, error)) != DCP_OK ||
        (status = dcp_cuda__check_dtype("out_dtype", out_dtype, 1, error)) != DCP_OK)
        return status;
    if (!acc_out || !acc_lse || !out || !lse)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "acc_out, acc_lse, out and lse must not be NULL");
    if (out_dtype != DCP_DTYPE_FLOAT32 && (const void *)out == (const void *)acc_out)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "out may be acc_out only when out_dtype is float32, got %s",
                             dcp_dtype_name(out_dtype));
    a = dcp_cuda__merge_args_of(&p, layout);
    a.rank = rank;
    a.acc_out = (float *)acc_out, a.acc_lse = (float *)acc_lse;
    a.final_out = out, a.final_lse = lse;
    if (a.rows == 0) return dcp_error_clear(error);
    return dcp_cuda__with_dtype("out_dtype", out_dtype, error, [&](auto element) {
        return dcp_cuda__finalize_launch<decltype(element)>(a, s, error);
    });
}

template <typename T>
static dcp_status dcp_cuda__convert_launch(const float *in, T *out, int64_t count,
                                           cudaStream_t s, dcp_error *error)
{
    const int vector = dcp_cuda__aligned(in, DCP_CUDA__FINAL_VALUES * sizeof(float)) &&
                       dcp_cuda__aligned(out, DCP_CUDA__FINAL_VALUES * sizeof(T));
    const int64_t units = vector ? count / DCP_CUDA__FINAL_VALUES : count;
    const int64_t per_block = (int64_t)DCP_CUDA__FINAL_UNITS * DCP_CUDA__FINAL_THREADS;
    const unsigned blocks = dcp_cuda__final_blocks((units + per_block - 1) / per_block);
    DCP_CUDA_CHECK(dcp_cuda__launch(vector ? dcp_cuda__convert_kernel<T, DCP_CUDA__FINAL_VALUES>
                                           : dcp_cuda__convert_kernel<T, 1>,
                                    blocks, DCP_CUDA__FINAL_THREADS, 0, s, in, out, count));
    return dcp_error_clear(error);
}

extern "C" dcp_status dcp_cuda_convert(const float *in, dcp_dtype dtype, void *out,
                                       int64_t count, void *stream, dcp_error *error)
{
    cudaStream_t s = (cudaStream_t)stream;
    dcp_status status;
    if ((status = dcp_cuda__check_dtype("dtype", dtype, 1, error)) != DCP_OK ||
        (status = dcp_cuda__check_values(count, in, out, "in and out", error)) != DCP_OK)
        return status;
    if (count == 0) return dcp_error_clear(error);
    switch (dtype) {
    case DCP_DTYPE_FLOAT32:
        if ((const void *)in != out)
            DCP_CUDA_CHECK(cudaMemcpyAsync(out, in, (size_t)count * sizeof(float),
                                           cudaMemcpyDeviceToDevice, s));
        return dcp_error_clear(error);
    case DCP_DTYPE_BFLOAT16:
        return dcp_cuda__convert_launch<__nv_bfloat16>(in, (__nv_bfloat16 *)out, count, s, error);
    case DCP_DTYPE_FLOAT16:
        return dcp_cuda__convert_launch<__half>(in, (__half *)out, count, s, error);
    }
    return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "dtype %d", (int)dtype);
}

/* ================================================================================= attention
   Shared by forward and backward: one sequence's rows of a view. A rank's valid local rows
   of a sequence are a prefix of its rows (dcp.h, THD layout), so the valid rows of a half
   are [begin, min(end, valid)) and local order is position order. */

struct dcp_cuda__attn_args {
    const int32_t *cu_seqlens, *cu_seqlens_padded;
    int32_t num_sequences, cp;
    int32_t q_rank, q_half, kv_rank, kv_half, causal;
    int64_t rows;
    int32_t heads, kv_heads, group;
    float scale;      /* softmax scale */
    float scale_log2; /* softmax scale x log2(e) */
    const void *q, *k, *v, *out, *dout;
    const float *lse;
    void *o;          /* forward output */
    int32_t out_fp32; /* forward: o is float32 (else dtype) */
    float *lse_out;
    float *dq, *dk, *dv, *delta;
    int32_t paired_gradients; /* dq, dk, dv 8-byte aligned: a lane adds its pairs as float2 */
    const int32_t *count; /* schedule: number of entries, then the entries */
    const int2 *entries;
};

struct dcp_cuda__seq_view {
    int64_t offset;            /* first local row of the sequence */
    int64_t padded;            /* P */
    int64_t q_begin, q_end, q_valid;  /* the q view rows; valid ones end at q_valid */
    int64_t k_begin, k_end, k_valid;  /* the kv view rows; valid ones end at k_valid */
};

/* Valid local rows of rank `rank`: a prefix of the sequence's P / cp rows. */
__device__ __forceinline__ int64_t dcp_cuda__valid_rows(int64_t padded, int64_t valid, int32_t cp,
                                                        int32_t rank)
{
    if (cp == 1) return valid < padded ? valid : padded;
    const int64_t h = padded / (2 * (int64_t)cp);
    int64_t first = valid - rank * h, second = valid - (2 * (int64_t)cp - 1 - rank) * h;
    first = first < 0 ? 0 : first > h ? h : first;
    second = second < 0 ? 0 : second > h ? h : second;
    return first + second;
}

__device__ __forceinline__ void dcp_cuda__half_rows(int64_t rows, int32_t half, int64_t *begin,
                                                    int64_t *end)
{
    *begin = half == DCP_HALF_SECOND ? rows / 2 : 0;
    *end = half == DCP_HALF_FIRST ? rows / 2 : rows;
}

/* Sequence j of the layout as the step sees it; rows are clamped to the buffer. */
__device__ __forceinline__ dcp_cuda__seq_view dcp_cuda__seq_of(const dcp_cuda__attn_args &a,
                                                               int32_t j)
{
    dcp_cuda__seq_view s;
    const int64_t valid = (int64_t)a.cu_seqlens[j + 1] - a.cu_seqlens[j];
    int64_t rows, limit;
    s.padded = (int64_t)a.cu_seqlens_padded[j + 1] - a.cu_seqlens_padded[j];
    s.offset = a.cu_seqlens_padded[j] / a.cp;
    rows = s.padded / a.cp;
    limit = a.rows - s.offset; /* a malformed layout never reaches past the buffer */
    if (rows > limit) rows = limit < 0 ? 0 : limit;
    dcp_cuda__half_rows(rows, a.q_half, &s.q_begin, &s.q_end);
    dcp_cuda__half_rows(rows, a.kv_half, &s.k_begin, &s.k_end);
    const int64_t qv = dcp_cuda__valid_rows(s.padded, valid, a.cp, a.q_rank);
    const int64_t kv = dcp_cuda__valid_rows(s.padded, valid, a.cp, a.kv_rank);
    s.q_valid = qv < s.q_end ? qv : s.q_end;
    s.k_valid = kv < s.k_end ? kv : s.k_end;
    if (s.q_valid < s.q_begin) s.q_valid = s.q_begin;
    if (s.k_valid < s.k_begin) s.k_valid = s.k_begin;
    return s;
}

/* ----------------------------------------------------------------------- tile schedule
   Design. One block of 1024 threads lists the (sequence, tile of 64 view rows) pairs of a
   step, longest sequences first: sequences go to 32 buckets by log2 of their tile count,
   buckets are laid out from the largest, and within a sequence the last tile (the most keys
   under a causal mask) comes first. The order inside a bucket depends on shared-memory
   atomics, which is harmless: every tile is computed by exactly one block and results do not
   depend on the order. The attention grid is sized on the host by the bound
   local_rows / 64 + num_sequences (no read-back); blocks past the count exit at once. */

#define DCP_CUDA__TILE 64
#define DCP_CUDA__ATTN_D_SMALL 64  /* the head dims the attention kernels are built for */
#define DCP_CUDA__ATTN_D_LARGE 128
#define DCP_CUDA__SCHEDULE_THREADS DCP_CUDA__MAX_BLOCK_THREADS
#define DCP_CUDA__SCHEDULE_BUCKETS 32 /* floor(log2) classes of a positive int32 tile count */
static_assert(DCP_CUDA__SCHEDULE_BUCKETS == 8 * sizeof(int32_t), "a bucket per bit (__clz)");
static_assert(DCP_CUDA__SCHEDULE_BUCKETS <= DCP_CUDA__SCHEDULE_THREADS, "a thread per bucket");

/* The bucket of a sequence of `tiles` > 0 tiles: floor(log2(tiles)). */
__device__ __forceinline__ int32_t dcp_cuda__schedule_bucket(int32_t tiles)
{
    return DCP_CUDA__SCHEDULE_BUCKETS - 1 - __clz(tiles);
}

/* Tiles of TILE_ROWS rows in sequence j's q view (in its kv view when use_kv). */
template <int TILE_ROWS>
__device__ __forceinline__ int32_t dcp_cuda__view_tiles(const dcp_cuda__attn_args &a, int32_t j,
                                                        int32_t use_kv)
{
    const dcp_cuda__seq_view s = dcp_cuda__seq_of(a, j);
    const int64_t rows = use_kv ? s.k_end - s.k_begin : s.q_end - s.q_begin;
    return (int32_t)((rows + TILE_ROWS - 1) / TILE_ROWS);
}

template <int TILE_ROWS = DCP_CUDA__TILE>
__global__ void __launch_bounds__(DCP_CUDA__SCHEDULE_THREADS)
    dcp_cuda__schedule_kernel(const dcp_cuda__attn_args a, int32_t use_kv, int32_t *count,
                              int2 *entries, int64_t capacity)
{
    DCP_CUDA__SHARED(int32_t, bucket_tiles, [DCP_CUDA__SCHEDULE_BUCKETS]);
    DCP_CUDA__SHARED(int32_t, cursor, [DCP_CUDA__SCHEDULE_BUCKETS]);
    if (threadIdx.x < DCP_CUDA__SCHEDULE_BUCKETS) bucket_tiles[threadIdx.x] = 0;
    __syncthreads();
    for (int32_t j = threadIdx.x; j < a.num_sequences; j += blockDim.x) {
        const int32_t tiles = dcp_cuda__view_tiles<TILE_ROWS>(a, j, use_kv);
        if (tiles > 0) atomicAdd(&bucket_tiles[dcp_cuda__schedule_bucket(tiles)], tiles);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int64_t offset = 0;
        for (int32_t b = DCP_CUDA__SCHEDULE_BUCKETS - 1; b >= 0; b--) {
            cursor[b] = (int32_t)offset;
            offset += bucket_tiles[b];
        }
        *count = (int32_t)(offset < capacity ? offset : capacity);
    }
    __syncthreads();
    for (int32_t j = threadIdx.x; j < a.num_sequences; j += blockDim.x) {
        const int32_t tiles = dcp_cuda__view_tiles<TILE_ROWS>(a, j, use_kv);
        if (tiles <= 0) continue;
        const int32_t base = atomicAdd(&cursor[dcp_cuda__schedule_bucket(tiles)], tiles);
        for (int32_t t = 0; t < tiles && base + t < capacity; t++)
            dcp_cuda__vstore(entries + base + t, make_int2(j, tiles - 1 - t));
    }
}

/* --------------------------------------------------------------- tensor-core primitives */

/* The mma.sync shape m16n8k16: A 16 x 16, B 16 x 8, C 16 x 8 (4 floats a lane). ldmatrix.x4
   loads four 8 x 8 b16 matrices: one A fragment, or the B fragments of two n blocks. */
#define DCP_CUDA__MMA_M 16
#define DCP_CUDA__MMA_N 8
#define DCP_CUDA__MMA_K 16

__device__ __forceinline__ uint32_t dcp_cuda__smem_address(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* The PTX wrappers: every inline PTX instruction of the mma.sync kernels, each with its twin
   on the CPU execution model (tests/cuda_cpu/executor.cc, which follows the PTX ISA's per-lane
   layouts); the sm_90a set (wgmma, fences, named barriers) is in the Hopper section. */

/* 16 bytes global -> shared without registers; src_bytes 0 writes zeros and reads nothing. */
__device__ __forceinline__ void dcp_cuda__cp_async16(void *shared, const void *global,
                                                     int32_t src_bytes)
{
#ifdef DCP_CUDA_CPU
    dcp_cuda_cpu_cp_async16(shared, global, src_bytes);
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                     dcp_cuda__smem_address(shared)),
                 "l"(global), "r"(src_bytes));
#endif
}

__device__ __forceinline__ void dcp_cuda__cp_async_commit()
{
#ifdef DCP_CUDA_CPU
    dcp_cuda_cpu_cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int N> __device__ __forceinline__ void dcp_cuda__cp_async_wait()
{
#ifdef DCP_CUDA_CPU
    dcp_cuda_cpu_cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

/* Four 8x8 b16 matrices; lane l gives the address of row l % 8 of matrix l / 8. */
#define DCP_CUDA__LDMATRIX_X4(layout)                                                              \
    asm volatile("ldmatrix.sync.aligned.m8n8.x4" layout ".shared.b16 {%0, %1, %2, %3}, [%4];\n"    \
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])                                 \
                 : "r"(dcp_cuda__smem_address(row)))
template <bool TRANSPOSE = false>
__device__ __forceinline__ void dcp_cuda__ldmatrix_x4(uint32_t (&r)[4], const void *row)
{
#ifdef DCP_CUDA_CPU
    dcp_cuda_cpu_ldmatrix_x4(r, row, TRANSPOSE);
#else
    if (TRANSPOSE) DCP_CUDA__LDMATRIX_X4(".trans");
    else DCP_CUDA__LDMATRIX_X4("");
#endif
}

/* c += a b, m16n8k16, float32 accumulators; T (bf16 or fp16) is the type of a and b. */
#define DCP_CUDA__MMA(types)                                                                       \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32" types ".f32 {%0, %1, %2, %3}, "         \
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"                                \
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                 \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
template <typename T>
__device__ __forceinline__ void dcp_cuda__mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                              uint32_t b1)
{
    static_assert(std::is_same<T, __nv_bfloat16>::value || std::is_same<T, __half>::value,
                  "tensor-core inputs are bf16 or fp16");
#ifdef DCP_CUDA_CPU
    dcp_cuda_cpu_mma_m16n8k16(c, a, b0, b1, std::is_same<T, __nv_bfloat16>::value);
#else
    if (std::is_same<T, __nv_bfloat16>::value) DCP_CUDA__MMA(".bf16.bf16");
    else DCP_CUDA__MMA(".f16.f16");
#endif
}

/* Two floats as one register of two 16-bit values, the first in the low half. */
template <typename T> __device__ __forceinline__ uint32_t dcp_cuda__pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t dcp_cuda__pack2<__nv_bfloat16>(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
template <> __device__ __forceinline__ uint32_t dcp_cuda__pack2<__half>(float lo, float hi)
{
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* ------------------------------------------------------------ attention: shared pieces
   The tile shape, the prologue every attention kernel starts with, the per-row key limit
   that is the whole mask, and the tile-level matrix products, shared by the forward and the
   three backward kernels. */

/* One tile shape (head dim D; q and kv tiles of DCP_CUDA__TILE rows; 4 warps of 16 rows,
   the m of m16n8k16). Every loop bound of the kernels comes from here. */
template <int D> struct dcp_cuda__attn_traits {
    static constexpr int HEAD_DIM = D;
    static constexpr int TILE_ROWS = DCP_CUDA__TILE; /* query rows of a q tile */
    static constexpr int TILE_KEYS = DCP_CUDA__TILE; /* key rows of a kv tile */
    static constexpr int WARP_ROWS = DCP_CUDA__MMA_M; /* rows of one m16n8k16 A operand */
    static constexpr int WARPS = 4;
    static constexpr int THREADS = WARPS * DCP_CUDA__WARP_SIZE;
    /* tiles in flight through shared memory (K, V in the forward and dQ; Q, dO in dK, dV): two,
       so that the copy of tile i + 1 overlaps the math of tile i. The backward kernels take
       theirs as a parameter: one where a device cannot hold two (dcp_cuda__bwd_stages). */
    static constexpr int STAGES = 2;
    /* shared row: +16 bytes, so the 8 row reads of an ldmatrix hit distinct banks */
    static constexpr int ROW_PAD = DCP_CUDA__VECTOR_BYTES / 2; /* elements of 2 bytes */
    static constexpr int STRIDE = D + ROW_PAD;
    static constexpr int TILE_ELEMENTS = TILE_ROWS * STRIDE;
    static constexpr int DS_STRIDE = TILE_KEYS + ROW_PAD; /* the backward's dS, [query][key] */
    static constexpr int HEAD_BLOCKS = D / DCP_CUDA__MMA_N;       /* n blocks over the head dim */
    static constexpr int KEY_BLOCKS = TILE_KEYS / DCP_CUDA__MMA_N; /* n blocks over a kv tile */
    static constexpr int ROW_BLOCKS = TILE_ROWS / DCP_CUDA__MMA_N; /* n blocks over a q tile */
    static constexpr int HEAD_STEPS = D / DCP_CUDA__MMA_K;         /* k steps over the head dim */
    static constexpr int KEY_STEPS = TILE_KEYS / DCP_CUDA__MMA_K;  /* k steps over a kv tile */
    /* what the dK, dV kernel keeps per query row beside its tiles: LSE, delta, key limit */
    static constexpr int ROW_STATE_BYTES = 2 * (int)sizeof(float) + (int)sizeof(int32_t);
    static_assert(D % DCP_CUDA__MMA_K == 0, "the head dim is a whole number of m16n8k16 k steps");
    static_assert(TILE_ROWS == TILE_KEYS, "one tile size: q and kv tiles share shared buffers");
    static_assert(WARPS * WARP_ROWS == TILE_ROWS, "each warp owns 16 rows of a tile");
    static_assert(TILE_KEYS % DCP_CUDA__MMA_K == 0, "a tile is a whole number of k steps");
    static_assert(HEAD_BLOCKS % 2 == 0 && KEY_BLOCKS % 2 == 0 && ROW_BLOCKS % 2 == 0,
                  "ldmatrix.x4 loads B fragments in pairs of n blocks");
    static_assert((STRIDE * 2) % DCP_CUDA__VECTOR_BYTES == 0 &&
                      (DS_STRIDE * 2) % DCP_CUDA__VECTOR_BYTES == 0,
                  "ldmatrix and cp.async rows are 16-byte aligned");
};

/* The stagings the tile streams serve: two (the copy of tile i + 1 overlaps the math of tile i)
   or one (copy, wait, compute); tile i uses stage i & (STAGES - 1) and a step waits for all
   but the STAGES - 1 newest cp.async groups. */
template <int STAGES> struct dcp_cuda__staging {
    static_assert(STAGES == 1 || STAGES == 2, "one or two stages: stage = i & (STAGES - 1)");
    static __host__ __device__ __forceinline__ int stage(int32_t i) { return i & (STAGES - 1); }
};

/* This block's schedule entry: its sequence as the step sees it and the first view row of its
   tile (of the kv view when kv, else of the q view); false past the schedule's count. */
__device__ __forceinline__ bool dcp_cuda__attn_tile_of(const dcp_cuda__attn_args &a, bool kv,
                                                       dcp_cuda__seq_view *s, int64_t *first)
{
    if ((int32_t)blockIdx.x >= *a.count) return false;
    const int2 entry = dcp_cuda__vload(a.entries + blockIdx.x);
    *s = dcp_cuda__seq_of(a, entry.x);
    *first = (kv ? s->k_begin : s->q_begin) + (int64_t)entry.y * DCP_CUDA__TILE;
    return true;
}

/* The keys query row `index` of the q view sees are the local rows [k_begin, limit) of the
   kv view: positions are monotone in local order, so the zigzag causal mask is one bound per
   row, and a key is visible iff key < limit (one int32 compare). 0 (no key) for a row
   outside the valid q view. int32: a sequence's local rows fit (max_seqlen_padded). */
__device__ __forceinline__ int32_t dcp_cuda__key_limit(const dcp_cuda__attn_args &a,
                                                       const dcp_cuda__seq_view &s, int64_t index)
{
    if (index < s.q_begin || index >= s.q_valid) return 0;
    if (!a.causal) return (int32_t)s.k_valid;
    const int64_t q_pos = dcp_cuda__zigzag(s.padded, a.cp, a.q_rank, index);
    /* local rows of the kv rank at positions <= q_pos: the same prefix as q_pos + 1 valid rows */
    const int64_t seen = dcp_cuda__valid_rows(s.padded, q_pos + 1, a.cp, a.kv_rank);
    return (int32_t)(seen < s.k_valid ? seen : s.k_valid);
}

/* 2^(x scale - bias): one FFMA and the MUFU approximation (relative error ~2^-22; an x of
   -inf gives +0). */
__device__ __forceinline__ float dcp_cuda__exp2_scaled(float x, float scale, float bias)
{
#ifdef DCP_CUDA_CPU
    return dcp_cuda_cpu_ex2_approx_ftz(fmaf(x, scale, -bias));
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(fmaf(x, scale, -bias)));
    return y;
#endif
}

/* Rows [first, first + ROWS) of a view into a shared tile (the traits' padded row stride, so
   that ldmatrix rows hit distinct banks): view row r is
   row offset + r of the [rows, heads, D] tensor at `head_base` (its head already applied);
   rows at or past `valid` are zero-filled by cp.async and never read. Each thread copies the
   same 16-byte column of every pass, so its addresses are one base plus constants (no
   division or 64-bit multiply per chunk) and its bound check one compare per pass. */
template <typename T, int D, int ROWS, int THREADS>
__device__ __forceinline__ void dcp_cuda__load_tile(T *tile, const T *head_base,
                                                    int64_t row_stride, int64_t offset,
                                                    int64_t first, int64_t valid)
{
    constexpr int CHUNK = DCP_CUDA__VECTOR_BYTES / (int)sizeof(T); /* elements of a cp.async */
    constexpr int CHUNKS = D / CHUNK, STRIDE = dcp_cuda__attn_traits<D>::STRIDE;
    constexpr int ROWS_PER_PASS = THREADS / CHUNKS;
    static_assert(THREADS % CHUNKS == 0 && ROWS % ROWS_PER_PASS == 0,
                  "every thread copies one column of every pass");
    const int row = threadIdx.x / CHUNKS, column = (threadIdx.x % CHUNKS) * CHUNK;
    const int64_t rows_left = valid - first - row; /* this thread's valid rows */
    const T *src = head_base + (offset + first + row) * row_stride + column;
    T *dst = tile + row * STRIDE + column;
#pragma unroll
    for (int pass = 0; pass < ROWS / ROWS_PER_PASS; pass++) {
        const bool ok = pass * ROWS_PER_PASS < rows_left;
        dcp_cuda__cp_async16(dst + pass * ROWS_PER_PASS * STRIDE,
                             ok ? src + pass * ROWS_PER_PASS * row_stride : head_base,
                             ok ? DCP_CUDA__VECTOR_BYTES : 0);
    }
}

/* The q-view tile [q0, q0 + TILE_ROWS) of query head `head` of a [rows, heads, D] tensor (Q
   or dO) into a shared tile. */
template <typename T, int D>
__device__ __forceinline__ void dcp_cuda__load_q_tile(T *tile, const void *tensor,
                                                      const dcp_cuda__attn_args &a,
                                                      const dcp_cuda__seq_view &s, int32_t head,
                                                      int64_t q0)
{
    using K = dcp_cuda__attn_traits<D>;
    dcp_cuda__load_tile<T, D, K::TILE_ROWS, K::THREADS>(
        tile, static_cast<const T *>(tensor) + (int64_t)head * D, (int64_t)a.heads * D, s.offset,
        q0, s.q_valid);
}

/* The kv-view tile [k0, k0 + TILE_KEYS) of kv head `kv_head` of a [rows, kv_heads, D] tensor
   (K or V) into a shared tile. */
template <typename T, int D>
__device__ __forceinline__ void dcp_cuda__load_kv_tile(T *tile, const void *tensor,
                                                       const dcp_cuda__attn_args &a,
                                                       const dcp_cuda__seq_view &s,
                                                       int32_t kv_head, int64_t k0)
{
    using K = dcp_cuda__attn_traits<D>;
    dcp_cuda__load_tile<T, D, K::TILE_KEYS, K::THREADS>(
        tile, static_cast<const T *>(tensor) + (int64_t)kv_head * D, (int64_t)a.kv_heads * D,
        s.offset, k0, s.k_valid);
}

/* The key stream of the query-stationary kernels (forward, dQ): key tile `tile` of the kv
   view, K and V, into stage `stage` of sk and sv ([STAGES][TILE_KEYS][STRIDE] each). */
template <typename T, int D>
__device__ __forceinline__ void dcp_cuda__load_kv_stage(T *sk, T *sv, const dcp_cuda__attn_args &a,
                                                        const dcp_cuda__seq_view &s,
                                                        int32_t kv_head, int32_t tile, int stage)
{
    using K = dcp_cuda__attn_traits<D>;
    const int64_t k0 = s.k_begin + (int64_t)tile * K::TILE_KEYS;
    dcp_cuda__load_kv_tile<T, D>(sk + stage * K::TILE_ELEMENTS, a.k, a, s, kv_head, k0);
    dcp_cuda__load_kv_tile<T, D>(sv + stage * K::TILE_ELEMENTS, a.v, a, s, kv_head, k0);
}

/* Step `tile` of the key stream: the load of tile + STAGES - 1 into its stage starts (with two
   stages the next tile's, which overlaps this one's math; with one, this tile's: the barrier at
   the end of the previous step freed its stage), then every thread waits until tile `tile`
   (and all committed before it) has landed. */
template <typename T, int D, int STAGES>
__device__ __forceinline__ void dcp_cuda__kv_stream_step(T *sk, T *sv, const dcp_cuda__attn_args &a,
                                                         const dcp_cuda__seq_view &s,
                                                         int32_t kv_head, int32_t tile,
                                                         int32_t tiles)
{
    const int32_t ahead = tile + STAGES - 1;
    if (ahead < tiles)
        dcp_cuda__load_kv_stage<T, D>(sk, sv, a, s, kv_head, ahead,
                                      dcp_cuda__staging<STAGES>::stage(ahead));
    dcp_cuda__cp_async_commit(); /* possibly empty: the group count stays uniform */
    dcp_cuda__cp_async_wait<STAGES - 1>();
    __syncthreads();
}

/* The key tiles the q tile at q0 sees: from k_begin to its last valid row's key limit (the
   largest of the tile); 0 when the tile has no valid row or sees no key. */
template <int D>
__device__ __forceinline__ int32_t dcp_cuda__key_tiles(const dcp_cuda__attn_args &a,
                                                       const dcp_cuda__seq_view &s, int64_t q0)
{
    using K = dcp_cuda__attn_traits<D>;
    const int64_t q_last = (q0 + K::TILE_ROWS < s.q_valid ? q0 + K::TILE_ROWS : s.q_valid) - 1;
    const int64_t k_stop = q_last >= q0 ? dcp_cuda__key_limit(a, s, q_last) : 0;
    return k_stop > s.k_begin ? (int32_t)((k_stop - s.k_begin + K::TILE_KEYS - 1) / K::TILE_KEYS)
                              : 0;
}

/* What a block of a query-stationary kernel (forward, dQ) owns: its schedule entry's q tile
   (the sequence as the step sees it, the tile's first view row q0), its query head (grid.y)
   and kv head, and the key tiles the q tile sees. */
struct dcp_cuda__q_block {
    dcp_cuda__seq_view s;
    int64_t q0;
    int32_t head, kv_head, tiles;
};

/* This block's q tile; false past the schedule's count. */
template <int D>
__device__ __forceinline__ bool dcp_cuda__q_block_of(const dcp_cuda__attn_args &a,
                                                     dcp_cuda__q_block *b)
{
    if (!dcp_cuda__attn_tile_of(a, false, &b->s, &b->q0)) return false;
    b->head = blockIdx.y;
    b->kv_head = b->head / a.group;
    b->tiles = dcp_cuda__key_tiles<D>(a, b->s, b->q0);
    return true;
}

/* c (16 x N) += A B^T for the k step kc: A a fragment (16 x 16), B N rows of shared memory,
   row-major (ldmatrix; rows n, columns kc x 16 ..). */
template <typename T, int N, int STRIDE>
__device__ __forceinline__ void dcp_cuda__mma_abt_step(float (&c)[N / DCP_CUDA__MMA_N][4],
                                                       const uint32_t (&af)[4], const T *b, int kc)
{
    static_assert(N % (2 * DCP_CUDA__MMA_N) == 0, "whole pairs of n blocks");
    const int lane = threadIdx.x % DCP_CUDA__WARP_SIZE, m8 = lane >> 3, r8 = lane & 7;
#pragma unroll
    for (int np = 0; np < N / (2 * DCP_CUDA__MMA_N); np++) {
        uint32_t bf[4];
        dcp_cuda__ldmatrix_x4(bf, b + (np * 16 + (m8 >> 1) * 8 + r8) * STRIDE + kc * 16 +
                                      (m8 & 1) * 8);
        dcp_cuda__mma<T>(c[2 * np], af, bf[0], bf[1]);
        dcp_cuda__mma<T>(c[2 * np + 1], af, bf[2], bf[3]);
    }
}

/* The A fragment (16 x 16) of k step kc from the warp's 16 rows of a row-major shared tile. */
template <int STRIDE, typename T>
__device__ __forceinline__ void dcp_cuda__a_fragment(uint32_t (&af)[4], const T *a, int kc)
{
    const int lane = threadIdx.x % DCP_CUDA__WARP_SIZE, m8 = lane >> 3, r8 = lane & 7;
    dcp_cuda__ldmatrix_x4(af, a + ((m8 & 1) * 8 + r8) * STRIDE + kc * 16 + (m8 >> 1) * 8);
}

/* c (16 x N) += A B^T with both operands in shared memory, row-major: A the warp's 16 rows of
   K_DIM columns, B N rows of K_DIM columns (the backward's S^T = K Q^T, dP = dO V^T, ...). */
template <typename T, int N, int K_DIM, int STRIDE>
__device__ __forceinline__ void dcp_cuda__mma_abt(float (&c)[N / DCP_CUDA__MMA_N][4], const T *a,
                                                  const T *b)
{
    static_assert(K_DIM % DCP_CUDA__MMA_K == 0, "whole m16n8k16 k steps");
#pragma unroll
    for (int kc = 0; kc < K_DIM / DCP_CUDA__MMA_K; kc++) {
        uint32_t af[4];
        dcp_cuda__a_fragment<STRIDE>(af, a, kc);
        dcp_cuda__mma_abt_step<T, N, STRIDE>(c, af, b, kc);
    }
}

/* The same with A's fragments already in registers (the forward's Q, loaded once). */
template <typename T, int N, int K_DIM, int STRIDE>
__device__ __forceinline__ void dcp_cuda__mma_abt_frag(float (&c)[N / DCP_CUDA__MMA_N][4],
                                                       const uint32_t (&af)[K_DIM /
                                                                            DCP_CUDA__MMA_K][4],
                                                       const T *b)
{
    static_assert(K_DIM % DCP_CUDA__MMA_K == 0, "whole m16n8k16 k steps");
#pragma unroll
    for (int kc = 0; kc < K_DIM / DCP_CUDA__MMA_K; kc++)
        dcp_cuda__mma_abt_step<T, N, STRIDE>(c, af[kc], b, kc);
}

/* c (16 x N) += P B: P (16 x K_DIM) from float accumulators of an earlier product, rounded
   to T (the C layout of m16n8k16 is the A layout of the next), B K_DIM rows of N columns in
   shared memory, row-major (ldmatrix.trans; the forward's O += P V). */
template <typename T, int K_DIM, int N, int STRIDE>
__device__ __forceinline__ void dcp_cuda__mma_pb(float (&c)[N / DCP_CUDA__MMA_N][4],
                                                 const float (&p)[K_DIM / DCP_CUDA__MMA_N][4],
                                                 const T *b)
{
    static_assert(N % (2 * DCP_CUDA__MMA_N) == 0 && K_DIM % DCP_CUDA__MMA_K == 0,
                  "whole m16n8k16 steps, pairs of n blocks");
    const int lane = threadIdx.x % DCP_CUDA__WARP_SIZE, m8 = lane >> 3, r8 = lane & 7;
#pragma unroll
    for (int kc = 0; kc < K_DIM / DCP_CUDA__MMA_K; kc++) {
        uint32_t pa[4];
        pa[0] = dcp_cuda__pack2<T>(p[2 * kc][0], p[2 * kc][1]);
        pa[1] = dcp_cuda__pack2<T>(p[2 * kc][2], p[2 * kc][3]);
        pa[2] = dcp_cuda__pack2<T>(p[2 * kc + 1][0], p[2 * kc + 1][1]);
        pa[3] = dcp_cuda__pack2<T>(p[2 * kc + 1][2], p[2 * kc + 1][3]);
#pragma unroll
        for (int dp = 0; dp < N / (2 * DCP_CUDA__MMA_N); dp++) {
            uint32_t bf[4];
            dcp_cuda__ldmatrix_x4<true>(bf, b + (kc * 16 + (m8 & 1) * 8 + r8) * STRIDE +
                                                dp * 16 + (m8 >> 1) * 8);
            dcp_cuda__mma<T>(c[2 * dp], pa, bf[0], bf[1]);
            dcp_cuda__mma<T>(c[2 * dp + 1], pa, bf[2], bf[3]);
        }
    }
}

template <int R, int C> __device__ __forceinline__ void dcp_cuda__zero(float (&x)[R][C])
{
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int c = 0; c < C; c++) x[r][c] = 0.0f;
}

/* The smallest of v over the warp. */
__device__ __forceinline__ int32_t dcp_cuda__warp_min(int32_t v)
{
#pragma unroll
    for (int offset = DCP_CUDA__WARP_SIZE / 2; offset > 0; offset >>= 1)
        v = min(v, __shfl_xor_sync(DCP_CUDA__FULL_WARP, v, offset));
    return v;
}

/* f(n, e, column) for each float of the lane's share of a C fragment (16 x 8N, N n blocks):
   element e of block n is at row g + 8 (e >> 1) and column 8n + 2t + (e & 1). */
template <int N, typename F> __device__ __forceinline__ void dcp_cuda__each_c(F f)
{
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int n = 0; n < N; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) f(n, e, n * DCP_CUDA__MMA_N + 2 * t + (e & 1));
}

/* Rows are queries (C layout: rows g and g + 8 of the warp's 16, limit[0] and limit[1]),
   columns the keys k0 + 0 .. 8 N - 1: a key at or past its row's limit becomes -inf, which
   dcp_cuda__exp2_scaled turns into exactly 0. Only tiles that cross a limit need it. */
template <int N>
__device__ __forceinline__ void dcp_cuda__mask_keys(float (&sc)[N][4], int32_t k0,
                                                    const int32_t (&limit)[2])
{
    dcp_cuda__each_c<N>([&](int n, int e, int column) {
        if (k0 + column >= limit[e >> 1]) sc[n][e] = -INFINITY;
    });
}

/* Online softmax over one key tile of raw scores sc (rows as in dcp_cuda__mask_keys): the
   running max (raw units) and sum of the lane's two rows are updated, o rescaled, and sc
   replaced by P = 2^(s scale_log2 - max scale_log2) (one FFMA and one MUFU per element; a
   fully masked row keeps max -inf and gets P = 0). */
template <int N, int HB>
__device__ __forceinline__ void dcp_cuda__softmax_update(float (&sc)[N][4], float (&o)[HB][4],
                                                         float (&row_max)[2],
                                                         float (&row_sum)[2], float scale_log2)
{
    float tile_max[2] = {row_max[0], row_max[1]}, bias[2];
#pragma unroll
    for (int n = 0; n < N; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) tile_max[e >> 1] = fmaxf(tile_max[e >> 1], sc[n][e]);
#pragma unroll
    for (int row = 0; row < 2; row++) {
        /* the four lanes of a row hold its columns */
        tile_max[row] =
            fmaxf(tile_max[row], __shfl_xor_sync(DCP_CUDA__FULL_WARP, tile_max[row], 1));
        tile_max[row] =
            fmaxf(tile_max[row], __shfl_xor_sync(DCP_CUDA__FULL_WARP, tile_max[row], 2));
        bias[row] = tile_max[row] == -INFINITY ? 0.0f : tile_max[row] * scale_log2;
        const float alpha = dcp_cuda__exp2_scaled(row_max[row], scale_log2, bias[row]);
        row_max[row] = tile_max[row];
        row_sum[row] *= alpha;
#pragma unroll
        for (int d = 0; d < HB; d++) {
            o[d][2 * row] *= alpha;
            o[d][2 * row + 1] *= alpha;
        }
    }
#pragma unroll
    for (int n = 0; n < N; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            sc[n][e] = dcp_cuda__exp2_scaled(sc[n][e], scale_log2, bias[e >> 1]);
            row_sum[e >> 1] += sc[n][e];
        }
}


/* ------------------------------------------------------------------- attention forward
   Design (FlashAttention-2 on mma.sync). A block of 4 warps owns one schedule entry: a tile
   of 64 rows of one sequence's q view, for one query head (grid.y). Each warp owns 16 query
   rows: their Q fragments stay in registers (ldmatrix from a shared tile loaded once), their
   output (16 x D floats) and running max / sum in registers. Keys and values stream through
   shared memory in tiles of 64 rows, two stages deep with cp.async (the load of tile i + 1
   overlaps the math of tile i); rows past the view's valid keys are zero-filled by cp.async
   (src-size 0), so a padding row is never read. Per tile: S = Q K^T (m16n8k16, bf16/fp16 in,
   float32 accumulate; K fragments by ldmatrix, rows padded by 16 bytes so the 8 row reads of
   an ldmatrix hit distinct banks), the mask by global position (zigzag of the q and kv
   ranks: valid query, valid key in the kv view, causal key position <= query position),
   online softmax in base 2 (the scale folded into log2(e)), P rounded to the input type and
   reused as the A operand of O += P V straight from the S accumulators, V fragments by
   ldmatrix.trans. The key loop stops at the last key a causal tile can see (positions are
   monotone in local order). Rows with no visible key (padding rows included) get 0 and LSE
   -inf; rows outside the q view are not touched; tiles come longest sequence first from the
   schedule, so a pack of many short documents fills the GPU without any host round trip. */

/* The shared tiles of a kernel, taken in order from the dynamic shared memory (tiles of
   TILE_ELEMENTS elements); the kernel's _smem function counts the same tiles. */
template <typename T, int D> struct dcp_cuda__smem_tiles {
    T *next;
    __device__ __forceinline__ dcp_cuda__smem_tiles() : next(reinterpret_cast<T *>(dcp_cuda__smem))
    {
    }
    __device__ __forceinline__ T *take(int tiles)
    {
        T *first = next;
        next += tiles * dcp_cuda__attn_traits<D>::TILE_ELEMENTS;
        return first;
    }
};

/* Stage `stage` of a buffer of STAGES tiles. */
template <int D, typename T> __device__ __forceinline__ T *dcp_cuda__stage(T *tiles, int stage)
{
    return tiles + stage * dcp_cuda__attn_traits<D>::TILE_ELEMENTS;
}

template <int D> constexpr size_t dcp_cuda__attn_smem(size_t element)
{
    using K = dcp_cuda__attn_traits<D>;
    return (size_t)(1 + 2 * K::STAGES) * K::TILE_ELEMENTS * element; /* Q, K and V stages */
}

template <typename T, int D>
__global__ void __launch_bounds__(dcp_cuda__attn_traits<D>::THREADS)
    dcp_cuda__attn_forward_kernel(const dcp_cuda__attn_args a)
{
    using K = dcp_cuda__attn_traits<D>;
    dcp_cuda__q_block b;
    if (!dcp_cuda__q_block_of<D>(a, &b)) return;
    dcp_cuda__smem_tiles<T, D> smem;
    T *sq = smem.take(1), *sk = smem.take(K::STAGES), *sv = smem.take(K::STAGES);
    const dcp_cuda__seq_view &s = b.s;
    const int tid = threadIdx.x, warp = tid / DCP_CUDA__WARP_SIZE, lane = tid % DCP_CUDA__WARP_SIZE;
    const int g = lane >> 2, t = lane & 3; /* the m16n8 C layout: row g (+ 8), columns 2t, 2t+1 */

    dcp_cuda__load_q_tile<T, D>(sq, a.q, a, s, b.head, b.q0);
    dcp_cuda__cp_async_commit();
    if (b.tiles > 0) dcp_cuda__load_kv_stage<T, D>(sk, sv, a, s, b.kv_head, 0, 0);
    dcp_cuda__cp_async_commit(); /* possibly empty: the group count stays uniform */
    dcp_cuda__cp_async_wait<1>(); /* Q has landed */
    __syncthreads();

    uint32_t qf[K::HEAD_STEPS][4];
#pragma unroll
    for (int kc = 0; kc < K::HEAD_STEPS; kc++)
        dcp_cuda__a_fragment<K::STRIDE>(qf[kc], sq + warp * K::WARP_ROWS * K::STRIDE, kc);
    /* this lane's two query rows and their key limits; a key tile needs the mask only when it
       reaches past the smallest limit of the warp's 16 rows: the tiles on the diagonal and at
       the end of the valid keys (and every tile of a warp with an invalid row) */
    const int64_t warp_q0 = b.q0 + warp * K::WARP_ROWS;
    const int32_t limit[2] = {dcp_cuda__key_limit(a, s, warp_q0 + g),
                              dcp_cuda__key_limit(a, s, warp_q0 + g + 8)};
    const int32_t unmasked_end = dcp_cuda__warp_min(min(limit[0], limit[1]));
    float o[K::HEAD_BLOCKS][4], row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
    dcp_cuda__zero(o);

    for (int32_t tile = 0; tile < b.tiles; tile++) {
        const int stage = dcp_cuda__staging<K::STAGES>::stage(tile);
        dcp_cuda__kv_stream_step<T, D, K::STAGES>(sk, sv, a, s, b.kv_head, tile, b.tiles);
        const T *ks = dcp_cuda__stage<D>(sk, stage), *vs = dcp_cuda__stage<D>(sv, stage);
        const int32_t k0 = (int32_t)(s.k_begin + (int64_t)tile * K::TILE_KEYS);
        float sc[K::KEY_BLOCKS][4];
        dcp_cuda__zero(sc);
        dcp_cuda__mma_abt_frag<T, K::TILE_KEYS, D, K::STRIDE>(sc, qf, ks);
        if (k0 + K::TILE_KEYS > unmasked_end) dcp_cuda__mask_keys(sc, k0, limit);
        dcp_cuda__softmax_update(sc, o, row_max, row_sum, a.scale_log2);
        dcp_cuda__mma_pb<T, K::TILE_KEYS, D, K::STRIDE>(o, sc, vs); /* O += P V */
        __syncthreads(); /* this stage is free for the load two tiles ahead */
    }
    dcp_cuda__cp_async_wait<0>();

    /* normalise and write the rows of the view */
#pragma unroll
    for (int row = 0; row < 2; row++) {
        float sum = row_sum[row];
        sum += __shfl_xor_sync(DCP_CUDA__FULL_WARP, sum, 1);
        sum += __shfl_xor_sync(DCP_CUDA__FULL_WARP, sum, 2);
        const int64_t index = warp_q0 + g + 8 * row;
        if (index >= s.q_end) continue;
        const int64_t out_row = s.offset + index;
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        const int64_t at = (out_row * a.heads + b.head) * D + 2 * t;
#pragma unroll
        for (int d = 0; d < K::HEAD_BLOCKS; d++) {
            const float x = o[d][2 * row] * inv, y = o[d][2 * row + 1] * inv;
            if (a.out_fp32)
                dcp_cuda__vstore(
                    reinterpret_cast<float2 *>(static_cast<float *>(a.o) + at + d * 8),
                    make_float2(x, y));
            else
                *reinterpret_cast<uint32_t *>(static_cast<T *>(a.o) + at + d * 8) =
                    dcp_cuda__pack2<T>(x, y);
        }
        if (t == 0)
            a.lse_out[(int64_t)b.head * a.rows + out_row] =
                sum > 0.0f ? (row_max[row] * a.scale_log2 + log2f(sum)) * (float)DCP_CUDA__LN2
                           : -INFINITY;
    }
}

/* ------------------------------------------------------------------ attention backward
   Design (version 1: FlashAttention-2 on mma.sync, see bench/ATTENTION_NOTES.md).
   (1) delta[h, i] = dO_i . O_i (float32), a warp per (head, query row) of the q view, into
   the workspace. (2) dK, dV: a block of 4 warps per (64-key tile of the kv view, kv head)
   from the kv schedule; K and V stay in shared memory, each warp owns 16 keys and keeps their
   dK, dV (16 x D float32) in registers while it walks the q tiles of every query head of the
   GQA group that can see the tile (the first one by binary search on the per-row key limits;
   Q and dO tiles stream through shared memory two stages deep with cp.async, the rows' LSE,
   delta and key limit beside them). Per q tile: S^T = K Q^T, P^T = 2^(S^T scale log2(e) -
   LSE log2(e)) where key < limit(query) else 0 (so rows with LSE -inf, padding rows and
   invisible keys give exactly 0), dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - delta),
   dK += dS^T Q; at the end dk += scale dK, dv += dV, once per element. (3) dQ:
   deterministic = 1: a query-stationary kernel per (64-row q tile, head) from the q schedule,
   the forward's structure: S = Q K^T, dP = dO V^T, dS = P (dP - delta), dQ += dS K over the
   key tiles it sees, then dq += scale dQ once per element: no atomics, bitwise reproducible.
   deterministic = 0: the dK/dV kernel also stores dS (rounded to the input type, as FA2) in
   shared memory as [query][key] and each warp adds scale dS K of its 16 query rows into dq
   with float32 atomics (one matrix product instead of the separate kernel's four). Padding
   rows are never read (zero-filled tiles) and never written. */

template <int E> __device__ __forceinline__ float dcp_cuda__warp_dot(const float (&x)[E],
                                                                     const float (&y)[E])
{
    float sum = 0.0f;
#pragma unroll
    for (int e = 0; e < E; e++) sum = fmaf(x[e], y[e], sum);
#pragma unroll
    for (int offset = DCP_CUDA__WARP_SIZE / 2; offset > 0; offset >>= 1)
        sum += __shfl_xor_sync(DCP_CUDA__FULL_WARP, sum, offset);
    return sum;
}

/* The (head, row) of a warp of the delta kernel and the row's sequence as the step sees it;
   false when the row is not a valid row of the q view. */
__device__ __forceinline__ bool dcp_cuda__attn_row(const dcp_cuda__attn_args &a, int32_t *head,
                                                   int64_t *row)
{
    const int64_t unit = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / DCP_CUDA__WARP_SIZE;
    if (unit >= (int64_t)a.heads * a.rows) return false;
    *head = (int32_t)(unit / a.rows);
    *row = unit - (int64_t)*head * a.rows;
    const int32_t j = dcp_cuda__find_sequence(a.cu_seqlens_padded, a.num_sequences, *row * a.cp);
    if (j < 0 || j >= a.num_sequences) return false;
    const dcp_cuda__seq_view s = dcp_cuda__seq_of(a, j);
    const int64_t index = *row - s.offset;
    return index >= s.q_begin && index < s.q_valid;
}

#define DCP_CUDA__DELTA_THREADS 256

template <typename T, int D>
__global__ void __launch_bounds__(DCP_CUDA__DELTA_THREADS)
    dcp_cuda__attn_delta_kernel(const dcp_cuda__attn_args a)
{
    constexpr int E = D / DCP_CUDA__WARP_SIZE;
    int32_t head;
    int64_t row;
    if (!dcp_cuda__attn_row(a, &head, &row)) return;
    const int lane = threadIdx.x % DCP_CUDA__WARP_SIZE;
    const int64_t at = (row * a.heads + head) * D + lane * E;
    float o[E], d[E];
    dcp_cuda__load<T, E>(static_cast<const T *>(a.out) + at, o);
    dcp_cuda__load<T, E>(static_cast<const T *>(a.dout) + at, d);
    const float delta = dcp_cuda__warp_dot<E>(o, d);
    if (lane == 0) a.delta[(int64_t)head * a.rows + row] = delta;
}

/* What the backward needs of one query row: its LSE in base 2, delta, and key limit (0 for a
   row outside the valid q view or with no visible key at all, LSE -inf: it contributes
   nothing, and its LSE is never used). */
struct dcp_cuda__bwd_row {
    float lse_log2, delta;
    int32_t limit;
};

__device__ __forceinline__ dcp_cuda__bwd_row dcp_cuda__bwd_row_of(const dcp_cuda__attn_args &a,
                                                                  const dcp_cuda__seq_view &s,
                                                                  int32_t head, int64_t index)
{
    dcp_cuda__bwd_row r = {0.0f, 0.0f, dcp_cuda__key_limit(a, s, index)};
    if (r.limit > 0) {
        const int64_t at = (int64_t)head * a.rows + s.offset + index;
        const float lse = a.lse[at];
        if (lse == -INFINITY) r.limit = 0;
        else r.lse_log2 = lse * (float)DCP_CUDA__LOG2E, r.delta = a.delta[at];
    }
    return r;
}

/* The dK, dV kernel's dynamic shared memory with `stages` stages. */
template <int D> constexpr size_t dcp_cuda__attn_dkv_smem(size_t element, int stages)
{
    using K = dcp_cuda__attn_traits<D>;
    /* K, V, stages x Q, stages x dO, dS; then the row state of stages x TILE_ROWS rows */
    return (size_t)(2 + 2 * stages) * K::TILE_ELEMENTS * element +
           (size_t)K::TILE_ROWS * K::DS_STRIDE * element +
           (size_t)stages * K::TILE_ROWS * K::ROW_STATE_BYTES;
}

/* The dQ kernel's dynamic shared memory with `stages` stages. */
template <int D> constexpr size_t dcp_cuda__attn_dq_smem(size_t element, int stages)
{
    using K = dcp_cuda__attn_traits<D>;
    return (size_t)(2 + 2 * stages) * K::TILE_ELEMENTS * element; /* Q, dO, K and V stages */
}

/* What a backward with `stages` stages needs of a block's shared memory: the larger of the dK,
   dV kernel's (its tiles and the sequence view it keeps in static shared memory) and the dQ
   kernel's. */
template <int D> constexpr size_t dcp_cuda__attn_bwd_smem(size_t element, int stages)
{
    return dcp_cuda__attn_dkv_smem<D>(element, stages) + sizeof(dcp_cuda__seq_view) >
                   dcp_cuda__attn_dq_smem<D>(element, stages)
               ? dcp_cuda__attn_dkv_smem<D>(element, stages) + sizeof(dcp_cuda__seq_view)
               : dcp_cuda__attn_dq_smem<D>(element, stages);
}

/* Shared memory a block may opt into: on sm_80 (A100), and on the smallest devices the sm_80
   binary runs on (sm_86, sm_89, sm_120: A10, A40, L4, L40S, RTX 30/40/50). */
#define DCP_CUDA__MAX_SHARED_BYTES (163 * 1024)
#define DCP_CUDA__MIN_SHARED_BYTES (99 * 1024)
/* The backward of a head dim whose two stages exceed the smallest devices' shared memory has
   one-stage kernels too (dcp_cuda__bwd_stages picks them there): d 128 needs 115,200 bytes
   (dK, dV, and 56 static) and 104,448 (dQ) with two stages, 79,616 and 69,632 with one. */
template <int D> struct dcp_cuda__bwd_fallback {
    static constexpr int STAGES = dcp_cuda__attn_bwd_smem<D>(2, 2) > DCP_CUDA__MIN_SHARED_BYTES
                                      ? 1
                                      : 2;
};
static_assert(dcp_cuda__attn_smem<DCP_CUDA__ATTN_D_LARGE>(2) <= DCP_CUDA__MIN_SHARED_BYTES,
              "the forward's tiles of the largest head dim fit every device's shared memory");
static_assert(dcp_cuda__attn_bwd_smem<DCP_CUDA__ATTN_D_LARGE>(2, 2) <= DCP_CUDA__MAX_SHARED_BYTES,
              "the backward's two stages of the largest head dim fit sm_80's shared memory");
static_assert(dcp_cuda__attn_bwd_smem<DCP_CUDA__ATTN_D_LARGE>(2, 1) <= DCP_CUDA__MIN_SHARED_BYTES,
              "the backward's one stage of the largest head dim fits every device's");

/* The first q tile of the view whose last valid row sees key k0 (the limits are monotone in
   local order); q_tiles when none does. */
__device__ __forceinline__ int32_t dcp_cuda__first_q_tile(const dcp_cuda__attn_args &a,
                                                          const dcp_cuda__seq_view &s,
                                                          int32_t q_tiles, int64_t k0)
{
    int32_t lo = 0, hi = q_tiles;
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        const int64_t end = s.q_begin + (int64_t)(mid + 1) * DCP_CUDA__TILE;
        if (dcp_cuda__key_limit(a, s, (end < s.q_valid ? end : s.q_valid) - 1) > k0) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* g[0], g[1] += x, y: a lane's two adjacent gradient columns of the m16n8 C layout (2t, 2t + 1)
   as one 8-byte load and store where the gradients allow it (the report: scalar adds left half
   of each 32-byte sector a warp's store touched unused), else as two 4-byte ones. */
__device__ __forceinline__ void dcp_cuda__add_pair(float *g, float x, float y, bool paired)
{
    if (paired) {
        float2 sum = dcp_cuda__vload(reinterpret_cast<const float2 *>(g));
        sum.x += x, sum.y += y;
        dcp_cuda__vstore(reinterpret_cast<float2 *>(g), sum);
    } else {
        g[0] += x;
        g[1] += y;
    }
}

/* deterministic = 0: dq += scale dS K for the warp's 16 query rows of a q tile, dS (queries x
   keys) in shared memory, K (keys x D) the key tile; 16 columns at a time (few registers),
   float32 atomics into dq for the valid rows of the q view. */
template <typename T, int D>
__device__ __forceinline__ void dcp_cuda__attn_dq_atomic(const dcp_cuda__attn_args &a,
                                                         const dcp_cuda__seq_view &s,
                                                         int32_t head, int64_t q0, const T *sds,
                                                         const T *sk)
{
    using K = dcp_cuda__attn_traits<D>;
    const int lane = threadIdx.x % DCP_CUDA__WARP_SIZE, warp = threadIdx.x / DCP_CUDA__WARP_SIZE;
    const int g = lane >> 2, t = lane & 3;
    const int m8 = lane >> 3, r8 = lane & 7;
    const T *ds_rows =
        sds + (warp * K::WARP_ROWS + (m8 & 1) * 8 + r8) * K::DS_STRIDE + (m8 >> 1) * 8;
    int64_t at[2];
    bool ok[2];
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int64_t index = q0 + warp * K::WARP_ROWS + g + 8 * e;
        ok[e] = index < s.q_valid;
        at[e] = ((s.offset + index) * a.heads + head) * D + 2 * t;
    }
#pragma unroll 1 /* registers: the caller holds dK and dV */
    for (int dp = 0; dp < K::HEAD_BLOCKS / 2; dp++) { /* a pair of n blocks */
        float acc[2][4];
        dcp_cuda__zero(acc);
#pragma unroll
        for (int kc = 0; kc < K::KEY_STEPS; kc++) {
            uint32_t af[4], bf[4]; /* dS fragments reloaded per column block: registers are
                                      scarce beside the dK, dV accumulators */
            dcp_cuda__ldmatrix_x4(af, ds_rows + kc * 16);
            dcp_cuda__ldmatrix_x4<true>(bf, sk + (kc * 16 + (m8 & 1) * 8 + r8) * K::STRIDE +
                                                dp * 16 + (m8 >> 1) * 8);
            dcp_cuda__mma<T>(acc[0], af, bf[0], bf[1]);
            dcp_cuda__mma<T>(acc[1], af, bf[2], bf[3]);
        }
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (ok[e >> 1])
                    atomicAdd(a.dq + at[e >> 1] + (2 * dp + j) * 8 + (e & 1),
                              a.scale * acc[j][e]);
    }
}

template <typename T, int D, bool ATOMIC_DQ, int STAGES>
__global__ void __launch_bounds__(dcp_cuda__attn_traits<D>::THREADS)
    dcp_cuda__attn_dkv_kernel(const dcp_cuda__attn_args a)
{
    using K = dcp_cuda__attn_traits<D>;
    using S = dcp_cuda__staging<STAGES>;
    dcp_cuda__smem_tiles<T, D> smem;
    T *sk = smem.take(1), *sv = smem.take(1);
    T *sq = smem.take(STAGES), *sdo = smem.take(STAGES);
    T *sds = smem.next; /* [TILE_ROWS][DS_STRIDE]: dS as [query][key] (atomic dQ) */
    /* then the row state, [STAGES][TILE_ROWS] each: */
    float *slse = reinterpret_cast<float *>(sds + K::TILE_ROWS * K::DS_STRIDE);
    float *sdelta = slse + STAGES * K::TILE_ROWS;
    int32_t *slimit = reinterpret_cast<int32_t *>(sdelta + STAGES * K::TILE_ROWS);
    /* the sequence view lives in shared memory: read where used, it frees the registers the
       dK, dV accumulators need (ptxas spilled with it in registers) */
    DCP_CUDA__SHARED(dcp_cuda__seq_view, s, );
    int64_t k0;
    {
        dcp_cuda__seq_view view;
        if (!dcp_cuda__attn_tile_of(a, true, &view, &k0) || k0 >= view.k_valid)
            return; /* padding keys only */
        if (threadIdx.x == 0) s = view;
        __syncthreads();
    }
    const int32_t kv_head = blockIdx.y;
    const int tid = threadIdx.x, warp = tid / DCP_CUDA__WARP_SIZE, lane = tid % DCP_CUDA__WARP_SIZE;
    const int g = lane >> 2, t = lane & 3; /* the m16n8 C layout: row g (+ 8), columns 2t, 2t+1 */
    const int32_t q_tiles = (int32_t)((s.q_valid - s.q_begin + K::TILE_ROWS - 1) / K::TILE_ROWS);
    const int32_t first = dcp_cuda__first_q_tile(a, s, q_tiles, k0);
    const int32_t per_head = q_tiles - first, units = per_head * a.group;
    if (units <= 0) return; /* no query sees these keys: nothing to add */

    dcp_cuda__load_kv_tile<T, D>(sk, a.k, a, s, kv_head, k0);
    dcp_cuda__load_kv_tile<T, D>(sv, a.v, a, s, kv_head, k0);
    dcp_cuda__cp_async_commit();
    /* unit u: query head kv_head x group + u / per_head, its q tile first + u % per_head */
    auto unit_head = [&](int32_t u) { return kv_head * a.group + u / per_head; };
    auto unit_q0 = [&](int32_t u) {
        return s.q_begin + (int64_t)(first + u % per_head) * K::TILE_ROWS;
    };
    auto load_unit = [&](int32_t u, int stage) {
        const int32_t head = unit_head(u);
        const int64_t q0 = unit_q0(u);
        dcp_cuda__load_q_tile<T, D>(dcp_cuda__stage<D>(sq, stage), a.q, a, s, head, q0);
        dcp_cuda__load_q_tile<T, D>(dcp_cuda__stage<D>(sdo, stage), a.dout, a, s, head, q0);
        for (int r = tid; r < K::TILE_ROWS; r += K::THREADS) {
            const dcp_cuda__bwd_row row = dcp_cuda__bwd_row_of(a, s, head, q0 + r);
            slse[stage * K::TILE_ROWS + r] = row.lse_log2;
            sdelta[stage * K::TILE_ROWS + r] = row.delta;
            slimit[stage * K::TILE_ROWS + r] = row.limit;
        }
    };
    if (STAGES > 1) load_unit(0, 0); /* units > 0; with one stage the loop loads every unit */
    dcp_cuda__cp_async_commit();

    /* this lane's two key rows (C layout: rows g and g + 8 of the warp's 16) */
    const int32_t key[2] = {(int32_t)k0 + warp * K::WARP_ROWS + g,
                            (int32_t)k0 + warp * K::WARP_ROWS + g + 8};
    const T *k_rows = sk + warp * K::WARP_ROWS * K::STRIDE;
    const T *v_rows = sv + warp * K::WARP_ROWS * K::STRIDE;
    float dk[K::HEAD_BLOCKS][4], dv[K::HEAD_BLOCKS][4];
    dcp_cuda__zero(dk);
    dcp_cuda__zero(dv);

    for (int32_t u = 0; u < units; u++) {
        const int stage = S::stage(u);
        const int32_t ahead = u + STAGES - 1; /* two stages: the next unit; one: this one */
        if (ahead < units) load_unit(ahead, S::stage(ahead));
        dcp_cuda__cp_async_commit(); /* possibly empty: the group count stays uniform */
        dcp_cuda__cp_async_wait<STAGES - 1>(); /* unit u (and K, V) have landed */
        __syncthreads();
        const T *qs = dcp_cuda__stage<D>(sq, stage), *dos = dcp_cuda__stage<D>(sdo, stage);
        const float *lse = slse + stage * K::TILE_ROWS, *delta = sdelta + stage * K::TILE_ROWS;
        const int32_t *limit = slimit + stage * K::TILE_ROWS;

        /* P^T (keys x queries) */
        float p[K::ROW_BLOCKS][4];
        dcp_cuda__zero(p);
        dcp_cuda__mma_abt<T, K::TILE_ROWS, D, K::STRIDE>(p, k_rows, qs);
        dcp_cuda__each_c<K::ROW_BLOCKS>([&](int n, int e, int query) {
            p[n][e] = key[e >> 1] < limit[query]
                          ? dcp_cuda__exp2_scaled(p[n][e], a.scale_log2, lse[query])
                          : 0.0f;
        });
        dcp_cuda__mma_pb<T, K::TILE_ROWS, D, K::STRIDE>(dv, p, dos);
        /* dS^T = P^T (dP^T - delta), dP^T = V dO^T */
        float ds[K::ROW_BLOCKS][4];
        dcp_cuda__zero(ds);
        dcp_cuda__mma_abt<T, K::TILE_ROWS, D, K::STRIDE>(ds, v_rows, dos);
        dcp_cuda__each_c<K::ROW_BLOCKS>([&](int n, int e, int query) {
            ds[n][e] = p[n][e] * (ds[n][e] - delta[query]);
        });
        dcp_cuda__mma_pb<T, K::TILE_ROWS, D, K::STRIDE>(dk, ds, qs);
        if (ATOMIC_DQ) {
            /* dS to shared memory as [query][key], then dq += scale dS K per warp's 16 queries */
            dcp_cuda__each_c<K::ROW_BLOCKS>([&](int n, int e, int query) {
                sds[query * K::DS_STRIDE + warp * K::WARP_ROWS + g + 8 * (e >> 1)] =
                    dcp_cuda__from_float<T>(ds[n][e]);
            });
            __syncthreads();
            dcp_cuda__attn_dq_atomic<T, D>(a, s, unit_head(u), unit_q0(u), sds, sk);
        }
        __syncthreads(); /* this stage (and dS) are free for the next load */
    }
    dcp_cuda__cp_async_wait<0>();

#pragma unroll
    for (int e = 0; e < 2; e++) {
        if (key[e] >= s.k_valid) continue;
        const int64_t at = ((s.offset + key[e]) * a.kv_heads + kv_head) * D + 2 * t;
#pragma unroll
        for (int d = 0; d < K::HEAD_BLOCKS; d++) {
            const int64_t column = at + d * DCP_CUDA__MMA_N;
            dcp_cuda__add_pair(a.dk + column, a.scale * dk[d][2 * e], a.scale * dk[d][2 * e + 1],
                               a.paired_gradients);
            dcp_cuda__add_pair(a.dv + column, dv[d][2 * e], dv[d][2 * e + 1], a.paired_gradients);
        }
    }
}

template <typename T, int D, int STAGES>
__global__ void __launch_bounds__(dcp_cuda__attn_traits<D>::THREADS)
    dcp_cuda__attn_dq_kernel(const dcp_cuda__attn_args a)
{
    using K = dcp_cuda__attn_traits<D>;
    dcp_cuda__q_block b;
    if (!dcp_cuda__q_block_of<D>(a, &b) || b.tiles == 0) return; /* no visible key: no term */
    dcp_cuda__smem_tiles<T, D> smem;
    T *sq = smem.take(1), *sdo = smem.take(1);
    T *sk = smem.take(STAGES), *sv = smem.take(STAGES);
    const dcp_cuda__seq_view &s = b.s;
    const int tid = threadIdx.x, warp = tid / DCP_CUDA__WARP_SIZE, lane = tid % DCP_CUDA__WARP_SIZE;
    const int g = lane >> 2, t = lane & 3; /* the m16n8 C layout: row g (+ 8), columns 2t, 2t+1 */

    dcp_cuda__load_q_tile<T, D>(sq, a.q, a, s, b.head, b.q0);
    dcp_cuda__load_q_tile<T, D>(sdo, a.dout, a, s, b.head, b.q0);
    dcp_cuda__cp_async_commit();
    if (STAGES > 1) dcp_cuda__load_kv_stage<T, D>(sk, sv, a, s, b.kv_head, 0, 0); /* tiles > 0 */
    dcp_cuda__cp_async_commit();

    dcp_cuda__bwd_row row[2];
#pragma unroll
    for (int e = 0; e < 2; e++)
        row[e] = dcp_cuda__bwd_row_of(a, s, b.head, b.q0 + warp * K::WARP_ROWS + g + 8 * e);
    const int32_t limit[2] = {row[0].limit, row[1].limit};
    const int32_t unmasked_end = dcp_cuda__warp_min(min(limit[0], limit[1])); /* as the forward */
    const T *q_rows = sq + warp * K::WARP_ROWS * K::STRIDE;
    const T *do_rows = sdo + warp * K::WARP_ROWS * K::STRIDE;
    float dq[K::HEAD_BLOCKS][4];
    dcp_cuda__zero(dq);

    for (int32_t tile = 0; tile < b.tiles; tile++) {
        const int stage = dcp_cuda__staging<STAGES>::stage(tile);
        dcp_cuda__kv_stream_step<T, D, STAGES>(sk, sv, a, s, b.kv_head, tile, b.tiles); /* Q, dO too */
        const T *ks = dcp_cuda__stage<D>(sk, stage), *vs = dcp_cuda__stage<D>(sv, stage);
        const int32_t k0 = (int32_t)(s.k_begin + (int64_t)tile * K::TILE_KEYS);
        float p[K::KEY_BLOCKS][4], ds[K::KEY_BLOCKS][4];
        dcp_cuda__zero(p);
        dcp_cuda__zero(ds);
        dcp_cuda__mma_abt<T, K::TILE_KEYS, D, K::STRIDE>(p, q_rows, ks);
        dcp_cuda__mma_abt<T, K::TILE_KEYS, D, K::STRIDE>(ds, do_rows, vs);
        if (k0 + K::TILE_KEYS > unmasked_end) dcp_cuda__mask_keys(p, k0, limit);
#pragma unroll
        for (int n = 0; n < K::KEY_BLOCKS; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const dcp_cuda__bwd_row &r = row[e >> 1];
                ds[n][e] = dcp_cuda__exp2_scaled(p[n][e], a.scale_log2, r.lse_log2) *
                           (ds[n][e] - r.delta);
            }
        dcp_cuda__mma_pb<T, K::TILE_KEYS, D, K::STRIDE>(dq, ds, ks);
        __syncthreads(); /* this stage is free for the load STAGES tiles ahead */
    }
    dcp_cuda__cp_async_wait<0>();

#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int64_t index = b.q0 + warp * K::WARP_ROWS + g + 8 * e;
        if (index >= s.q_valid) continue;
        const int64_t at = ((s.offset + index) * a.heads + b.head) * D + 2 * t;
#pragma unroll
        for (int d = 0; d < K::HEAD_BLOCKS; d++)
            dcp_cuda__add_pair(a.dq + at + d * DCP_CUDA__MMA_N, a.scale * dq[d][2 * e],
                               a.scale * dq[d][2 * e + 1], a.paired_gradients);
    }
}

/* ------------------------------------------------------------------ attention: host side */

/* Schedule capacity (entries) of a layout: sum over sequences of ceil(view rows / 64) is at
   most local_rows / 64 + num_sequences. */
static int64_t dcp_cuda__attn_capacity(const dcp_cuda_layout *layout)
{
    return layout->local_rows / DCP_CUDA__TILE + layout->thd.num_sequences + 1;
}

/* The attention workspace: the tile schedule (its count in a header padded so that the int2
   entries after it are 16-byte aligned), then the backward's delta, each region aligned. */
#define DCP_CUDA__WORKSPACE_ALIGNMENT 256
#define DCP_CUDA__SCHEDULE_HEADER 16
#define DCP_CUDA__ALIGN(x)                                                                         \
    (((x) + DCP_CUDA__WORKSPACE_ALIGNMENT - 1) & ~(size_t)(DCP_CUDA__WORKSPACE_ALIGNMENT - 1))
static_assert(DCP_CUDA__SCHEDULE_HEADER >= sizeof(int32_t) &&
                  DCP_CUDA__SCHEDULE_HEADER % DCP_CUDA__VECTOR_BYTES == 0,
              "the header holds the count and keeps the entries 16-byte aligned");

static size_t dcp_cuda__attn_schedule_bytes(const dcp_cuda_layout *layout)
{
    return DCP_CUDA__ALIGN(DCP_CUDA__SCHEDULE_HEADER +
                           (size_t)dcp_cuda__attn_capacity(layout) * sizeof(int2));
}

/* The schedule's count and entries in a checked workspace; the delta region after them. */
static void dcp_cuda__attn_workspace(dcp_cuda__attn_args *a, const dcp_cuda_layout *layout,
                                     void *workspace)
{
    a->count = (const int32_t *)workspace;
    a->entries = (const int2 *)((char *)workspace + DCP_CUDA__SCHEDULE_HEADER);
    a->delta = (float *)((char *)workspace + dcp_cuda__attn_schedule_bytes(layout));
}

static dcp_status dcp_cuda__attn_check(const dcp_attention_params *params,
                                       const dcp_cuda_layout *layout,
                                       const dcp_attention_view *view, dcp_dtype dtype,
                                       dcp_attention_params *p, dcp_error *error)
{
    dcp_status status;
    if ((status = dcp_attention_params_resolve(params, p, error)) != DCP_OK ||
        (status = dcp_cuda__check_layout(layout, error)) != DCP_OK ||
        (status = dcp_attention_view_validate(view, layout->thd.cp, error)) != DCP_OK ||
        (status = dcp_cuda__check_dtype("dtype", dtype, 0, error)) != DCP_OK)
        return status;
    if (p->head_dim != DCP_CUDA__ATTN_D_SMALL && p->head_dim != DCP_CUDA__ATTN_D_LARGE)
        return dcp_error_set(error, DCP_ERROR_UNSUPPORTED,
                             "head_dim %d: the CUDA attention serves %d and %d", (int)p->head_dim,
                             DCP_CUDA__ATTN_D_SMALL, DCP_CUDA__ATTN_D_LARGE);
    if (p->num_heads > DCP_CUDA__MAX_GRID_Y) /* heads are grid.y */
        return dcp_error_set(error, DCP_ERROR_UNSUPPORTED, "num_heads %d > %d",
                             (int)p->num_heads, DCP_CUDA__MAX_GRID_Y);
    if ((status = dcp_cuda__check_elements("q", layout->local_rows,
                                           (int64_t)p->num_heads * p->head_dim, sizeof(float),
                                           error)) != DCP_OK)
        return status;
    return dcp_cuda__check_row_units(p->num_heads, layout->local_rows,
                                     DCP_CUDA__DELTA_THREADS / DCP_CUDA__WARP_SIZE, error);
}

static dcp_cuda__attn_args dcp_cuda__attn_args_of(const dcp_attention_params *p,
                                                  const dcp_cuda_layout *layout,
                                                  const dcp_attention_view *view)
{
    dcp_cuda__attn_args a;
    dcp_cuda__args_of_layout(&a, layout);
    a.cp = layout->thd.cp;
    if (view) {
        a.q_rank = view->q_rank, a.q_half = view->q_half;
        a.kv_rank = view->kv_rank, a.kv_half = view->kv_half;
    }
    a.causal = p->causal;
    a.rows = layout->local_rows;
    a.heads = p->num_heads;
    a.kv_heads = p->num_kv_heads;
    a.group = p->num_heads / p->num_kv_heads;
    a.scale = (float)p->softmax_scale;
    a.scale_log2 = (float)(p->softmax_scale * DCP_CUDA__LOG2E);
    return a;
}

static dcp_status dcp_cuda__check_workspace(void *workspace, size_t bytes, size_t needed,
                                            dcp_error *error)
{
    if (!workspace || bytes < needed ||
        !dcp_cuda__aligned(workspace, DCP_CUDA__WORKSPACE_ALIGNMENT))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "workspace %p of %zu bytes: need %zu bytes, %d-byte aligned "
                             "(dcp_cuda_attention_workspace_size)",
                             workspace, bytes, needed, DCP_CUDA__WORKSPACE_ALIGNMENT);
    return DCP_OK;
}

extern "C" dcp_status dcp_cuda_attention_workspace_size(const dcp_attention_params *params,
                                                        const dcp_cuda_layout *layout,
                                                        size_t *bytes, dcp_error *error)
{
    dcp_attention_params p;
    dcp_status status;
    if (!bytes) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "bytes must not be NULL");
    if ((status = dcp_attention_params_resolve(params, &p, error)) != DCP_OK ||
        (status = dcp_cuda__check_layout(layout, error)) != DCP_OK)
        return status;
    /* the tile schedule, then the backward's delta [num_heads, local_rows] */
    *bytes = dcp_cuda__attn_schedule_bytes(layout) +
             DCP_CUDA__ALIGN((size_t)layout->local_rows * (size_t)p.num_heads * sizeof(float));
    return dcp_error_clear(error);
}

/* fn(T(), std::integral_constant<int, D>()) for the input type T and head dim D of a checked
   call: the attention kernels are built for bf16 and fp16 and two head dims. */
template <typename Fn>
static dcp_status dcp_cuda__with_attn_shape(dcp_dtype dtype, int32_t head_dim, Fn fn)
{
    typedef std::integral_constant<int, DCP_CUDA__ATTN_D_SMALL> small;
    typedef std::integral_constant<int, DCP_CUDA__ATTN_D_LARGE> large;
    if (dtype == DCP_DTYPE_BFLOAT16)
        return head_dim == small::value ? fn(__nv_bfloat16(), small())
                                        : fn(__nv_bfloat16(), large());
    return head_dim == small::value ? fn(__half(), small()) : fn(__half(), large());
}

/* The tile schedule of the step's q view (kv view when use_kv) into the workspace. */
static dcp_status dcp_cuda__schedule(const dcp_cuda__attn_args &a, int32_t use_kv,
                                     int64_t capacity, cudaStream_t s, dcp_error *error)
{
    DCP_CUDA_CHECK(dcp_cuda__launch(dcp_cuda__schedule_kernel<>, 1, DCP_CUDA__SCHEDULE_THREADS, 0,
                                    s, a, use_kv, (int32_t *)a.count, (int2 *)a.entries,
                                    capacity));
    return DCP_OK;
}

/* An attention kernel over the schedule (grid: capacity x heads), with its dynamic shared
   memory allowed first (it is over the 48 KB default). */
static dcp_status dcp_cuda__attn_launch(void (*kernel)(const dcp_cuda__attn_args), int32_t heads,
                                        int threads, size_t shared, const dcp_cuda__attn_args &a,
                                        int64_t capacity, cudaStream_t s, dcp_error *error)
{
    DCP_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void *>(kernel),
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared));
    DCP_CUDA_CHECK(dcp_cuda__launch(kernel, dim3((unsigned)capacity, (unsigned)heads), threads,
                                    shared, s, a));
    return DCP_OK;
}

template <typename T, int D>
static dcp_status dcp_cuda__attn_forward_launch(dcp_cuda__attn_args a, int64_t capacity,
                                                cudaStream_t s, dcp_error *error)
{
    dcp_status status;
    if ((status = dcp_cuda__schedule(a, 0, capacity, s, error)) != DCP_OK ||
        (status = dcp_cuda__attn_launch(dcp_cuda__attn_forward_kernel<T, D>, a.heads,
                                        dcp_cuda__attn_traits<D>::THREADS,
                                        dcp_cuda__attn_smem<D>(sizeof(T)), a, capacity, s,
                                        error)) != DCP_OK)
        return status;
    return dcp_error_clear(error);
}

/* The pointers the kernels access in wide pieces: q, k, v and dout (NULL in the forward) by
   16-byte rows (cp.async), out by pairs of values (8 bytes at most), lse by floats. */
static dcp_status dcp_cuda__attn_check_alignment(const void *q, const void *k, const void *v,
                                                 const void *dout, const void *out,
                                                 const float *lse, dcp_error *error)
{
    if (dcp_cuda__aligned(q, DCP_CUDA__VECTOR_BYTES) &&
        dcp_cuda__aligned(k, DCP_CUDA__VECTOR_BYTES) &&
        dcp_cuda__aligned(v, DCP_CUDA__VECTOR_BYTES) &&
        dcp_cuda__aligned(dout, DCP_CUDA__VECTOR_BYTES) &&
        dcp_cuda__aligned(out, sizeof(float2)) && dcp_cuda__aligned(lse, sizeof(float)))
        return DCP_OK;
    return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                         "q, k, v%s must be %d-byte aligned, out %d-byte and lse %d-byte aligned "
                         "(got q %p, k %p, v %p, dout %p, out %p, lse %p)",
                         dout ? " and dout" : "", DCP_CUDA__VECTOR_BYTES, (int)sizeof(float2),
                         (int)sizeof(float), q, k, v, dout, out, (const void *)lse);
}

/* A checked call's launch arguments: the tensors' alignment and the workspace checked, q, k,
   v and the workspace's regions filled in (the caller adds its outputs). */
static dcp_status dcp_cuda__attn_bind(const dcp_attention_params *p, const dcp_cuda_layout *layout,
                                      const dcp_attention_view *view, const void *q,
                                      const void *k, const void *v, const void *dout,
                                      const void *out, const float *lse, void *workspace,
                                      size_t workspace_bytes, dcp_cuda__attn_args *a,
                                      dcp_error *error)
{
    size_t needed;
    dcp_status status;
    if ((status = dcp_cuda__attn_check_alignment(q, k, v, dout, out, lse, error)) != DCP_OK ||
        (status = dcp_cuda_attention_workspace_size(p, layout, &needed, error)) != DCP_OK ||
        (status = dcp_cuda__check_workspace(workspace, workspace_bytes, needed, error)) != DCP_OK)
        return status;
    *a = dcp_cuda__attn_args_of(p, layout, view);
    a->q = q, a->k = k, a->v = v;
    dcp_cuda__attn_workspace(a, layout, workspace);
    return DCP_OK;
}

/* The wgmma forward (section "attention on Hopper" at the end of this file). */
static int dcp_cuda__forward_uses_wgmma(dcp_cuda_attention_path path, const void *out,
                                        dcp_error *error);
static dcp_status dcp_cuda__attn_forward_sm90(const dcp_cuda__attn_args &a, int32_t head_dim,
                                              dcp_dtype dtype, const dcp_cuda_layout *layout,
                                              cudaStream_t s, dcp_error *error);

extern "C" dcp_status dcp_cuda_attention_forward_using(
    dcp_cuda_attention_path path, const dcp_attention_params *params,
    const dcp_cuda_layout *layout, const dcp_attention_view *view, dcp_dtype dtype,
    const void *q, const void *k, const void *v, dcp_dtype out_dtype, void *out, float *lse,
    void *workspace, size_t workspace_bytes, void *stream, dcp_error *error)
{
    if (path != DCP_CUDA_ATTENTION_PATH_AUTO && path != DCP_CUDA_ATTENTION_PATH_MMA_SYNC &&
        path != DCP_CUDA_ATTENTION_PATH_WGMMA)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "path %d is not a dcp_cuda_attention_path", (int)path);
    dcp_attention_params p;
    dcp_status status = dcp_cuda__attn_check(params, layout, view, dtype, &p, error);
    if (status != DCP_OK) return status;
    if (out_dtype != DCP_DTYPE_FLOAT32 && out_dtype != dtype)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "out_dtype %s must be float32 or dtype %s",
                             dcp_dtype_name(out_dtype), dcp_dtype_name(dtype));
    if (!q || !k || !v || !out || !lse)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "q, k, v, out and lse must not be NULL");
    /* The path first: a caller who asked for wgmma hears why it cannot run before any other
       complaint about buffers the mma.sync path would take. */
    const int wgmma = dcp_cuda__forward_uses_wgmma(path, out, error);
    if (wgmma < 0) return DCP_ERROR_UNSUPPORTED;
    dcp_cuda__attn_args a;
    if ((status = dcp_cuda__attn_bind(&p, layout, view, q, k, v, NULL, out, lse, workspace,
                                      workspace_bytes, &a, error)) != DCP_OK)
        return status;
    a.o = out, a.lse_out = lse;
    a.out_fp32 = out_dtype == DCP_DTYPE_FLOAT32;
    if (layout->local_rows == 0) return dcp_error_clear(error);
    if (wgmma)
        return dcp_cuda__attn_forward_sm90(a, p.head_dim, dtype, layout,
                                           (cudaStream_t)stream, error);
    return dcp_cuda__with_attn_shape(dtype, p.head_dim, [&](auto element, auto head_dim) {
        return dcp_cuda__attn_forward_launch<decltype(element), decltype(head_dim)::value>(
            a, dcp_cuda__attn_capacity(layout), (cudaStream_t)stream, error);
    });
}

/* The stages of a backward (dcp_cuda__attn_bwd_smem): two where the device's shared memory per
   block (cudaDevAttrMaxSharedMemoryPerBlockOptin) holds them, else one (d 128 on sm_86, sm_89,
   sm_120: 99 KB). */
template <typename T, int D> static dcp_status dcp_cuda__bwd_stages(int *stages, dcp_error *error)
{
    int device = 0, optin = 0;
    DCP_CUDA_CHECK(cudaGetDevice(&device));
    DCP_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    for (*stages = 2; *stages >= 1; (*stages)--)
        if (dcp_cuda__attn_bwd_smem<D>(sizeof(T), *stages) <= (size_t)optin) return DCP_OK;
    return dcp_error_set(error, DCP_ERROR_UNSUPPORTED,
                         "attention backward at head_dim %d needs %zu bytes of shared memory per "
                         "block, the device allows %d",
                         D, dcp_cuda__attn_bwd_smem<D>(sizeof(T), 1), optin);
}

/* The dK, dV kernel over the kv schedule (and dQ by atomics when not deterministic), then, when
   deterministic, the dQ kernel over the q schedule (the same workspace: stream order). */
template <typename T, int D, int STAGES>
static dcp_status dcp_cuda__attn_gradients(const dcp_cuda__attn_args &a, int64_t capacity,
                                           int32_t deterministic, cudaStream_t s,
                                           dcp_error *error)
{
    using K = dcp_cuda__attn_traits<D>;
    dcp_status status;
    if ((status = dcp_cuda__schedule(a, 1, capacity, s, error)) != DCP_OK ||
        (status = dcp_cuda__attn_launch(deterministic
                                            ? dcp_cuda__attn_dkv_kernel<T, D, false, STAGES>
                                            : dcp_cuda__attn_dkv_kernel<T, D, true, STAGES>,
                                        a.kv_heads, K::THREADS,
                                        dcp_cuda__attn_dkv_smem<D>(sizeof(T), STAGES), a,
                                        capacity, s, error)) != DCP_OK)
        return status;
    if (deterministic &&
        ((status = dcp_cuda__schedule(a, 0, capacity, s, error)) != DCP_OK ||
         (status = dcp_cuda__attn_launch(dcp_cuda__attn_dq_kernel<T, D, STAGES>, a.heads,
                                         K::THREADS, dcp_cuda__attn_dq_smem<D>(sizeof(T), STAGES),
                                         a, capacity, s, error)) != DCP_OK))
        return status;
    return DCP_OK;
}

template <typename T, int D>
static dcp_status dcp_cuda__attn_backward_launch(dcp_cuda__attn_args a, int64_t capacity,
                                                 int32_t deterministic, cudaStream_t s,
                                                 dcp_error *error)
{
    const unsigned delta_blocks = (unsigned)(((int64_t)a.heads * a.rows * DCP_CUDA__WARP_SIZE +
                                              DCP_CUDA__DELTA_THREADS - 1) /
                                             DCP_CUDA__DELTA_THREADS);
    int stages = 0;
    dcp_status status;
    if ((status = dcp_cuda__bwd_stages<T, D>(&stages, error)) != DCP_OK) return status;
    DCP_CUDA_CHECK(dcp_cuda__launch(dcp_cuda__attn_delta_kernel<T, D>, delta_blocks,
                                    DCP_CUDA__DELTA_THREADS, 0, s, a));
    status = stages == 2 ? dcp_cuda__attn_gradients<T, D, 2>(a, capacity, deterministic, s, error)
                         : dcp_cuda__attn_gradients<T, D, dcp_cuda__bwd_fallback<D>::STAGES>(
                               a, capacity, deterministic, s, error);
    return status == DCP_OK ? dcp_error_clear(error) : status;
}

extern "C" dcp_status dcp_cuda_attention_backward(
    const dcp_attention_params *params, const dcp_cuda_layout *layout,
    const dcp_attention_view *view, dcp_dtype dtype, const void *q, const void *k, const void *v,
    const void *out, const void *dout, const float *lse, float *dq, float *dk, float *dv,
    int32_t deterministic, void *workspace, size_t workspace_bytes, void *stream,
    dcp_error *error)
{
    dcp_attention_params p;
    dcp_cuda__attn_args a;
    dcp_status status;
    if ((status = dcp_cuda__attn_check(params, layout, view, dtype, &p, error)) != DCP_OK)
        return status;
    if (deterministic != 0 && deterministic != 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "deterministic must be 0 or 1, got %d", (int)deterministic);
    if (!q || !k || !v || !out || !dout || !lse || !dq || !dk || !dv)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "q, k, v, out, dout, lse, dq, dk and dv must not be NULL");
    if ((status = dcp_cuda__attn_bind(&p, layout, view, q, k, v, dout, out, lse, workspace,
                                      workspace_bytes, &a, error)) != DCP_OK)
        return status;
    a.out = out, a.dout = dout, a.lse = lse;
    a.dq = dq, a.dk = dk, a.dv = dv;
    a.paired_gradients = dcp_cuda__aligned(dq, sizeof(float2)) &&
                         dcp_cuda__aligned(dk, sizeof(float2)) && dcp_cuda__aligned(dv, sizeof(float2));
    if (layout->local_rows == 0) return dcp_error_clear(error);
    return dcp_cuda__with_attn_shape(dtype, p.head_dim, [&](auto element, auto head_dim) {
        return dcp_cuda__attn_backward_launch<decltype(element), decltype(head_dim)::value>(
            a, dcp_cuda__attn_capacity(layout), deterministic, (cudaStream_t)stream, error);
    });
}

/* ------------------------------------------------------------------- virtual ring driver
   The steps of dcp_ring_step_plan, rank after rank, through the same entry points a real
   ring calls (dcp_nccl.h does the same with the KV received from the neighbour); the CPU
   reference dcp_ring_attention_forward / _backward has the same structure. */

/* The checks of a virtual ring call: its attention arguments and the cp per-rank buffers of
   each array of `buffers`, named by `names` (NULL-terminated). */
static dcp_status dcp_cuda__virtual_ring_check(const dcp_attention_params *params,
                                               const dcp_cuda_layout *layout, dcp_dtype dtype,
                                               const void *const *const *buffers,
                                               const char *const *names, dcp_attention_params *p,
                                               dcp_error *error)
{
    int32_t i;
    dcp_status status;
    if ((status = dcp_cuda__attn_check(params, layout, NULL, dtype, p, error)) != DCP_OK)
        return status;
    for (i = 0; names[i]; i++)
        if ((status = dcp_check_rank_buffers(names[i], buffers[i], layout->thd.cp, error)) !=
            DCP_OK)
            return status;
    return DCP_OK;
}

extern "C" dcp_status dcp_cuda_virtual_ring_forward(
    const dcp_attention_params *params, const dcp_cuda_layout *layout, dcp_dtype dtype,
    const void *const *q, const void *const *k, const void *const *v, dcp_dtype out_dtype,
    void *const *out, float *const *lse, float *partial_out, float *partial_lse,
    float *acc_out, float *acc_lse, void *workspace, size_t workspace_bytes, void *stream,
    dcp_error *error)
{
    static const char *const names[] = {"q", "k", "v", "out", "lse", NULL};
    const void *const *const buffers[] = {q, k, v, (const void *const *)out,
                                          (const void *const *)lse};
    dcp_attention_params p;
    int32_t rank, step, cp;
    dcp_status status;
    status = dcp_cuda__virtual_ring_check(params, layout, dtype, buffers, names, &p, error);
    if (status != DCP_OK) return status;
    cp = layout->thd.cp;
    if (!partial_out || !partial_lse || !acc_out || !acc_lse)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "partial_out, partial_lse, acc_out and acc_lse must not be NULL");
    for (rank = 0; rank < cp; rank++) {
        if ((status = dcp_cuda_acc_init(&p, layout, acc_out, acc_lse, stream, error)) != DCP_OK)
            return status;
        for (step = 0; step < cp; step++) {
            dcp_ring_step plan;
            dcp_attention_params step_params = p;
            if ((status = dcp_ring_step_plan(cp, rank, step, p.causal, &plan, error)) != DCP_OK)
                return status;
            step_params.causal = plan.causal;
            if ((status = dcp_cuda_attention_forward(
                     &step_params, layout, &plan.view, dtype, q[rank], k[plan.view.kv_rank],
                     v[plan.view.kv_rank], DCP_DTYPE_FLOAT32, partial_out, partial_lse,
                     workspace, workspace_bytes, stream, error)) != DCP_OK ||
                (status = dcp_cuda_acc_merge(&p, layout, plan.view.q_half, partial_out,
                                             partial_lse, acc_out, acc_lse, stream, error)) !=
                    DCP_OK)
                return status;
        }
        if ((status = dcp_cuda_acc_finalize(&p, layout, rank, acc_out, acc_lse, out_dtype,
                                            out[rank], lse[rank], stream, error)) != DCP_OK)
            return status;
    }
    return dcp_error_clear(error);
}

extern "C" dcp_status dcp_cuda_virtual_ring_backward(
    const dcp_attention_params *params, const dcp_cuda_layout *layout, dcp_dtype dtype,
    const void *const *q, const void *const *k, const void *const *v, const void *const *out,
    const void *const *dout, const float *const *lse, float *const *dq, float *const *dk,
    float *const *dv, int32_t deterministic, void *workspace, size_t workspace_bytes,
    void *stream, dcp_error *error)
{
    static const char *const names[] = {"q",  "k",  "v",  "out", "dout",
                                        "lse", "dq", "dk", "dv",  NULL};
    const void *const *const buffers[] = {
        q, k, v, out, dout, (const void *const *)lse, (const void *const *)dq,
        (const void *const *)dk, (const void *const *)dv};
    dcp_attention_params p;
    int32_t rank, step, cp;
    cudaStream_t s = (cudaStream_t)stream;
    dcp_status status;
    status = dcp_cuda__virtual_ring_check(params, layout, dtype, buffers, names, &p, error);
    if (status != DCP_OK) return status;
    cp = layout->thd.cp;
    for (rank = 0; rank < cp; rank++) {
        const size_t q_bytes =
            (size_t)layout->local_rows * p.num_heads * p.head_dim * sizeof(float);
        const size_t kv_bytes =
            (size_t)layout->local_rows * p.num_kv_heads * p.head_dim * sizeof(float);
        DCP_CUDA_CHECK(cudaMemsetAsync(dq[rank], 0, q_bytes, s));
        DCP_CUDA_CHECK(cudaMemsetAsync(dk[rank], 0, kv_bytes, s));
        DCP_CUDA_CHECK(cudaMemsetAsync(dv[rank], 0, kv_bytes, s));
    }
    for (rank = 0; rank < cp; rank++)
        for (step = 0; step < cp; step++) {
            dcp_ring_step plan;
            dcp_attention_params step_params = p;
            int32_t source;
            if ((status = dcp_ring_step_plan(cp, rank, step, p.causal, &plan, error)) != DCP_OK)
                return status;
            step_params.causal = plan.causal;
            source = plan.view.kv_rank;
            if ((status = dcp_cuda_attention_backward(
                     &step_params, layout, &plan.view, dtype, q[rank], k[source], v[source],
                     out[rank], dout[rank], lse[rank], dq[rank], dk[source], dv[source],
                     deterministic, workspace, workspace_bytes, stream, error)) != DCP_OK)
                return status;
        }
    return dcp_error_clear(error);
}

/* ============================================================================ ring helpers
   acc += x on float32 buffers: the ring backward adds one step's dK, dV (computed into their
   own buffer) into the accumulator that arrived from the previous rank while that step ran,
   which keeps the accumulator's hop off the critical path. A grid-stride loop, one float4 per
   thread per iteration when both pointers are 16-byte aligned (cudaMalloc and the ring's
   scratch regions are), a scalar tail; memory-bound (12 bytes moved per value). */

/* Threads per block and the cap on blocks of the grid-stride loop. */
#define DCP_CUDA_ADD_THREADS 256
#define DCP_CUDA_ADD_MAX_BLOCKS 65536
#define DCP_CUDA_ADD_VECTOR 4
static_assert(DCP_CUDA_ADD_VECTOR * sizeof(float) == DCP_CUDA__VECTOR_BYTES,
              "a thread adds one 16-byte vector");

template <int V>
__global__ void dcp_cuda__add_kernel(float *acc, const float *x, int64_t count)
{
    const int64_t vectors = count / V, stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (int64_t i = first; i < vectors; i += stride) {
        float a[V], b[V];
        dcp_cuda__load<float, V>(acc + i * V, a);
        dcp_cuda__load<float, V>(x + i * V, b);
#pragma unroll
        for (int j = 0; j < V; j++) a[j] += b[j];
        dcp_cuda__store<float, V>(acc + i * V, a);
    }
    for (int64_t i = vectors * V + first; i < count; i += stride) acc[i] += x[i];
}

extern "C" dcp_status dcp_cuda_add_float32(float *acc, const float *x, int64_t count,
                                           void *stream, dcp_error *error)
{
    cudaStream_t s = (cudaStream_t)stream;
    int64_t threads, blocks;
    unsigned grid;
    dcp_status status;
    if ((status = dcp_cuda__check_values(count, acc, x, "acc and x", error)) != DCP_OK)
        return status;
    if (count == 0) return dcp_error_clear(error);
    if ((const float *)acc < x + count && x < (const float *)acc + count)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "acc and x overlap");
    threads = (count + DCP_CUDA_ADD_VECTOR - 1) / DCP_CUDA_ADD_VECTOR;
    blocks = (threads + DCP_CUDA_ADD_THREADS - 1) / DCP_CUDA_ADD_THREADS;
    grid = (unsigned)(blocks < DCP_CUDA_ADD_MAX_BLOCKS ? blocks : DCP_CUDA_ADD_MAX_BLOCKS);
    DCP_CUDA_CHECK(dcp_cuda__launch(dcp_cuda__aligned(acc, DCP_CUDA__VECTOR_BYTES) &&
                                            dcp_cuda__aligned(x, DCP_CUDA__VECTOR_BYTES)
                                        ? dcp_cuda__add_kernel<DCP_CUDA_ADD_VECTOR>
                                        : dcp_cuda__add_kernel<1>,
                                    grid, DCP_CUDA_ADD_THREADS, 0, s, acc, x, count));
    return dcp_error_clear(error);
}

/* ================================================= head-parallel all-to-all: segment copies
   One launch runs one segment list of dcp.h's head-parallel all-to-all (dcp_a2a_segments):
   rows of slice_bytes between a local buffer (row pitch local_pitch: a CP buffer's channel
   slice, or an HP buffer's row) and the packed message buffer (contiguous rows). The rows of
   the list form one row space (segment s holds rows [first_row, first_row + rows)); a block
   owns tiles of consecutive rows of it. Two threads find the segments of a tile's first and
   last rows by binary search over first_row, then the block's threads stride over the tile's
   (row, vector) units, consecutive threads on consecutive vectors of a row, so both sides are
   read and written in coalesced runs; each unit searches its row's segment inside the tile's
   range only. Vectors are 16 bytes where every address and pitch allows it, else the widest of
   8, 4, 2, 1 bytes. Unpacking writes zeros on the padding segments (those past `copies`).
   Every unit is written once: no atomics, no shared memory but the two indices. */

#define DCP_CUDA__A2A_THREADS 256
#define DCP_CUDA__A2A_TILE_UNITS 4096   /* vectors a tile aims at: 16 per thread */
#define DCP_CUDA__A2A_MAX_TILE_ROWS 512 /* rows of a tile at most (short rows) */
#define DCP_CUDA__A2A_MAX_BLOCKS 65536  /* grid cap of the grid-stride loop over tiles */
#define DCP_CUDA__A2A_WIDEST 16         /* bytes of the widest vector */
static_assert(sizeof(uint4) == DCP_CUDA__A2A_WIDEST, "the widest vector is a uint4");
static_assert((int64_t)DCP_CUDA__A2A_TILE_UNITS * DCP_CUDA__A2A_MAX_TILE_ROWS <= INT32_MAX,
              "a tile's units are counted in 32 bits");

typedef struct dcp_cuda__a2a_args {
    const dcp_a2a_segment *segments;
    int64_t count;      /* segments the launch runs */
    int64_t copies;     /* segments past it are zero fills */
    int64_t total_rows;
    int64_t tile_rows;
    int64_t local_pitch;
    int32_t units_per_row; /* vectors of a row */
    int32_t pack;          /* 1: local -> message */
    unsigned char *local;
    unsigned char *message;
} dcp_cuda__a2a_args;

/* The last segment in [lo, hi] whose first row is <= row (first_row is increasing). */
__device__ __forceinline__ int64_t dcp_cuda__a2a_find(const dcp_a2a_segment *segments, int64_t row,
                                                      int64_t lo, int64_t hi)
{
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (segments[mid].first_row <= row) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

template <typename V>
__global__ void __launch_bounds__(DCP_CUDA__A2A_THREADS) dcp_cuda__a2a_kernel(dcp_cuda__a2a_args a)
{
    DCP_CUDA__SHARED(int64_t, range, [2]);
    for (int64_t tile = blockIdx.x; tile * a.tile_rows < a.total_rows; tile += gridDim.x) {
        const int64_t first = tile * a.tile_rows;
        const int64_t end = first + a.tile_rows < a.total_rows ? first + a.tile_rows : a.total_rows;
        const uint32_t units = (uint32_t)(end - first) * (uint32_t)a.units_per_row;
        if (threadIdx.x < 2)
            range[threadIdx.x] =
                dcp_cuda__a2a_find(a.segments, threadIdx.x ? end - 1 : first, 0, a.count - 1);
        __syncthreads();
        for (uint32_t u = threadIdx.x; u < units; u += blockDim.x) {
            const int64_t row = first + u / (uint32_t)a.units_per_row;
            const uint32_t unit = u % (uint32_t)a.units_per_row;
            const int64_t s = dcp_cuda__a2a_find(a.segments, row, range[0], range[1]);
            const dcp_a2a_segment seg = a.segments[s];
            const int64_t k = row - seg.first_row;
            V *local, *message;
            if (k >= seg.rows) continue; /* a list shorter than total_rows: never outside it */
            local = (V *)(a.local + seg.local_offset + k * a.local_pitch) + unit;
            message = (V *)(a.message + seg.message_offset) + k * a.units_per_row + unit;
            if (s >= a.copies) dcp_cuda__vstore(local, V());
            else if (a.pack) dcp_cuda__vstore(message, dcp_cuda__vload(local));
            else dcp_cuda__vstore(local, dcp_cuda__vload(message));
        }
        __syncthreads(); /* range is rewritten by the next tile */
    }
}

template <typename V>
static dcp_status dcp_cuda__a2a_launch(dcp_cuda__a2a_args a, size_t slice_bytes,
                                       cudaStream_t stream, dcp_error *error)
{
    int64_t tiles;
    a.units_per_row = (int32_t)(slice_bytes / sizeof(V));
    a.tile_rows = DCP_CUDA__A2A_TILE_UNITS / a.units_per_row;
    if (a.tile_rows < 1) a.tile_rows = 1;
    if (a.tile_rows > DCP_CUDA__A2A_MAX_TILE_ROWS) a.tile_rows = DCP_CUDA__A2A_MAX_TILE_ROWS;
    tiles = (a.total_rows + a.tile_rows - 1) / a.tile_rows;
    DCP_CUDA_CHECK(dcp_cuda__launch(
        dcp_cuda__a2a_kernel<V>,
        (unsigned)(tiles < DCP_CUDA__A2A_MAX_BLOCKS ? tiles : DCP_CUDA__A2A_MAX_BLOCKS),
        DCP_CUDA__A2A_THREADS, 0, stream, a));
    return dcp_error_clear(error);
}

extern "C" dcp_status dcp_cuda_a2a_copy(const dcp_a2a_segment *segments, int64_t count,
                                        int64_t copies, int64_t total_rows, size_t slice_bytes,
                                        size_t local_pitch, dcp_a2a_direction direction,
                                        void *local, void *message, void *stream,
                                        dcp_error *error)
{
    cudaStream_t s = (cudaStream_t)stream;
    dcp_cuda__a2a_args a;
    uintptr_t all;
    if (count < 0 || copies < 0 || copies > count || total_rows < 0 ||
        (total_rows > 0 && (count == 0 || !segments || !local || (copies > 0 && !message))))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "segments: count %lld, copies %lld, total_rows %lld (need 0 <= "
                             "copies <= count, count >= 1 and non-NULL buffers for rows)",
                             (long long)count, (long long)copies, (long long)total_rows);
    if (slice_bytes == 0 || local_pitch < slice_bytes || local_pitch > (size_t)INT64_MAX ||
        slice_bytes > (size_t)INT32_MAX)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "slice_bytes %zu must be in [1, %d] and <= local_pitch %zu",
                             slice_bytes, INT32_MAX, local_pitch);
    if (direction != DCP_A2A_PACK && direction != DCP_A2A_UNPACK)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "direction must be 0 or 1, got %d",
                             (int)direction);
    if (total_rows == 0) return dcp_error_clear(error);
    a.segments = segments;
    a.count = direction == DCP_A2A_PACK ? copies : count;
    a.copies = copies;
    a.total_rows = total_rows;
    a.local_pitch = (int64_t)local_pitch;
    a.pack = direction == DCP_A2A_PACK;
    a.local = (unsigned char *)local;
    a.message = (unsigned char *)message;
    a.tile_rows = 0, a.units_per_row = 0;
    if (a.count == 0) return dcp_error_clear(error); /* pack of a list with no copies */
    all = (uintptr_t)local | (uintptr_t)message | (uintptr_t)slice_bytes | (uintptr_t)local_pitch;
    if (all % DCP_CUDA__A2A_WIDEST == 0) return dcp_cuda__a2a_launch<uint4>(a, slice_bytes, s, error);
    if (all % sizeof(uint2) == 0) return dcp_cuda__a2a_launch<uint2>(a, slice_bytes, s, error);
    if (all % sizeof(uint32_t) == 0)
        return dcp_cuda__a2a_launch<uint32_t>(a, slice_bytes, s, error);
    if (all % sizeof(uint16_t) == 0)
        return dcp_cuda__a2a_launch<uint16_t>(a, slice_bytes, s, error);
    return dcp_cuda__a2a_launch<uint8_t>(a, slice_bytes, s, error);
}

/* ================================================================================== MTP roll
   The device side of dcp.h's "MTP roll" (dcp_mtp_roll_gather / dcp_mtp_roll_shift are the CPU
   contracts). Design. Elements are opaque: element_size bytes moved as Word-sized pieces, Word
   the widest of 16, 8, 4, 2, 1 bytes that divides the element size and the alignment of every
   pointer (int64 ids: one 8-byte word per row; a float loss mask: one 4-byte word). gather:
   one thread per (half, sequence, word) -- 2n elements, a few hundred bytes. shift: a
   grid-stride loop over (row, word) of the local buffer, so consecutive threads read and
   write consecutive words of consecutive rows (coalesced); a thread finds its row's sequence
   and position (dcp_cuda__row_info: binary search in cu_seqlens_padded, then the zigzag map)
   and copies one word from where the CPU reference takes it -- the next row, the rank's own
   second half (rank c-1's first-half end), the received slot, the row itself for padding --
   or writes 0 on the last valid position (the fill). Every output word is written once and
   out is never read, so the kernel needs no synchronisation; the grid covers local rows, not
   max_seqlen x sequences. */

#define DCP_CUDA__ROLL_THREADS 256
#define DCP_CUDA__ROLL_MAX_BLOCKS 65536
#define DCP_CUDA__ROLL_MAX_WORD 16 /* bytes: uint4 */

struct dcp_cuda__roll_args {
    const int32_t *cu_seqlens, *cu_seqlens_padded;
    int32_t num_sequences, cp, rank;
    int64_t rows;          /* local rows */
    int64_t words;         /* words per element */
    const void *in, *received;
    void *out, *boundaries;
};

template <typename Word>
__global__ void __launch_bounds__(DCP_CUDA__ROLL_THREADS)
    dcp_cuda__roll_gather_kernel(dcp_cuda__roll_args a)
{
    const Word *in = (const Word *)a.in;
    Word *boundaries = (Word *)a.boundaries;
    const int64_t total = (int64_t)DCP_MTP_ROLL_HALVES * a.num_sequences * a.words;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        const int64_t slot = t / a.words, word = t % a.words;
        const int32_t half = (int32_t)(slot / a.num_sequences);
        const int32_t seq = (int32_t)(slot % a.num_sequences);
        const int64_t padded = (int64_t)a.cu_seqlens_padded[seq + 1] - a.cu_seqlens_padded[seq];
        const int64_t row = a.cu_seqlens_padded[seq] / a.cp +
                            half * (padded / ((int64_t)a.cp * DCP_MTP_ROLL_HALVES));
        if (row >= 0 && row < a.rows)
            dcp_cuda__vstore(boundaries + t, dcp_cuda__vload(in + row * a.words + word));
    }
}

/* The row (or received slot, as -2 - slot) that output row `row` copies, or -1 for the fill. */
__device__ __forceinline__ int64_t dcp_cuda__roll_source(const dcp_cuda__roll_args &a,
                                                          int64_t row)
{
    const dcp_cuda__row info = dcp_cuda__row_info(a.cu_seqlens, a.cu_seqlens_padded,
                                                  a.num_sequences, a.cp, a.rank, row);
    if (info.seq < 0 || info.position < 0) return row; /* padding stays padding */
    const int64_t valid = (int64_t)a.cu_seqlens[info.seq + 1] - a.cu_seqlens[info.seq];
    if (info.position == valid - 1) return -1;
    const int32_t halves = a.cp > 1 ? DCP_MTP_ROLL_HALVES : 1;
    const int64_t half_rows = info.rows / halves, local = row - info.offset;
    const int64_t half = local / half_rows;
    if (local % half_rows + 1 < half_rows) return row + 1;
    if (half == 0 && a.rank == a.cp - 1) return info.offset + half_rows; /* chunk c is ours */
    return -2 - (half * a.num_sequences + info.seq);
}

template <typename Word>
__global__ void __launch_bounds__(DCP_CUDA__ROLL_THREADS)
    dcp_cuda__roll_shift_kernel(dcp_cuda__roll_args a)
{
    const Word *in = (const Word *)a.in, *received = (const Word *)a.received;
    Word *out = (Word *)a.out;
    const int64_t total = a.rows * a.words, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        const int64_t row = t / a.words, word = t % a.words;
        const int64_t source = dcp_cuda__roll_source(a, row);
        Word value = Word(); /* the fill: zero bytes */
        if (source >= 0) {
            if (source >= a.rows) continue; /* device arrays disagree with the host sizes */
            value = dcp_cuda__vload(in + source * a.words + word);
        } else if (source < -1) {
            if (!received) continue; /* the caller fills it (the CPU reference's contract) */
            value = dcp_cuda__vload(received + (-2 - source) * a.words + word);
        }
        dcp_cuda__vstore(out + t, value);
    }
}

/* The widest word that divides the element size and every given pointer's address. */
static int dcp_cuda__roll_word(size_t element_size, const void *a, const void *b, const void *c)
{
    int word;
    for (word = DCP_CUDA__ROLL_MAX_WORD; word > 1; word /= 2)
        if (element_size % (size_t)word == 0 && (uintptr_t)a % word == 0 &&
            (uintptr_t)b % word == 0 && (uintptr_t)c % word == 0)
            break;
    return word;
}

typedef void (*dcp_cuda__roll_kernel)(dcp_cuda__roll_args);
template <typename Word> struct dcp_cuda__roll_gather_of {
    static dcp_cuda__roll_kernel kernel() { return dcp_cuda__roll_gather_kernel<Word>; }
};
template <typename Word> struct dcp_cuda__roll_shift_of {
    static dcp_cuda__roll_kernel kernel() { return dcp_cuda__roll_shift_kernel<Word>; }
};

/* One launch of Kernel<Word> for `items` words of work, Word picked from `word` bytes. */
template <template <typename> class Kernel>
static dcp_status dcp_cuda__roll_launch(dcp_cuda__roll_args a, size_t element_size, int word,
                                        int64_t items_per_word, cudaStream_t s, dcp_error *error)
{
    a.words = (int64_t)(element_size / (size_t)word);
    const int64_t items = items_per_word * a.words;
    const int64_t blocks = (items + DCP_CUDA__ROLL_THREADS - 1) / DCP_CUDA__ROLL_THREADS;
    const unsigned grid =
        (unsigned)(blocks < DCP_CUDA__ROLL_MAX_BLOCKS ? blocks : DCP_CUDA__ROLL_MAX_BLOCKS);
    if (items == 0) return dcp_error_clear(error);
    const dcp_cuda__roll_kernel kernel = word == 16  ? Kernel<uint4>::kernel()
                                         : word == 8 ? Kernel<uint2>::kernel()
                                         : word == 4 ? Kernel<uint32_t>::kernel()
                                         : word == 2 ? Kernel<uint16_t>::kernel()
                                                     : Kernel<uint8_t>::kernel();
    DCP_CUDA_CHECK(dcp_cuda__launch(kernel, grid, DCP_CUDA__ROLL_THREADS, 0, s, a));
    return dcp_error_clear(error);
}

/* The host checks of both entry points; fills the arguments the kernels share. */
static dcp_status dcp_cuda__roll_check(const dcp_cuda_layout *layout, int32_t rank,
                                       size_t element_size, const void *in,
                                       dcp_cuda__roll_args *a, dcp_error *error)
{
    dcp_status status;
    if ((status = dcp_cuda__check_layout(layout, error)) != DCP_OK) return status;
    if ((status = dcp_check_rank("rank", rank, layout->thd.cp, error)) != DCP_OK) return status;
    if (element_size == 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "element_size must be > 0");
    if ((status = dcp_cuda__check_elements("in", layout->local_rows, 1, element_size, error)) !=
            DCP_OK ||
        (status = dcp_cuda__check_elements("boundaries",
                                           (int64_t)layout->thd.num_sequences *
                                               DCP_MTP_ROLL_HALVES,
                                           1, element_size, error)) != DCP_OK)
        return status;
    if (layout->local_rows > 0 && !in)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "in must not be NULL");
    memset(a, 0, sizeof *a);
    a->cu_seqlens = layout->thd.cu_seqlens;
    a->cu_seqlens_padded = layout->thd.cu_seqlens_padded;
    a->num_sequences = layout->thd.num_sequences;
    a->cp = layout->thd.cp;
    a->rank = rank;
    a->rows = layout->local_rows;
    a->in = in;
    return DCP_OK;
}

extern "C" dcp_status dcp_cuda_mtp_roll_gather(const dcp_cuda_layout *layout, int32_t rank,
                                               size_t element_size, const void *in,
                                               void *boundaries, void *stream, dcp_error *error)
{
    dcp_cuda__roll_args a;
    dcp_status status = dcp_cuda__roll_check(layout, rank, element_size, in, &a, error);
    if (status != DCP_OK) return status;
    if (layout->thd.cp == 1 || layout->thd.num_sequences == 0) return dcp_error_clear(error);
    if (!boundaries)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "boundaries must not be NULL");
    a.boundaries = boundaries;
    return dcp_cuda__roll_launch<dcp_cuda__roll_gather_of>(
        a, element_size, dcp_cuda__roll_word(element_size, in, boundaries, NULL),
        (int64_t)DCP_MTP_ROLL_HALVES * layout->thd.num_sequences, (cudaStream_t)stream, error);
}

extern "C" dcp_status dcp_cuda_mtp_roll_shift(const dcp_cuda_layout *layout, int32_t rank,
                                              size_t element_size, const void *in,
                                              const void *received, void *out, void *stream,
                                              dcp_error *error)
{
    dcp_cuda__roll_args a;
    size_t bytes;
    dcp_status status = dcp_cuda__roll_check(layout, rank, element_size, in, &a, error);
    if (status != DCP_OK) return status;
    if (layout->local_rows == 0) return dcp_error_clear(error);
    if (!out) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "out must not be NULL");
    bytes = (size_t)layout->local_rows * element_size;
    if ((const unsigned char *)in < (unsigned char *)out + bytes &&
        (unsigned char *)out < (const unsigned char *)in + bytes)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "out overlaps in (%lld rows of %zu bytes): the roll is out of place",
                             (long long)layout->local_rows, element_size);
    a.received = received;
    a.out = out;
    return dcp_cuda__roll_launch<dcp_cuda__roll_shift_of>(
        a, element_size, dcp_cuda__roll_word(element_size, in, out, received), layout->local_rows,
        (cudaStream_t)stream, error);
}

/* ========================================================== attention on Hopper (sm_90a)
   FlashAttention-3's forward on Hopper's own instructions, in the build order of issue 19,
   each step testable on its own: (1) 128-byte swizzled shared tiles and wgmma matrix
   descriptors as host-testable functions, with the wgmma wrappers a standalone product test
   runs (tests/test_wgmma.cu); (2) the forward with cp.async feeding wgmma (this section);
   then TMA, warp specialisation and the overlaps (bench/ATTENTION_NOTES.md, versions H1..).
   Only sm_90a code may execute wgmma: the wrappers exist only when the device pass compiles
   for it (__CUDA_ARCH_FEAT_SM90_ALL, which nvcc defines for compute_90a); the kernel keeps
   its symbol in every pass (the host stub needs it) with a trapping body elsewhere, and the
   host launches it only where dcp_cuda__sm90_available says the device runs its sm_90a code.
   NOTHING HERE HAS RUN ON A GPU YET: dcp_cuda_attention_forward keeps the mma.sync kernels
   (DCP_CUDA__AUTO_PREFERS_WGMMA) until tests/test_wgmma.cu and the wgmma runs of
   tests/test_cuda_attention.cu pass on an H100. */

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DCP_CUDA__SM90A 1
#endif

#define DCP_CUDA__WARPGROUP_THREADS 128      /* four warps issue one wgmma together */
#define DCP_CUDA__SM90_MAX_SMEM (227 * 1024) /* dynamic shared memory per block on H100/H200 */

/* ------------------------------------------------ sm_90a: swizzled tiles and descriptors
   A tile of 16-bit elements is stored in column blocks of 64 elements (128 bytes a row);
   eight rows of a block make a 1024-byte atom in which the 16-byte chunk c of row r sits at
   chunk c ^ r (CUTLASS's Swizzle<3,4,3>: address bits [4, 7) ^= bits [7, 10)). The eight
   rows of one 16-byte column then lie in eight distinct bank groups, for the cp.async writes
   and for wgmma's reads; the hardware applies the XOR to the absolute shared address, so
   every tile starts 1024-byte aligned. Host and device: tests/test_wgmma.cu checks the
   mapping on the CPU. */
struct dcp_cuda__sw128 {
    static constexpr uint32_t ROW_BYTES = 128;
    static constexpr uint32_t ATOM_ROWS = 8;
    static constexpr uint32_t ATOM_BYTES = ROW_BYTES * ATOM_ROWS;
    static constexpr uint32_t CHUNK_BYTES = 16;
    static constexpr uint32_t ELEMENT_BYTES = 2;                   /* bf16, fp16 */
    static constexpr uint32_t BLOCK_COLS = ROW_BYTES / ELEMENT_BYTES; /* columns of a block */

    /* The swizzled place of byte `offset` from a 1024-byte aligned base. */
    __host__ __device__ static constexpr uint32_t swizzle(uint32_t offset)
    {
        return offset ^ (((offset / ROW_BYTES) % ATOM_ROWS) * CHUNK_BYTES);
    }
    /* Byte offset of element (row, col) of a tile of `rows` rows (a multiple of ATOM_ROWS). */
    __host__ __device__ static constexpr uint32_t offset(uint32_t row, uint32_t col,
                                                         uint32_t rows)
    {
        return swizzle((col / BLOCK_COLS) * rows * ROW_BYTES + row * ROW_BYTES +
                       (col % BLOCK_COLS) * ELEMENT_BYTES);
    }
};

/* The wgmma shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): bits
   [0, 14) start address >> 4, [16, 30) leading dimension byte offset >> 4, [32, 46) stride
   dimension byte offset >> 4, [49, 52) base offset (0 here: tiles are atom-aligned), [62, 64)
   the swizzle mode. Addresses and offsets are in 16-byte units of the 256 KB shared window. */
struct dcp_cuda__gmma_desc {
    static constexpr uint32_t SWIZZLE_NONE = 0, SWIZZLE_128B = 1, SWIZZLE_64B = 2,
                              SWIZZLE_32B = 3;
    static constexpr uint32_t UNIT = 16;
    static constexpr uint32_t FIELD_BITS = 14;
    static constexpr uint64_t FIELD_MASK = (1u << FIELD_BITS) - 1;
    static constexpr uint32_t LIMIT = (1u << FIELD_BITS) * UNIT; /* first unencodable byte */
    static constexpr int LEADING_SHIFT = 16, STRIDE_SHIFT = 32, MODE_SHIFT = 62;
    static constexpr uint64_t MODE_MASK = 3;

    /* True when bytes fits a field: a multiple of 16 below 256 KB. */
    __host__ __device__ static constexpr bool encodable(uint32_t bytes)
    {
        return bytes % UNIT == 0 && bytes < LIMIT;
    }
    __host__ __device__ static constexpr uint64_t encode(uint32_t address, uint32_t leading,
                                                        uint32_t stride, uint32_t mode)
    {
        return ((uint64_t)(address / UNIT) & FIELD_MASK) |
               (((uint64_t)(leading / UNIT) & FIELD_MASK) << LEADING_SHIFT) |
               (((uint64_t)(stride / UNIT) & FIELD_MASK) << STRIDE_SHIFT) |
               (((uint64_t)mode & MODE_MASK) << MODE_SHIFT);
    }
    __host__ __device__ static constexpr uint32_t address(uint64_t d)
    {
        return (uint32_t)(d & FIELD_MASK) * UNIT;
    }
    __host__ __device__ static constexpr uint32_t leading(uint64_t d)
    {
        return (uint32_t)((d >> LEADING_SHIFT) & FIELD_MASK) * UNIT;
    }
    __host__ __device__ static constexpr uint32_t stride(uint64_t d)
    {
        return (uint32_t)((d >> STRIDE_SHIFT) & FIELD_MASK) * UNIT;
    }
    __host__ __device__ static constexpr uint32_t mode(uint64_t d)
    {
        return (uint32_t)((d >> MODE_SHIFT) & MODE_MASK);
    }
};

/* Rows of the reduced dimension k one wgmma consumes (m64nNk16 for 16-bit inputs). */
#define DCP_CUDA__WGMMA_K 16

/* K-major operand (the reduced dimension contiguous: Q as A, K as B of S = Q K^T): the k step
   kc of rows [row0, ..) of a swizzled tile of `rows` rows. A k step is 32 bytes inside a row,
   so step kc starts in column block kc / 4 at byte (kc % 4) x 32; the stride offset is the
   distance between 8-row atoms; the leading offset is unused with a swizzle (16 by
   convention). */
__host__ __device__ constexpr uint64_t dcp_cuda__desc_kmajor(uint32_t tile, uint32_t rows,
                                                             uint32_t row0, uint32_t kc)
{
    return dcp_cuda__gmma_desc::encode(
        tile + dcp_cuda__sw128::offset(row0, kc * DCP_CUDA__WGMMA_K, rows),
        dcp_cuda__gmma_desc::UNIT, dcp_cuda__sw128::ATOM_BYTES,
        dcp_cuda__gmma_desc::SWIZZLE_128B);
}

/* MN-major operand (the output dimension contiguous: V as B of O = P V, read transposed):
   the k step kc is rows [16 kc, 16 kc + 16) of a swizzled tile of `rows` rows; the leading
   offset is the distance between 64-column blocks (along N), the stride offset the distance
   between 8-row atoms (along k). */
__host__ __device__ constexpr uint64_t dcp_cuda__desc_mnmajor(uint32_t tile, uint32_t rows,
                                                              uint32_t kc)
{
    return dcp_cuda__gmma_desc::encode(
        tile + dcp_cuda__sw128::offset(kc * DCP_CUDA__WGMMA_K, 0, rows),
        rows * dcp_cuda__sw128::ROW_BYTES, dcp_cuda__sw128::ATOM_BYTES,
        dcp_cuda__gmma_desc::SWIZZLE_128B);
}

/* Rows [first, first + ROWS) of a view into a swizzled tile: the contract of
   dcp_cuda__load_tile (rows at or past `valid` zero-filled by cp.async, never read). Thread i
   copies 16-byte chunk i % (D / 8) of every ROWS_PER_PASS-th row; ROWS_PER_PASS is a whole
   number of atoms, so the chunk's swizzled place is the same in every pass and the thread's
   addresses are one base plus constants. */
template <typename T, int D, int ROWS, int THREADS>
__device__ __forceinline__ void dcp_cuda__load_tile_sw128(unsigned char *tile,
                                                          const T *head_base, int64_t row_stride,
                                                          int64_t offset, int64_t first,
                                                          int64_t valid)
{
    using L = dcp_cuda__sw128;
    constexpr int CHUNK = L::CHUNK_BYTES / sizeof(T), CHUNKS = D / CHUNK;
    constexpr int ROWS_PER_PASS = THREADS / CHUNKS;
    static_assert(sizeof(T) == L::ELEMENT_BYTES, "16-bit elements");
    static_assert(THREADS % CHUNKS == 0 && ROWS % ROWS_PER_PASS == 0 &&
                      ROWS_PER_PASS % L::ATOM_ROWS == 0,
                  "every pass covers whole atoms with every thread");
    const int row = threadIdx.x / CHUNKS, column = (threadIdx.x % CHUNKS) * CHUNK;
    const int64_t rows_left = valid - first - row;
    const T *src = head_base + (offset + first + row) * row_stride + column;
    unsigned char *dst = tile + L::offset(row, column, ROWS);
#pragma unroll
    for (int pass = 0; pass < ROWS / ROWS_PER_PASS; pass++) {
        const bool ok = pass * ROWS_PER_PASS < rows_left;
        dcp_cuda__cp_async16(dst + pass * ROWS_PER_PASS * L::ROW_BYTES,
                             ok ? src + pass * ROWS_PER_PASS * row_stride : head_base,
                             ok ? 16 : 0);
    }
}

/* The A fragment (64 x 16 over the warpgroup, registers as mma.sync's m16n8k16 A per warp) of
   the k step kc from float accumulators of an earlier wgmma (N/8 blocks of 4; the C layout of
   one is the A layout of the next), rounded to T: P of O += P V. */
template <typename T, int N>
__device__ __forceinline__ void dcp_cuda__a_from_accumulators(uint32_t (&a)[4],
                                                              const float (&c)[N][4], int kc)
{
    a[0] = dcp_cuda__pack2<T>(c[2 * kc][0], c[2 * kc][1]);
    a[1] = dcp_cuda__pack2<T>(c[2 * kc][2], c[2 * kc][3]);
    a[2] = dcp_cuda__pack2<T>(c[2 * kc + 1][0], c[2 * kc + 1][1]);
    a[3] = dcp_cuda__pack2<T>(c[2 * kc + 1][2], c[2 * kc + 1][3]);
}

/* ------------------------------------------------------------ sm_90a: wgmma primitives
   The asynchronous warpgroup product and its fences (PTX ISA 9.7.15): fence before the first
   wgmma that touches registers other instructions wrote, commit the issued ones as a group,
   wait until at most N groups are pending before their accumulators are read. The operand
   fences keep the compiler from moving accesses of the accumulators into that window. */
#ifdef DCP_CUDA__SM90A
__device__ __forceinline__ void dcp_cuda__wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void dcp_cuda__wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void dcp_cuda__wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Shared-memory writes of the generic proxy (cp.async, st.shared) made visible to the async
   proxy wgmma reads through; each writer fences before the barrier that publishes them. */
__device__ __forceinline__ void dcp_cuda__fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
template <int R>
__device__ __forceinline__ void dcp_cuda__fence_operands(float (&x)[R][4])
{
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int c = 0; c < 4; c++) asm volatile("" : "+f"(x[r][c])::"memory");
}

/* m64nNk16, float32 accumulators d (N / 8 blocks of 4: per warp the m16n8 C layout, warp w
   of the warpgroup rows 16 w ..). ss: A and B K-major in shared memory (descriptors); rs: A
   from registers, B MN-major (transposed) in shared memory. accumulate 0: d = A B. */
template <typename T, int N> struct dcp_cuda__wgmma;

#define DCP_CUDA__ACC4(d, n) "+f"(d[n][0]), "+f"(d[n][1]), "+f"(d[n][2]), "+f"(d[n][3])
#define DCP_CUDA__ACC32(d, n)                                                                  \
    DCP_CUDA__ACC4(d, (n)), DCP_CUDA__ACC4(d, (n) + 1), DCP_CUDA__ACC4(d, (n) + 2),            \
        DCP_CUDA__ACC4(d, (n) + 3), DCP_CUDA__ACC4(d, (n) + 4), DCP_CUDA__ACC4(d, (n) + 5),    \
        DCP_CUDA__ACC4(d, (n) + 6), DCP_CUDA__ACC4(d, (n) + 7)
#define DCP_CUDA__REGS32                                                                       \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "   \
    "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define DCP_CUDA__REGS64                                                                       \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "   \
    "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "    \
    "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "    \
    "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
/* scale-d is a predicate: set from the accumulate flag inside the statement. Immediates:
   scale-a 1, scale-b 1, then transpose-a 0 / transpose-b 0 (ss, both K-major) or
   transpose-b 1 (rs, B MN-major). */
#define DCP_CUDA__WGMMA_SPECIALISE(T, PTX)                                                     \
    template <> struct dcp_cuda__wgmma<T, 128> {                                               \
        static __device__ __forceinline__ void ss(float (&d)[16][4], uint64_t a, uint64_t b,   \
                                                  int accumulate)                              \
        {                                                                                      \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                          \
                         "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX "." PTX " "        \
                         DCP_CUDA__REGS64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"                    \
                         : DCP_CUDA__ACC32(d, 0), DCP_CUDA__ACC32(d, 8)                        \
                         : "l"(a), "l"(b), "r"(accumulate));                                   \
        }                                                                                      \
        static __device__ __forceinline__ void rs(float (&d)[16][4], const uint32_t (&a)[4],   \
                                                  uint64_t b, int accumulate)                  \
        {                                                                                      \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                          \
                         "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX "." PTX " "        \
                         DCP_CUDA__REGS64 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"      \
                         : DCP_CUDA__ACC32(d, 0), DCP_CUDA__ACC32(d, 8)                        \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),                 \
                           "r"(accumulate));                                                   \
        }                                                                                      \
    };                                                                                         \
    template <> struct dcp_cuda__wgmma<T, 64> {                                                \
        static __device__ __forceinline__ void rs(float (&d)[8][4], const uint32_t (&a)[4],    \
                                                  uint64_t b, int accumulate)                  \
        {                                                                                      \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                          \
                         "wgmma.mma_async.sync.aligned.m64n64k16.f32." PTX "." PTX " "         \
                         DCP_CUDA__REGS32 ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"      \
                         : DCP_CUDA__ACC32(d, 0)                                               \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),                 \
                           "r"(accumulate));                                                   \
        }                                                                                      \
    };
DCP_CUDA__WGMMA_SPECIALISE(__nv_bfloat16, "bf16")
DCP_CUDA__WGMMA_SPECIALISE(__half, "f16")
#undef DCP_CUDA__WGMMA_SPECIALISE
#undef DCP_CUDA__REGS64
#undef DCP_CUDA__REGS32
#undef DCP_CUDA__ACC32
#undef DCP_CUDA__ACC4

/* Barrier over the threads of warpgroup wg (0 or 1) only: named barriers 1 and 2 (0 is
   __syncthreads); immediate ids, so that ptxas reserves 3 barriers, not all 16. */
__device__ __forceinline__ void dcp_cuda__warpgroup_sync(int wg)
{
    if (wg == 0)
        asm volatile("bar.sync 1, %0;\n" ::"n"(DCP_CUDA__WARPGROUP_THREADS) : "memory");
    else
        asm volatile("bar.sync 2, %0;\n" ::"n"(DCP_CUDA__WARPGROUP_THREADS) : "memory");
}
#endif /* DCP_CUDA__SM90A */

/* -------------------------------------------------- sm_90a: attention forward (version H1)
   Design (FlashAttention-3's consumer math, fed by cp.async for now). A block of two
   warpgroups owns one schedule entry: 128 rows of one sequence's q view (the schedule in
   tiles of 128 rows), for one query head (grid.y); warpgroup w owns rows 64 w .. 64 w + 63,
   the M of wgmma. Q (loaded once) and the K and V tiles (128 keys, two stages: the copy of
   tile i + 1 overlaps the math of tile i) live in 128-byte swizzled shared tiles, copied by
   all 256 threads with cp.async (rows past the view's valid keys zero-filled, never read).
   Per key tile and warpgroup: S = Q K^T by wgmma m64n128k16 with both operands in shared
   memory (K-major descriptors, D / 16 k steps), the mask and online softmax of the mma.sync
   forward on the accumulators (the wgmma C layout is, per warp, the m16n8 C layout of
   mma.sync, so dcp_cuda__mask_keys and dcp_cuda__softmax_update serve unchanged), P rounded
   to T as the register A operand of O += P V by wgmma m64nDk16 with V MN-major (transposed
   descriptor, no ldmatrix.trans). Same semantics as the mma.sync forward: key limits by
   global position per row (varlen THD, ring-step views, causal zigzag), GQA by head / group,
   rows with no visible key get 0 and LSE -inf, rows outside the q view are not touched. The
   output is staged in shared memory (the K/V buffers, free after the loop) and stored with
   16-byte writes. Both warpgroups walk the same key tiles (the block's bound): on a causal
   diagonal the first warpgroup computes a masked tile it could skip, which the warp-
   specialised version removes. */

template <int D> struct dcp_cuda__attn_sm90_traits {
    using L = dcp_cuda__sw128;
    static constexpr int HEAD_DIM = D;
    static constexpr int WARPGROUPS = 2;
    static constexpr int WARPGROUP_ROWS = 64; /* the M of wgmma */
    static constexpr int WARP_ROWS = 16;      /* rows of one warp in the C layout */
    static constexpr int TILE_ROWS = WARPGROUPS * WARPGROUP_ROWS;
    static constexpr int TILE_KEYS = 128; /* the N of S = Q K^T */
    static constexpr int THREADS = WARPGROUPS * DCP_CUDA__WARPGROUP_THREADS;
    static constexpr int STAGES = 2;
    static constexpr int KEY_BLOCKS = TILE_KEYS / 8; /* 8-column blocks of S */
    static constexpr int HEAD_BLOCKS = D / 8;        /* 8-column blocks of O */
    static constexpr uint32_t Q_BYTES = TILE_ROWS * D * L::ELEMENT_BYTES;
    static constexpr uint32_t KV_BYTES = TILE_KEYS * D * L::ELEMENT_BYTES;
    /* epilogue staging: a row of the widest output (float32) padded by one chunk */
    static constexpr uint32_t STAGE_ROW_BYTES = D * sizeof(float) + L::CHUNK_BYTES;
    /* Q, K and V stages, and room to align the start to an atom */
    static constexpr size_t SMEM = Q_BYTES + 2 * STAGES * KV_BYTES + L::ATOM_BYTES;
    static_assert(D % L::BLOCK_COLS == 0, "whole 64-column swizzle blocks");
    static_assert(DCP_CUDA__WARPGROUP_THREADS / DCP_CUDA__WARP_SIZE * WARP_ROWS == WARPGROUP_ROWS,
                  "four warps of 16 rows make the 64 rows of a wgmma");
    static_assert(D % DCP_CUDA__WGMMA_K == 0 && TILE_KEYS % DCP_CUDA__WGMMA_K == 0,
                  "whole k steps in both products");
    static_assert(TILE_ROWS % L::ATOM_ROWS == 0 && TILE_KEYS % L::ATOM_ROWS == 0,
                  "tiles are whole swizzle atoms");
    static_assert(SMEM <= DCP_CUDA__SM90_MAX_SMEM, "fits one block's shared memory");
    static_assert(WARPGROUPS == 2, "dcp_cuda__warpgroup_sync names two barriers");
    static_assert(TILE_ROWS * STAGE_ROW_BYTES <= 2 * STAGES * KV_BYTES,
                  "the output staging fits in the K and V buffers");
};

/* The key tiles (of tile_keys view rows) the q rows [q0, q0 + rows) see: up to the limit of
   their last valid row, the largest (limits grow with the row); 0 for a tile of no valid
   row. */
__device__ __forceinline__ int32_t dcp_cuda__key_tiles(const dcp_cuda__attn_args &a,
                                                       const dcp_cuda__seq_view &s, int64_t q0,
                                                       int rows, int tile_keys)
{
    const int64_t last = (q0 + rows < s.q_valid ? q0 + rows : s.q_valid) - 1;
    const int64_t stop = last >= q0 ? dcp_cuda__key_limit(a, s, last) : 0;
    return stop > s.k_begin ? (int32_t)((stop - s.k_begin + tile_keys - 1) / tile_keys) : 0;
}

#ifdef DCP_CUDA__SM90A
/* Normalise warpgroup wg's 64 output rows and store them through shared memory: each lane
   puts its accumulator pairs into `stage` ([64] rows of D OUT, padded), then the warpgroup
   copies whole rows out with 16-byte writes, skipping rows outside the q view. The lane
   holding a row's first columns writes its natural-log LSE (-inf when no key was visible). */
template <typename OUT, typename T, int D>
__device__ __forceinline__ void dcp_cuda__sm90_store_rows(
    const dcp_cuda__attn_args &a, const dcp_cuda__seq_view &s, int32_t head, int64_t wg_q0,
    int wg, unsigned char *stage, const float (&o)[D / 8][4], const float (&row_max)[2],
    const float (&row_sum)[2])
{
    using K = dcp_cuda__attn_sm90_traits<D>;
    constexpr float LN2 = 0.69314718055994531f;
    constexpr int CHUNK = dcp_cuda__sw128::CHUNK_BYTES;
    constexpr int ROW_CHUNKS = D * (int)sizeof(OUT) / CHUNK;
    const int wtid = threadIdx.x % DCP_CUDA__WARPGROUP_THREADS, lane = threadIdx.x & 31;
    const int first_row = (wtid / DCP_CUDA__WARP_SIZE) * K::WARP_ROWS + (lane >> 2), t = lane & 3;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = first_row + 8 * half;
        float sum = row_sum[half];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1); /* the four lanes of a row */
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        OUT *row = reinterpret_cast<OUT *>(stage + r * K::STAGE_ROW_BYTES) + 2 * t;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            const float x = o[n][2 * half] * inv, y = o[n][2 * half + 1] * inv;
            if (sizeof(OUT) == sizeof(float))
                *reinterpret_cast<float2 *>(row + 8 * n) = make_float2(x, y);
            else
                *reinterpret_cast<uint32_t *>(row + 8 * n) = dcp_cuda__pack2<T>(x, y);
        }
        if (t == 0 && wg_q0 + r < s.q_end)
            a.lse_out[(int64_t)head * a.rows + s.offset + wg_q0 + r] =
                sum > 0.0f ? (row_max[half] * a.scale_log2 + log2f(sum)) * LN2 : -INFINITY;
    }
    dcp_cuda__warpgroup_sync(wg);
    for (int i = wtid; i < K::WARPGROUP_ROWS * ROW_CHUNKS; i += DCP_CUDA__WARPGROUP_THREADS) {
        const int r = i / ROW_CHUNKS, c = i % ROW_CHUNKS;
        if (wg_q0 + r >= s.q_end) continue;
        const int64_t element = ((s.offset + wg_q0 + r) * a.heads + head) * D;
        *reinterpret_cast<uint4 *>(reinterpret_cast<unsigned char *>(static_cast<OUT *>(a.o) +
                                                                     element) +
                                   c * CHUNK) =
            *reinterpret_cast<const uint4 *>(stage + r * K::STAGE_ROW_BYTES + c * CHUNK);
    }
}
#endif

template <typename T, int D>
__global__ void __launch_bounds__(dcp_cuda__attn_sm90_traits<D>::THREADS, 1)
    dcp_cuda__attn_forward_sm90_kernel(const dcp_cuda__attn_args a)
{
#ifdef DCP_CUDA__SM90A
    using K = dcp_cuda__attn_sm90_traits<D>;
    using L = dcp_cuda__sw128;
    /* dynamic shared memory is 16-byte aligned; the swizzle needs atoms */
    unsigned char *base = reinterpret_cast<unsigned char *>(
        (reinterpret_cast<uintptr_t>(dcp_cuda__smem) + L::ATOM_BYTES - 1) &
        ~(uintptr_t)(L::ATOM_BYTES - 1));
    unsigned char *sq = base, *sk = sq + K::Q_BYTES, *sv = sk + K::STAGES * K::KV_BYTES;
    if ((int32_t)blockIdx.x >= *a.count) return;
    const int2 entry = dcp_cuda__vload(a.entries + blockIdx.x);
    const dcp_cuda__seq_view s = dcp_cuda__seq_of(a, entry.x);
    const int64_t q0 = s.q_begin + (int64_t)entry.y * K::TILE_ROWS;
    const int32_t head = blockIdx.y;
    const int wg = threadIdx.x / DCP_CUDA__WARPGROUP_THREADS;
    const int warp = (threadIdx.x % DCP_CUDA__WARPGROUP_THREADS) / DCP_CUDA__WARP_SIZE,
              g = (threadIdx.x % DCP_CUDA__WARP_SIZE) >> 2;
    const int64_t kv_stride = (int64_t)a.kv_heads * D, kv_column = (int64_t)(head / a.group) * D;
    const int32_t tiles = dcp_cuda__key_tiles(a, s, q0, K::TILE_ROWS, K::TILE_KEYS);

    dcp_cuda__load_tile_sw128<T, D, K::TILE_ROWS, K::THREADS>(
        sq, static_cast<const T *>(a.q) + (int64_t)head * D, (int64_t)a.heads * D, s.offset, q0,
        s.q_valid);
    dcp_cuda__cp_async_commit();
    auto load_kv = [&](int32_t tile, int stage) {
        const int64_t k0 = s.k_begin + (int64_t)tile * K::TILE_KEYS;
        dcp_cuda__load_tile_sw128<T, D, K::TILE_KEYS, K::THREADS>(
            sk + stage * K::KV_BYTES, static_cast<const T *>(a.k) + kv_column, kv_stride,
            s.offset, k0, s.k_valid);
        dcp_cuda__load_tile_sw128<T, D, K::TILE_KEYS, K::THREADS>(
            sv + stage * K::KV_BYTES, static_cast<const T *>(a.v) + kv_column, kv_stride,
            s.offset, k0, s.k_valid);
    };
    if (tiles > 0) load_kv(0, 0);
    dcp_cuda__cp_async_commit(); /* possibly empty: the group count stays uniform */

    /* this lane's two rows (g and g + 8 of its warp's 16) and their key limits; a tile needs
       the mask only where it reaches past the smallest limit of the warp's rows */
    const int64_t wg_q0 = q0 + wg * K::WARPGROUP_ROWS;
    const int64_t warp_q0 = wg_q0 + warp * K::WARP_ROWS;
    const int32_t limit[2] = {dcp_cuda__key_limit(a, s, warp_q0 + g),
                              dcp_cuda__key_limit(a, s, warp_q0 + g + 8)};
    const int32_t unmasked_end = dcp_cuda__warp_min(min(limit[0], limit[1]));
    float sc[K::KEY_BLOCKS][4], o[K::HEAD_BLOCKS][4];
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
    dcp_cuda__zero(sc);
    dcp_cuda__zero(o);
    const uint32_t q_address = dcp_cuda__smem_address(sq);
    const uint32_t k_address = dcp_cuda__smem_address(sk);
    const uint32_t v_address = dcp_cuda__smem_address(sv);

    for (int32_t tile = 0; tile < tiles; tile++) {
        const int stage = tile & 1;
        if (tile + 1 < tiles) load_kv(tile + 1, stage ^ 1);
        dcp_cuda__cp_async_commit();
        dcp_cuda__cp_async_wait<1>(); /* Q and tile `tile` have landed */
        dcp_cuda__fence_proxy_async();
        __syncthreads();
        const uint32_t ks = k_address + stage * K::KV_BYTES, vs = v_address + stage * K::KV_BYTES;

        /* S = Q K^T */
        dcp_cuda__fence_operands(sc);
        dcp_cuda__wgmma_fence();
#pragma unroll
        for (int kc = 0; kc < D / DCP_CUDA__WGMMA_K; kc++)
            dcp_cuda__wgmma<T, K::TILE_KEYS>::ss(
                sc, dcp_cuda__desc_kmajor(q_address, K::TILE_ROWS, wg * K::WARPGROUP_ROWS, kc),
                dcp_cuda__desc_kmajor(ks, K::TILE_KEYS, 0, kc), kc > 0);
        dcp_cuda__wgmma_commit();
        dcp_cuda__wgmma_wait<0>();
        dcp_cuda__fence_operands(sc);

        const int32_t k0 = (int32_t)(s.k_begin + (int64_t)tile * K::TILE_KEYS);
        if (k0 + K::TILE_KEYS > unmasked_end) /* a diagonal tile or the end of the keys */
            dcp_cuda__mask_keys(sc, k0, limit);
        dcp_cuda__softmax_update(sc, o, row_max, row_sum, a.scale_log2);

        /* O += P V, P from the S accumulators: every fragment converted before the fence, so
           that no wgmma waits for registers written after it (ptxas would insert a fence
           before each) */
        uint32_t pa[K::TILE_KEYS / DCP_CUDA__WGMMA_K][4];
#pragma unroll
        for (int kc = 0; kc < K::TILE_KEYS / DCP_CUDA__WGMMA_K; kc++)
            dcp_cuda__a_from_accumulators<T, K::KEY_BLOCKS>(pa[kc], sc, kc);
        dcp_cuda__fence_operands(o);
        dcp_cuda__wgmma_fence();
#pragma unroll
        for (int kc = 0; kc < K::TILE_KEYS / DCP_CUDA__WGMMA_K; kc++)
            dcp_cuda__wgmma<T, D>::rs(o, pa[kc], dcp_cuda__desc_mnmajor(vs, K::TILE_KEYS, kc), 1);
        dcp_cuda__wgmma_commit();
        dcp_cuda__wgmma_wait<0>();
        dcp_cuda__fence_operands(o);
        __syncthreads(); /* this stage is free for the copy two tiles ahead */
    }
    dcp_cuda__cp_async_wait<0>();
    __syncthreads(); /* every wgmma has read its last K and V: the staging may overwrite them */
    unsigned char *stage = sk + wg * K::WARPGROUP_ROWS * K::STAGE_ROW_BYTES;
    if (a.out_fp32)
        dcp_cuda__sm90_store_rows<float, T, D>(a, s, head, wg_q0, wg, stage, o, row_max,
                                               row_sum);
    else
        dcp_cuda__sm90_store_rows<T, T, D>(a, s, head, wg_q0, wg, stage, o, row_max, row_sum);
#else
    (void)a;
    __trap(); /* never launched: dcp_cuda__sm90_available is false for this binary */
#endif
}

/* ------------------------------------------------------------------ sm_90a: host side */

/* dcp_cuda_attention_forward's choice for DCP_CUDA_ATTENTION_PATH_AUTO: 0 (mma.sync) until the
   wgmma forward has passed tests/test_wgmma.cu and tests/test_cuda_attention.cu on an H100;
   then 1 (wgmma wherever dcp_cuda__sm90_available). */
#define DCP_CUDA__AUTO_PREFERS_WGMMA 0

/* 1 when the current device runs the sm_90a kernels: compute capability 9.0 and this build's
   kernel binary for it is sm_90 code (an sm_80-only build has none for a 9.0 device). No
   device, or any failing query: 0, with the runtime's error state cleared. */
static int dcp_cuda__sm90_available(void)
{
    int device = 0, major = 0, minor = 0;
    cudaFuncAttributes attributes;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) !=
            cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) !=
            cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    if (major != 9 || minor != 0) return 0;
    if (cudaFuncGetAttributes(&attributes, reinterpret_cast<const void *>(
                                               dcp_cuda__attn_forward_sm90_kernel<__nv_bfloat16, 64>)) !=
        cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return attributes.binaryVersion == 90;
}

extern "C" dcp_status dcp_cuda_attention_path_available(dcp_cuda_attention_path path,
                                                        int32_t *available, dcp_error *error)
{
    if (!available)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "available must not be NULL");
    switch (path) {
    case DCP_CUDA_ATTENTION_PATH_AUTO:
    case DCP_CUDA_ATTENTION_PATH_MMA_SYNC:
        *available = 1;
        return dcp_error_clear(error);
    case DCP_CUDA_ATTENTION_PATH_WGMMA:
        *available = dcp_cuda__sm90_available();
        return dcp_error_clear(error);
    }
    return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                         "path %d is not a dcp_cuda_attention_path", (int)path);
}

template <typename T, int D>
static dcp_status dcp_cuda__attn_forward_sm90_launch(dcp_cuda__attn_args a, int64_t capacity,
                                                     cudaStream_t s, dcp_error *error)
{
    using K = dcp_cuda__attn_sm90_traits<D>;
    DCP_CUDA_CHECK(dcp_cuda__launch(dcp_cuda__schedule_kernel<K::TILE_ROWS>, 1,
                                    DCP_CUDA__SCHEDULE_THREADS, 0, s, a, 0, (int32_t *)a.count,
                                    (int2 *)a.entries, capacity));
    DCP_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void *>(
                                            dcp_cuda__attn_forward_sm90_kernel<T, D>),
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)K::SMEM));
    DCP_CUDA_CHECK(dcp_cuda__launch(dcp_cuda__attn_forward_sm90_kernel<T, D>,
                                    dim3((unsigned)capacity, (unsigned)a.heads), K::THREADS,
                                    K::SMEM, s, a));
    return dcp_error_clear(error);
}

/* The wgmma forward of checked arguments (dcp_cuda_attention_forward_using did the checks). Its
   schedule has 128-row tiles: at most local_rows / 128 + num_sequences entries, fewer than
   the workspace holds for the 64-row schedule. */
static dcp_status dcp_cuda__attn_forward_sm90(const dcp_cuda__attn_args &a, int32_t head_dim,
                                              dcp_dtype dtype, const dcp_cuda_layout *layout,
                                              cudaStream_t s, dcp_error *error)
{
    const int64_t capacity = layout->local_rows / dcp_cuda__attn_sm90_traits<64>::TILE_ROWS +
                             layout->thd.num_sequences + 1;
    static_assert(dcp_cuda__attn_sm90_traits<64>::TILE_ROWS ==
                      dcp_cuda__attn_sm90_traits<128>::TILE_ROWS,
                  "one schedule tile for both head dims");
    if (dtype == DCP_DTYPE_BFLOAT16)
        return head_dim == 64
                   ? dcp_cuda__attn_forward_sm90_launch<__nv_bfloat16, 64>(a, capacity, s, error)
                   : dcp_cuda__attn_forward_sm90_launch<__nv_bfloat16, 128>(a, capacity, s,
                                                                            error);
    return head_dim == 64 ? dcp_cuda__attn_forward_sm90_launch<__half, 64>(a, capacity, s, error)
                          : dcp_cuda__attn_forward_sm90_launch<__half, 128>(a, capacity, s, error);
}

/* Which kernels a forward call runs: 1 wgmma, 0 mma.sync, -1 (with the error set) when the
   caller asked for wgmma where it cannot run. The wgmma epilogue writes 16-byte rows, so it
   needs out 16-byte aligned (AUTO falls back to mma.sync otherwise). */
static int dcp_cuda__forward_uses_wgmma(dcp_cuda_attention_path path, const void *out,
                                        dcp_error *error)
{
    if (path == DCP_CUDA_ATTENTION_PATH_MMA_SYNC ||
        (path == DCP_CUDA_ATTENTION_PATH_AUTO && !DCP_CUDA__AUTO_PREFERS_WGMMA))
        return 0;
    if (dcp_cuda__aligned(out, DCP_CUDA__VECTOR_BYTES) && dcp_cuda__sm90_available()) return 1;
    if (path == DCP_CUDA_ATTENTION_PATH_AUTO) return 0;
    dcp_error_set(error, DCP_ERROR_UNSUPPORTED,
                  "path DCP_CUDA_ATTENTION_PATH_WGMMA needs a device of compute capability 9.0, "
                  "dcp_cuda.cu built for sm_90a and out 16-byte aligned (out %p; "
                  "dcp_cuda_attention_path_available says whether the device qualifies)",
                  out);
    return -1;
}

extern "C" dcp_status dcp_cuda_attention_forward(const dcp_attention_params *params,
                                                 const dcp_cuda_layout *layout,
                                                 const dcp_attention_view *view, dcp_dtype dtype,
                                                 const void *q, const void *k, const void *v,
                                                 dcp_dtype out_dtype, void *out, float *lse,
                                                 void *workspace, size_t workspace_bytes,
                                                 void *stream, dcp_error *error)
{
    return dcp_cuda_attention_forward_using(DCP_CUDA_ATTENTION_PATH_AUTO, params, layout, view,
                                            dtype, q, k, v, out_dtype, out, lse, workspace,
                                            workspace_bytes, stream, error);
}

/* ---------------------------------------------- sm_90a: TMA tensor maps (host side, H2)
   The next version copies Q, K and V with cp.async.bulk.tensor (TMA) from a producer warp
   into an mbarrier ring. Its tensor maps, built here: a [rows, heads, head_dim] tensor of
   16-bit elements as a 3-D map (innermost first: head_dim, heads, rows), a box of one
   64-column swizzle block of one head and box_rows rows, written to shared memory with the
   128-byte swizzle (exactly the dcp_cuda__sw128 layout the wgmma descriptors read), rows
   past the tensor zero-filled. A box never crosses a head; it may cross a document, whose
   foreign rows the kernel masks (keys: the row limits) or does not store (queries) — and
   zeroes in shared memory for V's last tile, since P = 0 does not cancel a NaN padding row.
   The encoder comes from the driver through the runtime (cudaGetDriverEntryPointByVersion,
   the successor of the cudaGetDriverEntryPoint that CUDA 13 deprecates), so nothing links
   against libcuda; the geometry and its checks are separate and host-testable. Until the
   TMA kernel calls them only tests/test_wgmma.cu does, so they are not static (an unused
   static function is a compiler warning); the dcp_cuda__ prefix keeps them private. */
#include <cudaTypedefs.h> /* PFN_cuTensorMapEncodeTiled; cuda.h types only, no libcuda */

#define DCP_CUDA__TMA_RANK 3
#define DCP_CUDA__TMA_MAX_BOX 256                 /* elements per box dimension */
#define DCP_CUDA__TMA_STRIDE_LIMIT (1ull << 40)   /* global strides are below 2^40 bytes */
#define DCP_CUDA__TMA_DIM_LIMIT (1ull << 32)      /* global dimensions are at most 2^32 */
#define DCP_CUDA__TMA_ALIGN 16                    /* base address and strides */
#define DCP_CUDA__TMA_ENCODER_VERSION 12000       /* cuTensorMapEncodeTiled's ABI: CUDA 12.0 */

struct dcp_cuda__tma_geometry {
    cuuint64_t dims[DCP_CUDA__TMA_RANK];        /* head_dim, heads, rows */
    cuuint64_t strides[DCP_CUDA__TMA_RANK - 1]; /* bytes between heads, between rows */
    cuuint32_t box[DCP_CUDA__TMA_RANK];         /* 64 columns, 1 head, box_rows rows */
    cuuint32_t element_strides[DCP_CUDA__TMA_RANK];
};

/* The geometry of the map of base [rows, heads, head_dim] (16-bit elements) with boxes of
   box_rows rows, checked against cuTensorMapEncodeTiled's rules and the swizzle's: base
   16-byte aligned; head_dim whole 64-column blocks; box_rows whole 8-row atoms, at most 256;
   dimensions in [1, 2^32], strides below 2^40. */
dcp_status dcp_cuda__tma_geometry_of(const void *base, int64_t rows, int32_t heads,
                                     int32_t head_dim, int32_t box_rows,
                                     dcp_cuda__tma_geometry *g, dcp_error *error)
{
    using L = dcp_cuda__sw128;
    if (!base || !dcp_cuda__aligned(base, DCP_CUDA__TMA_ALIGN))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "TMA base %p must be non-NULL and %d-byte aligned", base,
                             DCP_CUDA__TMA_ALIGN);
    if (rows < 1 || (uint64_t)rows > DCP_CUDA__TMA_DIM_LIMIT || heads < 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "TMA rows %lld and heads %d must be in [1, 2^32]", (long long)rows,
                             (int)heads);
    if (head_dim < (int32_t)L::BLOCK_COLS || head_dim % (int32_t)L::BLOCK_COLS)
        return dcp_error_set(error, DCP_ERROR_UNSUPPORTED,
                             "TMA head_dim %d: whole %u-column swizzle blocks only", (int)head_dim,
                             L::BLOCK_COLS);
    if (box_rows < 1 || box_rows > DCP_CUDA__TMA_MAX_BOX || box_rows % (int32_t)L::ATOM_ROWS)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "TMA box_rows %d must be a multiple of %u in [1, %d]", (int)box_rows,
                             L::ATOM_ROWS, DCP_CUDA__TMA_MAX_BOX);
    const uint64_t row_bytes = (uint64_t)heads * (uint64_t)head_dim * L::ELEMENT_BYTES;
    if (row_bytes >= DCP_CUDA__TMA_STRIDE_LIMIT)
        return dcp_error_set(error, DCP_ERROR_UNSUPPORTED,
                             "TMA row stride of %d heads x %d is %llu bytes, not below 2^40",
                             (int)heads, (int)head_dim, (unsigned long long)row_bytes);
    g->dims[0] = (cuuint64_t)head_dim;
    g->dims[1] = (cuuint64_t)heads;
    g->dims[2] = (cuuint64_t)rows;
    g->strides[0] = (cuuint64_t)head_dim * L::ELEMENT_BYTES;
    g->strides[1] = row_bytes;
    g->box[0] = L::BLOCK_COLS;
    g->box[1] = 1;
    g->box[2] = (cuuint32_t)box_rows;
    for (int i = 0; i < DCP_CUDA__TMA_RANK; i++) g->element_strides[i] = 1;
    return dcp_error_clear(error);
}

/* The map of a checked geometry: 16-bit elements of dtype, 128-byte swizzle, 256-byte L2
   promotion, zero fill. DCP_ERROR_CUDA when the driver has no encoder (no driver, or older
   than CUDA 12.0) or rejects the map. Host-only: no device, stream or allocation. */
dcp_status dcp_cuda__tma_encode(CUtensorMap *map, const dcp_cuda__tma_geometry *g,
                                const void *base, dcp_dtype dtype, dcp_error *error)
{
    void *entry = NULL;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    CUresult result;
    if (dtype != DCP_DTYPE_BFLOAT16 && dtype != DCP_DTYPE_FLOAT16)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "TMA dtype %s: bfloat16 or float16", dcp_dtype_name(dtype));
#if CUDART_VERSION >= 12050
    const cudaError_t queried = cudaGetDriverEntryPointByVersion(
        "cuTensorMapEncodeTiled", &entry, DCP_CUDA__TMA_ENCODER_VERSION, cudaEnableDefault, &found);
#else
    const cudaError_t queried =
        cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &entry, cudaEnableDefault, &found);
#endif
    if (queried != cudaSuccess || found != cudaDriverEntryPointSuccess || !entry) {
        (void)cudaGetLastError();
        return dcp_error_set(error, DCP_ERROR_CUDA,
                             "cuTensorMapEncodeTiled is not available from the driver (query "
                             "result %d): TMA needs a CUDA 12.0+ driver",
                             (int)found);
    }
    result = ((PFN_cuTensorMapEncodeTiled_v12000)entry)(
        map,
        dtype == DCP_DTYPE_BFLOAT16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                    : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        DCP_CUDA__TMA_RANK, const_cast<void *>(base), g->dims, g->strides, g->box,
        g->element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (result != CUDA_SUCCESS)
        return dcp_error_set(error, DCP_ERROR_CUDA, "cuTensorMapEncodeTiled failed: CUresult %d",
                             (int)result);
    return dcp_error_clear(error);
}
