#!/bin/sh
# The documented-returns check: the (function, dcp_status) pairs the comments of dcp.h's
# declarations name and the cases of tests/test_documented.c (which make each one happen) are
# the same set (tests/documented_returns.py says how a comment is matched to its function).
# Ends with "N passed, M failed".
cd "$(dirname "$0")/.." || exit 1
PYTHON=${PYTHON:-python3}
if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "skip the documented-returns check: $PYTHON not found"
    echo "1 skipped"
    echo "0 passed, 0 failed"
    exit 0
fi
if "$PYTHON" tests/documented_returns.py dcp.h tests/test_documented.c; then
    echo "ok   every documented return is tested, every tested return documented"
    echo "1 passed, 0 failed"
else
    echo "FAIL the comments of dcp.h and tests/test_documented.c name different returns"
    echo "0 passed, 1 failed"
    exit 1
fi
