#!/bin/sh
# libdcp.ops on the CPU execution model: python/tests/test_ops.py (its GPU tests and
# python/examples/train_tiny.py through the kernels included) with build/libdcp_cuda-cpu.so as
# libdcp_cuda.so, on torch CPU tensors. make test-torch-cpu passes build/venv-megatron's python
# (make test-megatron installs torch there); without torch it says so and exits 0.
#   usage: sh tests/test_torch_cpu.sh [PYTHON]
PYTHON=${1:-python3}
case $PYTHON in  # a path is the caller's: this script changes directory twice
    /*) ;;
    */*) PYTHON=$PWD/$PYTHON ;;
esac
cd "$(dirname "$0")/.." || exit 1
if ! "$PYTHON" -c "import torch" >/dev/null 2>&1; then
    echo "no torch in $PYTHON (make test-megatron installs it in build/venv-megatron): skipped"
    exit 0
fi
cd python/tests || exit 1
PYTHONPATH=.. DCP_LIBRARY=../../build/libdcp.so DCP_CUDA_LIBRARY=../../build/libdcp_cuda-cpu.so \
    exec "$PYTHON" -B -m unittest -v test_ops
