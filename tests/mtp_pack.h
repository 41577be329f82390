/* mtp_pack.h - one CP group's random pack for the MTP roll's transport tests
   (tests/test_nccl_host.c, tests/test_nccl_gpu.cu): MTP_PACK_SEQUENCES sequences whose padded
   lengths are multiples of 2 cp (some all valid, some with whole chunks of padding), random
   bytes on every local row of every rank, and the CPU reference's roll of them. Drawn from
   (seed, cp, group) alone, so every rank of a group builds the same pack. Include after dcp.h. */
#ifndef DCP_TESTS_MTP_PACK_H
#define DCP_TESTS_MTP_PACK_H
#include <stdlib.h>
#include <string.h>

#define MTP_PACK_SEQUENCES 5
#define MTP_PACK_MAX_CP 64
#define MTP_PACK_CHUNKS 4 /* a valid length spans at most this many units of 2 cp */

typedef struct mtp_pack {
    dcp_thd_layout thd; /* host arrays below */
    int32_t cu[MTP_PACK_SEQUENCES + 1], cu_padded[MTP_PACK_SEQUENCES + 1];
    int64_t local_rows;
    int32_t max_seqlen_padded;
    size_t size;
    unsigned char *in[MTP_PACK_MAX_CP], *expected[MTP_PACK_MAX_CP]; /* rank buffers */
} mtp_pack;

/* 0 when the reference refused the pack (it never should). */
static int mtp_pack_make(mtp_pack *p, uint64_t seed, int32_t cp, int32_t group, size_t size)
{
    dcp_rng rng;
    int32_t i, r;
    int64_t b;
    memset(p, 0, sizeof *p);
    dcp_rng_seed(&rng, seed * 1000003u + (uint64_t)cp * 1009u + (uint64_t)group);
    for (i = 0; i < MTP_PACK_SEQUENCES; i++) {
        int64_t unit = cp > 1 ? 2 * (int64_t)cp : 1;
        int64_t valid = 1 + (int64_t)dcp_rng_below(&rng, (uint64_t)(unit * MTP_PACK_CHUNKS));
        int64_t padded = (valid + unit - 1) / unit * unit + unit * (int64_t)dcp_rng_below(&rng, 2);
        p->cu[i + 1] = p->cu[i] + (int32_t)valid;
        p->cu_padded[i + 1] = p->cu_padded[i] + (int32_t)padded;
        if (padded > p->max_seqlen_padded) p->max_seqlen_padded = (int32_t)padded;
    }
    p->thd.num_sequences = MTP_PACK_SEQUENCES;
    p->thd.cu_seqlens = p->cu, p->thd.cu_seqlens_padded = p->cu_padded;
    p->thd.cp = cp;
    p->local_rows = p->cu_padded[MTP_PACK_SEQUENCES] / cp;
    p->size = size;
    for (r = 0; r < cp; r++) {
        p->in[r] = (unsigned char *)malloc((size_t)p->local_rows * size + 1);
        p->expected[r] = (unsigned char *)malloc((size_t)p->local_rows * size + 1);
        for (b = 0; b < p->local_rows * (int64_t)size; b++)
            p->in[r][b] = (unsigned char)dcp_rng_below(&rng, 256);
    }
    return dcp_mtp_roll_reference(&p->thd, size, (const void *const *)p->in,
                                  (void *const *)p->expected, NULL) == DCP_OK;
}

static void mtp_pack_free(mtp_pack *p)
{
    int32_t r;
    for (r = 0; r < p->thd.cp; r++) free(p->in[r]), free(p->expected[r]);
}

#endif
