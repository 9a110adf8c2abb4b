"""The measured-accuracy figures a verdict quotes (planner/accuracy.py)."""

from planner.accuracy import (
    accuracy_table,
    confidence_note,
    likely_range,
    likely_seconds,
    time_bands,
    time_class,
    time_note,
    workload_class,
)
from planner.memory import estimate
from planner.plan.codec import plan_from_dict
from planner.units import GiB


def test_each_task_has_a_measured_class():
    assert [workload_class(t) for t in ("pretrain", "finetune", "lora", "qlora", "inference")] == [
        "full training",
        "full training",
        "adapters",
        "adapters",
        "generation",
    ]
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


def test_each_plan_has_a_measured_time_class():
    classes = {
        name: time_class(plan_from_dict({"model": {"preset": preset}, "workload": {"task": task}}))
        for name, preset, task in (
            ("dense", "llama-3.1-8b", "pretrain"),
            ("moe", "mixtral-8x7b", "lora"),
            ("serving", "qwen3-30b-a3b", "inference"),
        )
    }
    assert classes == {"dense": "dense training", "moe": "MoE training", "serving": "generation"}
    assert set(time_bands()) == {"dense training", "MoE training", "generation"}


def test_the_likely_time_is_the_models_time_over_the_measured_errors_by_hand():
    """An error is predicted tokens/s over measured, less one: the measured time was (1 + error) × the model's,
    so 8 runs in 10 took between (1 + the 10th) and (1 + the 90th percentile of the signed error) × it."""
    plan = plan_from_dict({"model": {"preset": "llama-3.1-8b"}})
    low, high, band = likely_seconds(plan, 2.0)
    assert (low, high) == (2.0 * (1 + band.low_pct / 100), 2.0 * (1 + band.high_pct / 100)) and band.rows > 40
    note = time_note(plan, 2.0)
    assert note.startswith(
        f"Against {band.rows} published dense training runs, the time model was off by "
        f"{band.median_pct:.1f} % (median), leaning fast"
    )
    assert note.endswith(f"one optimizer step of 2 s is likely {low:.3g} s–{high:.3g} s.")
