/* src/base.h - the basics every part uses (status codes and errors, allocator hooks, the generator,
   integer helpers), the workload model (dcp_config, dcp_plan, the cost model) and its
   calibration from measured times.
   Part of dcp.h: edit here, then run `make amalgamate` (tools/amalgamate.py writes dcp.h
   from src/dcp.h.in and these parts); make test fails while dcp.h is stale. */
//@@ declarations
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

//@@ implementation
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

