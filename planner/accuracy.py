"""How close the planner's memory has come to published measurements, by kind of plan.

The figures are bench/accuracy.py's over bench/data/measured-dev.csv (`python bench/accuracy.py --write` writes
planner/data/accuracy.yaml; a test checks the file is current), so a verdict can say how far a plan of its kind
has been off: "fits with 0.3 GiB free" reads as the risk it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from planner.loader import load_data_file
from planner.memory import Estimate
from planner.units import format_bytes

ACCURACY_PATH = Path(__file__).parent / "data" / "accuracy.yaml"
WorkloadClass = Literal["full training", "adapters", "generation"]


@dataclass(frozen=True, kw_only=True)
class Accuracy:
    """Errors of the predictions against the measured rows of one kind of plan, in percent of the measured."""

    workload: WorkloadClass
    rows: int
    median_pct: float  # median |error|
    p90_pct: float  # 90 % of the rows were off by at most this much
    signed_pct: float  # median signed error: below 0, the planner predicted less than was measured


def workload_class(task: str) -> WorkloadClass:
    """The kind of run a task is: full training, adapters (LoRA, QLoRA) or generation."""
    return "generation" if task == "inference" else "adapters" if task in ("lora", "qlora") else "full training"


@cache
def accuracy_table() -> dict[str, Accuracy]:
    raw = load_data_file(ACCURACY_PATH)
    return {name: Accuracy(workload=name, **values) for name, values in raw["classes"].items()}


def likely_range(est: Estimate) -> tuple[int, int, Accuracy]:
    """The device total measured runs of this kind would have shown, 9 times in 10: the prediction over
    (1 ± the p90 error), since an error is (predicted − measured) / measured."""
    acc = accuracy_table()[workload_class(est.plan.workload.task)]
    p90 = acc.p90_pct / 100
    return round(est.device_bytes / (1 + p90)), round(est.device_bytes / max(1 - p90, 0.01)), acc


def confidence_note(est: Estimate) -> str:
    """One line for the verdict: how far plans of this kind have been off, as a range of the device total."""
    low, high, acc = likely_range(est)
    lean = "low" if acc.signed_pct < 0 else "high"
    return (f"Against {acc.rows} published measurements of {acc.workload} runs, the planner was off by "
            f"{acc.median_pct:.1f} % (median) and at most {acc.p90_pct:.1f} % in 9 of 10, leaning {lean} "
            f"({acc.signed_pct:+.1f} %): this plan's {format_bytes(est.device_bytes)} is likely "
            f"{format_bytes(low)}–{format_bytes(high)}.")
