#!/usr/bin/env python3
"""megatron-core's own BalancedCPScheduler (the installed release: 0.16.1 or 0.19.2) against
libdcp's scheduler (libdcp.megatron), both executed as Megatron executes them, on the same
batches.

Megatron's schedule is the real package's (get_groups_and_subsamples of its
BalancedCPScheduler, with a stand-in DP x CP group that has only size()), "not runnable" where
it breaks what Megatron's own consumers need (libdcp.megatron.check_sample_id_groups: a CP size
with no communicator, misaligned holders, a rank empty in the last group); ours is
LibdcpCPScheduler through the Python binding, mapped onto Megatron's groups (sync model E = 1:
one group; E = D: one group per microbatch). Both schedules run in libdcp.megatron.execute's
model of hybrid_context_parallel_forward_backward: in each group every rank runs its
sub-samples one forward each, a sub-sample starting when all its ranks are free, and a barrier
after the group. Costs: Megatron's own (get_total_workload, L^2 / c per rank; our planner then
plans with the L^2 model) and libdcp's simulator (dcp.h's default model, per sub-sample
forward dcp_cost_sample_seconds + its ring steps; our planner plans with it). Figures: step
(L^2 units of 1e9, or ms), groups (barriers), the most forwards a rank runs, idle fraction
(1 - busy / (ranks x step)), and each scheduler's wall time on the batch (median of REPEATS).
Our planner plans with Megatron's CP sizes (its communicators: powers of two below
2^floor(log2 D), and D) and every rank holding a sub-sample, as LibdcpCPScheduler does.

Batches: bench/plan_bench's workloads (--lengths-dir, from `build/plan_bench --dump-lengths
DIR`: the seeds' distributions) and lognormal, Pareto and bimodal batches of SAMPLES_PER_RANK x D
samples at D = 8 .. 1024 ranks (seeded; M = 4096).

Usage (needs torch and megatron-core: `make bench-megatron-core` builds both releases' venvs and
runs it under each):
    python bench/megatron_core_compare.py --lengths-dir DIR [--quick]   (a markdown table)
"""
import argparse
import math
import os
import random
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import libdcp  # noqa: E402
from libdcp import megatron as M  # noqa: E402

L2_MODEL = {"attn_coeff": 1.0, "linear_coeff": 0.0, "ring_step_cost": 0.0}
COSTS = ("megatron", "libdcp")       # whose cost evaluates (and which model our planner uses)
UNITS = {"megatron": 1e-9, "libdcp": 1e3}   # printed: 1e9 L^2 units, ms
GENERATED_RANKS = (8, 64, 256, 1024)
QUICK_RANKS = (8, 64)
SAMPLES_PER_RANK = 8
GENERATED_M = 4096
SEED = 20261125
REPEATS = 3
LARGE_BATCH = 2048  # samples from which each scheduler is timed once (Megatron's takes seconds)
# the generated distributions (tokens): lognormal as Megatron's mock SFT data; Pareto(1.2)
# from 512; bimodal 90% in [256, 2048], 10% in [16384, 131072] (log-uniform)
LOGNORMAL = (4096, 1.4, 256, 65536)
PARETO_ALPHA, PARETO_MIN = 1.2, 512
BIMODAL_SHORT_FRACTION, BIMODAL_SHORT, BIMODAL_LONG = 0.9, (256, 2048), (16384, 131072)


class PoolStandIn:
    """What BalancedCPScheduler reads of its dp_cp_group: size()."""

    def __init__(self, ranks):
        self.ranks = ranks

    def size(self):
        return self.ranks

    def rank(self):
        return 0


def largest_power_of_two_group(ranks):
    """The generated lengths' cap is this x M, as in earlier rounds (bench/RESULTS.md), so the
    workloads stay the same batches."""
    return max(c for c in M.hybrid_cp_sizes(ranks) if c & (c - 1) == 0)


def generated(kind, ranks):
    count, rng = SAMPLES_PER_RANK * ranks, random.Random(SEED + ranks)
    cap = largest_power_of_two_group(ranks) * GENERATED_M
    if kind == "lognormal":
        mean, sigma, low, high = LOGNORMAL
        return libdcp.lognormal_lengths(mean, sigma, low, min(high, cap), count, seed=SEED)
    if kind == "pareto":
        return [min(cap, int(PARETO_MIN * (1.0 - rng.random()) ** (-1.0 / PARETO_ALPHA)))
                for _ in range(count)]
    out = []
    for _ in range(count):
        low, high = BIMODAL_SHORT if rng.random() < BIMODAL_SHORT_FRACTION else BIMODAL_LONG
        out.append(min(cap, int(math.exp(rng.uniform(math.log(low), math.log(high))))))
    return out


def workloads(args):
    rows = []
    if args.lengths_dir:
        with open(os.path.join(args.lengths_dir, "workloads.txt")) as index:
            for name, _, ranks, tokens, filename in (l.split() for l in index if l.strip()):
                if args.quick and int(ranks) > max(QUICK_RANKS):
                    continue
                with open(os.path.join(args.lengths_dir, filename)) as f:
                    rows.append((name, int(ranks), int(tokens), [int(x) for x in f if x.strip()]))
    for ranks in (QUICK_RANKS if args.quick else GENERATED_RANKS):
        for kind in ("lognormal", "pareto", "bimodal"):
            rows.append((f"{kind}-D{ranks}", ranks, GENERATED_M, generated(kind, ranks)))
    return rows


def timed(function, count):
    times, result = [], None
    for _ in range(REPEATS if count < LARGE_BATCH else 1):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return result, statistics.median(times)


def megatron_schedule(lengths, ranks, tokens):
    from megatron.core.pipeline_parallel.hybrid_cp_schedule import BalancedCPScheduler

    def run():  # a fresh scheduler each time: its lru_caches would time the second call only
        scheduler = BalancedCPScheduler(tokens, PoolStandIn(ranks))
        return scheduler.get_groups_and_subsamples(list(enumerate(lengths)), None)[1]
    return timed(run, len(lengths))


def our_schedule(lengths, ranks, tokens, sync_ranks, cost):
    config = {} if cost == "libdcp" else {"cost": L2_MODEL}
    scheduler = M.LibdcpCPScheduler(tokens, PoolStandIn(ranks), sync_ranks=sync_ranks,
                                    check_agreement=False, **config)
    return timed(lambda: scheduler.get_groups_and_subsamples(list(enumerate(lengths)))[1],
                 len(lengths))


def evaluate(groups, lengths, ranks, tokens, cost):
    if cost == "megatron":
        model = M.megatron_workload
    else:
        model = libdcp.SampleCost(ranks, tokens, cp_sizes="megatron")
    return M.execute(groups, dict(enumerate(lengths)), model)


def row(name, ranks, tokens, lengths, cost):
    out = {"name": name, "N": len(lengths), "D": ranks, "M": tokens, "cost": cost}
    try:
        groups, out["t_meg"] = megatron_schedule(lengths, ranks, tokens)
    except Exception as failure:  # Megatron's scheduler asserts on some inputs: say so
        out["meg"], out["meg_error"] = None, f"{type(failure).__name__}: {failure}"[:120]
        groups = None
    if groups is not None:
        try:
            M.check_sample_id_groups(groups, range(len(lengths)), ranks)
            out["meg"] = evaluate(groups, lengths, ranks, tokens, cost)
        except M.ScheduleError as failure:  # Megatron's consumers cannot run it
            out["meg"], out["meg_error"] = None, f"not runnable: {failure}"[:160]
    for label, sync in (("e1", 1), ("ed", ranks)):
        groups, out[f"t_{label}"] = our_schedule(lengths, ranks, tokens, sync, cost)
        M.check_sample_id_groups(groups, range(len(lengths)), ranks)
        out[label] = evaluate(groups, lengths, ranks, tokens, cost)
    return out


HEADER = ("workload", "N", "D", "cost", "Megatron", "ours E=1", "meg/ours", "ours E=D",
          "groups m/1/D", "fwd/rank m/1/D", "idle m/1/D", "plan s m/1/D")


def cells(r):
    unit = UNITS[r["cost"]]
    meg, e1, ed = r["meg"], r["e1"], r["ed"]
    triple = (lambda f, fmt: "/".join(fmt.format(f(x)) if x else "-" for x in (meg, e1, ed)))
    return (r["name"], str(r["N"]), str(r["D"]), "L^2/c" if r["cost"] == "megatron" else "libdcp",
            f"{meg.step_seconds * unit:.4g}" if meg else "not runnable",
            f"{e1.step_seconds * unit:.4g}",
            f"{meg.step_seconds / e1.step_seconds:.3f}" if meg else "-",
            f"{ed.step_seconds * unit:.4g}",
            triple(lambda x: x.groups, "{}"), triple(lambda x: x.max_rank_forwards, "{}"),
            triple(lambda x: x.idle_fraction, "{:.3f}"),
            "/".join(f"{r[k]:.3g}" if k in r else "-" for k in ("t_meg", "t_e1", "t_ed")))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths-dir", help="build/plan_bench --dump-lengths DIR")
    parser.add_argument("--quick", action="store_true", help=f"D <= {max(QUICK_RANKS)} only")
    args = parser.parse_args(argv)
    print(f"megatron-core {M.installed_release()}")
    print("| " + " | ".join(HEADER) + " |")
    print("|" + "---|" * len(HEADER), flush=True)
    rows = []
    for w in workloads(args):
        for cost in COSTS:  # each row as it is measured: the 1,024-rank ones take minutes
            rows.append(row(*w, cost))
            print("| " + " | ".join(cells(rows[-1])) + " |", flush=True)
    slower = [r for r in rows if r["meg"] and r["e1"].step_seconds > r["meg"].step_seconds]
    for r in rows:
        if not r["meg"]:
            print(f"{r['name']} ({r['cost']}): Megatron's scheduler: {r['meg_error']}")
    ratios = [r["meg"].step_seconds / r["e1"].step_seconds for r in rows if r["meg"]]
    print(f"Megatron / ours (E = 1) step: min {min(ratios):.3f}, geomean "
          f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f} over {len(ratios)} rows; "
          f"ours slower on {len(slower)}")
    for r in slower:
        print(f"  slower: {r['name']} under {r['cost']} cost")
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
