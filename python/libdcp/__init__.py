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

Plans travel as bytes (``Plan.to_bytes``, ``Plan.from_bytes``) and as the JSON of ``dcp-plan
--json`` (``Plan.to_json``, ``Plan.from_json``, docs/cli-json.md). ``python -m libdcp`` and the
``dcp-plan`` command the package installs run the C CLI itself.

Constants: ``CONFIG_FIELDS``, the dcp_config fields ``plan()`` takes by name;
``DEFAULT_SEED``, the seed of ``lognormal_lengths`` and dcp-plan when none is given;
``NO_GROUP`` (-1), first_rank and rank_in_group of an idle rank's view.

Library search order: $DCP_LIBRARY, the package's _native/ folder (``pip install ./python``
builds it there), the repository's build/. See ``libdcp.library_path()``. Type checkers read
the package's hints (it ships py.typed).
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
