#!/usr/bin/env python3
"""Writes dcp.h, the one file a user vendors, from the domain sources in src/.

src/dcp.h.in is the skeleton (the user's documentation, the include guard, the implementation
switch, the license). Its lines `@@ declarations` and `@@ implementation` are replaced by that
part of every domain file, in the order src/dcp.h.in's `@@ parts` line lists them. A domain file
holds its declarations after a line `//@@ declarations` and its implementation after a line
`//@@ implementation`; either part may be absent; what comes before the first marker (the
file's own introduction for its reader) stays in src/. SQLite's amalgamation and miniaudio work
the same way: readers and editors use the parts, users the one file.

    tools/amalgamate.py            write dcp.h
    tools/amalgamate.py --check    exit 1 (and say which) when dcp.h differs from its sources
"""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SKELETON = ROOT / "src" / "dcp.h.in"
OUTPUT = ROOT / "dcp.h"
PART_MARKER = "//@@ "
SLOT_MARKER = "@@ "
PART_NAMES = ("declarations", "implementation")


def read_parts(path):
    """{part name: text} of one domain file."""
    parts, current = {}, None
    for number, line in enumerate(path.read_text().splitlines(keepends=True), 1):
        if line.startswith(PART_MARKER):
            current = line[len(PART_MARKER):].strip()
            if current not in PART_NAMES or current in parts:
                sys.exit(f"{path}:{number}: unknown or repeated part marker {line.strip()!r}")
            parts[current] = []
        elif current is not None:
            parts[current].append(line)
    return {name: "".join(lines) for name, lines in parts.items()}


def amalgamate():
    lines = SKELETON.read_text().splitlines(keepends=True)
    domains = None
    out = []
    for number, line in enumerate(lines, 1):
        if not line.startswith(SLOT_MARKER):
            out.append(line)
            continue
        words = line[len(SLOT_MARKER):].split()
        if words and words[0] == "parts":
            domains = [(name, read_parts(ROOT / "src" / name)) for name in words[1:]]
        elif words and words[0] in PART_NAMES and domains is not None:
            for name, parts in domains:
                if words[0] in parts:
                    out.append(f"/* -- src/{name} -- */\n")
                    out.append(parts[words[0]])
        else:
            sys.exit(f"{SKELETON}:{number}: expected '@@ parts FILE...' before "
                     f"'@@ declarations' or '@@ implementation', got {line.strip()!r}")
    return "".join(out)


def main(argv):
    text = amalgamate()
    if argv[1:] == ["--check"]:
        if OUTPUT.read_text() != text:
            print("dcp.h is stale: edit src/ and run tools/amalgamate.py (make amalgamate)")
            return 1
        print("dcp.h matches src/")
        return 0
    if argv[1:]:
        sys.exit(__doc__)
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
