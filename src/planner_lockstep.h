/* src/planner_lockstep.h - the planner under lockstep (E > 1) and the baselines: greedy,
   the packing-aware candidate, Megatron-LM's scheduler, the unloading of bottlenecks and blocks,
   the candidate table that orders them, and dcp_plan_create.
   Part of dcp.h: edit here, then run `make amalgamate` (tools/amalgamate.py writes dcp.h
   from src/dcp.h.in and these parts); make test fails while dcp.h is stale. */
//@@ implementation
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

