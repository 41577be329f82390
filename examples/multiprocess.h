/* examples/multiprocess.h - what the programs started as N processes share
   (examples/ring_attention_nccl.cu, bench/a2a_bench.cu, tests/test_nccl_gpu.cu;
   tests/multirank.sh starts them on one GPU): the NCCL unique id handed out through a file,
   environment integers, and CUDA / NCCL checks. A program that uses the checks defines
   `static void die(const char *what, const char *detail)` (report, clean up, exit) first.
   The id: rank 0 writes it to a temporary file and renames it into place, so a reader never
   sees part of one; the other ranks poll for it. */
#ifndef DCP_MULTIPROCESS_H
#define DCP_MULTIPROCESS_H

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define CUDA(call)                                                                             \
    do {                                                                                       \
        cudaError_t cuda_result_ = (call);                                                     \
        if (cuda_result_ != cudaSuccess) die(#call, cudaGetErrorString(cuda_result_));         \
    } while (0)
#define NCCL(call)                                                                             \
    do {                                                                                       \
        ncclResult_t nccl_result_ = (call);                                                    \
        if (nccl_result_ != ncclSuccess) die(#call, ncclGetErrorString(nccl_result_));         \
    } while (0)

/* The integer in environment variable name, or fallback when it is unset or empty. */
static inline int env_int(const char *name, int fallback)
{
    const char *value = getenv(name);
    return value && *value ? atoi(value) : fallback;
}

#define NCCL_ID_FILE_WAIT_MS 120000 /* how long the other ranks wait for rank 0's file */
#define NCCL_ID_FILE_POLL_US 10000
#define NCCL_ID_FILE_PATH_MAX 4096

/* 1 with *id filled (rank 0: a new id, written to path), else 0 with *why naming the step. */
static inline int nccl_id_file_exchange(const char *path, int rank, ncclUniqueId *id, const char **why)
{
    long waited_us = 0;
    if (rank == 0) {
        char temporary[NCCL_ID_FILE_PATH_MAX];
        FILE *f;
        if (ncclGetUniqueId(id) != ncclSuccess) return *why = "ncclGetUniqueId failed", 0;
        snprintf(temporary, sizeof temporary, "%s.tmp.%d", path, (int)getpid());
        f = fopen(temporary, "wb");
        if (!f) return *why = "cannot create the NCCL id file", 0;
        if (fwrite(id, sizeof *id, 1, f) != 1 || fclose(f) != 0)
            return *why = "cannot write the NCCL id file", 0;
        if (rename(temporary, path) != 0) return *why = "cannot rename the NCCL id file", 0;
        return 1;
    }
    while (waited_us < (long)NCCL_ID_FILE_WAIT_MS * 1000) {
        FILE *f = fopen(path, "rb");
        if (f) {
            const size_t got = fread(id, sizeof *id, 1, f);
            fclose(f);
            if (got == 1) return 1;
        }
        usleep(NCCL_ID_FILE_POLL_US);
        waited_us += NCCL_ID_FILE_POLL_US;
    }
    return *why = "no NCCL id file from rank 0 in time", 0;
}

#endif /* DCP_MULTIPROCESS_H */
