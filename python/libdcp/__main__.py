"""``python -m libdcp ARGS`` is ``dcp-plan ARGS``: the C CLI (see libdcp._cli)."""
import sys

from ._cli import main

if __name__ == "__main__":
    sys.exit(main())
