"""The package as a user meets it (issue 36, item 3): wrong argument types are TypeErrors that
name the argument, file errors name the file, no message speaks C ("NULL"), every public name
has a docstring, every repr is one short line, help(libdcp) lists modules only, `python -m
libdcp` is the C CLI byte for byte, Plan.to_json / from_json are `dcp-plan --json`, and the
optional parts name the extra that installs them. Standard library only."""
import array
import dataclasses
import importlib.util
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import libdcp
import libdcp.loader
from libdcp import _cli

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILD = os.environ.get("DCP_BUILD", os.path.join(REPO, "build"))
CLI = os.path.abspath(os.path.join(BUILD, "dcp-plan"))  # make build/dcp-plan
LIBRARY = os.path.abspath(os.environ.get("DCP_LIBRARY", os.path.join(BUILD, "libdcp.so")))
PACKAGE = os.path.dirname(os.path.abspath(libdcp.__file__))
# the environment of a child Python that imports this checkout's package from any folder
CHILD_ENV = dict(os.environ, PYTHONPATH=os.path.dirname(PACKAGE), DCP_LIBRARY=LIBRARY)
SCHEMA = os.path.join(REPO, "docs", "dcp-plan.schema.json")
SEED = 20261136  # fixed; printed by the tests that draw from it
REPR_LIMIT = 200  # characters: a repr is one line a log or a REPL prints whole
# (MEAN, SIGMA, MIN, MAX, COUNT) of the batches the JSON and CLI tests plan
LOGNORMAL = (4096, 1.1, 1024, 30000, 48)


def lognormal_option(seed):
    return ["--lognormal", ",".join(map(str, LOGNORMAL)), "--seed", str(seed)]


def run_cli(arguments, program=None, env=None, cwd=None):
    """(exit code, stdout, stderr) of dcp-plan, or of ``program`` (a command list)."""
    done = subprocess.run((program or [CLI]) + list(arguments), capture_output=True, env=env,
                          cwd=cwd)
    return done.returncode, done.stdout, done.stderr


def without_plan_seconds(text):
    """The CLI's output without the planner's wall time, the one figure that differs between
    runs: the JSON's plan_seconds and the summary's "plan time" line."""
    text = re.sub(r'"plan_seconds":[^,}]*', '"plan_seconds":X', text)
    return re.sub(r"(?m)^  plan time .*$", "  plan time X", text)


def small_plan():
    return libdcp.plan([100, 5000, 3000, 700], ranks=4, max_tokens_per_rank=2048)


class ArgumentTypes(unittest.TestCase):
    """A wrong type is a TypeError naming the argument (and the index in a sequence), found
    before anything reaches C; none of them surfaces as AttributeError or a C message."""

    def test_wrong_types_name_the_argument(self):
        plan = small_plan()
        view = plan.rank_view(0, 0)
        cases = [
            ("plans[0] must be a libdcp.Plan, got int", libdcp.plan_svg, [1, 2]),
            ("plans must be a sequence of Plan objects, got NoneType", libdcp.plan_svg, None),
            ("plans must be a sequence of Plan objects, got str", libdcp.plan_svg, "ab"),
            ("titles[0] must be a str or None, got int", libdcp.plan_svg, [plan], [3]),
            ("title must be a str or None, got int", plan.svg, 3),
            ("path must be a path (str, bytes or os.PathLike), got NoneType",
             libdcp.read_lengths, None),
            ("path must be a path (str, bytes or os.PathLike), got int", libdcp.read_lengths, 3),
            ("text must be bytes (a buffer), got int", libdcp.parse_lengths, 3),
            ("data must be bytes (a buffer), got str", libdcp.Plan.from_bytes, "abc"),
            ("data must be bytes (a buffer), got int", libdcp.rank_view_from_bytes, 5),
            ("data must be JSON text (str or bytes) or a mapping, got int",
             libdcp.Plan.from_json, 5),
            ("lengths must be a sequence of integers, got NoneType", libdcp.plan, None, 4, 2048),
            ("lengths must be a sequence of integers, got int", libdcp.plan, 7, 4, 2048),
            ("holders must be a sequence of integers, got NoneType", plan.reroute, None, 0),
            ("samples must be a sequence of buffers, got NoneType", plan.pack, 0, 0, None),
            ("samples[0] must be a buffer (bytes, array.array, ...), got int", plan.pack, 0, 0,
             [1, 2, 3, 4]),
            ("causal must be True or False, got str", view.flash_attn_calls, "yes"),
            ("causal must be True or False, got int", view.transformer_engine_kwargs, 1),
            ("count must be an integer, got float", libdcp.lognormal_lengths, 4096, 1.1, 1024,
             8192, 4.0),
            ("mean must be a number, got str", libdcp.lognormal_lengths, "4096", 1.1, 1024,
             8192, 4),
            ("sync_ranks must be an integer, got str", plan.step_time, "1"),
            ("length must be an integer, got NoneType", libdcp.cp_size_min, None, 4, 2048),
            ("strategy must be one of 'dynamic', 'static', 'greedy' (by name), got int",
             libdcp.resolve_config, 4, 2048),
        ]
        for needle, function, *args in cases:
            kwargs = {"strategy": 1} if function is libdcp.resolve_config else {}
            with self.subTest(needle):
                with self.assertRaises(TypeError) as caught:
                    function(*args, **kwargs)
                self.assertIn(needle, str(caught.exception))

    def test_no_message_speaks_of_null(self):
        """C's "must not be NULL" means nothing to a Python caller: every refusal of bad input
        through the public API says what is wrong in Python's terms."""
        plan = small_plan()
        bad_calls = [
            lambda: libdcp.lognormal_lengths(4096, 1.1, 1024, 8192, -1),
            lambda: libdcp.lognormal_lengths(4096, 1.1, 1024, 8192, 0),
            lambda: libdcp.lognormal_lengths(-1.0, 1.1, 1024, 8192, 4),
            lambda: libdcp.plan([], 4, 2048),
            lambda: libdcp.plan(None, 4, 2048),
            lambda: libdcp.plan_svg([]),
            lambda: libdcp.plan_svg(None),
            lambda: libdcp.parse_lengths(""),
            lambda: libdcp.parse_lengths(None),
            lambda: libdcp.read_lengths(None),
            lambda: libdcp.Plan.from_bytes(b""),
            lambda: libdcp.Plan.from_bytes(None),
            lambda: libdcp.rank_view_from_bytes(b""),
            lambda: libdcp.Plan.from_json("{}"),
            lambda: plan.pack(0, 0, []),
            lambda: plan.pack(0, 0, None),
            lambda: plan.reroute([], 0),
            lambda: plan.reroute(None, 0),
            lambda: plan.rank_view(99, 0),
            lambda: plan.rank_view(0, 99),
            lambda: plan.step_time(3),
            lambda: libdcp.cp_size_min(0, 4, 2048),
        ]
        for i, call in enumerate(bad_calls):
            with self.subTest(case=i):
                with self.assertRaises(Exception) as caught:
                    call()
                self.assertNotIsInstance(caught.exception, AttributeError)
                self.assertNotIn("NULL", str(caught.exception))


class Files(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="dcp-package-test-")

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def write(self, name, text):
        path = os.path.join(self.work, name)
        with open(path, "w") as handle:
            handle.write(text)
        return path

    def test_read_lengths_errors_name_the_file(self):
        """As the CLI's do: a missing file, a directory, a line that is not a length and an
        empty file each raise with the path in the message (and as OSError.filename)."""
        cases = {
            os.path.join(self.work, "missing.txt"): libdcp.DcpIOError,
            self.work: libdcp.DcpIOError,
            self.write("bad.txt", "12\nabc\n"): libdcp.ParseError,
            self.write("empty.txt", ""): libdcp.ParseError,
            self.write("zero.csv", "id,seq_len\n0,0\n"): libdcp.ParseError,
        }
        for path, error in cases.items():
            with self.subTest(path=path):
                with self.assertRaises(error) as caught:
                    libdcp.read_lengths(path)
                self.assertIn(path, str(caught.exception))
                if isinstance(caught.exception, OSError):
                    self.assertEqual(caught.exception.filename, path)
                code, _, stderr = run_cli(["--lengths", path, "--ranks", "4",
                                           "--max-tokens-per-rank", "4096"])
                self.assertEqual(code, 2)
                self.assertIn(path, stderr.decode(), "the CLI names it too")
        import pathlib
        self.assertEqual(libdcp.read_lengths(pathlib.Path(self.write("ok.txt", "5\n9\n"))),
                         [5, 9])

    def test_count_zero_is_refused_as_the_cli_refuses_it(self):
        with self.assertRaises(ValueError) as caught:
            libdcp.lognormal_lengths(4096, 1.1, 1024, 8192, 0)
        self.assertIn("count must be >= 1", str(caught.exception))
        code, stdout, stderr = run_cli(["--lognormal", "4096,1.1,1024,8192,0", "--ranks", "4",
                                        "--max-tokens-per-rank", "4096"])
        self.assertEqual((code, stdout), (2, b""))
        self.assertIn(b"COUNT", stderr)
        self.assertEqual(len(libdcp.lognormal_lengths(4096, 1.1, 1024, 8192, 1)), 1)


def public_api():
    """(qualified name, object) of every public name: libdcp.__all__ and libdcp.loader's own
    names, and the public methods and properties of their classes."""
    modules = [(libdcp, libdcp.__all__),
               (libdcp.loader, [n for n, v in vars(libdcp.loader).items()
                                if not n.startswith("_") and
                                getattr(v, "__module__", None) == "libdcp.loader"])]
    if importlib.util.find_spec("torch"):
        ops = importlib.import_module("libdcp.ops")
        modules.append((ops, [n for n, v in vars(ops).items()
                              if not n.startswith("_") and callable(v) and
                              getattr(v, "__module__", None) == "libdcp.ops"]))
    for module, names in modules:
        for name in names:
            value = getattr(module, name)
            yield f"{module.__name__}.{name}", value
            if not inspect.isclass(value):
                continue
            for attribute, member in vars(value).items():
                if attribute.startswith("_"):
                    continue
                if isinstance(member, (classmethod, staticmethod)):
                    member = member.__func__
                if isinstance(member, property) or inspect.isfunction(member):
                    yield f"{module.__name__}.{name}.{attribute}", member


def undocumented():
    """The public names without a docstring of their own: functions, classes, methods and
    properties; a dataclass's fields each need a "name: ..." line in its docstring; a
    constant must be named in its module's docstring."""
    missing = []
    for name, value in public_api():
        short = name.rsplit(".", 1)[1]
        if inspect.isclass(value) or inspect.isfunction(value) or isinstance(value, property):
            if not (value.__doc__ or "").strip():
                missing.append(name)
            if dataclasses.is_dataclass(value):
                for f in dataclasses.fields(value):
                    if f.name.startswith("_"):
                        continue
                    line = rf"^\s*(\w+, )*{f.name}(, \w+)*:\s"
                    if not re.search(line, value.__doc__ or "", re.M):
                        missing.append(f"{name}.{f.name} (a field)")
        elif callable(value):  # torch custom ops and other callables: their own __doc__
            if not (getattr(value, "__doc__", None) or "").strip():
                missing.append(name)
        else:
            module = sys.modules[name.rsplit(".", 1)[0]]
            if not re.search(rf"\b{short}\b", module.__doc__ or ""):
                missing.append(f"{name} (a constant not named in the module docstring)")
    return missing


class Docstrings(unittest.TestCase):
    def test_every_public_name_has_a_docstring(self):
        names = list(public_api())
        self.assertGreater(len(names), 80, "the walk must see the whole API")
        for expected in ("libdcp.Plan.lower_bound_seconds", "libdcp.Plan.num_samples",
                         "libdcp.Plan.sample_lengths", "libdcp.RankView.position_ids",
                         "libdcp.RankView.loss_mask", "libdcp.RankView.token_indices",
                         "libdcp.Plan.to_json", "libdcp.Plan.from_json"):
            self.assertIn(expected, dict(names))
        self.assertEqual(undocumented(), [])

    def test_the_walk_finds_a_missing_docstring(self):
        """The check above can fail: a property, a dataclass field and a constant stripped of
        their documentation are reported."""
        saved = libdcp.Plan.lower_bound_seconds
        stripped = property(lambda plan: saved.fget(plan))  # the same reader, no docstring
        libdcp.Plan.lower_bound_seconds = stripped
        transfer_doc = libdcp.Transfer.__doc__
        libdcp.Transfer.__doc__ = transfer_doc.replace("        peer:", "        (peer)")
        package_doc = libdcp.__doc__
        libdcp.__doc__ = package_doc.replace("NO_GROUP", "the idle marker")
        try:
            found = undocumented()
        finally:
            libdcp.Plan.lower_bound_seconds = saved
            libdcp.Transfer.__doc__ = transfer_doc
            libdcp.__doc__ = package_doc
        self.assertIn("libdcp.Plan.lower_bound_seconds", found)
        self.assertIn("libdcp.Transfer.peer (a field)", found)
        self.assertIn("libdcp.NO_GROUP (a constant not named in the module docstring)", found)

    def test_plan_names_every_config_field(self):
        """plan() takes every dcp_config field by name, so its docstring says what each is."""
        for name in libdcp.CONFIG_FIELDS:
            self.assertRegex(libdcp.plan.__doc__, rf"\b{name}\b", name)
        self.assertIn("ring_charge", libdcp.plan.__doc__)


class Reprs(unittest.TestCase):
    def objects(self):
        """One of every public object kind, from a batch big enough that a repr listing
        everything would be long: 2,000 samples on 64 ranks, idle ranks, reroutes."""
        print(f"seed {SEED}")
        lengths = libdcp.lognormal_lengths(3000, 1.3, 100, 60000, 2000, seed=SEED)
        plan = libdcp.plan(lengths, ranks=64, max_tokens_per_rank=65536)
        holders = [s % plan.ranks for s in range(plan.num_samples)]
        views = [plan.rank_view(r, k, holders) for k in range(plan.num_microbatches)
                 for r in range(0, plan.ranks, 7)]
        busiest = max(views, key=lambda v: v.num_samples)
        self.assertGreater(busiest.num_samples, 20)
        small = libdcp.plan([100, 200], ranks=8, max_tokens_per_rank=2048)
        idle = [small.rank_view(r, k) for k in range(small.num_microbatches)
                for r in range(small.ranks) if small.rank_view(r, k).idle]
        self.assertTrue(idle, "an idle view")
        world = libdcp.loader.LocalWorld(small, [0] * small.num_samples)
        loader = libdcp.loader.DynamicCPLoader([[list(range(n)) for n in (100, 5000, 3000)]],
                                               rank=0, ranks=4, max_tokens_per_rank=2048)
        microbatch = next(iter(loader))
        transfers = plan.reroute(holders, 0)
        return [plan, plan.stats, plan.flops_stats, plan.groups[0],
                max(plan.groups, key=lambda g: len(g.samples)), busiest, idle[0],
                transfers[0], busiest.runs[0], busiest.flash_attn_calls()[0],
                libdcp.SampleCost(64, 65536), world, loader, microbatch]

    def test_reprs_are_one_short_line(self):
        for value in self.objects():
            text = repr(value)
            with self.subTest(type(value).__name__):
                self.assertNotIn("\n", text)
                self.assertLess(len(text), REPR_LIMIT, text[:300])


class Help(unittest.TestCase):
    """help(libdcp) lists the package's modules, never a shared library: an installed
    package's native files live in _native/, which has no __init__.py."""

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="dcp-help-")
        self.package = os.path.join(self.work, "libdcp")
        shutil.copytree(PACKAGE, self.package, ignore=shutil.ignore_patterns("__pycache__"))

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def package_contents(self):
        """The PACKAGE CONTENTS section of pydoc's page of the copy (as setup.py lays it out),
        and where it loaded libdcp.so from."""
        env = {k: v for k, v in os.environ.items() if k not in ("DCP_LIBRARY", "PYTHONPATH")}
        env["PYTHONPATH"] = self.work
        code = ("import pydoc, libdcp; print(libdcp.library_path()); "
                "print(pydoc.render_doc(libdcp, renderer=pydoc.plaintext))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, check=True, cwd=self.work).stdout
        where, page = out.split("\n", 1)
        section = page.split("PACKAGE CONTENTS", 1)[1].split("\n\n", 1)[0]
        return where, section.split()

    def test_help_lists_modules_only(self):
        native = os.path.join(self.package, "_native")
        os.makedirs(native, exist_ok=True)
        shutil.copy(LIBRARY, os.path.join(native, "libdcp.so"))
        where, contents = self.package_contents()
        self.assertEqual(where, os.path.join(native, "libdcp.so"))
        self.assertIn("planner", contents)
        self.assertNotIn("libdcp", contents)
        self.assertNotIn("_native", contents)
        # the check can fail: a library beside the modules is listed as one
        shutil.copy(LIBRARY, os.path.join(self.package, "libdcp.so"))
        self.assertIn("libdcp", self.package_contents()[1])


class CommandLine(unittest.TestCase):
    """`python -m libdcp` (and the `dcp-plan` console script, which calls the same
    libdcp._cli.main) is the C program: stdout, stderr, exit code and written files byte for
    byte, a failing run included. python/tests/megatron_core_test.py checks the installed
    console script the same way after `pip install`."""

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="dcp-cli-")

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def invocations(self):
        lengths = os.path.join(self.work, "lengths.txt")
        with open(lengths, "w") as handle:
            handle.write("".join(f"{n}\n" for n in (700, 9000, 3000, 120, 5000, 64000)))
        bad = os.path.join(self.work, "bad.txt")
        with open(bad, "w") as handle:
            handle.write("12\nabc\n")
        pool = ["--ranks", "8", "--max-tokens-per-rank", "8192"]
        return [
            lognormal_option(SEED) + pool,
            lognormal_option(SEED) + pool + ["--json"],
            ["--lengths", lengths] + pool + ["--rank", "3", "--microbatch", "0"],
            ["--lengths", lengths] + pool + ["--svg", "SVG"],
            ["--help"],
            ["--version"],
            [],
            ["--lengths", bad] + pool,
            ["--lognormal", "4096,1.1,1024,8192,0"] + pool,
            ["--no-such-option"],
            ["--lengths", lengths, "--ranks", "2", "--max-tokens-per-rank", "1024"],
        ]

    def outcome(self, program, arguments, env):
        """(exit code, stdout, stderr, the SVG it wrote) of one run in a fresh folder."""
        folder = tempfile.mkdtemp(dir=self.work)
        code, stdout, stderr = run_cli(arguments, program, env, cwd=folder)
        svg = os.path.join(folder, "SVG")
        written = open(svg, "rb").read() if os.path.exists(svg) else None
        return code, without_plan_seconds(stdout.decode()), stderr.decode(), written

    def test_python_m_libdcp_is_the_c_cli(self):
        print(f"seed {SEED}")
        env = dict(CHILD_ENV, DCP_PLAN=CLI)
        codes = set()
        for arguments in self.invocations():
            with self.subTest(arguments=" ".join(arguments)):
                want = self.outcome([CLI], arguments, env)
                got = self.outcome([sys.executable, "-m", "libdcp"], arguments, env)
                self.assertEqual(got, want)
                codes.add(want[0])
        self.assertEqual(codes, {0, 1, 2}, "success, no plan and bad usage all compared")

    def test_the_program_is_found_like_the_library(self):
        """Without $DCP_PLAN: the package's _native/ folder, then the repository's build/."""
        env = {k: v for k, v in CHILD_ENV.items() if k != "DCP_PLAN"}
        if os.path.isfile(os.path.join(REPO, "build", "dcp-plan")):
            code = "from libdcp import _cli; print(_cli.program_path())"
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 env=env, check=True).stdout.strip()
            self.assertIn(out, (os.path.join(PACKAGE, "_native", "dcp-plan"),
                                os.path.join(REPO, "build", "dcp-plan")))

    def test_a_missing_program_is_one_line(self):
        copy = os.path.join(self.work, "alone", "libdcp")
        shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "_native"))
        env = {k: v for k, v in os.environ.items() if k not in ("DCP_PLAN", "PYTHONPATH")}
        env["PYTHONPATH"] = os.path.dirname(copy)
        code, stdout, stderr = run_cli(["--version"], [sys.executable, "-m", "libdcp"], env)
        self.assertEqual((code, stdout), (_cli.EXIT_NOT_FOUND, b""))
        lines = stderr.decode().splitlines()
        self.assertEqual(len(lines), 1, stderr)
        self.assertIn(os.path.join(copy, "_native", "dcp-plan"), lines[0])
        self.assertIn("pip install ./python", lines[0])


def schema_validate(document):
    sys.path.insert(0, os.path.join(REPO, "tests"))
    try:
        import json_schema
    finally:
        sys.path.pop(0)
    with open(SCHEMA) as handle:
        schema = json.load(handle)
    json_schema.validate(document, schema, schema)


class Json(unittest.TestCase):
    """Plan.to_json and RankView.to_json print what `dcp-plan --json` prints; Plan.from_json
    reads it back."""
    CONFIGS = [
        [],
        ["--sync-ranks", "1", "--ring-charge", "sample", "--pad-multiple", "4"],
        ["--strategy", "greedy", "--microbatch-multiple", "2", "--attn-coeff", "1.5e-10",
         "--linear-coeff", "3e-7", "--ring-step-cost", "2e-5"],
        ["--min-cp", "2", "--max-cp", "8", "--improve-moves", "-1", "--pad-multiple-cp1", "8"],
    ]
    POOL = {"ranks": 16, "max_tokens_per_rank": 4096}

    @staticmethod
    def python_config(options):
        """dcp-plan's options as plan() keyword arguments (the same dcp_config fields)."""
        config, cost = {}, {}
        for flag, value in zip(options[::2], options[1::2]):
            name = flag[2:].replace("-", "_")
            if name in ("attn_coeff", "linear_coeff", "ring_step_cost"):
                cost[name] = float(value)
            elif name in ("strategy", "ring_charge"):
                config[name] = value
            else:
                config[name] = int(value)
        if cost:
            config["cost"] = cost
        return config

    def cli_json(self, options, *more):
        pool = ["--ranks", str(self.POOL["ranks"]), "--max-tokens-per-rank",
                str(self.POOL["max_tokens_per_rank"])]
        code, stdout, stderr = run_cli(lognormal_option(SEED) + pool + options + ["--json"] +
                                       list(more))
        self.assertEqual(code, 0, stderr)
        return stdout.decode().rstrip("\n")

    def test_plan_json_is_the_clis(self):
        """The same input and config give the same line, plan_seconds aside (the planner's
        wall time): the same JSON object, and the same text."""
        print(f"seed {SEED}")
        lengths = libdcp.lognormal_lengths(*LOGNORMAL, seed=SEED)
        for options in self.CONFIGS:
            with self.subTest(options=" ".join(options)):
                cli = self.cli_json(options)
                plan = libdcp.plan(lengths, **self.POOL, **self.python_config(options))
                mine = plan.to_json()
                ours, theirs = json.loads(mine), json.loads(cli)
                self.assertGreater(ours.pop("plan_seconds"), 0)
                theirs.pop("plan_seconds")
                self.assertEqual(ours, theirs)
                self.assertEqual(without_plan_seconds(mine), without_plan_seconds(cli))
                schema_validate(json.loads(mine))

    def test_from_json_reads_the_cli_back(self):
        """from_json(line).to_json() is the line itself, plan_seconds included; the plan is
        the one plan() makes of the same input (the same serialized bytes)."""
        lengths = libdcp.lognormal_lengths(*LOGNORMAL, seed=SEED)
        for options in self.CONFIGS:
            with self.subTest(options=" ".join(options)):
                cli = self.cli_json(options)
                read = libdcp.Plan.from_json(cli)
                self.assertEqual(read.to_json(), cli)
                self.assertEqual(libdcp.Plan.from_json(json.loads(cli)).to_json(), cli)
                self.assertEqual(libdcp.Plan.from_json(cli.encode()).to_json(), cli)
                made = libdcp.plan(lengths, **self.POOL, **self.python_config(options))
                self.assertEqual(read.to_bytes(), made.to_bytes())
                self.assertEqual(read.plan_seconds, json.loads(cli)["plan_seconds"])

    def test_view_json_is_the_clis(self):
        lengths = libdcp.lognormal_lengths(*LOGNORMAL, seed=SEED)
        plan = libdcp.plan(lengths, **self.POOL)
        seen_idle = False
        for k in (0, plan.num_microbatches - 1):
            for r in range(plan.ranks):
                view = plan.rank_view(r, k)
                seen_idle |= view.idle
                with self.subTest(rank=r, microbatch=k):
                    self.assertEqual(view.to_json(), self.cli_json(
                        [], "--rank", str(r), "--microbatch", str(k)))
        schema_validate(json.loads(plan.rank_view(0, 0).to_json()))

    def test_from_json_refuses_what_is_not_a_plan(self):
        """A malformed document is a ValueError naming what is wrong; a well-formed one that
        breaks a plan invariant is the library's InvalidPlanError naming the invariant."""
        good = json.loads(self.cli_json([]))
        view = self.cli_json([], "--rank", "0", "--microbatch", "0")

        def edited(change):
            document = json.loads(json.dumps(good))
            change(document)
            return document
        first_group = lambda d: d["microbatches"][0][0]  # noqa: E731
        value_errors = {
            "not JSON": "{",
            "must be an object, got list": "[1, 2]",
            "a rank view's JSON": view,
            "lacks microbatches": edited(lambda d: d.pop("microbatches")),
            "config: unknown dcp_config field(s) colour": edited(
                lambda d: d["config"].update(colour=1)),
            "config: ranks must be an integer": edited(lambda d: d["config"].update(ranks="16")),
            "sample_lengths[0] must be an integer": edited(
                lambda d: d["sample_lengths"].__setitem__(0, 1.5)),
            "microbatches[0][0] must be an object": edited(
                lambda d: first_group(d).pop("samples")),
            "microbatches[0][0].samples[0] must be an integer": edited(
                lambda d: first_group(d)["samples"].__setitem__(0, "3")),
        }
        for needle, document in value_errors.items():
            with self.subTest(needle):
                with self.assertRaises(ValueError) as caught:
                    libdcp.Plan.from_json(document)
                self.assertNotIsInstance(caught.exception, libdcp.InvalidPlanError)
                if needle != "not JSON":
                    self.assertIn(needle, str(caught.exception))
        invalid = {
            "appears twice": edited(lambda d: first_group(d)["samples"].append(
                first_group(d)["samples"][0])),
            "cp 3, not a CP size of cp_sizes pow2": edited(lambda d: first_group(d).update(cp=3)),
            "outside [0, 48)": edited(lambda d: first_group(d)["samples"].__setitem__(0, 48)),
        }
        for needle, document in invalid.items():
            with self.subTest(needle):
                with self.assertRaises(libdcp.InvalidPlanError) as caught:
                    libdcp.Plan.from_json(document)
                self.assertIn(needle, str(caught.exception))


class OptionalParts(unittest.TestCase):
    """Without torch, what needs it says which extra installs it (run with torch hidden, so
    this holds where torch is installed too)."""
    HIDE_TORCH = "import sys; sys.modules['torch'] = None\n"  # import torch now fails

    def run_hidden(self, code):
        done = subprocess.run([sys.executable, "-c", self.HIDE_TORCH + code],
                              capture_output=True, text=True, env=CHILD_ENV)
        return done.returncode, done.stderr

    def test_torch_parts_name_the_extra(self):
        cases = {
            "import libdcp.ops": "libdcp.ops needs torch",
            "import libdcp; libdcp.plan([100], 1, 128).rank_view(0, 0).tensors()":
                "RankView.tensors() needs torch",
            "import libdcp.loader as l; l.torch_zeros(None)": "torch_zeros needs torch",
        }
        for code, needle in cases.items():
            with self.subTest(code):
                status, stderr = self.run_hidden(code)
                self.assertNotEqual(status, 0)
                last = stderr.strip().splitlines()[-1]
                self.assertIn("ModuleNotFoundError", last)
                self.assertIn(needle, last)
                self.assertIn("pip install 'libdcp[torch]'", last)

    def test_the_planner_needs_no_torch(self):
        status, stderr = self.run_hidden("import libdcp, libdcp.loader; libdcp.plan([100], 1, "
                                         "128).to_json()")
        self.assertEqual(status, 0, stderr)

    def test_pyproject_declares_the_extra_and_the_command(self):
        with open(os.path.join(REPO, "python", "pyproject.toml")) as handle:
            text = handle.read()
        self.assertRegex(text, r'\[project\.optional-dependencies\]\ntorch = \["torch>=2\.4"\]')
        self.assertRegex(text, r'\[project\.scripts\]\ndcp-plan = "libdcp\._cli:main"')
        self.assertRegex(text, r'libdcp = \["py\.typed"\]')
        self.assertTrue(os.path.isfile(os.path.join(PACKAGE, "py.typed")))


if __name__ == "__main__":
    unittest.main()
