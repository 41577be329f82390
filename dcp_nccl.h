/* dcp_nccl.h - the NCCL layer of libdcp: one communicator for every CP group, the
   per-microbatch switch, evaluation at another CP size, reroute, ring attention, the
   head-parallel all-to-all, the MTP roll and metadata broadcast. v0.1.0
   Header-only, stb style, on top of dcp.h, nccl.h (2.18 or later) and the CUDA runtime.

   WHAT IT DOES
   dcp.h plans which sample runs on how many ranks and derives, as pure functions, everything a
   rank must do about it (who sends what to whom, in which order, with which buffers). This
   header carries those answers out with NCCL and CUDA, and nothing more: the decisions are
   tested on simulated ranks in tests/test_comm.c, and this header's own code runs on a host
   transport as strict as NCCL (tests/fake_nccl: NCCL and CUDA stand-ins, 1 to 1,024 ranks as
   threads, each with a device thread) in tests/test_nccl_host.c.
   From the caller's DP x CP communicator (the pool) it makes, once, ONE communicator of its
   own: the pool split into one piece (its ranks are the pool's). Every group of every size
   and position -- powers of two, Megatron's sizes, any size (dcp_config.cp_sizes) -- runs on
   it as point-to-point sends between the group's ranks, translated from the group (member j is
   rank first_rank + j): the ring in the order of dcp_ring_order (neighbours r +- 1, r +- 2, so
   that a rank's rings reach at most four peers across all sizes), the reroute, the all-to-all,
   the MTP roll, and broadcasts and reductions as trees of sends (dcp_comm_tree_node); no
   collective ever runs on it, so NCCL (2.22 and later, which connects at first use) gives it
   buffers only for the peers a rank really talks to. Per microbatch it hands out the group
   (a binding: cp, the rank in the group, first_rank); it can pin a CP size for a scope
   (evaluation at CP 4 of a model trained at CP 1, and back); it runs ring attention over a
   group with the KV of the next step in flight on a communication stream while the current
   step computes. A communicator of a group's own, for a caller who must hand one to another
   library, is made only on request, at its first request (dcp_nccl_group_comm).

   QUICK START (one training step; error checks left out)
       #define DCP_IMPLEMENTATION          // in exactly one file
       #include "dcp.h"
       #define DCP_NCCL_IMPLEMENTATION     // in exactly one file, after dcp.h
       #include "dcp_nccl.h"

       dcp_nccl_set *set;                  // at start-up, once: collective over the pool
       dcp_nccl_options options = {0};     // the planner's max_cp, not the pool size
       options.plan_config = &config;
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
           dcp_nccl_binding group;         // cp 1 and idle ranks: no communication
           dcp_nccl_set_switch_plan(set, plan, k, &group, &err);
           dcp_nccl_ring_forward(set, &group, &params, &layout, DCP_DTYPE_BFLOAT16, q, k_, v,
                                 out, lse, scratch, scratch_bytes, stream, &err);
           ...
       }
       dcp_nccl_set_wait(set, stream, &err);   // not cudaStreamSynchronize: it times out
       dcp_nccl_set_destroy(set, &err);        // the pool is the caller's, alive: after a
       ncclCommDestroy(pool_comm);             // failure, destroy the set and make a new one

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
       DCP_NCCL_MAX_GROUP_COMMS        most groups' own communicators one set keeps (64)
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
     broadcast first takes part in every chunk (its peers are in the same exchanges) and
     then fails. A CUDA or NCCL error after the first enqueue may leave this rank's half of
     some traffic posted, so the function aborts what the set owns before it returns: its
     communicator and the groups' own ones it made, every abort flag raised before any abort
     waits (ABORTING below). The caller's pool stays as it was -- usable, and a new set can be
     made from it (or, where NCCL has ncclCommShrink, from it without the failed ranks:
     options.exclude_ranks) -- unless the set's communicator shares the pool's abort flag
     (RESOURCE SHARING), when the pool goes too and set->pool is NULL. A caller's
     communicator a broadcast ran on is never aborted: after a failure there the caller
     decides what becomes of it. The set then answers every later call with DCP_ERROR_NCCL
     until dcp_nccl_set_destroy. Every exit leaves the caller's stream ordered after the
     communication stream (joined). dcp_nccl_plan_agree's mismatch is not a failure of the
     transport: the set stays usable.
   - Set creation is the one exception: it splits the pool, and NCCL ties a split's failure
     to the parent (a failed split raises the pool's abort flag; one that does not complete
     keeps the pool busy until the pool is aborted), so when the split itself fails the set
     aborts the pool (and the child NCCL may have written) and dcp_nccl_set_create returns
     DCP_ERROR_NCCL saying so: do not destroy the pool then. A failure after the split (its
     own checks, the agreement) aborts only the new communicator.
   - Waiting and timeouts: nothing of this layer blocks the host in cudaStreamSynchronize.
     Where the host needs a result (set creation, broadcasts, agreement, dcp_nccl_set_wait,
     destroy) it polls cudaStreamQuery and ncclCommGetAsyncError; after options.timeout_ms (or
     an asynchronous error) it aborts as above and returns DCP_ERROR_NCCL naming the operation
     and the communicator. Pageable host copies are issued only on a drained stream (CUDA may
     make them wait for the stream otherwise, without bound). set->timeout_ms may be changed
     between calls. That a peer which never comes costs a timeout, not a hang, HOLDS WITH
     NON-BLOCKING COMMUNICATORS (the pool's config.blocking = 0, which the set's communicator
     shares): every NCCL call then returns at once (ncclInProgress) and is polled to its end
     with the same timeout; the split, which runs as the POOL's background job, is polled on
     the pool, and its child exists once the pool says so. With blocking communicators (NCCL's
     default) NCCL itself blocks the host, without a timeout, where it documents it:
     ncclCommSplit until every rank of the pool has called it, a first use of a peer until the
     peer connects (lazy connection), a launch while the work queue is full, a group's own
     communicator (ncclCommInitRankConfig) until the group's ranks have all come. The layer
     keeps out of these what it can -- destroy waits for the set's work by polling before
     ncclCommFinalize (which would wait for it without bound) and aborts instead when it does
     not pass -- but a blocking rank whose peer stops before the split, or before its first
     use of a peer, hangs in NCCL there.
   - Streams: functions take the caller's stream and only enqueue work on it (broadcasts,
     agreement and set creation also wait for it); the ring's transfers run on the set's own
     communication stream, ordered against the caller's stream by events, and the call
     returns with all of them ordered before later work on the caller's stream. The set's
     communicator runs its kernels in issue order on each rank: every rank of a group makes
     the group's calls in the same order (dcp.h gives them the same lists), as with any
     communicator.
   - Memory: set creation allocates the set (host, options.allocator), a communication stream,
     four events, the staging buffer and a small reduction buffer (device); broadcasts allocate
     the received buffer and object (host). Nothing else allocates: the ring takes caller
     scratch sized by dcp_nccl_ring_scratch_size, reroute takes the caller's buffers. NCCL's own
     memory per rank: docs/DESIGN.md section 6.
   - Threads: one set per process and device, used by one thread at a time (the override
     state, the events and the communication stream are the set's); ncclGroupStart/End are
     per thread, so never call into one set from two threads. The layer starts threads of its
     own only to abort under NCCL before 2.22 (ABORTING), and joins them. Thread-safe:
     dcp_nccl_compiled_version, dcp_nccl_ring_scratch_size and dcp_nccl_set_current on a set
     no thread is changing. All ranks of a group call its functions in the same order with the
     same sizes; dcp.h gives every rank the same lists, which is what makes that hold, and
     dcp_nccl_plan_agree checks the plan.
   - Several ranks on ONE GPU: NCCL refuses two ranks that look like the same host on one
     device; give each process its own NCCL_HOSTID and keep the traffic on sockets
     (NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo). tests/multirank.sh does it for 2..8 ranks.

   RESOURCE SHARING (the set's communicator)
   ncclCommSplit takes resource sharing from the PARENT's config: a splitShare set in the
   child's config has no effect. So the pool's creator decides, and the set copies the pool's
   config (options.config, which must be the one the pool was created with) whole into its
   split, or passes NULL when options.config is NULL (NCCL then copies the pool's config into
   the child). Shared (pool splitShare 1, or NCCL_COMM_SPLIT_SHARE_RESOURCES=1): the child
   uses the pool's channels and its abort flag, so a CP ring cannot overlap the DP collectives
   on the pool (they serialize), and aborting the child aborts the pool, whose later kernels
   would quit without an error. The set therefore aborts (and clears) the pool along with its
   communicator whenever they may share its flag: shared, or options.config NULL (the set
   cannot read the pool's config then; a splitShare set only in an nccl.conf file is not seen
   either). Not shared (NCCL's default, and this library's recommendation): a failure never
   touches the pool. The memory of one communicator against the former one per CP size:
   docs/DESIGN.md section 6; examples/ring_attention_nccl measures it when
   DCP_MEASURE_SPLIT_MEMORY=1 (one GPU, N ranks: tests/multirank.sh).

   ABORTING
   ncclCommAbort raises its communicator's abort flag and then waits for the communicator's
   queued work (its internal stream, which waits for the user streams its kernels sit on).
   That work can sit behind another communicator's stuck kernel -- a group's own
   communicator's work queued behind the set's, or the pool's when shared -- which only the
   other's flag releases: aborted one after the other, the first abort could wait forever. So
   the layer raises every flag before any abort waits: from NCCL 2.22 its aborts share one
   ncclGroupStart / ncclGroupEnd (an abort in a group only raises the flag, and ncclGroupEnd,
   always a blocking group then, runs the waits together); before 2.22 an abort in a group
   still waits at once, so each runs on a thread of its own (POSIX threads; elsewhere one
   after the other, which can hang as above).

   SUPPORTED NCCL VERSIONS
   2.18 or later (ncclCommSplit with a config); set creation checks ncclGetVersion at run time
   and answers DCP_ERROR_UNSUPPORTED below it. ncclCommShrink (options.exclude_ranks) needs
   2.27, at compile time (NCCL_VERSION_CODE) and at run time. The semantics above were read in
   the sources of NCCL 2.21.5 and 2.27.7 (src/init.cc, src/group.cc) and are what
   tests/fake_nccl enforces: the transport behaves as 2.27.7, and make's test_nccl_host-2.21
   build as a version before 2.22 (the threaded aborts, no ncclCommShrink). No GPU run has
   confirmed them yet (make test-multirank).

   REFERENCE
   Communicator set
       dcp_nccl_set_create(pool, options, &set, err)   collective over pool: splits it once,
                                        into one piece (color 0, key rank; the pool's config
                                        copied, or NULL), or shrinks it without
                                        options.exclude_ranks; then checks that every rank
                                        passed the same max_cp and staging size (a reduction
                                        of point-to-point sends on the new communicator).
                                        DCP_ERROR_NCCL or _CUDA from the split: it has aborted
                                        the pool (see CONVENTIONS); from later: only its own
       dcp_nccl_set_destroy(set, err)   waits (polled) for the communication stream and the
                                        caller's stream of the set's last communication, then
                                        finalizes the set's communicators together and
                                        destroys them, then the stream, events and staging.
                                        Work that does not pass within the timeout, or a
                                        failed finalize: they are aborted and DCP_ERROR_NCCL.
                                        The pool stays the caller's (unless set->pool was
                                        NULL: shared and aborted). Wait for streams you used
                                        for earlier calls first (dcp_nccl_set_wait)
       dcp_nccl_group_comm(set, binding, stream, &comm, err)   the group's own communicator,
                                        made at the first request for that group: collective
                                        over the group's ranks (member 0's ncclGetUniqueId
                                        reaches the others by a tree of sends, then
                                        ncclCommInitRankConfig); the set keeps and destroys
                                        it. NULL for cp 1 and idle ranks. For callers who must
                                        hand a communicator to another library; the layer's
                                        own calls never need it
       dcp_nccl_set_check(set, err)     polls ncclCommGetAsyncError on every communicator of the
                                        set
       dcp_nccl_set_abort(set, abort_pool, err)  ncclCommAbort on the set's communicators, and
                                        on the pool when abort_pool or when they may share its
                                        abort flag (set->shared_abort; see RESOURCE SHARING),
                                        every flag raised first; set->pool is NULL when the
                                        pool went. The set stays destroyable
       dcp_nccl_set_wait(set, stream, err)   the polled, timed wait for a stream (instead of
                                        cudaStreamSynchronize); aborts on error or timeout
       dcp_nccl_plan_agree(set, plan, stream, err)  collective over the set's ranks: a
                                        reduction of dcp_plan_hash (a tree of sends up, one
                                        down); DCP_ERROR_INVALID_PLAN on every rank when any
                                        differs. Call it before the step's first reroute
   Switch (dcp_nccl_binding: cp, rank, first_rank, idle)
       dcp_nccl_set_switch(set, view, &binding, err)          the group of a rank view
       dcp_nccl_set_switch_plan(set, plan, k, &binding, err)  the group in microbatch k
                                        (dcp_plan_rank_group's choice applied as it is: no
                                        second check of the plan or the group)
       dcp_nccl_set_current(set, &binding)                    the one in force
   Evaluation at another CP size (seed 003: train CP 1, evaluate CP 4, and back)
       dcp_nccl_override_begin(set, cp, &scope, &binding, err)   pins static CP size cp
       dcp_nccl_override_end(set, &scope, err)   restores what begin saved: call it on every
                                        exit path (C has no destructor), or use either of
       dcp_nccl_override_run(set, cp, fn, user, err)   begin; fn; end, end guaranteed
       dcp_nccl_cp_guard (C++)          begin in the constructor, end in the destructor
   Reroute
       dcp_nccl_reroute_execute(set, list, buffers, stream, err)   a dcp_reroute list as one
                                        ncclGroupStart/End of ncclSend/ncclRecv on the set's
                                        communicator (bytes as ncclUint8; zero-byte transfers
                                        skipped by both sides), local copies with
                                        cudaMemcpyAsync, destination buffers zeroed first when
                                        their rows are given (padding rows must be zero);
                                        every argument and every destination checked before
                                        anything is enqueued. buffers.fields (a
                                        dcp_field_set): only a pipeline stage's fields, each
                                        its own size, in one group; none (a middle stage): no
                                        CUDA or NCCL call at all
   MTP roll over a binding's group (dcp.h "MTP roll")
       dcp_nccl_mtp_roll_scratch_size(layout, element_size, &bytes, err)   0 at cp 1
       dcp_nccl_mtp_roll(set, binding, layout, element_size, in, out, scratch, scratch_bytes,
                         stream, err)   gather, one group of n boundary elements to and from
                                        each neighbour, shift; cp 1: the shift alone
   Ring attention over a binding's group (any cp; the ring order of dcp_ring_order)
       dcp_nccl_ring_scratch_size(params, layout, dtype, pass, &bytes, err)
       dcp_nccl_ring_forward(set, binding, params, layout, dtype, q, k, v, out, lse, scratch,
                             scratch_bytes, stream, err)
       dcp_nccl_ring_backward(set, binding, params, layout, dtype, q, k, v, out, dout, lse,
                              dq, dk, dv, deterministic, scratch, scratch_bytes, stream, err)
   Head-parallel all-to-all over a binding's group: dcp_nccl_a2a_* (the section at the end)
   Metadata broadcast (length first, then the bytes in staging-sized chunks; never a sentinel)
       dcp_nccl_broadcast_bytes(set, comm, root, data, size, &received, &received_size,
                                stream, err)  comm: a caller's communicator (ncclBroadcast on
                                        it, e.g. the TP ranks'), or NULL for the set's ranks
                                        (a tree of sends on the set's communicator); received:
                                        allocated with the set's allocator
       dcp_nccl_group_broadcast_bytes(set, binding, root, ...)   the same within a group
                                        (root: a rank of the group), a tree of sends
       dcp_nccl_broadcast_plan(set, comm, root, plan, &received, stream, err)
       dcp_nccl_broadcast_view(set, comm, root, view, &received, stream, err)
   dcp_nccl_compiled_version()          NCCL_VERSION_CODE this header was compiled against

   STATUS
   Compiled as C and under nvcc by `make`; its logic is tested on the CPU by tests/test_comm.c
   and its own code on the strict host transport by tests/test_nccl_host.c (make test), its
   device paths with the kernels on the CPU execution model (build/test_nccl_gpu-cpu,
   build/ring_attention_nccl-cpu). It has not been run on a GPU yet: make test-gpu (one rank)
   and make test-multirank (2, 4, 6, 8 ranks on one GPU, and the 2-rank fault runs) are the
   first runs to make.

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
/* How long a set waits for an exchange, a ring or the split before it aborts (10 minutes, as
   PyTorch's NCCL watchdog); a dcp_nccl_options field overrides it per set. */
#ifndef DCP_NCCL_DEFAULT_TIMEOUT_MS
#define DCP_NCCL_DEFAULT_TIMEOUT_MS INT64_C(600000)
#endif
/* The smallest staging buffer a set accepts. */
#define DCP_NCCL_MIN_STAGING_BYTES 64
/* The most groups' own communicators (dcp_nccl_group_comm) one set keeps: each costs NCCL
   memory, so a caller asking for every group of every microbatch would be a leak. */
#ifndef DCP_NCCL_MAX_GROUP_COMMS
#define DCP_NCCL_MAX_GROUP_COMMS 64
#endif
/* ncclCommShrink (options.exclude_ranks) exists from this NCCL version on. */
#define DCP_NCCL_SHRINK_VERSION 22700
/* The most ranks options.exclude_ranks may name. */
#ifndef DCP_NCCL_MAX_EXCLUDED
#define DCP_NCCL_MAX_EXCLUDED 256
#endif
#if NCCL_VERSION_CODE >= DCP_NCCL_SHRINK_VERSION
#define DCP_NCCL_HAVE_SHRINK 1
#else
#define DCP_NCCL_HAVE_SHRINK 0
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The NCCL version this header was compiled against, as NCCL_VERSION_CODE. */
DCP_NCCL_DEF int dcp_nccl_compiled_version(void);

/* Zero-initialise for the defaults; NULL options mean all defaults. max_cp and staging_bytes
   must be the same on every rank (set creation checks it). */
typedef struct dcp_nccl_options {
    int32_t max_cp;             /* the largest group, any size in [1, ranks]; default
                                   plan_config's resolved max_cp when given (a plan never picks
                                   more), else the ranks. It costs nothing: it only bounds the
                                   groups the switch and the override accept */
    size_t staging_bytes;       /* >= DCP_NCCL_MIN_STAGING_BYTES; default
                                   DCP_NCCL_DEFAULT_STAGING_BYTES */
    const ncclConfig_t *config; /* the config the POOL was created with, copied whole into the
                                   split's config; NULL: the split gets NULL, which in NCCL
                                   inherits the pool's config (the set then does not know the
                                   pool's splitShare and treats its communicator as sharing
                                   the pool's abort flag). Resource sharing is decided by the
                                   pool's splitShare, because NCCL reads the parent's: see
                                   RESOURCE SHARING. blocking 0 (non-blocking) is what makes
                                   the timeout hold: see CONVENTIONS */
    const dcp_config *plan_config; /* optional: the planner's config, for the default max_cp
                                   (its ranks must be the set's) */
    int64_t timeout_ms;         /* >= 0; every wait of the set; default
                                   DCP_NCCL_DEFAULT_TIMEOUT_MS */
    dcp_allocator allocator;    /* host memory of the set and of received metadata */
    const int32_t *exclude_ranks; /* NCCL 2.27+: pool ranks left out (failed ranks after an
                                   abort): the set's communicator is ncclCommShrink of the pool
                                   without them, its ranks renumbered in order (set->ranks =
                                   pool ranks - exclude_count), and only the other ranks call
                                   dcp_nccl_set_create. Distinct, in the pool, never this rank;
                                   the same list on every calling rank */
    int32_t exclude_count;      /* entries of exclude_ranks; 0: a split of the whole pool */
} dcp_nccl_options;

/* A group's own communicator, made on request (dcp_nccl_group_comm) and kept by the set. */
typedef struct dcp_nccl_owned_comm {
    int32_t first_rank, cp; /* the group */
    ncclComm_t comm;        /* its ranks are the group's ranks 0 .. cp - 1 */
} dcp_nccl_owned_comm;

/* Read-only for the caller; the functions below change it. */
typedef struct dcp_nccl_set {
    ncclComm_t pool;                  /* the caller's DP x CP communicator (not owned), split
                                         once at creation and not used after; NULL once the
                                         set aborted it (a failed split, or shared resources) */
    ncclComm_t comm;                  /* the set's own: the pool in one piece, every group's
                                         traffic; rank r here is rank r of the set */
    int32_t ranks, rank, max_cp;      /* the set's ranks (the pool's, less excluded ones) */
    dcp_comm_state state;             /* the group in force and the open overrides */
    dcp_nccl_owned_comm group_comms[DCP_NCCL_MAX_GROUP_COMMS]; /* made on request */
    int32_t num_group_comms;
    cudaStream_t comm_stream;         /* the ring's transfers */
    cudaEvent_t compute_done, comm_done;
    cudaEvent_t dkv_done;             /* the ring backward's last dK/dV hop posted */
    void *staging;                    /* device, staging_bytes */
    size_t staging_bytes;
    void *reduction;                  /* device: the agreement's values and its children's */
    int32_t aborted;                  /* 1 after dcp_nccl_set_abort or a failure */
    int64_t timeout_ms;               /* options.timeout_ms */
    ncclConfig_t config;              /* the split's config: options.config, copied */
    int32_t inherit_config;           /* 1: options.config was NULL, the split got NULL */
    int32_t shared_abort;             /* 1: the set's communicator shares the pool's abort flag
                                         (or may: config inherited), so aborting it aborts the
                                         pool */
    cudaEvent_t work_done;            /* recorded on the caller's stream after the set's last
                                         communication there (what destroy waits for) */
    dcp_allocator allocator;
} dcp_nccl_set;

/* This rank's group: member `rank` of the cp ranks from first_rank (cp 1 when the rank is alone
   or idle: nothing is sent). Its traffic runs on set->comm, member j being set rank
   first_rank + j. */
typedef struct dcp_nccl_binding {
    int32_t cp;
    int32_t rank;       /* in the group: 0 .. cp - 1 */
    int32_t first_rank; /* set rank of member 0 */
    int32_t idle;
} dcp_nccl_binding;

DCP_NCCL_DEF dcp_status dcp_nccl_set_create(ncclComm_t pool, const dcp_nccl_options *options,
                                            dcp_nccl_set **set, dcp_error *error);
DCP_NCCL_DEF dcp_status dcp_nccl_set_destroy(dcp_nccl_set *set, dcp_error *error);
/* The group's own communicator (binding NULL: the group in force): made at the first request
   for the group, collective over its ranks, which must all call it (in the same order with
   the same groups as every collective of the layer); later requests return the same one.
   *comm NULL for cp 1 and idle ranks. At most DCP_NCCL_MAX_GROUP_COMMS per set
   (DCP_ERROR_INVALID_ARGUMENT past it, nothing sent). The set owns it: do not destroy it. */
DCP_NCCL_DEF dcp_status dcp_nccl_group_comm(dcp_nccl_set *set, const dcp_nccl_binding *binding,
                                            cudaStream_t stream, ncclComm_t *comm,
                                            dcp_error *error);
DCP_NCCL_DEF dcp_status dcp_nccl_set_check(const dcp_nccl_set *set, dcp_error *error);
DCP_NCCL_DEF dcp_status dcp_nccl_set_abort(dcp_nccl_set *set, int32_t abort_pool,
                                           dcp_error *error);
/* The host-side wait that replaces cudaStreamSynchronize: polls the stream and the async
   errors of the set's communicators; on an error, or after timeout_ms, aborts them and names
   what failed. */
DCP_NCCL_DEF dcp_status dcp_nccl_set_wait(dcp_nccl_set *set, cudaStream_t stream,
                                          dcp_error *error);
/* Collective over the set's ranks, before the first reroute of a step: every rank's
   dcp_plan_hash must be the same (a reduction of the hash and its complement by a tree of
   sends, then its result down the tree). A difference, or a rank whose plan is NULL or broken,
   is DCP_ERROR_INVALID_PLAN on every rank; the set stays usable. */
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

/* Collective over comm -- a caller's communicator (ncclBroadcast on it), or NULL for every rank
   of the set (a tree of sends on set->comm, root a set rank): the root's bytes reach every
   rank. The length goes first (one uint64); every rank checks it with dcp_metadata_chunks, so
   all go on or all stop; then the bytes in chunks of the staging buffer. Non-root ranks
   receive a buffer allocated with the set's allocator (free it with
   dcp_free(&set->allocator, ptr)); the root's received may be NULL. A rank that cannot
   allocate still takes part in every chunk, then fails. A transport failure aborts the set's
   communicators, never the caller's comm, which may then hold this rank's part of the
   broadcast: the caller decides what becomes of it. */
DCP_NCCL_DEF dcp_status dcp_nccl_broadcast_bytes(dcp_nccl_set *set, ncclComm_t comm,
                                                 int32_t root, const void *data, size_t size,
                                                 void **received, size_t *received_size,
                                                 cudaStream_t stream, dcp_error *error);
/* The same within the binding's group (NULL: the group in force): root is a rank of the group
   (0 .. cp - 1), the bytes travel a tree of sends on set->comm between the group's ranks
   only. At cp 1 the root's bytes are copied, nothing is sent. */
DCP_NCCL_DEF dcp_status dcp_nccl_group_broadcast_bytes(dcp_nccl_set *set,
                                                       const dcp_nccl_binding *binding,
                                                       int32_t root, const void *data,
                                                       size_t size, void **received,
                                                       size_t *received_size,
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

/* Names a communicator for messages: the pool, the set's own, a group's own, or the caller's. */
static void dcp_nccl__comm_name(const dcp_nccl_set *set, ncclComm_t comm, char *name, size_t size)
{
    int32_t i;
    if (comm && comm == set->pool) {
        snprintf(name, size, "pool");
        return;
    }
    if (comm && comm == set->comm) {
        snprintf(name, size, "set's (%d ranks)", (int)set->ranks);
        return;
    }
    for (i = 0; i < set->num_group_comms; i++)
        if (comm && comm == set->group_comms[i].comm) {
            snprintf(name, size, "group's (ranks %d..%d)", (int)set->group_comms[i].first_rank,
                     (int)(set->group_comms[i].first_rank + set->group_comms[i].cp - 1));
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

/* The most communicators the set owns: its own and the groups' own ones. */
#define DCP_NCCL__MAX_OWN (DCP_NCCL_MAX_GROUP_COMMS + 1)

/* The set's own communicators into comms (its own first); their count. */
static int32_t dcp_nccl__own(const dcp_nccl_set *set, ncclComm_t *comms)
{
    int32_t count = 0, i;
    if (set->comm) comms[count++] = set->comm;
    for (i = 0; i < set->num_group_comms; i++)
        if (set->group_comms[i].comm) comms[count++] = set->group_comms[i].comm;
    return count;
}

/* Forgets the set's own communicators (they were aborted or destroyed). */
static void dcp_nccl__forget_own(dcp_nccl_set *set)
{
    set->comm = NULL;
    memset(set->group_comms, 0, sizeof set->group_comms);
    set->num_group_comms = 0;
}

/* ------------------------------------------------------------------------------ aborting */

/* From this NCCL version an ncclCommAbort inside ncclGroupStart / ncclGroupEnd only raises its
   communicator's abort flag; the wait for the communicator's queued work (commReclaim) runs in
   ncclGroupEnd, for all of them together, always as a blocking group. */
#define DCP_NCCL__GROUPED_ABORT_VERSION 22200
/* The most communicators one abort covers: the set's own ones and the pool. */
#define DCP_NCCL__MAX_ABORTS (DCP_NCCL__MAX_OWN + 1)

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

/* Aborts the set's own communicators, and the pool when abort_pool or when the set's
   communicator shares its abort flag (aborting that kills the pool anyway), every flag raised
   before any waits; the set is unusable after, and set->pool is NULL when the pool went. A
   non-blocking split that was in flight (set creation) writes its child when its job ends,
   which the pool's abort makes it do, with its error: a child written meanwhile is aborted in
   a second round. */
static dcp_status dcp_nccl__abort_set(dcp_nccl_set *set, int32_t abort_pool, dcp_error *error)
{
    ncclComm_t comms[DCP_NCCL__MAX_ABORTS];
    const int32_t with_pool = set->pool && (abort_pool || set->shared_abort);
    dcp_status first = DCP_OK;
    dcp_error scratch;
    int32_t round, count;
    for (round = 0; round < 2; round++) {
        count = dcp_nccl__own(set, comms);
        dcp_nccl__forget_own(set);
        if (round == 0 && with_pool) comms[count++] = set->pool;
        if (count == 0) break;
        dcp_nccl__keep(dcp_nccl__abort_all(comms, count, &scratch), &scratch, &first, error);
    }
    if (with_pool) set->pool = NULL;
    set->aborted = 1;
    return first;
}

/* After a failure that may have left traffic half-enqueued: every communicator the set owns
   aborted at once (no peer's matching call and no enqueued kernel is left waiting forever, and
   no abort waits for work another one has not released yet); the pool only where it shares
   their abort flag, a caller's communicator never. The set is then unusable
   (dcp_nccl__usable says so). Returns status unchanged. */
static dcp_status dcp_nccl__fail(dcp_nccl_set *set, dcp_status status)
{
    (void)dcp_nccl__abort_set(set, 0, NULL);
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
            dcp_nccl__comm_name(set, comm, name, sizeof name);
            return dcp_error_set(error, DCP_ERROR_NCCL,
                                 "%s on the %s communicator still in progress after %lld ms",
                                 call, name, (long long)set->timeout_ms);
        }
        dcp_nccl__pause();
    }
    return dcp_nccl__status(DCP_NCCL__LIB_NCCL, code, call, file, line, error);
}

/* DCP_ERROR_NCCL naming the first communicator of the set's own ones (only comm when it is not
   NULL: a caller's a broadcast runs on) whose asynchronous error is neither ncclSuccess nor
   ncclInProgress; else DCP_OK. */
static dcp_status dcp_nccl__async_errors(const dcp_nccl_set *set, ncclComm_t comm,
                                         const char *operation, dcp_error *error)
{
    ncclComm_t comms[DCP_NCCL__MAX_OWN];
    char name[48];
    int32_t i, count;
    if (comm) comms[0] = comm, count = 1;
    else count = dcp_nccl__own(set, comms);
    for (i = 0; i < count; i++) {
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(comms[i], &async) != ncclSuccess) async = ncclInternalError;
        if (async == ncclSuccess || async == ncclInProgress) continue;
        dcp_nccl__comm_name(set, comms[i], name, sizeof name);
        return dcp_error_set(error, DCP_ERROR_NCCL,
                             "%s: asynchronous error on the %s communicator: %s (%d); the set's "
                             "communicators were aborted",
                             operation, name, ncclGetErrorString(async), (int)async);
    }
    return DCP_OK;
}

/* Waits until an event (or, with event NULL, a stream: NULL is the legacy default stream, a
   valid one) has passed everything enqueued before it, without blocking the host: polls
   cudaEventQuery / cudaStreamQuery and the asynchronous errors of comm (of every communicator
   of the set when comm is NULL). On an asynchronous error, or when the set's timeout passes (a
   peer died or left the exchange early), aborts as dcp_nccl__fail does and names the
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
            return dcp_nccl__fail(set, status);
        }
        if ((status = dcp_nccl__async_errors(set, comm, operation, error)) != DCP_OK)
            return dcp_nccl__fail(set, status);
        if (dcp_nccl__now_ms() - start > (double)set->timeout_ms) {
            if (comm) dcp_nccl__comm_name(set, comm, name, sizeof name);
            else snprintf(name, sizeof name, "set's");
            status = dcp_error_set(error, DCP_ERROR_NCCL,
                                   "%s on the %s communicator did not finish in %lld ms (a peer "
                                   "died or left early?); the set's communicators were aborted",
                                   operation, name, (long long)set->timeout_ms);
            return dcp_nccl__fail(set, status);
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

/* Members of a tree exchange on set->comm (dcp_comm_tree_node): count set ranks from first,
   the root's member index and this rank's. */
typedef struct dcp_nccl__tree {
    int32_t first, count, root, me;
} dcp_nccl__tree;

static dcp_comm_tree dcp_nccl__node(const dcp_nccl__tree *t)
{
    dcp_comm_tree node;
    (void)dcp_comm_tree_node(t->count, t->root, t->me, &node, NULL); /* checked members */
    return node;
}

/* Enqueues the way down a tree: bytes of buffer received from the parent (not at the root),
   then sent to the children in one group. No host wait: the stream orders the two. */
static dcp_status dcp_nccl__tree_down(dcp_nccl_set *set, const dcp_nccl__tree *t, void *buffer,
                                      size_t bytes, cudaStream_t stream, dcp_error *error)
{
    const dcp_comm_tree node = dcp_nccl__node(t);
    dcp_status status = DCP_OK;
    int grouped = 0;
    int32_t k;
    if (bytes == 0) return DCP_OK;
    if (node.parent >= 0)
        DCP_NCCL__ON(set->comm, ncclRecv(buffer, bytes, ncclUint8, t->first + node.parent,
                                         set->comm, stream));
    if (node.num_children == 0) goto done;
    DCP_NCCL__CHECK_NCCL(ncclGroupStart());
    grouped = 1;
    for (k = 0; k < node.num_children; k++)
        DCP_NCCL__CHECK_NCCL(ncclSend(buffer, bytes, ncclUint8, t->first + node.children[k],
                                      set->comm, stream));
    DCP_NCCL__END_GROUP(set->comm);
done:
    if (grouped) (void)ncclGroupEnd(); /* never leave a group open on this thread */
    return status;
}

/* The agreement's values: up to DCP_NCCL__AGREE_MAX of them and their complements (so that
   one maximum gives both the largest value and the smallest), one slot of the reduction
   buffer for this rank's and one for each child's. */
#define DCP_NCCL__AGREE_MAX 4
#define DCP_NCCL__AGREE_SLOT_BYTES (2 * DCP_NCCL__AGREE_MAX * sizeof(uint64_t))
#define DCP_NCCL__AGREE_BYTES ((1 + DCP_COMM_TREE_ARITY) * DCP_NCCL__AGREE_SLOT_BYTES)

/* The reduction's way up on this rank: the children's values arrive (one group, polled), are
   folded into both[0 .. n) by maximum on the host, and the result goes to the parent. */
static dcp_status dcp_nccl__reduce_up(dcp_nccl_set *set, const dcp_nccl__tree *t, uint64_t *both,
                                      int32_t n, cudaStream_t stream, const char *operation,
                                      dcp_error *error)
{
    const dcp_comm_tree node = dcp_nccl__node(t);
    const size_t bytes = (size_t)n * sizeof(uint64_t);
    unsigned char *slots = (unsigned char *)set->reduction;
    uint64_t theirs[2 * DCP_NCCL__AGREE_MAX];
    dcp_status status = DCP_OK;
    int grouped = 0;
    int32_t k, i;
    if (node.num_children > 0) {
        DCP_NCCL__CHECK_NCCL(ncclGroupStart());
        grouped = 1;
        for (k = 0; k < node.num_children; k++)
            DCP_NCCL__CHECK_NCCL(ncclRecv(slots + (size_t)(1 + k) * DCP_NCCL__AGREE_SLOT_BYTES,
                                          bytes, ncclUint8, t->first + node.children[k],
                                          set->comm, stream));
        DCP_NCCL__END_GROUP(set->comm);
        DCP_NCCL__TRY(dcp_nccl__wait(set, stream, set->comm, operation, error));
    }
    for (k = 0; k < node.num_children; k++) { /* pageable copies: the stream has drained */
        DCP_NCCL__CHECK_CUDA(cudaMemcpyAsync(theirs,
                                             slots + (size_t)(1 + k) * DCP_NCCL__AGREE_SLOT_BYTES,
                                             bytes, cudaMemcpyDeviceToHost, stream));
        DCP_NCCL__TRY(dcp_nccl__wait(set, stream, set->comm, operation, error));
        for (i = 0; i < n; i++)
            if (theirs[i] > both[i]) both[i] = theirs[i];
    }
    DCP_NCCL__CHECK_CUDA(cudaMemcpyAsync(slots, both, bytes, cudaMemcpyHostToDevice, stream));
    if (node.parent >= 0)
        DCP_NCCL__ON(set->comm, ncclSend(slots, bytes, ncclUint8, t->first + node.parent,
                                         set->comm, stream));
done:
    if (grouped) (void)ncclGroupEnd();
    return status;
}

/* Whether every rank of the set holds the same values, without a collective: a reduction of
   (x, ~x) by maximum up the tree of the set's ranks (dcp_comm_tree_node), its result down the
   same tree, which gives max and ~min of each. Host values in, on `stream`, drained first (the
   copies from pageable memory would wait for it, unbounded); every wait polls, so a peer that
   never comes costs a timeout, not a hang. *differ: the first index that differs, or -1;
   least and greatest: its range. */
static dcp_status dcp_nccl__agree_values(dcp_nccl_set *set, const uint64_t *values, int32_t count,
                                         cudaStream_t stream, const char *operation,
                                         int32_t *differ, uint64_t *least, uint64_t *greatest,
                                         dcp_error *error)
{
    uint64_t both[2 * DCP_NCCL__AGREE_MAX];
    const size_t bytes = 2 * (size_t)count * sizeof(uint64_t);
    dcp_nccl__tree t;
    dcp_status status = DCP_OK;
    int32_t i;
    *differ = -1;
    t.first = 0, t.count = set->ranks, t.root = 0, t.me = set->rank;
    for (i = 0; i < count; i++) both[i] = values[i], both[count + i] = ~values[i];
    if ((status = dcp_nccl__wait(set, stream, set->comm, operation, error)) != DCP_OK)
        return status; /* aborted already */
    DCP_NCCL__TRY(dcp_nccl__reduce_up(set, &t, both, 2 * count, stream, operation, error));
    DCP_NCCL__TRY(dcp_nccl__tree_down(set, &t, set->reduction, bytes, stream, error));
    DCP_NCCL__TRY(dcp_nccl__wait(set, stream, set->comm, operation, error));
    DCP_NCCL__CHECK_CUDA(
        cudaMemcpyAsync(both, set->reduction, bytes, cudaMemcpyDeviceToHost, stream));
    DCP_NCCL__TRY(dcp_nccl__wait(set, stream, set->comm, operation, error));
    for (i = 0; i < count && *differ < 0; i++)
        if (both[i] != ~both[count + i])
            *differ = i, *least = ~both[count + i], *greatest = both[i];
done:
    return status == DCP_OK || set->aborted ? status : dcp_nccl__fail(set, status);
}

/* Every rank must bound its groups by the same max_cp and broadcast with the same staging
   size, or the exchanges would not match. */
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

/* The call that makes the set's communicator from the pool: ncclCommShrink without the
   excluded ranks (NCCL 2.27+; NCCL sorts the list it takes, so it gets a copy), else
   ncclCommSplit into one piece (color 0, key the pool rank: the ranks stay the pool's). */
static int dcp_nccl__split_call(dcp_nccl_set *set, const dcp_nccl_options *o, int32_t pool_rank,
                                ncclConfig_t *config)
{
#if DCP_NCCL_HAVE_SHRINK
    if (o->exclude_count > 0) {
        int excluded[DCP_NCCL_MAX_EXCLUDED];
        int32_t i;
        for (i = 0; i < o->exclude_count; i++) excluded[i] = (int)o->exclude_ranks[i];
        return DCP_NCCL__CALL_NCCL(ncclCommShrink(set->pool, excluded, (int)o->exclude_count,
                                                  &set->comm, config, NCCL_SHRINK_DEFAULT));
    }
#endif
    (void)o;
    return DCP_NCCL__CALL_NCCL(ncclCommSplit(set->pool, 0, (int)pool_rank, &set->comm, config));
}

/* The set's communicator, made once; collective over the pool. It runs as the POOL's group
   job: on a non-blocking pool the call answers ncclInProgress, set->comm stays NULL until the
   job ends (NCCL writes it then, with its error when the job failed), and the job's progress
   shows on the pool, which is polled. *pool_lost stays 1 unless the split completes: a failed
   split raised the pool's abort flag (NCCL's group job does), a pending one keeps it busy. */
static dcp_status dcp_nccl__split(dcp_nccl_set *set, const dcp_nccl_options *o,
                                  int32_t pool_rank, int *pool_lost, dcp_error *error)
{
    ncclConfig_t config = set->config;
    dcp_status status = DCP_OK;
    int count = 0, user_rank = 0, code;
    *pool_lost = 1;
    code = dcp_nccl__split_call(set, o, pool_rank, set->inherit_config ? NULL : &config);
    DCP_NCCL__TRY(dcp_nccl__settle(set, set->pool, code,
                                   o->exclude_count > 0 ? "ncclCommShrink" : "ncclCommSplit",
                                   __FILE__, __LINE__, error));
    *pool_lost = 0;
    if (!set->comm) {
        status = dcp_error_set(error, DCP_ERROR_NCCL, "the pool's split gave no communicator");
        goto done;
    }
    DCP_NCCL__CHECK_NCCL(ncclCommCount(set->comm, &count));
    DCP_NCCL__CHECK_NCCL(ncclCommUserRank(set->comm, &user_rank));
    if (count != set->ranks || user_rank != set->rank)
        status = dcp_error_set(error, DCP_ERROR_NCCL,
                               "the set's communicator has %d ranks with this one at %d; "
                               "expected %d and %d",
                               count, user_rank, (int)set->ranks, (int)set->rank);
done:
    return status;
}

/* Whether the NCCL library in use has ncclCommShrink. */
static int dcp_nccl__can_shrink(void)
{
    int version = 0;
    return ncclGetVersion(&version) == ncclSuccess && version >= DCP_NCCL_SHRINK_VERSION;
}

/* options.exclude_ranks against the pool: distinct ranks of the pool, not this one; the
   set's ranks and this rank's place among them (the pool's, the excluded taken out). */
static dcp_status dcp_nccl__exclusions(const dcp_nccl_options *o, int pool_ranks, int pool_rank,
                                       int *ranks, int *rank, dcp_error *error)
{
    int32_t i, j, below = 0;
    if (o->exclude_count < 0 || o->exclude_count >= pool_ranks ||
        o->exclude_count > DCP_NCCL_MAX_EXCLUDED || (o->exclude_count > 0 && !o->exclude_ranks))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "exclude_count %d must be in [0, min(%d, pool ranks %d - 1)] with "
                             "exclude_ranks set",
                             (int)o->exclude_count, DCP_NCCL_MAX_EXCLUDED, pool_ranks);
    for (i = 0; i < o->exclude_count; i++) {
        const int32_t r = o->exclude_ranks[i];
        if (r < 0 || r >= pool_ranks || r == pool_rank)
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "exclude_ranks[%d] = %d: a rank of the pool of %d other than "
                                 "this one (%d)",
                                 (int)i, (int)r, pool_ranks, pool_rank);
        for (j = 0; j < i; j++)
            if (o->exclude_ranks[j] == r)
                return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                     "exclude_ranks names rank %d twice", (int)r);
        below += r < pool_rank;
    }
    if (o->exclude_count > 0 && (!DCP_NCCL_HAVE_SHRINK || !dcp_nccl__can_shrink()))
        return dcp_error_set(error, DCP_ERROR_UNSUPPORTED,
                             "exclude_ranks needs ncclCommShrink (NCCL %d or later; compiled "
                             "against %d)",
                             DCP_NCCL_SHRINK_VERSION, NCCL_VERSION_CODE);
    *ranks = pool_ranks - (int)o->exclude_count;
    *rank = pool_rank - below;
    return DCP_OK;
}

/* The default max_cp: plan_config's (a plan of it never picks more), else every rank; any
   value must be a group size of the set. */
static dcp_status dcp_nccl__max_cp(dcp_nccl_options *o, int ranks, dcp_error *error)
{
    if (o->max_cp == 0 && o->plan_config) {
        dcp_config resolved;
        dcp_status status = dcp_config_resolve(o->plan_config, &resolved, error);
        if (status != DCP_OK) return status;
        if (resolved.ranks != ranks)
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "plan_config is for %d ranks, the set has %d",
                                 (int)resolved.ranks, ranks);
        o->max_cp = resolved.max_cp;
    }
    if (o->max_cp == 0) o->max_cp = ranks;
    if (o->max_cp < 1 || o->max_cp > ranks)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "max_cp must be in [1, ranks %d], got %d", ranks, (int)o->max_cp);
    return DCP_OK;
}

/* The options with their defaults filled in, checked against the pool (its size and this
   rank's place in it are read here) and the NCCL library (its version); ranks and rank are
   the set's, pool_rank this rank's in the pool. */
static dcp_status dcp_nccl__options_resolve(ncclComm_t pool, const dcp_nccl_options *options,
                                            dcp_nccl_options *o, int *ranks, int *rank,
                                            int *pool_rank, dcp_error *error)
{
    dcp_status status = DCP_OK;
    int version = 0, pool_ranks = 0;
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
    DCP_NCCL__CHECK_NCCL(ncclCommCount(pool, &pool_ranks));
    DCP_NCCL__CHECK_NCCL(ncclCommUserRank(pool, pool_rank));
    if (o->timeout_ms == 0) o->timeout_ms = DCP_NCCL_DEFAULT_TIMEOUT_MS;
    if (o->timeout_ms < 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "timeout_ms must be >= 0, got %lld",
                             (long long)o->timeout_ms);
    DCP_NCCL__TRY(dcp_nccl__exclusions(o, pool_ranks, *pool_rank, ranks, rank, error));
    DCP_NCCL__TRY(dcp_nccl__max_cp(o, *ranks, error));
done:
    return status;
}

/* The split's config, and whether the set's communicator shares the pool's abort flag: NCCL
   takes splitShare from the parent (the pool) and lets NCCL_COMM_SPLIT_SHARE_RESOURCES override
   it; with the pool's config unknown (NULL: inherited) the set assumes it does. */
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
   transfers start while kernels run), its events, the staging and the reduction buffers. */
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
    DCP_NCCL__CHECK_CUDA(cudaMalloc(&set->reduction, DCP_NCCL__AGREE_BYTES));
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
    void *const buffers[] = {set->staging, set->reduction};
    dcp_allocator allocator = set->allocator;
    size_t i;
    for (i = 0; i < sizeof buffers / sizeof buffers[0]; i++)
        if (buffers[i])
            dcp_nccl__keep(DCP_NCCL__QUIET_CUDA(cudaFree(buffers[i]), &scratch), &scratch, &first,
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
    int ranks = 0, rank = 0, pool_rank = 0, pool_lost = 1;
    if (!out) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "set must not be NULL");
    *out = NULL;
    if (!pool) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "pool must not be NULL");
    DCP_NCCL__TRY(dcp_nccl__options_resolve(pool, options, &o, &ranks, &rank, &pool_rank, error));
    set = (dcp_nccl_set *)dcp_alloc(&o.allocator, sizeof *set);
    if (!set) return dcp_error_set(error, DCP_ERROR_OUT_OF_MEMORY, "cannot allocate the set");
    memset(set, 0, sizeof *set);
    set->allocator = o.allocator;
    set->pool = pool;
    set->ranks = ranks, set->rank = rank, set->max_cp = o.max_cp;
    set->staging_bytes = o.staging_bytes;
    set->timeout_ms = o.timeout_ms;
    dcp_nccl__set_config(set, o.config);
    DCP_NCCL__TRY(dcp_comm_state_init(&set->state, ranks, rank, o.max_cp, error));
    DCP_NCCL__TRY(dcp_nccl__split(set, &o, pool_rank, &pool_lost, error));
    /* from here a failure is this rank's alone: its peers time out in the agreement and abort
       their own communicators; the pool stays */
    DCP_NCCL__TRY(dcp_nccl__set_streams(set, error));
    DCP_NCCL__TRY(dcp_nccl__agree(set, error));
    *out = set;
    set = NULL;
done:
    if (set && !set->aborted && (status == DCP_ERROR_NCCL || status == DCP_ERROR_CUDA))
        (void)dcp_nccl__abort_set(set, pool_lost, NULL);
    else if (!set && pool_lost && (status == DCP_ERROR_NCCL || status == DCP_ERROR_CUDA))
        (void)ncclCommAbort(pool); /* the pool failed before the set existed: its peers' split
                                      cannot complete, so every rank's pool goes */
    if (set) (void)dcp_nccl__set_free(set, NULL);
    return status == DCP_OK ? dcp_error_clear(error) : status;
}

/* ncclCommFinalize on every communicator of the set (the same order on every rank), all
   issued before any is polled, so that together they cost one timeout at most. */
static dcp_status dcp_nccl__finalize_all(dcp_nccl_set *set, dcp_error *error)
{
    ncclComm_t comms[DCP_NCCL__MAX_OWN];
    int codes[DCP_NCCL__MAX_OWN];
    const double start = dcp_nccl__now_ms();
    const int32_t count = dcp_nccl__own(set, comms);
    int32_t i, pending = 0;
    char name[48];
    for (i = 0; i < count; i++) {
        dcp_status status;
        codes[i] = dcp_nccl__nccl_code(ncclCommFinalize(comms[i]));
        pending += codes[i] == (int)ncclInProgress;
        status = codes[i] == (int)ncclInProgress
                     ? DCP_OK
                     : DCP_NCCL__RESULT(DCP_NCCL__LIB_NCCL, codes[i], ncclCommFinalize, error);
        if (status != DCP_OK) return status;
    }
    while (pending > 0) {
        for (i = 0; i < count; i++) {
            ncclResult_t async = ncclInProgress;
            if (codes[i] != (int)ncclInProgress) continue;
            if (ncclCommGetAsyncError(comms[i], &async) != ncclSuccess) async = ncclInternalError;
            if (async == ncclInProgress) continue;
            codes[i] = (int)async, pending--;
            if (async != ncclSuccess)
                return DCP_NCCL__RESULT(DCP_NCCL__LIB_NCCL, codes[i], ncclCommFinalize, error);
        }
        if (pending > 0 && dcp_nccl__now_ms() - start > (double)set->timeout_ms) {
            for (i = 0; i < count && codes[i] != (int)ncclInProgress; i++) {
            }
            dcp_nccl__comm_name(set, comms[i], name, sizeof name);
            return dcp_error_set(error, DCP_ERROR_NCCL,
                                 "ncclCommFinalize on the %s communicator still in progress "
                                 "after %lld ms",
                                 name, (long long)set->timeout_ms);
        }
        if (pending > 0) dcp_nccl__pause();
    }
    return DCP_OK;
}

/* The end of the set's communicators: once the set's work has passed (polled: a blocking
   ncclCommFinalize would wait for it without bound), finalized together and destroyed. Work
   that does not pass in time, or a finalize that fails, aborts them. */
static dcp_status dcp_nccl__retire(dcp_nccl_set *set, dcp_error *error)
{
    ncclComm_t comms[DCP_NCCL__MAX_OWN];
    dcp_status status, first = DCP_OK;
    dcp_error scratch;
    int32_t i, count;
    status = dcp_nccl__wait_for(set, set->comm_stream, NULL, NULL, "dcp_nccl_set_destroy", error);
    if (status == DCP_OK)
        status = dcp_nccl__wait_for(set, NULL, set->work_done, NULL, "dcp_nccl_set_destroy",
                                    error);
    if (status != DCP_OK) return status; /* aborted by the wait */
    if ((status = dcp_nccl__finalize_all(set, error)) != DCP_OK)
        return dcp_nccl__fail(set, status);
    count = dcp_nccl__own(set, comms);
    dcp_nccl__forget_own(set);
    for (i = 0; i < count; i++)
        dcp_nccl__keep(DCP_NCCL__QUIET_NCCL(ncclCommDestroy(comms[i]), &scratch), &scratch,
                       &first, error);
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

DCP_NCCL_DEF dcp_status dcp_nccl_set_check(const dcp_nccl_set *set, dcp_error *error)
{
    ncclComm_t comms[DCP_NCCL__MAX_OWN];
    dcp_status status;
    int32_t i, count;
    if ((status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    count = dcp_nccl__own(set, comms);
    for (i = 0; i < count; i++) {
        ncclResult_t async = ncclSuccess;
        char name[48];
        DCP_NCCL__CHECK_NCCL(ncclCommGetAsyncError(comms[i], &async));
        if (async != ncclSuccess && async != ncclInProgress) {
            dcp_nccl__comm_name(set, comms[i], name, sizeof name);
            return dcp_error_set(error, DCP_ERROR_NCCL,
                                 "asynchronous error on the %s communicator: %s (%d)%s%s; call "
                                 "dcp_nccl_set_abort",
                                 name, ncclGetErrorString(async), (int)async,
                                 ncclGetLastError(comms[i]) ? ": " : "",
                                 ncclGetLastError(comms[i]) ? ncclGetLastError(comms[i]) : "");
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
    status = dcp_nccl__abort_set(set, abort_pool, error);
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
    binding->cp = c->cp;
    binding->rank = c->rank_in_group;
    binding->first_rank = c->first_rank;
    binding->idle = c->idle;
}

DCP_NCCL_DEF dcp_status dcp_nccl_set_switch(dcp_nccl_set *set, const dcp_rank_view *view,
                                            dcp_nccl_binding *binding, dcp_error *error)
{
    dcp_status status;
    if (!view) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "view must not be NULL");
    if ((status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    if (view->rank != set->rank)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "the view is rank %d's, this is rank %d of the set", (int)view->rank,
                             (int)set->rank);
    status = dcp_comm_state_switch(&set->state, view->first_rank, view->cp, view->idle, NULL,
                                   error);
    if (status != DCP_OK) return status;
    dcp_nccl_set_current(set, binding);
    return dcp_error_clear(error);
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
                             "the plan is for %d ranks, the set has %d", (int)plan->config.ranks,
                             (int)set->ranks);
    /* the plan is checked once (dcp_plan_trusted: O(1) when sealed) and its choice applied as
       it is */
    if ((status = dcp_plan_rank_group(plan, set->rank, microbatch, &where, error)) != DCP_OK ||
        (status = dcp_comm_state_apply(&set->state, &where.choice, error)) != DCP_OK)
        return status;
    dcp_nccl_set_current(set, binding);
    return dcp_error_clear(error);
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
                    op.bytes, ncclUint8, op.peer, set->comm, stream));
            else if (op.kind == DCP_TRANSFER_RECV)
                DCP_NCCL__CHECK_NCCL(ncclRecv(
                    (unsigned char *)b->microbatch_data[op.microbatch] + op.destination_offset,
                    op.bytes, ncclUint8, op.peer, set->comm, stream));
        }
    DCP_NCCL__END_GROUP(set->comm);
    DCP_NCCL__TRY(dcp_nccl__mark_work(set, stream, error));
done:
    if (grouped) (void)ncclGroupEnd(); /* never leave a group open on this thread */
    /* past the checks, a failure may have left this rank's half of the traffic enqueued:
       abort rather than leave peers waiting for sends that will never come */
    return status == DCP_OK ? dcp_error_clear(error) : dcp_nccl__fail(set, status);
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

/* A binding fit for a group operation on this rank: at cp > 1 a range of the set's ranks
   with this rank as member `rank` (its traffic goes to set ranks first_rank + j). `what` names
   the operation in the message. */
static dcp_status dcp_nccl__check_group(const dcp_nccl_set *set, const dcp_nccl_binding *b,
                                        const char *what, dcp_error *error)
{
    if (b->cp < 1 || (b->cp > 1 && (b->idle || b->rank < 0 || b->rank >= b->cp ||
                                    b->first_rank < 0 || b->first_rank > set->ranks - b->cp ||
                                    b->first_rank + b->rank != set->rank)))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "a %s needs a group of this rank %d (binding: cp %d, rank %d, "
                             "first_rank %d, idle %d, of %d ranks)",
                             what, (int)set->rank, (int)b->cp, (int)b->rank, (int)b->first_rank,
                             (int)b->idle, (int)set->ranks);
    return DCP_OK;
}

/* ... and for layout: the same cp. */
static dcp_status dcp_nccl__check_binding(const dcp_nccl_set *set, const dcp_nccl_binding *b,
                                          const dcp_cuda_layout *layout, const char *what,
                                          dcp_error *error)
{
    if (layout->thd.cp != b->cp)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "layout cp %d differs from the binding's cp %d", (int)layout->thd.cp,
                             (int)b->cp);
    return dcp_nccl__check_group(set, b, what, error);
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
    if ((status = dcp_nccl__check_binding(set, b, layout, "ring", error)) != DCP_OK)
        return status;
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
   recv is NULL), in one NCCL group on the set's communicator (next and prev are group ranks:
   set ranks first_rank + next, first_rank + prev). */
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
        DCP_NCCL__CHECK_NCCL(ncclSend(send[i], bytes, ncclUint8, b->first_rank + x->next,
                                      set->comm, set->comm_stream));
    for (i = 0; recv && i < count; i++)
        DCP_NCCL__CHECK_NCCL(ncclRecv((unsigned char *)recv + (size_t)i * bytes, bytes,
                                      ncclUint8, b->first_rank + x->prev, set->comm,
                                      set->comm_stream));
    DCP_NCCL__END_GROUP(set->comm);
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
static dcp_status dcp_nccl__ring_exit(dcp_nccl_set *set, cudaStream_t stream, dcp_status status,
                                      dcp_error *error)
{
    dcp_error scratch;
    dcp_status joined;
    if (status != DCP_OK) (void)dcp_nccl__fail(set, status);
    joined = DCP_NCCL__QUIET_CUDA(cudaEventRecord(set->comm_done, set->comm_stream), &scratch);
    if (joined == DCP_OK)
        joined = DCP_NCCL__QUIET_CUDA(cudaStreamWaitEvent(stream, set->comm_done, 0), &scratch);
    if (joined == DCP_OK)
        joined = DCP_NCCL__QUIET_CUDA(cudaEventRecord(set->work_done, stream), &scratch);
    if (status == DCP_OK && joined != DCP_OK) {
        if (error) *error = scratch;
        return dcp_nccl__fail(set, joined);
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
    return dcp_nccl__ring_exit(set, stream, status, error);
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
    return dcp_nccl__ring_exit(set, stream, status, error);
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

/* Where a broadcast goes: a caller's communicator (comm; collective ncclBroadcast there), or
   members of the set's own (comm NULL: a tree of sends among the set ranks tree.first ..). root
   and me are ranks of comm, or member indices of the tree. */
typedef struct dcp_nccl__target {
    ncclComm_t comm;
    dcp_nccl__tree tree;
} dcp_nccl__target;

/* The communicator a target's waits poll. */
static ncclComm_t dcp_nccl__target_comm(const dcp_nccl_set *set, const dcp_nccl__target *t)
{
    return t->comm ? t->comm : set->comm;
}

/* bytes of the staging buffer from the root to every member. */
static dcp_status dcp_nccl__spread(dcp_nccl_set *set, const dcp_nccl__target *t, size_t bytes,
                                   cudaStream_t stream, dcp_error *error)
{
    dcp_status status = DCP_OK;
    if (!t->comm) return dcp_nccl__tree_down(set, &t->tree, set->staging, bytes, stream, error);
    DCP_NCCL__ON(t->comm, ncclBroadcast(set->staging, set->staging, bytes, ncclUint8,
                                        t->tree.root, t->comm, stream));
done:
    return status;
}

/* The root's length reaches every rank (pageable copies would block the host on a stalled
   stream, so the stream is drained by polling before each of them). */
static dcp_status dcp_nccl__broadcast_length(dcp_nccl_set *set, const dcp_nccl__target *t,
                                             uint64_t *length, cudaStream_t stream,
                                             dcp_error *error)
{
    const ncclComm_t comm = dcp_nccl__target_comm(set, t);
    dcp_status status = DCP_OK;
    DCP_NCCL__TRY(dcp_nccl__wait(set, stream, comm, "broadcast (the caller's stream)", error));
    DCP_NCCL__CHECK_CUDA(cudaMemcpyAsync(set->staging, length, sizeof *length,
                                         cudaMemcpyHostToDevice, stream));
    DCP_NCCL__TRY(dcp_nccl__spread(set, t, sizeof *length, stream, error));
    DCP_NCCL__TRY(dcp_nccl__wait(set, stream, comm, "broadcast of the length", error));
    DCP_NCCL__CHECK_CUDA(cudaMemcpyAsync(length, set->staging, sizeof *length,
                                         cudaMemcpyDeviceToHost, stream));
    DCP_NCCL__TRY(dcp_nccl__wait(set, stream, comm, "broadcast of the length", error));
done:
    return status;
}

/* The chunk of `length` bytes at `begin` through the staging buffer: from data on the root
   (data NULL elsewhere), into host where a rank keeps the bytes (host NULL otherwise). The
   stream has drained (the previous wait). */
static dcp_status dcp_nccl__broadcast_chunk(dcp_nccl_set *set, const dcp_nccl__target *t,
                                            const void *data, unsigned char *host,
                                            uint64_t length, uint64_t begin,
                                            cudaStream_t stream, dcp_error *error)
{
    const size_t n = (size_t)(length - begin < set->staging_bytes ? length - begin
                                                                  : set->staging_bytes);
    const ncclComm_t comm = dcp_nccl__target_comm(set, t);
    dcp_status status = DCP_OK;
    if (data)
        DCP_NCCL__CHECK_CUDA(cudaMemcpyAsync(set->staging, (const unsigned char *)data + begin, n,
                                             cudaMemcpyHostToDevice, stream));
    DCP_NCCL__TRY(dcp_nccl__spread(set, t, n, stream, error));
    DCP_NCCL__TRY(dcp_nccl__wait(set, stream, comm, "broadcast of the bytes", error));
    if (host) {
        DCP_NCCL__CHECK_CUDA(cudaMemcpyAsync(host + begin, set->staging, n,
                                             cudaMemcpyDeviceToHost, stream));
        DCP_NCCL__TRY(dcp_nccl__wait(set, stream, comm, "broadcast of the bytes", error));
    }
done:
    return status;
}

/* dcp_nccl_broadcast_bytes on a target whose root and ranks are known. */
static dcp_status dcp_nccl__broadcast(dcp_nccl_set *set, const dcp_nccl__target *t,
                                      const void *data, size_t size, void **received,
                                      size_t *received_size, cudaStream_t stream,
                                      dcp_error *error)
{
    const int is_root = t->tree.me == t->tree.root;
    dcp_status status = DCP_OK, local = DCP_OK;
    dcp_error local_error, reason;
    unsigned char *host = NULL;
    uint64_t length = 0, chunks = 0, c;
    if (received) *received = NULL;
    if (received_size) *received_size = 0;
    dcp_nccl__broadcast_own_arguments(is_root, data, size, received, received_size, &local,
                                      &local_error);
    /* 1. the length, one uint64 */
    length = is_root && local == DCP_OK ? (uint64_t)size : 0;
    DCP_NCCL__TRY(dcp_nccl__broadcast_length(set, t, &length, stream, error));
    /* every rank judges the same length the same way: all go on, or all stop here */
    if ((status = dcp_metadata_chunks(length, set->staging_bytes, &chunks, error)) != DCP_OK) {
        if (local == DCP_OK) return status; /* nothing is in flight: no abort */
        status = DCP_OK; /* this rank's own reason comes first */
        goto done;
    }
    if (is_root ? received != NULL : (received && received_size)) {
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
        DCP_NCCL__TRY(dcp_nccl__broadcast_chunk(set, t, is_root ? data : NULL,
                                                is_root ? NULL : host, length,
                                                c * set->staging_bytes, stream, error));
    if (local != DCP_OK) goto done;
    if (is_root && host) memcpy(host, data, (size_t)length);
    if (received) *received = host, host = NULL;
    if (received_size) *received_size = (size_t)length;
done:
    if (host) dcp_free(&set->allocator, host);
    if (status != DCP_OK) /* a CUDA or NCCL failure mid-way: peers may wait for this rank */
        return set->aborted ? status : dcp_nccl__fail(set, status);
    if (local != DCP_OK) {
        if (error) *error = local_error;
        return local;
    }
    return dcp_error_clear(error);
}

/* The target of a broadcast on comm (a caller's; NULL: every rank of the set). The same root
   on every rank gives the same answer everywhere. */
static dcp_status dcp_nccl__target_of(dcp_nccl_set *set, ncclComm_t comm, int32_t root,
                                      dcp_nccl__target *t, dcp_error *error)
{
    dcp_status status = DCP_OK;
    int ranks = set->ranks, me = set->rank;
    t->comm = comm;
    if (comm) {
        DCP_NCCL__CHECK_NCCL(ncclCommCount(comm, &ranks));
        DCP_NCCL__CHECK_NCCL(ncclCommUserRank(comm, &me));
    }
    t->tree.first = 0, t->tree.count = ranks, t->tree.root = root, t->tree.me = me;
    if (root < 0 || root >= ranks)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "root %d outside [0, %d)",
                             (int)root, ranks);
done:
    return status;
}

DCP_NCCL_DEF dcp_status dcp_nccl_broadcast_bytes(dcp_nccl_set *set, ncclComm_t comm,
                                                 int32_t root, const void *data, size_t size,
                                                 void **received, size_t *received_size,
                                                 cudaStream_t stream, dcp_error *error)
{
    dcp_nccl__target t;
    dcp_status status;
    if ((status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    if (received) *received = NULL;
    if (received_size) *received_size = 0;
    if ((status = dcp_nccl__target_of(set, comm, root, &t, error)) != DCP_OK) return status;
    return dcp_nccl__broadcast(set, &t, data, size, received, received_size, stream, error);
}

/* A group target: the binding's group (NULL: the one in force), root a rank of it. */
static dcp_status dcp_nccl__group_target(const dcp_nccl_set *set, const dcp_nccl_binding *binding,
                                         int32_t root, dcp_nccl__target *t, dcp_error *error)
{
    dcp_nccl_binding current;
    dcp_status status;
    if (!binding) dcp_nccl_set_current(set, &current), binding = &current;
    if ((status = dcp_nccl__check_group(set, binding, "group broadcast", error)) != DCP_OK)
        return status;
    if (binding->idle)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "rank %d is idle: it has no group to broadcast in", (int)set->rank);
    if (root < 0 || root >= binding->cp)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "root %d outside the group's ranks [0, %d)", (int)root,
                             (int)binding->cp);
    t->comm = NULL;
    t->tree.first = binding->first_rank, t->tree.count = binding->cp;
    t->tree.root = root, t->tree.me = binding->rank;
    return DCP_OK;
}

DCP_NCCL_DEF dcp_status dcp_nccl_group_broadcast_bytes(dcp_nccl_set *set,
                                                       const dcp_nccl_binding *binding,
                                                       int32_t root, const void *data,
                                                       size_t size, void **received,
                                                       size_t *received_size,
                                                       cudaStream_t stream, dcp_error *error)
{
    dcp_nccl__target t;
    dcp_status status;
    if ((status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    if (received) *received = NULL;
    if (received_size) *received_size = 0;
    if ((status = dcp_nccl__group_target(set, binding, root, &t, error)) != DCP_OK)
        return status;
    return dcp_nccl__broadcast(set, &t, data, size, received, received_size, stream, error);
}

/* The two objects a broadcast carries, serialized by their own functions. */
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

/* Serializes on the root (length 0 on failure, which every rank rejects), broadcasts, and
   hands the bytes to the deserializer. */
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
    dcp_nccl__target t;
    int me;
    if ((status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    if (received) *received = NULL;
    if ((status = dcp_nccl__target_of(set, comm, root, &t, error)) != DCP_OK) return status;
    me = t.tree.me;
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
    status = dcp_nccl__broadcast(set, &t, bytes, size,
                                 me == root && !received ? NULL : (void **)&copy, &got, stream,
                                 error);
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

/* --------------------------------------------------------------- a group's own communicator */

/* The group's entry in the set's list, or -1. */
static int32_t dcp_nccl__group_comm_index(const dcp_nccl_set *set, int32_t first_rank, int32_t cp)
{
    int32_t i;
    for (i = 0; i < set->num_group_comms; i++)
        if (set->group_comms[i].first_rank == first_rank && set->group_comms[i].cp == cp) return i;
    return -1;
}

/* Makes the group's communicator: member 0's unique id reaches the others by a tree of sends on
   the set's communicator, then every member joins it (ncclCommInitRankConfig with the pool's
   config, or NCCL's defaults when options.config was NULL), polled on the new communicator.
   The set records it at once, so that a failure aborts it with the others. */
static dcp_status dcp_nccl__group_comm_make(dcp_nccl_set *set, const dcp_nccl__target *t,
                                            cudaStream_t stream, ncclComm_t *made,
                                            dcp_error *error)
{
    dcp_nccl_owned_comm *entry = &set->group_comms[set->num_group_comms];
    ncclConfig_t config = set->config;
    ncclUniqueId id;
    dcp_status status = DCP_OK;
    uint64_t begin;
    int count = 0, me = -1, code;
    memset(&id, 0, sizeof id);
    if (t->tree.me == 0) DCP_NCCL__CHECK_NCCL(ncclGetUniqueId(&id));
    DCP_NCCL__TRY(dcp_nccl__wait(set, stream, set->comm, "dcp_nccl_group_comm", error));
    for (begin = 0; begin < sizeof id; begin += set->staging_bytes)
        DCP_NCCL__TRY(dcp_nccl__broadcast_chunk(set, t, t->tree.me == 0 ? &id : NULL,
                                                t->tree.me == 0 ? NULL : (unsigned char *)&id,
                                                sizeof id, begin, stream, error));
    entry->first_rank = t->tree.first, entry->cp = t->tree.count, entry->comm = NULL;
    set->num_group_comms++;
    code = DCP_NCCL__CALL_NCCL(ncclCommInitRankConfig(&entry->comm, (int)t->tree.count, id,
                                                      (int)t->tree.me,
                                                      set->inherit_config ? NULL : &config));
    DCP_NCCL__TRY(dcp_nccl__settle(set, entry->comm, code, "ncclCommInitRankConfig", __FILE__,
                                   __LINE__, error));
    DCP_NCCL__CHECK_NCCL(ncclCommCount(entry->comm, &count));
    DCP_NCCL__CHECK_NCCL(ncclCommUserRank(entry->comm, &me));
    if (count != t->tree.count || me != t->tree.me) {
        status = dcp_error_set(error, DCP_ERROR_NCCL,
                               "the group's communicator has %d ranks with this one at %d; "
                               "expected %d and %d",
                               count, me, (int)t->tree.count, (int)t->tree.me);
        goto done;
    }
    *made = entry->comm;
done:
    return status;
}

DCP_NCCL_DEF dcp_status dcp_nccl_group_comm(dcp_nccl_set *set, const dcp_nccl_binding *binding,
                                            cudaStream_t stream, ncclComm_t *comm,
                                            dcp_error *error)
{
    dcp_nccl_binding current;
    dcp_nccl__target t;
    dcp_status status;
    int32_t index;
    if (!comm) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "comm must not be NULL");
    *comm = NULL;
    if ((status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    if (!binding) dcp_nccl_set_current(set, &current), binding = &current;
    if ((status = dcp_nccl__check_group(set, binding, "group communicator", error)) != DCP_OK)
        return status;
    if (binding->idle || binding->cp == 1) return dcp_error_clear(error); /* nothing to join */
    index = dcp_nccl__group_comm_index(set, binding->first_rank, binding->cp);
    if (index >= 0) {
        *comm = set->group_comms[index].comm;
        return dcp_error_clear(error);
    }
    if (set->num_group_comms >= DCP_NCCL_MAX_GROUP_COMMS)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "the set keeps at most %d groups' own communicators "
                             "(DCP_NCCL_MAX_GROUP_COMMS); group (first_rank %d, cp %d) is one "
                             "more",
                             DCP_NCCL_MAX_GROUP_COMMS, (int)binding->first_rank,
                             (int)binding->cp);
    (void)dcp_nccl__group_target(set, binding, 0, &t, NULL); /* checked above */
    status = dcp_nccl__group_comm_make(set, &t, stream, comm, error);
    if (status == DCP_OK) return dcp_error_clear(error);
    /* its peers may wait for this rank in the id's tree or the communicator's init */
    return set->aborted ? status : dcp_nccl__fail(set, status);
}

#ifdef __cplusplus
}
#endif

#endif /* DCP_NCCL_IMPLEMENTATION_INCLUDED */
#endif /* DCP_NCCL_IMPLEMENTATION */

/* ================================================================ head-parallel all-to-all
   The CP <-> head-parallel switch of linear-attention layers (dcp.h "head-parallel all-to-all":
   what moves where, as segment lists) executed on a group of any size: pack on the device
   (dcp_cuda_a2a_copy), one ncclGroupStart/End of ncclSend/ncclRecv between the group's ranks on
   the set's communicator, unpack on the device, all on the caller's stream. dcp_nccl_a2a_prepare
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
    int32_t first_rank;               /* set rank of the group's member 0: member j's traffic
                                         runs on set->comm with set rank first_rank + j */
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
    if ((status = dcp_nccl__check_group(set, b, "all-to-all", error)) != DCP_OK) return status;
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
    a2a->first_rank = binding->first_rank;
    a2a->cp_segments = (const dcp_a2a_segment *)device_workspace;
    a2a->hp_segments = a2a->cp_segments + a2a->shape.cp_segments;
    a2a->cp_message = (unsigned char *)device_workspace + g.cp_message;
    a2a->hp_message = (unsigned char *)device_workspace + g.hp_message;
    a2a->message_offsets = offsets;
    DCP_NCCL__TRY(dcp_nccl__wait(set, stream, set->comm, "all-to-all prepare (the caller's stream)",
                                 error));
    DCP_NCCL__CHECK_CUDA(cudaMemcpyAsync(device_workspace, host_workspace, g.segment_bytes,
                                         cudaMemcpyHostToDevice, stream));
done:
    if (status == DCP_OK) return dcp_error_clear(error);
    /* as the reroute does past its checks: this rank cannot take part in the group's rounds
       now, so the set is aborted (a failed wait has aborted it already) */
    memset(a2a, 0, sizeof *a2a);
    return set->aborted ? status : dcp_nccl__fail(set, status);
}

/* The checks of an execution; *same: cp 1 with one buffer for both layouts. */
static dcp_status dcp_nccl__a2a_run_check(dcp_nccl_set *set, const dcp_nccl_a2a *a2a,
                                          const void *in, const void *out, dcp_error *error)
{
    dcp_status status;
    if ((status = dcp_nccl__usable(set, error)) != DCP_OK) return status;
    if (!a2a || a2a->shape.cp < 1 ||
        (a2a->shape.cp > 1 &&
         (a2a->first_rank < 0 || a2a->first_rank > set->ranks - a2a->shape.cp ||
          a2a->first_rank + a2a->shape.rank != set->rank || !a2a->cp_segments ||
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
        const int peer = (int)(a2a->first_rank + j); /* member j of the group */
        unsigned char *at_cp = cp_message + (size_t)j * mine;
        unsigned char *at_hp = hp_message + (size_t)a2a->message_offsets[j] * s->slice_bytes;
        const size_t theirs =
            (size_t)(a2a->message_offsets[j + 1] - a2a->message_offsets[j]) * s->slice_bytes;
        if (mine > 0 && to_hp)
            DCP_NCCL__CHECK_NCCL(ncclSend(at_cp, mine, ncclUint8, peer, set->comm, stream));
        if (theirs > 0 && !to_hp)
            DCP_NCCL__CHECK_NCCL(ncclSend(at_hp, theirs, ncclUint8, peer, set->comm, stream));
        if (theirs > 0 && to_hp)
            DCP_NCCL__CHECK_NCCL(ncclRecv(at_hp, theirs, ncclUint8, peer, set->comm, stream));
        if (mine > 0 && !to_hp)
            DCP_NCCL__CHECK_NCCL(ncclRecv(at_cp, mine, ncclUint8, peer, set->comm, stream));
    }
    DCP_NCCL__END_GROUP(set->comm);
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
    return status == DCP_OK ? dcp_error_clear(error) : dcp_nccl__fail(set, status);
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
    if ((status = dcp_nccl__check_binding(set, b, layout, "roll", error)) != DCP_OK)
        return status;
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
    if (half > 0) { /* [0] to and from the previous rank's side, [1] the next's; the group's
                       neighbours are set ranks this one - 1 and + 1 */
        DCP_NCCL__CHECK_NCCL(ncclGroupStart());
        grouped = 1;
        if (b->rank > 0) {
            DCP_NCCL__CHECK_NCCL(
                ncclSend(boundaries, half, ncclUint8, set->rank - 1, set->comm, stream));
            DCP_NCCL__CHECK_NCCL(
                ncclRecv(received + half, half, ncclUint8, set->rank - 1, set->comm, stream));
        }
        if (b->rank + 1 < b->cp) {
            DCP_NCCL__CHECK_NCCL(
                ncclSend(boundaries + half, half, ncclUint8, set->rank + 1, set->comm, stream));
            DCP_NCCL__CHECK_NCCL(
                ncclRecv(received, half, ncclUint8, set->rank + 1, set->comm, stream));
        }
        DCP_NCCL__END_GROUP(set->comm);
    }
    DCP_NCCL__TRY(dcp_cuda_mtp_roll_shift(layout, b->rank, element_size, in, received, out,
                                          stream, error));
    DCP_NCCL__TRY(dcp_nccl__mark_work(set, stream, error));
done:
    if (grouped) (void)ncclGroupEnd(); /* never leave a group open on this thread */
    /* past the checks a failure may leave a neighbour waiting for this rank's boundaries */
    return status == DCP_OK ? dcp_error_clear(error) : dcp_nccl__fail(set, status);
}

#ifdef __cplusplus
}
#endif
#endif /* DCP_NCCL_MTP_IMPLEMENTATION_INCLUDED */
