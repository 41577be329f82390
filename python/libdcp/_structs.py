"""ctypes mirrors of the dcp.h structs the package passes to the library.

Each class lists its fields in dcp.h's order with dcp.h's names and widths (enums are C ints).
python/tests/test_planner.py compares every size and offset with what the C compiler reports
(build/dcp-struct-layout), so a drift fails the tests instead of corrupting memory. Adding a
field to a dcp.h struct is one tuple here (and one FIELD line in python/tests/struct_layout.c);
a new dcp_config field is then also accepted by ``libdcp.plan(**config)`` without further code.
"""
import ctypes

c_int32, c_int64, c_double, c_void_p, c_enum = (ctypes.c_int32, ctypes.c_int64, ctypes.c_double,
                                                ctypes.c_void_p, ctypes.c_int)
c_int32_p, c_int64_p = ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int64)

# dcp.h's constants the package uses (python/tests/test_planner.py compares them with C's).
ERROR_MESSAGE_CAPACITY = 256  # DCP_ERROR_MESSAGE_CAPACITY
CP_LEVELS = 21                # DCP_CP_LEVELS
DEFAULT_SEED = 1              # DCP_DEFAULT_SEED: the seed when none is given, as dcp-plan's
NO_GROUP = -1                 # DCP_NO_GROUP: first_rank and rank_in_group of an idle view
ROW_RUNS_PER_SAMPLE = 3       # DCP_ROW_RUNS_PER_SAMPLE
CP_SIZE_LIST_CAPACITY = 16    # DCP_CP_SIZE_LIST_CAPACITY
DTYPE_FLOAT32, DTYPE_BFLOAT16, DTYPE_FLOAT16 = 0, 1, 2  # dcp_dtype
HALF_ALL, HALF_FIRST, HALF_SECOND = 0, 1, 2             # dcp_half
CONSTANTS = {"DCP_ERROR_MESSAGE_CAPACITY": ERROR_MESSAGE_CAPACITY, "DCP_CP_LEVELS": CP_LEVELS,
             "DCP_DEFAULT_SEED": DEFAULT_SEED, "DCP_NO_GROUP": NO_GROUP,
             "DCP_ROW_RUNS_PER_SAMPLE": ROW_RUNS_PER_SAMPLE,
             "DCP_CP_SIZE_LIST_CAPACITY": CP_SIZE_LIST_CAPACITY}


class Error(ctypes.Structure):
    _fields_ = [("status", c_enum), ("message", ctypes.c_char * ERROR_MESSAGE_CAPACITY)]


class Allocator(ctypes.Structure):
    _fields_ = [("alloc", c_void_p), ("free", c_void_p), ("user", c_void_p)]


class CostModel(ctypes.Structure):
    _fields_ = [("attn_coeff", c_double), ("linear_coeff", c_double),
                ("ring_step_cost", c_double)]


class Config(ctypes.Structure):
    _fields_ = [("ranks", c_int32), ("max_tokens_per_rank", c_int64), ("sync_ranks", c_int32),
                ("min_cp", c_int32),
                ("max_cp", c_int32), ("microbatch_multiple", c_int32),
                ("pad_multiple_cp1", c_int32), ("pad_multiple", c_int32), ("cost", CostModel),
                ("ring_charge", c_enum),  # dcp_ring_charge (issue 28)
                ("strategy", c_enum), ("improve_moves", c_int32),
                ("cp_sizes", c_enum),  # dcp_cp_sizes
                ("cp_size_count", c_int32), ("cp_size_list", c_int32 * CP_SIZE_LIST_CAPACITY),
                ("head_count", c_int32), ("cover_ranks", c_int32), ("allocator", Allocator)]


class Group(ctypes.Structure):
    _fields_ = [("first_rank", c_int32), ("cp", c_int32), ("sample_offset", c_int32),
                ("sample_count", c_int32)]


class Plan(ctypes.Structure):
    _fields_ = [("config", Config), ("num_samples", c_int32), ("sample_lengths", c_int64_p),
                ("num_microbatches", c_int32), ("num_groups", c_int32),
                ("microbatch_offsets", c_int32_p), ("groups", ctypes.POINTER(Group)),
                ("group_samples", c_int32_p), ("seal", ctypes.c_uint64)]


class PlanStats(ctypes.Structure):
    _fields_ = [("step_seconds", c_double), ("dag_seconds", c_double),
                ("barrier_seconds", c_double), ("lower_bound_seconds", c_double),
                ("efficiency", c_double), ("dag_lower_bound_seconds", c_double),
                ("barrier_lower_bound_seconds", c_double), ("sync_ranks", c_int32),
                ("busy_seconds", c_double), ("num_microbatches", c_int32),
                ("num_groups", c_int32), ("idle_rank_microbatches", c_int32),
                ("samples_per_cp_level", c_int32 * CP_LEVELS), ("valid_tokens", c_int64),
                ("padded_tokens", c_int64), ("max_rank_tokens", c_int64)]


class FlopsStats(ctypes.Structure):
    _fields_ = [("valid_tokens", c_int64), ("padded_tokens", c_int64),
                ("sum_squared_valid", c_int64), ("sum_squared_padded", c_int64)]


class Lognormal(ctypes.Structure):
    _fields_ = [("mean", c_double), ("sigma", c_double), ("min_length", c_int64),
                ("max_length", c_int64)]


class ThdLayout(ctypes.Structure):
    _fields_ = [("num_sequences", c_int32), ("cu_seqlens", c_int32_p),
                ("cu_seqlens_padded", c_int32_p), ("cp", c_int32)]


class RankView(ctypes.Structure):
    _fields_ = [("rank", c_int32), ("microbatch", c_int32), ("first_rank", c_int32),
                ("cp", c_int32), ("rank_in_group", c_int32), ("idle", c_int32),
                ("num_samples", c_int32), ("samples", c_int32_p), ("sample_lengths", c_int64_p),
                ("pad_multiple", c_int64), ("cu_seqlens", c_int32_p),
                ("cu_seqlens_padded", c_int32_p), ("local_offsets", c_int32_p),
                ("max_seqlen", c_int32), ("local_tokens", c_int64), ("allocator", Allocator)]


class Transfer(ctypes.Structure):
    _fields_ = [("kind", c_enum), ("peer", c_int32), ("microbatch", c_int32),
                ("sample", c_int32), ("source_begin", c_int64), ("source_end", c_int64),
                ("destination_row", c_int64)]


class Reroute(ctypes.Structure):
    _fields_ = [("rank", c_int32), ("count", c_int32), ("transfers", ctypes.POINTER(Transfer)),
                ("send_tokens", c_int64), ("recv_tokens", c_int64), ("copy_tokens", c_int64),
                ("allocator", Allocator)]


class RowRun(ctypes.Structure):
    _fields_ = [("slot", c_int32), ("first_row", c_int64), ("rows", c_int64),
                ("position", c_int64)]


class VarlenCall(ctypes.Structure):
    _fields_ = [("kv_rank", c_int32), ("causal", c_int32), ("num_sequences", c_int32),
                ("max_seqlen_q", c_int32), ("max_seqlen_k", c_int32), ("total_q", c_int64),
                ("total_k", c_int64)]


class VarlenRows(ctypes.Structure):
    _fields_ = [("slot", c_int32_p), ("q_row", c_int32_p), ("kv_row", c_int32_p),
                ("cu_seqlens_q", c_int32_p), ("cu_seqlens_k", c_int32_p)]


class AttentionParams(ctypes.Structure):
    _fields_ = [("num_heads", c_int32), ("num_kv_heads", c_int32), ("head_dim", c_int32),
                ("causal", c_int32), ("softmax_scale", c_double)]


class AttentionView(ctypes.Structure):
    _fields_ = [("q_rank", c_int32), ("q_half", c_enum), ("kv_rank", c_int32),
                ("kv_half", c_enum)]


class RingStep(ctypes.Structure):
    _fields_ = [("view", AttentionView), ("causal", c_int32)]


class RopeOptions(ctypes.Structure):
    _fields_ = [("style", c_enum), ("rotary_dim", c_int32), ("theta_base", c_double),
                ("inv_freq", c_void_p)]


class Conv1dParams(ctypes.Structure):
    _fields_ = [("channels", c_int32), ("width", c_int32), ("silu", c_int32)]


class CudaLayout(ctypes.Structure):
    _fields_ = [("thd", ThdLayout), ("local_rows", c_int64), ("max_seqlen_padded", c_int32)]


# C name -> mirror, for the layout test.
MIRRORS = {
    "dcp_error": Error, "dcp_allocator": Allocator, "dcp_cost_model": CostModel,
    "dcp_config": Config, "dcp_group": Group, "dcp_plan": Plan, "dcp_plan_stats": PlanStats,
    "dcp_flops_stats": FlopsStats, "dcp_lognormal": Lognormal, "dcp_thd_layout": ThdLayout,
    "dcp_rank_view": RankView, "dcp_transfer": Transfer, "dcp_reroute": Reroute,
    "dcp_row_run": RowRun, "dcp_varlen_call": VarlenCall, "dcp_varlen_rows": VarlenRows,
    "dcp_attention_params": AttentionParams, "dcp_attention_view": AttentionView,
    "dcp_ring_step": RingStep, "dcp_rope_options": RopeOptions,
    "dcp_conv1d_params": Conv1dParams, "dcp_cuda_layout": CudaLayout,
}
