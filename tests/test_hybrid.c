/* Hybrid models: the CP <-> head-parallel all-to-all of dcp.h on simulated ranks. The expected
   layouts are built from an unsplit batch by brute force (cut each sequence into 2c chunks,
   give rank r chunks r and 2c-1-r), never by the functions under test. Checked: cp2hp gives
   every rank whole sequences in order for its channel slice, padding rows 0; hp2cp undoes it;
   the segment lists executed as pack, exchange, unpack (what dcp_nccl.h does) equal the
   references byte for byte; padding rows are never packed; c = 1 is the identity; bad
   arguments are refused with messages naming the values; conv1d on the head-parallel layout
   equals conv1d on the unsplit batch, slice by slice. c from 1 to 128, random packs, any
   channel size, fixed printed seeds. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "test.h"

#define HYBRID_SEED 2020
#define MAX_SEQUENCES 12
/* Padding rows of an input are filled with it; valid bytes never take it, so a packed
   message that contains it carries a padding row. */
#define PADDING_MARK 0xFF
/* Output buffers start as it, so a row nobody writes shows. */
#define POISON 0xA5
/* Rows stay small enough that 128 ranks' buffers fit a sanitizer run. */
#define MAX_ROW_BYTES 1024

typedef struct pack {
    int32_t cp, n, channels;
    size_t channel_bytes;
    int32_t cu[MAX_SEQUENCES + 1], cu_padded[MAX_SEQUENCES + 1];
    dcp_thd_layout layout;
    int64_t hp_rows, cp_rows;
    size_t row_bytes, slice_bytes;
    unsigned char *batch;    /* the unsplit batch [hp_rows, row_bytes]: padding rows marked */
    unsigned char **cp_in;   /* [cp] rank r's CP buffer from the batch (brute force) */
    unsigned char **hp_want; /* [cp] rank j's HP buffer from the batch: slice j, padding 0 */
    unsigned char **hp_out, **cp_out; /* [cp] poisoned outputs */
} pack;

/* A random pack of n sequences for a group of cp ranks: lengths from 0 (a sequence that is all
   padding) up to a few chunks, padded to a multiple of 2 cp plus up to two more chunk rows of
   padding each, so some ranks hold chunks with no valid row. */
static void pack_layout(pack *p, dcp_rng *rng, int32_t cp, int32_t n, int32_t channels,
                        size_t channel_bytes)
{
    const int64_t multiple = cp > 1 ? 2 * (int64_t)cp : 1;
    int32_t i;
    p->cp = cp, p->n = n, p->channels = channels, p->channel_bytes = channel_bytes;
    p->cu[0] = p->cu_padded[0] = 0;
    for (i = 0; i < n; i++) {
        int64_t length = (int64_t)dcp_rng_below(rng, (uint64_t)(3 * multiple + 9));
        int64_t padded = (length + multiple - 1) / multiple * multiple +
                         multiple * (int64_t)dcp_rng_below(rng, 3);
        p->cu[i + 1] = p->cu[i] + (int32_t)length;
        p->cu_padded[i + 1] = p->cu_padded[i] + (int32_t)padded;
    }
    p->layout.num_sequences = n;
    p->layout.cu_seqlens = p->cu;
    p->layout.cu_seqlens_padded = p->cu_padded;
    p->layout.cp = cp;
    p->hp_rows = p->cu_padded[n];
    p->cp_rows = p->hp_rows / cp;
    p->row_bytes = (size_t)channels * channel_bytes;
    p->slice_bytes = p->row_bytes / (size_t)cp;
}

/* Seeds the test's generator with its fixed seed (shifted by DCP_TEST_SEED) and prints it. */
static void seed_rng(dcp_rng *rng, uint64_t fixed)
{
    const uint64_t seed = test_seed_for(fixed);
    printf("  generator seed %llu\n", (unsigned long long)seed);
    dcp_rng_seed(rng, seed);
}

static unsigned char **rank_buffers(int32_t cp, size_t bytes, int fill)
{
    unsigned char **b = (unsigned char **)malloc((size_t)cp * sizeof *b);
    int32_t r;
    for (r = 0; r < cp; r++) {
        b[r] = (unsigned char *)malloc(bytes + 1); /* + 1: no zero-byte malloc */
        memset(b[r], fill, bytes + 1);
    }
    return b;
}

static void free_buffers(unsigned char **b, int32_t cp)
{
    int32_t r;
    if (!b) return;
    for (r = 0; r < cp; r++) free(b[r]);
    free(b);
}

/* The rank holding global position `position` of a sequence of padded length `padded`, and the
   local row there, by brute force: chunk position / h belongs to rank chunk (first half) or
   2c-1-chunk (second half). */
static void brute_force_owner(int64_t padded, int32_t cp, int64_t position, int32_t *rank,
                              int64_t *local)
{
    const int64_t h = cp > 1 ? padded / (2 * cp) : padded;
    const int64_t chunk = position / h;
    if (cp == 1) {
        *rank = 0, *local = position;
        return;
    }
    if (chunk < cp) *rank = (int32_t)chunk, *local = position - chunk * h;
    else *rank = (int32_t)(2 * cp - 1 - chunk), *local = h + position - chunk * h;
}

/* The batch (valid bytes random but never PADDING_MARK), its CP split and the expected HP
   buffers. */
static void pack_fill(pack *p, dcp_rng *rng)
{
    int32_t i, j;
    int64_t row;
    size_t b;
    p->batch = (unsigned char *)malloc((size_t)p->hp_rows * p->row_bytes + 1);
    p->cp_in = rank_buffers(p->cp, (size_t)p->cp_rows * p->row_bytes, PADDING_MARK);
    p->hp_want = rank_buffers(p->cp, (size_t)p->hp_rows * p->slice_bytes, 0);
    p->hp_out = rank_buffers(p->cp, (size_t)p->hp_rows * p->slice_bytes, POISON);
    p->cp_out = rank_buffers(p->cp, (size_t)p->cp_rows * p->row_bytes, POISON);
    memset(p->batch, PADDING_MARK, (size_t)p->hp_rows * p->row_bytes + 1);
    for (i = 0; i < p->n; i++) {
        const int64_t padded = p->cu_padded[i + 1] - p->cu_padded[i];
        for (row = 0; row < p->cu[i + 1] - p->cu[i]; row++) {
            unsigned char *g = p->batch + (size_t)(p->cu_padded[i] + row) * p->row_bytes;
            int32_t owner;
            int64_t local;
            for (b = 0; b < p->row_bytes; b++)
                g[b] = (unsigned char)dcp_rng_below(rng, PADDING_MARK);
            for (j = 0; j < p->cp; j++)
                memcpy(p->hp_want[j] + (size_t)(p->cu_padded[i] + row) * p->slice_bytes,
                       g + (size_t)j * p->slice_bytes, p->slice_bytes);
            brute_force_owner(padded, p->cp, row, &owner, &local);
            memcpy(p->cp_in[owner] + (size_t)(p->cu_padded[i] / p->cp + local) * p->row_bytes, g,
                   p->row_bytes);
        }
    }
}

static void pack_free(pack *p)
{
    free(p->batch);
    free_buffers(p->cp_in, p->cp), free_buffers(p->hp_want, p->cp);
    free_buffers(p->hp_out, p->cp), free_buffers(p->cp_out, p->cp);
}

/* cp_in with its padding rows 0: what hp2cp must give back. */
static unsigned char *cp_expected(const pack *p, int32_t r)
{
    const size_t bytes = (size_t)p->cp_rows * p->row_bytes;
    unsigned char *want = (unsigned char *)malloc(bytes + 1);
    int32_t i;
    int64_t row;
    memcpy(want, p->cp_in[r], bytes);
    for (i = 0; i < p->n; i++) {
        const int64_t padded = p->cu_padded[i + 1] - p->cu_padded[i];
        for (row = p->cu[i + 1] - p->cu[i]; row < padded; row++) {
            int32_t owner;
            int64_t local;
            brute_force_owner(padded, p->cp, row, &owner, &local);
            if (owner == r)
                memset(want + (size_t)(p->cu_padded[i] / p->cp + local) * p->row_bytes, 0,
                       p->row_bytes);
        }
    }
    return want;
}

static int hp_matches(const pack *p, unsigned char *const *hp)
{
    int32_t j;
    for (j = 0; j < p->cp; j++)
        if (memcmp(hp[j], p->hp_want[j], (size_t)p->hp_rows * p->slice_bytes) != 0) return 0;
    return 1;
}

static int cp_matches(const pack *p, unsigned char *const *cp)
{
    int32_t r, ok = 1;
    for (r = 0; r < p->cp && ok; r++) {
        unsigned char *want = cp_expected(p, r);
        ok = memcmp(cp[r], want, (size_t)p->cp_rows * p->row_bytes) == 0;
        free(want);
    }
    return ok;
}

/* One rank's segment list of one side, run on host memory (what dcp_cuda_a2a_copy does). */
static void run_side(const pack *p, const dcp_a2a_shape *s, dcp_a2a_side side,
                     dcp_a2a_direction direction, unsigned char *local, unsigned char *message,
                     int *ok)
{
    const int cp_side = side == DCP_A2A_CP_SIDE;
    int64_t count = 0;
    dcp_a2a_segment *seg;
    *ok &= dcp_a2a_segments(&p->layout, s->rank, p->channels, p->channel_bytes, side, NULL, 0,
                            &count, NULL) == DCP_OK;
    seg = (dcp_a2a_segment *)malloc((size_t)(count + 1) * sizeof *seg);
    *ok &= dcp_a2a_segments(&p->layout, s->rank, p->channels, p->channel_bytes, side, seg, count,
                            &count, NULL) == DCP_OK;
    *ok &= dcp_a2a_segments_copy(seg, count, cp_side ? s->cp_copies : s->hp_copies,
                                 s->slice_bytes, cp_side ? s->row_bytes : s->slice_bytes,
                                 direction, local, message, NULL) == DCP_OK;
    free(seg);
}

/* The group's all-to-all as dcp_nccl.h runs it, with memcpy for the transport: every rank
   packs its send side, message s -> j moves, every rank unpacks its receive side. */
static void simulate(const pack *p, int to_hp, unsigned char *const *cp_bufs,
                     unsigned char *const *hp_bufs, int *ok)
{
    dcp_a2a_shape *shapes = (dcp_a2a_shape *)calloc((size_t)p->cp, sizeof *shapes);
    int64_t *hp_offset = (int64_t *)calloc((size_t)p->cp + 1, sizeof(int64_t));
    unsigned char **cp_msg, **hp_msg;
    int32_t r, j;
    for (r = 0; r < p->cp; r++) {
        *ok &= dcp_a2a_shape_get(&p->layout, r, p->channels, p->channel_bytes, &shapes[r],
                                 NULL) == DCP_OK;
        hp_offset[r + 1] = hp_offset[r] + shapes[r].message_rows;
    }
    /* a rank's CP-side messages hold its valid rows: never more than its CP buffer */
    cp_msg = rank_buffers(p->cp, (size_t)p->cp_rows * p->row_bytes, POISON);
    hp_msg = rank_buffers(p->cp, shapes[0].hp_message_bytes, POISON);
    for (r = 0; r < p->cp; r++) /* pack the sending side */
        run_side(p, &shapes[r], to_hp ? DCP_A2A_CP_SIDE : DCP_A2A_HP_SIDE, DCP_A2A_PACK,
                 to_hp ? cp_bufs[r] : hp_bufs[r], to_hp ? cp_msg[r] : hp_msg[r], ok);
    for (r = 0; r < p->cp; r++) /* the transport: CP rank r <-> HP rank j */
        for (j = 0; j < p->cp; j++) {
            const size_t bytes = (size_t)shapes[r].message_rows * p->slice_bytes;
            unsigned char *at_cp = cp_msg[r] + (size_t)j * bytes;
            unsigned char *at_hp = hp_msg[j] + (size_t)hp_offset[r] * p->slice_bytes;
            if (to_hp) memcpy(at_hp, at_cp, bytes);
            else memcpy(at_cp, at_hp, bytes);
        }
    for (r = 0; r < p->cp; r++) /* unpack the receiving side */
        run_side(p, &shapes[r], to_hp ? DCP_A2A_HP_SIDE : DCP_A2A_CP_SIDE, DCP_A2A_UNPACK,
                 to_hp ? hp_bufs[r] : cp_bufs[r], to_hp ? hp_msg[r] : cp_msg[r], ok);
    free_buffers(cp_msg, p->cp), free_buffers(hp_msg, p->cp);
    free(shapes), free(hp_offset);
}

static const int32_t CP_SIZES[] = {1, 2, 4, 8, 16, 32, 64, 128};
static const size_t CHANNEL_BYTES[] = {1, 2, 3, 4, 8, 12, 16, 256};

/* cp2hp by the reference and by the segment lists: whole sequences in order, slice j,
   padding 0; hp2cp of it: the input back with padding 0. Every c, random packs. */
static void cp2hp_gives_whole_sequences_and_hp2cp_undoes_it(void)
{
    dcp_rng rng;
    size_t c, t, trial;
    seed_rng(&rng, HYBRID_SEED);
    for (c = 0; c < sizeof CP_SIZES / sizeof CP_SIZES[0]; c++)
        for (trial = 0; trial < 3; trial++) {
            const int32_t cp = CP_SIZES[c];
            pack p;
            int ok = 1;
            const int32_t channels = cp * (1 + (int32_t)dcp_rng_below(&rng, 3));
            t = (size_t)dcp_rng_below(&rng, sizeof CHANNEL_BYTES / sizeof CHANNEL_BYTES[0]);
            while (t > 0 && (size_t)channels * CHANNEL_BYTES[t] > MAX_ROW_BYTES) t--;
            pack_layout(&p, &rng, cp, 1 + (int32_t)dcp_rng_below(&rng, MAX_SEQUENCES), channels,
                        CHANNEL_BYTES[t]);
            pack_fill(&p, &rng);
            CHECK_EQ(dcp_a2a_cp2hp(&p.layout, p.channels, p.channel_bytes,
                                   (const void *const *)p.cp_in, (void *const *)p.hp_out, NULL),
                     DCP_OK);
            CHECK(hp_matches(&p, p.hp_out));
            CHECK_EQ(dcp_a2a_hp2cp(&p.layout, p.channels, p.channel_bytes,
                                   (const void *const *)p.hp_out, (void *const *)p.cp_out, NULL),
                     DCP_OK);
            CHECK(cp_matches(&p, p.cp_out));
            /* the same through the segment lists, on fresh poisoned outputs */
            free_buffers(p.hp_out, cp), free_buffers(p.cp_out, cp);
            p.hp_out = rank_buffers(cp, (size_t)p.hp_rows * p.slice_bytes, POISON);
            p.cp_out = rank_buffers(cp, (size_t)p.cp_rows * p.row_bytes, POISON);
            simulate(&p, 1, p.cp_in, p.hp_out, &ok);
            CHECK(hp_matches(&p, p.hp_out));
            simulate(&p, 0, p.cp_out, p.hp_out, &ok);
            CHECK(cp_matches(&p, p.cp_out));
            CHECK(ok);
            if (test_current_failures) {
                printf("  cp %d, %d sequences, %d channels of %zu bytes\n", (int)cp, (int)p.n,
                       (int)p.channels, p.channel_bytes);
                pack_free(&p);
                return;
            }
            pack_free(&p);
        }
}

/* The runs of the ranks of a group cover every valid position of every sequence exactly
   once, padding never; messages hold exactly the valid rows; packing the CP side of an input
   whose padding rows are marked puts no mark into any message. */
static void padding_rows_are_never_sent(void)
{
    dcp_rng rng;
    size_t c;
    seed_rng(&rng, HYBRID_SEED + 1);
    for (c = 0; c < sizeof CP_SIZES / sizeof CP_SIZES[0]; c++) {
        const int32_t cp = CP_SIZES[c];
        pack p;
        unsigned char *seen;
        int64_t total = 0, sent = 0, i;
        int32_t r;
        pack_layout(&p, &rng, cp, MAX_SEQUENCES, cp, 1);
        pack_fill(&p, &rng);
        seen = (unsigned char *)calloc((size_t)p.hp_rows + 1, 1);
        for (r = 0; r < cp; r++) {
            dcp_a2a_shape s;
            dcp_a2a_run *runs;
            dcp_a2a_segment *seg;
            unsigned char *message;
            int64_t count = 0, k, rows, expected_row = 0;
            CHECK_EQ(dcp_a2a_shape_get(&p.layout, r, p.channels, 1, &s, NULL), DCP_OK);
            CHECK_EQ(dcp_a2a_runs(&p.layout, r, NULL, 0, &count, NULL), DCP_OK);
            CHECK_EQ(count, s.runs);
            CHECK(count <= 2 * (int64_t)p.n);
            runs = (dcp_a2a_run *)malloc((size_t)(count + 1) * sizeof *runs);
            CHECK_EQ(dcp_a2a_runs(&p.layout, r, runs, count, &count, NULL), DCP_OK);
            for (k = 0; k < count; k++) {
                CHECK(runs[k].rows >= 1);
                CHECK_EQ(runs[k].message_row, expected_row);
                expected_row += runs[k].rows;
                for (rows = 0; rows < runs[k].rows; rows++) {
                    const int64_t hp_row = runs[k].hp_row + rows;
                    int32_t seq = 0, owner;
                    int64_t local;
                    while (p.cu_padded[seq + 1] <= hp_row) seq++;
                    CHECK(hp_row - p.cu_padded[seq] < p.cu[seq + 1] - p.cu[seq]); /* valid */
                    brute_force_owner(p.cu_padded[seq + 1] - p.cu_padded[seq], cp,
                                      hp_row - p.cu_padded[seq], &owner, &local);
                    CHECK_EQ(owner, r);
                    CHECK_EQ(runs[k].cp_row + rows, p.cu_padded[seq] / cp + local);
                    seen[hp_row]++;
                }
            }
            CHECK_EQ(expected_row, s.message_rows);
            CHECK_EQ(dcp_a2a_message_rows(&p.layout, r, &rows, NULL), DCP_OK);
            CHECK_EQ(rows, s.message_rows);
            sent += s.message_rows;
            seg = (dcp_a2a_segment *)malloc((size_t)(s.cp_segments + 1) * sizeof *seg);
            CHECK_EQ(dcp_a2a_segments(&p.layout, r, p.channels, 1, DCP_A2A_CP_SIDE, seg,
                                      s.cp_segments, &count, NULL),
                     DCP_OK);
            message = (unsigned char *)malloc(s.cp_message_bytes + 1);
            memset(message, 0, s.cp_message_bytes + 1);
            CHECK_EQ(dcp_a2a_segments_copy(seg, count, s.cp_copies, s.slice_bytes, s.row_bytes,
                                           DCP_A2A_PACK, p.cp_in[r], message, NULL),
                     DCP_OK);
            CHECK(memchr(message, PADDING_MARK, s.cp_message_bytes) == NULL);
            free(runs), free(seg), free(message);
        }
        for (i = 0; i < p.n; i++) total += p.cu[i + 1] - p.cu[i];
        CHECK_EQ(sent, total);
        for (i = 0; i < p.hp_rows; i++) {
            int32_t seq = 0;
            while (p.cu_padded[seq + 1] <= i) seq++;
            CHECK_EQ(seen[i], i - p.cu_padded[seq] < p.cu[seq + 1] - p.cu[seq] ? 1 : 0);
        }
        free(seen);
        pack_free(&p);
    }
}

/* cp 1: the HP layout is the CP layout (cp set to 1, the same arrays); cp2hp copies the
   valid rows and zeroes padding; every rank's lists are one copy per sequence. */
static void cp1_is_the_identity(void)
{
    dcp_rng rng;
    pack p;
    dcp_thd_layout hp = {0, NULL, NULL, 0};
    dcp_a2a_shape s;
    seed_rng(&rng, HYBRID_SEED + 2);
    pack_layout(&p, &rng, 1, MAX_SEQUENCES, 5, 3);
    pack_fill(&p, &rng);
    CHECK_EQ(dcp_a2a_hp_layout(&p.layout, &hp, NULL), DCP_OK);
    CHECK(hp.cu_seqlens == p.cu && hp.cu_seqlens_padded == p.cu_padded && hp.cp == 1);
    CHECK_EQ(dcp_a2a_shape_get(&p.layout, 0, 5, 3, &s, NULL), DCP_OK);
    CHECK_EQ(s.row_bytes, s.slice_bytes);
    CHECK_EQ(s.cp_rows, s.hp_rows);
    CHECK_EQ(s.message_rows, s.group_rows);
    CHECK_EQ(dcp_a2a_cp2hp(&p.layout, 5, 3, (const void *const *)p.cp_in,
                           (void *const *)p.hp_out, NULL),
             DCP_OK);
    CHECK(cp_matches(&p, p.hp_out)); /* the same bytes as the input, padding 0 */
    pack_free(&p);
}

static void errors_name_the_values(void)
{
    int32_t cu[] = {0, 5, 9}, cu_padded[] = {0, 8, 16}, bad_padded[] = {0, 8, 14};
    dcp_thd_layout layout = {2, cu, cu_padded, 4};
    dcp_thd_layout bad = {2, cu, bad_padded, 4};
    unsigned char buffer[64];
    void *bufs[4] = {buffer, buffer, buffer, NULL};
    dcp_a2a_segment seg[1];
    dcp_a2a_shape s;
    dcp_error e;
    int64_t count;
    CHECK_EQ(dcp_a2a_shape_get(&layout, 0, 6, 2, &s, &e), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(e.message, "channels 6");
    CHECK_CONTAINS(e.message, "cp 4");
    CHECK_EQ(dcp_a2a_shape_get(&layout, 0, 0, 2, &s, &e), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_a2a_shape_get(&layout, 0, 8, 0, &s, &e), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(e.message, "channel_bytes");
    CHECK_EQ(dcp_a2a_shape_get(&layout, 4, 8, 2, &s, &e), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(e.message, "rank");
    CHECK_EQ(dcp_a2a_shape_get(&layout, 0, 8, 2, NULL, &e), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_a2a_shape_get(&bad, 0, 8, 2, &s, &e), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(e.message, "not a multiple of 2 cp = 8");
    CHECK_EQ(dcp_a2a_shape_get(&layout, 0, 4, SIZE_MAX / 2, &s, &e), DCP_ERROR_OVERFLOW);
    CHECK_EQ(dcp_a2a_runs(&layout, 0, NULL, 0, NULL, &e), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_a2a_runs(&layout, -1, NULL, 0, &count, &e), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_a2a_runs(&layout, 0, (dcp_a2a_run *)seg, 0, &count, &e),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(e.message, "capacity 0");
    CHECK_EQ(dcp_a2a_segments(&layout, 0, 8, 1, DCP_A2A_HP_SIDE, seg, 1, &count, &e),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(e.message, "capacity 1");
    CHECK_EQ(dcp_a2a_segments(&layout, 0, 8, 1, (dcp_a2a_side)2, NULL, 0, &count, &e),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_a2a_segments(&layout, 0, 6, 1, DCP_A2A_CP_SIDE, NULL, 0, &count, &e),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(e.message, "channels 6");
    CHECK_EQ(dcp_a2a_segments_copy(seg, 1, 2, 4, 4, DCP_A2A_PACK, buffer, buffer, &e),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_a2a_segments_copy(seg, 1, 1, 8, 4, DCP_A2A_PACK, buffer, buffer, &e),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(e.message, "local_pitch 4");
    CHECK_EQ(dcp_a2a_segments_copy(seg, 1, 1, 4, 4, (dcp_a2a_direction)7, buffer, buffer, &e),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_a2a_cp2hp(&layout, 8, 1, (const void *const *)bufs, bufs, &e),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(e.message, "cp_buffers[3]");
    CHECK_EQ(dcp_a2a_hp2cp(&layout, 10, 1, (const void *const *)bufs, bufs, &e),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(e.message, "channels 10");
    CHECK_EQ(dcp_a2a_hp_layout(&bad, &layout, &e), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_a2a_hp_layout(&layout, NULL, &e), DCP_ERROR_INVALID_ARGUMENT);
}

/* conv1d (Gated DeltaNet's, width 4, SiLU) on each rank's HP buffer, with its slice of the
   weights, equals conv1d on the unsplit batch in that slice; and hp2cp of it equals the CP
   split of the unsplit result. The same float operations per channel: equal to the bit. */
#define CONV_WIDTH 4
static void conv1d_after_cp2hp_equals_unsplit(void)
{
    dcp_rng rng;
    size_t c;
    seed_rng(&rng, HYBRID_SEED + 3);
    for (c = 0; c < sizeof CP_SIZES / sizeof CP_SIZES[0] && CP_SIZES[c] <= 64; c++) {
        const int32_t cp = CP_SIZES[c], channels = cp * 2;
        const int32_t slice = channels / cp;
        dcp_conv1d_params whole, part;
        dcp_thd_layout unsplit, hp_layout;
        pack p;
        float *x, *y, *weight, *bias, *w_part, *b_part;
        unsigned char **y_hp, **y_cp;
        int64_t i, row;
        int32_t j, ch, k;
        pack_layout(&p, &rng, cp, 1 + (int32_t)dcp_rng_below(&rng, MAX_SEQUENCES), channels,
                    sizeof(float));
        pack_fill(&p, &rng);
        x = (float *)p.batch; /* random bytes make NaNs and infinities: refill with normals */
        for (i = 0; i < p.hp_rows * channels; i++) x[i] = (float)dcp_rng_normal(&rng);
        /* re-split the float batch: pack_fill's split was of the old bytes */
        free_buffers(p.cp_in, cp), free_buffers(p.hp_want, cp);
        p.cp_in = rank_buffers(cp, (size_t)p.cp_rows * p.row_bytes, 0);
        for (i = 0; i < p.n; i++)
            for (row = 0; row < p.cu[i + 1] - p.cu[i]; row++) {
                int32_t owner;
                int64_t local;
                brute_force_owner(p.cu_padded[i + 1] - p.cu_padded[i], cp, row, &owner, &local);
                memcpy(p.cp_in[owner] + (size_t)(p.cu_padded[i] / cp + local) * p.row_bytes,
                       p.batch + (size_t)(p.cu_padded[i] + row) * p.row_bytes, p.row_bytes);
            }
        p.hp_want = NULL;
        weight = (float *)malloc((size_t)channels * CONV_WIDTH * sizeof(float));
        bias = (float *)malloc((size_t)channels * sizeof(float));
        w_part = (float *)malloc((size_t)slice * CONV_WIDTH * sizeof(float));
        b_part = (float *)malloc((size_t)slice * sizeof(float));
        y = (float *)malloc((size_t)(p.hp_rows * channels + 1) * sizeof(float));
        for (i = 0; i < channels * CONV_WIDTH; i++) weight[i] = (float)dcp_rng_normal(&rng);
        for (i = 0; i < channels; i++) bias[i] = (float)dcp_rng_normal(&rng);
        memset(&whole, 0, sizeof whole);
        whole.channels = channels, whole.width = CONV_WIDTH, whole.silu = 1;
        part = whole, part.channels = slice;
        unsplit = p.layout, unsplit.cp = 1;
        CHECK_EQ(dcp_conv1d_forward(&whole, &unsplit, p.hp_rows, x, weight, bias, y, NULL),
                 DCP_OK);
        CHECK_EQ(dcp_a2a_cp2hp(&p.layout, channels, sizeof(float), (const void *const *)p.cp_in,
                               (void *const *)p.hp_out, NULL),
                 DCP_OK);
        CHECK_EQ(dcp_a2a_hp_layout(&p.layout, &hp_layout, NULL), DCP_OK);
        y_hp = rank_buffers(cp, (size_t)p.hp_rows * p.slice_bytes, POISON);
        y_cp = rank_buffers(cp, (size_t)p.cp_rows * p.row_bytes, POISON);
        for (j = 0; j < cp; j++) {
            const float *got;
            int64_t wrong = 0;
            memcpy(w_part, weight + (size_t)j * slice * CONV_WIDTH,
                   (size_t)slice * CONV_WIDTH * sizeof(float));
            memcpy(b_part, bias + (size_t)j * slice, (size_t)slice * sizeof(float));
            CHECK_EQ(dcp_conv1d_forward(&part, &hp_layout, p.hp_rows, (const float *)p.hp_out[j],
                                        w_part, b_part, (float *)y_hp[j], NULL),
                     DCP_OK);
            got = (const float *)y_hp[j];
            for (row = 0; row < p.hp_rows; row++)
                for (ch = 0; ch < slice; ch++)
                    wrong += memcmp(&got[row * slice + ch], &y[row * channels + j * slice + ch],
                                    sizeof(float)) != 0;
            CHECK_EQ(wrong, 0);
        }
        /* back to CP: the zigzag split of the unsplit output */
        CHECK_EQ(dcp_a2a_hp2cp(&p.layout, channels, sizeof(float), (const void *const *)y_hp,
                               (void *const *)y_cp, NULL),
                 DCP_OK);
        for (i = 0; i < p.n; i++)
            for (row = 0; row < p.cu_padded[i + 1] - p.cu_padded[i]; row++) {
                int32_t owner;
                int64_t local;
                brute_force_owner(p.cu_padded[i + 1] - p.cu_padded[i], cp, row, &owner, &local);
                for (k = 0; k < channels; k++) {
                    const float want = y[(p.cu_padded[i] + row) * channels + k];
                    const float got = ((const float *)y_cp[owner])
                        [(p.cu_padded[i] / cp + local) * channels + k];
                    if (memcmp(&want, &got, sizeof want) != 0) {
                        CHECK(memcmp(&want, &got, sizeof want) == 0);
                        row = p.cu_padded[i + 1], k = channels; /* one report per sequence */
                    }
                }
            }
        free_buffers(y_hp, cp), free_buffers(y_cp, cp);
        free(weight), free(bias), free(w_part), free(b_part), free(y);
        pack_free(&p);
    }
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"cp2hp_gives_whole_sequences_and_hp2cp_undoes_it",
         cp2hp_gives_whole_sequences_and_hp2cp_undoes_it},
        {"padding_rows_are_never_sent", padding_rows_are_never_sent},
        {"cp1_is_the_identity", cp1_is_the_identity},
        {"errors_name_the_values", errors_name_the_values},
        {"conv1d_after_cp2hp_equals_unsplit", conv1d_after_cp2hp_equals_unsplit},
    };
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
