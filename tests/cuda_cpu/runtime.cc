/* runtime.cc - the CUDA runtime API over host memory, for the CPU execution model
   (tests/cuda_cpu). Declarations are the toolkit's (cuda_runtime_api.h); a program links this
   instead of libcudart.

   One device (the profile of DCP_CUDA_CPU_DEVICE). Device memory is host memory in the
   model's device region (memory.cc: under ASan, a kernel's access past the requested size of
   an allocation or after cudaFree is ASan's error); cudaMalloc fills new memory with 0xFF
   bytes (NaN in every float type), as a stale value would show. Streams share one queue in issue order, which runs at the next synchronising
   call (cudaDeviceSynchronize, cudaStreamSynchronize, cudaStreamQuery, cudaEventSynchronize,
   cudaEventQuery, the synchronous cudaMemcpy and cudaMemset, cudaFree): work really runs
   after the call that enqueued it, so a host read that skips a synchronisation sees stale
   data. One queue in issue order is a valid schedule of any stream dependency graph (a wait
   on an event follows its record in issue order). A host-to-device cudaMemcpyAsync reads its
   source at the call (pageable memory is staged), a device-to-host one writes at its turn.
   Errors as the runtime reports them: a failing call's error is returned and kept for
   cudaGetLastError (which clears it); a device fault (a checker report, a trap) is sticky:
   every later call returns cudaErrorLaunchFailure (device.cc keeps that state, and answers
   what the device is). One lock serialises the calls. Programs of several simulated ranks link
   the host NCCL transport's stream runtime instead (tests/fake_nccl/fake_runtime.c: a device
   thread per rank), with the same device.cc. */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

#include <deque>
#include <map>
#include <mutex>


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

/* Built for a host framework's tensors (DCP_CUDA_CPU_UNIFIED: build/libdcp_cuda-cpu.so, whose
   callers' torch CPU tensors are the device's memory), every pointer is the device's. */
#ifdef DCP_CUDA_CPU_UNIFIED
static const bool UNIFIED_MEMORY = true;
#else
static const bool UNIFIED_MEMORY = false;
#endif

/* The error state is device.cc's. */
static cudaError_t fail(cudaError_t error) { return dcp_cuda_cpu_fail(error); }

#define RUNTIME_ENTER()                                                                            \
    std::lock_guard<std::recursive_mutex> guard(lock);                                             \
    if (dcp_cuda_cpu_sticky() != cudaSuccess) return fail(dcp_cuda_cpu_sticky())

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
        if (dcp_cuda_cpu_sticky() == cudaSuccess) run(o);
        else free(o.staged);
    }
    return dcp_cuda_cpu_sticky();
}

/* In the unified build work runs at once: a framework's CPU tensors (scratch included) live only
   as long as the call that enqueued work on them. */
static void enqueue(const op &o)
{
    queue.push_back(o);
    if (UNIFIED_MEMORY) drain();
}

/* --------------------------------------------------------------------- devices */

cudaError_t cudaDeviceSynchronize(void)
{
    RUNTIME_ENTER();
    return fail(drain());
}

cudaError_t cudaDeviceReset(void)
{
    std::lock_guard<std::recursive_mutex> guard(lock);
    drain();
    dcp_cuda_cpu_clear_errors();
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

static bool device_range(const void *p, size_t bytes)
{
    return (UNIFIED_MEMORY && p) || inside(device_allocations, p, bytes);
}

cudaError_t cudaMalloc(void **pointer, size_t bytes)
{
    RUNTIME_ENTER();
    if (!pointer) return fail(cudaErrorInvalidValue);
    void *p = dcp_cuda_cpu_device_malloc(bytes);
    if (!p) return fail(cudaErrorMemoryAllocation);
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
    /* cudaFree waits for the device */
    if (drain() != cudaSuccess) return fail(dcp_cuda_cpu_sticky());
    dcp_cuda_cpu_device_free(pointer, it->second);
    device_allocations.erase(it);
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
    if (src && !device_range(src, bytes)) { /* a host source: staged now */
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
    if (drain() != cudaSuccess) return fail(dcp_cuda_cpu_sticky());
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
    if (drain() != cudaSuccess) return fail(dcp_cuda_cpu_sticky());
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

