/* plan_bench: step time, efficiency and planning time of the dynamic planner against the
   static-CP and per-microbatch-greedy baselines, on the workloads of the planner issues, with
   the default cost model and with the L^2-only model (a = 1, b = 0, G = 0), under the three
   synchronisation models: E = D (barrier per microbatch, the default), E = 1 (DAG, dense
   models) and E = 8 on the 64-rank workload (blocks of 8 ranks in lockstep). Then the
   plan-time targets (issue 28: 8,192 samples x 1,024 ranks of every length shape of
   bench/length_shapes.h under E = 1, 8 and D, both models; 10^6 samples x 32 ranks under E =
   1, 8 and 32), and the scaling sweep: plan time of the planner and both baselines against
   samples per rank and ranks.

   Usage: build/plan_bench [--quick] [--repeat N] [--dump-lengths DIR] [--megatron DIR]
                           [--target SHAPE MODEL E] [--profile [WORKLOAD]] [--sizes]
   --profile plans one sweep workload (default heavy-8192x1024) --repeat times and prints the
   median wall time of each planner phase (the tables, each baseline, each entry of the search
   table, nested entries by their path, the final choice): where the plan time goes. --sizes
   plans every workload with the powers of two, Megatron's CP sizes and every size.
   --quick skips the sweep points and targets above 100,000 samples. --target plans one
   plan-time target once (SHAPE narrow|lognormal|pareto|bimodal|mixture, MODEL default|L2-only,
   E 1..1024 or 0 for D) and prints its row: what `valgrind --tool=callgrind` counts the
   instructions of (bench/RESULTS.md). --dump-lengths writes
   the lengths of the workloads Megatron-LM's scheduler is compared on (the table's and pools
   that are not a power of two: 24, 48, 96, 192 ranks, heavy tails) to DIR/NAME.txt (one a
   line) and DIR/workloads.txt (one line per workload: name, samples, ranks D, max tokens per
   rank M, file), and exits: the inputs of bench/megatron_baseline.py, which writes Megatron's
   plan of each to DIR/NAME.megatron.txt. --megatron then evaluates those plans and ours under
   E = D with both models, with dcp_plan_simulate (`make bench-megatron` runs all three). */
#define _POSIX_C_SOURCE 199309L
/* --profile times the planner's phases through dcp.h's DCP_PLANNER_TRACE hook. */
static void profile_trace(const char *phase, int begin);
#define DCP_PLANNER_TRACE(phase, begin) profile_trace(phase, begin)
#define DCP_IMPLEMENTATION
#include "../dcp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "length_shapes.h"

/* A batch: lognormal (dcp_lognormal, as Megatron's examples draw them) or one of
   bench/length_shapes.h's shapes (typical length T, clipped to `longest`). */
typedef enum { SOURCE_LOGNORMAL, SOURCE_SHAPE } source_kind;

typedef struct workload {
    const char *name;
    source_kind source;
    int32_t count;
    dcp_lognormal lognormal; /* SOURCE_LOGNORMAL */
    int32_t ranks;
    int64_t max_tokens_per_rank;
    length_shape shape;      /* SOURCE_SHAPE */
    int64_t typical, longest;
} workload;

static const uint64_t bench_seed = 20261121;

#define NO_LOGNORMAL {0, 0, 0, 0}
/* bimodal-64: 90% log-uniform in [256, 2048], 10% in [16384, 131072]; pareto-48:
   Pareto(1.2) from 512, clipped at 65536 (length_shapes.h's shapes at T = 2048 and 3072) */
static const workload workloads[] = {
    {"seed-lognormal", SOURCE_LOGNORMAL, 256, {4096, 1.1, 1024, 8192}, 16, 4096, 0, 0, 0},
    {"megatron-example", SOURCE_LOGNORMAL, 256, {1024, 1.5, 128, 8192}, 32, 2048, 0, 0, 0},
    {"qwen-longtail", SOURCE_LOGNORMAL, 512, {6000, 1.4, 256, 49152}, 32, 3072, 0, 0, 0},
    {"bimodal-64", SOURCE_SHAPE, 1024, NO_LOGNORMAL, 64, 4096, LENGTH_BIMODAL, 2048, 131072},
    {"pareto-48", SOURCE_SHAPE, 768, NO_LOGNORMAL, 48, 8192, LENGTH_PARETO, 3072, 65536},
    {"heavy-8192x1024", SOURCE_LOGNORMAL, 8192, {4096, 1.4, 256, 65536}, 1024, 4096, 0, 0, 0},
    {"sweep-1024x128", SOURCE_LOGNORMAL, 1024, {4096, 1.1, 1024, 8192}, 128, 4096, 0, 0, 0},
    {"sweep-8192x1024", SOURCE_LOGNORMAL, 8192, {4096, 1.1, 1024, 8192}, 1024, 4096, 0, 0, 0},
};

/* Megatron's scheduler is also compared on pools that are not a power of two (issue 28): 24,
   48, 96 and 192 ranks, 16 samples a rank, heavy tails (Pareto as pareto-48; lognormal of
   sigma 1.4 from T / 16, clipped at 65536), M = 8192 so that Megatron's padding to 2 D keeps
   the longest sample on a power of two ranks. */
#define NON_POWER_SAMPLES_PER_RANK 16
static const workload non_power_workloads[] = {
    {"pareto-24", SOURCE_SHAPE, 24 * NON_POWER_SAMPLES_PER_RANK, NO_LOGNORMAL, 24, 8192,
     LENGTH_PARETO, 3072, 65536},
    {"pareto-96", SOURCE_SHAPE, 96 * NON_POWER_SAMPLES_PER_RANK, NO_LOGNORMAL, 96, 8192,
     LENGTH_PARETO, 3072, 65536},
    {"pareto-192", SOURCE_SHAPE, 192 * NON_POWER_SAMPLES_PER_RANK, NO_LOGNORMAL, 192, 8192,
     LENGTH_PARETO, 3072, 65536},
    {"heavy-24", SOURCE_SHAPE, 24 * NON_POWER_SAMPLES_PER_RANK, NO_LOGNORMAL, 24, 8192,
     LENGTH_LOGNORMAL, 4096, 65536},
    {"heavy-48", SOURCE_SHAPE, 48 * NON_POWER_SAMPLES_PER_RANK, NO_LOGNORMAL, 48, 8192,
     LENGTH_LOGNORMAL, 4096, 65536},
    {"heavy-96", SOURCE_SHAPE, 96 * NON_POWER_SAMPLES_PER_RANK, NO_LOGNORMAL, 96, 8192,
     LENGTH_LOGNORMAL, 4096, 65536},
    {"heavy-192", SOURCE_SHAPE, 192 * NON_POWER_SAMPLES_PER_RANK, NO_LOGNORMAL, 192, 8192,
     LENGTH_LOGNORMAL, 4096, 65536},
};

/* The plan-time targets (issue 28): every shape at 8,192 samples on 1,024 ranks, M = 4096
   (T 4096, Pareto 3072, bimodal 2048, clipped at 131072), under E = 1, 8 and D, both models;
   and the sweep's 10^6 x 32 lognormal under E = 1, 8 and 32, default model. */
#define TARGET_SAMPLES 8192
#define TARGET_RANKS 1024
#define TARGET_LONGEST 131072
#define TARGET_SECONDS 0.010
#define TARGET_LARGE_SECONDS 2.0
static const workload target_workloads[] = {
    {"narrow", SOURCE_SHAPE, TARGET_SAMPLES, NO_LOGNORMAL, TARGET_RANKS, 4096, LENGTH_NARROW,
     4096, TARGET_LONGEST},
    {"lognormal", SOURCE_SHAPE, TARGET_SAMPLES, NO_LOGNORMAL, TARGET_RANKS, 4096,
     LENGTH_LOGNORMAL, 4096, TARGET_LONGEST},
    {"pareto", SOURCE_SHAPE, TARGET_SAMPLES, NO_LOGNORMAL, TARGET_RANKS, 4096, LENGTH_PARETO,
     3072, TARGET_LONGEST},
    {"bimodal", SOURCE_SHAPE, TARGET_SAMPLES, NO_LOGNORMAL, TARGET_RANKS, 4096, LENGTH_BIMODAL,
     2048, TARGET_LONGEST},
    {"mixture", SOURCE_SHAPE, TARGET_SAMPLES, NO_LOGNORMAL, TARGET_RANKS, 4096, LENGTH_MIXTURE,
     4096, TARGET_LONGEST},
};
static const int32_t target_syncs[3] = {1, 8, 0};
static const int32_t large_target_syncs[3] = {1, 8, 32};

/* The scaling sweep: lognormal (4096, 1.1, 1024, 8192), M = 4096; samples per rank 8 to 30,000
   at D = 32, and the heavy tail at 8192 x 1024. */
#define SWEEP_LOGNORMAL {4096, 1.1, 1024, 8192}
static const workload sweep[] = {
    {"spr-8", SOURCE_LOGNORMAL, 256, SWEEP_LOGNORMAL, 32, 4096, 0, 0, 0},
    {"spr-100", SOURCE_LOGNORMAL, 3200, SWEEP_LOGNORMAL, 32, 4096, 0, 0, 0},
    {"spr-1000", SOURCE_LOGNORMAL, 32000, SWEEP_LOGNORMAL, 32, 4096, 0, 0, 0},
    {"1e5x32", SOURCE_LOGNORMAL, 100000, SWEEP_LOGNORMAL, 32, 4096, 0, 0, 0},
    {"spr-30000", SOURCE_LOGNORMAL, 960000, SWEEP_LOGNORMAL, 32, 4096, 0, 0, 0},
    {"1e6x32", SOURCE_LOGNORMAL, 1000000, SWEEP_LOGNORMAL, 32, 4096, 0, 0, 0},
    {"heavy-8192x1024", SOURCE_LOGNORMAL, 8192, {4096, 1.4, 256, 65536}, 1024, 4096, 0, 0, 0},
    {"sweep-32768x4096", SOURCE_LOGNORMAL, 32768, SWEEP_LOGNORMAL, 4096, 4096, 0, 0, 0},
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
    dcp_rng rng;
    if (w->source == SOURCE_LOGNORMAL) {
        if (dcp_lengths_lognormal(&w->lognormal, bench_seed, lengths, w->count, &error) != DCP_OK) {
            fprintf(stderr, "%s: %s\n", w->name, error.message);
            return 0;
        }
        return 1;
    }
    dcp_rng_seed(&rng, bench_seed);
    length_batch(&rng, w->shape, w->typical, w->longest, lengths, w->count);
    return 1;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Plans `repeat` times under sync ranks E (median wall time), validates and simulates the
   last plan; *plan_out keeps it when not NULL. */
static int run_sized(const workload *w, const dcp_cost_model *cost, dcp_strategy strategy,
                     int32_t sync, dcp_cp_sizes sizes, const int64_t *lengths, int repeat,
                     dcp_plan_stats *stats, double *plan_seconds, dcp_plan **plan_out);

static int run_strategy(const workload *w, const dcp_cost_model *cost, dcp_strategy strategy,
                        int32_t sync, const int64_t *lengths, int repeat, dcp_plan_stats *stats,
                        double *plan_seconds, dcp_plan **plan_out)
{
    return run_sized(w, cost, strategy, sync, DCP_CP_SIZES_POW2, lengths, repeat, stats,
                     plan_seconds, plan_out);
}

/* run_strategy with the CP sizes of `sizes`. */
static int run_sized(const workload *w, const dcp_cost_model *cost, dcp_strategy strategy,
                     int32_t sync, dcp_cp_sizes sizes, const int64_t *lengths, int repeat,
                     dcp_plan_stats *stats, double *plan_seconds, dcp_plan **plan_out)
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
    config.cp_sizes = sizes;
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

/* The plan-time targets: one table row per workload, model and E: median plan time of
   `repeat` plans, the efficiency under that E, and whether the time meets `target`. Returns
   the rows that miss it (failures of the run itself count as misses too). */
static int target_rows(const workload *w, const dcp_cost_model *cost, const char *model,
                       const int32_t *syncs, int sync_count, int repeat, double target,
                       const int64_t *lengths)
{
    int misses = 0, e;
    for (e = 0; e < sync_count; e++) {
        dcp_plan_stats stats;
        double seconds;
        int32_t sync = syncs[e] ? syncs[e] : w->ranks;
        if (!run_strategy(w, cost, DCP_STRATEGY_DYNAMIC, sync, lengths, repeat, &stats, &seconds,
                          NULL)) {
            misses++;
            continue;
        }
        printf("%-10s %8d %5d %-8s %5d | %9.3f %6.3f %4d | %s\n", w->name, (int)w->count,
               (int)w->ranks, model, (int)sync, seconds * 1e3, stats.efficiency,
               (int)stats.num_microbatches, seconds <= target ? "ok" : "MISSED");
        misses += seconds > target;
    }
    return misses;
}

/* One target row, planned once (for instruction counts). */
static int one_target(const char *shape, const char *model, const char *sync)
{
    size_t w;
    int m;
    for (w = 0; w < sizeof target_workloads / sizeof target_workloads[0]; w++) {
        const workload *wl = &target_workloads[w];
        int32_t e = (int32_t)atoi(sync);
        int64_t *lengths;
        int misses;
        if (strcmp(wl->name, shape) != 0) continue;
        for (m = 0; m < 2 && strcmp(model_names[m], model) != 0; m++) {}
        if (m == 2 || e < 0 || e > wl->ranks) break;
        lengths = (int64_t *)malloc((size_t)wl->count * sizeof *lengths);
        if (!lengths || !make_lengths(wl, lengths)) return 1;
        misses = target_rows(wl, &models[m], model_names[m], &e, 1, 1, TARGET_SECONDS, lengths);
        free(lengths);
        return misses > 0;
    }
    fprintf(stderr, "--target: SHAPE narrow|lognormal|pareto|bimodal|mixture, MODEL default|"
                    "L2-only, E 0 (D) or a power of two up to %d; got %s %s %s\n",
            TARGET_RANKS, shape, model, sync);
    return 2;
}

static int targets_table(int quick, int repeat)
{
    static const workload large = {"lognormal", SOURCE_LOGNORMAL, 1000000, SWEEP_LOGNORMAL, 32,
                                   4096, 0, 0, 0};
    int misses = 0, m;
    size_t w;
    int64_t *lengths;
    printf("\nplan-time targets: <= %.0f ms at %d x %d (every shape, E = 1, 8, D, both models), "
           "<= %.0f s at 10^6 x 32 (E = 1, 8, 32, default model); median of %d plans\n",
           TARGET_SECONDS * 1e3, TARGET_SAMPLES, TARGET_RANKS, TARGET_LARGE_SECONDS, repeat);
    printf("%-10s %8s %5s %-8s %5s | %9s %6s %4s | target\n", "shape", "N", "D", "model", "E",
           "plan-ms", "eff", "K");
    for (w = 0; w < sizeof target_workloads / sizeof target_workloads[0]; w++) {
        lengths = (int64_t *)malloc((size_t)target_workloads[w].count * sizeof *lengths);
        if (!lengths || !make_lengths(&target_workloads[w], lengths)) return misses + 1;
        for (m = 0; m < 2; m++)
            misses += target_rows(&target_workloads[w], &models[m], model_names[m], target_syncs,
                                  3, repeat, TARGET_SECONDS, lengths);
        free(lengths);
    }
    if (!quick) {
        lengths = (int64_t *)malloc((size_t)large.count * sizeof *lengths);
        if (!lengths || !make_lengths(&large, lengths)) return misses + 1;
        misses += target_rows(&large, &models[0], model_names[0], large_target_syncs, 3, repeat,
                              TARGET_LARGE_SECONDS, lengths);
        free(lengths);
    }
    printf("%d rows missed their target\n", misses);
    return 0; /* a miss is a finding of the bench, not a failure of the run */
}

/* The lengths Megatron's scheduler is compared on, for other planners to run on the same
   batches (see Usage): the workload table's and the pools that are not a power of two. */
static int dump_list(FILE *index, const char *dir, const workload *list, size_t count)
{
    char path[4096];
    size_t w;
    for (w = 0; w < count; w++) {
        const workload *wl = &list[w];
        int64_t *lengths = (int64_t *)malloc((size_t)wl->count * sizeof *lengths);
        FILE *out;
        int32_t i;
        if (!lengths || !make_lengths(wl, lengths)) {
            free(lengths);
            return 1;
        }
        snprintf(path, sizeof path, "%s/%s.txt", dir, wl->name);
        if (!(out = fopen(path, "w"))) {
            perror(path);
            free(lengths);
            return 1;
        }
        for (i = 0; i < wl->count; i++) fprintf(out, "%lld\n", (long long)lengths[i]);
        fclose(out);
        fprintf(index, "%s %d %d %lld %s.txt\n", wl->name, (int)wl->count, (int)wl->ranks,
                (long long)wl->max_tokens_per_rank, wl->name);
        free(lengths);
    }
    return 0;
}

static int dump_lengths(const char *dir)
{
    char path[4096];
    FILE *index;
    int failed;
    snprintf(path, sizeof path, "%s/workloads.txt", dir);
    if (!(index = fopen(path, "w"))) {
        perror(path);
        return 1;
    }
    failed = dump_list(index, dir, workloads, sizeof workloads / sizeof workloads[0]) ||
             dump_list(index, dir, non_power_workloads,
                       sizeof non_power_workloads / sizeof non_power_workloads[0]);
    fclose(index);
    return failed;
}

/* ---- Megatron-LM's plans: bench/megatron_baseline.py writes DIR/NAME.megatron.txt, one line
   per microbatch, its groups separated by ';', each `cp:id,id,...`; --megatron evaluates them
   and ours under E = D with dcp.h's simulator. A group of a size that is not a power of two
   (Megatron's full-pool fallback on a pool that is not one) cannot be written as a dcp plan;
   such a plan is evaluated by this file's barrier sum (per microbatch the slowest group, the
   model's per-rank time with a sample padded to 2 cp on cp > 1 ranks), which is checked
   against dcp_plan_simulate on every plan both can evaluate. */

#define MEGATRON_SUM_AGREEMENT 1e-9

typedef struct megatron_plan {
    int32_t microbatches, groups;
    int32_t *offsets;    /* [microbatches + 1]: the groups of each microbatch */
    int32_t *cp, *first; /* [groups], [groups + 1]: each group's samples in members */
    int32_t *members;    /* [samples] */
} megatron_plan;

static char *read_text(const char *path)
{
    FILE *in = fopen(path, "rb");
    long size;
    char *text = NULL;
    if (!in) {
        perror(path);
        return NULL;
    }
    if (fseek(in, 0, SEEK_END) == 0 && (size = ftell(in)) >= 0 && fseek(in, 0, SEEK_SET) == 0 &&
        (text = (char *)malloc((size_t)size + 1)) != NULL) {
        size_t got = fread(text, 1, (size_t)size, in);
        text[got] = '\0';
    }
    fclose(in);
    return text;
}

/* Parses a plan of `samples` samples; every sample must appear once. 0 on a malformed file. */
static int megatron_parse(const char *text, int32_t samples, megatron_plan *plan)
{
    const char *at = text;
    int32_t placed = 0, capacity = samples;
    unsigned char *seen = (unsigned char *)calloc((size_t)samples, 1);
    plan->microbatches = plan->groups = 0;
    plan->cp = (int32_t *)malloc((size_t)capacity * sizeof(int32_t));
    plan->first = (int32_t *)malloc(((size_t)capacity + 1) * sizeof(int32_t));
    plan->members = (int32_t *)malloc((size_t)samples * sizeof(int32_t));
    /* a microbatch holds at least one sample */
    plan->offsets = (int32_t *)malloc(((size_t)samples + 1) * sizeof(int32_t));
    if (!seen || !plan->cp || !plan->first || !plan->members || !plan->offsets) goto fail;
    plan->offsets[0] = 0;
    while (*at) {
        if (*at == '\n') { /* a microbatch ends */
            if (plan->microbatches == samples) goto fail;
            plan->offsets[++plan->microbatches] = plan->groups;
            at++;
            continue;
        }
        if (*at == ';') {
            at++;
            continue;
        }
        if (plan->groups == capacity) goto fail; /* a group holds at least one sample */
        plan->cp[plan->groups] = (int32_t)strtol(at, (char **)&at, 10);
        plan->first[plan->groups] = placed;
        if (*at++ != ':') goto fail;
        for (;;) {
            long id = strtol(at, (char **)&at, 10);
            if (id < 0 || id >= samples || seen[id]) goto fail;
            seen[id] = 1;
            plan->members[placed++] = (int32_t)id;
            if (*at != ',') break;
            at++;
        }
        plan->groups++;
    }
    if (plan->offsets[plan->microbatches] != plan->groups) /* the last line had no newline */
        plan->offsets[++plan->microbatches] = plan->groups;
    plan->first[plan->groups] = placed;
    free(seen);
    return placed == samples && plan->microbatches > 0;
fail:
    free(seen);
    return 0;
}

static void megatron_free(megatron_plan *plan)
{
    free(plan->offsets);
    free(plan->cp);
    free(plan->first);
    free(plan->members);
}

/* Per microbatch the slowest group, summed (see above). */
static double megatron_barrier_sum(const megatron_plan *plan, const int64_t *lengths,
                                   const dcp_cost_model *cost)
{
    double total = 0.0;
    int32_t k, g, i;
    for (k = 0; k < plan->microbatches; k++) {
        double slowest = 0.0;
        for (g = plan->offsets[k]; g < plan->offsets[k + 1]; g++) {
            int32_t cp = plan->cp[g];
            double t = dcp_cost_ring_seconds(cost, cp);
            for (i = plan->first[g]; i < plan->first[g + 1]; i++) {
                int64_t length = lengths[plan->members[i]], multiple = cp > 1 ? 2 * cp : 1;
                int64_t padded = (length + multiple - 1) / multiple * multiple;
                t += dcp_cost_sample_seconds(cost, length, padded, cp);
            }
            slowest = t > slowest ? t : slowest;
        }
        total += slowest;
    }
    return total;
}

/* The plan as a dcp_plan (arrays malloc'ed here; free with megatron_dcp_free), groups of each
   microbatch laid out widest first from rank 0 (aligned: each start is a sum of larger or
   equal powers of two); 0 when a group's size is not a power of two up to max_cp. */
static int megatron_as_dcp(const megatron_plan *plan, const dcp_config *resolved,
                           const int64_t *lengths, int32_t samples, dcp_plan *out)
{
    int32_t k, g, i, at = 0, made = 0, cp;
    memset(out, 0, sizeof *out);
    for (g = 0; g < plan->groups; g++)
        if (!dcp_is_pow2(plan->cp[g]) || plan->cp[g] > resolved->max_cp) return 0;
    out->config = *resolved;
    out->num_samples = samples;
    out->num_microbatches = plan->microbatches;
    out->num_groups = plan->groups;
    out->sample_lengths = (int64_t *)malloc((size_t)samples * sizeof(int64_t));
    out->microbatch_offsets = (int32_t *)malloc(((size_t)plan->microbatches + 1) * sizeof(int32_t));
    out->groups = (dcp_group *)malloc((size_t)plan->groups * sizeof(dcp_group));
    out->group_samples = (int32_t *)malloc((size_t)samples * sizeof(int32_t));
    if (!out->sample_lengths || !out->microbatch_offsets || !out->groups || !out->group_samples)
        return 0;
    memcpy(out->sample_lengths, lengths, (size_t)samples * sizeof(int64_t));
    for (k = 0; k < plan->microbatches; k++) {
        int32_t first_rank = 0;
        out->microbatch_offsets[k] = made;
        for (cp = resolved->max_cp; cp >= 1; cp /= 2) /* widest first */
            for (g = plan->offsets[k]; g < plan->offsets[k + 1]; g++) {
                if (plan->cp[g] != cp) continue;
                out->groups[made].first_rank = first_rank;
                out->groups[made].cp = cp;
                out->groups[made].sample_offset = at;
                out->groups[made].sample_count = plan->first[g + 1] - plan->first[g];
                for (i = plan->first[g]; i < plan->first[g + 1]; i++)
                    out->group_samples[at++] = plan->members[i];
                first_rank += cp;
                made++;
            }
    }
    out->microbatch_offsets[plan->microbatches] = made;
    return 1;
}

static void megatron_dcp_free(dcp_plan *plan)
{
    free(plan->sample_lengths);
    free(plan->microbatch_offsets);
    free(plan->groups);
    free(plan->group_samples);
}

/* Megatron's E = D step of the plan under `cost`: dcp_plan_simulate where the plan is a dcp
   plan (checked against the barrier sum), else the barrier sum. -1 on an error. */
static double megatron_step(const megatron_plan *plan, const dcp_config *config,
                            const int64_t *lengths, int32_t samples, const char **source)
{
    dcp_config resolved;
    dcp_plan as_dcp;
    dcp_plan_stats stats;
    dcp_error error;
    double sum = megatron_barrier_sum(plan, lengths, &config->cost), step = sum;
    *source = "sum";
    if (dcp_config_resolve(config, &resolved, &error) != DCP_OK) return -1.0;
    if (megatron_as_dcp(plan, &resolved, lengths, samples, &as_dcp)) {
        if (dcp_plan_simulate(&as_dcp, NULL, &stats, &error) != DCP_OK) {
            fprintf(stderr, "Megatron's plan: %s\n", error.message);
            step = -1.0;
        } else if (fabs(stats.barrier_seconds - sum) > MEGATRON_SUM_AGREEMENT * sum) {
            fprintf(stderr, "dcp_plan_simulate %.17g != barrier sum %.17g\n",
                    stats.barrier_seconds, sum);
            step = -1.0;
        } else {
            step = stats.barrier_seconds;
            *source = "dcp";
        }
    }
    megatron_dcp_free(&as_dcp);
    return step;
}

/* One row per model for a workload of the directory; returns the rows where ours is slower,
   or that could not be evaluated. */
static int megatron_rows(const char *dir, const char *name, int32_t ranks, int64_t max_tokens,
                         const char *file, double *log_sum, int *rows)
{
    megatron_plan plan;
    char path[4096];
    int64_t *lengths = NULL;
    int32_t count = 0;
    int m, slower = 0;
    char *text;
    dcp_error error;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (dcp_lengths_read_file(path, NULL, &lengths, &count, &error) != DCP_OK) {
        fprintf(stderr, "%s\n", error.message);
        return 2;
    }
    snprintf(path, sizeof path, "%s/%s.megatron.txt", dir, name);
    memset(&plan, 0, sizeof plan);
    if (!(text = read_text(path)) || !megatron_parse(text, count, &plan)) {
        fprintf(stderr, "%s: not a plan that places each of %d samples once\n", path, (int)count);
        free(text);
        megatron_free(&plan);
        dcp_free(NULL, lengths);
        return 2;
    }
    free(text);
    for (m = 0; m < 2; m++) {
        dcp_config config = dcp_config_init();
        dcp_plan *ours = NULL;
        dcp_plan_stats stats;
        const char *source = "";
        double meg;
        config.ranks = ranks;
        config.max_tokens_per_rank = max_tokens;
        config.cost = models[m];
        meg = megatron_step(&plan, &config, lengths, count, &source);
        if (meg < 0.0 || dcp_plan_create(&config, lengths, count, &ours, &error) != DCP_OK ||
            dcp_plan_simulate(ours, NULL, &stats, &error) != DCP_OK) {
            fprintf(stderr, "%s %s: %s\n", name, model_names[m], meg < 0.0 ? "" : error.message);
            dcp_plan_destroy(ours);
            slower++;
            continue;
        }
        printf("%-17s %-8s %5d %5d | %9.3f %9.3f | %7.3fx | %6.3f %6.3f | %4d %4d | %s%s\n", name,
               model_names[m], (int)count, (int)ranks, meg * (m == 0 ? 1e3 : 1e-9),
               stats.barrier_seconds * (m == 0 ? 1e3 : 1e-9), meg / stats.barrier_seconds,
               stats.lower_bound_seconds / meg, stats.efficiency, (int)plan.microbatches,
               (int)stats.num_microbatches, source,
               stats.barrier_seconds > meg ? "  SLOWER" : "");
        slower += stats.barrier_seconds > meg;
        *log_sum += log(meg / stats.barrier_seconds);
        (*rows)++;
        dcp_plan_destroy(ours);
    }
    megatron_free(&plan);
    dcp_free(NULL, lengths);
    return slower;
}

/* Every workload of DIR/workloads.txt with its Megatron plan, both models, under E = D. */
static int megatron_table(const char *dir)
{
    char path[4096], name[256], file[256];
    FILE *index;
    int count = 0, ranks = 0, rows = 0, slower = 0;
    long long max_tokens = 0;
    double log_sum = 0.0;
    snprintf(path, sizeof path, "%s/workloads.txt", dir);
    if (!(index = fopen(path, "r"))) {
        perror(path);
        return 1;
    }
    printf("E = D (barrier per microbatch): Megatron-LM's next_hdp_group_packing_aware "
           "(bench/megatron_baseline.py) against dcp's planner, both evaluated by "
           "dcp_plan_simulate\n");
    printf("%-17s %-8s %5s %5s | %9s %9s | %8s | %6s %6s | %4s %4s | eval\n", "workload",
           "model", "N", "D", "megatron", "dcp", "meg/dcp", "eff-m", "eff-d", "K-m", "K-d");
    while (fscanf(index, "%255s %d %d %lld %255s", name, &count, &ranks, &max_tokens, file) == 5)
        slower += megatron_rows(dir, name, ranks, (int64_t)max_tokens, file, &log_sum, &rows);
    fclose(index);
    printf("geomean megatron / dcp step: %.3fx over %d rows; rows where dcp is slower (or that "
           "failed): %d\n",
           rows ? exp(log_sum / rows) : 0.0, rows, slower);
    printf("steps: ms (default model), 1e9 x L^2 units (L2-only); eff-m, eff-d = our barrier lower "
           "bound / step; K = microbatches; eval: dcp = dcp_plan_simulate, sum = the barrier sum "
           "(a group size dcp plans cannot hold)\n");
    return slower ? 1 : 0;
}

/* ------------------------------------------------------------------------------ --sizes */
/* The CP-size sets against each other (issue 37): every workload of the tables and of the
   non-power-of-two pools, both models, E = 1 and E = D, planned with the powers of two,
   Megatron's sizes and every size; the steps and what the other sets buy (pow2 step / the
   set's step: above 1 when the set is faster). Efficiencies are against each set's own bound
   (every size's is flat: all ranks reachable), so the steps are what compares. */
static int sizes_table(void)
{
    static const dcp_cp_sizes sets[3] = {DCP_CP_SIZES_POW2, DCP_CP_SIZES_MEGATRON,
                                         DCP_CP_SIZES_ANY};
    static const int32_t syncs[2] = {1, 0};
    int failures = 0, m, e, k, part;
    double log_gain[2][2] = {{0, 0}, {0, 0}}; /* [pool kind][set - 1] */
    int rows[2] = {0, 0};
    printf("\nCP sizes: steps with the powers of two, Megatron's sizes and every size; gain = "
           "pow2 step / the set's\n");
    printf("%-17s %-8s %5s %5s %2s | %10s %10s %10s | %8s %8s | %6s\n", "workload", "model", "N",
           "D", "E", "pow2", "megatron", "any", "gain-meg", "gain-any", "eff-any");
    for (part = 0; part < 2; part++) {
        const workload *list = part ? non_power_workloads : workloads;
        size_t n = part ? sizeof non_power_workloads / sizeof non_power_workloads[0]
                        : sizeof workloads / sizeof workloads[0], w;
        for (w = 0; w < n; w++) {
            const workload *wl = &list[w];
            int64_t *lengths = (int64_t *)malloc((size_t)wl->count * sizeof *lengths);
            const int power = (wl->ranks & (wl->ranks - 1)) == 0;
            if (!lengths || !make_lengths(wl, lengths)) return failures + 1;
            for (m = 0; m < 2; m++)
                for (e = 0; e < 2; e++) {
                    dcp_plan_stats st[3];
                    double seconds, unit = m == 0 ? 1e3 : 1e-9;
                    int ok = 1;
                    for (k = 0; k < 3; k++)
                        ok &= run_sized(wl, &models[m], DCP_STRATEGY_DYNAMIC, syncs[e], sets[k],
                                        lengths, 1, &st[k], &seconds, NULL);
                    if (!ok) {
                        failures++;
                        continue;
                    }
                    printf("%-17s %-8s %5d %5d %2s | %10.3f %10.3f %10.3f | %7.4fx %7.4fx | "
                           "%6.4f\n",
                           wl->name, model_names[m], (int)wl->count, (int)wl->ranks,
                           e ? "D" : "1", st[0].step_seconds * unit, st[1].step_seconds * unit,
                           st[2].step_seconds * unit, st[0].step_seconds / st[1].step_seconds,
                           st[0].step_seconds / st[2].step_seconds, st[2].efficiency);
                    for (k = 1; k < 3; k++)
                        log_gain[!power][k - 1] += log(st[0].step_seconds / st[k].step_seconds);
                    rows[!power]++;
                }
            free(lengths);
        }
    }
    for (k = 0; k < 2; k++)
        printf("geomean gain on %s pools (%d rows): megatron %.4fx, any %.4fx\n",
               k ? "non-power-of-two" : "power-of-two", rows[k],
               rows[k] ? exp(log_gain[k][0] / rows[k]) : 1.0,
               rows[k] ? exp(log_gain[k][1] / rows[k]) : 1.0);
    printf("steps: ms (default model), 1e9 x L^2 units (L2-only); eff-any = every size's bound "
           "/ its step\n");
    return failures;
}

/* ------------------------------------------------------------------------------ --profile */
#define PROFILE_MAX_PHASES 48
#define PROFILE_MAX_DEPTH 8
#define PROFILE_MAX_RUNS 64
#define PROFILE_NAME_CAPACITY 192

typedef struct profile_state {
    int on, run, depth, phases;
    const char *stack[PROFILE_MAX_DEPTH];
    double start[PROFILE_MAX_DEPTH];
    char names[PROFILE_MAX_PHASES][PROFILE_NAME_CAPACITY];
    double seconds[PROFILE_MAX_PHASES][PROFILE_MAX_RUNS]; /* per phase and run */
} profile_state;

static profile_state profile;

/* The phase's index by its path ("plan for E = D > fills"), added on first sight. */
static int profile_phase(void)
{
    char path[PROFILE_NAME_CAPACITY] = "";
    int d, i;
    for (d = 0; d < profile.depth; d++) {
        size_t used = strlen(path);
        snprintf(path + used, sizeof path - used, "%s%s", d ? " > " : "", profile.stack[d]);
    }
    for (i = 0; i < profile.phases; i++)
        if (strcmp(profile.names[i], path) == 0) return i;
    if (profile.phases == PROFILE_MAX_PHASES) return -1;
    snprintf(profile.names[profile.phases], PROFILE_NAME_CAPACITY, "%s", path);
    return profile.phases++;
}

static void profile_trace(const char *phase, int begin)
{
    int index;
    if (!profile.on) return;
    if (begin) {
        if (profile.depth < PROFILE_MAX_DEPTH) {
            profile.stack[profile.depth] = phase;
            profile.start[profile.depth] = now_seconds();
        }
        profile.depth++;
        return;
    }
    if (profile.depth > PROFILE_MAX_DEPTH) {
        profile.depth--;
        return;
    }
    index = profile_phase();
    if (index >= 0)
        profile.seconds[index][profile.run] += now_seconds() - profile.start[profile.depth - 1];
    profile.depth--;
}

static double median_of(double *values, int count)
{
    qsort(values, (size_t)count, sizeof *values, compare_doubles);
    return values[count / 2];
}

static int profile_workload(const char *name, int repeat)
{
    static int64_t lengths[1000000];
    const workload *w = NULL;
    double total[PROFILE_MAX_RUNS], whole;
    dcp_plan_stats stats;
    size_t i;
    int run, p;
    for (i = 0; i < sizeof sweep / sizeof sweep[0]; i++)
        if (strcmp(sweep[i].name, name) == 0) w = &sweep[i];
    if (!w || !make_lengths(w, lengths)) {
        fprintf(stderr, "plan_bench: --profile: no sweep workload %s\n", name);
        return 2;
    }
    if (repeat > PROFILE_MAX_RUNS) repeat = PROFILE_MAX_RUNS;
    memset(&profile, 0, sizeof profile);
    for (run = 0; run < repeat; run++) {
        dcp_plan *plan = NULL;
        profile.run = run;
        profile.on = 1;
        if (!run_strategy(w, NULL, DCP_STRATEGY_DYNAMIC, 0, lengths, 1, &stats, &total[run],
                          &plan))
            return 1;
        profile.on = 0;
        dcp_plan_destroy(plan);
    }
    whole = median_of(total, repeat);
    printf("%s (%d samples, %d ranks, default model and E): median of %d plans %.2f ms, "
           "efficiency %.4f\n", w->name, (int)w->count, (int)w->ranks, repeat, whole * 1e3,
           stats.efficiency);
    printf("%-60s %9s %7s\n", "phase (nested: by path)", "median-ms", "share");
    for (p = 0; p < profile.phases; p++) {
        double ms = median_of(profile.seconds[p], repeat) * 1e3;
        printf("%-60s %9.3f %6.1f%%\n", profile.names[p], ms, 100.0 * ms / (whole * 1e3));
    }
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
        else if (strcmp(argv[i], "--megatron") == 0 && i + 1 < argc)
            return megatron_table(argv[++i]);
        else if (strcmp(argv[i], "--target") == 0 && i + 3 < argc)
            return one_target(argv[i + 1], argv[i + 2], argv[i + 3]);
        else if (strcmp(argv[i], "--sizes") == 0)
            return sizes_table() ? 1 : 0;
        else if (strcmp(argv[i], "--profile") == 0)
            return profile_workload(i + 1 < argc ? argv[i + 1] : "heavy-8192x1024", repeat);
        else {
            fprintf(stderr, "usage: %s [--quick] [--repeat N] [--dump-lengths DIR] "
                    "[--megatron DIR] [--target SHAPE MODEL E] [--profile [WORKLOAD]] "
                    "[--sizes]\n",
                    argv[0]);
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
    failures += targets_table(quick, repeat);
    failures += scaling_table(quick);
    printf("\nstep times: ms (default model), 1e9 x L^2 units (L2-only model); eff = lower bound "
           "/ step under the same E; vs-stat, vs-grdy = baseline step / dynamic step; plan-ms = "
           "median of %d dynamic plans\n", repeat);
    return failures ? 1 : 0;
}
