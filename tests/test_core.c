/* Basics and workload model: status text, errors, allocator hooks, the generator and its own
   exp/log, configuration defaults and validation, padding, CP-size choice, cost, lower bound. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "test.h"

static void status_strings_are_distinct(void)
{
    int a, b;
    for (a = DCP_OK; a <= DCP_ERROR_NCCL; a++) {
        CHECK(strlen(dcp_status_string((dcp_status)a)) > 0);
        for (b = a + 1; b <= DCP_ERROR_NCCL; b++)
            CHECK(strcmp(dcp_status_string((dcp_status)a), dcp_status_string((dcp_status)b)) != 0);
    }
    CHECK(strcmp(dcp_status_string((dcp_status)999), "unknown status") == 0);
}

static void config_defaults(void)
{
    dcp_config c = make_config(24, 4096), r;
    CHECK_EQ(dcp_config_resolve(&c, &r, NULL), DCP_OK);
    CHECK_EQ(r.min_cp, 1);
    CHECK_EQ(r.max_cp, 16); /* largest power of two <= 24 */
    CHECK_EQ(r.microbatch_multiple, 1);
    CHECK_EQ(r.pad_multiple_cp1, 1);
    CHECK_EQ(r.pad_multiple, 1);
    CHECK(r.cost.attn_coeff == DCP_DEFAULT_ATTN_COEFF);
    CHECK(r.cost.linear_coeff == DCP_DEFAULT_LINEAR_COEFF);
    CHECK(r.cost.ring_step_cost == DCP_DEFAULT_RING_STEP_COST);
    CHECK_EQ(r.strategy, DCP_STRATEGY_DYNAMIC);
    /* an explicit model is kept even where parts of it are zero */
    c.cost.attn_coeff = 1.0;
    CHECK_EQ(dcp_config_resolve(&c, &r, NULL), DCP_OK);
    CHECK(r.cost.attn_coeff == 1.0 && r.cost.linear_coeff == 0.0 && r.cost.ring_step_cost == 0.0);
}

/* Each bad field gives the status and a message naming the field and the value. */
static void config_rejects_bad_fields(void)
{
    struct {
        const char *field, *value;
        dcp_config config;
    } cases[14];
    dcp_error error;
    dcp_config resolved;
    int i, n = 0;
    for (i = 0; i < 14; i++) cases[i].config = make_config(16, 4096);
    cases[n].field = "ranks", cases[n].value = "0", cases[n++].config.ranks = 0;
    cases[n].field = "ranks", cases[n].value = "-3", cases[n++].config.ranks = -3;
    cases[n].field = "max_tokens_per_rank", cases[n].value = "-1",
    cases[n++].config.max_tokens_per_rank = -1;
    cases[n].field = "min_cp", cases[n].value = "3", cases[n++].config.min_cp = 3;
    cases[n].field = "max_cp", cases[n].value = "6", cases[n++].config.max_cp = 6;
    cases[n].field = "max_cp", cases[n].value = "32", cases[n++].config.max_cp = 32;
    cases[n].field = "min_cp", cases[n].value = "8", cases[n].config.min_cp = 8;
    cases[n++].config.max_cp = 4;
    cases[n].field = "microbatch_multiple", cases[n].value = "-2",
    cases[n++].config.microbatch_multiple = -2;
    cases[n].field = "pad_multiple", cases[n].value = "-1", cases[n++].config.pad_multiple = -1;
    cases[n].field = "pad_multiple_cp1", cases[n].value = "2097152",
    cases[n++].config.pad_multiple_cp1 = 1 << 21;
    cases[n].field = "attn_coeff", cases[n].value = "-1", cases[n++].config.cost.attn_coeff = -1.0;
    cases[n].field = "linear_coeff", cases[n].value = "nan",
    cases[n++].config.cost.linear_coeff = NAN;
    cases[n].field = "strategy", cases[n].value = "7",
    cases[n++].config.strategy = (dcp_strategy)7;
    cases[n].field = "allocator", cases[n].value = "alloc",
    cases[n++].config.allocator.alloc = counting_alloc; /* free missing */
    for (i = 0; i < n; i++) {
        memset(&error, 0, sizeof error);
        CHECK_EQ(dcp_config_resolve(&cases[i].config, &resolved, &error),
                 DCP_ERROR_INVALID_ARGUMENT);
        CHECK_EQ(error.status, DCP_ERROR_INVALID_ARGUMENT);
        CHECK_CONTAINS(error.message, cases[i].field);
        CHECK_CONTAINS(error.message, cases[i].value);
    }
    CHECK_EQ(dcp_config_resolve(NULL, &resolved, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_config_resolve(&cases[0].config, NULL, NULL), DCP_ERROR_INVALID_ARGUMENT);
}

static void allocator_hooks_own_every_byte(void)
{
    int64_t lengths[64];
    dcp_lognormal d = {2048, 1.0, 64, 16384};
    counting_allocator counter = {0, 0, -1};
    dcp_config c = make_config(8, 4096);
    dcp_plan *plan = NULL;
    int strategy;
    c.allocator.alloc = counting_alloc;
    c.allocator.free = counting_free;
    c.allocator.user = &counter;
    CHECK_EQ(dcp_lengths_lognormal(&d, 7, lengths, 64, NULL), DCP_OK);
    for (strategy = 0; strategy < 3; strategy++) {
        c.strategy = (dcp_strategy)strategy;
        counter.allocations = counter.frees = 0;
        CHECK_EQ(dcp_plan_create(&c, lengths, 64, &plan, NULL), DCP_OK);
        CHECK(counter.allocations > 0);
        dcp_plan_destroy(plan);
        CHECK_EQ(counter.allocations, counter.frees);
    }
}

/* Every allocation failure point returns DCP_ERROR_OUT_OF_MEMORY and frees what it took. */
static void allocation_failures_are_clean(void)
{
    int64_t lengths[48];
    dcp_lognormal d = {4096, 1.2, 64, 32768};
    counting_allocator counter = {0, 0, 0};
    dcp_config c = make_config(8, 4096);
    dcp_plan *plan;
    dcp_error error;
    int strategy;
    long fail_after;
    c.allocator.alloc = counting_alloc;
    c.allocator.free = counting_free;
    c.allocator.user = &counter;
    CHECK_EQ(dcp_lengths_lognormal(&d, 11, lengths, 48, NULL), DCP_OK);
    for (strategy = 0; strategy < 3; strategy++) {
        c.strategy = (dcp_strategy)strategy;
        for (fail_after = 0;; fail_after++) {
            dcp_status status;
            counter.allocations = counter.frees = 0;
            counter.fail_after = fail_after;
            plan = (dcp_plan *)&counter; /* must be reset to NULL on failure */
            status = dcp_plan_create(&c, lengths, 48, &plan, &error);
            if (status == DCP_OK) {
                dcp_plan_destroy(plan);
                CHECK_EQ(counter.allocations, counter.frees);
                break;
            }
            CHECK_EQ(status, DCP_ERROR_OUT_OF_MEMORY);
            CHECK(plan == NULL);
            CHECK_EQ(counter.allocations, counter.frees);
            if (fail_after > 1000) {
                CHECK(!"plan_create never succeeded");
                break;
            }
        }
    }
}

static void rng_is_reproducible(void)
{
    dcp_rng a, b, c;
    int i, differ = 0;
    dcp_rng_seed(&a, 123);
    dcp_rng_seed(&b, 123);
    dcp_rng_seed(&c, 124);
    for (i = 0; i < 1000; i++) {
        uint64_t x = dcp_rng_next(&a);
        CHECK(x == dcp_rng_next(&b));
        differ += x != dcp_rng_next(&c);
    }
    CHECK(differ > 990);
}

static void rng_distributions(void)
{
    dcp_rng rng;
    const int n = 200000;
    double sum = 0.0, sum2 = 0.0, usum = 0.0;
    long counts[7] = {0};
    int i;
    dcp_rng_seed(&rng, 99);
    for (i = 0; i < n; i++) {
        double u = dcp_rng_uniform(&rng), z = dcp_rng_normal(&rng);
        uint64_t k = dcp_rng_below(&rng, 7);
        CHECK(u >= 0.0 && u < 1.0);
        CHECK(k < 7);
        counts[k]++;
        usum += u;
        sum += z;
        sum2 += z * z;
    }
    CHECK_NEAR(usum / n, 0.5, 0.01);
    CHECK_NEAR(sum / n, 0.0, 0.01);
    CHECK_NEAR(sum2 / n, 1.0, 0.02);
    for (i = 0; i < 7; i++) CHECK_NEAR(counts[i] / (double)n, 1.0 / 7.0, 0.01);
    CHECK_EQ(dcp_rng_below(&rng, 0), 0);
}

/* Our libm-free exp and log stay within a few ulp of the platform's. */
static void own_exp_and_log_are_accurate(void)
{
    dcp_rng rng;
    double worst_exp = 0.0, worst_log = 0.0;
    int i;
    dcp_rng_seed(&rng, test_seed_for(5));
    for (i = 0; i < 100000; i++) {
        double x = (dcp_rng_uniform(&rng) - 0.5) * 1400.0;
        double y = ldexp(0.5 + dcp_rng_uniform(&rng), (int)(dcp_rng_below(&rng, 200)) - 100);
        double e = fabs(dcp__exp(x) - exp(x)) / exp(x);
        double l = fabs(dcp__log(y) - log(y)) / (fabs(log(y)) > 1e-300 ? fabs(log(y)) : 1.0);
        if (e > worst_exp) worst_exp = e;
        if (l > worst_log) worst_log = l;
    }
    CHECK(worst_exp < 1e-14);
    CHECK(worst_log < 1e-14);
}

static int64_t reference_lcm(int64_t a, int64_t b)
{
    int64_t m = a > b ? a : b;
    while (m % a != 0 || m % b != 0) m++;
    return m;
}

/* Padding equals rounding up to lcm(c > 1 ? 2c : pad_multiple_cp1, pad_multiple). */
static void padding_matches_brute_force(void)
{
    dcp_rng rng;
    int i;
    dcp_rng_seed(&rng, test_seed_for(17));
    for (i = 0; i < 20000; i++) {
        dcp_config c = make_config(64, 1 << 20);
        int32_t cp = 1 << dcp_rng_below(&rng, 7);
        int64_t length = 1 + (int64_t)dcp_rng_below(&rng, 100000), padded, multiple;
        c.pad_multiple = 1 + (int32_t)dcp_rng_below(&rng, 12);
        c.pad_multiple_cp1 = 1 + (int32_t)dcp_rng_below(&rng, 12);
        multiple = reference_lcm(cp > 1 ? 2 * cp : c.pad_multiple_cp1, c.pad_multiple);
        CHECK_EQ(dcp_padded_length(&c, length, cp, &padded, NULL), DCP_OK);
        CHECK_EQ(padded % multiple, 0);
        CHECK(padded >= length && padded - length < multiple);
    }
}

static void padding_rejects_bad_arguments(void)
{
    dcp_config c = make_config(8, 4096);
    dcp_error error;
    int64_t padded;
    CHECK_EQ(dcp_padded_length(&c, 0, 2, &padded, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "length");
    CHECK_EQ(dcp_padded_length(&c, 10, 3, &padded, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "cp");
    CHECK_EQ(dcp_padded_length(&c, 10, 16, &padded, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_padded_length(&c, 10, 2, NULL, &error), DCP_ERROR_INVALID_ARGUMENT);
}

/* The smallest power of two c >= min_cp whose padded share fits, by brute force. */
static void cp_size_min_matches_brute_force(void)
{
    dcp_rng rng;
    int i;
    dcp_rng_seed(&rng, test_seed_for(23));
    for (i = 0; i < 20000; i++) {
        dcp_config c = make_config(1 << (1 + dcp_rng_below(&rng, 7)), 0), r;
        int64_t length = 1 + (int64_t)dcp_rng_below(&rng, 300000);
        int32_t cp = -1, expected = 0, probe;
        dcp_status status;
        c.max_tokens_per_rank = 1 + (int64_t)dcp_rng_below(&rng, 8192);
        c.pad_multiple = 1 + (int32_t)dcp_rng_below(&rng, 4);
        c.min_cp = 1 << dcp_rng_below(&rng, 3);
        if (c.min_cp > c.ranks) c.min_cp = c.ranks;
        CHECK_EQ(dcp_config_resolve(&c, &r, NULL), DCP_OK);
        for (probe = r.min_cp; probe <= r.max_cp && !expected; probe *= 2) {
            int64_t padded;
            dcp_padded_length(&r, length, probe, &padded, NULL);
            if (padded / probe <= r.max_tokens_per_rank) expected = probe;
        }
        status = dcp_cp_size_min(&c, length, &cp, NULL);
        if (expected) {
            CHECK_EQ(status, DCP_OK);
            CHECK_EQ(cp, expected);
        } else
            CHECK_EQ(status, DCP_ERROR_INFEASIBLE);
    }
}

static void cp_size_min_names_the_limits(void)
{
    dcp_config c = make_config(4, 1000);
    dcp_error error;
    int32_t cp;
    CHECK_EQ(dcp_cp_size_min(&c, 4001, &cp, &error), DCP_ERROR_INFEASIBLE);
    CHECK_CONTAINS(error.message, "4001");
    CHECK_CONTAINS(error.message, "max_cp 4");
    CHECK_CONTAINS(error.message, "1000");
    CHECK_EQ(dcp_cp_size_min(&c, 4000, &cp, &error), DCP_OK);
    CHECK_EQ(cp, 4);
    CHECK_EQ(dcp_cp_size_min(&c, 1000, &cp, &error), DCP_OK);
    CHECK_EQ(cp, 1);
    CHECK_EQ(dcp_cp_size_min(&c, 1001, &cp, &error), DCP_OK);
    CHECK_EQ(cp, 2); /* padded to 1004 over 2 ranks: 502 each */
}

static void cost_model_formula(void)
{
    dcp_cost_model m = {2.0, 3.0, 5.0};
    CHECK_NEAR(dcp_cost_sample_seconds(&m, 10, 12, 4), (2.0 * 100 + 3.0 * 12) / 4, 1e-15);
    CHECK_NEAR(dcp_cost_sample_seconds(&m, 7, 7, 1), 2.0 * 49 + 3.0 * 7, 1e-15);
    CHECK_NEAR(dcp_cost_ring_seconds(&m, 8), 35.0, 1e-15);
    CHECK(dcp_cost_ring_seconds(&m, 1) == 0.0);
}

static void lower_bound_by_hand(void)
{
    dcp_config c = make_config(4, 100);
    int64_t four[4] = {100, 100, 100, 100}, one[1] = {400};
    double bound;
    dcp_error error;
    c.cost.attn_coeff = 1.0; /* L^2 only */
    CHECK_EQ(dcp_lower_bound(&c, four, 4, &bound, NULL), DCP_OK);
    CHECK_NEAR(bound, 1e4, 1e-12); /* total 4e4 over 4 ranks; alone at c = 4 is only 2500 */
    c.cost.ring_step_cost = 1.0;
    CHECK_EQ(dcp_lower_bound(&c, one, 1, &bound, NULL), DCP_OK);
    /* needs c = 4: 160000 / 4 + 3 ring steps; total (160000 + 3 * 400 / 100) / 4 */
    CHECK_NEAR(bound, 40003.0, 1e-12);
    CHECK_EQ(dcp_lower_bound(&c, one, 0, &bound, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "count");
    one[0] = 401;
    CHECK_EQ(dcp_lower_bound(&c, one, 1, &bound, &error), DCP_ERROR_INFEASIBLE);
    CHECK_CONTAINS(error.message, "sample 0");
}

/* Non-power-of-two pools can only use ranks inside aligned blocks of min_cp. */
static void lower_bound_counts_usable_ranks(void)
{
    dcp_config c = make_config(24, 1000);
    int64_t lengths[16];
    double bound;
    int i;
    for (i = 0; i < 16; i++) lengths[i] = 2000;
    c.cost.linear_coeff = 1.0;
    c.min_cp = 16; /* only ranks 0..15 can ever hold a group */
    CHECK_EQ(dcp_lower_bound(&c, lengths, 16, &bound, NULL), DCP_OK);
    /* each sample stores at least its length padded to 2 x 16: 2016 tokens */
    CHECK_NEAR(bound, 16.0 * 2016.0 / 16.0, 1e-12);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"status_strings_are_distinct", status_strings_are_distinct},
        {"config_defaults", config_defaults},
        {"config_rejects_bad_fields", config_rejects_bad_fields},
        {"allocator_hooks_own_every_byte", allocator_hooks_own_every_byte},
        {"allocation_failures_are_clean", allocation_failures_are_clean},
        {"rng_is_reproducible", rng_is_reproducible},
        {"rng_distributions", rng_distributions},
        {"own_exp_and_log_are_accurate", own_exp_and_log_are_accurate},
        {"padding_matches_brute_force", padding_matches_brute_force},
        {"padding_rejects_bad_arguments", padding_rejects_bad_arguments},
        {"cp_size_min_matches_brute_force", cp_size_min_matches_brute_force},
        {"cp_size_min_names_the_limits", cp_size_min_names_the_limits},
        {"cost_model_formula", cost_model_formula},
        {"lower_bound_by_hand", lower_bound_by_hand},
        {"lower_bound_counts_usable_ranks", lower_bound_counts_usable_ranks},
    };
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
