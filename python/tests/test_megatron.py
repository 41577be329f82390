"""libdcp.megatron without torch or Megatron: the plan-to-groups mapping over random plans (the
ordering claim), the checks Megatron's schedule relies on, the settings map and its errors, bad
input, token counts and the execution model. The same code inside the real megatron-core is
tested by megatron_core_test.py (`make test-megatron`)."""
import os
import random
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import libdcp  # noqa: E402
from libdcp import megatron as M  # noqa: E402

SEED = int(os.environ.get("DCP_TEST_SEED", "1"))
RANDOM_PLANS = 60


class Pool:
    """A DP x CP group as the scheduler reads it without torch.distributed."""

    def __init__(self, ranks, rank=0):
        self.ranks, self.me = ranks, rank

    def size(self):
        return self.ranks

    def rank(self):
        return self.me


class Config:
    def __init__(self, **fields):
        self.max_seqlen_per_dp_cp_rank = 4096
        self.__dict__.update(fields)


def random_batch(rng, ranks, tokens):
    cap = ranks * tokens  # the whole pool is one of Megatron's CP groups
    count = rng.randint(ranks, 6 * ranks)
    return [min(cap, max(1, int(rng.lognormvariate(7.5, 1.3)))) for _ in range(count)]


def shared_order_violations(group):
    """Pairs of ranks that meet two shared samples in opposite orders."""
    index = [{s: i for i, s in enumerate(items)} for items in group]
    bad = []
    for a in range(len(group)):
        for b in range(a + 1, len(group)):
            shared = [s for s in group[a] if s in index[b]]
            order_b = sorted(shared, key=lambda s: index[b][s])
            if shared != order_b:
                bad.append((a, b))
    return bad


class MappingOverRandomPlans(unittest.TestCase):
    def setUp(self):
        print(f"seed {SEED}")
        self.rng = random.Random(SEED)

    def test_ranks_sharing_a_sample_meet_it_in_the_same_order(self):
        """E = 1: one group per batch; every pair of ranks meets its shared samples in one
        order, so the CP collectives pair up (and execute() does not hang)."""
        for _ in range(RANDOM_PLANS):
            ranks = self.rng.choice([2, 4, 6, 8, 12, 16, 32])
            lengths = random_batch(self.rng, ranks, 4096)
            plan = libdcp.plan(lengths, ranks, 4096, sync_ranks=1, cp_sizes="megatron",
                               cover_ranks=True)
            groups = M.plan_groups(plan, 1)
            self.assertEqual(len(groups), 1)
            self.assertEqual(shared_order_violations(groups[0]), [])
            M.check_sample_id_groups(groups, range(len(lengths)), ranks)

    def test_every_sync_model_assigns_each_sample_once_to_its_group(self):
        for _ in range(RANDOM_PLANS // 2):
            ranks = self.rng.choice([4, 8, 16])
            lengths = random_batch(self.rng, ranks, 2048)
            for sync in (1, 2, ranks):
                plan = libdcp.plan(lengths, ranks, 2048, sync_ranks=sync)
                groups = M.plan_groups(plan, sync)
                M.check_sample_id_groups(groups, range(len(lengths)), ranks)
                where = plan.samples
                for group in groups:
                    for s, holders in M._holders(group).items():
                        _, first, cp = where[s]
                        self.assertEqual(holders, list(range(first, first + cp)))
                if sync == ranks:  # one group per microbatch, the tail merged at most
                    self.assertLessEqual(len(groups), plan.num_microbatches)
                    self.assertGreaterEqual(len(groups), 1)

    def test_token_counts_from_the_plan_are_the_lists_counts(self):
        """plan_token_counts (difference arrays over the plan's groups) gives what token_counts
        gives rank by rank from Megatron's lists, over random plans, sync models and lengths
        of every remainder modulo 2 cp."""
        for _ in range(RANDOM_PLANS // 2):
            ranks = self.rng.choice([2, 4, 8, 16, 32])
            lengths = random_batch(self.rng, ranks, 2048)
            for sync in (1, 2, ranks):
                plan = libdcp.plan(lengths, ranks, 2048, sync_ranks=sync)
                from_lists = M.token_counts(M.plan_groups(plan, sync), dict(enumerate(lengths)))
                self.assertEqual(M.plan_token_counts(plan, lengths, sync), from_lists)
                self.assertEqual(M.plan_token_counts(plan, lengths), from_lists)  # plan's E
        for length in range(1, 70):  # one sample on 8 ranks: every rank's share
            plan = libdcp.plan([length], 8, 16, min_cp=8)
            counts = M.plan_token_counts(plan, [length], 1).group_rank_tokens[0]
            self.assertEqual(list(counts), [M.local_valid_tokens(length, 8, r) for r in range(8)])

    def test_barriers_only_where_the_pool_is_in_lockstep(self):
        lengths = [8192] * 2 + [300] * 40
        plan = libdcp.plan(lengths, 8, 1024, sync_ranks=2, max_cp=8)
        runs = M.barrier_runs(plan, 2)
        lockstep = [any(g.cp == 8 for g in groups) for groups in plan.microbatches]
        for begin, end in runs:
            if end - begin > 1:  # a run of several microbatches holds no pool-wide one
                self.assertFalse(any(lockstep[begin:end]))
        self.assertEqual(M.barrier_runs(plan, 1), [(0, plan.num_microbatches)])
        self.assertEqual(len(M.barrier_runs(plan, 8)), plan.num_microbatches)
        self.assertEqual(plan.sync_ranks, 2)
        self.assertEqual(M.barrier_runs(plan), runs)  # the plan's own E when none is given
        with self.assertRaises(ValueError):
            M.barrier_runs(plan, 0)

    def test_a_planted_order_swap_is_caught(self):
        """The checks fail on a broken mapping: one rank's shared samples swapped."""
        lengths = [5000, 5000, 100, 100, 100, 100]
        plan = libdcp.plan(lengths, 2, 4096, max_cp=2)
        groups = M.plan_groups(plan, 1)
        shared = [s for s in groups[0][0] if s in groups[0][1]]
        self.assertGreaterEqual(len(shared), 2)
        broken = [list(items) for items in groups[0]]
        i, j = broken[1].index(shared[0]), broken[1].index(shared[1])
        broken[1][i], broken[1][j] = broken[1][j], broken[1][i]
        with self.assertRaises(M.ScheduleError) as caught:
            M.check_sample_id_groups([broken], range(len(lengths)), 2)
        self.assertIn("hangs", str(caught.exception))

    def test_the_checks_catch_loss_duplication_and_misplaced_groups(self):
        good = [[[0, 1], [0, 2]]]  # sample 0 on ranks 0-1 (c = 2), 1 on 0, 2 on 1
        M.check_sample_id_groups(good, [0, 1, 2], 2)
        cases = {"lost": ([[[0, 1], [0]]], [0, 1, 2]), "is in groups": (
            [[[0], [0]], [[0, 1], [2]]], [0, 1, 2]), "not one of Megatron's": (
            [[[0], [1], [0], [2]]], [0, 1, 2]), "no sub-sample in the last group": (
            [[[0, 1], [0, 2]], [[3], []]], [0, 1, 2, 3])}
        for text, (groups, ids) in cases.items():
            with self.subTest(text):
                with self.assertRaises(M.ScheduleError) as caught:
                    M.check_sample_id_groups(groups, ids, len(groups[0]))
                self.assertIn(text, str(caught.exception))

    def test_the_last_group_absorbs_groups_until_every_rank_has_a_sample(self):
        """Megatron runs the last sub-sample of the last group on every rank: under E = D a
        last microbatch with an idle rank joins the one before it (a barrier dropped)."""
        class TwoMicrobatches:
            ranks, num_microbatches, num_samples = 2, 3, 4
            microbatches = ((libdcp.Group(0, 2, (0,)),),
                            (libdcp.Group(0, 1, (1,)), libdcp.Group(1, 1, (2,))),
                            (libdcp.Group(0, 1, (3,)),))
        groups = M.plan_groups(TwoMicrobatches(), 2)
        self.assertEqual(groups, [[[0], [0]], [[1, 3], [2]]])
        M.check_sample_id_groups(groups, range(4), 2)

    def test_an_idle_rank_in_the_whole_batch_is_an_error_naming_it(self):
        plan = libdcp.plan([100, 100], 4, 4096, max_cp=1)
        with self.assertRaises(M.ScheduleError) as caught:
            M.plan_groups(plan, 1)
        self.assertIn("rank 2 has no sub-sample", str(caught.exception))


class Settings(unittest.TestCase):
    def test_megatron_group_sizes(self):
        """create_hybrid_dp_cp_groups: 2 .. below 2^floor(log2 D), and D itself; the planner's
        cp_sizes="megatron" is the same set on every pool size."""
        self.assertEqual(M.hybrid_cp_sizes(8), (1, 2, 4, 8))
        self.assertEqual(M.hybrid_cp_sizes(12), (1, 2, 4, 12))
        self.assertEqual(M.hybrid_cp_sizes(6), (1, 2, 6))
        self.assertEqual(M.hybrid_cp_sizes(48), (1, 2, 4, 8, 16, 48))
        for ranks in range(1, 260):
            self.assertEqual(libdcp.cp_sizes(ranks, cp_sizes="megatron"),
                             M.hybrid_cp_sizes(ranks), f"{ranks} ranks")

    def test_map_and_refusals(self):
        s = M.settings_for(Config(sequence_parallel=True, tensor_model_parallel_size=4), 16)
        self.assertEqual((s.ranks, s.max_tokens_per_rank, s.max_cp, s.sync_ranks),
                         (16, 4096, 16, 1))
        self.assertEqual(s.planner["pad_multiple"], 4)
        config = M.settings_for(Config(), 48).plan_config()  # max_cp: the whole pool
        self.assertEqual((config["max_cp"], config["cp_sizes"], config["cover_ranks"]),
                         (48, "megatron", True))
        self.assertEqual(M.settings_for(Config(), 48, max_cp=16, min_cp=2).max_cp, 16)
        refusals = {
            "pipeline_model_parallel_size=2": (Config(pipeline_model_parallel_size=2), 8, {}),
            "calculate_per_token_loss=False": (Config(calculate_per_token_loss=False), 8, {}),
            "even number of ranks": (Config(), 7, {}),
            "max_cp=8: Megatron builds CP groups of sizes 1, 2, 4, 12 on 12 ranks": (
                Config(), 12, {"max_cp": 8}),
            "min_cp=32": (Config(), 48, {"min_cp": 32}),
            "cover_ranks=False": (Config(), 8, {"cover_ranks": False}),
            "cp_sizes='pow2'": (Config(), 8, {"cp_sizes": "pow2"}),
        }
        for text, (config, ranks, extra) in refusals.items():
            with self.subTest(text):
                with self.assertRaises(libdcp.UnsupportedError) as caught:
                    M.settings_for(config, ranks, **extra)
                self.assertIn(text, str(caught.exception))
        with self.assertRaises(TypeError):
            M.settings_for(Config(max_seqlen_per_dp_cp_rank=True), 8)
        with self.assertRaises(ValueError) as caught:
            M.settings_for(Config(max_seqlen_per_dp_cp_rank=0), 8)
        self.assertIn("max_seqlen_per_dp_cp_rank", str(caught.exception))


class Pool48Ranks(unittest.TestCase):
    """Issue 34's reproducers: batches Megatron's scheduler runs that the power-of-two planner
    refused (a sample needing the whole non-power-of-two pool; a rank left empty)."""

    def schedule(self, lengths, ranks, tokens):
        scheduler = M.LibdcpCPScheduler(tokens, Pool(ranks))
        groups = scheduler.get_groups_and_subsamples(list(enumerate(lengths)))[1]
        M.check_sample_id_groups(groups, range(len(lengths)), ranks)
        return groups

    def test_a_sample_on_the_whole_pool_of_48(self):
        groups = self.schedule([59599], 48, 2048)  # 59,599 / 2,048 > 16 ranks: all 48
        self.assertEqual(groups, [[[0]] * 48])

    def test_as_many_samples_as_ranks_cover_every_rank(self):
        """Megatron returns [[5],[5],[1],[3],[0],[4],[6],[7,2]]; the power-of-two planner
        left rank 2 empty."""
        groups = self.schedule([327, 673, 146, 535, 274, 1072, 203, 174], 8, 1000)
        self.assertTrue(all(groups[-1]))

    def test_fewer_samples_than_ranks(self):
        rng = random.Random(SEED + 5)
        for _ in range(40):
            ranks = rng.choice([2, 6, 8, 12, 24, 48, 96, 128])
            lengths = [rng.randint(1, 3000) for _ in range(rng.randint(1, ranks))]
            with self.subTest(ranks=ranks, lengths=lengths):
                self.schedule(lengths, ranks, 2048)

    def test_a_lowered_max_cp_that_cannot_cover_is_an_input_error(self):
        scheduler = M.LibdcpCPScheduler(4096, Pool(8), max_cp=4)
        with self.assertRaises(M.ScheduleInputError) as caught:
            scheduler.get_groups_and_subsamples([(9, 100)])
        self.assertIn("max_cp=4 set in use_libdcp", str(caught.exception))


class Scheduler(unittest.TestCase):
    def setUp(self):
        rng = random.Random(SEED + 7)
        self.lengths = random_batch(rng, 8, 4096)
        self.ids = rng.sample(range(1000, 9000), len(self.lengths))  # ids are not positions
        self.pairs = list(zip(self.ids, self.lengths))

    def test_interface_of_balanced_cp_scheduler(self):
        scheduler = M.LibdcpCPScheduler(4096, Pool(8))
        groups, sample_id_groups = scheduler.get_groups_and_subsamples(self.pairs, None)
        M.check_sample_id_groups(sample_id_groups, self.ids, 8)
        length_of = dict(self.pairs)
        self.assertEqual(groups, [[[length_of[s] for s in items] for items in group]
                                  for group in sample_id_groups])
        self.assertEqual(scheduler.total_hdp_gpus, 8)
        self.assertEqual(scheduler.gpus_needed(4096), 1)
        self.assertEqual(scheduler.gpus_needed(4097), 2)
        self.assertGreater(scheduler.get_total_workload(8192),
                           scheduler.get_total_workload(8192, 4))
        tokens = scheduler.last_tokens
        self.assertEqual(tokens.global_tokens, sum(self.lengths))
        self.assertEqual(sum(tokens.rank_tokens(r) for r in range(8)), sum(self.lengths))

    def test_plan_step_is_megatrons_execution(self):
        """With the ring charged per sample (the scheduler's default) the plan's own step is
        the step of Megatron's execution of its groups (one forward, one ring, per sub-sample),
        over random batches and pools; charged per group the plan undercounts the rings."""
        rng = random.Random(SEED + 11)
        for _ in range(20):
            ranks = rng.choice([8, 16, 64])
            lengths = random_batch(rng, ranks, 4096)
            pairs = list(enumerate(lengths))
            cost = libdcp.SampleCost(ranks, 4096)
            for charge in ("sample", "group"):
                scheduler = M.LibdcpCPScheduler(4096, Pool(ranks), ring_charge=charge)
                groups = scheduler.get_groups_and_subsamples(pairs)[1]
                executed = M.execute(groups, dict(pairs), cost).step_seconds
                planned = scheduler.last_plan.step_seconds
                if charge == "sample":
                    self.assertAlmostEqual(planned / executed, 1.0, places=9)
                else:
                    self.assertLessEqual(planned, executed * (1 + 1e-9))

    def test_ring_charge_is_validated(self):
        self.assertEqual(M.settings_for(Config(), 8).planner["ring_charge"], "sample")
        with self.assertRaises(ValueError) as caught:
            libdcp.plan([100, 200], 2, 4096, ring_charge="forward")
        self.assertIn("ring_charge must be one of 'group', 'sample', got 'forward'",
                      str(caught.exception))
        with self.assertRaises(TypeError) as caught:  # by name only, as strategy
            libdcp.plan([100, 200], 2, 4096, ring_charge=7)
        self.assertIn("ring_charge must be one of 'group', 'sample' (by name), got int 7",
                      str(caught.exception))

    def test_bad_input_names_the_sample_and_the_rank(self):
        scheduler = M.LibdcpCPScheduler(4096, Pool(8, rank=5))
        for bad, text in ((0, "has length 0"), (8 * 4096 + 1, "> max_cp 8"),
                          (8 * 4096 + 1, "Megatron's scheduler cannot run it either")):
            pairs = list(self.pairs)
            pairs[3] = (self.ids[3], bad)
            with self.subTest(bad=bad):
                with self.assertRaises(M.ScheduleInputError) as caught:
                    scheduler.get_groups_and_subsamples(pairs, None)
                message = str(caught.exception)
                self.assertIn(f"sample {self.ids[3]} (in DP x CP rank 5's view)", message)
                self.assertIn(text, message)
                self.assertEqual(caught.exception.sample, self.ids[3])
        scheduler.source_rank = lambda sample: 3
        pairs = list(self.pairs)
        pairs[2] = (self.ids[2], 0)
        with self.assertRaises(M.ScheduleInputError) as caught:
            scheduler.get_groups_and_subsamples(pairs, None)
        self.assertIn("loaded by DP x CP rank 3", str(caught.exception))
        self.assertEqual(caught.exception.rank, 3)
        with self.assertRaises(M.ScheduleInputError):
            scheduler.get_groups_and_subsamples(self.pairs + [self.pairs[0]], None)
        with self.assertRaises(M.ScheduleInputError) as caught:
            scheduler.get_groups_and_subsamples([], None)
        self.assertIn("the batch is empty", str(caught.exception))
        for bad in ((1, 100.0), (True, 100), ("1", 100), (1,)):
            with self.assertRaises(TypeError) as caught:
                scheduler.get_groups_and_subsamples(self.pairs + [bad], None)
            self.assertIn(f"sample_id_seqlens[{len(self.pairs)}]", str(caught.exception))

    def test_disagreeing_views_name_the_sample_and_the_rank(self):
        views = [list(self.pairs) for _ in range(4)]
        self.assertIsNone(M.first_disagreement(views))
        views[2][5] = (views[2][5][0], views[2][5][1] + 16)
        error = M.first_disagreement(views)
        self.assertEqual((error.sample, error.rank), (5, 2))
        self.assertIn("sample 5", str(error))
        views[3] = views[3][:-1]
        self.assertNotEqual(M.batch_digest(views[0]), M.batch_digest(views[3]))

    def test_install_and_restore(self):
        class Wrapper:  # what install_into reads of HybridCPDataLoaderWrapper
            def __init__(self):
                self.config, self.dp_cp_group = Config(), Pool(8)
                self.cp_balancing_scheduler = "megatron's"

            def get_global_seqlens(self, seqlens):
                return seqlens, [0]
        original = Wrapper.__init__
        with M.Installation(Wrapper, {"max_cp": 4}):
            scheduler = Wrapper().cp_balancing_scheduler
            self.assertIsInstance(scheduler, M.LibdcpCPScheduler)
            self.assertEqual(scheduler.settings.max_cp, 4)
        self.assertIs(Wrapper.__init__, original)
        self.assertEqual(Wrapper().cp_balancing_scheduler, "megatron's")


class Releases(unittest.TestCase):
    ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

    def test_each_release_has_its_pinned_requirements(self):
        for version, release in M.RELEASES.items():
            with open(os.path.join(self.ROOT, release.requirements)) as f:
                pins = [line.strip() for line in f if line.startswith("megatron-core")]
            self.assertEqual(pins, [f"megatron-core=={version}"])

    @unittest.skipIf(M.installed_release() is not None, "Megatron-Core is installed here")
    def test_use_libdcp_without_megatron_says_what_to_install(self):
        with self.assertRaises(ImportError) as caught:
            M.use_libdcp()
        self.assertIn("pip install megatron-core==", str(caught.exception))
        self.assertIsNotNone(caught.exception.__cause__)


class TokensAndExecution(unittest.TestCase):
    def test_local_shares_partition_every_sample(self):
        rng = random.Random(SEED + 3)
        for _ in range(300):
            length, cp = rng.randint(1, 5000), rng.choice([1, 2, 4, 8, 16])
            shares = [M.local_valid_tokens(length, cp, r) for r in range(cp)]
            self.assertEqual(sum(shares), length)
            self.assertLessEqual(max(shares) - min(shares), -(-length // (2 * cp)) * 2)

    def test_execute_by_hand(self):
        """r0 runs [a, b], r1 [c, a]; a (4 tokens) on both, cost L / c: c 0-3 on r1, a 3-5,
        b 5-7 on r0: step 7, busy 3 + 2 x 2 + 2 = 9 of 14."""
        stats = M.execute([[["a", "b"], ["c", "a"]]], {"a": 4, "b": 2, "c": 3},
                          lambda length, cp: length / cp)
        self.assertEqual((stats.step_seconds, stats.forwards, stats.max_rank_forwards), (7, 4, 2))
        self.assertAlmostEqual(stats.idle_fraction, 1 - 9 / 14)
        barrier = M.execute([[["a"], ["a"]], [["b"], ["c"]]], {"a": 4, "b": 2, "c": 3},
                            lambda length, cp: length / cp)
        self.assertEqual(barrier.step_seconds, 5)  # a 0-2, barrier, c 2-5
        with self.assertRaises(M.ScheduleError):
            M.execute([[["a", "b"], ["b", "a"]]], {"a": 1, "b": 1}, lambda n, c: 1.0)


if __name__ == "__main__":
    unittest.main()
