"""attention_bench.py - our varlen THD attention against PyTorch's best attention backends, in
the same run, on the same device.

    make build/libdcp_cuda.so && python3 bench/attention_bench.py [--repeat N]

Packs of 64K tokens made of 1K, 4K or 16K documents, or a lognormal mix (mean 4096, sigma 1.1,
128..16384); causal, head dim 128, 32 query heads, 8 kv heads, bfloat16. Baselines:
torch.nn.functional.scaled_dot_product_attention restricted to the FLASH_ATTENTION backend and
to the CUDNN_ATTENTION backend, one call per group of equal-length documents ([docs, heads, L,
d], enable_gqa) -- the most favourable dense form of a varlen pack for PyTorch. FLOPs: forward 4
sum(L^2) heads d / 2 (causal); backward 2.5 x forward. Table: figure, ours, best baseline,
ratio (baseline time / ours: > 1 means ours is faster), and each backend.

Before timing, ours is validated on the first document of each pack against a float32
reference computed in query chunks (the first and the last VALIDATE_ROWS rows, against all
the keys they see), under the rule of tests/tolerance.h: norm-wise relative error <= 1e-2 and
max |error| <= 8 bf16 ulps of max |reference|. Not the SDPA math backend on whole documents:
it materialises [docs, heads, L, L] in float32, 64 GiB for two 16K documents, which is what
ran an 80 GB GPU out of memory. Each phase prints its peak memory
(torch.cuda.max_memory_allocated); tensors of a pack and of a backend are freed before the
next one. `python3 bench/attention_bench.py --self-test` checks the chunked reference and the
rule against SDPA on the CPU (no GPU, no libdcp needed). `--dry-run` checks, without torch or
a GPU, that the arguments parse and that build/libdcp_cuda.so exports every function this
bench calls (make gpu-round DRY_RUN=1).
"""
import argparse
import ctypes
import math
import random

from dcp_ctypes import (BFLOAT16, AttentionParams, Library, dry_run, ptr, repeat_count,
                        timed)

try:  # --dry-run and --help need neither torch nor a GPU
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    torch = None

TOKENS, HEADS, KV_HEADS, DIM = 65536, 32, 8, 128
VALIDATE_ROWS = 512       # query rows per validated chunk: scores [HEADS, 512, L] <= 1 GiB
NORM_BOUND = 1e-2         # tests/tolerance.h, bf16
MAX_ULPS, BF16_BITS = 8, 8


def reference_rows(q, k, v, begin, end, scale=None):
    """Causal attention of query rows [begin, end) of one document ([L, heads, d] tensors,
    GQA by head groups) against keys [0, end), in float32: [end - begin, heads, d]. Memory:
    scores [heads, end - begin, end] float32."""
    heads, kv_heads, dim = q.shape[1], k.shape[1], q.shape[2]
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    qc = q[begin:end].float().transpose(0, 1)                                # [H, n, d]
    kc = k[:end].float().repeat_interleave(heads // kv_heads, dim=1).transpose(0, 1)
    vc = v[:end].float().repeat_interleave(heads // kv_heads, dim=1).transpose(0, 1)
    scores = torch.matmul(qc, kc.transpose(1, 2)) * scale                     # [H, n, end]
    rows = torch.arange(begin, end, device=q.device)[:, None]
    scores.masked_fill_(torch.arange(end, device=q.device)[None, :] > rows, float("-inf"))
    out = torch.matmul(torch.softmax(scores, dim=-1), vc)                     # [H, n, d]
    return out.transpose(0, 1)


def close(got, ref):
    """tests/tolerance.h's rule for bf16: (ok, norm error, max error, max bound)."""
    got, ref = got.float(), ref.float()
    error = (got - ref).abs()
    norm = (torch.linalg.vector_norm(got - ref) / torch.linalg.vector_norm(ref)).item()
    peak = ref.abs().max().item()
    bound = MAX_ULPS * 2.0 ** (math.frexp(peak)[1] - BF16_BITS) if peak > 0 else 0.0
    worst = error.max().item()
    ok = bool(torch.isfinite(got).all()) and norm <= NORM_BOUND and worst <= bound
    return ok, norm, worst, bound


def validate(out, q, k, v, length, figure):
    """Ours against reference_rows on the first document (rows [0, length) of the pack)."""
    chunks = [(0, min(VALIDATE_ROWS, length))]
    if length > VALIDATE_ROWS:
        chunks.append((length - VALIDATE_ROWS, length))
    for begin, end in chunks:
        ref = reference_rows(q, k, v, begin, end)
        ok, norm, worst, bound = close(out[begin:end], ref)
        print(f"{figure}: rows [{begin}, {end}) of a {length}-token document: norm error "
              f"{norm:.2e} (bound {NORM_BOUND:g}), max error {worst:.2e} (bound {bound:.2e})")
        if not ok:
            raise SystemExit(f"{figure}: ours does not match the reference")
        del ref


def memory(figure, phase):
    """Prints the phase's peak in GiB, returns it and starts the next phase's count."""
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() / 2**30
    print(f"memory: {figure} {phase}: peak {peak:.2f} GiB allocated, "
          f"{torch.cuda.memory_reserved() / 2**30:.2f} GiB reserved")
    torch.cuda.reset_peak_memory_stats()
    return peak


def self_test():
    """The chunked reference and the rule against SDPA's math backend, on the CPU."""
    torch.manual_seed(0)
    length, heads, kv_heads, dim = 300, 4, 2, 32
    q, k, v = (torch.randn(length, h, dim).bfloat16() for h in (heads, kv_heads, kv_heads))
    with sdpa_kernel(SDPBackend.MATH):
        whole = F.scaled_dot_product_attention(
            q.float().transpose(0, 1)[None], k.float().transpose(0, 1)[None],
            v.float().transpose(0, 1)[None], is_causal=True, enable_gqa=True)[0].transpose(0, 1)
    for begin, end in ((0, 64), (236, 300), (100, 101)):
        ref = reference_rows(q, k, v, begin, end)
        assert close(ref, whole[begin:end])[0], (begin, end)
        assert close(ref.bfloat16(), whole[begin:end])[0], "bf16 rounding must pass"
        wrong = reference_rows(q, k, v, begin, end, scale=1.4427 / math.sqrt(dim))
        assert not close(wrong, whole[begin:end])[0], "a wrong softmax scale must fail"
        dropped = ref.clone()
        dropped[: max(1, (end - begin) // 8)] = 0
        assert not close(dropped, whole[begin:end])[0], "dropped rows must fail"
    print("self-test passed")


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
    parser.add_argument("--repeat", type=repeat_count, default=11)
    parser.add_argument("--self-test", action="store_true",
                        help="check the reference and the rule on the CPU, then exit")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the wiring (arguments, the library's entry points), then exit")
    args = parser.parse_args()
    if args.dry_run:
        raise SystemExit(dry_run(__file__, ("torch",)))
    if torch is None:
        raise SystemExit("attention_bench.py needs torch (pip install torch)")
    if args.self_test:
        self_test()
        return
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
    peaks = [memory("inputs", "q k v dout out lse dq dk dv")]
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

        def ours_bwd(deterministic):
            lib.call("dcp_cuda_attention_backward", ctypes.byref(params), ctypes.byref(layout), None,
                     BFLOAT16, ptr(q), ptr(k), ptr(v), ptr(out), ptr(dout), ptr(lse), ptr(dq), ptr(dk),
                     ptr(dv), deterministic, ptr(workspace), size, None)

        figure = "docs %dK" % (document // 1024) if document else "lognormal"
        ours_fwd()
        validate(out, q, k, v, lengths[0], figure)
        peaks.append(memory(figure, "validation"))
        # the backward target is for deterministic = 0 (dq by atomics); the
        # deterministic path (dq by its own kernel) is printed beside it
        t_fwd = timed(ours_fwd, args.repeat)
        t_bwd = timed(lambda: ours_bwd(0), args.repeat)
        t_bwd_det = timed(lambda: ours_bwd(1), args.repeat)
        peaks.append(memory(figure, "ours"))
        groups = sdpa_groups(q, k, v, lengths)
        base = {}
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            leaves = outs = grads = None
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
            finally:  # the graph, outputs and gradients of this backend, before the next
                del leaves, outs, grads
                torch.cuda.empty_cache()
            peaks.append(memory(figure, name))
        rows.append((figure, flops, t_fwd, t_bwd, t_bwd_det, base))
        del groups, workspace, cu_dev
        torch.cuda.empty_cache()

    print(f"memory: peak of the run {max(peaks):.2f} GiB allocated "
          f"(of {dev.total_memory / 2**30:.1f} GiB)")
    print(f"{'figure':<22} {'ours ms':>9} {'best ms':>9} {'ratio':>7} {'TF/s':>7}  backends (ms)")
    for figure, flops, t_fwd, t_bwd, t_bwd_det, base in rows:
        for phase, ours, scale, index in (("fwd", t_fwd, 1.0, 0), ("bwd", t_bwd, 2.5, 1),
                                          ("bwd det", t_bwd_det, 2.5, 1)):
            times = {name: pair[index] for name, pair in base.items()}
            best = min(times.values()) if times else float("nan")
            detail = " ".join(f"{name} {t:.3f}" for name, t in times.items())
            print(f"{figure + ' ' + phase:<22} {ours:9.3f} {best:9.3f} {best / ours:7.2f} "
                  f"{scale * flops / (ours * 1e-3) / 1e12:7.1f}  {detail}")


if __name__ == "__main__":
    main()
