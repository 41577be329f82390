/* MTP roll and pipeline-stage fields (dcp.h): the per-sequence roll of multi-token prediction
   across the zigzag CP split, checked against rolling the unsplit batch and then splitting it,
   for every c from 1 to 64 on random packs (both the CPU reference and the gather / exchange /
   shift path the NCCL layer runs), its index function against the chunk boundaries, the
   padding invariants and the error cases; and the field sets of pipeline stages: which fields
   a stage moves, the bytes its reroute moves, packing per field. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "test.h"

#define MTP_SEED 2020
#define MAX_CP 64
#define MAX_SEQUENCES 6
#define PACKS_PER_CP 24
/* Padding rows of the inputs carry this byte (libdcp pads with zeros; any value must stay). */
#define PAD_BYTE 0xA5
/* Outputs start as this byte, so a row the roll forgets to write shows. */
#define POISON_BYTE 0x5A
/* Chunks per sequence, at most, a valid length spans in the random packs (then more padding). */
#define MAX_CHUNKS_SPANNED 5

static const size_t element_sizes[] = {1, 2, 3, 4, 8, 12, 16};

/* One random pack of sequences for a group of cp ranks: the unsplit batch, its roll, and the
   rank buffers (input, expected, output, and the exchange slots of the device path). */
typedef struct pack {
    dcp_thd_layout layout;
    int32_t cu[MAX_SEQUENCES + 1], cu_padded[MAX_SEQUENCES + 1];
    size_t size;
    int64_t local_rows;
    unsigned char *global, *rolled; /* cu_padded[n] rows, sequences in order */
    unsigned char *in[MAX_CP], *expected[MAX_CP], *out[MAX_CP];
    unsigned char *boundaries[MAX_CP], *received[MAX_CP];
} pack;

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* The roll of one unsplit sequence, written out from its definition. */
static void roll_unsplit(const unsigned char *in, int64_t valid, int64_t padded, size_t size,
                         unsigned char *out)
{
    int64_t p;
    for (p = 0; p < padded; p++) {
        unsigned char *o = out + (size_t)p * size;
        if (p >= valid) memcpy(o, in + (size_t)p * size, size);
        else if (p == valid - 1) memset(o, 0, size);
        else memcpy(o, in + (size_t)(p + 1) * size, size);
    }
}

/* Rank r's local buffer of a batch given whole: row l of sequence i is global position
   dcp_zigzag_position(P_i, cp, r, l) of that sequence. */
static void split(const pack *p, const unsigned char *global, int32_t r, unsigned char *local)
{
    int32_t i;
    for (i = 0; i < p->layout.num_sequences; i++) {
        int64_t padded = p->cu_padded[i + 1] - p->cu_padded[i], l;
        for (l = 0; l < padded / p->layout.cp; l++) {
            int64_t g = dcp_zigzag_position(padded, p->layout.cp, r, l);
            memcpy(local + (size_t)(p->cu_padded[i] / p->layout.cp + l) * p->size,
                   global + (size_t)(p->cu_padded[i] + g) * p->size, p->size);
        }
    }
}

static void pack_init(pack *p, dcp_rng *rng, int32_t cp, size_t size, int32_t sequences)
{
    int64_t rows, chunk = cp > 1 ? 2 * (int64_t)cp : 1;
    int32_t i, r;
    memset(p, 0, sizeof *p);
    p->size = size;
    for (i = 0; i < sequences; i++) {
        /* short ones (many chunks all padding), exact multiples (no padding at all), long */
        int64_t spans = 1 + (int64_t)dcp_rng_below(rng, MAX_CHUNKS_SPANNED);
        int64_t valid = 1 + (int64_t)dcp_rng_below(rng, (uint64_t)(spans * chunk * 3));
        int64_t padded = round_up(valid, chunk) + chunk * (int64_t)dcp_rng_below(rng, 2);
        if (dcp_rng_below(rng, 4) == 0) valid = padded;
        p->cu[i + 1] = p->cu[i] + (int32_t)valid;
        p->cu_padded[i + 1] = p->cu_padded[i] + (int32_t)padded;
    }
    p->layout.num_sequences = sequences;
    p->layout.cu_seqlens = p->cu;
    p->layout.cu_seqlens_padded = p->cu_padded;
    p->layout.cp = cp;
    rows = p->cu_padded[sequences];
    p->local_rows = rows / cp;
    p->global = (unsigned char *)malloc((size_t)rows * size + 1);
    p->rolled = (unsigned char *)malloc((size_t)rows * size + 1);
    for (i = 0; i < sequences; i++) {
        int64_t start = p->cu_padded[i], valid = p->cu[i + 1] - p->cu[i];
        int64_t padded = p->cu_padded[i + 1] - start, b;
        for (b = 0; b < padded * (int64_t)size; b++)
            p->global[(size_t)start * size + (size_t)b] =
                b < valid * (int64_t)size ? (unsigned char)dcp_rng_below(rng, 256) : PAD_BYTE;
        roll_unsplit(p->global + (size_t)start * size, valid, padded, size,
                     p->rolled + (size_t)start * size);
    }
    for (r = 0; r < cp; r++) {
        size_t bytes = (size_t)p->local_rows * size + 1, slots = 2 * (size_t)sequences * size + 1;
        p->in[r] = (unsigned char *)malloc(bytes);
        p->expected[r] = (unsigned char *)malloc(bytes);
        p->out[r] = (unsigned char *)malloc(bytes);
        p->boundaries[r] = (unsigned char *)malloc(slots);
        p->received[r] = (unsigned char *)malloc(slots);
        split(p, p->global, r, p->in[r]);
        split(p, p->rolled, r, p->expected[r]);
        memset(p->out[r], POISON_BYTE, bytes);
        memset(p->received[r], POISON_BYTE, slots);
    }
}

static void pack_free(pack *p)
{
    int32_t r;
    for (r = 0; r < p->layout.cp; r++) {
        free(p->in[r]);
        free(p->expected[r]);
        free(p->out[r]);
        free(p->boundaries[r]);
        free(p->received[r]);
    }
    free(p->global);
    free(p->rolled);
}

/* 1 when every rank's output equals the split of the rolled batch; prints the first
   difference. */
static int outputs_match(const pack *p, const char *what)
{
    int32_t r;
    int64_t row;
    for (r = 0; r < p->layout.cp; r++)
        for (row = 0; row < p->local_rows; row++)
            if (memcmp(p->out[r] + (size_t)row * p->size, p->expected[r] + (size_t)row * p->size,
                       p->size) != 0) {
                fprintf(stderr, "%s: cp %d, element %zu bytes: rank %d row %lld differs\n", what,
                        (int)p->layout.cp, p->size, (int)r, (long long)row);
                return 0;
            }
    return 1;
}

/* The device path on host buffers: every rank gathers, the messages of the fixed exchange
   layout travel (half 0 from rank r + 1, half 1 from rank r - 1), every rank shifts. */
static void run_exchange_path(pack *p)
{
    const int32_t cp = p->layout.cp, n = p->layout.num_sequences;
    const size_t slot_bytes = (size_t)n * p->size;
    int32_t r;
    for (r = 0; r < cp; r++)
        CHECK_EQ(dcp_mtp_roll_gather(&p->layout, r, p->size, p->in[r], p->boundaries[r], NULL),
                 DCP_OK);
    for (r = 0; r < cp && cp > 1; r++) {
        if (r + 1 < cp) memcpy(p->received[r], p->boundaries[r + 1], slot_bytes);
        if (r > 0) memcpy(p->received[r] + slot_bytes, p->boundaries[r - 1] + slot_bytes,
                          slot_bytes);
    }
    for (r = 0; r < cp; r++)
        CHECK_EQ(dcp_mtp_roll_shift(&p->layout, r, p->size, p->in[r], p->received[r], p->out[r],
                                    NULL),
                 DCP_OK);
}

static void roll_equals_unsplit_roll_for_every_cp(void)
{
    dcp_rng rng;
    int32_t cp, k;
    uint64_t seed = test_seed_for(MTP_SEED);
    dcp_rng_seed(&rng, seed);
    for (cp = 1; cp <= MAX_CP; cp *= 2)
        for (k = 0; k < PACKS_PER_CP; k++) {
            pack p;
            size_t size = element_sizes[dcp_rng_below(
                &rng, sizeof element_sizes / sizeof element_sizes[0])];
            int32_t sequences = 1 + (int32_t)dcp_rng_below(&rng, MAX_SEQUENCES);
            pack_init(&p, &rng, cp, size, sequences);
            CHECK_EQ(dcp_mtp_roll_reference(&p.layout, size, (const void *const *)p.in,
                                            (void *const *)p.out, NULL),
                     DCP_OK);
            CHECK(outputs_match(&p, "reference"));
            for (int32_t r = 0; r < cp; r++)
                memset(p.out[r], POISON_BYTE, (size_t)p.local_rows * size);
            run_exchange_path(&p);
            CHECK(outputs_match(&p, "gather, exchange, shift"));
            pack_free(&p);
        }
}

/* The index function lists exactly the chunk boundaries inside the valid tokens: each RECV's
   peer row is the global position after its row, each pairs with one SEND of the peer, COPY
   only on rank c - 1, and the size query agrees with the list. */
static void plan_lists_exactly_the_valid_boundaries(void)
{
    dcp_rng rng;
    int32_t cp, k;
    dcp_rng_seed(&rng, test_seed_for(MTP_SEED + 1));
    for (cp = 1; cp <= MAX_CP; cp *= 2)
        for (k = 0; k < PACKS_PER_CP; k++) {
            pack p;
            static dcp_mtp_roll_transfer lists[MAX_CP][4 * MAX_SEQUENCES];
            int64_t counts[MAX_CP], incoming = 0, sends = 0, expected = 0;
            int32_t r, i, n = 1 + (int32_t)dcp_rng_below(&rng, MAX_SEQUENCES);
            pack_init(&p, &rng, cp, 1, n);
            for (i = 0; i < n; i++) { /* chunk k's end needs chunk k + 1 when it starts < L */
                int64_t valid = p.cu[i + 1] - p.cu[i], chunk;
                int64_t h = (p.cu_padded[i + 1] - p.cu_padded[i]) / (cp > 1 ? 2 * cp : 1);
                for (chunk = 1; chunk < (cp > 1 ? 2 * cp : 1); chunk++)
                    expected += chunk * h < valid;
            }
            for (r = 0; r < cp; r++) {
                int64_t query = -1, t;
                CHECK_EQ(dcp_mtp_roll_plan(&p.layout, r, NULL, 0, &query, NULL), DCP_OK);
                CHECK_EQ(dcp_mtp_roll_plan(&p.layout, r, lists[r], 4 * MAX_SEQUENCES, &counts[r],
                                           NULL),
                         DCP_OK);
                CHECK_EQ(counts[r], query);
                CHECK(counts[r] <= 4 * n);
                for (t = 0; t < counts[r]; t++) {
                    const dcp_mtp_roll_transfer *x = &lists[r][t];
                    int64_t padded = p.cu_padded[x->sequence + 1] - p.cu_padded[x->sequence];
                    int64_t base = p.cu_padded[x->sequence] / cp;
                    int64_t mine = dcp_zigzag_position(padded, cp, r, x->row - base);
                    int64_t theirs = dcp_zigzag_position(padded, cp, x->peer, x->peer_row - base);
                    if (x->kind == DCP_TRANSFER_SEND) {
                        sends++;
                        CHECK_EQ(theirs + 1, mine);
                        continue;
                    }
                    incoming++;
                    CHECK_EQ(mine + 1, theirs);
                    CHECK(theirs < p.cu[x->sequence + 1] - p.cu[x->sequence]);
                    CHECK_EQ(x->kind == DCP_TRANSFER_COPY, x->peer == r);
                    if (x->kind == DCP_TRANSFER_COPY) CHECK_EQ(r, cp - 1);
                }
            }
            CHECK_EQ(incoming, expected);
            for (r = 0; r < cp; r++) { /* every RECV has its SEND on the peer, rows swapped */
                int64_t t, u;
                for (t = 0; t < counts[r]; t++) {
                    const dcp_mtp_roll_transfer *x = &lists[r][t];
                    int found = 0;
                    if (x->kind != DCP_TRANSFER_RECV) continue;
                    sends--;
                    for (u = 0; u < counts[x->peer]; u++) {
                        const dcp_mtp_roll_transfer *y = &lists[x->peer][u];
                        found += y->kind == DCP_TRANSFER_SEND && y->peer == r &&
                                 y->sequence == x->sequence && y->half == x->half &&
                                 y->row == x->peer_row && y->peer_row == x->row;
                    }
                    CHECK_EQ(found, 1);
                }
            }
            CHECK_EQ(sends, 0);
            pack_free(&p);
        }
}

/* Token ids tagged with their sequence, position ids and a loss mask, through the reference:
   every valid row holds the next token of its own sequence or the fill 0, position ids move
   by one, the loss mask is 0 on the last valid position and on all padding, and padding rows
   keep their ids. */
static void padding_stays_padding_and_sequences_stay_apart(void)
{
    dcp_rng rng;
    int32_t cp;
    dcp_rng_seed(&rng, test_seed_for(MTP_SEED + 2));
    for (cp = 1; cp <= MAX_CP; cp *= 2) {
        pack ids;
        unsigned char *mask_in[MAX_CP], *mask_out[MAX_CP];
        int32_t r, i, n = MAX_SEQUENCES;
        pack_init(&ids, &rng, cp, sizeof(int32_t), n);
        for (i = 0; i < n; i++) {
            int64_t start = ids.cu_padded[i], valid = ids.cu[i + 1] - ids.cu[i], q;
            for (q = 0; q < ids.cu_padded[i + 1] - start; q++) {
                int32_t id = q < valid ? (i + 1) * 1000000 + (int32_t)q : -7;
                memcpy(ids.global + (size_t)(start + q) * sizeof id, &id, sizeof id);
            }
        }
        for (r = 0; r < cp; r++) { /* the loss mask: 1 on valid tokens, 0 on padding */
            int64_t row;
            split(&ids, ids.global, r, ids.in[r]);
            mask_in[r] = (unsigned char *)malloc((size_t)ids.local_rows + 1);
            mask_out[r] = (unsigned char *)malloc((size_t)ids.local_rows + 1);
            memset(mask_out[r], POISON_BYTE, (size_t)ids.local_rows + 1);
            for (row = 0; row < ids.local_rows; row++) {
                int32_t id;
                memcpy(&id, ids.in[r] + (size_t)row * sizeof id, sizeof id);
                mask_in[r][row] = id >= 0;
            }
        }
        CHECK_EQ(dcp_mtp_roll_reference(&ids.layout, sizeof(int32_t),
                                        (const void *const *)ids.in, (void *const *)ids.out, NULL),
                 DCP_OK);
        CHECK_EQ(dcp_mtp_roll_reference(&ids.layout, 1, (const void *const *)mask_in,
                                        (void *const *)mask_out, NULL),
                 DCP_OK);
        for (r = 0; r < cp; r++)
            for (i = 0; i < n; i++) {
                int64_t padded = ids.cu_padded[i + 1] - ids.cu_padded[i], l;
                int64_t valid = ids.cu[i + 1] - ids.cu[i], base = ids.cu_padded[i] / cp;
                for (l = 0; l < padded / cp; l++) {
                    int64_t g = dcp_zigzag_position(padded, cp, r, l);
                    int32_t id;
                    memcpy(&id, ids.out[r] + (size_t)(base + l) * sizeof id, sizeof id);
                    if (g >= valid) CHECK_EQ(id, -7);
                    else if (g == valid - 1) CHECK_EQ(id, 0);
                    else CHECK_EQ(id, (i + 1) * 1000000 + g + 1);
                    CHECK_EQ(mask_out[r][base + l], g < valid - 1);
                }
            }
        for (r = 0; r < cp; r++) {
            free(mask_in[r]);
            free(mask_out[r]);
        }
        pack_free(&ids);
    }
}

/* An empty pack and a single-token sequence: nothing moves, the fill lands. */
static void edge_packs(void)
{
    int32_t cu[2] = {0, 1}, cu_padded[2] = {0, 8}, empty[1] = {0};
    dcp_thd_layout one = {1, cu, cu_padded, 4}, none = {0, empty, empty, 4};
    unsigned char in[4][2], out[4][2];
    const void *ins[4] = {in[0], in[1], in[2], in[3]};
    void *outs[4] = {out[0], out[1], out[2], out[3]};
    int64_t count = -1;
    int32_t r;
    memset(in, 9, sizeof in);
    memset(out, POISON_BYTE, sizeof out);
    CHECK_EQ(dcp_mtp_roll_reference(&one, 1, ins, outs, NULL), DCP_OK);
    CHECK_EQ(out[0][0], 0); /* the one token is the last valid one */
    for (r = 0; r < 4; r++) CHECK_EQ(out[r][1], 9);
    for (r = 1; r < 4; r++) CHECK_EQ(out[r][0], 9);
    for (r = 0; r < 4; r++) {
        CHECK_EQ(dcp_mtp_roll_plan(&one, r, NULL, 0, &count, NULL), DCP_OK);
        CHECK_EQ(count, 0);
        CHECK_EQ(dcp_mtp_roll_plan(&none, r, NULL, 0, &count, NULL), DCP_OK);
        CHECK_EQ(count, 0);
    }
    CHECK_EQ(dcp_mtp_roll_shift(&none, 0, 4, NULL, NULL, NULL, NULL), DCP_OK);
    CHECK_EQ(dcp_mtp_roll_gather(&none, 0, 4, NULL, NULL, NULL), DCP_OK);
}

static void roll_rejects_bad_arguments(void)
{
    int32_t cu[3] = {0, 5, 9}, cu_padded[3] = {0, 8, 16}, bad_padded[3] = {0, 6, 16};
    dcp_thd_layout layout = {2, cu, cu_padded, 2}, bad = {2, cu, bad_padded, 2};
    unsigned char buffer[2][64], slots[2][8];
    const void *ins[2] = {buffer[0], NULL};
    void *outs[2] = {buffer[1], buffer[1]};
    dcp_mtp_roll_transfer list[1];
    dcp_error error;
    int64_t count = -1;
    CHECK_EQ(dcp_mtp_roll_plan(NULL, 0, NULL, 0, &count, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_mtp_roll_plan(&layout, 0, NULL, 0, NULL, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "count");
    CHECK_EQ(dcp_mtp_roll_plan(&layout, 2, NULL, 0, &count, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "rank");
    CHECK_EQ(dcp_mtp_roll_plan(&layout, -1, NULL, 0, &count, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_mtp_roll_plan(&bad, 0, NULL, 0, &count, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "multiple of 2 cp");
    CHECK_EQ(dcp_mtp_roll_plan(&layout, 0, list, 1, &count, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "capacity 1");
    CHECK_EQ(count, 2); /* rank 0 receives the ends of chunk 0 of both sequences from rank 1 */
    CHECK_EQ(dcp_mtp_roll_shift(&layout, 0, 0, buffer[0], NULL, buffer[1], &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "element_size");
    CHECK_EQ(dcp_mtp_roll_shift(&layout, 0, 1, NULL, NULL, buffer[1], &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_mtp_roll_shift(&layout, 0, 1, buffer[0], NULL, buffer[0] + 4, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "overlaps");
    CHECK_EQ(dcp_mtp_roll_shift(&layout, 0, (size_t)-1, buffer[0], NULL, buffer[1], &error),
             DCP_ERROR_OVERFLOW);
    CHECK_EQ(dcp_mtp_roll_gather(&layout, 0, 1, buffer[0], NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "boundaries");
    CHECK_EQ(dcp_mtp_roll_gather(&layout, 1, 1, buffer[0], slots[0], &error), DCP_OK);
    CHECK_EQ(dcp_mtp_roll_reference(&layout, 1, ins, outs, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "in[1]");
    CHECK_EQ(dcp_mtp_roll_reference(&layout, 1, NULL, outs, &error), DCP_ERROR_INVALID_ARGUMENT);
}

/* ---------------------------------------------------------------- pipeline-stage fields */

#define TOKENS DCP_FIELD_BIT(DCP_FIELD_TOKENS)
#define POSITIONS DCP_FIELD_BIT(DCP_FIELD_POSITION_IDS)
#define LABELS DCP_FIELD_BIT(DCP_FIELD_LABELS)
#define LOSS_MASK DCP_FIELD_BIT(DCP_FIELD_LOSS_MASK)

static void stage_fields_follow_megatron(void)
{
    CHECK_EQ(dcp_stage_fields(1, 0, 0), TOKENS | POSITIONS);
    CHECK_EQ(dcp_stage_fields(0, 1, 0), LABELS | LOSS_MASK);
    CHECK_EQ(dcp_stage_fields(0, 0, 0), 0);
    CHECK_EQ(dcp_stage_fields(0, 0, 1), DCP_FIELDS_ALL);
    CHECK_EQ(dcp_stage_fields(0, 1, 1), DCP_FIELDS_ALL);
    CHECK_EQ(dcp_stage_fields(1, 1, 0), DCP_FIELDS_ALL);
}

static void field_set_checks(void)
{
    dcp_field_set set;
    dcp_error error;
    size_t bytes = 99;
    memset(&set, 0, sizeof set);
    CHECK_EQ(dcp_field_set_validate(&set, &bytes, &error), DCP_OK);
    CHECK_EQ(bytes, 0);
    set.fields = TOKENS | LOSS_MASK;
    set.element_size[DCP_FIELD_TOKENS] = 4;
    CHECK_EQ(dcp_field_set_validate(&set, &bytes, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "element_size[3]");
    set.element_size[DCP_FIELD_LOSS_MASK] = 1;
    set.element_size[DCP_FIELD_LABELS] = 1000; /* not in the set: ignored */
    CHECK_EQ(dcp_field_set_validate(&set, &bytes, &error), DCP_OK);
    CHECK_EQ(bytes, 5);
    set.fields |= 1u << DCP_FIELD_COUNT;
    CHECK_EQ(dcp_field_set_validate(&set, &bytes, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "0x");
    CHECK_EQ(dcp_field_set_validate(NULL, &bytes, &error), DCP_ERROR_INVALID_ARGUMENT);
}

/* The stage sets of a pipeline with MTP on the last stage, with Megatron's element sizes. */
static dcp_field_set stage_set(int32_t first, int32_t last, int32_t mtp)
{
    dcp_field_set set;
    memset(&set, 0, sizeof set);
    set.fields = dcp_stage_fields(first, last, mtp);
    set.element_size[DCP_FIELD_TOKENS] = sizeof(int64_t);
    set.element_size[DCP_FIELD_POSITION_IDS] = sizeof(int64_t);
    set.element_size[DCP_FIELD_LABELS] = sizeof(int64_t);
    set.element_size[DCP_FIELD_LOSS_MASK] = sizeof(float);
    return set;
}

/* Per stage, dcp_reroute_field_bytes equals the bytes of every op of the list summed over the
   stage's fields (dcp_reroute_op_get), and a middle stage moves none. */
static void reroute_bytes_per_stage(void)
{
    dcp_rng rng;
    int w;
    dcp_rng_seed(&rng, test_seed_for(MTP_SEED + 3));
    for (w = 0; w < 20; w++) {
        dcp_config c = make_config(1 + (int32_t)dcp_rng_below(&rng, 64), 1024);
        int64_t lengths[40];
        int32_t holders[40], count = 1 + (int32_t)dcp_rng_below(&rng, 40), s, rank, stage;
        dcp_plan *plan = NULL;
        for (s = 0; s < count; s++) {
            lengths[s] = 1 + (int64_t)dcp_rng_below(&rng, 600);
            holders[s] = (int32_t)dcp_rng_below(&rng, (uint64_t)c.ranks);
        }
        CHECK_EQ(dcp_plan_create(&c, lengths, count, &plan, NULL), DCP_OK);
        if (!plan) continue;
        for (rank = 0; rank < c.ranks; rank++) {
            dcp_reroute *reroute = NULL;
            CHECK_EQ(dcp_reroute_create(plan, holders, rank, &reroute, NULL), DCP_OK);
            for (stage = 0; stage < 4 && reroute; stage++) { /* first, middle, last, last+MTP */
                dcp_field_set set = stage_set(stage == 0, stage >= 2, stage == 3);
                dcp_reroute_bytes got;
                uint64_t want[3] = {0, 0, 0};
                int32_t i, f;
                CHECK_EQ(dcp_reroute_field_bytes(reroute, &set, &got, NULL), DCP_OK);
                for (i = 0; i < reroute->count; i++)
                    for (f = 0; f < DCP_FIELD_COUNT; f++) {
                        dcp_reroute_op op;
                        if (!(set.fields & DCP_FIELD_BIT(f))) continue;
                        CHECK_EQ(dcp_reroute_op_get(reroute, i, set.element_size[f], &op, NULL),
                                 DCP_OK);
                        want[op.kind] += op.bytes;
                    }
                CHECK_EQ(got.send, want[DCP_TRANSFER_SEND]);
                CHECK_EQ(got.recv, want[DCP_TRANSFER_RECV]);
                CHECK_EQ(got.copy, want[DCP_TRANSFER_COPY]);
                if (stage == 1) CHECK_EQ(got.send + got.recv + got.copy, 0);
            }
            dcp_reroute_destroy(reroute);
        }
        dcp_plan_destroy(plan);
    }
}

/* pack_fields / unpack_fields equal pack / unpack field by field; fields outside the set are
   neither read nor written (their buffers NULL or untouched). */
static void pack_fields_equals_pack_per_field(void)
{
    dcp_config c = make_config(8, 64);
    int64_t lengths[5] = {100, 7, 33, 64, 1};
    dcp_plan *plan = NULL;
    int32_t rank, s, f;
    static unsigned char data[DCP_FIELD_COUNT][5][100 * 8], back[DCP_FIELD_COUNT][5][100 * 8];
    static unsigned char local[DCP_FIELD_COUNT][64 * 8 * 4], single[64 * 8 * 4];
    const void *samples[DCP_FIELD_COUNT][5];
    void *samples_back[DCP_FIELD_COUNT][5];
    const void *const *sample_data[DCP_FIELD_COUNT];
    void *const *sample_back[DCP_FIELD_COUNT];
    void *locals[DCP_FIELD_COUNT];
    for (f = 0; f < DCP_FIELD_COUNT; f++) {
        for (s = 0; s < 5; s++) {
            size_t b;
            for (b = 0; b < sizeof data[f][s]; b++) data[f][s][b] = (unsigned char)(b * 7 + f + s);
            samples[f][s] = data[f][s];
            samples_back[f][s] = back[f][s];
        }
        sample_data[f] = samples[f];
        sample_back[f] = samples_back[f];
        locals[f] = local[f];
    }
    CHECK_EQ(dcp_plan_create(&c, lengths, 5, &plan, NULL), DCP_OK);
    for (rank = 0; plan && rank < c.ranks; rank++) {
        int32_t k;
        for (k = 0; k < plan->num_microbatches; k++) {
            dcp_rank_view *view = NULL;
            int32_t stage;
            CHECK_EQ(dcp_rank_view_create(plan, rank, k, &view, NULL), DCP_OK);
            for (stage = 0; view && stage < 3; stage++) {
                dcp_field_set set = stage_set(stage == 0, stage == 2, 0);
                memset(local, POISON_BYTE, sizeof local);
                CHECK_EQ(dcp_rank_view_pack_fields(view, &set, sample_data, locals, NULL),
                         DCP_OK);
                for (f = 0; f < DCP_FIELD_COUNT; f++) {
                    size_t bytes = (size_t)view->local_tokens * set.element_size[f];
                    if (!(set.fields & DCP_FIELD_BIT(f))) {
                        CHECK_EQ(local[f][0], POISON_BYTE);
                        continue;
                    }
                    CHECK_EQ(dcp_rank_view_pack(view, sample_data[f], set.element_size[f],
                                                single, NULL),
                             DCP_OK);
                    CHECK(memcmp(single, local[f], bytes) == 0);
                }
                memset(back, 0, sizeof back);
                CHECK_EQ(dcp_rank_view_unpack_fields(view, &set, (const void *const *)locals,
                                                     sample_back, NULL),
                         DCP_OK);
                for (f = 0; f < DCP_FIELD_COUNT; f++) {
                    int32_t i;
                    for (i = 0; i < view->num_samples; i++) {
                        int32_t id = view->samples[i];
                        unsigned char zero[8] = {0};
                        /* the rank's rows of the sample came back, for the set's fields */
                        if (set.fields & DCP_FIELD_BIT(f)) {
                            int64_t l;
                            for (l = 0; l < view->local_offsets[i + 1] - view->local_offsets[i];
                                 l++) {
                                int64_t g = dcp_zigzag_position(
                                    view->cu_seqlens_padded[i + 1] - view->cu_seqlens_padded[i],
                                    view->cp, view->rank_in_group, l);
                                size_t e = set.element_size[f];
                                if (g >= view->sample_lengths[i]) continue;
                                CHECK(memcmp(back[f][id] + (size_t)g * e,
                                             data[f][id] + (size_t)g * e, e) == 0);
                            }
                        } else
                            CHECK(memcmp(back[f][id], zero, sizeof zero) == 0);
                    }
                }
            }
            /* a middle stage needs no buffers at all */
            {
                dcp_field_set middle = stage_set(0, 0, 0);
                CHECK_EQ(dcp_rank_view_pack_fields(view, &middle, NULL, NULL, NULL), DCP_OK);
                CHECK_EQ(dcp_rank_view_unpack_fields(view, &middle, NULL, NULL, NULL), DCP_OK);
            }
            dcp_rank_view_destroy(view);
        }
    }
    {
        dcp_field_set first = stage_set(1, 0, 0);
        dcp_error error;
        CHECK_EQ(dcp_rank_view_pack_fields(NULL, &first, sample_data, locals, &error),
                 DCP_ERROR_INVALID_ARGUMENT);
        CHECK_EQ(dcp_rank_view_pack_fields(NULL, &first, NULL, locals, &error),
                 DCP_ERROR_INVALID_ARGUMENT);
        CHECK_CONTAINS(error.message, "sample_data");
    }
    dcp_plan_destroy(plan);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"roll_equals_unsplit_roll_for_every_cp", roll_equals_unsplit_roll_for_every_cp},
        {"plan_lists_exactly_the_valid_boundaries", plan_lists_exactly_the_valid_boundaries},
        {"padding_stays_padding_and_sequences_stay_apart",
         padding_stays_padding_and_sequences_stay_apart},
        {"edge_packs", edge_packs},
        {"roll_rejects_bad_arguments", roll_rejects_bad_arguments},
        {"stage_fields_follow_megatron", stage_fields_follow_megatron},
        {"field_set_checks", field_set_checks},
        {"reroute_bytes_per_stage", reroute_bytes_per_stage},
        {"pack_fields_equals_pack_per_field", pack_fields_equals_pack_per_field},
    };
    return test_main(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
}
