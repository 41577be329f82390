"""The ``dcp-plan`` command of the package and ``python -m libdcp``: both execute the C program
examples/dcp_plan.c (``pip install ./python`` compiles it into the package's _native/ folder,
as it compiles libdcp.so), so options, output, messages and exit codes are the C CLI's byte for
byte, with nothing re-implemented in Python to drift from it.

The program is looked up like the library: $DCP_PLAN, the package's _native/ folder, the
repository's build/ (`make build/dcp-plan`, for PYTHONPATH=python or an editable install).
"""
import os
import sys
from typing import List, Optional, Sequence

from ._library import candidates

PROGRAM = "dcp-plan"
PROGRAM_ENV = "DCP_PLAN"  # full path of a dcp-plan program to use instead of the search
# The C CLI's exit status for bad usage (EXIT_USAGE in examples/dcp_plan.c): a missing program
# is the installation's fault, not a failed plan (1).
EXIT_NOT_FOUND = 2


def program_path() -> Optional[str]:
    """The dcp-plan program ``main`` runs, or None when none is installed or built."""
    return next((path for path in candidates(PROGRAM, PROGRAM_ENV)
                 if os.path.isfile(path) and os.access(path, os.X_OK)), None)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Replaces this process with dcp-plan run on ``argv`` (default: the command line's
    arguments). Returns only when no program is found: then it prints one line naming the
    paths it tried and returns 2, as the CLI does for bad usage."""
    arguments: List[str] = list(sys.argv[1:] if argv is None else argv)
    path = program_path()
    if path is None:
        tried = "; ".join(candidates(PROGRAM, PROGRAM_ENV))
        print(f"{PROGRAM}: the {PROGRAM} program is not installed (tried {tried}); reinstall "
              f"the package (pip install ./python builds it), run `make build/{PROGRAM}` in "
              f"the repository, or set {PROGRAM_ENV}", file=sys.stderr)
        return EXIT_NOT_FOUND
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, [PROGRAM] + arguments)
    return EXIT_NOT_FOUND  # not reached: execv returns only by raising OSError
