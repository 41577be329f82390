/* test_model.cc - the CPU execution model's own checks, each a kernel with the fault it exists
   to catch (issue 35): global-memory races between blocks and warps (and what orders them),
   vector accesses at misaligned addresses, a one-element overrun of a cudaMalloc buffer,
   __syncthreads at two places in divergent code, a launch beyond a kernel's __launch_bounds__,
   occupancy from registers. Built as the checked
   build (the kernels here go through the same shadows as dcp_cuda.cu's) and linked with
   dcp_cuda.cu's checked object, whose kernels it reaches by their symbols to launch them with
   the device build's limits. build/test_cuda_model-cpu; ends with "N passed, M failed". */
#include <cuda_runtime.h>

#include "cuda_cpu.h"
#include "dcp.h"
#include "tests/test.h"

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

enum { WARP = 32, BLOCK = 64, BLOCKS = 4, CAPTURE_BYTES = 8192 };

/* ------------------------------------------------------------------------- helpers */

/* Runs fn with stderr in a file; the text it printed (the model's reports) in out. */
template <typename F> static void captured(F fn, char *out, size_t size)
{
    fflush(stderr);
    FILE *file = tmpfile();
    const int saved = dup(2);
    dup2(fileno(file), 2);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(file);
    const size_t n = fread(out, 1, size - 1, file);
    out[n] = 0;
    fclose(file);
}

/* Launches a grid, waits; the model's reports in `reports`, cleared afterwards (a fault is
   sticky until cudaDeviceReset). Returns the wait's status. */
template <typename... P, typename... A>
static cudaError_t run(char *reports, void (*kernel)(P...), int blocks, int threads,
                       A... arguments)
{
    cudaError_t status = cudaSuccess;
    captured(
        [&] {
            cudaError_t launched = dcp_cuda_cpu_launch(kernel, dim3(blocks), dim3(threads), 0,
                                                       (cudaStream_t)0, arguments...);
            status = launched != cudaSuccess ? launched : cudaDeviceSynchronize();
        },
        reports, CAPTURE_BYTES);
    cudaDeviceReset();
    return status;
}

static float *device_floats(int count)
{
    float *p = NULL;
    CHECK_EQ(cudaMalloc(&p, sizeof(float) * count), cudaSuccess);
    CHECK_EQ(cudaMemset(p, 0, sizeof(float) * count), cudaSuccess);
    return p;
}

static float read_float(const float *p)
{
    float x = 0;
    CHECK_EQ(cudaMemcpy(&x, p, sizeof x, cudaMemcpyDeviceToHost), cudaSuccess);
    return x;
}

/* ------------------------------------------------------------ global-memory races */

__global__ void plain_add_per_block(float *p)
{
    if (threadIdx.x == 0) p[0] += 1.0f; /* a read-modify-write, once per block */
}
__global__ void atomic_add_all(float *p) { atomicAdd(p, 1.0f); }
/* lane 0 of warp 0, then lane 0 of warp 1 write p[0]; with a barrier between or not */
__global__ void two_warps_write(float *p, int barrier)
{
    if (threadIdx.x == 0) p[0] = 1.0f;
    if (barrier) __syncthreads();
    if (threadIdx.x == WARP) p[0] = 2.0f;
}
/* block 0 adds atomically, block 1 stores plainly */
__global__ void atomic_then_plain(float *p)
{
    if (threadIdx.x != 0) return;
    if (blockIdx.x == 0) atomicAdd(p, 1.0f);
    else p[0] = 5.0f;
}

static void global_blocks_race(void)
{
    char reports[CAPTURE_BYTES];
    float *p = device_floats(1);
    CHECK_EQ(run(reports, plain_add_per_block, BLOCKS, BLOCK, p), cudaErrorLaunchFailure);
    CHECK_CONTAINS(reports, "global write-after-write hazard");
    CHECK_CONTAINS(reports, "plain_add_per_block");
    CHECK_CONTAINS(reports, "test_model.cc"); /* both places, symbolized */
    cudaFree(p);
}

static void global_atomics_do_not_race(void)
{
    char reports[CAPTURE_BYTES];
    float *p = device_floats(1);
    CHECK_EQ(run(reports, atomic_add_all, BLOCKS, BLOCK, p), cudaSuccess);
    CHECK_EQ(reports[0], 0);
    CHECK_EQ(read_float(p), (float)(BLOCKS * BLOCK));
    cudaFree(p);
}

static void global_warps_race_without_barrier(void)
{
    char reports[CAPTURE_BYTES];
    float *p = device_floats(1);
    CHECK_EQ(run(reports, two_warps_write, 1, BLOCK, p, 0), cudaErrorLaunchFailure);
    CHECK_CONTAINS(reports, "this block");
    CHECK_EQ(run(reports, two_warps_write, 1, BLOCK, p, 1), cudaSuccess); /* ordered */
    CHECK_EQ(reports[0], 0);
    cudaFree(p);
}

static void global_plain_write_races_atomic(void)
{
    char reports[CAPTURE_BYTES];
    float *p = device_floats(1);
    CHECK_EQ(run(reports, atomic_then_plain, 2, WARP, p), cudaErrorLaunchFailure);
    CHECK_CONTAINS(reports, "atomic");
    cudaFree(p);
}

static void global_kernel_boundary_orders(void)
{
    char reports[CAPTURE_BYTES];
    float *p = device_floats(1);
    CHECK_EQ(run(reports, plain_add_per_block, 1, BLOCK, p), cudaSuccess);
    CHECK_EQ(run(reports, plain_add_per_block, 1, BLOCK, p), cudaSuccess);
    CHECK_EQ(reports[0], 0);
    CHECK_EQ(read_float(p), 2.0f);
    cudaFree(p);
}

/* ------------------------------------------------------------------------ alignment
   (A misaligned scalar wider than 4 bytes is UBSan's: the checked build has it too.) */

/* A wide load as dcp_cuda.cu's dcp_cuda__vload issues it: the host compiler splits an
   aggregate into its fields, so the access names its width to the model. */
template <typename V> __device__ V load_vector(const V *p)
{
    dcp_cuda_cpu_vector_access(p, sizeof(V), false);
    return *p;
}
__global__ void vector_load(const unsigned char *base, size_t offset, float *out)
{
    const uint4 v = load_vector(reinterpret_cast<const uint4 *>(base + offset));
    if (threadIdx.x == 0) out[0] = (float)(v.x + v.y + v.z + v.w);
}
__global__ void vector_load8(const unsigned char *base, size_t offset, float *out)
{
    const uint2 v = load_vector(reinterpret_cast<const uint2 *>(base + offset));
    if (threadIdx.x == 0) out[0] = (float)(v.x + v.y);
}
/* __stwb, which the model twins with the same check */
__global__ void shared_vector_store(size_t offset)
{
    DCP_CUDA_CPU_SHARED(unsigned char, tile, [4 * sizeof(uint4)]);
    const uint4 v = make_uint4(threadIdx.x, threadIdx.x + 1, threadIdx.x + 2, threadIdx.x + 3);
    if (threadIdx.x == 0) __stwb(reinterpret_cast<uint4 *>(tile + offset), v);
}

static void vector_access_misaligned(void)
{
    char reports[CAPTURE_BYTES];
    unsigned char *base = NULL;
    float *out = device_floats(1);
    CHECK_EQ(cudaMalloc(&base, 64), cudaSuccess);
    CHECK_EQ(cudaMemset(base, 0, 64), cudaSuccess);
    /* a 16-byte load 8-byte aligned, an 8-byte load 4-byte aligned: faults on a device */
    CHECK_EQ(run(reports, vector_load, 1, WARP, (const unsigned char *)base, (size_t)8, out),
             cudaErrorLaunchFailure);
    CHECK_CONTAINS(reports, "16-byte load of global memory");
    CHECK_CONTAINS(reports, "not 16-byte aligned");
    CHECK_CONTAINS(reports, "vector_load");
    CHECK_CONTAINS(reports, "test_model.cc:"); /* the line */
    CHECK_EQ(run(reports, vector_load8, 1, WARP, (const unsigned char *)base, (size_t)4, out),
             cudaErrorLaunchFailure);
    CHECK_CONTAINS(reports, "8-byte load of global memory");
    /* aligned: fine */
    CHECK_EQ(run(reports, vector_load, 1, WARP, (const unsigned char *)base, (size_t)16, out),
             cudaSuccess);
    CHECK_EQ(reports[0], 0);
    /* shared memory too */
    CHECK_EQ(run(reports, shared_vector_store, 1, WARP, (size_t)8), cudaErrorLaunchFailure);
    CHECK_CONTAINS(reports, "16-byte store of shared memory");
    CHECK_EQ(run(reports, shared_vector_store, 1, WARP, (size_t)16), cudaSuccess);
    cudaFree(base);
    cudaFree(out);
}

/* ------------------------------------------------------------- exact allocation sizes */

enum { ELEMENTS = 100 }; /* 400 bytes: inside a 512-byte rounding */
__global__ void write_up_to(float *p, int last)
{
    const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i <= last) p[i] = 1.0f;
}

/* A one-element overrun ends the program under ASan: it runs in a child, which must die with
   ASan's report of the poisoned bytes past the buffer; in bounds, the child exits 0. */
static int child_writes(int last, char *out, size_t size)
{
    int pipe_ends[2];
    if (pipe(pipe_ends) != 0) return -1;
    fflush(stdout);
    fflush(stderr);
    const pid_t child = fork();
    if (child == 0) {
        dup2(pipe_ends[1], 2);
        close(pipe_ends[0]);
        float *p = NULL;
        if (cudaMalloc(&p, sizeof(float) * ELEMENTS) != cudaSuccess) _exit(3);
        dcp_cuda_cpu_launch(write_up_to, dim3(1), dim3(128), 0, (cudaStream_t)0, p, last);
        _exit(cudaDeviceSynchronize() == cudaSuccess ? 0 : 4);
    }
    close(pipe_ends[1]);
    size_t used = 0;
    ssize_t n;
    while (used + 1 < size && (n = read(pipe_ends[0], out + used, size - 1 - used)) > 0)
        used += (size_t)n;
    out[used] = 0;
    close(pipe_ends[0]);
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void overrun_by_one_element(void)
{
    char reports[CAPTURE_BYTES];
    CHECK_EQ(child_writes(ELEMENTS - 1, reports, sizeof reports), 0);
    CHECK(child_writes(ELEMENTS, reports, sizeof reports) != 0);
    CHECK_CONTAINS(reports, "AddressSanitizer");
    CHECK_CONTAINS(reports, "write_up_to");
}

/* ------------------------------------------------------------------ divergent barriers */

/* warp 0 waits at one __syncthreads, warp 1 at another: undefined on a device */
__global__ void divergent_barriers(float *p)
{
    if (threadIdx.x < WARP) {
        p[threadIdx.x] = 1.0f;
        __syncthreads();
    } else {
        __syncthreads();
        p[threadIdx.x] = 2.0f;
    }
}

static void divergent_syncthreads(void)
{
    char reports[CAPTURE_BYTES];
    float *p = device_floats(BLOCK);
    CHECK_EQ(run(reports, divergent_barriers, 1, BLOCK, p), cudaErrorLaunchFailure);
    CHECK_CONTAINS(reports, "synccheck");
    CHECK_CONTAINS(reports, "test_model.cc");
    cudaFree(p);
}

/* ---------------------------------------------------- launch limits and occupancy */

/* A kernel of dcp_cuda.cu (linked in) by its mangled name. */
template <typename F> static F kernel_named(const char *mangled)
{
    return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, mangled));
}

typedef void (*reduce_fn)(const float *, int64_t, int32_t, int32_t, float *, float *);
static const char REDUCE[] = "_Z28dcp_cuda__conv_reduce_kernelPKfliiPfS1_";
static const int REDUCE_BOUND = 256; /* its __launch_bounds__ */
typedef void (*attention_fn)(void *);
static const char FORWARD_D128[] =
    "_Z29dcp_cuda__attn_forward_kernelI13__nv_bfloat16Li128EEv19dcp_cuda__attn_args";
static const int FORWARD_THREADS = 128;

static void launch_bounds_refused(void)
{
    const reduce_fn reduce = kernel_named<reduce_fn>(REDUCE);
    CHECK(reduce != NULL);
    if (!reduce) return;
    cudaFuncAttributes attributes;
    CHECK_EQ(cudaFuncGetAttributes(&attributes, (const void *)reduce), cudaSuccess);
    CHECK_EQ(attributes.maxThreadsPerBlock, REDUCE_BOUND);
    CHECK(attributes.numRegs > 0);
    /* no work (no channels): the launch itself is what is checked */
    CHECK_EQ(dcp_cuda_cpu_launch(reduce, dim3(1), dim3(2 * REDUCE_BOUND), 0, (cudaStream_t)0,
                                 (const float *)NULL, (int64_t)0, 0, 0, (float *)NULL,
                                 (float *)NULL),
             cudaErrorLaunchOutOfResources);
    CHECK_EQ(cudaGetLastError(), cudaSuccess); /* a launch error is returned, not kept here */
    CHECK_EQ(dcp_cuda_cpu_launch(reduce, dim3(1), dim3(REDUCE_BOUND), 0, (cudaStream_t)0,
                                 (const float *)NULL, (int64_t)0, 0, 0, (float *)NULL,
                                 (float *)NULL),
             cudaSuccess);
    CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

/* The d-128 forward's ~200 registers a thread allow fewer blocks than its threads would:
   occupancy follows the device's register allocation. */
static void occupancy_from_registers(void)
{
    const attention_fn forward = kernel_named<attention_fn>(FORWARD_D128);
    CHECK(forward != NULL);
    if (!forward) return;
    cudaFuncAttributes a;
    cudaDeviceProp p;
    CHECK_EQ(cudaFuncGetAttributes(&a, (const void *)forward), cudaSuccess);
    CHECK_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
    const int unit = 256, granularity = 4, warps = FORWARD_THREADS / WARP;
    const int per_warp = (a.numRegs * WARP + unit - 1) / unit * unit;
    const int expected = p.regsPerMultiprocessor / per_warp / granularity * granularity / warps;
    int blocks = 0;
    CHECK_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, (const void *)forward,
                                                           FORWARD_THREADS, 0),
             cudaSuccess);
    CHECK_EQ(blocks, expected);
    CHECK(blocks < p.maxThreadsPerMultiProcessor / FORWARD_THREADS);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"global_blocks_race", global_blocks_race},
        {"global_atomics_do_not_race", global_atomics_do_not_race},
        {"global_warps_race_without_barrier", global_warps_race_without_barrier},
        {"global_plain_write_races_atomic", global_plain_write_races_atomic},
        {"global_kernel_boundary_orders", global_kernel_boundary_orders},
        {"vector_access_misaligned", vector_access_misaligned},
        {"overrun_by_one_element", overrun_by_one_element},
        {"divergent_syncthreads", divergent_syncthreads},
        {"launch_bounds_refused", launch_bounds_refused},
        {"occupancy_from_registers", occupancy_from_registers},
    };
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
