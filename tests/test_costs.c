/* Cost coefficients against the planner's integer ticks: every finite double, both signs,
   denormals and the extremes, through dcp_plan_create, dcp_lower_bound and dcp_plan_simulate.
   In range (0 or [DCP_MIN_COST_COEFF, DCP_MAX_COST_COEFF]) a plan comes back with finite,
   consistent times; out of range the call fails with a message naming the coefficient and the
   limit. Built also with ASan/UBSan (build/test_costs-san), where an overflowing float-to-int
   conversion stops the run. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "test.h"

#include <float.h>

#define SWEEP_EXPONENT_STEP 5 /* ldexp(mantissa, e) for e from -1074 to 1023 in these steps */
#define COEFFICIENTS 3

static const char *const coefficient_names[COEFFICIENTS] = {"attn_coeff", "linear_coeff",
                                                            "ring_step_cost"};

static double *coefficient(dcp_cost_model *cost, int which)
{
    return which == 0 ? &cost->attn_coeff : which == 1 ? &cost->linear_coeff
                                                       : &cost->ring_step_cost;
}

typedef struct batch_case {
    const char *name;
    int32_t ranks;
    int64_t max_tokens;
    int32_t count;
    int64_t lengths[8];
} batch_case;

/* A small mixed batch, and the largest products the limits allow: lengths of 2^31 - 1. */
static const batch_case batches[] = {
    {"mixed", 8, 4096, 8, {100, 4096, 9000, 1, 30000, 512, 2048, 7}},
    {"longest", 4, INT64_C(2147483647), 3, {INT64_C(2147483647), INT64_C(2147483647), 1}},
};

static int in_supported_range(double v)
{
    return v == 0.0 || (v >= DCP_MIN_COST_COEFF && v <= DCP_MAX_COST_COEFF);
}

/* One coefficient set to v, the other two at their defaults. */
static void check_value(const batch_case *b, int which, double v)
{
    dcp_config c = dcp_config_init();
    dcp_plan *plan = NULL;
    dcp_plan_stats stats;
    dcp_error error;
    dcp_status status;
    double bound = -1.0;
    c.ranks = b->ranks;
    c.max_tokens_per_rank = b->max_tokens;
    c.cost.attn_coeff = DCP_DEFAULT_ATTN_COEFF;
    c.cost.linear_coeff = DCP_DEFAULT_LINEAR_COEFF;
    c.cost.ring_step_cost = DCP_DEFAULT_RING_STEP_COST;
    *coefficient(&c.cost, which) = v;
    status = dcp_plan_create(&c, b->lengths, b->count, &plan, &error);
    if (v < 0.0) {
        CHECK_EQ(status, DCP_ERROR_INVALID_ARGUMENT);
        CHECK_CONTAINS(error.message, coefficient_names[which]);
    } else if (!in_supported_range(v)) {
        CHECK_EQ(status, DCP_ERROR_OVERFLOW);
        CHECK_CONTAINS(error.message, coefficient_names[which]);
        CHECK_CONTAINS(error.message, "[1e-100, 1e+100]");
        CHECK_EQ(dcp_lower_bound(&c, b->lengths, b->count, &bound, &error), DCP_ERROR_OVERFLOW);
    } else {
        CHECK_EQ(status, DCP_OK);
        if (status != DCP_OK) {
            printf("  %s %s = %g: %s\n", b->name, coefficient_names[which], v, error.message);
            return;
        }
        CHECK_EQ(dcp_plan_validate(plan, &error), DCP_OK);
        CHECK_EQ(dcp_plan_simulate(plan, NULL, &stats, &error), DCP_OK);
        CHECK(stats.step_seconds >= 0.0 && stats.step_seconds <= DBL_MAX);
        CHECK(stats.lower_bound_seconds >= 0.0 &&
              stats.lower_bound_seconds <= stats.step_seconds * (1.0 + 1e-9));
        CHECK(stats.efficiency > 0.0 && stats.efficiency <= 1.0 + 1e-9);
    }
    dcp_plan_destroy(plan);
}

static void sweep(const batch_case *b)
{
    static const double specials[] = {0.0,     4.9e-324, 1e-320,  DBL_MIN, 1e-300, 1e-101,
                                      1e-100,  1e-50,    2.048e-11, 1.0,  1e50,   1e100,
                                      1.01e100, 1e101,   1e300,   1e308,   DBL_MAX};
    int which, e, sign;
    size_t i;
    for (which = 0; which < COEFFICIENTS; which++)
        for (sign = 1; sign >= -1; sign -= 2) {
            for (i = 0; i < sizeof specials / sizeof specials[0]; i++)
                check_value(b, which, sign * specials[i]);
            for (e = -1074; e <= 1023; e += SWEEP_EXPONENT_STEP)
                check_value(b, which, sign * ldexp(1.5, e - 1));
        }
}

static void every_finite_double_mixed(void) { sweep(&batches[0]); }
static void every_finite_double_longest(void) { sweep(&batches[1]); }

/* All three at the extremes together: the sums of the largest products stay finite. */
static void all_extremes_together(void)
{
    static const double extremes[] = {DCP_MIN_COST_COEFF, DCP_MAX_COST_COEFF};
    int a, l, r;
    for (a = 0; a < 2; a++)
        for (l = 0; l < 2; l++)
            for (r = 0; r < 2; r++) {
                const batch_case *b = &batches[1];
                dcp_config c = dcp_config_init();
                dcp_plan *plan = NULL;
                dcp_plan_stats stats;
                dcp_error error;
                c.ranks = b->ranks;
                c.max_tokens_per_rank = b->max_tokens;
                c.cost.attn_coeff = extremes[a];
                c.cost.linear_coeff = extremes[l];
                c.cost.ring_step_cost = extremes[r];
                CHECK_EQ(dcp_plan_create(&c, b->lengths, b->count, &plan, &error), DCP_OK);
                CHECK_EQ(dcp_plan_simulate(plan, NULL, &stats, &error), DCP_OK);
                CHECK(stats.step_seconds > 0.0 && stats.step_seconds <= DBL_MAX);
                CHECK(stats.efficiency > 0.0 && stats.efficiency <= 1.0 + 1e-9);
                dcp_plan_destroy(plan);
            }
}

/* dcp_plan_simulate with a cost model of its own takes the same limits. */
static void simulate_checks_its_cost(void)
{
    const batch_case *b = &batches[0];
    dcp_config c = dcp_config_init();
    dcp_cost_model cost = {1e300, 0.0, 0.0};
    dcp_plan *plan = NULL;
    dcp_plan_stats stats;
    dcp_error error;
    c.ranks = b->ranks;
    c.max_tokens_per_rank = b->max_tokens;
    CHECK_EQ(dcp_plan_create(&c, b->lengths, b->count, &plan, &error), DCP_OK);
    CHECK_EQ(dcp_plan_simulate(plan, &cost, &stats, &error), DCP_ERROR_OVERFLOW);
    CHECK_CONTAINS(error.message, "attn_coeff");
    cost.attn_coeff = 1e-320;
    CHECK_EQ(dcp_plan_simulate(plan, &cost, &stats, &error), DCP_ERROR_OVERFLOW);
    cost.attn_coeff = 1.0;
    CHECK_EQ(dcp_plan_simulate(plan, &cost, &stats, &error), DCP_OK);
    dcp_plan_destroy(plan);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"every_finite_double_mixed", every_finite_double_mixed},
        {"every_finite_double_longest", every_finite_double_longest},
        {"all_extremes_together", all_extremes_together},
        {"simulate_checks_its_cost", simulate_checks_its_cost},
    };
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
