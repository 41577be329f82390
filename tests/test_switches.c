/* dcp.h's two switches, in all four combinations (the Makefile builds this file once per
   combination, as C99 and as C++): DCP_NO_REFERENCE leaves out the CPU references and
   DCP_NO_DISTRIBUTED the distributed logic, while the planner, the data-loader layers and the
   operation contracts stay in every build. A left-out layer is shown absent by reusing its
   names for something else: the file compiles only when dcp.h declared none of them. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "test.h"

#ifdef DCP_NO_REFERENCE
/* Each clashes with the reference of the same name, had dcp.h declared it. */
static int dcp_attention_forward(int x) { return x + 1; }
static int dcp_ring_attention_forward(int x) { return x + 2; }
static int dcp_rope_forward(int x) { return x + 3; }
static int dcp_conv1d_forward(int x) { return x + 4; }

static void references_are_left_out(void)
{
    CHECK_EQ(dcp_attention_forward(1) + dcp_ring_attention_forward(2) + dcp_rope_forward(3) +
                 dcp_conv1d_forward(4),
             20);
}
#else
/* One query row against one key at cp 1: softmax over a single key gives that key's value. */
static void references_are_in(void)
{
    static const int32_t cu[] = {0, 1}, cu_padded[] = {0, 1};
    const dcp_thd_layout layout = {1, cu, cu_padded, 1};
    dcp_attention_params params;
    float q[2] = {1.0f, 0.0f}, k[2] = {0.5f, 0.5f}, v[2] = {3.0f, -2.0f};
    float out[2] = {0.0f, 0.0f}, lse = 0.0f;
    memset(&params, 0, sizeof params);
    params.num_heads = 1;
    params.head_dim = 2;
    CHECK_EQ(dcp_attention_forward(&params, &layout, NULL, q, k, v, out, &lse, NULL), DCP_OK);
    CHECK(out[0] == 3.0f && out[1] == -2.0f);
    CHECK(fabs(lse - 0.5 / sqrt(2.0)) < 1e-6); /* scale 1 / sqrt(head_dim) times q.k */
}
#endif

#ifdef DCP_NO_DISTRIBUTED
#if defined(DCP_METADATA_MIN_BYTES) || defined(DCP_COMM_TREE_ARITY)
#error "DCP_NO_DISTRIBUTED must leave out the distributed logic's macros"
#endif
typedef int dcp_comm_state;
static int dcp_comm_tree_node(int x) { return x + 5; }
static int dcp_ring_exchange_plan(int x) { return x + 6; }

static void distributed_logic_is_left_out(void)
{
    dcp_comm_state state = 1;
    CHECK_EQ(dcp_comm_tree_node(state) + dcp_ring_exchange_plan(2), 14);
}
#else
static void distributed_logic_is_in(void)
{
    dcp_comm_tree node;
    CHECK_EQ(dcp_comm_tree_node(8, 0, 3, &node, NULL), DCP_OK);
    CHECK_EQ(node.parent, 1);
}
#endif

/* The contracts the CUDA unit and the NCCL layer build on, in every combination. */
static void contracts_remain(void)
{
    dcp_attention_params params, resolved;
    dcp_ring_step step;
    dcp_conv1d_params conv, conv_resolved;
    memset(&params, 0, sizeof params);
    memset(&conv, 0, sizeof conv);
    memset(&resolved, 0, sizeof resolved);
    memset(&conv_resolved, 0, sizeof conv_resolved);
    params.num_heads = 8;
    params.head_dim = 64;
    CHECK_EQ(dcp_attention_params_resolve(&params, &resolved, NULL), DCP_OK);
    CHECK_EQ(resolved.num_kv_heads, 8);
    params.head_dim = DCP_MAX_HEAD_DIM + 1;
    CHECK_EQ(dcp_attention_params_resolve(&params, &resolved, NULL), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_ring_step_plan(4, 1, 2, 1, &step, NULL), DCP_OK);
    CHECK_EQ(step.view.kv_rank, 2); /* the ring order 0 2 3 1: two places before 1 */
    conv.channels = 16;
    CHECK_EQ(dcp_conv1d_params_resolve(&conv, &conv_resolved, NULL), DCP_OK);
    CHECK_EQ(conv_resolved.width, DCP_DEFAULT_CONV1D_WIDTH);
    CHECK_EQ(dcp_dtype_size(DCP_DTYPE_BFLOAT16), 2u);
}

static void planner_and_layout_remain(void)
{
    static const int32_t cu[] = {0, 5}, cu_padded[] = {0, 8};
    int64_t lengths[32], rows = 0;
    dcp_lognormal distribution = {1024.0, 1.0, 16, 4096};
    dcp_thd_layout layout = {1, cu, cu_padded, 4};
    dcp_config config = dcp_config_init();
    dcp_plan *plan = NULL;
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
    static const test_case tests[] = {
#ifdef DCP_NO_REFERENCE
        {"references_are_left_out", references_are_left_out},
#else
        {"references_are_in", references_are_in},
#endif
#ifdef DCP_NO_DISTRIBUTED
        {"distributed_logic_is_left_out", distributed_logic_is_left_out},
#else
        {"distributed_logic_is_in", distributed_logic_is_in},
#endif
        {"contracts_remain", contracts_remain},
        {"planner_and_layout_remain", planner_and_layout_remain}};
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
