/* dcp.h must compile as C99, as C++ and under nvcc with every warning an error (the Makefile
   builds this file three ways) and behave the same in each: this smoke test plans a batch,
   checks the plan and runs the CPU references in whatever language compiled it. */
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

/* The references run the same in every language: a two-rank ring equals one rank on a
   sequence of three tokens (padded to four), and a conv1d of width 2 sums two taps. */
static void references_in_this_language(void)
{
    static const int32_t cu[] = {0, 3}, cu_padded[] = {0, 4};
    static const float x[] = {0.5f, -1.0f, 2.0f, 0.0f}, weight[] = {0.25f, 2.0f};
    dcp_thd_layout whole = {1, cu, cu_padded, 1}, split = {1, cu, cu_padded, 2};
    dcp_attention_params params;
    dcp_conv1d_params conv;
    /* q = k = v per row (one head of dim 1); rank r of the split holds rows r and 3 - r */
    float single[4] = {0.5f, -1.0f, 2.0f, 0.0f}, ranks[2][2] = {{0.5f, 0.0f}, {-1.0f, 2.0f}};
    float out[4], lse[4], ring_out[2][2], ring_lse[2][2], y[4];
    const float *in[2];
    float *outs[2], *lses[2];
    int row;
    memset(&params, 0, sizeof params);
    params.num_heads = 1;
    params.head_dim = 1;
    params.causal = 1;
    in[0] = ranks[0], in[1] = ranks[1];
    outs[0] = ring_out[0], outs[1] = ring_out[1], lses[0] = ring_lse[0], lses[1] = ring_lse[1];
    CHECK_EQ(dcp_attention_forward(&params, &whole, NULL, single, single, single, out, lse, NULL),
             DCP_OK);
    CHECK_EQ(dcp_ring_attention_forward(&params, &split, in, in, in, outs, lses, NULL, NULL),
             DCP_OK);
    CHECK_NEAR(ring_out[0][0], out[0], 1e-6);
    CHECK_NEAR(ring_out[1][0], out[1], 1e-6);
    CHECK_NEAR(ring_out[1][1], out[2], 1e-6);
    CHECK(ring_out[0][1] == 0.0f && out[3] == 0.0f); /* padding */
    memset(&conv, 0, sizeof conv);
    conv.channels = 1;
    conv.width = 2;
    CHECK_EQ(dcp_conv1d_forward(&conv, &whole, 4, x, weight, NULL, y, NULL), DCP_OK);
    for (row = 0; row < 3; row++)
        CHECK_NEAR(y[row], 2.0f * x[row] + (row > 0 ? 0.25f * x[row - 1] : 0.0f), 1e-6);
    CHECK(y[3] == 0.0f);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {{"plans_in_this_language", plans_in_this_language},
                                      {"references_in_this_language",
                                       references_in_this_language}};
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
