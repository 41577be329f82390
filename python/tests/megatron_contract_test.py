"""The contract fuzzer of issue 34: megatron-core's own BalancedCPScheduler and libdcp's
LibdcpCPScheduler on the same random inputs, libdcp's output checked against the contract
Megatron's consumers rely on (written out below, this file's own checker, not
libdcp.megatron.check_sample_id_groups), and totality: whenever Megatron's scheduler returns a
schedule that keeps the contract, libdcp returns one too; whenever a schedule exists at all
(every sample fits the whole pool), libdcp returns one; otherwise it raises ScheduleInputError
naming a sample. Then the step property of issue 34's item 2 on the same cases: under
Megatron's execution of the lists (libdcp.megatron.execute) libdcp's step is never longer than
Megatron's. Needs megatron-core (`make test-megatron` runs it under each release).

The contract (what HybridCPDataLoaderWrapper and hybrid_context_parallel_forward_backward do
with the scheduler's answer; each rule names where):
  lists     at least one group, each with one list per DP x CP rank (the schedule indexes
            sample_id_groups[group][dp_cp_rank]), and groups[g][r] the lengths of those ids;
  once      every id of the batch in exactly one group, held at most once per rank, no other id
            (the wrapper routes each sub-sample to the ranks whose lists name it);
  block     the holders of a sub-sample are an aligned block of c ranks, c a size Megatron has a
            communicator for (parallel_state.create_hybrid_dp_cp_groups: 2^i for
            1 <= i < floor(log2 D), the whole DP x CP group, and 1), since local_cp_size = c
            picks that communicator;
  fits      each holder's share, 2 ceil(L / 2c) tokens (get_batch_on_this_cp_rank's 2c chunks;
            L itself at c = 1), is at most max_seq_len_per_rank;
  last      every rank holds a sub-sample in the last group (the schedule runs the last one
            outside no_sync on every rank);
  order     in every group the holders of shared sub-samples reach them in one order (a
            sub-sample's collective starts when all its holders reach it; between barriers
            nothing else orders them: otherwise a deadlock).

Cases: DP x CP sizes 1 and the even sizes up to 128, with 6, 12, 24, 48 and 96 drawn often;
batches empty, of one sample, of equal lengths, of tiny samples, lognormal, Pareto, around the
boundaries c x max_seq_len_per_rank, and with samples longer than the pool holds; ids
shuffled and not positions. DCP_TEST_SEED sets the seed (printed), DCP_FUZZ_CASES the count.
"""
import math
import os
import random
import signal
import statistics
import sys
import time
import unittest
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

import libdcp  # noqa: E402
from libdcp import megatron as M  # noqa: E402

SEED = int(os.environ.get("DCP_TEST_SEED", "1"))
CASES = int(os.environ.get("DCP_FUZZ_CASES", "2400"))  # about 1,200 that both run
STEP_BATCHES = 1000            # the step property needs at least this many comparable cases
MEGATRON_SECONDS = 5           # per call: Megatron's scheduler may loop on some inputs
NAMED_SIZES = (6, 12, 24, 48, 96)   # pools that are not powers of two, as the issue names them
LARGEST_POOL = 128
NAMED_SIZE_SHARE = 0.35        # of the cases, on one of NAMED_SIZES
MOST_SAMPLES_PER_RANK = 4
MOST_SAMPLES = 512             # keeps a case under ~0.1 s with Megatron's scheduler
TOKENS_CHOICES = (64, 127, 512, 1000, 2048, 4096, 8192)  # max_seq_len_per_rank (one odd)
STEP_TOLERANCE = 1e-9          # relative: the two steps are sums of the same float costs
SLOWER_SHOWN = 10


class PoolStandIn:
    """What both schedulers read of the DP x CP group: size() (and rank() in messages)."""

    def __init__(self, ranks):
        self.ranks = ranks

    def size(self):
        return self.ranks

    def rank(self):
        return 0


# -- the contract ------------------------------------------------------------------------------
def communicator_sizes(ranks):
    """create_hybrid_dp_cp_groups' sizes, [2**i for i in range(int(log2(D)))][1:], the whole
    group (get_hybrid_data_context_parallel_groups returns the DP x CP group for it), and 1."""
    return {1, ranks} | {2 ** i for i in range(int(math.log2(ranks)))[1:]}


def holder_share(length, cp):
    return length if cp == 1 else 2 * -(-length // (2 * cp))


def contract_violation(groups, sample_id_groups, batch, ranks, max_seq_len):
    """The first rule of the contract the answer breaks, as 'rule: what', or None. ``batch``:
    the (id, length) pairs given to the scheduler."""
    length_of = dict(batch)
    if not isinstance(sample_id_groups, list) or not sample_id_groups:
        return "lists: no group"
    if not isinstance(groups, list) or len(groups) != len(sample_id_groups):
        return "lists: groups and sample_id_groups differ in length"
    where = {}
    for k, group in enumerate(sample_id_groups):
        if not isinstance(group, list) or len(group) != ranks:
            return f"lists: group {k} has {len(group)} lists for {ranks} ranks"
        if len(groups[k]) != ranks:
            return f"lists: groups[{k}] has {len(groups[k])} lists for {ranks} ranks"
        holders = {}
        for r, items in enumerate(group):
            if [length_of.get(s) for s in items] != list(groups[k][r]):
                return f"lists: groups[{k}][{r}] are not the lengths of its ids"
            if len(set(items)) != len(items):
                return f"once: rank {r} holds a sample twice in group {k}"
            for s in items:
                holders.setdefault(s, []).append(r)
        for s, ranks_of_s in holders.items():
            if s not in length_of:
                return f"once: id {s} is not in the batch"
            if s in where:
                return f"once: id {s} is in groups {where[s]} and {k}"
            where[s] = k
            c, first = len(ranks_of_s), ranks_of_s[0]
            if (c not in communicator_sizes(ranks) or first % c
                    or ranks_of_s != list(range(first, first + c))):
                return f"block: id {s} on ranks {ranks_of_s[:6]}.. ({c} of {ranks})"
            if holder_share(length_of[s], c) > max_seq_len:
                return (f"fits: id {s} of length {length_of[s]} on {c} ranks holds "
                        f"{holder_share(length_of[s], c)} > {max_seq_len} tokens a rank")
    if len(where) != len(length_of):
        return f"once: {len(length_of) - len(where)} ids of the batch in no group"
    idle = [r for r, items in enumerate(sample_id_groups[-1]) if not items]
    if idle:
        return f"last: rank {idle[0]} holds nothing in the last group"
    for k, group in enumerate(sample_id_groups):
        stuck = deadlock(group)
        if stuck:
            return f"order: group {k} deadlocks, (rank, waiting for) {stuck[:4]}"
    return None


def deadlock(group):
    """Runs one group: a sub-sample runs when it is next on all its holders' lists. Returns
    [(rank, next id)] of the ranks left waiting, [] when every list runs to its end."""
    holders = Counter(s for items in group for s in items)
    position = [0] * len(group)
    waiting = {}  # id -> holders that reached it
    ready = []

    def reach(r):
        if position[r] < len(group[r]):
            s = group[r][position[r]]
            waiting[s] = waiting.get(s, 0) + 1
            if waiting[s] == holders[s]:
                ready.append(s)
    for r in range(len(group)):
        reach(r)
    while ready:
        s = ready.pop()
        for r, items in enumerate(group):
            if position[r] < len(items) and items[position[r]] == s:
                position[r] += 1
                reach(r)
    return [(r, items[position[r]]) for r, items in enumerate(group)
            if position[r] < len(items)]


def schedule_exists(batch, ranks, max_seq_len):
    """Some schedule keeps the contract: the batch is not empty and every sample fits the whole
    pool (then each sample on all D ranks, one after another, is one)."""
    return bool(batch) and all(holder_share(n, ranks) <= max_seq_len for _, n in batch)


# -- the cases --------------------------------------------------------------------------------
def draw_ranks(rng):
    if rng.random() < NAMED_SIZE_SHARE:
        return rng.choice(NAMED_SIZES)
    return rng.choice([1] + list(range(2, LARGEST_POOL + 1, 2)))


def draw_lengths(rng, kind, count, ranks, tokens):
    pool = ranks * tokens
    if kind == "empty":
        return []
    if kind == "single":
        return [rng.randint(1, pool)]
    if kind == "equal":
        return [rng.randint(1, min(pool, 4 * tokens))] * count
    if kind == "tiny":
        return [rng.randint(1, 16) for _ in range(count)]
    if kind == "boundary":  # c x max_seq_len_per_rank and its neighbours
        sizes = sorted(communicator_sizes(ranks))
        return [max(1, rng.choice(sizes) * tokens + rng.choice((-1, 0, 1))) for _ in range(count)]
    if kind == "too-long":  # mostly fine, one or two longer than the whole pool
        lengths = [rng.randint(1, 2 * tokens) for _ in range(count)]
        for _ in range(rng.randint(1, 2)):
            lengths[rng.randrange(count)] = pool + rng.randint(1, tokens)
        return lengths
    if kind == "pareto":
        return [min(pool, max(1, int(tokens / 8 * (1.0 - rng.random()) ** (-1 / 1.2))))
                for _ in range(count)]
    return [min(pool, max(1, int(rng.lognormvariate(math.log(tokens / 2), 1.3))))
            for _ in range(count)]  # lognormal


KINDS = ("empty", "single", "equal", "tiny", "boundary", "too-long", "pareto", "lognormal",
         "lognormal", "pareto")


def draw_case(rng):
    ranks, tokens, kind = draw_ranks(rng), rng.choice(TOKENS_CHOICES), rng.choice(KINDS)
    count = min(MOST_SAMPLES, rng.randint(1, MOST_SAMPLES_PER_RANK * ranks))
    if rng.random() < 0.3:  # fewer samples than ranks: Megatron widens, libdcp must cover
        count = rng.randint(1, max(1, ranks - 1))
    lengths = draw_lengths(rng, kind, count, ranks, tokens)
    ids = rng.sample(range(10 ** 9), len(lengths))  # shuffled, not positions
    return {"ranks": ranks, "tokens": tokens, "kind": kind, "batch": list(zip(ids, lengths))}


# -- running the two schedulers ---------------------------------------------------------------
class MegatronGaveUp(Exception):
    """Megatron's scheduler ran past MEGATRON_SECONDS or made no progress."""


def _alarm(signum, frame):
    raise MegatronGaveUp(f"no answer within {MEGATRON_SECONDS} s")


def megatron_answer(batch, ranks, tokens):
    """("answer", (groups, sample_id_groups)) or ("raises", text) or ("loops", text)."""
    from megatron.core.pipeline_parallel.hybrid_cp_schedule import BalancedCPScheduler

    class Capped(BalancedCPScheduler):
        """Each next_hdp_group call that returns places at least one sample or makes no
        progress at all: more calls than samples is a loop."""
        calls = 0

        def next_hdp_group(self, sample_seqlens, *args, **kwargs):
            self.calls += 1
            if self.calls > len(batch) + 1:
                raise MegatronGaveUp(f"{self.calls} groups for {len(batch)} samples")
            return super().next_hdp_group(sample_seqlens, *args, **kwargs)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, MEGATRON_SECONDS)
    try:
        return "answer", Capped(tokens, PoolStandIn(ranks)).get_groups_and_subsamples(
            list(batch), None)
    except MegatronGaveUp as loop:
        return "loops", str(loop)
    except Exception as failure:  # its asserts and index errors: classified, not hidden
        return "raises", f"{type(failure).__name__}: {str(failure)[:80]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def libdcp_answer(batch, ranks, tokens):
    """("answer", ...), ("refuses", ScheduleInputError), ("unsupported", text) or ("crashes",
    text: any other exception)."""
    try:
        scheduler = M.LibdcpCPScheduler(tokens, PoolStandIn(ranks), check_agreement=False)
    except libdcp.UnsupportedError as refusal:  # an odd pool: no Megatron configuration
        return "unsupported", str(refusal)
    try:
        return "answer", scheduler.get_groups_and_subsamples(list(batch), None)
    except M.ScheduleInputError as refusal:
        return "refuses", refusal
    except Exception as failure:  # anything else stops a training run: a failure below
        return "crashes", f"{type(failure).__name__}: {failure}"


def run_case(case):
    """Both schedulers on one case, classified. Adds 'megatron', 'libdcp' (classes) and
    'failure' (why libdcp broke the contract or totality, None when it did not)."""
    batch, ranks, tokens = case["batch"], case["ranks"], case["tokens"]
    kind, answer = megatron_answer(batch, ranks, tokens)
    if kind == "answer":
        broken = contract_violation(*answer, batch, ranks, tokens)
        case["megatron"] = "runs" if broken is None else f"violates {broken.split(':')[0]}"
        case["megatron_groups"] = answer[1]
    else:
        case["megatron"] = kind
    kind, answer = libdcp_answer(batch, ranks, tokens)
    case["failure"] = None
    exists = schedule_exists(batch, ranks, tokens)
    if kind == "crashes":
        case["libdcp"] = "crashes"
        case["failure"] = f"crashes: {answer}"
    elif kind == "unsupported":
        case["libdcp"] = "unsupported"
        if ranks % 2 == 0 or ranks == 1:
            case["failure"] = f"UnsupportedError on a pool Megatron builds: {answer}"
    elif kind == "refuses":
        case["libdcp"] = "refuses"
        if case["megatron"] == "runs":
            case["failure"] = f"refuses a batch Megatron runs: {answer}"
        elif exists:
            case["failure"] = f"refuses a batch some schedule runs: {answer}"
        elif batch and answer.sample not in {s for s, n in batch
                                             if holder_share(n, ranks) > tokens}:
            case["failure"] = f"refusal names no sample that does not fit: {answer}"
    else:
        broken = contract_violation(*answer, batch, ranks, tokens)
        case["libdcp"] = "runs" if broken is None else "violates"
        case["libdcp_groups"] = answer[1]
        if broken:
            case["failure"] = f"contract: {broken}"
        elif not exists:
            case["failure"] = "answered a batch no schedule runs"
    return case


def step_ratio(case):
    """Megatron's step / libdcp's, both executed as Megatron executes them (execute) under
    the planner's default cost model (one forward and one ring per sub-sample)."""
    cost = libdcp.SampleCost(case["ranks"], case["tokens"], cp_sizes="megatron")
    lengths = dict(case["batch"])
    megatron = M.execute(case["megatron_groups"], lengths, cost).step_seconds
    ours = M.execute(case["libdcp_groups"], lengths, cost).step_seconds
    return megatron / ours


def describe(case):
    lengths = [n for _, n in case["batch"]]
    return (f"D={case['ranks']} max_seq_len_per_rank={case['tokens']} kind={case['kind']} "
            f"lengths={lengths if len(lengths) <= 24 else lengths[:24] + ['...']}")


def blocks(case, name):
    """A schedule in short: per group, 'position:first+c' for each sample (position in the
    batch, its first rank and its number of holders)."""
    position = {s: i for i, (s, _) in enumerate(case["batch"])}
    out = []
    for group in case[f"{name}_groups"]:
        holders = {}
        for r, items in enumerate(group):
            for s in items:
                holders.setdefault(s, []).append(r)
        out.append(" ".join(f"{position[s]}:{h[0]}+{len(h)}" for s, h in
                            sorted(holders.items(), key=lambda item: position[item[0]])))
    text = " | ".join(out)
    return text if len(text) <= 400 else text[:400] + " ..."


class ContractFuzzer(unittest.TestCase):
    """CASES random cases; libdcp keeps the contract and is total over Megatron's runnable
    answers; its step is never longer than Megatron's where both run."""

    @classmethod
    def setUpClass(cls):
        release = M.installed_release()
        print(f"megatron-core {release}: contract fuzzer, seed {SEED}, {CASES} cases")
        rng = random.Random(SEED)
        start = time.perf_counter()
        cls.cases = [run_case(draw_case(rng)) for _ in range(CASES)]
        cls.seconds = time.perf_counter() - start
        table = Counter((c["megatron"], c["libdcp"]) for c in cls.cases)
        print(f"{'Megatron':<28} {'libdcp':<12} cases")
        for (meg, ours), n in sorted(table.items()):
            print(f"{meg:<28} {ours:<12} {n}")
        print(f"{CASES} cases in {cls.seconds:.1f} s")

    def test_contract_and_totality(self):
        failures = [c for c in self.cases if c["failure"]]
        refusals = sum(c["megatron"] == "runs" and c["libdcp"] in ("refuses", "crashes",
                                                                   "unsupported")
                       for c in self.cases)
        violations = sum(c["libdcp"] == "violates" for c in self.cases)
        print(f"libdcp: {refusals} refusals of batches Megatron runs, {violations} contract "
              f"violations, {len(failures)} failures in all")
        for c in failures[:SLOWER_SHOWN]:
            print(f"  {c['failure']}\n    {describe(c)}")
        self.assertEqual(len(failures), 0, f"cases that break libdcp's contract or totality "
                         f"(seed {SEED})")
        kinds = Counter(c["kind"] for c in self.cases)
        self.assertTrue(all(kinds[k] for k in KINDS), kinds)  # every kind was drawn
        self.assertTrue(any(c["ranks"] == 1 for c in self.cases))

    def test_never_a_slower_step(self):
        both = [c for c in self.cases if c["megatron"] == "runs" and c["libdcp"] == "runs"]
        self.assertGreaterEqual(len(both), STEP_BATCHES, "too few cases both schedulers run")
        ratios = sorted((step_ratio(c), i) for i, c in enumerate(both))
        values = [r for r, _ in ratios]
        quantiles = statistics.quantiles(values, n=20)
        print(f"Megatron / libdcp step over {len(values)} batches both run: min "
              f"{values[0]:.4f}, 5% {quantiles[0]:.4f}, median {statistics.median(values):.4f}, "
              f"95% {quantiles[-1]:.4f}, max {values[-1]:.4f}, geomean "
              f"{math.exp(statistics.fmean(map(math.log, values))):.4f}; equal on "
              f"{sum(abs(v - 1) <= STEP_TOLERANCE for v in values)}")
        slower = [(r, both[i]) for r, i in ratios if r < 1 - STEP_TOLERANCE]
        for r, c in slower[:SLOWER_SHOWN]:
            print(f"  libdcp slower: ratio {r:.6f}, {describe(c)}\n"
                  f"    Megatron {blocks(c, 'megatron')}\n    libdcp   {blocks(c, 'libdcp')}")
        self.assertEqual(len(slower), 0, f"libdcp's step is longer on {len(slower)} batches")


class ReleaseFacts(unittest.TestCase):
    """What libdcp.megatron states about the installed release, read from its code."""

    def test_communicator_sizes_are_create_hybrid_dp_cp_groups(self):
        """parallel_state.create_hybrid_dp_cp_groups (with a recording create_group), plus 1
        and the whole group, is hybrid_cp_sizes and this file's communicator_sizes."""
        from megatron.core import parallel_state
        real = parallel_state.create_group
        parallel_state.create_group = lambda ranks, **kwargs: len(ranks)
        try:
            for ranks in list(range(2, LARGEST_POOL + 1, 2)) + list(NAMED_SIZES):
                groups = parallel_state.create_hybrid_dp_cp_groups(0, list(range(ranks)), None)
                sizes = set(groups) | {1, ranks}
                self.assertEqual(tuple(sorted(sizes)), M.hybrid_cp_sizes(ranks), ranks)
                self.assertEqual(sizes, communicator_sizes(ranks), ranks)
        finally:
            parallel_state.create_group = real

    def test_the_release_table_describes_the_installed_release(self):
        import inspect

        from megatron.core.pipeline_parallel import hybrid_cp_schedule, schedules
        release = M.RELEASES[M.installed_release()]
        passes = "cp_group_size=cp_group_size" in inspect.getsource(
            hybrid_cp_schedule.hybrid_context_parallel_forward_backward)
        self.assertEqual(passes, release.forward_step_cp_group_size)
        takes = "model_type" in inspect.signature(schedules.backward_step).parameters
        self.assertEqual(takes, release.backward_step_model_type)


if __name__ == "__main__":
    unittest.main()
