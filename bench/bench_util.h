/* bench_util.h - timing helpers of the GPU benches: CUDA events around the timed region, an
   L2 flush (a 256 MB memset) before every repetition, the median of the repetitions, and a
   device-to-device copy measured in the same run as the bandwidth ceiling. */
#ifndef DCP_BENCH_UTIL_H
#define DCP_BENCH_UTIL_H

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_CALL(call)                                                                       \
    do {                                                                                       \
        cudaError_t bench_result_ = (call);                                                    \
        if (bench_result_ != cudaSuccess) {                                                    \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                     \
                    cudaGetErrorString(bench_result_));                                        \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

#define BENCH_DCP(call)                                                                        \
    do {                                                                                       \
        dcp_error bench_error_;                                                                \
        if ((call) != DCP_OK) {                                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                     \
                    bench_error_.message);                                                     \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

#if defined(__GNUC__)
#define BENCH_MAYBE_UNUSED __attribute__((unused))
#else
#define BENCH_MAYBE_UNUSED
#endif

#define BENCH_FLUSH_BYTES ((size_t)256 << 20)
#define BENCH_MAX_REPEAT 101

typedef void (*bench_fn)(void *context);

static void *bench_flush_buffer;

static void *bench_alloc(size_t bytes)
{
    void *p = NULL;
    BENCH_CALL(cudaMalloc(&p, bytes ? bytes : 16));
    return p;
}

static int bench_compare_floats(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median milliseconds of `repeat` runs of fn (after 3 warm-up runs), L2 flushed before each. */
static double bench_time(bench_fn fn, void *context, int repeat)
{
    float times[BENCH_MAX_REPEAT];
    cudaEvent_t start, stop;
    int i;
    if (repeat > BENCH_MAX_REPEAT) repeat = BENCH_MAX_REPEAT;
    if (!bench_flush_buffer) bench_flush_buffer = bench_alloc(BENCH_FLUSH_BYTES);
    BENCH_CALL(cudaEventCreate(&start));
    BENCH_CALL(cudaEventCreate(&stop));
    for (i = 0; i < 3; i++) fn(context);
    for (i = 0; i < repeat; i++) {
        BENCH_CALL(cudaMemsetAsync(bench_flush_buffer, i & 0xFF, BENCH_FLUSH_BYTES, 0));
        BENCH_CALL(cudaEventRecord(start, 0));
        fn(context);
        BENCH_CALL(cudaEventRecord(stop, 0));
        BENCH_CALL(cudaEventSynchronize(stop));
        BENCH_CALL(cudaEventElapsedTime(&times[i], start, stop));
    }
    BENCH_CALL(cudaGetLastError());
    BENCH_CALL(cudaEventDestroy(start));
    BENCH_CALL(cudaEventDestroy(stop));
    qsort(times, (size_t)repeat, sizeof times[0], bench_compare_floats);
    return times[repeat / 2];
}

typedef struct bench_copy {
    void *dst, *src;
    size_t bytes;
} bench_copy;

static void bench_copy_run(void *context)
{
    bench_copy *c = (bench_copy *)context;
    BENCH_CALL(cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice, 0));
}

/* GB/s of a device-to-device copy of `bytes` (counting bytes read plus bytes written). */
static BENCH_MAYBE_UNUSED double bench_copy_bandwidth(size_t bytes, int repeat)
{
    bench_copy c;
    double ms;
    c.bytes = bytes;
    c.src = bench_alloc(bytes);
    c.dst = bench_alloc(bytes);
    BENCH_CALL(cudaMemset(c.src, 0x3C, bytes));
    ms = bench_time(bench_copy_run, &c, repeat);
    BENCH_CALL(cudaFree(c.src));
    BENCH_CALL(cudaFree(c.dst));
    return 2.0 * (double)bytes / (ms * 1e-3) / 1e9;
}

/* The command line of a bench whose one option is --repeat N: N in [1, BENCH_MAX_REPEAT] into
   *repeat (left as it is when the flag is absent); 0, the usage printed, for anything else, so
   that a misspelt flag fails at once instead of measuring with the default (and --repeat 0
   would take the median of nothing). */
static BENCH_MAYBE_UNUSED int bench_parse_repeat(int argc, char **argv, int *repeat)
{
    int i;
    for (i = 1; i < argc; i++) {
        const char *text = !strcmp(argv[i], "--repeat") && i + 1 < argc ? argv[++i] : NULL;
        char *end = NULL;
        const long n = text ? strtol(text, &end, 10) : 0;
        if (text && *text && !*end && n >= 1 && n <= BENCH_MAX_REPEAT) {
            *repeat = (int)n;
            continue;
        }
        fprintf(stderr, "usage: %s [--repeat N]   (N in 1..%d; got '%s')\n", argv[0],
                BENCH_MAX_REPEAT, argv[i]);
        return 0;
    }
    return 1;
}

static void bench_device_line(void)
{
    struct cudaDeviceProp prop;
    int device = 0;
    BENCH_CALL(cudaGetDevice(&device));
    BENCH_CALL(cudaGetDeviceProperties(&prop, device));
    printf("device: %s, %d SMs, %.0f MB L2, compute capability %d.%d\n", prop.name,
           prop.multiProcessorCount, prop.l2CacheSize / 1048576.0, prop.major, prop.minor);
}

#endif
