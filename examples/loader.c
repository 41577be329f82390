/* loader: what an engineer wires into a data loader, end to end on one machine.

   loader LENGTHS_FILE RANKS MAX_TOKENS_PER_RANK

   1. reads the length file (dcp_lengths_read_file_lines keeps each sample's file line);
   2. drops the samples no CP size can hold and reports them by line (dcp_lengths_filter keeps
      the original sample ids, so plan sample s is file sample kept_ids[s]);
   3. plans the rest;
   4. gives every sample a token buffer on its loader rank (sample s on rank s % RANKS), builds
      every rank's reroute list, checks that every send has its matching receive on the peer
      (dcp_reroute_match), and runs the exchange in memory;
   5. for every microbatch and rank: the THD view, its positions and its packed buffer
      (dcp_rank_view_pack), which must equal what the exchange delivered row for row, every
      valid row holding the token of the right original sample and position;
   6. looks up each sample's microbatch and group (dcp_plan_sample_location);
   7. serializes the plan and restores it (dcp_plan_serialize / deserialize, dcp_plan_compare).

   Prints what it did and exits 0; any failed check prints one line on stderr and exits 1
   (2 for bad usage). Build: cc -std=c99 -O2 examples/loader.c -o loader -lm (or `make`,
   as build/loader). */
#define DCP_IMPLEMENTATION
#include "../dcp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_CHECK_FAILED 1
#define EXIT_USAGE 2
#define DROPPED_REPORTED_MAX 5 /* dropped samples named one by one; the rest counted */

/* A token encodes where it came from: the original (file) sample id and its position. */
typedef int64_t token;
#define TOKEN_ID_SHIFT 32

static token token_of(int32_t original_id, int64_t position)
{
    return ((token)original_id << TOKEN_ID_SHIFT) | position;
}

typedef struct loader {
    dcp_config config;
    int64_t *file_lengths, *file_lines;
    int32_t file_count;
    int64_t *lengths;   /* [count] kept samples: the plan's input */
    int32_t *kept_ids;  /* [count] their file sample ids */
    int32_t *dropped;   /* [file_count - count] */
    int32_t count;
    dcp_plan *plan;
    int32_t *holders;   /* [count] the loader rank holding each sample */
    token **samples;    /* [count] each sample's tokens, on its holder */
    dcp_reroute **reroutes; /* [ranks] */
    int64_t sends, copies;
} loader;

static int fail(const char *what, const dcp_error *error)
{
    fprintf(stderr, "loader: %s: %s\n", what, error->message);
    return EXIT_CHECK_FAILED;
}

static void *checked_calloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size);
    if (!p) {
        fprintf(stderr, "loader: out of memory (%zu x %zu bytes)\n", count, size);
        exit(EXIT_CHECK_FAILED);
    }
    return p;
}

/* Steps 1 and 2: read, drop what cannot fit, report it by file line. */
static int read_and_filter(loader *l, const char *path)
{
    dcp_error error;
    int32_t i, dropped;
    if (dcp_lengths_read_file_lines(path, NULL, &l->file_lengths, &l->file_lines, &l->file_count,
                                    &error) != DCP_OK)
        return fail(path, &error);
    l->lengths = (int64_t *)checked_calloc((size_t)l->file_count, sizeof(int64_t));
    l->kept_ids = (int32_t *)checked_calloc((size_t)l->file_count, sizeof(int32_t));
    l->dropped = (int32_t *)checked_calloc((size_t)l->file_count, sizeof(int32_t));
    if (dcp_lengths_filter(&l->config, l->file_lengths, l->file_count, l->lengths, l->kept_ids,
                           &l->count, l->dropped, &error) != DCP_OK)
        return fail("filter", &error);
    dropped = l->file_count - l->count;
    printf("read %d samples from %s; dropped %d that no CP size can hold\n", (int)l->file_count,
           path, (int)dropped);
    for (i = 0; i < dropped && i < DROPPED_REPORTED_MAX; i++) {
        int32_t id = l->dropped[i], cp;
        dcp_cp_size_min(&l->config, l->file_lengths[id], &cp, &error);
        printf("  dropped line %lld (sample %d): %s\n", (long long)l->file_lines[id], (int)id,
               error.message);
    }
    if (dropped > DROPPED_REPORTED_MAX)
        printf("  and %d more\n", (int)(dropped - DROPPED_REPORTED_MAX));
    if (l->count == 0) {
        fprintf(stderr, "loader: no sample fits max_cp x max_tokens_per_rank\n");
        return EXIT_CHECK_FAILED;
    }
    return EXIT_SUCCESS;
}

/* Step 4, first half: sample buffers on their holders, every rank's reroute list, and the
   lists checked against the plan's buffers and against each other. */
static int build_reroutes(loader *l)
{
    const dcp_plan *plan = l->plan;
    int32_t ranks = plan->config.ranks, s, r;
    int64_t p;
    dcp_error error;
    l->holders = (int32_t *)checked_calloc((size_t)l->count, sizeof(int32_t));
    l->samples = (token **)checked_calloc((size_t)l->count, sizeof(token *));
    for (s = 0; s < l->count; s++) {
        l->holders[s] = s % ranks;
        l->samples[s] = (token *)checked_calloc((size_t)l->lengths[s], sizeof(token));
        for (p = 0; p < l->lengths[s]; p++) l->samples[s][p] = token_of(l->kept_ids[s], p);
    }
    l->reroutes = (dcp_reroute **)checked_calloc((size_t)ranks, sizeof(dcp_reroute *));
    for (r = 0; r < ranks; r++) {
        if (dcp_reroute_create(plan, l->holders, r, &l->reroutes[r], &error) != DCP_OK)
            return fail("reroute", &error);
        if (dcp_reroute_check(l->reroutes[r], plan->num_samples, plan->sample_lengths,
                              plan->num_microbatches, NULL, &error) != DCP_OK)
            return fail("reroute check", &error);
        for (s = 0; s < l->reroutes[r]->count; s++) {
            l->sends += l->reroutes[r]->transfers[s].kind == DCP_TRANSFER_SEND;
            l->copies += l->reroutes[r]->transfers[s].kind == DCP_TRANSFER_COPY;
        }
    }
    if (dcp_reroute_match((const dcp_reroute *const *)l->reroutes, ranks, NULL, &error) != DCP_OK)
        return fail("send/receive pairing", &error);
    return EXIT_SUCCESS;
}

/* The exchange of one microbatch into rank r's buffer of `rows` tokens: its receives (the
   matching sends carry the same ranges, so the holder's buffer is read directly) and copies. */
static int exchange(const loader *l, int32_t r, int32_t k, token *buffer, int64_t rows)
{
    const dcp_reroute *list = l->reroutes[r];
    dcp_error error;
    int32_t i;
    for (i = 0; i < list->count; i++) {
        dcp_reroute_op op;
        if (list->transfers[i].microbatch != k || list->transfers[i].kind == DCP_TRANSFER_SEND)
            continue;
        if (dcp_reroute_op_get(list, i, sizeof(token), &op, &error) != DCP_OK)
            return fail("reroute op", &error);
        if (op.destination_offset + op.bytes > (size_t)rows * sizeof(token)) {
            fprintf(stderr, "loader: rank %d transfer %d writes past its buffer\n", (int)r, (int)i);
            return EXIT_CHECK_FAILED;
        }
        memcpy((char *)buffer + op.destination_offset,
               (const char *)l->samples[op.sample] + op.source_offset, op.bytes);
    }
    return EXIT_SUCCESS;
}

/* Step 5 for one rank and microbatch. */
static int check_rank_microbatch(const loader *l, int32_t r, int32_t k, int64_t *rows_checked)
{
    dcp_rank_view *view = NULL;
    dcp_error error;
    int64_t *positions, row;
    int32_t *slot;
    token *packed, *received;
    int status = EXIT_SUCCESS;
    if (dcp_rank_view_create(l->plan, r, k, &view, &error) != DCP_OK ||
        dcp_rank_view_validate(view, &error) != DCP_OK) {
        dcp_rank_view_destroy(view);
        return fail("rank view", &error);
    }
    positions = (int64_t *)checked_calloc((size_t)view->local_tokens, sizeof(int64_t));
    slot = (int32_t *)checked_calloc((size_t)view->local_tokens, sizeof(int32_t));
    packed = (token *)checked_calloc((size_t)view->local_tokens, sizeof(token));
    received = (token *)checked_calloc((size_t)view->local_tokens, sizeof(token));
    if (dcp_rank_view_positions(view, slot, positions, &error) != DCP_OK ||
        dcp_rank_view_pack(view, (const void *const *)l->samples, sizeof(token), packed,
                           &error) != DCP_OK)
        status = fail("positions or pack", &error);
    if (status == EXIT_SUCCESS) status = exchange(l, r, k, received, view->local_tokens);
    for (row = 0; row < view->local_tokens && status == EXIT_SUCCESS; row++) {
        int32_t sample = view->samples[slot[row]];
        token expected = positions[row] < 0 ? 0 : token_of(l->kept_ids[sample], positions[row]);
        if (packed[row] != expected || received[row] != expected) {
            fprintf(stderr, "loader: rank %d microbatch %d row %lld: packed %llx, received %llx, "
                            "expected %llx\n",
                    (int)r, (int)k, (long long)row, (unsigned long long)packed[row],
                    (unsigned long long)received[row], (unsigned long long)expected);
            status = EXIT_CHECK_FAILED;
        }
    }
    *rows_checked += view->local_tokens;
    free(positions);
    free(slot);
    free(packed);
    free(received);
    dcp_rank_view_destroy(view);
    return status;
}

/* Step 6: every sample's microbatch and group hold it. */
static int check_locations(const loader *l)
{
    dcp_error error;
    int32_t s;
    for (s = 0; s < l->count; s++) {
        int32_t k, g, i, found = 0;
        const dcp_group *group;
        if (dcp_plan_sample_location(l->plan, s, &k, &g, &error) != DCP_OK)
            return fail("sample location", &error);
        group = &l->plan->groups[g];
        for (i = 0; i < group->sample_count; i++)
            found |= l->plan->group_samples[group->sample_offset + i] == s;
        if (!found || g < l->plan->microbatch_offsets[k] ||
            g >= l->plan->microbatch_offsets[k + 1]) {
            fprintf(stderr, "loader: sample %d is not in microbatch %d group %d\n", (int)s,
                    (int)k, (int)g);
            return EXIT_CHECK_FAILED;
        }
    }
    return EXIT_SUCCESS;
}

/* Step 7: what rank 0 broadcasts, and what the others restore. */
static int round_trip(const loader *l)
{
    dcp_plan *restored = NULL;
    dcp_error error;
    size_t size = 0;
    void *buffer;
    int status = EXIT_SUCCESS;
    if (dcp_plan_serialize(l->plan, NULL, 0, &size, &error) != DCP_OK)
        return fail("serialize (size)", &error);
    buffer = checked_calloc(size, 1);
    if (dcp_plan_serialize(l->plan, buffer, size, &size, &error) != DCP_OK ||
        dcp_plan_deserialize(buffer, size, NULL, &restored, &error) != DCP_OK ||
        dcp_plan_compare(l->plan, restored, &error) != DCP_OK)
        status = fail("plan round trip", &error);
    else
        printf("plan serialized to %zu bytes and restored identically\n", size);
    dcp_plan_destroy(restored);
    free(buffer);
    return status;
}

static int run(loader *l, const char *path)
{
    dcp_error error;
    int64_t rows = 0;
    int32_t k, r;
    int status;
    if ((status = read_and_filter(l, path)) != EXIT_SUCCESS) return status;
    if (dcp_plan_create(&l->config, l->lengths, l->count, &l->plan, &error) != DCP_OK)
        return fail("plan", &error);
    printf("planned %d samples on %d ranks in %d microbatches (%d groups)\n", (int)l->count,
           (int)l->plan->config.ranks, (int)l->plan->num_microbatches, (int)l->plan->num_groups);
    if ((status = build_reroutes(l)) != EXIT_SUCCESS) return status;
    printf("reroute: %lld sends matched one to one with %lld receives, %lld local copies\n",
           (long long)l->sends, (long long)l->sends, (long long)l->copies);
    for (k = 0; k < l->plan->num_microbatches; k++)
        for (r = 0; r < l->plan->config.ranks; r++)
            if ((status = check_rank_microbatch(l, r, k, &rows)) != EXIT_SUCCESS) return status;
    printf("views, positions and packed buffers of %d ranks x %d microbatches: %lld rows equal "
           "to the exchange\n",
           (int)l->plan->config.ranks, (int)l->plan->num_microbatches, (long long)rows);
    if ((status = check_locations(l)) != EXIT_SUCCESS) return status;
    printf("every sample found in its microbatch and group\n");
    return round_trip(l);
}

static void loader_free(loader *l)
{
    int32_t i;
    if (l->reroutes)
        for (i = 0; i < l->plan->config.ranks; i++) dcp_reroute_destroy(l->reroutes[i]);
    if (l->samples)
        for (i = 0; i < l->count; i++) free(l->samples[i]);
    free(l->reroutes);
    free(l->samples);
    free(l->holders);
    dcp_plan_destroy(l->plan);
    free(l->lengths);
    free(l->kept_ids);
    free(l->dropped);
    dcp_free(NULL, l->file_lengths);
    dcp_free(NULL, l->file_lines);
}

int main(int argc, char **argv)
{
    loader l;
    char *end_ranks, *end_tokens;
    long ranks;
    long long max_tokens;
    int status;
    if (argc != 4) {
        fprintf(stderr, "usage: loader LENGTHS_FILE RANKS MAX_TOKENS_PER_RANK\n");
        return EXIT_USAGE;
    }
    ranks = strtol(argv[2], &end_ranks, 10);
    max_tokens = strtoll(argv[3], &end_tokens, 10);
    if (*end_ranks || *end_tokens || ranks < 1 || ranks > DCP_MAX_RANKS || max_tokens < 1 ||
        max_tokens > DCP_MAX_SAMPLE_LENGTH) {
        fprintf(stderr, "loader: RANKS must be in [1, %d] and MAX_TOKENS_PER_RANK in [1, %lld]\n",
                DCP_MAX_RANKS, (long long)DCP_MAX_SAMPLE_LENGTH);
        return EXIT_USAGE;
    }
    memset(&l, 0, sizeof l);
    l.config = dcp_config_init();
    l.config.ranks = (int32_t)ranks;
    l.config.max_tokens_per_rank = max_tokens;
    status = run(&l, argv[1]);
    loader_free(&l);
    return status;
}
