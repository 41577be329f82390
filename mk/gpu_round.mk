# The GPU round: everything that needs a GPU, in one command.
# `make gpu-round` on a machine with a GPU (docs/gpu-round.md): builds for the device it finds
# (gpu-round-build), then runs the round's steps in the order STEPS names (N, N-M, or N.K for
# step N's K-th command; default: the most important first, tests/gpu_round.py's PRIORITY),
# each command under its own time limit with its own log in GPU_ROUND_LOGS, never stopping at a
# failure, within TIME_BUDGET seconds when set (what does not fit is named for the next call),
# and writes the summary OUT (default build/gpu-round.md; where OUT names a folder, gpu-round.md
# inside it) with its .json and -logs.tar.gz beside it. A later call of the same commit merges
# into the same OUT; `make gpu-round-merge ROUNDS="a.json b.json"` merges calls brought back
# from elsewhere. DRY_RUN=1 (make test runs it: tests/test_gpu_round.sh) runs each command's
# wiring check and marks every step "not run: no GPU"; without nvcc it skips the commands that
# need the CUDA builds, saying why (CUDA_SKIP_REASON). COMMIT names the commit where the tree
# has no .git.
OUT ?= $(BUILD)/gpu-round.md
STEPS ?=
DRY_RUN ?= 0
TIME_BUDGET ?= 0
GPU_ROUND_LOGS ?= $(BUILD)/gpu-round-logs
# the primitives' parity test (step 4): named here once
GPU_ROUND_PRIMITIVES := $(BUILD)/test_cuda_primitives
GPU_ROUND_SANITIZER := $(or $(shell command -v $(COMPUTE_SANITIZER) 2>/dev/null),\
                         $(CUDA_HOME)/bin/compute-sanitizer)
GPU_ROUND_DRY := $(filter 1,$(DRY_RUN))
.PHONY: gpu-round gpu-round-build gpu-round-merge
gpu-round-build: tests $(GPU_TEST_PROGRAMS) $(GPU_ROUND_PRIMITIVES) $(BUILD)/kernel_report
gpu-round: $(if $(GPU_ROUND_DRY),tests)
	+GPU_ROUND_GPU_TESTS="$(GPU_TESTS) $(BUILD)/test_nccl_gpu" \
	    GPU_ROUND_PRIMITIVES=$(GPU_ROUND_PRIMITIVES) $(PYTHON3) tests/gpu_round.py \
	    $(if $(STEPS),--steps '$(STEPS)') --out '$(OUT)' --logs '$(GPU_ROUND_LOGS)' \
	    --build $(BUILD) --make '$(MAKE)' --sanitizer '$(GPU_ROUND_SANITIZER)' \
	    --time-budget $(TIME_BUDGET) $(if $(COMMIT),--commit $(COMMIT)) \
	    $(if $(GPU_ROUND_DRY),--dry-run) $(if $(HAVE_NVCC),,--no-cuda '$(CUDA_SKIP_REASON)') \
	    --command 'make gpu-round$(if $(STEPS), STEPS=$(STEPS))$(if $(GPU_ROUND_DRY), DRY_RUN=1)'
gpu-round-merge:
	GPU_ROUND_GPU_TESTS="$(GPU_TESTS) $(BUILD)/test_nccl_gpu" $(PYTHON3) tests/gpu_round.py \
	    --out '$(OUT)' --merge $(ROUNDS)
SCRIPT_TESTS += tests/test_gpu_round.sh
