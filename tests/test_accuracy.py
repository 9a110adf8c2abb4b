"""The measured-accuracy figures a verdict quotes (planner/accuracy.py)."""

from planner.accuracy import accuracy_table, confidence_note, likely_range, workload_class
from planner.codec import plan_from_dict
from planner.memory import estimate
from planner.units import GiB


def test_each_task_has_a_measured_class():
    assert [workload_class(t) for t in ("pretrain", "finetune", "lora", "qlora", "inference")] == [
        "full training", "full training", "adapters", "adapters", "generation"]
    assert set(accuracy_table()) == {"full training", "adapters", "generation"}


def test_the_likely_range_undoes_the_p90_error_by_hand():
    """An error is (predicted − measured) / measured, so with |error| ≤ p90 the measured value lies between
    predicted / (1 + p90) and predicted / (1 − p90)."""
    est = estimate(plan_from_dict({"model": {"preset": "llama-3.1-8b"}, "workload": {"task": "qlora"}}))
    low, high, acc = likely_range(est)
    p90 = acc.p90_pct / 100
    assert (low, high) == (round(est.device_bytes / (1 + p90)), round(est.device_bytes / (1 - p90)))
    assert low < est.device_bytes < high
    note = confidence_note(est)
    assert note.startswith(f"Against {acc.rows} published measurements of adapters runs, the planner was off by ")
    assert f"likely {low / GiB:.2f} GiB–{high / GiB:.2f} GiB." in note
