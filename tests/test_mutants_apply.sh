#!/bin/sh
# Every planted bug of tests/mutants.sh still applies to dcp_cuda.cu (its text occurs exactly
# once): checked in make test in seconds, without the compiles of make test-mutants, so that a
# kernel rewritten without its mutant fails here rather than at the next mutant run.
# Ends with "N passed, M failed".
cd "$(dirname "$0")/.." || exit 1
MUTANTS_APPLY_ONLY=1 BUILD=build exec sh tests/mutants.sh
