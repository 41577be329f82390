/* dcp_nccl.h must compile as C and under nvcc with -Wall -Wextra -Werror (the Makefile builds
   this file both ways, to objects). It instantiates the whole implementation and takes the
   address of every public function, so that a declaration and its definition cannot drift
   apart; as C++ it also builds the scope guard. Linking needs dcp_cuda.o and libnccl, and
   running needs a GPU: that is tests/test_nccl_gpu.cu (make test-gpu). */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#define DCP_NCCL_IMPLEMENTATION
#include "../dcp_nccl.h"

typedef void (*dcp_nccl_any_fn)(void);

int dcp_nccl_compile_check(void);
int dcp_nccl_compile_check(void)
{
    /* each entry keeps its exact type in the initialiser's cast */
    static const dcp_nccl_any_fn functions[] = {
        (dcp_nccl_any_fn)(int (*)(void))dcp_nccl_compiled_version,
        (dcp_nccl_any_fn)(dcp_status (*)(ncclComm_t, const dcp_nccl_options *, dcp_nccl_set **,
                                         dcp_error *))dcp_nccl_set_create,
        (dcp_nccl_any_fn)(dcp_status (*)(dcp_nccl_set *, dcp_error *))dcp_nccl_set_destroy,
        (dcp_nccl_any_fn)(dcp_status (*)(dcp_nccl_set *, const dcp_nccl_binding *, cudaStream_t,
                                         ncclComm_t *, dcp_error *))dcp_nccl_group_comm,
        (dcp_nccl_any_fn)(dcp_status (*)(const dcp_nccl_set *, dcp_error *))dcp_nccl_set_check,
        (dcp_nccl_any_fn)(dcp_status (*)(dcp_nccl_set *, int32_t, dcp_error *))dcp_nccl_set_abort,
        (dcp_nccl_any_fn)(dcp_status (*)(dcp_nccl_set *, cudaStream_t,
                                         dcp_error *))dcp_nccl_set_wait,
        (dcp_nccl_any_fn)(dcp_status (*)(dcp_nccl_set *, const dcp_plan *, cudaStream_t,
                                         dcp_error *))dcp_nccl_plan_agree,
        (dcp_nccl_any_fn)(dcp_status (*)(dcp_nccl_set *, const dcp_rank_view *,
                                         dcp_nccl_binding *, dcp_error *))dcp_nccl_set_switch,
        (dcp_nccl_any_fn)(dcp_status (*)(dcp_nccl_set *, const dcp_plan *, int32_t,
                                         dcp_nccl_binding *, dcp_error *))dcp_nccl_set_switch_plan,
        (dcp_nccl_any_fn)(void (*)(const dcp_nccl_set *, dcp_nccl_binding *))dcp_nccl_set_current,
        (dcp_nccl_any_fn)(dcp_status (*)(dcp_nccl_set *, int32_t, dcp_comm_scope *,
                                         dcp_nccl_binding *, dcp_error *))dcp_nccl_override_begin,
        (dcp_nccl_any_fn)(dcp_status (*)(dcp_nccl_set *, dcp_comm_scope *,
                                         dcp_error *))dcp_nccl_override_end,
        (dcp_nccl_any_fn)(dcp_status (*)(dcp_nccl_set *, int32_t, dcp_nccl_scoped_fn, void *,
                                         dcp_error *))dcp_nccl_override_run,
        (dcp_nccl_any_fn)(dcp_status (*)(dcp_nccl_set *, const dcp_reroute *,
                                         const dcp_nccl_reroute_buffers *, cudaStream_t,
                                         dcp_error *))dcp_nccl_reroute_execute,
        (dcp_nccl_any_fn)(dcp_status (*)(const dcp_attention_params *, const dcp_cuda_layout *,
                                         dcp_dtype, dcp_ring_pass, size_t *,
                                         dcp_error *))dcp_nccl_ring_scratch_size,
        (dcp_nccl_any_fn)(dcp_status (*)(dcp_nccl_set *, const dcp_nccl_binding *,
                                         const dcp_attention_params *, const dcp_cuda_layout *,
                                         dcp_dtype, const void *, const void *, const void *,
                                         void *, float *, void *, size_t, cudaStream_t,
                                         dcp_error *))dcp_nccl_ring_forward,
        (dcp_nccl_any_fn)(dcp_status (*)(dcp_nccl_set *, const dcp_nccl_binding *,
                                         const dcp_attention_params *, const dcp_cuda_layout *,
                                         dcp_dtype, const void *, const void *, const void *,
                                         const void *, const void *, const float *, void *,
                                         void *, void *, int32_t, void *, size_t, cudaStream_t,
                                         dcp_error *))dcp_nccl_ring_backward,
        (dcp_nccl_any_fn)(dcp_status (*)(dcp_nccl_set *, ncclComm_t, int32_t, const void *,
                                         size_t, void **, size_t *, cudaStream_t,
                                         dcp_error *))dcp_nccl_broadcast_bytes,
        (dcp_nccl_any_fn)(dcp_status (*)(dcp_nccl_set *, const dcp_nccl_binding *, int32_t,
                                         const void *, size_t, void **, size_t *, cudaStream_t,
                                         dcp_error *))dcp_nccl_group_broadcast_bytes,
        (dcp_nccl_any_fn)(dcp_status (*)(dcp_nccl_set *, ncclComm_t, int32_t, const dcp_plan *,
                                         dcp_plan **, cudaStream_t,
                                         dcp_error *))dcp_nccl_broadcast_plan,
        (dcp_nccl_any_fn)(dcp_status (*)(dcp_nccl_set *, ncclComm_t, int32_t,
                                         const dcp_rank_view *, dcp_rank_view **, cudaStream_t,
                                         dcp_error *))dcp_nccl_broadcast_view,
    };
    int i, present = 0;
    for (i = 0; i < (int)(sizeof functions / sizeof functions[0]); i++)
        present += functions[i] != NULL;
    return present == (int)(sizeof functions / sizeof functions[0]) &&
           dcp_nccl_compiled_version() == NCCL_VERSION_CODE;
}

#ifdef __cplusplus
/* The guard's constructor and destructor, compiled. */
int dcp_nccl_compile_guard(dcp_nccl_set *set);
int dcp_nccl_compile_guard(dcp_nccl_set *set)
{
    dcp_nccl_cp_guard guard(set, 4);
    return guard.status() == DCP_OK;
}
#endif
