import json

from conftest import TINY
from planner.codec import plan_from_dict
from planner.export import estimate_to_dict, estimate_to_json, estimate_to_table
from planner.memory import estimate


def test_json_contract():
    est = estimate(plan_from_dict({"model": TINY}))
    d = json.loads(estimate_to_json(est))
    for key in ("peak_allocated_bytes", "peak_reserved_bytes", "device_bytes", "fits", "phase", "items"):
        assert key in d
    assert set(d["items"][0]) >= {"name", "bytes", "formula", "note"}
    assert d == estimate_to_dict(est) | {}  # JSON-serializable as is
    assert d["plan"]["model"]["num_layers"] == 2


def test_table_lists_items_and_totals():
    est = estimate(plan_from_dict({"model": TINY}))
    table = estimate_to_table(est)
    assert "Optimizer states" in table and "peak_reserved_bytes" in table
    assert "torch.cuda.max_memory_allocated()" in table and table.endswith("\n")
