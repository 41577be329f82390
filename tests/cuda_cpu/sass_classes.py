"""Instruction counts by class, per kernel and architecture, of `cuobjdump -sass` output.

The check that the CPU execution model's changes to dcp_cuda.cu (PTX wrappers, the launch
helper, the shared-memory macro) leave the GPU build alone: dump the SASS of an object built
before and after, and compare the counts of every kernel the two have in common.

  cuobjdump -sass build/dcp_cuda.o > after.sass       (cuobjdump and nvdisasm: pip install
  python3 tests/cuda_cpu/sass_classes.py before.sass after.sass    nvidia-cuda-cuobjdump
                                                                   nvidia-cuda-nvdisasm)
With one file it prints the counts; with two it prints every kernel whose counts differ and
the kernels only one side has, and exits 1 when a kernel of both differs in any class.
--rename PATTERN REPLACEMENT (after the files, repeatable) renames the second file's kernels
first (re.sub on the mangled name), for a kernel that gained a template parameter.
"""
import re
import sys

# Opcode (before the first '.') -> class. Anything else counts only in "total".
CLASSES = {
    "global": ("LDG", "STG", "ATOMG", "RED", "ATOM"),
    "shared": ("LDS", "STS", "LDSM", "ATOMS"),
    "local": ("LDL", "STL"),           # spills
    "async": ("LDGSTS", "LDGDEPBAR", "DEPBAR", "UTMALDG", "SYNCS"),
    "mma": ("HMMA", "HGMMA", "WARPGROUP"),
    "barrier": ("BAR", "WARPSYNC"),
    "shuffle": ("SHFL", "VOTE"),
}
FUNCTION = re.compile(r"^\s*Function : (\S+)")
ARCH = re.compile(r"^\s*arch = (sm_\w+)")
INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")


def classify(opcode):
    base = opcode.split(".")[0]
    if opcode.startswith("MUFU.EX2"):
        return "ex2"
    for name, opcodes in CLASSES.items():
        if base in opcodes:
            return name
    return None


def counts_of(path):
    """{(arch, function): {class: count}} of one dump."""
    result, arch, function = {}, None, None
    with open(path) as f:
        for line in f:
            m = ARCH.match(line)
            if m:
                arch = m.group(1)
                continue
            m = FUNCTION.match(line)
            if m:
                function = (arch, m.group(1))
                result[function] = {"total": 0}
                continue
            m = INSTRUCTION.match(line)
            if m and function:
                counts = result[function]
                counts["total"] += 1
                kind = classify(m.group(1))
                if kind:
                    counts[kind] = counts.get(kind, 0) + 1
    return result


def row(counts):
    names = ["total", "global", "shared", "local", "async", "mma", "ex2", "barrier", "shuffle"]
    return " ".join("%s %d" % (n, counts.get(n, 0)) for n in names)


def main(argv):
    if len(argv) == 2:
        for (arch, function), counts in sorted(counts_of(argv[1]).items()):
            print(arch, function, row(counts))
        return 0
    before, after = counts_of(argv[1]), counts_of(argv[2])
    renames = argv[3:]
    if len(renames) % 3 or any(r != "--rename" for r in renames[::3]):
        sys.exit("usage: sass_classes.py BEFORE [AFTER [--rename PATTERN REPLACEMENT]...]")
    for pattern, replacement in zip(renames[1::3], renames[2::3]):
        after = {(arch, re.sub(pattern, replacement, name)): counts
                 for (arch, name), counts in after.items()}
    common = sorted(set(before) & set(after))
    differ = 0
    for key in common:
        b, a = before[key], after[key]
        classes = set(b) | set(a)
        changed = sorted(c for c in classes if c != "total" and b.get(c, 0) != a.get(c, 0))
        if changed or b["total"] != a["total"]:
            print("%s %s:\n  before %s\n  after  %s" % (key[0], key[1], row(b), row(a)))
            differ += bool(changed)
    for key in sorted(set(before) - set(after)):
        print("only before: %s %s" % key)
    for key in sorted(set(after) - set(before)):
        print("only after:  %s %s %s" % (key[0], key[1], row(after[key])))
    print("%d kernels in both, %d differ in a class (memory, mma, ex2, barrier, ...), "
          "%d differ only in their total" %
          (len(common), differ,
           sum(1 for k in common if before[k]["total"] != after[k]["total"]) - differ))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
