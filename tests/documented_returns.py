"""The documented-returns check (tests/test_documented.sh): every dcp_status a public function's
comment in dcp.h names is one a test of tests/test_documented.c makes it return, and every
case of that test is documented.

A comment documents the first function declared after it (DCPDEF at the start of a line)
before the next comment that starts a line; #define lines and typedefs (with their field
comments) may sit between, as they do before dcp_plan_svg and dcp_plan_flops_stats. The CUDA
entry points (DCP_CUDA_DEF) are left to the CUDA tests, which need nvcc.

Usage: python3 tests/documented_returns.py dcp.h tests/test_documented.c  (exit 1 naming every
pair that is documented and untested, or tested and undocumented)."""
import re
import sys

STATUS = re.compile(r"\bDCP_(?:ERROR_[A-Z_]+|OK)\b")
DECLARATION = re.compile(r"^DCPDEF\b[^(]*?\b(dcp_[a-z0-9_]+)\s*\(")
CASE = re.compile(r'\{\s*"(dcp_[a-z0-9_]+)",\s*(DCP_(?:ERROR_[A-Z_]+|OK))\s*,')


def documented(header_text):
    """{(function, status)} from the declarations part of dcp.h."""
    lines = header_text[:header_text.index("#ifdef DCP_IMPLEMENTATION")].splitlines()
    pairs, comment, inside = set(), None, False
    for line in lines:
        if inside:
            comment.append(line)
            inside = "*/" not in line
            continue
        if line.startswith("/*"):
            comment, inside = [line], "*/" not in line
            continue
        match = DECLARATION.match(line)
        if match and comment is not None:
            for status in STATUS.findall("\n".join(comment)):
                pairs.add((match.group(1), status))
            comment = None  # the first declaration after a comment takes it
    return pairs


def tested(test_text):
    return set(CASE.findall(test_text))


def main(argv):
    docs = documented(open(argv[0]).read())
    cases = tested(open(argv[1]).read())
    untested = sorted(docs - cases)
    undocumented = sorted(cases - docs)
    for function, status in untested:
        print(f"documented, not tested: {function} returns {status}")
    for function, status in undocumented:
        print(f"tested, not documented: {function} returns {status}")
    print(f"{len(docs)} documented returns, {len(cases)} tested")
    return 1 if untested or undocumented else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
