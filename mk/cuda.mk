# The CUDA unit under nvcc: dcp_cuda.o, the library around it, the GPU tests and benches, and
# the GPU-only targets (test-gpu, sanitize-gpu). Everything here needs nvcc; nothing needs a GPU
# to build.

COMPUTE_SANITIZER ?= compute-sanitizer
CUDA_LIBRARY := $(BUILD)/libdcp_cuda.so
CUDA_BENCHES := $(BUILD)/kernels_bench $(BUILD)/attention_bench $(BUILD)/calibrate \
                $(BUILD)/plan_vs_exec
# cuBLAS times the linear layers' stand-in GEMMs where the toolkit has it; without it the
# calibration benches take the per-token time of the linear layers from --linear-seconds-per-token.
CUBLAS_FLAGS := $(if $(HAVE_CUBLAS),-DBENCH_HAVE_CUBLAS=1 -lcublas,)
# the nvcc builds of the GPU tests but the NCCL one (mk/nccl.mk)
GPU_TESTS := $(filter-out $(NCCL_TESTS:%=$(BUILD)/%),$(GPU_TEST_PROGRAMS))

ifeq ($(HAVE_NVCC),yes)
# Without a GPU the nvcc builds of the kernel tests would only skip where the CPU execution model
# runs them instead (mk/cpu_model.mk); test_wgmma's layout checks and header-nvcc run anyway.
TEST_PROGRAMS += $(BUILD)/header-nvcc \
                 $(if $(or $(GPU_PRESENT),$(if $(CUDA_CPU_READY),,yes)),$(GPU_TESTS),\
                     $(filter $(MODEL_LESS_TESTS:%=$(BUILD)/%),$(GPU_TESTS)))
# built wherever nvcc is, run or not: a GPU session should not be the first to compile them
# (but the primitives' test, a second whole compile of dcp_cuda.cu that the model runs as is)
TEST_BUILDS += $(CUDA_LIBRARY) $(CUDA_BENCHES) $(filter-out $(BUILD)/test_cuda_primitives,$(GPU_TESTS))
endif
# bench/plan_vs_exec's host path without a GPU (--dry-run); it skips where nvcc is missing
SCRIPT_TESTS += tests/test_calibrate_benches.sh

.PHONY: cuda test-gpu sanitize-gpu
cuda: $(CUDA_LIBRARY)

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

# dcp_cuda.cu and the dcp.h implementation as one shared library, for the Python benches and
# the Python package's torch ops.
$(CUDA_LIBRARY): $(BUILD)/dcp_impl-pic.o $(BUILD)/dcp_cuda.o | $(BUILD)
	$(NVCC) -shared $^ -o $@ -lcudart

$(BUILD)/header-nvcc: tests/test_header.c tests/test.h dcp.h | $(BUILD)
	$(NVCC) $(NVCC_HOST_FLAGS) -x cu $< -o $@

$(BUILD)/test_cuda: tests/test_cuda.cu tests/test.h dcp.h $(BUILD)/dcp_cuda.o | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $< $(BUILD)/dcp_cuda.o -o $@
$(BUILD)/test_cuda_%: tests/test_cuda_%.cu tests/test.h tests/cuda_test_util.h tests/tolerance.h \
                      dcp.h $(BUILD)/dcp_cuda.o | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $< $(BUILD)/dcp_cuda.o -o $@
# The primitives' parity test includes dcp_cuda.cu (its wrappers are internal), built for sm_80:
# the instructions it checks run on every device.
$(BUILD)/test_cuda_primitives: tests/test_cuda_primitives.cu tests/test.h tests/tolerance.h \
                               tests/cuda_test_util.h dcp.h dcp_cuda.cu | $(BUILD)
	$(NVCC) $(NVCC_HOST_FLAGS) -gencode=arch=compute_80,code=sm_80 $< -o $@
# The Hopper building blocks: the test includes dcp_cuda.cu (white box: the swizzle, the wgmma
# descriptors and wrappers are internal) and is built for sm_90a only: its CPU checks of the
# layout run everywhere, its wgmma products only on compute capability 9.0 (elsewhere they report
# why they skip).
WGMMA_TEST_ARCH ?= -gencode=arch=compute_90a,code=sm_90a
$(BUILD)/test_wgmma: tests/test_wgmma.cu tests/test.h tests/cuda_test_util.h tests/tolerance.h \
                     dcp.h dcp_cuda.cu | $(BUILD)
	$(NVCC) $(NVCC_HOST_FLAGS) $(WGMMA_TEST_ARCH) $< -o $@

# GPU benches (run by hand or by the GPU round; see bench/RESULTS.md).
$(BUILD)/kernels_bench $(BUILD)/attention_bench: $(BUILD)/%: bench/%.cu bench/bench_util.h dcp.h \
                                                 $(BUILD)/dcp_cuda.o | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $< $(BUILD)/dcp_cuda.o -o $@
# The cost-model calibration (docs/calibration.md): the host side both share
# is tested by test_calibrate without a GPU.
$(BUILD)/calibrate $(BUILD)/plan_vs_exec: $(BUILD)/%: bench/%.cu bench/layer_timer.h \
        bench/bench_util.h bench/calibrate_grid.h bench/plan_exec.h dcp.h $(BUILD)/dcp_cuda.o \
        | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) $< $(BUILD)/dcp_cuda.o -o $@ $(CUBLAS_FLAGS)

# Only the GPU programs: where a GPU exists they run instead of skipping.
test-gpu: $(GPU_TEST_PROGRAMS)
	sh tests/run_tests.sh $(GPU_TEST_PROGRAMS)

# The GPU tests under compute-sanitizer (memcheck, racecheck), where a GPU exists.
sanitize-gpu: $(GPU_TESTS)
	for program in $(GPU_TESTS); do \
	    $(COMPUTE_SANITIZER) --tool memcheck --leak-check full --error-exitcode 1 \
	        $$program || exit 1; \
	    $(COMPUTE_SANITIZER) --tool racecheck --racecheck-report all --error-exitcode 1 \
	        $$program || exit 1; \
	done
