"""Altair charts of planner results. Pure functions: results in, chart specs out (tested via to_dict()).

Each chart is a template built once (Altair's encode() validates every channel, ~10 ms a chart) with one
top-level data frame; a call copies the template shallowly and attaches that run's data.
"""

from __future__ import annotations

from functools import cache

import altair as alt
import pandas as pd

from planner.explore import Point
from planner.memory import Estimate
from planner.perf import StepTime
from planner.recommend import Recommendation
from planner.units import to_unit

LEVEL_LABEL = {"allocated": "live tensors", "reserved": "allocator reserve", "device": "outside PyTorch"}


def _with_data(template: alt.TopLevelMixin, data: pd.DataFrame) -> alt.TopLevelMixin:
    chart = template.copy(deep=False)
    chart.data = data
    return chart


@cache
def _breakdown_template() -> alt.LayerChart:
    items = alt.datum.kind == "item"
    bar = alt.Chart().mark_bar(size=40).encode(
        x=alt.X("sum(GiB):Q", title="GiB per GPU"),
        color=alt.Color("item:N", sort=alt.EncodingSortField("order"),
                        legend=alt.Legend(title=None, orient="bottom", columns=4, symbolLimit=0)),
        order=alt.Order("order:Q"),
        tooltip=["item:N", "GiB:Q", "counts in:N"],
    ).transform_filter(items)
    limit = alt.Chart().mark_rule(color="red", size=3).encode(
        x="GiB:Q", y=alt.value(-8), y2=alt.value(68), tooltip=["item:N", "GiB:Q"]) \
        .transform_filter(alt.datum.kind == "limit")
    label = alt.Chart().mark_text(color="red", align="left", dx=5, baseline="top").encode(
        x="GiB:Q", y=alt.value(-8), text="item:N").transform_filter(alt.datum.kind == "limit")
    return alt.layer(bar, limit, label).properties(height=60)


def breakdown_chart(est: Estimate) -> alt.LayerChart:
    """One stacked bar of the items at the peak against the GPU's usable memory (a red rule)."""
    rows = [{"kind": "item", "item": i.label, "GiB": round(to_unit(i.bytes), 3), "counts in": LEVEL_LABEL[i.level],
             "order": n} for n, i in enumerate(est.items) if i.bytes]
    rows.append({"kind": "limit", "item": "usable", "GiB": round(to_unit(est.usable_bytes), 2), "counts in": "",
                 "order": len(rows)})
    return _with_data(_breakdown_template(), pd.DataFrame(rows))


@cache
def _sweep_template(axis: str) -> alt.LayerChart:
    x = alt.X("x:Q", scale=alt.Scale(type="log", base=2), title=axis.replace("_", " "))
    y = alt.Y("GiB:Q", scale=alt.Scale(type="log"), title="GiB per GPU")
    memory = alt.Chart().mark_line(point=True, color="#1f77b4").encode(x=x, y=y, tooltip=["x:Q", "GiB:Q", "note:N"]) \
        .transform_filter(alt.datum.kind == "memory")
    capacity = alt.Chart().mark_line(strokeDash=[4, 4]).encode(
        x=x, y=y, color=alt.Color("series:N", title="capacity"), tooltip=["series:N", "GiB:Q"]) \
        .transform_filter(alt.datum.kind == "capacity")
    current = alt.Chart().mark_rule(color="gray").encode(x=x).transform_filter(alt.datum.kind == "current")
    return alt.layer(memory, capacity, current).properties(height=280)


def sweep_chart(points: list[Point], axis: str, current: int, capacities: dict[str, int]) -> alt.LayerChart:
    """Device memory per GPU against `axis`, a dashed line per GPU capacity, and the plan's current value."""
    rows = [{"kind": "memory", "series": "plan", "x": p.value, "GiB": round(to_unit(p.estimate.device_bytes), 2),
             "note": p.estimate.phase} for p in points]
    ends = (points[0].value, points[-1].value) if points else (current, current)
    rows += [{"kind": "capacity", "series": name, "x": x, "GiB": round(to_unit(b), 2), "note": ""}
             for name, b in capacities.items() for x in ends]
    rows.append({"kind": "current", "series": "plan", "x": current, "GiB": None, "note": ""})
    return _with_data(_sweep_template(axis), pd.DataFrame(rows))


@cache
def _recommendation_template(measure: str) -> alt.Chart:
    return alt.Chart().mark_bar().encode(
        x=alt.X(f"{measure}:Q"), y=alt.Y("GPU:N", sort="x", title=None),
        tooltip=["GPU:N", "GPUs:Q", "job USD:Q", "USD per hour:Q", "hours:Q"],
    )


def recommendation_chart(rec: Recommendation) -> alt.Chart:
    """The cheapest candidate of each GPU type: cost of the job (or per hour), cheapest first."""
    best: dict[str, dict] = {}
    for c in rec.candidates:
        if c.usd_per_hour is None or c.gpu.id in best:
            continue
        best[c.gpu.id] = {"GPU": c.gpu.name, "GPUs": c.count, "job USD": round(c.job_usd, 2),
                          "USD per hour": round(c.usd_per_hour, 2), "hours": round(c.job_hours, 2)}
    measure = "job USD" if rec.rank_by == "job" else "USD per hour"
    chart = _with_data(_recommendation_template(measure), pd.DataFrame(list(best.values())))
    return chart.properties(height=max(120, 18 * len(best)))


@cache
def _time_template() -> alt.Chart:
    return alt.Chart().mark_bar().encode(
        x=alt.X("seconds:Q", stack="zero", title="seconds per step"),
        y=alt.Y("item:N", sort=alt.EncodingSortField("order"), title=None),
        color=alt.Color("part:N", scale=alt.Scale(domain=["on the critical path", "hidden behind compute"],
                                                  range=["#1f77b4", "#c6dbef"]),
                        legend=alt.Legend(title=None, orient="bottom")),
        tooltip=["item:N", "part:N", "seconds:Q"],
    )


def time_chart(time: StepTime) -> alt.Chart:
    """The step's items: seconds on the critical path, and the communication hidden behind compute."""
    rows = [{"item": i.label, "part": part, "seconds": round(s, 6), "order": n}
            for n, i in enumerate(time.items)
            for part, s in (("on the critical path", i.seconds), ("hidden behind compute", i.hidden_s)) if s]
    return _with_data(_time_template(), pd.DataFrame(rows)).properties(height=max(120, 26 * len(time.items)))


@cache
def _count_template(measure: str) -> alt.Chart:
    return alt.Chart().mark_line(point=True).encode(
        x=alt.X("GPUs:Q", scale=alt.Scale(type="log", base=2)), y=alt.Y(f"{measure}:Q", scale=alt.Scale(type="log")),
        color=alt.Color("GPU:N", legend=alt.Legend(title=None, orient="bottom", columns=3, labelLimit=260)),
        tooltip=["GPU:N", "GPUs:Q", "job USD:Q", "hours:Q", "strategy:N"],
    )


def count_chart(rec: Recommendation, types: int = 6) -> alt.Chart:
    """Cost and time against the GPU count, for the best strategy at each count of the cheapest GPU types."""
    order = list(dict.fromkeys(c.gpu.id for c in rec.candidates if c.job_usd is not None))[:types]
    rows = [{"GPU": c.gpu.name, "GPUs": c.count, "job USD": round(c.job_usd, 2), "hours": round(c.job_hours, 3),
             "strategy": c.strategy} for c in rec.candidates if c.gpu.id in order]
    measure = "job USD" if rec.rank_by == "job" else "hours"
    return _with_data(_count_template(measure), pd.DataFrame(rows)).properties(height=300)
