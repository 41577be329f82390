/* GPU tests of dcp_cuda.cu part 2: varlen THD attention steps (forward and backward) against
   the CPU references of dcp.h, a long mixed pack against a double row reference, and the
   virtual ring (c = 2, 4, 8) against single-GPU attention. Built by `make` everywhere; without
   a CUDA device the GPU tests report "no CUDA device: skipped" and only the host-side
   argument checks run.

   Fresh random inputs each run (seed printed first; DCP_TEST_SEED=N repeats), NaN on every
   padding row of q, k, v and dout (a kernel that reads one fails), outputs poisoned with NaN
   before each launch (and the reference's outputs start as NaN too, so rows outside the q
   view must stay untouched on both sides). Results are compared by the one rule of
   tests/tolerance.h (norm-wise relative error plus a max-abs bound scaled to the data): out
   and the float32 gradients by the tolerance of the input dtype (the kernels compute P and
   dS from bf16/fp16 inputs, and tensor-core kernels round them to that dtype before their
   matmuls, whatever the output type), LSEs by tolerance_lse(). */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "cuda_test_util.h"

/* GPU against GPU (the virtual ring against single-GPU attention): each side carries its own
   error, so by the triangle inequality both bounds of the rule double. */
#define GPU_AGAINST_GPU 2.0

/* Query and kv heads of the step tests: groups of 1, 4 and 8 query heads per kv head (1, 2 and
   4 on the CPU execution model, with half the heads or fewer). */
static void gqa_shape(int which, int32_t *heads, int32_t *kv_heads)
{
    static const int32_t gpu[][2] = {{4, 4}, {8, 2}, {8, 1}}, model[][2] = {{2, 2}, {4, 2}, {4, 1}};
    *heads = (cuda_test_model() ? model : gpu)[which][0];
    *kv_heads = (cuda_test_model() ? model : gpu)[which][1];
}

static float *nan_floats(cuda_arena *a, int64_t count)
{
    float *p = host_floats(a, count);
    int64_t i;
    for (i = 0; i < count; i++) p[i] = NAN;
    return p;
}

static void *workspace_for(cuda_arena *a, const dcp_attention_params *p,
                           const dcp_cuda_layout *layout, size_t *bytes)
{
    dcp_error error;
    if (dcp_cuda_attention_workspace_size(p, layout, bytes, &error) != DCP_OK) {
        fprintf(stderr, "workspace: %s\n", error.message);
        exit(1);
    }
    return dev_alloc(a, *bytes); /* cudaMalloc: 256-byte aligned */
}

/* ============================================================ one step against the reference */

static const char *path_name(dcp_cuda_attention_path path)
{
    return path == DCP_CUDA_ATTENTION_PATH_WGMMA      ? "wgmma"
           : path == DCP_CUDA_ATTENTION_PATH_MMA_SYNC ? "mma.sync"
                                                      : "auto";
}

typedef struct step_case {
    dcp_dtype dtype, out_dtype;
    int32_t head_dim, heads, kv_heads, cp, causal;
    int32_t sequences;
    int64_t max_length;
    dcp_cuda_attention_path path;   /* the forward's kernels (0: AUTO) */
    const dcp_attention_view *view; /* NULL: a random view of cp */
    int32_t forward_only;           /* 1: the backward is not run */
} step_case;

static void step_run(const step_case *c, uint64_t stream)
{
    cuda_arena a;
    test_layout t;
    dcp_rng rng = cuda_test_rng(stream);
    dcp_attention_params p;
    dcp_attention_view view;
    dcp_error error;
    int64_t rows, qn, kn, ln;
    float *q, *k, *v, *out_ref, *lse_ref, *dout, *dq, *dk, *dv;
    void *dq_in, *dk_in, *dv_in, *d_out, *d_lse, *workspace, *d_outx, *d_dout;
    void *dq_dev, *dk_dev, *dv_dev;
    size_t workspace_bytes;
    char label[200];
    memset(&a, 0, sizeof a);
    layout_random(&t, &a, &rng, c->sequences, c->max_length, c->cp);
    memset(&view, 0, sizeof view);
    view.q_rank = (int32_t)dcp_rng_below(&rng, (uint64_t)c->cp);
    view.kv_rank = (int32_t)dcp_rng_below(&rng, (uint64_t)c->cp);
    if (c->cp > 1) {
        view.q_half = (dcp_half)dcp_rng_below(&rng, 3);
        view.kv_half = (dcp_half)dcp_rng_below(&rng, 3);
    }
    if (c->view) view = *c->view;
    memset(&p, 0, sizeof p);
    p.num_heads = c->heads;
    p.num_kv_heads = c->kv_heads;
    p.head_dim = c->head_dim;
    p.causal = c->causal;
    if (dcp_rng_below(&rng, 2)) p.softmax_scale = 0.05 + 0.2 * dcp_rng_uniform(&rng);
    rows = t.device.local_rows;
    qn = rows * c->heads * c->head_dim;
    kn = rows * c->kv_heads * c->head_dim;
    ln = rows * c->heads;
    snprintf(label, sizeof label,
             "attention %s %s->%s d%d h%d/%d cp%d causal%d view q%d/%d kv%d/%d rows %lld",
             path_name(c->path),
             dtype_name(c->dtype), dtype_name(c->out_dtype), (int)c->head_dim, (int)c->heads,
             (int)c->kv_heads, (int)c->cp, (int)c->causal, (int)view.q_rank, (int)view.q_half,
             (int)view.kv_rank, (int)view.kv_half, (long long)rows);
    q = random_values(&a, &rng, c->dtype, qn);
    k = random_values(&a, &rng, c->dtype, kn);
    v = random_values(&a, &rng, c->dtype, kn);
    nan_padding_rows(&t, view.q_rank, q, (int64_t)c->heads * c->head_dim);
    nan_padding_rows(&t, view.kv_rank, k, (int64_t)c->kv_heads * c->head_dim);
    nan_padding_rows(&t, view.kv_rank, v, (int64_t)c->kv_heads * c->head_dim);
    out_ref = nan_floats(&a, qn);
    lse_ref = nan_floats(&a, ln);
    CHECK_EQ(dcp_attention_forward(&p, &t.host, &view, q, k, v, out_ref, lse_ref, &error), DCP_OK);

    workspace = workspace_for(&a, &p, &t.device, &workspace_bytes);
    dq_in = upload(&a, c->dtype, q, qn);
    dk_in = upload(&a, c->dtype, k, kn);
    dv_in = upload(&a, c->dtype, v, kn);
    d_out = dev_alloc(&a, (size_t)qn * dtype_size(c->out_dtype));
    d_lse = dev_alloc(&a, (size_t)ln * 4);
    {
        const dcp_status status = dcp_cuda_attention_forward_using(
            c->path, &p, &t.device, &view, c->dtype, dq_in, dk_in, dv_in, c->out_dtype, d_out,
            (float *)d_lse, workspace, workspace_bytes, NULL, &error);
        if (status != DCP_OK) fprintf(stderr, "%s: %s\n", label, error.message);
        CHECK_EQ(status, DCP_OK);
    }
    CHECK(compare(label, download(&a, c->out_dtype, d_out, qn), out_ref, qn,
                  tolerance_of(c->dtype)));
    CHECK(compare(label, download(&a, DCP_DTYPE_FLOAT32, d_lse, ln), lse_ref, ln,
                  tolerance_lse()));
    if (c->forward_only) {
        cuda_arena_free(&a);
        return;
    }

    /* backward from the reference's out (rounded to dtype, as the GPU stores it) and LSE;
       the gradients start random, both sides add into them */
    {
        float *out_rounded = host_floats(&a, qn);
        float *dq0, *dk0, *dv0;
        int64_t i;
        for (i = 0; i < qn; i++) out_rounded[i] = out_ref[i] == out_ref[i] ? round_to(c->dtype, out_ref[i]) : 0.0f;
        dout = random_values(&a, &rng, c->dtype, qn);
        nan_padding_rows(&t, view.q_rank, dout, (int64_t)c->heads * c->head_dim);
        dq0 = random_values(&a, &rng, DCP_DTYPE_FLOAT32, qn);
        dk0 = random_values(&a, &rng, DCP_DTYPE_FLOAT32, kn);
        dv0 = random_values(&a, &rng, DCP_DTYPE_FLOAT32, kn);
        for (i = 0; i < ln; i++)
            if (lse_ref[i] != lse_ref[i]) lse_ref[i] = -INFINITY; /* rows outside the view */
        dq = host_floats(&a, qn), dk = host_floats(&a, kn), dv = host_floats(&a, kn);
        memcpy(dq, dq0, (size_t)qn * 4), memcpy(dk, dk0, (size_t)kn * 4), memcpy(dv, dv0, (size_t)kn * 4);
        CHECK_EQ(dcp_attention_backward(&p, &t.host, &view, q, k, v, out_rounded, dout, lse_ref,
                                        dq, dk, dv, &error),
                 DCP_OK);
        d_outx = upload(&a, c->dtype, out_rounded, qn);
        d_dout = upload(&a, c->dtype, dout, qn);
        d_lse = upload(&a, DCP_DTYPE_FLOAT32, lse_ref, ln);
        dq_dev = upload(&a, DCP_DTYPE_FLOAT32, dq0, qn);
        dk_dev = upload(&a, DCP_DTYPE_FLOAT32, dk0, kn);
        dv_dev = upload(&a, DCP_DTYPE_FLOAT32, dv0, kn);
        CHECK_EQ(dcp_cuda_attention_backward(&p, &t.device, &view, c->dtype, dq_in, dk_in, dv_in,
                                             d_outx, d_dout, (const float *)d_lse,
                                             (float *)dq_dev, (float *)dk_dev, (float *)dv_dev,
                                             1, workspace, workspace_bytes, NULL, &error),
                 DCP_OK);
        CHECK(compare(label, download(&a, DCP_DTYPE_FLOAT32, dq_dev, qn), dq, qn,
                      tolerance_of(c->dtype)));
        CHECK(compare(label, download(&a, DCP_DTYPE_FLOAT32, dk_dev, kn), dk, kn,
                      tolerance_of(c->dtype)));
        CHECK(compare(label, download(&a, DCP_DTYPE_FLOAT32, dv_dev, kn), dv, kn,
                      tolerance_of(c->dtype)));
        /* deterministic = 1 is bitwise reproducible: the same call from the same start gives
           the same bits in dq, dk and dv */
        {
            float *first[3];
            first[0] = download(&a, DCP_DTYPE_FLOAT32, dq_dev, qn);
            first[1] = download(&a, DCP_DTYPE_FLOAT32, dk_dev, kn);
            first[2] = download(&a, DCP_DTYPE_FLOAT32, dv_dev, kn);
            CUDA_TEST_CALL(cudaMemcpy(dq_dev, dq0, (size_t)qn * 4, cudaMemcpyHostToDevice));
            CUDA_TEST_CALL(cudaMemcpy(dk_dev, dk0, (size_t)kn * 4, cudaMemcpyHostToDevice));
            CUDA_TEST_CALL(cudaMemcpy(dv_dev, dv0, (size_t)kn * 4, cudaMemcpyHostToDevice));
            CHECK_EQ(dcp_cuda_attention_backward(
                         &p, &t.device, &view, c->dtype, dq_in, dk_in, dv_in, d_outx, d_dout,
                         (const float *)d_lse, (float *)dq_dev, (float *)dk_dev,
                         (float *)dv_dev, 1, workspace, workspace_bytes, NULL, &error),
                     DCP_OK);
            CHECK(same_bits(download(&a, DCP_DTYPE_FLOAT32, dq_dev, qn), first[0], qn));
            CHECK(same_bits(download(&a, DCP_DTYPE_FLOAT32, dk_dev, kn), first[1], kn));
            CHECK(same_bits(download(&a, DCP_DTYPE_FLOAT32, dv_dev, kn), first[2], kn));
        }
        /* deterministic = 0 (dq by float atomics) against the reference too */
        CUDA_TEST_CALL(cudaMemcpy(dq_dev, dq0, (size_t)qn * 4, cudaMemcpyHostToDevice));
        CUDA_TEST_CALL(cudaMemcpy(dk_dev, dk0, (size_t)kn * 4, cudaMemcpyHostToDevice));
        CUDA_TEST_CALL(cudaMemcpy(dv_dev, dv0, (size_t)kn * 4, cudaMemcpyHostToDevice));
        CHECK_EQ(dcp_cuda_attention_backward(&p, &t.device, &view, c->dtype, dq_in, dk_in, dv_in,
                                             d_outx, d_dout, (const float *)d_lse,
                                             (float *)dq_dev, (float *)dk_dev, (float *)dv_dev,
                                             0, workspace, workspace_bytes, NULL, &error),
                 DCP_OK);
        CHECK(compare(label, download(&a, DCP_DTYPE_FLOAT32, dq_dev, qn), dq, qn,
                      tolerance_of(c->dtype)));
        CHECK(compare(label, download(&a, DCP_DTYPE_FLOAT32, dk_dev, kn), dk, kn,
                      tolerance_of(c->dtype)));
        CHECK(compare(label, download(&a, DCP_DTYPE_FLOAT32, dv_dev, kn), dv, kn,
                      tolerance_of(c->dtype)));
    }
    cuda_arena_free(&a);
}

/* On the CPU execution model, which of the four (dtype, head dim) pairs runs a (GQA shape, cp,
   causal) case: each case in one pair, in turn, shifted by the shape, so that every pair still
   meets every cp, both causal values and every shape (a quarter of the GPU's product). */
static int model_pair_of(int g, int cp, int causal)
{
    return (cp + 2 * causal + g) % 4;
}

/* Forward and backward of one ring step, every (dtype, head dim, GQA shape, cp, causal), against
   the CPU reference (on the model, each case in one (dtype, head dim) pair: model_pair_of). */
static void attention_steps(void)
{
    static const int32_t cps[] = {1, 2, 4};
    uint64_t stream = 5000;
    int dt, d, g, cp, causal;
    CUDA_TEST_REQUIRE_GPU();
    for (dt = 0; dt < 2; dt++)
        for (d = 0; d < 2; d++)
            for (g = 0; g < 3; g++)
                for (cp = 0; cp < 3; cp++)
                    for (causal = 0; causal < 2; causal++) {
                        step_case c;
                        if (cuda_test_model() && model_pair_of(g, cp, causal) != dt * 2 + d) {
                            stream++; /* the GPU's inputs for every case that does run */
                            continue;
                        }
                        memset(&c, 0, sizeof c);
                        c.dtype = dt ? DCP_DTYPE_FLOAT16 : DCP_DTYPE_BFLOAT16;
                        c.out_dtype = stream % 2 ? DCP_DTYPE_FLOAT32 : c.dtype;
                        c.head_dim = d ? 128 : 64;
                        gqa_shape(g, &c.heads, &c.kv_heads);
                        c.cp = cps[cp];
                        c.causal = causal;
                        c.sequences = 1 + (int32_t)(stream % cuda_test_size(7, 4));
                        c.max_length = stream % 5 == 0 ? cuda_test_size(700, 150)
                                                       : cuda_test_size(200, 48);
                        step_run(&c, stream++);
                        if (test_current_failures) return;
                    }
}

/* The forward paths this device runs: mma.sync always, wgmma where the device runs sm_90a
   code. On a device of compute capability 9.0 the wgmma path must be there (this build has
   sm_90a code): missing, it is a failure, not a skip. The CPU execution model runs no sm_90a
   code on any profile (it does not emulate wgmma): the path must be unavailable there. */
static int forward_paths(dcp_cuda_attention_path paths[2])
{
    int32_t available = 0, major = 0, minor = 0, device = 0;
    dcp_error error;
    paths[0] = DCP_CUDA_ATTENTION_PATH_MMA_SYNC;
    CHECK_EQ(dcp_cuda_attention_path_available(DCP_CUDA_ATTENTION_PATH_WGMMA, &available, &error),
             DCP_OK);
    CUDA_TEST_CALL(cudaGetDevice(&device));
    CUDA_TEST_CALL(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    CUDA_TEST_CALL(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    if (cuda_test_model()) CHECK(!available);
    else if (major == 9 && minor == 0) CHECK(available);
    if (!available) {
        printf("wgmma path: device is %d.%d, not 9.0: only mma.sync runs\n", (int)major,
               (int)minor);
        return 1;
    }
    paths[1] = DCP_CUDA_ATTENTION_PATH_WGMMA;
    return 2;
}

/* Every view dcp_ring_step_plan gives (cp 1, 2, 4; every rank and step; causal and not), on
   every forward path, bf16 and fp16, d 64 and 128, against the CPU reference (on the CPU
   execution model each view in one of the four dtype and head dim pairs, in turn). The same
   inputs (one stream per case) go through both paths. */
static void attention_ring_step_views(void)
{
    static const int32_t cps[] = {1, 2, 4};
    dcp_cuda_attention_path paths[2];
    uint64_t stream = 8000;
    int dt, d, cp, rank, step, causal, path, path_count;
    CUDA_TEST_REQUIRE_GPU();
    path_count = forward_paths(paths);
    for (dt = 0; dt < 2; dt++)
        for (d = 0; d < 2; d++)
            for (cp = 0; cp < 3; cp++)
                for (rank = 0; rank < cps[cp]; rank++)
                    for (step = 0; step < cps[cp]; step++)
                        for (causal = 0; causal < 2; causal++, stream++) {
                            dcp_ring_step plan;
                            dcp_error error;
                            step_case c;
                            /* (cp, rank, step) numbered across the cp values: before cp = c
                               come the views of 1, 2, .., c / 2, 1 + 4 + .. = (c^2 - 1) / 3 */
                            const int view = (cps[cp] * cps[cp] - 1) / 3 + rank * cps[cp] + step;
                            if (cuda_test_model() && view % 4 != dt * 2 + d) continue;
                            CHECK_EQ(dcp_ring_step_plan(cps[cp], rank, step, causal, &plan,
                                                        &error),
                                     DCP_OK);
                            /* the shape varies with the (rank, step) pair, not with the
                               innermost causal flag, so each shape meets both masks (on the
                               model with the view, apart from the dtype and head dim that
                               view % 4 picks there) */
                            const uint64_t pair = cuda_test_model() ? (uint64_t)view / 4
                                                                    : stream / 2;
                            const int longest = cuda_test_model() ? view % 5 == 0 : pair % 4 == 1;
                            memset(&c, 0, sizeof c);
                            c.dtype = dt ? DCP_DTYPE_FLOAT16 : DCP_DTYPE_BFLOAT16;
                            c.out_dtype = pair % 2 ? DCP_DTYPE_FLOAT32 : c.dtype;
                            c.head_dim = d ? 128 : 64;
                            gqa_shape((int)(pair % 3), &c.heads, &c.kv_heads);
                            c.cp = cps[cp];
                            c.causal = plan.causal;
                            c.sequences = 1 + (int32_t)(pair % 7);
                            /* long enough for several 128-key tiles and a partial last one */
                            c.max_length = longest ? cuda_test_size(1100, 300)
                                                   : cuda_test_size(300, 100);
                            c.view = &plan.view;
                            c.forward_only = 1;
                            for (path = 0; path < path_count; path++) {
                                c.path = paths[path];
                                step_run(&c, stream);
                            }
                            if (test_current_failures) return;
                        }
}

/* ================================================= a long mixed pack, rows against doubles */

/* Output row and LSE of (row, head) in double, cp 1, from float inputs. */
static void reference_row(const dcp_attention_params *p, const float *q, const float *k,
                          const float *v, int64_t begin, int64_t valid, int64_t row, int32_t head,
                          double *o, double *lse)
{
    const int32_t group = p->num_heads / p->num_kv_heads, D = p->head_dim;
    const double scale = 1.0 / sqrt((double)D);
    const float *qr = q + (row * p->num_heads + head) * D;
    double max = -INFINITY, sum = 0.0;
    int64_t key, end = p->causal ? row + 1 : begin + valid;
    int32_t d;
    for (d = 0; d < D; d++) o[d] = 0.0;
    for (key = begin; key < end; key++) {
        const float *kr = k + (key * p->num_kv_heads + head / group) * D;
        double s = 0.0;
        for (d = 0; d < D; d++) s += (double)qr[d] * kr[d];
        if (s * scale > max) max = s * scale;
    }
    for (key = begin; key < end; key++) {
        const float *kr = k + (key * p->num_kv_heads + head / group) * D;
        const float *vr = v + (key * p->num_kv_heads + head / group) * D;
        double s = 0.0, w;
        for (d = 0; d < D; d++) s += (double)qr[d] * kr[d];
        w = exp(s * scale - max);
        sum += w;
        for (d = 0; d < D; d++) o[d] += w * vr[d];
    }
    for (d = 0; d < D; d++) o[d] /= sum;
    *lse = max + log(sum);
}

/* (row, head) pairs checked against doubles, a third of them in the 16K-token sequence. */
#define LONG_PACK_SAMPLES 300
/* The pack: a long sequence among short ones (on the CPU execution model 1/32 of it, still
   many q and key tiles). */
#define LONG_PACK_SEQUENCES 9
static const int64_t *long_pack_lengths(void)
{
    static const int64_t gpu[LONG_PACK_SEQUENCES] = {16384, 1, 2, 4097, 129, 1000, 63, 64, 65};
    static const int64_t model[LONG_PACK_SEQUENCES] = {512, 1, 2, 257, 129, 200, 63, 64, 65};
    return cuda_test_model() ? model : gpu;
}

static void attention_long_pack(void)
{
    const int64_t *lengths = long_pack_lengths();
    const int32_t n = LONG_PACK_SEQUENCES;
    dcp_cuda_attention_path paths[2];
    int run, path_count;
    CUDA_TEST_REQUIRE_GPU();
    path_count = forward_paths(paths);
    for (run = 0; run < 2 * path_count; run++) {
        const int causal = run % 2; /* the same inputs on every path */
        const dcp_cuda_attention_path path = paths[run / 2];
        char what[64];
        cuda_arena a;
        test_layout t;
        dcp_rng rng = cuda_test_rng(6000 + causal);
        dcp_attention_params p;
        dcp_error error;
        int32_t extra[LONG_PACK_SEQUENCES] = {0, 3, 1, 0, 2, 0, 1, 0, 5}; /* padding between them */
        int64_t rows, qn, kn, i;
        size_t workspace_bytes;
        void *workspace, *dq_, *dk_, *dv_, *d_out, *d_lse;
        float *q, *k, *v, *out, *lse, *ref_rows, *got_rows, *ref_lse, *got_lse;
        memset(&a, 0, sizeof a);
        layout_make(&t, &a, lengths, n, 1, extra);
        memset(&p, 0, sizeof p);
        p.num_heads = 4;
        p.num_kv_heads = 1;
        p.head_dim = 128;
        p.causal = causal;
        rows = t.device.local_rows;
        qn = rows * 4 * 128;
        kn = rows * 1 * 128;
        q = random_values(&a, &rng, DCP_DTYPE_BFLOAT16, qn);
        k = random_values(&a, &rng, DCP_DTYPE_BFLOAT16, kn);
        v = random_values(&a, &rng, DCP_DTYPE_BFLOAT16, kn);
        nan_padding_rows(&t, 0, q, 4 * 128);
        nan_padding_rows(&t, 0, k, 128);
        nan_padding_rows(&t, 0, v, 128);
        dq_ = upload(&a, DCP_DTYPE_BFLOAT16, q, qn);
        dk_ = upload(&a, DCP_DTYPE_BFLOAT16, k, kn);
        dv_ = upload(&a, DCP_DTYPE_BFLOAT16, v, kn);
        d_out = dev_alloc(&a, (size_t)qn * 4);
        d_lse = dev_alloc(&a, (size_t)rows * 4 * 4);
        workspace = workspace_for(&a, &p, &t.device, &workspace_bytes);
        CHECK_EQ(dcp_cuda_attention_forward_using(path, &p, &t.device, NULL,
                                                  DCP_DTYPE_BFLOAT16, dq_, dk_, dv_,
                                                  DCP_DTYPE_FLOAT32, d_out, (float *)d_lse,
                                                  workspace, workspace_bytes, NULL, &error),
                 DCP_OK);
        out = download(&a, DCP_DTYPE_FLOAT32, d_out, qn);
        lse = download(&a, DCP_DTYPE_FLOAT32, d_lse, rows * 4);
        /* every padding row 0 and -inf; 300 sampled valid (row, head) against doubles */
        for (i = 0; i < n; i++) {
            int64_t row, d;
            int32_t h;
            for (row = t.cu_padded[i] + lengths[i]; row < t.cu_padded[i + 1]; row++)
                for (h = 0; h < 4; h++) {
                    CHECK(lse[h * rows + row] == -INFINITY);
                    for (d = 0; d < 128; d++) CHECK(out[(row * 4 + h) * 128 + d] == 0.0f);
                }
        }
        ref_rows = host_floats(&a, LONG_PACK_SAMPLES * 128);
        got_rows = host_floats(&a, LONG_PACK_SAMPLES * 128);
        ref_lse = host_floats(&a, LONG_PACK_SAMPLES);
        got_lse = host_floats(&a, LONG_PACK_SAMPLES);
        for (i = 0; i < LONG_PACK_SAMPLES; i++) {
            const int32_t s =
                i < LONG_PACK_SAMPLES / 3 ? 0 : (int32_t)dcp_rng_below(&rng, (uint64_t)n);
            const int64_t row = t.cu_padded[s] + (int64_t)dcp_rng_below(&rng, (uint64_t)lengths[s]);
            const int32_t h = (int32_t)dcp_rng_below(&rng, 4);
            double o[128], l;
            int d;
            reference_row(&p, q, k, v, t.cu_padded[s], lengths[s], row, h, o, &l);
            for (d = 0; d < 128; d++) {
                ref_rows[i * 128 + d] = (float)o[d];
                got_rows[i * 128 + d] = out[(row * 4 + h) * 128 + d];
            }
            ref_lse[i] = (float)l, got_lse[i] = lse[h * rows + row];
        }
        snprintf(what, sizeof what, "long pack rows (%s, causal %d)", path_name(path), causal);
        CHECK(compare(what, got_rows, ref_rows, LONG_PACK_SAMPLES * 128,
                      tolerance_of(DCP_DTYPE_BFLOAT16)));
        snprintf(what, sizeof what, "long pack LSE (%s, causal %d)", path_name(path), causal);
        CHECK(compare(what, got_lse, ref_lse, LONG_PACK_SAMPLES, tolerance_lse()));
        cuda_arena_free(&a);
    }
}

/* ============================================ the long mixed pack's gradients, rows against doubles */

/* What the gradient rows of the long pack are computed from (cp 1, float copies of the
   device inputs): q, k, v, the forward's out (rounded as stored) and LSE, dout. */
typedef struct grad_inputs {
    const dcp_attention_params *p;
    const float *q, *k, *v, *out, *dout, *lse;
    int64_t rows;
} grad_inputs;

static double dot_double(const float *x, const float *y, int32_t n)
{
    double s = 0.0;
    int32_t i;
    for (i = 0; i < n; i++) s += (double)x[i] * y[i];
    return s;
}

/* P of (query row, head) against a key row, from the given LSE. */
static double grad_p(const grad_inputs *g, int64_t query, int32_t head, int64_t key)
{
    const int32_t D = g->p->head_dim, H = g->p->num_heads, KV = g->p->num_kv_heads;
    const float *qr = g->q + (query * H + head) * D;
    const float *kr = g->k + (key * KV + head / (H / KV)) * D;
    return exp(dot_double(qr, kr, D) / sqrt((double)D) - g->lse[head * g->rows + query]);
}

/* dS of (query row, head) against a key row: P (dP - delta). */
static double grad_ds(const grad_inputs *g, int64_t query, int32_t head, int64_t key)
{
    const int32_t D = g->p->head_dim, H = g->p->num_heads, KV = g->p->num_kv_heads;
    const int32_t kv_head = head / (H / KV);
    const float *dor = g->dout + (query * H + head) * D, *vr = g->v + (key * KV + kv_head) * D;
    const double delta = dot_double(dor, g->out + (query * H + head) * D, D);
    return grad_p(g, query, head, key) * (dot_double(dor, vr, D) - delta);
}

/* dq of (row, head) of a sequence at rows [begin, begin + valid). */
static void grad_dq_row(const grad_inputs *g, int64_t begin, int64_t valid, int64_t row,
                        int32_t head, double *dq)
{
    const int32_t D = g->p->head_dim, KV = g->p->num_kv_heads;
    const int32_t kv_head = head / (g->p->num_heads / KV);
    const int64_t end = g->p->causal ? row + 1 : begin + valid;
    int64_t key;
    int32_t d;
    for (d = 0; d < D; d++) dq[d] = 0.0;
    for (key = begin; key < end; key++) {
        const double ds = grad_ds(g, row, head, key) / sqrt((double)D);
        for (d = 0; d < D; d++) dq[d] += ds * g->k[(key * KV + kv_head) * D + d];
    }
}

/* dk and dv of (key row, kv head): every query head of its group, every query that sees it. */
static void grad_dkv_row(const grad_inputs *g, int64_t begin, int64_t valid, int64_t key,
                         int32_t kv_head, double *dk, double *dv)
{
    const int32_t D = g->p->head_dim, H = g->p->num_heads, group = H / g->p->num_kv_heads;
    int64_t query;
    int32_t head, d;
    for (d = 0; d < D; d++) dk[d] = dv[d] = 0.0;
    for (head = kv_head * group; head < (kv_head + 1) * group; head++)
        for (query = g->p->causal ? key : begin; query < begin + valid; query++) {
            const double ds = grad_ds(g, query, head, key) / sqrt((double)D);
            const double P = grad_p(g, query, head, key);
            for (d = 0; d < D; d++) {
                dk[d] += ds * g->q[(query * H + head) * D + d];
                dv[d] += P * g->dout[(query * H + head) * D + d];
            }
        }
}

/* (row, head) pairs of each gradient checked against doubles, a third in the 16K sequence. */
#define LONG_PACK_GRAD_SAMPLES 60

/* The backward on the pack of attention_long_pack (a 16K-token sequence among short ones and
   padding), both deterministic settings, from the GPU forward's out and LSE: sampled dq, dk,
   dv rows against doubles, and every padding row of the gradients left as it was (0). */
static void attention_long_pack_backward(void)
{
    const int64_t *lengths = long_pack_lengths();
    const int32_t n = LONG_PACK_SEQUENCES, H = 4, D = 128;
    int causal, deterministic;
    CUDA_TEST_REQUIRE_GPU();
    for (causal = 0; causal < 2; causal++)
        for (deterministic = 0; deterministic < 2; deterministic++) {
            /* the model runs two of the four: each flag both ways */
            if (cuda_test_model() && causal == deterministic) continue;
            cuda_arena a;
            test_layout t;
            dcp_rng rng = cuda_test_rng(6100 + 2 * causal + deterministic);
            dcp_attention_params p;
            dcp_error error;
            grad_inputs g;
            int32_t extra[LONG_PACK_SEQUENCES] = {0, 3, 1, 0, 2, 0, 1, 0, 5};
            int64_t rows, qn, kn, i;
            size_t workspace_bytes;
            void *workspace, *d_q, *d_k, *d_v, *d_out, *d_lse, *d_dout, *d_dq, *d_dk, *d_dv;
            float *q, *k, *v, *dout, *dq, *dk, *dv, *ref, *got;
            char label[80];
            memset(&a, 0, sizeof a);
            layout_make(&t, &a, lengths, n, 1, extra);
            memset(&p, 0, sizeof p);
            p.num_heads = H;
            p.num_kv_heads = 1;
            p.head_dim = D;
            p.causal = causal;
            rows = t.device.local_rows;
            qn = rows * H * D;
            kn = rows * D;
            snprintf(label, sizeof label, "long pack backward causal%d deterministic%d", causal,
                     deterministic);
            q = random_values(&a, &rng, DCP_DTYPE_BFLOAT16, qn);
            k = random_values(&a, &rng, DCP_DTYPE_BFLOAT16, kn);
            v = random_values(&a, &rng, DCP_DTYPE_BFLOAT16, kn);
            dout = random_values(&a, &rng, DCP_DTYPE_BFLOAT16, qn);
            nan_padding_rows(&t, 0, q, (int64_t)H * D);
            nan_padding_rows(&t, 0, k, D);
            nan_padding_rows(&t, 0, v, D);
            nan_padding_rows(&t, 0, dout, (int64_t)H * D);
            d_q = upload(&a, DCP_DTYPE_BFLOAT16, q, qn);
            d_k = upload(&a, DCP_DTYPE_BFLOAT16, k, kn);
            d_v = upload(&a, DCP_DTYPE_BFLOAT16, v, kn);
            d_dout = upload(&a, DCP_DTYPE_BFLOAT16, dout, qn);
            d_out = dev_alloc(&a, (size_t)qn * 2);
            d_lse = dev_alloc(&a, (size_t)rows * H * 4);
            d_dq = dev_alloc(&a, (size_t)qn * 4);
            d_dk = dev_alloc(&a, (size_t)kn * 4);
            d_dv = dev_alloc(&a, (size_t)kn * 4);
            CUDA_TEST_CALL(cudaMemset(d_dq, 0, (size_t)qn * 4));
            CUDA_TEST_CALL(cudaMemset(d_dk, 0, (size_t)kn * 4));
            CUDA_TEST_CALL(cudaMemset(d_dv, 0, (size_t)kn * 4));
            workspace = workspace_for(&a, &p, &t.device, &workspace_bytes);
            CHECK_EQ(dcp_cuda_attention_forward(&p, &t.device, NULL, DCP_DTYPE_BFLOAT16, d_q, d_k,
                                                d_v, DCP_DTYPE_BFLOAT16, d_out, (float *)d_lse,
                                                workspace, workspace_bytes, NULL, &error),
                     DCP_OK);
            CHECK_EQ(dcp_cuda_attention_backward(&p, &t.device, NULL, DCP_DTYPE_BFLOAT16, d_q, d_k,
                                                 d_v, d_out, d_dout, (const float *)d_lse,
                                                 (float *)d_dq, (float *)d_dk, (float *)d_dv,
                                                 deterministic, workspace, workspace_bytes, NULL,
                                                 &error),
                     DCP_OK);
            g.p = &p, g.q = q, g.k = k, g.v = v, g.dout = dout, g.rows = rows;
            g.out = download(&a, DCP_DTYPE_BFLOAT16, d_out, qn);
            g.lse = download(&a, DCP_DTYPE_FLOAT32, d_lse, rows * H);
            dq = download(&a, DCP_DTYPE_FLOAT32, d_dq, qn);
            dk = download(&a, DCP_DTYPE_FLOAT32, d_dk, kn);
            dv = download(&a, DCP_DTYPE_FLOAT32, d_dv, kn);
            for (i = 0; i < n; i++) {
                int64_t row, d;
                for (row = t.cu_padded[i] + lengths[i]; row < t.cu_padded[i + 1]; row++) {
                    for (d = 0; d < (int64_t)H * D; d++) CHECK(dq[row * H * D + d] == 0.0f);
                    for (d = 0; d < D; d++)
                        CHECK(dk[row * D + d] == 0.0f && dv[row * D + d] == 0.0f);
                }
            }
            ref = host_floats(&a, 3 * LONG_PACK_GRAD_SAMPLES * D);
            got = host_floats(&a, 3 * LONG_PACK_GRAD_SAMPLES * D);
            for (i = 0; i < LONG_PACK_GRAD_SAMPLES; i++) {
                const int32_t s = i < LONG_PACK_GRAD_SAMPLES / 3
                                      ? 0
                                      : (int32_t)dcp_rng_below(&rng, (uint64_t)n);
                const int64_t begin = t.cu_padded[s];
                const int64_t row = begin + (int64_t)dcp_rng_below(&rng, (uint64_t)lengths[s]);
                const int32_t h = (int32_t)dcp_rng_below(&rng, (uint64_t)H);
                double gq[128], gk[128], gv[128];
                int32_t d;
                grad_dq_row(&g, begin, lengths[s], row, h, gq);
                grad_dkv_row(&g, begin, lengths[s], row, 0, gk, gv);
                /* [dq, dk, dv][sample][D]: each gradient compared on its own scale */
                for (d = 0; d < D; d++) {
                    const int64_t at = i * D + d, step = (int64_t)LONG_PACK_GRAD_SAMPLES * D;
                    ref[at] = (float)gq[d], got[at] = dq[(row * H + h) * D + d];
                    ref[step + at] = (float)gk[d], got[step + at] = dk[row * D + d];
                    ref[2 * step + at] = (float)gv[d], got[2 * step + at] = dv[row * D + d];
                }
            }
            for (i = 0; i < 3; i++)
                CHECK(compare(label, got + i * LONG_PACK_GRAD_SAMPLES * D,
                              ref + i * LONG_PACK_GRAD_SAMPLES * D, LONG_PACK_GRAD_SAMPLES * D,
                              tolerance_of(DCP_DTYPE_BFLOAT16)));
            cuda_arena_free(&a);
        }
}

/* =================================================== the virtual ring against a single GPU */

/* Rank r's local buffer of a global [tokens, width] tensor: rows by zigzag position, NaN on
   padding rows. */
static float *to_rank(cuda_arena *a, const test_layout *ring, const test_layout *whole,
                      int32_t rank, const float *global, int64_t width)
{
    float *local = nan_floats(a, ring->device.local_rows * width);
    int32_t i;
    int64_t l;
    for (i = 0; i < ring->host.num_sequences; i++) {
        const int64_t padded = ring->cu_padded[i + 1] - ring->cu_padded[i];
        const int64_t valid = ring->cu[i + 1] - ring->cu[i];
        for (l = 0; l < padded / ring->host.cp; l++) {
            const int64_t pos = dcp_zigzag_position(padded, ring->host.cp, rank, l);
            if (pos < valid)
                memcpy(local + (ring->cu_padded[i] / ring->host.cp + l) * width,
                       global + (whole->cu_padded[i] + pos) * width, (size_t)width * 4);
        }
    }
    return local;
}

/* The [heads, rows] LSE layout of to_rank. */
static float *lse_to_rank(cuda_arena *a, const test_layout *ring, const test_layout *whole,
                          int32_t rank, const float *global, int32_t heads)
{
    const int64_t rows = ring->device.local_rows, total = whole->device.local_rows;
    float *local = nan_floats(a, rows * heads);
    int32_t i, h;
    int64_t l;
    for (i = 0; i < ring->host.num_sequences; i++) {
        const int64_t padded = ring->cu_padded[i + 1] - ring->cu_padded[i];
        const int64_t valid = ring->cu[i + 1] - ring->cu[i];
        for (l = 0; l < padded / ring->host.cp; l++) {
            const int64_t pos = dcp_zigzag_position(padded, ring->host.cp, rank, l);
            for (h = 0; h < heads; h++)
                local[h * rows + ring->cu_padded[i] / ring->host.cp + l] =
                    pos < valid ? global[h * total + whole->cu_padded[i] + pos] : -INFINITY;
        }
    }
    return local;
}

static void ring_run(int32_t cp, dcp_dtype dtype, int32_t causal, int32_t deterministic,
                     uint64_t stream)
{
    cuda_arena a;
    test_layout whole, ring;
    dcp_rng rng = cuda_test_rng(stream);
    dcp_attention_params p;
    dcp_error error;
    int64_t lengths[6], total, qn, kn, rows, rqn, rkn;
    /* on the CPU execution model fewer, shorter and narrower (its cost is tiles x steps): the
       ring's steps and merges are what this checks */
    const int32_t n = (int32_t)cuda_test_size(6, 3), D = (int32_t)cuda_test_size(128, 64);
    const int32_t heads = (int32_t)cuda_test_size(8, 2), kv_heads = (int32_t)cuda_test_size(2, 1);
    float *q, *k, *v, *dout, *out1, *lse1, *dq1, *dk1, *dv1;
    void *d_q, *d_k, *d_v, *d_out, *d_lse, *d_dout, *d_dq, *d_dk, *d_dv, *ws1, *wsr;
    const void *rq[8], *rk[8], *rv[8], *rout[8], *rdout[8];
    void *rout_w[8];
    float *rlse[8], *rdq[8], *rdk[8], *rdv[8];
    const float *rlse_c[8];
    size_t ws1_bytes, wsr_bytes;
    int32_t i, r;
    char label[96];
    memset(&a, 0, sizeof a);
    for (i = 0; i < n; i++)
        lengths[i] = 1 + (int64_t)dcp_rng_below(
                             &rng, (uint64_t)(i == 0 ? cuda_test_size(1500, 130) : cuda_test_size(300, 40)));
    layout_make(&whole, &a, lengths, n, 1, NULL);
    layout_make(&ring, &a, lengths, n, cp, NULL);
    memset(&p, 0, sizeof p);
    p.num_heads = heads;
    p.num_kv_heads = kv_heads;
    p.head_dim = D;
    p.causal = causal;
    total = whole.device.local_rows;
    rows = ring.device.local_rows;
    qn = total * heads * D, kn = total * kv_heads * D;
    rqn = rows * heads * D, rkn = rows * kv_heads * D;
    snprintf(label, sizeof label, "ring cp%d %s causal%d deterministic%d", (int)cp,
             dtype_name(dtype), (int)causal, (int)deterministic);
    q = random_values(&a, &rng, dtype, qn);
    k = random_values(&a, &rng, dtype, kn);
    v = random_values(&a, &rng, dtype, kn);
    dout = random_values(&a, &rng, dtype, qn);

    /* single GPU: forward, then backward from its own out and LSE */
    d_q = upload(&a, dtype, q, qn), d_k = upload(&a, dtype, k, kn), d_v = upload(&a, dtype, v, kn);
    d_out = dev_alloc(&a, (size_t)qn * dtype_size(dtype));
    d_lse = dev_alloc(&a, (size_t)total * heads * 4);
    ws1 = workspace_for(&a, &p, &whole.device, &ws1_bytes);
    CHECK_EQ(dcp_cuda_attention_forward(&p, &whole.device, NULL, dtype, d_q, d_k, d_v, dtype, d_out,
                                        (float *)d_lse, ws1, ws1_bytes, NULL, &error),
             DCP_OK);
    out1 = download(&a, dtype, d_out, qn);
    lse1 = download(&a, DCP_DTYPE_FLOAT32, d_lse, total * heads);
    d_dout = upload(&a, dtype, dout, qn);
    d_dq = dev_alloc(&a, (size_t)qn * 4), d_dk = dev_alloc(&a, (size_t)kn * 4);
    d_dv = dev_alloc(&a, (size_t)kn * 4);
    CUDA_TEST_CALL(cudaMemset(d_dq, 0, (size_t)qn * 4));
    CUDA_TEST_CALL(cudaMemset(d_dk, 0, (size_t)kn * 4));
    CUDA_TEST_CALL(cudaMemset(d_dv, 0, (size_t)kn * 4));
    CHECK_EQ(dcp_cuda_attention_backward(&p, &whole.device, NULL, dtype, d_q, d_k, d_v, d_out,
                                         d_dout, (const float *)d_lse, (float *)d_dq,
                                         (float *)d_dk, (float *)d_dv, 1, ws1, ws1_bytes, NULL,
                                         &error),
             DCP_OK);
    dq1 = download(&a, DCP_DTYPE_FLOAT32, d_dq, qn);
    dk1 = download(&a, DCP_DTYPE_FLOAT32, d_dk, kn);
    dv1 = download(&a, DCP_DTYPE_FLOAT32, d_dv, kn);

    /* the ring: forward compared with the single GPU's out and LSE */
    wsr = workspace_for(&a, &p, &ring.device, &wsr_bytes);
    for (r = 0; r < cp; r++) {
        rq[r] = upload(&a, dtype, to_rank(&a, &ring, &whole, r, q, (int64_t)heads * D), rqn);
        rk[r] = upload(&a, dtype, to_rank(&a, &ring, &whole, r, k, (int64_t)kv_heads * D), rkn);
        rv[r] = upload(&a, dtype, to_rank(&a, &ring, &whole, r, v, (int64_t)kv_heads * D), rkn);
        rout_w[r] = dev_alloc(&a, (size_t)rqn * dtype_size(dtype));
        rlse[r] = (float *)dev_alloc(&a, (size_t)rows * heads * 4);
    }
    {
        float *partial = (float *)dev_alloc(&a, (size_t)rqn * 4);
        float *partial_lse = (float *)dev_alloc(&a, (size_t)rows * heads * 4);
        float *acc = (float *)dev_alloc(&a, (size_t)rqn * 4);
        float *acc_lse = (float *)dev_alloc(&a, (size_t)rows * heads * 4);
        CHECK_EQ(dcp_cuda_virtual_ring_forward(&p, &ring.device, dtype, rq, rk, rv, dtype, rout_w,
                                               rlse, partial, partial_lse, acc, acc_lse, wsr,
                                               wsr_bytes, NULL, &error),
                 DCP_OK);
    }
    for (r = 0; r < cp; r++) {
        float *expected = to_rank(&a, &ring, &whole, r, out1, (int64_t)heads * D);
        float *expected_lse = lse_to_rank(&a, &ring, &whole, r, lse1, heads);
        int64_t j;
        for (j = 0; j < rqn; j++)
            if (expected[j] != expected[j]) expected[j] = 0.0f; /* padding rows: 0 */
        CHECK(compare(label, download(&a, dtype, rout_w[r], rqn), expected, rqn,
                      tolerance_scaled(tolerance_of(dtype), GPU_AGAINST_GPU)));
        CHECK(compare(label, download(&a, DCP_DTYPE_FLOAT32, rlse[r], rows * heads), expected_lse,
                      rows * heads, tolerance_scaled(tolerance_lse(), GPU_AGAINST_GPU)));
    }

    /* backward from the single GPU's out and LSE, so both sides see the same inputs */
    for (r = 0; r < cp; r++) {
        float *o = to_rank(&a, &ring, &whole, r, out1, (int64_t)heads * D);
        int64_t j;
        for (j = 0; j < rqn; j++)
            if (o[j] != o[j]) o[j] = 0.0f;
        rout[r] = upload(&a, dtype, o, rqn);
        rdout[r] = upload(&a, dtype, to_rank(&a, &ring, &whole, r, dout, (int64_t)heads * D), rqn);
        rlse_c[r] = (const float *)upload(&a, DCP_DTYPE_FLOAT32,
                                          lse_to_rank(&a, &ring, &whole, r, lse1, heads),
                                          rows * heads);
        rdq[r] = (float *)dev_alloc(&a, (size_t)rqn * 4);
        rdk[r] = (float *)dev_alloc(&a, (size_t)rkn * 4);
        rdv[r] = (float *)dev_alloc(&a, (size_t)rkn * 4);
    }
    CHECK_EQ(dcp_cuda_virtual_ring_backward(&p, &ring.device, dtype, rq, rk, rv, rout, rdout,
                                            rlse_c, rdq, rdk, rdv, deterministic, wsr, wsr_bytes,
                                            NULL, &error),
             DCP_OK);
    for (r = 0; r < cp; r++) {
        float *eq = to_rank(&a, &ring, &whole, r, dq1, (int64_t)heads * D);
        float *ek = to_rank(&a, &ring, &whole, r, dk1, (int64_t)kv_heads * D);
        float *ev = to_rank(&a, &ring, &whole, r, dv1, (int64_t)kv_heads * D);
        int64_t j;
        for (j = 0; j < rqn; j++)
            if (eq[j] != eq[j]) eq[j] = 0.0f;
        for (j = 0; j < rkn; j++) {
            if (ek[j] != ek[j]) ek[j] = 0.0f;
            if (ev[j] != ev[j]) ev[j] = 0.0f;
        }
        CHECK(compare(label, download(&a, DCP_DTYPE_FLOAT32, rdq[r], rqn), eq, rqn,
                      tolerance_scaled(tolerance_of(dtype), GPU_AGAINST_GPU)));
        CHECK(compare(label, download(&a, DCP_DTYPE_FLOAT32, rdk[r], rkn), ek, rkn,
                      tolerance_scaled(tolerance_of(dtype), GPU_AGAINST_GPU)));
        CHECK(compare(label, download(&a, DCP_DTYPE_FLOAT32, rdv[r], rkn), ev, rkn,
                      tolerance_scaled(tolerance_of(dtype), GPU_AGAINST_GPU)));
    }
    cuda_arena_free(&a);
}

static void virtual_ring(void)
{
    uint64_t stream = 7000;
    int32_t cp, causal;
    CUDA_TEST_REQUIRE_GPU();
    for (cp = 2; cp <= 8; cp *= 2)
        for (causal = 0; causal < 2; causal++) {
            /* both backward paths, each with and without the causal mask over the c values */
            const int32_t deterministic = cp == 4 ? causal : !causal;
            ring_run(cp, stream % 2 ? DCP_DTYPE_FLOAT16 : DCP_DTYPE_BFLOAT16, causal,
                     deterministic, stream);
            stream++;
        }
}

/* ===================================================== argument checks (no GPU needed) */

/* The host-side layout both argument tests use: one sequence of 10 valid tokens padded to 16
   at cp = 2, so 8 local rows. The arrays are host memory: only the checks read them. */
static const int32_t ARG_CU[] = {0, 10}, ARG_CU_PADDED[] = {0, 16};
static dcp_cuda_layout argument_layout(void)
{
    dcp_cuda_layout layout;
    memset(&layout, 0, sizeof layout);
    layout.thd.num_sequences = 1;
    layout.thd.cu_seqlens = ARG_CU;
    layout.thd.cu_seqlens_padded = ARG_CU_PADDED;
    layout.thd.cp = 2;
    layout.local_rows = 8;
    layout.max_seqlen_padded = 16;
    return layout;
}

/* The first 16-byte aligned byte of buffer (which has 16 bytes to spare). */
static char *aligned16(char *buffer) { return buffer + (16 - (uintptr_t)buffer % 16) % 16; }

/* The forward's path: a value outside the enum, the wgmma path where it cannot run (an out
   8- but not 16-byte aligned; no sm_90a device), and the availability query. Nothing here
   reaches a launch: every call fails its checks first. */
static void arguments_attention_path(const dcp_attention_params *p,
                                     const dcp_cuda_layout *layout, void *b, size_t bytes)
{
    dcp_error error;
    int32_t available = -1;
    CHECK_EQ(dcp_cuda_attention_forward_using((dcp_cuda_attention_path)7, p, layout, NULL,
                                              DCP_DTYPE_BFLOAT16, b, b, b, DCP_DTYPE_FLOAT32, b,
                                              (float *)b, b, bytes, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "path 7");
    CHECK_EQ(dcp_cuda_attention_forward_using(DCP_CUDA_ATTENTION_PATH_WGMMA, p, layout, NULL,
                                              DCP_DTYPE_BFLOAT16, b, b, b, DCP_DTYPE_FLOAT32,
                                              (char *)b + 8, (float *)b, b, bytes, NULL, &error),
             DCP_ERROR_UNSUPPORTED);
    CHECK_CONTAINS(error.message, "DCP_CUDA_ATTENTION_PATH_WGMMA needs");
    CHECK_EQ(dcp_cuda_attention_path_available(DCP_CUDA_ATTENTION_PATH_WGMMA, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_cuda_attention_path_available((dcp_cuda_attention_path)-1, &available, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "path -1");
    CHECK_EQ(dcp_cuda_attention_path_available(DCP_CUDA_ATTENTION_PATH_MMA_SYNC, &available,
                                               &error),
             DCP_OK);
    CHECK_EQ(available, 1);
    CHECK_EQ(dcp_cuda_attention_path_available(DCP_CUDA_ATTENTION_PATH_WGMMA, &available, &error),
             DCP_OK);
    if (!cuda_test_gpu()) CHECK_EQ(available, 0);
    if (!available) {
        CHECK_EQ(dcp_cuda_attention_forward_using(DCP_CUDA_ATTENTION_PATH_WGMMA, p, layout, NULL,
                                                  DCP_DTYPE_BFLOAT16, b, b, b, DCP_DTYPE_FLOAT32,
                                                  b, (float *)b, b, bytes, NULL, &error),
                 DCP_ERROR_UNSUPPORTED);
        CHECK_CONTAINS(error.message, "compute capability 9.0");
    }
}

static void arguments_attention(void)
{
    dcp_cuda_layout layout = argument_layout();
    dcp_attention_params p;
    dcp_attention_view view;
    dcp_error error;
    size_t bytes = 0;
    char buffer[256] = {0};
    void *b = aligned16(buffer);
    memset(&p, 0, sizeof p);
    memset(&view, 0, sizeof view);
    p.num_heads = 4;
    p.head_dim = 128;
    CHECK_EQ(dcp_cuda_attention_workspace_size(&p, &layout, &bytes, &error), DCP_OK);
    CHECK(bytes > 0);
    view.kv_rank = 2;
    CHECK_EQ(dcp_cuda_attention_forward(&p, &layout, &view, DCP_DTYPE_BFLOAT16, b, b, b,
                                        DCP_DTYPE_FLOAT32, b, (float *)b, b, bytes, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "view.kv_rank");
    view.kv_rank = 0;
    CHECK_EQ(dcp_cuda_attention_forward(&p, &layout, &view, DCP_DTYPE_FLOAT32, b, b, b,
                                        DCP_DTYPE_FLOAT32, b, (float *)b, b, bytes, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "dtype");
    CHECK_EQ(dcp_cuda_attention_forward(&p, &layout, &view, DCP_DTYPE_BFLOAT16, b, b, b,
                                        DCP_DTYPE_FLOAT16, b, (float *)b, b, bytes, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "out_dtype");
    CHECK_EQ(dcp_cuda_attention_forward(&p, &layout, &view, DCP_DTYPE_BFLOAT16, b, b, b,
                                        DCP_DTYPE_FLOAT32, b, (float *)b, b, 16, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "workspace");
    CHECK_EQ(dcp_cuda_attention_forward(&p, &layout, &view, DCP_DTYPE_BFLOAT16, (char *)b + 2, b,
                                        b, DCP_DTYPE_FLOAT32, b, (float *)b, b, bytes, NULL,
                                        &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "aligned");
    arguments_attention_path(&p, &layout, b, bytes);
    CHECK_EQ(dcp_cuda_attention_backward(&p, &layout, &view, DCP_DTYPE_BFLOAT16, b, b, b, b, b,
                                         (float *)b, (float *)b, (float *)b, (float *)b, 2, b,
                                         bytes, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "deterministic");
    p.head_dim = 96;
    CHECK_EQ(dcp_cuda_attention_forward(&p, &layout, &view, DCP_DTYPE_BFLOAT16, b, b, b,
                                        DCP_DTYPE_FLOAT32, b, (float *)b, b, bytes, NULL, &error),
             DCP_ERROR_UNSUPPORTED);
    CHECK_CONTAINS(error.message, "head_dim 96");
    p.head_dim = 128;
    p.num_kv_heads = 3;
    CHECK_EQ(dcp_cuda_attention_workspace_size(&p, &layout, &bytes, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "num_kv_heads");
    p.num_kv_heads = 0;
    {
        const void *ranks[2] = {b, NULL};
        void *outs[2] = {b, b};
        float *lses[2] = {(float *)b, (float *)b};
        CHECK_EQ(dcp_cuda_virtual_ring_forward(&p, &layout, DCP_DTYPE_BFLOAT16, ranks, ranks, ranks,
                                               DCP_DTYPE_FLOAT32, outs, lses, (float *)b,
                                               (float *)b, (float *)b, (float *)b, b, bytes, NULL,
                                               &error),
                 DCP_ERROR_INVALID_ARGUMENT);
        CHECK_CONTAINS(error.message, "q[1]");
    }
}

/* The backward's own argument checks: the deterministic flag and the 16-byte alignment its
   tile loads (cp.async) need of q, k, v and dout. */
static void arguments_attention_backward(void)
{
    dcp_cuda_layout layout = argument_layout();
    dcp_attention_params p;
    dcp_error error;
    size_t bytes = 0;
    char buffer[256] = {0};
    char *b = aligned16(buffer);
    float *f = (float *)b;
    memset(&p, 0, sizeof p);
    p.num_heads = 4;
    p.head_dim = 64;
    CHECK_EQ(dcp_cuda_attention_workspace_size(&p, &layout, &bytes, &error), DCP_OK);
    CHECK_EQ(dcp_cuda_attention_backward(&p, &layout, NULL, DCP_DTYPE_FLOAT16, b, b, b, b, b + 8,
                                         f, f, f, f, 0, b, bytes, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "16-byte aligned");
    CHECK_EQ(dcp_cuda_attention_backward(&p, &layout, NULL, DCP_DTYPE_FLOAT16, b, b + 8, b, b, b,
                                         f, f, f, f, 1, b, bytes, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "16-byte aligned");
    CHECK_EQ(dcp_cuda_attention_backward(&p, &layout, NULL, DCP_DTYPE_FLOAT16, b, b, b, b, b, f,
                                         f, f, f, -1, b, bytes, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "deterministic must be 0 or 1, got -1");
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"arguments_attention", arguments_attention},
        {"arguments_attention_backward", arguments_attention_backward},
        {"attention_steps", attention_steps},
        {"attention_ring_step_views", attention_ring_step_views},
        {"attention_long_pack", attention_long_pack},
        {"attention_long_pack_backward", attention_long_pack_backward},
        {"virtual_ring", virtual_ring},
    };
    if (cuda_test_gpu()) cuda_test_seed();
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
