"""The GPU round (make gpu-round; docs/gpu-round.md): everything that needs a GPU, as one command.

A GPU is lent to this project rarely and briefly, so nothing may be spent on assembling commands
when one comes. The round builds for the device it finds, then runs the steps of issue 29 in the
order STEPS names (default 1-8), each command under its own time limit and with its own log,
never stopping at the first failure, and writes one Markdown summary (OUT, default
build/gpu-round.md): pass/fail per step, the benches' tables (figures and ratios), the peak GPU
memory per command, the device, driver, CUDA version and commit. Beside it: the same as JSON
(what later calls merge with) and the logs as one .tar.gz; the raw logs stay in LOGS.

--dry-run (make gpu-round DRY_RUN=1, run by make test) runs every command in its wiring mode
instead (the binaries exist or make has a rule for them, the scripts import, the arguments are
accepted) and marks every step "not run: no GPU". --merge combines the JSON of calls that ran
different steps (a lent machine allows about 10 minutes a call) into one summary.

Standard library only: it runs on the CI machine and on the lent GPU machine alike."""
import argparse
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
MEMORY_POLL_SECONDS = 1.0
FIGURE_LINES = 60           # a bench's table in the summary: its last lines
LOG_BUNDLE_BYTES = 2 << 20  # per log in the .tar.gz: the head and the tail when larger
FAILURE_LINES = 12          # of a failing command's log, quoted under its step
KILL_GRACE_SECONDS = 10
DRY_LIMIT_S = 120           # one command's wiring check
BUILD_LIMIT_S = 480         # the build on the lent machine (16 cores; dcp_cuda.o alone ~95 s)
# compute capabilities the default build (sm_80 and sm_90a cubins) runs natively
NATIVE_CAPABILITIES = ("8.0", "8.6", "8.7", "8.9", "9.0")
PTX_ARCH = "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_80,code=compute_80"


@dataclasses.dataclass
class Command:
    """One command of a step: `run` on a GPU machine, `dry` in the dry run (None: nothing to
    check beyond `rule`). Both are shell text formatted with {build}, {python}, {logs},
    {sanitizer}, {nproc} and {ring_repeat}. `rule`: a make target the command needs; the dry
    run asks make whether it can build it, and a real run reports NOT_BUILT when make has no
    rule for it. `bench`: its table goes into the summary."""
    name: str
    run: str
    dry: Optional[str]
    limit_s: int
    rule: Optional[str] = None
    bench: bool = False


@dataclasses.dataclass
class Step:
    number: int
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
    tools = (("memcheck", "--leak-check full"), ("racecheck", "--racecheck-report all"),
             ("initcheck", ""))
    commands = []
    for program in gpu_tests():
        for tool, flags in tools:
            commands.append(Command(
                f"{tool} {os.path.basename(program)}",
                f"{{sanitizer}} --tool {tool} {flags} --error-exitcode 1 {program}",
                None, 240, rule=program))
    return commands


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
        Step(1, "make test with no GPU test skipped, then 20 seeds", [
            Command("make test", "DCP_TEST_NO_SKIPS=1 {make} test",
                    "{make} -n test DCP_TEST_NO_SKIPS=1 GPU_PRESENT=yes >/dev/null", 600),
            Command("20 seeds", "{make} test-seeds SEEDS=20 DCP_TEST_NO_SKIPS=1 "
                    "SEED_LOGS={logs}/seeds",
                    "{make} -n test-seeds SEEDS=20 DCP_TEST_NO_SKIPS=1 >/dev/null", 540)]),
        Step(2, "compute-sanitizer memcheck, racecheck, initcheck over every GPU test",
             sanitizer_commands(build)),
        Step(3, "make test-mutants (every planted bug killed)", [
            Command("mutants", "{make} test-mutants", "{make} -n test-mutants >/dev/null", 600)],
             "runs on the CPU execution model (tests/cuda_cpu): no GPU needed"),
        Step(4, "the primitives' parity test on the GPU (issue 26)", [
            Command(os.path.basename(primitives), f"sh tests/run_tests.sh {primitives}",
                    None, 120, rule=primitives)]),
        Step(5, "make test-multirank at 2, 4, 6, 8 ranks; the ring example 20 times each", [
            Command("test-multirank", "MULTIRANK_REPEAT={ring_repeat} {make} test-multirank",
                    "{make} -n test-multirank >/dev/null && sh tests/multirank.sh "
                    "{build}/ring_attention_nccl", 570)]),
        Step(6, "benches: attention, conv1d, RoPE, merge, finalize, FLA, the all-to-all", [
            Command("attention_bench", "{build}/attention_bench --repeat 11",
                    "{build}/attention_bench --repeat 11", 240, bench=True),
            Command("attention_bench.py (SDPA flash, cuDNN)",
                    "{python} bench/attention_bench.py --repeat 11",
                    "{python} bench/attention_bench.py --repeat 11 --dry-run", 360, bench=True),
            Command("kernels_bench", "{build}/kernels_bench --repeat 21",
                    "{build}/kernels_bench --repeat 21", 180, bench=True),
            Command("kernels_bench.py (PyTorch, FLA)",
                    "{python} bench/kernels_bench.py --repeat 21",
                    "{python} bench/kernels_bench.py --repeat 21 --dry-run", 300, bench=True),
            Command("a2a_bench, 8 ranks (against a plain all-to-all)", a2a_launch(8),
                    "test -x {build}/a2a_bench", 180, bench=True)]),
        Step(7, "the Python ops tests and train_tiny.py on the real ops", [
            Command("test_ops.py", PYTHON_ENV + "{python} -B python/tests/run.py test_ops.py "
                    ">{logs}/ops.out 2>&1; status=$?; cat {logs}/ops.out; "
                    "if grep -q '^[0-9]* skipped$' {logs}/ops.out; then "
                    "echo 'skipped tests on a GPU machine count as failures'; exit 1; fi; "
                    "exit $status",
                    PYTHON_ENV + "{python} -c 'from libdcp import _library; _library.cpu(); "
                    "_library.cuda()' && {python} -m py_compile python/tests/test_ops.py", 300),
            Command("train_tiny.py", PYTHON_ENV + "{python} python/examples/train_tiny.py",
                    "{python} -m py_compile python/examples/train_tiny.py", 240)]),
        Step(8, "calibration, then predicted against executed step times", [
            Command("calibrate", "{build}/calibrate --iterations 5",
                    "{build}/calibrate --iterations 5", 360, bench=True),
            Command("plan_vs_exec, E = 1", CALIBRATED_FLAGS +
                    "{build}/plan_vs_exec --iterations 5 $flags",
                    "{build}/plan_vs_exec --iterations 5 --dry-run >/dev/null", 240, bench=True),
            Command("plan_vs_exec, E = D", CALIBRATED_FLAGS +
                    "{build}/plan_vs_exec --iterations 5 --sync-ranks 0 $flags",
                    "{build}/plan_vs_exec --iterations 5 --sync-ranks 0 --dry-run >/dev/null",
                    240, bench=True)]),
    ]


STEP_COUNT = 8


def parse_steps(text: str) -> List[int]:
    """'1-3', '6,4,1', '1-3,7': the steps in the order given, each once."""
    order: List[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not match:
            raise ValueError(f"STEPS: '{part}' is not N or N-M")
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if not 1 <= first <= last <= STEP_COUNT:
            raise ValueError(f"STEPS: '{part}' is outside 1-{STEP_COUNT} or descending")
        order += [n for n in range(first, last + 1) if n not in order]
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
    the driver compiles for the device it finds."""
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
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=KILL_GRACE_SECONDS)
            return
        except subprocess.TimeoutExpired:
            continue


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
    """One call: the build (real runs), then the steps STEPS names, in that order."""

    def __init__(self, args):
        self.args = args
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

    def text(self, template: str) -> str:
        return template.format(**self.fields)

    def run_build(self, facts: Dict[str, str]) -> Dict:
        arch = cuda_arch(facts["compute capability"])
        if arch:
            self.fields["make"] += f" CUDA_ARCH='{arch}'"
        text = self.text("{make} -j{nproc} gpu-round-build")
        result = execute(text, os.path.join(self.logs, "0-build.log"), self.args.build_limit,
                         self.env)
        return dict(result, command=text, log="0-build.log", limit_s=self.args.build_limit,
                    arch=arch or "the default: sm_80 and sm_90a")

    def run_command(self, step: Step, index: int, command: Command) -> Dict:
        log = f"{step.number}-{index + 1}-{slug(command.name)}.log"
        record = {"name": command.name, "limit_s": command.limit_s, "log": log,
                  "command": self.text(command.run)}
        if self.args.dry_run:
            return self.dry_command(command, record)
        if command.rule and not os.path.exists(command.rule) and \
                not make_has_rule(command.rule, self.fields):
            return dict(record, result=f"{NOT_BUILT}: make has no rule for {command.rule}")
        with MemoryPoll() as memory:
            record.update(execute(record["command"], os.path.join(self.logs, log),
                                  command.limit_s, self.env))
        record.update(peak_mib=memory.peak, result=verdict(record["status"], command.limit_s))
        if record["result"] != "pass":
            record["failure"] = tail(os.path.join(self.logs, log), FAILURE_LINES)
        elif command.bench:  # the table, without the log's first line (the command)
            record["figures"] = tail(os.path.join(self.logs, log), FIGURE_LINES + 1)[1:]
        return record

    def dry_command(self, command: Command, record: Dict) -> Dict:
        """The command's wiring: make can build what it needs, its dry form exits 0."""
        checks = []
        if command.rule and not os.path.exists(command.rule):
            checks.append(f"{self.fields['make']} -n {command.rule} >/dev/null")
        if command.dry:
            checks.append(self.text(command.dry))
        text = " && ".join(f"( {check} )" for check in checks) or "true"
        record.update(execute(text, os.path.join(self.logs, record["log"]), DRY_LIMIT_S,
                              self.env))
        record.update(wiring=text, result=NO_GPU, wired=record["status"] == 0)
        if not record["wired"]:
            record["failure"] = tail(os.path.join(self.logs, record["log"]), FAILURE_LINES)
        return record

    def run(self) -> Dict:
        os.makedirs(self.logs, exist_ok=True)
        facts = device_facts(self.args.commit)
        call = {"facts": facts, "dry_run": self.args.dry_run, "command": self.args.command,
                "started": time.time(), "build": None, "steps": {}}
        if not self.args.dry_run:
            call["build"] = self.run_build(facts)
            print(f"gpu-round: build: {verdict(call['build']['status'], self.args.build_limit)}",
                  flush=True)
        for number in parse_steps(self.args.steps):
            step = steps(self.args.build)[number - 1]
            started = time.monotonic()
            records = [self.run_command(step, i, c) for i, c in enumerate(step.commands)]
            call["steps"][str(number)] = {"title": step.title, "note": step.note,
                                          "commands": records,
                                          "seconds": round(time.monotonic() - started, 1)}
            print(f"gpu-round: step {number}: {step_result(call['steps'][str(number)])}",
                  flush=True)
        return call


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")[:40]


def verdict(status: Optional[int], limit_s: int) -> str:
    if status is None:
        return f"timeout: killed at {limit_s} s"
    return "pass" if status == 0 else f"FAIL: exit status {status}"


def step_result(step: Dict) -> str:
    results = [c["result"] for c in step["commands"]]
    if any(not c.get("wired", True) for c in step["commands"]):
        return f"{NO_GPU}; wiring FAILED"
    if all(r == NO_GPU for r in results):
        return f"{NO_GPU}; wired"
    failing = [r for r in results if r != "pass" and not r.startswith(NOT_BUILT)]
    if failing:
        return f"FAIL ({len(failing)} of {len(results)} commands)"
    return NOT_BUILT if all(r.startswith(NOT_BUILT) for r in results) else "pass"


def step_ok(step: Dict) -> bool:
    return step_result(step) in ("pass", NOT_BUILT, f"{NO_GPU}; wired")


# ---- the summary: calls merged, Markdown, the logs bundled -----------------------------------
def merge(calls: List[Dict]) -> Dict:
    """Several calls as one round: for each step the latest call that ran it, the device facts
    of the latest call. Calls of other devices or commits are flagged in the summary."""
    calls = sorted(calls, key=lambda c: c["started"])
    merged = {"facts": calls[-1]["facts"], "dry_run": calls[-1]["dry_run"], "calls": calls,
              "steps": {}, "build": None}
    for call in calls:
        merged["steps"].update(call["steps"])
        merged["build"] = call["build"] or merged["build"]
    return merged


def markdown(round_: Dict) -> str:
    lines = ["# GPU round" + (" (dry run: the wiring only, no GPU)" if round_["dry_run"] else ""),
             "", "| | |", "| --- | --- |"]
    lines += [f"| {key} | {value} |" for key, value in round_["facts"].items()]
    lines += ["", "| call | steps | device | commit |", "| --- | --- | --- | --- |"]
    lines += [f"| `{c['command']}` ({c['facts']['date']}) | {','.join(c['steps'])} | "
              f"{c['facts']['device']} | {c['facts']['commit']} |" for c in round_["calls"]]
    if len({(c["facts"]["device"], c["facts"]["commit"]) for c in round_["calls"]}) > 1:
        lines += ["", "**The calls ran on different devices or commits: compare figures only "
                  "within one call.**"]
    build = round_["build"]
    if build:
        lines += ["", f"Build for {build['arch']}: {verdict(build['status'], build['limit_s'])} in "
                  f"{build['seconds']} s (log {build['log']})."]
    lines += ["", "| step | what | result | seconds |", "| --- | --- | --- | --- |"]
    for number, step in enumerate(steps("build"), 1):
        ran = round_["steps"].get(str(number))
        lines.append(f"| {number} | {step.title} | {step_result(ran) if ran else 'not run yet'}"
                     f" | {ran['seconds'] if ran else ''} |")
    for number in sorted(round_["steps"], key=int):
        lines += step_section(number, round_["steps"][number])
    lines += ["", "Targets (issue 29): attention forward >= 1.0x SDPA flash and backward >= "
              "1.0x flash on the four packs; conv1d forward >= 85% of copy bandwidth, backward "
              "<= 2.0 ms at the bench shape; finalize >= 90% of copy; predicted step within 10% "
              "of executed, same ranking."]
    return "\n".join(lines) + "\n"


def step_section(number: str, step: Dict) -> List[str]:
    lines = ["", f"## Step {number}: {step['title']}", ""]
    if step["note"]:
        lines += [f"Note: {step['note']}.", ""]
    lines += ["| command | result | seconds | limit | peak GPU MiB | log |",
              "| --- | --- | --- | --- | --- | --- |"]
    for c in step["commands"]:
        result = c["result"] + ("" if c.get("wired", True) else "; wiring FAILED")
        peak = c.get("peak_mib")
        lines.append(f"| {c['name']} | {result} | {c.get('seconds', '')} | {c['limit_s']} | "
                     f"{'-' if peak is None else peak} | {c['log']} |")
    for c in step["commands"]:
        if c.get("figures"):
            lines += ["", f"{c['name']} ({c['log']}):", "", "```"] + c["figures"] + ["```"]
        if c.get("failure"):
            lines += ["", f"{c['name']}, the end of {c['log']}:", "", "```"] + c["failure"] + \
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
    parser.add_argument("--steps", default="1-8", help="e.g. 1-3 or 6,4,1 (run in that order)")
    parser.add_argument("--out", default="build/gpu-round.md", help="the summary (or a folder)")
    parser.add_argument("--logs", default="build/gpu-round-logs", help="the raw logs' folder")
    parser.add_argument("--build", default="build", help="make's BUILD")
    parser.add_argument("--dry-run", action="store_true")
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
        print(f"gpu-round: {len(calls)} calls in {write(calls, args.out, None)}")
        return 0
    try:
        parse_steps(args.steps)
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
    calls = earlier + [Round(args).run()]
    print(f"gpu-round: summary in {write(calls, args.out, args.logs)}")
    return 0 if all(step_ok(step) for step in merge(calls)["steps"].values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
