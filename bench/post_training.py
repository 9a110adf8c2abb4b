"""Post-training runs against published memory (bench/data/post-training.csv, sources in
bench/data/post-training-sources.md): DPO, SimPO, GRPO and distillation runs with their configuration.

Each row is mapped to a plan by the general rules in `express()` (no per-row values). A row whose configuration
the plan can say exactly is compared as accuracy.py compares its rows; a row whose sequence length is only a cap
on variable-length data is planned at the cap, an upper bound its measurement must not exceed; every other row is
listed with the reason it cannot be expressed.

    python bench/post_training.py
"""

from __future__ import annotations

import csv
from pathlib import Path

import _path  # noqa: F401  (the checkout first on sys.path)

from planner.memory import estimate
from planner.plan.codec import plan_from_dict
from planner.units import GiB

DATA = Path(__file__).resolve().parent / "data" / "post-training.csv"
ALL_LINEAR = ["q", "k", "v", "o", "gate", "up", "down"]
# a row's loss as the plan's objective block
OBJECTIVES = {"dpo": "preference", "simpo": "preference", "kto": "preference", "grpo": "grpo"}
CAP = "sequence length varies with the data"  # the reason a row is planned at its cap, as a bound


def preset(name: str) -> str:
    """A checkpoint's preset: its name lower-cased without the -Instruct suffix (the same architecture)."""
    return name.lower().removesuffix("-instruct")


def _objective(row: dict) -> dict:
    """The workload keys of the row's post-training objective."""
    kind = row["workload"]
    if kind == "distillation":
        return {"objective": "distillation", "distillation": {"teacher": preset(row["teacher"])}}
    if kind == "grpo":
        rl = {"completion_length": int(row["completion_len"]), "num_generations": int(row["num_generations"])}
        return {"objective": "grpo", "rl": rl}
    return {"objective": OBJECTIVES[kind], "preference": {"loss_type": row["loss_type"]}}


def express(row: dict) -> dict:
    """The plan the row's configuration says (TRL on the HF Trainer: framework hf_trainer)."""
    gpus, mb = int(row["n_gpus"]), int(row["micro_batch"])
    wl = {
        "task": row["task"],
        "sequence_length": int(row["seq_len"]),
        "micro_batch_size": mb,
        "global_batch_size": mb * int(row["grad_accum"]) * gpus,
        **_objective(row),
    }
    if row["lora_rank"]:
        wl["lora"] = {"rank": int(row["lora_rank"]), "targets": ALL_LINEAR}
    return {
        "framework": "hf_trainer",
        "model": {"preset": preset(row["model"])},
        "workload": wl,
        "techniques": {"activation_checkpointing": "full" if row["grad_ckpt"] == "yes" else "none"},
        "parallelism": {"data": gpus, "zero_stage": int(row["zero_stage"])},
        "hardware": {"gpu": "h100-sxm-80gb", "count": gpus},
    }


def run(path: Path = DATA) -> tuple[list[dict], list[tuple[str, str]]]:
    """Rows compared (exactly, or as a bound at the cap) and rows not expressible with their reason."""
    compared, skipped = [], []
    for row in csv.DictReader(path.open()):
        why = row["not_expressible"]
        if why and not (why.startswith(CAP) and row["length"] == "cap"):
            skipped.append((row["row_id"], why))
            continue
        predicted = estimate(plan_from_dict(express(row))).peak_reserved_bytes / GiB
        measured = float(row["measured_gib"])
        compared.append(
            {
                "row": row["row_id"],
                "workload": row["workload"],
                "model": row["model"],
                "config": f"{row['task']} s{row['seq_len']} b{row['micro_batch']} × {row['n_gpus']} "
                f"ZeRO-{row['zero_stage']}",
                "measured_gib": measured,
                "predicted_gib": predicted,
                "kind": "bound" if why else "exact",
                "holds": predicted >= measured if why else None,
                "error_pct": 100 * (predicted - measured) / measured,
            }
        )
    return compared, skipped


def table(rows: list[dict]) -> str:
    lines = [
        "| row | workload | model | config | measured GiB | planner GiB | kind | error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        error = f"{r['error_pct']:+.1f} %" if r["kind"] == "exact" else ("bound holds" if r["holds"] else "BOUND FAILS")
        lines.append(
            f"| {r['row']} | {r['workload']} | {r['model']} | {r['config']} | {r['measured_gib']:.1f} | "
            f"{r['predicted_gib']:.1f} | {r['kind']} | {error} |"
        )
    return "\n".join(lines)


def main() -> None:
    rows, skipped = run()
    print(table(rows))
    exact = [abs(r["error_pct"]) for r in rows if r["kind"] == "exact"]
    print(
        f"\n{len(exact)} rows compared exactly"
        + (f", median abs error {sorted(exact)[len(exact) // 2]:.1f} %" if exact else "")
    )
    print(f"{len(skipped)} rows not expressible:")
    for row_id, why in skipped:
        print(f"- {row_id}: {why}")


if __name__ == "__main__":
    main()
