"""A plan's timeline as SVG: the picture of `dcp-plan --svg` (examples/dcp_plan.c draws it in C;
the library has no drawing function, so the few lines of layout are repeated here, with the
same geometry constants). Group times come from the library (dcp_plan_schedule)."""
import math
from typing import List

PLOT_WIDTH = 1000.0      # px of the time axis
PLOT_HEIGHT_MAX = 640.0  # px for all ranks together
ROW_HEIGHT_MAX = 18.0    # px per rank at most
MARGIN_LEFT, MARGIN_TOP, MARGIN_BOTTOM = 70.0, 46.0, 64.0
TARGET_TICKS = 10.0
LABEL_MIN_PX = 12.0      # rank labels closer than this are thinned out
CP_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
             "#ff9da7", "#9c755f", "#bab0ac")


def _nice_tick(span_ms: float) -> float:
    raw = span_ms / TARGET_TICKS
    magnitude = 10.0 ** math.floor(math.log10(raw))
    f = raw / magnitude
    return (1.0 if f < 1.5 else 2.0 if f < 3.5 else 5.0 if f < 7.5 else 10.0) * magnitude


def _color(cp: int) -> str:
    return CP_COLORS[min(cp.bit_length() - 1, len(CP_COLORS) - 1)]


def plan_svg(plan) -> str:
    """SVG text of ``plan`` (a dcp.Plan): one row per rank, one box per group."""
    stats, ranks = plan.stats, plan.ranks
    step_ms = stats.step_seconds * 1e3
    row = min(PLOT_HEIGHT_MAX / ranks, ROW_HEIGHT_MAX)
    height = row * ranks
    x_scale = PLOT_WIDTH / (step_ms if step_ms > 0 else 1.0)
    out: List[str] = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{MARGIN_LEFT + PLOT_WIDTH + 150:.0f}' "
        f"height='{MARGIN_TOP + height + MARGIN_BOTTOM:.0f}' font-family='sans-serif'>",
        "<rect width='100%' height='100%' fill='white'/>",
        f"<text x='{MARGIN_LEFT:.0f}' y='20' font-size='14'>dcp plan: {plan.num_samples} "
        f"samples on {ranks} ranks, {plan.num_microbatches} microbatches; step {step_ms:.3f} "
        f"ms, lower bound {stats.lower_bound_seconds * 1e3:.3f} ms, efficiency "
        f"{stats.efficiency:.3f}</text>"]
    if step_ms > 0:
        tick = _nice_tick(step_ms)
        for i in range(int(step_ms / tick + 1e-9) + 1):
            x = MARGIN_LEFT + i * tick * x_scale
            out.append(f"<line x1='{x:.2f}' y1='{MARGIN_TOP:.2f}' x2='{x:.2f}' "
                       f"y2='{MARGIN_TOP + height:.2f}' stroke='#ddd'/>")
            out.append(f"<text x='{x:.2f}' y='{MARGIN_TOP + height + 16:.2f}' font-size='11' "
                       f"text-anchor='middle'>{i * tick:g}</text>")
    out.append(f"<text x='{MARGIN_LEFT + PLOT_WIDTH / 2:.2f}' y='{MARGIN_TOP + height + 34:.2f}'"
               f" font-size='12' text-anchor='middle'>time (ms)</text>")
    every = 1
    while row * every < LABEL_MIN_PX:
        every *= 2
    for r in range(0, ranks, every):
        out.append(f"<text x='{MARGIN_LEFT - 6:.2f}' y='{MARGIN_TOP + (r + 0.5) * row + 3.5:.2f}'"
                   f" font-size='10' text-anchor='end'>rank {r}</text>")
    groups, times = plan.groups, plan.schedule()
    offsets = [0]
    for mb in plan.microbatches:
        offsets.append(offsets[-1] + len(mb))
    for k in range(plan.num_microbatches):
        for g in range(offsets[k], offsets[k + 1]):
            group, (start, end) = groups[g], times[g]
            out.append(
                f"<rect x='{MARGIN_LEFT + start * 1e3 * x_scale:.3f}' "
                f"y='{MARGIN_TOP + group.first_rank * row:.3f}' "
                f"width='{(end - start) * 1e3 * x_scale:.3f}' height='{group.cp * row:.3f}' "
                f"fill='{_color(group.cp)}' stroke='white' stroke-width='0.5'><title>microbatch "
                f"{k}, ranks {group.first_rank}-{group.first_rank + group.cp - 1} (cp {group.cp}),"
                f" {len(group.samples)} samples, {start * 1e3:.3f}-{end * 1e3:.3f} ms</title></rect>")
    level = 0
    while level < len(CP_COLORS) and (1 << level) <= plan.config["max_cp"]:
        y = MARGIN_TOP + 18.0 * level
        out.append(f"<rect x='{MARGIN_LEFT + PLOT_WIDTH + 20:.0f}' y='{y:.0f}' width='14' "
                   f"height='14' fill='{CP_COLORS[level]}'/>")
        out.append(f"<text x='{MARGIN_LEFT + PLOT_WIDTH + 40:.0f}' y='{y + 11:.0f}' "
                   f"font-size='12'>cp {1 << level}</text>")
        level += 1
    out.append("</svg>")
    return "\n".join(out) + "\n"
