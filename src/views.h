/* src/views.h - what a data loader and a rank need: sequence-length sources, THD views and
   the load-balanced CP split, reroute lists, the binary exchange format, FLOPs statistics and
   the loader helpers.
   Part of dcp.h: edit here, then run `make amalgamate` (tools/amalgamate.py writes dcp.h
   from src/dcp.h.in and these parts); make test fails while dcp.h is stale. */
//@@ declarations
/* ================================================================== sequence-length sources */

/* Megatron's convention: mu = ln(mean) - sigma^2 / 2, L = exp(mu + sigma Z) rounded to the
   nearest integer and clipped to [min_length, max_length]. */
typedef struct dcp_lognormal {
    double mean;        /* tokens, in (0, 1e18]: the mean before clipping */
    double sigma;       /* standard deviation of ln(L), in [0, 16] */
    int64_t min_length; /* clipping range, 1 <= min_length <= max_length <= */
    int64_t max_length; /* DCP_MAX_SAMPLE_LENGTH */
} dcp_lognormal;

/* The seed the front ends draw with when the caller gives none (dcp-plan --lognormal without
   --seed, libdcp.lognormal_lengths without seed=), so that the same batch is one batch
   everywhere. */
#define DCP_DEFAULT_SEED 1

DCPDEF dcp_status dcp_lengths_lognormal(const dcp_lognormal *distribution, uint64_t seed,
                                        int64_t *lengths, int32_t count, dcp_error *error);
DCPDEF dcp_status dcp_rng_lognormal_length(dcp_rng *rng, const dcp_lognormal *distribution,
                                           int64_t *length, dcp_error *error);
/* Log-uniform integer in [min_length, max_length]; DCP_ERROR_INVALID_ARGUMENT unless
   1 <= min <= max <= DCP_MAX_SAMPLE_LENGTH. */
DCPDEF dcp_status dcp_rng_loguniform_length(dcp_rng *rng, int64_t min_length,
                                            int64_t max_length, int64_t *length,
                                            dcp_error *error);
/* Text with one positive integer per line ('#' starts a comment; blank lines skipped), or
   CSV whose first row is a header naming a column length, seq_len, seqlen, sequence_length,
   seq_length, num_tokens or tokens (any case); a first line that is neither a number nor such
   a header is an error, never silently skipped. A leading UTF-8 byte order mark is ignored.
   File errors carry the system's reason (strerror). */
DCPDEF dcp_status dcp_lengths_parse(const char *text, size_t size,
                                    const dcp_allocator *allocator, int64_t **lengths,
                                    int32_t *count, dcp_error *error);
DCPDEF dcp_status dcp_lengths_read_file(const char *path, const dcp_allocator *allocator,
                                        int64_t **lengths, int32_t *count, dcp_error *error);
/* The same, and *lines receives [count] 1-based line numbers: lengths[i] came from line
   (*lines)[i] of the text, so messages about sample i can name its line. Free both arrays with
   dcp_free(allocator, ...). */
DCPDEF dcp_status dcp_lengths_parse_lines(const char *text, size_t size,
                                          const dcp_allocator *allocator, int64_t **lengths,
                                          int64_t **lines, int32_t *count, dcp_error *error);
DCPDEF dcp_status dcp_lengths_read_file_lines(const char *path, const dcp_allocator *allocator,
                                              int64_t **lengths, int64_t **lines,
                                              int32_t *count, dcp_error *error);

/* ================================================== THD layout and the load-balanced CP split
   A sample in a group of c > 1 ranks is padded to P (a multiple of 2c) and cut into 2c chunks
   of h = P / (2c) tokens; rank r holds chunks r and 2c-1-r, so causal attention work is equal
   on every rank. Local row i < h is global position r h + i, else (2c-1-r) h + (i - h). */

/* Global position (0-based within the sample) of local row local_index on rank `rank` of a
   group of cp ranks; padded_length is the sample's padded length (a multiple of 2 cp when
   cp > 1). The position is a padding slot when it is >= the sample's valid length. Returns -1
   for arguments outside those ranges. */
DCPDEF int64_t dcp_zigzag_position(int64_t padded_length, int32_t cp, int32_t rank,
                                   int64_t local_index);

/* A THD (tokens, heads, dim) pack of sequences as one rank of a CP group sees it. cu_seqlens
   and cu_seqlens_padded describe the whole (global) sequences: sequence i has valid length
   L_i = cu_seqlens[i + 1] - cu_seqlens[i] and padded length P_i = cu_seqlens_padded[i + 1] -
   cu_seqlens_padded[i] >= L_i, a multiple of 2 cp when cp > 1. A rank's local buffer holds
   P_i / cp rows of sequence i from local row cu_seqlens_padded[i] / cp; local row l is global
   position dcp_zigzag_position(P_i, cp, rank, l), a padding row iff that is >= L_i. The valid
   local rows of a sequence form a prefix of its rows on every rank, and local order keeps
   global order, so a causal mask by position is a causal mask by local index. The caller
   owns the arrays; a layout only points at them. */
typedef struct dcp_thd_layout {
    int32_t num_sequences;            /* n >= 0 */
    const int32_t *cu_seqlens;        /* [n + 1] valid, cumulative, from 0 */
    const int32_t *cu_seqlens_padded; /* [n + 1] storage, cumulative, from 0 */
    int32_t cp;                       /* ranks of the group: a power of two, 1 = whole */
} dcp_thd_layout;

/* Rows of a local buffer a computation reads or writes, per sequence: all P_i / cp of them,
   or the first or second half (the chunk r or the chunk 2 cp - 1 - r). Halves need cp > 1. */
typedef enum dcp_half { DCP_HALF_ALL = 0, DCP_HALF_FIRST = 1, DCP_HALF_SECOND = 2 } dcp_half;

/* Checks every rule above (no allocation) and, when local_rows is not NULL, stores the rows
   of one rank's local buffer: cu_seqlens_padded[n] / cp. */
DCPDEF dcp_status dcp_thd_layout_validate(const dcp_thd_layout *layout, int64_t *local_rows,
                                          dcp_error *error);

/* What one rank receives for one microbatch: its group, its samples in buffer order and the
   THD metadata a training step passes to attention (docs/integration.md turns it into the
   arguments of FlashAttention, TransformerEngine and dcp_cuda_attention_*). cu_seqlens and
   cu_seqlens_padded describe the whole (global) sequences of the group, as TransformerEngine's
   THD attention with CP takes them; the rank's local buffer holds padded / cp rows of each
   sample, at local_offsets[i] = cu_seqlens_padded[i] / cp.
   An idle rank (no group in this microbatch) cannot be mistaken for a group: idle 1, cp 0,
   first_rank and rank_in_group DCP_NO_GROUP, num_samples 0, pad_multiple, max_seqlen and
   local_tokens 0, and each cu array the one entry {0}. Every array belongs to the view:
   dcp_rank_view_create (or _deserialize) allocates them with the plan's allocator and
   dcp_rank_view_destroy frees them; a view is read-only for its users and may be read by many
   threads. */
#define DCP_NO_GROUP (-1)

typedef struct dcp_rank_view {
    int32_t rank;               /* pool rank in [0, ranks) whose view this is */
    int32_t microbatch;         /* in [0, num_microbatches) */
    int32_t first_rank;         /* pool rank of the group's member 0 (first_rank % cp == 0);
                                   DCP_NO_GROUP when idle */
    int32_t cp;                 /* group size, a power of two; 0 when idle */
    int32_t rank_in_group;      /* rank - first_rank: this rank's index in the group and in its
                                   CP communicator, the cp_rank of TransformerEngine's RoPE;
                                   DCP_NO_GROUP when idle */
    int32_t idle;               /* 1 when the rank has no group in this microbatch, else 0 */
    int32_t num_samples;        /* samples of the group (>= 1), 0 when idle */
    int32_t *samples;           /* [num_samples] sample ids (positions in the planned lengths),
                                   in buffer order */
    int64_t *sample_lengths;    /* [num_samples] valid lengths in tokens */
    int64_t pad_multiple;       /* every padded length is a multiple of it: lcm(2 cp,
                                   pad_multiple) for cp > 1, lcm(pad_multiple_cp1,
                                   pad_multiple) for cp 1; 0 when idle */
    int32_t *cu_seqlens;        /* [num_samples + 1] valid tokens, cumulative from 0, whole
                                   sequences (cu_seqlens_q/kv of FlashAttention and TE) */
    int32_t *cu_seqlens_padded; /* [num_samples + 1] stored (padded) tokens, cumulative from 0,
                                   whole sequences (TE's cu_seqlens_q/kv_padded) */
    int32_t *local_offsets;     /* [num_samples + 1] cu_seqlens_padded / cp: where each sample's
                                   rows start in this rank's local buffer */
    int32_t max_seqlen;         /* largest padded length of a whole sample in tokens (TE's
                                   max_seqlen_q/kv; 0 when idle) */
    int64_t local_tokens;       /* rows of the local buffer: local_offsets[num_samples] */
    dcp_allocator allocator;    /* the one that allocated the arrays; destroy uses it */
} dcp_rank_view;

/* The view of `rank` in `microbatch` (idle ranks included: DCP_OK with the idle form above).
   cu arrays are int32 as FlashAttention and TransformerEngine take them: a group whose padded
   tokens exceed INT32_MAX is DCP_ERROR_OVERFLOW, never truncated. DCP_ERROR_INVALID_ARGUMENT
   for a rank or microbatch out of range or a NULL view; DCP_ERROR_INVALID_PLAN for a plan
   that breaks an invariant. Allocates with the plan's allocator. */
DCPDEF dcp_status dcp_rank_view_create(const dcp_plan *plan, int32_t rank, int32_t microbatch,
                                       dcp_rank_view **view, dcp_error *error);
DCPDEF void dcp_rank_view_destroy(dcp_rank_view *view); /* NULL is a no-op */
/* Every rule of the struct above, the idle form included: DCP_ERROR_INVALID_ARGUMENT naming
   the first field at fault. */
DCPDEF dcp_status dcp_rank_view_validate(const dcp_rank_view *view, dcp_error *error);
/* For every local row: the index of its sample in the view (slot_sample, may be NULL) and its
   global position in that sample, -1 for a padding row (positions, may be NULL). Arrays of
   view->local_tokens entries; the position ids of a training step are the non-negative ones. */
DCPDEF dcp_status dcp_rank_view_positions(const dcp_rank_view *view, int32_t *slot_sample,
                                          int64_t *positions, dcp_error *error);

/* Local rows of one sample that hold consecutive global positions, or only padding: the
   rank's buffer in O(samples) instead of O(rows). */
typedef struct dcp_row_run {
    int32_t slot;      /* the sample's index in view->samples */
    int64_t first_row; /* first local row of the run */
    int64_t rows;      /* rows in the run, >= 1 */
    int64_t position;  /* global position of first_row in its sample, then one more per row;
                          -1: every row of the run is padding */
} dcp_row_run;

/* The local buffer as runs, in row order: at most DCP_ROW_RUNS_PER_SAMPLE per sample
   (a sample's valid rows form a prefix of its rows: at cp > 1 the rank's two chunks, then
   its padding; adjacent chunks of the middle rank are one run). runs NULL: *count receives
   the number only; else capacity entries are available and fewer are DCP_ERROR_INVALID_ARGUMENT
   (nothing written past capacity). No allocation. */
#define DCP_ROW_RUNS_PER_SAMPLE 3
DCPDEF dcp_status dcp_rank_view_runs(const dcp_rank_view *view, dcp_row_run *runs,
                                     int32_t capacity, int32_t *count, dcp_error *error);

/* One ring step of a rank as a call of a varlen attention kernel without context parallelism,
   FlashAttention's flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
   max_seqlen_k, causal=...) with return_attn_probs for the LSE. Step s of a group of cp ranks
   reads the K and V that started on group rank kv_rank, the rank s places before this one in
   the ring order (dcp_ring_order; its local buffer, passed around the ring); kv_rank, the
   halves and the mask are dcp_ring_step_plan's. The call
   takes only valid rows: query rows gathered from this rank's buffer and key rows from
   kv_rank's, sequence by sequence, so that no padding row is ever a key and a causal call has
   equally long query and key runs (FlashAttention aligns its causal mask to the bottom right).
   A sequence without a valid query or key row in the step is left out of the call. The calls
   of steps 0 .. cp-1, merged through their LSEs (log-sum-exp, rows a call leaves out
   contributing nothing), give the rank's attention output on its valid rows; padding rows get
   none. cp 1 is one call of the whole buffer's valid rows. */
typedef struct dcp_varlen_call {
    int32_t kv_rank;       /* group rank whose local K, V the step reads */
    int32_t causal;        /* FlashAttention's causal argument of this call */
    int32_t num_sequences; /* sequences of the call (batch size), <= view->num_samples */
    int32_t max_seqlen_q;  /* longest query run of the call (max_seqlen_q) */
    int32_t max_seqlen_k;  /* longest key run of the call (max_seqlen_k) */
    int64_t total_q;       /* query rows gathered: cu_seqlens_q[num_sequences] */
    int64_t total_k;       /* key rows gathered: cu_seqlens_k[num_sequences] */
} dcp_varlen_call;

/* The caller's arrays a call is described in; each has view->num_samples entries (the cu
   arrays one more), of which the call fills num_sequences (+ 1). Sequence j of the call is
   sample slot[j]: its query rows are q_row[j] .. + (cu_seqlens_q[j + 1] - cu_seqlens_q[j])
   of this rank's local buffer, its key and value rows kv_row[j] .. + (cu_seqlens_k[j + 1] -
   cu_seqlens_k[j]) of kv_rank's. */
typedef struct dcp_varlen_rows {
    int32_t *slot;         /* sample index in view->samples */
    int32_t *q_row;        /* first query row, in this rank's local buffer */
    int32_t *kv_row;       /* first key and value row, in kv_rank's local buffer */
    int32_t *cu_seqlens_q; /* cumulative, from 0 */
    int32_t *cu_seqlens_k; /* cumulative, from 0 */
} dcp_varlen_rows;

/* Ring step `step` (0 <= step < cp) of the view's rank, for a causal (1) or full (0) attention.
   DCP_ERROR_INVALID_ARGUMENT for an idle view (no attention to run), a step out of range, a
   causal flag other than 0 or 1, or a NULL pointer. No allocation. */
DCPDEF dcp_status dcp_rank_view_varlen_call(const dcp_rank_view *view, int32_t step,
                                            int32_t causal, dcp_varlen_call *call,
                                            const dcp_varlen_rows *rows, dcp_error *error);
/* Gathers the rank's rows from whole per-sample buffers into its THD buffer: sample_data[id]
   holds sample id's valid tokens, element_size bytes each (tokens, labels, loss masks or any
   per-token record). Padding rows are zero bytes (token 0, label 0, loss mask 0). local has
   view->local_tokens * element_size bytes. */
DCPDEF dcp_status dcp_rank_view_pack(const dcp_rank_view *view, const void *const *sample_data,
                                     size_t element_size, void *local, dcp_error *error);
/* The inverse: scatters the valid rows of a local buffer back into per-sample buffers. */
DCPDEF dcp_status dcp_rank_view_unpack(const dcp_rank_view *view, const void *local,
                                       size_t element_size, void *const *sample_data,
                                       dcp_error *error);
/* Pads a packed buffer's row count up to a multiple of `alignment` by extending its last
   sequence: cu_seqlens_padded[num_sequences] grows, *added_rows receives the rows added (0 when
   already aligned). For a layout without CP (cp 1), or a CP rank's local_offsets array.
   Fixed-shape kernels and CUDA graphs need it; libdcp's own kernels do not. */
DCPDEF dcp_status dcp_pad_to_alignment(int32_t *cu_seqlens_padded, int32_t num_sequences,
                                       int64_t alignment, int64_t *added_rows, dcp_error *error);

/* ============================================================== exchange: reroute and format
   Reroute: the data loader leaves sample s on rank holders[s]; the plan wants its chunks on
   the ranks of its group. A rank's reroute list says exactly what it sends, receives and copies
   locally: valid tokens only (padding is zero-filled by the receiver), each token once, ranges
   in the sample's global positions, destinations as rows of the receiver's local buffer of a
   microbatch. Every rank derives the lists from the same plan, in the same global order, so the
   sends of A to B and the receives of B from A pair up one to one, in order. */

typedef enum dcp_transfer_kind {
    DCP_TRANSFER_SEND = 0, /* to peer */
    DCP_TRANSFER_RECV = 1, /* from peer */
    DCP_TRANSFER_COPY = 2  /* local: holder and destination are this rank (peer == rank) */
} dcp_transfer_kind;

typedef struct dcp_transfer {
    dcp_transfer_kind kind;     /* send, receive or local copy */
    int32_t peer;               /* the other pool rank (this rank for a copy) */
    int32_t microbatch;         /* of the destination buffer */
    int32_t sample;             /* sample id */
    int64_t source_begin;       /* global positions [source_begin, source_end) of the sample, */
    int64_t source_end;         /* valid tokens only: source_end <= its length */
    int64_t destination_row;    /* first row in the destination rank's local buffer */
} dcp_transfer;

/* Owned by the caller of dcp_reroute_create; dcp_reroute_destroy frees it and its array. */
typedef struct dcp_reroute {
    int32_t rank;               /* the pool rank whose list this is */
    int32_t count;              /* entries of transfers */
    dcp_transfer *transfers;    /* [count], by (microbatch, sample, destination, range) */
    int64_t send_tokens, recv_tokens, copy_tokens; /* tokens of each kind, summed */
    dcp_allocator allocator;    /* the plan's: destroy frees with it */
} dcp_reroute;

/* holders[s] in [0, ranks) for every sample. Allocates with the plan's allocator. */
DCPDEF dcp_status dcp_reroute_create(const dcp_plan *plan, const int32_t *holders, int32_t rank,
                                     dcp_reroute **reroute, dcp_error *error);
DCPDEF void dcp_reroute_destroy(dcp_reroute *reroute);

/* Plan exchange format, version DCP_FORMAT_VERSION: one self-describing buffer of
   little-endian fixed-width integers: magic, version, total size, explicit counts, the arrays,
   and a 64-bit FNV-1a checksum of everything before it. The deserializer checks every byte and
   every invariant and names what is wrong; it never looks for sentinel values. */
#define DCP_FORMAT_VERSION 4 /* 2: the config carries sync_ranks; 3: and ring_charge, and an idle
                                 rank view has cp 0, first_rank and rank_in_group DCP_NO_GROUP;
                                 4: and cp_sizes, cover_ranks, the size list, head_count and
                                 memory_limit */

/* *size receives the bytes the plan takes; a NULL buffer only asks for it, a buffer of fewer
   bytes (capacity) is DCP_ERROR_INVALID_ARGUMENT. */
DCPDEF dcp_status dcp_plan_serialize(const dcp_plan *plan, void *buffer, size_t capacity,
                                     size_t *size, dcp_error *error);
/* A new plan (allocator NULL: DCP_MALLOC) from size bytes: DCP_ERROR_CORRUPT_DATA naming the
   first field at fault (checksum, counts, any plan invariant), DCP_ERROR_UNSUPPORTED for
   another format version. */
DCPDEF dcp_status dcp_plan_deserialize(const void *buffer, size_t size,
                                       const dcp_allocator *allocator, dcp_plan **plan,
                                       dcp_error *error);
/* One microbatch's metadata for one rank, for TP ranks and pipeline stages that did not plan;
   sizes as dcp_plan_serialize's. */
DCPDEF dcp_status dcp_rank_view_serialize(const dcp_rank_view *view, void *buffer,
                                          size_t capacity, size_t *size, dcp_error *error);
/* A new view: DCP_ERROR_CORRUPT_DATA or DCP_ERROR_UNSUPPORTED as dcp_plan_deserialize. */
DCPDEF dcp_status dcp_rank_view_deserialize(const void *buffer, size_t size,
                                            const dcp_allocator *allocator, dcp_rank_view **view,
                                            dcp_error *error);

/* FLOPs accounting of a global batch, for MFU with a variable microbatch count: valid and
   padded tokens, and the sums of L^2 over valid lengths and over padded lengths (at each
   sample's CP size in the plan). DCP_ERROR_OVERFLOW if a sum exceeds int64_t. */
typedef struct dcp_flops_stats {
    int64_t valid_tokens;       /* sum of L */
    int64_t padded_tokens;      /* sum of P, each at its sample's CP size */
    int64_t sum_squared_valid;  /* sum of L^2 (causal attention FLOPs are proportional) */
    int64_t sum_squared_padded; /* sum of P^2 */
} dcp_flops_stats;

DCPDEF dcp_status dcp_plan_flops_stats(const dcp_plan *plan, dcp_flops_stats *stats,
                                       dcp_error *error);

/* ============================================================= helpers a data loader needs */
/* Keeps the samples that fit the config (a feasible CP size; dcp_cp_size_min) and drops the
   rest, so one oversized sample does not fail the whole batch. kept_lengths and kept_ids get
   the kept samples in input order with their original positions (plan sample s is input sample
   kept_ids[s]); dropped_ids (may be NULL) gets the dropped positions. Every array has room for
   count entries; *kept_count + dropped = count. DCP_ERROR_INVALID_ARGUMENT for a length outside
   [1, DCP_MAX_SAMPLE_LENGTH] (that is bad data, not a sample too long for this config). */
DCPDEF dcp_status dcp_lengths_filter(const dcp_config *config, const int64_t *lengths,
                                     int32_t count, int64_t *kept_lengths, int32_t *kept_ids,
                                     int32_t *kept_count, int32_t *dropped_ids,
                                     dcp_error *error);
/* Where sample `sample` of the plan runs: its microbatch and the index of its group in
   plan->groups. O(num_samples). */
DCPDEF dcp_status dcp_plan_sample_location(const dcp_plan *plan, int32_t sample,
                                           int32_t *microbatch, int32_t *group,
                                           dcp_error *error);
/* DCP_OK when two plans are the same (config except the allocator, lengths, microbatches,
   groups, sample order), for example a plan and its deserialized copy; otherwise
   DCP_ERROR_INVALID_PLAN with a message naming the first difference. */
DCPDEF dcp_status dcp_plan_compare(const dcp_plan *a, const dcp_plan *b, dcp_error *error);

//@@ implementation
/* ------------------------------------------------------------- sequence-length sources */

/* Below INT64_MAX (9.2e18) with room: a draw near the mean still fits a length. */
#define DCP__LOGNORMAL_MAX_MEAN 1e18

static dcp_status dcp__check_lognormal(const dcp_lognormal *d, dcp_error *error)
{
    if (!d)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "distribution must not be NULL");
    if (!(d->mean > 0.0 && d->mean <= DCP__LOGNORMAL_MAX_MEAN))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "lognormal mean must be in (0, %g], got %g", DCP__LOGNORMAL_MAX_MEAN,
                             d->mean);
    if (!(d->sigma >= 0.0 && d->sigma <= 16.0))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "lognormal sigma must be in [0, 16], got %g", d->sigma);
    if (d->min_length < 1 || d->max_length < d->min_length ||
        d->max_length > DCP_MAX_SAMPLE_LENGTH)
        return dcp_error_set(
            error, DCP_ERROR_INVALID_ARGUMENT, "lognormal needs 1 <= min %lld <= max %lld <= %lld",
            (long long)d->min_length, (long long)d->max_length, (long long)DCP_MAX_SAMPLE_LENGTH);
    return DCP_OK;
}

/* Rounds to the nearest integer and clips to [lo, hi]; NaN clips to lo. */
static int64_t dcp__round_clip(double x, int64_t lo, int64_t hi)
{
    if (!(x >= (double)lo)) return lo;
    if (x >= (double)hi) return hi;
    x = floor(x + 0.5);
    return x > (double)hi ? hi : (int64_t)x;
}

DCPDEF dcp_status dcp_rng_lognormal_length(dcp_rng *rng, const dcp_lognormal *d,
                                           int64_t *length, dcp_error *error)
{
    dcp_status status;
    double mu;
    if (!rng || !length)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "rng and length must not be NULL");
    if ((status = dcp__check_lognormal(d, error)) != DCP_OK) return status;
    mu = dcp__log(d->mean) - dcp__unfused(d->sigma * d->sigma) / 2.0;
    *length = dcp__round_clip(dcp__exp(mu + dcp__unfused(d->sigma * dcp_rng_normal(rng))),
                              d->min_length, d->max_length);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_lengths_lognormal(const dcp_lognormal *d, uint64_t seed,
                                        int64_t *lengths, int32_t count, dcp_error *error)
{
    dcp_rng rng;
    dcp_status status;
    int32_t i;
    if (!lengths || count < 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "lengths must not be NULL and count must be >= 0, got %d", (int)count);
    if ((status = dcp__check_lognormal(d, error)) != DCP_OK) return status;
    dcp_rng_seed(&rng, seed);
    for (i = 0; i < count; i++)
        if ((status = dcp_rng_lognormal_length(&rng, d, &lengths[i], error)) != DCP_OK)
            return status;
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_rng_loguniform_length(dcp_rng *rng, int64_t min_length,
                                            int64_t max_length, int64_t *length,
                                            dcp_error *error)
{
    double lo, hi;
    if (!rng || !length)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "rng and length must not be NULL");
    if (min_length < 1 || max_length < min_length || max_length > DCP_MAX_SAMPLE_LENGTH)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "log-uniform needs 1 <= min %lld <= max %lld <= %lld",
                             (long long)min_length, (long long)max_length,
                             (long long)DCP_MAX_SAMPLE_LENGTH);
    /* uniform in log over [min, max + 1), floored: every integer gets its share */
    lo = dcp__log((double)min_length);
    hi = dcp__log((double)max_length + 1.0);
    *length = dcp__round_clip(floor(dcp__exp(lo + dcp__unfused((hi - lo) * dcp_rng_uniform(rng)))),
                              min_length, max_length);
    return dcp_error_clear(error);
}

/* Length files. */

typedef struct dcp__cursor {
    const char *text;
    size_t size;
    size_t position;
    int64_t line;
} dcp__cursor;

static int dcp__is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* Next line without its comment and surrounding blanks; 0 at the end of the text. */
static int dcp__next_line(dcp__cursor *cursor, const char **begin, const char **end)
{
    const char *b, *e, *stop;
    if (cursor->position >= cursor->size) return 0;
    b = cursor->text + cursor->position;
    stop = (const char *)memchr(b, '\n', cursor->size - cursor->position);
    if (!stop) stop = cursor->text + cursor->size;
    cursor->position = (size_t)(stop - cursor->text) + 1;
    cursor->line++;
    e = (const char *)memchr(b, '#', (size_t)(stop - b));
    if (!e) e = stop;
    while (b < e && dcp__is_space(*b)) b++;
    while (e > b && dcp__is_space(e[-1])) e--;
    *begin = b;
    *end = e;
    return 1;
}

/* Copies at most 40 bytes of a field for a message, replacing unprintable bytes with '?'. */
static void dcp__quote(const char *begin, const char *end, char *out, size_t capacity)
{
    size_t i = 0;
    while (begin < end && i + 4 < capacity && i < 40) {
        unsigned char c = (unsigned char)*begin++;
        out[i++] = (c >= 32 && c < 127) ? (char)c : '?';
    }
    if (begin < end && i + 4 <= capacity) {
        out[i++] = '.';
        out[i++] = '.';
        out[i++] = '.';
    }
    out[i] = '\0';
}

static dcp_status dcp__parse_length(const char *begin, const char *end, int64_t line,
                                    int64_t *value, dcp_error *error)
{
    char quoted[48];
    const char *p = begin;
    int64_t v = 0;
    dcp__quote(begin, end, quoted, sizeof quoted);
    if (p < end && *p == '+') p++;
    if (p < end && *p == '-' && p + 1 < end && p[1] >= '0' && p[1] <= '9')
        return dcp_error_set(error, DCP_ERROR_PARSE, "line %lld: length %s must be >= 1",
                             (long long)line, quoted);
    if (p == end)
        return dcp_error_set(error, DCP_ERROR_PARSE, "line %lld: empty length field",
                             (long long)line);
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return dcp_error_set(error, DCP_ERROR_PARSE,
                                 "line %lld: length \"%s\" is not a positive integer",
                                 (long long)line, quoted);
        v = v * 10 + (*p - '0');
        if (v > DCP_MAX_SAMPLE_LENGTH)
            return dcp_error_set(error, DCP_ERROR_PARSE,
                                 "line %lld: length %s exceeds the maximum %lld", (long long)line,
                                 quoted, (long long)DCP_MAX_SAMPLE_LENGTH);
    }
    if (v == 0)
        return dcp_error_set(error, DCP_ERROR_PARSE, "line %lld: length %s must be >= 1",
                             (long long)line, quoted);
    *value = v;
    return DCP_OK;
}

/* Field `index` of a comma-separated line, trimmed and without surrounding quotes; returns
   the number of fields. */
static int32_t dcp__csv_field(const char *begin, const char *end, int32_t index,
                              const char **field_begin, const char **field_end)
{
    int32_t fields = 0;
    const char *p = begin;
    for (;;) {
        const char *comma = (const char *)memchr(p, ',', (size_t)(end - p));
        const char *fe = comma ? comma : end, *fb = p;
        if (fields == index) {
            while (fb < fe && dcp__is_space(*fb)) fb++;
            while (fe > fb && dcp__is_space(fe[-1])) fe--;
            if (fe - fb >= 2 && *fb == '"' && fe[-1] == '"') {
                fb++;
                fe--;
            }
            *field_begin = fb;
            *field_end = fe;
        }
        fields++;
        if (!comma) return fields;
        p = comma + 1;
    }
}

static int dcp__names_length_column(const char *b, const char *e)
{
    static const char *const names[] = {"length", "seq_len", "seqlen", "sequence_length",
                                        "seq_length", "num_tokens", "tokens"};
    size_t i, n = (size_t)(e - b), k;
    for (i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strlen(names[i]) != n) continue;
        for (k = 0; k < n; k++) {
            char c = b[k];
            if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
            if (c != names[i][k]) break;
        }
        if (k == n) return 1;
    }
    return 0;
}

/* Reads the CSV header: *column gets the length column, *fields the column count. */
static dcp_status dcp__csv_header(const char *b, const char *e, int64_t line, int32_t *column,
                                  int32_t *fields, dcp_error *error)
{
    const char *fb = NULL, *fe = NULL;
    int32_t i;
    *fields = dcp__csv_field(b, e, 0, &fb, &fe);
    for (i = 0; i < *fields; i++) {
        dcp__csv_field(b, e, i, &fb, &fe);
        if (dcp__names_length_column(fb, fe)) {
            *column = i;
            return DCP_OK;
        }
    }
    if (*fields == 1) {
        char quoted[48];
        dcp__quote(b, e, quoted, sizeof quoted);
        return dcp_error_set(error, DCP_ERROR_PARSE,
                             "line %lld: \"%s\" is neither a length nor a header naming a length "
                             "column (length, seq_len, seqlen, sequence_length, seq_length, "
                             "num_tokens or tokens)",
                             (long long)line, quoted);
    }
    return dcp_error_set(error, DCP_ERROR_PARSE,
                         "line %lld: CSV header has no length column (expected length, seq_len, "
                         "seqlen, sequence_length, seq_length, num_tokens or tokens)",
                         (long long)line);
}

/* A header row is printable text with a letter, not starting like a number: anything else on
   the first line is data, so "12a" or binary bytes are errors rather than a silent header. */
static int dcp__looks_like_header(const char *b, const char *e)
{
    int letters = 0;
    if (b == e || (*b >= '0' && *b <= '9') || *b == '+' || *b == '-' || *b == '.') return 0;
    for (; b < e; b++) {
        unsigned char c = (unsigned char)*b;
        if (c < 32 || c > 126) return 0;
        letters += (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    }
    return letters > 0;
}

static dcp_status dcp__parse_lines(dcp__cursor *cursor, int64_t *out, int64_t *out_lines,
                                   int32_t *count, dcp_error *error)
{
    const char *b, *e;
    int32_t column = -1, fields = 0;
    dcp_status status;
    *count = 0;
    while (dcp__next_line(cursor, &b, &e)) {
        const char *fb = b, *fe = e;
        if (b == e) continue;
        if (column < 0 && *count == 0 && dcp__looks_like_header(b, e)) {
            if ((status = dcp__csv_header(b, e, cursor->line, &column, &fields, error)) != DCP_OK)
                return status;
            continue;
        }
        if (column >= 0) {
            int32_t have = dcp__csv_field(b, e, column, &fb, &fe);
            if (have != fields)
                return dcp_error_set(error, DCP_ERROR_PARSE,
                                     "line %lld: %d CSV fields, the header has %d",
                                     (long long)cursor->line, (int)have, (int)fields);
        }
        if (*count == INT32_MAX)
            return dcp_error_set(error, DCP_ERROR_OVERFLOW, "more than %d lengths", INT32_MAX);
        if ((status = dcp__parse_length(fb, fe, cursor->line, &out[*count], error)) != DCP_OK)
            return status;
        if (out_lines) out_lines[*count] = cursor->line;
        (*count)++;
    }
    if (*count == 0) return dcp_error_set(error, DCP_ERROR_PARSE, "no lengths found (empty input)");
    return DCP_OK;
}

#define DCP__UTF8_BOM "\xEF\xBB\xBF"
#define DCP__UTF8_BOM_SIZE 3

DCPDEF dcp_status dcp_lengths_parse(const char *text, size_t size,
                                    const dcp_allocator *allocator, int64_t **lengths,
                                    int32_t *count, dcp_error *error)
{
    return dcp_lengths_parse_lines(text, size, allocator, lengths, NULL, count, error);
}

DCPDEF dcp_status dcp_lengths_parse_lines(const char *text, size_t size,
                                          const dcp_allocator *allocator, int64_t **lengths,
                                          int64_t **lines_out, int32_t *count, dcp_error *error)
{
    dcp__cursor cursor;
    size_t lines = 1, i;
    int64_t *out, *out_lines = NULL;
    dcp_status status;
    if (!lengths || !count)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "lengths and count must not be NULL");
    *lengths = NULL;
    *count = 0;
    if (lines_out) *lines_out = NULL;
    if (!text && size > 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "text is NULL with size %zu", size);
    if (allocator && ((allocator->alloc == NULL) != (allocator->free == NULL)))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "allocator needs both alloc and free, or neither");
    for (i = 0; i < size; i++) lines += text[i] == '\n';
    out = (int64_t *)dcp__alloc_array(allocator, lines, sizeof(int64_t), "lengths", error);
    if (out && lines_out)
        out_lines = (int64_t *)dcp__alloc_array(allocator, lines, sizeof(int64_t), "lines", error);
    if (!out || (lines_out && !out_lines)) {
        dcp_free(allocator, out);
        return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    }
    cursor.text = text;
    cursor.size = size;
    cursor.position = 0;
    cursor.line = 0;
    if (size >= DCP__UTF8_BOM_SIZE && memcmp(text, DCP__UTF8_BOM, DCP__UTF8_BOM_SIZE) == 0)
        cursor.position = DCP__UTF8_BOM_SIZE; /* editors on Windows write one */
    status = dcp__parse_lines(&cursor, out, out_lines, count, error);
    if (status != DCP_OK) {
        dcp_free(allocator, out);
        dcp_free(allocator, out_lines);
        *count = 0;
        return status;
    }
    *lengths = out;
    if (lines_out) *lines_out = out_lines;
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_lengths_read_file(const char *path, const dcp_allocator *allocator,
                                        int64_t **lengths, int32_t *count, dcp_error *error)
{
    return dcp_lengths_read_file_lines(path, allocator, lengths, NULL, count, error);
}

DCPDEF dcp_status dcp_lengths_read_file_lines(const char *path, const dcp_allocator *allocator,
                                              int64_t **lengths, int64_t **lines,
                                              int32_t *count, dcp_error *error)
{
    FILE *file;
    int read_errno = 0;
    char *text = NULL;
    size_t size = 0, capacity = 0;
    dcp_status status;
    if (!path) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "path must not be NULL");
    if (allocator && ((allocator->alloc == NULL) != (allocator->free == NULL)))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "allocator needs both alloc and free, or neither");
    file = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!file)
        return dcp_error_set(error, DCP_ERROR_IO, "cannot open %s: %s", path, strerror(errno));
    for (;;) { /* grow by doubling: works for pipes, where the size is unknown */
        size_t got;
        if (size == capacity) {
            size_t grown = capacity ? capacity * 2 : 65536;
            char *bigger = grown > capacity ? (char *)dcp_alloc(allocator, grown) : NULL;
            if (!bigger) {
                dcp_free(allocator, text);
                if (file != stdin) fclose(file);
                return dcp_error_set(error, DCP_ERROR_OUT_OF_MEMORY,
                                     "%s: cannot allocate %zu bytes", path, grown);
            }
            if (size) memcpy(bigger, text, size);
            dcp_free(allocator, text);
            text = bigger;
            capacity = grown;
        }
        errno = 0;
        got = fread(text + size, 1, capacity - size, file);
        read_errno = errno;
        size += got;
        if (got == 0) break;
    }
    status = ferror(file) ? dcp_error_set(error, DCP_ERROR_IO, "cannot read %s: %s", path,
                                          strerror(read_errno))
                          : DCP_OK;
    if (file != stdin) fclose(file);
    if (status == DCP_OK)
        status = dcp_lengths_parse_lines(text, size, allocator, lengths, lines, count, error);
    dcp_free(allocator, text);
    return status;
}

/* ------------------------------------------------------------------------- THD layout */

DCPDEF int64_t dcp_zigzag_position(int64_t padded_length, int32_t cp, int32_t rank,
                                   int64_t local_index)
{
    int64_t half;
    if (cp < 1 || rank < 0 || rank >= cp || padded_length < 0 ||
        (cp > 1 && padded_length % (2 * (int64_t)cp) != 0) || local_index < 0 ||
        local_index >= padded_length / cp)
        return -1;
    if (cp == 1) return local_index;
    half = padded_length / (2 * (int64_t)cp);
    return local_index < half ? rank * half + local_index
                              : (2 * (int64_t)cp - 1 - rank) * half + (local_index - half);
}

static dcp_status dcp__check_cumulative(const char *name, const int32_t *cu, int32_t count,
                                        dcp_error *error)
{
    int32_t i;
    if (!cu)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "layout %s must not be NULL", name);
    if (cu[0] != 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "layout %s[0] must be 0, got %d",
                             name, (int)cu[0]);
    for (i = 0; i < count; i++)
        if (cu[i + 1] < cu[i])
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "layout %s decreases: %s[%d] = %d < %s[%d] = %d", name, name,
                                 (int)(i + 1), (int)cu[i + 1], name, (int)i, (int)cu[i]);
    return DCP_OK;
}

DCPDEF dcp_status dcp_thd_layout_validate(const dcp_thd_layout *layout, int64_t *local_rows,
                                          dcp_error *error)
{
    int32_t i, n;
    dcp_status status;
    if (!layout) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "layout must not be NULL");
    n = layout->num_sequences;
    if (n < 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "layout num_sequences must be >= 0, got %d", (int)n);
    if (layout->cp < 1 || layout->cp > DCP_MAX_RANKS)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "layout cp must be in [1, %d], got %d", DCP_MAX_RANKS,
                             (int)layout->cp);
    if ((status = dcp__check_cumulative("cu_seqlens", layout->cu_seqlens, n, error)) != DCP_OK ||
        (status = dcp__check_cumulative("cu_seqlens_padded", layout->cu_seqlens_padded, n,
                                        error)) != DCP_OK)
        return status;
    for (i = 0; i < n; i++) {
        int64_t valid = (int64_t)layout->cu_seqlens[i + 1] - layout->cu_seqlens[i];
        int64_t padded = (int64_t)layout->cu_seqlens_padded[i + 1] - layout->cu_seqlens_padded[i];
        if (valid > padded)
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "layout sequence %d has valid length %lld > padded length %lld",
                                 (int)i, (long long)valid, (long long)padded);
        if (layout->cp > 1 && padded % (2 * (int64_t)layout->cp) != 0)
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "layout sequence %d has padded length %lld, not a multiple of "
                                 "2 cp = %lld",
                                 (int)i, (long long)padded, (long long)(2 * (int64_t)layout->cp));
    }
    if (local_rows) *local_rows = layout->cu_seqlens_padded[n] / layout->cp;
    return dcp_error_clear(error);
}

/* A contiguous run of a sample's local rows: rows [row, row + rows) hold global positions
   [position, position + rows), of which the first `valid` are real tokens. */
typedef struct dcp__run {
    int64_t row;
    int64_t position;
    int64_t rows;
    int64_t valid;
} dcp__run;

/* Valid rows of a chunk of `rows` positions from `start` of a sample of `length` tokens. */
static int64_t dcp__chunk_valid(int64_t length, int64_t start, int64_t rows)
{
    int64_t valid = length - start;
    return valid < 0 ? 0 : valid > rows ? rows : valid;
}

/* The runs of rank `member` of a cp group for one sample (one run for cp 1, two otherwise;
   the two chunks of the middle rank are adjacent and become one run). Returns their count. */
static int dcp__sample_runs(int64_t length, int64_t padded, int32_t cp, int32_t member,
                            dcp__run runs[2])
{
    int64_t chunk = cp > 1 ? padded / (2 * (int64_t)cp) : padded;
    int64_t starts[2];
    int count = cp > 1 ? 2 : 1, i;
    starts[0] = cp > 1 ? member * chunk : 0;
    starts[1] = (2 * (int64_t)cp - 1 - member) * chunk;
    for (i = 0; i < count; i++) {
        runs[i].row = i * chunk;
        runs[i].position = starts[i];
        runs[i].rows = chunk;
        runs[i].valid = dcp__chunk_valid(length, starts[i], chunk);
    }
    if (count == 2 && starts[1] == starts[0] + chunk) {
        runs[0].rows = 2 * chunk;
        runs[0].valid = runs[0].valid + runs[1].valid;
        count = 1;
    }
    return count;
}

/* Index of the group of microbatch k that contains rank, or -1 when the rank is idle. */
static int32_t dcp__group_of(const dcp_plan *plan, int32_t rank, int32_t k)
{
    int32_t lo = plan->microbatch_offsets[k], hi = plan->microbatch_offsets[k + 1];
    while (lo < hi) { /* groups are sorted by first_rank */
        int32_t mid = lo + (hi - lo) / 2;
        const dcp_group *g = &plan->groups[mid];
        if (rank < g->first_rank)
            hi = mid;
        else if (rank >= g->first_rank + g->cp)
            lo = mid + 1;
        else
            return mid;
    }
    return -1;
}

/* Checks plan, rank and microbatch; *group gets the rank's group index, -1 when idle. */
static dcp_status dcp__locate(const dcp_plan *plan, int32_t rank, int32_t microbatch,
                              int32_t *group, dcp_error *error)
{
    dcp_status status = dcp_plan_trusted(plan, error);
    if (status != DCP_OK) return status;
    if (rank < 0 || rank >= plan->config.ranks)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "rank %d outside [0, %d)",
                             (int)rank, (int)plan->config.ranks);
    if (microbatch < 0 || microbatch >= plan->num_microbatches)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "microbatch %d outside [0, %d)",
                             (int)microbatch, (int)plan->num_microbatches);
    *group = dcp__group_of(plan, rank, microbatch);
    return DCP_OK;
}

DCPDEF void dcp_rank_view_destroy(dcp_rank_view *view)
{
    if (view) {
        const dcp_allocator allocator = view->allocator; /* outlives the view it frees */
        void *list[] = {view->samples, view->sample_lengths, view->cu_seqlens,
                        view->cu_seqlens_padded, view->local_offsets, view};
        dcp__free_list(&allocator, list, DCP__COUNT(list));
    }
}

static dcp_rank_view *dcp__view_alloc(const dcp_allocator *allocator, int32_t num_samples,
                                      dcp_error *error)
{
    size_t n = (size_t)num_samples;
    dcp_rank_view *view = (dcp_rank_view *)dcp__alloc_array(allocator, 1, sizeof *view,
                                                            "rank view", error);
    if (!view) return NULL;
    memset(view, 0, sizeof *view);
    if (allocator) view->allocator = *allocator;
    view->num_samples = num_samples;
    view->samples = (int32_t *)dcp__alloc_array(allocator, n, sizeof(int32_t), "view", error);
    view->sample_lengths =
        (int64_t *)dcp__alloc_array(allocator, n, sizeof(int64_t), "view", error);
    view->cu_seqlens =
        (int32_t *)dcp__alloc_array(allocator, n + 1, sizeof(int32_t), "view", error);
    view->cu_seqlens_padded =
        (int32_t *)dcp__alloc_array(allocator, n + 1, sizeof(int32_t), "view", error);
    view->local_offsets = (int32_t *)dcp__alloc_array(allocator, n + 1, sizeof(int32_t), "view",
                                                      error);
    if (!view->samples || !view->sample_lengths || !view->cu_seqlens || !view->cu_seqlens_padded ||
        !view->local_offsets) {
        dcp_rank_view_destroy(view);
        return NULL;
    }
    return view;
}

/* Fills the view's arrays from its samples and lengths; the sums must fit int32. */
static dcp_status dcp__view_fill(dcp_rank_view *view, const dcp_config *config, dcp_error *error)
{
    int64_t valid = 0, padded = 0;
    int32_t i;
    view->pad_multiple = view->idle ? 0 : dcp__pad_multiple(config, view->cp);
    view->cu_seqlens[0] = view->cu_seqlens_padded[0] = view->local_offsets[0] = 0;
    view->max_seqlen = 0;
    for (i = 0; i < view->num_samples; i++) {
        int64_t p = dcp__padded(config, view->sample_lengths[i], view->cp);
        valid += view->sample_lengths[i];
        padded += p;
        if (padded > INT32_MAX)
            return dcp_error_set(error, DCP_ERROR_OVERFLOW,
                                 "microbatch %d, rank %d: %lld padded tokens overflow the int32 "
                                 "cu_seqlens",
                                 (int)view->microbatch, (int)view->rank, (long long)padded);
        view->cu_seqlens[i + 1] = (int32_t)valid;
        view->cu_seqlens_padded[i + 1] = (int32_t)padded;
        view->local_offsets[i + 1] = (int32_t)(padded / view->cp);
        if (p > view->max_seqlen) view->max_seqlen = (int32_t)p;
    }
    view->local_tokens = view->local_offsets[view->num_samples];
    return DCP_OK;
}

DCPDEF dcp_status dcp_rank_view_create(const dcp_plan *plan, int32_t rank, int32_t microbatch,
                                       dcp_rank_view **view, dcp_error *error)
{
    const dcp_group *group = NULL;
    dcp_rank_view *v;
    dcp_status status;
    int32_t g = -1, i; /* set by dcp__locate on success; -1 keeps g++ -O2 from guessing */
    if (!view) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "view must not be NULL");
    *view = NULL;
    if ((status = dcp__locate(plan, rank, microbatch, &g, error)) != DCP_OK) return status;
    if (g >= 0) group = &plan->groups[g];
    v = dcp__view_alloc(&plan->config.allocator, group ? group->sample_count : 0, error);
    if (!v) return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    v->rank = rank;
    v->microbatch = microbatch;
    v->idle = group == NULL;
    v->first_rank = group ? group->first_rank : DCP_NO_GROUP;
    v->cp = group ? group->cp : 0;
    v->rank_in_group = group ? rank - group->first_rank : DCP_NO_GROUP;
    for (i = 0; i < v->num_samples; i++) {
        v->samples[i] = plan->group_samples[group->sample_offset + i];
        v->sample_lengths[i] = plan->sample_lengths[v->samples[i]];
    }
    if ((status = dcp__view_fill(v, &plan->config, error)) != DCP_OK) {
        dcp_rank_view_destroy(v);
        return status;
    }
    *view = v;
    return dcp_error_clear(error);
}

/* The idle form: no group, no samples, nothing to pad (see dcp_rank_view). */
static dcp_status dcp__view_check_idle(const dcp_rank_view *v, dcp_error *error)
{
    if (v->cp != 0 || v->first_rank != DCP_NO_GROUP || v->rank_in_group != DCP_NO_GROUP ||
        v->num_samples != 0 || v->pad_multiple != 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "idle view of rank %d: cp %d, first_rank %d, rank_in_group %d, %d "
                             "samples, pad_multiple %lld; idle is cp 0, first_rank and "
                             "rank_in_group DCP_NO_GROUP (-1), no samples, pad_multiple 0",
                             (int)v->rank, (int)v->cp, (int)v->first_rank,
                             (int)v->rank_in_group, (int)v->num_samples,
                             (long long)v->pad_multiple);
    return DCP_OK;
}

static dcp_status dcp__view_check_header(const dcp_rank_view *v, dcp_error *error)
{
    dcp_status status;
    if (v->rank < 0 || v->microbatch < 0 || (v->idle != 0 && v->idle != 1))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "view of rank %d: microbatch %d or idle %d out of range",
                             (int)v->rank, (int)v->microbatch, (int)v->idle);
    if (v->idle && (status = dcp__view_check_idle(v, error)) != DCP_OK) return status;
    if (!v->idle &&
        (v->cp < 1 || v->cp > DCP_MAX_RANKS || v->first_rank < 0 ||
         v->rank_in_group != v->rank - v->first_rank || v->rank_in_group < 0 ||
         v->rank_in_group >= v->cp))
        return dcp_error_set(
            error, DCP_ERROR_INVALID_ARGUMENT,
            "view of rank %d: group (first_rank %d, cp %d, rank_in_group %d) is not "
            "a group containing the rank",
            (int)v->rank, (int)v->first_rank, (int)v->cp, (int)v->rank_in_group);
    if (!v->idle && v->num_samples < 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "view of rank %d in a group has %d samples, not >= 1", (int)v->rank,
                             (int)v->num_samples);
    if (!v->idle && (v->pad_multiple < 1 ||
                     (v->cp > 1 && v->pad_multiple % (2 * (int64_t)v->cp) != 0)))
        return dcp_error_set(
            error, DCP_ERROR_INVALID_ARGUMENT,
            "view of rank %d: pad_multiple %lld is not a positive multiple of 2 cp", (int)v->rank,
            (long long)v->pad_multiple);
    if (!v->samples || !v->sample_lengths || !v->cu_seqlens || !v->cu_seqlens_padded ||
        !v->local_offsets)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "view of rank %d: NULL array",
                             (int)v->rank);
    return DCP_OK;
}

DCPDEF dcp_status dcp_rank_view_validate(const dcp_rank_view *v, dcp_error *error)
{
    int32_t i, longest = 0;
    dcp_status status;
    if (!v) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "view must not be NULL");
    if ((status = dcp__view_check_header(v, error)) != DCP_OK) return status;
    if (v->cu_seqlens[0] != 0 || v->cu_seqlens_padded[0] != 0 || v->local_offsets[0] != 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "view cu arrays must start at 0");
    for (i = 0; i < v->num_samples; i++) {
        int64_t valid = (int64_t)v->cu_seqlens[i + 1] - v->cu_seqlens[i];
        int64_t padded = (int64_t)v->cu_seqlens_padded[i + 1] - v->cu_seqlens_padded[i];
        if (v->samples[i] < 0 || valid < 1 || valid != v->sample_lengths[i] || padded < valid ||
            padded % v->pad_multiple != 0 ||
            v->local_offsets[i + 1] != v->cu_seqlens_padded[i + 1] / v->cp)
            return dcp_error_set(
                error, DCP_ERROR_INVALID_ARGUMENT,
                "view of rank %d, sample %d (id %d): valid %lld, padded %lld, local "
                "offset %d are inconsistent",
                (int)v->rank, (int)i, (int)v->samples[i], (long long)valid, (long long)padded,
                (int)v->local_offsets[i + 1]);
        if (padded > longest) longest = (int32_t)padded;
    }
    if (v->max_seqlen != longest || v->local_tokens != v->local_offsets[v->num_samples])
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "view of rank %d: max_seqlen %d or local_tokens %lld do not match the "
                             "arrays",
                             (int)v->rank, (int)v->max_seqlen, (long long)v->local_tokens);
    return dcp_error_clear(error);
}

/* The runs of sample i of a validated view. */
static int dcp__view_runs(const dcp_rank_view *v, int32_t i, dcp__run runs[2])
{
    int64_t padded = (int64_t)v->cu_seqlens_padded[i + 1] - v->cu_seqlens_padded[i];
    return dcp__sample_runs(v->sample_lengths[i], padded, v->cp, v->rank_in_group, runs);
}

DCPDEF dcp_status dcp_rank_view_positions(const dcp_rank_view *view, int32_t *slot_sample,
                                          int64_t *positions, dcp_error *error)
{
    dcp_status status = dcp_rank_view_validate(view, error);
    int32_t i;
    if (status != DCP_OK) return status;
    for (i = 0; i < view->num_samples; i++) {
        dcp__run runs[2];
        int count = dcp__view_runs(view, i, runs), r;
        int64_t base = view->local_offsets[i], k;
        for (r = 0; r < count; r++)
            for (k = 0; k < runs[r].rows; k++) {
                int64_t row = base + runs[r].row + k;
                if (slot_sample) slot_sample[row] = i;
                if (positions) positions[row] = k < runs[r].valid ? runs[r].position + k : -1;
            }
    }
    return dcp_error_clear(error);
}

/* Run building for dcp_rank_view_runs: the open run grows while rows continue it (the next
   row, and the next position or padding after padding, of one sample); a closed run is
   counted always and written while it fits. */
typedef struct dcp__run_list {
    dcp_row_run *runs;
    int64_t capacity, count;
    dcp_row_run open; /* rows 0: none open */
} dcp__run_list;

static void dcp__run_close(dcp__run_list *list)
{
    if (list->open.rows == 0) return;
    if (list->runs && list->count < list->capacity) list->runs[list->count] = list->open;
    list->count++;
    list->open.rows = 0;
}

static void dcp__run_add(dcp__run_list *list, int32_t slot, int64_t row, int64_t rows,
                         int64_t position)
{
    const dcp_row_run *o = &list->open;
    int continues = o->rows > 0 && o->slot == slot && o->first_row + o->rows == row &&
                    (position < 0 ? o->position < 0
                                  : o->position >= 0 && o->position + o->rows == position);
    if (rows == 0) return;
    if (continues) {
        list->open.rows += rows;
        return;
    }
    dcp__run_close(list);
    list->open.slot = slot;
    list->open.first_row = row;
    list->open.rows = rows;
    list->open.position = position;
}

DCPDEF dcp_status dcp_rank_view_runs(const dcp_rank_view *view, dcp_row_run *runs,
                                     int32_t capacity, int32_t *count, dcp_error *error)
{
    dcp__run_list list;
    dcp_status status = dcp_rank_view_validate(view, error);
    int32_t i;
    if (status != DCP_OK) return status;
    if (!count || (runs && capacity < 0))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "count must not be NULL and capacity >= 0 (capacity %d)",
                             (int)capacity);
    memset(&list, 0, sizeof list);
    list.runs = runs;
    list.capacity = runs ? capacity : 0;
    for (i = 0; i < view->num_samples; i++) {
        dcp__run chunks[2];
        int n = dcp__view_runs(view, i, chunks), c;
        for (c = 0; c < n; c++) {
            int64_t row = view->local_offsets[i] + chunks[c].row;
            dcp__run_add(&list, i, row, chunks[c].valid, chunks[c].position);
            dcp__run_add(&list, i, row + chunks[c].valid, chunks[c].rows - chunks[c].valid, -1);
        }
    }
    dcp__run_close(&list);
    if (list.count > INT32_MAX)
        return dcp_error_set(error, DCP_ERROR_OVERFLOW, "%lld runs overflow the int32 count",
                             (long long)list.count);
    *count = (int32_t)list.count;
    if (runs && list.count > capacity)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "capacity %d is too small: the view has %d runs", (int)capacity,
                             (int)list.count);
    return dcp_error_clear(error);
}

/* The valid rows of half `half` of sample i on group rank `member`: the first one, relative
   to the sample's local offset, and their count (valid rows are a prefix of each chunk, and
   the second chunk has some only when the first is full). */
static int64_t dcp__half_valid(const dcp_rank_view *v, int32_t i, int32_t member, dcp_half half,
                               int64_t *first_row)
{
    int64_t padded = (int64_t)v->cu_seqlens_padded[i + 1] - v->cu_seqlens_padded[i];
    int64_t length = v->sample_lengths[i], chunk = padded / (2 * (int64_t)v->cp);
    int64_t first = dcp__chunk_valid(length, member * chunk, chunk);
    int64_t second = dcp__chunk_valid(length, (2 * (int64_t)v->cp - 1 - member) * chunk, chunk);
    *first_row = half == DCP_HALF_SECOND ? chunk : 0;
    if (v->cp == 1) return length;
    return half == DCP_HALF_FIRST ? first : half == DCP_HALF_SECOND ? second : first + second;
}

static dcp_status dcp__check_varlen_args(const dcp_rank_view *view, int32_t causal,
                                         const dcp_varlen_call *call, const dcp_varlen_rows *rows,
                                         dcp_error *error)
{
    dcp_status status = dcp_rank_view_validate(view, error);
    if (status != DCP_OK) return status;
    if (view->idle)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "rank %d is idle in microbatch %d: it runs no attention",
                             (int)view->rank, (int)view->microbatch);
    if (causal != 0 && causal != 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "causal must be 0 or 1, got %d",
                             (int)causal);
    if (!call || !rows || !rows->slot || !rows->q_row || !rows->kv_row || !rows->cu_seqlens_q ||
        !rows->cu_seqlens_k)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "call, rows and its five arrays must not be NULL");
    return DCP_OK;
}

DCPDEF dcp_status dcp_rank_view_varlen_call(const dcp_rank_view *view, int32_t step,
                                            int32_t causal, dcp_varlen_call *call,
                                            const dcp_varlen_rows *rows, dcp_error *error)
{
    dcp_ring_step plan;
    dcp_status status = dcp__check_varlen_args(view, causal, call, rows, error);
    int32_t i;
    if (status != DCP_OK) return status;
    if ((status = dcp_ring_step_plan(view->cp, view->rank_in_group, step, causal, &plan,
                                     error)) != DCP_OK)
        return status;
    memset(call, 0, sizeof *call);
    call->kv_rank = plan.view.kv_rank;
    call->causal = plan.causal;
    rows->cu_seqlens_q[0] = rows->cu_seqlens_k[0] = 0;
    for (i = 0; i < view->num_samples; i++) {
        int64_t q_first, kv_first;
        int64_t q = dcp__half_valid(view, i, plan.view.q_rank, plan.view.q_half, &q_first);
        int64_t k = dcp__half_valid(view, i, plan.view.kv_rank, plan.view.kv_half, &kv_first);
        int32_t j = call->num_sequences;
        if (q == 0 || k == 0) continue; /* nothing to attend to, or no one asking */
        rows->slot[j] = i;
        rows->q_row[j] = (int32_t)(view->local_offsets[i] + q_first);
        rows->kv_row[j] = (int32_t)(view->local_offsets[i] + kv_first);
        rows->cu_seqlens_q[j + 1] = (int32_t)(rows->cu_seqlens_q[j] + q);
        rows->cu_seqlens_k[j + 1] = (int32_t)(rows->cu_seqlens_k[j] + k);
        if (q > call->max_seqlen_q) call->max_seqlen_q = (int32_t)q;
        if (k > call->max_seqlen_k) call->max_seqlen_k = (int32_t)k;
        call->num_sequences++;
    }
    call->total_q = rows->cu_seqlens_q[call->num_sequences];
    call->total_k = rows->cu_seqlens_k[call->num_sequences];
    return dcp_error_clear(error);
}

static dcp_status dcp__check_transfer_args(const dcp_rank_view *view, const void *data,
                                           size_t element_size, const void *local,
                                           dcp_error *error)
{
    dcp_status status = dcp_rank_view_validate(view, error);
    if (status != DCP_OK) return status;
    if (element_size == 0 || (!data && view->num_samples > 0) ||
        (!local && view->local_tokens > 0))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "element_size must be > 0 and buffers non-NULL (element_size %zu)",
                             element_size);
    if ((uint64_t)view->local_tokens > SIZE_MAX / element_size)
        return dcp_error_set(error, DCP_ERROR_OVERFLOW, "%lld rows of %zu bytes overflow size_t",
                             (long long)view->local_tokens, element_size);
    return DCP_OK;
}

DCPDEF dcp_status dcp_rank_view_pack(const dcp_rank_view *view, const void *const *sample_data,
                                     size_t element_size, void *local, dcp_error *error)
{
    unsigned char *out = (unsigned char *)local;
    int32_t i;
    dcp_status status = dcp__check_transfer_args(view, sample_data, element_size, local, error);
    if (status != DCP_OK) return status;
    for (i = 0; i < view->num_samples; i++) {
        const unsigned char *in = (const unsigned char *)sample_data[view->samples[i]];
        dcp__run runs[2];
        int count = dcp__view_runs(view, i, runs), r;
        for (r = 0; r < count; r++) {
            unsigned char *row = out + ((size_t)view->local_offsets[i] + (size_t)runs[r].row) *
                                           element_size;
            if (runs[r].valid > 0 && !in)
                return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "sample_data[%d] is NULL",
                                     (int)view->samples[i]);
            if (runs[r].valid > 0)
                memcpy(row, in + (size_t)runs[r].position * element_size,
                       (size_t)runs[r].valid * element_size);
            memset(row + (size_t)runs[r].valid * element_size, 0,
                   (size_t)(runs[r].rows - runs[r].valid) * element_size);
        }
    }
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_rank_view_unpack(const dcp_rank_view *view, const void *local,
                                       size_t element_size, void *const *sample_data,
                                       dcp_error *error)
{
    const unsigned char *in = (const unsigned char *)local;
    int32_t i;
    dcp_status status = dcp__check_transfer_args(view, sample_data, element_size, local, error);
    if (status != DCP_OK) return status;
    for (i = 0; i < view->num_samples; i++) {
        unsigned char *out = (unsigned char *)sample_data[view->samples[i]];
        dcp__run runs[2];
        int count = dcp__view_runs(view, i, runs), r;
        for (r = 0; r < count; r++) {
            if (runs[r].valid == 0) continue;
            if (!out)
                return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "sample_data[%d] is NULL",
                                     (int)view->samples[i]);
            memcpy(out + (size_t)runs[r].position * element_size,
                   in + ((size_t)view->local_offsets[i] + (size_t)runs[r].row) * element_size,
                   (size_t)runs[r].valid * element_size);
        }
    }
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_pad_to_alignment(int32_t *cu_seqlens_padded, int32_t num_sequences,
                                       int64_t alignment, int64_t *added_rows, dcp_error *error)
{
    int64_t total, aligned;
    if (!cu_seqlens_padded || !added_rows || num_sequences < 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "need cu_seqlens_padded and added_rows and num_sequences >= 1, got %d",
                             (int)num_sequences);
    if (alignment < 1 || alignment > INT32_MAX)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "alignment must be in [1, %d], got %lld", INT32_MAX,
                             (long long)alignment);
    total = cu_seqlens_padded[num_sequences];
    if (total < cu_seqlens_padded[num_sequences - 1] || cu_seqlens_padded[0] != 0)
        return dcp_error_set(
            error, DCP_ERROR_INVALID_ARGUMENT,
            "cu_seqlens_padded must start at 0 and end non-decreasing, ends %d, %d",
            (int)cu_seqlens_padded[num_sequences - 1], (int)total);
    aligned = (total + alignment - 1) / alignment * alignment;
    if (aligned > INT32_MAX)
        return dcp_error_set(error, DCP_ERROR_OVERFLOW, "%lld rows aligned to %lld overflow int32",
                             (long long)total, (long long)alignment);
    cu_seqlens_padded[num_sequences] = (int32_t)aligned;
    *added_rows = aligned - total;
    return dcp_error_clear(error);
}

/* ----------------------------------------------------------------- exchange: reroute */

DCPDEF void dcp_reroute_destroy(dcp_reroute *reroute)
{
    dcp_allocator allocator;
    if (!reroute) return;
    allocator = reroute->allocator;
    dcp_free(&allocator, reroute->transfers);
    dcp_free(&allocator, reroute);
}

/* Visits every (microbatch, sample, destination rank, run) of the plan in one global order and
   records the transfers that involve `rank`; with out NULL it only counts them. */
static int32_t dcp__reroute_walk(const dcp_plan *plan, const int32_t *holders, int32_t rank,
                                 dcp_reroute *out)
{
    int32_t k, g, i, member, count = 0;
    for (k = 0; k < plan->num_microbatches; k++)
        for (g = plan->microbatch_offsets[k]; g < plan->microbatch_offsets[k + 1]; g++) {
            const dcp_group *group = &plan->groups[g];
            int64_t local_offset = 0;
            for (i = 0; i < group->sample_count; i++) {
                int32_t s = plan->group_samples[group->sample_offset + i];
                int64_t length = plan->sample_lengths[s];
                int64_t padded = dcp__padded(&plan->config, length, group->cp);
                for (member = 0; member < group->cp; member++) {
                    int32_t destination = group->first_rank + member;
                    dcp__run runs[2];
                    int runs_count = dcp__sample_runs(length, padded, group->cp, member, runs), r;
                    if (rank != destination && rank != holders[s]) continue;
                    for (r = 0; r < runs_count; r++) {
                        dcp_transfer *t;
                        if (runs[r].valid == 0) continue; /* padding is never sent */
                        if (out) {
                            t = &out->transfers[count];
                            t->kind = holders[s] == destination ? DCP_TRANSFER_COPY
                                      : rank == destination     ? DCP_TRANSFER_RECV
                                                                : DCP_TRANSFER_SEND;
                            t->peer = t->kind == DCP_TRANSFER_SEND ? destination : holders[s];
                            t->microbatch = k;
                            t->sample = s;
                            t->source_begin = runs[r].position;
                            t->source_end = runs[r].position + runs[r].valid;
                            t->destination_row = local_offset + runs[r].row;
                            if (t->kind == DCP_TRANSFER_SEND) out->send_tokens += runs[r].valid;
                            else if (t->kind == DCP_TRANSFER_RECV)
                                out->recv_tokens += runs[r].valid;
                            else out->copy_tokens += runs[r].valid;
                        }
                        count++;
                    }
                }
                local_offset += padded / group->cp;
            }
        }
    return count;
}

DCPDEF dcp_status dcp_reroute_create(const dcp_plan *plan, const int32_t *holders, int32_t rank,
                                     dcp_reroute **reroute, dcp_error *error)
{
    const dcp_allocator *allocator;
    dcp_reroute *r;
    dcp_status status;
    int32_t s;
    if (!reroute)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "reroute must not be NULL");
    *reroute = NULL;
    if ((status = dcp_plan_trusted(plan, error)) != DCP_OK) return status;
    if (!holders)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "holders must not be NULL");
    if (rank < 0 || rank >= plan->config.ranks)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "rank %d outside [0, %d)",
                             (int)rank, (int)plan->config.ranks);
    for (s = 0; s < plan->num_samples; s++)
        if (holders[s] < 0 || holders[s] >= plan->config.ranks)
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "holders[%d] = %d outside [0, %d)", (int)s, (int)holders[s],
                                 (int)plan->config.ranks);
    allocator = &plan->config.allocator;
    r = (dcp_reroute *)dcp__alloc_array(allocator, 1, sizeof *r, "reroute", error);
    if (!r) return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    memset(r, 0, sizeof *r);
    r->allocator = *allocator;
    r->rank = rank;
    r->count = dcp__reroute_walk(plan, holders, rank, NULL);
    r->transfers = (dcp_transfer *)dcp__alloc_array(allocator, (size_t)r->count,
                                                    sizeof(dcp_transfer), "reroute", error);
    if (!r->transfers) {
        dcp_reroute_destroy(r);
        return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    }
    (void)dcp__reroute_walk(plan, holders, rank, r);
    *reroute = r;
    return dcp_error_clear(error);
}

/* ---------------------------------------------------------- exchange: the binary format */

static const unsigned char dcp__plan_magic[8] = {'D', 'C', 'P', 'P', 'L', 'A', 'N', 0};
static const unsigned char dcp__view_magic[8] = {'D', 'C', 'P', 'V', 'I', 'E', 'W', 0};
/* Field widths: every integer and double is little-endian at a fixed width, whatever the
   host. */
#define DCP__I32_BYTES 4
#define DCP__I64_BYTES 8
#define DCP__F64_BYTES 8
#define DCP__MAGIC_BYTES 8
/* magic, version (int32), reserved (int32), total size (int64) */
#define DCP__PREAMBLE_BYTES (DCP__MAGIC_BYTES + 2 * DCP__I32_BYTES + DCP__I64_BYTES)
#define DCP__CHECKSUM_BYTES 8 /* FNV-1a, 64 bits */
/* The records of the two bodies, in the order dcp__put_config / _plan_body / _view write
   them; tests/test_thd.c checks serialized sizes against them. */
#define DCP__CONFIG_I32_FIELDS (14 + DCP_CP_SIZE_LIST_CAPACITY) /* ranks, min_cp ...
                                     sync_ranks, ring_charge, cp_sizes, cover_ranks,
                                     cp_size_count, cp_size_list, head_count */
#define DCP__CONFIG_I64_FIELDS 2 /* max_tokens_per_rank, memory_limit */
#define DCP__CONFIG_F64_FIELDS 3 /* the cost model */
#define DCP__CONFIG_BYTES                                                                       \
    (DCP__CONFIG_I32_FIELDS * DCP__I32_BYTES + DCP__CONFIG_I64_FIELDS * DCP__I64_BYTES +        \
     DCP__CONFIG_F64_FIELDS * DCP__F64_BYTES)
#define DCP__PLAN_COUNTS 3 /* samples, microbatches, groups (int32 each) */
#define DCP__PLAN_SAMPLE_BYTES (DCP__I64_BYTES + DCP__I32_BYTES) /* length, group slot */
#define DCP__PLAN_OFFSET_BYTES DCP__I32_BYTES /* one of num_microbatches + 1 offsets */
#define DCP__PLAN_GROUP_BYTES (4 * DCP__I32_BYTES) /* first_rank, cp, sample_offset, _count */
/* rank ... max_seqlen (8 int32), pad_multiple and local_tokens (int64) */
#define DCP__VIEW_HEADER_BYTES (8 * DCP__I32_BYTES + 2 * DCP__I64_BYTES)
#define DCP__VIEW_SAMPLE_BYTES (DCP__I32_BYTES + DCP__I64_BYTES) /* sample id, length */
/* cu_seqlens, cu_seqlens_padded, local_offsets: num_samples + 1 int32 each */
#define DCP__VIEW_CUMULATIVE_ARRAYS 3
#define DCP__FNV_OFFSET_BASIS UINT64_C(14695981039346656037)
#define DCP__FNV_PRIME UINT64_C(1099511628211)

static uint64_t dcp__fnv1a(const unsigned char *data, size_t size)
{
    uint64_t hash = DCP__FNV_OFFSET_BASIS;
    size_t i;
    for (i = 0; i < size; i++) hash = (hash ^ data[i]) * DCP__FNV_PRIME;
    return hash;
}

/* Appends little-endian integers; counts the size always, writes only while it fits. */
typedef struct dcp__writer {
    unsigned char *data;
    size_t capacity;
    size_t size;
} dcp__writer;

static void dcp__put(dcp__writer *w, uint64_t value, int bytes)
{
    int i;
    for (i = 0; i < bytes; i++, w->size++)
        if (w->data && w->size < w->capacity) w->data[w->size] = (unsigned char)(value >> (8 * i));
}

static void dcp__put_i32(dcp__writer *w, int32_t v) { dcp__put(w, (uint32_t)v, DCP__I32_BYTES); }
static void dcp__put_i64(dcp__writer *w, int64_t v) { dcp__put(w, (uint64_t)v, DCP__I64_BYTES); }

static void dcp__put_f64(dcp__writer *w, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    dcp__put(w, bits, DCP__F64_BYTES);
}

/* Reads little-endian integers; once past the end every read fails and returns 0. */
typedef struct dcp__reader {
    const unsigned char *data;
    size_t size;
    size_t position;
    int overrun;
} dcp__reader;

static uint64_t dcp__get(dcp__reader *r, int bytes)
{
    uint64_t value = 0;
    int i;
    if (r->overrun || r->size - r->position < (size_t)bytes) {
        r->overrun = 1;
        return 0;
    }
    for (i = 0; i < bytes; i++) value |= (uint64_t)r->data[r->position + (size_t)i] << (8 * i);
    r->position += (size_t)bytes;
    return value;
}

static int32_t dcp__get_i32(dcp__reader *r)
{
    return (int32_t)(uint32_t)dcp__get(r, DCP__I32_BYTES);
}
static int64_t dcp__get_i64(dcp__reader *r) { return (int64_t)dcp__get(r, DCP__I64_BYTES); }

static double dcp__get_f64(dcp__reader *r)
{
    uint64_t bits = dcp__get(r, DCP__F64_BYTES);
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

static void dcp__put_preamble(dcp__writer *w, const unsigned char magic[8], uint64_t total)
{
    int i;
    for (i = 0; i < DCP__MAGIC_BYTES; i++) dcp__put(w, magic[i], 1);
    dcp__put(w, DCP_FORMAT_VERSION, DCP__I32_BYTES);
    dcp__put(w, 0, DCP__I32_BYTES); /* reserved: must be zero */
    dcp__put(w, total, DCP__I64_BYTES);
}

/* Appends the checksum and reports the size (or that the buffer is too small). */
static dcp_status dcp__writer_finish(dcp__writer *w, size_t *size, dcp_error *error)
{
    if (w->data && w->size + DCP__CHECKSUM_BYTES <= w->capacity)
        dcp__put(w, dcp__fnv1a(w->data, w->size), DCP__CHECKSUM_BYTES);
    else
        w->size += DCP__CHECKSUM_BYTES;
    if (size) *size = w->size;
    if (w->data && w->size > w->capacity)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "buffer of %zu bytes is too small: %zu needed", w->capacity, w->size);
    return dcp_error_clear(error);
}

/* Checks magic, version, reserved word, total size and checksum; leaves the reader after the
   preamble, with its size shortened to exclude the checksum. */
static dcp_status dcp__read_preamble(dcp__reader *r, const unsigned char magic[8],
                                     const char *what, dcp_error *error)
{
    uint64_t version, reserved, total;
    int i;
    r->position = 0;
    r->overrun = 0;
    if (!r->data || r->size < DCP__PREAMBLE_BYTES + DCP__CHECKSUM_BYTES)
        return dcp_error_set(error, DCP_ERROR_CORRUPT_DATA,
                             "%s: %zu bytes is shorter than a header", what, r->size);
    for (i = 0; i < DCP__MAGIC_BYTES; i++)
        if (r->data[i] != magic[i])
            return dcp_error_set(error, DCP_ERROR_CORRUPT_DATA, "%s: bad magic at byte %d", what,
                                 i);
    r->position = DCP__MAGIC_BYTES;
    version = dcp__get(r, DCP__I32_BYTES);
    reserved = dcp__get(r, DCP__I32_BYTES);
    total = dcp__get(r, DCP__I64_BYTES);
    if (version != DCP_FORMAT_VERSION)
        return dcp_error_set(error, DCP_ERROR_UNSUPPORTED,
                             "%s: format version %llu, this build reads %d", what,
                             (unsigned long long)version, DCP_FORMAT_VERSION);
    if (reserved != 0)
        return dcp_error_set(error, DCP_ERROR_CORRUPT_DATA, "%s: reserved word is %llu, not 0",
                             what, (unsigned long long)reserved);
    if (total != r->size)
        return dcp_error_set(error, DCP_ERROR_CORRUPT_DATA,
                             "%s: header says %llu bytes, buffer has %zu", what,
                             (unsigned long long)total, r->size);
    {
        dcp__reader tail = *r;
        uint64_t stored;
        tail.position = r->size - DCP__CHECKSUM_BYTES;
        stored = dcp__get(&tail, 8);
        if (stored != dcp__fnv1a(r->data, r->size - DCP__CHECKSUM_BYTES))
            return dcp_error_set(error, DCP_ERROR_CORRUPT_DATA, "%s: checksum mismatch", what);
    }
    r->size -= DCP__CHECKSUM_BYTES;
    return DCP_OK;
}

/* The scalar fields of a record in the format, in order: one table per record serves the
   writer and the reader, so the two cannot drift apart. */
typedef enum dcp__field_kind {
    DCP__FIELD_I32,
    DCP__FIELD_I64,
    DCP__FIELD_F64,
    DCP__FIELD_STRATEGY,   /* a dcp_strategy, stored as int32 */
    DCP__FIELD_RING_CHARGE, /* a dcp_ring_charge, stored as int32 */
    DCP__FIELD_CP_SIZES     /* a dcp_cp_sizes, stored as int32 */
} dcp__field_kind;

typedef struct dcp__field {
    size_t offset; /* in the record's struct */
    dcp__field_kind kind;
} dcp__field;

#define DCP__COST_FIELD(name) (offsetof(dcp_config, cost) + offsetof(dcp_cost_model, name))
#define DCP__LIST_FIELD(i)                                                                      \
    {offsetof(dcp_config, cp_size_list) + (i) * sizeof(int32_t), DCP__FIELD_I32}

static const dcp__field dcp__config_fields[] = {
    {offsetof(dcp_config, ranks), DCP__FIELD_I32},
    {offsetof(dcp_config, max_tokens_per_rank), DCP__FIELD_I64},
    {offsetof(dcp_config, min_cp), DCP__FIELD_I32},
    {offsetof(dcp_config, max_cp), DCP__FIELD_I32},
    {offsetof(dcp_config, microbatch_multiple), DCP__FIELD_I32},
    {offsetof(dcp_config, pad_multiple_cp1), DCP__FIELD_I32},
    {offsetof(dcp_config, pad_multiple), DCP__FIELD_I32},
    {offsetof(dcp_config, strategy), DCP__FIELD_STRATEGY},
    {offsetof(dcp_config, improve_moves), DCP__FIELD_I32},
    {offsetof(dcp_config, sync_ranks), DCP__FIELD_I32},
    {DCP__COST_FIELD(attn_coeff), DCP__FIELD_F64},
    {DCP__COST_FIELD(linear_coeff), DCP__FIELD_F64},
    {DCP__COST_FIELD(ring_step_cost), DCP__FIELD_F64},
    {offsetof(dcp_config, ring_charge), DCP__FIELD_RING_CHARGE},
    {offsetof(dcp_config, cp_sizes), DCP__FIELD_CP_SIZES},
    {offsetof(dcp_config, cover_ranks), DCP__FIELD_I32},
    {offsetof(dcp_config, cp_size_count), DCP__FIELD_I32},
    DCP__LIST_FIELD(0), DCP__LIST_FIELD(1), DCP__LIST_FIELD(2), DCP__LIST_FIELD(3),
    DCP__LIST_FIELD(4), DCP__LIST_FIELD(5), DCP__LIST_FIELD(6), DCP__LIST_FIELD(7),
    DCP__LIST_FIELD(8), DCP__LIST_FIELD(9), DCP__LIST_FIELD(10), DCP__LIST_FIELD(11),
    DCP__LIST_FIELD(12), DCP__LIST_FIELD(13), DCP__LIST_FIELD(14), DCP__LIST_FIELD(15),
    {offsetof(dcp_config, head_count), DCP__FIELD_I32},
    {offsetof(dcp_config, memory_limit), DCP__FIELD_I64}};
/* the table lists every entry of the size list */
typedef char dcp__list_fields_complete[DCP_CP_SIZE_LIST_CAPACITY == 16 ? 1 : -1];

/* A view's scalars; its arrays follow them. */
#define DCP__VIEW_FIELD(name, kind) {offsetof(dcp_rank_view, name), DCP__FIELD_##kind}
static const dcp__field dcp__view_header_fields[] = {
    DCP__VIEW_FIELD(rank, I32),              DCP__VIEW_FIELD(microbatch, I32),
    DCP__VIEW_FIELD(first_rank, I32),        DCP__VIEW_FIELD(cp, I32),
    DCP__VIEW_FIELD(rank_in_group, I32),     DCP__VIEW_FIELD(idle, I32),
    DCP__VIEW_FIELD(num_samples, I32),       DCP__VIEW_FIELD(max_seqlen, I32),
    DCP__VIEW_FIELD(pad_multiple, I64),      DCP__VIEW_FIELD(local_tokens, I64)};

static void dcp__put_fields(dcp__writer *w, const void *record, const dcp__field *fields,
                            int32_t count)
{
    int32_t i;
    for (i = 0; i < count; i++) {
        const void *at = (const unsigned char *)record + fields[i].offset;
        switch (fields[i].kind) {
        case DCP__FIELD_I32: dcp__put_i32(w, *(const int32_t *)at); break;
        case DCP__FIELD_I64: dcp__put_i64(w, *(const int64_t *)at); break;
        case DCP__FIELD_F64: dcp__put_f64(w, *(const double *)at); break;
        case DCP__FIELD_STRATEGY: dcp__put_i32(w, (int32_t)*(const dcp_strategy *)at); break;
        case DCP__FIELD_RING_CHARGE:
            dcp__put_i32(w, (int32_t)*(const dcp_ring_charge *)at);
            break;
        case DCP__FIELD_CP_SIZES: dcp__put_i32(w, (int32_t)*(const dcp_cp_sizes *)at); break;
        }
    }
}

static void dcp__get_fields(dcp__reader *r, void *record, const dcp__field *fields,
                            int32_t count)
{
    int32_t i;
    for (i = 0; i < count; i++) {
        void *at = (unsigned char *)record + fields[i].offset;
        switch (fields[i].kind) {
        case DCP__FIELD_I32: *(int32_t *)at = dcp__get_i32(r); break;
        case DCP__FIELD_I64: *(int64_t *)at = dcp__get_i64(r); break;
        case DCP__FIELD_F64: *(double *)at = dcp__get_f64(r); break;
        case DCP__FIELD_STRATEGY: *(dcp_strategy *)at = (dcp_strategy)dcp__get_i32(r); break;
        case DCP__FIELD_RING_CHARGE:
            *(dcp_ring_charge *)at = (dcp_ring_charge)dcp__get_i32(r);
            break;
        case DCP__FIELD_CP_SIZES: *(dcp_cp_sizes *)at = (dcp_cp_sizes)dcp__get_i32(r); break;
        }
    }
}

static void dcp__put_config(dcp__writer *w, const dcp_config *c)
{
    dcp__put_fields(w, c, dcp__config_fields, DCP__COUNT(dcp__config_fields));
}

static void dcp__get_config(dcp__reader *r, dcp_config *c)
{
    memset(c, 0, sizeof *c);
    dcp__get_fields(r, c, dcp__config_fields, DCP__COUNT(dcp__config_fields));
}

static void dcp__put_plan_body(dcp__writer *w, const dcp_plan *plan)
{
    int32_t i;
    dcp__put_config(w, &plan->config);
    dcp__put_i32(w, plan->num_samples);
    dcp__put_i32(w, plan->num_microbatches);
    dcp__put_i32(w, plan->num_groups);
    for (i = 0; i < plan->num_samples; i++) dcp__put_i64(w, plan->sample_lengths[i]);
    for (i = 0; i <= plan->num_microbatches; i++) dcp__put_i32(w, plan->microbatch_offsets[i]);
    for (i = 0; i < plan->num_groups; i++) {
        dcp__put_i32(w, plan->groups[i].first_rank);
        dcp__put_i32(w, plan->groups[i].cp);
        dcp__put_i32(w, plan->groups[i].sample_offset);
        dcp__put_i32(w, plan->groups[i].sample_count);
    }
    for (i = 0; i < plan->num_samples; i++) dcp__put_i32(w, plan->group_samples[i]);
}

/* Writes magic, version, size, the body and the checksum: body() runs twice, once to count. */
typedef void (*dcp__body_writer)(dcp__writer *w, const void *object);

static dcp_status dcp__serialize(const unsigned char magic[8], dcp__body_writer body,
                                 const void *object, void *buffer, size_t capacity, size_t *size,
                                 dcp_error *error)
{
    dcp__writer counter = {NULL, 0, 0}, w;
    if (!buffer && !size)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "need a buffer or a size to fill");
    body(&counter, object);
    w.data = (unsigned char *)buffer;
    w.capacity = buffer ? capacity : 0;
    w.size = 0;
    dcp__put_preamble(&w, magic, DCP__PREAMBLE_BYTES + counter.size + DCP__CHECKSUM_BYTES);
    body(&w, object);
    return dcp__writer_finish(&w, size, error);
}

static void dcp__put_plan(dcp__writer *w, const void *plan)
{
    dcp__put_plan_body(w, (const dcp_plan *)plan);
}

DCPDEF dcp_status dcp_plan_serialize(const dcp_plan *plan, void *buffer, size_t capacity,
                                     size_t *size, dcp_error *error)
{
    dcp_status status = dcp_plan_trusted(plan, error);
    if (status != DCP_OK) return status;
    return dcp__serialize(dcp__plan_magic, dcp__put_plan, plan, buffer, capacity, size, error);
}

/* The config must be exactly a resolved one: nothing left to a default. */
static dcp_status dcp__check_serialized_config(const dcp_config *c, dcp_error *error)
{
    dcp_config resolved;
    dcp_status status = dcp_config_resolve(c, &resolved, error);
    if (status != DCP_OK)
        return dcp_error_set(error, DCP_ERROR_CORRUPT_DATA, "plan config: %s",
                             error ? error->message : "invalid");
    if (resolved.min_cp != c->min_cp || resolved.max_cp != c->max_cp ||
        resolved.microbatch_multiple != c->microbatch_multiple ||
        resolved.pad_multiple_cp1 != c->pad_multiple_cp1 ||
        resolved.pad_multiple != c->pad_multiple || resolved.sync_ranks != c->sync_ranks ||
        resolved.memory_limit != c->memory_limit || dcp__all_zero_cost(&c->cost))
        return dcp_error_set(error, DCP_ERROR_CORRUPT_DATA,
                             "plan config holds unresolved defaults");
    return DCP_OK;
}

/* Reads counts and checks that the arrays they announce are exactly what the buffer holds. */
static dcp_status dcp__read_plan_counts(dcp__reader *r, int32_t counts[DCP__PLAN_COUNTS],
                                        dcp_error *error)
{
    uint64_t needed;
    int i;
    for (i = 0; i < DCP__PLAN_COUNTS; i++) counts[i] = dcp__get_i32(r);
    if (r->overrun || counts[0] < 1 || counts[1] < 1 || counts[2] < 1 || counts[2] > counts[0])
        return dcp_error_set(error, DCP_ERROR_CORRUPT_DATA,
                             "plan counts: %d samples, %d microbatches, %d groups", (int)counts[0],
                             (int)counts[1], (int)counts[2]);
    needed = DCP__PLAN_SAMPLE_BYTES * (uint64_t)counts[0] +
             DCP__PLAN_OFFSET_BYTES * ((uint64_t)counts[1] + 1) +
             DCP__PLAN_GROUP_BYTES * (uint64_t)counts[2];
    if (needed != r->size - r->position)
        return dcp_error_set(error, DCP_ERROR_CORRUPT_DATA,
                             "plan counts announce %llu bytes of arrays, the buffer holds %zu",
                             (unsigned long long)needed, r->size - r->position);
    return DCP_OK;
}

static void dcp__get_plan_arrays(dcp__reader *r, dcp_plan *plan)
{
    int32_t i;
    for (i = 0; i < plan->num_samples; i++) plan->sample_lengths[i] = dcp__get_i64(r);
    for (i = 0; i <= plan->num_microbatches; i++) plan->microbatch_offsets[i] = dcp__get_i32(r);
    for (i = 0; i < plan->num_groups; i++) {
        plan->groups[i].first_rank = dcp__get_i32(r);
        plan->groups[i].cp = dcp__get_i32(r);
        plan->groups[i].sample_offset = dcp__get_i32(r);
        plan->groups[i].sample_count = dcp__get_i32(r);
    }
    for (i = 0; i < plan->num_samples; i++) plan->group_samples[i] = dcp__get_i32(r);
}

DCPDEF dcp_status dcp_plan_deserialize(const void *buffer, size_t size,
                                       const dcp_allocator *allocator, dcp_plan **plan,
                                       dcp_error *error)
{
    dcp__reader r;
    dcp_config config;
    int32_t counts[DCP__PLAN_COUNTS];
    dcp_plan *p;
    dcp_status status;
    if (!plan) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "plan must not be NULL");
    *plan = NULL;
    r.data = (const unsigned char *)buffer;
    r.size = size;
    if ((status = dcp__read_preamble(&r, dcp__plan_magic, "plan", error)) != DCP_OK) return status;
    dcp__get_config(&r, &config);
    if (allocator) config.allocator = *allocator;
    if (r.overrun)
        return dcp_error_set(error, DCP_ERROR_CORRUPT_DATA, "plan: truncated configuration");
    if ((status = dcp__check_serialized_config(&config, error)) != DCP_OK) return status;
    if ((status = dcp__read_plan_counts(&r, counts, error)) != DCP_OK) return status;
    p = dcp__plan_alloc(&config, counts[0], counts[1], counts[2], error);
    if (!p) return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    dcp__get_plan_arrays(&r, p);
    if ((status = dcp_plan_validate(p, error)) != DCP_OK) {
        dcp_plan_destroy(p);
        return dcp_error_set(error, DCP_ERROR_CORRUPT_DATA, "plan: %s",
                             error ? error->message : "invalid");
    }
    dcp__plan_seal(p); /* validated in full: trusted from here on */
    *plan = p;
    return dcp_error_clear(error);
}

static void dcp__put_view_body(dcp__writer *w, const dcp_rank_view *v)
{
    int32_t i;
    dcp__put_fields(w, v, dcp__view_header_fields, DCP__COUNT(dcp__view_header_fields));
    for (i = 0; i < v->num_samples; i++) dcp__put_i32(w, v->samples[i]);
    for (i = 0; i < v->num_samples; i++) dcp__put_i64(w, v->sample_lengths[i]);
    for (i = 0; i <= v->num_samples; i++) dcp__put_i32(w, v->cu_seqlens[i]);
    for (i = 0; i <= v->num_samples; i++) dcp__put_i32(w, v->cu_seqlens_padded[i]);
    for (i = 0; i <= v->num_samples; i++) dcp__put_i32(w, v->local_offsets[i]);
}

static void dcp__put_view(dcp__writer *w, const void *view)
{
    dcp__put_view_body(w, (const dcp_rank_view *)view);
}

DCPDEF dcp_status dcp_rank_view_serialize(const dcp_rank_view *view, void *buffer,
                                          size_t capacity, size_t *size, dcp_error *error)
{
    dcp_status status = dcp_rank_view_validate(view, error);
    if (status != DCP_OK) return status;
    return dcp__serialize(dcp__view_magic, dcp__put_view, view, buffer, capacity, size, error);
}

/* Bytes of a view's arrays after its fixed fields: samples (int32) and lengths (int64) of
   each sample, and three cumulative int32 arrays of num_samples + 1 entries. */
#define DCP__VIEW_ARRAY_BYTES(num_samples)                                                      \
    (DCP__VIEW_SAMPLE_BYTES * (uint64_t)(num_samples) +                                         \
     DCP__VIEW_CUMULATIVE_ARRAYS * DCP__I32_BYTES * ((uint64_t)(num_samples) + 1))

DCPDEF dcp_status dcp_rank_view_deserialize(const void *buffer, size_t size,
                                            const dcp_allocator *allocator, dcp_rank_view **view,
                                            dcp_error *error)
{
    dcp__reader r;
    dcp_rank_view header, *v;
    dcp_status status;
    int32_t i;
    if (!view) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "view must not be NULL");
    *view = NULL;
    r.data = (const unsigned char *)buffer;
    r.size = size;
    if ((status = dcp__read_preamble(&r, dcp__view_magic, "view", error)) != DCP_OK) return status;
    memset(&header, 0, sizeof header);
    dcp__get_fields(&r, &header, dcp__view_header_fields, DCP__COUNT(dcp__view_header_fields));
    if (r.overrun || header.num_samples < 0 ||
        DCP__VIEW_ARRAY_BYTES(header.num_samples) != r.size - r.position)
        return dcp_error_set(error, DCP_ERROR_CORRUPT_DATA,
                             "view: %d samples do not match the %zu bytes of arrays",
                             (int)header.num_samples, r.size - r.position);
    v = dcp__view_alloc(allocator, header.num_samples, error);
    if (!v) return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    header.allocator = v->allocator;
    header.samples = v->samples;
    header.sample_lengths = v->sample_lengths;
    header.cu_seqlens = v->cu_seqlens;
    header.cu_seqlens_padded = v->cu_seqlens_padded;
    header.local_offsets = v->local_offsets;
    *v = header;
    for (i = 0; i < v->num_samples; i++) v->samples[i] = dcp__get_i32(&r);
    for (i = 0; i < v->num_samples; i++) v->sample_lengths[i] = dcp__get_i64(&r);
    for (i = 0; i <= v->num_samples; i++) v->cu_seqlens[i] = dcp__get_i32(&r);
    for (i = 0; i <= v->num_samples; i++) v->cu_seqlens_padded[i] = dcp__get_i32(&r);
    for (i = 0; i <= v->num_samples; i++) v->local_offsets[i] = dcp__get_i32(&r);
    if ((status = dcp_rank_view_validate(v, error)) != DCP_OK) {
        dcp_rank_view_destroy(v);
        return dcp_error_set(error, DCP_ERROR_CORRUPT_DATA, "view: %s",
                             error ? error->message : "invalid");
    }
    *view = v;
    return dcp_error_clear(error);
}

/* ------------------------------------------------------------------- FLOPs statistics */

/* The largest value whose square fits int64_t. */
#define DCP__SQUARE_MAX INT64_C(3037000499)

static int dcp__add_checked(int64_t *sum, int64_t value)
{
    if (value > INT64_MAX - *sum) return 0;
    *sum += value;
    return 1;
}

DCPDEF dcp_status dcp_plan_flops_stats(const dcp_plan *plan, dcp_flops_stats *stats,
                                       dcp_error *error)
{
    int32_t g, i;
    dcp_status status;
    if (!stats) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "stats must not be NULL");
    if ((status = dcp_plan_trusted(plan, error)) != DCP_OK) return status;
    memset(stats, 0, sizeof *stats);
    for (g = 0; g < plan->num_groups; g++) {
        const dcp_group *group = &plan->groups[g];
        for (i = 0; i < group->sample_count; i++) {
            int64_t length = plan->sample_lengths[plan->group_samples[group->sample_offset + i]];
            int64_t padded = dcp__padded(&plan->config, length, group->cp);
            /* lengths are below 2^31, so their squares fit; padded lengths can reach M cp */
            if (padded > DCP__SQUARE_MAX || !dcp__add_checked(&stats->valid_tokens, length) ||
                !dcp__add_checked(&stats->padded_tokens, padded) ||
                !dcp__add_checked(&stats->sum_squared_valid, length * length) ||
                !dcp__add_checked(&stats->sum_squared_padded, padded * padded))
                return dcp_error_set(error, DCP_ERROR_OVERFLOW,
                                     "FLOPs sums of the batch exceed int64 at group %d", (int)g);
        }
    }
    return dcp_error_clear(error);
}

/* ------------------------------------------------------------ helpers a data loader needs */

DCPDEF dcp_status dcp_lengths_filter(const dcp_config *config, const int64_t *lengths,
                                     int32_t count, int64_t *kept_lengths, int32_t *kept_ids,
                                     int32_t *kept_count, int32_t *dropped_ids,
                                     dcp_error *error)
{
    dcp_config c;
    dcp_status status;
    int32_t i, kept = 0, dropped = 0;
    if (!lengths || !kept_lengths || !kept_ids || !kept_count)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "lengths, kept_lengths, kept_ids and kept_count must not be NULL");
    if (count < 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "count must be >= 0, got %d",
                             (int)count);
    if ((status = dcp_config_resolve(config, &c, error)) != DCP_OK) return status;
    for (i = 0; i < count; i++) {
        if (lengths[i] < 1 || lengths[i] > DCP_MAX_SAMPLE_LENGTH)
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "sample %d has length %lld; lengths must be in [1, %lld]", (int)i,
                                 (long long)lengths[i], (long long)DCP_MAX_SAMPLE_LENGTH);
        if (dcp__cp_min(&c, lengths[i]) > 0) {
            kept_lengths[kept] = lengths[i];
            kept_ids[kept++] = i;
        } else if (dropped_ids)
            dropped_ids[dropped++] = i;
    }
    *kept_count = kept;
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_plan_sample_location(const dcp_plan *plan, int32_t sample,
                                           int32_t *microbatch, int32_t *group,
                                           dcp_error *error)
{
    int32_t g, k = 0;
    if (!plan || !microbatch || !group)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "plan, microbatch and group must not be NULL");
    if (sample < 0 || sample >= plan->num_samples)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "sample %d outside [0, %d)",
                             (int)sample, (int)plan->num_samples);
    for (g = 0; g < plan->num_groups; g++) {
        const dcp_group *candidate = &plan->groups[g];
        int32_t i;
        while (k < plan->num_microbatches && plan->microbatch_offsets[k + 1] <= g) k++;
        for (i = 0; i < candidate->sample_count; i++)
            if (plan->group_samples[candidate->sample_offset + i] == sample) {
                *microbatch = k;
                *group = g;
                return dcp_error_clear(error);
            }
    }
    return dcp_error_set(error, DCP_ERROR_INVALID_PLAN, "sample %d is in no group", (int)sample);
}

#define DCP__COMPARED_CONFIG_INTS 16

static dcp_status dcp__compare_configs(const dcp_config *a, const dcp_config *b,
                                       dcp_error *error)
{
    const int64_t ints_a[DCP__COMPARED_CONFIG_INTS] = {
        a->ranks, a->max_tokens_per_rank, a->min_cp, a->max_cp, a->microbatch_multiple,
        a->pad_multiple_cp1, a->pad_multiple, (int64_t)a->strategy, a->improve_moves,
        (int64_t)a->ring_charge, a->sync_ranks, (int64_t)a->cp_sizes, a->cover_ranks,
        a->cp_size_count, a->head_count, a->memory_limit};
    const int64_t ints_b[DCP__COMPARED_CONFIG_INTS] = {
        b->ranks, b->max_tokens_per_rank, b->min_cp, b->max_cp, b->microbatch_multiple,
        b->pad_multiple_cp1, b->pad_multiple, (int64_t)b->strategy, b->improve_moves,
        (int64_t)b->ring_charge, b->sync_ranks, (int64_t)b->cp_sizes, b->cover_ranks,
        b->cp_size_count, b->head_count, b->memory_limit};
    const char *names[DCP__COMPARED_CONFIG_INTS] = {
        "ranks", "max_tokens_per_rank", "min_cp", "max_cp", "microbatch_multiple",
        "pad_multiple_cp1", "pad_multiple", "strategy", "improve_moves", "ring_charge",
        "sync_ranks", "cp_sizes", "cover_ranks", "cp_size_count", "head_count",
        "memory_limit"}; /* the same groups under another E are another step */
    int i;
    for (i = 0; i < DCP__COMPARED_CONFIG_INTS; i++)
        if (ints_a[i] != ints_b[i])
            return dcp_error_set(error, DCP_ERROR_INVALID_PLAN,
                                 "plans differ: config %s %lld vs %lld", names[i],
                                 (long long)ints_a[i], (long long)ints_b[i]);
    for (i = 0; i < DCP_CP_SIZE_LIST_CAPACITY; i++)
        if (a->cp_size_list[i] != b->cp_size_list[i])
            return dcp_error_set(error, DCP_ERROR_INVALID_PLAN,
                                 "plans differ: config cp_size_list[%d] %d vs %d", (int)i,
                                 (int)a->cp_size_list[i], (int)b->cp_size_list[i]);
    if (a->cost.attn_coeff != b->cost.attn_coeff || a->cost.linear_coeff != b->cost.linear_coeff ||
        a->cost.ring_step_cost != b->cost.ring_step_cost)
        return dcp_error_set(error, DCP_ERROR_INVALID_PLAN, "plans differ: cost models");
    return DCP_OK;
}

DCPDEF dcp_status dcp_plan_compare(const dcp_plan *a, const dcp_plan *b, dcp_error *error)
{
    dcp_status status;
    int32_t i;
    if (!a || !b) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "plans must not be NULL");
    if ((status = dcp__compare_configs(&a->config, &b->config, error)) != DCP_OK) return status;
    if (a->num_samples != b->num_samples || a->num_microbatches != b->num_microbatches ||
        a->num_groups != b->num_groups)
        return dcp_error_set(error, DCP_ERROR_INVALID_PLAN,
                             "plans differ: %d/%d samples, %d/%d microbatches, %d/%d groups",
                             (int)a->num_samples, (int)b->num_samples, (int)a->num_microbatches,
                             (int)b->num_microbatches, (int)a->num_groups, (int)b->num_groups);
    for (i = 0; i < a->num_samples; i++)
        if (a->sample_lengths[i] != b->sample_lengths[i] ||
            a->group_samples[i] != b->group_samples[i])
            return dcp_error_set(error, DCP_ERROR_INVALID_PLAN,
                                 "plans differ at sample slot %d: length %lld/%lld, sample %d/%d",
                                 (int)i, (long long)a->sample_lengths[i],
                                 (long long)b->sample_lengths[i], (int)a->group_samples[i],
                                 (int)b->group_samples[i]);
    for (i = 0; i <= a->num_microbatches; i++)
        if (a->microbatch_offsets[i] != b->microbatch_offsets[i])
            return dcp_error_set(error, DCP_ERROR_INVALID_PLAN,
                                 "plans differ: microbatch %d starts at group %d/%d", (int)i,
                                 (int)a->microbatch_offsets[i], (int)b->microbatch_offsets[i]);
    for (i = 0; i < a->num_groups; i++) {
        const dcp_group *x = &a->groups[i], *y = &b->groups[i];
        if (x->first_rank != y->first_rank || x->cp != y->cp ||
            x->sample_offset != y->sample_offset || x->sample_count != y->sample_count)
            return dcp_error_set(error, DCP_ERROR_INVALID_PLAN,
                                 "plans differ at group %d: first rank %d/%d, cp %d/%d", (int)i,
                                 (int)x->first_rank, (int)y->first_rank, (int)x->cp, (int)y->cp);
    }
    return dcp_error_clear(error);
}

/* A rank's receives for pairing are keyed (key: the peer, id: the index in the rank's list)
   and sorted by increasing (peer, index). Returns the first position of peer; count if none. */
static int32_t dcp__recv_lower_bound(const dcp__keyed *keys, int32_t count, int32_t peer)
{
    int32_t lo = 0, hi = count;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (keys[mid].key < peer) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static int dcp__transfers_pair(const dcp_transfer *send, const dcp_transfer *recv)
{
    return send->microbatch == recv->microbatch && send->sample == recv->sample &&
           send->source_begin == recv->source_begin && send->source_end == recv->source_end &&
           send->destination_row == recv->destination_row;
}

/* Pairs rank a's sends, in order, with its peers' receives from a, in order. keys holds every
   rank's receives sorted by (peer, index), rank r's at keys[offsets[r] .. offsets[r + 1]);
   sent[] counts a's sends per peer so far (zero on entry, reset on return). */
static dcp_status dcp__match_rank_sends(const dcp_reroute *const *reroutes, int32_t ranks,
                                        int32_t a, const dcp__keyed *keys,
                                        const size_t *offsets, int32_t *sent, dcp_error *error)
{
    const dcp_reroute *ra = reroutes[a];
    dcp_status status = DCP_OK;
    int32_t i;
    for (i = 0; i < ra->count && status == DCP_OK; i++) {
        const dcp_transfer *t = &ra->transfers[i];
        const dcp__keyed *peer_keys;
        int32_t peer_count, k;
        if (t->kind == DCP_TRANSFER_COPY && t->peer != a)
            status = dcp_error_set(error, DCP_ERROR_INVALID_PLAN,
                                   "rank %d transfer %d: a copy with peer %d", (int)a, (int)i,
                                   (int)t->peer);
        if (t->kind != DCP_TRANSFER_SEND || status != DCP_OK) continue;
        if (t->peer < 0 || t->peer >= ranks || t->peer == a) {
            status = dcp_error_set(error, DCP_ERROR_INVALID_PLAN,
                                   "rank %d transfer %d: send to peer %d (outside [0, %d) or "
                                   "itself)",
                                   (int)a, (int)i, (int)t->peer, (int)ranks);
            break;
        }
        peer_keys = keys + offsets[t->peer];
        peer_count = (int32_t)(offsets[t->peer + 1] - offsets[t->peer]);
        k = dcp__recv_lower_bound(peer_keys, peer_count, a) + sent[t->peer]++;
        if (k >= peer_count || peer_keys[k].key != a)
            status = dcp_error_set(error, DCP_ERROR_INVALID_PLAN,
                                   "rank %d send %d to rank %d (sample %d) has no matching "
                                   "receive",
                                   (int)a, (int)i, (int)t->peer, (int)t->sample);
        else if (!dcp__transfers_pair(t, &reroutes[t->peer]->transfers[peer_keys[k].id]))
            status = dcp_error_set(error, DCP_ERROR_INVALID_PLAN,
                                   "rank %d send %d to rank %d (sample %d, positions %lld-%lld) "
                                   "differs from that rank's receive %d",
                                   (int)a, (int)i, (int)t->peer, (int)t->sample,
                                   (long long)t->source_begin, (long long)t->source_end,
                                   (int)peer_keys[k].id);
    }
    for (i = 0; i < ra->count; i++)
        if (ra->transfers[i].kind == DCP_TRANSFER_SEND && ra->transfers[i].peer >= 0 &&
            ra->transfers[i].peer < ranks)
            sent[ra->transfers[i].peer] = 0;
    return status;
}

/* Counts the sends and receives of all lists; DCP_ERROR_INVALID_ARGUMENT for a missing list. */
static dcp_status dcp__count_transfers(const dcp_reroute *const *reroutes, int32_t ranks,
                                       size_t *sends, size_t *receives, dcp_error *error)
{
    int32_t r, i;
    *sends = *receives = 0;
    for (r = 0; r < ranks; r++) {
        if (!reroutes[r] || reroutes[r]->rank != r || reroutes[r]->count < 0 ||
            (reroutes[r]->count > 0 && !reroutes[r]->transfers))
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "reroutes[%d] must be the list of rank %d", (int)r, (int)r);
        for (i = 0; i < reroutes[r]->count; i++) {
            *receives += reroutes[r]->transfers[i].kind == DCP_TRANSFER_RECV;
            *sends += reroutes[r]->transfers[i].kind == DCP_TRANSFER_SEND;
        }
    }
    return DCP_OK;
}

DCPDEF dcp_status dcp_reroute_match(const dcp_reroute *const *reroutes, int32_t ranks,
                                    const dcp_allocator *allocator, dcp_error *error)
{
    dcp__keyed *keys;
    size_t *offsets, sends, receives;
    int32_t *sent, r, i;
    dcp_status status;
    if (!reroutes || ranks < 1 || ranks > DCP_MAX_RANKS)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "reroutes must not be NULL and ranks in [1, %d], got %d",
                             DCP_MAX_RANKS, (int)ranks);
    if ((status = dcp__count_transfers(reroutes, ranks, &sends, &receives, error)) != DCP_OK)
        return status;
    if (sends != receives) /* with every send paired below, no receive is left over either */
        return dcp_error_set(error, DCP_ERROR_INVALID_PLAN, "%zu sends but %zu receives", sends,
                             receives);
    offsets = (size_t *)dcp__alloc_array(allocator, (size_t)ranks + 1, sizeof *offsets,
                                         "reroute match", error);
    sent = (int32_t *)dcp__alloc_array(allocator, (size_t)ranks, sizeof *sent, "reroute match",
                                       error);
    keys = (dcp__keyed *)dcp__alloc_array(allocator, receives ? receives : 1, sizeof *keys,
                                          "reroute match", error);
    status = offsets && sent && keys ? DCP_OK : (error ? error->status : DCP_ERROR_OUT_OF_MEMORY);
    if (status == DCP_OK) {
        memset(sent, 0, (size_t)ranks * sizeof *sent);
        offsets[0] = 0;
        for (r = 0; r < ranks; r++) {
            size_t n = offsets[r];
            for (i = 0; i < reroutes[r]->count; i++)
                if (reroutes[r]->transfers[i].kind == DCP_TRANSFER_RECV) {
                    keys[n].key = reroutes[r]->transfers[i].peer;
                    keys[n++].id = i;
                }
            offsets[r + 1] = n;
            qsort(keys + offsets[r], n - offsets[r], sizeof *keys, dcp__keyed_ascending);
        }
        for (r = 0; r < ranks && status == DCP_OK; r++)
            status = dcp__match_rank_sends(reroutes, ranks, r, keys, offsets, sent, error);
    }
    dcp_free(allocator, offsets);
    dcp_free(allocator, sent);
    dcp_free(allocator, keys);
    return status == DCP_OK ? dcp_error_clear(error) : status;
}
