/* Plans byte for byte: the plan of each of a fixed set of workloads, as a 64-bit FNV-1a hash of
   its microbatches, groups and sample order, against tests/plan_golden.txt. A change to the
   planner that changes any plan fails here and names the workload, so refactoring the planner
   (its candidates, its tuning, its evaluators) is checked to keep every plan; a change meant
   to change plans rewrites the file (`build/test_plan_golden --write tests/plan_golden.txt`)
   and says why in its commit.
   The workloads: GOLDEN_RANDOM random ones as tests/test_plan_guarantee.c draws them (pools of
   2 to 1,024 ranks, powers of two or not; the five length shapes; both models; memory caps
   tight to loose; both ring charges; microbatch multiples), each planned under E = 1, a power
   of two between and D by the dynamic planner, and by greedy and static; GOLDEN_SETS more with
   Megatron's CP sizes, half covering every rank; GOLDEN_RANGES with every size or a list of
   sizes (groups on any range); and the plan-time rows of bench/plan_bench.c
   (8,192 samples on 1,024 ranks). The seed is fixed: the file holds the plans of these very
   workloads. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "test.h"
#include "../bench/length_shapes.h"

#define GOLDEN_SEED UINT64_C(20261128)
#define GOLDEN_FILE "tests/plan_golden.txt"
#define GOLDEN_RANDOM 240
#define GOLDEN_SETS 80
#define GOLDEN_RANGES 80
#define GOLDEN_LIST_SIZES 4
#define GOLDEN_MAX_SAMPLES 512
#define GOLDEN_MAX_RANKS 1024
#define GOLDEN_MIN_CAP 64
#define GOLDEN_MAX_CAP 16384
#define GOLDEN_MAX_MULTIPLE 4
/* the large rows: bench/plan_bench.c's plan-time target batch */
#define GOLDEN_LARGE_SAMPLES 8192
#define GOLDEN_LARGE_RANKS 1024
#define GOLDEN_LARGE_TOKENS 4096
#define GOLDEN_LARGE_TYPICAL 4096
#define GOLDEN_LARGE_LONGEST 65536
#define GOLDEN_NAME_CAPACITY 64
#define GOLDEN_FNV_OFFSET UINT64_C(14695981039346656037)
#define GOLDEN_FNV_PRIME UINT64_C(1099511628211)

static int64_t golden_lengths[GOLDEN_LARGE_SAMPLES];

typedef struct golden_case {
    char name[GOLDEN_NAME_CAPACITY];
    uint64_t hash;
} golden_case;

typedef struct golden_run {
    golden_case *cases;
    int32_t count, capacity;
} golden_run;

static uint64_t fnv_i64(uint64_t h, int64_t value)
{
    int byte;
    for (byte = 0; byte < 8; byte++) {
        h ^= (uint64_t)(((uint64_t)value >> (8 * byte)) & 0xff);
        h *= GOLDEN_FNV_PRIME;
    }
    return h;
}

/* The plan's content, not its config or format: K, the offsets, the groups, the order. */
static uint64_t plan_content_hash(const dcp_plan *plan)
{
    uint64_t h = fnv_i64(GOLDEN_FNV_OFFSET, plan->num_microbatches);
    int32_t i;
    for (i = 0; i <= plan->num_microbatches; i++) h = fnv_i64(h, plan->microbatch_offsets[i]);
    for (i = 0; i < plan->num_groups; i++) {
        h = fnv_i64(h, plan->groups[i].first_rank);
        h = fnv_i64(h, plan->groups[i].cp);
        h = fnv_i64(h, plan->groups[i].sample_count);
    }
    for (i = 0; i < plan->num_samples; i++) h = fnv_i64(h, plan->group_samples[i]);
    return h;
}

/* Plans one workload and records its hash under name (0 when the planner refused it). */
static void golden_plan(golden_run *run, const char *name, const dcp_config *config,
                        const int64_t *lengths, int32_t count)
{
    dcp_plan *plan = NULL;
    dcp_error error;
    golden_case *c;
    if (run->count == run->capacity) return;
    c = &run->cases[run->count++];
    snprintf(c->name, sizeof c->name, "%s", name);
    c->hash = 0;
    if (dcp_plan_create(config, lengths, count, &plan, &error) != DCP_OK) {
        printf("    %s: %s\n", name, error.message);
        return;
    }
    c->hash = plan_content_hash(plan);
    dcp_plan_destroy(plan);
}

static int64_t golden_longest(const dcp_config *config)
{
    dcp_config resolved;
    int64_t multiple = 1;
    dcp_config_resolve(config, &resolved, NULL);
    dcp_padded_length(&resolved, 1, resolved.max_cp, &multiple, NULL);
    return (int64_t)resolved.max_cp * resolved.max_tokens_per_rank / multiple * multiple;
}

static int32_t golden_pool(dcp_rng *rng)
{
    static const int32_t non_power[] = {6, 12, 24, 48, 96, 192, 384};
    switch (dcp_rng_below(rng, 3)) {
    case 0: return non_power[dcp_rng_below(rng, TEST_COUNT(non_power))];
    case 1: return (int32_t)1 << (1 + dcp_rng_below(rng, 10));
    default: return 2 + (int32_t)dcp_rng_below(rng, GOLDEN_MAX_RANKS - 1);
    }
}

/* A random workload into config, lengths, *count; the E strictly between 1 and D into *between
   (0 when the pool has none). */
static void golden_draw(dcp_rng *rng, dcp_config *config, int64_t *lengths, int32_t *count,
                        int32_t *between)
{
    const double spread = log((double)GOLDEN_MAX_CAP / GOLDEN_MIN_CAP);
    const int64_t cap = (int64_t)(GOLDEN_MIN_CAP * exp(spread * dcp_rng_uniform(rng)));
    const length_shape shape = (length_shape)dcp_rng_below(rng, LENGTH_SHAPES);
    int64_t typical;
    int32_t e, choices = 0;
    *config = make_config(golden_pool(rng), cap);
    config->microbatch_multiple = 1 + (int32_t)dcp_rng_below(rng, GOLDEN_MAX_MULTIPLE);
    if (dcp_rng_below(rng, 2)) config->cost.attn_coeff = 1.0;
    if (dcp_rng_below(rng, 3) == 0) config->ring_charge = DCP_RING_PER_SAMPLE;
    typical = (int64_t)((double)cap * exp2(7.0 * dcp_rng_uniform(rng) - 5.0));
    *count = 1 + (int32_t)dcp_rng_below(rng, GOLDEN_MAX_SAMPLES);
    length_batch(rng, shape, typical < 1 ? 1 : typical, golden_longest(config), lengths, *count);
    *between = 0;
    for (e = 2; e < config->ranks; e *= 2)
        if (config->ranks % e == 0 && dcp_rng_below(rng, (uint64_t)++choices) == 0) *between = e;
}

/* Every E of the workload with the dynamic planner, and the two baselines. */
static void golden_workload(golden_run *run, const char *kind, int32_t index, dcp_config config,
                            const int64_t *lengths, int32_t count, int32_t between)
{
    const int32_t syncs[3] = {1, between, 0};
    char name[GOLDEN_NAME_CAPACITY];
    int32_t m;
    for (m = 0; m < 3; m++) {
        if (m == 1 && between == 0) continue;
        config.sync_ranks = syncs[m];
        snprintf(name, sizeof name, "%s-%d-E%d", kind, (int)index, (int)syncs[m]);
        golden_plan(run, name, &config, lengths, count);
    }
    config.sync_ranks = 0;
    config.strategy = DCP_STRATEGY_GREEDY;
    snprintf(name, sizeof name, "%s-%d-greedy", kind, (int)index);
    golden_plan(run, name, &config, lengths, count);
    config.strategy = DCP_STRATEGY_STATIC;
    snprintf(name, sizeof name, "%s-%d-static", kind, (int)index);
    golden_plan(run, name, &config, lengths, count);
}

static void golden_large(golden_run *run)
{
    static const length_shape shapes[] = {LENGTH_LOGNORMAL, LENGTH_PARETO};
    char name[GOLDEN_NAME_CAPACITY];
    dcp_rng rng;
    size_t s;
    int model;
    for (s = 0; s < TEST_COUNT(shapes); s++)
        for (model = 0; model < 2; model++) {
            dcp_config config = make_config(GOLDEN_LARGE_RANKS, GOLDEN_LARGE_TOKENS);
            if (model) config.cost.attn_coeff = 1.0;
            dcp_rng_seed(&rng, GOLDEN_SEED + s);
            length_batch(&rng, shapes[s], GOLDEN_LARGE_TYPICAL, GOLDEN_LARGE_LONGEST,
                         golden_lengths, GOLDEN_LARGE_SAMPLES);
            snprintf(name, sizeof name, "large-%s-%s", length_shape_names[shapes[s]],
                     model ? "L2" : "default");
            golden_plan(run, name, &config, golden_lengths, GOLDEN_LARGE_SAMPLES);
        }
}

#ifndef GOLDEN_POW2_ONLY
/* Every size (even workloads, half of them covering every rank) or a list holding the
   largest power of two the lengths were drawn for (odd). */
static void golden_ranges(dcp_rng *rng, dcp_config *config, int32_t index)
{
    dcp_config drawn;
    int32_t i, extra, sizes[GOLDEN_LIST_SIZES + 1], n = 0, j, k;
    dcp_config_resolve(config, &drawn, NULL);
    if (index % 2 == 0) {
        config->cp_sizes = DCP_CP_SIZES_ANY;
        config->cover_ranks = index % 4 == 0;
        return;
    }
    sizes[n++] = drawn.max_cp;
    extra = (int32_t)dcp_rng_below(rng, GOLDEN_LIST_SIZES + 1);
    for (i = 0; i < extra; i++) sizes[n++] = 1 + (int32_t)dcp_rng_below(rng, (uint64_t)drawn.max_cp);
    for (i = 1; i < n; i++)
        for (j = i; j > 0 && sizes[j] < sizes[j - 1]; j--) {
            k = sizes[j];
            sizes[j] = sizes[j - 1];
            sizes[j - 1] = k;
        }
    config->cp_sizes = DCP_CP_SIZES_LIST;
    for (i = 0; i < n; i++)
        if (config->cp_size_count == 0 || config->cp_size_list[config->cp_size_count - 1] != sizes[i])
            config->cp_size_list[config->cp_size_count++] = sizes[i];
}
#endif

static void golden_all(golden_run *run)
{
    dcp_config config;
    dcp_rng rng;
    int32_t i, count, between;
    dcp_rng_seed(&rng, GOLDEN_SEED);
    for (i = 0; i < GOLDEN_RANDOM; i++) {
        golden_draw(&rng, &config, golden_lengths, &count, &between);
        golden_workload(run, "random", i, config, golden_lengths, count, between);
    }
#ifndef GOLDEN_POW2_ONLY /* for comparing with a dcp.h from before the CP-size sets */
    for (i = 0; i < GOLDEN_SETS; i++) {
        golden_draw(&rng, &config, golden_lengths, &count, &between);
        config.cp_sizes = DCP_CP_SIZES_MEGATRON;
        config.cover_ranks = i % 2;
        golden_workload(run, "megatron", i, config, golden_lengths, count, between);
    }
    for (i = 0; i < GOLDEN_RANGES; i++) {
        golden_draw(&rng, &config, golden_lengths, &count, &between);
        golden_ranges(&rng, &config, i);
        golden_workload(run, "ranges", i, config, golden_lengths, count, between);
    }
#endif
    golden_large(run);
}

enum { GOLDEN_CAPACITY = (GOLDEN_RANDOM + GOLDEN_SETS + GOLDEN_RANGES) * 5 + 8 };
static golden_case golden_cases[GOLDEN_CAPACITY];

static int golden_write(const char *path)
{
    golden_run run = {golden_cases, 0, GOLDEN_CAPACITY};
    FILE *f;
    int32_t i;
    golden_all(&run);
    if (!(f = fopen(path, "w"))) {
        perror(path);
        return 1;
    }
    fprintf(f, "# tests/test_plan_golden.c: workload, FNV-1a hash of its plan (0: refused)\n");
    for (i = 0; i < run.count; i++)
        fprintf(f, "%s %016llx\n", run.cases[i].name, (unsigned long long)run.cases[i].hash);
    fclose(f);
    printf("wrote %d plans to %s\n", (int)run.count, path);
    return 0;
}

static void plans_match_the_golden_file(void)
{
    golden_run run = {golden_cases, 0, GOLDEN_CAPACITY};
    char line[2 * GOLDEN_NAME_CAPACITY], name[GOLDEN_NAME_CAPACITY];
    unsigned long long hash;
    int32_t i = 0, differ = 0;
    FILE *f = fopen(GOLDEN_FILE, "r");
    CHECK(f != NULL);
    if (!f) return;
    golden_all(&run);
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        if (sscanf(line, "%63s %llx", name, &hash) != 2 || i >= run.count) {
            CHECK(0 && "golden file longer than the workloads or malformed");
            break;
        }
        CHECK(strcmp(name, run.cases[i].name) == 0);
        if (hash != run.cases[i].hash && differ++ < 10)
            fprintf(stderr, "  %s: plan %016llx, golden %016llx\n", name,
                    (unsigned long long)run.cases[i].hash, hash);
        i++;
    }
    fclose(f);
    CHECK_EQ(i, run.count);
    CHECK_EQ(differ, 0);
    printf("    %d plans compared, %d differ\n", (int)i, (int)differ);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"plans_match_the_golden_file", plans_match_the_golden_file},
    };
    if (argc == 3 && strcmp(argv[1], "--write") == 0) return golden_write(argv[2]);
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
