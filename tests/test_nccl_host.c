/* dcp_nccl.h's own code on a host transport: tests/fake_nccl stands in for NCCL and the CUDA
   runtime (selected by the include path), the few dcp_cuda entry points the layer calls are
   replaced below by the CPU references of dcp.h (float32 only), and every simulated rank is a
   thread. The tests run 2 to 512 ranks: set creation (one communicator of its own a rank),
   the per-microbatch switch and the evaluation override, plan agreement and broadcast (a bad
   argument on one rank fails it alone), reroute against the plan's views, ring attention
   forward and backward against dcp_ring_attention_forward / _backward at any group size and
   position (blocking and non-blocking communicators; the dK/dV hop overlapped; at most four
   ring peers a rank across sizes, counted by the transport), a peer that dies mid-step (the
   others return an error within the timeout), a split that fails (NCCL writes its child with
   the error and raises the pool's abort flag), a set shrunk without a dead rank, a group's own
   communicator on request, and a failure injected at every CUDA/NCCL call of a step (every
   rank returns, its streams drain, a failed rank's set is aborted, never the pool: every rank
   then makes a new set from it and trains on), the head-parallel all-to-all (powers of two,
   and groups of 3, 6, 12 where the heads divide) and the MTP roll against their CPU
   references (each also with a fault at every call), and per-stage field reroutes whose bytes
   on the wire (counted by the transport) are exactly the stage's. After every clean run each
   send was received and no protocol rule was broken.
   Built with ASan/UBSan by make test, and also as C++, where it checks the RAII override
   guard with exceptions. */
#define _POSIX_C_SOURCE 200809L
#include "fake_nccl/fake_runtime.c"

#define DCP_NCCL_FAULT_HOOK(call) fake_fault_hook(call)

/* DCP_MALLOC / DCP_FREE of a user who replaces the allocator at compile time: every block is
   tagged, so a free of memory that did not come from DCP_MALLOC (the layer falling back to
   plain malloc, as dcp_nccl.h once did) is counted instead of corrupting the heap. */
#define COUNTED_TAG 0x6463704d616c6c63ull /* "dcpMallc" */
#define COUNTED_HEADER 16                 /* keeps the caller's block 16-byte aligned */
static pthread_mutex_t counted_lock = PTHREAD_MUTEX_INITIALIZER;
static long counted_allocs, counted_frees, counted_foreign_frees;
static void *counted_malloc(size_t size)
{
    unsigned char *block = (unsigned char *)malloc(size + COUNTED_HEADER);
    uint64_t tag = COUNTED_TAG;
    if (!block) return NULL;
    memcpy(block, &tag, sizeof tag);
    pthread_mutex_lock(&counted_lock);
    counted_allocs++;
    pthread_mutex_unlock(&counted_lock);
    return block + COUNTED_HEADER;
}
static void counted_free(void *ptr)
{
    unsigned char *block = (unsigned char *)ptr - COUNTED_HEADER;
    uint64_t tag;
    memcpy(&tag, block, sizeof tag);
    pthread_mutex_lock(&counted_lock);
    if (tag == COUNTED_TAG) counted_frees++;
    else counted_foreign_frees++;
    pthread_mutex_unlock(&counted_lock);
    if (tag == COUNTED_TAG) {
        memset(block, 0, sizeof tag);
        free(block);
    } /* a foreign block is leaked: freeing it here would be the bug under test */
}
#define DCP_MALLOC(size) counted_malloc(size)
#define DCP_FREE(ptr) counted_free(ptr)
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#define DCP_NCCL_IMPLEMENTATION
#include "../dcp_nccl.h"
#include "test.h"
#include "mtp_pack.h"
#include "quarantine.h"

#define HOST_SEED 16016
/* Timeouts of the sets: long where nothing fails, short where a test waits for one. */
#define CLEAN_TIMEOUT_MS 60000
#define FAILURE_TIMEOUT_MS 200
/* Slack on top of a timeout for the test's own bound (a loaded 2-core machine, ASan). */
#define TIMEOUT_SLACK_MS 20000.0
#define RANK_STACK_BYTES ((size_t)1 << 20)
/* float32 ring against the float32 CPU ring: the same steps and merges */
#define RING_TOLERANCE 1e-5

/* ------------------------------------------------------------- kernel stand-ins (float32) */

typedef enum { CALL_FORWARD, CALL_BACKWARD, CALL_ACC_INIT, CALL_ACC_MERGE, CALL_ACC_FINALIZE } call_kind;

typedef struct kernel_call {
    call_kind kind;
    dcp_attention_params params;
    dcp_thd_layout thd;
    dcp_attention_view view;
    dcp_half half;
    int32_t rank;
    const float *q, *k, *v, *out, *dout, *lse;
    float *o, *l, *dq, *dk, *dv;
} kernel_call;

static int kernel_run(void *arg)
{
    const kernel_call *c = (const kernel_call *)arg;
    switch (c->kind) {
    case CALL_FORWARD:
        return dcp_attention_forward(&c->params, &c->thd, &c->view, c->q, c->k, c->v, c->o, c->l,
                                     NULL) != DCP_OK;
    case CALL_BACKWARD:
        return dcp_attention_backward(&c->params, &c->thd, &c->view, c->q, c->k, c->v, c->out,
                                      c->dout, c->lse, c->dq, c->dk, c->dv, NULL) != DCP_OK;
    case CALL_ACC_INIT:
        return dcp_attention_acc_init(&c->params, &c->thd, c->o, c->l, NULL) != DCP_OK;
    case CALL_ACC_MERGE:
        return dcp_attention_acc_merge(&c->params, &c->thd, c->half, c->out, c->lse, c->o, c->l,
                                       NULL) != DCP_OK;
    case CALL_ACC_FINALIZE:
        return dcp_attention_acc_finalize(&c->params, &c->thd, c->rank, c->out, c->lse, c->o,
                                          c->l, NULL) != DCP_OK;
    }
    return 1;
}

/* Checks what the real entry point checks at launch, then enqueues the CPU reference. */
static dcp_status kernel_enqueue(kernel_call *c, const dcp_attention_params *params,
                                 const dcp_cuda_layout *layout, void *stream, dcp_error *error)
{
    dcp_status status = dcp_attention_params_resolve(params, &c->params, error);
    if (status == DCP_OK && !layout)
        status = dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "layout must not be NULL");
    if (status != DCP_OK) {
        free(c);
        return status;
    }
    c->thd = layout->thd;
    if (fake_enqueue_host((cudaStream_t)stream, kernel_run, c) != cudaSuccess)
        return dcp_error_set(error, DCP_ERROR_CUDA, "fake launch refused (NULL stream)");
    return DCP_OK;
}

static kernel_call *kernel_new(call_kind kind)
{
    kernel_call *c = (kernel_call *)calloc(1, sizeof *c);
    c->kind = kind;
    return c;
}

static dcp_status float32_only(dcp_dtype a, dcp_dtype b, dcp_error *error)
{
    if (a == DCP_DTYPE_FLOAT32 && b == DCP_DTYPE_FLOAT32) return DCP_OK;
    return dcp_error_set(error, DCP_ERROR_UNSUPPORTED, "the host transport runs float32 only");
}

dcp_status dcp_cuda_attention_workspace_size(const dcp_attention_params *params,
                                             const dcp_cuda_layout *layout, size_t *bytes,
                                             dcp_error *error)
{
    dcp_attention_params resolved;
    if (!layout || !bytes)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "layout and bytes");
    *bytes = 0; /* the references need none */
    return dcp_attention_params_resolve(params, &resolved, error);
}

dcp_status dcp_cuda_attention_forward(const dcp_attention_params *params,
                                      const dcp_cuda_layout *layout,
                                      const dcp_attention_view *view, dcp_dtype dtype,
                                      const void *q, const void *k, const void *v,
                                      dcp_dtype out_dtype, void *out, float *lse, void *workspace,
                                      size_t workspace_bytes, void *stream, dcp_error *error)
{
    kernel_call *c;
    dcp_status status = float32_only(dtype, out_dtype, error);
    (void)workspace, (void)workspace_bytes;
    if (status != DCP_OK) return status;
    c = kernel_new(CALL_FORWARD);
    if (view) c->view = *view;
    c->q = (const float *)q, c->k = (const float *)k, c->v = (const float *)v;
    c->o = (float *)out, c->l = lse;
    return kernel_enqueue(c, params, layout, stream, error);
}

dcp_status dcp_cuda_attention_backward(const dcp_attention_params *params,
                                       const dcp_cuda_layout *layout,
                                       const dcp_attention_view *view, dcp_dtype dtype,
                                       const void *q, const void *k, const void *v,
                                       const void *out, const void *dout, const float *lse,
                                       float *dq, float *dk, float *dv, int32_t deterministic,
                                       void *workspace, size_t workspace_bytes, void *stream,
                                       dcp_error *error)
{
    kernel_call *c;
    dcp_status status = float32_only(dtype, DCP_DTYPE_FLOAT32, error);
    (void)deterministic, (void)workspace, (void)workspace_bytes;
    if (status != DCP_OK) return status;
    c = kernel_new(CALL_BACKWARD);
    if (view) c->view = *view;
    c->q = (const float *)q, c->k = (const float *)k, c->v = (const float *)v;
    c->out = (const float *)out, c->dout = (const float *)dout, c->lse = lse;
    c->dq = dq, c->dk = dk, c->dv = dv;
    return kernel_enqueue(c, params, layout, stream, error);
}

dcp_status dcp_cuda_acc_init(const dcp_attention_params *params, const dcp_cuda_layout *layout,
                             float *acc_out, float *acc_lse, void *stream, dcp_error *error)
{
    kernel_call *c = kernel_new(CALL_ACC_INIT);
    c->o = acc_out, c->l = acc_lse;
    return kernel_enqueue(c, params, layout, stream, error);
}

dcp_status dcp_cuda_acc_merge(const dcp_attention_params *params, const dcp_cuda_layout *layout,
                              dcp_half half, const float *out, const float *lse, float *acc_out,
                              float *acc_lse, void *stream, dcp_error *error)
{
    kernel_call *c = kernel_new(CALL_ACC_MERGE);
    c->half = half, c->out = out, c->lse = lse, c->o = acc_out, c->l = acc_lse;
    return kernel_enqueue(c, params, layout, stream, error);
}

dcp_status dcp_cuda_acc_finalize(const dcp_attention_params *params,
                                 const dcp_cuda_layout *layout, int32_t rank,
                                 const float *acc_out, const float *acc_lse, dcp_dtype out_dtype,
                                 void *out, float *lse, void *stream, dcp_error *error)
{
    kernel_call *c;
    dcp_status status = float32_only(out_dtype, DCP_DTYPE_FLOAT32, error);
    if (status != DCP_OK) return status;
    c = kernel_new(CALL_ACC_FINALIZE);
    c->rank = rank, c->out = acc_out, c->lse = acc_lse, c->o = (float *)out, c->l = lse;
    return kernel_enqueue(c, params, layout, stream, error);
}

dcp_status dcp_cuda_convert(const float *in, dcp_dtype dtype, void *out, int64_t count,
                            void *stream, dcp_error *error)
{
    dcp_status status = float32_only(dtype, DCP_DTYPE_FLOAT32, error);
    if (status != DCP_OK) return status;
    if (count < 0) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "count %lld", (long long)count);
    if (cudaMemcpyAsync(out, in, (size_t)count * sizeof(float), cudaMemcpyDeviceToDevice,
                        (cudaStream_t)stream) != cudaSuccess)
        return dcp_error_set(error, DCP_ERROR_CUDA, "fake copy refused");
    return DCP_OK;
}

typedef struct add_call {
    float *acc;
    const float *x;
    int64_t count;
} add_call;

static int add_run(void *arg)
{
    const add_call *c = (const add_call *)arg;
    int64_t i;
    for (i = 0; i < c->count; i++) c->acc[i] += c->x[i];
    return 0;
}

dcp_status dcp_cuda_add_float32(float *acc, const float *x, int64_t count, void *stream,
                                dcp_error *error)
{
    add_call *c;
    if (count < 0 || (count > 0 && (!acc || !x)))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "add: count %lld",
                             (long long)count);
    c = (add_call *)malloc(sizeof *c);
    c->acc = acc, c->x = x, c->count = count;
    if (fake_enqueue_host((cudaStream_t)stream, add_run, c) != cudaSuccess)
        return dcp_error_set(error, DCP_ERROR_CUDA, "fake launch refused (NULL stream)");
    return DCP_OK;
}

/* ------------------------------------------------------------------------ rank threads */

/* What one simulated rank reports back; the main thread asserts on it. */
typedef struct rank_ctx {
    int rank, ranks;
    ncclComm_t pool;
    const void *test;
    int failures;
    dcp_status status;     /* the test's chosen status to report */
    char message[DCP_ERROR_MESSAGE_CAPACITY];
    double elapsed_ms;
    long calls;            /* hooked calls made (fault injection) */
} rank_ctx;

#define RANK_CHECK(ctx, condition)                                                             \
    do {                                                                                       \
        if (!(condition)) {                                                                    \
            printf("  %s:%d: rank %d: %s\n", __FILE__, __LINE__, (ctx)->rank, #condition);     \
            (ctx)->failures++;                                                                 \
        }                                                                                      \
    } while (0)

typedef void (*rank_fn)(rank_ctx *ctx);
typedef struct rank_start {
    rank_ctx *ctx;
    rank_fn fn;
} rank_start;

static void *rank_thread(void *arg)
{
    rank_start *start = (rank_start *)arg;
    fake_bind_rank(start->ctx->rank);
    start->fn(start->ctx);
    if (fake_group_depth != 0) {
        printf("  rank %d left an NCCL group open\n", start->ctx->rank);
        start->ctx->failures++;
    }
    return NULL;
}

/* The pools' config: NCCL's defaults but for blocking (1 or 0) and splitShare. */
static ncclConfig_t pool_config(int blocking, int split_share)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = blocking, config.splitShare = split_share;
    return config;
}

/* Runs fn on `ranks` threads over a fresh job whose pools have config; returns the summed
   failures. The job stays for the caller to inspect (fake_job_destroy). */
static int run_ranks_with(int ranks, const ncclConfig_t *config, rank_fn fn, const void *test,
                          rank_ctx *ctx)
{
    ncclComm_t *pools = (ncclComm_t *)calloc((size_t)ranks, sizeof(ncclComm_t));
    pthread_t *threads = (pthread_t *)calloc((size_t)ranks, sizeof(pthread_t));
    rank_start *starts = (rank_start *)calloc((size_t)ranks, sizeof(rank_start));
    pthread_attr_t attr;
    int r, failures = 0;
    fake_job_create(ranks, config, pools);
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, RANK_STACK_BYTES);
    for (r = 0; r < ranks; r++) {
        memset(&ctx[r], 0, sizeof ctx[r]);
        ctx[r].rank = r, ctx[r].ranks = ranks, ctx[r].pool = pools[r], ctx[r].test = test;
        starts[r].ctx = &ctx[r], starts[r].fn = fn;
        if (pthread_create(&threads[r], &attr, rank_thread, &starts[r]) != 0) {
            printf("  cannot start rank thread %d\n", r);
            exit(1);
        }
    }
    for (r = 0; r < ranks; r++) pthread_join(threads[r], NULL);
    pthread_attr_destroy(&attr);
    for (r = 0; r < ranks; r++) failures += ctx[r].failures;
    free(pools), free(threads), free(starts);
    return failures;
}

/* ... with pools of NCCL's default config, blocking or not. */
static int run_ranks(int ranks, int blocking, rank_fn fn, const void *test, rank_ctx *ctx)
{
    const ncclConfig_t config = pool_config(blocking, NCCL_CONFIG_UNDEF_INT);
    return run_ranks_with(ranks, &config, fn, test, ctx);
}

/* The pool is each rank's to destroy after its set (a real job's ncclCommDestroy), unless
   the set aborted it. */
static void pool_destroy(rank_ctx *ctx, int aborted)
{
    if (!aborted) (void)ncclCommDestroy(ctx->pool);
}

static dcp_nccl_options options_with(int64_t timeout_ms, int32_t max_cp,
                                     const ncclConfig_t *config)
{
    dcp_nccl_options o;
    memset(&o, 0, sizeof o);
    o.timeout_ms = timeout_ms, o.max_cp = max_cp, o.config = config;
    return o;
}

/* Polls a stream to its end within the test's bound: 1 when it drained. */
static int stream_drains_within(cudaStream_t stream, double ms);
static int stream_drains(cudaStream_t stream)
{
    return stream_drains_within(stream, TIMEOUT_SLACK_MS);
}

/* Largest |a - b| over n values, relative to max(1, max |b|); equal infinities count 0 and a
   NaN counts as infinite error. */
static double relative_error(const float *a, const float *b, int64_t n)
{
    double worst = 0.0, scale = 1.0;
    int64_t i;
    for (i = 0; i < n; i++) {
        double e;
        if (isinf(b[i]) && a[i] == b[i]) continue;
        if (isfinite(b[i]) && fabs(b[i]) > scale) scale = fabs(b[i]);
        e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
    return worst / scale;
}

static int job_clean(void)
{
    const char *text;
    int violations = fake_violations(&text);
    long undelivered = fake_undelivered();
    if (violations) printf("  transport: %d violations, first: %s\n", violations, text);
    if (undelivered) printf("  transport: %ld messages never received\n", undelivered);
    return violations == 0 && undelivered == 0;
}

/* ------------------------------------------------- the transport itself: as strict as NCCL
   One test per way the former fake was more lenient than NCCL (tests/fake_nccl/nccl.h lists
   what the transport now holds its callers to); each checks the strict behaviour directly on
   two or three ranks. DELAY: how late a rank comes; EARLY: when the others look, well before
   it; HANG: the bound past which the transport reports a wait NCCL would make forever. */
#define TRANSPORT_DELAY_MS 300.0
#define TRANSPORT_EARLY_MS 100.0
#define TRANSPORT_HANG_MS 300.0


/* Polls a stream for at most ms: 1 when it drained. */
static int stream_drains_within(cudaStream_t stream, double ms)
{
    const double start = fake_now_ms();
    while (cudaStreamQuery(stream) == cudaErrorNotReady)
        if (fake_now_ms() - start > ms) return 0;
    return 1;
}

/* Polls comm's asynchronous state until it leaves ncclInProgress (within the test's bound). */
static ncclResult_t settled(ncclComm_t comm)
{
    const double start = fake_now_ms();
    ncclResult_t state = ncclInProgress;
    while (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclInProgress &&
           fake_now_ms() - start < TIMEOUT_SLACK_MS)
        fake_sleep_ms(1.0);
    return state;
}

static int32_t *device_int(int32_t value)
{
    int32_t *p = NULL;
    cudaMalloc((void **)&p, sizeof *p);
    if (p) *p = value; /* fake device memory is the host's */
    return p;
}

/* One fused exchange with peer on comm (a send and a receive in one group), checked: it also
   connects the pair, so that later first-use waits stay out of a test. */
static void exchange(rank_ctx *ctx, ncclComm_t comm, int me, int peer, cudaStream_t stream)
{
    int32_t *mine = device_int(1000 + me), *theirs = device_int(-1);
    RANK_CHECK(ctx, ncclGroupStart() == ncclSuccess);
    RANK_CHECK(ctx, ncclSend(mine, 1, ncclInt32, peer, comm, stream) == ncclSuccess);
    RANK_CHECK(ctx, ncclRecv(theirs, 1, ncclInt32, peer, comm, stream) == ncclSuccess);
    RANK_CHECK(ctx, ncclGroupEnd() == ncclSuccess);
    RANK_CHECK(ctx, stream_drains(stream) && *theirs == 1000 + peer);
    cudaFree(mine), cudaFree(theirs);
}

typedef struct transport_test {
    pthread_barrier_t barrier; /* first member: barrier() */
    int grouped;               /* abort test: the aborts in one group */
} transport_test;

/* Waits for the other ranks of a test whose struct starts with its barrier. */
static void barrier(rank_ctx *ctx) { pthread_barrier_wait((pthread_barrier_t *)ctx->test); }

/* Runs fn on `ranks` ranks whose pools have config, with a barrier for them. */
static void transport_run(int ranks, const ncclConfig_t *config, rank_fn fn, int grouped)
{
    static rank_ctx ctx[3];
    transport_test t;
    pthread_barrier_init(&t.barrier, NULL, (unsigned)ranks);
    t.grouped = grouped;
    CHECK_EQ(run_ranks_with(ranks, config, fn, &t, ctx), 0);
    pthread_barrier_destroy(&t.barrier);
}

/* 1. A send completes only when its receive takes it: fused, two ranks exchange; unfused (both
   send first, then receive, each call a group of its own) they deadlock, and the transport
   reports the stuck send after its bound. */
static void rendezvous_rank(rank_ctx *ctx)
{
    const int peer = 1 - ctx->rank;
    int32_t *mine = device_int(ctx->rank), *theirs = device_int(-1);
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    exchange(ctx, ctx->pool, ctx->rank, peer, stream);
    RANK_CHECK(ctx, ncclSend(mine, 1, ncclInt32, peer, ctx->pool, stream) == ncclSuccess);
    RANK_CHECK(ctx, ncclRecv(theirs, 1, ncclInt32, peer, ctx->pool, stream) == ncclSuccess);
    RANK_CHECK(ctx, !stream_drains_within(stream, 3 * TRANSPORT_HANG_MS));
    RANK_CHECK(ctx, *theirs == -1);
    (void)ncclCommAbort(ctx->pool); /* the stuck kernels quit */
    RANK_CHECK(ctx, stream_drains(stream));
    cudaStreamDestroy(stream);
    cudaFree(mine), cudaFree(theirs);
}

static void transport_sends_rendezvous(void)
{
    const ncclConfig_t config = pool_config(1, 0);
    fake_set_hang_bound(TRANSPORT_HANG_MS);
    transport_run(2, &config, rendezvous_rank, 0);
    CHECK(fake_violation_count(FAKE_STUCK) >= 1);
    CHECK_EQ(fake_violation_count(FAKE_PROTOCOL) + fake_violation_count(FAKE_HANG), 0);
    fake_set_hang_bound(FAKE_DEFAULT_HANG_MS);
    fake_job_destroy();
}

/* 2. Blocking communicators block the host: ncclCommSplit until every rank of the parent has
   called it, a first use of a peer until the peer connects, ncclCommFinalize until the
   communicator's queued work is done. The late rank comes DELAY after the others. */
static void blocking_rank(rank_ctx *ctx)
{
    const int r = ctx->rank;
    ncclComm_t child = NULL;
    int32_t *buffer = device_int(7 * r);
    cudaStream_t stream;
    double start;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (r == 2) fake_sleep_ms(TRANSPORT_DELAY_MS);
    start = fake_now_ms();
    RANK_CHECK(ctx, ncclCommSplit(ctx->pool, 0, r, &child, NULL) == ncclSuccess && child);
    if (r != 2) RANK_CHECK(ctx, fake_now_ms() - start > TRANSPORT_DELAY_MS / 2);
    barrier(ctx);
    if (r == 1) fake_sleep_ms(TRANSPORT_DELAY_MS); /* the first use: rank 0 waits for rank 1 */
    start = fake_now_ms();
    if (r < 2) exchange(ctx, child, r, 1 - r, stream);
    if (r == 0) RANK_CHECK(ctx, fake_now_ms() - start > TRANSPORT_DELAY_MS / 2);
    barrier(ctx);
    if (r == 0) { /* finalize waits for the receive, whose send comes late */
        RANK_CHECK(ctx, ncclRecv(buffer, 1, ncclInt32, 1, child, stream) == ncclSuccess);
        start = fake_now_ms();
        RANK_CHECK(ctx, ncclCommFinalize(child) == ncclSuccess);
        RANK_CHECK(ctx, fake_now_ms() - start > TRANSPORT_DELAY_MS / 2 && *buffer == 7);
    } else {
        if (r == 1) {
            fake_sleep_ms(TRANSPORT_DELAY_MS);
            RANK_CHECK(ctx, ncclSend(buffer, 1, ncclInt32, 0, child, stream) == ncclSuccess);
        }
        RANK_CHECK(ctx, stream_drains(stream) && ncclCommFinalize(child) == ncclSuccess);
    }
    RANK_CHECK(ctx, ncclCommDestroy(child) == ncclSuccess);
    RANK_CHECK(ctx, ncclCommDestroy(ctx->pool) == ncclSuccess);
    cudaStreamDestroy(stream);
    cudaFree(buffer);
}

static void transport_blocking_calls_wait_for_peers(void)
{
    const ncclConfig_t config = pool_config(1, 0);
    transport_run(3, &config, blocking_rank, 0);
    CHECK(job_clean());
    fake_job_destroy();
}

/* 3. Non-blocking: a split answers ncclInProgress, its child stays NULL until every rank has
   come (the background thread writes it then), its progress shows on the parent, and the
   parent refuses other work meanwhile (the one deliberate violation); finalize answers
   ncclInProgress and is polled. */
static void nonblocking_rank(rank_ctx *ctx)
{
    ncclComm_t child = NULL;
    ncclResult_t state = ncclSuccess;
    int count = 0;
    if (ctx->rank == 1) fake_sleep_ms(TRANSPORT_DELAY_MS);
    RANK_CHECK(ctx, ncclCommSplit(ctx->pool, 0, ctx->rank, &child, NULL) == ncclInProgress);
    if (ctx->rank == 0) {
        fake_sleep_ms(TRANSPORT_EARLY_MS);
        RANK_CHECK(ctx, child == NULL);
        RANK_CHECK(ctx, ncclCommGetAsyncError(ctx->pool, &state) == ncclSuccess &&
                            state == ncclInProgress);
        RANK_CHECK(ctx, ncclCommFinalize(ctx->pool) == ncclInvalidArgument);
    }
    RANK_CHECK(ctx, settled(ctx->pool) == ncclSuccess && child != NULL);
    RANK_CHECK(ctx, child && ncclCommCount(child, &count) == ncclSuccess && count == 2);
    RANK_CHECK(ctx, fake_comm_config(child).blocking == 0); /* NULL config: the parent's */
    RANK_CHECK(ctx, ncclCommFinalize(child) == ncclInProgress && settled(child) == ncclSuccess);
    RANK_CHECK(ctx, ncclCommDestroy(child) == ncclSuccess);
    RANK_CHECK(ctx, ncclCommDestroy(ctx->pool) == ncclSuccess);
}

static void transport_nonblocking_calls_run_in_the_background(void)
{
    const ncclConfig_t config = pool_config(0, 0);
    transport_run(2, &config, nonblocking_rank, 0);
    CHECK_EQ(fake_violation_count(FAKE_PROTOCOL), 1);
    CHECK_EQ(fake_violation_count(FAKE_HANG) + fake_violation_count(FAKE_STUCK), 0);
    fake_job_destroy();
}

/* 4. An injected asynchronous error is reported by ncclCommGetAsyncError, and the broken
   communicator's kernels stall until it is aborted. */
static void async_error_rank(rank_ctx *ctx)
{
    int32_t *x = device_int(ctx->rank);
    ncclResult_t state = ncclSuccess;
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    RANK_CHECK(ctx, ncclAllReduce(x, x, 1, ncclInt32, ncclSum, ctx->pool, stream) == ncclSuccess);
    RANK_CHECK(ctx, stream_drains(stream) && *x == 1);
    if (ctx->rank == 0) fake_inject_async_error(ctx->pool, ncclRemoteError);
    barrier(ctx);
    RANK_CHECK(ctx, ncclCommGetAsyncError(ctx->pool, &state) == ncclSuccess &&
                        state == (ctx->rank == 0 ? ncclRemoteError : ncclSuccess));
    RANK_CHECK(ctx, ncclAllReduce(x, x, 1, ncclInt32, ncclSum, ctx->pool, stream) == ncclSuccess);
    if (ctx->rank == 0) {
        RANK_CHECK(ctx, !stream_drains_within(stream, TRANSPORT_DELAY_MS));
        (void)ncclCommAbort(ctx->pool);
    }
    RANK_CHECK(ctx, stream_drains(stream));
    if (ctx->rank == 1) RANK_CHECK(ctx, ncclCommDestroy(ctx->pool) == ncclSuccess);
    cudaStreamDestroy(stream);
    cudaFree(x);
}

static void transport_async_errors_are_reported(void)
{
    const ncclConfig_t config = pool_config(1, 0);
    transport_run(2, &config, async_error_rank, 0);
    CHECK(job_clean());
    fake_job_destroy();
}

/* 5a. ncclCommAbort waits for the communicator's queued work: rank 0 queues a receive on the
   pool that rank 1 never matches, then a send on a split communicator behind it on the same
   stream. Aborting the split alone waits for work only the pool's abort releases (the
   transport reports the hang after its bound); aborting both in one group raises both flags
   first (from NCCL 2.22; before, the group changes nothing). */
static void abort_order_rank(rank_ctx *ctx)
{
    const transport_test *t = (const transport_test *)ctx->test;
    int32_t *x = device_int(ctx->rank);
    ncclComm_t child = NULL;
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    RANK_CHECK(ctx, ncclCommSplit(ctx->pool, 0, ctx->rank, &child, NULL) == ncclSuccess);
    exchange(ctx, ctx->pool, ctx->rank, 1 - ctx->rank, stream);
    exchange(ctx, child, ctx->rank, 1 - ctx->rank, stream);
    if (ctx->rank == 0) {
        RANK_CHECK(ctx, ncclRecv(x, 1, ncclInt32, 1, ctx->pool, stream) == ncclSuccess);
        RANK_CHECK(ctx, ncclSend(x, 1, ncclInt32, 1, child, stream) == ncclSuccess);
        if (t->grouped) RANK_CHECK(ctx, ncclGroupStart() == ncclSuccess);
        (void)ncclCommAbort(child);
        (void)ncclCommAbort(ctx->pool);
        if (t->grouped) RANK_CHECK(ctx, ncclGroupEnd() == ncclSuccess);
        RANK_CHECK(ctx, stream_drains(stream));
    }
    barrier(ctx); /* rank 1 stays, absent, until rank 0 is done */
    if (ctx->rank == 1) {
        (void)ncclCommAbort(child);
        (void)ncclCommAbort(ctx->pool);
    }
    cudaStreamDestroy(stream);
    cudaFree(x);
}

static void transport_abort_waits_for_queued_work(void)
{
    const ncclConfig_t config = pool_config(1, 0);
    const int grouped_abort = NCCL_VERSION_CODE >= FAKE_GROUPED_ABORT_VERSION;
    int grouped;
    fake_set_hang_bound(TRANSPORT_HANG_MS);
    for (grouped = 0; grouped < 2; grouped++) {
        transport_run(2, &config, abort_order_rank, grouped);
        printf("  %s: %d hang(s)\n", grouped ? "one group" : "one after the other",
               fake_violation_count(FAKE_HANG));
        CHECK_EQ(fake_violation_count(FAKE_HANG), grouped && grouped_abort ? 0 : 1);
        CHECK_EQ(fake_violation_count(FAKE_PROTOCOL), 0);
        fake_job_destroy();
    }
    fake_set_hang_bound(FAKE_DEFAULT_HANG_MS);
}

/* 5b. Under the parent's splitShare = 1 a child shares the parent's abort flag: after the
   child's abort the pool's all-reduce "succeeds" and its kernel quits without a word, its
   output untouched; without sharing it sums. */
static void shared_flag_rank(rank_ctx *ctx)
{
    const int shared = fake_comm_config(ctx->pool).splitShare;
    int32_t *x = device_int(1);
    ncclComm_t child = NULL;
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    RANK_CHECK(ctx, ncclCommSplit(ctx->pool, 0, ctx->rank, &child, NULL) == ncclSuccess);
    RANK_CHECK(ctx, ncclAllReduce(x, x, 1, ncclInt32, ncclSum, ctx->pool, stream) == ncclSuccess);
    RANK_CHECK(ctx, stream_drains(stream) && *x == 2);
    RANK_CHECK(ctx, ncclCommAbort(child) == ncclSuccess);
    RANK_CHECK(ctx, ncclAllReduce(x, x, 1, ncclInt32, ncclSum, ctx->pool, stream) == ncclSuccess);
    RANK_CHECK(ctx, stream_drains(stream) && *x == (shared ? 2 : 4));
    if (shared) (void)ncclCommAbort(ctx->pool);
    else RANK_CHECK(ctx, ncclCommDestroy(ctx->pool) == ncclSuccess);
    cudaStreamDestroy(stream);
    cudaFree(x);
}

static void transport_split_share_shares_the_abort_flag(void)
{
    int share;
    for (share = 0; share < 2; share++) {
        const ncclConfig_t config = pool_config(1, share);
        transport_run(2, &config, shared_flag_rank, 0);
        CHECK(job_clean());
        fake_job_destroy();
    }
}

/* 6. One communicator's kernels run in issue order whatever their stream, and a device runs
   one communication kernel at a time. Rank 0 queues a receive from rank 1 on stream one and
   then a send to rank 2 on stream two: first both on the pool, the receive behind a kernel
   that runs DELAY (the order: the send may not pass the receive that was issued first), then
   the send on a child of ranks 0 and 2, the receive's sender DELAY late (the slot). Either way
   rank 2's receive may not end before DELAY. */
static int slow_kernel(void *arg);

static void order_rank(rank_ctx *ctx)
{
    const int r = ctx->rank;
    int32_t *x = device_int(r);
    ncclComm_t child = NULL, second;
    cudaStream_t one, two;
    int phase;
    cudaStreamCreateWithFlags(&one, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&two, cudaStreamNonBlocking);
    RANK_CHECK(ctx, ncclCommSplit(ctx->pool, r == 1 ? NCCL_SPLIT_NOCOLOR : 0, r, &child, NULL) ==
                        ncclSuccess);
    if (r != 2) exchange(ctx, ctx->pool, r, 1 - r, one); /* 0 and 1 */
    if (r != 1) exchange(ctx, ctx->pool, r, 2 - r, one); /* 0 and 2 */
    if (r != 1) exchange(ctx, child, r / 2, 1 - r / 2, one);
    for (phase = 0; phase < 2; phase++) { /* the pool's order, then the slot */
        second = phase ? child : ctx->pool;
        barrier(ctx);
        if (r == 0) {
            if (phase == 0) fake_enqueue_host(one, slow_kernel, NULL);
            RANK_CHECK(ctx, ncclRecv(x, 1, ncclInt32, 1, ctx->pool, one) == ncclSuccess);
            RANK_CHECK(ctx, ncclSend(x, 1, ncclInt32, phase ? 1 : 2, second, two) == ncclSuccess);
            fake_sleep_ms(TRANSPORT_EARLY_MS);
            RANK_CHECK(ctx, cudaStreamQuery(two) == cudaErrorNotReady);
        } else if (r == 1) {
            if (phase == 1) fake_sleep_ms(TRANSPORT_DELAY_MS);
            RANK_CHECK(ctx, ncclSend(x, 1, ncclInt32, 0, ctx->pool, one) == ncclSuccess);
        } else {
            const double start = fake_now_ms();
            RANK_CHECK(ctx, ncclRecv(x, 1, ncclInt32, 0, second, one) == ncclSuccess);
            RANK_CHECK(ctx, stream_drains(one) && fake_now_ms() - start > TRANSPORT_DELAY_MS / 2);
        }
        RANK_CHECK(ctx, stream_drains(one) && stream_drains(two));
    }
    if (child) RANK_CHECK(ctx, ncclCommDestroy(child) == ncclSuccess);
    RANK_CHECK(ctx, ncclCommDestroy(ctx->pool) == ncclSuccess);
    cudaStreamDestroy(one), cudaStreamDestroy(two);
    cudaFree(x);
}

static void transport_orders_kernels(void)
{
    const ncclConfig_t config = pool_config(1, 0);
    transport_run(3, &config, order_rank, 0);
    CHECK(job_clean());
    fake_job_destroy();
}

/* 7. A copy between device and pageable memory waits for the stream (CUDA may synchronise
   with it); from pinned memory it is only queued; one that names the wrong kind of memory is
   refused (the one deliberate violation). */
static int slow_kernel(void *arg)
{
    (void)arg;
    fake_sleep_ms(TRANSPORT_DELAY_MS);
    return 0;
}

static void pageable_rank(rank_ctx *ctx)
{
    int32_t pageable = 5, *pinned = NULL, *device = device_int(0);
    cudaStream_t stream;
    double start;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    cudaMallocHost((void **)&pinned, sizeof *pinned);
    *pinned = 6;
    fake_enqueue_host(stream, slow_kernel, NULL);
    start = fake_now_ms();
    RANK_CHECK(ctx, cudaMemcpyAsync(device, &pageable, sizeof pageable, cudaMemcpyHostToDevice,
                                    stream) == cudaSuccess);
    RANK_CHECK(ctx, fake_now_ms() - start > TRANSPORT_DELAY_MS / 2 && *device == 5);
    fake_enqueue_host(stream, slow_kernel, NULL);
    start = fake_now_ms();
    RANK_CHECK(ctx, cudaMemcpyAsync(device, pinned, sizeof *pinned, cudaMemcpyHostToDevice,
                                    stream) == cudaSuccess);
    RANK_CHECK(ctx, fake_now_ms() - start < TRANSPORT_DELAY_MS / 2);
    RANK_CHECK(ctx, stream_drains(stream) && *device == 6);
    RANK_CHECK(ctx, cudaMemcpyAsync(device, &pageable, sizeof pageable, cudaMemcpyDeviceToDevice,
                                    stream) == cudaErrorInvalidValue);
    RANK_CHECK(ctx, ncclCommDestroy(ctx->pool) == ncclSuccess);
    cudaStreamDestroy(stream);
    cudaFreeHost(pinned), cudaFree(device);
}

static void transport_pageable_copies_wait_for_the_stream(void)
{
    const ncclConfig_t config = pool_config(1, 0);
    transport_run(1, &config, pageable_rank, 0);
    CHECK_EQ(fake_violation_count(FAKE_PROTOCOL), 1);
    CHECK_EQ(fake_violation_count(FAKE_HANG), 0);
    fake_job_destroy();
}

/* 8. A group whose call failed (an injected fault: the call did not run) launches nothing at
   its end and reports the error, as NCCL's ncclGroupError does; an injected ncclGroupEnd
   failure (it did not run either) leaves the group open: the caller's next ncclGroupEnd closes
   it, and one more is ncclInvalidUsage. */
static void failed_group_rank(rank_ctx *ctx)
{
    int32_t *x = device_int(1), *y = device_int(0);
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    RANK_CHECK(ctx, ncclGroupStart() == ncclSuccess);
    RANK_CHECK(ctx, ncclSend(x, 1, ncclInt32, 0, ctx->pool, stream) == ncclSuccess);
    fake_fault_arm(1);
    RANK_CHECK(ctx, fake_fault_hook("ncclRecv") == 1); /* as DCP_NCCL_FAULT_HOOK: not called */
    RANK_CHECK(ctx, ncclGroupEnd() == ncclSystemError);
    RANK_CHECK(ctx, stream_drains(stream) && *y == 0); /* nothing launched */
    RANK_CHECK(ctx, ncclGroupStart() == ncclSuccess);
    fake_fault_arm(1);
    RANK_CHECK(ctx, fake_fault_hook("ncclGroupEnd") == 1);
    RANK_CHECK(ctx, fake_group_depth == 1);
    RANK_CHECK(ctx, ncclGroupEnd() == ncclSystemError && fake_group_depth == 0);
    RANK_CHECK(ctx, ncclGroupEnd() == ncclInvalidUsage);
    fake_fault_arm(0);
    RANK_CHECK(ctx, ncclCommDestroy(ctx->pool) == ncclSuccess);
    cudaStreamDestroy(stream);
    cudaFree(x), cudaFree(y);
}

static void transport_failed_calls_poison_their_group(void)
{
    const ncclConfig_t config = pool_config(1, 0);
    transport_run(1, &config, failed_group_rank, 0);
    CHECK(job_clean());
    fake_job_destroy();
}

/* 9. Configs as NCCL resolves them: NCCL_CONFIG_INITIALIZER leaves every field undefined and
   the communicator takes NCCL's defaults; a split with a NULL config copies its parent's; a
   config without the initializer's magic is refused (a deliberate violation on each rank). */
static void config_rank(rank_ctx *ctx)
{
    ncclConfig_t fresh = NCCL_CONFIG_INITIALIZER, broken = NCCL_CONFIG_INITIALIZER, got;
    const ncclConfig_t pool = fake_comm_config(ctx->pool);
    ncclComm_t inherited = NULL, defaulted = NULL, none = NULL;
    RANK_CHECK(ctx, ncclCommSplit(ctx->pool, 0, ctx->rank, &inherited, NULL) == ncclSuccess);
    got = fake_comm_config(inherited);
    RANK_CHECK(ctx, got.cgaClusterSize == pool.cgaClusterSize && got.splitShare == 1 &&
                        got.blocking == 1);
    RANK_CHECK(ctx, ncclCommSplit(ctx->pool, 0, ctx->rank, &defaulted, &fresh) == ncclSuccess);
    got = fake_comm_config(defaulted);
    RANK_CHECK(ctx, got.blocking == FAKE_DEFAULT_BLOCKING &&
                        got.cgaClusterSize == FAKE_DEFAULT_CGA_CLUSTER &&
                        got.minCTAs == FAKE_DEFAULT_MIN_CTAS &&
                        got.maxCTAs == FAKE_DEFAULT_MAX_CTAS &&
                        got.splitShare == FAKE_DEFAULT_SPLIT_SHARE);
    broken.magic = 0;
    RANK_CHECK(ctx, ncclCommSplit(ctx->pool, 0, ctx->rank, &none, &broken) ==
                        ncclInvalidArgument && none == NULL);
    RANK_CHECK(ctx, ncclCommDestroy(defaulted) == ncclSuccess);
    RANK_CHECK(ctx, ncclCommDestroy(inherited) == ncclSuccess);
    RANK_CHECK(ctx, ncclCommDestroy(ctx->pool) == ncclSuccess);
}

static void transport_configs_resolve_as_nccl_does(void)
{
    ncclConfig_t config = pool_config(1, 1);
    config.cgaClusterSize = 2; /* not the default: only inheritance gives it to a child */
    transport_run(2, &config, config_rank, 0);
    CHECK_EQ(fake_violation_count(FAKE_PROTOCOL), 2);
    CHECK_EQ(fake_violation_count(FAKE_HANG) + fake_violation_count(FAKE_STUCK), 0);
    fake_job_destroy();
}

/* ------------------------------------------------ control plane at 512 ranks: create, split,
   broadcast, agree, switch, override */

typedef struct control_test {
    const dcp_plan *plan;
    uint64_t hash;
} control_test;

static void control_check_switches(rank_ctx *ctx, dcp_nccl_set *set, const dcp_plan *plan)
{
    dcp_nccl_binding b, before;
    dcp_comm_scope scope;
    dcp_error err;
    int32_t k, other_cp_microbatch = -1;
    for (k = 0; k < plan->num_microbatches; k++) {
        dcp_rank_group where;
        RANK_CHECK(ctx, dcp_plan_rank_group(plan, ctx->rank, k, &where, NULL) == DCP_OK);
        RANK_CHECK(ctx, dcp_nccl_set_switch_plan(set, plan, k, &b, &err) == DCP_OK);
        RANK_CHECK(ctx, b.cp == where.choice.cp && b.idle == where.choice.idle);
        RANK_CHECK(ctx, b.first_rank == where.choice.first_rank);
        RANK_CHECK(ctx, b.rank == where.choice.rank_in_group);
        if (!where.choice.idle && where.choice.cp != 4) other_cp_microbatch = k;
    }
    dcp_nccl_set_current(set, &before);
    /* evaluation at CP 4: static blocks of 4, other groups refused, then restored exactly */
    memset(&scope, 0, sizeof scope);
    RANK_CHECK(ctx, dcp_nccl_override_begin(set, 4, &scope, &b, &err) == DCP_OK);
    RANK_CHECK(ctx, b.cp == 4 && b.rank == ctx->rank % 4 && b.first_rank == ctx->rank / 4 * 4);
    if (other_cp_microbatch >= 0)
        RANK_CHECK(ctx, dcp_nccl_set_switch_plan(set, plan, other_cp_microbatch, &b, &err) ==
                            DCP_ERROR_INVALID_ARGUMENT);
    RANK_CHECK(ctx, dcp_nccl_override_end(set, &scope, &err) == DCP_OK);
    dcp_nccl_set_current(set, &b);
    RANK_CHECK(ctx, memcmp(&b, &before, sizeof b) == 0);
}

static void control_rank(rank_ctx *ctx)
{
    const control_test *t = (const control_test *)ctx->test;
    dcp_nccl_options o = options_with(CLEAN_TIMEOUT_MS, 0, NULL);
    dcp_nccl_set *set = NULL;
    dcp_plan *got = NULL;
    cudaStream_t stream;
    dcp_error err;
    uint64_t hash = 0;
    o.staging_bytes = 256; /* many chunks per broadcast */
    o.plan_config = &t->plan->config;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    ctx->status = dcp_nccl_set_create(ctx->pool, &o, &set, &err);
    RANK_CHECK(ctx, ctx->status == DCP_OK);
    if (set) {
        int count = 0, me = -1;
        long made = 0, alive = 0;
        RANK_CHECK(ctx, set->max_cp == t->plan->config.max_cp);
        /* one communicator of its own, the pool's ranks in the pool's order */
        RANK_CHECK(ctx, ncclCommCount(set->comm, &count) == ncclSuccess && count == ctx->ranks);
        RANK_CHECK(ctx, ncclCommUserRank(set->comm, &me) == ncclSuccess && me == ctx->rank);
        fake_comm_tally(ctx->rank, &made, &alive);
        RANK_CHECK(ctx, made == 1 && alive == 1);
        RANK_CHECK(ctx, dcp_nccl_broadcast_plan(set, NULL, 0, ctx->rank == 0 ? t->plan : NULL,
                                                &got, stream, &err) == DCP_OK);
        RANK_CHECK(ctx, got && dcp_plan_hash(got, &hash, NULL) == DCP_OK && hash == t->hash);
        RANK_CHECK(ctx, dcp_nccl_plan_agree(set, got, stream, &err) == DCP_OK);
        if (got) control_check_switches(ctx, set, got);
        RANK_CHECK(ctx, dcp_nccl_set_destroy(set, &err) == DCP_OK);
    }
    dcp_plan_destroy(got);
    pool_destroy(ctx, 0);
    cudaStreamDestroy(stream);
}


static dcp_plan *host_plan(int32_t ranks, int64_t max_tokens, int32_t samples, uint64_t seed)
{
    dcp_config c;
    dcp_rng rng;
    int64_t *lengths = (int64_t *)malloc((size_t)samples * sizeof(int64_t)), longest = 1;
    dcp_plan *plan = NULL;
    int32_t i, max_cp = 0;
    memset(&c, 0, sizeof c);
    c.ranks = ranks, c.max_tokens_per_rank = max_tokens;
    dcp_rng_seed(&rng, seed);
    for (i = 0; i < samples; i++) {
        lengths[i] = 1 + (int64_t)dcp_rng_below(&rng, (uint64_t)((ranks < 8 ? ranks : 8) *
                                                               max_tokens / 2));
        if (lengths[i] > longest) longest = lengths[i];
    }
    /* the communicator set splits only what a plan can use */
    if (dcp_comm_max_cp(&c, longest, &max_cp, NULL) == DCP_OK) c.max_cp = max_cp < 4 ? 4 : max_cp;
    if (dcp_plan_create(&c, lengths, samples, &plan, NULL) != DCP_OK) plan = NULL;
    free(lengths);
    return plan;
}

static void control_plane_512_ranks(void)
{
    enum { RANKS = 512 };
    static rank_ctx ctx[RANKS];
    control_test t;
    dcp_plan *plan = host_plan(RANKS, 64, 600, HOST_SEED);
    printf("  seed %d\n", HOST_SEED);
    CHECK(plan != NULL);
    if (!plan) return;
    t.plan = plan;
    CHECK_EQ(dcp_plan_hash(plan, &t.hash, NULL), DCP_OK);
    CHECK_EQ(run_ranks(RANKS, 1, control_rank, &t, ctx), 0);
    CHECK(job_clean());
    fake_job_destroy();
    dcp_plan_destroy(plan);
}

/* ----------------------------------------------------------------- reroute at 64 ranks */

#define TOKEN_FLOATS 3 /* floats per token in the rerouted buffers */

static float token_value(int32_t sample, int64_t position, int32_t e)
{
    return (float)(sample * 100000 + position * TOKEN_FLOATS + e) + 0.5f;
}

/* One rank's part of a reroute: its list for the samples' holders, its held samples' token
   values in device memory, and poisoned microbatch buffers of the plan's rows. */
typedef struct reroute_setup {
    dcp_reroute *moves;
    dcp_nccl_reroute_buffers buffers;
    void **samples, **micro;
    int64_t *rows;
} reroute_setup;

static dcp_status reroute_setup_make(const dcp_plan *plan, const int32_t *holders, int32_t rank,
                                     reroute_setup *r)
{
    const int32_t S = plan->num_samples, K = plan->num_microbatches;
    int32_t s, k, e;
    int64_t p;
    r->samples = (void **)calloc((size_t)S, sizeof(void *));
    r->micro = (void **)calloc((size_t)K, sizeof(void *));
    r->rows = (int64_t *)calloc((size_t)K, sizeof(int64_t));
    for (s = 0; s < S; s++)
        if (holders[s] == rank) {
            float *data;
            cudaMalloc(&r->samples[s],
                       (size_t)plan->sample_lengths[s] * TOKEN_FLOATS * sizeof(float));
            data = (float *)r->samples[s];
            for (p = 0; p < plan->sample_lengths[s]; p++)
                for (e = 0; e < TOKEN_FLOATS; e++)
                    data[p * TOKEN_FLOATS + e] = token_value(s, p, e);
        }
    for (k = 0; k < K; k++) {
        dcp_rank_group where;
        if (dcp_plan_rank_group(plan, rank, k, &where, NULL) == DCP_OK)
            r->rows[k] = where.local_rows;
        cudaMalloc(&r->micro[k], (size_t)r->rows[k] * TOKEN_FLOATS * sizeof(float)); /* poisoned */
    }
    memset(&r->buffers, 0, sizeof r->buffers);
    r->buffers.element_size = TOKEN_FLOATS * sizeof(float);
    r->buffers.num_samples = S, r->buffers.sample_data = (const void *const *)r->samples;
    r->buffers.sample_rows = plan->sample_lengths;
    r->buffers.num_microbatches = K, r->buffers.microbatch_data = r->micro;
    r->buffers.microbatch_rows = r->rows;
    r->moves = NULL;
    return dcp_reroute_create(plan, holders, rank, &r->moves, NULL);
}

static void reroute_setup_free(const dcp_plan *plan, reroute_setup *r)
{
    int32_t i;
    for (i = 0; i < plan->num_samples; i++) cudaFree(r->samples[i]);
    for (i = 0; i < plan->num_microbatches; i++) cudaFree(r->micro[i]);
    dcp_reroute_destroy(r->moves);
    free(r->samples), free(r->micro), free(r->rows);
}

static void reroute_rank(rank_ctx *ctx)
{
    const dcp_plan *plan = (const dcp_plan *)ctx->test;
    dcp_nccl_options o = options_with(CLEAN_TIMEOUT_MS, 0, NULL);
    dcp_nccl_set *set = NULL;
    reroute_setup r;
    cudaStream_t stream;
    dcp_error err;
    const int32_t S = plan->num_samples, K = plan->num_microbatches;
    int32_t *holders = (int32_t *)malloc((size_t)S * sizeof(int32_t)), s, k, e;
    o.plan_config = &plan->config;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    RANK_CHECK(ctx, dcp_nccl_set_create(ctx->pool, &o, &set, &err) == DCP_OK);
    for (s = 0; s < S; s++) holders[s] = s % ctx->ranks; /* a data loader's placement */
    RANK_CHECK(ctx, reroute_setup_make(plan, holders, ctx->rank, &r) == DCP_OK);
    if (set && r.moves) {
        RANK_CHECK(ctx, dcp_nccl_plan_agree(set, plan, stream, &err) == DCP_OK);
        RANK_CHECK(ctx, dcp_nccl_reroute_execute(set, r.moves, &r.buffers, stream, &err) == DCP_OK);
        RANK_CHECK(ctx, dcp_nccl_set_wait(set, stream, &err) == DCP_OK);
    }
    for (k = 0; k < K; k++) { /* every row: its sample's token, or 0 on padding */
        dcp_rank_view *view = NULL;
        int32_t *slot;
        int64_t *position, row, wrong = 0;
        const float *got = (const float *)r.micro[k];
        if (dcp_rank_view_create(plan, ctx->rank, k, &view, NULL) != DCP_OK) {
            ctx->failures++;
            continue;
        }
        slot = (int32_t *)malloc((size_t)view->local_tokens * sizeof(int32_t) + 4);
        position = (int64_t *)malloc((size_t)view->local_tokens * sizeof(int64_t) + 8);
        RANK_CHECK(ctx, view->local_tokens == r.rows[k]);
        RANK_CHECK(ctx, dcp_rank_view_positions(view, slot, position, NULL) == DCP_OK);
        for (row = 0; row < view->local_tokens; row++)
            for (e = 0; e < TOKEN_FLOATS; e++) {
                const float want = position[row] < 0
                                       ? 0.0f
                                       : token_value(view->samples[slot[row]], position[row], e);
                wrong += got[row * TOKEN_FLOATS + e] != want;
            }
        RANK_CHECK(ctx, wrong == 0);
        free(slot), free(position);
        dcp_rank_view_destroy(view);
    }
    if (set) RANK_CHECK(ctx, dcp_nccl_set_destroy(set, &err) == DCP_OK);
    pool_destroy(ctx, 0);
    cudaStreamDestroy(stream);
    reroute_setup_free(plan, &r);
    free(holders);
}

/* fn on 64 ranks with a host_plan of 150 samples drawn from seed as its test; a clean job. */
#define PLAN_JOB_RANKS 64
static void run_plan_job(int seed, rank_fn fn)
{
    static rank_ctx ctx[PLAN_JOB_RANKS];
    dcp_plan *plan = host_plan(PLAN_JOB_RANKS, 48, 150, (uint64_t)seed);
    printf("  seed %d\n", seed);
    CHECK(plan != NULL);
    if (!plan) return;
    CHECK_EQ(run_ranks(PLAN_JOB_RANKS, 1, fn, plan, ctx), 0);
    CHECK(job_clean());
    fake_job_destroy();
    dcp_plan_destroy(plan);
}

static void reroute_64_ranks_equals_views(void) { run_plan_job(HOST_SEED + 1, reroute_rank); }

/* ------------------------------------------------------- ring attention against the CPU ring */

#define RING_HEADS 2
#define RING_KV_HEADS 1
#define RING_HEAD_DIM 8
#define RING_SEQUENCES 3

typedef struct ring_test {
    int32_t cp;
    dcp_attention_params params;
    dcp_thd_layout thd;
    int32_t cu[RING_SEQUENCES + 1], cu_padded[RING_SEQUENCES + 1];
    int64_t local_rows;
    int32_t max_seqlen_padded;
    /* per pool rank: inputs, and the CPU ring's results for its group */
    float **q, **k, **v, **dout, **out, **lse, **dq, **dk, **dv;
    const ncclConfig_t *config; /* NULL: blocking defaults */
    int dies;                   /* rank that dies mid-step, or -1 */
    int32_t first;              /* the groups: [first + i cp, first + (i + 1) cp) while they
                                   fit; the ranks outside are idle. 0: the override's blocks */
} ring_test;

static float *random_floats(dcp_rng *rng, int64_t n)
{
    float *x = (float *)malloc((size_t)n * sizeof(float) + 4);
    int64_t i;
    for (i = 0; i < n; i++) x[i] = (float)(2.0 * dcp_rng_uniform(rng) - 1.0);
    return x;
}

static void ring_test_init_at(ring_test *t, int32_t ranks, int32_t cp, int32_t first,
                              uint64_t seed)
{
    static const int32_t lengths[RING_SEQUENCES] = {13, 40, 7};
    dcp_rng rng;
    int32_t i, g, r;
    const int64_t qw = RING_HEADS * RING_HEAD_DIM, kw = RING_KV_HEADS * RING_HEAD_DIM;
    memset(t, 0, sizeof *t);
    t->cp = cp, t->dies = -1, t->first = first;
    t->params.num_heads = RING_HEADS, t->params.num_kv_heads = RING_KV_HEADS;
    t->params.head_dim = RING_HEAD_DIM, t->params.causal = 1;
    for (i = 0; i < RING_SEQUENCES; i++) { /* padded to a multiple of 2 cp */
        const int32_t padded = (lengths[i] + 2 * cp - 1) / (2 * cp) * (2 * cp);
        t->cu[i + 1] = t->cu[i] + lengths[i];
        t->cu_padded[i + 1] = t->cu_padded[i] + padded;
        if (padded > t->max_seqlen_padded) t->max_seqlen_padded = padded;
    }
    t->thd.num_sequences = RING_SEQUENCES, t->thd.cu_seqlens = t->cu;
    t->thd.cu_seqlens_padded = t->cu_padded, t->thd.cp = cp;
    t->local_rows = t->cu_padded[RING_SEQUENCES] / cp;
#define RING_ALLOC(name) t->name = (float **)calloc((size_t)ranks, sizeof(float *))
    RING_ALLOC(q), RING_ALLOC(k), RING_ALLOC(v), RING_ALLOC(dout), RING_ALLOC(out);
    RING_ALLOC(lse), RING_ALLOC(dq), RING_ALLOC(dk), RING_ALLOC(dv);
#undef RING_ALLOC
    dcp_rng_seed(&rng, seed);
    for (r = 0; r < ranks; r++) {
        t->q[r] = random_floats(&rng, t->local_rows * qw);
        t->k[r] = random_floats(&rng, t->local_rows * kw);
        t->v[r] = random_floats(&rng, t->local_rows * kw);
        t->dout[r] = random_floats(&rng, t->local_rows * qw);
        t->out[r] = (float *)malloc((size_t)(t->local_rows * qw) * sizeof(float));
        t->lse[r] = (float *)malloc((size_t)(t->local_rows * RING_HEADS) * sizeof(float));
        t->dq[r] = (float *)malloc((size_t)(t->local_rows * qw) * sizeof(float));
        t->dk[r] = (float *)malloc((size_t)(t->local_rows * kw) * sizeof(float));
        t->dv[r] = (float *)malloc((size_t)(t->local_rows * kw) * sizeof(float));
    }
    for (g = first; g + cp <= ranks; g += cp) { /* each group's reference, different data */
        const float *const *cq = (const float *const *)&t->q[g];
        const float *const *ck = (const float *const *)&t->k[g];
        const float *const *cv = (const float *const *)&t->v[g];
        CHECK_EQ(dcp_ring_attention_forward(&t->params, &t->thd, cq, ck, cv, &t->out[g],
                                            &t->lse[g], NULL, NULL),
                 DCP_OK);
        CHECK_EQ(dcp_ring_attention_backward(&t->params, &t->thd, cq, ck, cv,
                                             (const float *const *)&t->out[g],
                                             (const float *const *)&t->dout[g],
                                             (const float *const *)&t->lse[g], &t->dq[g],
                                             &t->dk[g], &t->dv[g], NULL),
                 DCP_OK);
    }
}

static void ring_test_init(ring_test *t, int32_t ranks, int32_t cp, uint64_t seed)
{
    ring_test_init_at(t, ranks, cp, 0, seed);
}

static void ring_test_free(ring_test *t, int32_t ranks)
{
    int32_t r;
    for (r = 0; r < ranks; r++) {
        free(t->q[r]), free(t->k[r]), free(t->v[r]), free(t->dout[r]), free(t->out[r]);
        free(t->lse[r]), free(t->dq[r]), free(t->dk[r]), free(t->dv[r]);
    }
    free(t->q), free(t->k), free(t->v), free(t->dout), free(t->out), free(t->lse);
    free(t->dq), free(t->dk), free(t->dv);
}

static void *device_copy(const float *host, int64_t n, cudaStream_t stream)
{
    void *d = NULL;
    cudaMalloc(&d, (size_t)n * sizeof(float) + 4);
    cudaMemcpyAsync(d, host, (size_t)n * sizeof(float), cudaMemcpyHostToDevice, stream);
    return d;
}

enum { RING_Q, RING_K, RING_V, RING_DOUT, RING_OUT, RING_LSE, RING_DQ, RING_DK, RING_DV, RING_BUFFERS };

/* One rank's ring buffers in its device memory: the inputs copied from the test, the outputs
   poisoned, scratch for either pass, and the group's layout. */
typedef struct ring_buffers {
    void *d[RING_BUFFERS];
    void *scratch;
    size_t scratch_bytes;
    dcp_cuda_layout layout;
} ring_buffers;

static void ring_buffers_make(const ring_test *t, int r, cudaStream_t stream, ring_buffers *b)
{
    const int64_t qw = RING_HEADS * RING_HEAD_DIM, kw = RING_KV_HEADS * RING_HEAD_DIM;
    const int64_t n[RING_BUFFERS] = {qw, kw, kw, qw, qw, RING_HEADS, qw, kw, kw};
    size_t forward = 0, backward = 0;
    int i;
    b->d[RING_Q] = device_copy(t->q[r], t->local_rows * n[RING_Q], stream);
    b->d[RING_K] = device_copy(t->k[r], t->local_rows * n[RING_K], stream);
    b->d[RING_V] = device_copy(t->v[r], t->local_rows * n[RING_V], stream);
    b->d[RING_DOUT] = device_copy(t->dout[r], t->local_rows * n[RING_DOUT], stream);
    for (i = RING_OUT; i < RING_BUFFERS; i++) /* poisoned */
        cudaMalloc(&b->d[i], (size_t)(t->local_rows * n[i]) * sizeof(float));
    b->layout.thd = t->thd, b->layout.local_rows = t->local_rows;
    b->layout.max_seqlen_padded = t->max_seqlen_padded;
    (void)dcp_nccl_ring_scratch_size(&t->params, &b->layout, DCP_DTYPE_FLOAT32, DCP_RING_FORWARD,
                                     &forward, NULL);
    (void)dcp_nccl_ring_scratch_size(&t->params, &b->layout, DCP_DTYPE_FLOAT32, DCP_RING_BACKWARD,
                                     &backward, NULL);
    b->scratch_bytes = forward > backward ? forward : backward;
    cudaMalloc(&b->scratch, b->scratch_bytes);
}

static void ring_buffers_free(ring_buffers *b)
{
    int i;
    for (i = 0; i < RING_BUFFERS; i++) cudaFree(b->d[i]);
    cudaFree(b->scratch);
}

static dcp_status ring_forward(dcp_nccl_set *set, const dcp_nccl_binding *binding,
                               const ring_test *t, ring_buffers *b, cudaStream_t stream,
                               dcp_error *err)
{
    return dcp_nccl_ring_forward(set, binding, &t->params, &b->layout, DCP_DTYPE_FLOAT32,
                                 b->d[RING_Q], b->d[RING_K], b->d[RING_V], b->d[RING_OUT],
                                 (float *)b->d[RING_LSE], b->scratch, b->scratch_bytes, stream,
                                 err);
}

static dcp_status ring_backward(dcp_nccl_set *set, const dcp_nccl_binding *binding,
                                const ring_test *t, ring_buffers *b, cudaStream_t stream,
                                dcp_error *err)
{
    return dcp_nccl_ring_backward(set, binding, &t->params, &b->layout, DCP_DTYPE_FLOAT32,
                                  b->d[RING_Q], b->d[RING_K], b->d[RING_V], b->d[RING_OUT],
                                  b->d[RING_DOUT], (const float *)b->d[RING_LSE], b->d[RING_DQ],
                                  b->d[RING_DK], b->d[RING_DV], 1, b->scratch, b->scratch_bytes,
                                  stream, err);
}

/* The rank's group in a ring test: the evaluation override's block of cp ranks (first 0),
   or the group from first that holds it, switched to as a rank view would give it (groups of
   an ANY plan sit anywhere). 0: the rank is idle. */
static int ring_bind(rank_ctx *ctx, dcp_nccl_set *set, const ring_test *t, dcp_comm_scope *scope,
                     dcp_nccl_binding *binding)
{
    const int32_t in = ctx->rank - t->first;
    dcp_rank_view view;
    dcp_error err;
    memset(scope, 0, sizeof *scope);
    if (t->first == 0) {
        RANK_CHECK(ctx, dcp_nccl_override_begin(set, t->cp, scope, binding, &err) == DCP_OK);
        return !binding->idle;
    }
    memset(&view, 0, sizeof view);
    view.rank = ctx->rank, view.idle = 1, view.first_rank = view.rank_in_group = DCP_NO_GROUP;
    if (in >= 0 && in / t->cp < (ctx->ranks - t->first) / t->cp) {
        view.idle = 0, view.cp = t->cp;
        view.first_rank = t->first + in / t->cp * t->cp, view.rank_in_group = in % t->cp;
    }
    RANK_CHECK(ctx, dcp_nccl_set_switch(set, &view, binding, &err) == DCP_OK);
    return !binding->idle;
}

/* The ring's results on this rank against the CPU ring of its group. */
static void ring_results_match(rank_ctx *ctx, const ring_test *t, const ring_buffers *b)
{
    const int64_t qw = RING_HEADS * RING_HEAD_DIM, kw = RING_KV_HEADS * RING_HEAD_DIM;
    float *const *expected[] = {t->out, t->lse, t->dq, t->dk, t->dv};
    static const int slots[] = {RING_OUT, RING_LSE, RING_DQ, RING_DK, RING_DV};
    const int64_t widths[] = {qw, RING_HEADS, qw, kw, kw};
    int i;
    for (i = 0; i < TEST_COUNT(slots); i++)
        RANK_CHECK(ctx, relative_error((float *)b->d[slots[i]], expected[i][ctx->rank],
                                       t->local_rows * widths[i]) <= RING_TOLERANCE);
}

/* One rank's ring pass on its group (ring_bind): forward, backward, wait. A rank that `dies`
   enqueues its forward and vanishes (aborts and leaves) before any of it runs. */
static void ring_rank(rank_ctx *ctx)
{
    const ring_test *t = (const ring_test *)ctx->test;
    dcp_nccl_options o = options_with(CLEAN_TIMEOUT_MS, t->first ? 0 : t->cp, t->config);
    dcp_nccl_set *set = NULL;
    dcp_nccl_binding binding;
    dcp_comm_scope scope;
    ring_buffers b;
    cudaStream_t stream;
    dcp_error err;
    const int r = ctx->rank;
    double start;
    int pool_aborted, grouped;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    RANK_CHECK(ctx, dcp_nccl_set_create(ctx->pool, &o, &set, &err) == DCP_OK);
    if (!set) {
        cudaStreamDestroy(stream);
        return;
    }
    if (t->dies >= 0) set->timeout_ms = FAILURE_TIMEOUT_MS;
    ring_buffers_make(t, r, stream, &b);
    grouped = ring_bind(ctx, set, t, &scope, &binding);
    start = fake_now_ms();
    ctx->status = grouped ? ring_forward(set, &binding, t, &b, stream, &err) : DCP_OK;
    if (r == t->dies) { /* gone mid-step: nothing it enqueued ever runs against its peers */
        (void)dcp_nccl_set_abort(set, 1, NULL);
    } else if (grouped) {
        if (ctx->status == DCP_OK) ctx->status = ring_backward(set, NULL, t, &b, stream, &err);
        if (ctx->status == DCP_OK) ctx->status = dcp_nccl_set_wait(set, stream, &err);
    }
    ctx->elapsed_ms = fake_now_ms() - start;
    if (ctx->status != DCP_OK) snprintf(ctx->message, sizeof ctx->message, "%s", err.message);
    if (t->first == 0) RANK_CHECK(ctx, dcp_nccl_override_end(set, &scope, &err) == DCP_OK);
    RANK_CHECK(ctx, stream_drains(stream)); /* joined: nothing left waiting forever */
    if (t->dies < 0) {
        RANK_CHECK(ctx, ctx->status == DCP_OK);
        if (grouped) ring_results_match(ctx, t, &b);
    }
    pool_aborted = set->pool == NULL;
    RANK_CHECK(ctx, dcp_nccl_set_destroy(set, &err) == DCP_OK);
    pool_destroy(ctx, pool_aborted);
    cudaStreamDestroy(stream);
    ring_buffers_free(&b);
}

static void ring_run_at(int32_t ranks, int32_t cp, int32_t first, int blocking, uint64_t seed)
{
    rank_ctx *ctx = (rank_ctx *)calloc((size_t)ranks, sizeof(rank_ctx));
    ring_test t;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = blocking;
    printf("  %d ranks, cp %d from rank %d, %s, seed %llu\n", (int)ranks, (int)cp, (int)first,
           blocking ? "blocking" : "non-blocking", (unsigned long long)seed);
    ring_test_init_at(&t, ranks, cp, first, seed);
    t.config = &config;
    CHECK_EQ(run_ranks(ranks, blocking, ring_rank, &t, ctx), 0);
    CHECK(job_clean());
    fake_job_destroy();
    ring_test_free(&t, ranks);
    free(ctx);
}

static void ring_run(int32_t ranks, int32_t cp, int blocking, uint64_t seed)
{
    ring_run_at(ranks, cp, 0, blocking, seed);
}

static void ring_64_ranks_equals_cpu_ring(void) { ring_run(64, 8, 1, HOST_SEED + 2); }
static void ring_cp2_and_cp4_equal_cpu_ring(void)
{
    ring_run(8, 2, 1, HOST_SEED + 3);
    ring_run(16, 4, 1, HOST_SEED + 4);
}
static void ring_nonblocking_communicators(void) { ring_run(8, 4, 0, HOST_SEED + 5); }

/* ---------------------------------------------------------------- failures: dead peers */

/* A ring whose rank 3 dies mid-step: every other rank of its group returns DCP_ERROR_NCCL
   naming the timeout within it (plus slack), never hangs; the others' streams drain. */
static void dead_peer_in_ring_times_out(void)
{
    enum { RANKS = 8 };
    static rank_ctx ctx[RANKS];
    ring_test t;
    int r;
    ring_test_init(&t, RANKS, 8, HOST_SEED + 6);
    t.dies = 3;
    CHECK_EQ(run_ranks(RANKS, 1, ring_rank, &t, ctx), 0);
    for (r = 0; r < RANKS; r++) {
        if (r == t.dies) continue;
        CHECK_EQ(ctx[r].status, DCP_ERROR_NCCL);
        CHECK_CONTAINS(ctx[r].message, "did not finish");
        CHECK_CONTAINS(ctx[r].message, "dcp_nccl_set_wait");
        CHECK(ctx[r].elapsed_ms < FAILURE_TIMEOUT_MS + TIMEOUT_SLACK_MS);
    }
    printf("  rank 0: %.0f ms: %s\n", ctx[0].elapsed_ms, ctx[0].message);
    fake_job_destroy();
    ring_test_free(&t, RANKS);
}

/* The root of a broadcast over the set's ranks dies before it: the others return an error
   within the timeout (the root's children at once, the rest when their wait times out). */
static void dead_root_rank(rank_ctx *ctx)
{
    const dcp_plan *plan = (const dcp_plan *)ctx->test;
    dcp_nccl_options o = options_with(CLEAN_TIMEOUT_MS, 0, NULL);
    dcp_nccl_set *set = NULL;
    dcp_plan *got = NULL;
    cudaStream_t stream;
    dcp_error err;
    double start;
    int pool_aborted;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    RANK_CHECK(ctx, dcp_nccl_set_create(ctx->pool, &o, &set, &err) == DCP_OK);
    if (!set) return;
    set->timeout_ms = FAILURE_TIMEOUT_MS;
    start = fake_now_ms();
    if (ctx->rank == 0)
        (void)dcp_nccl_set_abort(set, 1, NULL); /* gone */
    else {
        ctx->status = dcp_nccl_broadcast_plan(set, NULL, 0, NULL, &got, stream, &err);
        snprintf(ctx->message, sizeof ctx->message, "%s", err.message);
        RANK_CHECK(ctx, got == NULL);
        RANK_CHECK(ctx, set->aborted == 1);
    }
    (void)plan;
    ctx->elapsed_ms = fake_now_ms() - start;
    RANK_CHECK(ctx, stream_drains(stream));
    pool_aborted = set->pool == NULL;
    RANK_CHECK(ctx, dcp_nccl_set_destroy(set, &err) == DCP_OK);
    pool_destroy(ctx, pool_aborted);
    cudaStreamDestroy(stream);
}

static void dead_root_broadcast_times_out(void)
{
    enum { RANKS = 16 };
    static rank_ctx ctx[RANKS];
    int r;
    CHECK_EQ(run_ranks(RANKS, 1, dead_root_rank, NULL, ctx), 0);
    for (r = 1; r < RANKS; r++) {
        CHECK_EQ(ctx[r].status, DCP_ERROR_NCCL);
        CHECK(strstr(ctx[r].message, "broadcast") || strstr(ctx[r].message, "ncclRecv"));
        CHECK(ctx[r].elapsed_ms < FAILURE_TIMEOUT_MS + TIMEOUT_SLACK_MS);
    }
    printf("  rank 1: %s\n  rank %d: %s\n", ctx[1].message, RANKS - 1,
           ctx[RANKS - 1].message);
    fake_job_destroy();
}

/* ------------------------------------------ a bad argument on one rank of a broadcast */

#define BAD_ARGUMENT_RANK 3
#define BROADCAST_TEST_BYTES 100

/* The root passes NULL data and rank 3 NULL received: both take part in the broadcast (the
   root sends length 0), then fail with their own reason; every other rank rejects the length;
   nobody waits, nothing is aborted, and the next broadcast works everywhere. */
static void bad_argument_rank(rank_ctx *ctx)
{
    dcp_nccl_options o = options_with(CLEAN_TIMEOUT_MS, 0, NULL);
    dcp_nccl_set *set = NULL;
    unsigned char bytes[BROADCAST_TEST_BYTES];
    void *received = NULL;
    size_t size = 0;
    cudaStream_t stream;
    dcp_error err;
    const int root = ctx->rank == 0;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    RANK_CHECK(ctx, dcp_nccl_set_create(ctx->pool, &o, &set, &err) == DCP_OK);
    if (!set) return;
    memset(bytes, 0x3C, sizeof bytes);
    ctx->status = dcp_nccl_broadcast_bytes(
        set, set->pool, 0, NULL, sizeof bytes,
        ctx->rank == BAD_ARGUMENT_RANK ? NULL : &received, &size, stream, &err);
    snprintf(ctx->message, sizeof ctx->message, "%s", err.message);
    RANK_CHECK(ctx, received == NULL && set->aborted == 0);
    RANK_CHECK(ctx, dcp_nccl_broadcast_bytes(set, set->pool, 0, bytes, sizeof bytes,
                                             root ? NULL : &received, &size, stream,
                                             &err) == DCP_OK);
    RANK_CHECK(ctx, root || (size == sizeof bytes && memcmp(received, bytes, size) == 0));
    if (received) dcp_free(&set->allocator, received);
    RANK_CHECK(ctx, stream_drains(stream));
    RANK_CHECK(ctx, dcp_nccl_set_destroy(set, &err) == DCP_OK);
    pool_destroy(ctx, 0);
    cudaStreamDestroy(stream);
}

static void broadcast_bad_argument_fails_alone(void)
{
    enum { RANKS = 8 };
    static rank_ctx ctx[RANKS];
    int r;
    CHECK_EQ(run_ranks(RANKS, 1, bad_argument_rank, NULL, ctx), 0);
    CHECK_EQ(ctx[0].status, DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ctx[0].message, "root's data is NULL");
    CHECK_EQ(ctx[BAD_ARGUMENT_RANK].status, DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ctx[BAD_ARGUMENT_RANK].message, "received");
    for (r = 1; r < RANKS; r++)
        if (r != BAD_ARGUMENT_RANK) CHECK_EQ(ctx[r].status, DCP_ERROR_CORRUPT_DATA);
    CHECK(job_clean());
    fake_job_destroy();
}

/* ------------------------------------------------------------- plans that differ */

typedef struct agree_test {
    const dcp_plan *plan, *other;
    int odd_rank;
} agree_test;

static void agree_rank(rank_ctx *ctx)
{
    const agree_test *t = (const agree_test *)ctx->test;
    dcp_nccl_options o = options_with(CLEAN_TIMEOUT_MS, 0, NULL);
    dcp_nccl_set *set = NULL;
    cudaStream_t stream;
    dcp_error err;
    dcp_plan *got = NULL;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    RANK_CHECK(ctx, dcp_nccl_set_create(ctx->pool, &o, &set, &err) == DCP_OK);
    if (!set) return;
    ctx->status = dcp_nccl_plan_agree(set, ctx->rank == t->odd_rank ? t->other : t->plan, stream,
                                      &err);
    snprintf(ctx->message, sizeof ctx->message, "%s", err.message);
    /* the set stays usable: the broadcast that fixes it runs */
    RANK_CHECK(ctx, dcp_nccl_broadcast_plan(set, set->pool, 0, ctx->rank == 0 ? t->plan : NULL,
                                            &got, stream, &err) == DCP_OK);
    RANK_CHECK(ctx, dcp_nccl_plan_agree(set, got, stream, &err) == DCP_OK);
    dcp_plan_destroy(got);
    RANK_CHECK(ctx, dcp_nccl_set_destroy(set, &err) == DCP_OK);
    pool_destroy(ctx, 0);
    cudaStreamDestroy(stream);
}

static void plan_disagreement_fails_every_rank(void)
{
    enum { RANKS = 16 };
    static rank_ctx ctx[RANKS];
    agree_test t;
    int r;
    dcp_plan *plan = host_plan(RANKS, 48, 40, HOST_SEED + 7);
    dcp_plan *other = host_plan(RANKS, 48, 40, HOST_SEED + 8);
    CHECK(plan && other);
    if (!plan || !other) return;
    t.plan = plan, t.other = other, t.odd_rank = 5;
    CHECK_EQ(run_ranks(RANKS, 1, agree_rank, &t, ctx), 0);
    for (r = 0; r < RANKS; r++) {
        CHECK_EQ(ctx[r].status, DCP_ERROR_INVALID_PLAN);
        CHECK_CONTAINS(ctx[r].message, "different plans");
    }
    CHECK(job_clean());
    fake_job_destroy();
    dcp_plan_destroy(plan);
    dcp_plan_destroy(other);
}

/* ------------------------------------------- faults real NCCL would show (issue 31)
   Each of these failed on the layer as it was (7e21afb) under this transport: a split that one
   rank joins late; a rank that stays alive but absent from a ring step (blocking and
   non-blocking communicators); an abort with a ring kernel queued behind a stuck reroute; a
   shared split aborted, then the pool used; plan agreement on a stream that does not drain;
   a NULL config. A rank is absent for ABSENT_MS, and the transport reports a host wait past
   ABSENT_HANG_MS as the hang it would be. */
#define ABSENT_RANKS 4
#define ABSENT_RANK 3
#define ABSENT_MS (4 * FAILURE_TIMEOUT_MS)
#define ABSENT_HANG_MS 2000.0
#define ABSENT_SEED (HOST_SEED + 30)

typedef struct absent_test {
    pthread_barrier_t barrier; /* first member: barrier() */
    ncclConfig_t config;       /* the pools' */
    ring_test ring;            /* cp ABSENT_RANKS */
    const dcp_plan *plan;
    int32_t holders[64];
    pthread_mutex_t lock;
    int stuck_reroutes;        /* present ranks whose reroute waits for the absent one */
    double hang_ms;            /* the transport's bound on a host wait; 0: ABSENT_HANG_MS */
} absent_test;

/* The job's transport reports: no host hang and no protocol violation. */
static int no_hang_no_misuse(void)
{
    const char *text;
    if (fake_violations(&text)) printf("  transport: %s\n", text);
    return fake_violation_count(FAKE_HANG) == 0 && fake_violation_count(FAKE_PROTOCOL) == 0;
}

/* Runs fn on ABSENT_RANKS ranks; the present ranks must each report a failure within the
   timeout's bound; then the transport must have seen neither a hang nor a misuse. */
static void absent_run(absent_test *t, rank_fn fn, const char *expected)
{
    static rank_ctx ctx[ABSENT_RANKS];
    int r;
    pthread_barrier_init(&t->barrier, NULL, ABSENT_RANKS);
    fake_set_hang_bound(t->hang_ms > 0 ? t->hang_ms : ABSENT_HANG_MS);
    CHECK_EQ(run_ranks_with(ABSENT_RANKS, &t->config, fn, t, ctx), 0);
    for (r = 0; r < ABSENT_RANKS; r++) {
        if (r == ABSENT_RANK) continue;
        CHECK_EQ(ctx[r].status, DCP_ERROR_NCCL);
        CHECK_CONTAINS(ctx[r].message, expected);
        CHECK(ctx[r].elapsed_ms < FAILURE_TIMEOUT_MS + TIMEOUT_SLACK_MS);
    }
    printf("  rank 0: %.0f ms: %s\n", ctx[0].elapsed_ms, ctx[0].message);
    fake_job_destroy();
    CHECK(no_hang_no_misuse());
    fake_set_hang_bound(FAKE_DEFAULT_HANG_MS);
    pthread_barrier_destroy(&t->barrier);
}

static void absent_note(rank_ctx *ctx, double start, dcp_status status, const dcp_error *err)
{
    ctx->elapsed_ms = fake_now_ms() - start;
    ctx->status = status;
    snprintf(ctx->message, sizeof ctx->message, "%s", status == DCP_OK ? "" : err->message);
}

/* Fault 1: a non-blocking split that one rank joins late. The present ranks' split times out;
   the set must abort the pool before it frees itself, or NCCL's split job, still running,
   writes the child into the freed set when the late rank comes (and the pool stays in
   progress, so that the caller cannot even destroy it). */
static void split_late_rank(rank_ctx *ctx)
{
    dcp_nccl_options o = options_with(FAILURE_TIMEOUT_MS, ABSENT_RANKS, NULL);
    dcp_nccl_set *set = NULL;
    dcp_error err;
    double start;
    o.config = &((const absent_test *)ctx->test)->config;
    o.allocator = quarantine_allocator();
    if (ctx->rank == ABSENT_RANK) fake_fault_stall("ncclCommSplit", ABSENT_MS);
    start = fake_now_ms();
    absent_note(ctx, start, dcp_nccl_set_create(ctx->pool, &o, &set, &err), &err);
    /* every rank fails, and a failed creation has aborted the pool: nothing to destroy */
    RANK_CHECK(ctx, set == NULL && ctx->status == DCP_ERROR_NCCL);
}

static void split_one_rank_joins_late(void)
{
    absent_test t;
    memset(&t, 0, sizeof t);
    t.config = pool_config(0, 0);
    absent_run(&t, split_late_rank, "ncclCommSplit");
    CHECK(quarantine_intact());
}

/* The start of a ring fault test: the set (the pools' config, cp ABSENT_RANKS, every rank in
   one group), the rank's ring buffers and binding, one clean ring step (every link connected),
   the set's timeout down to FAILURE_TIMEOUT_MS, and every rank past it. 0: no set. */
static int absent_ring_start(rank_ctx *ctx, dcp_nccl_set **set, dcp_nccl_binding *binding,
                             ring_buffers *b, cudaStream_t stream)
{
    const absent_test *t = (const absent_test *)ctx->test;
    dcp_nccl_options o = options_with(CLEAN_TIMEOUT_MS, ABSENT_RANKS, &t->config);
    dcp_error err;
    RANK_CHECK(ctx, dcp_nccl_set_create(ctx->pool, &o, set, &err) == DCP_OK);
    if (!*set) return 0;
    ring_buffers_make(&t->ring, ctx->rank, stream, b);
    dcp_nccl_set_current(*set, binding); /* every rank in the one group of the pool */
    binding->cp = ABSENT_RANKS, binding->first_rank = 0, binding->rank = ctx->rank;
    RANK_CHECK(ctx, ring_forward(*set, binding, &t->ring, b, stream, &err) == DCP_OK);
    RANK_CHECK(ctx, dcp_nccl_set_wait(*set, stream, &err) == DCP_OK);
    (*set)->timeout_ms = FAILURE_TIMEOUT_MS;
    barrier(ctx);
    return 1;
}

/* The absent rank comes back once the others are done: its own set and pool end cleanly. */
static void absent_rank_returns(rank_ctx *ctx, dcp_nccl_set *set)
{
    dcp_error err;
    barrier(ctx);
    RANK_CHECK(ctx, dcp_nccl_set_destroy(set, &err) == DCP_OK);
    RANK_CHECK(ctx, ncclCommDestroy(ctx->pool) == ncclSuccess);
}

/* Fault 3: a rank stays alive but absent from a ring step, blocking and non-blocking. After a
   clean step (every link connected) the present ranks enqueue the ring and destroy the set
   (a caller's exit path): destroy waits for the set's work by polling and aborts when it does
   not pass, where a blocking ncclCommFinalize would wait forever. The absent rank comes back
   after the others are done and destroys its own set and pool. */
static void ring_absent_rank(rank_ctx *ctx)
{
    const absent_test *t = (const absent_test *)ctx->test;
    dcp_nccl_set *set = NULL;
    dcp_nccl_binding binding;
    ring_buffers b;
    cudaStream_t stream;
    dcp_error err;
    double start;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (!absent_ring_start(ctx, &set, &binding, &b, stream)) return;
    if (ctx->rank != ABSENT_RANK) {
        start = fake_now_ms();
        RANK_CHECK(ctx, ring_forward(set, &binding, &t->ring, &b, stream, &err) == DCP_OK);
        absent_note(ctx, start, dcp_nccl_set_destroy(set, &err), &err); /* aborted, not the pool */
        RANK_CHECK(ctx, stream_drains(stream));
        barrier(ctx);
        RANK_CHECK(ctx, ncclCommDestroy(ctx->pool) == ncclSuccess);
    } else
        absent_rank_returns(ctx, set);
    cudaStreamDestroy(stream);
    ring_buffers_free(&b);
}

static void absent_rank_costs_a_timeout(void)
{
    absent_test t;
    int blocking;
    memset(&t, 0, sizeof t);
    ring_test_init(&t.ring, ABSENT_RANKS, ABSENT_RANKS, ABSENT_SEED);
    for (blocking = 1; blocking >= 0; blocking--) {
        printf("  %s\n", blocking ? "blocking" : "non-blocking");
        t.config = pool_config(blocking, 0);
        absent_run(&t, ring_absent_rank, "dcp_nccl_set_destroy");
    }
    ring_test_free(&t.ring, ABSENT_RANKS);
}

/* Fault 2: an abort with a ring kernel queued behind a stuck reroute. The absent rank holds
   every sample; after a clean step the present ranks reroute again (a pool kernel that waits
   for it) and start the ring behind it on the same stream, then wait: the wait times out and
   aborts. Aborted one at a time, the split's abort waits for its ring kernel, which cannot
   start before the pool's stuck reroute -- which only the pool's abort, never reached,
   releases. Every abort flag must be up before any abort waits. */
static void reroute_absent_rank(rank_ctx *ctx)
{
    absent_test *t = (absent_test *)ctx->test;
    dcp_nccl_options o = options_with(CLEAN_TIMEOUT_MS, ABSENT_RANKS, &t->config);
    dcp_nccl_set *set = NULL;
    dcp_nccl_binding binding;
    reroute_setup r;
    ring_buffers b;
    cudaStream_t stream;
    dcp_error err;
    double start;
    int32_t i;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    RANK_CHECK(ctx, dcp_nccl_set_create(ctx->pool, &o, &set, &err) == DCP_OK);
    RANK_CHECK(ctx, reroute_setup_make(t->plan, t->holders, ctx->rank, &r) == DCP_OK);
    if (!set || !r.moves) return;
    ring_buffers_make(&t->ring, ctx->rank, stream, &b);
    dcp_nccl_set_current(set, &binding);
    binding.cp = ABSENT_RANKS, binding.first_rank = 0;
    binding.rank = ctx->rank;
    RANK_CHECK(ctx, dcp_nccl_reroute_execute(set, r.moves, &r.buffers, stream, &err) == DCP_OK);
    RANK_CHECK(ctx, ring_forward(set, &binding, &t->ring, &b, stream, &err) == DCP_OK);
    RANK_CHECK(ctx, dcp_nccl_set_wait(set, stream, &err) == DCP_OK);
    set->timeout_ms = FAILURE_TIMEOUT_MS;
    barrier(ctx);
    if (ctx->rank != ABSENT_RANK) {
        for (i = 0; i < r.moves->count; i++) {
            dcp_reroute_op op;
            (void)dcp_reroute_op_get(r.moves, i, r.buffers.element_size, &op, NULL);
            if (op.kind == DCP_TRANSFER_RECV && op.peer == ABSENT_RANK && op.bytes > 0) {
                pthread_mutex_lock(&t->lock);
                t->stuck_reroutes++;
                pthread_mutex_unlock(&t->lock);
                break;
            }
        }
        start = fake_now_ms();
        RANK_CHECK(ctx, dcp_nccl_reroute_execute(set, r.moves, &r.buffers, stream, &err) == DCP_OK);
        RANK_CHECK(ctx, ring_forward(set, &binding, &t->ring, &b, stream, &err) == DCP_OK);
        absent_note(ctx, start, dcp_nccl_set_wait(set, stream, &err), &err);
        /* the failure took the set's communicator, never the pool (not shared) */
        RANK_CHECK(ctx, set->aborted && set->pool != NULL && stream_drains(stream));
        (void)dcp_nccl_set_destroy(set, NULL);
        barrier(ctx);
        RANK_CHECK(ctx, ncclCommDestroy(ctx->pool) == ncclSuccess);
    } else
        absent_rank_returns(ctx, set);
    cudaStreamDestroy(stream);
    ring_buffers_free(&b);
    reroute_setup_free(t->plan, &r);
}

static void abort_with_ring_behind_stuck_reroute(void)
{
    absent_test t;
    dcp_plan *plan;
    int32_t s;
    memset(&t, 0, sizeof t);
    t.config = pool_config(1, 0);
    plan = host_plan(ABSENT_RANKS, 48, 12, ABSENT_SEED);
    CHECK(plan != NULL && plan->num_samples <= 64);
    if (!plan) return;
    for (s = 0; s < plan->num_samples; s++) t.holders[s] = ABSENT_RANK;
    t.plan = plan;
    pthread_mutex_init(&t.lock, NULL);
    ring_test_init(&t.ring, ABSENT_RANKS, ABSENT_RANKS, ABSENT_SEED);
    absent_run(&t, reroute_absent_rank, "did not finish");
    CHECK(t.stuck_reroutes > 0); /* the ring waited behind a stuck reroute somewhere */
    pthread_mutex_destroy(&t.lock);
    ring_test_free(&t.ring, ABSENT_RANKS);
    dcp_plan_destroy(plan);
}

/* Fault 4: with splitShare = 1 in the pool's config the splits share its abort flag, so
   aborting them aborts the pool: its kernels quit without a word. The set must say so (the
   pool is gone: set->pool NULL) rather than hand it back as usable; without sharing the pool
   stays and its all-reduce sums. */
static void shared_abort_rank(rank_ctx *ctx)
{
    const ncclConfig_t *config = &((const absent_test *)ctx->test)->config;
    dcp_nccl_options o = options_with(CLEAN_TIMEOUT_MS, ABSENT_RANKS, config);
    dcp_nccl_set *set = NULL;
    int32_t *x = NULL;
    cudaStream_t stream;
    dcp_error err;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    RANK_CHECK(ctx, dcp_nccl_set_create(ctx->pool, &o, &set, &err) == DCP_OK);
    if (!set) return;
    RANK_CHECK(ctx, dcp_nccl_plan_agree(set, NULL, stream, &err) == DCP_ERROR_INVALID_PLAN);
    RANK_CHECK(ctx, dcp_nccl_set_abort(set, 0, &err) == DCP_OK);
    if (set->pool) { /* the set says the pool is fine: it must be */
        x = device_int(1);
        RANK_CHECK(ctx, ncclAllReduce(x, x, 1, ncclInt32, ncclSum, set->pool, stream) ==
                            ncclSuccess);
        RANK_CHECK(ctx, stream_drains(stream) && *x == ABSENT_RANKS);
        RANK_CHECK(ctx, ncclCommDestroy(ctx->pool) == ncclSuccess);
    }
    RANK_CHECK(ctx, (set->pool == NULL) == (config->splitShare == 1));
    RANK_CHECK(ctx, dcp_nccl_set_destroy(set, &err) == DCP_OK);
    cudaStreamDestroy(stream);
    cudaFree(x);
}

static void shared_split_abort_then_pool_allreduce(void)
{
    static rank_ctx ctx[ABSENT_RANKS];
    absent_test t;
    int share;
    memset(&t, 0, sizeof t);
    for (share = 0; share < 2; share++) {
        t.config = pool_config(1, share);
        CHECK_EQ(run_ranks_with(ABSENT_RANKS, &t.config, shared_abort_rank, &t, ctx), 0);
        CHECK(job_clean());
        fake_job_destroy();
    }
}

/* Smaller fault 1: dcp_nccl_plan_agree copies the hash from pageable memory onto the caller's
   stream, which CUDA may do only once the stream drains: on a stream that does not drain
   within the timeout (rank 0's: a kernel that runs ABSENT_MS) it must time out by polling
   first, not block the host in the copy. */
static int absent_kernel(void *arg)
{
    (void)arg;
    fake_sleep_ms(ABSENT_MS);
    return 0;
}

static void agree_busy_rank(rank_ctx *ctx)
{
    const absent_test *t = (const absent_test *)ctx->test;
    dcp_nccl_options o = options_with(CLEAN_TIMEOUT_MS, ABSENT_RANKS, &t->config);
    dcp_nccl_set *set = NULL;
    cudaStream_t stream;
    dcp_error err;
    double start;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    RANK_CHECK(ctx, dcp_nccl_set_create(ctx->pool, &o, &set, &err) == DCP_OK);
    if (!set) return;
    RANK_CHECK(ctx, dcp_nccl_plan_agree(set, t->plan, stream, &err) == DCP_OK);
    set->timeout_ms = FAILURE_TIMEOUT_MS;
    if (ctx->rank == 0) fake_enqueue_host(stream, absent_kernel, NULL);
    start = fake_now_ms();
    absent_note(ctx, start, dcp_nccl_plan_agree(set, t->plan, stream, &err), &err);
    RANK_CHECK(ctx, set->aborted && set->pool == ctx->pool); /* the pool is not the set's */
    RANK_CHECK(ctx, stream_drains(stream));
    (void)dcp_nccl_set_destroy(set, NULL);
    RANK_CHECK(ctx, ncclCommDestroy(ctx->pool) == ncclSuccess);
    cudaStreamDestroy(stream);
}

static void plan_agree_waits_for_the_stream_by_polling(void)
{
    absent_test t;
    dcp_plan *plan = host_plan(ABSENT_RANKS, 48, 12, ABSENT_SEED);
    memset(&t, 0, sizeof t);
    CHECK(plan != NULL);
    if (!plan) return;
    t.config = pool_config(1, 0), t.plan = plan;
    t.hang_ms = ABSENT_MS / 2; /* a copy that waits for the kernel is a hang */
    absent_run(&t, agree_busy_rank, "did not finish");
    dcp_plan_destroy(plan);
}

/* Smaller fault 2: options.config NULL means NULL to ncclCommSplit, which in NCCL copies the
   pool's config (not NCCL's defaults). The set cannot know the pool's splitShare then, so it
   treats the splits as sharing the pool's abort flag: aborting them takes the pool along. */
static void null_config_rank(rank_ctx *ctx)
{
    const ncclConfig_t pool = fake_comm_config(ctx->pool);
    dcp_nccl_options o = options_with(CLEAN_TIMEOUT_MS, ABSENT_RANKS, NULL);
    dcp_nccl_set *set = NULL;
    ncclConfig_t got;
    dcp_error err;
    RANK_CHECK(ctx, dcp_nccl_set_create(ctx->pool, &o, &set, &err) == DCP_OK);
    if (!set) return;
    got = fake_comm_config(set->comm);
    RANK_CHECK(ctx, got.blocking == pool.blocking && got.cgaClusterSize == pool.cgaClusterSize &&
                        got.splitShare == pool.splitShare);
    RANK_CHECK(ctx, dcp_nccl_set_abort(set, 0, &err) == DCP_OK && set->pool == NULL);
    RANK_CHECK(ctx, dcp_nccl_set_destroy(set, &err) == DCP_OK);
}

static void null_config_inherits_the_pool_config(void)
{
    static rank_ctx ctx[ABSENT_RANKS];
    ncclConfig_t config = pool_config(0, 0);
    config.cgaClusterSize = 2; /* not NCCL's default: only inheritance gives it to a split */
    CHECK_EQ(run_ranks_with(ABSENT_RANKS, &config, null_config_rank, NULL, ctx), 0);
    CHECK(job_clean());
    fake_job_destroy();
}

/* An asynchronous error on one rank's split (injected) is found by dcp_nccl_set_check and by
   the wait, which aborts the set; its peers, whose ring then never completes, time out. */
static void async_error_ring_rank(rank_ctx *ctx)
{
    const absent_test *t = (const absent_test *)ctx->test;
    dcp_nccl_set *set = NULL;
    dcp_nccl_binding binding;
    ring_buffers b;
    cudaStream_t stream;
    dcp_error err;
    double start;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (!absent_ring_start(ctx, &set, &binding, &b, stream)) return;
    if (ctx->rank == 0) {
        fake_inject_async_error(set->comm, ncclRemoteError);
        RANK_CHECK(ctx, dcp_nccl_set_check(set, &err) == DCP_ERROR_NCCL);
        RANK_CHECK(ctx, strstr(err.message, "set's") && strstr(err.message, "remote process"));
    }
    start = fake_now_ms();
    RANK_CHECK(ctx, ring_forward(set, &binding, &t->ring, &b, stream, &err) == DCP_OK);
    absent_note(ctx, start, dcp_nccl_set_wait(set, stream, &err), &err);
    if (ctx->rank == 0) RANK_CHECK(ctx, strstr(ctx->message, "asynchronous error on the set's"));
    RANK_CHECK(ctx, set->aborted && stream_drains(stream));
    (void)dcp_nccl_set_destroy(set, NULL);
    cudaStreamDestroy(stream);
    ring_buffers_free(&b);
}

static void async_error_aborts_the_set(void)
{
    absent_test t;
    memset(&t, 0, sizeof t);
    t.config = pool_config(1, 0);
    ring_test_init(&t.ring, ABSENT_RANKS, ABSENT_RANKS, ABSENT_SEED + 1);
    absent_run(&t, async_error_ring_rank, "");
    ring_test_free(&t.ring, ABSENT_RANKS);
}

/* ---------------------------------------- any size and position on the set's one communicator */

/* Sizes that are not powers of two, on the override's blocks; one blocking pool of each. */
static void ring_any_size_equals_cpu_ring(void)
{
    ring_run(12, 3, 1, HOST_SEED + 40);
    ring_run(10, 5, 0, HOST_SEED + 41);
    ring_run(12, 6, 1, HOST_SEED + 42);
    ring_run(12, 12, 1, HOST_SEED + 43);
}

/* Groups that do not start at a multiple of their size (as an ANY plan places them), ranks
   before and after them idle. */
static void ring_unaligned_groups_equal_cpu_ring(void)
{
    ring_run_at(11, 3, 1, 1, HOST_SEED + 44);
    ring_run_at(13, 5, 2, 0, HOST_SEED + 45);
}

/* One rank's forward ring on its group with zero inputs (a sequence of 4 rows a rank), for
   the traffic it makes. */
#define PEER_ROWS_PER_RANK 4
static void zero_ring(rank_ctx *ctx, dcp_nccl_set *set, const dcp_nccl_binding *b,
                      cudaStream_t stream)
{
    int32_t cu[2] = {0, 0}, cu_padded[2] = {0, 0};
    dcp_attention_params params;
    dcp_cuda_layout layout;
    size_t scratch_bytes = 0;
    void *q = NULL, *out = NULL, *scratch = NULL;
    float *lse = NULL;
    dcp_error err;
    memset(&params, 0, sizeof params);
    params.num_heads = 1, params.head_dim = RING_HEAD_DIM, params.causal = 1;
    cu[1] = cu_padded[1] = PEER_ROWS_PER_RANK * b->cp;
    memset(&layout, 0, sizeof layout);
    layout.thd.num_sequences = 1, layout.thd.cu_seqlens = cu;
    layout.thd.cu_seqlens_padded = cu_padded;
    layout.thd.cp = b->cp, layout.local_rows = PEER_ROWS_PER_RANK;
    layout.max_seqlen_padded = cu_padded[1];
    RANK_CHECK(ctx, dcp_nccl_ring_scratch_size(&params, &layout, DCP_DTYPE_FLOAT32,
                                               DCP_RING_FORWARD, &scratch_bytes, &err) == DCP_OK);
    cudaMalloc(&q, PEER_ROWS_PER_RANK * RING_HEAD_DIM * sizeof(float));
    cudaMalloc(&out, PEER_ROWS_PER_RANK * RING_HEAD_DIM * sizeof(float));
    cudaMalloc((void **)&lse, PEER_ROWS_PER_RANK * sizeof(float));
    cudaMalloc(&scratch, scratch_bytes + 1);
    cudaMemsetAsync(q, 0, PEER_ROWS_PER_RANK * RING_HEAD_DIM * sizeof(float), stream);
    RANK_CHECK(ctx, dcp_nccl_ring_forward(set, b, &params, &layout, DCP_DTYPE_FLOAT32, q, q, q,
                                          out, lse, scratch, scratch_bytes, stream,
                                          &err) == DCP_OK);
    RANK_CHECK(ctx, dcp_nccl_set_wait(set, stream, &err) == DCP_OK);
    cudaFree(q), cudaFree(out), cudaFree(lse), cudaFree(scratch);
}

/* The sends this rank made on comm since `before` (peers and counts from fake_send_counts):
   the peers whose count grew, into grew[]; how many. */
#define PEER_CAP 64
static int peers_since(ncclComm_t comm, const int *peers, const unsigned long *before, int n,
                       int *grew)
{
    int now_peers[PEER_CAP], count, i, j, found = 0;
    unsigned long now[PEER_CAP];
    count = fake_send_counts(comm, now_peers, now, PEER_CAP);
    for (i = 0; i < count && i < PEER_CAP; i++) {
        unsigned long was = 0;
        for (j = 0; j < n; j++)
            if (peers[j] == now_peers[i]) was = before[j];
        if (now[i] > was) grew[found++] = now_peers[i];
    }
    return found;
}

/* Rings of every size 2 .. PEER_RANKS at four positions each, one after another on one set:
   the pool ranks each rank sent to in them, counted by the transport, are at most four, all
   within r +- 2 (a plain ring order, r + 1 in the group, would reach a new rank for every
   size). */
#define PEER_RANKS 16
static void peer_rank(rank_ctx *ctx)
{
    const ncclConfig_t config = pool_config(1, NCCL_CONFIG_UNDEF_INT);
    dcp_nccl_options o = options_with(CLEAN_TIMEOUT_MS, 0, &config);
    dcp_nccl_set *set = NULL;
    int peers[PEER_CAP], grew[PEER_CAP], n, i, count;
    unsigned long before[PEER_CAP];
    cudaStream_t stream;
    dcp_error err;
    int32_t cp, first;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    RANK_CHECK(ctx, dcp_nccl_set_create(ctx->pool, &o, &set, &err) == DCP_OK);
    if (!set) return;
    n = fake_send_counts(set->comm, peers, before, PEER_CAP); /* the agreement's tree */
    for (cp = 2; cp <= PEER_RANKS; cp++)
        for (first = 0; first < 4 && first + cp <= PEER_RANKS; first++) {
            ring_test t; /* only its cp and first: ring_bind's view */
            dcp_comm_scope scope;
            dcp_nccl_binding b;
            memset(&t, 0, sizeof t);
            t.cp = cp, t.first = first;
            if (first == 0) { /* the override's blocks, then back */
                if (ring_bind(ctx, set, &t, &scope, &b)) zero_ring(ctx, set, &b, stream);
                RANK_CHECK(ctx, dcp_nccl_override_end(set, &scope, &err) == DCP_OK);
            } else if (ring_bind(ctx, set, &t, &scope, &b))
                zero_ring(ctx, set, &b, stream);
        }
    count = peers_since(set->comm, peers, before, n, grew);
    RANK_CHECK(ctx, count <= 4);
    for (i = 0; i < count; i++) RANK_CHECK(ctx, abs(grew[i] - ctx->rank) <= 2);
    ctx->calls = count;
    RANK_CHECK(ctx, dcp_nccl_set_destroy(set, &err) == DCP_OK);
    pool_destroy(ctx, 0);
    cudaStreamDestroy(stream);
}

static void rings_of_every_size_send_to_at_most_four_peers(void)
{
    static rank_ctx ctx[PEER_RANKS];
    long most = 0;
    int r;
    CHECK_EQ(run_ranks(PEER_RANKS, 1, peer_rank, NULL, ctx), 0);
    for (r = 0; r < PEER_RANKS; r++)
        if (ctx[r].calls > most) most = ctx[r].calls;
    printf("  most pool ranks one rank's rings sent to: %ld\n", most);
    CHECK(most <= 4);
    CHECK(job_clean());
    fake_job_destroy();
}

/* ------------------------------------------------------- a split that fails, NCCL's way */

/* The transport: a rank of the parent is gone before the others split it; their split fails,
   and as NCCL does, each still gets its child (with the error as its state) and the parent's
   abort flag is up. Non-blocking (the group job) and blocking alike. */
static void failed_split_rank(rank_ctx *ctx)
{
    ncclComm_t child = NULL;
    long made = 0, alive = 0;
    ncclResult_t async = ncclSuccess, code;
    if (ctx->rank == 2) { /* gone */
        RANK_CHECK(ctx, ncclCommAbort(ctx->pool) == ncclSuccess);
        barrier(ctx);
        return;
    }
    barrier(ctx);
    code = ncclCommSplit(ctx->pool, 0, ctx->rank, &child, NULL);
    if (code == ncclInProgress) code = settled(ctx->pool);
    RANK_CHECK(ctx, code == ncclRemoteError);
    RANK_CHECK(ctx, child != NULL); /* written all the same */
    if (child) RANK_CHECK(ctx, ncclCommGetAsyncError(child, &async) == ncclSuccess &&
                                   async == ncclRemoteError);
    RANK_CHECK(ctx, fake_abort_raised(ctx->pool));
    if (child) RANK_CHECK(ctx, ncclCommAbort(child) == ncclSuccess);
    RANK_CHECK(ctx, ncclCommAbort(ctx->pool) == ncclSuccess);
    fake_comm_tally(ctx->rank, &made, &alive);
    RANK_CHECK(ctx, made == 1 && alive == 0);
}

static void transport_failed_split_writes_child_and_raises_parent_flag(void)
{
    int blocking;
    for (blocking = 0; blocking < 2; blocking++) {
        const ncclConfig_t config = pool_config(blocking, 0);
        transport_run(3, &config, failed_split_rank, 0);
        CHECK(job_clean());
        fake_job_destroy();
    }
}

/* The layer's path for it: a pool rank is gone before set creation; every other rank's
   dcp_nccl_set_create fails naming the split, has aborted the child NCCL wrote (no
   communicator of its own left alive) and the pool, whose abort flag NCCL raised. */
static void split_failed_rank(rank_ctx *ctx)
{
    const absent_test *t = (const absent_test *)ctx->test;
    dcp_nccl_options o = options_with(FAILURE_TIMEOUT_MS, 0, &t->config);
    dcp_nccl_set *set = NULL;
    long made = 0, alive = 0;
    dcp_error err;
    double start;
    if (ctx->rank == ABSENT_RANK) {
        RANK_CHECK(ctx, ncclCommAbort(ctx->pool) == ncclSuccess);
        barrier(ctx);
        return;
    }
    barrier(ctx);
    start = fake_now_ms();
    absent_note(ctx, start, dcp_nccl_set_create(ctx->pool, &o, &set, &err), &err);
    RANK_CHECK(ctx, set == NULL);
    fake_comm_tally(ctx->rank, &made, &alive);
    RANK_CHECK(ctx, made == 1 && alive == 0); /* the failed child aborted, not leaked */
}

static void failed_split_aborts_its_child_and_the_pool(void)
{
    absent_test t;
    int blocking;
    memset(&t, 0, sizeof t);
    for (blocking = 0; blocking < 2; blocking++) {
        printf("  %s\n", blocking ? "blocking" : "non-blocking");
        t.config = pool_config(blocking, 0);
        absent_run(&t, split_failed_rank, "ncclCommSplit");
    }
}

/* ------------------------------------------------- after a failure: rebuild without a rank */

#if DCP_NCCL_HAVE_SHRINK
#define SHRINK_RANKS 8
#define SHRINK_DEAD 5

typedef struct shrink_test {
    ring_test before; /* SHRINK_RANKS ranks in one group */
    ring_test after;  /* SHRINK_RANKS - 1 ranks in one group, by their new ranks */
    ncclConfig_t config;
} shrink_test;

/* Rank SHRINK_DEAD dies in a ring (aborts its set and its pool, and leaves); the others' ring
   times out and aborts their sets, never their pools; they then build a set from the pool
   without the dead rank (ncclCommShrink), renumbered, and its ring gives the CPU ring's
   results. */
static void shrink_rank(rank_ctx *ctx)
{
    const shrink_test *t = (const shrink_test *)ctx->test;
    const int32_t dead = SHRINK_DEAD;
    dcp_nccl_options o = options_with(FAILURE_TIMEOUT_MS, 0, &t->config);
    dcp_nccl_set *set = NULL;
    dcp_nccl_binding b;
    dcp_comm_scope scope;
    ring_buffers buffers;
    cudaStream_t stream;
    dcp_error err;
    dcp_status status;
    rank_ctx renamed;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    RANK_CHECK(ctx, dcp_nccl_set_create(ctx->pool, &o, &set, &err) == DCP_OK);
    if (!set) return;
    ring_buffers_make(&t->before, ctx->rank, stream, &buffers);
    RANK_CHECK(ctx, ring_bind(ctx, set, &t->before, &scope, &b));
    if (ctx->rank == dead) {
        (void)dcp_nccl_set_abort(set, 1, NULL); /* gone, pool and all */
        (void)dcp_nccl_set_destroy(set, NULL);
        ring_buffers_free(&buffers);
        cudaStreamDestroy(stream);
        return;
    }
    /* the dead rank's ring neighbours fail at once (their first hop cannot connect), the others
       when their wait times out */
    status = ring_forward(set, &b, &t->before, &buffers, stream, &err);
    if (status == DCP_OK) status = dcp_nccl_set_wait(set, stream, &err);
    RANK_CHECK(ctx, status == DCP_ERROR_NCCL);
    RANK_CHECK(ctx, set->aborted && set->pool == ctx->pool && stream_drains(stream));
    (void)dcp_nccl_set_destroy(set, NULL);
    ring_buffers_free(&buffers);
    /* the rebuilt set: the pool without the dead rank */
    o.timeout_ms = CLEAN_TIMEOUT_MS, o.exclude_ranks = &dead, o.exclude_count = 1;
    RANK_CHECK(ctx, dcp_nccl_set_create(ctx->pool, &o, &set, &err) == DCP_OK);
    if (!set) return;
    RANK_CHECK(ctx, set->ranks == SHRINK_RANKS - 1);
    RANK_CHECK(ctx, set->rank == ctx->rank - (ctx->rank > dead));
    renamed = *ctx, renamed.rank = set->rank, renamed.ranks = set->ranks;
    ring_buffers_make(&t->after, set->rank, stream, &buffers);
    RANK_CHECK(ctx, ring_bind(&renamed, set, &t->after, &scope, &b));
    RANK_CHECK(ctx, ring_forward(set, &b, &t->after, &buffers, stream, &err) == DCP_OK);
    RANK_CHECK(ctx, ring_backward(set, &b, &t->after, &buffers, stream, &err) == DCP_OK);
    RANK_CHECK(ctx, dcp_nccl_set_wait(set, stream, &err) == DCP_OK);
    ring_results_match(&renamed, &t->after, &buffers);
    ctx->failures += renamed.failures;
    RANK_CHECK(ctx, dcp_nccl_override_end(set, &scope, &err) == DCP_OK);
    RANK_CHECK(ctx, dcp_nccl_set_destroy(set, &err) == DCP_OK);
    RANK_CHECK(ctx, ncclCommDestroy(ctx->pool) == ncclSuccess);
    ring_buffers_free(&buffers);
    cudaStreamDestroy(stream);
}

static void shrink_rebuilds_the_set_without_a_dead_rank(void)
{
    static rank_ctx ctx[SHRINK_RANKS];
    shrink_test t;
    ring_test_init(&t.before, SHRINK_RANKS, SHRINK_RANKS, HOST_SEED + 46);
    ring_test_init(&t.after, SHRINK_RANKS - 1, SHRINK_RANKS - 1, HOST_SEED + 47);
    t.config = pool_config(1, 0);
    CHECK_EQ(run_ranks_with(SHRINK_RANKS, &t.config, shrink_rank, &t, ctx), 0);
    CHECK(no_hang_no_misuse());
    fake_job_destroy();
    ring_test_free(&t.before, SHRINK_RANKS);
    ring_test_free(&t.after, SHRINK_RANKS - 1);
}
#endif

/* ---------------------------------------- a group's own communicator, only on request */

#define GROUP_RANKS 12
#define GROUP_CP 3
#define GROUP_ROOT 2
#define GROUP_MESSAGE_BYTES 64 /* >= DCP_METADATA_MIN_BYTES: a broadcast takes libdcp buffers */

/* Every rank asks for its group's own communicator (groups of 3 of 12): a communicator of the
   group's ranks, made once (the second request returns it), that works (an all-reduce sums
   3); the group broadcast reaches every member from member 2; at cp 1 there is none, and the
   broadcast copies. The set made two communicators on this rank, and destroy ends both. */
static void group_comm_rank(rank_ctx *ctx)
{
    const ncclConfig_t config = pool_config(1, NCCL_CONFIG_UNDEF_INT);
    dcp_nccl_options o = options_with(CLEAN_TIMEOUT_MS, 0, &config);
    dcp_nccl_set *set = NULL;
    dcp_nccl_binding b;
    dcp_comm_scope scope;
    ncclComm_t comm = NULL, again = NULL;
    char message[GROUP_MESSAGE_BYTES];
    void *received = NULL;
    size_t size = 0;
    int32_t *x = device_int(1);
    int count = 0, me = -1;
    long made = 0, alive = 0;
    cudaStream_t stream;
    dcp_error err;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    RANK_CHECK(ctx, dcp_nccl_set_create(ctx->pool, &o, &set, &err) == DCP_OK);
    if (!set) return;
    memset(&scope, 0, sizeof scope);
    RANK_CHECK(ctx, dcp_nccl_override_begin(set, GROUP_CP, &scope, &b, &err) == DCP_OK);
    RANK_CHECK(ctx, dcp_nccl_group_comm(set, NULL, stream, &comm, &err) == DCP_OK && comm);
    RANK_CHECK(ctx, dcp_nccl_group_comm(set, &b, stream, &again, &err) == DCP_OK && again == comm);
    RANK_CHECK(ctx, ncclCommCount(comm, &count) == ncclSuccess && count == GROUP_CP);
    RANK_CHECK(ctx, ncclCommUserRank(comm, &me) == ncclSuccess && me == b.rank);
    RANK_CHECK(ctx, ncclAllReduce(x, x, 1, ncclInt32, ncclSum, comm, stream) == ncclSuccess);
    RANK_CHECK(ctx, stream_drains(stream) && *x == GROUP_CP);
    memset(message, 0, sizeof message);
    snprintf(message, sizeof message, "group from %d", (int)b.first_rank);
    RANK_CHECK(ctx, dcp_nccl_group_broadcast_bytes(set, &b, GROUP_ROOT, message, sizeof message,
                                                   b.rank == GROUP_ROOT ? NULL : &received,
                                                   &size, stream, &err) == DCP_OK);
    RANK_CHECK(ctx, b.rank == GROUP_ROOT ||
                        (size == sizeof message && memcmp(received, message, size) == 0));
    if (received) dcp_free(&set->allocator, received), received = NULL;
    RANK_CHECK(ctx, dcp_nccl_group_broadcast_bytes(set, &b, GROUP_CP, message, sizeof message,
                                                   NULL, NULL, stream,
                                                   &err) == DCP_ERROR_INVALID_ARGUMENT);
    RANK_CHECK(ctx, dcp_nccl_override_end(set, &scope, &err) == DCP_OK);
    RANK_CHECK(ctx, dcp_nccl_group_comm(set, NULL, stream, &comm, &err) == DCP_OK && !comm);
    RANK_CHECK(ctx, dcp_nccl_group_broadcast_bytes(set, NULL, 0, message, sizeof message,
                                                   &received, &size, stream, &err) == DCP_OK);
    RANK_CHECK(ctx, size == sizeof message && received && memcmp(received, message, size) == 0);
    if (received) dcp_free(&set->allocator, received);
    fake_comm_tally(ctx->rank, &made, &alive);
    RANK_CHECK(ctx, made == 2 && alive == 2);
    RANK_CHECK(ctx, dcp_nccl_set_destroy(set, &err) == DCP_OK);
    fake_comm_tally(ctx->rank, &made, &alive);
    RANK_CHECK(ctx, alive == 0);
    pool_destroy(ctx, 0);
    cudaStreamDestroy(stream);
    cudaFree(x);
}

static void group_comm_and_broadcast_on_request(void)
{
    static rank_ctx ctx[GROUP_RANKS];
    CHECK_EQ(run_ranks(GROUP_RANKS, 1, group_comm_rank, NULL, ctx), 0);
    CHECK(job_clean());
    fake_job_destroy();
}

/* -------------------------------------------------- a failure injected at every call */

typedef struct fault_test {
    ring_test ring;
    const dcp_plan *plan;
    ncclConfig_t config; /* the pools' (known to the set: a failure never touches the pool) */
    int faulty_rank;
    long fault_at; /* 0: none (the counting run) */
} fault_test;

#define FAULT_BROADCAST_BYTES 100

/* One step as a program runs it, stopping at its first error: agree on the plan, ring forward
   and backward under an override, wait, broadcast. */
static dcp_status fault_step(rank_ctx *ctx, dcp_nccl_set *set, cudaStream_t stream,
                             ring_buffers *b, dcp_error *err)
{
    const fault_test *t = (const fault_test *)ctx->test;
    const ring_test *ring = &t->ring;
    unsigned char bytes[FAULT_BROADCAST_BYTES];
    void *received = NULL;
    size_t received_size = 0;
    dcp_comm_scope scope;
    dcp_nccl_binding binding;
    dcp_status status, ended;
    memset(bytes, 0x5A, sizeof bytes);
    if ((status = dcp_nccl_plan_agree(set, t->plan, stream, err)) != DCP_OK) return status;
    memset(&scope, 0, sizeof scope);
    if ((status = dcp_nccl_override_begin(set, ring->cp, &scope, &binding, err)) != DCP_OK)
        return status;
    status = ring_forward(set, &binding, ring, b, stream, err);
    if (status == DCP_OK) status = ring_backward(set, &binding, ring, b, stream, err);
    ended = dcp_nccl_override_end(set, &scope, NULL); /* on every path */
    RANK_CHECK(ctx, ended == DCP_OK);
    if (status != DCP_OK) return status;
    if ((status = dcp_nccl_set_wait(set, stream, err)) != DCP_OK) return status;
    status = dcp_nccl_broadcast_bytes(set, NULL, 0, bytes, sizeof bytes,
                                      ctx->rank == 0 ? NULL : &received, &received_size, stream,
                                      err);
    if (status == DCP_OK && ctx->rank != 0)
        RANK_CHECK(ctx, received_size == sizeof bytes && memcmp(received, bytes, sizeof bytes) == 0);
    if (received) dcp_free(&set->allocator, received);
    return status;
}

/* The ring's results on this rank equal the CPU ring's. */
static void fault_results_match(rank_ctx *ctx, const ring_test *ring, const ring_buffers *b)
{
    const int64_t qw = RING_HEADS * RING_HEAD_DIM, kw = RING_KV_HEADS * RING_HEAD_DIM;
    RANK_CHECK(ctx, relative_error((float *)b->d[RING_OUT], ring->out[ctx->rank],
                                   ring->local_rows * qw) <= RING_TOLERANCE);
    RANK_CHECK(ctx, relative_error((float *)b->d[RING_DK], ring->dk[ctx->rank],
                                   ring->local_rows * kw) <= RING_TOLERANCE);
}

/* After the faulty step, failed or not: the pool is untouched (the set's config says it is not
   shared), so every rank destroys its set, makes a new one from the same pool and trains on:
   the same step, clean, gives the CPU ring's results; the pool's own all-reduce still sums. */
static void fault_recreate_and_train_on(rank_ctx *ctx, dcp_nccl_set *set, ring_buffers *b,
                                        cudaStream_t stream)
{
    const fault_test *t = (const fault_test *)ctx->test;
    dcp_nccl_options o = options_with(CLEAN_TIMEOUT_MS, t->ring.cp, &t->config);
    dcp_nccl_set *again = NULL;
    int32_t *x = device_int(1);
    dcp_error err;
    RANK_CHECK(ctx, set->pool == ctx->pool); /* never aborted by the set */
    (void)dcp_nccl_set_destroy(set, NULL);
    RANK_CHECK(ctx, ncclAllReduce(x, x, 1, ncclInt32, ncclSum, ctx->pool, stream) == ncclSuccess);
    RANK_CHECK(ctx, stream_drains(stream) && *x == ctx->ranks);
    RANK_CHECK(ctx, dcp_nccl_set_create(ctx->pool, &o, &again, &err) == DCP_OK);
    if (again) {
        RANK_CHECK(ctx, fault_step(ctx, again, stream, b, &err) == DCP_OK);
        fault_results_match(ctx, &t->ring, b);
        RANK_CHECK(ctx, dcp_nccl_set_destroy(again, &err) == DCP_OK);
    }
    cudaFree(x);
}

static void fault_rank(rank_ctx *ctx)
{
    const fault_test *t = (const fault_test *)ctx->test;
    const ring_test *ring = &t->ring;
    dcp_nccl_options o = options_with(CLEAN_TIMEOUT_MS, ring->cp, &t->config);
    dcp_nccl_set *set = NULL;
    ring_buffers b;
    cudaStream_t stream;
    dcp_error err;
    double start;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    RANK_CHECK(ctx, dcp_nccl_set_create(ctx->pool, &o, &set, &err) == DCP_OK);
    if (!set) return;
    /* the counting run must not fail by a slow machine's timeout */
    set->timeout_ms = t->fault_at ? FAILURE_TIMEOUT_MS : CLEAN_TIMEOUT_MS;
    ring_buffers_make(ring, ctx->rank, stream, &b);
    fake_fault_arm(ctx->rank == t->faulty_rank ? t->fault_at : 0);
    start = fake_now_ms();
    ctx->status = fault_step(ctx, set, stream, &b, &err);
    ctx->elapsed_ms = fake_now_ms() - start;
    ctx->calls = fake_fault_count();
    fake_fault_arm(0);
    if (ctx->status != DCP_OK) {
        snprintf(ctx->message, sizeof ctx->message, "%s", err.message);
        /* a failed step leaves the set aborted (never half-enqueued traffic) ... */
        RANK_CHECK(ctx, set->aborted == 1);
    } else if (t->fault_at == 0)
        fault_results_match(ctx, ring, &b);
    /* ... and the streams joined: everything enqueued drains */
    RANK_CHECK(ctx, stream_drains(stream));
    RANK_CHECK(ctx, ctx->elapsed_ms < 4 * FAILURE_TIMEOUT_MS + TIMEOUT_SLACK_MS);
    fault_recreate_and_train_on(ctx, set, &b, stream);
    pool_destroy(ctx, 0);
    cudaStreamDestroy(stream);
    ring_buffers_free(&b);
}

/* Most runs of the fault loop (each failing run costs about one timeout). */
#ifndef FAULT_RUNS
#define FAULT_RUNS 24
#endif

static void fault_at_every_call_leaves_ranks_consistent(void)
{
    enum { RANKS = 4 };
    static rank_ctx ctx[RANKS];
    fault_test t;
    long calls, at, stride, runs = 0, faulted = 0;
    int r;
    memset(&t, 0, sizeof t);
    ring_test_init(&t.ring, RANKS, 4, HOST_SEED + 9);
    t.plan = host_plan(RANKS, 48, 12, HOST_SEED + 10);
    t.config = pool_config(1, NCCL_CONFIG_UNDEF_INT); /* as run_ranks makes the pools */
    t.faulty_rank = 1;
    CHECK(t.plan != NULL);
    if (!t.plan) return;
    CHECK_EQ(run_ranks(RANKS, 1, fault_rank, &t, ctx), 0); /* counting run, no fault */
    for (r = 0; r < RANKS; r++) CHECK_EQ(ctx[r].status, DCP_OK);
    CHECK(job_clean());
    fake_job_destroy();
    calls = ctx[t.faulty_rank].calls;
    stride = calls / FAULT_RUNS + 1;
    printf("  %ld hooked calls on rank %d, a fault at every %ld-th\n", calls, t.faulty_rank, stride);
    for (at = 1; at <= calls; at += stride) {
        t.fault_at = at;
        CHECK_EQ(run_ranks(RANKS, 1, fault_rank, &t, ctx), 0);
        runs++;
        faulted += ctx[t.faulty_rank].status != DCP_OK;
        /* the faulty rank fails, says which call, and reports that call's library */
        CHECK(strstr(ctx[t.faulty_rank].message, "from nccl") ||
              strstr(ctx[t.faulty_rank].message, "from cuda"));
        CHECK_EQ(ctx[t.faulty_rank].status, strstr(ctx[t.faulty_rank].message, "from nccl")
                                                 ? DCP_ERROR_NCCL
                                                 : DCP_ERROR_CUDA);
        if (test_current_failures) {
            printf("  fault at call %ld: %s\n", at, ctx[t.faulty_rank].message);
            break;
        }
        fake_job_destroy();
    }
    fake_job_destroy();
    CHECK(runs > 0 && faulted == runs);
    ring_test_free(&t.ring, RANKS);
    dcp_plan_destroy((dcp_plan *)t.plan);
}

#ifdef __cplusplus
/* ------------------------------------------ C++: the RAII override guard (this file as C++) */

struct guard_escape {}; /* what the scope throws */

static void guard_rank(rank_ctx *ctx)
{
    dcp_nccl_options o = options_with(CLEAN_TIMEOUT_MS, 0, NULL);
    dcp_nccl_set *set = NULL;
    dcp_nccl_binding trained, now;
    dcp_error err;
    RANK_CHECK(ctx, dcp_nccl_set_create(ctx->pool, &o, &set, &err) == DCP_OK);
    if (!set) return;
    dcp_nccl_set_current(set, &trained); /* cp 1, as trained */
    try { /* an exception leaves the scope: the destructor restores */
        dcp_nccl_cp_guard guard(set, 4);
        RANK_CHECK(ctx, guard.status() == DCP_OK && guard.binding().cp == 4);
        dcp_nccl_set_current(set, &now);
        RANK_CHECK(ctx, now.cp == 4 && now.first_rank == ctx->rank / 4 * 4);
        throw guard_escape();
    } catch (const guard_escape &) {
    }
    dcp_nccl_set_current(set, &now);
    RANK_CHECK(ctx, memcmp(&now, &trained, sizeof now) == 0 && set->state.depth == 0);
    { /* a failed begin opens nothing and its destructor ends nothing */
        dcp_nccl_cp_guard outer(set, 2);
        {
            dcp_nccl_cp_guard bad(set, 0);
            RANK_CHECK(ctx, bad.status() == DCP_ERROR_INVALID_ARGUMENT);
        }
        RANK_CHECK(ctx, set->state.depth == 1 && set->state.override_cp == 2);
        RANK_CHECK(ctx, outer.end(&err) == DCP_OK); /* ended early: the destructor is a no-op */
        RANK_CHECK(ctx, set->state.depth == 0);
    }
    { /* heap guards ended out of order: the outer end closes the inner scope too */
        dcp_nccl_cp_guard *outer = new dcp_nccl_cp_guard(set, 2);
        dcp_nccl_cp_guard *inner = new dcp_nccl_cp_guard(set, 4);
        RANK_CHECK(ctx, set->state.depth == 2);
        delete outer;
        RANK_CHECK(ctx, set->state.depth == 0);
        delete inner; /* refused harmlessly */
        dcp_nccl_set_current(set, &now);
        RANK_CHECK(ctx, memcmp(&now, &trained, sizeof now) == 0 && set->state.depth == 0);
    }
    RANK_CHECK(ctx, dcp_nccl_set_destroy(set, &err) == DCP_OK);
    pool_destroy(ctx, 0);
}

static void cxx_guard_is_raii(void)
{
    enum { RANKS = 8 };
    static rank_ctx ctx[RANKS];
    CHECK_EQ(run_ranks(RANKS, 1, guard_rank, NULL, ctx), 0);
    CHECK(job_clean());
    fake_job_destroy();
}
#endif

/* With no allocator in the options, the set and its scratch come from DCP_MALLOC and go back
   through DCP_FREE, block for block (the whole control plane at 512 ranks). */
static void compile_time_allocator_is_used_both_ways(void)
{
    long allocs, frees, foreign;
    pthread_mutex_lock(&counted_lock);
    counted_allocs = counted_frees = counted_foreign_frees = 0;
    pthread_mutex_unlock(&counted_lock);
    control_plane_512_ranks();
    pthread_mutex_lock(&counted_lock);
    allocs = counted_allocs, frees = counted_frees, foreign = counted_foreign_frees;
    pthread_mutex_unlock(&counted_lock);
    printf("  DCP_MALLOC %ld, DCP_FREE %ld, foreign frees %ld\n", allocs, frees, foreign);
    CHECK(allocs > 0);
    CHECK_EQ(foreign, 0);
    CHECK_EQ(frees, allocs);
}

/* ------------------------------------------- head-parallel all-to-all at 64 ranks (hybrid)
   The device copy of the segment lists is replaced by dcp.h's host copy; every microbatch of a
   dynamic plan over 64 ranks switches to its group (c from 1 to 16), prepares, runs cp2hp
   against dcp_a2a_cp2hp of the whole group (built here from every member's view) and hp2cp
   back to the input. */

typedef struct a2a_call {
    const dcp_a2a_segment *segments;
    int64_t count, copies;
    size_t slice_bytes, local_pitch;
    dcp_a2a_direction direction;
    void *local, *message;
} a2a_call;

static int a2a_run(void *arg)
{
    const a2a_call *c = (const a2a_call *)arg;
    return dcp_a2a_segments_copy(c->segments, c->count, c->copies, c->slice_bytes,
                                 c->local_pitch, c->direction, c->local, c->message,
                                 NULL) != DCP_OK;
}

dcp_status dcp_cuda_a2a_copy(const dcp_a2a_segment *segments, int64_t count, int64_t copies,
                             int64_t total_rows, size_t slice_bytes, size_t local_pitch,
                             dcp_a2a_direction direction, void *local, void *message,
                             void *stream, dcp_error *error)
{
    a2a_call *c;
    if (count < 0 || copies < 0 || copies > count || total_rows < 0 || slice_bytes == 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "a2a copy: count %lld",
                             (long long)count);
    c = (a2a_call *)malloc(sizeof *c);
    c->segments = segments, c->count = count, c->copies = copies;
    c->slice_bytes = slice_bytes, c->local_pitch = local_pitch, c->direction = direction;
    c->local = local, c->message = message;
    if (fake_enqueue_host((cudaStream_t)stream, a2a_run, c) != cudaSuccess)
        return dcp_error_set(error, DCP_ERROR_CUDA, "fake launch refused (NULL stream)");
    return DCP_OK;
}

/* Channels of 3 bytes (an odd element size): the host copy takes any. */
#define A2A_CHANNEL_BYTES 3

static unsigned char a2a_byte(int32_t sample, int64_t position, size_t byte)
{
    return (unsigned char)(1 + (sample * 131 + position * 17 + (int64_t)byte * 7) % 251);
}

/* Rank `rank`'s CP buffer of microbatch k: each valid row from its sample and position,
   padding rows 0. NULL for an idle rank. */
static unsigned char *a2a_cp_buffer(const dcp_plan *plan, int32_t rank, int32_t k,
                                    size_t row_bytes, dcp_rank_view **view_out)
{
    dcp_rank_view *view = NULL;
    unsigned char *buffer;
    int32_t *slot;
    int64_t *position, row;
    size_t b;
    if (dcp_rank_view_create(plan, rank, k, &view, NULL) != DCP_OK) return NULL;
    buffer = (unsigned char *)calloc((size_t)view->local_tokens * row_bytes + 1, 1);
    slot = (int32_t *)malloc((size_t)view->local_tokens * sizeof(int32_t) + 4);
    position = (int64_t *)malloc((size_t)view->local_tokens * sizeof(int64_t) + 8);
    (void)dcp_rank_view_positions(view, slot, position, NULL);
    for (row = 0; row < view->local_tokens; row++)
        if (position[row] >= 0)
            for (b = 0; b < row_bytes; b++)
                buffer[(size_t)row * row_bytes + b] =
                    a2a_byte(view->samples[slot[row]], position[row], b);
    free(slot), free(position);
    *view_out = view;
    return buffer;
}

static void a2a_microbatch(rank_ctx *ctx, dcp_nccl_set *set, const dcp_plan *plan, int32_t k,
                           int32_t channels, cudaStream_t stream)
{
    dcp_nccl_binding b;
    dcp_rank_view *view = NULL;
    dcp_thd_layout layout;
    dcp_a2a_shape s;
    dcp_nccl_a2a a2a;
    dcp_error err;
    unsigned char **group_cp, **group_hp, *cp_in;
    void *device_ws = NULL, *host_ws, *hp_out = NULL, *cp_out = NULL, *d_in = NULL;
    size_t device_bytes = 0, host_bytes = 0, row_bytes = (size_t)channels * A2A_CHANNEL_BYTES;
    int32_t m;
    RANK_CHECK(ctx, dcp_nccl_set_switch_plan(set, plan, k, &b, &err) == DCP_OK);
    if (b.idle) return;
    cp_in = a2a_cp_buffer(plan, ctx->rank, k, row_bytes, &view);
    RANK_CHECK(ctx, cp_in != NULL);
    if (!cp_in) return;
    layout.num_sequences = view->num_samples, layout.cp = view->cp;
    layout.cu_seqlens = view->cu_seqlens, layout.cu_seqlens_padded = view->cu_seqlens_padded;
    RANK_CHECK(ctx, dcp_a2a_shape_get(&layout, b.rank, channels, A2A_CHANNEL_BYTES, &s, &err) ==
                        DCP_OK);
    /* the CPU reference of the whole group, from every member's own view */
    group_cp = (unsigned char **)calloc((size_t)b.cp, sizeof *group_cp);
    group_hp = (unsigned char **)calloc((size_t)b.cp, sizeof *group_hp);
    for (m = 0; m < b.cp; m++) {
        dcp_rank_view *member = NULL;
        group_cp[m] = a2a_cp_buffer(plan, b.first_rank + m, k, row_bytes, &member);
        group_hp[m] = (unsigned char *)malloc((size_t)s.hp_rows * s.slice_bytes + 1);
        dcp_rank_view_destroy(member);
    }
    RANK_CHECK(ctx, dcp_a2a_cp2hp(&layout, channels, A2A_CHANNEL_BYTES,
                                  (const void *const *)group_cp, (void *const *)group_hp,
                                  &err) == DCP_OK);
    RANK_CHECK(ctx, dcp_nccl_a2a_workspace_size(&layout, b.rank, channels, A2A_CHANNEL_BYTES,
                                                &device_bytes, &host_bytes, &err) == DCP_OK);
    RANK_CHECK(ctx, (device_bytes == 0) == (b.cp == 1) && (host_bytes == 0) == (b.cp == 1));
    cudaMalloc(&device_ws, device_bytes + 1); /* poisoned */
    host_ws = malloc(host_bytes + 8);
    cudaMalloc(&d_in, (size_t)s.cp_rows * row_bytes + 1);
    cudaMalloc(&hp_out, (size_t)s.hp_rows * s.slice_bytes + 1);
    cudaMalloc(&cp_out, (size_t)s.cp_rows * row_bytes + 1);
    memcpy(d_in, cp_in, (size_t)s.cp_rows * row_bytes); /* fake device memory is the host's */
    RANK_CHECK(ctx, dcp_nccl_a2a_prepare(set, &b, &layout, channels, A2A_CHANNEL_BYTES, device_ws,
                                         device_bytes, host_ws, host_bytes, &a2a, stream,
                                         &err) == DCP_OK);
    RANK_CHECK(ctx, dcp_nccl_a2a_cp2hp(set, &a2a, d_in, hp_out, stream, &err) == DCP_OK);
    RANK_CHECK(ctx, dcp_nccl_a2a_hp2cp(set, &a2a, hp_out, cp_out, stream, &err) == DCP_OK);
    RANK_CHECK(ctx, dcp_nccl_set_wait(set, stream, &err) == DCP_OK);
    RANK_CHECK(ctx, memcmp(hp_out, group_hp[b.rank], (size_t)s.hp_rows * s.slice_bytes) == 0);
    RANK_CHECK(ctx, memcmp(cp_out, cp_in, (size_t)s.cp_rows * row_bytes) == 0);
    for (m = 0; m < b.cp; m++) free(group_cp[m]), free(group_hp[m]);
    free(group_cp), free(group_hp), free(cp_in), free(host_ws);
    cudaFree(device_ws), cudaFree(d_in), cudaFree(hp_out), cudaFree(cp_out);
    dcp_rank_view_destroy(view);
}

/* A plan's all-to-alls with `channels` channels (divisible by every group size). */
typedef struct a2a_test {
    const dcp_plan *plan;
    int32_t channels;
} a2a_test;

static void a2a_rank(rank_ctx *ctx)
{
    const a2a_test *t = (const a2a_test *)ctx->test;
    const dcp_plan *plan = t->plan;
    dcp_nccl_options o = options_with(CLEAN_TIMEOUT_MS, 0, NULL);
    dcp_nccl_set *set = NULL;
    cudaStream_t stream;
    dcp_error err;
    int32_t k;
    o.plan_config = &plan->config;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    RANK_CHECK(ctx, dcp_nccl_set_create(ctx->pool, &o, &set, &err) == DCP_OK);
    if (set) {
        for (k = 0; k < plan->num_microbatches; k++)
            a2a_microbatch(ctx, set, plan, k, t->channels, stream);
        RANK_CHECK(ctx, dcp_nccl_set_destroy(set, &err) == DCP_OK);
    }
    pool_destroy(ctx, 0);
    cudaStreamDestroy(stream);
}

/* A plan whose groups span c = 1 .. A2A_MAX_CP (of the size set `sizes`; head_count, when
   not 0, admits only the sizes dividing it): lengths up to A2A_MAX_CP x M tokens. */
#define A2A_MAX_CP 16
#define A2A_TOKENS_PER_RANK 24
static dcp_plan *a2a_plan(int32_t ranks, uint64_t seed, dcp_cp_sizes sizes, int32_t head_count)
{
    dcp_config c = make_config(ranks, A2A_TOKENS_PER_RANK);
    int64_t lengths[160];
    dcp_plan *plan = NULL;
    dcp_rng rng;
    int32_t i;
    c.max_cp = head_count ? head_count : A2A_MAX_CP;
    c.cp_sizes = sizes, c.head_count = head_count;
    dcp_rng_seed(&rng, seed);
    for (i = 0; i < 160; i++) /* mostly short, every tenth near the largest group's room */
        lengths[i] = 1 + (int64_t)dcp_rng_below(&rng, i % 10 == 0
                                                          ? c.max_cp * A2A_TOKENS_PER_RANK - 40
                                                          : 3 * A2A_TOKENS_PER_RANK);
    if (dcp_plan_create(&c, lengths, 160, &plan, NULL) != DCP_OK) plan = NULL;
    return plan;
}

static void a2a_64_ranks_equals_cpu_reference(void)
{
    enum { RANKS = 64 };
    static rank_ctx ctx[RANKS];
    dcp_plan *plan = a2a_plan(RANKS, HOST_SEED + 7, DCP_CP_SIZES_POW2, 0);
    a2a_test t;
    int32_t i, largest = 1;
    printf("  seed %d\n", HOST_SEED + 7);
    CHECK(plan != NULL);
    if (!plan) return;
    for (i = 0; i < plan->num_groups; i++)
        if (plan->groups[i].cp > largest) largest = plan->groups[i].cp;
    printf("  %d microbatches, largest group %d\n", (int)plan->num_microbatches, (int)largest);
    CHECK(largest >= 8); /* the plan exercises wide groups */
    t.plan = plan, t.channels = 2 * A2A_MAX_CP; /* divisible by every power of two to 16 */
    CHECK_EQ(run_ranks(RANKS, 1, a2a_rank, &t, ctx), 0);
    CHECK(job_clean());
    fake_job_destroy();
    dcp_plan_destroy(plan);
}

/* Group sizes that are not powers of two where the heads divide: 12 heads on 36 ranks with
   every size allowed (dcp_config.head_count: 1, 2, 3, 4, 6 and 12), the channels (heads x 2)
   split c ways. */
#define A2A_HEADS 12
static void a2a_non_power_of_two_groups_equal_cpu_reference(void)
{
    enum { RANKS = 36 };
    static rank_ctx ctx[RANKS];
    dcp_plan *plan = a2a_plan(RANKS, HOST_SEED + 8, DCP_CP_SIZES_ANY, A2A_HEADS);
    a2a_test t;
    int32_t i, odd = 0;
    printf("  seed %d\n", HOST_SEED + 8);
    CHECK(plan != NULL);
    if (!plan) return;
    for (i = 0; i < plan->num_groups; i++) {
        CHECK_EQ(A2A_HEADS % plan->groups[i].cp, 0);
        odd += !dcp_is_pow2(plan->groups[i].cp);
    }
    printf("  %d groups, %d of a size that is not a power of two\n", (int)plan->num_groups,
           (int)odd);
    CHECK(odd > 0);
    t.plan = plan, t.channels = 2 * A2A_HEADS;
    CHECK_EQ(run_ranks(RANKS, 1, a2a_rank, &t, ctx), 0);
    CHECK(job_clean());
    fake_job_destroy();
    dcp_plan_destroy(plan);
}

/* cp 1 needs nothing: no workspace, no traffic, no copy when the buffers are one. */
static void a2a_cp1_is_a_no_op(void)
{
    int32_t cu[] = {0, 5, 12}, cu_padded[] = {0, 8, 16};
    dcp_thd_layout layout = {2, cu, cu_padded, 1};
    size_t device_bytes = 1, host_bytes = 1;
    dcp_error err;
    CHECK_EQ(dcp_nccl_a2a_workspace_size(&layout, 0, 4, 2, &device_bytes, &host_bytes, &err),
             DCP_OK);
    CHECK_EQ(device_bytes, 0);
    CHECK_EQ(host_bytes, 0);
    layout.cp = 4;
    CHECK_EQ(dcp_nccl_a2a_workspace_size(&layout, 0, 6, 2, &device_bytes, &host_bytes, &err),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.message, "channels 6");
}

/* A failure injected at every hooked call of an all-to-all step (prepare, cp2hp, hp2cp,
   wait) on one rank of a group of 4: every rank returns within the timeout with an error or
   the right bytes, the failed rank's set is aborted, every stream drains. */
typedef struct a2a_fault_test {
    int faulty_rank;
    long fault_at; /* 0: none (the counting run) */
} a2a_fault_test;

#define A2A_FAULT_CP 4
#define A2A_FAULT_CHANNELS 8

static dcp_status a2a_fault_step(rank_ctx *ctx, dcp_nccl_set *set, cudaStream_t stream,
                                 dcp_error *err)
{
    static const int32_t cu[] = {0, 5, 9, 30}, cu_padded[] = {0, 8, 16, 40};
    const dcp_thd_layout layout = {3, cu, cu_padded, A2A_FAULT_CP};
    const size_t row_bytes = A2A_FAULT_CHANNELS * sizeof(float);
    dcp_comm_scope scope;
    dcp_nccl_binding b;
    dcp_nccl_a2a a2a;
    dcp_a2a_shape s;
    dcp_status status, ended;
    void *device_ws = NULL, *host_ws, *cp_in = NULL, *hp = NULL, *cp_out = NULL;
    size_t device_bytes = 0, host_bytes = 0, byte;
    int32_t i;
    int64_t local;
    memset(&scope, 0, sizeof scope);
    if ((status = dcp_nccl_override_begin(set, A2A_FAULT_CP, &scope, &b, err)) != DCP_OK)
        return status;
    RANK_CHECK(ctx, dcp_a2a_shape_get(&layout, b.rank, A2A_FAULT_CHANNELS, sizeof(float), &s,
                                      NULL) == DCP_OK);
    RANK_CHECK(ctx, dcp_nccl_a2a_workspace_size(&layout, b.rank, A2A_FAULT_CHANNELS,
                                                sizeof(float), &device_bytes, &host_bytes,
                                                NULL) == DCP_OK);
    cudaMalloc(&device_ws, device_bytes), cudaMalloc(&cp_in, (size_t)s.cp_rows * row_bytes);
    cudaMalloc(&hp, (size_t)s.hp_rows * s.slice_bytes);
    cudaMalloc(&cp_out, (size_t)s.cp_rows * row_bytes);
    host_ws = malloc(host_bytes);
    for (i = 0; i < layout.num_sequences; i++) /* valid rows: bytes of (rank, row); padding 0 */
        for (local = 0; local < (cu_padded[i + 1] - cu_padded[i]) / A2A_FAULT_CP; local++)
            for (byte = 0; byte < row_bytes; byte++)
                ((unsigned char *)cp_in)[(size_t)(cu_padded[i] / A2A_FAULT_CP + local) *
                                             row_bytes + byte] =
                    dcp_zigzag_position(cu_padded[i + 1] - cu_padded[i], A2A_FAULT_CP, b.rank,
                                        local) < cu[i + 1] - cu[i]
                        ? (unsigned char)(1 + b.rank * 37 + local * 11 + (int64_t)byte)
                        : 0;
    status = dcp_nccl_a2a_prepare(set, &b, &layout, A2A_FAULT_CHANNELS, sizeof(float), device_ws,
                                  device_bytes, host_ws, host_bytes, &a2a, stream, err);
    if (status == DCP_OK) status = dcp_nccl_a2a_cp2hp(set, &a2a, cp_in, hp, stream, err);
    if (status == DCP_OK) status = dcp_nccl_a2a_hp2cp(set, &a2a, hp, cp_out, stream, err);
    if (status == DCP_OK) status = dcp_nccl_set_wait(set, stream, err);
    if (status == DCP_OK)
        RANK_CHECK(ctx, memcmp(cp_in, cp_out, (size_t)s.cp_rows * row_bytes) == 0);
    ended = dcp_nccl_override_end(set, &scope, NULL); /* on every path */
    RANK_CHECK(ctx, ended == DCP_OK);
    RANK_CHECK(ctx, stream_drains(stream)); /* before the buffers go */
    cudaFree(device_ws), cudaFree(cp_in), cudaFree(hp), cudaFree(cp_out), free(host_ws);
    return status;
}

static void a2a_fault_rank(rank_ctx *ctx)
{
    const a2a_fault_test *t = (const a2a_fault_test *)ctx->test;
    dcp_nccl_options o = options_with(CLEAN_TIMEOUT_MS, A2A_FAULT_CP, NULL);
    dcp_nccl_set *set = NULL;
    cudaStream_t stream;
    dcp_error err;
    double start;
    int pool_aborted;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    RANK_CHECK(ctx, dcp_nccl_set_create(ctx->pool, &o, &set, &err) == DCP_OK);
    if (!set) return;
    set->timeout_ms = t->fault_at ? FAILURE_TIMEOUT_MS : CLEAN_TIMEOUT_MS;
    fake_fault_arm(ctx->rank == t->faulty_rank ? t->fault_at : 0);
    start = fake_now_ms();
    ctx->status = a2a_fault_step(ctx, set, stream, &err);
    ctx->elapsed_ms = fake_now_ms() - start;
    ctx->calls = fake_fault_count();
    fake_fault_arm(0);
    if (ctx->status != DCP_OK) {
        snprintf(ctx->message, sizeof ctx->message, "%s", err.message);
        RANK_CHECK(ctx, set->aborted == 1);
    }
    RANK_CHECK(ctx, stream_drains(stream));
    RANK_CHECK(ctx, ctx->elapsed_ms < 4 * FAILURE_TIMEOUT_MS + TIMEOUT_SLACK_MS);
    pool_aborted = set->pool == NULL;
    (void)dcp_nccl_set_destroy(set, NULL);
    pool_destroy(ctx, pool_aborted);
    cudaStreamDestroy(stream);
}

static void a2a_fault_at_every_call(void)
{
    enum { RANKS = A2A_FAULT_CP };
    static rank_ctx ctx[RANKS];
    a2a_fault_test t;
    long calls, at;
    int r;
    t.faulty_rank = 2, t.fault_at = 0;
    CHECK_EQ(run_ranks(RANKS, 1, a2a_fault_rank, &t, ctx), 0); /* counting run, no fault */
    for (r = 0; r < RANKS; r++) CHECK_EQ(ctx[r].status, DCP_OK);
    CHECK(job_clean());
    fake_job_destroy();
    calls = ctx[t.faulty_rank].calls;
    printf("  %ld hooked calls on rank %d\n", calls, t.faulty_rank);
    CHECK(calls > 0);
    for (at = 1; at <= calls; at++) {
        t.fault_at = at;
        CHECK_EQ(run_ranks(RANKS, 1, a2a_fault_rank, &t, ctx), 0);
        CHECK(ctx[t.faulty_rank].status == DCP_ERROR_NCCL ||
              ctx[t.faulty_rank].status == DCP_ERROR_CUDA);
        if (test_current_failures) {
            const char *text;
            printf("  fault at call %ld: %s\n", at, ctx[t.faulty_rank].message);
            for (r = 0; r < RANKS; r++)
                printf("  rank %d: %.0f ms: %s\n", r, ctx[r].elapsed_ms, ctx[r].message);
            if (fake_violations(&text)) printf("  transport: %s\n", text);
            break;
        }
        fake_job_destroy();
    }
    fake_job_destroy();
}

/* --------------------------------------------- MTP roll and pipeline-stage fields (issue 20) */

/* The roll's kernels: the CPU contracts of dcp.h enqueued on the stream (what the real entry
   points check at launch, checked here). */
typedef struct roll_call {
    dcp_thd_layout thd;
    int32_t rank;
    size_t size;
    const void *in, *received;
    void *out, *boundaries;
} roll_call;

static int roll_gather_run(void *arg)
{
    const roll_call *c = (const roll_call *)arg;
    return dcp_mtp_roll_gather(&c->thd, c->rank, c->size, c->in, c->boundaries, NULL) != DCP_OK;
}

static int roll_shift_run(void *arg)
{
    const roll_call *c = (const roll_call *)arg;
    return dcp_mtp_roll_shift(&c->thd, c->rank, c->size, c->in, c->received, c->out, NULL) !=
           DCP_OK;
}

static dcp_status roll_enqueue(int (*run)(void *), const dcp_cuda_layout *layout, int32_t rank,
                               size_t size, const void *in, const void *received, void *out,
                               void *boundaries, void *stream, dcp_error *error)
{
    roll_call *c;
    dcp_status status = dcp_thd_layout_validate(layout ? &layout->thd : NULL, NULL, error);
    if (status != DCP_OK) return status;
    if ((status = dcp_check_rank("rank", rank, layout->thd.cp, error)) != DCP_OK) return status;
    if (size == 0) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "element_size 0");
    c = (roll_call *)calloc(1, sizeof *c);
    c->thd = layout->thd, c->rank = rank, c->size = size;
    c->in = in, c->received = received, c->out = out, c->boundaries = boundaries;
    if (fake_enqueue_host((cudaStream_t)stream, run, c) != cudaSuccess)
        return dcp_error_set(error, DCP_ERROR_CUDA, "fake launch refused (NULL stream)");
    return DCP_OK;
}

dcp_status dcp_cuda_mtp_roll_gather(const dcp_cuda_layout *layout, int32_t rank,
                                    size_t element_size, const void *in, void *boundaries,
                                    void *stream, dcp_error *error)
{
    return roll_enqueue(roll_gather_run, layout, rank, element_size, in, NULL, NULL, boundaries,
                        stream, error);
}

dcp_status dcp_cuda_mtp_roll_shift(const dcp_cuda_layout *layout, int32_t rank,
                                   size_t element_size, const void *in, const void *received,
                                   void *out, void *stream, dcp_error *error)
{
    return roll_enqueue(roll_shift_run, layout, rank, element_size, in, received, out, NULL,
                        stream, error);
}

#define ROLL_MAX_CP 64
/* The group sizes the roll runs at (powers of two and others), and the element size of each:
   ids, labels, a loss mask, odd records. */
static const int32_t roll_cps[] = {1, 2, 3, 4, 5, 6, 8, 12, 16, 32, 64};
static const size_t roll_sizes[] = {8, 4, 1, 12, 2, 16, 8, 4, 1, 12, 8};

/* Every rank rolls its buffer at every static CP size of roll_cps through dcp_nccl_mtp_roll
   (its group from an evaluation override) and compares with the CPU reference of its group,
   computed here from the same pack. */
static void roll_rank(rank_ctx *ctx)
{
    dcp_nccl_options o = options_with(CLEAN_TIMEOUT_MS, ROLL_MAX_CP, NULL);
    dcp_nccl_set *set = NULL;
    cudaStream_t stream;
    dcp_error err;
    int32_t level;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    RANK_CHECK(ctx, dcp_nccl_set_create(ctx->pool, &o, &set, &err) == DCP_OK);
    for (level = 0; set && level < TEST_COUNT(roll_cps); level++) {
        const int32_t cp = roll_cps[level];
        dcp_comm_scope scope;
        dcp_nccl_binding binding;
        mtp_pack p;
        dcp_cuda_layout layout;
        size_t scratch_bytes = 0;
        void *scratch = NULL, *in = NULL, *out = NULL;
        const int32_t member = ctx->rank % cp;
        size_t bytes;
        memset(&scope, 0, sizeof scope);
        memset(&binding, 0, sizeof binding);
        if (ctx->rank / cp * cp + cp > ctx->ranks) { /* past the last full block: idle */
            RANK_CHECK(ctx, dcp_nccl_override_begin(set, cp, &scope, &binding, &err) == DCP_OK);
            RANK_CHECK(ctx, binding.idle == 1);
            RANK_CHECK(ctx, dcp_nccl_override_end(set, &scope, &err) == DCP_OK);
            continue;
        }
        RANK_CHECK(ctx, mtp_pack_make(&p, HOST_SEED + 20, cp, ctx->rank / cp, roll_sizes[level]));
        layout.thd = p.thd; /* "device" arrays are host memory here */
        layout.local_rows = p.local_rows, layout.max_seqlen_padded = p.max_seqlen_padded;
        bytes = (size_t)p.local_rows * p.size;
        RANK_CHECK(ctx, dcp_nccl_mtp_roll_scratch_size(&layout, p.size, &scratch_bytes,
                                                       NULL) == DCP_OK);
        RANK_CHECK(ctx, (scratch_bytes == 0) == (cp == 1));
        cudaMalloc(&scratch, scratch_bytes);
        cudaMalloc(&in, bytes);
        cudaMalloc(&out, bytes); /* poisoned: an unwritten row shows */
        memcpy(in, p.in[member], bytes);
        RANK_CHECK(ctx, dcp_nccl_override_begin(set, cp, &scope, &binding, &err) == DCP_OK);
        RANK_CHECK(ctx, binding.rank == member && binding.cp == cp);
        RANK_CHECK(ctx, dcp_nccl_mtp_roll(set, &binding, &layout, p.size, in, out, scratch,
                                          scratch_bytes, stream, &err) == DCP_OK);
        RANK_CHECK(ctx, dcp_nccl_set_wait(set, stream, &err) == DCP_OK);
        RANK_CHECK(ctx, memcmp(out, p.expected[member], bytes) == 0);
        if (cp > 1) /* a scratch too small is refused before any traffic */
            RANK_CHECK(ctx, dcp_nccl_mtp_roll(set, &binding, &layout, p.size, in, out, scratch,
                                              scratch_bytes - 1, stream,
                                              &err) == DCP_ERROR_INVALID_ARGUMENT);
        RANK_CHECK(ctx, dcp_nccl_override_end(set, &scope, &err) == DCP_OK);
        cudaFree(scratch), cudaFree(in), cudaFree(out);
        mtp_pack_free(&p);
    }
    if (set) RANK_CHECK(ctx, dcp_nccl_set_destroy(set, &err) == DCP_OK);
    pool_destroy(ctx, 0);
    cudaStreamDestroy(stream);
}

static void mtp_roll_64_ranks_equals_reference(void)
{
    enum { RANKS = 64 };
    static rank_ctx ctx[RANKS];
    printf("  seed %d\n", HOST_SEED + 20);
    CHECK_EQ(run_ranks(RANKS, 1, roll_rank, NULL, ctx), 0);
    CHECK(job_clean());
    fake_job_destroy();
}

/* A fault at every hooked call of a roll on one rank of a group of 8: that rank fails naming
   the call and its library, its set is aborted, every rank returns within the timeout's bound
   and every stream drains (no rank is left waiting for boundaries that never come). */
#define ROLL_FAULT_RANKS 8
typedef struct roll_fault_test {
    int faulty_rank;
    long fault_at;
} roll_fault_test;

static void roll_fault_rank(rank_ctx *ctx)
{
    const roll_fault_test *t = (const roll_fault_test *)ctx->test;
    dcp_nccl_options o = options_with(CLEAN_TIMEOUT_MS, ROLL_FAULT_RANKS, NULL);
    dcp_nccl_set *set = NULL;
    dcp_comm_scope scope;
    dcp_nccl_binding binding;
    dcp_cuda_layout layout;
    cudaStream_t stream;
    dcp_error err;
    mtp_pack p;
    void *in = NULL, *out = NULL, *scratch = NULL;
    size_t scratch_bytes = 0, bytes;
    double start;
    int pool_aborted;
    memset(&scope, 0, sizeof scope);
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    RANK_CHECK(ctx, mtp_pack_make(&p, HOST_SEED + 22, ROLL_FAULT_RANKS, 0, sizeof(int64_t)));
    RANK_CHECK(ctx, dcp_nccl_set_create(ctx->pool, &o, &set, &err) == DCP_OK);
    if (!set) return;
    set->timeout_ms = t->fault_at ? FAILURE_TIMEOUT_MS : CLEAN_TIMEOUT_MS;
    layout.thd = p.thd, layout.local_rows = p.local_rows;
    layout.max_seqlen_padded = p.max_seqlen_padded;
    bytes = (size_t)p.local_rows * p.size;
    (void)dcp_nccl_mtp_roll_scratch_size(&layout, p.size, &scratch_bytes, NULL);
    cudaMalloc(&in, bytes), cudaMalloc(&out, bytes), cudaMalloc(&scratch, scratch_bytes);
    memcpy(in, p.in[ctx->rank], bytes);
    RANK_CHECK(ctx, dcp_nccl_override_begin(set, ROLL_FAULT_RANKS, &scope, &binding, &err) ==
                        DCP_OK);
    fake_fault_arm(ctx->rank == t->faulty_rank ? t->fault_at : 0);
    start = fake_now_ms();
    ctx->status = dcp_nccl_mtp_roll(set, &binding, &layout, p.size, in, out, scratch,
                                    scratch_bytes, stream, &err);
    if (ctx->status == DCP_OK) ctx->status = dcp_nccl_set_wait(set, stream, &err);
    ctx->elapsed_ms = fake_now_ms() - start;
    ctx->calls = fake_fault_count();
    fake_fault_arm(0);
    (void)dcp_nccl_override_end(set, &scope, NULL);
    if (ctx->status != DCP_OK) {
        snprintf(ctx->message, sizeof ctx->message, "%s", err.message);
        RANK_CHECK(ctx, set->aborted == 1);
    } else if (t->fault_at == 0)
        RANK_CHECK(ctx, memcmp(out, p.expected[ctx->rank], bytes) == 0);
    RANK_CHECK(ctx, stream_drains(stream));
    RANK_CHECK(ctx, ctx->elapsed_ms < 4 * FAILURE_TIMEOUT_MS + TIMEOUT_SLACK_MS);
    pool_aborted = set->pool == NULL;
    (void)dcp_nccl_set_destroy(set, NULL);
    pool_destroy(ctx, pool_aborted);
    cudaStreamDestroy(stream);
    cudaFree(in), cudaFree(out), cudaFree(scratch);
    mtp_pack_free(&p);
}

static void mtp_roll_fault_at_every_call(void)
{
    static rank_ctx ctx[ROLL_FAULT_RANKS];
    roll_fault_test t;
    long calls, at;
    int r;
    t.faulty_rank = ROLL_FAULT_RANKS / 2, t.fault_at = 0;
    printf("  seed %d\n", HOST_SEED + 22);
    CHECK_EQ(run_ranks(ROLL_FAULT_RANKS, 1, roll_fault_rank, &t, ctx), 0); /* counting run */
    for (r = 0; r < ROLL_FAULT_RANKS; r++) CHECK_EQ(ctx[r].status, DCP_OK);
    CHECK(job_clean());
    fake_job_destroy();
    calls = ctx[t.faulty_rank].calls;
    CHECK(calls >= 4); /* group start, sends, receives, group end */
    printf("  %ld hooked calls on rank %d, a fault at each\n", calls, t.faulty_rank);
    for (at = 1; at <= calls; at++) {
        t.fault_at = at;
        CHECK_EQ(run_ranks(ROLL_FAULT_RANKS, 1, roll_fault_rank, &t, ctx), 0);
        /* the faulty rank fails naming the call, with that call's library */
        CHECK(strstr(ctx[t.faulty_rank].message, "from nccl") ||
              strstr(ctx[t.faulty_rank].message, "from cuda"));
        CHECK_EQ(ctx[t.faulty_rank].status, strstr(ctx[t.faulty_rank].message, "from nccl")
                                                 ? DCP_ERROR_NCCL
                                                 : DCP_ERROR_CUDA);
        fake_job_destroy();
        if (test_current_failures) {
            printf("  fault at call %ld: %s\n", at, ctx[t.faulty_rank].message);
            break;
        }
    }
}

/* Pipeline stages: each stage's reroute moves exactly its fields, counted on the wire. */
#define STAGES 4 /* first, middle, last, last with MTP */
static const size_t stage_element_sizes[DCP_FIELD_COUNT] = {8, 8, 8, 4};

static unsigned char field_byte(int32_t field, int32_t sample, int64_t position, size_t b)
{
    return (unsigned char)(field * 61 + sample * 7 + position * 13 + (int64_t)b * 3 + 1);
}

static dcp_field_set stage_field_set(int32_t stage)
{
    dcp_field_set set;
    memset(&set, 0, sizeof set);
    set.fields = dcp_stage_fields(stage == 0, stage >= 2, stage == 3);
    memcpy(set.element_size, stage_element_sizes, sizeof set.element_size);
    return set;
}

/* Whole-sample buffers of one field for samples [0, S), in the rank's device memory. */
static unsigned char **field_samples(const dcp_plan *plan, int32_t field)
{
    unsigned char **data = (unsigned char **)calloc((size_t)plan->num_samples, sizeof *data);
    int32_t s;
    for (s = 0; s < plan->num_samples; s++) {
        size_t e = stage_element_sizes[field], b;
        int64_t p;
        cudaMalloc((void **)&data[s], (size_t)plan->sample_lengths[s] * e + 1);
        for (p = 0; p < plan->sample_lengths[s]; p++)
            for (b = 0; b < e; b++) data[s][(size_t)p * e + b] = field_byte(field, s, p, b);
    }
    return data;
}

static void stage_rank(rank_ctx *ctx)
{
    const dcp_plan *plan = (const dcp_plan *)ctx->test;
    dcp_nccl_options o = options_with(CLEAN_TIMEOUT_MS, 0, NULL);
    dcp_nccl_set *set = NULL;
    dcp_reroute *moves = NULL;
    cudaStream_t stream;
    dcp_error err;
    const int32_t S = plan->num_samples, K = plan->num_microbatches;
    int32_t *holders = (int32_t *)malloc((size_t)S * sizeof(int32_t)), s, k, f, stage;
    unsigned char **whole[DCP_FIELD_COUNT], **micro[DCP_FIELD_COUNT];
    int64_t *rows = (int64_t *)calloc((size_t)K, sizeof(int64_t));
    o.plan_config = &plan->config;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    RANK_CHECK(ctx, dcp_nccl_set_create(ctx->pool, &o, &set, &err) == DCP_OK);
    for (s = 0; s < S; s++) holders[s] = (s * 5 + 3) % ctx->ranks;
    for (k = 0; k < K; k++) {
        dcp_rank_group where;
        RANK_CHECK(ctx, dcp_plan_rank_group(plan, ctx->rank, k, &where, NULL) == DCP_OK);
        rows[k] = where.local_rows;
    }
    for (f = 0; f < DCP_FIELD_COUNT; f++) {
        whole[f] = field_samples(plan, f);
        micro[f] = (unsigned char **)calloc((size_t)K, sizeof(unsigned char *));
    }
    RANK_CHECK(ctx, dcp_reroute_create(plan, holders, ctx->rank, &moves, &err) == DCP_OK);
    for (stage = 0; set && moves && stage < STAGES; stage++) {
        dcp_field_set fields = stage_field_set(stage);
        dcp_nccl_reroute_buffers buffers;
        dcp_reroute_bytes want;
        unsigned long long sent0, received0, sent1, received1;
        memset(&buffers, 0, sizeof buffers);
        buffers.num_samples = S, buffers.sample_rows = plan->sample_lengths;
        buffers.num_microbatches = K, buffers.microbatch_rows = rows;
        buffers.fields = &fields;
        for (f = 0; f < DCP_FIELD_COUNT; f++) { /* only the stage's fields get buffers */
            if (!(fields.fields & DCP_FIELD_BIT(f))) continue;
            for (k = 0; k < K; k++)
                cudaMalloc((void **)&micro[f][k], (size_t)rows[k] * stage_element_sizes[f]);
            buffers.field_sample_data[f] = (const void *const *)whole[f];
            buffers.field_microbatch_data[f] = (void *const *)micro[f];
        }
        RANK_CHECK(ctx, dcp_reroute_field_bytes(moves, &fields, &want, NULL) == DCP_OK);
        fake_traffic(set->comm, &sent0, &received0); /* the reroute runs there */
        RANK_CHECK(ctx, dcp_nccl_reroute_execute(set, moves, &buffers, stream, &err) == DCP_OK);
        RANK_CHECK(ctx, dcp_nccl_set_wait(set, stream, &err) == DCP_OK);
        fake_traffic(set->comm, &sent1, &received1);
        RANK_CHECK(ctx, sent1 - sent0 == want.send && received1 - received0 == want.recv);
        if (stage == 1) RANK_CHECK(ctx, want.send + want.recv + want.copy == 0);
        for (k = 0; k < K; k++) { /* each field's buffers hold the view's pack of that field */
            dcp_rank_view *view = NULL;
            unsigned char *expect[DCP_FIELD_COUNT] = {NULL, NULL, NULL, NULL};
            if (dcp_rank_view_create(plan, ctx->rank, k, &view, NULL) != DCP_OK) {
                ctx->failures++;
                continue;
            }
            for (f = 0; f < DCP_FIELD_COUNT; f++)
                if (fields.fields & DCP_FIELD_BIT(f))
                    expect[f] = (unsigned char *)malloc((size_t)rows[k] * stage_element_sizes[f] + 1);
            RANK_CHECK(ctx, dcp_rank_view_pack_fields(view, &fields,
                                                      (const void *const *const *)whole,
                                                      (void *const *)expect, NULL) == DCP_OK);
            for (f = 0; f < DCP_FIELD_COUNT; f++) {
                if (!expect[f]) continue;
                RANK_CHECK(ctx, memcmp(expect[f], micro[f][k],
                                       (size_t)rows[k] * stage_element_sizes[f]) == 0);
                free(expect[f]);
                cudaFree(micro[f][k]);
                micro[f][k] = NULL;
            }
            dcp_rank_view_destroy(view);
        }
    }
    if (set) RANK_CHECK(ctx, dcp_nccl_set_destroy(set, &err) == DCP_OK);
    pool_destroy(ctx, 0);
    cudaStreamDestroy(stream);
    for (f = 0; f < DCP_FIELD_COUNT; f++) {
        for (s = 0; s < S; s++) cudaFree(whole[f][s]);
        free(whole[f]), free(micro[f]);
    }
    dcp_reroute_destroy(moves);
    free(holders), free(rows);
}

static void stage_fields_64_ranks_move_only_their_bytes(void)
{
    run_plan_job(HOST_SEED + 21, stage_rank);
}

int main(int argc, char **argv)
{
#if NCCL_VERSION_CODE < FAKE_GROUPED_ABORT_VERSION
    /* Built to behave as NCCL before 2.22 (make's test_nccl_host-2.21): an ncclCommAbort waits
       at once even inside a group, so dcp_nccl.h raises its aborts from one thread per
       communicator. The tests that abort with work stuck somewhere run that path. */
    static const test_case tests[] = {
        {"transport_abort_waits_for_queued_work", transport_abort_waits_for_queued_work},
        {"split_one_rank_joins_late", split_one_rank_joins_late},
        {"absent_rank_costs_a_timeout", absent_rank_costs_a_timeout},
        {"abort_with_ring_behind_stuck_reroute", abort_with_ring_behind_stuck_reroute},
        {"shared_split_abort_then_pool_allreduce", shared_split_abort_then_pool_allreduce},
        {"dead_peer_in_ring_times_out", dead_peer_in_ring_times_out},
        {"failed_split_aborts_its_child_and_the_pool", failed_split_aborts_its_child_and_the_pool},
        {"fault_at_every_call_leaves_ranks_consistent",
         fault_at_every_call_leaves_ranks_consistent},
    };
#else
    static const test_case tests[] = {
        {"transport_sends_rendezvous", transport_sends_rendezvous},
        {"transport_blocking_calls_wait_for_peers", transport_blocking_calls_wait_for_peers},
        {"transport_nonblocking_calls_run_in_the_background",
         transport_nonblocking_calls_run_in_the_background},
        {"transport_async_errors_are_reported", transport_async_errors_are_reported},
        {"transport_abort_waits_for_queued_work", transport_abort_waits_for_queued_work},
        {"transport_split_share_shares_the_abort_flag",
         transport_split_share_shares_the_abort_flag},
        {"transport_orders_kernels", transport_orders_kernels},
        {"transport_pageable_copies_wait_for_the_stream",
         transport_pageable_copies_wait_for_the_stream},
        {"transport_failed_calls_poison_their_group", transport_failed_calls_poison_their_group},
        {"transport_configs_resolve_as_nccl_does", transport_configs_resolve_as_nccl_does},
        {"control_plane_512_ranks", control_plane_512_ranks},
        {"compile_time_allocator_is_used_both_ways", compile_time_allocator_is_used_both_ways},
        {"reroute_64_ranks_equals_views", reroute_64_ranks_equals_views},
        {"ring_64_ranks_equals_cpu_ring", ring_64_ranks_equals_cpu_ring},
        {"ring_cp2_and_cp4_equal_cpu_ring", ring_cp2_and_cp4_equal_cpu_ring},
        {"ring_nonblocking_communicators", ring_nonblocking_communicators},
        {"ring_any_size_equals_cpu_ring", ring_any_size_equals_cpu_ring},
        {"ring_unaligned_groups_equal_cpu_ring", ring_unaligned_groups_equal_cpu_ring},
        {"rings_of_every_size_send_to_at_most_four_peers",
         rings_of_every_size_send_to_at_most_four_peers},
        {"transport_failed_split_writes_child_and_raises_parent_flag",
         transport_failed_split_writes_child_and_raises_parent_flag},
        {"failed_split_aborts_its_child_and_the_pool", failed_split_aborts_its_child_and_the_pool},
#if DCP_NCCL_HAVE_SHRINK
        {"shrink_rebuilds_the_set_without_a_dead_rank",
         shrink_rebuilds_the_set_without_a_dead_rank},
#endif
        {"group_comm_and_broadcast_on_request", group_comm_and_broadcast_on_request},
        {"dead_peer_in_ring_times_out", dead_peer_in_ring_times_out},
        {"dead_root_broadcast_times_out", dead_root_broadcast_times_out},
        {"plan_disagreement_fails_every_rank", plan_disagreement_fails_every_rank},
        {"split_one_rank_joins_late", split_one_rank_joins_late},
        {"absent_rank_costs_a_timeout", absent_rank_costs_a_timeout},
        {"abort_with_ring_behind_stuck_reroute", abort_with_ring_behind_stuck_reroute},
        {"shared_split_abort_then_pool_allreduce", shared_split_abort_then_pool_allreduce},
        {"plan_agree_waits_for_the_stream_by_polling", plan_agree_waits_for_the_stream_by_polling},
        {"null_config_inherits_the_pool_config", null_config_inherits_the_pool_config},
        {"async_error_aborts_the_set", async_error_aborts_the_set},
        {"broadcast_bad_argument_fails_alone", broadcast_bad_argument_fails_alone},
        {"fault_at_every_call_leaves_ranks_consistent",
         fault_at_every_call_leaves_ranks_consistent},
        {"a2a_64_ranks_equals_cpu_reference", a2a_64_ranks_equals_cpu_reference},
        {"a2a_non_power_of_two_groups_equal_cpu_reference",
         a2a_non_power_of_two_groups_equal_cpu_reference},
        {"a2a_cp1_is_a_no_op", a2a_cp1_is_a_no_op},
        {"a2a_fault_at_every_call", a2a_fault_at_every_call},
        {"mtp_roll_64_ranks_equals_reference", mtp_roll_64_ranks_equals_reference},
        {"stage_fields_64_ranks_move_only_their_bytes",
         stage_fields_64_ranks_move_only_their_bytes},
        {"mtp_roll_fault_at_every_call", mtp_roll_fault_at_every_call},
#ifdef __cplusplus
        {"cxx_guard_is_raii", cxx_guard_is_raii},
#endif
    };
#endif
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
