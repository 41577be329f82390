# The toolchain, its flags, and what this machine can build. Every other part reads these.

CC ?= cc
CXX ?= c++
NVCC ?= nvcc
CLANG ?= clang
CLANGXX ?= clang++
PYTHON3 ?= python3
CUDA_HOME ?= /usr/local/cuda
BUILD := build
# Builds run one job per core; `make JOBS=1 ...` builds serially. make test's runner runs
# TEST_JOBS programs at a time (tests/run_tests.sh; default the same count).
JOBS ?= $(shell nproc 2>/dev/null || echo 1)
TEST_JOBS ?= $(JOBS)
MAKEFLAGS += -j$(JOBS)

WARNINGS := -Wall -Wextra -Wpedantic -Werror
OPT ?= -O2
C_FLAGS := -std=c99 $(OPT) $(WARNINGS)
CXX_FLAGS := -std=c++11 $(OPT) $(WARNINGS)
# -g1: line tables, enough for the sanitizers' reports to name file and line (full debug
# information costs a quarter of each sanitized compile)
SANITIZE := -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all \
            -fno-omit-frame-pointer -g1 -O1
# sm_80 runs on Ampere and later; sm_90a adds Hopper's wgmma and TMA paths.
CUDA_ARCH ?= -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90a,code=sm_90a
NVCC_FLAGS := -std=c++14 -O2 $(CUDA_ARCH) -Xcompiler -Wall,-Wextra,-Werror
NVCC_HOST_FLAGS := -std=c++14 -O2 -Xcompiler -Wall,-Wextra,-Werror
CUDA_INCLUDE := -I$(CUDA_HOME)/include
NCCL_LIBS := -L$(CUDA_HOME)/lib64 -Xlinker -rpath,$(CUDA_HOME)/lib64 -lnccl

# What this machine can build: nvcc for the CUDA parts, nvcc and nccl.h for the NCCL parts,
# nvcc's headers and clang++ for the CPU execution model; a GPU decides what runs on it.
HAVE_NVCC := $(if $(shell command -v $(NVCC) 2>/dev/null),yes,)
HAVE_NCCL := $(if $(HAVE_NVCC),$(if $(wildcard $(CUDA_HOME)/include/nccl.h),yes,),)
HAVE_CUBLAS := $(if $(HAVE_NVCC),$(if $(wildcard $(CUDA_HOME)/include/cublas_v2.h),yes,),)
HAVE_CLANGXX := $(if $(shell command -v $(CLANGXX) 2>/dev/null),yes,)
CUDA_CPU_READY := $(and $(HAVE_NVCC),$(HAVE_CLANGXX))
GPU_PRESENT := $(if $(shell nvidia-smi -L 2>/dev/null | grep GPU),yes,)
CUDA_SKIP_REASON := nvcc not found (NVCC=$(NVCC)); set NVCC or PATH to build them
NCCL_SKIP_REASON := $(if $(HAVE_NVCC),nccl.h not found in $(CUDA_HOME)/include (set CUDA_HOME),$(CUDA_SKIP_REASON))

$(BUILD):
	mkdir -p $@
