/* THD layer: the load-balanced split, rank views, packing, reroute lists executed by
   simulated ranks, the exchange format under corruption, FLOPs statistics, alignment padding. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "test.h"

#define SIMULATION_SEED 4242

/* Rank r's positions built literally: cut 0..P-1 into 2c chunks, take chunks r and 2c-1-r. */
static void brute_force_positions(int64_t padded, int32_t cp, int32_t r, int64_t *out)
{
    int64_t i, chunk = cp > 1 ? padded / (2 * cp) : padded, n = 0;
    if (cp == 1) {
        for (i = 0; i < padded; i++) out[i] = i;
        return;
    }
    for (i = 0; i < padded; i++)
        if (i / chunk == r) out[n++] = i;
    for (i = 0; i < padded; i++)
        if (i / chunk == 2 * cp - 1 - r) out[n++] = i;
}

/* Every c <= 64, many lengths (a rank's second half entirely padding among them): the map
   equals the brute-force construction, and the ranks together hold every position once. */
static void zigzag_matches_brute_force(void)
{
    static int64_t expected[64 * 130 + 256];
    static unsigned char seen[64 * 130 + 256];
    int32_t cp, r;
    int64_t length;
    for (cp = 1; cp <= 64; cp *= 2)
        for (length = 1; length <= 2 * cp * 64 + 3; length += (cp > 8 ? 7 : 1)) {
            int64_t padded = cp > 1 ? (length + 2 * cp - 1) / (2 * cp) * (2 * cp) : length, i;
            memset(seen, 0, (size_t)padded);
            for (r = 0; r < cp; r++) {
                dcp__run runs[2];
                int count = dcp__sample_runs(length, padded, cp, r, runs), k;
                int64_t valid = 0;
                brute_force_positions(padded, cp, r, expected);
                for (i = 0; i < padded / cp; i++) {
                    int64_t got = dcp_zigzag_position(padded, cp, r, i);
                    CHECK_EQ(got, expected[i]);
                    if (got >= 0 && got < padded) seen[got]++;
                }
                for (k = 0; k < count; k++) { /* runs agree with the map */
                    CHECK_EQ(dcp_zigzag_position(padded, cp, r, runs[k].row), runs[k].position);
                    valid += runs[k].valid;
                }
                for (i = 0; i < padded / cp; i++) valid -= expected[i] < length;
                CHECK_EQ(valid, 0);
            }
            for (i = 0; i < padded; i++) CHECK_EQ(seen[i], 1);
        }
    CHECK_EQ(dcp_zigzag_position(10, 2, 0, 0), -1); /* 10 is no multiple of 4 */
    CHECK_EQ(dcp_zigzag_position(8, 2, 2, 0), -1);
    CHECK_EQ(dcp_zigzag_position(8, 2, 0, 4), -1);
    CHECK_EQ(dcp_zigzag_position(8, 1, 1, 0), -1);
}

/* A random feasible workload and its dynamic plan. */
static dcp_plan *random_plan(dcp_rng *rng, int32_t max_ranks, int32_t max_samples)
{
    dcp_config c = make_config(1 + (int32_t)dcp_rng_below(rng, (uint64_t)max_ranks),
                               16 + (int64_t)dcp_rng_below(rng, 512));
    int64_t lengths[512];
    int32_t count = 1 + (int32_t)dcp_rng_below(rng, (uint64_t)max_samples), i, top = 1;
    dcp_plan *plan = NULL;
    while (top * 2 <= c.ranks) top *= 2;
    c.pad_multiple = 1 + (int32_t)dcp_rng_below(rng, 3);
    c.strategy = (dcp_strategy)dcp_rng_below(rng, 3);
    for (i = 0; i < count; i++) {
        int64_t longest = top * c.max_tokens_per_rank / 2;
        lengths[i] = 1 + (int64_t)dcp_rng_below(rng, (uint64_t)(dcp_rng_below(rng, 3) ? longest / 8 + 1
                                                                                   : longest));
    }
    if (dcp_plan_create(&c, lengths, count, &plan, NULL) != DCP_OK) return NULL;
    return plan;
}

/* Views match a construction from the plan's arrays, and positions match the zigzag map. */
static void rank_views_match_the_plan(void)
{
    dcp_rng rng;
    int w;
    dcp_rng_seed(&rng, test_seed_for(5));
    for (w = 0; w < 200; w++) {
        dcp_plan *plan = random_plan(&rng, 32, 60);
        int32_t rank, k;
        CHECK(plan != NULL);
        if (!plan) continue;
        for (k = 0; k < plan->num_microbatches; k++)
            for (rank = 0; rank < plan->config.ranks; rank++) {
                dcp_rank_view *view = NULL;
                int64_t positions[8192], valid = 0, padded = 0;
                int32_t owner[8192], g, found = -1, i;
                CHECK_EQ(dcp_rank_view_create(plan, rank, k, &view, NULL), DCP_OK);
                if (!view) continue;
                for (g = plan->microbatch_offsets[k]; g < plan->microbatch_offsets[k + 1]; g++)
                    if (rank >= plan->groups[g].first_rank &&
                        rank < plan->groups[g].first_rank + plan->groups[g].cp)
                        found = g;
                CHECK_EQ(view->idle, found < 0);
                CHECK_EQ(dcp_rank_view_validate(view, NULL), DCP_OK);
                if (found >= 0) {
                    const dcp_group *group = &plan->groups[found];
                    CHECK_EQ(view->first_rank, group->first_rank);
                    CHECK_EQ(view->cp, group->cp);
                    CHECK_EQ(view->num_samples, group->sample_count);
                    for (i = 0; i < view->num_samples; i++) {
                        int64_t length = plan->sample_lengths[view->samples[i]], p;
                        CHECK_EQ(view->samples[i], plan->group_samples[group->sample_offset + i]);
                        dcp_padded_length(&plan->config, length, group->cp, &p, NULL);
                        valid += length;
                        padded += p;
                        CHECK_EQ(view->cu_seqlens[i + 1], valid);
                        CHECK_EQ(view->cu_seqlens_padded[i + 1], padded);
                        CHECK_EQ(view->local_offsets[i + 1], padded / group->cp);
                    }
                }
                CHECK(view->local_tokens <= plan->config.max_tokens_per_rank);
                CHECK(view->local_tokens <= 8192);
                if (view->local_tokens > 8192) {
                    dcp_rank_view_destroy(view);
                    continue;
                }
                CHECK_EQ(dcp_rank_view_positions(view, owner, positions, NULL), DCP_OK);
                for (i = 0; i < view->num_samples; i++) {
                    int64_t row, base = view->local_offsets[i], p = view->cu_seqlens_padded[i + 1] -
                                                                     view->cu_seqlens_padded[i];
                    for (row = 0; row < p / view->cp; row++) {
                        int64_t z = dcp_zigzag_position(p, view->cp, view->rank_in_group, row);
                        CHECK_EQ(owner[base + row], i);
                        CHECK_EQ(positions[base + row], z < view->sample_lengths[i] ? z : -1);
                    }
                }
                dcp_rank_view_destroy(view);
            }
        dcp_plan_destroy(plan);
    }
}

/* The value of token `position` of sample s in a record of `bytes` bytes. */
static void token_record(int32_t s, int64_t position, size_t bytes, unsigned char *out)
{
    uint64_t x = ((uint64_t)(uint32_t)s << 32) ^ (uint64_t)position ^ UINT64_C(0x9E3779B97F4A7C15);
    size_t i;
    for (i = 0; i < bytes; i++) {
        x = x * UINT64_C(6364136223846793005) + 1442695040888963407u;
        out[i] = (unsigned char)(x >> 56) | 1; /* never zero: zero marks padding */
    }
}

#define POISON 0xAB

typedef struct simulation {
    const dcp_plan *plan;
    size_t bytes;
    int32_t *holders;
    unsigned char **samples;    /* [num_samples] whole sample data (held by holders[s]) */
    unsigned char **local;      /* [ranks * microbatches] */
    dcp_rank_view **views;      /* [ranks * microbatches] */
} simulation;

/* Executes every rank's RECV and COPY entries with memcpy from the holder's sample data,
   after checking that A's sends to B and B's receives from A pair up in order. */
static void execute_reroutes(simulation *sim, dcp_reroute **lists)
{
    const dcp_plan *plan = sim->plan;
    int32_t a, b, D = plan->config.ranks;
    for (a = 0; a < D; a++)
        for (b = 0; b < D; b++) {
            int32_t i = 0, j = 0;
            const dcp_reroute *la = lists[a], *lb = lists[b];
            if (a == b) continue;
            for (;;) {
                while (i < la->count && !(la->transfers[i].kind == DCP_TRANSFER_SEND &&
                                          la->transfers[i].peer == b))
                    i++;
                while (j < lb->count && !(lb->transfers[j].kind == DCP_TRANSFER_RECV &&
                                          lb->transfers[j].peer == a))
                    j++;
                if (i == la->count || j == lb->count) break;
                CHECK(memcmp(&la->transfers[i].microbatch, &lb->transfers[j].microbatch,
                             sizeof(dcp_transfer) - offsetof(dcp_transfer, microbatch)) == 0);
                i++, j++;
            }
            CHECK(i == la->count && j == lb->count); /* no unmatched send or receive */
        }
    for (b = 0; b < D; b++) {
        int32_t i;
        for (i = 0; i < lists[b]->count; i++) {
            const dcp_transfer *t = &lists[b]->transfers[i];
            const dcp_rank_view *view;
            unsigned char *dest;
            if (t->kind == DCP_TRANSFER_SEND) continue;
            CHECK(t->kind == DCP_TRANSFER_RECV ? sim->holders[t->sample] == t->peer &&
                                                     t->peer != b
                                               : sim->holders[t->sample] == b && t->peer == b);
            CHECK(t->microbatch >= 0 && t->microbatch < plan->num_microbatches);
            CHECK(t->source_begin >= 0 && t->source_end <= plan->sample_lengths[t->sample]);
            if (t->microbatch < 0 || t->microbatch >= plan->num_microbatches) continue;
            view = sim->views[(size_t)b * (size_t)plan->num_microbatches + (size_t)t->microbatch];
            CHECK(t->destination_row >= 0 &&
                  t->destination_row + (t->source_end - t->source_begin) <= view->local_tokens);
            if (t->destination_row < 0 ||
                t->destination_row + (t->source_end - t->source_begin) > view->local_tokens ||
                t->source_begin < 0 || t->source_end > plan->sample_lengths[t->sample])
                continue;
            dest = sim->local[(size_t)b * (size_t)plan->num_microbatches + (size_t)t->microbatch];
            memcpy(dest + (size_t)t->destination_row * sim->bytes,
                   sim->samples[t->sample] + (size_t)t->source_begin * sim->bytes,
                   (size_t)(t->source_end - t->source_begin) * sim->bytes);
        }
    }
}

/* Each rank's rerouted buffer equals packing it directly (padding rows zero-filled by the
   receiver), and each token appears exactly once over the group. */
static void check_rerouted_buffers(simulation *sim)
{
    const dcp_plan *plan = sim->plan;
    int32_t rank, k, D = plan->config.ranks, K = plan->num_microbatches;
    int64_t *coverage = (int64_t *)calloc((size_t)plan->num_samples, sizeof(int64_t));
    int64_t total = 0;
    int32_t s;
    for (k = 0; k < K; k++)
        for (rank = 0; rank < D; rank++) {
            size_t cell = (size_t)rank * (size_t)K + (size_t)k;
            dcp_rank_view *view = sim->views[cell];
            int64_t *positions = (int64_t *)malloc(((size_t)view->local_tokens + 1) * 8);
            int32_t *owner = (int32_t *)malloc(((size_t)view->local_tokens + 1) * 4);
            unsigned char *direct = (unsigned char *)malloc((size_t)view->local_tokens * sim->bytes + 1);
            int64_t row;
            CHECK_EQ(dcp_rank_view_positions(view, owner, positions, NULL), DCP_OK);
            for (row = 0; row < view->local_tokens; row++)
                if (positions[row] < 0) /* the receiver zero-fills padding */
                    memset(sim->local[cell] + (size_t)row * sim->bytes, 0, sim->bytes);
                else
                    coverage[view->samples[owner[row]]]++;
            CHECK_EQ(dcp_rank_view_pack(view, (const void *const *)sim->samples, sim->bytes, direct,
                                        NULL),
                     DCP_OK);
            CHECK(memcmp(direct, sim->local[cell], (size_t)view->local_tokens * sim->bytes) == 0);
            free(positions);
            free(owner);
            free(direct);
        }
    for (s = 0; s < plan->num_samples; s++) { /* exactly once: counts equal the lengths */
        CHECK_EQ(coverage[s], plan->sample_lengths[s]);
        total += coverage[s];
    }
    CHECK(total > 0);
    free(coverage);
}

static void simulate_reroute(const dcp_plan *plan, dcp_rng *rng, size_t bytes)
{
    simulation sim;
    int32_t D = plan->config.ranks, K = plan->num_microbatches, s, rank, k;
    dcp_reroute **lists = (dcp_reroute **)calloc((size_t)D, sizeof *lists);
    int64_t sent = 0, received = 0;
    sim.plan = plan;
    sim.bytes = bytes;
    sim.holders = (int32_t *)malloc((size_t)plan->num_samples * sizeof(int32_t));
    sim.samples = (unsigned char **)calloc((size_t)plan->num_samples, sizeof(unsigned char *));
    sim.local = (unsigned char **)calloc((size_t)D * (size_t)K, sizeof(unsigned char *));
    sim.views = (dcp_rank_view **)calloc((size_t)D * (size_t)K, sizeof(dcp_rank_view *));
    for (s = 0; s < plan->num_samples; s++) { /* the data loader's placement */
        int64_t p;
        sim.holders[s] = (int32_t)dcp_rng_below(rng, (uint64_t)D);
        sim.samples[s] = (unsigned char *)malloc((size_t)plan->sample_lengths[s] * bytes);
        for (p = 0; p < plan->sample_lengths[s]; p++)
            token_record(s, p, bytes, sim.samples[s] + (size_t)p * bytes);
    }
    for (rank = 0; rank < D; rank++) {
        CHECK_EQ(dcp_reroute_create(plan, sim.holders, rank, &lists[rank], NULL), DCP_OK);
        for (k = 0; k < K; k++) {
            size_t cell = (size_t)rank * (size_t)K + (size_t)k;
            CHECK_EQ(dcp_rank_view_create(plan, rank, k, &sim.views[cell], NULL), DCP_OK);
            sim.local[cell] = (unsigned char *)malloc((size_t)sim.views[cell]->local_tokens * bytes + 1);
            memset(sim.local[cell], POISON, (size_t)sim.views[cell]->local_tokens * bytes);
        }
    }
    for (rank = 0; rank < D; rank++) {
        sent += lists[rank]->send_tokens;
        received += lists[rank]->recv_tokens;
    }
    CHECK_EQ(sent, received);
    execute_reroutes(&sim, lists);
    check_rerouted_buffers(&sim);
    for (rank = 0; rank < D; rank++) {
        dcp_reroute_destroy(lists[rank]);
        for (k = 0; k < K; k++) {
            dcp_rank_view_destroy(sim.views[(size_t)rank * (size_t)K + (size_t)k]);
            free(sim.local[(size_t)rank * (size_t)K + (size_t)k]);
        }
    }
    for (s = 0; s < plan->num_samples; s++) free(sim.samples[s]);
    free(lists);
    free(sim.holders);
    free(sim.samples);
    free(sim.local);
    free(sim.views);
}

static void simulated_ranks_reroute_and_pack(void)
{
    dcp_rng rng;
    int w;
    dcp_rng_seed(&rng, test_seed_for(SIMULATION_SEED));
    for (w = 0; w < 60; w++) {
        dcp_plan *plan = random_plan(&rng, w < 10 ? 64 : 24, w < 10 ? 200 : 60);
        CHECK(plan != NULL);
        if (!plan) continue;
        simulate_reroute(plan, &rng, w % 3 == 0 ? 3 : 4); /* any element size */
        dcp_plan_destroy(plan);
    }
}

/* Pack then unpack over all ranks of a group rebuilds every sample. */
static void pack_unpack_round_trip(void)
{
    dcp_config c = make_config(8, 64);
    int64_t lengths[6] = {200, 7, 64, 130, 1, 33};
    dcp_plan *plan = NULL;
    int32_t k, rank, s;
    int32_t *data[6], *back[6];
    CHECK_EQ(dcp_plan_create(&c, lengths, 6, &plan, NULL), DCP_OK);
    if (!plan) return;
    for (s = 0; s < 6; s++) {
        int64_t p;
        data[s] = (int32_t *)malloc((size_t)lengths[s] * sizeof(int32_t));
        back[s] = (int32_t *)calloc((size_t)lengths[s], sizeof(int32_t));
        for (p = 0; p < lengths[s]; p++) data[s][p] = 1000 * s + (int32_t)p + 1;
    }
    for (k = 0; k < plan->num_microbatches; k++)
        for (rank = 0; rank < 8; rank++) {
            dcp_rank_view *view = NULL;
            int32_t buffer[512];
            CHECK_EQ(dcp_rank_view_create(plan, rank, k, &view, NULL), DCP_OK);
            if (!view) continue;
            CHECK_EQ(dcp_rank_view_pack(view, (const void *const *)data, sizeof(int32_t), buffer,
                                        NULL),
                     DCP_OK);
            CHECK_EQ(dcp_rank_view_unpack(view, buffer, sizeof(int32_t), (void *const *)back, NULL),
                     DCP_OK);
            dcp_rank_view_destroy(view);
        }
    for (s = 0; s < 6; s++) {
        CHECK(memcmp(data[s], back[s], (size_t)lengths[s] * sizeof(int32_t)) == 0);
        free(data[s]);
        free(back[s]);
    }
    dcp_plan_destroy(plan);
}

static void view_rejects_bad_arguments(void)
{
    dcp_config c = make_config(4, 100);
    int64_t lengths[3] = {150, 60, 20};
    dcp_plan *plan = NULL;
    dcp_rank_view *view = NULL;
    dcp_reroute *reroute = NULL;
    int32_t holders[3] = {0, 1, 5};
    dcp_error error;
    CHECK_EQ(dcp_plan_create(&c, lengths, 3, &plan, NULL), DCP_OK);
    CHECK_EQ(dcp_rank_view_create(plan, 4, 0, &view, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "rank 4");
    CHECK_EQ(dcp_rank_view_create(plan, 0, 99, &view, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "microbatch 99");
    CHECK_EQ(dcp_rank_view_create(NULL, 0, 0, &view, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK(view == NULL);
    CHECK_EQ(dcp_reroute_create(plan, holders, 0, &reroute, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "holders[2] = 5");
    CHECK(reroute == NULL);
    CHECK_EQ(dcp_rank_view_create(plan, 0, 0, &view, NULL), DCP_OK);
    if (view) {
        view->local_offsets[view->num_samples] += 1;
        CHECK_EQ(dcp_rank_view_validate(view, &error), DCP_ERROR_INVALID_ARGUMENT);
        dcp_rank_view_destroy(view);
    }
    dcp_plan_destroy(plan);
}

/* A plan, serialized; the caller frees both. */
static unsigned char *serialized_plan(dcp_plan **plan, size_t *size, int32_t count)
{
    dcp_config c = make_config(12, 300);
    int64_t lengths[64];
    dcp_lognormal d = {300, 1.0, 1, 2400};
    unsigned char *buffer;
    c.microbatch_multiple = 2;
    c.pad_multiple = 3;
    dcp_lengths_lognormal(&d, 9, lengths, count, NULL);
    if (dcp_plan_create(&c, lengths, count, plan, NULL) != DCP_OK) return NULL;
    CHECK_EQ(dcp_plan_serialize(*plan, NULL, 0, size, NULL), DCP_OK);
    buffer = (unsigned char *)malloc(*size);
    CHECK_EQ(dcp_plan_serialize(*plan, buffer, *size, NULL, NULL), DCP_OK);
    return buffer;
}

static void plan_serialization_round_trip(void)
{
    dcp_plan *plan = NULL, *copy = NULL;
    size_t size = 0, small = 0;
    unsigned char *buffer = serialized_plan(&plan, &size, 40);
    dcp_error error;
    CHECK(buffer != NULL);
    if (!buffer) return;
    CHECK_EQ(dcp_plan_deserialize(buffer, size, NULL, &copy, &error), DCP_OK);
    if (copy) {
        CHECK(memcmp(&copy->config, &plan->config, offsetof(dcp_config, allocator)) == 0);
        CHECK_EQ(copy->num_microbatches, plan->num_microbatches);
        CHECK_EQ(copy->num_groups, plan->num_groups);
        CHECK(memcmp(copy->sample_lengths, plan->sample_lengths, 40 * sizeof(int64_t)) == 0);
        CHECK(memcmp(copy->groups, plan->groups, (size_t)plan->num_groups * sizeof(dcp_group)) == 0);
        CHECK(memcmp(copy->group_samples, plan->group_samples, 40 * sizeof(int32_t)) == 0);
        CHECK(memcmp(copy->microbatch_offsets, plan->microbatch_offsets,
                     (size_t)(plan->num_microbatches + 1) * sizeof(int32_t)) == 0);
    }
    CHECK_EQ(dcp_plan_serialize(plan, buffer, size - 1, &small, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(small, size);
    CHECK_CONTAINS(error.message, "too small");
    dcp_plan_destroy(copy);
    dcp_plan_destroy(plan);
    free(buffer);
}

/* Every single-byte change (all 255 other values of every byte), every truncation and every
   extension is rejected with an error, never a crash or a plan. */
static void plan_corruption_is_rejected(void)
{
    dcp_plan *plan = NULL, *copy;
    size_t size = 0, i;
    unsigned char *buffer = serialized_plan(&plan, &size, 12), *changed;
    int value;
    CHECK(buffer != NULL);
    if (!buffer) return;
    changed = (unsigned char *)malloc(size + 1);
    for (i = 0; i < size; i++)
        for (value = 0; value < 256; value++) {
            if (value == buffer[i]) continue;
            memcpy(changed, buffer, size);
            changed[i] = (unsigned char)value;
            copy = (dcp_plan *)changed;
            CHECK(dcp_plan_deserialize(changed, size, NULL, &copy, NULL) != DCP_OK);
            CHECK(copy == NULL);
            dcp_plan_destroy(copy);
        }
    for (i = 0; i < size; i++) {
        copy = NULL;
        CHECK(dcp_plan_deserialize(buffer, i, NULL, &copy, NULL) != DCP_OK);
        dcp_plan_destroy(copy);
    }
    memcpy(changed, buffer, size);
    changed[size] = 0;
    copy = NULL;
    CHECK(dcp_plan_deserialize(changed, size + 1, NULL, &copy, NULL) != DCP_OK);
    free(changed);
    free(buffer);
    dcp_plan_destroy(plan);
}

/* Random bodies behind a valid preamble and checksum reach the count and invariant checks. */
static void plan_garbage_is_rejected(void)
{
    dcp_rng rng;
    unsigned char buffer[600];
    int trial, accepted = 0;
    dcp_rng_seed(&rng, test_seed_for(3));
    for (trial = 0; trial < 20000; trial++) {
        size_t size = DCP__PREAMBLE_BYTES + DCP__CHECKSUM_BYTES + (size_t)dcp_rng_below(&rng, 560), i;
        dcp__writer w;
        dcp_plan *plan = NULL;
        for (i = 0; i < size; i++) buffer[i] = (unsigned char)dcp_rng_below(&rng, 256);
        if (trial % 2 == 0) { /* a well-formed frame around random content */
            w.data = buffer;
            w.capacity = size;
            w.size = 0;
            dcp__put_preamble(&w, dcp__plan_magic, size);
            if (trial % 4 == 0) { /* plausible counts too */
                w.size = DCP__PREAMBLE_BYTES + 64;
                dcp__put_i32(&w, 1 + (int32_t)dcp_rng_below(&rng, 8));
                dcp__put_i32(&w, 1 + (int32_t)dcp_rng_below(&rng, 4));
                dcp__put_i32(&w, 1 + (int32_t)dcp_rng_below(&rng, 4));
            }
            w.size = size - DCP__CHECKSUM_BYTES;
            dcp__put(&w, dcp__fnv1a(buffer, size - DCP__CHECKSUM_BYTES), 8);
        }
        if (dcp_plan_deserialize(buffer, size, NULL, &plan, NULL) == DCP_OK) {
            accepted++;
            CHECK_EQ(dcp_plan_validate(plan, NULL), DCP_OK);
        }
        dcp_plan_destroy(plan);
    }
    CHECK(accepted < 20000 / 100); /* random content is almost never a valid plan */
}

/* The format's record constants describe what the writers write: a plan's and a view's
   serialized size is the preamble, the fixed fields, each array's records and the checksum. */
static void serialized_sizes_follow_the_record_constants(void)
{
    dcp_plan *plan = NULL;
    dcp_rank_view *view = NULL;
    size_t size = 0, view_size = 0;
    uint64_t expected;
    unsigned char *buffer = serialized_plan(&plan, &size, 30);
    CHECK(buffer != NULL);
    if (!buffer) return;
    expected = DCP__PREAMBLE_BYTES + DCP__CONFIG_BYTES + DCP__PLAN_COUNTS * DCP__I32_BYTES +
               DCP__PLAN_SAMPLE_BYTES * (uint64_t)plan->num_samples +
               DCP__PLAN_OFFSET_BYTES * ((uint64_t)plan->num_microbatches + 1) +
               DCP__PLAN_GROUP_BYTES * (uint64_t)plan->num_groups + DCP__CHECKSUM_BYTES;
    CHECK_EQ(size, expected);
    CHECK_EQ(dcp_rank_view_create(plan, 1, 0, &view, NULL), DCP_OK);
    CHECK_EQ(dcp_rank_view_serialize(view, NULL, 0, &view_size, NULL), DCP_OK);
    CHECK_EQ(view_size, DCP__PREAMBLE_BYTES + DCP__VIEW_HEADER_BYTES +
                            DCP__VIEW_ARRAY_BYTES(view->num_samples) + DCP__CHECKSUM_BYTES);
    dcp_rank_view_destroy(view);
    dcp_plan_destroy(plan);
    free(buffer);
}

static void view_serialization_round_trip_and_corruption(void)
{
    dcp_plan *plan = NULL, *not_a_plan = NULL;
    size_t size = 0, i, plan_size;
    unsigned char *plan_buffer = serialized_plan(&plan, &plan_size, 20), *buffer, *changed;
    dcp_rank_view *view = NULL, *copy = NULL;
    int value;
    CHECK(plan_buffer != NULL);
    if (!plan_buffer) return;
    CHECK_EQ(dcp_rank_view_create(plan, 3, 0, &view, NULL), DCP_OK);
    CHECK_EQ(dcp_rank_view_serialize(view, NULL, 0, &size, NULL), DCP_OK);
    buffer = (unsigned char *)malloc(size);
    changed = (unsigned char *)malloc(size);
    CHECK_EQ(dcp_rank_view_serialize(view, buffer, size, NULL, NULL), DCP_OK);
    CHECK_EQ(dcp_rank_view_deserialize(buffer, size, NULL, &copy, NULL), DCP_OK);
    if (copy) {
        CHECK(memcmp(copy, view, offsetof(dcp_rank_view, samples)) == 0);
        CHECK(memcmp(copy->cu_seqlens_padded, view->cu_seqlens_padded,
                     (size_t)(view->num_samples + 1) * sizeof(int32_t)) == 0);
        CHECK(memcmp(copy->samples, view->samples, (size_t)view->num_samples * sizeof(int32_t)) == 0);
    }
    dcp_rank_view_destroy(copy);
    for (i = 0; i < size; i++)
        for (value = 0; value < 256; value++) {
            if (value == buffer[i]) continue;
            memcpy(changed, buffer, size);
            changed[i] = (unsigned char)value;
            copy = NULL;
            CHECK(dcp_rank_view_deserialize(changed, size, NULL, &copy, NULL) != DCP_OK);
            CHECK(copy == NULL);
        }
    for (i = 0; i < size; i++)
        CHECK(dcp_rank_view_deserialize(buffer, i, NULL, &copy, NULL) != DCP_OK);
    /* a plan buffer is not a view buffer and the other way round */
    CHECK(dcp_rank_view_deserialize(plan_buffer, plan_size, NULL, &copy, NULL) != DCP_OK);
    CHECK(dcp_plan_deserialize(buffer, size, NULL, &not_a_plan, NULL) != DCP_OK);
    CHECK(not_a_plan == NULL);
    dcp_plan_destroy(plan);
    dcp_rank_view_destroy(view);
    free(buffer);
    free(changed);
    free(plan_buffer);
}

/* Static CP puts both samples at cp 2: 150 pads to 152 and 99 to 100. */
static void flops_stats_by_hand(void)
{
    dcp_config c = make_config(4, 100);
    int64_t lengths[2] = {150, 99};
    dcp_plan *plan = NULL;
    dcp_flops_stats stats;
    c.strategy = DCP_STRATEGY_STATIC;
    CHECK_EQ(dcp_plan_create(&c, lengths, 2, &plan, NULL), DCP_OK);
    CHECK_EQ(dcp_plan_flops_stats(plan, &stats, NULL), DCP_OK);
    CHECK_EQ(stats.valid_tokens, 249);
    CHECK_EQ(stats.padded_tokens, 252);
    CHECK_EQ(stats.sum_squared_valid, 150 * 150 + 99 * 99);
    CHECK_EQ(stats.sum_squared_padded, 152 * 152 + 100 * 100);
    CHECK_EQ(dcp_plan_flops_stats(plan, NULL, NULL), DCP_ERROR_INVALID_ARGUMENT);
    dcp_plan_destroy(plan);
}

static void flops_stats_overflow_is_an_error(void)
{
    dcp_config c = make_config(1, DCP_MAX_SAMPLE_LENGTH);
    int64_t lengths[3] = {DCP_MAX_SAMPLE_LENGTH, DCP_MAX_SAMPLE_LENGTH, DCP_MAX_SAMPLE_LENGTH};
    dcp_plan *plan = NULL;
    dcp_flops_stats stats;
    dcp_error error;
    CHECK_EQ(dcp_plan_create(&c, lengths, 3, &plan, NULL), DCP_OK);
    CHECK_EQ(dcp_plan_flops_stats(plan, &stats, &error), DCP_ERROR_OVERFLOW); /* 3 x 2^62 */
    CHECK_CONTAINS(error.message, "exceed int64");
    dcp_plan_destroy(plan);
}

static void pad_to_alignment_extends_the_last_sequence(void)
{
    int32_t cu[4] = {0, 100, 164, 4001};
    int64_t added = -1;
    dcp_error error;
    CHECK_EQ(dcp_pad_to_alignment(cu, 3, 4096, &added, NULL), DCP_OK);
    CHECK_EQ(added, 95);
    CHECK_EQ(cu[3], 4096);
    CHECK_EQ(dcp_pad_to_alignment(cu, 3, 4096, &added, NULL), DCP_OK);
    CHECK_EQ(added, 0);
    CHECK_EQ(dcp_pad_to_alignment(cu, 3, 0, &added, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "alignment");
    cu[3] = INT32_MAX - 5;
    CHECK_EQ(dcp_pad_to_alignment(cu, 3, 4096, &added, &error), DCP_ERROR_OVERFLOW);
    CHECK_EQ(cu[3], INT32_MAX - 5);
    CHECK_EQ(dcp_pad_to_alignment(cu, 0, 4096, &added, &error), DCP_ERROR_INVALID_ARGUMENT);
}

/* A plan is validated where it enters: a plan the planner made or the reader read is sealed
   and trusted at every use after (a rank view then allocates only its own arrays: the
   validator's scratch is the difference); a copy of the struct elsewhere, or a plan whose seal
   was cleared before a change, is validated in full, so a planted break is still found. */
static void plan_is_validated_once(void)
{
    const int64_t lengths[6] = {5000, 3000, 900, 800, 700, 100};
    counting_allocator counter = {0, 0, -1};
    dcp_config c = make_config(8, 2048);
    dcp_plan *plan = NULL, copy;
    dcp_rank_view *view = NULL;
    dcp_error error;
    long sealed, unsealed;
    int32_t kept;
    c.allocator.alloc = counting_alloc;
    c.allocator.free = counting_free;
    c.allocator.user = &counter;
    CHECK_EQ(dcp_plan_create(&c, lengths, 6, &plan, NULL), DCP_OK);
    if (!plan) return;
    CHECK(plan->seal != 0);
    CHECK_EQ(dcp_plan_trusted(plan, &error), DCP_OK);
    sealed = counter.allocations;
    CHECK_EQ(dcp_rank_view_create(plan, 0, 0, &view, NULL), DCP_OK);
    sealed = counter.allocations - sealed;
    dcp_rank_view_destroy(view);
    plan->seal = 0;
    unsealed = counter.allocations;
    CHECK_EQ(dcp_rank_view_create(plan, 0, 0, &view, NULL), DCP_OK);
    unsealed = counter.allocations - unsealed;
    dcp_rank_view_destroy(view);
    CHECK(unsealed > sealed); /* the validator's scratch: validated in full */
    kept = plan->groups[0].cp;
    plan->groups[0].cp = 3; /* unsealed and broken: found */
    CHECK_EQ(dcp_rank_view_create(plan, 0, 0, &view, &error), DCP_ERROR_INVALID_PLAN);
    plan->groups[0].cp = kept;
    dcp__plan_seal(plan);
    memcpy(&copy, plan, sizeof copy); /* its seal names the original's address */
    copy.num_microbatches = 0;
    CHECK_EQ(dcp_plan_trusted(&copy, &error), DCP_ERROR_INVALID_PLAN);
    CHECK_EQ(dcp_plan_trusted(plan, &error), DCP_OK);
    dcp_plan_destroy(plan);
    CHECK_EQ(counter.allocations, counter.frees);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"zigzag_matches_brute_force", zigzag_matches_brute_force},
        {"rank_views_match_the_plan", rank_views_match_the_plan},
        {"simulated_ranks_reroute_and_pack", simulated_ranks_reroute_and_pack},
        {"pack_unpack_round_trip", pack_unpack_round_trip},
        {"view_rejects_bad_arguments", view_rejects_bad_arguments},
        {"plan_serialization_round_trip", plan_serialization_round_trip},
        {"plan_corruption_is_rejected", plan_corruption_is_rejected},
        {"plan_garbage_is_rejected", plan_garbage_is_rejected},
        {"view_serialization_round_trip_and_corruption", view_serialization_round_trip_and_corruption},
        {"serialized_sizes_follow_the_record_constants",
         serialized_sizes_follow_the_record_constants},
        {"flops_stats_by_hand", flops_stats_by_hand},
        {"flops_stats_overflow_is_an_error", flops_stats_overflow_is_an_error},
        {"pad_to_alignment_extends_the_last_sequence", pad_to_alignment_extends_the_last_sequence},
        {"plan_is_validated_once", plan_is_validated_once},
    };
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
