"""libdcp.megatron inside the real megatron-core (each release of libdcp.megatron.RELEASES,
pinned in its requirements file; `make test-megatron` installs each in its own virtual
environment and runs this file under each).

Megatron's own HybridCPDataLoaderWrapper.__next__ and hybrid_context_parallel_forward_backward
run on 4 and 8 CPU processes (gloo; what megatron_worker.py patches is said there), with
Megatron's scheduler and with libdcp's on the same batches. Checked for both: every rank
receives exactly the sub-samples its lists name, whole and in order, the union is the batch
with nothing lost or duplicated, and Megatron's schedule runs each at the CP size and on the CP
group it was given; for libdcp also the checks of check_sample_id_groups, that the lists are the
plan's, and the token counts. Bad input (a sample too long, a zero length, ranks that disagree)
raises the same clear error on every rank, within a timeout (never a hang). Real collectives:
at 8 and 16 ranks, 100 batches each scheduled by libdcp and run by Megatron's schedule with its
own forward_step / backward_step, the stub forward all-gathering the sub-sample's id over the
holders' communicator: every rank finishes, none waits past the gloo timeout, and the holders
of every sub-sample gather the same id.
"""
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from libdcp import megatron as M  # noqa: E402

WORKER = os.path.join(HERE, "megatron_worker.py")
PACKAGE = os.path.join(HERE, "..")
SEED = int(os.environ.get("DCP_TEST_SEED", "1"))
WORLD_SIZES = (4, 8)
COLLECTIVE_WORLD_SIZES = (8, 16)
TIMEOUT_SECONDS = 300  # a hang fails the test instead of stopping `make test-megatron`


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(world, case):
    """Runs the worker, which forks `world` ranks; returns each rank's JSON result. A run past
    TIMEOUT_SECONDS is killed (its whole process group) and fails."""
    out = tempfile.mkdtemp(prefix=f"dcp-megatron-{case}-{world}-")
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, WORKER, str(world), str(free_port()), out, case,
                             str(SEED)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        log = proc.communicate(timeout=TIMEOUT_SECONDS)[0].decode(errors="replace")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log = proc.communicate()[0].decode(errors="replace")
        raise AssertionError(f"{case} on {world} ranks ran past {TIMEOUT_SECONDS} s (a hang); "
                             f"its log:\n{log[-3000:]}")
    print(f"{case} on {world} ranks: {time.perf_counter() - started:.1f} s")
    results = []
    for r in range(world):
        path = os.path.join(out, f"rank{r}.json")
        if not os.path.isfile(path):
            raise AssertionError(f"rank {r} wrote no result; the log:\n{log[-3000:]}")
        with open(path) as f:
            results.append(json.load(f))
        if isinstance(results[-1], dict) and "crash" in results[-1]:
            raise AssertionError(f"rank {r} crashed:\n{results[-1]['crash']}")
    return results


class RealWrapperRoutes(unittest.TestCase):
    """Both schedulers through Megatron's wrapper and schedule, at 4 and 8 ranks."""

    def check_routing(self, world, per_rank, name, batch):
        entries = [ranks_view[batch][name] for ranks_view in per_rank]
        groups = entries[0]["groups"]
        for r, e in enumerate(entries):
            self.assertEqual(e["groups"], groups, f"{name}: rank {r}'s sample_id_groups differ")
        loaded = {int(tag): n for ranks_view in per_rank
                  for tag, n in ranks_view[batch]["loaded"].items()}
        origin_of = {}
        for r, e in enumerate(entries):
            mine = {s for group in groups for s in group[r]}
            self.assertEqual(set(map(int, e["routed"])), mine,
                             f"{name}: rank {r} received other sub-samples than its lists")
            for gid, (tag, n, in_order, one_origin) in e["routed"].items():
                self.assertTrue(in_order and one_origin, f"{name}: sample {gid} broken on {r}")
                self.assertEqual(origin_of.setdefault(int(gid), tag), tag)
                self.assertEqual(n, loaded[tag], f"{name}: sample {gid} length on rank {r}")
        self.assertEqual(sorted(origin_of.values()), sorted(loaded),
                         f"{name}: the routed samples are not the batch")
        for r, e in enumerate(entries):
            expected = []
            for group in groups:
                holders = M._holders(group)
                expected += [[origin_of[s], len(holders[s]), holders[s]] for s in group[r]]
            self.assertEqual(e["run"], expected, f"{name}: rank {r} ran another schedule")
        return groups, origin_of, loaded

    def check_plan(self, world, entry, groups, loaded, origin_of):
        M.check_sample_id_groups(groups, list(origin_of), world)
        lists = [[] for _ in range(world)]
        for microbatch in entry["plan"]:
            for first, cp, ids in microbatch:
                for r in range(first, first + cp):
                    lists[r] += ids
        merged = [[s for group in groups for s in group[r]] for r in range(world)]
        self.assertEqual(merged, lists, "the lists are not the plan's, rank by rank")
        global_tokens, per_group = entry["tokens"]
        self.assertEqual(global_tokens, sum(loaded.values()))
        self.assertEqual(sum(map(sum, per_group)), global_tokens)

    def test_routes_at_4_and_8_ranks(self):
        for world in WORLD_SIZES:
            with self.subTest(world=world):
                per_rank = launch(world, "route")
                for batch in range(len(per_rank[0])):
                    for name in ("megatron", "libdcp"):
                        groups, origin_of, loaded = self.check_routing(world, per_rank, name,
                                                                       batch)
                    self.assertEqual(per_rank[0][batch]["libdcp"]["scheduler"],
                                     "LibdcpCPScheduler")
                    self.assertEqual(per_rank[0][batch]["megatron"]["scheduler"],
                                     "BalancedCPScheduler")
                    self.check_plan(world, per_rank[0][batch]["libdcp"], groups, loaded,
                                    origin_of)


class RealBadInput(unittest.TestCase):
    """Every rank raises the same ScheduleInputError naming the sample and the rank."""

    def test_bad_input_errors_on_every_rank(self):
        world = WORLD_SIZES[0]
        per_rank = launch(world, "bad")
        expected = {"too-long": (5, "sample 5 (in DP x CP rank"),
                    "zero": (3, "sample 3 (in DP x CP rank"),
                    "disagree": (7, "sample 7 is (id, length) (7, "),
                    "too-long-loaded": (None, "(loaded by DP x CP rank 1): has length")}
        for case, (sample, text) in expected.items():
            for r, result in enumerate(per_rank):
                got = result[case]
                self.assertEqual(got["type"], "ScheduleInputError", f"{case} on rank {r}: {got}")
                self.assertIn(text, got["message"], f"{case} on rank {r}")
                if sample is not None:
                    self.assertEqual(got["sample"], sample)
            if case == "disagree":
                self.assertIn(f"on rank {world - 1}", per_rank[0][case]["message"])
        self.assertEqual({result["too-long-loaded"]["rank"] for result in per_rank}, {1})


class RealCollectives(unittest.TestCase):
    """libdcp's single barrier-free group relies on the holders of each sub-sample reaching it
    in one order on overlapping communicators: here every forward blocks on an all-gather over
    its holders' communicator, so a wrong order is a gloo timeout or a mismatched id."""

    def test_holders_meet_every_sub_sample_at_8_and_16_ranks(self):
        release = M.RELEASES[M.installed_release()]
        for world in COLLECTIVE_WORLD_SIZES:
            with self.subTest(world=world):
                per_rank = launch(world, "collectives")
                batches = len(per_rank[0])
                self.assertGreaterEqual(batches, 100)
                forwards = 0
                for b in range(batches):
                    groups = per_rank[0][b]["groups"]
                    pairs = per_rank[0][b]["pairs"]
                    M.check_sample_id_groups(groups, [s for s, _ in pairs], world)
                    for r in range(world):
                        self.assertEqual(per_rank[r][b]["groups"], groups, f"batch {b}")
                        wanted = [s for g in groups for s in g[r]]
                        ran = per_rank[r][b]["forwards"]
                        self.assertEqual([f[0] for f in ran], wanted,
                                         f"batch {b}: rank {r} ran another list")
                        for sample, cp, cp_group_size, ranks, ids in ran:
                            holders = M._holders(next(g for g in groups if sample in g[r]))
                            self.assertEqual(ranks, holders[sample] if cp > 1 else [r])
                            self.assertEqual(ids, [sample] * cp,
                                             f"batch {b}: sample {sample}'s holders disagree")
                            expected = cp if release.forward_step_cp_group_size else None
                            self.assertEqual(cp_group_size, expected)
                        forwards += len(ran)
                print(f"{world} ranks: {batches} batches, {forwards} forwards, each "
                      f"all-gathered over its holders")


if __name__ == "__main__":
    unittest.main()
