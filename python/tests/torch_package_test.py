"""What needs torch or pip and PyPI but no Megatron release (`make test-megatron` runs it once,
with build/venv-megatron's Python): the per-token loss example, and the package built by
`pip install ./python` and `pip wheel ./python` in fresh virtual environments."""
import glob
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(HERE, "..")
EXAMPLE = os.path.join(PACKAGE, "examples", "megatron_per_token_loss.py")
SEED = int(os.environ.get("DCP_TEST_SEED", "1"))


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
