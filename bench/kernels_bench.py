"""kernels_bench.py - dcp_cuda.cu part 1 against PyTorch implementations of the same ops, in
the same run, on the same device.

    make build/libdcp_cuda.so && python3 bench/kernels_bench.py [--repeat N]

Optional: fla-core (pip install fla-core) for FLA's Triton causal_conv1d with cu_seqlens as a
second baseline of the conv1d rows; without it the bench prints "FLA not installed" and skips
that column.

Shapes (issue 5): 64K local tokens in documents of 1K or 16K tokens (cp 1); RoPE on q (32
heads) and k (8 heads), head dim 128, bfloat16; causal depthwise conv1d over 8192 channels,
width 4, bias and SiLU, bfloat16 (weights float32); LSE merge of a float32 partial into the
accumulator (32 heads x 128). Every op is validated against PyTorch before it is timed.
Timing: CUDA events, L2 flushed (256 MB write) before each repetition, median. Bytes: each
input read once and each output written once. The table: figure, ours, baseline (PyTorch
eager), ratio (baseline time / our time: > 1 means ours is faster), our GB/s and its fraction
of a device-to-device copy measured in the same run.

A second table, conv1d only: ours, FLA (when installed) and a device copy of the same bytes
(the op's bytes read plus written, moved by one copy of half of them), with the ratios. A
third: 50 microbatches of different total token counts (1,000 ... 65,536, none a multiple of
2, 3, 5 or 7 but the ends; random document lengths), forward + backward, the first call of
each shape and the median, in ns per token, ours and FLA's (whose Triton kernels autotune
per shape: the first-call spikes the Megatron seeds pad the token count to 4096 to avoid).
`--dry-run` checks, without torch or a GPU, that the arguments parse and that
build/libdcp_cuda.so exports every function this bench calls (make gpu-round DRY_RUN=1).
"""
import argparse
import ctypes

from dcp_ctypes import (BFLOAT16, FLOAT32, HALF_ALL, AttentionParams, Conv1dParams, Library,
                        RopeOptions, dry_run, ptr, repeat_count, timed)

try:  # --dry-run and --help need neither torch nor a GPU
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None

TOKENS, Q_HEADS, KV_HEADS, HEAD_DIM, CHANNELS, WIDTH = 65536, 32, 8, 128, 8192, 4
THETA = 10000.0


def positions_of(document):
    return torch.arange(TOKENS, device="cuda") % document


# ------------------------------------------------------------------------------ PyTorch ops

def torch_rope(x, pos, inv_freq):
    angle = pos[:, None].double() * inv_freq[None, :]
    cos, sin = angle.cos().float()[:, None, :], angle.sin().float()[:, None, :]
    half = x.shape[-1] // 2
    xf = x.float()
    x1, x2 = xf[..., :half], xf[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


def torch_conv(x, weight, bias, index):
    """Varlen causal depthwise conv1d: taps masked where they would cross a sequence start."""
    xf = x.float()
    y = bias.expand(x.shape[0], -1).clone()
    for k in range(WIDTH):
        shift = WIDTH - 1 - k
        shifted = F.pad(xf, (0, 0, shift, 0))[: x.shape[0]]
        y = y + torch.where((index >= shift)[:, None], shifted, 0.0) * weight[:, k]
    return F.silu(y).to(x.dtype)


def torch_merge(out, lse, acc, acc_lse):
    merged = torch.logaddexp(acc_lse, lse)
    w_acc = torch.exp(acc_lse - merged).nan_to_num(0.0).t()[..., None]
    w_out = torch.exp(lse - merged).nan_to_num(0.0).t()[..., None]
    acc.mul_(w_acc).add_(out * w_out)
    acc_lse.copy_(merged)


def load_fla():
    """FLA's Triton causal_conv1d, or None (the bench then skips its column)."""
    try:
        from fla.modules.convolution import causal_conv1d
    except Exception as error:  # ImportError, or a Triton / torch mismatch inside FLA
        print(f"FLA not installed ({type(error).__name__}: {error}): its column is skipped")
        return None
    return causal_conv1d


def fla_forward(fla_conv, x, weight, bias, cu_seqlens):
    """FLA's varlen causal conv1d: x [1, T, D], weight [D, W], SiLU, sequences by cu_seqlens."""
    out = fla_conv(x=x[None], weight=weight, bias=bias, activation="silu", cu_seqlens=cu_seqlens)
    return (out[0] if isinstance(out, tuple) else out)[0]


def first_and_median(fn, repeat):
    """(ms of the first call, no warm-up and no flush; median ms of `repeat` after warm-up)."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop), timed(fn, repeat)


def microbatch_tokens(count=50, low=1000, high=TOKENS):
    """Token counts spread from low to high, moved to the next count 2, 3, 5 and 7 do not divide."""
    counts = []
    for i in range(count):
        n = low + int((high - low) * (i / (count - 1)) ** 2)
        while 0 < i < count - 1 and any(n % p == 0 for p in (2, 3, 5, 7)):
            n += 1
        counts.append(n)
    return counts


def conv_vs_fla(lib, fla_conv, x, dy, weight, bias, conv, workspace, workspace_bytes, repeat, copy_ms):
    """Table 2 (document lengths 1K and 16K) and table 3 (50 microbatches)."""
    y, dx = torch.empty_like(x), torch.empty_like(x)
    dweight, dbias = torch.empty_like(weight), torch.empty_like(bias)
    weight_fla = weight.to(x.dtype)
    print(f"\n{'conv1d bf16':<24} {'ours ms':>9} {'FLA ms':>9} {'FLA/ours':>9} {'copy ms':>9} "
          f"{'ours/copy':>9}")

    def run(tokens, cu):
        cu_dev = torch.tensor(cu, dtype=torch.int32, device="cuda")
        layout = lib.layout(cu, cu, cu_dev, cu_dev)
        xs, dys = x[:tokens], dy[:tokens]

        def fwd():
            lib.call("dcp_cuda_conv1d_forward", ctypes.byref(conv), ctypes.byref(layout),
                     ctypes.c_int64(tokens), BFLOAT16, ptr(xs), ptr(weight), ptr(bias), ptr(y), None)

        def bwd():
            lib.call("dcp_cuda_conv1d_backward", ctypes.byref(conv), ctypes.byref(layout),
                     ctypes.c_int64(tokens), BFLOAT16, ptr(xs), ptr(weight), ptr(bias), ptr(dys),
                     ptr(dx), ptr(dweight), ptr(dbias), ptr(workspace), workspace_bytes, None)

        fla = None
        if fla_conv is not None:
            xg = xs.clone().requires_grad_(True)
            wg = weight_fla.clone().requires_grad_(True)
            bg = bias.to(x.dtype).clone().requires_grad_(True)
            graph = {}

            def fla_fwd():
                return fla_forward(fla_conv, xs, weight_fla, bias.to(x.dtype), cu_dev)

            def fla_bwd():  # the backward alone, on a graph built once
                if "y" not in graph:
                    graph["y"] = fla_forward(fla_conv, xg, wg, bg, cu_dev)
                return torch.autograd.grad(graph["y"], (xg, wg, bg), dys, retain_graph=True)

            def fla_both():
                return torch.autograd.grad(fla_forward(fla_conv, xg, wg, bg, cu_dev), (xg, wg, bg), dys)
            fla = (fla_fwd, fla_bwd, fla_both)
        return fwd, bwd, fla

    for document in (1024, 16384):
        cu = list(range(0, TOKENS + 1, document))
        fwd, bwd, fla = run(TOKENS, cu)
        fla_fwd, fla_bwd = (fla[0], fla[1]) if fla else (None, None)
        if fla_fwd is not None:  # same answer before any timing
            fwd()
            try:
                torch.testing.assert_close(y.float(), fla_fwd().float(), rtol=2e-2, atol=2e-2)
            except Exception as error:
                print(f"FLA's output differs from ours or its call failed ({error}): its column "
                      f"is skipped")
                fla_conv, fla_fwd, fla_bwd = None, None, None
        x_bytes = TOKENS * CHANNELS * 2
        for figure, ours, theirs, nbytes in ((f"fwd doc {document}", fwd, fla_fwd, 2 * x_bytes),
                                             (f"bwd doc {document}", bwd, fla_bwd, 3 * x_bytes)):
            t_ours = timed(ours, repeat)
            t_copy = copy_ms(nbytes)
            t_fla = timed(theirs, repeat) if theirs is not None else None
            fla_cols = f"{t_fla:9.3f} {t_fla / t_ours:9.2f}" if t_fla else f"{'-':>9} {'-':>9}"
            print(f"{figure:<24} {t_ours:9.3f} {fla_cols} {t_copy:9.3f} {t_ours / t_copy:9.2f}")

    print(f"\n50 microbatches, fwd + bwd, ns per token: first call of the shape, then the median")
    print(f"{'tokens':>7} {'docs':>5} {'ours 1st':>9} {'ours':>9} {'FLA 1st':>9} {'FLA':>9}")
    rng = torch.Generator().manual_seed(20261123)
    for tokens in microbatch_tokens():
        cu = [0]
        while cu[-1] < tokens:
            cu.append(min(tokens, cu[-1] + int(torch.randint(1, 4097, (1,), generator=rng))))
        fwd, bwd, fla = run(tokens, cu)

        def ours():
            fwd()
            bwd()
        first, median = first_and_median(ours, repeat)
        cols = f"{first * 1e6 / tokens:9.2f} {median * 1e6 / tokens:9.2f}"
        if fla is not None:
            f_first, f_median = first_and_median(fla[2], repeat)
            cols += f" {f_first * 1e6 / tokens:9.2f} {f_median * 1e6 / tokens:9.2f}"
        else:
            cols += f" {'-':>9} {'-':>9}"
        print(f"{tokens:7d} {len(cu) - 1:5d} {cols}")


# ------------------------------------------------------------------------------------ bench

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=repeat_count, default=21)
    parser.add_argument("--dry-run", action="store_true",
                        help="check the wiring (arguments, the library's entry points), then exit")
    args = parser.parse_args()
    if args.dry_run:
        raise SystemExit(dry_run(__file__, ("torch", "fla")))
    if torch is None:
        raise SystemExit("kernels_bench.py needs torch (pip install torch)")
    lib = Library()
    torch.manual_seed(0)
    dev = torch.cuda.get_device_properties(0)
    print(f"device: {dev.name}, {dev.multi_processor_count} SMs; torch {torch.__version__}")
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    copy_gbs = 2 * src.numel() / (timed(lambda: dst.copy_(src), args.repeat) * 1e-3) / 1e9
    print(f"device-to-device copy of 1 GiB: {copy_gbs:.1f} GB/s (read + write)")

    q = torch.randn(TOKENS, Q_HEADS, HEAD_DIM, device="cuda").bfloat16()
    k = torch.randn(TOKENS, KV_HEADS, HEAD_DIM, device="cuda").bfloat16()
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    x = torch.randn(TOKENS, CHANNELS, device="cuda").bfloat16()
    dy = torch.randn_like(x)
    y, dx = torch.empty_like(x), torch.empty_like(x)
    weight = torch.randn(CHANNELS, WIDTH, device="cuda") * 0.5
    bias = torch.randn(CHANNELS, device="cuda")
    dweight, dbias = torch.empty_like(weight), torch.empty_like(bias)
    conv = Conv1dParams(CHANNELS, WIDTH, 1)
    workspace_bytes = ctypes.c_size_t()
    lib.call("dcp_cuda_conv1d_workspace_size", ctypes.byref(conv), ctypes.byref(workspace_bytes))
    workspace = torch.empty(workspace_bytes.value, dtype=torch.uint8, device="cuda")
    part = torch.randn(TOKENS, Q_HEADS, HEAD_DIM, device="cuda")
    part_lse = torch.randn(Q_HEADS, TOKENS, device="cuda") * 3
    acc0 = torch.randn_like(part)
    acc_lse0 = torch.randn_like(part_lse) * 3
    attn = AttentionParams(Q_HEADS, Q_HEADS, HEAD_DIM, 1, 0.0)
    rope = RopeOptions(0, 0, THETA, None)
    inv_freq = THETA ** (-2.0 * torch.arange(HEAD_DIM // 2, device="cuda", dtype=torch.float64) / HEAD_DIM)

    rows = []
    for document in (1024, 16384):
        cu = list(range(0, TOKENS + 1, document))
        cu_dev = torch.tensor(cu, dtype=torch.int32, device="cuda")
        layout = lib.layout(cu, cu, cu_dev, cu_dev)
        pos = positions_of(document)
        index = pos

        def ours_rope():
            lib.call("dcp_cuda_rope_forward", ctypes.byref(rope), ctypes.byref(layout), 0, BFLOAT16,
                     HEAD_DIM, Q_HEADS, ptr(q), ptr(q_out), KV_HEADS, ptr(k), ptr(k_out), None)

        def base_rope():
            return torch_rope(q, pos, inv_freq), torch_rope(k, pos, inv_freq)

        def ours_conv():
            lib.call("dcp_cuda_conv1d_forward", ctypes.byref(conv), ctypes.byref(layout),
                     ctypes.c_int64(TOKENS), BFLOAT16, ptr(x), ptr(weight), ptr(bias), ptr(y), None)

        def ours_conv_bwd():
            lib.call("dcp_cuda_conv1d_backward", ctypes.byref(conv), ctypes.byref(layout),
                     ctypes.c_int64(TOKENS), BFLOAT16, ptr(x), ptr(weight), ptr(bias), ptr(dy),
                     ptr(dx), ptr(dweight), ptr(dbias), ptr(workspace), workspace_bytes, None)

        xg = x.clone().requires_grad_(True)
        wg = weight.clone().requires_grad_(True)
        bg = bias.clone().requires_grad_(True)
        yg = torch_conv(xg, wg, bg, index)

        def base_conv_bwd():
            return torch.autograd.grad(yg, (xg, wg, bg), dy, retain_graph=True)

        acc, acc_lse = acc0.clone(), acc_lse0.clone()
        acc_t, acc_lse_t = acc0.clone(), acc_lse0.clone()

        def ours_merge():
            lib.call("dcp_cuda_acc_merge", ctypes.byref(attn), ctypes.byref(layout), HALF_ALL,
                     ptr(part), ptr(part_lse), ptr(acc), ptr(acc_lse), None)

        def base_merge():
            torch_merge(part, part_lse, acc_t, acc_lse_t)

        # validate first (one call each, same inputs)
        ours_rope()
        rq, rk = base_rope()
        torch.testing.assert_close(q_out.float(), rq.float(), rtol=1e-2, atol=1e-2)
        torch.testing.assert_close(k_out.float(), rk.float(), rtol=1e-2, atol=1e-2)
        ours_conv()
        torch.testing.assert_close(y.float(), torch_conv(x, weight, bias, index).float(), rtol=2e-2, atol=2e-2)
        ours_conv_bwd()
        gx, gw, gb = base_conv_bwd()
        torch.testing.assert_close(dx.float(), gx.float(), rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(dweight, gw, rtol=1e-3, atol=1e-2)
        torch.testing.assert_close(dbias, gb, rtol=1e-3, atol=1e-2)
        ours_merge()
        base_merge()
        torch.testing.assert_close(acc, acc_t, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(acc_lse, acc_lse_t, rtol=1e-5, atol=1e-5)

        qk_bytes = 2 * TOKENS * (Q_HEADS + KV_HEADS) * HEAD_DIM * 2
        x_bytes = TOKENS * CHANNELS * 2
        merge_bytes = 3 * TOKENS * Q_HEADS * HEAD_DIM * 4 + 3 * TOKENS * Q_HEADS * 4
        for figure, ours, base, nbytes in (
                ("rope fwd bf16", ours_rope, base_rope, qk_bytes),
                ("conv1d fwd bf16", ours_conv, lambda: torch_conv(x, weight, bias, index), 2 * x_bytes),
                ("conv1d bwd bf16", ours_conv_bwd, base_conv_bwd, 3 * x_bytes),
                ("merge fp32", ours_merge, base_merge, merge_bytes)):
            t_ours, t_base = timed(ours, args.repeat), timed(base, args.repeat)
            gbs = nbytes / (t_ours * 1e-3) / 1e9
            rows.append((f"{figure} doc {document}", t_ours, t_base, gbs))

    print(f"{'figure':<28} {'ours ms':>9} {'torch ms':>9} {'ratio':>7} {'GB/s':>8} {'vs copy':>8}")
    for figure, t_ours, t_base, gbs in rows:
        print(f"{figure:<28} {t_ours:9.3f} {t_base:9.3f} {t_base / t_ours:7.2f} {gbs:8.1f} {gbs / copy_gbs:8.2f}")

    def copy_ms(nbytes):
        """A device copy moving nbytes in all (nbytes / 2 read, nbytes / 2 written)."""
        half = nbytes // 2
        if half <= src.numel():
            return timed(lambda: dst[:half].copy_(src[:half]), args.repeat)
        return timed(lambda: dst.copy_(src), args.repeat) * half / src.numel()  # scaled up

    conv_vs_fla(lib, load_fla(), x, dy, weight, bias, conv, workspace, workspace_bytes,
                args.repeat, copy_ms)


if __name__ == "__main__":
    main()
