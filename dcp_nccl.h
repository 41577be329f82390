/* dcp_nccl.h - the NCCL layer of libdcp: communicators per CP size, the per-microbatch switch,
   evaluation at another CP size, reroute, ring attention and metadata broadcast. v0.1.0
   Header-only, stb style, on top of dcp.h, nccl.h and the CUDA runtime.

   WHAT IT DOES
   dcp.h plans which sample runs on how many ranks and derives, as pure functions, everything a
   rank must do about it (who sends what to whom, in which order, through which communicator,
   with which buffers). This header carries those answers out with NCCL and CUDA, and nothing
   more: the decisions are tested on simulated ranks in tests/test_comm.c; this layer is thin
   enough that a one-rank GPU run (make test-gpu) covers the rest. From the caller's DP x CP
   communicator (the pool) it builds, once, one communicator per CP size 2..max_cp with
   ncclCommSplit (resources shared; CP size 1 needs none); per microbatch it hands out the
   group's communicator and the rank's index in it; it can pin a CP size for a scope
   (evaluation at CP 4 of a model trained at CP 1, and back); it executes reroute lists as one
   grouped ncclSend/ncclRecv; it runs ring attention over a group with the KV of the next step
   in flight on a communication stream while the current step computes; it broadcasts plans
   and rank views, length first, to ranks that did not plan.

   QUICK START (one training step; error checks left out)
       #define DCP_IMPLEMENTATION          // in exactly one file
       #include "dcp.h"
       #define DCP_NCCL_IMPLEMENTATION     // in exactly one file, after dcp.h
       #include "dcp_nccl.h"

       dcp_nccl_set *set;                  // at start-up, once: collective over the pool
       dcp_nccl_set_create(pool_comm, NULL, &set, &err);
       // per global batch: plan on TP rank 0, broadcast to the other TP ranks
       dcp_plan *plan = NULL;
       if (tp_rank == 0) dcp_plan_create(&config, lengths, n, &plan, &err);
       dcp_nccl_broadcast_plan(set, tp_comm, 0, plan, tp_rank == 0 ? NULL : &plan, stream, &err);
       dcp_reroute *moves;                 // data loader placement -> the plan's groups
       dcp_reroute_create(plan, holders, set->rank, &moves, &err);
       dcp_nccl_reroute_execute(set, moves, &buffers, stream, &err);
       for (int k = 0; k < plan->num_microbatches; k++) {
           dcp_nccl_binding group;         // comm NULL for cp 1 and idle ranks
           dcp_nccl_set_switch_plan(set, plan, k, &group, &err);
           dcp_nccl_ring_forward(set, &group, &params, &layout, DCP_DTYPE_BFLOAT16, q, k_, v,
                                 out, lse, scratch, scratch_bytes, stream, &err);
           ...
       }
       dcp_nccl_set_destroy(set, &err);    // before the caller destroys pool_comm

   BUILDING
   Include dcp.h (without DCP_NO_REFERENCE) and then dcp_nccl.h; define DCP_NCCL_IMPLEMENTATION
   in exactly one C, C++ or CUDA file. It compiles as C99 and under nvcc. Link with
   dcp_cuda.o (the attention kernels), -lnccl and -lcudart:
       nvcc -O2 -arch=sm_90 your.cu dcp_cuda.cu -o your -lnccl
   Option macros, defined before the implementation include:
       DCP_NCCL_STATIC                 make every function static
       DCP_NCCL_DEFAULT_STAGING_BYTES  device staging of metadata broadcasts (1 MiB); a
                                       dcp_nccl_options field overrides it per set

   CONVENTIONS
   - Every function returns a dcp_status. Every CUDA and NCCL result is checked by one macro
     and becomes DCP_ERROR_CUDA or DCP_ERROR_NCCL with file:line, the error text, its code and
     the call's text in the dcp_error message. Argument errors are found before a function's
     first collective or send/receive, so a bad argument fails that rank alone; but a rank that
   leaves a collective (or a ring) early makes its peers wait: on any NCCL or CUDA error, poll
     dcp_nccl_set_check on every rank and call dcp_nccl_set_abort (ncclCommAbort on every
     communicator of the set, and on the pool if asked) rather than dcp_nccl_set_destroy.
   - Streams: functions take the caller's stream and only enqueue work on it (broadcast and
     set creation also wait for it); the ring's transfers run on the set's own communication
     stream, ordered against the caller's stream by events, and the call returns with all of
     them ordered before later work on the caller's stream.
   - Memory: set creation allocates the set (host, options.allocator), a communication stream,
     two events and the staging buffer (device); broadcasts allocate the received buffer and
     object (host). Nothing else allocates: the ring takes caller scratch sized by
     dcp_nccl_ring_scratch_size, reroute takes the caller's buffers.
   - One set per process and device; a set is not thread-safe (one thread uses it at a time).
     All ranks of a communicator call its collective functions in the same order with the
     same sizes; dcp.h gives every rank the same lists, which is what makes that hold.
   - NCCL 2.28 refuses two ranks on one GPU: multi-rank runs need one GPU per rank.

   REFERENCE
   Communicator set
       dcp_nccl_set_create(pool, options, &set, err)   collective over pool; checks that every
                                        rank passed the same max_cp and staging size, then
                                        splits one communicator per CP size 2..max_cp (color
                                        rank / c, key rank % c, splitShare 1; NCCL_SPLIT_NOCOLOR
                                        past the last full block); set->comms[dcp_comm_slot(c)]
       dcp_nccl_set_destroy(set, err)   finalizes and destroys the split communicators (largest
                                        first, the same order on every rank), then the stream,
                                        events and staging; the caller destroys the pool after
       dcp_nccl_set_comm(set, cp)       the communicator of CP size cp (NULL: cp 1, or none)
       dcp_nccl_set_check(set, err)     polls ncclCommGetAsyncError on the pool and every split
       dcp_nccl_set_abort(set, abort_pool, err)  ncclCommAbort on every split communicator (and
                                        the pool when abort_pool); the set stays destroyable
   Switch (dcp_nccl_binding: comm, cp, rank, first_rank, idle)
       dcp_nccl_set_switch(set, view, &binding, err)          the group of a rank view
       dcp_nccl_set_switch_plan(set, plan, k, &binding, err)  the group in microbatch k
       dcp_nccl_set_current(set, &binding)                    the one in force
   Evaluation at another CP size (seed 003: train CP 1, evaluate CP 4, and back)
       dcp_nccl_override_begin(set, cp, &scope, &binding, err)   pins static CP size cp
       dcp_nccl_override_end(set, &scope, err)   restores what begin saved: call it on every
                                        exit path (C has no destructor), or use either of
       dcp_nccl_override_run(set, cp, fn, user, err)   begin; fn; end, end guaranteed
       dcp_nccl_cp_guard (C++)          begin in the constructor, end in the destructor
   Reroute
       dcp_nccl_reroute_execute(set, list, buffers, stream, err)   a dcp_reroute list as one
                                        ncclGroupStart/End of ncclSend/ncclRecv on the pool
                                        (bytes as ncclUint8; zero-byte transfers skipped by
                                        both sides), local copies with cudaMemcpyAsync,
                                        destination buffers zeroed first when their rows are
                                        given (padding rows must be zero); every argument and
                                        every destination checked before anything is enqueued
   Ring attention over a binding's group
       dcp_nccl_ring_scratch_size(params, layout, dtype, pass, &bytes, err)
       dcp_nccl_ring_forward(set, binding, params, layout, dtype, q, k, v, out, lse, scratch,
                             scratch_bytes, stream, err)
       dcp_nccl_ring_backward(set, binding, params, layout, dtype, q, k, v, out, dout, lse,
                              dq, dk, dv, deterministic, scratch, scratch_bytes, stream, err)
   Metadata broadcast (length first, then the bytes in staging-sized chunks; never a sentinel)
       dcp_nccl_broadcast_bytes(set, comm, root, data, size, &received, &received_size,
                                stream, err)  received: allocated with the set's allocator
       dcp_nccl_broadcast_plan(set, comm, root, plan, &received, stream, err)
       dcp_nccl_broadcast_view(set, comm, root, view, &received, stream, err)
   dcp_nccl_compiled_version()          NCCL_VERSION_CODE this header was compiled against

   STATUS
   Compiled as C and under nvcc by `make`; its logic is tested on the CPU by tests/test_comm.c.
   It has not been run on a GPU yet: make test-gpu (one rank) and examples/ring_attention_nccl
   (one rank per GPU) are the first runs to make.

   LICENSE
   MIT, as dcp.h. */
#ifndef DCP_NCCL_H
#define DCP_NCCL_H

#include "dcp.h"

#ifdef DCP_NO_REFERENCE
#error "dcp_nccl.h needs dcp.h's attention declarations: do not define DCP_NO_REFERENCE"
#endif

#include <cuda_runtime.h>
#include <nccl.h>

#ifdef DCP_NCCL_STATIC
#define DCP_NCCL_DEF static
#else
#define DCP_NCCL_DEF extern
#endif

#ifndef DCP_NCCL_DEFAULT_STAGING_BYTES
#define DCP_NCCL_DEFAULT_STAGING_BYTES ((size_t)1 << 20)
#endif
/* The smallest staging buffer a set accepts. */
#define DCP_NCCL_MIN_STAGING_BYTES 64

#ifdef __cplusplus
extern "C" {
#endif

/* The NCCL version this header was compiled against, as NCCL_VERSION_CODE. */
DCP_NCCL_DEF int dcp_nccl_compiled_version(void);

/* Zero-initialise for the defaults; NULL options mean all defaults. max_cp and staging_bytes
   must be the same on every rank (set creation checks it). */
typedef struct dcp_nccl_options {
    int32_t max_cp;             /* power of two <= pool size; default the largest such */
    size_t staging_bytes;       /* >= DCP_NCCL_MIN_STAGING_BYTES; default
                                   DCP_NCCL_DEFAULT_STAGING_BYTES */
    const ncclConfig_t *config; /* base of the split communicators' config (NULL: NCCL's
                                   defaults); splitShare and blocking are forced to 1 */
    dcp_allocator allocator;    /* host memory of the set and of received metadata */
} dcp_nccl_options;

/* Read-only for the caller; the functions below change it. */
typedef struct dcp_nccl_set {
    ncclComm_t pool;                  /* the caller's DP x CP communicator (not owned) */
    int32_t ranks, rank, max_cp;
    int32_t num_slots;                /* dcp_comm_slot_count(max_cp) */
    ncclComm_t comms[DCP_CP_LEVELS];  /* comms[dcp_comm_slot(c)]: CP size c; NULL for a rank
                                         past the last full block of c ranks */
    dcp_comm_state state;             /* the binding in force and the open overrides */
    cudaStream_t comm_stream;         /* the ring's transfers */
    cudaEvent_t compute_done, comm_done;
    void *staging;                    /* device, staging_bytes */
    size_t staging_bytes;
    int32_t aborted;                  /* 1 after dcp_nccl_set_abort */
    dcp_allocator allocator;
} dcp_nccl_set;

/* The communicator of this rank's group: comm NULL when cp is 1 (the no-op path) or the rank
   is idle; rank is its index in comm (= rank - first_rank). */
typedef struct dcp_nccl_binding {
    ncclComm_t comm;
    int32_t cp;
    int32_t rank;
    int32_t first_rank;
    int32_t idle;
} dcp_nccl_binding;

DCP_NCCL_DEF dcp_status dcp_nccl_set_create(ncclComm_t pool, const dcp_nccl_options *options,
                                            dcp_nccl_set **set, dcp_error *error);
DCP_NCCL_DEF dcp_status dcp_nccl_set_destroy(dcp_nccl_set *set, dcp_error *error);
DCP_NCCL_DEF ncclComm_t dcp_nccl_set_comm(const dcp_nccl_set *set, int32_t cp);
DCP_NCCL_DEF dcp_status dcp_nccl_set_check(const dcp_nccl_set *set, dcp_error *error);
DCP_NCCL_DEF dcp_status dcp_nccl_set_abort(dcp_nccl_set *set, int32_t abort_pool,
                                           dcp_error *error);

/* The view must be this rank's (view->rank == set->rank). While an override is open only
   groups of its CP size (and idle ranks) are accepted. On error nothing changes. */
DCP_NCCL_DEF dcp_status dcp_nccl_set_switch(dcp_nccl_set *set, const dcp_rank_view *view,
                                            dcp_nccl_binding *binding, dcp_error *error);
DCP_NCCL_DEF dcp_status dcp_nccl_set_switch_plan(dcp_nccl_set *set, const dcp_plan *plan,
                                                 int32_t microbatch, dcp_nccl_binding *binding,
                                                 dcp_error *error);
DCP_NCCL_DEF void dcp_nccl_set_current(const dcp_nccl_set *set, dcp_nccl_binding *binding);

/* scope: zero-initialised by the caller, filled by begin, closed by end (dcp_comm_override_*
   semantics: nesting, out-of-order ends unwind inner scopes). binding may be NULL. */
DCP_NCCL_DEF dcp_status dcp_nccl_override_begin(dcp_nccl_set *set, int32_t cp,
                                                dcp_comm_scope *scope, dcp_nccl_binding *binding,
                                                dcp_error *error);
DCP_NCCL_DEF dcp_status dcp_nccl_override_end(dcp_nccl_set *set, dcp_comm_scope *scope,
                                              dcp_error *error);
typedef dcp_status (*dcp_nccl_scoped_fn)(dcp_nccl_set *set, const dcp_nccl_binding *binding,
                                         void *user, dcp_error *error);
/* Runs fn under an override of CP size cp; the override ends whatever fn returns. Returns
   fn's status if it failed (its message kept), else the end's. */
DCP_NCCL_DEF dcp_status dcp_nccl_override_run(dcp_nccl_set *set, int32_t cp,
                                              dcp_nccl_scoped_fn fn, void *user,
                                              dcp_error *error);

/* The buffers of a reroute, device pointers. Sample buffers hold a sample's valid tokens,
   element_size bytes each; only the samples this rank holds are read (others may be NULL).
   Microbatch buffers are this rank's THD buffers of the plan's microbatches. */
typedef struct dcp_nccl_reroute_buffers {
    size_t element_size;
    int32_t num_samples;                /* entries of sample_data (plan->num_samples) */
    const void *const *sample_data;
    const int64_t *sample_rows;         /* optional: tokens of each sample buffer, checked */
    int32_t num_microbatches;           /* entries of microbatch_data */
    void *const *microbatch_data;
    const int64_t *microbatch_rows;     /* optional: rows of each microbatch buffer; when given,
                                           every destination is checked against them and the
                                           first microbatch_rows[k] rows are zeroed first */
} dcp_nccl_reroute_buffers;

/* Contract of microbatch_rows: AT LEAST the rows the list writes into each buffer
   (dcp_reroute_rows_written), not equal to the plan's rows -- one buffer sized for the largest
   microbatch serves every microbatch. A buffer too small for a destination is refused with
   DCP_ERROR_INVALID_ARGUMENT (naming the transfer, the microbatch and its rows) before
   anything is enqueued: no zeroing, no copy, no send. Pass dcp_plan_rank_group's local_rows
   to have every padding row zeroed; rows past microbatch_rows[k] are left as they are. */

DCP_NCCL_DEF dcp_status dcp_nccl_reroute_execute(dcp_nccl_set *set, const dcp_reroute *reroute,
                                                 const dcp_nccl_reroute_buffers *buffers,
                                                 cudaStream_t stream, dcp_error *error);

/* Bytes of device scratch a ring pass needs: dcp_ring_scratch_layout's regions plus the
   attention workspace (dcp_cuda_attention_workspace_size). Allocate once per shape bound. */
DCP_NCCL_DEF dcp_status dcp_nccl_ring_scratch_size(const dcp_attention_params *params,
                                                   const dcp_cuda_layout *layout, dcp_dtype dtype,
                                                   dcp_ring_pass pass, size_t *bytes,
                                                   dcp_error *error);
/* Ring attention forward on the binding's group (binding NULL: the one in force). layout is
   the group's (thd.cp = binding->cp), with device cu arrays; q, k, v this rank's local
   buffers in dtype; out in dtype and lse float32 [num_heads, local_rows] receive the merged
   result, padding rows 0 and -inf. cp 1: one dcp_cuda_attention_forward call. cp > 1: cp
   steps of dcp_ring_step_plan, each a float32 partial merged through the LSE
   (dcp_cuda_acc_merge), the next step's KV received into the other scratch slot meanwhile
   (dcp_ring_exchange_plan), then dcp_cuda_acc_finalize. */
DCP_NCCL_DEF dcp_status dcp_nccl_ring_forward(dcp_nccl_set *set, const dcp_nccl_binding *binding,
                                              const dcp_attention_params *params,
                                              const dcp_cuda_layout *layout, dcp_dtype dtype,
                                              const void *q, const void *k, const void *v,
                                              void *out, float *lse, void *scratch,
                                              size_t scratch_bytes, cudaStream_t stream,
                                              dcp_error *error);
/* Its gradient from the final out, dout (dtype) and lse: dQ accumulates in float32 scratch on
   this rank; dK, dV of each KV accumulate in a float32 buffer that travels the ring one hop
   behind its KV and comes home after the last step; then dcp_cuda_convert writes dq, dk, dv
   in dtype (overwritten, not added). The dK/dV hop follows each step's computation (the
   kernels add in place, so the buffer must have arrived): it is not hidden behind compute;
   the KV prefetch is. */
DCP_NCCL_DEF dcp_status dcp_nccl_ring_backward(
    dcp_nccl_set *set, const dcp_nccl_binding *binding, const dcp_attention_params *params,
    const dcp_cuda_layout *layout, dcp_dtype dtype, const void *q, const void *k, const void *v,
    const void *out, const void *dout, const float *lse, void *dq, void *dk, void *dv,
    int32_t deterministic, void *scratch, size_t scratch_bytes, cudaStream_t stream,
    dcp_error *error);

/* Collective over comm: the root's bytes reach every rank. The length goes first (one
   uint64); every rank checks it with dcp_metadata_chunks, so all go on or all stop; then the
   bytes in chunks of the staging buffer. Non-root ranks receive a buffer allocated with the
   set's allocator (free it with dcp_free(&set->allocator, ptr)); the root's received may be
   NULL. A rank that cannot allocate still takes part in every chunk, then fails. */
DCP_NCCL_DEF dcp_status dcp_nccl_broadcast_bytes(dcp_nccl_set *set, ncclComm_t comm,
                                                 int32_t root, const void *data, size_t size,
                                                 void **received, size_t *received_size,
                                                 cudaStream_t stream, dcp_error *error);
/* plan: read on the root only. received: the validated copy (dcp_plan_deserialize; on a bad
   buffer DCP_ERROR_CORRUPT_DATA names what is wrong), on any rank the root included; NULL
   drops the bytes after the checks (the rank still takes part). A root that cannot serialize
   sends length 0, which every rank rejects, and returns its own reason. */
DCP_NCCL_DEF dcp_status dcp_nccl_broadcast_plan(dcp_nccl_set *set, ncclComm_t comm, int32_t root,
                                                const dcp_plan *plan, dcp_plan **received,
                                                cudaStream_t stream, dcp_error *error);
DCP_NCCL_DEF dcp_status dcp_nccl_broadcast_view(dcp_nccl_set *set, ncclComm_t comm, int32_t root,
                                                const dcp_rank_view *view,
                                                dcp_rank_view **received, cudaStream_t stream,
                                                dcp_error *error);

#ifdef __cplusplus
}

/* C++: an evaluation override for the lifetime of the object; the destructor ends it on every
   path, exceptions included. Check status() after construction. */
class dcp_nccl_cp_guard {
public:
    dcp_nccl_cp_guard(dcp_nccl_set *set, int32_t cp, dcp_error *error = NULL)
        : set_(set), scope_(), status_(dcp_nccl_override_begin(set, cp, &scope_, NULL, error))
    {
    }
    ~dcp_nccl_cp_guard()
    {
        if (status_ == DCP_OK) (void)dcp_nccl_override_end(set_, &scope_, NULL);
    }
    dcp_status status() const { return status_; }

private:
    dcp_nccl_cp_guard(const dcp_nccl_cp_guard &);            /* not copyable */
    dcp_nccl_cp_guard &operator=(const dcp_nccl_cp_guard &);
    dcp_nccl_set *set_;
    dcp_comm_scope scope_;
    dcp_status status_;
};
#endif

#endif /* DCP_NCCL_H */

/* ============================================================================================
   IMPLEMENTATION
   ========================================================================================= */
#ifdef DCP_NCCL_IMPLEMENTATION
#ifndef DCP_NCCL_IMPLEMENTATION_INCLUDED
#define DCP_NCCL_IMPLEMENTATION_INCLUDED

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------ errors */

/* The message of a failed CUDA or NCCL call; the call's text tells which library it is
   (every checked call starts with "nccl" or "cuda"). */
static dcp_status dcp_nccl__status(int code, const char *call, const char *file, int line,
                                   dcp_error *error)
{
    const int nccl = strncmp(call, "nccl", 4) == 0;
    const char *base = strrchr(file, '/');
    const char *text;
    if (code == 0) return DCP_OK;
    text = nccl ? ncclGetErrorString((ncclResult_t)code)
                            : cudaGetErrorString((cudaError_t)code);
    if (!nccl) (void)cudaGetLastError(); /* clear a non-sticky CUDA error */
    return dcp_error_set(error, nccl ? DCP_ERROR_NCCL : DCP_ERROR_CUDA, "%s:%d: %s (%d) from %s",
                         base ? base + 1 : file, line, text ? text : "unknown error", code, call);
}

/* The one checking macro: the dcp_status of a CUDA or NCCL call (DCP_OK, or DCP_ERROR_CUDA /
   DCP_ERROR_NCCL with file:line, the error text, its code and the call's text in *err).
   DCP_NCCL__CHECK also jumps to the function's `done` label, where its cleanup runs. */
#define DCP_NCCL__RESULT(call, err)                                                            \
    dcp_nccl__status((int)(call), #call, __FILE__, __LINE__, (err))
#define DCP_NCCL__CHECK(call)                                                                  \
    do {                                                                                       \
        if ((status = DCP_NCCL__RESULT(call, error)) != DCP_OK) goto done;                     \
    } while (0)

/* Runs a dcp call (kernels, dcp.h): on failure its own message stays. */
#define DCP_NCCL__TRY(call)                                                                    \
    do {                                                                                       \
        if ((status = (call)) != DCP_OK) goto done;                                            \
    } while (0)

static dcp_status dcp_nccl__usable(const dcp_nccl_set *set, dcp_error *error)
{
    if (!set) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "set must not be NULL");
    if (set->aborted)
        return dcp_error_set(error, DCP_ERROR_NCCL,
                             "the communicator set was aborted: destroy it and build a new one");
    return DCP_OK;
}

DCP_NCCL_DEF int dcp_nccl_compiled_version(void) { return NCCL_VERSION_CODE; }

/* ----------------------------------------------------------------------- communicator set */

static void *dcp_nccl__alloc(const dcp_allocator *allocator, size_t size)
{
    if (size == 0) size = 1;
    if (allocator && allocator->alloc) return allocator->alloc(allocator->user, size);
    return malloc(size);
}

/* Every rank must split with the same max_cp and broadcast with the same staging size, or
   the collectives would not match: one all-reduce of (x, -x) with max tells every rank. */
static dcp_status dcp_nccl__agree(dcp_nccl_set *set, dcp_error *error)
{
    int64_t values[4];
    dcp_status status = DCP_OK;
    values[0] = set->max_cp, values[1] = -(int64_t)set->max_cp;
    values[2] = (int64_t)set->staging_bytes, values[3] = -(int64_t)set->staging_bytes;
    DCP_NCCL__CHECK(cudaMemcpyAsync(set->staging, values, sizeof values, cudaMemcpyHostToDevice,
                                    set->comm_stream));
    DCP_NCCL__CHECK(ncclAllReduce(set->staging, set->staging, 4, ncclInt64, ncclMax, set->pool,
                                  set->comm_stream));
    DCP_NCCL__CHECK(cudaMemcpyAsync(values, set->staging, sizeof values, cudaMemcpyDeviceToHost,
                                    set->comm_stream));
    DCP_NCCL__CHECK(cudaStreamSynchronize(set->comm_stream));
    if (values[0] != -values[1] || values[2] != -values[3])
        status = dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                               "ranks disagree: max_cp from %lld to %lld, staging_bytes from "
                               "%lld to %lld; pass the same options on every rank",
                               (long long)-values[1], (long long)values[0], (long long)-values[3],
                               (long long)values[2]);
done:
    return status;
}

/* ncclCommSplit for every CP size 2..max_cp, in the same order on every rank. */
static dcp_status dcp_nccl__split(dcp_nccl_set *set, const ncclConfig_t *base, dcp_error *error)
{
    dcp_status status = DCP_OK;
    int32_t slot;
    for (slot = 0; slot < set->num_slots; slot++) {
        const int32_t cp = (int32_t)2 << slot;
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        dcp_comm_split split;
        int count = 0, user_rank = 0;
        if (base) config = *base;
        config.splitShare = 1; /* the children share the pool's resources */
        config.blocking = 1;
        DCP_NCCL__TRY(dcp_comm_split_args(set->ranks, set->rank, cp, &split, error));
        DCP_NCCL__CHECK(ncclCommSplit(set->pool,
                                      split.color == DCP_COMM_NO_COLOR ? NCCL_SPLIT_NOCOLOR
                                                                       : split.color,
                                      split.key, &set->comms[slot], &config));
        if (split.size == 0) {
            set->comms[slot] = NULL;
            continue;
        }
        DCP_NCCL__CHECK(ncclCommCount(set->comms[slot], &count));
        DCP_NCCL__CHECK(ncclCommUserRank(set->comms[slot], &user_rank));
        if (count != split.size || user_rank != split.key) {
            status = dcp_error_set(error, DCP_ERROR_NCCL,
                                   "the cp %d communicator has %d ranks with this one at %d; "
                                   "expected %d and %d",
                                   (int)cp, count, user_rank, (int)split.size, (int)split.key);
            goto done;
        }
    }
done:
    return status;
}

DCP_NCCL_DEF dcp_status dcp_nccl_set_create(ncclComm_t pool, const dcp_nccl_options *options,
                                            dcp_nccl_set **out, dcp_error *error)
{
    dcp_nccl_options o;
    dcp_nccl_set *set = NULL;
    dcp_status status = DCP_OK;
    int ranks = 0, rank = 0, least = 0, greatest = 0;
    if (!out) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "set must not be NULL");
    *out = NULL;
    if (!pool) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "pool must not be NULL");
    memset(&o, 0, sizeof o);
    if (options) o = *options;
    if ((o.allocator.alloc == NULL) != (o.allocator.free == NULL))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "allocator needs both alloc and free, or neither");
    if (o.staging_bytes == 0) o.staging_bytes = DCP_NCCL_DEFAULT_STAGING_BYTES;
    if (o.staging_bytes < DCP_NCCL_MIN_STAGING_BYTES)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "staging_bytes must be >= %d, got %zu", DCP_NCCL_MIN_STAGING_BYTES,
                             o.staging_bytes);
    DCP_NCCL__CHECK(ncclCommCount(pool, &ranks));
    DCP_NCCL__CHECK(ncclCommUserRank(pool, &rank));
    if (o.max_cp == 0)
        for (o.max_cp = 1; o.max_cp * 2 <= ranks && o.max_cp * 2 <= DCP_MAX_RANKS;) o.max_cp *= 2;
    set = (dcp_nccl_set *)dcp_nccl__alloc(&o.allocator, sizeof *set);
    if (!set) {
        status = dcp_error_set(error, DCP_ERROR_OUT_OF_MEMORY, "cannot allocate the set");
        goto done;
    }
    memset(set, 0, sizeof *set);
    set->allocator = o.allocator;
    set->pool = pool;
    set->ranks = ranks, set->rank = rank, set->max_cp = o.max_cp;
    set->num_slots = dcp_comm_slot_count(o.max_cp);
    set->staging_bytes = o.staging_bytes;
    DCP_NCCL__TRY(dcp_comm_state_init(&set->state, ranks, rank, o.max_cp, error));
    /* the ring's transfers get the highest priority so that they start while kernels run */
    DCP_NCCL__CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    DCP_NCCL__CHECK(cudaStreamCreateWithPriority(&set->comm_stream, cudaStreamNonBlocking,
                                                 greatest));
    DCP_NCCL__CHECK(cudaEventCreateWithFlags(&set->compute_done, cudaEventDisableTiming));
    DCP_NCCL__CHECK(cudaEventCreateWithFlags(&set->comm_done, cudaEventDisableTiming));
    DCP_NCCL__CHECK(cudaMalloc(&set->staging, set->staging_bytes));
    DCP_NCCL__TRY(dcp_nccl__agree(set, error));
    DCP_NCCL__TRY(dcp_nccl__split(set, o.config, error));
    *out = set;
    set = NULL;
done:
    if (set) (void)dcp_nccl_set_destroy(set, NULL);
    return status == DCP_OK ? dcp_error_clear(error) : status;
}

/* Keeps the first failure of a cleanup sequence that goes on after errors. */
static void dcp_nccl__keep(dcp_status status, const dcp_error *scratch, dcp_status *first,
                           dcp_error *error)
{
    if (status == DCP_OK || *first != DCP_OK) return;
    *first = status;
    if (error) *error = *scratch;
}

DCP_NCCL_DEF dcp_status dcp_nccl_set_destroy(dcp_nccl_set *set, dcp_error *error)
{
    dcp_status first = DCP_OK;
    dcp_error scratch;
    dcp_allocator allocator;
    int32_t slot;
    if (!set) return dcp_error_clear(error);
    /* split children before the pool (the caller's, destroyed after this), largest first and
       so in the same order on every rank; go on after an error and report the first */
    for (slot = set->num_slots - 1; slot >= 0; slot--) {
        if (!set->comms[slot]) continue;
        dcp_nccl__keep(DCP_NCCL__RESULT(ncclCommFinalize(set->comms[slot]), &scratch), &scratch,
                       &first, error);
        dcp_nccl__keep(DCP_NCCL__RESULT(ncclCommDestroy(set->comms[slot]), &scratch), &scratch,
                       &first, error);
        set->comms[slot] = NULL;
    }
    if (set->staging)
        dcp_nccl__keep(DCP_NCCL__RESULT(cudaFree(set->staging), &scratch), &scratch, &first, error);
    if (set->compute_done)
        dcp_nccl__keep(DCP_NCCL__RESULT(cudaEventDestroy(set->compute_done), &scratch), &scratch,
                       &first, error);
    if (set->comm_done)
        dcp_nccl__keep(DCP_NCCL__RESULT(cudaEventDestroy(set->comm_done), &scratch), &scratch,
                       &first, error);
    if (set->comm_stream)
        dcp_nccl__keep(DCP_NCCL__RESULT(cudaStreamDestroy(set->comm_stream), &scratch), &scratch,
                       &first, error);
    allocator = set->allocator;
    dcp_free(&allocator, set);
    return first == DCP_OK ? dcp_error_clear(error) : first;
}

DCP_NCCL_DEF ncclComm_t dcp_nccl_set_comm(const dcp_nccl_set *set, int32_t cp)
{
    const int32_t slot = dcp_comm_slot(cp);
    if (!set || slot < 0 || slot >= set->num_slots) return NULL;
    return set->comms[slot];
}

/* Names a communicator of the set for messages: the pool, or the CP size. */
static void dcp_nccl__comm_name(const dcp_nccl_set *set, int32_t slot, char *name, size_t size)
{
    if (slot < 0) snprintf(name, size, "pool (%d ranks)", (int)set->ranks);
    else snprintf(name, size, "cp %d", (int)(2 << slot));
}

DCP_NCCL_DEF dcp_status dcp_nccl_set_check(const dcp_nccl_set *set, dcp_error *error)
{
    dcp_status status;
    int32_t slot;
    if ((status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    for (slot = -1; slot < set->num_slots; slot++) {
        ncclComm_t comm = slot < 0 ? set->pool : set->comms[slot];
        ncclResult_t async = ncclSuccess;
        char name[32];
        if (!comm) continue;
        DCP_NCCL__CHECK(ncclCommGetAsyncError(comm, &async));
        if (async != ncclSuccess && async != ncclInProgress) {
            dcp_nccl__comm_name(set, slot, name, sizeof name);
            return dcp_error_set(error, DCP_ERROR_NCCL,
                                 "asynchronous error on the %s communicator: %s (%d)%s%s; call "
                                 "dcp_nccl_set_abort",
                                 name, ncclGetErrorString(async), (int)async,
                                 ncclGetLastError(comm) ? ": " : "",
                                 ncclGetLastError(comm) ? ncclGetLastError(comm) : "");
        }
    }
done:
    return status == DCP_OK ? dcp_error_clear(error) : status;
}

DCP_NCCL_DEF dcp_status dcp_nccl_set_abort(dcp_nccl_set *set, int32_t abort_pool,
                                           dcp_error *error)
{
    dcp_status first = DCP_OK;
    dcp_error scratch;
    int32_t slot;
    if (!set) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "set must not be NULL");
    for (slot = set->num_slots - 1; slot >= 0; slot--) {
        if (!set->comms[slot]) continue;
        dcp_nccl__keep(DCP_NCCL__RESULT(ncclCommAbort(set->comms[slot]), &scratch), &scratch,
                       &first, error);
        set->comms[slot] = NULL;
    }
    if (abort_pool && set->pool) {
        dcp_nccl__keep(DCP_NCCL__RESULT(ncclCommAbort(set->pool), &scratch), &scratch, &first,
                       error);
        set->pool = NULL;
    }
    set->aborted = 1;
    return first == DCP_OK ? dcp_error_clear(error) : first;
}

/* ---------------------------------------------------------------------------- switch */

DCP_NCCL_DEF void dcp_nccl_set_current(const dcp_nccl_set *set, dcp_nccl_binding *binding)
{
    const dcp_comm_choice *c;
    if (!binding) return;
    memset(binding, 0, sizeof *binding);
    if (!set) return;
    c = &set->state.current;
    binding->comm = c->slot >= 0 && c->slot < set->num_slots ? set->comms[c->slot] : NULL;
    binding->cp = c->cp;
    binding->rank = c->rank_in_comm;
    binding->first_rank = c->first_rank;
    binding->idle = c->idle;
}

static dcp_status dcp_nccl__switch(dcp_nccl_set *set, int32_t first_rank, int32_t cp,
                                   int32_t idle, dcp_nccl_binding *binding, dcp_error *error)
{
    dcp_status status;
    if ((status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    status = dcp_comm_state_switch(&set->state, first_rank, cp, idle, NULL, error);
    if (status != DCP_OK) return status;
    dcp_nccl_set_current(set, binding);
    return dcp_error_clear(error);
}

DCP_NCCL_DEF dcp_status dcp_nccl_set_switch(dcp_nccl_set *set, const dcp_rank_view *view,
                                            dcp_nccl_binding *binding, dcp_error *error)
{
    if (!view) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "view must not be NULL");
    if (set && view->rank != set->rank)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "the view is rank %d's, this is rank %d of the pool", (int)view->rank,
                             (int)set->rank);
    return dcp_nccl__switch(set, view->first_rank, view->cp, view->idle, binding, error);
}

DCP_NCCL_DEF dcp_status dcp_nccl_set_switch_plan(dcp_nccl_set *set, const dcp_plan *plan,
                                                 int32_t microbatch, dcp_nccl_binding *binding,
                                                 dcp_error *error)
{
    dcp_rank_group where;
    dcp_status status;
    if ((status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    if (plan && plan->config.ranks != set->ranks)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "the plan is for %d ranks, the pool has %d", (int)plan->config.ranks,
                             (int)set->ranks);
    status = dcp_plan_rank_group(plan, set->rank, microbatch, &where, error);
    if (status != DCP_OK) return status;
    return dcp_nccl__switch(set, where.choice.first_rank, where.choice.cp, where.choice.idle,
                            binding, error);
}

DCP_NCCL_DEF dcp_status dcp_nccl_override_begin(dcp_nccl_set *set, int32_t cp,
                                                dcp_comm_scope *scope, dcp_nccl_binding *binding,
                                                dcp_error *error)
{
    dcp_status status;
    if ((status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    if ((status = dcp_comm_override_begin(&set->state, cp, scope, error)) != DCP_OK)
        return status;
    dcp_nccl_set_current(set, binding);
    return dcp_error_clear(error);
}

/* Restores even on an aborted set: the state is host memory only. */
DCP_NCCL_DEF dcp_status dcp_nccl_override_end(dcp_nccl_set *set, dcp_comm_scope *scope,
                                              dcp_error *error)
{
    if (!set) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "set must not be NULL");
    return dcp_comm_override_end(&set->state, scope, error);
}

typedef struct dcp_nccl__scoped {
    dcp_nccl_set *set;
    dcp_nccl_scoped_fn fn;
    void *user;
} dcp_nccl__scoped;

static dcp_status dcp_nccl__scoped_call(dcp_comm_state *state, void *user, dcp_error *error)
{
    dcp_nccl__scoped *scoped = (dcp_nccl__scoped *)user;
    dcp_nccl_binding binding;
    (void)state; /* it is scoped->set->state */
    dcp_nccl_set_current(scoped->set, &binding);
    return scoped->fn(scoped->set, &binding, scoped->user, error);
}

DCP_NCCL_DEF dcp_status dcp_nccl_override_run(dcp_nccl_set *set, int32_t cp,
                                              dcp_nccl_scoped_fn fn, void *user,
                                              dcp_error *error)
{
    dcp_nccl__scoped scoped;
    dcp_status status;
    if ((status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    if (!fn) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "fn must not be NULL");
    scoped.set = set, scoped.fn = fn, scoped.user = user;
    /* dcp.h's tested begin / call / end, whose end runs whatever the call returns */
    return dcp_comm_override_run(&set->state, cp, dcp_nccl__scoped_call, &scoped, error);
}

/* --------------------------------------------------------------------------- reroute */

/* Every check before the first enqueue, so that a bad argument fails before any traffic. */
static dcp_status dcp_nccl__reroute_check(const dcp_nccl_set *set, const dcp_reroute *reroute,
                                          const dcp_nccl_reroute_buffers *b, dcp_error *error)
{
    dcp_status status;
    int32_t i;
    if ((status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    if (!reroute || !b)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "reroute and buffers must not be NULL");
    if (reroute->rank != set->rank)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "the reroute list is rank %d's, this is rank %d", (int)reroute->rank,
                             (int)set->rank);
    if (b->element_size == 0 || (b->num_samples > 0 && !b->sample_data) ||
        (b->num_microbatches > 0 && !b->microbatch_data))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "buffers: element_size %zu, sample_data %s, microbatch_data %s",
                             b->element_size, b->sample_data ? "set" : "NULL",
                             b->microbatch_data ? "set" : "NULL");
    status = dcp_reroute_check(reroute, b->num_samples, b->sample_rows, b->num_microbatches,
                               b->microbatch_rows, error);
    if (status != DCP_OK) return status;
    for (i = 0; i < reroute->count; i++) {
        dcp_reroute_op op;
        if ((status = dcp_reroute_op_get(reroute, i, b->element_size, &op, error)) != DCP_OK)
            return status;
        if (op.peer < 0 || op.peer >= set->ranks)
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "transfer %d: peer %d outside the pool of %d", (int)i,
                                 (int)op.peer, (int)set->ranks);
        if (op.kind != DCP_TRANSFER_RECV && !b->sample_data[op.sample])
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "transfer %d reads sample %d, whose buffer is NULL", (int)i,
                                 (int)op.sample);
        if (op.kind != DCP_TRANSFER_SEND && !b->microbatch_data[op.microbatch])
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "transfer %d writes microbatch %d, whose buffer is NULL", (int)i,
                                 (int)op.microbatch);
    }
    if (b->microbatch_rows)
        for (i = 0; i < b->num_microbatches; i++)
            if (b->microbatch_rows[i] < 0 ||
                (uint64_t)b->microbatch_rows[i] > SIZE_MAX / b->element_size)
                return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                     "microbatch_rows[%d] = %lld", (int)i,
                                     (long long)b->microbatch_rows[i]);
    return DCP_OK;
}

DCP_NCCL_DEF dcp_status dcp_nccl_reroute_execute(dcp_nccl_set *set, const dcp_reroute *reroute,
                                                 const dcp_nccl_reroute_buffers *buffers,
                                                 cudaStream_t stream, dcp_error *error)
{
    dcp_status status;
    int grouped = 0;
    int32_t i;
    if ((status = dcp_nccl__reroute_check(set, reroute, buffers, error)) != DCP_OK)
        return status;
    if (buffers->microbatch_rows) /* padding rows are zero; receives and copies fill the rest */
        for (i = 0; i < buffers->num_microbatches; i++)
            if (buffers->microbatch_rows[i] > 0 && buffers->microbatch_data[i])
                DCP_NCCL__CHECK(cudaMemsetAsync(buffers->microbatch_data[i], 0,
                                                (size_t)buffers->microbatch_rows[i] *
                                                    buffers->element_size,
                                                stream));
    for (i = 0; i < reroute->count; i++) { /* local copies */
        dcp_reroute_op op;
        (void)dcp_reroute_op_get(reroute, i, buffers->element_size, &op, NULL);
        if (op.kind != DCP_TRANSFER_COPY || op.bytes == 0) continue;
        DCP_NCCL__CHECK(cudaMemcpyAsync(
            (unsigned char *)buffers->microbatch_data[op.microbatch] + op.destination_offset,
            (const unsigned char *)buffers->sample_data[op.sample] + op.source_offset, op.bytes,
            cudaMemcpyDeviceToDevice, stream));
    }
    /* one group: A's sends to B pair with B's receives from A in list order (dcp.h builds
       every list in one global order); zero bytes are skipped on both sides alike */
    DCP_NCCL__CHECK(ncclGroupStart());
    grouped = 1;
    for (i = 0; i < reroute->count; i++) {
        dcp_reroute_op op;
        (void)dcp_reroute_op_get(reroute, i, buffers->element_size, &op, NULL);
        if (op.bytes == 0) continue;
        if (op.kind == DCP_TRANSFER_SEND)
            DCP_NCCL__CHECK(ncclSend(
                (const unsigned char *)buffers->sample_data[op.sample] + op.source_offset,
                op.bytes, ncclUint8, op.peer, set->pool, stream));
        else if (op.kind == DCP_TRANSFER_RECV)
            DCP_NCCL__CHECK(ncclRecv(
                (unsigned char *)buffers->microbatch_data[op.microbatch] + op.destination_offset,
                op.bytes, ncclUint8, op.peer, set->pool, stream));
    }
    grouped = 0;
    DCP_NCCL__CHECK(ncclGroupEnd());
done:
    if (grouped) (void)ncclGroupEnd(); /* never leave a group open on this thread */
    return status == DCP_OK ? dcp_error_clear(error) : status;
}

/* ------------------------------------------------------------------------------ ring */

static size_t dcp_nccl__dtype_size(dcp_dtype dtype)
{
    switch (dtype) {
    case DCP_DTYPE_FLOAT32: return 4;
    case DCP_DTYPE_BFLOAT16:
    case DCP_DTYPE_FLOAT16: return 2;
    }
    return 0;
}

/* Scratch regions of a pass, and the attention workspace after them. */
typedef struct dcp_nccl__ring {
    dcp_ring_scratch regions;
    size_t workspace_offset, workspace_bytes, total;
    int64_t q_values, kv_values;
    size_t element_size;
} dcp_nccl__ring;

static dcp_status dcp_nccl__ring_layout(const dcp_attention_params *params,
                                        const dcp_cuda_layout *layout, dcp_dtype dtype,
                                        dcp_ring_pass pass, dcp_nccl__ring *ring,
                                        dcp_error *error)
{
    dcp_ring_shape shape;
    dcp_status status;
    if (!params || !layout || !ring)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "params, layout and bytes must not be NULL");
    memset(ring, 0, sizeof *ring);
    ring->element_size = dcp_nccl__dtype_size(dtype);
    if (ring->element_size == 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "dtype %d is not a dcp_dtype",
                             (int)dtype);
    memset(&shape, 0, sizeof shape);
    shape.cp = layout->thd.cp;
    shape.local_rows = layout->local_rows;
    shape.num_heads = params->num_heads;
    shape.num_kv_heads = params->num_kv_heads ? params->num_kv_heads : params->num_heads;
    shape.head_dim = params->head_dim;
    shape.element_size = ring->element_size;
    if ((status = dcp_ring_scratch_layout(&shape, pass, &ring->regions, error)) != DCP_OK)
        return status;
    ring->q_values = layout->local_rows * shape.num_heads * shape.head_dim;
    ring->kv_values = layout->local_rows * shape.num_kv_heads * shape.head_dim;
    status = dcp_cuda_attention_workspace_size(params, layout, &ring->workspace_bytes, error);
    if (status != DCP_OK) return status;
    ring->workspace_offset = (ring->regions.total + DCP_RING_SCRATCH_ALIGN - 1) /
                             DCP_RING_SCRATCH_ALIGN * DCP_RING_SCRATCH_ALIGN;
    if (ring->workspace_bytes > SIZE_MAX - ring->workspace_offset)
        return dcp_error_set(error, DCP_ERROR_OVERFLOW, "ring scratch overflows size_t");
    ring->total = ring->workspace_offset + ring->workspace_bytes;
    return DCP_OK;
}

DCP_NCCL_DEF dcp_status dcp_nccl_ring_scratch_size(const dcp_attention_params *params,
                                                   const dcp_cuda_layout *layout, dcp_dtype dtype,
                                                   dcp_ring_pass pass, size_t *bytes,
                                                   dcp_error *error)
{
    dcp_nccl__ring ring;
    dcp_status status;
    if (!bytes) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "bytes must not be NULL");
    if ((status = dcp_nccl__ring_layout(params, layout, dtype, pass, &ring, error)) != DCP_OK)
        return status;
    *bytes = ring.total;
    return dcp_error_clear(error);
}

/* The checks every ring call makes before it enqueues anything. */
static dcp_status dcp_nccl__ring_setup(const dcp_nccl_set *set, const dcp_nccl_binding **binding,
                                       const dcp_attention_params *params,
                                       const dcp_cuda_layout *layout, dcp_dtype dtype,
                                       dcp_ring_pass pass, void *scratch, size_t scratch_bytes,
                                       dcp_nccl_binding *current, dcp_nccl__ring *ring,
                                       dcp_error *error)
{
    const dcp_nccl_binding *b;
    dcp_status status;
    if ((status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    if (!*binding) {
        dcp_nccl_set_current(set, current);
        *binding = current;
    }
    b = *binding;
    if ((status = dcp_nccl__ring_layout(params, layout, dtype, pass, ring, error)) != DCP_OK)
        return status;
    if (layout->thd.cp != b->cp)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "layout cp %d differs from the binding's cp %d", (int)layout->thd.cp,
                             (int)b->cp);
    if (b->cp > 1 && (!b->comm || b->rank < 0 || b->rank >= b->cp))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "a ring of cp %d needs the group's communicator and a rank in it "
                             "(binding: comm %s, rank %d)",
                             (int)b->cp, b->comm ? "set" : "NULL", (int)b->rank);
    if (scratch_bytes < ring->total || (ring->total > 0 && !scratch))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "scratch of %zu bytes at %p; the pass needs %zu "
                             "(dcp_nccl_ring_scratch_size)",
                             scratch_bytes, scratch, ring->total);
    return DCP_OK;
}

static void *dcp_nccl__at(void *scratch, size_t offset)
{
    return (unsigned char *)scratch + offset;
}

/* Posts the KV transfer of step x (k then v to next, k then v from prev) on the communication
   stream once the compute stream has passed the last reader of the receiving slot. */
static dcp_status dcp_nccl__post_kv(dcp_nccl_set *set, const dcp_nccl_binding *b,
                                    const dcp_nccl__ring *ring, const dcp_ring_exchange *x,
                                    const void *k, const void *v, void *scratch, dcp_error *error)
{
    const size_t bytes = (size_t)ring->kv_values * ring->element_size;
    dcp_status status = DCP_OK;
    int grouped = 0;
    if (!x->kv_send && x->kv_recv_slot < 0) return DCP_OK;
    DCP_NCCL__CHECK(cudaStreamWaitEvent(set->comm_stream, set->compute_done, 0));
    if (bytes == 0) goto done;
    DCP_NCCL__CHECK(ncclGroupStart());
    grouped = 1;
    if (x->kv_send) {
        DCP_NCCL__CHECK(ncclSend(k, bytes, ncclUint8, x->next, b->comm, set->comm_stream));
        DCP_NCCL__CHECK(ncclSend(v, bytes, ncclUint8, x->next, b->comm, set->comm_stream));
    }
    if (x->kv_recv_slot >= 0) {
        unsigned char *slot = (unsigned char *)dcp_nccl__at(
            scratch, ring->regions.kv[x->kv_recv_slot].offset);
        DCP_NCCL__CHECK(ncclRecv(slot, bytes, ncclUint8, x->prev, b->comm, set->comm_stream));
        DCP_NCCL__CHECK(
            ncclRecv(slot + bytes, bytes, ncclUint8, x->prev, b->comm, set->comm_stream));
    }
    grouped = 0;
    DCP_NCCL__CHECK(ncclGroupEnd());
done:
    if (grouped) (void)ncclGroupEnd();
    return status;
}

/* The step's dK, dV accumulator moves one hop: sent to next, the next one received from prev. */
static dcp_status dcp_nccl__post_dkv(dcp_nccl_set *set, const dcp_nccl_binding *b,
                                     const dcp_nccl__ring *ring, const dcp_ring_exchange *x,
                                     void *scratch, dcp_error *error)
{
    const size_t bytes = 2 * (size_t)ring->kv_values * sizeof(float);
    dcp_status status = DCP_OK;
    int grouped = 0;
    if (!x->dkv_send && x->dkv_recv_slot < 0) return DCP_OK;
    DCP_NCCL__CHECK(cudaStreamWaitEvent(set->comm_stream, set->compute_done, 0));
    if (bytes == 0) goto done;
    DCP_NCCL__CHECK(ncclGroupStart());
    grouped = 1;
    if (x->dkv_send)
        DCP_NCCL__CHECK(ncclSend(dcp_nccl__at(scratch, ring->regions.dkv[x->dkv_slot].offset),
                                 bytes, ncclUint8, x->next, b->comm, set->comm_stream));
    if (x->dkv_recv_slot >= 0)
        DCP_NCCL__CHECK(
            ncclRecv(dcp_nccl__at(scratch, ring->regions.dkv[x->dkv_recv_slot].offset), bytes,
                     ncclUint8, x->prev, b->comm, set->comm_stream));
    grouped = 0;
    DCP_NCCL__CHECK(ncclGroupEnd());
done:
    if (grouped) (void)ncclGroupEnd();
    return status;
}

/* The compute stream waits for everything posted on the communication stream so far. */
static dcp_status dcp_nccl__join(dcp_nccl_set *set, cudaStream_t stream, dcp_error *error)
{
    dcp_status status = DCP_OK;
    DCP_NCCL__CHECK(cudaEventRecord(set->comm_done, set->comm_stream));
    DCP_NCCL__CHECK(cudaStreamWaitEvent(stream, set->comm_done, 0));
done:
    return status;
}

/* Step s: its KV (the caller's at step 0, else a scratch slot). */
static void dcp_nccl__step_kv(const dcp_nccl__ring *ring, const dcp_ring_exchange *x,
                              const void *k, const void *v, void *scratch, const void **step_k,
                              const void **step_v)
{
    if (x->kv_slot < 0) {
        *step_k = k, *step_v = v;
        return;
    }
    *step_k = dcp_nccl__at(scratch, ring->regions.kv[x->kv_slot].offset);
    *step_v = (const unsigned char *)*step_k + (size_t)ring->kv_values * ring->element_size;
}

DCP_NCCL_DEF dcp_status dcp_nccl_ring_forward(dcp_nccl_set *set, const dcp_nccl_binding *binding,
                                              const dcp_attention_params *params,
                                              const dcp_cuda_layout *layout, dcp_dtype dtype,
                                              const void *q, const void *k, const void *v,
                                              void *out, float *lse, void *scratch,
                                              size_t scratch_bytes, cudaStream_t stream,
                                              dcp_error *error)
{
    dcp_nccl_binding current;
    dcp_nccl__ring ring;
    dcp_status status;
    float *partial_out, *partial_lse, *acc_out, *acc_lse;
    void *workspace;
    int32_t s, cp;
    status = dcp_nccl__ring_setup(set, &binding, params, layout, dtype, DCP_RING_FORWARD, scratch,
                                  scratch_bytes, &current, &ring, error);
    if (status != DCP_OK) return status;
    cp = binding->cp;
    workspace = ring.workspace_bytes ? dcp_nccl__at(scratch, ring.workspace_offset) : NULL;
    if (layout->local_rows == 0) return dcp_error_clear(error); /* the whole group has none */
    if (cp == 1) { /* no ring: one step of the whole buffer against itself, straight to dtype */
        dcp_attention_view whole;
        memset(&whole, 0, sizeof whole);
        return dcp_cuda_attention_forward(params, layout, &whole, dtype, q, k, v, dtype, out, lse,
                                          workspace, ring.workspace_bytes, (void *)stream, error);
    }
    partial_out = (float *)dcp_nccl__at(scratch, ring.regions.partial_out.offset);
    partial_lse = (float *)dcp_nccl__at(scratch, ring.regions.partial_lse.offset);
    acc_out = (float *)dcp_nccl__at(scratch, ring.regions.acc_out.offset);
    acc_lse = (float *)dcp_nccl__at(scratch, ring.regions.acc_lse.offset);
    DCP_NCCL__TRY(dcp_cuda_acc_init(params, layout, acc_out, acc_lse, (void *)stream, error));
    DCP_NCCL__CHECK(cudaEventRecord(set->compute_done, stream)); /* the caller's k, v ready */
    for (s = 0; s < cp; s++) {
        dcp_ring_exchange x;
        dcp_ring_step step;
        dcp_attention_params p = *params;
        const void *step_k, *step_v;
        DCP_NCCL__TRY(dcp_ring_exchange_plan(cp, binding->rank, s, &x, error));
        DCP_NCCL__TRY(dcp_ring_step_plan(cp, binding->rank, s, params->causal, &step, error));
        dcp_nccl__step_kv(&ring, &x, k, v, scratch, &step_k, &step_v);
        /* the next step's KV travels while this one computes */
        DCP_NCCL__TRY(dcp_nccl__post_kv(set, binding, &ring, &x, step_k, step_v, scratch, error));
        p.causal = step.causal;
        DCP_NCCL__TRY(dcp_cuda_attention_forward(&p, layout, &step.view, dtype, q, step_k, step_v,
                                                 DCP_DTYPE_FLOAT32, partial_out, partial_lse,
                                                 workspace, ring.workspace_bytes, (void *)stream,
                                                 error));
        DCP_NCCL__TRY(dcp_cuda_acc_merge(params, layout, step.view.q_half, partial_out,
                                         partial_lse, acc_out, acc_lse, (void *)stream, error));
        DCP_NCCL__CHECK(cudaEventRecord(set->compute_done, stream));
        DCP_NCCL__TRY(dcp_nccl__join(set, stream, error)); /* step s + 1 waits for its KV */
    }
    DCP_NCCL__TRY(dcp_cuda_acc_finalize(params, layout, binding->rank, acc_out, acc_lse, dtype,
                                        out, lse, (void *)stream, error));
done:
    return status == DCP_OK ? dcp_error_clear(error) : status;
}

DCP_NCCL_DEF dcp_status dcp_nccl_ring_backward(
    dcp_nccl_set *set, const dcp_nccl_binding *binding, const dcp_attention_params *params,
    const dcp_cuda_layout *layout, dcp_dtype dtype, const void *q, const void *k, const void *v,
    const void *out, const void *dout, const float *lse, void *dq, void *dk, void *dv,
    int32_t deterministic, void *scratch, size_t scratch_bytes, cudaStream_t stream,
    dcp_error *error)
{
    dcp_nccl_binding current;
    dcp_nccl__ring ring;
    dcp_status status;
    float *dq_acc, *home = NULL;
    void *workspace;
    int32_t s, cp;
    status = dcp_nccl__ring_setup(set, &binding, params, layout, dtype, DCP_RING_BACKWARD,
                                  scratch, scratch_bytes, &current, &ring, error);
    if (status != DCP_OK) return status;
    cp = binding->cp;
    workspace = ring.workspace_bytes ? dcp_nccl__at(scratch, ring.workspace_offset) : NULL;
    if (layout->local_rows == 0) return dcp_error_clear(error);
    dq_acc = (float *)dcp_nccl__at(scratch, ring.regions.dq.offset);
    DCP_NCCL__CHECK(cudaMemsetAsync(dq_acc, 0, ring.regions.dq.bytes, stream));
    DCP_NCCL__CHECK(cudaEventRecord(set->compute_done, stream));
    for (s = 0; s < cp; s++) {
        dcp_ring_exchange x;
        dcp_ring_step step;
        dcp_attention_params p = *params;
        const void *step_k, *step_v;
        float *acc;
        DCP_NCCL__TRY(dcp_ring_exchange_plan(cp, binding->rank, s, &x, error));
        DCP_NCCL__TRY(dcp_ring_step_plan(cp, binding->rank, s, params->causal, &step, error));
        dcp_nccl__step_kv(&ring, &x, k, v, scratch, &step_k, &step_v);
        DCP_NCCL__TRY(dcp_nccl__post_kv(set, binding, &ring, &x, step_k, step_v, scratch, error));
        acc = (float *)dcp_nccl__at(scratch, ring.regions.dkv[x.dkv_slot].offset);
        if (x.dkv_zero) /* this rank's own accumulator starts here */
            DCP_NCCL__CHECK(cudaMemsetAsync(acc, 0, ring.regions.dkv[x.dkv_slot].bytes, stream));
        p.causal = step.causal;
        DCP_NCCL__TRY(dcp_cuda_attention_backward(&p, layout, &step.view, dtype, q, step_k,
                                                  step_v, out, dout, lse, dq_acc, acc,
                                                  acc + ring.kv_values, deterministic, workspace,
                                                  ring.workspace_bytes, (void *)stream, error));
        DCP_NCCL__CHECK(cudaEventRecord(set->compute_done, stream));
        DCP_NCCL__TRY(dcp_nccl__post_dkv(set, binding, &ring, &x, scratch, error));
        DCP_NCCL__TRY(dcp_nccl__join(set, stream, error)); /* step s + 1 waits for both */
        if (x.dkv_home_slot >= 0)
            home = (float *)dcp_nccl__at(scratch, ring.regions.dkv[x.dkv_home_slot].offset);
    }
    DCP_NCCL__TRY(dcp_cuda_convert(dq_acc, dtype, dq, ring.q_values, (void *)stream, error));
    DCP_NCCL__TRY(dcp_cuda_convert(home, dtype, dk, ring.kv_values, (void *)stream, error));
    DCP_NCCL__TRY(dcp_cuda_convert(home + ring.kv_values, dtype, dv, ring.kv_values,
                                   (void *)stream, error));
done:
    return status == DCP_OK ? dcp_error_clear(error) : status;
}

/* ------------------------------------------------------------------------- broadcast */

DCP_NCCL_DEF dcp_status dcp_nccl_broadcast_bytes(dcp_nccl_set *set, ncclComm_t comm,
                                                 int32_t root, const void *data, size_t size,
                                                 void **received, size_t *received_size,
                                                 cudaStream_t stream, dcp_error *error)
{
    dcp_status status, local = DCP_OK;
    dcp_error local_error;
    unsigned char *host = NULL;
    uint64_t length = 0, chunks = 0, c;
    int ranks = 0, me = 0;
    if ((status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    if (!comm) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "comm must not be NULL");
    if (received) *received = NULL;
    if (received_size) *received_size = 0;
    DCP_NCCL__CHECK(ncclCommCount(comm, &ranks));
    DCP_NCCL__CHECK(ncclCommUserRank(comm, &me));
    if (root < 0 || root >= ranks)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "root %d outside [0, %d)",
                             (int)root, ranks);
    if (me == root && !data && size > 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "the root's data is NULL");
    if (me != root && (!received || !received_size))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "received and received_size must not be NULL off the root");
    /* 1. the length, one uint64 */
    length = me == root ? (uint64_t)size : 0;
    DCP_NCCL__CHECK(cudaMemcpyAsync(set->staging, &length, sizeof length, cudaMemcpyHostToDevice,
                                    stream));
    DCP_NCCL__CHECK(ncclBroadcast(set->staging, set->staging, sizeof length, ncclUint8, root,
                                  comm, stream));
    DCP_NCCL__CHECK(cudaMemcpyAsync(&length, set->staging, sizeof length, cudaMemcpyDeviceToHost,
                                    stream));
    DCP_NCCL__CHECK(cudaStreamSynchronize(stream));
    /* every rank judges the same length the same way: all go on, or all stop here */
    DCP_NCCL__TRY(dcp_metadata_chunks(length, set->staging_bytes, &chunks, error));
    if (me != root || received) {
        host = (unsigned char *)dcp_nccl__alloc(&set->allocator, (size_t)length);
        if (!host)
            local =
                dcp_error_set(&local_error, DCP_ERROR_OUT_OF_MEMORY,
                              "cannot allocate %llu bytes of metadata", (unsigned long long)length);
    }
    /* 2. the bytes, chunk by chunk through the staging buffer; a rank that could not allocate
       still takes part, so that no peer waits for it */
    for (c = 0; c < chunks; c++) {
        const uint64_t begin = c * set->staging_bytes;
        const size_t n = (size_t)(length - begin < set->staging_bytes ? length - begin
                                                                      : set->staging_bytes);
        if (me == root)
            DCP_NCCL__CHECK(cudaMemcpyAsync(set->staging, (const unsigned char *)data + begin, n,
                                            cudaMemcpyHostToDevice, stream));
        DCP_NCCL__CHECK(
            ncclBroadcast(set->staging, set->staging, n, ncclUint8, root, comm, stream));
        if (host && me != root)
            DCP_NCCL__CHECK(cudaMemcpyAsync(host + begin, set->staging, n,
                                            cudaMemcpyDeviceToHost, stream));
        DCP_NCCL__CHECK(cudaStreamSynchronize(stream));
    }
    if (local != DCP_OK) {
        status = local;
        if (error) *error = local_error;
        goto done;
    }
    if (me == root && host) memcpy(host, data, (size_t)length);
    if (received) *received = host, host = NULL;
    if (received_size) *received_size = (size_t)length;
done:
    if (host) dcp_free(&set->allocator, host);
    return status == DCP_OK ? dcp_error_clear(error) : status;
}

/* Serializes on the root (length 0 on failure, which every rank rejects), broadcasts, and
   hands the bytes to the deserializer. */
typedef dcp_status (*dcp_nccl__serialize_fn)(const void *object, void *buffer, size_t capacity,
                                             size_t *size, dcp_error *error);
typedef dcp_status (*dcp_nccl__deserialize_fn)(const void *buffer, size_t size,
                                               const dcp_allocator *allocator, void **object,
                                               dcp_error *error);

static dcp_status dcp_nccl__plan_serialize(const void *object, void *buffer, size_t capacity,
                                           size_t *size, dcp_error *error)
{
    return dcp_plan_serialize((const dcp_plan *)object, buffer, capacity, size, error);
}
static dcp_status dcp_nccl__plan_deserialize(const void *buffer, size_t size,
                                             const dcp_allocator *allocator, void **object,
                                             dcp_error *error)
{
    dcp_plan *plan = NULL;
    dcp_status status = dcp_plan_deserialize(buffer, size, allocator, &plan, error);
    *object = plan;
    return status;
}
static dcp_status dcp_nccl__view_serialize(const void *object, void *buffer, size_t capacity,
                                           size_t *size, dcp_error *error)
{
    return dcp_rank_view_serialize((const dcp_rank_view *)object, buffer, capacity, size, error);
}
static dcp_status dcp_nccl__view_deserialize(const void *buffer, size_t size,
                                             const dcp_allocator *allocator, void **object,
                                             dcp_error *error)
{
    dcp_rank_view *view = NULL;
    dcp_status status = dcp_rank_view_deserialize(buffer, size, allocator, &view, error);
    *object = view;
    return status;
}

static dcp_status dcp_nccl__broadcast_object(dcp_nccl_set *set, ncclComm_t comm, int32_t root,
                                             const void *object, void **received,
                                             dcp_nccl__serialize_fn serialize,
                                             dcp_nccl__deserialize_fn deserialize,
                                             cudaStream_t stream, dcp_error *error)
{
    dcp_status status, root_status = DCP_OK;
    dcp_error root_error;
    unsigned char *bytes = NULL;
    void *copy = NULL;
    size_t size = 0, got = 0;
    int me = 0;
    if ((status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    if (!comm) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "comm must not be NULL");
    if (received) *received = NULL;
    DCP_NCCL__CHECK(ncclCommUserRank(comm, &me));
    if (me == root) {
        root_status = serialize(object, NULL, 0, &size, &root_error);
        if (root_status == DCP_OK) {
            bytes = (unsigned char *)dcp_nccl__alloc(&set->allocator, size);
            if (!bytes)
                root_status = dcp_error_set(&root_error, DCP_ERROR_OUT_OF_MEMORY,
                                            "cannot allocate %zu bytes to serialize", size);
        }
        if (root_status == DCP_OK) root_status = serialize(object, bytes, size, &size, &root_error);
        if (root_status != DCP_OK) size = 0; /* every rank will reject length 0 */
    }
    status = dcp_nccl_broadcast_bytes(set, comm, root, bytes, size,
                                      me == root && !received ? NULL : (void **)&copy, &got,
                                      stream, error);
    if (root_status != DCP_OK) { /* the root's own reason, not the rejected length */
        status = root_status;
        if (error) *error = root_error;
        goto done;
    }
    if (status != DCP_OK) goto done;
    if (received) status = deserialize(copy, got, &set->allocator, received, error);
done:
    if (bytes) dcp_free(&set->allocator, bytes);
    if (copy) dcp_free(&set->allocator, copy);
    return status == DCP_OK ? dcp_error_clear(error) : status;
}

DCP_NCCL_DEF dcp_status dcp_nccl_broadcast_plan(dcp_nccl_set *set, ncclComm_t comm, int32_t root,
                                                const dcp_plan *plan, dcp_plan **received,
                                                cudaStream_t stream, dcp_error *error)
{
    void *object = NULL;
    dcp_status status = dcp_nccl__broadcast_object(
        set, comm, root, plan, received ? &object : NULL, dcp_nccl__plan_serialize,
        dcp_nccl__plan_deserialize, stream, error);
    if (received) *received = (dcp_plan *)object;
    return status;
}

DCP_NCCL_DEF dcp_status dcp_nccl_broadcast_view(dcp_nccl_set *set, ncclComm_t comm, int32_t root,
                                                const dcp_rank_view *view,
                                                dcp_rank_view **received, cudaStream_t stream,
                                                dcp_error *error)
{
    void *object = NULL;
    dcp_status status = dcp_nccl__broadcast_object(
        set, comm, root, view, received ? &object : NULL, dcp_nccl__view_serialize,
        dcp_nccl__view_deserialize, stream, error);
    if (received) *received = (dcp_rank_view *)object;
    return status;
}

#ifdef __cplusplus
}
#endif

#endif /* DCP_NCCL_IMPLEMENTATION_INCLUDED */
#endif /* DCP_NCCL_IMPLEMENTATION */
