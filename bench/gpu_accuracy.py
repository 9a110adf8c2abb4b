"""Accuracy against the project's own GPU runs (bench/data/measured-gpu.csv, bench/data/measured-gpu-sources.md).

Each row is a plan of `bench/measure_gpu.py`'s grid run whole on one GPU: the plan itself is in the row
(`plan_yaml`), so nothing is mapped. The planner predicts it now and is compared on the three statistics the run
recorded (torch.cuda.max_memory_allocated → peak_allocated_bytes, max_memory_reserved → peak_reserved_bytes,
nvidia-smi's memory of the process → device_bytes), and, for the rows run one process at a time, on the time of
the second training step (the planner's step time on the catalog GPU of the run's device).

    python bench/gpu_accuracy.py                # tables
    python bench/gpu_accuracy.py --rows         # and every row
    python bench/gpu_accuracy.py --write-docs   # and the tables in docs/accuracy.md
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

import _path  # noqa: F401  (the checkout first on sys.path)

import doc_tables
import yaml
from stats import ALL, error_table, groups

from planner.catalog import load_catalog
from planner.memory import estimate
from planner.memory.runtime import RESERVE_FRACTION, churn_bytes
from planner.perf import plan_time
from planner.plan.codec import plan_from_dict
from planner.units import GiB

DATA = Path(__file__).resolve().parent / "data" / "measured-gpu.csv"
STATS = {"allocated": "peak_allocated_bytes", "reserved": "peak_reserved_bytes", "device": "device_bytes"}
# the catalog GPU each device name of a run is (torch.cuda.get_device_name)
DEVICES = {"NVIDIA H200": "h200-sxm-141gb", "NVIDIA H100 80GB HBM3": "h100-sxm-80gb"}


def kind(plan: dict) -> str:
    """The row's group: its workload and objective."""
    wl = plan["workload"]
    objective = wl.get("objective", "next_token")
    if wl["task"] == "inference":
        return "generate"
    if objective == "preference":
        return f"dpo ({wl['task']})"
    if objective == "reward":
        return "reward model"
    return "lora" if wl["task"] == "lora" else "full training"


def with_gpu(plan: dict, device: str) -> dict:
    return {**plan, "hardware": {**plan.get("hardware", {}), "gpu": DEVICES[device], "count": 1}}


def compare(row: dict) -> dict:
    """One run against the planner's prediction now: errors as (predicted − measured) / measured."""
    plan = with_gpu(yaml.safe_load(row["plan_yaml"]), row["device"])
    parsed = plan_from_dict(plan)
    catalog = load_catalog(None)
    est = estimate(parsed, catalog)
    out = {"name": row["name"], "kind": kind(plan), "gpu": row["device"], "plan": plan}
    for stat, key in STATS.items():
        measured = int(row[f"measured_{key}"])
        out[f"{stat}_gib"] = measured / GiB
        out[f"{stat}_predicted_gib"] = getattr(est, key) / GiB
        out[stat] = getattr(est, key) / measured - 1
    peak = max(est.stages[0].phases, key=lambda ph: ph.allocated_bytes)
    churn = churn_bytes(peak)
    reserve = int(row["measured_peak_reserved_bytes"]) - int(row["measured_peak_allocated_bytes"])
    out["reserve_fraction"] = reserve / churn if churn else None
    step = plan_time(parsed, catalog[DEVICES[row["device"]]]) if row["step_s"] else None
    if step is not None and row["children_at_once"] == "1":
        out |= {"step_s": float(row["step_s"]), "step_predicted_s": step.step_time_s}
        out["time"] = step.step_time_s / float(row["step_s"]) - 1
    return out


def run(path: Path = DATA) -> list[dict]:
    """Every configuration run to the end, once: its sequential run where it has one (the memory of a
    configuration is the same whether other processes ran beside it; the file shows both)."""
    rows: dict[str, dict] = {}
    for row in csv.DictReader(path.open()):
        if row["status"] == "ok" and (row["name"] not in rows or row["children_at_once"] == "1"):
            rows[row["name"]] = row
    return [compare(r) for r in rows.values()]


def not_run(path: Path = DATA) -> dict[str, list[str]]:
    """The grid's configurations that ran to no result, by reason."""
    rows = list(csv.DictReader(path.open()))
    done = {r["name"] for r in rows if r["status"] == "ok"}
    reasons: dict[str, list[str]] = {}
    for r in rows:
        if r["name"] not in done:
            reasons.setdefault(r["error"] or r["status"], []).append(r["name"])
    return {why: sorted(set(names)) for why, names in reasons.items()}


def print_rows(rows: list[dict]) -> None:
    print("| configuration | allocated GiB (predicted) | reserved GiB (predicted) | device GiB (predicted) | step s |")
    print("|---|---|---|---|---|")
    for r in rows:
        cells = [f"{r[f'{s}_gib']:.2f} ({r[f'{s}_predicted_gib']:.2f}, {r[s]:+.1%})" for s in STATS]
        step = f"{r['step_s']:.3f} ({r['step_predicted_s']:.3f}, {r['time']:+.0%})" if "time" in r else ""
        print(f"| {r['name']} | " + " | ".join(cells) + f" | {step} |")
    print()


def main() -> list[dict]:
    rows = run()
    devices = sorted({r["gpu"] for r in rows})
    print(f"{len(rows)} configurations run on {', '.join(devices)}: the planner's memory against the run's.")
    print()
    print(error_table(groups(rows, lambda r: r["kind"]), [(s, s, ALL) for s in STATS]))
    fractions = [r["reserve_fraction"] for r in rows if r["reserve_fraction"] is not None]
    q1, median, q3 = statistics.quantiles(fractions, n=4)
    print()
    print(
        f"The allocator's reserve (reserved − allocated) over the bytes that churn at the planner's peak, "
        f"{len(fractions)} runs: median {median:.3f}, quartiles {q1:.3f}–{q3:.3f}, max {max(fractions):.2f} (the "
        f"planner takes {RESERVE_FRACTION[False]:.2f}, the median of its trace replays)."
    )
    timed = [r for r in rows if "time" in r]
    print()
    print(f"{len(timed)} configurations run one process at a time: the planner's step time against the second step's.")
    print()
    print(error_table(groups(timed, lambda r: r["kind"]), [("step time", "time", ALL)]))
    for why, names in not_run().items():
        print(f"\nNot measured ({why}): {', '.join(names)}")
    return rows


if __name__ == "__main__":
    if "--rows" in sys.argv:
        print_rows(run())
    doc_tables.run(main)
