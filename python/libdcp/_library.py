"""Finding and loading the shared libraries, declaring the C signatures, and turning every
``dcp_status`` into a Python exception (the one place where that happens)."""
import ctypes
import os
from typing import Any, Dict, List, Optional, Tuple

from . import _structs as S

CPU_LIBRARY = "libdcp.so"        # `make build/libdcp.so`: dcp.h (planner, views, references)
CUDA_LIBRARY = "libdcp_cuda.so"  # `make build/libdcp_cuda.so`: dcp.h and dcp_cuda.cu
CPU_ENV = "DCP_LIBRARY"          # full path of a libdcp.so to use instead of the search
CUDA_ENV = "DCP_CUDA_LIBRARY"    # full path of a libdcp_cuda.so

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# Where `pip install ./python` puts the native files (libdcp.so, libdcp_cuda.so, the dcp-plan
# program): a folder without __init__.py, so that pkgutil (and help(libdcp)) does not list
# libdcp.so as an importable submodule named "libdcp".
NATIVE_DIR = os.path.join(_PACKAGE_DIR, "_native")
# python/libdcp/ -> the repository's build/ (an editable install or PYTHONPATH=python).
_REPO_BUILD = os.path.normpath(os.path.join(_PACKAGE_DIR, "..", "..", "build"))


class DcpError(Exception):
    """A dcp.h call failed; ``status`` is the dcp_status code, ``message`` the library's text
    (it names the argument and the value)."""
    status = -1

    def __init__(self, message: str, function: str = ""):
        self._text = f"{function}: {message}" if function else message
        super().__init__(self._text)
        self.message = message
        self.function = function

    def __str__(self) -> str:
        # OSError's own __str__ would print "[Errno None] None: FILE" once filename is set
        return self._text

    def naming_file(self, path: str) -> "DcpError":
        """The same error with ``path`` in its message (prefixed, as dcp-plan does, where the
        library's text names a line but not the file) and, for an OSError, as ``filename``."""
        message = self.message if path in self.message else f"{path}: {self.message}"
        named = type(self)(message, self.function)
        if isinstance(named, OSError):
            named.filename = path
        return named


class InvalidArgumentError(DcpError, ValueError):
    """dcp_status 1 (DCP_ERROR_INVALID_ARGUMENT): an argument outside its documented range (the
    message names it and its value); also a ValueError."""
    status = 1


class InfeasibleError(DcpError, ValueError):
    """dcp_status 2 (DCP_ERROR_INFEASIBLE): no plan exists for the input (a sample longer than
    max_cp ranks hold, ...); also a ValueError."""
    status = 2


class DcpOverflowError(DcpError, OverflowError):
    """dcp_status 3 (DCP_ERROR_OVERFLOW): a count or a sum of tokens beyond what its C type
    holds; also an OverflowError."""
    status = 3


class DcpMemoryError(DcpError, MemoryError):
    """dcp_status 4 (DCP_ERROR_OUT_OF_MEMORY): the library's allocator failed; also a
    MemoryError."""
    status = 4


class ParseError(DcpError, ValueError):
    """dcp_status 5 (DCP_ERROR_PARSE): text that is not a lengths list or CSV (the message
    names the line, and the file when there is one); also a ValueError."""
    status = 5


class DcpIOError(DcpError, OSError):
    """dcp_status 6 (DCP_ERROR_IO): a file could not be opened or read (the message and
    ``filename`` name it); also an OSError."""
    status = 6


class InvalidPlanError(DcpError, ValueError):
    """dcp_status 7 (DCP_ERROR_INVALID_PLAN): a plan breaks an invariant of dcp_plan_validate
    (named in the message); also a ValueError."""
    status = 7


class CorruptDataError(DcpError, ValueError):
    """dcp_status 8 (DCP_ERROR_CORRUPT_DATA): serialized bytes that are truncated, of another
    version or fail their checksum; also a ValueError."""
    status = 8


class UnsupportedError(DcpError, NotImplementedError):
    """dcp_status 9 (DCP_ERROR_UNSUPPORTED): a feature this build or device does not have; also
    a NotImplementedError."""
    status = 9


class CudaError(DcpError, RuntimeError):
    """dcp_status 10 (DCP_ERROR_CUDA): a CUDA runtime call failed (the message names the call);
    also a RuntimeError."""
    status = 10


class NcclError(DcpError, RuntimeError):
    """dcp_status 11 (DCP_ERROR_NCCL): an NCCL call failed (the message names the call); also a
    RuntimeError."""
    status = 11


class LibraryNotFoundError(OSError):
    """No shared library was found; the message lists every path tried."""


_ERRORS = {cls.status: cls for cls in (
    InvalidArgumentError, InfeasibleError, DcpOverflowError, DcpMemoryError, ParseError,
    DcpIOError, InvalidPlanError, CorruptDataError, UnsupportedError, CudaError, NcclError)}


def raise_for(status: int, error: S.Error, function: str) -> None:
    """Raises the exception of a non-zero status with the C message; returns on DCP_OK."""
    if status == 0:
        return
    cls = _ERRORS.get(status, DcpError)
    raise cls(error.message.decode("utf-8", "replace"), function)


def candidates(name: str, env: str) -> List[str]:
    """Paths tried, in order: the environment variable (an explicit choice wins), the
    package's _native/ folder (`pip install ./python` builds libdcp.so and dcp-plan there),
    the repository's build/ (editable install, PYTHONPATH=python)."""
    paths = []
    if os.environ.get(env):
        paths.append(os.environ[env])
    paths.append(os.path.join(NATIVE_DIR, name))
    paths.append(os.path.join(_REPO_BUILD, name))
    return paths


def load(name: str, env: str, make_target: str) -> ctypes.CDLL:
    tried = []
    for path in candidates(name, env):
        if not os.path.isfile(path):
            tried.append(f"{path} (missing)")
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as failure:
            tried.append(f"{path} ({failure})")
    raise LibraryNotFoundError(
        f"cannot load {name}; tried: {'; '.join(tried)}. Run `make {make_target}` in the "
        f"libdcp repository and reinstall the package (pip install ./python), or set {env} "
        f"to the library's path")


P = ctypes.POINTER
_i32, _i64, _dbl, _vp, _sz = (ctypes.c_int32, ctypes.c_int64, ctypes.c_double, ctypes.c_void_p,
                              ctypes.c_size_t)
_ERR = P(S.Error)

# Signatures of the planner-side functions: name -> (restype, argtypes). Functions returning a
# dcp_status take a dcp_error * last.
SIGNATURES: Dict[str, Tuple[Any, List[Any]]] = {
    "dcp_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "dcp_strategy_name": (ctypes.c_char_p, [ctypes.c_int]),
    "dcp_free": (None, [P(S.Allocator), _vp]),
    "dcp_config_resolve": (ctypes.c_int, [P(S.Config), P(S.Config), _ERR]),
    "dcp_padded_length": (ctypes.c_int, [P(S.Config), _i64, _i32, P(_i64), _ERR]),
    "dcp_cp_size_min": (ctypes.c_int, [P(S.Config), _i64, P(_i32), _ERR]),
    "dcp_cp_size_next": (_i32, [P(S.Config), _i32]),
    "dcp_plan_cp_histogram": (ctypes.c_int, [P(S.Plan), P(_i32), P(_i32), _i32, P(_i32), _ERR]),
    "dcp_cost_sample_seconds": (_dbl, [P(S.CostModel), _i64, _i64, _i32]),
    "dcp_cost_ring_seconds": (_dbl, [P(S.CostModel), _i32]),
    "dcp_lower_bound": (ctypes.c_int, [P(S.Config), P(_i64), _i32, P(_dbl), _ERR]),
    "dcp_plan_create": (ctypes.c_int, [P(S.Config), P(_i64), _i32, P(P(S.Plan)), _ERR]),
    "dcp_plan_destroy": (None, [P(S.Plan)]),
    "dcp_plan_validate": (ctypes.c_int, [P(S.Plan), _ERR]),
    "dcp_plan_simulate": (ctypes.c_int, [P(S.Plan), P(S.CostModel), P(S.PlanStats), _ERR]),
    "dcp_plan_schedule": (ctypes.c_int, [P(S.Plan), P(S.CostModel), P(_dbl), P(_dbl), _ERR]),
    "dcp_plan_step_time": (ctypes.c_int, [P(S.Plan), P(S.CostModel), _i32, P(_dbl), _ERR]),
    "dcp_plan_flops_stats": (ctypes.c_int, [P(S.Plan), P(S.FlopsStats), _ERR]),
    "dcp_plan_svg": (ctypes.c_int, [P(P(S.Plan)), P(ctypes.c_char_p), _i32, P(S.CostModel),
                                    _vp, _sz, P(_sz), _ERR]),
    "dcp_plan_serialize": (ctypes.c_int, [P(S.Plan), _vp, _sz, P(_sz), _ERR]),
    "dcp_plan_deserialize": (ctypes.c_int, [_vp, _sz, P(S.Allocator), P(P(S.Plan)), _ERR]),
    "dcp_lengths_lognormal": (ctypes.c_int, [P(S.Lognormal), ctypes.c_uint64, P(_i64), _i32,
                                             _ERR]),
    "dcp_lengths_parse": (ctypes.c_int, [ctypes.c_char_p, _sz, P(S.Allocator), P(P(_i64)),
                                         P(_i32), _ERR]),
    "dcp_lengths_read_file": (ctypes.c_int, [ctypes.c_char_p, P(S.Allocator), P(P(_i64)),
                                             P(_i32), _ERR]),
    "dcp_rank_view_create": (ctypes.c_int, [P(S.Plan), _i32, _i32, P(P(S.RankView)), _ERR]),
    "dcp_rank_view_destroy": (None, [P(S.RankView)]),
    "dcp_rank_view_positions": (ctypes.c_int, [P(S.RankView), P(_i32), P(_i64), _ERR]),
    "dcp_rank_view_runs": (ctypes.c_int, [P(S.RankView), P(S.RowRun), _i32, P(_i32), _ERR]),
    "dcp_rank_view_varlen_call": (ctypes.c_int, [P(S.RankView), _i32, _i32, P(S.VarlenCall),
                                                 P(S.VarlenRows), _ERR]),
    "dcp_rank_view_pack": (ctypes.c_int, [P(S.RankView), P(_vp), _sz, _vp, _ERR]),
    "dcp_rank_view_unpack": (ctypes.c_int, [P(S.RankView), _vp, _sz, P(_vp), _ERR]),
    "dcp_rank_view_serialize": (ctypes.c_int, [P(S.RankView), _vp, _sz, P(_sz), _ERR]),
    "dcp_rank_view_deserialize": (ctypes.c_int, [_vp, _sz, P(S.Allocator), P(P(S.RankView)),
                                                 _ERR]),
    "dcp_reroute_create": (ctypes.c_int, [P(S.Plan), P(_i32), _i32, P(P(S.Reroute)), _ERR]),
    "dcp_reroute_destroy": (None, [P(S.Reroute)]),
    "dcp_zigzag_position": (_i64, [_i64, _i32, _i32, _i64]),
    "dcp_ring_step_plan": (ctypes.c_int, [_i32, _i32, _i32, _i32, P(S.RingStep), _ERR]),
    "dcp_thd_layout_validate": (ctypes.c_int, [P(S.ThdLayout), P(_i64), _ERR]),
}

# The CUDA entry points the torch ops call (libdcp_cuda.so). Device pointers as void *.
CUDA_SIGNATURES: Dict[str, Tuple[Any, List[Any]]] = {
    "dcp_cuda_device_count": (ctypes.c_int, [P(_i32), _ERR]),
    "dcp_cuda_layout_init": (ctypes.c_int, [P(S.ThdLayout), _vp, _vp, P(S.CudaLayout), _ERR]),
    "dcp_cuda_attention_workspace_size": (ctypes.c_int, [P(S.AttentionParams), P(S.CudaLayout),
                                                         P(_sz), _ERR]),
    "dcp_cuda_attention_forward": (ctypes.c_int, [
        P(S.AttentionParams), P(S.CudaLayout), P(S.AttentionView), ctypes.c_int, _vp, _vp, _vp,
        ctypes.c_int, _vp, _vp, _vp, _sz, _vp, _ERR]),
    "dcp_cuda_attention_backward": (ctypes.c_int, [
        P(S.AttentionParams), P(S.CudaLayout), P(S.AttentionView), ctypes.c_int, _vp, _vp, _vp,
        _vp, _vp, _vp, _vp, _vp, _vp, _i32, _vp, _sz, _vp, _ERR]),
    "dcp_cuda_acc_init": (ctypes.c_int, [P(S.AttentionParams), P(S.CudaLayout), _vp, _vp, _vp,
                                         _ERR]),
    "dcp_cuda_acc_merge": (ctypes.c_int, [P(S.AttentionParams), P(S.CudaLayout), ctypes.c_int,
                                          _vp, _vp, _vp, _vp, _vp, _ERR]),
    "dcp_cuda_acc_finalize": (ctypes.c_int, [P(S.AttentionParams), P(S.CudaLayout), _i32, _vp,
                                             _vp, ctypes.c_int, _vp, _vp, _vp, _ERR]),
    "dcp_cuda_convert": (ctypes.c_int, [_vp, ctypes.c_int, _vp, _i64, _vp, _ERR]),
    "dcp_cuda_rope_forward": (ctypes.c_int, [P(S.RopeOptions), P(S.CudaLayout), _i32,
                                             ctypes.c_int, _i32, _i32, _vp, _vp, _i32, _vp, _vp,
                                             _vp, _ERR]),
    "dcp_cuda_rope_backward": (ctypes.c_int, [P(S.RopeOptions), P(S.CudaLayout), _i32,
                                              ctypes.c_int, _i32, _i32, _vp, _vp, _i32, _vp,
                                              _vp, _vp, _ERR]),
    "dcp_cuda_virtual_ring_forward": (ctypes.c_int, [
        P(S.AttentionParams), P(S.CudaLayout), ctypes.c_int, _vp, _vp, _vp, ctypes.c_int, _vp,
        _vp, _vp, _vp, _vp, _vp, _vp, _sz, _vp, _ERR]),
    "dcp_cuda_virtual_ring_backward": (ctypes.c_int, [
        P(S.AttentionParams), P(S.CudaLayout), ctypes.c_int, _vp, _vp, _vp, _vp, _vp, _vp, _vp,
        _vp, _vp, _i32, _vp, _sz, _vp, _ERR]),
    "dcp_cuda_conv1d_workspace_size": (ctypes.c_int, [P(S.Conv1dParams), P(_sz), _ERR]),
    "dcp_cuda_conv1d_forward": (ctypes.c_int, [P(S.Conv1dParams), P(S.CudaLayout), _i64,
                                               ctypes.c_int, _vp, _vp, _vp, _vp, _vp, _ERR]),
    "dcp_cuda_conv1d_backward": (ctypes.c_int, [P(S.Conv1dParams), P(S.CudaLayout), _i64,
                                                ctypes.c_int, _vp, _vp, _vp, _vp, _vp, _vp, _vp,
                                                _vp, _sz, _vp, _ERR]),
}


class Library:
    """A loaded library with declared signatures. ``call(name, *args)`` appends a dcp_error,
    and raises the mapped exception on failure; ``raw(name)`` is the plain C function."""

    def __init__(self, handle: ctypes.CDLL, signatures: Dict[str, Tuple[Any, List[Any]]]):
        self.functions: Dict[str, Any] = {}
        for name, (restype, argtypes) in signatures.items():
            function = getattr(handle, name)
            function.restype, function.argtypes = restype, argtypes
            self.functions[name] = function

    def raw(self, name: str) -> Any:
        # Only declared functions: ctypes would pass an undeclared pointer argument as a C int.
        return self.functions[name]

    def call(self, name: str, *args: Any) -> None:
        error = S.Error()
        raise_for(self.functions[name](*args, ctypes.byref(error)), error, name)


_loaded: Dict[str, Library] = {}


def cpu() -> Library:
    """libdcp.so, loaded once on first use."""
    if "cpu" not in _loaded:
        _loaded["cpu"] = Library(load(CPU_LIBRARY, CPU_ENV, "build/libdcp.so"), SIGNATURES)
    return _loaded["cpu"]


def cuda() -> Library:
    """libdcp_cuda.so (needs the CUDA runtime), loaded once on first use."""
    if "cuda" not in _loaded:
        _loaded["cuda"] = Library(load(CUDA_LIBRARY, CUDA_ENV, "build/libdcp_cuda.so"),
                                  CUDA_SIGNATURES)
    return _loaded["cuda"]


def library_path(which: str = "cpu") -> Optional[str]:
    """The path the library was (or would be) loaded from, None when none exists."""
    name, env = (CPU_LIBRARY, CPU_ENV) if which == "cpu" else (CUDA_LIBRARY, CUDA_ENV)
    return next((p for p in candidates(name, env) if os.path.isfile(p)), None)
