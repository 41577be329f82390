/* GPU tests of the head-parallel all-to-all (dcp_cuda_a2a_copy) against dcp.h's host copy and
   references, and conv1d on its head-parallel layout. Where no CUDA device exists the GPU
   tests report "no CUDA device: skipped" and only the host-side argument checks run.
   - a2a_copy_equals_host_copy: every segment list of random packs (c = 2, 4, 8) packed and
     unpacked on the device, with buffers shifted off 16-byte alignment so that every vector
     width runs (16, 8, 4, 2, 1 bytes), equals dcp_a2a_segments_copy byte for byte; outputs
     start poisoned.
   - conv1d_after_cp2hp_equals_unsplit: a group of c ranks simulated on one device (pack on
     the device, messages moved with cudaMemcpy as the NCCL round would, unpack on the
     device), then dcp_cuda_conv1d_forward on every rank's head-parallel buffer with its slice
     of the weights, equals dcp_conv1d_forward on the unsplit batch (tolerance of the dtype);
     hp2cp of the result equals the zigzag split of the unsplit output. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "cuda_test_util.h"

#define HYBRID_GPU_STREAM 20
#define CONV_WIDTH 4
static const int32_t GROUP_SIZES[] = {2, 4, 8};
/* Byte shifts of the local and message buffers: aligned, then each narrower vector width. */
static const size_t SHIFTS[] = {0, 8, 4, 2, 1};

/* Segment list of one side of rank r, on the host (arena) and uploaded. */
typedef struct side_list {
    dcp_a2a_segment *host;
    const dcp_a2a_segment *device;
    int64_t count;
} side_list;

static side_list side_list_make(cuda_arena *a, const dcp_thd_layout *layout, int32_t rank,
                                int32_t channels, size_t channel_bytes, dcp_a2a_side side)
{
    side_list l;
    CHECK_EQ(dcp_a2a_segments(layout, rank, channels, channel_bytes, side, NULL, 0, &l.count,
                              NULL),
             DCP_OK);
    l.host = (dcp_a2a_segment *)host_alloc(a, (size_t)l.count * sizeof(dcp_a2a_segment));
    CHECK_EQ(dcp_a2a_segments(layout, rank, channels, channel_bytes, side, l.host, l.count,
                              &l.count, NULL),
             DCP_OK);
    l.device = (const dcp_a2a_segment *)upload_bytes(a, l.host,
                                                     (size_t)l.count * sizeof(dcp_a2a_segment));
    return l;
}

static unsigned char *random_bytes(cuda_arena *a, dcp_rng *rng, size_t bytes)
{
    unsigned char *p = (unsigned char *)host_alloc(a, bytes);
    size_t i;
    for (i = 0; i < bytes; i++) p[i] = (unsigned char)dcp_rng_below(rng, 256);
    return p;
}

/* Runs one list both ways on the device and on the host and compares the bytes. */
static void copy_case(cuda_arena *a, dcp_rng *rng, const side_list *l, int64_t copies,
                      size_t slice_bytes, size_t local_pitch, size_t local_bytes,
                      size_t message_bytes, size_t shift)
{
    unsigned char *local = random_bytes(a, rng, local_bytes);
    unsigned char *message = random_bytes(a, rng, message_bytes);
    unsigned char *want = (unsigned char *)host_alloc(a, local_bytes + message_bytes);
    unsigned char *got = (unsigned char *)host_alloc(a, local_bytes + message_bytes);
    unsigned char *d_local = (unsigned char *)dev_alloc(a, local_bytes + shift) + shift;
    unsigned char *d_message = (unsigned char *)dev_alloc(a, message_bytes + shift) + shift;
    int64_t pack_rows = 0, all_rows = 0, i;
    dcp_error error;
    for (i = 0; i < l->count; i++) {
        if (i < copies) pack_rows += l->host[i].rows;
        all_rows += l->host[i].rows;
    }
    /* pack: the device's message against the host's, from the same local bytes */
    memset(want, 0xFF, message_bytes), memset(got, 0, message_bytes);
    CHECK_EQ(dcp_a2a_segments_copy(l->host, l->count, copies, slice_bytes, local_pitch,
                                   DCP_A2A_PACK, local, want, NULL),
             DCP_OK);
    CUDA_TEST_CALL(cudaMemcpy(d_local, local, local_bytes, cudaMemcpyHostToDevice));
    CUDA_TEST_CALL(cudaMemset(d_message, 0xFF, message_bytes));
    CHECK_EQ(dcp_cuda_a2a_copy(l->device, l->count, copies, pack_rows, slice_bytes, local_pitch,
                               DCP_A2A_PACK, d_local, d_message, NULL, &error),
             DCP_OK);
    CUDA_TEST_CALL(cudaDeviceSynchronize());
    CUDA_TEST_CALL(cudaMemcpy(got, d_message, message_bytes, cudaMemcpyDeviceToHost));
    CHECK(memcmp(got, want, message_bytes) == 0);
    /* unpack: into a poisoned local buffer, copies and zero fills */
    memset(want, 0xFF, local_bytes);
    CHECK_EQ(dcp_a2a_segments_copy(l->host, l->count, copies, slice_bytes, local_pitch,
                                   DCP_A2A_UNPACK, want, message, NULL),
             DCP_OK);
    CUDA_TEST_CALL(cudaMemcpy(d_message, message, message_bytes, cudaMemcpyHostToDevice));
    CUDA_TEST_CALL(cudaMemset(d_local, 0xFF, local_bytes));
    CHECK_EQ(dcp_cuda_a2a_copy(l->device, l->count, copies, all_rows, slice_bytes, local_pitch,
                               DCP_A2A_UNPACK, d_local, d_message, NULL, &error),
             DCP_OK);
    CUDA_TEST_CALL(cudaDeviceSynchronize());
    CUDA_TEST_CALL(cudaMemcpy(got, d_local, local_bytes, cudaMemcpyDeviceToHost));
    CHECK(memcmp(got, want, local_bytes) == 0);
}

static void a2a_copy_equals_host_copy(void)
{
    static const size_t channel_bytes[] = {1, 2, 4, 16, 128};
    dcp_rng rng;
    size_t g, b, s;
    CUDA_TEST_REQUIRE_GPU();
    rng = cuda_test_rng(HYBRID_GPU_STREAM);
    for (g = 0; g < sizeof GROUP_SIZES / sizeof GROUP_SIZES[0]; g++)
        for (b = 0; b < sizeof channel_bytes / sizeof channel_bytes[0]; b++)
            for (s = 0; s < sizeof SHIFTS / sizeof SHIFTS[0]; s++) {
                const int32_t cp = GROUP_SIZES[g], channels = 2 * cp;
                cuda_arena a;
                test_layout t;
                dcp_a2a_shape shape;
                int32_t r = (int32_t)dcp_rng_below(&rng, (uint64_t)cp);
                side_list cp_side, hp_side;
                memset(&a, 0, sizeof a);
                layout_random(&t, &a, &rng, 1 + (int32_t)dcp_rng_below(&rng, 12),
                              cuda_test_size(300, 100), cp);
                CHECK_EQ(dcp_a2a_shape_get(&t.host, r, channels, channel_bytes[b], &shape, NULL),
                         DCP_OK);
                cp_side = side_list_make(&a, &t.host, r, channels, channel_bytes[b],
                                         DCP_A2A_CP_SIDE);
                hp_side = side_list_make(&a, &t.host, r, channels, channel_bytes[b],
                                         DCP_A2A_HP_SIDE);
                copy_case(&a, &rng, &cp_side, shape.cp_copies, shape.slice_bytes,
                          shape.row_bytes, (size_t)shape.cp_rows * shape.row_bytes,
                          shape.cp_message_bytes, SHIFTS[s]);
                copy_case(&a, &rng, &hp_side, shape.hp_copies, shape.slice_bytes,
                          shape.slice_bytes, (size_t)shape.hp_rows * shape.slice_bytes,
                          shape.hp_message_bytes, SHIFTS[s]);
                cuda_arena_free(&a);
                if (test_current_failures) {
                    printf("  cp %d, rank %d, channel bytes %zu, shift %zu\n", (int)cp, (int)r,
                           channel_bytes[b], SHIFTS[s]);
                    return;
                }
            }
}

/* The group's all-to-all on one device: every rank packs, the messages move with cudaMemcpy
   (what the NCCL round moves), every rank unpacks. to_hp: cp2hp. */
static void group_a2a(cuda_arena *a, const dcp_thd_layout *layout, int32_t channels,
                      size_t channel_bytes, void *const *cp_bufs, void *const *hp_bufs,
                      int to_hp)
{
    const int32_t cp = layout->cp;
    dcp_a2a_shape *shapes = (dcp_a2a_shape *)host_alloc(a, (size_t)cp * sizeof(dcp_a2a_shape));
    unsigned char **cp_msg = (unsigned char **)host_alloc(a, (size_t)cp * sizeof(void *));
    unsigned char **hp_msg = (unsigned char **)host_alloc(a, (size_t)cp * sizeof(void *));
    int64_t *offset = (int64_t *)host_alloc(a, ((size_t)cp + 1) * sizeof(int64_t));
    int32_t r, j;
    dcp_error error;
    offset[0] = 0;
    for (r = 0; r < cp; r++) {
        CHECK_EQ(dcp_a2a_shape_get(layout, r, channels, channel_bytes, &shapes[r], NULL), DCP_OK);
        offset[r + 1] = offset[r] + shapes[r].message_rows;
        cp_msg[r] = (unsigned char *)dev_alloc(a, shapes[r].cp_message_bytes);
        hp_msg[r] = (unsigned char *)dev_alloc(a, shapes[r].hp_message_bytes);
    }
    for (r = 0; r < cp; r++) {
        const dcp_a2a_shape *s = &shapes[r];
        side_list l = side_list_make(a, layout, r, channels, channel_bytes,
                                     to_hp ? DCP_A2A_CP_SIDE : DCP_A2A_HP_SIDE);
        CHECK_EQ(dcp_cuda_a2a_copy(l.device, l.count, to_hp ? s->cp_copies : s->hp_copies,
                                   to_hp ? (int64_t)cp * s->message_rows : s->group_rows,
                                   s->slice_bytes, to_hp ? s->row_bytes : s->slice_bytes,
                                   DCP_A2A_PACK, to_hp ? cp_bufs[r] : hp_bufs[r],
                                   to_hp ? cp_msg[r] : hp_msg[r], NULL, &error),
                 DCP_OK);
    }
    for (r = 0; r < cp; r++)
        for (j = 0; j < cp; j++) {
            const size_t bytes = (size_t)shapes[r].message_rows * shapes[r].slice_bytes;
            unsigned char *at_cp = cp_msg[r] + (size_t)j * bytes;
            unsigned char *at_hp = hp_msg[j] + (size_t)offset[r] * shapes[r].slice_bytes;
            if (bytes == 0) continue;
            CUDA_TEST_CALL(cudaMemcpy(to_hp ? at_hp : at_cp, to_hp ? at_cp : at_hp, bytes,
                                      cudaMemcpyDeviceToDevice));
        }
    for (r = 0; r < cp; r++) {
        const dcp_a2a_shape *s = &shapes[r];
        side_list l = side_list_make(a, layout, r, channels, channel_bytes,
                                     to_hp ? DCP_A2A_HP_SIDE : DCP_A2A_CP_SIDE);
        CHECK_EQ(dcp_cuda_a2a_copy(l.device, l.count, to_hp ? s->hp_copies : s->cp_copies,
                                   to_hp ? s->hp_rows : (int64_t)cp * s->cp_rows, s->slice_bytes,
                                   to_hp ? s->slice_bytes : s->row_bytes, DCP_A2A_UNPACK,
                                   to_hp ? hp_bufs[r] : cp_bufs[r],
                                   to_hp ? hp_msg[r] : cp_msg[r], NULL, &error),
                 DCP_OK);
    }
    CUDA_TEST_CALL(cudaDeviceSynchronize());
}

/* The zigzag split of an unsplit [hp_rows, width] host tensor: rank r's rows, padding 0. */
static float *split_rank(cuda_arena *a, const test_layout *t, const float *unsplit, int32_t r,
                         int64_t width)
{
    const int32_t cp = t->host.cp;
    const int64_t rows = t->cu_padded[t->host.num_sequences] / cp;
    float *out = host_floats(a, rows * width);
    int32_t i;
    int64_t local;
    for (i = 0; i < t->host.num_sequences; i++) {
        const int64_t padded = t->cu_padded[i + 1] - t->cu_padded[i];
        const int64_t valid = t->cu[i + 1] - t->cu[i];
        for (local = 0; local < padded / cp; local++) {
            const int64_t p = dcp_zigzag_position(padded, cp, r, local);
            float *row = out + (t->cu_padded[i] / cp + local) * width;
            if (p < valid) memcpy(row, unsplit + (t->cu_padded[i] + p) * width,
                                  (size_t)width * sizeof(float));
            else memset(row, 0, (size_t)width * sizeof(float));
        }
    }
    return out;
}

static void conv1d_case(dcp_rng *rng, int32_t cp, dcp_dtype dtype)
{
    const int32_t channels = 8 * cp, slice = channels / cp;
    const size_t size = dtype_size(dtype);
    cuda_arena a;
    test_layout t;
    dcp_conv1d_params whole, part;
    dcp_thd_layout unsplit;
    dcp_cuda_layout hp_device;
    dcp_error error;
    int64_t rows, local_rows, i, row;
    float *x, *y, *weight, *bias;
    void **d_cp, **d_hp, **d_y_hp, **d_y_cp;
    int32_t r, j;
    memset(&a, 0, sizeof a);
    layout_random(&t, &a, rng, 1 + (int32_t)dcp_rng_below(rng, 10), cuda_test_size(400, 120), cp);
    rows = t.cu_padded[t.host.num_sequences];
    local_rows = rows / cp;
    x = random_values(&a, rng, dtype, rows * channels);
    weight = random_values(&a, rng, DCP_DTYPE_FLOAT32, (int64_t)channels * CONV_WIDTH);
    bias = random_values(&a, rng, DCP_DTYPE_FLOAT32, channels);
    y = host_floats(&a, rows * channels);
    memset(&whole, 0, sizeof whole);
    whole.channels = channels, whole.width = CONV_WIDTH, whole.silu = 1;
    part = whole, part.channels = slice;
    unsplit = t.host, unsplit.cp = 1;
    CHECK_EQ(dcp_conv1d_forward(&whole, &unsplit, rows, x, weight, bias, y, &error), DCP_OK);
    d_cp = (void **)host_alloc(&a, (size_t)cp * sizeof(void *));
    d_hp = (void **)host_alloc(&a, (size_t)cp * sizeof(void *));
    d_y_hp = (void **)host_alloc(&a, (size_t)cp * sizeof(void *));
    d_y_cp = (void **)host_alloc(&a, (size_t)cp * sizeof(void *));
    for (r = 0; r < cp; r++) {
        float *x_rank = split_rank(&a, &t, x, r, channels);
        nan_padding_rows(&t, r, x_rank, channels); /* never sent: the HP padding must be 0 */
        d_cp[r] = upload(&a, dtype, x_rank, local_rows * channels);
        d_hp[r] = dev_alloc(&a, (size_t)rows * slice * size);
        d_y_hp[r] = dev_alloc(&a, (size_t)rows * slice * size);
        d_y_cp[r] = dev_alloc(&a, (size_t)local_rows * channels * size);
    }
    group_a2a(&a, &t.host, channels, size, d_cp, d_hp, 1);
    /* the head-parallel layout: the same device cu arrays with cp 1 */
    CHECK_EQ(dcp_cuda_layout_init(&unsplit, t.device.thd.cu_seqlens,
                                  t.device.thd.cu_seqlens_padded, &hp_device, &error),
             DCP_OK);
    for (j = 0; j < cp; j++) {
        const float *w = weight + (size_t)j * slice * CONV_WIDTH;
        float *want = host_floats(&a, rows * slice), *got;
        for (row = 0; row < rows; row++)
            memcpy(want + row * slice, y + row * channels + j * slice,
                   (size_t)slice * sizeof(float));
        CHECK_EQ(dcp_cuda_conv1d_forward(
                     &part, &hp_device, rows, dtype, d_hp[j],
                     (const float *)upload(&a, DCP_DTYPE_FLOAT32, w, (int64_t)slice * CONV_WIDTH),
                     (const float *)upload(&a, DCP_DTYPE_FLOAT32, bias + j * slice, slice),
                     d_y_hp[j], NULL, &error),
                 DCP_OK);
        got = download(&a, dtype, d_y_hp[j], rows * slice);
        for (i = 0; i < rows * slice; i++) want[i] = round_to(dtype, want[i]);
        CHECK(compare("conv1d after cp2hp", got, want, rows * slice, tolerance_of(dtype)));
    }
    /* back to the CP split: rank r's rows of the unsplit output */
    group_a2a(&a, &t.host, channels, size, d_y_cp, d_y_hp, 0);
    for (r = 0; r < cp; r++) {
        float *want = split_rank(&a, &t, y, r, channels);
        float *got = download(&a, dtype, d_y_cp[r], local_rows * channels);
        for (i = 0; i < local_rows * channels; i++) want[i] = round_to(dtype, want[i]);
        CHECK(compare("hp2cp of the conv1d output", got, want, local_rows * channels,
                      tolerance_of(dtype)));
    }
    cuda_arena_free(&a);
}

static void conv1d_after_cp2hp_equals_unsplit(void)
{
    static const dcp_dtype dtypes[] = {DCP_DTYPE_FLOAT32, DCP_DTYPE_BFLOAT16};
    dcp_rng rng;
    size_t g, d;
    CUDA_TEST_REQUIRE_GPU();
    rng = cuda_test_rng(HYBRID_GPU_STREAM + 1);
    for (g = 0; g < sizeof GROUP_SIZES / sizeof GROUP_SIZES[0]; g++)
        for (d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
            conv1d_case(&rng, GROUP_SIZES[g], dtypes[d]);
            if (test_current_failures) {
                printf("  cp %d, %s\n", (int)GROUP_SIZES[g], dtype_name(dtypes[d]));
                return;
            }
        }
}

/* Host-side checks: refused before any CUDA call, so they run without a GPU too. */
static void a2a_copy_arguments(void)
{
    dcp_a2a_segment seg = {0, 1, 0, 0};
    unsigned char buffer[16];
    dcp_error error;
    CHECK_EQ(dcp_cuda_a2a_copy(&seg, 1, 2, 1, 4, 4, DCP_A2A_PACK, buffer, buffer, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "copies 2");
    CHECK_EQ(dcp_cuda_a2a_copy(NULL, 1, 1, 1, 4, 4, DCP_A2A_PACK, buffer, buffer, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_cuda_a2a_copy(&seg, 1, 1, 1, 8, 4, DCP_A2A_PACK, buffer, buffer, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "local_pitch 4");
    CHECK_EQ(dcp_cuda_a2a_copy(&seg, 1, 1, 1, 4, 4, (dcp_a2a_direction)3, buffer, buffer, NULL,
                               &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_cuda_a2a_copy(&seg, 0, 0, 1, 4, 4, DCP_A2A_UNPACK, buffer, buffer, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_cuda_a2a_copy(NULL, 0, 0, 0, 4, 4, DCP_A2A_UNPACK, NULL, NULL, NULL, &error),
             DCP_OK); /* nothing to do: nothing launched */
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"a2a_copy_arguments", a2a_copy_arguments},
        {"a2a_copy_equals_host_copy", a2a_copy_equals_host_copy},
        {"conv1d_after_cp2hp_equals_unsplit", conv1d_after_cp2hp_equals_unsplit},
    };
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
