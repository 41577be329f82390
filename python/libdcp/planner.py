"""The planner, rank views and reroute lists of dcp.h, as Python objects.

Times are seconds, lengths and rows are tokens. Every array the C library returns is copied
into Python tuples, so the objects stay valid after the C memory is freed. Counts are
integers: a bool, a float or a str where dcp.h takes an integer raises TypeError naming the
argument (and the index in a sequence), and a value outside the C field's width raises
OverflowError, so nothing is truncated silently.
"""
import ctypes
import operator
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _json
from . import _structs as S
from ._extras import import_torch
from ._library import DcpError, cpu

STRATEGIES = {"dynamic": 0, "static": 1, "greedy": 2}  # dcp_strategy, by name
STRATEGY_NAMES = {value: name for name, value in STRATEGIES.items()}
RING_CHARGES = {"group": 0, "sample": 1}  # dcp_ring_charge, by name
RING_CHARGE_NAMES = {value: name for name, value in RING_CHARGES.items()}
CP_SIZES = {"pow2": 0, "megatron": 1, "any": 2, "list": 3}  # dcp_cp_sizes, by name
CP_SIZES_NAMES = {value: name for name, value in CP_SIZES.items()}
TRANSFER_SEND, TRANSFER_RECV, TRANSFER_COPY = 0, 1, 2    # dcp_transfer_kind
DEFAULT_SEED, NO_GROUP = S.DEFAULT_SEED, S.NO_GROUP

# dcp_config fields a caller sets by name; the allocator is the library's own business, and the
# explicit size list is given as cp_sizes=[...] (cp_size_count and cp_size_list follow). Built
# from the ctypes mirror, so a field added to dcp_config is accepted here without more code.
_LIST_FIELDS = ("cp_size_count", "cp_size_list")
CONFIG_FIELDS = tuple(f[0] for f in S.Config._fields_
                      if f[0] != "allocator" and f[0] not in _LIST_FIELDS)
COST_FIELDS = tuple(f[0] for f in S.CostModel._fields_)

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_RANGES = {ctypes.c_int32: (INT32_MIN, INT32_MAX), ctypes.c_int64: (INT64_MIN, INT64_MAX)}
# memoryview formats of integer elements; the native signed 64-bit ones are passed in place
_INTEGER_FORMATS = set("bBhHiIlLqQnN")
_INT64_FORMATS = {"q", "l", "=q", "<q", "@q", "@l"}


# -- argument checks -------------------------------------------------------------------------
def check_int(name: str, value: Any, ctype: Any = ctypes.c_int64) -> int:
    """``value`` as a Python int that fits ``ctype`` (c_int32 or c_int64). Integers of any
    kind (numpy's, torch's 0-d ones) are taken through ``__index__``; bool, float and str are
    refused with TypeError naming ``name``, values outside the type with OverflowError."""
    if isinstance(value, bool) or type(value).__name__ in ("bool_", "bool"):
        raise TypeError(f"{name} must be an integer, got the bool {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}"
                        ) from None
    low, high = _RANGES[ctype]
    if not low <= number <= high:
        raise OverflowError(f"{name} is {number}, outside the C type's [{low}, {high}]")
    return number


def check_real(name: str, value: Any) -> float:
    """``value`` as a float: ints and floats (numpy's too), not bool or str."""
    if isinstance(value, (bool, str, bytes)) or type(value).__name__ in ("bool_", "bool"):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}"
                        ) from None


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool) or type(value).__name__ in ("bool_", "bool")


def check_bool(name: str, value: Any) -> bool:
    """``value`` as a bool: True or False (numpy's too); 1, "yes" and None are refused with
    TypeError naming ``name``, so that a misplaced argument cannot pass as a flag."""
    if not _is_bool(value):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def check_bytes(name: str, value: Any) -> bytes:
    """``value``'s bytes: bytes, bytearray, memoryview or any other buffer; a str (text, not
    bytes) and non-buffers are refused with TypeError naming ``name``."""
    if isinstance(value, str):
        raise TypeError(f"{name} must be bytes (a buffer), got str: encode it or pass the "
                        f"bytes to_bytes() returned")
    try:
        return bytes(memoryview(value))
    except TypeError:
        raise TypeError(f"{name} must be bytes (a buffer), got {type(value).__name__}"
                        ) from None


def check_path(name: str, value: Any) -> str:
    """``value`` as a file path: a str, bytes or os.PathLike (pathlib.Path); anything else is
    refused with TypeError naming ``name`` (None is not the file "None")."""
    if not isinstance(value, (str, bytes, os.PathLike)):
        raise TypeError(f"{name} must be a path (str, bytes or os.PathLike), got "
                        f"{type(value).__name__} {value!r}")
    return os.fsdecode(value)


def check_optional_str(name: str, value: Any) -> Optional[str]:
    """``value`` when it is a str or None; TypeError naming ``name`` otherwise."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name} must be a str or None, got {type(value).__name__} {value!r}")
    return value


def check_sequence(name: str, value: Any, of: str) -> List[Any]:
    """``value``'s items as a list: any iterable but a str or bytes (whose items are
    characters); TypeError naming ``name`` and what it holds (``of``) otherwise."""
    if isinstance(value, (str, bytes, bytearray)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be a sequence of {of}, got {type(value).__name__} "
                        f"{value!r}")
    return list(value)


class IntArray:
    """A C array of int32 or int64 made from a caller's integers, without a copy where the
    caller's memory already is one (a contiguous writable buffer of native int64: numpy's
    int64 arrays, ``array.array("q")``; a contiguous CPU int64 torch tensor); ``pointer`` is
    what to pass, ``count`` how many, ``keep`` what must stay alive meanwhile."""

    def __init__(self, name: str, values: Any, ctype: Any = ctypes.c_int64):
        self.name, self.ctype = name, ctype
        self.keep: Any = None
        self.shared = False  # True when pointer is the caller's memory
        if isinstance(values, (str, bytes, bytearray)):
            raise TypeError(f"{name} must be a sequence of integers, not {type(values).__name__}")
        if type(values).__module__.startswith("torch"):
            self._from_tensor(values)
        else:
            try:
                view: Optional[memoryview] = memoryview(values)
            except TypeError:
                view = None
            if view is not None:
                self._from_buffer(view)
            else:
                self._from_items(check_sequence(name, values, "integers"))

    def _from_items(self, items: List[Any]) -> None:
        checked = [check_int(f"{self.name}[{i}]", v, self.ctype) for i, v in enumerate(items)]
        self.count = len(checked)
        self.keep = (self.ctype * max(self.count, 1))(*checked)
        self.pointer: Any = self.keep

    def _from_buffer(self, view: memoryview) -> None:
        kind = view.format.lstrip("@=<>!")
        if view.ndim != 1:
            raise TypeError(f"{self.name} must be one-dimensional, got {view.ndim} dimensions")
        if kind not in _INTEGER_FORMATS:
            raise TypeError(f"{self.name} must hold integers, got elements of format "
                            f"{view.format!r} (bool or floating point)")
        zero_copy = (self.ctype is ctypes.c_int64 and view.format in _INT64_FORMATS and
                     view.itemsize == 8 and view.c_contiguous and not view.readonly)
        if not zero_copy:
            return self._from_items(view.tolist())
        self.count = len(view)
        self.keep = (ctypes.c_int64 * max(self.count, 1)).from_buffer(view) if self.count else \
            (ctypes.c_int64 * 1)()
        self.pointer = self.keep
        self.shared = self.count > 0
        return None

    def _from_tensor(self, tensor: Any) -> None:
        import torch
        if tensor.dtype == torch.bool or tensor.dtype.is_floating_point or tensor.is_complex():
            raise TypeError(f"{self.name} must hold integers, got a {tensor.dtype} tensor")
        if tensor.dim() != 1:
            raise TypeError(f"{self.name} must be one-dimensional, got {tensor.dim()} dimensions")
        if not (self.ctype is ctypes.c_int64 and tensor.dtype == torch.int64 and
                tensor.device.type == "cpu" and tensor.is_contiguous()):
            return self._from_items(tensor.tolist())
        self.count = int(tensor.numel())
        self.keep = tensor
        self.pointer = ctypes.cast(tensor.data_ptr(), ctypes.POINTER(ctypes.c_int64)) \
            if self.count else (ctypes.c_int64 * 1)()
        self.shared = self.count > 0
        return None


def _tuple(pointer: Any, count: int) -> Tuple[Any, ...]:
    return tuple(pointer[i] for i in range(count)) if count > 0 else ()


def _enum_value(field: str, value: Any, table: Dict[str, int]) -> int:
    names = ", ".join(map(repr, table))
    if not isinstance(value, str):
        raise TypeError(f"{field} must be one of {names} (by name), got "
                        f"{type(value).__name__} {value!r}")
    if value not in table:
        raise ValueError(f"{field} must be one of {names}, got {value!r}")
    return table[value]


def _cost_model(value: Any) -> S.CostModel:
    if isinstance(value, S.CostModel):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(f"cost must be a mapping of {', '.join(COST_FIELDS)}, got "
                        f"{type(value).__name__}")
    bad = sorted(set(value) - set(COST_FIELDS))
    if bad:
        raise TypeError(f"unknown dcp_cost_model field(s) {', '.join(bad)}; "
                        f"known: {', '.join(COST_FIELDS)}")
    return S.CostModel(**{name: check_real(f"cost[{name!r}]", v) for name, v in value.items()})


def make_config(ranks: int, max_tokens_per_rank: int, **config: Any) -> S.Config:
    """A dcp_config from keyword arguments named as its fields. Zero (or leaving a field out)
    means the C default, exactly as in C and in dcp-plan. ``strategy`` takes "dynamic",
    "static" or "greedy"; ``ring_charge`` "group" (a group's ring once per microbatch, the
    default) or "sample" (every sample its own ring: one forward per sample, as Megatron-Core
    0.16 runs them); ``cp_sizes`` "pow2" (the default), "megatron" (the CP sizes
    Megatron-Core has communicators for: powers of two below 2^floor(log2 D), and D), "any"
    (every size; groups on any range of ranks) or a sequence of sizes; ``head_count`` the heads
    a hybrid model's all-to-all splits (every CP size must divide it);
    ``cover_ranks`` True to put a sample on every rank; ``cost`` a mapping with attn_coeff (s per valid token^2), linear_coeff
    (s per stored token) and ring_step_cost (s per ring step), those left out 0 (all three 0:
    the default model)."""
    unknown = sorted(set(config) - set(CONFIG_FIELDS))
    if unknown:
        raise TypeError(f"unknown dcp_config field(s) {', '.join(unknown)}; "
                        f"known: {', '.join(CONFIG_FIELDS)}")
    c = S.Config()
    config = dict(config, ranks=ranks, max_tokens_per_rank=max_tokens_per_rank)
    widths = {f[0]: f[1] for f in S.Config._fields_}
    for name, value in config.items():
        if name == "strategy":
            value = _enum_value(name, value, STRATEGIES)
        elif name == "ring_charge":
            value = _enum_value(name, value, RING_CHARGES)
        elif name == "cp_sizes" and not isinstance(value, (str, int)):
            sizes = _size_list(value)
            c.cp_size_count = len(sizes)
            for i, size in enumerate(sizes):
                c.cp_size_list[i] = size
            value = CP_SIZES["list"]
        elif name == "cp_sizes":
            value = _enum_value(name, value, CP_SIZES)
        elif name == "cover_ranks" and isinstance(value, bool):
            value = int(value)  # a flag: True / False as well as 1 / 0
        elif name == "cost":
            value = _cost_model(value)
        else:
            value = check_int(name, value, widths[name])
        setattr(c, name, value)
    return c


def _size_list(value: Any) -> List[int]:
    """cp_sizes given as a sequence of sizes (DCP_CP_SIZES_LIST), checked as ints."""
    try:
        sizes = [check_int(f"cp_sizes[{i}]", size, ctypes.c_int32) for i, size in enumerate(value)]
    except TypeError as failure:
        if "cp_sizes[" in str(failure):
            raise
        raise TypeError(f"cp_sizes must be 'pow2', 'megatron', 'any' or a sequence of sizes, got "
                        f"{type(value).__name__}") from failure
    if not 1 <= len(sizes) <= S.CP_SIZE_LIST_CAPACITY:
        raise ValueError(f"cp_sizes lists {len(sizes)} sizes; a list holds 1 to "
                         f"{S.CP_SIZE_LIST_CAPACITY}")
    return sizes


def _config_dict(c: S.Config) -> Dict[str, Any]:
    out: Dict[str, Any] = {name: getattr(c, name) for name in CONFIG_FIELDS}
    out["cost"] = {name: getattr(c.cost, name) for name in COST_FIELDS}
    out["strategy"] = STRATEGY_NAMES.get(c.strategy, c.strategy)
    out["ring_charge"] = RING_CHARGE_NAMES.get(c.ring_charge, c.ring_charge)
    out["cp_sizes"] = CP_SIZES_NAMES.get(c.cp_sizes, c.cp_sizes)
    if c.cp_sizes == CP_SIZES["list"]:
        out["cp_sizes"] = [c.cp_size_list[i] for i in range(c.cp_size_count)]
    return out


def resolve_config(ranks: int, max_tokens_per_rank: int, **config: Any) -> Dict[str, Any]:
    """dcp_config_resolve: the config with every default filled in, as a dict (the
    strategy and the ring charge by name)."""
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
               check_int("length", length), ctypes.byref(cp))
    return cp.value


def cp_sizes(ranks: int, max_tokens_per_rank: int = 1, **config: Any) -> Tuple[int, ...]:
    """The CP sizes a plan of this config may give a group, ascending (dcp_cp_size_next over
    the resolved config): cp_sizes "pow2" the powers of two in [min_cp, max_cp], "megatron"
    Megatron-Core's hybrid-CP group sizes (2^i < 2^floor(log2 D), and D)."""
    resolved = _resolved(ranks, max_tokens_per_rank, **config)
    following = cpu().raw("dcp_cp_size_next")
    sizes = [resolved.min_cp]
    while True:
        size = following(ctypes.byref(resolved), sizes[-1])
        if size <= 0:
            return tuple(sizes)
        sizes.append(size)


class SampleCost:
    """The planner's time of one sample run alone on cp ranks (one forward): its compute
    share (dcp_cost_sample_seconds of the valid and padded length) plus its ring steps
    (dcp_cost_ring_seconds), with the config's padding and cost model. ``cost(length, cp)``
    in seconds."""

    def __init__(self, ranks: int, max_tokens_per_rank: int, **config: Any):
        self._config = _resolved(ranks, max_tokens_per_rank, **config)
        self._cost = ctypes.byref(self._config.cost)
        self._padded = ctypes.c_int64()

    def __repr__(self) -> str:
        c = self._config
        return (f"<libdcp.SampleCost ranks {c.ranks}, max_tokens_per_rank "
                f"{c.max_tokens_per_rank}, cp {c.min_cp}-{c.max_cp}>")

    def cost_model(self) -> Dict[str, float]:
        """The resolved coefficients (defaults filled in), as ``plan(cost=...)`` takes them."""
        return {name: getattr(self._config.cost, name) for name in COST_FIELDS}

    def padded_length(self, length: int, cp: int) -> int:
        """dcp_padded_length: the tokens a sample of ``length`` valid tokens is stored as at
        CP size ``cp`` (padded to the config's multiple at that size)."""
        cpu().call("dcp_padded_length", ctypes.byref(self._config), check_int("length", length),
                   check_int("cp", cp, ctypes.c_int32), ctypes.byref(self._padded))
        return self._padded.value

    def __call__(self, length: int, cp: int) -> float:
        lib = cpu()
        seconds: float = (lib.raw("dcp_cost_sample_seconds")(
            self._cost, length, self.padded_length(length, cp), cp)
            + lib.raw("dcp_cost_ring_seconds")(self._cost, cp))
        return seconds


# -- results ---------------------------------------------------------------------------------
# Values a repr lists before it says "... N in all": repr() stays one line under 200 characters
# whatever the batch size.
REPR_ITEMS = 4


def _short(values: Sequence[Any], most: int = REPR_ITEMS) -> str:
    """A tuple's repr, shortened to its first values and its length."""
    if len(values) <= most:
        return repr(tuple(values))
    return f"({', '.join(map(repr, values[:most]))}, ... {len(values)} in all)"


@dataclass(frozen=True)
class Group:
    """A CP group in one microbatch: ranks first_rank .. first_rank + cp - 1 process
    ``samples`` (ids = positions in the planned lengths), in buffer order.

    Attributes:
        first_rank: pool rank of the group's member 0, a multiple of cp.
        cp: the group's size, a power of two.
        samples: sample ids, in buffer order.
    """
    first_rank: int
    cp: int
    samples: Tuple[int, ...]

    def __repr__(self) -> str:
        return f"Group(first_rank={self.first_rank}, cp={self.cp}, samples={_short(self.samples)})"


@dataclass(frozen=True)
class PlanStats:
    """dcp_plan_simulate's result (seconds; tokens). ``step_seconds``, ``lower_bound_seconds``
    and ``efficiency`` are under the plan's sync model E (``sync_ranks``); ``dag_*`` under
    E = 1 (a group starts when its ranks are free: dense models), ``barrier_*`` under E = D
    (every microbatch waits for its slowest group).

    Attributes:
        sync_ranks: E, the plan's sync model (1: dense models, ranks: a barrier per
            microbatch).
        step_seconds: the simulated step time under E.
        lower_bound_seconds: a lower bound on any plan's step under E.
        efficiency: lower_bound_seconds / step_seconds, in (0, 1].
        dag_seconds, dag_lower_bound_seconds, dag_efficiency: the same under E = 1.
        barrier_seconds, barrier_lower_bound_seconds, barrier_efficiency: the same under
            E = D.
        busy_seconds: the sum over ranks of the time each spends computing.
        num_microbatches: K, the microbatches of the plan.
        num_groups: groups over all microbatches.
        idle_rank_microbatches: (rank, microbatch) pairs with no group.
        samples_per_cp: CP size -> samples planned at it (sizes not used are absent).
        valid_tokens: the sum of the sample lengths.
        padded_tokens: the sum of the stored (padded) lengths.
        max_rank_tokens: the most padded tokens any rank holds in one microbatch.
    """
    sync_ranks: int
    step_seconds: float
    lower_bound_seconds: float
    efficiency: float
    dag_seconds: float
    dag_lower_bound_seconds: float
    dag_efficiency: float
    barrier_seconds: float
    barrier_lower_bound_seconds: float
    barrier_efficiency: float
    busy_seconds: float
    num_microbatches: int
    num_groups: int
    idle_rank_microbatches: int
    samples_per_cp: Dict[int, int]
    valid_tokens: int
    padded_tokens: int
    max_rank_tokens: int

    def __repr__(self) -> str:
        sizes = sorted(self.samples_per_cp)
        used = f"cp {sizes[0]}-{sizes[-1]}" if sizes else "no samples"
        return (f"<libdcp.PlanStats step {self.step_seconds * 1e3:.4g} ms, lower bound "
                f"{self.lower_bound_seconds * 1e3:.4g} ms, efficiency {self.efficiency:.3f} "
                f"(E={self.sync_ranks}), {self.num_microbatches} microbatches, "
                f"{self.num_groups} groups, {used}>")


@dataclass(frozen=True)
class FlopsStats:
    """Tokens and sums of squared lengths of a global batch, for MFU (dcp_plan_flops_stats).

    Attributes:
        valid_tokens: the sum of the valid lengths (linear layers' useful work).
        padded_tokens: the sum of the padded lengths (the work the ranks do).
        sum_squared_valid: the sum of valid length squared (attention's useful work).
        sum_squared_padded: the sum of padded length squared.
    """
    valid_tokens: int
    padded_tokens: int
    sum_squared_valid: int
    sum_squared_padded: int


@dataclass(frozen=True)
class Transfer:
    """One entry of a rank's reroute list: tokens [source_begin, source_end) of ``sample``
    (global positions) go to rows from ``destination_row`` of the destination rank's local
    buffer of ``microbatch``.

    Attributes:
        kind: "send" (this rank holds the tokens, peer needs them), "recv" (the reverse) or
            "copy" (both on this rank).
        peer: the other pool rank (this rank for a copy).
        microbatch: the microbatch whose buffer receives the tokens.
        sample: the sample id.
        source_begin, source_end: the tokens' global positions in the sample, end excluded.
        destination_row: the first local row they fill on the receiving rank.
    """
    kind: str
    peer: int
    microbatch: int
    sample: int
    source_begin: int
    source_end: int
    destination_row: int

    @property
    def tokens(self) -> int:
        """The tokens this entry moves (source_end - source_begin)."""
        return self.source_end - self.source_begin


_KIND_NAMES = {TRANSFER_SEND: "send", TRANSFER_RECV: "recv", TRANSFER_COPY: "copy"}


@dataclass(frozen=True)
class RowRun:
    """Local rows ``first_row`` .. + ``rows`` of sample ``sample`` (an id) holding global
    positions from ``position`` on, or padding (``position`` -1): dcp_rank_view_runs.

    Attributes:
        first_row: the run's first local row.
        rows: its row count (>= 1).
        sample: the id of the sample the rows belong to.
        position: the global position of first_row, one more per row; -1 for padding.
    """
    first_row: int
    rows: int
    sample: int
    position: int


@dataclass(frozen=True)
class VarlenCall:
    """Ring step ``step`` of a rank as one call of FlashAttention's
    ``flash_attn_varlen_func`` (dcp_rank_view_varlen_call): gather the query rows ``q_rows``
    of this rank's local q and the key rows ``kv_rows`` of the local k and v of group rank
    ``kv_rank`` (pool rank ``kv_source``: the KV that reached this rank at this step), call
    with :meth:`flash_attn_kwargs`, and merge the calls' outputs into rows ``q_rows`` through
    their LSEs. Only valid rows take part; padding rows get no output.

    Attributes:
        step: the ring step, 0 .. cp - 1.
        kv_rank: group rank whose K, V this step reads: the rank ``step`` places before this
            one in libdcp's ring order (dcp_ring_order: 0, 2, 4, ..., 5, 3, 1).
        kv_source: the same as a pool rank (first_rank + kv_rank).
        causal: whether the call needs the causal mask (step 0 of a causal ring only).
        cu_seqlens_q, cu_seqlens_k: cumulative query and key rows of the call's sequences.
        max_seqlen_q, max_seqlen_k: the longest query and key run of the call.
        q_rows: the local query rows, in call order (gather q[q_rows]).
        kv_rows: the source's local key rows, in call order (gather k[kv_rows], v[kv_rows]).
    """
    step: int
    kv_rank: int
    kv_source: int
    causal: bool
    cu_seqlens_q: Tuple[int, ...]
    cu_seqlens_k: Tuple[int, ...]
    max_seqlen_q: int
    max_seqlen_k: int
    q_rows: Tuple[int, ...]
    kv_rows: Tuple[int, ...]

    def flash_attn_kwargs(self, device: Any = None) -> Dict[str, Any]:
        """cu_seqlens_q, cu_seqlens_k (int32 torch tensors on ``device``; tuples when it is
        None), max_seqlen_q, max_seqlen_k and causal, as flash_attn_varlen_func names them."""
        return {"cu_seqlens_q": _int32_tensor(self.cu_seqlens_q, device),
                "cu_seqlens_k": _int32_tensor(self.cu_seqlens_k, device),
                "max_seqlen_q": self.max_seqlen_q, "max_seqlen_k": self.max_seqlen_k,
                "causal": self.causal}

    def __repr__(self) -> str:
        return (f"VarlenCall(step={self.step}, kv_source={self.kv_source}, causal={self.causal}"
                f", {len(self.cu_seqlens_q) - 1} sequences, {len(self.q_rows)} q rows, "
                f"{len(self.kv_rows)} kv rows)")


def _int32_tensor(values: Sequence[int], device: Any) -> Any:
    if device is None:
        return tuple(values)
    torch = import_torch("a device for the view's arguments")
    return torch.tensor(list(values), dtype=torch.int32, device=device)


@dataclass(frozen=True, repr=False)
class RankView:
    """What rank ``rank`` holds in ``microbatch`` (dcp_rank_view): its group, its samples in
    buffer order and the THD metadata. cu_seqlens and cu_seqlens_padded describe the whole
    (global) sequences, as TransformerEngine takes them; the local buffer has ``local_tokens``
    rows. Per local row: ``row_samples``, ``positions``, :attr:`position_ids`,
    :attr:`loss_mask` and :attr:`token_indices`; ``runs`` the same rows as runs. An idle rank
    (``idle``) has cp 0, first_rank and rank_in_group NO_GROUP (-1) and no samples: nothing
    about it looks like a group. See docs/integration.md for the arguments of FlashAttention,
    TransformerEngine and libdcp.ops.

    Attributes:
        rank, microbatch: the pool rank and the microbatch the view is of.
        first_rank: pool rank of the group's member 0; NO_GROUP (-1) when idle.
        cp: the group's size; 0 when idle.
        rank_in_group: rank - first_rank, the index in the group's communicator; -1 when idle.
        idle: the rank has no group in this microbatch.
        samples: the group's sample ids, in buffer order.
        sample_lengths: their valid lengths.
        pad_multiple: every padded length is a multiple of it (0 when idle).
        cu_seqlens: cumulative valid lengths of the whole sequences, from 0.
        cu_seqlens_padded: the same for the padded (stored) lengths.
        local_offsets: cu_seqlens_padded / cp: where each sample starts in the local buffer.
        max_seqlen: the largest padded length of a whole sample (0 when idle).
        local_tokens: rows of this rank's buffer.
        row_samples: per local row, its sample's slot in ``samples``.
        positions: per local row, its global position in its sample; -1 for padding.
        runs: the rows as RowRun runs, in row order (at most three per sample).
        sends: this microbatch's reroute entries that send tokens this rank holds to the
            group's ranks (a tuple of Transfer), when the view was made with ``holders``;
            else None.
        receives: the entries that bring this rank tokens held elsewhere; None without
            ``holders``.
        copies: the entries whose tokens this rank holds itself; None without ``holders``.
    """
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
    runs: Tuple[RowRun, ...]
    sends: Optional[Tuple[Transfer, ...]] = None
    receives: Optional[Tuple[Transfer, ...]] = None
    copies: Optional[Tuple[Transfer, ...]] = None
    _serialized: bytes = field(default=b"", compare=False)

    def __repr__(self) -> str:
        where = ("idle" if self.idle else
                 f"ranks {self.first_rank}-{self.first_rank + self.cp - 1} (cp {self.cp}), "
                 f"rank {self.rank_in_group} in the group")
        return (f"<libdcp.RankView rank {self.rank}, microbatch {self.microbatch}: {where}, "
                f"samples {_short(self.samples)}, {self.local_tokens} local rows>")

    @property
    def position_ids(self) -> Tuple[int, ...]:
        """Per local row, its global position in its sample, padding rows 0: the position
        ids of RoPE and of the model (``positions`` with -1 clamped to 0)."""
        return tuple(max(p, 0) for p in self.positions)

    @property
    def loss_mask(self) -> Tuple[int, ...]:
        """Per local row, 1 for a valid token and 0 for padding."""
        return tuple(int(p >= 0) for p in self.positions)

    @property
    def token_indices(self) -> Tuple[int, ...]:
        """Per local row, the index of its token in the concatenation of the view's samples'
        valid tokens (in ``samples`` order), -1 for padding: ``local = tokens[indices]``
        gathers this rank's buffer from the group's samples laid end to end."""
        starts = [0]
        for length in self.sample_lengths:
            starts.append(starts[-1] + length)
        return tuple(starts[s] + p if p >= 0 else -1
                     for s, p in zip(self.row_samples, self.positions))

    @property
    def group_ranks(self) -> Tuple[int, ...]:
        """Pool ranks of the group (TransformerEngine's cp_global_ranks after mapping pool
        ranks to global ranks); empty when idle."""
        return tuple(range(self.first_rank, self.first_rank + self.cp))

    def to_bytes(self) -> bytes:
        """dcp_rank_view_serialize: for TP ranks and pipeline stages that did not plan."""
        return self._serialized

    def to_json(self) -> str:
        """The view as ``dcp-plan --rank R --microbatch K --json`` prints it (docs/cli-json.md),
        one line without the newline."""
        return _json.view_json(self)

    def tensors(self, device: Any = None) -> Dict[str, Any]:
        """The metadata as torch tensors (needs torch): cu_seqlens, cu_seqlens_padded,
        local_offsets (int32, as FlashAttention and TransformerEngine take them),
        position_ids, token_indices (int64), loss_mask (float32)."""
        torch = import_torch("RankView.tensors()")
        i32, i64 = torch.int32, torch.int64
        return {
            "cu_seqlens": torch.tensor(self.cu_seqlens, dtype=i32, device=device),
            "cu_seqlens_padded": torch.tensor(self.cu_seqlens_padded, dtype=i32, device=device),
            "local_offsets": torch.tensor(self.local_offsets, dtype=i32, device=device),
            "position_ids": torch.tensor(self.position_ids, dtype=i64, device=device),
            "token_indices": torch.tensor(self.token_indices, dtype=i64, device=device),
            "loss_mask": torch.tensor(self.loss_mask, dtype=torch.float32, device=device),
        }

    def _require_group(self, what: str) -> None:
        if self.idle:
            raise ValueError(f"rank {self.rank} is idle in microbatch {self.microbatch}: it "
                             f"runs no {what}")

    def flash_attn_calls(self, causal: bool = True) -> Tuple[VarlenCall, ...]:
        """The cp calls of flash_attn_varlen_func that compute this rank's attention, one
        per ring step (one at cp 1): dcp_rank_view_varlen_call. Empty when idle."""
        causal = check_bool("causal", causal)
        if self.idle:
            return ()
        handle = _ViewHandle.from_bytes(self._serialized)
        n = self.num_samples
        arrays = [(ctypes.c_int32 * (n + 1))() for _ in range(5)]
        rows = S.VarlenRows(*arrays)
        call = S.VarlenCall()
        calls = []
        for step in range(self.cp):
            cpu().call("dcp_rank_view_varlen_call", handle.pointer, step, int(causal),
                       ctypes.byref(call), ctypes.byref(rows))
            m = call.num_sequences
            cu_q, cu_k = _tuple(rows.cu_seqlens_q, m + 1), _tuple(rows.cu_seqlens_k, m + 1)
            q_rows = tuple(rows.q_row[j] + i for j in range(m)
                           for i in range(cu_q[j + 1] - cu_q[j]))
            kv_rows = tuple(rows.kv_row[j] + i for j in range(m)
                            for i in range(cu_k[j + 1] - cu_k[j]))
            calls.append(VarlenCall(step, call.kv_rank, self.first_rank + call.kv_rank,
                                    bool(call.causal), cu_q, cu_k, call.max_seqlen_q,
                                    call.max_seqlen_k, q_rows, kv_rows))
        return tuple(calls)

    @property
    def num_samples(self) -> int:
        """The group's samples in this microbatch (0 when idle)."""
        return len(self.samples)

    def transformer_engine_kwargs(self, causal: bool = True, device: Any = None
                                  ) -> Dict[str, Any]:
        """The THD arguments of TransformerEngine's DotProductAttention.forward for this
        rank's local q, k, v (TE splits the ring itself, after set_context_parallel_group
        with the group's communicator, ``group_ranks`` as global ranks and cp_comm_type
        "p2p"): whole-sequence cu_seqlens and cu_seqlens_padded (int32 tensors on ``device``,
        tuples when None) and max_seqlen, which TE divides by the CP size itself."""
        causal = check_bool("causal", causal)
        self._require_group("attention")
        cu = _int32_tensor(self.cu_seqlens, device)
        cu_padded = _int32_tensor(self.cu_seqlens_padded, device)
        return {"qkv_format": "thd", "attn_mask_type": "padding_causal" if causal else "padding",
                "cu_seqlens_q": cu, "cu_seqlens_kv": cu, "cu_seqlens_q_padded": cu_padded,
                "cu_seqlens_kv_padded": cu_padded, "max_seqlen_q": self.max_seqlen,
                "max_seqlen_kv": self.max_seqlen}

    def transformer_engine_rope_kwargs(self, device: Any = None) -> Dict[str, Any]:
        """The THD arguments of TransformerEngine's apply_rotary_pos_emb (fused=True) for
        this rank's rows: it derives each row's position from cu_seqlens_padded, cp_size and
        cp_rank exactly as ``positions`` lists them."""
        self._require_group("RoPE")
        return {"tensor_format": "thd", "cu_seqlens": _int32_tensor(self.cu_seqlens_padded,
                                                                     device),
                "cp_size": self.cp, "cp_rank": self.rank_in_group}


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

    def __init__(self, pointer: Any):
        self.pointer = pointer

    @classmethod
    def from_bytes(cls, data: bytes) -> "_ViewHandle":
        handle = cls(ctypes.POINTER(S.RankView)())
        cpu().call("dcp_rank_view_deserialize", data, len(data), None,
                   ctypes.byref(handle.pointer))
        return handle

    def __del__(self) -> None:
        _release("dcp_rank_view_destroy", self, "pointer")


def _runs(handle: _ViewHandle, samples: Tuple[int, ...]) -> Tuple[RowRun, ...]:
    lib, count = cpu(), ctypes.c_int32()
    lib.call("dcp_rank_view_runs", handle.pointer, None, 0, ctypes.byref(count))
    runs = (S.RowRun * max(count.value, 1))()
    lib.call("dcp_rank_view_runs", handle.pointer, runs, count.value, ctypes.byref(count))
    return tuple(RowRun(r.first_row, r.rows, samples[r.slot], r.position)
                 for r in runs[:count.value])


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

    def by_kind(kind: str) -> Optional[Tuple[Transfer, ...]]:
        return None if mine is None else tuple(t for t in mine if t.kind == kind)
    samples = _tuple(v.samples, n)
    return RankView(
        rank=v.rank, microbatch=v.microbatch, first_rank=v.first_rank, cp=v.cp,
        rank_in_group=v.rank_in_group, idle=bool(v.idle), samples=samples,
        sample_lengths=_tuple(v.sample_lengths, n), pad_multiple=v.pad_multiple,
        cu_seqlens=_tuple(v.cu_seqlens, n + 1), cu_seqlens_padded=_tuple(v.cu_seqlens_padded, n + 1),
        local_offsets=_tuple(v.local_offsets, n + 1), max_seqlen=v.max_seqlen, local_tokens=rows,
        row_samples=_tuple(row_samples, rows), positions=_tuple(positions, rows),
        runs=_runs(handle, samples), sends=by_kind("send"), receives=by_kind("recv"),
        copies=by_kind("copy"), _serialized=buffer.raw[:size.value])


def rank_view_from_bytes(data: bytes) -> RankView:
    """dcp_rank_view_deserialize: a view another rank serialized (every byte checked)."""
    return _view_from_handle(_ViewHandle.from_bytes(check_bytes("data", data)), None)


class Plan:
    """A plan of dcp.h (dcp_plan): K microbatches of CP groups over ``ranks`` ranks. Build it
    with :func:`plan`, :meth:`from_bytes` or :meth:`from_json`. The C plan is freed with the
    object. Properties are reads (the simulation behind :attr:`stats` runs once); methods do
    work or take arguments."""

    def __init__(self, pointer: Any, plan_seconds: float = 0.0):
        """Takes ownership of ``pointer``, a dcp_plan * the library made (for the package's
        own use: build plans with :func:`plan`, :meth:`from_bytes` or :meth:`from_json`)."""
        self._pointer = pointer
        self._plan_seconds = plan_seconds
        self._stats: Optional[PlanStats] = None
        self._flops: Optional[FlopsStats] = None

    def __del__(self) -> None:
        _release("dcp_plan_destroy", self, "_pointer")

    @property
    def _c(self) -> S.Plan:
        contents: S.Plan = self._pointer.contents
        return contents

    # -- structure -------------------------------------------------------------------------
    @property
    def config(self) -> Dict[str, Any]:
        """The resolved dcp_config (no zero defaults left; the strategy and ring charge by name)."""
        return _config_dict(self._c.config)

    @property
    def strategy(self) -> str:
        """"dynamic", "static" or "greedy"."""
        return STRATEGY_NAMES[self._c.config.strategy]

    @property
    def ranks(self) -> int:
        """D, the DP x CP ranks of the pool the plan spreads over (config["ranks"])."""
        ranks: int = self._c.config.ranks
        return ranks

    @property
    def sync_ranks(self) -> int:
        """E, the sync model the plan was made for (config["sync_ranks"], resolved: 1 for dense
        models, ranks for a barrier per microbatch)."""
        sync: int = self._c.config.sync_ranks
        return sync

    @property
    def num_samples(self) -> int:
        """Samples planned: the length of the lengths given to :func:`plan`."""
        count: int = self._c.num_samples
        return count

    @property
    def sample_lengths(self) -> Tuple[int, ...]:
        """Valid tokens of each sample, by sample id (the order given to :func:`plan`)."""
        return _tuple(self._c.sample_lengths, self._c.num_samples)

    @property
    def num_microbatches(self) -> int:
        """K, the microbatches every rank runs (a multiple of microbatch_multiple)."""
        count: int = self._c.num_microbatches
        return count

    @property
    def padded_lengths(self) -> Tuple[int, ...]:
        """Stored tokens of each sample, by sample id: its length padded at the CP size of
        its group (dcp_padded_length)."""
        padded = [0] * self.num_samples
        length, lengths = ctypes.c_int64(), self.sample_lengths
        for group in self.groups:
            for s in group.samples:
                cpu().call("dcp_padded_length", ctypes.byref(self._c.config), lengths[s],
                           group.cp, ctypes.byref(length))
                padded[s] = length.value
        return tuple(padded)

    @property
    def plan_seconds(self) -> float:
        """Wall time of dcp_plan_create when :func:`plan` made this plan; what the JSON said
        for a plan from :meth:`from_json`; 0 for one from :meth:`from_bytes`."""
        return self._plan_seconds

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
        where: List[Tuple[int, int, int]] = [(0, 0, 0)] * self.num_samples
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
                s.sync_ranks, s.step_seconds, s.lower_bound_seconds, s.efficiency,
                s.dag_seconds, s.dag_lower_bound_seconds,
                s.dag_lower_bound_seconds / s.dag_seconds if s.dag_seconds > 0 else 1.0,
                s.barrier_seconds, s.barrier_lower_bound_seconds,
                s.barrier_lower_bound_seconds / s.barrier_seconds if s.barrier_seconds > 0
                else 1.0,
                s.busy_seconds, s.num_microbatches, s.num_groups, s.idle_rank_microbatches,
                self._cp_histogram(),
                s.valid_tokens, s.padded_tokens, s.max_rank_tokens)
        return self._stats

    def _cp_histogram(self) -> Dict[int, int]:
        """Samples per CP size (dcp_plan_cp_histogram)."""
        count = ctypes.c_int32()
        cpu().call("dcp_plan_cp_histogram", self._pointer, None, None, 0, ctypes.byref(count))
        sizes, samples = (ctypes.c_int32 * count.value)(), (ctypes.c_int32 * count.value)()
        cpu().call("dcp_plan_cp_histogram", self._pointer, sizes, samples, count.value,
                   ctypes.byref(count))
        return dict(zip(sizes, samples))

    @property
    def step_seconds(self) -> float:
        """Simulated step time under the plan's sync model E (``config["sync_ranks"]``)."""
        return self.stats.step_seconds

    @property
    def lower_bound_seconds(self) -> float:
        """A lower bound on the step time of any plan of this batch and config under the
        plan's sync model E, in seconds (efficiency is this over :attr:`step_seconds`)."""
        return self.stats.lower_bound_seconds

    @property
    def efficiency(self) -> float:
        """lower bound / step time under the plan's E, in (0, 1]."""
        return self.stats.efficiency

    @property
    def flops_stats(self) -> FlopsStats:
        """dcp_plan_flops_stats: valid and padded tokens and sums of L^2, for MFU."""
        if self._flops is None:
            s = S.FlopsStats()
            cpu().call("dcp_plan_flops_stats", self._pointer, ctypes.byref(s))
            self._flops = FlopsStats(s.valid_tokens, s.padded_tokens, s.sum_squared_valid,
                                     s.sum_squared_padded)
        return self._flops

    def step_time(self, sync_ranks: int = 0) -> float:
        """dcp_plan_step_time: the step time in seconds under any sync model E (0: the
        plan's own; 1: dense models; a power of two dividing ranks, or ranks)."""
        seconds = ctypes.c_double()
        cpu().call("dcp_plan_step_time", self._pointer, None,
                   check_int("sync_ranks", sync_ranks, ctypes.c_int32), ctypes.byref(seconds))
        return seconds.value

    def schedule(self) -> Tuple[Tuple[float, float], ...]:
        """(start, end) seconds of every group of :attr:`groups` (dcp_plan_schedule)."""
        n = self._c.num_groups
        start, end = (ctypes.c_double * max(n, 1))(), (ctypes.c_double * max(n, 1))()
        cpu().call("dcp_plan_schedule", self._pointer, None, start, end)
        return tuple((start[i], end[i]) for i in range(n))

    def validate(self) -> None:
        """dcp_plan_validate: raises InvalidPlanError naming the broken invariant."""
        cpu().call("dcp_plan_validate", self._pointer)

    def _replanned(self, strategy: str) -> "Plan":
        """The same input and config planned with another strategy (the JSON's baselines)."""
        config = S.Config.from_buffer_copy(self._c.config)
        config.strategy = STRATEGIES[strategy]
        pointer = ctypes.POINTER(S.Plan)()
        cpu().call("dcp_plan_create", ctypes.byref(config), self._c.sample_lengths,
                   self._c.num_samples, ctypes.byref(pointer))
        return Plan(pointer)

    # -- exchange --------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """dcp_plan_serialize: versioned, checksummed little-endian buffer (what
        ``dcp-plan --save-plan`` writes)."""
        lib, size = cpu(), ctypes.c_size_t()
        lib.call("dcp_plan_serialize", self._pointer, None, 0, ctypes.byref(size))
        buffer = ctypes.create_string_buffer(size.value)
        lib.call("dcp_plan_serialize", self._pointer, buffer, size, ctypes.byref(size))
        return buffer.raw[:size.value]

    def to_json(self) -> str:
        """The plan as ``dcp-plan --json`` prints it (docs/cli-json.md, schema
        docs/dcp-plan.schema.json), one line without the newline: the same text the CLI
        prints for the same input and config but for ``plan_seconds`` (:attr:`plan_seconds`).
        Plans the static and greedy baselines, as the CLI does."""
        return _json.plan_json(self)

    @classmethod
    def from_json(cls, data: Union[str, bytes, Mapping[str, Any]]) -> "Plan":
        """The plan a ``dcp-plan --json`` line (or :meth:`to_json`, or that text parsed by
        json.loads) describes: its config, sample lengths and groups, checked by the library
        (InvalidPlanError naming a broken invariant, ValueError for a malformed document);
        the derived keys are recomputed, not read. ``from_json(t).to_json() == t`` for the
        CLI's output t."""
        serialized, seconds = _json.plan_from_json(data)
        made = cls.from_bytes(serialized)
        made._plan_seconds = seconds
        return made

    @classmethod
    def from_bytes(cls, data: bytes) -> "Plan":
        """dcp_plan_deserialize: every byte and invariant checked (CorruptDataError)."""
        data = check_bytes("data", data)
        pointer = ctypes.POINTER(S.Plan)()
        cpu().call("dcp_plan_deserialize", data, len(data), None, ctypes.byref(pointer))
        return cls(pointer)

    def reroute(self, holders: Sequence[int], rank: int) -> Tuple[Transfer, ...]:
        """Rank ``rank``'s reroute list when the data loader left sample s on rank holders[s]:
        its sends, receives and local copies of valid tokens, over all microbatches, in the
        order every rank derives them (sends of A to B pair with B's receives from A)."""
        array = IntArray("holders", holders, ctypes.c_int32)
        if array.count != self.num_samples:
            raise ValueError(f"holders has {array.count} entries, the plan "
                             f"{self.num_samples} samples")
        pointer = ctypes.POINTER(S.Reroute)()
        lib = cpu()
        lib.call("dcp_reroute_create", self._pointer, array.pointer,
                 check_int("rank", rank, ctypes.c_int32), ctypes.byref(pointer))
        try:
            r = pointer.contents
            return tuple(Transfer(_KIND_NAMES[t.kind], t.peer, t.microbatch, t.sample,
                                  t.source_begin, t.source_end, t.destination_row)
                         for t in (r.transfers[i] for i in range(r.count)))
        finally:
            lib.raw("dcp_reroute_destroy")(pointer)

    def _view_handle(self, rank: int, microbatch: int) -> _ViewHandle:
        handle = _ViewHandle(ctypes.POINTER(S.RankView)())
        cpu().call("dcp_rank_view_create", self._pointer, check_int("rank", rank, ctypes.c_int32),
                   check_int("microbatch", microbatch, ctypes.c_int32),
                   ctypes.byref(handle.pointer))
        return handle

    def rank_view(self, rank: int, microbatch: int,
                  holders: Optional[Sequence[int]] = None) -> RankView:
        """What ``rank`` holds in ``microbatch`` (dcp_rank_view_create and
        dcp_rank_view_positions); with ``holders`` also its reroute entries for that
        microbatch (sends: tokens this rank holds that the microbatch needs elsewhere)."""
        reroute = None if holders is None else self.reroute(holders, rank)
        return _view_from_handle(self._view_handle(rank, microbatch), reroute)

    def pack(self, rank: int, microbatch: int, samples: Sequence[Any]) -> bytearray:
        """dcp_rank_view_pack: the rank's THD buffer of ``microbatch`` gathered from whole
        per-sample buffers (``samples[id]``: any buffer-protocol object, for example an
        array.array, holding sample id's valid tokens; all of one item size), padding rows
        zero bytes. Returns local_tokens x item size bytes."""
        views = []
        for i, sample in enumerate(check_sequence("samples", samples, "buffers")):
            try:
                views.append(memoryview(sample))
            except TypeError:
                raise TypeError(f"samples[{i}] must be a buffer (bytes, array.array, ...), got "
                                f"{type(sample).__name__}") from None
        if len(views) != self.num_samples:
            raise ValueError(f"samples has {len(views)} entries, the plan {self.num_samples}")
        element = views[0].itemsize if views else 1
        if any(m.itemsize != element for m in views):
            raise ValueError("samples must share one item size")
        c_buffers = [(ctypes.c_char * m.nbytes).from_buffer_copy(m) for m in views]
        pointers = (ctypes.c_void_p * max(len(views), 1))(
            *[ctypes.addressof(b) for b in c_buffers])
        handle = self._view_handle(rank, microbatch)
        out = bytearray(handle.pointer.contents.local_tokens * element)
        target = (ctypes.c_char * max(len(out), 1)).from_buffer(out) if out else None
        cpu().call("dcp_rank_view_pack", handle.pointer, pointers, element, target)
        del target
        return out

    def svg(self, title: Optional[str] = None) -> str:
        """The plan's timeline as SVG text (dcp_plan_svg, the picture `dcp-plan --svg`
        draws): a row per rank, a box per group coloured by CP size and numbered by
        microbatch, sample ids in the hover text, time in ms. :func:`plan_svg` stacks
        several plans on one time scale."""
        return plan_svg([self], [check_optional_str("title", title)])

    def __repr__(self) -> str:
        return (f"<libdcp.Plan {self.strategy}: {self.num_samples} samples on {self.ranks} "
                f"ranks, {self.num_microbatches} microbatches>")


def plan_svg(plans: Sequence[Plan], titles: Optional[Sequence[Optional[str]]] = None) -> str:
    """Plans of one pool and one batch drawn one above the other on one time scale
    (dcp_plan_svg; `dcp-plan --compare` draws static, greedy and dynamic this way): each panel
    titled ``titles[i]`` (None: the strategy's name) and, with several, how much faster the
    last plan is."""
    plans = check_sequence("plans", plans, "Plan objects")
    for i, one in enumerate(plans):
        if not isinstance(one, Plan):
            raise TypeError(f"plans[{i}] must be a libdcp.Plan, got {type(one).__name__} "
                            f"{one!r}")
    if titles is not None:
        titles = [check_optional_str(f"titles[{i}]", t)
                  for i, t in enumerate(check_sequence("titles", titles, "str or None"))]
        if len(titles) != len(plans):
            raise ValueError(f"titles has {len(titles)} entries, plans {len(plans)}")
    pointers = (ctypes.POINTER(S.Plan) * max(len(plans), 1))(*[p._pointer for p in plans])
    names = None if titles is None else (ctypes.c_char_p * max(len(plans), 1))(
        *[None if t is None else str(t).encode("utf-8") for t in titles])
    lib, size = cpu(), ctypes.c_size_t()
    lib.call("dcp_plan_svg", pointers, names, len(plans), None, None, 0, ctypes.byref(size))
    buffer = ctypes.create_string_buffer(size.value)
    lib.call("dcp_plan_svg", pointers, names, len(plans), None, buffer, size, ctypes.byref(size))
    text: str = buffer.value.decode("utf-8")
    return text


def plan(lengths: Any, ranks: int, max_tokens_per_rank: int, **config: Any) -> Plan:
    """Plans one global batch (dcp_plan_create).

    Arguments:
        lengths: valid tokens of each sample (integers: a sequence, or a numpy / torch integer
            array, read in place when it is contiguous int64); sample ids are positions in it.
        ranks: D, the DP x CP ranks of the pool.
        max_tokens_per_rank: M, padded tokens a rank holds per microbatch.
        config: any other dcp_config field by its C name (``CONFIG_FIELDS``), zero or absent
            for the C default, as ``dcp-plan``'s option of the same name:

            sync_ranks: E, the sync model the step is minimised under (1: dense models, a
                group waits only for its own ranks; ranks, the default: a barrier across the
                pool every microbatch; a power of two between: MoE within blocks of E ranks).
            min_cp, max_cp: the smallest and largest CP sizes, sizes of cp_sizes (default its
                smallest and its largest <= ranks).
            microbatch_multiple: the microbatch count is a multiple of it (VPP; default 1).
            pad_multiple_cp1: padding multiple of a sample at CP size 1 (default 1).
            pad_multiple: every padded length is also a multiple of it (the TP size with
                sequence parallelism; default 1).
            cost: a mapping of attn_coeff (s per valid token^2), linear_coeff (s per stored
                token) and ring_step_cost (s per ring step), those left out 0 (all 0: the
                default model).
            ring_charge: "group" (a group's ring steps charged once per microbatch, the
                default) or "sample" (every sample runs its own ring, as Megatron-Core 0.16
                does).
            strategy: "dynamic" (the planner, the default), "static" (one CP size for all) or
                "greedy" (Megatron's one-microbatch-at-a-time greedy); the last two are
                baselines.
            improve_moves: the local search's budget in evaluated moves (0: the default,
                which grows with the sample count; negative: none).
            cp_sizes: the CP sizes a group may have: "pow2" (the default), "megatron" (the
                sizes Megatron-Core has hybrid-CP communicators for: powers of two below
                2^floor(log2 D), and D), "any" (every size; groups on any range of ranks) or
                a sequence of sizes (at most 16).
            head_count: heads a hybrid model's all-to-all splits among a group's ranks:
                every CP size must divide it (0, the default: no such constraint).
            cover_ranks: True to put a sample on every rank somewhere in the plan (as
                Megatron's hybrid schedule needs; default False).
            memory_limit: bytes the plan may need (dcp_plan_memory_estimate, checked before
                any allocation): a larger request raises DcpMemoryError naming the estimate
                and the limit (default 8 GiB; 2**63 - 1: none).

    An unknown field name, or a value of the wrong type, raises TypeError naming it. Errors of
    the library raise a DcpError subclass carrying its message (InfeasibleError,
    InvalidArgumentError, ...).
    """
    c = make_config(ranks, max_tokens_per_rank, **config)
    array = IntArray("lengths", lengths)
    if array.count > INT32_MAX:
        raise OverflowError(f"lengths has {array.count} samples, more than a plan holds")
    pointer = ctypes.POINTER(S.Plan)()
    start = time.perf_counter()
    cpu().call("dcp_plan_create", ctypes.byref(c), array.pointer, array.count,
               ctypes.byref(pointer))
    return Plan(pointer, plan_seconds=time.perf_counter() - start)


def _take_lengths(pointer: Any, count: ctypes.c_int32) -> List[int]:
    try:
        return list(_tuple(pointer, count.value))
    finally:
        cpu().raw("dcp_free")(None, pointer)


def read_lengths(path: str) -> List[int]:
    """dcp_lengths_read_file: one length per line ('#' comments) or a CSV with a length
    column (length, seq_len, seqlen, num_tokens, ...)."""
    name = check_path("path", path)
    pointer, count = ctypes.POINTER(ctypes.c_int64)(), ctypes.c_int32()
    try:
        cpu().call("dcp_lengths_read_file", os.fsencode(name), None, ctypes.byref(pointer),
                   ctypes.byref(count))
    except DcpError as error:  # the library's parse errors name the line, not the file
        raise error.naming_file(name) from None
    return _take_lengths(pointer, count)


def parse_lengths(text: Union[str, bytes]) -> List[int]:
    """dcp_lengths_parse on text in the formats of :func:`read_lengths`."""
    data = text.encode() if isinstance(text, str) else check_bytes("text", text)
    pointer, count = ctypes.POINTER(ctypes.c_int64)(), ctypes.c_int32()
    cpu().call("dcp_lengths_parse", data, len(data), None, ctypes.byref(pointer),
               ctypes.byref(count))
    return _take_lengths(pointer, count)


def lognormal_lengths(mean: float, sigma: float, min_length: int, max_length: int, count: int,
                      seed: int = DEFAULT_SEED) -> List[int]:
    """dcp_lengths_lognormal: Megatron's mock-SFT convention (tokens), identical on every
    platform for a seed; the default seed is dcp-plan's (DCP_DEFAULT_SEED), so
    ``lognormal_lengths(4096, 1.1, 1024, 8192, 256)`` is ``--lognormal
    4096,1.1,1024,8192,256``."""
    count = check_int("count", count, ctypes.c_int32)
    if count < 1:  # C accepts 0 (an empty array); dcp-plan refuses --lognormal COUNT 0
        raise ValueError(f"count must be >= 1 (a batch has at least one sample), got {count}")
    if check_int("seed", seed) < 0:
        raise OverflowError(f"seed is {seed}, must be >= 0 (a uint64)")
    out = (ctypes.c_int64 * max(count, 1))()
    distribution = S.Lognormal(check_real("mean", mean), check_real("sigma", sigma),
                               check_int("min_length", min_length),
                               check_int("max_length", max_length))
    cpu().call("dcp_lengths_lognormal", ctypes.byref(distribution), seed, out, count)
    return list(out[:count])


def zigzag_position(padded_length: int, cp: int, rank: int, local_index: int) -> int:
    """Global position of local row ``local_index`` of ``rank`` in a group of ``cp`` ranks
    (-1 for arguments out of range)."""
    position: int = cpu().raw("dcp_zigzag_position")(
        check_int("padded_length", padded_length), check_int("cp", cp, ctypes.c_int32),
        check_int("rank", rank, ctypes.c_int32), check_int("local_index", local_index))
    return position
