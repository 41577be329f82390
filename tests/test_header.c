/* dcp.h must compile as C99, as C++ and under nvcc with every warning an error (the Makefile
   builds this file three ways) and behave the same in each: this smoke test plans a batch and
   checks the plan in whatever language compiled it. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "test.h"

static void plans_in_this_language(void)
{
    int64_t lengths[100];
    dcp_lognormal distribution = {2048.0, 1.0, 128, 16384};
    dcp_config config;
    dcp_plan *plan = NULL;
    dcp_plan_stats stats;
    dcp_error error;
    memset(&config, 0, sizeof config);
    config.ranks = 8;
    config.max_tokens_per_rank = 4096;
    CHECK_EQ(dcp_lengths_lognormal(&distribution, 3, lengths, 100, &error), DCP_OK);
    CHECK_EQ(dcp_plan_create(&config, lengths, 100, &plan, &error), DCP_OK);
    CHECK_EQ(dcp_plan_validate(plan, &error), DCP_OK);
    CHECK_EQ(dcp_plan_simulate(plan, NULL, &stats, &error), DCP_OK);
    CHECK(stats.step_seconds >= stats.lower_bound_seconds);
    dcp_plan_destroy(plan);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {{"plans_in_this_language", plans_in_this_language}};
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
