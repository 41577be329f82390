/* calibrate_grid.h - the measurements bench/calibrate takes, host-only C99 (also C++ and
   nvcc), so that tests/test_calibrate.c fits synthetic times on exactly this design. Three
   families, chosen so that the three terms vary independently (a pack of T tokens made of
   documents of length L has sum L^2 = T L, so varying L at fixed T separates attention from
   tokens, and varying T separates tokens from the fixed costs):
   - single documents at cp 1, L = 256, 512, ..., 131072 (T = L);
   - packs of T = 16384, 65536, 131072 tokens of equal documents L < T at cp 1;
   - ring groups at cp 2, 4, 8 (calibrate_ring_packs): small packs of 4096 tokens, where the
     per-step cost is a visible share of the time, packs of 65536 tokens and one document of
     131072.
   A point's model terms are those of the whole group timed on one device, its cp ranks one
   after another: cp times dcp_cost_group_terms. */
#ifndef DCP_BENCH_CALIBRATE_GRID_H
#define DCP_BENCH_CALIBRATE_GRID_H

#define CALIBRATE_MIN_DOCUMENT 256
#define CALIBRATE_MAX_DOCUMENT 131072
#define CALIBRATE_MAX_CP 8
#define CALIBRATE_MAX_POINTS 64
/* Documents of one point: the longest pack over the shortest document. */
#define CALIBRATE_MAX_DOCUMENTS (CALIBRATE_MAX_DOCUMENT / CALIBRATE_MIN_DOCUMENT)

static const int64_t calibrate_pack_tokens[] = {16384, 65536, 131072};
static const int32_t calibrate_ring_sizes[] = {2, 4, 8};
/* {tokens, document length} of the ring packs */
static const int64_t calibrate_ring_packs[][2] = {{4096, 512},    {4096, 4096},  {65536, 1024},
                                                  {65536, 8192}, {65536, 65536}, {131072, 131072}};

/* `documents` documents of `document` tokens on a group of cp ranks. */
typedef struct calibrate_point {
    int64_t document;
    int32_t documents;
    int32_t cp;
} calibrate_point;

#define CALIBRATE_COUNT(array) ((int32_t)(sizeof(array) / sizeof((array)[0])))

static int32_t calibrate_add(calibrate_point *points, int32_t n, int64_t document,
                             int64_t tokens, int32_t cp, int64_t max_tokens)
{
    if (tokens > max_tokens || n >= CALIBRATE_MAX_POINTS) return n;
    points[n].document = document;
    points[n].documents = (int32_t)(tokens / document);
    points[n].cp = cp;
    return n + 1;
}

/* The grid's points whose tokens fit max_tokens, into points[CALIBRATE_MAX_POINTS]; returns
   their count. */
static int32_t calibrate_grid(int64_t max_tokens, calibrate_point *points)
{
    int32_t n = 0, p, c, d;
    int64_t l;
    for (l = CALIBRATE_MIN_DOCUMENT; l <= CALIBRATE_MAX_DOCUMENT; l *= 2)
        n = calibrate_add(points, n, l, l, 1, max_tokens);
    for (p = 0; p < CALIBRATE_COUNT(calibrate_pack_tokens); p++)
        for (l = CALIBRATE_MIN_DOCUMENT; l < calibrate_pack_tokens[p]; l *= 2)
            n = calibrate_add(points, n, l, calibrate_pack_tokens[p], 1, max_tokens);
    for (c = 0; c < CALIBRATE_COUNT(calibrate_ring_sizes); c++)
        for (d = 0; d < CALIBRATE_COUNT(calibrate_ring_packs); d++)
            n = calibrate_add(points, n, calibrate_ring_packs[d][1], calibrate_ring_packs[d][0],
                              calibrate_ring_sizes[c], max_tokens);
    return n;
}

/* The padding rules the points are measured with: the library's defaults on a pool of
   CALIBRATE_MAX_CP ranks holding the whole point per rank. */
static dcp_config calibrate_config(void)
{
    dcp_config config = dcp_config_init();
    config.ranks = CALIBRATE_MAX_CP;
    config.max_tokens_per_rank = CALIBRATE_MAX_DOCUMENT;
    return config;
}

/* The model terms of point p timed whole (cp ranks one after another). */
static dcp_status calibrate_point_terms(const calibrate_point *p, dcp_cost_measurement *terms,
                                        dcp_error *error)
{
    int64_t lengths[CALIBRATE_MAX_DOCUMENTS]; /* 4 KB */
    dcp_config config = calibrate_config();
    int32_t i;
    dcp_status status;
    if (p->documents < 1 || p->documents > CALIBRATE_MAX_DOCUMENTS)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "documents %d outside [1, %d]",
                             (int)p->documents, CALIBRATE_MAX_DOCUMENTS);
    for (i = 0; i < p->documents; i++) lengths[i] = p->document;
    status = dcp_cost_group_terms(&config, lengths, p->documents, p->cp, terms, error);
    if (status != DCP_OK) return status;
    terms->attn_units *= p->cp;
    terms->linear_units *= p->cp;
    terms->ring_steps *= p->cp;
    return DCP_OK;
}

#endif
