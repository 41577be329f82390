/* Every dcp_status a public function's comment in dcp.h names, made to happen: each case calls
   the function so that it must return that status, with the message naming what the comment
   says. tests/test_documented.sh (tests/documented_returns.py) checks that the cases below and
   the comments name the same (function, status) pairs, both ways, so that neither a comment
   nor this table can drift from the code. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct documented_case {
    const char *function;
    dcp_status status;
    dcp_status (*run)(dcp_error *error);
    const char *needle; /* in the message (NULL for DCP_OK) */
} documented_case;

/* A small plan of two groups; the caller destroys it. */
static dcp_plan *small_plan(void)
{
    const int64_t lengths[] = {1000, 3000, 200, 700};
    dcp_config c = make_config(4, 1024);
    dcp_plan *plan = NULL;
    CHECK_EQ(dcp_plan_create(&c, lengths, 4, &plan, NULL), DCP_OK);
    return plan;
}

/* ------------------------------------------------------------------------------ basics */

static dcp_status error_clear_ok(dcp_error *error)
{
    dcp_error_set(error, DCP_ERROR_IO, "earlier");
    return dcp_error_clear(error);
}

static dcp_status check_rank_out_of_range(dcp_error *error)
{
    return dcp_check_rank("kv_rank", 4, 4, error);
}

static dcp_status check_rank_buffers_null(dcp_error *error)
{
    float a = 0, b = 0;
    const void *buffers[3] = {&a, NULL, &b};
    return dcp_check_rank_buffers("q", buffers, 3, error);
}

/* ------------------------------------------------------------------- workload model */

static dcp_status cp_size_min_infeasible(dcp_error *error)
{
    dcp_config c = make_config(4, 1024);
    int32_t cp;
    return dcp_cp_size_min(&c, 5000, &cp, error);
}

/* Every coefficient held at 0: the fit's result is the all-zero model the planner refuses. */
static dcp_status cost_fit_all_zero(dcp_error *error)
{
    const dcp_cost_measurement m[1] = {{1e6, 1e3, 1, 1e-3}};
    dcp_cost_fit_options options;
    dcp_cost_fit fit;
    memset(&options, 0, sizeof options);
    options.held_terms = DCP_COST_TERMS_ALL;
    return dcp_cost_fit_measurements(m, 1, &options, &fit, error);
}

static dcp_status cost_fit_out_of_range(dcp_error *error)
{
    dcp_cost_measurement m[3] = {{1, 0, 0, 1e200}, {0, 1, 0, 1e-3}, {0, 0, 1, 1e-3}};
    dcp_cost_fit fit;
    return dcp_cost_fit_measurements(m, 3, NULL, &fit, error);
}

static dcp_status lengths_filter_bad_length(dcp_error *error)
{
    const int64_t lengths[] = {100, 0};
    dcp_config c = make_config(4, 1024);
    int64_t kept[2];
    int32_t ids[2], count;
    return dcp_lengths_filter(&c, lengths, 2, kept, ids, &count, NULL, error);
}

static dcp_status loguniform_bad_range(dcp_error *error)
{
    dcp_rng rng;
    int64_t length;
    dcp_rng_seed(&rng, 1);
    return dcp_rng_loguniform_length(&rng, 10, 5, &length, error);
}

/* ------------------------------------------------------------------------- planner */

/* A limit below what four samples need: refused before any allocation. */
static dcp_status plan_create_over_limit(dcp_error *error)
{
    const int64_t lengths[] = {1000, 3000, 200, 700};
    dcp_config c = make_config(4, 1024);
    dcp_plan *plan = NULL;
    c.memory_limit = 1;
    return dcp_plan_create(&c, lengths, 4, &plan, error);
}

static dcp_status memory_estimate_no_count(dcp_error *error)
{
    dcp_config c = make_config(4, 1024);
    int64_t bytes;
    return dcp_plan_memory_estimate(&c, 0, &bytes, error);
}

static dcp_status plan_trusted_made_here(dcp_error *error)
{
    dcp_plan *plan = small_plan();
    dcp_status status = dcp_plan_trusted(plan, error);
    dcp_plan_destroy(plan);
    return status;
}

/* The small plan uses two CP sizes; room for one. */
static dcp_status histogram_small_capacity(dcp_error *error)
{
    dcp_plan *plan = small_plan();
    int32_t sizes[1], samples[1], count = 0;
    dcp_status status = dcp_plan_cp_histogram(plan, sizes, samples, 1, &count, error);
    dcp_plan_destroy(plan);
    return status;
}

static dcp_status plan_compare_same(dcp_error *error)
{
    dcp_plan *a = small_plan(), *b = small_plan();
    dcp_status status = dcp_plan_compare(a, b, error);
    dcp_plan_destroy(a), dcp_plan_destroy(b);
    return status;
}

static dcp_status plan_compare_different(dcp_error *error)
{
    dcp_plan *a = small_plan(), *b = small_plan();
    dcp_status status;
    b->sample_lengths[2] = 201; /* still a valid plan */
    status = dcp_plan_compare(a, b, error);
    dcp_plan_destroy(a), dcp_plan_destroy(b);
    return status;
}

static dcp_status plan_svg_small_buffer(dcp_error *error)
{
    dcp_plan *plan = small_plan();
    const dcp_plan *plans[1];
    char buffer[64];
    size_t size = 0;
    dcp_status status;
    plans[0] = plan;
    status = dcp_plan_svg(plans, NULL, 1, NULL, buffer, sizeof buffer, &size, error);
    CHECK_EQ(buffer[0], '\0'); /* never a truncated picture */
    dcp_plan_destroy(plan);
    return status;
}

/* ---------------------------------------------------------------------- THD views */

static dcp_status view_create_ok(dcp_error *error)
{
    dcp_plan *plan = small_plan();
    dcp_rank_view *view = NULL;
    dcp_status status = dcp_rank_view_create(plan, 3, 0, &view, error);
    dcp_rank_view_destroy(view);
    dcp_plan_destroy(plan);
    return status;
}

static dcp_status view_create_bad_rank(dcp_error *error)
{
    dcp_plan *plan = small_plan();
    dcp_rank_view *view = NULL;
    dcp_status status = dcp_rank_view_create(plan, 4, 0, &view, error);
    CHECK(view == NULL);
    dcp_plan_destroy(plan);
    return status;
}

static dcp_status view_create_broken_plan(dcp_error *error)
{
    dcp_plan *plan = small_plan();
    dcp_rank_view *view = NULL;
    dcp_status status;
    plan->groups[0].cp = 3;
    plan->seal = 0; /* changed by hand: validated again at its next use */
    status = dcp_rank_view_create(plan, 0, 0, &view, error);
    plan->groups[0].cp = 1; /* whatever it was, destroy reads no group */
    dcp_plan_destroy(plan);
    return status;
}

/* One sample of 2^31 - 1 tokens at cp 2 pads to 2^31: beyond the int32 cu_seqlens. */
static dcp_status view_create_overflow(dcp_error *error)
{
    const int64_t lengths[] = {DCP_MAX_SAMPLE_LENGTH};
    dcp_config c = make_config(2, DCP_MAX_SAMPLE_LENGTH);
    dcp_plan *plan = NULL;
    dcp_rank_view *view = NULL;
    dcp_status status;
    c.min_cp = 2;
    CHECK_EQ(dcp_plan_create(&c, lengths, 1, &plan, NULL), DCP_OK);
    status = dcp_rank_view_create(plan, 0, 0, &view, error);
    dcp_plan_destroy(plan);
    return status;
}

static dcp_status view_validate_broken(dcp_error *error)
{
    dcp_plan *plan = small_plan();
    dcp_rank_view *view = NULL;
    dcp_status status;
    CHECK_EQ(dcp_rank_view_create(plan, 0, 0, &view, NULL), DCP_OK);
    view->max_seqlen++;
    status = dcp_rank_view_validate(view, error);
    dcp_rank_view_destroy(view);
    dcp_plan_destroy(plan);
    return status;
}

static dcp_status view_runs_small_capacity(dcp_error *error)
{
    dcp_plan *plan = small_plan();
    dcp_rank_view *view = NULL;
    dcp_row_run run;
    int32_t count = 0;
    dcp_status status;
    CHECK_EQ(dcp_rank_view_create(plan, 0, 0, &view, NULL), DCP_OK);
    status = dcp_rank_view_runs(view, &run, 0, &count, error);
    CHECK(count >= 1);
    dcp_rank_view_destroy(view);
    dcp_plan_destroy(plan);
    return status;
}

static dcp_status varlen_call_idle(dcp_error *error)
{
    const int64_t lengths[] = {100};
    dcp_config c = make_config(4, 1024);
    dcp_plan *plan = NULL;
    dcp_rank_view *view = NULL;
    dcp_varlen_call call;
    int32_t cells[5][2];
    dcp_varlen_rows rows = {cells[0], cells[1], cells[2], cells[3], cells[4]};
    dcp_status status;
    c.max_cp = 1;
    CHECK_EQ(dcp_plan_create(&c, lengths, 1, &plan, NULL), DCP_OK);
    CHECK_EQ(dcp_rank_view_create(plan, 2, 0, &view, NULL), DCP_OK);
    status = dcp_rank_view_varlen_call(view, 0, 1, &call, &rows, error);
    dcp_rank_view_destroy(view);
    dcp_plan_destroy(plan);
    return status;
}

/* ---------------------------------------------------------------------- exchange */

static dcp_status plan_serialize_small_buffer(dcp_error *error)
{
    dcp_plan *plan = small_plan();
    unsigned char buffer[16];
    size_t size = 0;
    dcp_status status = dcp_plan_serialize(plan, buffer, sizeof buffer, &size, error);
    CHECK(size > sizeof buffer);
    dcp_plan_destroy(plan);
    return status;
}

/* A plan's or a view's bytes with one byte flipped or the version changed. */
static unsigned char *serialized(int view, size_t *size)
{
    dcp_plan *plan = small_plan();
    dcp_rank_view *v = NULL;
    unsigned char *bytes;
    if (view) CHECK_EQ(dcp_rank_view_create(plan, 1, 0, &v, NULL), DCP_OK);
    if (view)
        dcp_rank_view_serialize(v, NULL, 0, size, NULL);
    else
        dcp_plan_serialize(plan, NULL, 0, size, NULL);
    bytes = (unsigned char *)malloc(*size);
    if (view)
        CHECK_EQ(dcp_rank_view_serialize(v, bytes, *size, size, NULL), DCP_OK);
    else
        CHECK_EQ(dcp_plan_serialize(plan, bytes, *size, size, NULL), DCP_OK);
    dcp_rank_view_destroy(v);
    dcp_plan_destroy(plan);
    return bytes;
}

#define VERSION_BYTE 8 /* after the 8-byte magic, little-endian */

static dcp_status deserialize(int view, int version, dcp_error *error)
{
    size_t size = 0;
    unsigned char *bytes = serialized(view, &size);
    dcp_plan *plan = NULL;
    dcp_rank_view *v = NULL;
    dcp_status status;
    if (version)
        bytes[VERSION_BYTE] = (unsigned char)(DCP_FORMAT_VERSION + 1);
    else
        bytes[size / 2] ^= 0x5a;
    status = view ? dcp_rank_view_deserialize(bytes, size, NULL, &v, error)
                  : dcp_plan_deserialize(bytes, size, NULL, &plan, error);
    CHECK(plan == NULL && v == NULL);
    free(bytes);
    return status;
}

static dcp_status plan_deserialize_corrupt(dcp_error *e) { return deserialize(0, 0, e); }
static dcp_status plan_deserialize_version(dcp_error *e) { return deserialize(0, 1, e); }
static dcp_status view_deserialize_corrupt(dcp_error *e) { return deserialize(1, 0, e); }
static dcp_status view_deserialize_version(dcp_error *e) { return deserialize(1, 1, e); }

static dcp_status flops_stats_overflow(dcp_error *error)
{
    const int64_t lengths[3] = {DCP_MAX_SAMPLE_LENGTH, DCP_MAX_SAMPLE_LENGTH,
                                DCP_MAX_SAMPLE_LENGTH};
    dcp_config c = make_config(1, DCP_MAX_SAMPLE_LENGTH);
    dcp_plan *plan = NULL;
    dcp_flops_stats stats;
    dcp_status status;
    CHECK_EQ(dcp_plan_create(&c, lengths, 3, &plan, NULL), DCP_OK);
    status = dcp_plan_flops_stats(plan, &stats, error); /* 3 x 2^62 */
    dcp_plan_destroy(plan);
    return status;
}

/* ------------------------------------------------------------- distributed logic */

#ifndef DCP_NO_DISTRIBUTED
static dcp_status comm_max_cp_infeasible(dcp_error *error)
{
    dcp_config c = make_config(4, 1024), resolved;
    int32_t max_cp;
    CHECK_EQ(dcp_config_resolve(&c, &resolved, NULL), DCP_OK);
    return dcp_comm_max_cp(&resolved, 5000, &max_cp, error);
}

static dcp_status override_end_not_open(dcp_error *error)
{
    dcp_comm_state state;
    dcp_comm_scope scope;
    memset(&scope, 0, sizeof scope);
    CHECK_EQ(dcp_comm_state_init(&state, 8, 3, 4, NULL), DCP_OK);
    return dcp_comm_override_end(&state, &scope, error);
}

/* Every rank's reroute list of one plan, one transfer of rank 1 moved by a row. */
static dcp_status reroute_match_mismatch(dcp_error *error)
{
    const int32_t holders[] = {0, 1, 2, 3};
    dcp_plan *plan = small_plan();
    dcp_reroute *lists[4] = {NULL, NULL, NULL, NULL};
    dcp_status status;
    int32_t r, i;
    for (r = 0; r < 4; r++) CHECK_EQ(dcp_reroute_create(plan, holders, r, &lists[r], NULL), DCP_OK);
    for (i = 0; lists[1] && i < lists[1]->count; i++)
        if (lists[1]->transfers[i].kind != DCP_TRANSFER_COPY) break;
    CHECK(lists[1] && i < lists[1]->count); /* sample 1 (3,000 tokens) leaves rank 1 */
    if (lists[1] && i < lists[1]->count) lists[1]->transfers[i].destination_row++;
    status = dcp_reroute_match((const dcp_reroute *const *)lists, 4, NULL, error);
    for (r = 0; r < 4; r++) dcp_reroute_destroy(lists[r]);
    dcp_plan_destroy(plan);
    return status;
}

static dcp_status reroute_op_overflow(dcp_error *error)
{
    const int32_t holders[] = {3, 2, 1, 0};
    dcp_plan *plan = small_plan();
    dcp_reroute *list = NULL;
    dcp_reroute_op op;
    dcp_status status;
    CHECK_EQ(dcp_reroute_create(plan, holders, 0, &list, NULL), DCP_OK);
    status = dcp_reroute_op_get(list, 0, SIZE_MAX / 2, &op, error);
    dcp_reroute_destroy(list);
    dcp_plan_destroy(plan);
    return status;
}

static dcp_status field_bytes_overflow(dcp_error *error)
{
    const int32_t holders[] = {3, 2, 1, 0};
    dcp_plan *plan = small_plan();
    dcp_reroute *list = NULL;
    dcp_field_set set;
    dcp_reroute_bytes bytes;
    dcp_status status;
    int f;
    CHECK_EQ(dcp_reroute_create(plan, holders, 0, &list, NULL), DCP_OK);
    set.fields = DCP_FIELDS_ALL;
    for (f = 0; f < DCP_FIELD_COUNT; f++) set.element_size[f] = SIZE_MAX / 4;
    status = dcp_reroute_field_bytes(list, &set, &bytes, error);
    dcp_reroute_destroy(list);
    dcp_plan_destroy(plan);
    return status;
}

static dcp_status a2a_channels_not_divisible(dcp_error *error)
{
    const int32_t cu[] = {0, 100}, cu_padded[] = {0, 104};
    dcp_thd_layout layout;
    dcp_a2a_shape shape;
    layout.num_sequences = 1, layout.cu_seqlens = cu, layout.cu_seqlens_padded = cu_padded;
    layout.cp = 4;
    return dcp_a2a_shape_get(&layout, 0, 6, 2, &shape, error);
}
#endif

static const documented_case cases[] = {
    {"dcp_error_clear", DCP_OK, error_clear_ok, NULL},
    {"dcp_check_rank", DCP_ERROR_INVALID_ARGUMENT, check_rank_out_of_range, "kv_rank"},
    {"dcp_check_rank_buffers", DCP_ERROR_INVALID_ARGUMENT, check_rank_buffers_null, "q[1]"},
    {"dcp_cp_size_min", DCP_ERROR_INFEASIBLE, cp_size_min_infeasible, "length 5000"},
    {"dcp_cost_fit_measurements", DCP_ERROR_INFEASIBLE, cost_fit_all_zero, "0"},
    {"dcp_cost_fit_measurements", DCP_ERROR_OVERFLOW, cost_fit_out_of_range, "attn_coeff"},
    {"dcp_lengths_filter", DCP_ERROR_INVALID_ARGUMENT, lengths_filter_bad_length, "0"},
    {"dcp_rng_loguniform_length", DCP_ERROR_INVALID_ARGUMENT, loguniform_bad_range, "10"},
    {"dcp_plan_create", DCP_ERROR_OUT_OF_MEMORY, plan_create_over_limit, "memory limit"},
    {"dcp_plan_memory_estimate", DCP_ERROR_INVALID_ARGUMENT, memory_estimate_no_count, "count"},
    {"dcp_plan_trusted", DCP_OK, plan_trusted_made_here, NULL},
    {"dcp_plan_cp_histogram", DCP_ERROR_INVALID_ARGUMENT, histogram_small_capacity, "capacity"},
    {"dcp_plan_compare", DCP_OK, plan_compare_same, NULL},
    {"dcp_plan_compare", DCP_ERROR_INVALID_PLAN, plan_compare_different, "length 200/201"},
    {"dcp_plan_svg", DCP_ERROR_INVALID_ARGUMENT, plan_svg_small_buffer, "too small"},
    {"dcp_rank_view_create", DCP_OK, view_create_ok, NULL},
    {"dcp_rank_view_create", DCP_ERROR_INVALID_ARGUMENT, view_create_bad_rank, "rank 4"},
    {"dcp_rank_view_create", DCP_ERROR_INVALID_PLAN, view_create_broken_plan, "cp 3"},
    {"dcp_rank_view_create", DCP_ERROR_OVERFLOW, view_create_overflow, "int32"},
    {"dcp_rank_view_validate", DCP_ERROR_INVALID_ARGUMENT, view_validate_broken, "max_seqlen"},
    {"dcp_rank_view_runs", DCP_ERROR_INVALID_ARGUMENT, view_runs_small_capacity, "capacity 0"},
    {"dcp_rank_view_varlen_call", DCP_ERROR_INVALID_ARGUMENT, varlen_call_idle, "idle"},
    {"dcp_plan_serialize", DCP_ERROR_INVALID_ARGUMENT, plan_serialize_small_buffer, "too small"},
    {"dcp_plan_deserialize", DCP_ERROR_CORRUPT_DATA, plan_deserialize_corrupt, "plan"},
    {"dcp_plan_deserialize", DCP_ERROR_UNSUPPORTED, plan_deserialize_version, "version"},
    {"dcp_rank_view_deserialize", DCP_ERROR_CORRUPT_DATA, view_deserialize_corrupt, "view"},
    {"dcp_rank_view_deserialize", DCP_ERROR_UNSUPPORTED, view_deserialize_version, "version"},
    {"dcp_plan_flops_stats", DCP_ERROR_OVERFLOW, flops_stats_overflow, "int64"},
#ifndef DCP_NO_DISTRIBUTED
    {"dcp_comm_max_cp", DCP_ERROR_INFEASIBLE, comm_max_cp_infeasible, "5000"},
    {"dcp_comm_override_end", DCP_ERROR_INVALID_ARGUMENT, override_end_not_open, "not open"},
    {"dcp_reroute_match", DCP_ERROR_INVALID_PLAN, reroute_match_mismatch, "rank"},
    {"dcp_reroute_op_get", DCP_ERROR_OVERFLOW, reroute_op_overflow, "size_t"},
    {"dcp_reroute_field_bytes", DCP_ERROR_OVERFLOW, field_bytes_overflow, "uint64"},
    {"dcp_a2a_shape_get", DCP_ERROR_INVALID_ARGUMENT, a2a_channels_not_divisible, "channels 6"},
#endif
};

static void every_documented_return_happens(void)
{
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dcp_error error;
        dcp_status status;
        memset(&error, 0, sizeof error);
        error.status = (dcp_status)-1;
        status = cases[i].run(&error);
        if (status != cases[i].status || error.status != cases[i].status ||
            (cases[i].needle && !strstr(error.message, cases[i].needle)) ||
            (!cases[i].needle && error.message[0] != '\0')) {
            fprintf(stderr, "%s: returned %s (%s), documented %s%s%s\n", cases[i].function,
                    dcp_status_string(status), error.message,
                    dcp_status_string(cases[i].status), cases[i].needle ? " naming " : "",
                    cases[i].needle ? cases[i].needle : "");
            CHECK(0);
        }
    }
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"every_documented_return_happens", every_documented_return_happens},
    };
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
