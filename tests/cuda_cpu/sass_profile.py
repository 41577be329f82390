"""Static SASS figures of the kernels in the kernel report: per kernel and architecture (sm_80,
sm_90a) the registers, spills and stack (tests/cuda_cpu/kernel_limits.inc, from ptxas), and
the instruction mix of the main loop of `cuobjdump -sass build/dcp_cuda.o`.

The main loop: of the loops (a backward branch and the code from its target to it), the
innermost one that holds at least half of the kernel's busiest loop's work (mma, then memory
instructions): where the kernel spends its time when it is long-running. A kernel without a
backward branch shows its whole body ("no loop").

  python3 tests/cuda_cpu/sass_profile.py SASS_DUMP KERNEL_LIMITS KERNELS > table.md
      SASS_DUMP: cuobjdump -sass build/dcp_cuda.o; KERNELS: mangled names, one a line
      (build/kernel_report-cpu --kernels FILE)
"""
import re
import subprocess
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from sass_classes import ARCH, FUNCTION, classify  # noqa: E402

LINE = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)"
                  r"(?:\s+(0x[0-9a-f]+))?")
MIX = ["mma", "shared", "global", "async", "local", "barrier", "shuffle", "ex2"]
HALF = 0.5


def functions(path):
    """{(arch, kernel): [(address, opcode, branch target or None)]} of one dump."""
    result, arch, current = {}, None, None
    with open(path) as f:
        for line in f:
            m = ARCH.match(line)
            if m:
                arch = m.group(1)
                continue
            m = FUNCTION.match(line)
            if m:
                current = result.setdefault((arch, m.group(1)), [])
                continue
            m = LINE.match(line)
            if m and current is not None:
                target = int(m.group(3), 16) if m.group(2).startswith("BRA") and m.group(3) else None
                current.append((int(m.group(1), 16), m.group(2), target))
    return result


def weight(instructions):
    """(mma, memory) instruction counts: the order loops are compared in."""
    kinds = [classify(op) for _, op, _ in instructions]
    return (kinds.count("mma"), sum(k in ("shared", "global", "async") for k in kinds))


def main_loop(instructions):
    """The instructions of the main loop, and whether there is a loop at all."""
    loops = []
    for i, (address, _, target) in enumerate(instructions):
        if target is not None and target < address:
            body = [x for x in instructions if target <= x[0] <= address]
            loops.append((address - target, body))
    if not loops:
        return instructions, False
    busiest = max(weight(body) for _, body in loops)
    enough = [(span, body) for span, body in loops
              if all(w >= HALF * b for w, b in zip(weight(body), busiest))]
    return min(enough, key=lambda loop: loop[0])[1], True


def limits(path):
    """{(kernel, arch number): (registers, stack, spill stores, spill loads)}."""
    result = {}
    row = re.compile(r'^\{"(\S+)", (\d+), (\d+), \d+, \d+, \d+, \d+, (\d+), (\d+), (\d+)\},')
    with open(path) as f:
        for line in f:
            m = row.match(line)
            if m:
                result[(m.group(1), int(m.group(2)))] = tuple(int(x) for x in m.groups()[2:])
    return result


def short(mangled):
    name = subprocess.run(["c++filt", mangled], capture_output=True, text=True).stdout.strip()
    name = name.split("(")[0].replace("void ", "").replace("dcp_cuda__", "")
    return name.replace("__nv_bfloat16", "bf16")


def main(argv):
    if len(argv) != 4:
        sys.exit("usage: sass_profile.py SASS_DUMP KERNEL_LIMITS KERNELS")
    code, table = functions(argv[1]), limits(argv[2])
    with open(argv[3]) as f:
        wanted = [line.strip() for line in f if line.strip()]
    print("| kernel | arch | regs | stack / spill st / spill ld (bytes) | instructions | "
          "main loop | " + " | ".join(MIX) + " | other |")
    print("|---|---|---|---|---|---|" + "---|" * (len(MIX) + 1))
    for kernel in wanted:
        for arch in ("sm_80", "sm_90a"):
            body = code.get((arch, kernel))
            if body is None:
                continue
            loop, looped = main_loop(body)
            kinds = [classify(op) for _, op, _ in loop]
            counts = [kinds.count(k) for k in MIX]
            regs, stack, stores, loads = table.get((kernel, int(arch[3:5])), (0, 0, 0, 0))
            print("| `%s` | %s | %d | %d / %d / %d | %d | %s | %s | %d |" % (
                short(kernel), arch, regs, stack, stores, loads, len(body),
                "%d instructions" % len(loop) if looped else "no loop",
                " | ".join(str(c) for c in counts), len(loop) - sum(counts)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
