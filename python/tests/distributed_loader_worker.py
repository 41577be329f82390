"""One rank of the torch.distributed loader test (test_loader.TorchDistributed): gloo on the
CPU, lengths all-gathered, tokens moved with torch_p2p_transport, CP groups from
make_torch_cp_groups. Writes its microbatches' tokens, cu_seqlens_padded and group ranks as
JSON to the path given."""
import json
import os
import sys

import torch
import torch.distributed as dist

from libdcp import loader


def main(rank, ranks, port, out_path):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    shares = json.loads(os.environ["DCP_TEST_SHARES"])  # lengths per rank
    first = sum(len(share) for share in shares[:rank])
    # test_loader.make_samples' tokens: sample s, position p holds s * 100000 + p + 1
    samples = [torch.arange(n, dtype=torch.int64) + (first + i) * 100000 + 1
               for i, n in enumerate(shares[rank])]
    wrapped = loader.DynamicCPLoader(
        [samples], rank=rank, ranks=ranks, max_tokens_per_rank=int(os.environ["DCP_TEST_M"]),
        gather=loader.torch_all_gather_lengths(), transport=loader.torch_p2p_transport(),
        cp_groups=loader.make_torch_cp_groups(ranks, ranks),
        empty={"tokens": torch.empty(0, dtype=torch.int64)})
    result = [{"microbatch": mb.microbatch, "tokens": mb.tokens.tolist(),
               "cu_seqlens_padded": mb.cu_seqlens_padded.tolist(),
               "group_size": dist.get_world_size(mb.group) if mb.group is not None else 1}
              for mb in wrapped]
    with open(out_path, "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
