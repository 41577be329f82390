/* DCP_NO_REFERENCE leaves the CPU references out and keeps everything else: this file
   reuses the references' names for other things, so it compiles only when dcp.h declared none
   of them, and it still plans a batch and checks a THD layout. */
#define DCP_NO_REFERENCE
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "test.h"

#if defined(DCP_MAX_HEAD_DIM) || defined(DCP_CONV1D_MAX_WIDTH) || defined(DCP_DEFAULT_ROPE_THETA)
#error "DCP_NO_REFERENCE must leave out the references' macros"
#endif

/* Each clashes with the reference of the same name, had dcp.h declared it. */
typedef int dcp_attention_params;
typedef int dcp_ring_step;
typedef int dcp_rope_options;
typedef int dcp_conv1d_params;
static int dcp_attention_forward(int x) { return x + 1; }
static int dcp_ring_attention_forward(int x) { return x + 2; }
static int dcp_rope_forward(int x) { return x + 3; }
static int dcp_conv1d_forward(int x) { return x + 4; }

static void references_are_left_out(void)
{
    dcp_attention_params a = 1;
    dcp_ring_step r = 2;
    dcp_rope_options o = 3;
    dcp_conv1d_params c = 4;
    CHECK_EQ(dcp_attention_forward(a) + dcp_ring_attention_forward(r) + dcp_rope_forward(o) +
                 dcp_conv1d_forward(c),
             20);
}

static void planner_and_layout_remain(void)
{
    static const int32_t cu[] = {0, 5}, cu_padded[] = {0, 8};
    int64_t lengths[32], rows = 0;
    dcp_lognormal distribution = {1024.0, 1.0, 16, 4096};
    dcp_thd_layout layout = {1, cu, cu_padded, 4};
    dcp_config config;
    dcp_plan *plan = NULL;
    memset(&config, 0, sizeof config);
    config.ranks = 4;
    config.max_tokens_per_rank = 4096;
    CHECK_EQ(dcp_lengths_lognormal(&distribution, 1, lengths, 32, NULL), DCP_OK);
    CHECK_EQ(dcp_plan_create(&config, lengths, 32, &plan, NULL), DCP_OK);
    CHECK_EQ(dcp_plan_validate(plan, NULL), DCP_OK);
    dcp_plan_destroy(plan);
    CHECK_EQ(dcp_thd_layout_validate(&layout, &rows, NULL), DCP_OK);
    CHECK_EQ(rows, 2);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {{"references_are_left_out", references_are_left_out},
                                      {"planner_and_layout_remain", planner_and_layout_remain}};
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
