"""``dcp-plan --json`` from Python: Plan.to_json, Plan.from_json and RankView.to_json.

The text is the CLI's (examples/dcp_plan.c, docs/cli-json.md, docs/dcp-plan.schema.json) key
for key and number for number: the same printf formats (%.9g for times, %.6f for ratios,
%.17g for the cost coefficients, which round-trips a double), the same key order, one line.
So a plan made here and the same plan made by the CLI print the same line but for
``plan_seconds``, the planner's wall time. The numbers come from the library (the plan, its
simulation and schedule, dcp_padded_length, the static and greedy baselines planned for the
same input and config, as the CLI plans them): nothing is recomputed here.

Reading: a plan's JSON holds its config, sample lengths and groups; from_json builds a dcp_plan
from them in ctypes memory and lets the library check and copy it (dcp_plan_serialize
validates every invariant, dcp_plan_deserialize makes a library-owned plan), so a hand-edited
file cannot produce a plan the library would not. The other keys are derived and recomputed.
"""
import ctypes
import json
from typing import TYPE_CHECKING, Any, List, Mapping, Tuple, Union

from . import _structs as S
from ._library import cpu

if TYPE_CHECKING:
    from .planner import Plan, RankView

# printf formats of examples/dcp_plan.c's JSON: times, ratios, cost coefficients, plan time
SECONDS, RATIO, COEFFICIENT, PLAN_TIME = "%.9g", "%.6f", "%.17g", "%.6g"
# keys a plan's JSON must have for from_json; the rest are derived from them
PLAN_INPUT_KEYS = ("config", "sample_lengths", "microbatches")
GROUP_KEYS = ("first_rank", "cp", "samples")


def _value(value: Any) -> str:
    """A config value as dcp_plan.c prints it: enums by name, integers in decimal, the cost
    coefficients with %.17g."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return COEFFICIENT % value
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{json.dumps(k)}:{_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no JSON form for a config value of type {type(value).__name__}")


def _ints(values: Any) -> str:
    return "[" + ",".join(str(int(v)) for v in values) + "]"


def _single_cp(samples_per_cp: Mapping[int, int]) -> int:
    """The one CP size of a static plan (dcp_plan.c's plan_single_cp: the largest used)."""
    return max(samples_per_cp, default=1)


def plan_json(plan: "Plan") -> str:
    """The line `dcp-plan --json` prints for this plan, without its newline."""
    from . import __version__
    from .planner import _config_dict
    stats, schedule = plan.stats, plan.schedule()
    static, greedy = (plan._replanned(strategy).stats for strategy in ("static", "greedy"))
    config = _config_dict(plan._c.config)
    groups = plan.groups
    offsets = [0]
    for microbatch in plan.microbatches:
        offsets.append(offsets[-1] + len(microbatch))
    microbatches = []
    for k in range(plan.num_microbatches):
        items = []
        for g in range(offsets[k], offsets[k + 1]):
            group, (start, end) = groups[g], schedule[g]
            items.append(f'{{"first_rank":{group.first_rank},"cp":{group.cp},'
                         f'"samples":{_ints(group.samples)},'
                         f'"start_seconds":{SECONDS % start},"end_seconds":{SECONDS % end}}}')
        microbatches.append("[" + ",".join(items) + "]")
    histogram = ",".join(f'"{cp}":{count}' for cp, count in sorted(stats.samples_per_cp.items()))
    parts = [
        f'"version":{json.dumps(__version__)}',
        f'"config":{_value(config)}',
        f'"samples":{plan.num_samples}',
        f'"sample_lengths":{_ints(plan.sample_lengths)}',
        f'"padded_lengths":{_ints(plan.padded_lengths)}',
        f'"microbatches":[{",".join(microbatches)}]',
        f'"valid_tokens":{stats.valid_tokens}',
        f'"padded_tokens":{stats.padded_tokens}',
        f'"num_microbatches":{stats.num_microbatches}',
        f'"num_groups":{stats.num_groups}',
        f'"idle_rank_microbatches":{stats.idle_rank_microbatches}',
        f'"cp_histogram":{{{histogram}}}',
        f'"sync_ranks":{stats.sync_ranks}',
        f'"step_seconds":{SECONDS % stats.step_seconds}',
        f'"lower_bound_seconds":{SECONDS % stats.lower_bound_seconds}',
        f'"efficiency":{RATIO % stats.efficiency}',
        f'"dag_seconds":{SECONDS % stats.dag_seconds}',
        f'"dag_lower_bound_seconds":{SECONDS % stats.dag_lower_bound_seconds}',
        f'"dag_efficiency":{RATIO % stats.dag_efficiency}',
        f'"barrier_seconds":{SECONDS % stats.barrier_seconds}',
        f'"barrier_lower_bound_seconds":{SECONDS % stats.barrier_lower_bound_seconds}',
        f'"barrier_efficiency":{RATIO % stats.barrier_efficiency}',
        f'"baselines":{{"static":{{"cp":{_single_cp(static.samples_per_cp)},'
        f'"step_seconds":{SECONDS % static.step_seconds},'
        f'"speedup":{RATIO % (static.step_seconds / stats.step_seconds)}}},'
        f'"greedy":{{"step_seconds":{SECONDS % greedy.step_seconds},'
        f'"speedup":{RATIO % (greedy.step_seconds / stats.step_seconds)}}}}}',
        f'"plan_seconds":{PLAN_TIME % plan.plan_seconds}',
    ]
    return "{" + ",".join(parts) + "}"


def view_json(view: "RankView") -> str:
    """The line `dcp-plan --rank R --microbatch K --json` prints, without its newline."""
    runs = ",".join(f'{{"first_row":{r.first_row},"rows":{r.rows},"sample":{r.sample},'
                    f'"position":{r.position}}}' for r in view.runs)
    return (f'{{"rank":{view.rank},"microbatch":{view.microbatch},'
            f'"first_rank":{view.first_rank},"cp":{view.cp},'
            f'"rank_in_group":{view.rank_in_group},"idle":{"true" if view.idle else "false"},'
            f'"samples":{_ints(view.samples)},"sample_lengths":{_ints(view.sample_lengths)},'
            f'"cu_seqlens":{_ints(view.cu_seqlens)},'
            f'"cu_seqlens_padded":{_ints(view.cu_seqlens_padded)},'
            f'"local_offsets":{_ints(view.local_offsets)},"max_seqlen":{view.max_seqlen},'
            f'"local_tokens":{view.local_tokens},"pad_multiple":{view.pad_multiple},'
            f'"runs":[{runs}]}}')


def _document(data: Any) -> Mapping[str, Any]:
    """The plan object of ``data`` (JSON text or an already parsed mapping)."""
    if isinstance(data, (str, bytes, bytearray)):
        document = json.loads(data)  # json.JSONDecodeError is a ValueError
    elif isinstance(data, Mapping):
        document = data
    else:
        raise TypeError(f"data must be JSON text (str or bytes) or a mapping, got "
                        f"{type(data).__name__}")
    if not isinstance(document, Mapping):
        raise ValueError(f"plan JSON must be an object, got {type(document).__name__}")
    if "microbatches" not in document and "runs" in document:
        raise ValueError("this is a rank view's JSON (dcp-plan --rank R --microbatch K --json),"
                         " not a plan's")
    missing = [key for key in PLAN_INPUT_KEYS if key not in document]
    if missing:
        raise ValueError(f"plan JSON lacks {', '.join(missing)} (docs/cli-json.md)")
    return document


def _config(value: Any) -> S.Config:
    from .planner import _resolved
    if not isinstance(value, Mapping):
        raise ValueError(f"plan JSON: config must be an object, got {type(value).__name__}")
    fields = dict(value)
    try:
        return _resolved(fields.pop("ranks", None), fields.pop("max_tokens_per_rank", None),
                         **fields)
    except TypeError as wrong:  # a key or value of the document, not a Python argument
        raise ValueError(f"plan JSON: config: {wrong}") from None


def _groups(microbatches: Any) -> Tuple[List[int], List[Tuple[int, int, int, int]], List[int]]:
    """microbatch_offsets, (first_rank, cp, sample_offset, sample_count) per group, and the
    groups' samples laid end to end, from the JSON's microbatches."""
    from .planner import check_int
    if not isinstance(microbatches, list):
        raise ValueError("plan JSON: microbatches must be a list of lists of groups")
    offsets: List[int] = [0]
    groups: List[Tuple[int, int, int, int]] = []
    members: List[int] = []
    try:
        for k, microbatch in enumerate(microbatches):
            if not isinstance(microbatch, list):
                raise ValueError(f"plan JSON: microbatches[{k}] must be a list of groups")
            for g, group in enumerate(microbatch):
                where = f"microbatches[{k}][{g}]"
                if not isinstance(group, Mapping) or any(key not in group for key in GROUP_KEYS):
                    raise ValueError(f"plan JSON: {where} must be an object with "
                                     f"{', '.join(GROUP_KEYS)}")
                samples = group["samples"]
                if not isinstance(samples, list):
                    raise ValueError(f"plan JSON: {where}.samples must be a list of ids")
                groups.append((check_int(f"{where}.first_rank", group["first_rank"],
                                         ctypes.c_int32),
                               check_int(f"{where}.cp", group["cp"], ctypes.c_int32),
                               len(members), len(samples)))
                members.extend(check_int(f"{where}.samples[{i}]", s, ctypes.c_int32)
                               for i, s in enumerate(samples))
            offsets.append(len(groups))
    except TypeError as wrong:
        raise ValueError(f"plan JSON: {wrong}") from None
    return offsets, groups, members


def plan_from_json(data: Union[str, bytes, Mapping[str, Any]]) -> Tuple[bytes, float]:
    """The serialized plan a plan JSON describes, and its plan_seconds (0 when absent)."""
    from .planner import IntArray, check_real
    document = _document(data)
    config = _config(document["config"])
    try:
        lengths = IntArray("sample_lengths", document["sample_lengths"])
        seconds = check_real("plan_seconds", document.get("plan_seconds", 0.0))
    except TypeError as wrong:
        raise ValueError(f"plan JSON: {wrong}") from None
    offsets, groups, members = _groups(document["microbatches"])
    # Every array as long as the library may read it (num_samples entries of group_samples
    # whatever the groups list), so a malformed document is refused by the library's checks,
    # never read out of bounds.
    count = lengths.count
    member_array = (ctypes.c_int32 * max(len(members), count, 1))(*members)
    for i in range(len(members), len(member_array)):
        member_array[i] = -1
    group_array = (S.Group * max(len(groups), 1))(*[S.Group(*g) for g in groups])
    offset_array = (ctypes.c_int32 * len(offsets))(*offsets)
    plan = S.Plan(config=config, num_samples=count,
                  sample_lengths=ctypes.cast(lengths.pointer, ctypes.POINTER(ctypes.c_int64)),
                  num_microbatches=len(offsets) - 1, num_groups=len(groups),
                  microbatch_offsets=offset_array, groups=group_array,
                  group_samples=member_array)
    lib, size = cpu(), ctypes.c_size_t()
    lib.call("dcp_plan_serialize", ctypes.byref(plan), None, 0, ctypes.byref(size))
    buffer = ctypes.create_string_buffer(size.value)
    lib.call("dcp_plan_serialize", ctypes.byref(plan), buffer, size, ctypes.byref(size))
    return buffer.raw[:size.value], seconds

