/* src/planner.h - the planner's declarations (dcp_plan_create and what reads a plan) and its core:
   the whole at a glance, the tuning block, plan assembly, the shared tables, static CP, the
   buddy tree and the E = 1 tree planner with its local search and lockstep form.
   Part of dcp.h: edit here, then run `make amalgamate` (tools/amalgamate.py writes dcp.h
   from src/dcp.h.in and these parts); make test fails while dcp.h is stale. */
//@@ declarations
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
//@@ implementation
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

