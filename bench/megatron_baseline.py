#!/usr/bin/env python3
"""Megatron-LM's dynamic-CP scheduler on bench/plan_bench's batches: writes its plan of each.

The planner issue (12) set its E = D target as "barrier efficiency >= Megatron's", with
Megatron's figures taken by another evaluator against its own lower bound. This bench makes the
comparison like for like: it plans each of bench/plan_bench's batches with a reimplementation
of Megatron-LM's scheduler and writes the plan; `build/plan_bench --megatron DIR` then plans the
same batches with our planner and evaluates both plans with dcp.h's own simulator
(dcp_plan_simulate) under the barrier model (E = D: per microbatch the slowest group, summed),
against one lower bound (ours, dcp_lower_bound under E = D), with both cost models. This file
needs nothing but the Python standard library (no dcp bindings).

The scheduler reimplemented is DefaultDynamicCPScheduler.get_groups_and_subsamples, which calls
next_hdp_group_packing_aware until every sample is placed, in NVIDIA/Megatron-LM, dev branch,
commit d48bd6be0a85cc0d6d3cc71e8750cf357cc6bdb1 (2026-08-21), files
megatron/core/datasets/data_schedule.py and megatron/core/datasets/data_schedule_utils.py.
The code below is written from a reading of it, not copied; what it does per microbatch:
  1. sort the remaining samples longest first; cap = longest * M * 1.05 (a per-rank workload
     ceiling); the longest opens a group of its minimum CP size c_min(L) (the smallest power of
     two c with c M >= L) on ranks 0 .. c - 1;
  2. every later sample, for each CP size c = c_min(L), 2 c_min(L), ... <= D, is tried on each
     open group of size c whose packed tokens per rank stay <= M, and on a new group of the c
     lowest free ranks; the candidate with the smallest resulting maximum rank workload
     (workload L^2 / c), if <= cap, wins (strictly smaller replaces: the first found is kept on
     ties, groups in the order they were opened, before the new group, smaller c first);
     a sample with no candidate waits for the next microbatch;
  3. while ranks are idle, the first open group of the smallest size doubles (later groups
     shift right); when none can, the microbatch becomes one group of all D ranks holding the
     longest samples that fit (packing from all of this round's samples, the rest wait).
Every rank of a group carries the same workload (ranks gain work only with their group), so
this version keeps one time per group instead of one per rank: max over ranks of (time + w on
the group's ranks) is max(max over all ranks, group time + w), the same floating-point values
Megatron compares. The VPP alignment (align_sample_id_groups) is off, as with
microbatch_group_size_per_vp_stage unset.

Lengths: Megatron's SFT dataset pads every sample to a multiple of 2 * DP * CP under dynamic CP
(sft_dataset.py, _calculate_padding_divisor), so the scheduler sees lengths rounded up to a
multiple of 2 D; the plans are evaluated on the valid lengths under our model, which pads each
sample itself (to 2c on c ranks), and with the L^2 model (attn 1, linear 0, ring 0) padding
costs nothing. A group of a size that is not a power of two (Megatron's full-pool fallback on a
pool that is not one) cannot be written as a dcp plan; plan_bench evaluates such a plan by its
own barrier sum, checked against dcp_plan_simulate on every plan both can evaluate.

Output: DIR/NAME.megatron.txt, one line per microbatch, its groups separated by ';', each
`cp:id,id,...` (sample ids are 0-based positions in DIR/NAME.txt).

Usage: build/plan_bench --dump-lengths DIR && python3 bench/megatron_baseline.py DIR
       [--workloads a,b,...] && build/plan_bench --megatron DIR   (or `make bench-megatron`)
"""
import argparse
import os
import time

# Megatron's _DYNAMIC_CP_WORKLOAD_CAP_DELTA: the cap's slack over longest * M.
WORKLOAD_CAP_DELTA = 0.05
# Megatron's dynamic-CP padding: every length a multiple of PAD_PER_RANK * D.
PAD_PER_RANK = 2


def min_cp_size(length, max_tokens_per_rank):
    """Megatron's dcp_gpus_needed with min_cp_size 1: the smallest power of two c with
    c * M >= length (Megatron computes 2 ** ceil(log2(length / M)), the same number)."""
    cp = 1
    while cp * max_tokens_per_rank < length:
        cp *= 2
    return cp


class Group:
    def __init__(self, first_rank, cp, time, tokens_per_rank):
        self.first_rank, self.cp = first_rank, cp
        self.time = time                      # workload of each of its ranks
        self.tokens_per_rank = tokens_per_rank  # Megatron's packing_sequence_len
        self.samples, self.lengths = [], []


def one_microbatch(remaining, ranks, max_tokens_per_rank):
    """One call of next_hdp_group_packing_aware: (groups, waiting), remaining given as
    (sample id, padded length) pairs; waiting keeps their order."""
    remaining = sorted(remaining, key=lambda item: item[1], reverse=True)
    tallest = remaining[0][1]
    cap = float(tallest) * float(max_tokens_per_rank) * (1.0 + WORKLOAD_CAP_DELTA)
    groups, waiting = [], []

    def open_group(cp, sample, length):
        first = sum(g.cp for g in groups)  # the lowest free ranks: groups fill from rank 0
        group = Group(first, cp, 0.0, 0.0)
        add(group, sample, length)
        groups.append(group)

    def add(group, sample, length):
        group.time += (length * length) / group.cp
        group.tokens_per_rank += length / group.cp
        group.samples.append(sample)
        group.lengths.append(length)

    sample, length = remaining[0]
    cp = min_cp_size(length, max_tokens_per_rank)
    if cp > ranks:
        raise ValueError(f"sample {sample} of {length} tokens needs {cp} > {ranks} ranks")
    open_group(cp, sample, length)
    for sample, length in remaining[1:]:
        slowest = max(g.time for g in groups)
        free = ranks - sum(g.cp for g in groups)
        best = None  # (projected max, group or None for a new one, cp)
        cp = min_cp_size(length, max_tokens_per_rank)
        while cp <= ranks:
            work = (length * length) / cp
            for group in groups:
                if group.cp != cp or group.tokens_per_rank + length / cp > max_tokens_per_rank:
                    continue
                projected = max(slowest, group.time + work)
                if projected <= cap and (best is None or projected < best[0]):
                    best = (projected, group, cp)
            if free >= cp:
                projected = max(slowest, work)
                if projected <= cap and (best is None or projected < best[0]):
                    best = (projected, None, cp)
            cp *= 2
        if best is None:
            waiting.append((sample, length))
        elif best[1] is None:
            open_group(best[2], sample, length)
        else:
            add(best[1], sample, length)

    while sum(g.cp for g in groups) < ranks:
        if not widen_smallest(groups, ranks):
            return fill_whole_pool(remaining, ranks, max_tokens_per_rank)
    return groups, waiting


def widen_smallest(groups, ranks):
    """Megatron's fill_empty_gpus_once: the first group of the smallest size that can doubles
    (to at most D ranks), the groups to its right shift; False when none can."""
    smallest = min(g.cp for g in groups)
    wider = min(2 * smallest, ranks)
    extra = wider - smallest
    used = sum(g.cp for g in groups)
    for group in groups:
        if group.cp != smallest:
            continue
        last = group.first_rank + group.cp - 1
        if last + extra >= ranks:
            continue
        if used + extra > ranks:
            raise AssertionError("widening past the pool (Megatron would index out of range)")
        for other in groups:
            if other.first_rank > last:
                other.first_rank += extra
        group.cp = wider
        group.time = 0.0
        for length in group.lengths:
            group.time += (length * length) / wider
        return True
    return False


def fill_whole_pool(remaining, ranks, max_tokens_per_rank):
    """Megatron's fill_with_full_dpxcp_group: one group of all D ranks with the samples (longest
    first, of all this round's) that fit M tokens per rank; the others wait."""
    group, waiting = Group(0, ranks, 0.0, 0.0), []
    for sample, length in remaining:
        if group.tokens_per_rank + length / ranks <= max_tokens_per_rank:
            group.samples.append(sample)
            group.lengths.append(length)
            group.tokens_per_rank += length / ranks
        else:
            waiting.append((sample, length))
    if not group.samples:
        raise ValueError("no sample fits the full pool")
    group.time = sum((length * length) / ranks for length in group.lengths)
    return [group], waiting


def megatron_plan(lengths, ranks, max_tokens_per_rank):
    """DefaultDynamicCPScheduler.get_groups_and_subsamples on lengths padded as Megatron pads
    them: a list of microbatches, each a list of (cp, [sample ids])."""
    pad = PAD_PER_RANK * ranks
    remaining = [(i, -(-length // pad) * pad) for i, length in enumerate(lengths)]
    remaining.sort(key=lambda item: item[1], reverse=True)
    microbatches = []
    while remaining:
        groups, remaining = one_microbatch(remaining, ranks, max_tokens_per_rank)
        microbatches.append([(g.cp, list(g.samples)) for g in groups])
    return microbatches


def write_plan(path, microbatches):
    """One line per microbatch, groups `cp:id,id,...` separated by ';'."""
    with open(path, "w") as out:
        for groups in microbatches:
            out.write(";".join(f"{cp}:{','.join(str(s) for s in samples)}"
                               for cp, samples in groups) + "\n")


def check_megatron_examples():
    """The two expectations of Megatron's own tests of next_hdp_group_packing_aware
    (tests/unit_tests/test_sequence_packing.py at the commit above): a short sample joins the
    long one's CP-2 group, and on 14 ranks two 50-token samples end in one group of all 14
    (widening 1 -> 2 -> 4 -> 8 stops at 14, then the full-pool fallback)."""
    groups, waiting = one_microbatch([(0, 6144), (1, 2048)], 2, 4096)
    assert not waiting and [(g.first_rank, g.cp, g.samples) for g in groups] == [(0, 2, [0, 1])]
    groups, waiting = one_microbatch([(0, 50), (1, 50)], 14, 100)
    assert not waiting and [(g.first_rank, g.cp, g.samples) for g in groups] == [(0, 14, [0, 1])]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("lengths_dir", help="the directory of build/plan_bench --dump-lengths")
    parser.add_argument("--workloads", help="comma-separated names (default: all)")
    args = parser.parse_args()
    check_megatron_examples()
    wanted = set(args.workloads.split(",")) if args.workloads else None
    with open(os.path.join(args.lengths_dir, "workloads.txt")) as index:
        rows = [line.split() for line in index if line.strip()]
    for name, count, ranks, max_tokens, filename in rows:
        if wanted and name not in wanted:
            continue
        with open(os.path.join(args.lengths_dir, filename)) as f:
            lengths = [int(line) for line in f if line.strip()]
        if len(lengths) != int(count):
            raise ValueError(f"{filename}: {len(lengths)} lengths, index says {count}")
        start = time.perf_counter()
        megatron = megatron_plan(lengths, int(ranks), int(max_tokens))
        seconds = time.perf_counter() - start
        placed = sorted(s for mb in megatron for _, samples in mb for s in samples)
        if placed != list(range(len(lengths))):
            raise AssertionError(f"{name}: Megatron's plan does not place every sample once")
        write_plan(os.path.join(args.lengths_dir, f"{name}.megatron.txt"), megatron)
        print(f"{name:<17} {len(lengths):5d} samples, {int(ranks):4d} ranks: {len(megatron):4d} "
              f"microbatches in {seconds * 1e3:.0f} ms (Python)")


if __name__ == "__main__":
    main()
