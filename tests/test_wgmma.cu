/* Tests of the Hopper building blocks of dcp_cuda.cu (section "attention on Hopper"): the
   128-byte swizzled shared layout and the wgmma matrix descriptors on the CPU (they run in
   `make test` on any machine), and a standalone wgmma product against a CPU product on a
   device of compute capability 9.0 (without a GPU: "no CUDA device: skipped"; on another
   device it checks that the wgmma path says it is unavailable).

   White box: the swizzle, the descriptors and the wgmma wrappers are internal to dcp_cuda.cu,
   so this file includes it (one translation unit, built for sm_90a only: Makefile
   WGMMA_TEST_ARCH) instead of linking build/dcp_cuda.o.

   The CPU checks do not re-derive the code's own formulas: they emulate how wgmma reads
   shared memory through a descriptor, from the canonical layouts of the PTX ISA (K-major:
   row m at (m / 8) x stride + (m % 8) x 128 bytes, k contiguous; MN-major: n contiguous in
   64-element blocks leading-offset apart, k rows 128 bytes apart in 8-row groups stride-
   offset apart; then the 128-byte swizzle on the absolute address), and check that every
   element lands where the tile loader wrote it. The GPU products: random inputs (seed
   printed), outputs poisoned with NaN, accumulators poisoned with NaN before a first k step
   that must ignore them (scale-d 0), compared by the rule of tests/tolerance.h with the
   float32-sum tolerance (products of bf16/fp16 values are exact in float32, so only the
   summation order differs). */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "../dcp_cuda.cu"
#include "cuda_test_util.h"

typedef dcp_cuda__sw128 layout;
typedef dcp_cuda__gmma_desc desc;

/* ================================================================== CPU: layout, descriptors */

/* The byte wgmma reads for element (m, k) of a K-major operand, as the PTX ISA describes the
   128-byte swizzled canonical layout: 8-row groups `stride` apart, rows 128 bytes apart, k
   contiguous from the start address; then the swizzle of the absolute address. */
static uint32_t emulate_kmajor(uint64_t d, uint32_t m, uint32_t k)
{
    const uint32_t linear = desc::address(d) + (m / 8) * desc::stride(d) + (m % 8) * 128 + k * 2;
    return layout::swizzle(linear);
}

/* The same for element (k, n) of an MN-major operand: n contiguous in 64-element blocks
   `leading` apart, k rows 128 bytes apart in 8-row groups `stride` apart. */
static uint32_t emulate_mnmajor(uint64_t d, uint32_t k, uint32_t n)
{
    const uint32_t linear = desc::address(d) + (n / 64) * desc::leading(d) +
                            (k / 8) * desc::stride(d) + (k % 8) * 128 + (n % 64) * 2;
    return layout::swizzle(linear);
}

/* The descriptors leave the base offset 0, which the PTX ISA allows when the start address
   lies in the first 128-byte row of a 1024-byte pattern ((address >> 7) & 7 == 0): k steps
   move the start inside that row, rows and column blocks by whole atoms. */
static int starts_in_first_atom_row(uint64_t d)
{
    return (desc::address(d) / layout::ROW_BYTES) % layout::ATOM_ROWS == 0;
}

static void test_swizzle_permutes_each_atom(void)
{
    enum { ATOMS = 4 };
    static unsigned char seen[ATOMS * layout::ATOM_BYTES];
    uint32_t o, r, c;
    memset(seen, 0, sizeof seen);
    for (o = 0; o < ATOMS * layout::ATOM_BYTES; o++) {
        const uint32_t s = layout::swizzle(o);
        CHECK_EQ(s / layout::ATOM_BYTES, o / layout::ATOM_BYTES); /* stays in its atom */
        CHECK_EQ(s % layout::CHUNK_BYTES, o % layout::CHUNK_BYTES); /* chunks stay whole */
        CHECK_EQ(layout::swizzle(s), o);                            /* an involution */
        CHECK(s < ATOMS * layout::ATOM_BYTES && !seen[s]);          /* a bijection */
        if (s < ATOMS * layout::ATOM_BYTES) seen[s] = 1;
    }
    for (r = 0; r < layout::ATOM_ROWS; r++)
        for (c = 0; c < layout::ROW_BYTES / layout::CHUNK_BYTES; c++)
            CHECK_EQ(layout::swizzle(r * layout::ROW_BYTES + c * layout::CHUNK_BYTES),
                     r * layout::ROW_BYTES + (c ^ r) * layout::CHUNK_BYTES);
}

/* offset() places every element of a tile once, inside the tile, 16-byte chunks of 8
   consecutive columns contiguous, and the 8 rows of an atom's column in 8 distinct 16-byte
   bank groups (the point of the swizzle). */
static void test_tile_offsets(void)
{
    static const uint32_t shapes[][2] = {{64, 64}, {64, 128}, {128, 64}, {128, 128}};
    static unsigned char seen[128 * 128];
    size_t i;
    for (i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const uint32_t rows = shapes[i][0], cols = shapes[i][1], bytes = rows * cols * 2;
        uint32_t r, c, duplicates = 0, outside = 0, split = 0, conflicts = 0;
        memset(seen, 0, sizeof seen);
        for (r = 0; r < rows; r++)
            for (c = 0; c < cols; c++) {
                const uint32_t o = layout::offset(r, c, rows);
                if (o >= bytes || o % 2) {
                    outside++;
                    continue;
                }
                if (seen[o / 2]++) duplicates++;
                if (c % 8 && o != layout::offset(r, c - 1, rows) + 2) split++;
            }
        for (r = 0; r < rows; r += layout::ATOM_ROWS)
            for (c = 0; c < cols; c += 8) {
                uint32_t groups = 0, k;
                for (k = 0; k < layout::ATOM_ROWS; k++)
                    groups |= 1u << (layout::offset(r + k, c, rows) / layout::CHUNK_BYTES % 8);
                if (groups != 0xFFu) conflicts++;
            }
        CHECK_EQ(outside, 0u);
        CHECK_EQ(duplicates, 0u);
        CHECK_EQ(split, 0u);
        CHECK_EQ(conflicts, 0u);
    }
}

static void test_descriptor_fields_round_trip(void)
{
    dcp_rng rng;
    int i;
    /* the PTX ISA's bit positions, written out: address 0x400, leading 16, stride 1024, 128B */
    CHECK_EQ(desc::encode(0x400, 16, 1024, desc::SWIZZLE_128B),
             (uint64_t)0x40 | (uint64_t)1 << 16 | (uint64_t)64 << 32 | (uint64_t)1 << 62);
    CHECK(desc::encodable(0) && desc::encodable(desc::LIMIT - 16));
    CHECK(!desc::encodable(8) && !desc::encodable(desc::LIMIT));
    dcp_rng_seed(&rng, test_seed_for(19));
    for (i = 0; i < 10000; i++) {
        const uint32_t address = (uint32_t)(dcp_rng_next(&rng) % (desc::LIMIT / 16)) * 16;
        const uint32_t leading = (uint32_t)(dcp_rng_next(&rng) % (desc::LIMIT / 16)) * 16;
        const uint32_t stride = (uint32_t)(dcp_rng_next(&rng) % (desc::LIMIT / 16)) * 16;
        const uint32_t mode = (uint32_t)(dcp_rng_next(&rng) % 4);
        const uint64_t d = desc::encode(address, leading, stride, mode);
        const uint64_t fields = desc::FIELD_MASK | desc::FIELD_MASK << desc::LEADING_SHIFT |
                                desc::FIELD_MASK << desc::STRIDE_SHIFT |
                                desc::MODE_MASK << desc::MODE_SHIFT;
        CHECK_EQ(desc::address(d), address);
        CHECK_EQ(desc::leading(d), leading);
        CHECK_EQ(desc::stride(d), stride);
        CHECK_EQ(desc::mode(d), mode);
        CHECK_EQ(d & ~fields, (uint64_t)0); /* base offset and reserved bits stay 0 */
        if (test_current_failures) return;
    }
}

/* Q (A) and K (B) of S = Q K^T: every element of every k step read through the descriptor is
   the element the loader wrote, for both warpgroups' rows and both head dims. */
static void test_kmajor_descriptors_read_the_tile(void)
{
    static const uint32_t rows_of[] = {64, 128}, dims[] = {64, 128};
    const uint32_t tile = 3 * layout::ATOM_BYTES; /* any atom-aligned shared address */
    size_t ri, di;
    for (ri = 0; ri < 2; ri++)
        for (di = 0; di < 2; di++) {
            const uint32_t rows = rows_of[ri], dim = dims[di];
            uint32_t row0, kc, m, k, wrong = 0;
            for (row0 = 0; row0 < rows; row0 += 64)
                for (kc = 0; kc < dim / DCP_CUDA__WGMMA_K; kc++) {
                    const uint64_t d = dcp_cuda__desc_kmajor(tile, rows, row0, kc);
                    if (desc::mode(d) != desc::SWIZZLE_128B) wrong++;
                    if (!starts_in_first_atom_row(d)) wrong++;
                    for (m = 0; m < 64; m++)
                        for (k = 0; k < DCP_CUDA__WGMMA_K; k++)
                            if (emulate_kmajor(d, m, k) !=
                                tile + layout::offset(row0 + m, kc * DCP_CUDA__WGMMA_K + k, rows))
                                wrong++;
                }
            CHECK_EQ(wrong, 0u);
        }
}

/* V (B of O = P V, read transposed): every element (key, column) of every k step. */
static void test_mnmajor_descriptors_read_the_tile(void)
{
    static const uint32_t dims[] = {64, 128};
    const uint32_t rows = 128, tile = 5 * layout::ATOM_BYTES;
    size_t di;
    for (di = 0; di < 2; di++) {
        const uint32_t dim = dims[di];
        uint32_t kc, k, n, wrong = 0;
        for (kc = 0; kc < rows / DCP_CUDA__WGMMA_K; kc++) {
            const uint64_t d = dcp_cuda__desc_mnmajor(tile, rows, kc);
            if (desc::mode(d) != desc::SWIZZLE_128B) wrong++;
            if (!starts_in_first_atom_row(d)) wrong++;
            for (k = 0; k < DCP_CUDA__WGMMA_K; k++)
                for (n = 0; n < dim; n++)
                    if (emulate_mnmajor(d, k, n) !=
                        tile + layout::offset(kc * DCP_CUDA__WGMMA_K + k, n, rows))
                        wrong++;
        }
        CHECK_EQ(wrong, 0u);
    }
}

/* The attention kernel's shared memory: atoms, the budget, the staging inside K and V. */
static void test_attention_tiles_fit(void)
{
    typedef dcp_cuda__attn_sm90_traits<64> k64;
    typedef dcp_cuda__attn_sm90_traits<128> k128;
    CHECK_EQ(k64::Q_BYTES % layout::ATOM_BYTES, 0u);
    CHECK_EQ(k128::KV_BYTES % layout::ATOM_BYTES, 0u);
    CHECK(k128::SMEM <= DCP_CUDA__SM90_MAX_SMEM);
    CHECK(desc::encodable((uint32_t)k128::SMEM - layout::ATOM_BYTES));
    CHECK(desc::encodable(k128::TILE_KEYS * layout::ROW_BYTES)); /* V's leading offset */
}

/* The TMA map of K [1000 rows, 8 heads, 128]: boxes of one 64-column swizzle row of one head
   and 128 rows; the arguments cuTensorMapEncodeTiled or the swizzle would refuse, refused
   first with a message naming them. */
static void test_tma_geometry(void)
{
    static unsigned char buffer[64];
    unsigned char *base = buffer + (16 - (uintptr_t)buffer % 16) % 16;
    dcp_cuda__tma_geometry g;
    dcp_error error;
    int i;
    CHECK_EQ(dcp_cuda__tma_geometry_of(base, 1000, 8, 128, 128, &g, &error), DCP_OK);
    CHECK_EQ(g.dims[0], (cuuint64_t)128);
    CHECK_EQ(g.dims[1], (cuuint64_t)8);
    CHECK_EQ(g.dims[2], (cuuint64_t)1000);
    CHECK_EQ(g.strides[0], (cuuint64_t)128 * 2);     /* bytes from one head to the next */
    CHECK_EQ(g.strides[1], (cuuint64_t)8 * 128 * 2); /* from one row to the next */
    CHECK_EQ(g.box[0] * layout::ELEMENT_BYTES, layout::ROW_BYTES); /* one swizzle row */
    CHECK_EQ(g.box[1], (cuuint32_t)1);
    CHECK_EQ(g.box[2], (cuuint32_t)128);
    for (i = 0; i < DCP_CUDA__TMA_RANK; i++) CHECK_EQ(g.element_strides[i], (cuuint32_t)1);

    CHECK_EQ(dcp_cuda__tma_geometry_of(base + 8, 1000, 8, 128, 128, &g, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "16-byte aligned");
    CHECK_EQ(dcp_cuda__tma_geometry_of(NULL, 1000, 8, 128, 128, &g, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_cuda__tma_geometry_of(base, 0, 8, 128, 128, &g, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "rows 0");
    CHECK_EQ(dcp_cuda__tma_geometry_of(base, 1000, 0, 128, 128, &g, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "heads 0");
    CHECK_EQ(dcp_cuda__tma_geometry_of(base, 1000, 8, 96, 128, &g, &error), DCP_ERROR_UNSUPPORTED);
    CHECK_CONTAINS(error.message, "head_dim 96");
    CHECK_EQ(dcp_cuda__tma_geometry_of(base, 1000, 8, 128, 12, &g, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "box_rows 12");
    CHECK_EQ(dcp_cuda__tma_geometry_of(base, 1000, 8, 128, 264, &g, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "box_rows 264");
    CHECK_EQ(dcp_cuda__tma_geometry_of(base, 1000, INT32_MAX, 512, 128, &g, &error),
             DCP_ERROR_UNSUPPORTED);
    CHECK_CONTAINS(error.message, "2^40");
}

/* The encoder through the runtime: a map where a driver is present (required with a GPU);
   without one (the CPU execution model has none), DCP_ERROR_CUDA naming the encoder, never a
   crash or a link error. */
static void test_tma_encode(void)
{
    const int64_t rows = 1000;
    const int32_t heads = 8, head_dim = 128;
    dcp_cuda__tma_geometry g;
    CUtensorMap map;
    dcp_error error;
    cuda_arena arena;
    dcp_status status;
    void *base;
    memset(&arena, 0, sizeof arena);
    base = cuda_test_gpu() ? dev_alloc(&arena, (size_t)rows * heads * head_dim * 2)
                           : host_alloc(&arena, (size_t)rows * heads * head_dim * 2);
    CHECK_EQ(dcp_cuda__tma_geometry_of(base, rows, heads, head_dim, 128, &g, &error), DCP_OK);
    CHECK_EQ(dcp_cuda__tma_encode(&map, &g, base, DCP_DTYPE_FLOAT32, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "float32");
    status = dcp_cuda__tma_encode(&map, &g, base, DCP_DTYPE_BFLOAT16, &error);
    if (cuda_test_gpu() && !cuda_test_model()) {
        if (status != DCP_OK) fprintf(stderr, "%s\n", error.message);
        CHECK_EQ(status, DCP_OK);
    } else {
        CHECK(status == DCP_OK || status == DCP_ERROR_CUDA);
        if (status != DCP_OK) CHECK_CONTAINS(error.message, "cuTensorMapEncodeTiled");
    }
    cuda_arena_free(&arena);
}

/* ====================================================================== GPU: wgmma products */

enum { GEMM_M = 64, GEMM_K = 128, GEMM_THREADS = DCP_CUDA__WARPGROUP_THREADS };

/* Row and column of accumulator element (n, e) of this thread (the m64nN C layout). */
__device__ __forceinline__ void accumulator_place(int n, int e, int *row, int *col)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    *row = warp * 16 + (lane >> 2) + 8 * (e >> 1);
    *col = n * 8 + 2 * (lane & 3) + (e & 1);
}

#ifdef DCP_CUDA__SM90A
/* NaN in every accumulator and the fences before the first product: its k step (scale-d 0)
   must overwrite them, not add to them. */
template <int B> __device__ __forceinline__ void start_products(float (&d)[B][4])
{
    for (int n = 0; n < B; n++)
        for (int e = 0; e < 4; e++) d[n][e] = NAN;
    dcp_cuda__fence_operands(d);
    dcp_cuda__wgmma_fence();
}

/* Waits for the issued products and writes the accumulators to c [64][8 B]. */
template <int B> __device__ __forceinline__ void finish_products(float (&d)[B][4], float *c)
{
    dcp_cuda__wgmma_commit();
    dcp_cuda__wgmma_wait<0>();
    dcp_cuda__fence_operands(d);
    for (int n = 0; n < B; n++)
        for (int e = 0; e < 4; e++) {
            int row, col;
            accumulator_place(n, e, &row, &col);
            c[row * 8 * B + col] = d[n][e];
        }
}
#endif

/* c [64][N] float = a [64][K] b[N][K]^T: both operands K-major in swizzled shared memory. */
template <typename T, int N>
__global__ void __launch_bounds__(GEMM_THREADS) gemm_ss_kernel(const T *a, const T *b, float *c)
{
#ifdef DCP_CUDA__SM90A
    __shared__ __align__(1024) unsigned char sa[GEMM_M * GEMM_K * 2], sb[N * GEMM_K * 2];
    float d[N / 8][4];
    dcp_cuda__load_tile_sw128<T, GEMM_K, GEMM_M, GEMM_THREADS>(sa, a, GEMM_K, 0, 0, GEMM_M);
    dcp_cuda__load_tile_sw128<T, GEMM_K, N, GEMM_THREADS>(sb, b, GEMM_K, 0, 0, N);
    dcp_cuda__cp_async_commit();
    dcp_cuda__cp_async_wait<0>();
    dcp_cuda__fence_proxy_async();
    __syncthreads();
    start_products(d);
#pragma unroll
    for (int kc = 0; kc < GEMM_K / DCP_CUDA__WGMMA_K; kc++)
        dcp_cuda__wgmma<T, N>::ss(
            d, dcp_cuda__desc_kmajor(dcp_cuda__smem_address(sa), GEMM_M, 0, kc),
            dcp_cuda__desc_kmajor(dcp_cuda__smem_address(sb), N, 0, kc), kc > 0);
    finish_products(d, c);
#else
    (void)a, (void)b, (void)c;
#endif
}

/* c [64][N] float = a [64][K] b [K][N]: A from registers (placed as accumulators of a
   64 x K product, then converted as the attention kernel converts P), B MN-major in swizzled
   shared memory. */
template <typename T, int N>
__global__ void __launch_bounds__(GEMM_THREADS) gemm_rs_kernel(const float *a, const T *b,
                                                               float *c)
{
#ifdef DCP_CUDA__SM90A
    __shared__ __align__(1024) unsigned char sb[GEMM_K * N * 2];
    float p[GEMM_K / 8][4], d[N / 8][4];
    uint32_t fragments[GEMM_K / DCP_CUDA__WGMMA_K][4];
    int n, e, kc;
    dcp_cuda__load_tile_sw128<T, N, GEMM_K, GEMM_THREADS>(sb, b, N, 0, 0, GEMM_K);
    dcp_cuda__cp_async_commit();
    for (n = 0; n < GEMM_K / 8; n++)
        for (e = 0; e < 4; e++) {
            int row, col;
            accumulator_place(n, e, &row, &col);
            p[n][e] = a[row * GEMM_K + col];
        }
    for (kc = 0; kc < GEMM_K / DCP_CUDA__WGMMA_K; kc++)
        dcp_cuda__a_from_accumulators<T, GEMM_K / 8>(fragments[kc], p, kc);
    dcp_cuda__cp_async_wait<0>();
    dcp_cuda__fence_proxy_async();
    __syncthreads();
    start_products(d);
#pragma unroll
    for (kc = 0; kc < GEMM_K / DCP_CUDA__WGMMA_K; kc++)
        dcp_cuda__wgmma<T, N>::rs(
            d, fragments[kc], dcp_cuda__desc_mnmajor(dcp_cuda__smem_address(sb), GEMM_K, kc),
            kc > 0);
    finish_products(d, c);
#else
    (void)a, (void)b, (void)c;
#endif
}

/* 1 when the products cannot run here. No GPU: the test is skipped. A device of compute
   capability 9.0 must offer the wgmma path (this test is built for sm_90a): if it does not,
   that is a failure. Any other device must not offer it (the dispatch would launch sm_90a
   code it cannot run): checked, and the products are not run. The CPU execution model runs
   no sm_90a code (it does not emulate wgmma): the path is unavailable there on every
   profile, and the test is skipped. */
static int products_cannot_run(void)
{
    int32_t available = -1;
    int device = 0, major = 0, minor = 0;
    dcp_error error;
    if (!cuda_test_gpu()) {
        test_skip("no CUDA device: skipped");
        return 1;
    }
    if (cuda_test_model()) {
        CHECK_EQ(dcp_cuda_attention_path_available(DCP_CUDA_ATTENTION_PATH_WGMMA, &available,
                                                   &error),
                 DCP_OK);
        CHECK_EQ(available, 0);
        test_skip("wgmma products need an sm_90a device: the CPU execution model does not "
                  "emulate wgmma");
        return 1;
    }
    CHECK_EQ(dcp_cuda_attention_path_available(DCP_CUDA_ATTENTION_PATH_WGMMA, &available, &error),
             DCP_OK);
    CUDA_TEST_CALL(cudaGetDevice(&device));
    CUDA_TEST_CALL(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    CUDA_TEST_CALL(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    if (major == 9 && minor == 0) {
        CHECK_EQ(available, 1);
        return available != 1;
    }
    CHECK_EQ(available, 0);
    printf("device %d.%d: the wgmma path is unavailable, as it must be; products not run\n",
           major, minor);
    return 1;
}

/* c = a b^T (transposed_b) or a b in double, a [64][K], b [N][K] or [K][N]. */
static void cpu_product(const float *a, const float *b, float *c, int n_cols, int transposed_b)
{
    int i, j, k;
    for (i = 0; i < GEMM_M; i++)
        for (j = 0; j < n_cols; j++) {
            double sum = 0.0;
            for (k = 0; k < GEMM_K; k++)
                sum += (double)a[i * GEMM_K + k] *
                       (transposed_b ? b[j * GEMM_K + k] : b[k * n_cols + j]);
            c[i * n_cols + j] = (float)sum;
        }
}

template <typename T> static void gemm_ss_case(dcp_dtype dtype, uint64_t stream)
{
    enum { N = 128 };
    cuda_arena arena;
    dcp_rng rng = cuda_test_rng(stream);
    float *a, *b, *ref, *got, *dc;
    memset(&arena, 0, sizeof arena);
    a = random_values(&arena, &rng, dtype, GEMM_M * GEMM_K); /* rounded to dtype */
    b = random_values(&arena, &rng, dtype, N * GEMM_K);
    ref = host_floats(&arena, GEMM_M * N);
    dc = (float *)dev_alloc(&arena, GEMM_M * N * sizeof(float));
    poison(dc, GEMM_M * N * sizeof(float));
    CUDA_TEST_CALL(dcp_cuda__launch(gemm_ss_kernel<T, N>, 1, GEMM_THREADS, 0, NULL,
                                    (const T *)upload(&arena, dtype, a, GEMM_M * GEMM_K),
                                    (const T *)upload(&arena, dtype, b, N * GEMM_K), dc));
    CUDA_TEST_CALL(cudaDeviceSynchronize());
    got = download(&arena, DCP_DTYPE_FLOAT32, dc, GEMM_M * N);
    cpu_product(a, b, ref, N, 1);
    CHECK(compare(dtype == DCP_DTYPE_BFLOAT16 ? "wgmma ss bf16 m64n128k16 x 8"
                                              : "wgmma ss fp16 m64n128k16 x 8",
                  got, ref, GEMM_M * N, tolerance_sum()));
    cuda_arena_free(&arena);
}

template <typename T, int N> static void gemm_rs_case(dcp_dtype dtype, uint64_t stream)
{
    cuda_arena arena;
    dcp_rng rng = cuda_test_rng(stream);
    float *a, *b, *ref, *got, *dc;
    char what[64];
    memset(&arena, 0, sizeof arena);
    a = random_values(&arena, &rng, dtype, GEMM_M * GEMM_K); /* the kernel rounds it to T */
    b = random_values(&arena, &rng, dtype, GEMM_K * N);
    ref = host_floats(&arena, GEMM_M * N);
    dc = (float *)dev_alloc(&arena, GEMM_M * N * sizeof(float));
    poison(dc, GEMM_M * N * sizeof(float));
    CUDA_TEST_CALL(dcp_cuda__launch(gemm_rs_kernel<T, N>, 1, GEMM_THREADS, 0, NULL,
                                    (const float *)upload(&arena, DCP_DTYPE_FLOAT32, a,
                                                          GEMM_M * GEMM_K),
                                    (const T *)upload(&arena, dtype, b, GEMM_K * N), dc));
    CUDA_TEST_CALL(cudaDeviceSynchronize());
    got = download(&arena, DCP_DTYPE_FLOAT32, dc, GEMM_M * N);
    cpu_product(a, b, ref, N, 0);
    snprintf(what, sizeof what, "wgmma rs %s m64n%dk16 x 8", dtype_name(dtype), N);
    CHECK(compare(what, got, ref, GEMM_M * N, tolerance_sum()));
    cuda_arena_free(&arena);
}

static void test_wgmma_ss(void)
{
    if (products_cannot_run()) return;
    gemm_ss_case<__nv_bfloat16>(DCP_DTYPE_BFLOAT16, 1);
    gemm_ss_case<__half>(DCP_DTYPE_FLOAT16, 2);
}

static void test_wgmma_rs(void)
{
    if (products_cannot_run()) return;
    gemm_rs_case<__nv_bfloat16, 64>(DCP_DTYPE_BFLOAT16, 3);
    gemm_rs_case<__nv_bfloat16, 128>(DCP_DTYPE_BFLOAT16, 4);
    gemm_rs_case<__half, 64>(DCP_DTYPE_FLOAT16, 5);
    gemm_rs_case<__half, 128>(DCP_DTYPE_FLOAT16, 6);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"swizzle_permutes_each_atom", test_swizzle_permutes_each_atom},
        {"tile_offsets", test_tile_offsets},
        {"descriptor_fields_round_trip", test_descriptor_fields_round_trip},
        {"kmajor_descriptors_read_the_tile", test_kmajor_descriptors_read_the_tile},
        {"mnmajor_descriptors_read_the_tile", test_mnmajor_descriptors_read_the_tile},
        {"attention_tiles_fit", test_attention_tiles_fit},
        {"tma_geometry", test_tma_geometry},
        {"tma_encode", test_tma_encode},
        {"wgmma_ss", test_wgmma_ss},
        {"wgmma_rs", test_wgmma_rs},
    };
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
