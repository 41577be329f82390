/* layer_timer.h - one transformer layer's work for one group of documents, timed on one GPU:
   the work the planner's cost model prices. Shared by bench/calibrate (which fits the model to
   these times) and bench/plan_vs_exec (which executes plans with them), so the check runs
   exactly what the calibration measured.
   - Attention, forward then backward (deterministic 0, the training path): cp 1 through
     dcp_cuda_attention_forward / _backward, cp > 1 through dcp_cuda_virtual_ring_forward /
     _backward, whose cp ranks run one after another on the device. Ranks of a group hold
     equal causal work (the load-balanced split), so one rank's share is the group's time / cp.
     The virtual ring has no communication: its per-step cost is the launches and merges of
     the extra steps, a lower bound on a real ring's exposed step cost.
   - The linear layers: GEMMs of the layer's weight shapes through cuBLAS (QKV hidden x
     (heads + 2 kv_heads) head_dim, output heads head_dim x hidden, MLP hidden x ffn (2 ffn
     gated) and ffn x hidden), each forward, input gradient and weight gradient, on the rank's
     stored tokens;
     or, with --linear-seconds-per-token (or a build without cuBLAS), that time per token.
   Timing is bench_time's: median of --iterations runs after 3 warm-ups, L2 flushed before
   each. Include after dcp.h and bench_util.h. */
#ifndef DCP_BENCH_LAYER_TIMER_H
#define DCP_BENCH_LAYER_TIMER_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#ifdef BENCH_HAVE_CUBLAS
#include <cublas_v2.h>
#endif

#define LAYER_MAX_CP 64 /* widest group the timer drives (per-rank pointer arrays) */
#define LAYER_FILL_THREADS 256
#define LAYER_FILL_BLOCKS 1024
#define LAYER_WEIGHTS 4 /* QKV, output projection, MLP up, MLP down */

/* The layer whose costs are measured; every field has a command-line flag. */
typedef struct layer_shape {
    int32_t hidden;     /* --hidden, default 4096 (the library's default model) */
    int32_t ffn;        /* --ffn, MLP width, default 4 x hidden */
    int32_t gated_mlp;  /* --mlp swiglu: gate and up projections (hidden x 2 ffn); --mlp gelu
                           (default): one up projection (hidden x ffn) */
    int32_t heads;      /* --heads, default 32 */
    int32_t kv_heads;   /* --kv-heads, default 8 */
    int32_t head_dim;   /* --head-dim, 64 or 128 (the CUDA attention's), default 128 */
    dcp_dtype dtype;    /* --dtype bf16 | fp16, default bf16 */
    int32_t iterations; /* --iterations: timed runs per figure (median), default 5 */
    double linear_seconds_per_token; /* --linear-seconds-per-token: the caller's measured
                                        time of the linear layers per token (forward +
                                        backward); 0: time the GEMM stand-in */
} layer_shape;

static layer_shape layer_shape_default(void)
{
    layer_shape s;
    s.hidden = 4096, s.ffn = 0, s.gated_mlp = 0, s.heads = 32, s.kv_heads = 8, s.head_dim = 128;
    s.dtype = DCP_DTYPE_BFLOAT16, s.iterations = 5, s.linear_seconds_per_token = 0.0;
    return s;
}

static const char layer_usage[] =
    "  --hidden H            model width (default 4096)\n"
    "  --ffn F               MLP width (default 4 x hidden)\n"
    "  --mlp gelu|swiglu     one up projection, or gate and up (default gelu)\n"
    "  --heads N             query heads (default 32)\n"
    "  --kv-heads N          key/value heads (default 8)\n"
    "  --head-dim D          64 or 128 (default 128)\n"
    "  --dtype bf16|fp16     (default bf16)\n"
    "  --iterations N        timed runs per figure, median (default 5)\n"
    "  --linear-seconds-per-token T  your measured linear-layer time per token, forward +\n"
    "                        backward, instead of timing the GEMM stand-in\n";

static int layer_parse_int(const char *flag, const char *text, int32_t *value)
{
    char *end;
    long v = strtol(text, &end, 10);
    if (*end || v < 1 || v > (1L << 30)) {
        fprintf(stderr, "%s: expected an integer in [1, 2^30], got '%s'\n", flag, text);
        return 0;
    }
    *value = (int32_t)v;
    return 1;
}

static int layer_parse_double(const char *flag, const char *text, double *value)
{
    char *end;
    double v = strtod(text, &end);
    if (*end || !(v >= 0.0 && v < 1.0)) {
        fprintf(stderr, "%s: expected seconds in [0, 1), got '%s'\n", flag, text);
        return 0;
    }
    *value = v;
    return 1;
}

/* Consumes argv[*i] (and its value) when it is a layer flag: 1 taken, 0 not a layer flag,
   -1 a bad value (the message printed). */
static int layer_parse_option(layer_shape *s, int argc, char **argv, int *i)
{
    const char *flag = argv[*i], *value = *i + 1 < argc ? argv[*i + 1] : NULL;
    int ok;
    if (strcmp(flag, "--hidden") && strcmp(flag, "--ffn") && strcmp(flag, "--heads") &&
        strcmp(flag, "--kv-heads") && strcmp(flag, "--head-dim") && strcmp(flag, "--dtype") &&
        strcmp(flag, "--iterations") && strcmp(flag, "--linear-seconds-per-token") &&
        strcmp(flag, "--mlp"))
        return 0;
    if (!value) {
        fprintf(stderr, "%s needs a value\n", flag);
        return -1;
    }
    ++*i;
    if (!strcmp(flag, "--hidden")) ok = layer_parse_int(flag, value, &s->hidden);
    else if (!strcmp(flag, "--ffn")) ok = layer_parse_int(flag, value, &s->ffn);
    else if (!strcmp(flag, "--heads")) ok = layer_parse_int(flag, value, &s->heads);
    else if (!strcmp(flag, "--kv-heads")) ok = layer_parse_int(flag, value, &s->kv_heads);
    else if (!strcmp(flag, "--head-dim")) ok = layer_parse_int(flag, value, &s->head_dim);
    else if (!strcmp(flag, "--iterations")) ok = layer_parse_int(flag, value, &s->iterations);
    else if (!strcmp(flag, "--linear-seconds-per-token"))
        ok = layer_parse_double(flag, value, &s->linear_seconds_per_token);
    else if (!strcmp(flag, "--mlp")) {
        ok = !strcmp(value, "gelu") || !strcmp(value, "swiglu");
        s->gated_mlp = !strcmp(value, "swiglu");
        if (!ok) fprintf(stderr, "--mlp: expected gelu or swiglu, got '%s'\n", value);
    } else {
        ok = !strcmp(value, "bf16") || !strcmp(value, "fp16");
        s->dtype = !strcmp(value, "fp16") ? DCP_DTYPE_FLOAT16 : DCP_DTYPE_BFLOAT16;
        if (!ok) fprintf(stderr, "--dtype: expected bf16 or fp16, got '%s'\n", value);
    }
    return ok ? 1 : -1;
}

/* Resolves defaults and checks what the kernels serve; 0 (message printed) when invalid. */
static int layer_shape_resolve(layer_shape *s)
{
    if (s->ffn == 0) s->ffn = 4 * s->hidden;
    if (s->head_dim != 64 && s->head_dim != 128) {
        fprintf(stderr, "--head-dim %d: the CUDA attention serves 64 and 128\n", (int)s->head_dim);
        return 0;
    }
    if (s->heads % s->kv_heads != 0) {
        fprintf(stderr, "--kv-heads %d must divide --heads %d\n", (int)s->kv_heads,
                (int)s->heads);
        return 0;
    }
    if (s->iterations > BENCH_MAX_REPEAT) s->iterations = BENCH_MAX_REPEAT;
#ifndef BENCH_HAVE_CUBLAS
    if (s->linear_seconds_per_token == 0.0)
        printf("note: built without cuBLAS: no GEMM stand-in; the linear term is attention's "
               "own per-token cost unless --linear-seconds-per-token is given\n");
#endif
    return 1;
}

static void layer_shape_print(const layer_shape *s)
{
    printf("layer: hidden %d, ffn %d (%s), heads %d, kv heads %d, head dim %d, %s; linear "
           "part: ",
           (int)s->hidden, (int)s->ffn, s->gated_mlp ? "swiglu" : "gelu", (int)s->heads,
           (int)s->kv_heads, (int)s->head_dim, s->dtype == DCP_DTYPE_FLOAT16 ? "fp16" : "bf16");
    if (s->linear_seconds_per_token > 0.0)
        printf("%.4g s per token (given)\n", s->linear_seconds_per_token);
    else
#ifdef BENCH_HAVE_CUBLAS
        printf("cuBLAS GEMM stand-in\n");
#else
        printf("none (no cuBLAS)\n");
#endif
    printf("times are one layer, forward + backward; %d timed runs per figure (median)\n",
           (int)s->iterations);
}

/* Pseudo-random values in [-1, 1) of a 16-bit dtype (an integer hash of the index: no state,
   any grid). */
__global__ void layer_fill_kernel(uint16_t *data, size_t count, uint32_t seed, int fp16)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i < count; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        float x = (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
        data[i] = fp16 ? __half_as_ushort(__float2half(x))
                       : __bfloat16_as_ushort(__float2bfloat16(x));
    }
}

static void *layer_alloc_filled(size_t elements, uint32_t seed, int fp16)
{
    void *p = bench_alloc(elements * 2);
    layer_fill_kernel<<<LAYER_FILL_BLOCKS, LAYER_FILL_THREADS>>>((uint16_t *)p, elements, seed,
                                                                 fp16);
    BENCH_CALL(cudaGetLastError());
    return p;
}

typedef struct layer_timer {
    layer_shape shape;
    dcp_attention_params params;
    int64_t capacity;        /* rows of a group, all its ranks together */
    int64_t linear_capacity; /* tokens of one rank's linear part */
    int32_t max_documents;
    /* attention tensors of `capacity` rows; rank r of a group starts at row r * local_rows */
    char *q, *k, *v, *out, *dout;
    float *lse, *dq, *dk, *dv;
    float *partial_out, *partial_lse, *acc_out, *acc_lse; /* one rank's scratch */
    void *workspace;
    size_t workspace_bytes;
    int32_t *cu, *cu_padded, *cu_device, *cu_padded_device;
    /* the group being timed */
    dcp_cuda_layout layout;
    const void *q_rank[LAYER_MAX_CP], *k_rank[LAYER_MAX_CP], *v_rank[LAYER_MAX_CP];
    const void *out_rank[LAYER_MAX_CP], *dout_rank[LAYER_MAX_CP];
    const float *lse_rank[LAYER_MAX_CP];
    void *out_write[LAYER_MAX_CP];
    float *lse_write[LAYER_MAX_CP], *dq_rank[LAYER_MAX_CP], *dk_rank[LAYER_MAX_CP],
        *dv_rank[LAYER_MAX_CP];
    /* the linear stand-in */
    int64_t linear_tokens;
    int32_t weight_in[LAYER_WEIGHTS], weight_out[LAYER_WEIGHTS];
    void *activation, *activation_grad, *weight, *weight_grad;
#ifdef BENCH_HAVE_CUBLAS
    cublasHandle_t cublas;
#endif
} layer_timer;

static size_t layer_element_size(const layer_timer *t) { return dcp_dtype_size(t->shape.dtype); }

/* Buffers for groups of up to `capacity` rows and `max_documents` documents, and a linear
   part of up to `linear_capacity` tokens per rank. */
static void layer_timer_init(layer_timer *t, const layer_shape *shape, int64_t capacity,
                             int64_t linear_capacity, int32_t max_documents)
{
    const int fp16 = shape->dtype == DCP_DTYPE_FLOAT16;
    const size_t q_elements = (size_t)capacity * shape->heads * shape->head_dim;
    const size_t kv_elements = (size_t)capacity * shape->kv_heads * shape->head_dim;
    size_t widest = 0, largest_weight = 0;
    int32_t w;
    memset(t, 0, sizeof *t);
    t->shape = *shape;
    t->params.num_heads = shape->heads, t->params.num_kv_heads = shape->kv_heads;
    t->params.head_dim = shape->head_dim, t->params.causal = 1;
    t->capacity = capacity, t->linear_capacity = linear_capacity;
    t->max_documents = max_documents;
    t->q = (char *)layer_alloc_filled(q_elements, 1, fp16);
    t->k = (char *)layer_alloc_filled(kv_elements, 2, fp16);
    t->v = (char *)layer_alloc_filled(kv_elements, 3, fp16);
    t->dout = (char *)layer_alloc_filled(q_elements, 4, fp16);
    t->out = (char *)bench_alloc(q_elements * 2);
    t->lse = (float *)bench_alloc((size_t)capacity * shape->heads * 4);
    t->dq = (float *)bench_alloc(q_elements * 4);
    t->dk = (float *)bench_alloc(kv_elements * 4), t->dv = (float *)bench_alloc(kv_elements * 4);
    t->partial_out = (float *)bench_alloc(q_elements * 4);
    t->acc_out = (float *)bench_alloc(q_elements * 4);
    t->partial_lse = (float *)bench_alloc((size_t)capacity * shape->heads * 4);
    t->acc_lse = (float *)bench_alloc((size_t)capacity * shape->heads * 4);
    t->cu = (int32_t *)malloc((size_t)(max_documents + 1) * sizeof(int32_t));
    t->cu_padded = (int32_t *)malloc((size_t)(max_documents + 1) * sizeof(int32_t));
    t->cu_device = (int32_t *)bench_alloc((size_t)(max_documents + 1) * sizeof(int32_t));
    t->cu_padded_device = (int32_t *)bench_alloc((size_t)(max_documents + 1) * sizeof(int32_t));
    if (!t->cu || !t->cu_padded) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    t->weight_in[0] = shape->hidden;
    t->weight_out[0] = (shape->heads + 2 * shape->kv_heads) * shape->head_dim;
    t->weight_in[1] = shape->heads * shape->head_dim, t->weight_out[1] = shape->hidden;
    t->weight_in[2] = shape->hidden;
    t->weight_out[2] = (shape->gated_mlp ? 2 : 1) * shape->ffn;
    t->weight_in[3] = shape->ffn, t->weight_out[3] = shape->hidden;
    for (w = 0; w < LAYER_WEIGHTS; w++) {
        size_t in = (size_t)t->weight_in[w], out = (size_t)t->weight_out[w];
        if (in > widest) widest = in;
        if (out > widest) widest = out;
        if (in * out > largest_weight) largest_weight = in * out;
    }
#ifdef BENCH_HAVE_CUBLAS
    if (shape->linear_seconds_per_token == 0.0) {
        if (cublasCreate(&t->cublas) != CUBLAS_STATUS_SUCCESS) {
            fprintf(stderr, "cublasCreate failed\n");
            exit(1);
        }
        t->activation = layer_alloc_filled((size_t)linear_capacity * widest, 5, fp16);
        t->activation_grad = layer_alloc_filled((size_t)linear_capacity * widest, 6, fp16);
        t->weight = layer_alloc_filled(largest_weight, 7, fp16);
        t->weight_grad = bench_alloc(largest_weight * 2);
    }
#else
    (void)widest, (void)largest_weight;
#endif
    BENCH_CALL(cudaDeviceSynchronize());
}

static void layer_timer_destroy(layer_timer *t)
{
    void *device[] = {t->q, t->k, t->v, t->out, t->dout, t->lse, t->dq, t->dk, t->dv,
                      t->partial_out, t->acc_out, t->partial_lse, t->acc_lse, t->workspace,
                      t->cu_device, t->cu_padded_device, t->activation, t->activation_grad,
                      t->weight, t->weight_grad};
    size_t i;
    for (i = 0; i < sizeof device / sizeof device[0]; i++)
        if (device[i]) BENCH_CALL(cudaFree(device[i]));
#ifdef BENCH_HAVE_CUBLAS
    if (t->cublas) cublasDestroy(t->cublas);
#endif
    free(t->cu);
    free(t->cu_padded);
}

/* Lays out a group (valid and padded lengths, cp ranks) in the buffers: the device cu arrays,
   the layout, the per-rank pointers and a workspace large enough. */
static void layer_timer_set_group(layer_timer *t, const int64_t *lengths, const int64_t *padded,
                                  int32_t count, int32_t cp)
{
    const size_t q_row = (size_t)t->shape.heads * t->shape.head_dim;
    const size_t kv_row = (size_t)t->shape.kv_heads * t->shape.head_dim;
    const size_t element = layer_element_size(t);
    dcp_thd_layout host;
    size_t bytes;
    int32_t i, r;
    if (count > t->max_documents || cp > LAYER_MAX_CP || cp < 1) {
        fprintf(stderr, "a group of %d documents on %d ranks exceeds the timer's %d, %d\n",
                (int)count, (int)cp, (int)t->max_documents, LAYER_MAX_CP);
        exit(1);
    }
    t->cu[0] = t->cu_padded[0] = 0;
    for (i = 0; i < count; i++) {
        t->cu[i + 1] = t->cu[i] + (int32_t)lengths[i];
        t->cu_padded[i + 1] = t->cu_padded[i] + (int32_t)padded[i];
    }
    if (t->cu_padded[count] > t->capacity) {
        fprintf(stderr, "a group of %d rows exceeds the timer's %lld\n", (int)t->cu_padded[count],
                (long long)t->capacity);
        exit(1);
    }
    BENCH_CALL(cudaMemcpy(t->cu_device, t->cu, (size_t)(count + 1) * 4, cudaMemcpyHostToDevice));
    BENCH_CALL(cudaMemcpy(t->cu_padded_device, t->cu_padded, (size_t)(count + 1) * 4,
                          cudaMemcpyHostToDevice));
    host.num_sequences = count, host.cu_seqlens = t->cu, host.cu_seqlens_padded = t->cu_padded;
    host.cp = cp;
    BENCH_DCP(dcp_cuda_layout_init(&host, t->cu_device, t->cu_padded_device, &t->layout,
                                   &bench_error_));
    BENCH_DCP(dcp_cuda_attention_workspace_size(&t->params, &t->layout, &bytes, &bench_error_));
    if (bytes > t->workspace_bytes) {
        if (t->workspace) BENCH_CALL(cudaFree(t->workspace));
        t->workspace = bench_alloc(bytes);
        t->workspace_bytes = bytes;
    }
    for (r = 0; r < cp; r++) {
        const size_t row = (size_t)r * (size_t)t->layout.local_rows;
        t->q_rank[r] = t->q + row * q_row * element;
        t->k_rank[r] = t->k + row * kv_row * element;
        t->v_rank[r] = t->v + row * kv_row * element;
        t->out_rank[r] = t->out_write[r] = t->out + row * q_row * element;
        t->dout_rank[r] = t->dout + row * q_row * element;
        t->lse_rank[r] = t->lse_write[r] = t->lse + row * t->shape.heads;
        t->dq_rank[r] = t->dq + row * q_row;
        t->dk_rank[r] = t->dk + row * kv_row;
        t->dv_rank[r] = t->dv + row * kv_row;
    }
}

/* The timed region of a group's attention: forward, then backward. */
static void layer_run_attention(void *context)
{
    layer_timer *t = (layer_timer *)context;
    const dcp_dtype dtype = t->shape.dtype;
    if (t->layout.thd.cp == 1) {
        BENCH_DCP(dcp_cuda_attention_forward(&t->params, &t->layout, NULL, dtype, t->q, t->k,
                                             t->v, dtype, t->out, t->lse, t->workspace,
                                             t->workspace_bytes, NULL, &bench_error_));
        BENCH_DCP(dcp_cuda_attention_backward(&t->params, &t->layout, NULL, dtype, t->q, t->k,
                                              t->v, t->out, t->dout, t->lse, t->dq, t->dk, t->dv,
                                              0, t->workspace, t->workspace_bytes, NULL,
                                              &bench_error_));
        return;
    }
    BENCH_DCP(dcp_cuda_virtual_ring_forward(&t->params, &t->layout, dtype, t->q_rank, t->k_rank,
                                            t->v_rank, dtype, t->out_write, t->lse_write,
                                            t->partial_out, t->partial_lse, t->acc_out,
                                            t->acc_lse, t->workspace, t->workspace_bytes, NULL,
                                            &bench_error_));
    BENCH_DCP(dcp_cuda_virtual_ring_backward(&t->params, &t->layout, dtype, t->q_rank, t->k_rank,
                                             t->v_rank, t->out_rank, t->dout_rank, t->lse_rank,
                                             t->dq_rank, t->dk_rank, t->dv_rank, 0, t->workspace,
                                             t->workspace_bytes, NULL, &bench_error_));
}

/* Seconds of a group's attention, forward + backward, all cp ranks one after another. */
static double layer_timer_attention_seconds(layer_timer *t, const int64_t *lengths,
                                            const int64_t *padded, int32_t count, int32_t cp)
{
    layer_timer_set_group(t, lengths, padded, count, cp);
    return 1e-3 * bench_time(layer_run_attention, t, t->shape.iterations);
}

#ifdef BENCH_HAVE_CUBLAS
/* C (m x n) = A (m x k) B (k x n), column-major, 16-bit in and out, float32 accumulation:
   the shapes of a linear layer's GEMMs (their transposes do not change the work). */
static void layer_gemm(layer_timer *t, int32_t m, int64_t n, int32_t k, const void *a,
                       const void *b, void *c)
{
    const cudaDataType type = t->shape.dtype == DCP_DTYPE_FLOAT16 ? CUDA_R_16F : CUDA_R_16BF;
    const float one = 1.0f, zero = 0.0f;
    if (cublasGemmEx(t->cublas, CUBLAS_OP_N, CUBLAS_OP_N, m, (int)n, k, &one, a, type, m, b,
                     type, k, &zero, c, type, m, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublasGemmEx %d x %lld x %d failed\n", (int)m, (long long)n, (int)k);
        exit(1);
    }
}

/* The timed region of the linear stand-in: every weight's forward, input gradient and
   weight gradient on linear_tokens tokens. */
static void layer_run_linear(void *context)
{
    layer_timer *t = (layer_timer *)context;
    int32_t w;
    for (w = 0; w < LAYER_WEIGHTS; w++) {
        const int32_t in = t->weight_in[w], out = t->weight_out[w];
        const int64_t n = t->linear_tokens;
        layer_gemm(t, out, n, in, t->weight, t->activation, t->activation_grad);     /* Y = W X */
        layer_gemm(t, in, n, out, t->weight, t->activation_grad, t->activation);     /* dX */
        layer_gemm(t, out, in, (int32_t)n, t->activation_grad, t->activation, t->weight_grad);
    }
}
#endif

/* Seconds of one rank's linear layers, forward + backward, on `tokens` stored tokens. */
static double layer_timer_linear_seconds(layer_timer *t, int64_t tokens)
{
    if (tokens <= 0) return 0.0;
    if (t->shape.linear_seconds_per_token > 0.0)
        return t->shape.linear_seconds_per_token * (double)tokens;
#ifdef BENCH_HAVE_CUBLAS
    if (tokens > t->linear_capacity) {
        fprintf(stderr, "%lld tokens exceed the linear stand-in's %lld\n", (long long)tokens,
                (long long)t->linear_capacity);
        exit(1);
    }
    t->linear_tokens = tokens;
    return 1e-3 * bench_time(layer_run_linear, t, t->shape.iterations);
#else
    return 0.0;
#endif
}

#endif
