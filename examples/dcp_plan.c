/* dcp-plan: plan one global batch with dcp.h and print the plan.

   dcp-plan (--lengths FILE | --lognormal MEAN,SIGMA,MIN,MAX,COUNT [--seed S])
            --ranks D --max-tokens-per-rank M [--sync-ranks E] [--min-cp K] [--max-cp K]
            [--microbatch-multiple K] [--pad-multiple-cp1 K] [--pad-multiple K]
            [--attn-coeff A] [--linear-coeff B] [--ring-step-cost G] [--ring-charge group|sample]
            [--strategy dynamic|static|greedy] [--improve-moves N]
            [--json] [--svg FILE [--compare]] [--save-plan FILE] [--rank R --microbatch K]
   dcp-plan --help | --version

   Every dcp_config field is an option of the same name and meaning (0 is the library's
   default wherever it is in C and Python; the three cost coefficients left at 0 are the
   default model), so that one input gives one plan from every front end. With --rank and
   --microbatch it prints what that rank receives for that microbatch (its group, samples and
   THD metadata) instead of the plan. `--help` describes every option.

   Build: cc -std=c99 -O2 examples/dcp_plan.c -o dcp-plan -lm   (or `make`, as build/dcp-plan)
   Contract: exit 0 with the output on stdout (and a line on stderr per file written); or exit
   2 (bad usage or input) or 1 (no plan possible) with exactly one line on stderr and nothing
   on stdout. Options take their value as the next argument or after '=' (--ranks=16). The
   JSON output is described in docs/cli-json.md. */
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
#define FLAG_NAME_CAPACITY 64
#define LOGNORMAL_FIELDS 5

/* A file the run writes: opened before anything is planned (an unwritable path fails at once),
   removed again if the run fails (never a half-written file). */
typedef struct output_file {
    const char *path;
    FILE *file;
    int created; /* this run opened (created or truncated) the path */
} output_file;

typedef struct options {
    const char *lengths_path;
    const char *lognormal_spec;
    output_file svg, saved_plan;
    uint64_t seed;
    int json, compare;
    int have_seed, have_ranks, have_max_tokens;
    int32_t view_rank, view_microbatch; /* -1 when not asked for */
    dcp_config config;
} options;

/* ----------------------------------------------------------------------------- options */

typedef enum flag_id {
    FLAG_HELP, FLAG_VERSION, FLAG_LENGTHS, FLAG_LOGNORMAL, FLAG_SEED, FLAG_RANKS, FLAG_MAX_TOKENS,
    FLAG_SYNC, FLAG_MIN_CP, FLAG_MAX_CP, FLAG_MULTIPLE, FLAG_PAD_CP1, FLAG_PAD, FLAG_ATTN,
    FLAG_LINEAR, FLAG_RING, FLAG_RING_CHARGE, FLAG_STRATEGY, FLAG_IMPROVE, FLAG_CP_SIZES,
    FLAG_COVER, FLAG_HEADS, FLAG_JSON, FLAG_SVG, FLAG_COMPARE, FLAG_SAVE_PLAN, FLAG_RANK, FLAG_MICROBATCH
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
    {FLAG_SEED, "--seed", "S", "random seed of --lognormal (default 1, as in Python)"},
    {FLAG_RANKS, "--ranks", "D", "ranks of the DP x CP pool, 1 to 1048576 (required)"},
    {FLAG_MAX_TOKENS, "--max-tokens-per-rank", "M",
     "padded tokens one rank holds per microbatch, 1 to 2147483647 (required)"},
    {FLAG_SYNC, "--sync-ranks", "E",
     "ranks that run each microbatch in lockstep: aligned blocks of E, a power of two\n"
     "      dividing D or D itself; 1 for dense models (a group waits only for its own ranks),\n"
     "      the expert-parallel size for MoE (default 0: D, a barrier per microbatch)"},
    {FLAG_MIN_CP, "--min-cp", "K", "smallest CP size, one of --cp-sizes' (default 0: 1)"},
    {FLAG_MAX_CP, "--max-cp", "K",
     "largest CP size, one of --cp-sizes' <= D (default 0: the largest such)"},
    {FLAG_MULTIPLE, "--microbatch-multiple", "K",
     "the microbatch count is a multiple of K, e.g. the pipeline size with virtual stages\n"
     "      (default 0: 1)"},
    {FLAG_PAD_CP1, "--pad-multiple-cp1", "K",
     "a sample on one rank is padded to a multiple of K tokens (default 0: 1)"},
    {FLAG_PAD, "--pad-multiple", "K",
     "every padded length is also a multiple of K, e.g. the TP size with sequence\n"
     "      parallelism (default 0: 1)"},
    {FLAG_ATTN, "--attn-coeff", "A",
     "seconds per (valid token)^2 of attention (default 0). With --linear-coeff and\n"
     "      --ring-step-cost all 0 the default model below is used; once one is given, those\n"
     "      not given are 0"},
    {FLAG_LINEAR, "--linear-coeff", "B", "seconds per stored token (see --attn-coeff)"},
    {FLAG_RING, "--ring-step-cost", "G",
     "seconds per ring step compute does not hide (see --attn-coeff); each coefficient\n"
     "      is 0 or in [1e-100, 1e+100]"},
    {FLAG_RING_CHARGE, "--ring-charge", "group|sample",
     "a group's ring steps once per microbatch (group: its samples run as one forward; the\n"
     "      default) or every sample's own (sample: one forward per sample, as Megatron-Core\n"
     "      0.16's hybrid CP runs them)"},
    {FLAG_STRATEGY, "--strategy", "dynamic|static|greedy",
     "planner (default dynamic); static and greedy are the baselines"},
    {FLAG_IMPROVE, "--improve-moves", "N",
     "local-search budget in evaluated moves (default 0: 8 per sample + 256; < 0: none)"},
    {FLAG_CP_SIZES, "--cp-sizes", "pow2|megatron|any|LIST",
     "the CP sizes a group may have: pow2, the powers of two (the default); megatron, the\n"
     "      sizes Megatron-Core builds hybrid-CP groups for (2^i < 2^floor(log2 D), and D: a\n"
     "      group of all D ranks where D is not a power of two); any, every size (groups on\n"
     "      any range of ranks); or LIST, increasing sizes such as 3,6,12 (at most 16)"},
    {FLAG_HEADS, "--head-count", "H",
     "heads a hybrid model's all-to-all splits among a group's ranks: every CP size must\n"
     "      divide H (default 0: no such constraint)"},
    {FLAG_COVER, "--cover-ranks", "0|1",
     "1: every rank holds a sample somewhere in the plan, as Megatron-Core's hybrid\n"
     "      schedule needs (default 0)"},
    {FLAG_JSON, "--json", NULL,
     "print the plan (or the rank view) as one JSON line (docs/cli-json.md)"},
    {FLAG_SVG, "--svg", "FILE", "also write the plan as an SVG timeline (ranks x time in ms)"},
    {FLAG_COMPARE, "--compare", NULL,
     "with --svg: draw static, greedy and dynamic one above the other on one time scale"},
    {FLAG_SAVE_PLAN, "--save-plan", "FILE",
     "also write the plan in the exchange format (dcp_plan_serialize; Python reads it\n"
     "      with libdcp.Plan.from_bytes)"},
    {FLAG_RANK, "--rank", "R", "with --microbatch: print what rank R receives (0-based)"},
    {FLAG_MICROBATCH, "--microbatch", "K", "the microbatch of --rank (0-based)"},
    {FLAG_VERSION, "--version", NULL, "print the version and exit"},
    {FLAG_HELP, "--help", NULL, "print this help and exit (also -h)"},
};
#define FLAG_COUNT ((int)(sizeof flags / sizeof flags[0]))

static void usage(FILE *out)
{
    fputs("usage: dcp-plan (--lengths FILE | --lognormal MEAN,SIGMA,MIN,MAX,COUNT [--seed S])\n"
          "                --ranks D --max-tokens-per-rank M [--sync-ranks E] [--min-cp K]\n"
          "                [--max-cp K] [--microbatch-multiple K] [--pad-multiple-cp1 K]\n"
          "                [--pad-multiple K] [--attn-coeff A] [--linear-coeff B]\n"
          "                [--ring-step-cost G] [--ring-charge group|sample]\n"
          "                [--strategy dynamic|static|greedy]\n"
          "                [--improve-moves N] [--json] [--svg FILE [--compare]]\n"
          "                [--save-plan FILE] [--rank R --microbatch K]\n"
          "       dcp-plan --help | --version\n",
          out);
}

static void help(void)
{
    int i;
    usage(stdout);
    printf("\nPlans which sample runs on how many ranks (its CP size) in which microbatch.\n"
           "Options (a value follows as the next argument or after '='; each dcp_config field\n"
           "is the option of its name, and 0 means its default as in C and Python):\n");
    for (i = 0; i < FLAG_COUNT; i++)
        printf("  %s%s%s\n      %s\n", flags[i].name, flags[i].metavar ? " " : "",
               flags[i].metavar ? flags[i].metavar : "", flags[i].help);
    printf("Default cost model (seconds): --attn-coeff %g --linear-coeff %g --ring-step-cost %g\n"
           "(a dense model of hidden 4096 at 400 TFLOP/s, 15 us per exposed ring step).\n",
           DCP_DEFAULT_ATTN_COEFF, DCP_DEFAULT_LINEAR_COEFF, DCP_DEFAULT_RING_STEP_COST);
    printf("Exit status: 0 success; 2 bad usage or input; 1 no plan possible. Errors are one\n"
           "line on stderr, with nothing on stdout; each file written is named on stderr.\n");
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

static int parse_int32(const char *flag, const char *text, long long lo, long long hi,
                       int32_t *value);

/* --cp-sizes: a set by name, or a comma-separated list of sizes (DCP_CP_SIZES_LIST; the
   library checks that they increase and fit the pool). */
static int parse_cp_sizes(const char *text, dcp_config *c)
{
    static const dcp_cp_sizes named[] = {DCP_CP_SIZES_POW2, DCP_CP_SIZES_MEGATRON,
                                         DCP_CP_SIZES_ANY};
    char item[32];
    const char *at = text;
    size_t i;
    for (i = 0; i < sizeof named / sizeof named[0]; i++)
        if (strcmp(text, dcp_cp_sizes_name(named[i])) == 0) {
            c->cp_sizes = named[i];
            return 1;
        }
    c->cp_sizes = DCP_CP_SIZES_LIST;
    c->cp_size_count = 0;
    while (*at) {
        size_t length = strcspn(at, ",");
        if (c->cp_size_count == DCP_CP_SIZE_LIST_CAPACITY || length == 0 ||
            length >= sizeof item) {
            fprintf(stderr, "dcp-plan: --cp-sizes must be pow2, megatron, any or up to %d "
                    "comma-separated sizes, got '%s'\n", DCP_CP_SIZE_LIST_CAPACITY, text);
            return 0;
        }
        memcpy(item, at, length);
        item[length] = '\0';
        if (!parse_int32("--cp-sizes", item, 1, DCP_MAX_RANKS,
                         &c->cp_size_list[c->cp_size_count++]))
            return 0;
        at += length + (at[length] == ',');
    }
    return 1;
}

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

/* A dcp_config field whose 0 is the library's default: any value from 0 up to the
   library's limit gets through; what depends on other fields (powers of two, max_cp <= ranks)
   is the library's check in check_options, with the library's message. */
static int parse_default_field(const flag_spec *flag, const char *text, long long hi,
                               int32_t *value)
{
    return parse_int32(flag->name, text, 0, hi, value);
}

/* Parses one flag's value; returns EXIT_SUCCESS, or EXIT_USAGE after its message. */
static int parse_value(options *o, const flag_spec *flag, const char *value)
{
    dcp_config *c = &o->config;
    long long v = 0;
    int ok = 1;
    switch (flag->id) {
    case FLAG_LENGTHS: o->lengths_path = value; break;
    case FLAG_LOGNORMAL: o->lognormal_spec = value; break;
    case FLAG_SVG: o->svg.path = value; break;
    case FLAG_SAVE_PLAN: o->saved_plan.path = value; break;
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
    case FLAG_SYNC: ok = parse_default_field(flag, value, DCP_MAX_RANKS, &c->sync_ranks); break;
    case FLAG_MIN_CP: ok = parse_default_field(flag, value, DCP_MAX_RANKS, &c->min_cp); break;
    case FLAG_MAX_CP: ok = parse_default_field(flag, value, DCP_MAX_RANKS, &c->max_cp); break;
    case FLAG_MULTIPLE:
        ok = parse_default_field(flag, value, DCP_MAX_PAD_MULTIPLE, &c->microbatch_multiple);
        break;
    case FLAG_PAD_CP1:
        ok = parse_default_field(flag, value, DCP_MAX_PAD_MULTIPLE, &c->pad_multiple_cp1);
        break;
    case FLAG_PAD:
        ok = parse_default_field(flag, value, DCP_MAX_PAD_MULTIPLE, &c->pad_multiple);
        break;
    case FLAG_IMPROVE:
        ok = parse_int32(flag->name, value, INT32_MIN, INT32_MAX, &c->improve_moves);
        break;
    case FLAG_STRATEGY: ok = parse_strategy(value, &c->strategy); break;
    case FLAG_ATTN: ok = parse_double(flag->name, value, &c->cost.attn_coeff); break;
    case FLAG_LINEAR: ok = parse_double(flag->name, value, &c->cost.linear_coeff); break;
    case FLAG_RING: ok = parse_double(flag->name, value, &c->cost.ring_step_cost); break;
    case FLAG_RING_CHARGE: ok = parse_ring_charge(value, &c->ring_charge); break;
    case FLAG_CP_SIZES: ok = parse_cp_sizes(value, c); break;
    case FLAG_HEADS: ok = parse_default_field(flag, value, DCP_MAX_HEAD_COUNT, &c->head_count); break;
    case FLAG_COVER: ok = parse_int32(flag->name, value, 0, 1, &c->cover_ranks); break;
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

/* A switch (a flag without a value). --help and --version print and exit at once. */
static int parse_switch(options *o, const flag_spec *flag)
{
    switch (flag->id) {
    case FLAG_HELP: help(); exit(EXIT_SUCCESS);
    case FLAG_VERSION:
        printf("dcp-plan %d.%d.%d (dcp.h, plan format %d)\n", DCP_VERSION_MAJOR,
               DCP_VERSION_MINOR, DCP_VERSION_PATCH, DCP_FORMAT_VERSION);
        exit(EXIT_SUCCESS);
    case FLAG_JSON: o->json = 1; break;
    case FLAG_COMPARE: o->compare = 1; break;
    default: break;
    }
    return EXIT_SUCCESS;
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
        return parse_switch(o, flag);
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
    if (o->compare && !o->svg.path)
        return fail_usage("--compare draws into --svg FILE%s%s", "", "");
    if (o->svg.path && o->saved_plan.path && strcmp(o->svg.path, o->saved_plan.path) == 0)
        return fail_usage("--svg and --save-plan both name %s%s", o->svg.path, "");
    if (dcp_config_resolve(&o->config, &resolved, &error) != DCP_OK)
        return fail_usage("%s%s", error.message, "");
    return EXIT_SUCCESS;
}

static int parse_options(int argc, char **argv, options *o)
{
    int i, status;
    memset(o, 0, sizeof *o);
    o->config = dcp_config_init(); /* every field 0: the library's defaults */
    o->seed = DCP_DEFAULT_SEED;
    o->view_rank = o->view_microbatch = -1;
    for (i = 1; i < argc; i++)
        if ((status = parse_argument(o, argc, argv, &i)) != EXIT_SUCCESS) return status;
    return check_options(o);
}

/* ----------------------------------------------------------------------------- lengths */

/* MEAN,SIGMA,MIN,MAX,COUNT */
static int lognormal_lengths(const options *o, int64_t **lengths, int32_t *count)
{
    char buffer[256], *fields[LOGNORMAL_FIELDS], *cursor;
    double mean, sigma;
    long long min_length, max_length, n;
    dcp_lognormal distribution;
    dcp_error error;
    int i;
    if (strlen(o->lognormal_spec) >= sizeof buffer)
        return fail_usage("--lognormal value is too long%s%s", "", "");
    strcpy(buffer, o->lognormal_spec);
    cursor = buffer;
    for (i = 0; i < LOGNORMAL_FIELDS; i++) {
        fields[i] = cursor;
        cursor = strchr(cursor, ',');
        if (i < LOGNORMAL_FIELDS - 1 && !cursor)
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

/* The plan's CP sizes and the samples at each (dcp_plan_cp_histogram), at most
   HISTOGRAM_CAPACITY sizes shown (a plan uses a few). */
#define HISTOGRAM_CAPACITY 64
typedef struct histogram {
    int32_t sizes[HISTOGRAM_CAPACITY], samples[HISTOGRAM_CAPACITY], count;
} histogram;

static void plan_histogram(const dcp_plan *plan, histogram *h)
{
    dcp_plan_cp_histogram(plan, h->sizes, h->samples, HISTOGRAM_CAPACITY, &h->count, NULL);
    if (h->count > HISTOGRAM_CAPACITY) h->count = HISTOGRAM_CAPACITY;
}

/* The one CP size of a static plan. */
static int plan_single_cp(const dcp_plan *plan)
{
    histogram h;
    plan_histogram(plan, &h);
    return h.count > 0 ? h.sizes[h.count - 1] : 1;
}

static double dag_efficiency(const dcp_plan_stats *s)
{
    return s->dag_lower_bound_seconds / s->dag_seconds;
}

static double barrier_efficiency(const dcp_plan_stats *s)
{
    return s->barrier_lower_bound_seconds / s->barrier_seconds;
}

/* ------------------------------------------------------------------------- JSON plan
   One object on one line, keys as in docs/cli-json.md (tests/test_cli.sh checks the output
   against docs/dcp-plan.schema.json). */

static void print_int64_array(const char *key, const int64_t *values, int32_t count)
{
    int32_t i;
    printf("\"%s\":[", key);
    for (i = 0; i < count; i++) printf("%s%lld", i ? "," : "", (long long)values[i]);
    printf("]");
}

static void print_int32_values(const int32_t *values, int32_t count)
{
    int32_t i;
    printf("[");
    for (i = 0; i < count; i++) printf("%s%d", i ? "," : "", (int)values[i]);
    printf("]");
}

static void print_int32_array(const char *key, const int32_t *values, int32_t count)
{
    printf("\"%s\":", key);
    print_int32_values(values, count);
}

static void print_config_json(const dcp_config *c)
{
    printf("\"config\":{\"ranks\":%d,\"max_tokens_per_rank\":%lld,\"sync_ranks\":%d,"
           "\"min_cp\":%d,\"max_cp\":%d,\"microbatch_multiple\":%d,\"pad_multiple_cp1\":%d,"
           "\"pad_multiple\":%d,\"cost\":{\"attn_coeff\":%.17g,\"linear_coeff\":%.17g,"
           "\"ring_step_cost\":%.17g},\"ring_charge\":\"%s\",\"strategy\":\"%s\","
           "\"improve_moves\":%d,\"cp_sizes\":",
           (int)c->ranks, (long long)c->max_tokens_per_rank, (int)c->sync_ranks, (int)c->min_cp,
           (int)c->max_cp, (int)c->microbatch_multiple, (int)c->pad_multiple_cp1,
           (int)c->pad_multiple, c->cost.attn_coeff, c->cost.linear_coeff,
           c->cost.ring_step_cost, c->ring_charge == DCP_RING_PER_SAMPLE ? "sample" : "group",
           dcp_strategy_name(c->strategy), (int)c->improve_moves);
    if (c->cp_sizes == DCP_CP_SIZES_LIST)
        print_int32_values(c->cp_size_list, c->cp_size_count);
    else
        printf("\"%s\"", dcp_cp_sizes_name(c->cp_sizes));
    /* the fields in dcp_config's order, as Plan.to_json prints them */
    printf(",\"head_count\":%d,\"cover_ranks\":%d}", (int)c->head_count, (int)c->cover_ranks);
}

/* Each sample's padded length at the CP size of its group; 0 on allocation failure. */
static int64_t *padded_lengths(const dcp_plan *plan)
{
    int64_t *padded = (int64_t *)malloc(((size_t)plan->num_samples + 1) * sizeof *padded);
    int32_t g, i;
    if (!padded) return NULL;
    for (g = 0; g < plan->num_groups; g++) {
        const dcp_group *group = &plan->groups[g];
        for (i = 0; i < group->sample_count; i++) {
            int32_t s = plan->group_samples[group->sample_offset + i];
            /* a valid plan's samples pad without error at their group's size */
            (void)dcp_padded_length(&plan->config, plan->sample_lengths[s], group->cp,
                                    &padded[s], NULL);
        }
    }
    return padded;
}

static void print_groups_json(const dcp_plan *plan, const double *start, const double *end)
{
    int32_t k, g;
    printf("\"microbatches\":[");
    for (k = 0; k < plan->num_microbatches; k++) {
        printf("%s[", k ? "," : "");
        for (g = plan->microbatch_offsets[k]; g < plan->microbatch_offsets[k + 1]; g++) {
            const dcp_group *group = &plan->groups[g];
            printf("%s{\"first_rank\":%d,\"cp\":%d,", g > plan->microbatch_offsets[k] ? "," : "",
                   (int)group->first_rank, (int)group->cp);
            print_int32_array("samples", plan->group_samples + group->sample_offset,
                              group->sample_count);
            printf(",\"start_seconds\":%.9g,\"end_seconds\":%.9g}", start[g], end[g]);
        }
        printf("]");
    }
    printf("]");
}

static void print_stats_json(const dcp_plan *plan, const dcp_plan_stats *s)
{
    histogram h;
    int32_t i;
    plan_histogram(plan, &h);
    printf("\"valid_tokens\":%lld,\"padded_tokens\":%lld,\"num_microbatches\":%d,"
           "\"num_groups\":%d,\"idle_rank_microbatches\":%d,\"cp_histogram\":{",
           (long long)s->valid_tokens, (long long)s->padded_tokens, (int)s->num_microbatches,
           (int)s->num_groups, (int)s->idle_rank_microbatches);
    for (i = 0; i < h.count; i++)
        printf("%s\"%d\":%d", i ? "," : "", (int)h.sizes[i], (int)h.samples[i]);
    printf("},\"sync_ranks\":%d,\"step_seconds\":%.9g,\"lower_bound_seconds\":%.9g,"
           "\"efficiency\":%.6f,\"dag_seconds\":%.9g,\"dag_lower_bound_seconds\":%.9g,"
           "\"dag_efficiency\":%.6f,\"barrier_seconds\":%.9g,"
           "\"barrier_lower_bound_seconds\":%.9g,\"barrier_efficiency\":%.6f",
           (int)s->sync_ranks, s->step_seconds, s->lower_bound_seconds, s->efficiency,
           s->dag_seconds, s->dag_lower_bound_seconds, dag_efficiency(s), s->barrier_seconds,
           s->barrier_lower_bound_seconds, barrier_efficiency(s));
}

static void print_baselines_json(const result *r, const result *static_plan,
                                 const result *greedy_plan)
{
    printf("\"baselines\":{\"static\":{\"cp\":%d,\"step_seconds\":%.9g,\"speedup\":%.6f},"
           "\"greedy\":{\"step_seconds\":%.9g,\"speedup\":%.6f}}",
           plan_single_cp(static_plan->plan), static_plan->stats.step_seconds,
           static_plan->stats.step_seconds / r->stats.step_seconds,
           greedy_plan->stats.step_seconds,
           greedy_plan->stats.step_seconds / r->stats.step_seconds);
}

static int print_json(const result *r, const result *static_plan, const result *greedy_plan)
{
    const dcp_plan *plan = r->plan;
    size_t groups = (size_t)plan->num_groups + 1;
    double *start = (double *)malloc(groups * sizeof *start);
    double *end = (double *)malloc(groups * sizeof *end);
    int64_t *padded = padded_lengths(plan);
    dcp_error error;
    int ok = start && end && padded;
    if (!ok) snprintf(error.message, sizeof error.message, "out of memory");
    ok = ok && dcp_plan_schedule(plan, NULL, start, end, &error) == DCP_OK;
    if (ok) {
        printf("{\"version\":\"%d.%d.%d\",", DCP_VERSION_MAJOR, DCP_VERSION_MINOR,
               DCP_VERSION_PATCH);
        print_config_json(&plan->config);
        printf(",\"samples\":%d,", (int)plan->num_samples);
        print_int64_array("sample_lengths", plan->sample_lengths, plan->num_samples);
        printf(",");
        print_int64_array("padded_lengths", padded, plan->num_samples);
        printf(",");
        print_groups_json(plan, start, end);
        printf(",");
        print_stats_json(r->plan, &r->stats);
        printf(",");
        print_baselines_json(r, static_plan, greedy_plan);
        printf(",\"plan_seconds\":%.6g}\n", r->plan_seconds);
    } else
        fprintf(stderr, "dcp-plan: %s\n", error.message);
    free(start), free(end), free(padded);
    return ok ? EXIT_SUCCESS : EXIT_PLAN_FAILED;
}

/* ---------------------------------------------------------------------- text summary */

static void print_summary(const result *r, const result *static_plan, const result *greedy_plan)
{
    const dcp_plan *plan = r->plan;
    const dcp_plan_stats *s = &r->stats;
    histogram h;
    int32_t i;
    printf("dcp-plan: %d samples, %lld valid tokens, %d ranks, max %lld padded tokens per rank, "
           "strategy %s\n",
           (int)plan->num_samples, (long long)s->valid_tokens, (int)plan->config.ranks,
           (long long)plan->config.max_tokens_per_rank, dcp_strategy_name(plan->config.strategy));
    printf("  microbatches    %d (%d groups, %d idle rank-microbatches)\n",
           (int)s->num_microbatches, (int)s->num_groups, (int)s->idle_rank_microbatches);
    plan_histogram(plan, &h);
    printf("  cp histogram   ");
    for (i = 0; i < h.count; i++) printf(" cp=%d: %d samples;", (int)h.sizes[i], (int)h.samples[i]);
    printf("\n");
    printf("  step time       %.3f ms under sync ranks E = %d (blocks of E ranks in lockstep)\n",
           s->step_seconds * 1e3, (int)s->sync_ranks);
    printf("  E = 1 (DAG)     %.3f ms (a group starts when all its ranks are free), "
           "efficiency %.4f\n",
           s->dag_seconds * 1e3, dag_efficiency(s));
    printf("  E = D (barrier) %.3f ms (every microbatch waits for the slowest group), "
           "efficiency %.4f\n",
           s->barrier_seconds * 1e3, barrier_efficiency(s));
    printf("  lower bound     %.3f ms (under E = %d)\n", s->lower_bound_seconds * 1e3,
           (int)s->sync_ranks);
    printf("  efficiency      %.4f (lower bound / step time)\n", s->efficiency);
    printf("  static CP=%-5d %.3f ms, speed-up over static %.3fx\n",
           plan_single_cp(static_plan->plan), static_plan->stats.step_seconds * 1e3,
           static_plan->stats.step_seconds / s->step_seconds);
    printf("  greedy          %.3f ms, speed-up over greedy %.3fx\n",
           greedy_plan->stats.step_seconds * 1e3,
           greedy_plan->stats.step_seconds / s->step_seconds);
    printf("  plan time       %.3f ms\n", r->plan_seconds * 1e3);
}

/* ------------------------------------------------------------------------- rank view
   Rows are printed as dcp_rank_view_runs' runs: memory follows the view's samples, not its
   token count, so a view of 2^31 rows prints in constant memory. */

static void print_runs_json(const dcp_rank_view *v, const dcp_row_run *runs, int32_t count)
{
    int32_t i;
    printf("\"runs\":[");
    for (i = 0; i < count; i++)
        printf("%s{\"first_row\":%lld,\"rows\":%lld,\"sample\":%d,\"position\":%lld}",
               i ? "," : "", (long long)runs[i].first_row, (long long)runs[i].rows,
               (int)v->samples[runs[i].slot], (long long)runs[i].position);
    printf("]");
}

static void print_view_json(const dcp_rank_view *v, const dcp_row_run *runs, int32_t count)
{
    printf("{\"rank\":%d,\"microbatch\":%d,\"first_rank\":%d,\"cp\":%d,\"rank_in_group\":%d,"
           "\"idle\":%s,",
           (int)v->rank, (int)v->microbatch, (int)v->first_rank, (int)v->cp,
           (int)v->rank_in_group, v->idle ? "true" : "false");
    print_int32_array("samples", v->samples, v->num_samples);
    printf(",");
    print_int64_array("sample_lengths", v->sample_lengths, v->num_samples);
    printf(",");
    print_int32_array("cu_seqlens", v->cu_seqlens, v->num_samples + 1);
    printf(",");
    print_int32_array("cu_seqlens_padded", v->cu_seqlens_padded, v->num_samples + 1);
    printf(",");
    print_int32_array("local_offsets", v->local_offsets, v->num_samples + 1);
    printf(",\"max_seqlen\":%d,\"local_tokens\":%lld,\"pad_multiple\":%lld,", (int)v->max_seqlen,
           (long long)v->local_tokens, (long long)v->pad_multiple);
    print_runs_json(v, runs, count);
    printf("}\n");
}

static void print_list(const char *label, const int32_t *values, int32_t count)
{
    int32_t i;
    printf("  %-18s", label);
    for (i = 0; i < count; i++) printf(" %d", (int)values[i]);
    printf("\n");
}

static void print_view_summary(const dcp_rank_view *v, const dcp_row_run *runs, int32_t count)
{
    int32_t i;
    if (v->idle) {
        printf("rank %d, microbatch %d: idle (no group, no samples: it waits for the "
               "microbatch's groups)\n",
               (int)v->rank, (int)v->microbatch);
        return;
    }
    printf("rank %d, microbatch %d: group of ranks %d-%d (cp %d), rank %d in the group\n",
           (int)v->rank, (int)v->microbatch, (int)v->first_rank, (int)(v->first_rank + v->cp - 1),
           (int)v->cp, (int)v->rank_in_group);
    print_list("samples", v->samples, v->num_samples);
    print_list("cu_seqlens", v->cu_seqlens, v->num_samples + 1);
    print_list("cu_seqlens_padded", v->cu_seqlens_padded, v->num_samples + 1);
    print_list("local_offsets", v->local_offsets, v->num_samples + 1);
    printf("  max_seqlen         %d (padded)\n  local_tokens       %lld\n"
           "  pad multiple       %lld\n  local rows:\n",
           (int)v->max_seqlen, (long long)v->local_tokens, (long long)v->pad_multiple);
    for (i = 0; i < count; i++) {
        const dcp_row_run *run = &runs[i];
        printf("    rows %lld-%lld: sample %d, ", (long long)run->first_row,
               (long long)(run->first_row + run->rows - 1), (int)v->samples[run->slot]);
        if (run->position < 0)
            printf("padding\n");
        else
            printf("positions %lld-%lld\n", (long long)run->position,
                   (long long)(run->position + run->rows - 1));
    }
}

/* The THD metadata one rank receives for one microbatch. */
static int print_view(const options *o, const dcp_plan *plan)
{
    dcp_rank_view *view = NULL;
    dcp_row_run *runs = NULL;
    int32_t count = 0;
    dcp_error error;
    int status = EXIT_USAGE; /* a rank or microbatch outside the plan */
    if (dcp_rank_view_create(plan, o->view_rank, o->view_microbatch, &view, &error) == DCP_OK) {
        status = EXIT_PLAN_FAILED;
        if (dcp_rank_view_runs(view, NULL, 0, &count, &error) == DCP_OK &&
            (runs = (dcp_row_run *)malloc(((size_t)count + 1) * sizeof *runs)) != NULL &&
            dcp_rank_view_runs(view, runs, count, &count, &error) == DCP_OK)
            status = EXIT_SUCCESS;
        else if (!runs)
            snprintf(error.message, sizeof error.message, "out of memory for %d runs",
                     (int)count);
    }
    if (status != EXIT_SUCCESS)
        fprintf(stderr, "dcp-plan: %s\n", error.message);
    else if (o->json)
        print_view_json(view, runs, count);
    else
        print_view_summary(view, runs, count);
    free(runs);
    dcp_rank_view_destroy(view);
    return status;
}

/* ------------------------------------------------------------------------------- files */

static int open_output(output_file *out, const char *flag)
{
    if (!out->path) return 1;
    if ((out->file = fopen(out->path, "wb")) != NULL) return out->created = 1;
    fprintf(stderr, "dcp-plan: %s: cannot write %s: %s\n", flag, out->path, strerror(errno));
    return 0;
}

/* Writes size bytes, closes the file (on every path) and names it on stderr. */
static int write_output(output_file *out, const char *flag, const void *data, size_t size)
{
    int written = fwrite(data, 1, size, out->file) == size, closed = fclose(out->file) == 0;
    out->file = NULL;
    if (!written || !closed) {
        fprintf(stderr, "dcp-plan: %s: cannot write %s: %s\n", flag, out->path, strerror(errno));
        return 0;
    }
    fprintf(stderr, "dcp-plan: wrote %s (%zu bytes)\n", out->path, size);
    return 1;
}

/* Fills a buffer with a size-query-then-fill function of dcp.h, or names why not. */
typedef dcp_status (*fill_fn)(const void *what, char *buffer, size_t capacity, size_t *size,
                              dcp_error *error);

static char *fill_buffer(fill_fn fill, const void *what, size_t *size, dcp_error *error)
{
    char *buffer = NULL;
    if (fill(what, NULL, 0, size, error) != DCP_OK) return NULL;
    if (!(buffer = (char *)malloc(*size + 1))) {
        snprintf(error->message, sizeof error->message, "out of memory (%zu bytes)", *size);
        return NULL;
    }
    if (fill(what, buffer, *size, size, error) != DCP_OK) {
        free(buffer);
        return NULL;
    }
    return buffer;
}

typedef struct svg_request {
    const dcp_plan *plans[3];
    int32_t count;
} svg_request;

static dcp_status fill_svg(const void *what, char *buffer, size_t capacity, size_t *size,
                           dcp_error *error)
{
    const svg_request *r = (const svg_request *)what;
    return dcp_plan_svg(r->plans, NULL, r->count, NULL, buffer, capacity, size, error);
}

static dcp_status fill_plan(const void *what, char *buffer, size_t capacity, size_t *size,
                            dcp_error *error)
{
    return dcp_plan_serialize((const dcp_plan *)what, buffer, capacity, size, error);
}

/* ------------------------------------------------------------------------------- main */

typedef struct run_state {
    options o;
    int64_t *lengths;
    int32_t count;
    result chosen, baselines[2], compare_dynamic; /* baselines: static, greedy */
    int have_baselines, have_compare_dynamic;
} run_state;

/* The picture is dcp_plan_svg's (one plan, or static, greedy and dynamic on one time scale
   with --compare); the file is the one main opened. */
static int write_plan_svg(run_state *s)
{
    svg_request request;
    size_t size = 0;
    dcp_error error;
    char *text;
    int ok;
    request.plans[0] = s->chosen.plan;
    request.count = 1;
    if (s->o.compare) {
        request.plans[0] = s->baselines[0].plan;
        request.plans[1] = s->baselines[1].plan;
        request.plans[2] = s->have_compare_dynamic ? s->compare_dynamic.plan : s->chosen.plan;
        request.count = 3;
    }
    if (!(text = fill_buffer(fill_svg, &request, &size, &error))) {
        fprintf(stderr, "dcp-plan: --svg: %s\n", error.message);
        return 0;
    }
    ok = write_output(&s->o.svg, "--svg", text, size - 1); /* without the terminating NUL */
    free(text);
    return ok;
}

static int write_saved_plan(run_state *s)
{
    size_t size = 0;
    dcp_error error;
    char *bytes = fill_buffer(fill_plan, s->chosen.plan, &size, &error);
    int ok;
    if (!bytes) {
        fprintf(stderr, "dcp-plan: --save-plan: %s\n", error.message);
        return 0;
    }
    ok = write_output(&s->o.saved_plan, "--save-plan", bytes, size);
    free(bytes);
    return ok;
}

/* Plans what the output needs: the chosen strategy; the baselines for the summary, the JSON
   and --compare; dynamic as well for --compare when another strategy was chosen. */
static int plan_all(run_state *s)
{
    int need_baselines = s->o.view_rank < 0 || s->o.compare;
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

/* Plans, writes the files, then prints: everything but the view's own checks fails before
   the first byte on stdout. */
static int run(run_state *s)
{
    int status = s->o.lengths_path ? file_lengths(&s->o, &s->lengths, &s->count)
                                   : lognormal_lengths(&s->o, &s->lengths, &s->count);
    if (status == EXIT_SUCCESS) status = plan_all(s);
    if (status == EXIT_SUCCESS && s->o.svg.file && !write_plan_svg(s)) status = EXIT_PLAN_FAILED;
    if (status == EXIT_SUCCESS && s->o.saved_plan.file && !write_saved_plan(s))
        status = EXIT_PLAN_FAILED;
    if (status != EXIT_SUCCESS) return status;
    if (s->o.view_rank >= 0) return print_view(&s->o, s->chosen.plan);
    if (s->o.json) return print_json(&s->chosen, &s->baselines[0], &s->baselines[1]);
    print_summary(&s->chosen, &s->baselines[0], &s->baselines[1]);
    return EXIT_SUCCESS;
}

int main(int argc, char **argv)
{
    run_state s;
    output_file *files[2];
    int status, i;
    memset(&s, 0, sizeof s);
    if (argc == 1) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if ((status = parse_options(argc, argv, &s.o)) != EXIT_SUCCESS) return status;
    files[0] = &s.o.svg;
    files[1] = &s.o.saved_plan;
    if (!open_output(files[0], "--svg") || !open_output(files[1], "--save-plan"))
        status = EXIT_USAGE;
    else
        status = run(&s);
    for (i = 0; i < 2; i++) {
        if (files[i]->file) fclose(files[i]->file);
        if (status != EXIT_SUCCESS && files[i]->created) remove(files[i]->path);
    }
    run_free(&s);
    return status;
}
