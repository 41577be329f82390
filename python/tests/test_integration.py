"""From a rank view to the attention call (docs/integration.md), in Python: the per-step
FlashAttention calls of RankView.flash_attn_calls, computed with FlashAttention's own
semantics and merged through the LSE, give each rank's rows of plain causal attention over the
whole samples; TransformerEngine's arguments are the view's, and its THD RoPE positions are
the view's positions. Where flash_attn, torch and a GPU are present the real
flash_attn_varlen_func runs the same calls."""
import importlib.util
import math
import os
import random
import subprocess
import sys
import unittest

import libdcp

SEED = 20261125  # fixed; printed by the tests that draw from it
HEAD_DIM = 4
EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                       "attention_args.py")


def flash_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal):
    """flash_attn_varlen_func's documented semantics for one head, in Python floats: per
    sequence, softmax(q k / sqrt(d)) v with the causal mask aligned to the bottom right;
    returns the output rows and the natural-log LSE of each."""
    out, lse = [], []
    for j in range(len(cu_seqlens_q) - 1):
        lq = cu_seqlens_q[j + 1] - cu_seqlens_q[j]
        lk = cu_seqlens_k[j + 1] - cu_seqlens_k[j]
        assert lq <= max_seqlen_q and lk <= max_seqlen_k
        keys = range(cu_seqlens_k[j], cu_seqlens_k[j + 1])
        for i in range(lq):
            row = q[cu_seqlens_q[j] + i]
            visible = list(keys)[:i + lk - lq + 1] if causal else list(keys)
            scores = [sum(a * b for a, b in zip(row, k[m])) / math.sqrt(HEAD_DIM)
                      for m in visible]
            top = max(scores)
            weights = [math.exp(s - top) for s in scores]
            total = sum(weights)
            out.append([sum(w * v[m][d] for w, m in zip(weights, visible)) / total
                        for d in range(HEAD_DIM)])
            lse.append(top + math.log(total))
    return out, lse


def merge(acc, part_out, part_lse, row):
    """Folds one partial result into an accumulator entry [out, lse] through the LSE."""
    out, lse = acc.get(row, (None, -math.inf))
    if out is None:
        acc[row] = (part_out, part_lse)
        return
    merged = max(lse, part_lse) + math.log1p(math.exp(-abs(lse - part_lse)))
    a, b = math.exp(lse - merged), math.exp(part_lse - merged)
    acc[row] = ([a * x + b * y for x, y in zip(out, part_out)], merged)


def whole_attention(q, k, v):
    """Causal attention over one whole sample: the oracle, independent of any split."""
    out, _ = flash_varlen(q, k, v, [0, len(q)], [0, len(k)], len(q), len(k), True)
    return out


class FlashAttentionCalls(unittest.TestCase):
    def setUp(self):
        print(f"seed {SEED}")
        self.rng = random.Random(SEED)

    def vectors(self, n):
        return [[self.rng.uniform(-1, 1) for _ in range(HEAD_DIM)] for _ in range(n)]

    def check_plan(self, plan, run=flash_varlen, tolerance=1e-9):
        tokens = {s: (self.vectors(n), self.vectors(n), self.vectors(n))
                  for s, n in enumerate(plan.sample_lengths)}
        expected = {s: whole_attention(*tokens[s]) for s in tokens}
        checked = 0
        for k in range(plan.num_microbatches):
            views = [plan.rank_view(r, k) for r in range(plan.ranks)]
            for view in views:
                if view.idle:
                    self.assertEqual(view.flash_attn_calls(), ())
                    continue

                def local(field, rank):  # rank's local buffer of q, k or v (padding None)
                    member = views[rank]
                    return [tokens[member.samples[s]][field][p] if p >= 0 else None
                            for s, p in zip(member.row_samples, member.positions)]
                acc = {}
                calls = view.flash_attn_calls()
                self.assertEqual(len(calls), view.cp)
                for call in calls:
                    self.assertEqual(call.kv_source, view.first_rank + call.kv_rank)
                    q = [local(0, view.rank)[r] for r in call.q_rows]
                    kk = [local(1, call.kv_source)[r] for r in call.kv_rows]
                    vv = [local(2, call.kv_source)[r] for r in call.kv_rows]
                    self.assertNotIn(None, q + kk + vv, "a padding row in a call")
                    out, lse = run(q, kk, vv, **call.flash_attn_kwargs())
                    for row, o, l in zip(call.q_rows, out, lse):
                        merge(acc, o, l, row)
                for row, (s, p) in enumerate(zip(view.row_samples, view.positions)):
                    if p < 0:
                        self.assertNotIn(row, acc)
                        continue
                    want = expected[view.samples[s]][p]
                    got = acc[row][0]
                    self.assertLess(max(abs(a - b) for a, b in zip(got, want)), tolerance)
                    checked += 1
        self.assertEqual(checked, sum(plan.sample_lengths))

    def test_calls_merge_to_whole_sequence_attention(self):
        """cp 1 to 4 with padding (pad_multiple 3: chunks that end in padding)."""
        lengths = [self.rng.randint(1, 40) for _ in range(24)]
        for config in ({}, {"pad_multiple": 3}, {"min_cp": 4, "max_cp": 4}):
            plan = libdcp.plan(lengths, ranks=8, max_tokens_per_rank=16, sync_ranks=1, **config)
            self.assertTrue(any(g.cp > 1 for g in plan.groups))
            self.check_plan(plan)

    @unittest.skipUnless(importlib.util.find_spec("flash_attn") and
                         importlib.util.find_spec("torch"), "no flash_attn or torch: skipped")
    def test_the_real_flash_attn_varlen_func(self):
        """Not run where this was written (no GPU, no flash_attn)."""
        import torch
        from flash_attn import flash_attn_varlen_func
        if not torch.cuda.is_available():
            self.skipTest("no CUDA device: skipped")

        padded_dim = 8  # FlashAttention's smallest head dim; zeros change no dot product

        def tensor(rows):
            values = torch.zeros(len(rows), 1, padded_dim, dtype=torch.float16, device="cuda")
            values[:, 0, :HEAD_DIM] = torch.tensor(rows, dtype=torch.float16)
            return values

        def run(q, k, v, **kwargs):
            kwargs = dict(kwargs)
            cu_q, cu_k = (torch.tensor(kwargs.pop(key), dtype=torch.int32, device="cuda")
                          for key in ("cu_seqlens_q", "cu_seqlens_k"))
            out, lse, _ = flash_attn_varlen_func(
                tensor(q), tensor(k), tensor(v), cu_q, cu_k, softmax_scale=HEAD_DIM ** -0.5,
                return_attn_probs=True, **kwargs)
            return out[:, 0, :HEAD_DIM].float().tolist(), lse[0].float().tolist()
        lengths = [self.rng.randint(1, 40) for _ in range(12)]
        self.check_plan(libdcp.plan(lengths, ranks=4, max_tokens_per_rank=16), run, 5e-3)


def te_rope_positions(cu_seqlens_padded, cp_size, cp_rank):
    """The position TransformerEngine's fused THD RoPE gives each local row of cp_rank:
    sequences of cu_seqlens_padded / cp_size local rows, the first half at
    cp_rank * half + i, the second at (2 cp_size - cp_rank - 1) * half + i."""
    positions = []
    for j in range(len(cu_seqlens_padded) - 1):
        rows = (cu_seqlens_padded[j + 1] - cu_seqlens_padded[j]) // cp_size
        half = rows // 2 if cp_size > 1 else rows
        for i in range(rows):
            if cp_size == 1 or i < half:
                positions.append(cp_rank * half + i)
            else:
                positions.append((2 * cp_size - cp_rank - 1) * half + i - half)
    return positions


class TransformerEngineArguments(unittest.TestCase):
    def test_kwargs_are_the_view(self):
        lengths = libdcp.lognormal_lengths(6000, 1.0, 100, 60000, 64)
        plan = libdcp.plan(lengths, ranks=16, max_tokens_per_rank=8192, pad_multiple=8)
        seen_cp = set()
        for k in range(plan.num_microbatches):
            for r in range(plan.ranks):
                view = plan.rank_view(r, k)
                if view.idle:
                    with self.assertRaises(ValueError):
                        view.transformer_engine_kwargs()
                    continue
                seen_cp.add(view.cp)
                te = view.transformer_engine_kwargs()
                self.assertEqual((te["qkv_format"], te["attn_mask_type"]), ("thd", "padding_causal"))
                self.assertEqual(te["cu_seqlens_q"], view.cu_seqlens)
                self.assertEqual(te["cu_seqlens_kv_padded"], view.cu_seqlens_padded)
                self.assertEqual(te["max_seqlen_q"], max(
                    b - a for a, b in zip(view.cu_seqlens_padded, view.cu_seqlens_padded[1:])))
                rope = view.transformer_engine_rope_kwargs()
                positions = te_rope_positions(rope["cu_seqlens"], rope["cp_size"],
                                              rope["cp_rank"])
                self.assertEqual(len(positions), view.local_tokens)
                self.assertEqual([p for p, mine in zip(positions, view.positions) if mine >= 0],
                                 [p for p in view.positions if p >= 0])
        self.assertGreater(len(seen_cp), 2)

    def test_example_prints_the_arguments(self):
        """python/examples/attention_args.py prints a view's arguments (without torch)."""
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [os.path.join(os.path.dirname(EXAMPLE), ".."), os.environ.get("PYTHONPATH", "")]))
        out = subprocess.run([sys.executable, EXAMPLE, "5", "0"], check=True,
                             capture_output=True, text=True, env=env).stdout
        lengths = libdcp.lognormal_lengths(16384, 1.0, 512, 131072, 256)
        view = libdcp.plan(lengths, ranks=64, max_tokens_per_rank=16384).rank_view(5, 0)
        self.assertIn(f"cu_seqlens_q_padded={list(view.cu_seqlens_padded)}", out)
        self.assertIn(f"cp_size={view.cp}, cp_rank={view.rank_in_group}", out)
        self.assertEqual(out.count("flash_attn_varlen_func(step"), view.cp)


if __name__ == "__main__":
    unittest.main()
