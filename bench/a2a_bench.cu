/* bench/a2a_bench.cu - the head-parallel all-to-all of dcp_nccl.h on N processes (one per
   rank; tests/multirank.sh starts them on one GPU, a real job one per GPU).

   Environment: RANK, WORLD_SIZE, LOCAL_RANK (as torchrun sets them); argv[1] is a file path
   through which rank 0 hands out the NCCL id.
   - DCP_A2A_CHECK=1: for every group size c = 2, 4, ..., WORLD_SIZE (static groups of c
     under dcp_nccl_override_begin), random packs of sequences with padding, bf16-sized
     channels: dcp_nccl_a2a_cp2hp must equal dcp_a2a_cp2hp of the whole group (rebuilt on
     every rank from the same seed) byte for byte, and hp2cp must give the input back with
     padding rows 0. Prints "rank R: a2a check ok" and exits 0, or names the mismatch and
     exits 1.
   - otherwise the bench, rank 0 printing a table per c: the bytes one rank sends, the median
     time of cp2hp and hp2cp (pack, the grouped round, unpack), and of a plain grouped
     ncclSend/ncclRecv all-to-all of exactly the same per-peer bytes between contiguous
     buffers (the baseline: what the transport alone costs), in the same run; GB/s and the
     ratio ours / baseline. DCP_A2A_TOKENS (default 16384) valid tokens per rank, in sequences
     of DCP_A2A_SEQUENCE (default 4096) tokens; DCP_A2A_CHANNELS (default 32) channels of
     DCP_A2A_CHANNEL_BYTES (default 256: a head of 128 bf16); DCP_A2A_REPEAT (default 20). */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#define DCP_NCCL_IMPLEMENTATION
#include "../dcp_nccl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK_SEED 777
#define CHECK_SEQUENCES 7
#define MAX_SEQUENCES 64
#define CHECK_CHANNELS_PER_RANK 2
#define CHECK_CHANNEL_BYTES 2 /* a bf16 element: 2-byte vectors when the slice is odd */
#define WARMUP 3
#define MAX_REPEAT 101

static int g_rank;

static void die(const char *what, const char *why)
{
    fprintf(stderr, "rank %d: %s: %s\n", g_rank, what, why);
    exit(1);
}

/* The checks below end the process through die(). */
#include "../examples/multiprocess.h"

#define TRY(call)                                                                              \
    do {                                                                                       \
        dcp_error try_error_;                                                                  \
        dcp_error *err = &try_error_;                                                          \
        if ((call) != DCP_OK) die(#call, try_error_.message);                                  \
    } while (0)

/* The pool's NCCL id through the file at path (examples/nccl_id_file.h). */
static ncclUniqueId exchange_id(const char *path, int rank)
{
    ncclUniqueId id;
    const char *why = "";
    if (!nccl_id_file_exchange(path, rank, &id, &why)) die(why, path);
    return id;
}

/* The layout of one group: n <= MAX_SEQUENCES sequences of the given lengths, padded to a
   multiple of 2 cp, every third one by 2 cp rows more (chunks with no valid row). */
typedef struct group_layout {
    int32_t cu[MAX_SEQUENCES + 1], cu_padded[MAX_SEQUENCES + 1];
    dcp_thd_layout layout;
} group_layout;

static void layout_build(group_layout *g, const int64_t *lengths, int32_t n, int32_t cp)
{
    const int64_t multiple = 2 * (int64_t)cp;
    int32_t i;
    g->cu[0] = g->cu_padded[0] = 0;
    for (i = 0; i < n; i++) {
        const int64_t padded =
            (lengths[i] + multiple - 1) / multiple * multiple + (i % 3 == 2 ? multiple : 0);
        g->cu[i + 1] = (int32_t)(g->cu[i] + lengths[i]);
        g->cu_padded[i + 1] = (int32_t)(g->cu_padded[i] + padded);
    }
    g->layout.num_sequences = n;
    g->layout.cu_seqlens = g->cu;
    g->layout.cu_seqlens_padded = g->cu_padded;
    g->layout.cp = cp;
}

/* Workspaces, buffers and the prepared all-to-all of this rank for a layout. */
typedef struct a2a_run {
    dcp_a2a_shape shape;
    dcp_nccl_a2a a2a;
    void *device_ws, *host_ws, *cp_buf, *hp_buf, *cp_back;
} a2a_run;

static void a2a_open(a2a_run *r, dcp_nccl_set *set, const dcp_nccl_binding *b,
                     const dcp_thd_layout *layout, int32_t channels, size_t channel_bytes,
                     cudaStream_t stream)
{
    size_t device_bytes = 0, host_bytes = 0;
    TRY(dcp_a2a_shape_get(layout, b->rank, channels, channel_bytes, &r->shape, err));
    TRY(dcp_nccl_a2a_workspace_size(layout, b->rank, channels, channel_bytes, &device_bytes,
                                    &host_bytes, err));
    CUDA(cudaMalloc(&r->device_ws, device_bytes + 1));
    r->host_ws = malloc(host_bytes + 8);
    CUDA(cudaMalloc(&r->cp_buf, (size_t)r->shape.cp_rows * r->shape.row_bytes + 1));
    CUDA(cudaMalloc(&r->cp_back, (size_t)r->shape.cp_rows * r->shape.row_bytes + 1));
    CUDA(cudaMalloc(&r->hp_buf, (size_t)r->shape.hp_rows * r->shape.slice_bytes + 1));
    CUDA(cudaMemset(r->cp_back, 0xFF, (size_t)r->shape.cp_rows * r->shape.row_bytes));
    CUDA(cudaMemset(r->hp_buf, 0xFF, (size_t)r->shape.hp_rows * r->shape.slice_bytes));
    TRY(dcp_nccl_a2a_prepare(set, b, layout, channels, channel_bytes, r->device_ws, device_bytes,
                             r->host_ws, host_bytes, &r->a2a, stream, err));
}

static void a2a_close(a2a_run *r)
{
    CUDA(cudaFree(r->device_ws));
    CUDA(cudaFree(r->cp_buf));
    CUDA(cudaFree(r->cp_back));
    CUDA(cudaFree(r->hp_buf));
    free(r->host_ws);
}

/* ------------------------------------------------------------------------------- check */

/* Every member's CP buffer of the group, from the same seed on every rank: random bytes on
   valid rows, 0 on padding (the THD convention). */
static unsigned char **group_inputs(const dcp_thd_layout *l, int32_t channels, uint64_t seed)
{
    const size_t row_bytes = (size_t)channels * CHECK_CHANNEL_BYTES;
    const int64_t rows = l->cu_seqlens_padded[l->num_sequences] / l->cp;
    unsigned char **cp = (unsigned char **)malloc((size_t)l->cp * sizeof *cp);
    dcp_rng rng;
    int32_t m, i;
    int64_t local;
    size_t b;
    dcp_rng_seed(&rng, seed);
    for (m = 0; m < l->cp; m++) {
        cp[m] = (unsigned char *)calloc((size_t)rows * row_bytes + 1, 1);
        for (i = 0; i < l->num_sequences; i++) {
            const int64_t padded = l->cu_seqlens_padded[i + 1] - l->cu_seqlens_padded[i];
            for (local = 0; local < padded / l->cp; local++)
                if (dcp_zigzag_position(padded, l->cp, m, local) <
                    l->cu_seqlens[i + 1] - l->cu_seqlens[i])
                    for (b = 0; b < row_bytes; b++)
                        cp[m][(size_t)(l->cu_seqlens_padded[i] / l->cp + local) * row_bytes + b] =
                            (unsigned char)dcp_rng_below(&rng, 256);
        }
    }
    return cp;
}

static int check_group_size(dcp_nccl_set *set, int32_t cp, cudaStream_t stream)
{
    dcp_nccl_binding b;
    dcp_comm_scope scope;
    group_layout g;
    a2a_run r;
    dcp_rng rng;
    int64_t lengths[CHECK_SEQUENCES];
    unsigned char **cp_in, **hp_want, *got;
    const int32_t channels = CHECK_CHANNELS_PER_RANK * cp; /* slices of 2 bf16: 4-byte vectors */
    int32_t i, m, ok = 1;
    memset(&scope, 0, sizeof scope);
    TRY(dcp_nccl_override_begin(set, cp, &scope, &b, err));
    if (b.idle) {
        TRY(dcp_nccl_override_end(set, &scope, err));
        return 1;
    }
    dcp_rng_seed(&rng, CHECK_SEED + (uint64_t)cp * 1000 + (uint64_t)b.first_rank);
    for (i = 0; i < CHECK_SEQUENCES; i++) /* 0 to a few chunks: ranks with no valid row too */
        lengths[i] = (int64_t)dcp_rng_below(&rng, (uint64_t)(6 * cp + 40));
    layout_build(&g, lengths, CHECK_SEQUENCES, cp);
    cp_in = group_inputs(&g.layout, channels, dcp_rng_next(&rng));
    hp_want = (unsigned char **)malloc((size_t)cp * sizeof *hp_want);
    a2a_open(&r, set, &b, &g.layout, channels, CHECK_CHANNEL_BYTES, stream);
    for (m = 0; m < cp; m++)
        hp_want[m] = (unsigned char *)malloc((size_t)r.shape.hp_rows * r.shape.slice_bytes + 1);
    TRY(dcp_a2a_cp2hp(&g.layout, channels, CHECK_CHANNEL_BYTES, (const void *const *)cp_in,
                      (void *const *)hp_want, err));
    CUDA(cudaMemcpy(r.cp_buf, cp_in[b.rank], (size_t)r.shape.cp_rows * r.shape.row_bytes,
                    cudaMemcpyHostToDevice));
    TRY(dcp_nccl_a2a_cp2hp(set, &r.a2a, r.cp_buf, r.hp_buf, stream, err));
    TRY(dcp_nccl_a2a_hp2cp(set, &r.a2a, r.hp_buf, r.cp_back, stream, err));
    TRY(dcp_nccl_set_wait(set, stream, err));
    got = (unsigned char *)malloc((size_t)r.shape.hp_rows * r.shape.slice_bytes +
                                  (size_t)r.shape.cp_rows * r.shape.row_bytes + 1);
    CUDA(cudaMemcpy(got, r.hp_buf, (size_t)r.shape.hp_rows * r.shape.slice_bytes,
                    cudaMemcpyDeviceToHost));
    if (memcmp(got, hp_want[b.rank], (size_t)r.shape.hp_rows * r.shape.slice_bytes) != 0) {
        fprintf(stderr, "rank %d: cp2hp at cp %d differs from dcp_a2a_cp2hp\n", g_rank, cp);
        ok = 0;
    }
    CUDA(cudaMemcpy(got, r.cp_back, (size_t)r.shape.cp_rows * r.shape.row_bytes,
                    cudaMemcpyDeviceToHost));
    if (memcmp(got, cp_in[b.rank], (size_t)r.shape.cp_rows * r.shape.row_bytes) != 0) {
        fprintf(stderr, "rank %d: hp2cp at cp %d does not give the input back\n", g_rank, cp);
        ok = 0;
    }
    TRY(dcp_nccl_override_end(set, &scope, err));
    a2a_close(&r);
    for (m = 0; m < cp; m++) free(cp_in[m]), free(hp_want[m]);
    free(cp_in), free(hp_want), free(got);
    return ok;
}

/* ------------------------------------------------------------------------------- bench */

typedef struct plain_round {
    ncclComm_t comm;    /* the set's communicator */
    int32_t first_rank; /* the group's member 0 there */
    int32_t cp;
    size_t mine;                 /* bytes to every peer */
    const int64_t *offsets;      /* rows of every peer's message, as the all-to-all's */
    size_t slice_bytes;
    unsigned char *send, *recv;
} plain_round;

static void plain_all_to_all(const plain_round *p, cudaStream_t stream)
{
    int32_t j;
    NCCL(ncclGroupStart());
    for (j = 0; j < p->cp; j++) {
        const size_t theirs = (size_t)(p->offsets[j + 1] - p->offsets[j]) * p->slice_bytes;
        if (p->mine > 0) NCCL(ncclSend(p->send + (size_t)j * p->mine, p->mine, ncclUint8,
                                       p->first_rank + j, p->comm, stream));
        if (theirs > 0) NCCL(ncclRecv(p->recv + (size_t)p->offsets[j] * p->slice_bytes, theirs,
                                      ncclUint8, p->first_rank + j, p->comm, stream));
    }
    NCCL(ncclGroupEnd());
}

static int compare_floats(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef enum { TIME_CP2HP, TIME_HP2CP, TIME_PLAIN } timed_kind;

/* Median ms of `repeat` runs (after WARMUP), each between two events on the stream. */
static float time_median(dcp_nccl_set *set, a2a_run *r, const plain_round *p, timed_kind kind,
                         int repeat, cudaStream_t stream)
{
    float ms[MAX_REPEAT];
    cudaEvent_t start, stop;
    int i;
    CUDA(cudaEventCreate(&start));
    CUDA(cudaEventCreate(&stop));
    for (i = -WARMUP; i < repeat; i++) {
        CUDA(cudaEventRecord(start, stream));
        if (kind == TIME_CP2HP) TRY(dcp_nccl_a2a_cp2hp(set, &r->a2a, r->cp_buf, r->hp_buf, stream, err));
        else if (kind == TIME_HP2CP)
            TRY(dcp_nccl_a2a_hp2cp(set, &r->a2a, r->hp_buf, r->cp_back, stream, err));
        else plain_all_to_all(p, stream);
        CUDA(cudaEventRecord(stop, stream));
        TRY(dcp_nccl_set_wait(set, stream, err));
        if (i >= 0) CUDA(cudaEventElapsedTime(&ms[i], start, stop));
    }
    CUDA(cudaEventDestroy(start));
    CUDA(cudaEventDestroy(stop));
    qsort(ms, (size_t)repeat, sizeof ms[0], compare_floats);
    return ms[repeat / 2];
}

static void bench_group_size(dcp_nccl_set *set, int32_t cp, cudaStream_t stream)
{
    const int64_t tokens = env_int("DCP_A2A_TOKENS", 16384);
    const int64_t sequence = env_int("DCP_A2A_SEQUENCE", 4096);
    const int32_t channels = env_int("DCP_A2A_CHANNELS", 32);
    const size_t channel_bytes = (size_t)env_int("DCP_A2A_CHANNEL_BYTES", 256);
    int repeat = env_int("DCP_A2A_REPEAT", 20);
    dcp_nccl_binding b;
    dcp_comm_scope scope;
    group_layout g;
    a2a_run r;
    plain_round p;
    int64_t lengths[MAX_SEQUENCES], left = tokens * cp;
    int32_t n = 0;
    float cp2hp, hp2cp, plain;
    double gb;
    if (repeat < 1 || repeat > MAX_REPEAT) repeat = 20;
    memset(&scope, 0, sizeof scope);
    TRY(dcp_nccl_override_begin(set, cp, &scope, &b, err));
    if (b.idle) {
        TRY(dcp_nccl_override_end(set, &scope, err));
        return;
    }
    while (left > 0 && n < MAX_SEQUENCES) { /* the group's tokens in whole sequences */
        lengths[n] = left < sequence ? left : sequence - 1 - n % 7; /* some padding each */
        left -= lengths[n++];
    }
    layout_build(&g, lengths, n, cp);
    a2a_open(&r, set, &b, &g.layout, channels, channel_bytes, stream);
    CUDA(cudaMemset(r.cp_buf, 1, (size_t)r.shape.cp_rows * r.shape.row_bytes));
    p.comm = set->comm, p.first_rank = r.a2a.first_rank, p.cp = cp;
    p.offsets = r.a2a.message_offsets;
    p.slice_bytes = r.shape.slice_bytes;
    p.mine = (size_t)r.shape.message_rows * r.shape.slice_bytes;
    CUDA(cudaMalloc(&p.send, r.shape.cp_message_bytes + 1));
    CUDA(cudaMalloc(&p.recv, r.shape.hp_message_bytes + 1));
    cp2hp = time_median(set, &r, &p, TIME_CP2HP, repeat, stream);
    hp2cp = time_median(set, &r, &p, TIME_HP2CP, repeat, stream);
    plain = time_median(set, &r, &p, TIME_PLAIN, repeat, stream);
    gb = (double)r.shape.cp_message_bytes / 1e9; /* one rank's sends, its own slice included */
    if (g_rank == 0)
        printf("%4d %12.1f %10.3f %8.2f %10.3f %8.2f %10.3f %8.2f %8.2f\n", (int)cp,
               gb * 1e3, cp2hp, gb / (cp2hp * 1e-3), hp2cp, gb / (hp2cp * 1e-3), plain,
               gb / (plain * 1e-3), cp2hp / plain);
    TRY(dcp_nccl_override_end(set, &scope, err));
    CUDA(cudaFree(p.send));
    CUDA(cudaFree(p.recv));
    a2a_close(&r);
}

int main(int argc, char **argv)
{
    const int rank = env_int("RANK", 0), ranks = env_int("WORLD_SIZE", 1);
    const int local_rank = env_int("LOCAL_RANK", 0);
    const char *id_path = argc > 1 ? argv[1] : "/tmp/dcp_a2a_nccl_id";
    const int check = env_int("DCP_A2A_CHECK", 0);
    ncclUniqueId id;
    ncclComm_t pool;
    dcp_nccl_options options;
    dcp_nccl_set *set = NULL;
    cudaStream_t stream;
    int devices = 0, ok = 1;
    int32_t cp;
    g_rank = rank;
    if (rank < 0 || rank >= ranks) die("RANK and WORLD_SIZE", "need 0 <= RANK < WORLD_SIZE");
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("no CUDA device: skipped\n");
        return 0;
    }
    CUDA(cudaSetDevice(local_rank % devices));
    CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    id = exchange_id(id_path, rank);
    NCCL(ncclCommInitRank(&pool, ranks, id, rank));
    if (rank == 0) unlink(id_path);
    memset(&options, 0, sizeof options);
    TRY(dcp_nccl_set_create(pool, &options, &set, err));
    if (!check && rank == 0)
        printf("head-parallel all-to-all, %d ranks: MB one rank sends, ms (median), GB/s\n"
               "  cp           MB      cp2hp     GB/s      hp2cp     GB/s   plain a2a     GB/s  "
               "cp2hp/plain\n",
               ranks);
    for (cp = 2; cp <= set->max_cp; cp *= 2) {
        if (check) ok &= check_group_size(set, cp, stream);
        else bench_group_size(set, cp, stream);
    }
    TRY(dcp_nccl_set_destroy(set, err));
    NCCL(ncclCommDestroy(pool));
    CUDA(cudaStreamDestroy(stream));
    if (check) printf("rank %d: a2a check %s\n", rank, ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
