/* dcp-plan: plan one global batch with dcp.h and print the plan.

   dcp-plan (--lengths FILE | --lognormal MEAN,SIGMA,MIN,MAX,COUNT [--seed S])
            --ranks D --max-tokens-per-rank M [--min-cp K] [--max-cp K]
            [--microbatch-multiple K] [--strategy dynamic|static|greedy] [--sync-ranks E]
            [--attn-coeff A] [--linear-coeff B] [--ring-step-cost G]
            [--ring-charge group|sample] [--json]
            [--svg FILE [--compare]] [--rank R --microbatch K]

   With --rank and --microbatch it prints what that rank receives for that microbatch (its
   group, samples and THD metadata) instead of the plan. `--help` describes every option.

   Build: cc -std=c99 -O2 examples/dcp_plan.c -o dcp-plan -lm   (or `make`, as build/dcp-plan)
   Contract: exit 0 with the output on stdout; or exit 2 (bad usage or input) or 1 (no plan
   possible) with exactly one line on stderr and nothing on stdout. Options take their value as
   the next argument or after '=' (--ranks=16). */
#define _POSIX_C_SOURCE 199309L
#define DCP_IMPLEMENTATION
#include "../dcp.h"

#include <errno.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXIT_PLAN_FAILED 1
#define EXIT_USAGE 2
#define DEFAULT_SEED 1
#define FLAG_NAME_CAPACITY 64

typedef struct options {
    const char *lengths_path;
    const char *lognormal_spec;
    const char *svg_path;
    uint64_t seed;
    int json, compare;
    int have_seed, have_ranks, have_max_tokens;
    int32_t view_rank, view_microbatch; /* -1 when not asked for */
    dcp_config config;
} options;

/* ----------------------------------------------------------------------------- options */

typedef enum flag_id {
    FLAG_HELP, FLAG_LENGTHS, FLAG_LOGNORMAL, FLAG_SEED, FLAG_RANKS, FLAG_MAX_TOKENS,
    FLAG_MIN_CP, FLAG_MAX_CP, FLAG_MULTIPLE, FLAG_STRATEGY, FLAG_SYNC, FLAG_ATTN, FLAG_LINEAR, FLAG_RING,
    FLAG_JSON, FLAG_SVG, FLAG_COMPARE, FLAG_RANK, FLAG_MICROBATCH,
    FLAG_RING_CHARGE /* issue 28 */
} flag_id;

typedef struct flag_spec {
    flag_id id;
    const char *name;
    const char *metavar; /* NULL: a switch without a value */
    const char *help;    /* what it does, its unit and default */
} flag_spec;

static const flag_spec flags[] = {
    {FLAG_LENGTHS, "--lengths", "FILE",
     "sample lengths in tokens, one per line or a CSV column named length, seq_len, seqlen,\n"
     "      sequence_length, seq_length, num_tokens or tokens ('-': standard input)"},
    {FLAG_LOGNORMAL, "--lognormal", "MEAN,SIGMA,MIN,MAX,COUNT",
     "generate COUNT lengths: lognormal with mean MEAN tokens and log-space sigma SIGMA,\n"
     "      clamped to [MIN, MAX]"},
    {FLAG_SEED, "--seed", "S", "random seed of --lognormal (default 1)"},
    {FLAG_RANKS, "--ranks", "D", "ranks of the DP x CP pool, 1 to 1048576 (required)"},
    {FLAG_MAX_TOKENS, "--max-tokens-per-rank", "M",
     "padded tokens one rank holds per microbatch, 1 to 2147483647 (required)"},
    {FLAG_MIN_CP, "--min-cp", "K", "smallest CP size, a power of two (default 1)"},
    {FLAG_MAX_CP, "--max-cp", "K",
     "largest CP size, a power of two <= D (default the largest such)"},
    {FLAG_MULTIPLE, "--microbatch-multiple", "K",
     "the microbatch count is a multiple of K, e.g. the virtual pipeline stages (default 1)"},
    {FLAG_STRATEGY, "--strategy", "dynamic|static|greedy",
     "planner (default dynamic); static and greedy are the baselines"},
    {FLAG_SYNC, "--sync-ranks", "E",
     "ranks that run each microbatch in lockstep: aligned blocks of E, a power of two\n"
     "      dividing D or D itself; 1 for dense models (a group waits only for its own ranks),\n"
     "      the expert-parallel size for MoE (default D: a barrier per microbatch)"},
    {FLAG_ATTN, "--attn-coeff", "A",
     "seconds per (valid token)^2 of attention (default 2.048e-11)"},
    {FLAG_LINEAR, "--linear-coeff", "B", "seconds per stored token (default 1.00663e-06)"},
    {FLAG_RING, "--ring-step-cost", "G",
     "seconds per ring step compute does not hide (default 1.5e-05); each coefficient is 0\n"
     "      or in [1e-100, 1e+100]"},
    /* issue 28: dcp_config.ring_charge */
    {FLAG_RING_CHARGE, "--ring-charge", "group|sample",
     "a group's ring steps once per microbatch (group: its samples run as one forward; the\n"
     "      default) or every sample's own (sample: one forward per sample, as Megatron-Core\n"
     "      0.16's hybrid CP runs them)"},
    {FLAG_JSON, "--json", NULL, "print the plan (or the rank view) as one JSON line"},
    {FLAG_SVG, "--svg", "FILE", "also write the plan as an SVG timeline (ranks x time in ms)"},
    {FLAG_COMPARE, "--compare", NULL,
     "with --svg: draw static, greedy and dynamic one above the other on one time scale"},
    {FLAG_RANK, "--rank", "R", "with --microbatch: print what rank R receives (0-based)"},
    {FLAG_MICROBATCH, "--microbatch", "K", "the microbatch of --rank (0-based)"},
    {FLAG_HELP, "--help", NULL, "print this help and exit (also -h)"},
};
#define FLAG_COUNT ((int)(sizeof flags / sizeof flags[0]))

static void usage(FILE *out)
{
    fputs("usage: dcp-plan (--lengths FILE | --lognormal MEAN,SIGMA,MIN,MAX,COUNT [--seed S])\n"
          "                --ranks D --max-tokens-per-rank M [--min-cp K] [--max-cp K]\n"
          "                [--microbatch-multiple K] [--strategy dynamic|static|greedy]\n"
          "                [--sync-ranks E]\n"
          "                [--attn-coeff A] [--linear-coeff B] [--ring-step-cost G]\n"
          "                [--ring-charge group|sample]\n"
          "                [--json] [--svg FILE [--compare]] [--rank R --microbatch K]\n",
          out);
}

static void help(void)
{
    int i;
    usage(stdout);
    printf("\nPlans which sample runs on how many ranks (its CP size) in which microbatch.\n"
           "Options (a value follows as the next argument or after '='):\n");
    for (i = 0; i < FLAG_COUNT; i++)
        printf("  %s%s%s\n      %s\n", flags[i].name, flags[i].metavar ? " " : "",
               flags[i].metavar ? flags[i].metavar : "", flags[i].help);
    printf("Exit status: 0 success; 2 bad usage or input; 1 no plan possible. Errors are one\n"
           "line on stderr, with nothing on stdout.\n");
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
    if (end == text || *end != '\0') {
        fprintf(stderr, "dcp-plan: %s expects an integer, got '%s'\n", flag, text);
        return 0;
    }
    if (errno == ERANGE || v < lo || v > hi) {
        fprintf(stderr, "dcp-plan: %s must be in [%lld, %lld], got %s\n", flag, lo, hi, text);
        return 0;
    }
    *value = v;
    return 1;
}

/* Any finite double, denormals included; the library judges the range. */
static int parse_double(const char *flag, const char *text, double *value)
{
    char *end;
    double v;
    errno = 0;
    v = strtod(text, &end);
    if (end == text || *end != '\0' || !(v == v)) {
        fprintf(stderr, "dcp-plan: %s expects a number, got '%s'\n", flag, text);
        return 0;
    }
    /* strtod's ERANGE: infinite, or a nonzero value below the smallest denormal (read as 0) */
    if (v > DBL_MAX || v < -DBL_MAX ||
        (errno == ERANGE && v == 0.0 && strpbrk(text, "123456789"))) {
        fprintf(stderr, "dcp-plan: %s must be a finite double (magnitude in [4.9e-324, %g] or "
                        "0), got '%s'\n", flag, DBL_MAX, text);
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

/* issue 28: dcp_config.ring_charge */
static int parse_ring_charge(const char *text, dcp_ring_charge *charge)
{
    if (strcmp(text, "group") == 0) *charge = DCP_RING_PER_GROUP;
    else if (strcmp(text, "sample") == 0) *charge = DCP_RING_PER_SAMPLE;
    else {
        fprintf(stderr, "dcp-plan: --ring-charge must be group or sample, got '%s'\n", text);
        return 0;
    }
    return 1;
}

static int parse_int32(const char *flag, const char *text, long long lo, long long hi,
                       int32_t *value)
{
    long long v;
    if (!parse_int(flag, text, lo, hi, &v)) return 0;
    *value = (int32_t)v;
    return 1;
}

/* Parses one flag's value; returns EXIT_SUCCESS, or EXIT_USAGE after its message. Ranges are
   the library's documented limits; what depends on other fields (powers of two, max_cp <=
   ranks, cost limits) is the library's check in check_config. */
static int parse_value(options *o, const flag_spec *flag, const char *value)
{
    dcp_config *c = &o->config;
    long long v = 0;
    int ok = 1;
    switch (flag->id) {
    case FLAG_LENGTHS: o->lengths_path = value; break;
    case FLAG_LOGNORMAL: o->lognormal_spec = value; break;
    case FLAG_SVG: o->svg_path = value; break;
    case FLAG_SEED:
        ok = parse_int(flag->name, value, 0, INT64_MAX, &v);
        o->seed = (uint64_t)v;
        o->have_seed = 1;
        break;
    case FLAG_RANKS:
        ok = parse_int32(flag->name, value, 1, DCP_MAX_RANKS, &c->ranks);
        o->have_ranks = 1;
        break;
    case FLAG_MAX_TOKENS:
        ok = parse_int(flag->name, value, 1, DCP_MAX_SAMPLE_LENGTH, &v);
        c->max_tokens_per_rank = v;
        o->have_max_tokens = 1;
        break;
    case FLAG_MIN_CP: ok = parse_int32(flag->name, value, 1, DCP_MAX_RANKS, &c->min_cp); break;
    case FLAG_MAX_CP: ok = parse_int32(flag->name, value, 1, DCP_MAX_RANKS, &c->max_cp); break;
    case FLAG_MULTIPLE:
        ok = parse_int32(flag->name, value, 1, DCP_MAX_PAD_MULTIPLE, &c->microbatch_multiple);
        break;
    case FLAG_STRATEGY: ok = parse_strategy(value, &c->strategy); break;
    case FLAG_SYNC:
        ok = parse_int32(flag->name, value, 1, DCP_MAX_RANKS, &c->sync_ranks);
        break;
    case FLAG_ATTN: ok = parse_double(flag->name, value, &c->cost.attn_coeff); break;
    case FLAG_LINEAR: ok = parse_double(flag->name, value, &c->cost.linear_coeff); break;
    case FLAG_RING: ok = parse_double(flag->name, value, &c->cost.ring_step_cost); break;
    case FLAG_RING_CHARGE: ok = parse_ring_charge(value, &c->ring_charge); break;
    case FLAG_RANK:
        ok = parse_int32(flag->name, value, 0, DCP_MAX_RANKS - 1, &o->view_rank);
        break;
    case FLAG_MICROBATCH:
        ok = parse_int32(flag->name, value, 0, INT32_MAX, &o->view_microbatch);
        break;
    default: break;
    }
    return ok ? EXIT_SUCCESS : EXIT_USAGE;
}

static const flag_spec *find_flag(const char *name)
{
    int i;
    for (i = 0; i < FLAG_COUNT; i++)
        if (strcmp(flags[i].name, name) == 0) return &flags[i];
    return NULL;
}

/* One argument (and the next, for a flag whose value follows). *i advances past what it took. */
static int parse_argument(options *o, int argc, char **argv, int *i)
{
    const char *arg = argv[*i], *equals, *value = NULL;
    char name[FLAG_NAME_CAPACITY];
    const flag_spec *flag;
    if (strcmp(arg, "-h") == 0) arg = "--help";
    if (strncmp(arg, "--", 2) != 0)
        return fail_usage("unexpected argument '%s' (options start with --; see --help)%s", arg,
                          "");
    equals = strchr(arg, '=');
    if (equals && (size_t)(equals - arg) < sizeof name) {
        memcpy(name, arg, (size_t)(equals - arg));
        name[equals - arg] = '\0';
        value = equals + 1;
    } else if (strlen(arg) < sizeof name)
        strcpy(name, arg);
    else
        return fail_usage("unknown option %.40s... (see --help)%s", arg, "");
    if (!(flag = find_flag(name))) return fail_usage("unknown option %s (see --help)%s", name, "");
    if (!flag->metavar) {
        if (value) return fail_usage("%s takes no value, got '%s'", name, value);
        if (flag->id == FLAG_HELP) {
            help();
            exit(EXIT_SUCCESS);
        }
        if (flag->id == FLAG_JSON) o->json = 1;
        if (flag->id == FLAG_COMPARE) o->compare = 1;
        return EXIT_SUCCESS;
    }
    if (!value) {
        if (*i + 1 >= argc) return fail_usage("%s needs a value %s", name, flag->metavar);
        value = argv[++*i];
        if (strncmp(value, "--", 2) == 0)
            return fail_usage("%s needs a value, got the option %s", name, value);
    }
    return parse_value(o, flag, value);
}

/* What depends on several options, and the library's own check of the config. */
static int check_options(const options *o)
{
    dcp_config resolved;
    dcp_error error;
    if (!o->lengths_path == !o->lognormal_spec)
        return fail_usage("give exactly one of --lengths FILE and --lognormal "
                          "MEAN,SIGMA,MIN,MAX,COUNT%s%s", "", "");
    if (o->have_seed && o->lengths_path)
        return fail_usage("--seed applies to --lognormal only (--lengths reads fixed lengths)%s%s",
                          "", "");
    if (!o->have_ranks) return fail_usage("--ranks D is required%s%s", "", "");
    if (!o->have_max_tokens) return fail_usage("--max-tokens-per-rank M is required%s%s", "", "");
    if ((o->view_rank < 0) != (o->view_microbatch < 0))
        return fail_usage("--rank and --microbatch go together%s%s", "", "");
    if (o->compare && !o->svg_path)
        return fail_usage("--compare draws into --svg FILE%s%s", "", "");
    if (o->config.cost.attn_coeff == 0.0 && o->config.cost.linear_coeff == 0.0 &&
        o->config.cost.ring_step_cost == 0.0)
        return fail_usage("the cost model cannot be all zero%s%s", "", "");
    if (dcp_config_resolve(&o->config, &resolved, &error) != DCP_OK)
        return fail_usage("%s%s", error.message, "");
    return EXIT_SUCCESS;
}

static int parse_options(int argc, char **argv, options *o)
{
    int i, status;
    memset(o, 0, sizeof *o);
    o->config = dcp_config_init();
    o->seed = DEFAULT_SEED;
    o->view_rank = o->view_microbatch = -1;
    o->config.cost.attn_coeff = DCP_DEFAULT_ATTN_COEFF;
    o->config.cost.linear_coeff = DCP_DEFAULT_LINEAR_COEFF;
    o->config.cost.ring_step_cost = DCP_DEFAULT_RING_STEP_COST;
    for (i = 1; i < argc; i++)
        if ((status = parse_argument(o, argc, argv, &i)) != EXIT_SUCCESS) return status;
    return check_options(o);
}

/* ----------------------------------------------------------------------------- lengths */

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
        !parse_int("--lognormal MIN", fields[2], 1, DCP_MAX_SAMPLE_LENGTH, &min_length) ||
        !parse_int("--lognormal MAX", fields[3], 1, DCP_MAX_SAMPLE_LENGTH, &max_length) ||
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

/* Reads --lengths, and names the file line of the first sample no CP size can hold (the
   planner's own message would give its 0-based index only). */
static int file_lengths(const options *o, int64_t **lengths, int32_t *count)
{
    int64_t *lines = NULL;
    dcp_error error;
    int32_t i, cp;
    if (dcp_lengths_read_file_lines(o->lengths_path, NULL, lengths, &lines, count, &error) !=
        DCP_OK) {
        if (error.status == DCP_ERROR_PARSE) /* the library names the line, not the file */
            fprintf(stderr, "dcp-plan: %s: %s\n", o->lengths_path, error.message);
        else
            fprintf(stderr, "dcp-plan: %s\n", error.message);
        return EXIT_USAGE;
    }
    for (i = 0; i < *count; i++)
        if (dcp_cp_size_min(&o->config, (*lengths)[i], &cp, &error) != DCP_OK) {
            fprintf(stderr, "dcp-plan: %s line %lld: sample %d has %s\n", o->lengths_path,
                    (long long)lines[i], (int)i, error.message);
            dcp_free(NULL, lines);
            dcp_free(NULL, *lengths);
            *lengths = NULL;
            return EXIT_PLAN_FAILED;
        }
    dcp_free(NULL, lines);
    return EXIT_SUCCESS;
}

/* ------------------------------------------------------------------------------ plans */

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
    dcp_strategy strategy;
} result;

static int plan_with(const dcp_config *config, dcp_strategy strategy, const int64_t *lengths,
                     int32_t count, result *r)
{
    dcp_config c = *config;
    dcp_error error;
    double start = now_seconds();
    c.strategy = strategy;
    r->plan = NULL;
    r->strategy = strategy;
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

/* The one CP size of a static plan. */
static int plan_single_cp(const dcp_plan_stats *stats)
{
    int level, cp = 1;
    for (level = 0; level < DCP_CP_LEVELS; level++)
        if (stats->samples_per_cp_level[level] > 0) cp = 1 << level;
    return cp;
}

static void print_summary(const options *o, const result *r, const result *static_plan,
                          const result *greedy_plan)
{
    const dcp_plan *plan = r->plan;
    const dcp_plan_stats *s = &r->stats;
    int level;
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
    printf("  static CP=%-5d %.3f ms, speed-up over static %.3fx\n",
           plan_single_cp(&static_plan->stats), static_plan->stats.step_seconds * 1e3,
           static_plan->stats.step_seconds / s->step_seconds);
    printf("  greedy          %.3f ms, speed-up over greedy %.3fx\n",
           greedy_plan->stats.step_seconds * 1e3,
           greedy_plan->stats.step_seconds / s->step_seconds);
    printf("  plan time       %.3f ms\n", r->plan_seconds * 1e3);
}

/* ------------------------------------------------------------------------- rank view
   Nothing here allocates by the rank's token count: positions are computed row by row from
   the zigzag layout (dcp_zigzag_position), so a view of 2^31 rows prints in constant memory. */

static void print_int32_array(const char *key, const int32_t *values, int32_t count)
{
    int32_t i;
    printf("\"%s\":[", key);
    for (i = 0; i < count; i++) printf("%s%d", i ? "," : "", (int)values[i]);
    printf("]");
}

/* Global position of local row `row` of view slot i, -1 for padding. */
static int64_t view_position(const dcp_rank_view *v, int32_t i, int64_t row)
{
    int64_t padded = (int64_t)v->cu_seqlens_padded[i + 1] - v->cu_seqlens_padded[i];
    int64_t p = dcp_zigzag_position(padded, v->cp, v->rank_in_group, row - v->local_offsets[i]);
    return p < v->sample_lengths[i] ? p : -1;
}

static void print_view_json(const dcp_rank_view *v)
{
    int32_t i;
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
    for (i = 0; i < v->num_samples; i++)
        for (row = v->local_offsets[i]; row < v->local_offsets[i + 1]; row++)
            printf("%s%lld", row ? "," : "", (long long)view_position(v, i, row));
    printf("]}\n");
}

/* A run of local rows of one sample: consecutive positions from `position`, or padding (-1). */
typedef struct row_run {
    int64_t first_row, rows, position;
    int32_t slot;
} row_run;

static void print_run(const dcp_rank_view *v, const row_run *run)
{
    if (run->rows == 0) return;
    if (run->position < 0)
        printf("    rows %lld-%lld: sample %d, padding\n", (long long)run->first_row,
               (long long)(run->first_row + run->rows - 1), (int)v->samples[run->slot]);
    else
        printf("    rows %lld-%lld: sample %d, positions %lld-%lld\n", (long long)run->first_row,
               (long long)(run->first_row + run->rows - 1), (int)v->samples[run->slot],
               (long long)run->position, (long long)(run->position + run->rows - 1));
}

/* Appends rows to the open run when they continue it, else prints it and opens a new one. */
static void add_rows(const dcp_rank_view *v, row_run *run, int32_t slot, int64_t first_row,
                     int64_t rows, int64_t position)
{
    int continues = run->rows > 0 && run->slot == slot &&
                    run->first_row + run->rows == first_row &&
                    (position < 0 ? run->position < 0
                                  : run->position >= 0 && run->position + run->rows == position);
    if (rows == 0) return;
    if (continues) {
        run->rows += rows;
        return;
    }
    print_run(v, run);
    run->first_row = first_row;
    run->rows = rows;
    run->position = position;
    run->slot = slot;
}

/* Rows as runs: each of the sample's chunks (one at cp 1, two in zigzag order otherwise) holds
   consecutive positions, valid up to the sample's length and padding after it. */
static void print_view_rows(const dcp_rank_view *v)
{
    row_run run = {0, 0, 0, 0};
    int32_t i, chunk;
    for (i = 0; i < v->num_samples; i++) {
        int64_t local = (int64_t)v->local_offsets[i + 1] - v->local_offsets[i];
        int32_t chunks = v->cp > 1 ? 2 : 1;
        for (chunk = 0; chunk < chunks; chunk++) {
            int64_t rows = local / chunks, first = v->local_offsets[i] + chunk * rows;
            int64_t position = view_position(v, i, first), valid = 0;
            if (position >= 0) {
                valid = v->sample_lengths[i] - position;
                if (valid > rows) valid = rows;
            } else {
                /* the chunk starts in padding: its first position is past the length */
                valid = 0;
            }
            add_rows(v, &run, i, first, valid, position);
            add_rows(v, &run, i, first + valid, rows - valid, -1);
        }
    }
    print_run(v, &run);
}

static void print_view_summary(const dcp_rank_view *v)
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
    print_view_rows(v);
}

/* The THD metadata one rank receives for one microbatch. */
static int print_view(const options *o, const dcp_plan *plan)
{
    dcp_rank_view *view = NULL;
    dcp_error error;
    if (dcp_rank_view_create(plan, o->view_rank, o->view_microbatch, &view, &error) != DCP_OK) {
        fprintf(stderr, "dcp-plan: %s\n", error.message);
        return EXIT_USAGE;
    }
    if (o->json)
        print_view_json(view);
    else
        print_view_summary(view);
    dcp_rank_view_destroy(view);
    return EXIT_SUCCESS;
}

/* ------------------------------------------------------------------------------- main */

typedef struct run_state {
    options o;
    int64_t *lengths;
    int32_t count;
    FILE *svg;
    result chosen, baselines[2], compare_dynamic; /* baselines: static, greedy */
    int have_baselines, have_compare_dynamic;
} run_state;

/* The picture is dcp_plan_svg's (one plan, or static, greedy and dynamic on one time scale
   with --compare); this writes it to the file main opened, then closes it. */
static int write_plan_svg(run_state *s)
{
    const dcp_plan *plans[3];
    int32_t count = 1;
    size_t size = 0;
    char *text = NULL;
    dcp_error error;
    FILE *f = s->svg;
    int ok;
    s->svg = NULL;
    plans[0] = s->chosen.plan;
    if (s->o.compare) {
        plans[0] = s->baselines[0].plan;
        plans[1] = s->baselines[1].plan;
        plans[2] = s->o.config.strategy == DCP_STRATEGY_DYNAMIC ? s->chosen.plan
                                                                : s->compare_dynamic.plan;
        count = 3;
    }
    ok = dcp_plan_svg(plans, NULL, count, NULL, NULL, 0, &size, &error) == DCP_OK;
    if (ok && !(text = (char *)malloc(size))) {
        snprintf(error.message, sizeof error.message, "out of memory (%zu bytes)", size);
        ok = 0;
    }
    ok = ok && dcp_plan_svg(plans, NULL, count, NULL, text, size, &size, &error) == DCP_OK;
    if (ok) { /* the file is closed on every path; a failed write or close is an error */
        int written = fwrite(text, 1, size - 1, f) == size - 1, closed = fclose(f) == 0;
        if (!written || !closed) {
            snprintf(error.message, sizeof error.message, "cannot write %s: %s", s->o.svg_path,
                     strerror(errno));
            ok = 0;
        }
    } else
        fclose(f);
    free(text);
    if (!ok) fprintf(stderr, "dcp-plan: --svg: %s\n", error.message);
    return ok;
}

/* Plans what the output needs: the chosen strategy; the baselines for the summary or
   --compare; dynamic as well for --compare when another strategy was chosen. */
static int plan_all(run_state *s)
{
    int need_baselines = (!s->o.json && s->o.view_rank < 0) || s->o.compare;
    if (!plan_with(&s->o.config, s->o.config.strategy, s->lengths, s->count, &s->chosen))
        return EXIT_PLAN_FAILED;
    if (need_baselines) {
        if (!plan_with(&s->o.config, DCP_STRATEGY_STATIC, s->lengths, s->count,
                       &s->baselines[0]))
            return EXIT_PLAN_FAILED;
        if (!plan_with(&s->o.config, DCP_STRATEGY_GREEDY, s->lengths, s->count,
                       &s->baselines[1])) {
            dcp_plan_destroy(s->baselines[0].plan);
            return EXIT_PLAN_FAILED;
        }
        s->have_baselines = 1;
    }
    if (s->o.compare && s->o.config.strategy != DCP_STRATEGY_DYNAMIC) {
        if (!plan_with(&s->o.config, DCP_STRATEGY_DYNAMIC, s->lengths, s->count,
                       &s->compare_dynamic))
            return EXIT_PLAN_FAILED;
        s->have_compare_dynamic = 1;
    }
    return EXIT_SUCCESS;
}

static void run_free(run_state *s)
{
    dcp_plan_destroy(s->chosen.plan);
    if (s->have_baselines) {
        dcp_plan_destroy(s->baselines[0].plan);
        dcp_plan_destroy(s->baselines[1].plan);
    }
    if (s->have_compare_dynamic) dcp_plan_destroy(s->compare_dynamic.plan);
    dcp_free(NULL, s->lengths);
}

/* Everything that can fail happens before the first byte on stdout: the SVG file is opened
   first (an unwritable path fails at once), written and closed, then the output printed. */
int main(int argc, char **argv)
{
    run_state s;
    int status;
    memset(&s, 0, sizeof s);
    if (argc == 1) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if ((status = parse_options(argc, argv, &s.o)) != EXIT_SUCCESS) return status;
    if (s.o.svg_path && !(s.svg = fopen(s.o.svg_path, "w"))) {
        fprintf(stderr, "dcp-plan: --svg: cannot write %s: %s\n", s.o.svg_path, strerror(errno));
        return EXIT_USAGE;
    }
    status = s.o.lengths_path ? file_lengths(&s.o, &s.lengths, &s.count)
                              : lognormal_lengths(&s.o, &s.lengths, &s.count);
    if (status == EXIT_SUCCESS && (status = plan_all(&s)) == EXIT_SUCCESS && s.svg &&
        !write_plan_svg(&s))
        status = EXIT_PLAN_FAILED;
    if (status == EXIT_SUCCESS) {
        if (s.o.view_rank >= 0)
            status = print_view(&s.o, s.chosen.plan);
        else if (s.o.json)
            print_json(&s.o, &s.chosen);
        else
            print_summary(&s.o, &s.chosen, &s.baselines[0], &s.baselines[1]);
    }
    if (s.svg) fclose(s.svg);
    if (status != EXIT_SUCCESS && s.o.svg_path) remove(s.o.svg_path); /* no half-written file */
    run_free(&s);
    return status;
}
