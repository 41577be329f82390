/* Cost calibration (dcp.h "cost calibration") and the host side of the calibration benches:
   - dcp_cost_group_terms charges a group exactly what dcp_plan_schedule charges it;
   - dcp_cost_fit_measurements recovers known coefficients from synthetic times on the grid
     bench/calibrate measures (bench/calibrate_grid.h), exactly without noise and within a
     stated tolerance with multiplicative noise; its answer is the non-negative optimum;
     held terms stay held; degenerate designs and bad input fail with messages naming them;
     random input never crashes;
   - bench/plan_exec.h's accounting reproduces dcp_plan_schedule and dcp_plan_step_time when
     given the model's durations, under every sync model. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "test.h"
#include "../bench/calibrate_grid.h"
#include "../bench/plan_exec.h"

#include <float.h>

#define MAX_SAMPLES 256
#define RANDOM_PLANS 40
#define NOISE_TRIALS 20
/* Relative error of a model time summed in another order than the planner sums it. */
#define SUM_ORDER_TOLERANCE 1e-12
/* Exact synthetic times: the fit's own rounding (normal equations in double). */
#define EXACT_FIT_TOLERANCE 1e-9

/* A random model around the defaults: each coefficient times 10^u, u in [-1, 1]. */
static dcp_cost_model random_cost(dcp_rng *rng)
{
    dcp_cost_model cost;
    cost.attn_coeff = DCP_DEFAULT_ATTN_COEFF * pow(10.0, 2.0 * dcp_rng_uniform(rng) - 1.0);
    cost.linear_coeff = DCP_DEFAULT_LINEAR_COEFF * pow(10.0, 2.0 * dcp_rng_uniform(rng) - 1.0);
    cost.ring_step_cost = DCP_DEFAULT_RING_STEP_COST * pow(10.0, 2.0 * dcp_rng_uniform(rng) - 1.0);
    return cost;
}

/* A random plan of a random batch; NULL (after a failed check) when planning fails. */
static dcp_plan *random_plan(dcp_rng *rng, int32_t sync_choice)
{
    dcp_config config = make_config((int32_t)1 << (1 + dcp_rng_below(rng, 4)), 4096);
    int64_t lengths[MAX_SAMPLES];
    int32_t count = 1 + (int32_t)dcp_rng_below(rng, MAX_SAMPLES), i;
    dcp_plan *plan = NULL;
    dcp_error error;
    dcp_lognormal distribution = {3000.0, 1.2, 64, 0};
    distribution.max_length = 4096 * (int64_t)config.ranks;
    config.pad_multiple_cp1 = (int32_t)1 + (int32_t)dcp_rng_below(rng, 8);
    config.pad_multiple = (int32_t)1 << dcp_rng_below(rng, 3);
    config.strategy = (dcp_strategy)dcp_rng_below(rng, 3);
    config.sync_ranks = sync_choice == 0 ? 1 : sync_choice == 1 ? config.ranks : 2;
    config.cost = random_cost(rng);
    for (i = 0; i < count; i++)
        CHECK(dcp_rng_lognormal_length(rng, &distribution, &lengths[i], &error) == DCP_OK);
    if (dcp_plan_create(&config, lengths, count, &plan, &error) != DCP_OK) {
        fprintf(stderr, "plan: %s\n", error.message);
        CHECK(0);
        return NULL;
    }
    return plan;
}

/* The group terms, priced by dcp_cost_measurement_seconds, are the schedule's group times. */
static void test_group_terms_are_the_planner_model(void)
{
    dcp_rng rng;
    int32_t trial, g;
    dcp_rng_seed(&rng, test_seed_for(21001));
    for (trial = 0; trial < RANDOM_PLANS; trial++) {
        dcp_plan *plan = random_plan(&rng, trial % 3);
        double *start, *end;
        int64_t lengths[MAX_SAMPLES];
        dcp_error error;
        if (!plan) continue;
        start = (double *)malloc((size_t)plan->num_groups * sizeof *start);
        end = (double *)malloc((size_t)plan->num_groups * sizeof *end);
        CHECK(dcp_plan_schedule(plan, NULL, start, end, &error) == DCP_OK);
        for (g = 0; g < plan->num_groups; g++) {
            dcp_cost_measurement terms;
            plan_exec_group_lengths(plan, g, lengths);
            CHECK(dcp_cost_group_terms(&plan->config, lengths, plan->groups[g].sample_count,
                                       plan->groups[g].cp, &terms, &error) == DCP_OK);
            CHECK_NEAR(dcp_cost_measurement_seconds(&plan->config.cost, &terms) /
                           (end[g] - start[g]),
                       1.0, SUM_ORDER_TOLERANCE);
        }
        free(start);
        free(end);
        dcp_plan_destroy(plan);
    }
}

static void test_group_terms_rejects(void)
{
    dcp_config config = make_config(8, 4096);
    dcp_cost_measurement terms;
    int64_t lengths[2] = {100, 0};
    dcp_error error;
    CHECK(dcp_cost_group_terms(&config, lengths, 1, 2, NULL, &error) ==
          DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "terms");
    CHECK(dcp_cost_group_terms(NULL, lengths, 1, 2, &terms, &error) ==
          DCP_ERROR_INVALID_ARGUMENT);
    CHECK(dcp_cost_group_terms(&config, NULL, 1, 2, &terms, &error) ==
          DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "lengths NULL");
    CHECK(dcp_cost_group_terms(&config, lengths, -1, 2, &terms, &error) ==
          DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "count");
    CHECK(dcp_cost_group_terms(&config, lengths, 1, 3, &terms, &error) ==
          DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "got 3");
    CHECK(dcp_cost_group_terms(&config, lengths, 1, 16, &terms, &error) ==
          DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "max_cp 8");
    CHECK(dcp_cost_group_terms(&config, lengths, 2, 2, &terms, &error) ==
          DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "lengths[1] = 0");
    /* an empty group pays its ring steps only */
    CHECK(dcp_cost_group_terms(&config, NULL, 0, 4, &terms, &error) == DCP_OK);
    CHECK(terms.attn_units == 0.0 && terms.linear_units == 0.0 && terms.ring_steps == 3.0);
}

/* Synthetic measurements on the bench's grid: model times of `truth`, each times
   (1 + noise Z), Z standard normal. Returns the count. */
static int32_t synthetic_grid(const dcp_cost_model *truth, double noise, dcp_rng *rng,
                              dcp_cost_measurement *m)
{
    calibrate_point points[CALIBRATE_MAX_POINTS];
    int32_t n = calibrate_grid(CALIBRATE_MAX_DOCUMENT, points), i;
    dcp_error error;
    for (i = 0; i < n; i++) {
        CHECK(calibrate_point_terms(&points[i], &m[i], &error) == DCP_OK);
        m[i].seconds = dcp_cost_measurement_seconds(truth, &m[i]) *
                       (1.0 + noise * dcp_rng_normal(rng));
    }
    return n;
}

static double *coefficient(dcp_cost_model *cost, int which)
{
    return which == 0 ? &cost->attn_coeff : which == 1 ? &cost->linear_coeff
                                                       : &cost->ring_step_cost;
}

static double relative_error(double fitted, double truth) { return fabs(fitted / truth - 1.0); }

static void test_fit_exact_times(void)
{
    dcp_cost_measurement m[CALIBRATE_MAX_POINTS];
    dcp_rng rng;
    int32_t trial, n;
    dcp_rng_seed(&rng, test_seed_for(21002));
    for (trial = 0; trial < NOISE_TRIALS; trial++) {
        dcp_cost_model truth = random_cost(&rng);
        dcp_cost_fit fit;
        dcp_error error;
        n = synthetic_grid(&truth, 0.0, &rng, m);
        CHECK(n >= 40);
        CHECK(dcp_cost_fit_measurements(m, n, NULL, &fit, &error) == DCP_OK);
        CHECK_NEAR(fit.cost.attn_coeff / truth.attn_coeff, 1.0, EXACT_FIT_TOLERANCE);
        CHECK_NEAR(fit.cost.linear_coeff / truth.linear_coeff, 1.0, EXACT_FIT_TOLERANCE);
        CHECK_NEAR(fit.cost.ring_step_cost / truth.ring_step_cost, 1.0, EXACT_FIT_TOLERANCE);
        CHECK(fit.max_relative_residual < EXACT_FIT_TOLERANCE);
        CHECK(fit.zero_terms == 0);
        CHECK_EQ(fit.count, n);
        CHECK(fit.conditioning > DCP_COST_FIT_MIN_PIVOT && fit.conditioning <= 1.0);
    }
}

/* With times off by a relative noise sigma, each coefficient lies within
   NOISE_STANDARD_ERRORS of its reported standard error from the truth (a 5-sigma bound: a
   false alarm once in ~10^6 checks). For the default model's proportions (the first trial of
   each sigma; the others draw each coefficient over two decades) the relative error of each
   coefficient stays below noise_gain[term] sigma: the worst this test printed over
   DCP_TEST_SEED = 0 .. 199 was 1.44, 0.62 and 13.1 sigma; the bounds are about twice that.
   The ring term is the weakest: 15 us a step is under a fifth of even the smallest ring
   pack's time, so 1% noise moves it by up to ~13%. */
#define NOISE_STANDARD_ERRORS 5.0
static const double noise_gain[3] = {3.0, 1.25, 25.0};

static void test_fit_noisy_times(void)
{
    static const double sigmas[2] = {0.01, 0.03};
    dcp_cost_measurement m[CALIBRATE_MAX_POINTS];
    dcp_rng rng;
    int32_t trial, s, n, j;
    double worst[3] = {0.0, 0.0, 0.0};
    dcp_rng_seed(&rng, test_seed_for(21003));
    for (s = 0; s < 2; s++)
        for (trial = 0; trial < NOISE_TRIALS; trial++) {
            dcp_cost_model truth = random_cost(&rng);
            dcp_cost_fit fit;
            dcp_error error;
            if (trial == 0) {
                truth.attn_coeff = DCP_DEFAULT_ATTN_COEFF;
                truth.linear_coeff = DCP_DEFAULT_LINEAR_COEFF;
                truth.ring_step_cost = DCP_DEFAULT_RING_STEP_COST;
            }
            n = synthetic_grid(&truth, sigmas[s], &rng, m);
            CHECK(dcp_cost_fit_measurements(m, n, NULL, &fit, &error) == DCP_OK);
            for (j = 0; j < 3; j++) {
                double fitted = *coefficient(&fit.cost, j), true_value = *coefficient(&truth, j);
                double standard_error = *coefficient(&fit.standard_error, j);
                double relative = relative_error(fitted, true_value) / sigmas[s];
                CHECK(fabs(fitted - true_value) <= NOISE_STANDARD_ERRORS * standard_error);
                CHECK(standard_error > 0.0 && standard_error < sigmas[s] * 1e3 * true_value);
                if (trial > 0) continue;
                if (relative > worst[j]) worst[j] = relative;
                CHECK(relative <= noise_gain[j]);
            }
            /* the residuals measure the noise: rms within a factor 2 of sigma */
            CHECK(fit.rms_relative_residual > 0.5 * sigmas[s] &&
                  fit.rms_relative_residual < 2.0 * sigmas[s]);
            CHECK(fit.max_relative_residual >= fit.rms_relative_residual);
        }
    printf("  default model: worst coefficient error / sigma: attn %.3f, linear %.3f, ring %.3f\n",
           worst[0], worst[1], worst[2]);
}

/* Objective of the fit's weighting at cost over the measurements. */
static double relative_objective(const dcp_cost_model *cost, const dcp_cost_measurement *m,
                                 int32_t n)
{
    double total = 0.0;
    int32_t i;
    for (i = 0; i < n; i++) {
        double r = dcp_cost_measurement_seconds(cost, &m[i]) / m[i].seconds - 1.0;
        total += r * r;
    }
    return total;
}

/* A ring term the data want negative (times shrink with ring steps) is clipped to 0, and the
   answer is optimal among non-negative models: no feasible step along a coefficient lowers the
   objective. */
static void test_fit_non_negative_optimum(void)
{
    dcp_cost_measurement m[CALIBRATE_MAX_POINTS];
    dcp_cost_model truth = {DCP_DEFAULT_ATTN_COEFF, DCP_DEFAULT_LINEAR_COEFF, 0.0};
    dcp_cost_fit fit;
    dcp_error error;
    dcp_rng rng;
    int32_t n, i, j;
    double best;
    dcp_rng_seed(&rng, test_seed_for(21004));
    n = synthetic_grid(&truth, 0.0, &rng, m);
    for (i = 0; i < n; i++) m[i].seconds *= 1.0 - 0.02 * m[i].ring_steps / 56.0;
    CHECK(dcp_cost_fit_measurements(m, n, NULL, &fit, &error) == DCP_OK);
    CHECK(fit.cost.ring_step_cost == 0.0);
    CHECK(fit.zero_terms == DCP_COST_TERM_RING);
    best = relative_objective(&fit.cost, m, n);
    for (j = 0; j < 3; j++) {
        static const double steps[4] = {-1e-3, 1e-3, -1e-6, 1e-6};
        int s;
        for (s = 0; s < 4; s++) {
            dcp_cost_model moved = fit.cost;
            double *c = coefficient(&moved, j);
            double base = *c > 0.0 ? *c : *coefficient(&truth, j > 1 ? 0 : j) * 1e-3;
            *c += steps[s] * base;
            if (*c < 0.0) continue;
            CHECK(relative_objective(&moved, m, n) >= best * (1.0 - 1e-12));
        }
    }
}

static void test_fit_held_terms(void)
{
    dcp_cost_measurement m[CALIBRATE_MAX_POINTS];
    dcp_cost_fit_options options;
    dcp_cost_fit fit;
    dcp_error error;
    dcp_rng rng;
    int32_t n, i;
    dcp_cost_model truth;
    dcp_rng_seed(&rng, test_seed_for(21005));
    truth = random_cost(&rng);
    n = synthetic_grid(&truth, 0.0, &rng, m);
    memset(&options, 0, sizeof options);
    /* the linear term held at its true value: the other two still come out exact */
    options.held_terms = DCP_COST_TERM_LINEAR;
    options.held.linear_coeff = truth.linear_coeff;
    CHECK(dcp_cost_fit_measurements(m, n, &options, &fit, &error) == DCP_OK);
    CHECK(fit.cost.linear_coeff == truth.linear_coeff);
    CHECK_NEAR(fit.cost.attn_coeff / truth.attn_coeff, 1.0, EXACT_FIT_TOLERANCE);
    CHECK_NEAR(fit.cost.ring_step_cost / truth.ring_step_cost, 1.0, EXACT_FIT_TOLERANCE);
    /* only cp 1 measured: the ring term must be held, and then the rest fits */
    for (i = 0; i < n && m[i].ring_steps == 0.0; i++) {}
    CHECK(dcp_cost_fit_measurements(m, i, NULL, &fit, &error) == DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "ring_steps > 0");
    CHECK_CONTAINS(error.message, "ring_step_cost cannot be fitted");
    options.held_terms = DCP_COST_TERM_RING;
    options.held.ring_step_cost = 0.0;
    CHECK(dcp_cost_fit_measurements(m, i, &options, &fit, &error) == DCP_OK);
    CHECK_NEAR(fit.cost.attn_coeff / truth.attn_coeff, 1.0, EXACT_FIT_TOLERANCE);
    CHECK(fit.zero_terms == 0);
    /* all held: the residuals of a given model (a wrong one is off by its factor) */
    options.held_terms = DCP_COST_TERMS_ALL;
    options.held = truth;
    options.held.attn_coeff *= 2.0;
    options.held.linear_coeff *= 2.0;
    options.held.ring_step_cost *= 2.0;
    CHECK(dcp_cost_fit_measurements(m, n, &options, &fit, &error) == DCP_OK);
    CHECK_NEAR(fit.rms_relative_residual, 1.0, 1e-12);
    CHECK_NEAR(fit.max_relative_residual, 1.0, 1e-12);
    /* absolute weighting recovers exact times too */
    options.held_terms = 0;
    options.weighting = DCP_COST_FIT_ABSOLUTE;
    CHECK(dcp_cost_fit_measurements(m, n, &options, &fit, &error) == DCP_OK);
    CHECK_NEAR(fit.cost.attn_coeff / truth.attn_coeff, 1.0, EXACT_FIT_TOLERANCE);
    CHECK_NEAR(fit.cost.linear_coeff / truth.linear_coeff, 1.0, EXACT_FIT_TOLERANCE);
}

static dcp_cost_measurement measurement(double a, double b, double g, double seconds)
{
    dcp_cost_measurement m;
    m.attn_units = a, m.linear_units = b, m.ring_steps = g, m.seconds = seconds;
    return m;
}

static void expect_fit_error(const dcp_cost_measurement *m, int32_t n,
                             const dcp_cost_fit_options *options, dcp_status expected,
                             const char *needle)
{
    dcp_cost_fit fit;
    dcp_error error;
    CHECK_EQ(dcp_cost_fit_measurements(m, n, options, &fit, &error), expected);
    CHECK_CONTAINS(error.message, needle);
}

static void test_fit_rejects(void)
{
    dcp_cost_measurement m[4];
    dcp_cost_fit_options options;
    dcp_error error;
    int32_t i;
    for (i = 0; i < 4; i++) m[i] = measurement(1e8 * (i + 1), 1e4 * (i % 2 + 1), i, 1e-3 * (i + 1));
    memset(&options, 0, sizeof options);
    CHECK(dcp_cost_fit_measurements(m, 4, NULL, NULL, &error) == DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "fit must not be NULL");
    expect_fit_error(NULL, 4, NULL, DCP_ERROR_INVALID_ARGUMENT, "measurements must not be NULL");
    expect_fit_error(m, 0, NULL, DCP_ERROR_INVALID_ARGUMENT, "got an array and 0");
    expect_fit_error(m, 2, NULL, DCP_ERROR_INVALID_ARGUMENT,
                     "2 measurements cannot determine 3 coefficients");
    m[2].linear_units = -1.0;
    expect_fit_error(m, 4, NULL, DCP_ERROR_INVALID_ARGUMENT, "measurement 2 has linear_units = -1");
    m[2].linear_units = NAN;
    expect_fit_error(m, 4, NULL, DCP_ERROR_INVALID_ARGUMENT,
                     "measurement 2 has linear_units = nan");
    m[2].linear_units = 1e4;
    m[3].seconds = 0.0;
    expect_fit_error(m, 4, NULL, DCP_ERROR_INVALID_ARGUMENT, "measurement 3 has seconds = 0");
    m[3].seconds = INFINITY;
    expect_fit_error(m, 4, NULL, DCP_ERROR_INVALID_ARGUMENT, "measurement 3 has seconds = inf");
    m[3].seconds = 4e-3;
    options.weighting = (dcp_cost_fit_weighting)7;
    expect_fit_error(m, 4, &options, DCP_ERROR_INVALID_ARGUMENT, "weighting 7");
    options.weighting = DCP_COST_FIT_RELATIVE;
    options.held_terms = 8;
    expect_fit_error(m, 4, &options, DCP_ERROR_INVALID_ARGUMENT, "held_terms 0x8");
    options.held_terms = DCP_COST_TERM_ATTN;
    options.held.attn_coeff = -1.0;
    expect_fit_error(m, 4, &options, DCP_ERROR_INVALID_ARGUMENT, "held attn_coeff = -1");
    options.held.attn_coeff = 1e-200;
    expect_fit_error(m, 4, &options, DCP_ERROR_INVALID_ARGUMENT, "held attn_coeff = 1e-200");
    /* one document length throughout: attention proportional to tokens */
    for (i = 0; i < 4; i++) m[i] = measurement(4096.0 * 4096 * (i + 1), 4096.0 * (i + 1), i, 1e-3);
    expect_fit_error(m, 4, NULL, DCP_ERROR_INVALID_ARGUMENT,
                     "cannot tell attn_coeff from linear_coeff");
    /* three columns dependent, no two proportional: ring_steps = attn_units / 1e4 - linear */
    m[0] = measurement(2e8, 1e4, 1e4, 1e-3);
    m[1] = measurement(3e8, 2e4, 1e4, 2e-3);
    m[2] = measurement(4e8, 1e4, 3e4, 3e-3);
    m[3] = measurement(5e8, 4e4, 1e4, 4e-3);
    expect_fit_error(m, 4, NULL, DCP_ERROR_INVALID_ARGUMENT, "cannot tell the 3 fitted terms");
    /* units on a scale that gives coefficients the planner cannot take */
    for (i = 0; i < 4; i++) m[i] = measurement(1e120 * (i + 1), 1e4 * (i % 2 + 1), i, 1.0);
    expect_fit_error(m, 4, NULL, DCP_ERROR_OVERFLOW, "fitted attn_coeff");
    /* weighted entries overflow a double */
    for (i = 0; i < 4; i++) m[i] = measurement(1e300, 1e4 * (i + 1), i, 1e-300);
    expect_fit_error(m, 4, NULL, DCP_ERROR_OVERFLOW, "overflows");
    /* every term held at 0: a model the planner would read as its default */
    for (i = 0; i < 4; i++) m[i] = measurement(1e8 * (i + 1), 1e4 * (i % 2 + 1), i, 1e-3);
    memset(&options, 0, sizeof options);
    options.held_terms = DCP_COST_TERMS_ALL;
    expect_fit_error(m, 4, &options, DCP_ERROR_INFEASIBLE, "every coefficient came out 0");
}

/* Random measurements, extreme values included: a status and a message, never a crash; an
   accepted fit is in the planner's range with finite residual figures. */
static void test_fit_fuzz(void)
{
    static const double extremes[] = {0.0, 1e-300, 1e-12, 1.0, 1e12, 1e300, DBL_MAX};
    dcp_cost_measurement m[8];
    dcp_rng rng;
    int32_t trial, accepted = 0;
    dcp_rng_seed(&rng, test_seed_for(21006));
    for (trial = 0; trial < 20000; trial++) {
        int32_t n = 1 + (int32_t)dcp_rng_below(&rng, 8), i;
        dcp_cost_fit_options options;
        dcp_cost_fit fit;
        dcp_error error;
        dcp_status status;
        memset(&options, 0, sizeof options);
        options.weighting = (dcp_cost_fit_weighting)dcp_rng_below(&rng, 2);
        options.held_terms = (uint32_t)dcp_rng_below(&rng, 8);
        options.held = random_cost(&rng);
        for (i = 0; i < n; i++) {
            double *fields[4];
            int f;
            fields[0] = &m[i].attn_units, fields[1] = &m[i].linear_units;
            fields[2] = &m[i].ring_steps, fields[3] = &m[i].seconds;
            for (f = 0; f < 4; f++)
                *fields[f] = dcp_rng_below(&rng, 4) == 0
                                 ? extremes[dcp_rng_below(&rng, TEST_COUNT(extremes))]
                                 : pow(10.0, 20.0 * dcp_rng_uniform(&rng) - 10.0);
        }
        status = dcp_cost_fit_measurements(m, n, &options, &fit, &error);
        CHECK(error.status == status);
        if (status != DCP_OK) {
            CHECK(error.message[0] != '\0');
            continue;
        }
        accepted++;
        CHECK(fit.cost.attn_coeff == 0.0 || (fit.cost.attn_coeff >= DCP_MIN_COST_COEFF &&
                                             fit.cost.attn_coeff <= DCP_MAX_COST_COEFF));
        CHECK(fit.cost.linear_coeff >= 0.0 && fit.cost.ring_step_cost >= 0.0);
        CHECK(fit.conditioning >= DCP_COST_FIT_MIN_PIVOT);
        CHECK(!(fit.rms_relative_residual < 0.0) && !(fit.max_residual_index < 0) &&
              fit.max_residual_index < n);
    }
    CHECK(accepted > 100); /* the fuzz reaches the solver, not only the checks */
}

/* The accounting with the model's durations is the schedule, under every sync model. */
static void test_accounting_reproduces_schedule(void)
{
    dcp_rng rng;
    int32_t trial, g, r;
    dcp_rng_seed(&rng, test_seed_for(21007));
    for (trial = 0; trial < RANDOM_PLANS; trial++) {
        dcp_plan *plan = random_plan(&rng, trial % 3);
        double *start, *end, *seconds, step = 0.0;
        plan_exec_times times;
        dcp_error error;
        if (!plan) continue;
        start = (double *)malloc((size_t)plan->num_groups * sizeof *start);
        end = (double *)malloc((size_t)plan->num_groups * sizeof *end);
        seconds = (double *)malloc((size_t)plan->num_groups * sizeof *seconds);
        times.rank_finish = (double *)malloc((size_t)plan->config.ranks * sizeof(double));
        times.group_start = (double *)malloc((size_t)plan->num_groups * sizeof(double));
        times.group_end = (double *)malloc((size_t)plan->num_groups * sizeof(double));
        times.microbatch_end = (double *)malloc((size_t)plan->num_microbatches * sizeof(double));
        CHECK(dcp_plan_schedule(plan, NULL, start, end, &error) == DCP_OK);
        for (g = 0; g < plan->num_groups; g++) {
            int64_t lengths[MAX_SAMPLES];
            dcp_cost_measurement terms;
            plan_exec_group_lengths(plan, g, lengths);
            CHECK(dcp_cost_group_terms(&plan->config, lengths, plan->groups[g].sample_count,
                                       plan->groups[g].cp, &terms, &error) == DCP_OK);
            seconds[g] = dcp_cost_measurement_seconds(&plan->config.cost, &terms);
        }
        CHECK(plan_exec_account(plan, seconds, &times, &error) == DCP_OK);
        CHECK(dcp_plan_step_time(plan, NULL, 0, &step, &error) == DCP_OK);
        CHECK_NEAR(times.step_seconds / step, 1.0, SUM_ORDER_TOLERANCE);
        for (g = 0; g < plan->num_groups; g++) {
            CHECK(fabs(times.group_start[g] - start[g]) <= SUM_ORDER_TOLERANCE * step);
            CHECK(fabs(times.group_end[g] - end[g]) <= SUM_ORDER_TOLERANCE * step);
        }
        for (r = 0; r < plan->config.ranks; r++) CHECK(times.rank_finish[r] <= times.step_seconds);
        CHECK(times.microbatch_end[plan->num_microbatches - 1] == times.step_seconds);
        /* durations twice as long: every time twice as late */
        for (g = 0; g < plan->num_groups; g++) seconds[g] *= 2.0;
        CHECK(plan_exec_account(plan, seconds, &times, &error) == DCP_OK);
        CHECK_NEAR(times.step_seconds / step, 2.0, SUM_ORDER_TOLERANCE);
        free(start), free(end), free(seconds);
        free(times.rank_finish), free(times.group_start), free(times.group_end);
        free(times.microbatch_end);
        dcp_plan_destroy(plan);
    }
}

/* The last group end of rank r (0 when it is idle throughout). */
static double last_group_end(const dcp_plan *plan, const double *group_end, int32_t r)
{
    double end = 0.0;
    int32_t g;
    for (g = 0; g < plan->num_groups; g++)
        if (r >= plan->groups[g].first_rank && r < plan->groups[g].first_rank + plan->groups[g].cp)
            end = group_end[g];
    return end;
}

/* A measured duration that differs from the model's moves only what depends on it: the first
   group of the first microbatch takes 3 s, every other 1 s. Under E = 1 a rank's step is its
   own last group's end and groups on other ranks do not wait; under E = D (a barrier) every
   group after the first microbatch starts at 3 s or later. */
static void test_accounting_sync_models(void)
{
    dcp_config config = make_config(4, 4096);
    int64_t lengths[6] = {6000, 1000, 1000, 6000, 3000, 500};
    dcp_error error;
    int32_t sync;
    for (sync = 1; sync <= 4; sync *= 4) {
        double seconds[16], rank_finish[4], group_start[16], group_end[16], microbatch_end[8];
        plan_exec_times times;
        dcp_plan *plan = NULL;
        int32_t g, r, second;
        times.rank_finish = rank_finish, times.group_start = group_start;
        times.group_end = group_end, times.microbatch_end = microbatch_end;
        config.sync_ranks = sync;
        CHECK(dcp_plan_create(&config, lengths, 6, &plan, &error) == DCP_OK);
        if (!plan) return;
        CHECK(plan->num_groups <= 16 && plan->num_microbatches <= 8);
        CHECK(plan->num_microbatches >= 2); /* 17500 tokens on 4 x 4096 */
        for (g = 0; g < plan->num_groups; g++) seconds[g] = 1.0;
        seconds[0] = 3.0;
        CHECK(plan_exec_account(plan, seconds, &times, &error) == DCP_OK);
        second = plan->microbatch_offsets[1];
        CHECK(microbatch_end[0] == 3.0);
        for (g = 0; g < plan->num_groups; g++)
            CHECK(group_end[g] - group_start[g] == seconds[g]);
        if (sync == 4) {
            for (g = second; g < plan->num_groups; g++) CHECK(group_start[g] >= 3.0);
        } else {
            for (r = 0; r < 4; r++)
                CHECK(rank_finish[r] == last_group_end(plan, group_end, r));
            for (g = 1; g < second; g++) CHECK(group_start[g] == 0.0);
        }
        dcp_plan_destroy(plan);
    }
}

static void test_accounting_rejects(void)
{
    dcp_config config = make_config(2, 4096);
    int64_t lengths[2] = {100, 200};
    double seconds[4] = {1.0, 1.0, 1.0, 1.0}, a[4], b[4], c[4], d[4];
    plan_exec_times times;
    dcp_plan *plan = NULL;
    dcp_error error;
    times.rank_finish = a, times.group_start = b, times.group_end = c, times.microbatch_end = d;
    CHECK(dcp_plan_create(&config, lengths, 2, &plan, &error) == DCP_OK);
    if (!plan) return;
    CHECK(plan->num_groups <= 4 && plan->num_microbatches <= 4);
    CHECK(plan_exec_account(plan, NULL, &times, &error) == DCP_ERROR_INVALID_ARGUMENT);
    CHECK(plan_exec_account(NULL, seconds, &times, &error) == DCP_ERROR_INVALID_ARGUMENT);
    times.group_end = NULL;
    CHECK(plan_exec_account(plan, seconds, &times, &error) == DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "four arrays");
    times.group_end = c;
    seconds[plan->num_groups - 1] = NAN;
    CHECK(plan_exec_account(plan, seconds, &times, &error) == DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "must be finite and >= 0");
    seconds[plan->num_groups - 1] = -1.0;
    CHECK(plan_exec_account(plan, seconds, &times, &error) == DCP_ERROR_INVALID_ARGUMENT);
    dcp_plan_destroy(plan);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"group_terms_are_the_planner_model", test_group_terms_are_the_planner_model},
        {"group_terms_rejects", test_group_terms_rejects},
        {"fit_exact_times", test_fit_exact_times},
        {"fit_noisy_times", test_fit_noisy_times},
        {"fit_non_negative_optimum", test_fit_non_negative_optimum},
        {"fit_held_terms", test_fit_held_terms},
        {"fit_rejects", test_fit_rejects},
        {"fit_fuzz", test_fit_fuzz},
        {"accounting_reproduces_schedule", test_accounting_reproduces_schedule},
        {"accounting_sync_models", test_accounting_sync_models},
        {"accounting_rejects", test_accounting_rejects},
    };
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
