/* attention_bench - dcp_cuda.cu part 2: varlen THD attention forward and backward (cp 1,
   causal, head dim 128, 32 query heads, 8 kv heads, bfloat16) on packs of 64K tokens made of
   1K, 4K or 16K documents or a lognormal mix (mean 4096, sigma 1.1, 128..16384, seed 1).
   FLOPs: forward 4 sum(L^2) heads d, halved for causal; backward 2.5 x forward, timed with
   deterministic = 0 (dq by float atomics, the target's path) and = 1 (bwd-det). Time: median
   of --repeat runs (CUDA events, L2 flushed before each). PyTorch's baselines (flash and cuDNN
   SDPA) on the same packs: bench/attention_bench.py. The forward runs on the mma.sync kernels
   and, where the device runs them (compute capability 9.0, sm_90a build), on the wgmma
   kernels too (fwd-wgmma; "-" elsewhere).

   Usage: build/attention_bench [--repeat N]    (needs a GPU) */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "bench_util.h"

#define TOKENS 65536
#define HEADS 32
#define KV_HEADS 8
#define DIM 128
#define MAX_DOCS 1024

typedef struct attn_bench {
    dcp_cuda_layout layout;
    dcp_attention_params p;
    void *q, *k, *v, *out, *dout;
    float *lse, *dq, *dk, *dv;
    void *workspace;
    size_t workspace_bytes;
    int32_t deterministic;        /* of the backward */
    dcp_cuda_attention_path path; /* of the forward */
} attn_bench;

static void run_forward(void *c)
{
    attn_bench *b = (attn_bench *)c;
    BENCH_DCP(dcp_cuda_attention_forward_using(b->path, &b->p, &b->layout, NULL,
                                               DCP_DTYPE_BFLOAT16, b->q, b->k, b->v,
                                               DCP_DTYPE_BFLOAT16, b->out, b->lse, b->workspace,
                                               b->workspace_bytes, NULL, &bench_error_));
}

static void run_backward(void *c)
{
    attn_bench *b = (attn_bench *)c;
    BENCH_DCP(dcp_cuda_attention_backward(&b->p, &b->layout, NULL, DCP_DTYPE_BFLOAT16, b->q, b->k,
                                          b->v, b->out, b->dout, b->lse, b->dq, b->dk, b->dv,
                                          b->deterministic,
                                          b->workspace, b->workspace_bytes, NULL, &bench_error_));
}

static void fill_bf16(void *device, size_t count, uint64_t seed)
{
    dcp_rng rng;
    size_t i;
    uint16_t *host = (uint16_t *)malloc(count * 2);
    dcp_rng_seed(&rng, seed);
    for (i = 0; i < count; i++) {
        float f = (float)dcp_rng_normal(&rng);
        uint32_t bits;
        memcpy(&bits, &f, 4);
        host[i] = (uint16_t)(bits >> 16);
    }
    BENCH_CALL(cudaMemcpy(device, host, count * 2, cudaMemcpyHostToDevice));
    free(host);
}

/* Document lengths of a pack: fixed, or lognormal draws until TOKENS (the last one cut). */
static int32_t pack_lengths(int32_t document, int64_t *lengths)
{
    int32_t n = 0;
    int64_t total = 0;
    if (document > 0) {
        for (; total < TOKENS; n++) total += lengths[n] = document;
        return n;
    }
    {
        dcp_lognormal dist = {4096.0, 1.1, 128, 16384};
        int64_t draws[MAX_DOCS];
        int32_t i;
        BENCH_DCP(dcp_lengths_lognormal(&dist, 1, draws, MAX_DOCS, &bench_error_));
        for (i = 0; i < MAX_DOCS && total < TOKENS; i++, n++) {
            lengths[n] = draws[i] < TOKENS - total ? draws[i] : TOKENS - total;
            total += lengths[n];
        }
    }
    return n;
}

int main(int argc, char **argv)
{
    static const int32_t documents[] = {1024, 4096, 16384, 0};
    static int64_t lengths[MAX_DOCS];
    static int32_t cu[MAX_DOCS + 1];
    const size_t qn = (size_t)TOKENS * HEADS * DIM, kn = (size_t)TOKENS * KV_HEADS * DIM;
    attn_bench b;
    int repeat = 11, i, devices = 0;
    int32_t wgmma = 0;
    if (!bench_parse_repeat(argc, argv, &repeat)) return 2;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("no CUDA device: nothing measured\n");
        return 0;
    }
    bench_device_line();
    memset(&b, 0, sizeof b);
    b.p.num_heads = HEADS;
    b.p.num_kv_heads = KV_HEADS;
    b.p.head_dim = DIM;
    b.p.causal = 1;
    b.q = bench_alloc(qn * 2), b.out = bench_alloc(qn * 2), b.dout = bench_alloc(qn * 2);
    b.k = bench_alloc(kn * 2), b.v = bench_alloc(kn * 2);
    b.lse = (float *)bench_alloc((size_t)TOKENS * HEADS * 4);
    b.dq = (float *)bench_alloc(qn * 4);
    b.dk = (float *)bench_alloc(kn * 4), b.dv = (float *)bench_alloc(kn * 4);
    fill_bf16(b.q, qn, 1), fill_bf16(b.k, kn, 2), fill_bf16(b.v, kn, 3), fill_bf16(b.dout, qn, 4);
    BENCH_DCP(dcp_cuda_attention_path_available(DCP_CUDA_ATTENTION_PATH_WGMMA, &wgmma,
                                                &bench_error_));
    printf("%-12s %6s %10s %10s %10s %10s %12s %12s %14s %14s\n", "pack", "docs", "fwd ms",
           "fwd TF/s", "bwd ms", "bwd TF/s", "bwd-det ms", "bwd-det TF/s", "fwd-wgmma ms",
           "fwd-wgmma TF/s");
    for (i = 0; i < 4; i++) {
        const int32_t n = pack_lengths(documents[i], lengths);
        dcp_thd_layout host;
        int32_t *cu_device, j;
        double flops = 0.0, forward, backward, backward_det, forward_wgmma = 0.0;
        char name[32];
        cu[0] = 0;
        for (j = 0; j < n; j++) {
            cu[j + 1] = cu[j] + (int32_t)lengths[j];
            flops += 4.0 * (double)lengths[j] * lengths[j] * HEADS * DIM / 2.0;
        }
        cu_device = (int32_t *)bench_alloc((size_t)(n + 1) * 4);
        BENCH_CALL(cudaMemcpy(cu_device, cu, (size_t)(n + 1) * 4, cudaMemcpyHostToDevice));
        host.num_sequences = n, host.cu_seqlens = cu, host.cu_seqlens_padded = cu, host.cp = 1;
        BENCH_DCP(dcp_cuda_layout_init(&host, cu_device, cu_device, &b.layout, &bench_error_));
        BENCH_DCP(dcp_cuda_attention_workspace_size(&b.p, &b.layout, &b.workspace_bytes,
                                                    &bench_error_));
        b.workspace = bench_alloc(b.workspace_bytes);
        b.path = DCP_CUDA_ATTENTION_PATH_MMA_SYNC;
        forward = bench_time(run_forward, &b, repeat);
        b.path = DCP_CUDA_ATTENTION_PATH_WGMMA;
        if (wgmma) forward_wgmma = bench_time(run_forward, &b, repeat);
        b.deterministic = 0;
        backward = bench_time(run_backward, &b, repeat);
        b.deterministic = 1;
        backward_det = bench_time(run_backward, &b, repeat);
        if (documents[i]) snprintf(name, sizeof name, "docs %dK", (int)(documents[i] / 1024));
        else snprintf(name, sizeof name, "lognormal");
        printf("%-12s %6d %10.3f %10.1f %10.3f %10.1f %12.3f %12.1f", name, (int)n, forward,
               flops / (forward * 1e-3) / 1e12, backward,
               2.5 * flops / (backward * 1e-3) / 1e12, backward_det,
               2.5 * flops / (backward_det * 1e-3) / 1e12);
        if (wgmma)
            printf(" %14.3f %14.1f\n", forward_wgmma, flops / (forward_wgmma * 1e-3) / 1e12);
        else
            printf(" %14s %14s\n", "-", "-");
        BENCH_CALL(cudaFree(b.workspace));
        BENCH_CALL(cudaFree(cu_device));
    }
    return 0;
}
