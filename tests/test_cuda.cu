/* GPU tests: the device and the runtime's limits. Built by `make` everywhere (nvcc is on every
   machine) and for the CPU execution model (build/test_cuda-cpu, whose runtime and device
   profile they check as they would a GPU's); where no CUDA device exists each test reports
   "no CUDA device: skipped". */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "test.h"

#include <cuda_runtime.h>
#ifdef DCP_CUDA_CPU
#include "cuda_cpu.h"
#endif

static int gpu_available(void)
{
    int32_t devices = 0;
    dcp_error error;
    if (dcp_cuda_device_count(&devices, &error) != DCP_OK) {
        fprintf(stderr, "%s\n", error.message);
        return 0;
    }
    return devices > 0;
}

static void device_count_query(void)
{
    int32_t devices = -1;
    CHECK_EQ(dcp_cuda_device_count(&devices, NULL), DCP_OK);
    CHECK(devices >= 0);
    CHECK_EQ(dcp_cuda_device_count(NULL, NULL), DCP_ERROR_INVALID_ARGUMENT);
    if (!gpu_available()) test_skip("no CUDA device: skipped");
}

/* The properties and the attribute queries tell the same device (the library picks its
   configurations from the attributes). */
static void device_properties_agree(void)
{
    struct cudaDeviceProp prop;
    int device = -1, major = 0, minor = 0, sms = 0, optin = 0;
    if (!gpu_available()) {
        test_skip("no CUDA device: skipped");
        return;
    }
    CHECK_EQ(cudaGetDevice(&device), cudaSuccess);
    CHECK_EQ(cudaGetDeviceProperties(&prop, device), cudaSuccess);
    CHECK_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
    CHECK_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), cudaSuccess);
    CHECK_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
    CHECK_EQ(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
             cudaSuccess);
    CHECK_EQ(prop.major, major);
    CHECK_EQ(prop.minor, minor);
    CHECK_EQ(prop.multiProcessorCount, sms);
    CHECK_EQ((long long)prop.sharedMemPerBlockOptin, optin);
    CHECK((size_t)optin >= prop.sharedMemPerBlock);
    CHECK(major >= 8); /* the kernels are built for sm_80 and later */
    printf("device: %s, compute capability %d.%d, %d SMs, %d bytes of shared memory per block\n",
           prop.name, major, minor, sms, optin);
}

/* A kernel that only says it ran. */
__global__ void ran_kernel(int *flag)
{
    if (threadIdx.x == 0) *flag = 1;
}

/* ran_kernel<<<1, threads, shared>>>(flag) and the launch's error, on a GPU or on the model. */
static cudaError_t launch_ran(unsigned threads, size_t shared, int *flag)
{
#ifdef DCP_CUDA_CPU
    return dcp_cuda_cpu_launch(ran_kernel, dim3(1), dim3(threads), shared, NULL, flag);
#else
    ran_kernel<<<1, threads, shared>>>(flag);
    return cudaGetLastError();
#endif
}

/* Launches beyond the device's limits fail as the runtime says they do: more than 1024
   threads (configuration), dynamic shared memory beyond 48 KB without the kernel's attribute
   or beyond the opt-in limit (value); within them the kernel runs. */
static void launch_limits(void)
{
    int device = 0, optin = 0, ran = 0, *flag = NULL;
    if (!gpu_available()) {
        test_skip("no CUDA device: skipped");
        return;
    }
    CHECK_EQ(cudaGetDevice(&device), cudaSuccess);
    CHECK_EQ(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
             cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&flag, sizeof *flag), cudaSuccess);
    CHECK_EQ(cudaMemset(flag, 0, sizeof *flag), cudaSuccess);
    CHECK_EQ(launch_ran(1025, 0, flag), cudaErrorInvalidConfiguration);
    CHECK_EQ(launch_ran(32, 48 * 1024 + 16, flag), cudaErrorInvalidValue);
    CHECK_EQ(cudaFuncSetAttribute((const void *)ran_kernel,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, optin + 16),
             cudaErrorInvalidValue);
    CHECK_EQ(cudaGetLastError(), cudaErrorInvalidValue); /* kept until read */
    CHECK_EQ(cudaGetLastError(), cudaSuccess);           /* and cleared */
    CHECK_EQ(cudaFuncSetAttribute((const void *)ran_kernel,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, optin),
             cudaSuccess);
    CHECK_EQ(launch_ran(1024, (size_t)optin, flag), cudaSuccess);
    CHECK_EQ(cudaMemcpy(&ran, flag, sizeof ran, cudaMemcpyDeviceToHost), cudaSuccess);
    CHECK_EQ(ran, 1);
    CHECK_EQ(cudaFree(flag), cudaSuccess);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {{"device_count_query", device_count_query},
                                      {"device_properties_agree", device_properties_agree},
                                      {"launch_limits", launch_limits}};
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
