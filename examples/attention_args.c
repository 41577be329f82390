/* attention_args: from one rank's view of a plan to the arguments of the attention call, the
   step every trainer writes (docs/integration.md). For a long-context batch planned on 64
   ranks it prints, for rank R in microbatch K:
     - the CP group (the communicator of ranks first_rank .. first_rank + cp - 1);
     - TransformerEngine's THD arguments (DotProductAttention with context parallelism, and
       apply_rotary_pos_emb): whole-sequence cu_seqlens, cu_seqlens_padded, max_seqlen;
     - FlashAttention's flash_attn_varlen_func, which has no context parallelism: one call per
       ring step (dcp_rank_view_varlen_call), which rows to gather for q and for k, v, the cu
       arrays, max_seqlen and causal; merge the calls' outputs through their LSEs;
     - libdcp's own kernels: the dcp_thd_layout of dcp_cuda_layout_init, and the rank that
       dcp_cuda_rope_forward and dcp_nccl_ring_forward take;
     - the position ids of RoPE as runs of the local rows.

   Build and run:  cc -std=c99 -O2 examples/attention_args.c -o attention_args -lm
                   ./attention_args [RANK [MICROBATCH]]        (default rank 5, microbatch 0)
   The batch is `dcp-plan --lognormal 16384,1.0,512,131072,256 --ranks 64
   --max-tokens-per-rank 16384` (tests/test_readme.sh checks the two agree). */
#define DCP_IMPLEMENTATION
#include "../dcp.h"

#include <stdio.h>
#include <stdlib.h>

#define SAMPLES 256
#define RANKS 64
#define MAX_TOKENS_PER_RANK 16384
#define ARRAY_SHOWN 12 /* entries of a long array printed before "..." */

static const dcp_lognormal batch = {16384.0, 1.0, 512, 131072}; /* mean, sigma, min, max */

static void print_array(const char *name, const int32_t *values, int32_t count)
{
    int32_t i;
    printf("    %s = [", name);
    for (i = 0; i < count && i < ARRAY_SHOWN; i++) printf("%s%d", i ? ", " : "", (int)values[i]);
    if (count > ARRAY_SHOWN) printf(", ... %d in all", (int)count);
    printf("]\n");
}

/* Rows first[j] .. + (cu[j + 1] - cu[j]) of the call's sequences, as ranges. */
static void print_rows(const char *name, const int32_t *first, const int32_t *cu, int32_t n)
{
    int32_t j;
    printf("    %s rows:", name);
    for (j = 0; j < n && j < ARRAY_SHOWN; j++)
        printf(" %d-%d", (int)first[j], (int)(first[j] + cu[j + 1] - cu[j] - 1));
    if (n > ARRAY_SHOWN) printf(" ... %d ranges in all", (int)n);
    printf("\n");
}

static void print_transformer_engine(const dcp_rank_view *v)
{
    printf("TransformerEngine: DotProductAttention(...).forward(q, k, v, qkv_format=\"thd\",\n"
           "    attn_mask_type=\"padding_causal\", ...) after set_context_parallel_group(the group's\n"
           "    communicator, its global ranks, a stream, cp_comm_type=\"p2p\"); TE splits the ring\n");
    print_array("cu_seqlens_q = cu_seqlens_kv", v->cu_seqlens, v->num_samples + 1);
    print_array("cu_seqlens_q_padded = cu_seqlens_kv_padded", v->cu_seqlens_padded,
                v->num_samples + 1);
    printf("    max_seqlen_q = max_seqlen_kv = %d\n", (int)v->max_seqlen);
    printf("  apply_rotary_pos_emb(t, freqs, tensor_format=\"thd\", fused=True,\n"
           "    cu_seqlens=cu_seqlens_padded above, cp_size=%d, cp_rank=%d)\n",
           (int)v->cp, (int)v->rank_in_group);
}

/* One flash_attn_varlen_func call per ring step; the LSE merge is the caller's (as in
   dcp_attention_acc_merge). */
static int print_flash_attention(const dcp_rank_view *v)
{
    const int32_t n = v->num_samples;
    int32_t *cells = (int32_t *)malloc((size_t)5 * (n + 1) * sizeof *cells), step;
    dcp_varlen_rows rows;
    dcp_varlen_call call;
    dcp_error error;
    if (!cells) return 0;
    rows.slot = cells, rows.q_row = cells + (n + 1), rows.kv_row = cells + 2 * (n + 1);
    rows.cu_seqlens_q = cells + 3 * (n + 1), rows.cu_seqlens_k = cells + 4 * (n + 1);
    printf("FlashAttention: flash_attn_varlen_func(q[q rows], k[k rows], v[k rows], ...,\n"
           "    return_attn_probs=True) once per ring step, outputs merged through the LSE\n");
    for (step = 0; step < v->cp; step++) {
        if (dcp_rank_view_varlen_call(v, step, 1, &call, &rows, &error) != DCP_OK) {
            fprintf(stderr, "attention_args: %s\n", error.message);
            free(cells);
            return 0;
        }
        printf("  step %d: K, V of group rank %d (pool rank %d), causal=%s, %d sequences\n",
               (int)step, (int)call.kv_rank, (int)(v->first_rank + call.kv_rank),
               call.causal ? "True" : "False", (int)call.num_sequences);
        print_rows("q (this rank's buffer)", rows.q_row, rows.cu_seqlens_q, call.num_sequences);
        print_rows("k, v (the source's buffer)", rows.kv_row, rows.cu_seqlens_k,
                   call.num_sequences);
        print_array("cu_seqlens_q", rows.cu_seqlens_q, call.num_sequences + 1);
        print_array("cu_seqlens_k", rows.cu_seqlens_k, call.num_sequences + 1);
        printf("    max_seqlen_q = %d, max_seqlen_k = %d\n", (int)call.max_seqlen_q,
               (int)call.max_seqlen_k);
    }
    free(cells);
    return 1;
}

static int print_positions(const dcp_rank_view *v)
{
    dcp_row_run *runs;
    int32_t count = 0, i;
    if (dcp_rank_view_runs(v, NULL, 0, &count, NULL) != DCP_OK) return 0;
    if (!(runs = (dcp_row_run *)malloc(((size_t)count + 1) * sizeof *runs))) return 0;
    if (dcp_rank_view_runs(v, runs, count, &count, NULL) != DCP_OK) {
        free(runs);
        return 0;
    }
    printf("RoPE position ids (padding rows: loss mask 0, position id 0):\n");
    for (i = 0; i < count && i < ARRAY_SHOWN; i++) {
        const dcp_row_run *r = &runs[i];
        printf("    rows %lld-%lld: sample %d ", (long long)r->first_row,
               (long long)(r->first_row + r->rows - 1), (int)v->samples[r->slot]);
        if (r->position < 0)
            printf("padding\n");
        else
            printf("positions %lld-%lld\n", (long long)r->position,
                   (long long)(r->position + r->rows - 1));
    }
    if (count > ARRAY_SHOWN) printf("    ... %d runs in all\n", (int)count);
    free(runs);
    return 1;
}

static void print_libdcp(const dcp_rank_view *v)
{
    printf("libdcp: dcp_cuda_layout_init(&(dcp_thd_layout){%d, cu_seqlens, cu_seqlens_padded, "
           "%d}, ...),\n    then %s; dcp_cuda_rope_forward(options, &layout, %d, ...)\n",
           (int)v->num_samples, (int)v->cp,
           v->cp > 1 ? "dcp_nccl_ring_forward on the group's binding (dcp_nccl_set_switch)"
                     : "dcp_cuda_attention_forward (cp 1: no communicator)",
           (int)v->rank_in_group);
}

int main(int argc, char **argv)
{
    int64_t lengths[SAMPLES];
    int32_t rank = argc > 1 ? atoi(argv[1]) : 5, microbatch = argc > 2 ? atoi(argv[2]) : 0;
    dcp_config config = dcp_config_init();
    dcp_plan *plan = NULL;
    dcp_rank_view *view = NULL;
    dcp_error error;
    int ok;
    config.ranks = RANKS;
    config.max_tokens_per_rank = MAX_TOKENS_PER_RANK;
    if (dcp_lengths_lognormal(&batch, DCP_DEFAULT_SEED, lengths, SAMPLES, &error) != DCP_OK ||
        dcp_plan_create(&config, lengths, SAMPLES, &plan, &error) != DCP_OK ||
        dcp_rank_view_create(plan, rank, microbatch, &view, &error) != DCP_OK) {
        fprintf(stderr, "attention_args: %s\n", error.message);
        dcp_plan_destroy(plan);
        return 1;
    }
    if (view->idle) {
        printf("rank %d, microbatch %d: idle, no attention to run (its groups' ranks are "
               "busy)\n", (int)rank, (int)microbatch);
    } else {
        printf("rank %d, microbatch %d: CP group of pool ranks %d-%d (cp %d), rank %d in it; "
               "%d samples, %lld local rows\n",
               (int)rank, (int)microbatch, (int)view->first_rank,
               (int)(view->first_rank + view->cp - 1), (int)view->cp, (int)view->rank_in_group,
               (int)view->num_samples, (long long)view->local_tokens);
        print_transformer_engine(view);
        ok = print_flash_attention(view) && print_positions(view);
        print_libdcp(view);
        if (!ok) {
            dcp_rank_view_destroy(view);
            dcp_plan_destroy(plan);
            return 1;
        }
    }
    dcp_rank_view_destroy(view);
    dcp_plan_destroy(plan);
    return 0;
}
