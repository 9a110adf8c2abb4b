"""Chart specs built from planner results (the browser test checks they render)."""

from planner.catalog import load_catalog
from planner.explore import sweep
from planner.memory import estimate
from planner.codec import plan_from_dict
from planner.recommend import recommend
from ui.charts import breakdown_chart, recommendation_chart, sweep_chart

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
        {"kind": "limit", "item": "usable", "GiB": 79.65, "counts in": "", "order": len(items)}]
    assert len(spec["layer"]) == 3 and spec["layer"][1]["mark"]["type"] == "rule"


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
    assert rows[0]["GPU"] == rec.best.gpu.name
