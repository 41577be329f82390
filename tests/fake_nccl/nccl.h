/* A host stand-in for the part of NCCL that dcp_nccl.h uses (tests/fake_nccl/cuda_runtime.h
   says how streams work). Communicators of one simulated job share mailboxes: a send
   deposits a copy, the matching receive (same communicator, same peers, FIFO order, same
   byte count, or the test fails) takes it when its stream runs; collectives meet by sequence
   number. Splits, aborts, asynchronous errors and non-blocking communicators (config.blocking
   = 0: calls answer ncclInProgress and settle after a few polls) behave as NCCL documents
   them. Implemented in fake_runtime.c. */
#ifndef FAKE_NCCL_H
#define FAKE_NCCL_H

#include <stddef.h>
#include "cuda_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_VERSION_CODE 22800
#define NCCL_SPLIT_NOCOLOR (-1)

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7
} ncclResult_t;

typedef enum {
    ncclInt8 = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5
} ncclDataType_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3 } ncclRedOp_t;

typedef struct fake_comm *ncclComm_t;

typedef struct ncclConfig_v {
    int blocking;   /* 1: calls return when done; 0: ncclInProgress, then poll */
    int splitShare; /* recorded only (the fake has no resources to share) */
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER {1, 0}

const char *ncclGetErrorString(ncclResult_t result);
const char *ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclCommCount(ncclComm_t comm, int *count);
ncclResult_t ncclCommUserRank(ncclComm_t comm, int *rank);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *child,
                           ncclConfig_t *config);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclSend(const void *data, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void *data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *send, void *receive, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *send, void *receive, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
