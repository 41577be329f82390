"""libdcp.megatron inside the real megatron-core (pinned in python/tests/megatron-requirements.txt;
`make test-megatron` installs it in build/venv-megatron and runs this file).

Megatron's own HybridCPDataLoaderWrapper.__next__ and hybrid_context_parallel_forward_backward
run on 4 and 8 CPU processes (gloo; what megatron_worker.py patches is said there), with
Megatron's scheduler and with libdcp's on the same batches. Checked for both: every rank
receives exactly the sub-samples its lists name, whole and in order, the union is the batch
with nothing lost or duplicated, and Megatron's schedule runs each at the CP size and on the CP
group it was given; for libdcp also the checks of check_sample_id_groups, that the lists are the
plan's, and the token counts. Bad input (a sample too long, a zero length, ranks that disagree)
raises the same clear error on every rank, within a timeout (never a hang). Also here because
they need torch or pip and PyPI: the per-token loss example, and the package built by
`pip install ./python` and `pip wheel ./python` in fresh virtual environments.
"""
import glob
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from libdcp import megatron as M  # noqa: E402

WORKER = os.path.join(HERE, "megatron_worker.py")
PACKAGE = os.path.join(HERE, "..")
EXAMPLE = os.path.join(PACKAGE, "examples", "megatron_per_token_loss.py")
SEED = int(os.environ.get("DCP_TEST_SEED", "1"))
WORLD_SIZES = (4, 8)
TIMEOUT_SECONDS = 300  # a hang fails the test instead of stopping `make test-megatron`


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(world, case):
    """Runs `world` worker processes; returns each rank's JSON result."""
    out = tempfile.mkdtemp(prefix=f"dcp-megatron-{case}-{world}-")
    port = str(free_port())
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    procs = [subprocess.Popen([sys.executable, WORKER, str(r), str(world), port, out, case,
                               str(SEED)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT) for r in range(world)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=TIMEOUT_SECONDS)[0].decode(errors="replace"))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    results = []
    for r in range(world):
        path = os.path.join(out, f"rank{r}.json")
        if not os.path.isfile(path):
            raise AssertionError(f"rank {r} wrote no result; its log:\n{logs[r][-3000:]}")
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


class PerTokenLoss(unittest.TestCase):
    def test_example_matches_the_run_without_cp(self):
        for ranks in (4, 8):
            env = dict(os.environ, PYTHONPATH=PACKAGE)
            done = subprocess.run([sys.executable, EXAMPLE, "--ranks", str(ranks), "--seed",
                                   str(SEED)], capture_output=True, text=True, env=env)
            print(done.stdout, end="")
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)


def fresh_venv(where):
    """A new virtual environment (base interpreter, nothing of this one's packages)."""
    subprocess.run([sys.executable, "-m", "venv", where], check=True)
    return os.path.join(where, "bin", "python")


class Packaging(unittest.TestCase):
    """pip builds libdcp.so and the dcp-plan program itself; the wheel works where the
    repository is not; the installed `dcp-plan` command and `python -m libdcp` are the C CLI
    (build/dcp-plan) byte for byte, a failing run included."""
    PROBE = ("import libdcp; p = libdcp.plan([100, 5000, 3000], ranks=4, "
             "max_tokens_per_rank=2048); print(libdcp.library_path(), p.num_microbatches)")
    CLI = os.path.normpath(os.path.join(HERE, "..", "..", "build", "dcp-plan"))
    POOL = ["--ranks", "8", "--max-tokens-per-rank", "8192"]
    CLI_RUNS = (["--lognormal", "4096,1.1,1024,30000,48"] + POOL,
                ["--lognormal", "4096,1.1,1024,30000,48", "--json"] + POOL,
                ["--lognormal", "4096,1.1,1024,30000,48", "--rank", "3", "--microbatch", "0"]
                + POOL,
                ["--version"],
                ["--lognormal", "4096,1.1,1024,8192,0"] + POOL,        # exit 2, one line
                ["--lognormal", "4096,1.1,1024,90000,8", "--ranks", "2",
                 "--max-tokens-per-rank", "1024"])                    # exit 1: no plan

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="dcp-package-")
        # the installed package must not find the checkout's library or sources
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("DCP_LIBRARY", "PYTHONPATH", "DCP_BUILD_DIR", "DCP_PLAN")}

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def probe(self, python):
        done = subprocess.run([python, "-c", self.PROBE], cwd=self.work, env=self.env,
                              capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        path, _ = done.stdout.split()
        self.assertTrue(path.startswith(self.work), f"library from {path}, not the venv")
        self.assertEqual(os.path.basename(os.path.dirname(path)), "_native")
        self.same_as_the_c_cli(python)

    def same_as_the_c_cli(self, python):
        def outcome(command):
            done = subprocess.run(command, cwd=self.work, env=self.env, capture_output=True)
            # the planner's wall time is the one figure that differs between runs
            out = re.sub(rb'"plan_seconds":[^,}]*|  plan time .*', b"", done.stdout)
            return done.returncode, out, done.stderr
        script = os.path.join(os.path.dirname(python), "dcp-plan")
        codes = set()
        for arguments in self.CLI_RUNS:
            want = outcome([self.CLI] + arguments)
            codes.add(want[0])
            self.assertEqual(outcome([script] + arguments), want, arguments)
            self.assertEqual(outcome([python, "-m", "libdcp"] + arguments), want, arguments)
        self.assertEqual(codes, {0, 1, 2})

    def test_pip_install_builds_the_library(self):
        python = fresh_venv(os.path.join(self.work, "install"))
        subprocess.run([python, "-m", "pip", "install", "-q", PACKAGE], check=True,
                       env=self.env)
        self.probe(python)

    def test_wheel_installs_without_the_repository(self):
        python = fresh_venv(os.path.join(self.work, "build"))
        wheels = os.path.join(self.work, "wheels")
        subprocess.run([python, "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheels, PACKAGE],
                       check=True, env=self.env)
        (wheel,) = glob.glob(os.path.join(wheels, "libdcp-*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            names = archive.namelist()
            metadata = archive.read(next(n for n in names if n.endswith("METADATA"))).decode()
        self.assertIn("libdcp/_native/libdcp.so", names)
        self.assertIn("libdcp/py.typed", names)
        self.assertNotIn("libdcp/libdcp.so", names)  # help(libdcp) would list it as a module
        with zipfile.ZipFile(wheel) as archive:
            mode = archive.getinfo("libdcp/_native/dcp-plan").external_attr >> 16
        self.assertTrue(mode & stat.S_IXUSR, f"dcp-plan in the wheel has mode {oct(mode)}")
        self.assertIn("Provides-Extra: torch", metadata)
        self.assertIn('Requires-Dist: torch>=2.4; extra == "torch"', metadata)
        alone = os.path.join(self.work, "elsewhere")
        os.makedirs(alone)
        copied = shutil.copy(wheel, alone)
        python = fresh_venv(os.path.join(self.work, "user"))
        subprocess.run([python, "-m", "pip", "install", "-q", copied], check=True,
                       env=self.env)
        self.probe(python)


if __name__ == "__main__":
    unittest.main()
