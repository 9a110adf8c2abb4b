"""Chart specs built from planner results (the browser test checks they render)."""

from planner.catalog import load_catalog
from planner.memory import estimate
from planner.perf import step_time
from planner.plan.codec import plan_from_dict
from planner.search.explore import sweep
from planner.search.recommend import SearchOptions, recommend
from ui.charts import (
    ITEM_COLORS,
    ROW_PX,
    breakdown_chart,
    frontier_chart,
    recommendation_chart,
    sweep_chart,
    time_chart,
    timeline_chart,
)

CATALOG = load_catalog()
PLAN = plan_from_dict({"model": {"preset": "llama-3.2-1b"}, "workload": {"sequence_length": 2048}})


def _rows(spec):
    return spec["datasets"][spec["data"]["name"]]


def test_breakdown_chart_stacks_the_items_against_usable_memory():
    est = estimate(PLAN, CATALOG)
    spec = breakdown_chart(est).to_dict()
    rows = _rows(spec)
    items = [r for r in rows if r["kind"] == "item"]
    assert [r["item"] for r in items] == [i.label for i in est.items if i.bytes]
    assert [r for r in rows if r["kind"] == "limit"] == [
        {
            "kind": "limit",
            "item": "usable",
            "GiB": 79.18,
            "counts in": "",
            "order": len(items),
            "text": "usable 79.18 GiB",
        }
    ]
    assert len(spec["layer"]) == 3 and spec["layer"][1]["mark"]["type"] == "rule"


def _colors(est) -> dict[str, str]:
    scale = breakdown_chart(est).to_dict()["layer"][0]["encoding"]["color"]["scale"]
    return dict(zip(scale["domain"], scale["range"], strict=True))


SERVING = {"model": {"preset": "llama-3.1-8b"}, "framework": "vllm", "workload": {"task": "inference"}}
LORA_ZERO3 = {
    "model": {"preset": "llama-3.1-8b"},
    "framework": "deepspeed",
    "workload": {"task": "qlora"},
    "parallelism": {"data": 8, "zero_stage": 3},
}


def test_each_item_keeps_its_colour_in_every_plan():
    """Issue 17: activations are one colour whatever else the plan holds; every item the planner draws has one."""
    plans = [
        PLAN,
        plan_from_dict(SERVING),
        plan_from_dict(LORA_ZERO3),
        plan_from_dict({"model": {"preset": "llama-3.1-8b"}, "parallelism": {"data": 8, "zero_stage": 3}}),
    ]
    for plan in plans:
        est = estimate(plan, CATALOG)
        colors = _colors(est)
        assert all(i.name in ITEM_COLORS for i in est.items if i.bytes), [i.name for i in est.items]
        assert colors == {i.label: ITEM_COLORS[i.name] for i in est.items if i.bytes}
    assert len(set(ITEM_COLORS.values())) == len(ITEM_COLORS)  # no two items share a colour


def test_a_serving_plan_draws_its_engine_budget():
    rows = _rows(breakdown_chart(estimate(plan_from_dict(SERVING), CATALOG)).to_dict())
    assert next(r["text"] for r in rows if r["kind"] == "limit").startswith("engine budget ")


def test_sweep_chart_has_the_curve_capacity_lines_and_the_current_value():
    points = sweep(PLAN, CATALOG, "sequence_length")
    spec = sweep_chart(points, "sequence_length", 2048, {"H100": 80 * 2**30, "L4": 22 * 2**30}).to_dict()
    rows = _rows(spec)
    assert [r["x"] for r in rows if r["kind"] == "memory"] == [p.value for p in points]
    assert {r["series"] for r in rows if r["kind"] == "capacity"} == {"H100", "L4"}
    assert [r["x"] for r in rows if r["kind"] == "current"] == [2048]
    # a second chart from the same template keeps its own data
    other = sweep_chart(points[:2], "sequence_length", 512, {}).to_dict()
    assert len(_rows(other)) == 3 and len(_rows(sweep_chart(points, "sequence_length", 2048, {}).to_dict())) == 10


def test_recommendation_chart_has_one_bar_per_priced_gpu_type():
    rec = recommend(PLAN, CATALOG)
    rows = _rows(recommendation_chart(rec).to_dict())
    assert len(rows) == len({c.gpu.id for c in rec.candidates if c.usd_per_hour is not None})
    assert rows[0]["GPU"] == rec.best.gpu.name and rows[0]["within"] == "within the deadline"


def test_the_cost_chart_names_what_it_counts_and_labels_every_bar():
    """Issue 17: a served plan costs dollars per million tokens, not a job; each bar says its count and value."""
    rec = recommend(plan_from_dict(SERVING), CATALOG)
    spec = recommendation_chart(rec).to_dict()
    assert spec["layer"][0]["encoding"]["x"]["title"] == "$ per M tokens"
    assert spec["layer"][0]["encoding"]["y"]["axis"]["labelLimit"] == 400
    first = _rows(spec)[0]
    assert first["label"] == f"{first['GPUs']} GPU{'s' * (first['GPUs'] > 1)} · ${first['$ per M tokens']:,.2f}"


def test_frontier_chart_has_each_cheapest_types_frontier_and_the_deadline():
    plan = plan_from_dict(
        {"model": {"preset": "llama-3.1-8b"}, "workload": {"global_batch_size": 256, "train_tokens": 10**12}}
    )
    rec = recommend(plan, CATALOG, SearchOptions(deadline_hours=14 * 24))
    rows = _rows(frontier_chart(rec, types=3).to_dict())
    points = [r for r in rows if r["kind"] == "point"]
    cheapest = [c.gpu.name for c in rec.per_type() if c.job_usd is not None][:3]
    assert list(dict.fromkeys(r["GPU"] for r in points)) == cheapest
    for name in cheapest:  # each type's points are its frontier: faster costs more
        mine = [r for r in points if r["GPU"] == name]
        assert [r["days"] for r in mine] == sorted(r["days"] for r in mine)
        assert [r["$ per job"] for r in mine] == sorted((r["$ per job"] for r in mine), reverse=True)
    assert [r["days"] for r in rows if r["kind"] == "deadline"] == [14]
    none = recommend(plan, CATALOG, SearchOptions(deadline_hours=None))
    assert not [r for r in _rows(frontier_chart(none).to_dict()) if r["kind"] == "deadline"]


def test_time_chart_shows_the_critical_path_and_the_hidden_communication():
    plan = plan_from_dict({"model": {"preset": "llama-3.1-8b"}, "parallelism": {"data": 8, "zero_stage": 3}})
    time = step_time(plan, CATALOG["h100-sxm-80gb"])
    rows = _rows(time_chart(time).to_dict())
    assert {r["item"] for r in rows if r["part"] == "on the critical path"} == {
        i.label for i in time.items if i.seconds
    }
    hidden = [r for r in rows if r["part"] == "hidden behind compute"]
    assert [r["item"] for r in hidden] == ["Data-parallel collectives"]


def test_the_timeline_stacks_each_moment_in_order_and_marks_the_peak():
    """Issue 17: memory over one step, item by item, the moments in the order the step reaches them."""
    est = estimate(PLAN, CATALOG)
    stage = est.stages[0]
    rows = _rows(timeline_chart(stage).to_dict())
    items = [r for r in rows if r["kind"] == "item"]
    assert [ph.name for ph in stage.phases] == list(dict.fromkeys(r["moment"] for r in items))
    for ph in stage.phases:  # each moment's bars add up to its live memory
        assert abs(sum(r["GiB"] for r in items if r["moment"] == ph.name) - ph.allocated_bytes / 2**30) < 0.01
    assert [r for r in rows if r["kind"] == "peak"][0]["moment"] == est.phase


def _drawn_order(rows, field: str, sort: dict) -> list[str]:
    """The order Vega-Lite draws a nominal field's values in under an EncodingSortField: each value's rows
    aggregated by the sort's op (Vega-Lite's default for a stacked chart is sum; unioned layers allow only
    min, max or count, and sort alphabetically otherwise)."""
    ops = {"min": min, "max": max}
    assert sort["op"] in ops, sort
    keys: dict[str, list] = {}
    for r in rows:
        keys.setdefault(r[field], []).append(r[sort["field"]])
    return sorted(keys, key=lambda v: ops[sort["op"]](keys[v]))


def test_time_chart_draws_a_row_per_item_in_the_planners_order():
    """Issue 30: a bar a row high per item (28 px, not the chart's height shared out: Streamlit's autosize "fit"
    left ~0.3 px rows), every label whole, in the planner's order. ZeRO-3's collectives have two rows (critical,
    hidden), so summing their order (the stacked default) put them after the optimizer step."""
    plan = plan_from_dict({"model": {"preset": "llama-3.1-8b"}, "parallelism": {"data": 8, "zero_stage": 3}})
    time = step_time(plan, CATALOG["h100-sxm-80gb"])
    spec = time_chart(time).to_dict()
    y = spec["encoding"]["y"]
    assert _drawn_order(_rows(spec), "item", y["sort"]) == [i.label for i in time.items]
    assert [i.label for i in time.items][2:] == ["Data-parallel collectives", "Optimizer step"]
    assert spec["height"] == {"step": ROW_PX} and spec["autosize"]["type"] == "fit-x"
    assert y["axis"] == {"labelLimit": 400, "labelOverlap": False}
    assert spec["usermeta"] == {"embedOptions": {"renderer": "svg"}}  # the browser test reads the SVG


def test_the_timeline_draws_the_moments_in_step_order_a_row_each():
    """Issue 30: the moments down the side in step order, not alphabetical (Vega-Lite drops a sum sort across the
    bars' and the peak's layers), every label shown."""
    stage = estimate(PLAN, CATALOG).stages[0]
    spec = timeline_chart(stage).to_dict()
    bars, peak = spec["layer"]
    assert bars["encoding"]["y"] == peak["encoding"]["y"]  # one sort for the unioned domain
    names = [ph.name for ph in stage.phases]
    assert _drawn_order(_rows(spec), "moment", bars["encoding"]["y"]["sort"]) == names != sorted(names)
    assert bars["encoding"]["y"]["axis"]["labelOverlap"] is False and bars["encoding"]["x"]["field"] == "GiB"
    assert spec["height"] == {"step": ROW_PX} and spec["autosize"]["type"] == "fit-x"
