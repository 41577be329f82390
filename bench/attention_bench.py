"""attention_bench.py - our varlen THD attention against PyTorch's best attention backends, in
the same run, on the same device.

    make build/libdcp_cuda.so && python3 bench/attention_bench.py [--repeat N]

Packs of 64K tokens made of 1K, 4K or 16K documents, or a lognormal mix (mean 4096, sigma 1.1,
128..16384); causal, head dim 128, 32 query heads, 8 kv heads, bfloat16. Baselines:
torch.nn.functional.scaled_dot_product_attention restricted to the FLASH_ATTENTION backend and
to the CUDNN_ATTENTION backend, one call per group of equal-length documents ([docs, heads, L,
d], enable_gqa) -- the most favourable dense form of a varlen pack for PyTorch. Ours is
validated against the math backend on the first documents before timing. FLOPs: forward 4
sum(L^2) heads d / 2 (causal); backward 2.5 x forward. Table: figure, ours, best baseline,
ratio (baseline time / ours: > 1 means ours is faster), and each backend.
"""
import argparse
import ctypes
import math
import random

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from dcp_ctypes import BFLOAT16, AttentionParams, Library, ptr, timed

TOKENS, HEADS, KV_HEADS, DIM = 65536, 32, 8, 128


def pack(document):
    if document:
        return [document] * (TOKENS // document)
    rng, lengths, total = random.Random(1), [], 0
    mu = math.log(4096.0) - 1.1 ** 2 / 2
    while total < TOKENS:
        length = min(max(int(round(math.exp(rng.gauss(mu, 1.1)))), 128), 16384, TOKENS - total)
        lengths.append(length)
        total += length
    return lengths


def sdpa_groups(q, k, v, lengths):
    """[T, H, d] views -> per equal-length group [docs, H, L, d] tensors."""
    groups, start = {}, 0
    for length in lengths:
        groups.setdefault(length, []).append(start)
        start += length
    out = []
    for length, starts in groups.items():
        idx = torch.tensor(starts, device="cuda")[:, None] + torch.arange(length, device="cuda")
        out.append((idx, q[idx].transpose(1, 2), k[idx].transpose(1, 2), v[idx].transpose(1, 2)))
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=11)
    args = parser.parse_args()
    lib = Library()
    dev = torch.cuda.get_device_properties(0)
    print(f"device: {dev.name}, {dev.multi_processor_count} SMs; torch {torch.__version__}")
    torch.manual_seed(0)
    q = torch.randn(TOKENS, HEADS, DIM, device="cuda").bfloat16()
    k = torch.randn(TOKENS, KV_HEADS, DIM, device="cuda").bfloat16()
    v = torch.randn(TOKENS, KV_HEADS, DIM, device="cuda").bfloat16()
    dout = torch.randn_like(q)
    out = torch.empty_like(q)
    lse = torch.empty(HEADS, TOKENS, device="cuda")
    dq = torch.zeros(TOKENS, HEADS, DIM, device="cuda")
    dk = torch.zeros(TOKENS, KV_HEADS, DIM, device="cuda")
    dv = torch.zeros_like(dk)
    params = AttentionParams(HEADS, KV_HEADS, DIM, 1, 0.0)
    rows = []
    for document in (1024, 4096, 16384, 0):
        lengths = pack(document)
        cu = [0]
        for length in lengths:
            cu.append(cu[-1] + length)
        cu_dev = torch.tensor(cu, dtype=torch.int32, device="cuda")
        layout = lib.layout(cu, cu, cu_dev, cu_dev)
        size = ctypes.c_size_t()
        lib.call("dcp_cuda_attention_workspace_size", ctypes.byref(params), ctypes.byref(layout),
                 ctypes.byref(size))
        workspace = torch.empty(size.value, dtype=torch.uint8, device="cuda")
        flops = sum(4.0 * n * n * HEADS * DIM / 2 for n in lengths)

        def ours_fwd():
            lib.call("dcp_cuda_attention_forward", ctypes.byref(params), ctypes.byref(layout), None,
                     BFLOAT16, ptr(q), ptr(k), ptr(v), BFLOAT16, ptr(out), ptr(lse), ptr(workspace),
                     size, None)

        def ours_bwd():
            lib.call("dcp_cuda_attention_backward", ctypes.byref(params), ctypes.byref(layout), None,
                     BFLOAT16, ptr(q), ptr(k), ptr(v), ptr(out), ptr(dout), ptr(lse), ptr(dq), ptr(dk),
                     ptr(dv), 1, ptr(workspace), size, None)

        groups = sdpa_groups(q, k, v, lengths)
        # validate ours against the math backend on the first group's first documents
        ours_fwd()
        idx, gq, gk, gv = groups[0]
        with sdpa_kernel(SDPBackend.MATH):
            ref = F.scaled_dot_product_attention(gq[:2].float(), gk[:2].float(), gv[:2].float(),
                                                 is_causal=True, enable_gqa=True)
        torch.testing.assert_close(out[idx[:2]].float(), ref.transpose(1, 2), rtol=2e-2, atol=2e-2)

        figure = "docs %dK" % (document // 1024) if document else "lognormal"
        t_fwd, t_bwd = timed(ours_fwd, args.repeat), timed(ours_bwd, args.repeat)
        base = {}
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                leaves = [(a.detach().requires_grad_(True), b.detach().requires_grad_(True),
                           c.detach().requires_grad_(True)) for _, a, b, c in groups]

                def fwd():
                    with sdpa_kernel(backend):
                        return [F.scaled_dot_product_attention(a, b, c, is_causal=True, enable_gqa=True)
                                for a, b, c in leaves]

                outs = fwd()
                grads = [torch.randn_like(o) for o in outs]

                def bwd():
                    torch.autograd.backward(outs, grads, retain_graph=True)

                base[name] = (timed(fwd, args.repeat), timed(bwd, args.repeat))
            except RuntimeError as failure:  # backend unavailable for this shape or build
                print(f"{figure}: {name} backend unavailable: {str(failure).splitlines()[0]}")
        rows.append((figure, flops, t_fwd, t_bwd, base))

    print(f"{'figure':<22} {'ours ms':>9} {'best ms':>9} {'ratio':>7} {'TF/s':>7}  backends (ms)")
    for figure, flops, t_fwd, t_bwd, base in rows:
        for phase, ours, scale, index in (("fwd", t_fwd, 1.0, 0), ("bwd", t_bwd, 2.5, 1)):
            times = {name: pair[index] for name, pair in base.items()}
            best = min(times.values()) if times else float("nan")
            detail = " ".join(f"{name} {t:.3f}" for name, t in times.items())
            print(f"{figure + ' ' + phase:<22} {ours:9.3f} {best:9.3f} {best / ours:7.2f} "
                  f"{scale * flops / (ours * 1e-3) / 1e12:7.1f}  {detail}")


if __name__ == "__main__":
    main()
