/* Prints the size of every struct the Python package mirrors through ctypes and the offset of
   each of its fields, one per line ("size NAME BYTES", "offset NAME.FIELD BYTES"), as this C
   compiler lays them out, and the constants it mirrors ("constant NAME VALUE"). python/tests/test_planner.py compares them with the ctypes classes,
   so a field added to dcp.h and not to python/libdcp/_structs.py (or the reverse) fails loudly.
   Adding a field: one FIELD line here, one tuple in _structs.py. */
#include <stddef.h>
#include <stdio.h>

#include "../../dcp.h"

#define SIZE(type) printf("size %s %lu\n", #type, (unsigned long)sizeof(type))
#define FIELD(type, field) \
    printf("offset %s.%s %lu\n", #type, #field, (unsigned long)offsetof(type, field))

static void planner_structs(void)
{
    SIZE(dcp_error);
    FIELD(dcp_error, status);
    FIELD(dcp_error, message);
    SIZE(dcp_allocator);
    FIELD(dcp_allocator, alloc);
    FIELD(dcp_allocator, free);
    FIELD(dcp_allocator, user);
    SIZE(dcp_cost_model);
    FIELD(dcp_cost_model, attn_coeff);
    FIELD(dcp_cost_model, linear_coeff);
    FIELD(dcp_cost_model, ring_step_cost);
    SIZE(dcp_config);
    FIELD(dcp_config, ranks);
    FIELD(dcp_config, max_tokens_per_rank);
    FIELD(dcp_config, sync_ranks);
    FIELD(dcp_config, min_cp);
    FIELD(dcp_config, max_cp);
    FIELD(dcp_config, microbatch_multiple);
    FIELD(dcp_config, pad_multiple_cp1);
    FIELD(dcp_config, pad_multiple);
    FIELD(dcp_config, cost);
    FIELD(dcp_config, ring_charge);
    FIELD(dcp_config, strategy);
    FIELD(dcp_config, improve_moves);
    FIELD(dcp_config, cp_sizes);
    FIELD(dcp_config, cover_ranks);
    FIELD(dcp_config, cp_size_count);
    FIELD(dcp_config, cp_size_list);
    FIELD(dcp_config, head_count);
    FIELD(dcp_config, allocator);
    FIELD(dcp_config, memory_limit);
    SIZE(dcp_group);
    FIELD(dcp_group, first_rank);
    FIELD(dcp_group, cp);
    FIELD(dcp_group, sample_offset);
    FIELD(dcp_group, sample_count);
    SIZE(dcp_plan);
    FIELD(dcp_plan, config);
    FIELD(dcp_plan, num_samples);
    FIELD(dcp_plan, sample_lengths);
    FIELD(dcp_plan, num_microbatches);
    FIELD(dcp_plan, num_groups);
    FIELD(dcp_plan, microbatch_offsets);
    FIELD(dcp_plan, groups);
    FIELD(dcp_plan, group_samples);
    FIELD(dcp_plan, seal);
    SIZE(dcp_plan_stats);
    FIELD(dcp_plan_stats, step_seconds);
    FIELD(dcp_plan_stats, dag_seconds);
    FIELD(dcp_plan_stats, barrier_seconds);
    FIELD(dcp_plan_stats, lower_bound_seconds);
    FIELD(dcp_plan_stats, efficiency);
    FIELD(dcp_plan_stats, dag_lower_bound_seconds);
    FIELD(dcp_plan_stats, barrier_lower_bound_seconds);
    FIELD(dcp_plan_stats, sync_ranks);
    FIELD(dcp_plan_stats, busy_seconds);
    FIELD(dcp_plan_stats, num_microbatches);
    FIELD(dcp_plan_stats, num_groups);
    FIELD(dcp_plan_stats, idle_rank_microbatches);
    FIELD(dcp_plan_stats, samples_per_cp_level);
    FIELD(dcp_plan_stats, valid_tokens);
    FIELD(dcp_plan_stats, padded_tokens);
    FIELD(dcp_plan_stats, max_rank_tokens);
    SIZE(dcp_flops_stats);
    FIELD(dcp_flops_stats, valid_tokens);
    FIELD(dcp_flops_stats, padded_tokens);
    FIELD(dcp_flops_stats, sum_squared_valid);
    FIELD(dcp_flops_stats, sum_squared_padded);
    SIZE(dcp_lognormal);
    FIELD(dcp_lognormal, mean);
    FIELD(dcp_lognormal, sigma);
    FIELD(dcp_lognormal, min_length);
    FIELD(dcp_lognormal, max_length);
}

static void view_structs(void)
{
    SIZE(dcp_thd_layout);
    FIELD(dcp_thd_layout, num_sequences);
    FIELD(dcp_thd_layout, cu_seqlens);
    FIELD(dcp_thd_layout, cu_seqlens_padded);
    FIELD(dcp_thd_layout, cp);
    SIZE(dcp_rank_view);
    FIELD(dcp_rank_view, rank);
    FIELD(dcp_rank_view, microbatch);
    FIELD(dcp_rank_view, first_rank);
    FIELD(dcp_rank_view, cp);
    FIELD(dcp_rank_view, rank_in_group);
    FIELD(dcp_rank_view, idle);
    FIELD(dcp_rank_view, num_samples);
    FIELD(dcp_rank_view, samples);
    FIELD(dcp_rank_view, sample_lengths);
    FIELD(dcp_rank_view, pad_multiple);
    FIELD(dcp_rank_view, cu_seqlens);
    FIELD(dcp_rank_view, cu_seqlens_padded);
    FIELD(dcp_rank_view, local_offsets);
    FIELD(dcp_rank_view, max_seqlen);
    FIELD(dcp_rank_view, local_tokens);
    FIELD(dcp_rank_view, allocator);
    SIZE(dcp_transfer);
    FIELD(dcp_transfer, kind);
    FIELD(dcp_transfer, peer);
    FIELD(dcp_transfer, microbatch);
    FIELD(dcp_transfer, sample);
    FIELD(dcp_transfer, source_begin);
    FIELD(dcp_transfer, source_end);
    FIELD(dcp_transfer, destination_row);
    SIZE(dcp_reroute);
    FIELD(dcp_reroute, rank);
    FIELD(dcp_reroute, count);
    FIELD(dcp_reroute, transfers);
    FIELD(dcp_reroute, send_tokens);
    FIELD(dcp_reroute, recv_tokens);
    FIELD(dcp_reroute, copy_tokens);
    FIELD(dcp_reroute, allocator);
    SIZE(dcp_row_run);
    FIELD(dcp_row_run, slot);
    FIELD(dcp_row_run, first_row);
    FIELD(dcp_row_run, rows);
    FIELD(dcp_row_run, position);
    SIZE(dcp_varlen_call);
    FIELD(dcp_varlen_call, kv_rank);
    FIELD(dcp_varlen_call, causal);
    FIELD(dcp_varlen_call, num_sequences);
    FIELD(dcp_varlen_call, max_seqlen_q);
    FIELD(dcp_varlen_call, max_seqlen_k);
    FIELD(dcp_varlen_call, total_q);
    FIELD(dcp_varlen_call, total_k);
    SIZE(dcp_varlen_rows);
    FIELD(dcp_varlen_rows, slot);
    FIELD(dcp_varlen_rows, q_row);
    FIELD(dcp_varlen_rows, kv_row);
    FIELD(dcp_varlen_rows, cu_seqlens_q);
    FIELD(dcp_varlen_rows, cu_seqlens_k);
}

#define CONSTANT(name) printf("constant %s %ld\n", #name, (long)(name))

static void constants(void)
{
    CONSTANT(DCP_ERROR_MESSAGE_CAPACITY);
    CONSTANT(DCP_CP_LEVELS);
    CONSTANT(DCP_DEFAULT_SEED);
    CONSTANT(DCP_NO_GROUP);
    CONSTANT(DCP_ROW_RUNS_PER_SAMPLE);
    CONSTANT(DCP_CP_SIZE_LIST_CAPACITY);
    CONSTANT(DCP_VERSION_MAJOR);
    CONSTANT(DCP_VERSION_MINOR);
    CONSTANT(DCP_VERSION_PATCH);
}

static void kernel_structs(void)
{
    SIZE(dcp_attention_params);
    FIELD(dcp_attention_params, num_heads);
    FIELD(dcp_attention_params, num_kv_heads);
    FIELD(dcp_attention_params, head_dim);
    FIELD(dcp_attention_params, causal);
    FIELD(dcp_attention_params, softmax_scale);
    SIZE(dcp_attention_view);
    FIELD(dcp_attention_view, q_rank);
    FIELD(dcp_attention_view, q_half);
    FIELD(dcp_attention_view, kv_rank);
    FIELD(dcp_attention_view, kv_half);
    SIZE(dcp_ring_step);
    FIELD(dcp_ring_step, view);
    FIELD(dcp_ring_step, causal);
    SIZE(dcp_rope_options);
    FIELD(dcp_rope_options, style);
    FIELD(dcp_rope_options, rotary_dim);
    FIELD(dcp_rope_options, theta_base);
    FIELD(dcp_rope_options, inv_freq);
    SIZE(dcp_conv1d_params);
    FIELD(dcp_conv1d_params, channels);
    FIELD(dcp_conv1d_params, width);
    FIELD(dcp_conv1d_params, silu);
    SIZE(dcp_cuda_layout);
    FIELD(dcp_cuda_layout, thd);
    FIELD(dcp_cuda_layout, local_rows);
    FIELD(dcp_cuda_layout, max_seqlen_padded);
}

int main(void)
{
    planner_structs();
    view_structs();
    kernel_structs();
    constants();
    return 0;
}
