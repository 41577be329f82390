"""libdcp's CUDA kernels as torch.library custom ops, with autograd and fake (meta)
implementations so torch.compile can trace them. Needs torch >= 2.4, a GPU and
build/libdcp_cuda.so (`make build/libdcp_cuda.so`; found like libdcp.so, or through
$DCP_CUDA_LIBRARY).

Every op runs on the caller's current CUDA stream, allocates its outputs and scratch with
PyTorch's allocator, and checks its arguments in the library (errors raise libdcp.DcpError
subclasses with the C message). A THD layout travels as four int32 tensors (see
:class:`Layout`): the device copies the kernels read and CPU copies the library validates and
sizes launches from, so no op reads device memory back (no synchronisation) and torch.compile
does not specialise on the sequence lengths. Shapes: q [rows, heads, head_dim], k and v
[rows, kv_heads, head_dim] (rows = the rank's local rows, cu_seqlens_padded[-1] / cp); LSE
float32 [heads, rows], natural log; softmax_scale 0 means 1 / sqrt(head_dim).

On the CPU execution model (build/libdcp_cuda-cpu.so through $DCP_CUDA_LIBRARY, `make
test-torch-cpu`; see :func:`emulated`) the same ops run the real kernels on contiguous CPU
tensors.

Status: run on the CPU execution model only; none of these ops has run on a GPU yet (the tests
skip without one).
"""
import ctypes
import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from ._extras import import_torch

torch = import_torch("libdcp.ops")
from torch import Tensor  # noqa: E402 (after the check that names the [torch] extra)

from . import _structs as S  # noqa: E402
from ._library import cpu, cuda, library_path  # noqa: E402

HALF_ALL, HALF_FIRST, HALF_SECOND = S.HALF_ALL, S.HALF_FIRST, S.HALF_SECOND  # dcp_half
ROPE_ROTATE_HALF, ROPE_INTERLEAVED = 0, 1         # dcp_rope_style
_DTYPES = {torch.float32: S.DTYPE_FLOAT32, torch.bfloat16: S.DTYPE_BFLOAT16,
           torch.float16: S.DTYPE_FLOAT16}  # dcp_dtype


@dataclass(frozen=True)
class Layout:
    """A THD layout of whole (global) sequences split over cp ranks, as the ops take it:
    int32 cu_seqlens / cu_seqlens_padded on the device and the same values on the CPU.

    Attributes:
        cu_seqlens: cumulative valid lengths of the whole sequences (int32, on the device).
        cu_seqlens_padded: the same for the padded lengths (int32, on the device).
        cu_seqlens_cpu, cu_seqlens_padded_cpu: the same values on the CPU, which the library
            validates and sizes launches from (no read-back from the device).
        cp: the ranks the sequences are split over.
    """
    cu_seqlens: Tensor
    cu_seqlens_padded: Tensor
    cu_seqlens_cpu: Tensor
    cu_seqlens_padded_cpu: Tensor
    cp: int = 1

    @classmethod
    def from_lists(cls, cu_seqlens: Sequence[int], cu_seqlens_padded: Sequence[int],
                   cp: int = 1, device=None) -> "Layout":
        """device None: where the ops run (cuda; cpu on the execution model)."""
        device = device or ("cpu" if emulated() else "cuda")
        host = torch.tensor(list(cu_seqlens), dtype=torch.int32)
        host_padded = torch.tensor(list(cu_seqlens_padded), dtype=torch.int32)
        return cls(host.to(device), host_padded.to(device), host, host_padded, cp)

    @classmethod
    def from_view(cls, view, device=None) -> "Layout":
        """The layout of a libdcp.RankView (its group's sequences, its cp)."""
        return cls.from_lists(view.cu_seqlens, view.cu_seqlens_padded, view.cp, device)

    @property
    def local_rows(self) -> int:
        """Rows of one rank's buffer: cu_seqlens_padded[-1] / cp."""
        return int(self.cu_seqlens_padded_cpu[-1]) // self.cp

    def args(self) -> tuple:
        """The five layout arguments of the custom ops, in their order."""
        return (self.cu_seqlens, self.cu_seqlens_padded, self.cu_seqlens_cpu,
                self.cu_seqlens_padded_cpu, self.cp)


# ---------------------------------------------------------------------------- plumbing
def _ptr(t: Optional[Tensor]) -> Optional[int]:
    return None if t is None else t.data_ptr()


_model: dict = {}


def emulated() -> bool:
    """Whether libdcp_cuda.so is the CPU execution model's build (build/libdcp_cuda-cpu.so,
    tests/cuda_cpu; it exports dcp_cuda_cpu_model): its device memory is host memory, so the ops
    take contiguous CPU tensors, run on its one stream and finish before they return (a CPU
    tensor has no stream to order a later read)."""
    if "handle" not in _model:
        path = library_path("cuda")
        try:  # the library cuda() loads, for a symbol it does not declare
            handle = ctypes.CDLL(path) if path else None
        except OSError:  # not loadable: not the model (an op says why when it loads it)
            handle = None
        _model["handle"] = handle if hasattr(handle, "dcp_cuda_cpu_model") else None
    return _model["handle"] is not None


def _on_model(t: Tensor) -> bool:
    return t.device.type == "cpu" and emulated()


def _finish_on_model() -> None:
    status = _model["handle"].cudaDeviceSynchronize()
    if status != 0:
        raise RuntimeError(f"the execution model's device failed: cudaDeviceSynchronize "
                           f"returned {status} (its report is on stderr)")


def _stream() -> int:
    """The caller's current stream on the current device (the ops set the device of their
    inputs first, see _on_device); the model's one stream (0) for CPU tensors."""
    return 0 if emulated() else torch.cuda.current_stream().cuda_stream


def _on_device(fn):
    """Runs an op implementation with its first tensor argument's device current, so kernels
    launch where the data is and on that device's current stream."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        first = args[0][0] if isinstance(args[0], (list, tuple)) else args[0]
        if _on_model(first):
            result = fn(*args, **kwargs)
            _finish_on_model()
            return result
        if not first.is_cuda:
            raise ValueError(f"{fn.__name__}: inputs must be CUDA tensors (device {first.device})")
        with torch.cuda.device(first.device):
            return fn(*args, **kwargs)
    return wrapper


def _dtype(t: Tensor) -> int:
    if t.dtype not in _DTYPES:
        raise TypeError(f"dtype {t.dtype} is not served (float32, bfloat16, float16)")
    return _DTYPES[t.dtype]


def _on_cuda(**tensors: Optional[Tensor]) -> None:
    for name, t in tensors.items():
        if t is not None and (not (t.is_cuda or _on_model(t)) or not t.is_contiguous()):
            raise ValueError(f"{name} must be a contiguous CUDA tensor (device {t.device})")


def _cuda_layout(cu: Tensor, cu_padded: Tensor, cu_cpu: Tensor, cu_padded_cpu: Tensor,
                 cp: int) -> Tuple[S.CudaLayout, tuple]:
    """The C dcp_cuda_layout (validated by the library) and what must stay alive with it."""
    host_cu = cu_cpu.to(torch.int32).contiguous()
    host_padded = cu_padded_cpu.to(torch.int32).contiguous()
    _on_cuda(cu_seqlens=cu, cu_seqlens_padded=cu_padded)
    thd = S.ThdLayout(host_cu.numel() - 1, ctypes.cast(host_cu.data_ptr(), S.c_int32_p),
                      ctypes.cast(host_padded.data_ptr(), S.c_int32_p), cp)
    layout = S.CudaLayout()
    cuda().call("dcp_cuda_layout_init", ctypes.byref(thd), cu.data_ptr(), cu_padded.data_ptr(),
                ctypes.byref(layout))
    return layout, (host_cu, host_padded, thd)


def _attention_params(q: Tensor, k: Tensor, causal: bool, softmax_scale: float):
    return S.AttentionParams(q.shape[1], k.shape[1], q.shape[2], int(causal), softmax_scale)


_WORKSPACE_ALIGNMENT = 256  # what the library asks of a workspace (PyTorch's CUDA allocator: 512)


def _workspace(nbytes: int, device) -> Tensor:
    if torch.device(device).type != "cpu":
        return torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device)
    # the execution model's: a CPU allocation is only 64-byte aligned
    raw = torch.empty(max(nbytes, 1) + _WORKSPACE_ALIGNMENT, dtype=torch.uint8)
    skip = -raw.data_ptr() % _WORKSPACE_ALIGNMENT
    return raw[skip:skip + max(nbytes, 1)]


def _attention_workspace(params, layout, device) -> Tensor:
    size = ctypes.c_size_t()
    cuda().call("dcp_cuda_attention_workspace_size", ctypes.byref(params), ctypes.byref(layout),
                ctypes.byref(size))
    return _workspace(size.value, device)


def device_count() -> int:
    """CUDA devices the library sees (0 without driver or device)."""
    count = ctypes.c_int32()
    cuda().call("dcp_cuda_device_count", ctypes.byref(count))
    return count.value


def ring_step_plan(cp: int, rank: int, step: int, causal: bool = True
                   ) -> Tuple[Tuple[int, int, int, int], bool]:
    """Step ``step`` of ``rank`` in a ring of cp ranks (dcp_ring_step_plan): the view
    (q_rank, q_half, kv_rank, kv_half) to pass to :func:`varlen_attention` and whether the
    step needs the causal mask."""
    plan = S.RingStep()
    cpu().call("dcp_ring_step_plan", cp, rank, step, int(causal), ctypes.byref(plan))
    v = plan.view
    return (v.q_rank, v.q_half, v.kv_rank, v.kv_half), bool(plan.causal)


# ----------------------------------------------------------------- varlen attention step
@torch.library.custom_op("libdcp::attention_forward", mutates_args=())
@_on_device
def attention_forward(q: Tensor, k: Tensor, v: Tensor, cu_seqlens: Tensor,
                      cu_seqlens_padded: Tensor, cu_seqlens_cpu: Tensor,
                      cu_seqlens_padded_cpu: Tensor, cp: int, q_rank: int, q_half: int,
                      kv_rank: int, kv_half: int, causal: bool, softmax_scale: float
                      ) -> Tuple[Tensor, Tensor]:
    """One attention step (dcp_cuda_attention_forward): out in q's dtype (rows outside the q
    view 0) and float32 LSE [heads, rows] (-inf outside the view and on padding rows)."""
    _on_cuda(q=q, k=k, v=v)
    layout, keep = _cuda_layout(cu_seqlens, cu_seqlens_padded, cu_seqlens_cpu,
                                cu_seqlens_padded_cpu, cp)
    params = _attention_params(q, k, causal, softmax_scale)
    view = S.AttentionView(q_rank, q_half, kv_rank, kv_half)
    out = torch.zeros_like(q)
    lse = torch.full((q.shape[1], q.shape[0]), -math.inf, dtype=torch.float32, device=q.device)
    workspace = _attention_workspace(params, layout, q.device)
    cuda().call("dcp_cuda_attention_forward", ctypes.byref(params), ctypes.byref(layout),
                ctypes.byref(view), _dtype(q), _ptr(q), _ptr(k), _ptr(v), _dtype(q), _ptr(out),
                _ptr(lse), _ptr(workspace), workspace.numel(), _stream())
    return out, lse


@attention_forward.register_fake
def _(q, k, v, cu_seqlens, cu_seqlens_padded, cu_seqlens_cpu, cu_seqlens_padded_cpu, cp,
      q_rank, q_half, kv_rank, kv_half, causal, softmax_scale):
    return torch.empty_like(q), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


@torch.library.custom_op("libdcp::attention_backward", mutates_args=())
@_on_device
def attention_backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dout: Tensor, lse: Tensor,
                       cu_seqlens: Tensor, cu_seqlens_padded: Tensor, cu_seqlens_cpu: Tensor,
                       cu_seqlens_padded_cpu: Tensor, cp: int, q_rank: int, q_half: int,
                       kv_rank: int, kv_half: int, causal: bool, softmax_scale: float,
                       deterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """The step's gradient (dcp_cuda_attention_backward) into fresh float32 dq, dk, dv."""
    _on_cuda(q=q, k=k, v=v, out=out, dout=dout, lse=lse)
    layout, keep = _cuda_layout(cu_seqlens, cu_seqlens_padded, cu_seqlens_cpu,
                                cu_seqlens_padded_cpu, cp)
    params = _attention_params(q, k, causal, softmax_scale)
    view = S.AttentionView(q_rank, q_half, kv_rank, kv_half)
    dq, dk, dv = (torch.zeros(t.shape, dtype=torch.float32, device=t.device) for t in (q, k, v))
    workspace = _attention_workspace(params, layout, q.device)
    cuda().call("dcp_cuda_attention_backward", ctypes.byref(params), ctypes.byref(layout),
                ctypes.byref(view), _dtype(q), _ptr(q), _ptr(k), _ptr(v), _ptr(out),
                _ptr(dout), _ptr(lse), _ptr(dq), _ptr(dk), _ptr(dv), int(deterministic),
                _ptr(workspace), workspace.numel(), _stream())
    return dq, dk, dv


@attention_backward.register_fake
def _(q, k, v, out, dout, lse, *rest):
    return tuple(t.new_empty(t.shape, dtype=torch.float32) for t in (q, k, v))


def _attention_setup(ctx, inputs, output):
    q, k, v = inputs[:3]
    ctx.save_for_backward(q, k, v, *output)
    ctx.rest = inputs[3:]
    ctx.mark_non_differentiable(output[1])


def _attention_grad(ctx, dout, dlse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = attention_backward(q, k, v, out, dout.contiguous(), lse, *ctx.rest, False)
    return (dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)) + (None,) * len(ctx.rest)


attention_forward.register_autograd(_attention_grad, setup_context=_attention_setup)


def varlen_attention(q: Tensor, k: Tensor, v: Tensor, layout: Layout, causal: bool = True,
                     softmax_scale: float = 0.0,
                     view: Tuple[int, int, int, int] = (0, HALF_ALL, 0, HALF_ALL)
                     ) -> Tuple[Tensor, Tensor]:
    """Varlen (THD) attention of one step: ``view`` = (q_rank, q_half, kv_rank, kv_half), the
    default a rank's whole buffer against itself (plain varlen attention at cp 1). q, k, v
    bfloat16 or float16. Returns (out, lse); gradients flow through out only, with the step's
    own out and LSE (exact for a whole attention: cp 1, or all views of one rank at once).
    The LSE output is not differentiable, so steps merged with :func:`merge` do not
    back-propagate correctly through autograd: train a ring with :func:`ring_attention`, or
    call :func:`attention_backward` per step with the final out, dout and LSE (the C contract,
    what a multi-GPU ring does)."""
    return attention_forward(q, k, v, *layout.args(), *view, causal, softmax_scale)


# ------------------------------------------------------------------------ virtual ring
def _ring_pointers(t: Tensor):
    return (ctypes.c_void_p * t.shape[0])(*[t[r].data_ptr() for r in range(t.shape[0])])


@torch.library.custom_op("libdcp::ring_forward", mutates_args=())
@_on_device
def ring_forward(q: Tensor, k: Tensor, v: Tensor, cu_seqlens: Tensor, cu_seqlens_padded: Tensor,
                 cu_seqlens_cpu: Tensor, cu_seqlens_padded_cpu: Tensor, cp: int, causal: bool,
                 softmax_scale: float) -> Tuple[Tensor, Tensor]:
    """The ring of cp ranks on one device (dcp_cuda_virtual_ring_forward): q [cp, rows, heads,
    dim] holds rank r's buffer at q[r]; out likewise, lse [cp, heads, rows] float32."""
    _on_cuda(q=q, k=k, v=v)
    layout, keep = _cuda_layout(cu_seqlens, cu_seqlens_padded, cu_seqlens_cpu,
                                cu_seqlens_padded_cpu, cp)
    if q.shape[0] != cp:
        raise ValueError(f"q holds {q.shape[0]} ranks, the layout's cp is {cp}")
    params = _attention_params(q[0], k[0], causal, softmax_scale)
    rows, heads, dim = q.shape[1:]
    out = torch.empty_like(q)
    lse = torch.empty((cp, heads, rows), dtype=torch.float32, device=q.device)
    partial_out, acc_out = (torch.empty((rows, heads, dim), dtype=torch.float32,
                                        device=q.device) for _ in range(2))
    partial_lse, acc_lse = (torch.empty((heads, rows), dtype=torch.float32, device=q.device)
                            for _ in range(2))
    workspace = _attention_workspace(params, layout, q.device)
    cuda().call("dcp_cuda_virtual_ring_forward", ctypes.byref(params), ctypes.byref(layout),
                _dtype(q), _ring_pointers(q), _ring_pointers(k), _ring_pointers(v), _dtype(q),
                _ring_pointers(out), _ring_pointers(lse), _ptr(partial_out), _ptr(partial_lse),
                _ptr(acc_out), _ptr(acc_lse), _ptr(workspace), workspace.numel(), _stream())
    return out, lse


@ring_forward.register_fake
def _(q, k, v, cu_seqlens, cu_seqlens_padded, cu_seqlens_cpu, cu_seqlens_padded_cpu, cp,
      causal, softmax_scale):
    return (torch.empty_like(q),
            q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32))


@torch.library.custom_op("libdcp::ring_backward", mutates_args=())
@_on_device
def ring_backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dout: Tensor, lse: Tensor,
                  cu_seqlens: Tensor, cu_seqlens_padded: Tensor, cu_seqlens_cpu: Tensor,
                  cu_seqlens_padded_cpu: Tensor, cp: int, causal: bool, softmax_scale: float,
                  deterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """dcp_cuda_virtual_ring_backward: float32 dq, dk, dv per rank."""
    _on_cuda(q=q, k=k, v=v, out=out, dout=dout, lse=lse)
    layout, keep = _cuda_layout(cu_seqlens, cu_seqlens_padded, cu_seqlens_cpu,
                                cu_seqlens_padded_cpu, cp)
    params = _attention_params(q[0], k[0], causal, softmax_scale)
    dq, dk, dv = (torch.empty(t.shape, dtype=torch.float32, device=t.device) for t in (q, k, v))
    workspace = _attention_workspace(params, layout, q.device)
    cuda().call("dcp_cuda_virtual_ring_backward", ctypes.byref(params), ctypes.byref(layout),
                _dtype(q), _ring_pointers(q), _ring_pointers(k), _ring_pointers(v),
                _ring_pointers(out), _ring_pointers(dout), _ring_pointers(lse),
                _ring_pointers(dq), _ring_pointers(dk), _ring_pointers(dv), int(deterministic),
                _ptr(workspace), workspace.numel(), _stream())
    return dq, dk, dv


@ring_backward.register_fake
def _(q, k, v, out, dout, lse, *rest):
    return tuple(t.new_empty(t.shape, dtype=torch.float32) for t in (q, k, v))


def _ring_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:3], *output)
    ctx.rest = inputs[3:]
    ctx.mark_non_differentiable(output[1])


def _ring_grad(ctx, dout, dlse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = ring_backward(q, k, v, out, dout.contiguous(), lse, *ctx.rest, False)
    return (dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)) + (None,) * len(ctx.rest)


ring_forward.register_autograd(_ring_grad, setup_context=_ring_setup)


def ring_attention(q: Tensor, k: Tensor, v: Tensor, layout: Layout, causal: bool = True,
                   softmax_scale: float = 0.0) -> Tuple[Tensor, Tensor]:
    """Ring attention of layout.cp ranks simulated on one device: q, k, v [cp, rows, heads,
    dim] (rank r's load-balanced share at index r). Returns (out, lse); differentiable in q, k,
    v through out."""
    return ring_forward(q, k, v, *layout.args(), causal, softmax_scale)


# --------------------------------------------------------------------------- LSE merge
@torch.library.custom_op("libdcp::merge", mutates_args=())
@_on_device
def merge_forward(outs: List[Tensor], lses: List[Tensor], halves: List[int], cu_seqlens: Tensor,
                  cu_seqlens_padded: Tensor, cu_seqlens_cpu: Tensor,
                  cu_seqlens_padded_cpu: Tensor, cp: int, rank: int) -> Tuple[Tensor, Tensor]:
    """Merges float32 partial results through their LSEs (dcp_cuda_acc_init / _merge /
    _finalize): partial i is folded on the rows of halves[i]. Returns float32 (out, lse),
    padding rows 0 and -inf."""
    _on_cuda(**{f"outs[{i}]": t for i, t in enumerate(outs)})
    layout, keep = _cuda_layout(cu_seqlens, cu_seqlens_padded, cu_seqlens_cpu,
                                cu_seqlens_padded_cpu, cp)
    rows, heads, dim = outs[0].shape
    params = S.AttentionParams(heads, heads, dim, 0, 0.0)
    acc_out = torch.empty((rows, heads, dim), dtype=torch.float32, device=outs[0].device)
    acc_lse = torch.empty((heads, rows), dtype=torch.float32, device=outs[0].device)
    lib, stream = cuda(), _stream()
    lib.call("dcp_cuda_acc_init", ctypes.byref(params), ctypes.byref(layout), _ptr(acc_out),
             _ptr(acc_lse), stream)
    # float32 contiguous copies where needed, alive until every merge is enqueued
    partials = [(o.float().contiguous(), l.contiguous()) for o, l in zip(outs, lses)]
    for (out, lse), half in zip(partials, halves):
        lib.call("dcp_cuda_acc_merge", ctypes.byref(params), ctypes.byref(layout), half,
                 _ptr(out), _ptr(lse), _ptr(acc_out), _ptr(acc_lse), stream)
    out = torch.empty_like(acc_out)
    lse = torch.empty_like(acc_lse)
    lib.call("dcp_cuda_acc_finalize", ctypes.byref(params), ctypes.byref(layout), rank,
             _ptr(acc_out), _ptr(acc_lse), _DTYPES[torch.float32], _ptr(out), _ptr(lse), stream)
    return out, lse


@merge_forward.register_fake
def _(outs, lses, halves, *rest):
    rows, heads, dim = outs[0].shape
    return (outs[0].new_empty((rows, heads, dim), dtype=torch.float32),
            outs[0].new_empty((heads, rows), dtype=torch.float32))


def _merge_setup(ctx, inputs, output):
    outs, lses = inputs[0], inputs[1]
    ctx.save_for_backward(*outs, *lses, *output)
    ctx.count = len(outs)
    ctx.rest = inputs[2:]


def _merge_grad(ctx, dout, dlse):
    """out = sum_i w_i out_i, lse = log sum_i exp(lse_i), w_i = exp(lse_i - lse): a partial's
    rows outside its half carry lse -inf (the attention op writes that), so its weight there
    is 0 and one formula covers every half. d out_i = w_i dout; d lse_i = w_i (dlse +
    sum_d dout (out_i - out))."""
    saved = ctx.saved_tensors
    n = ctx.count
    outs, lses, out, lse = saved[:n], saved[n:2 * n], saved[2 * n], saved[2 * n + 1]
    finite = torch.isfinite(lse)
    douts, dlses = [], []
    for o, l in zip(outs, lses):
        w = torch.where(finite & torch.isfinite(l), torch.exp(l - lse), torch.zeros_like(l))
        wt = w.transpose(0, 1).unsqueeze(-1)  # [rows, heads, 1]
        douts.append((wt * dout).to(o.dtype))
        along = (dout * (o.float() - out)).sum(-1).transpose(0, 1)  # [heads, rows]
        dlses.append(w * (along + (dlse if dlse is not None else 0)))
    return (douts, dlses) + (None,) * len(ctx.rest)


merge_forward.register_autograd(_merge_grad, setup_context=_merge_setup)


def merge(partials: Sequence[Tuple[Tensor, Tensor, int]], layout: Layout, rank: int
          ) -> Tuple[Tensor, Tensor]:
    """Merges (out, lse, half) partial results of ring steps of ``rank`` (out float32 or the
    attention dtype, lse float32 [heads, rows]); differentiable in every out and lse. The
    gradient assumes what :func:`varlen_attention` writes: a partial's rows outside its half
    hold LSE -inf."""
    outs = [p[0] for p in partials]
    lses = [p[1] for p in partials]
    halves = [int(p[2]) for p in partials]
    return merge_forward(outs, lses, halves, *layout.args(), rank)


# -------------------------------------------------------------------------------- RoPE
def _rope_options(rotary_dim: int, theta_base: float, interleaved: bool,
                  inv_freq: Optional[Tensor]) -> S.RopeOptions:
    return S.RopeOptions(ROPE_INTERLEAVED if interleaved else ROPE_ROTATE_HALF, rotary_dim,
                         theta_base, _ptr(inv_freq))


def _rope_call(name, q, k, cu, cu_padded, cu_cpu, cu_padded_cpu, cp, rank, rotary_dim,
               theta_base, interleaved, inv_freq):
    _on_cuda(q=q, k=k, inv_freq=inv_freq)
    if inv_freq is not None and inv_freq.dtype != torch.float64:
        raise TypeError(f"inv_freq must be float64 (dcp_rope_options), got {inv_freq.dtype}")
    layout, keep = _cuda_layout(cu, cu_padded, cu_cpu, cu_padded_cpu, cp)
    options = _rope_options(rotary_dim, theta_base, interleaved, inv_freq)
    q_out = torch.empty_like(q)
    k_out = None if k is None else torch.empty_like(k)
    if k is not None and k.dtype != q.dtype:
        raise TypeError(f"q is {q.dtype}, k {k.dtype}: one dtype per launch")
    cuda().call(name, ctypes.byref(options), ctypes.byref(layout), rank, _dtype(q), q.shape[2],
                q.shape[1], _ptr(q), _ptr(q_out), 0 if k is None else k.shape[1], _ptr(k),
                _ptr(k_out), _stream())
    return q_out, (k_out if k_out is not None else q.new_empty(0))


@torch.library.custom_op("libdcp::rope_forward", mutates_args=())
@_on_device
def rope_forward(q: Tensor, k: Optional[Tensor], cu_seqlens: Tensor, cu_seqlens_padded: Tensor,
                 cu_seqlens_cpu: Tensor, cu_seqlens_padded_cpu: Tensor, cp: int, rank: int,
                 rotary_dim: int, theta_base: float, interleaved: bool,
                 inv_freq: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """RoPE at the global positions of rank ``rank``'s rows (dcp_cuda_rope_forward); k may be
    absent (then the second output is empty). Padding rows give 0."""
    return _rope_call("dcp_cuda_rope_forward", q, k, cu_seqlens, cu_seqlens_padded,
                      cu_seqlens_cpu, cu_seqlens_padded_cpu, cp, rank, rotary_dim, theta_base,
                      interleaved, inv_freq)


@torch.library.custom_op("libdcp::rope_backward", mutates_args=())
@_on_device
def rope_backward(dq: Tensor, dk: Optional[Tensor], cu_seqlens: Tensor,
                  cu_seqlens_padded: Tensor, cu_seqlens_cpu: Tensor,
                  cu_seqlens_padded_cpu: Tensor, cp: int, rank: int, rotary_dim: int,
                  theta_base: float, interleaved: bool,
                  inv_freq: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """The inverse rotation of output gradients (dcp_cuda_rope_backward)."""
    return _rope_call("dcp_cuda_rope_backward", dq, dk, cu_seqlens, cu_seqlens_padded,
                      cu_seqlens_cpu, cu_seqlens_padded_cpu, cp, rank, rotary_dim, theta_base,
                      interleaved, inv_freq)


def _rope_fake(q, k, *rest):
    return torch.empty_like(q), (torch.empty_like(k) if k is not None else q.new_empty(0))


rope_forward.register_fake(_rope_fake)
rope_backward.register_fake(_rope_fake)


def _rope_setup(ctx, inputs, output):
    ctx.has_k = inputs[1] is not None
    ctx.rest = inputs[2:]


def _rope_grad(ctx, dq_out, dk_out):
    dk_in = dk_out.contiguous() if ctx.has_k else None
    dq, dk = rope_backward(dq_out.contiguous(), dk_in, *ctx.rest)
    return (dq, dk if ctx.has_k else None) + (None,) * len(ctx.rest)


rope_forward.register_autograd(_rope_grad, setup_context=_rope_setup)


def rope(q: Tensor, k: Optional[Tensor], layout: Layout, rank: int, rotary_dim: int = 0,
         theta_base: float = 0.0, interleaved: bool = False,
         inv_freq: Optional[Tensor] = None) -> Tuple[Tensor, Optional[Tensor]]:
    """Rotary embedding of q [rows, heads, dim] and k [rows, kv_heads, dim] (or None) at the
    global positions of rank ``rank`` of the layout's CP split. rotary_dim 0: head_dim;
    theta_base 0: 10000; inv_freq: a float64 CUDA table of rotary_dim / 2 frequencies
    (radians per position) instead of theta_base's."""
    q_out, k_out = rope_forward(q, k, *layout.args(), rank, rotary_dim, theta_base,
                                interleaved, inv_freq)
    return q_out, (k_out if k is not None else None)


# ------------------------------------------------------------------------------ conv1d
def _conv_params(weight: Tensor, silu: bool) -> S.Conv1dParams:
    return S.Conv1dParams(weight.shape[0], weight.shape[1], int(silu))


@torch.library.custom_op("libdcp::conv1d_forward", mutates_args=())
@_on_device
def conv1d_forward(x: Tensor, weight: Tensor, bias: Optional[Tensor], cu_seqlens: Tensor,
                   cu_seqlens_padded: Tensor, cu_seqlens_cpu: Tensor,
                   cu_seqlens_padded_cpu: Tensor, silu: bool) -> Tensor:
    """Causal depthwise conv1d per sequence (dcp_cuda_conv1d_forward): x [rows, channels],
    weight [channels, width] float32, bias [channels] float32 or None; padding rows 0."""
    _on_cuda(x=x, weight=weight, bias=bias)
    layout, keep = _cuda_layout(cu_seqlens, cu_seqlens_padded, cu_seqlens_cpu,
                                cu_seqlens_padded_cpu, 1)
    params = _conv_params(weight, silu)
    y = torch.empty_like(x)
    cuda().call("dcp_cuda_conv1d_forward", ctypes.byref(params), ctypes.byref(layout),
                x.shape[0], _dtype(x), _ptr(x), _ptr(weight), _ptr(bias), _ptr(y), _stream())
    return y


@conv1d_forward.register_fake
def _(x, weight, bias, *rest):
    return torch.empty_like(x)


@torch.library.custom_op("libdcp::conv1d_backward", mutates_args=())
@_on_device
def conv1d_backward(x: Tensor, weight: Tensor, bias: Optional[Tensor], dy: Tensor,
                    cu_seqlens: Tensor, cu_seqlens_padded: Tensor, cu_seqlens_cpu: Tensor,
                    cu_seqlens_padded_cpu: Tensor, silu: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """dcp_cuda_conv1d_backward: dx (x's dtype), dweight and dbias (float32, deterministic)."""
    _on_cuda(x=x, weight=weight, bias=bias, dy=dy)
    layout, keep = _cuda_layout(cu_seqlens, cu_seqlens_padded, cu_seqlens_cpu,
                                cu_seqlens_padded_cpu, 1)
    params = _conv_params(weight, silu)
    size = ctypes.c_size_t()
    cuda().call("dcp_cuda_conv1d_workspace_size", ctypes.byref(params), ctypes.byref(size))
    workspace = _workspace(size.value, x.device)
    dx = torch.empty_like(x)
    dweight = torch.empty_like(weight, dtype=torch.float32)
    dbias = torch.empty((weight.shape[0],), dtype=torch.float32, device=x.device)
    cuda().call("dcp_cuda_conv1d_backward", ctypes.byref(params), ctypes.byref(layout),
                x.shape[0], _dtype(x), _ptr(x), _ptr(weight), _ptr(bias), _ptr(dy), _ptr(dx),
                _ptr(dweight), _ptr(dbias), _ptr(workspace), workspace.numel(), _stream())
    return dx, dweight, dbias


@conv1d_backward.register_fake
def _(x, weight, bias, dy, *rest):
    return (torch.empty_like(x), weight.new_empty(weight.shape, dtype=torch.float32),
            weight.new_empty((weight.shape[0],), dtype=torch.float32))


def _conv_setup(ctx, inputs, output):
    x, weight, bias = inputs[:3]
    ctx.save_for_backward(x, weight, bias)
    ctx.rest = inputs[3:]


def _conv_grad(ctx, dy):
    x, weight, bias = ctx.saved_tensors
    dx, dweight, dbias = conv1d_backward(x, weight, bias, dy.contiguous(), *ctx.rest)
    return (dx, dweight.to(weight.dtype), None if bias is None else dbias.to(bias.dtype)) + \
        (None,) * len(ctx.rest)


conv1d_forward.register_autograd(_conv_grad, setup_context=_conv_setup)


def conv1d(x: Tensor, weight: Tensor, bias: Optional[Tensor], layout: Layout,
           silu: bool = False) -> Tensor:
    """Causal depthwise conv1d of Gated DeltaNet over each sequence of a cp 1 layout, taps
    before a sequence's start counted as 0 (width <= 4 on the device)."""
    if layout.cp != 1:
        raise ValueError(f"conv1d takes a cp 1 layout, got cp {layout.cp}")
    return conv1d_forward(x, weight, bias, *layout.args()[:4], silu)
