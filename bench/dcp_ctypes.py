"""ctypes bindings of build/libdcp_cuda.so for the Python benches (torch tensors in, their
data_ptr() passed as device pointers; the default stream). Build the library with
`make build/libdcp_cuda.so`; $DCP_CUDA_LIBRARY names another (as for libdcp.ops)."""
import argparse
import ast
import ctypes
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = os.environ.get("DCP_CUDA_LIBRARY") or os.path.join(HERE, "..", "build",
                                                             "libdcp_cuda.so")

# The structs and enums are libdcp's own mirrors (python/libdcp/_structs.py, checked against
# the C layout by python/tests/test_planner.py): one set for the package and the benches.
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from libdcp._structs import (DTYPE_BFLOAT16 as BFLOAT16, DTYPE_FLOAT16 as FLOAT16,  # noqa: E402
                             DTYPE_FLOAT32 as FLOAT32, HALF_ALL, HALF_FIRST, HALF_SECOND,
                             AttentionParams, AttentionView, Conv1dParams, CudaLayout, Error,
                             RopeOptions, ThdLayout)

__all__ = ["BFLOAT16", "FLOAT16", "FLOAT32", "HALF_ALL", "HALF_FIRST", "HALF_SECOND",
           "AttentionParams", "AttentionView", "Conv1dParams", "CudaLayout", "Error",
           "Library", "RopeOptions", "ThdLayout", "dry_run", "entry_points", "ptr",
           "repeat_count", "timed"]


class Library:
    def __init__(self, path=LIBRARY):
        if not os.path.exists(path):
            raise SystemExit(f"{path} is missing: run `make build/libdcp_cuda.so` first")
        self.lib = ctypes.CDLL(path)
        self.error = Error()

    def call(self, name, *args):
        status = getattr(self.lib, name)(*args, ctypes.byref(self.error))
        if status != 0:
            raise RuntimeError(f"{name}: {self.error.message.decode()}")

    def layout(self, cu_host, cu_padded_host, cu_device, cu_padded_device, cp=1):
        """A CudaLayout from host lists and device int32 tensors (kept alive by the caller)."""
        n = len(cu_host) - 1
        cu = (ctypes.c_int32 * (n + 1))(*cu_host)
        cu_padded = (ctypes.c_int32 * (n + 1))(*cu_padded_host)
        host = ThdLayout(n, ctypes.cast(cu, ctypes.POINTER(ctypes.c_int32)),
                         ctypes.cast(cu_padded, ctypes.POINTER(ctypes.c_int32)), cp)
        layout = CudaLayout()
        self.call("dcp_cuda_layout_init", ctypes.byref(host), ctypes.c_void_p(cu_device.data_ptr()),
                  ctypes.c_void_p(cu_padded_device.data_ptr()), ctypes.byref(layout))
        return layout


def entry_points(source_path):
    """The library functions a bench calls: the literal first argument of every `.call(...)` in
    its source (and in this file's, whose Library.layout calls one)."""
    names = set()
    for path in (source_path, __file__):
        with open(path) as source:
            for node in ast.walk(ast.parse(source.read(), path)):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "call" and node.args
                        and isinstance(node.args[0], ast.Constant)
                        and isinstance(node.args[0].value, str)):
                    names.add(node.args[0].value)
    return sorted(names)


def dry_run(source_path, optional_modules, path=LIBRARY):
    """A bench's --dry-run (make gpu-round DRY_RUN=1): no torch, no GPU, nothing measured. The
    library must load and export every function the bench calls; the optional modules are
    reported. Returns the exit status: 0 when wired, 1 when an entry point is missing."""
    names = entry_points(source_path)
    lib = Library(path).lib
    missing = [name for name in names if not hasattr(lib, name)]
    for module in optional_modules:
        found = importlib.util.find_spec(module) is not None
        print(f"dry run: {module} {'importable' if found else 'not installed here'}")
    if missing:
        print(f"dry run: {os.path.basename(path)} lacks {', '.join(missing)}")
        return 1
    print(f"dry run: {os.path.basename(path)} exports all {len(names)} functions called; "
          f"nothing measured")
    return 0


def repeat_count(text):
    """argparse type of --repeat: an integer >= 1 (timed() takes the median of that many)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"--repeat must be at least 1, got {value}")
    return value


def ptr(tensor):
    return ctypes.c_void_p(0 if tensor is None else tensor.data_ptr())


def timed(fn, repeat):
    """Median milliseconds of fn over `repeat` runs after 3 warm-ups, timed with CUDA events,
    with the L2 cache flushed (a 256 MB write) before every run."""
    import torch  # only the benches that time torch work need it

    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeat):
        flush.zero_()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]
