/* dcp_nccl.h - the NCCL layer of libdcp: communicators per CP size, the per-microbatch switch,
   evaluation at another CP size, reroute, ring attention and metadata broadcast. v0.1.0
   Header-only, stb style, on top of dcp.h, nccl.h (2.18 or later) and the CUDA runtime.

   WHAT IT DOES
   dcp.h plans which sample runs on how many ranks and derives, as pure functions, everything a
   rank must do about it (who sends what to whom, in which order, through which communicator,
   with which buffers). This header carries those answers out with NCCL and CUDA, and nothing
   more: the decisions are tested on simulated ranks in tests/test_comm.c, and this header's
   own code runs on a host transport as strict as NCCL (tests/fake_nccl: NCCL and CUDA
   stand-ins, 1 to 512 ranks as threads, each with a device thread) in tests/test_nccl_host.c.
   From the caller's DP x CP communicator (the pool) it builds, once, one communicator per CP
   size 2..max_cp with ncclCommSplit (each with the pool's config, or inheriting it; CP size 1
   needs none); per microbatch it hands out the group's communicator and the rank's index in
   it; it can pin a CP size for a scope
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
       dcp_nccl_options options = {0};     // the planner's max_cp, not the pool size
       options.plan_config = &config;      // config.max_cp = dcp_comm_max_cp(...) ideally
       options.config = &pool_config;      // the config pool_comm was created with
       dcp_nccl_set_create(pool_comm, &options, &set, &err);
       // per global batch: plan on TP rank 0, broadcast to the other TP ranks
       dcp_plan *plan = NULL;
       if (tp_rank == 0) dcp_plan_create(&config, lengths, n, &plan, &err);
       dcp_nccl_broadcast_plan(set, tp_comm, 0, plan, tp_rank == 0 ? NULL : &plan, stream, &err);
       dcp_nccl_plan_agree(set, plan, stream, &err);   // every rank holds the same plan
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
       dcp_nccl_set_wait(set, stream, &err);   // not cudaStreamSynchronize: it times out
       int pool_gone = set->pool == NULL;  // after a failure the set has aborted the pool
       if (dcp_nccl_set_destroy(set, &err) == DCP_ERROR_NCCL) pool_gone = 1;
       if (!pool_gone) ncclCommDestroy(pool_comm);

   BUILDING
   Include dcp.h (without DCP_NO_DISTRIBUTED) and then dcp_nccl.h; define DCP_NCCL_IMPLEMENTATION
   in exactly one C, C++ or CUDA file. It compiles as C99 and under nvcc. Link with
   dcp_cuda.o (the attention kernels), -lnccl and -lcudart (and -lpthread where the C library
   does not hold the threads, glibc before 2.34: aborts under NCCL before 2.22 use them):
       nvcc -O2 -arch=sm_90 your.cu dcp_cuda.cu -o your -lnccl
   Option macros, defined before the implementation include:
       DCP_NCCL_STATIC                 make every function static
       DCP_NCCL_DEFAULT_STAGING_BYTES  device staging of metadata broadcasts (1 MiB); a
                                       dcp_nccl_options field overrides it per set
       DCP_NCCL_DEFAULT_TIMEOUT_MS     how long a wait lasts before it aborts (10 min); a
                                       dcp_nccl_options field overrides it per set
       DCP_NCCL_NOW_MS()               the wall clock of timeouts, in ms (default: the
                                       monotonic clock where <time.h> declares it, as in C++
                                       or with _POSIX_C_SOURCE >= 199309L; else time(), so
                                       whole seconds under strict C99)
       DCP_NCCL_PAUSE()                between two polls (default sched_yield on POSIX)
       DCP_NCCL_FAULT_HOOK(call_text)  test builds: nonzero makes that CUDA/NCCL call fail
                                       without running (teardown and polls excepted)

   CONVENTIONS
   - Every function returns a dcp_status. Every CUDA and NCCL result is checked by one macro
     and becomes DCP_ERROR_CUDA or DCP_ERROR_NCCL with file:line, the error text, its code and
     the call's text in the dcp_error message.
   - Failures (see tests/test_nccl_host.c, which injects one at every call): an argument
     error is found before a function's first enqueue and changes nothing, except that a
     broadcast first takes part in every chunk (its peers are in the same collectives) and
     then fails. A CUDA or NCCL error after the first enqueue may leave this rank's half of
     some traffic posted, so the function aborts before it returns: every communicator of the
     set, the pool included (and the caller's communicator it ran on), every abort flag
     raised before any abort waits (ABORTING below). The set then answers every later call
     with DCP_ERROR_NCCL until dcp_nccl_set_destroy, and set->pool is NULL. Every exit leaves
     the caller's stream ordered after the communication stream (joined).
     dcp_nccl_plan_agree's mismatch is not a failure of the transport: the set stays usable.
   - The pool is the caller's to destroy after dcp_nccl_set_destroy, unless the set aborted
     it: set->pool was NULL before destroy, or dcp_nccl_set_create / dcp_nccl_set_destroy
     returned DCP_ERROR_NCCL or DCP_ERROR_CUDA (creation: after a transport failure this
     rank's peers may wait for it in the agreement or a split, so every rank aborts its pool).
   - Waiting and timeouts: nothing of this layer blocks the host in cudaStreamSynchronize.
     Where the host needs a result (set creation, broadcasts, agreement, dcp_nccl_set_wait,
     destroy) it polls cudaStreamQuery and ncclCommGetAsyncError; after options.timeout_ms (or
     an asynchronous error) it aborts as above and returns DCP_ERROR_NCCL naming the operation
     and the communicator. Pageable host copies are issued only on a drained stream (CUDA may
     make them wait for the stream otherwise, without bound). set->timeout_ms may be changed
     between calls. That a peer which never comes costs a timeout, not a hang, HOLDS WITH
     NON-BLOCKING COMMUNICATORS (the pool's config.blocking = 0, which the splits share):
     every NCCL call then returns at once (ncclInProgress) and is polled to its end with the
     same timeout; a split, which runs as the POOL's background job, is polled on the pool,
     and its child exists once the pool says so. With blocking communicators (NCCL's
     default) NCCL itself blocks the host, without a timeout, where it documents it:
     ncclCommSplit until every rank of the pool has called it, a first use of a peer until the
     peer connects (lazy connection; collectives too from NCCL 2.22), a launch while the work
     queue is full. The layer keeps out of these what it can -- creation agrees over the pool
     (polled) before it splits; destroy waits for the set's work by polling before
     ncclCommFinalize (which would wait for it without bound) and aborts instead when it does
     not pass -- but a blocking rank whose peer stops between the agreement and its split, or
     before its first use of a peer, hangs in NCCL there.
   - Streams: functions take the caller's stream and only enqueue work on it (broadcast and
     set creation also wait for it); the ring's transfers run on the set's own communication
     stream, ordered against the caller's stream by events, and the call returns with all of
     them ordered before later work on the caller's stream.
   - Memory: set creation allocates the set (host, options.allocator), a communication stream,
     four events and the staging buffer (device); broadcasts allocate the received buffer and
     object (host). Nothing else allocates: the ring takes caller scratch sized by
     dcp_nccl_ring_scratch_size, reroute takes the caller's buffers.
   - Threads: one set per process and device, used by one thread at a time (the override
     state, the events and the communication stream are the set's); ncclGroupStart/End are
     per thread, so never call into one set from two threads. The layer starts threads of its
     own only to abort under NCCL before 2.22 (ABORTING), and joins them. Thread-safe:
     dcp_nccl_compiled_version, dcp_nccl_ring_scratch_size and dcp_nccl_set_comm /
     dcp_nccl_set_current on a set no thread is changing. All ranks of a communicator call
     its collective functions in the same order with the same sizes; dcp.h gives every rank
     the same lists, which is what makes that hold, and dcp_nccl_plan_agree checks the plan.
   - Several ranks on ONE GPU: NCCL refuses two ranks that look like the same host on one
     device; give each process its own NCCL_HOSTID and keep the traffic on sockets
     (NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo). tests/multirank.sh does it for 2..8 ranks.

   RESOURCE SHARING (the split communicators)
   ncclCommSplit takes resource sharing from the PARENT's config: a splitShare set in the
   child's config has no effect. So the pool's creator decides, and the set copies the pool's
   config (options.config, which must be the one the pool was created with) whole into every
   split, or passes NULL when options.config is NULL (NCCL then copies the pool's config into
   the child). Shared (pool splitShare 1, or NCCL_COMM_SPLIT_SHARE_RESOURCES=1): the children
   use the pool's channels and its abort flag, so a CP ring cannot overlap the DP collectives
   on the pool (they serialize), and aborting a child aborts the pool, whose later kernels
   would quit without an error. The set therefore aborts (and clears) the pool along with its
   splits whenever they may share its flag: shared, or options.config NULL (the set cannot
   read the pool's config then; a splitShare set only in an nccl.conf file is not seen
   either). Not shared (NCCL's default, and this library's recommendation for training): each
   split costs its own buffers, so keep the splits few: the default max_cp is the planner's
   max_cp (options.plan_config), and dcp_comm_max_cp gives the largest CP size worth planning
   for the longest sample, instead of the pool size (at D = 1024 that was 10 pool-wide
   splits). The memory per communicator both ways has not been measured yet:
   examples/ring_attention_nccl measures it when DCP_MEASURE_SPLIT_MEMORY=1 (one GPU, N
   ranks: tests/multirank.sh).

   ABORTING
   ncclCommAbort raises its communicator's abort flag and then waits for the communicator's
   queued work (its internal stream, which waits for the user streams its kernels sit on).
   That work can sit behind another communicator's stuck kernel -- a split's ring queued
   behind a pool reroute that waits for a dead peer -- which only the other's flag releases:
   aborted one after the other, the first abort could wait forever. So the layer raises every
   flag before any abort waits: from NCCL 2.22 its aborts share one ncclGroupStart /
   ncclGroupEnd (an abort in a group only raises the flag, and ncclGroupEnd, always a
   blocking group then, runs the waits together); before 2.22 an abort in a group still
   waits at once, so each runs on a thread of its own (POSIX threads; elsewhere one after the
   other, which can hang as above).

   SUPPORTED NCCL VERSIONS
   2.18 or later (ncclCommSplit with a config); set creation checks ncclGetVersion at run time
   and answers DCP_ERROR_UNSUPPORTED below it. The semantics above were read in the sources of
   NCCL 2.21.5 and 2.27.7 (src/init.cc, src/group.cc) and are what tests/fake_nccl enforces:
   the transport behaves as 2.27.7, and make's test_nccl_host-2.21 build as a version before
   2.22 (the threaded aborts). No GPU run has confirmed them yet (make test-multirank).

   REFERENCE
   Communicator set
       dcp_nccl_set_create(pool, options, &set, err)   collective over pool; checks that every
                                        rank passed the same max_cp and staging size, then
                                        splits one communicator per CP size 2..max_cp (color
                                        rank / c, key rank % c, the pool's config copied or
                                        NULL; NCCL_SPLIT_NOCOLOR past the last full block);
                                        set->comms[dcp_comm_slot(c)]. DCP_ERROR_NCCL or _CUDA:
                                        it has aborted the pool (a split in flight included):
                                        do not destroy the pool then
       dcp_nccl_set_destroy(set, err)   waits (polled) for the communication stream and the
                                        caller's stream of the set's last communication, then
                                        finalizes the split communicators together and destroys
                                        them (largest first), then the stream, events and
                                        staging. Work that does not pass within the timeout, or
                                        a failed finalize: everything aborted, the pool too,
                                        and DCP_ERROR_NCCL. Otherwise the caller destroys the
                                        pool after (unless set->pool was NULL already). Wait
                                        for streams you used for earlier calls first
                                        (dcp_nccl_set_wait)
       dcp_nccl_set_comm(set, cp)       the communicator of CP size cp (NULL: cp 1, or none)
       dcp_nccl_set_check(set, err)     polls ncclCommGetAsyncError on the pool and every split
       dcp_nccl_set_abort(set, abort_pool, err)  ncclCommAbort on every split communicator, and
                                        on the pool when abort_pool or when the splits may
                                        share its abort flag (set->shared_abort; see RESOURCE
                                        SHARING), every flag raised first; set->pool is NULL
                                        when the pool went. The set stays destroyable
       dcp_nccl_set_wait(set, stream, err)   the polled, timed wait for a stream (instead of
                                        cudaStreamSynchronize); aborts on error or timeout
       dcp_nccl_plan_agree(set, plan, stream, err)  collective over the pool: one all-reduce of
                                        dcp_plan_hash; DCP_ERROR_INVALID_PLAN on every rank
                                        when any differs. Call it before the step's first
                                        reroute
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
                                        buffers.fields (a dcp_field_set): only a pipeline
                                        stage's fields, each its own size, in one group; none
                                        (a middle stage): no CUDA or NCCL call at all
   MTP roll over a binding's group (dcp.h "MTP roll")
       dcp_nccl_mtp_roll_scratch_size(layout, element_size, &bytes, err)   0 at cp 1
       dcp_nccl_mtp_roll(set, binding, layout, element_size, in, out, scratch, scratch_bytes,
                         stream, err)   gather, one group of n boundary elements to and from
                                        each neighbour, shift; cp 1: the shift alone
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
   Compiled as C and under nvcc by `make`; its logic is tested on the CPU by tests/test_comm.c
   and its own code on the strict host transport by tests/test_nccl_host.c (make test). It has
   not been run on a GPU yet: make test-gpu (one rank) and make test-multirank (2, 4, 6, 8 ranks
   on one GPU, and the 2-rank fault runs) are the first runs to make.

   LICENSE
   MIT, as dcp.h. */
#ifndef DCP_NCCL_H
#define DCP_NCCL_H

#include "dcp.h"

#ifdef DCP_NO_DISTRIBUTED
#error "dcp_nccl.h maps dcp.h's distributed logic to NCCL calls: do not define DCP_NO_DISTRIBUTED"
#endif

#include <cuda_runtime.h>
#include <nccl.h>

/* ncclCommSplit with a config (2.18) is the oldest call the layer needs; the semantics it relies
   on were read in NCCL 2.21.5 and 2.27.7 (see SUPPORTED NCCL VERSIONS). */
#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < 21800
#error "dcp_nccl.h needs NCCL 2.18 or later (ncclCommSplit with a config)"
#endif
/* The oldest NCCL library set creation accepts at run time (ncclGetVersion). */
#define DCP_NCCL_MIN_VERSION 21800

#ifdef DCP_NCCL_STATIC
#define DCP_NCCL_DEF static
#else
#define DCP_NCCL_DEF extern
#endif

#ifndef DCP_NCCL_DEFAULT_STAGING_BYTES
#define DCP_NCCL_DEFAULT_STAGING_BYTES ((size_t)1 << 20)
#endif
/* How long a set waits for a collective, a ring or a split before it aborts (10 minutes, as
   PyTorch's NCCL watchdog); a dcp_nccl_options field overrides it per set. */
#ifndef DCP_NCCL_DEFAULT_TIMEOUT_MS
#define DCP_NCCL_DEFAULT_TIMEOUT_MS INT64_C(600000)
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
    int32_t max_cp;             /* power of two <= pool size; default plan_config's resolved
                                   max_cp when given (a plan never picks more), else the
                                   largest power of two <= pool size */
    size_t staging_bytes;       /* >= DCP_NCCL_MIN_STAGING_BYTES; default
                                   DCP_NCCL_DEFAULT_STAGING_BYTES */
    const ncclConfig_t *config; /* the config the POOL was created with, copied whole into
                                   every split's config; NULL: every split gets NULL, which in
                                   NCCL inherits the pool's config (the set then does not know
                                   the pool's splitShare and treats the splits as sharing its
                                   abort flag). Resource sharing is decided by the pool's
                                   splitShare, because NCCL reads the parent's: see RESOURCE
                                   SHARING. blocking 0 (non-blocking) is what makes the timeout
                                   hold: see WAITING AND TIMEOUTS */
    const dcp_config *plan_config; /* optional: the planner's config, for the default max_cp
                                   (dcp_comm_max_cp gives a small one for the lengths) */
    int64_t timeout_ms;         /* >= 0; every wait of the set; default
                                   DCP_NCCL_DEFAULT_TIMEOUT_MS */
    dcp_allocator allocator;    /* host memory of the set and of received metadata */
} dcp_nccl_options;

/* Read-only for the caller; the functions below change it. */
typedef struct dcp_nccl_set {
    ncclComm_t pool;                  /* the caller's DP x CP communicator (not owned); NULL
                                         once the set aborted it */
    int32_t ranks, rank, max_cp;
    int32_t num_slots;                /* dcp_comm_slot_count(max_cp) */
    ncclComm_t comms[DCP_CP_LEVELS];  /* comms[dcp_comm_slot(c)]: CP size c; NULL for a rank
                                         past the last full block of c ranks */
    dcp_comm_state state;             /* the binding in force and the open overrides */
    cudaStream_t comm_stream;         /* the ring's transfers */
    cudaEvent_t compute_done, comm_done;
    cudaEvent_t dkv_done;             /* the ring backward's last dK/dV hop posted */
    void *staging;                    /* device, staging_bytes */
    size_t staging_bytes;
    int32_t aborted;                  /* 1 after dcp_nccl_set_abort or a failure */
    int64_t timeout_ms;               /* options.timeout_ms */
    ncclConfig_t config;              /* the splits' config: options.config, copied */
    int32_t inherit_config;           /* 1: options.config was NULL, the splits get NULL */
    int32_t shared_abort;             /* 1: the splits share the pool's abort flag (or may:
                                         config inherited), so aborting one aborts the pool */
    cudaEvent_t work_done;            /* recorded on the caller's stream after the set's last
                                         communication there (what destroy waits for) */
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
/* The host-side wait that replaces cudaStreamSynchronize: polls the stream and the async
   errors of the pool and of every split communicator; on an error, or after timeout_ms,
   aborts the set and the pool (set->pool NULL) and names what failed. */
DCP_NCCL_DEF dcp_status dcp_nccl_set_wait(dcp_nccl_set *set, cudaStream_t stream,
                                          dcp_error *error);
/* Collective over the pool, before the first reroute of a step: every rank's dcp_plan_hash
   must be the same (one all-reduce of the hash and its complement). A difference, or a rank
   whose plan is NULL or broken, is DCP_ERROR_INVALID_PLAN on every rank; the set stays
   usable. */
DCP_NCCL_DEF dcp_status dcp_nccl_plan_agree(dcp_nccl_set *set, const dcp_plan *plan,
                                            cudaStream_t stream, dcp_error *error);

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

/* The buffers of a reroute, device pointers; zero-initialise, then set what you use (the
   per-stage members at the end must be zero unless set). Sample buffers hold a sample's valid
   tokens, element_size bytes each; only the samples this rank holds are read (others may be
   NULL).
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
    /* Per pipeline stage (zero-initialised: the one field above, as before). When `fields` is
       not NULL, each field f of fields->fields moves with fields->element_size[f] from
       field_sample_data[f] to field_microbatch_data[f], all in one NCCL group (element_size,
       sample_data and microbatch_data are then not read); a set without fields (a middle
       stage, dcp_stage_fields(0, 0, 0)) moves nothing and makes no CUDA or NCCL call. */
    const dcp_field_set *fields;
    const void *const *field_sample_data[DCP_FIELD_COUNT];
    void *const *field_microbatch_data[DCP_FIELD_COUNT];
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
DCP_NCCL_DEF dcp_status dcp_nccl_ring_forward(
    dcp_nccl_set *set, const dcp_nccl_binding *binding, const dcp_attention_params *params,
    const dcp_cuda_layout *layout, dcp_dtype dtype, const void *q, const void *k, const void *v,
    void *out, float *lse, void *scratch, size_t scratch_bytes, cudaStream_t stream,
    dcp_error *error);
/* Its gradient from the final out, dout (dtype) and lse: dQ accumulates in float32 scratch on
   this rank; dK, dV of each KV accumulate in a float32 buffer that travels the ring one hop
   behind its KV and comes home after the last step; then dcp_cuda_convert writes dq, dk, dv
   in dtype (overwritten, not added). As in TransformerEngine's ring, step s computes its dK,
   dV into a buffer of its own (scratch dkv_step) while the accumulator of its KV is still
   arriving, then adds them (dcp_cuda_add_float32) and sends the sum on while step s + 1
   computes: only the last hop home is exposed; the KV prefetch is hidden as in forward. */
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

/* C++: an evaluation override for the lifetime of the object (RAII). The contract:
   - construction begins it (check status(); on failure nothing is open and the destructor
     does nothing); the destructor ends it on every path, exceptions included, and never
     throws (the C calls it makes cannot);
   - end() ends it early and returns the end's status (the destructor then does nothing);
   - guards nest like scopes; destroying an outer guard first (heap guards, out of order)
     also closes the inner ones (dcp_comm_override_end's unwinding), and the inner guard's
     own end is then refused harmlessly, provided no new override opened in between;
   - a guard belongs to the thread that owns the set, like the set itself; it is neither
     copyable nor movable, so a scope cannot be ended twice or from elsewhere.
   Never let an exception leave a dcp_nccl_override_run callback: it would unwind through C
   frames (undefined); that is what this guard is for. */
class dcp_nccl_cp_guard {
public:
    dcp_nccl_cp_guard(dcp_nccl_set *set, int32_t cp, dcp_error *error = NULL)
        : set_(set), scope_(), binding_(), status_(DCP_OK)
    {
        status_ = dcp_nccl_override_begin(set, cp, &scope_, &binding_, error);
    }
    ~dcp_nccl_cp_guard() { (void)end(NULL); }
    /* Ends the override now; DCP_OK when it was open and ended cleanly. */
    dcp_status end(dcp_error *error)
    {
        if (status_ != DCP_OK || scope_.depth == 0) return DCP_OK;
        return dcp_nccl_override_end(set_, &scope_, error);
    }
    dcp_status status() const { return status_; }
    const dcp_nccl_binding &binding() const { return binding_; } /* the pinned group */

private:
    dcp_nccl_cp_guard(const dcp_nccl_cp_guard &);            /* not copyable, not movable */
    dcp_nccl_cp_guard &operator=(const dcp_nccl_cp_guard &);
    dcp_nccl_set *set_;
    dcp_comm_scope scope_;
    dcp_nccl_binding binding_;
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
#include <time.h>
#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#include <sched.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------ errors */

/* Which library a checked call belongs to: its macro says it (DCP_NCCL__CHECK_CUDA or
   _NCCL), and the call's result passes through dcp_nccl__cuda_code / _nccl_code, whose
   parameter types make a C++ build (and nvcc) reject a call checked as the wrong library. */
typedef enum dcp_nccl__library { DCP_NCCL__LIB_CUDA, DCP_NCCL__LIB_NCCL } dcp_nccl__library;

static int dcp_nccl__cuda_code(cudaError_t code) { return (int)code; }
static int dcp_nccl__nccl_code(ncclResult_t code) { return (int)code; }

/* Fault injection (test builds): DCP_NCCL_FAULT_HOOK(call_text) is evaluated before every
   checked CUDA or NCCL call except teardown and polling; nonzero skips the call and reports
   ncclSystemError or cudaErrorUnknown in its place, as if it had failed. */
#ifdef DCP_NCCL_FAULT_HOOK
static int dcp_nccl__fault_code(dcp_nccl__library library)
{
    return library == DCP_NCCL__LIB_NCCL ? (int)ncclSystemError : (int)cudaErrorUnknown;
}
#define DCP_NCCL__INJECT(library, call, code)                                                  \
    (DCP_NCCL_FAULT_HOOK(#call) ? dcp_nccl__fault_code(library) : (code))
#else
#define DCP_NCCL__INJECT(library, call, code) (code)
#endif
#define DCP_NCCL__CALL_CUDA(call)                                                              \
    DCP_NCCL__INJECT(DCP_NCCL__LIB_CUDA, call, dcp_nccl__cuda_code(call))
#define DCP_NCCL__CALL_NCCL(call)                                                              \
    DCP_NCCL__INJECT(DCP_NCCL__LIB_NCCL, call, dcp_nccl__nccl_code(call))

/* The message of a failed CUDA or NCCL call. */
static dcp_status dcp_nccl__status(dcp_nccl__library library, int code, const char *call,
                                   const char *file, int line, dcp_error *error)
{
    const int nccl = library == DCP_NCCL__LIB_NCCL;
    const char *base = strrchr(file, '/');
    const char *text;
    if (code == 0) return DCP_OK;
    text = nccl ? ncclGetErrorString((ncclResult_t)code)
                : cudaGetErrorString((cudaError_t)code);
    if (!nccl) (void)cudaGetLastError(); /* clear a non-sticky CUDA error */
    return dcp_error_set(error, nccl ? DCP_ERROR_NCCL : DCP_ERROR_CUDA, "%s:%d: %s (%d) from %s",
                         base ? base + 1 : file, line, text ? text : "unknown error", code, call);
}

/* The checking macros: the dcp_status of a CUDA or NCCL call (DCP_OK, or DCP_ERROR_CUDA /
   DCP_ERROR_NCCL with file:line, the error text, its code and the call's text in *err).
   DCP_NCCL__CHECK_CUDA / _NCCL also jump to the function's `done` label, where its cleanup
   runs. */
#define DCP_NCCL__RESULT(library, code, call, err)                                             \
    dcp_nccl__status((library), (code), #call, __FILE__, __LINE__, (err))
#define DCP_NCCL__CHECK_CUDA(call)                                                             \
    do {                                                                                       \
        status = DCP_NCCL__RESULT(DCP_NCCL__LIB_CUDA, DCP_NCCL__CALL_CUDA(call), call, error);  \
        if (status != DCP_OK) goto done;                                                       \
    } while (0)
#define DCP_NCCL__CHECK_NCCL(call)                                                             \
    do {                                                                                       \
        status = DCP_NCCL__RESULT(DCP_NCCL__LIB_NCCL, DCP_NCCL__CALL_NCCL(call), call, error);  \
        if (status != DCP_OK) goto done;                                                       \
    } while (0)
/* Teardown and polling calls: never injected (a test could not tell what to expect of a
   failed abort, and polls repeat a timing-dependent number of times). */
#define DCP_NCCL__QUIET_CUDA(call, err)                                                        \
    DCP_NCCL__RESULT(DCP_NCCL__LIB_CUDA, dcp_nccl__cuda_code(call), call, err)
#define DCP_NCCL__QUIET_NCCL(call, err)                                                        \
    DCP_NCCL__RESULT(DCP_NCCL__LIB_NCCL, dcp_nccl__nccl_code(call), call, err)
/* An NCCL call on comm that a non-blocking communicator may answer with ncclInProgress: polled
   to its end (dcp_nccl__settle) before it counts as success or failure. */
#define DCP_NCCL__ON(comm, call)                                                               \
    do {                                                                                       \
        status = dcp_nccl__settle(set, (comm), DCP_NCCL__CALL_NCCL(call), #call, __FILE__,     \
                                  __LINE__, error);                                            \
        if (status != DCP_OK) goto done;                                                       \
    } while (0)

/* The ncclGroupEnd of a group the function opened (its `grouped` is 1 since ncclGroupStart),
   polled to its end on comm. A failed ncclGroupEnd may leave the group open (one that did not
   run, as an injected fault) or closed (NCCL closes it before it reports an error), so grouped
   stays 1 until one succeeds: the exit path's ncclGroupEnd then closes the group, or is
   answered ncclInvalidUsage at depth 0, which changes nothing. */
#define DCP_NCCL__END_GROUP(comm)                                                              \
    do {                                                                                       \
        const int end_code_ = DCP_NCCL__CALL_NCCL(ncclGroupEnd());                             \
        if (end_code_ == (int)ncclSuccess || end_code_ == (int)ncclInProgress) grouped = 0;    \
        status = dcp_nccl__settle(set, (comm), end_code_, "ncclGroupEnd()", __FILE__,          \
                                  __LINE__, error);                                            \
        if (status != DCP_OK) goto done;                                                       \
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

/* --------------------------------------------------------------------- clock and names */

/* Wall-clock milliseconds for timeouts: DCP_NCCL_NOW_MS() when defined, else the monotonic
   clock where <time.h> offers it (POSIX: _POSIX_C_SOURCE >= 199309L, or C++ / GNU defaults),
   else time() (whole seconds). */
static double dcp_nccl__now_ms(void)
{
#if defined(DCP_NCCL_NOW_MS)
    return (double)DCP_NCCL_NOW_MS();
#elif defined(CLOCK_MONOTONIC)
    struct timespec now;
    if (clock_gettime(CLOCK_MONOTONIC, &now) == 0)
        return (double)now.tv_sec * 1e3 + (double)now.tv_nsec * 1e-6;
    return (double)time(NULL) * 1e3;
#else
    return (double)time(NULL) * 1e3;
#endif
}

/* Between two polls: give the core away (a waiting rank must not starve the others). */
static void dcp_nccl__pause(void)
{
#if defined(DCP_NCCL_PAUSE)
    DCP_NCCL_PAUSE();
#elif defined(__unix__) || defined(__APPLE__)
    (void)sched_yield();
#endif
}

/* Names a communicator for messages: the pool, a CP size of the set, or the caller's. */
static void dcp_nccl__name(const dcp_nccl_set *set, ncclComm_t comm, char *name, size_t size)
{
    int32_t slot;
    if (comm && comm == set->pool) {
        snprintf(name, size, "pool (%d ranks)", (int)set->ranks);
        return;
    }
    for (slot = 0; slot < set->num_slots; slot++)
        if (comm && comm == set->comms[slot]) {
            snprintf(name, size, "cp %d", (int)(2 << slot));
            return;
        }
    snprintf(name, size, "caller's");
}

/* Keeps the first failure of a cleanup sequence that goes on after errors. */
static void dcp_nccl__keep(dcp_status status, const dcp_error *scratch, dcp_status *first,
                           dcp_error *error)
{
    if (status == DCP_OK || *first != DCP_OK) return;
    *first = status;
    if (error) *error = *scratch;
}

/* ------------------------------------------------------------------------------ aborting */

/* From this NCCL version an ncclCommAbort inside ncclGroupStart / ncclGroupEnd only raises its
   communicator's abort flag; the wait for the communicator's queued work (commReclaim) runs in
   ncclGroupEnd, for all of them together, always as a blocking group. */
#define DCP_NCCL__GROUPED_ABORT_VERSION 22200
/* The most communicators one abort covers: every split, the pool and a caller's. */
#define DCP_NCCL__MAX_ABORTS (DCP_CP_LEVELS + 2)

#if defined(__unix__) || defined(__APPLE__)
#define DCP_NCCL__ABORT_THREADS 1
typedef struct dcp_nccl__abort_job {
    ncclComm_t comm;
    ncclResult_t result;
    pthread_t thread;
    int started;
} dcp_nccl__abort_job;

static void *dcp_nccl__abort_main(void *arg)
{
    dcp_nccl__abort_job *job = (dcp_nccl__abort_job *)arg;
    job->result = ncclCommAbort(job->comm);
    return NULL;
}
#endif

/* Before NCCL 2.22: one thread per communicator, so that every ncclCommAbort has raised its
   flag (its first step) before any of them can be stuck in its wait; without threads, or where
   one cannot start, the abort runs in the calling thread (and its wait may then be for work
   only a later abort releases). */
static dcp_status dcp_nccl__abort_each(ncclComm_t *comms, int32_t count, dcp_error *error)
{
    dcp_status first = DCP_OK;
    dcp_error scratch;
    int32_t i;
#ifdef DCP_NCCL__ABORT_THREADS
    dcp_nccl__abort_job jobs[DCP_NCCL__MAX_ABORTS];
    for (i = 0; i < count; i++) {
        jobs[i].comm = comms[i], jobs[i].result = ncclSuccess;
        jobs[i].started =
            pthread_create(&jobs[i].thread, NULL, dcp_nccl__abort_main, &jobs[i]) == 0;
    }
    for (i = 0; i < count; i++) {
        if (jobs[i].started) (void)pthread_join(jobs[i].thread, NULL);
        else jobs[i].result = ncclCommAbort(jobs[i].comm);
        dcp_nccl__keep(DCP_NCCL__RESULT(DCP_NCCL__LIB_NCCL, (int)jobs[i].result, ncclCommAbort,
                                        &scratch),
                       &scratch, &first, error);
    }
#else
    for (i = 0; i < count; i++)
        dcp_nccl__keep(DCP_NCCL__QUIET_NCCL(ncclCommAbort(comms[i]), &scratch), &scratch, &first,
                       error);
#endif
    return first;
}

/* ncclCommAbort on comms[0 .. count), every abort flag raised before any abort waits.
   ncclCommAbort raises its communicator's flag, then waits for the communicator's queued work,
   and that work may sit behind another communicator's stuck kernel (on one stream, or for the
   GPU) that only the other's flag releases: aborted one after the other, the first wait could
   last forever. From NCCL 2.22 the aborts share one group; before, each has a thread. */
static dcp_status dcp_nccl__abort_all(ncclComm_t *comms, int32_t count, dcp_error *error)
{
    dcp_status first = DCP_OK;
    dcp_error scratch;
    int version = 0;
    int32_t i;
    if (ncclGetVersion(&version) != ncclSuccess || version < DCP_NCCL__GROUPED_ABORT_VERSION)
        return dcp_nccl__abort_each(comms, count, error);
    dcp_nccl__keep(DCP_NCCL__QUIET_NCCL(ncclGroupStart(), &scratch), &scratch, &first, error);
    for (i = 0; i < count; i++)
        dcp_nccl__keep(DCP_NCCL__QUIET_NCCL(ncclCommAbort(comms[i]), &scratch), &scratch, &first,
                       error);
    dcp_nccl__keep(DCP_NCCL__QUIET_NCCL(ncclGroupEnd(), &scratch), &scratch, &first, error);
    return first;
}

/* Aborts the set's split communicators, the pool when abort_pool or when the splits share its
   abort flag (aborting them kills it anyway), and extra (a caller's communicator, or NULL),
   every flag raised before any waits; the set is unusable after, and set->pool is NULL when
   the pool went. A non-blocking split that was in flight writes its child when its job ends,
   which the pool's abort makes it do: a child written meanwhile is aborted in a second round. */
static dcp_status dcp_nccl__abort_set(dcp_nccl_set *set, int32_t abort_pool, ncclComm_t extra,
                                      dcp_error *error)
{
    ncclComm_t comms[DCP_NCCL__MAX_ABORTS];
    const int32_t with_pool = set->pool && (abort_pool || set->shared_abort);
    dcp_status first = DCP_OK;
    dcp_error scratch;
    int32_t slot, round, count;
    for (round = 0; round < 2; round++) {
        count = 0;
        for (slot = set->num_slots - 1; slot >= 0; slot--)
            if (set->comms[slot]) comms[count++] = set->comms[slot], set->comms[slot] = NULL;
        if (round == 0 && with_pool) comms[count++] = set->pool;
        if (round == 0 && extra && extra != set->pool) comms[count++] = extra;
        if (count == 0) break;
        dcp_nccl__keep(dcp_nccl__abort_all(comms, count, &scratch), &scratch, &first, error);
    }
    if (with_pool) set->pool = NULL;
    set->aborted = 1;
    return first;
}

/* After a failure that may have left traffic half-enqueued: every communicator of the set, the
   pool included, and comm when it is a caller's, aborted at once (no peer's matching call and
   no enqueued kernel is left waiting forever, and no abort waits for work another one has not
   released yet). The set is then unusable (dcp_nccl__usable says so) and set->pool NULL.
   Returns status unchanged. */
static dcp_status dcp_nccl__fail(dcp_nccl_set *set, ncclComm_t comm, dcp_status status)
{
    int32_t slot;
    for (slot = 0; slot < set->num_slots; slot++)
        if (comm == set->comms[slot]) comm = NULL; /* one of the set's */
    (void)dcp_nccl__abort_set(set, 1, comm, NULL);
    return status;
}

/* ------------------------------------------------------------------ waiting without blocking */

/* The end of an NCCL call that may be in progress (non-blocking communicators): polls
   ncclCommGetAsyncError(comm) until it leaves ncclInProgress or the set's timeout passes. */
static dcp_status dcp_nccl__settle(dcp_nccl_set *set, ncclComm_t comm, int code,
                                   const char *call, const char *file, int line,
                                   dcp_error *error)
{
    const double start = dcp_nccl__now_ms();
    char name[48];
    while (code == (int)ncclInProgress && comm) {
        ncclResult_t async = ncclInProgress;
        if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) async = ncclInternalError;
        code = (int)async;
        if (code != (int)ncclInProgress) break;
        if (dcp_nccl__now_ms() - start > (double)set->timeout_ms) {
            dcp_nccl__name(set, comm, name, sizeof name);
            return dcp_error_set(error, DCP_ERROR_NCCL,
                                 "%s on the %s communicator still in progress after %lld ms",
                                 call, name, (long long)set->timeout_ms);
        }
        dcp_nccl__pause();
    }
    return dcp_nccl__status(DCP_NCCL__LIB_NCCL, code, call, file, line, error);
}

/* DCP_ERROR_NCCL naming the first communicator of the set (the pool, then the splits; only comm
   when it is not NULL) whose asynchronous error is neither ncclSuccess nor ncclInProgress; else
   DCP_OK. */
static dcp_status dcp_nccl__async_errors(const dcp_nccl_set *set, ncclComm_t comm,
                                         const char *operation, dcp_error *error)
{
    char name[48];
    int32_t slot;
    for (slot = -1; slot < set->num_slots; slot++) {
        ncclComm_t c = comm ? (slot < 0 ? comm : NULL)
                            : (slot < 0 ? set->pool : set->comms[slot]);
        ncclResult_t async = ncclSuccess;
        if (!c) continue;
        if (ncclCommGetAsyncError(c, &async) != ncclSuccess) async = ncclInternalError;
        if (async == ncclSuccess || async == ncclInProgress) continue;
        dcp_nccl__name(set, c, name, sizeof name);
        return dcp_error_set(error, DCP_ERROR_NCCL,
                             "%s: asynchronous error on the %s communicator: %s (%d); the set "
                             "was aborted",
                             operation, name, ncclGetErrorString(async), (int)async);
    }
    return DCP_OK;
}

/* Waits until an event (or, with event NULL, a stream: NULL is the legacy default stream, a
   valid one) has passed everything enqueued before it, without blocking the host: polls
   cudaEventQuery / cudaStreamQuery and the asynchronous errors of comm (of every communicator
   of the set when comm is NULL). On an asynchronous error, or when the set's timeout passes (a
   peer died or left the collective early), aborts as dcp_nccl__fail does and names the
   communicator and the operation. */
static dcp_status dcp_nccl__wait_for(dcp_nccl_set *set, cudaStream_t stream, cudaEvent_t event,
                                     ncclComm_t comm, const char *operation, dcp_error *error)
{
    const double start = dcp_nccl__now_ms();
    dcp_status status = DCP_OK;
    char name[48];
    for (;;) {
        const cudaError_t query = event ? cudaEventQuery(event) : cudaStreamQuery(stream);
        if (query == cudaSuccess) return DCP_OK;
        if (query != cudaErrorNotReady) {
            status = DCP_NCCL__QUIET_CUDA(query, error);
            return dcp_nccl__fail(set, comm, status);
        }
        if ((status = dcp_nccl__async_errors(set, comm, operation, error)) != DCP_OK)
            return dcp_nccl__fail(set, comm, status);
        if (dcp_nccl__now_ms() - start > (double)set->timeout_ms) {
            if (comm) dcp_nccl__name(set, comm, name, sizeof name);
            else snprintf(name, sizeof name, "set's");
            status = dcp_error_set(error, DCP_ERROR_NCCL,
                                   "%s on the %s communicator did not finish in %lld ms (a peer "
                                   "died or left early?); the set was aborted",
                                   operation, name, (long long)set->timeout_ms);
            return dcp_nccl__fail(set, comm, status);
        }
        dcp_nccl__pause();
    }
}

static dcp_status dcp_nccl__wait(dcp_nccl_set *set, cudaStream_t stream, ncclComm_t comm,
                                 const char *operation, dcp_error *error)
{
    return dcp_nccl__wait_for(set, stream, NULL, comm, operation, error);
}

/* Marks the set's last communication on the caller's stream: dcp_nccl_set_destroy waits for
   it before it finalizes. */
static dcp_status dcp_nccl__mark_work(dcp_nccl_set *set, cudaStream_t stream, dcp_error *error)
{
    dcp_status status = DCP_OK;
    DCP_NCCL__CHECK_CUDA(cudaEventRecord(set->work_done, stream));
done:
    return status;
}

DCP_NCCL_DEF dcp_status dcp_nccl_set_wait(dcp_nccl_set *set, cudaStream_t stream,
                                          dcp_error *error)
{
    dcp_status status;
    if ((status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    if ((status = dcp_nccl__wait(set, stream, NULL, "dcp_nccl_set_wait", error)) != DCP_OK)
        return status;
    return dcp_error_clear(error);
}

/* ----------------------------------------------------------------------- communicator set */

/* Whether every rank of the pool holds the same values: one all-reduce (max) of (x, ~x) gives
   max and ~min of each. Host values in, on `stream`, drained first (the copy from pageable
   memory would wait for it, unbounded); polls (dcp_nccl__wait) for the result, so a peer that
   never comes costs a timeout, not a hang. *differ: the first index that differs, or -1;
   least and greatest: its range. */
#define DCP_NCCL__AGREE_MAX 4
static dcp_status dcp_nccl__agree_values(dcp_nccl_set *set, const uint64_t *values, int32_t count,
                                         cudaStream_t stream, const char *operation,
                                         int32_t *differ, uint64_t *least, uint64_t *greatest,
                                         dcp_error *error)
{
    uint64_t both[2 * DCP_NCCL__AGREE_MAX];
    dcp_status status = DCP_OK;
    int32_t i;
    *differ = -1;
    for (i = 0; i < count; i++) both[i] = values[i], both[count + i] = ~values[i];
    if ((status = dcp_nccl__wait(set, stream, set->pool, operation, error)) != DCP_OK)
        return status; /* aborted already */
    DCP_NCCL__CHECK_CUDA(cudaMemcpyAsync(set->staging, both, 2 * (size_t)count * sizeof(uint64_t),
                                         cudaMemcpyHostToDevice, stream));
    DCP_NCCL__ON(set->pool, ncclAllReduce(set->staging, set->staging, 2 * (size_t)count,
                                          ncclUint64, ncclMax, set->pool, stream));
    if ((status = dcp_nccl__wait(set, stream, set->pool, operation, error)) != DCP_OK)
        return status;
    DCP_NCCL__CHECK_CUDA(cudaMemcpyAsync(both, set->staging, 2 * (size_t)count * sizeof(uint64_t),
                                         cudaMemcpyDeviceToHost, stream));
    if ((status = dcp_nccl__wait(set, stream, set->pool, operation, error)) != DCP_OK)
        return status;
    for (i = 0; i < count && *differ < 0; i++)
        if (both[i] != ~both[count + i]) *differ = i, *least = ~both[count + i], *greatest = both[i];
done:
    return status == DCP_OK ? status : dcp_nccl__fail(set, set->pool, status);
}

/* Every rank must split with the same max_cp and broadcast with the same staging size, or
   the collectives would not match. */
static dcp_status dcp_nccl__agree(dcp_nccl_set *set, dcp_error *error)
{
    static const char *const names[2] = {"max_cp", "staging_bytes"};
    uint64_t values[2], least = 0, greatest = 0;
    int32_t differ = -1;
    dcp_status status;
    values[0] = (uint64_t)set->max_cp, values[1] = (uint64_t)set->staging_bytes;
    status = dcp_nccl__agree_values(set, values, 2, set->comm_stream, "dcp_nccl_set_create",
                                    &differ, &least, &greatest, error);
    if (status != DCP_OK) return status;
    if (differ >= 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "ranks disagree: %s from %llu to %llu; pass the same options on "
                             "every rank",
                             names[differ], (unsigned long long)least,
                             (unsigned long long)greatest);
    return DCP_OK;
}

DCP_NCCL_DEF dcp_status dcp_nccl_plan_agree(dcp_nccl_set *set, const dcp_plan *plan,
                                            cudaStream_t stream, dcp_error *error)
{
    uint64_t hash = 0, least = 0, greatest = 0;
    int32_t differ = -1;
    dcp_status status;
    if ((status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    /* a rank without a valid plan still takes part, with a hash no plan has (0 is as unlikely
       as any other value, and it cannot agree with a valid plan's by more than chance) */
    if (dcp_plan_hash(plan, &hash, NULL) != DCP_OK) hash = 0;
    status = dcp_nccl__agree_values(set, &hash, 1, stream, "dcp_nccl_plan_agree", &differ, &least,
                                    &greatest, error);
    if (status != DCP_OK) return status;
    if (differ >= 0 || hash == 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_PLAN,
                             "ranks hold different plans (hashes from %016llx to %016llx; this "
                             "rank's %016llx): broadcast one plan (dcp_nccl_broadcast_plan)",
                             (unsigned long long)least, (unsigned long long)greatest,
                             (unsigned long long)hash);
    return dcp_error_clear(error);
}

/* ncclCommSplit for every CP size 2..max_cp, in the same order on every rank, each with the
   set's config (the pool's, copied whole) or NULL (the pool's, inherited). A split runs as the
   POOL's group job: on a non-blocking pool it answers ncclInProgress, the child stays NULL
   until the job ends, and its progress shows on the pool, which is polled. */
static dcp_status dcp_nccl__split(dcp_nccl_set *set, dcp_error *error)
{
    dcp_status status = DCP_OK;
    int32_t slot;
    for (slot = 0; slot < set->num_slots; slot++) {
        const int32_t cp = (int32_t)2 << slot;
        ncclConfig_t config = set->config;
        dcp_comm_split split;
        int count = 0, user_rank = 0, code;
        DCP_NCCL__TRY(dcp_comm_split_args(set->ranks, set->rank, cp, &split, error));
        code = DCP_NCCL__CALL_NCCL(ncclCommSplit(
            set->pool, split.color == DCP_COMM_NO_COLOR ? NCCL_SPLIT_NOCOLOR : split.color,
            split.key, &set->comms[slot], set->inherit_config ? NULL : &config));
        DCP_NCCL__TRY(dcp_nccl__settle(set, set->pool, code, "ncclCommSplit", __FILE__, __LINE__,
                                       error));
        if (split.size == 0) {
            set->comms[slot] = NULL;
            continue;
        }
        DCP_NCCL__CHECK_NCCL(ncclCommCount(set->comms[slot], &count));
        DCP_NCCL__CHECK_NCCL(ncclCommUserRank(set->comms[slot], &user_rank));
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

/* The options with their defaults filled in, checked against the pool (its size and this
   rank's place in it are read here) and the NCCL library (its version). */
static dcp_status dcp_nccl__options_resolve(ncclComm_t pool, const dcp_nccl_options *options,
                                            dcp_nccl_options *o, int *ranks, int *rank,
                                            dcp_error *error)
{
    dcp_status status = DCP_OK;
    int version = 0;
    memset(o, 0, sizeof *o);
    if (options) *o = *options;
    if ((o->allocator.alloc == NULL) != (o->allocator.free == NULL))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "allocator needs both alloc and free, or neither");
    if (o->staging_bytes == 0) o->staging_bytes = DCP_NCCL_DEFAULT_STAGING_BYTES;
    if (o->staging_bytes < DCP_NCCL_MIN_STAGING_BYTES)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "staging_bytes must be >= %d, got %zu", DCP_NCCL_MIN_STAGING_BYTES,
                             o->staging_bytes);
    if (o->config && o->config->splitShare != NCCL_CONFIG_UNDEF_INT &&
        o->config->splitShare != 0 && o->config->splitShare != 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "config->splitShare must be 0 or 1, got %d", o->config->splitShare);
    DCP_NCCL__CHECK_NCCL(ncclGetVersion(&version));
    if (version < DCP_NCCL_MIN_VERSION)
        return dcp_error_set(error, DCP_ERROR_UNSUPPORTED,
                             "NCCL %d is older than %d (ncclCommSplit with a config)", version,
                             DCP_NCCL_MIN_VERSION);
    DCP_NCCL__CHECK_NCCL(ncclCommCount(pool, ranks));
    DCP_NCCL__CHECK_NCCL(ncclCommUserRank(pool, rank));
    if (o->timeout_ms == 0) o->timeout_ms = DCP_NCCL_DEFAULT_TIMEOUT_MS;
    if (o->timeout_ms < 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "timeout_ms must be >= 0, got %lld",
                             (long long)o->timeout_ms);
    if (o->max_cp == 0 && o->plan_config) { /* what a plan of that config can pick, no more */
        dcp_config resolved;
        if ((status = dcp_config_resolve(o->plan_config, &resolved, error)) != DCP_OK)
            return status;
        if (resolved.ranks != *ranks)
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "plan_config is for %d ranks, the pool has %d",
                                 (int)resolved.ranks, *ranks);
        o->max_cp = resolved.max_cp;
    }
    if (o->max_cp == 0)
        for (o->max_cp = 1; o->max_cp * 2 <= *ranks && o->max_cp * 2 <= DCP_MAX_RANKS;)
            o->max_cp *= 2;
done:
    return status;
}

/* The splits' config, and whether they share the pool's abort flag: NCCL takes splitShare
   from the parent (the pool) and lets NCCL_COMM_SPLIT_SHARE_RESOURCES override it; with the
   pool's config unknown (NULL: inherited) the set assumes they do. */
static void dcp_nccl__set_config(dcp_nccl_set *set, const ncclConfig_t *config)
{
    const ncclConfig_t defaults = NCCL_CONFIG_INITIALIZER;
    const char *share = getenv("NCCL_COMM_SPLIT_SHARE_RESOURCES");
    set->config = config ? *config : defaults;
    set->inherit_config = config == NULL;
    if (!config) set->shared_abort = 1;
    else if (share && *share) set->shared_abort = atoi(share) == 1;
    else set->shared_abort = config->splitShare == 1;
}

/* The set's CUDA objects: the communication stream (the highest priority, so that the ring's
   transfers start while kernels run), its events and the staging buffer. */
static dcp_status dcp_nccl__set_streams(dcp_nccl_set *set, dcp_error *error)
{
    dcp_status status = DCP_OK;
    int least = 0, greatest = 0;
    DCP_NCCL__CHECK_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    DCP_NCCL__CHECK_CUDA(cudaStreamCreateWithPriority(&set->comm_stream, cudaStreamNonBlocking,
                                                      greatest));
    DCP_NCCL__CHECK_CUDA(cudaEventCreateWithFlags(&set->compute_done, cudaEventDisableTiming));
    DCP_NCCL__CHECK_CUDA(cudaEventCreateWithFlags(&set->comm_done, cudaEventDisableTiming));
    DCP_NCCL__CHECK_CUDA(cudaEventCreateWithFlags(&set->dkv_done, cudaEventDisableTiming));
    DCP_NCCL__CHECK_CUDA(cudaEventCreateWithFlags(&set->work_done, cudaEventDisableTiming));
    DCP_NCCL__CHECK_CUDA(cudaMalloc(&set->staging, set->staging_bytes));
done:
    return status;
}

/* The set's CUDA objects and memory (its communicators are gone already). */
static dcp_status dcp_nccl__set_free(dcp_nccl_set *set, dcp_error *error)
{
    dcp_status first = DCP_OK;
    dcp_error scratch;
    cudaEvent_t *const events[] = {&set->compute_done, &set->comm_done, &set->dkv_done,
                                   &set->work_done};
    dcp_allocator allocator = set->allocator;
    size_t i;
    if (set->staging)
        dcp_nccl__keep(DCP_NCCL__QUIET_CUDA(cudaFree(set->staging), &scratch), &scratch, &first,
                       error);
    for (i = 0; i < sizeof events / sizeof events[0]; i++)
        if (*events[i])
            dcp_nccl__keep(DCP_NCCL__QUIET_CUDA(cudaEventDestroy(*events[i]), &scratch),
                           &scratch, &first, error);
    if (set->comm_stream)
        dcp_nccl__keep(DCP_NCCL__QUIET_CUDA(cudaStreamDestroy(set->comm_stream), &scratch),
                       &scratch, &first, error);
    dcp_free(&allocator, set);
    return first;
}

DCP_NCCL_DEF dcp_status dcp_nccl_set_create(ncclComm_t pool, const dcp_nccl_options *options,
                                            dcp_nccl_set **out, dcp_error *error)
{
    dcp_nccl_options o;
    dcp_nccl_set *set = NULL;
    dcp_status status = DCP_OK;
    int ranks = 0, rank = 0;
    if (!out) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "set must not be NULL");
    *out = NULL;
    if (!pool) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "pool must not be NULL");
    DCP_NCCL__TRY(dcp_nccl__options_resolve(pool, options, &o, &ranks, &rank, error));
    set = (dcp_nccl_set *)dcp_alloc(&o.allocator, sizeof *set);
    if (!set) return dcp_error_set(error, DCP_ERROR_OUT_OF_MEMORY, "cannot allocate the set");
    memset(set, 0, sizeof *set);
    set->allocator = o.allocator;
    set->pool = pool;
    set->ranks = ranks, set->rank = rank, set->max_cp = o.max_cp;
    set->num_slots = dcp_comm_slot_count(o.max_cp);
    set->staging_bytes = o.staging_bytes;
    set->timeout_ms = o.timeout_ms;
    dcp_nccl__set_config(set, o.config);
    DCP_NCCL__TRY(dcp_comm_state_init(&set->state, ranks, rank, o.max_cp, error));
    DCP_NCCL__TRY(dcp_nccl__set_streams(set, error));
    DCP_NCCL__TRY(dcp_nccl__agree(set, error));
    DCP_NCCL__TRY(dcp_nccl__split(set, error));
    *out = set;
    set = NULL;
done:
    /* a CUDA or NCCL failure can leave this rank's peers waiting for it in the agreement or a
       split (and a non-blocking split's job still running): the pool goes too, on every rank */
    if (status == DCP_ERROR_NCCL || status == DCP_ERROR_CUDA) {
        if (set) (void)dcp_nccl__abort_set(set, 1, NULL, NULL);
        else (void)ncclCommAbort(pool);
    }
    if (set) (void)dcp_nccl__set_free(set, NULL);
    return status == DCP_OK ? dcp_error_clear(error) : status;
}

/* ncclCommFinalize on every split communicator (largest first, the same order on every rank),
   all issued before any is polled, so that together they cost one timeout at most. */
static dcp_status dcp_nccl__finalize_all(dcp_nccl_set *set, dcp_error *error)
{
    int codes[DCP_CP_LEVELS] = {0}; /* ncclSuccess where no finalize is pending */
    const double start = dcp_nccl__now_ms();
    int32_t slot, pending = 0;
    char name[48];
    for (slot = set->num_slots - 1; slot >= 0; slot--) {
        dcp_status status;
        if (!set->comms[slot]) continue;
        codes[slot] = dcp_nccl__nccl_code(ncclCommFinalize(set->comms[slot]));
        pending += codes[slot] == (int)ncclInProgress;
        status = codes[slot] == (int)ncclInProgress
                     ? DCP_OK
                     : DCP_NCCL__RESULT(DCP_NCCL__LIB_NCCL, codes[slot], ncclCommFinalize, error);
        if (status != DCP_OK) return status;
    }
    while (pending > 0) {
        for (slot = 0; slot < set->num_slots; slot++) {
            ncclResult_t async = ncclInProgress;
            if (!set->comms[slot] || codes[slot] != (int)ncclInProgress) continue;
            if (ncclCommGetAsyncError(set->comms[slot], &async) != ncclSuccess)
                async = ncclInternalError;
            if (async == ncclInProgress) continue;
            codes[slot] = (int)async, pending--;
            if (async != ncclSuccess)
                return DCP_NCCL__RESULT(DCP_NCCL__LIB_NCCL, codes[slot], ncclCommFinalize, error);
        }
        if (pending > 0 && dcp_nccl__now_ms() - start > (double)set->timeout_ms) {
            for (slot = 0; slot < set->num_slots && codes[slot] != (int)ncclInProgress; slot++) {
            }
            dcp_nccl__name(set, set->comms[slot], name, sizeof name);
            return dcp_error_set(error, DCP_ERROR_NCCL,
                                 "ncclCommFinalize on the %s communicator still in progress "
                                 "after %lld ms",
                                 name, (long long)set->timeout_ms);
        }
        if (pending > 0) dcp_nccl__pause();
    }
    return DCP_OK;
}

/* The end of the split communicators: once the set's work has passed (polled: a blocking
   ncclCommFinalize would wait for it without bound), finalized together and destroyed. Work
   that does not pass in time, or a finalize that fails, aborts the set, the pool included. */
static dcp_status dcp_nccl__retire(dcp_nccl_set *set, dcp_error *error)
{
    dcp_status status, first = DCP_OK;
    dcp_error scratch;
    int32_t slot;
    status = dcp_nccl__wait_for(set, set->comm_stream, NULL, NULL, "dcp_nccl_set_destroy", error);
    if (status == DCP_OK)
        status = dcp_nccl__wait_for(set, NULL, set->work_done, NULL, "dcp_nccl_set_destroy",
                                    error);
    if (status != DCP_OK) return status; /* aborted by the wait */
    if ((status = dcp_nccl__finalize_all(set, error)) != DCP_OK)
        return dcp_nccl__fail(set, NULL, status);
    for (slot = set->num_slots - 1; slot >= 0; slot--) {
        if (!set->comms[slot]) continue;
        dcp_nccl__keep(DCP_NCCL__QUIET_NCCL(ncclCommDestroy(set->comms[slot]), &scratch),
                       &scratch, &first, error);
        set->comms[slot] = NULL;
    }
    return first;
}

DCP_NCCL_DEF dcp_status dcp_nccl_set_destroy(dcp_nccl_set *set, dcp_error *error)
{
    dcp_status first = DCP_OK;
    dcp_error scratch;
    if (!set) return dcp_error_clear(error);
    if (!set->aborted)
        dcp_nccl__keep(dcp_nccl__retire(set, &scratch), &scratch, &first, error);
    dcp_nccl__keep(dcp_nccl__set_free(set, &scratch), &scratch, &first, error);
    return first == DCP_OK ? dcp_error_clear(error) : first;
}

DCP_NCCL_DEF ncclComm_t dcp_nccl_set_comm(const dcp_nccl_set *set, int32_t cp)
{
    const int32_t slot = dcp_comm_slot(cp);
    if (!set || slot < 0 || slot >= set->num_slots) return NULL;
    return set->comms[slot];
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
        DCP_NCCL__CHECK_NCCL(ncclCommGetAsyncError(comm, &async));
        if (async != ncclSuccess && async != ncclInProgress) {
            dcp_nccl__name(set, comm, name, sizeof name);
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
    dcp_status status;
    if (!set) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "set must not be NULL");
    status = dcp_nccl__abort_set(set, abort_pool, NULL, error);
    return status == DCP_OK ? dcp_error_clear(error) : status;
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

/* The buffers of every field that moves, each as a one-field dcp_nccl_reroute_buffers:
   *count 1 for plain buffers, one per field of buffers->fields (0 for a middle stage). */
static dcp_status dcp_nccl__reroute_fields(const dcp_nccl_set *set, const dcp_reroute *reroute,
                                           const dcp_nccl_reroute_buffers *buffers,
                                           dcp_nccl_reroute_buffers *fields, int32_t *count,
                                           dcp_error *error)
{
    dcp_error inner;
    dcp_status status;
    int32_t f;
    *count = 0;
    if (!buffers || !buffers->fields) {
        if (buffers) fields[(*count)++] = *buffers;
        return dcp_nccl__reroute_check(set, reroute, buffers, error);
    }
    if ((status = dcp_field_set_validate(buffers->fields, NULL, error)) != DCP_OK)
        return status;
    for (f = 0; f < DCP_FIELD_COUNT; f++) {
        dcp_nccl_reroute_buffers *one = &fields[*count];
        if (!(buffers->fields->fields & DCP_FIELD_BIT(f))) continue;
        *one = *buffers;
        one->fields = NULL;
        one->element_size = buffers->fields->element_size[f];
        one->sample_data = buffers->field_sample_data[f];
        one->microbatch_data = buffers->field_microbatch_data[f];
        if ((status = dcp_nccl__reroute_check(set, reroute, one, &inner)) != DCP_OK)
            return dcp_error_set(error, status, "field %d: %s", (int)f, inner.message);
        (*count)++;
    }
    if (*count == 0 && (status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    if (*count == 0 && (!reroute || reroute->rank != set->rank))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "reroute must be this rank's (%d) list", (int)set->rank);
    return DCP_OK;
}

DCP_NCCL_DEF dcp_status dcp_nccl_reroute_execute(dcp_nccl_set *set, const dcp_reroute *reroute,
                                                 const dcp_nccl_reroute_buffers *buffers,
                                                 cudaStream_t stream, dcp_error *error)
{
    dcp_nccl_reroute_buffers fields[DCP_FIELD_COUNT];
    dcp_status status;
    int grouped = 0;
    int32_t i, f, count;
    if ((status = dcp_nccl__reroute_fields(set, reroute, buffers, fields, &count, error)) !=
        DCP_OK)
        return status;
    if (count == 0) return dcp_error_clear(error); /* a middle stage: metadata only */
    for (f = 0; f < count; f++) {
        const dcp_nccl_reroute_buffers *b = &fields[f];
        if (b->microbatch_rows) /* padding rows are zero; receives and copies fill the rest */
            for (i = 0; i < b->num_microbatches; i++)
                if (b->microbatch_rows[i] > 0 && b->microbatch_data[i])
                    DCP_NCCL__CHECK_CUDA(cudaMemsetAsync(
                        b->microbatch_data[i], 0, (size_t)b->microbatch_rows[i] * b->element_size,
                        stream));
        for (i = 0; i < reroute->count; i++) { /* local copies */
            dcp_reroute_op op;
            (void)dcp_reroute_op_get(reroute, i, b->element_size, &op, NULL);
            if (op.kind != DCP_TRANSFER_COPY || op.bytes == 0) continue;
            DCP_NCCL__CHECK_CUDA(cudaMemcpyAsync(
                (unsigned char *)b->microbatch_data[op.microbatch] + op.destination_offset,
                (const unsigned char *)b->sample_data[op.sample] + op.source_offset, op.bytes,
                cudaMemcpyDeviceToDevice, stream));
        }
    }
    /* one group: A's sends to B pair with B's receives from A in list order (dcp.h builds
       every list in one global order; fields in field order); zero bytes are skipped on both
       sides alike */
    DCP_NCCL__CHECK_NCCL(ncclGroupStart());
    grouped = 1;
    for (f = 0; f < count; f++)
        for (i = 0; i < reroute->count; i++) {
            const dcp_nccl_reroute_buffers *b = &fields[f];
            dcp_reroute_op op;
            (void)dcp_reroute_op_get(reroute, i, b->element_size, &op, NULL);
            if (op.bytes == 0) continue;
            if (op.kind == DCP_TRANSFER_SEND)
                DCP_NCCL__CHECK_NCCL(ncclSend(
                    (const unsigned char *)b->sample_data[op.sample] + op.source_offset,
                    op.bytes, ncclUint8, op.peer, set->pool, stream));
            else if (op.kind == DCP_TRANSFER_RECV)
                DCP_NCCL__CHECK_NCCL(ncclRecv(
                    (unsigned char *)b->microbatch_data[op.microbatch] + op.destination_offset,
                    op.bytes, ncclUint8, op.peer, set->pool, stream));
        }
    DCP_NCCL__END_GROUP(set->pool);
    DCP_NCCL__TRY(dcp_nccl__mark_work(set, stream, error));
done:
    if (grouped) (void)ncclGroupEnd(); /* never leave a group open on this thread */
    /* past the checks, a failure may have left this rank's half of the traffic enqueued:
       abort rather than leave peers waiting for sends that will never come */
    return status == DCP_OK ? dcp_error_clear(error) : dcp_nccl__fail(set, set->pool, status);
}

/* ------------------------------------------------------------------------------ ring */

/* Scratch regions of a pass, and the attention workspace after them. */
typedef struct dcp_nccl__ring {
    dcp_ring_scratch regions;
    size_t workspace_offset, workspace_bytes, total;
    int64_t q_values, kv_values;
    size_t element_size;
} dcp_nccl__ring;

/* The ring's shape for one call (dcp_ring_scratch_layout's input). */
static dcp_status dcp_nccl__ring_shape(const dcp_attention_params *params,
                                       const dcp_cuda_layout *layout, dcp_dtype dtype,
                                       dcp_ring_shape *shape, dcp_error *error)
{
    if (!params || !layout)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "params and layout must not be NULL");
    memset(shape, 0, sizeof *shape);
    shape->element_size = dcp_dtype_size(dtype);
    if (shape->element_size == 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "dtype %d is not a dcp_dtype",
                             (int)dtype);
    shape->cp = layout->thd.cp;
    shape->local_rows = layout->local_rows;
    shape->num_heads = params->num_heads;
    shape->num_kv_heads = params->num_kv_heads ? params->num_kv_heads : params->num_heads;
    shape->head_dim = params->head_dim;
    return DCP_OK;
}

/* The scratch of a pass: its regions, then the attention workspace, aligned. */
static dcp_status dcp_nccl__ring_layout(dcp_nccl__ring *ring, const dcp_attention_params *params,
                                        const dcp_cuda_layout *layout, dcp_dtype dtype,
                                        dcp_ring_pass pass, dcp_error *error)
{
    dcp_ring_shape shape;
    dcp_status status;
    memset(ring, 0, sizeof *ring);
    if ((status = dcp_nccl__ring_shape(params, layout, dtype, &shape, error)) != DCP_OK ||
        (status = dcp_ring_scratch_layout(&shape, pass, &ring->regions, error)) != DCP_OK ||
        (status = dcp_cuda_attention_workspace_size(params, layout, &ring->workspace_bytes,
                                                    error)) != DCP_OK)
        return status;
    ring->element_size = shape.element_size;
    ring->q_values = layout->local_rows * shape.num_heads * shape.head_dim;
    ring->kv_values = layout->local_rows * shape.num_kv_heads * shape.head_dim;
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
    if ((status = dcp_nccl__ring_layout(&ring, params, layout, dtype, pass, error)) != DCP_OK)
        return status;
    *bytes = ring.total;
    return dcp_error_clear(error);
}

/* The checks every ring call makes before it enqueues anything. */
/* A binding fit for a group operation on layout: the same cp, and at cp > 1 the group's
   communicator and a rank in it. `what` names the operation in the message. */
static dcp_status dcp_nccl__check_binding(const dcp_nccl_binding *b, const dcp_cuda_layout *layout,
                                          const char *what, dcp_error *error)
{
    if (layout->thd.cp != b->cp)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "layout cp %d differs from the binding's cp %d", (int)layout->thd.cp,
                             (int)b->cp);
    if (b->cp > 1 && (!b->comm || b->rank < 0 || b->rank >= b->cp))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "a %s of cp %d needs the group's communicator and a rank in it "
                             "(binding: comm %s, rank %d)",
                             what, (int)b->cp, b->comm ? "set" : "NULL", (int)b->rank);
    return DCP_OK;
}

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
    if ((status = dcp_nccl__ring_layout(ring, params, layout, dtype, pass, error)) != DCP_OK)
        return status;
    if ((status = dcp_nccl__check_binding(b, layout, "ring", error)) != DCP_OK) return status;
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

/* One hop of the ring on the communication stream, once the compute stream has passed the
   last reader of the receiving buffer: `count` pieces of `bytes` each sent to next (send[i];
   none when send is NULL) and received from prev into recv, one after the other (none when
   recv is NULL), in one NCCL group. */
static dcp_status dcp_nccl__post_hop(dcp_nccl_set *set, const dcp_nccl_binding *b,
                                     const dcp_ring_exchange *x, const void *const *send,
                                     void *recv, int32_t count, size_t bytes, dcp_error *error)
{
    dcp_status status = DCP_OK;
    int grouped = 0;
    int32_t i;
    if (!send && !recv) return DCP_OK;
    DCP_NCCL__CHECK_CUDA(cudaStreamWaitEvent(set->comm_stream, set->compute_done, 0));
    if (bytes == 0) goto done;
    DCP_NCCL__CHECK_NCCL(ncclGroupStart());
    grouped = 1;
    for (i = 0; send && i < count; i++)
        DCP_NCCL__CHECK_NCCL(
            ncclSend(send[i], bytes, ncclUint8, x->next, b->comm, set->comm_stream));
    for (i = 0; recv && i < count; i++)
        DCP_NCCL__CHECK_NCCL(ncclRecv((unsigned char *)recv + (size_t)i * bytes, bytes,
                                      ncclUint8, x->prev, b->comm, set->comm_stream));
    DCP_NCCL__END_GROUP(b->comm);
done:
    if (grouped) (void)ncclGroupEnd();
    return status;
}

/* Posts the KV transfer of step x: k then v to next, k then v from prev into the receiving
   slot. */
static dcp_status dcp_nccl__post_kv(dcp_nccl_set *set, const dcp_nccl_binding *b,
                                    const dcp_nccl__ring *ring, const dcp_ring_exchange *x,
                                    const void *k, const void *v, void *scratch, dcp_error *error)
{
    const void *const kv[] = {k, v};
    void *slot = x->kv_recv_slot >= 0
                     ? dcp_nccl__at(scratch, ring->regions.kv[x->kv_recv_slot].offset)
                     : NULL;
    return dcp_nccl__post_hop(set, b, x, x->kv_send ? kv : NULL, slot, 2,
                              (size_t)ring->kv_values * ring->element_size, error);
}

/* The step's dK, dV accumulator moves one hop: sent to next, the next one received from prev. */
static dcp_status dcp_nccl__post_dkv(dcp_nccl_set *set, const dcp_nccl_binding *b,
                                     const dcp_nccl__ring *ring, const dcp_ring_exchange *x,
                                     void *scratch, dcp_error *error)
{
    const void *const accumulator[] = {
        dcp_nccl__at(scratch, ring->regions.dkv[x->dkv_slot].offset)};
    void *slot = x->dkv_recv_slot >= 0
                     ? dcp_nccl__at(scratch, ring->regions.dkv[x->dkv_recv_slot].offset)
                     : NULL;
    return dcp_nccl__post_hop(set, b, x, x->dkv_send ? accumulator : NULL, slot, 1,
                              2 * (size_t)ring->kv_values * sizeof(float), error);
}

/* The compute stream waits for everything posted on the communication stream so far. */
static dcp_status dcp_nccl__join(dcp_nccl_set *set, cudaStream_t stream, dcp_error *error)
{
    dcp_status status = DCP_OK;
    DCP_NCCL__CHECK_CUDA(cudaEventRecord(set->comm_done, set->comm_stream));
    DCP_NCCL__CHECK_CUDA(cudaStreamWaitEvent(stream, set->comm_done, 0));
done:
    return status;
}

/* Marks what is posted on the communication stream so far with event, for a later wait. */
static dcp_status dcp_nccl__mark(dcp_nccl_set *set, cudaEvent_t event, dcp_error *error)
{
    dcp_status status = DCP_OK;
    DCP_NCCL__CHECK_CUDA(cudaEventRecord(event, set->comm_stream));
done:
    return status;
}

/* Every exit of a ring after its first enqueue. On failure the group's traffic may be half
   posted (a peer waits for a send that never comes): abort (dcp_nccl__fail). In every case
   the caller's stream then waits for the communication stream, so nothing the ring posted
   runs unordered against the caller's later work, and that point is the set's last work. */
static dcp_status dcp_nccl__ring_exit(dcp_nccl_set *set, ncclComm_t comm, cudaStream_t stream,
                                      dcp_status status, dcp_error *error)
{
    dcp_error scratch;
    dcp_status joined;
    if (status != DCP_OK) (void)dcp_nccl__fail(set, comm, status);
    joined = DCP_NCCL__QUIET_CUDA(cudaEventRecord(set->comm_done, set->comm_stream), &scratch);
    if (joined == DCP_OK)
        joined = DCP_NCCL__QUIET_CUDA(cudaStreamWaitEvent(stream, set->comm_done, 0), &scratch);
    if (joined == DCP_OK)
        joined = DCP_NCCL__QUIET_CUDA(cudaEventRecord(set->work_done, stream), &scratch);
    if (status == DCP_OK && joined != DCP_OK) {
        if (error) *error = scratch;
        return dcp_nccl__fail(set, comm, joined);
    }
    return status == DCP_OK ? dcp_error_clear(error) : status;
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

DCP_NCCL_DEF dcp_status dcp_nccl_ring_forward(
    dcp_nccl_set *set, const dcp_nccl_binding *binding, const dcp_attention_params *params,
    const dcp_cuda_layout *layout, dcp_dtype dtype, const void *q, const void *k, const void *v,
    void *out, float *lse, void *scratch, size_t scratch_bytes, cudaStream_t stream,
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
    DCP_NCCL__CHECK_CUDA(cudaEventRecord(set->compute_done, stream)); /* the caller's k, v ready */
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
        DCP_NCCL__CHECK_CUDA(cudaEventRecord(set->compute_done, stream));
        DCP_NCCL__TRY(dcp_nccl__join(set, stream, error)); /* step s + 1 waits for its KV */
    }
    DCP_NCCL__TRY(dcp_cuda_acc_finalize(params, layout, binding->rank, acc_out, acc_lse, dtype,
                                        out, lse, (void *)stream, error));
done:
    return dcp_nccl__ring_exit(set, binding->comm, stream, status, error);
}

/* What every step of a ring backward pass reads and writes besides the ring's scratch. */
typedef struct dcp_nccl__backward {
    const dcp_attention_params *params;
    const dcp_cuda_layout *layout;
    dcp_dtype dtype;
    const void *q, *k, *v, *out, *dout;
    const float *lse;
    int32_t deterministic;
    void *scratch, *workspace;
    float *dq_acc;   /* dQ of every step, float32 */
    float *step_dkv; /* a step's own dK, dV while its accumulator arrives (NULL at cp 1) */
} dcp_nccl__backward;

/* Step s of a ring backward: its KV goes on to next, its gradient is computed (into its own
   buffer while the accumulator it belongs to still arrives, then folded in), and the
   accumulator leaves for next while step s + 1 computes. *home is where the rank's own dK, dV
   end up, once the last step has posted. */
static dcp_status dcp_nccl__backward_step(dcp_nccl_set *set, const dcp_nccl_binding *binding,
                                          const dcp_nccl__ring *ring, const dcp_nccl__backward *w,
                                          int32_t s, cudaStream_t stream, float **home,
                                          dcp_error *error)
{
    const int32_t cp = binding->cp;
    dcp_ring_exchange x;
    dcp_ring_step step;
    dcp_attention_params p = *w->params;
    const void *step_k, *step_v;
    float *acc, *target;
    dcp_status status = DCP_OK;
    DCP_NCCL__TRY(dcp_ring_exchange_plan(cp, binding->rank, s, &x, error));
    DCP_NCCL__TRY(dcp_ring_step_plan(cp, binding->rank, s, p.causal, &step, error));
    dcp_nccl__step_kv(ring, &x, w->k, w->v, w->scratch, &step_k, &step_v);
    DCP_NCCL__TRY(dcp_nccl__post_kv(set, binding, ring, &x, step_k, step_v, w->scratch, error));
    DCP_NCCL__TRY(dcp_nccl__mark(set, set->comm_done, error)); /* step s + 1's KV */
    acc = (float *)dcp_nccl__at(w->scratch, ring->regions.dkv[x.dkv_slot].offset);
    /* step 0 starts the rank's own accumulator */
    target = x.dkv_zero || !w->step_dkv ? acc : w->step_dkv;
    DCP_NCCL__CHECK_CUDA(cudaMemsetAsync(target, 0, ring->regions.dkv[x.dkv_slot].bytes, stream));
    p.causal = step.causal;
    DCP_NCCL__TRY(dcp_cuda_attention_backward(
        &p, w->layout, &step.view, w->dtype, w->q, step_k, step_v, w->out, w->dout, w->lse,
        w->dq_acc, target, target + ring->kv_values, w->deterministic, w->workspace,
        ring->workspace_bytes, (void *)stream, error));
    if (target != acc) { /* now the accumulator must be here: fold the step in */
        DCP_NCCL__CHECK_CUDA(cudaStreamWaitEvent(stream, set->dkv_done, 0));
        DCP_NCCL__TRY(
            dcp_cuda_add_float32(acc, target, 2 * ring->kv_values, (void *)stream, error));
    }
    DCP_NCCL__CHECK_CUDA(cudaEventRecord(set->compute_done, stream));
    DCP_NCCL__TRY(dcp_nccl__post_dkv(set, binding, ring, &x, w->scratch, error));
    DCP_NCCL__TRY(dcp_nccl__mark(set, set->dkv_done, error));
    DCP_NCCL__CHECK_CUDA(cudaStreamWaitEvent(stream, set->comm_done, 0)); /* its KV only */
    if (x.dkv_home_slot >= 0)
        *home = (float *)dcp_nccl__at(w->scratch, ring->regions.dkv[x.dkv_home_slot].offset);
done:
    return status;
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
    dcp_nccl__backward w;
    dcp_status status;
    float *home = NULL;
    int32_t s;
    status = dcp_nccl__ring_setup(set, &binding, params, layout, dtype, DCP_RING_BACKWARD,
                                  scratch, scratch_bytes, &current, &ring, error);
    if (status != DCP_OK) return status;
    if (layout->local_rows == 0) return dcp_error_clear(error);
    w.params = params, w.layout = layout, w.dtype = dtype;
    w.q = q, w.k = k, w.v = v, w.out = out, w.dout = dout, w.lse = lse;
    w.deterministic = deterministic;
    w.scratch = scratch;
    w.workspace = ring.workspace_bytes ? dcp_nccl__at(scratch, ring.workspace_offset) : NULL;
    w.dq_acc = (float *)dcp_nccl__at(scratch, ring.regions.dq.offset);
    w.step_dkv = ring.regions.dkv_step.bytes
                     ? (float *)dcp_nccl__at(scratch, ring.regions.dkv_step.offset)
                     : NULL;
    DCP_NCCL__CHECK_CUDA(cudaMemsetAsync(w.dq_acc, 0, ring.regions.dq.bytes, stream));
    DCP_NCCL__CHECK_CUDA(cudaEventRecord(set->compute_done, stream));
    for (s = 0; s < binding->cp; s++)
        DCP_NCCL__TRY(dcp_nccl__backward_step(set, binding, &ring, &w, s, stream, &home, error));
    DCP_NCCL__CHECK_CUDA(cudaStreamWaitEvent(stream, set->dkv_done, 0)); /* the home hop */
    DCP_NCCL__TRY(dcp_cuda_convert(w.dq_acc, dtype, dq, ring.q_values, (void *)stream, error));
    DCP_NCCL__TRY(dcp_cuda_convert(home, dtype, dk, ring.kv_values, (void *)stream, error));
    DCP_NCCL__TRY(dcp_cuda_convert(home + ring.kv_values, dtype, dv, ring.kv_values,
                                   (void *)stream, error));
done:
    return dcp_nccl__ring_exit(set, binding->comm, stream, status, error);
}

/* ------------------------------------------------------------------------- broadcast */

/* Keeps a rank's own failure while it still takes part in the broadcast. */
static void dcp_nccl__defer(dcp_status *local, dcp_error *local_error, dcp_status status,
                            const dcp_error *reason)
{
    if (*local != DCP_OK || status == DCP_OK) return;
    *local = status;
    *local_error = *reason;
}

/* A rank's own bad argument fails that rank AFTER it has taken part in every chunk: its peers
   are in the same collectives and must not wait for it (a root sends length 0, which every
   rank rejects). */
static void dcp_nccl__broadcast_own_arguments(int is_root, const void *data, size_t size,
                                              void **received, size_t *received_size,
                                              dcp_status *local, dcp_error *local_error)
{
    dcp_error reason;
    if (is_root && !data && size > 0)
        dcp_nccl__defer(local, local_error,
                        dcp_error_set(&reason, DCP_ERROR_INVALID_ARGUMENT,
                                      "the root's data is NULL"),
                        &reason);
    if (!is_root && (!received || !received_size))
        dcp_nccl__defer(local, local_error,
                        dcp_error_set(&reason, DCP_ERROR_INVALID_ARGUMENT,
                                      "received and received_size must not be NULL off the "
                                      "root"),
                        &reason);
}

/* The root's length reaches every rank (pageable copies would block the host on a stalled
   stream, so the stream is drained by polling before each of them). */
static dcp_status dcp_nccl__broadcast_length(dcp_nccl_set *set, ncclComm_t comm, int32_t root,
                                             uint64_t *length, cudaStream_t stream,
                                             dcp_error *error)
{
    dcp_status status = DCP_OK;
    DCP_NCCL__TRY(dcp_nccl__wait(set, stream, comm, "broadcast (the caller's stream)", error));
    DCP_NCCL__CHECK_CUDA(cudaMemcpyAsync(set->staging, length, sizeof *length,
                                         cudaMemcpyHostToDevice, stream));
    DCP_NCCL__ON(comm, ncclBroadcast(set->staging, set->staging, sizeof *length, ncclUint8, root,
                                     comm, stream));
    DCP_NCCL__TRY(dcp_nccl__wait(set, stream, comm, "broadcast of the length", error));
    DCP_NCCL__CHECK_CUDA(cudaMemcpyAsync(length, set->staging, sizeof *length,
                                         cudaMemcpyDeviceToHost, stream));
    DCP_NCCL__TRY(dcp_nccl__wait(set, stream, comm, "broadcast of the length", error));
done:
    return status;
}

/* The chunk of `length` bytes at `begin` through the staging buffer: from data on the root
   (data NULL elsewhere), into host where a rank keeps the bytes (host NULL otherwise). */
static dcp_status dcp_nccl__broadcast_chunk(dcp_nccl_set *set, ncclComm_t comm, int32_t root,
                                            const void *data, unsigned char *host,
                                            uint64_t length, uint64_t begin,
                                            cudaStream_t stream, dcp_error *error)
{
    const size_t n = (size_t)(length - begin < set->staging_bytes ? length - begin
                                                                  : set->staging_bytes);
    dcp_status status = DCP_OK;
    if (data)
        DCP_NCCL__CHECK_CUDA(cudaMemcpyAsync(set->staging, (const unsigned char *)data + begin, n,
                                             cudaMemcpyHostToDevice, stream));
    DCP_NCCL__ON(comm, ncclBroadcast(set->staging, set->staging, n, ncclUint8, root, comm, stream));
    DCP_NCCL__TRY(dcp_nccl__wait(set, stream, comm, "broadcast of the bytes", error));
    if (host) {
        DCP_NCCL__CHECK_CUDA(cudaMemcpyAsync(host + begin, set->staging, n,
                                             cudaMemcpyDeviceToHost, stream));
        DCP_NCCL__TRY(dcp_nccl__wait(set, stream, comm, "broadcast of the bytes", error));
    }
done:
    return status;
}

DCP_NCCL_DEF dcp_status dcp_nccl_broadcast_bytes(dcp_nccl_set *set, ncclComm_t comm,
                                                 int32_t root, const void *data, size_t size,
                                                 void **received, size_t *received_size,
                                                 cudaStream_t stream, dcp_error *error)
{
    dcp_status status, local = DCP_OK;
    dcp_error local_error, reason;
    unsigned char *host = NULL;
    uint64_t length = 0, chunks = 0, c;
    int ranks = 0, me = 0;
    if ((status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    if (!comm) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "comm must not be NULL");
    if (received) *received = NULL;
    if (received_size) *received_size = 0;
    DCP_NCCL__CHECK_NCCL(ncclCommCount(comm, &ranks));
    DCP_NCCL__CHECK_NCCL(ncclCommUserRank(comm, &me));
    if (root < 0 || root >= ranks) /* the same answer on every rank that passes the same root */
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "root %d outside [0, %d)",
                             (int)root, ranks);
    dcp_nccl__broadcast_own_arguments(me == root, data, size, received, received_size, &local,
                                      &local_error);
    /* 1. the length, one uint64 */
    length = me == root && local == DCP_OK ? (uint64_t)size : 0;
    DCP_NCCL__TRY(dcp_nccl__broadcast_length(set, comm, root, &length, stream, error));
    /* every rank judges the same length the same way: all go on, or all stop here */
    if ((status = dcp_metadata_chunks(length, set->staging_bytes, &chunks, error)) != DCP_OK) {
        if (local == DCP_OK) return status; /* nothing is in flight: no abort */
        status = DCP_OK; /* this rank's own reason comes first */
        goto done;
    }
    if (me == root ? received != NULL : (received && received_size)) {
        host = (unsigned char *)dcp_alloc(&set->allocator, (size_t)length);
        if (!host)
            dcp_nccl__defer(&local, &local_error,
                            dcp_error_set(&reason, DCP_ERROR_OUT_OF_MEMORY,
                                          "cannot allocate %llu bytes of metadata",
                                          (unsigned long long)length),
                            &reason);
    }
    /* 2. the bytes, chunk by chunk through the staging buffer; a rank that failed locally
       still takes part, so that no peer waits for it */
    for (c = 0; c < chunks; c++)
        DCP_NCCL__TRY(dcp_nccl__broadcast_chunk(set, comm, root, me == root ? data : NULL,
                                                me == root ? NULL : host, length,
                                                c * set->staging_bytes, stream, error));
    if (local != DCP_OK) goto done;
    if (me == root && host) memcpy(host, data, (size_t)length);
    if (received) *received = host, host = NULL;
    if (received_size) *received_size = (size_t)length;
done:
    if (host) dcp_free(&set->allocator, host);
    if (status != DCP_OK) /* a CUDA or NCCL failure mid-way: peers may wait for this rank */
        return set->aborted ? status : dcp_nccl__fail(set, comm, status);
    if (local != DCP_OK) {
        if (error) *error = local_error;
        return local;
    }
    return dcp_error_clear(error);
}

/* Serializes on the root (length 0 on failure, which every rank rejects), broadcasts, and
   hands the bytes to the deserializer. */
typedef enum dcp_nccl__object_kind { DCP_NCCL__PLAN, DCP_NCCL__VIEW } dcp_nccl__object_kind;

static dcp_status dcp_nccl__serialize(dcp_nccl__object_kind kind, const void *object,
                                      void *buffer, size_t capacity, size_t *size,
                                      dcp_error *error)
{
    if (kind == DCP_NCCL__PLAN)
        return dcp_plan_serialize((const dcp_plan *)object, buffer, capacity, size, error);
    return dcp_rank_view_serialize((const dcp_rank_view *)object, buffer, capacity, size, error);
}

static dcp_status dcp_nccl__deserialize(dcp_nccl__object_kind kind, const void *buffer,
                                        size_t size, const dcp_allocator *allocator,
                                        void **object, dcp_error *error)
{
    dcp_plan *plan = NULL;
    dcp_rank_view *view = NULL;
    dcp_status status = kind == DCP_NCCL__PLAN
                            ? dcp_plan_deserialize(buffer, size, allocator, &plan, error)
                            : dcp_rank_view_deserialize(buffer, size, allocator, &view, error);
    *object = kind == DCP_NCCL__PLAN ? (void *)plan : (void *)view;
    return status;
}

static dcp_status dcp_nccl__broadcast_object(dcp_nccl_set *set, ncclComm_t comm, int32_t root,
                                             const void *object, void **received,
                                             dcp_nccl__object_kind kind,
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
    DCP_NCCL__CHECK_NCCL(ncclCommUserRank(comm, &me));
    if (me == root) {
        root_status = dcp_nccl__serialize(kind, object, NULL, 0, &size, &root_error);
        if (root_status == DCP_OK) {
            bytes = (unsigned char *)dcp_alloc(&set->allocator, size);
            if (!bytes)
                root_status = dcp_error_set(&root_error, DCP_ERROR_OUT_OF_MEMORY,
                                            "cannot allocate %zu bytes to serialize", size);
        }
        if (root_status == DCP_OK)
            root_status = dcp_nccl__serialize(kind, object, bytes, size, &size, &root_error);
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
    if (received) status = dcp_nccl__deserialize(kind, copy, got, &set->allocator, received, error);
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
        set, comm, root, plan, received ? &object : NULL, DCP_NCCL__PLAN, stream, error);
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
        set, comm, root, view, received ? &object : NULL, DCP_NCCL__VIEW, stream, error);
    if (received) *received = (dcp_rank_view *)object;
    return status;
}

#ifdef __cplusplus
}
#endif

#endif /* DCP_NCCL_IMPLEMENTATION_INCLUDED */
#endif /* DCP_NCCL_IMPLEMENTATION */

/* ================================================================ head-parallel all-to-all
   The CP <-> head-parallel switch of linear-attention layers (dcp.h "head-parallel all-to-all":
   what moves where, as segment lists) executed on a group: pack on the device
   (dcp_cuda_a2a_copy), one ncclGroupStart/End of ncclSend/ncclRecv on the group's
   communicator, unpack on the device, all on the caller's stream. dcp_nccl_a2a_prepare
   uploads a rank's segment lists once per layout (microbatch); every layer then runs
   dcp_nccl_a2a_cp2hp before and dcp_nccl_a2a_hp2cp after, enqueue only. cp 1: nothing is
   sent and nothing allocated (the two layouts are one buffer). Failures follow the rules of
   CONVENTIONS: argument errors before the first enqueue change nothing; a CUDA or NCCL error
   after it aborts the set. */
#ifndef DCP_NCCL_A2A_H
#define DCP_NCCL_A2A_H

#ifdef __cplusplus
extern "C" {
#endif

/* A prepared all-to-all of one rank for one layout. Read-only for the caller; it points into
   the caller's workspaces, which must outlive it and stay untouched while it is in use. */
typedef struct dcp_nccl_a2a {
    dcp_a2a_shape shape;              /* dcp_a2a_shape_get of the layout and rank */
    ncclComm_t comm;                  /* the group's communicator; NULL at cp 1 */
    const dcp_a2a_segment *cp_segments; /* device: the CP-side list (shape.cp_segments) */
    const dcp_a2a_segment *hp_segments; /* device: the HP-side list (shape.hp_segments) */
    void *cp_message;                 /* device: shape.cp_message_bytes */
    void *hp_message;                 /* device: shape.hp_message_bytes */
    const int64_t *message_offsets;   /* host [cp + 1]: rank s's message in the HP-side message
                                         buffer is rows [offsets[s], offsets[s + 1]) */
} dcp_nccl_a2a;

/* Workspace a rank needs for a layout of cp ranks and channels x channel_bytes rows: device
   bytes (the two segment lists and the two message buffers, 256-byte aligned regions) and
   host bytes (the lists as built, and the message offsets). Both 0 at cp 1. */
DCP_NCCL_DEF dcp_status dcp_nccl_a2a_workspace_size(const dcp_thd_layout *layout, int32_t rank,
                                                    int32_t channels, size_t channel_bytes,
                                                    size_t *device_bytes, size_t *host_bytes,
                                                    dcp_error *error);
/* Builds and uploads the lists of binding->rank for layout (HOST cu arrays; layout->cp must be
   binding->cp; binding NULL: the one in force). Drains the stream by polling before the
   upload (a pageable copy would block the host otherwise): one wait per layout, none per
   layer. cp 1: checks the arguments, fills *a2a, enqueues nothing. */
DCP_NCCL_DEF dcp_status dcp_nccl_a2a_prepare(dcp_nccl_set *set, const dcp_nccl_binding *binding,
                                             const dcp_thd_layout *layout, int32_t channels,
                                             size_t channel_bytes, void *device_workspace,
                                             size_t device_bytes, void *host_workspace,
                                             size_t host_bytes, dcp_nccl_a2a *a2a,
                                             cudaStream_t stream, dcp_error *error);
/* cp_in: this rank's CP buffer [cp_rows, channels]; hp_out: its HP buffer [hp_rows, channels /
   cp], every row written (padding rows 0). hp2cp is the inverse: cp_out's padding rows 0.
   Device pointers, no overlap with each other or the workspace. The contracts of
   dcp_a2a_cp2hp / dcp_a2a_hp2cp for one rank. cp 1: hp_out == cp_in does nothing, otherwise
   one device copy of the buffer. */
DCP_NCCL_DEF dcp_status dcp_nccl_a2a_cp2hp(dcp_nccl_set *set, const dcp_nccl_a2a *a2a,
                                           const void *cp_in, void *hp_out, cudaStream_t stream,
                                           dcp_error *error);
DCP_NCCL_DEF dcp_status dcp_nccl_a2a_hp2cp(dcp_nccl_set *set, const dcp_nccl_a2a *a2a,
                                           const void *hp_in, void *cp_out, cudaStream_t stream,
                                           dcp_error *error);

#ifdef __cplusplus
}
#endif

#endif /* DCP_NCCL_A2A_H */

#if defined(DCP_NCCL_IMPLEMENTATION) && !defined(DCP_NCCL_A2A_IMPLEMENTATION_INCLUDED)
#define DCP_NCCL_A2A_IMPLEMENTATION_INCLUDED

#ifdef __cplusplus
extern "C" {
#endif

/* Regions of the device workspace start at multiples of it (the messages take 16-byte
   copies; NCCL likes aligned buffers). */
#define DCP_NCCL__A2A_ALIGN ((size_t)256)

static size_t dcp_nccl__a2a_round(size_t bytes)
{
    return (bytes + DCP_NCCL__A2A_ALIGN - 1) / DCP_NCCL__A2A_ALIGN * DCP_NCCL__A2A_ALIGN;
}

/* Where the regions of the two workspaces lie, for a shape. */
typedef struct dcp_nccl__a2a_regions {
    size_t segment_bytes;              /* both lists, CP side first */
    size_t cp_message, hp_message;     /* device offsets */
    size_t device_bytes, host_bytes;   /* host: the lists, then cp + 1 message offsets */
} dcp_nccl__a2a_regions;

static dcp_status dcp_nccl__a2a_regions_of(const dcp_a2a_shape *s, dcp_nccl__a2a_regions *g,
                                           dcp_error *error)
{
    const uint64_t segments = (uint64_t)s->cp_segments + (uint64_t)s->hp_segments;
    memset(g, 0, sizeof *g);
    if (s->cp == 1) return DCP_OK;
    if (segments > SIZE_MAX / 2 / sizeof(dcp_a2a_segment) ||
        s->cp_message_bytes > SIZE_MAX / 4 || s->hp_message_bytes > SIZE_MAX / 4)
        return dcp_error_set(error, DCP_ERROR_OVERFLOW,
                             "all-to-all workspace of %llu segments overflows size_t",
                             (unsigned long long)segments);
    g->segment_bytes = (size_t)segments * sizeof(dcp_a2a_segment);
    g->cp_message = dcp_nccl__a2a_round(g->segment_bytes);
    g->hp_message = g->cp_message + dcp_nccl__a2a_round(s->cp_message_bytes);
    g->device_bytes = g->hp_message + dcp_nccl__a2a_round(s->hp_message_bytes);
    g->host_bytes = g->segment_bytes + ((size_t)s->cp + 1) * sizeof(int64_t);
    return DCP_OK;
}

DCP_NCCL_DEF dcp_status dcp_nccl_a2a_workspace_size(const dcp_thd_layout *layout, int32_t rank,
                                                    int32_t channels, size_t channel_bytes,
                                                    size_t *device_bytes, size_t *host_bytes,
                                                    dcp_error *error)
{
    dcp_a2a_shape s;
    dcp_nccl__a2a_regions g;
    dcp_status status;
    if (!device_bytes || !host_bytes)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "device_bytes and host_bytes must not be NULL");
    if ((status = dcp_a2a_shape_get(layout, rank, channels, channel_bytes, &s, error)) != DCP_OK)
        return status;
    if ((status = dcp_nccl__a2a_regions_of(&s, &g, error)) != DCP_OK) return status;
    *device_bytes = g.device_bytes;
    *host_bytes = g.host_bytes;
    return dcp_error_clear(error);
}

/* Every check of prepare before it touches anything. */
static dcp_status dcp_nccl__a2a_prepare_check(dcp_nccl_set *set, const dcp_nccl_binding *b,
                                              const dcp_thd_layout *layout, int32_t channels,
                                              size_t channel_bytes, size_t device_bytes,
                                              const void *device_workspace, size_t host_bytes,
                                              const void *host_workspace, dcp_a2a_shape *shape,
                                              dcp_nccl__a2a_regions *g, dcp_error *error)
{
    dcp_status status;
    if ((status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    if (!layout) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "layout must not be NULL");
    if (b->idle || layout->cp != b->cp)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "layout cp %d must be the binding's cp %d (idle %d)",
                             (int)layout->cp, (int)b->cp, (int)b->idle);
    if (b->cp > 1 && !b->comm)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "a group of cp %d needs its communicator (binding comm NULL)",
                             (int)b->cp);
    status = dcp_a2a_shape_get(layout, b->rank, channels, channel_bytes, shape, error);
    if (status != DCP_OK) return status;
    if ((status = dcp_nccl__a2a_regions_of(shape, g, error)) != DCP_OK) return status;
    if (device_bytes < g->device_bytes || host_bytes < g->host_bytes ||
        (g->device_bytes > 0 && (!device_workspace || !host_workspace)))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "workspaces of %zu device and %zu host bytes; the all-to-all needs "
                             "%zu and %zu (dcp_nccl_a2a_workspace_size)",
                             device_bytes, host_bytes, g->device_bytes, g->host_bytes);
    if (((uintptr_t)device_workspace | (uintptr_t)host_workspace) % sizeof(int64_t) != 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "workspaces must be %zu-byte aligned", sizeof(int64_t));
    return DCP_OK;
}

DCP_NCCL_DEF dcp_status dcp_nccl_a2a_prepare(dcp_nccl_set *set, const dcp_nccl_binding *binding,
                                             const dcp_thd_layout *layout, int32_t channels,
                                             size_t channel_bytes, void *device_workspace,
                                             size_t device_bytes, void *host_workspace,
                                             size_t host_bytes, dcp_nccl_a2a *a2a,
                                             cudaStream_t stream, dcp_error *error)
{
    dcp_nccl_binding current;
    dcp_nccl__a2a_regions g;
    dcp_a2a_segment *host_segments = (dcp_a2a_segment *)host_workspace;
    int64_t *offsets, count;
    dcp_status status;
    int32_t s;
    if (!a2a) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "a2a must not be NULL");
    if (!binding && set) dcp_nccl_set_current(set, &current), binding = &current;
    if (!binding) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "set must not be NULL");
    memset(a2a, 0, sizeof *a2a);
    status = dcp_nccl__a2a_prepare_check(set, binding, layout, channels, channel_bytes,
                                         device_bytes, device_workspace, host_bytes,
                                         host_workspace, &a2a->shape, &g, error);
    if (status != DCP_OK || a2a->shape.cp == 1) return status == DCP_OK ? dcp_error_clear(error)
                                                                         : status;
    /* the lists and offsets on the host (pure dcp.h functions: they cannot fail now) */
    (void)dcp_a2a_segments(layout, binding->rank, channels, channel_bytes, DCP_A2A_CP_SIDE,
                           host_segments, a2a->shape.cp_segments, &count, NULL);
    (void)dcp_a2a_segments(layout, binding->rank, channels, channel_bytes, DCP_A2A_HP_SIDE,
                           host_segments + a2a->shape.cp_segments, a2a->shape.hp_segments,
                           &count, NULL);
    offsets = (int64_t *)((unsigned char *)host_workspace + g.segment_bytes);
    offsets[0] = 0;
    for (s = 0; s < a2a->shape.cp; s++) {
        int64_t rows = 0;
        (void)dcp_a2a_message_rows(layout, s, &rows, NULL);
        offsets[s + 1] = offsets[s] + rows;
    }
    a2a->comm = binding->comm;
    a2a->cp_segments = (const dcp_a2a_segment *)device_workspace;
    a2a->hp_segments = a2a->cp_segments + a2a->shape.cp_segments;
    a2a->cp_message = (unsigned char *)device_workspace + g.cp_message;
    a2a->hp_message = (unsigned char *)device_workspace + g.hp_message;
    a2a->message_offsets = offsets;
    DCP_NCCL__TRY(dcp_nccl__wait(set, stream, a2a->comm, "all-to-all prepare (the caller's stream)",
                                 error));
    DCP_NCCL__CHECK_CUDA(cudaMemcpyAsync(device_workspace, host_workspace, g.segment_bytes,
                                         cudaMemcpyHostToDevice, stream));
done:
    if (status == DCP_OK) return dcp_error_clear(error);
    /* as the reroute does past its checks: this rank cannot take part in the group's rounds
       now, so the set is aborted (a failed wait has aborted it already) */
    memset(a2a, 0, sizeof *a2a);
    return set->aborted ? status : dcp_nccl__fail(set, binding->comm, status);
}

/* The checks of an execution; *same: cp 1 with one buffer for both layouts. */
static dcp_status dcp_nccl__a2a_run_check(dcp_nccl_set *set, const dcp_nccl_a2a *a2a,
                                          const void *in, const void *out, dcp_error *error)
{
    dcp_status status;
    if ((status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    if (!a2a || a2a->shape.cp < 1 || (a2a->shape.cp > 1 && (!a2a->comm || !a2a->cp_segments ||
                                                              !a2a->message_offsets)))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "a2a must be filled by dcp_nccl_a2a_prepare");
    if (a2a->shape.hp_rows > 0 && (!in || !out))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "buffers of %lld rows must not be NULL (in %p, out %p)",
                             (long long)a2a->shape.hp_rows, in, out);
    return DCP_OK;
}

/* One all-to-all: pack `from` (its list), the grouped round, unpack into `to`. to_hp: cp2hp. */
static dcp_status dcp_nccl__a2a_run(dcp_nccl_set *set, const dcp_nccl_a2a *a2a, int to_hp,
                                    const void *in, void *out, cudaStream_t stream,
                                    dcp_error *error)
{
    const dcp_a2a_shape *s = &a2a->shape;
    const dcp_a2a_segment *pack = to_hp ? a2a->cp_segments : a2a->hp_segments;
    const dcp_a2a_segment *unpack = to_hp ? a2a->hp_segments : a2a->cp_segments;
    unsigned char *cp_message = (unsigned char *)a2a->cp_message;
    unsigned char *hp_message = (unsigned char *)a2a->hp_message;
    const size_t mine = (size_t)s->message_rows * s->slice_bytes;
    dcp_status status;
    int grouped = 0;
    int32_t j;
    if ((status = dcp_nccl__a2a_run_check(set, a2a, in, out, error)) != DCP_OK) return status;
    if (s->cp == 1) { /* one layout: no traffic, so a failed copy aborts nothing */
        if (in == out || s->hp_rows == 0) return dcp_error_clear(error);
        status = DCP_NCCL__RESULT(DCP_NCCL__LIB_CUDA,
                                  DCP_NCCL__CALL_CUDA(cudaMemcpyAsync(
                                      out, in, (size_t)s->hp_rows * s->row_bytes,
                                      cudaMemcpyDeviceToDevice, stream)),
                                  cudaMemcpyAsync, error);
        return status == DCP_OK ? dcp_error_clear(error) : status;
    }
    DCP_NCCL__TRY(dcp_cuda_a2a_copy(
        pack, to_hp ? s->cp_copies : s->hp_copies, to_hp ? s->cp_copies : s->hp_copies,
        to_hp ? (int64_t)s->cp * s->message_rows : s->group_rows, s->slice_bytes,
        to_hp ? s->row_bytes : s->slice_bytes, DCP_A2A_PACK, (void *)in,
        to_hp ? (void *)cp_message : (void *)hp_message, stream, error));
    /* peer j: my rows in its slice go out, its rows in my slice come in (either way round);
       zero bytes are skipped by both sides alike (a rank with no valid row) */
    DCP_NCCL__CHECK_NCCL(ncclGroupStart());
    grouped = 1;
    for (j = 0; j < s->cp; j++) {
        unsigned char *at_cp = cp_message + (size_t)j * mine;
        unsigned char *at_hp = hp_message + (size_t)a2a->message_offsets[j] * s->slice_bytes;
        const size_t theirs =
            (size_t)(a2a->message_offsets[j + 1] - a2a->message_offsets[j]) * s->slice_bytes;
        if (mine > 0 && to_hp)
            DCP_NCCL__CHECK_NCCL(ncclSend(at_cp, mine, ncclUint8, j, a2a->comm, stream));
        if (theirs > 0 && !to_hp)
            DCP_NCCL__CHECK_NCCL(ncclSend(at_hp, theirs, ncclUint8, j, a2a->comm, stream));
        if (theirs > 0 && to_hp)
            DCP_NCCL__CHECK_NCCL(ncclRecv(at_hp, theirs, ncclUint8, j, a2a->comm, stream));
        if (mine > 0 && !to_hp)
            DCP_NCCL__CHECK_NCCL(ncclRecv(at_cp, mine, ncclUint8, j, a2a->comm, stream));
    }
    DCP_NCCL__END_GROUP(a2a->comm);
    DCP_NCCL__TRY(dcp_cuda_a2a_copy(unpack, to_hp ? s->hp_segments : s->cp_segments,
                                    to_hp ? s->hp_copies : s->cp_copies,
                                    to_hp ? s->hp_rows : (int64_t)s->cp * s->cp_rows,
                                    s->slice_bytes, to_hp ? s->slice_bytes : s->row_bytes,
                                    DCP_A2A_UNPACK, out,
                                    to_hp ? (void *)hp_message : (void *)cp_message, stream,
                                    error));
    DCP_NCCL__TRY(dcp_nccl__mark_work(set, stream, error));
done:
    if (grouped) (void)ncclGroupEnd(); /* never leave a group open on this thread */
    /* past the checks a failure may have left this rank's half of the round posted */
    return status == DCP_OK ? dcp_error_clear(error) : dcp_nccl__fail(set, a2a->comm, status);
}

DCP_NCCL_DEF dcp_status dcp_nccl_a2a_cp2hp(dcp_nccl_set *set, const dcp_nccl_a2a *a2a,
                                           const void *cp_in, void *hp_out, cudaStream_t stream,
                                           dcp_error *error)
{
    return dcp_nccl__a2a_run(set, a2a, 1, cp_in, hp_out, stream, error);
}

DCP_NCCL_DEF dcp_status dcp_nccl_a2a_hp2cp(dcp_nccl_set *set, const dcp_nccl_a2a *a2a,
                                           const void *hp_in, void *cp_out, cudaStream_t stream,
                                           dcp_error *error)
{
    return dcp_nccl__a2a_run(set, a2a, 0, hp_in, cp_out, stream, error);
}

#ifdef __cplusplus
}
#endif

#endif /* DCP_NCCL_IMPLEMENTATION && !DCP_NCCL_A2A_IMPLEMENTATION_INCLUDED */

/* ============================================================================================
   MTP roll over a CP group (dcp.h "MTP roll"): declarations and implementation in one
   section, under their own guards. */
#ifndef DCP_NCCL_MTP_H
#define DCP_NCCL_MTP_H
#ifdef __cplusplus
extern "C" {
#endif

/* Device scratch dcp_nccl_mtp_roll needs for a layout: the boundary elements it gathers and
   the ones it receives, DCP_MTP_ROLL_HALVES x num_sequences elements each (the second region
   at a multiple of DCP_RING_SCRATCH_ALIGN); 0 at cp 1. */
DCP_NCCL_DEF dcp_status dcp_nccl_mtp_roll_scratch_size(const dcp_cuda_layout *layout,
                                                       size_t element_size, size_t *bytes,
                                                       dcp_error *error);
/* The MTP roll of this rank's local buffer `in` into `out` (device, local_rows x element_size
   bytes; out must not overlap in) on the binding's group (NULL: the one in force); layout is
   the group's, with device cu arrays (thd.cp = binding->cp). dcp_cuda_mtp_roll_gather collects
   the first row of each half of every sequence, one NCCL group sends them to the neighbours
   (n elements to rank - 1, n to rank + 1) and receives theirs, dcp_cuda_mtp_roll_shift writes
   every row. cp 1: the shift alone, no communication, no scratch. Every rank of the group
   calls it with the same layout. Only enqueues work on stream. */
DCP_NCCL_DEF dcp_status dcp_nccl_mtp_roll(dcp_nccl_set *set, const dcp_nccl_binding *binding,
                                          const dcp_cuda_layout *layout, size_t element_size,
                                          const void *in, void *out, void *scratch,
                                          size_t scratch_bytes, cudaStream_t stream,
                                          dcp_error *error);

#ifdef __cplusplus
}
#endif
#endif /* DCP_NCCL_MTP_H */

#if defined(DCP_NCCL_IMPLEMENTATION) && !defined(DCP_NCCL_MTP_IMPLEMENTATION_INCLUDED)
#define DCP_NCCL_MTP_IMPLEMENTATION_INCLUDED
#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of one side of the exchange (boundaries or received): 2 x n elements. */
static dcp_status dcp_nccl__mtp_side_bytes(const dcp_cuda_layout *layout, size_t element_size,
                                           size_t *bytes, dcp_error *error)
{
    if (!layout || !bytes)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "layout and bytes must not be NULL");
    if (element_size == 0 || layout->thd.num_sequences < 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "element_size %zu must be > 0 and num_sequences %d >= 0",
                             element_size, (int)layout->thd.num_sequences);
    if ((uint64_t)layout->thd.num_sequences * DCP_MTP_ROLL_HALVES >
        (SIZE_MAX - DCP_RING_SCRATCH_ALIGN) / 2 / element_size)
        return dcp_error_set(error, DCP_ERROR_OVERFLOW,
                             "%d sequences of %zu-byte boundaries overflow size_t",
                             (int)layout->thd.num_sequences, element_size);
    *bytes = (size_t)layout->thd.num_sequences * DCP_MTP_ROLL_HALVES * element_size;
    return DCP_OK;
}

/* Where the received side starts in the scratch. */
static size_t dcp_nccl__mtp_received_offset(size_t side_bytes)
{
    return (side_bytes + DCP_RING_SCRATCH_ALIGN - 1) / DCP_RING_SCRATCH_ALIGN *
           DCP_RING_SCRATCH_ALIGN;
}

DCP_NCCL_DEF dcp_status dcp_nccl_mtp_roll_scratch_size(const dcp_cuda_layout *layout,
                                                       size_t element_size, size_t *bytes,
                                                       dcp_error *error)
{
    size_t side = 0;
    dcp_status status = dcp_nccl__mtp_side_bytes(layout, element_size, &side, error);
    if (status != DCP_OK) return status;
    *bytes = layout->thd.cp > 1 ? dcp_nccl__mtp_received_offset(side) + side : 0;
    return dcp_error_clear(error);
}

/* Every check before the first enqueue, so that a bad argument fails before any traffic. */
static dcp_status dcp_nccl__mtp_check(const dcp_nccl_set *set, const dcp_nccl_binding *b,
                                      const dcp_cuda_layout *layout, size_t element_size,
                                      const void *in, void *out, void *scratch,
                                      size_t scratch_bytes, dcp_error *error)
{
    dcp_status status;
    size_t need;
    if ((status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    if ((status = dcp_nccl_mtp_roll_scratch_size(layout, element_size, &need, error)) != DCP_OK)
        return status;
    if ((status = dcp_nccl__check_binding(b, layout, "roll", error)) != DCP_OK) return status;
    if (layout->local_rows > 0 && (!in || !out))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "in and out must not be NULL (%lld local rows)",
                             (long long)layout->local_rows);
    if (scratch_bytes < need || (need > 0 && !scratch))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "scratch of %zu bytes at %p; the roll needs %zu "
                             "(dcp_nccl_mtp_roll_scratch_size)",
                             scratch_bytes, scratch, need);
    return DCP_OK;
}

DCP_NCCL_DEF dcp_status dcp_nccl_mtp_roll(dcp_nccl_set *set, const dcp_nccl_binding *binding,
                                          const dcp_cuda_layout *layout, size_t element_size,
                                          const void *in, void *out, void *scratch,
                                          size_t scratch_bytes, cudaStream_t stream,
                                          dcp_error *error)
{
    dcp_nccl_binding current;
    const dcp_nccl_binding *b = binding;
    unsigned char *boundaries = (unsigned char *)scratch, *received;
    size_t side = 0, half;
    dcp_status status;
    int grouped = 0;
    if (!b && set) {
        dcp_nccl_set_current(set, &current);
        b = &current;
    }
    if (!b) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "set must not be NULL");
    status = dcp_nccl__mtp_check(set, b, layout, element_size, in, out, scratch, scratch_bytes,
                                 error);
    if (status != DCP_OK) return status;
    if (b->cp == 1) /* one chunk per sequence: nothing crosses a rank */
        return dcp_cuda_mtp_roll_shift(layout, 0, element_size, in, NULL, out, stream, error);
    (void)dcp_nccl__mtp_side_bytes(layout, element_size, &side, NULL);
    received = boundaries + dcp_nccl__mtp_received_offset(side);
    half = side / DCP_MTP_ROLL_HALVES; /* n elements: one message */
    DCP_NCCL__TRY(dcp_cuda_mtp_roll_gather(layout, b->rank, element_size, in, boundaries, stream,
                                           error));
    if (half > 0) { /* [0] to and from the previous rank's side, [1] the next's */
        DCP_NCCL__CHECK_NCCL(ncclGroupStart());
        grouped = 1;
        if (b->rank > 0) {
            DCP_NCCL__CHECK_NCCL(
                ncclSend(boundaries, half, ncclUint8, b->rank - 1, b->comm, stream));
            DCP_NCCL__CHECK_NCCL(
                ncclRecv(received + half, half, ncclUint8, b->rank - 1, b->comm, stream));
        }
        if (b->rank + 1 < b->cp) {
            DCP_NCCL__CHECK_NCCL(
                ncclSend(boundaries + half, half, ncclUint8, b->rank + 1, b->comm, stream));
            DCP_NCCL__CHECK_NCCL(ncclRecv(received, half, ncclUint8, b->rank + 1, b->comm, stream));
        }
        DCP_NCCL__END_GROUP(b->comm);
    }
    DCP_NCCL__TRY(dcp_cuda_mtp_roll_shift(layout, b->rank, element_size, in, received, out,
                                          stream, error));
    DCP_NCCL__TRY(dcp_nccl__mark_work(set, stream, error));
done:
    if (grouped) (void)ncclGroupEnd(); /* never leave a group open on this thread */
    /* past the checks a failure may leave a neighbour waiting for this rank's boundaries */
    return status == DCP_OK ? dcp_error_clear(error) : dcp_nccl__fail(set, b->comm, status);
}

#ifdef __cplusplus
}
#endif
#endif /* DCP_NCCL_MTP_IMPLEMENTATION_INCLUDED */
