"""Altair charts of planner results. Pure functions: results in, chart specs out (tested via to_dict()).

Each chart is a template built once (Altair's encode() validates every channel, ~10 ms a chart) with one
top-level data frame; a call copies the template shallowly and attaches that run's data.
"""

from __future__ import annotations

from functools import cache

import altair as alt
import pandas as pd

from planner.memory import Estimate, Stage
from planner.perf import StepTime
from planner.search.explore import Point
from planner.search.recommend import Recommendation
from planner.units import counted, format_hours, to_unit

LEVEL_LABEL = {"allocated": "live tensors", "reserved": "allocator reserve", "device": "outside PyTorch"}
# One colour per item, whatever the plan, so a colour means the same thing in every chart: weights in blues,
# gradients and optimizer in greens and oranges, activations and transients in reds and purples, the KV cache in
# browns, runtime and allocator in greys. An item missing here is drawn grey.
ITEM_COLORS = {
    "weights": "#1f77b4",
    "adapters": "#6baed6",
    "master_weights": "#9ecae1",
    "weight_casts": "#c6dbef",
    "dequantized_weight": "#17becf",
    "zero3_gather": "#9edae5",
    "fp8_casts": "#3182bd",
    "unsharded_weights": "#08519c",
    "gradients": "#2ca02c",
    "fresh_gradients": "#98df8a",
    "ddp_buckets": "#74c476",
    "reduce_bucket": "#31a354",
    "reduce_copy": "#a1d99b",
    "optimizer_states": "#ff7f0e",
    "optimizer_temp": "#ffbb78",
    "activations": "#d62728",
    "logits_loss": "#ff9896",
    "recompute": "#e377c2",
    "backward_transient": "#f7b6d2",
    "expert_dispatch": "#9467bd",
    "dora_weight_norm": "#c5b0d5",
    "symmetric_memory": "#756bb1",
    "kv_cache": "#8c564b",
    "mask_buffer": "#c49c94",
    "expanded_kv": "#e7969c",
    "cuda_graphs": "#bcbd22",
    "custom_all_reduce": "#dbdb8d",
    "cublas_workspace": "#636363",
    "allocator_reserve": "#bdbdbd",
    "cuda_context": "#969696",
    "nccl": "#525252",
}
UNLISTED_COLOR = "#7f7f7f"
# Bar charts with a row per item or moment: a fixed height per row (Vega-Lite's step) and width fitted to the page.
# Streamlit's default, autosize "fit", squeezes the rows, axis and legend into the chart's height (rows ~1 px high);
# "fit-x" fits only the width, so the rows keep ROW_PX each and the axis and legend are added below. Drawn as SVG
# (Streamlit's usermeta.embedOptions) so the page holds the bars and labels a person sees.
ROW_PX = 28
ROWS = {
    "height": alt.Step(ROW_PX),
    "autosize": alt.AutoSizeParams(type="fit-x", contains="padding"),
    "usermeta": {"embedOptions": {"renderer": "svg"}},
}
ROW_AXIS = alt.Axis(labelLimit=400, labelOverlap=False)  # every label, whole


def _with_data(template: alt.TopLevelMixin, data: pd.DataFrame) -> alt.TopLevelMixin:
    chart = template.copy(deep=False)
    chart.data = data
    return chart


@cache
def _breakdown_template() -> alt.LayerChart:
    items = alt.datum.kind == "item"
    bar = (
        alt.Chart()
        .mark_bar(size=36)
        .encode(
            x=alt.X("sum(GiB):Q", title="GiB per GPU"),
            order=alt.Order("order:Q"),
            tooltip=["item:N", alt.Tooltip("GiB:Q", format=".2f"), "counts in:N"],
        )
        .transform_filter(items)
    )
    limit = (
        alt.Chart()
        .mark_rule(color="red", size=2, strokeDash=[6, 3])
        .encode(x="GiB:Q", y=alt.value(0), y2=alt.value(74), tooltip=["item:N", "GiB:Q"])
        .transform_filter(alt.datum.kind == "limit")
    )
    # the label sits at the rule's foot, below the axis, where no bar can cover it
    label = (
        alt.Chart()
        .mark_text(color="red", align="left", dx=4, baseline="bottom")
        .encode(x="GiB:Q", y=alt.value(74), text="text:N")
        .transform_filter(alt.datum.kind == "limit")
    )
    return alt.layer(bar, limit, label).properties(height=60)


def breakdown_chart(est: Estimate) -> alt.LayerChart:
    """One stacked bar of the items at the peak against the memory the plan may use (a red dashed rule: the
    GPU's usable memory, or a serving engine's budget), each item in its own colour in every plan."""
    shown = [i for i in est.items if i.bytes]
    rows = [
        {
            "kind": "item",
            "item": i.label,
            "GiB": round(to_unit(i.bytes), 3),
            "counts in": LEVEL_LABEL[i.level],
            "order": n,
        }
        for n, i in enumerate(shown)
    ]
    limit = "engine budget" if est.serving is not None else "usable"
    gib = round(to_unit(est.usable_bytes), 2)
    rows.append(
        {
            "kind": "limit",
            "item": limit,
            "GiB": gib,
            "counts in": "",
            "order": len(rows),
            "text": f"{limit} {gib:g} GiB",
        }
    )
    chart = _with_data(_breakdown_template(), pd.DataFrame(rows))
    bar = _colored_bar(tuple(i.label for i in shown), tuple(ITEM_COLORS.get(i.name, UNLISTED_COLOR) for i in shown))
    chart.layer = [bar, *chart.layer[1:]]
    return chart


@cache
def _colored_bar(labels: tuple[str, ...], colors: tuple[str, ...]) -> alt.Chart:
    """The breakdown's bar layer with each label in its item's colour (made once per set of items)."""
    color = alt.Color(
        "item:N",
        sort=list(labels),
        scale=alt.Scale(domain=list(labels), range=list(colors)),
        legend=alt.Legend(title=None, orient="bottom", columns=3, symbolLimit=0, labelLimit=260),
    )
    return _breakdown_template().layer[0].encode(color=color)


@cache
def _timeline_template() -> alt.LayerChart:
    """Moments down the side in step order (the smallest `step` of each moment's rows: unioned layers take min, not
    the stacked default sum, which Vega-Lite drops for alphabetical), a bar of live memory across each."""
    y = alt.Y("moment:N", sort=alt.EncodingSortField("step", op="min"), title=None, axis=ROW_AXIS)
    bars = (
        alt.Chart()
        .mark_bar()
        .encode(
            y=y,
            x=alt.X("sum(GiB):Q", title="GiB allocated"),
            order=alt.Order("order:Q"),
            tooltip=["moment:N", "item:N", alt.Tooltip("GiB:Q", format=".2f")],
        )
        .transform_filter(alt.datum.kind == "item")
    )
    peak = (
        alt.Chart()
        .mark_text(align="left", dx=6, fontWeight="bold")
        .encode(y=y, x="GiB:Q", text="text:N")
        .transform_filter(alt.datum.kind == "peak")
    )
    return alt.layer(bars, peak).properties(**ROWS)


def timeline_chart(stage: Stage) -> alt.LayerChart:
    """Live memory at each moment of one stage's step, a row each in step order (forward, the loss's and each
    layer's backward, the optimizer), stacked by item in the items' colours, the peak moment marked."""
    rows: list[dict] = []
    labels: dict[str, str] = {}  # item label -> its colour
    for step, ph in enumerate(stage.phases):
        for n, i in enumerate(x for x in ph.items if x.bytes and x.level == "allocated"):
            rows.append(
                {
                    "kind": "item",
                    "moment": ph.name,
                    "step": step,
                    "item": i.label,
                    "order": n,
                    "GiB": round(to_unit(i.bytes), 3),
                }
            )
            labels.setdefault(i.label, ITEM_COLORS.get(i.name, UNLISTED_COLOR))
    peak = stage.peak
    rows.append(
        {
            "kind": "peak",
            "moment": peak.name,
            "step": stage.phases.index(peak),
            "item": "",
            "GiB": round(to_unit(peak.allocated_bytes), 3),
            "text": f"peak {to_unit(peak.allocated_bytes):.2f} GiB",
        }
    )
    chart = _with_data(_timeline_template(), pd.DataFrame(rows))
    color = alt.Color(
        "item:N",
        scale=alt.Scale(domain=list(labels), range=list(labels.values())),
        legend=alt.Legend(title=None, orient="bottom", columns=3, symbolLimit=0, labelLimit=260),
    )
    chart.layer = [chart.layer[0].encode(color=color), chart.layer[1]]
    return chart


@cache
def _sweep_template(axis: str) -> alt.LayerChart:
    x = alt.X("x:Q", scale=alt.Scale(type="log", base=2), title=axis.replace("_", " "))
    y = alt.Y("GiB:Q", scale=alt.Scale(type="log"), title="GiB per GPU")
    memory = (
        alt.Chart()
        .mark_line(point=True, color="#1f77b4")
        .encode(x=x, y=y, tooltip=["x:Q", "GiB:Q", "note:N"])
        .transform_filter(alt.datum.kind == "memory")
    )
    capacity = (
        alt.Chart()
        .mark_line(strokeDash=[4, 4])
        .encode(
            x=x,
            y=y,
            color=alt.Color("series:N", legend=alt.Legend(title="capacity", orient="bottom", labelLimit=400)),
            tooltip=["series:N", "GiB:Q"],
        )
        .transform_filter(alt.datum.kind == "capacity")
    )
    current = alt.Chart().mark_rule(color="gray").encode(x=x).transform_filter(alt.datum.kind == "current")
    return alt.layer(memory, capacity, current).properties(height=360)


def sweep_chart(points: list[Point], axis: str, current: int, capacities: dict[str, int]) -> alt.LayerChart:
    """Device memory per GPU against `axis`, a dashed line per GPU capacity, and the plan's current value."""
    rows = [
        {
            "kind": "memory",
            "series": "plan",
            "x": p.value,
            "GiB": round(to_unit(p.estimate.device_bytes), 2),
            "note": p.estimate.phase,
        }
        for p in points
    ]
    ends = (points[0].value, points[-1].value) if points else (current, current)
    rows += [
        {"kind": "capacity", "series": name, "x": x, "GiB": round(to_unit(b), 2), "note": ""}
        for name, b in capacities.items()
        for x in ends
    ]
    rows.append({"kind": "current", "series": "plan", "x": current, "GiB": None, "note": ""})
    return _with_data(_sweep_template(axis), pd.DataFrame(rows))


@cache
def _recommendation_template(measure: str) -> alt.LayerChart:
    base = alt.Chart().encode(y=alt.Y("GPU:N", sort=None, title=None, axis=alt.Axis(labelLimit=400)))  # rank order
    bar = base.mark_bar().encode(
        x=alt.X(f"{measure}:Q", title=measure),
        color=alt.Color(
            "within:N",
            title=None,
            legend=alt.Legend(orient="bottom"),
            scale=alt.Scale(domain=["within the deadline", "too slow"], range=["#1f77b4", "#c7c7c7"]),
        ),
        tooltip=["GPU:N", "offering:N", "GPUs:Q", f"{measure}:Q", "$ per GPU-hour:Q", "time:N"],
    )
    value = base.mark_text(align="left", dx=4).encode(x=f"{measure}:Q", text="label:N")
    return alt.layer(bar, value)


def _cost_measure(rec: Recommendation) -> str:
    """What the cost axis counts: the job's dollars, or per million generated tokens when serving (or per hour)."""
    if rec.ranked_by_hour:
        return "$ per hour"
    return "$ per M tokens" if rec.serving else "$ per job"


def _cost(rec: Recommendation, c) -> float:
    return round(c.usd_per_hour if rec.ranked_by_hour else c.job_usd, 2)


def recommendation_chart(rec: Recommendation) -> alt.LayerChart:
    """The best candidate of each priced GPU type (the cheapest within the deadline, else its fastest), cheapest
    first, each bar labelled with its GPU count and value, and coloured by whether it meets the deadline."""
    measure = _cost_measure(rec)
    rows = [
        {
            "GPU": c.gpu.name,
            "offering": c.offering.id,
            "GPUs": c.count * c.replicas,
            measure: _cost(rec, c),
            "$ per GPU-hour": round(c.usd_per_gpu_hour, 2),
            "time": format_hours(c.job_hours),
            "within": "within the deadline" if c.meets_deadline else "too slow",
            "label": f"{counted(c.count * c.replicas, 'GPU')} · ${_cost(rec, c):,.2f}",
        }
        for c in rec.per_type()
        if c.usd_per_hour is not None
    ]
    chart = _with_data(_recommendation_template(measure), pd.DataFrame(rows))
    return chart.properties(height=max(120, 24 * len(rows)))


@cache
def _time_template() -> alt.Chart:
    return (
        alt.Chart()
        .mark_bar()
        .encode(
            x=alt.X("seconds:Q", stack="zero", title="seconds per step"),
            # min: an item's two parts (critical, hidden) share its order; the stacked default, sum, would double it
            y=alt.Y("item:N", sort=alt.EncodingSortField("order", op="min"), title=None, axis=ROW_AXIS),
            color=alt.Color(
                "part:N",
                scale=alt.Scale(domain=["on the critical path", "hidden behind compute"], range=["#1f77b4", "#c6dbef"]),
                legend=alt.Legend(title=None, orient="bottom"),
            ),
            tooltip=["item:N", "part:N", "seconds:Q"],
        )
        .properties(**ROWS)
    )


def time_chart(time: StepTime) -> alt.Chart:
    """The step's items, a bar each in the planner's order: seconds on the critical path, and the communication
    hidden behind compute."""
    rows = [
        {"item": i.label, "part": part, "seconds": round(s, 6), "order": n}
        for n, i in enumerate(time.items)
        for part, s in (("on the critical path", i.seconds), ("hidden behind compute", i.hidden_s))
        if s
    ]
    return _with_data(_time_template(), pd.DataFrame(rows))


@cache
def _frontier_template(cost: str, deadline: bool) -> alt.LayerChart:
    line = (
        alt.Chart()
        .mark_line(point=True)
        .encode(
            x=alt.X("days:Q", scale=alt.Scale(type="log"), title="job time, days"),
            y=alt.Y(f"{cost}:Q", scale=alt.Scale(zero=False), title=cost),
            color=alt.Color("GPU:N", legend=alt.Legend(title=None, orient="bottom", columns=3, labelLimit=400)),
            tooltip=["GPU:N", "offering:N", "GPUs:Q", "time:N", f"{cost}:Q", "strategy:N"],
        )
        .transform_filter(alt.datum.kind == "point")
    )
    labels = (
        line.mark_text(align="left", dx=6, dy=-8, fontSize=11)
        .encode(text="label:N")
        .transform_filter(alt.datum.label != "")
    )
    if not deadline:
        return alt.layer(line, labels)
    rule = (
        alt.Chart()
        .mark_rule(strokeDash=[4, 4], color="#d62728")
        .encode(x="days:Q")
        .transform_filter(alt.datum.kind == "deadline")
    )
    return alt.layer(line, labels, rule)


def frontier_chart(rec: Recommendation, types: int = 6) -> alt.LayerChart:
    """The cost-time frontier of the cheapest GPU types: for each, the cheapest configuration at each job time it
    can reach (a point per GPU count), its best (the recommendation's rule: cheapest within the deadline)
    labelled with its GPU count, and the deadline as a dashed line."""
    cost = "$ per job"
    best = [b for b in rec.per_type() if b.job_usd is not None][:types]
    rows = [
        {
            "kind": "point",
            "GPU": c.gpu.name,
            "offering": c.offering.id,
            "GPUs": c.count,
            "days": round(c.job_hours / 24, 4),
            "time": format_hours(c.job_hours),
            cost: round(c.job_usd, 2),
            "strategy": c.strategy,
            "label": counted(c.count, "GPU") if c == b else "",
        }
        for b in best
        for c in rec.frontier(b.gpu.id)
    ]
    deadline = rec.options.deadline_hours
    if deadline is not None:
        rows.append({"kind": "deadline", "days": deadline / 24})
    return _with_data(_frontier_template(cost, deadline is not None), pd.DataFrame(rows)).properties(height=340)
