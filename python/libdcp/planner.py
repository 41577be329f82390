"""The planner, rank views and reroute lists of dcp.h, as Python objects.

Times are seconds, lengths and rows are tokens. Every array the C library returns is copied
into Python tuples, so the objects stay valid after the C memory is freed.
"""
import ctypes
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _structs as S
from ._library import cpu

STRATEGIES = {"dynamic": 0, "static": 1, "greedy": 2}  # dcp_strategy
RING_CHARGES = {"group": 0, "sample": 1}  # dcp_ring_charge (issue 28)
TRANSFER_SEND, TRANSFER_RECV, TRANSFER_COPY = 0, 1, 2    # dcp_transfer_kind

# dcp_config fields a caller sets by name; the allocator is the library's own business. Built
# from the ctypes mirror, so a field added to dcp_config is accepted here without more code.
CONFIG_FIELDS = tuple(name for name, _ in S.Config._fields_ if name != "allocator")
COST_FIELDS = tuple(name for name, _ in S.CostModel._fields_)


INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def _int64_array(values: Iterable[int]):
    """A C int64 array (ctypes would wrap values out of range silently: refused here)."""
    values = [int(v) for v in values]
    for i, v in enumerate(values):
        if not INT64_MIN <= v <= INT64_MAX:
            raise OverflowError(f"length {i} is {v}, outside int64")
    return (ctypes.c_int64 * max(len(values), 1))(*values), len(values)


def _tuple(pointer, count: int) -> tuple:
    return tuple(pointer[i] for i in range(count)) if count > 0 else ()


def make_config(ranks: int, max_tokens_per_rank: int, **config: Any) -> S.Config:
    """A dcp_config from keyword arguments named as its fields. Zero (or leaving a field out)
    means the C default. ``strategy`` takes "dynamic", "static", "greedy" or the enum value;
    ``ring_charge`` "group" (a group's ring once per microbatch, the default) or "sample"
    (every sample its own ring: one forward per sample, as Megatron-Core 0.16 runs them);
    ``cost`` a mapping with attn_coeff (s per valid token^2), linear_coeff (s per stored
    token) and ring_step_cost (s per ring step), or a CostModel."""
    unknown = sorted(set(config) - set(CONFIG_FIELDS))
    if unknown:
        raise TypeError(f"unknown dcp_config field(s) {', '.join(unknown)}; "
                        f"known: {', '.join(CONFIG_FIELDS)}")
    c = S.Config()
    c.ranks, c.max_tokens_per_rank = ranks, max_tokens_per_rank
    for name, value in config.items():
        if name == "strategy" and isinstance(value, str):
            if value not in STRATEGIES:
                raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {value!r}")
            value = STRATEGIES[value]
        if name == "ring_charge" and isinstance(value, str):  # issue 28
            if value not in RING_CHARGES:
                raise ValueError(f"ring_charge must be one of {', '.join(RING_CHARGES)}, "
                                 f"got {value!r}")
            value = RING_CHARGES[value]
        if name == "cost" and isinstance(value, Mapping):
            bad = sorted(set(value) - set(COST_FIELDS))
            if bad:
                raise TypeError(f"unknown dcp_cost_model field(s) {', '.join(bad)}; "
                                f"known: {', '.join(COST_FIELDS)}")
            value = S.CostModel(**value)
        setattr(c, name, value)
    return c


def resolve_config(ranks: int, max_tokens_per_rank: int, **config: Any) -> Dict[str, Any]:
    """dcp_config_resolve: the config with every default filled in, as a dict."""
    return _config_dict(_resolved(ranks, max_tokens_per_rank, **config))


def _resolved(ranks: int, max_tokens_per_rank: int, **config: Any) -> S.Config:
    resolved = S.Config()
    cpu().call("dcp_config_resolve", ctypes.byref(make_config(ranks, max_tokens_per_rank,
                                                              **config)), ctypes.byref(resolved))
    return resolved


def cp_size_min(length: int, ranks: int, max_tokens_per_rank: int, **config: Any) -> int:
    """dcp_cp_size_min: the smallest CP size (>= min_cp) whose padded share of the sample
    fits max_tokens_per_rank; InfeasibleError when not even max_cp does."""
    cp = ctypes.c_int32()
    cpu().call("dcp_cp_size_min", ctypes.byref(make_config(ranks, max_tokens_per_rank, **config)),
               length, ctypes.byref(cp))
    return cp.value


class SampleCost:
    """The planner's time of one sample run alone on cp ranks (one forward): its compute
    share (dcp_cost_sample_seconds of the valid and padded length) plus its ring steps
    (dcp_cost_ring_seconds), with the config's padding and cost model. ``cost(length, cp)``
    in seconds."""

    def __init__(self, ranks: int, max_tokens_per_rank: int, **config: Any):
        self._config = _resolved(ranks, max_tokens_per_rank, **config)
        self._cost = ctypes.byref(self._config.cost)
        self._padded = ctypes.c_int64()

    def cost_model(self) -> Dict[str, float]:
        """The resolved coefficients (defaults filled in), as ``plan(cost=...)`` takes them."""
        return {name: getattr(self._config.cost, name) for name in COST_FIELDS}

    def padded_length(self, length: int, cp: int) -> int:
        cpu().call("dcp_padded_length", ctypes.byref(self._config), length, cp,
                   ctypes.byref(self._padded))
        return self._padded.value

    def __call__(self, length: int, cp: int) -> float:
        lib = cpu()
        return (lib.raw("dcp_cost_sample_seconds")(self._cost, length,
                                                   self.padded_length(length, cp), cp)
                + lib.raw("dcp_cost_ring_seconds")(self._cost, cp))


def _config_dict(c: S.Config) -> Dict[str, Any]:
    out = {name: getattr(c, name) for name in CONFIG_FIELDS}
    out["cost"] = {name: getattr(c.cost, name) for name in COST_FIELDS}
    return out


@dataclass(frozen=True)
class Group:
    """A CP group in one microbatch: ranks first_rank .. first_rank + cp - 1 process
    ``samples`` (ids = positions in the planned lengths)."""
    first_rank: int
    cp: int
    samples: Tuple[int, ...]


@dataclass(frozen=True)
class PlanStats:
    """dcp_plan_simulate's result (seconds; tokens)."""
    step_seconds: float
    barrier_seconds: float
    lower_bound_seconds: float
    efficiency: float
    busy_seconds: float
    num_microbatches: int
    num_groups: int
    idle_rank_microbatches: int
    samples_per_cp: Dict[int, int]
    valid_tokens: int
    padded_tokens: int
    max_rank_tokens: int


@dataclass(frozen=True)
class FlopsStats:
    """Tokens and sums of squared lengths of a global batch, for MFU (dcp_plan_flops_stats)."""
    valid_tokens: int
    padded_tokens: int
    sum_squared_valid: int
    sum_squared_padded: int


@dataclass(frozen=True)
class Transfer:
    """One entry of a rank's reroute list: ``kind`` is "send", "recv" or "copy"; tokens
    [source_begin, source_end) of ``sample`` (global positions) go to rows from
    ``destination_row`` of the destination rank's local buffer of ``microbatch``."""
    kind: str
    peer: int
    microbatch: int
    sample: int
    source_begin: int
    source_end: int
    destination_row: int

    @property
    def tokens(self) -> int:
        return self.source_end - self.source_begin


_KIND_NAMES = {TRANSFER_SEND: "send", TRANSFER_RECV: "recv", TRANSFER_COPY: "copy"}


@dataclass(frozen=True)
class RankView:
    """What rank ``rank`` holds in ``microbatch`` (dcp_rank_view): its group, its samples in
    buffer order and the THD metadata. cu_seqlens and cu_seqlens_padded describe the whole
    (global) sequences, as TransformerEngine takes them; the local buffer has ``local_tokens``
    rows. Per local row: ``row_samples`` (slot in ``samples``), ``positions`` (global position
    in its sample, -1 for padding), ``position_ids`` (padding 0), ``loss_mask`` (1 valid,
    0 padding) and ``token_indices`` (index into the concatenation of the view's samples'
    valid tokens, -1 for padding). sends / receives / copies: this microbatch's reroute
    entries when the view was made with holders, else None."""
    rank: int
    microbatch: int
    first_rank: int
    cp: int
    rank_in_group: int
    idle: bool
    samples: Tuple[int, ...]
    sample_lengths: Tuple[int, ...]
    pad_multiple: int
    cu_seqlens: Tuple[int, ...]
    cu_seqlens_padded: Tuple[int, ...]
    local_offsets: Tuple[int, ...]
    max_seqlen: int
    local_tokens: int
    row_samples: Tuple[int, ...]
    positions: Tuple[int, ...]
    sends: Optional[Tuple[Transfer, ...]] = None
    receives: Optional[Tuple[Transfer, ...]] = None
    copies: Optional[Tuple[Transfer, ...]] = None
    _serialized: bytes = field(default=b"", repr=False, compare=False)

    @property
    def position_ids(self) -> Tuple[int, ...]:
        return tuple(max(p, 0) for p in self.positions)

    @property
    def loss_mask(self) -> Tuple[int, ...]:
        return tuple(int(p >= 0) for p in self.positions)

    @property
    def token_indices(self) -> Tuple[int, ...]:
        starts = [0]
        for length in self.sample_lengths:
            starts.append(starts[-1] + length)
        return tuple(starts[s] + p if p >= 0 else -1
                     for s, p in zip(self.row_samples, self.positions))

    @property
    def group_ranks(self) -> Tuple[int, ...]:
        return tuple(range(self.first_rank, self.first_rank + self.cp))

    def to_bytes(self) -> bytes:
        """dcp_rank_view_serialize: for TP ranks and pipeline stages that did not plan."""
        return self._serialized

    def tensors(self, device: Any = None) -> Dict[str, Any]:
        """The metadata as torch tensors (needs torch): cu_seqlens, cu_seqlens_padded,
        local_offsets (int32, as FlashAttention and TransformerEngine take them),
        position_ids, token_indices (int64), loss_mask (float32)."""
        import torch
        i32, i64 = torch.int32, torch.int64
        return {
            "cu_seqlens": torch.tensor(self.cu_seqlens, dtype=i32, device=device),
            "cu_seqlens_padded": torch.tensor(self.cu_seqlens_padded, dtype=i32, device=device),
            "local_offsets": torch.tensor(self.local_offsets, dtype=i32, device=device),
            "position_ids": torch.tensor(self.position_ids, dtype=i64, device=device),
            "token_indices": torch.tensor(self.token_indices, dtype=i64, device=device),
            "loss_mask": torch.tensor(self.loss_mask, dtype=torch.float32, device=device),
        }


def _release(destroy: str, owner: Any, attribute: str) -> None:
    """Frees the C object an owner holds, once (also from __del__ at interpreter exit, when
    the library may already be gone: then the process is ending anyway)."""
    pointer = getattr(owner, attribute, None)
    setattr(owner, attribute, None)
    if pointer:
        try:
            cpu().raw(destroy)(pointer)
        except Exception:  # interpreter shutdown: module state partly torn down
            pass


class _ViewHandle:
    """A dcp_rank_view * owned by Python (destroyed with the object)."""

    def __init__(self, pointer):
        self.pointer = pointer

    def __del__(self):
        _release("dcp_rank_view_destroy", self, "pointer")


def _view_from_handle(handle: _ViewHandle, reroute: Optional[Sequence[Transfer]]) -> RankView:
    v = handle.pointer.contents
    n, rows = v.num_samples, v.local_tokens
    row_samples = (ctypes.c_int32 * max(rows, 1))()
    positions = (ctypes.c_int64 * max(rows, 1))()
    lib = cpu()
    lib.call("dcp_rank_view_positions", handle.pointer, row_samples, positions)
    size = ctypes.c_size_t()
    lib.call("dcp_rank_view_serialize", handle.pointer, None, 0, ctypes.byref(size))
    buffer = ctypes.create_string_buffer(size.value)
    lib.call("dcp_rank_view_serialize", handle.pointer, buffer, size, ctypes.byref(size))
    mine = None if reroute is None else [t for t in reroute if t.microbatch == v.microbatch]
    by_kind = (lambda kind: None if mine is None else tuple(t for t in mine if t.kind == kind))
    return RankView(
        rank=v.rank, microbatch=v.microbatch, first_rank=v.first_rank, cp=v.cp,
        rank_in_group=v.rank_in_group, idle=bool(v.idle), samples=_tuple(v.samples, n),
        sample_lengths=_tuple(v.sample_lengths, n), pad_multiple=v.pad_multiple,
        cu_seqlens=_tuple(v.cu_seqlens, n + 1), cu_seqlens_padded=_tuple(v.cu_seqlens_padded, n + 1),
        local_offsets=_tuple(v.local_offsets, n + 1), max_seqlen=v.max_seqlen, local_tokens=rows,
        row_samples=_tuple(row_samples, rows), positions=_tuple(positions, rows),
        sends=by_kind("send"), receives=by_kind("recv"), copies=by_kind("copy"),
        _serialized=buffer.raw[:size.value])


def rank_view_from_bytes(data: bytes) -> RankView:
    """dcp_rank_view_deserialize: a view another rank serialized (every byte checked)."""
    pointer = ctypes.POINTER(S.RankView)()
    cpu().call("dcp_rank_view_deserialize", data, len(data), None, ctypes.byref(pointer))
    return _view_from_handle(_ViewHandle(pointer), None)


class Plan:
    """A plan of dcp.h (dcp_plan): K microbatches of CP groups over ``ranks`` ranks. Build it
    with :func:`plan` or :meth:`from_bytes`. The C plan is freed with the object."""

    def __init__(self, pointer):
        self._pointer = pointer
        self._stats: Optional[PlanStats] = None

    def __del__(self):
        _release("dcp_plan_destroy", self, "_pointer")

    @property
    def _c(self) -> S.Plan:
        return self._pointer.contents

    # -- structure -------------------------------------------------------------------------
    @property
    def config(self) -> Dict[str, Any]:
        """The resolved dcp_config (no zero defaults left)."""
        return _config_dict(self._c.config)

    @property
    def ranks(self) -> int:
        return self._c.config.ranks

    @property
    def num_samples(self) -> int:
        return self._c.num_samples

    @property
    def sample_lengths(self) -> Tuple[int, ...]:
        return _tuple(self._c.sample_lengths, self._c.num_samples)

    @property
    def num_microbatches(self) -> int:
        return self._c.num_microbatches

    @property
    def groups(self) -> Tuple[Group, ...]:
        """Every group, microbatch by microbatch, each sorted by first_rank."""
        c = self._c
        members = _tuple(c.group_samples, c.num_samples)
        return tuple(Group(g.first_rank, g.cp,
                           members[g.sample_offset:g.sample_offset + g.sample_count])
                     for g in (c.groups[i] for i in range(c.num_groups)))

    @property
    def microbatches(self) -> Tuple[Tuple[Group, ...], ...]:
        """Groups per microbatch: ``microbatches[k]`` is microbatch k's groups."""
        groups, offsets = self.groups, _tuple(self._c.microbatch_offsets,
                                              self._c.num_microbatches + 1)
        return tuple(groups[offsets[k]:offsets[k + 1]] for k in range(self.num_microbatches))

    @property
    def samples(self) -> Tuple[Tuple[int, int, int], ...]:
        """Per sample id: (microbatch, first_rank, cp) of the group that processes it."""
        where = [None] * self.num_samples
        for k, groups in enumerate(self.microbatches):
            for g in groups:
                for s in g.samples:
                    where[s] = (k, g.first_rank, g.cp)
        return tuple(where)

    # -- model -----------------------------------------------------------------------------
    @property
    def stats(self) -> PlanStats:
        """dcp_plan_simulate with the plan's cost model (computed once)."""
        if self._stats is None:
            s = S.PlanStats()
            cpu().call("dcp_plan_simulate", self._pointer, None, ctypes.byref(s))
            self._stats = PlanStats(
                s.step_seconds, s.barrier_seconds, s.lower_bound_seconds, s.efficiency,
                s.busy_seconds, s.num_microbatches, s.num_groups, s.idle_rank_microbatches,
                {1 << level: s.samples_per_cp_level[level] for level in range(S.CP_LEVELS)
                 if s.samples_per_cp_level[level]},
                s.valid_tokens, s.padded_tokens, s.max_rank_tokens)
        return self._stats

    @property
    def step_seconds(self) -> float:
        """Simulated step time (DAG model: a group starts when all its ranks are free)."""
        return self.stats.step_seconds

    @property
    def lower_bound_seconds(self) -> float:
        return self.stats.lower_bound_seconds

    @property
    def efficiency(self) -> float:
        """lower bound / step time, in (0, 1]."""
        return self.stats.efficiency

    def schedule(self) -> Tuple[Tuple[float, float], ...]:
        """(start, end) seconds of every group of :attr:`groups` (dcp_plan_schedule)."""
        n = self._c.num_groups
        start, end = (ctypes.c_double * max(n, 1))(), (ctypes.c_double * max(n, 1))()
        cpu().call("dcp_plan_schedule", self._pointer, None, start, end)
        return tuple((start[i], end[i]) for i in range(n))

    def flops_stats(self) -> FlopsStats:
        s = S.FlopsStats()
        cpu().call("dcp_plan_flops_stats", self._pointer, ctypes.byref(s))
        return FlopsStats(s.valid_tokens, s.padded_tokens, s.sum_squared_valid,
                          s.sum_squared_padded)

    def validate(self) -> None:
        """dcp_plan_validate: raises InvalidPlanError naming the broken invariant."""
        cpu().call("dcp_plan_validate", self._pointer)

    # -- exchange --------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """dcp_plan_serialize: versioned, checksummed little-endian buffer."""
        lib, size = cpu(), ctypes.c_size_t()
        lib.call("dcp_plan_serialize", self._pointer, None, 0, ctypes.byref(size))
        buffer = ctypes.create_string_buffer(size.value)
        lib.call("dcp_plan_serialize", self._pointer, buffer, size, ctypes.byref(size))
        return buffer.raw[:size.value]

    @classmethod
    def from_bytes(cls, data: bytes) -> "Plan":
        """dcp_plan_deserialize: every byte and invariant checked (CorruptDataError)."""
        pointer = ctypes.POINTER(S.Plan)()
        cpu().call("dcp_plan_deserialize", bytes(data), len(data), None, ctypes.byref(pointer))
        return cls(pointer)

    def reroute(self, holders: Sequence[int], rank: int) -> Tuple[Transfer, ...]:
        """Rank ``rank``'s reroute list when the data loader left sample s on rank holders[s]:
        its sends, receives and local copies of valid tokens, over all microbatches, in the
        order every rank derives them (sends of A to B pair with B's receives from A)."""
        if len(holders) != self.num_samples:
            raise ValueError(f"holders has {len(holders)} entries, the plan "
                             f"{self.num_samples} samples")
        array = (ctypes.c_int32 * max(len(holders), 1))(*holders)
        pointer = ctypes.POINTER(S.Reroute)()
        lib = cpu()
        lib.call("dcp_reroute_create", self._pointer, array, rank, ctypes.byref(pointer))
        try:
            r = pointer.contents
            return tuple(Transfer(_KIND_NAMES[t.kind], t.peer, t.microbatch, t.sample,
                                  t.source_begin, t.source_end, t.destination_row)
                         for t in (r.transfers[i] for i in range(r.count)))
        finally:
            lib.raw("dcp_reroute_destroy")(pointer)

    def rank_view(self, rank: int, microbatch: int,
                  holders: Optional[Sequence[int]] = None) -> RankView:
        """What ``rank`` holds in ``microbatch`` (dcp_rank_view_create and
        dcp_rank_view_positions); with ``holders`` also its reroute entries for that
        microbatch (sends: tokens this rank holds that the microbatch needs elsewhere)."""
        reroute = None if holders is None else self.reroute(holders, rank)
        pointer = ctypes.POINTER(S.RankView)()
        cpu().call("dcp_rank_view_create", self._pointer, rank, microbatch, ctypes.byref(pointer))
        return _view_from_handle(_ViewHandle(pointer), reroute)

    def pack(self, rank: int, microbatch: int, samples: Sequence[Any]) -> bytearray:
        """dcp_rank_view_pack: the rank's THD buffer of ``microbatch`` gathered from whole
        per-sample buffers (``samples[id]``: any buffer-protocol object, for example an
        array.array, holding sample id's valid tokens; all of one item size), padding rows
        zero bytes. Returns local_tokens x item size bytes."""
        views = [memoryview(s) for s in samples]
        if len(views) != self.num_samples:
            raise ValueError(f"samples has {len(views)} entries, the plan {self.num_samples}")
        element = views[0].itemsize if views else 1
        if any(m.itemsize != element for m in views):
            raise ValueError("samples must share one item size")
        c_buffers = [(ctypes.c_char * m.nbytes).from_buffer_copy(m) for m in views]
        pointers = (ctypes.c_void_p * max(len(views), 1))(
            *[ctypes.addressof(b) for b in c_buffers])
        handle = _ViewHandle(ctypes.POINTER(S.RankView)())
        lib = cpu()
        lib.call("dcp_rank_view_create", self._pointer, rank, microbatch,
                 ctypes.byref(handle.pointer))
        out = bytearray(handle.pointer.contents.local_tokens * element)
        target = (ctypes.c_char * max(len(out), 1)).from_buffer(out) if out else None
        lib.call("dcp_rank_view_pack", handle.pointer, pointers, element, target)
        del target
        return out

    def svg(self, title: Optional[str] = None) -> str:
        """The plan's timeline as SVG text (dcp_plan_svg, the picture `dcp-plan --svg`
        draws): a row per rank, a box per group coloured by CP size and numbered by
        microbatch, sample ids in the hover text, time in ms. :func:`plan_svg` stacks
        several plans on one time scale."""
        return plan_svg([self], None if title is None else [title])

    def __repr__(self) -> str:
        return (f"<libdcp.Plan {self.num_samples} samples on {self.ranks} ranks, "
                f"{self.num_microbatches} microbatches>")


def plan_svg(plans: Sequence[Plan], titles: Optional[Sequence[Optional[str]]] = None) -> str:
    """Plans of one pool and one batch drawn one above the other on one time scale
    (dcp_plan_svg; `dcp-plan --compare` draws static, greedy and dynamic this way): each panel
    titled ``titles[i]`` (None: the strategy's name) and, with several, how much faster the
    last plan is."""
    plans = list(plans)
    if titles is not None and len(titles) != len(plans):
        raise ValueError(f"titles has {len(titles)} entries, plans {len(plans)}")
    pointers = (ctypes.POINTER(S.Plan) * max(len(plans), 1))(*[p._pointer for p in plans])
    names = None if titles is None else (ctypes.c_char_p * max(len(plans), 1))(
        *[None if t is None else str(t).encode("utf-8") for t in titles])
    lib, size = cpu(), ctypes.c_size_t()
    lib.call("dcp_plan_svg", pointers, names, len(plans), None, None, 0, ctypes.byref(size))
    buffer = ctypes.create_string_buffer(size.value)
    lib.call("dcp_plan_svg", pointers, names, len(plans), None, buffer, size, ctypes.byref(size))
    return buffer.value.decode("utf-8")


def plan(lengths: Sequence[int], ranks: int, max_tokens_per_rank: int, **config: Any) -> Plan:
    """Plans one global batch (dcp_plan_create).

    lengths: valid tokens of each sample; sample ids are positions in this sequence.
    ranks: D, the DP x CP ranks of the pool. max_tokens_per_rank: M, padded tokens a rank
    holds per microbatch. config: any other dcp_config field by its C name (min_cp, max_cp,
    microbatch_multiple, pad_multiple_cp1, pad_multiple, cost, strategy, improve_moves, ...),
    zero or absent for the C default; an unknown name raises TypeError. Errors of the library
    raise a DcpError subclass carrying its message (InfeasibleError, InvalidArgumentError, ...).
    """
    c = make_config(ranks, max_tokens_per_rank, **config)
    array, count = _int64_array(lengths)
    pointer = ctypes.POINTER(S.Plan)()
    cpu().call("dcp_plan_create", ctypes.byref(c), array, count, ctypes.byref(pointer))
    return Plan(pointer)


def _take_lengths(pointer, count: ctypes.c_int32) -> List[int]:
    try:
        return list(_tuple(pointer, count.value))
    finally:
        cpu().raw("dcp_free")(None, pointer)


def read_lengths(path: str) -> List[int]:
    """dcp_lengths_read_file: one length per line ('#' comments) or a CSV with a length
    column (length, seq_len, seqlen, num_tokens, ...)."""
    pointer, count = ctypes.POINTER(ctypes.c_int64)(), ctypes.c_int32()
    cpu().call("dcp_lengths_read_file", str(path).encode(), None, ctypes.byref(pointer),
               ctypes.byref(count))
    return _take_lengths(pointer, count)


def parse_lengths(text: Union[str, bytes]) -> List[int]:
    """dcp_lengths_parse on text in the formats of :func:`read_lengths`."""
    data = text.encode() if isinstance(text, str) else bytes(text)
    pointer, count = ctypes.POINTER(ctypes.c_int64)(), ctypes.c_int32()
    cpu().call("dcp_lengths_parse", data, len(data), None, ctypes.byref(pointer),
               ctypes.byref(count))
    return _take_lengths(pointer, count)


def lognormal_lengths(mean: float, sigma: float, min_length: int, max_length: int, count: int,
                      seed: int = 0) -> List[int]:
    """dcp_lengths_lognormal: Megatron's mock-SFT convention (tokens), identical on every
    platform for a seed."""
    out = (ctypes.c_int64 * max(count, 1))()
    cpu().call("dcp_lengths_lognormal", ctypes.byref(S.Lognormal(mean, sigma, min_length,
                                                                 max_length)),
               seed, out, count)
    return list(out[:count]) if count > 0 else []


def zigzag_position(padded_length: int, cp: int, rank: int, local_index: int) -> int:
    """Global position of local row ``local_index`` of ``rank`` in a group of ``cp`` ranks
    (-1 for arguments out of range)."""
    return cpu().raw("dcp_zigzag_position")(padded_length, cp, rank, local_index)
