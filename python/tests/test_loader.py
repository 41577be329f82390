"""The data-loader wrapper's routing and packing, without torch: every rank's microbatch
buffers against the C library's pack of the same view (dcp_rank_view_pack)."""
import array
import importlib.util
import queue
import random
import threading
import unittest

import libdcp
from libdcp import loader

SEED = 7001


def make_samples(lengths):
    """Sample s, position p holds token s * 100000 + p + 1 (never 0, the padding value)."""
    return [array.array("q", [s * 100000 + p + 1 for p in range(n)])
            for s, n in enumerate(lengths)]


def c_packed(plan, rank, microbatch, samples):
    return list(array.array("q", bytes(plan.pack(rank, microbatch, samples))))


class LocalWorldExchange(unittest.TestCase):
    def test_every_rank_receives_what_the_c_pack_gives(self):
        for seed in range(SEED, SEED + 4):
            rng = random.Random(seed)
            print(f"seed {seed}")
            ranks = rng.choice([2, 4, 8])
            lengths = [rng.randint(1, 5000) for _ in range(rng.randint(1, 40))]
            plan = libdcp.plan(lengths, ranks=ranks, max_tokens_per_rank=4096)
            holders = [rng.randrange(ranks) for _ in lengths]
            samples = make_samples(lengths)
            buffers = loader.LocalWorld(plan, holders).exchange(
                samples, loader.list_zeros(samples[0]))
            for r in range(ranks):
                for k in range(plan.num_microbatches):
                    self.assertEqual(list(buffers[r][k]), c_packed(plan, r, k, samples),
                                     (seed, r, k))

    def test_a_short_chunk_is_refused(self):
        t = libdcp.Transfer("recv", 1, 0, 0, 0, 4, 0)
        with self.assertRaises(ValueError):
            loader.assemble({0: 8}, [t], {}, {1: [[1, 2, 3]]}, lambda n: [0] * n)


class ThreadWorld:
    """ranks threads standing in for processes: an all-gather and a mailbox transport."""

    def __init__(self, ranks):
        self.ranks = ranks
        self.barrier = threading.Barrier(ranks)
        self.slots = [None] * ranks
        self.mail = [[queue.Queue() for _ in range(ranks)] for _ in range(ranks)]

    def gather(self, rank):
        def run(mine):
            self.slots[rank] = list(mine)
            self.barrier.wait()
            out = list(self.slots)
            self.barrier.wait()
            return out
        return run

    def transport(self, rank):
        def run(outgoing, sizes, like):
            for peer, chunks in outgoing.items():
                self.mail[peer][rank].put(list(chunks))
            return {peer: self.mail[rank][peer].get(timeout=30) for peer in sizes}
        return run


class LoaderWrapper(unittest.TestCase):
    def test_whole_batch_on_every_rank(self):
        rng = random.Random(SEED + 10)
        print(f"seed {SEED + 10}")
        lengths = [rng.randint(1, 3000) for _ in range(20)]
        samples = make_samples(lengths)
        batch = [{"tokens": s, "labels": array.array("q", [t + 7 for t in s])} for s in samples]
        fields = ("tokens", "labels")
        plan = libdcp.plan(lengths, ranks=4, max_tokens_per_rank=2048)
        for r in range(4):
            got = list(loader.DynamicCPLoader([batch], rank=r, ranks=4,
                                              max_tokens_per_rank=2048, fields=fields))
            self.assertEqual(len(got), plan.num_microbatches)
            for mb in got:
                view = plan.rank_view(r, mb.microbatch)
                expected = c_packed(plan, r, mb.microbatch, samples)
                self.assertEqual(list(mb.tokens), expected)
                self.assertEqual(list(mb.fields["labels"]),
                                 [t + 7 if t else 0 for t in expected])
                self.assertEqual(mb.cu_seqlens_padded, view.cu_seqlens_padded)
                self.assertEqual(list(mb.position_ids), list(view.position_ids))
                self.assertEqual(list(mb.loss_mask), [int(t != 0) for t in expected])
                self.assertEqual((mb.cp, mb.rank_in_group), (view.cp, view.rank_in_group))
                self.assertEqual(mb.flops.valid_tokens, sum(lengths))

    def test_sharded_batches_move_between_ranks(self):
        rng = random.Random(SEED + 20)
        print(f"seed {SEED + 20}")
        ranks = 4
        shares = [[rng.randint(1, 4000) for _ in range(rng.randint(1, 9))] for _ in range(ranks)]
        shares[2] = []  # a rank that loaded nothing still receives its microbatches
        lengths = [n for share in shares for n in share]
        samples = make_samples(lengths)
        firsts = [sum(len(s) for s in shares[:r]) for r in range(ranks)]
        local = [samples[firsts[r]:firsts[r] + len(shares[r])] for r in range(ranks)]
        masks = [array.array("q", [(p % 3 != 0) for p in range(n)]) for n in lengths]
        world, results, errors = ThreadWorld(ranks), {}, []
        groups_seen = []

        def rank_main(r):
            try:
                batch = [{"tokens": s, "loss_mask": masks[firsts[r] + i]}
                         for i, s in enumerate(local[r])]
                wrapped = loader.DynamicCPLoader(
                    [batch], rank=r, ranks=ranks, max_tokens_per_rank=4096,
                    gather=world.gather(r), transport=world.transport(r),
                    fields=("tokens", "loss_mask"), empty={"tokens": array.array("q")},
                    cp_groups=lambda first, cp: groups_seen.append((first, cp)) or (first, cp))
                results[r] = list(wrapped)
            except Exception as failure:  # reported by the main thread
                errors.append(failure)
                world.barrier.abort()
        threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(ranks)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [])
        plan = libdcp.plan(lengths, ranks=ranks, max_tokens_per_rank=4096)
        for r in range(ranks):
            self.assertEqual(len(results[r]), plan.num_microbatches)
            for mb in results[r]:
                expected = c_packed(plan, r, mb.microbatch, samples)
                self.assertEqual(list(mb.tokens), expected, (r, mb.microbatch))
                mask = c_packed(plan, r, mb.microbatch, masks)
                self.assertEqual(list(mb.loss_mask), mask)
                if mb.cp > 1:
                    self.assertEqual(mb.group, (mb.view.first_rank, mb.cp))
                else:
                    self.assertIsNone(mb.group)

    @unittest.skipUnless(importlib.util.find_spec("torch"), "no torch: skipped")
    def test_torch_tensors_on_the_cpu(self):
        import torch
        rng = random.Random(SEED + 30)
        print(f"seed {SEED + 30}")
        lengths = [rng.randint(1, 3000) for _ in range(12)]
        samples = make_samples(lengths)
        batch = [torch.tensor(list(s), dtype=torch.int64) for s in samples]
        plan = libdcp.plan(lengths, ranks=2, max_tokens_per_rank=2048)
        for r in range(2):
            for mb in loader.DynamicCPLoader([batch], rank=r, ranks=2, max_tokens_per_rank=2048):
                self.assertEqual(mb.tokens.tolist(), c_packed(plan, r, mb.microbatch, samples))
                self.assertEqual(mb.cu_seqlens_padded.dtype, torch.int32)
                self.assertEqual(mb.position_ids.tolist(), list(mb.view.position_ids))
                self.assertEqual(mb.loss_mask.tolist(), [float(t != 0) for t in mb.tokens])

    def test_gather_needs_a_transport(self):
        with self.assertRaises(ValueError):
            loader.DynamicCPLoader([], rank=0, ranks=2, max_tokens_per_rank=64,
                                   gather=lambda x: [x])


@unittest.skipUnless(importlib.util.find_spec("torch"), "no torch: skipped")
class TorchDistributed(unittest.TestCase):
    """The loader over torch.distributed (gloo, CPU, 4 processes): all-gathered lengths,
    point-to-point token moves and CP groups; every rank's tokens equal the C pack."""

    def test_four_ranks_over_gloo(self):
        import json
        import os
        import socket
        import subprocess
        import sys
        import tempfile
        rng = random.Random(SEED + 40)
        print(f"seed {SEED + 40}")
        ranks = 4
        shares = [[rng.randint(1, 3000) for _ in range(rng.randint(0, 5))] for _ in range(ranks)]
        shares[0].append(7000)  # one sample long enough to need a CP group
        lengths = [n for share in shares for n in share]
        samples = make_samples(lengths)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        here = os.path.dirname(os.path.abspath(__file__))
        env = dict(os.environ, DCP_TEST_SHARES=json.dumps(shares), DCP_TEST_M="2048",
                   PYTHONPATH=os.pathsep.join([os.path.join(here, ".."),
                                               os.environ.get("PYTHONPATH", "")]))
        with tempfile.TemporaryDirectory() as work:
            paths = [os.path.join(work, f"rank{r}.json") for r in range(ranks)]
            workers = [subprocess.Popen([sys.executable, os.path.join(
                here, "distributed_loader_worker.py"), str(r), str(ranks), str(port), paths[r]],
                env=env) for r in range(ranks)]
            codes = [w.wait(timeout=300) for w in workers]
            self.assertEqual(codes, [0] * ranks)
            results = [json.load(open(p)) for p in paths]
        plan = libdcp.plan(lengths, ranks=ranks, max_tokens_per_rank=2048)
        self.assertGreater(max(g.cp for g in plan.groups), 1)
        for r in range(ranks):
            self.assertEqual(len(results[r]), plan.num_microbatches)
            for mb in results[r]:
                view = plan.rank_view(r, mb["microbatch"])
                self.assertEqual(mb["tokens"], c_packed(plan, r, mb["microbatch"], samples))
                self.assertEqual(mb["cu_seqlens_padded"], list(view.cu_seqlens_padded))
                self.assertEqual(mb["group_size"], view.cp)


if __name__ == "__main__":
    unittest.main()
