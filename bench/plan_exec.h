/* plan_exec.h - the accounting of bench/plan_vs_exec, host-only C99 (also C++ and nvcc), so
   tests/test_calibrate.c checks it without a GPU: measured per-group durations turned into
   per-rank and per-microbatch times under the plan's synchronisation model, the same rule
   dcp_plan_schedule applies to the model's durations (DESIGN.md section 3):
   - before each microbatch, every aligned block of E = sync_ranks ranks waits for its slowest
     rank (E = 1: no wait; E = D: a barrier across the pool);
   - a group starts when every one of its ranks is free and keeps all of them for its
     duration (its ranks run the ring together, so a group's duration is per rank).
   With the model's durations it reproduces dcp_plan_schedule (the test checks that), so the
   measured and the predicted times differ only by the durations. Include after dcp.h. */
#ifndef DCP_BENCH_PLAN_EXEC_H
#define DCP_BENCH_PLAN_EXEC_H

#include <float.h>

/* Where a plan's executed times go. The arrays belong to the caller: rank_finish [ranks],
   group_start and group_end [num_groups], microbatch_end [num_microbatches]. */
typedef struct plan_exec_times {
    double *rank_finish;    /* when each rank finishes its last group: its step time */
    double *group_start;
    double *group_end;
    double *microbatch_end; /* when the last group of microbatches 0 .. k has ended */
    double step_seconds;    /* the largest rank_finish */
} plan_exec_times;

/* Fills *times from group_seconds[g], the measured per-rank duration of group g. Checks the
   plan (dcp_plan_validate) and every duration (finite, >= 0); no allocation. */
static dcp_status plan_exec_account(const dcp_plan *plan, const double *group_seconds,
                                    plan_exec_times *times, dcp_error *error)
{
    int32_t k, g, r, first, sync;
    dcp_status status;
    if (!group_seconds || !times || !times->rank_finish || !times->group_start ||
        !times->group_end || !times->microbatch_end)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "group_seconds, times and its four arrays must not be NULL");
    if ((status = dcp_plan_validate(plan, error)) != DCP_OK) return status;
    for (g = 0; g < plan->num_groups; g++)
        if (!(group_seconds[g] >= 0.0 && group_seconds[g] <= DBL_MAX))
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "group_seconds[%d] = %g must be finite and >= 0", (int)g,
                                 group_seconds[g]);
    sync = plan->config.sync_ranks;
    for (r = 0; r < plan->config.ranks; r++) times->rank_finish[r] = 0.0;
    for (k = 0; k < plan->num_microbatches; k++) {
        for (first = 0; sync > 1 && first < plan->config.ranks; first += sync) {
            int32_t end = first + sync < plan->config.ranks ? first + sync : plan->config.ranks;
            double ready = 0.0;
            for (r = first; r < end; r++)
                if (times->rank_finish[r] > ready) ready = times->rank_finish[r];
            for (r = first; r < end; r++) times->rank_finish[r] = ready;
        }
        times->microbatch_end[k] = k > 0 ? times->microbatch_end[k - 1] : 0.0;
        for (g = plan->microbatch_offsets[k]; g < plan->microbatch_offsets[k + 1]; g++) {
            const dcp_group *group = &plan->groups[g];
            double start = 0.0;
            for (r = group->first_rank; r < group->first_rank + group->cp; r++)
                if (times->rank_finish[r] > start) start = times->rank_finish[r];
            for (r = group->first_rank; r < group->first_rank + group->cp; r++)
                times->rank_finish[r] = start + group_seconds[g];
            times->group_start[g] = start;
            times->group_end[g] = start + group_seconds[g];
            if (times->group_end[g] > times->microbatch_end[k])
                times->microbatch_end[k] = times->group_end[g];
        }
    }
    times->step_seconds = 0.0;
    for (r = 0; r < plan->config.ranks; r++)
        if (times->rank_finish[r] > times->step_seconds)
            times->step_seconds = times->rank_finish[r];
    return dcp_error_clear(error);
}

/* The valid lengths of group g's samples, in plan order, into lengths[0 .. sample_count). */
static void plan_exec_group_lengths(const dcp_plan *plan, int32_t g, int64_t *lengths)
{
    const dcp_group *group = &plan->groups[g];
    int32_t i;
    for (i = 0; i < group->sample_count; i++)
        lengths[i] = plan->sample_lengths[plan->group_samples[group->sample_offset + i]];
}

#endif
