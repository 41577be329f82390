"""Ring attention over a libdcp rank view with torch.distributed, for FlashAttention users:
forward and backward, the local attention a parameter, checked against attention without CP.

A CP group of cp ranks runs each microbatch as a ring of cp steps, in libdcp's ring order
(dcp_ring_order: members 0, 2, 4, ..., then the odd ones coming down, so a rank's neighbours are
members r +- 1 or r +- 2). Step s on a member uses the K, V that started on the member s places
before it in that order: each step every member sends the K, V it holds to the next member and
receives the previous one's (one ``batch_isend_irecv``, posted before the step's attention so
the transfer overlaps it). Which rows take part in a step, which mask it
needs and whose K, V it reads are libdcp's (``RankView.flash_attn_calls``, built on
dcp_ring_step_plan and dcp_rank_view_varlen_call): nothing about the zigzag split is re-derived
here. The steps' partial outputs merge through their log-sum-exps. Backward (a hand-written
``torch.autograd.Function.backward``) runs the ring again: each step's gradient is the local
attention's backward evaluated with the *merged* output and LSE (what FlashAttention's ring
implementations do), dQ stays on its rank, and the dK, dV accumulator of each K, V travels with
the ring, one step behind it, until it reaches the K, V's owner.

The local attention is any object with ``forward(q, k, v, call)`` -> (out, lse) and
``backward(dout, q, k, v, out, lse, call)`` -> (dq, dk, dv), where ``call`` holds the step's
cu_seqlens_q, cu_seqlens_k (int32 tensors), max_seqlen_q, max_seqlen_k, causal and
softmax_scale, as flash_attn_varlen_func names them. Two are here:
- :class:`FlashAttention`: ``flash_attn_varlen_func`` and FlashAttention's varlen backward, on a
  GPU with fp16 or bf16. NOT RUN YET: written where there is no GPU, so untested.
- :class:`MathAttention`: the same contract in plain torch ops (any device and dtype; CPU
  float32 and float64 here), with a hand-written backward.

The check (``main``) spawns --ranks processes (gloo on the CPU, NCCL with --device cuda), plans a
random batch on them with libdcp (CP groups of 1, 2 and 4 at 4 ranks, several microbatches,
padding), runs every microbatch's ring forward and backward, and compares each rank's output
and dQ, dK, dV rows with causal attention over the whole samples in float64 (plain autograd, no
CP), under a norm-wise bound and a max-abs bound (tests/tolerance.h's rule). Padding rows of
q, k and v hold NaN (a ring that read one would spread it) and must get zero output and zero
gradient.

    python python/examples/ring_attention.py --ranks 4 [--seed 1] [--dtype float64|float32]
    python python/examples/ring_attention.py --ranks 2 --device cuda --attention flash \\
        --dtype bfloat16                           # on 2 GPUs with flash_attn (not run yet)
Needs torch (pip install './python[torch]') and libdcp.so (make build/libdcp.so, or pip
install ./python). Exit status 0 when every microbatch of every rank matches.
"""
import argparse
import datetime
import inspect
import math
import os
import socket
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Sequence, Tuple

import torch
import torch.distributed as dist

import libdcp

# -- the local attention ----------------------------------------------------------------------
Call = Dict[str, Any]  # one step's flash_attn_varlen_func arguments (see RingSteps.calls)


def _expand_kv(kv: torch.Tensor, heads: int) -> torch.Tensor:
    """GQA: each K, V head serves heads / kv_heads query heads."""
    return kv.repeat_interleave(heads // kv.shape[1], dim=1)


def _fold_kv(grad: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """The gradient of _expand_kv: the query heads' gradients summed per K, V head."""
    rows, heads, dim = grad.shape
    return grad.view(rows, kv_heads, heads // kv_heads, dim).sum(dim=2)


def _sequences(call: Call) -> List[Tuple[slice, slice]]:
    """(query rows, key rows) of each sequence of a call."""
    cu_q, cu_k = call["cu_seqlens_q"].tolist(), call["cu_seqlens_k"].tolist()
    return [(slice(cu_q[j], cu_q[j + 1]), slice(cu_k[j], cu_k[j + 1]))
            for j in range(len(cu_q) - 1)]


def _scores(q: torch.Tensor, k: torch.Tensor, call: Call) -> torch.Tensor:
    """softmax_scale * q k^T of one sequence, [heads, queries, keys], -inf where the causal
    mask hides a key. The mask is aligned to the bottom right, as FlashAttention's: query i of
    lq sees key j of lk when j <= i + lk - lq."""
    scores = torch.einsum("qhd,khd->hqk", q, k) * call["softmax_scale"]
    if call["causal"]:
        lq, lk = q.shape[0], k.shape[0]
        hidden = torch.ones(lq, lk, dtype=torch.bool, device=q.device).triu(lk - lq + 1)
        scores = scores.masked_fill(hidden, -math.inf)
    return scores


class MathAttention:
    """flash_attn_varlen_func's contract in plain torch ops: out [rows, heads, dim] in q's
    dtype, lse [heads, rows] float32 (float64 for float64 inputs), natural log. Sequence by
    sequence, so memory is one sequence's scores; meant for checking and the CPU."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: Call
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        work = torch.float64 if q.dtype == torch.float64 else torch.float32
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[1], q.shape[0], dtype=work, device=q.device)
        heads = q.shape[1]
        for rows, keys in _sequences(call):
            scores = _scores(q[rows].to(work), _expand_kv(k[keys], heads).to(work), call)
            lse[:, rows] = torch.logsumexp(scores, dim=-1)
            p = torch.exp(scores - lse[:, rows, None])
            out[rows] = torch.einsum("hqk,khd->qhd", p,
                                     _expand_kv(v[keys], heads).to(work)).to(q.dtype)
        return out, lse

    def backward(self, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 out: torch.Tensor, lse: torch.Tensor, call: Call
                 ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The gradients of this step's q, k, v when out and lse are the ring's merged ones:
        P = exp(S - LSE) is then this step's share of the merged softmax, and
        dS = P (dP - rowsum(dO * O)) is exact for the merged output (FlashAttention's
        backward, written out)."""
        work = lse.dtype
        heads, kv_heads = q.shape[1], k.shape[1]
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for rows, keys in _sequences(call):
            qs, ks = q[rows].to(work), _expand_kv(k[keys], heads).to(work)
            vs, dos = _expand_kv(v[keys], heads).to(work), dout[rows].to(work)
            p = torch.exp(_scores(qs, ks, call) - lse[:, rows, None])
            delta = (dos * out[rows].to(work)).sum(dim=-1).T  # [heads, queries]
            ds = p * (torch.einsum("qhd,khd->hqk", dos, vs) - delta[..., None])
            dq[rows] = (torch.einsum("hqk,khd->qhd", ds, ks) * call["softmax_scale"]).to(q.dtype)
            dk[keys] = _fold_kv(torch.einsum("hqk,qhd->khd", ds, qs) * call["softmax_scale"],
                                kv_heads).to(k.dtype)
            dv[keys] = _fold_kv(torch.einsum("hqk,qhd->khd", p, dos), kv_heads).to(v.dtype)
        return dq, dk, dv


class FlashAttention:
    """flash_attn_varlen_func (forward, its LSE returned) and FlashAttention's varlen backward
    kernel evaluated with the ring's merged output and LSE. Needs flash_attn 2.x, a GPU, fp16
    or bf16, contiguous tensors. NOT RUN YET (written without a GPU). The backward is
    flash_attn's internal ``_flash_attn_varlen_backward``, whose arguments changed between
    releases (window_size or window_size_left/right, softcap): they are passed by name, as the
    installed version declares them."""

    def __init__(self) -> None:
        from flash_attn import flash_attn_varlen_func
        from flash_attn.flash_attn_interface import _flash_attn_varlen_backward
        self._forward, self._backward = flash_attn_varlen_func, _flash_attn_varlen_backward
        self._backward_parameters = inspect.signature(_flash_attn_varlen_backward).parameters

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: Call
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        out, lse, _ = self._forward(q, k, v, call["cu_seqlens_q"], call["cu_seqlens_k"],
                                    call["max_seqlen_q"], call["max_seqlen_k"], dropout_p=0.0,
                                    softmax_scale=call["softmax_scale"], causal=call["causal"],
                                    return_attn_probs=True)
        return out, lse  # lse: [heads, rows] float32 (flash_attn >= 2.4's varlen layout)

    def backward(self, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 out: torch.Tensor, lse: torch.Tensor, call: Call
                 ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        arguments = dict(dout=dout, q=q, k=k, v=v, out=out, softmax_lse=lse.contiguous(), dq=dq,
                         dk=dk, dv=dv, cu_seqlens_q=call["cu_seqlens_q"],
                         cu_seqlens_k=call["cu_seqlens_k"], max_seqlen_q=call["max_seqlen_q"],
                         max_seqlen_k=call["max_seqlen_k"], dropout_p=0.0,
                         softmax_scale=call["softmax_scale"], causal=call["causal"],
                         window_size=(-1, -1), window_size_left=-1, window_size_right=-1,
                         softcap=0.0, alibi_slopes=None, deterministic=False, rng_state=None)
        self._backward(**{name: value for name, value in arguments.items()
                          if name in self._backward_parameters})
        return dq, dk, dv


# -- the ring ---------------------------------------------------------------------------------
@dataclass
class RingSteps:
    """One rank's ring for one microbatch, from its libdcp rank view: per step the rows that
    take part (index tensors) and the step's attention arguments, and the ring neighbours.

    Attributes:
        calls: per step s, (q_rows, kv_rows, call): the local query rows, the rows of the K, V
            that step s brings (the member's s places before this one in the ring order), and
            the attention arguments.
        send_to: global rank of the next member in the ring order: where this rank's K, V go.
        receive_from: global rank of the previous member.
        group: the process group the ranks are global ranks of (None: the default group).
    """
    calls: List[Tuple[torch.Tensor, torch.Tensor, Call]]
    send_to: int
    receive_from: int
    group: Any = None

    @classmethod
    def from_view(cls, view: libdcp.RankView, softmax_scale: float, device: Any,
                  causal: bool = True, global_rank: Callable[[int], int] = lambda r: r,
                  group: Any = None) -> "RingSteps":
        """``global_rank`` maps a pool rank (view.group_ranks) to its rank in ``group``."""
        if view.idle:
            raise ValueError(f"rank {view.rank} is idle in microbatch {view.microbatch}")
        calls, sources = [], []
        for call in view.flash_attn_calls(causal):
            sources.append(call.kv_rank)
            arguments = dict(call.flash_attn_kwargs(device), softmax_scale=softmax_scale)
            calls.append((torch.tensor(call.q_rows, dtype=torch.long, device=device),
                          torch.tensor(call.kv_rows, dtype=torch.long, device=device),
                          arguments))
        # libdcp's steps read the K, V of the member s places before this one in its ring
        # order, every member once, this one's first: so step 1's source is the previous
        # member and step cp - 1's the next (the one to which this K, V goes for its step 1),
        # and passing K, V on to it delivers every step's K, V as libdcp reads it
        assert sources[0] == view.rank_in_group and sorted(sources) == list(range(view.cp)), \
            (sources, view)
        following = sources[-1] if view.cp > 1 else view.rank_in_group
        preceding = sources[1] if view.cp > 1 else view.rank_in_group
        members = view.group_ranks
        return cls(calls, global_rank(members[following]), global_rank(members[preceding]),
                   group)

    def pass_on(self, tensor: torch.Tensor) -> Tuple[torch.Tensor, List[Any]]:
        """Sends ``tensor`` to the next member and receives the previous member's into a new
        tensor of its shape: (the receiving tensor, the requests to wait on)."""
        received = torch.empty_like(tensor)
        requests = dist.batch_isend_irecv([
            dist.P2POp(dist.isend, tensor, self.send_to, self.group),
            dist.P2POp(dist.irecv, received, self.receive_from, self.group)])
        return received, requests


def _wait(requests: List[Any]) -> None:
    """Waits for the requests and forgets them: a gloo send request waited on a second time
    blocks until the timeout, so a list is waited on once whatever the loop does."""
    for request in requests:
        request.wait()
    requests.clear()


def _accumulator_dtype(dtype: torch.dtype) -> torch.dtype:
    """The merge and the gradient sums run in float32 for half-precision inputs."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def ring_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, steps: RingSteps,
                 attention: Any) -> Tuple[torch.Tensor, torch.Tensor]:
    """This rank's output rows and their LSE [heads, rows] (padding rows: 0 and -inf)."""
    work = _accumulator_dtype(q.dtype)
    out = torch.zeros(q.shape, dtype=work, device=q.device)
    lse = torch.full((q.shape[1], q.shape[0]), -math.inf, dtype=work, device=q.device)
    kv = torch.stack([k, v])
    for step, (q_rows, kv_rows, call) in enumerate(steps.calls):
        last = step + 1 == len(steps.calls)
        if not last:  # the next step's K, V travel while this step computes
            next_kv, requests = steps.pass_on(kv)
        part, part_lse = attention.forward(q[q_rows], kv[0][kv_rows], kv[1][kv_rows], call)
        merged = torch.logaddexp(lse[:, q_rows], part_lse.to(work))
        out[q_rows] = (out[q_rows] * torch.exp(lse[:, q_rows] - merged).T[..., None] +
                       part.to(work) * torch.exp(part_lse.to(work) - merged).T[..., None])
        lse[:, q_rows] = merged
        if not last:
            _wait(requests)
            kv = next_kv
    return out.to(q.dtype), lse


def ring_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  out: torch.Tensor, lse: torch.Tensor, steps: RingSteps, attention: Any
                  ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV of this rank's rows. At step s this rank holds the K, V of the member s places
    before it in the ring order and that K, V's dK, dV accumulator; after the step the
    accumulator moves on with the ring (the next member works on the same K, V at step s + 1),
    and after the last step one more move
    brings every accumulator home."""
    work = _accumulator_dtype(q.dtype)
    dq = torch.zeros(q.shape, dtype=work, device=q.device)
    kv = torch.stack([k, v])
    dkv = torch.zeros(kv.shape, dtype=work, device=kv.device)
    dkv_requests: List[Any] = []
    for step, (q_rows, kv_rows, call) in enumerate(steps.calls):
        last = step + 1 == len(steps.calls)
        if not last:
            next_kv, kv_requests = steps.pass_on(kv)
        dq_s, dk_s, dv_s = attention.backward(dout[q_rows], q[q_rows], kv[0][kv_rows],
                                              kv[1][kv_rows], out[q_rows], lse[:, q_rows], call)
        dq.index_add_(0, q_rows, dq_s.to(work))
        _wait(dkv_requests)  # the accumulator of this step's K, V has arrived
        dkv[0].index_add_(0, kv_rows, dk_s.to(work))
        dkv[1].index_add_(0, kv_rows, dv_s.to(work))
        if len(steps.calls) > 1:
            dkv, dkv_requests = steps.pass_on(dkv)
        if not last:
            _wait(kv_requests)
            kv = next_kv
    _wait(dkv_requests)
    return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype)


class RingAttention(torch.autograd.Function):
    """Ring attention as an autograd function: forward and backward run the ring."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, steps: RingSteps,
                attention: Any) -> torch.Tensor:
        out, lse = ring_forward(q, k, v, steps, attention)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.steps, ctx.attention = steps, attention
        return out

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> Tuple[Any, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = ring_backward(dout.contiguous(), q, k, v, out, lse, ctx.steps,
                                   ctx.attention)
        return dq, dk, dv, None, None


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, steps: RingSteps,
                   attention: Any) -> torch.Tensor:
    """Causal (or not: RingSteps.from_view's ``causal``) attention of this rank's rows q, k, v
    [local_tokens, heads or kv_heads, head_dim] over the whole sequences of its CP group."""
    out: torch.Tensor = RingAttention.apply(q, k, v, steps, attention)
    return out


# -- the check against attention without CP --------------------------------------------------
DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16,
          "float16": torch.float16}
# (norm-wise, max-abs) bounds per dtype, tests/tolerance.h's rule: ||got - ref|| / ||ref|| and
# max|got - ref| / max|ref|. float64: the sums of a ring (another order than the reference's)
# round at ~1e-16 per operation; 1e-12 leaves three orders of room. float32: 1e-5 norm-wise
# (tolerance.h's fp32 preset) and 64 float32 ulps of max|ref| (the gradients are chains of
# ~10 operations over up to a few hundred keys, tolerance_sum's reasoning). bf16 and fp16:
# tolerance.h's presets (norm 1e-2 and 3e-3; 8 ulps of max|ref| in 8 and 11 bits), doubled for
# the fp32 merge of several steps.
BOUNDS = {torch.float64: (1e-12, 1e-12), torch.float32: (1e-5, 64 * 2.0 ** -23),
          torch.bfloat16: (2e-2, 16 * 2.0 ** -8), torch.float16: (6e-3, 16 * 2.0 ** -11)}
CHECKED = ("out", "dq", "dk", "dv")
# A send without its receive (a broken ring) fails the run after this long instead of hanging
# it; a whole run takes seconds.
COMMUNICATION_TIMEOUT_SECONDS = 60
MAX_TOKENS_PER_RANK = 64   # small, so that longer samples need CP groups of 2 and 4
SAMPLES, MIN_LENGTH = 24, 5
# the longest sample: 3/4 of the pool's tokens, so that the largest CP group (the pool) is used
# and every sample still fits it after padding
LONGEST_SHARE = 0.75
PAD_MULTIPLE = 3           # padding in the middle of zigzag chunks, not only at their ends


def whole_sample_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
                           ) -> torch.Tensor:
    """Causal attention over one whole sample with plain autograd ops: the oracle."""
    heads = q.shape[1]
    scores = torch.einsum("qhd,khd->hqk", q, _expand_kv(k, heads)) * scale
    n = q.shape[0]
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
    return torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), _expand_kv(v, heads))


def errors(got: torch.Tensor, want: torch.Tensor) -> Tuple[float, float]:
    """(norm-wise, max-abs relative to max|want|) error of got against want."""
    got, want = got.double(), want.double()
    scale = want.abs().max().item() or 1.0
    return ((got - want).norm().item() / (want.norm().item() or 1.0),
            (got - want).abs().max().item() / scale)


def run_rank(rank: int, world: int, args: argparse.Namespace, port: int) -> None:
    device = torch.device("cuda", rank) if args.device == "cuda" else torch.device("cpu")
    if args.device == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo",
                            init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=COMMUNICATION_TIMEOUT_SECONDS))
    try:
        worst, padding, microbatches, cp_sizes = check_rank(rank, world, args, device)
        # every rank learns the worst errors of the pool, so all agree on the verdict
        table = torch.tensor([e for pair in worst for e in pair] + [padding],
                             dtype=torch.float64, device=device)
        dist.all_reduce(table, op=dist.ReduceOp.MAX)
        values = table.tolist()
        # rank 0 prints every rank's line: processes writing to one pipe would mix theirs
        summaries: List[Any] = [None] * world
        dist.all_gather_object(summaries, (microbatches, cp_sizes))
    finally:
        dist.destroy_process_group()
    worst = [(values[2 * i], values[2 * i + 1]) for i in range(len(CHECKED))]
    padding = values[-1]
    norm_bound, max_bound = BOUNDS[DTYPES[args.dtype]]
    failed = [name for name, (norm, top) in zip(CHECKED, worst)
              if not (norm <= norm_bound and top <= max_bound)]  # NaN fails too
    if rank == 0:
        for member, (microbatches, cp_sizes) in enumerate(summaries):
            print(f"rank {member}: {microbatches} microbatches, cp sizes run {cp_sizes}")
        print(f"ring attention, {world} ranks, {args.dtype}, {args.attention} attention, "
              f"seed {args.seed}: " + ", ".join(f"{name} {norm:.1e} (max {top:.1e})"
                                                for name, (norm, top) in zip(CHECKED, worst)) +
              f"; bounds {norm_bound:.0e} (max {max_bound:.1e}); largest padding value "
              f"{padding:g}", flush=True)
    if failed or padding != 0.0:
        raise RuntimeError(f"{', '.join(failed) or 'a padding row'} outside the bounds "
                           f"(seed {args.seed})")


def check_rank(rank: int, world: int, args: argparse.Namespace, device: torch.device
               ) -> Tuple[List[Tuple[float, float]], float, int, List[int]]:
    """Runs every microbatch this rank has a group in; returns the worst (norm, max) error of
    out, dq, dk, dv over them, the largest absolute value on a padding row, the plan's
    microbatch count and the CP sizes this rank ran."""
    dtype = DTYPES[args.dtype]
    generator = torch.Generator().manual_seed(args.seed)  # the same batch on every rank
    longest = int(LONGEST_SHARE * world * MAX_TOKENS_PER_RANK)
    lengths = torch.randint(MIN_LENGTH, longest + 1, (SAMPLES,), generator=generator).tolist()
    plan = libdcp.plan(lengths, ranks=world, max_tokens_per_rank=MAX_TOKENS_PER_RANK,
                       pad_multiple=PAD_MULTIPLE)
    shapes = ((args.heads, args.head_dim), (args.kv_heads, args.head_dim),
              (args.kv_heads, args.head_dim), (args.heads, args.head_dim))
    # q, k, v and the output's gradient of every whole sample, float64, on every rank
    whole = [[torch.randn((n,) + shape, generator=generator, dtype=torch.float64)
              for shape in shapes] for n in lengths]
    scale = args.head_dim ** -0.5
    attention = FlashAttention() if args.attention == "flash" else MathAttention()
    worst = [(0.0, 0.0)] * len(CHECKED)
    padding_value = 0.0
    cp_sizes = set()
    for k in range(plan.num_microbatches):
        view = plan.rank_view(rank, k)
        if view.idle:
            continue
        cp_sizes.add(view.cp)
        indices = torch.tensor(view.token_indices)
        valid = indices >= 0

        def local(field: int, fill: float) -> torch.Tensor:
            """This rank's rows of a field (padding rows ``fill``), in the run's dtype."""
            tokens = torch.cat([whole[s][field] for s in view.samples])
            rows = torch.full((view.local_tokens,) + tokens.shape[1:], fill,
                              dtype=torch.float64)
            rows[valid] = tokens[indices[valid]]
            return rows.to(dtype=dtype, device=device)
        q, kk, v = (local(f, math.nan).requires_grad_() for f in range(3))
        dout = local(3, 0.0)
        steps = RingSteps.from_view(view, scale, device)
        out = ring_attention(q, kk, v, steps, attention)
        out.backward(dout)
        # the oracle: whole samples, float64, plain autograd, no CP
        expected: List[List[torch.Tensor]] = [[], [], [], []]
        for s in view.samples:
            qs, ks, vs = (whole[s][f].clone().requires_grad_() for f in range(3))
            reference = whole_sample_attention(qs, ks, vs, scale)
            reference.backward(whole[s][3])
            for i, value in enumerate((reference, qs.grad, ks.grad, vs.grad)):
                expected[i].append(value.detach())
        for i, (got, want) in enumerate(zip((out, q.grad, kk.grad, v.grad), expected)):
            got = got.detach().cpu()
            norm, top = errors(got[valid], torch.cat(want)[indices[valid]])
            worst[i] = (max(worst[i][0], norm), max(worst[i][1], top))
            padding = got[~valid]
            if padding.numel():
                padding_value = max(padding_value, padding.abs().max().item())
    return worst, padding_value, plan.num_microbatches, sorted(cp_sizes)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4, help="processes (GPUs with cuda)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dtype", choices=DTYPES, default="float64")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--attention", choices=("math", "flash"), default="math")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2, help="divides --heads (GQA)")
    parser.add_argument("--head-dim", type=int, default=8)
    args = parser.parse_args(argv)
    if args.attention == "flash" and (args.device != "cuda" or args.dtype not in
                                      ("bfloat16", "float16")):
        parser.error("--attention flash needs --device cuda and --dtype bfloat16 or float16")
    print(f"seed {args.seed}", flush=True)
    with socket.socket() as probe:  # a free port for the process group's rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    try:
        torch.multiprocessing.spawn(run_rank, args=(args.ranks, args, port), nprocs=args.ranks)
    except torch.multiprocessing.ProcessRaisedException as failure:
        print(failure, file=sys.stderr)  # the failing rank's traceback
        print(f"FAILED: {str(failure).strip().splitlines()[-1]}", file=sys.stderr)
        return 1
    except torch.multiprocessing.ProcessExitedException as failure:
        print(f"FAILED: {failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # ranks share the CPU cores
    sys.exit(main(sys.argv[1:]))
