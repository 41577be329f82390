/* runtime.cc - the CUDA runtime API over host memory, for the CPU execution model
   (tests/cuda_cpu). Declarations are the toolkit's (cuda_runtime_api.h); a program links this
   instead of libcudart.

   One device (the profile of DCP_CUDA_CPU_DEVICE). Device memory is host memory (malloc:
   under ASan, a kernel's access outside an allocation or after cudaFree is ASan's error);
   cudaMalloc fills new memory with 0xFF bytes (NaN in every float type), as a stale value
   would show. Streams share one queue in issue order, which runs at the next synchronising
   call (cudaDeviceSynchronize, cudaStreamSynchronize, cudaStreamQuery, cudaEventSynchronize,
   cudaEventQuery, the synchronous cudaMemcpy and cudaMemset, cudaFree): work really runs
   after the call that enqueued it, so a host read that skips a synchronisation sees stale
   data. One queue in issue order is a valid schedule of any stream dependency graph (a wait
   on an event follows its record in issue order). A host-to-device cudaMemcpyAsync reads its
   source at the call (pageable memory is staged), a device-to-host one writes at its turn.
   Errors as the runtime reports them: a failing call's error is returned and kept for
   cudaGetLastError (which clears it); a device fault (a checker report, a trap) is sticky:
   every later call returns cudaErrorLaunchFailure. Not thread-safe across simulated ranks yet
   (one lock serialises the calls; ranks as threads need per-rank devices: issue 26 phase 2). */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

#include <deque>
#include <map>
#include <mutex>

static const unsigned char FRESH = 0xFF;  /* new device memory: NaN in every float type */
static const size_t MALLOC_ALIGNMENT = 256; /* as cudaMalloc */

struct CUstream_st {
    unsigned flags;
    int priority;
};

struct CUevent_st {
    unsigned flags;
    bool recorded, completed;
    double milliseconds; /* host time when its record ran */
};

enum op_kind { OP_COPY, OP_SET, OP_HOST, OP_RECORD };

struct op {
    op_kind kind;
    void *destination;
    const void *source;
    size_t bytes;
    int value;
    unsigned char *staged; /* a host source copied at the call */
    cudaHostFn_t fn;
    void *data;
    cudaEvent_t event;
};

static std::recursive_mutex lock;
static std::deque<op> queue;
static std::map<uintptr_t, size_t> device_allocations, host_allocations;
static cudaError_t last_error = cudaSuccess, sticky = cudaSuccess;
static uint64_t faults_seen;
static int current_device;

/* ------------------------------------------------------------------------ errors */

static cudaError_t fail(cudaError_t error)
{
    if (error != cudaSuccess) last_error = error;
    return error;
}

/* A new device fault since the last look: from now on every call fails. */
static cudaError_t check_faults(void)
{
    const uint64_t now = dcp_cuda_cpu_faults();
    if (now != faults_seen) {
        faults_seen = now;
        sticky = cudaErrorLaunchFailure;
    }
    return sticky;
}

#define RUNTIME_ENTER()                                                                            \
    std::lock_guard<std::recursive_mutex> guard(lock);                                             \
    if (check_faults() != cudaSuccess) return fail(sticky)

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
    std::lock_guard<std::recursive_mutex> guard(lock);
    if (check_faults() != cudaSuccess) return sticky;
    const cudaError_t error = last_error;
    last_error = cudaSuccess;
    return error;
}

cudaError_t cudaPeekAtLastError(void)
{
    std::lock_guard<std::recursive_mutex> guard(lock);
    return check_faults() != cudaSuccess ? sticky : last_error;
}

/* ---------------------------------------------------------------------- the queue */

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static void run(op &o)
{
    switch (o.kind) {
    case OP_COPY: memmove(o.destination, o.staged ? o.staged : o.source, o.bytes); break;
    case OP_SET: memset(o.destination, o.value, o.bytes); break;
    case OP_HOST: o.fn(o.data); break;
    case OP_RECORD:
        o.event->completed = true;
        o.event->milliseconds = now_ms();
        break;
    }
    free(o.staged);
}

/* Runs everything enqueued so far, in issue order; the sticky error if a fault happened. */
static cudaError_t drain(void)
{
    while (!queue.empty()) {
        op o = queue.front();
        queue.pop_front();
        if (sticky == cudaSuccess) run(o);
        else free(o.staged);
        check_faults();
    }
    return sticky;
}

static void enqueue(const op &o) { queue.push_back(o); }

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
    *device = current_device;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    std::lock_guard<std::recursive_mutex> guard(lock);
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
    std::lock_guard<std::recursive_mutex> guard(lock);
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
    std::lock_guard<std::recursive_mutex> guard(lock);
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

cudaError_t cudaDeviceSynchronize(void)
{
    RUNTIME_ENTER();
    return fail(drain());
}

cudaError_t cudaDeviceReset(void)
{
    std::lock_guard<std::recursive_mutex> guard(lock);
    drain();
    sticky = last_error = cudaSuccess;
    faults_seen = dcp_cuda_cpu_faults();
    return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    const dcp_cuda_cpu_profile &p = *dcp_cuda_cpu_profile_in_force();
    std::lock_guard<std::recursive_mutex> guard(lock);
    size_t used = 0;
    for (const auto &a : device_allocations) used += a.second;
    if (free_bytes) *free_bytes = p.global_memory > used ? p.global_memory - used : 0;
    if (total) *total = p.global_memory;
    return cudaSuccess;
}

/* ---------------------------------------------------------------------- memory */

/* Whether [p, p + bytes) lies in one allocation of `of`. */
static bool inside(const std::map<uintptr_t, size_t> &of, const void *p, size_t bytes)
{
    const uintptr_t a = (uintptr_t)p;
    auto it = of.upper_bound(a);
    if (it == of.begin()) return false;
    --it;
    return a >= it->first && a + bytes <= it->first + it->second;
}

static bool device_range(const void *p, size_t bytes) { return inside(device_allocations, p, bytes); }

cudaError_t cudaMalloc(void **pointer, size_t bytes)
{
    RUNTIME_ENTER();
    if (!pointer) return fail(cudaErrorInvalidValue);
    const size_t rounded = (bytes + MALLOC_ALIGNMENT - 1) / MALLOC_ALIGNMENT * MALLOC_ALIGNMENT;
    void *p = aligned_alloc(MALLOC_ALIGNMENT, rounded ? rounded : MALLOC_ALIGNMENT);
    if (!p) return fail(cudaErrorMemoryAllocation);
    memset(p, FRESH, bytes);
    device_allocations[(uintptr_t)p] = bytes ? bytes : 1;
    *pointer = p;
    return cudaSuccess;
}

cudaError_t cudaFree(void *pointer)
{
    RUNTIME_ENTER();
    if (!pointer) return cudaSuccess;
    auto it = device_allocations.find((uintptr_t)pointer);
    if (it == device_allocations.end()) return fail(cudaErrorInvalidDevicePointer);
    if (drain() != cudaSuccess) return fail(sticky); /* cudaFree waits for the device */
    device_allocations.erase(it);
    free(pointer);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **pointer, size_t bytes)
{
    RUNTIME_ENTER();
    if (!pointer) return fail(cudaErrorInvalidValue);
    void *p = malloc(bytes ? bytes : 1);
    if (!p) return fail(cudaErrorMemoryAllocation);
    host_allocations[(uintptr_t)p] = bytes;
    *pointer = p;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *pointer)
{
    RUNTIME_ENTER();
    if (!pointer) return cudaSuccess;
    auto it = host_allocations.find((uintptr_t)pointer);
    if (it == host_allocations.end()) return fail(cudaErrorInvalidValue);
    host_allocations.erase(it);
    free(pointer);
    return cudaSuccess;
}

/* The directions say where each side lives; a side said to be on the device must be in one
   allocation (stricter than unified addressing, which would accept a host pointer). */
static cudaError_t check_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    if (bytes == 0) return cudaSuccess;
    if (!dst || !src) return cudaErrorInvalidValue;
    switch (kind) {
    case cudaMemcpyHostToHost: return cudaSuccess;
    case cudaMemcpyHostToDevice:
        return device_range(dst, bytes) ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToHost:
        return device_range(src, bytes) ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToDevice:
        return device_range(dst, bytes) && device_range(src, bytes) ? cudaSuccess
                                                                     : cudaErrorInvalidValue;
    case cudaMemcpyDefault: return cudaSuccess;
    }
    return cudaErrorInvalidMemcpyDirection;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    RUNTIME_ENTER();
    (void)stream;
    const cudaError_t status = check_copy(dst, src, bytes, kind);
    if (status != cudaSuccess) return fail(status);
    if (bytes == 0) return cudaSuccess;
    op o = op();
    o.kind = OP_COPY;
    o.destination = dst, o.source = src, o.bytes = bytes;
    if (!device_range(src, bytes)) { /* a host source: staged now */
        o.staged = (unsigned char *)malloc(bytes);
        if (!o.staged) return fail(cudaErrorMemoryAllocation);
        memcpy(o.staged, src, bytes);
    }
    enqueue(o);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    RUNTIME_ENTER();
    const cudaError_t status = check_copy(dst, src, bytes, kind);
    if (status != cudaSuccess) return fail(status);
    if (drain() != cudaSuccess) return fail(sticky);
    if (bytes) memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t stream)
{
    RUNTIME_ENTER();
    (void)stream;
    if (bytes == 0) return cudaSuccess;
    if (!device_range(dst, bytes)) return fail(cudaErrorInvalidValue);
    op o = op();
    o.kind = OP_SET;
    o.destination = dst, o.bytes = bytes, o.value = value;
    enqueue(o);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *dst, int value, size_t bytes)
{
    RUNTIME_ENTER();
    if (bytes == 0) return cudaSuccess;
    if (!device_range(dst, bytes)) return fail(cudaErrorInvalidValue);
    if (drain() != cudaSuccess) return fail(sticky);
    memset(dst, value, bytes);
    return cudaSuccess;
}

/* ---------------------------------------------------------------------- streams */

static cudaError_t create_stream(cudaStream_t *stream, unsigned flags, int priority)
{
    RUNTIME_ENTER();
    if (!stream) return fail(cudaErrorInvalidValue);
    *stream = new CUstream_st{flags, priority};
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *stream) { return create_stream(stream, 0, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
    return create_stream(stream, flags, 0);
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *stream, unsigned int flags, int priority)
{
    return create_stream(stream, flags, priority);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    RUNTIME_ENTER();
    if (!stream) return fail(cudaErrorInvalidResourceHandle);
    drain(); /* its work still runs, as after a destroy on the device */
    delete stream;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    RUNTIME_ENTER();
    (void)stream;
    return fail(drain());
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    RUNTIME_ENTER();
    (void)stream;
    return fail(drain());
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    RUNTIME_ENTER();
    (void)stream, (void)flags;
    return event ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *data)
{
    RUNTIME_ENTER();
    (void)stream;
    if (!fn) return fail(cudaErrorInvalidValue);
    op o = op();
    o.kind = OP_HOST;
    o.fn = fn, o.data = data;
    enqueue(o);
    return cudaSuccess;
}

/* ----------------------------------------------------------------------- events */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    RUNTIME_ENTER();
    if (!event) return fail(cudaErrorInvalidValue);
    *event = new CUevent_st{flags, false, false, 0.0};
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) { return cudaEventCreateWithFlags(event, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    RUNTIME_ENTER();
    if (!event) return fail(cudaErrorInvalidResourceHandle);
    drain(); /* a pending record must not touch it afterwards */
    delete event;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    RUNTIME_ENTER();
    (void)stream;
    if (!event) return fail(cudaErrorInvalidResourceHandle);
    event->recorded = true;
    event->completed = false;
    op o = op();
    o.kind = OP_RECORD;
    o.event = event;
    enqueue(o);
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    RUNTIME_ENTER();
    if (!event) return fail(cudaErrorInvalidResourceHandle);
    return fail(drain());
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
    RUNTIME_ENTER();
    if (!event) return fail(cudaErrorInvalidResourceHandle);
    return fail(drain());
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    RUNTIME_ENTER();
    if (!ms || !start || !end) return fail(cudaErrorInvalidValue);
    if ((start->flags | end->flags) & cudaEventDisableTiming)
        return fail(cudaErrorInvalidResourceHandle);
    if (!start->completed || !end->completed) return fail(cudaErrorNotReady);
    *ms = (float)(end->milliseconds - start->milliseconds);
    return cudaSuccess;
}

/* ------------------------------------------------------------ functions (executor) */

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    RUNTIME_ENTER();
    return fail(dcp_cuda_cpu_func_set_attribute(func, attr, value));
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
    RUNTIME_ENTER();
    return fail(dcp_cuda_cpu_func_get_attributes(attr, func));
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, const void *func,
                                                          int block_size, size_t dynamic_shared)
{
    RUNTIME_ENTER();
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
