"""A data-loader wrapper for dynamic CP: the role of Megatron's ``wrap_dataloader`` (seed 002).

Per global batch every rank learns all sample lengths (given, or all-gathered), plans with the
library (the same plan on every rank: the planner is deterministic), moves each sample's
tokens from the rank that loaded it to the ranks of its CP group (the library's reroute
lists), and yields, per microbatch, the packed THD buffers with cu_seqlens, position ids, the
loss mask and the CP group.

The routing (which token goes where) is plain Python over anything sliceable (lists,
``array.array``, torch tensors), so it is tested without torch; torch.distributed is only the
transport (:func:`torch_p2p_transport`). Token counts are tokens; the plan's times seconds.
"""
from dataclasses import dataclass
from typing import (Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence,
                    Tuple, Union)

from ._extras import import_torch
from .planner import FlopsStats, Plan, RankView, Transfer, plan as make_plan

Sample = Union[Sequence[int], Mapping[str, Any]]  # tokens, or per-token fields by name
# transport(outgoing, incoming_sizes, like) -> incoming: chunks to send per peer in order, and
# the row counts to receive per peer in order; returns the received chunks per peer.
Transport = Callable[[Dict[int, List[Any]], Dict[int, List[int]], Any], Dict[int, List[Any]]]
TOKENS = "tokens"


def outgoing_chunks(transfers: Iterable[Transfer], held: Mapping[int, Any]
                    ) -> Dict[int, List[Any]]:
    """Per peer, in list order, the slices of held samples this rank sends."""
    out: Dict[int, List[Any]] = {}
    for t in transfers:
        if t.kind == "send" and t.tokens > 0:
            out.setdefault(t.peer, []).append(held[t.sample][t.source_begin:t.source_end])
    return out


def incoming_sizes(transfers: Iterable[Transfer]) -> Dict[int, List[int]]:
    """Per peer, in list order, the rows this rank receives."""
    out: Dict[int, List[int]] = {}
    for t in transfers:
        if t.kind == "recv" and t.tokens > 0:
            out.setdefault(t.peer, []).append(t.tokens)
    return out


def assemble(rows: Mapping[int, int], transfers: Iterable[Transfer], held: Mapping[int, Any],
             incoming: Mapping[int, List[Any]], zeros: Callable[[int], Any]) -> Dict[int, Any]:
    """The local buffers of this rank's microbatches: ``rows[k]`` rows each from ``zeros``
    (padding stays zero), filled by local copies from ``held`` and received chunks (taken per
    peer in arrival order, which is list order on both sides)."""
    buffers = {k: zeros(n) for k, n in rows.items()}
    cursor = {peer: 0 for peer in incoming}
    for t in transfers:
        if t.tokens <= 0 or t.kind == "send":
            continue
        begin, end = t.destination_row, t.destination_row + t.tokens
        if t.kind == "copy":
            buffers[t.microbatch][begin:end] = held[t.sample][t.source_begin:t.source_end]
        else:
            chunk = incoming[t.peer][cursor[t.peer]]
            cursor[t.peer] += 1
            if len(chunk) != t.tokens:
                raise ValueError(f"chunk from rank {t.peer} for sample {t.sample} has "
                                 f"{len(chunk)} rows, the reroute list says {t.tokens}")
            buffers[t.microbatch][begin:end] = chunk
    return buffers


def list_zeros(like: Any) -> Callable[[int], Any]:
    """Zero buffers of the kind of ``like`` without torch: a list, or an array.array of its
    typecode."""
    if hasattr(like, "typecode"):
        import array
        return lambda n: array.array(like.typecode, bytes(n * like.itemsize))
    return lambda n: [0] * n


def torch_zeros(like: Any, device: Any = None) -> Callable[[int], Any]:
    """Zero buffers of n rows shaped like the torch tensor ``like`` (its trailing dimensions
    and dtype) on ``device`` (default ``like``'s device)."""
    torch = import_torch("libdcp.loader.torch_zeros")
    return lambda n: torch.zeros((n,) + tuple(like.shape[1:]), dtype=like.dtype,
                                 device=device if device is not None else like.device)


class LocalWorld:
    """Every rank of a pool in one process (tests, the one-GPU example): each rank's
    outgoing chunks are delivered to its peers. Call :meth:`exchange` for all ranks."""

    def __init__(self, plan: Plan, holders: Sequence[int]):
        self.plan, self.holders = plan, list(holders)
        self.reroutes = {r: plan.reroute(self.holders, r) for r in range(plan.ranks)}

    def exchange(self, samples: Sequence[Any], zeros: Callable[[int], Any]
                 ) -> Dict[int, Dict[int, Any]]:
        """buffers[rank][microbatch] for every rank with a group in a microbatch."""
        held = {r: {s: samples[s] for s, h in enumerate(self.holders) if h == r}
                for r in range(self.plan.ranks)}
        mail: Dict[int, Dict[int, List[Any]]] = {r: {} for r in range(self.plan.ranks)}
        for r in range(self.plan.ranks):
            for peer, chunks in outgoing_chunks(self.reroutes[r], held[r]).items():
                mail[peer][r] = chunks
        out = {}
        for r in range(self.plan.ranks):
            rows = {k: self.plan.rank_view(r, k).local_tokens
                    for k in range(self.plan.num_microbatches)}
            out[r] = assemble(rows, self.reroutes[r], held[r], mail[r], zeros)
        return out


def torch_p2p_transport(group: Any = None) -> Transport:
    """The exchange over torch.distributed point-to-point (one batch_isend_irecv; NCCL pairs
    the sends of A to B with B's receives from A in order). Ranks are global ranks of the pool;
    ``group`` the pool's process group (None: the default group). With NCCL the samples must
    already be on this rank's GPU."""
    torch = import_torch("libdcp.loader.torch_p2p_transport")
    import torch.distributed as dist

    def run(outgoing: Dict[int, List[Any]], sizes: Dict[int, List[int]], like: Any
            ) -> Dict[int, List[Any]]:
        ops: List[Any] = []
        received: Dict[int, List[Any]] = {}
        for peer, chunks in sorted(outgoing.items()):
            ops += [dist.P2POp(dist.isend, c.contiguous(), peer, group) for c in chunks]
        for peer, counts in sorted(sizes.items()):
            received[peer] = [torch.empty((n,) + tuple(like.shape[1:]), dtype=like.dtype,
                                          device=like.device) for n in counts]
            ops += [dist.P2POp(dist.irecv, t, peer, group) for t in received[peer]]
        for request in (dist.batch_isend_irecv(ops) if ops else []):
            request.wait()
        return received
    return run


@dataclass
class MicroBatch:
    """One microbatch of one rank, as :class:`DynamicCPLoader` yields it.

    Attributes:
        microbatch: its index k, 0 .. num_microbatches - 1.
        num_microbatches: K, the microbatches of this global batch.
        view: the rank's RankView of this microbatch.
        fields: each per-token field by name, packed in THD order (local rows; padding 0).
        cu_seqlens: cumulative valid lengths of the group's whole sequences (int32 tensor
            when torch is used, else a tuple).
        cu_seqlens_padded: the same for the padded lengths.
        max_seqlen: the largest padded length of a whole sequence.
        position_ids: the global position of each local row (padding 0).
        loss_mask: 1 on valid rows, 0 on padding (times a ``loss_mask`` field when the
            samples carry one).
        cp: the group's size (0 when the rank is idle).
        rank_in_group: the rank's index in the group (-1 when idle).
        group: the CP group's communicator (from ``cp_groups``), None at cp 1.
        flops: the global batch's FlopsStats (tokens and sums of squares, for MFU).
    """
    microbatch: int
    num_microbatches: int
    view: RankView
    fields: Dict[str, Any]
    cu_seqlens: Any
    cu_seqlens_padded: Any
    max_seqlen: int
    position_ids: Any
    loss_mask: Any
    cp: int
    rank_in_group: int
    group: Any
    flops: Any

    @property
    def tokens(self) -> Any:
        """The packed ``tokens`` field."""
        return self.fields[TOKENS]

    def __repr__(self) -> str:
        # the field count, not the names: names are the caller's and of any length
        return (f"<libdcp.loader.MicroBatch {self.microbatch} of {self.num_microbatches}, "
                f"rank {self.view.rank}: cp {self.cp}, {self.view.local_tokens} local rows, "
                f"{len(self.fields)} fields>")


def _fields(sample: Sample) -> Dict[str, Any]:
    return dict(sample) if isinstance(sample, Mapping) else {TOKENS: sample}


def _is_torch(value: Any) -> bool:
    return type(value).__module__.startswith("torch")


class DynamicCPLoader:
    """Wraps an iterable of global batches for rank ``rank`` of a pool of ``ranks`` ranks.

    Each item of ``batches`` is this rank's share of one global batch: a sequence of samples
    (a sample is a token sequence or a mapping of equally long per-token sequences such as
    tokens, labels, loss_mask). With ``gather=None`` every rank holds the whole global batch
    (the same samples on every rank) and nothing moves; with ``gather`` (for example
    :func:`torch_all_gather_lengths`) each rank holds its own share, sample ids are assigned in
    rank order, and ``transport`` moves tokens (:func:`torch_p2p_transport`).
    ``cp_groups(first_rank, cp)`` returns the communicator of a group (for example from
    :func:`make_torch_cp_groups`); ``device`` places torch buffers. ``fields`` names the
    per-token fields every rank routes (all ranks must agree, so it is given, not guessed from
    a share that may be empty); ``empty`` maps a field to an empty example of its buffer type
    (for example ``torch.empty(0, dtype=torch.long, device="cuda")``) used when this rank
    holds no sample of a global batch (default: Python lists). Planner options are dcp_config
    fields by name (``max_tokens_per_rank`` tokens).
    """

    def __init__(self, batches: Iterable[Sequence[Sample]], *, rank: int, ranks: int,
                 max_tokens_per_rank: int, gather: Optional[Callable[[List[int]],
                                                                     List[List[int]]]] = None,
                 transport: Optional[Transport] = None,
                 cp_groups: Optional[Callable[[int, int], Any]] = None, device: Any = None,
                 fields: Sequence[str] = (TOKENS,), empty: Optional[Mapping[str, Any]] = None,
                 **config: Any):
        if gather is not None and transport is None:
            raise ValueError("gather given without a transport: sharded samples must move")
        self.batches, self.rank, self.ranks = batches, rank, ranks
        self.max_tokens_per_rank, self.config = max_tokens_per_rank, config
        self.gather, self.transport, self.cp_groups = gather, transport, cp_groups
        self.device, self.fields, self.empty = device, tuple(fields), dict(empty or {})
        self.last_plan: Optional[Plan] = None

    def __iter__(self) -> Iterator[MicroBatch]:
        for local in self.batches:
            yield from self._global_batch([_fields(s) for s in local])

    def _global_batch(self, local: List[Dict[str, Any]]) -> Iterator[MicroBatch]:
        lengths_here = [len(s[TOKENS]) for s in local]
        if self.gather is None:
            lengths, holders = lengths_here, None
            held = dict(enumerate(local))
        else:
            per_rank = self.gather(lengths_here)
            lengths = [n for share in per_rank for n in share]
            holders = [r for r, share in enumerate(per_rank) for _ in share]
            first = sum(len(share) for share in per_rank[:self.rank])
            held = {first + i: s for i, s in enumerate(local)}
        plan = make_plan(lengths, self.ranks, self.max_tokens_per_rank, **self.config)
        self.last_plan = plan
        views = [plan.rank_view(self.rank, k) for k in range(plan.num_microbatches)]
        buffers = self._route(plan, views, holders, held)
        flops = plan.flops_stats
        for view in views:
            yield self._microbatch(plan, view, {name: b[view.microbatch]
                                                for name, b in buffers.items()}, flops)

    def _route(self, plan: Plan, views: List[RankView], holders: Optional[List[int]],
               held: Dict[int, Dict[str, Any]]) -> Dict[str, Dict[int, Any]]:
        """Per field name, the microbatch buffers of this rank."""
        rows = {v.microbatch: v.local_tokens for v in views}
        transfers: Sequence[Transfer]
        if holders is None:
            # Every rank holds every sample: as if this rank had loaded them all, its reroute
            # list is local copies (and sends to the others, which hold the samples too).
            transfers = [t for t in plan.reroute([self.rank] * plan.num_samples, self.rank)
                         if t.kind == "copy"]
        else:
            transfers = plan.reroute(holders, self.rank)
        out: Dict[str, Dict[int, Any]] = {}
        for name in self.fields:
            field_held = {s: sample[name] for s, sample in held.items()}
            like = next(iter(field_held.values())) if field_held else self.empty.get(name, [])
            zeros = (torch_zeros(like, self.device) if _is_torch(like) else list_zeros(like))
            incoming: Dict[int, List[Any]] = {}
            if holders is not None and self.transport is not None:
                incoming = self.transport(outgoing_chunks(transfers, field_held),
                                          incoming_sizes(transfers), like)
            out[name] = assemble(rows, transfers, field_held, incoming, zeros)
        return out

    def _microbatch(self, plan: Plan, view: RankView, fields: Dict[str, Any],
                    flops: FlopsStats) -> MicroBatch:
        cu, cu_padded, positions = view.cu_seqlens, view.cu_seqlens_padded, view.position_ids
        given = fields.get("loss_mask")
        if _is_torch(fields.get(TOKENS)):
            t = view.tensors(self.device if self.device is not None else fields[TOKENS].device)
            cu, cu_padded, positions = t["cu_seqlens"], t["cu_seqlens_padded"], t["position_ids"]
            mask = t["loss_mask"] if given is None else t["loss_mask"] * given.float()
        else:
            mask = list(view.loss_mask)
            if given is not None:
                mask = [m * g for m, g in zip(mask, given)]
        group = None
        if view.cp > 1 and self.cp_groups is not None:
            group = self.cp_groups(view.first_rank, view.cp)
        return MicroBatch(view.microbatch, plan.num_microbatches, view, fields, cu, cu_padded,
                          view.max_seqlen, positions, mask, view.cp, view.rank_in_group, group,
                          flops)


def torch_all_gather_lengths(group: Any = None, device: Any = None
                             ) -> Callable[[List[int]], List[List[int]]]:
    """Lengths of every rank's share through two torch.distributed.all_gather calls (counts,
    then the lengths padded to the longest share) on int64 tensors; ``device`` defaults to
    the current GPU with NCCL, else the CPU."""
    torch = import_torch("libdcp.loader.torch_all_gather_lengths")
    import torch.distributed as dist

    def run(mine: List[int]) -> List[List[int]]:
        where = device
        if where is None:
            where = (torch.device("cuda", torch.cuda.current_device())
                     if dist.get_backend(group) == "nccl" else torch.device("cpu"))
        world = dist.get_world_size(group)
        count = torch.tensor([len(mine)], dtype=torch.int64, device=where)
        counts = [torch.empty_like(count) for _ in range(world)]
        dist.all_gather(counts, count, group=group)
        counts_host = [int(c) for c in counts]
        padded = torch.zeros(max(max(counts_host), 1), dtype=torch.int64, device=where)
        padded[:len(mine)] = torch.tensor(list(mine), dtype=torch.int64)
        shares = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(shares, padded, group=group)
        return [share[:n].tolist() for share, n in zip(shares, counts_host)]
    return run


def make_torch_cp_groups(ranks: int, max_cp: int) -> Callable[[int, int], Any]:
    """Creates the communicator of every aligned block of cp ranks for cp = 2, 4, .., max_cp,
    on every rank in the same order (new_group is collective), and returns the lookup
    ``(first_rank, cp) -> ProcessGroup``."""
    import_torch("libdcp.loader.make_torch_cp_groups")
    import torch.distributed as dist
    groups: Dict[Tuple[int, int], Any] = {}
    cp = 2
    while cp <= max_cp:
        for first in range(0, ranks - cp + 1, cp):
            groups[(first, cp)] = dist.new_group(list(range(first, first + cp)))
        cp *= 2
    return lambda first_rank, cp: groups[(first_rank, cp)]
