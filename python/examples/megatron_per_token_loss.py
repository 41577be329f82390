"""Per-token loss under libdcp's Megatron schedule equals the no-CP loss, gradients included
(CPU, float64, torch only; no GPU, no Megatron).

A tiny causal model (embedding, one attention layer, output head) trains on a batch scheduled by
libdcp.megatron.LibdcpCPScheduler for a pool of D ranks. Each rank runs its sub-samples in its
lists' order, as Megatron's hybrid schedule does; a sub-sample on c ranks is computed whole (what
ring attention gives each rank) and each rank takes the loss of its own zigzag rows only
(libdcp.zigzag_position): Megatron's calculate_per_token_loss path, where every rank sums its
token losses, the gradients are summed over DP x CP and divided by the step's token count. That
count is the scheduler's TokenCounts.global_tokens, and each rank's rows are its rank_tokens.
The result must equal the mean over all tokens of the batch without CP. The example also prints
what Megatron's other normalisation (each forward's mean, divided by the number of forwards)
gives: ranks run different numbers of sub-samples, so it is not the batch's mean.

    python python/examples/megatron_per_token_loss.py [--ranks 8] [--seed 1]
Exit status 0 when loss and every gradient match within TOLERANCE.
"""
import argparse
import random
import sys

import torch

import libdcp
from libdcp import megatron as M

VOCAB, HIDDEN = 61, 32
MAX_TOKENS_PER_RANK = 96
TOLERANCE = 1e-10  # relative, float64 (the sums run in another order)


class Pool:
    def __init__(self, ranks):
        self.ranks = ranks

    def size(self):
        return self.ranks

    def rank(self):
        return 0


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, HIDDEN)
        self.qkv = torch.nn.Linear(HIDDEN, 3 * HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, VOCAB)

    def forward(self, tokens):
        x = self.embed(tokens)
        q, k, v = self.qkv(x).chunk(3, -1)
        scores = (q @ k.T) / HIDDEN ** 0.5
        causal = torch.ones(len(tokens), len(tokens), dtype=torch.bool).tril()
        return self.head(x + torch.softmax(scores.masked_fill(~causal, float("-inf")), -1) @ v)


def token_losses(model, tokens):
    """Per-token cross entropy against the next token (the last one against token 0)."""
    labels = torch.cat([tokens[1:], tokens[:1]])
    return torch.nn.functional.cross_entropy(model(tokens), labels, reduction="none")


def local_rows(length, cp, rank_in_group):
    """Global positions of the valid rows rank_in_group holds (DESIGN.md section 4)."""
    padded = -(-length // (2 * cp)) * 2 * cp
    positions = (libdcp.zigzag_position(padded, cp, rank_in_group, i)
                 for i in range(padded // cp))
    return [p for p in positions if p < length]


def gradients(model):
    return [p.grad.clone() for p in model.parameters()]


def without_cp(model, samples):
    model.zero_grad()
    total = sum(token_losses(model, s).sum() for s in samples.values())
    loss = total / sum(len(s) for s in samples.values())
    loss.backward()
    return loss.item(), gradients(model)


def with_libdcp(model, samples, sample_id_groups, tokens):
    """Every rank's forwards in schedule order; per-token normalisation by the step's count."""
    model.zero_grad()
    loss_sum, per_forward_means, forwards = 0.0, 0.0, 0
    ranks = len(sample_id_groups[0])
    for rank in range(ranks):
        rows_here = 0
        for group in sample_id_groups:
            holders = M._holders(group)
            for s in group[rank]:
                rows = local_rows(len(samples[s]), len(holders[s]), holders[s].index(rank))
                mine = token_losses(model, samples[s])[rows].sum()
                (mine / tokens.global_tokens).backward()  # grads summed over ranks: all-reduce
                loss_sum += mine.item()
                per_forward_means += mine.item() / len(rows)
                forwards += 1
                rows_here += len(rows)
        assert rows_here == tokens.rank_tokens(rank), (rank, rows_here, tokens.rank_tokens(rank))
    return loss_sum / tokens.global_tokens, gradients(model), per_forward_means / forwards


def relative(a, b):
    return float((a - b).norm() / max(b.norm(), 1e-300))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    print(f"seed {args.seed}")
    torch.set_default_dtype(torch.float64)
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    longest = MAX_TOKENS_PER_RANK * args.ranks  # the whole pool is one of Megatron's CP groups
    lengths = [min(longest, int(rng.lognormvariate(4.0, 0.9)) + 2) for _ in range(args.samples)]
    ids = rng.sample(range(10 * args.samples), args.samples)
    samples = {s: torch.randint(0, VOCAB, (n,)) for s, n in zip(ids, lengths)}
    scheduler = M.LibdcpCPScheduler(MAX_TOKENS_PER_RANK, Pool(args.ranks), check_agreement=False)
    _, sample_id_groups = scheduler.get_groups_and_subsamples(list(zip(ids, lengths)))
    widths = sorted({len(h) for g in sample_id_groups for h in M._holders(g).values()})
    counts = [sum(len(g[r]) for g in sample_id_groups) for r in range(args.ranks)]
    print(f"{args.samples} samples on {args.ranks} ranks: CP sizes {widths}, sub-samples per "
          f"rank {min(counts)}..{max(counts)}, {scheduler.last_tokens.global_tokens} tokens")
    model = Tiny()
    loss, grads = without_cp(model, samples)
    ours, our_grads, per_forward = with_libdcp(model, samples, sample_id_groups,
                                               scheduler.last_tokens)
    loss_error = abs(ours - loss) / abs(loss)
    grad_error = max(relative(a, b) for a, b in zip(our_grads, grads))
    print(f"loss without CP {loss:.12f}, per-token under libdcp {ours:.12f} "
          f"(relative {loss_error:.1e}); worst gradient relative error {grad_error:.1e}")
    print(f"mean of per-forward means (not per-token): {per_forward:.12f} "
          f"(relative {abs(per_forward - loss) / abs(loss):.1e})")
    ok = loss_error <= TOLERANCE and grad_error <= TOLERANCE
    print("ok" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
