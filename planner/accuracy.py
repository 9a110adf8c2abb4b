"""How close the planner's memory has come to published measurements, by kind of plan.

The figures are bench/accuracy.py's over bench/data/measured-dev.csv (`python bench/accuracy.py --write` writes
planner/data/accuracy.yaml; a test checks the file is current), so a verdict can say how far a plan of its kind
has been off: "fits with 0.3 GiB free" reads as the risk it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal

from planner.loader import DATA_DIR, load_data_file
from planner.memory import Estimate
from planner.plan.config import Plan
from planner.units import format_bytes, format_seconds

ACCURACY_PATH = DATA_DIR / "accuracy.yaml"
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
    return (
        f"Against {acc.rows} published measurements of {acc.workload} runs, the planner was off by "
        f"{acc.median_pct:.1f} % (median) and at most {acc.p90_pct:.1f} % in 9 of 10, leaning {lean} "
        f"({acc.signed_pct:+.1f} %): this plan's {format_bytes(est.device_bytes)} is likely "
        f"{format_bytes(low)}–{format_bytes(high)}."
    )


# --- The time model ------------------------------------------------------------------------------------------
TIME_ACCURACY_PATH = DATA_DIR / "time_accuracy.yaml"
SERVING_ACCURACY_PATH = DATA_DIR / "serving_accuracy.yaml"
TimeClass = Literal["dense training", "MoE training", "generation"]


@dataclass(frozen=True, kw_only=True)
class TimeBand:
    """How far the time model has been off on one class of published runs, in percent (bench/stats.py's band).
    An error is predicted tokens/s over measured, less one: above 0 the model was too fast, and the measured
    time was (1 + error) × the model's."""

    kind: TimeClass
    rows: int
    median_pct: float  # median |error|
    p90_pct: float
    signed_pct: float
    low_pct: float  # 10th percentile of the signed error
    high_pct: float  # 90th percentile: 8 runs in 10 between low and high


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
    gpu_signed_pct: tuple[tuple[str, float], ...]  # each GPU's median signed error on its dense training rows

    @property
    def moe(self) -> str:
        band = time_bands().get("MoE training")
        if band is None:
            return "checked against no published MoE run"
        return (
            f"{band.median_pct:.0f} % off at the median ({band.signed_pct:+.0f} % signed) "
            f"on {band.rows} published MoE runs"
        )

    def vendor_note(self, vendor: str) -> str:
        return (
            "other GPUs of its vendor were checked"
            if vendor in self.vendors
            else f"no run on any {vendor} GPU either, so its software stack's efficiency is unmeasured"
        )


@cache
def _time_accuracy_file() -> dict:
    return load_data_file(TIME_ACCURACY_PATH)


@cache
def time_accuracy() -> TimeAccuracy:
    raw = {key: value for key, value in _time_accuracy_file().items() if key != "classes"}
    return TimeAccuracy(
        **{
            **raw,
            "gpus": tuple(raw["gpus"]),
            "vendors": tuple(raw["vendors"]),
            "gpu_signed_pct": tuple(raw["gpu_signed_pct"].items()),
        }
    )


@cache
def time_bands() -> dict[str, TimeBand]:
    """Every class's band: training's from time_accuracy.yaml, generation's from serving_accuracy.yaml."""
    classes = {**_time_accuracy_file()["classes"], **load_data_file(SERVING_ACCURACY_PATH)["classes"]}
    return {kind: TimeBand(kind=kind, **values) for kind, values in classes.items()}


def time_class(plan: Plan) -> TimeClass:
    if plan.workload.task == "inference":
        return "generation"
    return "MoE training" if plan.model.num_experts else "dense training"


def likely_seconds(plan: Plan, seconds: float) -> tuple[float, float, TimeBand] | None:
    """What 8 in 10 published runs of the plan's class would have taken for the model's `seconds`: seconds × (1
    + the 10th and the 90th percentile of the signed error); None where no run of its class was measured."""
    band = time_bands().get(time_class(plan))
    if band is None:
        return None
    return seconds * (1 + band.low_pct / 100), seconds * (1 + band.high_pct / 100), band


def timed(plan: Plan) -> str:
    """What the plan's time is the time of."""
    return "one batch of generation" if plan.workload.task == "inference" else "one optimizer step"


def time_note(plan: Plan, seconds: float, what: str | None = None) -> str:
    """One line beside a time: how far runs of the plan's class have been off, as a range of `what` it times
    (by default what `timed` says)."""
    what = what or timed(plan)
    likely = likely_seconds(plan, seconds)
    if likely is None:
        return f"No published {time_class(plan)} run checks the time model."
    low, high, band = likely
    lean = "fast" if band.signed_pct > 0 else "slow"
    return (
        f"Against {band.rows} published {band.kind} runs, the time model was off by {band.median_pct:.1f} % "
        f"(median), leaning {lean} ({band.signed_pct:+.1f} %); 8 in 10 ran at {1 + band.low_pct / 100:.2f}–"
        f"{1 + band.high_pct / 100:.2f} × its time: {what} of {format_seconds(seconds)} is likely "
        f"{format_seconds(low)}–{format_seconds(high)}."
    )
