"""The torch ops (libdcp.ops) against PyTorch: SDPA per document, a plain depthwise conv1d per
document, a rotate-half RoPE reference, and the autograd of each. Without torch every test
skips; without a GPU or build/libdcp_cuda.so the GPU tests skip ("no CUDA device: skipped")
and only the fake-tensor (meta) tests run, which check shapes, autograd wiring and tracing.
With the CPU execution model's library (DCP_CUDA_LIBRARY=build/libdcp_cuda-cpu.so, `make
test-torch-cpu`) the GPU tests run the real kernels on CPU tensors (DEVICE "cpu")."""
import importlib.util
import math
import os
import random
import unittest

import libdcp

HAVE_TORCH = importlib.util.find_spec("torch") is not None
if HAVE_TORCH:
    import torch
    import torch.nn.functional as F
    from libdcp import ops

SEED = 4242
# Norm-wise relative error bounds: bf16 inputs against a float32 reference.
BF16_FORWARD_TOLERANCE = 2e-2
BF16_GRADIENT_TOLERANCE = 5e-2
FP32_TOLERANCE = 1e-5


def on_the_model():
    """libdcp_cuda.so is the CPU execution model's build: the kernels run on CPU tensors."""
    return HAVE_TORCH and libdcp.library_path("cuda") is not None and ops.emulated()


DEVICE = "cpu" if on_the_model() else "cuda"


def gpu_reason():
    if not HAVE_TORCH:
        return "no torch: skipped"
    if on_the_model():
        return None
    if not torch.cuda.is_available():
        return "no CUDA device: skipped"
    if libdcp.library_path("cuda") is None:
        return "no libdcp_cuda.so (make build/libdcp_cuda.so): skipped"
    return None


def relative_error(got, want):
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def random_lengths(rng, count, low, high):
    return [rng.randint(low, high) for _ in range(count)]


def cumulative(values):
    out = [0]
    for v in values:
        out.append(out[-1] + v)
    return out


def padded_layout(lengths, cp, multiple=None):
    """cu_seqlens and cu_seqlens_padded with each sequence padded to a multiple of 2 cp (cp > 1)
    or `multiple`."""
    m = multiple or (2 * cp if cp > 1 else 1)
    padded = [-(-n // m) * m for n in lengths]
    return cumulative(lengths), cumulative(padded)


def rank_positions(cu_padded, lengths, cp, rank):
    """Per local row of `rank`: (sequence, global position) or None for padding, from the
    library's zigzag rule."""
    rows = []
    for i, n in enumerate(lengths):
        padded = cu_padded[i + 1] - cu_padded[i]
        for local in range(padded // cp):
            p = libdcp.zigzag_position(padded, cp, rank, local)
            rows.append((i, p) if p < n else None)
    return rows


def sdpa_reference(q, k, v, lengths, causal=True):
    """Per document float32 SDPA on whole sequences [total, heads, dim]; GQA by repeating."""
    outs, start = [], 0
    group = q.shape[1] // k.shape[1]
    for n in lengths:
        qd = q[start:start + n].float().transpose(0, 1)[None]
        kd = k[start:start + n].float().repeat_interleave(group, 1).transpose(0, 1)[None]
        vd = v[start:start + n].float().repeat_interleave(group, 1).transpose(0, 1)[None]
        outs.append(F.scaled_dot_product_attention(qd, kd, vd, is_causal=causal)[0]
                    .transpose(0, 1))
        start += n
    return torch.cat(outs)


def to_rank_rows(full, rows, cu_valid):
    """A rank's local buffer gathered from whole-sequence rows; padding rows 0."""
    out = full.new_zeros((len(rows),) + full.shape[1:])
    for r, where in enumerate(rows):
        if where is not None:
            out[r] = full[cu_valid[where[0]] + where[1]]
    return out


@unittest.skipUnless(HAVE_TORCH, "no torch: skipped")
class FakeImplementations(unittest.TestCase):
    """Shapes, dtypes and autograd wiring of every op on meta tensors (no GPU needed), and a
    torch.compile trace."""

    def layout(self):
        meta = "meta"
        cu, cu_padded = [0, 30, 60], [0, 32, 64]
        i32 = torch.int32
        return ops.Layout(torch.tensor(cu, dtype=i32, device=meta),
                          torch.tensor(cu_padded, dtype=i32, device=meta),
                          torch.tensor(cu, dtype=i32), torch.tensor(cu_padded, dtype=i32), 1)

    def tensor(self, *shape, dtype=None):
        return torch.empty(*shape, device="meta", dtype=dtype or torch.bfloat16,
                           requires_grad=True)

    def test_attention_and_ring(self):
        layout = self.layout()
        q, k, v = self.tensor(64, 4, 64), self.tensor(64, 2, 64), self.tensor(64, 2, 64)
        out, lse = ops.varlen_attention(q, k, v, layout)
        self.assertEqual((out.shape, out.dtype), (q.shape, q.dtype))
        self.assertEqual((lse.shape, lse.dtype), ((4, 64), torch.float32))
        out.sum().backward()
        self.assertEqual((k.grad.shape, k.grad.dtype), (k.shape, k.dtype))
        qr, kr = self.tensor(2, 32, 4, 64), self.tensor(2, 32, 2, 64)
        out, lse = ops.ring_attention(qr, kr, kr, layout)
        self.assertEqual(lse.shape, (2, 4, 32))
        out.sum().backward()
        self.assertEqual(qr.grad.shape, qr.shape)

    def test_merge_rope_conv1d(self):
        layout = self.layout()
        part, part_lse = self.tensor(64, 4, 8, dtype=torch.float32), self.tensor(
            4, 64, dtype=torch.float32)
        out, lse = ops.merge([(part, part_lse, 0), (part, part_lse, 0)], layout, 0)
        (out.sum() + lse.sum()).backward()
        self.assertEqual((part.grad.shape, part_lse.grad.shape), (part.shape, part_lse.shape))
        q, k = self.tensor(64, 4, 64), self.tensor(64, 2, 64)
        q_out, k_out = ops.rope(q, k, layout, 0)
        (q_out.sum() + k_out.sum()).backward()
        self.assertEqual(k.grad.shape, k.shape)
        self.assertIsNone(ops.rope(q, None, layout, 0)[1])
        x, w, b = (self.tensor(64, 16, dtype=torch.float32), self.tensor(16, 4, dtype=torch.float32),
                   self.tensor(16, dtype=torch.float32))
        ops.conv1d(x, w, b, layout, silu=True).sum().backward()
        self.assertEqual((w.grad.shape, b.grad.shape), (w.shape, b.shape))

    def test_compile_traces_without_graph_breaks(self):
        layout = self.layout()
        q = torch.empty(64, 4, 64, device="meta", dtype=torch.bfloat16)

        def step(q, a, b, c, d):
            return ops.attention_forward(q, q, q, a, b, c, d, 1, 0, 0, 0, 0, True, 0.0)[1].sum()
        compiled = torch.compile(step, backend="eager", fullgraph=True)
        self.assertEqual(compiled(q, *layout.args()[:4]).shape, ())

    @unittest.skipIf(on_the_model(), "CPU tensors are the device's on the execution model")
    def test_cpu_tensors_are_refused(self):
        cpu_layout = ops.Layout.from_lists([0, 4], [0, 4], 1, device="cpu")
        q = torch.zeros(4, 1, 64, dtype=torch.bfloat16)
        with self.assertRaises(ValueError):
            ops.varlen_attention(q, q, q, cpu_layout)


@unittest.skipUnless(HAVE_TORCH, "no torch: skipped")
class TinyTrainingExample(unittest.TestCase):
    """python/examples/train_tiny.py: on the GPU with the kernels, else on the CPU with dense
    torch attention over the CP rows (the loader's packing, positions and loss masks)."""

    def test_same_loss_with_and_without_cp(self):
        import importlib.machinery
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                            "train_tiny.py")
        example = importlib.machinery.SourceFileLoader("train_tiny", path).load_module()
        args = ["--steps", "2", "--documents", "3", "--max-length", "96"]
        if gpu_reason():
            args.append("--reference-ops")
        self.assertEqual(example.main(args), 0)


@unittest.skipIf(gpu_reason(), gpu_reason())
class OnTheGpu(unittest.TestCase):
    def setUp(self):
        print(f"seed {SEED}")
        torch.manual_seed(SEED)
        self.rng = random.Random(SEED)

    def test_varlen_attention_matches_sdpa_per_document(self):
        for heads, kv_heads, dim in ((4, 4, 64), (8, 2, 128)):
            lengths = random_lengths(self.rng, 5, 1, 300)
            cu, cu_padded = padded_layout(lengths, 1, multiple=8)
            layout = ops.Layout.from_lists(cu, cu_padded)
            rows = rank_positions(cu_padded, lengths, 1, 0)
            total = sum(lengths)
            full = [torch.randn(total, h, dim, device=DEVICE, dtype=torch.bfloat16)
                    for h in (heads, kv_heads, kv_heads)]
            q, k, v = (to_rank_rows(t, rows, cu).requires_grad_() for t in full)
            out, lse = ops.varlen_attention(q, k, v, layout)
            ref_full = [t.float().requires_grad_() for t in full]
            ref = sdpa_reference(*ref_full, lengths)
            self.assertLess(relative_error(out, to_rank_rows(ref, rows, cu)),
                            BF16_FORWARD_TOLERANCE)
            pad = torch.tensor([r is None for r in rows], device=DEVICE)
            self.assertTrue(torch.all(out[pad] == 0))
            self.assertTrue(torch.all(torch.isneginf(lse[:, pad])))
            dout_full = torch.randn_like(ref).to(torch.bfloat16).float()
            out.backward(to_rank_rows(dout_full, rows, cu).to(torch.bfloat16))
            ref.backward(dout_full)
            for got, want in zip((q.grad, k.grad, v.grad), ref_full):
                self.assertLess(relative_error(got, to_rank_rows(want.grad, rows, cu)),
                                BF16_GRADIENT_TOLERANCE)

    def test_ring_attention_matches_sdpa_at_cp_2_and_4(self):
        for cp in (2, 4):
            lengths = random_lengths(self.rng, 3, 1, 400)
            cu, cu_padded = padded_layout(lengths, cp)
            layout = ops.Layout.from_lists(cu, cu_padded, cp)
            per_rank = [rank_positions(cu_padded, lengths, cp, r) for r in range(cp)]
            total = sum(lengths)
            full = [torch.randn(total, 4, 64, device=DEVICE, dtype=torch.bfloat16)
                    for _ in range(3)]
            q, k, v = (torch.stack([to_rank_rows(t, rows, cu) for rows in per_rank])
                       .requires_grad_() for t in full)
            out, lse = ops.ring_attention(q, k, v, layout)
            ref_full = [t.float().requires_grad_() for t in full]
            ref = sdpa_reference(*ref_full, lengths)
            want = torch.stack([to_rank_rows(ref, rows, cu) for rows in per_rank])
            self.assertLess(relative_error(out, want), BF16_FORWARD_TOLERANCE, f"cp {cp}")
            dout_full = torch.randn_like(ref).to(torch.bfloat16).float()
            dout = torch.stack([to_rank_rows(dout_full, rows, cu) for rows in per_rank])
            out.backward(dout.to(torch.bfloat16))
            ref.backward(dout_full)
            for got, want_full in zip((q.grad, k.grad, v.grad), ref_full):
                want = torch.stack([to_rank_rows(want_full.grad, rows, cu) for rows in per_rank])
                self.assertLess(relative_error(got, want), BF16_GRADIENT_TOLERANCE, f"cp {cp}")

    def test_ring_steps_merged_equal_the_ring(self):
        cp = 2
        lengths = random_lengths(self.rng, 3, 8, 300)
        cu, cu_padded = padded_layout(lengths, cp)
        layout = ops.Layout.from_lists(cu, cu_padded, cp)
        rows = len(rank_positions(cu_padded, lengths, cp, 0))
        q, k, v = (torch.randn(cp, rows, 4, 64, device=DEVICE, dtype=torch.bfloat16)
                   for _ in range(3))
        ring_out, ring_lse = ops.ring_attention(q, k, v, layout)
        for rank in range(cp):
            partials = []
            for step in range(cp):
                (q_rank, q_half, kv_rank, kv_half), causal = ops.ring_step_plan(cp, rank, step)
                out, lse = ops.varlen_attention(q[q_rank], k[kv_rank], v[kv_rank], layout,
                                                causal, view=(q_rank, q_half, kv_rank, kv_half))
                partials.append((out.float(), lse, q_half))
            merged, merged_lse = ops.merge(partials, layout, rank)
            self.assertLess(relative_error(merged, ring_out[rank].float()),
                            BF16_FORWARD_TOLERANCE)
            finite = torch.isfinite(ring_lse[rank])
            self.assertLess(relative_error(merged_lse[finite], ring_lse[rank][finite]),
                            FP32_TOLERANCE * 100)

    def test_merge_gradient_matches_autograd_of_the_formula(self):
        cu, cu_padded = [0, 20, 50], [0, 24, 56]
        layout = ops.Layout.from_lists(cu, cu_padded)
        rows = 56
        outs = [torch.randn(rows, 2, 8, device=DEVICE, requires_grad=True) for _ in range(3)]
        lses = [torch.randn(2, rows, device=DEVICE, requires_grad=True) for _ in range(3)]
        valid = torch.tensor([r is not None for r in rank_positions(cu_padded, [20, 30], 1, 0)],
                             device=DEVICE)
        out, lse = ops.merge([(o, l, 0) for o, l in zip(outs, lses)], layout, 0)
        ref_lse = torch.logsumexp(torch.stack(lses), 0)
        ref_out = sum(torch.exp(l - ref_lse).transpose(0, 1)[..., None] * o
                      for o, l in zip(outs, lses))
        self.assertLess(relative_error(out[valid], ref_out[valid]), FP32_TOLERANCE)
        dout, dlse = torch.randn_like(out), torch.randn_like(lse)
        dout[~valid] = 0
        dlse[:, ~valid] = 0
        got = torch.autograd.grad((out * dout).sum() + (lse * dlse).sum(), outs + lses)
        want = torch.autograd.grad((ref_out * dout).sum() + (ref_lse * dlse).sum(),
                                   outs + lses)
        for g, w in zip(got, want):
            self.assertLess(relative_error(g, w), 1e-4)

    def test_rope_matches_rotate_half_at_cp_positions(self):
        cp, dim = 2, 64
        lengths = random_lengths(self.rng, 3, 1, 200)
        cu, cu_padded = padded_layout(lengths, cp)
        layout = ops.Layout.from_lists(cu, cu_padded, cp)
        for rank in range(cp):
            rows = rank_positions(cu_padded, lengths, cp, rank)
            q = torch.randn(len(rows), 4, dim, device=DEVICE, requires_grad=True)
            k = torch.randn(len(rows), 2, dim, device=DEVICE, requires_grad=True)
            q_out, k_out = ops.rope(q, k, layout, rank)
            pos = torch.tensor([w[1] if w else 0 for w in rows], device=DEVICE,
                               dtype=torch.float64)
            inv = 10000.0 ** (-torch.arange(0, dim, 2, device=DEVICE, dtype=torch.float64) / dim)
            angle = pos[:, None] * inv[None]
            cos = torch.cat([angle.cos()] * 2, -1)[:, None].float()
            sin = torch.cat([angle.sin()] * 2, -1)[:, None].float()
            valid = torch.tensor([w is not None for w in rows], device=DEVICE)[:, None, None]

            def reference(x):
                half = x.shape[-1] // 2
                rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
                return torch.where(valid, x * cos + rotated * sin, torch.zeros_like(x))
            self.assertLess(relative_error(q_out, reference(q)), FP32_TOLERANCE)
            self.assertLess(relative_error(k_out, reference(k)), FP32_TOLERANCE)
            dq, dk = torch.randn_like(q_out), torch.randn_like(k_out)
            got = torch.autograd.grad((q_out * dq).sum() + (k_out * dk).sum(), (q, k))
            want = torch.autograd.grad((reference(q) * dq).sum() + (reference(k) * dk).sum(),
                                       (q, k))
            for g, w in zip(got, want):
                self.assertLess(relative_error(g, w), FP32_TOLERANCE)

    def test_conv1d_matches_plain_conv1d_per_document(self):
        width, channels = 4, 32
        lengths = random_lengths(self.rng, 4, 1, 100)
        cu, cu_padded = padded_layout(lengths, 1, multiple=16)
        layout = ops.Layout.from_lists(cu, cu_padded)
        rows = rank_positions(cu_padded, lengths, 1, 0)
        x = torch.randn(len(rows), channels, device=DEVICE, requires_grad=True)
        w = torch.randn(channels, width, device=DEVICE, requires_grad=True)
        b = torch.randn(channels, device=DEVICE, requires_grad=True)
        for silu in (False, True):
            y = ops.conv1d(x, w, b, layout, silu)
            pieces = []
            for i, n in enumerate(lengths):
                doc = x[cu_padded[i]:cu_padded[i] + n].transpose(0, 1)[None]
                out = F.conv1d(F.pad(doc, (width - 1, 0)), w[:, None], b, groups=channels)
                out = F.silu(out) if silu else out
                pad = cu_padded[i + 1] - cu_padded[i] - n
                pieces += [out[0].transpose(0, 1), x.new_zeros(pad, channels)]
            want = torch.cat(pieces)
            self.assertLess(relative_error(y, want), FP32_TOLERANCE)
            dy = torch.randn_like(y)
            got = torch.autograd.grad((y * dy).sum(), (x, w, b))
            ref = torch.autograd.grad((want * dy).sum(), (x, w, b))
            for g, r in zip(got, ref):
                self.assertLess(relative_error(g, r), 1e-4)


if __name__ == "__main__":
    unittest.main()
