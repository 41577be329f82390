"""The ranks of tests/megatron_core_test.py: runs megatron-core's own HybridCPDataLoaderWrapper
and hybrid_context_parallel_forward_backward on CPU with gloo, with Megatron's scheduler and
with libdcp's, and writes what each rank saw as JSON for the parent to check.

    python megatron_worker.py WORLD PORT OUT_DIR CASE SEED

imports torch and megatron-core once (8 CPU seconds) and forks WORLD ranks that inherit them.

What is patched, all because there is no GPU (nothing of the scheduling or routing):
  torch.Tensor.cuda -> the tensor itself; torch.cuda.current_device -> the CPU device (the
  wrapper moves tensors with .cuda() / .to(current_device())); in hybrid_cp_schedule, `torch`
  is a view whose torch.tensor drops device='cuda' (one literal in the schedule); in "route",
  schedules.forward_step / backward_step (imported by the schedule at call time) are
  recorders: the model is not what is tested there.
Cases: "route" (three global batches, both schedulers, routing and the schedule's run);
"bad" (too-long, zero, disagree: every rank must raise the same clear error, none hang);
"collectives" (COLLECTIVE_BATCHES batches scheduled by libdcp, run by Megatron's schedule with
its own forward_step and backward_step around a stub model whose forward all-gathers the
sub-sample's id over the holders' communicator, as TransformerEngine's ring exchanges over it).
"""
import contextlib
import datetime
import json
import os
import random
import sys
import traceback

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

MAX_SEQLEN_PER_RANK = 512
BATCHES = 3
PACKED_PER_RANK = 3         # packed samples a DP rank loads per global batch
SUBSAMPLES_PER_PACKED = 3   # at most
TAG_STRIDE = 1000           # origin tag = loading rank x TAG_STRIDE + index there


def patch_for_cpu():
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    torch.cuda.current_device = lambda: torch.device("cpu")
    from megatron.core.pipeline_parallel import hybrid_cp_schedule

    class TorchOnCpu:
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def tensor(*args, device=None, **kwargs):
            return torch.tensor(*args, **kwargs)
    hybrid_cp_schedule.torch = TorchOnCpu()


class Config:
    """The fields of Megatron's config the wrapper and the mapping read."""
    max_seqlen_per_dp_cp_rank = MAX_SEQLEN_PER_RANK
    hybrid_context_parallel = True
    calculate_per_token_loss = True
    pipeline_model_parallel_size = 1
    sequence_parallel = False


def make_batch(rng, rank, world, batch_index):
    """This rank's packed samples: per token `origin` (the sub-sample's tag) and `position`,
    cu_seqlens as Megatron's packed SFT samples carry them. Lengths are multiples of 2 D
    (Megatron's SFT padding), some sub-samples of length 0 (the wrapper drops them)."""
    longest = MAX_SEQLEN_PER_RANK * world
    packed, index = [], 0
    for _ in range(PACKED_PER_RANK):
        lengths = []
        for _ in range(rng.randint(1, SUBSAMPLES_PER_PACKED)):
            n = min(int(rng.lognormvariate(6.0, 1.0)), longest)
            lengths.append(0 if rng.random() < 0.05 else max(2 * world, n - n % (2 * world)))
        origin, position = [], []
        for n in lengths:
            tag = (batch_index * world + rank) * TAG_STRIDE + index
            origin += [tag] * n
            position += list(range(n))
            index += 1
        cu = [0]
        for n in lengths:
            cu.append(cu[-1] + n)
        packed.append({"origin": torch.tensor(origin, dtype=torch.int64),
                       "position": torch.tensor(position, dtype=torch.int64),
                       "cu_seqlens": torch.tensor(cu, dtype=torch.int32)})
    return packed


def run_schedule(samples, sample_id_groups):
    """hybrid_context_parallel_forward_backward with recording forward/backward steps:
    returns this rank's (origin tag, local_cp_size, CP group ranks) per forward, in order."""
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import hybrid_cp_schedule, schedules
    seen = []

    def forward_step(forward_step_func, data_iterator, *args, **kwargs):
        sample = next(data_iterator)
        cp = int(sample["local_cp_size"])
        group = (list(range(dist.get_world_size())) if cp == dist.get_world_size() else
                 dist.get_process_group_ranks(
                     parallel_state.get_hybrid_data_context_parallel_groups(group_size=cp))
                 if cp > 1 else [dist.get_rank()])
        seen.append((int(sample["origin"][0]), cp, group))
        return torch.zeros(()), torch.tensor(int(sample["origin"].numel()))

    saved = schedules.forward_step, schedules.backward_step
    schedules.forward_step, schedules.backward_step = forward_step, lambda *a, **k: None
    try:
        hybrid_cp_schedule.hybrid_context_parallel_forward_backward(
            None, iter([(samples, sample_id_groups)]), None, 1, None, None, [], None, False,
            None, False, contextlib.nullcontext, 0, lambda *a: False, None)
    finally:
        schedules.forward_step, schedules.backward_step = saved
    return seen


def routed(samples):
    """gid -> (origin tag, length, positions in order?, one origin?)."""
    out = {}
    for gid, sample in samples.items():
        origin, position = sample["origin"], sample["position"]
        out[int(gid)] = [int(origin[0]), int(origin.numel()),
                         bool(torch.equal(position, torch.arange(origin.numel()))),
                         bool((origin == origin[0]).all())]
    return out


def route_case(rank, world, seed):
    from megatron.core.datasets.data_schedule import HybridCPDataLoaderWrapper

    import libdcp.megatron as libdcp_megatron
    records = []
    for batch_index in range(BATCHES):
        rng = random.Random(seed * 7919 + batch_index * 104729 + rank)
        batch = make_batch(rng, rank, world, batch_index)
        loaded = {}
        for packed in batch:
            cu = packed["cu_seqlens"].tolist()
            for a, b in zip(cu, cu[1:]):
                if b > a:
                    loaded[int(packed["origin"][a])] = b - a
        record = {"loaded": loaded}
        for name in ("megatron", "libdcp"):
            install = (libdcp_megatron.use_libdcp() if name == "libdcp"
                       else contextlib.nullcontext())
            with install:
                wrapper = HybridCPDataLoaderWrapper(iter([batch]), Config())
            samples, sample_id_groups = next(wrapper)
            entry = {"groups": sample_id_groups, "routed": routed(samples),
                     "scheduler": type(wrapper.cp_balancing_scheduler).__name__,
                     "run": run_schedule(samples, sample_id_groups)}
            if name == "libdcp":
                scheduler = wrapper.cp_balancing_scheduler
                plan = scheduler.last_plan
                entry["plan"] = [[[g.first_rank, g.cp, [scheduler.last_sample_ids[s]
                                                        for s in g.samples]]
                                  for g in groups] for groups in plan.microbatches]
                entry["tokens"] = [scheduler.last_tokens.global_tokens,
                                   [list(t) for t in scheduler.last_tokens.group_rank_tokens]]
            record[name] = entry
        records.append(record)
    return records


BAD_INPUTS = ("too-long", "zero", "disagree", "too-long-loaded")
LOADS_TOO_LONG = 1  # the rank whose batch holds the too-long sample in "too-long-loaded"


def bad_input_case(case, rank, world):
    """Every rank calls the scheduler on the same bad input (or, for 'disagree', rank
    world - 1 sees one length changed); returns the error this rank raised."""
    from megatron.core import parallel_state

    import libdcp.megatron as libdcp_megatron
    if case == "too-long-loaded":
        return too_long_through_wrapper(rank, world)
    group = parallel_state.get_data_parallel_group(with_context_parallel=True)
    scheduler = libdcp_megatron.LibdcpCPScheduler(MAX_SEQLEN_PER_RANK, group, config=Config())
    lengths = [64 * (i % 5 + 1) for i in range(4 * world)]
    if case == "too-long":
        lengths[5] = MAX_SEQLEN_PER_RANK * world + 2 * world
    elif case == "zero":
        lengths[3] = 0
    elif case == "disagree" and rank == world - 1:
        lengths[7] += 2 * world
    try:
        scheduler.get_groups_and_subsamples(list(enumerate(lengths)), Config())
    except Exception as failure:  # the parent checks the type and the message
        return {"type": type(failure).__name__, "message": str(failure),
                "sample": getattr(failure, "sample", None)}
    return {"type": None}


def too_long_through_wrapper(rank, world):
    """Rank LOADS_TOO_LONG loads a sample longer than max CP x max tokens: the wrapper (with
    libdcp installed) must raise on every rank, naming the sample and the rank that loaded it."""
    from megatron.core.datasets.data_schedule import HybridCPDataLoaderWrapper

    import libdcp.megatron as libdcp_megatron
    batch = make_batch(random.Random(rank), rank, world, 0)
    if rank == LOADS_TOO_LONG:
        n = MAX_SEQLEN_PER_RANK * world + 2 * world
        batch.append({"origin": torch.zeros(n, dtype=torch.int64),
                      "position": torch.arange(n), "cu_seqlens": torch.tensor([0, n],
                                                                            dtype=torch.int32)})
    with libdcp_megatron.use_libdcp():
        wrapper = HybridCPDataLoaderWrapper(iter([batch]), Config())
    try:
        next(wrapper)
    except Exception as failure:
        return {"type": type(failure).__name__, "message": str(failure),
                "sample": getattr(failure, "sample", None), "rank": getattr(failure, "rank", None)}
    return {"type": None}


COLLECTIVE_BATCHES = 100
COLLECTIVE_TOKENS = (256, 512, 1000)   # max_seq_len_per_rank choices
COLLECTIVE_TIMEOUT_MINUTES = 1         # a collective no partner joins fails instead of hanging
COLLECTIVE_WAIT_SECONDS = 30           # the stub forward's all-gather (Megatron's hybrid
                                       # groups are built with the default 30-minute timeout)
COLLECTIVE_SAMPLES_PER_RANK = 3        # at most


def collective_batch(rng, world):
    """One batch, the same on every rank: lognormal or Pareto lengths, sometimes fewer samples
    than ranks; ids shuffled (not positions)."""
    tokens = rng.choice(COLLECTIVE_TOKENS)
    count = rng.randint(1, COLLECTIVE_SAMPLES_PER_RANK * world)
    if rng.random() < 0.5:
        lengths = [int(rng.lognormvariate(6.0, 1.2)) for _ in range(count)]
    else:
        lengths = [int(tokens / 4 * (1.0 - rng.random()) ** (-1 / 1.2)) for _ in range(count)]
    lengths = [min(world * tokens, max(1, n)) for n in lengths]
    ids = rng.sample(range(10 ** 6), count)
    return tokens, list(zip(ids, lengths))


class StubModel(torch.nn.Module):
    """What Megatron's forward_step and backward_step need of a model: parameters and
    set_input_tensor."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(()))

    def set_input_tensor(self, tensor):
        self.input_tensor = tensor


class ForwardConfig:
    """The fields of Megatron's config that forward_step / backward_step read."""
    timers = None
    enable_autocast = False
    calculate_per_token_loss = True
    grad_scale_func = None
    deallocate_pipeline_outputs = False
    num_moe_experts = None
    mtp_num_layers = None


def collectives_case(rank, world, seed):
    """COLLECTIVE_BATCHES batches: libdcp's schedule (agreement check included) run by Megatron's
    hybrid_context_parallel_forward_backward with its real forward_step / backward_step; the
    stub forward all-gathers the sub-sample id over the communicator Megatron picks for its
    local_cp_size (parallel_state.get_hybrid_data_context_parallel_groups, as
    get_batch_on_this_hybrid_cp_rank does). Returns, per batch, this rank's forwards as
    [id, local_cp_size, cp_group_size (0.19) or None, ranks of the communicator, ids gathered]."""
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import hybrid_cp_schedule

    import libdcp.megatron as libdcp_megatron
    group = parallel_state.get_data_parallel_group(with_context_parallel=True)
    rng = random.Random(seed * 7919 + world)  # the same on every rank
    model, config, records = StubModel(), ForwardConfig(), []
    for _ in range(COLLECTIVE_BATCHES):
        tokens, pairs = collective_batch(rng, world)
        scheduler = libdcp_megatron.LibdcpCPScheduler(tokens, group)
        sample_id_groups = scheduler.get_groups_and_subsamples(pairs, None)[1]
        mine = {s for g in sample_id_groups for s in g[rank]}
        batch = {s: {"id": torch.tensor(s)} for s in mine}
        forwards = []

        def forward_step_func(data_iterator, model):
            sample = next(data_iterator)
            cp, sample_id = int(sample["local_cp_size"]), int(sample["id"])
            ids = [sample_id]
            ranks = [dist.get_rank()]
            if cp > 1:
                holders = parallel_state.get_hybrid_data_context_parallel_groups(group_size=cp)
                gathered = [torch.zeros((), dtype=torch.int64) for _ in range(cp)]
                # blocks until every holder joins; a holder that never does (a wrong order on
                # overlapping communicators) is a timeout here, not a hang
                dist.all_gather(gathered, sample["id"], group=holders, async_op=True).wait(
                    timeout=datetime.timedelta(seconds=COLLECTIVE_WAIT_SECONDS))
                ids = [int(x) for x in gathered]
                ranks = dist.get_process_group_ranks(holders)
            forwards.append([sample_id, cp, None, ranks, ids])
            output = model.weight * 1.0

            def loss_func(output_tensor):
                return output_tensor, torch.tensor(1), {"id": sample_id}
            return output, loss_func
        forward_step = schedules_forward_step_recording_cp_group_size(forwards)
        with forward_step:
            hybrid_cp_schedule.hybrid_context_parallel_forward_backward(
                forward_step_func, iter([(batch, sample_id_groups)]), model, 1, None, None, [],
                config, False, None, False, contextlib.nullcontext, 0, lambda *a: False, None)
        records.append({"groups": sample_id_groups, "forwards": forwards, "tokens": tokens,
                        "pairs": pairs})
    return records


@contextlib.contextmanager
def schedules_forward_step_recording_cp_group_size(forwards):
    """Megatron's own schedules.forward_step, wrapped to note the cp_group_size the schedule
    passes (0.19 broadcasts the partner CP size and passes it; 0.16 passes none by name)."""
    from megatron.core.pipeline_parallel import schedules
    real = schedules.forward_step

    def forward_step(*args, **kwargs):
        result = real(*args, **kwargs)
        forwards[-1][2] = kwargs.get("cp_group_size")
        return result
    schedules.forward_step = forward_step
    try:
        yield
    finally:
        schedules.forward_step = real


def run_rank(rank, world, port, out_dir, case, seed):
    torch.set_num_threads(1)  # WORLD processes share the machine's cores
    timeout = datetime.timedelta(minutes=COLLECTIVE_TIMEOUT_MINUTES)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timeout,
                            init_method=f"tcp://127.0.0.1:{port}")
    patch_for_cpu()
    from megatron.core import parallel_state
    parallel_state.initialize_model_parallel(hybrid_context_parallel=True,
                                             distributed_timeout_minutes=COLLECTIVE_TIMEOUT_MINUTES)
    try:
        if case == "route":
            result = route_case(rank, world, seed)
        elif case == "collectives":
            result = collectives_case(rank, world, seed)
        else:
            result = {bad: bad_input_case(bad, rank, world) for bad in BAD_INPUTS}
    except Exception:
        result = {"crash": traceback.format_exc()}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    if "crash" not in result:  # a crashed rank leaves at once: its partners may never join
        dist.destroy_process_group()


def main(argv):
    """Imports Megatron once, forks the ranks; exits non-zero when a rank did."""
    world, port, out_dir, case, seed = (int(argv[0]), int(argv[1]), argv[2], argv[3],
                                        int(argv[4]))
    import megatron.core.datasets.data_schedule  # noqa: F401  (the ranks inherit it)
    import megatron.core.pipeline_parallel.hybrid_cp_schedule  # noqa: F401
    import libdcp.megatron  # noqa: F401
    children = []
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                run_rank(rank, world, port, out_dir, case, seed)
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children.append(pid)
    failed = 0
    for pid in children:
        failed |= os.waitpid(pid, 0)[1] != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
