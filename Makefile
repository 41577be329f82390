# libdcp. `make` builds everything that can be built here (CUDA code compiles without a GPU);
# `make test` builds and runs all tests, a sanitizer build of them included; `make demo` plans a
# generated batch and writes build/demo.svg; `make bench` runs the benches; `make fuzz` runs the
# libFuzzer harnesses (clang) for FUZZ_SECONDS each.

CC ?= cc
CXX ?= c++
NVCC ?= nvcc
CLANG ?= clang
CUDA_HOME ?= /usr/local/cuda
BUILD := build
FUZZ_SECONDS ?= 60

WARNINGS := -Wall -Wextra -Wpedantic -Werror
OPT ?= -O2
C_FLAGS := -std=c99 $(OPT) $(WARNINGS)
CXX_FLAGS := -std=c++11 $(OPT) $(WARNINGS)
SANITIZE := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1
# sm_80 runs on Ampere and later; sm_90a adds Hopper's wgmma and TMA paths.
CUDA_ARCH ?= -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90a,code=sm_90a
NVCC_FLAGS := -std=c++14 -O2 $(CUDA_ARCH) -Xcompiler -Wall,-Wextra,-Werror
CUDA_INCLUDE := -I$(CUDA_HOME)/include
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -lcudart
NCCL_LIBS := -L$(CUDA_HOME)/lib64 -Xlinker -rpath,$(CUDA_HOME)/lib64 -lnccl

CPU_TESTS := test_core test_lengths test_planner test_thd test_reference test_comm test_tolerance
HEADER_CHECKS := $(BUILD)/header-c99 $(BUILD)/header-cxx $(BUILD)/header-nvcc \
                 $(BUILD)/header-no-reference
GPU_TESTS := $(BUILD)/test_cuda $(BUILD)/test_cuda_kernels $(BUILD)/test_cuda_attention
TEST_PROGRAMS := $(CPU_TESTS:%=$(BUILD)/%) $(CPU_TESTS:%=$(BUILD)/%-san) $(HEADER_CHECKS) \
                 $(GPU_TESTS) $(BUILD)/test_nccl_gpu
COMPILE_CHECKS := $(BUILD)/nccl-c.o $(BUILD)/nccl-nvcc.o

.PHONY: all test demo bench fuzz clean sanitize-gpu test-gpu ring-example test-seeds

GPU_BENCHES := $(BUILD)/kernels_bench $(BUILD)/attention_bench $(BUILD)/libdcp_cuda.so

all: $(BUILD)/dcp-plan $(BUILD)/plan_bench $(TEST_PROGRAMS) $(COMPILE_CHECKS) $(GPU_BENCHES) \
     $(BUILD)/ring_attention_nccl

$(BUILD):
	mkdir -p $(BUILD)

$(BUILD)/dcp-plan: examples/dcp_plan.c dcp.h | $(BUILD)
	$(CC) $(C_FLAGS) $< -o $@ -lm

$(BUILD)/plan_bench: bench/plan_bench.c dcp.h | $(BUILD)
	$(CC) $(C_FLAGS) $< -o $@ -lm

$(BUILD)/test_%: tests/test_%.c tests/test.h dcp.h | $(BUILD)
	$(CC) $(C_FLAGS) $< -o $@ -lm

$(BUILD)/test_%-san: tests/test_%.c tests/test.h dcp.h | $(BUILD)
	$(CC) -std=c99 $(WARNINGS) $(SANITIZE) $< -o $@ -lm

# The GPU tests' comparison rule, tested on the CPU.
$(BUILD)/test_tolerance $(BUILD)/test_tolerance-san: tests/tolerance.h

# dcp.h as C99, as C++ and under nvcc, all warnings as errors.
$(BUILD)/header-c99: tests/test_header.c tests/test.h dcp.h | $(BUILD)
	$(CC) $(C_FLAGS) $< -o $@ -lm
$(BUILD)/header-cxx: tests/test_header.c tests/test.h dcp.h | $(BUILD)
	$(CXX) $(CXX_FLAGS) -x c++ $< -o $@ -lm
$(BUILD)/header-nvcc: tests/test_header.c tests/test.h dcp.h | $(BUILD)
	$(NVCC) -std=c++14 -O2 -Xcompiler -Wall,-Wextra,-Werror -x cu $< -o $@
# DCP_NO_REFERENCE: the planner without the CPU references (the file defines their names).
$(BUILD)/header-no-reference: tests/test_no_reference.c tests/test.h dcp.h | $(BUILD)
	$(CC) $(C_FLAGS) $< -o $@ -lm

$(BUILD)/dcp_cuda.o: dcp_cuda.cu dcp.h | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@

$(BUILD)/test_cuda: tests/test_cuda.cu tests/test.h dcp.h $(BUILD)/dcp_cuda.o | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $< $(BUILD)/dcp_cuda.o -o $@

$(BUILD)/test_cuda_%: tests/test_cuda_%.cu tests/test.h tests/cuda_test_util.h tests/tolerance.h \
                      dcp.h $(BUILD)/dcp_cuda.o | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $< $(BUILD)/dcp_cuda.o -o $@

# GPU benches (built by `make`, run by hand where a GPU exists; see bench/RESULTS.md).
$(BUILD)/kernels_bench: bench/kernels_bench.cu bench/bench_util.h dcp.h $(BUILD)/dcp_cuda.o | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $< $(BUILD)/dcp_cuda.o -o $@
$(BUILD)/attention_bench: bench/attention_bench.cu bench/bench_util.h dcp.h $(BUILD)/dcp_cuda.o | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $< $(BUILD)/dcp_cuda.o -o $@

# dcp_cuda.cu and the dcp.h implementation as one shared library, for the Python benches.
$(BUILD)/dcp_cuda-pic.o: dcp_cuda.cu dcp.h | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -Xcompiler -fPIC -c $< -o $@
$(BUILD)/dcp_impl-pic.o: bench/dcp_impl.c dcp.h | $(BUILD)
	$(CC) $(C_FLAGS) -fPIC -c $< -o $@
$(BUILD)/libdcp_cuda.so: $(BUILD)/dcp_impl-pic.o $(BUILD)/dcp_cuda-pic.o | $(BUILD)
	$(NVCC) -shared $^ -o $@ -lcudart

# The GPU tests under compute-sanitizer (memcheck, racecheck), where a GPU exists.
COMPUTE_SANITIZER ?= compute-sanitizer
sanitize-gpu: $(GPU_TESTS)
	for program in $(GPU_TESTS); do \
	    $(COMPUTE_SANITIZER) --tool memcheck --leak-check full --error-exitcode 1 \
	        $$program || exit 1; \
	    $(COMPUTE_SANITIZER) --tool racecheck --racecheck-report all --error-exitcode 1 \
	        $$program || exit 1; \
	done

# dcp_nccl.h as C and under nvcc (compile only: running NCCL needs a GPU).
$(BUILD)/nccl-c.o: tests/test_nccl_compile.c dcp_nccl.h dcp.h | $(BUILD)
	$(CC) -std=c99 -O2 -Wall -Wextra -Werror $(CUDA_INCLUDE) -c $< -o $@
$(BUILD)/nccl-nvcc.o: tests/test_nccl_compile.c dcp_nccl.h dcp.h | $(BUILD)
	$(NVCC) -std=c++14 -O2 -Xcompiler -Wall,-Wextra,-Werror -x cu -c $< -o $@

# dcp_nccl.h's one-rank GPU test (in `make test`; it prints "no CUDA device: skipped" without
# a GPU) and the multi-GPU ring-attention example (built by `make`; run one process per GPU).
$(BUILD)/test_nccl_gpu.o: tests/test_nccl_gpu.cu tests/test.h tests/tolerance.h dcp.h dcp_nccl.h \
                         | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@
$(BUILD)/test_nccl_gpu: $(BUILD)/test_nccl_gpu.o $(BUILD)/dcp_cuda.o
	$(NVCC) $(NVCC_FLAGS) $^ -o $@ $(NCCL_LIBS)
$(BUILD)/ring_attention_nccl.o: examples/ring_attention_nccl.cu dcp.h dcp_nccl.h | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@
$(BUILD)/ring_attention_nccl: $(BUILD)/ring_attention_nccl.o $(BUILD)/dcp_cuda.o
	$(NVCC) $(NVCC_FLAGS) $^ -o $@ $(NCCL_LIBS)

# Only the GPU programs: where a GPU exists they run instead of skipping.
test-gpu: $(GPU_TESTS) $(BUILD)/test_nccl_gpu
	sh tests/run_tests.sh $(GPU_TESTS) $(BUILD)/test_nccl_gpu

ring-example: $(BUILD)/ring_attention_nccl

# Every randomized test under SEEDS seeds (DCP_TEST_SEED = SEED_FIRST, SEED_FIRST + 1, ...;
# logs in build/seeds/); fails if any seed fails. On a GPU machine add DCP_TEST_NO_SKIPS=1 so
# that a skipped GPU test fails too: `make test-seeds SEEDS=20 DCP_TEST_NO_SKIPS=1`.
SEEDS ?= 20
SEED_FIRST ?= 1
DCP_TEST_NO_SKIPS ?= 0
SEEDED_TESTS := $(CPU_TESTS:%=$(BUILD)/%) $(GPU_TESTS) $(BUILD)/test_nccl_gpu
test-seeds: $(SEEDED_TESTS)
	SEED_FIRST=$(SEED_FIRST) SEED_LOGS=$(BUILD)/seeds DCP_TEST_NO_SKIPS=$(DCP_TEST_NO_SKIPS) \
	    sh tests/run_seeds.sh $(SEEDS) $(SEEDED_TESTS)

test: all
	sh tests/run_tests.sh $(TEST_PROGRAMS) tests/test_cli.sh

demo: $(BUILD)/dcp-plan
	$(BUILD)/dcp-plan --lognormal 4096,1.1,1024,8192,256 --seed 1 --ranks 16 \
	    --max-tokens-per-rank 4096 --svg $(BUILD)/demo.svg
	@echo "timeline written to $(BUILD)/demo.svg"

bench: $(BUILD)/plan_bench
	$(BUILD)/plan_bench

FUZZERS := lengths exchange

# Each harness runs FUZZ_SECONDS on a corpus kept in build/ and seeded from tests/fuzz-seeds/.
fuzz: $(FUZZERS:%=$(BUILD)/fuzz_%)
	for name in $(FUZZERS); do \
	    mkdir -p $(BUILD)/fuzz-corpus-$$name && \
	    $(BUILD)/fuzz_$$name -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	        $(BUILD)/fuzz-corpus-$$name tests/fuzz-seeds/$$name || exit 1; \
	done

$(BUILD)/fuzz_%: tests/fuzz_%.c dcp.h | $(BUILD)
	$(CLANG) -std=c99 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	    $< -o $@ -lm

clean:
	rm -rf $(BUILD)
