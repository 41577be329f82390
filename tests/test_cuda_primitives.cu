/* The primitives the CPU execution model emulates, against references written from the PTX
   ISA: mma.sync m16n8k16 (bf16, fp16 -> f32), ldmatrix.x4 (plain and .trans), cp.async with
   its zero fill and group waits, ex2.approx.ftz, the bf16/fp16 pairs a register packs, warp
   shuffles. Each kernel goes through dcp_cuda.cu's own wrappers (this file includes it, like
   tests/test_wgmma.cu), so on a GPU the test confirms that the hardware does what the
   references say, and on the model (build/test_cuda_primitives-cpu) that the twins do: the
   layouts the model assumes are the hardware's. Without either, "no CUDA device: skipped".

   The references are element-centric (which lane and register holds matrix element (r, c)),
   the twins lane-centric (which elements lane l holds), so neither is the other's copy.
   Random inputs (seed printed; DCP_TEST_SEED=N repeats), outputs poisoned with NaN.
   Bitwise where the instruction is exact (ldmatrix, cp.async, shuffles, the conversions);
   mma within the accumulation error of a tensor core (products exact, sums in float32 in an
   order of the hardware's: MMA_ULPS units of float32 rounding of the sum of magnitudes);
   ex2.approx within its documented 2^-22 relative error (EX2_RELATIVE here), and exactly 0 where
   the result would be subnormal (ftz). */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "../dcp_cuda.cu"
#include "cuda_test_util.h"

enum { WARP = 32, CASES = 64 };
#define MMA_ULPS 16.0
#define EX2_RELATIVE 2.4e-7 /* 2^-22 */
#define FLOAT_EPSILON 1.1920928955078125e-7

/* ============================================================================ kernels */

/* One warp per case: lane l's fragments in, its accumulators out. */
template <typename T>
__global__ void mma_kernel(const uint32_t *a, const uint32_t *b, const float *c, float *d)
{
    const int lane = threadIdx.x, at = blockIdx.x * WARP + lane;
    uint32_t af[4];
    float acc[4];
    for (int i = 0; i < 4; i++) af[i] = a[at * 4 + i], acc[i] = c[at * 4 + i];
    dcp_cuda__mma<T>(acc, af, b[at * 2], b[at * 2 + 1]);
    for (int i = 0; i < 4; i++) d[at * 4 + i] = acc[i];
}

/* 32 rows of 8 b16 (four 8 x 8 matrices) in shared memory at slots perm[row]; lane l names
   row l. */
template <bool TRANSPOSE>
__global__ void ldmatrix_kernel(const uint16_t *rows, const int32_t *perm, uint32_t *out)
{
    DCP_CUDA__SHARED(uint16_t, tile, [WARP * 8]);
    const int lane = threadIdx.x;
    for (int i = 0; i < 8; i++) tile[perm[lane] * 8 + i] = rows[lane * 8 + i];
    __syncwarp();
    uint32_t r[4];
    dcp_cuda__ldmatrix_x4<TRANSPOSE>(r, &tile[perm[lane] * 8]);
    for (int i = 0; i < 4; i++) out[lane * 4 + i] = r[i];
}

/* Thread i copies source row i (bytes[i] of its 16 bytes, the rest zero-filled) into slot i
   in two commit groups (the first half of the threads, then the second), waits for the first
   group, then for all; each thread reads its neighbour's slot after the barrier. */
__global__ void cp_async_kernel(const uint4 *source, const int32_t *bytes, uint4 *first,
                                uint4 *all)
{
    DCP_CUDA__SHARED(uint4, slots, [WARP]);
    const int i = threadIdx.x, half = WARP / 2, neighbour = (i + 1) % half;
    if (i < half) dcp_cuda__cp_async16(&slots[i], &source[i], bytes[i]);
    dcp_cuda__cp_async_commit();
    if (i >= half) dcp_cuda__cp_async16(&slots[i], &source[i], bytes[i]);
    dcp_cuda__cp_async_commit();
    dcp_cuda__cp_async_wait<1>(); /* the first group */
    __syncthreads();
    if (i < half) first[i] = slots[neighbour];
    dcp_cuda__cp_async_wait<0>();
    __syncthreads();
    all[i] = slots[(i + 1) % WARP];
}

__global__ void ex2_kernel(const float *x, float *y, int32_t n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = dcp_cuda__exp2_scaled(x[i], 1.0f, 0.0f);
}

/* Pairs of floats packed as T: (lo, hi) -> one register, as the kernels feed P to mma. */
template <typename T> __global__ void pack_kernel(const float *x, uint32_t *out, int32_t pairs)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < pairs) out[i] = dcp_cuda__pack2<T>(x[2 * i], x[2 * i + 1]);
}

/* Each lane's value after a butterfly with every lane mask, and the warp minimum. */
__global__ void shuffle_kernel(const float *x, const int32_t *v, float *out, int32_t *minimum)
{
    const int lane = threadIdx.x;
    for (int bit = 0; bit < 5; bit++)
        out[lane * 5 + bit] = __shfl_xor_sync(DCP_CUDA__FULL_WARP, x[lane], 1 << bit);
    minimum[lane] = dcp_cuda__warp_min(v[lane]);
}

/* ============================================================ references, element-centric */

/* mma m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"): where A (16 x 16), B (16 x 8)
   and C, D (16 x 8) elements live, as (lane, register, half of the register). */
static void a_place(int r, int k, int *lane, int *reg, int *half)
{
    *lane = 4 * (r % 8) + (k % 8) / 2, *reg = (k / 8) * 2 + r / 8, *half = k % 2;
}
static void b_place(int k, int n, int *lane, int *reg, int *half)
{
    *lane = 4 * n + (k % 8) / 2, *reg = k / 8, *half = k % 2;
}
static void c_place(int r, int n, int *lane, int *index)
{
    *lane = 4 * (r % 8) + n / 2, *index = (r / 8) * 2 + n % 2;
}

static uint16_t half_bits_of(dcp_dtype dtype, float x)
{
    return dtype == DCP_DTYPE_BFLOAT16 ? bf16_from_float(x) : fp16_from_float(x);
}

template <typename T> static void mma_case(dcp_dtype dtype, uint64_t stream)
{
    cuda_arena arena;
    dcp_rng rng = cuda_test_rng(stream);
    uint32_t *a = (uint32_t *)calloc(CASES * WARP * 4, 4), *b = (uint32_t *)calloc(CASES * WARP * 2, 4);
    float *c = (float *)calloc(CASES * WARP * 4, 4), *d;
    double *want = (double *)calloc(CASES * 16 * 8, sizeof(double));
    double *magnitude = (double *)calloc(CASES * 16 * 8, sizeof(double));
    int cs, r, k, n, mismatches = 0;
    memset(&arena, 0, sizeof arena);
    for (cs = 0; cs < CASES; cs++) {
        float A[16][16], B[16][8];
        /* magnitudes from 2^-8 to 2^8, so that sums cancel and exponents differ */
        const double scale = ldexp(1.0, (int)dcp_rng_below(&rng, 17) - 8);
        for (r = 0; r < 16; r++)
            for (k = 0; k < 16; k++) {
                int lane, reg, half;
                A[r][k] = round_to(dtype, (float)(scale * dcp_rng_normal(&rng)));
                a_place(r, k, &lane, &reg, &half);
                a[(cs * WARP + lane) * 4 + reg] |= (uint32_t)half_bits_of(dtype, A[r][k]) << (16 * half);
            }
        for (k = 0; k < 16; k++)
            for (n = 0; n < 8; n++) {
                int lane, reg, half;
                B[k][n] = round_to(dtype, (float)dcp_rng_normal(&rng));
                b_place(k, n, &lane, &reg, &half);
                b[(cs * WARP + lane) * 2 + reg] |= (uint32_t)half_bits_of(dtype, B[k][n]) << (16 * half);
            }
        for (r = 0; r < 16; r++)
            for (n = 0; n < 8; n++) {
                int lane, index;
                const float cv = (float)(scale * dcp_rng_normal(&rng));
                double sum = cv, size = fabs(cv);
                c_place(r, n, &lane, &index);
                c[(cs * WARP + lane) * 4 + index] = cv;
                for (k = 0; k < 16; k++) {
                    sum += (double)A[r][k] * B[k][n];
                    size += fabs((double)A[r][k] * B[k][n]);
                }
                want[(cs * 16 + r) * 8 + n] = sum;
                magnitude[(cs * 16 + r) * 8 + n] = size;
            }
    }
    {
        const uint32_t *da = (const uint32_t *)upload_bytes(&arena, a, CASES * WARP * 16);
        const uint32_t *db = (const uint32_t *)upload_bytes(&arena, b, CASES * WARP * 8);
        const float *dc = (const float *)upload_bytes(&arena, c, CASES * WARP * 16);
        float *dd = (float *)dev_alloc(&arena, CASES * WARP * 16);
        CUDA_TEST_CALL(dcp_cuda__launch(mma_kernel<T>, CASES, WARP, 0, NULL, da, db, dc, dd));
        d = download(&arena, DCP_DTYPE_FLOAT32, dd, CASES * WARP * 4);
    }
    for (cs = 0; cs < CASES; cs++)
        for (r = 0; r < 16; r++)
            for (n = 0; n < 8; n++) {
                int lane, index;
                c_place(r, n, &lane, &index);
                const double got = d[(cs * WARP + lane) * 4 + index];
                const double w = want[(cs * 16 + r) * 8 + n];
                if (!(fabs(got - w) <= MMA_ULPS * FLOAT_EPSILON * magnitude[(cs * 16 + r) * 8 + n])) {
                    if (mismatches++ < 4)
                        fprintf(stderr, "mma %s case %d D[%d][%d]: got %.9g, want %.9g\n",
                                dtype_name(dtype), cs, r, n, got, w);
                }
            }
    CHECK_EQ(mismatches, 0);
    free(a), free(b), free(c), free(want), free(magnitude);
    cuda_arena_free(&arena);
}

static void mma_m16n8k16(void)
{
    CUDA_TEST_REQUIRE_GPU();
    mma_case<__nv_bfloat16>(DCP_DTYPE_BFLOAT16, 1);
    mma_case<__half>(DCP_DTYPE_FLOAT16, 2);
}

/* ldmatrix (PTX ISA, "Warp-level matrix load instruction: ldmatrix"): element (row, column)
   of stored matrix i reaches register i of lane 4 row + column / 2, half column % 2; with
   .trans, lane 4 column + row / 2, half row % 2. */
template <bool TRANSPOSE> static void ldmatrix_case(uint64_t stream)
{
    cuda_arena arena;
    dcp_rng rng = cuda_test_rng(stream);
    uint16_t rows[WARP * 8];
    int32_t perm[WARP];
    uint32_t *got;
    int i, j, m, row, column, wrong = 0;
    memset(&arena, 0, sizeof arena);
    for (i = 0; i < WARP * 8; i++) rows[i] = (uint16_t)dcp_rng_below(&rng, 65536);
    for (i = 0; i < WARP; i++) perm[i] = i;
    for (i = WARP - 1; i > 0; i--) { /* rows in shared memory in a random order */
        j = (int)dcp_rng_below(&rng, (uint64_t)i + 1);
        const int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    {
        uint32_t *out = (uint32_t *)dev_alloc(&arena, WARP * 16);
        CUDA_TEST_CALL(dcp_cuda__launch(ldmatrix_kernel<TRANSPOSE>, 1, WARP, 0, NULL,
                                        (const uint16_t *)upload_bytes(&arena, rows, sizeof rows),
                                        (const int32_t *)upload_bytes(&arena, perm, sizeof perm),
                                        out));
        CUDA_TEST_CALL(cudaDeviceSynchronize());
        got = (uint32_t *)host_alloc(&arena, WARP * 16);
        CUDA_TEST_CALL(cudaMemcpy(got, out, WARP * 16, cudaMemcpyDeviceToHost));
    }
    for (m = 0; m < 4; m++)
        for (row = 0; row < 8; row++)
            for (column = 0; column < 8; column++) {
                const int lane = TRANSPOSE ? 4 * column + row / 2 : 4 * row + column / 2;
                const int half = TRANSPOSE ? row % 2 : column % 2;
                const uint16_t want = rows[(m * 8 + row) * 8 + column];
                if ((uint16_t)(got[lane * 4 + m] >> (16 * half)) != want) wrong++;
            }
    CHECK_EQ(wrong, 0);
    cuda_arena_free(&arena);
}

static void ldmatrix_x4(void)
{
    CUDA_TEST_REQUIRE_GPU();
    ldmatrix_case<false>(3);
    ldmatrix_case<true>(4);
}

/* cp.async.cg 16 with src-size s: the first s bytes of the source, then zeros. */
static void cp_async_groups(void)
{
    cuda_arena arena;
    dcp_rng rng;
    unsigned char source[WARP][16], want[WARP][16];
    int32_t bytes[WARP];
    unsigned char *first, *all;
    int i, k, half = WARP / 2;
    CUDA_TEST_REQUIRE_GPU();
    rng = cuda_test_rng(5);
    memset(&arena, 0, sizeof arena);
    for (i = 0; i < WARP; i++) {
        bytes[i] = i % 17; /* every size 0..16 */
        for (k = 0; k < 16; k++) {
            source[i][k] = (unsigned char)dcp_rng_below(&rng, 256);
            want[i][k] = k < bytes[i] ? source[i][k] : 0;
        }
    }
    {
        uint4 *d_first = (uint4 *)dev_alloc(&arena, WARP * 16), *d_all = (uint4 *)dev_alloc(&arena, WARP * 16);
        CUDA_TEST_CALL(dcp_cuda__launch(cp_async_kernel, 1, WARP, 0, NULL,
                                        (const uint4 *)upload_bytes(&arena, source, sizeof source),
                                        (const int32_t *)upload_bytes(&arena, bytes, sizeof bytes),
                                        d_first, d_all));
        CUDA_TEST_CALL(cudaDeviceSynchronize());
        first = (unsigned char *)host_alloc(&arena, WARP * 16);
        all = (unsigned char *)host_alloc(&arena, WARP * 16);
        CUDA_TEST_CALL(cudaMemcpy(first, d_first, WARP * 16, cudaMemcpyDeviceToHost));
        CUDA_TEST_CALL(cudaMemcpy(all, d_all, WARP * 16, cudaMemcpyDeviceToHost));
    }
    for (i = 0; i < half; i++) CHECK(memcmp(first + 16 * i, want[(i + 1) % half], 16) == 0);
    for (i = 0; i < WARP; i++) CHECK(memcmp(all + 16 * i, want[(i + 1) % WARP], 16) == 0);
    cuda_arena_free(&arena);
}

/* ex2.approx.ftz.f32 (PTX ISA): 2^x with at most 2^-22 relative error; results below 2^-126
   (subnormal) flushed to +0, -inf gives +0, +inf gives +inf. */
static void ex2_approx_ftz(void)
{
    enum { N = 4096, SPECIAL = 6 };
    cuda_arena arena;
    dcp_rng rng;
    float x[N], *y;
    int i, wrong = 0;
    CUDA_TEST_REQUIRE_GPU();
    rng = cuda_test_rng(6);
    memset(&arena, 0, sizeof arena);
    x[0] = -INFINITY, x[1] = INFINITY, x[2] = 0.0f, x[3] = -126.0f, x[4] = -126.5f, x[5] = -149.0f;
    for (i = SPECIAL; i < N; i++) x[i] = (float)(300.0 * dcp_rng_uniform(&rng) - 160.0);
    {
        float *d_y = (float *)dev_alloc(&arena, sizeof x);
        CUDA_TEST_CALL(dcp_cuda__launch(ex2_kernel, N / 256, 256, 0, NULL,
                                        (const float *)upload_bytes(&arena, x, sizeof x), d_y,
                                        (int32_t)N));
        y = download(&arena, DCP_DTYPE_FLOAT32, d_y, N);
    }
    for (i = 0; i < N; i++) {
        const double want = exp2((double)x[i]);
        int ok;
        if (x[i] == INFINITY) ok = y[i] == INFINITY;
        else if (want < ldexp(1.0, -126)) ok = y[i] == 0.0f && !signbit(y[i]);
        else if (want > 3.4028234663852886e38) ok = y[i] == INFINITY;
        else ok = fabs(y[i] - want) <= EX2_RELATIVE * want;
        if (!ok && wrong++ < 4) fprintf(stderr, "ex2(%.9g): got %.9g, want %.9g\n", x[i], y[i], want);
    }
    CHECK_EQ(wrong, 0);
    cuda_arena_free(&arena);
}

/* float -> fp16 bits, round to nearest even, from the IEEE formats (not the toolkit's code). */
static uint16_t fp16_reference(float f)
{
    uint32_t bits, sign, mantissa;
    int exponent;
    memcpy(&bits, &f, 4);
    sign = (bits >> 16) & 0x8000u;
    exponent = (int)((bits >> 23) & 0xFF) - 127;
    mantissa = bits & 0x7FFFFFu;
    if (exponent == 128) return (uint16_t)(sign | 0x7C00u | (mantissa ? 0x200u : 0u));
    if (exponent > 15) return (uint16_t)(sign | 0x7C00u);
    {
        /* the value in units of 2^-24 (fp16's smallest subnormal), rounded to nearest even */
        const int shift = 13 + (exponent < -14 ? -14 - exponent : 0);
        const uint32_t full = exponent < -14 ? (mantissa | 0x800000u) : mantissa;
        uint32_t kept, rest, halfway;
        if (shift > 24) return (uint16_t)sign;
        kept = full >> shift, rest = full & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        if (rest > halfway || (rest == halfway && (kept & 1))) kept++;
        if (exponent < -14) return (uint16_t)(sign | kept); /* subnormal (or the smallest normal) */
        return (uint16_t)(sign | (((uint32_t)(exponent + 15) << 10) + kept));
    }
}

/* Two floats as one register of two 16-bit values, the first in the low half, each rounded
   to nearest even: ties, subnormals, overflow, infinities and NaN among them. */
template <typename T> static void pack_case(dcp_dtype dtype, uint64_t stream)
{
    enum { PAIRS = 2048 };
    static const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65520.0f, 1e-8f,
                                    5.9604645e-8f, 1.00048828125f, 1.00146484375f, 3.0e38f,
                                    INFINITY, -INFINITY, NAN, 1.00390625f, 1.01171875f};
    cuda_arena arena;
    dcp_rng rng = cuda_test_rng(stream);
    float x[2 * PAIRS];
    uint32_t *got;
    int i, wrong = 0;
    memset(&arena, 0, sizeof arena);
    for (i = 0; i < 2 * PAIRS; i++) {
        const int n = (int)(sizeof special / sizeof special[0]);
        x[i] = i < n ? special[i] : (float)(ldexp(dcp_rng_normal(&rng), (int)dcp_rng_below(&rng, 60) - 30));
    }
    {
        uint32_t *d_out = (uint32_t *)dev_alloc(&arena, PAIRS * 4);
        CUDA_TEST_CALL(dcp_cuda__launch(pack_kernel<T>, PAIRS / 256, 256, 0, NULL,
                                        (const float *)upload_bytes(&arena, x, sizeof x), d_out,
                                        (int32_t)PAIRS));
        CUDA_TEST_CALL(cudaDeviceSynchronize());
        got = (uint32_t *)host_alloc(&arena, PAIRS * 4);
        CUDA_TEST_CALL(cudaMemcpy(got, d_out, PAIRS * 4, cudaMemcpyDeviceToHost));
    }
    for (i = 0; i < 2 * PAIRS; i++) {
        const uint16_t want = dtype == DCP_DTYPE_BFLOAT16 ? bf16_from_float(x[i]) : fp16_reference(x[i]);
        const uint16_t have = (uint16_t)(got[i / 2] >> (16 * (i % 2)));
        const int nan = x[i] != x[i];
        /* NaN: any NaN pattern (the sign and payload are not specified) */
        const int ok = nan ? (dtype == DCP_DTYPE_BFLOAT16 ? (have & 0x7F80) == 0x7F80 && (have & 0x7F)
                                                          : (have & 0x7C00) == 0x7C00 && (have & 0x3FF))
                           : have == want;
        if (!ok && wrong++ < 4)
            fprintf(stderr, "%s pack of %.9g: got 0x%04x, want 0x%04x\n", dtype_name(dtype), x[i],
                    have, want);
    }
    CHECK_EQ(wrong, 0);
    cuda_arena_free(&arena);
}

static void pack_pairs(void)
{
    CUDA_TEST_REQUIRE_GPU();
    pack_case<__nv_bfloat16>(DCP_DTYPE_BFLOAT16, 7);
    pack_case<__half>(DCP_DTYPE_FLOAT16, 8);
}

/* shfl.sync.bfly: lane l receives lane l ^ m's value, bit for bit; the warp minimum. */
static void shuffles(void)
{
    cuda_arena arena;
    dcp_rng rng;
    float x[WARP], *got;
    int32_t v[WARP], *minimum, smallest = INT32_MAX;
    int lane, m;
    CUDA_TEST_REQUIRE_GPU();
    rng = cuda_test_rng(9);
    memset(&arena, 0, sizeof arena);
    for (lane = 0; lane < WARP; lane++) {
        x[lane] = (float)dcp_rng_normal(&rng);
        v[lane] = (int32_t)dcp_rng_below(&rng, 1u << 31) - (1 << 30);
        if (v[lane] < smallest) smallest = v[lane];
    }
    x[3] = NAN, x[7] = -0.0f;
    {
        float *d_out = (float *)dev_alloc(&arena, WARP * 5 * 4);
        int32_t *d_min = (int32_t *)dev_alloc(&arena, WARP * 4);
        CUDA_TEST_CALL(dcp_cuda__launch(shuffle_kernel, 1, WARP, 0, NULL,
                                        (const float *)upload_bytes(&arena, x, sizeof x),
                                        (const int32_t *)upload_bytes(&arena, v, sizeof v), d_out,
                                        d_min));
        CUDA_TEST_CALL(cudaDeviceSynchronize());
        got = (float *)host_alloc(&arena, WARP * 5 * 4);
        minimum = (int32_t *)host_alloc(&arena, WARP * 4);
        CUDA_TEST_CALL(cudaMemcpy(got, d_out, WARP * 5 * 4, cudaMemcpyDeviceToHost));
        CUDA_TEST_CALL(cudaMemcpy(minimum, d_min, WARP * 4, cudaMemcpyDeviceToHost));
    }
    for (lane = 0; lane < WARP; lane++) {
        for (m = 0; m < 5; m++) CHECK(memcmp(&got[lane * 5 + m], &x[lane ^ (1 << m)], 4) == 0);
        CHECK_EQ(minimum[lane], smallest);
    }
    cuda_arena_free(&arena);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"mma_m16n8k16", mma_m16n8k16}, {"ldmatrix_x4", ldmatrix_x4},
        {"cp_async_groups", cp_async_groups}, {"ex2_approx_ftz", ex2_approx_ftz},
        {"pack_pairs", pack_pairs}, {"shuffles", shuffles},
    };
    if (cuda_test_gpu()) cuda_test_seed();
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
