/* The C side of tests/test_frontends.sh: one input through C, dcp-plan and Python must give one
   plan, byte for byte. For each case of the table below it plans with the C API (fields set
   on dcp_config_init(), lengths from dcp_lengths_lognormal with the case's seed or
   DCP_DEFAULT_SEED), writes the serialized plan to DIR/NAME.plan and prints one line
       NAME <tab> dcp-plan arguments <tab> Python keyword arguments as JSON
   that give the same input to the other two front ends: each field by its C name (--min-cp,
   min_cp=), a seed only when the case sets one, the cost coefficients each by name.
   Usage: frontend_cases DIR */
#define DCP_IMPLEMENTATION
#include "../dcp.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define MAX_SETTINGS 8
#define TEXT_CAPACITY 1024

typedef struct setting {
    const char *field; /* a dcp_config field, or a dcp_cost_model one */
    double value;
} setting;

typedef struct frontend_case {
    const char *name;
    dcp_lognormal lengths;
    int32_t count;
    long long seed; /* -1: none given (DCP_DEFAULT_SEED) */
    int32_t ranks;
    int64_t max_tokens_per_rank;
    const char *strategy; /* NULL: none given */
    setting settings[MAX_SETTINGS];
} frontend_case;

/* What the front ends share: 0 is the default for every field, the three cost coefficients
   all 0 are the default model, one coefficient given leaves the others 0, the seed defaults
   to DCP_DEFAULT_SEED. */
static const frontend_case cases[] = {
    {"defaults", {4096, 1.1, 1024, 8192}, 128, -1, 16, 4096, NULL, {{NULL, 0}}},
    {"seed", {4096, 1.1, 1024, 8192}, 128, 7, 16, 4096, NULL, {{NULL, 0}}},
    {"zero-is-default", {4096, 1.1, 1024, 8192}, 128, -1, 16, 4096, NULL,
     {{"sync_ranks", 0}, {"min_cp", 0}, {"max_cp", 0}, {"microbatch_multiple", 0},
      {"pad_multiple_cp1", 0}, {"pad_multiple", 0}, {"improve_moves", 0}, {NULL, 0}}},
    {"all-zero-cost", {4096, 1.1, 1024, 8192}, 128, 3, 16, 4096, NULL,
     {{"attn_coeff", 0}, {"linear_coeff", 0}, {"ring_step_cost", 0}, {NULL, 0}}},
    {"one-coefficient", {4096, 1.1, 1024, 8192}, 128, 3, 16, 4096, NULL,
     {{"attn_coeff", 1e-10}, {NULL, 0}}},
    {"full-cost", {8192, 1.2, 256, 65536}, 200, 11, 32, 8192, NULL,
     {{"attn_coeff", 3.5e-11}, {"linear_coeff", 2e-6}, {"ring_step_cost", 4e-5}, {NULL, 0}}},
    {"dense", {16384, 1.0, 512, 131072}, 256, -1, 64, 16384, NULL,
     {{"sync_ranks", 1}, {NULL, 0}}},
    {"every-field", {4096, 1.1, 100, 30000}, 96, 5, 16, 8192, NULL,
     {{"sync_ranks", 4}, {"min_cp", 2}, {"max_cp", 8}, {"microbatch_multiple", 3},
      {"pad_multiple_cp1", 4}, {"pad_multiple", 8}, {"improve_moves", -1}, {NULL, 0}}},
    {"static", {4096, 1.1, 1024, 8192}, 128, 2, 16, 4096, "static", {{NULL, 0}}},
    {"greedy", {4096, 1.1, 1024, 8192}, 128, 2, 16, 4096, "greedy", {{NULL, 0}}},
    {"not-a-power-of-two", {6000, 1.3, 64, 90000}, 160, 9, 48, 8192, NULL,
     {{"sync_ranks", 16}, {NULL, 0}}},
};
#define CASE_COUNT ((int)(sizeof cases / sizeof cases[0]))

/* dcp_config's settable fields by name: where each lives and whether it is a coefficient. */
typedef struct field_spec {
    const char *name;
    size_t offset;
    int is_coefficient; /* a double of the cost model, else an int32_t of the config */
} field_spec;

#define CONFIG_INT(name) {#name, offsetof(dcp_config, name), 0}
static const field_spec fields[] = {
    CONFIG_INT(sync_ranks),
    CONFIG_INT(min_cp),
    CONFIG_INT(max_cp),
    CONFIG_INT(microbatch_multiple),
    CONFIG_INT(pad_multiple_cp1),
    CONFIG_INT(pad_multiple),
    CONFIG_INT(improve_moves),
    {"attn_coeff", offsetof(dcp_config, cost) + offsetof(dcp_cost_model, attn_coeff), 1},
    {"linear_coeff", offsetof(dcp_config, cost) + offsetof(dcp_cost_model, linear_coeff), 1},
    {"ring_step_cost", offsetof(dcp_config, cost) + offsetof(dcp_cost_model, ring_step_cost), 1},
};
#define FIELD_COUNT ((int)(sizeof fields / sizeof fields[0]))

static const field_spec *find_field(const char *name)
{
    int i;
    for (i = 0; i < FIELD_COUNT; i++)
        if (strcmp(fields[i].name, name) == 0) return &fields[i];
    return NULL;
}

/* Appends printf text to a fixed buffer (the case lines are short). */
static void append(char *text, const char *format, const char *a, const char *b)
{
    size_t used = strlen(text);
    snprintf(text + used, TEXT_CAPACITY - used, format, a, b);
}

static void number(char *out, size_t capacity, const field_spec *f, double value)
{
    if (f->is_coefficient)
        snprintf(out, capacity, "%.17g", value);
    else
        snprintf(out, capacity, "%lld", (long long)value);
}

/* The case's config, and its dcp-plan arguments and Python keywords. */
static int build(const frontend_case *c, dcp_config *config, char *cli, char *python)
{
    char value[64], flag[64], cost[TEXT_CAPACITY] = "";
    int i;
    size_t j;
    *config = dcp_config_init();
    config->ranks = c->ranks;
    config->max_tokens_per_rank = c->max_tokens_per_rank;
    snprintf(cli, TEXT_CAPACITY, "--lognormal %.17g,%.17g,%lld,%lld,%d --ranks %d "
             "--max-tokens-per-rank %lld", c->lengths.mean, c->lengths.sigma,
             (long long)c->lengths.min_length, (long long)c->lengths.max_length, (int)c->count,
             (int)c->ranks, (long long)c->max_tokens_per_rank);
    snprintf(python, TEXT_CAPACITY, "{\"lognormal\": [%.17g, %.17g, %lld, %lld, %d], \"ranks\": "
             "%d, \"max_tokens_per_rank\": %lld", c->lengths.mean, c->lengths.sigma,
             (long long)c->lengths.min_length, (long long)c->lengths.max_length, (int)c->count,
             (int)c->ranks, (long long)c->max_tokens_per_rank);
    if (c->seed >= 0) {
        snprintf(value, sizeof value, "%lld", c->seed);
        append(cli, " --seed %s%s", value, "");
        append(python, ", \"seed\": %s%s", value, "");
    }
    if (c->strategy) {
        config->strategy = strcmp(c->strategy, "static") == 0 ? DCP_STRATEGY_STATIC
                                                             : DCP_STRATEGY_GREEDY;
        append(cli, " --strategy %s%s", c->strategy, "");
        append(python, ", \"strategy\": \"%s\"%s", c->strategy, "");
    }
    for (i = 0; i < MAX_SETTINGS && c->settings[i].field; i++) {
        const field_spec *f = find_field(c->settings[i].field);
        unsigned char *at = (unsigned char *)config;
        if (!f) return 0;
        at += f->offset;
        if (f->is_coefficient)
            *(double *)(void *)at = c->settings[i].value;
        else
            *(int32_t *)(void *)at = (int32_t)c->settings[i].value;
        number(value, sizeof value, f, c->settings[i].value);
        snprintf(flag, sizeof flag, "--%s", f->name);
        for (j = 2; flag[j]; j++)
            if (flag[j] == '_') flag[j] = '-';
        append(cli, " %s %s", flag, value);
        append(f->is_coefficient ? cost : python, f->is_coefficient && !cost[0] ? "\"%s\": %s"
                                                                                  : ", \"%s\": %s",
               f->name, value);
    }
    if (cost[0]) append(python, ", \"cost\": {%s}%s", cost, "");
    append(python, "}%s%s", "", "");
    return 1;
}

static int write_plan(const char *dir, const char *name, const dcp_plan *plan)
{
    static unsigned char bytes[1 << 20];
    char path[TEXT_CAPACITY];
    size_t size = 0;
    FILE *f;
    int ok;
    if (dcp_plan_serialize(plan, bytes, sizeof bytes, &size, NULL) != DCP_OK) return 0;
    snprintf(path, sizeof path, "%s/%s.plan", dir, name);
    if (!(f = fopen(path, "wb"))) return 0;
    ok = fwrite(bytes, 1, size, f) == size;
    return fclose(f) == 0 && ok;
}

int main(int argc, char **argv)
{
    static int64_t lengths[1024];
    char cli[TEXT_CAPACITY], python[TEXT_CAPACITY];
    dcp_config config;
    dcp_plan *plan;
    dcp_error error;
    int i;
    if (argc != 2) {
        fprintf(stderr, "usage: frontend_cases DIR\n");
        return 2;
    }
    for (i = 0; i < CASE_COUNT; i++) {
        const frontend_case *c = &cases[i];
        uint64_t seed = c->seed >= 0 ? (uint64_t)c->seed : DCP_DEFAULT_SEED;
        plan = NULL;
        if (!build(c, &config, cli, python)) {
            fprintf(stderr, "frontend_cases: case %s sets a field not in the table\n", c->name);
            return 1;
        }
        if (dcp_lengths_lognormal(&c->lengths, seed, lengths, c->count, &error) != DCP_OK ||
            dcp_plan_create(&config, lengths, c->count, &plan, &error) != DCP_OK ||
            !write_plan(argv[1], c->name, plan)) {
            fprintf(stderr, "frontend_cases: case %s: %s\n", c->name,
                    plan ? "cannot write its plan" : error.message);
            dcp_plan_destroy(plan);
            return 1;
        }
        printf("%s\t%s\t%s\n", c->name, cli, python);
        dcp_plan_destroy(plan);
    }
    return 0;
}
