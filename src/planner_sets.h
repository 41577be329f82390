/* src/planner_sets.h - the planner beyond the buddy tree: CP-size sets that are not powers of
   two (Megatron's, any, a list), covering every rank, the interval fill and their candidates.
   Part of dcp.h: edit here, then run `make amalgamate` (tools/amalgamate.py writes dcp.h
   from src/dcp.h.in and these parts); make test fails while dcp.h is stale. */
//@@ implementation
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

