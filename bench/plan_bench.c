/* plan_bench: step time, efficiency and planning time of the dynamic planner against the
   static-CP and per-microbatch-greedy baselines, on the workloads of the planner issues, with
   the default cost model and with the L^2-only model (a = 1, b = 0, G = 0), under the three
   synchronisation models: E = D (barrier per microbatch, the default), E = 1 (DAG, dense
   models) and E = 8 on the 64-rank workload (blocks of 8 ranks in lockstep). Then the scaling
   sweep: plan time of the planner and both baselines against samples per rank and ranks.

   Usage: build/plan_bench [--quick] [--repeat N] [--dump-lengths DIR]
   --quick skips the sweep points above 100,000 samples. --dump-lengths writes each workload's
   sample lengths to DIR/NAME.txt (one a line) and DIR/workloads.txt (one line per workload:
   name, samples, ranks D, max tokens per rank M, file), and exits: the inputs of
   bench/megatron_baseline.py, which plans the same batches with Megatron-LM's scheduler. */
#define _POSIX_C_SOURCE 199309L
#define DCP_IMPLEMENTATION
#include "../dcp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum { SOURCE_LOGNORMAL, SOURCE_BIMODAL, SOURCE_PARETO } source_kind;

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

/* pareto-48: Pareto(alpha) lengths from PARETO_MIN, clipped at PARETO_MAX */
#define PARETO_ALPHA 1.2
#define PARETO_MIN 512
#define PARETO_MAX 65536

static const workload workloads[] = {
    {"seed-lognormal", SOURCE_LOGNORMAL, 256, {4096, 1.1, 1024, 8192}, 16, 4096},
    {"megatron-example", SOURCE_LOGNORMAL, 256, {1024, 1.5, 128, 8192}, 32, 2048},
    {"qwen-longtail", SOURCE_LOGNORMAL, 512, {6000, 1.4, 256, 49152}, 32, 3072},
    {"bimodal-64", SOURCE_BIMODAL, 1024, {0, 0, 0, 0}, 64, 4096},
    {"pareto-48", SOURCE_PARETO, 768, {0, 0, 0, 0}, 48, 8192},
    {"heavy-8192x1024", SOURCE_LOGNORMAL, 8192, {4096, 1.4, 256, 65536}, 1024, 4096},
    {"sweep-1024x128", SOURCE_LOGNORMAL, 1024, {4096, 1.1, 1024, 8192}, 128, 4096},
    {"sweep-8192x1024", SOURCE_LOGNORMAL, 8192, {4096, 1.1, 1024, 8192}, 1024, 4096},
};

/* The scaling sweep: lognormal (4096, 1.1, 1024, 8192), M = 4096; samples per rank 8 to 30,000
   at D = 32, and the heavy tail at 8192 x 1024. */
static const workload sweep[] = {
    {"spr-8", SOURCE_LOGNORMAL, 256, {4096, 1.1, 1024, 8192}, 32, 4096},
    {"spr-100", SOURCE_LOGNORMAL, 3200, {4096, 1.1, 1024, 8192}, 32, 4096},
    {"spr-1000", SOURCE_LOGNORMAL, 32000, {4096, 1.1, 1024, 8192}, 32, 4096},
    {"1e5x32", SOURCE_LOGNORMAL, 100000, {4096, 1.1, 1024, 8192}, 32, 4096},
    {"spr-30000", SOURCE_LOGNORMAL, 960000, {4096, 1.1, 1024, 8192}, 32, 4096},
    {"1e6x32", SOURCE_LOGNORMAL, 1000000, {4096, 1.1, 1024, 8192}, 32, 4096},
    {"heavy-8192x1024", SOURCE_LOGNORMAL, 8192, {4096, 1.4, 256, 65536}, 1024, 4096},
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
    } else if (w->source == SOURCE_PARETO) {
        dcp_rng rng;
        int32_t i;
        dcp_rng_seed(&rng, bench_seed);
        for (i = 0; i < w->count; i++) {
            double u = 1.0 - dcp_rng_uniform(&rng); /* (0, 1] */
            double length = PARETO_MIN * pow(u, -1.0 / PARETO_ALPHA);
            lengths[i] = length > PARETO_MAX ? PARETO_MAX : (int64_t)length;
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

/* Plans `repeat` times under sync ranks E (median wall time), validates and simulates the
   last plan; *plan_out keeps it when not NULL. */
static int run_strategy(const workload *w, const dcp_cost_model *cost, dcp_strategy strategy,
                        int32_t sync, const int64_t *lengths, int repeat, dcp_plan_stats *stats,
                        double *plan_seconds, dcp_plan **plan_out)
{
    dcp_config config;
    dcp_plan *plan = NULL;
    dcp_error error;
    double times[64];
    int i;
    memset(&config, 0, sizeof config);
    config.ranks = w->ranks;
    config.max_tokens_per_rank = w->max_tokens_per_rank;
    config.sync_ranks = sync;
    if (cost) config.cost = *cost;
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
    if (plan_out)
        *plan_out = plan;
    else
        dcp_plan_destroy(plan);
    return 1;
}

static const dcp_cost_model models[2] = {
    {DCP_DEFAULT_ATTN_COEFF, DCP_DEFAULT_LINEAR_COEFF, DCP_DEFAULT_RING_STEP_COST}, {1.0, 0.0, 0.0}};
static const char *model_names[2] = {"default", "L2-only"};

/* One table: every workload and model under sync ranks E (0: D). Returns failures; adds the
   log of greedy / dynamic to *log_sum and counts it. */
static int model_table(const char *title, int32_t sync, int repeat, double *log_sum,
                       int *log_count)
{
    int failures = 0, m;
    size_t w;
    printf("\n%s\n", title);
    printf("%-17s %-8s %5s %5s | %9s %9s %9s | %6s %6s %6s | %7s %7s | %5s %8s\n", "workload",
           "model", "N", "D", "static", "greedy", "dynamic", "eff-s", "eff-g", "eff-d",
           "vs-stat", "vs-grdy", "K", "plan-ms");
    for (w = 0; w < sizeof workloads / sizeof workloads[0]; w++) {
        const workload *wl = &workloads[w];
        int64_t *lengths = (int64_t *)malloc((size_t)wl->count * sizeof *lengths);
        if (!lengths || !make_lengths(wl, lengths)) return failures + 1;
        for (m = 0; m < 2; m++) {
            dcp_plan_stats s, g, d;
            double ts, tg, td, unit = m == 0 ? 1e3 : 1e-9;
            if (!run_strategy(wl, &models[m], DCP_STRATEGY_STATIC, sync, lengths, 1, &s, &ts, NULL) ||
                !run_strategy(wl, &models[m], DCP_STRATEGY_GREEDY, sync, lengths, 1, &g, &tg, NULL) ||
                !run_strategy(wl, &models[m], DCP_STRATEGY_DYNAMIC, sync, lengths, repeat, &d, &td,
                              NULL)) {
                failures++;
                continue;
            }
            printf("%-17s %-8s %5d %5d | %9.3f %9.3f %9.3f | %6.3f %6.3f %6.3f | %6.3fx %6.3fx "
                   "| %5d %8.3f\n",
                   wl->name, model_names[m], (int)wl->count, (int)wl->ranks,
                   s.step_seconds * unit, g.step_seconds * unit, d.step_seconds * unit,
                   s.efficiency, g.efficiency, d.efficiency, s.step_seconds / d.step_seconds,
                   g.step_seconds / d.step_seconds, (int)d.num_microbatches, td * 1e3);
            *log_sum += log(g.step_seconds / d.step_seconds);
            (*log_count)++;
        }
        free(lengths);
    }
    return failures;
}

/* E = 8 on the 64-rank workload: the plans made for E = 1, E = 8 and E = D, and the
   baselines, all evaluated under E = 8. */
static int intermediate_table(int repeat)
{
    static const int32_t made_for[3] = {1, 8, 64};
    const workload *wl = &workloads[3];
    int64_t *lengths = (int64_t *)malloc((size_t)wl->count * sizeof *lengths);
    int m, i;
    if (!lengths || !make_lengths(wl, lengths)) return 1;
    printf("\nE = 8 on %s (D = %d): each plan's step under E = 8 (and E = 1, E = D)\n",
           wl->name, (int)wl->ranks);
    printf("%-8s %-22s | %9s %9s %9s\n", "model", "plan", "E=8", "E=1", "E=D");
    for (m = 0; m < 2; m++) {
        double unit = m == 0 ? 1e3 : 1e-9;
        for (i = 0; i < 5; i++) {
            dcp_plan *plan = NULL;
            dcp_plan_stats stats;
            double t, at8;
            dcp_strategy strategy = i < 3 ? DCP_STRATEGY_DYNAMIC
                                          : (i == 3 ? DCP_STRATEGY_GREEDY : DCP_STRATEGY_STATIC);
            char name[64];
            if (!run_strategy(wl, &models[m], strategy, i < 3 ? made_for[i] : 8, lengths,
                              i < 3 ? repeat : 1, &stats, &t, &plan))
                return 1;
            if (dcp_plan_step_time(plan, NULL, 8, &at8, NULL) != DCP_OK) return 1;
            if (i < 3)
                snprintf(name, sizeof name, "dynamic made for E=%d", (int)made_for[i]);
            else
                snprintf(name, sizeof name, "%s", dcp_strategy_name(strategy));
            printf("%-8s %-22s | %9.3f %9.3f %9.3f\n", model_names[m], name, at8 * unit,
                   stats.dag_seconds * unit, stats.barrier_seconds * unit);
            dcp_plan_destroy(plan);
        }
    }
    free(lengths);
    return 0;
}

/* Plan time against samples per rank and ranks, default model, E = D and E = 1 (E = 1 up to
   SCALING_DAG_MAX_SAMPLES; 0 printed above). */
#define SCALING_DAG_MAX_SAMPLES 1000000
static int scaling_table(int quick)
{
    size_t w;
    printf("\nscaling (default model; plan ms, one run each; dynamic efficiency under its E)\n");
    printf("%-17s %8s %5s %7s | %9s %9s %9s %9s | %6s %6s\n", "workload", "N", "D", "N/D",
           "dyn E=D", "dyn E=1", "greedy", "static", "eff-D", "eff-1");
    for (w = 0; w < sizeof sweep / sizeof sweep[0]; w++) {
        const workload *wl = &sweep[w];
        int64_t *lengths;
        dcp_plan_stats d, d1, g, s;
        double td, td1, tg, ts;
        if (quick && wl->count > 100000) continue;
        lengths = (int64_t *)malloc((size_t)wl->count * sizeof *lengths);
        if (!lengths || !make_lengths(wl, lengths)) return 1;
        /* the E = 1 tree planner is not linear in samples per rank (~9 s at 10^6 x 32 on this
           machine): a bound keeps the sweep short */
        d1.efficiency = 0.0;
        td1 = 0.0;
        if (!run_strategy(wl, NULL, DCP_STRATEGY_DYNAMIC, 0, lengths, 1, &d, &td, NULL) ||
            (wl->count <= SCALING_DAG_MAX_SAMPLES &&
             !run_strategy(wl, NULL, DCP_STRATEGY_DYNAMIC, 1, lengths, 1, &d1, &td1, NULL)) ||
            !run_strategy(wl, NULL, DCP_STRATEGY_GREEDY, 0, lengths, 1, &g, &tg, NULL) ||
            !run_strategy(wl, NULL, DCP_STRATEGY_STATIC, 0, lengths, 1, &s, &ts, NULL))
            return 1;
        printf("%-17s %8d %5d %7.0f | %9.3f %9.3f %9.3f %9.3f | %6.3f %6.3f\n", wl->name,
               (int)wl->count, (int)wl->ranks, (double)wl->count / wl->ranks, td * 1e3,
               td1 * 1e3, tg * 1e3, ts * 1e3, d.efficiency, d1.efficiency);
        free(lengths);
    }
    return 0;
}

/* The workload table's lengths, for other planners to run on the same batches (see Usage). */
static int dump_lengths(const char *dir)
{
    char path[4096];
    FILE *index;
    size_t w;
    snprintf(path, sizeof path, "%s/workloads.txt", dir);
    if (!(index = fopen(path, "w"))) {
        perror(path);
        return 1;
    }
    for (w = 0; w < sizeof workloads / sizeof workloads[0]; w++) {
        const workload *wl = &workloads[w];
        int64_t *lengths = (int64_t *)malloc((size_t)wl->count * sizeof *lengths);
        FILE *out;
        int32_t i;
        if (!lengths || !make_lengths(wl, lengths)) {
            fclose(index);
            free(lengths);
            return 1;
        }
        snprintf(path, sizeof path, "%s/%s.txt", dir, wl->name);
        if (!(out = fopen(path, "w"))) {
            perror(path);
            fclose(index);
            free(lengths);
            return 1;
        }
        for (i = 0; i < wl->count; i++) fprintf(out, "%lld\n", (long long)lengths[i]);
        fclose(out);
        fprintf(index, "%s %d %d %lld %s.txt\n", wl->name, (int)wl->count, (int)wl->ranks,
                (long long)wl->max_tokens_per_rank, wl->name);
        free(lengths);
    }
    fclose(index);
    return 0;
}

int main(int argc, char **argv)
{
    int quick = 0, repeat = 5, failures = 0, i, count_d = 0, count_1 = 0;
    double log_d = 0.0, log_1 = 0.0;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else if (strcmp(argv[i], "--dump-lengths") == 0 && i + 1 < argc)
            return dump_lengths(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--quick] [--repeat N] [--dump-lengths DIR]\n", argv[0]);
            return 2;
        }
    }
    if (repeat < 1) repeat = 1;
    failures += model_table("E = D (barrier per microbatch; the default): steps and efficiency "
                            "under E = D", 0, repeat, &log_d, &count_d);
    failures += model_table("E = 1 (DAG; dense models): steps and efficiency under E = 1", 1,
                            repeat, &log_1, &count_1);
    printf("geomean greedy / dynamic: E = D %.3fx, E = 1 %.3fx\n", exp(log_d / count_d),
           exp(log_1 / count_1));
    failures += intermediate_table(repeat);
    failures += scaling_table(quick);
    printf("\nstep times: ms (default model), 1e9 x L^2 units (L2-only model); eff = lower bound "
           "/ step under the same E; vs-stat, vs-grdy = baseline step / dynamic step; plan-ms = "
           "median of %d dynamic plans\n", repeat);
    return failures ? 1 : 0;
}
