/* kernels_bench - dcp_cuda.cu part 1 (RoPE, conv1d, LSE merge) against the device's copy
   bandwidth, measured in the same run. PyTorch baselines: bench/kernels_bench.py (same shapes,
   same library through ctypes).

   Shapes (issue 5): 64K local tokens in documents of 1K or 16K tokens; RoPE on q of 32 heads
   and k of 8 heads, head dim 128, bfloat16; conv1d over 8192 channels, width 4, bias and SiLU,
   bfloat16; merge of a float32 partial (32 heads x 128) into the accumulator, and finalize to
   bfloat16. Bytes counted: each input read once and each output written once (RoPE: q, k in,
   q, k out; conv1d forward: x in, y out; backward: x, dy in, dx out; merge: partial, its LSE,
   the accumulator and its LSE in, the accumulator and its LSE out; finalize: accumulator in,
   bfloat16 out and LSE). Time: median of --repeat runs, L2 flushed before each (bench_util.h).

   Then 50 microbatches of different total token counts (1,000 ... 65,536, none a multiple
   of 2, 3, 5 or 7 except the ends; documents of random lengths, no padding of the count),
   conv1d forward and backward as above: per microbatch the first call (cold for that
   shape: no warm-up, no L2 flush) and the median, in ns per token. The kernels are compiled
   once for every shape, so the first call should cost what the others do; FLA's Triton
   kernels autotune per shape (see kernels_bench.py for that comparison).

   Usage: build/kernels_bench [--repeat N]    (needs a GPU; prints two tables) */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "bench_util.h"

#define TOKENS 65536
#define Q_HEADS 32
#define KV_HEADS 8
#define HEAD_DIM 128
#define CHANNELS 8192
#define WIDTH 4

typedef struct kernels {
    dcp_cuda_layout layout;
    dcp_rope_options rope;
    dcp_conv1d_params conv;
    dcp_attention_params attn;
    void *q, *k, *q_out, *k_out;
    void *x, *y, *dy, *dx;
    float *weight, *bias, *dweight, *dbias;
    void *workspace;
    size_t workspace_bytes;
    float *part, *part_lse, *acc, *acc_lse, *lse;
    void *out;
} kernels;

static void run_rope(void *c)
{
    kernels *b = (kernels *)c;
    BENCH_DCP(dcp_cuda_rope_forward(&b->rope, &b->layout, 0, DCP_DTYPE_BFLOAT16, HEAD_DIM,
                                    Q_HEADS, b->q, b->q_out, KV_HEADS, b->k, b->k_out, NULL,
                                    &bench_error_));
}

static void run_conv_forward(void *c)
{
    kernels *b = (kernels *)c;
    BENCH_DCP(dcp_cuda_conv1d_forward(&b->conv, &b->layout, TOKENS, DCP_DTYPE_BFLOAT16, b->x,
                                      b->weight, b->bias, b->y, NULL, &bench_error_));
}

static void run_conv_backward(void *c)
{
    kernels *b = (kernels *)c;
    BENCH_DCP(dcp_cuda_conv1d_backward(&b->conv, &b->layout, TOKENS, DCP_DTYPE_BFLOAT16, b->x,
                                       b->weight, b->bias, b->dy, b->dx, b->dweight, b->dbias,
                                       b->workspace, b->workspace_bytes, NULL, &bench_error_));
}

static void run_merge(void *c)
{
    kernels *b = (kernels *)c;
    BENCH_DCP(dcp_cuda_acc_merge(&b->attn, &b->layout, DCP_HALF_ALL, b->part, b->part_lse, b->acc,
                                 b->acc_lse, NULL, &bench_error_));
}

static void run_convert(void *c)
{
    kernels *b = (kernels *)c;
    BENCH_DCP(dcp_cuda_convert(b->acc, DCP_DTYPE_BFLOAT16, b->out,
                               (int64_t)TOKENS * Q_HEADS * HEAD_DIM, NULL, &bench_error_));
}

static void run_finalize(void *c)
{
    kernels *b = (kernels *)c;
    BENCH_DCP(dcp_cuda_acc_finalize(&b->attn, &b->layout, 0, b->acc, b->acc_lse,
                                    DCP_DTYPE_BFLOAT16, b->out, b->lse, NULL, &bench_error_));
}

/* Random bits that are finite numbers in bfloat16 and float32: uniform in [-1, 1). */
static void fill_random(void *device, size_t count, int bf16, uint64_t seed)
{
    dcp_rng rng;
    size_t i, size = bf16 ? 2 : 4;
    unsigned char *host = (unsigned char *)malloc(count * size);
    dcp_rng_seed(&rng, seed);
    for (i = 0; i < count; i++) {
        float f = (float)(2.0 * dcp_rng_uniform(&rng) - 1.0);
        if (bf16) {
            uint32_t bits;
            uint16_t h;
            memcpy(&bits, &f, 4);
            h = (uint16_t)(bits >> 16);
            memcpy(host + 2 * i, &h, 2);
        } else
            memcpy(host + 4 * i, &f, 4);
    }
    BENCH_CALL(cudaMemcpy(device, host, count * size, cudaMemcpyHostToDevice));
    free(host);
}

static void setup(kernels *b, int32_t document, int32_t *cu_host, int32_t **cu_device)
{
    dcp_thd_layout host;
    const int32_t n = TOKENS / document;
    const size_t qn = (size_t)TOKENS * Q_HEADS * HEAD_DIM, kn = (size_t)TOKENS * KV_HEADS * HEAD_DIM;
    const size_t xn = (size_t)TOKENS * CHANNELS;
    int32_t i;
    for (i = 0; i <= n; i++) cu_host[i] = i * document;
    *cu_device = (int32_t *)bench_alloc((size_t)(n + 1) * 4);
    BENCH_CALL(cudaMemcpy(*cu_device, cu_host, (size_t)(n + 1) * 4, cudaMemcpyHostToDevice));
    host.num_sequences = n;
    host.cu_seqlens = cu_host;
    host.cu_seqlens_padded = cu_host;
    host.cp = 1;
    BENCH_DCP(dcp_cuda_layout_init(&host, *cu_device, *cu_device, &b->layout, &bench_error_));
    if (b->q) return; /* buffers made once */
    memset(&b->rope, 0, sizeof b->rope);
    memset(&b->conv, 0, sizeof b->conv);
    b->conv.channels = CHANNELS;
    b->conv.width = WIDTH;
    b->conv.silu = 1;
    memset(&b->attn, 0, sizeof b->attn);
    b->attn.num_heads = Q_HEADS;
    b->attn.head_dim = HEAD_DIM;
    b->q = bench_alloc(qn * 2), b->q_out = bench_alloc(qn * 2);
    b->k = bench_alloc(kn * 2), b->k_out = bench_alloc(kn * 2);
    fill_random(b->q, qn, 1, 1);
    fill_random(b->k, kn, 1, 2);
    b->x = bench_alloc(xn * 2), b->y = bench_alloc(xn * 2);
    b->dy = bench_alloc(xn * 2), b->dx = bench_alloc(xn * 2);
    fill_random(b->x, xn, 1, 3);
    fill_random(b->dy, xn, 1, 4);
    b->weight = (float *)bench_alloc(CHANNELS * WIDTH * 4);
    b->bias = (float *)bench_alloc(CHANNELS * 4);
    b->dweight = (float *)bench_alloc(CHANNELS * WIDTH * 4);
    b->dbias = (float *)bench_alloc(CHANNELS * 4);
    fill_random(b->weight, CHANNELS * WIDTH, 0, 5);
    fill_random(b->bias, CHANNELS, 0, 6);
    BENCH_DCP(dcp_cuda_conv1d_workspace_size(&b->conv, &b->workspace_bytes, &bench_error_));
    b->workspace = bench_alloc(b->workspace_bytes);
    b->part = (float *)bench_alloc(qn * 4), b->acc = (float *)bench_alloc(qn * 4);
    b->part_lse = (float *)bench_alloc((size_t)TOKENS * Q_HEADS * 4);
    b->acc_lse = (float *)bench_alloc((size_t)TOKENS * Q_HEADS * 4);
    b->lse = (float *)bench_alloc((size_t)TOKENS * Q_HEADS * 4);
    b->out = bench_alloc(qn * 2);
    fill_random(b->part, qn, 0, 7);
    fill_random(b->acc, qn, 0, 8);
    fill_random(b->part_lse, (size_t)TOKENS * Q_HEADS, 0, 9);
    fill_random(b->acc_lse, (size_t)TOKENS * Q_HEADS, 0, 10);
}

static void row(const char *figure, int32_t document, double ms, double bytes, double copy)
{
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    printf("%-22s %6d %10.3f %10.1f %8.2f\n", figure, (int)document, ms, gbs, gbs / copy);
}

/* ------------------------------------------------- 50 microbatches, no per-shape compile */

#define MICROBATCHES 50
#define MIN_TOKENS 1000
#define MAX_DOCUMENT 4096 /* documents of 1 ... this many tokens */

/* Token count i of MICROBATCHES: spread from MIN_TOKENS to TOKENS (quadratically, so small
   and large counts both appear), moved to the next count that 2, 3, 5 and 7 do not divide. */
static int64_t microbatch_tokens(int i)
{
    const double f = (double)i / (MICROBATCHES - 1);
    int64_t n = MIN_TOKENS + (int64_t)((TOKENS - MIN_TOKENS) * f * f);
    if (i == 0 || i == MICROBATCHES - 1) return n;
    while (n % 2 == 0 || n % 3 == 0 || n % 5 == 0 || n % 7 == 0) n++;
    return n;
}

/* Milliseconds of one call, no warm-up and no flush: what a first call of a shape costs. */
static double time_once(bench_fn fn, void *context)
{
    cudaEvent_t start, stop;
    float ms = 0.0f;
    BENCH_CALL(cudaEventCreate(&start));
    BENCH_CALL(cudaEventCreate(&stop));
    BENCH_CALL(cudaEventRecord(start, 0));
    fn(context);
    BENCH_CALL(cudaEventRecord(stop, 0));
    BENCH_CALL(cudaEventSynchronize(stop));
    BENCH_CALL(cudaEventElapsedTime(&ms, start, stop));
    BENCH_CALL(cudaEventDestroy(start));
    BENCH_CALL(cudaEventDestroy(stop));
    return ms;
}

typedef struct microbatch {
    kernels *b;
    int64_t tokens;
} microbatch;

static void run_mb_forward(void *c)
{
    microbatch *m = (microbatch *)c;
    BENCH_DCP(dcp_cuda_conv1d_forward(&m->b->conv, &m->b->layout, m->tokens, DCP_DTYPE_BFLOAT16,
                                      m->b->x, m->b->weight, m->b->bias, m->b->y, NULL,
                                      &bench_error_));
}

static void run_mb_backward(void *c)
{
    microbatch *m = (microbatch *)c;
    BENCH_DCP(dcp_cuda_conv1d_backward(&m->b->conv, &m->b->layout, m->tokens, DCP_DTYPE_BFLOAT16,
                                       m->b->x, m->b->weight, m->b->bias, m->b->dy, m->b->dx,
                                       m->b->dweight, m->b->dbias, m->b->workspace,
                                       m->b->workspace_bytes, NULL, &bench_error_));
}

/* Random document lengths summing to `tokens` (fixed seed per microbatch), as a layout. */
static int32_t *microbatch_layout(kernels *b, int64_t tokens, uint64_t seed, int32_t *cu)
{
    dcp_thd_layout host;
    dcp_rng rng;
    int32_t n = 0, *device;
    dcp_rng_seed(&rng, seed);
    cu[0] = 0;
    while (cu[n] < tokens) {
        const int64_t length = 1 + (int64_t)dcp_rng_below(&rng, MAX_DOCUMENT);
        cu[n + 1] = (int32_t)(cu[n] + length < tokens ? cu[n] + length : tokens);
        n++;
    }
    device = (int32_t *)bench_alloc((size_t)(n + 1) * 4);
    BENCH_CALL(cudaMemcpy(device, cu, (size_t)(n + 1) * 4, cudaMemcpyHostToDevice));
    host.num_sequences = n;
    host.cu_seqlens = cu;
    host.cu_seqlens_padded = cu;
    host.cp = 1;
    BENCH_DCP(dcp_cuda_layout_init(&host, device, device, &b->layout, &bench_error_));
    return device;
}

static void microbatches(kernels *b, int repeat, double copy)
{
    static int32_t cu[TOKENS + 1];
    double low = 1e30, high = 0.0, worst_first = 0.0;
    int i;
    printf("\nconv1d bf16, C %d, W %d, bias + SiLU: %d microbatches, one geometry per shape, no "
           "recompilation\n",
           CHANNELS, WIDTH, MICROBATCHES);
    printf("%6s %6s %12s %12s %12s %12s %8s\n", "tokens", "docs", "fwd 1st ns/t", "fwd ns/t",
           "bwd 1st ns/t", "bwd ns/t", "fwd/copy");
    for (i = 0; i < MICROBATCHES; i++) {
        microbatch m;
        int32_t *device;
        double f1, f, b1, bw, gbs;
        m.b = b;
        m.tokens = microbatch_tokens(i);
        device = microbatch_layout(b, m.tokens, 100 + (uint64_t)i, cu);
        f1 = time_once(run_mb_forward, &m);
        b1 = time_once(run_mb_backward, &m);
        f = bench_time(run_mb_forward, &m, repeat);
        bw = bench_time(run_mb_backward, &m, repeat);
        gbs = 2.0 * (double)m.tokens * CHANNELS * 2 / (f * 1e-3) / 1e9;
        printf("%6lld %6d %12.3f %12.3f %12.3f %12.3f %8.2f\n", (long long)m.tokens,
               (int)b->layout.thd.num_sequences, f1 * 1e6 / m.tokens, f * 1e6 / m.tokens,
               b1 * 1e6 / m.tokens, bw * 1e6 / m.tokens, gbs / copy);
        if (f * 1e6 / m.tokens < low) low = f * 1e6 / m.tokens;
        if (f * 1e6 / m.tokens > high) high = f * 1e6 / m.tokens;
        if (f1 / f > worst_first) worst_first = f1 / f;
        if (b1 / bw > worst_first) worst_first = b1 / bw;
        BENCH_CALL(cudaFree(device));
    }
    printf("forward ns/token from %.3f to %.3f (max/min %.2f); worst first call / median %.2f\n",
           low, high, high / low, worst_first);
}

int main(int argc, char **argv)
{
    static const int32_t documents[] = {1024, 16384};
    static int32_t cu_host[TOKENS / 1024 + 1];
    const double qk = (double)TOKENS * (Q_HEADS + KV_HEADS) * HEAD_DIM * 2;
    const double xs = (double)TOKENS * CHANNELS * 2, parts = (double)TOKENS * Q_HEADS * HEAD_DIM;
    const double lses = (double)TOKENS * Q_HEADS * 4;
    kernels b;
    int repeat = 21, i, devices = 0;
    double copy;
    if (!bench_parse_repeat(argc, argv, &repeat)) return 2;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("no CUDA device: nothing measured\n");
        return 0;
    }
    memset(&b, 0, sizeof b);
    bench_device_line();
    copy = bench_copy_bandwidth((size_t)1 << 30, repeat);
    printf("device-to-device copy of 1 GiB: %.1f GB/s (read + write)\n", copy);
    printf("%-22s %6s %10s %10s %8s\n", "figure", "doc", "ms", "GB/s", "vs copy");
    for (i = 0; i < 2; i++) {
        int32_t *cu_device;
        setup(&b, documents[i], cu_host, &cu_device);
        row("rope fwd bf16", documents[i], bench_time(run_rope, &b, repeat), 2 * qk, copy);
        row("conv1d fwd bf16", documents[i], bench_time(run_conv_forward, &b, repeat), 2 * xs,
            copy);
        row("conv1d bwd bf16", documents[i], bench_time(run_conv_backward, &b, repeat), 3 * xs,
            copy);
        row("merge fp32", documents[i], bench_time(run_merge, &b, repeat),
            3 * parts * 4 + 3 * lses, copy);
        row("finalize fp32->bf16", documents[i], bench_time(run_finalize, &b, repeat),
            parts * 4 + parts * 2 + 2 * lses, copy);
        row("convert fp32->bf16", documents[i], bench_time(run_convert, &b, repeat),
            parts * 4 + parts * 2, copy);
        BENCH_CALL(cudaFree(cu_device));
    }
    microbatches(&b, repeat, copy);
    return 0;
}
