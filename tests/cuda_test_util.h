/* cuda_test_util.h - helpers shared by the GPU tests (tests/test_cuda_*.cu): device buffers
   freed together, float32 <-> bfloat16 / float16 on the host, random THD layouts, a fresh
   seed per run (printed; DCP_TEST_SEED=N repeats one), NaN poisoning, and the comparison
   against the CPU references: compare(what, got, ref, count, tolerance), the one rule of
   tests/tolerance.h (norm-wise relative error plus a max-abs bound scaled to the data), with
   its presets tolerance_of(dtype), tolerance_sum(), tolerance_lse(), tolerance_exact().

   The same files build for a GPU (nvcc) and for the CPU execution model (tests/cuda_cpu, the
   *-cpu programs, DCP_CUDA_CPU defined): there the model is the device, the run's seed also
   orders its blocks, and cuda_test_size() picks each case's smaller size, so that every
   kernel runs on every path within make test's time. */
#ifndef DCP_CUDA_TEST_UTIL_H
#define DCP_CUDA_TEST_UTIL_H

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "test.h"
#include "tolerance.h"

#ifdef DCP_CUDA_CPU
#include "cuda_cpu.h"
#endif

#define CUDA_TEST_MAX_BUFFERS 1024

/* -------------------------------------------------------------------------- device, seed */

static int cuda_test_gpu(void)
{
    static int known = -1;
    if (known < 0) {
        int32_t devices = 0;
        dcp_error error;
        known = dcp_cuda_device_count(&devices, &error) == DCP_OK && devices > 0;
    }
    return known;
}

/* Tests that need a GPU open with this: it marks them skipped and returns 1 when there is none. */
#define CUDA_TEST_REQUIRE_GPU()                                                                \
    do {                                                                                       \
        if (!cuda_test_gpu()) {                                                                \
            test_skip("no CUDA device: skipped");                                              \
            return;                                                                            \
        }                                                                                      \
    } while (0)

/* One seed per run, from the clock unless DCP_TEST_SEED is set; printed so a failure repeats.
   On the CPU execution model it also draws the order of every launch's blocks. */
static uint64_t cuda_test_seed(void)
{
    const uint64_t seed = test_seed((uint64_t)time(NULL) ^ ((uint64_t)clock() << 20));
#ifdef DCP_CUDA_CPU
    dcp_cuda_cpu_set_seed(seed);
#endif
    return seed;
}

/* 1 on the CPU execution model (tests/cuda_cpu), where every thread of every block runs on
   one core; 0 on a GPU. */
static TEST_MAYBE_UNUSED int cuda_test_model(void)
{
#ifdef DCP_CUDA_CPU
    return 1;
#else
    return 0;
#endif
}

/* A case's size: `gpu` on a device, `model` on the CPU execution model. */
static TEST_MAYBE_UNUSED int64_t cuda_test_size(int64_t gpu, int64_t model)
{
    return cuda_test_model() ? model : gpu;
}

/* A generator per test, derived from the run's seed and the test's own number. */
static dcp_rng cuda_test_rng(uint64_t stream)
{
    dcp_rng rng;
    dcp_rng_seed(&rng, cuda_test_seed() * 0x9E3779B97F4A7C15ull + stream);
    return rng;
}

/* ------------------------------------------------------------------ buffers freed together */

typedef struct cuda_arena {
    void *device[CUDA_TEST_MAX_BUFFERS];
    void *host[CUDA_TEST_MAX_BUFFERS];
    int devices, hosts;
} cuda_arena;

static void cuda_test_die(const char *what, cudaError_t result)
{
    fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(result));
    exit(1);
}

#define CUDA_TEST_CALL(call)                                                                   \
    do {                                                                                       \
        cudaError_t cuda_test_result_ = (call);                                                \
        if (cuda_test_result_ != cudaSuccess) cuda_test_die(#call, cuda_test_result_);        \
    } while (0)

/* Device buffer of `bytes`, poisoned with 0xFF bytes (NaN in float32, bfloat16, float16). */
static void *dev_alloc(cuda_arena *a, size_t bytes)
{
    void *p = NULL;
    if (a->devices == CUDA_TEST_MAX_BUFFERS) {
        fprintf(stderr, "cuda test arena exhausted\n");
        exit(1);
    }
    CUDA_TEST_CALL(cudaMalloc(&p, bytes ? bytes : 16));
    CUDA_TEST_CALL(cudaMemset(p, 0xFF, bytes ? bytes : 16));
    a->device[a->devices++] = p;
    return p;
}

static void *host_alloc(cuda_arena *a, size_t bytes)
{
    void *p = malloc(bytes ? bytes : 16);
    if (!p || a->hosts == CUDA_TEST_MAX_BUFFERS) {
        fprintf(stderr, "cuda test host arena exhausted\n");
        exit(1);
    }
    a->host[a->hosts++] = p;
    return p;
}

static float *host_floats(cuda_arena *a, int64_t count)
{
    return (float *)host_alloc(a, (size_t)count * sizeof(float));
}

static void cuda_arena_free(cuda_arena *a)
{
    while (a->devices > 0) cudaFree(a->device[--a->devices]);
    while (a->hosts > 0) free(a->host[--a->hosts]);
}

static TEST_MAYBE_UNUSED void poison(void *device, size_t bytes) { CUDA_TEST_CALL(cudaMemset(device, 0xFF, bytes)); }

/* ----------------------------------------------------------------- element types on the host */

/* Short names the tests use for the library's own answers (no copy of the tables). */
static size_t dtype_size(dcp_dtype dtype) { return dcp_dtype_size(dtype); }
static const char *dtype_name(dcp_dtype dtype) { return dcp_dtype_name(dtype); }

static uint16_t bf16_from_float(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu)) return 0x7FC0; /* NaN */
    bits += 0x7FFFu + ((bits >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(bits >> 16);
}

static float bf16_to_float(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t fp16_from_float(float f)
{
    __half_raw raw = (__half_raw)__float2half_rn(f);
    return raw.x;
}

static float fp16_to_float(uint16_t bits)
{
    __half_raw raw;
    raw.x = bits;
    return __half2float(__half(raw));
}

/* The value a float takes once stored in dtype. */
static float round_to(dcp_dtype dtype, float f)
{
    if (dtype == DCP_DTYPE_BFLOAT16) return bf16_to_float(bf16_from_float(f));
    if (dtype == DCP_DTYPE_FLOAT16) return fp16_to_float(fp16_from_float(f));
    return f;
}

/* Host floats -> a new device buffer in dtype. */
static TEST_MAYBE_UNUSED void *upload(cuda_arena *a, dcp_dtype dtype, const float *values, int64_t count)
{
    const size_t size = dtype_size(dtype);
    unsigned char *staging = (unsigned char *)host_alloc(a, (size_t)count * size);
    void *device = dev_alloc(a, (size_t)count * size);
    int64_t i;
    for (i = 0; i < count; i++) {
        if (dtype == DCP_DTYPE_FLOAT32) memcpy(staging + i * 4, &values[i], 4);
        else {
            uint16_t h = dtype == DCP_DTYPE_BFLOAT16 ? bf16_from_float(values[i])
                                                     : fp16_from_float(values[i]);
            memcpy(staging + i * 2, &h, 2);
        }
    }
    CUDA_TEST_CALL(cudaMemcpy(device, staging, (size_t)count * size, cudaMemcpyHostToDevice));
    return device;
}

static void *upload_bytes(cuda_arena *a, const void *values, size_t bytes)
{
    void *device = dev_alloc(a, bytes);
    CUDA_TEST_CALL(cudaMemcpy(device, values, bytes, cudaMemcpyHostToDevice));
    return device;
}

/* A device buffer in dtype -> new host floats (synchronises). */
static float *download(cuda_arena *a, dcp_dtype dtype, const void *device, int64_t count)
{
    const size_t size = dtype_size(dtype);
    unsigned char *staging = (unsigned char *)host_alloc(a, (size_t)count * size);
    float *values = host_floats(a, count);
    int64_t i;
    CUDA_TEST_CALL(cudaDeviceSynchronize());
    CUDA_TEST_CALL(cudaMemcpy(staging, device, (size_t)count * size, cudaMemcpyDeviceToHost));
    for (i = 0; i < count; i++) {
        if (dtype == DCP_DTYPE_FLOAT32) memcpy(&values[i], staging + i * 4, 4);
        else {
            uint16_t h;
            memcpy(&h, staging + i * 2, 2);
            values[i] = dtype == DCP_DTYPE_BFLOAT16 ? bf16_to_float(h) : fp16_to_float(h);
        }
    }
    return values;
}

/* count normal values, each rounded to dtype so that the reference sees what the GPU sees. */
static TEST_MAYBE_UNUSED float *random_values(cuda_arena *a, dcp_rng *rng, dcp_dtype dtype, int64_t count)
{
    float *p = host_floats(a, count);
    int64_t i;
    for (i = 0; i < count; i++) p[i] = round_to(dtype, (float)dcp_rng_normal(rng));
    return p;
}

/* -------------------------------------------------------------------------- comparison */

/* compare() and the tolerances: tests/tolerance.h. */

/* Bitwise equality of two host float arrays. */
static TEST_MAYBE_UNUSED int same_bits(const float *a, const float *b, int64_t count)
{
    return memcmp(a, b, (size_t)count * sizeof(float)) == 0;
}

/* ------------------------------------------------------------------------------ layouts */

#define CUDA_TEST_MAX_SEQUENCES 64

/* A THD layout with host arrays and their device copies. */
typedef struct test_layout {
    int32_t cu[CUDA_TEST_MAX_SEQUENCES + 1];
    int32_t cu_padded[CUDA_TEST_MAX_SEQUENCES + 1];
    dcp_thd_layout host;
    dcp_cuda_layout device;
} test_layout;

/* Sequences of the given valid lengths, each padded to a multiple of 2 cp (cp > 1) plus
   extra_pad[i] x that multiple (NULL: none). Device arrays come from the arena. */
static void layout_make(test_layout *t, cuda_arena *a, const int64_t *lengths, int32_t n,
                        int32_t cp, const int32_t *extra_pad)
{
    const int64_t multiple = cp > 1 ? 2 * (int64_t)cp : 1;
    int32_t i;
    dcp_error error;
    if (n > CUDA_TEST_MAX_SEQUENCES) {
        fprintf(stderr, "layout_make: %d sequences\n", (int)n);
        exit(1);
    }
    t->cu[0] = t->cu_padded[0] = 0;
    for (i = 0; i < n; i++) {
        const int64_t padded =
            (lengths[i] + multiple - 1) / multiple * multiple + (extra_pad ? extra_pad[i] : 0) * multiple;
        t->cu[i + 1] = (int32_t)(t->cu[i] + lengths[i]);
        t->cu_padded[i + 1] = (int32_t)(t->cu_padded[i] + padded);
    }
    t->host.num_sequences = n;
    t->host.cu_seqlens = t->cu;
    t->host.cu_seqlens_padded = t->cu_padded;
    t->host.cp = cp;
    if (dcp_cuda_layout_init(&t->host,
                             (const int32_t *)upload_bytes(a, t->cu, (size_t)(n + 1) * 4),
                             (const int32_t *)upload_bytes(a, t->cu_padded, (size_t)(n + 1) * 4),
                             &t->device, &error) != DCP_OK) {
        fprintf(stderr, "layout_make: %s\n", error.message);
        exit(1);
    }
}

/* n random lengths in [1, max_length], a third of them short (1..8 tokens), and random
   extra padding on some, so that halves of whole chunks are padding at cp > 1. */
static TEST_MAYBE_UNUSED void layout_random(test_layout *t, cuda_arena *a, dcp_rng *rng, int32_t n,
                          int64_t max_length, int32_t cp)
{
    int64_t lengths[CUDA_TEST_MAX_SEQUENCES];
    int32_t extra[CUDA_TEST_MAX_SEQUENCES];
    int32_t i;
    for (i = 0; i < n; i++) {
        const uint64_t kind = dcp_rng_below(rng, 3);
        lengths[i] = kind == 0 ? 1 + (int64_t)dcp_rng_below(rng, 8)
                               : 1 + (int64_t)dcp_rng_below(rng, (uint64_t)max_length);
        extra[i] = dcp_rng_below(rng, 4) == 0 ? (int32_t)dcp_rng_below(rng, 3) : 0;
    }
    layout_make(t, a, lengths, n, cp, extra);
}

/* Sets every element of the padding rows of a [rows, width] host tensor to NaN, so that a
   kernel that reads one spreads it (used for inputs whose padding must never be read). */
static TEST_MAYBE_UNUSED void nan_padding_rows(const test_layout *t, int32_t rank, float *values, int64_t width)
{
    int32_t i;
    int64_t local, d;
    for (i = 0; i < t->host.num_sequences; i++) {
        const int64_t padded = t->cu_padded[i + 1] - t->cu_padded[i];
        const int64_t valid = t->cu[i + 1] - t->cu[i];
        const int64_t offset = t->cu_padded[i] / t->host.cp;
        for (local = 0; local < padded / t->host.cp; local++)
            if (dcp_zigzag_position(padded, t->host.cp, rank, local) >= valid)
                for (d = 0; d < width; d++) values[(offset + local) * width + d] = NAN;
    }
}

#endif
