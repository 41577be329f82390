"""From a rank view to the attention call, in Python (docs/integration.md): for rank R in
microbatch K of a long-context batch planned on 64 ranks, the arguments of
TransformerEngine's THD attention and RoPE, and of FlashAttention's flash_attn_varlen_func
once per ring step. examples/attention_args.c prints the same from C.

    python3 python/examples/attention_args.py [RANK [MICROBATCH]]

In a training step (torch, one process per rank; q, k, v the rank's local [rows, heads, dim]
buffers; the per-step k, v of ring step s are those of rank call.kv_source, passed around the
group's communicator):

    view = plan.rank_view(rank, k)
    # TransformerEngine: attention.set_context_parallel_group(group, global_ranks, stream, "p2p")
    out = attention(q, k, v, **view.transformer_engine_kwargs(device="cuda"))
    # FlashAttention: one call per ring step, merged through the LSE
    for call in view.flash_attn_calls():
        rows_q = torch.tensor(call.q_rows, device="cuda")
        rows_kv = torch.tensor(call.kv_rows, device="cuda")
        o, lse, _ = flash_attn_varlen_func(q[rows_q], k_s[rows_kv], v_s[rows_kv],
                                           return_attn_probs=True,
                                           **call.flash_attn_kwargs(device="cuda"))
        new = torch.logaddexp(acc_lse[:, rows_q], lse)      # acc_lse starts at -inf
        acc[rows_q] = (acc[rows_q] * (acc_lse[:, rows_q] - new).exp().T[..., None]
                       + o * (lse - new).exp().T[..., None])
        acc_lse[:, rows_q] = new
"""
import sys

import libdcp


def main(argv):
    rank = int(argv[0]) if argv else 5
    microbatch = int(argv[1]) if len(argv) > 1 else 0
    lengths = libdcp.lognormal_lengths(16384, 1.0, 512, 131072, 256)  # the default seed, 1
    plan = libdcp.plan(lengths, ranks=64, max_tokens_per_rank=16384)
    view = plan.rank_view(rank, microbatch)
    print(view)
    if view.idle:
        print("idle: no attention to run in this microbatch")
        return 0
    print(f"CP group: pool ranks {list(view.group_ranks)}")
    te = view.transformer_engine_kwargs()
    print("TransformerEngine DotProductAttention.forward(q, k, v, " +
          ", ".join(f"{key}={value!r}" if isinstance(value, str) else f"{key}={list(value)}"
                    if isinstance(value, tuple) else f"{key}={value}"
                    for key, value in te.items()) + ")")
    rope = view.transformer_engine_rope_kwargs()
    print(f"TransformerEngine apply_rotary_pos_emb(t, freqs, tensor_format='thd', fused=True, "
          f"cu_seqlens={list(rope['cu_seqlens'])}, cp_size={rope['cp_size']}, "
          f"cp_rank={rope['cp_rank']})")
    for call in view.flash_attn_calls():
        kwargs = call.flash_attn_kwargs()
        print(f"flash_attn_varlen_func(step {call.step}: q rows {len(call.q_rows)}, k/v rows "
              f"{len(call.kv_rows)} of pool rank {call.kv_source}, "
              f"cu_seqlens_q={list(kwargs['cu_seqlens_q'])}, "
              f"cu_seqlens_k={list(kwargs['cu_seqlens_k'])}, "
              f"max_seqlen_q={kwargs['max_seqlen_q']}, max_seqlen_k={kwargs['max_seqlen_k']}, "
              f"causal={kwargs['causal']})")
    print("RoPE positions as runs: " + ", ".join(
        f"rows {r.first_row}-{r.first_row + r.rows - 1}: sample {r.sample} "
        + (f"positions {r.position}-{r.position + r.rows - 1}" if r.position >= 0 else "padding")
        for r in view.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
