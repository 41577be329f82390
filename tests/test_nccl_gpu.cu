/* make test-gpu: every path of dcp_nccl.h on one rank and one GPU (NCCL refuses two ranks on
   one GPU; the multi-rank logic is tests/test_comm.c's, on simulated ranks). A set on a pool of
   one (its one communicator: the pool split in one piece), the switch and the evaluation
   override, a reroute to itself, a ring of one against the CPU reference, plan and view
   broadcasts through a small staging
   buffer, the async-error poll, the abort path and the checking macro, the MTP roll's kernels
   (the ranks of a group on one device) and its cp 1 path, a pipeline stage's field set through
   the reroute. With WORLD_SIZE > 1 in the environment it is one process of tests/multirank.sh's
   multi-rank roll check instead (mtp_roll_multirank). Where no CUDA device exists every test
   says "no CUDA device: skipped" and the program exits 0.
   On the CPU execution model (build/test_nccl_gpu-cpu, DCP_CUDA_CPU) the devices and NCCL are
   the host transport's (tests/fake_nccl, strict as NCCL; each rank a device thread that runs
   the model's grids): the same tests on one rank, then the multi-rank roll with 2 and 4 ranks
   as threads (mtp_roll_ranks_as_threads); any violation the transport recorded fails the run. */
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A rank of a multi-rank fault run that stays alive but is absent: its next checked CUDA or
   NCCL call whose text starts with gpu_stall_call runs gpu_stall_ms late (never fails). */
static const char *gpu_stall_call;
static double gpu_stall_ms;
static void gpu_stall(const char *call, double ms) { gpu_stall_call = call, gpu_stall_ms = ms; }
static int gpu_stall_hook(const char *call)
{
    if (gpu_stall_call && strncmp(call, gpu_stall_call, strlen(gpu_stall_call)) == 0) {
        gpu_stall_call = NULL;
        usleep((useconds_t)(gpu_stall_ms * 1000.0));
    }
    return 0;
}
#define DCP_NCCL_FAULT_HOOK(call) gpu_stall_hook(call)

#define DCP_IMPLEMENTATION
#include "../dcp.h"
#define DCP_NCCL_IMPLEMENTATION
#include "../dcp_nccl.h"
#ifdef DCP_CUDA_CPU
#include "fake_nccl/fake_runtime.c"
#endif
#include "test.h"
#include "tolerance.h"
#include "mtp_pack.h"
#include "quarantine.h"
#include "../examples/multiprocess.h"

#define GPU_SEED 9009
#define SKIP_REASON "no CUDA device: skipped"

static int gpu_available(void)
{
    static int known = -1;
    int32_t devices = 0;
    dcp_error error;
    if (known >= 0) return known;
    if (dcp_cuda_device_count(&devices, &error) != DCP_OK) {
        fprintf(stderr, "%s\n", error.message);
        devices = 0;
    }
    known = devices > 0;
    if (known) cudaSetDevice(0);
    return known;
}

#define REQUIRE_GPU()                                                                          \
    do {                                                                                       \
        if (!gpu_available()) {                                                                \
            test_skip(SKIP_REASON);                                                            \
            return;                                                                            \
        }                                                                                      \
    } while (0)

/* A pool of one rank on device 0. */
static ncclComm_t pool_of_one(void)
{
    ncclComm_t comm = NULL;
    int device = 0;
    CHECK_EQ(ncclCommInitAll(&comm, 1, &device), ncclSuccess);
    return comm;
}

static dcp_plan *plan_of_one(int32_t count, int64_t max_tokens)
{
    dcp_config config;
    int64_t lengths[16];
    dcp_plan *plan = NULL;
    int32_t i;
    memset(&config, 0, sizeof config);
    config.ranks = 1;
    config.max_tokens_per_rank = max_tokens;
    config.pad_multiple_cp1 = 8;
    for (i = 0; i < count; i++) lengths[i] = 1 + (23 * i + 5) % (max_tokens - 8); /* fit cp 1 */
    CHECK_EQ(dcp_plan_create(&config, lengths, count, &plan, NULL), DCP_OK);
    return plan;
}

static dcp_status failing_body(dcp_nccl_set *set, const dcp_nccl_binding *binding, void *user,
                               dcp_error *error)
{
    (void)set;
    *(int32_t *)user = binding->cp;
    snprintf(error->message, sizeof error->message, "evaluation failed");
    error->status = DCP_ERROR_CUDA;
    return DCP_ERROR_CUDA;
}

static void set_switch_and_override(void)
{
    ncclComm_t pool;
    dcp_nccl_set *set = NULL;
    dcp_nccl_options options;
    dcp_nccl_binding b;
    dcp_comm_scope scope;
    dcp_error error;
    dcp_plan *plan;
    int32_t seen = 0;
    REQUIRE_GPU();
    pool = pool_of_one();
    memset(&options, 0, sizeof options);
    options.max_cp = 2; /* more than the pool: refused before any collective */
    CHECK_EQ(dcp_nccl_set_create(pool, &options, &set, &error), DCP_ERROR_INVALID_ARGUMENT);
    options.max_cp = 0;
    options.staging_bytes = 8;
    CHECK_EQ(dcp_nccl_set_create(pool, &options, &set, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK(set == NULL);
    CHECK_EQ(dcp_nccl_set_create(pool, NULL, &set, &error), DCP_OK);
    if (!set) return;
    CHECK_EQ(set->ranks, 1);
    CHECK_EQ(set->max_cp, 1);
    CHECK(set->comm != NULL); /* its one communicator: the pool of one in one piece */
    CHECK_EQ(set->num_group_comms, 0);
    CHECK_EQ(dcp_nccl_set_check(set, &error), DCP_OK);
    plan = plan_of_one(6, 64);
    CHECK_EQ(dcp_nccl_set_switch_plan(set, plan, 0, &b, &error), DCP_OK);
    CHECK_EQ(b.cp, 1);
    CHECK_EQ(b.first_rank, 0);
    CHECK_EQ(b.rank, 0);
    CHECK_EQ(dcp_nccl_set_switch_plan(set, plan, plan->num_microbatches, &b, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    memset(&scope, 0, sizeof scope);
    CHECK_EQ(dcp_nccl_override_begin(set, 2, &scope, &b, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_nccl_override_begin(set, 1, &scope, &b, &error), DCP_OK);
    CHECK_EQ(set->state.depth, 1);
    CHECK_EQ(dcp_nccl_override_end(set, &scope, &error), DCP_OK);
    CHECK_EQ(set->state.depth, 0);
    CHECK_EQ(dcp_nccl_override_run(set, 1, failing_body, &seen, &error), DCP_ERROR_CUDA);
    CHECK_CONTAINS(error.message, "evaluation failed");
    CHECK_EQ(seen, 1);
    CHECK_EQ(set->state.depth, 0); /* restored on the error path */
    {
        dcp_nccl_cp_guard guard(set, 1, &error);
        CHECK_EQ(guard.status(), DCP_OK);
        CHECK_EQ(set->state.depth, 1);
    }
    CHECK_EQ(set->state.depth, 0);
    dcp_plan_destroy(plan);
    CHECK_EQ(dcp_nccl_set_destroy(set, &error), DCP_OK);
    CHECK_EQ(ncclCommDestroy(pool), ncclSuccess);
}

static void token_record(int32_t s, int64_t position, size_t bytes, unsigned char *out)
{
    uint64_t x = ((uint64_t)(uint32_t)s << 32) ^ (uint64_t)position ^ UINT64_C(0x9E3779B97F4A7C15);
    size_t i;
    for (i = 0; i < bytes; i++) {
        x = x * UINT64_C(6364136223846793005) + 1442695040888963407u;
        out[i] = (unsigned char)(x >> 56) | 1;
    }
}

/* Every sample's token records (bytes each) in a device buffer of its own: samples[s]. */
static void upload_token_records(const dcp_plan *plan, size_t bytes, void **samples)
{
    int32_t s;
    for (s = 0; s < plan->num_samples; s++) {
        size_t n = (size_t)plan->sample_lengths[s] * bytes;
        unsigned char *host = (unsigned char *)malloc(n);
        int64_t p;
        for (p = 0; p < plan->sample_lengths[s]; p++)
            token_record(s, p, bytes, host + (size_t)p * bytes);
        CHECK_EQ(cudaMalloc(&samples[s], n), cudaSuccess);
        CHECK_EQ(cudaMemcpy(samples[s], host, n, cudaMemcpyHostToDevice), cudaSuccess);
        free(host);
    }
}

/* Rank 0's buffer of microbatch k as packing its view of the token records gives it. */
static void packed_view(const dcp_plan *plan, int32_t k, size_t bytes, unsigned char *want)
{
    dcp_rank_view *view = NULL;
    void *host_samples[16];
    int32_t s;
    for (s = 0; s < plan->num_samples; s++) {
        int64_t p;
        host_samples[s] = malloc((size_t)plan->sample_lengths[s] * bytes);
        for (p = 0; p < plan->sample_lengths[s]; p++)
            token_record(s, p, bytes, (unsigned char *)host_samples[s] + (size_t)p * bytes);
    }
    CHECK_EQ(dcp_rank_view_create(plan, 0, k, &view, NULL), DCP_OK);
    CHECK_EQ(dcp_rank_view_pack(view, (const void *const *)host_samples, bytes, want, NULL),
             DCP_OK);
    dcp_rank_view_destroy(view);
    for (s = 0; s < plan->num_samples; s++) free(host_samples[s]);
}

/* The documented bound of dcp_nccl_reroute_execute on both sides, for every microbatch the
   list writes: a buffer one row shorter than the last row written (dcp_reroute_rows_written,
   never hard-coded) is refused before anything is enqueued -- the buffer, stale bytes
   included, stays untouched, not even zeroed; a buffer of exactly that many rows ("at least"
   the rows written, not the plan's local rows) is accepted, its rows filled as packing the
   view would, and the plan's padding rows past it left alone. */
static void reroute_bound_both_sides(dcp_nccl_set *set, const dcp_plan *plan,
                                     const dcp_reroute *list,
                                     const dcp_nccl_reroute_buffers *buffers, int64_t *rows,
                                     void *const *micro, size_t bytes)
{
    const int32_t K = plan->num_microbatches;
    int64_t written[64];
    dcp_error error;
    int32_t k;
    CHECK_EQ(dcp_reroute_rows_written(list, K, written, &error), DCP_OK);
    for (k = 0; k < K; k++) {
        const int64_t plan_rows = rows[k];
        const size_t n = (size_t)plan_rows * bytes;
        unsigned char *before = (unsigned char *)malloc(n + 1);
        unsigned char *after = (unsigned char *)malloc(n + 1);
        unsigned char *want = (unsigned char *)malloc(n + 1);
        CHECK(written[k] <= plan_rows);
        if (written[k] == 0) {
            free(before), free(after), free(want);
            continue;
        }
        CHECK_EQ(cudaMemset(micro[k], 0xAB, n), cudaSuccess); /* stale bytes */
        CHECK_EQ(cudaMemcpy(before, micro[k], n, cudaMemcpyDeviceToHost), cudaSuccess);
        rows[k] = written[k] - 1; /* one row short of the last row written */
        CHECK_EQ(dcp_nccl_reroute_execute(set, list, buffers, 0, &error),
                 DCP_ERROR_INVALID_ARGUMENT);
        CHECK_CONTAINS(error.message, "which has");
        CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
        CHECK_EQ(cudaMemcpy(after, micro[k], n, cudaMemcpyDeviceToHost), cudaSuccess);
        CHECK(memcmp(before, after, n) == 0); /* nothing was enqueued */
        rows[k] = written[k]; /* exactly the rows written: enough */
        CHECK_EQ(dcp_nccl_reroute_execute(set, list, buffers, 0, &error), DCP_OK);
        CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
        CHECK_EQ(cudaMemcpy(after, micro[k], n, cudaMemcpyDeviceToHost), cudaSuccess);
        CHECK(memcmp(before + written[k] * bytes, after + written[k] * bytes,
                     n - (size_t)written[k] * bytes) == 0); /* past the buffer: untouched */
        packed_view(plan, k, bytes, want);
        CHECK(memcmp(after, want, (size_t)written[k] * bytes) == 0); /* the rows written */
        rows[k] = plan_rows;
        free(before), free(after), free(want);
    }
}

/* Every sample is held by rank 0 and planned on rank 0: the list is local copies only. */
static void reroute_to_itself(void)
{
    const size_t bytes = 6;
    ncclComm_t pool;
    dcp_nccl_set *set = NULL;
    dcp_plan *plan;
    dcp_reroute *list = NULL;
    dcp_nccl_reroute_buffers buffers;
    dcp_error error;
    int32_t s, k, holders[16];
    void *samples[16], *micro[64];
    int64_t rows[64];
    REQUIRE_GPU();
    pool = pool_of_one();
    CHECK_EQ(dcp_nccl_set_create(pool, NULL, &set, &error), DCP_OK);
    plan = plan_of_one(9, 48);
    if (!set || !plan) return;
    CHECK(plan->num_microbatches <= 64);
    upload_token_records(plan, bytes, samples);
    for (s = 0; s < plan->num_samples; s++) holders[s] = 0;
    for (k = 0; k < plan->num_microbatches; k++) {
        dcp_rank_group where;
        CHECK_EQ(dcp_plan_rank_group(plan, 0, k, &where, NULL), DCP_OK);
        rows[k] = where.local_rows;
        CHECK_EQ(cudaMalloc(&micro[k], (size_t)rows[k] * bytes + 1), cudaSuccess);
        CHECK_EQ(cudaMemset(micro[k], 0xAB, (size_t)rows[k] * bytes), cudaSuccess); /* stale */
    }
    CHECK_EQ(dcp_reroute_create(plan, holders, 0, &list, &error), DCP_OK);
    CHECK(list && list->send_tokens == 0 && list->recv_tokens == 0 && list->copy_tokens > 0);
    memset(&buffers, 0, sizeof buffers);
    buffers.element_size = bytes;
    buffers.num_samples = plan->num_samples;
    buffers.sample_data = samples;
    buffers.sample_rows = plan->sample_lengths;
    buffers.num_microbatches = plan->num_microbatches;
    buffers.microbatch_data = micro;
    buffers.microbatch_rows = rows;
    CHECK_EQ(dcp_nccl_reroute_execute(set, list, &buffers, 0, &error), DCP_OK);
    CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (k = 0; k < plan->num_microbatches; k++) {
        size_t n = (size_t)rows[k] * bytes;
        unsigned char *got = (unsigned char *)malloc(n + 1), *want = (unsigned char *)malloc(n + 1);
        packed_view(plan, k, bytes, want);
        CHECK_EQ(cudaMemcpy(got, micro[k], n, cudaMemcpyDeviceToHost), cudaSuccess);
        CHECK(memcmp(got, want, n) == 0); /* padding rows zero, tokens in place */
        free(got);
        free(want);
    }
    reroute_bound_both_sides(set, plan, list, &buffers, rows, micro, bytes);
    for (s = 0; s < plan->num_samples; s++) cudaFree(samples[s]);
    for (k = 0; k < plan->num_microbatches; k++) cudaFree(micro[k]);
    dcp_reroute_destroy(list);
    dcp_plan_destroy(plan);
    CHECK_EQ(dcp_nccl_set_destroy(set, &error), DCP_OK);
    CHECK_EQ(ncclCommDestroy(pool), ncclSuccess);
}

/* bfloat16 on the host: round to nearest even. */
static uint16_t to_bf16(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    bits += 0x7FFFu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

static float from_bf16(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* count random bf16 values on the device and, rounded the same way, on the host. */
static void *random_bf16(dcp_rng *rng, int64_t count, float *host)
{
    uint16_t *h = (uint16_t *)malloc((size_t)count * 2 + 2);
    void *device = NULL;
    int64_t i;
    for (i = 0; i < count; i++) {
        h[i] = to_bf16((float)(2.0 * dcp_rng_uniform(rng) - 1.0));
        host[i] = from_bf16(h[i]);
    }
    CHECK_EQ(cudaMalloc(&device, (size_t)count * 2 + 2), cudaSuccess);
    CHECK_EQ(cudaMemcpy(device, h, (size_t)count * 2, cudaMemcpyHostToDevice), cudaSuccess);
    free(h);
    return device;
}

static void download_bf16(const void *device, int64_t count, float *host)
{
    uint16_t *h = (uint16_t *)malloc((size_t)count * 2 + 2);
    int64_t i;
    CHECK_EQ(cudaMemcpy(h, device, (size_t)count * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    for (i = 0; i < count; i++) host[i] = from_bf16(h[i]);
    free(h);
}

/* A ring of one (cp 1: no communicator) against dcp_attention_forward/backward on the same
   bf16-rounded inputs. */
static void ring_of_one_matches_reference(int32_t causal, int32_t heads, int32_t kv_heads)
{
    static const int32_t cu[4] = {0, 37, 38, 101}, cu_padded[4] = {0, 40, 48, 112};
    const int32_t dim = 64;
    const int64_t rows = 112, q_values = rows * heads * dim, kv_values = rows * kv_heads * dim;
    ncclComm_t pool;
    dcp_nccl_set *set = NULL;
    dcp_nccl_binding b;
    dcp_attention_params params;
    dcp_thd_layout host_layout;
    dcp_cuda_layout layout;
    dcp_error error;
    dcp_rng rng;
    float *hq = (float *)malloc((size_t)q_values * 4), *hk = (float *)malloc((size_t)kv_values * 4);
    float *hv = (float *)malloc((size_t)kv_values * 4), *hdo = (float *)malloc((size_t)q_values * 4);
    float *ref_out = (float *)malloc((size_t)q_values * 4), *ref_lse = (float *)malloc((size_t)rows * heads * 4);
    float *got = (float *)malloc((size_t)q_values * 4), *got_lse = (float *)malloc((size_t)rows * heads * 4);
    float *ref_dq = (float *)calloc((size_t)q_values, 4), *ref_dk = (float *)calloc((size_t)kv_values, 4);
    float *ref_dv = (float *)calloc((size_t)kv_values, 4);
    void *q, *k, *v, *dout, *out = NULL, *dq = NULL, *dk = NULL, *dv = NULL, *scratch = NULL;
    float *lse = NULL;
    int32_t *d_cu = NULL, *d_cu_padded = NULL;
    size_t forward_bytes = 0, backward_bytes = 0;
    dcp_rng_seed(&rng, test_seed_for(GPU_SEED) + (uint64_t)(causal * 16 + heads * 4 + kv_heads));
    pool = pool_of_one();
    CHECK_EQ(dcp_nccl_set_create(pool, NULL, &set, &error), DCP_OK);
    if (!set) return;
    dcp_nccl_set_current(set, &b);
    memset(&params, 0, sizeof params);
    params.num_heads = heads;
    params.num_kv_heads = kv_heads;
    params.head_dim = dim;
    params.causal = causal;
    host_layout.num_sequences = 3;
    host_layout.cu_seqlens = cu;
    host_layout.cu_seqlens_padded = cu_padded;
    host_layout.cp = 1;
    CHECK_EQ(cudaMalloc((void **)&d_cu, sizeof cu), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&d_cu_padded, sizeof cu_padded), cudaSuccess);
    CHECK_EQ(cudaMemcpy(d_cu, cu, sizeof cu, cudaMemcpyHostToDevice), cudaSuccess);
    CHECK_EQ(cudaMemcpy(d_cu_padded, cu_padded, sizeof cu_padded, cudaMemcpyHostToDevice),
             cudaSuccess);
    layout.thd = host_layout;
    layout.thd.cu_seqlens = d_cu;
    layout.thd.cu_seqlens_padded = d_cu_padded;
    layout.local_rows = rows;
    layout.max_seqlen_padded = 64;
    q = random_bf16(&rng, q_values, hq);
    k = random_bf16(&rng, kv_values, hk);
    v = random_bf16(&rng, kv_values, hv);
    dout = random_bf16(&rng, q_values, hdo);
    CHECK_EQ(cudaMalloc(&out, (size_t)q_values * 2), cudaSuccess);
    CHECK_EQ(cudaMalloc((void **)&lse, (size_t)rows * heads * 4), cudaSuccess);
    CHECK_EQ(cudaMalloc(&dq, (size_t)q_values * 2), cudaSuccess);
    CHECK_EQ(cudaMalloc(&dk, (size_t)kv_values * 2), cudaSuccess);
    CHECK_EQ(cudaMalloc(&dv, (size_t)kv_values * 2), cudaSuccess);
    CHECK_EQ(dcp_nccl_ring_scratch_size(&params, &layout, DCP_DTYPE_BFLOAT16, DCP_RING_FORWARD,
                                        &forward_bytes, &error), DCP_OK);
    CHECK_EQ(dcp_nccl_ring_scratch_size(&params, &layout, DCP_DTYPE_BFLOAT16, DCP_RING_BACKWARD,
                                        &backward_bytes, &error), DCP_OK);
    CHECK(backward_bytes >= (size_t)(q_values + 2 * kv_values) * 4);
    CHECK_EQ(cudaMalloc(&scratch, backward_bytes > forward_bytes ? backward_bytes : forward_bytes),
             cudaSuccess);
    /* too little scratch is refused before anything runs */
    if (backward_bytes > 0)
        CHECK_EQ(dcp_nccl_ring_backward(set, &b, &params, &layout, DCP_DTYPE_BFLOAT16, q, k, v, out,
                                        dout, lse, dq, dk, dv, 1, scratch, backward_bytes - 1, 0,
                                        &error),
                 DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_nccl_ring_forward(set, &b, &params, &layout, DCP_DTYPE_BFLOAT16, q, k, v, out, lse,
                                   scratch, forward_bytes, 0, &error), DCP_OK);
    CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
    CHECK_EQ(dcp_attention_forward(&params, &host_layout, NULL, hq, hk, hv, ref_out, ref_lse,
                                   NULL), DCP_OK);
    download_bf16(out, q_values, got);
    CHECK_EQ(cudaMemcpy(got_lse, lse, (size_t)rows * heads * 4, cudaMemcpyDeviceToHost),
             cudaSuccess);
    CHECK(compare("ring of one out", got, ref_out, q_values, tolerance_of(DCP_DTYPE_BFLOAT16)));
    CHECK(compare("ring of one lse", got_lse, ref_lse, rows * heads, tolerance_lse()));
    /* backward from the GPU's own out and lse, the reference from the same values */
    CHECK_EQ(dcp_nccl_ring_backward(set, NULL, &params, &layout, DCP_DTYPE_BFLOAT16, q, k, v, out,
                                    dout, lse, dq, dk, dv, 1, scratch, backward_bytes, 0, &error),
             DCP_OK);
    CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
    CHECK_EQ(dcp_attention_backward(&params, &host_layout, NULL, hq, hk, hv, got, hdo, got_lse,
                                    ref_dq, ref_dk, ref_dv, NULL), DCP_OK);
    download_bf16(dq, q_values, got);
    CHECK(compare("ring of one dq", got, ref_dq, q_values, tolerance_of(DCP_DTYPE_BFLOAT16)));
    download_bf16(dk, kv_values, got);
    CHECK(compare("ring of one dk", got, ref_dk, kv_values, tolerance_of(DCP_DTYPE_BFLOAT16)));
    download_bf16(dv, kv_values, got);
    CHECK(compare("ring of one dv", got, ref_dv, kv_values, tolerance_of(DCP_DTYPE_BFLOAT16)));
    cudaFree(q), cudaFree(k), cudaFree(v), cudaFree(dout), cudaFree(out), cudaFree(lse);
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(scratch), cudaFree(d_cu);
    cudaFree(d_cu_padded);
    free(hq), free(hk), free(hv), free(hdo), free(ref_out), free(ref_lse), free(got);
    free(got_lse), free(ref_dq), free(ref_dk), free(ref_dv);
    CHECK_EQ(dcp_nccl_set_destroy(set, &error), DCP_OK);
    CHECK_EQ(ncclCommDestroy(pool), ncclSuccess);
}

static void ring_of_one_causal_gqa(void)
{
    REQUIRE_GPU();
    ring_of_one_matches_reference(1, 4, 2);
}

static void ring_of_one_full_mha(void)
{
    REQUIRE_GPU();
    ring_of_one_matches_reference(0, 2, 2);
}

/* Plan and view through the pool with a 64-byte staging buffer: many chunks. */
static void broadcast_plan_and_view(void)
{
    ncclComm_t pool;
    dcp_nccl_set *set = NULL;
    dcp_nccl_options options;
    dcp_plan *plan, *copy = NULL;
    dcp_rank_view *view = NULL, *view_copy = NULL;
    dcp_error error;
    unsigned char *a, *b;
    size_t size_a = 0, size_b = 0;
    void *raw = NULL;
    size_t raw_size = 0;
    REQUIRE_GPU();
    pool = pool_of_one();
    memset(&options, 0, sizeof options);
    options.staging_bytes = DCP_NCCL_MIN_STAGING_BYTES;
    CHECK_EQ(dcp_nccl_set_create(pool, &options, &set, &error), DCP_OK);
    plan = plan_of_one(12, 96);
    if (!set || !plan) return;
    CHECK_EQ(dcp_nccl_broadcast_plan(set, pool, 0, plan, &copy, 0, &error), DCP_OK);
    CHECK(copy != NULL);
    if (copy) {
        CHECK_EQ(dcp_plan_serialize(plan, NULL, 0, &size_a, NULL), DCP_OK);
        CHECK_EQ(dcp_plan_serialize(copy, NULL, 0, &size_b, NULL), DCP_OK);
        CHECK_EQ(size_a, size_b);
        a = (unsigned char *)malloc(size_a), b = (unsigned char *)malloc(size_b);
        CHECK_EQ(dcp_plan_serialize(plan, a, size_a, &size_a, NULL), DCP_OK);
        CHECK_EQ(dcp_plan_serialize(copy, b, size_b, &size_b, NULL), DCP_OK);
        CHECK(memcmp(a, b, size_a) == 0);
        free(a), free(b);
    }
    dcp_plan_destroy(copy);
    copy = NULL;
    CHECK_EQ(dcp_rank_view_create(plan, 0, 0, &view, NULL), DCP_OK);
    CHECK_EQ(dcp_nccl_broadcast_view(set, pool, 0, view, &view_copy, 0, &error), DCP_OK);
    CHECK(view_copy && view_copy->local_tokens == view->local_tokens &&
          view_copy->num_samples == view->num_samples);
    /* bytes that are no libdcp buffer are rejected by length on every rank */
    CHECK_EQ(dcp_nccl_broadcast_bytes(set, pool, 0, "tiny", 4, &raw, &raw_size, 0, &error),
             DCP_ERROR_CORRUPT_DATA);
    CHECK_CONTAINS(error.message, "metadata length 4");
    CHECK_EQ(dcp_nccl_broadcast_plan(set, pool, 1, plan, &copy, 0, &error),
             DCP_ERROR_INVALID_ARGUMENT); /* root outside the communicator */
    dcp_plan_destroy(copy);
    dcp_rank_view_destroy(view);
    dcp_rank_view_destroy(view_copy);
    dcp_plan_destroy(plan);
    CHECK_EQ(dcp_nccl_set_destroy(set, &error), DCP_OK);
    CHECK_EQ(ncclCommDestroy(pool), ncclSuccess);
}

static void async_poll_and_abort(void)
{
    ncclComm_t pool;
    dcp_nccl_set *set = NULL;
    dcp_nccl_binding b;
    dcp_comm_scope scope;
    dcp_error error;
    REQUIRE_GPU();
    pool = pool_of_one();
    CHECK_EQ(dcp_nccl_set_create(pool, NULL, &set, &error), DCP_OK);
    if (!set) return;
    CHECK_EQ(dcp_nccl_set_check(set, &error), DCP_OK);
    memset(&scope, 0, sizeof scope);
    CHECK_EQ(dcp_nccl_override_begin(set, 1, &scope, &b, &error), DCP_OK);
    CHECK_EQ(dcp_nccl_set_abort(set, 1, &error), DCP_OK); /* the pool too: it is gone after */
    CHECK(set->pool == NULL);
    CHECK_EQ(dcp_nccl_set_check(set, &error), DCP_ERROR_NCCL);
    CHECK_CONTAINS(error.message, "aborted");
    CHECK_EQ(dcp_nccl_set_switch_plan(set, NULL, 0, &b, &error), DCP_ERROR_NCCL);
    CHECK_EQ(dcp_nccl_override_end(set, &scope, &error), DCP_OK); /* still restores */
    CHECK_EQ(dcp_nccl_set_destroy(set, &error), DCP_OK);
}

/* A failing CUDA call comes back as DCP_ERROR_CUDA naming the call and its code. */
static void checking_macro_names_the_call(void)
{
    ncclComm_t pool;
    dcp_nccl_set *set = NULL;
    dcp_plan *plan;
    dcp_reroute *list = NULL;
    dcp_nccl_reroute_buffers buffers;
    dcp_error error;
    int32_t holders[4] = {0, 0, 0, 0}, k;
    void *samples[4], *micro[16];
    int64_t rows[16];
    REQUIRE_GPU();
    pool = pool_of_one();
    CHECK_EQ(dcp_nccl_set_create(pool, NULL, &set, &error), DCP_OK);
    plan = plan_of_one(4, 64);
    if (!set || !plan) return;
    CHECK_EQ(dcp_reroute_create(plan, holders, 0, &list, &error), DCP_OK);
    for (k = 0; k < 4; k++) samples[k] = (void *)(uintptr_t)0x10; /* not device memory */
    for (k = 0; k < plan->num_microbatches && k < 16; k++) {
        dcp_rank_group where;
        CHECK_EQ(dcp_plan_rank_group(plan, 0, k, &where, NULL), DCP_OK);
        rows[k] = where.local_rows;
        micro[k] = (void *)(uintptr_t)0x10;
    }
    memset(&buffers, 0, sizeof buffers);
    buffers.element_size = 4;
    buffers.num_samples = plan->num_samples;
    buffers.sample_data = samples;
    buffers.num_microbatches = plan->num_microbatches;
    buffers.microbatch_data = micro;
    buffers.microbatch_rows = rows;
    CHECK_EQ(dcp_nccl_reroute_execute(set, list, &buffers, 0, &error), DCP_ERROR_CUDA);
    CHECK_CONTAINS(error.message, "cudaMemsetAsync");
    CHECK_CONTAINS(error.message, "dcp_nccl.h:");
    /* a failure after the checks aborts the set; the pool too here, since options.config
       NULL leaves the set assuming the pool's abort flag is shared */
    CHECK(set->aborted && set->pool == NULL);
#ifdef DCP_CUDA_CPU /* the transport saw the set of host memory, and nothing else */
    {
        const char *text = "";
        CHECK_EQ(fake_violations(&text), 1);
        CHECK_CONTAINS(text, "cudaMemsetAsync of memory that is not the device's");
        fake_violations_clear();
    }
#endif
    dcp_reroute_destroy(list);
    dcp_plan_destroy(plan);
    CHECK_EQ(dcp_nccl_set_destroy(set, &error), DCP_OK);
}

/* ------------------------------------------------------------------ MTP roll (issue 20) */

#define MTP_GPU_SEED 2021
/* Element sizes of the roll: a loss mask byte, bf16, odd records, int32, int64 ids, ... */
static const size_t mtp_gpu_sizes[] = {1, 2, 3, 4, 8, 12, 16};

/* A pack's cu arrays on the device and its device layout. */
typedef struct mtp_device_layout {
    int32_t *cu, *cu_padded;
    dcp_cuda_layout layout;
} mtp_device_layout;

static int mtp_device_layout_make(const mtp_pack *p, mtp_device_layout *d)
{
    const size_t bytes = (MTP_PACK_SEQUENCES + 1) * sizeof(int32_t);
    memset(d, 0, sizeof *d);
    return cudaMalloc((void **)&d->cu, bytes) == cudaSuccess &&
           cudaMalloc((void **)&d->cu_padded, bytes) == cudaSuccess &&
           cudaMemcpy(d->cu, p->cu, bytes, cudaMemcpyHostToDevice) == cudaSuccess &&
           cudaMemcpy(d->cu_padded, p->cu_padded, bytes, cudaMemcpyHostToDevice) == cudaSuccess &&
           dcp_cuda_layout_init(&p->thd, d->cu, d->cu_padded, &d->layout, NULL) == DCP_OK;
}

static void mtp_device_layout_free(mtp_device_layout *d) { cudaFree(d->cu), cudaFree(d->cu_padded); }

/* The kernels against the CPU reference, the c ranks of a group on one device: every rank
   gathers, the boundaries travel by cudaMemcpy in the exchange layout (half 0 from rank r + 1,
   half 1 from rank r - 1), every rank shifts into a poisoned output. Pointers offset by one
   byte too, so every word width down to one byte runs. */
static void mtp_roll_kernels_match_reference(void)
{
    static const int32_t cps[] = {1, 2, 4, 8, 64};
    size_t c, z;
    int offset;
    REQUIRE_GPU();
    printf("  seed %d\n", MTP_GPU_SEED);
    for (c = 0; c < sizeof cps / sizeof cps[0]; c++)
        for (z = 0; z < sizeof mtp_gpu_sizes / sizeof mtp_gpu_sizes[0]; z++)
            for (offset = 0; offset <= 1; offset++) {
                const int32_t cp = cps[c];
                mtp_pack p;
                mtp_device_layout d;
                unsigned char *in[MTP_PACK_MAX_CP], *out[MTP_PACK_MAX_CP];
                unsigned char *sent[MTP_PACK_MAX_CP], *received[MTP_PACK_MAX_CP];
                size_t bytes, side, half;
                int32_t r;
                CHECK(mtp_pack_make(&p, MTP_GPU_SEED, cp, (int32_t)z, mtp_gpu_sizes[z]));
                CHECK(mtp_device_layout_make(&p, &d));
                bytes = (size_t)p.local_rows * p.size;
                side = DCP_MTP_ROLL_HALVES * MTP_PACK_SEQUENCES * p.size;
                half = side / DCP_MTP_ROLL_HALVES;
                for (r = 0; r < cp; r++) {
                    unsigned char *block[4];
                    int b;
                    for (b = 0; b < 4; b++)
                        CHECK_EQ(cudaMalloc((void **)&block[b], (b < 2 ? bytes : side) + 16),
                                 cudaSuccess);
                    in[r] = block[0] + offset, out[r] = block[1] + offset;
                    sent[r] = block[2] + offset, received[r] = block[3] + offset;
                    CHECK_EQ(cudaMemcpy(in[r], p.in[r], bytes, cudaMemcpyHostToDevice),
                             cudaSuccess);
                    CHECK_EQ(cudaMemset(out[r], 0x5A, bytes), cudaSuccess);
                    CHECK_EQ(dcp_cuda_mtp_roll_gather(&d.layout, r, p.size, in[r], sent[r], NULL,
                                                      NULL),
                             DCP_OK);
                }
                for (r = 0; r < cp && cp > 1; r++) {
                    if (r + 1 < cp)
                        CHECK_EQ(cudaMemcpy(received[r], sent[r + 1], half,
                                            cudaMemcpyDeviceToDevice),
                                 cudaSuccess);
                    if (r > 0)
                        CHECK_EQ(cudaMemcpy(received[r] + half, sent[r - 1] + half, half,
                                            cudaMemcpyDeviceToDevice),
                                 cudaSuccess);
                }
                for (r = 0; r < cp; r++) {
                    unsigned char *got = (unsigned char *)malloc(bytes + 1);
                    CHECK_EQ(dcp_cuda_mtp_roll_shift(&d.layout, r, p.size, in[r], received[r],
                                                     out[r], NULL, NULL),
                             DCP_OK);
                    CHECK_EQ(cudaMemcpy(got, out[r], bytes, cudaMemcpyDeviceToHost), cudaSuccess);
                    if (memcmp(got, p.expected[r], bytes) != 0) {
                        printf("  cp %d, %zu-byte elements, offset %d: rank %d differs\n",
                               (int)cp, p.size, offset, (int)r);
                        CHECK(0);
                    }
                    free(got);
                    cudaFree(in[r] - offset), cudaFree(out[r] - offset);
                    cudaFree(sent[r] - offset), cudaFree(received[r] - offset);
                }
                mtp_device_layout_free(&d);
                mtp_pack_free(&p);
            }
}

/* dcp_nccl_mtp_roll on a pool of one: cp 1, the shift alone, no scratch. */
static void mtp_roll_of_one(void)
{
    ncclComm_t pool;
    dcp_nccl_set *set = NULL;
    dcp_error error;
    mtp_pack p;
    mtp_device_layout d;
    void *in = NULL, *out = NULL;
    unsigned char *got;
    size_t bytes, scratch = 1;
    REQUIRE_GPU();
    pool = pool_of_one();
    CHECK_EQ(dcp_nccl_set_create(pool, NULL, &set, &error), DCP_OK);
    if (!set) return;
    CHECK(mtp_pack_make(&p, MTP_GPU_SEED + 1, 1, 0, 8));
    CHECK(mtp_device_layout_make(&p, &d));
    bytes = (size_t)p.local_rows * p.size;
    CHECK_EQ(dcp_nccl_mtp_roll_scratch_size(&d.layout, p.size, &scratch, &error), DCP_OK);
    CHECK_EQ(scratch, 0);
    CHECK_EQ(cudaMalloc(&in, bytes), cudaSuccess);
    CHECK_EQ(cudaMalloc(&out, bytes), cudaSuccess);
    CHECK_EQ(cudaMemcpy(in, p.in[0], bytes, cudaMemcpyHostToDevice), cudaSuccess);
    CHECK_EQ(dcp_nccl_mtp_roll(set, NULL, &d.layout, p.size, in, out, NULL, 0, 0, &error),
             DCP_OK);
    CHECK_EQ(dcp_nccl_set_wait(set, 0, &error), DCP_OK);
    got = (unsigned char *)malloc(bytes + 1);
    CHECK_EQ(cudaMemcpy(got, out, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    CHECK(memcmp(got, p.expected[0], bytes) == 0);
    free(got);
    cudaFree(in), cudaFree(out);
    mtp_device_layout_free(&d);
    mtp_pack_free(&p);
    CHECK_EQ(dcp_nccl_set_destroy(set, &error), DCP_OK);
    CHECK_EQ(ncclCommDestroy(pool), ncclSuccess);
}

/* Pipeline stages on one rank (every sample held and planned on rank 0: local copies): the
   middle stage moves nothing and leaves every buffer as it was; the last stage moves labels
   (int64) and the loss mask (float32), each equal to packing its view, and leaves the tokens'
   and position ids' buffers as they were. */
static void stage_fields_reroute_to_itself(void)
{
    static const size_t sizes[DCP_FIELD_COUNT] = {8, 8, 8, 4};
    const unsigned char stale = 0xAB;
    ncclComm_t pool;
    dcp_nccl_set *set = NULL;
    dcp_plan *plan;
    dcp_reroute *list = NULL;
    dcp_error error;
    int32_t s, k, f, stage, holders[16];
    void *samples[DCP_FIELD_COUNT][16], *micro[DCP_FIELD_COUNT][64];
    int64_t rows[64];
    REQUIRE_GPU();
    pool = pool_of_one();
    CHECK_EQ(dcp_nccl_set_create(pool, NULL, &set, &error), DCP_OK);
    plan = plan_of_one(9, 48);
    if (!set || !plan) return;
    CHECK(plan->num_microbatches <= 64);
    for (f = 0; f < DCP_FIELD_COUNT; f++) {
        upload_token_records(plan, sizes[f], samples[f]);
        for (k = 0; k < plan->num_microbatches; k++) {
            dcp_rank_group where;
            CHECK_EQ(dcp_plan_rank_group(plan, 0, k, &where, NULL), DCP_OK);
            rows[k] = where.local_rows;
            CHECK_EQ(cudaMalloc(&micro[f][k], (size_t)rows[k] * sizes[f] + 1), cudaSuccess);
            CHECK_EQ(cudaMemset(micro[f][k], stale, (size_t)rows[k] * sizes[f]), cudaSuccess);
        }
    }
    for (s = 0; s < plan->num_samples; s++) holders[s] = 0;
    CHECK_EQ(dcp_reroute_create(plan, holders, 0, &list, &error), DCP_OK);
    for (stage = 0; list && stage < 2; stage++) { /* the middle stage, then the last */
        dcp_field_set fields;
        dcp_nccl_reroute_buffers buffers;
        memset(&fields, 0, sizeof fields);
        fields.fields = dcp_stage_fields(0, stage == 1, 0);
        memcpy(fields.element_size, sizes, sizeof sizes);
        memset(&buffers, 0, sizeof buffers);
        buffers.num_samples = plan->num_samples;
        buffers.sample_rows = plan->sample_lengths;
        buffers.num_microbatches = plan->num_microbatches;
        buffers.microbatch_rows = rows;
        buffers.fields = &fields;
        for (f = 0; f < DCP_FIELD_COUNT; f++) {
            buffers.field_sample_data[f] = (const void *const *)samples[f];
            buffers.field_microbatch_data[f] = micro[f];
        }
        CHECK_EQ(dcp_nccl_reroute_execute(set, list, &buffers, 0, &error), DCP_OK);
        CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
        for (f = 0; f < DCP_FIELD_COUNT; f++)
            for (k = 0; k < plan->num_microbatches; k++) {
                size_t n = (size_t)rows[k] * sizes[f], i;
                unsigned char *got = (unsigned char *)malloc(n + 1);
                unsigned char *want = (unsigned char *)malloc(n + 1);
                if (fields.fields & DCP_FIELD_BIT(f)) packed_view(plan, k, sizes[f], want);
                else
                    for (i = 0; i < n; i++) want[i] = stale;
                CHECK_EQ(cudaMemcpy(got, micro[f][k], n, cudaMemcpyDeviceToHost), cudaSuccess);
                CHECK(memcmp(got, want, n) == 0);
                free(got), free(want);
            }
    }
    for (f = 0; f < DCP_FIELD_COUNT; f++) {
        for (s = 0; s < plan->num_samples; s++) cudaFree(samples[f][s]);
        for (k = 0; k < plan->num_microbatches; k++) cudaFree(micro[f][k]);
    }
    dcp_reroute_destroy(list);
    dcp_plan_destroy(plan);
    CHECK_EQ(dcp_nccl_set_destroy(set, &error), DCP_OK);
    CHECK_EQ(ncclCommDestroy(pool), ncclSuccess);
}

/* ------------------------------------------------------------ multi-rank mode (multirank.sh)
   WORLD_SIZE processes on one GPU, RANK this one, the NCCL id through the file argv[1] (rank 0
   writes it, the others wait); DCP_MULTIRANK_TEST picks the run: mtp-roll (the default), or
   one of the faults of issue 31 on 2 processes against real NCCL (each process prints
   "fault NAME: rank R ok" and exits 0 when it saw what the host transport's test of the same
   fault asserts, else 1; multirank.sh's timeout turns a hang into a failure). */

/* How long a fault run's set waits, how long a rank is absent, and the bound on a rank's own
   call that must fail in time (sockets on one GPU: a first connection takes a while). */
#define FAULT_TIMEOUT_MS 2000
#define FAULT_ABSENT_MS (3 * FAULT_TIMEOUT_MS)
#define FAULT_SLACK_MS 20000.0
#define FAULT_SEED 3131
/* The abort-order run's batch: samples of up to FAULT_TOKENS tokens, 8-byte records. */
#define FAULT_SAMPLES 6
#define FAULT_MICROBATCHES 16
#define FAULT_TOKENS 64
#define FAULT_ELEMENT_BYTES 8

typedef struct multirank {
    int rank, ranks;
    ncclComm_t pool;
    ncclConfig_t config; /* the pool's */
    cudaStream_t stream;
} multirank;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* The pool of this run, with config (non-blocking creation polled to its end), and a stream. */
static int multirank_start(multirank *m, const char *id_path, int blocking, int split_share)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclUniqueId id;
    ncclResult_t state;
    const char *why = "";
    const double start = now_ms();
    config.blocking = blocking, config.splitShare = split_share;
    m->config = config;
    if (!nccl_id_file_exchange(id_path, m->rank, &id, &why)) {
        fprintf(stderr, "rank %d: %s: %s\n", m->rank, why, id_path);
        return 0;
    }
    state = ncclCommInitRankConfig(&m->pool, m->ranks, id, m->rank, &config);
    while (state == ncclInProgress && now_ms() - start < FAULT_SLACK_MS)
        if (ncclCommGetAsyncError(m->pool, &state) != ncclSuccess) state = ncclInternalError;
    if (state != ncclSuccess || cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking) !=
                                    cudaSuccess) {
        fprintf(stderr, "rank %d: NCCL or CUDA setup failed\n", m->rank);
        return 0;
    }
    return 1;
}

/* One rank's MTP roll of a cp-rank pack on the device. */
typedef struct roll_buffers {
    mtp_pack p;
    mtp_device_layout d;
    void *in, *out, *scratch;
    size_t size, bytes, scratch_bytes;
} roll_buffers;

static int roll_buffers_make(roll_buffers *b, int32_t cp, int rank, size_t size, uint64_t seed)
{
    memset(b, 0, sizeof *b);
    b->size = size;
    if (!mtp_pack_make(&b->p, seed, cp, rank / cp, size) || !mtp_device_layout_make(&b->p, &b->d))
        return 0;
    b->bytes = (size_t)b->p.local_rows * size;
    return dcp_nccl_mtp_roll_scratch_size(&b->d.layout, size, &b->scratch_bytes, NULL) == DCP_OK &&
           cudaMalloc(&b->in, b->bytes) == cudaSuccess &&
           cudaMalloc(&b->out, b->bytes) == cudaSuccess &&
           cudaMalloc(&b->scratch, b->scratch_bytes) == cudaSuccess &&
           cudaMemcpy(b->in, b->p.in[rank % cp], b->bytes, cudaMemcpyHostToDevice) == cudaSuccess &&
           cudaMemset(b->out, 0x5A, b->bytes) == cudaSuccess;
}

static void roll_buffers_free(roll_buffers *b)
{
    cudaFree(b->in), cudaFree(b->out), cudaFree(b->scratch);
    mtp_device_layout_free(&b->d);
    mtp_pack_free(&b->p);
}

static dcp_status roll_enqueue(dcp_nccl_set *set, const dcp_nccl_binding *binding,
                               roll_buffers *b, cudaStream_t stream, dcp_error *error)
{
    return dcp_nccl_mtp_roll(set, binding, &b->d.layout, b->size, b->in, b->out, b->scratch,
                             b->scratch_bytes, stream, error);
}

/* Every static CP size 2 .. WORLD_SIZE in turn: the rank's group rolls its pack with
   dcp_nccl_mtp_roll and compares with the CPU reference; prints "mtp roll: rank R matches". */
static int mtp_roll_multirank(multirank *m)
{
    dcp_nccl_set *set = NULL;
    dcp_error error;
    int32_t cp, level = 0, failures = 0;
    if (dcp_nccl_set_create(m->pool, NULL, &set, &error) != DCP_OK) {
        fprintf(stderr, "rank %d: %s\n", m->rank, error.message);
        return 1;
    }
    for (cp = 2; cp <= set->max_cp; cp++, level++) { /* every group size, 3 included */
        dcp_comm_scope scope;
        dcp_nccl_binding binding;
        roll_buffers b;
        const size_t size = mtp_gpu_sizes[level % (sizeof mtp_gpu_sizes / sizeof mtp_gpu_sizes[0])];
        unsigned char *got;
        int ok;
        if (m->rank / cp * cp + cp > m->ranks) continue; /* past the last full group: idle */
        memset(&scope, 0, sizeof scope);
        ok = roll_buffers_make(&b, cp, m->rank, size, MTP_GPU_SEED + 2) &&
             dcp_nccl_override_begin(set, cp, &scope, &binding, &error) == DCP_OK &&
             roll_enqueue(set, &binding, &b, m->stream, &error) == DCP_OK &&
             dcp_nccl_set_wait(set, m->stream, &error) == DCP_OK &&
             dcp_nccl_override_end(set, &scope, &error) == DCP_OK;
        if (!ok) {
            fprintf(stderr, "rank %d: cp %d: %s\n", m->rank, (int)cp, error.message);
            return 1;
        }
        got = (unsigned char *)malloc(b.bytes + 1);
        ok = cudaMemcpy(got, b.out, b.bytes, cudaMemcpyDeviceToHost) == cudaSuccess &&
             memcmp(got, b.p.expected[m->rank % cp], b.bytes) == 0;
        printf("rank %d: mtp roll cp %d, %zu-byte elements, %lld rows: %s\n", m->rank, (int)cp,
               size, (long long)b.p.local_rows, ok ? "matches the CPU reference" : "DIFFERS");
        failures += !ok;
        free(got);
        roll_buffers_free(&b);
    }
    if (dcp_nccl_set_destroy(set, &error) != DCP_OK || ncclCommDestroy(m->pool) != ncclSuccess)
        failures++;
    if (failures == 0) printf("mtp roll: rank %d matches\n", m->rank);
    return failures == 0 ? 0 : 1;
}

/* The set of a fault run: both ranks of the pool, cp 2, the pool's config, FAULT_TIMEOUT_MS. */
static dcp_status fault_set(multirank *m, dcp_nccl_set **set, dcp_error *error)
{
    dcp_nccl_options options;
    memset(&options, 0, sizeof options);
    options.max_cp = 2, options.config = &m->config, options.timeout_ms = FAULT_TIMEOUT_MS;
    options.allocator = quarantine_allocator();
    return dcp_nccl_set_create(m->pool, &options, set, error);
}

/* The absent rank of a fault run comes back after FAULT_ABSENT_MS: its own set and pool end
   cleanly. */
static int fault_absent_rank_returns(multirank *m, dcp_nccl_set *set, dcp_error *error)
{
    usleep((useconds_t)FAULT_ABSENT_MS * 1000);
    return dcp_nccl_set_destroy(set, error) == DCP_OK && ncclCommDestroy(m->pool) == ncclSuccess;
}

static int fault_verdict(const multirank *m, const char *name, int ok, const dcp_error *error)
{
    if (ok) printf("fault %s: rank %d ok\n", name, m->rank);
    else fprintf(stderr, "fault %s: rank %d FAILED (last error: %s)\n", name, m->rank,
                 error->message);
    return ok ? 0 : 1;
}

/* Fault 1 (non-blocking pool): rank 1 comes FAULT_ABSENT_MS late to the split. Rank 0's set
   creation fails within its timeout having aborted the pool, so that NCCL's split job cannot
   land a child in the freed set when rank 1 comes (the quarantine shows such a write). */
static int fault_split(multirank *m)
{
    dcp_nccl_set *set = NULL;
    dcp_error error;
    double start = now_ms(), elapsed;
    dcp_status status;
    if (m->rank == 1) gpu_stall("ncclCommSplit", FAULT_ABSENT_MS);
    status = fault_set(m, &set, &error);
    elapsed = now_ms() - start;
    usleep((useconds_t)(2 * FAULT_ABSENT_MS) * 1000); /* a late child would land meanwhile */
    return fault_verdict(m, "split",
                         set == NULL && status == DCP_ERROR_NCCL && quarantine_intact() &&
                             (m->rank == 1 || elapsed < FAULT_TIMEOUT_MS + FAULT_SLACK_MS),
                         &error);
}

/* Fault 3 (blocking or not): after a clean roll rank 1 stays alive but absent; rank 0 rolls
   again and destroys the set, which must abort its communicator (not the pool) within its
   timeout instead of waiting in ncclCommFinalize. Rank 1 then destroys its own set and pool. */
static int fault_absent(multirank *m, const char *name)
{
    dcp_nccl_set *set = NULL;
    dcp_nccl_binding binding;
    roll_buffers b;
    dcp_error error;
    double start;
    int ok = fault_set(m, &set, &error) == DCP_OK &&
             roll_buffers_make(&b, 2, m->rank, 8, FAULT_SEED);
    if (!ok) return fault_verdict(m, name, 0, &error);
    dcp_nccl_set_current(set, &binding);
    binding.cp = 2, binding.first_rank = 0, binding.rank = m->rank;
    ok = roll_enqueue(set, &binding, &b, m->stream, &error) == DCP_OK &&
         dcp_nccl_set_wait(set, m->stream, &error) == DCP_OK;
    if (m->rank == 1) {
        ok = fault_absent_rank_returns(m, set, &error) && ok;
    } else {
        start = now_ms();
        ok = ok && roll_enqueue(set, &binding, &b, m->stream, &error) == DCP_OK &&
             dcp_nccl_set_destroy(set, &error) == DCP_ERROR_NCCL &&
             now_ms() - start < FAULT_TIMEOUT_MS + FAULT_SLACK_MS &&
             ncclCommDestroy(m->pool) == ncclSuccess; /* aborted the set, never the pool */
    }
    roll_buffers_free(&b);
    return fault_verdict(m, name, ok, &error);
}

/* Fault 2 (blocking): rank 1 holds every sample. After a clean step rank 0 reroutes again (a
   kernel of the set's communicator waiting for the absent rank 1), rolls on cp 2 behind it on
   the same stream and waits: the wait times out and aborts the set's communicator, not the
   pool. */
static int fault_abort_order(multirank *m)
{
    dcp_config config;
    int64_t lengths[FAULT_SAMPLES];
    int32_t holders[FAULT_SAMPLES], s, k;
    void *samples[FAULT_SAMPLES], *micro[FAULT_MICROBATCHES];
    int64_t rows[FAULT_MICROBATCHES];
    dcp_plan *plan = NULL;
    dcp_reroute *list = NULL;
    dcp_nccl_reroute_buffers buffers;
    dcp_nccl_set *set = NULL;
    dcp_nccl_binding binding;
    roll_buffers b;
    dcp_error error;
    double start;
    int ok;
    memset(&config, 0, sizeof config);
    config.ranks = 2, config.max_tokens_per_rank = FAULT_TOKENS;
    for (s = 0; s < FAULT_SAMPLES; s++) /* every sample on rank 1 */
        lengths[s] = 1 + (17 * s + 5) % FAULT_TOKENS, holders[s] = 1;
    ok = dcp_plan_create(&config, lengths, FAULT_SAMPLES, &plan, &error) == DCP_OK &&
         plan->num_microbatches <= FAULT_MICROBATCHES &&
         dcp_reroute_create(plan, holders, m->rank, &list, &error) == DCP_OK &&
         fault_set(m, &set, &error) == DCP_OK && roll_buffers_make(&b, 2, m->rank, 8, FAULT_SEED);
    if (!ok) return fault_verdict(m, "abort-order", 0, &error);
    memset(samples, 0, sizeof samples);
    if (m->rank == 1) upload_token_records(plan, FAULT_ELEMENT_BYTES, samples);
    for (k = 0; k < plan->num_microbatches; k++) {
        dcp_rank_group where;
        ok &= dcp_plan_rank_group(plan, m->rank, k, &where, NULL) == DCP_OK;
        rows[k] = where.local_rows;
        ok &= cudaMalloc(&micro[k], (size_t)rows[k] * FAULT_ELEMENT_BYTES + 1) == cudaSuccess;
    }
    memset(&buffers, 0, sizeof buffers);
    buffers.element_size = FAULT_ELEMENT_BYTES;
    buffers.num_samples = plan->num_samples, buffers.sample_data = samples;
    buffers.num_microbatches = plan->num_microbatches, buffers.microbatch_data = micro;
    buffers.microbatch_rows = rows;
    dcp_nccl_set_current(set, &binding);
    binding.cp = 2, binding.first_rank = 0, binding.rank = m->rank;
    ok = ok && dcp_nccl_reroute_execute(set, list, &buffers, m->stream, &error) == DCP_OK &&
         roll_enqueue(set, &binding, &b, m->stream, &error) == DCP_OK &&
         dcp_nccl_set_wait(set, m->stream, &error) == DCP_OK;
    if (m->rank == 1) {
        ok = fault_absent_rank_returns(m, set, &error) && ok;
    } else {
        start = now_ms();
        ok = ok && dcp_nccl_reroute_execute(set, list, &buffers, m->stream, &error) == DCP_OK &&
             roll_enqueue(set, &binding, &b, m->stream, &error) == DCP_OK &&
             dcp_nccl_set_wait(set, m->stream, &error) == DCP_ERROR_NCCL &&
             now_ms() - start < FAULT_TIMEOUT_MS + FAULT_SLACK_MS && set->pool == m->pool;
        (void)dcp_nccl_set_destroy(set, NULL);
        ok = ok && ncclCommDestroy(m->pool) == ncclSuccess; /* the pool stays the caller's */
    }
    for (s = 0; s < plan->num_samples; s++) cudaFree(samples[s]);
    for (k = 0; k < plan->num_microbatches; k++) cudaFree(micro[k]);
    roll_buffers_free(&b);
    dcp_reroute_destroy(list);
    dcp_plan_destroy(plan);
    return fault_verdict(m, "abort-order", ok, &error);
}

/* Fault 4: the pool created with splitShare 1 (or 0); the set's communicator aborted alone.
   Shared, the pool's abort flag went with it: the set must report the pool gone (set->pool
   NULL); unshared, the pool stays and its all-reduce sums. */
static int fault_shared_abort(multirank *m, const char *name)
{
    const int shared = m->config.splitShare == 1;
    dcp_nccl_set *set = NULL;
    int32_t one = 1, sum = 0, *x = NULL;
    dcp_error error;
    double start;
    int ok = fault_set(m, &set, &error) == DCP_OK &&
             dcp_nccl_set_abort(set, 0, &error) == DCP_OK && (set->pool == NULL) == shared;
    if (ok && set->pool) {
        cudaError_t query = cudaErrorNotReady;
        ok = cudaMalloc((void **)&x, sizeof *x) == cudaSuccess &&
             cudaMemcpy(x, &one, sizeof one, cudaMemcpyHostToDevice) == cudaSuccess &&
             ncclAllReduce(x, x, 1, ncclInt32, ncclSum, set->pool, m->stream) == ncclSuccess;
        for (start = now_ms(); ok && query == cudaErrorNotReady &&
                               now_ms() - start < FAULT_TIMEOUT_MS + FAULT_SLACK_MS;)
            query = cudaStreamQuery(m->stream);
        ok = ok && query == cudaSuccess &&
             cudaMemcpy(&sum, x, sizeof sum, cudaMemcpyDeviceToHost) == cudaSuccess &&
             sum == m->ranks && ncclCommDestroy(m->pool) == ncclSuccess;
        cudaFree(x);
    }
    if (set) ok = dcp_nccl_set_destroy(set, &error) == DCP_OK && ok;
    return fault_verdict(m, name, ok, &error);
}

static int multirank_main(int rank, int ranks, const char *id_path)
{
    const char *test = getenv("DCP_MULTIRANK_TEST");
    multirank m;
    int blocking = 1, share = 0;
    if (!gpu_available()) {
        printf("%s\n", SKIP_REASON);
        return 0;
    }
    if (!test) test = "mtp-roll";
    if (strcmp(test, "fault-split") == 0 || strcmp(test, "fault-absent-nonblocking") == 0)
        blocking = 0;
    if (strcmp(test, "fault-shared-abort") == 0) share = 1;
    memset(&m, 0, sizeof m);
    m.rank = rank, m.ranks = ranks;
    if (!multirank_start(&m, id_path, blocking, share)) return 1;
    if (strcmp(test, "mtp-roll") == 0) return mtp_roll_multirank(&m);
    if (ranks != 2) {
        fprintf(stderr, "%s runs on 2 ranks, not %d\n", test, ranks);
        return 1;
    }
    if (strcmp(test, "fault-split") == 0) return fault_split(&m);
    if (strncmp(test, "fault-absent", 12) == 0) return fault_absent(&m, test + 6);
    if (strcmp(test, "fault-abort-order") == 0) return fault_abort_order(&m);
    if (strstr(test, "shared-abort")) return fault_shared_abort(&m, test + 6);
    fprintf(stderr, "unknown DCP_MULTIRANK_TEST %s\n", test);
    return 1;
}

#ifdef DCP_CUDA_CPU
/* ------------------------------------------------ the model: ranks as threads (host transport) */

/* The transport's violations so far: each is a failure, named. */
static int transport_clean(void)
{
    const char *text = "";
    const int violations = fake_violations(&text);
    if (violations)
        fprintf(stderr, "host transport: %d violations, the first: %s\n", violations, text);
    return violations == 0;
}

static int multirank_thread(int rank, int ranks, void *id_path)
{
    return multirank_main(rank, ranks, (const char *)id_path);
}

/* The multi-rank mode (multirank.sh's mtp-roll) with each rank a thread of this process, its
   device the transport's; then back to the one device the other tests use. */
static void mtp_roll_ranks_as_threads(void)
{
    static const int sizes[] = {2, 4};
    size_t i;
    for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char id_path[64];
        snprintf(id_path, sizeof id_path, "/tmp/dcp_nccl_gpu_cpu_id.%d.%d", (int)getpid(),
                 sizes[i]);
        CHECK(transport_clean());
        fake_job_destroy();
        CHECK_EQ(fake_run_ranks(sizes[i], multirank_thread, id_path), 0);
        unlink(id_path);
        fake_devices_create(1);
        fake_bind_rank(0);
    }
}
#endif

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"set_switch_and_override", set_switch_and_override},
        {"reroute_to_itself", reroute_to_itself},
        {"ring_of_one_causal_gqa", ring_of_one_causal_gqa},
        {"ring_of_one_full_mha", ring_of_one_full_mha},
        {"broadcast_plan_and_view", broadcast_plan_and_view},
        {"async_poll_and_abort", async_poll_and_abort},
        {"checking_macro_names_the_call", checking_macro_names_the_call},
        {"mtp_roll_kernels_match_reference", mtp_roll_kernels_match_reference},
        {"mtp_roll_of_one", mtp_roll_of_one},
        {"stage_fields_reroute_to_itself", stage_fields_reroute_to_itself},
#ifdef DCP_CUDA_CPU
        {"mtp_roll_ranks_as_threads", mtp_roll_ranks_as_threads},
#endif
    };
#ifdef DCP_CUDA_CPU
    {
        int status;
        fake_devices_create(1);
        fake_bind_rank(0);
        status = test_main(tests, TEST_COUNT(tests), argc, argv);
        if (!transport_clean()) status = 1;
        fake_job_destroy();
        return status;
    }
#else
    const char *world = getenv("WORLD_SIZE");
    if (world && atoi(world) > 1) /* tests/multirank.sh: one process of a multi-rank run */
        return multirank_main(getenv("RANK") ? atoi(getenv("RANK")) : 0, atoi(world),
                              argc > 1 ? argv[1] : "/tmp/dcp_mtp_nccl_id");
    if (!gpu_available()) printf("%s\n", SKIP_REASON);
    return test_main(tests, TEST_COUNT(tests), argc, argv);
#endif
}
