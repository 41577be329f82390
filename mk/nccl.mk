# dcp_nccl.h: over the host transport (tests/fake_nccl: NCCL and CUDA runtime stand-ins picked by
# the include path, ranks as threads; needs neither a GPU nor NCCL), compiled against real NCCL,
# and on N processes of one GPU. Its model builds are in mk/cpu_model.mk.

FAKE_NCCL := tests/fake_nccl/nccl.h tests/fake_nccl/cuda_runtime.h tests/fake_nccl/fake_runtime.c
NCCL_TEST_HEADERS := tests/mtp_pack.h tests/quarantine.h
NCCL_PROGRAMS := $(BUILD)/ring_attention_nccl $(BUILD)/a2a_bench
# dcp_nccl.h as C and under nvcc (compile only: running NCCL needs a GPU)
NCCL_COMPILE_CHECKS := $(BUILD)/nccl-c.o $(BUILD)/nccl-nvcc.o

# test_nccl_host (mk/tests.mk's list: plain and -san) as C++ too, where it adds the RAII override
# guard's test (exceptions through the scope), and as NCCL before 2.22, where ncclCommAbort waits
# at once even inside a group, so that dcp_nccl.h's one-thread-per-communicator abort runs (only
# the tests that abort with work stuck somewhere; the others are compiled, not called).
NCCL_HOST_VARIANTS := $(BUILD)/test_nccl_host-cxx $(BUILD)/test_nccl_host-2.21
TEST_PROGRAMS += $(NCCL_HOST_VARIANTS)
ifeq ($(HAVE_NCCL),yes)
TEST_BUILDS += $(NCCL_COMPILE_CHECKS) $(NCCL_PROGRAMS) $(NCCL_TESTS:%=$(BUILD)/%)
# the nvcc build runs where a GPU is or where the model cannot run it instead
TEST_PROGRAMS += $(if $(or $(GPU_PRESENT),$(if $(CUDA_CPU_READY),,yes)),$(NCCL_TESTS:%=$(BUILD)/%))
endif

$(BUILD)/test_nccl_host $(BUILD)/test_nccl_host-san: TEST_FLAGS := -Itests/fake_nccl
$(BUILD)/test_nccl_host $(BUILD)/test_nccl_host-san: TEST_LIBS := -lpthread
$(BUILD)/test_nccl_host $(BUILD)/test_nccl_host-san $(NCCL_HOST_VARIANTS): dcp_nccl.h $(FAKE_NCCL) \
                                                                         $(NCCL_TEST_HEADERS)
$(BUILD)/test_nccl_host-cxx: tests/test_nccl_host.c tests/test.h dcp.h | $(BUILD)
	$(CXX) $(CXX_FLAGS) -x c++ -Itests/fake_nccl $< -o $@ -lm -lpthread
$(BUILD)/test_nccl_host-2.21: tests/test_nccl_host.c tests/test.h dcp.h | $(BUILD)
	$(CC) $(C_FLAGS) -Wno-unused-function -DFAKE_NCCL_VERSION_CODE=22105 -Itests/fake_nccl $< \
	    -o $@ -lm -lpthread

$(BUILD)/nccl-c.o: tests/test_nccl_compile.c dcp_nccl.h dcp.h | $(BUILD)
	$(CC) -std=c99 -O2 -Wall -Wextra -Werror $(CUDA_INCLUDE) -c $< -o $@
$(BUILD)/nccl-nvcc.o: tests/test_nccl_compile.c dcp_nccl.h dcp.h | $(BUILD)
	$(NVCC) $(NVCC_HOST_FLAGS) -x cu -c $< -o $@

# dcp_nccl.h's GPU test (one rank in make test, where a GPU is; N processes in test-multirank)
# and the multi-GPU ring-attention example (run one process per GPU).
$(BUILD)/test_nccl_gpu.o: tests/test_nccl_gpu.cu tests/test.h tests/tolerance.h dcp.h dcp_nccl.h \
                          examples/multiprocess.h $(NCCL_TEST_HEADERS) | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@
$(BUILD)/test_nccl_gpu: $(BUILD)/test_nccl_gpu.o $(BUILD)/dcp_cuda.o
	$(NVCC) $(NVCC_FLAGS) $^ -o $@ $(NCCL_LIBS)
$(BUILD)/ring_attention_nccl.o: examples/ring_attention_nccl.cu examples/multiprocess.h dcp.h \
                                dcp_nccl.h | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@
$(BUILD)/ring_attention_nccl: $(BUILD)/ring_attention_nccl.o $(BUILD)/dcp_cuda.o
	$(NVCC) $(NVCC_FLAGS) $^ -o $@ $(NCCL_LIBS)
# The CP <-> head-parallel all-to-all's bench (N processes; test-multirank checks it against the
# CPU reference and prints its bandwidth table).
$(BUILD)/a2a_bench: bench/a2a_bench.cu examples/multiprocess.h dcp.h dcp_nccl.h \
                    $(BUILD)/dcp_cuda.o | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $< $(BUILD)/dcp_cuda.o -o $@ $(NCCL_LIBS)

# N processes on ONE GPU (distinct NCCL_HOSTID, sockets on lo): the ring example end to end, a
# peer that exits mid-step, the split memory measurement, the all-to-all at 2, 4 and 8 ranks, the
# MTP roll, and the fault tests as 2 processes against real NCCL (tests/multirank.sh). Prints a
# skip line and exits 0 without a GPU.
.PHONY: test-multirank ring-example
ring-example: $(BUILD)/ring_attention_nccl
test-multirank: export A2A_PROGRAM := $(BUILD)/a2a_bench
test-multirank: $(NCCL_PROGRAMS) $(BUILD)/test_nccl_gpu
	sh tests/multirank.sh $(BUILD)/ring_attention_nccl

# bench/comm_bench.c on the host transport (every rank a thread; no GPU, no NCCL): the set's
# communicators, set-up, ring and all-to-all peers, the per-microbatch switch at 8,192 samples x
# 1,024 ranks. Built twice, against this tree and against $(BASE)'s dcp.h / dcp_nccl.h (git
# show), and both run in one command, before and after side by side. Minutes at 8,192 ranks.
# BASE's default: the last commit with one communicator per CP size.
BASE ?= caaf793
COMM_BENCH_FLAGS := -std=c99 -O2 $(WARNINGS) -Wno-unused-function -Itests/fake_nccl -Ibench
COMM_BENCH_RANKS ?= 1024 8192
$(BUILD)/comm_bench: bench/comm_bench.c bench/no_kernels.h dcp.h dcp_nccl.h $(FAKE_NCCL) | $(BUILD)
	$(CC) $(COMM_BENCH_FLAGS) -I. $< -o $@ -lm -lpthread
$(BUILD)/comm_bench-base: bench/comm_bench.c bench/no_kernels.h $(FAKE_NCCL) | $(BUILD)
	mkdir -p $(BUILD)/comm-base
	git show $(BASE):dcp.h > $(BUILD)/comm-base/dcp.h
	git show $(BASE):dcp_nccl.h > $(BUILD)/comm-base/dcp_nccl.h
	$(CC) $(COMM_BENCH_FLAGS) -I$(BUILD)/comm-base $< -o $@ -lm -lpthread
.PHONY: bench-comm $(BUILD)/comm_bench-base
bench-comm: $(BUILD)/comm_bench $(BUILD)/comm_bench-base
	@echo "== $(BASE) (one communicator per CP size)"
	$(BUILD)/comm_bench-base $(COMM_BENCH_RANKS:%=--ranks %)
	@echo "== this tree (one communicator)"
	$(BUILD)/comm_bench $(COMM_BENCH_RANKS:%=--ranks %)
