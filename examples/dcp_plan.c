/* dcp-plan: plan one global batch with dcp.h and print the plan.

   dcp-plan (--lengths FILE | --lognormal MEAN,SIGMA,MIN,MAX,COUNT [--seed S])
            --ranks D --max-tokens-per-rank M [--min-cp K] [--max-cp K]
            [--microbatch-multiple K] [--strategy dynamic|static|greedy] [--sync-ranks E]
            [--attn-coeff A] [--linear-coeff B] [--ring-step-cost G] [--json] [--svg FILE]
            [--rank R --microbatch K]

   With --rank and --microbatch it prints what that rank receives for that microbatch (its
   group, samples and THD metadata) instead of the plan.

   Build: cc -std=c99 -O2 examples/dcp_plan.c -o dcp-plan -lm   (or `make`, as build/dcp-plan)
   Exit status: 0 on success, 1 when planning fails, 2 on bad usage. Every error is one line on
   stderr. */
#define _POSIX_C_SOURCE 199309L
#define DCP_IMPLEMENTATION
#include "../dcp.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXIT_PLAN_FAILED 1
#define EXIT_USAGE 2
#define DEFAULT_SEED 1
#define SVG_PLOT_WIDTH 1000.0
#define SVG_PLOT_HEIGHT_MAX 640.0
#define SVG_ROW_HEIGHT_MAX 18.0
#define SVG_MARGIN_LEFT 70.0
#define SVG_MARGIN_TOP 46.0
#define SVG_MARGIN_BOTTOM 64.0
#define SVG_TARGET_TICKS 10.0

typedef struct options {
    const char *lengths_path;
    const char *lognormal_spec;
    const char *svg_path;
    uint64_t seed;
    int json;
    int have_ranks, have_max_tokens, have_min_cp, have_max_cp, have_multiple, have_sync;
    int32_t view_rank, view_microbatch; /* -1 when not asked for */
    dcp_config config;
} options;

static void usage(FILE *out)
{
    fputs("usage: dcp-plan (--lengths FILE | --lognormal MEAN,SIGMA,MIN,MAX,COUNT [--seed S])\n"
          "                --ranks D --max-tokens-per-rank M [--min-cp K] [--max-cp K]\n"
          "                [--microbatch-multiple K] [--strategy dynamic|static|greedy]\n"
          "                [--sync-ranks E]\n"
          "                [--attn-coeff A] [--linear-coeff B] [--ring-step-cost G]\n"
          "                [--json] [--svg FILE] [--rank R --microbatch K]\n",
          out);
}

static int fail_usage(const char *format, const char *a, const char *b)
{
    fputs("dcp-plan: ", stderr);
    fprintf(stderr, format, a, b);
    fputc('\n', stderr);
    return EXIT_USAGE;
}

/* Whole-string integer in [lo, hi]; no silent truncation. */
static int parse_int(const char *flag, const char *text, long long lo, long long hi,
                     long long *value)
{
    char *end;
    long long v;
    errno = 0;
    v = strtoll(text, &end, 10);
    if (end == text || *end != '\0' || errno == ERANGE) {
        fprintf(stderr, "dcp-plan: %s expects an integer, got '%s'\n", flag, text);
        return 0;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "dcp-plan: %s must be in [%lld, %lld], got %lld\n", flag, lo, hi, v);
        return 0;
    }
    *value = v;
    return 1;
}

static int parse_double(const char *flag, const char *text, double *value)
{
    char *end;
    double v;
    errno = 0;
    v = strtod(text, &end);
    if (end == text || *end != '\0' || errno == ERANGE || !(v == v) || v > 1e300 || v < -1e300) {
        fprintf(stderr, "dcp-plan: %s expects a finite number, got '%s'\n", flag, text);
        return 0;
    }
    *value = v;
    return 1;
}

static int parse_strategy(const char *text, dcp_strategy *strategy)
{
    if (strcmp(text, "dynamic") == 0) *strategy = DCP_STRATEGY_DYNAMIC;
    else if (strcmp(text, "static") == 0) *strategy = DCP_STRATEGY_STATIC;
    else if (strcmp(text, "greedy") == 0) *strategy = DCP_STRATEGY_GREEDY;
    else {
        fprintf(stderr, "dcp-plan: --strategy must be dynamic, static or greedy, got '%s'\n", text);
        return 0;
    }
    return 1;
}

static int parse_int32(const char *flag, const char *text, long long lo, int32_t *value)
{
    long long v;
    if (!parse_int(flag, text, lo, INT32_MAX, &v)) return 0;
    *value = (int32_t)v;
    return 1;
}

/* Parses one flag with a value; returns EXIT_SUCCESS, or the exit status on error. Range
   checks beyond what the types hold are the library's, so its messages name the problem. */
static int parse_valued_flag(options *o, const char *flag, const char *value)
{
    dcp_config *c = &o->config;
    long long v;
    int ok = 1;
    if (strcmp(flag, "--lengths") == 0)
        o->lengths_path = value;
    else if (strcmp(flag, "--lognormal") == 0)
        o->lognormal_spec = value;
    else if (strcmp(flag, "--svg") == 0)
        o->svg_path = value;
    else if (strcmp(flag, "--seed") == 0) {
        ok = parse_int(flag, value, 0, INT64_MAX, &v);
        o->seed = (uint64_t)v;
    } else if (strcmp(flag, "--ranks") == 0) {
        ok = parse_int32(flag, value, INT32_MIN, &c->ranks);
        o->have_ranks = 1;
    } else if (strcmp(flag, "--max-tokens-per-rank") == 0) {
        ok = parse_int(flag, value, INT64_MIN, INT64_MAX, &v);
        c->max_tokens_per_rank = v;
        o->have_max_tokens = 1;
    } else if (strcmp(flag, "--min-cp") == 0)
        ok = parse_int32(flag, value, INT32_MIN, &c->min_cp);
    else if (strcmp(flag, "--max-cp") == 0)
        ok = parse_int32(flag, value, INT32_MIN, &c->max_cp);
    else if (strcmp(flag, "--microbatch-multiple") == 0)
        ok = parse_int32(flag, value, INT32_MIN, &c->microbatch_multiple);
    else if (strcmp(flag, "--strategy") == 0)
        ok = parse_strategy(value, &c->strategy);
    else if (strcmp(flag, "--sync-ranks") == 0) {
        ok = parse_int32(flag, value, INT32_MIN, &c->sync_ranks);
        o->have_sync = 1;
    }
    else if (strcmp(flag, "--attn-coeff") == 0)
        ok = parse_double(flag, value, &c->cost.attn_coeff);
    else if (strcmp(flag, "--linear-coeff") == 0)
        ok = parse_double(flag, value, &c->cost.linear_coeff);
    else if (strcmp(flag, "--ring-step-cost") == 0)
        ok = parse_double(flag, value, &c->cost.ring_step_cost);
    else if (strcmp(flag, "--rank") == 0)
        ok = parse_int32(flag, value, 0, &o->view_rank);
    else if (strcmp(flag, "--microbatch") == 0)
        ok = parse_int32(flag, value, 0, &o->view_microbatch);
    else
        return fail_usage("unknown option %s%s (see --help)", flag, "");
    return ok ? EXIT_SUCCESS : EXIT_USAGE;
}

/* A zero in these fields would mean "default" to the library; on the command line the user
   typed it, so it is an error. */
static int check_explicit_zeros(const options *o)
{
    const dcp_config *c = &o->config;
    const char *flag = NULL;
    if (c->ranks == 0) flag = "--ranks";
    else if (c->max_tokens_per_rank == 0) flag = "--max-tokens-per-rank";
    else if (o->have_min_cp && c->min_cp == 0) flag = "--min-cp";
    else if (o->have_max_cp && c->max_cp == 0) flag = "--max-cp";
    else if (o->have_multiple && c->microbatch_multiple == 0) flag = "--microbatch-multiple";
    else if (o->have_sync && c->sync_ranks == 0) flag = "--sync-ranks";
    if (!flag) return EXIT_SUCCESS;
    return fail_usage("%s must be >= 1, got 0%s", flag, "");
}

static int parse_options(int argc, char **argv, options *o)
{
    int i, status;
    memset(o, 0, sizeof *o);
    o->seed = DEFAULT_SEED;
    o->view_rank = o->view_microbatch = -1;
    o->config.cost.attn_coeff = DCP_DEFAULT_ATTN_COEFF;
    o->config.cost.linear_coeff = DCP_DEFAULT_LINEAR_COEFF;
    o->config.cost.ring_step_cost = DCP_DEFAULT_RING_STEP_COST;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            exit(EXIT_SUCCESS);
        }
        if (strcmp(argv[i], "--json") == 0) {
            o->json = 1;
            continue;
        }
        if (i + 1 >= argc) return fail_usage("%s needs a value%s", argv[i], "");
        if ((status = parse_valued_flag(o, argv[i], argv[i + 1])) != EXIT_SUCCESS) return status;
        i++;
    }
    if (!o->lengths_path == !o->lognormal_spec)
        return fail_usage("give exactly one of --lengths FILE and --lognormal "
                          "MEAN,SIGMA,MIN,MAX,COUNT%s%s", "", "");
    if (!o->have_ranks) return fail_usage("--ranks D is required%s%s", "", "");
    if (!o->have_max_tokens) return fail_usage("--max-tokens-per-rank M is required%s%s", "", "");
    if ((i = check_explicit_zeros(o)) != EXIT_SUCCESS) return i;
    if ((o->view_rank < 0) != (o->view_microbatch < 0))
        return fail_usage("--rank and --microbatch go together%s%s", "", "");
    if (o->config.cost.attn_coeff == 0.0 && o->config.cost.linear_coeff == 0.0 &&
        o->config.cost.ring_step_cost == 0.0)
        return fail_usage("the cost model cannot be all zero%s%s", "", "");
    return EXIT_SUCCESS;
}

/* MEAN,SIGMA,MIN,MAX,COUNT */
static int lognormal_lengths(const options *o, int64_t **lengths, int32_t *count)
{
    char buffer[256], *fields[5], *cursor;
    double mean, sigma;
    long long min_length, max_length, n;
    dcp_lognormal distribution;
    dcp_error error;
    int i;
    if (strlen(o->lognormal_spec) >= sizeof buffer)
        return fail_usage("--lognormal value is too long%s%s", "", "");
    strcpy(buffer, o->lognormal_spec);
    cursor = buffer;
    for (i = 0; i < 5; i++) {
        fields[i] = cursor;
        cursor = strchr(cursor, ',');
        if (i < 4 && !cursor)
            return fail_usage("--lognormal expects MEAN,SIGMA,MIN,MAX,COUNT, got '%s'%s",
                              o->lognormal_spec, "");
        if (cursor) *cursor++ = '\0';
    }
    if (cursor)
        return fail_usage("--lognormal expects five fields MEAN,SIGMA,MIN,MAX,COUNT, got '%s'%s",
                          o->lognormal_spec, "");
    if (!parse_double("--lognormal MEAN", fields[0], &mean) ||
        !parse_double("--lognormal SIGMA", fields[1], &sigma) ||
        !parse_int("--lognormal MIN", fields[2], INT64_MIN, INT64_MAX, &min_length) ||
        !parse_int("--lognormal MAX", fields[3], INT64_MIN, INT64_MAX, &max_length) ||
        !parse_int("--lognormal COUNT", fields[4], 1, INT32_MAX, &n))
        return EXIT_USAGE;
    distribution.mean = mean;
    distribution.sigma = sigma;
    distribution.min_length = min_length;
    distribution.max_length = max_length;
    *lengths = (int64_t *)malloc((size_t)n * sizeof **lengths);
    if (!*lengths) {
        fprintf(stderr, "dcp-plan: cannot allocate %lld lengths\n", n);
        return EXIT_PLAN_FAILED;
    }
    if (dcp_lengths_lognormal(&distribution, o->seed, *lengths, (int32_t)n, &error) != DCP_OK) {
        fprintf(stderr, "dcp-plan: --lognormal: %s\n", error.message);
        free(*lengths);
        *lengths = NULL;
        return EXIT_USAGE;
    }
    *count = (int32_t)n;
    return EXIT_SUCCESS;
}

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct result {
    dcp_plan *plan;
    dcp_plan_stats stats;
    double plan_seconds;
} result;

static int plan_with(const dcp_config *config, dcp_strategy strategy, const int64_t *lengths,
                     int32_t count, result *r)
{
    dcp_config c = *config;
    dcp_error error;
    double start = now_seconds();
    c.strategy = strategy;
    r->plan = NULL;
    if (dcp_plan_create(&c, lengths, count, &r->plan, &error) != DCP_OK) {
        fprintf(stderr, "dcp-plan: %s\n", error.message);
        return 0;
    }
    r->plan_seconds = now_seconds() - start;
    if (dcp_plan_simulate(r->plan, NULL, &r->stats, &error) != DCP_OK) {
        fprintf(stderr, "dcp-plan: %s\n", error.message);
        dcp_plan_destroy(r->plan);
        r->plan = NULL;
        return 0;
    }
    return 1;
}

static void print_json(const options *o, const result *r)
{
    const dcp_plan *plan = r->plan;
    int32_t k, g, i;
    printf("{\"ranks\":%d,\"max_tokens_per_rank\":%lld,\"strategy\":\"%s\",\"samples\":%d,"
           "\"microbatches\":[",
           (int)plan->config.ranks, (long long)plan->config.max_tokens_per_rank,
           dcp_strategy_name(o->config.strategy), (int)plan->num_samples);
    for (k = 0; k < plan->num_microbatches; k++) {
        printf("%s[", k ? "," : "");
        for (g = plan->microbatch_offsets[k]; g < plan->microbatch_offsets[k + 1]; g++) {
            const dcp_group *group = &plan->groups[g];
            printf("%s{\"first_rank\":%d,\"cp\":%d,\"samples\":[",
                   g > plan->microbatch_offsets[k] ? "," : "", (int)group->first_rank,
                   (int)group->cp);
            for (i = 0; i < group->sample_count; i++)
                printf("%s%d", i ? "," : "", (int)plan->group_samples[group->sample_offset + i]);
            printf("]}");
        }
        printf("]");
    }
    printf("],\"sync_ranks\":%d,\"step_seconds\":%.9g,\"dag_seconds\":%.9g,"
           "\"barrier_seconds\":%.9g,\"lower_bound_seconds\":%.9g,\"efficiency\":%.6f,"
           "\"dag_efficiency\":%.6f,\"barrier_efficiency\":%.6f,\"plan_seconds\":%.6g}\n",
           (int)r->stats.sync_ranks, r->stats.step_seconds, r->stats.dag_seconds,
           r->stats.barrier_seconds, r->stats.lower_bound_seconds, r->stats.efficiency,
           r->stats.dag_lower_bound_seconds / r->stats.dag_seconds,
           r->stats.barrier_lower_bound_seconds / r->stats.barrier_seconds, r->plan_seconds);
}

static void print_summary(const options *o, const result *r, const result *static_plan,
                          const result *greedy_plan)
{
    const dcp_plan *plan = r->plan;
    const dcp_plan_stats *s = &r->stats;
    int level, static_cp = 1;
    printf("dcp-plan: %d samples, %lld valid tokens, %d ranks, max %lld padded tokens per rank, "
           "strategy %s\n",
           (int)plan->num_samples, (long long)s->valid_tokens, (int)plan->config.ranks,
           (long long)plan->config.max_tokens_per_rank, dcp_strategy_name(o->config.strategy));
    printf("  microbatches    %d (%d groups, %d idle rank-microbatches)\n",
           (int)s->num_microbatches, (int)s->num_groups, (int)s->idle_rank_microbatches);
    printf("  cp histogram   ");
    for (level = 0; level < DCP_CP_LEVELS; level++)
        if (s->samples_per_cp_level[level] > 0)
            printf(" cp=%d: %d samples;", 1 << level, (int)s->samples_per_cp_level[level]);
    printf("\n");
    printf("  step time       %.3f ms under sync ranks E = %d (blocks of E ranks in lockstep)\n",
           s->step_seconds * 1e3, (int)s->sync_ranks);
    printf("  E = 1 (DAG)     %.3f ms (a group starts when all its ranks are free), "
           "efficiency %.4f\n",
           s->dag_seconds * 1e3, s->dag_lower_bound_seconds / s->dag_seconds);
    printf("  E = D (barrier) %.3f ms (every microbatch waits for the slowest group), "
           "efficiency %.4f\n",
           s->barrier_seconds * 1e3, s->barrier_lower_bound_seconds / s->barrier_seconds);
    printf("  lower bound     %.3f ms (under E = %d)\n", s->lower_bound_seconds * 1e3,
           (int)s->sync_ranks);
    printf("  efficiency      %.4f (lower bound / step time)\n", s->efficiency);
    for (level = 0; level < DCP_CP_LEVELS; level++)
        if (static_plan->stats.samples_per_cp_level[level] > 0) static_cp = 1 << level;
    printf("  static CP=%-5d %.3f ms, speed-up over static %.3fx\n", static_cp,
           static_plan->stats.step_seconds * 1e3,
           static_plan->stats.step_seconds / s->step_seconds);
    printf("  greedy          %.3f ms, speed-up over greedy %.3fx\n",
           greedy_plan->stats.step_seconds * 1e3,
           greedy_plan->stats.step_seconds / s->step_seconds);
    printf("  plan time       %.3f ms\n", r->plan_seconds * 1e3);
}

static void print_int32_array(const char *key, const int32_t *values, int32_t count)
{
    int32_t i;
    printf("\"%s\":[", key);
    for (i = 0; i < count; i++) printf("%s%d", i ? "," : "", (int)values[i]);
    printf("]");
}

static void print_view_json(const dcp_rank_view *v, const int64_t *positions)
{
    int64_t row;
    printf("{\"rank\":%d,\"microbatch\":%d,\"first_rank\":%d,\"cp\":%d,\"rank_in_group\":%d,"
           "\"idle\":%s,",
           (int)v->rank, (int)v->microbatch, (int)v->first_rank, (int)v->cp,
           (int)v->rank_in_group, v->idle ? "true" : "false");
    print_int32_array("samples", v->samples, v->num_samples);
    printf(",");
    print_int32_array("cu_seqlens", v->cu_seqlens, v->num_samples + 1);
    printf(",");
    print_int32_array("cu_seqlens_padded", v->cu_seqlens_padded, v->num_samples + 1);
    printf(",");
    print_int32_array("local_offsets", v->local_offsets, v->num_samples + 1);
    printf(",\"max_seqlen\":%d,\"local_tokens\":%lld,\"pad_multiple\":%lld,\"positions\":[",
           (int)v->max_seqlen, (long long)v->local_tokens, (long long)v->pad_multiple);
    for (row = 0; row < v->local_tokens; row++)
        printf("%s%lld", row ? "," : "", (long long)positions[row]);
    printf("]}\n");
}

/* Rows grouped into runs of consecutive positions (or of padding) per sample. */
static void print_view_rows(const dcp_rank_view *v, const int32_t *owner, const int64_t *positions)
{
    int64_t row = 0;
    while (row < v->local_tokens) {
        int64_t end = row + 1;
        while (end < v->local_tokens && owner[end] == owner[row] &&
               (positions[row] < 0 ? positions[end] < 0
                                   : positions[end] == positions[end - 1] + 1))
            end++;
        if (positions[row] < 0)
            printf("    rows %lld-%lld: sample %d, padding\n", (long long)row, (long long)end - 1,
                   (int)v->samples[owner[row]]);
        else
            printf("    rows %lld-%lld: sample %d, positions %lld-%lld\n", (long long)row,
                   (long long)end - 1, (int)v->samples[owner[row]], (long long)positions[row],
                   (long long)positions[end - 1]);
        row = end;
    }
}

static void print_view_summary(const dcp_rank_view *v, const int32_t *owner,
                               const int64_t *positions)
{
    int32_t i;
    if (v->idle)
        printf("rank %d, microbatch %d: idle (no group)\n", (int)v->rank, (int)v->microbatch);
    else
        printf("rank %d, microbatch %d: group of ranks %d-%d (cp %d), rank %d in the group\n",
               (int)v->rank, (int)v->microbatch, (int)v->first_rank,
               (int)(v->first_rank + v->cp - 1), (int)v->cp, (int)v->rank_in_group);
    printf("  samples           ");
    for (i = 0; i < v->num_samples; i++) printf(" %d", (int)v->samples[i]);
    printf("\n  cu_seqlens        ");
    for (i = 0; i <= v->num_samples; i++) printf(" %d", (int)v->cu_seqlens[i]);
    printf("\n  cu_seqlens_padded ");
    for (i = 0; i <= v->num_samples; i++) printf(" %d", (int)v->cu_seqlens_padded[i]);
    printf("\n  local_offsets     ");
    for (i = 0; i <= v->num_samples; i++) printf(" %d", (int)v->local_offsets[i]);
    printf("\n  max_seqlen         %d (padded)\n  local_tokens       %lld\n"
           "  pad multiple       %lld\n  local rows:\n",
           (int)v->max_seqlen, (long long)v->local_tokens, (long long)v->pad_multiple);
    print_view_rows(v, owner, positions);
}

/* The THD metadata one rank receives for one microbatch. */
static int print_view(const options *o, const dcp_plan *plan)
{
    dcp_rank_view *view = NULL;
    int64_t *positions;
    int32_t *owner;
    dcp_error error;
    if (dcp_rank_view_create(plan, o->view_rank, o->view_microbatch, &view, &error) != DCP_OK) {
        fprintf(stderr, "dcp-plan: %s\n", error.message);
        return EXIT_USAGE;
    }
    positions = (int64_t *)malloc(((size_t)view->local_tokens + 1) * sizeof *positions);
    owner = (int32_t *)malloc(((size_t)view->local_tokens + 1) * sizeof *owner);
    if (!positions || !owner ||
        dcp_rank_view_positions(view, owner, positions, &error) != DCP_OK) {
        fprintf(stderr, "dcp-plan: %s\n", positions && owner ? error.message : "out of memory");
        free(positions);
        free(owner);
        dcp_rank_view_destroy(view);
        return EXIT_PLAN_FAILED;
    }
    if (o->json)
        print_view_json(view, positions);
    else
        print_view_summary(view, owner, positions);
    free(positions);
    free(owner);
    dcp_rank_view_destroy(view);
    return EXIT_SUCCESS;
}

/* SVG timeline: one row per rank, one box per group and microbatch, coloured by CP size. */
static const char *const cp_colors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
                                        "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
#define CP_COLOR_COUNT ((int)(sizeof cp_colors / sizeof cp_colors[0]))

static double nice_tick(double span)
{
    double raw = span / SVG_TARGET_TICKS, magnitude = pow(10.0, floor(log10(raw)));
    double f = raw / magnitude;
    return (f < 1.5 ? 1.0 : f < 3.5 ? 2.0 : f < 7.5 ? 5.0 : 10.0) * magnitude;
}

static void svg_axes(FILE *f, double step_ms, double x_scale, double plot_height, int ranks,
                     double row)
{
    double tick = nice_tick(step_ms), t;
    int r, label_every = 1;
    while (row * label_every < 12.0) label_every *= 2;
    for (t = 0.0; t <= step_ms + 1e-9; t += tick) {
        double x = SVG_MARGIN_LEFT + t * x_scale;
        fprintf(f, "<line x1='%.2f' y1='%.2f' x2='%.2f' y2='%.2f' stroke='#ddd'/>\n", x,
                SVG_MARGIN_TOP, x, SVG_MARGIN_TOP + plot_height);
        fprintf(f, "<text x='%.2f' y='%.2f' font-size='11' text-anchor='middle'>%g</text>\n", x,
                SVG_MARGIN_TOP + plot_height + 16.0, t);
    }
    fprintf(f, "<text x='%.2f' y='%.2f' font-size='12' text-anchor='middle'>time (ms)</text>\n",
            SVG_MARGIN_LEFT + SVG_PLOT_WIDTH / 2.0, SVG_MARGIN_TOP + plot_height + 34.0);
    for (r = 0; r < ranks; r += label_every)
        fprintf(f, "<text x='%.2f' y='%.2f' font-size='10' text-anchor='end'>rank %d</text>\n",
                SVG_MARGIN_LEFT - 6.0, SVG_MARGIN_TOP + (r + 0.5) * row + 3.5, r);
}

static int write_svg(const char *path, const options *o, const result *r)
{
    const dcp_plan *plan = r->plan;
    double *start, *end, row, plot_height, x_scale, step_ms = r->stats.step_seconds * 1e3;
    int32_t k, g, level;
    dcp_error error;
    FILE *f;
    start = (double *)malloc((size_t)plan->num_groups * sizeof *start);
    end = (double *)malloc((size_t)plan->num_groups * sizeof *end);
    if (!start || !end || dcp_plan_schedule(plan, NULL, start, end, &error) != DCP_OK) {
        fprintf(stderr, "dcp-plan: --svg: %s\n", start && end ? error.message : "out of memory");
        free(start);
        free(end);
        return 0;
    }
    f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "dcp-plan: --svg: cannot write %s\n", path);
        free(start);
        free(end);
        return 0;
    }
    row = SVG_PLOT_HEIGHT_MAX / plan->config.ranks;
    if (row > SVG_ROW_HEIGHT_MAX) row = SVG_ROW_HEIGHT_MAX;
    plot_height = row * plan->config.ranks;
    x_scale = SVG_PLOT_WIDTH / (step_ms > 0.0 ? step_ms : 1.0);
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
               "font-family='sans-serif'>\n<rect width='100%%' height='100%%' fill='white'/>\n",
            SVG_MARGIN_LEFT + SVG_PLOT_WIDTH + 150.0,
            SVG_MARGIN_TOP + plot_height + SVG_MARGIN_BOTTOM);
    fprintf(f, "<text x='%.0f' y='20' font-size='14'>dcp-plan %s: %d samples on %d ranks, %d "
               "microbatches; step %.3f ms, lower bound %.3f ms, efficiency %.3f</text>\n",
            SVG_MARGIN_LEFT, dcp_strategy_name(o->config.strategy), (int)plan->num_samples,
            (int)plan->config.ranks, (int)plan->num_microbatches, step_ms,
            r->stats.lower_bound_seconds * 1e3, r->stats.efficiency);
    svg_axes(f, step_ms, x_scale, plot_height, plan->config.ranks, row);
    for (k = 0; k < plan->num_microbatches; k++)
        for (g = plan->microbatch_offsets[k]; g < plan->microbatch_offsets[k + 1]; g++) {
            const dcp_group *group = &plan->groups[g];
            int color = 0;
            while ((1 << (color + 1)) <= group->cp && color + 1 < CP_COLOR_COUNT) color++;
            fprintf(f, "<rect x='%.3f' y='%.3f' width='%.3f' height='%.3f' fill='%s' "
                       "stroke='white' stroke-width='0.5'><title>microbatch %d, ranks %d-%d "
                       "(cp %d), %d samples, %.3f-%.3f ms</title></rect>\n",
                    SVG_MARGIN_LEFT + start[g] * 1e3 * x_scale,
                    SVG_MARGIN_TOP + group->first_rank * row, (end[g] - start[g]) * 1e3 * x_scale,
                    group->cp * row, cp_colors[color], (int)k, (int)group->first_rank,
                    (int)(group->first_rank + group->cp - 1), (int)group->cp,
                    (int)group->sample_count, start[g] * 1e3, end[g] * 1e3);
        }
    for (level = 0; level < CP_COLOR_COUNT && (1 << level) <= plan->config.max_cp; level++) {
        double y = SVG_MARGIN_TOP + 18.0 * level;
        fprintf(f, "<rect x='%.0f' y='%.0f' width='14' height='14' fill='%s'/>\n",
                SVG_MARGIN_LEFT + SVG_PLOT_WIDTH + 20.0, y, cp_colors[level]);
        fprintf(f, "<text x='%.0f' y='%.0f' font-size='12'>cp %d</text>\n",
                SVG_MARGIN_LEFT + SVG_PLOT_WIDTH + 40.0, y + 11.0, 1 << level);
    }
    fprintf(f, "</svg>\n");
    free(start);
    free(end);
    if (fclose(f) != 0) {
        fprintf(stderr, "dcp-plan: --svg: error writing %s\n", path);
        return 0;
    }
    return 1;
}

int main(int argc, char **argv)
{
    options o;
    int64_t *lengths = NULL;
    int32_t count = 0;
    int status;
    result chosen, static_plan, greedy_plan;
    dcp_error error;
    if (argc == 1) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if ((status = parse_options(argc, argv, &o)) != EXIT_SUCCESS) return status;
    if (o.lengths_path) {
        if (dcp_lengths_read_file(o.lengths_path, NULL, &lengths, &count, &error) != DCP_OK) {
            fprintf(stderr, "dcp-plan: %s: %s\n", o.lengths_path, error.message);
            return EXIT_USAGE;
        }
    } else if ((status = lognormal_lengths(&o, &lengths, &count)) != EXIT_SUCCESS)
        return status;
    if (!plan_with(&o.config, o.config.strategy, lengths, count, &chosen)) {
        dcp_free(NULL, lengths);
        return EXIT_PLAN_FAILED;
    }
    status = EXIT_SUCCESS;
    if (o.view_rank >= 0)
        status = print_view(&o, chosen.plan);
    else if (o.json)
        print_json(&o, &chosen);
    else if (plan_with(&o.config, DCP_STRATEGY_STATIC, lengths, count, &static_plan)) {
        if (plan_with(&o.config, DCP_STRATEGY_GREEDY, lengths, count, &greedy_plan)) {
            print_summary(&o, &chosen, &static_plan, &greedy_plan);
            dcp_plan_destroy(greedy_plan.plan);
        } else
            status = EXIT_PLAN_FAILED;
        dcp_plan_destroy(static_plan.plan);
    } else
        status = EXIT_PLAN_FAILED;
    if (status == EXIT_SUCCESS && o.svg_path && !write_svg(o.svg_path, &o, &chosen))
        status = EXIT_PLAN_FAILED;
    dcp_plan_destroy(chosen.plan);
    dcp_free(NULL, lengths);
    return status;
}
