#!/bin/sh
# The Python package's tests (python/tests) against this checkout's build/libdcp.so, with the
# standard library only; the torch tests inside skip without torch or a GPU. Ends with
# "N passed, M failed" (python/tests/run.py). Needs `make build/libdcp.so build/dcp-plan
# build/dcp-struct-layout` (make test builds them).
cd "$(dirname "$0")/.." || exit 1
PYTHON=${PYTHON:-python3}
if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "no $PYTHON: skipped"
    echo "1 skipped"
    echo "0 passed, 0 failed"
    exit 0
fi
PYTHONPATH=python DCP_LIBRARY=build/libdcp.so DCP_BUILD=build \
    exec "$PYTHON" -B python/tests/run.py
