/* dcp-plan: plan one global batch with dcp.h and print the plan.

   dcp-plan (--lengths FILE | --lognormal MEAN,SIGMA,MIN,MAX,COUNT [--seed S])
            --ranks D --max-tokens-per-rank M [--sync-ranks E] [--min-cp K] [--max-cp K]
            [--microbatch-multiple K] [--pad-multiple-cp1 K] [--pad-multiple K]
            [--attn-coeff A] [--linear-coeff B] [--ring-step-cost G] [--ring-charge group|sample]
            [--strategy dynamic|static|greedy] [--improve-moves N]
            [--json] [--svg FILE [--compare]] [--save-plan FILE] [--output FILE]
            [--rank R --microbatch K]
   dcp-plan --help | --version

   Every dcp_config field is an option of the same name and meaning (0 is the library's
   default wherever it is in C and Python; the three cost coefficients left at 0 are the
   default model), so that one input gives one plan from every front end. With --rank and
   --microbatch it prints what that rank receives for that microbatch (its group, samples and
   THD metadata) instead of the plan. `--help` describes every option.

   Build: cc -std=c99 -O2 examples/dcp_plan.c -o dcp-plan -lm   (or `make`, as build/dcp-plan)
   Contract: exit 0 with the output on stdout (and a line on stderr per file written); or exit
   2 (bad usage or input) or 1 (no plan possible) with exactly one line on stderr and nothing
   on stdout. Options take their value as the next argument or after '=' (--ranks=16); each
   is given at most once, and a number is the whole value (no space around it). The
   JSON output is described in docs/cli-json.md. */
#define _XOPEN_SOURCE 700 /* POSIX 2008 with realpath: mkstemp, fchmod, fsync, sigaction */
#define DCP_IMPLEMENTATION
#include "../dcp.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXIT_PLAN_FAILED 1
#define EXIT_USAGE 2
#define FLAG_NAME_CAPACITY 64
#define LOGNORMAL_FIELDS 5
/* --memory-limit: the suffixes K, M, G, T step by 2^10; the longest number is 19 digits */
#define BITS_PER_UNIT_STEP 10
#define BYTES_TEXT_CAPACITY 32
#define BYTES_PER_GIB 1073741824.0
/* a run plans its strategy, static and greedy, and dynamic with --compare */
enum run_plan { PLAN_CHOSEN, PLAN_STATIC, PLAN_GREEDY, PLAN_DYNAMIC, MAX_RUN_PLANS };

/* The files a run writes (section "files": each replaced only when the whole run succeeded). */
enum output_kind { OUTPUT_SVG, OUTPUT_SAVED_PLAN, OUTPUT_TEXT, OUTPUT_COUNT };

typedef struct output_file {
    const char *flag, *path; /* the option and its value; path NULL when not asked for */
    char *target;            /* the file replaced: path, or the file its symbolic link names */
    char *temp;              /* the temporary beside target while it exists */
    int in_place;            /* an existing non-regular file (/dev/null, a pipe): written as is */
    mode_t mode;             /* the permissions the replaced file keeps, or a new file's */
    size_t size;             /* bytes written */
} output_file;

typedef enum flag_id {
    FLAG_HELP, FLAG_VERSION, FLAG_LENGTHS, FLAG_LOGNORMAL, FLAG_SEED, FLAG_RANKS, FLAG_MAX_TOKENS,
    FLAG_SYNC, FLAG_MIN_CP, FLAG_MAX_CP, FLAG_MULTIPLE, FLAG_PAD_CP1, FLAG_PAD, FLAG_ATTN,
    FLAG_LINEAR, FLAG_RING, FLAG_RING_CHARGE, FLAG_STRATEGY, FLAG_IMPROVE, FLAG_CP_SIZES,
    FLAG_COVER, FLAG_HEADS, FLAG_JSON, FLAG_SVG, FLAG_COMPARE, FLAG_SAVE_PLAN, FLAG_RANK,
    FLAG_MICROBATCH, FLAG_OUTPUT, FLAG_MEMORY_LIMIT, FLAG_ID_COUNT
} flag_id;

typedef struct options {
    const char *lengths_path;
    const char *lognormal_spec;
    output_file outputs[OUTPUT_COUNT];
    uint64_t seed;
    int json, compare;
    int have_seed, have_ranks, have_max_tokens;
    int32_t view_rank, view_microbatch; /* -1 when not asked for */
    dcp_config config;
    unsigned char seen[FLAG_ID_COUNT]; /* a repeated option is refused, never overwritten */
} options;

/* ----------------------------------------------------------------------------- options */

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
    {FLAG_MEMORY_LIMIT, "--memory-limit", "BYTES",
     "the most memory the run may need, in bytes or with a suffix K, M, G or T (powers of\n"
     "      1024); a larger input is refused at once, with the estimate, before anything is\n"
     "      allocated (default 0: 8G)"},
    {FLAG_JSON, "--json", NULL,
     "print the plan (or the rank view) as one JSON line (docs/cli-json.md)"},
    {FLAG_SVG, "--svg", "FILE", "also write the plan as an SVG timeline (ranks x time in ms)"},
    {FLAG_COMPARE, "--compare", NULL,
     "with --svg: draw static, greedy and dynamic one above the other on one time scale"},
    {FLAG_SAVE_PLAN, "--save-plan", "FILE",
     "also write the plan in the exchange format (dcp_plan_serialize; Python reads it\n"
     "      with libdcp.Plan.from_bytes)"},
    {FLAG_OUTPUT, "--output", "FILE",
     "write what would go to stdout (the summary, the JSON or the rank view) to FILE"},
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
          "                [--strategy dynamic|static|greedy] [--improve-moves N]\n"
          "                [--cp-sizes pow2|megatron|any|LIST] [--head-count H]\n"
          "                [--cover-ranks 0|1] [--memory-limit BYTES]\n"
          "                [--json] [--svg FILE [--compare]] [--save-plan FILE]\n"
          "                [--output FILE] [--rank R --microbatch K]\n"
          "       dcp-plan --help | --version\n",
          out);
}

static void help(void)
{
    int i;
    usage(stdout);
    printf("\nPlans which sample runs on how many ranks (its CP size) in which microbatch.\n"
           "Options (a value follows as the next argument or after '=', a number with no space\n"
           "around it; each option at most once; each dcp_config field is the option of its\n"
           "name, and 0 means its default as in C and Python):\n");
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

/* strtoll and strtod skip leading white space but stop at trailing: " 4" would pass where
   "4 " fails. A number is the whole argument, so neither is taken. */
static int has_surrounding_space(const char *text)
{
    size_t length = strlen(text);
    return length > 0 && (isspace((unsigned char)text[0]) ||
                          isspace((unsigned char)text[length - 1]));
}

/* 1 when text is an integer and nothing else; errno is ERANGE when it is beyond long long. */
static int read_integer(const char *text, long long *value)
{
    char *end;
    errno = 0;
    *value = strtoll(text, &end, 10);
    return end != text && *end == '\0' && !has_surrounding_space(text);
}

/* Whole-string integer in [lo, hi]; no silent truncation. */
static int parse_int(const char *flag, const char *text, long long lo, long long hi,
                     long long *value)
{
    long long v;
    if (!read_integer(text, &v)) {
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
    if (end == text || *end != '\0' || !(v == v) || has_surrounding_space(text)) {
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

/* BYTES: a whole number, or one followed by K, M, G or T (2^10, 2^20, 2^30, 2^40 bytes). */
static int parse_bytes(const char *flag, const char *text, int64_t *value)
{
    static const char units[] = "KMGT";
    char number[BYTES_TEXT_CAPACITY];
    size_t length = strlen(text);
    const char *unit = length ? strchr(units, text[length - 1]) : NULL;
    int shift = unit && *unit ? BITS_PER_UNIT_STEP * (int)(unit - units + 1) : 0;
    long long v;
    if (shift) length--;
    if (length >= sizeof number) length = sizeof number - 1; /* too long: refused below */
    memcpy(number, text, length);
    number[length] = '\0';
    if (!read_integer(number, &v) || v < 0) {
        fprintf(stderr, "dcp-plan: %s expects a byte count (digits, then optionally K, M, G or "
                        "T), got '%s'\n", flag, text);
        return 0;
    }
    if (errno == ERANGE || v > (INT64_MAX >> shift)) {
        fprintf(stderr, "dcp-plan: %s must be at most %lld bytes, got '%s'\n", flag,
                (long long)INT64_MAX, text);
        return 0;
    }
    *value = (int64_t)v << shift;
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
    case FLAG_SVG: o->outputs[OUTPUT_SVG].path = value; break;
    case FLAG_SAVE_PLAN: o->outputs[OUTPUT_SAVED_PLAN].path = value; break;
    case FLAG_OUTPUT: o->outputs[OUTPUT_TEXT].path = value; break;
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
    case FLAG_HEADS:
        ok = parse_default_field(flag, value, DCP_MAX_HEAD_COUNT, &c->head_count);
        break;
    case FLAG_COVER: ok = parse_int32(flag->name, value, 0, 1, &c->cover_ranks); break;
    case FLAG_MEMORY_LIMIT: ok = parse_bytes(flag->name, value, &c->memory_limit); break;
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
    if (o->seen[flag->id]++)
        return fail_usage("%s is given more than once (give each option once)%s", name, "");
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

/* Two outputs on one path would replace each other. */
static int check_output_paths(const options *o)
{
    int a, b;
    for (a = 0; a < OUTPUT_COUNT; a++)
        for (b = a + 1; b < OUTPUT_COUNT; b++)
            if (o->outputs[a].path && o->outputs[b].path &&
                strcmp(o->outputs[a].path, o->outputs[b].path) == 0) {
                fprintf(stderr, "dcp-plan: %s and %s both name %s\n", o->outputs[a].flag,
                        o->outputs[b].flag, o->outputs[a].path);
                return 0;
            }
    return 1;
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
    if (o->compare && !o->outputs[OUTPUT_SVG].path)
        return fail_usage("--compare draws into --svg FILE%s%s", "", "");
    if (!check_output_paths(o)) return EXIT_USAGE;
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
    o->outputs[OUTPUT_SVG].flag = "--svg";
    o->outputs[OUTPUT_SAVED_PLAN].flag = "--save-plan";
    o->outputs[OUTPUT_TEXT].flag = "--output";
    for (i = 1; i < argc; i++)
        if ((status = parse_argument(o, argc, argv, &i)) != EXIT_SUCCESS) return status;
    return check_options(o);
}

/* ----------------------------------------------------------------------------- lengths */

/* The strategies a run plans: the chosen one; static and greedy for the summary, the JSON and
   --compare; dynamic as well for --compare when another strategy was chosen. */
static int32_t run_strategies(const options *o, dcp_strategy strategies[MAX_RUN_PLANS])
{
    int32_t n = 0;
    strategies[n++] = o->config.strategy;
    if (o->view_rank < 0 || o->compare) {
        strategies[n++] = DCP_STRATEGY_STATIC;
        strategies[n++] = DCP_STRATEGY_GREEDY;
    }
    if (o->compare && o->config.strategy != DCP_STRATEGY_DYNAMIC)
        strategies[n++] = DCP_STRATEGY_DYNAMIC;
    return n;
}

/* The run's memory, bounded before the lengths are allocated (--lognormal) or planned
   (--lengths): the lengths, and the library's bound for each plan the run makes (each plan
   lives on to the output). Refused with one line: exit 1, as the library's own refusal. */
static int check_memory(const options *o, int32_t count)
{
    dcp_strategy strategies[MAX_RUN_PLANS];
    int32_t plans = run_strategies(o, strategies), i;
    int64_t need = (int64_t)count * (int64_t)sizeof(int64_t), bytes = 0;
    dcp_config c = o->config, resolved;
    dcp_error error;
    for (i = 0; i < plans; i++) {
        c.strategy = strategies[i];
        if (dcp_plan_memory_estimate(&c, count, &bytes, &error) != DCP_OK) {
            fprintf(stderr, "dcp-plan: %s\n", error.message);
            return EXIT_USAGE;
        }
        need += bytes;
    }
    dcp_config_resolve(&c, &resolved, NULL); /* check_options resolved it already */
    if (need <= resolved.memory_limit) return EXIT_SUCCESS;
    fprintf(stderr, "dcp-plan: %d samples on %d ranks need about %.1f GiB (lengths and %d plans) "
                    "> memory limit %.1f GiB (--memory-limit)\n",
            (int)count, (int)resolved.ranks, (double)need / BYTES_PER_GIB, (int)plans,
            (double)resolved.memory_limit / BYTES_PER_GIB);
    return EXIT_PLAN_FAILED;
}

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
    if ((i = check_memory(o, (int32_t)n)) != EXIT_SUCCESS) return i;
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
    return check_memory(o, *count);
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

static void print_int64_array(FILE *out, const char *key, const int64_t *values, int32_t count)
{
    int32_t i;
    fprintf(out, "\"%s\":[", key);
    for (i = 0; i < count; i++) fprintf(out, "%s%lld", i ? "," : "", (long long)values[i]);
    fprintf(out, "]");
}

static void print_int32_values(FILE *out, const int32_t *values, int32_t count)
{
    int32_t i;
    fprintf(out, "[");
    for (i = 0; i < count; i++) fprintf(out, "%s%d", i ? "," : "", (int)values[i]);
    fprintf(out, "]");
}

static void print_int32_array(FILE *out, const char *key, const int32_t *values, int32_t count)
{
    fprintf(out, "\"%s\":", key);
    print_int32_values(out, values, count);
}

static void print_config_json(FILE *out, const dcp_config *c)
{
    fprintf(out, "\"config\":{\"ranks\":%d,\"max_tokens_per_rank\":%lld,\"sync_ranks\":%d,"
                 "\"min_cp\":%d,\"max_cp\":%d,\"microbatch_multiple\":%d,\"pad_multiple_cp1\":%d,"
                 "\"pad_multiple\":%d,\"cost\":{\"attn_coeff\":%.17g,\"linear_coeff\":%.17g,"
                 "\"ring_step_cost\":%.17g},\"ring_charge\":\"%s\",\"strategy\":\"%s\","
                 "\"improve_moves\":%d,\"cp_sizes\":",
                 (int)c->ranks, (long long)c->max_tokens_per_rank, (int)c->sync_ranks,
                 (int)c->min_cp, (int)c->max_cp, (int)c->microbatch_multiple,
                 (int)c->pad_multiple_cp1, (int)c->pad_multiple, c->cost.attn_coeff,
                 c->cost.linear_coeff, c->cost.ring_step_cost,
                 c->ring_charge == DCP_RING_PER_SAMPLE ? "sample" : "group",
                 dcp_strategy_name(c->strategy), (int)c->improve_moves);
    if (c->cp_sizes == DCP_CP_SIZES_LIST)
        print_int32_values(out, c->cp_size_list, c->cp_size_count);
    else
        fprintf(out, "\"%s\"", dcp_cp_sizes_name(c->cp_sizes));
    /* the fields in dcp_config's order, as Plan.to_json prints them */
    fprintf(out, ",\"head_count\":%d,\"cover_ranks\":%d,\"memory_limit\":%lld}",
            (int)c->head_count, (int)c->cover_ranks, (long long)c->memory_limit);
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

static void print_groups_json(FILE *out, const dcp_plan *plan, const double *start,
                              const double *end)
{
    int32_t k, g;
    fprintf(out, "\"microbatches\":[");
    for (k = 0; k < plan->num_microbatches; k++) {
        fprintf(out, "%s[", k ? "," : "");
        for (g = plan->microbatch_offsets[k]; g < plan->microbatch_offsets[k + 1]; g++) {
            const dcp_group *group = &plan->groups[g];
            fprintf(out, "%s{\"first_rank\":%d,\"cp\":%d,",
                    g > plan->microbatch_offsets[k] ? "," : "", (int)group->first_rank,
                    (int)group->cp);
            print_int32_array(out, "samples", plan->group_samples + group->sample_offset,
                              group->sample_count);
            fprintf(out, ",\"start_seconds\":%.9g,\"end_seconds\":%.9g}", start[g], end[g]);
        }
        fprintf(out, "]");
    }
    fprintf(out, "]");
}

static void print_stats_json(FILE *out, const dcp_plan *plan, const dcp_plan_stats *s)
{
    histogram h;
    int32_t i;
    plan_histogram(plan, &h);
    fprintf(out, "\"valid_tokens\":%lld,\"padded_tokens\":%lld,\"num_microbatches\":%d,"
                 "\"num_groups\":%d,\"idle_rank_microbatches\":%d,\"cp_histogram\":{",
                 (long long)s->valid_tokens, (long long)s->padded_tokens, (int)s->num_microbatches,
                 (int)s->num_groups, (int)s->idle_rank_microbatches);
    for (i = 0; i < h.count; i++)
        fprintf(out, "%s\"%d\":%d", i ? "," : "", (int)h.sizes[i], (int)h.samples[i]);
    fprintf(out, "},\"sync_ranks\":%d,\"step_seconds\":%.9g,\"lower_bound_seconds\":%.9g,"
                 "\"efficiency\":%.6f,\"dag_seconds\":%.9g,\"dag_lower_bound_seconds\":%.9g,"
                 "\"dag_efficiency\":%.6f,\"barrier_seconds\":%.9g,"
                 "\"barrier_lower_bound_seconds\":%.9g,\"barrier_efficiency\":%.6f",
                 (int)s->sync_ranks, s->step_seconds, s->lower_bound_seconds, s->efficiency,
                 s->dag_seconds, s->dag_lower_bound_seconds, dag_efficiency(s), s->barrier_seconds,
                 s->barrier_lower_bound_seconds, barrier_efficiency(s));
}

static void print_baselines_json(FILE *out, const result *r, const result *static_plan,
                                 const result *greedy_plan)
{
    fprintf(out, "\"baselines\":{\"static\":{\"cp\":%d,\"step_seconds\":%.9g,\"speedup\":%.6f},"
                 "\"greedy\":{\"step_seconds\":%.9g,\"speedup\":%.6f}}",
                 plan_single_cp(static_plan->plan), static_plan->stats.step_seconds,
                 static_plan->stats.step_seconds / r->stats.step_seconds,
                 greedy_plan->stats.step_seconds,
                 greedy_plan->stats.step_seconds / r->stats.step_seconds);
}

/* What the JSON adds to the plan: each group's start and end under the plan's E and each
   sample's padded length, made before any output is written (a failure here touches no file). */
typedef struct json_times {
    double *start, *end;
    int64_t *padded;
} json_times;

static void json_times_free(json_times *t)
{
    free(t->start), free(t->end), free(t->padded);
}

static int json_times_make(const dcp_plan *plan, json_times *t)
{
    size_t groups = (size_t)plan->num_groups + 1;
    dcp_error error;
    int ok;
    t->start = (double *)malloc(groups * sizeof *t->start);
    t->end = (double *)malloc(groups * sizeof *t->end);
    t->padded = padded_lengths(plan);
    ok = t->start && t->end && t->padded;
    if (!ok) snprintf(error.message, sizeof error.message, "out of memory");
    ok = ok && dcp_plan_schedule(plan, NULL, t->start, t->end, &error) == DCP_OK;
    if (!ok) fprintf(stderr, "dcp-plan: %s\n", error.message);
    return ok;
}

static void print_json(FILE *out, const result *r, const result *static_plan,
                       const result *greedy_plan, const json_times *t)
{
    const dcp_plan *plan = r->plan;
    fprintf(out, "{\"version\":\"%d.%d.%d\",", DCP_VERSION_MAJOR, DCP_VERSION_MINOR,
            DCP_VERSION_PATCH);
    print_config_json(out, &plan->config);
    fprintf(out, ",\"samples\":%d,", (int)plan->num_samples);
    print_int64_array(out, "sample_lengths", plan->sample_lengths, plan->num_samples);
    fprintf(out, ",");
    print_int64_array(out, "padded_lengths", t->padded, plan->num_samples);
    fprintf(out, ",");
    print_groups_json(out, plan, t->start, t->end);
    fprintf(out, ",");
    print_stats_json(out, r->plan, &r->stats);
    fprintf(out, ",");
    print_baselines_json(out, r, static_plan, greedy_plan);
    fprintf(out, ",\"plan_seconds\":%.6g}\n", r->plan_seconds);
}

/* ---------------------------------------------------------------------- text summary */

static void print_summary(FILE *out, const result *r, const result *static_plan,
                          const result *greedy_plan)
{
    const dcp_plan *plan = r->plan;
    const dcp_plan_stats *s = &r->stats;
    histogram h;
    int32_t i;
    fprintf(out, "dcp-plan: %d samples, %lld valid tokens, %d ranks, max %lld padded tokens per "
                 "rank, strategy %s\n",
                 (int)plan->num_samples, (long long)s->valid_tokens, (int)plan->config.ranks,
                 (long long)plan->config.max_tokens_per_rank,
                 dcp_strategy_name(plan->config.strategy));
    fprintf(out, "  microbatches    %d (%d groups, %d idle rank-microbatches)\n",
                 (int)s->num_microbatches, (int)s->num_groups, (int)s->idle_rank_microbatches);
    plan_histogram(plan, &h);
    fprintf(out, "  cp histogram   ");
    for (i = 0; i < h.count; i++)
        fprintf(out, " cp=%d: %d samples;", (int)h.sizes[i], (int)h.samples[i]);
    fprintf(out, "\n");
    fprintf(out,
            "  step time       %.3f ms under sync ranks E = %d (blocks of E ranks in lockstep)\n",
            s->step_seconds * 1e3, (int)s->sync_ranks);
    fprintf(out, "  E = 1 (DAG)     %.3f ms (a group starts when all its ranks are free), "
                 "efficiency %.4f\n",
                 s->dag_seconds * 1e3, dag_efficiency(s));
    fprintf(out, "  E = D (barrier) %.3f ms (every microbatch waits for the slowest group), "
                 "efficiency %.4f\n",
                 s->barrier_seconds * 1e3, barrier_efficiency(s));
    fprintf(out, "  lower bound     %.3f ms (under E = %d)\n", s->lower_bound_seconds * 1e3,
                 (int)s->sync_ranks);
    fprintf(out, "  efficiency      %.4f (lower bound / step time)\n", s->efficiency);
    fprintf(out, "  static CP=%-5d %.3f ms, speed-up over static %.3fx\n",
                 plan_single_cp(static_plan->plan), static_plan->stats.step_seconds * 1e3,
                 static_plan->stats.step_seconds / s->step_seconds);
    fprintf(out, "  greedy          %.3f ms, speed-up over greedy %.3fx\n",
                 greedy_plan->stats.step_seconds * 1e3,
                 greedy_plan->stats.step_seconds / s->step_seconds);
    fprintf(out, "  plan time       %.3f ms\n", r->plan_seconds * 1e3);
}

/* ------------------------------------------------------------------------- rank view
   Rows are printed as dcp_rank_view_runs' runs: memory follows the view's samples, not its
   token count, so a view of 2^31 rows prints in constant memory. */

static void print_runs_json(FILE *out, const dcp_rank_view *v, const dcp_row_run *runs,
                            int32_t count)
{
    int32_t i;
    fprintf(out, "\"runs\":[");
    for (i = 0; i < count; i++)
        fprintf(out, "%s{\"first_row\":%lld,\"rows\":%lld,\"sample\":%d,\"position\":%lld}",
                     i ? "," : "", (long long)runs[i].first_row, (long long)runs[i].rows,
                     (int)v->samples[runs[i].slot], (long long)runs[i].position);
    fprintf(out, "]");
}

static void print_view_json(FILE *out, const dcp_rank_view *v, const dcp_row_run *runs,
                            int32_t count)
{
    fprintf(out, "{\"rank\":%d,\"microbatch\":%d,\"first_rank\":%d,\"cp\":%d,\"rank_in_group\":%d,"
                 "\"idle\":%s,",
                 (int)v->rank, (int)v->microbatch, (int)v->first_rank, (int)v->cp,
                 (int)v->rank_in_group, v->idle ? "true" : "false");
    print_int32_array(out, "samples", v->samples, v->num_samples);
    fprintf(out, ",");
    print_int64_array(out, "sample_lengths", v->sample_lengths, v->num_samples);
    fprintf(out, ",");
    print_int32_array(out, "cu_seqlens", v->cu_seqlens, v->num_samples + 1);
    fprintf(out, ",");
    print_int32_array(out, "cu_seqlens_padded", v->cu_seqlens_padded, v->num_samples + 1);
    fprintf(out, ",");
    print_int32_array(out, "local_offsets", v->local_offsets, v->num_samples + 1);
    fprintf(out, ",\"max_seqlen\":%d,\"local_tokens\":%lld,\"pad_multiple\":%lld,",
            (int)v->max_seqlen, (long long)v->local_tokens, (long long)v->pad_multiple);
    print_runs_json(out, v, runs, count);
    fprintf(out, "}\n");
}

static void print_list(FILE *out, const char *label, const int32_t *values, int32_t count)
{
    int32_t i;
    fprintf(out, "  %-18s", label);
    for (i = 0; i < count; i++) fprintf(out, " %d", (int)values[i]);
    fprintf(out, "\n");
}

static void print_view_summary(FILE *out, const dcp_rank_view *v, const dcp_row_run *runs,
                               int32_t count)
{
    int32_t i;
    if (v->idle) {
        fprintf(out, "rank %d, microbatch %d: idle (no group, no samples: it waits for the "
                     "microbatch's groups)\n",
                     (int)v->rank, (int)v->microbatch);
        return;
    }
    fprintf(out, "rank %d, microbatch %d: group of ranks %d-%d (cp %d), rank %d in the group\n",
                 (int)v->rank, (int)v->microbatch, (int)v->first_rank,
                 (int)(v->first_rank + v->cp - 1), (int)v->cp, (int)v->rank_in_group);
    print_list(out, "samples", v->samples, v->num_samples);
    print_list(out, "cu_seqlens", v->cu_seqlens, v->num_samples + 1);
    print_list(out, "cu_seqlens_padded", v->cu_seqlens_padded, v->num_samples + 1);
    print_list(out, "local_offsets", v->local_offsets, v->num_samples + 1);
    fprintf(out, "  max_seqlen         %d (padded)\n  local_tokens       %lld\n"
                 "  pad multiple       %lld\n  local rows:\n",
                 (int)v->max_seqlen, (long long)v->local_tokens, (long long)v->pad_multiple);
    for (i = 0; i < count; i++) {
        const dcp_row_run *run = &runs[i];
        fprintf(out, "    rows %lld-%lld: sample %d, ", (long long)run->first_row,
                     (long long)(run->first_row + run->rows - 1), (int)v->samples[run->slot]);
        if (run->position < 0)
            fprintf(out, "padding\n");
        else
            fprintf(out, "positions %lld-%lld\n", (long long)run->position,
                         (long long)(run->position + run->rows - 1));
    }
}

/* The THD metadata one rank receives for one microbatch: the view and its row runs, made
   (and the rank and microbatch checked against the plan) before any output is written. */
typedef struct view_rows {
    dcp_rank_view *view;
    dcp_row_run *runs;
    int32_t count;
} view_rows;

static void view_rows_free(view_rows *v)
{
    free(v->runs);
    dcp_rank_view_destroy(v->view);
}

static int view_rows_make(const options *o, const dcp_plan *plan, view_rows *v)
{
    dcp_error error;
    int status = EXIT_USAGE; /* a rank or microbatch outside the plan */
    if (dcp_rank_view_create(plan, o->view_rank, o->view_microbatch, &v->view, &error) ==
        DCP_OK) {
        status = EXIT_PLAN_FAILED;
        if (dcp_rank_view_runs(v->view, NULL, 0, &v->count, &error) == DCP_OK &&
            (v->runs = (dcp_row_run *)malloc(((size_t)v->count + 1) * sizeof *v->runs)) &&
            dcp_rank_view_runs(v->view, v->runs, v->count, &v->count, &error) == DCP_OK)
            status = EXIT_SUCCESS;
        else if (!v->runs)
            snprintf(error.message, sizeof error.message, "out of memory for %d runs",
                     (int)v->count);
    }
    if (status != EXIT_SUCCESS) fprintf(stderr, "dcp-plan: %s\n", error.message);
    return status;
}

static void print_view(FILE *out, const options *o, const view_rows *v)
{
    if (o->json)
        print_view_json(out, v->view, v->runs, v->count);
    else
        print_view_summary(out, v->view, v->runs, v->count);
}

/* ------------------------------------------------------------------------------- files
   A run replaces a file only once all of it has succeeded. Every check runs and every output
   is made in memory first; then each output goes to a temporary file beside its target
   (same directory, so same file system) which is renamed over the target, an atomic step.
   A failure at any point before the renames leaves every pre-existing file byte-identical
   and removes the temporaries (also on SIGINT, SIGTERM and SIGHUP). At the start each path
   is probed by creating and removing a temporary there, so that an unwritable path fails
   at once rather than after the plan. */

/* A new file's permissions before the umask, as fopen gives them. */
#define NEW_FILE_MODE 0666
#define PERMISSION_BITS 07777
#define TEMP_INFIX ".dcp-plan-"
#define TEMP_PATTERN "XXXXXX" /* mkstemp's */

/* The temporaries that exist now, for the signal handler; NULL where none. */
static char *volatile live_temps[OUTPUT_COUNT];

static void remove_temps_on_signal(int signal_number)
{
    int k;
    for (k = 0; k < OUTPUT_COUNT; k++)
        if (live_temps[k]) unlink(live_temps[k]);
    raise(signal_number); /* SA_RESETHAND: the default action now, exit by the signal */
}

static void install_signal_cleanup(void)
{
    static const int signals[] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction action;
    size_t i;
    memset(&action, 0, sizeof action);
    action.sa_handler = remove_temps_on_signal;
    action.sa_flags = SA_RESETHAND;
    sigemptyset(&action.sa_mask);
    for (i = 0; i < sizeof signals / sizeof signals[0]; i++) sigaction(signals[i], &action, NULL);
}

static int output_error(const output_file *out, const char *path, int error_number)
{
    fprintf(stderr, "dcp-plan: %s: cannot write %s: %s\n", out->flag, path,
            strerror(error_number));
    return 0;
}

/* Creates the temporary beside the target, hidden (".NAME.dcp-plan-XXXXXX"), with the
   target's permissions; returns its descriptor, or -1 with errno set. */
static int temp_create(output_file *out, int kind)
{
    const char *slash = strrchr(out->target, '/');
    size_t directory = slash ? (size_t)(slash - out->target) + 1 : 0;
    size_t size = strlen(out->target) + sizeof "." TEMP_INFIX TEMP_PATTERN;
    int fd, saved;
    if (!(out->temp = (char *)malloc(size))) return -1;
    snprintf(out->temp, size, "%.*s.%s" TEMP_INFIX TEMP_PATTERN, (int)directory, out->target,
             out->target + directory);
    if ((fd = mkstemp(out->temp)) < 0 || fchmod(fd, out->mode) != 0) {
        saved = errno;
        if (fd >= 0) close(fd), unlink(out->temp);
        free(out->temp);
        out->temp = NULL;
        errno = saved;
        return -1;
    }
    live_temps[kind] = out->temp;
    return fd;
}

/* Forgets the temporary, removing it first unless it was renamed over the target. */
static void temp_release(output_file *out, int kind, int renamed)
{
    live_temps[kind] = NULL;
    if (out->temp && !renamed) unlink(out->temp);
    free(out->temp);
    out->temp = NULL;
}

/* Where the bytes go and with which permissions: a symbolic link's file (the link stays;
   a dangling link is replaced as a file would be); an existing file's own mode, or a new
   file's default. A target that exists but is no regular file (/dev/null, a pipe) is written
   in place, after every check. */
static int output_resolve(output_file *out)
{
    struct stat st;
    mode_t mask = umask(0);
    umask(mask);
    out->mode = (mode_t)(NEW_FILE_MODE & ~mask);
    if (lstat(out->path, &st) == 0 && S_ISLNK(st.st_mode))
        out->target = realpath(out->path, NULL);
    if (!out->target && !(out->target = strdup(out->path)))
        return output_error(out, out->path, ENOMEM);
    if (stat(out->target, &st) != 0) return 1; /* a new file */
    if (S_ISDIR(st.st_mode)) return output_error(out, out->path, EISDIR);
    if (access(out->target, W_OK) != 0) return output_error(out, out->path, errno);
    out->in_place = !S_ISREG(st.st_mode);
    out->mode = (mode_t)(st.st_mode & PERMISSION_BITS);
    return 1;
}

/* At the start: the target is resolved and a temporary can be created beside it. */
static int output_check(output_file *out, int kind)
{
    int fd;
    if (!out->path) return 1;
    if (!output_resolve(out)) return 0;
    if (out->in_place) return 1;
    if ((fd = temp_create(out, kind)) < 0) return output_error(out, out->path, errno);
    close(fd);
    temp_release(out, kind, 0);
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

typedef struct bytes {
    char *data;
    size_t size;
} bytes;

typedef struct run_state {
    options o;
    int64_t *lengths;
    int32_t count;
    result plans[MAX_RUN_PLANS]; /* in run_strategies' order: chosen, static, greedy, dynamic */
    int32_t plan_count;
    json_times times;  /* with --json and no --rank */
    view_rows view;    /* with --rank */
    bytes svg, saved;  /* the contents of --svg and --save-plan */
} run_state;

/* The picture is dcp_plan_svg's: one plan, or static, greedy and dynamic on one time scale
   with --compare. */
static int make_svg(run_state *s)
{
    svg_request request;
    dcp_error error;
    request.plans[0] = s->plans[PLAN_CHOSEN].plan;
    request.count = 1;
    if (s->o.compare) {
        request.plans[0] = s->plans[PLAN_STATIC].plan;
        request.plans[1] = s->plans[PLAN_GREEDY].plan;
        request.plans[2] =
            s->plans[s->plan_count > PLAN_DYNAMIC ? PLAN_DYNAMIC : PLAN_CHOSEN].plan;
        request.count = 3;
    }
    if (!(s->svg.data = fill_buffer(fill_svg, &request, &s->svg.size, &error))) {
        fprintf(stderr, "dcp-plan: --svg: %s\n", error.message);
        return 0;
    }
    s->svg.size--; /* without the terminating NUL */
    return 1;
}

static int make_saved_plan(run_state *s)
{
    dcp_error error;
    if (!(s->saved.data = fill_buffer(fill_plan, s->plans[PLAN_CHOSEN].plan, &s->saved.size, &error))) {
        fprintf(stderr, "dcp-plan: --save-plan: %s\n", error.message);
        return 0;
    }
    return 1;
}

/* What goes to stdout, or to --output. */
static void print_result(FILE *out, const run_state *s)
{
    if (s->o.view_rank >= 0)
        print_view(out, &s->o, &s->view);
    else if (s->o.json)
        print_json(out, &s->plans[PLAN_CHOSEN], &s->plans[PLAN_STATIC], &s->plans[PLAN_GREEDY],
                   &s->times);
    else
        print_summary(out, &s->plans[PLAN_CHOSEN], &s->plans[PLAN_STATIC],
                      &s->plans[PLAN_GREEDY]);
}

static void write_content(FILE *file, const run_state *s, int kind)
{
    const bytes *b = kind == OUTPUT_SVG ? &s->svg : &s->saved;
    if (kind == OUTPUT_TEXT)
        print_result(file, s);
    else
        fwrite(b->data, 1, b->size, file);
}

/* One output into its temporary (or in place), flushed to the disk before the rename. */
static int output_write(output_file *out, const run_state *s, int kind)
{
    int fd = out->in_place ? -1 : temp_create(out, kind), ok;
    FILE *file = out->in_place ? fopen(out->target, "wb") : fd >= 0 ? fdopen(fd, "wb") : NULL;
    long size;
    if (!file) {
        int saved = errno;
        if (fd >= 0) close(fd);
        return output_error(out, out->path, saved);
    }
    write_content(file, s, kind);
    size = ftell(file);
    ok = fflush(file) == 0 && !ferror(file) && (out->in_place || fsync(fileno(file)) == 0);
    ok = (fclose(file) == 0) && ok;
    out->size = size < 0 ? 0 : (size_t)size;
    if (!ok) return output_error(out, out->path, errno);
    return 1;
}

/* Writes every output: the temporaries first, the in-place targets next, the renames last.
   A failure before the renames leaves every file as it was. */
static int commit_outputs(run_state *s)
{
    output_file *outputs = s->o.outputs;
    int k, pass, ok = 1;
    for (pass = 0; pass < 2; pass++) /* 0: temporaries, 1: in place */
        for (k = 0; ok && k < OUTPUT_COUNT; k++)
            if (outputs[k].path && outputs[k].in_place == pass)
                ok = output_write(&outputs[k], s, k);
    for (k = 0; ok && k < OUTPUT_COUNT; k++) {
        if (!outputs[k].temp) continue;
        if (rename(outputs[k].temp, outputs[k].target) != 0)
            ok = output_error(&outputs[k], outputs[k].path, errno);
        else
            temp_release(&outputs[k], k, 1);
    }
    for (k = 0; k < OUTPUT_COUNT; k++) temp_release(&outputs[k], k, 0);
    for (k = 0; ok && k < OUTPUT_COUNT; k++)
        if (outputs[k].path)
            fprintf(stderr, "dcp-plan: wrote %s (%zu bytes)\n", outputs[k].path, outputs[k].size);
    return ok;
}

/* Plans what the output needs (run_strategies). */
static int plan_all(run_state *s)
{
    dcp_strategy strategies[MAX_RUN_PLANS];
    int32_t count = run_strategies(&s->o, strategies);
    for (s->plan_count = 0; s->plan_count < count; s->plan_count++)
        if (!plan_with(&s->o.config, strategies[s->plan_count], s->lengths, s->count,
                       &s->plans[s->plan_count]))
            return EXIT_PLAN_FAILED;
    return EXIT_SUCCESS;
}

/* Everything the outputs print, made and checked before the first byte is written. */
static int make_outputs(run_state *s)
{
    const dcp_plan *chosen = s->plans[PLAN_CHOSEN].plan;
    if (s->o.view_rank >= 0) return view_rows_make(&s->o, chosen, &s->view);
    if (s->o.json && !json_times_make(chosen, &s->times)) return EXIT_PLAN_FAILED;
    if (s->o.outputs[OUTPUT_SVG].path && !make_svg(s)) return EXIT_PLAN_FAILED;
    if (s->o.outputs[OUTPUT_SAVED_PLAN].path && !make_saved_plan(s)) return EXIT_PLAN_FAILED;
    return EXIT_SUCCESS;
}

static void run_free(run_state *s)
{
    int k;
    for (k = 0; k < s->plan_count; k++) dcp_plan_destroy(s->plans[k].plan);
    dcp_free(NULL, s->lengths);
    json_times_free(&s->times);
    view_rows_free(&s->view);
    free(s->svg.data), free(s->saved.data);
    for (k = 0; k < OUTPUT_COUNT; k++) free(s->o.outputs[k].target);
}

/* Reads, plans, makes every output in memory, then writes the files and prints: every
   failure comes before the first byte written anywhere. */
static int run(run_state *s)
{
    int status = s->o.lengths_path ? file_lengths(&s->o, &s->lengths, &s->count)
                                   : lognormal_lengths(&s->o, &s->lengths, &s->count);
    if (status == EXIT_SUCCESS) status = plan_all(s);
    if (status == EXIT_SUCCESS) status = make_outputs(s);
    if (status == EXIT_SUCCESS && !commit_outputs(s)) status = EXIT_USAGE;
    if (status == EXIT_SUCCESS && !s->o.outputs[OUTPUT_TEXT].path) print_result(stdout, s);
    return status;
}

int main(int argc, char **argv)
{
    run_state s;
    int status, k;
    memset(&s, 0, sizeof s);
    if (argc == 1) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if ((status = parse_options(argc, argv, &s.o)) != EXIT_SUCCESS) return status;
    install_signal_cleanup();
    for (k = 0; k < OUTPUT_COUNT && status == EXIT_SUCCESS; k++)
        if (!output_check(&s.o.outputs[k], k)) status = EXIT_USAGE;
    if (status == EXIT_SUCCESS) status = run(&s);
    run_free(&s);
    return status;
}
