/* src/cuda.h - the declarations of dcp_cuda.cu's kernels (their code lives there).
   Part of dcp.h: edit here, then run `make amalgamate` (tools/amalgamate.py writes dcp.h
   from src/dcp.h.in and these parts); make test fails while dcp.h is stale. */
//@@ declarations
/* ======================================================================= CUDA declarations
   Defined in dcp_cuda.cu (compile it with nvcc and link it); never behind DCP_STATIC, because
   that translation unit is separate. Device pointers and a stream in, a dcp_status out. */

#ifndef DCP_CUDA_DEF
#define DCP_CUDA_DEF extern
#endif

/* Number of CUDA devices visible (0 when there is no driver or no device: not an error, so
   that callers and tests can skip the GPU path and say why). */
DCP_CUDA_DEF dcp_status dcp_cuda_device_count(int32_t *count, dcp_error *error);

/* A THD layout for device kernels: thd.cu_seqlens and thd.cu_seqlens_padded point to DEVICE
   memory (int32, as FlashAttention and TransformerEngine take them); the host-side sizes let a
   launch size its grid over real rows without reading device memory back. dcp_rank_view gives
   all three numbers. */
typedef struct dcp_cuda_layout {
    dcp_thd_layout thd;        /* the cu arrays in device memory; num_sequences and cp */
    int64_t local_rows;        /* cu_seqlens_padded[num_sequences] / cp */
    int32_t max_seqlen_padded; /* largest cu_seqlens_padded[i + 1] - cu_seqlens_padded[i] */
} dcp_cuda_layout;

/* Device scratch the attention entry points need for a layout (its tile schedule). Callers
   allocate it once per shape bound and reuse it: no entry point allocates. */
DCP_CUDA_DEF dcp_status dcp_cuda_attention_workspace_size(const dcp_attention_params *params,
                                                          const dcp_cuda_layout *layout,
                                                          size_t *bytes, dcp_error *error);

/* One attention step on the device, the contract of dcp_attention_forward: q of rank
   view->q_rank (its q_half rows) against k, v of rank view->kv_rank (its kv_half rows); q, k,
   v in dtype (bfloat16 or float16); out in out_dtype (float32 for ring partials that are then
   merged, or dtype); lse float32 [num_heads, local_rows]. stream is a cudaStream_t (NULL: the
   default stream); the call only enqueues work. */
DCP_CUDA_DEF dcp_status dcp_cuda_attention_forward(
    const dcp_attention_params *params, const dcp_cuda_layout *layout,
    const dcp_attention_view *view, dcp_dtype dtype, const void *q, const void *k, const void *v,
    dcp_dtype out_dtype, void *out, float *lse, void *workspace, size_t workspace_bytes,
    void *stream, dcp_error *error);

/* Which kernels the forward runs. MMA_SYNC: the sm_80+ kernels (mma.sync), on every device.
   WGMMA: the sm_90a kernels (wgmma, 128 query rows a block); only on a device of compute
   capability 9.0 with dcp_cuda.cu built for sm_90a and out 16-byte aligned, otherwise the call
   fails with DCP_ERROR_UNSUPPORTED. AUTO, what dcp_cuda_attention_forward runs: MMA_SYNC for
   now, because the wgmma kernels have not yet passed the GPU tests on an H100; it becomes
   WGMMA where available once they have. The backward is mma.sync on every path. */
typedef enum dcp_cuda_attention_path {
    DCP_CUDA_ATTENTION_PATH_AUTO = 0,
    DCP_CUDA_ATTENTION_PATH_MMA_SYNC = 1,
    DCP_CUDA_ATTENTION_PATH_WGMMA = 2
} dcp_cuda_attention_path;

/* *available = 1 when path can run: AUTO and MMA_SYNC always (every device a build serves;
   without a device a launch fails with DCP_ERROR_CUDA, not this check), WGMMA only on a device
   of compute capability 9.0 with dcp_cuda.cu built for sm_90a (0 without a device).
   Host-only. */
DCP_CUDA_DEF dcp_status dcp_cuda_attention_path_available(dcp_cuda_attention_path path,
                                                          int32_t *available, dcp_error *error);

/* dcp_cuda_attention_forward on the kernels of path (tests run both against the reference). */
DCP_CUDA_DEF dcp_status dcp_cuda_attention_forward_using(
    dcp_cuda_attention_path path, const dcp_attention_params *params,
    const dcp_cuda_layout *layout, const dcp_attention_view *view, dcp_dtype dtype,
    const void *q, const void *k, const void *v, dcp_dtype out_dtype, void *out, float *lse,
    void *workspace, size_t workspace_bytes, void *stream, dcp_error *error);

/* The gradient of one step, the contract of dcp_attention_backward: out and dout (dtype) are
   the final merged output and its gradient, lse the final float32 LSE; ADDS into float32 dq,
   dk, dv. q, k, v and dout 16-byte aligned, out 8-byte aligned. deterministic (no default: 0
   or 1, anything else is rejected): 1 = bitwise reproducible, dq by its own query-stationary
   kernel, every gradient element added once; 0 = faster, dq accumulated with float32 atomics
   (dk, dv still added once), so dq's last bits may vary from run to run. Its kernels keep
   two tiles in flight where the device's shared memory per block allows
   (cudaDevAttrMaxSharedMemoryPerBlockOptin) and one where it does not: head dim 128 on
   sm_86, sm_89 and sm_120 (99 KB). */
DCP_CUDA_DEF dcp_status dcp_cuda_attention_backward(
    const dcp_attention_params *params, const dcp_cuda_layout *layout,
    const dcp_attention_view *view, dcp_dtype dtype, const void *q, const void *k, const void *v,
    const void *out, const void *dout, const float *lse, float *dq, float *dk, float *dv,
    int32_t deterministic, void *workspace, size_t workspace_bytes, void *stream,
    dcp_error *error);

/* LSE merge on the device, the contracts of dcp_attention_acc_init / _merge / _finalize:
   float32 accumulators; merge folds a float32 partial into the rows of `half`; finalize
   writes out in out_dtype and lse float32, padding rows 0 and -inf. */
DCP_CUDA_DEF dcp_status dcp_cuda_acc_init(const dcp_attention_params *params,
                                          const dcp_cuda_layout *layout, float *acc_out,
                                          float *acc_lse, void *stream, dcp_error *error);
DCP_CUDA_DEF dcp_status dcp_cuda_acc_merge(const dcp_attention_params *params,
                                           const dcp_cuda_layout *layout, dcp_half half,
                                           const float *out, const float *lse, float *acc_out,
                                           float *acc_lse, void *stream, dcp_error *error);
DCP_CUDA_DEF dcp_status dcp_cuda_acc_finalize(const dcp_attention_params *params,
                                              const dcp_cuda_layout *layout, int32_t rank,
                                              const float *acc_out, const float *acc_lse,
                                              dcp_dtype out_dtype, void *out, float *lse,
                                              void *stream, dcp_error *error);

/* count float32 values to dtype (gradients accumulated in float32, for example). */
DCP_CUDA_DEF dcp_status dcp_cuda_convert(const float *in, dcp_dtype dtype, void *out,
                                         int64_t count, void *stream, dcp_error *error);

/* acc[i] += x[i] for count float32 values (the ring backward folds a step's dK, dV into the
   accumulator that arrived meanwhile). acc and x must not overlap. */
DCP_CUDA_DEF dcp_status dcp_cuda_add_float32(float *acc, const float *x, int64_t count,
                                             void *stream, dcp_error *error);

/* The ring of layout->cp ranks simulated on one device, mirroring dcp_ring_attention_forward
   and _backward: q[r], k[r], v[r], ... are rank r's device buffers (host arrays of cp device
   pointers). Forward runs, per rank, exactly the steps of dcp_ring_step_plan through
   dcp_cuda_attention_forward (a float32 partial) and dcp_cuda_acc_merge, as a real ring
   would, then dcp_cuda_acc_finalize writes out[r] (out_dtype) and lse[r]. Scratch for one
   rank at a time comes from the caller (no allocation): partial_out and acc_out of
   local_rows x num_heads x head_dim floats, partial_lse and acc_lse of num_heads x local_rows
   floats, and the workspace of dcp_cuda_attention_workspace_size. Backward zeroes the float32
   dq[r], dk[r], dv[r], then adds each step's gradient (dcp_cuda_attention_backward; out and
   dout in dtype): dq into rank r, dk and dv into the KV's source rank. */
DCP_CUDA_DEF dcp_status dcp_cuda_virtual_ring_forward(
    const dcp_attention_params *params, const dcp_cuda_layout *layout, dcp_dtype dtype,
    const void *const *q, const void *const *k, const void *const *v, dcp_dtype out_dtype,
    void *const *out, float *const *lse, float *partial_out, float *partial_lse,
    float *acc_out, float *acc_lse, void *workspace, size_t workspace_bytes, void *stream,
    dcp_error *error);
DCP_CUDA_DEF dcp_status dcp_cuda_virtual_ring_backward(
    const dcp_attention_params *params, const dcp_cuda_layout *layout, dcp_dtype dtype,
    const void *const *q, const void *const *k, const void *const *v, const void *const *out,
    const void *const *dout, const float *const *lse, float *const *dq, float *const *dk,
    float *const *dv, int32_t deterministic, void *workspace, size_t workspace_bytes,
    void *stream, dcp_error *error);

/* A device layout from the host copy of the arrays (checked with dcp_thd_layout_validate;
   local_rows and max_seqlen_padded are computed from it) and the device copies the kernels
   read, which must hold the same values. Host-only: no CUDA call, no allocation. */
DCP_CUDA_DEF dcp_status dcp_cuda_layout_init(const dcp_thd_layout *host,
                                             const int32_t *device_cu_seqlens,
                                             const int32_t *device_cu_seqlens_padded,
                                             dcp_cuda_layout *layout, dcp_error *error);

/* RoPE on the device, the contract of dcp_rope_forward / dcp_rope_backward, for q and k in
   one launch: q [local_rows, num_q_heads, head_dim] into q_out and k [local_rows,
   num_k_heads, head_dim] into k_out, in dtype (float32, bfloat16 or float16; float32 math,
   angles in double), on rank `rank` of the layout's CP split (positions are computed on the
   device from cu_seqlens_padded). Either tensor may be absent: its input and output NULL (its
   head count is then ignored). An output may be its input. options->inv_freq, when not NULL,
   is a DEVICE array of rotary_dim / 2 doubles (never read on the host). Padding rows give 0.
   Backward takes the output gradients as q, k and writes the input gradients. */
DCP_CUDA_DEF dcp_status dcp_cuda_rope_forward(const dcp_rope_options *options,
                                              const dcp_cuda_layout *layout, int32_t rank,
                                              dcp_dtype dtype, int32_t head_dim,
                                              int32_t num_q_heads, const void *q, void *q_out,
                                              int32_t num_k_heads, const void *k, void *k_out,
                                              void *stream, dcp_error *error);
DCP_CUDA_DEF dcp_status dcp_cuda_rope_backward(const dcp_rope_options *options,
                                               const dcp_cuda_layout *layout, int32_t rank,
                                               dcp_dtype dtype, int32_t head_dim,
                                               int32_t num_q_heads, const void *dq_out,
                                               void *dq, int32_t num_k_heads,
                                               const void *dk_out, void *dk, void *stream,
                                               dcp_error *error);

/* Widest conv1d the device kernels serve (wider: DCP_ERROR_UNSUPPORTED; one kernel per
   width), and the most row slices of the backward: each slice leaves one float partial per
   channel and weight/bias gradient in the workspace, summed in slice order afterwards
   (deterministic). */
#define DCP_CUDA_CONV1D_MAX_WIDTH DCP_CONV1D_MAX_WIDTH
#define DCP_CUDA_CONV1D_SLICES 64

/* How the conv1d kernels split a shape (every launch of that shape the same, whatever the
   device, so dweight's summation order and bits are too): a warp streams rows_per_warp
   consecutive rows of 32 x vector_width channels; a block is warps_per_block warps over one
   channel group and consecutive runs (a slice); the grid is slices x channel_groups. The
   backward keeps slices <= DCP_CUDA_CONV1D_SLICES. */
typedef struct dcp_cuda_conv1d_geometry {
    int32_t vector_width;    /* channels per thread: 16 bytes of dtype (8 in the backward
                                of 16-bit dtypes), or 1 */
    int32_t warps_per_block;
    int32_t channel_groups;  /* grid y */
    int64_t slices;          /* grid x; 0 when total_rows is 0 */
    int64_t rows_per_warp;
} dcp_cuda_conv1d_geometry;

/* The geometry dcp_cuda_conv1d_forward (backward 0) or _backward (backward 1) launches for
   params, total_rows rows and dtype, with 16-byte accesses when `vector` (the tensors
   16-byte aligned) and the channel count allow. Host-only: no CUDA call. */
DCP_CUDA_DEF dcp_status dcp_cuda_conv1d_launch_geometry(const dcp_conv1d_params *params,
                                                        int64_t total_rows, dcp_dtype dtype,
                                                        int32_t backward, int32_t vector,
                                                        dcp_cuda_conv1d_geometry *geometry,
                                                        dcp_error *error);

/* Bytes of device workspace dcp_cuda_conv1d_backward needs for params (any row count). */
DCP_CUDA_DEF dcp_status dcp_cuda_conv1d_workspace_size(const dcp_conv1d_params *params,
                                                       size_t *bytes, dcp_error *error);
/* Causal depthwise conv1d on the device, the contracts of dcp_conv1d_forward / _backward:
   x, y, dy, dx [total_rows, channels] in dtype (float32, bfloat16 or float16), weight
   [channels, width] and bias [channels] (or NULL) float32, float32 math; dweight and dbias
   (float32) are written, not added, and bitwise reproducible (per-slice partials in the
   workspace, then an ordered sum; no atomics). A layout of cp 1. */
DCP_CUDA_DEF dcp_status dcp_cuda_conv1d_forward(const dcp_conv1d_params *params,
                                                const dcp_cuda_layout *layout,
                                                int64_t total_rows, dcp_dtype dtype,
                                                const void *x, const float *weight,
                                                const float *bias, void *y, void *stream,
                                                dcp_error *error);
DCP_CUDA_DEF dcp_status dcp_cuda_conv1d_backward(const dcp_conv1d_params *params,
                                                 const dcp_cuda_layout *layout,
                                                 int64_t total_rows, dcp_dtype dtype,
                                                 const void *x, const float *weight,
                                                 const float *bias, const void *dy, void *dx,
                                                 float *dweight, float *dbias,
                                                 void *workspace, size_t workspace_bytes,
                                                 void *stream, dcp_error *error);

#ifndef DCP_NO_DISTRIBUTED /* the layout moves of the distributed logic */
/* The head-parallel all-to-all's segment lists on the device, the contract of
   dcp_a2a_segments_copy: segments is a DEVICE array of count entries (dcp_a2a_segments,
   uploaded), total_rows the rows of the segments the call runs (PACK: the first `copies`;
   UNPACK: all of them), which the caller knows from dcp_a2a_shape without reading the device.
   16-byte copies when local, message, slice_bytes and local_pitch are multiples of 16, else
   the widest of 8, 4, 2, 1 bytes that divides them all. Enqueue only. */
DCP_CUDA_DEF dcp_status dcp_cuda_a2a_copy(const dcp_a2a_segment *segments, int64_t count,
                                          int64_t copies, int64_t total_rows, size_t slice_bytes,
                                          size_t local_pitch, dcp_a2a_direction direction,
                                          void *local, void *message, void *stream,
                                          dcp_error *error);

/* The MTP roll's two kernels, the contracts of dcp_mtp_roll_gather / dcp_mtp_roll_shift on a
   device layout (rank `rank` of layout.thd.cp): in, out [local_rows] and boundaries,
   received [DCP_MTP_ROLL_HALVES][num_sequences] elements of element_size bytes (any size;
   moved as 16-, 8-, 4-, 2- or 1-byte words, the widest the size and the pointers allow).
   received NULL leaves the rows that need another rank's element unwritten; out must not
   overlap in. dcp_nccl_mtp_roll runs gather, the exchange and shift. */
DCP_CUDA_DEF dcp_status dcp_cuda_mtp_roll_gather(const dcp_cuda_layout *layout, int32_t rank,
                                                 size_t element_size, const void *in,
                                                 void *boundaries, void *stream,
                                                 dcp_error *error);
DCP_CUDA_DEF dcp_status dcp_cuda_mtp_roll_shift(const dcp_cuda_layout *layout, int32_t rank,
                                                size_t element_size, const void *in,
                                                const void *received, void *out, void *stream,
                                                dcp_error *error);
#endif /* DCP_NO_DISTRIBUTED */

