"""Writes the kernel profile into bench/RESULTS.md as its last section, "## Kernel profile (CPU
execution model)": the section is replaced where it exists (from its heading to the end of the
file), appended otherwise; nothing above it changes.

  python3 tests/cuda_cpu/results_section.py RESULTS.md REPORT.md SASS.md COMMAND
"""
import datetime
import sys

HEADING = "## Kernel profile (CPU execution model)"
INTRO = """\
Written by `{command}` on {date}. **No figure here ran on a GPU.** Every number is either
counted by the CPU execution model (`tests/cuda_cpu/profile.h`: the addresses each lane of each
warp gives each memory instruction, grouped into warp-level requests) or read from the static
SASS and ptxas output of the device build (`build/dcp_cuda.o`, sm_80 and sm_90a). The shapes are
the benches' scaled down to what the model runs in minutes (bench/kernels_bench.cu and
bench/attention_bench.cu use 64K-token packs, 32 q and 8 kv heads of dim 128 and 8,192 channels;
here documents of 1K-4K rows, 1-2 q heads for 1 kv head, 512-1,024 channels; 16K-row documents
are out of the model's reach). Per kernel:

- *global sectors/req*: 32-byte sectors one warp-level request touches, and in parentheses the
  fewest that hold the bytes it asked for; *global eff.* is their ratio over all requests
  (coalescing: 100% moves no byte it does not use);
- *shared wavefronts/req*: bank-conflict passes per request (ldmatrix: per matrix), and the
  ideal one per 128 bytes; *shared eff.* their ratio;
- *DRAM MB*: distinct sectors of device memory the kernel touched (each moved at least once);
- *bound µs*: time >= max(DRAM bytes / bandwidth, mma flops / tensor peak, warp instructions /
  issue rate), with the term that sets it; the warp instructions are only those the model sees
  (memory requests, mma, shuffles, barriers), so this is a lower bound, not an estimate. The
  hardware figures and their sources are in the last table. A GPU round (docs/gpu-round.md)
  records the measured time beside each bound.

`make test` checks every kernel's coalescing and bank-conflict efficiency on small shapes
against `tests/cuda_cpu/kernel_thresholds.txt` (today's values): a change that makes a load
uncoalesced or a tile bank-conflicted fails it (tests/mutants.sh plants both).
"""


def main(argv):
    if len(argv) != 5:
        sys.exit("usage: results_section.py RESULTS.md REPORT.md SASS.md COMMAND")
    results, report, sass, command = argv[1:]
    text = open(results).read()
    at = text.find("\n" + HEADING + "\n")
    head = text[:at + 1] if at >= 0 else text.rstrip("\n") + "\n\n"
    section = "%s\n\n%s\n%s\nStatic SASS of the same kernels (main loop: see "\
              "tests/cuda_cpu/sass_profile.py):\n\n%s" % (
                  HEADING, INTRO.format(command=command, date=datetime.date.today().isoformat()),
                  open(report).read().rstrip("\n") + "\n", open(sass).read())
    open(results, "w").write(head + section)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
