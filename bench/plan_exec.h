/* plan_exec.h - the accounting of bench/plan_vs_exec, host-only C99 (also C++ and nvcc), so
   tests/test_calibrate.c checks it without a GPU: measured per-group durations turned into
   per-rank and per-microbatch times under the plan's synchronisation model, by the rule
   dcp_plan_schedule applies to the model's durations (dcp_plan_schedule_durations; DESIGN.md
   section 3):
   - before each microbatch, every aligned block of E = sync_ranks ranks waits for its slowest
     rank (E = 1: no wait; E = D: a barrier across the pool);
   - a group starts when every one of its ranks is free and keeps all of them for its
     duration (its ranks run the ring together, so a group's duration is per rank).
   With the model's durations it reproduces dcp_plan_schedule (the test checks that), so the
   measured and the predicted times differ only by the durations. A rank's finish is the end
   of its last group. Include after dcp.h. */
#ifndef DCP_BENCH_PLAN_EXEC_H
#define DCP_BENCH_PLAN_EXEC_H

/* Where a plan's executed times go. The arrays belong to the caller: rank_finish [ranks],
   group_start and group_end [num_groups], microbatch_end [num_microbatches]. */
typedef struct plan_exec_times {
    double *rank_finish;    /* when each rank finishes its last group: its step time */
    double *group_start;
    double *group_end;
    double *microbatch_end; /* when the last group of microbatches 0 .. k has ended */
    double step_seconds;    /* the largest rank_finish */
} plan_exec_times;

/* Fills *times from group_seconds[g], the measured per-rank duration of group g, scheduled by
   dcp_plan_schedule_durations (which checks the plan and every duration). No allocation
   here; the schedule allocates its scratch with the plan's allocator. */
static dcp_status plan_exec_account(const dcp_plan *plan, const double *group_seconds,
                                    plan_exec_times *times, dcp_error *error)
{
    int32_t k, g, r;
    dcp_status status;
    if (!times || !times->rank_finish || !times->group_start || !times->group_end ||
        !times->microbatch_end)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "times and its four arrays must not be NULL");
    if ((status = dcp_plan_schedule_durations(plan, group_seconds, times->group_start,
                                              times->group_end, error)) != DCP_OK)
        return status;
    for (r = 0; r < plan->config.ranks; r++) times->rank_finish[r] = 0.0;
    times->step_seconds = 0.0;
    for (k = 0; k < plan->num_microbatches; k++) {
        times->microbatch_end[k] = k > 0 ? times->microbatch_end[k - 1] : 0.0;
        for (g = plan->microbatch_offsets[k]; g < plan->microbatch_offsets[k + 1]; g++) {
            const dcp_group *group = &plan->groups[g];
            const double end = times->group_end[g];
            for (r = group->first_rank; r < group->first_rank + group->cp; r++)
                if (end > times->rank_finish[r]) times->rank_finish[r] = end;
            if (end > times->microbatch_end[k]) times->microbatch_end[k] = end;
            if (end > times->step_seconds) times->step_seconds = end;
        }
    }
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
