# libdcp. `make` builds everything that can be built here (CUDA code compiles without a GPU);
# `make test` builds and runs all tests, a sanitizer build of them included; `make demo` plans a
# generated batch and writes build/demo.svg; `make bench` runs the benches; `make fuzz` runs the
# libFuzzer harnesses (clang) for FUZZ_SECONDS each.
# Without nvcc (or without NCCL) the CPU parts still build and run: `make` and `make test` say
# which CUDA/NCCL parts they skip and why. CI has both and runs everything.

CC ?= cc
CXX ?= c++
NVCC ?= nvcc
CLANG ?= clang
CUDA_HOME ?= /usr/local/cuda
BUILD := build
FUZZ_SECONDS ?= 60
# Builds run one job per core (CI's 2 cores halve `make test`'s compile time); the tests
# themselves run one after another in a single recipe. `make JOBS=1 ...` builds serially.
JOBS ?= $(shell nproc 2>/dev/null || echo 1)
MAKEFLAGS += -j$(JOBS)

WARNINGS := -Wall -Wextra -Wpedantic -Werror
OPT ?= -O2
C_FLAGS := -std=c99 $(OPT) $(WARNINGS)
CXX_FLAGS := -std=c++11 $(OPT) $(WARNINGS)
SANITIZE := -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1
# sm_80 runs on Ampere and later; sm_90a adds Hopper's wgmma and TMA paths.
CUDA_ARCH ?= -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90a,code=sm_90a
NVCC_FLAGS := -std=c++14 -O2 $(CUDA_ARCH) -Xcompiler -Wall,-Wextra,-Werror
CUDA_INCLUDE := -I$(CUDA_HOME)/include
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -lcudart
NCCL_LIBS := -L$(CUDA_HOME)/lib64 -Xlinker -rpath,$(CUDA_HOME)/lib64 -lnccl

# What this machine can build: nvcc for the CUDA parts, nvcc and nccl.h for the NCCL parts.
HAVE_NVCC := $(if $(shell command -v $(NVCC) 2>/dev/null),yes,)
HAVE_NCCL := $(if $(HAVE_NVCC),$(if $(wildcard $(CUDA_HOME)/include/nccl.h),yes,),)
CUDA_SKIP_REASON := nvcc not found (NVCC=$(NVCC)); set NVCC or PATH to build them
NCCL_SKIP_REASON := $(if $(HAVE_NVCC),nccl.h not found in $(CUDA_HOME)/include (set CUDA_HOME),$(CUDA_SKIP_REASON))

CPU_TESTS := test_core test_lengths test_planner test_thd test_reference test_comm test_costs \
             test_helpers test_tolerance
# cost calibration: the fit and the calibration benches' host side (bench/*.h)
CPU_TESTS += test_calibrate
# CP sizes as a set (cp_sizes: Megatron's communicators) and every rank busy (cover_ranks)
CPU_TESTS += test_cp_sizes
# dcp.h's switches in all four combinations, each as C99 and as C++ (tests/test_switches.c).
SWITCH_BUILDS := all no-reference no-distributed planner-only
CPU_HEADER_CHECKS := $(BUILD)/header-c99 $(BUILD)/header-cxx \
                     $(SWITCH_BUILDS:%=$(BUILD)/switches-%) $(SWITCH_BUILDS:%=$(BUILD)/switches-%-cxx)
GPU_TESTS := $(BUILD)/test_cuda $(BUILD)/test_cuda_kernels $(BUILD)/test_cuda_attention \
             $(BUILD)/test_wgmma
# Shell tests run by `make test` after the programs: the CLI, the README quick start, the
# loader example.
SCRIPT_TESTS := tests/test_cli.sh tests/test_readme.sh tests/test_loader.sh tests/test_python.sh
# bench/plan_vs_exec's host path without a GPU (--dry-run); skipped where nvcc is missing
SCRIPT_TESTS += tests/test_calibrate_benches.sh
# dcp_nccl.h over the host transport (tests/fake_nccl): needs neither a GPU nor NCCL.
FAKE_NCCL := tests/fake_nccl/nccl.h tests/fake_nccl/cuda_runtime.h tests/fake_nccl/fake_runtime.c
NCCL_HOST_TESTS := $(BUILD)/test_nccl_host $(BUILD)/test_nccl_host-san $(BUILD)/test_nccl_host-cxx
CPU_PROGRAMS := $(CPU_TESTS:%=$(BUILD)/%) $(CPU_TESTS:%=$(BUILD)/%-san) $(CPU_HEADER_CHECKS) \
                $(NCCL_HOST_TESTS)
CUDA_PROGRAMS := $(BUILD)/header-nvcc $(GPU_TESTS)
NCCL_PROGRAMS := $(BUILD)/test_nccl_gpu
# The Python package (python/libdcp): dcp.h's implementation as a shared library (C compiler
# only, no nvcc) and the struct-layout dump its tests compare the ctypes mirrors against.
PYTHON_LIBS := $(BUILD)/libdcp.so $(BUILD)/dcp-struct-layout

CPU_BUILDS := $(BUILD)/dcp-plan $(BUILD)/plan_bench $(BUILD)/loader $(PYTHON_LIBS)
CUDA_BUILDS := $(BUILD)/kernels_bench $(BUILD)/attention_bench $(BUILD)/libdcp_cuda.so
# the cost-calibration benches (rules at the end)
CUDA_BUILDS += $(BUILD)/calibrate $(BUILD)/plan_vs_exec
NCCL_BUILDS := $(BUILD)/nccl-c.o $(BUILD)/nccl-nvcc.o $(BUILD)/ring_attention_nccl

TEST_PROGRAMS := $(CPU_PROGRAMS) $(if $(HAVE_NVCC),$(CUDA_PROGRAMS)) \
                 $(if $(HAVE_NCCL),$(NCCL_PROGRAMS))
BUILDS := $(CPU_BUILDS) $(if $(HAVE_NVCC),$(CUDA_BUILDS)) $(if $(HAVE_NCCL),$(NCCL_BUILDS))

.PHONY: all test demo bench fuzz clean sanitize-gpu test-gpu ring-example report-skips test-seeds \
        test-mutants

all: $(BUILDS) $(TEST_PROGRAMS) report-skips

# One line per skipped part, so a run without CUDA says what it did not cover.
report-skips:
ifneq ($(HAVE_NVCC),yes)
	@echo "skipped (CUDA): $(CUDA_PROGRAMS) $(CUDA_BUILDS): $(CUDA_SKIP_REASON)"
endif
ifneq ($(HAVE_NCCL),yes)
	@echo "skipped (NCCL): $(NCCL_PROGRAMS) $(NCCL_BUILDS): $(NCCL_SKIP_REASON)"
endif

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
# The switches: a left-out layer's names are free for the test file to reuse.
SWITCH_FLAGS_all :=
SWITCH_FLAGS_no-reference := -DDCP_NO_REFERENCE
SWITCH_FLAGS_no-distributed := -DDCP_NO_DISTRIBUTED
SWITCH_FLAGS_planner-only := -DDCP_NO_REFERENCE -DDCP_NO_DISTRIBUTED
$(BUILD)/switches-%-cxx: tests/test_switches.c tests/test.h dcp.h | $(BUILD)
	$(CXX) $(CXX_FLAGS) $(SWITCH_FLAGS_$*) -x c++ $< -o $@ -lm
$(BUILD)/switches-%: tests/test_switches.c tests/test.h dcp.h | $(BUILD)
	$(CC) $(C_FLAGS) $(SWITCH_FLAGS_$*) $< -o $@ -lm

# Compiled once (~95 s on 2 cores), position-independent so that the executables and the
# Python benches' shared library link the same object. It keeps what the CPU execution model
# and the kernel report read of the device code (DEVICE_KEEP): the PTX (each kernel's
# __launch_bounds__), the cubins (SASS) and ptxas's resource usage per kernel and architecture
# (ptxas.txt: registers, spills, static shared memory; its other lines are shown as usual).
DEVICE_KEEP := $(BUILD)/dcp_cuda-keep
$(BUILD)/dcp_cuda.o: dcp_cuda.cu dcp.h | $(BUILD)
	rm -rf $(DEVICE_KEEP) && mkdir -p $(DEVICE_KEEP)
	$(NVCC) $(NVCC_FLAGS) -Xcompiler -fPIC -Xptxas -v --keep --keep-dir $(DEVICE_KEEP) -c $< \
	    -o $@ 2> $(DEVICE_KEEP)/ptxas.txt || { cat $(DEVICE_KEEP)/ptxas.txt; exit 1; }
	@grep -v '^ptxas info\|bytes stack frame' $(DEVICE_KEEP)/ptxas.txt >&2 || true
	rm -f $(DEVICE_KEEP)/*.ii $(DEVICE_KEEP)/*.cudafe1.*

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

# The Python package's library (CPU: planner, views, reroute, references) and the layout of
# every struct it mirrors.
$(BUILD)/libdcp.so: dcp.h | $(BUILD)
	$(CC) $(C_FLAGS) -fPIC -shared -DDCP_IMPLEMENTATION -x c dcp.h -x none -o $@ -lm
$(BUILD)/dcp-struct-layout: python/tests/struct_layout.c dcp.h | $(BUILD)
	$(CC) $(C_FLAGS) $< -o $@ -lm

# dcp_cuda.cu and the dcp.h implementation as one shared library, for the Python benches and
# the Python package's torch ops.
$(BUILD)/dcp_impl-pic.o: bench/dcp_impl.c dcp.h | $(BUILD)
	$(CC) $(C_FLAGS) -fPIC -c $< -o $@
$(BUILD)/libdcp_cuda.so: $(BUILD)/dcp_impl-pic.o $(BUILD)/dcp_cuda.o | $(BUILD)
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
                         examples/multiprocess.h | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@
$(BUILD)/test_nccl_gpu: $(BUILD)/test_nccl_gpu.o $(BUILD)/dcp_cuda.o
	$(NVCC) $(NVCC_FLAGS) $^ -o $@ $(NCCL_LIBS)
$(BUILD)/ring_attention_nccl.o: examples/ring_attention_nccl.cu examples/multiprocess.h dcp.h \
                                dcp_nccl.h | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@
$(BUILD)/ring_attention_nccl: $(BUILD)/ring_attention_nccl.o $(BUILD)/dcp_cuda.o
	$(NVCC) $(NVCC_FLAGS) $^ -o $@ $(NCCL_LIBS)

# Only the GPU programs: where a GPU exists they run instead of skipping.
test-gpu: $(GPU_TESTS) $(BUILD)/test_nccl_gpu
	sh tests/run_tests.sh $(GPU_TESTS) $(BUILD)/test_nccl_gpu

ring-example: $(BUILD)/ring_attention_nccl

# The data-loader example (run by tests/test_loader.sh).
$(BUILD)/loader: examples/loader.c dcp.h | $(BUILD)
	$(CC) $(C_FLAGS) $< -o $@ -lm

# `all` names the skipped parts (report-skips, its last prerequisite) before the runner, whose
# last line stays "N passed, M failed".
# The kernel tests against planted bugs (tests/mutants.sh, on the CPU execution model: rules
# in its section at the end).

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
	sh tests/run_tests.sh $(TEST_PROGRAMS) $(SCRIPT_TESTS)

demo: $(BUILD)/dcp-plan
	$(BUILD)/dcp-plan --lognormal 4096,1.1,1024,8192,256 --seed 1 --ranks 16 \
	    --max-tokens-per-rank 4096 --svg $(BUILD)/demo.svg
	@echo "timeline written to $(BUILD)/demo.svg"

bench: $(BUILD)/plan_bench
	$(BUILD)/plan_bench

# Megatron-LM's dynamic-CP scheduler (reimplemented in Python, standard library only) against
# ours on plan_bench's batches and on pools that are not a power of two, both plans evaluated
# by dcp_plan_simulate under E = D (issues 12, 28; not in `make test`).
bench-megatron: $(BUILD)/plan_bench
	mkdir -p $(BUILD)/bench-lengths
	$(BUILD)/plan_bench --dump-lengths $(BUILD)/bench-lengths
	python3 bench/megatron_baseline.py $(BUILD)/bench-lengths
	$(BUILD)/plan_bench --megatron $(BUILD)/bench-lengths
.PHONY: bench-megatron

FUZZERS := lengths exchange costs

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

# ---- dcp_nccl.h off the GPU and on N ranks of one GPU (self-contained rules) ----------------
# The host transport: dcp_nccl.h compiled against tests/fake_nccl (NCCL and CUDA runtime
# stand-ins picked by the include path), ranks as threads; plain and ASan/UBSan builds, both
# in `make test`. Needs neither a GPU nor NCCL.
$(BUILD)/test_nccl_host: tests/test_nccl_host.c tests/test.h dcp.h dcp_nccl.h $(FAKE_NCCL) | $(BUILD)
	$(CC) $(C_FLAGS) -Itests/fake_nccl $< -o $@ -lm -lpthread
# as C++ it adds the RAII override guard's test (exceptions through the scope)
$(BUILD)/test_nccl_host-cxx: tests/test_nccl_host.c tests/test.h dcp.h dcp_nccl.h $(FAKE_NCCL) | $(BUILD)
	$(CXX) $(CXX_FLAGS) -x c++ -Itests/fake_nccl $< -o $@ -lm -lpthread
$(BUILD)/test_nccl_host-san: tests/test_nccl_host.c tests/test.h dcp.h dcp_nccl.h $(FAKE_NCCL) | $(BUILD)
	$(CC) -std=c99 $(WARNINGS) $(SANITIZE) -Itests/fake_nccl $< -o $@ -lm -lpthread

# N processes on ONE GPU (distinct NCCL_HOSTID, sockets on lo) for N = 2, 4, 6, 8: the ring
# example end to end, a peer that exits mid-step, the split memory measurement. Prints a skip
# line and exits 0 without a GPU.
.PHONY: test-multirank
test-multirank: $(BUILD)/ring_attention_nccl
	sh tests/multirank.sh $(BUILD)/ring_attention_nccl

# ---- hybrid models: the CP <-> head-parallel all-to-all (issue 20) --------------------------
# tests/test_hybrid.c (plain and ASan/UBSan; the host-transport run is in test_nccl_host),
# tests/test_cuda_hybrid.cu (GPU; skips without one) in `make test`; bench/a2a_bench.cu, N
# processes: `make test-multirank` checks it at 2, 4 and 8 ranks on one GPU against the CPU
# reference and prints its bandwidth table; run it by hand for bench/RESULTS.md.
HYBRID_CPU_TESTS := $(BUILD)/test_hybrid $(BUILD)/test_hybrid-san
HYBRID_GPU_TESTS := $(BUILD)/test_cuda_hybrid
HYBRID_TESTS := $(HYBRID_CPU_TESTS) $(if $(HAVE_NVCC),$(HYBRID_GPU_TESTS))
TEST_PROGRAMS += $(HYBRID_TESTS)
SEEDED_TESTS += $(BUILD)/test_hybrid $(if $(HAVE_NVCC),$(HYBRID_GPU_TESTS))
all: $(HYBRID_TESTS) $(if $(HAVE_NCCL),$(BUILD)/a2a_bench)
test-seeds: $(BUILD)/test_hybrid $(if $(HAVE_NVCC),$(HYBRID_GPU_TESTS))
GPU_TESTS += $(HYBRID_GPU_TESTS) # the recipes of test-gpu and sanitize-gpu run them too
test-gpu sanitize-gpu: $(HYBRID_GPU_TESTS)
$(BUILD)/a2a_bench: bench/a2a_bench.cu examples/multiprocess.h dcp.h dcp_nccl.h \
                    $(BUILD)/dcp_cuda.o | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $< $(BUILD)/dcp_cuda.o -o $@ $(NCCL_LIBS)
test-multirank: $(BUILD)/a2a_bench
test-multirank: export A2A_PROGRAM := $(BUILD)/a2a_bench

# ---- MTP roll and pipeline-stage fields (issue 20) -------------------------------------------
# tests/test_mtp.c (CPU, plain and ASan/UBSan) joins `make test`, `make all` and the seed runs;
# the host-transport and GPU tests share tests/mtp_pack.h.
MTP_TESTS := $(BUILD)/test_mtp $(BUILD)/test_mtp-san
TEST_PROGRAMS += $(MTP_TESTS)
SEEDED_TESTS += $(BUILD)/test_mtp
all: $(MTP_TESTS)
test-seeds: $(BUILD)/test_mtp
$(NCCL_HOST_TESTS) $(BUILD)/test_nccl_gpu.o: tests/mtp_pack.h
# the multi-rank roll check runs build/test_nccl_gpu as N processes (tests/multirank.sh)
test-multirank: $(BUILD)/test_nccl_gpu

# ---- cost calibration (bench/calibrate, bench/plan_vs_exec; see README "Calibrating the cost
# model") ------------------------------------------------------------------------------------
# The host side both GPU benches share, tested by test_calibrate without a GPU.
CALIBRATE_HOST := bench/calibrate_grid.h bench/plan_exec.h
$(BUILD)/test_calibrate $(BUILD)/test_calibrate-san: $(CALIBRATE_HOST)
# cuBLAS times the linear layers' stand-in GEMMs where the toolkit has it; without it the
# benches take the per-token time of the linear layers from --linear-seconds-per-token.
HAVE_CUBLAS := $(if $(HAVE_NVCC),$(if $(wildcard $(CUDA_HOME)/include/cublas_v2.h),yes,),)
CUBLAS_FLAGS := $(if $(HAVE_CUBLAS),-DBENCH_HAVE_CUBLAS=1 -lcublas,)
$(BUILD)/calibrate $(BUILD)/plan_vs_exec: $(BUILD)/%: bench/%.cu bench/layer_timer.h \
        bench/bench_util.h $(CALIBRATE_HOST) dcp.h $(BUILD)/dcp_cuda.o | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $< $(BUILD)/dcp_cuda.o -o $@ $(CUBLAS_FLAGS)

# ---- the Hopper building blocks (tests/test_wgmma.cu; in GPU_TESTS) --------------------------
# The test includes dcp_cuda.cu (white box: the swizzle, the wgmma descriptors and wrappers are
# internal) and is built for sm_90a only: its CPU checks of the layout run everywhere, its wgmma
# products only on compute capability 9.0 (elsewhere they report why they skip).
WGMMA_TEST_ARCH ?= -gencode=arch=compute_90a,code=sm_90a
$(BUILD)/test_wgmma: tests/test_wgmma.cu tests/test.h tests/cuda_test_util.h tests/tolerance.h \
                     dcp.h dcp_cuda.cu | $(BUILD)
	$(NVCC) -std=c++14 -O2 $(WGMMA_TEST_ARCH) -Xcompiler -Wall,-Wextra,-Werror $< -o $@

# ---- libdcp inside Megatron-Core (issues 27, 34) ---------------------------------------------
# `make test-megatron` (CI runs it after `make test`) tests every release of
# libdcp.megatron.RELEASES, each in its own virtual environment with its pinned test-only
# packages (installed from PyPI once, reused while the list is unchanged): megatron-core 0.16.1
# (python/tests/megatron-requirements.txt, build/venv-megatron, $(PYTHON3)) and 0.19.2
# (python/tests/megatron-0.19-requirements.txt, build/venv-megatron-0.19, Python 3.12: PYTHON312
# or found by python/tests/find_python.sh, which fails saying where it looked). Under each:
# python/tests/megatron_core_test.py (Megatron's own data-loader wrapper and hybrid-CP schedule
# on 4 and 8 gloo ranks with its scheduler and libdcp's, bad input, real collectives through
# the schedule at 8 and 16 ranks) and python/tests/megatron_contract_test.py (the contract
# fuzzer and the step property against Megatron's scheduler). Once, with the first release's
# Python: python/tests/torch_package_test.py (the per-token loss example, `pip install ./python`
# and `pip wheel ./python` in fresh environments; python/tests/ring_attention_test.py:
# python/examples/ring_attention.py's torch.distributed ring over libdcp views at 2 and 4 gloo
# ranks against attention without CP). Prints its time. MEGATRON_VENV /
# MEGATRON_NEXT_VENV point at existing environments. `make bench-megatron-core` runs
# bench/megatron_core_compare.py under both releases (bench/RESULTS.md).
PYTHON3 ?= python3
MEGATRON_VENV := $(BUILD)/venv-megatron
MEGATRON_REQUIREMENTS := python/tests/megatron-requirements.txt
MEGATRON_PYTHON := $(MEGATRON_VENV)/bin/python
MEGATRON_NEXT_VENV := $(BUILD)/venv-megatron-0.19
MEGATRON_NEXT_REQUIREMENTS := python/tests/megatron-0.19-requirements.txt
MEGATRON_NEXT_PYTHON := $(MEGATRON_NEXT_VENV)/bin/python
MEGATRON_RELEASE_TESTS := megatron_core_test.py megatron_contract_test.py
.PHONY: test-megatron bench-megatron-core
$(MEGATRON_VENV)/installed: $(MEGATRON_REQUIREMENTS) | $(BUILD)
	rm -rf $(MEGATRON_VENV)
	$(PYTHON3) -m venv $(MEGATRON_VENV)
	$(MEGATRON_PYTHON) -m pip install -q -r $(MEGATRON_REQUIREMENTS)
	touch $@
$(MEGATRON_NEXT_VENV)/installed: $(MEGATRON_NEXT_REQUIREMENTS) | $(BUILD)
	rm -rf $(MEGATRON_NEXT_VENV)
	python312="$${PYTHON312:-$$(sh python/tests/find_python.sh 3.12)}" && \
	    "$$python312" -m venv $(MEGATRON_NEXT_VENV)
	$(MEGATRON_NEXT_PYTHON) -m pip install -q -r $(MEGATRON_NEXT_REQUIREMENTS)
	touch $@
test-megatron: $(MEGATRON_VENV)/installed $(MEGATRON_NEXT_VENV)/installed $(BUILD)/libdcp.so \
               $(BUILD)/dcp-plan
	@start=$$(date +%s); status=0; \
	for python in $(MEGATRON_PYTHON) $(MEGATRON_NEXT_PYTHON); do \
	    echo "test-megatron: $$($$python -c 'from importlib import metadata; print("megatron-core", metadata.version("megatron-core"))')"; \
	    DCP_LIBRARY=$(abspath $(BUILD)/libdcp.so) PYTHONWARNINGS=ignore \
	        $$python -B python/tests/run.py $(MEGATRON_RELEASE_TESTS) || status=1; \
	done; \
	DCP_LIBRARY=$(abspath $(BUILD)/libdcp.so) PYTHONWARNINGS=ignore \
	    $(MEGATRON_PYTHON) -B python/tests/run.py torch_package_test.py ring_attention_test.py || \
	    status=1; \
	echo "test-megatron: $$(( $$(date +%s) - start )) s"; exit $$status
bench-megatron-core: $(MEGATRON_VENV)/installed $(MEGATRON_NEXT_VENV)/installed $(BUILD)/libdcp.so \
                     $(BUILD)/plan_bench
	mkdir -p $(BUILD)/bench-lengths
	$(BUILD)/plan_bench --dump-lengths $(BUILD)/bench-lengths
	status=0; for python in $(MEGATRON_PYTHON) $(MEGATRON_NEXT_PYTHON); do \
	    DCP_LIBRARY=$(abspath $(BUILD)/libdcp.so) PYTHONWARNINGS=ignore \
	        $$python bench/megatron_core_compare.py --lengths-dir $(BUILD)/bench-lengths \
	        || status=1; \
	done; exit $$status

# ---- the planner's guarantee on random workloads (issue 28) ----------------------------------
# tests/test_plan_guarantee.c (plain and ASan/UBSan, fewer workloads under the sanitizers) in
# `make test`, `make all` and the seed runs; its length shapes are bench/length_shapes.h's, which
# bench/plan_bench.c shares.
GUARANTEE_TESTS := $(BUILD)/test_plan_guarantee $(BUILD)/test_plan_guarantee-san
TEST_PROGRAMS += $(GUARANTEE_TESTS)
SEEDED_TESTS += $(BUILD)/test_plan_guarantee
all: $(GUARANTEE_TESTS)
test-seeds: $(BUILD)/test_plan_guarantee
$(GUARANTEE_TESTS) $(BUILD)/plan_bench: bench/length_shapes.h

# ---- plans byte for byte ----------------------------------------------------------------------
# tests/test_plan_golden.c: the plans of a fixed set of workloads against tests/plan_golden.txt
# (a planner change that changes a plan fails; one meant to rewrites the file with
# `build/test_plan_golden --write tests/plan_golden.txt`). Plain build only: it checks plans,
# which the sanitizers do not change.
GOLDEN_TEST := $(BUILD)/test_plan_golden
TEST_PROGRAMS += $(GOLDEN_TEST)
all: $(GOLDEN_TEST)
$(GOLDEN_TEST): bench/length_shapes.h

# ---- dcp_nccl.h against NCCL's real semantics: the strict host transport (issue 31) ---------
# tests/fake_nccl behaves as NCCL 2.27.7 in test_nccl_host and its -san / -cxx builds above.
# This build behaves as NCCL before 2.22, where ncclCommAbort waits at once even inside a group,
# so that dcp_nccl.h's one-thread-per-communicator abort runs; it runs only the tests that abort
# with work stuck somewhere (the others are compiled, not called: -Wno-unused-function).
NCCL_HOST_2_21 := $(BUILD)/test_nccl_host-2.21
TEST_PROGRAMS += $(NCCL_HOST_2_21)
all: $(NCCL_HOST_2_21)
$(NCCL_HOST_2_21): tests/test_nccl_host.c tests/test.h tests/mtp_pack.h dcp.h dcp_nccl.h \
                   $(FAKE_NCCL) | $(BUILD)
	$(CC) $(C_FLAGS) -Wno-unused-function -DFAKE_NCCL_VERSION_CODE=22105 -Itests/fake_nccl $< \
	    -o $@ -lm -lpthread
$(NCCL_HOST_TESTS) $(NCCL_HOST_2_21) $(BUILD)/test_nccl_gpu.o: tests/quarantine.h
# make test-multirank also runs the four fault tests as 2 processes on one GPU against real
# NCCL (tests/multirank.sh, build/test_nccl_gpu with DCP_MULTIRANK_TEST=fault-...).

# ---- the surface a trainer integrates against (issue 30) ------------------------------------
# tests/test_integration.c (plain and ASan/UBSan): a rank view as FlashAttention's per-step
# varlen calls against the CPU ring, TransformerEngine's THD split, view runs, the idle form.
INTEGRATION_TESTS := $(BUILD)/test_integration $(BUILD)/test_integration-san
TEST_PROGRAMS += $(INTEGRATION_TESTS)
SEEDED_TESTS += $(BUILD)/test_integration
all: $(INTEGRATION_TESTS)
test-seeds: $(BUILD)/test_integration
$(INTEGRATION_TESTS): tests/tolerance.h
# tests/test_frontends.sh: one input planned through C (build/frontend-cases), dcp-plan and
# Python gives one plan, byte for byte.
SCRIPT_TESTS += tests/test_frontends.sh
all: $(BUILD)/frontend-cases
$(BUILD)/frontend-cases: tests/frontend_cases.c dcp.h | $(BUILD)
	$(CC) $(C_FLAGS) $< -o $@ -lm
# tests/test_typecheck.sh: mypy over python/libdcp (installed into build/venv-typecheck once;
# skips where PyPI cannot be reached).
SCRIPT_TESTS += tests/test_typecheck.sh
# tests/test_svg.sh: dcp_plan_svg's labels at 64 to 1,024 ranks, rendered to PNG where
# rsvg-convert or cairosvg is installed.
SCRIPT_TESTS += tests/test_svg.sh
# tests/test_documented.c makes every dcp_status a function's comment names happen;
# tests/test_documented.sh checks that the comments and its cases name the same pairs.
DOCUMENTED_TESTS := $(BUILD)/test_documented $(BUILD)/test_documented-san
TEST_PROGRAMS += $(DOCUMENTED_TESTS)
all: $(DOCUMENTED_TESTS)
SCRIPT_TESTS += tests/test_documented.sh

# ---- the kernels on the CPU: the execution model of tests/cuda_cpu (issue 26) ---------------
# dcp_cuda.cu compiled as host C++ against tests/cuda_cpu (a block's threads as fibers, the PTX
# twins, the CUDA runtime over host memory; README "Running the kernels on the CPU") and the
# GPU tests linked against it: build/test_cuda_kernels-cpu and its siblings, which `make test`
# runs under the A100 profile (sm_80) and the 99 KB one (sm_89) at once (the -profiles
# wrappers: a run is one core's work). They are the checked build (clang++): ASan and UBSan
# over the program, and every load and store of dcp_cuda.cu through the shared-memory shadow
# (racecheck, initcheck, the cp.async and bounds checks). g++ compiles the same source in
# test_cuda_primitives-cpu, which includes it (the primitives against their PTX ISA
# references, on the model). Without a GPU the nvcc builds of the kernel tests would only
# skip, so `make test` runs the model's builds instead (with a GPU, both, and the primitives'
# test on the hardware).
CLANGXX ?= clang++
CUDA_CPU := tests/cuda_cpu
CUDA_CPU_HEADERS := $(CUDA_CPU)/cuda_cpu.h $(CUDA_CPU)/model.h $(CUDA_CPU)/profile.h
CUDA_CPU_PARTS := executor checkers device runtime memory profile
# -fno-strict-aliasing: device code reads a bf16 pair as a 32-bit word, which host C++ forbids
CUDA_CPU_CXX := -std=c++14 $(WARNINGS) -fno-strict-aliasing -DDCP_CUDA_CPU -I$(CUDA_CPU) \
                -isystem $(CUDA_HOME)/include
# enum left out: the tests pass out-of-range enum values to the C API, which checks them
CUDA_CPU_SANITIZE := -fsanitize=address,undefined -fno-sanitize=enum -fno-sanitize-recover=all \
                     -fno-omit-frame-pointer -g
# ASan's checks as calls with our prefix: tests/cuda_cpu/checkers.cc sees each access first;
# every access, even a store to an address the same basic block already loaded (ASan's default
# checks an address once per block: the store of a read-modify-write would go unseen)
CUDA_CPU_SHADOW := -mllvm -asan-instrumentation-with-call-threshold=0 \
                   -mllvm -asan-memory-access-callback-prefix=dcp_cuda_cpu_access_ \
                   -mllvm -asan-opt-same-temp=0
# dcp.h's implementation once, optimised and unsanitised (its own -san tests check it): the
# references the kernels are compared with run fast; the test files' own DCP_IMPLEMENTATION
# is turned off by its include guard. The object libdcp_cuda.so links (position-independent).
CUDA_CPU_IMPLEMENTATION := $(BUILD)/dcp_impl-pic.o
CUDA_CPU_SEPARATE_IMPLEMENTATION := -DDCP_IMPLEMENTATION_INCLUDED
CUDA_CPU_CHECKED := $(CUDA_CPU_PARTS:%=$(BUILD)/cuda_cpu/%-checked.o) $(CUDA_CPU_IMPLEMENTATION)
CUDA_CPU_PLAIN := $(CUDA_CPU_PARTS:%=$(BUILD)/cuda_cpu/%.o) $(CUDA_CPU_IMPLEMENTATION)
CUDA_CPU_TESTS := test_cuda test_cuda_kernels test_cuda_attention test_cuda_hybrid
# the programs run under both profiles (the multi-rank ones: section "ranks on the model")
CUDA_CPU_PROFILED := $(CUDA_CPU_TESTS) test_nccl_gpu ring_attention_nccl
CUDA_CPU_RUNS := $(CUDA_CPU_TESTS:%=$(BUILD)/%-cpu-profiles) $(BUILD)/test_cuda_primitives-cpu
HAVE_CLANGXX := $(if $(shell command -v $(CLANGXX) 2>/dev/null),yes,)
CUDA_CPU_READY := $(and $(HAVE_NVCC),$(HAVE_CLANGXX))
GPU_PRESENT := $(if $(shell nvidia-smi -L 2>/dev/null | grep GPU),yes,)

$(BUILD)/cuda_cpu:
	mkdir -p $@
# The model's own parts under ASan (the fibers announce their stacks to it) without UBSan's
# checks in the per-lane loops; the checkers and the global shadow under neither: they run on
# every access.
$(BUILD)/cuda_cpu/%-checked.o: $(CUDA_CPU)/%.cc $(CUDA_CPU_HEADERS) | $(BUILD)/cuda_cpu
	$(CLANGXX) $(CUDA_CPU_CXX) -fsanitize=address -fno-omit-frame-pointer -g -O2 \
	    -DDCP_CUDA_CPU_SHADOW -c $< -o $@
CUDA_CPU_UNSANITIZED := checkers memory profile
$(CUDA_CPU_UNSANITIZED:%=$(BUILD)/cuda_cpu/%-checked.o): $(BUILD)/cuda_cpu/%-checked.o: \
                                   $(CUDA_CPU)/%.cc $(CUDA_CPU_HEADERS) | $(BUILD)/cuda_cpu
	$(CLANGXX) $(CUDA_CPU_CXX) -g -O2 -DDCP_CUDA_CPU_SHADOW -c $< -o $@
# the executor's table of the kernels' registers and launch bounds (generated: make kernel-limits)
$(BUILD)/cuda_cpu/executor-checked.o $(BUILD)/cuda_cpu/executor.o $(BUILD)/cuda_cpu/executor-pic.o: \
    $(CUDA_CPU)/kernel_limits.inc
$(CUDA_CPU_PARTS:%=$(BUILD)/cuda_cpu/%.o): $(BUILD)/cuda_cpu/%.o: $(CUDA_CPU)/%.cc \
                                                $(CUDA_CPU_HEADERS) | $(BUILD)/cuda_cpu
	$(CXX) $(CUDA_CPU_CXX) -O2 -c $< -o $@
$(BUILD)/cuda_cpu/dcp_cuda-checked.o: dcp_cuda.cu dcp.h $(CUDA_CPU_HEADERS) | $(BUILD)/cuda_cpu
	$(CLANGXX) -x c++ $(CUDA_CPU_CXX) $(CUDA_CPU_SANITIZE) $(CUDA_CPU_SHADOW) -O1 -c $< -o $@
$(CUDA_CPU_TESTS:%=$(BUILD)/cuda_cpu/%.o): $(BUILD)/cuda_cpu/%.o: tests/%.cu tests/test.h \
                                          tests/tolerance.h tests/cuda_test_util.h dcp.h \
                                          $(CUDA_CPU_HEADERS) | $(BUILD)/cuda_cpu
	$(CLANGXX) -x c++ $(CUDA_CPU_CXX) $(CUDA_CPU_SEPARATE_IMPLEMENTATION) $(CUDA_CPU_SANITIZE) -O1 \
	    -c $< -o $@
CUDA_CPU_LINK = $(CLANGXX) $(CUDA_CPU_SANITIZE) -rdynamic $(CUDA_CPU_CHECKED)
$(CUDA_CPU_TESTS:%=$(BUILD)/%-cpu): $(BUILD)/%-cpu: $(BUILD)/cuda_cpu/%.o $(CUDA_CPU_CHECKED) \
                                    $(BUILD)/cuda_cpu/dcp_cuda-checked.o
	$(CUDA_CPU_LINK) $< $(BUILD)/cuda_cpu/dcp_cuda-checked.o -o $@ -lm
# Both profiles: the program under DCP_CUDA_CPU_DEVICE=sm_80 and =sm_89, side by side.
$(CUDA_CPU_PROFILED:%=$(BUILD)/%-cpu-profiles): $(BUILD)/%-cpu-profiles: $(BUILD)/%-cpu \
                                             $(CUDA_CPU)/profiles.sh
	printf '#!/bin/sh\nexec sh "%s" "$$(dirname "$$0")/%s" sm_80 sm_89\n' \
	    "$(abspath $(CUDA_CPU)/profiles.sh)" "$(<F)" > $@
	chmod +x $@
# The primitives' parity test includes dcp_cuda.cu (its wrappers are internal): on the model,
# g++'s host build of it; on a GPU, sm_80 (the instructions it checks run on every device).
$(BUILD)/test_cuda_primitives-cpu: tests/test_cuda_primitives.cu tests/test.h tests/tolerance.h \
                                   tests/cuda_test_util.h dcp.h dcp_cuda.cu $(CUDA_CPU_HEADERS) \
                                   $(CUDA_CPU_PLAIN)
	$(CXX) -x c++ $(CUDA_CPU_CXX) $(CUDA_CPU_SEPARATE_IMPLEMENTATION) -Wno-unknown-pragmas -O1 $< \
	    -x none $(CUDA_CPU_PLAIN) -rdynamic -o $@ -lm
$(BUILD)/test_cuda_primitives: tests/test_cuda_primitives.cu tests/test.h tests/tolerance.h \
                               tests/cuda_test_util.h dcp.h dcp_cuda.cu | $(BUILD)
	$(NVCC) -std=c++14 -O2 -gencode=arch=compute_80,code=sm_80 -Xcompiler -Wall,-Wextra,-Werror \
	    $< -o $@
GPU_TESTS += $(BUILD)/test_cuda_primitives # test-gpu and sanitize-gpu run it
test-gpu sanitize-gpu: $(BUILD)/test_cuda_primitives

# The model's own checks (tests/cuda_cpu/test_model.cc): each blind spot of issue 35 closed, a
# kernel with the fault each (global races, misaligned vectors, a one-element overrun, a launch
# beyond __launch_bounds__, occupancy from registers); dcp_cuda.cu's kernels by their symbols.
$(BUILD)/cuda_cpu/test_model.o: $(CUDA_CPU)/test_model.cc tests/test.h dcp.h $(CUDA_CPU_HEADERS) \
                                | $(BUILD)/cuda_cpu
	$(CLANGXX) -x c++ $(CUDA_CPU_CXX) -I. $(CUDA_CPU_SEPARATE_IMPLEMENTATION) $(CUDA_CPU_SANITIZE) \
	    $(CUDA_CPU_SHADOW) -O1 -c $< -o $@
$(BUILD)/test_cuda_model-cpu: $(BUILD)/cuda_cpu/test_model.o $(CUDA_CPU_CHECKED) \
                              $(BUILD)/cuda_cpu/dcp_cuda-checked.o
	$(CUDA_CPU_LINK) $< $(BUILD)/cuda_cpu/dcp_cuda-checked.o -o $@ -lm -ldl
CUDA_CPU_RUNS += $(BUILD)/test_cuda_model-cpu
# The kernel profile (tests/cuda_cpu/kernel_report.cc): dcp_cuda.cu's kernels on fixed shapes on
# the model with its profile on, and their speed-of-light bounds on an A100 and an H100. make test
# runs its small shapes against tests/cuda_cpu/kernel_thresholds.txt (coalescing and bank-conflict
# efficiency per kernel: build/kernel_report-cpu-check); `make kernel-report` writes the report's
# shapes with the device build's SASS figures into bench/RESULTS.md's last section.
KERNEL_THRESHOLDS := $(CUDA_CPU)/kernel_thresholds.txt
$(BUILD)/cuda_cpu/kernel_report.o: $(CUDA_CPU)/kernel_report.cc dcp.h $(CUDA_CPU_HEADERS) \
                                   | $(BUILD)/cuda_cpu
	$(CLANGXX) -x c++ $(CUDA_CPU_CXX) -I. $(CUDA_CPU_SEPARATE_IMPLEMENTATION) $(CUDA_CPU_SANITIZE) \
	    $(CUDA_CPU_SHADOW) -O1 -c $< -o $@
$(BUILD)/kernel_report-cpu: $(BUILD)/cuda_cpu/kernel_report.o $(CUDA_CPU_CHECKED) \
                            $(BUILD)/cuda_cpu/dcp_cuda-checked.o
	$(CUDA_CPU_LINK) $< $(BUILD)/cuda_cpu/dcp_cuda-checked.o -o $@ -lm
$(BUILD)/kernel_report-cpu-check: $(BUILD)/kernel_report-cpu $(KERNEL_THRESHOLDS)
	printf '#!/bin/sh\nexec "$$(dirname "$$0")/%s" --check "%s"\n' "$(<F)" \
	    "$(abspath $(KERNEL_THRESHOLDS))" > $@
	chmod +x $@
CUDA_CPU_RUNS += $(BUILD)/kernel_report-cpu-check
# The same cases on a GPU, each operation timed (the GPU round's step 6): a round's
# kernel-times.tsv, given as MEASURED, sets the times beside the bounds in make kernel-report.
$(BUILD)/kernel_report: $(CUDA_CPU)/kernel_report.cc dcp.h $(BUILD)/dcp_cuda.o | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -I. -x cu $< -x none $(BUILD)/dcp_cuda.o -o $@
gpu-round-build: $(BUILD)/kernel_report
MEASURED ?=
# cuobjdump for the static SASS: the toolkit's, else PyPI's (nvidia-cuda-cuobjdump) in a venv
SASS_VENV := $(BUILD)/venv-sass
$(SASS_VENV)/installed:
	$(PYTHON3) -m venv $(SASS_VENV) && $(SASS_VENV)/bin/pip install -q nvidia-cuda-cuobjdump
	touch $@
.PHONY: kernel-report
kernel-report: $(BUILD)/kernel_report-cpu $(BUILD)/dcp_cuda.o \
               $(if $(wildcard $(CUDA_HOME)/bin/cuobjdump),,$(SASS_VENV)/installed)
	$(BUILD)/kernel_report-cpu --markdown $(BUILD)/kernel-report.md \
	    --kernels $(BUILD)/kernel-report.kernels $(if $(MEASURED),--measured $(MEASURED))
	$$(ls $(CUDA_HOME)/bin/cuobjdump $(SASS_VENV)/lib/python*/site-packages/nvidia/cu*/bin/cuobjdump \
	    2>/dev/null | head -n 1) -sass $(BUILD)/dcp_cuda.o > $(BUILD)/dcp_cuda.sass
	$(PYTHON3) $(CUDA_CPU)/sass_profile.py $(BUILD)/dcp_cuda.sass $(CUDA_CPU)/kernel_limits.inc \
	    $(BUILD)/kernel-report.kernels > $(BUILD)/kernel-report-sass.md
	$(PYTHON3) $(CUDA_CPU)/results_section.py bench/RESULTS.md $(BUILD)/kernel-report.md \
	    $(BUILD)/kernel-report-sass.md "make kernel-report"
	cat $(BUILD)/kernel-report.md $(BUILD)/kernel-report-sass.md
ifeq ($(CUDA_CPU_READY),yes)
all: $(CUDA_CPU_RUNS)
TEST_PROGRAMS += $(CUDA_CPU_RUNS)
ifeq ($(GPU_PRESENT),yes)
all: $(BUILD)/test_cuda_primitives
TEST_PROGRAMS += $(BUILD)/test_cuda_primitives
else
TEST_PROGRAMS := $(filter-out $(CUDA_CPU_TESTS:%=$(BUILD)/%),$(TEST_PROGRAMS))
endif
endif
# The model's table of each kernel's registers, __launch_bounds__ and static shared memory
# (tests/cuda_cpu/kernel_limits.inc) comes from the device build: `make kernel-limits` writes it,
# tests/test_kernel_limits.sh (make test) fails when it is stale.
.PHONY: kernel-limits
kernel-limits: $(BUILD)/dcp_cuda.o
	$(PYTHON3) $(CUDA_CPU)/kernel_limits.py $(DEVICE_KEEP) > $(CUDA_CPU)/kernel_limits.inc
SCRIPT_TESTS += tests/test_kernel_limits.sh
.PHONY: report-cuda-cpu
report-skips: report-cuda-cpu
report-cuda-cpu:
ifneq ($(CUDA_CPU_READY),yes)
	@echo "skipped (CPU execution model): $(CUDA_CPU_RUNS): needs nvcc's CUDA headers and $(CLANGXX)"
else ifneq ($(GPU_PRESENT),yes)
	@echo "not run (no GPU: nvidia-smi lists none): $(CUDA_CPU_TESTS:%=$(BUILD)/%) and $(BUILD)/test_cuda_primitives (not built); their tests run on the CPU execution model: $(CUDA_CPU_RUNS)"
endif

# Planted bugs (tests/mutants.sh): each mutant of dcp_cuda.cu, compiled as the checked build,
# must make its test fail on the model. A few minutes: one compile of dcp_cuda.cu per mutant.
# MUTANTS_PART=K/N runs the K-th of N equal parts (the GPU round's calls last 10 minutes).
# make test checks only that every mutant still applies (tests/test_mutants_apply.sh, seconds).
MUTANTS_PART ?=
SCRIPT_TESTS += tests/test_mutants_apply.sh
test-mutants: $(CUDA_CPU_CHECKED) $(BUILD)/cuda_cpu/test_cuda_attention.o \
              $(BUILD)/cuda_cpu/test_cuda_kernels.o $(BUILD)/cuda_cpu/kernel_report.o
	CUDA_CPU_COMPILE="$(CLANGXX) -x c++ $(CUDA_CPU_CXX) $(CUDA_CPU_SANITIZE) $(CUDA_CPU_SHADOW) -O1" \
	    CUDA_CPU_LINK="$(CUDA_CPU_LINK)" BUILD=$(BUILD) MUTANTS_PART=$(MUTANTS_PART) \
	    sh tests/mutants.sh

# ---- the GPU round: everything that needs a GPU, in one command (issue 29) -------------------
# `make gpu-round` on a machine with a GPU (docs/gpu-round.md): builds for the device it finds
# (gpu-round-build), then runs issue 29's steps in the order STEPS names (N, N-M, or N.K for
# step N's K-th command; default: the most important first, tests/gpu_round.py's PRIORITY),
# each command under its own time limit with its own log in GPU_ROUND_LOGS, never stopping at a
# failure, within TIME_BUDGET seconds when set (what does not fit is named for the next call),
# and writes the summary OUT (default build/gpu-round.md; where OUT names a folder, gpu-round.md
# inside it) with its .json and -logs.tar.gz beside it. A later call of the same commit merges
# into the same OUT; `make gpu-round-merge ROUNDS="a.json b.json"` merges calls brought back
# from elsewhere. DRY_RUN=1 (make test runs it: tests/test_gpu_round.sh) runs each command's
# wiring check and marks every step "not run: no GPU". COMMIT names the commit where the tree
# has no .git.
OUT ?= $(BUILD)/gpu-round.md
STEPS ?=
DRY_RUN ?= 0
TIME_BUDGET ?= 0
GPU_ROUND_LOGS ?= $(BUILD)/gpu-round-logs
# the primitives' parity test of issue 26 (step 4): named here once
GPU_ROUND_PRIMITIVES := $(BUILD)/test_cuda_primitives
GPU_ROUND_SANITIZER := $(or $(shell command -v $(COMPUTE_SANITIZER) 2>/dev/null),\
                         $(CUDA_HOME)/bin/compute-sanitizer)
GPU_ROUND_DRY := $(filter 1,$(DRY_RUN))
.PHONY: gpu-round gpu-round-build gpu-round-merge
gpu-round-build: all $(GPU_TESTS) $(GPU_ROUND_PRIMITIVES) $(CUDA_BUILDS) \
                 $(if $(HAVE_NCCL),$(NCCL_PROGRAMS) $(NCCL_BUILDS) $(BUILD)/a2a_bench)
gpu-round: $(if $(GPU_ROUND_DRY),all)
	+GPU_ROUND_GPU_TESTS="$(GPU_TESTS) $(BUILD)/test_nccl_gpu" \
	    GPU_ROUND_PRIMITIVES=$(GPU_ROUND_PRIMITIVES) $(PYTHON3) tests/gpu_round.py \
	    $(if $(STEPS),--steps '$(STEPS)') --out '$(OUT)' --logs '$(GPU_ROUND_LOGS)' \
	    --build $(BUILD) --make '$(MAKE)' --sanitizer '$(GPU_ROUND_SANITIZER)' \
	    --time-budget $(TIME_BUDGET) $(if $(COMMIT),--commit $(COMMIT)) \
	    $(if $(GPU_ROUND_DRY),--dry-run) \
	    --command 'make gpu-round$(if $(STEPS), STEPS=$(STEPS))$(if $(GPU_ROUND_DRY), DRY_RUN=1)'
gpu-round-merge:
	GPU_ROUND_GPU_TESTS="$(GPU_TESTS) $(BUILD)/test_nccl_gpu" $(PYTHON3) tests/gpu_round.py \
	    --out '$(OUT)' --merge $(ROUNDS)
SCRIPT_TESTS += tests/test_gpu_round.sh
# ---- ranks on the model: dcp_nccl.h's device paths over the host transport (issue 26, phase 2)
# The GPU programs that use NCCL, compiled as for the model (the checked build) against the
# host transport (tests/fake_nccl): each simulated rank is a thread with a device thread that
# runs its streams, NCCL is the strict fake, and a kernel launch is the model's grid as a host
# function on the rank's stream. tests/cuda_cpu/device.cc answers the device queries; the
# transport's fake_runtime.c (included by the program) is the stream runtime, instead of
# tests/cuda_cpu/runtime.cc. build/test_nccl_gpu-cpu: test_nccl_gpu's tests on one rank, and
# its multi-rank roll at 2 and 4 ranks as threads, under both profiles in `make test`.
CUDA_CPU_TRANSPORT := $(BUILD)/cuda_cpu/executor-checked.o $(BUILD)/cuda_cpu/checkers-checked.o \
                      $(BUILD)/cuda_cpu/device-checked.o $(BUILD)/cuda_cpu/memory-checked.o \
                      $(BUILD)/cuda_cpu/profile-checked.o \
                      $(CUDA_CPU_IMPLEMENTATION)
# -Wno-unused-function: the transport's test interface is there for programs that use more of it
CUDA_CPU_TRANSPORT_CXX := -Itests/fake_nccl -Wno-unused-function \
                          -DFAKE_NCCL_CUDA_RUNTIME='"$(CUDA_HOME)/include/cuda_runtime.h"'
$(BUILD)/cuda_cpu/test_nccl_gpu.o: tests/test_nccl_gpu.cu tests/test.h tests/tolerance.h \
                                   tests/mtp_pack.h tests/quarantine.h dcp.h dcp_nccl.h \
                                   examples/multiprocess.h $(FAKE_NCCL) $(CUDA_CPU_HEADERS) \
                                   | $(BUILD)/cuda_cpu
	$(CLANGXX) -x c++ $(CUDA_CPU_CXX) $(CUDA_CPU_TRANSPORT_CXX) $(CUDA_CPU_SEPARATE_IMPLEMENTATION) \
	    $(CUDA_CPU_SANITIZE) -O1 -c $< -o $@
# build/ring_attention_nccl-cpu: examples/ring_attention_nccl.cu's ring at 2, 4 and 8 ranks as
# threads, and with groups of 3, 5 and 6 ranks, forward and backward, each rank against the
# one-rank result (tests/ring_attention_cpu.cc); `make bench-ring-cpu` adds groups of 12 and a
# 48-rank pool planning groups of 12 and 48 (minutes: not in make test).
$(BUILD)/cuda_cpu/ring_attention_nccl.o: tests/ring_attention_cpu.cc \
                                         examples/ring_attention_nccl.cu examples/multiprocess.h \
                                         tests/test.h dcp.h dcp_nccl.h \
                                         $(FAKE_NCCL) $(CUDA_CPU_HEADERS) | $(BUILD)/cuda_cpu
	$(CLANGXX) -x c++ $(CUDA_CPU_CXX) $(CUDA_CPU_TRANSPORT_CXX) $(CUDA_CPU_SEPARATE_IMPLEMENTATION) \
	    $(CUDA_CPU_SANITIZE) -O1 -c $< -o $@
CUDA_CPU_TRANSPORT_PROGRAMS := $(BUILD)/test_nccl_gpu-cpu $(BUILD)/ring_attention_nccl-cpu
$(CUDA_CPU_TRANSPORT_PROGRAMS): $(BUILD)/%-cpu: $(BUILD)/cuda_cpu/%.o $(CUDA_CPU_TRANSPORT) \
                                $(BUILD)/cuda_cpu/dcp_cuda-checked.o
	$(CLANGXX) $(CUDA_CPU_SANITIZE) -rdynamic $^ -o $@ -lm -lpthread
ifeq ($(CUDA_CPU_READY),yes)
all: $(BUILD)/test_nccl_gpu-cpu-profiles $(BUILD)/ring_attention_nccl-cpu-profiles
TEST_PROGRAMS += $(BUILD)/test_nccl_gpu-cpu-profiles $(BUILD)/ring_attention_nccl-cpu-profiles
ifneq ($(GPU_PRESENT),yes)
TEST_PROGRAMS := $(filter-out $(BUILD)/test_nccl_gpu,$(TEST_PROGRAMS))
endif
endif

# ---- the torch ops on the model (issue 26, phase 2) -------------------------------------------
# build/libdcp_cuda-cpu.so: libdcp_cuda.so's functions built from the model (g++, unchecked,
# one device whose memory is any host pointer: DCP_CUDA_CPU_UNIFIED), so that libdcp.ops runs the
# real kernels on torch CPU tensors. `make test-torch-cpu` runs python/tests/test_ops.py and
# python/examples/train_tiny.py (through test_ops) on it with the torch of build/venv-megatron,
# and `make test-megatron` (which CI runs after `make test`) runs it first. Not in `make test`:
# torch is a 5 GB install.
CUDA_CPU_PIC := $(CUDA_CPU_PARTS:%=$(BUILD)/cuda_cpu/%-pic.o) $(BUILD)/cuda_cpu/dcp_cuda-pic.o
$(CUDA_CPU_PARTS:%=$(BUILD)/cuda_cpu/%-pic.o): $(BUILD)/cuda_cpu/%-pic.o: $(CUDA_CPU)/%.cc \
                                                    $(CUDA_CPU_HEADERS) | $(BUILD)/cuda_cpu
	$(CXX) $(CUDA_CPU_CXX) -fPIC -DDCP_CUDA_CPU_UNIFIED -O2 -c $< -o $@
$(BUILD)/cuda_cpu/dcp_cuda-pic.o: dcp_cuda.cu dcp.h $(CUDA_CPU_HEADERS) | $(BUILD)/cuda_cpu
	$(CXX) -x c++ $(CUDA_CPU_CXX) -Wno-unknown-pragmas -fPIC -O2 -c $< -o $@
# -Bsymbolic: its CUDA runtime functions are its own, not those of a libcudart the process
# already loaded (torch's)
$(BUILD)/libdcp_cuda-cpu.so: $(CUDA_CPU_PIC) $(BUILD)/dcp_impl-pic.o
	$(CXX) -shared -Wl,-Bsymbolic $^ -o $@ -lm -lpthread
.PHONY: test-torch-cpu
test-torch-cpu: $(MEGATRON_VENV)/installed $(BUILD)/libdcp_cuda-cpu.so $(BUILD)/libdcp.so
	sh tests/test_torch_cpu.sh $(MEGATRON_PYTHON)
ifeq ($(HAVE_NVCC),yes) # the toolkit's headers
test-megatron: test-torch-cpu
endif

# ---- the memory bound (issue 36) --------------------------------------------------------------
# tests/test_memory.c: dcp_plan_memory_estimate against the peak a counting allocator measures
# over strategies, CP sets, E and sizes, and config.memory_limit's refusal before any
# allocation. Plain build only: a grid of plans, whose code the planner tests' sanitizer builds
# cover.
MEMORY_TEST := $(BUILD)/test_memory
TEST_PROGRAMS += $(MEMORY_TEST)
SEEDED_TESTS += $(MEMORY_TEST)
all: $(MEMORY_TEST)
test-seeds: $(MEMORY_TEST)

# ---- one communicator for every CP group (issue 37) --------------------------------------------
# bench/comm_bench.c on the host transport (every rank a thread; no GPU, no NCCL): the set's
# communicators, set-up, ring and all-to-all peers, the per-microbatch switch at 8,192 samples x
# 1,024 ranks. Built twice, against this tree and against $(BASE)'s dcp.h / dcp_nccl.h (git
# show), and both run in one command, before and after side by side. Minutes at 8,192 ranks.
BASE ?= main
COMM_BENCH_FLAGS := -std=c99 -O2 $(WARNINGS) -Wno-unused-function -Itests/fake_nccl -Ibench
COMM_BENCH_RANKS ?= 1024 8192
$(BUILD)/comm_bench: bench/comm_bench.c bench/no_kernels.h dcp.h dcp_nccl.h $(FAKE_NCCL) | $(BUILD)
	$(CC) $(COMM_BENCH_FLAGS) -I. $< -o $@ -lm -lpthread
$(BUILD)/comm_bench-base: bench/comm_bench.c bench/no_kernels.h $(FAKE_NCCL) | $(BUILD)
	mkdir -p $(BUILD)/comm-base
	git show $(BASE):dcp.h > $(BUILD)/comm-base/dcp.h
	git show $(BASE):dcp_nccl.h > $(BUILD)/comm-base/dcp_nccl.h
	$(CC) $(COMM_BENCH_FLAGS) -I$(BUILD)/comm-base $< -o $@ -lm -lpthread
.PHONY: bench-comm bench-ring-cpu $(BUILD)/comm_bench-base
bench-comm: $(BUILD)/comm_bench $(BUILD)/comm_bench-base
	@echo "== $(BASE) (one communicator per CP size)"
	$(BUILD)/comm_bench-base $(COMM_BENCH_RANKS:%=--ranks %)
	@echo "== this tree (one communicator)"
	$(BUILD)/comm_bench $(COMM_BENCH_RANKS:%=--ranks %)
# the ring on the CPU execution model at cp 12 and in a 48-rank pool of groups of 12 and 48
bench-ring-cpu: $(BUILD)/ring_attention_nccl-cpu
	DCP_RING_CPU_LARGE=1 $(BUILD)/ring_attention_nccl-cpu groups_of_12 pool_of_48
