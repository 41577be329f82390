/* plan_bench: step time, efficiency and planning time of the dynamic planner against the
   static-CP and per-microbatch-greedy baselines, on the workloads of the planner issue, with
   the default cost model and with the L^2-only model (a = 1, b = 0, G = 0).

   Usage: build/plan_bench [--quick] [--repeat N]
   --quick skips the 32768 x 4096 point of the scaling sweep. */
#define _POSIX_C_SOURCE 199309L
#define DCP_IMPLEMENTATION
#include "../dcp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum { SOURCE_LOGNORMAL, SOURCE_BIMODAL } source_kind;

typedef struct workload {
    const char *name;
    source_kind source;
    int32_t count;
    dcp_lognormal lognormal; /* SOURCE_LOGNORMAL */
    int32_t ranks;
    int64_t max_tokens_per_rank;
} workload;

/* bimodal-64: 90% log-uniform in [256, 2048], 10% in [16384, 131072] */
#define BIMODAL_SHORT_FRACTION 0.9
static const int64_t bimodal_short[2] = {256, 2048};
static const int64_t bimodal_long[2] = {16384, 131072};
static const uint64_t bench_seed = 20261121;

static const workload workloads[] = {
    {"seed-lognormal", SOURCE_LOGNORMAL, 256, {4096, 1.1, 1024, 8192}, 16, 4096},
    {"megatron-example", SOURCE_LOGNORMAL, 256, {1024, 1.5, 128, 8192}, 32, 2048},
    {"qwen-longtail", SOURCE_LOGNORMAL, 512, {6000, 1.4, 256, 49152}, 32, 3072},
    {"bimodal-64", SOURCE_BIMODAL, 1024, {0, 0, 0, 0}, 64, 4096},
    {"sweep-1024x128", SOURCE_LOGNORMAL, 1024, {4096, 1.1, 1024, 8192}, 128, 4096},
    {"sweep-2048x256", SOURCE_LOGNORMAL, 2048, {4096, 1.1, 1024, 8192}, 256, 4096},
    {"sweep-4096x512", SOURCE_LOGNORMAL, 4096, {4096, 1.1, 1024, 8192}, 512, 4096},
    {"sweep-8192x1024", SOURCE_LOGNORMAL, 8192, {4096, 1.1, 1024, 8192}, 1024, 4096},
    {"sweep-32768x4096", SOURCE_LOGNORMAL, 32768, {4096, 1.1, 1024, 8192}, 4096, 4096},
};

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int make_lengths(const workload *w, int64_t *lengths)
{
    dcp_error error;
    if (w->source == SOURCE_LOGNORMAL) {
        if (dcp_lengths_lognormal(&w->lognormal, bench_seed, lengths, w->count, &error) != DCP_OK) {
            fprintf(stderr, "%s: %s\n", w->name, error.message);
            return 0;
        }
    } else {
        dcp_rng rng;
        int32_t i;
        dcp_rng_seed(&rng, bench_seed);
        for (i = 0; i < w->count; i++) {
            const int64_t *range =
                dcp_rng_uniform(&rng) < BIMODAL_SHORT_FRACTION ? bimodal_short : bimodal_long;
            if (dcp_rng_loguniform_length(&rng, range[0], range[1], &lengths[i], &error) != DCP_OK) {
                fprintf(stderr, "%s: %s\n", w->name, error.message);
                return 0;
            }
        }
    }
    return 1;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Plans `repeat` times (median wall time), validates and simulates the last plan. */
static int run_strategy(const workload *w, const dcp_cost_model *cost, dcp_strategy strategy,
                        const int64_t *lengths, int repeat, dcp_plan_stats *stats,
                        double *plan_seconds)
{
    dcp_config config;
    dcp_plan *plan = NULL;
    dcp_error error;
    double times[64];
    int i;
    memset(&config, 0, sizeof config);
    config.ranks = w->ranks;
    config.max_tokens_per_rank = w->max_tokens_per_rank;
    config.cost = *cost;
    config.strategy = strategy;
    if (repeat > 64) repeat = 64;
    for (i = 0; i < repeat; i++) {
        double start = now_seconds();
        dcp_plan_destroy(plan);
        plan = NULL;
        if (dcp_plan_create(&config, lengths, w->count, &plan, &error) != DCP_OK) {
            fprintf(stderr, "%s %s: %s\n", w->name, dcp_strategy_name(strategy), error.message);
            return 0;
        }
        times[i] = now_seconds() - start;
    }
    qsort(times, (size_t)repeat, sizeof times[0], compare_doubles);
    *plan_seconds = times[repeat / 2];
    if (dcp_plan_validate(plan, &error) != DCP_OK ||
        dcp_plan_simulate(plan, NULL, stats, &error) != DCP_OK) {
        fprintf(stderr, "%s %s: %s\n", w->name, dcp_strategy_name(strategy), error.message);
        dcp_plan_destroy(plan);
        return 0;
    }
    dcp_plan_destroy(plan);
    return 1;
}

int main(int argc, char **argv)
{
    static const dcp_cost_model models[2] = {{DCP_DEFAULT_ATTN_COEFF, DCP_DEFAULT_LINEAR_COEFF,
                                               DCP_DEFAULT_RING_STEP_COST},
                                              {1.0, 0.0, 0.0}};
    static const char *model_names[2] = {"default", "L2-only"};
    int quick = 0, repeat = 5, failures = 0, i, m;
    size_t w;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--quick] [--repeat N]\n", argv[0]);
            return 2;
        }
    }
    if (repeat < 1) repeat = 1;
    printf("%-18s %-8s %5s %5s | %9s %9s %9s | %6s %6s %6s | %7s %7s | %4s %9s\n", "workload",
           "model", "N", "D", "static", "greedy", "dynamic", "eff-s", "eff-g", "eff-d",
           "vs-stat", "vs-grdy", "K", "plan-ms");
    for (w = 0; w < sizeof workloads / sizeof workloads[0]; w++) {
        const workload *wl = &workloads[w];
        int64_t *lengths;
        if (quick && wl->count > 10000) continue;
        lengths = (int64_t *)malloc((size_t)wl->count * sizeof *lengths);
        if (!lengths || !make_lengths(wl, lengths)) return 1;
        for (m = 0; m < 2; m++) {
            dcp_plan_stats s, g, d;
            double ts, tg, td;
            /* the step-time unit: ms for seconds, "units" (x 1e-9) for the L^2 model */
            double unit = m == 0 ? 1e3 : 1e-9;
            if (!run_strategy(wl, &models[m], DCP_STRATEGY_STATIC, lengths, 1, &s, &ts) ||
                !run_strategy(wl, &models[m], DCP_STRATEGY_GREEDY, lengths, 1, &g, &tg) ||
                !run_strategy(wl, &models[m], DCP_STRATEGY_DYNAMIC, lengths, repeat, &d, &td)) {
                failures++;
                continue;
            }
            printf("%-18s %-8s %5d %5d | %9.3f %9.3f %9.3f | %6.3f %6.3f %6.3f | %6.3fx %6.3fx "
                   "| %4d %9.3f\n",
                   wl->name, model_names[m], (int)wl->count, (int)wl->ranks,
                   s.step_seconds * unit, g.step_seconds * unit, d.step_seconds * unit,
                   s.efficiency, g.efficiency, d.efficiency, s.step_seconds / d.step_seconds,
                   g.step_seconds / d.step_seconds, (int)d.num_microbatches, td * 1e3);
        }
        free(lengths);
    }
    printf("step times: ms (default model), 1e9 x L^2 units (L2-only model); eff = lower bound / "
           "step; vs-stat, vs-grdy = baseline step / dynamic step; plan-ms = median of %d "
           "dynamic plans\n", repeat);
    return failures ? 1 : 0;
}
