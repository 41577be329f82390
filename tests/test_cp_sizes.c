/* CP sizes as a set (dcp_config.cp_sizes) and every rank busy (cover_ranks): the sizes each set
   allows, the checks that name a size outside it, plans with a group of the whole pool where the
   pool is not a power of two (Megatron-Core's communicators), the repair that puts a sample on
   every rank, the validator's cover check, the lower bound with the pool's group, and the
   exchange format carrying both fields. tests/test_plan_guarantee.c checks the guarantee on
   random workloads with these configs; tests/test_plan_golden.c keeps their plans. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "test.h"

#define SIZES_SEED 2026112801
#define SIZES_MAX_LIST 24
/* The random batches of few samples on many ranks, where idle ranks are the rule. */
#define SIZES_RANDOM_BATCHES 400
#define SIZES_RANDOM_MAX_SAMPLES 24
#define SIZES_RANDOM_MAX_TOKENS 4096

static dcp_config megatron_config(int32_t ranks, int64_t max_tokens, int cover)
{
    dcp_config c = make_config(ranks, max_tokens);
    c.cp_sizes = DCP_CP_SIZES_MEGATRON;
    c.cover_ranks = cover;
    return c;
}

/* The sizes of a resolved config, ascending, through dcp_cp_size_next. */
static int32_t list_sizes(const dcp_config *config, int32_t sizes[SIZES_MAX_LIST])
{
    dcp_config resolved;
    int32_t n = 0, cp;
    if (dcp_config_resolve(config, &resolved, NULL) != DCP_OK) return -1;
    for (cp = resolved.min_cp; cp > 0 && n < SIZES_MAX_LIST; cp = dcp_cp_size_next(&resolved, cp))
        sizes[n++] = cp;
    return n;
}

static void check_sizes(const dcp_config *config, const int32_t *expected, int32_t count)
{
    int32_t sizes[SIZES_MAX_LIST], n = list_sizes(config, sizes), i;
    CHECK_EQ(n, count);
    for (i = 0; i < n && i < count; i++) CHECK_EQ(sizes[i], expected[i]);
}

/* Megatron's sets are create_hybrid_dp_cp_groups' sizes: 2^i for i < floor(log2 D), and D. */
static void megatron_sizes_are_megatrons_communicators(void)
{
    static const int32_t on48[] = {1, 2, 4, 8, 16, 48}, on6[] = {1, 2, 6}, on2[] = {1, 2},
                         on64[] = {1, 2, 4, 8, 16, 32, 64}, pow2_48[] = {1, 2, 4, 8, 16, 32},
                         on96_min4[] = {4, 8, 16, 32, 96};
    dcp_config c = megatron_config(48, 4096, 0), resolved;
    check_sizes(&c, on48, TEST_COUNT(on48));
    CHECK_EQ(dcp_config_resolve(&c, &resolved, NULL), DCP_OK);
    CHECK_EQ(resolved.max_cp, 48);
    CHECK(dcp_cp_size_allowed(&resolved, 48) && dcp_cp_size_allowed(&resolved, 16));
    CHECK(!dcp_cp_size_allowed(&resolved, 32) && !dcp_cp_size_allowed(&resolved, 24) &&
          !dcp_cp_size_allowed(&resolved, 0) && !dcp_cp_size_allowed(&resolved, 96) &&
          !dcp_cp_size_allowed(NULL, 1));
    c = megatron_config(6, 4096, 0);
    check_sizes(&c, on6, TEST_COUNT(on6));
    c = megatron_config(2, 4096, 0);
    check_sizes(&c, on2, TEST_COUNT(on2));
    c = megatron_config(64, 4096, 0);
    check_sizes(&c, on64, TEST_COUNT(on64));
    c = make_config(48, 4096);
    check_sizes(&c, pow2_48, TEST_COUNT(pow2_48));
    c = megatron_config(96, 4096, 0);
    c.min_cp = 4;
    check_sizes(&c, on96_min4, TEST_COUNT(on96_min4));
    c.max_cp = 16; /* the whole pool left out: the powers of two only */
    check_sizes(&c, on96_min4, 3);
    CHECK_EQ(strcmp(dcp_cp_sizes_name(DCP_CP_SIZES_MEGATRON), "megatron"), 0);
    CHECK_EQ(strcmp(dcp_cp_sizes_name((dcp_cp_sizes)9), "unknown"), 0);
}

static void sizes_outside_the_set_are_named(void)
{
    dcp_config c = megatron_config(48, 4096, 0), resolved;
    dcp_error error;
    int64_t padded = 0;
    c.max_cp = 32; /* a power of two Megatron builds no group for on 48 ranks */
    CHECK_EQ(dcp_config_resolve(&c, &resolved, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "max_cp");
    CHECK_CONTAINS(error.message, "32");
    CHECK_CONTAINS(error.message, "megatron");
    c.max_cp = 0;
    c.min_cp = 24;
    CHECK_EQ(dcp_config_resolve(&c, &resolved, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "min_cp");
    c.min_cp = 0;
    c.cp_sizes = (dcp_cp_sizes)7;
    CHECK_EQ(dcp_config_resolve(&c, &resolved, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "cp_sizes 7");
    c.cp_sizes = DCP_CP_SIZES_MEGATRON;
    c.cover_ranks = 2;
    CHECK_EQ(dcp_config_resolve(&c, &resolved, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "cover_ranks");
    c.cover_ranks = 0;
    CHECK_EQ(dcp_padded_length(&c, 100, 48, &padded, NULL), DCP_OK);
    CHECK_EQ(padded, 192); /* a multiple of 2 x 48 */
    c.pad_multiple = 64;
    CHECK_EQ(dcp_padded_length(&c, 100, 48, &padded, NULL), DCP_OK);
    CHECK_EQ(padded, 192); /* lcm(96, 64) = 192 */
    CHECK_EQ(dcp_padded_length(&c, 100, 32, &padded, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "megatron");
}

static dcp_plan *plan_or_null(const dcp_config *config, const int64_t *lengths, int32_t count)
{
    dcp_plan *plan = NULL;
    dcp_error error;
    if (dcp_plan_create(config, lengths, count, &plan, &error) != DCP_OK) {
        fprintf(stderr, "  plan: %s\n", error.message);
        return NULL;
    }
    return plan;
}

static double step_of_plan(const dcp_plan *plan)
{
    dcp_plan_stats stats;
    return dcp_plan_simulate(plan, NULL, &stats, NULL) == DCP_OK ? stats.step_seconds : -1.0;
}

/* The first rank no group holds, -1 when all are held (the test's own count, not the
   validator's). */
static int32_t idle_rank(const dcp_plan *plan)
{
    int32_t g, r;
    unsigned char *held = (unsigned char *)calloc((size_t)plan->config.ranks, 1);
    for (g = 0; g < plan->num_groups; g++)
        for (r = 0; r < plan->groups[g].cp; r++) held[plan->groups[g].first_rank + r] = 1;
    for (r = 0; r < plan->config.ranks && held[r]; r++)
        ;
    free(held);
    return r < plan->config.ranks ? r : -1;
}

/* Issue 34's reproducers: one sample of 59,599 tokens on 48 ranks at 2,048 a rank (needs 30
   ranks: Megatron puts it on all 48); eight samples on 8 ranks at 1,000 where the planner once
   left rank 2 empty. Megatron's own schedule for the second: [[5],[5],[1],[3],[0],[4],[6],[7,2]]. */
static void megatron_reproducers_plan(void)
{
    static const int64_t one[1] = {59599};
    static const int64_t eight[8] = {327, 673, 146, 535, 274, 1072, 203, 174};
    dcp_config c = megatron_config(48, 2048, 1);
    dcp_plan *plan;
    dcp_plan_stats stats;
    c.sync_ranks = 1;
    c.ring_charge = DCP_RING_PER_SAMPLE;
    plan = plan_or_null(&c, one, 1);
    CHECK(plan != NULL);
    if (plan) {
        CHECK_EQ(plan->num_groups, 1);
        CHECK_EQ(plan->groups[0].cp, 48);
        CHECK_EQ(dcp_plan_simulate(plan, NULL, &stats, NULL), DCP_OK);
        CHECK(stats.efficiency <= 1.0 + 1e-12 && stats.efficiency > 0.999);
        dcp_plan_destroy(plan);
    }
    c.ranks = 8;
    c.max_tokens_per_rank = 1000;
    plan = plan_or_null(&c, eight, 8);
    CHECK(plan != NULL);
    if (plan) {
        CHECK_EQ(idle_rank(plan), -1);
        CHECK_EQ(dcp_plan_validate(plan, NULL), DCP_OK);
        dcp_plan_destroy(plan);
    }
    c.cover_ranks = 0; /* without the constraint a balanced plan may leave a rank idle */
    c.cp_sizes = DCP_CP_SIZES_POW2;
    plan = plan_or_null(&c, eight, 8);
    CHECK(plan != NULL);
    if (plan) {
        printf("    8 samples on 8 ranks without cover_ranks: first idle rank %d\n",
               (int)idle_rank(plan));
        dcp_plan_destroy(plan);
    }
}

/* A sample that fits no power of two of the set runs on the whole pool; the others may not. */
static void pool_group_only_where_needed_or_faster(void)
{
    const int64_t lengths[3] = {40000, 3000, 2000};
    dcp_config c = megatron_config(24, 2048, 0);
    dcp_plan *plan;
    int32_t g;
    c.sync_ranks = 1;
    plan = plan_or_null(&c, lengths, 3);
    CHECK(plan != NULL);
    if (!plan) return;
    CHECK_EQ(dcp_plan_validate(plan, NULL), DCP_OK);
    for (g = 0; g < plan->num_groups; g++) {
        const dcp_group *group = &plan->groups[g];
        int32_t i;
        CHECK(group->cp == 24 || dcp_is_pow2(group->cp));
        CHECK(group->cp <= 8 || group->cp == 24); /* Megatron has no group of 16 on 24 */
        for (i = 0; i < group->sample_count; i++)
            if (plan->group_samples[group->sample_offset + i] == 0) CHECK_EQ(group->cp, 24);
    }
    dcp_plan_destroy(plan);
}

/* The validator: a plan of cover_ranks must hold a sample on every rank. */
static void validator_checks_cover(void)
{
    dcp_config c = megatron_config(4, 100, 1);
    const int64_t lengths[2] = {10, 10};
    const int32_t offsets[2] = {0, 2}, samples[2] = {0, 1};
    const dcp_group groups[2] = {{0, 1, 0, 1}, {2, 2, 1, 1}};
    dcp_plan *plan = manual_plan(&c, lengths, 2, 1, offsets, groups, 2, samples);
    dcp_error error;
    CHECK_EQ(dcp_plan_validate(plan, &error), DCP_ERROR_INVALID_PLAN);
    CHECK_CONTAINS(error.message, "rank 1 holds no sample");
    plan->groups[0].cp = 2; /* now ranks 0..3 */
    CHECK_EQ(dcp_plan_validate(plan, &error), DCP_OK);
    plan->config.cover_ranks = 0;
    plan->groups[0].cp = 1;
    CHECK_EQ(dcp_plan_validate(plan, &error), DCP_OK);
    dcp_plan_destroy(plan);
}

/* Few samples on many ranks, every pool kind: every plan of cover_ranks holds a sample on
   every rank (the test's own count), its groups are sizes of the set, and the cover costs
   what the test prints against the same config without it. */
static void cover_on_random_small_batches(void)
{
    static const int32_t pools[] = {2, 6, 8, 12, 16, 24, 48, 64, 96, 128};
    dcp_rng rng;
    int64_t lengths[SIZES_RANDOM_MAX_SAMPLES];
    int32_t batch, planned = 0, idle_without = 0;
    double worst = 1.0, ratio_sum = 0.0;
    dcp_rng_seed(&rng, test_seed_for(SIZES_SEED));
    for (batch = 0; batch < SIZES_RANDOM_BATCHES; batch++) {
        const int32_t ranks = pools[dcp_rng_below(&rng, TEST_COUNT(pools))];
        const int64_t tokens = 256 + (int64_t)dcp_rng_below(&rng, SIZES_RANDOM_MAX_TOKENS);
        const int32_t count = 1 + (int32_t)dcp_rng_below(&rng, SIZES_RANDOM_MAX_SAMPLES);
        dcp_config c = megatron_config(ranks, tokens, 1);
        dcp_plan *with, *without;
        int32_t i, g;
        c.sync_ranks = dcp_rng_below(&rng, 2) ? 1 : 0;
        c.ring_charge = dcp_rng_below(&rng, 2) ? DCP_RING_PER_SAMPLE : DCP_RING_PER_GROUP;
        for (i = 0; i < count; i++)
            lengths[i] = 1 + (int64_t)dcp_rng_below(&rng, (uint64_t)(tokens * ranks / 2));
        with = plan_or_null(&c, lengths, count);
        c.cover_ranks = 0;
        without = plan_or_null(&c, lengths, count);
        CHECK(with != NULL && without != NULL);
        if (with && without) {
            double a = step_of_plan(with), b = step_of_plan(without);
            planned++;
            CHECK_EQ(idle_rank(with), -1);
            CHECK_EQ(dcp_plan_validate(with, NULL), DCP_OK);
            for (g = 0; g < with->num_groups; g++)
                CHECK(dcp_cp_size_allowed(&with->config, with->groups[g].cp));
            idle_without += idle_rank(without) >= 0;
            if (b > 0.0) {
                ratio_sum += a / b;
                if (a / b > worst) worst = a / b;
            }
        }
        dcp_plan_destroy(with);
        dcp_plan_destroy(without);
    }
    printf("    %d batches, %d of them idle without cover_ranks; the cover's step against "
           "none: mean %.4fx, worst %.4fx\n",
           (int)planned, (int)idle_without, planned ? ratio_sum / planned : 0.0, worst);
    CHECK(idle_without > 0); /* the batches do exercise the repair */
}

/* A set that cannot cover: the powers of two on 6 ranks and one sample (no group of 6). */
static void cover_that_cannot_be_is_an_error(void)
{
    const int64_t one[1] = {100};
    dcp_config c = make_config(6, 4096);
    dcp_plan *plan = NULL;
    dcp_error error;
    c.cover_ranks = 1;
    CHECK_EQ(dcp_plan_create(&c, one, 1, &plan, &error), DCP_ERROR_INFEASIBLE);
    CHECK(plan == NULL);
    CHECK_CONTAINS(error.message, "cover_ranks");
    c.cp_sizes = DCP_CP_SIZES_MEGATRON; /* the whole pool is a group: one sample covers it */
    CHECK_EQ(dcp_plan_create(&c, one, 1, &plan, &error), DCP_OK);
    if (plan) CHECK_EQ(plan->groups[0].cp, 6);
    dcp_plan_destroy(plan);
}

/* The lower bound with the pool's group: every sample may use all D ranks, so the work bound
   divides by D (not by the ranks the aligned powers of two cover). L^2 model, no ring: four
   samples of 3,200 that need more than 16 ranks on 48: 4 x 3200^2 / 48. */
static void lower_bound_uses_the_whole_pool(void)
{
    const int64_t wide[4] = {3200, 3200, 3200, 3200};
    dcp_config c = megatron_config(48, 100, 0);
    double bound;
    c.cost.attn_coeff = 1.0;
    c.sync_ranks = 1;
    CHECK_EQ(dcp_lower_bound(&c, wide, 4, &bound, NULL), DCP_OK);
    CHECK_NEAR(bound, 4.0 * 3200.0 * 3200.0 / 48.0, 1e-6);
}

/* ANY: every size; LIST: the listed ones; head_count: sizes that divide it. Defaults come
   from the set (a list's smallest and largest). */
static void any_and_list_sizes(void)
{
    static const int32_t any12_heads6[] = {1, 2, 3, 6}, list[] = {3, 6, 12};
    static const int32_t pow2_heads12[] = {1, 2, 4};
    dcp_config c = make_config(12, 4096), resolved;
    dcp_error error;
    c.cp_sizes = DCP_CP_SIZES_ANY;
    CHECK_EQ(dcp_config_resolve(&c, &resolved, NULL), DCP_OK);
    CHECK_EQ(resolved.min_cp, 1);
    CHECK_EQ(resolved.max_cp, 12);
    CHECK(dcp_cp_size_allowed(&resolved, 5) && dcp_cp_size_allowed(&resolved, 12));
    c.head_count = 6;
    check_sizes(&c, any12_heads6, TEST_COUNT(any12_heads6));
    c.max_cp = 4; /* does not divide 6 */
    CHECK_EQ(dcp_config_resolve(&c, &resolved, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "head_count 6");
    c = make_config(12, 4096);
    c.head_count = 12;
    check_sizes(&c, pow2_heads12, TEST_COUNT(pow2_heads12));
    c = make_config(12, 4096);
    c.cp_sizes = DCP_CP_SIZES_LIST;
    c.cp_size_count = 3;
    c.cp_size_list[0] = 3;
    c.cp_size_list[1] = 6;
    c.cp_size_list[2] = 12;
    check_sizes(&c, list, TEST_COUNT(list));
    CHECK_EQ(dcp_config_resolve(&c, &resolved, NULL), DCP_OK);
    CHECK_EQ(resolved.min_cp, 3);
    c.cp_size_list[1] = 2; /* not increasing */
    CHECK_EQ(dcp_config_resolve(&c, &resolved, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "cp_size_list[1] = 2");
    c.cp_size_list[1] = 6;
    c.cp_size_list[3] = 24; /* past the count */
    CHECK_EQ(dcp_config_resolve(&c, &resolved, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "past cp_size_count");
    c.cp_size_list[3] = 0;
    c.cp_size_count = 0;
    CHECK_EQ(dcp_config_resolve(&c, &resolved, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "cp_size_count");
    c.cp_size_count = 3;
    c.head_count = 5; /* no listed size divides it */
    CHECK_EQ(dcp_config_resolve(&c, &resolved, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "head_count 5");
}

/* On ANY and LIST a group is any range of an allowed size; the validator takes it there and
   refuses a size outside the set; every plan's groups are sizes of the set, and a lengths
   that only a size beyond the powers of two fits plans (a sample of 20,000 tokens at 2,048 a
   rank on 12 ranks needs 10: none of 1, 2, 4, 8). */
static void ranges_plan_and_validate(void)
{
    const int64_t lengths[4] = {20000, 3000, 700, 700};
    const int32_t offsets[2] = {0, 3}, samples[3] = {0, 1, 2};
    const dcp_group groups[3] = {{0, 3, 0, 1}, {3, 5, 1, 1}, {8, 4, 2, 1}};
    const int64_t three[3] = {10, 10, 10};
    dcp_config c = make_config(12, 2048);
    dcp_plan *plan;
    dcp_error error;
    int32_t g;
    c.cp_sizes = DCP_CP_SIZES_ANY;
    plan = manual_plan(&c, three, 3, 1, offsets, groups, 3, samples);
    CHECK_EQ(dcp_plan_validate(plan, &error), DCP_OK); /* [3, 8) is no aligned block of 5 */
    plan->config.cp_sizes = DCP_CP_SIZES_POW2;
    plan->config.max_cp = 8;
    CHECK_EQ(dcp_plan_validate(plan, &error), DCP_ERROR_INVALID_PLAN);
    dcp_plan_destroy(plan);
    plan = plan_or_null(&c, lengths, 4);
    CHECK(plan != NULL);
    if (plan) {
        CHECK_EQ(dcp_plan_validate(plan, NULL), DCP_OK);
        for (g = 0; g < plan->num_groups; g++) {
            CHECK(dcp_cp_size_allowed(&plan->config, plan->groups[g].cp));
            if (plan->group_samples[plan->groups[g].sample_offset] == 0)
                CHECK(plan->groups[g].cp >= 10);
        }
        dcp_plan_destroy(plan);
    }
    c.cp_sizes = DCP_CP_SIZES_POW2; /* 16 > 12 ranks: no power of two fits the first */
    CHECK_EQ(dcp_plan_create(&c, lengths, 4, &plan, &error), DCP_ERROR_INFEASIBLE);
}

/* Every size against the powers of two on a pool that is not one, under the L^2 model (no
   ring: width costs nothing): a group of all 48 ranks per microbatch meets the work bound,
   which the powers of two (32 + 16) cannot. */
static void any_meets_the_bound_where_pow2_cannot(void)
{
    dcp_lognormal dist = {4096.0, 1.4, 256, 65536};
    int64_t lengths[384];
    dcp_config c = make_config(48, 4096);
    dcp_plan *any, *pow2;
    dcp_plan_stats a, p;
    dcp_lengths_lognormal(&dist, SIZES_SEED, lengths, 384, NULL);
    c.cost.attn_coeff = 1.0;
    pow2 = plan_or_null(&c, lengths, 384);
    c.cp_sizes = DCP_CP_SIZES_ANY;
    any = plan_or_null(&c, lengths, 384);
    CHECK(any != NULL && pow2 != NULL);
    if (any && pow2) {
        CHECK_EQ(dcp_plan_simulate(any, NULL, &a, NULL), DCP_OK);
        CHECK_EQ(dcp_plan_simulate(pow2, NULL, &p, NULL), DCP_OK);
        printf("    48 ranks, L^2 model, E = D: any %.4f of the bound, pow2 %.4f\n",
               a.efficiency, p.efficiency);
        CHECK(a.efficiency > 0.9999);
        CHECK(a.step_seconds < p.step_seconds);
    }
    dcp_plan_destroy(any);
    dcp_plan_destroy(pow2);
}

/* Issue 37's pool: 48 ranks plan a group of 48 and groups of 12 (a list of those two sizes;
   and every size, where the sample that needs all 48 gets them). */
static void pool_of_48_plans_48_and_12(void)
{
    const int64_t lengths[5] = {48 * 1024, 12 * 1024, 12 * 1000, 11 * 1024, 9000};
    dcp_config c = make_config(48, 1024);
    int32_t sizes[DCP_CP_SIZE_LIST_CAPACITY], samples[DCP_CP_SIZE_LIST_CAPACITY], n = 0;
    dcp_plan *plan;
    c.cp_sizes = DCP_CP_SIZES_LIST;
    c.cp_size_count = 2;
    c.cp_size_list[0] = 12;
    c.cp_size_list[1] = 48;
    plan = plan_or_null(&c, lengths, 5);
    CHECK(plan != NULL);
    if (plan) {
        CHECK_EQ(dcp_plan_cp_histogram(plan, sizes, samples, DCP_CP_SIZE_LIST_CAPACITY, &n, NULL),
                 DCP_OK);
        CHECK_EQ(n, 2);
        CHECK_EQ(sizes[0], 12);
        CHECK_EQ(sizes[1], 48);
        dcp_plan_destroy(plan);
    }
    c = make_config(48, 1024);
    c.cp_sizes = DCP_CP_SIZES_ANY;
    plan = plan_or_null(&c, lengths, 5);
    CHECK(plan != NULL);
    if (plan) {
        CHECK_EQ(dcp_plan_cp_histogram(plan, sizes, samples, DCP_CP_SIZE_LIST_CAPACITY, &n, NULL),
                 DCP_OK);
        CHECK(n >= 1 && sizes[n - 1] == 48);
        dcp_plan_destroy(plan);
    }
}

/* dcp_plan_cp_histogram: the sizes in increasing order and the samples at each. */
static void histogram_by_size(void)
{
    const int64_t lengths[4] = {10, 10, 10, 10};
    const int32_t offsets[3] = {0, 2, 3}, samples[4] = {0, 1, 2, 3};
    const dcp_group groups[3] = {{0, 6, 0, 2}, {6, 3, 2, 1}, {0, 3, 3, 1}};
    dcp_config c = make_config(12, 100);
    int32_t sizes[2], counts[2], n = 0;
    dcp_plan *plan;
    c.cp_sizes = DCP_CP_SIZES_ANY;
    plan = manual_plan(&c, lengths, 4, 2, offsets, groups, 3, samples);
    CHECK_EQ(dcp_plan_cp_histogram(plan, NULL, NULL, 0, &n, NULL), DCP_OK);
    CHECK_EQ(n, 2);
    CHECK_EQ(dcp_plan_cp_histogram(plan, sizes, counts, 2, &n, NULL), DCP_OK);
    CHECK_EQ(sizes[0], 3);
    CHECK_EQ(counts[0], 2);
    CHECK_EQ(sizes[1], 6);
    CHECK_EQ(counts[1], 2);
    CHECK_EQ(dcp_plan_cp_histogram(plan, sizes, counts, 1, &n, NULL), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(sizes[0], 3);
    dcp_plan_destroy(plan);
}

/* The exchange format carries cp_sizes and cover_ranks, and a group of the whole pool. */
static void format_carries_the_set(void)
{
    const int64_t lengths[3] = {90000, 500, 700};
    dcp_config c = megatron_config(48, 2048, 1);
    dcp_plan *plan = plan_or_null(&c, lengths, 3), *back = NULL;
    unsigned char *bytes;
    size_t size = 0;
    CHECK(plan != NULL);
    if (!plan) return;
    CHECK_EQ(dcp_plan_serialize(plan, NULL, 0, &size, NULL), DCP_OK);
    bytes = (unsigned char *)malloc(size);
    CHECK_EQ(dcp_plan_serialize(plan, bytes, size, &size, NULL), DCP_OK);
    CHECK_EQ(dcp_plan_deserialize(bytes, size, NULL, &back, NULL), DCP_OK);
    if (back) {
        CHECK_EQ(dcp_plan_compare(plan, back, NULL), DCP_OK);
        CHECK_EQ(back->config.cp_sizes, DCP_CP_SIZES_MEGATRON);
        CHECK_EQ(back->config.cover_ranks, 1);
        back->config.cover_ranks = 0;
        CHECK(dcp_plan_compare(plan, back, NULL) != DCP_OK);
    }
    dcp_plan_destroy(back);
    free(bytes);
    dcp_plan_destroy(plan);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"megatron_sizes_are_megatrons_communicators", megatron_sizes_are_megatrons_communicators},
        {"sizes_outside_the_set_are_named", sizes_outside_the_set_are_named},
        {"megatron_reproducers_plan", megatron_reproducers_plan},
        {"pool_group_only_where_needed_or_faster", pool_group_only_where_needed_or_faster},
        {"validator_checks_cover", validator_checks_cover},
        {"cover_on_random_small_batches", cover_on_random_small_batches},
        {"cover_that_cannot_be_is_an_error", cover_that_cannot_be_is_an_error},
        {"lower_bound_uses_the_whole_pool", lower_bound_uses_the_whole_pool},
        {"format_carries_the_set", format_carries_the_set},
        {"any_and_list_sizes", any_and_list_sizes},
        {"ranges_plan_and_validate", ranges_plan_and_validate},
        {"any_meets_the_bound_where_pow2_cannot", any_meets_the_bound_where_pow2_cannot},
        {"histogram_by_size", histogram_by_size},
        {"pool_of_48_plans_48_and_12", pool_of_48_plans_48_and_12},
    };
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
