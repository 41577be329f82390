"""libdcp from Python: dynamic context parallelism for long-context training.

The planner side (``libdcp.plan``, ``Plan``, ``RankView``, reroute lists, the exchange format)
needs only the standard library: it reaches libdcp.so through ``ctypes``. ctypes rather than
cffi because it ships with every CPython, so the planner binding has no install-time Python
dependency (``pip install`` compiles libdcp.so from dcp.h with the C compiler); the cost,
mirroring the structs by hand, is paid once in ``libdcp._structs`` and checked against the C
compiler's layout by the tests.

Kernels as torch ops are in ``libdcp.ops`` (needs torch, a GPU and build/libdcp_cuda.so); the
data-loader wrapper is in ``libdcp.loader`` (its token routing is plain Python); the scheduler
for Megatron-Core's hybrid context parallelism is ``libdcp.megatron``.

Library search order: $DCP_LIBRARY, next to this package (``pip install ./python`` builds it
there), the repository's build/. See ``libdcp.library_path()``.
"""
from ._library import (CorruptDataError, CudaError, DcpError, DcpIOError, DcpMemoryError,
                       DcpOverflowError, InfeasibleError, InvalidArgumentError, InvalidPlanError,
                       LibraryNotFoundError, NcclError, ParseError, UnsupportedError,
                       library_path)
from .planner import (CONFIG_FIELDS, DEFAULT_SEED, NO_GROUP, FlopsStats, Group, Plan, PlanStats,
                      RankView, RowRun, SampleCost, Transfer, VarlenCall, cp_size_min, cp_sizes,
                      lognormal_lengths, parse_lengths, plan, plan_svg, rank_view_from_bytes,
                      read_lengths, resolve_config, zigzag_position)

__version__ = "0.1.0"

__all__ = [
    "CONFIG_FIELDS", "CorruptDataError", "CudaError", "DEFAULT_SEED", "DcpError", "DcpIOError",
    "DcpMemoryError", "DcpOverflowError", "FlopsStats", "Group", "InfeasibleError",
    "InvalidArgumentError", "InvalidPlanError", "LibraryNotFoundError", "NO_GROUP", "NcclError",
    "ParseError", "Plan", "PlanStats", "RankView", "RowRun", "SampleCost", "Transfer",
    "UnsupportedError", "VarlenCall", "cp_size_min", "cp_sizes", "library_path", "lognormal_lengths",
    "parse_lengths", "plan", "plan_svg", "rank_view_from_bytes", "read_lengths",
    "resolve_config", "zigzag_position",
]
