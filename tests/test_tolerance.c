/* The GPU tests' comparison rule (tests/tolerance.h) on the CPU, without a GPU: it must accept
   what a correct kernel computes and reject what a buggy one does.

   "A correct kernel" is a model of the attention kernel's arithmetic on the CPU: scores and
   the softmax sum in float, P rounded to bf16 / fp16 before P.V (as the tensor-core kernel
   does), the output rounded to its dtype once. Its mutants are the bugs the GPU suite must
   catch: a wrong softmax scale (exp2 without log2 e; the scale of another head dim), a causal
   mask off by one row, a dropped key tile, a dropped query tile; for conv1d the reference of
   dcp.h with one tap missing. Every case is measured against dcp.h's CPU references, the same
   references the GPU tests use. Inputs are random (seed printed, DCP_TEST_SEED=N repeats). */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "test.h"
#include "tolerance.h"

#define TOLERANCE_SEED 1111
#define MODEL_TILE 64 /* key and query tile rows of the attention kernel */
#define MODEL_HEADS 2
#define MODEL_HEAD_DIM 64
#define MODEL_SEQUENCES 6
#define MODEL_CASES 3 /* random layouts per test */

/* ------------------------------------------------------------------------------ helpers */

/* x rounded to nearest even with `bits` significand bits (normal range; bf16 8, fp16 11). */
static float round_bits(double x, int bits)
{
    int exponent;
    double m;
    if (x == 0.0 || !isfinite(x)) return (float)x;
    m = frexp(x, &exponent);
    return (float)ldexp(nearbyint(ldexp(m, bits)), exponent - bits);
}

static const char *dtype_label(dcp_dtype dtype)
{
    return dtype == DCP_DTYPE_BFLOAT16 ? "bf16" : dtype == DCP_DTYPE_FLOAT16 ? "fp16" : "fp32";
}

static int bits_of(dcp_dtype dtype)
{
    return dtype == DCP_DTYPE_BFLOAT16  ? TOLERANCE_BF16_BITS
           : dtype == DCP_DTYPE_FLOAT16 ? TOLERANCE_FP16_BITS
                                        : TOLERANCE_FP32_BITS;
}

static float *random_rounded(dcp_rng *rng, int64_t count, int bits)
{
    float *p = (float *)malloc((size_t)(count > 0 ? count : 1) * sizeof(float));
    int64_t i;
    for (i = 0; i < count; i++) p[i] = round_bits(dcp_rng_normal(rng), bits);
    return p;
}

/* 1 when the rule refuses got, quietly (for the bugs it must catch). */
static int rejected(const float *got, const float *ref, int64_t count, test_tolerance t)
{
    tolerance_report report;
    return !tolerance_measure(got, ref, count, t, &report);
}

/* A cp-1 layout of MODEL_SEQUENCES sequences, one of them long enough for several tiles,
   padding after some. */
typedef struct model_layout {
    int32_t cu[MODEL_SEQUENCES + 1], cu_padded[MODEL_SEQUENCES + 1];
    dcp_thd_layout thd;
    int64_t rows;
} model_layout;

static void model_layout_make(model_layout *m, dcp_rng *rng)
{
    int32_t i;
    m->cu[0] = m->cu_padded[0] = 0;
    for (i = 0; i < MODEL_SEQUENCES; i++) {
        const int64_t length = i == 0 ? 3 * MODEL_TILE + 1 + (int64_t)dcp_rng_below(rng, 100)
                                      : 1 + (int64_t)dcp_rng_below(rng, 2 * MODEL_TILE);
        m->cu[i + 1] = m->cu[i] + (int32_t)length;
        m->cu_padded[i + 1] = m->cu_padded[i] + (int32_t)length + (int32_t)dcp_rng_below(rng, 3);
    }
    m->thd.num_sequences = MODEL_SEQUENCES;
    m->thd.cu_seqlens = m->cu;
    m->thd.cu_seqlens_padded = m->cu_padded;
    m->thd.cp = 1;
    m->rows = m->cu_padded[MODEL_SEQUENCES];
}

/* ------------------------------------------------------------- the attention kernel model */

typedef enum model_bug {
    MODEL_CORRECT,
    MODEL_SCALE_EXP2,      /* exp2 of the natural-log scores: scale times log2 e */
    MODEL_SCALE_HEAD_DIM,  /* 1 / sqrt(head_dim / 2): the scale of another head dim */
    MODEL_MASK_PAST_DIAGONAL, /* causal mask off by one row: each query sees one key more */
    MODEL_DROP_KEY_TILE,   /* the second key tile of every sequence skipped */
    MODEL_DROP_QUERY_TILE  /* the second query tile of every sequence never written (zeros) */
} model_bug;

typedef struct attention_case {
    model_layout layout;
    dcp_attention_params params;
    dcp_dtype dtype;
    float *q, *k, *v;     /* [rows, heads, dim], rounded to dtype */
    float *out, *lse;     /* dcp_attention_forward's */
} attention_case;

static void attention_case_make(attention_case *c, dcp_rng *rng, dcp_dtype dtype, int causal)
{
    const int bits = bits_of(dtype);
    int64_t values;
    model_layout_make(&c->layout, rng);
    memset(&c->params, 0, sizeof c->params);
    c->params.num_heads = MODEL_HEADS;
    c->params.head_dim = MODEL_HEAD_DIM;
    c->params.causal = causal;
    c->dtype = dtype;
    values = c->layout.rows * MODEL_HEADS * MODEL_HEAD_DIM;
    c->q = random_rounded(rng, values, bits);
    c->k = random_rounded(rng, values, bits);
    c->v = random_rounded(rng, values, bits);
    c->out = (float *)calloc((size_t)values, sizeof(float));
    c->lse = (float *)calloc((size_t)(c->layout.rows * MODEL_HEADS), sizeof(float));
    CHECK_EQ(dcp_attention_forward(&c->params, &c->layout.thd, NULL, c->q, c->k, c->v, c->out,
                                   c->lse, NULL),
             DCP_OK);
}

static void attention_case_free(attention_case *c)
{
    free(c->q), free(c->k), free(c->v), free(c->out), free(c->lse);
}

static int model_visible(const attention_case *c, model_bug bug, int64_t query, int64_t key)
{
    const int64_t reach = bug == MODEL_MASK_PAST_DIAGONAL ? query + 1 : query;
    if (bug == MODEL_DROP_KEY_TILE && key / MODEL_TILE == 1) return 0;
    return !c->params.causal || key <= reach;
}

/* One (row, head) of the sequence whose rows start at `offset`, valid rows only: out rounded
   to dtype, lse in float. */
static void model_row(const attention_case *c, model_bug bug, int64_t offset, int64_t valid,
                      int64_t row, int32_t head, float *out, float *lse)
{
    const int32_t D = MODEL_HEAD_DIM, H = MODEL_HEADS, bits = bits_of(c->dtype);
    const float *q = c->q + ((offset + row) * H + head) * D;
    float scale = (float)(1.0 / sqrt((double)D)), max = -INFINITY, sum = 0.0f;
    float acc[MODEL_HEAD_DIM] = {0.0f}, *o = out + ((offset + row) * H + head) * D;
    int64_t key, last = valid - 1;
    int32_t d;
    if (bug == MODEL_SCALE_EXP2) scale *= (float)(1.0 / log(2.0));
    if (bug == MODEL_SCALE_HEAD_DIM) scale = (float)(1.0 / sqrt((double)D / 2.0));
    for (key = 0; key <= last; key++)
        if (model_visible(c, bug, row, key)) {
            const float *k = c->k + ((offset + key) * H + head) * D;
            float score = 0.0f;
            for (d = 0; d < D; d++) score += q[d] * k[d];
            if (score * scale > max) max = score * scale;
        }
    for (key = 0; key <= last && max > -INFINITY; key++)
        if (model_visible(c, bug, row, key)) {
            const float *k = c->k + ((offset + key) * H + head) * D;
            const float *v = c->v + ((offset + key) * H + head) * D;
            float score = 0.0f, p, p_rounded;
            for (d = 0; d < D; d++) score += q[d] * k[d];
            p = expf(score * scale - max);
            sum += p;                       /* the row sum from float P ... */
            p_rounded = round_bits(p, bits); /* ... the P.V product from P in dtype */
            for (d = 0; d < D; d++) acc[d] += p_rounded * v[d];
        }
    if (bug == MODEL_DROP_QUERY_TILE && row / MODEL_TILE == 1) sum = 0.0f;
    for (d = 0; d < D; d++) o[d] = sum > 0.0f ? round_bits(acc[d] / sum, bits) : 0.0f;
    lse[head * c->layout.rows + offset + row] = sum > 0.0f ? max + logf(sum) : -INFINITY;
}

/* The model's out and lse of the whole case: padding rows 0 and -inf, as the kernel writes. */
static void model_forward(const attention_case *c, model_bug bug, float *out, float *lse)
{
    int32_t i, head;
    int64_t row;
    for (row = 0; row < c->layout.rows * MODEL_HEADS * MODEL_HEAD_DIM; row++) out[row] = 0.0f;
    for (row = 0; row < c->layout.rows * MODEL_HEADS; row++) lse[row] = -INFINITY;
    for (i = 0; i < c->layout.thd.num_sequences; i++) {
        const int64_t offset = c->layout.cu_padded[i];
        const int64_t valid = c->layout.cu[i + 1] - c->layout.cu[i];
        for (row = 0; row < valid; row++)
            for (head = 0; head < MODEL_HEADS; head++)
                model_row(c, bug, offset, valid, row, head, out, lse);
    }
}

/* Whether the rule accepts the model's out with `bug` (its LSE instead when check_lse)
   against the case's reference. */
static int model_accepted(const attention_case *c, model_bug bug, int check_lse)
{
    const int64_t values = c->layout.rows * MODEL_HEADS * MODEL_HEAD_DIM;
    float *out = (float *)malloc((size_t)values * sizeof(float));
    float *lse = (float *)malloc((size_t)(c->layout.rows * MODEL_HEADS) * sizeof(float));
    int accepted;
    model_forward(c, bug, out, lse);
    accepted = check_lse ? !rejected(lse, c->lse, c->layout.rows * MODEL_HEADS, tolerance_lse())
                         : !rejected(out, c->out, values, tolerance_of(c->dtype));
    free(out), free(lse);
    return accepted;
}

/* -------------------------------------------------------------------------------- tests */

static void ulp_of_each_precision(void)
{
    CHECK(tolerance_ulp(1.0, TOLERANCE_BF16_BITS) == ldexp(1.0, -7));
    CHECK(tolerance_ulp(1.5, TOLERANCE_FP16_BITS) == ldexp(1.0, -10));
    CHECK(tolerance_ulp(-3.0, TOLERANCE_FP32_BITS) == ldexp(1.0, -22));
    CHECK(tolerance_ulp(0.0, TOLERANCE_BF16_BITS) == 0.0);
    CHECK(tolerance_ulp(INFINITY, TOLERANCE_BF16_BITS) == 0.0);
    CHECK(round_bits(1.0 + ldexp(1.0, -9), TOLERANCE_BF16_BITS) == 1.0f); /* ties to even */
    CHECK(round_bits(1.0 + ldexp(1.0, -8) * 1.5, TOLERANCE_BF16_BITS) == 1.0f + 0.0078125f);
}

/* Both bounds and the non-finite rule, on small hand-made arrays. */
static void rule_bounds_and_non_finite(void)
{
    const float ref[4] = {1.0f, -2.0f, 0.5f, 0.0f};
    float got[4];
    const test_tolerance bf16 = tolerance_of(DCP_DTYPE_BFLOAT16);
    const double bound = 8.0 * tolerance_ulp(2.0, TOLERANCE_BF16_BITS); /* 8 ulps at 2: 0.125 */
    tolerance_report r;
    memcpy(got, ref, sizeof got);
    CHECK(tolerance_measure(got, ref, 4, tolerance_exact(), &r));
    got[3] = 1e-30f; /* exact means exact */
    CHECK(!tolerance_measure(got, ref, 4, tolerance_exact(), &r));
    /* max-abs: one element just inside / just past 8 ulps of max|ref|; the norm does not mind */
    memcpy(got, ref, sizeof got);
    got[3] = (float)bound;
    CHECK(!tolerance_measure(got, ref, 4, tolerance_make("norm only", 1.0, 0.0, 8), &r));
    CHECK(tolerance_measure(got, ref, 4, tolerance_make("max only", 1.0, 8.0, 8), &r));
    CHECK(r.max_bound == bound && r.worst == 3);
    got[3] = (float)(bound * 1.01);
    CHECK(!tolerance_measure(got, ref, 4, tolerance_make("max only", 1.0, 8.0, 8), &r));
    /* norm: ||err|| / ||ref|| with ||ref|| = sqrt(5.25) */
    memcpy(got, ref, sizeof got);
    got[0] = 1.02f;
    CHECK(tolerance_measure(got, ref, 4, bf16, &r));
    CHECK_NEAR(r.norm_error, 0.02 / sqrt(5.25), 1e-6);
    got[0] = 1.05f;
    got[1] = -2.05f; /* norm 0.031 > 0.01, each within max-abs */
    CHECK(!tolerance_measure(got, ref, 4, bf16, &r));
    CHECK(r.max_error <= r.max_bound && r.norm_error > bf16.norm);
    /* non-finite: -inf must stay -inf, NaN NaN; NaN where the reference is finite fails */
    {
        const float ref_inf[3] = {-INFINITY, NAN, 1.0f};
        float got_inf[3] = {-INFINITY, NAN, 1.0f};
        CHECK(tolerance_measure(got_inf, ref_inf, 3, bf16, &r));
        got_inf[0] = 0.0f;
        CHECK(!tolerance_measure(got_inf, ref_inf, 3, bf16, &r));
        CHECK(r.nonfinite_bad == 1 && r.first_nonfinite_bad == 0);
        got_inf[0] = -INFINITY;
        got_inf[2] = NAN;
        CHECK(!tolerance_measure(got_inf, ref_inf, 3, bf16, &r));
        got_inf[2] = 1.0f;
        got_inf[1] = 0.0f;
        CHECK(!tolerance_measure(got_inf, ref_inf, 3, bf16, &r));
    }
    /* an all-zero reference: only zeros pass */
    {
        const float zeros[2] = {0.0f, 0.0f};
        const float tiny[2] = {0.0f, 1e-20f};
        CHECK(tolerance_measure(zeros, zeros, 2, bf16, &r));
        CHECK(!tolerance_measure(tiny, zeros, 2, bf16, &r));
    }
    CHECK(tolerance_measure(got, ref, 0, bf16, &r)); /* nothing to compare */
    /* scaled: both bounds */
    CHECK(tolerance_scaled(bf16, 2.0).norm == 2e-2 && tolerance_scaled(bf16, 2.0).max_ulps == 16.0);
}

/* A bug confined to one row of a large tensor: the norm dilutes it below its bound, the
   max-abs bound (scaled to the data, not to the element) still refuses it. */
static void rule_catches_one_bad_row_in_a_million(void)
{
    const int64_t count = 1 << 20, row = MODEL_HEAD_DIM; /* one (row, head) of out */
    float *ref = (float *)malloc((size_t)count * sizeof(float));
    float *got = (float *)malloc((size_t)count * sizeof(float));
    const test_tolerance bf16 = tolerance_of(DCP_DTYPE_BFLOAT16);
    tolerance_report r;
    dcp_rng rng;
    int64_t i;
    dcp_rng_seed(&rng, test_seed_for(TOLERANCE_SEED) + 3);
    for (i = 0; i < count; i++) got[i] = ref[i] = round_bits(dcp_rng_normal(&rng), 8);
    for (i = 0; i < row; i++) got[count / 2 + i] = 0.0f; /* one row never written */
    CHECK(!tolerance_measure(got, ref, count, bf16, &r));
    CHECK(r.norm_error < bf16.norm && r.max_error > r.max_bound);
    free(ref), free(got);
}

/* What a correct bf16 / fp16 kernel computes passes, causal or not, with room: the measured
   errors are printed beside the bounds. */
static void rule_accepts_kernel_precision(void)
{
    dcp_rng rng;
    int i, causal, d;
    dcp_rng_seed(&rng, test_seed_for(TOLERANCE_SEED));
    for (d = 0; d < 2; d++)
        for (causal = 0; causal < 2; causal++) {
            const dcp_dtype dtype = d ? DCP_DTYPE_FLOAT16 : DCP_DTYPE_BFLOAT16;
            double worst_norm = 0.0, worst_ulps = 0.0, worst_lse_ulps = 0.0;
            for (i = 0; i < MODEL_CASES; i++) {
                attention_case c;
                tolerance_report r, rl;
                const test_tolerance t = tolerance_of(dtype);
                int64_t values;
                float *out, *lse;
                attention_case_make(&c, &rng, dtype, causal);
                values = c.layout.rows * MODEL_HEADS * MODEL_HEAD_DIM;
                out = (float *)malloc((size_t)values * sizeof(float));
                lse = (float *)malloc((size_t)(c.layout.rows * MODEL_HEADS) * sizeof(float));
                model_forward(&c, MODEL_CORRECT, out, lse);
                CHECK(compare("attention model out", out, c.out, values, t));
                CHECK(compare("attention model lse", lse, c.lse, c.layout.rows * MODEL_HEADS,
                              tolerance_lse()));
                (void)tolerance_measure(out, c.out, values, t, &r);
                (void)tolerance_measure(lse, c.lse, c.layout.rows * MODEL_HEADS, tolerance_lse(),
                                        &rl);
                if (r.norm_error > worst_norm) worst_norm = r.norm_error;
                if (r.max_error / tolerance_ulp(r.max_ref, t.precision_bits) > worst_ulps)
                    worst_ulps = r.max_error / tolerance_ulp(r.max_ref, t.precision_bits);
                if (rl.max_error / tolerance_ulp(rl.max_ref, TOLERANCE_FP32_BITS) > worst_lse_ulps)
                    worst_lse_ulps = rl.max_error / tolerance_ulp(rl.max_ref, TOLERANCE_FP32_BITS);
                free(out), free(lse);
                attention_case_free(&c);
            }
            printf("  %s causal%d model: norm error %.2g (bound %.2g), max error %.2g ulps "
                   "(bound %g), lse %.2g ulps (bound %g)\n",
                   dtype_label(dtype), causal, worst_norm,
                   tolerance_of(dtype).norm, worst_ulps, TOLERANCE_ELEMENT_ULPS, worst_lse_ulps,
                   TOLERANCE_LSE_ULPS);
        }
}

/* Each attention bug is rejected in every random case, bf16 and fp16, by the out alone; the
   LSE alone rejects the wrong scales and the mask. */
static void rule_rejects_attention_bugs(void)
{
    static const struct {
        model_bug bug;
        int causal_only; /* a mask bug shows only under the causal mask */
        int lse_sees_it;
        const char *name;
    } bugs[] = {
        {MODEL_SCALE_EXP2, 0, 1, "softmax scale times log2 e"},
        {MODEL_SCALE_HEAD_DIM, 0, 1, "softmax scale of head dim / 2"},
        {MODEL_MASK_PAST_DIAGONAL, 1, 1, "causal mask off by one row"},
        {MODEL_DROP_KEY_TILE, 0, 1, "second key tile dropped"},
        {MODEL_DROP_QUERY_TILE, 0, 0, "second query tile dropped"},
    };
    dcp_rng rng;
    size_t b;
    int i, d, causal;
    dcp_rng_seed(&rng, test_seed_for(TOLERANCE_SEED) + 1);
    for (d = 0; d < 2; d++)
        for (causal = 0; causal < 2; causal++)
            for (i = 0; i < MODEL_CASES; i++) {
                const dcp_dtype dtype = d ? DCP_DTYPE_FLOAT16 : DCP_DTYPE_BFLOAT16;
                attention_case c;
                attention_case_make(&c, &rng, dtype, causal);
                for (b = 0; b < sizeof bugs / sizeof bugs[0]; b++) {
                    int lse;
                    if (bugs[b].causal_only && !causal) continue;
                    for (lse = 0; lse <= bugs[b].lse_sees_it; lse++)
                        if (model_accepted(&c, bugs[b].bug, lse)) {
                            fprintf(stderr, "  %s accepted the bug: %s (%s, causal %d, case %d)\n",
                                    lse ? "lse" : "out", bugs[b].name, dtype_label(dtype), causal,
                                    i);
                            CHECK(0);
                        }
                }
                attention_case_free(&c);
            }
}

/* conv1d: the output of dcp.h's reference rounded to the dtype passes; the reference with one
   tap missing (forward y, backward dx and dweight) is rejected; fp32 dx from sums in another
   order (errors of a few ulps of the terms) passes where an element-wise rtol 1e-6 would fail. */
static void rule_on_conv1d(void)
{
    static const dcp_dtype dtypes[] = {DCP_DTYPE_FLOAT32, DCP_DTYPE_BFLOAT16, DCP_DTYPE_FLOAT16};
    dcp_rng rng;
    int d, width;
    dcp_rng_seed(&rng, test_seed_for(TOLERANCE_SEED) + 2);
    for (d = 0; d < 3; d++)
        for (width = 2; width <= DCP_CONV1D_MAX_WIDTH; width++) {
            const int bits = bits_of(dtypes[d]);
            const test_tolerance t = tolerance_of(dtypes[d]);
            model_layout m;
            dcp_conv1d_params p;
            int32_t channels = 16 + (int32_t)dcp_rng_below(&rng, 40), tap;
            int64_t count, i;
            float *x, *dy, *w, *w_missing, *bias, *y, *y_missing, *dx, *dx_missing, *dw,
                *dw_missing, *db, *rounded;
            model_layout_make(&m, &rng);
            memset(&p, 0, sizeof p);
            p.channels = channels;
            p.width = width;
            p.silu = (int32_t)dcp_rng_below(&rng, 2);
            count = m.rows * channels;
            x = random_rounded(&rng, count, bits);
            dy = random_rounded(&rng, count, bits);
            w = random_rounded(&rng, (int64_t)channels * width, TOLERANCE_FP32_BITS);
            bias = random_rounded(&rng, channels, TOLERANCE_FP32_BITS);
            w_missing = (float *)malloc((size_t)channels * (size_t)width * sizeof(float));
            memcpy(w_missing, w, (size_t)channels * (size_t)width * sizeof(float));
            tap = (int32_t)dcp_rng_below(&rng, (uint64_t)width);
            for (i = 0; i < channels; i++) w_missing[i * width + tap] = 0.0f;
            y = (float *)malloc((size_t)count * sizeof(float));
            y_missing = (float *)malloc((size_t)count * sizeof(float));
            dx = (float *)malloc((size_t)count * sizeof(float));
            dx_missing = (float *)malloc((size_t)count * sizeof(float));
            rounded = (float *)malloc((size_t)count * sizeof(float));
            dw = (float *)malloc((size_t)channels * (size_t)width * sizeof(float));
            dw_missing = (float *)malloc((size_t)channels * (size_t)width * sizeof(float));
            db = (float *)malloc((size_t)channels * sizeof(float));
            CHECK_EQ(dcp_conv1d_forward(&p, &m.thd, m.rows, x, w, bias, y, NULL), DCP_OK);
            CHECK_EQ(dcp_conv1d_forward(&p, &m.thd, m.rows, x, w_missing, bias, y_missing, NULL),
                     DCP_OK);
            CHECK_EQ(dcp_conv1d_backward(&p, &m.thd, m.rows, x, w, bias, dy, dx, dw, db, NULL),
                     DCP_OK);
            CHECK_EQ(dcp_conv1d_backward(&p, &m.thd, m.rows, x, w_missing, bias, dy, dx_missing,
                                         dw_missing, db, NULL),
                     DCP_OK);
            for (i = 0; i < count; i++) rounded[i] = round_bits(y[i], bits);
            CHECK(compare("conv1d y rounded to dtype", rounded, y, count, t));
            for (i = 0; i < count; i++) rounded[i] = round_bits(y_missing[i], bits);
            CHECK(rejected(rounded, y, count, t));
            for (i = 0; i < count; i++) rounded[i] = round_bits(dx_missing[i], bits);
            CHECK(rejected(rounded, dx, count, t));
            /* a missing tap's weight gradient is still computed from x and dy: the other taps'
               gradients see a different pre-activation only through SiLU */
            if (p.silu)
                CHECK(rejected(dw_missing, dw, (int64_t)channels * width, tolerance_sum()));
            if (dtypes[d] == DCP_DTYPE_FLOAT32) {
                /* sums in another order: each element off by up to 2 ulps of the largest term
                   (|w| |dy| <= max|dx|), what the GPU's dx showed; near-zero elements of dx
                   are then far off relative to themselves */
                double max_dx = 0.0;
                int64_t far_off = 0;
                for (i = 0; i < count; i++)
                    if (fabs(dx[i]) > max_dx) max_dx = fabs(dx[i]);
                for (i = 0; i < count; i++) {
                    rounded[i] = (float)(dx[i] + (2.0 * dcp_rng_uniform(&rng) - 1.0) * 2.0 *
                                                     tolerance_ulp(max_dx, TOLERANCE_FP32_BITS));
                    if (fabs(rounded[i] - dx[i]) > 1e-6 * fabs(dx[i])) far_off++;
                }
                CHECK(compare("conv1d fp32 dx summed in another order", rounded, dx, count, t));
                CHECK(far_off > 0); /* which an element-wise rtol of 1e-6 would have failed */
            }
            free(x), free(dy), free(w), free(w_missing), free(bias), free(y), free(y_missing);
            free(dx), free(dx_missing), free(dw), free(dw_missing), free(db), free(rounded);
        }
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"ulp_of_each_precision", ulp_of_each_precision},
        {"rule_bounds_and_non_finite", rule_bounds_and_non_finite},
        {"rule_catches_one_bad_row_in_a_million", rule_catches_one_bad_row_in_a_million},
        {"rule_accepts_kernel_precision", rule_accepts_kernel_precision},
        {"rule_rejects_attention_bugs", rule_rejects_attention_bugs},
        {"rule_on_conv1d", rule_on_conv1d},
    };
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
