"""libdcp's planner inside Megatron-Core's hybrid context parallelism (megatron-core 0.16.1 to
0.19.2; the releases tested are in RELEASES).

Megatron-Core schedules hybrid CP with ``BalancedCPScheduler``
(megatron/core/pipeline_parallel/hybrid_cp_schedule.py): ``HybridCPDataLoaderWrapper``
(megatron/core/datasets/data_schedule.py) all-gathers the sub-sample lengths, calls its
``get_groups_and_subsamples`` and reroutes the sub-samples; ``hybrid_context_parallel_forward_
backward`` then runs, group after group, each rank's sub-samples one forward and backward each
(CP size = the number of ranks of the group that hold the sub-sample, on the communicator
parallel_state builds for that size) and a barrier over the DP x CP group after every group. :class:`LibdcpCPScheduler` has that interface and answers
from ``libdcp.plan``; :func:`use_libdcp` makes the wrapper build it::

    import libdcp.megatron
    libdcp.megatron.use_libdcp()          # or `with libdcp.megatron.use_libdcp(): ...`
    # ... Megatron's own training loop, --hybrid-context-parallel --calculate-per-token-loss

The plan becomes Megatron's groups by the sync model E (``sync_ranks``; DESIGN.md section 3):
E = 1 (dense models, the default) one group holding each rank's sub-samples in plan order (ranks
that share a sub-sample meet it in the same order, so the CP collectives pair up without a
barrier); E = D one group per microbatch (Megatron's barrier is the model's); in between a
barrier only where the plan already synchronises the pool (around a microbatch with a group of
all D ranks). The planner plans with Megatron's CP sizes (cp_sizes="megatron": the powers of two
Megatron builds communicators for and the whole pool) and puts a sub-sample on every rank
(cover_ranks): Megatron's schedule runs the last sub-sample of the last group on every rank, so
trailing groups are merged until every rank holds one there, which only drops barriers.

Nothing here needs torch except the install (:func:`use_libdcp`) and the check that the ranks
agree on the lengths (with torch.distributed initialised): the mapping, the checks Megatron's
code relies on (:func:`check_sample_id_groups`) and the step-time model of Megatron's execution
(:func:`execute`) are plain Python, so the tests run them without torch.
"""
import hashlib
import importlib
import itertools
import operator
import re
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ._library import DcpError, InfeasibleError, InvalidArgumentError, UnsupportedError
from .planner import Plan, SampleCost, cp_size_min, plan as make_plan

# The default sync model: Megatron's hybrid CP runs dense models (one sub-sample per forward
# cannot pair an expert-parallel all-to-all across ranks that run different counts).
DEFAULT_SYNC_RANKS = 1
# Megatron 0.16 runs every sub-sample as its own forward, ring steps included: the planner
# charges the ring per sample (dcp_config.ring_charge), so that its step is the step of this
# execution (execute; tests/test_megatron.py checks that the two agree).
DEFAULT_RING_CHARGE = "sample"
# Digest of a rank's view of the batch that the ranks compare (bytes of blake2b).
DIGEST_BYTES = 8
# The planner's CP sizes: those Megatron has communicators for (dcp_config.cp_sizes).
MEGATRON_CP_SIZES = "megatron"
# Settings the scheduler fixes because Megatron's schedule needs them (see settings_for).
FIXED_SETTINGS = {"cp_sizes": MEGATRON_CP_SIZES, "cover_ranks": True}

SampleIdGroups = List[List[List[int]]]  # [group][dp_cp rank] -> sample ids, in run order


class ScheduleInputError(ValueError):
    """Bad input from the Megatron side (a length that is not >= 1, a sample too long for the
    pool, ranks that disagree on the batch). ``sample`` and ``rank`` name where."""

    def __init__(self, message: str, sample: Optional[int] = None, rank: Optional[int] = None):
        super().__init__(message)
        self.sample, self.rank = sample, rank


class ScheduleError(ValueError):
    """sample_id_groups that Megatron's hybrid schedule cannot run as given: a sample lost,
    duplicated, on ranks that are not one of Megatron's CP groups, a rank with nothing in the
    last group, or ranks that meet shared samples in different orders (a hang)."""


# -- Megatron-Core releases ------------------------------------------------------------------
# Everything that differs between the releases this module is tested with lives here; the rest
# of the module uses only what they share (BalancedCPScheduler's interface,
# HybridCPDataLoaderWrapper's attributes, create_hybrid_dp_cp_groups' sizes, one forward per
# sub-sample with a barrier after each group).
@dataclass(frozen=True)
class Release:
    """A megatron-core release libdcp.megatron is tested with (`make test-megatron` runs each
    in its own virtual environment, pinned by ``requirements``): ``python`` the oldest Python
    it installs on; ``forward_step_cp_group_size`` whether hybrid_context_parallel_forward_
    backward broadcasts each sub-sample's partner CP size over the TP group and passes it to
    schedules.forward_step as ``cp_group_size`` (0.19: the loss scaling of the legacy loss
    path then uses it); ``backward_step_model_type`` whether backward_step still takes
    model_type (dropped in 0.19)."""
    version: str
    python: str
    requirements: str
    forward_step_cp_group_size: bool
    backward_step_model_type: bool


RELEASES = {r.version: r for r in (
    Release("0.16.1", "3.10", "python/tests/megatron-requirements.txt", False, True),
    Release("0.19.2", "3.12", "python/tests/megatron-0.19-requirements.txt", True, False))}
# What a user is told to install when Megatron-Core is missing.
INSTALL_HINT = ("pip install megatron-core==0.19.2 (Python >= 3.12) or megatron-core==0.16.1 "
                "(Python >= 3.10), with torch")
WRAPPER_MODULE, WRAPPER_CLASS = "megatron.core.datasets.data_schedule", "HybridCPDataLoaderWrapper"


def installed_release() -> Optional[str]:
    """The installed megatron-core's version, None when it is not installed."""
    from importlib import metadata
    try:
        return metadata.version("megatron-core")
    except metadata.PackageNotFoundError:
        return None


def hybrid_cp_sizes(ranks: int) -> Tuple[int, ...]:
    """The CP sizes Megatron-Core has communicators for on a DP x CP group of ``ranks``
    (parallel_state.create_hybrid_dp_cp_groups, the same in every release tested: 2^i for
    1 <= i < floor(log2 D), and the whole group through get_hybrid_data_context_parallel_groups),
    with 1: the aligned blocks of each size are the groups a sub-sample can run on. libdcp's
    planner plans with exactly these (cp_sizes="megatron"; libdcp.cp_sizes gives them)."""
    powers = [1]
    while powers[-1] * 4 <= ranks:  # 2^i for 1 <= i < floor(log2 D)
        powers.append(powers[-1] * 2)
    return tuple(sorted(set(powers) | {ranks}))


# -- settings ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    """libdcp's planner settings for one DP x CP group. ``planner`` holds the remaining
    dcp_config fields (cost, pad_multiple, improve_moves, ...)."""
    ranks: int
    max_tokens_per_rank: int
    sync_ranks: int
    min_cp: int
    max_cp: int
    microbatch_multiple: int
    check_agreement: bool
    planner: Dict[str, Any]

    def plan_config(self) -> Dict[str, Any]:
        return dict(self.planner, sync_ranks=self.sync_ranks, min_cp=self.min_cp,
                    max_cp=self.max_cp, microbatch_multiple=self.microbatch_multiple,
                    cp_sizes=MEGATRON_CP_SIZES, cover_ranks=True)


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def settings_for(config: Any, ranks: int, *, sync_ranks: int = DEFAULT_SYNC_RANKS,
                 min_cp: int = 1, max_cp: Optional[int] = None, microbatch_multiple: int = 1,
                 check_agreement: bool = True, **planner: Any) -> Settings:
    """Maps Megatron's config (a TransformerConfig or ModelParallelConfig, or anything with
    its attribute names) and the DP x CP size to libdcp's settings; raises UnsupportedError
    for what Megatron-Core's hybrid CP path or this mapping does not run, and TypeError /
    ValueError naming a bad setting.

    max_seqlen_per_dp_cp_rank -> max_tokens_per_rank; the DP x CP size -> ranks; the CP sizes
    those Megatron has communicators for (:func:`hybrid_cp_sizes`, the planner's
    cp_sizes="megatron"), min_cp and max_cp among them (max_cp default the whole pool, so a
    sample may take every rank as Megatron's fallback does); every rank holding a sub-sample
    (the planner's cover_ranks: Megatron's schedule runs one on every rank);
    tensor_model_parallel_size with sequence_parallel -> pad_multiple (Megatron splits a
    sub-sample over CP and TP); ring_charge DEFAULT_RING_CHARGE (Megatron runs one forward per
    sub-sample) unless given."""
    ranks = _positive_int("DP x CP size", ranks)
    tokens = _positive_int("config.max_seqlen_per_dp_cp_rank",
                           getattr(config, "max_seqlen_per_dp_cp_rank", None))
    pipeline = getattr(config, "pipeline_model_parallel_size", 1) or 1
    if pipeline > 1 or getattr(config, "virtual_pipeline_model_parallel_size", None):
        raise UnsupportedError(
            f"pipeline_model_parallel_size={pipeline}: Megatron-Core runs hybrid context "
            f"parallelism only without pipelining (forward_backward_no_pipelining, releases "
            f"{', '.join(RELEASES)}), so neither its scheduler nor libdcp's can be used with PP "
            f"or VPP; microbatch_multiple is for the planner's own runs")
    if getattr(config, "calculate_per_token_loss", True) is False:
        raise UnsupportedError(
            "calculate_per_token_loss=False: under hybrid CP the ranks run different numbers "
            "of sub-samples, so only the per-token loss (--calculate-per-token-loss) is "
            "normalised exactly; see libdcp.megatron.token_counts")
    if ranks > 1 and ranks % 2:
        raise UnsupportedError(f"DP x CP size {ranks}: Megatron's hybrid CP needs an even "
                               f"number of ranks (parallel_state.initialize_model_parallel)")
    for name, value in planner.items():
        if name in FIXED_SETTINGS and value != FIXED_SETTINGS[name]:
            raise UnsupportedError(
                f"{name}={value!r}: libdcp.megatron plans with {name}="
                f"{FIXED_SETTINGS[name]!r}, because Megatron's hybrid schedule runs a "
                f"sub-sample on every rank and has communicators only for the sizes "
                f"{', '.join(map(str, hybrid_cp_sizes(ranks)))} on {ranks} ranks")
    planner = {k: v for k, v in planner.items() if k not in FIXED_SETTINGS}
    sizes = hybrid_cp_sizes(ranks)
    min_cp = _positive_int("min_cp", min_cp)
    max_cp = ranks if max_cp is None else _positive_int("max_cp", max_cp)
    for name, value in (("min_cp", min_cp), ("max_cp", max_cp)):
        if value not in sizes:
            raise UnsupportedError(f"{name}={value}: Megatron builds CP groups of sizes "
                                   f"{', '.join(map(str, sizes))} on {ranks} ranks; {name} "
                                   f"must be one of them")
    if min_cp > max_cp:
        raise UnsupportedError(f"min_cp={min_cp} > max_cp={max_cp}")
    sync_ranks = _positive_int("sync_ranks", sync_ranks)
    if "pad_multiple" not in planner and getattr(config, "sequence_parallel", False):
        planner["pad_multiple"] = getattr(config, "tensor_model_parallel_size", 1) or 1
    planner.setdefault("ring_charge", DEFAULT_RING_CHARGE)
    return Settings(ranks, tokens, sync_ranks, min_cp, max_cp,
                    _positive_int("microbatch_multiple", microbatch_multiple),
                    bool(check_agreement), planner)


# -- the plan as Megatron's groups ------------------------------------------------------------
def _pool_lockstep(groups: Sequence[Any], ranks: int, sync_ranks: int) -> bool:
    """Whether a microbatch runs the whole pool in lockstep under E: E = D, or a group of all
    D ranks (groups are aligned, so only one that size joins every block)."""
    return sync_ranks >= ranks or any(g.cp >= ranks for g in groups)


def _sync_ranks(plan: Plan, sync_ranks: Optional[int]) -> int:
    """E: the one given (to see the plan under another sync model), else the plan's own."""
    return plan.sync_ranks if sync_ranks is None else _positive_int("sync_ranks", sync_ranks)


def barrier_runs(plan: Plan, sync_ranks: Optional[int] = None) -> List[Tuple[int, int]]:
    """Microbatch ranges [begin, end) that become one Megatron group each: E = 1 one range;
    otherwise a range ends where the plan synchronises the pool anyway (before and after a
    microbatch that runs it in lockstep), so Megatron's barriers cost nothing E does not.
    ``sync_ranks`` None: the plan's own E (Plan.sync_ranks)."""
    sync_ranks = _sync_ranks(plan, sync_ranks)
    k = plan.num_microbatches
    if sync_ranks <= 1 or k == 0:
        return [(0, k)]
    lockstep = [_pool_lockstep(g, plan.ranks, sync_ranks) for g in plan.microbatches]
    cuts = [i for i in range(1, k) if lockstep[i - 1] or lockstep[i]]
    edges = [0] + cuts + [k]
    return [(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def group_runs(plan: Plan, sync_ranks: Optional[int] = None) -> List[Tuple[int, int]]:
    """The microbatch ranges of Megatron's groups: barrier_runs, with the last range absorbing
    the ones before it until every rank runs a sub-sample in it (a rank empty in the last
    group would crash Megatron's schedule); raises ScheduleError naming the rank when the
    whole plan leaves one idle (a plan made with cover_ranks, as the scheduler's are, never
    does)."""
    runs = barrier_runs(plan, sync_ranks)
    busy = [False] * plan.ranks  # in the last range
    last = len(runs)
    while last > 0 and not all(busy):
        last -= 1
        for groups_k in plan.microbatches[runs[last][0]:runs[last][1]]:
            for g in groups_k:
                busy[g.first_rank:g.first_rank + g.cp] = [True] * g.cp
    if not all(busy):
        raise ScheduleError(
            f"DP x CP rank {busy.index(False)} has no sub-sample in the whole batch "
            f"({plan.num_samples} samples on {plan.ranks} ranks): Megatron's hybrid schedule "
            f"runs the last sub-sample of the last group on every rank, so the plan must "
            f"cover every rank (dcp_config.cover_ranks)")
    return runs[:last] + [(runs[last][0], runs[-1][1])]


def plan_groups(plan: Plan, sync_ranks: Optional[int] = None) -> List[List[List[int]]]:
    """The plan as Megatron's groups (one per range of :func:`group_runs`): [group][rank] ->
    sample positions in plan order (by microbatch, then as packed in the group)."""
    microbatches = plan.microbatches
    groups = []
    for begin, end in group_runs(plan, sync_ranks):
        lists: List[List[int]] = [[] for _ in range(plan.ranks)]
        for groups_k in microbatches[begin:end]:
            for g in groups_k:
                for r in range(g.first_rank, g.first_rank + g.cp):
                    lists[r].extend(g.samples)
        groups.append(lists)
    return groups


# -- per-token loss ---------------------------------------------------------------------------
def local_valid_tokens(length: int, cp: int, rank_in_group: int) -> int:
    """Valid tokens rank ``rank_in_group`` of ``cp`` computes of a sub-sample as Megatron splits
    it (get_batch_on_this_cp_rank: 2 cp equal chunks, r and 2 cp - 1 - r; its lengths are
    multiples of 2 cp, so each rank holds length / cp). Other lengths count as DESIGN.md
    section 4 pads them (to a multiple of 2 cp, padding at the end)."""
    if cp == 1:
        return length
    chunk = -(-length // (2 * cp))
    first, second = rank_in_group, 2 * cp - 1 - rank_in_group
    return sum(min(max(length - c * chunk, 0), chunk) for c in (first, second))


@dataclass(frozen=True)
class TokenCounts:
    """What a per-token loss needs when ranks run different numbers of sub-samples:
    ``global_tokens`` (valid tokens of the step, the divisor of every rank's summed loss) and
    ``group_rank_tokens[g][r]`` (valid tokens rank r computes the loss on in group g, its
    shares of its sub-samples). Megatron's calculate_per_token_loss path sums the loss over
    tokens, all-reduces the token count over DP x CP and divides the gradients by it
    (finalize_model_grads): with no loss mask that count is ``global_tokens``."""
    global_tokens: int
    group_rank_tokens: Tuple[Tuple[int, ...], ...]

    def rank_tokens(self, rank: int) -> int:
        return sum(group[rank] for group in self.group_rank_tokens)


def _add_shares(shares: List[int], first: int, cp: int, length: int) -> None:
    """Adds to the difference array shares (rank r's count is the sum of shares[0..r]) the
    valid tokens each rank of an aligned group of cp computes of a sub-sample: what
    local_valid_tokens gives rank by rank, in O(1): chunks below `full` hold `chunk` tokens,
    chunk `full` holds the rest, and rank r holds chunks r and 2 cp - 1 - r."""
    def add(begin: int, end: int, tokens: int) -> None:  # ranks first + [begin, end)
        if begin < end and tokens:
            shares[first + begin] += tokens
            shares[first + end] -= tokens
    if cp == 1:
        add(0, 1, length)
        return
    chunk = -(-length // (2 * cp))
    full, rest = divmod(length, chunk)
    add(0, min(full, cp), chunk)  # first chunks
    if full < cp:
        add(full, full + 1, rest)
    add(max(2 * cp - full, 0), cp, chunk)  # second chunks, index 2 cp - 1 - r < full
    if cp <= full < 2 * cp:
        add(2 * cp - 1 - full, 2 * cp - full, rest)


def plan_token_counts(plan: Plan, lengths: Sequence[int],
                      sync_ranks: Optional[int] = None) -> TokenCounts:
    """token_counts of plan_groups(plan, sync_ranks) without the per-rank lists: O(samples +
    groups x ranks of their run), where the lists hold up to samples x ranks entries."""
    counts = []
    for begin, end in group_runs(plan, sync_ranks):
        shares = [0] * (plan.ranks + 1)
        for groups_k in plan.microbatches[begin:end]:
            for g in groups_k:
                for p in g.samples:
                    _add_shares(shares, g.first_rank, g.cp, lengths[p])
        counts.append(tuple(itertools.accumulate(shares[:-1])))
    return TokenCounts(sum(lengths), tuple(counts))


def token_counts(sample_id_groups: SampleIdGroups, lengths: Dict[int, int]) -> TokenCounts:
    """TokenCounts of sample_id_groups (each sample on an aligned block of ranks, as
    check_sample_id_groups requires); ``lengths[sample id]`` valid tokens."""
    counts = []
    for group in sample_id_groups:
        holders = _holders(group)  # aligned blocks: r - first rank is r's place in the group
        counts.append(tuple(
            sum(local_valid_tokens(lengths[s], len(holders[s]), r - holders[s][0]) for s in items)
            for r, items in enumerate(group)))
    return TokenCounts(sum(lengths.values()), tuple(counts))


# -- what Megatron's code relies on -----------------------------------------------------------
def _holders(group: Sequence[Sequence[int]]) -> Dict[int, List[int]]:
    holders: Dict[int, List[int]] = {}
    for r, items in enumerate(group):
        for s in items:
            holders.setdefault(s, []).append(r)
    return holders


def check_sample_id_groups(sample_id_groups: SampleIdGroups, sample_ids: Sequence[int],
                           ranks: int) -> None:
    """Raises ScheduleError unless Megatron-Core runs the schedule as meant: one list
    per rank in every group; every sample id in exactly one group, on the ranks of one of
    Megatron's CP groups (an aligned block of a size in :func:`hybrid_cp_sizes`; its
    local_cp_size is the number of holders), at most once per rank; no other id; every rank
    holding a sub-sample in the last group; and ranks that share samples meeting them in one
    order (:func:`execute` proves it by running the schedule)."""
    if not sample_id_groups:
        raise ScheduleError("no group: Megatron's schedule needs at least one")
    sizes = set(hybrid_cp_sizes(ranks))
    seen: Dict[int, int] = {}  # sample id -> the group it is in
    for k, group in enumerate(sample_id_groups):
        if len(group) != ranks:
            raise ScheduleError(f"group {k} has {len(group)} rank lists, the pool {ranks} ranks")
        for s, holders in _holders(group).items():
            if s in seen:
                raise ScheduleError(f"sample {s} is in groups {seen[s]} and {k}")
            seen[s] = k
            c, first = len(holders), holders[0]
            if len(set(holders)) != c:
                raise ScheduleError(f"sample {s} is twice on rank {first} in group {k}")
            if c not in sizes or first % c or holders != list(range(first, first + c)):
                raise ScheduleError(f"sample {s} in group {k} is on ranks {holders}, not one "
                                    f"of Megatron's CP groups (aligned blocks of "
                                    f"{sorted(sizes)} ranks)")
    wanted = set(sample_ids)
    if set(seen) != wanted:
        lost, extra = sorted(wanted - set(seen)), sorted(set(seen) - wanted)
        raise ScheduleError(f"samples lost {lost[:8]}, samples not in the batch {extra[:8]}")
    idle = [r for r, items in enumerate(sample_id_groups[-1]) if not items]
    if idle:
        raise ScheduleError(f"rank {idle[0]} has no sub-sample in the last group")
    execute(sample_id_groups, {s: 1 for s in seen}, lambda length, cp: 0.0)


@dataclass(frozen=True)
class ExecutionStats:
    """A schedule run as Megatron runs it, under a cost: ``step_seconds`` (the barrier after
    each group, a sub-sample starting when all its ranks are free), ``groups``, ``forwards``
    (sub-sample forwards summed over ranks), ``max_rank_forwards``, ``busy_seconds`` (summed
    over ranks) and ``idle_fraction`` (1 - busy / (ranks x step))."""
    step_seconds: float
    groups: int
    forwards: int
    max_rank_forwards: int
    busy_seconds: float
    idle_fraction: float


def megatron_workload(length: int, cp: int) -> float:
    """Megatron's cost of a sub-sample per rank (BalancedCPScheduler.get_total_workload)."""
    return length * length / cp


def execute(sample_id_groups: SampleIdGroups, lengths: Dict[int, int],
            cost: Callable[[int, int], float]) -> ExecutionStats:
    """Runs the schedule in the model of hybrid_context_parallel_forward_backward: in each
    group every rank runs its sub-samples in list order; a sub-sample of c holders takes
    cost(length, c) and starts when every holder has reached it; a barrier ends each group.
    Raises ScheduleError when the ranks would hang (holders meeting samples in different
    orders), naming the ranks and what each waits for."""
    ranks = len(sample_id_groups[0]) if sample_id_groups else 0
    now, busy, forwards = 0.0, 0.0, [0] * ranks
    for k, group in enumerate(sample_id_groups):
        holders = _holders(group)
        clock, position = [now] * ranks, [0] * ranks
        arrived: Dict[int, int] = {}
        ready = []

        def reach(r):
            if position[r] < len(group[r]):
                s = group[r][position[r]]
                arrived[s] = arrived.get(s, 0) + 1
                if arrived[s] == len(holders[s]):
                    ready.append(s)
        for r in range(ranks):
            reach(r)
        done = 0
        while ready:
            s = ready.pop()
            start = max(clock[r] for r in holders[s])
            seconds = cost(lengths[s], len(holders[s]))
            for r in holders[s]:
                clock[r] = start + seconds
                position[r] += 1
                forwards[r] += 1
                reach(r)
            busy += seconds * len(holders[s])
            done += 1
        if done != len(holders):
            stuck = [(r, group[r][position[r]]) for r in range(ranks)
                     if position[r] < len(group[r])]
            raise ScheduleError(f"group {k} hangs: ranks wait for samples their partners run "
                                f"later; (rank, next sample) {stuck[:6]}")
        now = max(clock) if clock else now
    idle = 1.0 - busy / (ranks * now) if now > 0 else 0.0
    return ExecutionStats(now, len(sample_id_groups), sum(forwards), max(forwards, default=0),
                          busy, idle)


# -- the scheduler ----------------------------------------------------------------------------
class LibdcpCPScheduler:
    """megatron-core's BalancedCPScheduler (0.16.1 to 0.19.2), planned by libdcp.

    ``LibdcpCPScheduler(max_seq_len_per_rank, dp_cp_group, **settings)`` takes the arguments
    Megatron's takes (``dp_cp_group`` needs only ``size()`` and, for the agreement check,
    to be a torch.distributed group); settings as :func:`settings_for` (``config`` gives
    Megatron's config for the mapping). ``get_groups_and_subsamples(sample_id_seqlens,
    config)`` returns ``(groups, sample_id_groups)`` as Megatron's does. After a call:
    ``last_plan`` (libdcp.Plan, sample positions = order of sample_id_seqlens),
    ``last_sample_ids`` (position -> id) and ``last_tokens`` (:class:`TokenCounts`).
    ``source_rank(sample id) -> rank`` (set by :func:`use_libdcp`) names the rank that loaded
    a sample in errors."""

    def __init__(self, max_seq_len_per_rank: int, dp_cp_group: Any, config: Any = None,
                 **settings: Any):
        self.max_seq_len_per_rank = max_seq_len_per_rank
        self.dp_cp_group = dp_cp_group
        self.total_hdp_gpus = dp_cp_group.size()
        if config is None:
            config = _MinimalConfig(max_seq_len_per_rank)
        elif getattr(config, "max_seqlen_per_dp_cp_rank", None) != max_seq_len_per_rank:
            raise ValueError(f"max_seq_len_per_rank {max_seq_len_per_rank} differs from "
                             f"config.max_seqlen_per_dp_cp_rank "
                             f"{getattr(config, 'max_seqlen_per_dp_cp_rank', None)}")
        self.settings = settings_for(config, self.total_hdp_gpus, **settings)
        self._cost = SampleCost(self.total_hdp_gpus, self.settings.max_tokens_per_rank,
                                **self.settings.plan_config())
        # BalancedCPScheduler's bookkeeping attributes, kept for code that reads them
        self.num_subsamples = 0
        self.num_subsamples_processed = 0
        self.free_resources: List[int] = []
        self.source_rank: Optional[Callable[[int], int]] = None
        self.last_plan: Optional[Plan] = None
        self.last_sample_ids: Tuple[int, ...] = ()
        self.last_tokens: Optional[TokenCounts] = None

    def gpus_needed(self, seq_len: int) -> int:
        """The smallest CP size the sample fits (libdcp's: padding and min_cp included)."""
        return cp_size_min(seq_len, self.total_hdp_gpus, self.settings.max_tokens_per_rank,
                           **self.settings.plan_config())

    def get_total_workload(self, seq_length: int, cp_size: Optional[int] = None) -> float:
        """The planner's time (seconds) of the sample alone on cp_size ranks (default: its
        smallest), one forward as Megatron runs it."""
        return self._cost(seq_length, cp_size or self.gpus_needed(seq_length))

    def get_groups_and_subsamples(self, sample_id_seqlens: Sequence[Tuple[int, int]],
                                  config: Any = None) -> Tuple[List, SampleIdGroups]:
        pairs = [_id_and_length(i, pair) for i, pair in enumerate(sample_id_seqlens)]
        if self.settings.check_agreement:
            check_ranks_agree(pairs, self.dp_cp_group)
        if not pairs:  # every rank alike: they agree on the batch
            raise ScheduleInputError(
                f"the batch is empty (no sub-sample on any of the {self.total_hdp_gpus} DP x CP "
                f"ranks): Megatron's hybrid schedule runs at least one sub-sample on every rank, "
                f"and its own scheduler returns no group to run")
        ids, lengths = [s for s, _ in pairs], [n for _, n in pairs]
        self._check_ids(ids)
        try:
            plan = make_plan(lengths, self.total_hdp_gpus, self.settings.max_tokens_per_rank,
                             **self.settings.plan_config())
        except (InfeasibleError, InvalidArgumentError) as failure:
            raise self._input_error(failure, ids, lengths) from failure
        positions = plan_groups(plan)
        sample_id_groups = [[[ids[p] for p in items] for items in group] for group in positions]
        groups = [[[lengths[p] for p in items] for items in group] for group in positions]
        self.last_plan, self.last_sample_ids = plan, tuple(ids)
        self.last_tokens = plan_token_counts(plan, lengths)
        self.num_subsamples = len(pairs)
        return groups, sample_id_groups

    def _where(self, sample: int) -> str:
        if self.source_rank is None:
            return f"in DP x CP rank {_group_rank(self.dp_cp_group)}'s view"
        return f"loaded by DP x CP rank {self.source_rank(sample)}"

    def _check_ids(self, ids: List[int]) -> None:
        if len(set(ids)) != len(ids):
            twice = next(s for s in ids if ids.count(s) > 1)
            raise ScheduleInputError(f"sample id {twice} appears twice {self._where(twice)}",
                                     sample=twice)

    def _input_error(self, failure: DcpError, ids: List[int], lengths: List[int]) -> Exception:
        """The planner names a bad sample by its position: name it by id and by the rank that
        loaded it, and say why neither scheduler runs it. A batch the settings cannot cover
        (every rank holding a sub-sample) names the setting."""
        match = re.match(r"sample (\d+) ", failure.message)
        if match and int(match.group(1)) < len(ids):
            position = int(match.group(1))
            sample = ids[position]
            rank = None if self.source_rank is None else self.source_rank(sample)
            why = ""
            if lengths[position] >= 1 and self.settings.max_cp == self.total_hdp_gpus:
                why = (f"; no CP group of the {self.total_hdp_gpus} ranks holds it within "
                       f"max_seqlen_per_dp_cp_rank, so Megatron's scheduler cannot run it "
                       f"either")
            return ScheduleInputError(f"sample {sample} ({self._where(sample)}): "
                                      f"{failure.message[match.end():]}{why}", sample=sample,
                                      rank=rank)
        if failure.message.startswith("cover_ranks"):
            return ScheduleInputError(
                f"{len(ids)} samples cannot hold a sub-sample on each of the "
                f"{self.total_hdp_gpus} ranks with CP sizes up to max_cp="
                f"{self.settings.max_cp} set in use_libdcp (Megatron's hybrid schedule runs "
                f"one on every rank; the default max_cp, the whole pool, covers every batch): "
                f"{failure.message}")
        return failure


def _id_and_length(index: int, pair: Any) -> Tuple[int, int]:
    """(id, length) as ints: Python, numpy or torch integers; bool, float and str refused."""
    try:
        sample, length = pair
        if isinstance(sample, bool) or isinstance(length, bool):
            raise TypeError("bool")
        return operator.index(sample), operator.index(length)
    except (TypeError, ValueError) as failure:
        raise TypeError(f"sample_id_seqlens[{index}] must be an (id, length) pair of ints, got "
                        f"{pair!r}") from failure


class _MinimalConfig:
    """The one config field the mapping needs when only Megatron's arguments are given."""

    def __init__(self, max_seqlen_per_dp_cp_rank: int):
        self.max_seqlen_per_dp_cp_rank = max_seqlen_per_dp_cp_rank


def _group_rank(group: Any) -> Any:
    rank = getattr(group, "rank", None)
    return rank() if callable(rank) else "?"


# -- ranks agreeing on the batch --------------------------------------------------------------
def batch_digest(pairs: Sequence[Tuple[int, int]]) -> int:
    """A signed 64-bit digest of (id, length) pairs, for comparing the ranks' views."""
    text = ";".join(f"{s},{n}" for s, n in pairs).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=DIGEST_BYTES).digest(), "little",
                          signed=True)


def first_disagreement(views: Sequence[Sequence[Tuple[int, int]]]) -> Optional[ScheduleInputError]:
    """Where the ranks' views of the batch first differ from rank 0's, as an error naming the
    sample (position in the batch) and the rank; None when all agree."""
    reference = list(views[0])
    for rank, view in enumerate(views[1:], start=1):
        view = list(view)
        for i in range(max(len(view), len(reference))):
            mine = view[i] if i < len(view) else None
            theirs = reference[i] if i < len(reference) else None
            if mine != theirs:
                return ScheduleInputError(
                    f"DP x CP ranks disagree on the batch: sample {i} is (id, length) {theirs} "
                    f"on rank 0 but {mine} on rank {rank} ({len(reference)} and {len(view)} "
                    f"samples); every rank must schedule the same all-gathered lengths",
                    sample=i, rank=rank)
    return None


def check_ranks_agree(pairs: Sequence[Tuple[int, int]], group: Any) -> None:
    """Compares this rank's view of the batch with every other rank's of ``group`` (one
    all-gather of a 64-bit digest; the full views only when they differ) and raises
    ScheduleInputError naming the first sample and rank that differ, on every rank alike, so
    that no rank goes on into a collective the others left. Skipped when torch.distributed
    is not initialised or ``group`` is not one of its groups."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return
    if not (dist.is_available() and dist.is_initialized()
            and isinstance(group, dist.ProcessGroup)):
        return
    device = "cpu"
    if dist.get_backend(group) == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    mine = torch.tensor([batch_digest(pairs)], dtype=torch.int64, device=device)
    digests = [torch.empty_like(mine) for _ in range(group.size())]
    dist.all_gather(digests, mine, group=group)
    if len({int(d) for d in digests}) == 1:
        return
    views: List[Any] = [None] * group.size()
    dist.all_gather_object(views, [tuple(p) for p in pairs], group=group)
    raise (first_disagreement([[tuple(p) for p in v] for v in views])
           or ScheduleInputError("DP x CP ranks disagree on the batch's digest"))


# -- installing it into Megatron --------------------------------------------------------------
class Installation:
    """The patch :func:`use_libdcp` made; ``restore()`` (or leaving the ``with``) puts
    Megatron's own scheduler back."""

    def __init__(self, wrapper_class: Any, settings: Dict[str, Any]):
        self.wrapper_class, self.settings = wrapper_class, settings
        self.original_init = wrapper_class.__init__
        installation = self

        def __init__(wrapper, *args, **kwargs):
            installation.original_init(wrapper, *args, **kwargs)
            install_into(wrapper, **installation.settings)
        wrapper_class.__init__ = __init__
        self.patched_init = __init__

    def restore(self) -> None:
        if self.wrapper_class.__init__ is self.patched_init:
            self.wrapper_class.__init__ = self.original_init

    def __enter__(self) -> "Installation":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.restore()


def install_into(wrapper: Any, **settings: Any) -> LibdcpCPScheduler:
    """Replaces the scheduler of one HybridCPDataLoaderWrapper by libdcp's (mapped from its
    config and DP x CP group) and lets errors name the rank that loaded a sample."""
    scheduler = LibdcpCPScheduler(wrapper.config.max_seqlen_per_dp_cp_rank, wrapper.dp_cp_group,
                                  config=wrapper.config, **settings)
    gather = wrapper.get_global_seqlens
    offsets_now: Dict[str, Any] = {}

    def get_global_seqlens(subsample_seqlens):
        seqlens, offsets = gather(subsample_seqlens)
        offsets_now["offsets"] = offsets
        return seqlens, offsets

    def source_rank(sample: int) -> int:  # Megatron's own reckoning of where an id came from
        return int(wrapper._gid_to_src_rank(sample, offsets_now["offsets"]))
    wrapper.get_global_seqlens = get_global_seqlens
    scheduler.source_rank = source_rank
    wrapper.cp_balancing_scheduler = scheduler
    return scheduler


def megatron_wrapper_class() -> Any:
    """Megatron-Core's HybridCPDataLoaderWrapper; ImportError saying what to install when
    Megatron-Core (or the torch it needs) is missing or has no hybrid context parallelism,
    and a warning when the installed release is not one of RELEASES."""
    try:
        module = importlib.import_module(WRAPPER_MODULE)
    except ImportError as missing:
        raise ImportError(
            f"libdcp.megatron.use_libdcp() installs libdcp's scheduler into Megatron-Core's "
            f"{WRAPPER_CLASS}, but {WRAPPER_MODULE} cannot be imported ({missing}); install "
            f"Megatron-Core: {INSTALL_HINT}") from missing
    wrapper_class = getattr(module, WRAPPER_CLASS, None)
    release = installed_release()
    if wrapper_class is None:
        raise ImportError(
            f"megatron-core {release} has no {WRAPPER_MODULE}.{WRAPPER_CLASS} (hybrid context "
            f"parallelism came in 0.16); install one of the releases libdcp.megatron is tested "
            f"with: {INSTALL_HINT}")
    if release not in RELEASES:
        warnings.warn(f"megatron-core {release} is not a release libdcp.megatron is tested "
                      f"with ({', '.join(RELEASES)}); its hybrid CP interface may differ",
                      stacklevel=3)
    return wrapper_class


def use_libdcp(**settings: Any) -> Installation:
    """Makes every HybridCPDataLoaderWrapper built from now on schedule with libdcp (settings
    as :func:`settings_for`: sync_ranks, min_cp, max_cp, microbatch_multiple,
    check_agreement, and dcp_config fields such as cost). Returns the installation: call
    ``restore()`` or use it as a context manager to put Megatron's scheduler back. Settings
    are checked against each wrapper's config when it is built (an unsupported one raises
    there, before any batch). Raises ImportError saying what to install when Megatron-Core is
    missing."""
    return Installation(megatron_wrapper_class(), settings)
