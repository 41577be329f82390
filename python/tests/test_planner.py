"""The planner binding against the C library and its CLI (standard library only)."""
import array
import ctypes
import json
import os
import random
import subprocess
import tempfile
import unittest
import xml.dom.minidom

import libdcp
from libdcp import _library, _structs

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILD = os.environ.get("DCP_BUILD", os.path.join(REPO, "build"))
CLI = os.path.join(BUILD, "dcp-plan")  # make build/dcp-plan
LAYOUT = os.path.join(BUILD, "dcp-struct-layout")
SEED = 20261123  # fixed; printed by the tests that draw from it


def cli_json(lengths_path, *args):
    out = subprocess.run([CLI, "--lengths", lengths_path, "--json", *map(str, args)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def write_lengths(lengths):
    handle = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    handle.write("".join(f"{n}\n" for n in lengths))
    handle.close()
    return handle.name


def groups_as_json(plan):
    return [[{"first_rank": g.first_rank, "cp": g.cp, "samples": list(g.samples)} for g in mb]
            for mb in plan.microbatches]


class StructLayout(unittest.TestCase):
    """Every ctypes mirror has the C compiler's size and field offsets."""

    def test_sizes_and_offsets_match_c(self):
        self.assertTrue(os.path.isfile(LAYOUT), f"{LAYOUT} is missing: make build/dcp-struct-layout")
        tables = {"size": {}, "offset": {}, "constant": {}}
        for line in subprocess.run([LAYOUT], check=True, capture_output=True,
                                   text=True).stdout.splitlines():
            kind, name, value = line.split()
            tables[kind][name] = int(value)
        sizes, offsets, constants = tables["size"], tables["offset"], tables["constant"]
        for name, value in _structs.CONSTANTS.items():
            self.assertEqual(value, constants[name], name)
        version = tuple(constants[f"DCP_VERSION_{part}"] for part in ("MAJOR", "MINOR", "PATCH"))
        self.assertEqual(libdcp.__version__, "%d.%d.%d" % version)
        self.assertEqual(set(sizes), set(_structs.MIRRORS))
        for c_name, mirror in _structs.MIRRORS.items():
            self.assertEqual(ctypes.sizeof(mirror), sizes[c_name], f"sizeof {c_name}")
            c_fields = {k.split(".", 1)[1]: v for k, v in offsets.items()
                        if k.split(".", 1)[0] == c_name}
            py_fields = {name: getattr(mirror, name).offset for name, _ in mirror._fields_}
            self.assertEqual(py_fields, c_fields, f"fields of {c_name}")


class Signatures(unittest.TestCase):
    def test_every_function_the_package_calls_is_declared(self):
        """ctypes passes an undeclared pointer argument as a C int: every name given to call()
        or raw() in python/libdcp must have its signature in _library."""
        import re
        package = os.path.dirname(libdcp.__file__)
        declared = set(_library.SIGNATURES) | set(_library.CUDA_SIGNATURES)
        used = set()
        for name in os.listdir(package):
            if name.endswith(".py"):
                with open(os.path.join(package, name)) as f:
                    used |= set(re.findall(r'(?:call|raw)\(\s*"(dcp_\w+)"', f.read()))
        self.assertGreater(len(used), 30)
        self.assertEqual(used - declared, set())


class PlanAgainstCli(unittest.TestCase):
    """libdcp.plan gives the plan and figures build/dcp-plan prints for the same input."""

    def setUp(self):
        print(f"seed {SEED}")
        self.lengths = libdcp.lognormal_lengths(4096, 1.1, 256, 16384, 96, seed=SEED)
        self.path = write_lengths(self.lengths)

    def tearDown(self):
        os.unlink(self.path)

    def check(self, cli_args, **config):
        expected = cli_json(self.path, *cli_args)
        plan = libdcp.plan(self.lengths, ranks=expected["config"]["ranks"],
                           max_tokens_per_rank=expected["config"]["max_tokens_per_rank"], **config)
        self.assertEqual(groups_as_json(plan), [[{k: g[k] for k in ("first_rank", "cp", "samples")}
                                                  for g in mb] for mb in expected["microbatches"]])
        self.assertEqual(plan.config, expected["config"])
        self.assertEqual(plan.num_samples, expected["samples"])
        self.assertEqual(plan.sample_lengths, tuple(expected["sample_lengths"]))
        for key in ("step_seconds", "dag_seconds", "barrier_seconds", "lower_bound_seconds",
                    "dag_lower_bound_seconds", "barrier_lower_bound_seconds"):
            self.assertAlmostEqual(getattr(plan.stats, key) / expected[key], 1.0, places=7, msg=key)
        for key in ("efficiency", "dag_efficiency", "barrier_efficiency"):
            self.assertAlmostEqual(getattr(plan.stats, key), expected[key], places=5, msg=key)
        self.assertEqual(plan.stats.sync_ranks, expected["sync_ranks"])
        self.assertEqual({str(c): n for c, n in plan.stats.samples_per_cp.items()},
                         expected["cp_histogram"])
        times = [(g["start_seconds"], g["end_seconds"]) for mb in expected["microbatches"]
                 for g in mb]
        for (start, end), (want_start, want_end) in zip(plan.schedule(), times):
            self.assertAlmostEqual(start, want_start, delta=1e-8 * want_start)
            self.assertAlmostEqual(end, want_end, delta=1e-8 * want_end)
        return plan

    def test_default_config(self):
        plan = self.check(["--ranks", 16, "--max-tokens-per-rank", 4096])
        self.assertEqual(plan.sample_lengths, tuple(self.lengths))
        self.assertLessEqual(plan.lower_bound_seconds, plan.step_seconds)

    def test_config_fields_by_c_name(self):
        self.check(["--ranks", 8, "--max-tokens-per-rank", 8192, "--min-cp", 2, "--max-cp", 4,
                    "--microbatch-multiple", 2, "--strategy", "greedy"],
                   min_cp=2, max_cp=4, microbatch_multiple=2, strategy="greedy")
        self.check(["--ranks", 8, "--max-tokens-per-rank", 8192, "--strategy", "static"],
                   strategy="static")

    def test_svg_matches_the_cli(self):
        """One drawing for both front ends: the CLI's --svg file is Plan.svg() byte for byte."""
        handle, path = tempfile.mkstemp(suffix=".svg")
        os.close(handle)
        try:
            subprocess.run([CLI, "--lengths", self.path, "--ranks", "16",
                            "--max-tokens-per-rank", "4096", "--svg", path], check=True,
                           capture_output=True)
            with open(path) as f:
                drawn = f.read()
        finally:
            os.unlink(path)
        plan = libdcp.plan(self.lengths, ranks=16, max_tokens_per_rank=4096)
        self.assertEqual(plan.svg(), drawn)

    def test_cost_model(self):
        self.check(["--ranks", 8, "--max-tokens-per-rank", 8192, "--attn-coeff", 1e-10,
                    "--linear-coeff", 2e-6, "--ring-step-cost", 1e-4],
                   cost={"attn_coeff": 1e-10, "linear_coeff": 2e-6, "ring_step_cost": 1e-4})


class PlanStructure(unittest.TestCase):
    def setUp(self):
        self.lengths = libdcp.lognormal_lengths(2048, 1.0, 64, 8192, 40, seed=SEED + 1)
        self.plan = libdcp.plan(self.lengths, ranks=8, max_tokens_per_rank=4096, pad_multiple=8)

    def test_every_sample_once_in_aligned_groups(self):
        seen = []
        for groups in self.plan.microbatches:
            used = set()
            for g in groups:
                self.assertEqual(g.first_rank % g.cp, 0)
                ranks = set(range(g.first_rank, g.first_rank + g.cp))
                self.assertFalse(used & ranks)
                used |= ranks
                seen += g.samples
        self.assertEqual(sorted(seen), list(range(len(self.lengths))))
        for s, (k, first, cp) in enumerate(self.plan.samples):
            self.assertIn(s, next(g for g in self.plan.microbatches[k]
                                  if g.first_rank == first and g.cp == cp).samples)
        self.plan.validate()

    def test_resolved_config_and_defaults(self):
        config = self.plan.config
        self.assertEqual(config["pad_multiple"], 8)
        self.assertEqual(config["max_cp"], 8)
        self.assertEqual(config["cost"]["attn_coeff"], 2.048e-11)  # DCP_DEFAULT_ATTN_COEFF
        self.assertEqual(libdcp.resolve_config(8, 4096), {**config, "pad_multiple": 1})
        self.assertEqual(set(libdcp.CONFIG_FIELDS) - set(config), set())

    def test_stats_and_flops(self):
        stats, flops = self.plan.stats, self.plan.flops_stats
        self.assertEqual(stats.valid_tokens, sum(self.lengths))
        self.assertEqual(flops.valid_tokens, sum(self.lengths))
        self.assertEqual(flops.sum_squared_valid, sum(n * n for n in self.lengths))
        self.assertEqual(sum(stats.samples_per_cp.values()), len(self.lengths))
        self.assertEqual(len(self.plan.schedule()), len(self.plan.groups))
        self.assertTrue(0 < stats.efficiency <= 1)
        self.assertIs(self.plan.flops_stats, flops)  # a property, computed once like stats

    def test_step_time_under_any_sync_model(self):
        """Plan.step_time(E) is dcp_plan_step_time: E = 1 and E = D are the stats' DAG and
        barrier figures, 0 the plan's own E; E must divide the pool."""
        stats = self.plan.stats
        self.assertEqual(stats.sync_ranks, 8)
        self.assertEqual(self.plan.step_time(1), stats.dag_seconds)
        self.assertEqual(self.plan.step_time(8), stats.barrier_seconds)
        self.assertEqual(self.plan.step_time(0), stats.step_seconds)
        self.assertLessEqual(stats.dag_seconds, self.plan.step_time(2) * (1 + 1e-12))
        self.assertLessEqual(self.plan.step_time(2), stats.barrier_seconds * (1 + 1e-12))
        self.assertAlmostEqual(stats.dag_efficiency,
                               stats.dag_lower_bound_seconds / stats.dag_seconds)
        with self.assertRaises(libdcp.InvalidArgumentError) as caught:
            self.plan.step_time(3)
        self.assertIn("sync_ranks", caught.exception.message)
        with self.assertRaises(TypeError):
            self.plan.step_time(2.0)

    def test_enums_by_name_and_short_reprs(self):
        self.assertEqual(self.plan.config["strategy"], "dynamic")
        self.assertEqual(self.plan.strategy, "dynamic")
        self.assertEqual(libdcp.resolve_config(8, 4096, strategy="greedy")["strategy"], "greedy")
        self.assertEqual(libdcp.plan(self.lengths, 8, 4096, strategy="static").strategy, "static")
        many = libdcp.plan([10] * 5000, ranks=1, max_tokens_per_rank=100000)
        view = many.rank_view(0, 0)
        for text in (repr(view), repr(many.groups[0]), repr(many), repr(view.runs[0])):
            self.assertLess(len(text), 200, text)
        self.assertIn("5000 in all", repr(view))
        self.assertIn("rank 0, microbatch 0: ranks 0-0 (cp 1)", repr(view))

    def test_bytes_round_trip(self):
        data = self.plan.to_bytes()
        again = libdcp.Plan.from_bytes(data)
        self.assertEqual(again.microbatches, self.plan.microbatches)
        self.assertEqual(again.sample_lengths, self.plan.sample_lengths)
        self.assertEqual(again.config, self.plan.config)
        self.assertEqual(again.stats, self.plan.stats)
        self.assertEqual(again.to_bytes(), data)

    def test_corrupt_bytes_raise_with_the_c_message(self):
        data = bytearray(self.plan.to_bytes())
        data[len(data) // 2] ^= 0xFF
        with self.assertRaises(libdcp.CorruptDataError) as caught:
            libdcp.Plan.from_bytes(bytes(data))
        self.assertIn("checksum", caught.exception.message)
        with self.assertRaises(libdcp.CorruptDataError):
            libdcp.Plan.from_bytes(self.plan.to_bytes()[:20])

    def test_svg(self):
        """Plan.svg() is dcp_plan_svg: well-formed, a hover title per group naming its
        samples, per microbatch end, and the lower bound."""
        svg = self.plan.svg()
        document = xml.dom.minidom.parseString(svg)
        titles = [t.firstChild.data for t in document.getElementsByTagName("title")]
        boxes = [t for t in titles if " sample" in t]
        self.assertEqual(len(boxes), len(self.plan.groups))
        for title, group in zip(boxes, self.plan.groups):
            ids = [int(s.split()[0]) for s in title.split(":", 1)[1].split(";")[0].split(",")]
            self.assertEqual(ids, list(group.samples))
        self.assertEqual(len([t for t in titles if " ends at " in t]), self.plan.num_microbatches)
        self.assertEqual(len([t for t in titles if t.startswith("lower bound")]), 1)
        self.assertIn("time (ms)", svg)
        self.assertIn(">my &lt;plan&gt;: ", self.plan.svg(title="my <plan>"))

    def test_svg_stack(self):
        """libdcp.plan_svg stacks plans on one scale, titled, the last one the reference."""
        static = libdcp.plan(self.lengths, ranks=8, max_tokens_per_rank=4096, pad_multiple=8,
                          strategy="static")
        svg = libdcp.plan_svg([static, self.plan], [None, "ours"])
        xml.dom.minidom.parseString(svg)
        self.assertIn(">static CP=", svg)
        self.assertEqual(svg.count("; ours is "), 1)
        self.assertEqual(svg.count("time (ms)"), 2)
        with self.assertRaises(libdcp.InvalidArgumentError) as caught:
            libdcp.plan_svg([])
        self.assertIn("count 0", caught.exception.message)
        with self.assertRaises(ValueError):
            libdcp.plan_svg([self.plan], ["a", "b"])


class Errors(unittest.TestCase):
    """Every failing call raises the status's exception with the library's message."""

    def test_infeasible(self):
        with self.assertRaises(libdcp.InfeasibleError) as caught:
            libdcp.plan([100, 70000], ranks=4, max_tokens_per_rank=4096)
        self.assertIn("sample 1 has length 70000", str(caught.exception))
        self.assertIsInstance(caught.exception, libdcp.DcpError)
        self.assertEqual(caught.exception.function, "dcp_plan_create")

    def test_invalid_arguments_name_the_argument(self):
        with self.assertRaises(libdcp.InvalidArgumentError) as caught:
            libdcp.plan([100], ranks=0, max_tokens_per_rank=4096)
        self.assertIn("ranks", caught.exception.message)
        with self.assertRaises(libdcp.InvalidArgumentError) as caught:
            libdcp.plan([100], ranks=4, max_tokens_per_rank=4096, min_cp=3)
        self.assertIn("min_cp", caught.exception.message)
        with self.assertRaises(libdcp.InvalidArgumentError):
            libdcp.plan([100, -5], ranks=4, max_tokens_per_rank=4096)
        plan = libdcp.plan([100], ranks=4, max_tokens_per_rank=4096)
        with self.assertRaises(libdcp.InvalidArgumentError) as caught:
            plan.rank_view(4, 0)
        self.assertIn("4", caught.exception.message)

    def test_python_side_checks(self):
        with self.assertRaises(TypeError):
            libdcp.plan([100], ranks=4, max_tokens_per_rank=4096, max_tokens=5)
        with self.assertRaises(TypeError):
            libdcp.plan([100], ranks=4, max_tokens_per_rank=4096, cost={"attn": 1.0})
        with self.assertRaises(ValueError):
            libdcp.plan([100], ranks=4, max_tokens_per_rank=4096, strategy="fastest")
        with self.assertRaises(TypeError):
            libdcp.plan([100], ranks=4, max_tokens_per_rank=4096, strategy=1)  # names only
        with self.assertRaises(OverflowError):
            libdcp.plan([1 << 70], ranks=4, max_tokens_per_rank=4096)

    def assert_type_error(self, needle, function, *args, **kwargs):
        with self.assertRaises(TypeError) as caught:
            function(*args, **kwargs)
        self.assertIn(needle, str(caught.exception))

    def test_integers_are_integers(self):
        """dcp.h never truncates silently, and neither does its binding: bool, float and str
        where a count is expected are TypeError naming the argument and the index; a value
        beyond the C field's width is OverflowError, not a wrapped-around value."""
        plan = libdcp.plan
        self.assert_type_error("lengths[1] must be an integer, got float 200.9", plan,
                               [100, 200.9], ranks=4, max_tokens_per_rank=4096)
        self.assert_type_error("lengths[0] must be an integer, got str '100'", plan, ["100"],
                               ranks=4, max_tokens_per_rank=4096)
        self.assert_type_error("lengths[0] must be an integer, got the bool True", plan, [True],
                               ranks=4, max_tokens_per_rank=4096)
        self.assert_type_error("lengths must be a sequence of integers, not str", plan, "100",
                               ranks=4, max_tokens_per_rank=4096)
        self.assert_type_error("ranks must be an integer, got the bool True", plan, [100],
                               ranks=True, max_tokens_per_rank=4096)
        self.assert_type_error("max_tokens_per_rank must be an integer, got float", plan, [100],
                               ranks=4, max_tokens_per_rank=4096.0)
        self.assert_type_error("min_cp must be an integer, got str", plan, [100], ranks=4,
                               max_tokens_per_rank=4096, min_cp="2")
        self.assert_type_error("cost['attn_coeff'] must be a number, got bool", plan, [100],
                               ranks=4, max_tokens_per_rank=4096, cost={"attn_coeff": True})
        self.assert_type_error("lengths must hold integers, got elements of format 'd'", plan,
                               array.array("d", [100.0]), ranks=4, max_tokens_per_rank=4096)
        with self.assertRaises(OverflowError) as caught:
            plan([100], ranks=(1 << 32) + 4, max_tokens_per_rank=4096)  # not ranks = 4
        self.assertIn("ranks is 4294967300", str(caught.exception))
        small = plan([100, 200], ranks=4, max_tokens_per_rank=4096)
        self.assert_type_error("holders[1] must be an integer", small.reroute, [0, 1.0], 0)
        self.assert_type_error("rank must be an integer", small.rank_view, 0.0, 0)
        self.assert_type_error("seed must be an integer", libdcp.lognormal_lengths,
                               4096, 1.1, 1024, 8192, 4, seed=1.5)
        self.assert_type_error("count must be an integer", libdcp.lognormal_lengths,
                               4096, 1.1, 1024, 8192, 4.0)

    def test_integer_arrays_in_place(self):
        """A contiguous native int64 buffer (array.array("q"), numpy int64) is read in place;
        other integer buffers are converted, floating point ones refused."""
        from libdcp.planner import IntArray
        lengths = array.array("q", [100, 5000, 3000])
        taken = IntArray("lengths", lengths)
        self.assertTrue(taken.shared)
        self.assertEqual(ctypes.addressof(taken.pointer), lengths.buffer_info()[0])
        self.assertFalse(IntArray("lengths", array.array("i", [1, 2])).shared)
        by_list = libdcp.plan([100, 5000, 3000], ranks=4, max_tokens_per_rank=4096)
        for lengths_of in (lengths, array.array("i", lengths), array.array("H", lengths),
                           tuple(lengths), range(0, 0)):
            if len(lengths_of) == 0:
                continue
            same = libdcp.plan(lengths_of, ranks=4, max_tokens_per_rank=4096)
            self.assertEqual(same.to_bytes(), by_list.to_bytes())

    @unittest.skipUnless(__import__("importlib").util.find_spec("numpy"), "no numpy: skipped")
    def test_numpy_arrays(self):
        import numpy
        from libdcp.planner import IntArray
        by_list = libdcp.plan([100, 5000, 3000], ranks=4, max_tokens_per_rank=4096).to_bytes()
        lengths = numpy.array([100, 5000, 3000], dtype=numpy.int64)
        self.assertTrue(IntArray("lengths", lengths).shared)
        for dtype in (numpy.int64, numpy.int32, numpy.uint16):
            self.assertEqual(libdcp.plan(lengths.astype(dtype), ranks=4,
                                         max_tokens_per_rank=4096).to_bytes(), by_list)
        self.assertEqual(libdcp.plan(list(lengths), ranks=numpy.int64(4),
                                     max_tokens_per_rank=4096).to_bytes(), by_list)
        for bad in (lengths.astype(numpy.float64), lengths.astype(bool)):
            with self.assertRaises(TypeError):
                libdcp.plan(bad, ranks=4, max_tokens_per_rank=4096)
        with self.assertRaises(TypeError):
            libdcp.plan(lengths, ranks=numpy.float32(4), max_tokens_per_rank=4096)

    def test_lengths_sources(self):
        with self.assertRaises(libdcp.DcpIOError):
            libdcp.read_lengths("/nonexistent/lengths.txt")
        with self.assertRaises(libdcp.ParseError) as caught:
            libdcp.parse_lengths("12\nabc\n")
        self.assertIn("line 2", caught.exception.message)
        self.assertEqual(libdcp.parse_lengths("# c\n12\n\n7\n"), [12, 7])
        self.assertEqual(libdcp.parse_lengths("id,seq_len\n0,5\n1,9\n"), [5, 9])
        self.assertEqual(libdcp.lognormal_lengths(4096, 1.1, 1024, 8192, 8, seed=3),
                         libdcp.lognormal_lengths(4096, 1.1, 1024, 8192, 8, seed=3))

    def test_missing_library_lists_what_was_tried(self):
        os.environ["DCP_TEST_LIBRARY"] = "/nonexistent/libdcp.so"
        try:
            with self.assertRaises(libdcp.LibraryNotFoundError) as caught:
                _library.load("libdcp-absent.so", "DCP_TEST_LIBRARY", "build/libdcp.so")
        finally:
            del os.environ["DCP_TEST_LIBRARY"]
        text = str(caught.exception)
        self.assertIn("/nonexistent/libdcp.so (missing)", text)
        self.assertIn("DCP_TEST_LIBRARY", text)
        self.assertIn("make build/libdcp.so", text)


@unittest.skipIf(libdcp.library_path("cuda") is None, "no libdcp_cuda.so: skipped")
class CudaLibraryHostSide(unittest.TestCase):
    """libdcp_cuda.so's host-side entry points (no GPU needed): every signature libdcp.ops uses
    resolves, the device count answers, a device layout is checked on the host."""

    def layout(self, cu, cu_padded, cp):
        host = (ctypes.c_int32 * len(cu))(*cu), (ctypes.c_int32 * len(cu_padded))(*cu_padded)
        thd = _structs.ThdLayout(len(cu) - 1, host[0], host[1], cp)
        out = _structs.CudaLayout()
        # Device pointers are only stored, never read, by dcp_cuda_layout_init.
        _library.cuda().call("dcp_cuda_layout_init", ctypes.byref(thd), 16, 16,
                             ctypes.byref(out))
        return out

    def test_device_count_and_layout(self):
        count = ctypes.c_int32(-1)
        _library.cuda().call("dcp_cuda_device_count", ctypes.byref(count))
        self.assertGreaterEqual(count.value, 0)
        layout = self.layout([0, 5, 9], [0, 8, 16], 2)
        self.assertEqual((layout.local_rows, layout.max_seqlen_padded), (8, 8))
        with self.assertRaises(libdcp.InvalidArgumentError) as caught:
            self.layout([0, 5, 9], [0, 6, 16], 2)
        self.assertIn("padded length 6, not a multiple of 2 cp", caught.exception.message)


class RankViewsAgainstCli(unittest.TestCase):
    """Every rank's view of every microbatch equals `dcp-plan --rank R --microbatch K --json`."""

    def test_every_view(self):
        print(f"seed {SEED + 2}")
        lengths = libdcp.lognormal_lengths(1500, 1.2, 16, 6000, 24, seed=SEED + 2)
        path = write_lengths(lengths)
        try:
            plan = libdcp.plan(lengths, ranks=8, max_tokens_per_rank=2048)
            for k in range(plan.num_microbatches):
                for r in range(plan.ranks):
                    self.check_view(plan.rank_view(r, k), cli_json(
                        path, "--ranks", 8, "--max-tokens-per-rank", 2048, "--rank", r,
                        "--microbatch", k))
        finally:
            os.unlink(path)

    def check_view(self, view, expected):
        for key in ("rank", "microbatch", "first_rank", "cp", "rank_in_group", "idle",
                    "max_seqlen", "local_tokens", "pad_multiple"):
            self.assertEqual(getattr(view, key), expected[key], key)
        for key in ("samples", "sample_lengths", "cu_seqlens", "cu_seqlens_padded",
                    "local_offsets"):
            self.assertEqual(list(getattr(view, key)), expected[key], key)
        self.assertEqual(sum(view.loss_mask), sum(r["rows"] for r in expected["runs"]
                                                  if r["position"] >= 0))
        self.assertEqual(libdcp.rank_view_from_bytes(view.to_bytes()), view)
        runs = [run.position + i if run.position >= 0 else -1
                for run in view.runs for i in range(run.rows)]
        self.assertEqual(runs, list(view.positions))
        self.assertEqual([r.first_row for r in view.runs],
                         [0] + [sum(r.rows for r in view.runs[:i + 1])
                                for i in range(len(view.runs) - 1)])
        self.assertEqual([{k: getattr(r, k) for k in ("first_row", "rows", "sample", "position")}
                          for r in view.runs], expected["runs"])
        if view.idle:
            self.assertEqual((view.first_rank, view.cp, view.rank_in_group, view.samples,
                              view.cu_seqlens, view.group_ranks, view.flash_attn_calls()),
                             (libdcp.NO_GROUP, 0, libdcp.NO_GROUP, (), (0,), (), ()))


class ViewsAndReroute(unittest.TestCase):
    def setUp(self):
        rng = random.Random(SEED + 3)
        print(f"seed {SEED + 3}")
        self.lengths = [rng.randint(1, 3000) for _ in range(30)]
        self.plan = libdcp.plan(self.lengths, ranks=4, max_tokens_per_rank=2048)
        self.holders = [rng.randrange(4) for _ in self.lengths]
        self.samples = [array.array("q", [s * 100000 + p for p in range(n)])
                        for s, n in enumerate(self.lengths)]

    def test_token_indices_match_the_c_pack(self):
        flat = [t for s in self.samples for t in s]
        for k in range(self.plan.num_microbatches):
            for r in range(4):
                view = self.plan.rank_view(r, k)
                packed = array.array("q", bytes(self.plan.pack(r, k, self.samples)))
                starts = {s: sum(self.lengths[:s]) for s in view.samples}
                gathered = [flat[starts[view.samples[slot]] + p] if p >= 0 else 0
                            for slot, p in zip(view.row_samples, view.positions)]
                self.assertEqual(list(packed), gathered, (r, k))
                local_flat = [t for s in view.samples for t in self.samples[s]]
                self.assertEqual([local_flat[i] if i >= 0 else 0 for i in view.token_indices],
                                 gathered)
                for row, p in enumerate(view.positions):
                    slot = view.row_samples[row]
                    padded = view.cu_seqlens_padded[slot + 1] - view.cu_seqlens_padded[slot]
                    zig = libdcp.zigzag_position(padded, view.cp, view.rank_in_group,
                                              row - view.local_offsets[slot])
                    self.assertEqual(p, zig if zig < view.sample_lengths[slot] else -1)

    def test_reroute_pairs_and_covers_every_token(self):
        sends, recvs, covered = {}, {}, {}
        for r in range(4):
            for t in self.plan.reroute(self.holders, r):
                if t.kind == "send":
                    sends.setdefault((r, t.peer), []).append((t.sample, t.source_begin,
                                                              t.source_end))
                    self.assertEqual(self.holders[t.sample], r)
                elif t.kind == "recv":
                    recvs.setdefault((t.peer, r), []).append((t.sample, t.source_begin,
                                                              t.source_end))
                if t.kind != "send":
                    covered[t.sample] = covered.get(t.sample, 0) + t.tokens
        self.assertEqual(sends, recvs)
        view_tokens = {}
        for groups in self.plan.microbatches:
            for g in groups:
                for s in g.samples:
                    view_tokens[s] = self.lengths[s]
        self.assertEqual(covered, view_tokens)

    def test_view_with_holders_splits_the_microbatch_reroute(self):
        view = self.plan.rank_view(1, 0, holders=self.holders)
        entries = [t for t in self.plan.reroute(self.holders, 1) if t.microbatch == 0]
        self.assertEqual(len(view.sends) + len(view.receives) + len(view.copies), len(entries))
        self.assertTrue(all(t.kind == "recv" for t in view.receives))
        with self.assertRaises(ValueError):
            self.plan.reroute(self.holders[:-1], 0)
        with self.assertRaises(libdcp.InvalidArgumentError):
            self.plan.reroute([9] * len(self.lengths), 0)

    def test_idle_view_is_not_a_group(self):
        """An idle rank's view: cp 0 and NO_GROUP, no samples, no attention arguments."""
        plan = libdcp.plan([100], ranks=4, max_tokens_per_rank=4096)
        view = plan.rank_view(3, 0)
        self.assertTrue(view.idle)
        self.assertEqual((view.first_rank, view.cp, view.rank_in_group), (-1, 0, -1))
        self.assertEqual((view.cu_seqlens, view.local_tokens, view.pad_multiple), ((0,), 0, 0))
        self.assertEqual(libdcp.rank_view_from_bytes(view.to_bytes()), view)
        self.assertEqual(view.flash_attn_calls(), ())
        with self.assertRaises(ValueError):
            view.transformer_engine_kwargs()
        self.assertIn("idle", repr(view))
        busy = plan.rank_view(0, 0)
        self.assertEqual((busy.first_rank, busy.idle), (0, False))
        self.assertGreaterEqual(busy.cp, 1)

    @unittest.skipUnless(__import__("importlib").util.find_spec("torch"), "no torch: skipped")
    def test_tensors(self):
        import torch
        view = self.plan.rank_view(0, 0)
        t = view.tensors()
        self.assertEqual(t["cu_seqlens"].dtype, torch.int32)
        self.assertEqual(t["cu_seqlens_padded"].tolist(), list(view.cu_seqlens_padded))
        self.assertEqual(t["position_ids"].tolist(), list(view.position_ids))


if __name__ == "__main__":
    unittest.main()
