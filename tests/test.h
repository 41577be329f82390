/* test.h - the tiny test harness of libdcp's tests.

   A test is a void function; checks print file:line and both values when they fail and let
   the test continue. test_main() runs the tests named on the command line (substring match;
   all when none), prints one line per test and ends with the plain line "N passed, M failed"
   that tests/run_tests.sh adds up. A test may call test_skip("why") to count as skipped.
   Randomized tests seed their generators with test_seed_for(their fixed seed) (the GPU tests:
   test_seed(a clock-derived seed)); DCP_TEST_SEED=N shifts every fixed seed by N (replaces the
   GPU tests' clock), `make test-seeds` runs the suite under many N, and the seed in force is
   printed once per program, so that any failure repeats. */
#ifndef DCP_TEST_H
#define DCP_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_current_failures;
static const char *test_skip_reason;

#define CHECK(condition)                                                                       \
    do {                                                                                       \
        if (!(condition)) {                                                                    \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition);      \
            test_current_failures++;                                                           \
        }                                                                                      \
    } while (0)

#define CHECK_EQ(actual, expected)                                                             \
    do {                                                                                       \
        long long check_a_ = (long long)(actual), check_e_ = (long long)(expected);            \
        if (check_a_ != check_e_) {                                                            \
            fprintf(stderr, "%s:%d: %s == %s failed: got %lld, expected %lld\n", __FILE__,     \
                    __LINE__, #actual, #expected, check_a_, check_e_);                         \
            test_current_failures++;                                                           \
        }                                                                                      \
    } while (0)

/* |actual - expected| <= tolerance * max(1, |expected|) */
#define CHECK_NEAR(actual, expected, tolerance)                                                \
    do {                                                                                       \
        double check_a_ = (double)(actual), check_e_ = (double)(expected);                     \
        double check_scale_ = fabs(check_e_) > 1.0 ? fabs(check_e_) : 1.0;                     \
        if (!(fabs(check_a_ - check_e_) <= (tolerance) * check_scale_)) {                      \
            fprintf(stderr, "%s:%d: %s ~= %s failed: got %.17g, expected %.17g (tol %g)\n",    \
                    __FILE__, __LINE__, #actual, #expected, check_a_, check_e_,                \
                    (double)(tolerance));                                                      \
            test_current_failures++;                                                           \
        }                                                                                      \
    } while (0)

#define CHECK_CONTAINS(text, needle)                                                           \
    do {                                                                                       \
        const char *check_t_ = (text), *check_n_ = (needle);                                   \
        if (!check_t_ || !strstr(check_t_, check_n_)) {                                        \
            fprintf(stderr, "%s:%d: \"%s\" does not contain \"%s\"\n", __FILE__, __LINE__,     \
                    check_t_ ? check_t_ : "(null)", check_n_);                                 \
            test_current_failures++;                                                           \
        }                                                                                      \
    } while (0)

#if defined(__GNUC__) || defined(__clang__)
#define TEST_MAYBE_UNUSED __attribute__((unused))
#else
#define TEST_MAYBE_UNUSED
#endif

static TEST_MAYBE_UNUSED void test_skip(const char *reason) { test_skip_reason = reason; }

static uint64_t test_seed_value;
static int test_seed_printed;

/* The run's seed: DCP_TEST_SEED when it is set, else `fallback` (a program's fixed seed).
   The first call prints it, so that every failure can be repeated. */
static TEST_MAYBE_UNUSED uint64_t test_seed(uint64_t fallback)
{
    if (!test_seed_printed) {
        const char *env = getenv("DCP_TEST_SEED");
        test_seed_value = env && *env ? (uint64_t)strtoull(env, NULL, 10) : fallback;
        printf("seed %llu (repeat with DCP_TEST_SEED=%llu)\n",
               (unsigned long long)test_seed_value, (unsigned long long)test_seed_value);
        test_seed_printed = 1;
    }
    return test_seed_value;
}

/* The seed of a CPU test's generator: its own fixed seed, shifted by DCP_TEST_SEED (0 when
   unset, so a plain run is the fixed one). */
static TEST_MAYBE_UNUSED uint64_t test_seed_for(uint64_t fixed) { return test_seed(0) + fixed; }

/* An allocator (user data for dcp_allocator's alloc and free) that counts and can be told to
   fail after a number of allocations (fail_after < 0: never), for the tests that every
   allocation failure is reported cleanly and nothing leaks. */
typedef struct counting_allocator {
    long allocations, frees, fail_after;
} counting_allocator;

static TEST_MAYBE_UNUSED void *counting_alloc(void *user, size_t size)
{
    counting_allocator *c = (counting_allocator *)user;
    if (c->fail_after >= 0 && c->allocations >= c->fail_after) return NULL;
    c->allocations++;
    return malloc(size);
}

static TEST_MAYBE_UNUSED void counting_free(void *user, void *ptr)
{
    ((counting_allocator *)user)->frees++;
    free(ptr);
}

#ifdef DCP_H
/* The fixture of the planner, layout and communication tests: every field at its default
   (zero, as dcp_config_init) but the rank count and the per-rank token capacity. memset, not
   an initializer, so that the padding is zero too: tests memcmp configs (a plan's config
   against its deserialized copy). */
static TEST_MAYBE_UNUSED dcp_config make_config(int32_t ranks, int64_t max_tokens)
{
    dcp_config c;
    memset(&c, 0, sizeof c);
    c.ranks = ranks;
    c.max_tokens_per_rank = max_tokens;
    return c;
}

/* A hand-built plan: the tests own its arrays through the default allocator. */
static TEST_MAYBE_UNUSED dcp_plan *manual_plan(const dcp_config *config, const int64_t *lengths,
                                               int32_t samples, int32_t microbatches,
                                               const int32_t *offsets, const dcp_group *groups,
                                               int32_t num_groups, const int32_t *group_samples)
{
    dcp_plan *plan = (dcp_plan *)calloc(1, sizeof *plan);
    dcp_config_resolve(config, &plan->config, NULL);
    plan->num_samples = samples;
    plan->num_microbatches = microbatches;
    plan->num_groups = num_groups;
    plan->sample_lengths = (int64_t *)malloc((size_t)samples * sizeof(int64_t));
    plan->microbatch_offsets = (int32_t *)malloc((size_t)(microbatches + 1) * sizeof(int32_t));
    plan->groups = (dcp_group *)malloc((size_t)num_groups * sizeof(dcp_group));
    plan->group_samples = (int32_t *)malloc((size_t)samples * sizeof(int32_t));
    memcpy(plan->sample_lengths, lengths, (size_t)samples * sizeof(int64_t));
    memcpy(plan->microbatch_offsets, offsets, (size_t)(microbatches + 1) * sizeof(int32_t));
    memcpy(plan->groups, groups, (size_t)num_groups * sizeof(dcp_group));
    memcpy(plan->group_samples, group_samples, (size_t)samples * sizeof(int32_t));
    return plan;
}
#endif

typedef struct test_case {
    const char *name;
    void (*run)(void);
} test_case;

/* Which tests a run's arguments select: none, every test; NAME, the tests whose names contain
   it; -NAME leaves those out (out of every test when no NAME is given), so that a test added
   later runs under a selection that only leaves others out. */
static int test_selected(const char *name, int argc, char **argv)
{
    int a, named = 0, selected = 0;
    for (a = 1; a < argc; a++)
        if (argv[a][0] != '-') named = 1, selected |= strstr(name, argv[a]) != NULL;
    if (!named) selected = 1;
    for (a = 1; a < argc; a++)
        if (argv[a][0] == '-' && argv[a][1] && strstr(name, argv[a] + 1)) selected = 0;
    return selected;
}

static int test_main(const test_case *tests, int count, int argc, char **argv)
{
    int i, passed = 0, failed = 0, skipped = 0;
    for (i = 0; i < count; i++) {
        if (!test_selected(tests[i].name, argc, argv)) continue;
        test_current_failures = 0;
        test_skip_reason = NULL;
        tests[i].run();
        if (test_current_failures > 0) {
            printf("FAIL %s\n", tests[i].name);
            failed++;
        } else if (test_skip_reason) {
            printf("skip %s: %s\n", tests[i].name, test_skip_reason);
            skipped++;
        } else {
            printf("ok   %s\n", tests[i].name);
            passed++;
        }
    }
    if (skipped) printf("%d skipped\n", skipped);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#define TEST_COUNT(tests) ((int)(sizeof(tests) / sizeof((tests)[0])))

#endif
