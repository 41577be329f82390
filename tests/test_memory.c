/* The memory bound (issue 36): dcp_plan_memory_estimate is an upper bound on what
   dcp_plan_create allocates at its peak, measured with a counting allocator over every
   strategy, CP set, E, cover_ranks, length shape and a range of sizes, and it grows in
   proportion to the input; dcp_plan_create refuses a request above config.memory_limit before
   it allocates anything, fast, naming the estimate and the limit; the field resolves to its
   default, travels in the exchange format and counts in dcp_plan_compare. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "test.h"

#include <time.h>

#define MEMORY_SEED 3620
/* Workloads drawn from the grid below; each runs under the counting allocator. */
#ifndef MEMORY_WORKLOADS /* -DMEMORY_WORKLOADS=N for a longer search */
#define MEMORY_WORKLOADS 160
#endif
#define MEMORY_MAX_TOKENS 4096
/* A block's size sits in front of it, aligned for any type. */
#define MEMORY_HEADER 16
/* The request: 10^8 samples on 1,024 ranks, refused within a second. */
#define MEMORY_HUGE_COUNT 100000000
#define MEMORY_HUGE_RANKS 1024
#define MEMORY_REFUSAL_SECONDS 1.0
/* What the bound may charge a sample at most: a few KiB, whatever the config. */
#define MEMORY_MAX_BYTES_PER_SAMPLE 4096

typedef struct peak_allocator {
    size_t now, peak;
    long allocations;
} peak_allocator;

static void *peak_alloc(void *user, size_t size)
{
    peak_allocator *p = (peak_allocator *)user;
    unsigned char *block = (unsigned char *)malloc(size + MEMORY_HEADER);
    if (!block) return NULL;
    memcpy(block, &size, sizeof size);
    p->now += size;
    if (p->now > p->peak) p->peak = p->now;
    p->allocations++;
    return block + MEMORY_HEADER;
}

static void peak_free(void *user, void *ptr)
{
    peak_allocator *p = (peak_allocator *)user;
    unsigned char *block = (unsigned char *)ptr - MEMORY_HEADER;
    size_t size;
    memcpy(&size, block, sizeof size);
    p->now -= size;
    free(block);
}

static void use_peak_allocator(dcp_config *c, peak_allocator *p)
{
    memset(p, 0, sizeof *p);
    c->allocator.alloc = peak_alloc;
    c->allocator.free = peak_free;
    c->allocator.user = p;
}

/* ------------------------------------------------------------------------- workloads */

typedef enum length_shape {
    SHAPE_SHORT,     /* lognormal, all within one rank: every sample at CP size 1 */
    SHAPE_WIDE,      /* lognormal up to max_cp ranks' worth: every CP size */
    SHAPE_WHOLE,     /* every sample needs max_cp ranks: a microbatch per group */
    SHAPE_ALTERNATE, /* whole and short in turn: the most microbatches per sample */
    SHAPE_COUNT
} length_shape;

typedef struct workload {
    int32_t count, ranks;
    dcp_strategy strategy;
    dcp_cp_sizes sets;
    int32_t sync_one, cover, max_cp_two;
    length_shape shape;
} workload;

static const int32_t workload_counts[] = {1, 30, 1000, 10000, 20000};
static const int32_t workload_ranks[] = {2, 16, 48, 1024, 4096};

static workload draw_workload(dcp_rng *rng)
{
    workload w;
    w.count = workload_counts[dcp_rng_below(rng, TEST_COUNT(workload_counts))];
    w.ranks = workload_ranks[dcp_rng_below(rng, TEST_COUNT(workload_ranks))];
    w.strategy = (dcp_strategy)dcp_rng_below(rng, 3);
    w.sets = (dcp_cp_sizes)dcp_rng_below(rng, 4);
    w.sync_one = (int32_t)dcp_rng_below(rng, 2);
    w.cover = (int32_t)dcp_rng_below(rng, 2);
    w.max_cp_two = (int32_t)dcp_rng_below(rng, 2);
    w.shape = (length_shape)dcp_rng_below(rng, SHAPE_COUNT);
    return w;
}

static dcp_config workload_config(const workload *w)
{
    dcp_config c = make_config(w->ranks, MEMORY_MAX_TOKENS);
    int32_t size;
    c.strategy = w->strategy;
    c.cp_sizes = w->sets;
    c.sync_ranks = w->sync_one ? 1 : 0;
    c.cover_ranks = w->cover;
    c.max_cp = w->max_cp_two ? 2 : 0;
    if (w->sets == DCP_CP_SIZES_LIST) /* 1, 3, 9, ... within the pool */
        for (size = 1; size <= w->ranks && c.cp_size_count < DCP_CP_SIZE_LIST_CAPACITY; size *= 3)
            c.cp_size_list[c.cp_size_count++] = size;
    if (w->sets == DCP_CP_SIZES_LIST && w->max_cp_two) c.max_cp = 3;
    return c;
}

static void fill_lengths(const workload *w, const dcp_config *resolved, uint64_t seed,
                         int64_t *lengths)
{
    const int64_t widest = MEMORY_MAX_TOKENS * (int64_t)resolved->max_cp - 2 * resolved->max_cp;
    dcp_lognormal d;
    int32_t i;
    d.mean = w->shape == SHAPE_SHORT ? 1500.0 : (double)widest / 2;
    d.sigma = w->shape == SHAPE_SHORT ? 0.5 : 1.2;
    d.min_length = 64;
    d.max_length = w->shape == SHAPE_SHORT ? MEMORY_MAX_TOKENS : widest;
    CHECK_EQ(dcp_lengths_lognormal(&d, seed, lengths, w->count, NULL), DCP_OK);
    for (i = 0; i < w->count; i++)
        if (w->shape == SHAPE_WHOLE || (w->shape == SHAPE_ALTERNATE && i % 2))
            lengths[i] = widest;
}

static void print_workload(const char *label, const workload *w, const dcp_config *resolved,
                           size_t peak, int64_t estimate)
{
    printf("  %s: peak %zu, estimate %lld: %d samples, %d ranks, strategy %s, cp_sizes %s, E %d, "
           "cover %d, max_cp %d, shape %d\n",
           label, peak, (long long)estimate, (int)w->count, (int)w->ranks,
           dcp_strategy_name(w->strategy), dcp_cp_sizes_name(w->sets), (int)resolved->sync_ranks,
           (int)w->cover, (int)resolved->max_cp, (int)w->shape);
}

/* Plans one workload under the counting allocator: its peak against the estimate. */
static void check_workload(const workload *w, uint64_t seed, double *worst, double *sum_ratio)
{
    dcp_config c = workload_config(w), resolved;
    peak_allocator counter;
    int64_t *lengths, estimate = 0;
    dcp_plan *plan = NULL;
    dcp_error error;
    double ratio;
    if (dcp_config_resolve(&c, &resolved, NULL) != DCP_OK) return; /* e.g. cover on 2 sizes */
    lengths = (int64_t *)malloc((size_t)w->count * sizeof *lengths);
    fill_lengths(w, &resolved, seed, lengths);
    CHECK_EQ(dcp_plan_memory_estimate(&c, w->count, &estimate, &error), DCP_OK);
    use_peak_allocator(&c, &counter);
    /* a cover no plan can give fails: the bound holds for what it allocated all the same */
    if (dcp_plan_create(&c, lengths, w->count, &plan, &error) == DCP_OK)
        *sum_ratio += (double)estimate / (double)counter.peak;
    ratio = (double)counter.peak / (double)estimate;
    if (ratio > *worst) {
        *worst = ratio;
        print_workload("closest so far", w, &resolved, counter.peak, estimate);
    }
    if ((int64_t)counter.peak > estimate)
        print_workload("PEAK ABOVE THE ESTIMATE", w, &resolved, counter.peak, estimate);
    CHECK((int64_t)counter.peak <= estimate);
    dcp_plan_destroy(plan);
    CHECK_EQ(counter.now, 0);
    free(lengths);
}

static void peak_never_exceeds_estimate(void)
{
    dcp_rng rng;
    double worst = 0, sum_ratio = 0;
    int32_t i;
    uint64_t seed = test_seed_for(MEMORY_SEED);
    dcp_rng_seed(&rng, seed);
    for (i = 0; i < MEMORY_WORKLOADS; i++) {
        workload w = draw_workload(&rng);
        check_workload(&w, seed + (uint64_t)i, &worst, &sum_ratio);
    }
    printf("  %d workloads: largest peak / estimate %.3f, mean estimate / peak %.2f\n",
           (int)MEMORY_WORKLOADS, worst, sum_ratio / MEMORY_WORKLOADS);
}

/* The bound grows with the input and no faster: beyond the unloading table's cap every
   further sample adds the same bytes (at most MEMORY_MAX_BYTES_PER_SAMPLE), and the ranks add
   a term of their own; the baselines keep less than the search. */
static void estimate_is_proportional(void)
{
    dcp_config c = make_config(1024, MEMORY_MAX_TOKENS);
    int64_t one = 0, two = 0, ten = 0, wide = 0, baseline = 0;
    CHECK_EQ(dcp_plan_memory_estimate(&c, 1000000, &one, NULL), DCP_OK);
    CHECK_EQ(dcp_plan_memory_estimate(&c, 2000000, &two, NULL), DCP_OK);
    CHECK_EQ(dcp_plan_memory_estimate(&c, 10000000, &ten, NULL), DCP_OK);
    CHECK_EQ(ten - one, 9 * (two - one));
    CHECK(two - one > 0 && two - one <= INT64_C(1000000) * MEMORY_MAX_BYTES_PER_SAMPLE);
    printf("  %.0f bytes per sample on 1,024 ranks (dynamic)\n", (double)(two - one) / 1e6);
    c.ranks = 1 << 20;
    CHECK_EQ(dcp_plan_memory_estimate(&c, 1000000, &wide, NULL), DCP_OK);
    CHECK(wide > one);
    c.ranks = 1024;
    c.strategy = DCP_STRATEGY_STATIC;
    CHECK_EQ(dcp_plan_memory_estimate(&c, 1000000, &baseline, NULL), DCP_OK);
    CHECK(baseline < one);
}

static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* 10^8 samples on 1,024 ranks: refused at once, before a single allocation (the lengths are
   never read: one is enough to pass), with the estimate and the limit in the message. */
static void huge_request_refused_before_allocating(void)
{
    const int64_t one_length[1] = {4096};
    dcp_config c = make_config(MEMORY_HUGE_RANKS, MEMORY_MAX_TOKENS);
    peak_allocator counter;
    dcp_plan *plan = NULL;
    dcp_error error;
    int64_t estimate = 0;
    double start;
    char expected[DCP_ERROR_MESSAGE_CAPACITY];
    use_peak_allocator(&c, &counter);
    CHECK_EQ(dcp_plan_memory_estimate(&c, MEMORY_HUGE_COUNT, &estimate, NULL), DCP_OK);
    CHECK(estimate > DCP_DEFAULT_MEMORY_LIMIT);
    start = seconds_now();
    CHECK_EQ(dcp_plan_create(&c, one_length, MEMORY_HUGE_COUNT, &plan, &error),
             DCP_ERROR_OUT_OF_MEMORY);
    CHECK(seconds_now() - start < MEMORY_REFUSAL_SECONDS);
    CHECK(plan == NULL);
    CHECK_EQ(counter.allocations, 0);
    snprintf(expected, sizeof expected, "plan of %d samples on %d ranks needs about %.1f GiB",
             MEMORY_HUGE_COUNT, MEMORY_HUGE_RANKS, (double)estimate / (1 << 30));
    CHECK_CONTAINS(error.message, expected);
    CHECK_CONTAINS(error.message, "> memory limit 8.0 GiB (config.memory_limit)");
    printf("  %s\n", error.message);
}

/* The limit is the estimate's: a limit of exactly the estimate plans, one byte less refuses. */
static void limit_at_the_estimate(void)
{
    const int64_t lengths[] = {4096, 9000, 100, 30000, 2000};
    dcp_config c = make_config(16, MEMORY_MAX_TOKENS);
    peak_allocator counter;
    dcp_plan *plan = NULL;
    dcp_error error;
    int64_t estimate = 0;
    CHECK_EQ(dcp_plan_memory_estimate(&c, TEST_COUNT(lengths), &estimate, NULL), DCP_OK);
    use_peak_allocator(&c, &counter);
    c.memory_limit = estimate;
    CHECK_EQ(dcp_plan_create(&c, lengths, TEST_COUNT(lengths), &plan, &error), DCP_OK);
    CHECK((int64_t)counter.peak <= estimate);
    CHECK_EQ(plan ? plan->config.memory_limit : 0, estimate);
    dcp_plan_destroy(plan);
    plan = NULL;
    c.memory_limit = estimate - 1;
    counter.allocations = 0;
    CHECK_EQ(dcp_plan_create(&c, lengths, TEST_COUNT(lengths), &plan, &error),
             DCP_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(counter.allocations, 0);
    CHECK_CONTAINS(error.message, "(config.memory_limit)");
}

/* 0 resolves to the default, a negative limit is named, and the estimate checks its own
   arguments. */
static void limit_resolves_and_is_checked(void)
{
    dcp_config c = make_config(16, MEMORY_MAX_TOKENS), resolved;
    dcp_error error;
    int64_t bytes = 0;
    CHECK_EQ(dcp_config_resolve(&c, &resolved, NULL), DCP_OK);
    CHECK_EQ(resolved.memory_limit, DCP_DEFAULT_MEMORY_LIMIT);
    c.memory_limit = -5;
    CHECK_EQ(dcp_config_resolve(&c, &resolved, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "memory_limit must be >= 0 bytes (0: the default), got -5");
    CHECK_EQ(dcp_plan_memory_estimate(&c, 10, &bytes, &error), DCP_ERROR_INVALID_ARGUMENT);
    c.memory_limit = 0;
    CHECK_EQ(dcp_plan_memory_estimate(&c, 0, &bytes, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "count must be >= 1, got 0");
    CHECK_EQ(dcp_plan_memory_estimate(&c, 10, NULL, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "bytes");
    CHECK_EQ(dcp_plan_memory_estimate(NULL, 10, &bytes, &error), DCP_ERROR_INVALID_ARGUMENT);
}

/* The exchange format carries the limit, and two plans under different limits differ. */
static void limit_travels_with_the_plan(void)
{
    const int64_t lengths[] = {4096, 9000, 100};
    dcp_config c = make_config(4, MEMORY_MAX_TOKENS);
    dcp_plan *a = NULL, *b = NULL, *copy = NULL;
    dcp_error error;
    size_t size = 0;
    void *bytes;
    c.memory_limit = INT64_C(3) << 30;
    CHECK_EQ(dcp_plan_create(&c, lengths, TEST_COUNT(lengths), &a, NULL), DCP_OK);
    CHECK_EQ(dcp_plan_serialize(a, NULL, 0, &size, NULL), DCP_OK);
    bytes = malloc(size);
    CHECK_EQ(dcp_plan_serialize(a, bytes, size, &size, NULL), DCP_OK);
    CHECK_EQ(dcp_plan_deserialize(bytes, size, NULL, &copy, NULL), DCP_OK);
    CHECK_EQ(copy ? copy->config.memory_limit : 0, INT64_C(3) << 30);
    CHECK_EQ(dcp_plan_compare(a, copy, NULL), DCP_OK);
    c.memory_limit = 0;
    CHECK_EQ(dcp_plan_create(&c, lengths, TEST_COUNT(lengths), &b, NULL), DCP_OK);
    CHECK_EQ(dcp_plan_compare(a, b, &error), DCP_ERROR_INVALID_PLAN);
    CHECK_CONTAINS(error.message, "config memory_limit 3221225472 vs 8589934592");
    free(bytes);
    dcp_plan_destroy(a), dcp_plan_destroy(b), dcp_plan_destroy(copy);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"peak_never_exceeds_estimate", peak_never_exceeds_estimate},
        {"estimate_is_proportional", estimate_is_proportional},
        {"huge_request_refused_before_allocating", huge_request_refused_before_allocating},
        {"limit_at_the_estimate", limit_at_the_estimate},
        {"limit_resolves_and_is_checked", limit_resolves_and_is_checked},
        {"limit_travels_with_the_plan", limit_travels_with_the_plan},
    };
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
