/* The planner's guarantee on random workloads: the dynamic plan's step under its E is never
   longer than the static, the greedy or Megatron-LM's plan (dcp.h's port of its scheduler,
   where that plan is a plan of the config) under the same E and cost model, to the bit
   (dcp_plan_step_time's number; no tolerance), and never below the lower bound. The workloads
   span what a user may give: pools of 2 to 1,024 ranks, the non-powers of two 6 .. 384 among
   them; the five length shapes of bench/length_shapes.h; the default and the L^2 model;
   E = 1, a power of two strictly between (where the pool has one) and D; memory caps from
   below the typical length (wide CP sizes forced) to many samples per rank; microbatch
   multiples 1 to 8; sometimes a smaller max_cp, a larger min_cp or padding multiples; a
   third of them with the ring charged per sample, and a third with another set of CP sizes
   (cp_sizes MEGATRON: a group of the whole pool where it is not a power of two; ANY: every
   size, groups on any range; LIST: a random list), half of those with every rank busy
   (cover_ranks), each drawn from a stream of its own, so that the workloads are those drawn
   without them.
   Under the sanitizers (the -san build) fewer workloads, the same draws for those. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "test.h"
#include "../bench/length_shapes.h"

#if defined(__SANITIZE_ADDRESS__)
#define GUARANTEE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GUARANTEE_SANITIZED 1
#endif
#endif

#ifdef GUARANTEE_SANITIZED
#define GUARANTEE_WORKLOADS 1000
#else
#define GUARANTEE_WORKLOADS 3000
#endif
#define GUARANTEE_SEED 2026112528
/* the per-sample ring charge's own stream (see above) and its share of the workloads */
#define GUARANTEE_CHARGE_STREAM UINT64_C(0x52494e47) /* "RING" */
#define GUARANTEE_PER_SAMPLE_SHARE 3
/* Megatron's CP sizes' own stream and share; half of those cover every rank */
#define GUARANTEE_SETS_STREAM UINT64_C(0x53455453) /* "SETS" */
#define GUARANTEE_SETS_SHARE 3
#define GUARANTEE_LIST_SIZES 5 /* sizes a random list adds to the largest */
#define GUARANTEE_MAX_SAMPLES 512
#define GUARANTEE_MAX_RANKS 1024
#define GUARANTEE_MAX_MULTIPLE 8
/* Memory caps M from GUARANTEE_MIN_CAP to GUARANTEE_MAX_CAP tokens per rank (log-uniform);
   the typical length T from M / 2^GUARANTEE_LOOSE_LOG2 (loose: many samples per rank) to
   M x 2^GUARANTEE_TIGHT_LOG2 (tight: most samples need several ranks). */
#define GUARANTEE_MIN_CAP 64
#define GUARANTEE_MAX_CAP 16384
#define GUARANTEE_LOOSE_LOG2 5
#define GUARANTEE_TIGHT_LOG2 2

static const int32_t non_power_pools[] = {6, 12, 24, 48, 96, 192, 384};

/* The sync models checked per workload: E = 1, between, E = D. */
enum { SYNC_ONE, SYNC_BETWEEN, SYNC_POOL, SYNC_MODELS };
static const char *const sync_names[SYNC_MODELS] = {"E = 1", "1 < E < D", "E = D"};

typedef struct guarantee_workload {
    dcp_config config;
    length_shape shape;
    int64_t typical;
    int32_t count;
    int64_t lengths[GUARANTEE_MAX_SAMPLES];
} guarantee_workload;

static int32_t draw_pool(dcp_rng *rng)
{
    switch (dcp_rng_below(rng, 3)) {
    case 0: return non_power_pools[dcp_rng_below(rng, TEST_COUNT(non_power_pools))];
    case 1: return (int32_t)1 << (1 + dcp_rng_below(rng, 10)); /* 2 .. 1024 */
    default: return 2 + (int32_t)dcp_rng_below(rng, GUARANTEE_MAX_RANKS - 1);
    }
}

/* The longest length that fits max_cp ranks after padding (the config resolved): padded
   lengths at max_cp are the multiples of padded(1), and at most max_cp M fit. */
static int64_t longest_feasible(const dcp_config *resolved)
{
    int64_t multiple = 1, room = (int64_t)resolved->max_cp * resolved->max_tokens_per_rank;
    dcp_padded_length(resolved, 1, resolved->max_cp, &multiple, NULL);
    return room / multiple * multiple;
}

static void draw_workload(dcp_rng *rng, guarantee_workload *w)
{
    dcp_config resolved;
    int32_t top = 1;
    int64_t cap = 0;
    double spread = log((double)GUARANTEE_MAX_CAP / GUARANTEE_MIN_CAP);
    dcp_config *c = &w->config;
    cap = (int64_t)(GUARANTEE_MIN_CAP * exp(spread * dcp_rng_uniform(rng)));
    *c = make_config(draw_pool(rng), cap);
    while (top * 2 <= c->ranks) top *= 2;
    if (dcp_rng_below(rng, 4) == 0) c->max_cp = 1 << dcp_rng_below(rng, dcp__log2_int(top) + 1);
    if (dcp_rng_below(rng, 8) == 0) c->min_cp = 2;
    if (c->max_cp != 0 && c->min_cp > c->max_cp) c->min_cp = 0;
    if (c->min_cp > top) c->min_cp = 0;
    c->microbatch_multiple = 1 + (int32_t)dcp_rng_below(rng, GUARANTEE_MAX_MULTIPLE);
    if (dcp_rng_below(rng, 4) == 0) {
        c->pad_multiple = 1 + (int32_t)dcp_rng_below(rng, 8);
        c->pad_multiple_cp1 = 1 + (int32_t)dcp_rng_below(rng, 8);
    }
    if (dcp_rng_below(rng, 2)) c->cost.attn_coeff = 1.0; /* the L^2 model, else the default */
    w->shape = (length_shape)dcp_rng_below(rng, LENGTH_SHAPES);
    w->typical = (int64_t)((double)cap *
                           exp2((double)(GUARANTEE_LOOSE_LOG2 + GUARANTEE_TIGHT_LOG2) *
                                    dcp_rng_uniform(rng) -
                                GUARANTEE_LOOSE_LOG2));
    if (w->typical < 1) w->typical = 1;
    w->count = 1 + (int32_t)dcp_rng_below(rng, GUARANTEE_MAX_SAMPLES);
    dcp_config_resolve(c, &resolved, NULL);
    length_batch(rng, w->shape, w->typical, longest_feasible(&resolved), w->lengths, w->count);
}

/* A power of two strictly between 1 and D dividing D, drawn; 0 when the pool has none. */
static int32_t draw_between(dcp_rng *rng, int32_t ranks)
{
    int32_t e, choices = 0, pick = 0;
    for (e = 2; e < ranks; e *= 2)
        if (ranks % e == 0 && dcp_rng_below(rng, (uint64_t)++choices) == 0) pick = e;
    return pick;
}

static dcp_plan *plan_of(dcp_config c, dcp_strategy strategy, int32_t sync,
                         const guarantee_workload *w)
{
    dcp_plan *plan = NULL;
    dcp_error error;
    c.strategy = strategy;
    c.sync_ranks = sync;
    if (dcp_plan_create(&c, w->lengths, w->count, &plan, &error) != DCP_OK) {
        fprintf(stderr, "%s plan: %s\n", dcp_strategy_name(strategy), error.message);
        return NULL;
    }
    return plan;
}

/* Megatron-LM's plan of the workload (the planner's port of its scheduler), NULL when it is
   no plan of the config (with cover_ranks: when it leaves a rank idle). */
static dcp_plan *megatron_plan_of(const guarantee_workload *w)
{
    dcp_config resolved;
    dcp__sets sets;
    dcp__batch batch;
    dcp__placement *placements;
    dcp_plan *plan = NULL;
    int32_t microbatches = 0;
    if (dcp_config_resolve(&w->config, &resolved, NULL) != DCP_OK ||
        dcp__sets_init(&sets, &resolved, w->lengths, w->count, NULL) != DCP_OK)
        return NULL;
    batch = dcp__sets_batch(&sets);
    placements = (dcp__placement *)malloc((size_t)w->count * sizeof *placements);
    if (placements &&
        dcp__plan_megatron(&batch, placements, &microbatches, NULL) == DCP_OK &&
        microbatches > 0)
        dcp__plan_build(&resolved, w->lengths, placements, w->count, microbatches, &plan, NULL);
    free(placements);
    dcp__sets_free(&sets);
    if (plan && dcp_plan_validate(plan, NULL) != DCP_OK) { /* idle ranks under cover_ranks */
        dcp_plan_destroy(plan);
        plan = NULL;
    }
    return plan;
}

/* Another set of CP sizes for the workload, and with `cover` every rank busy. max_cp and
   min_cp go back to their defaults where the set lacks them (under cover max_cp always: the
   whole pool is then a group of MEGATRON and ANY). A list keeps the largest size the lengths
   were drawn for, so that they stay feasible, and adds random others. */
static void use_sizes(guarantee_workload *w, dcp_cp_sizes kind, int cover, dcp_rng *rng)
{
    dcp_config sizes = make_config(w->config.ranks, 1), drawn, resolved;
    int32_t i, extra;
    dcp_config_resolve(&w->config, &drawn, NULL);
    sizes.cp_sizes = kind;
    if (kind == DCP_CP_SIZES_LIST) {
        int32_t list[GUARANTEE_LIST_SIZES + 1], n = 0, k, j;
        list[n++] = drawn.max_cp;
        extra = (int32_t)dcp_rng_below(rng, GUARANTEE_LIST_SIZES);
        for (i = 0; i < extra; i++) list[n++] = 1 + (int32_t)dcp_rng_below(rng, (uint64_t)drawn.max_cp);
        for (i = 1; i < n; i++) /* sort, unique */
            for (j = i; j > 0 && list[j] < list[j - 1]; j--) {
                k = list[j];
                list[j] = list[j - 1];
                list[j - 1] = k;
            }
        for (i = 0; i < n; i++)
            if (sizes.cp_size_count == 0 || sizes.cp_size_list[sizes.cp_size_count - 1] != list[i])
                sizes.cp_size_list[sizes.cp_size_count++] = list[i];
    }
    dcp_config_resolve(&sizes, &resolved, NULL);
    w->config.cp_sizes = kind;
    w->config.cp_size_count = sizes.cp_size_count;
    memcpy(w->config.cp_size_list, sizes.cp_size_list, sizeof sizes.cp_size_list);
    w->config.cover_ranks = cover && kind != DCP_CP_SIZES_LIST;
    if (w->config.cover_ranks || !dcp_cp_size_allowed(&resolved, w->config.max_cp))
        w->config.max_cp = 0;
    if (w->config.min_cp > 0 && !dcp_cp_size_allowed(&resolved, w->config.min_cp))
        w->config.min_cp = 0;
}

static void describe(const guarantee_workload *w, int32_t index, int32_t sync)
{
    fprintf(stderr,
            "  workload %d: %s T %lld, %d samples, D %d, M %lld, E %d, %s model, multiple %d, "
            "min_cp %d, max_cp %d, pads %d/%d, ring per %s, cp_sizes %s, cover %d\n",
            (int)index, length_shape_names[w->shape], (long long)w->typical, (int)w->count,
            (int)w->config.ranks, (long long)w->config.max_tokens_per_rank, (int)sync,
            w->config.cost.attn_coeff == 1.0 ? "L^2" : "default",
            (int)w->config.microbatch_multiple, (int)w->config.min_cp, (int)w->config.max_cp,
            (int)w->config.pad_multiple, (int)w->config.pad_multiple_cp1,
            w->config.ring_charge == DCP_RING_PER_SAMPLE ? "sample" : "group",
            dcp_cp_sizes_name(w->config.cp_sizes), (int)w->config.cover_ranks);
}

typedef struct guarantee_tally {
    int32_t checked, faster, log_count, megatron;
    double log_gain; /* sum of log(better baseline / dynamic) */
} guarantee_tally;

/* The dynamic plan made for E against the baselines' plans (greedy, static, Megatron's or
   NULL), all under E. */
static void check_one(const guarantee_workload *w, int32_t index, int32_t sync,
                      dcp_plan *const baselines[3], guarantee_tally *tally)
{
    dcp_plan *plan = plan_of(w->config, DCP_STRATEGY_DYNAMIC, sync, w);
    dcp_plan_stats stats;
    double step = 0.0, other[3] = {0.0, 0.0, 0.0};
    int b, failures = test_current_failures;
    CHECK(plan != NULL);
    if (!plan) return;
    CHECK_EQ(dcp_plan_validate(plan, NULL), DCP_OK);
    CHECK_EQ(plan->num_microbatches % plan->config.microbatch_multiple, 0);
    CHECK_EQ(dcp_plan_simulate(plan, NULL, &stats, NULL), DCP_OK);
    CHECK_EQ(dcp_plan_step_time(plan, NULL, sync, &step, NULL), DCP_OK);
    CHECK(step == stats.step_seconds);
    CHECK(step >= stats.lower_bound_seconds * (1.0 - 1e-9));
    for (b = 0; b < 3 && baselines[b]; b++) {
        CHECK_EQ(dcp_plan_step_time(baselines[b], NULL, sync, &other[b], NULL), DCP_OK);
        CHECK(step <= other[b]); /* exact: the planner's final choice is this very number */
    }
    tally->megatron += baselines[2] != NULL;
    if (test_current_failures > failures) {
        describe(w, index, sync);
        fprintf(stderr, "  dynamic %.17g, greedy %.17g, static %.17g, megatron %.17g\n", step,
                other[0], other[1], other[2]);
    }
    tally->checked++;
    tally->faster += step < other[0] && step < other[1];
    if (step > 0.0) {
        tally->log_gain += log((other[0] < other[1] ? other[0] : other[1]) / step);
        tally->log_count++;
    }
    dcp_plan_destroy(plan);
}

static void dynamic_never_behind_a_baseline(void)
{
    static guarantee_workload w;
    guarantee_tally tally[SYNC_MODELS];
    dcp_rng rng, charge_rng, sets_rng;
    int32_t index, m, shapes[LENGTH_SHAPES], non_power = 0, per_sample = 0, megatron = 0;
    int32_t covered = 0;
    int32_t failures = test_current_failures;
    memset(tally, 0, sizeof tally);
    memset(shapes, 0, sizeof shapes);
    dcp_rng_seed(&rng, test_seed_for(GUARANTEE_SEED));
    dcp_rng_seed(&charge_rng, test_seed_for(GUARANTEE_SEED) ^ GUARANTEE_CHARGE_STREAM);
    dcp_rng_seed(&sets_rng, test_seed_for(GUARANTEE_SEED) ^ GUARANTEE_SETS_STREAM);
    for (index = 0; index < GUARANTEE_WORKLOADS && test_current_failures - failures < 10;
         index++) {
        dcp_plan *baselines[3];
        int32_t syncs[SYNC_MODELS];
        draw_workload(&rng, &w);
        if (dcp_rng_below(&charge_rng, GUARANTEE_PER_SAMPLE_SHARE) == 0)
            w.config.ring_charge = DCP_RING_PER_SAMPLE;
        per_sample += w.config.ring_charge == DCP_RING_PER_SAMPLE;
        if (dcp_rng_below(&sets_rng, GUARANTEE_SETS_SHARE) == 0) {
            static const dcp_cp_sizes kinds[] = {DCP_CP_SIZES_MEGATRON, DCP_CP_SIZES_ANY,
                                                 DCP_CP_SIZES_LIST};
            const dcp_cp_sizes kind = kinds[dcp_rng_below(&sets_rng, TEST_COUNT(kinds))];
            use_sizes(&w, kind, (int)dcp_rng_below(&sets_rng, 2), &sets_rng);
        }
        megatron += w.config.cp_sizes != DCP_CP_SIZES_POW2;
        covered += w.config.cover_ranks;
        syncs[SYNC_ONE] = 1;
        syncs[SYNC_BETWEEN] = draw_between(&rng, w.config.ranks);
        syncs[SYNC_POOL] = w.config.ranks;
        shapes[w.shape]++;
        non_power += !dcp_is_pow2(w.config.ranks);
        /* the baselines do not depend on E: one plan each, evaluated under every E */
        baselines[0] = plan_of(w.config, DCP_STRATEGY_GREEDY, 0, &w);
        baselines[1] = plan_of(w.config, DCP_STRATEGY_STATIC, 0, &w);
        baselines[2] = megatron_plan_of(&w);
        CHECK(baselines[0] != NULL && baselines[1] != NULL);
        for (m = 0; m < SYNC_MODELS && baselines[0] && baselines[1]; m++)
            if (syncs[m] > 0) check_one(&w, index, syncs[m], baselines, &tally[m]);
        for (m = 0; m < 3; m++) dcp_plan_destroy(baselines[m]);
    }
    printf("    %d workloads (%d on pools not a power of two, %d with the ring per sample, %d "
           "with other CP sizes (Megatron's, any, a list), %d covering every rank; shapes",
           (int)index, (int)non_power, (int)per_sample, (int)megatron, (int)covered);
    for (m = 0; m < LENGTH_SHAPES; m++) printf(" %s %d", length_shape_names[m], (int)shapes[m]);
    printf(")\n");
    for (m = 0; m < SYNC_MODELS; m++)
        printf("    %-9s %4d plans (%4d with a Megatron plan), %4d strictly faster than greedy "
               "and static, geomean gain over the better %.4fx\n",
               sync_names[m], (int)tally[m].checked, (int)tally[m].megatron,
               (int)tally[m].faster,
               exp(tally[m].log_gain / (tally[m].log_count ? tally[m].log_count : 1)));
    CHECK(tally[SYNC_BETWEEN].checked > GUARANTEE_WORKLOADS / 4); /* the pools offer such an E */
}

/* The two expectations of Megatron-LM's own tests of next_hdp_group_packing_aware
   (tests/unit_tests/test_sequence_packing.py at d48bd6b, as bench/megatron_baseline.py checks
   them on its Python version): a short sample joins the long one's CP-2 group; on 14 ranks
   two 50-token samples end in one group of all 14 ranks, which no dcp plan holds (not built). */
static void megatron_port_follows_megatron_tests(void)
{
    static guarantee_workload w;
    dcp_plan *plan;
    memset(&w, 0, sizeof w);
    w.config = make_config(2, 4096);
    w.count = 2;
    w.lengths[0] = 6144;
    w.lengths[1] = 2048;
    plan = megatron_plan_of(&w);
    CHECK(plan != NULL);
    if (plan) {
        CHECK_EQ(dcp_plan_validate(plan, NULL), DCP_OK);
        CHECK_EQ(plan->num_microbatches, 1);
        CHECK_EQ(plan->num_groups, 1);
        CHECK_EQ(plan->groups[0].first_rank, 0);
        CHECK_EQ(plan->groups[0].cp, 2);
        CHECK_EQ(plan->groups[0].sample_count, 2);
        CHECK_EQ(plan->group_samples[0], 0);
        CHECK_EQ(plan->group_samples[1], 1);
        dcp_plan_destroy(plan);
    }
    w.config = make_config(14, 100);
    w.lengths[0] = w.lengths[1] = 50;
    CHECK(megatron_plan_of(&w) == NULL);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"megatron_port_follows_megatron_tests", megatron_port_follows_megatron_tests},
        {"dynamic_never_behind_a_baseline", dynamic_never_behind_a_baseline},
    };
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
