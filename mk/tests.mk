# The tests: ONE list of test programs, from which every variant is made, and the runner.
#
#   tests/NAME.c   build/NAME (C99, -O2) and build/NAME-san (ASan and UBSan), both in make test
#                  (build/NAME only for PLAIN_ONLY_TESTS)
#   tests/NAME.cu  build/NAME (nvcc, for the GPU) and build/NAME-cpu (the same source on the CPU
#                  execution model, mk/cpu_model.mk); make test runs the nvcc build where a GPU
#                  is, the model's build everywhere it can be built (as build/NAME-cpu-profiles:
#                  under the A100 and the 99 KB-shared-memory device profiles at once)
#
# A test's extra headers, flags and builds (C++, other NCCL versions) sit with its subject:
# mk/nccl.mk, mk/cuda.mk, mk/cpu_model.mk. Script tests (tests/*.sh) run after the programs.

C_TESTS := test_core test_lengths test_planner test_cp_sizes test_plan_guarantee test_plan_golden \
           test_thd test_integration test_reference test_tolerance test_comm test_hybrid \
           test_mtp test_nccl_host test_costs test_calibrate test_helpers test_documented test_memory
# test_plan_golden: plans byte for byte (tests/plan_golden.txt), which the sanitizers do not
# change; test_memory: a grid of plans against dcp_plan_memory_estimate, whose code the planner
# tests' sanitizer builds cover
PLAIN_ONLY_TESTS := test_plan_golden test_memory
# seed-independent: not among make test-seeds' programs
UNSEEDED_TESTS := test_plan_golden test_documented
CUDA_TESTS := test_cuda test_cuda_kernels test_cuda_attention test_cuda_hybrid test_cuda_primitives \
              test_nccl_gpu test_wgmma
# no model build: test_wgmma's products need sm_90a hardware (its layout checks run without one)
MODEL_LESS_TESTS := test_wgmma
# test_nccl_gpu needs NCCL as well as nvcc
NCCL_TESTS := test_nccl_gpu

C_TEST_PROGRAMS := $(C_TESTS:%=$(BUILD)/%) \
                   $(patsubst %,$(BUILD)/%-san,$(filter-out $(PLAIN_ONLY_TESTS),$(C_TESTS)))
GPU_TEST_PROGRAMS := $(patsubst %,$(BUILD)/%,$(if $(HAVE_NCCL),$(CUDA_TESTS),\
                         $(filter-out $(NCCL_TESTS),$(CUDA_TESTS))))
MODEL_TESTS := $(filter-out $(MODEL_LESS_TESTS),$(CUDA_TESTS))

# dcp.h as C99, as C++ and under nvcc, all warnings as errors; its switches in all four
# combinations, each as C99 and as C++ (tests/test_switches.c: a left-out layer's names are free
# for the test file to reuse).
SWITCH_BUILDS := all no-reference no-distributed planner-only
HEADER_CHECKS := $(BUILD)/header-c99 $(BUILD)/header-cxx \
                 $(SWITCH_BUILDS:%=$(BUILD)/switches-%) $(SWITCH_BUILDS:%=$(BUILD)/switches-%-cxx)
SWITCH_FLAGS_all :=
SWITCH_FLAGS_no-reference := -DDCP_NO_REFERENCE
SWITCH_FLAGS_no-distributed := -DDCP_NO_DISTRIBUTED
SWITCH_FLAGS_planner-only := -DDCP_NO_REFERENCE -DDCP_NO_DISTRIBUTED

# What the script tests run besides the library's parts: the C side of the frontends' check and
# the struct-layout dump the Python package's ctypes mirrors are compared with.
TEST_TOOLS := $(BUILD)/frontend-cases $(BUILD)/dcp-struct-layout
# tests/test_no_cuda.sh: make test's no-CUDA path (NVCC and CUDA_HOME pointed at nothing), so
# that a header-only user's make test, which skips every CUDA part, cannot break unseen here
SCRIPT_TESTS := tests/test_cli.sh tests/test_readme.sh tests/test_loader.sh tests/test_python.sh \
                tests/test_frontends.sh tests/test_typecheck.sh tests/test_svg.sh \
                tests/test_documented.sh tests/test_amalgamation.sh tests/test_no_cuda.sh

# The subject parts add their programs (mk/cuda.mk, mk/cpu_model.mk, mk/nccl.mk) to
# TEST_PROGRAMS, their scripts to SCRIPT_TESTS, and what the scripts need to TEST_BUILDS; the
# Makefile's `tests` and `test` use the lists once they are complete.
TEST_PROGRAMS := $(C_TEST_PROGRAMS) $(HEADER_CHECKS)
TEST_BUILDS := $(LIBRARY_PARTS) $(EXAMPLES) $(BENCHES) $(TEST_TOOLS)

$(BUILD)/test_%: tests/test_%.c tests/test.h dcp.h | $(BUILD)
	$(CC) $(C_FLAGS) $(TEST_FLAGS) $< $(TEST_OBJECTS) -o $@ -lm $(TEST_LIBS)
$(BUILD)/test_%-san: tests/test_%.c tests/test.h dcp.h | $(BUILD)
	$(CC) -std=c99 $(WARNINGS) $(SANITIZE) $(TEST_FLAGS) $< $(TEST_OBJECTS) -o $@ -lm $(TEST_LIBS)

# The tests of the public API alone link dcp.h's implementation compiled once per build kind
# (plain: the libraries' object; -san: under the sanitizers) instead of compiling it each: the
# same code, linked, and most of make test's C compile time saved. Their own
# DCP_IMPLEMENTATION is turned off by the implementation's include guard. The others call
# dcp.h's private functions (static) or replace its allocator (DCP_MALLOC), so compile it in.
PUBLIC_API_TESTS := test_calibrate test_comm test_costs test_cp_sizes test_documented test_hybrid \
                    test_integration test_lengths test_memory test_mtp test_plan_golden \
                    test_reference test_tolerance
$(BUILD)/dcp_impl-san.o: bench/dcp_impl.c dcp.h | $(BUILD)
	$(CC) -std=c99 $(WARNINGS) $(SANITIZE) -c $< -o $@
$(PUBLIC_API_TESTS:%=$(BUILD)/%): $(BUILD)/dcp_impl-pic.o
$(PUBLIC_API_TESTS:%=$(BUILD)/%): TEST_OBJECTS := $(BUILD)/dcp_impl-pic.o
$(PUBLIC_API_TESTS:%=$(BUILD)/%-san): $(BUILD)/dcp_impl-san.o
$(PUBLIC_API_TESTS:%=$(BUILD)/%-san): TEST_OBJECTS := $(BUILD)/dcp_impl-san.o
$(PUBLIC_API_TESTS:%=$(BUILD)/%) $(PUBLIC_API_TESTS:%=$(BUILD)/%-san): \
    TEST_FLAGS := -DDCP_IMPLEMENTATION_INCLUDED
# the tests' own headers
$(BUILD)/test_tolerance $(BUILD)/test_tolerance-san \
$(BUILD)/test_integration $(BUILD)/test_integration-san: tests/tolerance.h
$(BUILD)/test_plan_guarantee $(BUILD)/test_plan_guarantee-san $(BUILD)/test_plan_golden: \
    bench/length_shapes.h
# the calibration benches' host side (bench/calibrate.cu, bench/plan_vs_exec.cu)
$(BUILD)/test_calibrate $(BUILD)/test_calibrate-san: bench/calibrate_grid.h bench/plan_exec.h

$(BUILD)/header-c99: tests/test_header.c tests/test.h dcp.h | $(BUILD)
	$(CC) $(C_FLAGS) $< -o $@ -lm
$(BUILD)/header-cxx: tests/test_header.c tests/test.h dcp.h | $(BUILD)
	$(CXX) $(CXX_FLAGS) -x c++ $< -o $@ -lm
$(BUILD)/switches-%-cxx: tests/test_switches.c tests/test.h dcp.h | $(BUILD)
	$(CXX) $(CXX_FLAGS) $(SWITCH_FLAGS_$*) -x c++ $< -o $@ -lm
$(BUILD)/switches-%: tests/test_switches.c tests/test.h dcp.h | $(BUILD)
	$(CC) $(C_FLAGS) $(SWITCH_FLAGS_$*) $< -o $@ -lm

$(BUILD)/frontend-cases: tests/frontend_cases.c dcp.h | $(BUILD)
	$(CC) $(C_FLAGS) $< -o $@ -lm
$(BUILD)/dcp-struct-layout: python/tests/struct_layout.c dcp.h | $(BUILD)
	$(CC) $(C_FLAGS) $< -o $@ -lm

# Every randomized test under SEEDS seeds (DCP_TEST_SEED = SEED_FIRST, SEED_FIRST + 1, ...;
# logs in build/seeds/); fails if any seed fails. On a GPU machine add DCP_TEST_NO_SKIPS=1 so
# that a skipped GPU test fails too: `make test-seeds SEEDS=20 DCP_TEST_NO_SKIPS=1`.
SEEDS ?= 20
SEED_FIRST ?= 1
DCP_TEST_NO_SKIPS ?= 0
SEEDED_TESTS := $(patsubst %,$(BUILD)/%,$(filter-out $(UNSEEDED_TESTS) test_nccl_host,$(C_TESTS))) \
                $(if $(HAVE_NVCC),$(GPU_TEST_PROGRAMS))
.PHONY: test-seeds
test-seeds: $(SEEDED_TESTS)
	SEED_FIRST=$(SEED_FIRST) SEED_LOGS=$(BUILD)/seeds DCP_TEST_NO_SKIPS=$(DCP_TEST_NO_SKIPS) \
	    sh tests/run_seeds.sh $(SEEDS) $(SEEDED_TESTS)

# libFuzzer harnesses (clang): each runs FUZZ_SECONDS on a corpus kept in build/ and seeded from
# tests/fuzz-seeds/.
FUZZ_SECONDS ?= 60
FUZZERS := lengths exchange costs
.PHONY: fuzz
fuzz: $(FUZZERS:%=$(BUILD)/fuzz_%)
	for name in $(FUZZERS); do \
	    mkdir -p $(BUILD)/fuzz-corpus-$$name && \
	    $(BUILD)/fuzz_$$name -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	        $(BUILD)/fuzz-corpus-$$name tests/fuzz-seeds/$$name || exit 1; \
	done
$(BUILD)/fuzz_%: tests/fuzz_%.c dcp.h | $(BUILD)
	$(CLANG) -std=c99 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	    $< -o $@ -lm
