/* CPU references: attention steps, LSE merging and the simulated ring against single-rank
   attention, RoPE with CP positions, causal depthwise conv1d, gradients against central finite
   differences, and argument checking. Inputs are random with fixed seeds; padding rows of
   inputs hold NaN and outputs start as NaN, so a reference that reads a padding row or leaves
   an element unwritten fails. Rank results are compared with single-rank ones through global
   positions (dcp_zigzag_position), on buffers of the valid tokens only. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "test.h"

#define MAX_SEQUENCES 16
#define MAX_CP 8
#define MAX_BLOCKS 512

/* Relative tolerances (CHECK_NEAR scales by max(1, |expected|)). The ring and the single rank
   sum in different orders in fp32; the position mask and the plan only differ in -inf terms;
   central differences of a double loss over fp32 outputs with step FD_STEP have an error of
   order FD_STEP^2 from the curvature plus fp32 rounding / FD_STEP. */
#define RING_TOLERANCE 1e-5
#define EXACT_TOLERANCE 1e-6
#define FD_STEP 1e-2
#define FD_TOLERANCE 2e-3

/* ------------------------------------------------------------------------------ helpers */

/* Every buffer of a test, freed at once. */
typedef struct arena {
    void *blocks[MAX_BLOCKS];
    int count;
} arena;

static float *arena_floats(arena *a, int64_t count)
{
    float *p = (float *)malloc((size_t)(count > 0 ? count : 1) * sizeof(float));
    if (!p || a->count == MAX_BLOCKS) {
        fprintf(stderr, "test arena exhausted\n");
        exit(1);
    }
    a->blocks[a->count++] = p;
    return p;
}

static void arena_free(arena *a)
{
    while (a->count > 0) free(a->blocks[--a->count]);
}

static void fill(float *p, int64_t count, float value)
{
    int64_t i;
    for (i = 0; i < count; i++) p[i] = value;
}

static float *filled_floats(arena *a, int64_t count, float value)
{
    float *p = arena_floats(a, count);
    fill(p, count, value);
    return p;
}

static float *random_floats(arena *a, dcp_rng *rng, int64_t count)
{
    float *p = arena_floats(a, count);
    int64_t i;
    for (i = 0; i < count; i++) p[i] = (float)dcp_rng_normal(rng);
    return p;
}

static float *copy_floats(arena *a, const float *source, int64_t count)
{
    float *p = arena_floats(a, count);
    memcpy(p, source, (size_t)count * sizeof(float));
    return p;
}

static int all_nan(const float *p, int64_t count)
{
    int64_t i;
    for (i = 0; i < count; i++)
        if (p[i] == p[i]) return 0;
    return 1;
}

/* Largest |actual - expected| / max(1, |expected|); equal infinities count 0, NaN infinity. */
static double max_error(const float *actual, const float *expected, int64_t count)
{
    double worst = 0.0;
    int64_t i;
    for (i = 0; i < count; i++) {
        double a = actual[i], e = expected[i], scale = fabs(e) > 1.0 ? fabs(e) : 1.0, err;
        if (a == e) continue;
        err = fabs(a - e) / scale;
        if (!(err <= worst)) worst = err == err ? err : INFINITY;
    }
    return worst;
}

/* A pack of sequences for one CP size, owning its cu_seqlens arrays. */
typedef struct pack {
    int32_t num_sequences, cp;
    int32_t cu[MAX_SEQUENCES + 1], cu_padded[MAX_SEQUENCES + 1];
    int64_t rows;  /* local rows of each rank */
    int64_t valid; /* valid tokens: the rows of a global buffer */
} pack;

/* Sequence i holds lengths[i] tokens padded to a multiple of the unit (2 cp, or 1 at cp 1)
   plus extra[i] more units (extra NULL: none), so that some ranks hold only padding. */
static pack pack_make(const int32_t *lengths, const int32_t *extra, int32_t n, int32_t cp)
{
    pack p;
    int32_t i, unit = cp > 1 ? 2 * cp : 1;
    memset(&p, 0, sizeof p);
    p.num_sequences = n;
    p.cp = cp;
    for (i = 0; i < n; i++) {
        int32_t padded = (lengths[i] + unit - 1) / unit * unit + (extra ? extra[i] : 0) * unit;
        p.cu[i + 1] = p.cu[i] + lengths[i];
        p.cu_padded[i + 1] = p.cu_padded[i] + padded;
    }
    p.rows = p.cu_padded[n] / cp;
    p.valid = p.cu[n];
    return p;
}

static dcp_thd_layout pack_layout(const pack *p)
{
    dcp_thd_layout layout;
    layout.num_sequences = p->num_sequences;
    layout.cu_seqlens = p->cu;
    layout.cu_seqlens_padded = p->cu_padded;
    layout.cp = p->cp;
    return layout;
}

/* Row of the global buffer that local row `row` of rank `rank` holds; -1 for padding. */
static int64_t global_row(const pack *p, int32_t rank, int64_t row)
{
    int32_t i;
    for (i = 0; i < p->num_sequences; i++) {
        int64_t offset = p->cu_padded[i] / p->cp, padded = p->cu_padded[i + 1] - p->cu_padded[i];
        if (row < offset + padded / p->cp) {
            int64_t position = dcp_zigzag_position(padded, p->cp, rank, row - offset);
            return position < p->cu[i + 1] - p->cu[i] ? p->cu[i] + position : -1;
        }
    }
    return -1;
}

/* A rank's local buffer from a global one (rows of `width` floats); padding rows get NaN. */
static float *scatter_rows(arena *a, const pack *p, int32_t rank, const float *global,
                           int64_t width)
{
    float *local = arena_floats(a, p->rows * width);
    int64_t row, d;
    for (row = 0; row < p->rows; row++) {
        int64_t g = global_row(p, rank, row);
        for (d = 0; d < width; d++) local[row * width + d] = g < 0 ? NAN : global[g * width + d];
    }
    return local;
}

static void gather_rows(const pack *p, int32_t rank, const float *local, int64_t width,
                        float *global)
{
    int64_t row, g;
    for (row = 0; row < p->rows; row++)
        if ((g = global_row(p, rank, row)) >= 0)
            memcpy(global + g * width, local + row * width, (size_t)width * sizeof(float));
}

/* An LSE [heads, rows] of one rank into a global [heads, valid]. */
static void gather_lse(const pack *p, int32_t rank, const float *local, int32_t heads,
                       float *global)
{
    int64_t row, g;
    int32_t h;
    for (row = 0; row < p->rows; row++)
        if ((g = global_row(p, rank, row)) >= 0)
            for (h = 0; h < heads; h++) global[h * p->valid + g] = local[h * p->rows + row];
}

/* Elements of padding rows that differ from `expected` (rows of `width` floats). */
static int64_t padding_mismatches(const pack *p, int32_t rank, const float *local,
                                  int64_t width, float expected)
{
    int64_t row, d, count = 0;
    for (row = 0; row < p->rows; row++)
        if (global_row(p, rank, row) < 0)
            for (d = 0; d < width; d++) count += !(local[row * width + d] == expected);
    return count;
}

static int64_t lse_padding_mismatches(const pack *p, int32_t rank, const float *lse,
                                      int32_t heads)
{
    int64_t row, count = 0;
    int32_t h;
    for (row = 0; row < p->rows; row++)
        if (global_row(p, rank, row) < 0)
            for (h = 0; h < heads; h++) count += !(lse[h * p->rows + row] == -INFINITY);
    return count;
}

/* The sequences the ring tests pack: one token padded beyond a whole chunk (most ranks hold
   none of it), two tokens with a padded second half on some rank, a sequence with two extra
   padding units, and random ones with random extra padding. Returns the count. */
static int32_t ring_lengths(dcp_rng *rng, int32_t random_count, int32_t *lengths,
                            int32_t *extra)
{
    static const int32_t fixed_lengths[] = {1, 2, 5, 3}, fixed_extra[] = {1, 0, 2, 0};
    int32_t n = 0, i;
    for (i = 0; i < 4; i++, n++) lengths[n] = fixed_lengths[i], extra[n] = fixed_extra[i];
    for (i = 0; i < random_count; i++, n++) {
        lengths[n] = 1 + (int32_t)dcp_rng_below(rng, 40);
        extra[n] = (int32_t)dcp_rng_below(rng, 3);
    }
    return n;
}

/* ---------------------------------------------------------------- attention test harness */

/* Global inputs (valid rows only) of an attention computation. With rope set, q and k are
   rotated (CP positions) before attention and the gradients rotated back after it. */
typedef struct attention_case {
    dcp_attention_params params;
    const dcp_rope_options *rope;
    int64_t valid;
    const float *q, *k, *v, *dout;
} attention_case;

/* Global results: out, dq [valid, heads, dim], dk, dv [valid, kv heads, dim], lse [heads,
   valid]. */
typedef struct attention_result {
    float *out, *lse, *dq, *dk, *dv;
} attention_result;

static attention_case attention_case_make(arena *a, dcp_rng *rng, int32_t heads,
                                          int32_t kv_heads, int32_t dim, int32_t causal,
                                          int64_t valid)
{
    attention_case c;
    memset(&c, 0, sizeof c);
    c.params.num_heads = heads;
    c.params.num_kv_heads = kv_heads;
    c.params.head_dim = dim;
    c.params.causal = causal;
    c.valid = valid;
    c.q = random_floats(a, rng, valid * heads * dim);
    c.k = random_floats(a, rng, valid * kv_heads * dim);
    c.v = random_floats(a, rng, valid * kv_heads * dim);
    c.dout = random_floats(a, rng, valid * heads * dim);
    return c;
}

static attention_result attention_result_make(arena *a, const attention_case *c)
{
    const int64_t q_values = c->valid * c->params.num_heads * c->params.head_dim;
    const int64_t kv_values = c->valid * c->params.num_kv_heads * c->params.head_dim;
    attention_result r;
    r.out = filled_floats(a, q_values, NAN);
    r.lse = filled_floats(a, c->valid * c->params.num_heads, NAN);
    r.dq = filled_floats(a, q_values, NAN);
    r.dk = filled_floats(a, kv_values, NAN);
    r.dv = filled_floats(a, kv_values, NAN);
    return r;
}

/* One rank's local buffers. */
typedef struct rank_buffers {
    float *q, *k, *v, *dout, *out, *lse, *dq, *dk, *dv;
} rank_buffers;

static void rope_rank(const attention_case *c, const pack *p, int32_t rank, int forward,
                      float *x, int32_t heads)
{
    dcp_thd_layout layout = pack_layout(p);
    dcp_error error;
    dcp_status status =
        forward ? dcp_rope_forward(c->rope, &layout, rank, heads, c->params.head_dim, x, x, &error)
                : dcp_rope_backward(c->rope, &layout, rank, heads, c->params.head_dim, x, x,
                                    &error);
    CHECK_EQ(status, DCP_OK);
}

static rank_buffers rank_buffers_make(arena *a, const attention_case *c, const pack *p,
                                      int32_t rank)
{
    const int64_t qw = (int64_t)c->params.num_heads * c->params.head_dim;
    const int64_t kvw = (int64_t)c->params.num_kv_heads * c->params.head_dim;
    rank_buffers b;
    b.q = scatter_rows(a, p, rank, c->q, qw);
    b.k = scatter_rows(a, p, rank, c->k, kvw);
    b.v = scatter_rows(a, p, rank, c->v, kvw);
    b.dout = scatter_rows(a, p, rank, c->dout, qw);
    b.out = filled_floats(a, p->rows * qw, NAN);
    b.lse = filled_floats(a, p->rows * c->params.num_heads, NAN);
    b.dq = filled_floats(a, p->rows * qw, NAN);
    b.dk = filled_floats(a, p->rows * kvw, NAN);
    b.dv = filled_floats(a, p->rows * kvw, NAN);
    if (c->rope) {
        rope_rank(c, p, rank, 1, b.q, c->params.num_heads);
        rope_rank(c, p, rank, 1, b.k, c->params.num_kv_heads);
    }
    return b;
}

/* Rotates the gradients back, gathers rank results and checks their padding rows. */
static void rank_buffers_finish(const attention_case *c, const pack *p, int32_t rank,
                                rank_buffers *b, attention_result *r)
{
    const int32_t heads = c->params.num_heads;
    const int64_t qw = (int64_t)heads * c->params.head_dim;
    const int64_t kvw = (int64_t)c->params.num_kv_heads * c->params.head_dim;
    if (c->rope) {
        rope_rank(c, p, rank, 0, b->dq, heads);
        rope_rank(c, p, rank, 0, b->dk, c->params.num_kv_heads);
    }
    gather_rows(p, rank, b->out, qw, r->out);
    gather_lse(p, rank, b->lse, heads, r->lse);
    gather_rows(p, rank, b->dq, qw, r->dq);
    gather_rows(p, rank, b->dk, kvw, r->dk);
    gather_rows(p, rank, b->dv, kvw, r->dv);
    CHECK_EQ(padding_mismatches(p, rank, b->out, qw, 0.0f), 0);
    CHECK_EQ(lse_padding_mismatches(p, rank, b->lse, heads), 0);
    CHECK_EQ(padding_mismatches(p, rank, b->dq, qw, 0.0f), 0);
    CHECK_EQ(padding_mismatches(p, rank, b->dk, kvw, 0.0f), 0);
    CHECK_EQ(padding_mismatches(p, rank, b->dv, kvw, 0.0f), 0);
}

/* Single-rank attention through the step functions (whole views, cp 1). */
static attention_result run_single(arena *a, const attention_case *c, const pack *p)
{
    attention_result r = attention_result_make(a, c);
    dcp_thd_layout layout = pack_layout(p);
    rank_buffers b = rank_buffers_make(a, c, p, 0);
    dcp_error error;
    CHECK_EQ(p->cp, 1);
    CHECK_EQ(dcp_attention_forward(&c->params, &layout, NULL, b.q, b.k, b.v, b.out, b.lse,
                                   &error), DCP_OK);
    fill(b.dq, p->rows * c->params.num_heads * c->params.head_dim, 0.0f);
    fill(b.dk, p->rows * c->params.num_kv_heads * c->params.head_dim, 0.0f);
    fill(b.dv, p->rows * c->params.num_kv_heads * c->params.head_dim, 0.0f);
    CHECK_EQ(dcp_attention_backward(&c->params, &layout, NULL, b.q, b.k, b.v, b.out, b.dout,
                                    b.lse, b.dq, b.dk, b.dv, &error), DCP_OK);
    rank_buffers_finish(c, p, 0, &b, &r);
    return r;
}

/* The ring driver over the p->cp ranks of the pack. */
static attention_result run_ring(arena *a, const attention_case *c, const pack *p)
{
    attention_result r = attention_result_make(a, c);
    dcp_thd_layout layout = pack_layout(p);
    rank_buffers b[MAX_CP];
    const float *q[MAX_CP], *k[MAX_CP], *v[MAX_CP], *dout[MAX_CP], *out_in[MAX_CP],
        *lse_in[MAX_CP];
    float *out[MAX_CP], *lse[MAX_CP], *dq[MAX_CP], *dk[MAX_CP], *dv[MAX_CP];
    dcp_error error;
    int32_t rank;
    for (rank = 0; rank < p->cp; rank++) {
        b[rank] = rank_buffers_make(a, c, p, rank);
        q[rank] = b[rank].q, k[rank] = b[rank].k, v[rank] = b[rank].v;
        dout[rank] = b[rank].dout, out_in[rank] = out[rank] = b[rank].out;
        lse_in[rank] = lse[rank] = b[rank].lse;
        dq[rank] = b[rank].dq, dk[rank] = b[rank].dk, dv[rank] = b[rank].dv;
    }
    CHECK_EQ(dcp_ring_attention_forward(&c->params, &layout, q, k, v, out, lse, NULL, &error),
             DCP_OK);
    CHECK_EQ(dcp_ring_attention_backward(&c->params, &layout, q, k, v, out_in, dout, lse_in, dq,
                                         dk, dv, &error), DCP_OK);
    for (rank = 0; rank < p->cp; rank++) rank_buffers_finish(c, p, rank, &b[rank], &r);
    return r;
}

static void check_same_results(const attention_case *c, const attention_result *actual,
                               const attention_result *expected, double tolerance)
{
    const int64_t q_values = c->valid * c->params.num_heads * c->params.head_dim;
    const int64_t kv_values = c->valid * c->params.num_kv_heads * c->params.head_dim;
    CHECK_NEAR(max_error(actual->out, expected->out, q_values), 0.0, tolerance);
    CHECK_NEAR(max_error(actual->lse, expected->lse, c->valid * c->params.num_heads), 0.0,
               tolerance);
    CHECK_NEAR(max_error(actual->dq, expected->dq, q_values), 0.0, tolerance);
    CHECK_NEAR(max_error(actual->dk, expected->dk, kv_values), 0.0, tolerance);
    CHECK_NEAR(max_error(actual->dv, expected->dv, kv_values), 0.0, tolerance);
}

/* ------------------------------------------------------------------------ attention tests */

/* Ring CP over c ranks equals single-rank attention on the same sequences at the same global
   positions: forward output and LSE, backward dQ, dK, dV. */
static void ring_equals_single_rank(void)
{
    static const int32_t cps[] = {1, 2, 4, 8}, ratios[] = {1, 4};
    int32_t lengths[MAX_SEQUENCES], extra[MAX_SEQUENCES];
    int ci, causal, ri;
    for (ci = 0; ci < 4; ci++)
        for (causal = 0; causal <= 1; causal++)
            for (ri = 0; ri < 2; ri++) {
                arena a = {{0}, 0};
                dcp_rng rng;
                int32_t n;
                pack single, ring;
                attention_case c;
                attention_result expected, actual;
                dcp_rng_seed(&rng, test_seed_for((uint64_t)(100 * ci + 10 * causal + ri)));
                n = ring_lengths(&rng, 3, lengths, extra);
                single = pack_make(lengths, extra, n, 1);
                ring = pack_make(lengths, extra, n, cps[ci]);
                c = attention_case_make(&a, &rng, 4, 4 / ratios[ri], 8, causal, single.valid);
                expected = run_single(&a, &c, &single);
                actual = run_ring(&a, &c, &ring);
                check_same_results(&c, &actual, &expected, RING_TOLERANCE);
                arena_free(&a);
            }
}

/* The head dims the CUDA kernels serve, up to DCP_MAX_HEAD_DIM, through a ring of four. */
static void ring_equals_single_rank_wide_heads(void)
{
    static const int32_t dims[] = {64, 128, DCP_MAX_HEAD_DIM};
    int32_t lengths[MAX_SEQUENCES], extra[MAX_SEQUENCES];
    int di;
    for (di = 0; di < 3; di++) {
        arena a = {{0}, 0};
        dcp_rng rng;
        int32_t n;
        pack single, ring;
        attention_case c;
        attention_result expected, actual;
        dcp_rng_seed(&rng, test_seed_for((uint64_t)(200 + di)));
        n = ring_lengths(&rng, 2, lengths, extra);
        single = pack_make(lengths, extra, n, 1);
        ring = pack_make(lengths, extra, n, 4);
        c = attention_case_make(&a, &rng, 2, 1, dims[di], 1, single.valid);
        expected = run_single(&a, &c, &single);
        actual = run_ring(&a, &c, &ring);
        check_same_results(&c, &actual, &expected, RING_TOLERANCE);
        arena_free(&a);
    }
}

/* The seed project's "seed-003" check: one batch evaluated at two CP sizes (1 and 4, 2 and 8)
   gives the same outputs and gradients, here through RoPE with CP positions on q and k, ring
   attention, and the gradients back through both. */
static void seed003_same_batch_any_cp(void)
{
    static const int32_t pairs[2][2] = {{1, 4}, {2, 8}};
    int32_t lengths[MAX_SEQUENCES], extra[MAX_SEQUENCES];
    dcp_rope_options rope;
    int pair, causal;
    memset(&rope, 0, sizeof rope);
    rope.rotary_dim = 6; /* partial: two of the eight dims pass through */
    for (pair = 0; pair < 2; pair++)
        for (causal = 0; causal <= 1; causal++) {
            arena a = {{0}, 0};
            dcp_rng rng;
            int32_t n;
            pack first, second;
            attention_case c;
            attention_result r_first, r_second;
            dcp_rng_seed(&rng, test_seed_for(3));
            n = ring_lengths(&rng, 5, lengths, extra);
            first = pack_make(lengths, extra, n, pairs[pair][0]);
            second = pack_make(lengths, extra, n, pairs[pair][1]);
            c = attention_case_make(&a, &rng, 4, 2, 8, causal, first.valid);
            c.rope = &rope;
            r_first = first.cp == 1 ? run_single(&a, &c, &first) : run_ring(&a, &c, &first);
            r_second = run_ring(&a, &c, &second);
            check_same_results(&c, &r_second, &r_first, RING_TOLERANCE);
            arena_free(&a);
        }
}

static void ring_step_plan_table(void)
{
    /* cp 4, causal: per rank and step the source, q half, kv half, mask; the ring order is
       0 2 3 1 (dcp_ring_order), so step s reads the rank s places before in it */
    static const int32_t expected[4][4][4] = {
        {{0, 0, 0, 1}, {1, 2, 0, 0}, {3, 2, 0, 0}, {2, 2, 0, 0}},
        {{1, 0, 0, 1}, {3, 2, 0, 0}, {2, 2, 0, 0}, {0, 0, 1, 0}},
        {{2, 0, 0, 1}, {0, 0, 1, 0}, {1, 0, 1, 0}, {3, 2, 0, 0}},
        {{3, 0, 0, 1}, {2, 0, 1, 0}, {0, 0, 1, 0}, {1, 0, 1, 0}}};
    dcp_ring_step plan;
    int32_t rank, step;
    for (rank = 0; rank < 4; rank++)
        for (step = 0; step < 4; step++) {
            const int32_t *e = expected[rank][step];
            CHECK_EQ(dcp_ring_step_plan(4, rank, step, 1, &plan, NULL), DCP_OK);
            CHECK_EQ(plan.view.q_rank, rank);
            CHECK_EQ(plan.view.kv_rank, e[0]);
            CHECK_EQ(plan.view.q_half, e[1]);
            CHECK_EQ(plan.view.kv_half, e[2]);
            CHECK_EQ(plan.causal, e[3]);
            CHECK_EQ(dcp_ring_step_plan(4, rank, step, 0, &plan, NULL), DCP_OK);
            CHECK_EQ(plan.view.kv_rank, e[0]);
            CHECK(plan.view.q_half == DCP_HALF_ALL && plan.view.kv_half == DCP_HALF_ALL);
            CHECK_EQ(plan.causal, 0);
        }
    CHECK_EQ(dcp_ring_step_plan(1, 0, 0, 1, &plan, NULL), DCP_OK);
    CHECK(plan.view.kv_rank == 0 && plan.view.q_half == DCP_HALF_ALL && plan.causal == 1);
}

/* The KV source of a ring step: the rank `step` places before `rank` in the ring order (the
   steps below run in the ring's order, so that their merges round as the ring's do). */
static int32_t ring_source(int32_t cp, int32_t rank, int32_t step)
{
    int32_t position = 0, source = 0;
    CHECK_EQ(dcp_ring_position(cp, rank, &position, NULL), DCP_OK);
    CHECK_EQ(dcp_ring_order(cp, (position - step + cp) % cp, &source, NULL), DCP_OK);
    return source;
}

/* One rank's result of running every ring step as whole buffers with the position mask,
   merged through the public accumulator: what the plan's halves and unmasked steps must
   reproduce. Backward adds dq into this rank and dk, dv into the sources. */
static void run_position_masked_steps(const attention_case *c, const pack *p, int32_t rank,
                                      rank_buffers *b, float *partial, float *partial_lse)
{
    dcp_thd_layout layout = pack_layout(p);
    dcp_attention_view view;
    int32_t step;
    memset(&view, 0, sizeof view);
    view.q_rank = rank;
    CHECK_EQ(dcp_attention_acc_init(&c->params, &layout, b[rank].out, b[rank].lse, NULL),
             DCP_OK);
    for (step = 0; step < p->cp; step++) {
        view.kv_rank = ring_source(p->cp, rank, step);
        CHECK_EQ(dcp_attention_forward(&c->params, &layout, &view, b[rank].q,
                                       b[view.kv_rank].k, b[view.kv_rank].v, partial,
                                       partial_lse, NULL), DCP_OK);
        CHECK_EQ(dcp_attention_acc_merge(&c->params, &layout, DCP_HALF_ALL, partial,
                                         partial_lse, b[rank].out, b[rank].lse, NULL), DCP_OK);
    }
    CHECK_EQ(dcp_attention_acc_finalize(&c->params, &layout, rank, b[rank].out, b[rank].lse,
                                        b[rank].out, b[rank].lse, NULL), DCP_OK);
}

static void backward_position_masked_steps(const attention_case *c, const pack *p,
                                           int32_t rank, rank_buffers *b)
{
    dcp_thd_layout layout = pack_layout(p);
    dcp_attention_view view;
    int32_t step;
    memset(&view, 0, sizeof view);
    view.q_rank = rank;
    for (step = 0; step < p->cp; step++) {
        view.kv_rank = ring_source(p->cp, rank, step);
        CHECK_EQ(dcp_attention_backward(&c->params, &layout, &view, b[rank].q,
                                        b[view.kv_rank].k, b[view.kv_rank].v, b[rank].out,
                                        b[rank].dout, b[rank].lse, b[rank].dq,
                                        b[view.kv_rank].dk, b[view.kv_rank].dv, NULL), DCP_OK);
    }
}

/* The step plan (halves, no mask after step 0) equals running every step on whole buffers
   with the position-based causal mask; and the plan's unmasked steps give exactly what the
   mask would. */
static void ring_plan_equals_position_mask(void)
{
    static const int32_t cps[] = {2, 4, 8};
    int32_t lengths[MAX_SEQUENCES], extra[MAX_SEQUENCES];
    int ci;
    for (ci = 0; ci < 3; ci++) {
        arena a = {{0}, 0};
        dcp_rng rng;
        const int32_t cp = cps[ci];
        int32_t n, rank, step;
        pack p;
        attention_case c;
        attention_result ring_result, masked_result;
        rank_buffers masked[MAX_CP];
        float *partial, *partial_lse, *masked_partial;
        int64_t qw, kvw;
        dcp_rng_seed(&rng, test_seed_for((uint64_t)(7 + ci)));
        n = ring_lengths(&rng, 4, lengths, extra);
        p = pack_make(lengths, extra, n, cp);
        c = attention_case_make(&a, &rng, 2, 1, 8, 1, p.valid);
        qw = (int64_t)c.params.num_heads * c.params.head_dim;
        kvw = (int64_t)c.params.num_kv_heads * c.params.head_dim;
        ring_result = run_ring(&a, &c, &p);
        masked_result = attention_result_make(&a, &c);
        partial = arena_floats(&a, p.rows * qw);
        partial_lse = arena_floats(&a, p.rows * c.params.num_heads);
        masked_partial = arena_floats(&a, p.rows * qw);
        for (rank = 0; rank < cp; rank++) {
            masked[rank] = rank_buffers_make(&a, &c, &p, rank);
            fill(masked[rank].dq, p.rows * qw, 0.0f);
            fill(masked[rank].dk, p.rows * kvw, 0.0f);
            fill(masked[rank].dv, p.rows * kvw, 0.0f);
        }
        for (rank = 0; rank < cp; rank++)
            run_position_masked_steps(&c, &p, rank, masked, partial, partial_lse);
        for (rank = 0; rank < cp; rank++) backward_position_masked_steps(&c, &p, rank, masked);
        for (rank = 0; rank < cp; rank++)
            rank_buffers_finish(&c, &p, rank, &masked[rank], &masked_result);
        check_same_results(&c, &masked_result, &ring_result, EXACT_TOLERANCE);

        /* an unmasked planned step equals the same step with the mask, bit for bit */
        for (rank = 0; rank < cp; rank++)
            for (step = 1; step < cp; step++) {
                dcp_thd_layout layout = pack_layout(&p);
                dcp_ring_step plan;
                dcp_attention_params unmasked = c.params;
                const rank_buffers *src;
                CHECK_EQ(dcp_ring_step_plan(cp, rank, step, 1, &plan, NULL), DCP_OK);
                CHECK_EQ(plan.causal, 0);
                src = &masked[plan.view.kv_rank];
                fill(partial, p.rows * qw, NAN);
                fill(masked_partial, p.rows * qw, NAN);
                unmasked.causal = 0;
                CHECK_EQ(dcp_attention_forward(&unmasked, &layout, &plan.view, masked[rank].q,
                                               src->k, src->v, partial, partial_lse, NULL),
                         DCP_OK);
                CHECK_EQ(dcp_attention_forward(&c.params, &layout, &plan.view, masked[rank].q,
                                               src->k, src->v, masked_partial, partial_lse,
                                               NULL), DCP_OK);
                CHECK(memcmp(partial, masked_partial, (size_t)(p.rows * qw) * sizeof(float)) ==
                      0);
            }
        arena_free(&a);
    }
}

/* Output and LSE of a tiny case against softmax written out by hand. */
static void attention_matches_formula(void)
{
    static const int32_t cu[] = {0, 3}, cu_padded[] = {0, 4};
    static const float q[] = {0.5f, -1.0f, 1.5f, 0.25f, -0.75f, 2.0f, NAN, NAN};
    static const float k[] = {1.0f, 0.5f, -0.5f, 1.5f, 2.0f, -1.0f, NAN, NAN};
    static const float v[] = {0.3f, -0.7f, 1.1f, 0.2f, -0.4f, 0.9f, NAN, NAN};
    dcp_thd_layout layout = {1, cu, cu_padded, 1};
    dcp_attention_params params;
    float out[8], lse[4];
    int causal, i, j, d;
    memset(&params, 0, sizeof params);
    params.num_heads = 1;
    params.head_dim = 2;
    for (causal = 0; causal <= 1; causal++) {
        params.causal = causal;
        fill(out, 8, NAN);
        fill(lse, 4, NAN);
        CHECK_EQ(dcp_attention_forward(&params, &layout, NULL, q, k, v, out, lse, NULL), DCP_OK);
        for (i = 0; i < 3; i++) {
            double s[3], m = -INFINITY, sum = 0.0, o[2] = {0.0, 0.0};
            int visible = causal ? i + 1 : 3;
            for (j = 0; j < visible; j++) {
                s[j] = (q[2 * i] * (double)k[2 * j] + q[2 * i + 1] * (double)k[2 * j + 1]) /
                       sqrt(2.0);
                m = s[j] > m ? s[j] : m;
            }
            for (j = 0; j < visible; j++) {
                sum += exp(s[j] - m);
                for (d = 0; d < 2; d++) o[d] += exp(s[j] - m) * v[2 * j + d];
            }
            for (d = 0; d < 2; d++) CHECK_NEAR(out[2 * i + d], o[d] / sum, EXACT_TOLERANCE);
            CHECK_NEAR(lse[i], m + log(sum), EXACT_TOLERANCE);
        }
        CHECK(out[6] == 0.0f && out[7] == 0.0f && lse[3] == -INFINITY); /* padding row */
    }
    /* softmax_scale 0 is 1/sqrt(head_dim) */
    params.softmax_scale = 1.0 / sqrt(2.0);
    CHECK_EQ(dcp_attention_forward(&params, &layout, NULL, q, k, v, out, lse, NULL), DCP_OK);
    CHECK_NEAR(lse[1], log(exp(q[2] * k[0] / sqrt(2.0) + q[3] * k[1] / sqrt(2.0)) +
                           exp(q[2] * k[2] / sqrt(2.0) + q[3] * k[3] / sqrt(2.0))),
               EXACT_TOLERANCE);
}

/* GQA: query head h reads kv head h / ratio, exactly as MHA on kv heads repeated ratio times;
   dk and dv are the sums of the repeated heads' gradients. */
static void attention_gqa_equals_repeated_kv(void)
{
    static const int32_t lengths[] = {7, 4}, extra[] = {1, 0};
    const int32_t heads = 4, ratio = 2, dim = 4;
    arena a = {{0}, 0};
    dcp_rng rng;
    pack p = pack_make(lengths, extra, 2, 1);
    attention_case gqa, mha;
    attention_result r_gqa, r_mha;
    float *k_rep, *v_rep;
    int64_t row, i;
    int32_t h;
    dcp_rng_seed(&rng, test_seed_for(11));
    gqa = attention_case_make(&a, &rng, heads, heads / ratio, dim, 1, p.valid);
    mha = gqa;
    k_rep = arena_floats(&a, p.valid * heads * dim);
    v_rep = arena_floats(&a, p.valid * heads * dim);
    for (row = 0; row < p.valid; row++)
        for (h = 0; h < heads; h++) {
            const int64_t to = (row * heads + h) * dim;
            const int64_t from = (row * (heads / ratio) + h / ratio) * dim;
            memcpy(k_rep + to, gqa.k + from, (size_t)dim * sizeof(float));
            memcpy(v_rep + to, gqa.v + from, (size_t)dim * sizeof(float));
        }
    mha.k = k_rep, mha.v = v_rep;
    mha.params.num_kv_heads = heads;
    r_gqa = run_single(&a, &gqa, &p);
    r_mha = run_single(&a, &mha, &p);
    CHECK_NEAR(max_error(r_gqa.out, r_mha.out, p.valid * heads * dim), 0.0, EXACT_TOLERANCE);
    CHECK_NEAR(max_error(r_gqa.dq, r_mha.dq, p.valid * heads * dim), 0.0, EXACT_TOLERANCE);
    for (i = 0; i < p.valid * (heads / ratio) * dim; i++) {
        int64_t r = i / ((heads / ratio) * dim), g = i / dim % (heads / ratio), d = i % dim;
        double dk = 0.0, dv = 0.0;
        for (h = (int32_t)g * ratio; h < (g + 1) * ratio; h++) {
            dk += r_mha.dk[(r * heads + h) * dim + d];
            dv += r_mha.dv[(r * heads + h) * dim + d];
        }
        CHECK_NEAR(r_gqa.dk[i], dk, EXACT_TOLERANCE);
        CHECK_NEAR(r_gqa.dv[i], dv, EXACT_TOLERANCE);
    }
    arena_free(&a);
}

/* A step leaves rows outside its q view untouched, writes those inside, and gives rows that
   see no key 0 and -inf; the backward step adds only into its views' rows. */
static void attention_views_and_empty_rows(void)
{
    static const int32_t lengths[] = {8, 5}, extra[] = {0, 1};
    arena a = {{0}, 0};
    dcp_rng rng;
    pack p = pack_make(lengths, extra, 2, 2);
    dcp_thd_layout layout = pack_layout(&p);
    attention_case c;
    rank_buffers b0, b1;
    dcp_attention_view view;
    int64_t row, qw, d;
    int32_t i;
    dcp_rng_seed(&rng, test_seed_for(5));
    c = attention_case_make(&a, &rng, 2, 2, 4, 1, p.valid);
    qw = 8;
    b0 = rank_buffers_make(&a, &c, &p, 0);
    b1 = rank_buffers_make(&a, &c, &p, 1);
    memset(&view, 0, sizeof view);
    view.q_half = DCP_HALF_FIRST; /* rank 0's chunk 0 against rank 1's KV: all of it later */
    view.kv_rank = 1;
    CHECK_EQ(dcp_attention_forward(&c.params, &layout, &view, b0.q, b1.k, b1.v, b0.out, b0.lse,
                                   NULL), DCP_OK);
    for (i = 0; i < p.num_sequences; i++) {
        int64_t offset = p.cu_padded[i] / 2, half = (p.cu_padded[i + 1] - p.cu_padded[i]) / 4;
        for (row = offset; row < offset + 2 * half; row++) {
            int first = row < offset + half;
            /* first-half rows: written, nothing visible; second-half rows: still NaN */
            for (d = 0; d < qw; d++) {
                float o = b0.out[row * qw + d];
                CHECK(first ? o == 0.0f : o != o);
            }
            CHECK(first ? b0.lse[row] == -INFINITY : b0.lse[row] != b0.lse[row]);
        }
    }
    /* the backward step of the same view adds nothing where no key is visible */
    fill(b0.dq, p.rows * qw, 0.0f);
    fill(b1.dk, p.rows * qw, 0.0f);
    fill(b1.dv, p.rows * qw, 0.0f);
    fill(b0.lse, p.rows * 2, -INFINITY);
    fill(b0.out, p.rows * qw, 0.0f);
    CHECK_EQ(dcp_attention_backward(&c.params, &layout, &view, b0.q, b1.k, b1.v, b0.out, b0.dout,
                                    b0.lse, b0.dq, b1.dk, b1.dv, NULL), DCP_OK);
    for (row = 0; row < p.rows * qw; row++)
        CHECK(b0.dq[row] == 0.0f && b1.dk[row] == 0.0f && b1.dv[row] == 0.0f);
    arena_free(&a);
}

/* The merge: -inf on either side is the identity, and two halves of a key set merge to the
   whole, whatever the order. */
static void merge_guards_and_combines(void)
{
    static const int32_t cu[] = {0, 3}, cu_padded[] = {0, 4};
    dcp_thd_layout layout = {1, cu, cu_padded, 2};
    dcp_attention_params params;
    float acc[8], acc_lse[2], out[8] = {1, 2, 3, 4, 5, 6, 7, 8}, lse[2] = {0.5f, -INFINITY};
    float out_b[8] = {-1, 0.5f, 2, 1, 3, 3, 3, 3}, lse_b[2] = {1.5f, 2.0f};
    int d;
    memset(&params, 0, sizeof params);
    params.num_heads = 1;
    params.head_dim = 4;
    fill(acc, 8, NAN);
    fill(acc_lse, 2, NAN);
    CHECK_EQ(dcp_attention_acc_init(&params, &layout, acc, acc_lse, NULL), DCP_OK);
    CHECK(acc[0] == 0.0f && acc[7] == 0.0f && acc_lse[0] == -INFINITY && acc_lse[1] == -INFINITY);
    CHECK_EQ(dcp_attention_acc_merge(&params, &layout, DCP_HALF_ALL, out, lse, acc, acc_lse,
                                     NULL), DCP_OK);
    for (d = 0; d < 4; d++) CHECK(acc[d] == out[d] && acc[4 + d] == 0.0f);
    CHECK(acc_lse[0] == 0.5f && acc_lse[1] == -INFINITY);
    CHECK_EQ(dcp_attention_acc_merge(&params, &layout, DCP_HALF_ALL, out_b, lse_b, acc, acc_lse,
                                     NULL), DCP_OK);
    for (d = 0; d < 4; d++) {
        double w_a = exp(0.5 - acc_lse[0]), w_b = exp(1.5 - acc_lse[0]);
        CHECK_NEAR(acc[d], w_a * out[d] + w_b * out_b[d], EXACT_TOLERANCE);
        CHECK(acc[4 + d] == out_b[4 + d]);
    }
    CHECK_NEAR(acc_lse[0], log(exp(0.5) + exp(1.5)), EXACT_TOLERANCE);
    CHECK(acc_lse[1] == 2.0f);
    /* a half merge touches only that half: row 1 is the second half at cp 2 */
    lse_b[0] = lse_b[1] = 9.0f;
    CHECK_EQ(dcp_attention_acc_merge(&params, &layout, DCP_HALF_SECOND, out_b, lse_b, acc,
                                     acc_lse, NULL), DCP_OK);
    CHECK_NEAR(acc_lse[0], log(exp(0.5) + exp(1.5)), EXACT_TOLERANCE);
    CHECK(acc_lse[1] > 9.0f);
    /* finalize: rank 0 holds positions 0 and 3 of a 3-token sequence, so its row 1 is
       padding and comes out 0 and -inf whatever the accumulator holds; rank 1's is kept */
    fill(out, 8, NAN);
    fill(lse, 2, NAN);
    CHECK_EQ(dcp_attention_acc_finalize(&params, &layout, 0, acc, acc_lse, out, lse, NULL),
             DCP_OK);
    for (d = 0; d < 4; d++) CHECK(out[d] == acc[d] && out[4 + d] == 0.0f);
    CHECK(lse[0] == acc_lse[0] && lse[1] == -INFINITY);
    CHECK_EQ(dcp_attention_acc_finalize(&params, &layout, 1, acc, acc_lse, acc, acc_lse, NULL),
             DCP_OK);
    CHECK(acc[4] == out_b[4] && acc_lse[1] > 9.0f); /* in place */
}

static double attention_loss(const dcp_attention_params *params, const pack *p, const float *q,
                             const float *k, const float *v, const float *weight, float *out,
                             float *lse)
{
    dcp_thd_layout layout = pack_layout(p);
    const int64_t width = (int64_t)params->num_heads * params->head_dim;
    double loss = 0.0;
    int64_t row, d;
    CHECK_EQ(dcp_attention_forward(params, &layout, NULL, q, k, v, out, lse, NULL), DCP_OK);
    for (row = 0; row < p->rows; row++)
        if (global_row(p, 0, row) >= 0)
            for (d = 0; d < width; d++)
                loss += (double)weight[row * width + d] * out[row * width + d];
    return loss;
}

/* Largest relative gap between grad and central differences of loss over the valid rows of x. */
static double attention_fd_error(const dcp_attention_params *params, const pack *p, float *q,
                                 float *k, float *v, float *x, int64_t width, const float *grad,
                                 const float *weight, float *out, float *lse)
{
    double worst = 0.0;
    int64_t row, d;
    for (row = 0; row < p->rows; row++) {
        if (global_row(p, 0, row) < 0) continue;
        for (d = 0; d < width; d++) {
            float saved = x[row * width + d], plus, minus;
            double l_plus, l_minus, fd, err;
            plus = x[row * width + d] = (float)(saved + FD_STEP);
            l_plus = attention_loss(params, p, q, k, v, weight, out, lse);
            minus = x[row * width + d] = (float)(saved - FD_STEP);
            l_minus = attention_loss(params, p, q, k, v, weight, out, lse);
            x[row * width + d] = saved;
            fd = (l_plus - l_minus) / ((double)plus - minus);
            err = fabs(fd - grad[row * width + d]) / (fabs(fd) > 1.0 ? fabs(fd) : 1.0);
            worst = err > worst ? err : worst;
        }
    }
    return worst;
}

static void attention_gradients_match_finite_differences(void)
{
    static const int32_t lengths[] = {3, 4}, extra[] = {1, 2};
    pack p = pack_make(lengths, extra, 2, 1);
    int causal;
    for (causal = 0; causal <= 1; causal++) {
        arena a = {{0}, 0};
        dcp_rng rng;
        dcp_thd_layout layout = pack_layout(&p);
        attention_case c;
        rank_buffers b;
        const int64_t qw = 8, kvw = 4;
        dcp_rng_seed(&rng, test_seed_for((uint64_t)(21 + causal)));
        c = attention_case_make(&a, &rng, 2, 1, 4, causal, p.valid);
        b = rank_buffers_make(&a, &c, &p, 0);
        CHECK_EQ(dcp_attention_forward(&c.params, &layout, NULL, b.q, b.k, b.v, b.out, b.lse,
                                       NULL), DCP_OK);
        fill(b.dq, p.rows * qw, 0.0f);
        fill(b.dk, p.rows * kvw, 0.0f);
        fill(b.dv, p.rows * kvw, 0.0f);
        CHECK_EQ(dcp_attention_backward(&c.params, &layout, NULL, b.q, b.k, b.v, b.out, b.dout,
                                        b.lse, b.dq, b.dk, b.dv, NULL), DCP_OK);
        CHECK_NEAR(attention_fd_error(&c.params, &p, b.q, b.k, b.v, b.q, qw, b.dq, b.dout,
                                      b.out, b.lse), 0.0, FD_TOLERANCE);
        CHECK_NEAR(attention_fd_error(&c.params, &p, b.q, b.k, b.v, b.k, kvw, b.dk, b.dout,
                                      b.out, b.lse), 0.0, FD_TOLERANCE);
        CHECK_NEAR(attention_fd_error(&c.params, &p, b.q, b.k, b.v, b.v, kvw, b.dv, b.dout,
                                      b.out, b.lse), 0.0, FD_TOLERANCE);
        arena_free(&a);
    }
}

/* ----------------------------------------------------------------------------- RoPE tests */

/* RoPE of one row written out from the definition. */
static void rope_formula(const dcp_rope_options *o, int32_t heads, int32_t dim,
                         int64_t position, const float *x, double *y)
{
    const int32_t rot = o->rotary_dim ? o->rotary_dim : dim, half = rot / 2;
    const double theta = o->theta_base ? o->theta_base : 10000.0;
    int32_t h, i, d;
    for (h = 0; h < heads; h++) {
        const float *xh = x + h * dim;
        for (d = rot; d < dim; d++) y[h * dim + d] = xh[d];
        for (i = 0; i < half; i++) {
            double f = o->inv_freq ? o->inv_freq[i] : pow(theta, -2.0 * i / rot);
            int32_t a = o->style == DCP_ROPE_INTERLEAVED ? 2 * i : i;
            int32_t b = o->style == DCP_ROPE_INTERLEAVED ? 2 * i + 1 : i + half;
            y[h * dim + a] = xh[a] * cos(position * f) - xh[b] * sin(position * f);
            y[h * dim + b] = xh[b] * cos(position * f) + xh[a] * sin(position * f);
        }
    }
}

/* Applies RoPE to a global buffer through a pack of cp ranks and gathers the result. */
static void rope_through_pack(arena *a, const dcp_rope_options *o, const pack *p,
                              int32_t heads, int32_t dim, const float *global, float *result)
{
    dcp_thd_layout layout = pack_layout(p);
    int32_t rank;
    for (rank = 0; rank < p->cp; rank++) {
        float *x = scatter_rows(a, p, rank, global, (int64_t)heads * dim);
        float *y = filled_floats(a, p->rows * heads * dim, NAN);
        CHECK_EQ(dcp_rope_forward(o, &layout, rank, heads, dim, x, y, NULL), DCP_OK);
        CHECK_EQ(padding_mismatches(p, rank, y, (int64_t)heads * dim, 0.0f), 0);
        gather_rows(p, rank, y, (int64_t)heads * dim, result);
    }
}

/* Every style, partial rotary and CP size: the definition on the unsplit sequences, and the
   CP split gives the same bits as no split. */
static void rope_cp_positions_equal_split(void)
{
    static const int32_t cps[] = {1, 2, 4, 8}, rotary[] = {0, 4};
    const int32_t heads = 3, dim = 8;
    int32_t lengths[MAX_SEQUENCES], extra[MAX_SEQUENCES];
    int style, ri, ci;
    for (style = 0; style <= 1; style++)
        for (ri = 0; ri < 2; ri++) {
            arena a = {{0}, 0};
            dcp_rng rng;
            dcp_rope_options o;
            int32_t n;
            pack single;
            float *x, *expected;
            double y[3 * 8];
            int64_t row, d;
            memset(&o, 0, sizeof o);
            o.style = (dcp_rope_style)style;
            o.rotary_dim = rotary[ri];
            dcp_rng_seed(&rng, test_seed_for((uint64_t)(31 + 2 * style + ri)));
            n = ring_lengths(&rng, 4, lengths, extra);
            single = pack_make(lengths, extra, n, 1);
            x = random_floats(&a, &rng, single.valid * heads * dim);
            expected = filled_floats(&a, single.valid * heads * dim, NAN);
            rope_through_pack(&a, &o, &single, heads, dim, x, expected);
            for (row = 0; row < single.valid; row++) {
                int32_t i = 0;
                while (single.cu[i + 1] <= row) i++;
                rope_formula(&o, heads, dim, row - single.cu[i], x + row * heads * dim, y);
                for (d = 0; d < heads * dim; d++)
                    CHECK_NEAR(expected[row * heads * dim + d], y[d], EXACT_TOLERANCE);
            }
            for (ci = 0; ci < 4; ci++) {
                pack split = pack_make(lengths, extra, n, cps[ci]);
                float *actual = filled_floats(&a, split.valid * heads * dim, NAN);
                rope_through_pack(&a, &o, &split, heads, dim, x, actual);
                CHECK(memcmp(actual, expected,
                             (size_t)(split.valid * heads * dim) * sizeof(float)) == 0);
            }
            arena_free(&a);
        }
}

/* backward(forward(x)) == x on valid rows, in place too; partial rotary copies the tail. */
static void rope_backward_inverts_forward(void)
{
    static const int32_t lengths[] = {9, 1, 6}, extra[] = {1, 2, 0};
    const int32_t heads = 2, dim = 10;
    pack p = pack_make(lengths, extra, 3, 4);
    dcp_thd_layout layout = pack_layout(&p);
    int style, rank;
    for (style = 0; style <= 1; style++)
        for (rank = 0; rank < 4; rank++) {
            arena a = {{0}, 0};
            dcp_rng rng;
            dcp_rope_options o;
            const int64_t width = heads * dim;
            float *x, *y, *back;
            int64_t row, d;
            memset(&o, 0, sizeof o);
            o.style = (dcp_rope_style)style;
            o.rotary_dim = 6;
            o.theta_base = 500.0;
            dcp_rng_seed(&rng, test_seed_for((uint64_t)(41 + rank)));
            x = random_floats(&a, &rng, p.rows * width);
            y = filled_floats(&a, p.rows * width, NAN);
            CHECK_EQ(dcp_rope_forward(&o, &layout, rank, heads, dim, x, y, NULL), DCP_OK);
            back = copy_floats(&a, y, p.rows * width);
            CHECK_EQ(dcp_rope_backward(&o, &layout, rank, heads, dim, back, back, NULL), DCP_OK);
            for (row = 0; row < p.rows; row++) {
                int valid = global_row(&p, rank, row) >= 0;
                for (d = 0; d < width; d++) {
                    float expected = valid ? x[row * width + d] : 0.0f;
                    CHECK_NEAR(back[row * width + d], expected, EXACT_TOLERANCE);
                    if (valid && d % dim >= 6) CHECK(y[row * width + d] == x[row * width + d]);
                }
            }
            arena_free(&a);
        }
}

/* A caller's table equal to theta's gives the same bits; a scaled table is honoured; zero
   options are rotate-half, full rotary, theta 10000. */
static void rope_frequency_table(void)
{
    static const int32_t lengths[] = {13, 4}, extra[] = {0, 1};
    const int32_t heads = 2, dim = 8;
    arena a = {{0}, 0};
    dcp_rng rng;
    pack p = pack_make(lengths, extra, 2, 2);
    dcp_thd_layout layout = pack_layout(&p);
    dcp_rope_options theta, table, defaults;
    double inv_freq[4], scaled[4];
    float *x, *y_theta, *y_table, *y_default, *y_scaled;
    double y[16];
    int64_t row, d;
    int32_t i;
    dcp_rng_seed(&rng, test_seed_for(51));
    memset(&theta, 0, sizeof theta);
    theta.theta_base = 10000.0;
    theta.rotary_dim = dim;
    theta.style = DCP_ROPE_ROTATE_HALF;
    table = theta;
    for (i = 0; i < 4; i++) {
        inv_freq[i] = pow(10000.0, -2.0 * i / dim);
        scaled[i] = inv_freq[i] / (i < 2 ? 1.0 : 8.0); /* YaRN-like: slow frequencies stretched */
    }
    table.inv_freq = inv_freq;
    memset(&defaults, 0, sizeof defaults);
    x = random_floats(&a, &rng, p.rows * heads * dim);
    y_theta = filled_floats(&a, p.rows * heads * dim, NAN);
    y_table = filled_floats(&a, p.rows * heads * dim, NAN);
    y_default = filled_floats(&a, p.rows * heads * dim, NAN);
    y_scaled = filled_floats(&a, p.rows * heads * dim, NAN);
    CHECK_EQ(dcp_rope_forward(&theta, &layout, 1, heads, dim, x, y_theta, NULL), DCP_OK);
    CHECK_EQ(dcp_rope_forward(&table, &layout, 1, heads, dim, x, y_table, NULL), DCP_OK);
    CHECK_EQ(dcp_rope_forward(&defaults, &layout, 1, heads, dim, x, y_default, NULL), DCP_OK);
    CHECK_EQ(dcp_rope_forward(NULL, &layout, 1, heads, dim, x, y_default, NULL), DCP_OK);
    CHECK(memcmp(y_theta, y_table, (size_t)(p.rows * heads * dim) * sizeof(float)) == 0);
    CHECK(memcmp(y_theta, y_default, (size_t)(p.rows * heads * dim) * sizeof(float)) == 0);
    table.inv_freq = scaled;
    CHECK_EQ(dcp_rope_forward(&table, &layout, 1, heads, dim, x, y_scaled, NULL), DCP_OK);
    for (row = 0; row < p.rows; row++) {
        int64_t g = global_row(&p, 1, row);
        if (g < 0) continue;
        rope_formula(&table, heads, dim, g < 13 ? g : g - 13, x + row * heads * dim, y);
        for (d = 0; d < heads * dim; d++)
            CHECK_NEAR(y_scaled[row * heads * dim + d], y[d], EXACT_TOLERANCE);
    }
    arena_free(&a);
}

/* RoPE is linear: d sum(w . y) / dx = backward(w), checked by central differences. */
static void rope_gradients_match_finite_differences(void)
{
    static const int32_t lengths[] = {5, 3}, extra[] = {1, 0};
    const int32_t heads = 2, dim = 6;
    arena a = {{0}, 0};
    dcp_rng rng;
    pack p = pack_make(lengths, extra, 2, 2);
    dcp_thd_layout layout = pack_layout(&p);
    dcp_rope_options o;
    const int64_t values = p.rows * heads * dim;
    float *x, *w, *y, *dx;
    double worst = 0.0;
    int64_t i, j;
    int style;
    for (style = 0; style <= 1; style++) {
        memset(&o, 0, sizeof o);
        o.style = (dcp_rope_style)style;
        o.rotary_dim = 4;
        dcp_rng_seed(&rng, test_seed_for((uint64_t)(61 + style)));
        x = random_floats(&a, &rng, values);
        w = random_floats(&a, &rng, values);
        y = arena_floats(&a, values);
        dx = filled_floats(&a, values, NAN);
        CHECK_EQ(dcp_rope_backward(&o, &layout, 1, heads, dim, w, dx, NULL), DCP_OK);
        for (i = 0; i < values; i++) {
            float saved = x[i], plus, minus;
            double l_plus = 0.0, l_minus = 0.0;
            if (global_row(&p, 1, i / (heads * dim)) < 0) continue;
            plus = x[i] = (float)(saved + FD_STEP);
            CHECK_EQ(dcp_rope_forward(&o, &layout, 1, heads, dim, x, y, NULL), DCP_OK);
            for (j = 0; j < values; j++) l_plus += (double)w[j] * y[j];
            minus = x[i] = (float)(saved - FD_STEP);
            CHECK_EQ(dcp_rope_forward(&o, &layout, 1, heads, dim, x, y, NULL), DCP_OK);
            for (j = 0; j < values; j++) l_minus += (double)w[j] * y[j];
            x[i] = saved;
            worst = fmax(worst, fabs((l_plus - l_minus) / ((double)plus - minus) - dx[i]));
        }
    }
    CHECK_NEAR(worst, 0.0, FD_TOLERANCE);
    arena_free(&a);
}

/* --------------------------------------------------------------------------- conv1d tests */

/* A conv1d problem on a cp 1 pack with a buffer tail; x and dy hold NaN on padding rows. */
typedef struct conv_case {
    pack p;
    int64_t total_rows;
    dcp_conv1d_params params;
    float *x, *weight, *bias, *dy;
} conv_case;

static conv_case conv_case_make(arena *a, dcp_rng *rng, const int32_t *lengths,
                                const int32_t *extra, int32_t n, int32_t tail,
                                int32_t channels, int32_t width, int32_t silu, int with_bias)
{
    conv_case c;
    int64_t row, d;
    c.p = pack_make(lengths, extra, n, 1);
    c.total_rows = c.p.rows + tail;
    memset(&c.params, 0, sizeof c.params);
    c.params.channels = channels;
    c.params.width = width;
    c.params.silu = silu;
    c.x = random_floats(a, rng, c.total_rows * channels);
    c.dy = random_floats(a, rng, c.total_rows * channels);
    c.weight = random_floats(a, rng, (int64_t)channels * width);
    c.bias = with_bias ? random_floats(a, rng, channels) : NULL;
    for (row = 0; row < c.total_rows; row++)
        if (row >= c.p.rows || global_row(&c.p, 0, row) < 0)
            for (d = 0; d < channels; d++) c.x[row * channels + d] = c.dy[row * channels + d] = NAN;
    return c;
}

static float *conv_forward(arena *a, const conv_case *c)
{
    dcp_thd_layout layout = pack_layout(&c->p);
    float *y = filled_floats(a, c->total_rows * c->params.channels, NAN);
    CHECK_EQ(dcp_conv1d_forward(&c->params, &layout, c->total_rows, c->x, c->weight, c->bias, y,
                                NULL), DCP_OK);
    return y;
}

/* The definition, loop by loop: taps before the sequence's first row are 0. */
static double conv_formula(const conv_case *c, int64_t t, int32_t channel)
{
    const int32_t width = c->params.width, channels = c->params.channels;
    int32_t i = 0, k;
    double sum;
    while (c->p.cu_padded[i + 1] <= t) i++;
    sum = c->bias ? c->bias[channel] : 0.0;
    for (k = 0; k < width; k++)
        if (t - (width - 1) + k >= c->p.cu_padded[i])
            sum += (double)c->weight[channel * width + k] *
                   c->x[(t - (width - 1) + k) * channels + channel];
    return c->params.silu ? sum / (1.0 + exp(-sum)) : sum;
}

static void conv_matches_formula(void)
{
    static const int32_t widths[] = {1, 2, 3, 4, 8};
    static const int32_t lengths[] = {1, 6, 3, 12}, extra[] = {2, 0, 1, 3};
    int wi, silu, with_bias;
    for (wi = 0; wi < 5; wi++)
        for (silu = 0; silu <= 1; silu++)
            for (with_bias = 0; with_bias <= 1; with_bias++) {
                arena a = {{0}, 0};
                dcp_rng rng;
                conv_case c;
                float *y;
                int64_t t;
                int32_t ch;
                dcp_rng_seed(&rng, test_seed_for((uint64_t)(70 + 4 * wi + 2 * silu + with_bias)));
                c = conv_case_make(&a, &rng, lengths, extra, 4, 5, 3, widths[wi], silu, with_bias);
                y = conv_forward(&a, &c);
                for (t = 0; t < c.total_rows; t++)
                    for (ch = 0; ch < 3; ch++) {
                        int valid = t < c.p.rows && global_row(&c.p, 0, t) >= 0;
                        CHECK_NEAR(y[t * 3 + ch], valid ? conv_formula(&c, t, ch) : 0.0,
                                   EXACT_TOLERANCE);
                    }
                arena_free(&a);
            }
}

/* Changing one sequence's input changes no other sequence's output or gradient; padding rows
   (which hold NaN in x and dy) are 0 in y and dx, and every gradient stays finite. */
static void conv_sequences_are_isolated(void)
{
    static const int32_t lengths[] = {5, 7, 2}, extra[] = {1, 2, 0};
    arena a = {{0}, 0};
    dcp_rng rng;
    conv_case c;
    dcp_thd_layout layout;
    float *y, *y_changed, *dx, *dx_changed, dweight[3 * 4], dbias[3];
    int64_t t, values, first, end;
    int32_t ch;
    dcp_rng_seed(&rng, test_seed_for(80));
    c = conv_case_make(&a, &rng, lengths, extra, 3, 4, 3, 4, 1, 1);
    layout = pack_layout(&c.p);
    values = c.total_rows * 3;
    y = conv_forward(&a, &c);
    dx = filled_floats(&a, values, NAN);
    fill(dweight, 12, NAN);
    fill(dbias, 3, NAN);
    CHECK_EQ(dcp_conv1d_backward(&c.params, &layout, c.total_rows, c.x, c.weight, c.bias, c.dy,
                                 dx, dweight, dbias, NULL), DCP_OK);
    for (t = 0; t < 12; t++) CHECK(dweight[t] == dweight[t]);
    for (ch = 0; ch < 3; ch++) CHECK(dbias[ch] == dbias[ch]);
    first = c.p.cu_padded[1], end = c.p.cu_padded[2]; /* sequence 1's rows */
    for (t = first; t < first + lengths[1]; t++)
        for (ch = 0; ch < 3; ch++) {
            c.x[t * 3 + ch] = (float)dcp_rng_normal(&rng);
            c.dy[t * 3 + ch] = (float)dcp_rng_normal(&rng);
        }
    y_changed = conv_forward(&a, &c);
    dx_changed = filled_floats(&a, values, NAN);
    CHECK_EQ(dcp_conv1d_backward(&c.params, &layout, c.total_rows, c.x, c.weight, c.bias, c.dy,
                                 dx_changed, dweight, dbias, NULL), DCP_OK);
    for (t = 0; t < c.total_rows; t++) {
        int in_changed = t >= first && t < end, valid = t < c.p.rows && global_row(&c.p, 0, t) >= 0;
        for (ch = 0; ch < 3; ch++) {
            if (!in_changed) CHECK(y[t * 3 + ch] == y_changed[t * 3 + ch]);
            if (!in_changed) CHECK(dx[t * 3 + ch] == dx_changed[t * 3 + ch]);
            if (!valid) CHECK(y[t * 3 + ch] == 0.0f && dx[t * 3 + ch] == 0.0f);
            if (valid) CHECK(y[t * 3 + ch] == y[t * 3 + ch] && dx[t * 3 + ch] == dx[t * 3 + ch]);
        }
    }
    arena_free(&a);
}

static double conv_loss(const conv_case *c, float *y)
{
    dcp_thd_layout layout = pack_layout(&c->p);
    double loss = 0.0;
    int64_t t;
    int32_t ch;
    CHECK_EQ(dcp_conv1d_forward(&c->params, &layout, c->total_rows, c->x, c->weight, c->bias, y,
                                NULL), DCP_OK);
    for (t = 0; t < c->p.rows; t++)
        if (global_row(&c->p, 0, t) >= 0)
            for (ch = 0; ch < c->params.channels; ch++)
                loss += (double)c->dy[t * c->params.channels + ch] * y[t * c->params.channels + ch];
    return loss;
}

/* Largest gap between central differences over the finite entries of values and grad. */
static double conv_fd_error(const conv_case *c, float *values, int64_t count, const float *grad,
                            float *y)
{
    double worst = 0.0;
    int64_t i;
    for (i = 0; i < count; i++) {
        float saved = values[i], plus, minus;
        double l_plus, l_minus, fd;
        if (saved != saved) continue; /* a padding row */
        plus = values[i] = (float)(saved + FD_STEP);
        l_plus = conv_loss(c, y);
        minus = values[i] = (float)(saved - FD_STEP);
        l_minus = conv_loss(c, y);
        values[i] = saved;
        fd = (l_plus - l_minus) / ((double)plus - minus);
        worst = fmax(worst, fabs(fd - grad[i]) / (fabs(fd) > 1.0 ? fabs(fd) : 1.0));
    }
    return worst;
}

static void conv_gradients_match_finite_differences(void)
{
    static const int32_t lengths[] = {4, 6, 1}, extra[] = {1, 0, 2};
    int silu, with_bias;
    for (silu = 0; silu <= 1; silu++)
        for (with_bias = 0; with_bias <= 1; with_bias++) {
            arena a = {{0}, 0};
            dcp_rng rng;
            conv_case c;
            dcp_thd_layout layout;
            float *dx, *y, dweight[2 * 4], dbias[2], zero_bias[2] = {0.0f, 0.0f};
            dcp_rng_seed(&rng, test_seed_for((uint64_t)(90 + 2 * silu + with_bias)));
            c = conv_case_make(&a, &rng, lengths, extra, 3, 3, 2, 4, silu, with_bias);
            layout = pack_layout(&c.p);
            dx = filled_floats(&a, c.total_rows * 2, NAN);
            y = arena_floats(&a, c.total_rows * 2);
            fill(dweight, 8, NAN);
            fill(dbias, 2, NAN);
            CHECK_EQ(dcp_conv1d_backward(&c.params, &layout, c.total_rows, c.x, c.weight,
                                         c.bias, c.dy, dx, dweight, dbias, NULL), DCP_OK);
            CHECK_NEAR(conv_fd_error(&c, c.x, c.total_rows * 2, dx, y), 0.0, FD_TOLERANCE);
            CHECK_NEAR(conv_fd_error(&c, c.weight, 8, dweight, y), 0.0, FD_TOLERANCE);
            if (!with_bias) c.bias = zero_bias; /* the gradient a bias would get */
            CHECK_NEAR(conv_fd_error(&c, c.bias, 2, dbias, y), 0.0, FD_TOLERANCE);
            arena_free(&a);
        }
}

/* -------------------------------------------------------------------------- bad arguments */

/* Uses the test's local `error`: the call fails with `expected` and a message naming `name`
   and `value`. */
#define CHECK_REJECTED(call, expected, name, value)                                            \
    do {                                                                                       \
        memset(&error, 0, sizeof error);                                                       \
        CHECK_EQ((call), (expected));                                                          \
        CHECK_EQ(error.status, (expected));                                                    \
        CHECK_CONTAINS(error.message, (name));                                                 \
        CHECK_CONTAINS(error.message, (value));                                                \
    } while (0)

static void layout_rejects_bad_fields(void)
{
    static const int32_t good[] = {0, 3, 5}, good_padded[] = {0, 4, 8};
    static const int32_t start5[] = {5, 8, 9}, decreasing[] = {0, 6, 4};
    static const int32_t long_valid[] = {0, 9, 10}, odd_padded[] = {0, 12, 16};
    dcp_thd_layout layout = {2, good, good_padded, 2};
    dcp_error error;
    int64_t rows = -1;
    CHECK_EQ(dcp_thd_layout_validate(&layout, &rows, &error), DCP_OK);
    CHECK_EQ(rows, 4);
    layout.cu_seqlens = start5;
    CHECK_REJECTED(dcp_thd_layout_validate(&layout, NULL, &error), DCP_ERROR_INVALID_ARGUMENT,
                   "cu_seqlens[0]", "got 5");
    layout.cu_seqlens = decreasing;
    CHECK_REJECTED(dcp_thd_layout_validate(&layout, NULL, &error), DCP_ERROR_INVALID_ARGUMENT,
                   "cu_seqlens decreases", "cu_seqlens[2] = 4");
    layout.cu_seqlens = long_valid;
    CHECK_REJECTED(dcp_thd_layout_validate(&layout, NULL, &error), DCP_ERROR_INVALID_ARGUMENT,
                   "valid length 9", "padded length 4");
    layout.cu_seqlens = good;
    layout.cu_seqlens_padded = odd_padded;
    layout.cp = 4;
    CHECK_REJECTED(dcp_thd_layout_validate(&layout, NULL, &error), DCP_ERROR_INVALID_ARGUMENT,
                   "padded length 12", "2 cp = 8");
    layout.cu_seqlens_padded = decreasing;
    CHECK_REJECTED(dcp_thd_layout_validate(&layout, NULL, &error), DCP_ERROR_INVALID_ARGUMENT,
                   "cu_seqlens_padded", "decreases");
    layout.cu_seqlens_padded = good_padded;
    layout.cp = 0;
    CHECK_REJECTED(dcp_thd_layout_validate(&layout, NULL, &error), DCP_ERROR_INVALID_ARGUMENT,
                   "cp", "got 0");
    layout.cp = 3; /* any size (cp_sizes ANY), but its padding multiple 2 cp still holds */
    CHECK_REJECTED(dcp_thd_layout_validate(&layout, NULL, &error), DCP_ERROR_INVALID_ARGUMENT,
                   "padded length 4", "2 cp = 6");
    layout.cp = 1;
    layout.num_sequences = -1;
    CHECK_REJECTED(dcp_thd_layout_validate(&layout, NULL, &error), DCP_ERROR_INVALID_ARGUMENT,
                   "num_sequences", "-1");
    layout.num_sequences = 2;
    layout.cu_seqlens = NULL;
    CHECK_REJECTED(dcp_thd_layout_validate(&layout, NULL, &error), DCP_ERROR_INVALID_ARGUMENT,
                   "cu_seqlens", "NULL");
    CHECK_REJECTED(dcp_thd_layout_validate(NULL, NULL, &error), DCP_ERROR_INVALID_ARGUMENT,
                   "layout", "NULL");
    layout.cu_seqlens = good;
    layout.num_sequences = 0; /* an empty pack is valid */
    CHECK_EQ(dcp_thd_layout_validate(&layout, &rows, NULL), DCP_OK);
    CHECK_EQ(rows, 0);
}

static void attention_rejects_bad_arguments(void)
{
    static const int32_t cu[] = {0, 3}, cu_padded[] = {0, 4};
    static const int32_t huge[] = {0, 2147483647};
    dcp_thd_layout layout = {1, cu, cu_padded, 2}, whole = {1, cu, cu_padded, 1};
    dcp_attention_params params, bad;
    dcp_attention_view view;
    dcp_error error;
    float q[32], k[32], v[32], out[32], lse[8], dq[32], dk[32], dv[32];
    fill(q, 32, 1.0f), fill(k, 32, 0.5f), fill(v, 32, 0.25f);
    fill(dq, 32, NAN), fill(dk, 32, NAN), fill(dv, 32, NAN);
    memset(&params, 0, sizeof params);
    params.num_heads = 2;
    params.head_dim = 4;
    memset(&view, 0, sizeof view);
    fill(out, 32, NAN);
    fill(lse, 8, NAN);
    bad = params, bad.num_heads = 6, bad.num_kv_heads = 4;
    CHECK_REJECTED(dcp_attention_forward(&bad, &layout, NULL, q, k, v, out, lse, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "num_heads 6", "num_kv_heads 4");
    bad = params, bad.num_heads = 0;
    CHECK_REJECTED(dcp_attention_forward(&bad, &layout, NULL, q, k, v, out, lse, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "num_heads", "got 0");
    bad = params, bad.head_dim = 300;
    CHECK_REJECTED(dcp_attention_forward(&bad, &layout, NULL, q, k, v, out, lse, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "head_dim", "300");
    bad = params, bad.causal = 2;
    CHECK_REJECTED(dcp_attention_forward(&bad, &layout, NULL, q, k, v, out, lse, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "causal", "got 2");
    bad = params, bad.softmax_scale = -1.0;
    CHECK_REJECTED(dcp_attention_forward(&bad, &layout, NULL, q, k, v, out, lse, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "softmax_scale", "-1");
    bad = params, bad.softmax_scale = NAN;
    CHECK_REJECTED(dcp_attention_forward(&bad, &layout, NULL, q, k, v, out, lse, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "softmax_scale", "nan");
    CHECK_REJECTED(dcp_attention_forward(NULL, &layout, NULL, q, k, v, out, lse, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "params", "NULL");
    view.q_rank = 2;
    CHECK_REJECTED(dcp_attention_forward(&params, &layout, &view, q, k, v, out, lse, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "view.q_rank", "got 2");
    view.q_rank = 0, view.kv_rank = -1;
    CHECK_REJECTED(dcp_attention_forward(&params, &layout, &view, q, k, v, out, lse, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "view.kv_rank", "got -1");
    view.kv_rank = 0, view.q_half = (dcp_half)7;
    CHECK_REJECTED(dcp_attention_forward(&params, &layout, &view, q, k, v, out, lse, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "view.q_half", "7");
    view.q_half = DCP_HALF_ALL, view.kv_half = DCP_HALF_FIRST;
    CHECK_REJECTED(dcp_attention_forward(&params, &whole, &view, q, k, v, out, lse, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "view.kv_half", "DCP_HALF_FIRST");
    CHECK_REJECTED(dcp_attention_forward(&params, &layout, NULL, q, NULL, v, out, lse, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "k", "NULL");
    CHECK_REJECTED(dcp_attention_backward(&params, &layout, NULL, q, k, v, out, q, lse, dq, dk,
                                          NULL, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "dv", "NULL");
    whole.cu_seqlens = huge, whole.cu_seqlens_padded = huge;
    bad = params, bad.num_heads = 1 << 30, bad.head_dim = 256;
    CHECK_REJECTED(dcp_attention_forward(&bad, &whole, NULL, q, k, v, out, lse, &error),
                   DCP_ERROR_OVERFLOW, "q", "2147483647 rows");
    CHECK(all_nan(out, 32) && all_nan(lse, 8) && all_nan(dq, 32) && all_nan(dk, 32));
    CHECK_REJECTED(dcp_attention_acc_merge(&params, &whole, DCP_HALF_SECOND, out, lse, q, lse,
                                           &error),
                   DCP_ERROR_INVALID_ARGUMENT, "half", "DCP_HALF_SECOND");
    CHECK_REJECTED(dcp_attention_acc_finalize(&params, &layout, 3, out, lse, q, lse, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "rank", "got 3");
    CHECK_REJECTED(dcp_attention_acc_init(&params, &layout, NULL, lse, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "acc_out", "NULL");
}

static void *failing_alloc(void *user, size_t size)
{
    (void)user, (void)size;
    return NULL;
}

static void failing_free(void *user, void *ptr) { (void)user, (void)ptr; }

static void ring_rejects_bad_arguments(void)
{
    static const int32_t cu[] = {0, 3}, cu_padded[] = {0, 4};
    dcp_thd_layout layout = {1, cu, cu_padded, 2};
    dcp_attention_params params;
    dcp_ring_step plan;
    dcp_allocator allocator = {failing_alloc, failing_free, NULL}, half_allocator = allocator;
    dcp_error error;
    float buffers[2][32];
    const float *in[2] = {buffers[0], buffers[1]}, *missing[2] = {buffers[0], NULL};
    float *out[2] = {buffers[0], buffers[1]};
    memset(&params, 0, sizeof params);
    params.num_heads = 1;
    params.head_dim = 4;
    half_allocator.free = NULL;
    CHECK_REJECTED(dcp_ring_step_plan(0, 0, 0, 1, &plan, &error), DCP_ERROR_INVALID_ARGUMENT,
                   "cp", "got 0");
    CHECK_REJECTED(dcp_ring_step_plan(4, 4, 0, 1, &plan, &error), DCP_ERROR_INVALID_ARGUMENT,
                   "rank", "got 4");
    CHECK_REJECTED(dcp_ring_step_plan(4, 1, -1, 1, &plan, &error), DCP_ERROR_INVALID_ARGUMENT,
                   "step", "got -1");
    CHECK_REJECTED(dcp_ring_step_plan(4, 1, 4, 1, &plan, &error), DCP_ERROR_INVALID_ARGUMENT,
                   "step", "got 4");
    CHECK_REJECTED(dcp_ring_step_plan(4, 1, 1, 5, &plan, &error), DCP_ERROR_INVALID_ARGUMENT,
                   "causal", "got 5");
    CHECK_REJECTED(dcp_ring_step_plan(4, 1, 1, 1, NULL, &error), DCP_ERROR_INVALID_ARGUMENT,
                   "plan", "NULL");
    CHECK_REJECTED(dcp_ring_attention_forward(&params, &layout, in, missing, in, out, out, NULL,
                                              &error),
                   DCP_ERROR_INVALID_ARGUMENT, "k[1]", "NULL");
    CHECK_REJECTED(dcp_ring_attention_forward(&params, &layout, in, in, in, NULL, out, NULL,
                                              &error),
                   DCP_ERROR_INVALID_ARGUMENT, "out", "NULL");
    CHECK_REJECTED(dcp_ring_attention_forward(&params, &layout, in, in, in, out, out,
                                              &half_allocator, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "allocator", "alloc and free");
    CHECK_REJECTED(dcp_ring_attention_forward(&params, &layout, in, in, in, out, out, &allocator,
                                              &error),
                   DCP_ERROR_OUT_OF_MEMORY, "ring attention", "bytes");
    CHECK_REJECTED(dcp_ring_attention_backward(&params, &layout, in, in, in, in, in, missing, out,
                                               out, out, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "lse[1]", "NULL");
}

static void rope_rejects_bad_arguments(void)
{
    static const int32_t cu[] = {0, 3}, cu_padded[] = {0, 4};
    dcp_thd_layout layout = {1, cu, cu_padded, 2};
    dcp_rope_options o;
    dcp_error error;
    double table[2] = {1.0, NAN};
    float x[32], y[32];
    fill(x, 32, 1.0f);
    fill(y, 32, NAN);
    memset(&o, 0, sizeof o);
    o.rotary_dim = 5;
    CHECK_REJECTED(dcp_rope_forward(&o, &layout, 0, 2, 8, x, y, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "rotary_dim", "got 5");
    o.rotary_dim = 10;
    CHECK_REJECTED(dcp_rope_forward(&o, &layout, 0, 2, 8, x, y, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "head_dim 8", "got 10");
    o.rotary_dim = 0;
    CHECK_REJECTED(dcp_rope_forward(&o, &layout, 0, 2, 7, x, y, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "rotary_dim", "got 7");
    o.theta_base = -2.0;
    CHECK_REJECTED(dcp_rope_forward(&o, &layout, 0, 2, 8, x, y, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "theta_base", "-2");
    o.theta_base = 0.0, o.rotary_dim = 4, o.inv_freq = table;
    CHECK_REJECTED(dcp_rope_backward(&o, &layout, 0, 2, 8, x, y, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "inv_freq[1]", "nan");
    o.inv_freq = NULL, o.style = (dcp_rope_style)3;
    CHECK_REJECTED(dcp_rope_forward(&o, &layout, 0, 2, 8, x, y, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "style", "3");
    CHECK_REJECTED(dcp_rope_forward(NULL, &layout, 2, 2, 8, x, y, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "rank", "got 2");
    CHECK_REJECTED(dcp_rope_forward(NULL, &layout, 0, 0, 8, x, y, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "num_heads", "got 0");
    CHECK_REJECTED(dcp_rope_backward(NULL, &layout, 0, 2, 8, x, NULL, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "dx", "NULL");
    CHECK(all_nan(y, 32));
}

static void conv_rejects_bad_arguments(void)
{
    static const int32_t cu[] = {0, 3}, cu_padded[] = {0, 4};
    dcp_thd_layout layout = {1, cu, cu_padded, 1}, split = {1, cu, cu_padded, 2};
    dcp_conv1d_params params, bad;
    dcp_error error;
    float x[16], w[16], b[2], y[16], dw[16];
    fill(x, 16, 1.0f), fill(w, 16, 0.5f), fill(b, 2, 0.1f), fill(y, 16, NAN), fill(dw, 16, NAN);
    memset(&params, 0, sizeof params);
    params.channels = 2; /* width 0: the default, 4 */
    CHECK_EQ(dcp_conv1d_forward(&params, &layout, 6, x, w, b, y, NULL), DCP_OK);
    fill(y, 16, NAN);
    bad = params, bad.width = 9;
    CHECK_REJECTED(dcp_conv1d_forward(&bad, &layout, 6, x, w, b, y, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "width", "got 9");
    bad = params, bad.channels = 0;
    CHECK_REJECTED(dcp_conv1d_forward(&bad, &layout, 6, x, w, b, y, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "channels", "got 0");
    bad = params, bad.silu = 2;
    CHECK_REJECTED(dcp_conv1d_forward(&bad, &layout, 6, x, w, b, y, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "silu", "got 2");
    CHECK_REJECTED(dcp_conv1d_forward(&params, &split, 6, x, w, b, y, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "cp 1", "cp 2");
    CHECK_REJECTED(dcp_conv1d_forward(&params, &layout, 3, x, w, b, y, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "total_rows 3", "= 4");
    CHECK_REJECTED(dcp_conv1d_forward(&params, &layout, 6, x, NULL, b, y, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "weight", "NULL");
    CHECK_REJECTED(dcp_conv1d_backward(&params, &layout, 6, x, w, b, x, y, dw, NULL, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "dbias", "bias");
    CHECK_REJECTED(dcp_conv1d_backward(NULL, &layout, 6, x, w, b, x, y, dw, b, &error),
                   DCP_ERROR_INVALID_ARGUMENT, "params", "NULL");
    CHECK(all_nan(y, 16) && all_nan(dw, 16));
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"ring_equals_single_rank", ring_equals_single_rank},
        {"ring_equals_single_rank_wide_heads", ring_equals_single_rank_wide_heads},
        {"seed003_same_batch_any_cp", seed003_same_batch_any_cp},
        {"ring_step_plan_table", ring_step_plan_table},
        {"ring_plan_equals_position_mask", ring_plan_equals_position_mask},
        {"attention_matches_formula", attention_matches_formula},
        {"attention_gqa_equals_repeated_kv", attention_gqa_equals_repeated_kv},
        {"attention_views_and_empty_rows", attention_views_and_empty_rows},
        {"merge_guards_and_combines", merge_guards_and_combines},
        {"attention_gradients_match_finite_differences",
         attention_gradients_match_finite_differences},
        {"rope_cp_positions_equal_split", rope_cp_positions_equal_split},
        {"rope_backward_inverts_forward", rope_backward_inverts_forward},
        {"rope_frequency_table", rope_frequency_table},
        {"rope_gradients_match_finite_differences", rope_gradients_match_finite_differences},
        {"conv_matches_formula", conv_matches_formula},
        {"conv_sequences_are_isolated", conv_sequences_are_isolated},
        {"conv_gradients_match_finite_differences", conv_gradients_match_finite_differences},
        {"layout_rejects_bad_fields", layout_rejects_bad_fields},
        {"attention_rejects_bad_arguments", attention_rejects_bad_arguments},
        {"ring_rejects_bad_arguments", ring_rejects_bad_arguments},
        {"rope_rejects_bad_arguments", rope_rejects_bad_arguments},
        {"conv_rejects_bad_arguments", conv_rejects_bad_arguments},
    };
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
