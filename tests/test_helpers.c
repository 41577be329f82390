/* The helpers a data loader needs: dcp_config_init, dcp_lengths_filter, length files with
   line numbers (BOM, headers), dcp_plan_sample_location, dcp_plan_compare and
   dcp_reroute_match, each also against a planted fault it must report; and the portable
   lowest-set-bit code the planner uses where the compiler has no builtin (forced here). */
#define DCP__PORTABLE_BITS
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "test.h"

#define TEST_RANKS 8
#define TEST_MAX_TOKENS 4096
#define TEST_SAMPLES 64
#define TEST_SEED 11 /* fixed: the same batch on every machine */

static dcp_plan *test_plan(int64_t *lengths)
{
    dcp_lognormal dist = {3000.0, 1.2, 1, TEST_RANKS * TEST_MAX_TOKENS};
    dcp_config c = make_config(TEST_RANKS, TEST_MAX_TOKENS);
    dcp_plan *plan = NULL;
    dcp_error error;
    CHECK_EQ(dcp_lengths_lognormal(&dist, TEST_SEED, lengths, TEST_SAMPLES, &error), DCP_OK);
    CHECK_EQ(dcp_plan_create(&c, lengths, TEST_SAMPLES, &plan, &error), DCP_OK);
    return plan;
}

static void config_init_is_all_default(void)
{
    dcp_config a = dcp_config_init(), zero;
    memset(&zero, 0, sizeof zero);
    CHECK(memcmp(&a, &zero, sizeof a) == 0);
}

static void filter_keeps_ids_and_reports_drops(void)
{
    const int64_t lengths[6] = {100, 70000, 4096, 32768, 32769, 1};
    int64_t kept[6];
    int32_t ids[6], dropped[6], count = -1;
    dcp_config c = make_config(TEST_RANKS, TEST_MAX_TOKENS);
    dcp_error error;
    const int64_t bad[2] = {5, 0};
    CHECK_EQ(dcp_lengths_filter(&c, lengths, 6, kept, ids, &count, dropped, &error), DCP_OK);
    CHECK_EQ(count, 4);
    CHECK(ids[0] == 0 && ids[1] == 2 && ids[2] == 3 && ids[3] == 5);
    CHECK(kept[0] == 100 && kept[1] == 4096 && kept[2] == 32768 && kept[3] == 1);
    CHECK(dropped[0] == 1 && dropped[1] == 4);
    CHECK_EQ(dcp_lengths_filter(&c, bad, 2, kept, ids, &count, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "sample 1 has length 0");
    CHECK_EQ(dcp_lengths_filter(&c, lengths, 6, kept, NULL, &count, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
}

static void length_lines_bom_and_headers(void)
{
    const char text[] = "\xEF\xBB\xBF# lengths\n\n10\n20 # twenty\n\n30\n";
    int64_t *lengths = NULL, *lines = NULL;
    int32_t count = 0;
    dcp_error error;
    CHECK_EQ(dcp_lengths_parse_lines(text, sizeof text - 1, NULL, &lengths, &lines, &count,
                                     &error),
             DCP_OK);
    CHECK_EQ(count, 3);
    if (count == 3) {
        CHECK(lengths[0] == 10 && lengths[1] == 20 && lengths[2] == 30);
        CHECK(lines[0] == 3 && lines[1] == 4 && lines[2] == 6);
    }
    dcp_free(NULL, lengths);
    dcp_free(NULL, lines);
    CHECK_EQ(dcp_lengths_parse("abc\n200\n", 8, NULL, &lengths, &count, &error), DCP_ERROR_PARSE);
    CHECK_CONTAINS(error.message, "\"abc\" is neither a length nor a header");
    CHECK_EQ(dcp_lengths_parse("Seq_Len\n200\n", 12, NULL, &lengths, &count, &error), DCP_OK);
    CHECK(count == 1 && lengths[0] == 200);
    dcp_free(NULL, lengths);
    CHECK_EQ(dcp_lengths_read_file("build", NULL, &lengths, &count, &error), DCP_ERROR_IO);
    CHECK_CONTAINS(error.message, "Is a directory");
    CHECK_EQ(dcp_lengths_read_file("build/no/such", NULL, &lengths, &count, &error), DCP_ERROR_IO);
    CHECK_CONTAINS(error.message, "No such file or directory");
}

static void sample_location_finds_every_sample(void)
{
    int64_t lengths[TEST_SAMPLES];
    dcp_plan *plan = test_plan(lengths);
    dcp_error error;
    int32_t s, k = -1, g = -1, i;
    if (!plan) return;
    for (s = 0; s < TEST_SAMPLES; s++) {
        int found = 0;
        CHECK_EQ(dcp_plan_sample_location(plan, s, &k, &g, &error), DCP_OK);
        CHECK(g >= plan->microbatch_offsets[k] && g < plan->microbatch_offsets[k + 1]);
        for (i = 0; i < plan->groups[g].sample_count; i++)
            found |= plan->group_samples[plan->groups[g].sample_offset + i] == s;
        CHECK(found);
    }
    CHECK_EQ(dcp_plan_sample_location(plan, TEST_SAMPLES, &k, &g, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_plan_sample_location(NULL, 0, &k, &g, &error), DCP_ERROR_INVALID_ARGUMENT);
    dcp_plan_destroy(plan);
}

static void compare_finds_a_difference(void)
{
    int64_t lengths[TEST_SAMPLES];
    dcp_plan *plan = test_plan(lengths), *copy = NULL;
    dcp_error error;
    size_t size = 0;
    void *buffer;
    if (!plan) return;
    CHECK_EQ(dcp_plan_serialize(plan, NULL, 0, &size, &error), DCP_OK);
    buffer = malloc(size);
    CHECK_EQ(dcp_plan_serialize(plan, buffer, size, &size, &error), DCP_OK);
    CHECK_EQ(dcp_plan_deserialize(buffer, size, NULL, &copy, &error), DCP_OK);
    CHECK_EQ(dcp_plan_compare(plan, copy, &error), DCP_OK);
    if (copy) {
        copy->group_samples[3] ^= 1; /* planted: two samples swap places */
        CHECK_EQ(dcp_plan_compare(plan, copy, &error), DCP_ERROR_INVALID_PLAN);
        CHECK_CONTAINS(error.message, "sample slot 3");
        copy->group_samples[3] ^= 1;
        copy->groups[0].first_rank += 1; /* planted: a group moves */
        CHECK_EQ(dcp_plan_compare(plan, copy, &error), DCP_ERROR_INVALID_PLAN);
        CHECK_CONTAINS(error.message, "group 0");
        copy->groups[0].first_rank -= 1;
        copy->config.ranks *= 2;
        CHECK_EQ(dcp_plan_compare(plan, copy, &error), DCP_ERROR_INVALID_PLAN);
        CHECK_CONTAINS(error.message, "config ranks");
        copy->config.ranks /= 2;
        copy->config.sync_ranks = copy->config.sync_ranks > 1 ? 1 : copy->config.ranks;
        CHECK_EQ(dcp_plan_compare(plan, copy, &error), DCP_ERROR_INVALID_PLAN);
        CHECK_CONTAINS(error.message, "config sync_ranks");
    }
    free(buffer);
    dcp_plan_destroy(copy);
    dcp_plan_destroy(plan);
}

static void reroute_match_pairs_and_catches_faults(void)
{
    int64_t lengths[TEST_SAMPLES];
    dcp_plan *plan = test_plan(lengths);
    dcp_reroute *lists[TEST_RANKS] = {0};
    int32_t holders[TEST_SAMPLES], r, s, sender = -1, index = -1;
    dcp_error error;
    if (!plan) return;
    for (s = 0; s < TEST_SAMPLES; s++) holders[s] = (s * 5) % TEST_RANKS;
    for (r = 0; r < TEST_RANKS; r++)
        CHECK_EQ(dcp_reroute_create(plan, holders, r, &lists[r], &error), DCP_OK);
    CHECK_EQ(dcp_reroute_match((const dcp_reroute *const *)lists, TEST_RANKS, NULL, &error),
             DCP_OK);
    for (r = 0; r < TEST_RANKS && sender < 0; r++)
        for (s = 0; s < lists[r]->count; s++)
            if (lists[r]->transfers[s].kind == DCP_TRANSFER_SEND) {
                sender = r;
                index = s;
                break;
            }
    CHECK(sender >= 0);
    if (sender >= 0) {
        dcp_transfer *t = &lists[sender]->transfers[index];
        t->destination_row += 1; /* planted: the send lands one row off */
        CHECK_EQ(dcp_reroute_match((const dcp_reroute *const *)lists, TEST_RANKS, NULL, &error),
                 DCP_ERROR_INVALID_PLAN);
        CHECK_CONTAINS(error.message, "differs from that rank's receive");
        t->destination_row -= 1;
        t->kind = DCP_TRANSFER_COPY; /* planted: a send is lost */
        CHECK_EQ(dcp_reroute_match((const dcp_reroute *const *)lists, TEST_RANKS, NULL, &error),
                 DCP_ERROR_INVALID_PLAN);
        t->kind = DCP_TRANSFER_SEND;
        t->peer = (t->peer + 1) % TEST_RANKS == sender ? (t->peer + 2) % TEST_RANKS
                                                      : (t->peer + 1) % TEST_RANKS;
        /* planted: sent to the wrong rank */
        CHECK_EQ(dcp_reroute_match((const dcp_reroute *const *)lists, TEST_RANKS, NULL, &error),
                 DCP_ERROR_INVALID_PLAN);
    }
    CHECK_EQ(dcp_reroute_match(NULL, TEST_RANKS, NULL, &error), DCP_ERROR_INVALID_ARGUMENT);
    for (r = 0; r < TEST_RANKS; r++) dcp_reroute_destroy(lists[r]);
    dcp_plan_destroy(plan);
}

/* The checks dcp_cuda.cu and dcp_nccl.h share with dcp.h (each was a copy in every unit). */
static void shared_checks_accept_and_name(void)
{
    float a = 1.0f, b = 2.0f;
    const void *buffers[3];
    dcp_error error;
    CHECK(dcp_is_pow2(1) && dcp_is_pow2(64) && dcp_is_pow2((int64_t)1 << 40));
    CHECK(!dcp_is_pow2(0) && !dcp_is_pow2(-4) && !dcp_is_pow2(12));
    CHECK_EQ(dcp_check_rank("rank", 3, 4, &error), DCP_OK);
    CHECK_EQ(dcp_check_rank("view.q_rank", 4, 4, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "view.q_rank must be in [0, cp 4), got 4");
    CHECK_EQ(dcp_check_rank("rank", -1, 4, &error), DCP_ERROR_INVALID_ARGUMENT);
    buffers[0] = &a;
    buffers[1] = &b;
    buffers[2] = NULL;
    CHECK_EQ(dcp_check_rank_buffers("q", buffers, 2, &error), DCP_OK);
    CHECK_EQ(dcp_check_rank_buffers("q", buffers, 3, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "q[2] must not be NULL");
    CHECK_EQ(dcp_check_rank_buffers("dq", NULL, 1, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "dq must not be NULL");
    CHECK_EQ(dcp_dtype_size(DCP_DTYPE_FLOAT32), sizeof(float));
    CHECK_EQ(dcp_dtype_size(DCP_DTYPE_BFLOAT16), 2u);
    CHECK_EQ(dcp_dtype_size(DCP_DTYPE_FLOAT16), 2u);
    CHECK_EQ(dcp_dtype_size((dcp_dtype)7), 0u);
    CHECK(strcmp(dcp_dtype_name(DCP_DTYPE_FLOAT32), "float32") == 0);
    CHECK(strcmp(dcp_dtype_name(DCP_DTYPE_BFLOAT16), "bfloat16") == 0);
    CHECK(strcmp(dcp_dtype_name(DCP_DTYPE_FLOAT16), "float16") == 0);
    CHECK(strcmp(dcp_dtype_name((dcp_dtype)7), "unknown") == 0);
}

/* Every single bit, alone and with random bits above it. */
static void lowest_bit_index_is_portable(void)
{
    dcp_rng rng;
    int32_t bit, i;
    dcp_rng_seed(&rng, TEST_SEED);
    for (bit = 0; bit < 64; bit++) {
        const uint64_t low = (uint64_t)1 << bit;
        CHECK_EQ(dcp__lowest_bit_index(low), bit);
        CHECK_EQ(dcp__lowest_bit_index(low | (~(low - 1) & dcp_rng_next(&rng))), bit);
    }
    for (i = 0; i < 1000; i++) { /* random bits above a known lowest one */
        const uint64_t x = (dcp_rng_next(&rng) | 1) << (i % 64);
        CHECK_EQ(dcp__lowest_bit_index(x), i % 64);
    }
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"config_init_is_all_default", config_init_is_all_default},
        {"filter_keeps_ids_and_reports_drops", filter_keeps_ids_and_reports_drops},
        {"length_lines_bom_and_headers", length_lines_bom_and_headers},
        {"sample_location_finds_every_sample", sample_location_finds_every_sample},
        {"compare_finds_a_difference", compare_finds_a_difference},
        {"reroute_match_pairs_and_catches_faults", reroute_match_pairs_and_catches_faults},
        {"shared_checks_accept_and_name", shared_checks_accept_and_name},
        {"lowest_bit_index_is_portable", lowest_bit_index_is_portable},
    };
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
