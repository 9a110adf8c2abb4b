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


# --- The time model ------------------------------------------------------------------------------------------
TIME_ACCURACY_PATH = Path(__file__).parent / "data" / "time_accuracy.yaml"


@dataclass(frozen=True, kw_only=True)
class TimeAccuracy:
    """How far the step-time model has been off against published training throughput (bench/throughput.py
    over bench/data/throughput.csv; `python bench/throughput.py --write` writes planner/data/time_accuracy.yaml).
    An error is predicted tokens/s over measured, less one: above 0, the model was too fast."""

    rows: int
    median_pct: float  # median |error| of tokens/s per GPU
    p90_pct: float
    signed_pct: float
    pairs: int  # runs of one model measured on two GPU types
    pair_median_pct: float  # median |error| of the predicted speed ratio of the two
    gpus: tuple[str, ...]  # GPU ids some published run measured
    vendors: tuple[str, ...]
    moe_rows: int
    moe_median_pct: float | None
    moe_signed_pct: float | None

    @property
    def moe(self) -> str:
        if not self.moe_rows:
            return "checked against no published MoE run"
        return (f"{self.moe_median_pct:.0f} % off at the median ({self.moe_signed_pct:+.0f} % signed) on "
                f"{self.moe_rows} published MoE runs")

    def vendor_note(self, vendor: str) -> str:
        return ("other GPUs of its vendor were checked" if vendor in self.vendors else
                f"no run on any {vendor} GPU either, so its software stack's efficiency is unmeasured")


@cache
def time_accuracy() -> TimeAccuracy:
    raw = load_data_file(TIME_ACCURACY_PATH)
    return TimeAccuracy(**{**raw, "gpus": tuple(raw["gpus"]), "vendors": tuple(raw["vendors"])})
