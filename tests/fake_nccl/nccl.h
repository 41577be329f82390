/* A host stand-in for the part of NCCL that dcp_nccl.h uses, as strict as NCCL itself
   (tests/fake_nccl/cuda_runtime.h says how devices and streams work; fake_runtime.c implements
   both). What it holds the caller to, each as NCCL 2.21.5 and 2.27.7 do it:
   - Point-to-point is blocking for the device: the ncclSend / ncclRecv calls of one
     ncclGroupStart / ncclGroupEnd on one communicator and stream become ONE kernel, and a send
     completes only when its receive has taken it (rendezvous). An unfused send whose peer
     also sends first deadlocks; the transport reports such a send after a bound.
   - A communicator's kernels run one after another in the order they were issued, whatever
     stream they are on (NCCL's internal stream); children split with the parent's splitShare
     = 1 share the parent's order and abort flag. A device runs one communication kernel at a
     time (the worst case NCCL allows): ranks that issue them in different orders deadlock.
   - Blocking communicators block the host as NCCL does: ncclCommSplit until every rank of the
     parent has called it, ncclGroupEnd until the peers of a first use have connected (lazy
     connection, collectives included), a launch while the work queue is full, ncclCommFinalize
     and ncclCommDestroy until the communicator's queued work is done. NCCL has no timeout
     there: the transport records a hang after a bound and returns an error so that a test
     ends.
   - Non-blocking communicators (config.blocking = 0): such a call returns ncclInProgress and a
     background thread of that communicator does the waiting; ncclCommGetAsyncError answers
     ncclInProgress until it is done; a split's child is written by that thread when the split
     completes (until then *newcomm is NULL) and its progress shows on the PARENT, whose
     config decides whether a split blocks; any other call on a communicator still in progress
     fails with ncclInvalidArgument.
   - A split that fails (a member aborted its parent before all came) writes its child all the
     same, with the error as its state, and raises the PARENT's abort flag, as NCCL's group job
     does (src/group.cc asyncJobLaunch); the caller has to abort both. ncclCommShrink (from
     2.27) is a split of the ranks not excluded, collective over them only.
   - ncclCommAbort raises the abort flag (running kernels quit without an error; so do later
     ones of the same flag, under splitShare the parent's and its children's) and then waits
     for the communicator's queued work and background thread. Inside ncclGroupStart /
     ncclGroupEnd it only raises the flag, and the waits happen in ncclGroupEnd, as NCCL does
     from 2.22 on; built with FAKE_NCCL_VERSION_CODE below 22200 it waits at once, as 2.21.
   - ncclCommGetAsyncError reports errors a test injects (fake_inject_async_error); the
     communicator's kernels then stall until it is aborted.
   - Configs: NCCL_CONFIG_INITIALIZER marks every field undefined and the communicator
     resolves NCCL's defaults (blocking 1, splitShare 0, ...); a config without the
     initializer's magic is refused; ncclCommSplit with a NULL config copies the parent's.
   - A call on a destroyed or aborted communicator is recorded as a violation (the fake keeps
     the object, so it is not also a use after free). */
#ifndef FAKE_NCCL_H
#define FAKE_NCCL_H

#include <limits.h>
#include <stddef.h>
#include "cuda_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_VERSION(X, Y, Z) ((X) * 10000 + (Y) * 100 + (Z))
/* The NCCL version the fake behaves as (and reports through ncclGetVersion): 2.27.7 by
   default; a test build may choose an older one (-DFAKE_NCCL_VERSION_CODE=22105). */
#ifndef FAKE_NCCL_VERSION_CODE
#define FAKE_NCCL_VERSION_CODE NCCL_VERSION(2, 27, 7)
#endif
#define NCCL_VERSION_CODE FAKE_NCCL_VERSION_CODE
#define NCCL_MAJOR (NCCL_VERSION_CODE / 10000)
#define NCCL_MINOR (NCCL_VERSION_CODE / 100 % 100)
#define NCCL_PATCH (NCCL_VERSION_CODE % 100)
#define NCCL_SPLIT_NOCOLOR (-1)
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_MAGIC 0xcafebeefu

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
    ncclUint64 = 5,
    ncclFloat32 = 7,
    ncclFloat = 7,
    ncclFloat64 = 8,
    ncclDouble = 8
} ncclDataType_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3 } ncclRedOp_t;

typedef struct fake_comm *ncclComm_t;

/* Names a job of simulated ranks that ncclCommInitRankConfig joins (the transport's serial). */
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/* NCCL's config, the fields dcp_nccl.h and its tests use, in NCCL's order. */
typedef struct ncclConfig_v22700 {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking;       /* 1 (default): calls return when done; 0: ncclInProgress, then poll */
    int cgaClusterSize; /* default 4; carried so that a test can tell inherited from default */
    int minCTAs;        /* default 1 */
    int maxCTAs;        /* default 32 */
    int splitShare;     /* default 0; 1: children share this communicator's resources */
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER                                                                \
    {sizeof(ncclConfig_t),  NCCL_CONFIG_MAGIC,     NCCL_VERSION_CODE,                          \
     NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                      \
     NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT}

const char *ncclGetErrorString(ncclResult_t result);
/* Communicators on devices that exist (fake_devices_create): the rank of the calling thread's
   device, or devlist's devices. ncclCommInitRankConfig returns when every rank of the id has
   joined; peers connect lazily, at their first use (as every communicator here). */
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config);
ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist);
const char *ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclCommCount(ncclComm_t comm, int *count);
ncclResult_t ncclCommUserRank(ncclComm_t comm, int *rank);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *child,
                           ncclConfig_t *config);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
#define NCCL_SHRINK_DEFAULT 0x00 /* shrink the parent */
#define NCCL_SHRINK_ABORT 0x01   /* the parent's running operations quit first */
/* The parent without excludeRanksList's ranks (sorted in place), the order kept; collective
   over the ranks that stay, which alone call it; a split in every other respect. */
ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                            ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags);
#endif
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
