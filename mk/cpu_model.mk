# The CPU execution model (tests/cuda_cpu; docs/cpu-model.md): dcp_cuda.cu compiled as host C++
# (a block's threads as fibers, the PTX twins, the CUDA runtime over host memory) and the GPU
# tests of mk/tests.mk's CUDA_TESTS linked against it, which make test runs under the A100 profile
# (sm_80) and the 99 KB one (sm_89) at once (the -profiles wrappers). They are the checked build
# (clang++): ASan and UBSan over the program, and every load and store of dcp_cuda.cu through
# the shadows (shared and global races, initcheck, alignment, the cp.async and bounds checks).
# g++ compiles the same source in test_cuda_primitives-cpu, which includes it (the primitives
# against their PTX ISA references). The programs that use NCCL run over the host transport
# (tests/fake_nccl) as threads. Also here: the model's own tests, the kernel profile, the planted
# bugs, and the model as a shared library for the torch ops.

CUDA_CPU := tests/cuda_cpu
CUDA_CPU_HEADERS := $(CUDA_CPU)/cuda_cpu.h $(CUDA_CPU)/model.h $(CUDA_CPU)/profile.h
CUDA_CPU_PARTS := executor checkers device runtime memory profile
# -fno-strict-aliasing: device code reads a bf16 pair as a 32-bit word, which host C++ forbids
CUDA_CPU_CXX := -std=c++14 $(WARNINGS) -fno-strict-aliasing -DDCP_CUDA_CPU -I$(CUDA_CPU) \
                -isystem $(CUDA_HOME)/include
# enum left out: the tests pass out-of-range enum values to the C API, which checks them
CUDA_CPU_SANITIZE := -fsanitize=address,undefined -fno-sanitize=enum -fno-sanitize-recover=all \
                     -fno-omit-frame-pointer -g1
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
CUDA_CPU_LINK = $(CLANGXX) $(CUDA_CPU_SANITIZE) -rdynamic $(CUDA_CPU_CHECKED)

# How each of mk/tests.mk's MODEL_TESTS is built for the model: over the host transport (NCCL),
# as g++'s plain build (the primitives include dcp_cuda.cu), or the checked build (the rest).
CUDA_CPU_TRANSPORT_TESTS := $(NCCL_TESTS)
CUDA_CPU_PLAIN_TESTS := test_cuda_primitives
CUDA_CPU_TESTS := $(filter-out $(CUDA_CPU_TRANSPORT_TESTS) $(CUDA_CPU_PLAIN_TESTS),$(MODEL_TESTS))
# the programs run under both profiles (one more: the ring example over the transport)
CUDA_CPU_PROFILED := $(CUDA_CPU_TESTS) $(CUDA_CPU_TRANSPORT_TESTS) ring_attention_nccl
# the model's own tests and the kernel profile's efficiency check
CUDA_CPU_OWN_RUNS := $(BUILD)/test_cuda_model-cpu $(BUILD)/kernel_report-cpu-check
CUDA_CPU_RUNS := $(CUDA_CPU_PROFILED:%=$(BUILD)/%-cpu-profiles) \
                 $(CUDA_CPU_PLAIN_TESTS:%=$(BUILD)/%-cpu) $(CUDA_CPU_OWN_RUNS)

ifeq ($(CUDA_CPU_READY),yes)
# first in the list: they are the longest, and the runner starts programs in list order
TEST_PROGRAMS := $(CUDA_CPU_RUNS) $(TEST_PROGRAMS)
endif
# The model's table of each kernel's registers, __launch_bounds__ and static shared memory
# (tests/cuda_cpu/kernel_limits.inc) comes from the device build: `make kernel-limits` writes it,
# tests/test_kernel_limits.sh fails when it is stale. make test checks only that every planted
# bug still applies (tests/test_mutants_apply.sh, seconds; make test-mutants runs them).
SCRIPT_TESTS += tests/test_kernel_limits.sh tests/test_mutants_apply.sh

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

# The checked builds of the kernel tests.
$(CUDA_CPU_TESTS:%=$(BUILD)/cuda_cpu/%.o): $(BUILD)/cuda_cpu/%.o: tests/%.cu tests/test.h \
                                          tests/tolerance.h tests/cuda_test_util.h dcp.h \
                                          $(CUDA_CPU_HEADERS) | $(BUILD)/cuda_cpu
	$(CLANGXX) -x c++ $(CUDA_CPU_CXX) $(CUDA_CPU_SEPARATE_IMPLEMENTATION) $(CUDA_CPU_SANITIZE) -O1 \
	    -c $< -o $@
$(CUDA_CPU_TESTS:%=$(BUILD)/%-cpu): $(BUILD)/%-cpu: $(BUILD)/cuda_cpu/%.o $(CUDA_CPU_CHECKED) \
                                    $(BUILD)/cuda_cpu/dcp_cuda-checked.o
	$(CUDA_CPU_LINK) $< $(BUILD)/cuda_cpu/dcp_cuda-checked.o -o $@ -lm
# Both profiles: the program under DCP_CUDA_CPU_DEVICE=sm_80 and =sm_89, side by side, every
# test under each; or, for a program named in CUDA_CPU_PROFILES_<name>, its tests shared out
# between the two (PROFILE=NAME,...: the tests whose names contain a NAME, or with -NAME all
# but those, tests/test.h; profiles.sh), where running a case twice checks nothing more. The
# sm_80 run leaves out (-NAME) what only sm_89 runs, so that a test added later runs there.
# What differs between the profiles is the shared memory a block may have (163 KB, 99 KB),
# which only the attention backward at head dim 128 asks about (one stage or two,
# dcp_cuda__bwd_stages), and the launch limits every launch meets:
# - the attention test runs attention_steps (head dims 64 and 128, forward and backward) under
#   both; the rest but the long pack under sm_80; the long pack (its backward at head dim 128)
#   under sm_89;
# - the RoPE, conv1d, merge and convert kernels ask for no profile-dependent shared memory: the
#   argument checks and each family's shape tests run under sm_89, the rest under sm_80;
# - the ring example's cases are the attention kernels on more ranks: its rings of 2, 4 and 8
#   run under sm_80, its odd and mixed groups under sm_89.
CUDA_CPU_PROFILES := sm_80 sm_89
CUDA_CPU_PROFILES_test_cuda_attention := sm_80=-attention_long_pack \
                                         sm_89=attention_steps,attention_long_pack
CUDA_CPU_PROFILES_test_cuda_kernels := \
    sm_80=-rope_shapes,-rope_single_tensor,-conv1d_shapes,-conv1d_boundaries,-merge_shapes,-convert \
    sm_89=arguments,rope_shapes,rope_single_tensor,conv1d_shapes,conv1d_boundaries,merge_shapes,convert
CUDA_CPU_PROFILES_ring_attention_nccl := sm_80=-groups_of sm_89=groups_of
$(CUDA_CPU_PROFILED:%=$(BUILD)/%-cpu-profiles): $(BUILD)/%-cpu-profiles: $(BUILD)/%-cpu \
                                             $(CUDA_CPU)/profiles.sh mk/cpu_model.mk
	printf '#!/bin/sh\nexec sh "%s" "$$(dirname "$$0")/%s" %s\n' \
	    "$(abspath $(CUDA_CPU)/profiles.sh)" "$(<F)" \
	    "$(or $(CUDA_CPU_PROFILES_$*),$(CUDA_CPU_PROFILES))" > $@
	chmod +x $@
# The primitives' parity test on the model: g++'s host build of dcp_cuda.cu, which it includes.
$(BUILD)/test_cuda_primitives-cpu: tests/test_cuda_primitives.cu tests/test.h tests/tolerance.h \
                                   tests/cuda_test_util.h dcp.h dcp_cuda.cu $(CUDA_CPU_HEADERS) \
                                   $(CUDA_CPU_PLAIN)
	$(CXX) -x c++ $(CUDA_CPU_CXX) $(CUDA_CPU_SEPARATE_IMPLEMENTATION) -Wno-unknown-pragmas -O1 $< \
	    -x none $(CUDA_CPU_PLAIN) -rdynamic -o $@ -lm

# Over the host transport: each simulated rank is a thread with a device thread that runs its
# streams, NCCL is the strict fake, and a kernel launch is the model's grid as a host function on
# the rank's stream. tests/cuda_cpu/device.cc answers the device queries; the transport's
# fake_runtime.c (included by the program) is the stream runtime, instead of
# tests/cuda_cpu/runtime.cc. build/test_nccl_gpu-cpu: test_nccl_gpu's tests on one rank and its
# multi-rank runs as threads; build/ring_attention_nccl-cpu: examples/ring_attention_nccl.cu's
# ring as threads at 2, 4 and 8 ranks and with groups of 3, 5 and 6, forward and backward, each
# rank against the one-rank result (tests/ring_attention_cpu.cc); `make bench-ring-cpu` adds
# groups of 12 and a 48-rank pool planning groups of 12 and 48 (minutes: not in make test).
CUDA_CPU_TRANSPORT := $(BUILD)/cuda_cpu/executor-checked.o $(BUILD)/cuda_cpu/checkers-checked.o \
                      $(BUILD)/cuda_cpu/device-checked.o $(BUILD)/cuda_cpu/memory-checked.o \
                      $(BUILD)/cuda_cpu/profile-checked.o $(CUDA_CPU_IMPLEMENTATION)
# -Wno-unused-function: the transport's test interface is there for programs that use more of it
CUDA_CPU_TRANSPORT_CXX := -Itests/fake_nccl -Wno-unused-function \
                          -DFAKE_NCCL_CUDA_RUNTIME='"$(CUDA_HOME)/include/cuda_runtime.h"'
$(BUILD)/cuda_cpu/test_nccl_gpu.o: tests/test_nccl_gpu.cu tests/test.h tests/tolerance.h \
                                   tests/mtp_pack.h tests/quarantine.h dcp.h dcp_nccl.h \
                                   examples/multiprocess.h $(FAKE_NCCL) $(CUDA_CPU_HEADERS) \
                                   | $(BUILD)/cuda_cpu
	$(CLANGXX) -x c++ $(CUDA_CPU_CXX) $(CUDA_CPU_TRANSPORT_CXX) $(CUDA_CPU_SEPARATE_IMPLEMENTATION) \
	    $(CUDA_CPU_SANITIZE) -O1 -c $< -o $@
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

# The model's own checks (tests/cuda_cpu/test_model.cc): each blind spot closed, a kernel with
# the fault each (global races, misaligned vectors, a one-element overrun, a launch beyond
# __launch_bounds__, occupancy from registers); dcp_cuda.cu's kernels by their symbols.
$(BUILD)/cuda_cpu/test_model.o: $(CUDA_CPU)/test_model.cc tests/test.h dcp.h $(CUDA_CPU_HEADERS) \
                                | $(BUILD)/cuda_cpu
	$(CLANGXX) -x c++ $(CUDA_CPU_CXX) -I. $(CUDA_CPU_SEPARATE_IMPLEMENTATION) $(CUDA_CPU_SANITIZE) \
	    $(CUDA_CPU_SHADOW) -O1 -c $< -o $@
$(BUILD)/test_cuda_model-cpu: $(BUILD)/cuda_cpu/test_model.o $(CUDA_CPU_CHECKED) \
                              $(BUILD)/cuda_cpu/dcp_cuda-checked.o
	$(CUDA_CPU_LINK) $< $(BUILD)/cuda_cpu/dcp_cuda-checked.o -o $@ -lm -ldl

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
# The same cases on a GPU, each operation timed (the GPU round's step 6): a round's
# kernel-times.tsv, given as MEASURED, sets the times beside the bounds in make kernel-report.
$(BUILD)/kernel_report: $(CUDA_CPU)/kernel_report.cc dcp.h $(BUILD)/dcp_cuda.o | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -I. -x cu $< -x none $(BUILD)/dcp_cuda.o -o $@
MEASURED ?=
# cuobjdump for the static SASS: the toolkit's, else PyPI's (nvidia-cuda-cuobjdump) in a venv
SASS_VENV := $(BUILD)/venv-sass
$(SASS_VENV)/installed:
	$(PYTHON3) -m venv $(SASS_VENV) && $(SASS_VENV)/bin/pip install -q nvidia-cuda-cuobjdump
	touch $@
.PHONY: kernel-report kernel-limits test-mutants
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
kernel-limits: $(BUILD)/dcp_cuda.o
	$(PYTHON3) $(CUDA_CPU)/kernel_limits.py $(DEVICE_KEEP) > $(CUDA_CPU)/kernel_limits.inc

# Planted bugs (tests/mutants.sh): each mutant of dcp_cuda.cu, compiled as the checked build,
# must make its test fail on the model. A few minutes: one compile of dcp_cuda.cu per mutant.
# MUTANTS_PART=K/N runs the K-th of N equal parts (the GPU round's calls last 10 minutes).
MUTANTS_PART ?=
test-mutants: $(CUDA_CPU_CHECKED) $(BUILD)/cuda_cpu/test_cuda_attention.o \
              $(BUILD)/cuda_cpu/test_cuda_kernels.o $(BUILD)/cuda_cpu/kernel_report.o
	CUDA_CPU_COMPILE="$(CLANGXX) -x c++ $(CUDA_CPU_CXX) $(CUDA_CPU_SANITIZE) $(CUDA_CPU_SHADOW) -O1" \
	    CUDA_CPU_LINK="$(CUDA_CPU_LINK)" BUILD=$(BUILD) MUTANTS_PART=$(MUTANTS_PART) \
	    sh tests/mutants.sh

# build/libdcp_cuda-cpu.so: libdcp_cuda.so's functions built from the model (g++, unchecked,
# one device whose memory is any host pointer: DCP_CUDA_CPU_UNIFIED), so that libdcp.ops runs the
# real kernels on torch CPU tensors (make test-torch-cpu, mk/megatron.mk).
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

# the ring on the CPU execution model at cp 12 and in a 48-rank pool of groups of 12 and 48
.PHONY: bench-ring-cpu
bench-ring-cpu: $(BUILD)/ring_attention_nccl-cpu
	DCP_RING_CPU_LARGE=1 $(BUILD)/ring_attention_nccl-cpu groups_of_12 pool_of_48
