/* kernel_report.cc - the kernel profile of dcp_cuda.cu from the CPU execution model (issue 35):
   every kernel on fixed shapes, run on the model with its profile on (profile.h says what is
   measured), and from the counts a speed-of-light lower bound on an A100 and an H100:

     time >= max(DRAM bytes / bandwidth, mma work / tensor peak, warp instructions / issue rate)

   DRAM bytes: the distinct 32-byte sectors of device memory the kernel touched (each moved at
   least once); mma work: 2 x 16 x 8 x 16 flops per mma.sync.m16n8k16; warp instructions: the
   memory requests, mma, shuffles and barriers the model saw (every other instruction is left
   out, so this term is a lower bound too). The hardware figures are HARDWARE below, with their
   sources. Nothing here ran on a GPU.

   build/kernel_report-cpu [--small] [--markdown FILE] [--kernels FILE] [--check FILE]
                           [--write-thresholds FILE] [--measured FILE]
     --small: the small shapes make test checks (the report's own shapes otherwise);
     --markdown: the tables as Markdown (make kernel-report puts them into bench/RESULTS.md);
     --kernels: the profiled kernels' mangled names, one a line (for tests/cuda_cpu/sass_profile.py);
     --check: each kernel's coalescing and bank-conflict efficiency against the minimums in FILE
       (tests/cuda_cpu/kernel_thresholds.txt), "N passed, M failed";
     --write-thresholds: today's efficiencies as the minimums;
     --measured: a GPU's times of the same cases (below), set beside the bounds per operation.

   Built by nvcc instead (build/kernel_report, the GPU round), the same cases run on the device
   and each operation is timed (CUDA events, median of --repeat runs after a warm-up):
   build/kernel_report [--repeat N] [--measured-out FILE] writes them as op, shape,
   microseconds (tab-separated, the first line the device's name) for --measured. */
#define DCP_IMPLEMENTATION /* off where the build links dcp.h's implementation apart */
#include <cuda_runtime.h>

#include "dcp.h"
#ifdef DCP_CUDA_CPU
#include "cuda_cpu.h"
#include "profile.h"

#include <dlfcn.h>
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <string>
#include <vector>

#ifdef DCP_CUDA_CPU /* the bounds are the model's; a GPU build only times */
/* ------------------------------------------------------------------------ hardware */

struct hardware {
    const char *name;
    double dram_bytes_per_second;
    double mma_flops_per_second; /* dense bf16/fp16 tensor peak */
    int multiprocessors;
    double clock_hz;      /* boost */
    int issue_per_clock; /* warp instructions an SM issues per clock: one per scheduler */
    const char *source;
};
static const hardware HARDWARE[] = {
    {"A100", 2.039e12, 312e12, 108, 1.410e9, 4,
     "A100 SXM4 80GB: NVIDIA A100 datasheet (HBM2e 2,039 GB/s; BF16 tensor 312 TFLOP/s dense); "
     "NVIDIA A100 Tensor Core GPU Architecture whitepaper (108 SMs, 1,410 MHz boost, 4 warp "
     "schedulers per SM, one instruction each per clock)"},
    {"H100", 3.35e12, 989.4e12, 132, 1.980e9, 4,
     "H100 SXM5 80GB: NVIDIA H100 datasheet (HBM3 3.35 TB/s; BF16 tensor 989.4 TFLOP/s dense, "
     "1,979 with sparsity); NVIDIA H100 Tensor Core GPU Architecture whitepaper (132 SMs, "
     "1,980 MHz max boost, 4 warp schedulers per SM). mma.sync reaches about two thirds of "
     "this peak on Hopper (wgmma the rest), so the bound is loose there"},
};
enum { HARDWARES = sizeof HARDWARE / sizeof HARDWARE[0] };
static const double MMA_FLOPS = 2.0 * 16 * 8 * 16; /* one m16n8k16 */
static const double MICROSECONDS = 1e6;
static const double MEGABYTE = 1e6;
enum { MAX_KERNELS = 64 };
#endif
enum { SEED = 35 };

/* ------------------------------------------------------------------------ helpers */

#define REPORT_CUDA(call)                                                                         \
    do {                                                                                          \
        const cudaError_t report_status_ = (call);                                                \
        if (report_status_ != cudaSuccess) {                                                      \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                        \
                    cudaGetErrorString(report_status_));                                          \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)
#define REPORT_DCP(call)                                                                          \
    do {                                                                                          \
        dcp_error report_error_;                                                                  \
        if ((call) != DCP_OK) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, report_error_.message); \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

/* The operation a case measures: on the model, run once with the profile on (the set-up around
   it is left out); on a GPU, run once to warm up, then `repeat` times between CUDA events, the
   median added to the case's time. */
#ifndef DCP_CUDA_CPU
static int repeat = 11;    /* --repeat */
static double measured_us; /* the running case's */
#endif
template <typename F> static void measured(F operation)
{
#ifdef DCP_CUDA_CPU
    dcp_cuda_cpu_profile_pause(false);
    operation();
    dcp_cuda_cpu_profile_pause(true);
#else
    operation();
    REPORT_CUDA(cudaDeviceSynchronize());
    cudaEvent_t start, stop;
    REPORT_CUDA(cudaEventCreate(&start));
    REPORT_CUDA(cudaEventCreate(&stop));
    std::vector<float> ms((size_t)repeat);
    for (float &m : ms) {
        REPORT_CUDA(cudaEventRecord(start, 0));
        operation();
        REPORT_CUDA(cudaEventRecord(stop, 0));
        REPORT_CUDA(cudaEventSynchronize(stop));
        REPORT_CUDA(cudaEventElapsedTime(&m, start, stop));
    }
    std::sort(ms.begin(), ms.end());
    measured_us += 1e3 * ms[ms.size() / 2];
    REPORT_CUDA(cudaEventDestroy(start));
    REPORT_CUDA(cudaEventDestroy(stop));
#endif
}
#define MEASURED(call) measured([&] { REPORT_DCP(call); })

/* Device buffers of one case, freed together. */
struct buffers {
    std::vector<void *> all;
    ~buffers()
    {
        for (void *p : all) cudaFree(p);
    }
    void *bytes(size_t n)
    {
        void *p = NULL;
        REPORT_CUDA(cudaMalloc(&p, n ? n : 1));
        all.push_back(p);
        return p;
    }
    /* n values uniform in [-1, 1), as bf16 (2 bytes) or float32 */
    void *random(size_t n, size_t element, uint64_t seed)
    {
        std::vector<unsigned char> host(n * element);
        dcp_rng rng;
        dcp_rng_seed(&rng, seed);
        for (size_t i = 0; i < n; i++) {
            const float f = (float)(2.0 * dcp_rng_uniform(&rng) - 1.0);
            uint32_t bits;
            memcpy(&bits, &f, sizeof bits);
            if (element == sizeof(float)) memcpy(&host[i * element], &f, sizeof f);
            else {
                const uint16_t top = (uint16_t)(bits >> 16); /* bf16 */
                memcpy(&host[i * element], &top, sizeof top);
            }
        }
        void *p = bytes(host.size());
        REPORT_CUDA(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice));
        return p;
    }
    /* documents of `length` rows, `count` of them, as a device layout (cp 1) */
    dcp_cuda_layout layout(int32_t count, int32_t length, std::vector<int32_t> &cu)
    {
        cu.resize((size_t)count + 1);
        for (int32_t i = 0; i <= count; i++) cu[(size_t)i] = i * length;
        int32_t *device = (int32_t *)bytes(cu.size() * sizeof(int32_t));
        REPORT_CUDA(cudaMemcpy(device, cu.data(), cu.size() * sizeof(int32_t),
                               cudaMemcpyHostToDevice));
        dcp_thd_layout host;
        host.num_sequences = count;
        host.cu_seqlens = cu.data();
        host.cu_seqlens_padded = cu.data();
        host.cp = 1;
        dcp_cuda_layout l;
        REPORT_DCP(dcp_cuda_layout_init(&host, device, device, &l, &report_error_));
        return l;
    }
};

/* ------------------------------------------------------------------------- the cases
   Each runs one operation of the library; profile() collects what it launched. The shapes are
   the benches' (bench/kernels_bench.cu, bench/attention_bench.cu: 64K tokens, 32 q heads and 8
   kv heads of dim 128, 8192 channels) scaled down to what the model runs in minutes: heads,
   channels and tokens fewer, documents of 1K rows (16K-row documents are out of the model's
   reach: a 16K causal document is 256 times a 1K one's attention work). */

struct attention_shape {
    int32_t documents, length, heads, kv_heads, dim, causal;
};
struct conv_shape {
    int32_t documents, length, channels, width;
};
struct rows_shape {
    int32_t documents, length, heads, dim;
};

struct report_case {
    std::string op, shape;
    void (*run)(const void *shape, buffers &b);
    const void *shape_data;
};

static size_t attention_elements(const attention_shape &s, int32_t heads)
{
    return (size_t)s.documents * s.length * heads * s.dim;
}

/* The forward, or the backward (deterministic or by atomics) after an unprofiled forward. */
static void attention(const attention_shape &s, buffers &b, int backward, int32_t deterministic)
{
    std::vector<int32_t> cu;
    const dcp_cuda_layout layout = b.layout(s.documents, s.length, cu);
    dcp_attention_params p;
    memset(&p, 0, sizeof p);
    p.num_heads = s.heads, p.num_kv_heads = s.kv_heads, p.head_dim = s.dim, p.causal = s.causal;
    const size_t qn = attention_elements(s, s.heads), kn = attention_elements(s, s.kv_heads);
    const size_t bf16 = 2, rows = (size_t)s.documents * s.length * s.heads;
    void *q = b.random(qn, bf16, SEED), *k = b.random(kn, bf16, SEED + 1);
    void *v = b.random(kn, bf16, SEED + 2), *dout = b.random(qn, bf16, SEED + 3);
    void *out = b.bytes(qn * bf16);
    float *lse = (float *)b.bytes(rows * sizeof(float));
    size_t workspace_bytes = 0;
    REPORT_DCP(dcp_cuda_attention_workspace_size(&p, &layout, &workspace_bytes, &report_error_));
    void *workspace = b.bytes(workspace_bytes);
    auto forward = [&] {
        REPORT_DCP(dcp_cuda_attention_forward_using(
            DCP_CUDA_ATTENTION_PATH_MMA_SYNC, &p, &layout, NULL, DCP_DTYPE_BFLOAT16, q, k, v,
            DCP_DTYPE_BFLOAT16, out, lse, workspace, workspace_bytes, NULL, &report_error_));
    };
    if (!backward) {
        measured(forward);
        return;
    }
    forward(); /* the backward's inputs: not measured */
    float *dq = (float *)b.bytes(qn * sizeof(float));
    float *dk = (float *)b.bytes(kn * sizeof(float)), *dv = (float *)b.bytes(kn * sizeof(float));
    REPORT_CUDA(cudaMemset(dq, 0, qn * sizeof(float)));
    REPORT_CUDA(cudaMemset(dk, 0, kn * sizeof(float)));
    REPORT_CUDA(cudaMemset(dv, 0, kn * sizeof(float)));
    MEASURED(dcp_cuda_attention_backward(&p, &layout, NULL, DCP_DTYPE_BFLOAT16, q, k, v, out,
                                         dout, lse, dq, dk, dv, deterministic, workspace,
                                         workspace_bytes, NULL, &report_error_));
}
static void attention_forward(const void *s, buffers &b)
{
    attention(*(const attention_shape *)s, b, 0, 0);
}
static void attention_backward_atomic(const void *s, buffers &b)
{
    attention(*(const attention_shape *)s, b, 1, 0);
}
static void attention_backward_deterministic(const void *s, buffers &b)
{
    attention(*(const attention_shape *)s, b, 1, 1);
}

static void conv(const conv_shape &s, buffers &b, int backward)
{
    std::vector<int32_t> cu;
    const dcp_cuda_layout layout = b.layout(s.documents, s.length, cu);
    dcp_conv1d_params p;
    memset(&p, 0, sizeof p);
    p.channels = s.channels, p.width = s.width, p.silu = 1;
    const int64_t rows = (int64_t)s.documents * s.length;
    const size_t n = (size_t)rows * s.channels, bf16 = 2;
    void *x = b.random(n, bf16, SEED), *dy = b.random(n, bf16, SEED + 1), *y = b.bytes(n * bf16);
    float *weight = (float *)b.random((size_t)s.channels * s.width, sizeof(float), SEED + 2);
    float *bias = (float *)b.random((size_t)s.channels, sizeof(float), SEED + 3);
    if (!backward) {
        MEASURED(dcp_cuda_conv1d_forward(&p, &layout, rows, DCP_DTYPE_BFLOAT16, x, weight, bias,
                                         y, NULL, &report_error_));
        return;
    }
    size_t workspace_bytes = 0;
    REPORT_DCP(dcp_cuda_conv1d_workspace_size(&p, &workspace_bytes, &report_error_));
    void *workspace = b.bytes(workspace_bytes);
    float *dweight = (float *)b.bytes((size_t)s.channels * s.width * sizeof(float));
    float *dbias = (float *)b.bytes((size_t)s.channels * sizeof(float));
    MEASURED(dcp_cuda_conv1d_backward(&p, &layout, rows, DCP_DTYPE_BFLOAT16, x, weight, bias,
                                      dy, y, dweight, dbias, workspace, workspace_bytes, NULL,
                                      &report_error_));
}
static void conv_forward(const void *s, buffers &b) { conv(*(const conv_shape *)s, b, 0); }
static void conv_backward(const void *s, buffers &b) { conv(*(const conv_shape *)s, b, 1); }

static void rope(const void *shape, buffers &b)
{
    const rows_shape &s = *(const rows_shape *)shape;
    std::vector<int32_t> cu;
    const dcp_cuda_layout layout = b.layout(s.documents, s.length, cu);
    const int32_t k_heads = s.heads / 4 > 0 ? s.heads / 4 : 1; /* the benches' 32 : 8 */
    const size_t rows = (size_t)s.documents * s.length, bf16 = 2;
    void *q = b.random(rows * s.heads * s.dim, bf16, SEED);
    void *k = b.random(rows * k_heads * s.dim, bf16, SEED + 1);
    void *q_out = b.bytes(rows * s.heads * s.dim * bf16);
    void *k_out = b.bytes(rows * k_heads * s.dim * bf16);
    MEASURED(dcp_cuda_rope_forward(NULL, &layout, 0, DCP_DTYPE_BFLOAT16, s.dim, s.heads, q, q_out,
                                   k_heads, k, k_out, NULL, &report_error_));
}

/* The accumulator's life in a ring step: init, a merge of one partial, finalize to bf16; and a
   float32 -> bf16 conversion of the same size. */
static void merges(const void *shape, buffers &b)
{
    const rows_shape &s = *(const rows_shape *)shape;
    std::vector<int32_t> cu;
    const dcp_cuda_layout layout = b.layout(s.documents, s.length, cu);
    dcp_attention_params p;
    memset(&p, 0, sizeof p);
    p.num_heads = s.heads, p.head_dim = s.dim;
    const size_t rows = (size_t)s.documents * s.length, n = rows * s.heads * s.dim;
    float *part = (float *)b.random(n, sizeof(float), SEED);
    float *part_lse = (float *)b.random(rows * s.heads, sizeof(float), SEED + 1);
    float *acc = (float *)b.bytes(n * sizeof(float));
    float *acc_lse = (float *)b.bytes(rows * s.heads * sizeof(float));
    float *lse = (float *)b.bytes(rows * s.heads * sizeof(float));
    void *out = b.bytes(n * 2);
    measured([&] {
        REPORT_DCP(dcp_cuda_acc_init(&p, &layout, acc, acc_lse, NULL, &report_error_));
        REPORT_DCP(dcp_cuda_acc_merge(&p, &layout, DCP_HALF_ALL, part, part_lse, acc, acc_lse,
                                      NULL, &report_error_));
        REPORT_DCP(dcp_cuda_acc_finalize(&p, &layout, 0, acc, acc_lse, DCP_DTYPE_BFLOAT16, out,
                                         lse, NULL, &report_error_));
        REPORT_DCP(dcp_cuda_convert(part, DCP_DTYPE_BFLOAT16, out, (int64_t)n, NULL,
                                    &report_error_));
    });
}

/* The head-parallel all-to-all's copies: a channel slice of every row packed into a message
   and unpacked back (segments of one document each); the MTP roll's gather and shift. */
static void a2a_roll(const void *shape, buffers &b)
{
    const rows_shape &s = *(const rows_shape *)shape;
    const size_t slice = (size_t)s.dim * 2, pitch = slice * (size_t)s.heads;
    const size_t rows = (size_t)s.documents * s.length;
    std::vector<dcp_a2a_segment> host((size_t)s.documents);
    for (int32_t i = 0; i < s.documents; i++)
        host[(size_t)i] = {(int64_t)i * s.length, s.length, (int64_t)(i * s.length * pitch),
                           (int64_t)(i * s.length * slice)};
    dcp_a2a_segment *segments = (dcp_a2a_segment *)b.bytes(host.size() * sizeof host[0]);
    REPORT_CUDA(cudaMemcpy(segments, host.data(), host.size() * sizeof host[0],
                           cudaMemcpyHostToDevice));
    void *local = b.random(rows * pitch / 2, 2, SEED), *message = b.bytes(rows * slice);
    std::vector<int32_t> cu;
    const dcp_cuda_layout layout = b.layout(s.documents, s.length, cu);
    void *in = b.random(rows * pitch / 2, 2, SEED + 1), *out = b.bytes(rows * pitch);
    void *boundaries = b.bytes((size_t)DCP_MTP_ROLL_HALVES * s.documents * pitch);
    measured([&] {
        REPORT_DCP(dcp_cuda_a2a_copy(segments, s.documents, s.documents, (int64_t)rows, slice,
                                     pitch, DCP_A2A_PACK, local, message, NULL, &report_error_));
        REPORT_DCP(dcp_cuda_a2a_copy(segments, s.documents, s.documents, (int64_t)rows, slice,
                                     pitch, DCP_A2A_UNPACK, local, message, NULL,
                                     &report_error_));
        REPORT_DCP(dcp_cuda_mtp_roll_gather(&layout, 0, pitch, in, boundaries, NULL,
                                            &report_error_));
        REPORT_DCP(dcp_cuda_mtp_roll_shift(&layout, 0, pitch, in, boundaries, out, NULL,
                                           &report_error_));
    });
}

/* The report's shapes and the small ones make test checks. */
static const attention_shape ATTENTION[] = {
    {2, 1024, 2, 1, 64, 1}, {2, 1024, 2, 1, 64, 0}, {2, 1024, 2, 1, 128, 1},
    {2, 1024, 2, 1, 128, 0}, {1, 4096, 1, 1, 64, 1}};
static const conv_shape CONV[] = {{2, 1024, 1024, 2}, {2, 1024, 1024, 3}, {2, 1024, 1024, 4}};
static const rows_shape ROWS[] = {{2, 1024, 8, 128}};
#ifdef DCP_CUDA_CPU /* make test's, on the model only */
static const attention_shape ATTENTION_SMALL[] = {{2, 128, 2, 1, 64, 1}, {2, 128, 2, 1, 128, 0}};
static const conv_shape CONV_SMALL[] = {{2, 128, 512, 4}};
static const rows_shape ROWS_SMALL[] = {{2, 128, 4, 128}};
#endif

static std::string attention_label(const attention_shape &s)
{
    char text[96];
    snprintf(text, sizeof text, "%dx%d rows, %d:%d heads, d%d, %s", s.documents, s.length,
             s.heads, s.kv_heads, s.dim, s.causal ? "causal" : "full");
    return text;
}
static std::string conv_label(const conv_shape &s)
{
    char text[96];
    snprintf(text, sizeof text, "%dx%d rows, %d channels, width %d", s.documents, s.length,
             s.channels, s.width);
    return text;
}
static std::string rows_label(const rows_shape &s)
{
    char text[96];
    snprintf(text, sizeof text, "%dx%d rows, %d heads, d%d", s.documents, s.length, s.heads,
             s.dim);
    return text;
}

template <size_t N, size_t M, size_t K>
static std::vector<report_case> cases_of(const attention_shape (&attention_shapes)[N],
                                         const conv_shape (&conv_shapes)[M],
                                         const rows_shape (&rows_shapes)[K])
{
    std::vector<report_case> cases;
    for (const attention_shape &s : attention_shapes) {
        cases.push_back({"attention forward", attention_label(s), attention_forward, &s});
        cases.push_back({"attention backward", attention_label(s), attention_backward_atomic, &s});
        cases.push_back({"attention backward deterministic", attention_label(s),
                         attention_backward_deterministic, &s});
    }
    for (const conv_shape &s : conv_shapes) {
        cases.push_back({"conv1d forward", conv_label(s), conv_forward, &s});
        cases.push_back({"conv1d backward", conv_label(s), conv_backward, &s});
    }
    for (const rows_shape &s : rows_shapes) {
        cases.push_back({"rope", rows_label(s), rope, &s});
        cases.push_back({"merges", rows_label(s), merges, &s});
        cases.push_back({"a2a and roll", rows_label(s), a2a_roll, &s});
    }
    return cases;
}

#ifdef DCP_CUDA_CPU
/* ------------------------------------------------------------------------ figures */

struct row {
    std::string op, shape, kernel;
    dcp_cuda_cpu_kernel_profile p;
    int registers, blocks_per_sm;
};

/* "attn_forward_kernel<bf16, 128>" of "void dcp_cuda__attn_forward_kernel<__nv_bfloat16,
   128>(dcp_cuda__attn_args)". */
static std::string short_name(const char *demangled)
{
    std::string s = demangled;
    const size_t open = s.find('(');
    if (open != std::string::npos) s = s.substr(0, open);
    for (const char *drop : {"void ", "dcp_cuda__"}) {
        const size_t at = s.find(drop);
        if (at != std::string::npos) s.erase(at, strlen(drop));
    }
    for (size_t at; (at = s.find("__nv_bfloat16")) != std::string::npos;) s.replace(at, 13, "bf16");
    return s;
}

static double global_efficiency(const dcp_cuda_cpu_kernel_profile &p)
{
    uint64_t units = 0, ideal = 0;
    for (int c = 0; c < DCP_CUDA_CPU_FIRST_SHARED_CLASS; c++)
        units += p.memory[c].units, ideal += p.memory[c].ideal_units;
    return units ? (double)ideal / (double)units : 1.0;
}
static double shared_efficiency(const dcp_cuda_cpu_kernel_profile &p)
{
    uint64_t units = 0, ideal = 0;
    for (int c = DCP_CUDA_CPU_FIRST_SHARED_CLASS; c < DCP_CUDA_CPU_MEMORY_CLASSES; c++)
        units += p.memory[c].units, ideal += p.memory[c].ideal_units;
    return units ? (double)ideal / (double)units : 1.0;
}
static uint64_t warp_instructions(const dcp_cuda_cpu_kernel_profile &p)
{
    uint64_t n = p.mma + p.collectives + p.barriers;
    for (int c = 0; c < DCP_CUDA_CPU_MEMORY_CLASSES; c++) n += p.memory[c].requests;
    return n;
}

/* The lower bound on hardware h in seconds, and its limiting term. */
static double speed_of_light(const dcp_cuda_cpu_kernel_profile &p, const hardware &h,
                             const char **limit)
{
    const double memory = (double)p.dram_bytes / h.dram_bytes_per_second;
    const double math = (double)p.mma * MMA_FLOPS / h.mma_flops_per_second;
    const double issue = (double)warp_instructions(p) /
                         (h.multiprocessors * h.issue_per_clock * h.clock_hz);
    *limit = "memory";
    double t = memory;
    if (math > t) t = math, *limit = "mma";
    if (issue > t) t = issue, *limit = "issue";
    return t;
}

static void profile(const report_case &c, std::vector<row> &rows)
{
    buffers b;
    dcp_cuda_cpu_kernel_profile kernels[MAX_KERNELS];
    dcp_cuda_cpu_profile_begin();
    dcp_cuda_cpu_profile_pause(true); /* on only inside measured() */
    c.run(c.shape_data, b);
    const int n = dcp_cuda_cpu_profile_end(kernels, MAX_KERNELS);
    REPORT_CUDA(cudaGetLastError());
    for (int i = 0; i < n && i < MAX_KERNELS; i++) {
        row r{c.op, c.shape, short_name(kernels[i].name), kernels[i], 0, 0};
        cudaFuncAttributes a;
        if (cudaFuncGetAttributes(&a, kernels[i].function) == cudaSuccess) r.registers = a.numRegs;
        REPORT_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &r.blocks_per_sm, kernels[i].function, (int)kernels[i].block_threads,
            kernels[i].dynamic_shared));
        rows.push_back(r);
    }
}

/* --------------------------------------------------------------------------- output */

static void print_summary(FILE *f, const std::vector<row> &rows)
{
    fprintf(f, "| op | shape | kernel | launches x blocks x threads | regs | blocks/SM | "
               "global sectors/req (ideal) | global eff. | shared wavefronts/req (ideal) | "
               "shared eff. | cp.async MB | mma | DRAM MB |");
    for (const hardware &h : HARDWARE) fprintf(f, " %s bound µs (limit) |", h.name);
    fprintf(f, "\n|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (int i = 0; i < HARDWARES; i++) fprintf(f, "---|");
    fprintf(f, "\n");
    for (const row &r : rows) {
        const dcp_cuda_cpu_kernel_profile &p = r.p;
        uint64_t greq = 0, gunits = 0, gideal = 0, sreq = 0, sunits = 0, sideal = 0;
        for (int c = 0; c < DCP_CUDA_CPU_MEMORY_CLASSES; c++) {
            const dcp_cuda_cpu_memory_figures &m = p.memory[c];
            const bool global = c < DCP_CUDA_CPU_FIRST_SHARED_CLASS;
            (global ? greq : sreq) += m.requests;
            (global ? gunits : sunits) += m.units;
            (global ? gideal : sideal) += m.ideal_units;
        }
        fprintf(f, "| %s | %s | `%s` | %llu x %llu x %u | %d | %d | ", r.op.c_str(),
                r.shape.c_str(), r.kernel.c_str(), (unsigned long long)p.launches,
                (unsigned long long)(p.blocks / (p.launches ? p.launches : 1)), p.block_threads,
                r.registers, r.blocks_per_sm);
        if (greq) fprintf(f, "%.2f (%.2f) | %.0f%% | ", (double)gunits / greq,
                          (double)gideal / greq, 100 * global_efficiency(p));
        else fprintf(f, "- | - | ");
        if (sreq) fprintf(f, "%.2f (%.2f) | %.0f%% | ", (double)sunits / sreq,
                          (double)sideal / sreq, 100 * shared_efficiency(p));
        else fprintf(f, "- | - | ");
        fprintf(f, "%.2f | %llu | %.2f |",
                (double)p.memory[DCP_CUDA_CPU_CP_ASYNC_SHARED].bytes / MEGABYTE,
                (unsigned long long)p.mma, (double)p.dram_bytes / MEGABYTE);
        for (const hardware &h : HARDWARE) {
            const char *limit;
            const double t = speed_of_light(p, h, &limit);
            fprintf(f, " %.2f (%s) |", t * MICROSECONDS, limit);
        }
        fprintf(f, "\n");
    }
}

static void print_classes(FILE *f, const std::vector<row> &rows)
{
    fprintf(f, "| op | shape | kernel | instruction | requests | bytes/req | "
               "sectors or wavefronts/req | ideal/req | efficiency |\n"
               "|---|---|---|---|---|---|---|---|---|\n");
    for (const row &r : rows)
        for (int c = 0; c < DCP_CUDA_CPU_MEMORY_CLASSES; c++) {
            const dcp_cuda_cpu_memory_figures &m = r.p.memory[c];
            if (!m.requests) continue;
            fprintf(f, "| %s | %s | `%s` | %s | %llu | %.1f | %.2f | %.2f | %.0f%% |\n",
                    r.op.c_str(), r.shape.c_str(), r.kernel.c_str(),
                    dcp_cuda_cpu_memory_class_names[c], (unsigned long long)m.requests,
                    (double)m.bytes / m.requests, (double)m.units / m.requests,
                    (double)m.ideal_units / m.requests,
                    100.0 * (double)m.ideal_units / (double)m.units);
        }
}

static void print_hardware(FILE *f)
{
    fprintf(f, "| device | DRAM GB/s | tensor TFLOP/s (bf16 dense) | SMs | boost MHz | "
               "issue/SM/clock | source |\n|---|---|---|---|---|---|---|\n");
    for (const hardware &h : HARDWARE)
        fprintf(f, "| %s | %.0f | %.1f | %d | %.0f | %d | %s |\n", h.name,
                h.dram_bytes_per_second / 1e9, h.mma_flops_per_second / 1e12, h.multiprocessors,
                h.clock_hz / 1e6, h.issue_per_clock, h.source);
}

/* A GPU's times of the cases (build/kernel_report --measured-out): the device's name on the first
   line, then op, shape, microseconds, tab-separated. */
struct measurement {
    std::string op, shape;
    double microseconds;
};
static std::vector<measurement> read_measured(const char *path, std::string *device)
{
    std::vector<measurement> result;
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        exit(1);
    }
    char line[512];
    if (fgets(line, sizeof line, f)) *device = std::string(line, strcspn(line, "\n"));
    while (fgets(line, sizeof line, f)) {
        const std::string text(line, strcspn(line, "\n"));
        const size_t a = text.find('\t'), b = text.find('\t', a + 1);
        if (a == std::string::npos || b == std::string::npos) continue;
        result.push_back({text.substr(0, a), text.substr(a + 1, b - a - 1),
                          atof(text.c_str() + b + 1)});
    }
    fclose(f);
    return result;
}

/* Per operation and shape: the sum of its kernels' bounds on each device, and the measured time
   beside it where a GPU round brought one. */
static void print_operations(FILE *f, const std::vector<row> &rows,
                             const std::vector<measurement> &measured, const std::string &device)
{
    fprintf(f, "| op | shape | kernels |");
    for (const hardware &h : HARDWARE) fprintf(f, " %s bound µs |", h.name);
    fprintf(f, " measured µs (%s) | bound / measured |\n|---|---|---|",
            device.empty() ? "no GPU round yet" : device.c_str());
    for (int i = 0; i < HARDWARES; i++) fprintf(f, "---|");
    fprintf(f, "---|---|\n");
    for (size_t i = 0; i < rows.size();) {
        size_t end = i;
        double bound[HARDWARES] = {};
        while (end < rows.size() && rows[end].op == rows[i].op && rows[end].shape == rows[i].shape) {
            for (int h = 0; h < HARDWARES; h++) {
                const char *limit;
                bound[h] += speed_of_light(rows[end].p, HARDWARE[h], &limit);
            }
            end++;
        }
        fprintf(f, "| %s | %s | %zu |", rows[i].op.c_str(), rows[i].shape.c_str(), end - i);
        for (int h = 0; h < HARDWARES; h++) fprintf(f, " %.2f |", bound[h] * MICROSECONDS);
        const measurement *m = NULL;
        for (const measurement &x : measured)
            if (x.op == rows[i].op && x.shape == rows[i].shape) m = &x;
        /* the bound of the device the time was measured on (its name names it), else none */
        int h = -1;
        for (int k = 0; k < HARDWARES && m; k++)
            if (device.find(HARDWARE[k].name) != std::string::npos) h = k;
        if (m && h >= 0) fprintf(f, " %.2f | %.0f%% |\n", m->microseconds,
                                 100 * bound[h] * MICROSECONDS / m->microseconds);
        else if (m) fprintf(f, " %.2f | - |\n", m->microseconds);
        else fprintf(f, " - | - |\n");
        i = end;
    }
}

/* ------------------------------------------------------------------------ thresholds */

static const double THRESHOLD_SCALE = 1000; /* thresholds keep three digits */
static uint64_t requests(const dcp_cuda_cpu_kernel_profile &p, int first, int end)
{
    uint64_t n = 0;
    for (int c = first; c < end; c++) n += p.memory[c].requests;
    return n;
}

static std::string key_of(const row &r) { return r.op + " | " + r.shape + " | " + r.kernel; }

static void write_thresholds(const char *path, const std::vector<row> &rows)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fprintf(f, "# Minimum coalescing (global) and bank-conflict (shared) efficiency per kernel "
               "on make test's small\n# shapes, from the CPU execution model's profile "
               "(build/kernel_report-cpu --write-thresholds).\n# op | shape | kernel | metric "
               "| minimum\n");
    for (const row &r : rows) { /* rounded down to the printed digits */
        if (requests(r.p, 0, DCP_CUDA_CPU_FIRST_SHARED_CLASS))
            fprintf(f, "%s | global | %.3f\n", key_of(r).c_str(),
                    floor(global_efficiency(r.p) * THRESHOLD_SCALE) / THRESHOLD_SCALE);
        if (requests(r.p, DCP_CUDA_CPU_FIRST_SHARED_CLASS, DCP_CUDA_CPU_MEMORY_CLASSES))
            fprintf(f, "%s | shared | %.3f\n", key_of(r).c_str(),
                    floor(shared_efficiency(r.p) * THRESHOLD_SCALE) / THRESHOLD_SCALE);
    }
    fclose(f);
}

/* Each line of the file against the rows: a kernel below its minimum, or missing, fails. */
static int check_thresholds(const char *path, const std::vector<row> &rows)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        return 1;
    }
    char line[512];
    int passed = 0, failed = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        std::string text = line;
        const size_t last = text.rfind(" | "), metric_at = text.rfind(" | ", last - 1);
        const std::string key = text.substr(0, metric_at);
        const std::string metric = text.substr(metric_at + 3, last - metric_at - 3);
        const double minimum = atof(text.c_str() + last + 3);
        const row *found = NULL;
        for (const row &r : rows)
            if (key_of(r) == key) found = &r;
        if (!found) {
            printf("FAIL %s: no such kernel and shape ran\n", key.c_str());
            failed++;
            continue;
        }
        const double value =
            metric == "global" ? global_efficiency(found->p) : shared_efficiency(found->p);
        const bool ok = value >= minimum;
        printf("%s %s | %s efficiency %.3f (minimum %.3f)\n", ok ? "ok  " : "FAIL", key.c_str(),
               metric.c_str(), value, minimum);
        ok ? passed++ : failed++;
    }
    fclose(f);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

/* The mangled names of the rows' kernels, each once, in order. */
static void write_kernels(const char *path, const std::vector<row> &rows)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    std::vector<const void *> seen;
    for (const row &r : rows) {
        Dl_info info;
        bool known = false;
        for (const void *k : seen) known = known || k == r.p.function;
        if (known || !dladdr(r.p.function, &info) || !info.dli_sname) continue;
        seen.push_back(r.p.function);
        fprintf(f, "%s\n", info.dli_sname);
    }
    fclose(f);
}

/* --------------------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    bool small = false;
    const char *markdown = NULL, *check = NULL, *thresholds = NULL, *kernel_names = NULL;
    const char *measured_in = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--small")) small = true;
        else if (!strcmp(argv[i], "--markdown") && i + 1 < argc) markdown = argv[++i];
        else if (!strcmp(argv[i], "--kernels") && i + 1 < argc) kernel_names = argv[++i];
        else if (!strcmp(argv[i], "--measured") && i + 1 < argc) measured_in = argv[++i];
        else if (!strcmp(argv[i], "--check") && i + 1 < argc) check = argv[++i], small = true;
        else if (!strcmp(argv[i], "--write-thresholds") && i + 1 < argc)
            thresholds = argv[++i], small = true;
        else {
            fprintf(stderr, "usage: %s [--small] [--markdown FILE] [--kernels FILE] "
                            "[--check FILE] [--write-thresholds FILE] [--measured FILE]\n",
                    argv[0]);
            return 2;
        }
    }
    dcp_cuda_cpu_set_seed(SEED);
    const std::vector<report_case> cases = small
                                               ? cases_of(ATTENTION_SMALL, CONV_SMALL, ROWS_SMALL)
                                               : cases_of(ATTENTION, CONV, ROWS);
    std::vector<row> rows;
    for (const report_case &c : cases) {
        if (!check) fprintf(stderr, "profiling %s, %s\n", c.op.c_str(), c.shape.c_str());
        profile(c, rows);
    }
    if (thresholds) {
        write_thresholds(thresholds, rows);
        return 0;
    }
    if (check) return check_thresholds(check, rows);
    if (kernel_names) write_kernels(kernel_names, rows);
    std::string device;
    const std::vector<measurement> measured =
        measured_in ? read_measured(measured_in, &device) : std::vector<measurement>();
    FILE *f = markdown ? fopen(markdown, "w") : stdout;
    if (!f) {
        perror(markdown);
        return 1;
    }
    fprintf(f, "Device profile of the model: %s. Per operation and shape, the sum of its kernels' "
               "bounds and a GPU's measured time (a GPU round: `build/kernel_report "
               "--measured-out`):\n\n", dcp_cuda_cpu_profile_name());
    print_operations(f, rows, measured, device);
    fprintf(f, "\nPer kernel and shape:\n\n");
    print_summary(f, rows);
    fprintf(f, "\nPer memory instruction class:\n\n");
    print_classes(f, rows);
    fprintf(f, "\nHardware figures of the bounds:\n\n");
    print_hardware(f);
    if (markdown) fclose(f);
    return 0;
}

#else /* a GPU: the same cases, timed */

int main(int argc, char **argv)
{
    const char *out_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--measured-out") && i + 1 < argc) out_path = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--repeat N] [--measured-out FILE]\n", argv[0]);
            return 2;
        }
    }
    int devices = 0;
    if (repeat < 1) repeat = 1;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("no CUDA device: nothing measured\n");
        return 0;
    }
    cudaDeviceProp prop;
    REPORT_CUDA(cudaGetDeviceProperties(&prop, 0));
    FILE *out = out_path ? fopen(out_path, "w") : NULL;
    if (out) fprintf(out, "%s\n", prop.name);
    printf("%s, median of %d runs after one warm-up\n| op | shape | µs |\n|---|---|---|\n",
           prop.name, repeat);
    for (const report_case &c : cases_of(ATTENTION, CONV, ROWS)) {
        buffers b;
        measured_us = 0;
        c.run(c.shape_data, b);
        printf("| %s | %s | %.2f |\n", c.op.c_str(), c.shape.c_str(), measured_us);
        if (out) fprintf(out, "%s\t%s\t%.3f\n", c.op.c_str(), c.shape.c_str(), measured_us);
    }
    if (out) fclose(out);
    return 0;
}

#endif
