/* device.cc - what the CPU execution model's device is, for any stream runtime a program links
   with it (tests/cuda_cpu): the device count and the profile's properties and attributes,
   versions, the kernels' attributes and occupancy (the executor's), the errors' names, and
   the runtime's error state: a failing call's error kept for cudaGetLastError (which clears
   it), and a device fault (a checker report, a trap, a deadlock) that is sticky: from then on
   every call returns cudaErrorLaunchFailure.

   Two stream runtimes complete it: runtime.cc (one device, one queue that runs at the
   synchronising calls) in the single-process tests, and the host NCCL transport's
   (tests/fake_nccl/fake_runtime.c: one device thread per simulated rank) in the multi-rank
   ones; each function has one implementation in a program. Every simulated rank sees this
   one device as device 0 of its own. */
#include "model.h"

#include <stdio.h>

#include <mutex>

static std::mutex errors_lock;
static cudaError_t last_error = cudaSuccess, sticky = cudaSuccess;
static uint64_t faults_seen;

/* ------------------------------------------------------------------------ errors */

cudaError_t dcp_cuda_cpu_fail(cudaError_t error)
{
    std::lock_guard<std::mutex> guard(errors_lock);
    if (error != cudaSuccess) last_error = error;
    return error;
}

/* A new device fault since the last look: from now on every call fails. With errors_lock. */
static cudaError_t check_faults(void)
{
    const uint64_t now = dcp_cuda_cpu_faults();
    if (now != faults_seen) {
        faults_seen = now;
        sticky = cudaErrorLaunchFailure;
    }
    return sticky;
}

cudaError_t dcp_cuda_cpu_sticky(void)
{
    std::lock_guard<std::mutex> guard(errors_lock);
    return check_faults();
}

void dcp_cuda_cpu_clear_errors(void)
{
    std::lock_guard<std::mutex> guard(errors_lock);
    sticky = last_error = cudaSuccess;
    faults_seen = dcp_cuda_cpu_faults();
}

static cudaError_t fail(cudaError_t error) { return dcp_cuda_cpu_fail(error); }

#define DEVICE_ENTER()                                                                             \
    do {                                                                                           \
        const cudaError_t sticky_error = dcp_cuda_cpu_sticky();                                    \
        if (sticky_error != cudaSuccess) return fail(sticky_error);                                \
    } while (0)

static const struct {
    cudaError_t error;
    const char *name, *text;
} ERRORS[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration",
     "invalid configuration argument"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection",
     "invalid copy direction for memcpy"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle",
     "invalid resource handle"},
    {cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorLaunchOutOfResources, "cudaErrorLaunchOutOfResources",
     "too many resources requested for launch"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
};

const char *cudaGetErrorString(cudaError_t error)
{
    for (const auto &e : ERRORS)
        if (e.error == error) return e.text;
    return "unrecognized error code";
}

const char *cudaGetErrorName(cudaError_t error)
{
    for (const auto &e : ERRORS)
        if (e.error == error) return e.name;
    return "cudaErrorUnknown";
}

cudaError_t cudaGetLastError(void)
{
    std::lock_guard<std::mutex> guard(errors_lock);
    if (check_faults() != cudaSuccess) return sticky;
    const cudaError_t error = last_error;
    last_error = cudaSuccess;
    return error;
}

cudaError_t cudaPeekAtLastError(void)
{
    std::lock_guard<std::mutex> guard(errors_lock);
    return check_faults() != cudaSuccess ? sticky : last_error;
}

/* --------------------------------------------------------------------- devices */

cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count) return fail(cudaErrorInvalidValue);
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    if (!device) return fail(cudaErrorInvalidValue);
    *device = 0; /* the only one */
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice);
}

cudaError_t cudaDriverGetVersion(int *version)
{
    if (!version) return fail(cudaErrorInvalidValue);
    *version = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *version)
{
    if (!version) return fail(cudaErrorInvalidValue);
    *version = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    const dcp_cuda_cpu_profile &p = *dcp_cuda_cpu_profile_in_force();
    if (!prop) return fail(cudaErrorInvalidValue);
    if (device != 0) return fail(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "%s", p.device_name);
    prop->totalGlobalMem = p.global_memory;
    prop->sharedMemPerBlock = p.shared_per_block;
    prop->regsPerBlock = p.registers_per_block;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = p.max_threads_per_block;
    for (int i = 0; i < 3; i++) {
        prop->maxThreadsDim[i] = p.max_block_dim[i];
        prop->maxGridSize[i] = p.max_grid_dim[i];
    }
    prop->totalConstMem = 64 * 1024;
    prop->major = p.major;
    prop->minor = p.minor;
    prop->multiProcessorCount = p.multiprocessors;
    prop->l2CacheSize = p.l2_bytes;
    prop->maxThreadsPerMultiProcessor = p.max_threads_per_multiprocessor;
    prop->sharedMemPerMultiprocessor = p.shared_per_multiprocessor;
    prop->regsPerMultiprocessor = p.registers_per_multiprocessor;
    prop->sharedMemPerBlockOptin = p.shared_per_block_optin;
    prop->maxBlocksPerMultiProcessor = p.max_blocks_per_multiprocessor;
    prop->reservedSharedMemPerBlock = p.reserved_shared_per_block;
    prop->memoryBusWidth = p.memory_bus_bits;
    prop->unifiedAddressing = 1;
    prop->concurrentKernels = 1;
    prop->asyncEngineCount = 2;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    const dcp_cuda_cpu_profile &p = *dcp_cuda_cpu_profile_in_force();
    if (!value) return fail(cudaErrorInvalidValue);
    if (device != 0) return fail(cudaErrorInvalidDevice);
    switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiprocessors; break;
    case cudaDevAttrMaxThreadsPerBlock: *value = p.max_threads_per_block; break;
    case cudaDevAttrMaxBlockDimX: *value = p.max_block_dim[0]; break;
    case cudaDevAttrMaxBlockDimY: *value = p.max_block_dim[1]; break;
    case cudaDevAttrMaxBlockDimZ: *value = p.max_block_dim[2]; break;
    case cudaDevAttrMaxGridDimX: *value = p.max_grid_dim[0]; break;
    case cudaDevAttrMaxGridDimY: *value = p.max_grid_dim[1]; break;
    case cudaDevAttrMaxGridDimZ: *value = p.max_grid_dim[2]; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)p.shared_per_block; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)p.shared_per_block_optin; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
        *value = (int)p.shared_per_multiprocessor;
        break;
    case cudaDevAttrReservedSharedMemoryPerBlock: *value = (int)p.reserved_shared_per_block; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = p.max_threads_per_multiprocessor; break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *value = p.max_blocks_per_multiprocessor; break;
    case cudaDevAttrMaxRegistersPerBlock: *value = p.registers_per_block; break;
    case cudaDevAttrMaxRegistersPerMultiprocessor: *value = p.registers_per_multiprocessor; break;
    case cudaDevAttrL2CacheSize: *value = p.l2_bytes; break;
    case cudaDevAttrClockRate: *value = p.clock_khz; break;
    case cudaDevAttrMemoryClockRate: *value = p.memory_clock_khz; break;
    case cudaDevAttrGlobalMemoryBusWidth: *value = p.memory_bus_bits; break;
    case cudaDevAttrUnifiedAddressing: *value = 1; break;
    case cudaDevAttrConcurrentKernels: *value = 1; break;
    default:
        /* unmodelled: say so instead of inventing a value */
        fprintf(stderr, "dcp cuda-cpu: cudaDeviceGetAttribute: attribute %d is not modelled\n",
                (int)attr);
        return fail(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return cudaSuccess;
}


/* ------------------------------------------------------------ functions (executor) */

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    DEVICE_ENTER();
    return fail(dcp_cuda_cpu_func_set_attribute(func, attr, value));
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
    DEVICE_ENTER();
    return fail(dcp_cuda_cpu_func_get_attributes(attr, func));
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, const void *func,
                                                          int block_size, size_t dynamic_shared)
{
    DEVICE_ENTER();
    return fail(dcp_cuda_cpu_occupancy(blocks, func, block_size, dynamic_shared));
}

/* No driver: the entry points are not found (the TMA encoder reports that it needs one). */
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **function,
                                             unsigned int version, unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *status)
{
    (void)symbol, (void)version, (void)flags;
    if (function) *function = NULL;
    if (status) *status = cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
}

/* What a loader finds in a library built from the model (python/libdcp/ops.py): the profile's
   name. */
extern "C" const char *dcp_cuda_cpu_model(void) { return dcp_cuda_cpu_profile_name(); }
