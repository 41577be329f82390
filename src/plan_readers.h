/* src/plan_readers.h - what reads a finished plan: the validator, the simulator and schedule,
   the SVG timeline and the CP-size histogram.
   Part of dcp.h: edit here, then run `make amalgamate` (tools/amalgamate.py writes dcp.h
   from src/dcp.h.in and these parts); make test fails while dcp.h is stale. */
//@@ declarations
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

//@@ implementation
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

