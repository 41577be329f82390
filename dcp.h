/* dcp.h - dynamic context parallelism for long-context training. v0.1.0
   Single-header C99 library in the stb style; no dependencies beyond libc and libm.

   WHAT IT DOES
   Long-context training batches mix sequences of a few hundred tokens with sequences of
   hundreds of thousands. Static context parallelism (CP) runs every sequence on the same
   number of GPUs, so short sequences pay ring communication for nothing and packed
   microbatches are unbalanced because attention cost grows with L^2. dcp.h decides, for one
   global batch, which sample runs on how many ranks (its CP size c) and in which microbatch,
   so that the D ranks of the DP x CP pool finish the step together (c is a power of two by
   default; dcp_config.cp_sizes also offers Megatron-Core's sizes, with a group of all D ranks
   on a pool that is not a power of two). It then
   gives each rank its THD packing metadata. The library computes plans; the caller moves data.

   QUICK START
       #define DCP_IMPLEMENTATION      // in exactly one C, C++ or CUDA file
       #include "dcp.h"

       int64_t lengths[256];
       dcp_lognormal dist = {4096.0, 1.1, 1024, 8192};     // mean, sigma, min, max
       dcp_lengths_lognormal(&dist, 42, lengths, 256, NULL);

       dcp_config config = dcp_config_init();  // all zero: "the documented default"
       config.ranks = 16;                      // D: the DP x CP ranks
       config.max_tokens_per_rank = 4096;      // M: padded tokens one rank holds per microbatch
       dcp_plan *plan = NULL;
       dcp_error error;
       if (dcp_plan_create(&config, lengths, 256, &plan, &error) != DCP_OK) {
           fprintf(stderr, "%s\n", error.message);
           return 1;
       }
       dcp_plan_stats stats;
       dcp_plan_simulate(plan, NULL, &stats, NULL);
       printf("%d microbatches, step %.3f ms, efficiency %.3f\n",
              plan->num_microbatches, stats.step_seconds * 1e3, stats.efficiency);
       dcp_plan_destroy(plan);

   BUILDING
   Include dcp.h wherever you need it; in exactly one translation unit define
   DCP_IMPLEMENTATION before the include. It compiles as C99, as C++11 and under nvcc.
   Link with -lm. Option macros, defined before the implementation include:
       DCP_STATIC          make every function static (private copy per translation unit)
       DCP_MALLOC(size)    default allocation when no allocator is given (malloc)
       DCP_FREE(ptr)       matching free (free); define both or neither
       DCP_NO_REFERENCE    leave out the CPU reference kernels (declarations and code)
       DCP_NO_DISTRIBUTED  leave out the distributed logic (what dcp_nccl.h builds on)
       DCP_PLANNER_TRACE(phase, begin)  profiling hook: called before (1) and after (0) each
                           phase of the planner (bench/plan_bench --profile); empty default
   With both, a planner-only user compiles the planner, the data-loader layers, the operation
   contracts and the CUDA declarations; every combination is compiled and run by make test.
   An allocator may also be passed at run time (dcp_config.allocator, dcp_allocator).

   SOURCES
   This file is generated: its parts live in src/ of the libdcp repository, one file per
   domain (base.h: basics, workload model, calibration; planner.h, planner_lockstep.h,
   planner_sets.h: the planner; plan_readers.h: validator, simulator, SVG; views.h: length
   sources, THD views, reroute, exchange format; distributed.h: what dcp_nccl.h builds on;
   reference.h: operation contracts and CPU references; cuda.h: dcp_cuda.cu's declarations),
   each holding its declarations and its implementation. Edit those and run `make amalgamate`
   (tools/amalgamate.py); make test fails while this file is not what src/ makes. Banners of
   the form "-- src/NAME --" say which part a line comes from. To vendor, copy this one file.

   CONVENTIONS
   - Every fallible function returns a dcp_status (DCP_OK = 0). When the dcp_error pointer is
     not NULL it receives a message naming the argument and the value at fault, e.g.
     "sample 17 has length 70000 > max_cp 16 x max_tokens_per_rank 4096". No global state:
     every function is thread-safe on distinct objects; a plan may be read by many threads.
   - Lengths and token sums are int64_t; costs are double seconds. Bad input never crashes,
     never asserts, never truncates silently.
   - Memory: functions that allocate say so below; what they return is freed with the matching
     destroy/free function and the same allocator.
   - Option structs are zero-initialisable and zero means "the documented default", in C as
     in dcp-plan (each dcp_config field is the option of its name) and Python (the keyword of
     its name): one input gives one plan, byte for byte, from every front end. The three cost
     coefficients all zero are the default model; front ends draw lengths with
     DCP_DEFAULT_SEED when no seed is given.
   - Structs: every public struct documents its fields where it is declared below: meaning,
     unit (tokens, seconds, bytes, rows), array lengths ("[n + 1]") and who owns the memory.
     The ones a trainer reads most: dcp_config (what to plan), dcp_plan and dcp_group (the
     plan: K microbatches of aligned groups), dcp_plan_stats (its step times under E, E = 1
     and E = D), dcp_rank_view (one rank's microbatch, the arguments of the attention call;
     docs/integration.md), dcp_transfer and dcp_reroute (who sends what).

   REFERENCE (grouped by layer, in the order data flows)
   Basics
       dcp_status_string(status)                  constant text for a status code
       dcp_alloc(alloc, size) / dcp_free(alloc, ptr)  the allocation path every layer uses;
                                                  dcp_free frees what the library returned
       dcp_is_pow2, dcp_check_rank, dcp_check_rank_buffers  argument checks every layer shares
       dcp_rng_seed / dcp_rng_next / dcp_rng_uniform / dcp_rng_normal / dcp_rng_below
                                                  xoshiro256** generator; identical streams
                                                  on every platform (integer core, own exp/log)
   Workload model (docs/DESIGN.md section 3)
       dcp_config_init()                          an all-default config (C and C++ alike)
       dcp_config_resolve(config, out, err)       fill defaults, validate; no allocation
       dcp_padded_length(config, L, c, out, err)  storage length of a sample at CP size c
       dcp_cp_size_allowed(config, c)             c is a CP size of the config (cp_sizes:
       dcp_cp_size_next(config, c) / dcp_cp_sizes_name  powers of two, or Megatron's sizes
                                                  with a group of the whole pool)
       dcp_cp_size_min(config, L, out, err)       smallest CP size whose padded share fits M
       dcp_cost_sample_seconds(cost, L, P, c)     per-rank compute time (a L^2 + b P) / c
       dcp_cost_ring_seconds(cost, c)             ring overhead of one group for one microbatch
                                                  (of one sample: config.ring_charge)
       dcp_lower_bound(config, lengths, n, out, err)
   Cost calibration (the workload model fitted to measured times; bench/calibrate uses it;
   no allocation)
       dcp_cost_group_terms(config, L, n, cp, &m, err)  one rank's units of a group, exactly as
                                                  dcp_plan_schedule charges it
       dcp_cost_measurement_seconds(cost, m)      the model's time of a measurement's units
       dcp_cost_fit_measurements(m, n, options, &fit, err)  non-negative least squares of the
                                                  three coefficients, residuals, standard errors
   Planner
       dcp_plan_create(config, lengths, n, &plan, err)   allocates the plan (config.allocator);
                                                  refuses, before allocating, a plan whose
                                                  bound exceeds config.memory_limit (8 GiB)
       dcp_plan_memory_estimate(config, n, &bytes, err)  that bound: linear in n and the ranks
       dcp_plan_destroy(plan)
       dcp_plan_validate(plan, err)               every invariant of docs/DESIGN.md section 1
       dcp_plan_trusted(plan, err)                O(1) for a plan the library made or read
                                                  (sealed), else dcp_plan_validate
       dcp_plan_simulate(plan, cost, &stats, err) step times under the plan's sync_ranks E,
                                                  E = 1 (DAG) and E = D (barrier), lower
                                                  bounds; allocates scratch, frees it
       dcp_plan_schedule(plan, cost, start, end, err)  each group's start and end (plan's E)
       dcp_plan_schedule_durations(plan, secs, start, end, err)  the same from given (measured)
                                                  group durations
       dcp_plan_step_time(plan, cost, E, &s, err) step time under any sync_ranks E
       dcp_strategy_name(strategy)
       dcp_plan_svg(plans, titles, n, cost, buf, cap, &size, err)  timeline SVG of one plan or
                                                  a stack on one time scale; caller's buffer
                                                  (NULL: size query); allocates scratch
   Sequence-length sources
       dcp_lengths_lognormal(dist, seed, out, n, err)    Megatron's convention, caller's array
       dcp_rng_lognormal_length / dcp_rng_loguniform_length  one draw from a caller's rng
       dcp_lengths_parse(text, size, alloc, &out, &n, err)  length files; allocates *out
       dcp_lengths_read_file(path, alloc, &out, &n, err)    reads and parses; allocates *out
       dcp_lengths_parse_lines / dcp_lengths_read_file_lines  the same, plus each length's line
   THD layout (docs/DESIGN.md section 4)
       dcp_zigzag_position(P, c, r, i)             global position of local row i of rank r
       dcp_thd_layout, dcp_half                    a pack as one rank holds it; view halves
       dcp_thd_layout_validate(layout, &rows, err) checks cu_seqlens(_padded), cp; local rows
       dcp_rank_view_create(plan, r, k, &view, err)  rank r's group, samples and cu_seqlens,
                                                  cu_seqlens_padded, local offsets, max_seqlen
                                                  for microbatch k; allocates (plan allocator).
                                                  An idle rank: idle 1, cp 0, first_rank and
                                                  rank_in_group DCP_NO_GROUP, no samples
       dcp_rank_view_destroy / dcp_rank_view_validate
       dcp_rank_view_positions(view, slot, pos, err)  per local row: sample and global position
                                                  (-1: padding); caller's arrays
       dcp_rank_view_runs(view, runs, cap, &n, err)  the same as at most 3 runs per sample
                                                  (NULL runs: the count); no allocation
       dcp_rank_view_varlen_call(view, s, causal, &call, &rows, err)  ring step s as one call
                                                  of FlashAttention's flash_attn_varlen_func:
                                                  the valid q and kv rows to gather, the cu
                                                  arrays, max_seqlen, causal; caller's arrays
       dcp_rank_view_pack / dcp_rank_view_unpack  per-sample buffers <-> the rank's THD buffer,
                                                  any element size, padding rows zero
       dcp_pad_to_alignment(cu, n, a, &added, err)  grow the last sequence to an aligned total
   Exchange
       dcp_reroute_create(plan, holders, r, &list, err)  rank r's sends, receives, local copies
       dcp_reroute_destroy
       dcp_plan_serialize / dcp_plan_deserialize  versioned, checksummed buffer; the reader
       dcp_rank_view_serialize / _deserialize     validates everything (fuzzed); allocates
       dcp_plan_flops_stats(plan, &stats, err)    tokens and sums of L^2 for MFU
   Data-loader helpers
       dcp_lengths_filter(config, L, n, kept, ids, &k, dropped, err)  drop samples that cannot
                                                  fit, keep their original ids; caller's arrays
       dcp_plan_sample_location(plan, s, &k, &g, err)  a sample's microbatch and group
       dcp_plan_compare(a, b, err)                same plan? the message names the difference
       dcp_reroute_match(lists, ranks, alloc, err)  every send paired with its receive
   Distributed logic (docs/DESIGN.md section 6: what dcp_nccl.h decides, as pure functions; no
   allocation; absent with DCP_NO_DISTRIBUTED)
       dcp_comm_max_cp(config, max_length, &c, err)  largest useful CP size: the planner's
                                                  and the communicator set's max_cp
       dcp_plan_hash(plan, &hash, err)            64-bit hash every rank compares
       dcp_comm_choose(D, max_cp, r, first, cp, idle, &choice, err)   a group (any size and
                                                  position) and r's index in it
       dcp_comm_choose_static(D, max_cp, r, cp, &choice, err)        static CP (evaluation)
       dcp_plan_rank_group(plan, r, k, &where, err)   r's group, its choice and local rows,
                                                  no view; O(1) on a sealed plan
       dcp_comm_state_init / _switch / _apply     the group a rank works in now (apply: a
                                                  choice made already, checked in O(1))
       dcp_comm_override_begin / _end / _run      scoped CP size for evaluation, nested,
                                                  restored on every path (run: callback form)
       dcp_reroute_op_get(list, i, elem, &op, err)  a transfer in bytes and buffer offsets
       dcp_reroute_check(list, n, rows, K, rows, err)  transfers against the caller's buffers
       dcp_reroute_rows_written(list, K, rows, err)  per microbatch, the rows the list writes:
                                                  the smallest buffer dcp_reroute_check takes
       dcp_ring_exchange_plan(cp, r, s, &x, err)  peers (dcp_ring_order's neighbours), KV and
                                                  dK/dV slots of a ring step, any cp
       dcp_ring_scratch_layout(shape, pass, &s, err)  scratch regions of a ring pass
       dcp_comm_tree_node(n, root, i, &node, err)  parent and children of a broadcast or a
                                                  reduction without collectives (binary heap)
       dcp_metadata_chunks(length, chunk, &n, err)  length check of a metadata broadcast
   Head-parallel all-to-all (the CP <-> head-parallel switch of linear-attention layers;
   no allocation; with the distributed logic)
       dcp_a2a_shape_get / dcp_a2a_runs / dcp_a2a_message_rows / dcp_a2a_segments
                                                  what moves where (caller's arrays, NULL asks
                                                  the size)
       dcp_a2a_segments_copy, dcp_a2a_hp_layout   a segment list on host memory; the
                                                  head-parallel layout (cp 1: conv1d runs on it)
       dcp_a2a_cp2hp / dcp_a2a_hp2cp(layout, channels, bytes, in[], out[], err)
                                                  CPU references of a whole group
   MTP roll (multi-token prediction's per-sequence shift under CP; no allocation; with the
   distributed logic)
       dcp_mtp_roll_plan(layout, r, transfers, cap, &n, err)  which row needs one element of
                                                  which rank
       dcp_mtp_roll_gather / _shift / _reference  one rank's side on the host; a whole group
   Pipeline stages (each stage moves only the fields it reads; with the distributed logic)
       dcp_stage_fields(first, last, mtp), dcp_field_set_validate
                                                  a stage's fields; a set's bytes per token
       dcp_reroute_field_bytes(list, set, &bytes, err)  a stage's bytes on the wire
       dcp_rank_view_pack_fields / _unpack_fields  pack/unpack for every field of a set
   Operation contracts (the arguments of the CPU references and the CUDA kernels alike; always
   compiled; no allocation)
       dcp_dtype, dcp_dtype_size(dtype), dcp_dtype_name(dtype)
                                                  element type of a device tensor; its bytes
                                                  and its name
       dcp_attention_params, dcp_attention_view   an attention step's shape and its q/kv view
       dcp_attention_params_resolve / dcp_attention_view_validate / dcp_rope_options_resolve /
       dcp_conv1d_params_resolve                  the argument checks every entry point, CPU
                                                  or CUDA, shares; defaults filled in
       dcp_ring_order(cp, position, &rank, err) / dcp_ring_position(cp, rank, &pos, err)
                                                  the ring order of any cp: 0, 2, 4, ..., 3, 1
                                                  (neighbours r +- 1, r +- 2)
       dcp_ring_step_plan(cp, rank, step, causal, &plan, err)
                                                  KV source, q and kv halves, mask of a step
   CPU references (docs/DESIGN.md section 5; the contracts of the CUDA kernels; fp32 buffers,
   double sums, deterministic; no allocation except the ring forward; thread-safe on
   distinct output buffers; absent with DCP_NO_REFERENCE)
       dcp_attention_forward(params, layout, view, q, k, v, out, lse, err)
                                                  one step: the q view of rank q_rank against
                                                  the kv view of rank kv_rank; GQA, causal by
                                                  global position; out and LSE [heads, rows]
       dcp_attention_backward(params, layout, view, q, k, v, out, dout, lse, dq, dk, dv, err)
                                                  adds the step's gradient into dq, dk, dv
       dcp_attention_acc_init / _acc_merge / _acc_finalize
                                                  LSE merge of partial results, -inf guarded
       dcp_ring_attention_forward(params, layout, q[], k[], v[], out[], lse[], alloc, err)
       dcp_ring_attention_backward(params, layout, q[], k[], v[], out[], dout[], lse[],
                                   dq[], dk[], dv[], err)
                                                  a ring of layout.cp ranks in one process
       dcp_rope_forward / dcp_rope_backward(options, layout, rank, heads, dim, x, y, err)
                                                  rotate-half or interleaved, partial rotary,
                                                  theta or a caller's frequency table
       dcp_conv1d_forward(params, layout, total_rows, x, weight, bias, y, err)
       dcp_conv1d_backward(params, layout, total_rows, x, weight, bias, dy, dx, dweight,
                           dbias, err)            causal depthwise conv1d, optional SiLU
   CUDA (dcp_cuda.cu; device pointers, a cudaStream_t as void *; never allocate or
   synchronise; check every argument on the host first; CUDA errors -> DCP_ERROR_CUDA with
   file, line and call)
       dcp_cuda_device_count(&count, err)         0 without driver or device (not an error)
       dcp_cuda_layout_init(host, d_cu, d_cu_padded, &layout, err)
                                                  device layout from checked host arrays
       dcp_cuda_rope_forward / _backward(options, layout, rank, dtype, head_dim, q_heads, q,
                                         q_out, k_heads, k, k_out, stream, err)
                                                  q and k in one launch, bf16/fp16/fp32
       dcp_cuda_conv1d_workspace_size / _forward / _backward
                                                  width <= 8; deterministic dweight, dbias
       dcp_cuda_conv1d_launch_geometry            how a shape is split (host-only)
       dcp_cuda_acc_init / _acc_merge / _acc_finalize, dcp_cuda_convert
                                                  LSE merge of ring steps; float32 -> dtype
       dcp_cuda_attention_workspace_size / _forward / _backward
                                                  varlen THD attention step (a view of ranks
                                                  and halves), bf16/fp16, head dim 64 or 128,
                                                  GQA, causal by global position; backward
                                                  adds into float32 dq, dk, dv
       dcp_cuda_attention_forward_using(path, ...) / dcp_cuda_attention_path_available
                                                  the forward on a chosen kernel path (mma.sync,
                                                  or wgmma on sm_90a); AUTO is mma.sync for now
       dcp_cuda_virtual_ring_forward / _backward  a ring of cp ranks on one device
       dcp_cuda_add_float32(acc, x, count, stream, err)  acc += x (the ring backward's dK, dV)
       dcp_cuda_a2a_copy                          a head-parallel segment list (pack, unpack);
                                                  with the distributed logic only
       dcp_cuda_mtp_roll_gather / _shift          the MTP roll's kernels; likewise

   VERSION HISTORY
       0.1.0  planner (DAG and lockstep sync models), baselines, validator, simulator, SVG
              timeline, length sources; THD views, reroute lists, exchange format, FLOPs
              statistics; cost calibration; distributed logic of dcp_nccl.h, the
              head-parallel all-to-all, the MTP roll and stage fields; operation contracts
              and CPU references (attention with ring steps, LSE merge, RoPE, conv1d); the CUDA
              kernels (dcp_cuda.cu) and the NCCL layer (dcp_nccl.h).
              CHANGELOG.md lists every change.

   LICENSE
   MIT. See the end of this file.
*/
#ifndef DCP_H
#define DCP_H

#include <stddef.h>
#include <stdint.h>

#ifdef DCP_STATIC
#define DCPDEF static
#else
#define DCPDEF extern
#endif

#define DCP_VERSION_MAJOR 0
#define DCP_VERSION_MINOR 1
#define DCP_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif

/* -- src/base.h -- */
/* ==================================================================================== basics
   Status codes, error messages, allocator hooks and the generator. */

typedef enum dcp_status {
    DCP_OK = 0,
    DCP_ERROR_INVALID_ARGUMENT = 1, /* a parameter outside its documented range */
    DCP_ERROR_INFEASIBLE = 2,       /* no plan can respect the constraints */
    DCP_ERROR_OVERFLOW = 3,         /* a size, sum or product exceeds what is supported */
    DCP_ERROR_OUT_OF_MEMORY = 4,
    DCP_ERROR_PARSE = 5,            /* malformed text input */
    DCP_ERROR_IO = 6,               /* a file could not be read */
    DCP_ERROR_INVALID_PLAN = 7,     /* a plan breaks an invariant */
    DCP_ERROR_CORRUPT_DATA = 8,     /* a serialized buffer fails validation */
    DCP_ERROR_UNSUPPORTED = 9,      /* valid request this build cannot serve */
    DCP_ERROR_CUDA = 10,
    DCP_ERROR_NCCL = 11
} dcp_status;

#define DCP_ERROR_MESSAGE_CAPACITY 256

/* Filled by failing calls when the caller passes a non-NULL pointer. */
typedef struct dcp_error {
    dcp_status status;                        /* the status the call returned */
    char message[DCP_ERROR_MESSAGE_CAPACITY]; /* NUL-terminated, names the argument and the
                                                 value at fault; "" after DCP_OK */
} dcp_error;

DCPDEF const char *dcp_status_string(dcp_status status);

#if defined(__GNUC__) || defined(__clang__)
#define DCP_PRINTF_LIKE(format_index, first_argument) \
    __attribute__((format(printf, format_index, first_argument)))
#else
#define DCP_PRINTF_LIKE(format_index, first_argument)
#endif

/* Fills *error (when not NULL) with status and a printf-formatted message, and returns status.
   Every dcp.h function reports this way, and so do the layers built on it (dcp_cuda.cu,
   dcp_nccl.h). */
DCPDEF dcp_status dcp_error_set(dcp_error *error, dcp_status status, const char *format, ...)
    DCP_PRINTF_LIKE(3, 4);
/* Sets *error (when not NULL) to DCP_OK and an empty message, and returns DCP_OK. */
DCPDEF dcp_status dcp_error_clear(dcp_error *error);

/* Both functions or neither (then DCP_MALLOC / DCP_FREE). alloc returns NULL on failure. */
typedef struct dcp_allocator {
    void *(*alloc)(void *user, size_t size); /* size >= 1 bytes, aligned for any type */
    void (*free)(void *user, void *ptr);     /* ptr from alloc, never NULL */
    void *user;                              /* passed back to both, never read here */
} dcp_allocator;

/* size bytes (at least 1) from allocator, or DCP_MALLOC when allocator is NULL or has no
   alloc; release with dcp_free and the same allocator. The layers above dcp.h (dcp_nccl.h)
   allocate through these two so that memory and its release always take the same path. */
DCPDEF void *dcp_alloc(const dcp_allocator *allocator, size_t size);
DCPDEF void dcp_free(const dcp_allocator *allocator, void *ptr);

/* Argument checks shared by dcp.h, dcp_cuda.cu and dcp_nccl.h, so that every layer rejects the
   same input with the same message. */
DCPDEF int dcp_is_pow2(int64_t x); /* 1 when x is a power of two (x >= 1), else 0 */
/* DCP_ERROR_INVALID_ARGUMENT naming `name` unless 0 <= rank < cp. */
DCPDEF dcp_status dcp_check_rank(const char *name, int32_t rank, int32_t cp, dcp_error *error);
/* DCP_ERROR_INVALID_ARGUMENT naming `name` (or name[r]) when the per-rank array or one of its
   cp entries is NULL. */
DCPDEF dcp_status dcp_check_rank_buffers(const char *name, const void *const *buffers, int32_t cp,
                                         dcp_error *error);

/* xoshiro256** seeded through splitmix64: integer-only, so every platform draws the same. */
typedef struct dcp_rng {
    uint64_t state[4]; /* set by dcp_rng_seed; opaque */
} dcp_rng;

DCPDEF void dcp_rng_seed(dcp_rng *rng, uint64_t seed);
DCPDEF uint64_t dcp_rng_next(dcp_rng *rng);
DCPDEF double dcp_rng_uniform(dcp_rng *rng);               /* [0, 1), 53 random bits */
DCPDEF uint64_t dcp_rng_below(dcp_rng *rng, uint64_t bound); /* [0, bound); 0 if bound 0 */
DCPDEF double dcp_rng_normal(dcp_rng *rng);                /* standard normal (polar method) */

/* ============================================================================ workload model
   t(L, c) = (attn_coeff L^2 + linear_coeff P)/c per rank for a sample of valid length L and
   padded length P on c ranks, plus ring_step_cost (c - 1) for the ring: once per group and
   microbatch (its samples run as one forward), or once per sample (each runs its own forward,
   as Megatron-Core 0.16's hybrid CP runs them), as dcp_config.ring_charge says.
   The linear term uses the padded length because linear layers run on padding tokens too;
   the attention term uses the valid length because padding is never a key. */

/* Defaults: a dense model of hidden 4096 at 400 TFLOP/s (forward FLOPs 24 h^2 per token and
   2 h per causal token pair); ring latency 15 us per step that compute cannot hide. */
#define DCP_DEFAULT_ATTN_COEFF 2.048e-11
#define DCP_DEFAULT_LINEAR_COEFF 1.00663e-6
#define DCP_DEFAULT_RING_STEP_COST 15e-6

/* Longest sample and most ranks accepted: lengths fit 31 bits so that L^2 fits int64_t. */
#define DCP_MAX_SAMPLE_LENGTH INT64_C(2147483647)
#define DCP_MAX_RANKS (1 << 20)
#define DCP_MAX_PAD_MULTIPLE (1 << 20)
/* CP sizes are powers of two up to DCP_MAX_RANKS: 21 levels. */
#define DCP_CP_LEVELS 21

/* Each coefficient is 0 or in [DCP_MIN_COST_COEFF, DCP_MAX_COST_COEFF], else
   DCP_ERROR_OVERFLOW. The planner turns seconds into 60-bit integer ticks scaled to the batch's
   total time; within this range every per-sample time, sum over samples and tick scale stays a
   finite, normal double (2^31 samples of length 2^31 at 1e100 s per token^2 is ~1e128 s; one
   token at 1e-100 s divided over 2^20 ranks is ~1e-106 s, far above the 2^-960 the scale needs).
   Only the ratios of the three shape a plan. */
#define DCP_MIN_COST_COEFF 1e-100
#define DCP_MAX_COST_COEFF 1e100

/* All three zero means the default model (an all-zero model would make every plan free). */
typedef struct dcp_cost_model {
    double attn_coeff;     /* seconds per (valid token)^2 */
    double linear_coeff;   /* seconds per stored token */
    double ring_step_cost; /* seconds per ring step that compute does not hide */
} dcp_cost_model;

/* How the ring's steps are charged: the planner, the lower bound, the simulator and the
   calibration's units all follow it. */
typedef enum dcp_ring_charge {
    DCP_RING_PER_GROUP = 0, /* once per group and microbatch: the group's samples run in one
                               forward (packed THD); the default */
    DCP_RING_PER_SAMPLE = 1 /* once per sample: every sample runs its own forward and ring
                               (Megatron-Core 0.16's hybrid CP; libdcp.megatron sets it) */
} dcp_ring_charge;

/* Which CP sizes the planner may give a group (dcp_config.cp_sizes). A group of size c is
   the contiguous ranks [first_rank, first_rank + c); under POW2 and MEGATRON first_rank is a
   multiple of c (aligned blocks, which nest: a fixed set of communicators), under ANY and
   LIST any rank with the group inside the pool (dcp_nccl.h runs every group on one
   communicator). */
typedef enum dcp_cp_sizes {
    DCP_CP_SIZES_POW2 = 0,     /* powers of two in [min_cp, max_cp] (the default) */
    DCP_CP_SIZES_MEGATRON = 1, /* the sizes Megatron-Core builds hybrid-CP communicators for
                                  on a DP x CP group of D ranks
                                  (parallel_state.create_hybrid_dp_cp_groups): 2^i for
                                  i < floor(log2 D), and D itself (the whole group), so a pool
                                  that is not a power of two can put a sample on all its
                                  ranks; within [min_cp, max_cp] */
    DCP_CP_SIZES_ANY = 2,      /* every size in [min_cp, max_cp] */
    DCP_CP_SIZES_LIST = 3      /* the sizes of config.cp_size_list, within [min_cp, max_cp] */
} dcp_cp_sizes;

/* Most sizes an explicit list (DCP_CP_SIZES_LIST) names; largest head count
   (dcp_config.head_count) the set takes. */
#define DCP_CP_SIZE_LIST_CAPACITY 16
#define DCP_MAX_HEAD_COUNT (1 << 16)

typedef enum dcp_strategy {
    DCP_STRATEGY_DYNAMIC = 0, /* our planner: global view, minimises the simulated step */
    DCP_STRATEGY_STATIC = 1,  /* baseline: one CP size for all, THD packing per DP replica */
    DCP_STRATEGY_GREEDY = 2   /* baseline: Megatron's one-microbatch-at-a-time greedy */
} dcp_strategy;

/* Zero-initialise, set ranks and max_tokens_per_rank; every zero field takes its default. */
typedef struct dcp_config {
    int32_t ranks;               /* D >= 1: DP x CP ranks of the pool. Required. */
    int64_t max_tokens_per_rank; /* M >= 1: padded tokens per rank per microbatch. Required. */
    int32_t sync_ranks;          /* E: how the ranks synchronise (DESIGN.md section 3). The pool
                                    is cut into aligned blocks of E ranks that run each
                                    microbatch in lockstep. 1: only a CP group waits for its own
                                    ranks (dense models: the DAG model); D: a barrier across the
                                    pool every microbatch (MoE all-to-all over the pool); the
                                    expert-parallel size: MoE layers within EP blocks. A power of
                                    two dividing ranks, or ranks itself; default (0) ranks. The
                                    planner minimises the step time under this E. */
    int32_t min_cp;              /* smallest CP size, one of cp_sizes' sizes; default the
                                    smallest (1 but for a list) */
    int32_t max_cp;              /* largest CP size, one of cp_sizes' sizes <= ranks; default
                                    the largest such (POW2: the largest power of two <= ranks;
                                    MEGATRON: ranks) */
    int32_t microbatch_multiple; /* microbatch count is a multiple of this (VPP); default 1 */
    int32_t pad_multiple_cp1;    /* padding multiple of a sample at c = 1; default 1 */
    int32_t pad_multiple;        /* every padded length is also a multiple of this (for
                                    example the TP size with sequence parallelism); default 1 */
    dcp_cost_model cost;         /* all zero: DCP_DEFAULT_* */
    dcp_ring_charge ring_charge; /* default DCP_RING_PER_GROUP */
    dcp_strategy strategy;       /* default DCP_STRATEGY_DYNAMIC */
    int32_t improve_moves;       /* local-search budget in evaluated moves: 0 = default
                                    (DCP_DEFAULT_IMPROVE_MOVES_PER_SAMPLE per sample plus
                                    DCP_DEFAULT_IMPROVE_MOVES_BASE), negative = none; under
                                    E > 1 it bounds the unloading phases too (64 block
                                    positions or samples examined per move) */
    dcp_cp_sizes cp_sizes;       /* the CP sizes a group may have; default DCP_CP_SIZES_POW2 */
    int32_t cp_size_count;       /* DCP_CP_SIZES_LIST: the sizes in cp_size_list, 1 ..
                                    DCP_CP_SIZE_LIST_CAPACITY; else 0 */
    int32_t cp_size_list[DCP_CP_SIZE_LIST_CAPACITY]; /* DCP_CP_SIZES_LIST: increasing sizes in
                                    [1, ranks] in the first cp_size_count entries, the rest 0 */
    int32_t head_count;          /* heads a group's head-parallel all-to-all splits among its
                                    ranks (hybrid models, dcp_a2a_*): every CP size must divide
                                    it, whatever the set; 0 (default): no such constraint; at
                                    most DCP_MAX_HEAD_COUNT */
    int32_t cover_ranks;         /* 1: every rank holds at least one sample somewhere in the
                                    plan (Megatron's hybrid schedule runs a sub-sample on every
                                    rank); samples are widened or moved onto idle ranks, and a
                                    batch no plan can cover is DCP_ERROR_INFEASIBLE. 0 (the
                                    default): ranks may stay idle for the whole batch */
    dcp_allocator allocator;     /* zero: DCP_MALLOC / DCP_FREE */
    int64_t memory_limit;        /* bytes a plan may need (dcp_plan_memory_estimate): a larger
                                    request fails at once, before any allocation, with
                                    DCP_ERROR_OUT_OF_MEMORY naming the estimate and this limit,
                                    instead of growing until the system kills the process;
                                    default (0) DCP_DEFAULT_MEMORY_LIMIT (8 GiB), INT64_MAX for
                                    no limit; > 0 once resolved */
} dcp_config;

#define DCP_DEFAULT_IMPROVE_MOVES_PER_SAMPLE 8
#define DCP_DEFAULT_IMPROVE_MOVES_BASE 256
/* dcp_config.memory_limit's default: far above any training batch's plan (a million samples
   on 1,024 ranks need under 0.5 GiB), far below what makes a machine swap. */
#define DCP_DEFAULT_MEMORY_LIMIT (INT64_C(8) << 30)

/* An all-default config (every field zero), the one initialiser that compiles warning-free
   in C and C++ alike (`dcp_config config = {0};` trips g++ -Wmissing-field-initializers):
       dcp_config config = dcp_config_init();
       config.ranks = 64;
       config.max_tokens_per_rank = 4096; */
DCPDEF dcp_config dcp_config_init(void);
DCPDEF dcp_status dcp_config_resolve(const dcp_config *config, dcp_config *resolved,
                                     dcp_error *error);
/* Padded (storage) length: L rounded up to lcm(c > 1 ? 2c : pad_multiple_cp1, pad_multiple). */
DCPDEF dcp_status dcp_padded_length(const dcp_config *config, int64_t length, int32_t cp,
                                    int64_t *padded, dcp_error *error);
/* 1 when cp is a CP size of the resolved config (one of cp_sizes' sizes in [min_cp, max_cp]),
   else 0. Thread-safe, no allocation. */
DCPDEF int dcp_cp_size_allowed(const dcp_config *resolved, int32_t cp);
/* The next larger CP size of the resolved config after cp (0 when none): `for (c = min_cp; c;
   c = dcp_cp_size_next(&config, c))` visits every allowed size in increasing order. */
DCPDEF int32_t dcp_cp_size_next(const dcp_config *resolved, int32_t cp);
DCPDEF const char *dcp_cp_sizes_name(dcp_cp_sizes sizes); /* "pow2", "megatron", "any", "list";
                                                            else "unknown" */
/* Smallest allowed CP size c (dcp_cp_size_allowed) with padded(L, c)/c <= M;
   DCP_ERROR_INFEASIBLE when even max_cp does not fit. */
DCPDEF dcp_status dcp_cp_size_min(const dcp_config *config, int64_t length, int32_t *cp,
                                  dcp_error *error);
DCPDEF double dcp_cost_sample_seconds(const dcp_cost_model *cost, int64_t length,
                                      int64_t padded_length, int32_t cp);
DCPDEF double dcp_cost_ring_seconds(const dcp_cost_model *cost, int32_t cp);
/* A lower bound on the step time under the config's sync_ranks E. For every E: the largest
   sample at its best CP size, and for every CP size c the work of the samples that need at
   least c ranks over the ranks that aligned blocks of c cover (so pools that are not a power
   of two are bounded per aligned block); work counts a L^2 + b P per sample, P the fewest
   tokens it stores on any CP size it may take (its padded length), plus the ring overhead
   the memory cap forces on it. For E > 1 also the barrier bound: a block's step is at least
   the sum over microbatches of its slowest group, and the samples slower than any threshold
   need at least (their P / the block's E M) block-microbatches that slow, and under E = D at
   least one each for those of more than half of D M tokens. On tiny batches the bound is
   looser than the plan (tests/test_planner.c, barrier_bound_below_exhaustive_optimum: the
   plan is within 0.1% of the exhaustive optimum on average, the bound 2-6% below it under
   the default model): it does not see which CP sizes can share a microbatch. */
DCPDEF dcp_status dcp_lower_bound(const dcp_config *config, const int64_t *lengths,
                                  int32_t count, double *seconds, dcp_error *error);

/* ========================================================================== cost calibration
   The workload model's three coefficients fitted to measured times, so that a plan is made
   with the device's own costs instead of the defaults' assumptions (bench/calibrate measures
   them on a GPU; bench/plan_vs_exec checks the plans made with them). A measurement is a piece
   of work whose model time is linear in the coefficients:
       seconds = attn_coeff attn_units + linear_coeff linear_units + ring_step_cost ring_steps
   dcp_cost_group_terms gives the three units of one rank of a group exactly as the planner
   charges it (dcp_plan_schedule's group time is dcp_cost_measurement_seconds of them), so the
   fitted model is the planner's model, not a look-alike. The fit is non-negative least squares
   on small normal equations (columns scaled to unit norm, all in double); it allocates nothing
   and keeps no state. */

/* The units a measurement covers, and its measured time. */
typedef struct dcp_cost_measurement {
    double attn_units;   /* what attn_coeff multiplies: sum of L^2 / c over one rank's samples */
    double linear_units; /* what linear_coeff multiplies: stored tokens, sum of P / c */
    double ring_steps;   /* what ring_step_cost multiplies: c - 1 per group (per sample under
                            DCP_RING_PER_SAMPLE) */
    double seconds;      /* measured, > 0 (the fit's input; the other calls ignore it) */
} dcp_cost_measurement;

/* The terms one rank of a group of cp ranks pays for samples of valid lengths
   lengths[0 .. count) (count >= 0; padded as config pads them at cp), in *terms (seconds
   set to 0). A group timed whole on one device, its cp ranks one after another, covers cp
   times these units. */
DCPDEF dcp_status dcp_cost_group_terms(const dcp_config *config, const int64_t *lengths,
                                       int32_t count, int32_t cp, dcp_cost_measurement *terms,
                                       dcp_error *error);
/* The model's time of a measurement's units (its seconds field is not read). */
DCPDEF double dcp_cost_measurement_seconds(const dcp_cost_model *cost,
                                           const dcp_cost_measurement *measurement);

/* Bits of dcp_cost_fit_options.held_terms and dcp_cost_fit.zero_terms, one per coefficient. */
#define DCP_COST_TERM_ATTN 1u
#define DCP_COST_TERM_LINEAR 2u
#define DCP_COST_TERM_RING 4u
#define DCP_COST_TERMS_ALL 7u

typedef enum dcp_cost_fit_weighting {
    DCP_COST_FIT_RELATIVE = 0, /* minimise the sum of ((model - measured) / measured)^2: a 30 us
                                  measurement counts as much as a 300 ms one (timing noise is
                                  roughly proportional to the time); the default */
    DCP_COST_FIT_ABSOLUTE = 1  /* minimise the sum of (model - measured)^2 in seconds: the
                                  longest measurements decide */
} dcp_cost_fit_weighting;

/* Zero-initialise for the defaults: fit all three coefficients, relative residuals. */
typedef struct dcp_cost_fit_options {
    dcp_cost_fit_weighting weighting; /* default DCP_COST_FIT_RELATIVE */
    uint32_t held_terms; /* DCP_COST_TERM_* bits held at the value in `held` instead of fitted:
                            a coefficient measured another way (the caller's per-token time
                            of the linear layers), or one these measurements cannot see (no
                            ring steps). Default 0: fit all three */
    dcp_cost_model held; /* the held coefficients: each 0 or in the supported range */
} dcp_cost_fit_options;

/* The smallest pivot of the scaled normal equations a fit accepts. The matrix has a unit
   diagonal, and a pivot is 1 minus the share of a term's column that the earlier terms
   explain: below this the terms cannot be told apart (every measurement at one document
   length, say, makes attention proportional to tokens) and the coefficients would be noise. */
#define DCP_COST_FIT_MIN_PIVOT 1e-9

typedef struct dcp_cost_fit {
    dcp_cost_model cost;    /* fitted (held terms as given): paste it into dcp_config.cost */
    dcp_cost_model standard_error; /* of each fitted coefficient (0 for held ones), from the
                               residuals' spread and the design: a coefficient within two of
                               its standard errors of 0 is not resolved by these measurements */
    uint32_t zero_terms;    /* fitted terms that the non-negativity constraint set to 0: the
                               measurements want them negative, a sign the model misses a term
                               or the term is below the noise */
    int32_t count;          /* measurements fitted */
    double conditioning;    /* smallest pivot of the scaled normal equations, in
                               (DCP_COST_FIT_MIN_PIVOT, 1]: 1 when the fitted terms' columns are
                               orthogonal, small when they are nearly proportional */
    double rms_relative_residual; /* sqrt(mean ((model - measured) / measured)^2) */
    double max_relative_residual; /* max |model - measured| / measured */
    int32_t max_residual_index;   /* the measurement where that maximum is */
    double rms_residual_seconds;  /* sqrt(mean (model - measured)^2) */
} dcp_cost_fit;

/* Fits the coefficients not held to measurements[0 .. count), under the constraint that each
   is >= 0, and fills *fit. options NULL: the defaults. Rejects, naming what is wrong: a unit
   that is negative or not finite, seconds not > 0, a fitted term no measurement has (all its
   units 0), fewer measurements than fitted terms, terms the measurements cannot tell apart
   (pivot below DCP_COST_FIT_MIN_PIVOT; the message names the pair when two are proportional),
   and a result the planner cannot take (a coefficient outside the supported range:
   DCP_ERROR_OVERFLOW; all three 0: DCP_ERROR_INFEASIBLE). No allocation; thread-safe. */
DCPDEF dcp_status dcp_cost_fit_measurements(const dcp_cost_measurement *measurements,
                                            int32_t count, const dcp_cost_fit_options *options,
                                            dcp_cost_fit *fit, dcp_error *error);

/* -- src/planner.h -- */
/* =================================================================================== planner
   A plan lists K microbatches; microbatch k holds groups (first_rank, cp) that are aligned
   (first_rank % cp == 0) and disjoint; ranks in no group are idle in that microbatch. The
   samples of group g are group_samples[g.sample_offset .. + g.sample_count), as 0-based
   positions in the caller's lengths array. Groups of microbatch k are
   groups[microbatch_offsets[k] .. microbatch_offsets[k + 1]), sorted by first_rank. */

typedef struct dcp_group {
    int32_t first_rank;    /* pool rank of member 0; a multiple of cp */
    int32_t cp;            /* ranks of the group, a CP size of config (dcp_cp_size_allowed) */
    int32_t sample_offset; /* its samples are group_samples[sample_offset ..] */
    int32_t sample_count;  /* ... + sample_count), >= 1, in buffer order */
} dcp_group;

/* Every array belongs to the plan: dcp_plan_create (or _deserialize) allocates them with
   config.allocator, dcp_plan_destroy frees them. A plan is read-only for its users, and many
   threads may read it at once. */
typedef struct dcp_plan {
    dcp_config config;          /* resolved: no zero defaults left */
    int32_t num_samples;        /* N, the input's sample count */
    int64_t *sample_lengths;    /* [N] valid lengths in tokens, copied from the input */
    int32_t num_microbatches;   /* K, a multiple of config.microbatch_multiple */
    int32_t num_groups;         /* groups over all microbatches */
    int32_t *microbatch_offsets; /* [K + 1] microbatch k's groups are groups[offsets[k] ..
                                   offsets[k + 1]); offsets[0] = 0, offsets[K] = num_groups */
    dcp_group *groups;          /* [num_groups] microbatch by microbatch, by first_rank */
    int32_t *group_samples;     /* [N] sample ids (0-based input positions), group by group:
                                   each sample exactly once */
    uint64_t seal;              /* set by the library on a plan it made or read (creation,
                                   deserialization), which it then trusts without validating
                                   it again (dcp_plan_trusted); a plan built by hand, or a copy
                                   of the struct, is validated in full at each use. A sealed
                                   plan is read-only: a caller that changes one anyway sets
                                   seal to 0 first, so that it is validated again. */
} dcp_plan;

typedef struct dcp_plan_stats {
    double step_seconds;        /* under the plan's sync_ranks E (the model it was made for) */
    double dag_seconds;         /* E = 1: a group starts when all its ranks are free */
    double barrier_seconds;     /* E = D: sum over microbatches of the slowest group */
    double lower_bound_seconds; /* dcp_lower_bound of the plan's input, under the plan's E */
    double efficiency;          /* lower bound / step, both under the plan's E */
    double dag_lower_bound_seconds;     /* the bound under E = 1 */
    double barrier_lower_bound_seconds; /* the bound under E = D */
    int32_t sync_ranks;         /* the plan's E */
    double busy_seconds;        /* sum over ranks of time spent computing */
    int32_t num_microbatches;   /* the plan's K */
    int32_t num_groups;         /* the plan's groups */
    int32_t idle_rank_microbatches; /* (rank, microbatch) pairs with no group */
    int32_t samples_per_cp_level[DCP_CP_LEVELS]; /* samples at CP size c with floor(log2 c)
                                                    = i, index i (c = 2^i but for a group of
                                                    the whole pool, cp_sizes MEGATRON) */
    int64_t valid_tokens;       /* sum of the sample lengths */
    int64_t padded_tokens;      /* sum of the padded lengths at each sample's CP size */
    int64_t max_rank_tokens;    /* largest padded local token count of a rank in a microbatch */
} dcp_plan_stats;

/* Plans lengths[0 .. count) under config into a new *plan (config.allocator; release with
   dcp_plan_destroy). Before it allocates anything it bounds the memory it will need
   (dcp_plan_memory_estimate) and refuses a request above config.memory_limit with
   DCP_ERROR_OUT_OF_MEMORY naming both ("plan of 100000000 samples on 1024 ranks needs about
   115.0 GiB > memory limit 8.0 GiB (config.memory_limit)"); a failed allocation is
   DCP_ERROR_OUT_OF_MEMORY too. */
DCPDEF dcp_status dcp_plan_create(const dcp_config *config, const int64_t *lengths,
                                  int32_t count, dcp_plan **plan, dcp_error *error);
/* An upper bound on the bytes dcp_plan_create allocates at its peak (its scratch and the plan
   it returns) for count samples of any lengths under config: linear in count and in the
   ranks, each with a factor of the CP levels (log2 max_cp + 1), plus a bounded table of the
   E = D unloading. tests/test_memory.c measures the real peak with a counting allocator over
   strategies, CP sets, E and sizes, and fails if one exceeds it. DCP_ERROR_INVALID_ARGUMENT
   for a config dcp_config_resolve refuses, a count < 1 or a NULL bytes. No allocation;
   thread-safe. */
DCPDEF dcp_status dcp_plan_memory_estimate(const dcp_config *config, int32_t count,
                                           int64_t *bytes, dcp_error *error);
DCPDEF void dcp_plan_destroy(dcp_plan *plan);
/* -- src/plan_readers.h -- */
DCPDEF dcp_status dcp_plan_validate(const dcp_plan *plan, dcp_error *error);
/* DCP_OK at once for a plan the library made or read, as it made or read it (sealed: see
   dcp_plan.seal); any other plan is validated in full (dcp_plan_validate). Every function
   below that takes a plan checks it this way, so a plan is validated once, where it enters:
   its creation, its deserialization, or a first use when built by hand. */
DCPDEF dcp_status dcp_plan_trusted(const dcp_plan *plan, dcp_error *error);
/* cost NULL: the plan's own model. Allocates scratch (the plan's allocator), frees it. */
DCPDEF dcp_status dcp_plan_simulate(const dcp_plan *plan, const dcp_cost_model *cost,
                                    dcp_plan_stats *stats, dcp_error *error);
/* Start and end (seconds) of every group under the plan's sync_ranks E, into caller arrays
   of plan->num_groups entries. cost NULL: the plan's own model. */
DCPDEF dcp_status dcp_plan_schedule(const dcp_plan *plan, const dcp_cost_model *cost,
                                    double *group_start, double *group_end, dcp_error *error);
/* The same rule with given durations: group_seconds[g] is group g's time on each of its ranks
   (measured, or from any other model), finite and >= 0. What an executed step's per-group
   times add up to under the plan's E (bench/plan_vs_exec compares it with the prediction). */
DCPDEF dcp_status dcp_plan_schedule_durations(const dcp_plan *plan, const double *group_seconds,
                                              double *group_start, double *group_end,
                                              dcp_error *error);
/* Step time of the plan under any sync_ranks E (0: the plan's own; else a power of two
   dividing the plan's ranks, or the ranks), so reports can show E = 1, E = D and the chosen
   E side by side. cost NULL: the plan's own model. Allocates scratch, frees it. */
DCPDEF dcp_status dcp_plan_step_time(const dcp_plan *plan, const dcp_cost_model *cost,
                                     int32_t sync_ranks, double *seconds, dcp_error *error);
DCPDEF const char *dcp_strategy_name(dcp_strategy strategy);
/* The CP sizes the plan's groups use, increasing, into sizes[] and the samples at each into
   samples[] (either may be NULL), at most capacity of them; *count receives how many there
   are (more than capacity: DCP_ERROR_INVALID_ARGUMENT after filling capacity). The plan's
   histogram by size (dcp_plan_stats.samples_per_cp_level counts by floor(log2 cp), which
   sizes that are not powers of two share). No allocation. */
DCPDEF dcp_status dcp_plan_cp_histogram(const dcp_plan *plan, int32_t *sizes, int32_t *samples,
                                        int32_t capacity, int32_t *count, dcp_error *error);

/* The timeline picture (what `dcp-plan --svg` and Python's Plan.svg() show), drawn here so that
   every front end shows the same thing: SVG text, one panel per plan, stacked on one time
   scale (the longest step). A panel has a row per rank and a box per group at its scheduled
   start and end (dcp_plan_schedule), coloured by CP size and numbered by microbatch, hover text
   with the group's ranks, sample ids, lengths and times; dashed lines where each microbatch
   ends; a red line at the lower bound; a legend of the CP sizes used.
   plans[0 .. count): 1 <= count <= DCP_PLAN_SVG_MAX_PLANS valid plans of one pool and one batch
   (same ranks, same sample count). titles: NULL, or one per plan (a NULL entry too) for the
   panel headings, XML-escaped here; default the strategy name ("static CP=c" for static CP).
   With count > 1 each panel says how much faster the last one is. cost NULL: each plan's own.
   *size receives the bytes the text needs, its terminating NUL included; a NULL buffer only
   asks for it. A buffer of fewer bytes gets an empty string (never a truncated picture) and
   DCP_ERROR_INVALID_ARGUMENT. Allocates schedule scratch (each plan's allocator), frees it.
   Numbers are printed with printf's %f, in the C locale's notation unless the program changed
   LC_NUMERIC. */
#define DCP_PLAN_SVG_MAX_PLANS 8
DCPDEF dcp_status dcp_plan_svg(const dcp_plan *const *plans, const char *const *titles,
                               int32_t count, const dcp_cost_model *cost, char *buffer,
                               size_t capacity, size_t *size, dcp_error *error);

/* -- src/views.h -- */
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

/* -- src/distributed.h -- */
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

/* -- src/reference.h -- */
/* ======================================================================= operation contracts
   The arguments every attention, RoPE and conv1d entry point takes, CPU reference or CUDA
   kernel alike, and the checks they all run first: element types, operation parameters with
   their defaults, the view of a ring step and the ring's step plan. Always compiled, so that
   dcp_cuda.cu and dcp_nccl.h build whatever switches a user sets. No allocation. */

/* Element type of a device tensor. */
typedef enum dcp_dtype {
    DCP_DTYPE_FLOAT32 = 0,
    DCP_DTYPE_BFLOAT16 = 1,
    DCP_DTYPE_FLOAT16 = 2
} dcp_dtype;

/* Bytes of one element of dtype (4 or 2); 0 for a value that is not a dcp_dtype. */
DCPDEF size_t dcp_dtype_size(dcp_dtype dtype);
/* Constant text for dtype ("float32", "bfloat16", "float16"; "unknown" for a value that is not
   a dcp_dtype): error messages of every unit and test labels use it. */
DCPDEF const char *dcp_dtype_name(dcp_dtype dtype);

/* Largest head_dim of attention: flash-attention's. It bounds the row of doubles each
   reference keeps on the stack. */
#define DCP_MAX_HEAD_DIM 256

/* Zero-initialise, set num_heads and head_dim. Q is [rows, num_heads, head_dim], K and V
   [rows, num_kv_heads, head_dim]; query head h reads kv head h / (num_heads / num_kv_heads). */
typedef struct dcp_attention_params {
    int32_t num_heads;    /* >= 1. Required. */
    int32_t num_kv_heads; /* divides num_heads (GQA); default num_heads */
    int32_t head_dim;     /* in [1, DCP_MAX_HEAD_DIM]. Required. */
    int32_t causal;       /* 0 or 1: a key is visible iff its position <= the query's */
    double softmax_scale; /* finite and > 0; default 1 / sqrt(head_dim) */
} dcp_attention_params;

/* The rows one step takes part with: queries from the q buffer of rank q_rank (its q_half of
   every sequence) against keys and values from the buffer of rank kv_rank (its kv_half).
   All zero: a rank's whole buffer against itself, which at cp 1 is plain varlen attention. */
typedef struct dcp_attention_view {
    int32_t q_rank;   /* rank in [0, cp) whose q buffer is read and whose out is written */
    dcp_half q_half;  /* its rows of every sequence the step computes */
    int32_t kv_rank;  /* rank in [0, cp) whose k and v buffers are read */
    dcp_half kv_half; /* its rows of every sequence that are keys */
} dcp_attention_view;

/* Checks params and fills their defaults (num_kv_heads, softmax_scale) into *resolved, as
   every attention entry point, CPU or CUDA, does first; view NULL means all zero, and
   dcp_attention_view_validate checks cp (any size in [1, DCP_MAX_RANKS]), its ranks against
   cp and its halves (which need cp > 1). No allocation. */
DCPDEF dcp_status dcp_attention_params_resolve(const dcp_attention_params *params,
                                               dcp_attention_params *resolved,
                                               dcp_error *error);
DCPDEF dcp_status dcp_attention_view_validate(const dcp_attention_view *view, int32_t cp,
                                              dcp_error *error);

/* The ring order of a group of cp ranks (any cp in [1, DCP_MAX_RANKS]): the even ranks of
   the group going up, then the odd ones coming down, 0, 2, 4, ..., 5, 3, 1, and back to 0.
   Each rank's neighbours in that order are ranks r +- 1 or r +- 2, so that, a group being
   consecutive ranks of the pool, every ring of every size and position sends to at most four
   peers of the pool: r - 2, r - 1, r + 1, r + 2 (a plain ring r + 1 would reach a different
   rank for every group size, up to the whole pool across sizes). The zigzag chunks stay by
   rank: rank r of the group holds chunks r and 2cp - 1 - r whatever its ring position.
   dcp_ring_order: the rank at ring position `position`; dcp_ring_position: the inverse. */
DCPDEF dcp_status dcp_ring_order(int32_t cp, int32_t position, int32_t *rank, dcp_error *error);
DCPDEF dcp_status dcp_ring_position(int32_t cp, int32_t rank, int32_t *position,
                                    dcp_error *error);

/* Step `step` of a ring of cp ranks (any cp in [1, DCP_MAX_RANKS]) on rank `rank`
   (docs/DESIGN.md section 5): the KV comes from the rank `step` places before it in the ring
   order (dcp_ring_order), so that every step passes KV between ring neighbours. Causal: step 0
   is the whole local Q against the local KV with the mask; a source below rank gives all
   local Q against its first half, a source above rank the local second-half Q against all
   its KV, both without a mask (every key precedes every query there). Non-causal: every step
   is all against all without a mask. */
typedef struct dcp_ring_step {
    dcp_attention_view view; /* q_rank = rank, kv_rank = the source */
    int32_t causal;          /* 1: the step needs the causal mask */
} dcp_ring_step;

DCPDEF dcp_status dcp_ring_step_plan(int32_t cp, int32_t rank, int32_t step, int32_t causal,
                                     dcp_ring_step *plan, dcp_error *error);

#define DCP_DEFAULT_ROPE_THETA 10000.0

typedef enum dcp_rope_style {
    DCP_ROPE_ROTATE_HALF = 0, /* GPT-NeoX: dims i and i + rotary_dim / 2 form a pair */
    DCP_ROPE_INTERLEAVED = 1  /* GPT-J: dims 2i and 2i + 1 form a pair */
} dcp_rope_style;

/* Zero-initialise for the defaults; NULL options mean all defaults. Pair i turns by the angle
   position x inv_freq[i], computed in double, position the global one of the CP split. */
typedef struct dcp_rope_options {
    dcp_rope_style style;   /* default DCP_ROPE_ROTATE_HALF */
    int32_t rotary_dim;     /* even, <= head_dim; dims past it are copied; default head_dim */
    double theta_base;      /* > 0; inv_freq[i] = theta_base^(-2i / rotary_dim); default
                               DCP_DEFAULT_ROPE_THETA; unused with a table */
    const double *inv_freq; /* [rotary_dim / 2] finite, or NULL for theta_base's: scaled
                               frequencies (YaRN and the like) come as this table */
} dcp_rope_options;

/* Checks options for a head_dim and fills the defaults into *resolved (options NULL: all
   defaults). A table given in options->inv_freq is read (each entry must be finite). */
DCPDEF dcp_status dcp_rope_options_resolve(const dcp_rope_options *options, int32_t head_dim,
                                           dcp_rope_options *resolved, dcp_error *error);

/* Widest conv1d accepted, and the width of a zero-initialised params (Gated DeltaNet's). */
#define DCP_CONV1D_MAX_WIDTH 8
#define DCP_DEFAULT_CONV1D_WIDTH 4

typedef struct dcp_conv1d_params {
    int32_t channels; /* >= 1. Required. */
    int32_t width;    /* W in [1, DCP_CONV1D_MAX_WIDTH]; default DCP_DEFAULT_CONV1D_WIDTH */
    int32_t silu;     /* 0 or 1: y = silu(pre-activation) */
} dcp_conv1d_params;

/* Checks params and fills the default width into *resolved. */
DCPDEF dcp_status dcp_conv1d_params_resolve(const dcp_conv1d_params *params,
                                           dcp_conv1d_params *resolved, dcp_error *error);

#ifndef DCP_NO_REFERENCE
/* ========================================================================== CPU references
   The semantics every CUDA kernel is tested against (docs/DESIGN.md section 5): attention forward
   and backward as one step that serves plain varlen attention and every ring-CP step alike,
   LSE merging and a driver that runs the c ranks of a ring in one process (by the contracts'
   step plan), RoPE with CP positions, and the causal depthwise conv1d of Gated DeltaNet.
   Clarity before speed: fp32 tensors, double for every sum that decides accuracy (softmax
   sums, dot products, weight and bias gradients) and loops in a fixed order, so results are
   deterministic. Guarantees: padding rows and invisible keys are skipped, never multiplied by
   zero (a NaN there cannot leak); every row a call owns is written (padding rows as 0, their
   LSE as -inf); arguments are checked and reported, never asserted; only the ring driver
   allocates (through the caller's allocator). Outputs must not overlap inputs unless a
   function says so. Define DCP_NO_REFERENCE before including dcp.h to leave them out. */

/* One attention step. Per query row of the view: softmax(scale q.k) over the visible keys of
   the view (same sequence, both valid, causal mask by global position when params->causal),
   into out [rows, num_heads, head_dim] and the natural-log LSE [num_heads, rows], fp32.
   A row with no visible key, padding rows included, gets 0 and LSE -inf. Rows outside the q
   view are left untouched. view NULL: all zero. */
DCPDEF dcp_status dcp_attention_forward(const dcp_attention_params *params,
                                        const dcp_thd_layout *layout,
                                        const dcp_attention_view *view, const float *q,
                                        const float *k, const float *v, float *out,
                                        float *lse, dcp_error *error);
/* Its gradient from the final (merged) out and lse: recomputes P = exp(scale q.k - lse) and
   ADDS into dq (rows of the q view) and dk, dv (rows of the kv view), so the steps of a ring
   sum up; the caller zeroes them first. With D_i = dO_i.O_i and dS_ij = P_ij (dO_i.V_j - D_i):
   dV_j += sum_i P_ij dO_i, dQ_i += scale sum_j dS_ij K_j, dK_j += scale sum_i dS_ij Q_i.
   Rows with LSE -inf contribute nothing. */
DCPDEF dcp_status dcp_attention_backward(const dcp_attention_params *params,
                                         const dcp_thd_layout *layout,
                                         const dcp_attention_view *view, const float *q,
                                         const float *k, const float *v, const float *out,
                                         const float *dout, const float *lse, float *dq,
                                         float *dk, float *dv, dcp_error *error);

/* Merging partial results through their LSEs (only num_heads and head_dim of params are
   read). An accumulator (acc_out like out, acc_lse like lse) starts at 0 and -inf on every
   local row; merge folds in a partial (out, lse) on the rows of `half` of every sequence,
   skipping -inf on either side; finalize copies the accumulator of rank `rank` to (out, lse)
   with padding rows 0 and -inf (out and lse may be acc_out and acc_lse themselves). */
DCPDEF dcp_status dcp_attention_acc_init(const dcp_attention_params *params,
                                         const dcp_thd_layout *layout, float *acc_out,
                                         float *acc_lse, dcp_error *error);
DCPDEF dcp_status dcp_attention_acc_merge(const dcp_attention_params *params,
                                          const dcp_thd_layout *layout, dcp_half half,
                                          const float *out, const float *lse, float *acc_out,
                                          float *acc_lse, dcp_error *error);
DCPDEF dcp_status dcp_attention_acc_finalize(const dcp_attention_params *params,
                                             const dcp_thd_layout *layout, int32_t rank,
                                             const float *acc_out, const float *acc_lse,
                                             float *out, float *lse, dcp_error *error);

/* The ring of layout->cp ranks simulated in one process: q[r], k[r], ... are rank r's local
   buffers. Forward runs exactly the steps of dcp_ring_step_plan and merges them through the
   LSE into out[r] and lse[r] (every local row written); allocates one rank's partial out and
   lse (allocator NULL: DCP_MALLOC) and frees it before returning. Backward zeroes dq, dk, dv,
   then adds each step's gradient: dq into rank r's buffer, dk and dv into the source's, as
   the ring sends them home. No allocation. */
DCPDEF dcp_status dcp_ring_attention_forward(const dcp_attention_params *params,
                                             const dcp_thd_layout *layout,
                                             const float *const *q, const float *const *k,
                                             const float *const *v, float *const *out,
                                             float *const *lse, const dcp_allocator *allocator,
                                             dcp_error *error);
DCPDEF dcp_status dcp_ring_attention_backward(
    const dcp_attention_params *params, const dcp_thd_layout *layout, const float *const *q,
    const float *const *k, const float *const *v, const float *const *out,
    const float *const *dout, const float *const *lse, float *const *dq, float *const *dk,
    float *const *dv, dcp_error *error);

/* y = RoPE(x) on the local buffer x [rows, num_heads, head_dim] of rank `rank`; padding rows
   give 0. y may be x. Backward applies the inverse rotation: dx from dy, likewise. */
DCPDEF dcp_status dcp_rope_forward(const dcp_rope_options *options,
                                   const dcp_thd_layout *layout, int32_t rank,
                                   int32_t num_heads, int32_t head_dim, const float *x,
                                   float *y, dcp_error *error);
DCPDEF dcp_status dcp_rope_backward(const dcp_rope_options *options,
                                    const dcp_thd_layout *layout, int32_t rank,
                                    int32_t num_heads, int32_t head_dim, const float *dy,
                                    float *dx, dcp_error *error);

/* Causal depthwise conv1d on a cp 1 layout, causal-conv1d's convention: x and y are
   [total_rows, channels] with total_rows >= cu_seqlens_padded[n] (a buffer tail may follow the
   last sequence), weight [channels, W], bias [channels] or NULL, and on a valid row t of a
   sequence starting at s: y[t,c] = act(bias[c] + sum_k weight[c,k] x[t-(W-1)+k, c]) where
   taps before s count as 0. Padding rows (each sequence's tail and the buffer tail) give 0
   and are never read. Backward writes dx (0 on padding rows), dweight and dbias, each a sum
   in double over sequences, then rows, in order. dbias may be NULL only when bias is; given
   without a bias it receives the gradient a bias would get. */
DCPDEF dcp_status dcp_conv1d_forward(const dcp_conv1d_params *params,
                                     const dcp_thd_layout *layout, int64_t total_rows,
                                     const float *x, const float *weight, const float *bias,
                                     float *y, dcp_error *error);
DCPDEF dcp_status dcp_conv1d_backward(const dcp_conv1d_params *params,
                                      const dcp_thd_layout *layout, int64_t total_rows,
                                      const float *x, const float *weight, const float *bias,
                                      const float *dy, float *dx, float *dweight,
                                      float *dbias, dcp_error *error);
#endif /* DCP_NO_REFERENCE */

/* -- src/cuda.h -- */
/* ======================================================================= CUDA declarations
   Defined in dcp_cuda.cu (compile it with nvcc and link it); never behind DCP_STATIC, because
   that translation unit is separate. Device pointers and a stream in, a dcp_status out. */

#ifndef DCP_CUDA_DEF
#define DCP_CUDA_DEF extern
#endif

/* Number of CUDA devices visible (0 when there is no driver or no device: not an error, so
   that callers and tests can skip the GPU path and say why). */
DCP_CUDA_DEF dcp_status dcp_cuda_device_count(int32_t *count, dcp_error *error);

/* A THD layout for device kernels: thd.cu_seqlens and thd.cu_seqlens_padded point to DEVICE
   memory (int32, as FlashAttention and TransformerEngine take them); the host-side sizes let a
   launch size its grid over real rows without reading device memory back. dcp_rank_view gives
   all three numbers. */
typedef struct dcp_cuda_layout {
    dcp_thd_layout thd;        /* the cu arrays in device memory; num_sequences and cp */
    int64_t local_rows;        /* cu_seqlens_padded[num_sequences] / cp */
    int32_t max_seqlen_padded; /* largest cu_seqlens_padded[i + 1] - cu_seqlens_padded[i] */
} dcp_cuda_layout;

/* Device scratch the attention entry points need for a layout (its tile schedule). Callers
   allocate it once per shape bound and reuse it: no entry point allocates. */
DCP_CUDA_DEF dcp_status dcp_cuda_attention_workspace_size(const dcp_attention_params *params,
                                                          const dcp_cuda_layout *layout,
                                                          size_t *bytes, dcp_error *error);

/* One attention step on the device, the contract of dcp_attention_forward: q of rank
   view->q_rank (its q_half rows) against k, v of rank view->kv_rank (its kv_half rows); q, k,
   v in dtype (bfloat16 or float16); out in out_dtype (float32 for ring partials that are then
   merged, or dtype); lse float32 [num_heads, local_rows]. stream is a cudaStream_t (NULL: the
   default stream); the call only enqueues work. */
DCP_CUDA_DEF dcp_status dcp_cuda_attention_forward(
    const dcp_attention_params *params, const dcp_cuda_layout *layout,
    const dcp_attention_view *view, dcp_dtype dtype, const void *q, const void *k, const void *v,
    dcp_dtype out_dtype, void *out, float *lse, void *workspace, size_t workspace_bytes,
    void *stream, dcp_error *error);

/* Which kernels the forward runs. MMA_SYNC: the sm_80+ kernels (mma.sync), on every device.
   WGMMA: the sm_90a kernels (wgmma, 128 query rows a block); only on a device of compute
   capability 9.0 with dcp_cuda.cu built for sm_90a and out 16-byte aligned, otherwise the call
   fails with DCP_ERROR_UNSUPPORTED. AUTO, what dcp_cuda_attention_forward runs: MMA_SYNC for
   now, because the wgmma kernels have not yet passed the GPU tests on an H100; it becomes
   WGMMA where available once they have. The backward is mma.sync on every path. */
typedef enum dcp_cuda_attention_path {
    DCP_CUDA_ATTENTION_PATH_AUTO = 0,
    DCP_CUDA_ATTENTION_PATH_MMA_SYNC = 1,
    DCP_CUDA_ATTENTION_PATH_WGMMA = 2
} dcp_cuda_attention_path;

/* *available = 1 when path can run: AUTO and MMA_SYNC always (every device a build serves;
   without a device a launch fails with DCP_ERROR_CUDA, not this check), WGMMA only on a device
   of compute capability 9.0 with dcp_cuda.cu built for sm_90a (0 without a device).
   Host-only. */
DCP_CUDA_DEF dcp_status dcp_cuda_attention_path_available(dcp_cuda_attention_path path,
                                                          int32_t *available, dcp_error *error);

/* dcp_cuda_attention_forward on the kernels of path (tests run both against the reference). */
DCP_CUDA_DEF dcp_status dcp_cuda_attention_forward_using(
    dcp_cuda_attention_path path, const dcp_attention_params *params,
    const dcp_cuda_layout *layout, const dcp_attention_view *view, dcp_dtype dtype,
    const void *q, const void *k, const void *v, dcp_dtype out_dtype, void *out, float *lse,
    void *workspace, size_t workspace_bytes, void *stream, dcp_error *error);

/* The gradient of one step, the contract of dcp_attention_backward: out and dout (dtype) are
   the final merged output and its gradient, lse the final float32 LSE; ADDS into float32 dq,
   dk, dv. q, k, v and dout 16-byte aligned, out 8-byte aligned. deterministic (no default: 0
   or 1, anything else is rejected): 1 = bitwise reproducible, dq by its own query-stationary
   kernel, every gradient element added once; 0 = faster, dq accumulated with float32 atomics
   (dk, dv still added once), so dq's last bits may vary from run to run. Its kernels keep
   two tiles in flight where the device's shared memory per block allows
   (cudaDevAttrMaxSharedMemoryPerBlockOptin) and one where it does not: head dim 128 on
   sm_86, sm_89 and sm_120 (99 KB). */
DCP_CUDA_DEF dcp_status dcp_cuda_attention_backward(
    const dcp_attention_params *params, const dcp_cuda_layout *layout,
    const dcp_attention_view *view, dcp_dtype dtype, const void *q, const void *k, const void *v,
    const void *out, const void *dout, const float *lse, float *dq, float *dk, float *dv,
    int32_t deterministic, void *workspace, size_t workspace_bytes, void *stream,
    dcp_error *error);

/* LSE merge on the device, the contracts of dcp_attention_acc_init / _merge / _finalize:
   float32 accumulators; merge folds a float32 partial into the rows of `half`; finalize
   writes out in out_dtype and lse float32, padding rows 0 and -inf. */
DCP_CUDA_DEF dcp_status dcp_cuda_acc_init(const dcp_attention_params *params,
                                          const dcp_cuda_layout *layout, float *acc_out,
                                          float *acc_lse, void *stream, dcp_error *error);
DCP_CUDA_DEF dcp_status dcp_cuda_acc_merge(const dcp_attention_params *params,
                                           const dcp_cuda_layout *layout, dcp_half half,
                                           const float *out, const float *lse, float *acc_out,
                                           float *acc_lse, void *stream, dcp_error *error);
DCP_CUDA_DEF dcp_status dcp_cuda_acc_finalize(const dcp_attention_params *params,
                                              const dcp_cuda_layout *layout, int32_t rank,
                                              const float *acc_out, const float *acc_lse,
                                              dcp_dtype out_dtype, void *out, float *lse,
                                              void *stream, dcp_error *error);

/* count float32 values to dtype (gradients accumulated in float32, for example). */
DCP_CUDA_DEF dcp_status dcp_cuda_convert(const float *in, dcp_dtype dtype, void *out,
                                         int64_t count, void *stream, dcp_error *error);

/* acc[i] += x[i] for count float32 values (the ring backward folds a step's dK, dV into the
   accumulator that arrived meanwhile). acc and x must not overlap. */
DCP_CUDA_DEF dcp_status dcp_cuda_add_float32(float *acc, const float *x, int64_t count,
                                             void *stream, dcp_error *error);

/* The ring of layout->cp ranks simulated on one device, mirroring dcp_ring_attention_forward
   and _backward: q[r], k[r], v[r], ... are rank r's device buffers (host arrays of cp device
   pointers). Forward runs, per rank, exactly the steps of dcp_ring_step_plan through
   dcp_cuda_attention_forward (a float32 partial) and dcp_cuda_acc_merge, as a real ring
   would, then dcp_cuda_acc_finalize writes out[r] (out_dtype) and lse[r]. Scratch for one
   rank at a time comes from the caller (no allocation): partial_out and acc_out of
   local_rows x num_heads x head_dim floats, partial_lse and acc_lse of num_heads x local_rows
   floats, and the workspace of dcp_cuda_attention_workspace_size. Backward zeroes the float32
   dq[r], dk[r], dv[r], then adds each step's gradient (dcp_cuda_attention_backward; out and
   dout in dtype): dq into rank r, dk and dv into the KV's source rank. */
DCP_CUDA_DEF dcp_status dcp_cuda_virtual_ring_forward(
    const dcp_attention_params *params, const dcp_cuda_layout *layout, dcp_dtype dtype,
    const void *const *q, const void *const *k, const void *const *v, dcp_dtype out_dtype,
    void *const *out, float *const *lse, float *partial_out, float *partial_lse,
    float *acc_out, float *acc_lse, void *workspace, size_t workspace_bytes, void *stream,
    dcp_error *error);
DCP_CUDA_DEF dcp_status dcp_cuda_virtual_ring_backward(
    const dcp_attention_params *params, const dcp_cuda_layout *layout, dcp_dtype dtype,
    const void *const *q, const void *const *k, const void *const *v, const void *const *out,
    const void *const *dout, const float *const *lse, float *const *dq, float *const *dk,
    float *const *dv, int32_t deterministic, void *workspace, size_t workspace_bytes,
    void *stream, dcp_error *error);

/* A device layout from the host copy of the arrays (checked with dcp_thd_layout_validate;
   local_rows and max_seqlen_padded are computed from it) and the device copies the kernels
   read, which must hold the same values. Host-only: no CUDA call, no allocation. */
DCP_CUDA_DEF dcp_status dcp_cuda_layout_init(const dcp_thd_layout *host,
                                             const int32_t *device_cu_seqlens,
                                             const int32_t *device_cu_seqlens_padded,
                                             dcp_cuda_layout *layout, dcp_error *error);

/* RoPE on the device, the contract of dcp_rope_forward / dcp_rope_backward, for q and k in
   one launch: q [local_rows, num_q_heads, head_dim] into q_out and k [local_rows,
   num_k_heads, head_dim] into k_out, in dtype (float32, bfloat16 or float16; float32 math,
   angles in double), on rank `rank` of the layout's CP split (positions are computed on the
   device from cu_seqlens_padded). Either tensor may be absent: its input and output NULL (its
   head count is then ignored). An output may be its input. options->inv_freq, when not NULL,
   is a DEVICE array of rotary_dim / 2 doubles (never read on the host). Padding rows give 0.
   Backward takes the output gradients as q, k and writes the input gradients. */
DCP_CUDA_DEF dcp_status dcp_cuda_rope_forward(const dcp_rope_options *options,
                                              const dcp_cuda_layout *layout, int32_t rank,
                                              dcp_dtype dtype, int32_t head_dim,
                                              int32_t num_q_heads, const void *q, void *q_out,
                                              int32_t num_k_heads, const void *k, void *k_out,
                                              void *stream, dcp_error *error);
DCP_CUDA_DEF dcp_status dcp_cuda_rope_backward(const dcp_rope_options *options,
                                               const dcp_cuda_layout *layout, int32_t rank,
                                               dcp_dtype dtype, int32_t head_dim,
                                               int32_t num_q_heads, const void *dq_out,
                                               void *dq, int32_t num_k_heads,
                                               const void *dk_out, void *dk, void *stream,
                                               dcp_error *error);

/* Widest conv1d the device kernels serve (wider: DCP_ERROR_UNSUPPORTED; one kernel per
   width), and the most row slices of the backward: each slice leaves one float partial per
   channel and weight/bias gradient in the workspace, summed in slice order afterwards
   (deterministic). */
#define DCP_CUDA_CONV1D_MAX_WIDTH DCP_CONV1D_MAX_WIDTH
#define DCP_CUDA_CONV1D_SLICES 64

/* How the conv1d kernels split a shape (every launch of that shape the same, whatever the
   device, so dweight's summation order and bits are too): a warp streams rows_per_warp
   consecutive rows of 32 x vector_width channels; a block is warps_per_block warps over one
   channel group and consecutive runs (a slice); the grid is slices x channel_groups. The
   backward keeps slices <= DCP_CUDA_CONV1D_SLICES. */
typedef struct dcp_cuda_conv1d_geometry {
    int32_t vector_width;    /* channels per thread: 16 bytes of dtype (8 in the backward
                                of 16-bit dtypes), or 1 */
    int32_t warps_per_block;
    int32_t channel_groups;  /* grid y */
    int64_t slices;          /* grid x; 0 when total_rows is 0 */
    int64_t rows_per_warp;
} dcp_cuda_conv1d_geometry;

/* The geometry dcp_cuda_conv1d_forward (backward 0) or _backward (backward 1) launches for
   params, total_rows rows and dtype, with 16-byte accesses when `vector` (the tensors
   16-byte aligned) and the channel count allow. Host-only: no CUDA call. */
DCP_CUDA_DEF dcp_status dcp_cuda_conv1d_launch_geometry(const dcp_conv1d_params *params,
                                                        int64_t total_rows, dcp_dtype dtype,
                                                        int32_t backward, int32_t vector,
                                                        dcp_cuda_conv1d_geometry *geometry,
                                                        dcp_error *error);

/* Bytes of device workspace dcp_cuda_conv1d_backward needs for params (any row count). */
DCP_CUDA_DEF dcp_status dcp_cuda_conv1d_workspace_size(const dcp_conv1d_params *params,
                                                       size_t *bytes, dcp_error *error);
/* Causal depthwise conv1d on the device, the contracts of dcp_conv1d_forward / _backward:
   x, y, dy, dx [total_rows, channels] in dtype (float32, bfloat16 or float16), weight
   [channels, width] and bias [channels] (or NULL) float32, float32 math; dweight and dbias
   (float32) are written, not added, and bitwise reproducible (per-slice partials in the
   workspace, then an ordered sum; no atomics). A layout of cp 1. */
DCP_CUDA_DEF dcp_status dcp_cuda_conv1d_forward(const dcp_conv1d_params *params,
                                                const dcp_cuda_layout *layout,
                                                int64_t total_rows, dcp_dtype dtype,
                                                const void *x, const float *weight,
                                                const float *bias, void *y, void *stream,
                                                dcp_error *error);
DCP_CUDA_DEF dcp_status dcp_cuda_conv1d_backward(const dcp_conv1d_params *params,
                                                 const dcp_cuda_layout *layout,
                                                 int64_t total_rows, dcp_dtype dtype,
                                                 const void *x, const float *weight,
                                                 const float *bias, const void *dy, void *dx,
                                                 float *dweight, float *dbias,
                                                 void *workspace, size_t workspace_bytes,
                                                 void *stream, dcp_error *error);

#ifndef DCP_NO_DISTRIBUTED /* the layout moves of the distributed logic */
/* The head-parallel all-to-all's segment lists on the device, the contract of
   dcp_a2a_segments_copy: segments is a DEVICE array of count entries (dcp_a2a_segments,
   uploaded), total_rows the rows of the segments the call runs (PACK: the first `copies`;
   UNPACK: all of them), which the caller knows from dcp_a2a_shape without reading the device.
   16-byte copies when local, message, slice_bytes and local_pitch are multiples of 16, else
   the widest of 8, 4, 2, 1 bytes that divides them all. Enqueue only. */
DCP_CUDA_DEF dcp_status dcp_cuda_a2a_copy(const dcp_a2a_segment *segments, int64_t count,
                                          int64_t copies, int64_t total_rows, size_t slice_bytes,
                                          size_t local_pitch, dcp_a2a_direction direction,
                                          void *local, void *message, void *stream,
                                          dcp_error *error);

/* The MTP roll's two kernels, the contracts of dcp_mtp_roll_gather / dcp_mtp_roll_shift on a
   device layout (rank `rank` of layout.thd.cp): in, out [local_rows] and boundaries,
   received [DCP_MTP_ROLL_HALVES][num_sequences] elements of element_size bytes (any size;
   moved as 16-, 8-, 4-, 2- or 1-byte words, the widest the size and the pointers allow).
   received NULL leaves the rows that need another rank's element unwritten; out must not
   overlap in. dcp_nccl_mtp_roll runs gather, the exchange and shift. */
DCP_CUDA_DEF dcp_status dcp_cuda_mtp_roll_gather(const dcp_cuda_layout *layout, int32_t rank,
                                                 size_t element_size, const void *in,
                                                 void *boundaries, void *stream,
                                                 dcp_error *error);
DCP_CUDA_DEF dcp_status dcp_cuda_mtp_roll_shift(const dcp_cuda_layout *layout, int32_t rank,
                                                size_t element_size, const void *in,
                                                const void *received, void *out, void *stream,
                                                dcp_error *error);
#endif /* DCP_NO_DISTRIBUTED */

#ifdef __cplusplus
}
#endif

#endif /* DCP_H */

/* ============================================================================================
   IMPLEMENTATION
   ========================================================================================= */
#ifdef DCP_IMPLEMENTATION
#ifndef DCP_IMPLEMENTATION_INCLUDED
#define DCP_IMPLEMENTATION_INCLUDED

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(DCP_MALLOC) != defined(DCP_FREE)
#error "define both DCP_MALLOC and DCP_FREE, or neither"
#endif
#ifndef DCP_MALLOC
#define DCP_MALLOC(size) malloc(size)
#define DCP_FREE(ptr) free(ptr)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* -- src/base.h -- */
/* ------------------------------------------------------------------------------ basics */

DCPDEF const char *dcp_status_string(dcp_status status)
{
    switch (status) {
    case DCP_OK: return "ok";
    case DCP_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case DCP_ERROR_INFEASIBLE: return "infeasible";
    case DCP_ERROR_OVERFLOW: return "overflow";
    case DCP_ERROR_OUT_OF_MEMORY: return "out of memory";
    case DCP_ERROR_PARSE: return "parse error";
    case DCP_ERROR_IO: return "i/o error";
    case DCP_ERROR_INVALID_PLAN: return "invalid plan";
    case DCP_ERROR_CORRUPT_DATA: return "corrupt data";
    case DCP_ERROR_UNSUPPORTED: return "unsupported";
    case DCP_ERROR_CUDA: return "cuda error";
    case DCP_ERROR_NCCL: return "nccl error";
    }
    return "unknown status";
}

DCPDEF dcp_status dcp_error_set(dcp_error *error, dcp_status status, const char *format, ...)
{
    if (error) {
        va_list args;
        va_start(args, format);
        vsnprintf(error->message, sizeof error->message, format, args);
        va_end(args);
        error->status = status;
    }
    return status;
}

DCPDEF dcp_status dcp_error_clear(dcp_error *error)
{
    if (error) {
        error->status = DCP_OK;
        error->message[0] = '\0';
    }
    return DCP_OK;
}

DCPDEF void *dcp_alloc(const dcp_allocator *allocator, size_t size)
{
    if (size == 0) size = 1;
    if (allocator && allocator->alloc) return allocator->alloc(allocator->user, size);
    return DCP_MALLOC(size);
}

DCPDEF void dcp_free(const dcp_allocator *allocator, void *ptr)
{
    if (!ptr) return;
    if (allocator && allocator->free) {
        allocator->free(allocator->user, ptr);
        return;
    }
    DCP_FREE(ptr);
}

DCPDEF int dcp_is_pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

/* NaN fails both comparisons, an infinity one: libm-free and exact. */
static int dcp__is_finite(double x) { return x >= -DBL_MAX && x <= DBL_MAX; }

DCPDEF dcp_status dcp_check_rank(const char *name, int32_t rank, int32_t cp, dcp_error *error)
{
    if (rank < 0 || rank >= cp)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "%s must be in [0, cp %d), got %d",
                             name, (int)cp, (int)rank);
    return DCP_OK;
}

DCPDEF dcp_status dcp_check_rank_buffers(const char *name, const void *const *buffers, int32_t cp,
                                         dcp_error *error)
{
    int32_t r;
    if (!buffers)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "%s must not be NULL", name);
    for (r = 0; r < cp; r++)
        if (!buffers[r])
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "%s[%d] must not be NULL", name,
                                 (int)r);
    return DCP_OK;
}

/* Allocates count elements of element_size, failing cleanly on overflow or exhaustion. */
static void *dcp__alloc_array(const dcp_allocator *allocator, size_t count, size_t element_size,
                              const char *what, dcp_error *error)
{
    void *ptr;
    if (element_size != 0 && count > SIZE_MAX / element_size) {
        dcp_error_set(error, DCP_ERROR_OVERFLOW, "%s: %zu elements of %zu bytes overflow size_t",
                      what, count, element_size);
        return NULL;
    }
    ptr = dcp_alloc(allocator, count * element_size);
    if (!ptr)
        dcp_error_set(error, DCP_ERROR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes", what,
                      count * element_size);
    return ptr;
}

/* Entries of a fixed-size array. */
#define DCP__COUNT(array) ((int32_t)(sizeof(array) / sizeof((array)[0])))

/* Frees a list of arrays: a function allocates its arrays one by one, so that a failure
   names the array, and frees them as one list whatever the allocation got to (dcp_free
   skips NULL), so the list is the one place that names what it owns. */
static void dcp__free_list(const dcp_allocator *allocator, void *const *list, size_t count)
{
    size_t i;
    for (i = 0; i < count; i++) dcp_free(allocator, list[i]);
}

/* DCP_PLANNER_TRACE(phase, begin): an option macro for profiling, called with each planner
   phase's name (a string literal) before (begin 1) and after (begin 0) it runs: the tables,
   each baseline, each entry of the search table, the final choice (bench/plan_bench
   --profile). Empty by default. */
#ifndef DCP_PLANNER_TRACE
#define DCP_PLANNER_TRACE(phase, begin) ((void)0)
#endif

/* A rare path kept out of its hot caller, so that the caller inlines where it is used. */
#if defined(__GNUC__) || defined(__clang__)
#define DCP__OUT_OF_LINE __attribute__((noinline))
#else
#define DCP__OUT_OF_LINE
#endif

static int dcp__log2_int(int64_t x) /* floor(log2 x) for x >= 1: exact on a power of two */
{
    int level = 0;
    while (x > 1) {
        x >>= 1;
        level++;
    }
    return level;
}

#define DCP__WORD_BITS 64
/* The index of the lowest set bit of x != 0 (the compiler's builtin, else a de Bruijn
   sequence: portable C99). DCP__PORTABLE_BITS forces the portable code, so that a test
   compiled by gcc checks it too (tests/test_helpers.c). */
static int32_t dcp__lowest_bit_index(uint64_t x)
{
#if (defined(__GNUC__) || defined(__clang__)) && !defined(DCP__PORTABLE_BITS)
    return (int32_t)__builtin_ctzll((unsigned long long)x);
#else
    static const int8_t index[DCP__WORD_BITS] = {
        0,  1,  48, 2,  57, 49, 28, 3,  61, 58, 50, 42, 38, 29, 17, 4,  62, 55, 59, 36, 53, 51,
        43, 22, 45, 39, 33, 30, 24, 18, 12, 5,  63, 47, 56, 27, 60, 41, 37, 16, 54, 35, 52, 21,
        44, 32, 23, 11, 46, 26, 40, 15, 34, 20, 31, 10, 25, 14, 19, 9,  13, 8,  7,  6};
    return index[((x & (~x + 1)) * UINT64_C(0x03f79d71b4cb0a89)) >> 58];
#endif
}

static int64_t dcp__gcd(int64_t a, int64_t b)
{
    while (b != 0) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Forces a double through memory so that the compiler cannot fuse it into an FMA with the
   next operation: plans and generated lengths must be bit-identical on every machine. */
static double dcp__unfused(double x)
{
    volatile double stored = x;
    return stored;
}

static uint64_t dcp__splitmix64(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

DCPDEF void dcp_rng_seed(dcp_rng *rng, uint64_t seed)
{
    int i;
    if (!rng) return;
    for (i = 0; i < 4; i++) rng->state[i] = dcp__splitmix64(&seed);
}

static uint64_t dcp__rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

DCPDEF uint64_t dcp_rng_next(dcp_rng *rng)
{
    uint64_t *s = rng->state;
    uint64_t result = dcp__rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = dcp__rotl(s[3], 45);
    return result;
}

DCPDEF double dcp_rng_uniform(dcp_rng *rng)
{
    return (double)(dcp_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
}

DCPDEF uint64_t dcp_rng_below(dcp_rng *rng, uint64_t bound)
{
    uint64_t threshold, x;
    if (bound == 0) return 0;
    threshold = (0 - bound) % bound; /* reject the low values that would bias the modulo */
    do {
        x = dcp_rng_next(rng);
    } while (x < threshold);
    return x % bound;
}

/* exp and log from + - * / only (each product forced to double), so results do not depend on
   the platform's libm; accurate to a few ulp, which is all a length generator needs. */
static const double dcp__ln2_hi = 6.93147180369123816490e-01;
static const double dcp__ln2_lo = 1.90821492927058770002e-10;

static double dcp__exp(double x)
{
    double k, r, term, sum;
    int i;
    if (x > 709.0) return HUGE_VAL;
    if (x < -745.0) return 0.0;
    k = floor(dcp__unfused(x / dcp__ln2_hi) + 0.5);
    r = dcp__unfused(x - dcp__unfused(k * dcp__ln2_hi)) - dcp__unfused(k * dcp__ln2_lo);
    /* |r| <= ln2/2: the Taylor series to r^17 is exact to double precision */
    term = 1.0;
    sum = 1.0;
    for (i = 1; i <= 17; i++) {
        term = dcp__unfused(term * r) / (double)i;
        sum += term;
    }
    return ldexp(sum, (int)k);
}

static double dcp__log(double x) /* x > 0 and finite */
{
    int exponent;
    double m = frexp(x, &exponent), s, s2, power, sum;
    int i;
    if (m < 0.70710678118654752440) { /* keep m in [sqrt(1/2), sqrt(2)) */
        m *= 2.0;
        exponent--;
    }
    s = (m - 1.0) / (m + 1.0); /* log m = 2 atanh(s), |s| <= 0.1716 */
    s2 = dcp__unfused(s * s);
    power = s;
    sum = s;
    for (i = 3; i <= 41; i += 2) {
        power = dcp__unfused(power * s2);
        sum += power / (double)i;
    }
    return dcp__unfused((double)exponent * dcp__ln2_hi) +
           (dcp__unfused((double)exponent * dcp__ln2_lo) + dcp__unfused(2.0 * sum));
}

DCPDEF double dcp_rng_normal(dcp_rng *rng)
{
    for (;;) {
        double u = dcp__unfused(2.0 * dcp_rng_uniform(rng)) - 1.0;
        double v = dcp__unfused(2.0 * dcp_rng_uniform(rng)) - 1.0;
        double s = dcp__unfused(u * u) + dcp__unfused(v * v);
        if (s > 0.0 && s < 1.0)
            return dcp__unfused(u * sqrt(dcp__unfused(-2.0 * dcp__log(s)) / s));
    }
}

/* ---------------------------------------------------------------------- workload model */

static int dcp__all_zero_cost(const dcp_cost_model *cost)
{
    return cost->attn_coeff == 0.0 && cost->linear_coeff == 0.0 && cost->ring_step_cost == 0.0;
}

static dcp_status dcp__check_cost(const dcp_cost_model *cost, dcp_error *error)
{
    const double values[3] = {cost->attn_coeff, cost->linear_coeff, cost->ring_step_cost};
    const char *names[3] = {"attn_coeff", "linear_coeff", "ring_step_cost"};
    int i;
    for (i = 0; i < 3; i++) {
        if (!(values[i] >= 0.0 && values[i] <= DBL_MAX)) /* the negated test rejects NaN */
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "cost model %s must be finite and >= 0, got %g", names[i],
                                 values[i]);
        if (values[i] != 0.0 &&
            (values[i] < DCP_MIN_COST_COEFF || values[i] > DCP_MAX_COST_COEFF))
            return dcp_error_set(error, DCP_ERROR_OVERFLOW,
                                 "cost model %s = %g is outside the supported range: 0 or "
                                 "[%g, %g] (beyond it a batch's times leave the planner's "
                                 "integer ticks)",
                                 names[i], values[i], DCP_MIN_COST_COEFF, DCP_MAX_COST_COEFF);
    }
    return DCP_OK;
}

static dcp_status dcp__check_pow2_field(const char *name, int32_t value, dcp_error *error)
{
    if (!dcp_is_pow2(value))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "%s must be a power of two >= 1, got %d", name, (int)value);
    return DCP_OK;
}

static dcp_status dcp__check_multiple_field(const char *name, int32_t value, dcp_error *error)
{
    if (value < 1 || value > DCP_MAX_PAD_MULTIPLE)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "%s must be in [1, %d], got %d",
                             name, DCP_MAX_PAD_MULTIPLE, (int)value);
    return DCP_OK;
}

/* Megatron's largest power-of-two group below the DP x CP group of D ranks: its groups are
   2^i for 1 <= i < floor(log2 D), plus the whole group; on a power of two that is every
   power of two up to D. */
static int32_t dcp__megatron_pow2_top(int32_t ranks)
{
    int32_t top = 1;
    if (dcp_is_pow2(ranks)) return ranks;
    while ((int64_t)top * 4 <= ranks) top *= 2;
    return top;
}

static int dcp__cp_listed(const dcp_config *config, int64_t cp)
{
    int32_t i;
    for (i = 0; i < config->cp_size_count && i < DCP_CP_SIZE_LIST_CAPACITY; i++)
        if (config->cp_size_list[i] == cp) return 1;
    return 0;
}

/* Whether cp is one of cp_sizes' sizes on config's pool (dividing head_count when it is
   set), whatever min_cp and max_cp say. */
static int dcp__cp_in_set(const dcp_config *config, int64_t cp)
{
    if (cp < 1 || cp > config->ranks) return 0;
    if (config->head_count > 0 && config->head_count % cp != 0) return 0;
    switch (config->cp_sizes) {
    case DCP_CP_SIZES_MEGATRON:
        return cp == config->ranks ||
               (dcp_is_pow2(cp) && cp <= dcp__megatron_pow2_top(config->ranks));
    case DCP_CP_SIZES_ANY: return 1;
    case DCP_CP_SIZES_LIST: return dcp__cp_listed(config, cp);
    case DCP_CP_SIZES_POW2: break;
    }
    return dcp_is_pow2(cp);
}

/* Whether groups are aligned blocks (POW2 and MEGATRON: first_rank a multiple of cp). */
static int dcp__cp_aligned(const dcp_config *config)
{
    return config->cp_sizes == DCP_CP_SIZES_POW2 || config->cp_sizes == DCP_CP_SIZES_MEGATRON;
}

DCPDEF int dcp_cp_size_allowed(const dcp_config *resolved, int32_t cp)
{
    return resolved && cp >= resolved->min_cp && cp <= resolved->max_cp &&
           dcp__cp_in_set(resolved, cp);
}

/* The next size of the set after cp: of a list, the next entry; of every size, the next
   (dividing head_count: at most DCP_MAX_HEAD_COUNT steps); of the aligned sets, the next
   allowed power of two, then the pool. */
static DCP__OUT_OF_LINE int32_t dcp__cp_next_slow(const dcp_config *resolved, int32_t cp)
{
    int64_t next;
    int32_t i;
    if (resolved->cp_sizes == DCP_CP_SIZES_LIST) {
        for (i = 0; i < resolved->cp_size_count && i < DCP_CP_SIZE_LIST_CAPACITY; i++)
            if (resolved->cp_size_list[i] > cp && dcp__cp_in_set(resolved, resolved->cp_size_list[i]))
                return resolved->cp_size_list[i] <= resolved->max_cp ? resolved->cp_size_list[i] : 0;
        return 0;
    }
    if (resolved->cp_sizes == DCP_CP_SIZES_ANY) {
        for (next = (int64_t)cp + 1; next <= resolved->max_cp; next++)
            if (dcp__cp_in_set(resolved, next)) return (int32_t)next;
        return 0;
    }
    for (next = INT64_C(2) << dcp__log2_int(cp); next <= resolved->max_cp; next *= 2)
        if (dcp__cp_in_set(resolved, next)) return (int32_t)next;
    return dcp__cp_in_set(resolved, resolved->max_cp) ? resolved->max_cp : 0;
}

/* dcp_cp_size_next of a resolved config inside the planner's loops (per sample and size): the
   next power of two first. */
static int32_t dcp__cp_next(const dcp_config *resolved, int32_t cp)
{
    if (cp >= resolved->max_cp) return 0;
    if (cp < resolved->min_cp) return resolved->min_cp;
    if (resolved->cp_sizes == DCP_CP_SIZES_POW2 && resolved->head_count == 0 && dcp_is_pow2(cp))
        return 2 * cp;
    return dcp__cp_next_slow(resolved, cp);
}

DCPDEF int32_t dcp_cp_size_next(const dcp_config *resolved, int32_t cp)
{
    return resolved ? dcp__cp_next(resolved, cp) : 0;
}

DCPDEF const char *dcp_cp_sizes_name(dcp_cp_sizes sizes)
{
    switch (sizes) {
    case DCP_CP_SIZES_POW2: return "pow2";
    case DCP_CP_SIZES_MEGATRON: return "megatron";
    case DCP_CP_SIZES_ANY: return "any";
    case DCP_CP_SIZES_LIST: return "list";
    }
    return "unknown";
}

/* The top of the buddy tree the planner's own searches run on: the powers of two of the set
   from min_cp up, while none is missing (0 when min_cp is none). */
static int32_t dcp__pow2_top(const dcp_config *config)
{
    int32_t top = config->min_cp;
    if (!dcp_is_pow2(top) || !dcp__cp_in_set(config, top)) return 0;
    while ((int64_t)top * 2 <= config->max_cp && dcp__cp_in_set(config, (int64_t)top * 2))
        top *= 2;
    return top;
}

/* The size of a group of the whole pool when the pool is not a power of two and the config
   allows it (DCP_CP_SIZES_MEGATRON), else 0: the one allowed size outside the buddy tree. */
static int32_t dcp__pool_cp(const dcp_config *config)
{
    return !dcp_is_pow2(config->ranks) && dcp_cp_size_allowed(config, config->ranks)
               ? config->ranks
               : 0;
}

/* min_cp or max_cp: one of cp_sizes' sizes (the power-of-two message where the set is the
   powers of two). */
static dcp_status dcp__check_size_field(const dcp_config *config, const char *name,
                                        int32_t value, dcp_error *error)
{
    if (dcp__cp_in_set(config, value) || (value > config->ranks && dcp_is_pow2(value) &&
                                          config->cp_sizes == DCP_CP_SIZES_POW2))
        return DCP_OK; /* a power of two above the pool: the range check's message */
    if (config->head_count > 0 && value >= 1 && config->head_count % value != 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "%s %d does not divide head_count %d", name, (int)value,
                             (int)config->head_count);
    if (config->cp_sizes == DCP_CP_SIZES_POW2 ||
        (config->cp_sizes == DCP_CP_SIZES_MEGATRON && dcp_is_pow2(config->ranks)))
        return dcp__check_pow2_field(name, value, error);
    if (config->cp_sizes == DCP_CP_SIZES_MEGATRON && value <= config->ranks)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "%s must be a CP size of cp_sizes megatron on %d ranks (a power of "
                             "two <= %d, or %d), got %d",
                             name, (int)config->ranks, (int)dcp__megatron_pow2_top(config->ranks),
                             (int)config->ranks, (int)value);
    if (config->cp_sizes == DCP_CP_SIZES_LIST && value <= config->ranks)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "%s %d is not in cp_size_list", name, (int)value);
    return DCP_OK; /* above the pool: the range check names it */
}

/* cp_sizes, the list and head_count of a config being resolved. */
static dcp_status dcp__check_cp_set(const dcp_config *c, dcp_error *error)
{
    int32_t i;
    if (c->cp_sizes != DCP_CP_SIZES_POW2 && c->cp_sizes != DCP_CP_SIZES_MEGATRON &&
        c->cp_sizes != DCP_CP_SIZES_ANY && c->cp_sizes != DCP_CP_SIZES_LIST)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "cp_sizes %d is not a dcp_cp_sizes (0 pow2, 1 megatron, 2 any, 3 "
                             "list)",
                             (int)c->cp_sizes);
    if (c->head_count < 0 || c->head_count > DCP_MAX_HEAD_COUNT)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "head_count must be in [0, %d], got %d", DCP_MAX_HEAD_COUNT,
                             (int)c->head_count);
    if (c->cp_sizes == DCP_CP_SIZES_LIST &&
        (c->cp_size_count < 1 || c->cp_size_count > DCP_CP_SIZE_LIST_CAPACITY))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "cp_size_count must be in [1, %d] with cp_sizes list, got %d",
                             DCP_CP_SIZE_LIST_CAPACITY, (int)c->cp_size_count);
    if (c->cp_sizes != DCP_CP_SIZES_LIST && c->cp_size_count != 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "cp_size_count must be 0 unless cp_sizes is list, got %d",
                             (int)c->cp_size_count);
    for (i = 0; i < DCP_CP_SIZE_LIST_CAPACITY; i++) {
        const int32_t size = c->cp_size_list[i];
        if (i >= c->cp_size_count && size != 0)
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "cp_size_list[%d] = %d past cp_size_count %d must be 0", (int)i,
                                 (int)size, (int)c->cp_size_count);
        if (i < c->cp_size_count &&
            (size < 1 || size > c->ranks || (i > 0 && size <= c->cp_size_list[i - 1])))
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "cp_size_list[%d] = %d: the sizes must increase within [1, "
                                 "ranks %d]",
                                 (int)i, (int)size, (int)c->ranks);
    }
    return DCP_OK;
}

/* The smallest and the largest size of a checked set on the pool; 0 when it has none (a list
   none of whose sizes divides head_count). */
static void dcp__cp_set_range(const dcp_config *c, int32_t *smallest, int32_t *largest)
{
    int64_t size;
    int32_t i;
    *smallest = *largest = 0;
    if (c->cp_sizes == DCP_CP_SIZES_LIST) {
        for (i = 0; i < c->cp_size_count; i++)
            if (dcp__cp_in_set(c, c->cp_size_list[i])) {
                if (*smallest == 0) *smallest = c->cp_size_list[i];
                *largest = c->cp_size_list[i];
            }
        return;
    }
    *smallest = 1;
    if (c->cp_sizes == DCP_CP_SIZES_ANY && c->head_count > 0) { /* the largest divisor <= D */
        for (size = 1; size * size <= c->head_count; size++) {
            if (c->head_count % size != 0) continue;
            if (size <= c->ranks && size > *largest) *largest = (int32_t)size;
            if (c->head_count / size <= c->ranks && c->head_count / size > *largest)
                *largest = (int32_t)(c->head_count / size);
        }
        return;
    }
    if (dcp__cp_in_set(c, c->ranks)) {
        *largest = c->ranks;
        return;
    }
    for (size = 1; size * 2 <= c->ranks && dcp__cp_in_set(c, size * 2); size *= 2) {}
    *largest = (int32_t)size;
}

/* A group's cp argument: a size of the set no larger than max_cp (smaller than min_cp is
   fine: these functions describe a size, not a plan). */
static dcp_status dcp__check_cp_arg(const dcp_config *config, int32_t cp, dcp_error *error)
{
    if (dcp__cp_in_set(config, cp) && cp <= config->max_cp) return DCP_OK;
    if (config->cp_sizes == DCP_CP_SIZES_POW2)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "cp must be a power of two <= max_cp %d, got %d",
                             (int)config->max_cp, (int)cp);
    return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                         "cp must be a CP size of cp_sizes %s <= max_cp %d, got %d",
                         dcp_cp_sizes_name(config->cp_sizes), (int)config->max_cp, (int)cp);
}

DCPDEF dcp_config dcp_config_init(void)
{
    dcp_config config;
    memset(&config, 0, sizeof config);
    return config;
}

/* E: a power of two dividing the pool, or the pool itself. */
static dcp_status dcp__check_sync_ranks(int32_t sync_ranks, int32_t ranks, dcp_error *error)
{
    if (sync_ranks == ranks || (dcp_is_pow2(sync_ranks) && ranks % sync_ranks == 0))
        return DCP_OK;
    return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                         "sync_ranks must be a power of two dividing ranks %d, or ranks itself, "
                         "got %d",
                         (int)ranks, (int)sync_ranks);
}

DCPDEF dcp_status dcp_config_resolve(const dcp_config *config, dcp_config *resolved,
                                     dcp_error *error)
{
    dcp_config c;
    dcp_status status;
    if (!config || !resolved)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "config and resolved must not be NULL");
    c = *config;
    if (c.ranks < 1 || c.ranks > DCP_MAX_RANKS)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "ranks must be in [1, %d], got %d",
                             DCP_MAX_RANKS, (int)c.ranks);
    if (c.max_tokens_per_rank < 1 || c.max_tokens_per_rank > DCP_MAX_SAMPLE_LENGTH)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "max_tokens_per_rank must be in [1, %lld], got %lld",
                             (long long)DCP_MAX_SAMPLE_LENGTH, (long long)c.max_tokens_per_rank);
    if (c.sync_ranks == 0) c.sync_ranks = c.ranks;
    if ((status = dcp__check_sync_ranks(c.sync_ranks, c.ranks, error)) != DCP_OK) return status;
    if ((status = dcp__check_cp_set(&c, error)) != DCP_OK) return status;
    if (c.cover_ranks != 0 && c.cover_ranks != 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "cover_ranks must be 0 or 1, got %d",
                             (int)c.cover_ranks);
    if (c.min_cp == 0 || c.max_cp == 0) {
        int32_t smallest, largest;
        dcp__cp_set_range(&c, &smallest, &largest);
        if (smallest == 0)
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "cp_size_list has no size that divides head_count %d",
                                 (int)c.head_count);
        if (c.min_cp == 0) c.min_cp = smallest;
        if (c.max_cp == 0) c.max_cp = largest;
    }
    if ((status = dcp__check_size_field(&c, "min_cp", c.min_cp, error)) != DCP_OK) return status;
    if ((status = dcp__check_size_field(&c, "max_cp", c.max_cp, error)) != DCP_OK) return status;
    if (c.max_cp > c.ranks)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "max_cp %d exceeds ranks %d",
                             (int)c.max_cp, (int)c.ranks);
    if (c.min_cp > c.max_cp)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "min_cp %d exceeds max_cp %d",
                             (int)c.min_cp, (int)c.max_cp);
    if (c.microbatch_multiple == 0) c.microbatch_multiple = 1;
    if (c.pad_multiple_cp1 == 0) c.pad_multiple_cp1 = 1;
    if (c.pad_multiple == 0) c.pad_multiple = 1;
    if ((status = dcp__check_multiple_field("microbatch_multiple", c.microbatch_multiple,
                                            error)) != DCP_OK)
        return status;
    if ((status = dcp__check_multiple_field("pad_multiple_cp1", c.pad_multiple_cp1, error)) !=
        DCP_OK)
        return status;
    if ((status = dcp__check_multiple_field("pad_multiple", c.pad_multiple, error)) != DCP_OK)
        return status;
    if ((status = dcp__check_cost(&c.cost, error)) != DCP_OK) return status;
    if (dcp__all_zero_cost(&c.cost)) {
        c.cost.attn_coeff = DCP_DEFAULT_ATTN_COEFF;
        c.cost.linear_coeff = DCP_DEFAULT_LINEAR_COEFF;
        c.cost.ring_step_cost = DCP_DEFAULT_RING_STEP_COST;
    }
    if (c.ring_charge != DCP_RING_PER_GROUP && c.ring_charge != DCP_RING_PER_SAMPLE)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "ring_charge %d is not a dcp_ring_charge (0 per group, 1 per sample)",
                             (int)c.ring_charge);
    if (c.strategy != DCP_STRATEGY_DYNAMIC && c.strategy != DCP_STRATEGY_STATIC &&
        c.strategy != DCP_STRATEGY_GREEDY)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "strategy %d is not a dcp_strategy",
                             (int)c.strategy);
    if ((c.allocator.alloc == NULL) != (c.allocator.free == NULL))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "allocator needs both alloc and free, or neither");
    if (c.memory_limit < 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "memory_limit must be >= 0 bytes (0: the default), got %lld",
                             (long long)c.memory_limit);
    if (c.memory_limit == 0) c.memory_limit = DCP_DEFAULT_MEMORY_LIMIT;
    *resolved = c;
    return dcp_error_clear(error);
}

/* lcm(a, b) by Euclid, out of the hot path: the padding of a group size that is not a power
   of two (the whole pool under cp_sizes MEGATRON). */
static DCP__OUT_OF_LINE int64_t dcp__lcm_slow(int64_t a, int64_t b)
{
    return a / dcp__gcd(a, b) * b;
}

/* lcm(c > 1 ? 2c : pad_multiple_cp1, pad_multiple) of a resolved config. For c > 1 the base
   is a power of two, whose gcd with any number is a power of two too: no loop on the hot path. */
static inline int64_t dcp__pad_multiple(const dcp_config *config, int32_t cp)
{
    int64_t user = config->pad_multiple;
    if (cp > 1) {
        int64_t base = 2 * (int64_t)cp, lowest_bit = user & -user;
        if (base & (base - 1)) return dcp__lcm_slow(base, user); /* a pool's size */
        return base / (lowest_bit < base ? lowest_bit : base) * user;
    }
    return config->pad_multiple_cp1 / dcp__gcd(config->pad_multiple_cp1, user) * user;
}

/* length rounded up to a multiple; a power-of-two multiple (the usual padding) by a mask, as
   the planner's tables round every sample at every size. */
static int64_t dcp__round_up(int64_t length, int64_t multiple)
{
    if ((multiple & (multiple - 1)) == 0) return (length + multiple - 1) & ~(multiple - 1);
    return (length + multiple - 1) / multiple * multiple;
}

static int64_t dcp__padded(const dcp_config *config, int64_t length, int32_t cp)
{
    return dcp__round_up(length, dcp__pad_multiple(config, cp));
}

static dcp_status dcp__check_length(int64_t length, dcp_error *error)
{
    if (length < 1 || length > DCP_MAX_SAMPLE_LENGTH)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "length must be in [1, %lld], got %lld",
                             (long long)DCP_MAX_SAMPLE_LENGTH, (long long)length);
    return DCP_OK;
}

DCPDEF dcp_status dcp_padded_length(const dcp_config *config, int64_t length, int32_t cp,
                                    int64_t *padded, dcp_error *error)
{
    dcp_config c;
    dcp_status status;
    if (!padded) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "padded must not be NULL");
    if ((status = dcp_config_resolve(config, &c, error)) != DCP_OK) return status;
    if ((status = dcp__check_length(length, error)) != DCP_OK) return status;
    if ((status = dcp__check_cp_arg(&c, cp, error)) != DCP_OK) return status;
    *padded = dcp__padded(&c, length, cp);
    return dcp_error_clear(error);
}

/* Smallest feasible CP size of a resolved config, or 0 when none fits. */
static int32_t dcp__cp_min(const dcp_config *config, int64_t length)
{
    int32_t cp;
    for (cp = config->min_cp; cp > 0; cp = dcp__cp_next(config, cp))
        if (dcp__padded(config, length, cp) / cp <= config->max_tokens_per_rank) return cp;
    return 0;
}

DCPDEF dcp_status dcp_cp_size_min(const dcp_config *config, int64_t length, int32_t *cp,
                                  dcp_error *error)
{
    dcp_config c;
    dcp_status status;
    if (!cp) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "cp must not be NULL");
    if ((status = dcp_config_resolve(config, &c, error)) != DCP_OK) return status;
    if ((status = dcp__check_length(length, error)) != DCP_OK) return status;
    *cp = dcp__cp_min(&c, length);
    if (*cp == 0)
        return dcp_error_set(error, DCP_ERROR_INFEASIBLE,
                             "length %lld > max_cp %d x max_tokens_per_rank %lld after padding",
                             (long long)length, (int)c.max_cp, (long long)c.max_tokens_per_rank);
    return dcp_error_clear(error);
}

static double dcp__attention_seconds(const dcp_cost_model *cost, int64_t length)
{
    double l = (double)length;
    return dcp__unfused(cost->attn_coeff * dcp__unfused(l * l));
}

/* Every per-rank compute time goes through here, so the planner's tables, the lower bound
   and the simulator agree to the last bit. */
static double dcp__sample_seconds(const dcp_cost_model *cost, double attention,
                                  int64_t padded_length, int32_t cp)
{
    double linear = dcp__unfused(cost->linear_coeff * (double)padded_length);
    /* by a power of two, multiplying by its exact reciprocal is the same scaling as the
       division, to the bit, at a fraction of its latency */
    if (cp > 0 && dcp_is_pow2(cp)) return (attention + linear) * (1.0 / (double)cp);
    return (attention + linear) / (double)(cp > 0 ? cp : 1);
}

DCPDEF double dcp_cost_sample_seconds(const dcp_cost_model *cost, int64_t length,
                                      int64_t padded_length, int32_t cp)
{
    return dcp__sample_seconds(cost, dcp__attention_seconds(cost, length), padded_length, cp);
}

DCPDEF double dcp_cost_ring_seconds(const dcp_cost_model *cost, int32_t cp)
{
    return cp > 1 ? dcp__unfused(cost->ring_step_cost * (double)(cp - 1)) : 0.0;
}

/* Validates the planner's inputs and computes every sample's minimum CP size. The message of
   an infeasible sample names it. cp_min may be NULL. */
static dcp_status dcp__check_samples(const dcp_config *config, const int64_t *lengths,
                                     int32_t count, int32_t *cp_min, dcp_error *error)
{
    int32_t i;
    if (!lengths)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "lengths must not be NULL");
    if (count < 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "count must be >= 1 (an empty batch has no plan), got %d", (int)count);
    for (i = 0; i < count; i++) {
        int32_t cp;
        if (lengths[i] < 1 || lengths[i] > DCP_MAX_SAMPLE_LENGTH)
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "sample %d has length %lld; lengths must be in [1, %lld]", (int)i,
                                 (long long)lengths[i], (long long)DCP_MAX_SAMPLE_LENGTH);
        cp = dcp__cp_min(config, lengths[i]);
        if (cp == 0)
            return dcp_error_set(error, DCP_ERROR_INFEASIBLE,
                                 "sample %d has length %lld > max_cp %d x max_tokens_per_rank %lld "
                                 "(after padding to a multiple of %lld)",
                                 (int)i, (long long)lengths[i], (int)config->max_cp,
                                 (long long)config->max_tokens_per_rank,
                                 (long long)dcp__pad_multiple(config, config->max_cp));
        if (cp_min) cp_min[i] = cp;
    }
    return DCP_OK;
}

/* Per-rank time of one sample alone at CP size cp: compute plus one ring. `attention` is
   dcp__attention_seconds of its length (computed once by callers that try every cp). */
static double dcp__alone_seconds_given(const dcp_config *config, double attention,
                                       int64_t length, int32_t cp)
{
    return dcp__sample_seconds(&config->cost, attention, dcp__padded(config, length, cp), cp) +
           dcp_cost_ring_seconds(&config->cost, cp);
}

static double dcp__alone_seconds(const dcp_config *config, int64_t length, int32_t cp)
{
    return dcp__alone_seconds_given(config, dcp__attention_seconds(&config->cost, length), length,
                                    cp);
}

/* A lower bound on a sample's best time alone over sizes in [cp_min, max_cp] of a range set,
   whose sizes may be too many to try: g(c) = work / c + G (c - 1), padding left out, over
   every real c in the range, is below the time at any allowed size. g is convex, smallest at
   sqrt(work / G). */
static double dcp__relaxed_alone_seconds(const dcp_config *config, double work, int32_t cp_min)
{
    const double ring = config->cost.ring_step_cost;
    double c = ring > 0.0 ? sqrt(work / ring) : (double)config->max_cp;
    if (c < (double)cp_min) c = (double)cp_min;
    if (c > (double)config->max_cp) c = (double)config->max_cp;
    return work / c + ring * (c - 1.0);
}

/* The sample's best per-rank time over its feasible CP sizes. Padding only adds, so at cp
   the time is at least g(cp) = (a L^2 + b L) / cp + G (cp - 1), which grows with cp once
   G cp^2 >= a L^2 + b L: from there on, a g(cp) at or above the best so far ends the search
   (the ring's cost keeps most samples from trying every CP size up to max_cp). */
static double dcp__best_alone_seconds(const dcp_config *config, double attention, int64_t length,
                                      int32_t cp_min)
{
    const double work = attention + config->cost.linear_coeff * (double)length;
    const double ring = config->cost.ring_step_cost;
    double best;
    int32_t cp;
    if (!dcp__cp_aligned(config)) return dcp__relaxed_alone_seconds(config, work, cp_min);
    best = dcp__alone_seconds_given(config, attention, length, cp_min);
    for (cp = dcp__cp_next(config, cp_min); cp > 0; cp = dcp__cp_next(config, cp)) {
        const double c = (double)cp;
        double t;
        if (ring * c * c >= work && work / c + ring * (c - 1.0) >= best) break;
        t = dcp__alone_seconds_given(config, attention, length, cp);
        if (t < best) best = t;
    }
    return best;
}

/* Whether the bound lets every sample reach every rank: with a group of the whole pool
   (dcp__pool_cp), or groups on any range (ANY, LIST: counting every rank is an upper bound on
   the ranks their sizes can tile, so the bound stays a bound). */
static int dcp__bound_flat(const dcp_config *config)
{
    return dcp__pool_cp(config) || !dcp__cp_aligned(config);
}

/* Ranks that aligned blocks of cp ranks cover: the only ranks a sample of CP size >= cp can
   use. For cp = min_cp these are the usable ranks. A group of the whole pool (dcp__pool_cp)
   reaches every rank. */
static int32_t dcp__ranks_covered(const dcp_config *config, int32_t cp)
{
    return dcp__bound_flat(config) ? config->ranks : config->ranks / cp * cp;
}

/* The lower bound counts work per power-of-two level of minimum CP size, each over the ranks
   its blocks cover; with a group of the whole pool allowed every sample can reach every
   rank, so all samples share one level (0). */
static void dcp__bound_levels(const dcp_config *config, int32_t *lowest, int32_t *top)
{
    if (dcp__bound_flat(config)) {
        *lowest = *top = 0;
        return;
    }
    *lowest = dcp__log2_int(config->min_cp);
    *top = dcp__log2_int(config->max_cp);
}

static int32_t dcp__bound_level(const dcp_config *config, int32_t cp_min)
{
    return dcp__bound_flat(config) ? 0 : dcp__log2_int(cp_min);
}

static int32_t dcp__usable_ranks(const dcp_config *config)
{
    return dcp__ranks_covered(config, config->min_cp);
}

/* The fewest tokens a sample stores on any CP size it may take: its padded length at its
   minimum CP size, as padding only grows with the size from 2 on (every padding multiple of
   c >= 2 divides the next size's), and at 1 the lesser of sizes 1 and 2. */
static int64_t dcp__fewest_tokens(const dcp_config *config, int64_t length, int32_t cp_min)
{
    const int32_t pool = dcp__pool_cp(config), next = dcp__cp_next(config, cp_min);
    int64_t tokens = dcp__padded(config, length, cp_min);
    if (!dcp__cp_aligned(config)) return length; /* sizes of every padding: none below L */
    if (cp_min == 1 && next > 0 && dcp__padded(config, length, next) < tokens)
        tokens = dcp__padded(config, length, next);
    /* the pool's multiple 2 D need not be one of the powers of two's */
    if (pool > cp_min && dcp__padded(config, length, pool) < tokens)
        tokens = dcp__padded(config, length, pool);
    return tokens;
}

/* A sample's share of the total work in the lower bound, for the `tokens` it stores at least:
   attention plus the linear layers' time of those tokens, and a ring share. Charged per
   group, a group of size c >= 2 holds at most c M padded tokens and pays c (c - 1) G of ring
   work per microbatch, so each of its tokens carries at least G (c - 1) / M of ring work;
   charged per sample, the sample pays c (c - 1) G itself, at least at its minimum c. */
static double dcp__bound_work(const dcp_config *config, double attention, int64_t tokens,
                              int32_t cp_min)
{
    const double stored = (double)tokens, steps = (double)(cp_min - 1);
    double work = attention + dcp__unfused(config->cost.linear_coeff * stored);
    double ring = config->ring_charge == DCP_RING_PER_SAMPLE
                      ? dcp__unfused(config->cost.ring_step_cost * steps) * (double)cp_min
                      : dcp__unfused(config->cost.ring_step_cost * steps) * stored /
                            (double)config->max_tokens_per_rank;
    return work + ring;
}

/* DCP__DEFINE_SORT(name, type, before) defines `static void name(type *keys, type *scratch,
   int64_t count)`: a typed stable merge sort (insertion-sorted runs of DCP__SORT_RUN, then
   bottom-up merges through scratch, count elements) by before(&a, &b), true when a goes
   strictly first. With a total order the result is qsort's; typed, the comparison inlines
   (qsort's calls through a pointer were a third of plan time on large batches). The
   planner's sorts (lower bound, sample orders, fill keys, plan assembly) share it. */
#define DCP__SORT_RUN 16
#define DCP__DEFINE_SORT(name, type, before)                                                    \
    static void name(type *keys, type *scratch, int64_t count)                                  \
    {                                                                                           \
        type *from = keys, *to = scratch, *swap;                                                \
        int64_t width, lo, i, k;                                                                \
        for (lo = 0; lo < count; lo += DCP__SORT_RUN) {                                         \
            int64_t hi = lo + DCP__SORT_RUN < count ? lo + DCP__SORT_RUN : count;               \
            for (i = lo + 1; i < hi; i++) {                                                     \
                type key = keys[i];                                                             \
                for (k = i; k > lo && before(&key, &keys[k - 1]); k--) keys[k] = keys[k - 1];  \
                keys[k] = key;                                                                  \
            }                                                                                   \
        }                                                                                       \
        for (width = DCP__SORT_RUN; width < count; width *= 2) {                                \
            for (lo = 0; lo < count; lo += 2 * width) {                                         \
                int64_t mid = lo + width < count ? lo + width : count;                          \
                int64_t hi = lo + 2 * width < count ? lo + 2 * width : count, a = lo, b = mid;  \
                for (k = lo; a < mid && b < hi; k++)                                            \
                    to[k] = before(&from[b], &from[a]) ? from[b++] : from[a++];                 \
                for (; a < mid; k++) to[k] = from[a++];                                         \
                for (; b < hi; k++) to[k] = from[b++];                                          \
            }                                                                                   \
            swap = from;                                                                        \
            from = to;                                                                          \
            to = swap;                                                                          \
        }                                                                                       \
        if (from != keys) memcpy(keys, from, (size_t)count * sizeof *keys);                     \
    }

/* Ids sorted by key, ties by increasing id (a total order: qsort is then deterministic
   everywhere): the planners' sample ids by decreasing work or tokens, the exchange's receives
   by increasing peer. */
typedef struct dcp__keyed {
    int64_t key;
    int32_t id;
} dcp__keyed;

/* key_sign 1: increasing keys; -1: decreasing. */
static int dcp__keyed_compare(const void *a, const void *b, int key_sign)
{
    const dcp__keyed *x = (const dcp__keyed *)a, *y = (const dcp__keyed *)b;
    if (x->key != y->key) return x->key < y->key ? -key_sign : key_sign;
    return x->id < y->id ? -1 : (x->id > y->id);
}

static int dcp__keyed_descending(const void *a, const void *b)
{
    return dcp__keyed_compare(a, b, -1);
}

static int dcp__keyed_ascending(const void *a, const void *b)
{
    return dcp__keyed_compare(a, b, 1);
}

static int dcp__keyed_before(const dcp__keyed *x, const dcp__keyed *y)
{
    return x->key != y->key ? x->key > y->key : x->id < y->id;
}
DCP__DEFINE_SORT(dcp__keyed_sort, dcp__keyed, dcp__keyed_before)

/* A stable least-significant-digit radix sort of keyed entries whose keys are >= 0 and whose
   ids ascend in the input: by decreasing key, ties by increasing id, which is
   dcp__keyed_sort's order, in DCP__RADIX_DIGITS passes of O(count) (a digit every key shares
   is skipped) instead of a merge sort's log2(count). scratch: [count]. */
#define DCP__RADIX_BITS 8
#define DCP__RADIX_BUCKETS (1 << DCP__RADIX_BITS)
#define DCP__RADIX_DIGITS (64 / DCP__RADIX_BITS)
/* Below this many entries the passes' fixed cost (DCP__RADIX_BUCKETS per digit) outweighs
   the merge sort's log2(count) passes. */
#define DCP__RADIX_MIN_COUNT 1024
static void dcp__keyed_radix_sort(dcp__keyed *keys, dcp__keyed *scratch, int32_t count)
{
    int32_t counts[DCP__RADIX_DIGITS][DCP__RADIX_BUCKETS], d, b, i;
    dcp__keyed *from = keys, *to = scratch, *swap;
    memset(counts, 0, sizeof counts);
    for (i = 0; i < count; i++) { /* ascending in ~key is descending in key */
        uint64_t inverted = ~(uint64_t)keys[i].key;
        for (d = 0; d < DCP__RADIX_DIGITS; d++)
            counts[d][(inverted >> (d * DCP__RADIX_BITS)) & (DCP__RADIX_BUCKETS - 1)]++;
    }
    for (d = 0; d < DCP__RADIX_DIGITS; d++) {
        int32_t at = 0, *offset = counts[d];
        for (b = 0; b < DCP__RADIX_BUCKETS && offset[b] < count; b++) {}
        if (b < DCP__RADIX_BUCKETS) continue; /* every key has this digit */
        for (b = 0; b < DCP__RADIX_BUCKETS; b++) {
            int32_t in_bucket = offset[b];
            offset[b] = at;
            at += in_bucket;
        }
        for (i = 0; i < count; i++) {
            uint64_t inverted = ~(uint64_t)from[i].key;
            to[offset[(inverted >> (d * DCP__RADIX_BITS)) & (DCP__RADIX_BUCKETS - 1)]++] = from[i];
        }
        swap = from;
        from = to;
        to = swap;
    }
    if (from != keys) memcpy(keys, from, (size_t)count * sizeof *keys);
}

/* One sample as the barrier bound sees it: its best time and the tokens it stores at least. */
typedef struct dcp__bound_item {
    double seconds;
    int64_t tokens;
    int32_t level; /* of its minimum CP size */
    int32_t id;
} dcp__bound_item;

/* The items slowest first, ties by id (a total order): by the bits of their seconds (>= 0,
   so ordered as the values) through dcp__keyed's sorts, the radix one on large batches (the
   merge sort of the items was a tenth of a large plan's bound). keyed: [2 count]; scratch:
   [count]. */
static void dcp__bound_items_sort(dcp__bound_item *items, dcp__bound_item *scratch,
                                  dcp__keyed *keyed, int32_t count)
{
    int32_t i;
    for (i = 0; i < count; i++) {
        uint64_t bits;
        memcpy(&bits, &items[i].seconds, sizeof bits);
        keyed[i].key = (int64_t)bits;
        keyed[i].id = i;
    }
    if (count >= DCP__RADIX_MIN_COUNT) dcp__keyed_radix_sort(keyed, keyed + count, count);
    else dcp__keyed_sort(keyed, keyed + count, count);
    for (i = 0; i < count; i++) scratch[i] = items[keyed[i].id];
    memcpy(items, scratch, (size_t)count * sizeof *items);
}

/* The barrier bound of the samples needing >= 2^level ranks, items slowest first. Let n(x) be
   the number of (block, microbatch) pairs whose slowest group takes longer than x: a group
   holding a sample slower than x (its best time alone, over every CP size, exceeds x) takes
   longer than x, and each pair holds at most cap = min(E, ranks covered) M tokens, so
   n(x) >= ceil(Tok(x) / cap) for the Tok(x) tokens (each sample's fewest padded tokens,
   dcp__fewest_tokens: the memory cap counts padded tokens) of the samples slower than x. When one block covers every usable rank (E at least
   the ranks covered), no group spans two blocks, so two samples of more than cap / 2 tokens
   never share a pair: n(x) is also at least the count of such samples slower than x (the
   bin-packing bound; it binds when long samples cannot pair up). A block's step is at least
   the sum of its microbatches' slowest groups, so the step is at least the mean over the
   blocks of the integral of n(x), which is sum_i t_i (n_i - n_{i-1}) with n_i the count after
   the i slowest samples (the layer-cake formula; n_i never falls). */
typedef struct dcp__barrier_level {
    int64_t capacity, tokens, pairs, big; /* a pair's tokens; so far: tokens, n_i, big samples */
    double blocks, integral;
    int one_block;
} dcp__barrier_level;

/* The largest barrier bound over the levels of samples needing >= 2^level ranks, items
   slowest first: one pass updates every level a sample counts in (its own and the lower). */
static double dcp__barrier_bound(const dcp_config *config, const dcp__bound_item *items,
                                 int32_t count, int32_t sync)
{
    dcp__barrier_level at[DCP_CP_LEVELS];
    int32_t i, level, lowest, top;
    double bound = 0.0;
    dcp__bound_levels(config, &lowest, &top);
    for (level = lowest; level <= top; level++) {
        int32_t covered = dcp__ranks_covered(config, (int32_t)1 << level);
        dcp__barrier_level *x = &at[level];
        x->capacity = (int64_t)(sync < covered ? sync : covered) * config->max_tokens_per_rank;
        x->blocks = (double)(sync < covered ? covered / sync : 1);
        x->one_block = sync >= covered;
        x->tokens = x->pairs = x->big = 0;
        x->integral = 0.0;
    }
    for (i = 0; i < count; i++)
        for (level = lowest; level <= items[i].level; level++) {
            dcp__barrier_level *x = &at[level];
            int64_t now;
            x->tokens += items[i].tokens;
            x->big += x->one_block && 2 * items[i].tokens > x->capacity;
            now = x->tokens / x->capacity + (x->tokens % x->capacity != 0);
            if (x->big > now) now = x->big;
            x->integral += items[i].seconds * (double)(now - x->pairs);
            x->pairs = now;
        }
    for (level = lowest; level <= top; level++)
        if (at[level].integral / at[level].blocks > bound)
            bound = at[level].integral / at[level].blocks;
    return bound;
}

/* Lower bounds of a resolved config over validated samples, one per sync ranks E in
   syncs[0 .. bounds), into seconds[]: the parts every E shares (each sample's best time and
   work, the slowest-first order) are computed once. */
static dcp_status dcp__lower_bounds(const dcp_config *config, const int64_t *lengths,
                                    int32_t count, const int32_t *cp_min, const int32_t *syncs,
                                    int32_t bounds, double *seconds, dcp_error *error)
{
    double work_at[DCP_CP_LEVELS], longest = 0.0;
    int32_t i, b, level, lowest, top, barrier = 0;
    dcp__bound_item *items = NULL, *scratch = NULL;
    dcp__keyed *keyed = NULL;
    dcp__bound_levels(config, &lowest, &top);
    for (b = 0; b < bounds; b++) barrier |= syncs[b] > 1;
    if (barrier) {
        items = (dcp__bound_item *)dcp__alloc_array(&config->allocator, (size_t)count,
                                                    sizeof *items, "lower bound", error);
        scratch = (dcp__bound_item *)dcp__alloc_array(&config->allocator, (size_t)count,
                                                      sizeof *scratch, "lower bound", error);
        keyed = (dcp__keyed *)dcp__alloc_array(&config->allocator, 2 * (size_t)count,
                                               sizeof *keyed, "lower bound", error);
        if (!items || !scratch || !keyed) {
            void *list[] = {items, scratch, keyed};
            dcp__free_list(&config->allocator, list, DCP__COUNT(list));
            return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
        }
    }
    for (level = 0; level < DCP_CP_LEVELS; level++) work_at[level] = 0.0;
    for (i = 0; i < count; i++) {
        double attention = dcp__attention_seconds(&config->cost, lengths[i]);
        double alone = dcp__best_alone_seconds(config, attention, lengths[i], cp_min[i]);
        int64_t tokens = dcp__fewest_tokens(config, lengths[i], cp_min[i]);
        int32_t own = dcp__bound_level(config, cp_min[i]);
        work_at[own] += dcp__bound_work(config, attention, tokens, cp_min[i]);
        if (alone > longest) longest = alone;
        if (items) {
            items[i].seconds = alone;
            items[i].tokens = tokens;
            items[i].level = own;
            items[i].id = i;
        }
    }
    if (items) dcp__bound_items_sort(items, scratch, keyed, count);
    for (b = 0; b < bounds; b++) {
        double work = 0.0, bound = longest;
        for (level = top; level >= lowest; level--) { /* work of the samples needing >= 2^level */
            double per_rank;
            work += work_at[level];
            per_rank = work / (double)dcp__ranks_covered(config, (int32_t)1 << level);
            if (per_rank > bound) bound = per_rank;
        }
        if (syncs[b] > 1) {
            double slowest = dcp__barrier_bound(config, items, count, syncs[b]);
            if (slowest > bound) bound = slowest;
        }
        seconds[b] = bound;
    }
    dcp_free(&config->allocator, items);
    dcp_free(&config->allocator, scratch);
    dcp_free(&config->allocator, keyed);
    return DCP_OK;
}

DCPDEF dcp_status dcp_lower_bound(const dcp_config *config, const int64_t *lengths,
                                  int32_t count, double *seconds, dcp_error *error)
{
    dcp_config c;
    dcp_status status;
    int32_t *cp_min;
    if (!seconds)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "seconds must not be NULL");
    if ((status = dcp_config_resolve(config, &c, error)) != DCP_OK) return status;
    if (count < 1 || !lengths) return dcp__check_samples(&c, lengths, count, NULL, error);
    cp_min = (int32_t *)dcp__alloc_array(&c.allocator, (size_t)count, sizeof *cp_min,
                                         "lower bound cp sizes", error);
    if (!cp_min) return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    status = dcp__check_samples(&c, lengths, count, cp_min, error);
    if (status == DCP_OK)
        status = dcp__lower_bounds(&c, lengths, count, cp_min, &c.sync_ranks, 1, seconds, error);
    dcp_free(&c.allocator, cp_min);
    return status == DCP_OK ? dcp_error_clear(error) : status;
}

/* ---------------------------------------------------------------------- cost calibration
   The fit in four phases, each its own function: check the input, build the scaled normal
   equations of the terms not held, solve non-negative least squares on them exactly (with
   three terms, the best of the 2^3 supports whose unconstrained solution is feasible: the
   optimum is the unconstrained solution on its own support, so it is among them), then the
   residuals of the result. */

#define DCP__COST_TERMS 3

static const char *const dcp__cost_coeff_names[DCP__COST_TERMS] = {"attn_coeff", "linear_coeff",
                                                                   "ring_step_cost"};
static const char *const dcp__cost_unit_names[DCP__COST_TERMS] = {"attn_units", "linear_units",
                                                                  "ring_steps"};

DCPDEF dcp_status dcp_cost_group_terms(const dcp_config *config, const int64_t *lengths,
                                       int32_t count, int32_t cp, dcp_cost_measurement *terms,
                                       dcp_error *error)
{
    dcp_config c;
    dcp_status status;
    double attention = 0.0, stored = 0.0;
    int32_t i;
    if (!terms) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "terms must not be NULL");
    if ((status = dcp_config_resolve(config, &c, error)) != DCP_OK) return status;
    if (count < 0 || (count > 0 && !lengths))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "count must be >= 0 with lengths not NULL, got count %d, lengths %s",
                             (int)count, lengths ? "set" : "NULL");
    if ((status = dcp__check_cp_arg(&c, cp, error)) != DCP_OK) return status;
    for (i = 0; i < count; i++) {
        double l = (double)lengths[i];
        if (lengths[i] < 1 || lengths[i] > DCP_MAX_SAMPLE_LENGTH)
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "lengths[%d] = %lld; lengths must be in [1, %lld]", (int)i,
                                 (long long)lengths[i], (long long)DCP_MAX_SAMPLE_LENGTH);
        attention += l * l;
        stored += (double)dcp__padded(&c, lengths[i], cp);
    }
    terms->attn_units = attention / (double)cp;
    terms->linear_units = stored / (double)cp;
    terms->ring_steps = (double)(cp - 1) * (c.ring_charge == DCP_RING_PER_SAMPLE ? count : 1);
    terms->seconds = 0.0;
    return dcp_error_clear(error);
}

static void dcp__measurement_units(const dcp_cost_measurement *m, double units[DCP__COST_TERMS])
{
    units[0] = m->attn_units;
    units[1] = m->linear_units;
    units[2] = m->ring_steps;
}

static void dcp__cost_coeffs(const dcp_cost_model *cost, double coeffs[DCP__COST_TERMS])
{
    coeffs[0] = cost->attn_coeff;
    coeffs[1] = cost->linear_coeff;
    coeffs[2] = cost->ring_step_cost;
}

DCPDEF double dcp_cost_measurement_seconds(const dcp_cost_model *cost,
                                           const dcp_cost_measurement *measurement)
{
    if (!cost || !measurement) return 0.0;
    return cost->attn_coeff * measurement->attn_units +
           cost->linear_coeff * measurement->linear_units +
           cost->ring_step_cost * measurement->ring_steps;
}

static dcp_status dcp__check_fit_options(const dcp_cost_fit_options *o, dcp_error *error)
{
    double held[DCP__COST_TERMS];
    int32_t j;
    if (o->weighting != DCP_COST_FIT_RELATIVE && o->weighting != DCP_COST_FIT_ABSOLUTE)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "options->weighting %d is not a dcp_cost_fit_weighting",
                             (int)o->weighting);
    if (o->held_terms & ~DCP_COST_TERMS_ALL)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "options->held_terms 0x%x has bits outside DCP_COST_TERMS_ALL 0x%x",
                             (unsigned)o->held_terms, (unsigned)DCP_COST_TERMS_ALL);
    dcp__cost_coeffs(&o->held, held);
    for (j = 0; j < DCP__COST_TERMS; j++) {
        if (!(o->held_terms & (1u << j))) continue;
        if (!(held[j] >= 0.0 && held[j] <= DBL_MAX) ||
            (held[j] != 0.0 && (held[j] < DCP_MIN_COST_COEFF || held[j] > DCP_MAX_COST_COEFF)))
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "held %s = %g must be 0 or in [%g, %g]", dcp__cost_coeff_names[j],
                                 held[j], DCP_MIN_COST_COEFF, DCP_MAX_COST_COEFF);
    }
    return DCP_OK;
}

static dcp_status dcp__check_measurements(const dcp_cost_measurement *measurements,
                                          int32_t count, dcp_error *error)
{
    int32_t i, j;
    if (!measurements || count < 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "measurements must not be NULL and count must be >= 1, got %s and %d",
                             measurements ? "an array" : "NULL", (int)count);
    for (i = 0; i < count; i++) {
        double units[DCP__COST_TERMS];
        dcp__measurement_units(&measurements[i], units);
        for (j = 0; j < DCP__COST_TERMS; j++)
            if (!(units[j] >= 0.0 && units[j] <= DBL_MAX))
                return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                     "measurement %d has %s = %g; units must be finite and >= 0",
                                     (int)i, dcp__cost_unit_names[j], units[j]);
        if (!(measurements[i].seconds > 0.0 && measurements[i].seconds <= DBL_MAX))
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "measurement %d has seconds = %g; a measured time must be finite "
                                 "and > 0",
                                 (int)i, measurements[i].seconds);
    }
    return DCP_OK;
}

/* The weighted least-squares problem in the fitted terms only: row i is weight_i times
   (units of the fitted terms ; seconds minus the held terms' time). Columns are divided by
   their norms (column_scale) and the target by its largest entry (target_scale), so the
   normal matrix has a unit diagonal and its entries are the columns' cosines. */
typedef struct dcp__fit_system {
    const dcp_cost_measurement *measurements;
    int32_t count;
    dcp_cost_fit_weighting weighting;
    double held[DCP__COST_TERMS]; /* 0 for the fitted terms */
    int32_t terms[DCP__COST_TERMS]; /* indices of the fitted terms */
    int32_t term_count;
    double column_scale[DCP__COST_TERMS];
    double target_scale;
    double gram[DCP__COST_TERMS][DCP__COST_TERMS];
    double rhs[DCP__COST_TERMS];
} dcp__fit_system;

/* Row i of the weighted system: the fitted terms' units (unscaled) and the target. */
static double dcp__fit_row(const dcp__fit_system *s, int32_t i, double row[DCP__COST_TERMS])
{
    const dcp_cost_measurement *m = &s->measurements[i];
    double units[DCP__COST_TERMS], weight, target = m->seconds;
    int32_t j;
    weight = s->weighting == DCP_COST_FIT_RELATIVE ? 1.0 / m->seconds : 1.0;
    dcp__measurement_units(m, units);
    for (j = 0; j < DCP__COST_TERMS; j++) target -= s->held[j] * units[j];
    for (j = 0; j < s->term_count; j++) row[j] = weight * units[s->terms[j]];
    return weight * target;
}

/* Largest |entry| of every fitted column and of the target: the first pass of an overflow-
   free norm. Fails when a weighted entry is not finite. */
static dcp_status dcp__fit_maxima(const dcp__fit_system *s, double column_max[DCP__COST_TERMS],
                                  double *target_max, dcp_error *error)
{
    int32_t i, j;
    for (j = 0; j < s->term_count; j++) column_max[j] = 0.0;
    *target_max = 0.0;
    for (i = 0; i < s->count; i++) {
        double row[DCP__COST_TERMS], target = dcp__fit_row(s, i, row);
        for (j = 0; j < s->term_count; j++) {
            if (!dcp__is_finite(row[j]))
                return dcp_error_set(error, DCP_ERROR_OVERFLOW,
                                     "measurement %d: %s / seconds overflows a double",
                                     (int)i, dcp__cost_unit_names[s->terms[j]]);
            if (row[j] > column_max[j]) column_max[j] = row[j];
        }
        if (!dcp__is_finite(target))
            return dcp_error_set(error, DCP_ERROR_OVERFLOW,
                                 "measurement %d: the time left after the held terms overflows",
                                 (int)i);
        if (fabs(target) > *target_max) *target_max = fabs(target);
    }
    return DCP_OK;
}

static dcp_status dcp__fit_scales(dcp__fit_system *s, dcp_error *error)
{
    double column_max[DCP__COST_TERMS], sum[DCP__COST_TERMS];
    int32_t i, j;
    dcp_status status = dcp__fit_maxima(s, column_max, &s->target_scale, error);
    if (status != DCP_OK) return status;
    if (s->target_scale == 0.0) s->target_scale = 1.0;
    for (j = 0; j < s->term_count; j++) {
        if (column_max[j] == 0.0)
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "no measurement has %s > 0, so %s cannot be fitted: measure "
                                 "work that has it, or hold it (options->held_terms)",
                                 dcp__cost_unit_names[s->terms[j]],
                                 dcp__cost_coeff_names[s->terms[j]]);
        sum[j] = 0.0;
    }
    for (i = 0; i < s->count; i++) {
        double row[DCP__COST_TERMS];
        dcp__fit_row(s, i, row);
        for (j = 0; j < s->term_count; j++) {
            double scaled = row[j] / column_max[j];
            sum[j] += scaled * scaled;
        }
    }
    for (j = 0; j < s->term_count; j++) s->column_scale[j] = column_max[j] * sqrt(sum[j]);
    return DCP_OK;
}

static void dcp__fit_normal_equations(dcp__fit_system *s)
{
    int32_t i, j, k;
    for (j = 0; j < s->term_count; j++) {
        s->rhs[j] = 0.0;
        for (k = 0; k < s->term_count; k++) s->gram[j][k] = 0.0;
    }
    for (i = 0; i < s->count; i++) {
        double row[DCP__COST_TERMS], target = dcp__fit_row(s, i, row) / s->target_scale;
        for (j = 0; j < s->term_count; j++) row[j] /= s->column_scale[j];
        for (j = 0; j < s->term_count; j++) {
            s->rhs[j] += row[j] * target;
            for (k = 0; k < s->term_count; k++) s->gram[j][k] += row[j] * row[k];
        }
    }
}

/* Solves gram[sub][sub] u = rhs[sub] for the fitted-term positions sub[0 .. n) by Cholesky
   (rhs: s->rhs, or a unit vector for a column of the inverse);
   *min_pivot receives the smallest pivot (the Schur complements of the unit-diagonal matrix).
   Returns 0 when a pivot is not positive. */
static int dcp__fit_solve(const dcp__fit_system *s, const double *rhs, const int32_t *sub,
                          int32_t n, double u[DCP__COST_TERMS], double *min_pivot)
{
    double l[DCP__COST_TERMS][DCP__COST_TERMS], y[DCP__COST_TERMS];
    int32_t j, k, m;
    *min_pivot = 1.0;
    for (j = 0; j < n; j++) {
        double pivot = s->gram[sub[j]][sub[j]];
        for (m = 0; m < j; m++) pivot -= l[j][m] * l[j][m];
        if (pivot < *min_pivot) *min_pivot = pivot;
        if (!(pivot > 0.0)) return 0;
        l[j][j] = sqrt(pivot);
        for (k = j + 1; k < n; k++) {
            double v = s->gram[sub[k]][sub[j]];
            for (m = 0; m < j; m++) v -= l[k][m] * l[j][m];
            l[k][j] = v / l[j][j];
        }
    }
    for (j = 0; j < n; j++) { /* L y = rhs, then L^T u = y */
        y[j] = rhs[sub[j]];
        for (m = 0; m < j; m++) y[j] -= l[j][m] * y[m];
        y[j] /= l[j][j];
    }
    for (j = n - 1; j >= 0; j--) {
        u[j] = y[j];
        for (m = j + 1; m < n; m++) u[j] -= l[m][j] * u[m];
        u[j] /= l[j][j];
    }
    return 1;
}

/* The degenerate design named: two proportional columns when there are, else all of them. */
static dcp_status dcp__fit_degenerate(const dcp__fit_system *s, dcp_error *error)
{
    int32_t j, k;
    for (j = 0; j < s->term_count; j++)
        for (k = j + 1; k < s->term_count; k++)
            if (1.0 - s->gram[j][k] * s->gram[j][k] < DCP_COST_FIT_MIN_PIVOT)
                return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                     "the measurements cannot tell %s from %s: %s and %s are "
                                     "proportional across them (vary document length and token "
                                     "count and CP size independently)",
                                     dcp__cost_coeff_names[s->terms[j]],
                                     dcp__cost_coeff_names[s->terms[k]],
                                     dcp__cost_unit_names[s->terms[j]],
                                     dcp__cost_unit_names[s->terms[k]]);
    return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                         "the measurements cannot tell the %d fitted terms apart: their units "
                         "are linearly dependent (pivot below DCP_COST_FIT_MIN_PIVOT %g)",
                         (int)s->term_count, DCP_COST_FIT_MIN_PIVOT);
}

/* Squared residual norm of the scaled system at u over the fitted positions sub[0 .. n). */
static double dcp__fit_objective(const dcp__fit_system *s, const int32_t *sub, int32_t n,
                                 const double *u)
{
    double total = 0.0;
    int32_t i, j;
    for (i = 0; i < s->count; i++) {
        double row[DCP__COST_TERMS], r = dcp__fit_row(s, i, row) / s->target_scale;
        for (j = 0; j < n; j++) r -= u[j] * row[sub[j]] / s->column_scale[sub[j]];
        total += r * r;
    }
    return total;
}

/* Non-negative least squares over every support; coeffs[term] receives the fitted values.
   Returns the optimum's squared residual norm (scaled). */
static double dcp__fit_nnls(const dcp__fit_system *s, double coeffs[DCP__COST_TERMS])
{
    double best = -1.0, best_u[DCP__COST_TERMS];
    int32_t best_sub[DCP__COST_TERMS], best_n = 0, j;
    uint32_t support;
    for (support = 0; support < (1u << s->term_count); support++) {
        int32_t sub[DCP__COST_TERMS], n = 0, feasible = 1;
        double u[DCP__COST_TERMS], pivot, objective;
        for (j = 0; j < s->term_count; j++)
            if (support & (1u << j)) sub[n++] = j;
        if (n > 0 && !dcp__fit_solve(s, s->rhs, sub, n, u, &pivot)) continue;
        for (j = 0; j < n; j++)
            if (u[j] < 0.0) feasible = 0;
        if (!feasible) continue;
        objective = dcp__fit_objective(s, sub, n, u);
        if (best < 0.0 || objective < best) {
            best = objective;
            best_n = n;
            for (j = 0; j < n; j++) best_sub[j] = sub[j], best_u[j] = u[j];
        }
    }
    for (j = 0; j < DCP__COST_TERMS; j++) coeffs[j] = s->held[j];
    for (j = 0; j < best_n; j++)
        coeffs[s->terms[best_sub[j]]] =
            best_u[j] * s->target_scale / s->column_scale[best_sub[j]];
    return best;
}

/* Standard errors of the fitted coefficients: the residual variance (objective over n - k
   degrees of freedom) times the diagonal of the inverse normal matrix, unscaled; 0 when the
   measurements leave no degree of freedom. */
static void dcp__fit_standard_errors(const dcp__fit_system *s, double objective,
                                     dcp_cost_model *standard_error)
{
    double errors[DCP__COST_TERMS] = {0.0, 0.0, 0.0}, variance = 0.0;
    int32_t j, all[DCP__COST_TERMS];
    if (s->count > s->term_count) variance = objective / (double)(s->count - s->term_count);
    for (j = 0; j < s->term_count; j++) all[j] = j;
    for (j = 0; j < s->term_count; j++) {
        double unit[DCP__COST_TERMS] = {0.0, 0.0, 0.0}, column[DCP__COST_TERMS], pivot;
        unit[j] = 1.0;
        if (!dcp__fit_solve(s, unit, all, s->term_count, column, &pivot)) continue;
        errors[s->terms[j]] =
            sqrt(variance * (column[j] > 0.0 ? column[j] : 0.0)) * s->target_scale /
            s->column_scale[j];
    }
    standard_error->attn_coeff = errors[0];
    standard_error->linear_coeff = errors[1];
    standard_error->ring_step_cost = errors[2];
}

/* The fitted model's range (the planner's limits) and the residuals of every measurement. */
static dcp_status dcp__fit_finish(const dcp__fit_system *s, const double coeffs[DCP__COST_TERMS],
                                  uint32_t fitted, dcp_cost_fit *fit, dcp_error *error)
{
    double squares = 0.0, relative_squares = 0.0;
    int32_t i, j;
    for (j = 0; j < DCP__COST_TERMS; j++) {
        if (coeffs[j] != 0.0 &&
            !(coeffs[j] >= DCP_MIN_COST_COEFF && coeffs[j] <= DCP_MAX_COST_COEFF))
            return dcp_error_set(error, DCP_ERROR_OVERFLOW,
                                 "fitted %s = %g is outside the planner's range: 0 or [%g, %g] "
                                 "(are the units and the seconds on one scale?)",
                                 dcp__cost_coeff_names[j], coeffs[j], DCP_MIN_COST_COEFF,
                                 DCP_MAX_COST_COEFF);
        if (coeffs[j] == 0.0 && (fitted & (1u << j))) fit->zero_terms |= 1u << j;
    }
    if (coeffs[0] == 0.0 && coeffs[1] == 0.0 && coeffs[2] == 0.0)
        return dcp_error_set(error, DCP_ERROR_INFEASIBLE,
                             "every coefficient came out 0, which dcp_config reads as the default "
                             "model: the measurements leave no time for the fitted terms");
    fit->cost.attn_coeff = coeffs[0];
    fit->cost.linear_coeff = coeffs[1];
    fit->cost.ring_step_cost = coeffs[2];
    for (i = 0; i < s->count; i++) {
        double seconds = s->measurements[i].seconds;
        double r = dcp_cost_measurement_seconds(&fit->cost, &s->measurements[i]) - seconds;
        double relative = fabs(r) / seconds;
        squares += r * r;
        relative_squares += relative * relative;
        if (relative > fit->max_relative_residual || i == 0) {
            fit->max_relative_residual = relative;
            fit->max_residual_index = i;
        }
    }
    fit->rms_residual_seconds = sqrt(squares / (double)s->count);
    fit->rms_relative_residual = sqrt(relative_squares / (double)s->count);
    return DCP_OK;
}

DCPDEF dcp_status dcp_cost_fit_measurements(const dcp_cost_measurement *measurements,
                                            int32_t count, const dcp_cost_fit_options *options,
                                            dcp_cost_fit *fit, dcp_error *error)
{
    dcp_cost_fit_options defaults;
    dcp__fit_system s;
    double coeffs[DCP__COST_TERMS], objective;
    int32_t j, all[DCP__COST_TERMS];
    uint32_t fitted;
    dcp_status status;
    if (!fit) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "fit must not be NULL");
    memset(&defaults, 0, sizeof defaults);
    if (!options) options = &defaults;
    if ((status = dcp__check_fit_options(options, error)) != DCP_OK ||
        (status = dcp__check_measurements(measurements, count, error)) != DCP_OK)
        return status;
    memset(&s, 0, sizeof s);
    s.measurements = measurements;
    s.count = count;
    s.weighting = options->weighting;
    fitted = DCP_COST_TERMS_ALL & ~options->held_terms;
    dcp__cost_coeffs(&options->held, coeffs);
    for (j = 0; j < DCP__COST_TERMS; j++) {
        if (fitted & (1u << j)) s.terms[s.term_count++] = j;
        else s.held[j] = coeffs[j];
    }
    if (count < s.term_count)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "%d measurements cannot determine %d coefficients", (int)count,
                             (int)s.term_count);
    if ((status = dcp__fit_scales(&s, error)) != DCP_OK) return status;
    dcp__fit_normal_equations(&s);
    memset(fit, 0, sizeof *fit);
    fit->count = count;
    fit->conditioning = 1.0;
    for (j = 0; j < s.term_count; j++) all[j] = j;
    if (s.term_count > 0 &&
        (!dcp__fit_solve(&s, s.rhs, all, s.term_count, coeffs, &fit->conditioning) ||
         fit->conditioning < DCP_COST_FIT_MIN_PIVOT))
        return dcp__fit_degenerate(&s, error);
    objective = dcp__fit_nnls(&s, coeffs);
    if ((status = dcp__fit_finish(&s, coeffs, fitted, fit, error)) != DCP_OK) return status;
    dcp__fit_standard_errors(&s, objective, &fit->standard_error);
    return dcp_error_clear(error);
}

/* -- src/planner.h -- */
/* ---------------------------------------------------------------- planner: the whole at a glance
   dcp_plan_create (DCP_STRATEGY_DYNAMIC) builds candidates, each a placement of every sample,
   and returns the fastest. N samples, D ranks, K microbatches, L = log2(max_cp) + 1 levels;
   "ticks": the integer costs of the batch's tables (shared tables, below).

   Always, for every E and model:
   - the baselines: greedy (Megatron's earlier next_hdp_group; O(N log N)), static CP
     (O(N log N)) and Megatron-LM's packing-aware scheduler as bench/megatron_baseline.py runs
     it (dcp__plan_megatron; up to DCP__MEGATRON_MAX_CELLS = N D; O(K N D)). The first two are
     the library's other strategies; the third is built where its plan is a plan of the config.
   - the final choice (dcp__plan_fastest): the planner's, greedy's, static's and Megatron's
     plans are built and simulated in seconds by dcp_plan_step_time's own code under the
     config's E and model, and the fastest is returned (ties to the planner's). The guarantee
     "never slower than a baseline" is this comparison, so it holds to the bit
     (tests/test_plan_guarantee.c); nothing runs after it.

   E = 1 (the DAG; dense models; dcp__plan_dynamic, "dynamic planner" below):
   - the widest fill, when every sample is fastest on the widest CP size and the fill meets
     the lower bound (the L^2 model on a power-of-two pool): nothing can beat it. O(N log N).
   - the tree planner: largest-work-first placement on the buddy tree of aligned blocks, one
     CP level at a time, each sample to the node where it finishes earliest (a tournament over
     the level's nodes: O(log D) a sample), built at the memory floor's K and, unless that is
     within 0.1% of the bound, again from the K it grew to (one multiple looser if it did
     not), the faster kept (up to DCP__SEARCH_BOTH_MAX_SAMPLES samples: the faster after the
     local search of both); then a local search on the critical rank (move, swap, split,
     scatter, over a best-first search of the tree: O(log^2 D) a find; improve_moves, and it
     stops at 0.1% of the bound). Candidates: every sample at its minimum CP size, and while
     the best is more than 2% above the bound samples widened above half the target step,
     every sample at the largest minimum and widening above an eighth (bench/RESULTS.md,
     "Planner tuning", says what each candidate gains).

   E > 1 (blocks of E ranks in lockstep; E = D the barrier; dcp__plan_lockstep), candidates
   compared in ticks under E, in this order, stopping once one meets the lower bound:
   - the widest fill (width free only), then fill-to-the-top variants: widening threshold x
     slack, per region (E, and for E < D also the pool), while the best is more than 2% above
     the bound; DCP__FILL_CANDIDATE_SAMPLES / N of them, at least 2. O(N log N + K D log N).
   - between the extremes, where E <= max_cp, while the fills are more than 2% above the bound
     and with at most DCP__BLOCK_WIDE_MAX_SAMPLES_PER_BLOCK samples a block: the block-wide
     plan, the tree planner's build with every sample on at least E ranks (two candidates, no
     local search): no block then waits for one of its ranks, so its step under E is its
     E = 1 step. Above DCP__LOCKSTEP_FULL_SAMPLES samples, when it is balanced the search ends
     there; else the candidates below run as without it, and it is compared with their best
     last.
   - up to DCP__LOCKSTEP_FULL_SAMPLES samples: the tree planner's plan (its E = 1 plan; under
     E = D only while unbalanced).
   - greedy's plan.
   - the unloading (E = D's; under E < D as one more candidate) of the best: moves and swaps
     between microbatches, the lowering of a microbatch to its next slower group, splits of a
     slow wide group onto its halves, and on pools that are not a power of two moves into a
     microbatch's own idle blocks; improve_moves x 64 positions, at most 2^21. Small plans
     run both orders of the passes.
   - under E = D, up to DCP__PACKING_MAX_SAMPLES samples and while unbalanced: the
     packing-aware candidate (Megatron's manner with this model's costs), unloaded.
   - between the extremes, up to DCP__LOCKSTEP_FULL_SAMPLES samples: the plan made for E = D
     (the whole E = D search), then the block-by-block unloading of the best (each move
     simulated under E).
   Every pass above is needed by some row of bench/plan_bench or make bench-megatron (without
   it, some row plans slower) or, for the tree's extra candidates, by random E = 1 batches. */

/* ------------------------------------------------------------------------ planner tuning
   Every threshold that steers the planner's effort, in one place. Each is either a budget
   (plans stay byte-identical on every machine: counted in samples, moves or positions, never
   in time) or the point where a costlier candidate stops paying; bench/RESULTS.md ("Planner
   tuning") has the measurements each value rests on. tests/test_plan_golden.c fails when a
   change here changes any of its plans. */

/* Stopping. A plan within 1 / DCP__BALANCED_EFFICIENCY of the lower bound is balanced: below
   that the planner spends more effort (more candidates, more microbatches), above it keeps
   the cheapest result (the baselines are compared either way). A plan within
   DCP__BOUND_MET_EFFICIENCY of it is optimal to the ticks' rounding and ends the search. The
   tree's local search stops within DCP__IMPROVE_DONE_EFFICIENCY: what is left is a few parts
   in ten thousand, while at thousands of samples per rank each move walks up to
   DCP__SWAP_CANDIDATES samples. */
#define DCP__BALANCED_EFFICIENCY 0.98
#define DCP__BOUND_MET_EFFICIENCY (1.0 - 1e-9)
#define DCP__IMPROVE_DONE_EFFICIENCY 0.999

/* The tree planner (E = 1). Its candidates widen samples whose time alone exceeds the target
   step over these divisors. Up to DCP__SEARCH_BOTH_MAX_SAMPLES samples both builds of a
   candidate (at the memory floor and looser) are improved before they are compared. A swap
   looks at a node's latest DCP__SWAP_CANDIDATES samples; a node of at most
   DCP__REPACK_MAX_SAMPLES samples may be split or scattered. */
#define DCP__WIDEN_HALF_DIVISOR 2
#define DCP__WIDEN_EIGHTH_DIVISOR 8
#define DCP__SEARCH_BOTH_MAX_SAMPLES 4096
#define DCP__SWAP_CANDIDATES 1024
#define DCP__REPACK_MAX_SAMPLES 16

/* The search under E > 1. The fills try DCP__FILL_CANDIDATE_SAMPLES / samples variants, at
   least 2, at most all (16 up to 1,024 samples, 2 from 8,192): a plan-time budget that keeps
   large batches near-linear. Up to DCP__LOCKSTEP_FULL_SAMPLES samples the costlier candidates
   run (the tree's plan; between the extremes the plan for E = D and the block unloading).
   The block-wide plan is built up to DCP__BLOCK_WIDE_MAX_SAMPLES_PER_BLOCK samples a block of
   E ranks on average, the packing-aware candidate up to DCP__PACKING_MAX_SAMPLES samples, its
   cap DCP__PACKING_CAP_SLACK above the longest sample's (Megatron's
   _DYNAMIC_CP_WORKLOAD_CAP_DELTA). */
#define DCP__FILL_CANDIDATE_SAMPLES (1 << 14)
#define DCP__LOCKSTEP_FULL_SAMPLES 4096
#define DCP__BLOCK_WIDE_MAX_SAMPLES_PER_BLOCK 1024
#define DCP__PACKING_MAX_SAMPLES 1024
#define DCP__PACKING_CAP_SLACK 0.05

/* The unloading (E = D; block by block between the extremes): at most DCP__UNLOAD_MAX_CELLS
   microbatch-rank cells of state; DCP__UNLOAD_POSITIONS_PER_MOVE block positions or samples
   examined per improve_moves unit, at most DCP__UNLOAD_MAX_STEPS a pass and
   DCP__UNLOAD_PASSES passes' worth in all; plans of at most DCP__UNLOAD_SMALL_CELLS cells try
   both orders of the passes, larger ones stop swapping after DCP__UNLOAD_SWAP_MAX_STEPS; a
   block move that needs a simulation counts DCP__BLOCK_SIMULATION_WEIGHT positions. */
#define DCP__UNLOAD_MAX_CELLS (1 << 22)
#define DCP__UNLOAD_POSITIONS_PER_MOVE 64
#define DCP__UNLOAD_MAX_STEPS (INT64_C(1) << 21)
#define DCP__UNLOAD_PASSES 2
#define DCP__UNLOAD_SMALL_CELLS 4096
#define DCP__UNLOAD_SWAP_MAX_STEPS (INT64_C(1) << 17)
#define DCP__BLOCK_SIMULATION_WEIGHT 4

/* The Megatron port is built while samples x ranks stays within DCP__MEGATRON_MAX_CELLS (it
   scans, per microbatch, every sample left and its size's open groups: O(K N D) at worst). */
#define DCP__MEGATRON_MAX_CELLS (INT64_C(1) << 20)

/* Speed only, plans unchanged: a tree node's first bin index has DCP__BIN_INDEX_FIRST_LEAVES
   leaves, so most nodes allocate once. */
#define DCP__BIN_INDEX_FIRST_LEAVES 16

/* ---------------------------------------------------------------------- plan assembly
   Every strategy produces, per sample, (microbatch, first_rank, cp) and an order key; one
   function turns that into the plan arrays, so all strategies share one output path. */

typedef struct dcp__placement {
    int32_t microbatch;
    int32_t first_rank;
    int32_t cp;
    int32_t order; /* position of the sample inside its group; ties broken by sample id */
    int32_t sample;
} dcp__placement;

/* Microbatch, first rank, order, sample: total (a sample appears once). */
static int dcp__placement_before(const dcp__placement *x, const dcp__placement *y)
{
    if (x->microbatch != y->microbatch) return x->microbatch < y->microbatch;
    if (x->first_rank != y->first_rank) return x->first_rank < y->first_rank;
    if (x->order != y->order) return x->order < y->order;
    return x->sample < y->sample;
}
DCP__DEFINE_SORT(dcp__placement_sort, dcp__placement, dcp__placement_before)

DCPDEF void dcp_plan_destroy(dcp_plan *plan)
{
    if (plan) {
        const dcp_allocator allocator = plan->config.allocator; /* outlives the plan it frees */
        void *list[] = {plan->sample_lengths, plan->microbatch_offsets, plan->groups,
                        plan->group_samples, plan};
        dcp__free_list(&allocator, list, DCP__COUNT(list));
    }
}

/* The seal: a constant mixed with the plan's own address and its arrays', so that a copy of
   the struct elsewhere, or a plan whose arrays were swapped, is not taken for the plan the
   library sealed. */
#define DCP__PLAN_SEAL UINT64_C(0x9e3779b97f4a7c15)
static uint64_t dcp__plan_seal_of(const dcp_plan *plan)
{
    return DCP__PLAN_SEAL ^ (uint64_t)(uintptr_t)plan ^
           ((uint64_t)(uintptr_t)plan->groups << 1) ^
           ((uint64_t)(uintptr_t)plan->group_samples << 2) ^
           ((uint64_t)(uintptr_t)plan->microbatch_offsets << 3) ^
           ((uint64_t)(uintptr_t)plan->sample_lengths << 4);
}

static void dcp__plan_seal(dcp_plan *plan) { plan->seal = dcp__plan_seal_of(plan); }

static dcp_plan *dcp__plan_alloc(const dcp_config *config, int32_t num_samples,
                                 int32_t num_microbatches, int32_t num_groups, dcp_error *error)
{
    const dcp_allocator *allocator = &config->allocator;
    dcp_plan *plan = (dcp_plan *)dcp__alloc_array(allocator, 1, sizeof *plan, "plan", error);
    if (!plan) return NULL;
    memset(plan, 0, sizeof *plan);
    plan->config = *config;
    plan->num_samples = num_samples;
    plan->num_microbatches = num_microbatches;
    plan->num_groups = num_groups;
    plan->sample_lengths = (int64_t *)dcp__alloc_array(allocator, (size_t)num_samples,
                                                       sizeof(int64_t), "plan lengths", error);
    plan->microbatch_offsets = (int32_t *)dcp__alloc_array(
        allocator, (size_t)num_microbatches + 1, sizeof(int32_t), "plan microbatches", error);
    plan->groups = (dcp_group *)dcp__alloc_array(allocator, (size_t)num_groups,
                                                 sizeof(dcp_group), "plan groups", error);
    plan->group_samples = (int32_t *)dcp__alloc_array(allocator, (size_t)num_samples,
                                                      sizeof(int32_t), "plan samples", error);
    if (!plan->sample_lengths || !plan->microbatch_offsets || !plan->groups ||
        !plan->group_samples) {
        dcp_plan_destroy(plan);
        return NULL;
    }
    return plan;
}

/* One stable counting sort of placements by key(p) in [0, range): from `from` into `to`;
   counts: [range + 1]. */
#define DCP__DEFINE_PLACEMENT_PASS(name, key)                                                    \
    static void name(const dcp__placement *from, dcp__placement *to, int32_t count,             \
                     int32_t range, int32_t *counts)                                            \
    {                                                                                           \
        int32_t i, k;                                                                           \
        for (k = 0; k <= range; k++) counts[k] = 0;                                             \
        for (i = 0; i < count; i++) counts[key(&from[i]) + 1]++;                                \
        for (k = 0; k < range; k++) counts[k + 1] += counts[k];                                 \
        for (i = 0; i < count; i++) to[counts[key(&from[i])]++] = from[i];                      \
    }
/* order below count, or INT32_MAX (moved by the unloading) counted as count: last */
#define DCP__PLACEMENT_ORDER_KEY(p) ((p)->order == INT32_MAX ? count : (p)->order)
#define DCP__PLACEMENT_RANK_KEY(p) ((p)->first_rank)
#define DCP__PLACEMENT_MICROBATCH_KEY(p) ((p)->microbatch)
DCP__DEFINE_PLACEMENT_PASS(dcp__placement_by_order, DCP__PLACEMENT_ORDER_KEY)
DCP__DEFINE_PLACEMENT_PASS(dcp__placement_by_rank, DCP__PLACEMENT_RANK_KEY)
DCP__DEFINE_PLACEMENT_PASS(dcp__placement_by_microbatch, DCP__PLACEMENT_MICROBATCH_KEY)

/* Sorts placements[s] (sample s's) by dcp__placement_before: when every order is below count
   or INT32_MAX, three stable counting sorts, least significant key first (the sample ties
   are already in order), O(count + ranks + microbatches); else the merge sort.
   scratch: [count]; counts: [max(count + 1, ranks, microbatches) + 1]. */
static void dcp__placement_order(dcp__placement *placements, dcp__placement *scratch,
                                 int32_t count, int32_t ranks, int32_t microbatches,
                                 int32_t *counts)
{
    int32_t i;
    for (i = 0; i < count; i++)
        if (placements[i].sample != i ||
            ((placements[i].order < 0 || placements[i].order >= count) &&
             placements[i].order != INT32_MAX))
            break;
    if (i < count) {
        dcp__placement_sort(placements, scratch, count);
        return;
    }
    dcp__placement_by_order(placements, scratch, count, count + 1, counts);
    dcp__placement_by_rank(scratch, placements, count, ranks, counts);
    dcp__placement_by_microbatch(placements, scratch, count, microbatches, counts);
    memcpy(placements, scratch, (size_t)count * sizeof *placements);
}

/* Sorts the placements (in place) and builds the plan; K is rounded up to the multiple. */
static dcp_status dcp__plan_build(const dcp_config *config, const int64_t *lengths,
                                  dcp__placement *placements, int32_t count,
                                  int32_t num_microbatches, dcp_plan **out, dcp_error *error)
{
    int32_t i, groups = 0, k, multiple = config->microbatch_multiple, range, *counts;
    dcp_plan *plan;
    dcp__placement *scratch;
    if (num_microbatches > INT32_MAX - multiple)
        return dcp_error_set(error, DCP_ERROR_OVERFLOW, "microbatch count %d overflows",
                             (int)num_microbatches);
    num_microbatches = (num_microbatches + multiple - 1) / multiple * multiple;
    range = count + 1 > config->ranks ? count + 1 : config->ranks;
    range = range > num_microbatches ? range : num_microbatches;
    scratch = (dcp__placement *)dcp__alloc_array(&config->allocator, (size_t)count,
                                                 sizeof *scratch, "plan order", error);
    counts = (int32_t *)dcp__alloc_array(&config->allocator, (size_t)range + 1, sizeof *counts,
                                         "plan order", error);
    if (!scratch || !counts) {
        dcp_free(&config->allocator, scratch);
        dcp_free(&config->allocator, counts);
        return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    }
    dcp__placement_order(placements, scratch, count, config->ranks, num_microbatches, counts);
    dcp_free(&config->allocator, scratch);
    dcp_free(&config->allocator, counts);
    for (i = 0; i < count; i++)
        if (i == 0 || placements[i].microbatch != placements[i - 1].microbatch ||
            placements[i].first_rank != placements[i - 1].first_rank)
            groups++;
    plan = dcp__plan_alloc(config, count, num_microbatches, groups, error);
    if (!plan) return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    memcpy(plan->sample_lengths, lengths, (size_t)count * sizeof *lengths);
    groups = 0;
    k = 0;
    plan->microbatch_offsets[0] = 0;
    for (i = 0; i < count; i++) {
        const dcp__placement *p = &placements[i];
        if (i == 0 || p->microbatch != placements[i - 1].microbatch ||
            p->first_rank != placements[i - 1].first_rank) {
            dcp_group *g = &plan->groups[groups];
            while (k < p->microbatch) plan->microbatch_offsets[++k] = groups;
            g->first_rank = p->first_rank;
            g->cp = p->cp;
            g->sample_offset = i;
            g->sample_count = 0;
            groups++;
        }
        plan->groups[groups - 1].sample_count++;
        plan->group_samples[i] = p->sample;
    }
    while (k < num_microbatches) plan->microbatch_offsets[++k] = groups;
    dcp__plan_seal(plan); /* made by the planner: trusted from here on */
    *out = plan;
    return DCP_OK;
}

/* ------------------------------------------------------------------------ shared tables
   The planners compare costs in integer ticks: the per-sample costs are computed once in
   double (FMA-proof), then scaled by a power of two so that every sum of the batch stays below
   2^DCP__TICK_BITS. Integer sums are exact and associative, so the same input gives the same
   plan on every compiler and CPU. */

#define DCP__TICK_BITS 60
#define DCP__TICKS_INF (INT64_MAX / 4)

typedef struct dcp__batch {
    const dcp_config *config;
    const int64_t *lengths;
    int32_t count;
    int32_t levels;          /* CP levels 0 .. log2(max_cp) */
    int32_t *cp_min;         /* [count] */
    int64_t *tokens;         /* [count * levels]: padded per-rank tokens P(c)/c, 0 below cp_min */
    int64_t *ticks;          /* [count * levels]: per-rank compute ticks at each level */
    int64_t ring_ticks[DCP_CP_LEVELS]; /* one group, one microbatch */
    double tick_seconds;     /* seconds per tick */
    double lower_bound;      /* seconds, under the DAG model (E = 1) */
    double sync_bound;       /* seconds, under the config's sync_ranks */
    double barrier_bound;    /* seconds, under E = D (for E > 1 only) */
} dcp__batch;

static void dcp__batch_free(dcp__batch *batch)
{
    const dcp_allocator *allocator = &batch->config->allocator;
    dcp_free(allocator, batch->cp_min);
    dcp_free(allocator, batch->tokens);
    dcp_free(allocator, batch->ticks);
}

/* Saturates at DCP__TICKS_INF: the batch's own times fit the ticks by construction, but a
   time derived from the config alone (a cap from M tokens, say) may lie beyond any step of
   the batch, and converting it unchecked would overflow int64. */
static int64_t dcp__to_ticks(double seconds, double scale)
{
    const double ticks = dcp__unfused(seconds * scale) + 0.5;
    return ticks < (double)DCP__TICKS_INF ? (int64_t)ticks : DCP__TICKS_INF;
}

/* Ticks per second, a power of two so that scaling is exact: the batch's total time (every
   sample alone at its minimum CP size, plus a max-CP ring per sample) fits in
   DCP__TICK_BITS bits. */
static double dcp__batch_tick_scale(const dcp__batch *batch)
{
    const dcp_config *config = batch->config;
    double total = 0.0;
    int32_t i, exponent;
    for (i = 0; i < batch->count; i++)
        total += dcp__alone_seconds(config, batch->lengths[i], batch->cp_min[i]);
    total += (double)batch->count * dcp_cost_ring_seconds(&config->cost, config->max_cp);
    (void)frexp(total, &exponent); /* total < 2^exponent */
    return total > 0.0 ? ldexp(1.0, DCP__TICK_BITS - exponent) : 1.0;
}

/* The tables the planners read instead of the cost model: one group's ring ticks per CP
   level, and each sample's per-rank tokens and ticks at every level from its minimum CP size
   up (0 below, where it does not fit). Under DCP_RING_PER_SAMPLE every sample's ticks carry
   its own ring and a group's are 0: every planner then charges the ring per sample without
   knowing it. */
static void dcp__batch_tabulate(dcp__batch *batch, double scale)
{
    const dcp_config *config = batch->config;
    const int per_sample = config->ring_charge == DCP_RING_PER_SAMPLE;
    int64_t multiple[DCP_CP_LEVELS]; /* each level's padding multiple, computed once */
    double ring[DCP_CP_LEVELS];
    int32_t i, level;
    for (level = 0; level < batch->levels; level++) {
        ring[level] = dcp_cost_ring_seconds(&config->cost, (int32_t)1 << level);
        batch->ring_ticks[level] = per_sample ? 0 : dcp__to_ticks(ring[level], scale);
        multiple[level] = dcp__pad_multiple(config, (int32_t)1 << level);
    }
    for (i = 0; i < batch->count; i++) {
        const int64_t length = batch->lengths[i];
        const int32_t lowest = dcp__log2_int(batch->cp_min[i]);
        double attention = dcp__attention_seconds(&config->cost, length);
        int64_t *tokens = batch->tokens + (size_t)i * (size_t)batch->levels;
        int64_t *ticks = batch->ticks + (size_t)i * (size_t)batch->levels;
        for (level = 0; level < lowest; level++)
            tokens[level] = ticks[level] = 0;
        for (; level < batch->levels; level++) {
            int32_t cp = (int32_t)1 << level;
            int64_t padded = dcp__round_up(length, multiple[level]);
            tokens[level] = padded >> level; /* cp = 2^level */
            ticks[level] = dcp__to_ticks(dcp__sample_seconds(&config->cost, attention, padded, cp) +
                                             (per_sample ? ring[level] : 0.0),
                                         scale);
        }
    }
}

/* The lower bounds a plan's efficiency is measured against: under the DAG (E = 1), under the
   config's sync_ranks, and under E = D. */
static dcp_status dcp__batch_bounds(dcp__batch *batch, dcp_error *error)
{
    const dcp_config *config = batch->config;
    const int32_t syncs[3] = {1, config->sync_ranks, config->ranks}; /* E = 1, E, E = D */
    double bounds[3];
    dcp_status status;
    /* the E = D bound only between the extremes, where the E = D plan is a candidate */
    status = dcp__lower_bounds(config, batch->lengths, batch->count, batch->cp_min, syncs,
                               config->sync_ranks > 1 && config->sync_ranks < config->ranks ? 3 : 2,
                               bounds, error);
    if (status != DCP_OK) return status;
    batch->lower_bound = bounds[0];
    batch->sync_bound = bounds[1];
    batch->barrier_bound = config->sync_ranks == config->ranks ? bounds[1]
                           : config->sync_ranks > 1           ? bounds[2]
                                                              : 0.0; /* unused under E = 1 */
    return DCP_OK;
}

static dcp_status dcp__batch_init(dcp__batch *batch, const dcp_config *config,
                                  const int64_t *lengths, int32_t count, dcp_error *error)
{
    const dcp_allocator *allocator = &config->allocator;
    size_t cells;
    double scale;
    memset(batch, 0, sizeof *batch);
    batch->config = config;
    batch->lengths = lengths;
    batch->count = count;
    batch->levels = dcp__log2_int(config->max_cp) + 1;
    cells = (size_t)count * (size_t)batch->levels;
    batch->cp_min = (int32_t *)dcp__alloc_array(allocator, (size_t)count, sizeof(int32_t),
                                                "cp sizes", error);
    batch->tokens = (int64_t *)dcp__alloc_array(allocator, cells, sizeof(int64_t), "tokens", error);
    batch->ticks = (int64_t *)dcp__alloc_array(allocator, cells, sizeof(int64_t), "ticks", error);
    if (!batch->cp_min || !batch->tokens || !batch->ticks) {
        dcp__batch_free(batch);
        return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    }
    if (dcp__check_samples(config, lengths, count, batch->cp_min, error) != DCP_OK) {
        dcp__batch_free(batch);
        return error ? error->status : DCP_ERROR_INVALID_ARGUMENT;
    }
    scale = dcp__batch_tick_scale(batch);
    batch->tick_seconds = 1.0 / scale;
    dcp__batch_tabulate(batch, scale);
    if (dcp__batch_bounds(batch, error) != DCP_OK) {
        dcp__batch_free(batch);
        return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    }
    return DCP_OK;
}

static int64_t dcp__sample_ticks(const dcp__batch *batch, int32_t sample, int32_t level)
{
    return batch->ticks[(size_t)sample * (size_t)batch->levels + (size_t)level];
}

static int64_t dcp__sample_tokens(const dcp__batch *batch, int32_t sample, int32_t level)
{
    return batch->tokens[(size_t)sample * (size_t)batch->levels + (size_t)level];
}

/* ---------------------------------------------------------------- baseline: static CP
   Every sample at the CP size the longest needs; D / c data-parallel replicas; samples dealt
   in input order to the replica with the fewest tokens so far (token-balanced THD packing),
   then packed first-fit in order into microbatches of M padded tokens per rank. A heap finds
   the replica and a segment tree of bin rooms the first fit: O(N log N). */

/* Restores the min-heap of replicas (fewest tokens, then lowest index) after its root grew. */
static void dcp__static_sift(int32_t *heap, int32_t size, const int64_t *tokens)
{
    int32_t at = 0;
    for (;;) {
        int32_t child = 2 * at + 1, pick = at, c;
        for (c = child; c < child + 2 && c < size; c++) {
            int64_t a = tokens[heap[c]], b = tokens[heap[pick]];
            if (a < b || (a == b && heap[c] < heap[pick])) pick = c;
        }
        if (pick == at) return;
        c = heap[at];
        heap[at] = heap[pick];
        heap[pick] = c;
        at = pick;
    }
}

/* First fit over a segment tree of bin rooms (node n at room[n], leaves at leaves..2 leaves - 1;
   bins not yet opened have the full room, so the leftmost bin with room is first fit):
   takes `tokens` from the leftmost bin with room and returns its index. A replica has at most
   as many bins as samples, so a fitting bin always exists. */
static int32_t dcp__static_first_fit(int64_t *room, int32_t leaves, int64_t tokens)
{
    int32_t n = 1, bin;
    while (n < leaves) n = room[2 * n] >= tokens ? 2 * n : 2 * n + 1;
    bin = n - leaves;
    room[n] -= tokens;
    for (n /= 2; n >= 1; n /= 2)
        room[n] = room[2 * n] > room[2 * n + 1] ? room[2 * n] : room[2 * n + 1];
    return bin;
}

typedef struct dcp__static_scratch {
    int32_t *heap;           /* [replicas]: min-heap by tokens dealt */
    int64_t *replica_tokens; /* [replicas]: tokens dealt */
    int32_t *first;          /* [replicas + 1]: samples dealt, then the offset of the room tree */
    int32_t *fill;           /* [replicas]: leaves of the room tree */
    int32_t *replica_of;     /* [count] */
    int64_t *room;           /* the replicas' room trees, one after the other */
} dcp__static_scratch;

static void dcp__static_free(const dcp_allocator *a, dcp__static_scratch *x)
{
    void *list[] = {x->heap, x->replica_tokens, x->first, x->fill, x->replica_of, x->room};
    dcp__free_list(a, list, DCP__COUNT(list));
}

static dcp_status dcp__static_alloc(dcp__static_scratch *x, const dcp_allocator *a,
                                    int32_t count, int32_t replicas, dcp_error *error)
{
    x->heap = (int32_t *)dcp__alloc_array(a, (size_t)replicas, sizeof(int32_t), "static", error);
    x->replica_tokens = (int64_t *)dcp__alloc_array(a, (size_t)replicas, sizeof(int64_t),
                                                    "static", error);
    x->first = (int32_t *)dcp__alloc_array(a, (size_t)replicas + 1, sizeof(int32_t), "static",
                                           error);
    x->fill = (int32_t *)dcp__alloc_array(a, (size_t)replicas, sizeof(int32_t), "static", error);
    x->replica_of = (int32_t *)dcp__alloc_array(a, (size_t)count, sizeof(int32_t), "static",
                                                error);
    /* a segment tree of rooms per replica: at most as many bins as its samples, rounded up
       to a power of two, two nodes per leaf */
    x->room = (int64_t *)dcp__alloc_array(a, 4 * (size_t)count + 2 * (size_t)replicas,
                                          sizeof(int64_t), "static bins", error);
    if (!x->heap || !x->replica_tokens || !x->first || !x->fill || !x->replica_of || !x->room)
        return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    return DCP_OK;
}

/* Deals samples (per-rank tokens[count]) in input order to the replica with the fewest tokens
   (lowest index on ties); counts each replica's samples in first[]. */
static void dcp__static_deal(dcp__static_scratch *x, const int64_t *tokens, int32_t count,
                             int32_t replicas)
{
    int32_t i, r;
    for (r = 0; r < replicas; r++) {
        x->heap[r] = r;
        x->replica_tokens[r] = 0;
        x->first[r] = 0;
    }
    for (i = 0; i < count; i++) {
        int32_t best = x->heap[0];
        x->replica_of[i] = best;
        x->replica_tokens[best] += tokens[i];
        x->first[best]++;
        dcp__static_sift(x->heap, replicas, x->replica_tokens);
    }
}

/* Lays out the replicas' room trees, sized by their sample counts, every bin empty. */
static void dcp__static_trees(dcp__static_scratch *x, int32_t replicas, int64_t capacity)
{
    int32_t r, at;
    for (r = 0, at = 0; r < replicas; r++) { /* counts to offsets into the room trees */
        int32_t count = x->first[r], leaves = 1;
        while (leaves < count) leaves *= 2;
        x->first[r] = at;
        x->fill[r] = leaves;
        at += 2 * leaves;
    }
    for (r = 0; r < replicas; r++) {
        int32_t n;
        for (n = 1; n < 2 * x->fill[r]; n++) x->room[x->first[r] + n - 1] = capacity;
    }
}

/* Static CP at size cp: every sample (per-rank tokens[count] at cp) on one of the D / cp
   replicas [r cp, (r + 1) cp), dealt and packed first fit (the static baseline's plan). */
static dcp_status dcp__static_pack(const dcp_config *config, const int64_t *tokens,
                                   int32_t count, int32_t cp, dcp__placement *placements,
                                   int32_t *num_microbatches, dcp_error *error)
{
    const int32_t replicas = config->ranks / cp;
    int32_t i, most = 0;
    dcp__static_scratch x;
    dcp_status status;
    memset(&x, 0, sizeof x);
    if ((status = dcp__static_alloc(&x, &config->allocator, count, replicas, error)) == DCP_OK) {
        dcp__static_deal(&x, tokens, count, replicas);
        dcp__static_trees(&x, replicas, config->max_tokens_per_rank);
        for (i = 0; i < count; i++) {
            int32_t r = x.replica_of[i];
            int32_t k = dcp__static_first_fit(x.room + x.first[r] - 1, x.fill[r], tokens[i]);
            placements[i].microbatch = k;
            placements[i].first_rank = r * cp;
            placements[i].cp = cp;
            placements[i].order = i;
            placements[i].sample = i;
            if (k + 1 > most) most = k + 1;
        }
        *num_microbatches = most;
    }
    dcp__static_free(&config->allocator, &x);
    return status;
}

/* The static baseline: every sample at the CP size the longest needs. */
static dcp_status dcp__plan_static(const dcp__batch *batch, dcp__placement *placements,
                                   int32_t *num_microbatches, dcp_error *error)
{
    const dcp_config *config = batch->config;
    int32_t cp = config->min_cp, level, i;
    int64_t *tokens = (int64_t *)dcp__alloc_array(&config->allocator, (size_t)batch->count,
                                                  sizeof(int64_t), "static", error);
    dcp_status status;
    if (!tokens) return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    for (i = 0; i < batch->count; i++)
        if (batch->cp_min[i] > cp) cp = batch->cp_min[i];
    level = dcp__log2_int(cp);
    for (i = 0; i < batch->count; i++) tokens[i] = dcp__sample_tokens(batch, i, level);
    status = dcp__static_pack(config, tokens, batch->count, cp, placements, num_microbatches,
                              error);
    dcp_free(&config->allocator, tokens);
    return status;
}

/* ---------------------------------------------------------------- buddy tree of free blocks
   The greedy baseline takes free aligned blocks from it, lowest first. */

typedef struct dcp__buddy {
    int32_t leaf_base; /* power of two >= ranks */
    int32_t ranks;
    int8_t *free_level; /* [2 leaf_base]: largest level of a fully free block below, -1 none */
    int8_t *node_level;
} dcp__buddy;

static void dcp__buddy_reset(dcp__buddy *buddy)
{
    int32_t n;
    for (n = 2 * buddy->leaf_base - 1; n >= 1; n--) {
        int32_t level = buddy->node_level[n];
        int64_t start = ((int64_t)n - ((int64_t)buddy->leaf_base >> level)) << level;
        if (start + ((int64_t)1 << level) <= buddy->ranks)
            buddy->free_level[n] = (int8_t)level;
        else if (level == 0)
            buddy->free_level[n] = -1;
        else
            buddy->free_level[n] = buddy->free_level[2 * n] > buddy->free_level[2 * n + 1]
                                       ? buddy->free_level[2 * n]
                                       : buddy->free_level[2 * n + 1];
    }
}

/* Takes the lowest free aligned block of the level; returns its first rank or -1. */
static int32_t dcp__buddy_take(dcp__buddy *buddy, int32_t level)
{
    int32_t n = 1, m;
    if (buddy->free_level[1] < level) return -1;
    while (buddy->node_level[n] > level)
        n = buddy->free_level[2 * n] >= level ? 2 * n : 2 * n + 1;
    buddy->free_level[n] = -1;
    for (m = n / 2; m >= 1; m /= 2) { /* up while the largest free block below changes */
        int8_t a = buddy->free_level[2 * m], b = buddy->free_level[2 * m + 1];
        if (buddy->free_level[m] == (a > b ? a : b)) break;
        buddy->free_level[m] = a > b ? a : b;
    }
    return (int32_t)(((int64_t)n - ((int64_t)buddy->leaf_base >> level)) << level);
}

/* Node n of an implicit tree over leaf_base leaves has level log2(leaf_base) - depth(n). */
static int8_t *dcp__node_levels(const dcp_allocator *allocator, int32_t leaf_base, dcp_error *error)
{
    int32_t n, levels = dcp__log2_int(leaf_base);
    int8_t *node_level = (int8_t *)dcp__alloc_array(allocator, 2 * (size_t)leaf_base,
                                                     sizeof(int8_t), "tree levels", error);
    if (!node_level) return NULL;
    node_level[0] = (int8_t)(levels + 1);
    for (n = 1; n < 2 * leaf_base; n++) {
        int32_t depth = 0, x = n;
        while (x > 1) {
            x >>= 1;
            depth++;
        }
        node_level[n] = (int8_t)(levels - depth);
    }
    return node_level;
}

static int32_t dcp__leaf_base(int32_t ranks)
{
    int32_t base = 1;
    while (base < ranks) base *= 2;
    return base;
}

/* Within each run of equal keys of a level-major order (ticks that agree but in their low
   bits), more tokens first (ties by id): along a level the tokens then never grow, which the
   tree's build relies on (a level's ticks and tokens both grow with the length, so only such
   runs can break it). scratch: [count]. */
static void dcp__order_tokens_falling(const dcp__batch *batch, const int32_t *levels,
                                      dcp__keyed *keyed, dcp__keyed *scratch, int32_t count)
{
    int32_t start, end, i;
    for (start = 0; start < count; start = end) {
        int falling = 1;
        for (end = start + 1; end < count && keyed[end].key == keyed[start].key; end++) {
            const int32_t a = keyed[end - 1].id, b = keyed[end].id;
            falling &= dcp__sample_tokens(batch, a, levels[a]) >=
                       dcp__sample_tokens(batch, b, levels[b]);
        }
        if (falling) continue;
        for (i = start; i < end; i++)
            keyed[i].key = dcp__sample_tokens(batch, keyed[i].id, levels[keyed[i].id]);
        dcp__keyed_sort(keyed + start, scratch, end - start);
    }
}

/* Samples by decreasing per-rank ticks at the given levels (NULL: their minimum levels). */
static dcp_status dcp__order_by_ticks(const dcp__batch *batch, const int32_t *levels,
                                      int level_major, int32_t *order, dcp_error *error)
{
    const dcp_allocator *allocator = &batch->config->allocator;
    int32_t i;
    dcp__keyed *keyed = (dcp__keyed *)dcp__alloc_array(allocator, 2 * (size_t)batch->count,
                                                       sizeof *keyed, "sample order", error);
    if (!keyed) return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    for (i = 0; i < batch->count; i++) {
        int32_t level = levels ? levels[i] : dcp__log2_int(batch->cp_min[i]);
        int64_t ticks = dcp__sample_ticks(batch, i, level);
        /* level-major keys put all samples of a wider CP size first; ticks < 2^60 */
        keyed[i].key = level_major ? ((int64_t)level << 58) + (ticks >> 3) : ticks;
        keyed[i].id = i;
    }
    if (batch->count < DCP__RADIX_MIN_COUNT) /* second half: scratch */
        dcp__keyed_sort(keyed, keyed + batch->count, batch->count);
    else
        dcp__keyed_radix_sort(keyed, keyed + batch->count, batch->count);
    if (level_major && levels)
        dcp__order_tokens_falling(batch, levels, keyed, keyed + batch->count, batch->count);
    for (i = 0; i < batch->count; i++) order[i] = keyed[i].id;
    dcp_free(allocator, keyed);
    return DCP_OK;
}

typedef struct dcp__open_group {
    int32_t first_rank;
    int32_t level;
    int64_t load;
    int64_t used;
} dcp__open_group;

/* ---------------------------------------------------------------- dynamic planner
   Why it works. Aligned groups nest like a buddy allocator, so the ranks form a binary tree
   whose nodes at level j are the aligned blocks of 2^j ranks. If every microbatch of a node
   runs before any microbatch of its children (wide groups first), no group ever waits: all
   ranks of a block finish the block's work together, and a rank's finish time is the sum of
   the work on the nodes from the root down to it. The step time is then the largest
   root-to-leaf sum, and planning is load balancing on a tree: put every sample on a node of a
   level at least its minimum CP size so that the largest path sum is small, while the
   microbatches ("bins" of M tokens per rank) along each path stay within K.

   Construction: longest-work-first, each sample to the node whose placement finishes earliest
   (best-first search over the tree with per-level aggregates, so a placement costs
   O(log^2 D)); samples too large for the target step are given more ranks than their
   minimum. Several such candidates (how eagerly large samples are widened, K) are built and
   the best is improved by a bounded local search that moves samples off the critical path.

   Per node n: add[n] = ticks of the groups at n (per rank); bins_used[n] = its non-empty
   microbatches; mx_time[n] = largest path sum from n down to one of its ranks; mx_bins[n]
   likewise for microbatches; for each level j a cell: best_time = smallest mx_time among the
   level-j nodes below n (counted from n), min_bins and max_free (largest room in a non-empty
   bin) the same way. These let the search prune whole subtrees. */


#define DCP__TICKS_NONE (INT64_MIN / 4)
#define DCP__BINS_INF (INT32_MAX / 4)
#define DCP__BINS_NONE (INT32_MIN / 4)

/* Node n's aggregates over its level-j nodes (cells[n * levels + j]), read together. */
typedef struct dcp__tree_cell {
    int64_t best_time;
    int64_t max_free;
    int32_t min_bins;
} dcp__tree_cell;

/* How a node's block lies against the pool: past its last rank, across it, or within it. */
#define DCP__SPAN_NONE 0
#define DCP__SPAN_PART 1
#define DCP__SPAN_FULL 2

typedef struct dcp__bin {
    int64_t used;
    int32_t samples;
    int32_t next;
    int32_t slot; /* its place in its node's list */
} dcp__bin;

/* A node's bins in list order under a tournament tree (per subtree the largest room of a
   non-empty bin, -1 none, and the count of empty bins), so that first fit and the node's
   largest room cost O(log bins) instead of a walk of the list: with thousands of samples per
   rank a node holds thousands of bins, and the walks made planning quadratic. */
typedef struct dcp__bin_index {
    int32_t count, leaves; /* bins listed; leaves of the tree (a power of two, 0: none yet) */
    int32_t *ids;          /* [leaves] */
    int64_t *room;         /* [2 leaves] */
    int32_t *empty;        /* [2 leaves] */
} dcp__bin_index;

typedef struct dcp__heap_entry {
    int64_t key;
    int64_t above_time;
    int32_t above_bins;
    int32_t node;
} dcp__heap_entry;

/* The build's state for one CP level (dynamic planner: the build, level by level), over the
   level's nodes by position p (node first + p). */
typedef struct dcp__level_build {
    int32_t level, first, count;
    int64_t tokens;      /* the fewest tokens of the level's samples placed so far */
    int64_t *above_time; /* [leaf_base]: work on the node's ancestors */
    int32_t *above_bins; /* [leaf_base]: their bins */
    int64_t *value;      /* [leaf_base]: dcp__level_value */
    int32_t *winner;     /* [2 leaf_base]: per subtree the position of the smallest value */
    int64_t *waiting;    /* [2 leaf_base]: per subtree the largest room below `tokens` */
} dcp__level_build;

typedef struct dcp__tree {
    const dcp__batch *batch;
    const dcp_allocator *allocator;
    int32_t leaf_base;
    int32_t levels;          /* group levels: 0 .. log2(max_cp) */
    int32_t ranks;
    int32_t microbatch_limit; /* K */
    int64_t capacity;         /* M */
    int8_t *node_level;
    int8_t *node_span;        /* DCP__SPAN_* */
    int64_t *add;
    int32_t *bins_used;
    int64_t *node_free;       /* largest room in a non-empty bin of the node, -1 if none */
    int64_t *mx_time;
    int32_t *mx_bins;
    dcp__tree_cell *cells;    /* [node * levels + level] */
    int32_t *bin_head;
    int32_t *bin_tail;
    dcp__bin *bins;
    int32_t bin_count, bin_capacity;
    dcp__bin_index *bin_index; /* [nodes] */
    int32_t *sample_node;
    int32_t *sample_bin;
    int32_t *sample_level;
    int32_t *node_first;      /* samples of a node as a doubly linked list */
    int32_t *sample_next;
    int32_t *sample_prev;
    dcp__heap_entry *heap;
    int32_t heap_size;
    int32_t lowest;           /* no sample goes below this level (the block-wide plan's E) */
    dcp__level_build level;
} dcp__tree;

static void dcp__tree_free(dcp__tree *tree)
{
    const dcp_allocator *a = tree->allocator;
    void *list[] = {tree->node_level, tree->node_span, tree->add, tree->bins_used,
                    tree->node_free, tree->mx_time, tree->mx_bins, tree->cells, tree->bin_head,
                    tree->bin_tail, tree->bin_index, tree->bins,
                    tree->sample_node, tree->sample_bin, tree->sample_level, tree->node_first,
                    tree->sample_next, tree->sample_prev, tree->heap, tree->level.above_time,
                    tree->level.above_bins, tree->level.value, tree->level.winner,
                    tree->level.waiting};
    if (tree->bin_index) {
        int32_t n;
        for (n = 0; n < 2 * tree->leaf_base; n++) {
            void *bin_lists[] = {tree->bin_index[n].ids, tree->bin_index[n].room,
                                 tree->bin_index[n].empty};
            dcp__free_list(a, bin_lists, DCP__COUNT(bin_lists));
        }
    }
    dcp__free_list(a, list, DCP__COUNT(list));
}

static int64_t dcp__node_start(const dcp__tree *tree, int32_t n)
{
    int32_t level = tree->node_level[n];
    return ((int64_t)n - ((int64_t)tree->leaf_base >> level)) << level;
}

static dcp_status dcp__tree_init(dcp__tree *tree, const dcp__batch *batch, int32_t lowest,
                                 dcp_error *error)
{
    const dcp_allocator *a = &batch->config->allocator;
    size_t nodes, cells, count = (size_t)batch->count;
    int32_t n;
    memset(tree, 0, sizeof *tree);
    tree->batch = batch;
    tree->allocator = a;
    tree->lowest = lowest;
    tree->ranks = batch->config->ranks;
    tree->leaf_base = dcp__leaf_base(tree->ranks);
    tree->levels = batch->levels;
    tree->capacity = batch->config->max_tokens_per_rank;
    nodes = 2 * (size_t)tree->leaf_base;
    cells = nodes * (size_t)tree->levels;
    tree->bin_capacity = batch->count + 1;
    tree->node_level = dcp__node_levels(a, tree->leaf_base, error);
    tree->add = (int64_t *)dcp__alloc_array(a, nodes, sizeof(int64_t), "tree", error);
    tree->bins_used = (int32_t *)dcp__alloc_array(a, nodes, sizeof(int32_t), "tree", error);
    tree->node_free = (int64_t *)dcp__alloc_array(a, nodes, sizeof(int64_t), "tree", error);
    tree->mx_time = (int64_t *)dcp__alloc_array(a, nodes, sizeof(int64_t), "tree", error);
    tree->mx_bins = (int32_t *)dcp__alloc_array(a, nodes, sizeof(int32_t), "tree", error);
    tree->node_span = (int8_t *)dcp__alloc_array(a, nodes, sizeof(int8_t), "tree", error);
    tree->cells = (dcp__tree_cell *)dcp__alloc_array(a, cells, sizeof(dcp__tree_cell), "tree",
                                                     error);
    tree->bin_head = (int32_t *)dcp__alloc_array(a, nodes, sizeof(int32_t), "tree", error);
    tree->bin_tail = (int32_t *)dcp__alloc_array(a, nodes, sizeof(int32_t), "tree", error);
    tree->bin_index = (dcp__bin_index *)dcp__alloc_array(a, nodes, sizeof(dcp__bin_index),
                                                         "tree bins", error);
    if (tree->bin_index) memset(tree->bin_index, 0, nodes * sizeof(dcp__bin_index));
    tree->bins = (dcp__bin *)dcp__alloc_array(a, (size_t)tree->bin_capacity, sizeof(dcp__bin),
                                              "tree bins", error);
    tree->sample_node = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "tree", error);
    tree->sample_bin = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "tree", error);
    tree->sample_level = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "tree", error);
    tree->node_first = (int32_t *)dcp__alloc_array(a, nodes, sizeof(int32_t), "tree", error);
    tree->sample_next = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "tree", error);
    tree->sample_prev = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "tree", error);
    /* each pop pushes at most two children and each node is pushed at most once */
    tree->heap = (dcp__heap_entry *)dcp__alloc_array(a, nodes + 1, sizeof(dcp__heap_entry),
                                                     "tree heap", error);
    tree->level.above_time = (int64_t *)dcp__alloc_array(a, nodes / 2, sizeof(int64_t), "tree",
                                                         error);
    tree->level.above_bins = (int32_t *)dcp__alloc_array(a, nodes / 2, sizeof(int32_t), "tree",
                                                         error);
    tree->level.value = (int64_t *)dcp__alloc_array(a, nodes / 2, sizeof(int64_t), "tree", error);
    tree->level.winner = (int32_t *)dcp__alloc_array(a, nodes, sizeof(int32_t), "tree", error);
    tree->level.waiting = (int64_t *)dcp__alloc_array(a, nodes, sizeof(int64_t), "tree", error);
    if (!tree->node_level || !tree->add || !tree->bins_used || !tree->node_free ||
        !tree->node_span || !tree->mx_time || !tree->mx_bins || !tree->cells ||
        !tree->bin_head || !tree->bin_tail || !tree->bins || !tree->bin_index ||
        !tree->sample_node || !tree->sample_bin || !tree->sample_level || !tree->node_first ||
        !tree->sample_next || !tree->sample_prev || !tree->heap || !tree->level.above_time ||
        !tree->level.above_bins || !tree->level.value || !tree->level.winner ||
        !tree->level.waiting) {
        dcp__tree_free(tree);
        tree->batch = NULL; /* freed: not to be freed again */
        return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    }
    /* refresh compares before it writes: start from defined values */
    memset(tree->mx_time, 0, nodes * sizeof(int64_t));
    memset(tree->mx_bins, 0, nodes * sizeof(int32_t));
    memset(tree->cells, 0, cells * sizeof(dcp__tree_cell));
    for (n = 1; n < 2 * tree->leaf_base; n++) {
        int64_t start = dcp__node_start(tree, n);
        tree->node_span[n] = start >= tree->ranks ? DCP__SPAN_NONE
                             : start + ((int64_t)1 << tree->node_level[n]) <= tree->ranks
                                 ? DCP__SPAN_FULL
                                 : DCP__SPAN_PART;
    }
    return DCP_OK;
}

/* Recomputes the aggregates of node n: its path maxima always, its per-level minima only for
   the levels in `levels` (a bit per level) plus its own level. Returns the levels whose
   values changed, with DCP__MAX_CHANGED set when a path maximum changed: the caller stops
   climbing once nothing changes, and a placement usually changes one level per ancestor. */
#define DCP__ALL_LEVELS 0x7fffffffu
#define DCP__MAX_CHANGED 0x80000000u

/* Stores a cell's (best time, fewest bins, largest room); returns `bit` when they changed, 0
   when they did not. */
static uint32_t dcp__tree_store(dcp__tree_cell *cell, int64_t t, int32_t m, int64_t f,
                                uint32_t bit)
{
    if (t == cell->best_time && m == cell->min_bins && f == cell->max_free) return 0;
    cell->best_time = t;
    cell->min_bins = m;
    cell->max_free = f;
    return bit;
}

static uint32_t dcp__tree_refresh(dcp__tree *tree, int32_t n, uint32_t levels)
{
    const int32_t level = tree->node_level[n], L = tree->levels, span = tree->node_span[n];
    dcp__tree_cell *cell = tree->cells + (size_t)n * (size_t)L;
    int64_t mx_time = DCP__TICKS_NONE;
    int32_t mx_bins = DCP__BINS_NONE;
    uint32_t changed = 0;
    if (level == 0) {
        if (span != DCP__SPAN_NONE) {
            mx_time = tree->add[n];
            mx_bins = tree->bins_used[n];
        }
    } else {
        const dcp__tree_cell *ca = tree->cells + (size_t)(2 * n) * (size_t)L;
        const dcp__tree_cell *cb = ca + L;
        const int64_t add = tree->add[n];
        const int32_t bins = tree->bins_used[n];
        int64_t ta = tree->mx_time[2 * n], tb = tree->mx_time[2 * n + 1];
        int32_t ba = tree->mx_bins[2 * n], bb = tree->mx_bins[2 * n + 1];
        if (span != DCP__SPAN_NONE) {
            mx_time = add + (ta > tb ? ta : tb);
            mx_bins = bins + (ba > bb ? ba : bb);
        }
        for (levels &= (1u << (level < L ? level : L)) - 1u; levels != 0; levels &= levels - 1u) {
            const int32_t j = dcp__lowest_bit_index(levels);
            int64_t t = ca[j].best_time < cb[j].best_time ? ca[j].best_time : cb[j].best_time;
            int64_t f = ca[j].max_free > cb[j].max_free ? ca[j].max_free : cb[j].max_free;
            int32_t m = ca[j].min_bins < cb[j].min_bins ? ca[j].min_bins : cb[j].min_bins;
            t = t >= DCP__TICKS_INF ? DCP__TICKS_INF : t + add;
            m = m >= DCP__BINS_INF ? DCP__BINS_INF : m + bins;
            changed |= dcp__tree_store(&cell[j], t, m, f, 1u << j);
        }
    }
    if (mx_time != tree->mx_time[n] || mx_bins != tree->mx_bins[n]) {
        tree->mx_time[n] = mx_time;
        tree->mx_bins[n] = mx_bins;
        changed |= DCP__MAX_CHANGED;
    }
    if (level < L) {
        const int valid = span == DCP__SPAN_FULL;
        changed |= dcp__tree_store(&cell[level], valid ? mx_time : DCP__TICKS_INF,
                                   valid ? mx_bins : DCP__BINS_INF,
                                   valid ? tree->node_free[n] : -1, 1u << level);
    }
    return changed;
}

/* After node n itself changed (its add, bins or room): every level below it shifts. */
static void dcp__tree_refresh_path(dcp__tree *tree, int32_t n)
{
    uint32_t changed = dcp__tree_refresh(tree, n, DCP__ALL_LEVELS);
    for (n /= 2; n >= 1 && changed != 0; n /= 2)
        changed = dcp__tree_refresh(tree, n, changed & ~DCP__MAX_CHANGED);
}

/* Empties the tree for a build (which refreshes every node's aggregates once it is done). */
static void dcp__tree_reset(dcp__tree *tree, int32_t microbatch_limit)
{
    int32_t n;
    tree->microbatch_limit = microbatch_limit;
    tree->bin_count = 0;
    for (n = 2 * tree->leaf_base - 1; n >= 1; n--) {
        tree->add[n] = 0;
        tree->bins_used[n] = 0;
        tree->node_free[n] = -1;
        tree->bin_head[n] = -1;
        tree->bin_tail[n] = -1;
        if (tree->bin_index[n].count > 0) { /* empty the node's bin tree */
            dcp__bin_index *x = &tree->bin_index[n];
            int32_t i;
            for (i = 1; i < 2 * x->leaves; i++) {
                x->room[i] = -1;
                x->empty[i] = 0;
            }
            x->count = 0;
        }
        tree->node_first[n] = -1;
    }
}

/* Heap order: smaller key first; among equal keys the deeper node (so that ties dive to a
   candidate instead of expanding the tree breadth-first), then the lower index. */
static int dcp__heap_before(const dcp__tree *tree, const dcp__heap_entry *x,
                            const dcp__heap_entry *y)
{
    if (x->key != y->key) return x->key < y->key;
    if (tree->node_level[x->node] != tree->node_level[y->node])
        return tree->node_level[x->node] < tree->node_level[y->node];
    return x->node < y->node;
}

static void dcp__heap_push(dcp__tree *tree, dcp__heap_entry entry)
{
    int32_t i = tree->heap_size++;
    while (i > 0) {
        int32_t parent = (i - 1) / 2;
        if (!dcp__heap_before(tree, &entry, &tree->heap[parent])) break;
        tree->heap[i] = tree->heap[parent];
        i = parent;
    }
    tree->heap[i] = entry;
}

static dcp__heap_entry dcp__heap_pop(dcp__tree *tree)
{
    dcp__heap_entry top = tree->heap[0], last = tree->heap[--tree->heap_size];
    int32_t i = 0;
    for (;;) {
        int32_t child = 2 * i + 1;
        if (child >= tree->heap_size) break;
        if (child + 1 < tree->heap_size &&
            dcp__heap_before(tree, &tree->heap[child + 1], &tree->heap[child]))
            child++;
        if (!dcp__heap_before(tree, &tree->heap[child], &last)) break;
        tree->heap[i] = tree->heap[child];
        i = child;
    }
    tree->heap[i] = last;
    return top;
}

/* The level-j node where a sample of the given per-rank tokens and ticks finishes earliest
   (ties: lower node index), or -1 when no node has room. *finish receives that finish.
   A heap key is the earliest finish any node below could offer: its best time, plus the ring
   cost of a new microbatch when no bin below has room. Keys never exceed what they bound, so
   the first level-j node popped with a feasible finish <= every remaining key is the best. */
static int64_t dcp__tree_key(const dcp__tree *tree, const dcp__tree_cell *cell,
                             int64_t above_time, int64_t tokens, int32_t j)
{
    int64_t ring = cell->max_free < tokens ? tree->batch->ring_ticks[j] : 0;
    return above_time + cell->best_time + ring;
}

/* The finish of a sample at level-j node n given what lies above it, or DCP__TICKS_INF when
   the node has neither room in a bin nor a free microbatch. */
static int64_t dcp__tree_finish(const dcp__tree *tree, int32_t n, int32_t j, int64_t above_time,
                                int32_t above_bins, int64_t tokens, int64_t ticks)
{
    int64_t base = above_time + tree->mx_time[n] + ticks;
    if (tree->node_free[n] >= tokens) return base;
    if (above_bins + tree->mx_bins[n] < tree->microbatch_limit)
        return base + tree->batch->ring_ticks[j];
    return DCP__TICKS_INF;
}

/* The key of child c (its level-j cell) under a parent with above_time and above_bins above
   it, or DCP__TICKS_INF when no level-j node below it can take the sample: none exists, or
   none has room in a bin and none may open a microbatch. */
static int64_t dcp__tree_child_key(const dcp__tree *tree, int32_t c, int32_t j, int64_t above_time,
                                   int32_t above_bins, int64_t tokens)
{
    const dcp__tree_cell *cell = tree->cells + (size_t)c * (size_t)tree->levels + (size_t)j;
    if (cell->best_time >= DCP__TICKS_INF ||
        (cell->max_free < tokens && above_bins + cell->min_bins >= tree->microbatch_limit))
        return DCP__TICKS_INF;
    return dcp__tree_key(tree, cell, above_time, tokens, j);
}

/* Follows the smaller key from the root, whose key is `bound` (< DCP__TICKS_INF). When the
   node reached meets it, no node can beat it and the heap is not needed; the common case, so
   it comes first. */
static int32_t dcp__tree_dive(const dcp__tree *tree, int32_t j, int64_t tokens, int64_t ticks,
                              int64_t bound, int64_t *finish)
{
    int64_t above_time = 0;
    int32_t above_bins = 0, n = 1;
    while (tree->node_level[n] != j) {
        int64_t ka, kb;
        above_time += tree->add[n];
        above_bins += tree->bins_used[n];
        ka = dcp__tree_child_key(tree, 2 * n, j, above_time, above_bins, tokens);
        kb = dcp__tree_child_key(tree, 2 * n + 1, j, above_time, above_bins, tokens);
        if (ka >= DCP__TICKS_INF && kb >= DCP__TICKS_INF) return -1;
        n = kb < ka ? 2 * n + 1 : 2 * n;
    }
    *finish = dcp__tree_finish(tree, n, j, above_time, above_bins, tokens, ticks);
    return *finish == bound + ticks ? n : -1;
}

/* The level-j node where the sample finishes earliest, if that is before `cutoff` (the
   local search asks only for a finish below the step; the search stops once every key left
   reaches the cutoff, and is not started when the root's key does), else -1. */
static int32_t dcp__tree_find(dcp__tree *tree, int32_t j, int64_t tokens, int64_t ticks,
                              int64_t cutoff, int64_t *finish)
{
    int32_t best = -1, dived;
    int64_t best_finish = DCP__TICKS_INF;
    dcp__heap_entry root;
    root.key = dcp__tree_child_key(tree, 1, j, 0, 0, tokens);
    if (root.key >= DCP__TICKS_INF || root.key + ticks >= cutoff) {
        if (finish) *finish = cutoff;
        return -1;
    }
    dived = dcp__tree_dive(tree, j, tokens, ticks, root.key, &best_finish);
    if (dived >= 0) {
        if (finish) *finish = best_finish;
        return dived; /* below the cutoff: the root's key is */
    }
    best_finish = cutoff;
    tree->heap_size = 0;
    root.above_time = 0;
    root.above_bins = 0;
    root.node = 1;
    dcp__heap_push(tree, root);
    while (tree->heap_size > 0) {
        dcp__heap_entry e = dcp__heap_pop(tree);
        int32_t n = e.node, c;
        if (e.key + ticks >= best_finish) break;
        if (tree->node_level[n] == j) {
            int64_t f = dcp__tree_finish(tree, n, j, e.above_time, e.above_bins, tokens, ticks);
            if (f < best_finish) {
                best_finish = f;
                best = n;
            }
            continue;
        }
        for (c = 2 * n; c <= 2 * n + 1; c++) {
            dcp__heap_entry child;
            child.above_time = e.above_time + tree->add[n];
            child.above_bins = e.above_bins + tree->bins_used[n];
            child.key = dcp__tree_child_key(tree, c, j, child.above_time, child.above_bins, tokens);
            child.node = c;
            /* one that cannot beat the best would only end the search when popped */
            if (child.key < DCP__TICKS_INF && child.key + ticks < best_finish)
                dcp__heap_push(tree, child);
        }
    }
    if (finish) *finish = best_finish;
    return best;
}

/* Bin b (in slot `slot` of node n's list) changed: its leaf, the path above and the node's
   largest room follow. */
static void dcp__tree_bin_changed(dcp__tree *tree, int32_t n, int32_t b)
{
    dcp__bin_index *x = &tree->bin_index[n];
    int32_t i = x->leaves + tree->bins[b].slot;
    x->room[i] = tree->bins[b].samples > 0 ? tree->capacity - tree->bins[b].used : -1;
    x->empty[i] = tree->bins[b].samples == 0;
    for (i /= 2; i >= 1; i /= 2) {
        x->room[i] = x->room[2 * i] > x->room[2 * i + 1] ? x->room[2 * i] : x->room[2 * i + 1];
        x->empty[i] = x->empty[2 * i] + x->empty[2 * i + 1];
    }
    tree->node_free[n] = x->room[1];
}

/* Doubles node n's bin tree (its leaves keep their bins); 0 when memory is short. A node's
   first tree has room for a few microbatches' bins, so most nodes allocate once. */
static int dcp__tree_bin_index_grow(dcp__tree *tree, int32_t n, dcp_error *error)
{
    dcp__bin_index *x = &tree->bin_index[n];
    int32_t leaves = x->leaves > 0 ? 2 * x->leaves : DCP__BIN_INDEX_FIRST_LEAVES, i;
    int32_t *ids = (int32_t *)dcp__alloc_array(tree->allocator, (size_t)leaves, sizeof(int32_t),
                                               "tree bins", error);
    int64_t *room = (int64_t *)dcp__alloc_array(tree->allocator, 2 * (size_t)leaves,
                                                sizeof(int64_t), "tree bins", error);
    int32_t *empty = (int32_t *)dcp__alloc_array(tree->allocator, 2 * (size_t)leaves,
                                                 sizeof(int32_t), "tree bins", error);
    if (!ids || !room || !empty) {
        dcp_free(tree->allocator, ids);
        dcp_free(tree->allocator, room);
        dcp_free(tree->allocator, empty);
        return 0;
    }
    if (x->count > 0) memcpy(ids, x->ids, (size_t)x->count * sizeof *ids);
    dcp_free(tree->allocator, x->ids);
    dcp_free(tree->allocator, x->room);
    dcp_free(tree->allocator, x->empty);
    x->ids = ids;
    x->room = room;
    x->empty = empty;
    x->leaves = leaves;
    for (i = 1; i < 2 * leaves; i++) {
        room[i] = -1;
        empty[i] = 0;
    }
    for (i = 0; i < x->count; i++) dcp__tree_bin_changed(tree, n, ids[i]);
    return 1;
}

/* First fit among the node's non-empty bins (in list order), else its first empty bin, else
   a new one; -1 when memory is short. */
static int32_t dcp__tree_bin_for(dcp__tree *tree, int32_t n, int64_t tokens, dcp_error *error)
{
    dcp__bin_index *x = &tree->bin_index[n];
    int32_t b, i = 1;
    if (x->count > 0 && x->room[1] >= tokens) { /* leftmost leaf with room */
        while (i < x->leaves) i = x->room[2 * i] >= tokens ? 2 * i : 2 * i + 1;
        return x->ids[i - x->leaves];
    }
    if (x->count > 0 && x->empty[1] > 0) { /* leftmost empty bin */
        while (i < x->leaves) i = x->empty[2 * i] > 0 ? 2 * i : 2 * i + 1;
        return x->ids[i - x->leaves];
    }
    if (x->count == x->leaves && !dcp__tree_bin_index_grow(tree, n, error)) return -1;
    if (tree->bin_count == tree->bin_capacity) { /* local search can strand empty bins */
        int32_t capacity = tree->bin_capacity * 2;
        dcp__bin *bins = (dcp__bin *)dcp__alloc_array(tree->allocator, (size_t)capacity,
                                                      sizeof(dcp__bin), "tree bins", error);
        if (!bins) return -1;
        memcpy(bins, tree->bins, (size_t)tree->bin_count * sizeof(dcp__bin));
        dcp_free(tree->allocator, tree->bins);
        tree->bins = bins;
        tree->bin_capacity = capacity;
    }
    b = tree->bin_count++;
    tree->bins[b].used = 0;
    tree->bins[b].samples = 0;
    tree->bins[b].next = -1;
    tree->bins[b].slot = x->count;
    x->ids[x->count++] = b;
    dcp__tree_bin_changed(tree, n, b);
    if (tree->bin_tail[n] >= 0)
        tree->bins[tree->bin_tail[n]].next = b;
    else
        tree->bin_head[n] = b;
    tree->bin_tail[n] = b;
    return b;
}

/* Puts sample s into bin b of node n (a bin of that node), leaving the aggregates above n
   for the caller to refresh. */
static void dcp__tree_put(dcp__tree *tree, int32_t s, int32_t n, int32_t b)
{
    int32_t j = tree->node_level[n];
    if (tree->bins[b].samples == 0) {
        tree->bins_used[n]++;
        tree->add[n] += tree->batch->ring_ticks[j];
    }
    tree->bins[b].used += dcp__sample_tokens(tree->batch, s, j);
    tree->bins[b].samples++;
    tree->add[n] += dcp__sample_ticks(tree->batch, s, j);
    tree->sample_node[s] = n;
    tree->sample_bin[s] = b;
    tree->sample_level[s] = j;
    tree->sample_prev[s] = -1;
    tree->sample_next[s] = tree->node_first[n];
    if (tree->node_first[n] >= 0) tree->sample_prev[tree->node_first[n]] = s;
    tree->node_first[n] = s;
    dcp__tree_bin_changed(tree, n, b);
}

/* Puts sample s into bin b of node n and refreshes the path above. */
static void dcp__tree_place_in(dcp__tree *tree, int32_t s, int32_t n, int32_t b)
{
    dcp__tree_put(tree, s, n, b);
    dcp__tree_refresh_path(tree, n);
}

static dcp_status dcp__tree_place(dcp__tree *tree, int32_t s, int32_t n, dcp_error *error)
{
    int32_t b = dcp__tree_bin_for(tree, n, dcp__sample_tokens(tree->batch, s, tree->node_level[n]),
                                  error);
    if (b < 0) return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    dcp__tree_place_in(tree, s, n, b);
    return DCP_OK;
}

static void dcp__tree_remove(dcp__tree *tree, int32_t s)
{
    int32_t n = tree->sample_node[s], b = tree->sample_bin[s], j = tree->sample_level[s];
    tree->bins[b].used -= dcp__sample_tokens(tree->batch, s, j);
    tree->bins[b].samples--;
    tree->add[n] -= dcp__sample_ticks(tree->batch, s, j);
    if (tree->bins[b].samples == 0) {
        tree->bins_used[n]--;
        tree->add[n] -= tree->batch->ring_ticks[j];
    }
    tree->sample_node[s] = -1;
    if (tree->sample_prev[s] >= 0)
        tree->sample_next[tree->sample_prev[s]] = tree->sample_next[s];
    else
        tree->node_first[n] = tree->sample_next[s];
    if (tree->sample_next[s] >= 0) tree->sample_prev[tree->sample_next[s]] = tree->sample_prev[s];
    dcp__tree_bin_changed(tree, n, b);
    dcp__tree_refresh_path(tree, n);
}

/* ------------------------------------------------ dynamic planner: the build, level by level
   The build places the samples widest level first (dcp__order_by_ticks, level-major). While
   level j's samples are placed every wider level is final and every narrower one empty, so a
   level-j node n finishes a sample at P(n) + its ticks, P(n) the work on n and its ancestors,
   plus one ring when no bin of n has room for the sample's tokens and a new microbatch is
   opened (allowed while the bins on n's path stay below the limit K). The level's nodes are
   then independent machines, and a tournament tree over them (smallest finish, then lowest
   node) gives each sample its node in O(log D); the best-first search over the whole tree,
   which the local search needs, is not (it cost thousands of instructions a sample where
   bins were full). Within a level the samples come with falling tokens (the order's ties go
   to more tokens), so a node whose room fits one sample fits every later one until it is
   placed on: nodes with less room than the last sample's tokens wait in a tournament of
   rooms and join as the tokens fall. The tree's aggregates are refreshed once, at the end. */

/* Where a sample of the level's latest tokens would finish at the level's position p, less
   its ticks, or DCP__TICKS_INF when it cannot go there; *waiting: the node's room when it is
   below those tokens, else -1. */
static int64_t dcp__level_value(const dcp__tree *tree, int32_t p, int64_t *waiting)
{
    const dcp__level_build *x = &tree->level;
    const int32_t n = x->first + p;
    const int64_t room = tree->node_free[n], work = x->above_time[p] + tree->add[n];
    *waiting = room >= 0 && room < x->tokens ? room : -1;
    if (tree->node_span[n] != DCP__SPAN_FULL) return DCP__TICKS_INF;
    if (room >= x->tokens) return work;
    if (x->above_bins[p] + tree->bins_used[n] < tree->microbatch_limit)
        return work + tree->batch->ring_ticks[x->level];
    return DCP__TICKS_INF;
}

/* Tournament node i from its two children: the smaller value (ties: the lower position) and
   the larger waiting room. */
static void dcp__level_combine(dcp__level_build *x, int32_t i)
{
    const int32_t a = x->winner[2 * i], b = x->winner[2 * i + 1];
    x->winner[i] = x->value[b] < x->value[a] ? b : a;
    x->waiting[i] = x->waiting[2 * i] > x->waiting[2 * i + 1] ? x->waiting[2 * i]
                                                              : x->waiting[2 * i + 1];
}

/* Recomputes position p's value and room and the two tournaments' paths above it. */
static void dcp__level_update(dcp__tree *tree, int32_t p)
{
    dcp__level_build *x = &tree->level;
    int32_t i = x->count + p;
    x->value[p] = dcp__level_value(tree, p, &x->waiting[i]);
    for (i /= 2; i >= 1; i /= 2) dcp__level_combine(x, i);
}

/* Every position's value from scratch: at the level's start, and when the limit grew. */
static void dcp__level_rebuild(dcp__tree *tree)
{
    dcp__level_build *x = &tree->level;
    int32_t p, i;
    for (p = 0; p < x->count; p++) {
        x->value[p] = dcp__level_value(tree, p, &x->waiting[x->count + p]);
        x->winner[x->count + p] = p;
    }
    for (i = x->count - 1; i >= 1; i--) dcp__level_combine(x, i);
}

/* Starts level j: the work and bins above each of its nodes. */
static void dcp__level_start(dcp__tree *tree, int32_t j)
{
    dcp__level_build *x = &tree->level;
    int32_t p, m;
    x->level = j;
    x->count = tree->leaf_base >> j;
    x->first = x->count; /* level j's nodes are first .. 2 first - 1 */
    x->tokens = INT64_MAX;
    for (p = 0; p < x->count; p++) {
        x->above_time[p] = 0;
        x->above_bins[p] = 0;
        for (m = (x->first + p) / 2; m >= 1; m /= 2) {
            x->above_time[p] += tree->add[m];
            x->above_bins[p] += tree->bins_used[m];
        }
    }
    dcp__level_rebuild(tree);
}

/* A sample of `tokens` comes next: the waiting nodes whose room now fits it join. */
static void dcp__level_tokens(dcp__tree *tree, int64_t tokens)
{
    dcp__level_build *x = &tree->level;
    if (tokens >= x->tokens) return;
    x->tokens = tokens;
    while (x->waiting[1] >= tokens) {
        int32_t i = 1;
        while (i < x->count) i = x->waiting[2 * i] >= tokens ? 2 * i : 2 * i + 1;
        dcp__level_update(tree, i - x->count);
    }
}

/* The most bins on any path, plus one: a limit above it lets every node open a microbatch. */
static int32_t dcp__level_bins_needed(const dcp__tree *tree)
{
    const dcp__level_build *x = &tree->level;
    int32_t p, most = 0;
    for (p = 0; p < x->count; p++) {
        int32_t n = x->first + p, bins = x->above_bins[p] + tree->bins_used[n];
        if (tree->node_span[n] != DCP__SPAN_NONE && bins > most) most = bins;
    }
    return most + 1;
}

/* Places the samples in the given order (level-major, tokens falling within a level) at the
   given levels. The microbatch limit starts at the given value and grows by the multiple
   whenever a sample finds no room: earlier placements stay valid under a looser limit, so
   nothing is rebuilt. The build gives up (*built 0, the tree unusable) once its step reaches
   `give_up`: the step only grows as samples are placed (each placement's P(n) is a path sum,
   and the step is the largest). */
static dcp_status dcp__tree_build(dcp__tree *tree, const int32_t *order, const int32_t *levels,
                                  int32_t microbatch_limit, int64_t give_up, int *built,
                                  dcp_error *error)
{
    const int32_t multiple = tree->batch->config->microbatch_multiple;
    int64_t step = 0;
    int32_t i, n;
    dcp__tree_reset(tree, microbatch_limit);
    tree->level.level = -1;
    *built = 0;
    for (i = 0; i < tree->batch->count; i++) {
        const int32_t s = order[i], j = levels[s];
        const int64_t tokens = dcp__sample_tokens(tree->batch, s, j);
        int32_t b;
        if (j != tree->level.level) dcp__level_start(tree, j);
        dcp__level_tokens(tree, tokens);
        while (tree->level.value[tree->level.winner[1]] >= DCP__TICKS_INF) {
            int32_t needed = dcp__level_bins_needed(tree);
            int32_t grown = tree->microbatch_limit + multiple;
            if (grown < needed) grown = (needed + multiple - 1) / multiple * multiple;
            if (grown > INT32_MAX / 2)
                return dcp_error_set(error, DCP_ERROR_OVERFLOW, "microbatch count overflows");
            tree->microbatch_limit = grown;
            dcp__level_rebuild(tree);
        }
        n = tree->level.first + tree->level.winner[1];
        if ((b = dcp__tree_bin_for(tree, n, tokens, error)) < 0)
            return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
        dcp__tree_put(tree, s, n, b);
        dcp__level_update(tree, n - tree->level.first);
        if (tree->level.above_time[n - tree->level.first] + tree->add[n] > step)
            step = tree->level.above_time[n - tree->level.first] + tree->add[n];
        if (step >= give_up) return DCP_OK;
    }
    for (n = 2 * tree->leaf_base - 1; n >= 1; n--)
        (void)dcp__tree_refresh(tree, n, DCP__ALL_LEVELS);
    *built = 1;
    return DCP_OK;
}

/* ------------------------------------------------ dynamic planner: local search
   Takes a rank on the critical path (largest path sum T) and tries, for each sample on the
   nodes above it, a move to the node (of its level, one wider or one narrower) where it would
   finish earliest, then a swap with a smaller sample of the least-loaded node of its level.
   A change is kept only if every rank it touches ends below T, so each kept change removes
   one rank from the set at T (or lowers T) and the search cannot cycle. */

static int64_t dcp__tree_above(const dcp__tree *tree, int32_t n)
{
    int64_t above = 0;
    for (n /= 2; n >= 1; n /= 2) above += tree->add[n];
    return above;
}

static int32_t dcp__tree_above_bins(const dcp__tree *tree, int32_t n)
{
    int32_t above = 0;
    for (n /= 2; n >= 1; n /= 2) above += tree->bins_used[n];
    return above;
}

static int dcp__tree_fits(const dcp__tree *tree, int32_t n, int64_t tokens)
{
    return tree->node_free[n] >= tokens ||
           dcp__tree_above_bins(tree, n) + tree->mx_bins[n] < tree->microbatch_limit;
}

static int64_t dcp__tree_node_max(const dcp__tree *tree, int32_t n)
{
    return dcp__tree_above(tree, n) + tree->mx_time[n];
}

static int32_t dcp__tree_critical_path(const dcp__tree *tree, int32_t *path)
{
    int32_t n = 1, length = 0;
    for (;;) {
        path[length++] = n;
        if (tree->node_level[n] == 0) return length;
        n = tree->mx_time[2 * n] >= tree->mx_time[2 * n + 1] ? 2 * n : 2 * n + 1;
    }
}

/* The best node over every level the sample may take, or -1 if none finishes below T: the
   earliest finish, ties to the narrower level; each level examined costs one unit of the
   budget. With budget for every level, they are searched in the order of their root's key
   (the earliest finish the level could offer), so that the best found so far cuts the later
   searches short and a level that cannot beat it is not searched at all; else the narrowest
   levels the budget allows, in order. */
static int32_t dcp__best_move(dcp__tree *tree, int32_t s, int64_t T, int32_t *budget)
{
    const dcp__batch *batch = tree->batch;
    const int32_t own = dcp__log2_int(batch->cp_min[s]);
    const int32_t lowest = own > tree->lowest ? own : tree->lowest;
    const int keyed = *budget >= tree->levels - lowest;
    int32_t order[DCP_CP_LEVELS], count = tree->levels - lowest, i, k;
    int32_t best_node = -1, best_level = 0;
    int64_t bound[DCP_CP_LEVELS], best_finish = T;
    if (keyed)
        *budget -= count;
    else if (count > *budget)
        count = *budget > 0 ? *budget : 0;
    for (i = 0; i < count; i++) { /* insertion by bound, ties by level */
        const int32_t j = lowest + i;
        bound[j] = keyed ? dcp__tree_child_key(tree, 1, j, 0, 0, dcp__sample_tokens(batch, s, j)) +
                               dcp__sample_ticks(batch, s, j)
                         : 0;
        for (k = i; k > 0 && bound[order[k - 1]] > bound[j]; k--) order[k] = order[k - 1];
        order[k] = j;
    }
    if (!keyed) *budget -= count;
    for (i = 0; i < count; i++) {
        const int32_t j = order[i];
        /* below T; ties with the best found go to the narrower level */
        const int64_t cutoff = best_node >= 0 && j < best_level ? best_finish + 1 : best_finish;
        int64_t finish;
        int32_t n;
        if (bound[j] >= cutoff) continue;
        n = dcp__tree_find(tree, j, dcp__sample_tokens(batch, s, j), dcp__sample_ticks(batch, s, j),
                           cutoff, &finish);
        if (n >= 0) {
            best_finish = finish;
            best_node = n;
            best_level = j;
        }
    }
    return best_node;
}

/* Moves sample s (removed by the caller) to the node, of any level it may take, where it
   finishes earliest, if that is below T; returns 1 when moved. When only one more
   microbatch would let it move and the step is more than 1 / DCP__BALANCED_EFFICIENCY above
   the lower bound, the limit grows by the microbatch multiple. The model charges nothing per
   microbatch but real steps do, so a well-balanced plan keeps the memory floor. */

static int dcp__try_move(dcp__tree *tree, int32_t s, int64_t T, int32_t *budget,
                         dcp_status *status, dcp_error *error)
{
    const int32_t multiple = tree->batch->config->microbatch_multiple;
    const double step_seconds = (double)T * tree->batch->tick_seconds;
    int32_t n = dcp__best_move(tree, s, T, budget);
    if (n < 0 && tree->batch->lower_bound < DCP__BALANCED_EFFICIENCY * step_seconds &&
        tree->microbatch_limit <= INT32_MAX / 2 - multiple) {
        tree->microbatch_limit += multiple;
        n = dcp__best_move(tree, s, T, budget);
        if (n < 0) tree->microbatch_limit -= multiple;
    }
    if (n < 0) return 0;
    *status = dcp__tree_place(tree, s, n, error);
    return 1;
}

/* Places x at node n if it fits there; returns 1 when placed. */
static int dcp__try_place(dcp__tree *tree, int32_t x, int32_t n, int32_t level,
                          dcp_status *status, dcp_error *error)
{
    if (!dcp__tree_fits(tree, n, dcp__sample_tokens(tree->batch, x, level))) return 0;
    *status = dcp__tree_place(tree, x, n, error);
    return *status == DCP_OK;
}

/* Swaps s (on node a) with a smaller sample of the least-loaded node b of its level when
   both nodes then end below T; returns 1 when swapped, else leaves both where they were. */
static int dcp__try_swap(dcp__tree *tree, int32_t s, int32_t a, int64_t T, int32_t *budget,
                         dcp_status *status, dcp_error *error)
{
    const dcp__batch *batch = tree->batch;
    int32_t j = tree->node_level[a], b, other, best = -1, s_bin, best_bin, seen;
    int64_t ws = dcp__sample_ticks(batch, s, j), b_max, ideal, best_gap = DCP__TICKS_INF;
    if (*budget <= 0) return 0;
    (*budget)--;
    b = dcp__tree_find(tree, j, 0, 0, DCP__TICKS_INF, &b_max);
    if (b < 0 || b == a) return 0;
    /* after the swap a's max is about T - ws + w and b's is b_max + ws - w: aim between;
       among the node's DCP__SWAP_CANDIDATES latest samples (a node of thousands of samples
       has near-ideal ones among them, and a full walk made planning quadratic) */
    ideal = ws - (T - b_max) / 2;
    for (other = tree->node_first[b], seen = 0; other >= 0 && seen < DCP__SWAP_CANDIDATES;
         other = tree->sample_next[other], seen++) {
        int64_t w = dcp__sample_ticks(batch, other, j), gap = w > ideal ? w - ideal : ideal - w;
        if (w < ws && b_max + ws - w < T && gap < best_gap) {
            best_gap = gap;
            best = other;
        }
    }
    if (best < 0) return 0;
    s_bin = tree->sample_bin[s];
    best_bin = tree->sample_bin[best];
    dcp__tree_remove(tree, s);
    dcp__tree_remove(tree, best);
    if (dcp__try_place(tree, best, a, j, status, error)) {
        if (dcp__try_place(tree, s, b, j, status, error)) {
            if (dcp__tree_node_max(tree, a) < T && dcp__tree_node_max(tree, b) < T) return 1;
            dcp__tree_remove(tree, s);
        }
        if (*status == DCP_OK) dcp__tree_remove(tree, best);
    }
    if (*status != DCP_OK) return 0;
    dcp__tree_place_in(tree, s, a, s_bin);
    dcp__tree_place_in(tree, best, b, best_bin);
    return 0;
}

/* Empties node a and re-places its samples, largest first: SPLIT puts each on the less
   loaded of a's two children (one level narrower), SCATTER where it finishes earliest at any
   level it may take. These split a crowded wide group into narrower ones, or spread or merge
   samples, which no single move can do. Kept if every rank it touched ends below T; otherwise
   every sample returns to its own bin. */

typedef enum dcp__repack_mode { DCP__SPLIT, DCP__SCATTER } dcp__repack_mode;

/* Where a repacked sample goes, or -1 when it cannot go anywhere. */
static int32_t dcp__repack_target(dcp__tree *tree, int32_t s, int32_t a, dcp__repack_mode mode,
                                  int32_t *budget)
{
    int32_t j = tree->node_level[a] - 1, left = 2 * a, right = 2 * a + 1, n;
    if (mode == DCP__SCATTER) return dcp__best_move(tree, s, DCP__TICKS_INF, budget);
    if (j < dcp__log2_int(tree->batch->cp_min[s]) || j < tree->lowest || *budget <= 0) return -1;
    (*budget)--;
    if (tree->cells[(size_t)right * (size_t)tree->levels + (size_t)j].best_time >= DCP__TICKS_INF)
        n = left; /* the right half lies beyond the last rank */
    else
        n = dcp__tree_node_max(tree, right) < dcp__tree_node_max(tree, left) ? right : left;
    return dcp__tree_fits(tree, n, dcp__sample_tokens(tree->batch, s, j)) ? n : -1;
}

static int dcp__try_repack(dcp__tree *tree, int32_t a, dcp__repack_mode mode, int64_t T,
                           int32_t *budget, dcp_status *status, dcp_error *error)
{
    int32_t samples[DCP__REPACK_MAX_SAMPLES], bins[DCP__REPACK_MAX_SAMPLES];
    int32_t count = 0, placed, i, k, s;
    int ok = 1;
    if (mode == DCP__SPLIT && tree->node_level[a] == 0) return 0;
    for (s = tree->node_first[a]; s >= 0; s = tree->sample_next[s]) {
        if (count == DCP__REPACK_MAX_SAMPLES) return 0;
        samples[count++] = s;
    }
    if (count < 2 || *budget <= 0) return 0;
    for (i = 1; i < count; i++) /* largest work first; ties by id */
        for (k = i; k > 0; k--) {
            int32_t x = samples[k - 1], y = samples[k];
            int64_t wx = dcp__sample_ticks(tree->batch, x, tree->sample_level[x]);
            int64_t wy = dcp__sample_ticks(tree->batch, y, tree->sample_level[y]);
            if (wx > wy || (wx == wy && x < y)) break;
            samples[k - 1] = y;
            samples[k] = x;
        }
    for (i = 0; i < count; i++) {
        bins[i] = tree->sample_bin[samples[i]];
        dcp__tree_remove(tree, samples[i]);
    }
    for (placed = 0; placed < count && ok; placed++) {
        int32_t n = dcp__repack_target(tree, samples[placed], a, mode, budget);
        ok = n >= 0 && (*status = dcp__tree_place(tree, samples[placed], n, error)) == DCP_OK;
        if (!ok) break;
    }
    if (*status != DCP_OK) return 0;
    if (ok) ok = dcp__tree_node_max(tree, a) < T;
    for (i = 0; i < count && ok; i++)
        ok = dcp__tree_node_max(tree, tree->sample_node[samples[i]]) < T;
    if (ok) return 1;
    for (i = 0; i < placed; i++) dcp__tree_remove(tree, samples[i]);
    for (i = 0; i < count; i++) dcp__tree_place_in(tree, samples[i], a, bins[i]);
    return 0;
}

/* Tries, for the samples on the critical rank's path from the leaf up, a move, then a swap;
   then a split and a scatter of each node on the path. Stops when the critical rank cannot be
   improved or the budget is spent. */

/* A step within 1 / DCP__IMPROVE_DONE_EFFICIENCY of the lower bound: nothing left to do. */
static int dcp__improved(const dcp__batch *batch, int64_t step_ticks)
{
    return batch->lower_bound >=
           DCP__IMPROVE_DONE_EFFICIENCY * (double)step_ticks * batch->tick_seconds;
}

static dcp_status dcp__tree_improve(dcp__tree *tree, int32_t budget, dcp_error *error)
{
    int32_t path[DCP_CP_LEVELS + 2];
    dcp_status status = DCP_OK;
    while (budget > 0) {
        int64_t T = tree->mx_time[1];
        int32_t length, p, improved = 0;
        if (dcp__improved(tree->batch, T)) break;
        length = dcp__tree_critical_path(tree, path);
        for (p = length - 1; p >= 0 && !improved && budget > 0; p--) {
            int32_t a = path[p], s, next;
            for (s = tree->node_first[a]; s >= 0 && !improved && budget > 0; s = next) {
                int32_t bin = tree->sample_bin[s];
                next = tree->sample_next[s];
                dcp__tree_remove(tree, s);
                improved = dcp__try_move(tree, s, T, &budget, &status, error);
                if (!improved && status == DCP_OK) {
                    dcp__tree_place_in(tree, s, a, bin);
                    improved = dcp__try_swap(tree, s, a, T, &budget, &status, error);
                }
                if (status != DCP_OK) return status;
            }
        }
        for (p = length - 1; p >= 0 && !improved && budget > 0; p--) {
            improved = dcp__try_repack(tree, path[p], DCP__SPLIT, T, &budget, &status, error);
            if (!improved && status == DCP_OK)
                improved = dcp__try_repack(tree, path[p], DCP__SCATTER, T, &budget, &status, error);
            if (status != DCP_OK) return status;
        }
        if (!improved) break;
    }
    return DCP_OK;
}

/* ------------------------------------------------ dynamic planner: from tree to plan
   Microbatches run top-down: a node's microbatches follow all of its ancestors'. A rank's
   single-rank samples may be spread over the microbatches its path leaves free, which changes
   no time but evens out microbatch sizes and avoids empty ones. */

typedef struct dcp__extract {
    int32_t *offset;    /* [nodes]: first microbatch of the node */
    int32_t *bin_index; /* [bins]: microbatch of a bin */
    int64_t *spread_used;
    int32_t *spread_heap; /* [count]: a leaf's microbatches, fewest tokens (then lowest) first */
    int32_t *spread_bin; /* [count]: microbatch of a spread sample, -1 otherwise */
    dcp__keyed *keyed;
} dcp__extract;

static void dcp__extract_free(const dcp_allocator *a, dcp__extract *x)
{
    void *list[] = {x->offset, x->bin_index, x->spread_used, x->spread_heap, x->spread_bin,
                    x->keyed};
    dcp__free_list(a, list, DCP__COUNT(list));
}

/* Restores the spread's min-heap of microbatches (fewest tokens, then the lowest) after its
   root's tokens grew. */
static void dcp__spread_sift(dcp__extract *x, int32_t bins)
{
    int32_t at = 0, top = x->spread_heap[0];
    for (;;) {
        int32_t child = 2 * at + 1, c, best;
        if (child >= bins) break;
        c = child + 1 < bins ? child + 1 : child;
        best = x->spread_heap[child];
        if (c != child && (x->spread_used[x->spread_heap[c]] < x->spread_used[best] ||
                           (x->spread_used[x->spread_heap[c]] == x->spread_used[best] &&
                            x->spread_heap[c] < best))) {
            child = c;
            best = x->spread_heap[c];
        }
        if (x->spread_used[top] < x->spread_used[best] ||
            (x->spread_used[top] == x->spread_used[best] && top < best))
            break;
        x->spread_heap[at] = best;
        at = child;
    }
    x->spread_heap[at] = top;
}

/* Spreads a leaf's samples over up to `available` microbatches, largest first into the one
   with the fewest tokens (the lowest on ties, a heap: a leaf may hold tens of thousands of
   samples over as many microbatches); leaves them in their bins if that ever runs out of
   room. */
static void dcp__spread_leaf(const dcp__tree *tree, int32_t n, int32_t available,
                             dcp__extract *x)
{
    int32_t count = 0, s, i, bins;
    for (s = tree->node_first[n]; s >= 0; s = tree->sample_next[s]) {
        x->keyed[count].key = dcp__sample_tokens(tree->batch, s, 0);
        x->keyed[count].id = s;
        count++;
    }
    if (count <= tree->bins_used[n] || available <= tree->bins_used[n]) return;
    bins = count < available ? count : available;
    qsort(x->keyed, (size_t)count, sizeof *x->keyed, dcp__keyed_descending);
    for (i = 0; i < bins; i++) {
        x->spread_used[i] = 0;
        x->spread_heap[i] = i; /* all empty: index order is heap order */
    }
    for (i = 0; i < count; i++) {
        int32_t best = x->spread_heap[0];
        if (x->spread_used[best] + x->keyed[i].key > tree->capacity) {
            for (i = 0; i < count; i++) x->spread_bin[x->keyed[i].id] = -1;
            return;
        }
        x->spread_used[best] += x->keyed[i].key;
        x->spread_bin[x->keyed[i].id] = best;
        dcp__spread_sift(x, bins);
    }
}

static dcp_status dcp__tree_extract(const dcp__tree *tree, const int32_t *order,
                                    dcp__placement *placements, int32_t *num_microbatches,
                                    dcp_error *error)
{
    const dcp__batch *batch = tree->batch;
    const dcp_allocator *a = tree->allocator;
    const int32_t multiple = batch->config->microbatch_multiple;
    int32_t nodes = 2 * tree->leaf_base, n, b, s, i, k;
    dcp__extract x;
    dcp_status status = DCP_OK;
    x.offset = (int32_t *)dcp__alloc_array(a, (size_t)nodes, sizeof(int32_t), "extract", error);
    x.bin_index = (int32_t *)dcp__alloc_array(a, (size_t)tree->bin_count + 1, sizeof(int32_t),
                                              "extract", error);
    x.spread_used = (int64_t *)dcp__alloc_array(a, (size_t)batch->count, sizeof(int64_t),
                                                "extract", error);
    x.spread_heap = (int32_t *)dcp__alloc_array(a, (size_t)batch->count, sizeof(int32_t),
                                                "extract", error);
    x.spread_bin = (int32_t *)dcp__alloc_array(a, (size_t)batch->count, sizeof(int32_t),
                                               "extract", error);
    x.keyed = (dcp__keyed *)dcp__alloc_array(a, (size_t)batch->count, sizeof(dcp__keyed),
                                             "extract", error);
    if (!x.offset || !x.bin_index || !x.spread_used || !x.spread_heap || !x.spread_bin ||
        !x.keyed) {
        status = error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    k = (tree->mx_bins[1] + multiple - 1) / multiple * multiple;
    if (k < multiple) k = multiple;
    x.offset[1] = 0;
    for (n = 2; n < nodes; n++) x.offset[n] = x.offset[n / 2] + tree->bins_used[n / 2];
    for (n = 1; n < nodes; n++) {
        int32_t next = x.offset[n];
        for (b = tree->bin_head[n]; b >= 0; b = tree->bins[b].next)
            if (tree->bins[b].samples > 0) x.bin_index[b] = next++;
    }
    for (s = 0; s < batch->count; s++) x.spread_bin[s] = -1;
    for (n = tree->leaf_base; n < nodes; n++)
        if (tree->node_first[n] >= 0)
            dcp__spread_leaf(tree, n, k - x.offset[n], &x);
    for (i = 0; i < batch->count; i++) {
        dcp__placement *p;
        s = order[i];
        n = tree->sample_node[s];
        p = &placements[s];
        p->microbatch = x.spread_bin[s] >= 0 ? x.offset[n] + x.spread_bin[s]
                                             : x.bin_index[tree->sample_bin[s]];
        p->first_rank = (int32_t)dcp__node_start(tree, n);
        p->cp = (int32_t)1 << tree->node_level[n];
        p->order = i;
        p->sample = s;
    }
    *num_microbatches = k;
done:
    dcp__extract_free(a, &x);
    return status;
}

/* ------------------------------------------------ dynamic planner: construction
   The first candidate puts every sample at its minimum CP size. Longest-work-first is within
   one sample of the target step, so large samples are the rocks it cannot balance: while the
   best is more than 1 / DCP__BALANCED_EFFICIENCY above the lower bound, which happens when a
   few samples dominate the batch, the other candidates are built too and the best is kept:
   samples whose per-rank time alone exceeds target / 2 widened (their CP size doubled while
   that shortens them), every sample at the largest minimum (one shared ring per microbatch, a
   balanced static CP), and stronger widening. The local search then moves, widens and narrows
   single samples. (The minimal candidate comes first because it is often balanced already;
   bench/RESULTS.md, "Planner tuning", has what the order changes.) */

typedef enum dcp__candidate {
    DCP__MINIMAL,
    DCP__WIDEN_HALF,
    DCP__UNIFORM,
    DCP__WIDEN_EIGHTH,
    DCP__CANDIDATE_COUNT
} dcp__candidate;

/* Sample s's level widened from j while that shortens its time and the time exceeds target
   (target 0: its fastest level from j). */
static int32_t dcp__widened_level(const dcp__batch *batch, int32_t s, int32_t j, int64_t target)
{
    while (j + 1 < batch->levels) {
        int64_t now = dcp__sample_ticks(batch, s, j) + batch->ring_ticks[j];
        int64_t wider = dcp__sample_ticks(batch, s, j + 1) + batch->ring_ticks[j + 1];
        if (now <= target || wider >= now) break;
        j++;
    }
    return j;
}

static void dcp__widen_levels(const dcp__batch *batch, int64_t target, int32_t *levels)
{
    int32_t s;
    for (s = 0; s < batch->count; s++) levels[s] = dcp__widened_level(batch, s, levels[s], target);
}

/* The candidate's level of every sample, none below `lowest`. */
static void dcp__candidate_levels(const dcp__batch *batch, dcp__candidate candidate,
                                  int32_t lowest, int32_t *levels)
{
    const int64_t target = dcp__to_ticks(batch->lower_bound, 1.0 / batch->tick_seconds);
    int32_t s, top = 0;
    for (s = 0; s < batch->count; s++) {
        levels[s] = dcp__log2_int(batch->cp_min[s]);
        if (levels[s] < lowest) levels[s] = lowest;
        if (levels[s] > top) top = levels[s];
    }
    if (candidate == DCP__UNIFORM)
        for (s = 0; s < batch->count; s++) levels[s] = top;
    else if (candidate == DCP__WIDEN_HALF)
        dcp__widen_levels(batch, target / DCP__WIDEN_HALF_DIVISOR, levels);
    else if (candidate == DCP__WIDEN_EIGHTH)
        dcp__widen_levels(batch, target / DCP__WIDEN_EIGHTH_DIVISOR, levels);
}

/* Smallest microbatch count the memory cap allows for these levels, rounded to the multiple. */
static int32_t dcp__microbatch_floor(const dcp__batch *batch, const int32_t *levels)
{
    const dcp_config *config = batch->config;
    int64_t tokens = 0, capacity = (int64_t)dcp__usable_ranks(config) * config->max_tokens_per_rank;
    int64_t floor_count;
    int32_t s, multiple = config->microbatch_multiple;
    for (s = 0; s < batch->count; s++)
        tokens += dcp__sample_tokens(batch, s, levels[s]) * ((int64_t)1 << levels[s]);
    floor_count = (tokens + capacity - 1) / capacity;
    if (floor_count < 1) floor_count = 1;
    floor_count = (floor_count + multiple - 1) / multiple * multiple;
    return floor_count > INT32_MAX / 2 ? INT32_MAX / 2 : (int32_t)floor_count;
}

static int32_t dcp__improve_budget(const dcp_config *config, int32_t count)
{
    int64_t budget;
    if (config->improve_moves != 0) return config->improve_moves < 0 ? 0 : config->improve_moves;
    budget = (int64_t)count * DCP_DEFAULT_IMPROVE_MOVES_PER_SAMPLE + DCP_DEFAULT_IMPROVE_MOVES_BASE;
    return budget > INT32_MAX ? INT32_MAX : (int32_t)budget;
}

static int dcp__balanced(const dcp__batch *batch, int64_t step_ticks)
{
    return batch->lower_bound >=
           DCP__BALANCED_EFFICIENCY * (double)step_ticks * batch->tick_seconds;
}


static void dcp__tree_swap(dcp__tree *a, dcp__tree *b)
{
    dcp__tree t = *a;
    *a = *b;
    *b = t;
}

/* One candidate: built longest work first at its levels, then improved, in trees[0] (trees[1]:
   a second tree, initialised on first use). The build starts at the memory floor's microbatch
   count. A floor the samples fill tightly builds unbalanced: the last, short samples find
   room only on loaded ranks, and when the limit grows halfway through, the samples placed
   before it were packed for the smaller one (bench/RESULTS.md, "Planner tuning"). So when the
   build at
   the floor is not within 0.1% of the bound, a second build starts at the limit the first
   ended at (one multiple more when it never grew), in the second tree. Up to
   DCP__SEARCH_BOTH_MAX_SAMPLES samples both are improved and the faster kept: the local
   search does more with the looser limit, so the ranking before it can mislead (random
   batches: the better build kept was up to 3% slower after it). Above, the second build gives
   up once it is no faster than the first, and the faster is improved. The tree's plan does
   not depend on E, so that the E = 1 plan is a candidate of the lockstep search too. */
static dcp_status dcp__dynamic_candidate(dcp__tree *trees, const int32_t *levels, int32_t *order,
                                         int32_t improve_moves, dcp_error *error)
{
    const dcp__batch *batch = trees[0].batch;
    const int32_t floor_count = dcp__microbatch_floor(batch, levels);
    const int32_t looser = floor_count + batch->config->microbatch_multiple;
    const int search_both = batch->count <= DCP__SEARCH_BOTH_MAX_SAMPLES && improve_moves > 0;
    int built = 0, second = 0; /* second: trees[1] holds a build to improve too */
    dcp_status status = dcp__order_by_ticks(batch, levels, 1, order, error);
    if (status == DCP_OK)
        status = dcp__tree_build(&trees[0], order, levels, floor_count, DCP__TICKS_INF, &built,
                                 error);
    if (status == DCP_OK && looser <= INT32_MAX / 2 && !dcp__improved(batch, trees[0].mx_time[1])) {
        const int32_t grown = trees[0].microbatch_limit;
        if (!trees[1].batch) status = dcp__tree_init(&trees[1], batch, trees[0].lowest, error);
        if (status == DCP_OK)
            status = dcp__tree_build(&trees[1], order, levels,
                                     grown > floor_count ? grown : looser,
                                     search_both ? DCP__TICKS_INF : trees[0].mx_time[1], &built,
                                     error);
        if (status == DCP_OK && built && !search_both) dcp__tree_swap(&trees[0], &trees[1]);
        second = status == DCP_OK && built && search_both;
    }
    if (status == DCP_OK) status = dcp__tree_improve(&trees[0], improve_moves, error);
    if (status == DCP_OK && second) {
        status = dcp__tree_improve(&trees[1], improve_moves, error);
        if (status == DCP_OK && trees[1].mx_time[1] < trees[0].mx_time[1])
            dcp__tree_swap(&trees[0], &trees[1]);
    }
    return status;
}

/* What the tree planner is asked for: the E = 1 plan (every level, the local search, every
   candidate while unbalanced), or the lockstep search's block-wide candidate (no level below
   log2 E; no local search, whose moves would narrow groups below E; the first two
   candidates). */
typedef struct dcp__tree_request {
    int32_t lowest;        /* no sample below this level */
    int32_t improve_moves; /* the local search's budget */
    int32_t candidates;    /* at most this many dcp__candidate, in order */
} dcp__tree_request;

/* Runs the candidates in order until the best is balanced (a candidate whose levels equal the
   best's is skipped); candidates are compared after their local search, which can change the
   ranking. Each new best is extracted into placements at once (a rebuild would cost a whole
   candidate again). */
static dcp_status dcp__dynamic_search(dcp__tree *trees, const dcp__tree_request *request,
                                      int32_t *levels, int32_t *best_levels, int32_t *order,
                                      dcp__placement *placements, int32_t *num_microbatches,
                                      dcp_error *error)
{
    const dcp__batch *batch = trees[0].batch;
    size_t bytes = (size_t)batch->count * sizeof(int32_t);
    int64_t best_time = DCP__TICKS_INF;
    int c;
    dcp_status status;
    for (c = 0; c < request->candidates; c++) {
        if (c > 0 && dcp__balanced(batch, best_time)) break;
        dcp__candidate_levels(batch, (dcp__candidate)c, request->lowest, levels);
        if (c > 0 && memcmp(levels, best_levels, bytes) == 0) continue;
        status = dcp__dynamic_candidate(trees, levels, order, request->improve_moves, error);
        if (status != DCP_OK) return status;
        if (trees[0].mx_time[1] < best_time) {
            best_time = trees[0].mx_time[1];
            memcpy(best_levels, levels, bytes);
            status = dcp__tree_extract(&trees[0], order, placements, num_microbatches, error);
            if (status != DCP_OK) return status;
        }
    }
    return DCP_OK;
}

static dcp_status dcp__plan_tree(const dcp__batch *batch, const dcp__tree_request *request,
                                 dcp__placement *placements, int32_t *num_microbatches,
                                 dcp_error *error)
{
    const dcp_allocator *a = &batch->config->allocator;
    size_t count = (size_t)batch->count;
    dcp__tree trees[2];
    dcp_status status;
    int32_t *levels, *best_levels, *order;
    memset(&trees[1], 0, sizeof trees[1]); /* initialised when a candidate needs it */
    if ((status = dcp__tree_init(&trees[0], batch, request->lowest, error)) != DCP_OK)
        return status;
    levels = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "dynamic levels", error);
    best_levels = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "dynamic levels", error);
    order = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "dynamic order", error);
    if (!levels || !best_levels || !order)
        status = error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    else
        status = dcp__dynamic_search(trees, request, levels, best_levels, order, placements,
                                     num_microbatches, error);
    dcp__tree_free(&trees[0]);
    if (trees[1].batch) dcp__tree_free(&trees[1]);
    dcp_free(a, levels);
    dcp_free(a, best_levels);
    dcp_free(a, order);
    return status;
}

/* The tree planner's E = 1 plan. */
static dcp_status dcp__plan_dynamic(const dcp__batch *batch, dcp__placement *placements,
                                    int32_t *num_microbatches, dcp_error *error)
{
    dcp__tree_request request;
    request.lowest = 0;
    request.improve_moves = dcp__improve_budget(batch->config, batch->count);
    request.candidates = DCP__CANDIDATE_COUNT;
    return dcp__plan_tree(batch, &request, placements, num_microbatches, error);
}

/* The lockstep search's block-wide candidate (1 < E <= max_cp): the tree planner with every
   group at least E ranks wide. Such a group covers whole blocks of E ranks, so every rank of
   a block finishes each microbatch at the same time and the lockstep adds no wait: the plan's
   step under E is its E = 1 step, which the tree balances (bench/RESULTS.md, "Planner
   tuning"). */
static dcp_status dcp__plan_block_wide(const dcp__batch *batch, dcp__placement *placements,
                                       int32_t *num_microbatches, dcp_error *error)
{
    dcp__tree_request request;
    request.lowest = dcp__log2_int(batch->config->sync_ranks);
    request.improve_moves = 0;
    request.candidates = DCP__WIDEN_HALF + 1;
    return dcp__plan_tree(batch, &request, placements, num_microbatches, error);
}

/* ------------------------------------------------------------------- simulator core */

/* A group's time on each of its ranks under the plan's ring charge. */
static double dcp__group_seconds(const dcp_plan *plan, const dcp_cost_model *cost,
                                 const dcp_group *g, int64_t *tokens)
{
    const double ring = dcp_cost_ring_seconds(cost, g->cp);
    double seconds = plan->config.ring_charge == DCP_RING_PER_SAMPLE
                         ? dcp__unfused(ring * (double)g->sample_count)
                         : ring;
    int32_t i;
    *tokens = 0;
    for (i = g->sample_offset; i < g->sample_offset + g->sample_count; i++) {
        int64_t length = plan->sample_lengths[plan->group_samples[i]];
        int64_t padded = dcp__padded(&plan->config, length, g->cp);
        seconds += dcp_cost_sample_seconds(cost, length, padded, g->cp);
        *tokens += padded / g->cp;
    }
    return seconds;
}

/* Lockstep of aligned blocks of `sync` ranks before a microbatch: no rank of a block starts
   it before every rank of the block has finished the previous one. */
static void dcp__schedule_lockstep(double *finish, int32_t ranks, int32_t sync)
{
    int32_t first, r;
    for (first = 0; first < ranks; first += sync) {
        int32_t end = first + sync < ranks ? first + sync : ranks;
        double ready = 0.0;
        for (r = first; r < end; r++)
            if (finish[r] > ready) ready = finish[r];
        for (r = first; r < end; r++) finish[r] = ready;
    }
}

/* Runs the sync model E = `sync`: before each microbatch every block of E ranks levels to its
   slowest rank, then each group starts when all its ranks are free (a group wider than E
   couples the blocks it spans). E = 1 is the DAG model; E = D is the sum over microbatches of
   the slowest group. Group g lasts durations[g] when durations is given, else what the cost
   model says. Fills the per-group times when the arrays are given, and the stats that follow
   from the schedule. */
static void dcp__schedule(const dcp_plan *plan, const dcp_cost_model *cost, int32_t sync,
                          const double *durations, double *finish, double *group_start,
                          double *group_end, dcp_plan_stats *stats)
{
    int32_t k, g, r, covered = 0;
    for (r = 0; r < plan->config.ranks; r++) finish[r] = 0.0;
    for (k = 0; k < plan->num_microbatches; k++) {
        double slowest = 0.0;
        if (sync > 1) dcp__schedule_lockstep(finish, plan->config.ranks, sync);
        for (g = plan->microbatch_offsets[k]; g < plan->microbatch_offsets[k + 1]; g++) {
            const dcp_group *group = &plan->groups[g];
            int64_t tokens;
            double seconds = dcp__group_seconds(plan, cost, group, &tokens), start = 0.0;
            if (durations) seconds = durations[g]; /* measured: the model gives only tokens */
            for (r = group->first_rank; r < group->first_rank + group->cp; r++)
                if (finish[r] > start) start = finish[r];
            for (r = group->first_rank; r < group->first_rank + group->cp; r++)
                finish[r] = start + seconds;
            if (group_start) group_start[g] = start;
            if (group_end) group_end[g] = start + seconds;
            if (seconds > slowest) slowest = seconds;
            if (tokens > stats->max_rank_tokens) stats->max_rank_tokens = tokens;
            stats->busy_seconds += seconds * group->cp;
            stats->samples_per_cp_level[dcp__log2_int(group->cp)] += group->sample_count;
            stats->padded_tokens += tokens * group->cp;
            covered += group->cp;
        }
        stats->barrier_seconds += slowest;
    }
    for (r = 0; r < plan->config.ranks; r++)
        if (finish[r] > stats->step_seconds) stats->step_seconds = finish[r];
    stats->idle_rank_microbatches =
        (int32_t)((int64_t)plan->config.ranks * plan->num_microbatches - covered);
}

/* Step time under the plan's own sync model and cost. */
static double dcp__plan_step_seconds(const dcp_plan *plan, double *finish)
{
    dcp_plan_stats stats;
    memset(&stats, 0, sizeof stats);
    dcp__schedule(plan, &plan->config.cost, plan->config.sync_ranks, NULL, finish, NULL, NULL,
                  &stats);
    return stats.step_seconds;
}

/* ------------------------------------------------ dynamic planner under lockstep (E > 1)
   Why it works. When blocks of E ranks run each microbatch in lockstep, a block's step is the
   sum over microbatches of its slowest group: a microbatch costs its slowest sample however
   little else it holds, so it should be filled, up to that time and the memory cap, with the
   slowest samples that still fit under it. Fill-to-the-top does exactly that: each microbatch
   (each block of E ranks when E < D) opens with the slowest sample left, which fixes its time
   T; its other ranks are then filled top-down over the buddy tree, widest free block first,
   with the slowest samples of that block's CP level that finish within T and fit the memory
   cap. The microbatch times then form a staircase down the sorted samples, the shape of the
   barrier lower bound. Samples wider than E open their own group spanning blocks when they
   are the slowest left at their width.

   Speed. The samples of each CP level sit in an array sorted slowest first; along it both
   ticks and tokens fall (both grow with the length), so "the slowest sample with at most t
   ticks and r tokens" is one binary search and a find over removed entries (union-find with
   path halving). A microbatch visits O(D) nodes: O(N log N + K D log N) in all, K the
   microbatch count. Which samples to widen is decided by the step time it buys: a few
   widening thresholds are each planned and simulated under E, and the fastest is kept. */

typedef struct dcp__fill_key {
    int64_t ticks;
    int64_t tokens;
    int32_t level;
    int32_t id;
    int32_t tie; /* order among equal ticks and tokens */
} dcp__fill_key;

/* Level ascending, then slowest first (ticks, then tokens, descending), then tie: a total
   order, so the sort's result is unique (tests/test_planner.c checks it against qsort). */
static int dcp__fill_key_before(const dcp__fill_key *x, const dcp__fill_key *y)
{
    if (x->level != y->level) return x->level < y->level;
    if (x->ticks != y->ticks) return x->ticks > y->ticks;
    if (x->tokens != y->tokens) return x->tokens > y->tokens;
    return x->tie < y->tie;
}
DCP__DEFINE_SORT(dcp__fill_key_sort, dcp__fill_key, dcp__fill_key_before)

/* A slack_numerator that fills a microbatch up to the memory cap alone (no time limit). */
#define DCP__FILL_SLACK_UNLIMITED (-1)

typedef struct dcp__fill {
    const dcp__batch *batch;
    int32_t ranks;
    int32_t top;          /* widest CP level */
    int32_t root_level;   /* log2 of the buddy tree's leaf count */
    int32_t region_level; /* blocks that open with their own slowest sample: log2 E (root: D) */
    int64_t slack_numerator, slack_denominator; /* fill up to T (1 + slack), T the slowest */
    int64_t capacity;     /* M */
    int32_t first[DCP_CP_LEVELS + 1]; /* level j's samples: sorted[first[j] .. first[j + 1]) */
    int32_t widest;       /* the widest level that holds samples */
    dcp__fill_key *sorted;
    dcp__fill_key *scratch; /* [count]: the sort's merge buffer */
    int32_t *sorted_levels; /* the levels `sorted` holds, to skip re-sorting */
    int sorted_valid;
    int32_t *next;        /* [count + levels]: union-find over placed entries, per level */
    dcp__placement *placements;
    int32_t microbatch;
    int32_t order;
    int32_t remaining;
    /* the samples by ticks at their minimum CP level, slowest first, ties by id (as
       dcp__order_by_ticks gives them), when the caller has them: the fills at the minimum
       levels then bucket it instead of sorting (NULL: not known) */
    const int32_t *minimal_order;
} dcp__fill;

/* The first entry at or after i (an index into sorted) that is not yet placed; each level's
   range has one sentinel slot past its end, next[] being offset by the level. */
static int32_t dcp__fill_find(dcp__fill *f, int32_t level, int32_t i)
{
    int32_t *next = f->next + level; /* slot of entry i: i + level */
    while (next[i] != i) {
        next[i] = next[next[i]];
        i = next[i];
    }
    return i;
}

/* The slowest unplaced sample of the level with at most `ticks` ticks and `tokens` tokens;
   -1 when none. Both keys fall along the level's range, so each bound holds from some entry
   on, and both from the later of the two: one binary search. */
static int32_t dcp__fill_take(dcp__fill *f, int32_t level, int64_t ticks, int64_t tokens)
{
    int32_t lo = f->first[level], hi = f->first[level + 1], a, b, i;
    if (ticks < 0 || tokens < 0 || lo == hi) return -1;
    lo = dcp__fill_find(f, level, lo); /* every entry before it is placed */
    if (lo == hi) return -1;
    if (f->sorted[lo].ticks <= ticks && f->sorted[lo].tokens <= tokens) return lo;
    a = lo;
    b = hi;
    while (a < b) { /* first entry within both bounds */
        int32_t mid = a + (b - a) / 2;
        if (f->sorted[mid].ticks <= ticks && f->sorted[mid].tokens <= tokens) b = mid;
        else a = mid + 1;
    }
    i = dcp__fill_find(f, level, a);
    return i < hi ? i : -1;
}

/* Slowest unplaced sample over levels 0..up_to with its ring (per-rank seconds of a group it
   opens); -1 when none. */
static int32_t dcp__fill_slowest(dcp__fill *f, int32_t up_to, int32_t *level, int64_t *time)
{
    int32_t j, best = -1;
    for (j = 0; j <= up_to && j <= f->top; j++) {
        int32_t i = dcp__fill_find(f, j, f->first[j]);
        int64_t t;
        if (i >= f->first[j + 1]) continue;
        t = f->sorted[i].ticks + f->batch->ring_ticks[j];
        if (best < 0 || t > *time) {
            best = i;
            *level = j;
            *time = t;
        }
    }
    return best;
}

static void dcp__fill_place(dcp__fill *f, int32_t entry, int32_t level, int32_t first_rank)
{
    dcp__placement *p = &f->placements[f->sorted[entry].id];
    f->next[entry + level] = entry + 1; /* removed: finds skip to the next entry */
    p->microbatch = f->microbatch;
    p->first_rank = first_rank;
    p->cp = (int32_t)1 << level;
    p->order = f->order++;
    p->sample = f->sorted[entry].id;
    f->remaining--;
}

/* Opens a group with `entry` and adds the slowest samples of its level that keep it within
   `limit` ticks and the memory cap. */
static void dcp__fill_group(dcp__fill *f, int32_t entry, int32_t level, int32_t first_rank,
                            int64_t limit)
{
    int64_t load = f->batch->ring_ticks[level], used = 0;
    while (entry >= 0) {
        load += f->sorted[entry].ticks;
        used += f->sorted[entry].tokens;
        dcp__fill_place(f, entry, level, first_rank);
        entry = dcp__fill_take(f, level, limit - load, f->capacity - used);
    }
}

/* Fills the node's free blocks under time `limit`, skipping the block (pin_start, pin_level)
   that is already a group. */
static void dcp__fill_under(dcp__fill *f, int32_t start, int32_t level, int64_t limit,
                            int32_t pin_start, int32_t pin_level)
{
    int32_t half;
    if (start >= f->ranks || (start == pin_start && level == pin_level)) return;
    if (!(pin_level < level && pin_start >> level == start >> level) && level <= f->widest &&
        start + ((int64_t)1 << level) <= f->ranks) {
        int32_t entry = dcp__fill_take(f, level, limit - f->batch->ring_ticks[level],
                                       f->capacity);
        if (entry >= 0) {
            dcp__fill_group(f, entry, level, start, limit);
            return;
        }
    }
    if (level == 0) return;
    half = (int32_t)1 << (level - 1);
    dcp__fill_under(f, start, level - 1, limit, pin_start, pin_level);
    dcp__fill_under(f, start + half, level - 1, limit, pin_start, pin_level);
}

/* One microbatch of the node: above the region level, a sample wider than E opens a group
   where it is the slowest left at its width; at the region level the slowest sample left
   opens the block's first group (leftmost) and fixes the time the rest is filled under. */
/* The time a microbatch whose slowest group takes `time` is filled up to: time (1 + slack). */
static int64_t dcp__fill_limit(const dcp__fill *f, int64_t time)
{
    if (f->slack_numerator == DCP__FILL_SLACK_UNLIMITED) return INT64_MAX;
    return time + time / f->slack_denominator * f->slack_numerator;
}

static void dcp__fill_node(dcp__fill *f, int32_t start, int32_t level)
{
    int32_t entry, at = 0, half;
    int64_t time = 0;
    if (start >= f->ranks) return;
    if (level <= f->region_level) {
        entry = dcp__fill_slowest(f, level, &at, &time);
        if (entry < 0) return;
        time = dcp__fill_limit(f, time);
        dcp__fill_group(f, entry, at, start, time);
        dcp__fill_under(f, start, level, time, start, at);
        return;
    }
    if (level <= f->top && start + ((int64_t)1 << level) <= f->ranks) {
        entry = dcp__fill_slowest(f, level, &at, &time);
        if (entry < 0) return;
        if (at == level) { /* a group spanning blocks: the blocks' ranks wait for it alike */
            dcp__fill_group(f, entry, at, start, dcp__fill_limit(f, time));
            return;
        }
    }
    half = (int32_t)1 << (level - 1);
    dcp__fill_node(f, start, level - 1);
    dcp__fill_node(f, start + half, level - 1);
}

static void dcp__fill_free(dcp__fill *f)
{
    void *list[] = {f->sorted, f->scratch, f->sorted_levels, f->next};
    dcp__free_list(&f->batch->config->allocator, list, DCP__COUNT(list));
}

static dcp_status dcp__fill_init(dcp__fill *f, const dcp__batch *batch, dcp_error *error)
{
    const dcp_allocator *a = &batch->config->allocator;
    size_t count = (size_t)batch->count;
    memset(f, 0, sizeof *f);
    f->batch = batch;
    f->ranks = batch->config->ranks;
    f->top = batch->levels - 1;
    f->root_level = dcp__log2_int(dcp__leaf_base(f->ranks));
    f->capacity = batch->config->max_tokens_per_rank;
    f->sorted = (dcp__fill_key *)dcp__alloc_array(a, count, sizeof *f->sorted, "fill", error);
    f->scratch = (dcp__fill_key *)dcp__alloc_array(a, count, sizeof *f->scratch, "fill", error);
    f->next = (int32_t *)dcp__alloc_array(a, count + DCP_CP_LEVELS + 1, sizeof(int32_t), "fill",
                                          error);
    f->sorted_levels = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "fill", error);
    if (!f->sorted || !f->scratch || !f->next || !f->sorted_levels) {
        dcp__fill_free(f);
        return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    }
    return DCP_OK;
}

/* Marks every sample unplaced. */
static void dcp__fill_reset(dcp__fill *f, dcp__placement *placements)
{
    int32_t j, i;
    for (j = 0; j <= f->top; j++) /* level j's slots: entries + j, its sentinel included */
        for (i = f->first[j]; i <= f->first[j + 1]; i++) f->next[i + j] = i;
    f->placements = placements;
    f->microbatch = 0;
    f->order = 0;
    f->remaining = f->batch->count;
}

static void dcp__fill_key_set(const dcp__fill *f, dcp__fill_key *key, int32_t s, int32_t level,
                              int32_t tie)
{
    key->level = level;
    key->ticks = dcp__sample_ticks(f->batch, s, level);
    key->tokens = dcp__sample_tokens(f->batch, s, level);
    key->id = s;
    key->tie = tie;
}

/* Re-sorts f->sorted (sorted at f->sorted_levels, ties by id) for new levels: the entries
   whose level stays keep their order, the others are sorted apart and merged in. The order
   is total, so the result is the full sort's; a fill candidate that widens a few samples
   costs a sort of those few. */
static void dcp__fill_resort(dcp__fill *f, const int32_t *levels)
{
    const int32_t count = f->batch->count;
    int32_t i, kept = 0, moved = count, a, b, k;
    for (i = 0; i < count; i++) { /* kept from the front of scratch, moved from its back */
        int32_t s = f->sorted[i].id;
        if (levels[s] == f->sorted_levels[s])
            f->scratch[kept++] = f->sorted[i];
        else
            dcp__fill_key_set(f, &f->scratch[--moved], s, levels[s], s);
    }
    dcp__fill_key_sort(f->scratch + moved, f->sorted, count - moved);
    for (k = 0, a = 0, b = moved; a < kept && b < count; k++)
        f->sorted[k] = dcp__fill_key_before(&f->scratch[b], &f->scratch[a]) ? f->scratch[b++]
                                                                             : f->scratch[a++];
    for (; a < kept; k++) f->sorted[k] = f->scratch[a++];
    for (; b < count; k++) f->sorted[k] = f->scratch[b++];
}

/* f->sorted from `order`, the samples by ticks at `levels`, slowest first, ties by id:
   bucketed by level in that order, then each run of equal ticks sorted by the rest of the
   key (tokens, tie). The key is a total order, so this is the full sort's result, in O(N)
   when ticks rarely tie. position as in dcp__fill_sort. */
static void dcp__fill_sort_ordered(dcp__fill *f, const int32_t *levels, const int32_t *order,
                                   const int32_t *position)
{
    const int32_t count = f->batch->count;
    int32_t at[DCP_CP_LEVELS + 1], i, j, run;
    for (j = 0; j <= f->top + 1; j++) at[j] = 0;
    for (i = 0; i < count; i++) at[levels[i] + 1]++;
    for (j = 0; j <= f->top; j++) at[j + 1] += at[j];
    for (i = 0; i < count; i++) {
        int32_t s = order[i];
        dcp__fill_key_set(f, &f->sorted[at[levels[s]]++], s, levels[s], position ? position[s] : s);
    }
    for (i = 0; i < count; i = run) {
        const dcp__fill_key *first = &f->sorted[i];
        for (run = i + 1; run < count && f->sorted[run].level == first->level &&
                          f->sorted[run].ticks == first->ticks;
             run++) {}
        if (run - i > 1) dcp__fill_key_sort(f->sorted + i, f->scratch, run - i);
    }
}

/* Sorts the samples at `levels` into the per-level arrays, all unplaced. position (may be
   NULL) breaks ties of ticks and tokens instead of the id. order (may be NULL): the samples
   by ticks at `levels` as dcp__fill_sort_ordered takes them. */
static void dcp__fill_sort(dcp__fill *f, const int32_t *levels, const int32_t *order,
                           const int32_t *position, dcp__placement *placements)
{
    const dcp__batch *batch = f->batch;
    int32_t s, j, i;
    if (f->sorted_valid && memcmp(f->sorted_levels, levels, (size_t)batch->count * sizeof *levels) == 0 &&
        !position) {
        dcp__fill_reset(f, placements);
        return;
    }
    if (f->sorted_valid && !position) {
        dcp__fill_resort(f, levels);
    } else if (order) {
        dcp__fill_sort_ordered(f, levels, order, position);
    } else {
        for (s = 0; s < batch->count; s++)
            dcp__fill_key_set(f, &f->sorted[s], s, levels[s], position ? position[s] : s);
        dcp__fill_key_sort(f->sorted, f->scratch, batch->count);
    }
    memcpy(f->sorted_levels, levels, (size_t)batch->count * sizeof *levels);
    f->sorted_valid = !position;
    for (j = 0, i = 0; j <= f->top + 1; j++) {
        while (i < batch->count && f->sorted[i].level < j) i++;
        f->first[j] = i;
    }
    f->first[f->top + 1] = batch->count;
    for (f->widest = f->top; f->widest > 0 && f->first[f->widest] == batch->count; f->widest--) {}
    dcp__fill_reset(f, placements);
}

/* Plans every sample at `levels` with blocks of 2^region_level ranks opening microbatches;
   order as in dcp__fill_sort. */
static void dcp__fill_run(dcp__fill *f, const int32_t *levels, const int32_t *order,
                          int32_t region_level, dcp__placement *placements,
                          int32_t *num_microbatches)
{
    dcp__fill_sort(f, levels, order, NULL, placements);
    f->region_level = region_level;
    if (f->slack_denominator < 1) f->slack_denominator = 1;
    while (f->remaining > 0) { /* each microbatch places at least its slowest sample */
        dcp__fill_node(f, 0, f->root_level);
        f->microbatch++;
    }
    *num_microbatches = f->microbatch;
}

/* -- src/planner_lockstep.h -- */
/* ---------------------------------------------------------------- baseline: greedy
   Megatron's manner: build one microbatch at a time. Samples are taken longest-work first at
   their minimum CP size; each goes to a new group on a free aligned block when one exists
   (load 0 is the least load), else to the least-loaded open group of its size with room.
   A microbatch closes when no remaining sample fits. Free blocks come from a buddy tree.
   Speed: a sample that fails leaves the microbatch unchanged, so the next sample placed is,
   over the levels, the first one after the cursor that fits: at a level with a free block
   any sample, else one with at most the level's largest room in tokens, found in the
   fill-to-the-top arrays (tokens fall along them) instead of rescanning every sample left. */

/* Per level: the open groups and their largest room (-1: none open). Once a level has no
   free block left its groups are fixed for the microbatch (blocks are only taken), and a
   tournament tree over them in opening order (per node the least load and the largest room
   below) finds the least-loaded group with room in O(log D) instead of a scan of the level. */
typedef struct dcp__greedy_state {
    dcp__open_group *groups;
    int32_t open;
    int64_t max_room[DCP_CP_LEVELS];
    int32_t *order;    /* [count]: the samples longest-first */
    int32_t *position; /* [count]: place of a sample in the longest-first order */
    int32_t *levels;   /* [count]: a sample's minimum CP level */
    /* each level's open groups in opening order: first, last, next [ranks] (-1 ends) */
    int32_t level_first[DCP_CP_LEVELS], level_last[DCP_CP_LEVELS], *level_next;
    /* the level trees: level j's nodes 1 .. 2 leaves - 1 at tree_base[j] + node, leaves in
       opening order (tree_leaves[j] 0: not built this microbatch); nodes_used of
       DCP__GREEDY_TREE_NODES(ranks) */
    int64_t *tree_load, *tree_room;
    int32_t *leaf_group;  /* [nodes]: the group of a leaf, -1 for padding */
    int32_t *group_leaf;  /* [ranks]: a group's leaf position in its level's tree */
    int32_t tree_base[DCP_CP_LEVELS], tree_leaves[DCP_CP_LEVELS], nodes_used;
} dcp__greedy_state;

/* Every level's tree has fewer than 2 x its groups' leaves, its groups less than 2 x groups
   nodes; at most `ranks` groups in all, plus one padded leaf pair per level. */
#define DCP__GREEDY_TREE_NODES(ranks) (4 * (size_t)(ranks) + 2 * DCP_CP_LEVELS)

/* Builds level j's tree over its open groups (called when its last free block is gone). */
static void dcp__greedy_tree_build(dcp__greedy_state *g, int32_t level, int64_t capacity)
{
    int32_t leaves = 1, count = 0, k, n, base = g->nodes_used;
    int64_t *load = g->tree_load + base, *room = g->tree_room + base;
    for (k = g->level_first[level]; k >= 0; k = g->level_next[k]) count++;
    while (leaves < count) leaves *= 2;
    g->tree_base[level] = base;
    g->tree_leaves[level] = leaves;
    g->nodes_used += 2 * leaves;
    for (n = leaves, k = g->level_first[level]; n < 2 * leaves; n++) {
        g->leaf_group[base + n] = k;
        load[n] = k >= 0 ? g->groups[k].load : DCP__TICKS_INF;
        room[n] = k >= 0 ? capacity - g->groups[k].used : -1;
        if (k >= 0) {
            g->group_leaf[k] = n;
            k = g->level_next[k];
        }
    }
    for (n = leaves - 1; n >= 1; n--) {
        load[n] = load[2 * n] < load[2 * n + 1] ? load[2 * n] : load[2 * n + 1];
        room[n] = room[2 * n] > room[2 * n + 1] ? room[2 * n] : room[2 * n + 1];
    }
}

/* The least-loaded leaf (lowest position on ties) below node n with room >= tokens, if it
   beats (*best_load, *best): subtrees without room, or whose least load cannot beat the best
   found, are skipped; the less-loaded child is searched first. The node's first leaf is
   `start` and it spans `width` leaves (the root: leaves and leaves). */
static void dcp__greedy_tree_search(const dcp__greedy_state *g, int32_t base, int32_t n,
                                    int32_t start, int32_t width, int64_t tokens, int32_t *best,
                                    int64_t *best_load)
{
    const int64_t *load = g->tree_load + base, *room = g->tree_room + base;
    int32_t first, half = width / 2;
    if (room[n] < tokens || load[n] > *best_load) return;
    if (load[n] == *best_load && start >= *best) return;
    if (width == 1) {
        *best = n;
        *best_load = load[n];
        return;
    }
    first = load[2 * n + 1] < load[2 * n] ? 2 * n + 1 : 2 * n;
    dcp__greedy_tree_search(g, base, first, start + (first & 1) * half, half, tokens, best,
                            best_load);
    dcp__greedy_tree_search(g, base, first ^ 1, start + ((first ^ 1) & 1) * half, half, tokens,
                            best, best_load);
}

/* Group k's load or room changed: its leaf and the path above it follow. */
static void dcp__greedy_tree_update(dcp__greedy_state *g, int32_t level, int32_t k,
                                    int64_t capacity)
{
    int32_t base = g->tree_base[level], n = g->group_leaf[k];
    int64_t *load = g->tree_load + base, *room = g->tree_room + base;
    load[n] = g->groups[k].load;
    room[n] = capacity - g->groups[k].used;
    for (n /= 2; n >= 1; n /= 2) { /* up while the least load or the largest room changes */
        int64_t least = load[2 * n] < load[2 * n + 1] ? load[2 * n] : load[2 * n + 1];
        int64_t most = room[2 * n] > room[2 * n + 1] ? room[2 * n] : room[2 * n + 1];
        if (load[n] == least && room[n] == most) break;
        load[n] = least;
        room[n] = most;
    }
}

/* The least-loaded open group of the level with room for `tokens` (lowest index on ties: the
   leaves are in opening order), building the level's tree on first use; -1 when none. */
static int32_t dcp__greedy_least_loaded(dcp__greedy_state *g, int32_t level, int64_t tokens,
                                        int64_t capacity)
{
    int32_t best = INT32_MAX;
    int64_t best_load = DCP__TICKS_INF;
    if (g->tree_leaves[level] == 0) dcp__greedy_tree_build(g, level, capacity);
    dcp__greedy_tree_search(g, g->tree_base[level], 1, g->tree_leaves[level],
                            g->tree_leaves[level], tokens, &best, &best_load);
    return best == INT32_MAX ? -1 : g->leaf_group[g->tree_base[level] + best];
}

/* The first unplaced sample of the level after order position `after` that fits now; -1 none. */
static int32_t dcp__greedy_next(dcp__fill *f, const dcp__greedy_state *g, const dcp__buddy *buddy,
                                int32_t level, int32_t after)
{
    int32_t lo = f->first[level], hi = f->first[level + 1], a, b, i;
    if (lo == hi || (lo = dcp__fill_find(f, level, lo)) == hi) return -1;
    if (g->position[f->sorted[lo].id] > after &&
        (buddy->free_level[1] >= level || f->sorted[lo].tokens <= g->max_room[level]))
        return lo; /* the first unplaced entry: every one before it is placed */
    a = lo;
    b = hi;
    while (a < b) { /* first entry placed after the cursor in the order */
        int32_t mid = a + (b - a) / 2;
        if (g->position[f->sorted[mid].id] > after) b = mid; else a = mid + 1;
    }
    i = a;
    if (buddy->free_level[1] < level) {
        int64_t room = g->max_room[level];
        if (room < 0) return -1;
        a = lo;
        b = hi;
        while (a < b) {
            int32_t mid = a + (b - a) / 2;
            if (f->sorted[mid].tokens <= room) b = mid; else a = mid + 1;
        }
        if (a > i) i = a;
    }
    i = dcp__fill_find(f, level, i);
    return i < hi ? i : -1;
}

/* Places entry i (level j) in a new group on a free block, else the least-loaded open group
   of its level with room; refreshes the level's largest room. */
static void dcp__greedy_place(dcp__fill *f, dcp__greedy_state *g, dcp__buddy *buddy, int32_t i,
                              int32_t level)
{
    const dcp__batch *batch = f->batch;
    int64_t tokens = f->sorted[i].tokens, capacity = f->capacity;
    int32_t first = dcp__buddy_take(buddy, level), best;
    if (first >= 0) {
        g->groups[g->open].first_rank = first;
        g->groups[g->open].level = level;
        g->groups[g->open].load = batch->ring_ticks[level];
        g->groups[g->open].used = 0;
        g->level_next[g->open] = -1;
        if (g->level_last[level] < 0) g->level_first[level] = g->open;
        else g->level_next[g->level_last[level]] = g->open;
        g->level_last[level] = g->open;
        best = g->open++;
    } else /* the caller saw the level's largest room fit: a group exists */
        best = dcp__greedy_least_loaded(g, level, tokens, capacity);
    g->groups[best].load += f->sorted[i].ticks;
    g->groups[best].used += tokens;
    dcp__fill_place(f, i, level, g->groups[best].first_rank);
    if (first >= 0) { /* only a new room joins the level */
        if (capacity - tokens > g->max_room[level]) g->max_room[level] = capacity - tokens;
    } else {
        dcp__greedy_tree_update(g, level, best, capacity);
        g->max_room[level] = g->tree_room[g->tree_base[level] + 1];
    }
}

static void dcp__greedy_free(const dcp_allocator *a, dcp__greedy_state *g, dcp__buddy *buddy)
{
    void *list[] = {g->levels, g->order, g->position, g->groups, g->level_next, g->group_leaf,
                    g->tree_load, g->tree_room, g->leaf_group, buddy->node_level,
                    buddy->free_level};
    dcp__free_list(a, list, DCP__COUNT(list));
}

static dcp_status dcp__greedy_alloc(dcp__greedy_state *g, dcp__buddy *buddy,
                                    const dcp__batch *batch, dcp_error *error)
{
    const dcp_config *config = batch->config;
    const dcp_allocator *a = &config->allocator;
    const size_t count = (size_t)batch->count, ranks = (size_t)config->ranks;
    memset(g, 0, sizeof *g);
    g->levels = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "greedy levels", error);
    g->order = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "greedy order", error);
    g->position = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "greedy order", error);
    g->groups = (dcp__open_group *)dcp__alloc_array(a, ranks, sizeof *g->groups, "greedy groups",
                                                    error);
    g->level_next = (int32_t *)dcp__alloc_array(a, ranks, sizeof(int32_t), "greedy groups", error);
    g->group_leaf = (int32_t *)dcp__alloc_array(a, ranks, sizeof(int32_t), "greedy groups", error);
    g->tree_load = (int64_t *)dcp__alloc_array(a, DCP__GREEDY_TREE_NODES(config->ranks),
                                               sizeof(int64_t), "greedy trees", error);
    g->tree_room = (int64_t *)dcp__alloc_array(a, DCP__GREEDY_TREE_NODES(config->ranks),
                                               sizeof(int64_t), "greedy trees", error);
    g->leaf_group = (int32_t *)dcp__alloc_array(a, DCP__GREEDY_TREE_NODES(config->ranks),
                                                sizeof(int32_t), "greedy trees", error);
    buddy->ranks = config->ranks;
    buddy->leaf_base = dcp__leaf_base(config->ranks);
    buddy->node_level = dcp__node_levels(a, buddy->leaf_base, error);
    buddy->free_level = (int8_t *)dcp__alloc_array(a, 2 * (size_t)buddy->leaf_base,
                                                   sizeof(int8_t), "greedy buddy", error);
    if (!g->levels || !g->order || !g->position || !g->groups || !g->level_next ||
        !g->group_leaf || !g->tree_load || !g->tree_room || !g->leaf_group ||
        !buddy->node_level || !buddy->free_level)
        return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    return DCP_OK;
}

/* One microbatch: every block free and no group open, then, over the levels, the next sample
   in the longest-first order that fits, until none does. */
static void dcp__greedy_microbatch(dcp__fill *fill, dcp__greedy_state *g, dcp__buddy *buddy)
{
    int32_t cursor = -1, j;
    dcp__buddy_reset(buddy);
    g->open = 0;
    g->nodes_used = 0;
    for (j = 0; j < DCP_CP_LEVELS; j++) {
        g->max_room[j] = -1;
        g->level_first[j] = g->level_last[j] = -1;
        g->tree_leaves[j] = 0;
    }
    for (;;) {
        int32_t best = -1, best_level = 0;
        for (j = 0; j <= fill->widest; j++) { /* levels above hold no sample */
            int32_t i = dcp__greedy_next(fill, g, buddy, j, cursor);
            if (i >= 0 && (best < 0 || g->position[fill->sorted[i].id] <
                                           g->position[fill->sorted[best].id])) {
                best = i;
                best_level = j;
            }
        }
        if (best < 0) break;
        cursor = g->position[fill->sorted[best].id];
        dcp__greedy_place(fill, g, buddy, best, best_level);
    }
    fill->microbatch++;
}

/* The greedy baseline's plan. */
static dcp_status dcp__plan_greedy(const dcp__batch *batch, dcp__placement *placements,
                                   int32_t *num_microbatches, dcp_error *error)
{
    dcp__buddy buddy;
    dcp__fill fill;
    dcp__greedy_state g;
    dcp_status status;
    int32_t s;
    if ((status = dcp__fill_init(&fill, batch, error)) != DCP_OK) return status;
    if ((status = dcp__greedy_alloc(&g, &buddy, batch, error)) != DCP_OK) goto done;
    if ((status = dcp__order_by_ticks(batch, NULL, 0, g.order, error)) != DCP_OK) goto done;
    for (s = 0; s < batch->count; s++) {
        g.position[g.order[s]] = s;
        g.levels[s] = dcp__log2_int(batch->cp_min[s]);
    }
    /* the fill's key breaks ties of ticks by tokens before the position */
    dcp__fill_sort(&fill, g.levels, g.order, g.position, placements);
    while (fill.remaining > 0) dcp__greedy_microbatch(&fill, &g, &buddy);
    *num_microbatches = fill.microbatch;
done:
    dcp__fill_free(&fill);
    dcp__greedy_free(&batch->config->allocator, &g, &buddy);
    return status;
}

/* The fill-to-the-top candidates, most often best first: a widening threshold in units of
   the bound's mean microbatch time (0: every sample at its minimum CP size) and a slack, the
   fraction of T the rest of a microbatch may fill beyond its slowest sample (fewer, fuller
   microbatches when the memory cap, not time, limits them). Planned and simulated in turn;
   the fastest under E is kept. */
typedef struct dcp__fill_variant {
    int32_t widen_numerator, widen_denominator;
    int32_t slack_numerator, slack_denominator;
} dcp__fill_variant;


static const dcp__fill_variant dcp__fill_variants[] = {
    {0, 1, 0, 1}, {1, 2, 1, 1}, {0, 1, 1, 2}, {1, 1, 1, 4}, {1, 2, 0, 1}, {0, 1, 1, 1},
    {1, 1, 1, 2}, {2, 1, 1, 4}, {1, 1, 0, 1}, {0, 1, 1, 4}, {1, 2, 1, 4}, {2, 1, 1, 2},
    {1, 1, 1, 1}, {1, 2, 1, 2}, {2, 1, 0, 1}, {2, 1, 1, 1}};
#define DCP__FILL_CANDIDATES ((int32_t)(sizeof dcp__fill_variants / sizeof dcp__fill_variants[0]))
/* Candidates tried: DCP__FILL_CANDIDATE_SAMPLES / samples, at least 2, at most all (see the
   tuning block). */

static int32_t dcp__fill_candidate_count(int32_t samples)
{
    int32_t count = DCP__FILL_CANDIDATE_SAMPLES / samples;
    return count < 2 ? 2 : (count > DCP__FILL_CANDIDATES ? DCP__FILL_CANDIDATES : count);
}

/* Step of placements under the config's E, in ticks: the simulator's model on integer
   costs, without building the plan (samples bucketed by microbatch, groups keyed by their
   first rank). Scratch: order [count], offsets [microbatches + 1], four arrays of D. */
typedef struct dcp__step_scratch {
    int32_t *order, *offsets, *stamp, *cp;
    int64_t *finish, *load;
} dcp__step_scratch;

/* Buckets the samples by microbatch: x->order[x->offsets[k] .. x->offsets[k + 1]) are the
   samples of microbatch k, in id order. */
static void dcp__step_bucket(const dcp__batch *batch, const dcp__placement *placements,
                             int32_t microbatches, dcp__step_scratch *x)
{
    int32_t i, k;
    for (k = 0; k <= microbatches; k++) x->offsets[k] = 0;
    for (i = 0; i < batch->count; i++) x->offsets[placements[i].microbatch + 1]++;
    for (k = 0; k < microbatches; k++) x->offsets[k + 1] += x->offsets[k];
    for (i = 0; i < batch->count; i++) x->order[x->offsets[placements[i].microbatch]++] = i;
    for (k = microbatches; k > 0; k--) x->offsets[k] = x->offsets[k - 1];
    x->offsets[0] = 0;
}

/* Adds microbatch k's samples to their groups' loads (x->load at the first rank; x->stamp
   marks the groups of k, x->cp their size). */
static void dcp__step_group_loads(const dcp__batch *batch, const dcp__placement *placements,
                                  int32_t k, dcp__step_scratch *x)
{
    int32_t i;
    for (i = x->offsets[k]; i < x->offsets[k + 1]; i++) {
        const dcp__placement *p = &placements[x->order[i]];
        int32_t level = dcp__log2_int(p->cp);
        if (x->stamp[p->first_rank] != k) {
            x->stamp[p->first_rank] = k;
            x->cp[p->first_rank] = p->cp;
            x->load[p->first_rank] = batch->ring_ticks[level];
        }
        x->load[p->first_rank] += dcp__sample_ticks(batch, p->sample, level);
    }
}

/* Under E = D every microbatch starts once the previous one has ended on every rank, so the
   step is the sum over microbatches of their slowest group: the general schedule's result
   without its passes over the ranks (x->finish is not filled). */
static int64_t dcp__barrier_step_ticks(const dcp__batch *batch, const dcp__placement *placements,
                                       int32_t microbatches, dcp__step_scratch *x)
{
    int32_t i, k, r;
    int64_t step = 0;
    for (r = 0; r < batch->config->ranks; r++) x->stamp[r] = -1;
    for (k = 0; k < microbatches; k++) {
        int64_t slowest = 0;
        dcp__step_group_loads(batch, placements, k, x);
        for (i = x->offsets[k]; i < x->offsets[k + 1]; i++) {
            int64_t load = x->load[placements[x->order[i]].first_rank];
            slowest = load > slowest ? load : slowest;
        }
        step += slowest;
    }
    return step;
}

/* The step of placements under the config's E, in ticks; x->finish receives each rank's
   finish (not under E = D). */
static int64_t dcp__placement_step_ticks(const dcp__batch *batch, const dcp__placement *placements,
                                         int32_t microbatches, dcp__step_scratch *x)
{
    const int32_t ranks = batch->config->ranks, sync = batch->config->sync_ranks;
    int32_t k, r, first;
    int64_t step = 0;
    dcp__step_bucket(batch, placements, microbatches, x);
    if (sync >= ranks) return dcp__barrier_step_ticks(batch, placements, microbatches, x);
    for (r = 0; r < ranks; r++) {
        x->finish[r] = 0;
        x->stamp[r] = -1;
    }
    for (k = 0; k < microbatches; k++) {
        dcp__step_group_loads(batch, placements, k, x);
        for (first = 0; sync > 1 && first < ranks; first += sync) { /* lockstep */
            int32_t end = first + sync < ranks ? first + sync : ranks;
            int64_t ready = 0;
            for (r = first; r < end; r++) ready = x->finish[r] > ready ? x->finish[r] : ready;
            for (r = first; r < end; r++) x->finish[r] = ready;
        }
        for (first = 0; first < ranks; first++) {
            int64_t start = 0;
            if (x->stamp[first] != k) continue;
            for (r = first; r < first + x->cp[first]; r++)
                start = x->finish[r] > start ? x->finish[r] : start;
            for (r = first; r < first + x->cp[first]; r++) x->finish[r] = start + x->load[first];
        }
    }
    for (r = 0; r < ranks; r++) step = x->finish[r] > step ? x->finish[r] : step;
    return step;
}

static int dcp__sync_balanced(const dcp__batch *batch, int64_t step_ticks)
{
    return batch->sync_bound >=
           DCP__BALANCED_EFFICIENCY * (double)step_ticks * batch->tick_seconds;
}

/* A step at the lower bound (to the ticks' rounding) is optimal: nothing can improve it. */
static int dcp__sync_bound_met(const dcp__batch *batch, int64_t step_ticks)
{
    return batch->sync_bound >=
           DCP__BOUND_MET_EFFICIENCY * (double)step_ticks * batch->tick_seconds;
}

/* One fill-to-the-top candidate's placements. The sort is kept while the levels repeat. */
static void dcp__fill_candidate(dcp__fill *f, int32_t variant, int32_t region_level,
                                int32_t *levels, dcp__placement *placements,
                                int32_t *microbatches)
{
    const dcp__batch *batch = f->batch;
    const dcp__fill_variant *v = &dcp__fill_variants[variant];
    int32_t s;
    for (s = 0; s < batch->count; s++) levels[s] = dcp__log2_int(batch->cp_min[s]);
    if (v->widen_numerator > 0) {
        int64_t bound = dcp__to_ticks(batch->sync_bound, 1.0 / batch->tick_seconds);
        int64_t mean = bound / dcp__microbatch_floor(batch, levels);
        dcp__widen_levels(batch, mean / v->widen_denominator * v->widen_numerator, levels);
    }
    f->slack_numerator = v->slack_numerator;
    f->slack_denominator = v->slack_denominator;
    /* the minimum levels: their order is the one the caller may have */
    dcp__fill_run(f, levels, v->widen_numerator > 0 ? NULL : f->minimal_order, region_level,
                  placements, microbatches);
}

/* Whether every sample is fastest on the widest CP size (width costs nothing). Stops at the
   first sample that is faster narrower, so under any ring cost it costs next to nothing. */
static int dcp__width_is_free(const dcp__batch *batch)
{
    int32_t s;
    for (s = 0; s < batch->count; s++)
        if (dcp__widened_level(batch, s, dcp__log2_int(batch->cp_min[s]), 0) != batch->levels - 1)
            return 0;
    return 1;
}

/* The widest fill, when every sample is fastest on the widest CP size: each microbatch one
   group of that size per aligned block, filled up to the memory cap alone. Under a barrier,
   where width costs nothing (the L^2 model: no ring cost), a group of the whole pool costs
   exactly the microbatch's work over D, so on a power-of-two pool the plan meets the work
   bound, in the fewest microbatches; the fill variants' widening thresholds never widen the
   short samples, and they fill only up to the slowest sample's time. When some sample is
   faster narrower, width costs something and this candidate is not built: callers ask
   dcp__width_is_free first. */
static dcp_status dcp__fill_widest(const dcp__batch *batch, int32_t region_level,
                                   int32_t *levels, dcp__placement *placements,
                                   int32_t *microbatches, dcp_error *error)
{
    dcp__fill fill;
    dcp_status status;
    int32_t s;
    *microbatches = 0;
    for (s = 0; s < batch->count; s++) levels[s] = batch->levels - 1;
    if ((status = dcp__fill_init(&fill, batch, error)) != DCP_OK) return status;
    fill.slack_numerator = DCP__FILL_SLACK_UNLIMITED;
    dcp__fill_run(&fill, levels, NULL, region_level < 0 ? fill.root_level : region_level,
                  placements, microbatches);
    dcp__fill_free(&fill);
    return DCP_OK;
}

/* -------------------------------------------- lockstep candidate: packing-aware microbatches
   Megatron-LM's dynamic-CP scheduler (next_hdp_group_packing_aware, NVIDIA/Megatron-LM dev
   branch; bench/megatron_baseline.py reimplements it as it is) builds one microbatch at a time:
   the longest sample left opens a group at its minimum CP size; every other sample, longest
   first, goes where the microbatch's slowest rank ends lowest: into an open group of a CP size
   at least its minimum with room, or onto free ranks as a new group (so a short sample may be
   widened when that lowers the maximum); one that would push the maximum past a cap waits for
   the next microbatch. This version uses the model's costs (ticks, a ring per group) instead of
   L^2 / c; its cap is the per-rank time of M tokens of samples no longer than the longest left;
   and it spends idle ranks widening the slowest group while that shortens it (Megatron widens
   the smallest group until no rank is idle). It packs microbatches up to the memory floor
   where the fills stop at the slowest sample's time (bench/RESULTS.md, "Planner tuning").
   O(K N (groups + levels)): for batches up to DCP__PACKING_MAX_SAMPLES. */

typedef struct dcp__packing {
    const dcp__batch *batch;
    int32_t *queue;    /* [count] samples left, longest first */
    int32_t *group_of; /* [count] each sample's group in its microbatch */
    int32_t *placed;   /* [count] the microbatch's samples, in placement order */
    int32_t *level;    /* [ranks] per open group */
    int64_t *load;     /* [ranks] per open group: per-rank ticks, its ring included */
    int64_t *used;     /* [ranks] per open group: padded tokens per rank */
    int32_t *first;    /* [ranks] per open group: its first rank, once laid out */
    int32_t *members;  /* [ranks] per open group: samples given their order so far */
    int32_t groups, free_ranks, placed_count;
    int64_t slowest;
} dcp__packing;

static void dcp__packing_free(const dcp_allocator *a, dcp__packing *p)
{
    void *list[] = {p->queue, p->group_of, p->placed, p->level, p->load, p->used, p->first,
                    p->members};
    dcp__free_list(a, list, DCP__COUNT(list));
}

static int dcp__packing_init(const dcp__batch *batch, dcp__packing *p, dcp_error *error)
{
    const dcp_allocator *a = &batch->config->allocator;
    size_t count = (size_t)batch->count, ranks = (size_t)batch->config->ranks;
    memset(p, 0, sizeof *p);
    p->batch = batch;
    p->queue = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "packing", error);
    p->group_of = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "packing", error);
    p->placed = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "packing", error);
    p->level = (int32_t *)dcp__alloc_array(a, ranks, sizeof(int32_t), "packing", error);
    p->load = (int64_t *)dcp__alloc_array(a, ranks, sizeof(int64_t), "packing", error);
    p->used = (int64_t *)dcp__alloc_array(a, ranks, sizeof(int64_t), "packing", error);
    p->first = (int32_t *)dcp__alloc_array(a, ranks, sizeof(int32_t), "packing", error);
    p->members = (int32_t *)dcp__alloc_array(a, ranks, sizeof(int32_t), "packing", error);
    return p->queue && p->group_of && p->placed && p->level && p->load && p->used && p->first &&
           p->members;
}

/* Puts sample s in group g (g == groups: a new group at `level`). */
static void dcp__packing_put(dcp__packing *p, int32_t s, int32_t g, int32_t level)
{
    const dcp__batch *batch = p->batch;
    if (g == p->groups) {
        p->groups++;
        p->level[g] = level;
        p->load[g] = batch->ring_ticks[level];
        p->used[g] = 0;
        p->free_ranks -= (int32_t)1 << level;
    }
    p->load[g] += dcp__sample_ticks(batch, s, p->level[g]);
    p->used[g] += dcp__sample_tokens(batch, s, p->level[g]);
    if (p->load[g] > p->slowest) p->slowest = p->load[g];
    p->group_of[s] = g;
    p->placed[p->placed_count++] = s;
}

/* Where sample s lowers the microbatch's slowest rank most, within cap: 1 and placed, or 0.
   Candidates in Megatron's order, CP size ascending, per size the least loaded open group with
   room, then a new group; the first of the lowest kept. (Megatron takes, per size, the first
   open group in opening order that gives the lowest maximum: the same group unless several
   stay under the microbatch's current maximum, where the least loaded one keeps more room.)
   One pass over the groups finds each level's least loaded: O(groups + levels) a sample. */
static int dcp__packing_place(dcp__packing *p, int32_t s, int64_t cap)
{
    const dcp__batch *batch = p->batch;
    const int64_t capacity = batch->config->max_tokens_per_rank;
    const int32_t lowest = dcp__log2_int(batch->cp_min[s]);
    int32_t j, g, best_group = -1, best_level = 0, level_group[DCP_CP_LEVELS];
    int64_t best = 0, level_load[DCP_CP_LEVELS];
    for (j = lowest; j < batch->levels; j++) level_group[j] = -1;
    for (g = 0; g < p->groups; g++) {
        j = p->level[g];
        if (j < lowest || p->used[g] + dcp__sample_tokens(batch, s, j) > capacity) continue;
        if (level_group[j] < 0 || p->load[g] < level_load[j]) {
            level_group[j] = g;
            level_load[j] = p->load[g];
        }
    }
    for (j = lowest; j < batch->levels; j++) {
        int64_t work = dcp__sample_ticks(batch, s, j), projected;
        int32_t option;
        for (option = 0; option < 2; option++) { /* the level's open group, then a new one */
            if (option == 0 ? level_group[j] < 0 : p->free_ranks < ((int32_t)1 << j)) continue;
            projected = (option == 0 ? level_load[j] : batch->ring_ticks[j]) + work;
            if (projected < p->slowest) projected = p->slowest;
            if (projected <= cap && (best_group < 0 || projected < best)) {
                best = projected;
                best_group = option == 0 ? level_group[j] : p->groups;
                best_level = j;
            }
        }
    }
    if (best_group < 0) return 0;
    dcp__packing_put(p, s, best_group, best_level);
    return 1;
}

/* Spends idle ranks doubling the slowest group while that shortens it and fits M. */
static void dcp__packing_widen(dcp__packing *p)
{
    const dcp__batch *batch = p->batch;
    for (;;) {
        int32_t g, slowest = 0, i;
        int64_t load, used = 0;
        for (g = 1; g < p->groups; g++)
            if (p->load[g] > p->load[slowest]) slowest = g;
        if (p->level[slowest] + 1 >= batch->levels ||
            p->free_ranks < ((int32_t)1 << p->level[slowest]))
            return;
        load = batch->ring_ticks[p->level[slowest] + 1];
        for (i = 0; i < p->placed_count; i++) {
            int32_t s = p->placed[i];
            if (p->group_of[s] != slowest) continue;
            load += dcp__sample_ticks(batch, s, p->level[slowest] + 1);
            used += dcp__sample_tokens(batch, s, p->level[slowest] + 1);
        }
        if (load >= p->load[slowest] || used > batch->config->max_tokens_per_rank) return;
        p->free_ranks -= (int32_t)1 << p->level[slowest];
        p->level[slowest]++;
        p->load[slowest] = load;
        p->used[slowest] = used;
    }
}

/* The microbatch's placements: groups laid out widest first from rank 0, each group's samples
   in placement order. Aligned and inside the pool on any D: every start is a sum of sizes at
   least as large, powers of two, so a multiple of the group's size, and the sizes sum to at
   most D. */
static void dcp__packing_emit(dcp__packing *p, int32_t microbatch, dcp__placement *placements)
{
    const dcp__batch *batch = p->batch;
    int32_t first = 0, j, g, i;
    for (j = batch->levels - 1; j >= 0; j--)
        for (g = 0; g < p->groups; g++)
            if (p->level[g] == j) {
                p->first[g] = first;
                p->members[g] = 0;
                first += (int32_t)1 << j;
            }
    for (i = 0; i < p->placed_count; i++) {
        int32_t s = p->placed[i], group = p->group_of[s];
        placements[s].microbatch = microbatch;
        placements[s].first_rank = p->first[group];
        placements[s].cp = (int32_t)1 << p->level[group];
        placements[s].order = p->members[group]++;
        placements[s].sample = s;
    }
}

/* Megatron's cap on a microbatch's slowest rank (1 + its slack) times the per-rank time of M
   tokens of samples no longer than the longest left, L: attention at most a L M (each sample's
   a l^2 / c is a l times its l / c tokens), linear b M, plus the widest group's ring. */
static int64_t dcp__packing_cap(const dcp__batch *batch, int64_t longest)
{
    const dcp_config *config = batch->config;
    const double capacity = (double)config->max_tokens_per_rank;
    double seconds = (1.0 + DCP__PACKING_CAP_SLACK) *
                     (config->cost.attn_coeff * (double)longest * capacity +
                      config->cost.linear_coeff * capacity);
    /* with a loose memory cap this lies beyond the batch: no cap (dcp__to_ticks saturates) */
    return dcp__to_ticks(seconds, 1.0 / batch->tick_seconds) +
           batch->ring_ticks[batch->levels - 1];
}

/* One microbatch from the queue's first `left` samples; the ones that wait stay at the front
   of the queue in order. Returns how many wait. */
static int32_t dcp__packing_microbatch(dcp__packing *p, int32_t left, int32_t microbatch,
                                       dcp__placement *placements)
{
    const dcp__batch *batch = p->batch;
    int64_t cap = dcp__packing_cap(batch, batch->lengths[p->queue[0]]);
    int32_t waiting = 0, i;
    p->groups = p->placed_count = 0;
    p->free_ranks = batch->config->ranks;
    p->slowest = 0;
    dcp__packing_put(p, p->queue[0], 0, dcp__log2_int(batch->cp_min[p->queue[0]]));
    for (i = 1; i < left; i++)
        if (!dcp__packing_place(p, p->queue[i], cap)) p->queue[waiting++] = p->queue[i];
    dcp__packing_widen(p);
    dcp__packing_emit(p, microbatch, placements);
    return waiting;
}

static dcp_status dcp__plan_packing(const dcp__batch *batch, dcp__placement *placements,
                                    int32_t *microbatches, dcp_error *error)
{
    const dcp_allocator *a = &batch->config->allocator;
    dcp__keyed *keyed;
    dcp__packing p;
    int32_t left = batch->count, i;
    *microbatches = 0;
    keyed = (dcp__keyed *)dcp__alloc_array(a, 2 * (size_t)batch->count, sizeof *keyed,
                                           "packing order", error);
    if (!dcp__packing_init(batch, &p, error) || !keyed) {
        dcp_free(a, keyed);
        dcp__packing_free(a, &p);
        return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    }
    for (i = 0; i < batch->count; i++) {
        keyed[i].key = batch->lengths[i];
        keyed[i].id = i;
    }
    dcp__keyed_sort(keyed, keyed + batch->count, batch->count); /* longest first */
    for (i = 0; i < batch->count; i++) p.queue[i] = keyed[i].id;
    dcp_free(a, keyed);
    while (left > 0) left = dcp__packing_microbatch(&p, left, (*microbatches)++, placements);
    dcp__packing_free(a, &p);
    return DCP_OK;
}

/* ---------------------------------------------------------- baseline: Megatron-LM's scheduler
   DefaultDynamicCPScheduler.get_groups_and_subsamples (next_hdp_group_packing_aware until every
   sample is placed; NVIDIA/Megatron-LM dev, d48bd6b), step for step as bench/megatron_baseline.py
   reimplements it (its docstring describes the rules): lengths padded to a multiple of 2 D,
   workloads L^2 / c in doubles compared as Python compares them, so that where its plan is a
   dcp plan this is that very plan. It is a candidate of the final choice (and of the lockstep
   search, which may unload it): the returned plan is then never slower than Megatron's under
   the config's E and model. Not built (0 microbatches) when a group's size is not a power of
   two in [min_cp, max_cp] (its full-pool fallback on a pool that is not one), when a group
   breaks the memory cap as this config pads, when Megatron itself would fail, or when its cost
   would pass DCP__MEGATRON_MAX_CELLS (dcp__megatron_affordable: it scans, per microbatch,
   every sample left and its size's open groups, O(K N D) at worst). */
#define DCP__MEGATRON_PAD_PER_RANK 2 /* lengths padded to a multiple of 2 D */

typedef struct dcp__megatron {
    const dcp__batch *batch;
    int64_t *padded;    /* [count] Megatron's lengths */
    int32_t *queue;     /* [count] this round's samples, longest padded first (ties by id) */
    int32_t *wait;      /* [count] the ones that wait for the next round, in that order */
    int32_t *round;     /* [count] this microbatch's samples in placement order */
    int32_t *group_of;  /* [count] */
    int32_t *cp, *first;        /* [ranks] per open group, in opening order */
    double *time, *tokens;      /* [ranks] per open group: workload, tokens per rank */
    int32_t *next;              /* [ranks] the next open group of the same size */
    int32_t head[DCP_CP_LEVELS + 1], tail[DCP_CP_LEVELS + 1]; /* per size: its groups */
    int32_t groups, placed, used;
    double slowest;             /* the largest workload of the open groups */
} dcp__megatron;

static void dcp__megatron_free(const dcp_allocator *a, dcp__megatron *m)
{
    void *list[] = {m->padded, m->queue, m->wait, m->round, m->group_of, m->cp, m->first,
                    m->time, m->tokens, m->next};
    dcp__free_list(a, list, DCP__COUNT(list));
}

static int dcp__megatron_alloc(dcp__megatron *m, const dcp__batch *batch, dcp_error *error)
{
    const dcp_allocator *a = &batch->config->allocator;
    const size_t count = (size_t)batch->count, ranks = (size_t)batch->config->ranks;
    memset(m, 0, sizeof *m);
    m->batch = batch;
    m->padded = (int64_t *)dcp__alloc_array(a, count, sizeof(int64_t), "megatron", error);
    m->queue = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "megatron", error);
    m->wait = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "megatron", error);
    m->round = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "megatron", error);
    m->group_of = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "megatron", error);
    m->cp = (int32_t *)dcp__alloc_array(a, ranks, sizeof(int32_t), "megatron", error);
    m->first = (int32_t *)dcp__alloc_array(a, ranks, sizeof(int32_t), "megatron", error);
    m->time = (double *)dcp__alloc_array(a, ranks, sizeof(double), "megatron", error);
    m->tokens = (double *)dcp__alloc_array(a, ranks, sizeof(double), "megatron", error);
    m->next = (int32_t *)dcp__alloc_array(a, ranks, sizeof(int32_t), "megatron", error);
    return m->padded && m->queue && m->wait && m->round && m->group_of && m->cp && m->first &&
           m->time && m->tokens && m->next;
}

/* Megatron's dcp_gpus_needed: the smallest power of two c with c M >= L. */
static int64_t dcp__megatron_cp_min(const dcp__megatron *m, int64_t padded)
{
    int64_t cp = 1;
    while (cp * m->batch->config->max_tokens_per_rank < padded) cp *= 2;
    return cp;
}

static void dcp__megatron_add(dcp__megatron *m, int32_t g, int32_t s)
{
    const int64_t length = m->padded[s];
    m->time[g] += (double)(length * length) / (double)m->cp[g];
    m->tokens[g] += (double)length / (double)m->cp[g];
    if (m->time[g] > m->slowest) m->slowest = m->time[g];
    m->group_of[s] = g;
    m->round[m->placed++] = s;
}

/* A new group of cp ranks (a power of two while samples are placed) on the lowest free ranks,
   last in its size's list. */
static void dcp__megatron_open(dcp__megatron *m, int32_t cp, int32_t s)
{
    const int32_t g = m->groups++, level = dcp__log2_int(cp);
    m->cp[g] = cp;
    m->first[g] = m->used;
    m->used += cp;
    m->time[g] = m->tokens[g] = 0.0;
    m->next[g] = -1;
    if (m->tail[level] >= 0) m->next[m->tail[level]] = g;
    else m->head[level] = g;
    m->tail[level] = g;
    dcp__megatron_add(m, g, s);
}

/* An empty microbatch. */
static void dcp__megatron_reset(dcp__megatron *m)
{
    int32_t j;
    m->groups = m->placed = m->used = 0;
    m->slowest = 0.0;
    for (j = 0; j <= DCP_CP_LEVELS; j++) m->head[j] = m->tail[j] = -1;
}

/* Where sample s lowers the microbatch's maximum most within cap (Megatron's candidates in
   its order: CP size ascending, per size the open groups in opening order, then a new group;
   strictly smaller replaces): placed and 1, or 0 when it waits. */
static int dcp__megatron_place(dcp__megatron *m, int32_t s, double cap)
{
    const int32_t ranks = m->batch->config->ranks, free_ranks = ranks - m->used;
    const int64_t length = m->padded[s], capacity = m->batch->config->max_tokens_per_rank;
    const double slowest = m->slowest;
    double best = 0.0;
    int32_t g, best_group = -1, best_cp = 0;
    int64_t cp;
    for (cp = dcp__megatron_cp_min(m, length); cp <= ranks; cp *= 2) {
        const double work = (double)(length * length) / (double)cp;
        double projected;
        for (g = m->head[dcp__log2_int(cp)]; g >= 0; g = m->next[g]) {
            if (m->tokens[g] + (double)length / (double)cp > (double)capacity) continue;
            projected = m->time[g] + work > slowest ? m->time[g] + work : slowest;
            if (projected <= cap && (best_cp == 0 || projected < best)) {
                best = projected;
                best_group = g;
                best_cp = (int32_t)cp;
            }
        }
        projected = work > slowest ? work : slowest;
        if (free_ranks >= cp && projected <= cap && (best_cp == 0 || projected < best)) {
            best = projected;
            best_group = -1;
            best_cp = (int32_t)cp;
        }
    }
    if (best_cp == 0) return 0;
    if (best_group < 0) dcp__megatron_open(m, best_cp, s);
    else dcp__megatron_add(m, best_group, s);
    return 1;
}

/* Megatron's fill_empty_gpus_once: the first group of the smallest size that can doubles (to
   at most D ranks), the groups after it shift; 0 when none can, -1 when the doubling would
   take more ranks than are free (Megatron then indexes past the pool). */
static int dcp__megatron_widen(dcp__megatron *m)
{
    const int32_t ranks = m->batch->config->ranks;
    int32_t g, h, i, smallest = ranks, wider, extra, used = 0;
    for (g = 0; g < m->groups; g++) {
        smallest = m->cp[g] < smallest ? m->cp[g] : smallest;
        used += m->cp[g];
    }
    wider = 2 * smallest < ranks ? 2 * smallest : ranks;
    extra = wider - smallest;
    for (g = 0; g < m->groups; g++) {
        int32_t last = m->first[g] + m->cp[g] - 1;
        if (m->cp[g] != smallest || last + extra >= ranks) continue;
        if (used + extra > ranks) return -1;
        for (h = 0; h < m->groups; h++)
            if (m->first[h] > last) m->first[h] += extra;
        m->cp[g] = wider;
        m->time[g] = 0.0;
        for (i = 0; i < m->placed; i++)
            if (m->group_of[m->round[i]] == g) {
                const int64_t length = m->padded[m->round[i]];
                m->time[g] += (double)(length * length) / (double)wider;
            }
        return 1;
    }
    return 0;
}

/* Megatron's fill_with_full_dpxcp_group: one group of all D ranks with the round's samples
   queue[0 .. left), longest first, that fit; the others wait. Returns how many wait, or -1
   when none fits (Megatron fails). */
static int32_t dcp__megatron_whole_pool(dcp__megatron *m, int32_t left)
{
    const int32_t ranks = m->batch->config->ranks;
    const double capacity = (double)m->batch->config->max_tokens_per_rank;
    int32_t i, waiting = 0;
    dcp__megatron_reset(m);
    m->groups = 1;
    m->cp[0] = m->used = ranks; /* any size: no list needed, nothing joins it by size */
    m->first[0] = 0;
    m->time[0] = m->tokens[0] = 0.0;
    for (i = 0; i < left; i++) {
        int32_t s = m->queue[i];
        if (m->tokens[0] + (double)m->padded[s] / (double)ranks <= capacity)
            dcp__megatron_add(m, 0, s);
        else
            m->wait[waiting++] = s;
    }
    return m->placed > 0 ? waiting : -1;
}

/* One microbatch of the round queue[0 .. left): the samples that wait go to wait[] in order.
   Returns how many wait, or -1 when Megatron would fail. */
static int32_t dcp__megatron_microbatch(dcp__megatron *m, int32_t left)
{
    const dcp_config *config = m->batch->config;
    const int64_t tallest = m->padded[m->queue[0]];
    const double cap =
        (double)tallest * (double)config->max_tokens_per_rank * (1.0 + DCP__PACKING_CAP_SLACK);
    const int64_t cp = dcp__megatron_cp_min(m, tallest);
    int32_t i, waiting = 0, used, g;
    if (cp > config->ranks) return -1;
    dcp__megatron_reset(m);
    dcp__megatron_open(m, (int32_t)cp, m->queue[0]);
    for (i = 1; i < left; i++)
        if (!dcp__megatron_place(m, m->queue[i], cap)) m->wait[waiting++] = m->queue[i];
    for (;;) { /* widening changes the sizes: summed again */
        for (g = 0, used = 0; g < m->groups; g++) used += m->cp[g];
        if (used >= config->ranks) return waiting;
        switch (dcp__megatron_widen(m)) {
        case 0: return dcp__megatron_whole_pool(m, left);
        case -1: return -1;
        default: break;
        }
    }
}

/* The microbatch's placements, groups laid out widest first from rank 0 (aligned: each start
   is a sum of sizes at least as large, all powers of two but for a group of the whole pool,
   which is alone), samples in placement order; 0 when a group is no group of this config
   (its size, or its tokens as the config pads them). */
static int dcp__megatron_emit(const dcp__megatron *m, int32_t microbatch,
                              dcp__placement *placements)
{
    const dcp__batch *batch = m->batch;
    const dcp_config *config = batch->config;
    int32_t g, i, widest, first_rank = 0;
    for (g = 0; g < m->groups; g++) {
        int64_t tokens = 0;
        if (!dcp_cp_size_allowed(config, m->cp[g])) return 0;
        for (i = 0; i < m->placed; i++) {
            int32_t s = m->round[i];
            if (m->group_of[s] != g) continue;
            if (batch->cp_min[s] > m->cp[g]) return 0;
            tokens += dcp__padded(config, batch->lengths[s], m->cp[g]) / m->cp[g];
        }
        if (tokens > config->max_tokens_per_rank) return 0;
    }
    for (widest = config->max_cp; widest > 0;) { /* each size, widest first */
        int32_t next = 0;
        for (g = 0; g < m->groups; g++) {
            if (m->cp[g] == widest) {
                m->first[g] = first_rank; /* from here on the group's first rank in the plan */
                first_rank += widest;
            } else if (m->cp[g] < widest && m->cp[g] > next)
                next = m->cp[g];
        }
        widest = next;
    }
    for (i = 0; i < m->placed; i++) {
        int32_t s = m->round[i];
        g = m->group_of[s];
        placements[s].microbatch = microbatch;
        placements[s].first_rank = m->first[g];
        placements[s].cp = m->cp[g];
        placements[s].order = i;
        placements[s].sample = s;
    }
    return 1;
}

/* Whether the scheduler's cost stays within DCP__MEGATRON_MAX_CELLS: every microbatch scans
   the samples left and, for each, the open groups, so both samples x ranks and samples x the
   memory floor's microbatch count (10^5 samples on 32 ranks: 3,000 microbatches) must. */
static int dcp__megatron_affordable(const dcp__batch *batch)
{
    const dcp_config *config = batch->config;
    int64_t tokens = 0, floor_count;
    int32_t s;
    if ((int64_t)batch->count * config->ranks > DCP__MEGATRON_MAX_CELLS) return 0;
    for (s = 0; s < batch->count; s++)
        tokens += dcp__padded(config, batch->lengths[s], batch->cp_min[s]);
    floor_count = tokens / ((int64_t)config->ranks * config->max_tokens_per_rank) + 1;
    return (int64_t)batch->count * floor_count <= DCP__MEGATRON_MAX_CELLS;
}

/* Megatron's plan as placements, *microbatches 0 when it is not built (see above). */
static dcp_status dcp__plan_megatron(const dcp__batch *batch, dcp__placement *placements,
                                     int32_t *microbatches, dcp_error *error)
{
    const dcp_config *config = batch->config;
    const int64_t pad = (int64_t)DCP__MEGATRON_PAD_PER_RANK * config->ranks;
    const dcp_allocator *a = &config->allocator;
    dcp__megatron m;
    dcp__keyed *keyed;
    int32_t left = batch->count, i, *swap;
    *microbatches = 0;
    if (!dcp__megatron_affordable(batch)) return DCP_OK;
    keyed = (dcp__keyed *)dcp__alloc_array(a, 2 * (size_t)batch->count, sizeof *keyed,
                                           "megatron order", error);
    if (!dcp__megatron_alloc(&m, batch, error) || !keyed) {
        dcp_free(a, keyed);
        dcp__megatron_free(a, &m);
        return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    }
    for (i = 0; i < batch->count; i++) {
        m.padded[i] = (batch->lengths[i] + pad - 1) / pad * pad;
        keyed[i].key = m.padded[i];
        keyed[i].id = i;
    }
    dcp__keyed_sort(keyed, keyed + batch->count, batch->count); /* longest first, ties by id */
    for (i = 0; i < batch->count; i++) m.queue[i] = keyed[i].id;
    dcp_free(a, keyed);
    while (left > 0) {
        int32_t waiting = dcp__megatron_microbatch(&m, left);
        if (waiting < 0 || !dcp__megatron_emit(&m, *microbatches, placements)) {
            *microbatches = 0; /* no plan of this config */
            break;
        }
        (*microbatches)++;
        swap = m.queue; /* the ones that wait, in order, are the next round */
        m.queue = m.wait;
        m.wait = swap;
        left = waiting;
    }
    dcp__megatron_free(a, &m);
    return DCP_OK;
}
/* The baselines' placements, planned once per dynamic plan: greedy's, static's and
   Megatron's (when built). The lockstep search unloads from greedy's (starting from Megatron's
   plan, the better start before unloading, ended lower: bench/RESULTS.md, "Planner tuning"),
   and the final choice compares all three plans with the planner's. */
typedef struct dcp__baselines {
    dcp__placement *greedy, *static_cp, *megatron; /* [count] each */
    int32_t greedy_microbatches, static_microbatches, megatron_microbatches; /* 0: not built */
} dcp__baselines;

static void dcp__baselines_free(const dcp_allocator *a, dcp__baselines *b)
{
    void *list[] = {b->greedy, b->static_cp, b->megatron};
    dcp__free_list(a, list, DCP__COUNT(list));
}

static dcp_status dcp__plan_baselines(const dcp__batch *batch, dcp__baselines *b,
                                      dcp_error *error)
{
    const dcp_allocator *a = &batch->config->allocator;
    const size_t count = (size_t)batch->count;
    dcp_status status;
    memset(b, 0, sizeof *b);
    b->greedy = (dcp__placement *)dcp__alloc_array(a, count, sizeof *b->greedy, "baselines",
                                                   error);
    b->static_cp = (dcp__placement *)dcp__alloc_array(a, count, sizeof *b->static_cp,
                                                      "baselines", error);
    b->megatron = (dcp__placement *)dcp__alloc_array(a, count, sizeof *b->megatron, "baselines",
                                                     error);
    if (!b->greedy || !b->static_cp || !b->megatron)
        return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    DCP_PLANNER_TRACE("greedy baseline", 1);
    status = dcp__plan_greedy(batch, b->greedy, &b->greedy_microbatches, error);
    DCP_PLANNER_TRACE("greedy baseline", 0);
    DCP_PLANNER_TRACE("static baseline", 1);
    if (status == DCP_OK)
        status = dcp__plan_static(batch, b->static_cp, &b->static_microbatches, error);
    DCP_PLANNER_TRACE("static baseline", 0);
    DCP_PLANNER_TRACE("Megatron's scheduler", 1);
    if (status == DCP_OK)
        status = dcp__plan_megatron(batch, b->megatron, &b->megatron_microbatches, error);
    DCP_PLANNER_TRACE("Megatron's scheduler", 0);
    return status;
}

/* What the search's candidates share: the step evaluator's scratch, a level per sample, the
   samples by ticks (the fills' order) and the best placements so far. */
typedef struct dcp__search_scratch {
    dcp__step_scratch step;
    int32_t *levels;
    int32_t *minimal_order; /* dcp__order_by_ticks at the minimum levels, for the fills (the
                               search fills it before the first fill) */
    dcp__placement *best;
} dcp__search_scratch;

static void dcp__search_scratch_free(const dcp_allocator *a, dcp__search_scratch *x)
{
    void *list[] = {x->step.order, x->step.offsets, x->step.stamp, x->step.cp,
                    x->step.finish, x->step.load, x->levels, x->minimal_order, x->best};
    dcp__free_list(a, list, DCP__COUNT(list));
}

/* The search's scratch (minimal_order: room for the samples by ticks at their minimum levels,
   which the fills sort into it); 0 when memory is short. */
static int dcp__search_scratch_init(const dcp__batch *batch, dcp__search_scratch *x, dcp_error *error)
{
    const dcp_allocator *a = &batch->config->allocator;
    size_t count = (size_t)batch->count, ranks = (size_t)batch->config->ranks;
    x->step.order = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "search", error);
    /* a fill has at most one microbatch per sample; the tree rounds up to the multiple */
    x->step.offsets = (int32_t *)dcp__alloc_array(
        a, count + (size_t)batch->config->microbatch_multiple + 1, sizeof(int32_t), "search",
        error);
    x->step.stamp = (int32_t *)dcp__alloc_array(a, ranks, sizeof(int32_t), "search", error);
    x->step.cp = (int32_t *)dcp__alloc_array(a, ranks, sizeof(int32_t), "search", error);
    x->step.finish = (int64_t *)dcp__alloc_array(a, ranks, sizeof(int64_t), "search", error);
    x->step.load = (int64_t *)dcp__alloc_array(a, ranks, sizeof(int64_t), "search", error);
    x->levels = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "search", error);
    x->minimal_order =
        (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "search", error);
    x->best = (dcp__placement *)dcp__alloc_array(a, count, sizeof(dcp__placement), "search",
                                                 error);
    return x->step.order && x->step.offsets && x->step.stamp && x->step.cp && x->step.finish &&
           x->step.load && x->levels && x->minimal_order && x->best;
}

/* Keeps the placements when they are faster under E (ties keep the earlier). */
static void dcp__keep_faster(const dcp__batch *batch, dcp__search_scratch *x,
                               const dcp__placement *placements, int32_t microbatches,
                               int64_t *best_step, int32_t *best_microbatches)
{
    int64_t step = dcp__placement_step_ticks(batch, placements, microbatches, &x->step);
    if (*best_microbatches == 0 || step < *best_step) {
        *best_step = step;
        *best_microbatches = microbatches;
        memcpy(x->best, placements, (size_t)batch->count * sizeof *placements);
    }
}

/* ------------------------------------------------ lockstep planner: unloading bottlenecks
   Under E = D a microbatch costs its slowest group. When that group holds several samples,
   moving one of them to another microbatch where it fits under that microbatch's own
   slowest group (in a group of its CP size with room, or on a free aligned block) lowers the
   sum and raises nothing: the move is kept. Bounded by improve_moves (in block positions
   examined) and by DCP__UNLOAD_MAX_CELLS microbatch-rank cells of state. */

typedef struct dcp__unload {
    const dcp__batch *batch;
    int32_t ranks, microbatches;
    int64_t *load, *used, *slowest; /* per cell (microbatch, first rank); per microbatch */
    int32_t *cover, *head, *next;  /* covering group's first rank or -1; sample lists */
    int64_t *own_ticks;            /* [count]: each sample's ticks at its group's level (the
                                      swaps' walks read this, not the batch's wide table) */
    int8_t *level;                 /* group level at its first rank, -1 elsewhere */
    int32_t *groups, *free_ranks;  /* per microbatch: groups per level; ranks in no group */
    uint32_t *level_mask;          /* per microbatch: bit j when it has a group of level j */
    int32_t *above;                /* [ranks]: first ranks of a microbatch's slowest groups */
    /* per (microbatch, level): a lower bound on its groups' least load and an upper bound on
       their largest room (exact after a target search that scanned them all, kept safe by
       every change since), so that most searches that cannot succeed end at once */
    int64_t *least_load, *most_room;
    /* per microbatch a tournament tree over first ranks (leaf: the group's load there, -1 for
       none): its slowest groups and the next slower time without a scan of the ranks */
    int32_t leaf_base;
    int64_t *peak; /* [microbatches * 2 leaf_base] */
    int peaks_ready; /* 0 while dcp__unload_open adds the plan's samples: built once after */
    int64_t swap_budget; /* the swaps' own bound, besides the budget (see dcp__unload_ordered) */
    /* per microbatch a count of its group changes; per (microbatch, level) the last target
       search that scanned in vain (the count then, the sample's ticks and tokens): a sample
       no faster and no smaller finds nothing there either while the count stands (slowest
       times only fall) */
    int64_t *changes, *failed_at, *failed_ticks, *failed_tokens;
    dcp__placement *undo;          /* moves of one lowering attempt, to roll back */
    /* bit sets over ranks, u->words words per row, so that a target search of a narrow
       level visits only its level's groups and the free aligned blocks: per microbatch the
       covered ranks (and the bits past the last rank, never free); per (microbatch, level
       below DCP__UNLOAD_BIT_LEVELS) the first ranks of that level's groups */
    int32_t words;
    uint64_t *covered, *starts;
} dcp__unload_state;

/* Levels whose groups lie in one word of a bit set: CP sizes 1 .. 32 (2^5 < 64). */
#define DCP__UNLOAD_BIT_LEVELS 6

/* The bits at multiples of 2^j in a word (j < DCP__UNLOAD_BIT_LEVELS): a table, as the
   target searches ask for them in their inner loops. */
static uint64_t dcp__aligned_bits(int32_t j)
{
    static const uint64_t bits[DCP__UNLOAD_BIT_LEVELS] = {
        UINT64_C(0xffffffffffffffff), UINT64_C(0x5555555555555555), UINT64_C(0x1111111111111111),
        UINT64_C(0x0101010101010101), UINT64_C(0x0001000100010001), UINT64_C(0x0000000100000001)};
    return bits[j];
}

/* Sets (on) or clears the bits of ranks [r, r + 2^j) of one row: an aligned block. */
static void dcp__bits_assign(uint64_t *row, int32_t r, int32_t j, int on)
{
    int32_t size = (int32_t)1 << j, w;
    if (size >= DCP__WORD_BITS) {
        for (w = r / DCP__WORD_BITS; w < (r + size) / DCP__WORD_BITS; w++)
            row[w] = on ? ~UINT64_C(0) : 0;
        return;
    }
    {
        uint64_t mask = ((UINT64_C(1) << size) - 1) << (r % DCP__WORD_BITS);
        if (on)
            row[r / DCP__WORD_BITS] |= mask;
        else
            row[r / DCP__WORD_BITS] &= ~mask;
    }
}

static uint64_t *dcp__unload_starts(const dcp__unload_state *u, int32_t k, int32_t j)
{
    return u->starts + ((size_t)k * DCP__UNLOAD_BIT_LEVELS + (size_t)j) * (size_t)u->words;
}

/* Group at first rank r, level j, of microbatch k: created (on) or removed. */
static void dcp__unload_bits(dcp__unload_state *u, int32_t k, int32_t r, int32_t j, int on)
{
    dcp__bits_assign(u->covered + (size_t)k * (size_t)u->words, r, j, on);
    if (j < DCP__UNLOAD_BIT_LEVELS) dcp__bits_assign(dcp__unload_starts(u, k, j), r, 0, on);
}

static size_t dcp__cell(const dcp__unload_state *u, int32_t k, int32_t r)
{
    return (size_t)k * (size_t)u->ranks + (size_t)r;
}

/* The slowest group of microbatch k (its first rank; -1 none) and the second slowest time. */
static int64_t *dcp__unload_peak(const dcp__unload_state *u, int32_t k)
{
    return u->peak + (size_t)k * 2 * (size_t)u->leaf_base;
}

/* The group at first rank r of microbatch k now has this load (-1: none there). */
static void dcp__unload_peak_set(dcp__unload_state *u, int32_t k, int32_t r, int64_t load)
{
    int64_t *peak = dcp__unload_peak(u, k);
    int32_t n = u->leaf_base + r;
    peak[n] = load;
    for (n /= 2; n >= 1; n /= 2) { /* up while the maximum changes */
        int64_t above = peak[2 * n] > peak[2 * n + 1] ? peak[2 * n] : peak[2 * n + 1];
        if (peak[n] == above) break;
        peak[n] = above;
    }
}

/* The slowest group of microbatch k (its first rank, the lowest on ties; -1 none) and the
   second slowest time (the slowest of the others, 0 when none). */
static int32_t dcp__unload_slowest(const dcp__unload_state *u, int32_t k, int64_t *second)
{
    const int64_t *peak = dcp__unload_peak(u, k);
    int32_t n = 1;
    *second = 0;
    if (peak[1] < 0) return -1;
    while (n < u->leaf_base) { /* down to the leftmost leaf at the maximum */
        int32_t other = peak[2 * n] == peak[1] ? 2 * n + 1 : 2 * n;
        if (peak[other] > *second) *second = peak[other];
        n = other ^ 1;
    }
    return n - u->leaf_base;
}

/* The group at first rank r of microbatch k changed (load, room, or it is new): the bounds
   of its level stay safe. */
static void dcp__unload_touch(dcp__unload_state *u, int32_t k, int32_t r)
{
    size_t c = dcp__cell(u, k, r), at = (size_t)k * DCP_CP_LEVELS + (size_t)u->level[c];
    int64_t room = u->batch->config->max_tokens_per_rank - u->used[c];
    if (u->load[c] < u->least_load[at]) u->least_load[at] = u->load[c];
    if (room > u->most_room[at]) u->most_room[at] = room;
    if (u->peaks_ready) dcp__unload_peak_set(u, k, r, u->load[c]);
    u->changes[k]++;
}

/* A target search of level j in microbatch k scanned every position in vain: its level's
   groups have least load `least` and largest room `most` (exact), and it is recorded. */
static void dcp__unload_failed(dcp__unload_state *u, int32_t k, int32_t j, int64_t ticks,
                               int64_t tokens, int64_t least, int64_t most)
{
    size_t at = (size_t)k * DCP_CP_LEVELS + (size_t)j;
    u->least_load[at] = least; /* every group of the level was seen: exact */
    u->most_room[at] = most;
    u->failed_at[at] = u->changes[k];
    u->failed_ticks[at] = ticks;
    u->failed_tokens[at] = tokens;
}

/* The groups of level j in word w of microbatch k's bit sets (aligned first ranks). */
static uint64_t dcp__unload_groups_in(const dcp__unload_state *u, int32_t k, int32_t j, int32_t w)
{
    return dcp__unload_starts(u, k, j)[w] & dcp__aligned_bits(j);
}

/* The free aligned blocks of 2^j ranks in word w of microbatch k: bit i when ranks
   i .. i + 2^j - 1 of the word are all free. */
static uint64_t dcp__unload_free_in(const dcp__unload_state *u, int32_t k, int32_t j, int32_t w)
{
    uint64_t free = ~u->covered[(size_t)k * (size_t)u->words + (size_t)w];
    int32_t shift;
    for (shift = 1; shift < ((int32_t)1 << j); shift *= 2) free &= free >> shift;
    return free & dcp__aligned_bits(j);
}

/* The scan of dcp__unload_target for a level below DCP__UNLOAD_BIT_LEVELS, on the bit sets:
   the same first rank (the leftmost group of level j with room under the slowest time, or
   free aligned block when fresh) and the same charge (the positions a scan from the left
   passes), visiting only the level's groups and the free blocks. The level's least load and
   most room are gathered in a second pass, only when it finds nothing. */
static int32_t dcp__unload_target_bits(dcp__unload_state *u, int32_t k, int32_t j, int64_t ticks,
                                       int64_t tokens, int fresh, int64_t *budget)
{
    const int64_t capacity = u->batch->config->max_tokens_per_rank;
    const int64_t load_limit = u->slowest[k] - ticks, used_limit = capacity - tokens;
    const int64_t *load = u->load + dcp__cell(u, k, 0), *used = u->used + dcp__cell(u, k, 0);
    int64_t least = DCP__TICKS_INF, most = -1;
    int32_t w, r;
    for (w = 0; w < u->words; w++) {
        uint64_t groups = dcp__unload_groups_in(u, k, j, w), below_free = ~UINT64_C(0), g;
        uint64_t free = fresh ? dcp__unload_free_in(u, k, j, w) : 0;
        if (free) below_free = (free & (~free + 1)) - 1; /* the groups left of the first free block */
        for (g = groups & below_free; g; g &= g - 1) {
            r = w * DCP__WORD_BITS + dcp__lowest_bit_index(g);
            if (used[r] <= used_limit && load[r] <= load_limit) break;
        }
        if (g || free) { /* a group with room, else the free block */
            r = w * DCP__WORD_BITS + dcp__lowest_bit_index(g ? g : free);
            *budget -= (r >> j) + 1;
            return r;
        }
    }
    *budget -= u->ranks >> j;
    for (w = 0; w < u->words; w++) {
        uint64_t groups = dcp__unload_groups_in(u, k, j, w);
        for (; groups; groups &= groups - 1) {
            r = w * DCP__WORD_BITS + dcp__lowest_bit_index(groups);
            least = load[r] < least ? load[r] : least;
            most = capacity - used[r] > most ? capacity - used[r] : most;
        }
    }
    dcp__unload_failed(u, k, j, ticks, tokens, least, most);
    return -1;
}

/* The scan of dcp__unload_target past its pruning: the leftmost group of level j in
   microbatch k with room under the slowest time, or (fresh) free aligned block, or -1;
   charges the budget the block positions it scanned. */
/* Kept out of line so that its caller, mostly the pruning, inlines into the passes' loops. */
static DCP__OUT_OF_LINE int32_t dcp__unload_target_scan(dcp__unload_state *u, int32_t k,
                                                        int32_t j, int64_t ticks, int64_t tokens,
                                                        int fresh, int64_t *budget)
{
    const int64_t capacity = u->batch->config->max_tokens_per_rank;
    int64_t least = DCP__TICKS_INF, most = -1;
    int32_t size = (int32_t)1 << j, r, q;
    if (j < DCP__UNLOAD_BIT_LEVELS)
        return dcp__unload_target_bits(u, k, j, ticks, tokens, fresh, budget);
    for (r = 0; r + size <= u->ranks; r += size) {
        size_t c = dcp__cell(u, k, r);
        *budget -= 1;
        if (u->level[c] == j) {
            if (u->used[c] + tokens <= capacity && u->load[c] + ticks <= u->slowest[k])
                return r;
            least = u->load[c] < least ? u->load[c] : least;
            most = capacity - u->used[c] > most ? capacity - u->used[c] : most;
            continue;
        }
        if (!fresh) continue;
        for (q = r; q < r + size && u->cover[dcp__cell(u, k, q)] < 0; q++) {}
        if (q == r + size) return r;
    }
    dcp__unload_failed(u, k, j, ticks, tokens, least, most);
    return -1;
}

/* A level at which the unloading may place a sample, with what its target searches read
   there (set once per sample, not once per microbatch searched). */
typedef struct dcp__unload_option {
    int64_t ticks;   /* the sample's ticks at the level */
    int64_t opening; /* with a new group's ring steps: the least time of a group it opens */
    int32_t level, size;
} dcp__unload_option;

static void dcp__unload_option_set(const dcp__unload_state *u, int32_t s, int32_t j,
                                   dcp__unload_option *o)
{
    o->ticks = dcp__sample_ticks(u->batch, s, j);
    o->opening = u->batch->ring_ticks[j] + o->ticks;
    o->level = j;
    o->size = (int32_t)1 << j;
}

/* A place for sample s (at option o's level) in microbatch k under its slowest time: a first
   rank, or -1. Charges the budget one unit, plus the block positions it scanned. Most
   searches end at the pruning, so it is kept small enough to inline. */
static inline int32_t dcp__unload_target(dcp__unload_state *u, int32_t k, int32_t s,
                                         const dcp__unload_option *o, int64_t *budget)
{
    const int64_t ticks = o->ticks, slowest = u->slowest[k];
    const size_t at = (size_t)k * DCP_CP_LEVELS + (size_t)o->level;
    int64_t tokens;
    int fresh;
    *budget -= 1;
    /* a new group costs at least its ring steps plus this sample and needs free ranks; an
       existing one qualifies only within the level's bounds (prunes the scan only) */
    fresh = o->opening <= slowest && u->free_ranks[k] >= o->size;
    if (!fresh && (u->groups[at] == 0 || u->least_load[at] + ticks > slowest))
        return -1;
    tokens = dcp__sample_tokens(u->batch, s, o->level);
    if (!fresh && u->most_room[at] < tokens) return -1;
    if (u->failed_at[at] == u->changes[k] && ticks >= u->failed_ticks[at] &&
        tokens >= u->failed_tokens[at])
        return -1;
    return dcp__unload_target_scan(u, k, o->level, ticks, tokens, fresh, budget);
}

static void dcp__unload_add(dcp__unload_state *u, int32_t k, int32_t r, int32_t s, int32_t j)
{
    size_t c = dcp__cell(u, k, r);
    int32_t q;
    if (u->level[c] != j) { /* a new group: the cell was empty */
        u->groups[(size_t)k * DCP_CP_LEVELS + (size_t)j]++;
        u->level_mask[k] |= (uint32_t)1 << j;
        u->free_ranks[k] -= (int32_t)1 << j;
        u->level[c] = (int8_t)j;
        u->load[c] = u->batch->ring_ticks[j];
        u->used[c] = 0;
        u->head[c] = -1;
        for (q = r; q < r + ((int32_t)1 << j); q++) u->cover[dcp__cell(u, k, q)] = r;
        dcp__unload_bits(u, k, r, j, 1);
    }
    u->own_ticks[s] = dcp__sample_ticks(u->batch, s, j);
    u->load[c] += u->own_ticks[s];
    u->used[c] += dcp__sample_tokens(u->batch, s, j);
    u->next[s] = u->head[c];
    u->head[c] = s;
    dcp__unload_touch(u, k, r);
}

/* Unlinks sample s from the list of cell c. */
static void dcp__unload_unlink(dcp__unload_state *u, size_t c, int32_t s)
{
    int32_t *link = &u->head[c];
    while (*link != s) link = &u->next[*link];
    *link = u->next[s];
}

/* Trades sample s (cell c, microbatch k, level j) with sample t (first rank r of microbatch
   other); microbatch k's slowest time follows. */
static void dcp__unload_trade(dcp__unload_state *u, int32_t k, size_t c, int32_t s, int32_t other,
                              int32_t r, int32_t t, int32_t j, dcp__placement *placements)
{
    const dcp__batch *batch = u->batch;
    size_t d = dcp__cell(u, other, r);
    int64_t ticks = dcp__sample_ticks(batch, s, j), tokens = dcp__sample_tokens(batch, s, j);
    int64_t t_ticks = dcp__sample_ticks(batch, t, j), t_tokens = dcp__sample_tokens(batch, t, j);
    int64_t second;
    dcp__unload_unlink(u, c, s);
    dcp__unload_unlink(u, d, t);
    u->load[c] += t_ticks - ticks;
    u->used[c] += t_tokens - tokens;
    u->load[d] += ticks - t_ticks;
    u->used[d] += tokens - t_tokens;
    dcp__unload_touch(u, k, placements[s].first_rank);
    dcp__unload_touch(u, other, r);
    u->next[s] = u->head[d];
    u->head[d] = s;
    u->next[t] = u->head[c];
    u->head[c] = t;
    placements[t].microbatch = k;
    placements[t].first_rank = placements[s].first_rank;
    placements[t].order = INT32_MAX;
    placements[s].microbatch = other;
    placements[s].first_rank = r;
    placements[s].order = INT32_MAX;
    u->slowest[k] = u->load[dcp__cell(u, k, dcp__unload_slowest(u, k, &second))];
}

/* The first rank, r or after, of a group of level j in microbatch k; -1 when none. Levels
   below DCP__UNLOAD_BIT_LEVELS read the bit sets, wider ones look at their aligned blocks. */
static int32_t dcp__unload_next_group(const dcp__unload_state *u, int32_t k, int32_t j, int32_t r)
{
    const int32_t size = (int32_t)1 << j;
    int32_t w;
    if (j >= DCP__UNLOAD_BIT_LEVELS) {
        for (; r + size <= u->ranks; r += size)
            if (u->level[dcp__cell(u, k, r)] == j) return r;
        return -1;
    }
    for (w = r / DCP__WORD_BITS; w < u->words; w++) {
        uint64_t groups = dcp__unload_groups_in(u, k, j, w);
        if (w == r / DCP__WORD_BITS) groups &= ~UINT64_C(0) << (r % DCP__WORD_BITS);
        if (groups) return w * DCP__WORD_BITS + dcp__lowest_bit_index(groups);
    }
    return -1;
}

/* The first sample in the list of cell d (level j) with ticks in [least, ticks) and tokens
   in [fewest, most]: its id, or -1. *examined receives the samples looked at, the found one
   included. The bounds are the trade's conditions solved for the partner, so the walk reads
   only the partner's own ticks and tokens. */
static int32_t dcp__unload_partner_in(const dcp__unload_state *u, size_t d, int32_t j,
                                      int64_t least, int64_t ticks, int64_t fewest, int64_t most,
                                      int64_t *examined)
{
    const dcp__batch *batch = u->batch;
    int64_t looked = 0;
    int32_t t;
    for (t = u->head[d]; t >= 0; t = u->next[t]) {
        int64_t t_ticks = u->own_ticks[t], t_tokens;
        looked++;
        if (t_ticks >= ticks || t_ticks < least) continue;
        t_tokens = dcp__sample_tokens(batch, t, j);
        if (t_tokens <= most && t_tokens >= fewest) break;
    }
    *examined = looked;
    return t;
}

/* Swaps s (in the slowest group, cell c of microbatch k) with a faster sample of its level in
   another microbatch whose group stays within that microbatch's slowest time, when that
   lowers microbatch k's slowest time; returns 1 when it did. Memory caps hold on both sides.
   (The slowest time after the trade is below k's: t is faster and second is below it.) */
static int dcp__unload_swap_scan(dcp__unload_state *u, int32_t k, size_t c, int32_t s,
                                 int32_t j, int64_t second, dcp__placement *placements,
                                 int64_t *budget)
{
    const dcp__batch *batch = u->batch;
    const int64_t capacity = batch->config->max_tokens_per_rank;
    int64_t ticks = dcp__sample_ticks(batch, s, j), tokens = dcp__sample_tokens(batch, s, j);
    int32_t other, r, size = (int32_t)1 << j;
    int64_t start = *budget, examined;
    if (second >= u->load[c] || u->swap_budget <= 0) return 0; /* no swap lowers k */
    for (other = 0; other < u->microbatches && *budget > 0 && u->swap_budget > start - *budget;
         other++) {
        *budget -= 1; /* a microbatch looked at, even when skipped */
        if (other == k || u->slowest[other] < ticks) continue;
        *budget -= u->ranks >> j;
        if (u->groups[(size_t)other * DCP_CP_LEVELS + (size_t)j] == 0) continue;
        for (r = dcp__unload_next_group(u, other, j, 0); r >= 0;
             r = dcp__unload_next_group(u, other, j, r + size)) {
            size_t d = dcp__cell(u, other, r);
            int32_t t;
            /* t's group stays within other's slowest time; both memory caps hold */
            t = dcp__unload_partner_in(u, d, j, ticks + u->load[d] - u->slowest[other], ticks,
                                       u->used[d] + tokens - capacity,
                                       capacity - u->used[c] + tokens, &examined);
            *budget -= examined;
            if (t < 0) continue;
            dcp__unload_trade(u, k, c, s, other, r, t, j, placements);
            return 1;
        }
    }
    return 0;
}

static int dcp__unload_swap(dcp__unload_state *u, int32_t k, size_t c, int32_t s, int32_t j,
                            int64_t second, dcp__placement *placements, int64_t *budget)
{
    int64_t before = *budget;
    int swapped = dcp__unload_swap_scan(u, k, c, s, j, second, placements, budget);
    u->swap_budget -= before - *budget;
    return swapped;
}

/* Removes an empty group (its cell at first rank r of microbatch k) from the state. */
static void dcp__unload_clear(dcp__unload_state *u, int32_t k, int32_t r)
{
    size_t c = dcp__cell(u, k, r);
    int32_t q;
    for (q = r; q < r + ((int32_t)1 << u->level[c]); q++) u->cover[dcp__cell(u, k, q)] = -1;
    dcp__unload_bits(u, k, r, u->level[c], 0);
    if (--u->groups[(size_t)k * DCP_CP_LEVELS + (size_t)u->level[c]] == 0)
        u->level_mask[k] &= ~((uint32_t)1 << u->level[c]);
    u->free_ranks[k] += (int32_t)1 << u->level[c];
    u->level[c] = -1;
    u->load[c] = 0;
    u->used[c] = 0;
    dcp__unload_peak_set(u, k, r, -1);
    u->changes[k]++;
}

/* Splits the group at first rank r of microbatch k (level j >= 1, at most
   DCP__REPACK_MAX_SAMPLES samples, each feasible one level narrower) into two groups on its
   halves, largest first onto the less loaded half, when both halves fit the memory cap and
   end below the group's time: a wide group of a few long samples is then not slower than
   two narrower ones side by side (the widening is judged by the time it costs the
   microbatch). Returns 1 when it split. */
static int dcp__unload_split(dcp__unload_state *u, int32_t k, int32_t r,
                             dcp__placement *placements, int64_t *budget)
{
    const dcp__batch *batch = u->batch;
    size_t c = dcp__cell(u, k, r);
    int32_t j = u->level[c], half, samples[DCP__REPACK_MAX_SAMPLES];
    int32_t side[DCP__REPACK_MAX_SAMPLES], count = 0, i, m, s;
    int64_t load[2], used[2];
    if (j < 1) return 0;
    half = (int32_t)1 << (j - 1);
    for (s = u->head[c]; s >= 0; s = u->next[s]) {
        if (count == DCP__REPACK_MAX_SAMPLES || batch->cp_min[s] > half) return 0;
        samples[count++] = s;
    }
    *budget -= count + 1;
    if (count < 2) return 0;
    for (i = 1; i < count; i++) /* largest first (ticks one level down); ties by id */
        for (m = i; m > 0; m--) {
            int32_t x = samples[m - 1], y = samples[m];
            int64_t wx = dcp__sample_ticks(batch, x, j - 1), wy = dcp__sample_ticks(batch, y, j - 1);
            if (wx > wy || (wx == wy && x < y)) break;
            samples[m - 1] = y;
            samples[m] = x;
        }
    load[0] = load[1] = batch->ring_ticks[j - 1];
    used[0] = used[1] = 0;
    for (i = 0; i < count; i++) {
        side[i] = load[1] < load[0];
        load[side[i]] += dcp__sample_ticks(batch, samples[i], j - 1);
        used[side[i]] += dcp__sample_tokens(batch, samples[i], j - 1);
    }
    if (used[0] > batch->config->max_tokens_per_rank ||
        used[1] > batch->config->max_tokens_per_rank || load[0] >= u->load[c] ||
        load[1] >= u->load[c])
        return 0;
    u->head[c] = -1; /* empty the group, then place the samples on its halves */
    u->load[c] = 0;
    u->used[c] = 0;
    dcp__unload_clear(u, k, r);
    for (i = 0; i < count; i++) {
        s = samples[i];
        dcp__unload_add(u, k, r + side[i] * half, s, j - 1);
        placements[s].first_rank = r + side[i] * half;
        placements[s].cp = half;
        placements[s].order = INT32_MAX;
    }
    return 1;
}

/* Moves samples off each microbatch's slowest group while that lowers the sum. */
static void dcp__unload_run(dcp__unload_state *u, dcp__placement *placements, int64_t *budget_left)
{
    int64_t budget = *budget_left;
    int32_t k, improved = 1;
    while (improved && budget > 0) {
        improved = 0;
        for (k = 0; k < u->microbatches && budget > 0; k++) {
            int64_t second;
            int32_t g = dcp__unload_slowest(u, k, &second), *link, j;
            size_t c;
            if (g < 0) continue;
            c = dcp__cell(u, k, g);
            j = u->level[c];
            for (link = &u->head[c]; *link >= 0 && budget > 0; link = &u->next[*link]) {
                int32_t s = *link, other, r = -1;
                int64_t ticks = dcp__sample_ticks(u->batch, s, j);
                dcp__unload_option own;
                if (u->head[c] == s && u->next[s] < 0) break; /* its only sample */
                if ((second > u->load[c] - ticks ? second : u->load[c] - ticks) >= u->load[c])
                    continue;
                dcp__unload_option_set(u, s, j, &own);
                for (other = 0; other < u->microbatches && r < 0 && budget > 0; other++) {
                    if (other == k) continue;
                    r = dcp__unload_target(u, other, s, &own, &budget);
                    if (r >= 0) {
                        *link = u->next[s];
                        u->load[c] -= ticks;
                        u->used[c] -= dcp__sample_tokens(u->batch, s, j);
                        dcp__unload_touch(u, k, g);
                        dcp__unload_add(u, other, r, s, j);
                        placements[s].microbatch = other;
                        placements[s].first_rank = r;
                        placements[s].order = INT32_MAX;
                        u->slowest[k] =
                            u->load[dcp__cell(u, k, dcp__unload_slowest(u, k, &second))];
                        improved = 1;
                    }
                }
                if (r >= 0) break;
            }
            if (*link < 0 && budget > 0) { /* no move: try swapping a sample of the group */
                for (link = &u->head[c]; *link >= 0 && budget > 0; link = &u->next[*link])
                    if (dcp__unload_swap(u, k, c, *link, j, second, placements, &budget)) {
                        improved = 1;
                        break;
                    }
                if (*link < 0 && budget > 0 && dcp__unload_split(u, k, g, placements, &budget)) {
                    u->slowest[k] = u->load[dcp__cell(u, k, dcp__unload_slowest(u, k, &second))];
                    improved = 1;
                }
            }
        }
    }
    *budget_left = budget;
}


/* Moves sample s (level j) from cell (k, r) to cell (to, r2) at level j2; a group left empty
   is removed. */
static void dcp__unload_move(dcp__unload_state *u, int32_t s, int32_t j, int32_t k, int32_t r,
                             int32_t to, int32_t r2, int32_t j2, dcp__placement *placements)
{
    size_t c = dcp__cell(u, k, r);
    dcp__unload_unlink(u, c, s);
    u->load[c] -= dcp__sample_ticks(u->batch, s, j);
    u->used[c] -= dcp__sample_tokens(u->batch, s, j);
    if (u->head[c] < 0)
        dcp__unload_clear(u, k, r);
    else
        dcp__unload_touch(u, k, r);
    dcp__unload_add(u, to, r2, s, j2);
    placements[s].microbatch = to;
    placements[s].first_rank = r2;
    placements[s].cp = (int32_t)1 << j2;
    placements[s].order = INT32_MAX;
}

/* The levels to try for sample s placed at level j, in order: its own first, then every
   feasible level (from its minimum CP size up to max_cp, within the pool) but j. Returns
   their count. */
static int32_t dcp__unload_options(const dcp__unload_state *u, int32_t s, int32_t j,
                                   dcp__unload_option options[DCP_CP_LEVELS])
{
    int32_t count = 1, level;
    dcp__unload_option_set(u, s, j, &options[0]);
    for (level = dcp__log2_int(u->batch->cp_min[s]);
         level < u->batch->levels && ((int32_t)1 << level) <= u->ranks; level++)
        if (level != j) dcp__unload_option_set(u, s, level, &options[count++]);
    return count;
}

/* Moves samples off each microbatch's slowest group onto the same microbatch's free ranks or
   other groups, at any CP size the sample may take, where the group it joins ends below the
   slowest time. On a pool that is not a power of two the widest groups leave a block idle (24
   ranks: a group of 16 and 8 idle), and moving part of the slowest group's samples there
   lowers the microbatch (Megatron-LM's plans do it by widening the smaller groups). A kept
   move takes the slowest group below its old time and keeps the target below it: the count
   of groups at the microbatch's slowest time falls, or the time itself, so the pass ends. */
static void dcp__unload_within(dcp__unload_state *u, dcp__placement *placements,
                               int64_t *budget_left)
{
    dcp__unload_option options[DCP_CP_LEVELS];
    int64_t budget = *budget_left, second;
    int32_t k, g;
    for (k = 0; k < u->microbatches && budget > 0; k++)
        while (budget > 0 && (g = dcp__unload_slowest(u, k, &second)) >= 0) {
            const size_t c = dcp__cell(u, k, g);
            const int32_t j = u->level[c];
            const int64_t slowest = u->slowest[k];
            int32_t s, target = -1, o = 0, count;
            if (u->next[u->head[c]] < 0) break; /* one sample: moving it moves the group */
            for (s = u->head[c]; s >= 0 && budget > 0; s = u->next[s]) {
                /* its own CP size, then the others widest first: the idle blocks are the
                   widest that fit beside the slowest group */
                count = dcp__unload_options(u, s, j, options);
                u->slowest[k] = slowest - 1; /* a target strictly below the slowest time */
                for (o = 0; o < count && target < 0; o++)
                    target = dcp__unload_target(u, k, s, &options[o ? count - o : 0], &budget);
                u->slowest[k] = slowest;
                u->changes[k]++; /* searches that failed under the lowered time prove nothing */
                if (target >= 0) break;
            }
            if (target < 0) break;
            o = o > 1 ? count - (o - 1) : 0; /* the option that found the target */
            dcp__unload_move(u, s, j, k, g, k, target, options[o].level, placements);
            u->slowest[k] = u->load[dcp__cell(u, k, dcp__unload_slowest(u, k, &second))];
        }
    *budget_left = budget;
}

/* Below node n of microbatch k's tree: appends the first ranks, ascending, of the groups at
   or above its slowest time to u->above and raises *best to the largest time below it. */
static void dcp__unload_below_node(dcp__unload_state *u, int32_t k, int32_t n, int32_t *count,
                                   int64_t *best)
{
    const int64_t *peak = dcp__unload_peak(u, k);
    if (peak[n] < u->slowest[k]) {
        if (peak[n] > *best) *best = peak[n];
        return;
    }
    if (n >= u->leaf_base) {
        u->above[(*count)++] = n - u->leaf_base;
        return;
    }
    dcp__unload_below_node(u, k, 2 * n, count, best);
    dcp__unload_below_node(u, k, 2 * n + 1, count, best);
}

/* Microbatch k's largest group time below its slowest time (0 when none), and into
   u->above[0 .. *count) the first ranks, ascending, of the groups at or above it (the tree
   visits only their paths and the subtrees beside them). */
static int64_t dcp__unload_below(dcp__unload_state *u, int32_t k, int32_t *count)
{
    int64_t best = 0, second;
    int32_t slowest = dcp__unload_slowest(u, k, &second);
    *count = 0;
    if (slowest >= 0 && u->load[dcp__cell(u, k, slowest)] >= u->slowest[k] &&
        second < u->slowest[k]) { /* the usual case, one group at the top: no tree walk */
        u->above[(*count)++] = slowest;
        return second;
    }
    dcp__unload_below_node(u, k, 1, count, &best);
    return best;
}

/* Lowers microbatch k's slowest time to `limit`, the largest group time below it (the groups
   above it are u->above[0 .. count)): samples leave those groups for other microbatches where
   they fit under those microbatches' own slowest time (which therefore stay), a group left
   empty disappears. All or nothing: when some group cannot get down to the limit, every move
   of the attempt is undone. Returns 1 when it lowered k, whose slowest time is then the
   limit (the group at the limit is untouched; with none, every group left is empty). */
static int dcp__unload_lower(dcp__unload_state *u, int32_t k, int64_t limit, int32_t count,
                             dcp__placement *placements, int64_t *budget)
{
    int32_t i, moves = 0, ok = 1;
    *budget -= 1; /* an attempt, even one that moves nothing */
    for (i = 0; i < count && ok; i++) {
        int32_t r = u->above[i];
        size_t c = dcp__cell(u, k, r);
        int32_t j = u->level[c], s, next;
        for (s = u->head[c]; s >= 0 && u->level[c] == j && u->load[c] > limit; s = next) {
            dcp__unload_option options[DCP_CP_LEVELS];
            int32_t other, target = -1, o = 0, levels = dcp__unload_options(u, s, j, options);
            next = u->next[s];
            for (other = 0; other < u->microbatches && target < 0 && *budget > 0; other++) {
                const uint32_t with_groups = u->level_mask[other];
                const int32_t free_ranks = u->free_ranks[other];
                if (other == k) continue;
                for (o = 0; o < levels; o++) { /* its own CP size first, then every feasible one */
                    if (!(with_groups >> options[o].level & 1) && free_ranks < options[o].size) {
                        *budget -= 1; /* no group to join, no room for one: pruned at once */
                        continue;
                    }
                    if ((target = dcp__unload_target(u, other, s, &options[o], budget)) >= 0) break;
                }
                if (target < 0) continue;
                u->undo[moves] = placements[s];
                u->undo[moves++].sample = s;
                dcp__unload_move(u, s, j, k, r, other, target, options[o].level, placements);
            }
        }
        ok = u->level[c] < 0 || u->load[c] <= limit;
    }
    while (!ok && moves > 0) { /* roll back, newest first */
        const dcp__placement *from = &u->undo[--moves];
        int32_t s = from->sample;
        dcp__unload_move(u, s, dcp__log2_int(placements[s].cp), placements[s].microbatch,
                         placements[s].first_rank, from->microbatch, from->first_rank,
                         dcp__log2_int(from->cp), placements);
        placements[s] = *from;
    }
    if (ok) u->slowest[k] = limit;
    return ok;
}

/* Lowers microbatches' slowest time one level at a time (to their next slower group's time,
   so a microbatch of one slowest level is dissolved into the others' slack) while that
   succeeds; every success lowers the sum and raises no microbatch. */
static void dcp__unload_levels(dcp__unload_state *u, dcp__placement *placements,
                               int64_t *budget_left)
{
    int64_t budget = *budget_left;
    int32_t k, improved = 1, count;
    while (improved && budget > 0) {
        improved = 0;
        for (k = u->microbatches - 1; k >= 0 && budget > 0; k--)
            while (u->slowest[k] > 0 && budget > 0) {
                int64_t limit = dcp__unload_below(u, k, &count);
                if (!dcp__unload_lower(u, k, limit, count, placements, &budget)) break;
                improved = 1;
            }
    }
    *budget_left = budget;
}

/* Renumbers the microbatches that still hold samples 0, 1, ... in order; returns their count. */
static int32_t dcp__unload_compact(const dcp__unload_state *u, dcp__placement *placements,
                                   int32_t *renumber)
{
    int32_t k, kept = 0, s;
    for (k = 0; k < u->microbatches; k++) renumber[k] = -1;
    for (s = 0; s < u->batch->count; s++) renumber[placements[s].microbatch] = 0;
    for (k = 0; k < u->microbatches; k++)
        if (renumber[k] == 0) renumber[k] = kept++;
    for (s = 0; s < u->batch->count; s++)
        placements[s].microbatch = renumber[placements[s].microbatch];
    return kept;
}

static void dcp__unload_close(dcp__unload_state *u)
{
    void *list[] = {u->load, u->used, u->slowest, u->cover, u->head, u->next, u->own_ticks,
                    u->level, u->groups, u->free_ranks, u->level_mask, u->undo, u->above, u->least_load,
                    u->most_room, u->peak, u->changes, u->failed_at, u->failed_ticks,
                    u->failed_tokens, u->covered, u->starts};
    dcp__free_list(&u->batch->config->allocator, list, DCP__COUNT(list));
}

/* Allocates the state's arrays for its microbatches x ranks cells; 0 when memory is short. */
static int dcp__unload_alloc(dcp__unload_state *u, size_t cells)
{
    const dcp_allocator *a = &u->batch->config->allocator;
    const size_t microbatches = (size_t)u->microbatches, count = (size_t)u->batch->count;
    const size_t per_level = microbatches * DCP_CP_LEVELS;
    u->load = (int64_t *)dcp__alloc_array(a, cells, sizeof(int64_t), "unload", NULL);
    u->used = (int64_t *)dcp__alloc_array(a, cells, sizeof(int64_t), "unload", NULL);
    u->slowest = (int64_t *)dcp__alloc_array(a, microbatches, sizeof(int64_t), "unload", NULL);
    u->cover = (int32_t *)dcp__alloc_array(a, cells, sizeof(int32_t), "unload", NULL);
    u->head = (int32_t *)dcp__alloc_array(a, cells, sizeof(int32_t), "unload", NULL);
    u->next = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "unload", NULL);
    u->own_ticks = (int64_t *)dcp__alloc_array(a, count, sizeof(int64_t), "unload", NULL);
    u->level = (int8_t *)dcp__alloc_array(a, cells, sizeof(int8_t), "unload", NULL);
    u->groups = (int32_t *)dcp__alloc_array(a, per_level, sizeof(int32_t), "unload", NULL);
    u->free_ranks = (int32_t *)dcp__alloc_array(a, microbatches, sizeof(int32_t), "unload", NULL);
    u->level_mask = (uint32_t *)dcp__alloc_array(a, microbatches, sizeof(uint32_t), "unload", NULL);
    u->undo = (dcp__placement *)dcp__alloc_array(a, count, sizeof *u->undo, "unload", NULL);
    u->above = (int32_t *)dcp__alloc_array(a, (size_t)u->ranks, sizeof(int32_t), "unload", NULL);
    u->least_load = (int64_t *)dcp__alloc_array(a, per_level, sizeof(int64_t), "unload", NULL);
    u->most_room = (int64_t *)dcp__alloc_array(a, per_level, sizeof(int64_t), "unload", NULL);
    u->peak = (int64_t *)dcp__alloc_array(a, microbatches * 2 * (size_t)u->leaf_base,
                                          sizeof(int64_t), "unload", NULL);
    u->changes = (int64_t *)dcp__alloc_array(a, microbatches, sizeof(int64_t), "unload", NULL);
    u->failed_at = (int64_t *)dcp__alloc_array(a, per_level, sizeof(int64_t), "unload", NULL);
    u->failed_ticks = (int64_t *)dcp__alloc_array(a, per_level, sizeof(int64_t), "unload", NULL);
    u->failed_tokens = (int64_t *)dcp__alloc_array(a, per_level, sizeof(int64_t), "unload", NULL);
    u->covered = (uint64_t *)dcp__alloc_array(a, microbatches * (size_t)u->words,
                                              sizeof(uint64_t), "unload", NULL);
    u->starts = (uint64_t *)dcp__alloc_array(
        a, microbatches * DCP__UNLOAD_BIT_LEVELS * (size_t)u->words, sizeof(uint64_t), "unload",
        NULL);
    return u->load && u->used && u->slowest && u->cover && u->head && u->next && u->own_ticks &&
           u->level &&
           u->groups && u->free_ranks && u->level_mask && u->undo && u->above && u->least_load &&
           u->most_room && u->peak && u->changes && u->failed_at && u->failed_ticks &&
           u->failed_tokens && u->covered && u->starts;
}

/* Empty microbatches: every rank free, no group, no cell covered, no change and no failed
   attempt recorded yet (the tournament trees are built once the groups are in). */
static void dcp__unload_empty(dcp__unload_state *u, size_t cells)
{
    const size_t per_level = (size_t)u->microbatches * DCP_CP_LEVELS;
    size_t c;
    int32_t k;
    for (k = 0; k < u->microbatches; k++) {
        u->changes[k] = 0;
        u->free_ranks[k] = u->ranks;
        u->level_mask[k] = 0;
    }
    for (c = 0; c < per_level; c++) {
        u->failed_at[c] = -1;
        u->groups[c] = 0;
        u->least_load[c] = DCP__TICKS_INF; /* no group: nothing to bound */
        u->most_room[c] = -1;
    }
    for (c = 0; c < cells; c++) {
        u->cover[c] = -1;
        u->level[c] = -1;
    }
    for (k = 0; k < u->microbatches; k++) { /* the bits past the last rank: never free */
        uint64_t *row = u->covered + (size_t)k * (size_t)u->words;
        int32_t w;
        for (w = 0; w < u->words; w++) row[w] = 0;
        if (u->ranks % DCP__WORD_BITS)
            row[u->words - 1] = ~UINT64_C(0) << (u->ranks % DCP__WORD_BITS);
    }
    for (c = 0; c < (size_t)u->microbatches * DCP__UNLOAD_BIT_LEVELS * (size_t)u->words; c++)
        u->starts[c] = 0;
}

/* Every microbatch's tournament tree from its groups' loads, bottom-up (the same trees as
   updating them group by group, in O(microbatches x leaf_base)). */
static void dcp__unload_build_peaks(dcp__unload_state *u)
{
    int32_t k, n;
    for (k = 0; k < u->microbatches; k++) {
        int64_t *peak = dcp__unload_peak(u, k);
        for (n = 0; n < u->leaf_base; n++) {
            size_t c = dcp__cell(u, k, n);
            peak[u->leaf_base + n] = n < u->ranks && u->level[c] >= 0 ? u->load[c] : -1;
        }
        for (n = u->leaf_base - 1; n >= 1; n--)
            peak[n] = peak[2 * n] > peak[2 * n + 1] ? peak[2 * n] : peak[2 * n + 1];
    }
    u->peaks_ready = 1;
}

/* The unloading state of placements: returns 0 (state closed) when it would not fit
   DCP__UNLOAD_MAX_CELLS or memory is short; the unloading is an optional phase. */
static int dcp__unload_open(dcp__unload_state *u, const dcp__batch *batch,
                            const dcp__placement *placements, int32_t microbatches)
{
    size_t cells = (size_t)microbatches * (size_t)batch->config->ranks;
    int32_t s, k;
    memset(u, 0, sizeof *u);
    u->batch = batch;
    if (cells > DCP__UNLOAD_MAX_CELLS) return 0;
    u->ranks = batch->config->ranks;
    u->microbatches = microbatches;
    u->leaf_base = dcp__leaf_base(u->ranks);
    u->words = (u->ranks + DCP__WORD_BITS - 1) / DCP__WORD_BITS;
    if (!dcp__unload_alloc(u, cells)) {
        dcp__unload_close(u);
        return 0;
    }
    dcp__unload_empty(u, cells);
    for (s = 0; s < batch->count; s++)
        dcp__unload_add(u, placements[s].microbatch, placements[s].first_rank, s,
                        dcp__log2_int(placements[s].cp));
    dcp__unload_build_peaks(u);
    for (k = 0; k < microbatches; k++) {
        int64_t second;
        int32_t g = dcp__unload_slowest(u, k, &second);
        u->slowest[k] = g < 0 ? 0 : u->load[dcp__cell(u, k, g)];
    }
    return 1;
}

/* The unloading's budget in block positions and samples examined. */
static int64_t dcp__unload_budget(const dcp__batch *batch)
{
    int64_t budget = dcp__improve_budget(batch->config, batch->count);
    budget *= DCP__UNLOAD_POSITIONS_PER_MOVE;
    return budget > DCP__UNLOAD_MAX_STEPS ? DCP__UNLOAD_MAX_STEPS : budget;
}

/* Runs the unloading on placements under E = D: the lowering pass and the moves and swaps
   (in that order, or the other with run_first), in turn while they lower the sum of the
   microbatches' slowest times, within DCP__UNLOAD_PASSES times the budget in all; leaves them
   unchanged when the state cannot be built (see dcp__unload_open). Small plans (at most
   DCP__UNLOAD_SMALL_CELLS cells): both orders of the passes are tried and swaps are bounded
   by the budget only; larger ones lower first and their swaps stop after
   DCP__UNLOAD_SWAP_MAX_STEPS. */
static int32_t dcp__unload_ordered(const dcp__batch *batch, dcp__placement *placements,
                                   int32_t microbatches, int run_first)
{
    const dcp_allocator *a = &batch->config->allocator;
    int64_t budget = dcp__unload_budget(batch) * DCP__UNLOAD_PASSES;
    dcp__unload_state u;
    int32_t *renumber;
    if (budget <= 0) return microbatches;
    renumber = (int32_t *)dcp__alloc_array(a, (size_t)microbatches, sizeof(int32_t), "unload",
                                           NULL);
    if (renumber && dcp__unload_open(&u, batch, placements, microbatches)) {
        int64_t sum = -1, now = 0;
        int32_t k;
        /* swaps examine every sample of the other microbatches: on large plans they would
           take most of the budget for little (they pay off on few samples per rank) */
        u.swap_budget = budget;
        if ((int64_t)microbatches * batch->config->ranks > DCP__UNLOAD_SMALL_CELLS &&
            budget > DCP__UNLOAD_SWAP_MAX_STEPS)
            u.swap_budget = DCP__UNLOAD_SWAP_MAX_STEPS;
        for (k = 0; k < microbatches; k++) now += u.slowest[k];
        while (now != sum && budget > 0) { /* every round lowers the sum: it ends */
            sum = now;
            if (!dcp_is_pow2(u.ranks)) dcp__unload_within(&u, placements, &budget);
            if (run_first) dcp__unload_run(&u, placements, &budget);
            dcp__unload_levels(&u, placements, &budget);
            if (!run_first) dcp__unload_run(&u, placements, &budget);
            for (k = 0, now = 0; k < microbatches; k++) now += u.slowest[k];
        }
        microbatches = dcp__unload_compact(&u, placements, renumber);
        dcp__unload_close(&u);
    }
    dcp_free(a, renumber);
    return microbatches;
}

static int32_t dcp__unload(const dcp__batch *batch, dcp__placement *placements,
                           int32_t microbatches)
{
    return dcp__unload_ordered(batch, placements, microbatches, 0);
}

/* The two orders of the passes reach different local optima; on small plans (at most
   DCP__UNLOAD_SMALL_CELLS microbatch-rank cells, where the unloading costs little) both run
   and the one with the faster step under E = D is kept (ties: lowering first).
   scratch: [count] placements. */
static int32_t dcp__unload_best(const dcp__batch *batch, dcp__placement *placements,
                                int32_t microbatches, dcp__placement *scratch,
                                dcp__step_scratch *x)
{
    int32_t first, second;
    if ((int64_t)microbatches * batch->config->ranks > DCP__UNLOAD_SMALL_CELLS)
        return dcp__unload_ordered(batch, placements, microbatches, 0);
    memcpy(scratch, placements, (size_t)batch->count * sizeof *placements);
    first = dcp__unload_ordered(batch, placements, microbatches, 0);
    second = dcp__unload_ordered(batch, scratch, microbatches, 1);
    if (dcp__placement_step_ticks(batch, scratch, second, x) <
        dcp__placement_step_ticks(batch, placements, first, x)) {
        memcpy(placements, scratch, (size_t)batch->count * sizeof *placements);
        return second;
    }
    return first;
}

/* ------------------------------------------------ lockstep planner: unloading blocks (1 < E < D)
   Between the extremes each block of E ranks runs its microbatches in lockstep: its time is
   about the sum over microbatches of its slowest group there, and the step the slowest
   block's. The pass takes the slowest block and moves a sample off one of its microbatches'
   slowest group to a place, in any block and microbatch, where its group stays within that
   block's slowest group there (a group of its CP size with room, or free ranks), as the
   E = D unloading does per microbatch. Groups wider than E couple blocks, so every move is
   simulated under E and kept only when it lowers (the step, the sum of the blocks' finishes);
   each kept move lowers that pair, so the pass ends. Bounded like the unloading. */

/* The slowest group time in block [first, first + sync) of microbatch k, groups wider than
   the block included (0 when none). */
static int64_t dcp__block_slowest(const dcp__unload_state *u, int32_t k, int32_t first,
                                  int32_t sync)
{
    int64_t slowest = 0;
    int32_t q;
    for (q = first; q < first + sync; q++) {
        int32_t g = u->cover[dcp__cell(u, k, q)];
        if (g >= 0 && u->load[dcp__cell(u, k, g)] > slowest) slowest = u->load[dcp__cell(u, k, g)];
    }
    return slowest;
}

/* A place for sample s (level j <= log2 E) in block [first, first + sync) of microbatch k
   within its slowest time: a first rank, or -1. */
static int32_t dcp__block_target(const dcp__unload_state *u, int32_t k, int32_t first,
                                 int32_t sync, int32_t s, int32_t j)
{
    const dcp__batch *batch = u->batch;
    int64_t ticks = dcp__sample_ticks(batch, s, j), tokens = dcp__sample_tokens(batch, s, j);
    int64_t slowest = dcp__block_slowest(u, k, first, sync);
    int32_t size = (int32_t)1 << j, r, q;
    for (r = first; r < first + sync; r += size) {
        size_t c = dcp__cell(u, k, r);
        if (u->level[c] == j) {
            if (u->used[c] + tokens <= batch->config->max_tokens_per_rank &&
                u->load[c] + ticks <= slowest)
                return r;
            continue;
        }
        if (batch->ring_ticks[j] + ticks > slowest) continue;
        for (q = r; q < r + size && u->cover[dcp__cell(u, k, q)] < 0; q++) {}
        if (q == r + size) return r;
    }
    return -1;
}

/* The step under E and the sum of the blocks' finishes, in ticks; *critical receives the
   first rank of the slowest block (the first on ties). A finish is below 2^DCP__TICK_BITS
   (the batch's scale), so the sum adds finishes shifted right by log2 of the block count
   rounded up: it cannot overflow. */
static int64_t dcp__block_step(const dcp__batch *batch, const dcp__placement *placements,
                               int32_t microbatches, dcp__step_scratch *x, int64_t *sum,
                               int32_t *critical)
{
    const int32_t ranks = batch->config->ranks, sync = batch->config->sync_ranks;
    const int32_t shift = dcp__log2_int(dcp__leaf_base((ranks + sync - 1) / sync));
    int64_t step = dcp__placement_step_ticks(batch, placements, microbatches, x), worst = -1;
    int32_t first, r;
    *sum = 0;
    for (first = 0; first < ranks; first += sync) {
        int64_t finish = 0;
        for (r = first; r < first + sync; r++) finish = x->finish[r] > finish ? x->finish[r] : finish;
        *sum += finish >> shift;
        if (finish > worst) {
            worst = finish;
            *critical = first;
        }
    }
    return step;
}

/* A sample of level j in block [first, first + sync) of microbatch k2, faster than `ticks`,
   whose group stays within that block's slowest time and memory cap when it trades places
   with a sample of `ticks` and `tokens` (whose own group has `room` tokens free): its id, or
   -1. *at receives its group's first rank. */
static int32_t dcp__block_swap_partner(const dcp__unload_state *u, int32_t k2, int32_t first,
                                       int32_t sync, int32_t j, int64_t ticks, int64_t tokens,
                                       int64_t room, int32_t *at)
{
    const dcp__batch *batch = u->batch;
    int64_t slowest = dcp__block_slowest(u, k2, first, sync);
    int32_t r, t, size = (int32_t)1 << j;
    for (r = first; r < first + sync; r += size) {
        size_t d = dcp__cell(u, k2, r);
        if (u->level[d] != j || u->load[d] >= slowest) continue;
        for (t = u->head[d]; t >= 0; t = u->next[t]) {
            int64_t t_ticks = dcp__sample_ticks(batch, t, j), t_tokens = dcp__sample_tokens(batch, t, j);
            if (t_ticks < ticks && u->load[d] - t_ticks + ticks <= slowest &&
                u->used[d] - t_tokens + tokens <= batch->config->max_tokens_per_rank &&
                t_tokens - tokens <= room) {
                *at = r;
                return t;
            }
        }
    }
    return -1;
}

/* Trades sample s (group at first rank r of microbatch k) with the first partner found in
   another block or microbatch; keeps the trade when it lowers (*step, *sum). Returns 1 when
   kept. */
static int dcp__block_swap(dcp__unload_state *u, dcp__placement *placements, dcp__step_scratch *x,
                           int32_t s, int32_t k, int32_t r, int64_t *step, int64_t *sum,
                           int32_t *critical, int64_t *budget)
{
    const int32_t sync = u->batch->config->sync_ranks;
    size_t c = dcp__cell(u, k, r);
    int32_t j = u->level[c], k2, first, t = -1, at = 0, in = 0, new_critical = *critical;
    int64_t ticks = dcp__sample_ticks(u->batch, s, j), tokens = dcp__sample_tokens(u->batch, s, j);
    int64_t room = u->batch->config->max_tokens_per_rank - u->used[c], new_step, new_sum;
    dcp__placement before_s, before_t;
    for (k2 = 0; k2 < u->microbatches && t < 0 && *budget > 0; k2++)
        for (first = 0; first < u->ranks && t < 0 && *budget > 0; first += sync) {
            if (k2 == k && first == *critical) continue;
            *budget -= sync;
            t = dcp__block_swap_partner(u, k2, first, sync, j, ticks, tokens, room, &at);
            in = k2;
        }
    if (t < 0) return 0;
    before_s = placements[s];
    before_t = placements[t];
    *budget -= DCP__BLOCK_SIMULATION_WEIGHT * (u->batch->count + (int64_t)u->microbatches * u->ranks);
    dcp__unload_move(u, s, j, k, r, in, at, j, placements);
    dcp__unload_move(u, t, j, in, at, k, r, j, placements);
    new_step = dcp__block_step(u->batch, placements, u->microbatches, x, &new_sum, &new_critical);
    if (new_step < *step || (new_step == *step && new_sum < *sum)) {
        *step = new_step;
        *sum = new_sum;
        *critical = new_critical;
        return 1;
    }
    dcp__unload_move(u, t, j, k, r, in, at, j, placements);
    dcp__unload_move(u, s, j, in, at, k, r, j, placements);
    placements[s] = before_s;
    placements[t] = before_t;
    return 0;
}

/* Tries moving sample s (in the group at first rank r of microbatch k) to the first place
   found outside that cell; keeps the move when it lowers (*step, *sum). Returns 1 when kept. */
static int dcp__block_try(dcp__unload_state *u, dcp__placement *placements, dcp__step_scratch *x,
                          int32_t s, int32_t k, int32_t r, int64_t *step, int64_t *sum,
                          int32_t *critical, int64_t *budget)
{
    const int32_t sync = u->batch->config->sync_ranks;
    int32_t j = u->level[dcp__cell(u, k, r)], k2, first, target = -1, at = 0;
    dcp__placement before = placements[s];
    int64_t new_step, new_sum;
    int32_t new_critical = *critical;
    for (k2 = 0; k2 < u->microbatches && target < 0 && *budget > 0; k2++)
        for (first = 0; first < u->ranks && target < 0 && *budget > 0; first += sync) {
            if (k2 == k && first == *critical) continue;
            *budget -= sync;
            target = dcp__block_target(u, k2, first, sync, s, j);
            at = k2;
        }
    if (target < 0) return 0;
    /* a simulation costs about DCP__BLOCK_SIMULATION_WEIGHT positions per sample and cell */
    *budget -= DCP__BLOCK_SIMULATION_WEIGHT * (u->batch->count + (int64_t)u->microbatches * u->ranks);
    dcp__unload_move(u, s, j, k, r, at, target, j, placements);
    new_step = dcp__block_step(u->batch, placements, u->microbatches, x, &new_sum, &new_critical);
    if (new_step < *step || (new_step == *step && new_sum < *sum)) {
        *step = new_step;
        *sum = new_sum;
        *critical = new_critical;
        return 1;
    }
    dcp__unload_move(u, s, j, at, target, before.microbatch, before.first_rank, j, placements);
    placements[s] = before;
    return 0;
}

/* The pass over placements (under the batch's E, 1 < E < D); returns the microbatch count
   (microbatches left empty are dropped). Leaves them unchanged when memory is short. */
static int32_t dcp__unload_blocks(const dcp__batch *batch, dcp__placement *placements,
                                  int32_t microbatches, dcp__step_scratch *x)
{
    const int32_t sync = batch->config->sync_ranks, top = dcp__log2_int(sync);
    const dcp_allocator *a = &batch->config->allocator;
    int64_t budget = dcp__unload_budget(batch), step, sum;
    int32_t critical = 0, improved = 1, k, q, *renumber;
    dcp__unload_state u;
    if (budget <= 0) return microbatches;
    renumber = (int32_t *)dcp__alloc_array(a, (size_t)microbatches, sizeof(int32_t), "unload",
                                           NULL);
    if (!renumber || !dcp__unload_open(&u, batch, placements, microbatches)) {
        dcp_free(a, renumber);
        return microbatches;
    }
    step = dcp__block_step(batch, placements, microbatches, x, &sum, &critical);
    while (improved && budget > 0) {
        improved = 0;
        for (k = 0; k < microbatches && !improved && budget > 0; k++) {
            /* the critical block's slowest group of its own in microbatch k */
            int64_t slowest = dcp__block_slowest(&u, k, critical, sync);
            budget -= sync;
            for (q = critical; q < critical + sync && !improved; q++) {
                size_t c = dcp__cell(&u, k, q);
                int32_t s, next;
                if (u.level[c] < 0 || u.level[c] > top || u.load[c] < slowest) continue;
                for (s = u.head[c]; s >= 0 && !improved && budget > 0; s = next) {
                    next = u.next[s];
                    improved = dcp__block_try(&u, placements, x, s, k, q, &step, &sum,
                                              &critical, &budget) ||
                               dcp__block_swap(&u, placements, x, s, k, q, &step, &sum,
                                               &critical, &budget);
                }
            }
        }
    }
    microbatches = dcp__unload_compact(&u, placements, renumber);
    dcp__unload_close(&u);
    dcp_free(a, renumber);
    return microbatches;
}



/* ------------------------------------------------------------------- the candidate table
   The dynamic planner's search is one table of candidates (dcp__search_table), each an entry
   {name, applies, build}, run in order by one driver (dcp__search_run): an entry that applies
   builds its placements and offers them to dcp__keep_faster, which keeps the fastest under
   the config's E in integer ticks (ties to the earlier). The conditions that stop the search
   (a plan at the lower bound; a balanced block-wide plan on a large batch) are part of each
   entry's `applies`, so what runs for a batch is read off the table. The plan made for E = D,
   a candidate between the extremes, is the same table run on the batch under E = D. The final
   choice (dcp__plan_fastest) then compares the search's plan with the baselines' in seconds.
   bench/plan_bench --profile times each entry (DCP_PLANNER_TRACE). */


typedef struct dcp__search {
    const dcp__batch *batch;
    const dcp__baselines *baselines;
    dcp__placement *placements; /* [count] the candidate being built */
    dcp__search_scratch x;            /* x.best: the best so far; scratch */
    int ordered;                /* x.minimal_order computed (the fills need it) */
    int32_t best_microbatches;  /* 0: no plan yet */
    int64_t best_step;          /* its step under E, ticks */
    dcp__placement *wide;       /* [count] the block-wide plan, compared last, or NULL */
    int32_t wide_microbatches;
    int64_t wide_step;
    int wide_ends_search;       /* a balanced block-wide plan on a large batch */
} dcp__search;

typedef struct dcp__search_entry {
    const char *name;
    int (*applies)(const dcp__search *s);
    dcp_status (*build)(dcp__search *s, dcp_error *error);
} dcp__search_entry;

static void dcp__search_keep(dcp__search *s, const dcp__placement *placements,
                             int32_t microbatches)
{
    dcp__keep_faster(s->batch, &s->x, placements, microbatches, &s->best_step,
                       &s->best_microbatches);
}

/* A best plan at the lower bound (to the ticks' rounding) ends the search: nothing beats it. */
static int dcp__search_done(const dcp__search *s)
{
    return s->best_microbatches > 0 && dcp__sync_bound_met(s->batch, s->best_step);
}

static int dcp__search_lockstep(const dcp__search *s) { return s->batch->config->sync_ranks > 1; }

static int dcp__search_between(const dcp__search *s)
{
    return dcp__search_lockstep(s) && s->batch->config->sync_ranks < s->batch->config->ranks;
}

/* The costlier candidates after the fills: not once a plan meets the bound or a balanced
   block-wide plan ends a large batch's search. */
static int dcp__search_goes_on(const dcp__search *s)
{
    return dcp__search_lockstep(s) && !s->wide_ends_search && !dcp__search_done(s);
}

/* E = 1: the widest fill when every sample is fastest on the widest CP size (no ring cost),
   kept only when it meets the lower bound; then nothing beats it and the tree planner is not
   run (heavy-8192x1024 under the L^2 model, bench/RESULTS.md). */
static int dcp__search_dag_widest_applies(const dcp__search *s)
{
    return !dcp__search_lockstep(s) && dcp__width_is_free(s->batch);
}

static dcp_status dcp__search_dag_widest(dcp__search *s, dcp_error *error)
{
    int32_t microbatches = 0;
    dcp_status status = dcp__fill_widest(s->batch, -1, s->x.levels, s->placements,
                                         &microbatches, error);
    if (status == DCP_OK && microbatches > 0 &&
        dcp__sync_bound_met(s->batch, dcp__placement_step_ticks(s->batch, s->placements,
                                                                microbatches, &s->x.step)))
        dcp__search_keep(s, s->placements, microbatches);
    return status;
}

/* E = 1: the tree planner (its own candidates: dcp__dynamic_search). */
static int dcp__search_dag_tree_applies(const dcp__search *s)
{
    return !dcp__search_lockstep(s) && !dcp__search_done(s);
}

static dcp_status dcp__search_dag_tree(dcp__search *s, dcp_error *error)
{
    int32_t microbatches = 0;
    dcp_status status = dcp__plan_dynamic(s->batch, s->placements, &microbatches, error);
    if (status == DCP_OK) dcp__search_keep(s, s->placements, microbatches);
    return status;
}

/* E > 1: the widest fill first (when it exists it is usually balanced, and the searches
   after it then stop early); on a pool that is not a power of two, unloaded. */
static int dcp__search_widest_applies(const dcp__search *s)
{
    return dcp__search_lockstep(s) && dcp__width_is_free(s->batch);
}

static dcp_status dcp__search_widest(dcp__search *s, dcp_error *error)
{
    const dcp__batch *batch = s->batch;
    const int32_t sync = batch->config->sync_ranks, ranks = batch->config->ranks;
    int32_t microbatches = 0;
    dcp_status status = dcp__fill_widest(batch, sync < ranks ? dcp__log2_int(sync) : -1,
                                         s->x.levels, s->placements, &microbatches, error);
    if (status != DCP_OK) return status;
    if (microbatches > 0 && !dcp_is_pow2(ranks))
        microbatches = dcp__unload(batch, s->placements, microbatches);
    if (microbatches > 0) dcp__search_keep(s, s->placements, microbatches);
    return DCP_OK;
}

/* E > 1: the fill-to-the-top variants of each region (E, and for E < D the pool), until the
   best is balanced. */
static dcp_status dcp__search_fills(dcp__search *s, dcp_error *error)
{
    const dcp__batch *batch = s->batch;
    const int32_t sync = batch->config->sync_ranks, ranks = batch->config->ranks;
    const int32_t region_count = sync < ranks ? 2 : 1;
    int32_t regions[2], microbatches = 0, r, w;
    dcp__fill fill;
    dcp_status status;
    if (!s->ordered) {
        status = dcp__order_by_ticks(batch, NULL, 0, s->x.minimal_order, error);
        if (status != DCP_OK) return status;
        s->ordered = 1;
    }
    if ((status = dcp__fill_init(&fill, batch, error)) != DCP_OK) return status;
    fill.minimal_order = s->x.minimal_order;
    regions[0] = sync < ranks ? dcp__log2_int(sync) : fill.root_level;
    regions[1] = fill.root_level;
    for (r = 0; r < region_count; r++)
        for (w = 0; w < dcp__fill_candidate_count(batch->count); w++) {
            if (s->best_microbatches > 0 && dcp__sync_balanced(batch, s->best_step)) break;
            dcp__fill_candidate(&fill, w, regions[r], s->x.levels, s->placements, &microbatches);
            dcp__search_keep(s, s->placements, microbatches);
        }
    dcp__fill_free(&fill);
    return DCP_OK;
}

/* Between the extremes with E <= max_cp, up to DCP__BLOCK_WIDE_MAX_SAMPLES_PER_BLOCK samples
   a block, while the fills are more than 2% above the bound: the block-wide plan (the tree
   planner with every group at least E ranks wide), kept apart and compared last (unloading
   it can make it slower under E: bench/RESULTS.md, "Planner tuning"), so that it can only
   add a faster plan; above DCP__LOCKSTEP_FULL_SAMPLES samples, when it is balanced, the
   costlier candidates are not run (they cost several times more and were slower there). */
static int dcp__search_block_wide_applies(const dcp__search *s)
{
    const dcp_config *config = s->batch->config;
    return dcp__search_between(s) && config->sync_ranks <= config->max_cp &&
           (int64_t)s->batch->count * config->sync_ranks <=
               (int64_t)DCP__BLOCK_WIDE_MAX_SAMPLES_PER_BLOCK * config->ranks &&
           !dcp__sync_balanced(s->batch, s->best_step);
}

static dcp_status dcp__search_block_wide(dcp__search *s, dcp_error *error)
{
    const dcp__batch *batch = s->batch;
    dcp_status status;
    s->wide = (dcp__placement *)dcp__alloc_array(&batch->config->allocator, (size_t)batch->count,
                                                 sizeof *s->wide, "block-wide", error);
    if (!s->wide) return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    status = dcp__plan_block_wide(batch, s->wide, &s->wide_microbatches, error);
    if (status != DCP_OK) return status;
    s->wide_step = dcp__placement_step_ticks(batch, s->wide, s->wide_microbatches, &s->x.step);
    s->wide_ends_search = batch->count > DCP__LOCKSTEP_FULL_SAMPLES &&
                          dcp__sync_balanced(batch, s->wide_step);
    return DCP_OK;
}

/* E > 1: the tree planner's plan (its E = 1 plan; under E = D only while unbalanced) up to
   DCP__LOCKSTEP_FULL_SAMPLES samples, and the greedy baseline's plan, which the unloading
   may improve on. */
static dcp_status dcp__search_tree_and_greedy(dcp__search *s, dcp_error *error)
{
    const dcp__batch *batch = s->batch;
    int32_t microbatches = 0;
    if (batch->count <= DCP__LOCKSTEP_FULL_SAMPLES &&
        (dcp__search_between(s) || !dcp__sync_balanced(batch, s->best_step))) {
        dcp_status status = dcp__plan_dynamic(batch, s->placements, &microbatches, error);
        if (status != DCP_OK) return status;
        dcp__search_keep(s, s->placements, microbatches);
    }
    dcp__search_keep(s, s->baselines->greedy, s->baselines->greedy_microbatches);
    return DCP_OK;
}

/* The packing-aware plan, unloaded (one order of the passes: both cost twice as much for the
   same plans on the bench's batches), against the unloaded best of the other candidates: each
   reaches its own local optimum, so they are compared after unloading. */
static dcp_status dcp__search_packing(dcp__search *s, dcp_error *error)
{
    int32_t microbatches;
    dcp_status status = dcp__plan_packing(s->batch, s->placements, &microbatches, error);
    if (status != DCP_OK) return status;
    microbatches = dcp__unload(s->batch, s->placements, microbatches);
    dcp__search_keep(s, s->placements, microbatches);
    return DCP_OK;
}

/* The unloading of the best plan so far: under E < D one more candidate; under E = D it
   replaces the best, and then, up to DCP__PACKING_MAX_SAMPLES samples while unbalanced, the
   packing-aware candidate competes with it. */
static dcp_status dcp__search_unloading(dcp__search *s, dcp_error *error)
{
    const dcp__batch *batch = s->batch;
    int32_t microbatches;
    if (dcp__search_between(s)) {
        memcpy(s->placements, s->x.best, (size_t)batch->count * sizeof *s->placements);
        microbatches = dcp__unload(batch, s->placements, s->best_microbatches);
        dcp__search_keep(s, s->placements, microbatches);
        return DCP_OK;
    }
    if (!dcp__sync_bound_met(batch, s->best_step)) /* the widest fill often is */
        s->best_microbatches =
            dcp__unload_best(batch, s->x.best, s->best_microbatches, s->placements, &s->x.step);
    s->best_step = dcp__placement_step_ticks(batch, s->x.best, s->best_microbatches, &s->x.step);
    if (batch->count <= DCP__PACKING_MAX_SAMPLES && !dcp__sync_balanced(batch, s->best_step))
        return dcp__search_packing(s, error);
    return DCP_OK;
}

/* Between the extremes, up to DCP__LOCKSTEP_FULL_SAMPLES samples: the plan made for E = D
   (this table run under E = D), evaluated under E, so that the plan is never slower under E
   than either extreme's plan; then the best, unloaded block by block. */
static int dcp__search_between_applies(const dcp__search *s)
{
    return dcp__search_between(s) && s->batch->count <= DCP__LOCKSTEP_FULL_SAMPLES &&
           dcp__search_goes_on(s);
}

static dcp_status dcp__search_init(dcp__search *s, const dcp__batch *batch,
                                   const dcp__baselines *baselines, dcp__placement *placements,
                                   dcp_error *error);
static void dcp__search_free(dcp__search *s);
static dcp_status dcp__search_run(dcp__search *s, dcp_error *error);

static dcp_status dcp__search_barrier(dcp__search *s, dcp_error *error)
{
    dcp_config barrier_config = *s->batch->config;
    dcp__batch barrier = *s->batch;
    dcp__search y;
    dcp_status status;
    barrier_config.sync_ranks = barrier_config.ranks;
    barrier.config = &barrier_config;
    barrier.sync_bound = s->batch->barrier_bound;
    status = dcp__search_init(&y, &barrier, s->baselines, s->placements, error);
    if (status == DCP_OK) status = dcp__search_run(&y, error);
    if (status == DCP_OK) dcp__search_keep(s, y.x.best, y.best_microbatches);
    dcp__search_free(&y);
    return status;
}

static dcp_status dcp__search_block_unloading(dcp__search *s, dcp_error *error)
{
    int32_t unloaded;
    (void)error;
    memcpy(s->placements, s->x.best, (size_t)s->batch->count * sizeof *s->placements);
    unloaded = dcp__unload_blocks(s->batch, s->placements, s->best_microbatches, &s->x.step);
    dcp__search_keep(s, s->placements, unloaded);
    return DCP_OK;
}

static int dcp__search_wide_built(const dcp__search *s) { return s->wide != NULL; }

static dcp_status dcp__search_keep_wide(dcp__search *s, dcp_error *error)
{
    (void)error;
    dcp__search_keep(s, s->wide, s->wide_microbatches);
    return DCP_OK;
}

static int dcp__search_always(const dcp__search *s) { return dcp__search_lockstep(s); }

/* The table, in the order it runs; bench/RESULTS.md ("Planner: where the time goes") has each
   entry's share of the plan time on the bench's batches. */
static const dcp__search_entry dcp__search_table[] = {
    {"E = 1: widest fill at the bound", dcp__search_dag_widest_applies, dcp__search_dag_widest},
    {"E = 1: tree planner", dcp__search_dag_tree_applies, dcp__search_dag_tree},
    {"widest fill", dcp__search_widest_applies, dcp__search_widest},
    {"fills", dcp__search_always, dcp__search_fills},
    {"block-wide plan", dcp__search_block_wide_applies, dcp__search_block_wide},
    {"tree plan and greedy", dcp__search_goes_on, dcp__search_tree_and_greedy},
    {"unloading", dcp__search_goes_on, dcp__search_unloading},
    {"plan for E = D", dcp__search_between_applies, dcp__search_barrier},
    {"block unloading", dcp__search_between_applies, dcp__search_block_unloading},
    {"block-wide plan, compared", dcp__search_wide_built, dcp__search_keep_wide},
};

static dcp_status dcp__search_init(dcp__search *s, const dcp__batch *batch,
                                   const dcp__baselines *baselines, dcp__placement *placements,
                                   dcp_error *error)
{
    memset(s, 0, sizeof *s);
    s->batch = batch;
    s->baselines = baselines;
    s->placements = placements;
    if (!dcp__search_scratch_init(batch, &s->x, error)) {
        dcp__search_scratch_free(&batch->config->allocator, &s->x);
        return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    }
    return DCP_OK;
}

static void dcp__search_free(dcp__search *s)
{
    dcp_free(&s->batch->config->allocator, s->wide);
    dcp__search_scratch_free(&s->batch->config->allocator, &s->x);
}

static dcp_status dcp__search_run(dcp__search *s, dcp_error *error)
{
    dcp_status status = DCP_OK;
    size_t i;
    for (i = 0; i < DCP__COUNT(dcp__search_table) && status == DCP_OK; i++) {
        if (!dcp__search_table[i].applies(s)) continue;
        DCP_PLANNER_TRACE(dcp__search_table[i].name, 1);
        status = dcp__search_table[i].build(s, error);
        DCP_PLANNER_TRACE(dcp__search_table[i].name, 0);
    }
    return status;
}

/* The dynamic planner's placements under the batch's E, before the final choice. */
static dcp_status dcp__plan_dynamic_placements(const dcp__batch *batch,
                                               const dcp__baselines *baselines,
                                               dcp__placement *placements,
                                               int32_t *microbatches, dcp_error *error)
{
    dcp__search s;
    dcp_status status = dcp__search_init(&s, batch, baselines, placements, error);
    if (status != DCP_OK) return status;
    status = dcp__search_run(&s, error);
    if (status == DCP_OK) {
        memcpy(placements, s.x.best, (size_t)batch->count * sizeof *placements);
        *microbatches = s.best_microbatches;
    }
    dcp__search_free(&s);
    return status;
}

/* ------------------------------------------------------------------------ public planner */

DCPDEF const char *dcp_strategy_name(dcp_strategy strategy)
{
    switch (strategy) {
    case DCP_STRATEGY_DYNAMIC: return "dynamic";
    case DCP_STRATEGY_STATIC: return "static";
    case DCP_STRATEGY_GREEDY: return "greedy";
    }
    return "unknown";
}

/* The final choice: builds the plan of each candidate in turn (its placements are sorted in
   place) and keeps the fastest under the config's E and cost model, measured by the
   simulator itself (dcp_plan_step_time's number, not the search's ticks), ties to the
   earlier. The returned plan is therefore never slower than any candidate's, to the bit. */
static dcp_status dcp__plan_fastest(const dcp__batch *batch, dcp__placement *const *candidates,
                                    const int32_t *microbatches, int32_t count, dcp_plan **plan,
                                    dcp_error *error)
{
    const dcp_allocator *a = &batch->config->allocator;
    double *finish, best = 0.0;
    dcp_status status = DCP_OK;
    int32_t i;
    *plan = NULL;
    finish = (double *)dcp__alloc_array(a, (size_t)batch->config->ranks, sizeof(double),
                                        "plan choice", error);
    if (!finish) return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    for (i = 0; i < count && status == DCP_OK; i++) {
        dcp_plan *other = NULL;
        double step;
        status = dcp__plan_build(batch->config, batch->lengths, candidates[i], batch->count,
                                 microbatches[i], &other, error);
        if (status != DCP_OK) break;
        step = dcp__plan_step_seconds(other, finish);
        if (!*plan || step < best) {
            best = step;
            dcp_plan_destroy(*plan);
            *plan = other;
        } else
            dcp_plan_destroy(other);
    }
    if (status != DCP_OK) {
        dcp_plan_destroy(*plan);
        *plan = NULL;
    }
    dcp_free(a, finish);
    return status;
}

/* The dynamic strategy: the planner's plan, or a baseline's where that is faster (the
   guarantee: never slower than either baseline under the config's E and model). */
static dcp_status dcp__plan_dynamic_strategy(const dcp__batch *batch, dcp__placement *placements,
                                             dcp_plan **plan, dcp_error *error)
{
    dcp__baselines baselines;
    int32_t microbatches[4] = {0, 0, 0, 0};
    dcp__placement *candidates[4];
    dcp_status status = dcp__plan_baselines(batch, &baselines, error);
    if (status == DCP_OK)
        status = dcp__plan_dynamic_placements(batch, &baselines, placements, &microbatches[0],
                                              error);
    if (status == DCP_OK) {
        candidates[0] = placements;
        candidates[1] = baselines.greedy;
        candidates[2] = baselines.static_cp;
        candidates[3] = baselines.megatron;
        microbatches[1] = baselines.greedy_microbatches;
        microbatches[2] = baselines.static_microbatches;
        microbatches[3] = baselines.megatron_microbatches;
        DCP_PLANNER_TRACE("final choice", 1);
        status = dcp__plan_fastest(batch, candidates, microbatches,
                                   baselines.megatron_microbatches > 0 ? 4 : 3, plan, error);
        DCP_PLANNER_TRACE("final choice", 0);
    }
    dcp__baselines_free(&batch->config->allocator, &baselines);
    return status;
}

static dcp_status dcp__plan_strategy(const dcp__batch *batch, dcp_strategy strategy,
                                     dcp__placement *placements, dcp_plan **plan,
                                     dcp_error *error)
{
    int32_t num_microbatches = 0;
    dcp_status status;
    if (strategy == DCP_STRATEGY_DYNAMIC)
        return dcp__plan_dynamic_strategy(batch, placements, plan, error);
    if (strategy == DCP_STRATEGY_STATIC)
        status = dcp__plan_static(batch, placements, &num_microbatches, error);
    else
        status = dcp__plan_greedy(batch, placements, &num_microbatches, error);
    if (status != DCP_OK) return status;
    return dcp__plan_build(batch->config, batch->lengths, placements, batch->count,
                           num_microbatches, plan, error);
}

/* The planner on the buddy tree, every CP size of the resolved config a power of two. */
static dcp_status dcp__plan_pow2(const dcp_config *c, const int64_t *lengths, int32_t count,
                                 dcp_plan **plan, dcp_error *error)
{
    dcp__batch batch;
    dcp__placement *placements;
    dcp_status status;
    DCP_PLANNER_TRACE("tables and bounds", 1);
    status = dcp__batch_init(&batch, c, lengths, count, error);
    DCP_PLANNER_TRACE("tables and bounds", 0);
    if (status != DCP_OK) return status;
    placements = (dcp__placement *)dcp__alloc_array(&c->allocator, (size_t)count,
                                                    sizeof *placements, "placements", error);
    if (!placements) {
        dcp__batch_free(&batch);
        return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    }
    status = dcp__plan_strategy(&batch, c->strategy, placements, plan, error);
    dcp_free(&c->allocator, placements);
    dcp__batch_free(&batch);
    return status;
}

/* -- src/planner_sets.h -- */
/* ------------------------------------------- planner: CP sizes beyond the buddy tree, and
   every rank busy
   The planner's searches run on the buddy tree of aligned power-of-two blocks. Two configs
   ask for more, and take this path (dcp__plan_sets):
   - a group of the whole pool when the pool is not a power of two (cp_sizes MEGATRON): a
     sample that fits no power-of-two size must run there, and any sample may. A microbatch
     holding such a group holds nothing else and every rank waits for it under every E, so a
     plan that runs those microbatches first takes their time plus the rest's: the pool's
     samples are packed first fit, longest first, into their own microbatches, and the rest
     are planned on the buddy tree (the "split" candidate). Two more candidates: every sample
     on the whole pool (the widest group, which under the L^2 model meets the work bound), and
     Megatron-LM's packing-aware scheduler, whose full-pool fallback is now a plan.
   - cover_ranks: Megatron's hybrid schedule runs a sub-sample on every rank, so each
     candidate is repaired (dcp__cover_ranks) until every rank holds a sample, before the final
     choice compares them; a candidate the repair cannot cover drops out.
   The final choice is the buddy tree's (dcp__plan_fastest): the fastest candidate under the
   config's E and cost model. */

typedef struct dcp__sets {
    const dcp_config *config; /* the caller's, resolved */
    dcp_config inner;         /* its power-of-two sizes only, no cover: the buddy tree's */
    const int64_t *lengths;
    int32_t count;
    int32_t pool;             /* dcp__pool_cp(config), 0 when none */
    int32_t *cp_min;          /* [count] under config */
    dcp__keyed *keyed;        /* [2 count] sort scratch */
    int32_t *ids;             /* [count] a subset's sample ids */
    int64_t *sub_lengths;     /* [count] their lengths */
} dcp__sets;

static void dcp__sets_free(dcp__sets *x)
{
    void *list[] = {x->cp_min, x->keyed, x->ids, x->sub_lengths};
    dcp__free_list(&x->config->allocator, list, DCP__COUNT(list));
}

static dcp_status dcp__sets_init(dcp__sets *x, const dcp_config *config, const int64_t *lengths,
                                 int32_t count, dcp_error *error)
{
    const dcp_allocator *a = &config->allocator;
    memset(x, 0, sizeof *x);
    x->config = config;
    x->lengths = lengths;
    x->count = count;
    x->pool = dcp__pool_cp(config);
    x->inner = *config;
    x->inner.cp_sizes = DCP_CP_SIZES_POW2;
    x->inner.cover_ranks = 0;
    x->inner.max_cp = dcp__pow2_top(config); /* 0: every sample needs the pool */
    x->cp_min = (int32_t *)dcp__alloc_array(a, (size_t)count, sizeof(int32_t), "cp sizes", error);
    x->keyed = (dcp__keyed *)dcp__alloc_array(a, 2 * (size_t)count, sizeof(dcp__keyed), "order",
                                              error);
    x->ids = (int32_t *)dcp__alloc_array(a, (size_t)count, sizeof(int32_t), "subset", error);
    x->sub_lengths = (int64_t *)dcp__alloc_array(a, (size_t)count, sizeof(int64_t), "subset",
                                                 error);
    if (!x->cp_min || !x->keyed || !x->ids || !x->sub_lengths) {
        dcp__sets_free(x);
        return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    }
    if (dcp__check_samples(config, lengths, count, x->cp_min, error) != DCP_OK) {
        dcp__sets_free(x);
        return error ? error->status : DCP_ERROR_INVALID_ARGUMENT;
    }
    return DCP_OK;
}

/* Per-rank padded tokens of a sample at cp. */
static int64_t dcp__tokens_at(const dcp_config *config, int64_t length, int32_t cp)
{
    return dcp__padded(config, length, cp) / cp;
}

/* Packs samples ids[0 .. n) (each fitting cp), in that order, first fit into microbatches
   base, base + 1, ... of one group [0, cp) each (cp = the pool): *bins of them. The room of
   the bins is a segment tree, as the static baseline's. */
static dcp_status dcp__pack_first_fit(const dcp__sets *x, const int32_t *ids, int32_t n,
                                      int32_t cp, int32_t base, dcp__placement *placements,
                                      int32_t *bins, dcp_error *error)
{
    const dcp_config *config = x->config;
    int32_t leaves = 1, i, most = 0;
    int64_t *room;
    while (leaves < n) leaves *= 2;
    room = (int64_t *)dcp__alloc_array(&config->allocator, 2 * (size_t)leaves, sizeof(int64_t),
                                       "pool bins", error);
    if (!room) return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    for (i = 0; i < 2 * leaves; i++) room[i] = config->max_tokens_per_rank; /* node n: room[n] */
    for (i = 0; i < n; i++) {
        const int32_t s = ids[i];
        const int32_t bin = dcp__static_first_fit(room, leaves,
                                                  dcp__tokens_at(config, x->lengths[s], cp));
        placements[s].microbatch = base + bin;
        placements[s].first_rank = 0;
        placements[s].cp = cp;
        placements[s].order = i;
        placements[s].sample = s;
        if (bin + 1 > most) most = bin + 1;
    }
    dcp_free(&config->allocator, room);
    *bins = most;
    return DCP_OK;
}

/* ids[0 .. n) longest first (ties by id). */
static void dcp__sort_longest_first(const dcp__sets *x, int32_t *ids, int32_t n)
{
    int32_t i;
    for (i = 0; i < n; i++) {
        x->keyed[i].key = x->lengths[ids[i]];
        x->keyed[i].id = ids[i];
    }
    dcp__keyed_sort(x->keyed, x->keyed + n, n);
    for (i = 0; i < n; i++) ids[i] = x->keyed[i].id;
}

/* The plan of a config's placements, sample by sample, from microbatch base on. */
static void dcp__sets_take_plan(const dcp_plan *plan, const int32_t *ids, int32_t base,
                                dcp__placement *placements)
{
    int32_t k, g, i;
    for (k = 0; k < plan->num_microbatches; k++)
        for (g = plan->microbatch_offsets[k]; g < plan->microbatch_offsets[k + 1]; g++) {
            const dcp_group *group = &plan->groups[g];
            for (i = 0; i < group->sample_count; i++) {
                const int32_t p = plan->group_samples[group->sample_offset + i];
                const int32_t s = ids ? ids[p] : p;
                placements[s].microbatch = base + k;
                placements[s].first_rank = group->first_rank;
                placements[s].cp = group->cp;
                placements[s].order = i;
                placements[s].sample = s;
            }
        }
}

/* The plan on the buddy tree of the samples that fit a power of two (x->ids[0 .. n)) under
   `strategy`, as placements from microbatch base on: *microbatches of them. */
static dcp_status dcp__sets_tree(dcp__sets *x, dcp_strategy strategy, int32_t n, int32_t base,
                                 dcp__placement *placements, int32_t *microbatches,
                                 dcp_error *error)
{
    dcp_config inner = x->inner;
    dcp_plan *plan = NULL;
    dcp_status status;
    int32_t i;
    *microbatches = 0;
    if (n == 0) return DCP_OK;
    for (i = 0; i < n; i++) x->sub_lengths[i] = x->lengths[x->ids[i]];
    inner.strategy = strategy;
    if ((status = dcp__plan_pow2(&inner, x->sub_lengths, n, &plan, error)) != DCP_OK)
        return status;
    dcp__sets_take_plan(plan, x->ids, base, placements);
    *microbatches = plan->num_microbatches;
    dcp_plan_destroy(plan);
    return DCP_OK;
}

/* Whether sample s fits no power of two of the tree (it needs the pool, or a size of a range
   set beyond the tree). */
static int dcp__sets_off_tree(const dcp__sets *x, int32_t s)
{
    return x->inner.max_cp == 0 || x->cp_min[s] > x->inner.max_cp;
}

static dcp_status dcp__sets_off_tree_fill(dcp__sets *x, int32_t n, dcp__placement *placements,
                                          int32_t *microbatches, dcp_error *error);

/* The split candidate: the samples that fit no power of two of the tree on the pool (on a
   range set: by the interval fill), packed first, the others planned on the buddy tree under
   `strategy` after them. */
static dcp_status dcp__sets_split(dcp__sets *x, dcp_strategy strategy,
                                  dcp__placement *placements, int32_t *microbatches,
                                  dcp_error *error)
{
    int32_t s, n = 0, on_pool = 0, bins = 0, tree = 0;
    dcp_status status = DCP_OK;
    for (s = 0; s < x->count; s++)
        if (dcp__sets_off_tree(x, s)) x->ids[n++] = s;
    if (n > 0 && x->pool) {
        dcp__sort_longest_first(x, x->ids, n);
        status = dcp__pack_first_fit(x, x->ids, n, x->pool, 0, placements, &bins, error);
    } else if (n > 0)
        status = dcp__sets_off_tree_fill(x, n, placements, &bins, error);
    on_pool = n;
    for (s = 0, n = 0; s < x->count; s++)
        if (!dcp__sets_off_tree(x, s)) x->ids[n++] = s;
    if (status == DCP_OK) status = dcp__sets_tree(x, strategy, n, bins, placements, &tree, error);
    *microbatches = on_pool + n > 0 ? bins + tree : 0;
    return status;
}

/* Every sample on one group of the whole pool (max_cp = ranks), first fit: longest first, or
   in input order as THD packing does (the static baseline's when the longest needs it). */
static dcp_status dcp__sets_widest(dcp__sets *x, int longest_first, dcp__placement *placements,
                                   int32_t *microbatches, dcp_error *error)
{
    int32_t s;
    *microbatches = 0;
    if (x->config->max_cp != x->config->ranks) return DCP_OK;
    for (s = 0; s < x->count; s++) {
        if (dcp__tokens_at(x->config, x->lengths[s], x->config->max_cp) >
            x->config->max_tokens_per_rank)
            return DCP_OK; /* not a plan of this config */
        x->ids[s] = s;
    }
    if (longest_first) dcp__sort_longest_first(x, x->ids, x->count);
    return dcp__pack_first_fit(x, x->ids, x->count, x->config->max_cp, 0, placements,
                               microbatches, error);
}

/* A batch the final choice and the Megatron port can read: config, lengths and minimum CP
   sizes, no tables. */
static dcp__batch dcp__sets_batch(const dcp__sets *x)
{
    dcp__batch batch;
    memset(&batch, 0, sizeof batch);
    batch.config = x->config;
    batch.lengths = x->lengths;
    batch.count = x->count;
    batch.cp_min = x->cp_min;
    return batch;
}

/* ------------------------------------------------------------------ covering every rank
   A candidate leaves a rank idle for the whole batch when it has fewer groups than ranks can
   hold, e.g. fewer samples than ranks, or a rank whose samples were balanced onto others.
   Each step takes the largest block B of idle ranks of an allowed size and offers ways to
   put samples on it:
     - a merge: for an allowed block T holding B (aligned powers of two and the pool on the
       aligned sets, ranges of the larger sizes on the others), the groups of the microbatch
       whose groups inside T weigh most become one group of T (under the L^2 cost their work
       is then shared by more ranks);
     - a move: a sample of a group of two or more, or the only one of a group narrower than
       B, that fits B, onto B in its microbatch (from the heaviest groups, at most
       DCP__COVER_MOVE_OPTIONS);
     - alone: where the whole pool is an allowed group, the sample fastest there gets a
       microbatch of its own on it.
   Up to DCP__COVER_SIMULATED_SAMPLES samples every option is simulated under the config's E
   and model and the fastest taken (3 samples of 16 tokens or fewer on 6 ranks: three groups
   of 2, not one of 6 paying its ring); on larger batches the first of a fixed order: a merge
   onto the smallest block above B, a move no slower on B than its group, the other merges,
   alone. Each option makes more ranks busy (a merge or a move off a shared group adds B; a
   move off a narrower group adds B less that group; alone adds them all), so there are at
   most D steps. The final choice then compares the repaired candidates by their step. */

typedef struct dcp__cover {
    const dcp__sets *x;
    dcp__placement *placements; /* [count] by sample id */
    dcp__placement *sorted;     /* [count] by microbatch, first rank: the groups as runs */
    dcp__placement *scratch;    /* [count] */
    int32_t *reach;             /* [ranks] */
    double *seconds;            /* [count] per sample: its group's per-rank time */
    int32_t block, size;        /* B */
    dcp__placement *option_placements, *trial; /* [count] each, when options are simulated */
    double *finish;             /* [ranks], likewise */
} dcp__cover;

static void dcp__cover_free(dcp__cover *c)
{
    void *list[] = {c->sorted, c->scratch, c->reach, c->seconds, c->option_placements,
                    c->trial, c->finish};
    dcp__free_list(&c->x->config->allocator, list, DCP__COUNT(list));
}

static int dcp__cover_alloc(dcp__cover *c, const dcp__sets *x, dcp__placement *placements,
                            int simulated, dcp_error *error)
{
    const dcp_allocator *a = &x->config->allocator;
    const size_t count = (size_t)x->count;
    memset(c, 0, sizeof *c);
    c->x = x;
    c->placements = placements;
    c->sorted = (dcp__placement *)dcp__alloc_array(a, count, sizeof *c->sorted, "cover", error);
    c->scratch = (dcp__placement *)dcp__alloc_array(a, count, sizeof *c->scratch, "cover", error);
    c->reach = (int32_t *)dcp__alloc_array(a, (size_t)x->config->ranks, sizeof(int32_t), "cover",
                                           error);
    c->seconds = (double *)dcp__alloc_array(a, count, sizeof(double), "cover", error);
    if (simulated) {
        c->option_placements = (dcp__placement *)dcp__alloc_array(a, count, sizeof(dcp__placement),
                                                                  "cover", error);
        c->trial = (dcp__placement *)dcp__alloc_array(a, count, sizeof(dcp__placement), "cover",
                                                      error);
        c->finish = (double *)dcp__alloc_array(a, (size_t)x->config->ranks, sizeof(double),
                                               "cover", error);
        if (!c->option_placements || !c->trial || !c->finish) return 0;
    }
    return c->sorted && c->scratch && c->reach && c->seconds;
}

/* The largest block of an allowed size inside the idle run [from, to) into c->block, c->size
   when larger than the one there: aligned powers of two on the aligned sets, any range of an
   allowed size (its start at the run's) on the others. */
static void dcp__cover_block_in(dcp__cover *c, int32_t from, int32_t to)
{
    const dcp_config *config = c->x->config;
    int32_t z;
    if (!dcp__cp_aligned(config)) {
        int32_t best = 0;
        for (z = config->min_cp; z > 0 && z <= to - from; z = dcp__cp_next(config, z)) best = z;
        if (best > c->size) {
            c->block = from;
            c->size = best;
        }
        return;
    }
    for (z = (int32_t)(INT64_C(1) << dcp__log2_int(to - from)); z > c->size; z /= 2) {
        int32_t start = (from + z - 1) / z * z;
        if (start + z <= to && dcp_cp_size_allowed(config, z)) {
            c->block = start;
            c->size = z;
            return;
        }
    }
}

/* The largest block of an allowed size whose ranks all hold nothing (the first on ties) into
   c->block, c->size; 0 when every rank holds a sample, -1 when idle ranks remain but no
   allowed block fits them. */
static int dcp__cover_idle_block(dcp__cover *c)
{
    const dcp_config *config = c->x->config;
    const int32_t ranks = config->ranks;
    int32_t r, i, covered = 0, idle_from = -1, any = 0;
    for (r = 0; r < ranks; r++) c->reach[r] = 0;
    for (i = 0; i < c->x->count; i++) {
        const dcp__placement *p = &c->placements[i];
        if (p->first_rank + p->cp > c->reach[p->first_rank])
            c->reach[p->first_rank] = p->first_rank + p->cp;
    }
    c->size = 0;
    for (r = 0; r <= ranks; r++) {
        int busy = r == ranks;
        if (r < ranks) {
            if (c->reach[r] > covered) covered = c->reach[r];
            busy = covered > r;
        }
        if (!busy && idle_from < 0) idle_from = r;
        if (busy && idle_from >= 0) { /* the idle run [idle_from, r) */
            any = 1;
            dcp__cover_block_in(c, idle_from, r);
            idle_from = -1;
        }
    }
    return !any ? 0 : c->size > 0 ? 1 : -1;
}

/* Sorts the placements into c->sorted by group and gives each sample its group's per-rank
   time under the config's cost (the heaviest group goes first). */
static void dcp__cover_groups(dcp__cover *c)
{
    const dcp_config *config = c->x->config;
    const int32_t count = c->x->count;
    int32_t i, begin;
    memcpy(c->sorted, c->placements, (size_t)count * sizeof *c->sorted);
    dcp__placement_sort(c->sorted, c->scratch, count);
    for (begin = 0; begin < count;) {
        const dcp__placement *p = &c->sorted[begin];
        int32_t end = begin;
        double ring = dcp_cost_ring_seconds(&config->cost, p->cp), seconds = ring;
        while (end < count && c->sorted[end].microbatch == p->microbatch &&
               c->sorted[end].first_rank == p->first_rank) {
            const int64_t length = c->x->lengths[c->sorted[end].sample];
            seconds += dcp_cost_sample_seconds(&config->cost, length,
                                               dcp__padded(config, length, p->cp), p->cp);
            if (config->ring_charge == DCP_RING_PER_SAMPLE && end > begin) seconds += ring;
            end++;
        }
        for (i = begin; i < end; i++) c->seconds[c->sorted[i].sample] = seconds;
        begin = end;
    }
}

/* Whether the groups of microbatch sorted[begin .. end) that overlap [lo, hi) all lie inside
   it and their samples fit hi - lo ranks together; *weight gets their heaviest group's time
   (0 when none overlaps). */
static int dcp__cover_can_merge(const dcp__cover *c, int32_t begin, int32_t end, int32_t lo,
                                int32_t hi, double *weight)
{
    int64_t tokens = 0;
    int32_t i;
    *weight = 0.0;
    for (i = begin; i < end; i++) {
        const dcp__placement *p = &c->sorted[i];
        if (p->first_rank >= hi || p->first_rank + p->cp <= lo) continue;
        if (p->first_rank < lo || p->first_rank + p->cp > hi) return 0;
        tokens += dcp__tokens_at(c->x->config, c->x->lengths[p->sample], hi - lo);
        if (c->seconds[p->sample] > *weight) *weight = c->seconds[p->sample];
    }
    return *weight > 0.0 && tokens <= c->x->config->max_tokens_per_rank;
}

/* One way to put a sample on B: the groups of a microbatch (sorted[begin .. end)) merged onto
   T = [lo, lo + size) (MERGE), a sample moved onto B in its microbatch (MOVE), a sample
   given a microbatch of its own on the whole pool (ALONE), or one microbatch's groups widened
   until they hold every rank and laid out again (RELAYOUT, as Megatron's fill_empty_gpus
   widens its groups). */
typedef enum dcp__cover_kind {
    DCP__COVER_MERGE,
    DCP__COVER_MOVE,
    DCP__COVER_ALONE,
    DCP__COVER_RELAYOUT
} dcp__cover_kind;

typedef struct dcp__cover_option {
    dcp__cover_kind kind;
    int32_t begin, end, lo, size; /* MERGE; RELAYOUT: the microbatch's runs [begin, end) */
    int32_t sample;               /* MOVE, ALONE */
    int late;                     /* tried after the moves when options are not simulated */
} dcp__cover_option;

/* Up to this many samples every option of a step is simulated and the fastest taken (the cover
   matters where samples are few: on larger batches the heuristic order decides); at most
   DCP__COVER_MOVE_OPTIONS moves are offered a step, from the heaviest groups. */
#define DCP__COVER_SIMULATED_SAMPLES 1024
#define DCP__COVER_MOVE_OPTIONS 8
#define DCP__COVER_MERGE_OPTIONS (2 * DCP_CP_LEVELS)
#define DCP__COVER_RELAYOUT_OPTIONS 4
#define DCP__COVER_RELAYOUT_GROUPS 256 /* groups of a microbatch laid out again, at most */
#define DCP__COVER_OPTIONS                                                                      \
    (DCP__COVER_MERGE_OPTIONS + DCP__COVER_MOVE_OPTIONS + DCP__COVER_RELAYOUT_OPTIONS + 1)

/* The merge onto T = [lo, lo + size): the microbatch whose groups inside T weigh most, or 0. */
static int dcp__cover_merge_option(dcp__cover *c, int32_t lo, int32_t size, int late,
                                   dcp__cover_option *option)
{
    const int32_t count = c->x->count;
    int32_t begin, best = -1, best_end = 0;
    double best_weight = 0.0;
    for (begin = 0; begin < count;) {
        int32_t end = begin + 1;
        double weight;
        while (end < count && c->sorted[end].microbatch == c->sorted[begin].microbatch) end++;
        if (dcp__cover_can_merge(c, begin, end, lo, lo + size, &weight) &&
            (best < 0 || weight > best_weight)) {
            best = begin;
            best_end = end;
            best_weight = weight;
        }
        begin = end;
    }
    if (best < 0) return 0;
    option->kind = DCP__COVER_MERGE;
    option->begin = best;
    option->end = best_end;
    option->lo = lo;
    option->size = size;
    option->late = late;
    return 1;
}

/* The merges of a step, smallest T first: the aligned powers of two holding B, then the pool;
   on a range set every larger size reaching from B's start rightwards or from its end
   leftwards. Late: every T but the smallest above B. */
static int32_t dcp__cover_merges(dcp__cover *c, dcp__cover_option *options, int32_t n)
{
    const dcp_config *config = c->x->config;
    int64_t size;
    int32_t first = n;
    if (!dcp__cp_aligned(config)) {
        int32_t z;
        for (z = dcp__cp_next(config, c->size); z > 0 && n + 2 <= DCP__COVER_MERGE_OPTIONS;
             z = dcp__cp_next(config, z)) {
            int32_t right = c->block, left = c->block + c->size - z;
            if (right + z > config->ranks) right = config->ranks - z;
            if (left < 0) left = 0;
            n += dcp__cover_merge_option(c, right, z, n > first, &options[n]);
            if (left != right) n += dcp__cover_merge_option(c, left, z, n > first, &options[n]);
        }
        return n;
    }
    for (size = 2 * (int64_t)c->size; size <= config->max_cp && n + 1 < DCP__COVER_MERGE_OPTIONS;
         size *= 2) {
        const int32_t lo = c->block / (int32_t)size * (int32_t)size;
        if (lo + size <= config->ranks && dcp_cp_size_allowed(config, (int32_t)size))
            n += dcp__cover_merge_option(c, lo, (int32_t)size, size > 2 * (int64_t)c->size,
                                         &options[n]);
    }
    if (c->x->pool > 0) n += dcp__cover_merge_option(c, 0, c->x->pool, 1, &options[n]);
    return n;
}

/* The moves of a step: samples of a group of two or more, or the only one of a group
   narrower than B, that fit B, from the heaviest groups (at most DCP__COVER_MOVE_OPTIONS).
   Unless simulated, a move is kept only when the sample is no slower on B than its group
   was. */
static int32_t dcp__cover_moves(dcp__cover *c, int simulated, dcp__cover_option *options,
                                int32_t n)
{
    const dcp_config *config = c->x->config;
    const int32_t count = c->x->count, first = n;
    int32_t begin;
    for (begin = 0; begin < count;) {
        int32_t end = begin + 1, i;
        while (end < count && c->sorted[end].microbatch == c->sorted[begin].microbatch &&
               c->sorted[end].first_rank == c->sorted[begin].first_rank)
            end++;
        for (i = begin; i < end && (end - begin >= 2 || c->sorted[begin].cp < c->size); i++) {
            const int32_t s = c->sorted[i].sample;
            int32_t at;
            if (dcp__tokens_at(config, c->x->lengths[s], c->size) > config->max_tokens_per_rank)
                continue;
            if (!simulated && dcp__alone_seconds(config, c->x->lengths[s], c->size) > c->seconds[s])
                continue;
            /* the heaviest groups' samples kept in order; ties keep the earlier */
            at = n;
            while (at > first && c->seconds[options[at - 1].sample] < c->seconds[s]) at--;
            if (at - first >= DCP__COVER_MOVE_OPTIONS) continue;
            if (n - first == DCP__COVER_MOVE_OPTIONS) n--; /* the lightest gives way */
            memmove(&options[at + 1], &options[at], (size_t)(n - at) * sizeof *options);
            options[at].kind = DCP__COVER_MOVE;
            options[at].sample = s;
            options[at].late = 0;
            n++;
        }
        begin = end;
    }
    return n;
}

/* A group of the microbatch being laid out again: its runs in sorted[], its size, its time. */
typedef struct dcp__cover_group {
    int32_t begin, end, cp;
    int64_t tokens; /* per rank at cp */
    double seconds;
} dcp__cover_group;

/* The time of sorted[begin .. end) as one group of cp ranks, and its tokens per rank. */
static double dcp__cover_group_seconds(const dcp__cover *c, int32_t begin, int32_t end,
                                       int32_t cp, int64_t *tokens)
{
    const dcp_config *config = c->x->config;
    double ring = dcp_cost_ring_seconds(&config->cost, cp), seconds = ring;
    int32_t i;
    *tokens = 0;
    for (i = begin; i < end; i++) {
        const int64_t length = c->x->lengths[c->sorted[i].sample];
        seconds += dcp_cost_sample_seconds(&config->cost, length,
                                           dcp__padded(config, length, cp), cp);
        if (config->ring_charge == DCP_RING_PER_SAMPLE && i > begin) seconds += ring;
        *tokens += dcp__tokens_at(config, length, cp);
    }
    return seconds;
}

/* Widens the groups of microbatch sorted[begin .. end) until they hold every rank (each step
   the group whose next size leaves the microbatch's slowest time lowest, then costs least,
   within the pool and the memory cap) and lays them
   out widest first from rank 0 (aligned on the aligned sets: descending powers of two from 0
   are), writing their new places into placements (NULL: only whether it can); 0 when no
   widening reaches every rank. */
static int dcp__cover_relayout(const dcp__cover *c, int32_t begin, int32_t end,
                               dcp__placement *placements)
{
    const dcp_config *config = c->x->config;
    dcp__cover_group groups[DCP__COVER_RELAYOUT_GROUPS];
    int32_t n = 0, i, used = 0, first = 0;
    while (begin < end) { /* the microbatch's groups */
        int32_t stop = begin + 1;
        while (stop < end && c->sorted[stop].first_rank == c->sorted[begin].first_rank) stop++;
        if (n == DCP__COVER_RELAYOUT_GROUPS) return 0;
        groups[n].begin = begin;
        groups[n].end = stop;
        groups[n].cp = c->sorted[begin].cp;
        groups[n].seconds = dcp__cover_group_seconds(c, begin, stop, groups[n].cp, &groups[n].tokens);
        used += groups[n].cp;
        n++;
        begin = stop;
    }
    while (used < config->ranks) {
        int32_t best = -1, best_cp = 0, slowest = 0;
        double best_seconds = 0.0, best_peak = 0.0, second = 0.0;
        for (i = 1; i < n; i++) /* the slowest group and the runner-up's time */
            if (groups[i].seconds > groups[slowest].seconds) slowest = i;
        for (i = 0; i < n; i++)
            if (i != slowest && groups[i].seconds > second) second = groups[i].seconds;
        for (i = 0; i < n; i++) {
            const int32_t wider = dcp__cp_next(config, groups[i].cp);
            int64_t tokens;
            double seconds, peak;
            if (wider == 0 || used - groups[i].cp + wider > config->ranks) continue;
            seconds = dcp__cover_group_seconds(c, groups[i].begin, groups[i].end, wider, &tokens);
            if (tokens > config->max_tokens_per_rank) continue;
            /* the microbatch's time after it; ties: the widening that costs least */
            peak = i == slowest ? (seconds > second ? seconds : second)
                                : (seconds > groups[slowest].seconds ? seconds
                                                                     : groups[slowest].seconds);
            if (best < 0 || peak < best_peak ||
                (peak == best_peak &&
                 seconds - groups[i].seconds < best_seconds - groups[best].seconds)) {
                best = i;
                best_cp = wider;
                best_seconds = seconds;
                best_peak = peak;
            }
        }
        if (best < 0) return 0;
        used += best_cp - groups[best].cp;
        groups[best].cp = best_cp;
        groups[best].seconds = best_seconds;
    }
    for (i = 1; i < n; i++) { /* widest first, stable */
        dcp__cover_group g = groups[i];
        int32_t j = i;
        for (; j > 0 && groups[j - 1].cp < g.cp; j--) groups[j] = groups[j - 1];
        groups[j] = g;
    }
    for (i = 0; i < n; i++) {
        int32_t k;
        if (dcp__cp_aligned(config) && first % groups[i].cp != 0) return 0;
        for (k = groups[i].begin; placements && k < groups[i].end; k++) {
            dcp__placement *p = &placements[c->sorted[k].sample];
            p->first_rank = first;
            p->cp = groups[i].cp;
        }
        first += groups[i].cp;
    }
    return 1;
}

/* The relayout options: the microbatches holding the most ranks (at most
   DCP__COVER_RELAYOUT_OPTIONS, at most DCP__COVER_RELAYOUT_GROUPS groups each). */
static int32_t dcp__cover_relayouts(dcp__cover *c, dcp__cover_option *options, int32_t n)
{
    const int32_t count = c->x->count, first = n;
    int32_t begin;
    for (begin = 0; begin < count;) {
        int32_t end = begin + 1, held = 0, groups = 0, i, at;
        while (end < count && c->sorted[end].microbatch == c->sorted[begin].microbatch) end++;
        for (i = begin; i < end; i++)
            if (i == begin || c->sorted[i].first_rank != c->sorted[i - 1].first_rank) {
                held += c->sorted[i].cp;
                groups++;
            }
        if (groups <= DCP__COVER_RELAYOUT_GROUPS && dcp__cover_relayout(c, begin, end, NULL)) {
            at = n;
            while (at > first && options[at - 1].size < held) at--;
            if (at - first < DCP__COVER_RELAYOUT_OPTIONS) {
                if (n - first == DCP__COVER_RELAYOUT_OPTIONS) n--;
                memmove(&options[at + 1], &options[at], (size_t)(n - at) * sizeof *options);
                options[at].kind = DCP__COVER_RELAYOUT;
                options[at].begin = begin;
                options[at].end = end;
                options[at].size = held; /* ranks it holds: the order of the options */
                options[at].late = 1;
                n++;
            }
        }
        begin = end;
    }
    return n;
}

/* The alone option: the sample fastest on the whole pool, where it is an allowed group. */
static int32_t dcp__cover_alone(dcp__cover *c, dcp__cover_option *options, int32_t n)
{
    const dcp_config *config = c->x->config;
    int32_t s, best = -1;
    double best_seconds = 0.0;
    if (config->max_cp != config->ranks) return n;
    for (s = 0; s < c->x->count; s++) {
        double seconds;
        if (dcp__tokens_at(config, c->x->lengths[s], config->ranks) > config->max_tokens_per_rank)
            continue;
        seconds = dcp__alone_seconds(config, c->x->lengths[s], config->ranks);
        if (best < 0 || seconds < best_seconds) {
            best = s;
            best_seconds = seconds;
        }
    }
    if (best < 0) return n;
    options[n].kind = DCP__COVER_ALONE;
    options[n].sample = best;
    options[n].late = 1;
    return n + 1;
}

static void dcp__cover_apply(dcp__cover *c, const dcp__cover_option *o, dcp__placement *placements,
                             int32_t *microbatches)
{
    int32_t i;
    switch (o->kind) {
    case DCP__COVER_MERGE:
        for (i = o->begin; i < o->end; i++) {
            dcp__placement *p = &placements[c->sorted[i].sample];
            if (p->first_rank < o->lo || p->first_rank >= o->lo + o->size) continue;
            p->first_rank = o->lo;
            p->cp = o->size;
        }
        return;
    case DCP__COVER_MOVE:
        placements[o->sample].first_rank = c->block;
        placements[o->sample].cp = c->size;
        placements[o->sample].order = 0;
        return;
    case DCP__COVER_ALONE:
        placements[o->sample].microbatch = (*microbatches)++;
        placements[o->sample].first_rank = 0;
        placements[o->sample].cp = c->x->config->ranks;
        placements[o->sample].order = 0;
        return;
    case DCP__COVER_RELAYOUT: dcp__cover_relayout(c, o->begin, o->end, placements); return;
    }
}

/* The step of placements under the config's E and model (the final choice's own number). */
static dcp_status dcp__cover_step(dcp__cover *c, const dcp__placement *placements,
                                  int32_t microbatches, double *step, dcp_error *error)
{
    const dcp__sets *x = c->x;
    dcp_plan *plan = NULL;
    dcp_status status;
    memcpy(c->trial, placements, (size_t)x->count * sizeof *c->trial);
    status = dcp__plan_build(x->config, x->lengths, c->trial, x->count, microbatches, &plan, error);
    if (status == DCP_OK) *step = dcp__plan_step_seconds(plan, c->finish);
    dcp_plan_destroy(plan);
    return status;
}

/* The option a step takes: simulated, the fastest (ties: the earlier); else the first of the
   heuristic order (merges onto the smallest block above B, moves, the other merges, alone). */
static dcp_status dcp__cover_choose(dcp__cover *c, const dcp__cover_option *options, int32_t n,
                                    int simulated, int32_t microbatches, int32_t *chosen,
                                    dcp_error *error)
{
    double best = 0.0;
    int32_t i, late;
    *chosen = -1;
    if (!simulated) {
        for (late = 0; late < 2 && *chosen < 0; late++)
            for (i = 0; i < n && *chosen < 0; i++)
                if (options[i].late == late) *chosen = i;
        return DCP_OK;
    }
    for (i = 0; i < n; i++) {
        int32_t k = microbatches;
        double step = 0.0;
        dcp_status status;
        memcpy(c->option_placements, c->placements, (size_t)c->x->count * sizeof *c->placements);
        dcp__cover_apply(c, &options[i], c->option_placements, &k);
        if ((status = dcp__cover_step(c, c->option_placements, k, &step, error)) != DCP_OK)
            return status;
        if (*chosen < 0 || step < best) {
            best = step;
            *chosen = i;
        }
    }
    return DCP_OK;
}

/* Repairs a candidate of *microbatches until every rank holds a sample: *covered 1, or 0
   when it cannot. */
static dcp_status dcp__cover_ranks(const dcp__sets *x, dcp__placement *placements,
                                   int32_t *microbatches, int *covered, dcp_error *error)
{
    const int simulated = x->count <= DCP__COVER_SIMULATED_SAMPLES;
    dcp__cover_option options[DCP__COVER_OPTIONS];
    dcp__cover c;
    dcp_status status = DCP_OK;
    int state;
    *covered = 0;
    if (!dcp__cover_alloc(&c, x, placements, simulated, error)) {
        dcp__cover_free(&c);
        return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    }
    while ((state = dcp__cover_idle_block(&c)) != 0) {
        int32_t n = 0, chosen;
        dcp__cover_groups(&c);
        if (state > 0) {
            n = dcp__cover_merges(&c, options, n);
            n = dcp__cover_moves(&c, simulated, options, n);
        }
        n = dcp__cover_relayouts(&c, options, n);
        n = dcp__cover_alone(&c, options, n);
        status = dcp__cover_choose(&c, options, n, simulated, *microbatches, &chosen, error);
        if (status != DCP_OK || chosen < 0) break;
        dcp__cover_apply(&c, &options[chosen], placements, microbatches);
    }
    *covered = status == DCP_OK && state == 0;
    dcp__cover_free(&c);
    return status;
}

/* ------------------------------------------- planner: the interval fill (any CP size set)
   The buddy tree holds aligned powers of two only. For the sets ANY and LIST a group is any
   range [first_rank, first_rank + c) of an allowed size c, and the interval fill plans them:
   each sample gets a width from a menu of the set's sizes (its smallest that fits, or wider
   while that shortens it above a target, or the widest), and each microbatch is filled to the
   top as the buddy tree's fills do, on a line of ranks instead of a tree: the slowest sample
   left opens it at rank 0 and fixes its time T, its group takes more samples of its width
   while they finish within T (times a slack) and fit the memory cap, and the next free ranks
   go to the slowest sample left of any width that fits them and finishes within T, until no
   sample does. Per width the samples sit slowest first (tokens falling with them), so "the
   slowest that fits" is two binary searches and a union-find skip: O(N W log N) for W menu
   widths. Its plans are candidates of the final choice, beside the buddy tree's plan on the
   set's powers of two. */

/* Widths the fill may use: every size of the set up to this many; beyond, the sizes that
   divide the pool (they tile it), the powers of two and max_cp. */
#define DCP__GFILL_MAX_WIDTHS 64
#define DCP__GFILL_INFINITY HUGE_VAL

typedef struct dcp__gfill_entry {
    double seconds; /* the sample's time at the width (its own ring under DCP_RING_PER_SAMPLE) */
    int64_t tokens; /* per rank at the width */
    int32_t sample;
} dcp__gfill_entry;

typedef struct dcp__gfill {
    const dcp__sets *x;
    int32_t widths[DCP__GFILL_MAX_WIDTHS], width_count;
    double group_ring[DCP__GFILL_MAX_WIDTHS]; /* a group's ring (0 under per-sample charge) */
    int32_t begin[DCP__GFILL_MAX_WIDTHS + 1]; /* width m: entries [begin[m], begin[m + 1]) */
    dcp__gfill_entry *entries;                /* [count] by width, each slowest first */
    int32_t *alive;   /* [count + W] union-find: the next entry not placed (run ends: sentinels) */
    int32_t *width_of; /* [count] the sample's width index */
    dcp__keyed *keyed; /* [2 count] */
} dcp__gfill;

static void dcp__gfill_free(dcp__gfill *f)
{
    void *list[] = {f->entries, f->alive, f->width_of, f->keyed};
    dcp__free_list(&f->x->config->allocator, list, DCP__COUNT(list));
}

/* The menu of widths: see DCP__GFILL_MAX_WIDTHS. */
static void dcp__gfill_menu(dcp__gfill *f)
{
    const dcp_config *config = f->x->config;
    int32_t cp, all = 0;
    for (cp = config->min_cp; cp > 0; cp = dcp__cp_next(config, cp)) all++;
    f->width_count = 0;
    for (cp = config->min_cp; cp > 0 && f->width_count < DCP__GFILL_MAX_WIDTHS;
         cp = dcp__cp_next(config, cp))
        if (all <= DCP__GFILL_MAX_WIDTHS || config->ranks % cp == 0 || dcp_is_pow2(cp) ||
            cp == config->max_cp)
            f->widths[f->width_count++] = cp;
    for (cp = 0; cp < f->width_count; cp++)
        f->group_ring[cp] = config->ring_charge == DCP_RING_PER_SAMPLE
                                ? 0.0
                                : dcp_cost_ring_seconds(&config->cost, f->widths[cp]);
}

static dcp_status dcp__gfill_init(dcp__gfill *f, const dcp__sets *x, dcp_error *error)
{
    const dcp_allocator *a = &x->config->allocator;
    const size_t count = (size_t)x->count;
    memset(f, 0, sizeof *f);
    f->x = x;
    dcp__gfill_menu(f);
    f->entries = (dcp__gfill_entry *)dcp__alloc_array(a, count, sizeof *f->entries, "fill",
                                                      error);
    f->alive = (int32_t *)dcp__alloc_array(a, count + DCP__GFILL_MAX_WIDTHS + 1,
                                           sizeof(int32_t), "fill", error);
    f->width_of = (int32_t *)dcp__alloc_array(a, count, sizeof(int32_t), "fill", error);
    f->keyed = (dcp__keyed *)dcp__alloc_array(a, 2 * count, sizeof *f->keyed, "fill", error);
    if (!f->entries || !f->alive || !f->width_of || !f->keyed) {
        dcp__gfill_free(f);
        return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    }
    return DCP_OK;
}

/* A sample's time alone at width index m (its compute, and its ring when charged per
   sample), and whether it fits the memory cap there. */
static double dcp__gfill_seconds(const dcp__gfill *f, int32_t s, int32_t m)
{
    const dcp_config *config = f->x->config;
    const int64_t length = f->x->lengths[s];
    double seconds = dcp__sample_seconds(&config->cost, dcp__attention_seconds(&config->cost,
                                                                                length),
                                         dcp__padded(config, length, f->widths[m]),
                                         f->widths[m]);
    if (config->ring_charge == DCP_RING_PER_SAMPLE)
        seconds += dcp_cost_ring_seconds(&config->cost, f->widths[m]);
    return seconds;
}

static int dcp__gfill_fits(const dcp__gfill *f, int32_t s, int32_t m)
{
    return f->widths[m] >= f->x->cp_min[s] &&
           dcp__tokens_at(f->x->config, f->x->lengths[s], f->widths[m]) <=
               f->x->config->max_tokens_per_rank;
}

/* Width choices of a variant. */
typedef enum dcp__gfill_width { DCP__GFILL_NARROW, DCP__GFILL_WIDEN, DCP__GFILL_WIDEST } dcp__gfill_width;

/* Sample s's width index: its narrowest fitting width, then (WIDEN) wider while its time
   alone (group ring included) exceeds target and the next width is faster, or (WIDEST) the
   widest fitting. -1 when no width of the menu fits. */
static int32_t dcp__gfill_width_of(const dcp__gfill *f, int32_t s, dcp__gfill_width how,
                                   double target)
{
    int32_t m, chosen = -1;
    for (m = 0; m < f->width_count; m++) {
        if (!dcp__gfill_fits(f, s, m)) continue;
        if (chosen < 0) {
            chosen = m;
            if (how == DCP__GFILL_NARROW) break;
            continue;
        }
        if (how == DCP__GFILL_WIDEST) {
            chosen = m;
            continue;
        }
        if (dcp__gfill_seconds(f, s, chosen) + f->group_ring[chosen] <= target ||
            dcp__gfill_seconds(f, s, m) + f->group_ring[m] >=
                dcp__gfill_seconds(f, s, chosen) + f->group_ring[chosen])
            break;
        chosen = m;
    }
    return chosen;
}

/* Sorts the samples ids[0 .. n) into per-width runs, each slowest first (ties by id), and
   resets the union-find; 0 when a sample fits no width. */
static int dcp__gfill_prepare(dcp__gfill *f, const int32_t *ids, int32_t n, dcp__gfill_width how,
                              double target)
{
    int32_t i, m, at;
    int32_t counts[DCP__GFILL_MAX_WIDTHS + 1];
    memset(counts, 0, sizeof counts);
    for (i = 0; i < n; i++) {
        const int32_t s = ids[i];
        f->width_of[s] = dcp__gfill_width_of(f, s, how, target);
        if (f->width_of[s] < 0) return 0;
        counts[f->width_of[s]]++;
    }
    for (m = 0, at = 0; m < f->width_count; m++) {
        f->begin[m] = at;
        at += counts[m];
    }
    f->begin[f->width_count] = at;
    for (m = 0; m < f->width_count; m++) {
        int32_t k = 0;
        for (i = 0; i < n; i++) { /* the run's keys: the bits of the seconds (>= 0) */
            const int32_t s = ids[i];
            double seconds;
            uint64_t bits;
            if (f->width_of[s] != m) continue;
            seconds = dcp__gfill_seconds(f, s, m);
            memcpy(&bits, &seconds, sizeof bits);
            f->keyed[k].key = (int64_t)bits;
            f->keyed[k].id = s;
            k++;
        }
        dcp__keyed_sort(f->keyed, f->keyed + k, k);
        for (i = 0; i < k; i++) {
            dcp__gfill_entry *e = &f->entries[f->begin[m] + i];
            e->sample = f->keyed[i].id;
            e->seconds = dcp__gfill_seconds(f, e->sample, m);
            e->tokens = dcp__tokens_at(f->x->config, f->x->lengths[e->sample], f->widths[m]);
        }
    }
    for (i = 0; i <= n + f->width_count; i++) f->alive[i] = i; /* entry p at p + m */
    return 1;
}

/* Union-find with path halving over the positions p + m of width m's entries. */
static int32_t dcp__gfill_find(dcp__gfill *f, int32_t slot)
{
    while (f->alive[slot] != slot) {
        f->alive[slot] = f->alive[f->alive[slot]];
        slot = f->alive[slot];
    }
    return slot;
}

/* The slowest entry of width m not yet placed with seconds <= time and tokens <= tokens: its
   position, or -1. */
static int32_t dcp__gfill_take(dcp__gfill *f, int32_t m, double time, int64_t tokens)
{
    int32_t lo = f->begin[m], hi = f->begin[m + 1], a = lo, b = hi, slot;
    while (a < b) { /* first with seconds <= time */
        int32_t mid = a + (b - a) / 2;
        if (f->entries[mid].seconds > time) a = mid + 1;
        else b = mid;
    }
    lo = a;
    a = f->begin[m];
    b = hi;
    while (a < b) { /* first with tokens <= tokens */
        int32_t mid = a + (b - a) / 2;
        if (f->entries[mid].tokens > tokens) a = mid + 1;
        else b = mid;
    }
    if (a > lo) lo = a;
    slot = dcp__gfill_find(f, lo + m);
    return slot - m < hi ? slot - m : -1;
}

static void dcp__gfill_place(dcp__gfill *f, int32_t p, int32_t m, int32_t microbatch,
                             int32_t first_rank, int32_t order, dcp__placement *placements)
{
    const int32_t s = f->entries[p].sample;
    f->alive[p + m] = p + m + 1;
    placements[s].microbatch = microbatch;
    placements[s].first_rank = first_rank;
    placements[s].cp = f->widths[m];
    placements[s].order = order;
    placements[s].sample = s;
}

/* Opens a group of width m at first_rank with entry p and fills it up to `cap` seconds and
   the memory cap with more entries of its width. Returns how many it holds. */
static int32_t dcp__gfill_group(dcp__gfill *f, int32_t p, int32_t m, int32_t microbatch,
                                int32_t first_rank, double cap, dcp__placement *placements)
{
    const int64_t room = f->x->config->max_tokens_per_rank;
    double time = f->group_ring[m] + f->entries[p].seconds;
    int64_t tokens = f->entries[p].tokens;
    int32_t held = 1;
    dcp__gfill_place(f, p, m, microbatch, first_rank, 0, placements);
    while ((p = dcp__gfill_take(f, m, cap - time, room - tokens)) >= 0) {
        dcp__gfill_place(f, p, m, microbatch, first_rank, held++, placements);
        time += f->entries[p].seconds;
        tokens += f->entries[p].tokens;
    }
    return held;
}

/* One microbatch: the slowest entry left opens it; the free ranks after each group go to the
   slowest entry of any width they hold that finishes within the cap. Returns the samples
   placed. */
static int32_t dcp__gfill_microbatch(dcp__gfill *f, int32_t microbatch, double slack,
                                     dcp__placement *placements)
{
    const int64_t room = f->x->config->max_tokens_per_rank;
    const int32_t ranks = f->x->config->ranks;
    int32_t m, first = 0, placed = 0, open_width = -1, open_at = -1;
    double cap;
    for (m = 0; m < f->width_count; m++) { /* the slowest left */
        int32_t p = dcp__gfill_take(f, m, DCP__GFILL_INFINITY, room);
        if (p >= 0 && (open_at < 0 || f->entries[p].seconds > f->entries[open_at].seconds)) {
            open_at = p;
            open_width = m;
        }
    }
    if (open_at < 0) return 0;
    cap = (f->group_ring[open_width] + f->entries[open_at].seconds) * (1.0 + slack);
    placed += dcp__gfill_group(f, open_at, open_width, microbatch, 0, cap, placements);
    first = f->widths[open_width];
    for (;;) {
        int32_t best = -1, best_width = -1;
        for (m = 0; m < f->width_count && first + f->widths[m] <= ranks; m++) {
            int32_t p = dcp__gfill_take(f, m, cap - f->group_ring[m], room);
            if (p >= 0 && (best < 0 || f->entries[p].seconds > f->entries[best].seconds)) {
                best = p;
                best_width = m;
            }
        }
        if (best < 0) break;
        placed += dcp__gfill_group(f, best, best_width, microbatch, first, cap, placements);
        first += f->widths[best_width];
    }
    return placed;
}

/* The interval fill of samples ids[0 .. n) from microbatch base on: *microbatches of them (0
   when a sample fits no width of the menu). */
static void dcp__gfill_run(dcp__gfill *f, const int32_t *ids, int32_t n, dcp__gfill_width how,
                           double target, double slack, int32_t base,
                           dcp__placement *placements, int32_t *microbatches)
{
    int32_t left = n, k = 0;
    *microbatches = 0;
    if (!dcp__gfill_prepare(f, ids, n, how, target)) return;
    while (left > 0) left -= dcp__gfill_microbatch(f, base + k++, slack, placements);
    *microbatches = k;
}

/* The split's samples beyond the tree on a range set: the interval fill at their narrowest
   widths, into microbatches of their own. x->ids[0 .. n) holds them. */
static dcp_status dcp__sets_off_tree_fill(dcp__sets *x, int32_t n, dcp__placement *placements,
                                          int32_t *microbatches, dcp_error *error)
{
    dcp__gfill f;
    dcp_status status = dcp__gfill_init(&f, x, error);
    if (status != DCP_OK) return status;
    dcp__gfill_run(&f, x->ids, n, DCP__GFILL_NARROW, 0.0, 0.0, 0, placements, microbatches);
    dcp__gfill_free(&f);
    return DCP_OK;
}

/* ------------------------------------------------------------------ the candidates */

/* Whether some sample fits no power of two: the static baseline then runs every sample on
   the whole pool (the CP size the longest needs). */
static int dcp__sets_needs_pool(const dcp__sets *x)
{
    int32_t s;
    for (s = 0; s < x->count; s++)
        if (x->pool && x->cp_min[s] == x->pool) return 1;
    return 0;
}

/* The interval fill of every sample, one variant. */
static dcp_status dcp__sets_gfill(dcp__sets *x, dcp__gfill_width how, double target_share,
                                  double slack, dcp__placement *placements,
                                  int32_t *microbatches, dcp_error *error)
{
    dcp__gfill f;
    double target = 0.0;
    int32_t s;
    dcp_status status = dcp__gfill_init(&f, x, error);
    if (status != DCP_OK) return status;
    if (how == DCP__GFILL_WIDEN)
        status = dcp__lower_bounds(x->config, x->lengths, x->count, x->cp_min,
                                   &x->config->sync_ranks, 1, &target, error);
    for (s = 0; s < x->count; s++) x->ids[s] = s;
    if (status == DCP_OK)
        dcp__gfill_run(&f, x->ids, x->count, how, target * target_share, slack, 0, placements,
                       microbatches);
    dcp__gfill_free(&f);
    return status;
}

/* The greedy baseline of the set: on the aligned sets the buddy tree's greedy after the
   pool's samples; on the others the interval fill at every sample's narrowest width (one
   microbatch at a time, the slowest first, the rest where they fit). */
static dcp_status dcp__sets_greedy(dcp__sets *x, dcp__placement *placements,
                                   int32_t *microbatches, dcp_error *error)
{
    if (dcp__cp_aligned(x->config))
        return dcp__sets_split(x, DCP_STRATEGY_GREEDY, placements, microbatches, error);
    return dcp__sets_gfill(x, DCP__GFILL_NARROW, 0.0, 0.0, placements, microbatches, error);
}

/* The static baseline of the set: every sample at the CP size the longest needs. */
static dcp_status dcp__sets_static(dcp__sets *x, dcp__placement *placements,
                                   int32_t *microbatches, dcp_error *error)
{
    int32_t s, cp = x->config->min_cp;
    int64_t *tokens;
    dcp_status status;
    if (dcp__cp_aligned(x->config))
        return dcp__sets_needs_pool(x)
                   ? dcp__sets_widest(x, 0, placements, microbatches, error)
                   : dcp__sets_split(x, DCP_STRATEGY_STATIC, placements, microbatches, error);
    for (s = 0; s < x->count; s++)
        if (x->cp_min[s] > cp) cp = x->cp_min[s];
    tokens = x->sub_lengths; /* scratch of count int64 */
    for (s = 0; s < x->count; s++) tokens[s] = dcp__tokens_at(x->config, x->lengths[s], cp);
    status = dcp__static_pack(x->config, tokens, x->count, cp, placements, microbatches, error);
    return status;
}

static dcp_status dcp__sets_split_dynamic(dcp__sets *x, dcp__placement *placements,
                                          int32_t *microbatches, dcp_error *error)
{
    return dcp__sets_split(x, DCP_STRATEGY_DYNAMIC, placements, microbatches, error);
}

static dcp_status dcp__sets_widest_first(dcp__sets *x, dcp__placement *placements,
                                         int32_t *microbatches, dcp_error *error)
{
    if (dcp__cp_aligned(x->config))
        return dcp__sets_widest(x, 1, placements, microbatches, error);
    return dcp__sets_gfill(x, DCP__GFILL_WIDEST, 0.0, 0.0, placements, microbatches, error);
}

static dcp_status dcp__sets_megatron(dcp__sets *x, dcp__placement *placements,
                                     int32_t *microbatches, dcp_error *error)
{
    dcp__batch batch = dcp__sets_batch(x);
    return dcp__plan_megatron(&batch, placements, microbatches, error);
}

/* The interval fill's widening variants (on the sets ANY and LIST): samples whose time alone
   exceeds the lower bound over DCP__WIDEN_HALF_DIVISOR / DCP__WIDEN_EIGHTH_DIVISOR widened,
   and the first also with groups filled up to DCP__GFILL_SLACK above the microbatch's
   opening time (as the buddy tree's fills do). */
#define DCP__GFILL_SLACK 0.5
static dcp_status dcp__sets_widen_half(dcp__sets *x, dcp__placement *placements,
                                       int32_t *microbatches, dcp_error *error)
{
    return dcp__sets_gfill(x, DCP__GFILL_WIDEN, 1.0 / DCP__WIDEN_HALF_DIVISOR, 0.0, placements,
                           microbatches, error);
}

static dcp_status dcp__sets_widen_eighth(dcp__sets *x, dcp__placement *placements,
                                         int32_t *microbatches, dcp_error *error)
{
    return dcp__sets_gfill(x, DCP__GFILL_WIDEN, 1.0 / DCP__WIDEN_EIGHTH_DIVISOR, 0.0,
                           placements, microbatches, error);
}

static dcp_status dcp__sets_widen_slack(dcp__sets *x, dcp__placement *placements,
                                        int32_t *microbatches, dcp_error *error)
{
    return dcp__sets_gfill(x, DCP__GFILL_WIDEN, 1.0 / DCP__WIDEN_HALF_DIVISOR, DCP__GFILL_SLACK,
                           placements, microbatches, error);
}

/* Under ANY, Megatron's sizes are a subset: their plan (the pool first, the buddy tree below
   it) is a candidate, so every size is never behind Megatron's sizes, within the same
   min_cp and max_cp. Not built where min_cp is none of Megatron's sizes. */
static int dcp__sets_any(const dcp__sets *x) { return x->config->cp_sizes == DCP_CP_SIZES_ANY; }

static dcp_status dcp__sets_megatron_sizes(dcp__sets *x, dcp__placement *placements,
                                           int32_t *microbatches, dcp_error *error)
{
    dcp_config sizes = *x->config, resolved;
    dcp_plan *plan = NULL;
    dcp_status status;
    *microbatches = 0;
    sizes.cp_sizes = DCP_CP_SIZES_MEGATRON;
    while (sizes.max_cp > sizes.min_cp && !dcp__cp_in_set(&sizes, sizes.max_cp))
        sizes.max_cp--; /* the largest of Megatron's sizes within max_cp */
    if (dcp_config_resolve(&sizes, &resolved, NULL) != DCP_OK) return DCP_OK;
    status = dcp_plan_create(&resolved, x->lengths, x->count, &plan, NULL);
    if (status == DCP_ERROR_OUT_OF_MEMORY || status == DCP_ERROR_OVERFLOW)
        return dcp_error_set(error, status, "planning Megatron's sizes as a candidate failed");
    if (status != DCP_OK) return DCP_OK; /* e.g. a sample only a size of ANY fits */
    dcp__sets_take_plan(plan, NULL, 0, placements);
    *microbatches = plan->num_microbatches;
    dcp_plan_destroy(plan);
    return DCP_OK;
}

static int dcp__sets_everywhere(const dcp__sets *x)
{
    (void)x;
    return 1;
}

static int dcp__sets_on_ranges(const dcp__sets *x) { return !dcp__cp_aligned(x->config); }

typedef struct dcp__sets_entry {
    const char *name;
    int (*applies)(const dcp__sets *x);
    dcp_status (*build)(dcp__sets *x, dcp__placement *placements, int32_t *microbatches,
                        dcp_error *error);
} dcp__sets_entry;

/* The dynamic strategy's candidates on this path, in order (ties go to the earlier): the
   split, the widest, Megatron's scheduler, the baselines themselves (so that the guarantee
   holds to the bit, after a repair too), and on ranges the interval fill's variants. */
static const dcp__sets_entry dcp__sets_table[] = {
    {"split: the pool's samples, then the buddy tree", dcp__sets_everywhere,
     dcp__sets_split_dynamic},
    {"widest", dcp__sets_everywhere, dcp__sets_widest_first},
    {"Megatron's scheduler", dcp__sets_everywhere, dcp__sets_megatron},
    {"greedy baseline", dcp__sets_everywhere, dcp__sets_greedy},
    {"static baseline", dcp__sets_everywhere, dcp__sets_static},
    {"interval fill, widened at half the bound", dcp__sets_on_ranges, dcp__sets_widen_half},
    {"interval fill, widened at an eighth", dcp__sets_on_ranges, dcp__sets_widen_eighth},
    {"interval fill, widened at half, slack", dcp__sets_on_ranges, dcp__sets_widen_slack},
    {"Megatron's sizes", dcp__sets_any, dcp__sets_megatron_sizes},
};
#define DCP__SETS_CANDIDATES DCP__COUNT(dcp__sets_table)

/* Candidate `which` of the strategy into placements; *microbatches 0 when not built. */
static dcp_status dcp__sets_candidate(dcp__sets *x, dcp_strategy strategy, int32_t which,
                                      dcp__placement *placements, int32_t *microbatches,
                                      dcp_error *error)
{
    dcp_status status = DCP_OK;
    *microbatches = 0;
    if (strategy == DCP_STRATEGY_STATIC)
        return which == 0 ? dcp__sets_static(x, placements, microbatches, error) : DCP_OK;
    if (strategy == DCP_STRATEGY_GREEDY)
        return which == 0 ? dcp__sets_greedy(x, placements, microbatches, error) : DCP_OK;
    if (!dcp__sets_table[which].applies(x)) return DCP_OK;
    DCP_PLANNER_TRACE(dcp__sets_table[which].name, 1);
    status = dcp__sets_table[which].build(x, placements, microbatches, error);
    DCP_PLANNER_TRACE(dcp__sets_table[which].name, 0);
    return status;
}

/* dcp_plan_create for a config with a group of the whole pool outside the buddy tree or with
   cover_ranks: the fastest covering candidate. */
static dcp_status dcp__plan_sets(const dcp_config *config, const int64_t *lengths,
                                 int32_t count, dcp_plan **plan, dcp_error *error)
{
    dcp__placement *candidates[DCP__SETS_CANDIDATES];
    int32_t microbatches[DCP__SETS_CANDIDATES], built = 0, which;
    dcp__sets x;
    dcp__batch batch;
    dcp_status status = dcp__sets_init(&x, config, lengths, count, error);
    if (status != DCP_OK) return status;
    for (which = 0; which < DCP__SETS_CANDIDATES && status == DCP_OK; which++) {
        int covered = 1;
        candidates[built] = (dcp__placement *)dcp__alloc_array(
            &config->allocator, (size_t)count, sizeof(dcp__placement), "candidate", error);
        if (!candidates[built]) {
            status = error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
            break;
        }
        status = dcp__sets_candidate(&x, config->strategy, which, candidates[built],
                                     &microbatches[built], error);
        if (status == DCP_OK && microbatches[built] > 0 && config->cover_ranks)
            status = dcp__cover_ranks(&x, candidates[built], &microbatches[built], &covered,
                                      error);
        if (status == DCP_OK && microbatches[built] > 0 && covered) built++;
        else dcp_free(&config->allocator, candidates[built]);
    }
    if (status == DCP_OK && built == 0)
        status = dcp_error_set(error, DCP_ERROR_INFEASIBLE,
                               "cover_ranks: no plan of %d samples holds a sample on each of the "
                               "%d ranks with CP sizes %s in [%d, %d]",
                               (int)count, (int)config->ranks,
                               dcp_cp_sizes_name(config->cp_sizes), (int)config->min_cp,
                               (int)config->max_cp);
    batch = dcp__sets_batch(&x);
    if (status == DCP_OK)
        status = dcp__plan_fastest(&batch, candidates, microbatches, built, plan, error);
    for (which = 0; which < built; which++) dcp_free(&config->allocator, candidates[which]);
    dcp__sets_free(&x);
    return status;
}

/* ----------------------------------------------------------------------- memory bound
   dcp_plan_create's peak, bounded before it allocates (config.memory_limit), so that a huge
   input fails at once with a message instead of growing until the system kills the process.
   The planner's arrays are of six kinds: per sample (orders, placements, the plan), per
   sample and CP level L = log2 max_cp + 1 (the batch's token and tick tables), per leaf of
   the rank tree (the ranks rounded up to a power of two), per leaf and level (the cells of
   the dynamic search's trees, two alive at once), and the E = D unloading's table: per
   microbatch x rank cell and per microbatch, where microbatches <= samples and no table is
   built beyond DCP__UNLOAD_MAX_CELLS cells. Each strategy has a model of its own, and a second
   one where it plans on CP sets (dcp__plans_on_sets), whose arrays differ. The figures are
   1.25 times the smallest upper bound (a linear program) over the peaks a counting allocator
   measured with every strategy, CP set, E, cover_ranks and four length shapes, 1 to 10^6
   samples on 2 to 2^20 ranks (the dynamic search's bytes per unloading microbatch 1.5 times:
   lengths drawn otherwise came within 8% of 1.25); tests/test_memory.c fails when a peak
   exceeds the bound (bench/RESULTS.md, "Memory bound"). */
typedef struct dcp__memory_model {
    int64_t base, per_sample, per_sample_level, per_leaf, per_leaf_level, per_unload_cell,
        per_unload_microbatch;
} dcp__memory_model;

/* [strategy][planned on CP sets] */
static const dcp__memory_model dcp__memory_models[3][2] = {
    /* DCP_STRATEGY_DYNAMIC */ {{8105, 0, 112, 545, 126, 53, 1386},
                                {11680, 0, 39, 558, 124, 53, 1386}},
    /* DCP_STRATEGY_STATIC */ {{191, 105, 20, 45, 1, 0, 1}, {191, 189, 20, 45, 1, 0, 2}},
    /* DCP_STRATEGY_GREEDY */ {{1160, 176, 20, 145, 1, 0, 0}, {1161, 260, 20, 145, 1, 1, 0}}};

/* The planner of CP sets (a group of the whole pool, cover_ranks, or groups on ranges)
   rather than the buddy tree of the powers of two. */
static int dcp__plans_on_sets(const dcp_config *c)
{
    return dcp__pool_cp(c) || c->cover_ranks || !dcp__cp_aligned(c);
}

/* The bound of a resolved config; below 2^53 bytes for any count and config (2^31 samples x
   a few KiB), so int64 holds it and a double prints it exactly enough. */
static int64_t dcp__memory_bound(const dcp_config *c, int32_t count)
{
    const dcp__memory_model *m = &dcp__memory_models[c->strategy][dcp__plans_on_sets(c)];
    const int64_t samples = count, levels = dcp__log2_int(c->max_cp) + 1;
    const int64_t leaves = dcp__leaf_base(c->ranks);
    int64_t cells = samples * c->ranks, microbatches = samples;
    if (cells > DCP__UNLOAD_MAX_CELLS) cells = DCP__UNLOAD_MAX_CELLS;
    if (microbatches > DCP__UNLOAD_MAX_CELLS / c->ranks)
        microbatches = DCP__UNLOAD_MAX_CELLS / c->ranks;
    return m->base + samples * (m->per_sample + m->per_sample_level * levels) +
           leaves * (m->per_leaf + m->per_leaf_level * levels) + cells * m->per_unload_cell +
           microbatches * m->per_unload_microbatch;
}

DCPDEF dcp_status dcp_plan_memory_estimate(const dcp_config *config, int32_t count,
                                           int64_t *bytes, dcp_error *error)
{
    dcp_config c;
    dcp_status status;
    if (!bytes) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "bytes must not be NULL");
    if ((status = dcp_config_resolve(config, &c, error)) != DCP_OK) return status;
    if (count < 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "count must be >= 1, got %d",
                             (int)count);
    *bytes = dcp__memory_bound(&c, count);
    return dcp_error_clear(error);
}

/* A byte count in the largest binary unit it reaches (2^10 steps), for messages; returns the
   decimals to print it with (none for bytes). */
static int dcp__binary_size(int64_t bytes, double *value, const char **unit)
{
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    size_t i = 0;
    *value = (double)bytes;
    while (*value >= 1024.0 && i + 1 < sizeof units / sizeof units[0]) *value /= 1024.0, i++;
    *unit = units[i];
    return i > 0;
}

static dcp_status dcp__check_memory(const dcp_config *c, int32_t count, dcp_error *error)
{
    int64_t need = dcp__memory_bound(c, count);
    const char *need_unit, *limit_unit;
    double need_value, limit_value;
    int need_decimals, limit_decimals;
    if (need <= c->memory_limit) return DCP_OK;
    need_decimals = dcp__binary_size(need, &need_value, &need_unit);
    limit_decimals = dcp__binary_size(c->memory_limit, &limit_value, &limit_unit);
    return dcp_error_set(error, DCP_ERROR_OUT_OF_MEMORY,
                         "plan of %d samples on %d ranks needs about %.*f %s > memory limit "
                         "%.*f %s (config.memory_limit)",
                         (int)count, (int)c->ranks, need_decimals, need_value, need_unit,
                         limit_decimals, limit_value, limit_unit);
}

DCPDEF dcp_status dcp_plan_create(const dcp_config *config, const int64_t *lengths,
                                  int32_t count, dcp_plan **plan, dcp_error *error)
{
    dcp_config c;
    dcp_status status;
    if (!plan) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "plan must not be NULL");
    *plan = NULL;
    if ((status = dcp_config_resolve(config, &c, error)) != DCP_OK) return status;
    if (count < 1 || !lengths) return dcp__check_samples(&c, lengths, count, NULL, error);
    if ((status = dcp__check_memory(&c, count, error)) != DCP_OK) return status;
    if (dcp__plans_on_sets(&c))
        status = dcp__plan_sets(&c, lengths, count, plan, error);
    else
        status = dcp__plan_pow2(&c, lengths, count, plan, error);
    return status == DCP_OK ? dcp_error_clear(error) : status;
}

/* -- src/plan_readers.h -- */
/* --------------------------------------------------------------------------- validator */

static dcp_status dcp__validate_shape(const dcp_plan *plan, dcp_error *error)
{
    int32_t k;
    if (plan->num_samples < 1 || !plan->sample_lengths || !plan->group_samples)
        return dcp_error_set(error, DCP_ERROR_INVALID_PLAN, "plan has %d samples (need >= 1)",
                             (int)plan->num_samples);
    if (plan->num_microbatches < 1 || !plan->microbatch_offsets ||
        plan->num_microbatches % plan->config.microbatch_multiple != 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_PLAN,
                             "plan has %d microbatches; need a positive multiple of %d",
                             (int)plan->num_microbatches, (int)plan->config.microbatch_multiple);
    if (plan->num_groups < 1 || plan->num_groups > plan->num_samples || !plan->groups)
        return dcp_error_set(error, DCP_ERROR_INVALID_PLAN, "plan has %d groups for %d samples",
                             (int)plan->num_groups, (int)plan->num_samples);
    if (plan->microbatch_offsets[0] != 0 ||
        plan->microbatch_offsets[plan->num_microbatches] != plan->num_groups)
        return dcp_error_set(error, DCP_ERROR_INVALID_PLAN,
                             "microbatch offsets must run from 0 to num_groups %d",
                             (int)plan->num_groups);
    for (k = 0; k < plan->num_microbatches; k++)
        if (plan->microbatch_offsets[k + 1] < plan->microbatch_offsets[k])
            return dcp_error_set(error, DCP_ERROR_INVALID_PLAN,
                                 "microbatch %d has a negative group count", (int)k);
    return DCP_OK;
}

static dcp_status dcp__validate_group(const dcp_plan *plan, int32_t k, const dcp_group *g,
                                      int32_t expected_offset, unsigned char *seen,
                                      dcp_error *error)
{
    const dcp_config *c = &plan->config;
    int64_t tokens = 0;
    int32_t i;
    if (!dcp_cp_size_allowed(c, g->cp))
        return dcp_error_set(error, DCP_ERROR_INVALID_PLAN,
                             "microbatch %d: group at rank %d has cp %d, not a CP size of "
                             "cp_sizes %s in [%d, %d]",
                             (int)k, (int)g->first_rank, (int)g->cp,
                             dcp_cp_sizes_name(c->cp_sizes), (int)c->min_cp, (int)c->max_cp);
    if (g->first_rank < 0 || (dcp__cp_aligned(c) && g->first_rank % g->cp != 0) ||
        g->first_rank > c->ranks - g->cp)
        return dcp_error_set(error, DCP_ERROR_INVALID_PLAN,
                             "microbatch %d: group at rank %d with cp %d is not %s of the %d "
                             "ranks",
                             (int)k, (int)g->first_rank, (int)g->cp,
                             dcp__cp_aligned(c) ? "an aligned block" : "a range", (int)c->ranks);
    if (g->sample_count < 1 || g->sample_offset != expected_offset ||
        g->sample_count > plan->num_samples - expected_offset)
        return dcp_error_set(error, DCP_ERROR_INVALID_PLAN,
                             "microbatch %d: group at rank %d holds samples [%d, +%d); expected a "
                             "non-empty range from %d",
                             (int)k, (int)g->first_rank, (int)g->sample_offset,
                             (int)g->sample_count, (int)expected_offset);
    for (i = g->sample_offset; i < g->sample_offset + g->sample_count; i++) {
        int32_t s = plan->group_samples[i];
        int64_t length;
        if (s < 0 || s >= plan->num_samples)
            return dcp_error_set(error, DCP_ERROR_INVALID_PLAN,
                                 "microbatch %d: sample id %d outside [0, %d)", (int)k, (int)s,
                                 (int)plan->num_samples);
        if (seen[s])
            return dcp_error_set(error, DCP_ERROR_INVALID_PLAN,
                                 "sample %d appears twice (again in microbatch %d)", (int)s,
                                 (int)k);
        seen[s] = 1;
        length = plan->sample_lengths[s];
        if (length < 1 || length > DCP_MAX_SAMPLE_LENGTH)
            return dcp_error_set(error, DCP_ERROR_INVALID_PLAN, "sample %d has length %lld", (int)s,
                                 (long long)length);
        tokens += dcp__padded(c, length, g->cp) / g->cp;
        if (tokens > c->max_tokens_per_rank)
            return dcp_error_set(error, DCP_ERROR_INVALID_PLAN,
                                 "microbatch %d: group at rank %d (cp %d) holds more than "
                                 "max_tokens_per_rank %lld padded tokens per rank at sample %d",
                                 (int)k, (int)g->first_rank, (int)g->cp,
                                 (long long)c->max_tokens_per_rank, (int)s);
    }
    return DCP_OK;
}

/* The first rank no group of the plan's valid groups holds, or -1 when every rank holds a
   sample somewhere (cover_ranks). reach[r] is the furthest end of a group starting at r, so
   the sweep is O(groups + ranks) however wide the groups; -2 when reach cannot be allocated. */
static int32_t dcp__first_idle_rank(const dcp_plan *plan, dcp_error *error)
{
    const int32_t ranks = plan->config.ranks;
    int32_t *reach, g, r, covered = 0, idle = -1;
    reach = (int32_t *)dcp__alloc_array(&plan->config.allocator, (size_t)ranks, sizeof *reach,
                                        "cover check", error);
    if (!reach) return -2;
    for (r = 0; r < ranks; r++) reach[r] = 0;
    for (g = 0; g < plan->num_groups; g++) {
        const dcp_group *group = &plan->groups[g];
        if (group->first_rank + group->cp > reach[group->first_rank])
            reach[group->first_rank] = group->first_rank + group->cp;
    }
    for (r = 0; r < ranks && idle < 0; r++) {
        if (reach[r] > covered) covered = reach[r];
        if (covered <= r) idle = r;
    }
    dcp_free(&plan->config.allocator, reach);
    return idle;
}

static dcp_status dcp__validate_cover(const dcp_plan *plan, dcp_error *error)
{
    int32_t idle = dcp__first_idle_rank(plan, error);
    if (idle == -2) return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    if (idle >= 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_PLAN,
                             "rank %d holds no sample in the whole plan (config.cover_ranks 1)",
                             (int)idle);
    return DCP_OK;
}

DCPDEF dcp_status dcp_plan_validate(const dcp_plan *plan, dcp_error *error)
{
    dcp_config resolved;
    unsigned char *seen;
    int32_t k, g, expected = 0;
    dcp_status status;
    if (!plan) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "plan must not be NULL");
    if ((status = dcp_config_resolve(&plan->config, &resolved, error)) != DCP_OK) return status;
    if ((status = dcp__validate_shape(plan, error)) != DCP_OK) return status;
    seen = (unsigned char *)dcp__alloc_array(&plan->config.allocator, (size_t)plan->num_samples,
                                             1, "validator", error);
    if (!seen) return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    memset(seen, 0, (size_t)plan->num_samples);
    for (k = 0; k < plan->num_microbatches && status == DCP_OK; k++) {
        int32_t next_free_rank = 0;
        for (g = plan->microbatch_offsets[k];
             g < plan->microbatch_offsets[k + 1] && status == DCP_OK; g++) {
            const dcp_group *group = &plan->groups[g];
            status = dcp__validate_group(plan, k, group, expected, seen, error);
            if (status != DCP_OK) break; /* its fields are not safe to add up */
            if (group->first_rank < next_free_rank)
                status = dcp_error_set(error, DCP_ERROR_INVALID_PLAN,
                                       "microbatch %d: group at rank %d overlaps or precedes the "
                                       "previous group (ranks must increase)",
                                       (int)k, (int)group->first_rank);
            next_free_rank = group->first_rank + group->cp;
            expected += group->sample_count;
        }
    }
    if (status == DCP_OK && expected != plan->num_samples)
        status = dcp_error_set(error, DCP_ERROR_INVALID_PLAN, "groups hold %d of %d samples",
                               (int)expected, (int)plan->num_samples);
    dcp_free(&plan->config.allocator, seen);
    if (status == DCP_OK && plan->config.cover_ranks) status = dcp__validate_cover(plan, error);
    return status == DCP_OK ? dcp_error_clear(error) : status;
}

DCPDEF dcp_status dcp_plan_trusted(const dcp_plan *plan, dcp_error *error)
{
    if (plan && plan->seal != 0 && plan->seal == dcp__plan_seal_of(plan))
        return dcp_error_clear(error);
    return dcp_plan_validate(plan, error);
}

/* --------------------------------------------------------------------------- simulator */

/* Validates the plan and the optional cost override; *config gets the model to use. */
static dcp_status dcp__simulation_setup(const dcp_plan *plan, const dcp_cost_model *cost,
                                        dcp_config *config, double **finish, dcp_error *error)
{
    dcp_status status;
    if ((status = dcp_plan_trusted(plan, error)) != DCP_OK) return status;
    if ((status = dcp__check_sync_ranks(plan->config.sync_ranks, plan->config.ranks, error)) !=
        DCP_OK)
        return status;
    *config = plan->config;
    if (cost) {
        if ((status = dcp__check_cost(cost, error)) != DCP_OK) return status;
        config->cost = *cost;
    }
    *finish = (double *)dcp__alloc_array(&config->allocator, (size_t)config->ranks,
                                         sizeof(double), "simulator", error);
    return *finish ? DCP_OK : (error ? error->status : DCP_ERROR_OUT_OF_MEMORY);
}

/* What dcp_plan_schedule and dcp_plan_schedule_durations share; durations NULL: the model's. */
static dcp_status dcp__schedule_groups(const dcp_plan *plan, const dcp_cost_model *cost,
                                       const double *durations, double *group_start,
                                       double *group_end, dcp_error *error)
{
    dcp_config config;
    dcp_plan_stats stats;
    double *finish;
    int32_t g;
    dcp_status status;
    if (!group_start || !group_end)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "group_start and group_end must not be NULL");
    if ((status = dcp__simulation_setup(plan, cost, &config, &finish, error)) != DCP_OK)
        return status;
    for (g = 0; durations && g < plan->num_groups; g++)
        if (!dcp__is_finite(durations[g]) || durations[g] < 0.0) {
            dcp_free(&config.allocator, finish);
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "group_seconds[%d] = %g must be finite and >= 0", (int)g,
                                 durations[g]);
        }
    memset(&stats, 0, sizeof stats);
    dcp__schedule(plan, &config.cost, config.sync_ranks, durations, finish, group_start,
                  group_end, &stats);
    dcp_free(&config.allocator, finish);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_plan_schedule(const dcp_plan *plan, const dcp_cost_model *cost,
                                    double *group_start, double *group_end, dcp_error *error)
{
    return dcp__schedule_groups(plan, cost, NULL, group_start, group_end, error);
}

DCPDEF dcp_status dcp_plan_schedule_durations(const dcp_plan *plan, const double *group_seconds,
                                              double *group_start, double *group_end,
                                              dcp_error *error)
{
    if (!group_seconds)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "group_seconds must not be NULL");
    return dcp__schedule_groups(plan, NULL, group_seconds, group_start, group_end, error);
}

DCPDEF dcp_status dcp_plan_step_time(const dcp_plan *plan, const dcp_cost_model *cost,
                                     int32_t sync_ranks, double *seconds, dcp_error *error)
{
    dcp_config config;
    dcp_plan_stats stats;
    double *finish;
    dcp_status status;
    if (!seconds)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "seconds must not be NULL");
    if ((status = dcp__simulation_setup(plan, cost, &config, &finish, error)) != DCP_OK)
        return status;
    if (sync_ranks == 0) sync_ranks = config.sync_ranks;
    status = dcp__check_sync_ranks(sync_ranks, config.ranks, error);
    if (status == DCP_OK) {
        memset(&stats, 0, sizeof stats);
        dcp__schedule(plan, &config.cost, sync_ranks, NULL, finish, NULL, NULL, &stats);
        *seconds = stats.step_seconds;
    }
    dcp_free(&config.allocator, finish);
    return status == DCP_OK ? dcp_error_clear(error) : status;
}

DCPDEF dcp_status dcp_plan_simulate(const dcp_plan *plan, const dcp_cost_model *cost,
                                    dcp_plan_stats *stats, dcp_error *error)
{
    dcp_config config;
    double *finish, bounds[3];
    int32_t *cp_min, i, syncs[3]; /* bounds under the plan's E, E = 1 and E = D */
    dcp_status status;
    if (!stats) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "stats must not be NULL");
    if ((status = dcp__simulation_setup(plan, cost, &config, &finish, error)) != DCP_OK)
        return status;
    cp_min = (int32_t *)dcp__alloc_array(&config.allocator, (size_t)plan->num_samples,
                                         sizeof(int32_t), "simulator", error);
    if (!cp_min) {
        dcp_free(&config.allocator, finish);
        return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    }
    memset(stats, 0, sizeof *stats);
    dcp__schedule(plan, &config.cost, config.sync_ranks, NULL, finish, NULL, NULL, stats);
    stats->sync_ranks = config.sync_ranks;
    if (config.sync_ranks == 1)
        stats->dag_seconds = stats->step_seconds;
    else {
        dcp_plan_stats dag;
        memset(&dag, 0, sizeof dag);
        dcp__schedule(plan, &config.cost, 1, NULL, finish, NULL, NULL, &dag);
        stats->dag_seconds = dag.step_seconds;
    }
    for (i = 0; i < plan->num_samples; i++) {
        stats->valid_tokens += plan->sample_lengths[i];
        cp_min[i] = dcp__cp_min(&config, plan->sample_lengths[i]);
    }
    syncs[0] = config.sync_ranks;
    syncs[1] = 1;
    syncs[2] = config.ranks;
    status = dcp__lower_bounds(&config, plan->sample_lengths, plan->num_samples, cp_min, syncs, 3,
                               bounds, error);
    if (status == DCP_OK) {
        stats->lower_bound_seconds = bounds[0];
        stats->dag_lower_bound_seconds = bounds[1];
        stats->barrier_lower_bound_seconds = bounds[2];
    }
    stats->efficiency = stats->step_seconds > 0.0
                            ? stats->lower_bound_seconds / stats->step_seconds
                            : 1.0;
    stats->num_microbatches = plan->num_microbatches;
    stats->num_groups = plan->num_groups;
    dcp_free(&config.allocator, finish);
    dcp_free(&config.allocator, cp_min);
    return status == DCP_OK ? dcp_error_clear(error) : status;
}

/* ------------------------------------------------------------------------ SVG timeline
   Writes while the text fits and counts always, so one pass both sizes and fills the buffer.
   Geometry in px; the colours are Tableau's ten, one per CP level (the last shared above). */

#define DCP__SVG_PLOT_WIDTH 1000.0
#define DCP__SVG_PANEL_HEIGHT_MAX 640.0         /* all rows of a lone panel */
#define DCP__SVG_STACKED_PANEL_HEIGHT_MAX 260.0 /* all rows of one panel in a stack */
#define DCP__SVG_ROW_HEIGHT_MAX 18.0
#define DCP__SVG_MARGIN_LEFT 70.0
#define DCP__SVG_MARGIN_RIGHT 150.0
#define DCP__SVG_HEADING_HEIGHT 46.0
#define DCP__SVG_PANEL_TITLE_HEIGHT 34.0
#define DCP__SVG_AXIS_HEIGHT 46.0
#define DCP__SVG_TARGET_TICKS 10.0
#define DCP__SVG_LABEL_FONT_MAX 11.0    /* microbatch numbers in boxes; smaller in thin boxes */
#define DCP__SVG_LABEL_FONT_MIN 6.0     /* below it a box's number is left out, never clipped */
#define DCP__SVG_DIGIT_WIDTH 0.64       /* a digit's advance in em, at least that of the
                                           sans-serif fonts renderers pick: DejaVu Sans 0.636,
                                           Liberation Sans and Helvetica 0.556 */
#define DCP__SVG_LABEL_MARGIN 2.0       /* px kept clear between a label and its box's edge */
#define DCP__SVG_MIN_RANK_LABEL_SPACING 12.0
#define DCP__SVG_RANK_FONT 10.0
#define DCP__SVG_END_FONT 9.0           /* microbatch numbers above the panel */
#define DCP__SVG_END_ROW_HEIGHT 10.0    /* one band of them; a number overlapping the one
                                           before it in a band goes to the next band */
#define DCP__SVG_END_BANDS_MAX 64      /* bands of microbatch numbers: 64 bands of numbers
                                           of at most 7 digits hold 64 x 1000 px / 39 px > 1,600
                                           numbers per panel width; beyond, the last band
                                           takes the rest (crowded, still labelled) */
#define DCP__SVG_BOX_STROKE 0.5
#define DCP__SVG_MIN_STROKED_ROW 3.0    /* thinner rows get no white outline (it would hide
                                           the colour at hundreds of ranks) */
#define DCP__SVG_LEGEND_STEP 18.0
#define DCP__SVG_TITLE_SAMPLES_MAX 24   /* sample ids listed in a box's hover text */
#define DCP__SVG_STATIC_TITLE_CAPACITY 32

static const char *const dcp__svg_colors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                              "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
                                              "#9c755f", "#bab0ac"};
#define DCP__SVG_COLOR_COUNT ((int)(sizeof dcp__svg_colors / sizeof dcp__svg_colors[0]))

typedef struct dcp__text {
    char *data;      /* NULL: only count */
    size_t capacity;
    size_t size;     /* bytes produced so far, written or not */
} dcp__text;

static void dcp__text_printf(dcp__text *t, const char *format, ...) DCP_PRINTF_LIKE(2, 3);

static void dcp__text_printf(dcp__text *t, const char *format, ...)
{
    int room = t->data && t->size < t->capacity, n;
    va_list args;
    va_start(args, format);
    n = vsnprintf(room ? t->data + t->size : NULL, room ? t->capacity - t->size : 0, format,
                  args);
    va_end(args);
    if (n > 0) t->size += (size_t)n;
}

/* Caller text inside SVG: the five XML specials become entities. */
static void dcp__text_escaped(dcp__text *t, const char *text)
{
    for (; *text; text++) switch (*text) {
        case '&': dcp__text_printf(t, "&amp;"); break;
        case '<': dcp__text_printf(t, "&lt;"); break;
        case '>': dcp__text_printf(t, "&gt;"); break;
        case '\'': dcp__text_printf(t, "&apos;"); break;
        case '"': dcp__text_printf(t, "&quot;"); break;
        default: dcp__text_printf(t, "%c", *text);
        }
}

/* The CP sizes all panels use, increasing: their colours and the legend. */
#define DCP__SVG_MAX_SIZES 64
typedef struct dcp__svg_sizes {
    int32_t cp[DCP__SVG_MAX_SIZES];
    int32_t count;
} dcp__svg_sizes;

typedef struct dcp__svg_panel {
    const dcp__svg_sizes *sizes;
    const dcp_plan *plan;
    dcp_plan_stats stats;
    const char *title;
    char static_title[DCP__SVG_STATIC_TITLE_CAPACITY];
    double *start, *end; /* [num_groups] seconds */
    double *microbatch_end; /* [num_microbatches] seconds: the last end of its groups */
    int32_t *end_band;   /* [num_microbatches] the band of its number above the panel */
    int32_t end_bands;   /* bands used */
    double top;          /* y of the first rank row */
    double row;          /* px per rank */
    double x_scale;      /* px per ms */
} dcp__svg_panel;

/* A size's colour: by its place among the sizes the panels use (the last colour for every
   size past the palette). */
static const char *dcp__svg_color(const dcp__svg_sizes *sizes, int32_t cp)
{
    int32_t i;
    for (i = 0; i < sizes->count && sizes->cp[i] != cp; i++) {}
    return dcp__svg_colors[i < DCP__SVG_COLOR_COUNT ? i : DCP__SVG_COLOR_COUNT - 1];
}

/* 1, 2 or 5 times a power of ten, giving about DCP__SVG_TARGET_TICKS ticks over span. */
static double dcp__svg_tick(double span)
{
    double raw = span / DCP__SVG_TARGET_TICKS, magnitude = pow(10.0, floor(log10(raw)));
    double f = raw / magnitude;
    return (f < 1.5 ? 1.0 : f < 3.5 ? 2.0 : f < 7.5 ? 5.0 : 10.0) * magnitude;
}

static double dcp__svg_height(const dcp__svg_panel *p) { return p->row * p->plan->config.ranks; }

/* Height above the panel that the bands of microbatch numbers take beyond the first. */
static double dcp__svg_band_space(const dcp__svg_panel *p)
{
    return (p->end_bands > 1 ? p->end_bands - 1 : 0) * DCP__SVG_END_ROW_HEIGHT;
}

static double dcp__svg_x(const dcp__svg_panel *p, double seconds)
{
    return DCP__SVG_MARGIN_LEFT + seconds * 1e3 * p->x_scale;
}

static dcp_status dcp__svg_check(const dcp_plan *const *plans, int32_t count, const char *buffer,
                                 const size_t *size, dcp_error *error)
{
    int32_t i;
    dcp_status status;
    if (!plans) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "plans must not be NULL");
    if (count < 1 || count > DCP_PLAN_SVG_MAX_PLANS)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "count %d is outside [1, DCP_PLAN_SVG_MAX_PLANS %d]", (int)count,
                             DCP_PLAN_SVG_MAX_PLANS);
    if (!buffer && !size)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "need a buffer or a size to fill");
    for (i = 0; i < count; i++) {
        if (!plans[i])
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "plans[%d] is NULL", (int)i);
        if ((status = dcp_plan_trusted(plans[i], error)) != DCP_OK) {
            if (error) {
                char reason[DCP_ERROR_MESSAGE_CAPACITY];
                memcpy(reason, error->message, sizeof reason);
                dcp_error_set(error, status, "plans[%d]: %.200s", (int)i, reason);
            }
            return status;
        }
        if (plans[i]->config.ranks != plans[0]->config.ranks ||
            plans[i]->num_samples != plans[0]->num_samples)
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "plans[%d] has %d ranks and %d samples, plans[0] %d and %d: a "
                                 "stack shows plans of one pool and one batch",
                                 (int)i, (int)plans[i]->config.ranks,
                                 (int)plans[i]->num_samples, (int)plans[0]->config.ranks,
                                 (int)plans[0]->num_samples);
    }
    return DCP_OK;
}

/* Simulates and schedules a panel's plan; its title defaults to the strategy's name. */
static dcp_status dcp__svg_panel_init(dcp__svg_panel *p, const dcp_plan *plan, const char *title,
                                      const dcp_cost_model *cost, dcp_error *error)
{
    const dcp_allocator *a = &plan->config.allocator;
    dcp_status status;
    p->plan = plan;
    if ((status = dcp_plan_simulate(plan, cost, &p->stats, error)) != DCP_OK) return status;
    p->start = (double *)dcp__alloc_array(a, (size_t)plan->num_groups, sizeof(double), "svg",
                                          error);
    p->end = (double *)dcp__alloc_array(a, (size_t)plan->num_groups, sizeof(double), "svg", error);
    if (!p->start || !p->end) return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    if ((status = dcp_plan_schedule(plan, cost, p->start, p->end, error)) != DCP_OK)
        return status;
    p->microbatch_end = (double *)dcp__alloc_array(a, (size_t)plan->num_microbatches,
                                                   sizeof(double), "svg", error);
    p->end_band = (int32_t *)dcp__alloc_array(a, (size_t)plan->num_microbatches, sizeof(int32_t),
                                              "svg", error);
    if (!p->microbatch_end || !p->end_band) return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    p->title = title ? title : dcp_strategy_name(plan->config.strategy);
    if (!title && plan->config.strategy == DCP_STRATEGY_STATIC && plan->num_groups > 0) {
        /* every group of a static plan has the same size */
        snprintf(p->static_title, sizeof p->static_title, "static CP=%d", (int)plan->groups[0].cp);
        p->title = p->static_title;
    }
    return DCP_OK;
}

static void dcp__svg_panel_title(dcp__text *t, const dcp__svg_panel *p,
                                 const dcp__svg_panel *reference)
{
    const dcp_plan_stats *s = &p->stats;
    dcp__text_printf(t, "<text x='%.0f' y='%.2f' font-size='13'>", DCP__SVG_MARGIN_LEFT,
                     p->top - 18.0 - dcp__svg_band_space(p));
    dcp__text_escaped(t, p->title);
    dcp__text_printf(t, ": %d microbatches, step %.3f ms, lower bound %.3f ms (red), efficiency "
                        "%.3f",
                     (int)s->num_microbatches, s->step_seconds * 1e3,
                     s->lower_bound_seconds * 1e3, s->efficiency);
    if (reference && reference != p && reference->stats.step_seconds > 0.0) {
        dcp__text_printf(t, "; ");
        dcp__text_escaped(t, reference->title);
        dcp__text_printf(t, " is %.3fx faster", s->step_seconds / reference->stats.step_seconds);
    }
    dcp__text_printf(t, "</text>\n");
}

/* Width in px of a decimal number's text at a font size (digits are the widest glyphs). */
static double dcp__svg_number_width(int64_t value, double font)
{
    int digits = 1;
    while (value >= 10) value /= 10, digits++;
    return digits * DCP__SVG_DIGIT_WIDTH * font;
}

/* A label per rank when rows are tall enough, else one per aligned block of 2^j ranks
   ("32-63") beside a bracket spanning the block, so that every rank is labelled. */
static void dcp__svg_rank_labels(dcp__text *t, const dcp__svg_panel *p)
{
    const int32_t ranks = p->plan->config.ranks;
    const double x = DCP__SVG_MARGIN_LEFT - 6.0;
    int32_t r, every = 1;
    while (p->row * every < DCP__SVG_MIN_RANK_LABEL_SPACING) every *= 2;
    for (r = 0; r < ranks; r += every) {
        const int32_t last = r + every - 1 < ranks ? r + every - 1 : ranks - 1;
        const double top = p->top + r * p->row, bottom = p->top + (last + 1) * p->row;
        dcp__text_printf(t, "<text x='%.2f' y='%.2f' font-size='%.0f' text-anchor='end'>",
                         every == 1 ? x : x - 4.0, (top + bottom) / 2.0 + 3.5, DCP__SVG_RANK_FONT);
        if (every == 1)
            dcp__text_printf(t, "rank %d</text>\n", (int)r);
        else
            dcp__text_printf(t, "%d-%d</text>\n<line x1='%.2f' y1='%.2f' x2='%.2f' y2='%.2f' "
                                "stroke='#999' stroke-width='0.8'/>\n",
                             (int)r, (int)last, x - 1.0, top + 0.5, x - 1.0, bottom - 0.5);
    }
}

/* Vertical grid and tick labels every nice tick, the axis title, and the rank labels. */
static void dcp__svg_axes(dcp__text *t, const dcp__svg_panel *p, double axis_ms)
{
    double tick = dcp__svg_tick(axis_ms), height = dcp__svg_height(p);
    int32_t i, ticks = (int32_t)(axis_ms / tick + 1e-9);
    for (i = 0; i <= ticks; i++) {
        double x = DCP__SVG_MARGIN_LEFT + i * tick * p->x_scale;
        dcp__text_printf(t, "<line x1='%.2f' y1='%.2f' x2='%.2f' y2='%.2f' stroke='#ddd'/>\n", x,
                         p->top, x, p->top + height);
        dcp__text_printf(t, "<text x='%.2f' y='%.2f' font-size='11' text-anchor='middle'>%g"
                            "</text>\n",
                         x, p->top + height + 14.0, i * tick);
    }
    dcp__text_printf(t, "<text x='%.2f' y='%.2f' font-size='12' text-anchor='middle'>time (ms)"
                        "</text>\n",
                     DCP__SVG_MARGIN_LEFT + DCP__SVG_PLOT_WIDTH / 2.0, p->top + height + 30.0);
    dcp__svg_rank_labels(t, p);
}

/* Hover text of a group: microbatch, ranks, samples with their lengths, times. */
static void dcp__svg_group_title(dcp__text *t, const dcp__svg_panel *p, int32_t k, int32_t g)
{
    const dcp_plan *plan = p->plan;
    const dcp_group *group = &plan->groups[g];
    int32_t i;
    dcp__text_printf(t, "<title>microbatch %d, ", (int)k);
    if (group->cp == 1)
        dcp__text_printf(t, "rank %d (cp 1), ", (int)group->first_rank);
    else
        dcp__text_printf(t, "ranks %d-%d (cp %d), ", (int)group->first_rank,
                         (int)(group->first_rank + group->cp - 1), (int)group->cp);
    dcp__text_printf(t, "%d sample%s:", (int)group->sample_count,
                     group->sample_count == 1 ? "" : "s");
    for (i = 0; i < group->sample_count && i < DCP__SVG_TITLE_SAMPLES_MAX; i++) {
        int32_t s = plan->group_samples[group->sample_offset + i];
        dcp__text_printf(t, "%s %d (%lld tokens)", i ? "," : "", (int)s,
                         (long long)plan->sample_lengths[s]);
    }
    if (group->sample_count > DCP__SVG_TITLE_SAMPLES_MAX)
        dcp__text_printf(t, " and %d more",
                         (int)(group->sample_count - DCP__SVG_TITLE_SAMPLES_MAX));
    dcp__text_printf(t, "; %.3f-%.3f ms</title>", p->start[g] * 1e3, p->end[g] * 1e3);
}

/* A box's microbatch number, in the largest font up to DCP__SVG_LABEL_FONT_MAX that fits
   inside the box with a margin; left out when even DCP__SVG_LABEL_FONT_MIN does not fit. */
static void dcp__svg_box_label(dcp__text *t, double x, double y, double w, double h, int32_t k)
{
    double font = h - DCP__SVG_LABEL_MARGIN, fit_width;
    if (font > DCP__SVG_LABEL_FONT_MAX) font = DCP__SVG_LABEL_FONT_MAX;
    fit_width = (w - 2.0 * DCP__SVG_LABEL_MARGIN) / dcp__svg_number_width(k, 1.0);
    if (fit_width < font) font = fit_width;
    if (font < DCP__SVG_LABEL_FONT_MIN) return;
    dcp__text_printf(t, "<text x='%.3f' y='%.3f' font-size='%.1f' fill='white' "
                        "text-anchor='middle' pointer-events='none'>%d</text>\n",
                     x + w / 2.0, y + h / 2.0 + 0.35 * font, font, (int)k);
}

/* A box per group, numbered by its microbatch where the number fits. */
static void dcp__svg_groups(dcp__text *t, const dcp__svg_panel *p)
{
    const dcp_plan *plan = p->plan;
    const int stroked = p->row >= DCP__SVG_MIN_STROKED_ROW;
    int32_t k, g;
    for (k = 0; k < plan->num_microbatches; k++)
        for (g = plan->microbatch_offsets[k]; g < plan->microbatch_offsets[k + 1]; g++) {
            const dcp_group *group = &plan->groups[g];
            double x = dcp__svg_x(p, p->start[g]), y = p->top + group->first_rank * p->row;
            double w = dcp__svg_x(p, p->end[g]) - x, h = group->cp * p->row;
            dcp__text_printf(t, "<rect x='%.3f' y='%.3f' width='%.3f' height='%.3f' fill='%s'",
                             x, y, w, h, dcp__svg_color(p->sizes, group->cp));
            if (stroked)
                dcp__text_printf(t, " stroke='white' stroke-width='%.1f'", DCP__SVG_BOX_STROKE);
            dcp__text_printf(t, ">");
            dcp__svg_group_title(t, p, k, g);
            dcp__text_printf(t, "</rect>\n");
            dcp__svg_box_label(t, x, y, w, h, k);
        }
}

/* Each microbatch's end (its last group's) and the band of its number above the panel:
   numbers go left to right into the first band whose last number they clear, so every end is
   labelled and none overlaps another. Needs the panel's x scale. */
static void dcp__svg_end_bands(dcp__svg_panel *p)
{
    const dcp_plan *plan = p->plan;
    double band_right[DCP__SVG_END_BANDS_MAX];
    int32_t k, g, b;
    p->end_bands = 0;
    for (k = 0; k < plan->num_microbatches; k++) {
        double end = 0.0, x, half;
        for (g = plan->microbatch_offsets[k]; g < plan->microbatch_offsets[k + 1]; g++)
            if (p->end[g] > end) end = p->end[g];
        p->microbatch_end[k] = end;
        x = dcp__svg_x(p, end);
        half = dcp__svg_number_width(k, DCP__SVG_END_FONT) / 2.0 + DCP__SVG_LABEL_MARGIN / 2.0;
        for (b = 0; b < p->end_bands && band_right[b] > x - half; b++)
            ;
        if (b == DCP__SVG_END_BANDS_MAX) b = DCP__SVG_END_BANDS_MAX - 1; /* see the constant */
        if (b == p->end_bands) p->end_bands++;
        band_right[b] = x + half;
        p->end_band[k] = b;
    }
}

/* A dashed line where each microbatch ends, its number in its band above the panel. */
static void dcp__svg_microbatch_ends(dcp__text *t, const dcp__svg_panel *p)
{
    const dcp_plan *plan = p->plan;
    int32_t k;
    for (k = 0; k < plan->num_microbatches; k++) {
        const double x = dcp__svg_x(p, p->microbatch_end[k]);
        const double label_y = p->top - 4.0 - p->end_band[k] * DCP__SVG_END_ROW_HEIGHT;
        dcp__text_printf(t, "<line x1='%.2f' y1='%.2f' x2='%.2f' y2='%.2f' stroke='#333' "
                            "stroke-width='0.6' stroke-opacity='0.6' stroke-dasharray='3,3'>"
                            "<title>microbatch %d ends at %.3f ms</title></line>\n",
                         x, p->top - 3.0, x, p->top + dcp__svg_height(p), (int)k,
                         p->microbatch_end[k] * 1e3);
        dcp__text_printf(t, "<text x='%.2f' y='%.2f' font-size='%.0f' text-anchor='middle' "
                            "fill='#333'>%d</text>\n",
                         x, label_y - 1.0, DCP__SVG_END_FONT, (int)k);
    }
}

static void dcp__svg_lower_bound(dcp__text *t, const dcp__svg_panel *p)
{
    double x = dcp__svg_x(p, p->stats.lower_bound_seconds);
    dcp__text_printf(t, "<line x1='%.2f' y1='%.2f' x2='%.2f' y2='%.2f' stroke='#d62728' "
                        "stroke-width='1.5'><title>lower bound %.3f ms</title></line>\n",
                     x, p->top, x, p->top + dcp__svg_height(p),
                     p->stats.lower_bound_seconds * 1e3);
}

/* The sizes the panels' plans use, increasing (the first DCP__SVG_MAX_SIZES). */
static void dcp__svg_collect_sizes(dcp__svg_sizes *sizes, const dcp_plan *const *plans,
                                   int32_t count)
{
    int32_t i, g, j;
    sizes->count = 0;
    for (i = 0; i < count; i++)
        for (g = 0; g < plans[i]->num_groups; g++) {
            const int32_t cp = plans[i]->groups[g].cp;
            for (j = 0; j < sizes->count && sizes->cp[j] < cp; j++) {}
            if ((j < sizes->count && sizes->cp[j] == cp) || sizes->count == DCP__SVG_MAX_SIZES)
                continue;
            memmove(&sizes->cp[j + 1], &sizes->cp[j], (size_t)(sizes->count - j) * sizeof(int32_t));
            sizes->cp[j] = cp;
            sizes->count++;
        }
}

/* The CP sizes any panel uses, then the two kinds of line and what a box's number means. */
static void dcp__svg_legend(dcp__text *t, const dcp__svg_panel *panels, int32_t count)
{
    const dcp__svg_sizes *sizes = panels[0].sizes;
    double x = DCP__SVG_MARGIN_LEFT + DCP__SVG_PLOT_WIDTH + 20.0, y = panels[0].top;
    int32_t i;
    (void)count;
    for (i = 0; i < sizes->count; i++) {
        dcp__text_printf(t, "<rect x='%.0f' y='%.0f' width='14' height='14' fill='%s'/>\n", x, y,
                         dcp__svg_color(sizes, sizes->cp[i]));
        dcp__text_printf(t, "<text x='%.0f' y='%.0f' font-size='12'>cp %d</text>\n", x + 20.0,
                         y + 11.0, (int)sizes->cp[i]);
        y += DCP__SVG_LEGEND_STEP;
    }
    y += 8.0;
    dcp__text_printf(t, "<line x1='%.0f' y1='%.0f' x2='%.0f' y2='%.0f' stroke='#d62728' "
                        "stroke-width='1.5'/><text x='%.0f' y='%.0f' font-size='12'>lower bound"
                        "</text>\n",
                     x + 7.0, y, x + 7.0, y + 14.0, x + 20.0, y + 11.0);
    y += 20.0;
    dcp__text_printf(t, "<line x1='%.0f' y1='%.0f' x2='%.0f' y2='%.0f' stroke='#333' "
                        "stroke-dasharray='3,3'/><text x='%.0f' y='%.0f' font-size='12'>"
                        "microbatch end</text>\n",
                     x + 7.0, y, x + 7.0, y + 14.0, x + 20.0, y + 11.0);
    y += 20.0;
    dcp__text_printf(t, "<text x='%.0f' y='%.0f' font-size='11' fill='#555'>box number:</text>\n",
                     x, y + 11.0);
    dcp__text_printf(t, "<text x='%.0f' y='%.0f' font-size='11' fill='#555'>microbatch</text>\n",
                     x, y + 25.0);
    dcp__text_printf(t, "<text x='%.0f' y='%.0f' font-size='11' fill='#555'>gap in a row:</text>\n"
                        "<text x='%.0f' y='%.0f' font-size='11' fill='#555'>the rank waits</text>\n"
                        "<text x='%.0f' y='%.0f' font-size='11' fill='#555'>(its group, or a</text>\n"
                        "<text x='%.0f' y='%.0f' font-size='11' fill='#555'>barrier of E ranks)"
                        "</text>\n",
                     x, y + 47.0, x, y + 61.0, x, y + 75.0, x, y + 89.0);
}

/* Places the panels one above the other on one time scale; returns the picture's height. */
static double dcp__svg_layout(dcp__svg_panel *panels, int32_t count, double *axis_ms)
{
    double y = DCP__SVG_HEADING_HEIGHT, row;
    int32_t i;
    row = (count > 1 ? DCP__SVG_STACKED_PANEL_HEIGHT_MAX : DCP__SVG_PANEL_HEIGHT_MAX) /
          panels[0].plan->config.ranks;
    if (row > DCP__SVG_ROW_HEIGHT_MAX) row = DCP__SVG_ROW_HEIGHT_MAX;
    *axis_ms = 0.0;
    for (i = 0; i < count; i++)
        if (panels[i].stats.step_seconds * 1e3 > *axis_ms)
            *axis_ms = panels[i].stats.step_seconds * 1e3;
    if (!(*axis_ms > 0.0)) *axis_ms = 1.0; /* plans of no samples: an empty 1 ms axis */
    for (i = 0; i < count; i++) {
        panels[i].row = row;
        panels[i].x_scale = DCP__SVG_PLOT_WIDTH / *axis_ms;
        dcp__svg_end_bands(&panels[i]);
        panels[i].top = y + DCP__SVG_PANEL_TITLE_HEIGHT + dcp__svg_band_space(&panels[i]);
        y = panels[i].top + dcp__svg_height(&panels[i]) + DCP__SVG_AXIS_HEIGHT;
    }
    return y;
}

static void dcp__svg_draw(dcp__text *t, const dcp__svg_panel *panels, int32_t count,
                          double axis_ms, double height)
{
    const dcp_plan *plan = panels[0].plan;
    int32_t i;
    dcp__text_printf(t, "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
                        "font-family='sans-serif'>\n<rect width='100%%' height='100%%' "
                        "fill='white'/>\n",
                     DCP__SVG_MARGIN_LEFT + DCP__SVG_PLOT_WIDTH + DCP__SVG_MARGIN_RIGHT, height);
    dcp__text_printf(t, "<text x='%.0f' y='20' font-size='14'>%d samples, %lld valid tokens, %d "
                        "ranks, max %lld padded tokens per rank</text>\n",
                     DCP__SVG_MARGIN_LEFT, (int)plan->num_samples,
                     (long long)panels[0].stats.valid_tokens, (int)plan->config.ranks,
                     (long long)plan->config.max_tokens_per_rank);
    for (i = 0; i < count; i++) {
        dcp__svg_panel_title(t, &panels[i], count > 1 ? &panels[count - 1] : NULL);
        dcp__svg_axes(t, &panels[i], axis_ms);
        dcp__svg_groups(t, &panels[i]);
        dcp__svg_microbatch_ends(t, &panels[i]);
        dcp__svg_lower_bound(t, &panels[i]);
    }
    dcp__svg_legend(t, panels, count);
    dcp__text_printf(t, "</svg>\n");
}

/* Reports the size; a buffer too small keeps an empty string, not a truncated picture. */
static dcp_status dcp__text_finish(dcp__text *t, size_t *size, dcp_error *error)
{
    size_t needed = t->size + 1;
    if (size) *size = needed;
    if (!t->data) return dcp_error_clear(error);
    if (needed > t->capacity) {
        if (t->capacity > 0) t->data[0] = '\0';
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "buffer of %zu bytes is too small: %zu needed", t->capacity, needed);
    }
    t->data[t->size] = '\0';
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_plan_svg(const dcp_plan *const *plans, const char *const *titles,
                               int32_t count, const dcp_cost_model *cost, char *buffer,
                               size_t capacity, size_t *size, dcp_error *error)
{
    dcp__svg_panel panels[DCP_PLAN_SVG_MAX_PLANS];
    dcp__svg_sizes sizes;
    dcp__text text;
    double axis_ms, height;
    int32_t i;
    dcp_status status;
    if ((status = dcp__svg_check(plans, count, buffer, size, error)) != DCP_OK) return status;
    memset(panels, 0, sizeof panels);
    dcp__svg_collect_sizes(&sizes, plans, count);
    for (i = 0; i < count && status == DCP_OK; i++) {
        panels[i].sizes = &sizes;
        status = dcp__svg_panel_init(&panels[i], plans[i], titles ? titles[i] : NULL, cost, error);
    }
    if (status == DCP_OK) {
        height = dcp__svg_layout(panels, count, &axis_ms);
        text.data = buffer;
        text.capacity = buffer ? capacity : 0;
        text.size = 0;
        dcp__svg_draw(&text, panels, count, axis_ms, height);
        status = dcp__text_finish(&text, size, error);
    }
    for (i = 0; i < count; i++) {
        dcp_free(&plans[i]->config.allocator, panels[i].start);
        dcp_free(&plans[i]->config.allocator, panels[i].end);
        dcp_free(&plans[i]->config.allocator, panels[i].microbatch_end);
        dcp_free(&plans[i]->config.allocator, panels[i].end_band);
    }
    return status;
}

/* ------------------------------------------------------------------ plan histogram */

DCPDEF dcp_status dcp_plan_cp_histogram(const dcp_plan *plan, int32_t *sizes, int32_t *samples,
                                        int32_t capacity, int32_t *count, dcp_error *error)
{
    int32_t g, n = 0, below = 0;
    if (!plan || !count)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "plan and count must be set");
    if (capacity < 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "capacity must be >= 0, got %d", (int)capacity);
    *count = 0;
    /* the distinct sizes in increasing order, one pass per size: below is the last size
       listed, the next is the smallest above it (sizes are few: at most the set's) */
    for (;;) {
        int32_t next = 0, held = 0;
        for (g = 0; g < plan->num_groups; g++) {
            const int32_t cp = plan->groups[g].cp;
            if (cp > below && (next == 0 || cp < next)) next = cp;
        }
        if (next == 0) break;
        for (g = 0; g < plan->num_groups; g++)
            if (plan->groups[g].cp == next) held += plan->groups[g].sample_count;
        if (n < capacity) {
            if (sizes) sizes[n] = next;
            if (samples) samples[n] = held;
        }
        n++;
        below = next;
    }
    *count = n;
    if (n > capacity && (sizes || samples))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "the plan uses %d CP sizes, more than capacity %d", (int)n,
                             (int)capacity);
    return dcp_error_clear(error);
}

/* -- src/views.h -- */
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
/* -- src/distributed.h -- */
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

/* -- src/reference.h -- */
/* ----------------------------------------------------------------- operation contracts
   The checks every attention, RoPE and conv1d entry point runs first, CPU or CUDA. */

/* Declared with the device contracts; dcp_cuda.cu and dcp_nccl.h size their buffers by it. */
DCPDEF size_t dcp_dtype_size(dcp_dtype dtype)
{
    switch (dtype) {
    case DCP_DTYPE_FLOAT32: return sizeof(float);
    case DCP_DTYPE_BFLOAT16:
    case DCP_DTYPE_FLOAT16: return sizeof(uint16_t);
    }
    return 0;
}

DCPDEF const char *dcp_dtype_name(dcp_dtype dtype)
{
    /* indexed by value: DCP_DTYPE_FLOAT32 = 0, DCP_DTYPE_BFLOAT16 = 1, DCP_DTYPE_FLOAT16 = 2 */
    static const char *const names[] = {"float32", "bfloat16", "float16"};
    const int32_t index = (int32_t)dtype;
    return index >= 0 && index < (int32_t)(sizeof names / sizeof names[0]) ? names[index]
                                                                          : "unknown";
}

static dcp_status dcp__check_flag(const char *name, int32_t value, dcp_error *error)
{
    if (value != 0 && value != 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "%s must be 0 or 1, got %d", name,
                             (int)value);
    return DCP_OK;
}

/* A resolver's own arguments: the parameters to resolve and where the result goes. */
static dcp_status dcp__check_resolve_args(const void *params, const void *resolved,
                                          dcp_error *error)
{
    if (!params) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "params must not be NULL");
    if (!resolved)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "resolved must not be NULL");
    return DCP_OK;
}

static dcp_status dcp__check_half(const char *name, dcp_half half, int32_t cp, dcp_error *error)
{
    if (half != DCP_HALF_ALL && half != DCP_HALF_FIRST && half != DCP_HALF_SECOND)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "%s %d is not a dcp_half", name,
                             (int)half);
    if (half != DCP_HALF_ALL && cp == 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "%s %s needs cp > 1 (at layout cp 1 a sequence has no halves)", name,
                             half == DCP_HALF_FIRST ? "DCP_HALF_FIRST" : "DCP_HALF_SECOND");
    return DCP_OK;
}

DCPDEF dcp_status dcp_attention_params_resolve(const dcp_attention_params *params,
                                               dcp_attention_params *resolved,
                                               dcp_error *error)
{
    dcp_attention_params p;
    dcp_status status;
    if ((status = dcp__check_resolve_args(params, resolved, error)) != DCP_OK) return status;
    p = *params;
    if (p.num_heads < 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "num_heads must be >= 1, got %d",
                             (int)p.num_heads);
    if (p.num_kv_heads == 0) p.num_kv_heads = p.num_heads;
    if (p.num_kv_heads < 1 || p.num_heads % p.num_kv_heads != 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "num_heads %d must be a multiple of num_kv_heads %d", (int)p.num_heads,
                             (int)p.num_kv_heads);
    if (p.head_dim < 1 || p.head_dim > DCP_MAX_HEAD_DIM)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "head_dim must be in [1, %d], got %d", DCP_MAX_HEAD_DIM,
                             (int)p.head_dim);
    if (p.softmax_scale == 0.0) p.softmax_scale = 1.0 / sqrt((double)p.head_dim);
    if (!(p.softmax_scale > 0.0 && dcp__is_finite(p.softmax_scale)))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "softmax_scale must be finite and > 0, got %g", p.softmax_scale);
    if ((status = dcp__check_flag("causal", p.causal, error)) != DCP_OK) return status;
    *resolved = p;
    return dcp_error_clear(error);
}

/* A ring's size: any number of ranks in [1, DCP_MAX_RANKS]. */
static dcp_status dcp__check_ring_cp(int32_t cp, dcp_error *error)
{
    if (cp < 1 || cp > DCP_MAX_RANKS)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "cp must be in [1, %d], got %d",
                             DCP_MAX_RANKS, (int)cp);
    return DCP_OK;
}

/* The ring order (see dcp_ring_order): positions [0, evens) hold the even ranks going up,
   the rest the odd ones coming down from the largest. */
static int32_t dcp__ring_rank_at(int32_t cp, int32_t position)
{
    const int32_t evens = (cp + 1) / 2, top_odd = cp % 2 == 0 ? cp - 1 : cp - 2;
    return position < evens ? 2 * position : top_odd - 2 * (position - evens);
}

static int32_t dcp__ring_position_of(int32_t cp, int32_t rank)
{
    const int32_t evens = (cp + 1) / 2, top_odd = cp % 2 == 0 ? cp - 1 : cp - 2;
    return rank % 2 == 0 ? rank / 2 : evens + (top_odd - rank) / 2;
}

/* The rank `places` positions after rank's in the ring order (negative: before it). */
static int32_t dcp__ring_step_from(int32_t cp, int32_t rank, int32_t places)
{
    const int64_t at = ((int64_t)dcp__ring_position_of(cp, rank) + places) % cp;
    return dcp__ring_rank_at(cp, (int32_t)(at < 0 ? at + cp : at));
}

DCPDEF dcp_status dcp_ring_order(int32_t cp, int32_t position, int32_t *rank, dcp_error *error)
{
    dcp_status status;
    if (!rank) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "rank must not be NULL");
    if ((status = dcp__check_ring_cp(cp, error)) != DCP_OK ||
        (status = dcp_check_rank("position", position, cp, error)) != DCP_OK)
        return status;
    *rank = dcp__ring_rank_at(cp, position);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_ring_position(int32_t cp, int32_t rank, int32_t *position,
                                    dcp_error *error)
{
    dcp_status status;
    if (!position)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "position must not be NULL");
    if ((status = dcp__check_ring_cp(cp, error)) != DCP_OK ||
        (status = dcp_check_rank("rank", rank, cp, error)) != DCP_OK)
        return status;
    *position = dcp__ring_position_of(cp, rank);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_attention_view_validate(const dcp_attention_view *view, int32_t cp,
                                              dcp_error *error)
{
    dcp_attention_view v;
    dcp_status status;
    if ((status = dcp__check_ring_cp(cp, error)) != DCP_OK) return status;
    if (view) v = *view;
    else memset(&v, 0, sizeof v);
    if ((status = dcp_check_rank("view.q_rank", v.q_rank, cp, error)) != DCP_OK ||
        (status = dcp__check_half("view.q_half", v.q_half, cp, error)) != DCP_OK ||
        (status = dcp_check_rank("view.kv_rank", v.kv_rank, cp, error)) != DCP_OK ||
        (status = dcp__check_half("view.kv_half", v.kv_half, cp, error)) != DCP_OK)
        return status;
    return dcp_error_clear(error);
}

static dcp_ring_step dcp__ring_plan(int32_t cp, int32_t rank, int32_t step, int32_t causal)
{
    dcp_ring_step plan;
    memset(&plan, 0, sizeof plan);
    plan.view.q_rank = rank;
    plan.view.kv_rank = dcp__ring_step_from(cp, rank, -step);
    if (causal && step == 0)
        plan.causal = 1;
    else if (causal && plan.view.kv_rank < rank)
        plan.view.kv_half = DCP_HALF_FIRST; /* its chunk 2cp-1-source follows all our rows */
    else if (causal)
        plan.view.q_half = DCP_HALF_SECOND; /* our chunk `rank` precedes all of its rows */
    return plan;
}

DCPDEF dcp_status dcp_ring_step_plan(int32_t cp, int32_t rank, int32_t step, int32_t causal,
                                     dcp_ring_step *plan, dcp_error *error)
{
    dcp_status status;
    if (!plan) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "plan must not be NULL");
    if ((status = dcp__check_ring_cp(cp, error)) != DCP_OK ||
        (status = dcp_check_rank("rank", rank, cp, error)) != DCP_OK)
        return status;
    if (step < 0 || step >= cp)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "step must be in [0, cp %d), got %d", (int)cp, (int)step);
    if ((status = dcp__check_flag("causal", causal, error)) != DCP_OK) return status;
    *plan = dcp__ring_plan(cp, rank, step, causal);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_rope_options_resolve(const dcp_rope_options *options, int32_t head_dim,
                                           dcp_rope_options *resolved, dcp_error *error)
{
    dcp_rope_options o;
    int32_t i;
    if (!resolved)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "resolved must not be NULL");
    if (head_dim < 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "head_dim must be >= 1, got %d",
                             (int)head_dim);
    if (options) o = *options;
    else memset(&o, 0, sizeof o);
    if (o.style != DCP_ROPE_ROTATE_HALF && o.style != DCP_ROPE_INTERLEAVED)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "style %d is not a dcp_rope_style",
                             (int)o.style);
    if (o.rotary_dim == 0) o.rotary_dim = head_dim;
    if (o.rotary_dim < 2 || o.rotary_dim > head_dim || o.rotary_dim % 2 != 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "rotary_dim (default head_dim) must be even and in [2, head_dim %d], "
                             "got %d",
                             (int)head_dim, (int)o.rotary_dim);
    if (o.theta_base == 0.0) o.theta_base = DCP_DEFAULT_ROPE_THETA;
    if (!(o.theta_base > 0.0 && dcp__is_finite(o.theta_base)))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "theta_base must be finite and > 0, got %g", o.theta_base);
    for (i = 0; o.inv_freq && i < o.rotary_dim / 2; i++)
        if (!dcp__is_finite(o.inv_freq[i]))
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "inv_freq[%d] must be finite, got %g", (int)i, o.inv_freq[i]);
    *resolved = o;
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_conv1d_params_resolve(const dcp_conv1d_params *params,
                                           dcp_conv1d_params *resolved, dcp_error *error)
{
    dcp_conv1d_params p;
    dcp_status status;
    if ((status = dcp__check_resolve_args(params, resolved, error)) != DCP_OK) return status;
    p = *params;
    if (p.width == 0) p.width = DCP_DEFAULT_CONV1D_WIDTH;
    if (p.channels < 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "channels must be >= 1, got %d",
                             (int)p.channels);
    if (p.width < 1 || p.width > DCP_CONV1D_MAX_WIDTH)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "width must be in [1, %d], got %d",
                             DCP_CONV1D_MAX_WIDTH, (int)p.width);
    if ((status = dcp__check_flag("silu", p.silu, error)) != DCP_OK) return status;
    *resolved = p;
    return dcp_error_clear(error);
}

#ifndef DCP_NO_REFERENCE
/* ------------------------------------------------------------------ CPU references: checks
   Each public reference checks every argument before it touches a buffer, so a failing call
   writes nothing. */

static dcp_status dcp__check_pointers(int32_t count, const void *const *pointers,
                                      const char *const *names, dcp_error *error)
{
    int32_t i;
    for (i = 0; i < count; i++)
        if (!pointers[i])
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "%s must not be NULL",
                                 names[i]);
    return DCP_OK;
}

/* rows x heads x dim floats must be addressable in bytes and in int64_t indices (heads and
   dim >= 1, checked before). */
static dcp_status dcp__check_elements(const char *name, int64_t rows, int64_t heads,
                                      int64_t dim, dcp_error *error)
{
    const int64_t limit = (int64_t)(SIZE_MAX / sizeof(float));
    if (rows > limit / heads / dim)
        return dcp_error_set(error, DCP_ERROR_OVERFLOW,
                             "%s: %lld rows x %lld heads x %lld dims exceed %lld elements", name,
                             (long long)rows, (long long)heads, (long long)dim, (long long)limit);
    return DCP_OK;
}

static double dcp__dot(const float *x, const float *y, int32_t n)
{
    double sum = 0.0;
    int32_t i;
    for (i = 0; i < n; i++) sum += (double)x[i] * y[i];
    return sum;
}

/* One sequence of a validated layout as a rank's local buffer holds it. */
typedef struct dcp__seq {
    int64_t valid;  /* L_i */
    int64_t padded; /* P_i */
    int64_t offset; /* first local row */
    int64_t rows;   /* local rows: P_i / cp */
} dcp__seq;

static dcp__seq dcp__thd_seq(const dcp_thd_layout *layout, int32_t i)
{
    dcp__seq s;
    s.valid = (int64_t)layout->cu_seqlens[i + 1] - layout->cu_seqlens[i];
    s.padded = (int64_t)layout->cu_seqlens_padded[i + 1] - layout->cu_seqlens_padded[i];
    s.offset = layout->cu_seqlens_padded[i] / layout->cp;
    s.rows = s.padded / layout->cp;
    return s;
}

/* The local rows [begin, end) of a sequence that a half covers. */
static void dcp__half_rows(const dcp__seq *s, dcp_half half, int64_t *begin, int64_t *end)
{
    *begin = half == DCP_HALF_SECOND ? s->rows / 2 : 0;
    *end = half == DCP_HALF_FIRST ? s->rows / 2 : s->rows;
}

/* ---------------------------------------------------------------- CPU references: attention
   Forward visits each query row of the view and each head: one pass for the largest visible
   score, one for the sums, both in double. Backward runs query-major for dQ and key-major for
   dK and dV, recomputing P in each, so every gradient element is one double sum added once
   to its fp32 buffer: no scratch memory and a fixed summation order. */

typedef struct dcp__attn {
    dcp_attention_params p; /* resolved */
    const dcp_thd_layout *layout;
    dcp_attention_view view;
    int64_t rows;  /* local rows of every buffer */
    int32_t group; /* query heads per kv head */
    const float *q, *k, *v, *out, *dout, *lse;
} dcp__attn;

static void dcp__attn_init(dcp__attn *a, const dcp_attention_params *resolved,
                           const dcp_thd_layout *layout, int64_t rows,
                           const dcp_attention_view *view)
{
    memset(a, 0, sizeof *a);
    a->p = *resolved;
    a->layout = layout;
    a->rows = rows;
    a->group = resolved->num_heads / resolved->num_kv_heads;
    if (view) a->view = *view;
}

/* Checks params, layout and view (NULL: all zero) and sizes; a valid call gets a context. */
static dcp_status dcp__attn_setup(dcp__attn *a, const dcp_attention_params *params,
                                  const dcp_thd_layout *layout, const dcp_attention_view *view,
                                  dcp_error *error)
{
    dcp_attention_params p;
    int64_t rows;
    dcp_status status;
    if ((status = dcp_attention_params_resolve(params, &p, error)) != DCP_OK) return status;
    if ((status = dcp_thd_layout_validate(layout, &rows, error)) != DCP_OK) return status;
    if ((status = dcp__check_elements("q", rows, p.num_heads, p.head_dim, error)) != DCP_OK)
        return status;
    dcp__attn_init(a, &p, layout, rows, view);
    if ((status = dcp_check_rank("view.q_rank", a->view.q_rank, layout->cp, error)) != DCP_OK ||
        (status = dcp__check_half("view.q_half", a->view.q_half, layout->cp, error)) != DCP_OK ||
        (status = dcp_check_rank("view.kv_rank", a->view.kv_rank, layout->cp, error)) != DCP_OK)
        return status;
    return dcp__check_half("view.kv_half", a->view.kv_half, layout->cp, error);
}

static int64_t dcp__q_at(const dcp__attn *a, int64_t row, int32_t head)
{
    return (row * a->p.num_heads + head) * a->p.head_dim;
}

static int64_t dcp__kv_at(const dcp__attn *a, int64_t row, int32_t kv_head)
{
    return (row * a->p.num_kv_heads + kv_head) * a->p.head_dim;
}

static int64_t dcp__lse_at(const dcp__attn *a, int64_t row, int32_t head)
{
    return head * a->rows + row;
}

static int64_t dcp__q_position(const dcp__attn *a, const dcp__seq *s, int64_t q_local)
{
    return dcp_zigzag_position(s->padded, a->layout->cp, a->view.q_rank, q_local);
}

/* Whether the key at local row k_local of the kv rank is visible from a query at q_pos. */
static int dcp__attn_visible(const dcp__attn *a, const dcp__seq *s, int64_t q_pos,
                             int64_t k_local)
{
    int64_t k_pos = dcp_zigzag_position(s->padded, a->layout->cp, a->view.kv_rank, k_local);
    return q_pos < s->valid && k_pos < s->valid && (!a->p.causal || k_pos <= q_pos);
}

static double dcp__attn_score(const dcp__attn *a, int64_t q_row, int32_t head, int64_t k_row)
{
    return a->p.softmax_scale * dcp__dot(a->q + dcp__q_at(a, q_row, head),
                                         a->k + dcp__kv_at(a, k_row, head / a->group),
                                         a->p.head_dim);
}

/* The buffers of a reference pass besides the dcp__attn inputs: the forward writes out and
   lse, the backward dq, dk and dv; a merge reads a partial result into out and lse. */
typedef struct dcp__attn_outputs {
    const float *partial_out, *partial_lse;
    float *out, *lse, *dq, *dk, *dv;
} dcp__attn_outputs;

/* One (local row, head) of a pass over a view. */
typedef void (*dcp__attn_row_fn)(const dcp__attn *a, const dcp__seq *s, int64_t local,
                                 int32_t head, const dcp__attn_outputs *o);

/* row() for every local row of the half `half` of every sequence and each of `heads` heads:
   the walk of every reference pass (queries of the q view, or keys of the kv view). */
static void dcp__attn_walk(const dcp__attn *a, dcp_half half, int32_t heads, dcp__attn_row_fn row,
                           const dcp__attn_outputs *o)
{
    int32_t i, head;
    for (i = 0; i < a->layout->num_sequences; i++) {
        const dcp__seq s = dcp__thd_seq(a->layout, i);
        int64_t local, begin, end;
        dcp__half_rows(&s, half, &begin, &end);
        for (local = begin; local < end; local++)
            for (head = 0; head < heads; head++) row(a, &s, local, head, o);
    }
}

static void dcp__attn_forward_row(const dcp__attn *a, const dcp__seq *s, int64_t q_local,
                                  int32_t head, const dcp__attn_outputs *out)
{
    const int64_t q_row = s->offset + q_local, q_pos = dcp__q_position(a, s, q_local);
    float *o = out->out + dcp__q_at(a, q_row, head);
    double acc[DCP_MAX_HEAD_DIM], max_score = -INFINITY, sum = 0.0;
    int64_t k_local, begin, end;
    int32_t d;
    dcp__half_rows(s, a->view.kv_half, &begin, &end);
    for (k_local = begin; k_local < end; k_local++)
        if (dcp__attn_visible(a, s, q_pos, k_local))
            max_score = fmax(max_score, dcp__attn_score(a, q_row, head, s->offset + k_local));
    for (d = 0; d < a->p.head_dim; d++) acc[d] = 0.0;
    for (k_local = begin; k_local < end && max_score > -INFINITY; k_local++) {
        const float *v = a->v + dcp__kv_at(a, s->offset + k_local, head / a->group);
        double p;
        if (!dcp__attn_visible(a, s, q_pos, k_local)) continue;
        p = exp(dcp__attn_score(a, q_row, head, s->offset + k_local) - max_score);
        sum += p;
        for (d = 0; d < a->p.head_dim; d++) acc[d] += p * v[d];
    }
    /* sum stays 0 when no key is visible (padding query rows included): 0 and -inf */
    for (d = 0; d < a->p.head_dim; d++) o[d] = sum > 0.0 ? (float)(acc[d] / sum) : 0.0f;
    out->lse[dcp__lse_at(a, q_row, head)] =
        sum > 0.0 ? (float)(max_score + log(sum)) : -INFINITY;
}

static void dcp__attn_forward(const dcp__attn *a, float *out, float *lse)
{
    dcp__attn_outputs o;
    memset(&o, 0, sizeof o);
    o.out = out, o.lse = lse;
    dcp__attn_walk(a, a->view.q_half, a->p.num_heads, dcp__attn_forward_row, &o);
}

/* D_i = dO_i . O_i of one query row and head. */
static double dcp__attn_delta(const dcp__attn *a, int64_t q_row, int32_t head)
{
    return dcp__dot(a->dout + dcp__q_at(a, q_row, head), a->out + dcp__q_at(a, q_row, head),
                    a->p.head_dim);
}

/* P_ij from the final LSE and dS_ij = P_ij (dO_i . V_j - D_i) of a visible pair. */
static void dcp__attn_probs(const dcp__attn *a, int64_t q_row, int32_t head, int64_t k_row,
                            double delta, double *p, double *ds)
{
    const float *v = a->v + dcp__kv_at(a, k_row, head / a->group);
    double dp = dcp__dot(a->dout + dcp__q_at(a, q_row, head), v, a->p.head_dim);
    *p = exp(dcp__attn_score(a, q_row, head, k_row) - a->lse[dcp__lse_at(a, q_row, head)]);
    *ds = *p * (dp - delta);
}

static void dcp__attn_dq_row(const dcp__attn *a, const dcp__seq *s, int64_t q_local,
                             int32_t head, const dcp__attn_outputs *o)
{
    const int64_t q_row = s->offset + q_local, q_pos = dcp__q_position(a, s, q_local);
    double acc[DCP_MAX_HEAD_DIM], delta;
    float *g = o->dq + dcp__q_at(a, q_row, head);
    int64_t k_local, begin, end;
    int32_t d;
    if (q_pos >= s->valid || a->lse[dcp__lse_at(a, q_row, head)] == -INFINITY) return;
    delta = dcp__attn_delta(a, q_row, head);
    for (d = 0; d < a->p.head_dim; d++) acc[d] = 0.0;
    dcp__half_rows(s, a->view.kv_half, &begin, &end);
    for (k_local = begin; k_local < end; k_local++) {
        const float *k = a->k + dcp__kv_at(a, s->offset + k_local, head / a->group);
        double p, ds;
        if (!dcp__attn_visible(a, s, q_pos, k_local)) continue;
        dcp__attn_probs(a, q_row, head, s->offset + k_local, delta, &p, &ds);
        for (d = 0; d < a->p.head_dim; d++) acc[d] += ds * k[d];
    }
    for (d = 0; d < a->p.head_dim; d++) g[d] = (float)(g[d] + a->p.softmax_scale * acc[d]);
}

/* Adds one query row's share to the dK (unscaled) and dV sums of a key row. */
static void dcp__attn_dkv_pair(const dcp__attn *a, const dcp__seq *s, int64_t q_local,
                               int32_t head, int64_t k_local, double *dk_acc, double *dv_acc)
{
    const int64_t q_row = s->offset + q_local;
    const float *q = a->q + dcp__q_at(a, q_row, head);
    const float *dout = a->dout + dcp__q_at(a, q_row, head);
    double p, ds;
    int32_t d;
    if (!dcp__attn_visible(a, s, dcp__q_position(a, s, q_local), k_local) ||
        a->lse[dcp__lse_at(a, q_row, head)] == -INFINITY)
        return;
    dcp__attn_probs(a, q_row, head, s->offset + k_local, dcp__attn_delta(a, q_row, head), &p,
                    &ds);
    for (d = 0; d < a->p.head_dim; d++) {
        dk_acc[d] += ds * q[d];
        dv_acc[d] += p * dout[d];
    }
}

static void dcp__attn_dkv_row(const dcp__attn *a, const dcp__seq *s, int64_t k_local,
                              int32_t kv_head, const dcp__attn_outputs *o)
{
    float *dk = o->dk, *dv = o->dv;
    const int64_t at = dcp__kv_at(a, s->offset + k_local, kv_head);
    double dk_acc[DCP_MAX_HEAD_DIM], dv_acc[DCP_MAX_HEAD_DIM];
    int64_t q_local, begin, end;
    int32_t head, d;
    for (d = 0; d < a->p.head_dim; d++) dk_acc[d] = dv_acc[d] = 0.0;
    dcp__half_rows(s, a->view.q_half, &begin, &end);
    for (head = kv_head * a->group; head < (kv_head + 1) * a->group; head++)
        for (q_local = begin; q_local < end; q_local++)
            dcp__attn_dkv_pair(a, s, q_local, head, k_local, dk_acc, dv_acc);
    for (d = 0; d < a->p.head_dim; d++) {
        dk[at + d] = (float)(dk[at + d] + a->p.softmax_scale * dk_acc[d]);
        dv[at + d] = (float)(dv[at + d] + dv_acc[d]);
    }
}

/* dq of the q view's rows, then dk and dv of the kv view's rows (each element written by one
   row, from the inputs only: the order does not change a value). */
static void dcp__attn_backward(const dcp__attn *a, float *dq, float *dk, float *dv)
{
    dcp__attn_outputs o;
    memset(&o, 0, sizeof o);
    o.dq = dq, o.dk = dk, o.dv = dv;
    dcp__attn_walk(a, a->view.q_half, a->p.num_heads, dcp__attn_dq_row, &o);
    dcp__attn_walk(a, a->view.kv_half, a->p.num_kv_heads, dcp__attn_dkv_row, &o);
}

/* dcp__attn_setup, then every one of the named pointers given. */
static dcp_status dcp__attn_setup_checked(dcp__attn *a, const dcp_attention_params *params,
                                          const dcp_thd_layout *layout,
                                          const dcp_attention_view *view,
                                          const char *const *names, const void *const *pointers,
                                          int32_t count, dcp_error *error)
{
    const dcp_status status = dcp__attn_setup(a, params, layout, view, error);
    return status != DCP_OK ? status : dcp__check_pointers(count, pointers, names, error);
}

DCPDEF dcp_status dcp_attention_forward(const dcp_attention_params *params,
                                        const dcp_thd_layout *layout,
                                        const dcp_attention_view *view, const float *q,
                                        const float *k, const float *v, float *out,
                                        float *lse, dcp_error *error)
{
    static const char *const names[] = {"q", "k", "v", "out", "lse"};
    const void *const pointers[] = {q, k, v, out, lse};
    dcp__attn a;
    const dcp_status status = dcp__attn_setup_checked(&a, params, layout, view, names, pointers,
                                                      DCP__COUNT(names), error);
    if (status != DCP_OK) return status;
    a.q = q, a.k = k, a.v = v;
    dcp__attn_forward(&a, out, lse);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_attention_backward(const dcp_attention_params *params,
                                         const dcp_thd_layout *layout,
                                         const dcp_attention_view *view, const float *q,
                                         const float *k, const float *v, const float *out,
                                         const float *dout, const float *lse, float *dq,
                                         float *dk, float *dv, dcp_error *error)
{
    static const char *const names[] = {"q", "k", "v", "out", "dout", "lse", "dq", "dk", "dv"};
    const void *const pointers[] = {q, k, v, out, dout, lse, dq, dk, dv};
    dcp__attn a;
    const dcp_status status = dcp__attn_setup_checked(&a, params, layout, view, names, pointers,
                                                      DCP__COUNT(names), error);
    if (status != DCP_OK) return status;
    a.q = q, a.k = k, a.v = v, a.out = out, a.dout = dout, a.lse = lse;
    dcp__attn_backward(&a, dq, dk, dv);
    return dcp_error_clear(error);
}

/* ------------------------------------------------------ CPU references: merging through LSE
   Two partial results over disjoint key sets combine as lse = log(e^lse_a + e^lse_b) and
   out = e^(lse_a - lse) out_a + e^(lse_b - lse) out_b, computed in double. A side at -inf saw
   no key and is skipped, so a row no step could see stays 0 and -inf. */

static void dcp__acc_clear(const dcp__attn *a, float *acc_out, float *acc_lse)
{
    const int64_t values = a->rows * a->p.num_heads * a->p.head_dim;
    const int64_t lses = a->rows * a->p.num_heads;
    int64_t i;
    for (i = 0; i < values; i++) acc_out[i] = 0.0f;
    for (i = 0; i < lses; i++) acc_lse[i] = -INFINITY;
}

static void dcp__merge_head(int32_t dim, const float *out, float lse, float *acc_out,
                            float *acc_lse)
{
    double high, low, merged;
    int32_t d;
    if (lse == -INFINITY) return;
    if (*acc_lse == -INFINITY) {
        for (d = 0; d < dim; d++) acc_out[d] = out[d];
        *acc_lse = lse;
        return;
    }
    high = fmax(*acc_lse, lse);
    low = fmin(*acc_lse, lse);
    merged = high + log1p(exp(low - high));
    for (d = 0; d < dim; d++)
        acc_out[d] = (float)(exp(*acc_lse - merged) * acc_out[d] + exp(lse - merged) * out[d]);
    *acc_lse = (float)merged;
}

static void dcp__acc_merge_row(const dcp__attn *a, const dcp__seq *s, int64_t local,
                               int32_t head, const dcp__attn_outputs *o)
{
    const int64_t at = dcp__q_at(a, s->offset + local, head);
    const int64_t lse_at = dcp__lse_at(a, s->offset + local, head);
    dcp__merge_head(a->p.head_dim, o->partial_out + at, o->partial_lse[lse_at], o->out + at,
                    o->lse + lse_at);
}

static void dcp__acc_merge(const dcp__attn *a, dcp_half half, const float *out,
                           const float *lse, float *acc_out, float *acc_lse)
{
    dcp__attn_outputs o;
    memset(&o, 0, sizeof o);
    o.partial_out = out, o.partial_lse = lse, o.out = acc_out, o.lse = acc_lse;
    dcp__attn_walk(a, half, a->p.num_heads, dcp__acc_merge_row, &o);
}

/* out and lse may be acc_out and acc_lse: each element is read before it is written. */
static void dcp__acc_finish(const dcp__attn *a, int32_t rank, const float *acc_out,
                            const float *acc_lse, float *out, float *lse)
{
    int32_t i, head, d;
    for (i = 0; i < a->layout->num_sequences; i++) {
        const dcp__seq s = dcp__thd_seq(a->layout, i);
        int64_t local;
        for (local = 0; local < s.rows; local++) {
            const int64_t row = s.offset + local;
            const int valid = dcp_zigzag_position(s.padded, a->layout->cp, rank, local) < s.valid;
            for (head = 0; head < a->p.num_heads; head++) {
                const int64_t at = dcp__q_at(a, row, head), lse_at = dcp__lse_at(a, row, head);
                for (d = 0; d < a->p.head_dim; d++) out[at + d] = valid ? acc_out[at + d] : 0.0f;
                lse[lse_at] = valid ? acc_lse[lse_at] : -INFINITY;
            }
        }
    }
}

/* The checks of the LSE-merge entry points: the attention shape, the call's half and rank
   (DCP_HALF_ALL and 0 where a call has none) and its buffers (acc_init passes its two twice). */
static dcp_status dcp__acc_setup(dcp__attn *a, const dcp_attention_params *params,
                                 const dcp_thd_layout *layout, dcp_half half, int32_t rank,
                                 const float *acc_out, const float *acc_lse, const float *out,
                                 const float *lse, dcp_error *error)
{
    static const char *const names[] = {"acc_out", "acc_lse", "out", "lse"};
    const void *const pointers[] = {acc_out, acc_lse, out, lse};
    dcp_status status = dcp__attn_setup(a, params, layout, NULL, error);
    if (status == DCP_OK) status = dcp__check_half("half", half, layout->cp, error);
    if (status == DCP_OK) status = dcp_check_rank("rank", rank, layout->cp, error);
    if (status == DCP_OK) status = dcp__check_pointers(DCP__COUNT(names), pointers, names, error);
    return status;
}

DCPDEF dcp_status dcp_attention_acc_init(const dcp_attention_params *params,
                                         const dcp_thd_layout *layout, float *acc_out,
                                         float *acc_lse, dcp_error *error)
{
    dcp__attn a;
    const dcp_status status = dcp__acc_setup(&a, params, layout, DCP_HALF_ALL, 0, acc_out,
                                             acc_lse, acc_out, acc_lse, error);
    if (status == DCP_OK) dcp__acc_clear(&a, acc_out, acc_lse);
    return status == DCP_OK ? dcp_error_clear(error) : status;
}

DCPDEF dcp_status dcp_attention_acc_merge(const dcp_attention_params *params,
                                          const dcp_thd_layout *layout, dcp_half half,
                                          const float *out, const float *lse, float *acc_out,
                                          float *acc_lse, dcp_error *error)
{
    dcp__attn a;
    const dcp_status status =
        dcp__acc_setup(&a, params, layout, half, 0, acc_out, acc_lse, out, lse, error);
    if (status == DCP_OK) dcp__acc_merge(&a, half, out, lse, acc_out, acc_lse);
    return status == DCP_OK ? dcp_error_clear(error) : status;
}

DCPDEF dcp_status dcp_attention_acc_finalize(const dcp_attention_params *params,
                                             const dcp_thd_layout *layout, int32_t rank,
                                             const float *acc_out, const float *acc_lse,
                                             float *out, float *lse, dcp_error *error)
{
    dcp__attn a;
    const dcp_status status = dcp__acc_setup(&a, params, layout, DCP_HALF_ALL, rank, acc_out,
                                             acc_lse, out, lse, error);
    if (status == DCP_OK) dcp__acc_finish(&a, rank, acc_out, acc_lse, out, lse);
    return status == DCP_OK ? dcp_error_clear(error) : status;
}

/* ------------------------------------------------------------ CPU references: ring attention
   The driver runs rank after rank, each through its cp steps in ring order; a real ring runs
   the ranks at once, but every rank's arithmetic, and so every result, is the same. */

/* The per-rank buffers of a simulated ring. */
typedef struct dcp__ring {
    dcp_attention_params p; /* resolved */
    const dcp_thd_layout *layout;
    int64_t rows;
    const float *const *q, *const *k, *const *v, *const *out, *const *dout, *const *lse;
} dcp__ring;

static dcp_status dcp__ring_setup(dcp__ring *ring, const dcp_attention_params *params,
                                  const dcp_thd_layout *layout, const float *const *const *buffers,
                                  const char *const *names, int32_t count, dcp_error *error)
{
    dcp__attn a;
    dcp_status status;
    int32_t i;
    if ((status = dcp__attn_setup(&a, params, layout, NULL, error)) != DCP_OK) return status;
    for (i = 0; i < count; i++)
        if ((status = dcp_check_rank_buffers(names[i], (const void *const *)buffers[i],
                                             layout->cp, error)) != DCP_OK)
            return status;
    memset(ring, 0, sizeof *ring);
    ring->p = a.p;
    ring->layout = layout;
    ring->rows = a.rows;
    return DCP_OK;
}

/* The context of step `step` on rank `rank`: the plan's view, its mask, its KV source. */
static void dcp__ring_step_attn(const dcp__ring *ring, int32_t rank, int32_t step, dcp__attn *a)
{
    const dcp_ring_step plan = dcp__ring_plan(ring->layout->cp, rank, step, ring->p.causal);
    dcp_attention_params step_params = ring->p;
    step_params.causal = plan.causal;
    dcp__attn_init(a, &step_params, ring->layout, ring->rows, &plan.view);
    a->q = ring->q[rank];
    a->k = ring->k[plan.view.kv_rank];
    a->v = ring->v[plan.view.kv_rank];
    if (ring->out) a->out = ring->out[rank];
    if (ring->dout) a->dout = ring->dout[rank];
    if (ring->lse) a->lse = ring->lse[rank];
}

static void dcp__ring_forward_rank(const dcp__ring *ring, int32_t rank, float *partial,
                                   float *out, float *lse)
{
    float *partial_lse = partial + ring->rows * ring->p.num_heads * ring->p.head_dim;
    dcp__attn a;
    int32_t step;
    dcp__attn_init(&a, &ring->p, ring->layout, ring->rows, NULL);
    dcp__acc_clear(&a, out, lse);
    for (step = 0; step < ring->layout->cp; step++) {
        dcp__ring_step_attn(ring, rank, step, &a);
        dcp__attn_forward(&a, partial, partial_lse);
        dcp__acc_merge(&a, a.view.q_half, partial, partial_lse, out, lse);
    }
    dcp__acc_finish(&a, rank, out, lse, out, lse);
}

DCPDEF dcp_status dcp_ring_attention_forward(const dcp_attention_params *params,
                                             const dcp_thd_layout *layout,
                                             const float *const *q, const float *const *k,
                                             const float *const *v, float *const *out,
                                             float *const *lse, const dcp_allocator *allocator,
                                             dcp_error *error)
{
    const float *const *buffers[5];
    static const char *const names[] = {"q", "k", "v", "out", "lse"};
    dcp__ring ring;
    float *partial;
    int32_t rank;
    dcp_status status;
    buffers[0] = q, buffers[1] = k, buffers[2] = v;
    buffers[3] = (const float *const *)out, buffers[4] = (const float *const *)lse;
    status = dcp__ring_setup(&ring, params, layout, buffers, names, DCP__COUNT(names), error);
    if (status != DCP_OK) return status;
    if (allocator && (allocator->alloc == NULL) != (allocator->free == NULL))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "allocator needs both alloc and free, or neither");
    ring.q = q, ring.k = k, ring.v = v;
    partial = (float *)dcp__alloc_array(allocator, (size_t)ring.rows,
                                        ((size_t)ring.p.head_dim + 1) * ring.p.num_heads *
                                            sizeof(float),
                                        "ring attention partial result", error);
    if (!partial) return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    for (rank = 0; rank < layout->cp; rank++)
        dcp__ring_forward_rank(&ring, rank, partial, out[rank], lse[rank]);
    dcp_free(allocator, partial);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_ring_attention_backward(
    const dcp_attention_params *params, const dcp_thd_layout *layout, const float *const *q,
    const float *const *k, const float *const *v, const float *const *out,
    const float *const *dout, const float *const *lse, float *const *dq, float *const *dk,
    float *const *dv, dcp_error *error)
{
    const float *const *buffers[9];
    static const char *const names[] = {"q", "k", "v", "out", "dout", "lse", "dq", "dk", "dv"};
    dcp__ring ring;
    dcp__attn a;
    int32_t rank, step;
    int64_t i, q_values, kv_values;
    dcp_status status;
    buffers[0] = q, buffers[1] = k, buffers[2] = v, buffers[3] = out, buffers[4] = dout;
    buffers[5] = lse, buffers[6] = (const float *const *)dq;
    buffers[7] = (const float *const *)dk, buffers[8] = (const float *const *)dv;
    status = dcp__ring_setup(&ring, params, layout, buffers, names, DCP__COUNT(names), error);
    if (status != DCP_OK) return status;
    ring.q = q, ring.k = k, ring.v = v, ring.out = out, ring.dout = dout, ring.lse = lse;
    q_values = ring.rows * ring.p.num_heads * ring.p.head_dim;
    kv_values = ring.rows * ring.p.num_kv_heads * ring.p.head_dim;
    for (rank = 0; rank < layout->cp; rank++) {
        for (i = 0; i < q_values; i++) dq[rank][i] = 0.0f;
        for (i = 0; i < kv_values; i++) dk[rank][i] = dv[rank][i] = 0.0f;
    }
    for (rank = 0; rank < layout->cp; rank++)
        for (step = 0; step < layout->cp; step++) {
            dcp__ring_step_attn(&ring, rank, step, &a);
            dcp__attn_backward(&a, dq[rank], dk[a.view.kv_rank], dv[a.view.kv_rank]);
        }
    return dcp_error_clear(error);
}

/* --------------------------------------------------------------------- CPU references: RoPE
   A row's angles depend on its global position only, so RoPE on a rank's zigzag rows equals
   RoPE on the whole sequence followed by the split. Backward turns by the opposite angle:
   a rotation's inverse is its transpose. */

static double dcp__rope_inv_freq(const dcp_rope_options *o, int32_t i)
{
    return o->inv_freq ? o->inv_freq[i] : pow(o->theta_base, -2.0 * i / o->rotary_dim);
}

/* Turns every pair of every head of one row by position x inv_freq (direction +1 forward,
   -1 backward) and copies the dims past rotary_dim. y may be x: a pair is read before it is
   written. */
static void dcp__rope_row(const dcp_rope_options *o, int32_t heads, int32_t dim,
                          int64_t position, double direction, const float *x, float *y)
{
    const int32_t half = o->rotary_dim / 2, interleaved = o->style == DCP_ROPE_INTERLEAVED;
    int32_t i, head, d;
    for (i = 0; i < half; i++) {
        const double angle = (double)position * dcp__rope_inv_freq(o, i);
        const double c = cos(angle), s = direction * sin(angle);
        const int32_t first = interleaved ? 2 * i : i, second = interleaved ? 2 * i + 1 : i + half;
        for (head = 0; head < heads; head++) {
            const int64_t at = (int64_t)head * dim;
            const double a = x[at + first], b = x[at + second];
            y[at + first] = (float)(a * c - b * s);
            y[at + second] = (float)(b * c + a * s);
        }
    }
    for (head = 0; head < heads; head++)
        for (d = o->rotary_dim; d < dim; d++) {
            const int64_t at = (int64_t)head * dim + d;
            y[at] = x[at];
        }
}

/* Checks the arguments of a RoPE call; on success `o` holds the resolved options. */
static dcp_status dcp__rope_setup(const dcp_rope_options *options,
                                  const dcp_thd_layout *layout, int32_t rank, int32_t heads,
                                  int32_t dim, const float *x, const float *y,
                                  const char *const *names, dcp_rope_options *o,
                                  dcp_error *error)
{
    const void *const pointers[] = {x, y};
    int64_t rows;
    dcp_status status;
    if (heads < 1 || dim < 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "num_heads and head_dim must be >= 1, got %d and %d", (int)heads,
                             (int)dim);
    if ((status = dcp_rope_options_resolve(options, dim, o, error)) != DCP_OK) return status;
    if ((status = dcp_thd_layout_validate(layout, &rows, error)) != DCP_OK) return status;
    if ((status = dcp_check_rank("rank", rank, layout->cp, error)) != DCP_OK) return status;
    if ((status = dcp__check_elements(names[0], rows, heads, dim, error)) != DCP_OK)
        return status;
    return dcp__check_pointers(2, pointers, names, error);
}

static void dcp__rope_apply(const dcp_rope_options *o, const dcp_thd_layout *layout,
                            int32_t rank, int32_t heads, int32_t dim, double direction,
                            const float *x, float *y)
{
    const int64_t width = (int64_t)heads * dim;
    int64_t local, d;
    int32_t i;
    for (i = 0; i < layout->num_sequences; i++) {
        const dcp__seq s = dcp__thd_seq(layout, i);
        for (local = 0; local < s.rows; local++) {
            const int64_t position = dcp_zigzag_position(s.padded, layout->cp, rank, local);
            const int64_t at = (s.offset + local) * width;
            if (position < s.valid) {
                dcp__rope_row(o, heads, dim, position, direction, x + at, y + at);
                continue;
            }
            for (d = 0; d < width; d++) y[at + d] = 0.0f;
        }
    }
}

/* One RoPE pass: forward (direction +1, x -> y) or backward (-1, dy -> dx). */
static dcp_status dcp__rope_run(const dcp_rope_options *options, const dcp_thd_layout *layout,
                                int32_t rank, int32_t heads, int32_t dim, double direction,
                                const float *x, float *y, dcp_error *error)
{
    static const char *const forward_names[] = {"x", "y"}, *const backward_names[] = {"dy", "dx"};
    dcp_rope_options o;
    const dcp_status status =
        dcp__rope_setup(options, layout, rank, heads, dim, x, y,
                        direction > 0.0 ? forward_names : backward_names, &o, error);
    if (status != DCP_OK) return status;
    dcp__rope_apply(&o, layout, rank, heads, dim, direction, x, y);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_rope_forward(const dcp_rope_options *options,
                                   const dcp_thd_layout *layout, int32_t rank,
                                   int32_t num_heads, int32_t head_dim, const float *x,
                                   float *y, dcp_error *error)
{
    return dcp__rope_run(options, layout, rank, num_heads, head_dim, 1.0, x, y, error);
}

DCPDEF dcp_status dcp_rope_backward(const dcp_rope_options *options,
                                    const dcp_thd_layout *layout, int32_t rank,
                                    int32_t num_heads, int32_t head_dim, const float *dy,
                                    float *dx, dcp_error *error)
{
    return dcp__rope_run(options, layout, rank, num_heads, head_dim, -1.0, dy, dx, error);
}

/* ------------------------------------------------------------------- CPU references: conv1d
   A tap is skipped, not multiplied by zero, when it falls before its sequence's first row, so
   taps never cross a boundary and padding rows are never read. Backward recomputes the
   pre-activation wherever it needs it rather than storing it: no scratch memory. */

typedef struct dcp__conv {
    dcp_conv1d_params p; /* resolved */
    const dcp_thd_layout *layout;
    int64_t total_rows;
    const float *x, *weight, *bias, *dy;
} dcp__conv;

static dcp_status dcp__conv_setup(dcp__conv *cv, const dcp_conv1d_params *params,
                                  const dcp_thd_layout *layout, int64_t total_rows,
                                  dcp_error *error)
{
    dcp_conv1d_params p;
    int64_t rows;
    dcp_status status;
    if ((status = dcp_conv1d_params_resolve(params, &p, error)) != DCP_OK ||
        (status = dcp_thd_layout_validate(layout, &rows, error)) != DCP_OK)
        return status;
    if (layout->cp != 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "conv1d needs a layout of whole sequences (cp 1), got layout cp %d",
                             (int)layout->cp);
    if (total_rows < rows)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "total_rows %lld < cu_seqlens_padded[%d] = %lld",
                             (long long)total_rows, (int)layout->num_sequences, (long long)rows);
    if ((status = dcp__check_elements("x", total_rows, p.channels, 1, error)) != DCP_OK)
        return status;
    memset(cv, 0, sizeof *cv);
    cv->p = p;
    cv->layout = layout;
    cv->total_rows = total_rows;
    return DCP_OK;
}

/* bias + the taps of valid row t (a sequence starting at row `start`) in channel c. */
static double dcp__conv_pre(const dcp__conv *cv, int64_t start, int64_t t, int32_t c)
{
    const int32_t width = cv->p.width;
    double sum = cv->bias ? cv->bias[c] : 0.0;
    int32_t k;
    for (k = 0; k < width; k++) {
        const int64_t source = t - (width - 1) + k;
        if (source >= start)
            sum += (double)cv->weight[(int64_t)c * width + k] * cv->x[source * cv->p.channels + c];
    }
    return sum;
}

static double dcp__sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }

/* d loss / d pre-activation of valid row t in channel c. */
static double dcp__conv_dpre(const dcp__conv *cv, int64_t start, int64_t t, int32_t c)
{
    double grad = cv->dy[t * cv->p.channels + c], pre, s;
    if (!cv->p.silu) return grad;
    pre = dcp__conv_pre(cv, start, t, c);
    s = dcp__sigmoid(pre);
    return grad * s * (1.0 + pre * (1.0 - s));
}

static void dcp__conv_forward(const dcp__conv *cv, float *y)
{
    const int32_t channels = cv->p.channels;
    int64_t i, t;
    int32_t seq, c;
    for (i = 0; i < cv->total_rows * channels; i++) y[i] = 0.0f;
    for (seq = 0; seq < cv->layout->num_sequences; seq++) {
        const dcp__seq s = dcp__thd_seq(cv->layout, seq);
        for (t = s.offset; t < s.offset + s.valid; t++)
            for (c = 0; c < channels; c++) {
                const double pre = dcp__conv_pre(cv, s.offset, t, c);
                y[t * channels + c] = (float)(cv->p.silu ? pre * dcp__sigmoid(pre) : pre);
            }
    }
}

/* dweight and dbias of one channel, summed over sequences, then rows, then taps. */
static void dcp__conv_param_grads(const dcp__conv *cv, int32_t c, float *dweight, float *dbias)
{
    const int32_t width = cv->p.width;
    double dw[DCP_CONV1D_MAX_WIDTH] = {0.0}, db = 0.0;
    int64_t t;
    int32_t seq, k;
    for (seq = 0; seq < cv->layout->num_sequences; seq++) {
        const dcp__seq s = dcp__thd_seq(cv->layout, seq);
        for (t = s.offset; t < s.offset + s.valid; t++) {
            const double g = dcp__conv_dpre(cv, s.offset, t, c);
            db += g;
            for (k = 0; k < width; k++)
                if (t - (width - 1) + k >= s.offset)
                    dw[k] += g * cv->x[(t - (width - 1) + k) * cv->p.channels + c];
        }
    }
    for (k = 0; k < width; k++) dweight[(int64_t)c * width + k] = (float)dw[k];
    if (dbias) dbias[c] = (float)db;
}

/* dx of valid row t: the rows t + (W-1) - k of the same sequence that read it through tap k. */
static double dcp__conv_dx_at(const dcp__conv *cv, const dcp__seq *s, int64_t t, int32_t c)
{
    const int32_t width = cv->p.width;
    double sum = 0.0;
    int32_t k;
    for (k = 0; k < width; k++) {
        const int64_t reader = t + (width - 1) - k;
        if (reader < s->offset + s->valid)
            sum += (double)cv->weight[(int64_t)c * width + k] *
                   dcp__conv_dpre(cv, s->offset, reader, c);
    }
    return sum;
}

static void dcp__conv_backward(const dcp__conv *cv, float *dx, float *dweight, float *dbias)
{
    const int32_t channels = cv->p.channels;
    int64_t i, t;
    int32_t seq, c;
    for (c = 0; c < channels; c++) dcp__conv_param_grads(cv, c, dweight, dbias);
    for (i = 0; i < cv->total_rows * channels; i++) dx[i] = 0.0f;
    for (seq = 0; seq < cv->layout->num_sequences; seq++) {
        const dcp__seq s = dcp__thd_seq(cv->layout, seq);
        for (t = s.offset; t < s.offset + s.valid; t++)
            for (c = 0; c < channels; c++)
                dx[t * channels + c] = (float)dcp__conv_dx_at(cv, &s, t, c);
    }
}

DCPDEF dcp_status dcp_conv1d_forward(const dcp_conv1d_params *params,
                                     const dcp_thd_layout *layout, int64_t total_rows,
                                     const float *x, const float *weight, const float *bias,
                                     float *y, dcp_error *error)
{
    static const char *const names[] = {"x", "weight", "y"};
    const void *const pointers[] = {x, weight, y};
    dcp__conv cv;
    dcp_status status;
    if ((status = dcp__conv_setup(&cv, params, layout, total_rows, error)) != DCP_OK ||
        (status = dcp__check_pointers(DCP__COUNT(names), pointers, names, error)) != DCP_OK)
        return status;
    cv.x = x, cv.weight = weight, cv.bias = bias;
    dcp__conv_forward(&cv, y);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_conv1d_backward(const dcp_conv1d_params *params,
                                      const dcp_thd_layout *layout, int64_t total_rows,
                                      const float *x, const float *weight, const float *bias,
                                      const float *dy, float *dx, float *dweight,
                                      float *dbias, dcp_error *error)
{
    static const char *const names[] = {"x", "weight", "dy", "dx", "dweight"};
    const void *const pointers[] = {x, weight, dy, dx, dweight};
    dcp__conv cv;
    dcp_status status;
    if ((status = dcp__conv_setup(&cv, params, layout, total_rows, error)) != DCP_OK ||
        (status = dcp__check_pointers(DCP__COUNT(names), pointers, names, error)) != DCP_OK)
        return status;
    if (bias && !dbias)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "dbias must not be NULL when bias is given");
    cv.x = x, cv.weight = weight, cv.bias = bias, cv.dy = dy;
    dcp__conv_backward(&cv, dx, dweight, dbias);
    return dcp_error_clear(error);
}
#endif /* DCP_NO_REFERENCE */

#ifdef __cplusplus
}
#endif

#endif /* DCP_IMPLEMENTATION_INCLUDED */
#endif /* DCP_IMPLEMENTATION */

/*
MIT License

Copyright (c) 2026 the libdcp authors

Permission is hereby granted, free of charge, to any person obtaining a copy of this software
and associated documentation files (the "Software"), to deal in the Software without
restriction, including without limitation the rights to use, copy, modify, merge, publish,
distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the
Software is furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or
substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING
BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
*/
