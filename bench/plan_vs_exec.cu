/* plan_vs_exec - does a plan the cost model calls faster run faster? For a few batches (the
   plan_bench workloads that fit one GPU: lognormal ones and the Pareto tail), plans with the
   given cost model (paste bench/calibrate's flags) under the dynamic planner and both
   baselines, then executes every group of every plan on this GPU: one layer's attention
   forward + backward (cp > 1 on the virtual ring, its ranks one after another) and the linear
   stand-in on each rank's tokens (bench/layer_timer.h, the work bench/calibrate fitted). A
   group's measured per-rank duration is its attention time / cp plus one rank's linear time;
   bench/plan_exec.h turns the durations into per-rank and per-microbatch times under the
   plan's sync model, as dcp_plan_schedule does with the model's durations. Printed per
   workload and strategy: predicted and measured step time, the worst per-rank and
   per-microbatch error, then the predicted and measured gain of dynamic over static and
   greedy and whether the ranking of the three strategies is the same.

   Usage: build/plan_vs_exec [layer options] [--attn-coeff A --linear-coeff B
            --ring-step-cost G] [--sync-ranks E] [--workload NAME] [--max-rows N] [--verbose]
            [--dry-run]
   --sync-ranks: the plans' E (default 1: a dense model's DAG; 0: the whole pool). --max-rows
   skips workloads whose widest group stores more rows (default 262144, about 22 GB at the
   default layer). Prints "no CUDA device: skipped" and exits 0 without a GPU. --dry-run runs
   the host path without one: the model's durations stand in for the measured ones
   (tests/test_calibrate_benches.sh). */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "bench_util.h"
#include "layer_timer.h"
#include "plan_exec.h"

#include <math.h>

#define STRATEGIES 3
#define DEFAULT_MAX_ROWS 262144
#define LINEAR_CACHE 4096
static const uint64_t workload_seed = 20261121; /* plan_bench's */

/* plan_bench's pareto-48 source: Pareto(PARETO_ALPHA) from PARETO_MIN, clipped at PARETO_MAX */
#define PARETO_ALPHA 1.2
#define PARETO_MIN 512
#define PARETO_MAX 65536

typedef struct exec_workload {
    const char *name;
    int pareto; /* else lognormal */
    dcp_lognormal lognormal;
    int32_t count, ranks;
    int64_t max_tokens_per_rank;
} exec_workload;

/* plan_bench's workloads whose widest group fits one GPU (max_cp x M rows). */
static const exec_workload workloads[] = {
    {"seed-lognormal", 0, {4096, 1.1, 1024, 8192}, 256, 16, 4096},
    {"megatron-example", 0, {1024, 1.5, 128, 8192}, 256, 32, 2048},
    {"qwen-longtail", 0, {6000, 1.4, 256, 49152}, 512, 32, 3072},
    {"pareto-48", 1, {0, 0, 0, 0}, 768, 48, 8192},
};

static const dcp_strategy strategies[STRATEGIES] = {DCP_STRATEGY_STATIC, DCP_STRATEGY_GREEDY,
                                                    DCP_STRATEGY_DYNAMIC};

static void make_lengths(const exec_workload *w, int64_t *lengths)
{
    dcp_rng rng;
    int32_t i;
    if (!w->pareto) {
        BENCH_DCP(dcp_lengths_lognormal(&w->lognormal, workload_seed, lengths, w->count,
                                        &bench_error_));
        return;
    }
    dcp_rng_seed(&rng, workload_seed);
    for (i = 0; i < w->count; i++) {
        double length = PARETO_MIN * pow(1.0 - dcp_rng_uniform(&rng), -1.0 / PARETO_ALPHA);
        lengths[i] = length > PARETO_MAX ? PARETO_MAX : (int64_t)length;
    }
}

/* Linear-part times by token count: plans repeat the same per-rank token counts. */
typedef struct linear_cache {
    int64_t tokens[LINEAR_CACHE];
    double seconds[LINEAR_CACHE];
    int32_t count;
} linear_cache;

static double cached_linear_seconds(layer_timer *t, linear_cache *cache, int64_t tokens)
{
    int32_t i;
    double seconds;
    for (i = 0; i < cache->count; i++)
        if (cache->tokens[i] == tokens) return cache->seconds[i];
    seconds = layer_timer_linear_seconds(t, tokens);
    if (cache->count < LINEAR_CACHE) {
        cache->tokens[cache->count] = tokens;
        cache->seconds[cache->count++] = seconds;
    }
    return seconds;
}

/* Measured per-rank duration of every group of the plan. */
static void execute_plan(layer_timer *t, linear_cache *cache, const dcp_plan *plan,
                         double *group_seconds)
{
    int64_t *lengths = (int64_t *)malloc((size_t)plan->num_samples * sizeof *lengths);
    int64_t *padded = (int64_t *)malloc((size_t)plan->num_samples * sizeof *padded);
    int32_t g, i;
    if (!lengths || !padded) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    for (g = 0; g < plan->num_groups; g++) {
        const dcp_group *group = &plan->groups[g];
        int64_t stored = 0;
        double attention;
        plan_exec_group_lengths(plan, g, lengths);
        for (i = 0; i < group->sample_count; i++) {
            BENCH_DCP(dcp_padded_length(&plan->config, lengths[i], group->cp, &padded[i],
                                        &bench_error_));
            stored += padded[i];
        }
        attention = layer_timer_attention_seconds(t, lengths, padded, group->sample_count,
                                                  group->cp);
        group_seconds[g] = attention / group->cp +
                           cached_linear_seconds(t, cache, stored / group->cp);
    }
    free(lengths);
    free(padded);
}

/* --dry-run's stand-in for execute_plan: the model's per-rank duration of every group, from
   dcp_cost_group_terms (not from the schedule), so the whole host path runs without a GPU and
   must report no error. */
static void model_durations(const dcp_plan *plan, double *group_seconds)
{
    int64_t *lengths = (int64_t *)malloc((size_t)plan->num_samples * sizeof *lengths);
    int32_t g;
    if (!lengths) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    for (g = 0; g < plan->num_groups; g++) {
        dcp_cost_measurement terms;
        plan_exec_group_lengths(plan, g, lengths);
        BENCH_DCP(dcp_cost_group_terms(&plan->config, lengths, plan->groups[g].sample_count,
                                       plan->groups[g].cp, &terms, &bench_error_));
        group_seconds[g] = dcp_cost_measurement_seconds(&plan->config.cost, &terms);
    }
    free(lengths);
}

/* Predicted and measured times of one plan. */
typedef struct exec_result {
    double predicted, measured;
    double rank_error, microbatch_error; /* worst relative error over ranks, microbatches */
    int32_t groups, microbatches;
} exec_result;

typedef struct exec_arrays {
    double *start, *end, *predicted_seconds, *measured_seconds, *slowest[2];
    plan_exec_times times[2]; /* 0 predicted, 1 measured */
} exec_arrays;

static double *host_doubles(int64_t count)
{
    double *p = (double *)calloc((size_t)(count > 0 ? count : 1), sizeof(double));
    if (!p) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    return p;
}

static void arrays_init(exec_arrays *a, const dcp_plan *plan)
{
    int s;
    a->start = host_doubles(plan->num_groups), a->end = host_doubles(plan->num_groups);
    a->predicted_seconds = host_doubles(plan->num_groups);
    a->measured_seconds = host_doubles(plan->num_groups);
    for (s = 0; s < 2; s++) {
        a->slowest[s] = host_doubles(plan->num_microbatches);
        a->times[s].rank_finish = host_doubles(plan->config.ranks);
        a->times[s].group_start = host_doubles(plan->num_groups);
        a->times[s].group_end = host_doubles(plan->num_groups);
        a->times[s].microbatch_end = host_doubles(plan->num_microbatches);
    }
}

static void arrays_free(exec_arrays *a)
{
    int s;
    free(a->start), free(a->end), free(a->predicted_seconds), free(a->measured_seconds);
    for (s = 0; s < 2; s++) {
        free(a->slowest[s]), free(a->times[s].rank_finish), free(a->times[s].group_start);
        free(a->times[s].group_end), free(a->times[s].microbatch_end);
    }
}

static double worst_relative_error(const double *predicted, const double *measured, int32_t n)
{
    double worst = 0.0;
    int32_t i;
    for (i = 0; i < n; i++)
        if (predicted[i] > 0.0 && fabs(measured[i] / predicted[i] - 1.0) > worst)
            worst = fabs(measured[i] / predicted[i] - 1.0);
    return worst;
}

static void print_details(const dcp_plan *plan, const exec_arrays *a)
{
    int32_t r, k;
    printf("    rank  predicted ms  measured ms\n");
    for (r = 0; r < plan->config.ranks; r++)
        printf("    %4d  %12.3f  %11.3f\n", (int)r, a->times[0].rank_finish[r] * 1e3,
               a->times[1].rank_finish[r] * 1e3);
    printf("    microbatch  slowest group: predicted ms  measured ms\n");
    for (k = 0; k < plan->num_microbatches; k++)
        printf("    %10d  %27.3f  %11.3f\n", (int)k, a->slowest[0][k] * 1e3,
               a->slowest[1][k] * 1e3);
}

static exec_result run_plan(layer_timer *t, linear_cache *cache, const dcp_plan *plan, int verbose)
{
    exec_arrays a;
    exec_result result;
    int32_t g, k, s;
    arrays_init(&a, plan);
    BENCH_DCP(dcp_plan_schedule(plan, NULL, a.start, a.end, &bench_error_));
    for (g = 0; g < plan->num_groups; g++) a.predicted_seconds[g] = a.end[g] - a.start[g];
    if (t) execute_plan(t, cache, plan, a.measured_seconds);
    else model_durations(plan, a.measured_seconds);
    BENCH_DCP(plan_exec_account(plan, a.predicted_seconds, &a.times[0], &bench_error_));
    BENCH_DCP(plan_exec_account(plan, a.measured_seconds, &a.times[1], &bench_error_));
    for (s = 0; s < 2; s++)
        for (k = 0; k < plan->num_microbatches; k++)
            for (g = plan->microbatch_offsets[k]; g < plan->microbatch_offsets[k + 1]; g++) {
                double d = s == 0 ? a.predicted_seconds[g] : a.measured_seconds[g];
                if (d > a.slowest[s][k]) a.slowest[s][k] = d;
            }
    result.predicted = a.times[0].step_seconds;
    result.measured = a.times[1].step_seconds;
    result.rank_error = worst_relative_error(a.times[0].rank_finish, a.times[1].rank_finish,
                                             plan->config.ranks);
    result.microbatch_error =
        worst_relative_error(a.slowest[0], a.slowest[1], plan->num_microbatches);
    result.groups = plan->num_groups, result.microbatches = plan->num_microbatches;
    if (verbose) print_details(plan, &a);
    arrays_free(&a);
    return result;
}

/* "dynamic < greedy < static": the strategies from fastest to slowest by time[]. */
static void ranking(const double *time, char *text, size_t size)
{
    int order[STRATEGIES] = {0, 1, 2}, i, j;
    for (i = 0; i < STRATEGIES; i++)
        for (j = i + 1; j < STRATEGIES; j++)
            if (time[order[j]] < time[order[i]]) {
                int swap = order[i];
                order[i] = order[j], order[j] = swap;
            }
    snprintf(text, size, "%s < %s < %s", dcp_strategy_name(strategies[order[0]]),
             dcp_strategy_name(strategies[order[1]]), dcp_strategy_name(strategies[order[2]]));
}

typedef struct exec_options {
    layer_shape shape;
    dcp_cost_model cost;
    int32_t sync_ranks, max_rows;
    const char *only;
    int verbose, calibrated, dry_run;
} exec_options;

static void run_workload(layer_timer *t, linear_cache *cache, const exec_workload *w,
                         const exec_options *o)
{
    int64_t *lengths = (int64_t *)malloc((size_t)w->count * sizeof *lengths);
    double predicted[STRATEGIES], measured[STRATEGIES];
    char predicted_order[96], measured_order[96];
    int s;
    make_lengths(w, lengths);
    for (s = 0; s < STRATEGIES; s++) {
        dcp_config config = dcp_config_init();
        dcp_plan *plan = NULL;
        exec_result r;
        config.ranks = w->ranks;
        config.max_tokens_per_rank = w->max_tokens_per_rank;
        config.sync_ranks = o->sync_ranks;
        config.cost = o->cost;
        config.strategy = strategies[s];
        BENCH_DCP(dcp_plan_create(&config, lengths, w->count, &plan, &bench_error_));
        r = run_plan(t, cache, plan, o->verbose);
        predicted[s] = r.predicted, measured[s] = r.measured;
        printf("%-17s %-8s %6d %4d | %12.3f %12.3f %+7.2f%% | %9.2f%% %9.2f%%\n", w->name,
               dcp_strategy_name(strategies[s]), (int)r.groups, (int)r.microbatches,
               r.predicted * 1e3, r.measured * 1e3, 100.0 * (r.measured / r.predicted - 1.0),
               100.0 * r.rank_error, 100.0 * r.microbatch_error);
        dcp_plan_destroy(plan);
    }
    ranking(predicted, predicted_order, sizeof predicted_order);
    ranking(measured, measured_order, sizeof measured_order);
    printf("%-17s gain of dynamic: over static predicted %.3fx measured %.3fx; over greedy "
           "predicted %.3fx measured %.3fx\n",
           w->name, predicted[0] / predicted[2], measured[0] / measured[2],
           predicted[1] / predicted[2], measured[1] / measured[2]);
    printf("%-17s ranking predicted %s, measured %s: %s\n", w->name, predicted_order,
           measured_order, strcmp(predicted_order, measured_order) ? "DIFFERENT" : "same");
    free(lengths);
}

static int usage(const char *program)
{
    fprintf(stderr,
            "usage: %s [options]\n%s"
            "  --attn-coeff A --linear-coeff B --ring-step-cost G   the cost model (paste\n"
            "                        build/calibrate's line; default: the library's defaults)\n"
            "  --sync-ranks E        the plans' sync model (default 1; 0: the whole pool)\n"
            "  --workload NAME       only this workload\n"
            "  --max-rows N          skip workloads whose widest group stores more rows\n"
            "                        (default %d)\n"
            "  --verbose             per-rank and per-microbatch tables\n"
            "  --dry-run             no GPU: the model's durations stand in for measured ones\n"
            "                        (the host path end to end; every error must be 0)\n",
            program, layer_usage, DEFAULT_MAX_ROWS);
    return 2;
}

static int parse_cost(const char *flag, const char *text, double *value)
{
    char *end;
    *value = strtod(text, &end);
    if (*end || !(*value >= 0.0)) {
        fprintf(stderr, "%s: expected a coefficient >= 0, got '%s'\n", flag, text);
        return 0;
    }
    return 1;
}

/* The cost model as the planner takes it, and a known workload name: refused before the GPU
   is touched. */
static int check_options(const exec_options *o)
{
    dcp_config config = dcp_config_init(), resolved;
    dcp_error error;
    size_t w;
    config.ranks = 1, config.max_tokens_per_rank = 1, config.cost = o->cost;
    if (dcp_config_resolve(&config, &resolved, &error) != DCP_OK) {
        fprintf(stderr, "%s\n", error.message);
        return 0;
    }
    for (w = 0; o->only && w < sizeof workloads / sizeof workloads[0]; w++)
        if (!strcmp(o->only, workloads[w].name)) return 1;
    if (o->only) fprintf(stderr, "--workload %s: no such workload\n", o->only);
    return !o->only;
}

static int parse_options(int argc, char **argv, exec_options *o)
{
    int a;
    memset(o, 0, sizeof *o);
    o->shape = layer_shape_default();
    o->sync_ranks = 1, o->max_rows = DEFAULT_MAX_ROWS;
    for (a = 1; a < argc; a++) {
        const char *flag = argv[a], *value = a + 1 < argc ? argv[a + 1] : NULL;
        int taken = layer_parse_option(&o->shape, argc, argv, &a), ok = 1;
        if (taken) {
            if (taken < 0) return 0;
            continue;
        }
        if (!strcmp(flag, "--verbose") || !strcmp(flag, "--dry-run")) {
            *(flag[2] == 'v' ? &o->verbose : &o->dry_run) = 1;
            continue;
        }
        if (!value) return 0;
        a++;
        if (!strcmp(flag, "--attn-coeff")) ok = parse_cost(flag, value, &o->cost.attn_coeff);
        else if (!strcmp(flag, "--linear-coeff"))
            ok = parse_cost(flag, value, &o->cost.linear_coeff);
        else if (!strcmp(flag, "--ring-step-cost"))
            ok = parse_cost(flag, value, &o->cost.ring_step_cost);
        else if (!strcmp(flag, "--sync-ranks"))
            ok = !strcmp(value, "0") ? (o->sync_ranks = 0, 1)
                                     : layer_parse_int(flag, value, &o->sync_ranks);
        else if (!strcmp(flag, "--workload")) o->only = value;
        else if (!strcmp(flag, "--max-rows")) ok = layer_parse_int(flag, value, &o->max_rows);
        else return 0;
        if (!ok) return 0;
        if (!strncmp(flag, "--attn", 6) || !strncmp(flag, "--linear", 8) ||
            !strncmp(flag, "--ring", 6))
            o->calibrated = 1;
    }
    return layer_shape_resolve(&o->shape) && check_options(o);
}

/* The widest group a workload's plans can hold: max_cp x M rows. */
static int64_t widest_group(const exec_workload *w)
{
    int64_t cp = 1;
    while (cp * 2 <= w->ranks) cp *= 2;
    return cp * w->max_tokens_per_rank;
}

int main(int argc, char **argv)
{
    static linear_cache cache;
    exec_options o;
    layer_timer timer;
    int64_t capacity = 0, linear_capacity = 0;
    int32_t max_documents = 0;
    size_t w;
    int devices = 0;
    if (!parse_options(argc, argv, &o)) return usage(argv[0]);
    if (!o.dry_run && (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)) {
        printf("no CUDA device: skipped\n");
        return 0;
    }
    if (!o.calibrated) {
        o.cost.attn_coeff = DCP_DEFAULT_ATTN_COEFF;
        o.cost.linear_coeff = DCP_DEFAULT_LINEAR_COEFF;
        o.cost.ring_step_cost = DCP_DEFAULT_RING_STEP_COST;
    }
    if (o.dry_run) printf("dry run: no GPU; measured = the model's durations\n");
    else bench_device_line(), layer_shape_print(&o.shape);
    printf("cost model: attn_coeff %.6g, linear_coeff %.6g, ring_step_cost %.6g%s; sync ranks %d\n",
           o.cost.attn_coeff, o.cost.linear_coeff, o.cost.ring_step_cost,
           o.calibrated ? "" : " (no cost flags: the library's defaults, uncalibrated)",
           (int)o.sync_ranks);
    for (w = 0; w < sizeof workloads / sizeof workloads[0]; w++) {
        if (widest_group(&workloads[w]) > o.max_rows) continue;
        if (widest_group(&workloads[w]) > capacity) capacity = widest_group(&workloads[w]);
        if (workloads[w].max_tokens_per_rank > linear_capacity)
            linear_capacity = workloads[w].max_tokens_per_rank;
        if (workloads[w].count > max_documents) max_documents = workloads[w].count;
    }
    if (capacity == 0) {
        printf("every workload's widest group exceeds --max-rows %d: nothing to run\n",
               (int)o.max_rows);
        return 0;
    }
    if (!o.dry_run) layer_timer_init(&timer, &o.shape, capacity, linear_capacity, max_documents);
    printf("\n%-17s %-8s %6s %4s | %12s %12s %8s | %10s %10s\n", "workload", "strategy", "groups",
           "K", "predicted ms", "measured ms", "error", "rank max", "mb max");
    for (w = 0; w < sizeof workloads / sizeof workloads[0]; w++) {
        const exec_workload *wl = &workloads[w];
        if (o.only && strcmp(o.only, wl->name)) continue;
        if (widest_group(wl) > o.max_rows) {
            printf("%-17s skipped: groups of up to %lld rows exceed --max-rows %d\n", wl->name,
                   (long long)widest_group(wl), (int)o.max_rows);
            continue;
        }
        run_workload(o.dry_run ? NULL : &timer, &cache, wl, &o);
    }
    if (!o.dry_run) layer_timer_destroy(&timer);
    return 0;
}
