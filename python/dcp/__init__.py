"""libdcp from Python: dynamic context parallelism for long-context training.

The planner side (``dcp.plan``, ``Plan``, ``RankView``, reroute lists, the exchange format)
needs only the standard library: it reaches build/libdcp.so through ``ctypes``. ctypes rather
than cffi because it ships with every CPython, so the planner binding has no install-time
dependency and no compiler step (the library is built by the repository's Makefile); the cost,
mirroring the structs by hand, is paid once in ``dcp._structs`` and checked against the C
compiler's layout by the tests.

Kernels as torch ops are in ``dcp.ops`` (needs torch, a GPU and build/libdcp_cuda.so); the
data-loader wrapper is in ``dcp.loader`` (its token routing is plain Python).

Library search order: $DCP_LIBRARY, next to this package (``pip install ./python`` after
``make`` copies it), the repository's build/. See ``dcp.library_path()``.
"""
from ._library import (CorruptDataError, CudaError, DcpError, DcpIOError, DcpMemoryError,
                       DcpOverflowError, InfeasibleError, InvalidArgumentError, InvalidPlanError,
                       LibraryNotFoundError, NcclError, ParseError, UnsupportedError,
                       library_path)
from .planner import (CONFIG_FIELDS, FlopsStats, Group, Plan, PlanStats, RankView, Transfer,
                      lognormal_lengths, parse_lengths, plan, plan_svg, rank_view_from_bytes,
                      read_lengths, resolve_config, zigzag_position)

__version__ = "0.1.0"

__all__ = [
    "CONFIG_FIELDS", "CorruptDataError", "CudaError", "DcpError", "DcpIOError", "DcpMemoryError",
    "DcpOverflowError", "FlopsStats", "Group", "InfeasibleError", "InvalidArgumentError",
    "InvalidPlanError", "LibraryNotFoundError", "NcclError", "ParseError", "Plan", "PlanStats",
    "RankView", "Transfer", "UnsupportedError", "library_path", "lognormal_lengths",
    "parse_lengths", "plan", "plan_svg", "rank_view_from_bytes", "read_lengths", "resolve_config",
    "zigzag_position",
]
