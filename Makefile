# libdcp. `make` builds what a user runs (the dcp-plan CLI and build/libdcp.so; `make cuda`
# adds build/libdcp_cuda.so); `make test` builds and runs every test; `make help` lists the
# rest. The rules live in mk/, one file per subject:
#   mk/config.mk     the toolchain, flags, and what this machine can build
#   mk/library.mk    the user's parts, examples, the planner bench, dcp.h from src/, demo
#   mk/tests.mk      the one list of test programs and their variants, the runner, seeds, fuzz
#   mk/cuda.mk       dcp_cuda.cu under nvcc: the CUDA library, GPU tests and benches
#   mk/cpu_model.mk  the kernels on the CPU execution model, the kernel profile, planted bugs
#   mk/nccl.mk       dcp_nccl.h over the host transport, against NCCL, on N ranks of one GPU
#   mk/megatron.mk   the Python tests that need torch and megatron-core
#   mk/gpu_round.mk  everything that needs a GPU, in one command
# Without nvcc (or without NCCL) the CPU parts still build and run: `make test` says which
# CUDA/NCCL parts it skips and why. CI has both and runs everything.

.DEFAULT_GOAL := all
include mk/config.mk
include mk/library.mk
include mk/tests.mk
include mk/cuda.mk
include mk/cpu_model.mk
include mk/nccl.mk
include mk/megatron.mk
include mk/gpu_round.mk

.PHONY: all tests test help clean report-skips
all: $(LIBRARY_PARTS)

# make test's runner: TEST_JOBS programs at a time, each one's output whole and in list order
# (tests/run_tests.sh), each one's seconds in build/test-times.tsv.
tests: $(TEST_PROGRAMS) $(TEST_BUILDS)
test: tests report-skips
	DCP_TEST_JOBS=$(TEST_JOBS) DCP_TEST_TIMES=$(BUILD)/test-times.tsv \
	    sh tests/run_tests.sh $(TEST_PROGRAMS) $(SCRIPT_TESTS)

help:
	@echo 'Build (results in $(BUILD)/)'
	@echo '  make                the dcp-plan CLI and libdcp.so (C: planner, views, references)'
	@echo '  make cuda           libdcp_cuda.so (dcp_cuda.cu and dcp.h; needs nvcc)'
	@echo '  make tests          every program make test runs or uses (CPU model, benches, examples)'
	@echo '  make amalgamate     write dcp.h from src/ (after editing src/)'
	@echo 'Run'
	@echo '  make demo           plan a generated batch, write $(BUILD)/demo.svg'
	@echo '  make test           every test, TEST_JOBS=$(TEST_JOBS) at a time (CI: .ci/run)'
	@echo '  make test-megatron  the torch and megatron-core tests (both releases; PyPI venvs)'
	@echo '  make test-seeds     the randomized tests under SEEDS=$(SEEDS) seeds'
	@echo '  make test-mutants   planted kernel bugs, each must fail on the CPU model (minutes)'
	@echo '  make fuzz           libFuzzer harnesses, FUZZ_SECONDS=$(FUZZ_SECONDS) each (clang)'
	@echo '  make bench          the planner against greedy, static and Megatron (plan_bench)'
	@echo '  make bench-megatron, bench-megatron-core   ours against Megatron-LM'"'"'s scheduler'
	@echo '  make kernel-report  the kernel profile on the CPU model into bench/RESULTS.md'
	@echo '  make kernel-limits  the model'"'"'s table of kernel registers from the device build'
	@echo '  make bench-comm     the set'"'"'s communicators, peers and switch on the host transport,'
	@echo '                      this tree against BASE=$(BASE) (minutes)'
	@echo '  make bench-ring-cpu the ring at cp 12 and a 48-rank pool on the CPU model (minutes)'
	@echo 'With a GPU'
	@echo '  make gpu-round      everything that needs a GPU, one command (docs/gpu-round.md)'
	@echo '  make test-gpu, sanitize-gpu, test-multirank, ring-example'
	@echo '  make clean          remove $(BUILD)/'

# One line per skipped part, so that a run without CUDA says what it did not cover.
report-skips:
ifneq ($(HAVE_NVCC),yes)
	@echo "skipped (CUDA): $(GPU_TEST_PROGRAMS) $(CUDA_LIBRARY) $(CUDA_BENCHES): $(CUDA_SKIP_REASON)"
endif
ifneq ($(HAVE_NCCL),yes)
	@echo "skipped (NCCL): $(NCCL_TESTS:%=$(BUILD)/%) $(NCCL_PROGRAMS) $(NCCL_COMPILE_CHECKS): $(NCCL_SKIP_REASON)"
endif
ifneq ($(CUDA_CPU_READY),yes)
	@echo "skipped (CPU execution model): $(CUDA_CPU_RUNS): needs nvcc's CUDA headers and $(CLANGXX)"
else ifneq ($(GPU_PRESENT),yes)
	@echo "not run (no GPU: nvidia-smi lists none): $(filter-out $(MODEL_LESS_TESTS:%=$(BUILD)/%),$(GPU_TEST_PROGRAMS)); their tests run on the CPU execution model: $(CUDA_CPU_RUNS)"
endif

# Why the CUDA parts are skipped here, empty where nvcc is found: the scripts that make test
# runs ask it (tests/test_gpu_round.sh, tests/test_calibrate_benches.sh), so that they skip
# what make skips, for the same reason.
.PHONY: cuda-skip-reason
cuda-skip-reason:
	@echo '$(if $(HAVE_NVCC),,$(CUDA_SKIP_REASON))'

clean:
	rm -rf $(BUILD)
