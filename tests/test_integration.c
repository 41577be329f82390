/* From a rank view to the attention call (docs/integration.md): the per-step arguments of a
   varlen kernel without CP (dcp_rank_view_varlen_call, FlashAttention's flash_attn_varlen_func)
   computed through FlashAttention's own semantics and merged through the LSE give exactly the
   ring of the CPU reference; TransformerEngine's THD split of a whole-sequence buffer
   (get_batch_on_this_cp_rank, get_cu_seqlens_on_cp_rank) gives exactly the view's rows; the
   runs and the idle form of a view. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "test.h"
#include "tolerance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define INTEGRATION_SEED 30
#define HEADS 2
#define KV_HEADS 1 /* GQA: both query heads read kv head 0 */
#define HEAD_DIM 8
#define PLANS 24
#define MAX_GROUP 16 /* the widest group a random plan below can hold */

/* A random batch and plan where groups of up to 8 ranks and padding (pad_multiple up to 8)
   occur: small token capacity, a few dozen samples of up to 256 tokens (which cp 8 holds).
   Every third plan holds short samples at a forced CP size of 2 to 8, where the padding
   reaches into the first chunks (a sample of 1 token at cp 4, pad_multiple 8: chunks of 1
   row, rank 0's first row the only valid one). */
static dcp_plan *random_plan(dcp_rng *rng)
{
    static const int32_t pad_multiples[] = {1, 3, 8};
    int64_t lengths[48];
    int32_t n = 8 + (int32_t)dcp_rng_below(rng, 40), i;
    dcp_config c = make_config(dcp_rng_below(rng, 2) ? 8 : 16, 32 + dcp_rng_below(rng, 64));
    int forced = dcp_rng_below(rng, 3) == 0;
    dcp_plan *plan = NULL;
    c.pad_multiple = pad_multiples[dcp_rng_below(rng, 3)];
    c.sync_ranks = 1;
    if (forced) c.min_cp = c.max_cp = 2 << dcp_rng_below(rng, 3);
    for (i = 0; i < n; i++) lengths[i] = 1 + (int64_t)dcp_rng_below(rng, forced ? 24 : 256);
    CHECK_EQ(dcp_plan_create(&c, lengths, n, &plan, NULL), DCP_OK);
    return plan;
}

/* FlashAttention's varlen forward as its documentation defines it, in double: sequence j is
   query rows cu_q[j] .. cu_q[j + 1] against key rows cu_k[j] .. cu_k[j + 1]; with causal, the
   mask is aligned to the bottom right (query i of Lq sees key m of Lk iff m <= i + Lk - Lq).
   out [rows, HEADS, HEAD_DIM], lse [HEADS, rows] (natural log). */
static void flash_varlen_reference(const float *q, const float *k, const float *v,
                                   const int32_t *cu_q, const int32_t *cu_k, int32_t sequences,
                                   int causal, double scale, int64_t total_q, double *out,
                                   double *lse)
{
    int32_t j, h, d;
    for (j = 0; j < sequences; j++) {
        int64_t lq = cu_q[j + 1] - cu_q[j], lk = cu_k[j + 1] - cu_k[j], i, m;
        for (i = 0; i < lq; i++)
            for (h = 0; h < HEADS; h++) {
                const float *qi = q + ((cu_q[j] + i) * HEADS + h) * HEAD_DIM;
                double best = -INFINITY, sum = 0.0, acc[HEAD_DIM] = {0};
                int64_t visible = causal ? i + lk - lq + 1 : lk;
                for (m = 0; m < visible; m++) { /* two passes: max, then the weights */
                    const float *km = k + ((cu_k[j] + m) * KV_HEADS + h * KV_HEADS / HEADS) *
                                              HEAD_DIM;
                    double s = 0.0;
                    for (d = 0; d < HEAD_DIM; d++) s += (double)qi[d] * km[d];
                    if (s * scale > best) best = s * scale;
                }
                for (m = 0; m < visible; m++) {
                    const int64_t kv = (cu_k[j] + m) * KV_HEADS + h * KV_HEADS / HEADS;
                    double s = 0.0, p;
                    for (d = 0; d < HEAD_DIM; d++) s += (double)qi[d] * k[kv * HEAD_DIM + d];
                    p = exp(s * scale - best);
                    sum += p;
                    for (d = 0; d < HEAD_DIM; d++) acc[d] += p * v[kv * HEAD_DIM + d];
                }
                for (d = 0; d < HEAD_DIM; d++)
                    out[((cu_q[j] + i) * HEADS + h) * HEAD_DIM + d] = sum > 0 ? acc[d] / sum : 0;
                lse[(int64_t)h * total_q + cu_q[j] + i] = sum > 0 ? best + log(sum) : -INFINITY;
            }
    }
}

/* Copies rows first[j] .. + (cu[j + 1] - cu[j]) of a [rows, width] buffer, sequence by
   sequence, into a packed buffer. */
static void gather_rows(const float *from, const int32_t *first, const int32_t *cu,
                        int32_t sequences, int32_t width, float *to)
{
    int32_t j;
    for (j = 0; j < sequences; j++)
        memcpy(to + (size_t)cu[j] * width, from + (size_t)first[j] * width,
               (size_t)(cu[j + 1] - cu[j]) * width * sizeof(float));
}

/* Folds a call's (out, lse) into the rank's accumulators at the call's query rows. */
static void merge_call(const double *out, const double *lse, const int32_t *q_row,
                       const int32_t *cu_q, int32_t sequences, int64_t total_q, int64_t rows,
                       double *acc_out, double *acc_lse)
{
    int32_t j, h, d;
    int64_t i;
    for (j = 0; j < sequences; j++)
        for (i = 0; i < cu_q[j + 1] - cu_q[j]; i++)
            for (h = 0; h < HEADS; h++) {
                const int64_t from = cu_q[j] + i, to = q_row[j] + i;
                const double part = lse[h * total_q + from], old = acc_lse[h * rows + to];
                double merged, a, b;
                if (part == -INFINITY) continue;
                merged = old == -INFINITY ? part
                                          : fmax(old, part) + log1p(exp(-fabs(old - part)));
                a = old == -INFINITY ? 0.0 : exp(old - merged);
                b = exp(part - merged);
                for (d = 0; d < HEAD_DIM; d++) {
                    double *o = &acc_out[(to * HEADS + h) * HEAD_DIM + d];
                    *o = a * *o + b * out[(from * HEADS + h) * HEAD_DIM + d];
                }
                acc_lse[h * rows + to] = merged;
            }
}

typedef struct group_buffers {
    int32_t cp;
    int64_t rows;
    float *q[MAX_GROUP], *k[MAX_GROUP], *v[MAX_GROUP], *out[MAX_GROUP], *lse[MAX_GROUP];
} group_buffers;

static void group_buffers_free(group_buffers *b)
{
    int32_t r;
    for (r = 0; r < b->cp; r++) free(b->q[r]), free(b->k[r]), free(b->v[r]), free(b->out[r]),
        free(b->lse[r]);
}

/* Random q, k, v on every valid row of every rank of the group; NaN on padding rows, which
   neither the reference nor a correct call may read. */
static void group_buffers_fill(group_buffers *b, const dcp_rank_view *view, dcp_rng *rng)
{
    int32_t r, e;
    int64_t row, *positions = (int64_t *)malloc((size_t)(view->local_tokens + 1) *
                                                 sizeof *positions);
    b->cp = view->cp;
    b->rows = view->local_tokens;
    for (r = 0; r < b->cp; r++) {
        dcp_rank_view member = *view;
        member.rank = view->first_rank + r;
        member.rank_in_group = r;
        CHECK_EQ(dcp_rank_view_positions(&member, NULL, positions, NULL), DCP_OK);
        b->q[r] = (float *)malloc((size_t)(b->rows + 1) * HEADS * HEAD_DIM * sizeof(float));
        b->k[r] = (float *)malloc((size_t)(b->rows + 1) * KV_HEADS * HEAD_DIM * sizeof(float));
        b->v[r] = (float *)malloc((size_t)(b->rows + 1) * KV_HEADS * HEAD_DIM * sizeof(float));
        b->out[r] = (float *)malloc((size_t)(b->rows + 1) * HEADS * HEAD_DIM * sizeof(float));
        b->lse[r] = (float *)malloc((size_t)(b->rows + 1) * HEADS * sizeof(float));
        for (row = 0; row < b->rows; row++) {
            for (e = 0; e < HEADS * HEAD_DIM; e++)
                b->q[r][row * HEADS * HEAD_DIM + e] =
                    positions[row] < 0 ? NAN : (float)(2.0 * dcp_rng_uniform(rng) - 1.0);
            for (e = 0; e < KV_HEADS * HEAD_DIM; e++) {
                b->k[r][row * KV_HEADS * HEAD_DIM + e] =
                    positions[row] < 0 ? NAN : (float)(2.0 * dcp_rng_uniform(rng) - 1.0);
                b->v[r][row * KV_HEADS * HEAD_DIM + e] =
                    positions[row] < 0 ? NAN : (float)(2.0 * dcp_rng_uniform(rng) - 1.0);
            }
        }
    }
    free(positions);
}

/* Rank r of the group: the cp varlen calls, merged, against the reference ring's out, lse. */
static void check_rank_calls(const dcp_rank_view *view, const group_buffers *b, int causal,
                             double scale)
{
    const int32_t n = view->num_samples, r = view->rank_in_group;
    const int64_t rows = b->rows;
    int32_t *arrays = (int32_t *)malloc((size_t)5 * (n + 1) * sizeof(int32_t)), step;
    dcp_varlen_rows at = {arrays, arrays + (n + 1), arrays + 2 * (n + 1), arrays + 3 * (n + 1),
                          arrays + 4 * (n + 1)};
    double *acc_out = (double *)calloc((size_t)(rows + 1) * HEADS * HEAD_DIM, sizeof(double));
    double *acc_lse = (double *)malloc((size_t)(rows + 1) * HEADS * sizeof(double));
    float *got_out = (float *)malloc((size_t)(rows + 1) * HEADS * HEAD_DIM * sizeof(float));
    float *got_lse = (float *)malloc((size_t)(rows + 1) * HEADS * sizeof(float));
    int64_t i;
    for (i = 0; i < rows * HEADS; i++) acc_lse[i] = -INFINITY;
    for (step = 0; step < view->cp; step++) {
        dcp_varlen_call call;
        dcp_ring_step plan;
        float *q, *k, *v;
        double *out, *lse;
        CHECK_EQ(dcp_rank_view_varlen_call(view, step, causal, &call, &at, NULL), DCP_OK);
        CHECK_EQ(dcp_ring_step_plan(view->cp, r, step, 1, &plan, NULL), DCP_OK);
        CHECK_EQ(call.kv_rank, plan.view.kv_rank); /* the ring order's source */
        CHECK(call.causal == (causal && step == 0));
        q = (float *)malloc((size_t)(call.total_q + 1) * HEADS * HEAD_DIM * sizeof(float));
        k = (float *)malloc((size_t)(call.total_k + 1) * KV_HEADS * HEAD_DIM * sizeof(float));
        v = (float *)malloc((size_t)(call.total_k + 1) * KV_HEADS * HEAD_DIM * sizeof(float));
        out = (double *)malloc((size_t)(call.total_q + 1) * HEADS * HEAD_DIM * sizeof(double));
        lse = (double *)malloc((size_t)(call.total_q + 1) * HEADS * sizeof(double));
        gather_rows(b->q[r], at.q_row, at.cu_seqlens_q, call.num_sequences, HEADS * HEAD_DIM, q);
        gather_rows(b->k[call.kv_rank], at.kv_row, at.cu_seqlens_k, call.num_sequences,
                    KV_HEADS * HEAD_DIM, k);
        gather_rows(b->v[call.kv_rank], at.kv_row, at.cu_seqlens_k, call.num_sequences,
                    KV_HEADS * HEAD_DIM, v);
        flash_varlen_reference(q, k, v, at.cu_seqlens_q, at.cu_seqlens_k, call.num_sequences,
                               call.causal, scale, call.total_q, out, lse);
        merge_call(out, lse, at.q_row, at.cu_seqlens_q, call.num_sequences, call.total_q, rows,
                   acc_out, acc_lse);
        free(q), free(k), free(v), free(out), free(lse);
    }
    for (i = 0; i < rows * HEADS * HEAD_DIM; i++) got_out[i] = (float)acc_out[i];
    for (i = 0; i < rows * HEADS; i++) got_lse[i] = (float)acc_lse[i];
    CHECK(compare("out of the merged varlen calls", got_out, b->out[r], rows * HEADS * HEAD_DIM,
                  tolerance_sum()));
    CHECK(compare("lse of the merged varlen calls", got_lse, b->lse[r], rows * HEADS,
                  tolerance_lse()));
    free(arrays), free(acc_out), free(acc_lse), free(got_out), free(got_lse);
}

static void check_group(const dcp_plan *plan, int32_t k, const dcp_group *g, dcp_rng *rng,
                        int causal)
{
    dcp_attention_params params;
    dcp_thd_layout layout;
    group_buffers b;
    dcp_rank_view *views[MAX_GROUP] = {NULL};
    int32_t r;
    memset(&params, 0, sizeof params);
    params.num_heads = HEADS, params.num_kv_heads = KV_HEADS, params.head_dim = HEAD_DIM;
    params.causal = causal;
    for (r = 0; r < g->cp; r++)
        CHECK_EQ(dcp_rank_view_create(plan, g->first_rank + r, k, &views[r], NULL), DCP_OK);
    if (!views[g->cp - 1]) return;
    memset(&b, 0, sizeof b);
    group_buffers_fill(&b, views[0], rng);
    layout.num_sequences = views[0]->num_samples;
    layout.cu_seqlens = views[0]->cu_seqlens;
    layout.cu_seqlens_padded = views[0]->cu_seqlens_padded;
    layout.cp = g->cp;
    CHECK_EQ(dcp_ring_attention_forward(&params, &layout, (const float *const *)b.q,
                                        (const float *const *)b.k, (const float *const *)b.v,
                                        b.out, b.lse, NULL, NULL),
             DCP_OK);
    for (r = 0; r < g->cp; r++) check_rank_calls(views[r], &b, causal, 1.0 / sqrt(HEAD_DIM));
    group_buffers_free(&b);
    for (r = 0; r < g->cp; r++) dcp_rank_view_destroy(views[r]);
}

/* Every group of random plans (cp 1 to 8, padding up to pad_multiple 8, causal and full). */
static void varlen_calls_reproduce_the_ring(void)
{
    dcp_rng rng;
    int32_t p, k, g, cps_seen = 0;
    dcp_rng_seed(&rng, test_seed_for(INTEGRATION_SEED));
    for (p = 0; p < PLANS; p++) {
        dcp_plan *plan = random_plan(&rng);
        if (!plan) continue;
        for (k = 0; k < plan->num_microbatches; k++)
            for (g = plan->microbatch_offsets[k]; g < plan->microbatch_offsets[k + 1]; g++) {
                cps_seen |= plan->groups[g].cp;
                check_group(plan, k, &plan->groups[g], &rng, (int)(p % 2 == 0));
            }
        dcp_plan_destroy(plan);
    }
    CHECK((cps_seen & (1 | 2 | 4 | 8)) == (1 | 2 | 4 | 8)); /* every size took part */
}

/* TransformerEngine's THD split of a whole-sequence buffer (get_batch_on_this_cp_rank: rank
   r takes slices r and 2c-1-r of each sequence's 2c slices of the padded length) and its valid
   rows per rank (get_cu_seqlens_on_cp_rank: each slice's length clamped to [0, slice]) are the
   view's rows: the cu arrays TE takes are the view's cu_seqlens and cu_seqlens_padded. */
static void transformer_engine_split_is_the_view(void)
{
    dcp_rng rng;
    int32_t p, k, rank;
    dcp_rng_seed(&rng, test_seed_for(INTEGRATION_SEED + 1));
    for (p = 0; p < PLANS; p++) {
        dcp_plan *plan = random_plan(&rng);
        if (!plan) continue;
        for (k = 0; k < plan->num_microbatches; k++)
            for (rank = 0; rank < plan->config.ranks; rank++) {
                dcp_rank_view *v = NULL;
                int64_t *positions, row = 0, valid_rows = 0, te_valid = 0, i;
                int32_t s, half;
                CHECK_EQ(dcp_rank_view_create(plan, rank, k, &v, NULL), DCP_OK);
                if (!v) continue;
                positions = (int64_t *)malloc((size_t)(v->local_tokens + 1) * sizeof *positions);
                CHECK_EQ(dcp_rank_view_positions(v, NULL, positions, NULL), DCP_OK);
                for (s = 0; s < v->num_samples; s++) {
                    const int64_t start = v->cu_seqlens_padded[s];
                    const int64_t padded = v->cu_seqlens_padded[s + 1] - start;
                    const int64_t length = v->cu_seqlens[s + 1] - v->cu_seqlens[s];
                    const int32_t c = v->cp, slices = c > 1 ? 2 : 1;
                    const int64_t slice = c > 1 ? padded / (2 * (int64_t)c) : padded;
                    for (half = 0; half < slices; half++) {
                        const int64_t first = half == 0 ? v->rank_in_group : 2 * c - 1 -
                                                                                 v->rank_in_group;
                        const int64_t te_len = length - first * slice;
                        te_valid += te_len < 0 ? 0 : te_len > slice ? slice : te_len;
                        for (i = 0; i < slice; i++, row++) { /* global index - start */
                            const int64_t position = first * slice + i;
                            CHECK_EQ(positions[row], position < length ? position : -1);
                        }
                    }
                }
                for (i = 0; i < v->local_tokens; i++) valid_rows += positions[i] >= 0;
                CHECK_EQ(row, v->local_tokens);
                CHECK_EQ(te_valid, valid_rows);
                free(positions);
                dcp_rank_view_destroy(v);
            }
        dcp_plan_destroy(plan);
    }
}

/* Runs: in row order, every row once, positions as dcp_rank_view_positions; NULL asks the
   count, a short capacity is an error that writes nothing past it. */
static void runs_are_the_rows(void)
{
    dcp_rng rng;
    int32_t p, k, rank;
    dcp_rng_seed(&rng, test_seed_for(INTEGRATION_SEED + 2));
    for (p = 0; p < PLANS / 2; p++) {
        dcp_plan *plan = random_plan(&rng);
        if (!plan) continue;
        for (k = 0; k < plan->num_microbatches; k++)
            for (rank = 0; rank < plan->config.ranks; rank++) {
                dcp_rank_view *v = NULL;
                dcp_row_run *runs;
                int32_t count = -1, again = -1, i, *slots;
                int64_t *positions, row = 0, j;
                dcp_error error;
                CHECK_EQ(dcp_rank_view_create(plan, rank, k, &v, NULL), DCP_OK);
                if (!v) continue;
                CHECK_EQ(dcp_rank_view_runs(v, NULL, 0, &count, NULL), DCP_OK);
                CHECK(count <= DCP_ROW_RUNS_PER_SAMPLE * v->num_samples);
                runs = (dcp_row_run *)malloc((size_t)(count + 1) * sizeof *runs);
                positions = (int64_t *)malloc((size_t)(v->local_tokens + 1) * sizeof *positions);
                slots = (int32_t *)malloc((size_t)(v->local_tokens + 1) * sizeof *slots);
                CHECK_EQ(dcp_rank_view_positions(v, slots, positions, NULL), DCP_OK);
                CHECK_EQ(dcp_rank_view_runs(v, runs, count, &again, NULL), DCP_OK);
                CHECK_EQ(again, count);
                for (i = 0; i < count; i++) {
                    CHECK_EQ(runs[i].first_row, row);
                    CHECK(runs[i].rows >= 1);
                    for (j = 0; j < runs[i].rows; j++, row++) {
                        CHECK_EQ(slots[row], runs[i].slot);
                        CHECK_EQ(positions[row], runs[i].position < 0 ? -1 : runs[i].position + j);
                    }
                }
                CHECK_EQ(row, v->local_tokens);
                if (count > 0) {
                    dcp_row_run guard = runs[count - 1];
                    CHECK_EQ(dcp_rank_view_runs(v, runs, count - 1, &again, &error),
                             DCP_ERROR_INVALID_ARGUMENT);
                    CHECK_CONTAINS(error.message, "capacity");
                    CHECK(memcmp(&guard, &runs[count - 1], sizeof guard) == 0);
                }
                free(runs), free(positions), free(slots);
                dcp_rank_view_destroy(v);
            }
        dcp_plan_destroy(plan);
    }
}

/* An idle rank's view is no group: cp 0, DCP_NO_GROUP, nothing to pad; the old look-alike
   (cp 1, first_rank = rank) is refused; the communicator choice still takes it. */
static void idle_view_is_not_a_group(void)
{
    const int64_t lengths[] = {100};
    dcp_config c = make_config(4, 4096);
    dcp_plan *plan = NULL;
    dcp_rank_view *v = NULL, copy;
    dcp_comm_choice choice;
    dcp_varlen_call call;
    int32_t cells[5][2];
    dcp_varlen_rows rows = {cells[0], cells[1], cells[2], cells[3], cells[4]};
    dcp_error error;
    c.max_cp = 1;
    CHECK_EQ(dcp_plan_create(&c, lengths, 1, &plan, NULL), DCP_OK);
    CHECK_EQ(dcp_rank_view_create(plan, 3, 0, &v, NULL), DCP_OK);
    if (!v) return;
    CHECK_EQ(v->idle, 1);
    CHECK_EQ(v->cp, 0);
    CHECK_EQ(v->first_rank, DCP_NO_GROUP);
    CHECK_EQ(v->rank_in_group, DCP_NO_GROUP);
    CHECK_EQ(v->num_samples, 0);
    CHECK_EQ(v->cu_seqlens[0], 0);
    CHECK_EQ(v->local_tokens, 0);
    CHECK_EQ(v->pad_multiple, 0);
    CHECK_EQ(v->max_seqlen, 0);
    CHECK_EQ(dcp_rank_view_validate(v, NULL), DCP_OK);
    CHECK_EQ(dcp_rank_view_varlen_call(v, 0, 1, &call, &rows, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "rank 3 is idle in microbatch 0");
    copy = *v;
    copy.cp = 1, copy.first_rank = 3, copy.rank_in_group = 0; /* the form it replaced */
    CHECK_EQ(dcp_rank_view_validate(&copy, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "idle is cp 0");
    copy = *v;
    copy.idle = 0; /* a group of size 0 */
    CHECK_EQ(dcp_rank_view_validate(&copy, &error), DCP_ERROR_INVALID_ARGUMENT);
#ifndef DCP_NO_DISTRIBUTED
    CHECK_EQ(dcp_comm_choose(4, 1, 3, v->first_rank, v->cp, v->idle, &choice, NULL), DCP_OK);
    CHECK_EQ(choice.cp, 1);
    CHECK_EQ(choice.idle, 1);
    CHECK_EQ(dcp_comm_choose(4, 1, 3, DCP_NO_GROUP, 0, 0, &choice, &error),
             DCP_ERROR_INVALID_ARGUMENT); /* not idle: cp 0 is no group */
#else
    (void)choice;
#endif
    dcp_rank_view_destroy(v);
    dcp_plan_destroy(plan);
}

/* The call's own argument checks name what is wrong. */
static void varlen_call_checks_its_arguments(void)
{
    const int64_t lengths[] = {1000, 3000};
    dcp_config c = make_config(4, 1024);
    dcp_plan *plan = NULL;
    dcp_rank_view *v = NULL;
    dcp_varlen_call call;
    int32_t cells[5][3];
    dcp_varlen_rows rows = {cells[0], cells[1], cells[2], cells[3], cells[4]}, missing = rows;
    dcp_error error;
    CHECK_EQ(dcp_plan_create(&c, lengths, 2, &plan, NULL), DCP_OK);
    CHECK_EQ(dcp_rank_view_create(plan, 0, 0, &v, NULL), DCP_OK);
    if (!v) return;
    CHECK_EQ(dcp_rank_view_varlen_call(v, v->cp, 1, &call, &rows, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "step");
    CHECK_EQ(dcp_rank_view_varlen_call(v, 0, 2, &call, &rows, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "causal must be 0 or 1, got 2");
    missing.kv_row = NULL;
    CHECK_EQ(dcp_rank_view_varlen_call(v, 0, 1, &call, &missing, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "must not be NULL");
    CHECK_EQ(dcp_rank_view_varlen_call(NULL, 0, 1, &call, &rows, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_rank_view_varlen_call(v, 0, 1, &call, &rows, NULL), DCP_OK);
    CHECK_EQ(call.total_q, rows.cu_seqlens_q[call.num_sequences]);
    dcp_rank_view_destroy(v);
    dcp_plan_destroy(plan);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"varlen_calls_reproduce_the_ring", varlen_calls_reproduce_the_ring},
        {"transformer_engine_split_is_the_view", transformer_engine_split_is_the_view},
        {"runs_are_the_rows", runs_are_the_rows},
        {"idle_view_is_not_a_group", idle_view_is_not_a_group},
        {"varlen_call_checks_its_arguments", varlen_call_checks_its_arguments},
    };
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
