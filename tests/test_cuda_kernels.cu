/* GPU tests of dcp_cuda.cu part 1: RoPE, causal conv1d, LSE merge and conversion, against
   the CPU references of dcp.h. Built by `make` everywhere; where no CUDA device exists the GPU
   tests report "no CUDA device: skipped" and only the host-side argument checks run.

   Every GPU test draws fresh random inputs (the run's seed is printed first; DCP_TEST_SEED=N
   repeats a run), never zeros; inputs hold NaN on padding rows that must never be read;
   outputs are poisoned with NaN (0xFF bytes) before each launch, so an element left unwritten
   fails. Results are compared by the one rule of tests/tolerance.h (norm-wise relative error
   plus a max-abs bound scaled to the data): element outputs by the tolerance of their dtype,
   sums over many rows (conv1d weight and bias gradients) by tolerance_sum(), LSEs by
   tolerance_lse(), initialisation and conversion bit-exact. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "cuda_test_util.h"

/* ================================================================================= RoPE */

typedef struct rope_case {
    dcp_dtype dtype;
    dcp_rope_style style;
    int32_t head_dim, rotary_dim; /* rotary_dim 0: head_dim */
    int32_t q_heads, k_heads;     /* 0: that tensor absent */
    int32_t cp;
    int32_t sequences;
    int64_t max_length;
    int use_table, in_place, backward;
    const int64_t *lengths;       /* optional fixed lengths (sequences of them) */
} rope_case;

static void rope_run(const rope_case *c, uint64_t stream)
{
    cuda_arena a;
    test_layout t;
    dcp_rng rng = cuda_test_rng(stream);
    dcp_rope_options host_options, device_options;
    double table[DCP_MAX_HEAD_DIM / 2];
    int32_t rank, i, rotary;
    int64_t rows, q_count, k_count;
    float *q = NULL, *k = NULL, *q_ref = NULL, *k_ref = NULL;
    void *dq = NULL, *dk = NULL, *dq_out = NULL, *dk_out = NULL;
    dcp_error error;
    char label[160];
    memset(&a, 0, sizeof a);
    if (c->lengths) layout_make(&t, &a, c->lengths, c->sequences, c->cp, NULL);
    else layout_random(&t, &a, &rng, c->sequences, c->max_length, c->cp);
    rank = (int32_t)dcp_rng_below(&rng, (uint64_t)c->cp);
    rows = t.device.local_rows;
    rotary = c->rotary_dim ? c->rotary_dim : c->head_dim;
    q_count = rows * c->q_heads * c->head_dim;
    k_count = rows * c->k_heads * c->head_dim;
    memset(&host_options, 0, sizeof host_options);
    host_options.style = c->style;
    host_options.rotary_dim = c->rotary_dim;
    host_options.theta_base = dcp_rng_below(&rng, 2) ? 10000.0 : 500000.0;
    device_options = host_options;
    if (c->use_table) {
        const double scale = 0.25 + 0.75 * dcp_rng_uniform(&rng); /* a YaRN-like rescale */
        for (i = 0; i < rotary / 2; i++)
            table[i] = scale * pow(host_options.theta_base, -2.0 * i / rotary);
        host_options.inv_freq = table;
        device_options.inv_freq =
            (const double *)upload_bytes(&a, table, (size_t)(rotary / 2) * sizeof(double));
    }
    snprintf(label, sizeof label, "rope %s %s %s d%d r%d q%d k%d cp%d rank%d%s%s",
             c->backward ? "bwd" : "fwd", dtype_name(c->dtype),
             c->style == DCP_ROPE_INTERLEAVED ? "interleaved" : "rotate-half", (int)c->head_dim,
             (int)rotary, (int)c->q_heads, (int)c->k_heads, (int)c->cp, (int)rank,
             c->use_table ? " table" : "", c->in_place ? " in-place" : "");
    if (c->q_heads) {
        q = random_values(&a, &rng, c->dtype, q_count);
        nan_padding_rows(&t, rank, q, (int64_t)c->q_heads * c->head_dim);
        q_ref = host_floats(&a, q_count);
        CHECK_EQ((c->backward ? dcp_rope_backward : dcp_rope_forward)(
                     &host_options, &t.host, rank, c->q_heads, c->head_dim, q, q_ref, &error),
                 DCP_OK);
        dq = upload(&a, c->dtype, q, q_count);
        dq_out = c->in_place ? dq : dev_alloc(&a, (size_t)q_count * dtype_size(c->dtype));
    }
    if (c->k_heads) {
        k = random_values(&a, &rng, c->dtype, k_count);
        nan_padding_rows(&t, rank, k, (int64_t)c->k_heads * c->head_dim);
        k_ref = host_floats(&a, k_count);
        CHECK_EQ((c->backward ? dcp_rope_backward : dcp_rope_forward)(
                     &host_options, &t.host, rank, c->k_heads, c->head_dim, k, k_ref, &error),
                 DCP_OK);
        dk = upload(&a, c->dtype, k, k_count);
        dk_out = c->in_place ? dk : dev_alloc(&a, (size_t)k_count * dtype_size(c->dtype));
    }
    {
        const dcp_status status =
            (c->backward ? dcp_cuda_rope_backward : dcp_cuda_rope_forward)(
                &device_options, &t.device, rank, c->dtype, c->head_dim, c->q_heads, dq,
                dq_out, c->k_heads, dk, dk_out, NULL, &error);
        if (status != DCP_OK) fprintf(stderr, "%s: %s\n", label, error.message);
        CHECK_EQ(status, DCP_OK);
    }
    if (c->q_heads)
        CHECK(compare(label, download(&a, c->dtype, dq_out, q_count), q_ref, q_count,
                      tolerance_of(c->dtype)));
    if (c->k_heads)
        CHECK(compare(label, download(&a, c->dtype, dk_out, k_count), k_ref, k_count,
                      tolerance_of(c->dtype)));
    cuda_arena_free(&a);
}

static void rope_shapes(void)
{
    static const dcp_dtype dtypes[] = {DCP_DTYPE_FLOAT32, DCP_DTYPE_BFLOAT16, DCP_DTYPE_FLOAT16};
    /* head_dim, rotary_dim: full, partial, and sizes that force the general (unaligned) path */
    static const int32_t dims[][2] = {{128, 0}, {64, 32}, {128, 64}, {36, 20}, {6, 2}, {80, 0}};
    static const int32_t cps[] = {1, 2, 4, 8};
    uint64_t stream = 100;
    int d, s, style, b;
    CUDA_TEST_REQUIRE_GPU();
    for (d = 0; d < 3; d++)
        for (s = 0; s < 6; s++)
            for (style = 0; style < 2; style++)
                for (b = 0; b < 2; b++) {
                    rope_case c;
                    memset(&c, 0, sizeof c);
                    c.dtype = dtypes[d];
                    c.style = (dcp_rope_style)style;
                    c.head_dim = dims[s][0];
                    c.rotary_dim = dims[s][1];
                    c.q_heads = 1 + (int32_t)(stream % 5);
                    c.k_heads = 1 + (int32_t)(stream % 2);
                    c.cp = cps[stream % 4];
                    c.sequences = 1 + (int32_t)(stream % 9);
                    c.max_length = cuda_test_size(300, 100);
                    c.backward = b;
                    c.use_table = (int)(stream % 3 == 0);
                    c.in_place = (int)(stream % 4 == 1);
                    rope_run(&c, stream++);
                }
}

/* One tensor absent (each way), and many one-token sequences. */
static void rope_single_tensor(void)
{
    rope_case c;
    CUDA_TEST_REQUIRE_GPU();
    memset(&c, 0, sizeof c);
    c.dtype = DCP_DTYPE_BFLOAT16;
    c.head_dim = 128;
    c.q_heads = 8;
    c.cp = 2;
    c.sequences = 40;
    c.max_length = 3;
    rope_run(&c, 200);
    c.q_heads = 0;
    c.k_heads = 3;
    c.style = DCP_ROPE_INTERLEAVED;
    c.dtype = DCP_DTYPE_FLOAT16;
    rope_run(&c, 201);
}

/* A single 64K-token sequence (positions to 65535), and one of 128K on 2 ranks (positions to
   131071): float32 must stay within 1e-6 of the double reference at the far end (8K and 16K
   on the CPU execution model). */
static void rope_long_sequence(void)
{
    const int64_t length64[] = {cuda_test_size(65536, 8192)};
    const int64_t length128[] = {cuda_test_size(131072, 16384)};
    rope_case c;
    CUDA_TEST_REQUIRE_GPU();
    memset(&c, 0, sizeof c);
    c.dtype = DCP_DTYPE_FLOAT32;
    c.head_dim = 128;
    c.q_heads = 2;
    c.k_heads = 1;
    c.cp = 1;
    c.sequences = 1;
    c.lengths = length64;
    rope_run(&c, 300);
    c.cp = 2;
    c.lengths = length128;
    c.style = DCP_ROPE_INTERLEAVED;
    c.backward = 1;
    rope_run(&c, 301);
    c.dtype = DCP_DTYPE_BFLOAT16;
    c.use_table = 1;
    rope_run(&c, 302);
}

/* =============================================================================== conv1d */

typedef struct conv_case {
    dcp_dtype dtype;
    int32_t channels, width, silu, bias;
    int32_t sequences;
    int64_t max_length;
    int64_t tail; /* rows after the last sequence */
    const int64_t *lengths;
    const int32_t *extra_pad; /* padding rows per sequence (NULL: none) */
    int32_t misalign;         /* 1: tensors start one element past an aligned address */
} conv_case;

/* A device copy of count host values in dtype starting `shift` elements into its buffer. */
static void *upload_shifted(cuda_arena *a, dcp_dtype dtype, const float *values, int64_t count,
                            int32_t shift)
{
    float *staged = host_floats(a, count + shift);
    int64_t i;
    for (i = 0; i < shift; i++) staged[i] = 0.0f;
    memcpy(staged + shift, values, (size_t)count * sizeof(float));
    return (unsigned char *)upload(a, dtype, staged, count + shift) + shift * dtype_size(dtype);
}

/* A poisoned device buffer of count elements of dtype, `shift` elements into its allocation. */
static void *dev_shifted(cuda_arena *a, dcp_dtype dtype, int64_t count, int32_t shift)
{
    return (unsigned char *)dev_alloc(a, (size_t)(count + shift) * dtype_size(dtype)) +
           shift * dtype_size(dtype);
}

static void conv_run(const conv_case *c, uint64_t stream)
{
    cuda_arena a;
    test_layout t;
    dcp_rng rng = cuda_test_rng(stream);
    dcp_conv1d_params p;
    dcp_error error;
    int64_t total, count, i;
    float *x, *w, *bias = NULL, *dy, *y_ref, *dx_ref, *dw_ref, *db_ref = NULL;
    void *dxv, *dyv, *dy_dev, *ddx;
    float *dw_dev, *db_dev = NULL, *w_dev, *b_dev = NULL, *dw_again;
    void *workspace;
    size_t workspace_bytes = 0;
    char label[160];
    memset(&a, 0, sizeof a);
    if (c->lengths) layout_make(&t, &a, c->lengths, c->sequences, 1, c->extra_pad);
    else layout_random(&t, &a, &rng, c->sequences, c->max_length, 1);
    memset(&p, 0, sizeof p);
    p.channels = c->channels;
    p.width = c->width;
    p.silu = c->silu;
    total = t.device.local_rows + c->tail;
    count = total * c->channels;
    snprintf(label, sizeof label, "conv1d %s C%d W%d silu%d bias%d rows%lld%s",
             dtype_name(c->dtype), (int)c->channels, (int)c->width, (int)c->silu, (int)c->bias,
             (long long)total, c->misalign ? " misaligned" : "");
    x = random_values(&a, &rng, c->dtype, count);
    dy = random_values(&a, &rng, c->dtype, count);
    nan_padding_rows(&t, 0, x, c->channels);
    nan_padding_rows(&t, 0, dy, c->channels);
    for (i = t.device.local_rows * c->channels; i < count; i++) x[i] = dy[i] = NAN; /* tail */
    w = random_values(&a, &rng, DCP_DTYPE_FLOAT32, (int64_t)c->channels * c->width);
    if (c->bias) bias = random_values(&a, &rng, DCP_DTYPE_FLOAT32, c->channels);
    y_ref = host_floats(&a, count);
    dx_ref = host_floats(&a, count);
    dw_ref = host_floats(&a, (int64_t)c->channels * c->width);
    db_ref = host_floats(&a, c->channels);
    CHECK_EQ(dcp_conv1d_forward(&p, &t.host, total, x, w, bias, y_ref, &error), DCP_OK);
    CHECK_EQ(dcp_conv1d_backward(&p, &t.host, total, x, w, bias, dy, dx_ref, dw_ref, db_ref,
                                 &error),
             DCP_OK);

    dxv = upload_shifted(&a, c->dtype, x, count, c->misalign);
    dy_dev = upload_shifted(&a, c->dtype, dy, count, c->misalign);
    w_dev = (float *)upload(&a, DCP_DTYPE_FLOAT32, w, (int64_t)c->channels * c->width);
    if (bias) b_dev = (float *)upload(&a, DCP_DTYPE_FLOAT32, bias, c->channels);
    dyv = dev_shifted(&a, c->dtype, count, c->misalign);
    ddx = dev_shifted(&a, c->dtype, count, c->misalign);
    dw_dev = (float *)dev_alloc(&a, (size_t)c->channels * c->width * sizeof(float));
    db_dev = (float *)dev_alloc(&a, (size_t)c->channels * sizeof(float));
    CHECK_EQ(dcp_cuda_conv1d_workspace_size(&p, &workspace_bytes, &error), DCP_OK);
    workspace = dev_alloc(&a, workspace_bytes);

    CHECK_EQ(dcp_cuda_conv1d_forward(&p, &t.device, total, c->dtype, dxv, w_dev, b_dev, dyv, NULL,
                                     &error),
             DCP_OK);
    CHECK(compare(label, download(&a, c->dtype, dyv, count), y_ref, count,
                  tolerance_of(c->dtype)));
    /* backward; dbias is asked for even without a bias (the gradient a bias would get) */
    CHECK_EQ(dcp_cuda_conv1d_backward(&p, &t.device, total, c->dtype, dxv, w_dev, b_dev, dy_dev,
                                      ddx, dw_dev, db_dev, workspace, workspace_bytes, NULL,
                                      &error),
             DCP_OK);
    CHECK(compare(label, download(&a, c->dtype, ddx, count), dx_ref, count,
                  tolerance_of(c->dtype)));
    CHECK(compare("conv1d dweight", download(&a, DCP_DTYPE_FLOAT32, dw_dev,
                                             (int64_t)c->channels * c->width),
                  dw_ref, (int64_t)c->channels * c->width, tolerance_sum()));
    CHECK(compare("conv1d dbias", download(&a, DCP_DTYPE_FLOAT32, db_dev, c->channels), db_ref,
                  c->channels, tolerance_sum()));
    /* deterministic: a second run gives the same bits */
    dw_again = download(&a, DCP_DTYPE_FLOAT32, dw_dev, (int64_t)c->channels * c->width);
    poison(dw_dev, (size_t)c->channels * c->width * sizeof(float));
    CHECK_EQ(dcp_cuda_conv1d_backward(&p, &t.device, total, c->dtype, dxv, w_dev, b_dev, dy_dev,
                                      ddx, dw_dev, db_dev, workspace, workspace_bytes, NULL,
                                      &error),
             DCP_OK);
    CHECK(same_bits(download(&a, DCP_DTYPE_FLOAT32, dw_dev, (int64_t)c->channels * c->width),
                    dw_again, (int64_t)c->channels * c->width));
    cuda_arena_free(&a);
}

static void conv1d_shapes(void)
{
    static const dcp_dtype dtypes[] = {DCP_DTYPE_FLOAT32, DCP_DTYPE_BFLOAT16, DCP_DTYPE_FLOAT16};
    /* vector and general paths, one and several channel blocks */
    static const int32_t channels[] = {64, 40, 36, 7, 264, 512};
    uint64_t stream = 1000;
    int d, ch, width;
    CUDA_TEST_REQUIRE_GPU();
    for (d = 0; d < TEST_COUNT(dtypes); d++)
        for (ch = 0; ch < TEST_COUNT(channels); ch++)
            for (width = 1; width <= DCP_CUDA_CONV1D_MAX_WIDTH; width++) {
                conv_case c;
                memset(&c, 0, sizeof c);
                c.dtype = dtypes[d];
                c.channels = channels[ch];
                c.width = width;
                c.silu = (int32_t)(stream % 2);
                c.bias = (int32_t)(stream % 3 != 0);
                c.sequences = 1 + (int32_t)(stream % 12);
                c.max_length = stream % 5 == 0 ? cuda_test_size(2000, 400) : cuda_test_size(300, 60);
                c.tail = (int64_t)(stream % 4) * 5;
                conv_run(&c, stream++);
            }
}

/* One-token sequences (no tap has a predecessor) and a single 64K-token sequence (many row
   blocks and all 64 slices of the backward; 4K on the CPU execution model, still 64 slices). */
static void conv1d_edges(void)
{
    static const int64_t ones[] = {1, 1, 2, 1, 3, 1};
    const int64_t long_one[] = {cuda_test_size(65536, 4096)};
    conv_case c;
    CUDA_TEST_REQUIRE_GPU();
    memset(&c, 0, sizeof c);
    c.dtype = DCP_DTYPE_BFLOAT16;
    c.channels = 128;
    c.width = 4;
    c.silu = 1;
    c.bias = 1;
    c.sequences = 6;
    c.lengths = ones;
    c.tail = 3;
    conv_run(&c, 2000);
    c.sequences = 1;
    c.lengths = long_one;
    c.tail = 0;
    c.dtype = DCP_DTYPE_FLOAT32;
    conv_run(&c, 2001);
    c.dtype = DCP_DTYPE_FLOAT16;
    c.silu = 0;
    c.width = 3;
    conv_run(&c, 2002);
}

/* Sequence starts, valid ends and padding on both sides of the kernels' row runs (runs of
   8 rows at these sizes, so boundaries land before, on and after run edges), every width,
   channel counts with and without a vector path (and a misaligned tensor, which
   takes the 1-channel path), every dtype, and token counts of 1 to 3 and of padding only. */
static void conv1d_boundaries(void)
{
    static const int64_t lengths[] = {15, 16, 17, 1, 2, 3, 31, 33, 47, 5, 64, 1};
    static const int32_t extra[] = {1, 0, 15, 2, 0, 0, 1, 16, 0, 3, 0, 17};
    static const int64_t tiny[] = {1, 2};
    static const int32_t channels[] = {64, 7, 12, 36, 264};
    static const dcp_dtype dtypes[] = {DCP_DTYPE_FLOAT32, DCP_DTYPE_BFLOAT16, DCP_DTYPE_FLOAT16};
    uint64_t stream = 5000;
    int d, ch, width;
    CUDA_TEST_REQUIRE_GPU();
    for (d = 0; d < TEST_COUNT(dtypes); d++)
        for (ch = 0; ch < TEST_COUNT(channels); ch++)
            for (width = 1; width <= DCP_CUDA_CONV1D_MAX_WIDTH; width++) {
                conv_case c;
                memset(&c, 0, sizeof c);
                c.dtype = dtypes[d];
                c.channels = channels[ch];
                c.width = width;
                c.silu = (int32_t)(stream % 2);
                c.bias = (int32_t)(stream % 3 != 0);
                c.sequences = 12;
                c.lengths = lengths;
                c.extra_pad = extra;
                c.tail = (int64_t)(stream % 3) * 7;
                c.misalign = (int32_t)(stream % 5 == 0);
                conv_run(&c, stream++);
            }
    for (d = 0; d < 3; d++) { /* 1, 2 (one of them the tail) and 3 rows; rows of padding only */
        conv_case c;
        memset(&c, 0, sizeof c);
        c.dtype = dtypes[d];
        c.channels = 16;
        c.width = 4;
        c.silu = 1;
        c.bias = 1;
        c.lengths = tiny;
        c.sequences = 1;
        conv_run(&c, stream++);
        c.tail = 1;
        conv_run(&c, stream++);
        c.sequences = 2; /* both of tiny's lengths */
        c.tail = 0;
        conv_run(&c, stream++);
        c.sequences = 0;
        c.tail = 5;
        conv_run(&c, stream++);
    }
}

/* The launch geometry (host-only, so it runs without a GPU): the runs cover the rows
   exactly, no slice is empty, channel groups cover the channels, the backward's slices fit
   the workspace, vector paths only where the channel count allows, and the answer is a
   function of the shape alone. */
static void conv1d_geometry(void)
{
    static const int64_t rows[] = {0, 1, 2, 15, 16, 17, 1000, 4097, 65536, 1000003, 3000017};
    static const int32_t channels[] = {1, 7, 8, 12, 36, 64, 264, 4096, 8192, 12345};
    static const dcp_dtype dtypes[] = {DCP_DTYPE_FLOAT32, DCP_DTYPE_BFLOAT16, DCP_DTYPE_FLOAT16};
    dcp_cuda_conv1d_geometry g, again;
    dcp_conv1d_params p;
    dcp_error error;
    size_t workspace = 0;
    int r, ch, d, backward, vector;
    memset(&p, 0, sizeof p);
    for (r = 0; r < (int)(sizeof rows / sizeof rows[0]); r++)
        for (ch = 0; ch < (int)(sizeof channels / sizeof channels[0]); ch++)
            for (d = 0; d < 3; d++)
                for (backward = 0; backward < 2; backward++)
                    for (vector = 0; vector < 2; vector++) {
                        const int64_t T = rows[r];
                        const int64_t bytes = (int64_t)dtype_size(dtypes[d]);
                        int64_t per_group, per_slice;
                        p.channels = channels[ch];
                        p.width = 1 + (r + ch + d) % DCP_CUDA_CONV1D_MAX_WIDTH;
                        p.silu = 1;
                        CHECK_EQ(dcp_cuda_conv1d_launch_geometry(&p, T, dtypes[d], backward,
                                                                 vector, &g, &error),
                                 DCP_OK);
                        CHECK_EQ(dcp_cuda_conv1d_launch_geometry(&p, T, dtypes[d], backward,
                                                                 vector, &again, &error),
                                 DCP_OK);
                        CHECK(memcmp(&g, &again, sizeof g) == 0);
                        /* 1, or a 16-byte vector (8 bytes: the backward of 16-bit dtypes) */
                        CHECK(g.vector_width == 1 ||
                              (vector && g.vector_width * bytes ==
                                             (backward && bytes == 2 ? 8 : 16)));
                        CHECK(p.channels % g.vector_width == 0);
                        CHECK(g.vector_width > 1 || !vector ||
                              p.channels % ((backward && bytes == 2 ? 8 : 16) / bytes) != 0);
                        per_group = 32 * (int64_t)g.vector_width;
                        CHECK((int64_t)g.channel_groups * per_group >= p.channels);
                        CHECK((int64_t)(g.channel_groups - 1) * per_group < p.channels);
                        if (T == 0) {
                            CHECK_EQ(g.slices, 0);
                            continue;
                        }
                        CHECK(g.rows_per_warp >= 1 && g.warps_per_block >= 1);
                        per_slice = g.rows_per_warp * g.warps_per_block;
                        CHECK(g.slices * per_slice >= T);
                        CHECK((g.slices - 1) * per_slice < T);
                        if (backward) {
                            CHECK(g.slices <= DCP_CUDA_CONV1D_SLICES);
                            CHECK_EQ(dcp_cuda_conv1d_workspace_size(&p, &workspace, &error),
                                     DCP_OK);
                            CHECK((int64_t)workspace >=
                                  g.slices * (p.width + 1) * (int64_t)p.channels * 4);
                        }
                    }
    p.channels = 64;
    p.width = 4;
    CHECK_EQ(dcp_cuda_conv1d_launch_geometry(&p, 100, DCP_DTYPE_BFLOAT16, 0, 1, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "geometry");
    CHECK_EQ(dcp_cuda_conv1d_launch_geometry(&p, -1, DCP_DTYPE_BFLOAT16, 0, 1, &g, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "total_rows");
    CHECK_EQ(dcp_cuda_conv1d_launch_geometry(&p, 100, (dcp_dtype)5, 0, 1, &g, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "dtype");
    p.width = DCP_CONV1D_MAX_WIDTH + 1;
    CHECK_EQ(dcp_cuda_conv1d_launch_geometry(&p, 100, DCP_DTYPE_BFLOAT16, 0, 1, &g, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "width");
}

/* ========================================================================== LSE merge */

static void merge_run(int32_t cp, int32_t heads, int32_t dim, dcp_dtype out_dtype, int in_place,
                      uint64_t stream)
{
    cuda_arena a;
    test_layout t;
    dcp_rng rng = cuda_test_rng(stream);
    dcp_attention_params p;
    dcp_error error;
    int64_t rows, values, lses, i;
    float *acc_out, *acc_lse, *dev_acc_out, *dev_acc_lse, *dev_part, *dev_part_lse, *dev_lse;
    void *dev_out;
    int32_t rank, step;
    char label[128];
    memset(&a, 0, sizeof a);
    layout_random(&t, &a, &rng, 1 + (int32_t)dcp_rng_below(&rng, 10), 200, cp);
    rank = (int32_t)dcp_rng_below(&rng, (uint64_t)cp);
    memset(&p, 0, sizeof p);
    p.num_heads = heads;
    p.head_dim = dim;
    rows = t.device.local_rows;
    values = rows * heads * dim;
    lses = rows * heads;
    snprintf(label, sizeof label, "merge cp%d h%d d%d %s%s", (int)cp, (int)heads, (int)dim,
             dtype_name(out_dtype), in_place ? " in-place" : "");
    acc_out = host_floats(&a, values);
    acc_lse = host_floats(&a, lses);
    CHECK_EQ(dcp_attention_acc_init(&p, &t.host, acc_out, acc_lse, &error), DCP_OK);
    dev_acc_out = (float *)dev_alloc(&a, (size_t)values * 4);
    dev_acc_lse = (float *)dev_alloc(&a, (size_t)lses * 4);
    CHECK_EQ(dcp_cuda_acc_init(&p, &t.device, dev_acc_out, dev_acc_lse, NULL, &error), DCP_OK);
    CHECK(compare(label, download(&a, DCP_DTYPE_FLOAT32, dev_acc_out, values), acc_out, values,
                  tolerance_exact()));
    CHECK(compare(label, download(&a, DCP_DTYPE_FLOAT32, dev_acc_lse, lses), acc_lse, lses,
                  tolerance_exact()));
    /* four partials on random halves; LSEs around +-10 with a fifth of them -inf */
    for (step = 0; step < 4; step++) {
        const dcp_half half = cp == 1 ? DCP_HALF_ALL : (dcp_half)dcp_rng_below(&rng, 3);
        float *part = random_values(&a, &rng, DCP_DTYPE_FLOAT32, values);
        float *part_lse = host_floats(&a, lses);
        for (i = 0; i < lses; i++)
            part_lse[i] = dcp_rng_below(&rng, 5) == 0 ? -INFINITY
                                                      : (float)(4.0 * dcp_rng_normal(&rng));
        CHECK_EQ(dcp_attention_acc_merge(&p, &t.host, half, part, part_lse, acc_out, acc_lse,
                                         &error),
                 DCP_OK);
        dev_part = (float *)upload(&a, DCP_DTYPE_FLOAT32, part, values);
        dev_part_lse = (float *)upload(&a, DCP_DTYPE_FLOAT32, part_lse, lses);
        CHECK_EQ(dcp_cuda_acc_merge(&p, &t.device, half, dev_part, dev_part_lse, dev_acc_out,
                                    dev_acc_lse, NULL, &error),
                 DCP_OK);
    }
    CHECK(compare(label, download(&a, DCP_DTYPE_FLOAT32, dev_acc_out, values), acc_out, values,
                  tolerance_of(DCP_DTYPE_FLOAT32)));
    CHECK(compare(label, download(&a, DCP_DTYPE_FLOAT32, dev_acc_lse, lses), acc_lse, lses,
                  tolerance_lse()));
    /* finalize into out_dtype; the reference's out in float, rounded as the GPU stores it */
    {
        float *out_ref = host_floats(&a, values), *lse_ref = host_floats(&a, lses);
        CHECK_EQ(dcp_attention_acc_finalize(&p, &t.host, rank, acc_out, acc_lse, out_ref,
                                            lse_ref, &error),
                 DCP_OK);
        dev_out = in_place ? (void *)dev_acc_out
                           : dev_alloc(&a, (size_t)values * dtype_size(out_dtype));
        dev_lse = in_place ? dev_acc_lse : (float *)dev_alloc(&a, (size_t)lses * 4);
        CHECK_EQ(dcp_cuda_acc_finalize(&p, &t.device, rank, dev_acc_out, dev_acc_lse, out_dtype,
                                       dev_out, dev_lse, NULL, &error),
                 DCP_OK);
        CHECK(compare(label, download(&a, out_dtype, dev_out, values), out_ref, values,
                      tolerance_of(out_dtype)));
        CHECK(compare(label, download(&a, DCP_DTYPE_FLOAT32, dev_lse, lses), lse_ref, lses,
                      tolerance_lse()));
    }
    cuda_arena_free(&a);
}

static void merge_shapes(void)
{
    static const int32_t dims[] = {128, 64, 36, 5, 256};
    static const dcp_dtype dtypes[] = {DCP_DTYPE_FLOAT32, DCP_DTYPE_BFLOAT16, DCP_DTYPE_FLOAT16};
    uint64_t stream = 3000;
    int cp, d, o;
    CUDA_TEST_REQUIRE_GPU();
    for (cp = 1; cp <= 8; cp *= 2)
        for (d = 0; d < 5; d++)
            for (o = 0; o < 3; o++) {
                merge_run(cp, 1 + (int32_t)(stream % 4), dims[d], dtypes[o], 0, stream);
                stream++;
            }
    merge_run(2, 3, 128, DCP_DTYPE_FLOAT32, 1, stream++);
    merge_run(1, 2, 36, DCP_DTYPE_FLOAT32, 1, stream++);
}

/* ============================================================================ conversion */

static void convert_values(void)
{
    const int64_t counts[] = {1, 7, 8, 9, 4096, cuda_test_size(1000003, 100003)};
    static const dcp_dtype dtypes[] = {DCP_DTYPE_FLOAT32, DCP_DTYPE_BFLOAT16, DCP_DTYPE_FLOAT16};
    dcp_rng rng;
    dcp_error error;
    int c, d, offset;
    CUDA_TEST_REQUIRE_GPU();
    rng = cuda_test_rng(4000);
    for (c = 0; c < 6; c++)
        for (d = 0; d < 3; d++)
            for (offset = 0; offset < 2; offset++) { /* offset 1: misaligned pointers */
                cuda_arena a;
                const int64_t n = counts[c];
                float *in, *expected;
                unsigned char *out;
                int64_t i;
                memset(&a, 0, sizeof a);
                in = random_values(&a, &rng, DCP_DTYPE_FLOAT32, n + 1);
                expected = host_floats(&a, n);
                for (i = 0; i < n; i++) expected[i] = round_to(dtypes[d], in[i + offset]);
                {
                    float *dev_in = (float *)upload(&a, DCP_DTYPE_FLOAT32, in, n + 1);
                    out = (unsigned char *)dev_alloc(&a, (size_t)(n + 1) * dtype_size(dtypes[d]));
                    CHECK_EQ(dcp_cuda_convert(dev_in + offset, dtypes[d],
                                              out + offset * dtype_size(dtypes[d]), n, NULL,
                                              &error),
                             DCP_OK);
                    CHECK(compare("convert",
                                  download(&a, dtypes[d], out + offset * dtype_size(dtypes[d]), n),
                                  expected, n, tolerance_exact()));
                }
                cuda_arena_free(&a);
            }
    CHECK_EQ(dcp_cuda_convert(NULL, DCP_DTYPE_BFLOAT16, NULL, 0, NULL, &error), DCP_OK);
}

/* Finalize over more row tiles than the grid has blocks (the blocks stride), on the vector
   path (heads x dim a multiple of 8) and the 1-value one, at cp 2 with padding rows in
   both halves. */
static void finalize_tiles(void)
{
    static const dcp_dtype dtypes[] = {DCP_DTYPE_BFLOAT16, DCP_DTYPE_FLOAT16, DCP_DTYPE_FLOAT32};
    static const int32_t shapes[][2] = {{1, 8}, {3, 36}};
    int64_t lengths[CUDA_TEST_MAX_SEQUENCES];
    uint64_t stream = 6000;
    int s, d, i;
    CUDA_TEST_REQUIRE_GPU();
    for (s = 0; s < 2; s++)
        for (d = 0; d < 3; d++) {
            cuda_arena a;
            test_layout t;
            dcp_rng rng = cuda_test_rng(stream++);
            dcp_attention_params p;
            dcp_error error;
            const int32_t sequences = s == 0 ? 64 : 9;
            int64_t rows, values, lses, j;
            int32_t rank;
            float *acc, *acc_lse, *out_ref, *lse_ref;
            void *dev_out;
            float *dev_lse;
            char label[96];
            memset(&a, 0, sizeof a);
            /* s 0: > 8192 tiles of 64 rows (1 x 8 values a row); s 1: rows of 108 values */
            for (i = 0; i < sequences; i++)
                lengths[i] = (s == 0 ? 16500 : 900) + (int64_t)dcp_rng_below(&rng, 700);
            layout_make(&t, &a, lengths, sequences, 2, NULL);
            rank = (int32_t)dcp_rng_below(&rng, 2);
            memset(&p, 0, sizeof p);
            p.num_heads = shapes[s][0];
            p.head_dim = shapes[s][1];
            rows = t.device.local_rows;
            values = rows * p.num_heads * p.head_dim;
            lses = rows * p.num_heads;
            snprintf(label, sizeof label, "finalize h%d d%d %s rows%lld", (int)p.num_heads,
                     (int)p.head_dim, dtype_name(dtypes[d]), (long long)rows);
            acc = random_values(&a, &rng, DCP_DTYPE_FLOAT32, values);
            acc_lse = random_values(&a, &rng, DCP_DTYPE_FLOAT32, lses);
            out_ref = host_floats(&a, values);
            lse_ref = host_floats(&a, lses);
            CHECK_EQ(dcp_attention_acc_finalize(&p, &t.host, rank, acc, acc_lse, out_ref, lse_ref,
                                                &error),
                     DCP_OK);
            for (j = 0; j < values; j++) out_ref[j] = round_to(dtypes[d], out_ref[j]);
            dev_out = dev_alloc(&a, (size_t)values * dtype_size(dtypes[d]));
            dev_lse = (float *)dev_alloc(&a, (size_t)lses * 4);
            CHECK_EQ(dcp_cuda_acc_finalize(&p, &t.device, rank,
                                           (const float *)upload(&a, DCP_DTYPE_FLOAT32, acc, values),
                                           (const float *)upload(&a, DCP_DTYPE_FLOAT32, acc_lse, lses),
                                           dtypes[d], dev_out, dev_lse, NULL, &error),
                     DCP_OK);
            CHECK(compare(label, download(&a, dtypes[d], dev_out, values), out_ref, values,
                          tolerance_exact()));
            CHECK(compare(label, download(&a, DCP_DTYPE_FLOAT32, dev_lse, lses), lse_ref, lses,
                          tolerance_exact()));
            cuda_arena_free(&a);
        }
}

/* A conversion longer than the grid's blocks cover in one pass (they stride), with a tail of
   count % 8 values: 134M values, too many for the CPU execution model (finalize_tiles runs the
   same kind of grid-stride loop there). */
static void convert_grid_stride(void)
{
    const int64_t n = (int64_t)8192 * 256 * 4 * 8 * 2 + 5;
    cuda_arena a;
    dcp_rng rng;
    dcp_error error;
    float *in, *expected;
    void *out;
    int64_t i;
    CUDA_TEST_REQUIRE_GPU();
    if (cuda_test_model()) {
        test_skip("134M values: a GPU's size, not the CPU execution model's");
        return;
    }
    rng = cuda_test_rng(6100);
    memset(&a, 0, sizeof a);
    in = random_values(&a, &rng, DCP_DTYPE_FLOAT32, n);
    expected = host_floats(&a, n);
    for (i = 0; i < n; i++) expected[i] = round_to(DCP_DTYPE_BFLOAT16, in[i]);
    out = dev_alloc(&a, (size_t)n * 2);
    CHECK_EQ(dcp_cuda_convert((const float *)upload(&a, DCP_DTYPE_FLOAT32, in, n),
                              DCP_DTYPE_BFLOAT16, out, n, NULL, &error),
             DCP_OK);
    CHECK(compare("convert grid-stride", download(&a, DCP_DTYPE_BFLOAT16, out, n), expected, n,
                  tolerance_exact()));
    cuda_arena_free(&a);
}

/* ===================================================== argument checks (no GPU needed) */

/* A layout whose device pointers are never dereferenced: every call below fails its host
   checks before anything is enqueued. */
static dcp_cuda_layout fake_layout(int32_t cp)
{
    static const int32_t cu[] = {0, 10}, cu_padded[] = {0, 16};
    dcp_cuda_layout layout;
    memset(&layout, 0, sizeof layout);
    layout.thd.num_sequences = 1;
    layout.thd.cu_seqlens = cu;
    layout.thd.cu_seqlens_padded = cu_padded;
    layout.thd.cp = cp;
    layout.local_rows = 16 / cp;
    layout.max_seqlen_padded = 16;
    return layout;
}

static void arguments_rope(void)
{
    dcp_cuda_layout layout = fake_layout(2);
    dcp_rope_options o;
    dcp_error error;
    char buffer[64] = {0};
    void *p = buffer;
    memset(&o, 0, sizeof o);
    CHECK_EQ(dcp_cuda_rope_forward(&o, NULL, 0, DCP_DTYPE_BFLOAT16, 64, 1, p, p, 0, NULL, NULL,
                                   NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "layout");
    CHECK_EQ(dcp_cuda_rope_forward(&o, &layout, 2, DCP_DTYPE_BFLOAT16, 64, 1, p, p, 0, NULL,
                                   NULL, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "rank");
    CHECK_EQ(dcp_cuda_rope_forward(&o, &layout, 0, (dcp_dtype)7, 64, 1, p, p, 0, NULL, NULL, NULL,
                                   &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "dtype");
    CHECK_EQ(dcp_cuda_rope_forward(&o, &layout, 0, DCP_DTYPE_BFLOAT16, 64, 1, p, NULL, 0, NULL,
                                   NULL, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "q_out");
    CHECK_EQ(dcp_cuda_rope_backward(&o, &layout, 0, DCP_DTYPE_BFLOAT16, 64, 1, NULL, NULL, 1,
                                    NULL, NULL, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "dq_out");
    CHECK_EQ(dcp_cuda_rope_forward(&o, &layout, 0, DCP_DTYPE_BFLOAT16, 64, 0, p, p, 0, NULL, NULL,
                                   NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "num_q_heads");
    o.rotary_dim = 65;
    CHECK_EQ(dcp_cuda_rope_forward(&o, &layout, 0, DCP_DTYPE_BFLOAT16, 64, 1, p, p, 0, NULL, NULL,
                                   NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "rotary_dim");
    o.rotary_dim = 0;
    o.style = (dcp_rope_style)3;
    CHECK_EQ(dcp_cuda_rope_forward(&o, &layout, 0, DCP_DTYPE_BFLOAT16, 64, 1, p, p, 0, NULL, NULL,
                                   NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "style");
    o.style = DCP_ROPE_ROTATE_HALF;
    layout.max_seqlen_padded = 4; /* shorter than one sequence's share */
    CHECK_EQ(dcp_cuda_rope_forward(&o, &layout, 0, DCP_DTYPE_BFLOAT16, 64, 1, p, p, 0, NULL, NULL,
                                   NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "max_seqlen_padded");
}

static void arguments_conv1d(void)
{
    dcp_cuda_layout layout = fake_layout(1);
    dcp_conv1d_params p;
    dcp_error error;
    size_t bytes = 0;
    float buffer[64] = {0};
    memset(&p, 0, sizeof p);
    p.channels = 8;
    p.width = DCP_CUDA_CONV1D_MAX_WIDTH; /* every width the reference takes is served */
    CHECK_EQ(dcp_cuda_conv1d_workspace_size(&p, &bytes, &error), DCP_OK);
    CHECK_EQ((long long)bytes,
             (long long)DCP_CUDA_CONV1D_SLICES * (DCP_CUDA_CONV1D_MAX_WIDTH + 1) * 8 * 4);
    p.width = 9;
    CHECK_EQ(dcp_cuda_conv1d_forward(&p, &layout, 16, DCP_DTYPE_FLOAT32, buffer, buffer, NULL,
                                     buffer, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "width");
    p.width = 4;
    CHECK_EQ(dcp_cuda_conv1d_workspace_size(&p, &bytes, &error), DCP_OK);
    CHECK_EQ((long long)bytes, (long long)DCP_CUDA_CONV1D_SLICES * 5 * 8 * 4);
    CHECK_EQ(dcp_cuda_conv1d_forward(&p, &layout, 15, DCP_DTYPE_FLOAT32, buffer, buffer, NULL,
                                     buffer, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "total_rows 15");
    CHECK_EQ(dcp_cuda_conv1d_forward(&p, &layout, 16, DCP_DTYPE_FLOAT32, NULL, buffer, NULL,
                                     buffer, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "x");
    layout = fake_layout(2);
    CHECK_EQ(dcp_cuda_conv1d_forward(&p, &layout, 16, DCP_DTYPE_FLOAT32, buffer, buffer, NULL,
                                     buffer, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "cp 1");
    layout = fake_layout(1);
    CHECK_EQ(dcp_cuda_conv1d_backward(&p, &layout, 16, DCP_DTYPE_FLOAT32, buffer, buffer, buffer,
                                      buffer, buffer, buffer, NULL, buffer, sizeof buffer, NULL,
                                      &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "dbias");
    CHECK_EQ(dcp_cuda_conv1d_backward(&p, &layout, 16, DCP_DTYPE_FLOAT32, buffer, buffer, NULL,
                                      buffer, buffer, buffer, NULL, buffer, 4, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "workspace");
}

static void arguments_merge(void)
{
    dcp_cuda_layout layout = fake_layout(1);
    dcp_attention_params p;
    dcp_error error;
    float buffer[64] = {0};
    memset(&p, 0, sizeof p);
    p.num_heads = 2;
    p.head_dim = 4;
    CHECK_EQ(dcp_cuda_acc_merge(&p, &layout, DCP_HALF_FIRST, buffer, buffer, buffer, buffer, NULL,
                                &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "cp > 1");
    CHECK_EQ(dcp_cuda_acc_merge(&p, &layout, (dcp_half)5, buffer, buffer, buffer, buffer, NULL,
                                &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "half 5");
    CHECK_EQ(dcp_cuda_acc_init(&p, &layout, NULL, buffer, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "acc_out");
    CHECK_EQ(dcp_cuda_acc_finalize(&p, &layout, 1, buffer, buffer, DCP_DTYPE_FLOAT32, buffer,
                                   buffer, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "rank");
    CHECK_EQ(dcp_cuda_acc_finalize(&p, &layout, 0, buffer, buffer, DCP_DTYPE_BFLOAT16, buffer,
                                   buffer, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "acc_out");
    p.num_kv_heads = 3;
    CHECK_EQ(dcp_cuda_acc_init(&p, &layout, buffer, buffer, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "num_kv_heads");
    CHECK_EQ(dcp_cuda_convert(buffer, DCP_DTYPE_BFLOAT16, buffer, -1, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "count");
    CHECK_EQ(dcp_cuda_convert(buffer, (dcp_dtype)9, buffer, 1, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "dtype");
}

static void arguments_layout(void)
{
    static const int32_t cu[] = {0, 10, 5}, cu_padded[] = {0, 16, 32};
    static const int32_t fine[] = {0, 10, 15};
    dcp_thd_layout host;
    dcp_cuda_layout layout;
    dcp_error error;
    memset(&host, 0, sizeof host);
    host.num_sequences = 2;
    host.cu_seqlens = cu;
    host.cu_seqlens_padded = cu_padded;
    host.cp = 2;
    CHECK_EQ(dcp_cuda_layout_init(&host, cu, cu_padded, &layout, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "cu_seqlens");
    host.cu_seqlens = fine;
    CHECK_EQ(dcp_cuda_layout_init(&host, NULL, cu_padded, &layout, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_cuda_layout_init(&host, fine, cu_padded, &layout, &error), DCP_OK);
    CHECK_EQ(layout.local_rows, 16);
    CHECK_EQ(layout.max_seqlen_padded, 16);
    CHECK(layout.thd.cu_seqlens == fine);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"arguments_layout", arguments_layout},
        {"arguments_rope", arguments_rope},
        {"arguments_conv1d", arguments_conv1d},
        {"arguments_merge", arguments_merge},
        {"rope_shapes", rope_shapes},
        {"rope_single_tensor", rope_single_tensor},
        {"rope_long_sequence", rope_long_sequence},
        {"conv1d_shapes", conv1d_shapes},
        {"conv1d_edges", conv1d_edges},
        {"conv1d_geometry", conv1d_geometry},
        {"conv1d_boundaries", conv1d_boundaries},
        {"merge_shapes", merge_shapes},
        {"convert_values", convert_values},
        {"finalize_tiles", finalize_tiles},
        {"convert_grid_stride", convert_grid_stride},
    };
    if (cuda_test_gpu()) cuda_test_seed();
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
