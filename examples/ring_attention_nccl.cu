/* ring_attention_nccl - dynamic CP end to end with dcp_nccl.h: one process per GPU.

   Rank 0 plans a generated batch and broadcasts the plan; every rank reroutes the samples it
   holds (sample s starts on rank s % WORLD_SIZE, as a data loader would leave it) into its
   microbatch buffers, then runs ring attention forward and backward on each group of each
   microbatch, switching groups per microbatch (all on the set's one communicator; groups of
   any size when DCP_CP_SIZES allows them). Each rank then recomputes its groups'
   samples whole with the single-rank attention call (cp 1) and compares its rows of out, lse,
   dq, dk and dv. The same binary runs on 1 GPU and on N GPUs of a node unchanged.

   Build (from the repository root; or `make ring-example`):
       nvcc -std=c++14 -O2 -arch=sm_90a examples/ring_attention_nccl.cu dcp_cuda.cu \
            -o ring_attention_nccl -lnccl
   Run: ranks come from RANK, WORLD_SIZE and LOCAL_RANK (torchrun's names; default one rank);
   the NCCL unique id goes through a file named by the first argument or by DCP_NCCL_ID_FILE
   (default /tmp/dcp_nccl_id): rank 0 writes it, the others wait for it; use a fresh path per
   run. One GPU:        ./ring_attention_nccl
   Eight GPUs (bash):   for r in 0 1 2 3 4 5 6 7; do
                            RANK=$r LOCAL_RANK=$r WORLD_SIZE=8 ./ring_attention_nccl /tmp/id.$$ &
                        done; wait
   or torchrun --nproc-per-node 8 --no-python ./ring_attention_nccl /tmp/id.$$ .
   Several ranks on ONE GPU: NCCL refuses two ranks that look like the same host on one
   device; give each process its own NCCL_HOSTID and keep the traffic on sockets
   (NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo). LOCAL_RANK is taken modulo the visible devices.
   tests/multirank.sh does that for 2, 4, 6 and 8 ranks (make test-multirank).
   Environment for tests (tests/multirank.sh):
       DCP_TIMEOUT_MS=n            the set's timeout (default DCP_NCCL_DEFAULT_TIMEOUT_MS)
       DCP_NONBLOCKING=1           the pool and its splits are non-blocking communicators
       DCP_EXIT_RANK=r             rank r exits (as if killed) after the plan broadcast, in
                                   the middle of the step: the others must fail within the
                                   timeout with the communicator and operation named
       DCP_MEASURE_SPLIT_MEMORY=1  device memory of the set (one communicator, its ring peers
                                   connected) against the former communicator per CP size
                                   (all connected), not shared and shared (splitShare in the
                                   parent's config), then exit
       DCP_CP_SIZES=s              the planner's CP sizes: pow2 (default), megatron, any, or a
                                   list such as 12,48 (dcp_config.cp_sizes)
       DCP_TOKENS_PER_RANK=n       the planner's max_tokens_per_rank (default
                                   MAX_TOKENS_PER_RANK)
       DCP_TIME_RING=1             per microbatch: the ring backward's time, its step kernels'
                                   alone, and the exposed communication per step
   Exit status 0 when every rank's results match, 1 otherwise. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#define DCP_NCCL_IMPLEMENTATION
#include "../dcp_nccl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The workload: lognormal lengths, a GQA model, bf16 (a smaller one may be compiled in: the
   CPU execution model's build, tests/ring_attention_cpu.cc). */
#ifndef SAMPLES
#define SAMPLES 24
#endif
#define SEED 7
#ifndef MAX_TOKENS_PER_RANK
#define MAX_TOKENS_PER_RANK 4096
#endif
#ifndef HEADS
#define HEADS 8
#endif
#ifndef KV_HEADS
#define KV_HEADS 2
#endif
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#define FORWARD_TOLERANCE 2e-2  /* bf16 outputs against a float32 single-rank reference */
#define BACKWARD_TOLERANCE 5e-2 /* bf16 gradients, different summation order */

/* A rank's own state: one per process here; per thread where ranks are threads
   (RANK_LOCAL thread_local: tests/ring_attention_cpu.cc). */
#ifndef RANK_LOCAL
#define RANK_LOCAL
#endif
static RANK_LOCAL int g_rank;
static RANK_LOCAL dcp_nccl_set *g_set;
static RANK_LOCAL ncclComm_t g_pool;

/* Any failure: say where, abort every communicator (the peers would wait forever), exit. */
static void die(const char *what, const char *detail)
{
    fprintf(stderr, "rank %d: %s: %s\n", g_rank, what, detail);
    if (g_set) (void)dcp_nccl_set_abort(g_set, 1, NULL);
    else if (g_pool) (void)ncclCommAbort(g_pool);
    exit(1);
}

/* The checks below end the process through die(). */
#include "multiprocess.h"

/* The error every dcp call of this program fills. */
static RANK_LOCAL dcp_error err;
#define TRY(call)                                                                              \
    do {                                                                                       \
        err.message[0] = '\0';                                                                 \
        if ((call) != DCP_OK) die(#call, err.message);                                         \
    } while (0)

/* A non-blocking NCCL call polled to its end (the pool's own creation, before a set exists). */
static void nccl_settle(ncclComm_t comm, ncclResult_t result, const char *what)
{
    while (result == ncclInProgress) {
        if (ncclCommGetAsyncError(comm, &result) != ncclSuccess) result = ncclInternalError;
        if (result == ncclInProgress) usleep(100);
    }
    if (result != ncclSuccess) die(what, ncclGetErrorString(result));
}

/* Every rank's free device memory drop is summed on the pool (one GPU: the device-wide drop
   of all ranks creating at once), so each rank reports the per-rank mean. */
static double pool_mean(double value, ncclComm_t pool, int ranks, cudaStream_t stream)
{
    double *d = NULL;
    CUDA(cudaMalloc(&d, sizeof value));
    CUDA(cudaMemcpyAsync(d, &value, sizeof value, cudaMemcpyHostToDevice, stream));
    NCCL(ncclAllReduce(d, d, 1, ncclDouble, ncclSum, pool, stream));
    CUDA(cudaMemcpyAsync(&value, d, sizeof value, cudaMemcpyDeviceToHost, stream));
    CUDA(cudaStreamSynchronize(stream));
    CUDA(cudaFree(d));
    return value / ranks;
}

/* Evaluation at a static CP size (seed 003), under dcp_nccl_override_run: each group's member
   0 broadcasts a message naming its group to the group's ranks; every member must receive its
   own group's. */
#define EVAL_MESSAGE_BYTES 64
typedef struct eval_check {
    cudaStream_t stream;
    int mismatches;
} eval_check;

static dcp_status eval_in_override(dcp_nccl_set *set, const dcp_nccl_binding *binding,
                                   void *user, dcp_error *error)
{
    eval_check *check = (eval_check *)user;
    char message[EVAL_MESSAGE_BYTES];
    void *received = NULL;
    size_t size = 0;
    dcp_status status;
    if (binding->idle || binding->cp == 1) return DCP_OK; /* idle past the last full block */
    memset(message, 0, sizeof message);
    snprintf(message, sizeof message, "group of cp %d from rank %d", (int)binding->cp,
             (int)binding->first_rank);
    status = dcp_nccl_group_broadcast_bytes(set, binding, 0, message, sizeof message,
                                            binding->rank == 0 ? NULL : &received, &size,
                                            check->stream, error);
    if (status != DCP_OK) return status;
    if (binding->rank != 0 && (size != sizeof message || memcmp(received, message, size) != 0))
        check->mismatches++;
    if (received) dcp_free(&set->allocator, received);
    return DCP_OK;
}

/* One float to and from each of the set's ring peers (ranks r +- 1 and r +- 2: every ring of
   every size and position, dcp_ring_order), so that NCCL has connected them (it does at first
   use) before memory is read. */
#define RING_PEER_REACH 2
static void warm_set(dcp_nccl_set *set, cudaStream_t stream)
{
    float *d = NULL;
    int32_t offset;
    CUDA(cudaMalloc(&d, 2 * sizeof(float)));
    CUDA(cudaMemsetAsync(d, 0, 2 * sizeof(float), stream));
    NCCL(ncclGroupStart());
    for (offset = -RING_PEER_REACH; offset <= RING_PEER_REACH; offset++) {
        const int32_t peer = set->rank + offset;
        if (offset == 0 || peer < 0 || peer >= set->ranks) continue;
        NCCL(ncclSend(d, 1, ncclFloat, peer, set->comm, stream));
        NCCL(ncclRecv(d + 1, 1, ncclFloat, peer, set->comm, stream));
    }
    NCCL(ncclGroupEnd());
    TRY(dcp_nccl_set_wait(set, stream, &err));
    CUDA(cudaFree(d));
}

/* The former set for comparison: one communicator per CP size 2, 4, .. <= ranks, split from
   parent (color rank / c, key rank % c; past the last full block none), each connected by one
   all-reduce as its ring would be. Destroys them again; returns how many this rank held. */
#define LEGACY_MAX_SPLITS 21
static int legacy_splits(ncclComm_t parent, int rank, int ranks, ncclConfig_t *config,
                         cudaStream_t stream, size_t *free_after)
{
    ncclComm_t comms[LEGACY_MAX_SPLITS];
    float *d = NULL;
    int count = 0, c, i;
    CUDA(cudaMalloc(&d, sizeof(float)));
    CUDA(cudaMemsetAsync(d, 0, sizeof(float), stream));
    for (c = 2; c <= ranks && count < LEGACY_MAX_SPLITS; c *= 2) {
        const int full = rank < ranks / c * c;
        ncclComm_t child = NULL;
        NCCL(ncclCommSplit(parent, full ? rank / c : NCCL_SPLIT_NOCOLOR, full ? rank % c : 0,
                           &child, config));
        if (child) comms[count++] = child;
    }
    for (i = 0; i < count; i++) NCCL(ncclAllReduce(d, d, 1, ncclFloat, ncclSum, comms[i], stream));
    CUDA(cudaStreamSynchronize(stream));
    {
        size_t total = 0;
        CUDA(cudaMemGetInfo(free_after, &total));
    }
    for (i = 0; i < count; i++) NCCL(ncclCommDestroy(comms[i]));
    CUDA(cudaFree(d));
    return count;
}

/* Device memory of the set (one communicator, its ring peers connected) against the former
   communicator per CP size, without and with splitShare in the parent's config: the unshared
   runs split g_pool itself; the shared ones a copy of the pool created with splitShare 1.
   Prints one line per kind on rank 0 (device-wide drop over the ranks on one GPU). */
static void measure_split_memory(int rank, int ranks, cudaStream_t stream)
{
    int share;
    for (share = 0; share <= 1; share++) {
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        dcp_nccl_options options;
        dcp_nccl_set *set = NULL;
        ncclComm_t parent = g_pool;
        size_t free_before = 0, free_after = 0, total = 0;
        double drop, legacy_drop;
        int held;
        config.splitShare = share;
        if (share) NCCL(ncclCommSplit(g_pool, 0, rank, &parent, &config));
        memset(&options, 0, sizeof options);
        options.config = &config;
        (void)pool_mean(0.0, g_pool, ranks, stream); /* everyone is here */
        CUDA(cudaMemGetInfo(&free_before, &total));
        (void)pool_mean(0.0, g_pool, ranks, stream);
        TRY(dcp_nccl_set_create(parent, &options, &set, &err));
        warm_set(set, stream);
        (void)pool_mean(0.0, g_pool, ranks, stream);
        CUDA(cudaMemGetInfo(&free_after, &total));
        drop = pool_mean((double)free_before - (double)free_after, g_pool, ranks, stream);
        TRY(dcp_nccl_set_destroy(set, &err));
        (void)pool_mean(0.0, g_pool, ranks, stream);
        CUDA(cudaMemGetInfo(&free_before, &total));
        (void)pool_mean(0.0, g_pool, ranks, stream);
        held = legacy_splits(parent, rank, ranks, &config, stream, &free_after);
        legacy_drop = pool_mean((double)free_before - (double)free_after, g_pool, ranks, stream);
        if (rank == 0)
            printf("split memory: splitShare %d: the set, 1 communicator per rank with its ring "
                   "peers connected: %.1f MiB per rank; the former %d communicators per rank "
                   "(one per CP size, connected): %.1f MiB per rank (device-wide drop / %d "
                   "ranks)\n",
                   share, drop / 1048576.0, held, legacy_drop / 1048576.0, ranks);
        if (share) NCCL(ncclCommDestroy(parent));
    }
}

/* The pool's NCCL id through the file at path (examples/nccl_id_file.h). */
static ncclUniqueId exchange_id(const char *path, int rank)
{
    ncclUniqueId id;
    const char *why = "";
    if (!nccl_id_file_exchange(path, rank, &id, &why)) die(why, path);
    return id;
}

/* The generated value of element i of row `position` of sample s in tensor t, as bf16. */
static uint16_t element(int t, int32_t s, int64_t position, int64_t i)
{
    uint64_t x = ((uint64_t)t << 60) ^ ((uint64_t)(uint32_t)s << 36) ^ ((uint64_t)position << 12) ^
                 (uint64_t)i;
    float f;
    uint32_t bits;
    x = (x ^ (x >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94D049BB133111EB);
    x ^= x >> 31;
    f = (float)((double)(x >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
    memcpy(&bits, &f, sizeof bits);
    bits += 0x7FFFu + ((bits >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(bits >> 16);
}

static float bf16_value(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

enum { T_Q, T_K, T_V, T_DOUT, TENSORS };
static const int kWidth[TENSORS] = {HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM,
                                    HEADS * HEAD_DIM};

/* count rows of sample s from `first`, generated on the host and copied to the device on
   `stream`, the stream of every later reader: every copy of this program is ordered on the
   one non-blocking stream that also runs the kernels and collectives (a legacy-stream
   cudaMemcpy would not be ordered against them). The host buffer is freed only after the
   stream has passed the copy. */
static void upload_rows(int t, int32_t s, int64_t first, int64_t count, void *device,
                        cudaStream_t stream)
{
    const int64_t width = kWidth[t];
    uint16_t *host = (uint16_t *)malloc((size_t)(count * width) * 2 + 2);
    int64_t r, i;
    for (r = 0; r < count; r++)
        for (i = 0; i < width; i++) host[r * width + i] = element(t, s, first + r, i);
    CUDA(cudaMemcpyAsync(device, host, (size_t)(count * width) * 2, cudaMemcpyHostToDevice,
                         stream));
    CUDA(cudaStreamSynchronize(stream));
    free(host);
}

/* count values of a device tensor, after everything enqueued on stream before. */
static float *download_floats(const void *device, int64_t count, int bf16, cudaStream_t stream)
{
    float *out = (float *)malloc((size_t)count * 4 + 4);
    if (bf16) {
        uint16_t *h = (uint16_t *)malloc((size_t)count * 2 + 2);
        int64_t i;
        CUDA(cudaMemcpyAsync(h, device, (size_t)count * 2, cudaMemcpyDeviceToHost, stream));
        CUDA(cudaStreamSynchronize(stream));
        for (i = 0; i < count; i++) out[i] = bf16_value(h[i]);
        free(h);
    } else {
        CUDA(cudaMemcpyAsync(out, device, (size_t)count * 4, cudaMemcpyDeviceToHost, stream));
        CUDA(cudaStreamSynchronize(stream));
    }
    return out;
}

static void *device_alloc(size_t bytes)
{
    void *p = NULL;
    CUDA(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}

/* Worst |ring - single| / max(1, max |single|) over this rank's valid rows, per tensor. */
typedef struct errors {
    double out, lse, dq, dk, dv;
} errors;

static double row_error(const float *ring, const float *single, int64_t width, double *scale)
{
    double worst = 0.0;
    int64_t i;
    for (i = 0; i < width; i++) {
        double e = fabs((double)ring[i] - (double)single[i]);
        if (fabs(single[i]) > *scale) *scale = fabs(single[i]);
        if (!(e <= worst)) worst = e; /* NaN counts as the worst */
    }
    return worst;
}

/* The group's samples whole on this GPU (cp 1), and this rank's rows of the ring compared. */
static void check_group(const dcp_rank_view *view, const dcp_attention_params *params,
                        void *const ring[5], const float *ring_lse, cudaStream_t stream,
                        errors *worst)
{
    const int64_t total = view->cu_seqlens_padded[view->num_samples];
    const int64_t local = view->local_tokens;
    dcp_thd_layout thd;
    dcp_cuda_layout full;
    dcp_attention_view whole_view; /* all zero: the whole buffer against itself */
    int32_t *d_cu = (int32_t *)device_alloc((size_t)(view->num_samples + 1) * 4);
    int32_t *d_cu_padded = (int32_t *)device_alloc((size_t)(view->num_samples + 1) * 4);
    void *whole[TENSORS], *out_dtype;
    float *out32, *lse, *grad[3], *host[5], *single[5], *single_lse, *ring_lse_host;
    int32_t *slot = (int32_t *)malloc((size_t)local * 4 + 4);
    int64_t *position = (int64_t *)malloc((size_t)local * 8 + 8);
    size_t workspace_bytes = 0;
    void *workspace;
    double scale[5] = {1, 1, 1, 1, 1}, worst_abs[5] = {0, 0, 0, 0, 0}, lse_err = 0.0;
    int t, j;
    int64_t row;
    memset(&whole_view, 0, sizeof whole_view);
    CUDA(cudaMemcpyAsync(d_cu, view->cu_seqlens, (size_t)(view->num_samples + 1) * 4,
                         cudaMemcpyHostToDevice, stream));
    CUDA(cudaMemcpyAsync(d_cu_padded, view->cu_seqlens_padded,
                         (size_t)(view->num_samples + 1) * 4, cudaMemcpyHostToDevice, stream));
    thd.num_sequences = view->num_samples;
    thd.cu_seqlens = d_cu;
    thd.cu_seqlens_padded = d_cu_padded;
    thd.cp = 1;
    full.thd = thd;
    full.local_rows = total;
    full.max_seqlen_padded = view->max_seqlen;
    for (t = 0; t < TENSORS; t++) { /* whole samples, valid rows; padding rows zero */
        whole[t] = device_alloc((size_t)(total * kWidth[t]) * 2);
        CUDA(cudaMemsetAsync(whole[t], 0, (size_t)(total * kWidth[t]) * 2, stream));
        for (j = 0; j < view->num_samples; j++)
            upload_rows(t, view->samples[j], 0, view->sample_lengths[j],
                        (uint16_t *)whole[t] + (int64_t)view->cu_seqlens_padded[j] * kWidth[t],
                        stream);
    }
    out32 = (float *)device_alloc((size_t)(total * kWidth[T_Q]) * 4);
    out_dtype = device_alloc((size_t)(total * kWidth[T_Q]) * 2);
    lse = (float *)device_alloc((size_t)(total * HEADS) * 4);
    for (t = 0; t < 3; t++) {
        grad[t] = (float *)device_alloc((size_t)(total * kWidth[t]) * 4);
        CUDA(cudaMemsetAsync(grad[t], 0, (size_t)(total * kWidth[t]) * 4, stream));
    }
    TRY(dcp_cuda_attention_workspace_size(params, &full, &workspace_bytes, &err));
    workspace = device_alloc(workspace_bytes);
    TRY(dcp_cuda_attention_forward(params, &full, &whole_view, DCP_DTYPE_BFLOAT16, whole[T_Q],
                                   whole[T_K], whole[T_V], DCP_DTYPE_FLOAT32, out32, lse,
                                   workspace, workspace_bytes, (void *)stream, &err));
    TRY(dcp_cuda_convert(out32, DCP_DTYPE_BFLOAT16, out_dtype, total * kWidth[T_Q],
                         (void *)stream, &err));
    TRY(dcp_cuda_attention_backward(params, &full, &whole_view, DCP_DTYPE_BFLOAT16, whole[T_Q],
                                    whole[T_K], whole[T_V], out_dtype, whole[T_DOUT], lse,
                                    grad[0], grad[1], grad[2], 1, workspace, workspace_bytes,
                                    (void *)stream, &err));
    CUDA(cudaStreamSynchronize(stream));
    single[0] = download_floats(out32, total * kWidth[T_Q], 0, stream);
    for (t = 0; t < 3; t++)
        single[2 + t] = download_floats(grad[t], total * kWidth[t], 0, stream);
    single_lse = download_floats(lse, total * HEADS, 0, stream);
    host[0] = download_floats(ring[0], local * kWidth[T_Q], 1, stream);
    for (t = 0; t < 3; t++)
        host[2 + t] = download_floats(ring[2 + t], local * kWidth[t], 1, stream);
    ring_lse_host = download_floats(ring_lse, local * HEADS, 0, stream);
    TRY(dcp_rank_view_positions(view, slot, position, &err));
    for (row = 0; row < local; row++) {
        int64_t global;
        int h;
        if (position[row] < 0) continue; /* padding */
        global = view->cu_seqlens_padded[slot[row]] + position[row];
        for (t = 0; t < 5; t++) {
            const int64_t width = t == 0 ? kWidth[T_Q] : t == 1 ? 0 : kWidth[t - 2];
            double e;
            if (t == 1) continue;
            e = row_error(host[t] + row * width, single[t] + global * width, width, &scale[t]);
            if (!(e <= worst_abs[t])) worst_abs[t] = e;
        }
        for (h = 0; h < HEADS; h++) { /* lse is [heads, rows] */
            double e = fabs((double)ring_lse_host[(int64_t)h * local + row] -
                            (double)single_lse[(int64_t)h * total + global]);
            if (!(e <= lse_err)) lse_err = e;
        }
    }
    if (!(worst_abs[0] / scale[0] <= worst->out)) worst->out = worst_abs[0] / scale[0];
    if (!(lse_err <= worst->lse)) worst->lse = lse_err;
    if (!(worst_abs[2] / scale[2] <= worst->dq)) worst->dq = worst_abs[2] / scale[2];
    if (!(worst_abs[3] / scale[3] <= worst->dk)) worst->dk = worst_abs[3] / scale[3];
    if (!(worst_abs[4] / scale[4] <= worst->dv)) worst->dv = worst_abs[4] / scale[4];
    for (t = 0; t < 5; t++)
        if (t != 1) free(host[t]), free(single[t]);
    free(single_lse), free(ring_lse_host), free(slot), free(position);
    for (t = 0; t < TENSORS; t++) CUDA(cudaFree(whole[t]));
    for (t = 0; t < 3; t++) CUDA(cudaFree(grad[t]));
    CUDA(cudaFree(out32));
    CUDA(cudaFree(out_dtype));
    CUDA(cudaFree(lse));
    CUDA(cudaFree(workspace));
    CUDA(cudaFree(d_cu));
    CUDA(cudaFree(d_cu_padded));
}

/* DCP_TIME_RING=1: the exposed communication of the ring backward, per step. The ring pass is
   timed again (same inputs, same outputs), then its step kernels alone on this rank's own
   buffers (same shapes and masks, no transfer, no add); the difference over cp steps is the
   communication compute did not hide. Prints one line per rank and microbatch. */
static void time_ring_backward(const dcp_nccl_binding *group, const dcp_attention_params *params,
                               const dcp_cuda_layout *layout, void *const q, void *const k,
                               void *const v, void *const out, void *const dout,
                               const float *lse, void *const grads[3], void *scratch,
                               size_t scratch_bytes, int microbatch, cudaStream_t stream)
{
    cudaEvent_t start, ring_end, kernels_end;
    float ring_ms = 0.0f, kernels_ms = 0.0f;
    size_t workspace_bytes = 0;
    void *workspace, *accumulators;
    const int64_t q_values = layout->local_rows * HEADS * HEAD_DIM;
    const int64_t kv_values = layout->local_rows * KV_HEADS * HEAD_DIM;
    float *dq, *dk, *dv;
    int32_t s;
    TRY(dcp_cuda_attention_workspace_size(params, layout, &workspace_bytes, &err));
    workspace = device_alloc(workspace_bytes);
    accumulators = device_alloc((size_t)(q_values + 2 * kv_values) * 4);
    dq = (float *)accumulators, dk = dq + q_values, dv = dk + kv_values;
    CUDA(cudaMemsetAsync(accumulators, 0, (size_t)(q_values + 2 * kv_values) * 4, stream));
    CUDA(cudaEventCreate(&start));
    CUDA(cudaEventCreate(&ring_end));
    CUDA(cudaEventCreate(&kernels_end));
    CUDA(cudaEventRecord(start, stream));
    TRY(dcp_nccl_ring_backward(g_set, group, params, layout, DCP_DTYPE_BFLOAT16, q, k, v, out,
                               dout, lse, grads[0], grads[1], grads[2], 1, scratch,
                               scratch_bytes, stream, &err));
    CUDA(cudaEventRecord(ring_end, stream));
    for (s = 0; s < group->cp; s++) {
        dcp_ring_step step;
        dcp_attention_params p = *params;
        TRY(dcp_ring_step_plan(group->cp, group->rank, s, params->causal, &step, &err));
        p.causal = step.causal;
        TRY(dcp_cuda_attention_backward(&p, layout, &step.view, DCP_DTYPE_BFLOAT16, q, k, v, out,
                                        dout, lse, dq, dk, dv, 1, workspace, workspace_bytes,
                                        (void *)stream, &err));
    }
    CUDA(cudaEventRecord(kernels_end, stream));
    TRY(dcp_nccl_set_wait(g_set, stream, &err));
    CUDA(cudaEventElapsedTime(&ring_ms, start, ring_end));
    CUDA(cudaEventElapsedTime(&kernels_ms, ring_end, kernels_end));
    printf("rank %d microbatch %d cp %d: ring backward %.3f ms, its kernels alone %.3f ms, "
           "exposed communication %.3f ms per step\n",
           g_rank, microbatch, (int)group->cp, ring_ms, kernels_ms,
           (ring_ms - kernels_ms) / (float)group->cp);
    CUDA(cudaEventDestroy(start));
    CUDA(cudaEventDestroy(ring_end));
    CUDA(cudaEventDestroy(kernels_end));
    CUDA(cudaFree(workspace));
    CUDA(cudaFree(accumulators));
}

/* The planner's config: the pool, DCP_TOKENS_PER_RANK tokens a rank, the CP sizes of
   DCP_CP_SIZES (pow2, megatron, any, or a list "12,48"); resolved (max_cp filled in). */
static dcp_config plan_config_from_env(int ranks)
{
    const char *sizes = getenv("DCP_CP_SIZES");
    dcp_config config, resolved;
    memset(&config, 0, sizeof config);
    config.ranks = ranks;
    config.max_tokens_per_rank = env_int("DCP_TOKENS_PER_RANK", MAX_TOKENS_PER_RANK);
    config.pad_multiple = 8;
    if (sizes && strcmp(sizes, "megatron") == 0) config.cp_sizes = DCP_CP_SIZES_MEGATRON;
    else if (sizes && strcmp(sizes, "any") == 0) config.cp_sizes = DCP_CP_SIZES_ANY;
    else if (sizes && strcmp(sizes, "pow2") != 0 && *sizes) {
        const char *at = sizes;
        char *end = NULL;
        config.cp_sizes = DCP_CP_SIZES_LIST;
        while (*at && config.cp_size_count < DCP_CP_SIZE_LIST_CAPACITY) {
            config.cp_size_list[config.cp_size_count++] = (int32_t)strtol(at, &end, 10);
            if (end == at) die("DCP_CP_SIZES", "pow2, megatron, any or a list such as 12,48");
            at = *end == ',' ? end + 1 : end;
        }
    }
    TRY(dcp_config_resolve(&config, &resolved, &err));
    return resolved;
}

/* One rank's whole run; 0 when every rank's results match. */
static int ring_rank_main(int rank, int ranks, int local_rank, const char *id_path)
{
    ncclUniqueId id;
    ncclConfig_t pool_config = NCCL_CONFIG_INITIALIZER;
    dcp_nccl_options set_options;
    cudaStream_t stream;
    dcp_plan *plan = NULL;
    dcp_reroute *moves = NULL;
    dcp_attention_params params;
    int32_t holders[SAMPLES], s, k, K, t, max_cp = 1;
    void **samples[TENSORS], **micro[TENSORS];
    int64_t *rows;
    size_t scratch_bytes = 0;
    void *scratch = NULL;
    errors worst = {0, 0, 0, 0, 0};
    dcp_config config;
    int failed, *d_failed;
    g_rank = rank;
    if (rank < 0 || rank >= ranks) die("RANK and WORLD_SIZE", "need 0 <= RANK < WORLD_SIZE");
    {
        int devices = 0;
        CUDA(cudaGetDeviceCount(&devices));
        CUDA(cudaSetDevice(devices > 0 ? local_rank % devices : 0));
    }
    CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    id = exchange_id(id_path, rank);
    pool_config.blocking = env_int("DCP_NONBLOCKING", 0) ? 0 : 1;
    {
        ncclResult_t started = ncclCommInitRankConfig(&g_pool, ranks, id, rank, &pool_config);
        nccl_settle(g_pool, started, "ncclCommInitRankConfig");
    }
    if (rank == 0) unlink(id_path); /* every rank has joined: the file has served */
    if (env_int("DCP_MEASURE_SPLIT_MEMORY", 0)) {
        measure_split_memory(rank, ranks, stream);
        NCCL(ncclCommDestroy(g_pool));
        return 0;
    }
    config = plan_config_from_env(ranks);
    memset(&set_options, 0, sizeof set_options);
    set_options.config = &pool_config; /* the set's communicator gets the pool's config */
    set_options.plan_config = &config; /* its groups: the plan's sizes */
    set_options.timeout_ms = env_int("DCP_TIMEOUT_MS", 0);
    if (dcp_nccl_set_create(g_pool, &set_options, &g_set, &err) != DCP_OK) {
        if (err.status == DCP_ERROR_NCCL || err.status == DCP_ERROR_CUDA)
            g_pool = NULL; /* a failed split: the set aborted the pool (NCCL raised its flag) */
        die("dcp_nccl_set_create", err.message);
    }
    max_cp = g_set->max_cp;

    /* plan on rank 0, broadcast over the set's ranks, and check it equals this rank's plan */
    {
        dcp_lognormal dist;
        int64_t lengths[SAMPLES];
        int32_t sizes[DCP_CP_SIZE_LIST_CAPACITY], counts[DCP_CP_SIZE_LIST_CAPACITY], n = 0, i;
        dcp_plan *mine = NULL;
        size_t a = 0, b = 0;
        dist.mean = 0.4 * (double)config.max_tokens_per_rank * max_cp;
        dist.sigma = 1.0;
        dist.min_length = 16;
        dist.max_length = config.max_tokens_per_rank * max_cp;
        TRY(dcp_lengths_lognormal(&dist, SEED, lengths, SAMPLES, &err));
        TRY(dcp_plan_create(&config, lengths, SAMPLES, &mine, &err));
        TRY(dcp_nccl_broadcast_plan(g_set, NULL, 0, rank == 0 ? mine : NULL, &plan, stream,
                                    &err));
        TRY(dcp_plan_serialize(mine, NULL, 0, &a, &err));
        TRY(dcp_plan_serialize(plan, NULL, 0, &b, &err));
        if (a != b) die("broadcast plan", "differs from the local plan");
        (void)dcp_plan_cp_histogram(plan, sizes, counts, DCP_CP_SIZE_LIST_CAPACITY, &n, NULL);
        if (rank == 0) {
            printf("%d ranks (max cp %d, sizes %s), %d samples, %d microbatches, %d groups; "
                   "samples by group size:",
                   ranks, max_cp, dcp_cp_sizes_name(config.cp_sizes), SAMPLES,
                   plan->num_microbatches, plan->num_groups);
            for (i = 0; i < n && i < DCP_CP_SIZE_LIST_CAPACITY; i++)
                printf(" %d x%d", (int)sizes[i], (int)counts[i]);
            printf("\n");
        }
        dcp_plan_destroy(mine);
    }
    TRY(dcp_nccl_plan_agree(g_set, plan, stream, &err)); /* before the step's first reroute */
    if (rank == env_int("DCP_EXIT_RANK", -1)) {
        fprintf(stderr, "rank %d: exiting mid-step (DCP_EXIT_RANK)\n", rank);
        _exit(3); /* as if killed: no cleanup, no abort */
    }
    K = plan->num_microbatches;

    /* the data loader's placement, then the reroute of q, k, v and dout */
    for (s = 0; s < SAMPLES; s++) holders[s] = s % ranks;
    TRY(dcp_reroute_create(plan, holders, rank, &moves, &err));
    rows = (int64_t *)malloc((size_t)K * sizeof(int64_t));
    for (k = 0; k < K; k++) {
        dcp_rank_group where;
        TRY(dcp_plan_rank_group(plan, rank, k, &where, &err));
        rows[k] = where.local_rows;
    }
    for (t = 0; t < TENSORS; t++) { /* every upload (host-synchronous) before any traffic */
        samples[t] = (void **)calloc(SAMPLES, sizeof(void *));
        micro[t] = (void **)calloc((size_t)K, sizeof(void *));
        for (s = 0; s < SAMPLES; s++)
            if (holders[s] == rank) {
                samples[t][s] = device_alloc((size_t)(plan->sample_lengths[s] * kWidth[t]) * 2);
                upload_rows(t, s, 0, plan->sample_lengths[s], samples[t][s], stream);
            }
        for (k = 0; k < K; k++) micro[t][k] = device_alloc((size_t)(rows[k] * kWidth[t]) * 2);
    }
    for (t = 0; t < TENSORS; t++) {
        dcp_nccl_reroute_buffers buffers;
        memset(&buffers, 0, sizeof buffers);
        buffers.element_size = (size_t)kWidth[t] * 2;
        buffers.num_samples = SAMPLES;
        buffers.sample_data = samples[t];
        buffers.sample_rows = plan->sample_lengths;
        buffers.num_microbatches = K;
        buffers.microbatch_data = micro[t];
        buffers.microbatch_rows = rows;
        TRY(dcp_nccl_reroute_execute(g_set, moves, &buffers, stream, &err));
    }
    TRY(dcp_nccl_set_wait(g_set, stream, &err)); /* a peer that died shows here, in time */

    memset(&params, 0, sizeof params);
    params.num_heads = HEADS;
    params.num_kv_heads = KV_HEADS;
    params.head_dim = HEAD_DIM;
    params.causal = 1;
    for (k = 0; k < K; k++) {
        dcp_rank_view *view = NULL;
        dcp_nccl_binding group;
        dcp_cuda_layout layout;
        int32_t *d_cu, *d_cu_padded;
        void *ring[5];
        float *lse;
        size_t forward_bytes = 0, backward_bytes = 0;
        TRY(dcp_rank_view_create(plan, rank, k, &view, &err));
        TRY(dcp_nccl_set_switch(g_set, view, &group, &err)); /* this microbatch's communicator */
        if (view->idle) {
            dcp_rank_view_destroy(view);
            continue;
        }
        d_cu = (int32_t *)device_alloc((size_t)(view->num_samples + 1) * 4);
        d_cu_padded = (int32_t *)device_alloc((size_t)(view->num_samples + 1) * 4);
        CUDA(cudaMemcpyAsync(d_cu, view->cu_seqlens, (size_t)(view->num_samples + 1) * 4,
                             cudaMemcpyHostToDevice, stream));
        CUDA(cudaMemcpyAsync(d_cu_padded, view->cu_seqlens_padded,
                             (size_t)(view->num_samples + 1) * 4, cudaMemcpyHostToDevice,
                             stream));
        layout.thd.num_sequences = view->num_samples;
        layout.thd.cu_seqlens = d_cu;
        layout.thd.cu_seqlens_padded = d_cu_padded;
        layout.thd.cp = view->cp;
        layout.local_rows = view->local_tokens;
        layout.max_seqlen_padded = view->max_seqlen;
        TRY(dcp_nccl_ring_scratch_size(&params, &layout, DCP_DTYPE_BFLOAT16, DCP_RING_FORWARD,
                                       &forward_bytes, &err));
        TRY(dcp_nccl_ring_scratch_size(&params, &layout, DCP_DTYPE_BFLOAT16, DCP_RING_BACKWARD,
                                       &backward_bytes, &err));
        if (forward_bytes > scratch_bytes || backward_bytes > scratch_bytes) {
            /* grows to the largest microbatch once; a trainer sizes it for M up front */
            if (scratch) CUDA(cudaFree(scratch));
            scratch_bytes = forward_bytes > backward_bytes ? forward_bytes : backward_bytes;
            scratch = device_alloc(scratch_bytes);
        }
        ring[0] = device_alloc((size_t)(view->local_tokens * kWidth[T_Q]) * 2);
        ring[1] = NULL;
        for (t = 0; t < 3; t++)
            ring[2 + t] = device_alloc((size_t)(view->local_tokens * kWidth[t]) * 2);
        lse = (float *)device_alloc((size_t)(view->local_tokens * HEADS) * 4);
        TRY(dcp_nccl_ring_forward(g_set, &group, &params, &layout, DCP_DTYPE_BFLOAT16,
                                  micro[T_Q][k], micro[T_K][k], micro[T_V][k], ring[0], lse,
                                  scratch, scratch_bytes, stream, &err));
        TRY(dcp_nccl_ring_backward(g_set, &group, &params, &layout, DCP_DTYPE_BFLOAT16,
                                   micro[T_Q][k], micro[T_K][k], micro[T_V][k], ring[0],
                                   micro[T_DOUT][k], lse, ring[2], ring[3], ring[4], 1, scratch,
                                   scratch_bytes, stream, &err));
        TRY(dcp_nccl_set_wait(g_set, stream, &err)); /* polled: a dead peer times out */
        if (env_int("DCP_TIME_RING", 0) && group.cp > 1)
            time_ring_backward(&group, &params, &layout, micro[T_Q][k], micro[T_K][k],
                               micro[T_V][k], ring[0], micro[T_DOUT][k], lse, &ring[2], scratch,
                               scratch_bytes, k, stream);
        check_group(view, &params, ring, lse, stream, &worst);
        CUDA(cudaFree(ring[0]));
        for (t = 2; t < 5; t++) CUDA(cudaFree(ring[t]));
        CUDA(cudaFree(lse));
        CUDA(cudaFree(d_cu));
        CUDA(cudaFree(d_cu_padded));
        dcp_rank_view_destroy(view);
    }

    if (max_cp > 1) { /* evaluation at a fixed CP size, then back to the plan's groups */
        eval_check check;
        dcp_nccl_binding before, after;
        check.stream = stream, check.mismatches = 0;
        dcp_nccl_set_current(g_set, &before);
        TRY(dcp_nccl_override_run(g_set, max_cp < 4 ? max_cp : 4, eval_in_override, &check,
                                  &err));
        dcp_nccl_set_current(g_set, &after);
        if (check.mismatches || memcmp(&before, &after, sizeof before) != 0)
            die("evaluation override", "wrong group data or binding not restored");
        if (rank == 0) printf("evaluation override at cp %d: ok\n", max_cp < 4 ? max_cp : 4);
    }

    failed = !(worst.out <= FORWARD_TOLERANCE && worst.lse <= FORWARD_TOLERANCE &&
               worst.dq <= BACKWARD_TOLERANCE && worst.dk <= BACKWARD_TOLERANCE &&
               worst.dv <= BACKWARD_TOLERANCE);
    printf("rank %d: max error against one GPU: out %.3g lse %.3g dq %.3g dk %.3g dv %.3g: %s\n",
           rank, worst.out, worst.lse, worst.dq, worst.dk, worst.dv, failed ? "FAIL" : "ok");
    /* every rank learns whether any failed */
    d_failed = (int *)device_alloc(sizeof(int));
    CUDA(cudaMemcpyAsync(d_failed, &failed, sizeof(int), cudaMemcpyHostToDevice, stream));
    nccl_settle(g_pool, ncclAllReduce(d_failed, d_failed, 1, ncclInt32, ncclMax, g_pool, stream),
                "ncclAllReduce");
    TRY(dcp_nccl_set_wait(g_set, stream, &err));
    CUDA(cudaMemcpyAsync(&failed, d_failed, sizeof(int), cudaMemcpyDeviceToHost, stream));
    CUDA(cudaStreamSynchronize(stream));
    if (rank == 0) printf("%s\n", failed ? "FAILED" : "all ranks match the single-GPU results");

    for (t = 0; t < TENSORS; t++) {
        for (s = 0; s < SAMPLES; s++)
            if (samples[t][s]) CUDA(cudaFree(samples[t][s]));
        for (k = 0; k < K; k++) CUDA(cudaFree(micro[t][k]));
        free(samples[t]), free(micro[t]);
    }
    if (scratch) CUDA(cudaFree(scratch));
    CUDA(cudaFree(d_failed));
    free(rows);
    dcp_reroute_destroy(moves);
    dcp_plan_destroy(plan);
    { /* the set's communicator before the pool, which a failure leaves alone unless the
         set's communicator shares its abort flag (set->pool NULL then) */
        const int pool_gone = g_set->pool == NULL;
        const dcp_status destroyed = dcp_nccl_set_destroy(g_set, &err);
        g_set = NULL;
        if (pool_gone) g_pool = NULL;
        if (destroyed != DCP_OK) die("dcp_nccl_set_destroy", err.message);
    }
    nccl_settle(g_pool, ncclCommFinalize(g_pool), "ncclCommFinalize");
    NCCL(ncclCommDestroy(g_pool));
    CUDA(cudaStreamDestroy(stream));
    return failed ? 1 : 0;
}

#ifndef RING_NO_MAIN
int main(int argc, char **argv)
{
    const char *id_path = argc > 1 ? argv[1]
                          : getenv("DCP_NCCL_ID_FILE") ? getenv("DCP_NCCL_ID_FILE")
                                                       : "/tmp/dcp_nccl_id";
    return ring_rank_main(env_int("RANK", 0), env_int("WORLD_SIZE", 1), env_int("LOCAL_RANK", 0),
                          id_path);
}
#endif
