/* A host stand-in for the part of the CUDA runtime that dcp_nccl.h uses, selected by the
   include path (-Itests/fake_nccl) in the host-transport test only. Implemented in
   fake_runtime.c.

   Devices. Every simulated rank has a device: a thread of its own that runs the rank's
   streams while the rank's host thread goes on (a host thread says which rank it is with
   fake_bind_rank). Device memory (cudaMalloc) is host memory that the device records, so
   that a copy knows what it touches; cudaMallocHost memory is pinned; any other host memory
   is pageable.

   Streams. A stream is a FIFO of operations that its device runs in order: a copy or a set,
   an event record or wait, an NCCL kernel (nccl.h), or a host function -- the op that stands
   for a kernel launch: fake_enqueue_host(stream, fn, arg) runs fn(arg) on the device thread
   when the stream reaches it (nonzero: the launch failed, a sticky error of the stream), the
   way cudaLaunchHostFunc runs a callback. Kernel stand-ins (tests/test_nccl_host.c) and, later,
   kernels of an execution model of dcp_cuda.cu enqueue themselves through it.
   As CUDA may do, cudaMemcpyAsync between device and PAGEABLE memory synchronises with the
   stream: it blocks the host until everything before it on the stream is done (a stream that
   never drains blocks it for good: the fake records a hang after a bound). Copies that name
   the wrong kind of memory are recorded as violations. A NULL stream is the calling rank's
   legacy default stream, a stream of its own; its implicit order with the device's other
   blocking streams is modelled only where the synchronous cudaMemcpy and cudaMemset of the
   execution model's programs wait for them (not for cudaStreamNonBlocking streams). */
#ifndef FAKE_CUDA_RUNTIME_H
#define FAKE_CUDA_RUNTIME_H

/* The CPU execution model's multi-rank programs (tests/cuda_cpu, DCP_CUDA_CPU) run dcp_cuda.cu's
   kernels on these devices: there the types and declarations are the toolkit's, named by path
   (FAKE_NCCL_CUDA_RUNTIME, from the Makefile), fake_runtime.c implements the streams, events
   and memory of each rank's device, and tests/cuda_cpu/device.cc the rest (properties,
   kernel attributes, errors). */
#ifdef FAKE_NCCL_CUDA_RUNTIME
#include FAKE_NCCL_CUDA_RUNTIME
#else

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotReady = 600,
    cudaErrorUnknown = 999
} cudaError_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
} cudaMemcpyKind;

typedef struct fake_stream *cudaStream_t;
typedef struct fake_event *cudaEvent_t;

#define cudaStreamNonBlocking 0x01
#define cudaEventDisableTiming 0x02

const char *cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetLastError(void);
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *stream, unsigned int flags, int priority);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
/* Blocks the host until the stream is done (a hang past the fake's bound is recorded). */
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaMalloc(void **pointer, size_t bytes);
cudaError_t cudaFree(void *pointer);
cudaError_t cudaMallocHost(void **pointer, size_t bytes);
cudaError_t cudaFreeHost(void *pointer);
cudaError_t cudaMemcpyAsync(void *destination, const void *source, size_t bytes,
                            cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemsetAsync(void *destination, int value, size_t bytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* FAKE_NCCL_CUDA_RUNTIME */
#endif
