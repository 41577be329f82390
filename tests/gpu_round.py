"""The GPU round (make gpu-round; docs/gpu-round.md): everything that needs a GPU, as one command.

A GPU is lent to this project rarely and briefly, so nothing may be spent on assembling commands
when one comes. The round builds for the device it finds, then runs the commands of issue 29's
steps in the order STEPS names (default PRIORITY: the most important first), each under its own
time limit and with its own log, never stopping at a failure, within the call's time budget,
and writes one Markdown summary (OUT, default build/gpu-round.md): pass/fail per step, the
benches' tables (figures and ratios), the peak GPU memory per command, the device, driver, CUDA
version and commit. Beside it: the same as JSON (what later calls merge with) and the logs as
one .tar.gz; the raw logs stay in LOGS.

--dry-run (make gpu-round DRY_RUN=1, run by make test) runs every command in its wiring mode
instead (the binaries exist or make has a rule for them, the scripts import, the arguments are
accepted) and marks every step "not run: no GPU". Where this machine has no CUDA (the Makefile
passes --no-cuda with the reason: nvcc or the toolkit is missing), the commands that run a CUDA
build (the benches, the kernel report, the calibration, the CUDA library's ops) cannot be
wired: the dry run marks them skipped with that reason instead of failing, as make test skips
the CUDA programs.

--merge combines the JSON of calls that ran different steps (a lent machine allows about 10
minutes a call) into one summary.

Standard library only: it runs on the CI machine and on the lent GPU machine alike."""
import argparse
import collections
import dataclasses
import datetime
import importlib.util
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from typing import Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORMAT_VERSION = 1
NO_GPU = "not run: no GPU"
NOT_BUILT = "not built yet"
SKIPPED = "skipped"
MEMORY_POLL_SECONDS = 1.0
FIGURE_LINES = 60           # a bench's table in the summary: its last lines
LOG_BUNDLE_BYTES = 2 << 20  # per log in the .tar.gz: the head and the tail when larger
FAILURE_LINES = 12          # of a failing command's log, quoted under its step
KILL_GRACE_SECONDS = 10
DRY_LIMIT_S = 120           # one command's wiring check
BUILD_LIMIT_S = 480         # the build on the lent machine (16 cores; dcp_cuda.o alone ~95 s)
SUMMARY_RESERVE_S = 15      # of TIME_BUDGET, kept for the last summary and the logs' bundle
MIN_COMMAND_S = 30          # with less of TIME_BUDGET left, a longer command waits for a later call
SEEDS, SEEDS_PER_COMMAND = 20, 5
MUTANT_PARTS = 2            # fourteen mutants, each a compile: two calls of under 10 minutes
# compute capabilities the default build (sm_80 and sm_90a cubins) runs natively
NATIVE_CAPABILITIES = ("8.0", "8.6", "8.7", "8.9", "9.0")
PTX_ARCH = "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_80,code=compute_80"


@dataclasses.dataclass
class Command:
    """One command of a step: `run` on a GPU machine, `dry` in the dry run (None: nothing to
    check beyond `rule`). Both are shell text formatted with {build}, {make}, {python}, {logs},
    {sanitizer}, {nproc} and {ring_repeat}. `rule`: a make target the command needs; the dry
    run asks make whether it can build it, and a real run reports NOT_BUILT when make has no
    rule for it. `bench`: its table goes into the summary. `cuda`: its wiring needs nvcc's
    builds."""
    name: str
    run: str
    dry: Optional[str]
    limit_s: int
    rule: Optional[str] = None
    bench: bool = False
    cuda: bool = False  # its dry form runs a CUDA build (nvcc's): skipped under --no-cuda


@dataclasses.dataclass
class Step:
    """Issue 29's step (its number is its place in steps())."""
    title: str
    commands: List[Command]
    note: str = ""


# The one place that names the primitives' parity test of issue 26's execution model: the
# Makefile passes GPU_ROUND_PRIMITIVES (its target) in the environment.
def primitives_target(build: str) -> str:
    return os.environ.get("GPU_ROUND_PRIMITIVES", f"{build}/test_cuda_primitives")


def gpu_tests() -> List[str]:
    """The GPU test programs (the Makefile's GPU_TESTS and test_nccl_gpu), as make passes them."""
    return os.environ.get("GPU_ROUND_GPU_TESTS", "").split()


def sanitizer_commands(build: str) -> List[Command]:
    tools = (("memcheck", "--leak-check full", 150), ("racecheck", "--racecheck-report all", 240),
             ("initcheck", "", 150))
    commands = []
    for program in gpu_tests():
        for tool, flags, limit in tools:
            commands.append(Command(
                f"{tool} {os.path.basename(program)}",
                f"{{sanitizer}} --tool {tool} {flags} --error-exitcode 1 {program}",
                None, limit, rule=program))
    return commands


def no_skip(command: str, name: str, skip_pattern: str) -> str:
    """The command, its output kept, failing also when a line matches skip_pattern."""
    out = f"{{logs}}/{name}.out"
    return (f"{command} >{out} 2>&1; status=$?; cat {out}; if grep -q '{skip_pattern}' {out}; "
            f"then echo 'gpu-round: a test skipped on a GPU machine (above): a failure'; exit 1; "
            f"fi; exit $status")


def no_gpu_skip(command: str, name: str) -> str:
    """make test's skips that say a GPU is missing fail it; its other skips (a size only a GPU
    runs, on the CPU execution model; mypy without PyPI) stay skips, which
    DCP_TEST_NO_SKIPS=1 would count as failures."""
    return no_skip(command, name, "no CUDA device")


def seed_commands() -> List[Command]:
    """The 20 seeds as four commands of five: with the GPU tests and their CPU references in
    every seed, each fits a call of its own, and a call cut short loses at most five."""
    return [Command(f"seeds {first}-{first + SEEDS_PER_COMMAND - 1}",
                    f"{{make}} test-seeds SEEDS={SEEDS_PER_COMMAND} SEED_FIRST={first} "
                    f"DCP_TEST_NO_SKIPS=1 SEED_LOGS={{logs}}/seeds",
                    f"{{make}} -n test-seeds SEEDS={SEEDS_PER_COMMAND} SEED_FIRST={first} "
                    f"DCP_TEST_NO_SKIPS=1 >/dev/null", 360)
            for first in range(1, SEEDS + 1, SEEDS_PER_COMMAND)]


def a2a_launch(ranks: int) -> str:
    """N processes of build/a2a_bench on the one GPU, as tests/multirank.sh starts them (own
    NCCL_HOSTID each, sockets over loopback); rank 0's table is the figure."""
    return (f"rm -f {{logs}}/a2a.id; pids=; for r in $(seq 0 {ranks - 1}); do RANK=$r "
            f"LOCAL_RANK=0 WORLD_SIZE={ranks} NCCL_HOSTID=dcp-gpu-round-$r NCCL_IB_DISABLE=1 "
            f"NCCL_SOCKET_IFNAME=lo {{build}}/a2a_bench {{logs}}/a2a.id "
            f">{{logs}}/a2a-rank-$r.out 2>&1 & pids=\"$pids $!\"; done; status=0; "
            f"for pid in $pids; do wait $pid || status=1; done; "
            f"cat {{logs}}/a2a-rank-0.out; exit $status")


CALIBRATED_FLAGS = ("flags=$(sed -n '/^dcp-plan flags:/{{n;p;}}' {logs}/8-1-calibrate.log); "
                    "[ -n \"$flags\" ] || {{ echo 'no fitted dcp-plan flags in "
                    "{logs}/8-1-calibrate.log: the calibration did not finish'; exit 1; }}; ")
PYTHON_ENV = ("PYTHONPATH=python DCP_LIBRARY={build}/libdcp.so "
              "DCP_CUDA_LIBRARY={build}/libdcp_cuda.so DCP_BUILD={build} ")


def steps(build: str) -> List[Step]:
    """Issue 29's steps, in its order."""
    primitives = primitives_target(build)
    return [
        Step("make test with no GPU test skipped, then 20 seeds", [
            Command("the GPU tests alone (make test-gpu)", "DCP_TEST_NO_SKIPS=1 {make} test-gpu",
                    "{make} -n test-gpu >/dev/null", 300),
            Command("make test (no GPU test may skip)", no_gpu_skip("{make} test", "make-test"),
                    "{make} -n test GPU_PRESENT=yes >/dev/null", 600),
            *seed_commands()]),
        Step("compute-sanitizer memcheck, racecheck, initcheck over every GPU test",
             sanitizer_commands(build)),
        Step("make test-mutants (every planted bug killed)", [
            Command(f"mutants, part {k} of {MUTANT_PARTS}",
                    f"{{make}} test-mutants MUTANTS_PART={k}/{MUTANT_PARTS}",
                    f"{{make}} -n test-mutants MUTANTS_PART={k}/{MUTANT_PARTS} >/dev/null", 540)
            for k in range(1, MUTANT_PARTS + 1)],
             "runs on the CPU execution model (tests/cuda_cpu): no GPU needed"),
        Step("the primitives' parity test on the GPU (issue 26), and the wgmma products", [
            Command(os.path.basename(primitives),
                    f"DCP_TEST_NO_SKIPS=1 sh tests/run_tests.sh {primitives}",
                    None, 120, rule=primitives),
            Command("test_wgmma (sm_90a's products: a skip fails it on a Hopper device)",
                    "sh tests/run_tests.sh {build}/test_wgmma", None, 120,
                    rule=f"{build}/test_wgmma")]),
        Step("make test-multirank at 2, 4, 6, 8 ranks; the ring example 20 times each", [
            Command("test-multirank", "MULTIRANK_REPEAT={ring_repeat} {make} test-multirank",
                    "{make} -n test-multirank >/dev/null && sh -n tests/multirank.sh", 570)]),
        Step("benches: attention, conv1d, RoPE, merge, finalize, FLA, the all-to-all", [
            Command("attention_bench", "{build}/attention_bench --repeat 11",
                    "{build}/attention_bench --repeat 11", 240, bench=True, cuda=True),
            Command("attention_bench.py (SDPA flash, cuDNN)",
                    "{python} bench/attention_bench.py --repeat 11",
                    "{python} bench/attention_bench.py --repeat 11 --dry-run", 360, bench=True,
                    cuda=True),
            Command("kernels_bench", "{build}/kernels_bench --repeat 21",
                    "{build}/kernels_bench --repeat 21", 180, bench=True, cuda=True),
            Command("kernels_bench.py (PyTorch, FLA)",
                    "{python} bench/kernels_bench.py --repeat 21",
                    "{python} bench/kernels_bench.py --repeat 21 --dry-run", 300, bench=True,
                    cuda=True),
            Command("a2a_bench, 8 ranks (against a plain all-to-all)", a2a_launch(8),
                    "test -x {build}/a2a_bench", 180, bench=True, cuda=True),
            Command("kernel_report: the kernel profile's cases timed (beside the model's bounds: "
                    "make kernel-report MEASURED=kernel-times.tsv)",
                    "{build}/kernel_report --repeat 11 --measured-out {logs}/kernel-times.tsv",
                    None, 240, rule=f"{build}/kernel_report", bench=True,
                    cuda=True)]),
        Step("the Python ops tests and train_tiny.py on the real ops", [
            Command("test_ops.py (none may skip)", no_skip(
                        PYTHON_ENV + "{python} -B python/tests/run.py test_ops.py", "ops",
                        "^[0-9]* skipped$"),
                    PYTHON_ENV + "{python} -c 'from libdcp import _library; _library.cpu(); "
                    "_library.cuda()' && {python} -m py_compile python/tests/test_ops.py", 300,
                    cuda=True),
            Command("train_tiny.py", PYTHON_ENV + "{python} python/examples/train_tiny.py",
                    "{python} -m py_compile python/examples/train_tiny.py", 240)]),
        Step("calibration, then predicted against executed step times", [
            Command("calibrate", "{build}/calibrate --iterations 5",
                    "{build}/calibrate --iterations 5", 360, bench=True, cuda=True),
            Command("plan_vs_exec, E = 1", CALIBRATED_FLAGS +
                    "{build}/plan_vs_exec --iterations 5 $flags",
                    "{build}/plan_vs_exec --iterations 5 --dry-run >/dev/null", 240, bench=True,
                    cuda=True),
            Command("plan_vs_exec, E = D", CALIBRATED_FLAGS +
                    "{build}/plan_vs_exec --iterations 5 --sync-ranks 0 $flags",
                    "{build}/plan_vs_exec --iterations 5 --sync-ranks 0 --dry-run >/dev/null",
                    240, bench=True, cuda=True)]),
    ]


STEP_COUNT = 8
# What a lent GPU should answer first (docs/gpu-round.md): the primitives, the GPU tests alone,
# the benches of the blocked issues' targets, the torch ops, the calibration; then the full
# make test, the sanitizers, the multi-rank runs, the seeds, and the mutants (CPU only) last.
PRIORITY = "4,1.1,6,7,8,1.2,2,5,1.3,1.4,1.5,1.6,3"


def parse_steps(text: str, defined: List[Step]) -> List[Tuple[int, int]]:
    """STEPS: 'N' (step N's commands), 'N-M', 'N.K' (its K-th command) joined by commas, run in
    the order given, each command once. Returns (step, command) pairs, both from 1."""
    order: List[Tuple[int, int]] = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)|\.(\d+))?\s*", part)
        if not match:
            raise ValueError(f"STEPS: '{part}' is not N, N-M or N.K")
        first = int(match.group(1))
        last = int(match.group(2) or first)
        if not 1 <= first <= last <= STEP_COUNT:
            raise ValueError(f"STEPS: '{part}' is outside 1-{STEP_COUNT} or descending")
        for number in range(first, last + 1):
            count = len(defined[number - 1].commands)
            picked = [int(match.group(3))] if match.group(3) else range(1, count + 1)
            if not all(1 <= k <= count for k in picked):
                raise ValueError(f"STEPS: step {number} has commands 1-{count}, not '{part}'")
            order += [(number, k) for k in picked if (number, k) not in order]
    return order


def shell(text: str, timeout: float = 30) -> str:
    """A query's output, '' when it fails (a missing tool is an answer, not an error)."""
    try:
        done = subprocess.run(text, shell=True, cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def gpu_present() -> bool:
    return "GPU" in shell("nvidia-smi -L")


def device_facts(commit: str) -> Dict[str, str]:
    query = "nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap " \
            "--format=csv,noheader"
    gpu = [field.strip() for field in shell(query).split("\n")[0].split(",")]
    smi_cuda = re.search(r"CUDA Version:\s*([\d.]+)", shell("nvidia-smi"))
    nvcc = re.search(r"release ([\d.]+)", shell("nvcc --version"))
    dirty = shell("git status --porcelain --untracked-files=no")
    return {
        "device": gpu[0] if len(gpu) == 4 else "none (nvidia-smi lists no GPU)",
        "driver": gpu[1] if len(gpu) == 4 else "-",
        "memory": gpu[2] if len(gpu) == 4 else "-",
        "compute capability": gpu[3] if len(gpu) == 4 else "-",
        "CUDA": f"driver {smi_cuda.group(1) if smi_cuda else '-'}, "
                f"nvcc {nvcc.group(1) if nvcc else 'not found'}",
        "commit": commit + (" (with uncommitted changes)" if dirty else ""),
        "tools": tools(),
        "host": shell("hostname") or "-",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def tools() -> str:
    """What the steps need beyond the build: a missing one explains a failing step at once."""
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    found = {
        "compute-sanitizer": bool(shutil.which("compute-sanitizer")) or
        os.path.exists(os.path.join(cuda_home, "bin", "compute-sanitizer")),
        "clang++ (the CPU execution model)": bool(shutil.which("clang++")),
        "nccl.h": os.path.exists(os.path.join(cuda_home, "include", "nccl.h")),
        "torch": importlib.util.find_spec("torch") is not None,
        "fla (flash-linear-attention)": importlib.util.find_spec("fla") is not None,
    }
    return "; ".join(f"{name} {'yes' if present else 'MISSING'}"
                     for name, present in found.items())


def cuda_arch(capability: str) -> Optional[str]:
    """None: the Makefile's default (sm_80 and sm_90a); elsewhere sm_80 with its PTX, which
    the driver compiles for the device it finds. (make does not rebuild objects made for
    another CUDA_ARCH: a lent machine starts without build/.)"""
    return None if capability in NATIVE_CAPABILITIES else PTX_ARCH


class MemoryPoll:
    """The most GPU memory in use while a command runs (nvidia-smi, every second), MiB."""

    def __init__(self):
        self.peak: Optional[int] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self):
        while not self._stop.is_set():
            used = shell("nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits", 10)
            if used.split("\n")[0].isdigit():
                self.peak = max(self.peak or 0, int(used.split("\n")[0]))
            self._stop.wait(MEMORY_POLL_SECONDS)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def execute(text: str, log_path: str, limit_s: int, env: Dict[str, str]) -> Dict:
    """Runs shell text under a time limit (its whole process group killed at the limit), its
    output into log_path. Returns status (exit code, or None at the limit) and seconds."""
    start = time.monotonic()
    with open(log_path, "w") as log:
        log.write(f"$ {text}\n")
        log.flush()
        process = subprocess.Popen(text, shell=True, cwd=ROOT, stdout=log,
                                   stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            status: Optional[int] = process.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            stop_group(process)
            status = None
    seconds = time.monotonic() - start
    if status is None:
        with open(log_path, "a") as log:
            log.write(f"\n[gpu-round] killed at its time limit of {limit_s} s\n")
    return {"status": status, "seconds": round(seconds, 1)}


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM to the command's process group, then SIGKILL to whatever of it is left (the
    shell may exit first and leave a rank or a compiler running)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=KILL_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            pass


def tail(path: str, lines: int) -> List[str]:
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()[-lines:]
    except OSError:
        return []


def make_has_rule(target: str, fields: Dict[str, str]) -> bool:
    probe = subprocess.run(f"{fields['make']} -n {target}", shell=True, cwd=ROOT,
                           capture_output=True, text=True)
    return "No rule to make target" not in probe.stderr


class Round:
    """One call: the build (a real run), then the commands STEPS names, in that order, inside
    the time budget; the summary is rewritten after each command, so a call cut short by its
    machine still leaves one."""

    def __init__(self, args, earlier: List[Dict]):
        self.args = args
        self.earlier = earlier
        self.defined = steps(args.build)
        self.logs = os.path.abspath(args.logs)
        self.fields = {"build": args.build, "python": args.python, "logs": self.logs,
                       "make": f"{args.make} --no-print-directory BUILD={args.build}",
                       "sanitizer": args.sanitizer, "nproc": str(os.cpu_count() or 1),
                       "ring_repeat": str(args.ring_repeat)}
        # make's jobserver does not reach the commands (their descriptors are closed): each
        # make below runs its own, at the -j it inherits
        self.env = dict(os.environ, PYTHONUNBUFFERED="1",
                        DCP_CUDA_LIBRARY=os.path.abspath(f"{args.build}/libdcp_cuda.so"),
                        MAKEFLAGS=re.sub(r"--jobserver-(auth|fds)=\S+", "",
                                         os.environ.get("MAKEFLAGS", "")))
        self.started = time.monotonic()
        self.call = {"facts": device_facts(args.commit), "dry_run": args.dry_run,
                     "command": args.command, "started": time.time(), "build": None,
                     "commands": {}, "left": []}

    def text(self, template: str) -> str:
        return template.format(**self.fields)

    def limit(self, wanted: int) -> int:
        """A command's limit inside the time budget (0: no time left for one)."""
        if not self.args.time_budget:
            return wanted
        left = int(self.args.time_budget - SUMMARY_RESERVE_S - (time.monotonic() - self.started))
        return min(wanted, left) if left >= min(wanted, MIN_COMMAND_S) else 0

    def save(self) -> None:
        write(self.earlier + [self.call], self.args.out, self.args.logs)

    def run_build(self) -> None:
        arch = cuda_arch(self.call["facts"]["compute capability"])
        if arch:
            self.fields["make"] += f" CUDA_ARCH='{arch}'"
        text = self.text("{make} -j{nproc} gpu-round-build")
        limit = max(self.limit(self.args.build_limit), 1)  # without a build nothing runs
        result = execute(text, os.path.join(self.logs, "0-build.log"), limit, self.env)
        self.call["build"] = dict(result, command=text, log="0-build.log", limit_s=limit,
                                  arch=arch or "the default: sm_80 and sm_90a")
        print(f"gpu-round: build: {verdict(result['status'], limit)}", flush=True)
        self.save()

    def run_command(self, number: int, index: int) -> None:
        command = self.defined[number - 1].commands[index - 1]
        key = f"{number}.{index}"
        log = f"{number}-{index}-{slug(command.name)}.log"
        record = {"name": command.name, "limit_s": command.limit_s, "log": log,
                  "command": self.text(command.run)}
        if self.args.dry_run and command.cuda and self.args.no_cuda:
            record.update(result=NO_GPU, skipped=self.args.no_cuda)
        elif self.args.dry_run:
            record = self.dry_command(command, record)
        elif command.rule and not os.path.exists(command.rule) and \
                not make_has_rule(command.rule, self.fields):
            record["result"] = f"{NOT_BUILT}: make has no rule for {command.rule}"
        elif self.limit(command.limit_s) == 0:
            self.call["left"].append(key)
            return
        else:
            record = self.real_command(command, record)
        self.call["commands"][key] = record
        print(f"gpu-round: {key} {command.name}: {record['result']}", flush=True)
        self.save()

    def real_command(self, command: Command, record: Dict) -> Dict:
        limit = self.limit(command.limit_s)
        path = os.path.join(self.logs, record["log"])
        with MemoryPoll() as memory:
            record.update(execute(record["command"], path, limit, self.env))
        record.update(peak_mib=memory.peak, result=verdict(record["status"], limit))
        if limit < command.limit_s and record["status"] is None:
            record["result"] += " (the round's TIME_BUDGET)"
        if record["result"] != "pass":
            record["failure"] = tail(path, FAILURE_LINES)
        elif command.bench:  # the table, without the log's first line (the command)
            record["figures"] = tail(path, FIGURE_LINES + 1)[1:]
        return record

    def dry_command(self, command: Command, record: Dict) -> Dict:
        """The command's wiring: make can build what it needs, its dry form exits 0."""
        checks = []
        if command.rule and not os.path.exists(command.rule):
            checks.append(f"{self.fields['make']} -n {command.rule} >/dev/null")
        if command.dry:
            checks.append(self.text(command.dry))
        text = " && ".join(f"( {check} )" for check in checks) or "true"
        # no device for a wiring check, also on a GPU machine (make test there): a bench
        # given its real arguments then says "no CUDA device" instead of measuring
        record.update(execute(text, os.path.join(self.logs, record["log"]), DRY_LIMIT_S,
                              dict(self.env, CUDA_VISIBLE_DEVICES="")))
        record.update(wiring=text, result=NO_GPU, wired=record["status"] == 0)
        if not record["wired"]:
            record["failure"] = tail(os.path.join(self.logs, record["log"]), FAILURE_LINES)
        return record

    def run(self) -> Dict:
        os.makedirs(self.logs, exist_ok=True)
        if not self.args.dry_run:
            self.run_build()
        for number, index in parse_steps(self.args.steps, self.defined):
            self.run_command(number, index)
        if self.call["left"]:
            print(f"gpu-round: out of time: STEPS={','.join(self.call['left'])} not run",
                  flush=True)
        self.save()
        return self.call


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")[:40]


def verdict(status: Optional[int], limit_s: int) -> str:
    if status is None:
        return f"timeout: killed at {limit_s} s"
    return "pass" if status == 0 else f"FAIL: exit status {status}"


def failed(record: Dict) -> bool:
    return not record.get("wired", True) or \
        record["result"] not in ("pass", NO_GPU) and not record["result"].startswith(NOT_BUILT)


def step_result(records: List[Optional[Dict]]) -> str:
    """A step's line: its commands' results, those not run in any call counted apart."""
    ran = [r for r in records if r]
    if not ran:
        return "not run yet"
    skipped = [r["skipped"] for r in ran if r.get("skipped")]
    if skipped and len(skipped) == len(ran):
        result = f"{NO_GPU}; {SKIPPED}: {skipped[0]}"
    elif all(r["result"] == NO_GPU for r in ran):
        result = f"{NO_GPU}; " + ("wiring FAILED" if any(map(failed, ran)) else "wired")
        if skipped:
            result += f" ({len(skipped)} of {len(ran)} commands {SKIPPED}: {skipped[0]})"
    elif any(map(failed, ran)):
        result = f"FAIL ({sum(map(failed, ran))} of {len(ran)} commands)"
    else:
        result = NOT_BUILT if all(r["result"].startswith(NOT_BUILT) for r in ran) else "pass"
    return result + (f"; {len(records) - len(ran)} of {len(records)} commands not run yet"
                     if len(ran) < len(records) else "")


# ---- the summary: calls merged, Markdown, the logs bundled -----------------------------------
def merge(calls: List[Dict]) -> Dict:
    """Several calls as one round: each command from the latest call that ran it, the device
    facts of the latest call. Calls of other devices or commits are flagged in the summary."""
    calls = sorted(calls, key=lambda c: c["started"])
    merged = {"facts": calls[-1]["facts"], "dry_run": calls[-1]["dry_run"], "calls": calls,
              "commands": {}, "build": None}
    for call in calls:
        merged["commands"].update(call["commands"])
        merged["build"] = call["build"] or merged["build"]
    return merged


def step_records(round_: Dict, number: int, step: Step) -> List[Optional[Dict]]:
    ran = [int(key.split(".")[1]) for key in round_["commands"] if key.split(".")[0] == str(number)]
    count = max([len(step.commands)] + ran)
    return [round_["commands"].get(f"{number}.{k}") for k in range(1, count + 1)]


def not_run(round_: Dict, defined: List[Step]) -> str:
    """The STEPS that runs what no call has run, in PRIORITY's order; a whole step as 'N'."""
    missing = [(n, k) for n, k in parse_steps(PRIORITY, defined)
               if step_records(round_, n, defined[n - 1])[k - 1] is None]
    counts = collections.Counter(n for n, _ in missing)
    whole = {n for n, count in counts.items() if count == len(defined[n - 1].commands)}
    keys: List[str] = []
    for n, k in missing:
        key = str(n) if n in whole else f"{n}.{k}"
        if key not in keys:
            keys.append(key)
    return ",".join(keys)


def markdown(round_: Dict) -> str:
    defined = steps("build")
    lines = ["# GPU round" + (" (dry run: the wiring only, no GPU)" if round_["dry_run"] else ""),
             "", "| | |", "| --- | --- |"]
    lines += [f"| {key} | {value} |" for key, value in round_["facts"].items()]
    lines += ["", "| call | commands run | device | commit |", "| --- | --- | --- | --- |"]
    lines += [f"| `{c['command']}` ({c['facts']['date']}) | {','.join(c['commands'])} | "
              f"{c['facts']['device']} | {c['facts']['commit']} |" for c in round_["calls"]]
    if len({(c["facts"]["device"], c["facts"]["commit"]) for c in round_["calls"]}) > 1:
        lines += ["", "**The calls ran on different devices or commits: compare figures only "
                  "within one call.**"]
    build = round_["build"]
    if build:
        lines += ["", f"Build for {build['arch']}: {verdict(build['status'], build['limit_s'])}"
                  f" in {build['seconds']} s (log {build['log']})."]
    left = not_run(round_, defined)
    if left:
        lines += ["", f"Not run yet: `make gpu-round STEPS={left}` runs the rest."]
    lines += ["", "| step | what | result | seconds |", "| --- | --- | --- | --- |"]
    for number, step in enumerate(defined, 1):
        records = step_records(round_, number, step)
        seconds = sum(r.get("seconds", 0) for r in records if r)
        lines.append(f"| {number} | {step.title} | {step_result(records)} | {seconds:.0f} |")
    for number, step in enumerate(defined, 1):
        records = step_records(round_, number, step)
        if any(records):
            lines += step_section(number, step, records)
    lines += ["", "Targets (issue 29): attention forward >= 1.0x SDPA flash and backward >= "
              "1.0x flash on the four packs; conv1d forward >= 85% of copy bandwidth, backward "
              "<= 2.0 ms at the bench shape; finalize >= 90% of copy; predicted step within 10% "
              "of executed, same ranking."]
    return "\n".join(lines) + "\n"


def step_section(number: int, step: Step, records: List[Optional[Dict]]) -> List[str]:
    lines = ["", f"## Step {number}: {step.title}", ""]
    if step.note:
        lines += [f"Note: {step.note}.", ""]
    lines += ["| # | command | result | seconds | limit | peak GPU MiB | log |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for k, r in enumerate(records, 1):
        if r is None:
            name = step.commands[k - 1].name if k <= len(step.commands) else "?"
            lines.append(f"| {number}.{k} | {name} | not run yet | | | | |")
            continue
        result = r["result"] + ("" if r.get("wired", True) else "; wiring FAILED") + \
            (f"; {SKIPPED}: {r['skipped']}" if r.get("skipped") else "")
        peak = r.get("peak_mib")
        lines.append(f"| {number}.{k} | {r['name']} | {result} | {r.get('seconds', '')} | "
                     f"{r['limit_s']} | {'-' if peak is None else peak} | {r['log']} |")
    for r in filter(None, records):
        if r.get("figures"):
            lines += ["", f"{r['name']} ({r['log']}):", "", "```"] + r["figures"] + ["```"]
        if r.get("failure"):
            lines += ["", f"{r['name']}, the end of {r['log']}:", "", "```"] + r["failure"] + \
                ["```"]
    return lines


def bundle(logs: str, tar_path: str) -> None:
    """The logs as one .tar.gz (a lent machine returns few files); a log over LOG_BUNDLE_BYTES
    keeps its head and its tail."""
    with tarfile.open(tar_path, "w:gz") as tar:
        for root, _, files in os.walk(logs):
            for name in sorted(files):
                path = os.path.join(root, name)
                arcname = os.path.relpath(path, os.path.dirname(logs))
                if os.path.getsize(path) <= LOG_BUNDLE_BYTES:
                    tar.add(path, arcname)
                    continue
                with open(path, "rb") as log:
                    head = log.read(LOG_BUNDLE_BYTES // 2)
                    log.seek(-LOG_BUNDLE_BYTES // 2, os.SEEK_END)
                    data = head + b"\n[gpu-round: the middle of this log is cut]\n" + log.read()
                info = tarfile.TarInfo(arcname)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def summary_paths(out: str) -> Tuple[str, str, str]:
    """Markdown, JSON, logs. OUT may name a folder (the lent machine's $OUT): then inside it."""
    if os.path.isdir(out):
        out = os.path.join(out, "gpu-round.md")
    stem = out[:-3] if out.endswith(".md") else out
    return out, stem + ".json", stem + "-logs.tar.gz"


def read_calls(path: str) -> List[Dict]:
    with open(path) as f:
        saved = json.load(f)
    if saved.get("version") != FORMAT_VERSION:
        raise ValueError(f"{path}: format {saved.get('version')}, not {FORMAT_VERSION}")
    return saved["calls"]


def write(calls: List[Dict], out: str, logs: Optional[str]) -> str:
    md, js, tar = summary_paths(out)
    os.makedirs(os.path.dirname(os.path.abspath(md)), exist_ok=True)
    with open(js, "w") as f:
        json.dump({"version": FORMAT_VERSION, "calls": calls}, f, indent=1)
    with open(md, "w") as f:
        f.write(markdown(merge(calls)))
    if logs:
        bundle(logs, tar)
    return md


def earlier_calls(out: str, commit: str, dry_run: bool) -> List[Dict]:
    """The calls in the JSON beside OUT, when they ran this commit the same way (STEPS=1-3 then
    STEPS=4-8 on one machine make one summary); otherwise none: a fresh round."""
    try:
        calls = read_calls(summary_paths(out)[1])
    except (OSError, ValueError, KeyError):
        return []
    same = all(c["facts"]["commit"].split(" ")[0] == commit and c["dry_run"] == dry_run
               for c in calls)
    return calls if same else []


def arguments(argv: List[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", default=PRIORITY,
                        help=f"N, N-M or N.K, comma-separated, run in that order ({PRIORITY})")
    parser.add_argument("--out", default="build/gpu-round.md", help="the summary (or a folder)")
    parser.add_argument("--logs", default="build/gpu-round-logs", help="the raw logs' folder")
    parser.add_argument("--build", default="build", help="make's BUILD")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--no-cuda", default="", metavar="REASON",
                        help="no CUDA here (why): the dry run skips the commands of CUDA builds")
    parser.add_argument("--time-budget", type=int, default=0,
                        help="seconds for the whole call, build included (0: none)")
    parser.add_argument("--merge", nargs="+", metavar="JSON",
                        help="write OUT from these calls' JSON files; run nothing")
    parser.add_argument("--commit", default="")
    parser.add_argument("--python", default="python3")
    parser.add_argument("--make", default="make")
    parser.add_argument("--sanitizer", default="compute-sanitizer")
    parser.add_argument("--ring-repeat", type=int, default=20)
    parser.add_argument("--build-limit", type=int, default=BUILD_LIMIT_S)
    parser.add_argument("--command", default="make gpu-round", help="recorded in the summary")
    args = parser.parse_args(argv)
    args.commit = args.commit or shell("git rev-parse --short=12 HEAD") or "unknown"
    return args


def main(argv: List[str]) -> int:
    args = arguments(argv)
    if args.merge:
        calls = [call for path in args.merge for call in read_calls(path)]
        merged = merge(calls)
        print(f"gpu-round: {len(calls)} calls in {write(calls, args.out, None)}")
        return 1 if any(map(failed, merged["commands"].values())) else 0
    try:
        parse_steps(args.steps, steps(args.build))
    except ValueError as error:
        print(f"gpu-round: {error}", file=sys.stderr)
        return 2
    if not args.dry_run and not gpu_present():
        print("gpu-round: no GPU (nvidia-smi lists none): nothing run; `make gpu-round "
              "DRY_RUN=1` checks the wiring", file=sys.stderr)
        return 2
    earlier = earlier_calls(args.out, args.commit, args.dry_run)
    if not earlier and os.path.isdir(args.logs):
        shutil.rmtree(args.logs)  # a fresh round: no logs of another commit beside its own
    call = Round(args, earlier).run()
    merged = merge(earlier + [call])
    print(f"gpu-round: summary in {summary_paths(args.out)[0]}")
    return 1 if any(map(failed, merged["commands"].values())) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
