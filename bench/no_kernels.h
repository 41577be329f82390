/* no_kernels.h - the CUDA entry points dcp_nccl.h links against, for programs that run its
   control plane only (set creation, the switch, the agreement) over the host transport
   (tests/fake_nccl) and never launch a kernel: each answers DCP_ERROR_UNSUPPORTED. Include
   after dcp.h (bench/comm_bench.c). */
#ifndef DCP_BENCH_NO_KERNELS_H
#define DCP_BENCH_NO_KERNELS_H

static dcp_status no_kernels(dcp_error *error)
{
    return dcp_error_set(error, DCP_ERROR_UNSUPPORTED, "no kernels in this program");
}

dcp_status dcp_cuda_a2a_copy(const dcp_a2a_segment *segments, int64_t count, int64_t copies,
                             int64_t total_rows, size_t slice_bytes, size_t local_pitch,
                             dcp_a2a_direction direction, void *local, void *message,
                             void *stream, dcp_error *error)
{
    (void)segments, (void)count, (void)copies, (void)total_rows, (void)slice_bytes;
    (void)local_pitch, (void)direction, (void)local, (void)message, (void)stream;
    return no_kernels(error);
}

dcp_status dcp_cuda_acc_finalize(const dcp_attention_params *params,
                                 const dcp_cuda_layout *layout, int32_t rank,
                                 const float *acc_out, const float *acc_lse, dcp_dtype out_dtype,
                                 void *out, float *lse, void *stream, dcp_error *error)
{
    (void)params, (void)layout, (void)rank, (void)acc_out, (void)acc_lse, (void)out_dtype;
    (void)out, (void)lse, (void)stream;
    return no_kernels(error);
}

dcp_status dcp_cuda_acc_init(const dcp_attention_params *params, const dcp_cuda_layout *layout,
                             float *acc_out, float *acc_lse, void *stream, dcp_error *error)
{
    (void)params, (void)layout, (void)acc_out, (void)acc_lse, (void)stream;
    return no_kernels(error);
}

dcp_status dcp_cuda_acc_merge(const dcp_attention_params *params, const dcp_cuda_layout *layout,
                              dcp_half half, const float *out, const float *lse, float *acc_out,
                              float *acc_lse, void *stream, dcp_error *error)
{
    (void)params, (void)layout, (void)half, (void)out, (void)lse, (void)acc_out;
    (void)acc_lse, (void)stream;
    return no_kernels(error);
}

dcp_status dcp_cuda_add_float32(float *acc, const float *x, int64_t count, void *stream,
                                dcp_error *error)
{
    (void)acc, (void)x, (void)count, (void)stream;
    return no_kernels(error);
}

dcp_status dcp_cuda_attention_backward(const dcp_attention_params *params,
                                       const dcp_cuda_layout *layout,
                                       const dcp_attention_view *view, dcp_dtype dtype,
                                       const void *q, const void *k, const void *v,
                                       const void *out, const void *dout, const float *lse,
                                       float *dq, float *dk, float *dv, int32_t deterministic,
                                       void *workspace, size_t workspace_bytes, void *stream,
                                       dcp_error *error)
{
    (void)params, (void)layout, (void)view, (void)dtype, (void)q, (void)k, (void)v;
    (void)out, (void)dout, (void)lse, (void)dq, (void)dk, (void)dv, (void)deterministic;
    (void)workspace, (void)workspace_bytes, (void)stream;
    return no_kernels(error);
}

dcp_status dcp_cuda_attention_forward(const dcp_attention_params *params,
                                      const dcp_cuda_layout *layout,
                                      const dcp_attention_view *view, dcp_dtype dtype,
                                      const void *q, const void *k, const void *v,
                                      dcp_dtype out_dtype, void *out, float *lse, void *workspace,
                                      size_t workspace_bytes, void *stream, dcp_error *error)
{
    (void)params, (void)layout, (void)view, (void)dtype, (void)q, (void)k, (void)v;
    (void)out_dtype, (void)out, (void)lse, (void)workspace, (void)workspace_bytes;
    (void)stream;
    return no_kernels(error);
}

dcp_status dcp_cuda_attention_workspace_size(const dcp_attention_params *params,
                                             const dcp_cuda_layout *layout, size_t *bytes,
                                             dcp_error *error)
{
    (void)params, (void)layout, (void)bytes;
    return no_kernels(error);
}

dcp_status dcp_cuda_convert(const float *in, dcp_dtype dtype, void *out, int64_t count,
                            void *stream, dcp_error *error)
{
    (void)in, (void)dtype, (void)out, (void)count, (void)stream;
    return no_kernels(error);
}

dcp_status dcp_cuda_mtp_roll_gather(const dcp_cuda_layout *layout, int32_t rank,
                                    size_t element_size, const void *in, void *boundaries,
                                    void *stream, dcp_error *error)
{
    (void)layout, (void)rank, (void)element_size, (void)in, (void)boundaries, (void)stream;
    return no_kernels(error);
}

dcp_status dcp_cuda_mtp_roll_shift(const dcp_cuda_layout *layout, int32_t rank,
                                   size_t element_size, const void *in, const void *received,
                                   void *out, void *stream, dcp_error *error)
{
    (void)layout, (void)rank, (void)element_size, (void)in, (void)received, (void)out;
    (void)stream;
    return no_kernels(error);
}

#endif
