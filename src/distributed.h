/* src/distributed.h - the distributed host logic dcp_nccl.h builds on (absent with
   DCP_NO_DISTRIBUTED): the communicator choice, group switches, ring orders, the head-parallel
   all-to-all, the MTP roll and pipeline-stage field sets.
   Part of dcp.h: edit here, then run `make amalgamate` (tools/amalgamate.py writes dcp.h
   from src/dcp.h.in and these parts); make test fails while dcp.h is stale. */
//@@ declarations
#ifndef DCP_NO_DISTRIBUTED
/* ========================================================================= distributed logic
   Everything dcp_nccl.h decides, as pure functions tests run on simulated ranks (docs/DESIGN.md
   section 6): which group a rank works in during a microbatch and under an evaluation override
   (restored on every exit path) -- any size and position, all on one communicator of the pool
   --, the byte ranges of a reroute list, the peers (in a ring order that keeps every rank's
   neighbours within r +- 2) and buffer slots of every ring step, the scratch a ring needs, the
   tree of a broadcast or reduction made of point-to-point sends, and the framing of a metadata
   broadcast. The NCCL layer only maps these answers to calls. No allocation; thread-safe on
   distinct objects. Define DCP_NO_DISTRIBUTED before including dcp.h to leave them out
   (dcp_nccl.h needs them). */

/* The largest CP size worth planning for samples of at most max_length tokens under config
   (resolved): the allowed CP size at which such a sample alone runs fastest per the cost model
   (compute / c against the ring's (c - 1) steps), raised to the smallest feasible one and
   capped at config's max_cp. More ranks never speed up a sample of that length, nor any
   shorter one. Use it as config.max_cp for the planner AND as the communicator set's max_cp:
   the plans then never pick more (dcp_plan_validate checks it). DCP_ERROR_INFEASIBLE when
   max_length does not fit config at all. max_cp may point at config->max_cp. */
DCPDEF dcp_status dcp_comm_max_cp(const dcp_config *config, int64_t max_length, int32_t *max_cp,
                                  dcp_error *error);

/* A 64-bit FNV-1a hash of everything a plan decides (resolved config, lengths, microbatches,
   groups, samples): ranks that hold the same plan hash the same; dcp_nccl_plan_agree compares
   it across the pool before the first reroute of a step. */
DCPDEF dcp_status dcp_plan_hash(const dcp_plan *plan, uint64_t *hash, dcp_error *error);

/* The group a rank works in. The NCCL layer runs every group on ONE communicator of the whole
   pool (its ranks are the pool's), so a group is only a range of pool ranks and the rank's
   place in it: member j of the group is pool rank first_rank + j. */
typedef struct dcp_comm_choice {
    int32_t cp;            /* group size, any in [1, max_cp]; 1 when idle */
    int32_t first_rank;    /* pool rank of the group's member 0 */
    int32_t rank_in_group; /* rank - first_rank */
    int32_t idle;          /* 1: no group (no samples) */
} dcp_comm_choice;

/* For a group (first_rank, cp) of a plan or a rank view: checks that it is a range of cp ranks
   (any cp in [1, max_cp], any position: a plan under DCP_CP_SIZES_ANY places groups anywhere)
   inside the pool that contains rank. An idle rank passes idle 1 with either cp 1 and
   first_rank = rank (a choice's own form) or a rank view's idle form (cp 0, first_rank
   DCP_NO_GROUP); its choice is the no-op path: cp 1, first_rank = rank. max_cp in [1, ranks]. */
DCPDEF dcp_status dcp_comm_choose(int32_t ranks, int32_t max_cp, int32_t rank,
                                  int32_t first_rank, int32_t cp, int32_t idle,
                                  dcp_comm_choice *choice, dcp_error *error);
/* Static CP size cp for every rank (evaluation): the block [rank / cp * cp, + cp) holding rank;
   idle when that block is not full (ranks not a multiple of cp). */
DCPDEF dcp_status dcp_comm_choose_static(int32_t ranks, int32_t max_cp, int32_t rank, int32_t cp,
                                         dcp_comm_choice *choice, dcp_error *error);
/* The group of `rank` in `microbatch` without building a view (no allocation): group is the
   index into plan->groups or -1 when idle; local_rows the rows of its local buffer; choice the
   group as dcp_comm_choose gives it, derived once from the plan (dcp_plan_trusted: O(1) for a
   plan the library made or read), so that the per-microbatch switch applies it as it is
   (dcp_comm_state_apply) instead of checking the group a second time. */
typedef struct dcp_rank_group {
    int32_t group;          /* index into plan->groups, -1 when idle */
    dcp_comm_choice choice; /* the group, as dcp_comm_choose gives it */
    int64_t local_rows;     /* rows of the rank's local buffer (the view's local_tokens) */
} dcp_rank_group;

DCPDEF dcp_status dcp_plan_rank_group(const dcp_plan *plan, int32_t rank, int32_t microbatch,
                                      dcp_rank_group *where, dcp_error *error);

/* Which group a rank works in now, and the overrides that pin a CP size for a scope
   (evaluation at another CP size than training: seed 003). The per-microbatch switch sets
   `current` from the plan's group; an override sets it to dcp_comm_choose_static(cp) and, while
   it is open, refuses a group of another CP size (an idle rank is always accepted). Overrides
   nest. dcp_comm_override_end restores exactly the state its begin saved, whatever happened in
   between: call it on every exit path (or use dcp_comm_override_run, whose end is guaranteed). */
typedef struct dcp_comm_state {
    int32_t ranks, rank, max_cp; /* the pool's size, this rank, the largest CP size in use */
    dcp_comm_choice current;     /* the group in force now */
    int32_t override_cp; /* 0: no override open */
    int32_t depth;       /* overrides open */
} dcp_comm_state;

/* The caller's record of one open override: zero-initialise it; begin fills it; end closes it. */
typedef struct dcp_comm_scope {
    dcp_comm_choice saved;     /* the state's current choice when begin ran */
    int32_t saved_override_cp; /* and its override_cp */
    int32_t depth; /* 0: not open */
} dcp_comm_scope;

/* current: the rank alone (cp 1, not idle), no override. max_cp in [1, ranks]. */
DCPDEF dcp_status dcp_comm_state_init(dcp_comm_state *state, int32_t ranks, int32_t rank,
                                      int32_t max_cp, dcp_error *error);
/* Switches to a group (dcp_comm_choose's checks); on error the state is unchanged. choice may
   be NULL. */
DCPDEF dcp_status dcp_comm_state_switch(dcp_comm_state *state, int32_t first_rank, int32_t cp,
                                        int32_t idle, dcp_comm_choice *choice, dcp_error *error);
/* Switches to a choice made already (dcp_plan_rank_group's, dcp_comm_choose's): checks in O(1)
   that it fits the state's pool, rank and max_cp and the open override, without deriving it
   again; on error the state is unchanged. */
DCPDEF dcp_status dcp_comm_state_apply(dcp_comm_state *state, const dcp_comm_choice *choice,
                                       dcp_error *error);
/* On error (cp not in [1, max_cp]) neither state nor scope changes. */
DCPDEF dcp_status dcp_comm_override_begin(dcp_comm_state *state, int32_t cp,
                                          dcp_comm_scope *scope, dcp_error *error);
/* Restores the state saved by begin and closes the scope. Ending a scope that is not the
   innermost one also closes every scope opened inside it and returns
   DCP_ERROR_INVALID_ARGUMENT after restoring; a scope that is not open changes nothing and
   returns DCP_ERROR_INVALID_ARGUMENT. */
DCPDEF dcp_status dcp_comm_override_end(dcp_comm_state *state, dcp_comm_scope *scope,
                                        dcp_error *error);
/* begin, fn(state, user, error), end: the state is restored whatever fn returns. Returns fn's
   status when it failed, else end's. */
typedef dcp_status (*dcp_comm_scoped_fn)(dcp_comm_state *state, void *user, dcp_error *error);
DCPDEF dcp_status dcp_comm_override_run(dcp_comm_state *state, int32_t cp, dcp_comm_scoped_fn fn,
                                        void *user, dcp_error *error);

/* A reroute transfer in bytes, for element_size bytes per token: where it reads in the
   sample's buffer (SEND, COPY), where it writes in the microbatch buffer (RECV, COPY), how many
   bytes. Both sides of a SEND/RECV pair compute the same bytes from the same plan; a transfer of
   0 bytes is skipped by both. DCP_ERROR_OVERFLOW when a byte count exceeds size_t. */
typedef struct dcp_reroute_op {
    dcp_transfer_kind kind;    /* as the transfer's */
    int32_t peer;              /* as the transfer's */
    int32_t sample;            /* the sample buffer read (SEND, COPY) */
    int32_t microbatch;        /* the microbatch buffer written (RECV, COPY) */
    size_t source_offset;      /* bytes into the sample's buffer */
    size_t destination_offset; /* bytes into the microbatch buffer */
    size_t bytes;              /* tokens x element_size */
} dcp_reroute_op;

DCPDEF dcp_status dcp_reroute_op_get(const dcp_reroute *reroute, int32_t index,
                                     size_t element_size, dcp_reroute_op *op, dcp_error *error);
/* Checks every transfer against buffers the caller holds: samples in [0, num_samples),
   microbatches in [0, num_microbatches), and, when microbatch_rows is not NULL, destination
   rows inside microbatch_rows[k]; sample_rows likewise for source positions (may be NULL).
   A buffer needs AT LEAST the rows the list writes into it (dcp_reroute_rows_written), not
   exactly the plan's rows: one allocated for the largest microbatch serves every one. */
DCPDEF dcp_status dcp_reroute_check(const dcp_reroute *reroute, int32_t num_samples,
                                    const int64_t *sample_rows, int32_t num_microbatches,
                                    const int64_t *microbatch_rows, dcp_error *error);
/* The reroute lists of all ranks of one plan (reroutes[r] of rank r, r in [0, ranks)) against
   each other: the k-th send of rank A to rank B and the k-th receive of B from A carry the same
   microbatch, sample, source range and destination row, and no send or receive is left
   unpaired; every copy is local. DCP_ERROR_INVALID_PLAN names the first mismatch. Allocates
   scratch with allocator (NULL: DCP_MALLOC / DCP_FREE). */
DCPDEF dcp_status dcp_reroute_match(const dcp_reroute *const *reroutes, int32_t ranks,
                                    const dcp_allocator *allocator, dcp_error *error);
/* rows[k] = 1 + the last row of microbatch k that the list's receives and local copies write
   (0 when none), for k in [0, num_microbatches): the smallest microbatch_rows that
   dcp_reroute_check accepts. At most the plan's local_rows (dcp_plan_rank_group): the rows
   after the last valid token are padding, which no transfer writes. No allocation. */
DCPDEF dcp_status dcp_reroute_rows_written(const dcp_reroute *reroute, int32_t num_microbatches,
                                           int64_t *rows, dcp_error *error);

/* The ring of a group of cp ranks (any cp in [1, DCP_MAX_RANKS]), as the NCCL layer runs it,
   in the ring order of dcp_ring_order: next and prev are the rank's neighbours there (group
   ranks r +- 1 or r +- 2). Step s of rank r computes with the KV of the rank s places before r
   in that order (dcp_ring_step_plan's kv_rank) while the KV of step s + 1 travels from prev to
   this rank, so every step but the first finds its KV in one of two
   scratch slots (double buffering). In the backward pass the dK, dV of a KV travel with it one
   hop behind: step s adds into an accumulator (zero at step 0: the rank's own), sends it to
   next and receives the one of step s + 1 from prev; after the last step the accumulator
   received is the rank's own, complete (it has visited every rank once). Slots never clash: a
   step never receives into the slot it reads or sends. */
typedef struct dcp_ring_exchange {
    int32_t next, prev;       /* ranks in the group this rank sends to and receives from */
    int32_t kv_source;        /* the rank whose KV the step reads */
    int32_t kv_slot;          /* -1: the caller's k, v; else the scratch KV slot */
    int32_t kv_send;          /* 1: send the step's KV to next (for its step + 1) */
    int32_t kv_recv_slot;     /* slot the KV of step + 1 arrives in, -1: no transfer */
    int32_t kv_recv_source;   /* whose KV arrives, -1: none */
    int32_t dkv_slot;         /* backward: the accumulator slot the step adds into */
    int32_t dkv_zero;         /* 1: zero that accumulator before the step */
    int32_t dkv_send;         /* 1: after the step, send the accumulator to next */
    int32_t dkv_recv_slot;    /* after the step, receive an accumulator into it; -1: none */
    int32_t dkv_recv_source;  /* whose accumulator arrives (rank itself after the last step) */
    int32_t dkv_home_slot;    /* last step: the slot holding this rank's finished dK, dV */
} dcp_ring_exchange;

DCPDEF dcp_status dcp_ring_exchange_plan(int32_t cp, int32_t rank, int32_t step,
                                         dcp_ring_exchange *exchange, dcp_error *error);

typedef enum dcp_ring_pass { DCP_RING_FORWARD = 0, DCP_RING_BACKWARD = 1 } dcp_ring_pass;

/* The buffers of one ring pass on one rank; q heads [rows, num_heads, head_dim], k and v
   [rows, num_kv_heads, head_dim] of element_size bytes (the input dtype). */
typedef struct dcp_ring_shape {
    int32_t cp;           /* ranks of the ring, in [1, DCP_MAX_RANKS] */
    int64_t local_rows;   /* rows of the rank's local buffers */
    int32_t num_heads;    /* query heads */
    int32_t num_kv_heads; /* key and value heads, dividing num_heads */
    int32_t head_dim;     /* elements per head */
    size_t element_size;  /* bytes per element of q, k, v (2 for bf16 and fp16) */
} dcp_ring_shape;

/* A region of the scratch buffer: bytes 0 when the pass does not need it. */
typedef struct dcp_ring_region {
    size_t offset; /* bytes from the start of the scratch buffer */
    size_t bytes;
} dcp_ring_region;

/* Every region starts at a multiple of DCP_RING_SCRATCH_ALIGN. kv[i]: k then v of slot i in the
   input dtype (k at offset, v at offset + bytes / 2). Forward (cp > 1): partial out and lse and
   the accumulator, float32. Backward: dq accumulator float32 and dkv[i] (dk then dv) float32,
   and for cp > 1 dkv_step (dk then dv, float32): the gradient of one step, computed while the
   accumulator it is added to is still travelling (so that hop is off the critical path).
   cp 1 forward needs nothing; cp 1 backward dq and dkv[0]. total: the sum with alignment. */
#define DCP_RING_SCRATCH_ALIGN 256
typedef struct dcp_ring_scratch {
    dcp_ring_region kv[2];    /* the two KV slots */
    dcp_ring_region dkv[2];   /* the two dK, dV accumulator slots (backward) */
    dcp_ring_region dkv_step; /* one step's dK, dV (backward, cp > 1) */
    dcp_ring_region partial_out, partial_lse, acc_out, acc_lse; /* forward, cp > 1 */
    dcp_ring_region dq;       /* backward */
    size_t total;             /* bytes the caller allocates */
} dcp_ring_scratch;

DCPDEF dcp_status dcp_ring_scratch_layout(const dcp_ring_shape *shape, dcp_ring_pass pass,
                                          dcp_ring_scratch *scratch, dcp_error *error);

/* The tree of a broadcast or a reduction over n members without a collective (point-to-point
   sends on the one communicator: the layer never makes NCCL connect rings and trees for
   collectives there): member `member` of n, the root's index `root`. Members are numbered from
   the root, i = (member - root) mod n, and linked as a binary heap, parent (i - 1) / 2 and
   children 2i + 1, 2i + 2, so that a message reaches every member after at most
   floor(log2 n) hops and each member talks to at most three others. Indices in the answer are
   members (not heap positions); -1 where there is none. */
#define DCP_COMM_TREE_ARITY 2
typedef struct dcp_comm_tree {
    int32_t parent;                        /* -1 at the root */
    int32_t children[DCP_COMM_TREE_ARITY]; /* -1 where none */
    int32_t num_children;                  /* the first num_children entries are set */
    int32_t depth;                         /* hops from the root */
} dcp_comm_tree;

DCPDEF dcp_status dcp_comm_tree_node(int32_t n, int32_t root, int32_t member,
                                     dcp_comm_tree *node, dcp_error *error);

/* Metadata broadcast (plan or rank view to TP ranks and pipeline stages): the root sends the
   length as one uint64 first, then the serialized buffer in chunks of a staging buffer; every
   rank checks the length here (the same answer everywhere, so all ranks go on or all stop and
   none hangs) and the receiver validates the buffer with dcp_plan_deserialize or
   dcp_rank_view_deserialize. Never a sentinel value. */
#define DCP_METADATA_MIN_BYTES 32                   /* preamble and checksum of the format */
#define DCP_METADATA_MAX_BYTES (UINT64_C(1) << 32) /* 4 GiB */
DCPDEF dcp_status dcp_metadata_chunks(uint64_t length, uint64_t chunk_bytes, uint64_t *chunks,
                                      dcp_error *error);

/* =================================================================== head-parallel all-to-all
   Linear-attention layers (Gated DeltaNet, Mamba) run a recurrence and a short causal conv1d
   over whole sequences, which the zigzag split cuts into 2c chunks on c ranks. Around such a
   layer the group switches layouts, as Megatron's tensor_a2a_cp2hp / tensor_a2a_hp2cp do: in
   the head-parallel (HP) layout rank j of the group keeps only channel slice j (channels
   [j C/c, (j+1) C/c) of C) of every row of the group's sequences, but whole sequences, in
   order; cp2hp goes there, hp2cp comes back. A "channel" is any unit of channel_bytes bytes:
   one element of a conv1d input, or one head of head_dim elements.
   - CP layout of rank r: its local buffer [cu_seqlens_padded[n] / cp rows, C channels] of a
     dcp_thd_layout (the zigzag rows of docs/DESIGN.md section 4).
   - HP layout of rank j: [cu_seqlens_padded[n] rows, C / cp channels]; sequence i starts at row
     cu_seqlens_padded[i] and row cu_seqlens_padded[i] + p holds global position p. Its layout
     is the same cu arrays with cp 1 (dcp_a2a_hp_layout): conv1d runs on it unchanged.
   Only valid rows travel: padding rows are never sent, and the receiving side writes them 0.
   A run is a stretch of valid rows of one CP rank that is contiguous in both layouts (a chunk's
   valid prefix; the middle rank's two adjacent chunks make one run), so a rank has at most 2n.
   The message between CP rank r and HP rank j, either way, is r's valid rows in run order
   (message_rows of them), channel slice j. Execution is pack (a segment list), one grouped
   send/recv round, unpack (the other list): dcp_nccl.h on the device, dcp_a2a_segments_copy on
   the host. No allocation; thread-safe. cp 1: both layouts are the same buffer. */

/* A run of valid rows of one CP rank: rows [cp_row, cp_row + rows) of its CP buffer are rows
   [hp_row, hp_row + rows) of the HP layout and rows [message_row, message_row + rows) of each
   message it exchanges. */
typedef struct dcp_a2a_run {
    int64_t cp_row;
    int64_t hp_row;
    int64_t rows; /* >= 1 */
    int64_t message_row;
} dcp_a2a_run;

/* Sizes of the all-to-all of one rank of a group. Segment lists: copies first, then zero fills
   of the padding rows (used only when unpacking). */
typedef struct dcp_a2a_shape {
    int32_t cp, rank;            /* the group's size, the rank in it */
    int32_t channels;            /* C, a multiple of cp */
    size_t channel_bytes;        /* bytes of one channel */
    size_t row_bytes;            /* a CP row: C x channel_bytes */
    size_t slice_bytes;          /* an HP row and a message row: C / cp x channel_bytes */
    int64_t cp_rows;             /* rows of the CP buffer: cu_seqlens_padded[n] / cp */
    int64_t hp_rows;             /* rows of the HP buffer: cu_seqlens_padded[n] */
    int64_t message_rows;        /* valid rows of this rank: rows of every message it sends in
                                    cp2hp (and receives in hp2cp) */
    int64_t group_rows;          /* valid rows of the group, cu_seqlens[n]: what it receives */
    int64_t runs;                /* runs of this rank, <= 2 n */
    int64_t cp_copies, cp_segments; /* CP-side list: cp x runs copies, then zero fills */
    int64_t hp_copies, hp_segments; /* HP-side list: every rank's runs, then zero fills */
    size_t cp_message_bytes;     /* CP-side message buffer: cp x message_rows x slice_bytes,
                                    peer j's message at j x message_rows x slice_bytes */
    size_t hp_message_bytes;     /* HP-side message buffer: group_rows x slice_bytes, rank s's
                                    message after those of ranks < s */
} dcp_a2a_shape;

/* Which buffer a segment list moves between a local buffer and its message buffer:
   DCP_A2A_CP_SIDE the CP buffer (row pitch row_bytes) and the cp messages of this rank's rows;
   DCP_A2A_HP_SIDE the HP buffer (row pitch slice_bytes) and the messages of every rank. cp2hp
   packs the CP side and unpacks the HP side; hp2cp packs the HP side and unpacks the CP side. */
typedef enum dcp_a2a_side { DCP_A2A_CP_SIDE = 0, DCP_A2A_HP_SIDE = 1 } dcp_a2a_side;
typedef enum dcp_a2a_direction {
    DCP_A2A_PACK = 0,  /* local -> message: the copies only */
    DCP_A2A_UNPACK = 1 /* message -> local: the copies, then zeros on the padding rows */
} dcp_a2a_direction;

/* rows consecutive rows: row k of the segment is local + local_offset + k x local pitch and
   message + message_offset + k x slice_bytes (bytes). first_row: rows of the list's segments
   before this one (a launch finds a row's segment by it). A zero fill's message_offset is 0. */
typedef struct dcp_a2a_segment {
    int64_t first_row;
    int64_t rows;
    int64_t local_offset;
    int64_t message_offset;
} dcp_a2a_segment;

/* Checks layout (dcp_thd_layout_validate), rank in [0, cp), channels >= 1 and a multiple of cp
   (otherwise DCP_ERROR_INVALID_ARGUMENT naming both), channel_bytes >= 1, sizes in size_t. */
DCPDEF dcp_status dcp_a2a_shape_get(const dcp_thd_layout *layout, int32_t rank, int32_t channels,
                                    size_t channel_bytes, dcp_a2a_shape *shape,
                                    dcp_error *error);
/* The runs of CP rank `rank`, in sequence order, chunk order: *count receives how many
   (dcp_a2a_shape runs); runs NULL queries, otherwise capacity must hold them. */
DCPDEF dcp_status dcp_a2a_runs(const dcp_thd_layout *layout, int32_t rank, dcp_a2a_run *runs,
                               int64_t capacity, int64_t *count, dcp_error *error);
/* Valid rows of CP rank `rank`: the rows of each of its messages (shape message_rows). */
DCPDEF dcp_status dcp_a2a_message_rows(const dcp_thd_layout *layout, int32_t rank,
                                       int64_t *rows, dcp_error *error);
/* The segment list of one side for rank `rank`: *count receives its length (shape cp_segments
   or hp_segments); segments NULL queries, otherwise capacity must hold it. */
DCPDEF dcp_status dcp_a2a_segments(const dcp_thd_layout *layout, int32_t rank, int32_t channels,
                                   size_t channel_bytes, dcp_a2a_side side,
                                   dcp_a2a_segment *segments, int64_t capacity, int64_t *count,
                                   dcp_error *error);
/* Runs a segment list on host memory (the contract of dcp_cuda_a2a_copy): PACK copies the
   first `copies` segments from local to message; UNPACK copies them back from message to local
   and writes zeros for the rest. local_pitch: the local buffer's row bytes. Local and message
   must not overlap. */
DCPDEF dcp_status dcp_a2a_segments_copy(const dcp_a2a_segment *segments, int64_t count,
                                        int64_t copies, size_t slice_bytes, size_t local_pitch,
                                        dcp_a2a_direction direction, void *local, void *message,
                                        dcp_error *error);
/* The HP layout: *hp = *layout with cp 1 (the same cu arrays: whole sequences). */
DCPDEF dcp_status dcp_a2a_hp_layout(const dcp_thd_layout *layout, dcp_thd_layout *hp,
                                    dcp_error *error);
/* The reference of both directions for the whole group in one process: cp_buffers[r] is rank
   r's CP buffer, hp_buffers[j] rank j's HP buffer (every entry non-NULL, none overlapping).
   Defined by positions, not by runs: HP row cu_seqlens_padded[i] + p of rank j gets channel
   slice j of the CP row holding position p of sequence i (dcp_zigzag_position), padding rows
   0; hp2cp is the inverse, padding rows 0. */
DCPDEF dcp_status dcp_a2a_cp2hp(const dcp_thd_layout *layout, int32_t channels,
                                size_t channel_bytes, const void *const *cp_buffers,
                                void *const *hp_buffers, dcp_error *error);
DCPDEF dcp_status dcp_a2a_hp2cp(const dcp_thd_layout *layout, int32_t channels,
                                size_t channel_bytes, const void *const *hp_buffers,
                                void *const *cp_buffers, dcp_error *error);

/* ================================================================================= MTP roll
   Multi-token prediction shifts input ids, labels, position ids and the loss mask left by one
   within each sequence (Megatron's roll_tensor on packed sequences). For a sequence of valid
   length L: out[p] = in[p + 1] for p < L - 1; the last valid position p = L - 1 gets the
   fill, zero bytes (Megatron rolls the padded sequence and fills its end with 0; with libdcp's
   zero padding that puts 0 at L - 1 too: token 0, label 0, loss mask 0); padding positions
   p >= L keep their input, so padding stays padding (loss mask 0) and nothing crosses into
   the next sequence. Roll d times for MTP depth d.

   Under CP a sequence of padded length P is 2c zigzag chunks of h = P / (2c) rows, rank r
   holding chunks r and 2c-1-r as its two halves (dcp_zigzag_position). Inside a half the shift
   is local; the element that moves into a half's last row is the first row of the next chunk:
   for the first half (chunk r) the first half of rank r+1, except on rank c-1 whose second half
   is chunk c (a local copy); for the second half (chunk 2c-1-r) the second half of rank r-1
   (rank 0's second half is the sequence's end). Only boundaries inside the valid tokens
   (next chunk starts before L) carry data. At c = 1 a sequence is one chunk: no boundary.

   The exchange layout, fixed so that device code needs no lists: `boundaries` [2][n] holds
   the first row of each half of every sequence (DCP_MTP_ROLL_HALVES x num_sequences elements;
   [0][i] goes to rank r-1, [1][i] to rank r+1); `received` [2][n] gets them ([0][i] from rank
   r+1, [1][i] from rank r-1) and the shift reads [h][i] for the last row of half h. One
   message of n elements per neighbour and direction, the same on both sides. */
#define DCP_MTP_ROLL_HALVES 2

/* One boundary element of rank `rank`'s roll. RECV: local row `row` (the last row of half
   `half` of sequence `sequence`) gets the element at row `peer_row` of rank `peer`, through
   slot received[half][sequence]; SEND: local row `row` (a half's first row) goes to rank
   `peer`'s row `peer_row`, through slot boundaries[half][sequence]; COPY: rank c-1's
   first-half end, from its own row `peer_row`. Ranks are ranks in the group. */
typedef struct dcp_mtp_roll_transfer {
    dcp_transfer_kind kind;
    int32_t peer;
    int32_t sequence;
    int32_t half; /* 0 first, 1 second */
    int64_t row;
    int64_t peer_row;
} dcp_mtp_roll_transfer;

/* The boundary elements of rank `rank` of layout's group, by sequence then half: at most
   2 per sequence of each of SEND and RECV/COPY, none at cp 1. *count receives how many; with
   transfers NULL that is all (a size query), else capacity must be >= *count. For a rank view
   the layout is {num_samples, cu_seqlens, cu_seqlens_padded, cp} and rank its rank_in_group.
   No allocation. */
DCPDEF dcp_status dcp_mtp_roll_plan(const dcp_thd_layout *layout, int32_t rank,
                                    dcp_mtp_roll_transfer *transfers, int64_t capacity,
                                    int64_t *count, dcp_error *error);
/* The rank's side of the exchange, on host buffers of element_size bytes per row: gather
   copies the first row of each half of every sequence into boundaries [2][n] (cp > 1; at cp 1
   nothing, boundaries may be NULL). shift writes out (local_rows rows, must not overlap in)
   by the rule above; a half's last row that needs an element of another rank reads
   received[half][sequence], or is left unwritten when received is NULL (the reference then
   fills it from the peer's buffer). dcp_cuda_mtp_roll_gather / _shift are the device kernels
   with the same contracts. */
DCPDEF dcp_status dcp_mtp_roll_gather(const dcp_thd_layout *layout, int32_t rank,
                                      size_t element_size, const void *in, void *boundaries,
                                      dcp_error *error);
DCPDEF dcp_status dcp_mtp_roll_shift(const dcp_thd_layout *layout, int32_t rank,
                                     size_t element_size, const void *in, const void *received,
                                     void *out, dcp_error *error);
/* The CPU reference: the group's c ranks in one process, in[r] and out[r] rank r's local
   buffers (any element size: ids, labels, position ids, loss mask). Every rank's shift, then
   every RECV and COPY of dcp_mtp_roll_plan as a copy from the peer's buffer. No allocation. */
DCPDEF dcp_status dcp_mtp_roll_reference(const dcp_thd_layout *layout, size_t element_size,
                                         const void *const *in, void *const *out,
                                         dcp_error *error);

/* ============================================================== pipeline stages: field sets
   With pipeline parallelism a stage reads only some per-token fields of a sample (seed 001):
   the first stage tokens and position ids, the last labels and loss mask, a stage with MTP
   layers all four, the middle stages none -- they need only the metadata (the rank view,
   which every stage builds from the plan or receives by broadcast). A field set names the
   fields a stage moves and their element sizes; the reroute list (token ranges) is the same
   for every field, so a stage moves each of its fields along it and nothing else. */
typedef enum dcp_field {
    DCP_FIELD_TOKENS = 0,
    DCP_FIELD_POSITION_IDS = 1,
    DCP_FIELD_LABELS = 2,
    DCP_FIELD_LOSS_MASK = 3
} dcp_field;
#define DCP_FIELD_COUNT 4
#define DCP_FIELD_BIT(field) (UINT32_C(1) << (field))
#define DCP_FIELDS_ALL ((UINT32_C(1) << DCP_FIELD_COUNT) - 1)

/* fields: DCP_FIELD_BIT bits; 0 moves nothing (a middle stage). element_size[f] >= 1 for every
   field in the set, ignored for the others. */
typedef struct dcp_field_set {
    uint32_t fields;
    size_t element_size[DCP_FIELD_COUNT];
} dcp_field_set;

/* The fields of a stage (each flag 0 or 1): first or mtp -> tokens and position ids, last or
   mtp -> labels and loss mask; a stage that is both first and last (no pipeline) gets all. */
DCPDEF uint32_t dcp_stage_fields(int32_t first_stage, int32_t last_stage, int32_t mtp_stage);
/* Checks the bits and the element sizes of the set's fields; *row_bytes (may be NULL) gets
   the bytes one token carries: the sum of their element sizes (0 for no field). */
DCPDEF dcp_status dcp_field_set_validate(const dcp_field_set *set, size_t *row_bytes,
                                         dcp_error *error);

/* Bytes a reroute list moves for a field set (a stage's bytes on the wire): sent, received,
   copied locally. 0 for a middle stage. DCP_ERROR_OVERFLOW past uint64. */
typedef struct dcp_reroute_bytes {
    uint64_t send, recv, copy;
} dcp_reroute_bytes;

DCPDEF dcp_status dcp_reroute_field_bytes(const dcp_reroute *reroute, const dcp_field_set *set,
                                          dcp_reroute_bytes *bytes, dcp_error *error);
/* dcp_rank_view_pack / _unpack for every field of the set: sample_data[f] and local[f] are
   field f's per-sample buffers and THD buffer, with set->element_size[f]; entries of fields
   outside the set are not read (may be NULL). A set with no field does nothing. */
DCPDEF dcp_status dcp_rank_view_pack_fields(const dcp_rank_view *view, const dcp_field_set *set,
                                            const void *const *const *sample_data,
                                            void *const *local, dcp_error *error);
DCPDEF dcp_status dcp_rank_view_unpack_fields(const dcp_rank_view *view,
                                              const dcp_field_set *set,
                                              const void *const *local,
                                              void *const *const *sample_data,
                                              dcp_error *error);

#endif /* DCP_NO_DISTRIBUTED */

//@@ implementation
#ifndef DCP_NO_DISTRIBUTED
/* ------------------------------------------------------------------- distributed logic */

/* The ring order's helpers live with the operation contracts (always compiled, after this). */
static dcp_status dcp__check_ring_cp(int32_t cp, dcp_error *error);
static int32_t dcp__ring_step_from(int32_t cp, int32_t rank, int32_t places);

DCPDEF dcp_status dcp_comm_max_cp(const dcp_config *config, int64_t max_length, int32_t *max_cp,
                                  dcp_error *error)
{
    dcp_config c;
    dcp_status status;
    int32_t cp, best;
    double best_seconds;
    if (!max_cp) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "max_cp must not be NULL");
    /* resolved before *max_cp is written: it may be &config->max_cp */
    if ((status = dcp_config_resolve(config, &c, error)) != DCP_OK) return status;
    *max_cp = 0;
    if ((status = dcp__check_length(max_length, error)) != DCP_OK) return status;
    best = dcp__cp_min(&c, max_length);
    if (best == 0)
        return dcp_error_set(error, DCP_ERROR_INFEASIBLE,
                             "max_length %lld > max_cp %d x max_tokens_per_rank %lld after "
                             "padding",
                             (long long)max_length, (int)c.max_cp,
                             (long long)c.max_tokens_per_rank);
    best_seconds = dcp__alone_seconds(&c, max_length, best);
    for (cp = dcp__cp_next(&c, best); cp > 0 && cp <= c.max_cp; cp = dcp__cp_next(&c, cp)) {
        const double seconds = dcp__alone_seconds(&c, max_length, cp);
        if (seconds < best_seconds) best = cp, best_seconds = seconds;
    }
    *max_cp = best;
    return dcp_error_clear(error);
}

static uint64_t dcp__hash_i64(uint64_t hash, int64_t value)
{
    unsigned char bytes[DCP__I64_BYTES];
    int i;
    for (i = 0; i < DCP__I64_BYTES; i++) bytes[i] = (unsigned char)((uint64_t)value >> (8 * i));
    for (i = 0; i < DCP__I64_BYTES; i++) hash = (hash ^ bytes[i]) * DCP__FNV_PRIME;
    return hash;
}

DCPDEF dcp_status dcp_plan_hash(const dcp_plan *plan, uint64_t *hash, dcp_error *error)
{
    const dcp_config *c;
    uint64_t h = DCP__FNV_OFFSET_BASIS;
    int32_t i;
    if (!plan || !hash)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "plan and hash must not be NULL");
    c = &plan->config;
    h = dcp__hash_i64(h, c->ranks), h = dcp__hash_i64(h, c->max_tokens_per_rank);
    h = dcp__hash_i64(h, c->min_cp), h = dcp__hash_i64(h, c->max_cp);
    h = dcp__hash_i64(h, c->microbatch_multiple), h = dcp__hash_i64(h, c->pad_multiple_cp1);
    h = dcp__hash_i64(h, c->pad_multiple);
    h = dcp__hash_i64(h, plan->num_samples), h = dcp__hash_i64(h, plan->num_microbatches);
    h = dcp__hash_i64(h, plan->num_groups);
    if ((plan->num_samples > 0 && (!plan->sample_lengths || !plan->group_samples)) ||
        !plan->microbatch_offsets || (plan->num_groups > 0 && !plan->groups))
        return dcp_error_set(error, DCP_ERROR_INVALID_PLAN, "the plan has NULL arrays");
    for (i = 0; i < plan->num_samples; i++) h = dcp__hash_i64(h, plan->sample_lengths[i]);
    for (i = 0; i <= plan->num_microbatches; i++) h = dcp__hash_i64(h, plan->microbatch_offsets[i]);
    for (i = 0; i < plan->num_groups; i++) {
        const dcp_group *g = &plan->groups[i];
        h = dcp__hash_i64(h, g->first_rank), h = dcp__hash_i64(h, g->cp);
        h = dcp__hash_i64(h, g->sample_offset), h = dcp__hash_i64(h, g->sample_count);
    }
    for (i = 0; i < plan->num_samples; i++) h = dcp__hash_i64(h, plan->group_samples[i]);
    *hash = h;
    return dcp_error_clear(error);
}

static dcp_status dcp__check_pool(int32_t ranks, int32_t rank, dcp_error *error)
{
    if (ranks < 1 || ranks > DCP_MAX_RANKS)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "ranks must be in [1, %d], got %d",
                             DCP_MAX_RANKS, (int)ranks);
    if (rank < 0 || rank >= ranks)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "rank %d outside [0, %d)",
                             (int)rank, (int)ranks);
    return DCP_OK;
}

static dcp_status dcp__check_cp(const char *name, int32_t cp, int32_t max_cp, dcp_error *error)
{
    if (cp < 1 || cp > max_cp)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "%s must be in [1, max_cp %d], got %d", name, (int)max_cp, (int)cp);
    return DCP_OK;
}

static dcp_status dcp__check_max_cp(int32_t ranks, int32_t max_cp, dcp_error *error)
{
    if (max_cp < 1 || max_cp > ranks)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "max_cp must be in [1, ranks %d], got %d", (int)ranks, (int)max_cp);
    return DCP_OK;
}

/* The arguments both choosers take: the pool, max_cp, cp and the output. */
static dcp_status dcp__check_choice(int32_t ranks, int32_t max_cp, int32_t rank, int32_t cp,
                                    const dcp_comm_choice *choice, dcp_error *error)
{
    dcp_status status;
    if (!choice) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "choice must not be NULL");
    if ((status = dcp__check_pool(ranks, rank, error)) != DCP_OK ||
        (status = dcp__check_max_cp(ranks, max_cp, error)) != DCP_OK)
        return status;
    return dcp__check_cp("cp", cp, max_cp, error);
}

/* A group (first_rank, cp) of rank, cp checked already: a range inside the pool holding rank;
   an idle rank is alone (cp 1, first_rank = rank). */
static dcp_status dcp__check_group(int32_t ranks, int32_t rank, int32_t first_rank, int32_t cp,
                                   int32_t idle, dcp_error *error)
{
    if (idle != 0 && idle != 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "idle must be 0 or 1, got %d",
                             (int)idle);
    if (idle && (cp != 1 || first_rank != rank))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "an idle rank %d must have cp 1 and first_rank %d, got cp %d and "
                             "first_rank %d",
                             (int)rank, (int)rank, (int)cp, (int)first_rank);
    if (first_rank < 0 || first_rank > ranks - cp || rank < first_rank || rank - first_rank >= cp)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "group (first_rank %d, cp %d) is not a range of the %d ranks that "
                             "contains rank %d",
                             (int)first_rank, (int)cp, (int)ranks, (int)rank);
    return DCP_OK;
}

static dcp_comm_choice dcp__choice(int32_t rank, int32_t first_rank, int32_t cp, int32_t idle)
{
    dcp_comm_choice c;
    c.cp = cp;
    c.first_rank = first_rank;
    c.rank_in_group = rank - first_rank;
    c.idle = idle;
    return c;
}

DCPDEF dcp_status dcp_comm_choose(int32_t ranks, int32_t max_cp, int32_t rank,
                                  int32_t first_rank, int32_t cp, int32_t idle,
                                  dcp_comm_choice *choice, dcp_error *error)
{
    dcp_status status;
    if (idle == 1 && cp == 0 && first_rank == DCP_NO_GROUP) /* a rank view's idle form */
        cp = 1, first_rank = rank;
    if ((status = dcp__check_choice(ranks, max_cp, rank, cp, choice, error)) != DCP_OK ||
        (status = dcp__check_group(ranks, rank, first_rank, cp, idle, error)) != DCP_OK)
        return status;
    *choice = dcp__choice(rank, first_rank, cp, idle);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_comm_choose_static(int32_t ranks, int32_t max_cp, int32_t rank, int32_t cp,
                                         dcp_comm_choice *choice, dcp_error *error)
{
    int32_t first;
    dcp_status status = dcp__check_choice(ranks, max_cp, rank, cp, choice, error);
    if (status != DCP_OK) return status;
    first = rank / cp * cp;
    if (first > ranks - cp) /* the block is not full: the rank sits this CP size out */
        return dcp_comm_choose(ranks, max_cp, rank, rank, 1, 1, choice, error);
    return dcp_comm_choose(ranks, max_cp, rank, first, cp, 0, choice, error);
}

DCPDEF dcp_status dcp_plan_rank_group(const dcp_plan *plan, int32_t rank, int32_t microbatch,
                                      dcp_rank_group *where, dcp_error *error)
{
    const dcp_group *group;
    dcp_status status;
    int32_t g, i;
    if (!where) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "where must not be NULL");
    if ((status = dcp__locate(plan, rank, microbatch, &g, error)) != DCP_OK) return status;
    where->group = g;
    where->local_rows = 0;
    if (g < 0) {
        where->choice = dcp__choice(rank, rank, 1, 1);
        return dcp_error_clear(error);
    }
    group = &plan->groups[g];
    for (i = 0; i < group->sample_count; i++) /* a valid plan keeps these sums in range */
        where->local_rows +=
            dcp__padded(&plan->config,
                        plan->sample_lengths[plan->group_samples[group->sample_offset + i]],
                        group->cp) / group->cp;
    /* a trusted plan's group is a range of the pool holding rank, of cp <= max_cp */
    where->choice = dcp__choice(rank, group->first_rank, group->cp, 0);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_comm_state_init(dcp_comm_state *state, int32_t ranks, int32_t rank,
                                      int32_t max_cp, dcp_error *error)
{
    dcp_comm_state s;
    dcp_status status;
    if (!state) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "state must not be NULL");
    memset(&s, 0, sizeof s);
    s.ranks = ranks, s.rank = rank, s.max_cp = max_cp;
    if ((status = dcp_comm_choose(ranks, max_cp, rank, rank, 1, 0, &s.current, error)) != DCP_OK)
        return status;
    *state = s;
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_comm_state_apply(dcp_comm_state *state, const dcp_comm_choice *c,
                                       dcp_error *error)
{
    dcp_status status;
    if (!state || !c)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "state and choice must not be NULL");
    if ((status = dcp__check_cp("choice cp", c->cp, state->max_cp, error)) != DCP_OK ||
        (status = dcp__check_group(state->ranks, state->rank, c->first_rank, c->cp, c->idle,
                                   error)) != DCP_OK)
        return status;
    if (c->rank_in_group != state->rank - c->first_rank)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "choice rank_in_group %d, but rank %d of a group from %d is %d",
                             (int)c->rank_in_group, (int)state->rank, (int)c->first_rank,
                             (int)(state->rank - c->first_rank));
    if (state->override_cp != 0 && !c->idle && c->cp != state->override_cp)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "a group of cp %d while an override pins cp %d: end the override, or "
                             "plan with min_cp = max_cp = %d",
                             (int)c->cp, (int)state->override_cp, (int)state->override_cp);
    state->current = *c;
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_comm_state_switch(dcp_comm_state *state, int32_t first_rank, int32_t cp,
                                        int32_t idle, dcp_comm_choice *choice, dcp_error *error)
{
    dcp_comm_choice c;
    dcp_status status;
    if (!state) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "state must not be NULL");
    status = dcp_comm_choose(state->ranks, state->max_cp, state->rank, first_rank, cp, idle, &c,
                             error);
    if (status != DCP_OK || (status = dcp_comm_state_apply(state, &c, error)) != DCP_OK)
        return status;
    if (choice) *choice = c;
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_comm_override_begin(dcp_comm_state *state, int32_t cp,
                                          dcp_comm_scope *scope, dcp_error *error)
{
    dcp_comm_choice c;
    dcp_status status;
    if (!state || !scope)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "state and scope must not be NULL");
    if (scope->depth != 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "scope is already open (depth %d): use a fresh, zeroed scope",
                             (int)scope->depth);
    status = dcp_comm_choose_static(state->ranks, state->max_cp, state->rank, cp, &c, error);
    if (status != DCP_OK) return status;
    scope->saved = state->current;
    scope->saved_override_cp = state->override_cp;
    scope->depth = state->depth + 1;
    state->current = c;
    state->override_cp = cp;
    state->depth = scope->depth;
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_comm_override_end(dcp_comm_state *state, dcp_comm_scope *scope,
                                        dcp_error *error)
{
    int32_t depth;
    if (!state || !scope)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "state and scope must not be NULL");
    depth = scope->depth;
    if (depth < 1 || depth > state->depth)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "override scope is not open (its depth %d, %d open)", (int)depth,
                             (int)state->depth);
    state->current = scope->saved;
    state->override_cp = scope->saved_override_cp;
    scope->depth = 0;
    if (depth != state->depth) {
        int32_t inner = state->depth - depth;
        state->depth = depth - 1;
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "override scope of depth %d ended while %d scope(s) inside it were "
                             "open: they are closed too, the state of depth %d is restored",
                             (int)depth, (int)inner, (int)(depth - 1));
    }
    state->depth = depth - 1;
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_comm_override_run(dcp_comm_state *state, int32_t cp, dcp_comm_scoped_fn fn,
                                        void *user, dcp_error *error)
{
    dcp_comm_scope scope;
    dcp_status status, end_status;
    dcp_error end_error;
    if (!fn) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "fn must not be NULL");
    memset(&scope, 0, sizeof scope);
    if ((status = dcp_comm_override_begin(state, cp, &scope, error)) != DCP_OK) return status;
    status = fn(state, user, error);
    end_status = dcp_comm_override_end(state, &scope, &end_error); /* on every path */
    if (status != DCP_OK) return status; /* fn's error message stays in *error */
    if (end_status != DCP_OK) return dcp_error_set(error, end_status, "%s", end_error.message);
    return dcp_error_clear(error);
}

/* count * element_size as size_t, or 0 with *overflow set. */
static size_t dcp__bytes(int64_t count, size_t element_size, int *overflow)
{
    if (count < 0 || (element_size != 0 && (uint64_t)count > SIZE_MAX / element_size)) {
        *overflow = 1;
        return 0;
    }
    return (size_t)count * element_size;
}

DCPDEF dcp_status dcp_reroute_op_get(const dcp_reroute *reroute, int32_t index,
                                     size_t element_size, dcp_reroute_op *op, dcp_error *error)
{
    const dcp_transfer *t;
    int overflow = 0;
    if (!reroute || !op)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "reroute and op must not be NULL");
    if (index < 0 || index >= reroute->count)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "index %d outside [0, %d)",
                             (int)index, (int)reroute->count);
    if (element_size == 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "element_size must be > 0");
    t = &reroute->transfers[index];
    if (t->source_begin < 0 || t->source_end < t->source_begin || t->destination_row < 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "transfer %d: range [%lld, %lld) to row %lld is not a valid range",
                             (int)index, (long long)t->source_begin, (long long)t->source_end,
                             (long long)t->destination_row);
    op->kind = t->kind;
    op->peer = t->peer;
    op->sample = t->sample;
    op->microbatch = t->microbatch;
    op->source_offset = dcp__bytes(t->source_begin, element_size, &overflow);
    op->destination_offset = dcp__bytes(t->destination_row, element_size, &overflow);
    op->bytes = dcp__bytes(t->source_end - t->source_begin, element_size, &overflow);
    if (!overflow && op->destination_offset > SIZE_MAX - op->bytes) overflow = 1;
    if (overflow)
        return dcp_error_set(error, DCP_ERROR_OVERFLOW,
                             "transfer %d: rows [%lld, %lld) of %zu bytes overflow size_t",
                             (int)index, (long long)t->source_begin, (long long)t->source_end,
                             element_size);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_reroute_check(const dcp_reroute *reroute, int32_t num_samples,
                                    const int64_t *sample_rows, int32_t num_microbatches,
                                    const int64_t *microbatch_rows, dcp_error *error)
{
    int32_t i;
    if (!reroute)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "reroute must not be NULL");
    if (num_samples < 0 || num_microbatches < 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "num_samples %d and num_microbatches %d must be >= 0",
                             (int)num_samples, (int)num_microbatches);
    for (i = 0; i < reroute->count; i++) {
        const dcp_transfer *t = &reroute->transfers[i];
        if (t->kind != DCP_TRANSFER_SEND && t->kind != DCP_TRANSFER_RECV &&
            t->kind != DCP_TRANSFER_COPY)
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "transfer %d: kind %d", (int)i,
                                 (int)t->kind);
        if (t->sample < 0 || t->sample >= num_samples)
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "transfer %d: sample %d outside [0, num_samples %d)", (int)i,
                                 (int)t->sample, (int)num_samples);
        if (t->microbatch < 0 || t->microbatch >= num_microbatches)
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "transfer %d: microbatch %d outside [0, num_microbatches %d)",
                                 (int)i, (int)t->microbatch, (int)num_microbatches);
        if (t->source_begin < 0 || t->source_end < t->source_begin || t->destination_row < 0 ||
            t->destination_row > INT64_MAX - (t->source_end - t->source_begin))
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "transfer %d: range [%lld, %lld) to row %lld is not a valid range",
                                 (int)i, (long long)t->source_begin, (long long)t->source_end,
                                 (long long)t->destination_row);
        if (sample_rows && t->kind != DCP_TRANSFER_RECV && t->source_end > sample_rows[t->sample])
            return dcp_error_set(
                error, DCP_ERROR_INVALID_ARGUMENT,
                "transfer %d: positions up to %lld of sample %d, which has %lld rows", (int)i,
                (long long)t->source_end, (int)t->sample, (long long)sample_rows[t->sample]);
        if (microbatch_rows && t->kind != DCP_TRANSFER_SEND &&
            t->destination_row + (t->source_end - t->source_begin) > microbatch_rows[t->microbatch])
            return dcp_error_set(
                error, DCP_ERROR_INVALID_ARGUMENT,
                "transfer %d: rows [%lld, %lld) of microbatch %d, which has %lld rows", (int)i,
                (long long)t->destination_row,
                (long long)(t->destination_row + t->source_end - t->source_begin),
                (int)t->microbatch, (long long)microbatch_rows[t->microbatch]);
    }
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_reroute_rows_written(const dcp_reroute *reroute, int32_t num_microbatches,
                                           int64_t *rows, dcp_error *error)
{
    dcp_status status;
    int32_t i;
    if (num_microbatches > 0 && !rows)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "rows must not be NULL for %d microbatches", (int)num_microbatches);
    /* every transfer valid and in range; samples are not this function's business */
    status = dcp_reroute_check(reroute, INT32_MAX, NULL, num_microbatches, NULL, error);
    if (status != DCP_OK) return status;
    for (i = 0; i < num_microbatches; i++) rows[i] = 0;
    for (i = 0; i < reroute->count; i++) {
        const dcp_transfer *t = &reroute->transfers[i];
        const int64_t end = t->destination_row + (t->source_end - t->source_begin);
        if (t->kind != DCP_TRANSFER_SEND && end > rows[t->microbatch])
            rows[t->microbatch] = end; /* the bound dcp_reroute_check applies, empty ones too */
    }
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_ring_exchange_plan(int32_t cp, int32_t rank, int32_t step,
                                         dcp_ring_exchange *exchange, dcp_error *error)
{
    dcp_ring_exchange x;
    const int last = step == cp - 1;
    dcp_status status;
    if (!exchange)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "exchange must not be NULL");
    if ((status = dcp__check_ring_cp(cp, error)) != DCP_OK) return status;
    if (rank < 0 || rank >= cp)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "rank must be in [0, cp %d), got %d", (int)cp, (int)rank);
    if (step < 0 || step >= cp)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "step must be in [0, cp %d), got %d", (int)cp, (int)step);
    /* neighbours and sources in the ring order (dcp_ring_order): r +- 1 or r +- 2 */
    x.next = dcp__ring_step_from(cp, rank, 1);
    x.prev = dcp__ring_step_from(cp, rank, -1);
    x.kv_source = dcp__ring_step_from(cp, rank, -step);
    /* KV of step s >= 1 sits in slot (s - 1) % 2; step s receives step s + 1's into s % 2,
       which step s - 1 read: the receive waits for that step's compute. */
    x.kv_slot = step == 0 ? -1 : (step - 1) % 2;
    x.kv_send = !last;
    x.kv_recv_slot = last ? -1 : step % 2;
    x.kv_recv_source = last ? -1 : dcp__ring_step_from(cp, rank, -step - 1);
    /* dK, dV of the step's KV add into slot s % 2 and leave for next; s + 1's arrive in the
       other slot; with cp 1 the only accumulator never moves. */
    x.dkv_slot = step % 2;
    x.dkv_zero = step == 0;
    x.dkv_send = cp > 1;
    x.dkv_recv_slot = cp > 1 ? (step + 1) % 2 : -1;
    x.dkv_recv_source = cp > 1 ? dcp__ring_step_from(cp, rank, -step - 1) : -1;
    x.dkv_home_slot = !last ? -1 : cp > 1 ? x.dkv_recv_slot : x.dkv_slot;
    *exchange = x;
    return dcp_error_clear(error);
}

/* Appends a region of count elements of element_size bytes at the next aligned offset. */
static void dcp__region(size_t *end, uint64_t count, size_t element_size, dcp_ring_region *region,
                        int *overflow)
{
    size_t offset = (*end + DCP_RING_SCRATCH_ALIGN - 1) / DCP_RING_SCRATCH_ALIGN *
                    DCP_RING_SCRATCH_ALIGN;
    region->offset = 0;
    region->bytes = 0;
    if (count == 0 || *overflow) return;
    if (*end > SIZE_MAX - DCP_RING_SCRATCH_ALIGN || count > SIZE_MAX / element_size ||
        offset > SIZE_MAX - count * element_size) {
        *overflow = 1;
        return;
    }
    region->offset = offset;
    region->bytes = (size_t)count * element_size;
    *end = offset + region->bytes;
}

/* Shape bounds that keep every byte count in uint64 and size_t: 2^40 rows x 2^20 values a
   row x 8 bytes an element is 2^63. */
#define DCP__RING_MAX_LOCAL_ROWS (UINT64_C(1) << 40)
#define DCP__RING_MAX_ROW_VALUES (UINT64_C(1) << 20) /* num_heads x head_dim */
#define DCP__RING_MAX_ELEMENT_SIZE 8                  /* a double */

DCPDEF dcp_status dcp_ring_scratch_layout(const dcp_ring_shape *shape, dcp_ring_pass pass,
                                          dcp_ring_scratch *scratch, dcp_error *error)
{
    dcp_ring_scratch s;
    uint64_t q_values, kv_values, lse_values;
    size_t end = 0;
    int overflow = 0, slots;
    if (!shape || !scratch)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "shape and scratch must not be NULL");
    if (shape->cp < 1 || shape->cp > DCP_MAX_RANKS || shape->local_rows < 0 ||
        shape->num_heads < 1 || shape->num_kv_heads < 1 ||
        shape->num_heads % shape->num_kv_heads != 0 || shape->head_dim < 1 ||
        shape->element_size < 1 ||
        shape->element_size > DCP__RING_MAX_ELEMENT_SIZE)
        return dcp_error_set(
            error, DCP_ERROR_INVALID_ARGUMENT,
            "ring shape: cp %d, local_rows %lld, heads %d, kv heads %d, head_dim %d, "
            "element_size %zu",
            (int)shape->cp, (long long)shape->local_rows, (int)shape->num_heads,
            (int)shape->num_kv_heads, (int)shape->head_dim, shape->element_size);
    if (pass != DCP_RING_FORWARD && pass != DCP_RING_BACKWARD)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "pass must be forward or backward");
    if ((uint64_t)shape->local_rows > DCP__RING_MAX_LOCAL_ROWS ||
        (uint64_t)shape->num_heads * (uint64_t)shape->head_dim > DCP__RING_MAX_ROW_VALUES)
        return dcp_error_set(error, DCP_ERROR_OVERFLOW, "ring shape of %lld rows overflows",
                             (long long)shape->local_rows);
    lse_values = (uint64_t)shape->local_rows * (uint64_t)shape->num_heads;
    q_values = lse_values * (uint64_t)shape->head_dim;
    kv_values = (uint64_t)shape->local_rows * (uint64_t)shape->num_kv_heads *
                (uint64_t)shape->head_dim;
    memset(&s, 0, sizeof s);
    /* KV slots: none for cp 1, one for cp 2 (only step 1 reads a received KV), else two. */
    slots = shape->cp == 1 ? 0 : shape->cp == 2 ? 1 : 2;
    if (slots >= 1) dcp__region(&end, 2 * kv_values, shape->element_size, &s.kv[0], &overflow);
    if (slots >= 2) dcp__region(&end, 2 * kv_values, shape->element_size, &s.kv[1], &overflow);
    if (pass == DCP_RING_FORWARD && shape->cp > 1) {
        dcp__region(&end, q_values, sizeof(float), &s.partial_out, &overflow);
        dcp__region(&end, lse_values, sizeof(float), &s.partial_lse, &overflow);
        dcp__region(&end, q_values, sizeof(float), &s.acc_out, &overflow);
        dcp__region(&end, lse_values, sizeof(float), &s.acc_lse, &overflow);
    }
    if (pass == DCP_RING_BACKWARD) {
        dcp__region(&end, q_values, sizeof(float), &s.dq, &overflow);
        dcp__region(&end, 2 * kv_values, sizeof(float), &s.dkv[0], &overflow);
        if (shape->cp > 1) dcp__region(&end, 2 * kv_values, sizeof(float), &s.dkv[1], &overflow);
        if (shape->cp > 1)
            dcp__region(&end, 2 * kv_values, sizeof(float), &s.dkv_step, &overflow);
    }
    if (overflow)
        return dcp_error_set(error, DCP_ERROR_OVERFLOW,
                             "ring scratch of %lld rows overflows size_t",
                             (long long)shape->local_rows);
    s.total = end;
    *scratch = s;
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_comm_tree_node(int32_t n, int32_t root, int32_t member,
                                     dcp_comm_tree *node, dcp_error *error)
{
    dcp_comm_tree t;
    int64_t i, c;
    int32_t k;
    if (!node) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "node must not be NULL");
    if (n < 1 || n > DCP_MAX_RANKS)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "n must be in [1, %d], got %d",
                             DCP_MAX_RANKS, (int)n);
    if (root < 0 || root >= n || member < 0 || member >= n)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "root %d and member %d must be in [0, n %d)", (int)root, (int)member,
                             (int)n);
    i = ((int64_t)member - root + n) % n; /* heap position: the root is 0 */
    t.parent = i == 0 ? -1 : (int32_t)(((i - 1) / DCP_COMM_TREE_ARITY + root) % n);
    t.num_children = 0;
    for (k = 0; k < DCP_COMM_TREE_ARITY; k++) {
        c = DCP_COMM_TREE_ARITY * i + 1 + k;
        t.children[k] = c < n ? (int32_t)((c + root) % n) : -1;
        t.num_children += c < n;
    }
    for (t.depth = 0; i > 0; i = (i - 1) / DCP_COMM_TREE_ARITY) t.depth++;
    *node = t;
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_metadata_chunks(uint64_t length, uint64_t chunk_bytes, uint64_t *chunks,
                                      dcp_error *error)
{
    if (!chunks) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "chunks must not be NULL");
    *chunks = 0;
    if (chunk_bytes == 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "chunk_bytes must be > 0");
    if (length < DCP_METADATA_MIN_BYTES || length > DCP_METADATA_MAX_BYTES)
        return dcp_error_set(error, DCP_ERROR_CORRUPT_DATA,
                             "metadata length %llu outside [%d, %llu]: not a libdcp buffer",
                             (unsigned long long)length, DCP_METADATA_MIN_BYTES,
                             (unsigned long long)DCP_METADATA_MAX_BYTES);
    *chunks = (length + chunk_bytes - 1) / chunk_bytes;
    return dcp_error_clear(error);
}

/* ------------------------------------------------------------ head-parallel all-to-all
   Runs come from dcp__sample_runs (the zigzag rows of one sequence on one rank), keeping each
   run's valid prefix; everything else (messages, segments, the copies) is laid out from them
   in one fixed order: peers, then sequences, then chunks. */

/* The largest byte count or offset of the all-to-all: an int64_t offset and a size_t size. */
#define DCP__A2A_BYTE_LIMIT ((uint64_t)INT64_MAX < (uint64_t)SIZE_MAX ? (uint64_t)INT64_MAX \
                                                                    : (uint64_t)SIZE_MAX)

/* The layout and the rank in it: the first checks of the all-to-all and the MTP roll. */
static dcp_status dcp__check_layout_rank(const dcp_thd_layout *layout, int32_t rank,
                                         int64_t *rows, dcp_error *error)
{
    dcp_status status = dcp_thd_layout_validate(layout, rows, error);
    if (status != DCP_OK) return status;
    return dcp_check_rank("rank", rank, layout->cp, error);
}

/* The runs of rank (written when out is not NULL), their count and their rows. */
static void dcp__a2a_collect(const dcp_thd_layout *l, int32_t rank, dcp_a2a_run *out,
                             int64_t *count, int64_t *rows)
{
    int64_t runs = 0, message = 0;
    int32_t i;
    for (i = 0; i < l->num_sequences; i++) {
        const int64_t start = l->cu_seqlens_padded[i];
        dcp__run r[2];
        int m = dcp__sample_runs((int64_t)l->cu_seqlens[i + 1] - l->cu_seqlens[i],
                                 (int64_t)l->cu_seqlens_padded[i + 1] - start, l->cp, rank, r);
        int k;
        for (k = 0; k < m; k++) {
            if (r[k].valid == 0) continue; /* a chunk of padding only: nothing travels */
            if (out) {
                out[runs].cp_row = start / l->cp + r[k].row;
                out[runs].hp_row = start + r[k].position;
                out[runs].rows = r[k].valid;
                out[runs].message_row = message;
            }
            runs++;
            message += r[k].valid;
        }
    }
    *count = runs;
    *rows = message;
}

DCPDEF dcp_status dcp_a2a_shape_get(const dcp_thd_layout *layout, int32_t rank, int32_t channels,
                                    size_t channel_bytes, dcp_a2a_shape *shape,
                                    dcp_error *error)
{
    dcp_a2a_shape s;
    int64_t padding_runs = 0;
    int32_t i;
    dcp_status status;
    if (!shape) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "shape must not be NULL");
    if ((status = dcp__check_layout_rank(layout, rank, NULL, error)) != DCP_OK) return status;
    if (channels < 1 || channels % layout->cp != 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "channels %d must be >= 1 and divisible by cp %d (each rank keeps "
                             "channels / cp of them)",
                             (int)channels, (int)layout->cp);
    if (channel_bytes == 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "channel_bytes must be >= 1");
    memset(&s, 0, sizeof s);
    s.cp = layout->cp, s.rank = rank, s.channels = channels, s.channel_bytes = channel_bytes;
    s.hp_rows = layout->cu_seqlens_padded[layout->num_sequences];
    s.cp_rows = s.hp_rows / layout->cp;
    s.group_rows = layout->cu_seqlens[layout->num_sequences];
    /* the CP buffer and the HP buffer both hold hp_rows x slice_bytes: one bound covers every
       byte offset of the lists (int64_t) and every buffer size (size_t) */
    if ((uint64_t)channel_bytes > DCP__A2A_BYTE_LIMIT / (uint64_t)channels ||
        (s.hp_rows > 0 && (uint64_t)channel_bytes * (uint64_t)(channels / layout->cp) >
                              DCP__A2A_BYTE_LIMIT / (uint64_t)s.hp_rows))
        return dcp_error_set(error, DCP_ERROR_OVERFLOW,
                             "%lld rows of %d channels of %zu bytes overflow the byte offsets",
                             (long long)s.hp_rows, (int)channels, channel_bytes);
    s.row_bytes = (size_t)channels * channel_bytes;
    s.slice_bytes = s.row_bytes / (size_t)layout->cp;
    dcp__a2a_collect(layout, rank, NULL, &s.runs, &s.message_rows);
    for (i = 0; i < layout->num_sequences; i++) {
        dcp__run r[2];
        int m = dcp__sample_runs((int64_t)layout->cu_seqlens[i + 1] - layout->cu_seqlens[i],
                                 (int64_t)layout->cu_seqlens_padded[i + 1] -
                                     layout->cu_seqlens_padded[i],
                                 layout->cp, rank, r);
        int k;
        for (k = 0; k < m; k++) padding_runs += r[k].rows > r[k].valid;
    }
    s.cp_copies = layout->cp * s.runs;
    s.cp_segments = s.cp_copies + layout->cp * padding_runs;
    for (i = 0; i < layout->cp; i++) {
        int64_t runs, rows;
        dcp__a2a_collect(layout, i, NULL, &runs, &rows);
        s.hp_copies += runs;
    }
    s.hp_segments = s.hp_copies;
    for (i = 0; i < layout->num_sequences; i++)
        s.hp_segments += layout->cu_seqlens_padded[i + 1] - layout->cu_seqlens_padded[i] >
                         layout->cu_seqlens[i + 1] - layout->cu_seqlens[i];
    s.cp_message_bytes = (size_t)layout->cp * (size_t)s.message_rows * s.slice_bytes;
    s.hp_message_bytes = (size_t)s.group_rows * s.slice_bytes;
    *shape = s;
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_a2a_runs(const dcp_thd_layout *layout, int32_t rank, dcp_a2a_run *runs,
                               int64_t capacity, int64_t *count, dcp_error *error)
{
    int64_t needed, rows;
    dcp_status status;
    if (!count) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "count must not be NULL");
    if ((status = dcp__check_layout_rank(layout, rank, NULL, error)) != DCP_OK) return status;
    dcp__a2a_collect(layout, rank, NULL, &needed, &rows);
    *count = needed;
    if (runs && capacity < needed)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "runs capacity %lld < %lld runs of rank %d", (long long)capacity,
                             (long long)needed, (int)rank);
    if (runs) dcp__a2a_collect(layout, rank, runs, &needed, &rows);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_a2a_message_rows(const dcp_thd_layout *layout, int32_t rank,
                                       int64_t *rows, dcp_error *error)
{
    int64_t runs;
    dcp_status status;
    if (!rows) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "rows must not be NULL");
    if ((status = dcp__check_layout_rank(layout, rank, NULL, error)) != DCP_OK) return status;
    dcp__a2a_collect(layout, rank, NULL, &runs, rows);
    return dcp_error_clear(error);
}

/* Appends one segment (counts only when out is NULL). */
static void dcp__a2a_emit(dcp_a2a_segment *out, int64_t *count, int64_t *first, int64_t rows,
                          int64_t local_offset, int64_t message_offset)
{
    if (out) {
        out[*count].first_row = *first;
        out[*count].rows = rows;
        out[*count].local_offset = local_offset;
        out[*count].message_offset = message_offset;
    }
    ++*count;
    *first += rows;
}

/* CP side: peer j's message is every run of this rank, channel slice j; then the padding rows
   of every slice. */
static void dcp__a2a_cp_side(const dcp_thd_layout *l, const dcp_a2a_shape *s,
                             dcp_a2a_segment *out, int64_t *count)
{
    const int64_t row = (int64_t)s->row_bytes, slice = (int64_t)s->slice_bytes;
    int64_t first = 0;
    int32_t j, i, pass;
    *count = 0;
    for (pass = 0; pass < 2; pass++) /* 0: copies, 1: zero fills */
        for (j = 0; j < s->cp; j++) {
            int64_t message = j * s->message_rows;
            for (i = 0; i < l->num_sequences; i++) {
                const int64_t base = l->cu_seqlens_padded[i] / l->cp;
                dcp__run r[2];
                int m = dcp__sample_runs(
                    (int64_t)l->cu_seqlens[i + 1] - l->cu_seqlens[i],
                    (int64_t)l->cu_seqlens_padded[i + 1] - l->cu_seqlens_padded[i], l->cp,
                    s->rank, r);
                int k;
                for (k = 0; k < m; k++) {
                    if (pass == 0 && r[k].valid > 0) {
                        dcp__a2a_emit(out, count, &first, r[k].valid,
                                      (base + r[k].row) * row + j * slice, message * slice);
                        message += r[k].valid;
                    }
                    if (pass == 1 && r[k].rows > r[k].valid)
                        dcp__a2a_emit(out, count, &first, r[k].rows - r[k].valid,
                                      (base + r[k].row + r[k].valid) * row + j * slice, 0);
                }
            }
        }
}

/* HP side: the messages of ranks 0, 1, ..., cp - 1 one after the other, each its runs in
   order; then each sequence's padding tail. The same list on every rank of the group. */
static void dcp__a2a_hp_side(const dcp_thd_layout *l, const dcp_a2a_shape *s,
                             dcp_a2a_segment *out, int64_t *count)
{
    const int64_t slice = (int64_t)s->slice_bytes;
    int64_t first = 0, message = 0;
    int32_t source, i;
    *count = 0;
    for (source = 0; source < s->cp; source++)
        for (i = 0; i < l->num_sequences; i++) {
            const int64_t start = l->cu_seqlens_padded[i];
            dcp__run r[2];
            int m = dcp__sample_runs((int64_t)l->cu_seqlens[i + 1] - l->cu_seqlens[i],
                                     (int64_t)l->cu_seqlens_padded[i + 1] - start, l->cp,
                                     source, r);
            int k;
            for (k = 0; k < m; k++) {
                if (r[k].valid == 0) continue;
                dcp__a2a_emit(out, count, &first, r[k].valid, (start + r[k].position) * slice,
                              message * slice);
                message += r[k].valid;
            }
        }
    for (i = 0; i < l->num_sequences; i++) {
        const int64_t valid = (int64_t)l->cu_seqlens[i + 1] - l->cu_seqlens[i];
        const int64_t padded = (int64_t)l->cu_seqlens_padded[i + 1] - l->cu_seqlens_padded[i];
        if (padded > valid)
            dcp__a2a_emit(out, count, &first, padded - valid,
                          ((int64_t)l->cu_seqlens_padded[i] + valid) * slice, 0);
    }
}

DCPDEF dcp_status dcp_a2a_segments(const dcp_thd_layout *layout, int32_t rank, int32_t channels,
                                   size_t channel_bytes, dcp_a2a_side side,
                                   dcp_a2a_segment *segments, int64_t capacity, int64_t *count,
                                   dcp_error *error)
{
    dcp_a2a_shape s;
    int64_t needed, written;
    dcp_status status;
    if (!count) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "count must not be NULL");
    if (side != DCP_A2A_CP_SIDE && side != DCP_A2A_HP_SIDE)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "side must be 0 or 1, got %d",
                             (int)side);
    status = dcp_a2a_shape_get(layout, rank, channels, channel_bytes, &s, error);
    if (status != DCP_OK) return status;
    needed = side == DCP_A2A_CP_SIDE ? s.cp_segments : s.hp_segments;
    *count = needed;
    if (!segments) return dcp_error_clear(error);
    if (capacity < needed)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "segments capacity %lld < %lld segments of the %s side",
                             (long long)capacity, (long long)needed,
                             side == DCP_A2A_CP_SIDE ? "CP" : "HP");
    if (side == DCP_A2A_CP_SIDE) dcp__a2a_cp_side(layout, &s, segments, &written);
    else dcp__a2a_hp_side(layout, &s, segments, &written);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_a2a_segments_copy(const dcp_a2a_segment *segments, int64_t count,
                                        int64_t copies, size_t slice_bytes, size_t local_pitch,
                                        dcp_a2a_direction direction, void *local, void *message,
                                        dcp_error *error)
{
    unsigned char *l = (unsigned char *)local, *m = (unsigned char *)message;
    int64_t i, k;
    if (count < 0 || copies < 0 || copies > count || (count > 0 && (!segments || !local)) ||
        (copies > 0 && !message))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "segments: count %lld, copies %lld (need 0 <= copies <= count and "
                             "non-NULL segments, local and message)",
                             (long long)count, (long long)copies);
    if (slice_bytes == 0 || local_pitch < slice_bytes)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "slice_bytes %zu must be >= 1 and <= local_pitch %zu", slice_bytes,
                             local_pitch);
    if (direction != DCP_A2A_PACK && direction != DCP_A2A_UNPACK)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "direction must be 0 or 1, got %d",
                             (int)direction);
    for (i = 0; i < (direction == DCP_A2A_PACK ? copies : count); i++) {
        const dcp_a2a_segment *s = &segments[i];
        for (k = 0; k < s->rows; k++) {
            unsigned char *lrow = l + s->local_offset + (size_t)k * local_pitch;
            unsigned char *mrow = m + s->message_offset + (size_t)k * slice_bytes;
            if (i >= copies) memset(lrow, 0, slice_bytes);
            else if (direction == DCP_A2A_PACK) memcpy(mrow, lrow, slice_bytes);
            else memcpy(lrow, mrow, slice_bytes);
        }
    }
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_a2a_hp_layout(const dcp_thd_layout *layout, dcp_thd_layout *hp,
                                    dcp_error *error)
{
    dcp_status status;
    if (!hp) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "hp must not be NULL");
    if ((status = dcp_thd_layout_validate(layout, NULL, error)) != DCP_OK) return status;
    *hp = *layout;
    hp->cp = 1;
    return dcp_error_clear(error);
}

/* Arguments of the references: a valid shape and cp non-NULL buffers on each side. */
static dcp_status dcp__a2a_reference_args(const dcp_thd_layout *layout, int32_t channels,
                                          size_t channel_bytes, const void *const *cp_buffers,
                                          const void *const *hp_buffers, dcp_a2a_shape *shape,
                                          dcp_error *error)
{
    dcp_status status = dcp_a2a_shape_get(layout, 0, channels, channel_bytes, shape, error);
    if (status != DCP_OK) return status;
    if ((status = dcp_check_rank_buffers("cp_buffers", cp_buffers, layout->cp, error)) != DCP_OK)
        return status;
    return dcp_check_rank_buffers("hp_buffers", hp_buffers, layout->cp, error);
}

/* Both references: every local row of every CP rank by its global position. */
static void dcp__a2a_reference(const dcp_thd_layout *l, const dcp_a2a_shape *s, int to_hp,
                               unsigned char *const *cp, unsigned char *const *hp)
{
    int32_t r, j, i;
    for (i = 0; i < l->num_sequences; i++) {
        const int64_t start = l->cu_seqlens_padded[i];
        const int64_t valid = (int64_t)l->cu_seqlens[i + 1] - l->cu_seqlens[i];
        const int64_t padded = (int64_t)l->cu_seqlens_padded[i + 1] - start;
        int64_t local;
        for (r = 0; r < l->cp; r++)
            for (local = 0; local < padded / l->cp; local++) {
                const int64_t position = dcp_zigzag_position(padded, l->cp, r, local);
                unsigned char *cp_row = cp[r] + (size_t)(start / l->cp + local) * s->row_bytes;
                for (j = 0; j < l->cp; j++) {
                    unsigned char *hp_row = hp[j] + (size_t)(start + position) * s->slice_bytes;
                    unsigned char *slice = cp_row + (size_t)j * s->slice_bytes;
                    if (position >= valid) /* padding: written as 0 on the receiving side */
                        memset(to_hp ? hp_row : slice, 0, s->slice_bytes);
                    else if (to_hp) memcpy(hp_row, slice, s->slice_bytes);
                    else memcpy(slice, hp_row, s->slice_bytes);
                }
            }
    }
}

DCPDEF dcp_status dcp_a2a_cp2hp(const dcp_thd_layout *layout, int32_t channels,
                                size_t channel_bytes, const void *const *cp_buffers,
                                void *const *hp_buffers, dcp_error *error)
{
    dcp_a2a_shape s;
    dcp_status status = dcp__a2a_reference_args(layout, channels, channel_bytes, cp_buffers,
                                                (const void *const *)hp_buffers, &s, error);
    if (status != DCP_OK) return status;
    dcp__a2a_reference(layout, &s, 1, (unsigned char *const *)cp_buffers,
                       (unsigned char *const *)hp_buffers);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_a2a_hp2cp(const dcp_thd_layout *layout, int32_t channels,
                                size_t channel_bytes, const void *const *hp_buffers,
                                void *const *cp_buffers, dcp_error *error)
{
    dcp_a2a_shape s;
    dcp_status status = dcp__a2a_reference_args(layout, channels, channel_bytes,
                                                (const void *const *)cp_buffers, hp_buffers, &s,
                                                error);
    if (status != DCP_OK) return status;
    dcp__a2a_reference(layout, &s, 0, (unsigned char *const *)cp_buffers,
                       (unsigned char *const *)hp_buffers);
    return dcp_error_clear(error);
}

/* ------------------------------------------------------------------------------ MTP roll */

/* One sequence of a validated layout as rank `rank` holds it: its first local row, the rows of
   one half (a chunk; the whole sequence at cp 1), its valid length, and its halves. */
typedef struct dcp__roll_seq {
    int64_t offset;
    int64_t half_rows;
    int64_t valid;
    int halves;
} dcp__roll_seq;

static dcp__roll_seq dcp__roll_sequence(const dcp_thd_layout *layout, int32_t i)
{
    dcp__roll_seq s;
    const int64_t padded = (int64_t)layout->cu_seqlens_padded[i + 1] -
                           layout->cu_seqlens_padded[i];
    s.halves = layout->cp > 1 ? DCP_MTP_ROLL_HALVES : 1;
    s.offset = layout->cu_seqlens_padded[i] / layout->cp;
    s.half_rows = padded / ((int64_t)layout->cp * s.halves);
    s.valid = (int64_t)layout->cu_seqlens[i + 1] - layout->cu_seqlens[i];
    return s;
}

/* The chunk (0 .. 2cp-1) that half `half` of rank `rank` holds. */
static int64_t dcp__roll_chunk(int32_t cp, int32_t rank, int half)
{
    return half == 0 ? rank : 2 * (int64_t)cp - 1 - rank;
}

/* Where the element for the last row of half `half` of sequence i on rank `rank` comes from:
   the first row of the next chunk. Returns 0 when nothing moves there (cp 1, the sequence's
   last chunk, or a next chunk that starts at or past the valid length); else fills a RECV
   (COPY when the rank holds the next chunk itself) with the peer's row. */
static int dcp__roll_incoming(const dcp_thd_layout *layout, int32_t rank, int32_t i, int half,
                              dcp_mtp_roll_transfer *t)
{
    const dcp__roll_seq s = dcp__roll_sequence(layout, i);
    const int32_t cp = layout->cp;
    const int64_t next = dcp__roll_chunk(cp, rank, half) + 1;
    int32_t peer;
    int peer_half;
    if (cp == 1 || next >= 2 * (int64_t)cp || next * s.half_rows >= s.valid) return 0;
    peer = (int32_t)(next < cp ? next : 2 * (int64_t)cp - 1 - next);
    peer_half = next < cp ? 0 : 1;
    t->kind = peer == rank ? DCP_TRANSFER_COPY : DCP_TRANSFER_RECV;
    t->peer = peer;
    t->sequence = i;
    t->half = half;
    t->row = s.offset + (half + 1) * s.half_rows - 1;
    t->peer_row = s.offset + peer_half * s.half_rows;
    return 1;
}

/* The SEND that pairs with a neighbour's RECV of half `half` (a half's first row travels to
   the neighbour on the same side: half 0 to rank - 1, half 1 to rank + 1). */
static int dcp__roll_outgoing(const dcp_thd_layout *layout, int32_t rank, int32_t i, int half,
                              dcp_mtp_roll_transfer *t)
{
    const int32_t peer = half == 0 ? rank - 1 : rank + 1;
    dcp_mtp_roll_transfer in;
    if (peer < 0 || peer >= layout->cp || !dcp__roll_incoming(layout, peer, i, half, &in) ||
        in.kind != DCP_TRANSFER_RECV || in.peer != rank)
        return 0;
    t->kind = DCP_TRANSFER_SEND;
    t->peer = peer;
    t->sequence = i;
    t->half = half;
    t->row = in.peer_row;
    t->peer_row = in.row;
    return 1;
}

/* Lists the rank's transfers into transfers[0, capacity) (NULL: only counts); their count. */
static int64_t dcp__roll_list(const dcp_thd_layout *layout, int32_t rank,
                              dcp_mtp_roll_transfer *transfers, int64_t capacity)
{
    int64_t n = 0;
    int32_t i;
    int half;
    for (i = 0; i < layout->num_sequences; i++)
        for (half = 0; half < DCP_MTP_ROLL_HALVES; half++) {
            dcp_mtp_roll_transfer t[2];
            int k, found = dcp__roll_incoming(layout, rank, i, half, &t[0]);
            found += dcp__roll_outgoing(layout, rank, i, half, &t[found]);
            for (k = 0; k < found; k++, n++)
                if (transfers && n < capacity) transfers[n] = t[k];
        }
    return n;
}

DCPDEF dcp_status dcp_mtp_roll_plan(const dcp_thd_layout *layout, int32_t rank,
                                    dcp_mtp_roll_transfer *transfers, int64_t capacity,
                                    int64_t *count, dcp_error *error)
{
    dcp_status status;
    if (!count) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "count must not be NULL");
    *count = 0;
    if ((status = dcp__check_layout_rank(layout, rank, NULL, error)) != DCP_OK) return status;
    *count = dcp__roll_list(layout, rank, transfers, capacity);
    if (transfers && capacity < *count)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "transfers capacity %lld < the %lld boundary transfers of rank %d",
                             (long long)capacity, (long long)*count, (int)rank);
    return dcp_error_clear(error);
}

/* The checks every roll function makes: layout, rank, element size, and that `rows` rows and
   the [2][n] boundary slots are addressable. */
static dcp_status dcp__roll_check(const dcp_thd_layout *layout, int32_t rank,
                                  size_t element_size, int64_t *rows, dcp_error *error)
{
    dcp_status status;
    if ((status = dcp__check_layout_rank(layout, rank, rows, error)) != DCP_OK) return status;
    if (element_size == 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "element_size must be > 0");
    if ((uint64_t)*rows > SIZE_MAX / element_size ||
        (uint64_t)layout->num_sequences * DCP_MTP_ROLL_HALVES > SIZE_MAX / element_size)
        return dcp_error_set(error, DCP_ERROR_OVERFLOW,
                             "%lld rows or %d sequences of %zu bytes overflow size_t",
                             (long long)*rows, (int)layout->num_sequences, element_size);
    return DCP_OK;
}

/* The first and last row of each half of each sequence, into the [2][n] boundary slots. */
static void dcp__roll_gather_rows(const dcp_thd_layout *layout, size_t size,
                                  const unsigned char *in, unsigned char *boundaries)
{
    int32_t i;
    int half;
    for (half = 0; half < DCP_MTP_ROLL_HALVES; half++)
        for (i = 0; i < layout->num_sequences; i++) {
            const dcp__roll_seq s = dcp__roll_sequence(layout, i);
            memcpy(boundaries + ((size_t)half * (size_t)layout->num_sequences + (size_t)i) * size,
                   in + (size_t)(s.offset + half * s.half_rows) * size, size);
        }
}

DCPDEF dcp_status dcp_mtp_roll_gather(const dcp_thd_layout *layout, int32_t rank,
                                      size_t element_size, const void *in, void *boundaries,
                                      dcp_error *error)
{
    int64_t rows;
    const dcp_status status = dcp__roll_check(layout, rank, element_size, &rows, error);
    if (status != DCP_OK) return status;
    if (layout->cp == 1 || layout->num_sequences == 0) return dcp_error_clear(error);
    if (!in || !boundaries)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "in and boundaries must not be NULL");
    dcp__roll_gather_rows(layout, element_size, (const unsigned char *)in,
                          (unsigned char *)boundaries);
    return dcp_error_clear(error);
}

/* The local shift of one half of one sequence (see dcp_mtp_roll_shift). */
static void dcp__roll_shift_half(const dcp_thd_layout *layout, int32_t rank, int32_t i, int half,
                                 size_t size, const unsigned char *in,
                                 const unsigned char *received, unsigned char *out)
{
    const dcp__roll_seq s = dcp__roll_sequence(layout, i);
    const int64_t first = dcp__roll_chunk(layout->cp, rank, half) * s.half_rows;
    const int64_t begin = s.offset + half * s.half_rows;
    dcp_mtp_roll_transfer t;
    int64_t j;
    for (j = 0; j < s.half_rows; j++) {
        const int64_t position = first + j, row = begin + j;
        unsigned char *o = out + (size_t)row * size;
        if (position >= s.valid) /* padding stays padding */
            memcpy(o, in + (size_t)row * size, size);
        else if (position == s.valid - 1) /* the fill */
            memset(o, 0, size);
        else if (j + 1 < s.half_rows)
            memcpy(o, in + (size_t)(row + 1) * size, size);
        else if (dcp__roll_incoming(layout, rank, i, half, &t) && t.kind == DCP_TRANSFER_COPY)
            memcpy(o, in + (size_t)t.peer_row * size, size);
        else if (received)
            memcpy(o, received + ((size_t)half * (size_t)layout->num_sequences + (size_t)i) * size,
                   size);
    }
}

DCPDEF dcp_status dcp_mtp_roll_shift(const dcp_thd_layout *layout, int32_t rank,
                                     size_t element_size, const void *in, const void *received,
                                     void *out, dcp_error *error)
{
    const unsigned char *src = (const unsigned char *)in;
    unsigned char *dst = (unsigned char *)out;
    dcp_status status;
    int64_t rows;
    size_t bytes;
    int32_t i;
    int half;
    if ((status = dcp__roll_check(layout, rank, element_size, &rows, error)) != DCP_OK)
        return status;
    if (rows == 0) return dcp_error_clear(error);
    if (!in || !out)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "in and out must not be NULL");
    bytes = (size_t)rows * element_size;
    if (src < dst + bytes && dst < src + bytes)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "out overlaps in (%lld rows of %zu bytes): the roll is out of place",
                             (long long)rows, element_size);
    for (i = 0; i < layout->num_sequences; i++)
        for (half = 0; half < (layout->cp > 1 ? DCP_MTP_ROLL_HALVES : 1); half++)
            dcp__roll_shift_half(layout, rank, i, half, element_size, src,
                                 (const unsigned char *)received, dst);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_mtp_roll_reference(const dcp_thd_layout *layout, size_t element_size,
                                         const void *const *in, void *const *out,
                                         dcp_error *error)
{
    dcp_status status;
    int32_t r, i;
    int half;
    if ((status = dcp_thd_layout_validate(layout, NULL, error)) != DCP_OK) return status;
    if ((status = dcp_check_rank_buffers("in", in, layout->cp, error)) != DCP_OK ||
        (status = dcp_check_rank_buffers("out", (const void *const *)out, layout->cp, error)) !=
            DCP_OK)
        return status;
    for (r = 0; r < layout->cp; r++)
        if ((status = dcp_mtp_roll_shift(layout, r, element_size, in[r], NULL, out[r], error)) !=
            DCP_OK)
            return status;
    for (r = 0; r < layout->cp; r++) /* the boundary rows, straight from the peers' buffers */
        for (i = 0; i < layout->num_sequences; i++)
            for (half = 0; half < DCP_MTP_ROLL_HALVES; half++) {
                dcp_mtp_roll_transfer t;
                if (!dcp__roll_incoming(layout, r, i, half, &t)) continue;
                memcpy((unsigned char *)out[r] + (size_t)t.row * element_size,
                       (const unsigned char *)in[t.peer] + (size_t)t.peer_row * element_size,
                       element_size);
            }
    return dcp_error_clear(error);
}

/* ------------------------------------------------------------ pipeline stages: field sets */

DCPDEF uint32_t dcp_stage_fields(int32_t first_stage, int32_t last_stage, int32_t mtp_stage)
{
    uint32_t fields = 0;
    if (first_stage || mtp_stage)
        fields |= DCP_FIELD_BIT(DCP_FIELD_TOKENS) | DCP_FIELD_BIT(DCP_FIELD_POSITION_IDS);
    if (last_stage || mtp_stage)
        fields |= DCP_FIELD_BIT(DCP_FIELD_LABELS) | DCP_FIELD_BIT(DCP_FIELD_LOSS_MASK);
    return fields;
}

DCPDEF dcp_status dcp_field_set_validate(const dcp_field_set *set, size_t *row_bytes,
                                         dcp_error *error)
{
    size_t total = 0;
    int f;
    if (!set) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "set must not be NULL");
    if (set->fields & ~DCP_FIELDS_ALL)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "set fields 0x%x has bits outside DCP_FIELDS_ALL 0x%x",
                             (unsigned)set->fields, (unsigned)DCP_FIELDS_ALL);
    for (f = 0; f < DCP_FIELD_COUNT; f++) {
        if (!(set->fields & DCP_FIELD_BIT(f))) continue;
        if (set->element_size[f] == 0)
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "set element_size[%d] must be > 0 for a field in the set", f);
        if (set->element_size[f] > SIZE_MAX - total)
            return dcp_error_set(error, DCP_ERROR_OVERFLOW, "set element sizes overflow size_t");
        total += set->element_size[f];
    }
    if (row_bytes) *row_bytes = total;
    return dcp_error_clear(error);
}

/* tokens rows of row_bytes each, as bytes; name is the count's field, for the message. */
static dcp_status dcp__token_bytes(const char *name, int64_t tokens, size_t row_bytes,
                                   uint64_t *bytes, dcp_error *error)
{
    if (tokens < 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "reroute->%s = %lld must be >= 0",
                             name, (long long)tokens);
    if (row_bytes != 0 && (uint64_t)tokens > UINT64_MAX / row_bytes)
        return dcp_error_set(error, DCP_ERROR_OVERFLOW,
                             "reroute->%s = %lld tokens of %zu bytes overflow uint64", name,
                             (long long)tokens, row_bytes);
    *bytes = (uint64_t)tokens * row_bytes;
    return DCP_OK;
}

DCPDEF dcp_status dcp_reroute_field_bytes(const dcp_reroute *reroute, const dcp_field_set *set,
                                          dcp_reroute_bytes *bytes, dcp_error *error)
{
    dcp_reroute_bytes result;
    size_t row_bytes;
    dcp_status status;
    if (!reroute)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "reroute must not be NULL");
    if ((status = dcp_field_set_validate(set, &row_bytes, error)) != DCP_OK) return status;
    if (!bytes) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "bytes must not be NULL");
    if ((status = dcp__token_bytes("send_tokens", reroute->send_tokens, row_bytes, &result.send,
                                   error)) != DCP_OK ||
        (status = dcp__token_bytes("recv_tokens", reroute->recv_tokens, row_bytes, &result.recv,
                                   error)) != DCP_OK ||
        (status = dcp__token_bytes("copy_tokens", reroute->copy_tokens, row_bytes, &result.copy,
                                   error)) != DCP_OK)
        return status;
    *bytes = result;
    return dcp_error_clear(error);
}

/* The checks both directions make: the set, the buffers its fields need, the view. */
static dcp_status dcp__check_fields(const dcp_rank_view *view, const dcp_field_set *set,
                                    const void *sample_data, const void *local, dcp_error *error)
{
    dcp_status status;
    if ((status = dcp_field_set_validate(set, NULL, error)) != DCP_OK) return status;
    if (set->fields && (!sample_data || !local))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "sample_data and local must not be NULL for fields 0x%x",
                             (unsigned)set->fields);
    return dcp_rank_view_validate(view, error);
}

/* Pack and unpack differ only in the way each field's rows go, so one loop serves both. The
   pointer arrays come in without const; only the side that the direction reads is read. */
static dcp_status dcp__rank_view_fields(const dcp_rank_view *view, const dcp_field_set *set,
                                        void *const *const *sample_data, void *const *local,
                                        int unpack, dcp_error *error)
{
    dcp_status status = dcp__check_fields(view, set, sample_data, local, error);
    int f;
    for (f = 0; f < DCP_FIELD_COUNT && status == DCP_OK; f++) {
        const size_t size = set->element_size[f];
        if (!(set->fields & DCP_FIELD_BIT(f))) continue;
        status = unpack ? dcp_rank_view_unpack(view, local[f], size, sample_data[f], error)
                        : dcp_rank_view_pack(view, (const void *const *)sample_data[f], size,
                                             local[f], error);
    }
    return status;
}

DCPDEF dcp_status dcp_rank_view_pack_fields(const dcp_rank_view *view, const dcp_field_set *set,
                                            const void *const *const *sample_data,
                                            void *const *local, dcp_error *error)
{
    return dcp__rank_view_fields(view, set, (void *const *const *)sample_data, local, 0, error);
}

DCPDEF dcp_status dcp_rank_view_unpack_fields(const dcp_rank_view *view,
                                              const dcp_field_set *set,
                                              const void *const *local,
                                              void *const *const *sample_data,
                                              dcp_error *error)
{
    return dcp__rank_view_fields(view, set, sample_data, (void *const *)local, 1, error);
}

#endif /* DCP_NO_DISTRIBUTED */

