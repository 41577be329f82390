"""Trains a tiny transformer for a few steps on one GPU through libdcp's virtual ring at
c = 1, 2, 4 and checks each step's loss against the same model trained without CP (whole
documents, PyTorch SDPA and a rotate-half RoPE).

For each global batch the planner (min_cp = max_cp = c on a pool of c ranks, so every group is
the whole ring) picks the microbatches; libdcp.loader.DynamicCPLoader gives every rank of the ring
its packed tokens, labels, position ids and loss mask; the c ranks' buffers are stacked and run
through libdcp.ops.rope (CP positions) and libdcp.ops.ring_attention (the ring simulated on the
device), everything else row-wise. The loss is the mean cross entropy over valid label tokens,
which must not depend on c.

    python python/examples/train_tiny.py                 # needs a GPU and build/libdcp_cuda.so
    python python/examples/train_tiny.py --reference-ops  # CPU: dense torch attention on the
                                                           # CP rows instead of the kernels (checks
                                                           # the packing and routing, not kernels)
    DCP_CUDA_LIBRARY=build/libdcp_cuda-cpu.so python python/examples/train_tiny.py
                                  # the kernels on the CPU execution model (make test-torch-cpu)
Exit status 0 when every loss matches within the tolerance.
"""
import argparse
import math
import random
import sys

import torch
import torch.nn.functional as F

import libdcp
from libdcp.loader import DynamicCPLoader

VOCAB, HIDDEN, HEADS, HEAD_DIM, LAYERS = 97, 128, 2, 64, 2
THETA = 10000.0
LOSS_TOLERANCE = 2e-2   # relative; bf16 attention against bf16 SDPA
IGNORE = -100


def make_batches(rng, steps, documents, max_length):
    batches = []
    for _ in range(steps):
        batch = []
        for _ in range(documents):
            n = rng.randint(2, max_length)
            tokens = torch.tensor([rng.randrange(1, VOCAB) for _ in range(n)])
            labels = torch.cat([tokens[1:], torch.tensor([0])])
            mask = torch.ones(n, dtype=torch.int64)
            mask[-1] = 0  # the last token has no next token
            batch.append({"tokens": tokens, "labels": labels, "loss_mask": mask})
        batches.append(batch)
    return batches


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, HIDDEN)
        self.layers = torch.nn.ModuleList()
        for _ in range(LAYERS):
            self.layers.append(torch.nn.ModuleDict({
                "norm1": torch.nn.LayerNorm(HIDDEN), "qkv": torch.nn.Linear(HIDDEN, 3 * HIDDEN),
                "proj": torch.nn.Linear(HIDDEN, HIDDEN), "norm2": torch.nn.LayerNorm(HIDDEN),
                "up": torch.nn.Linear(HIDDEN, 4 * HIDDEN), "down": torch.nn.Linear(4 * HIDDEN,
                                                                                   HIDDEN)}))
        self.head = torch.nn.Linear(HIDDEN, VOCAB)

    def forward(self, tokens, attend):
        """tokens [..., rows]; attend(q, k, v) -> out over the same leading shape."""
        x = self.embed(tokens)
        for layer in self.layers:
            q, k, v = layer["qkv"](layer["norm1"](x)).unflatten(-1, (3, HEADS, HEAD_DIM)).unbind(-3)
            x = x + layer["proj"](attend(q, k, v).flatten(-2).float())
            x = x + layer["down"](F.gelu(layer["up"](layer["norm2"](x))))
        return self.head(x)


def rotate_half(x, positions):
    inv = THETA ** (-torch.arange(0, HEAD_DIM, 2, dtype=torch.float64, device=x.device) / HEAD_DIM)
    angle = positions.double()[:, None] * inv[None]
    cos = torch.cat([angle.cos()] * 2, -1)[:, None].float()
    sin = torch.cat([angle.sin()] * 2, -1)[:, None].float()
    half = HEAD_DIM // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


def loss_without_cp(model, batch, device):
    """Whole documents, one at a time: SDPA (bf16, causal) and the rotate-half reference."""
    total, count = 0.0, 0
    for doc in batch:
        tokens = doc["tokens"].to(device)
        positions = torch.arange(len(tokens), device=device)

        def attend(q, k, v):
            q, k = rotate_half(q, positions), rotate_half(k, positions)
            q, k, v = (t.to(torch.bfloat16).transpose(0, 1)[None] for t in (q, k, v))
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)[0].transpose(0, 1)
        logits = model(tokens, attend)
        mask = doc["loss_mask"].to(device).bool()
        total = total + F.cross_entropy(logits[mask], doc["labels"].to(device)[mask],
                                        reduction="sum")
        count += int(mask.sum())
    return total / count


def dense_ring_reference(q, k, v, views):
    """The CP result without the kernels: every rank's rows against every rank's keys of the
    same sample at earlier or equal global positions (positions from the library's views)."""
    cp, rows = q.shape[:2]
    sample = torch.tensor([[v.samples[s] if p >= 0 else -1 for s, p in
                            zip(v.row_samples, v.positions)] for v in views]).flatten()
    position = torch.tensor([list(v.positions) for v in views]).flatten()
    visible = ((sample[:, None] == sample[None]) & (sample[:, None] >= 0)
               & (position[None] <= position[:, None])).to(q.device)
    qf, kf, vf = (t.reshape(cp * rows, HEADS, HEAD_DIM).float().transpose(0, 1) for t in (q, k, v))
    scores = (qf @ kf.transpose(1, 2)) / math.sqrt(HEAD_DIM)
    scores = scores.masked_fill(~visible, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, -1))
    return (weights @ vf).transpose(0, 1).reshape(cp, rows, HEADS, HEAD_DIM)


def loss_with_cp(model, batch, cp, device, reference_ops, max_tokens_per_rank):
    """The ring of cp ranks on one device: the loader per rank, buffers stacked."""
    loaders = [iter(DynamicCPLoader([batch], rank=r, ranks=cp, min_cp=cp, max_cp=cp,
                                    max_tokens_per_rank=max_tokens_per_rank, device=device,
                                    fields=("tokens", "labels", "loss_mask")))
               for r in range(cp)]
    total, count = 0.0, 0
    for microbatches in zip(*loaders):
        views = [mb.view for mb in microbatches]
        assert all(v.cp == cp and v.first_rank == 0 for v in views), "one ring per microbatch"
        tokens = torch.stack([mb.tokens for mb in microbatches]).to(device)
        if reference_ops:
            positions = torch.stack([mb.position_ids for mb in microbatches]).to(device)

            def attend(q, k, v):
                q = torch.stack([rotate_half(q[r], positions[r]) for r in range(cp)])
                k = torch.stack([rotate_half(k[r], positions[r]) for r in range(cp)])
                q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
                return dense_ring_reference(q, k, v, views)
        else:
            from libdcp import ops
            layout = ops.Layout.from_view(views[0], device)

            def attend(q, k, v):
                rotated = [ops.rope(q[r].contiguous(), k[r].contiguous(), layout, r)
                           for r in range(cp)]
                q = torch.stack([a for a, _ in rotated]).to(torch.bfloat16)
                k = torch.stack([b for _, b in rotated]).to(torch.bfloat16)
                return ops.ring_attention(q, k, v.to(torch.bfloat16).contiguous(), layout)[0]
        logits = model(tokens, attend)
        labels = torch.stack([mb.fields["labels"] for mb in microbatches]).to(device)
        mask = torch.stack([mb.loss_mask for mb in microbatches]).to(device).bool()
        total = total + F.cross_entropy(logits[mask], labels[mask], reduction="sum")
        count += int(mask.sum())
    return total / count


def train(loss_fn, batches, seed, lr=1e-3):
    torch.manual_seed(seed)
    model = Tiny().to(DEVICE)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for batch in batches:
        optimizer.zero_grad()
        loss = loss_fn(model, batch)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _kernels_on_the_model():
    """libdcp_cuda.so is the CPU execution model's build (libdcp.ops.emulated)."""
    from libdcp import ops
    return libdcp.library_path("cuda") is not None and ops.emulated()


def main(argv):
    global DEVICE
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--documents", type=int, default=6)
    parser.add_argument("--max-length", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--reference-ops", action="store_true")
    args = parser.parse_args(argv)
    # the kernels on CPU tensors where libdcp_cuda.so is the CPU execution model's build
    on_model = not args.reference_ops and _kernels_on_the_model()
    DEVICE = "cpu" if args.reference_ops or on_model else "cuda"
    if not args.reference_ops and not on_model and not torch.cuda.is_available():
        print("no CUDA device: skipped (run with --reference-ops for the CPU check)")
        return 0
    print(f"seed {args.seed}")
    batches = make_batches(random.Random(args.seed), args.steps, args.documents, args.max_length)
    baseline = train(lambda m, b: loss_without_cp(m, b, DEVICE), batches, args.seed)
    print("no CP  " + " ".join(f"{x:.5f}" for x in baseline))
    ok = True
    for cp in (1, 2, 4):
        losses = train(lambda m, b: loss_with_cp(m, b, cp, DEVICE, args.reference_ops,
                                                 max_tokens_per_rank=args.max_length),
                       batches, args.seed)
        worst = max(abs(a - b) / abs(b) for a, b in zip(losses, baseline))
        ok &= worst <= LOSS_TOLERANCE
        print(f"cp {cp}   " + " ".join(f"{x:.5f}" for x in losses) +
              f"   worst relative difference {worst:.2e} {'ok' if worst <= LOSS_TOLERANCE else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
