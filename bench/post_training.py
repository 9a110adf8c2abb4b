"""Post-training runs against published memory (bench/data/post-training.csv, sources in
bench/data/post-training-sources.md): DPO, SimPO, GRPO and distillation runs with their configuration.

Each row is mapped to a plan by the general rules in `express()` (no per-row values), or, where it names a
`config_file` (a framework's command line under bench/data/post-training/), by the planner's own reader of that
format, with the row's micro-batch, global batch and GPU laid over it. A row's `claim` says what was observed:
`measured` (a peak, GiB), `fits` (the run ran on its GPUs: the plan must fit) or `oom` (the run did not fit: the
plan must not). A measured row whose configuration the plan can say exactly is compared as accuracy.py compares
its rows; a row whose sequence length is only a cap on variable-length data is planned at the cap, an upper bound
of the run: its measurement must not exceed the plan, and an `oom` run must not fit at the cap either, while a
`fits` run that the plan at the cap does not fit is no contradiction (the run's sequences were shorter) and is
reported as such. Every other row is listed with the reason it cannot be expressed.

    python bench/post_training.py
"""

from __future__ import annotations

import csv
from pathlib import Path

import _path  # noqa: F401  (the checkout first on sys.path)

from planner.formats import overlay, read_config
from planner.memory import Estimate, estimate
from planner.plan.codec import plan_from_dict
from planner.units import GiB

DATA = Path(__file__).resolve().parent / "data" / "post-training.csv"
CONFIGS = DATA.parent / "post-training"  # the rows' command lines (config_file)
GPU = "h100-sxm-80gb"  # where a row states no GPU: its figures fit an 80 GiB card
# checkpoints planned with a preset of the same architecture (their config.json agree on every dimension)
SAME_ARCHITECTURE = {"qwen2-7b": "qwen2.5-7b", "qwen2.5-coder-14b": "qwen2.5-14b", "qwen2-72b": "qwen2.5-72b"}
ALL_LINEAR = ["q", "k", "v", "o", "gate", "up", "down"]
# a row's loss as the plan's objective block
OBJECTIVES = {"dpo": "preference", "simpo": "preference", "kto": "preference", "grpo": "grpo"}
CAP = "sequence length varies with the data"  # the reason a row is planned at its cap, as a bound


def preset(name: str) -> str:
    """A checkpoint's preset: its name lower-cased without the -Instruct suffix (the same architecture)."""
    base = name.lower().removesuffix("-instruct")
    return SAME_ARCHITECTURE.get(base, base)


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
        "hardware": {"gpu": row["gpu"] or GPU, "count": gpus},
    }


def express_config(row: dict) -> dict:
    """The plan the row's command line says, read by the planner's reader of its format, with the row's model
    preset, GPU, micro-batch per GPU and global batch (micro_batch × grad_accum × n_gpus) laid over it: the
    columns say what the command leaves to shell arithmetic or to keys the reader does not take (verl's global
    ppo_micro_batch_size)."""
    plan = read_config((CONFIGS / row["config_file"]).read_text()).plan
    mb = int(row["micro_batch"])
    over = {
        "model": {"preset": preset(row["model"])},
        "workload": {"micro_batch_size": mb, "global_batch_size": mb * int(row["grad_accum"]) * int(row["n_gpus"])},
        "hardware": {"gpu": row["gpu"] or GPU},
    }
    return overlay(plan, over)


def run(path: Path = DATA) -> tuple[list[dict], list[tuple[str, str]]]:
    """Rows compared (exactly, or as a bound at the cap, or as a fits / oom claim) and rows not expressible with
    their reason."""
    compared, skipped = [], []
    for row in csv.DictReader(path.open()):
        why = row["not_expressible"]
        if why and not (why.startswith(CAP) and row["length"] == "cap"):
            skipped.append((row["row_id"], why))
            continue
        compared.append(
            compare(row, estimate(plan_from_dict(express_config(row) if row["config_file"] else express(row))))
        )
    return compared, skipped


def compare(row: dict, est: Estimate) -> dict:
    """One row beside its plan's estimate: a measured peak against the plan's reserved peak (exact, or a bound at
    the cap), or a fits / oom claim against whether the plan fits its GPU."""
    claim, capped = row["claim"], bool(row["not_expressible"])
    out = {
        "row": row["row_id"],
        "workload": row["workload"],
        "model": row["model"],
        "config": f"{row['task']} s{row['seq_len']} b{row['micro_batch']} × {row['n_gpus']} ZeRO-{row['zero_stage']}",
        "kind": claim if claim != "measured" else "bound" if capped else "exact",
    }
    if claim == "measured":
        predicted, measured = est.peak_reserved_bytes / GiB, float(row["measured_gib"])
        return out | {
            "measured_gib": measured,
            "predicted_gib": predicted,
            "holds": predicted >= measured if capped else None,
            "error_pct": 100 * (predicted - measured) / measured,
        }
    # a claim: the GPU's usable memory beside the plan's device total
    return out | {
        "measured_gib": est.usable_bytes / GiB,
        "predicted_gib": est.device_bytes / GiB,
        "holds": est.fits if claim == "fits" else not est.fits,
        "capped": capped,
        "phase": est.phase,
        "error_pct": None,
    }


def verdict(r: dict) -> str:
    """The row's result in words."""
    if r["kind"] == "exact":
        return f"{r['error_pct']:+.1f} %"
    if r["kind"] == "bound":
        return "bound holds" if r["holds"] else "BOUND FAILS"
    if r["holds"]:
        return "plan fits" if r["kind"] == "fits" else "plan does not fit"
    if r["kind"] == "fits" and r["capped"]:
        return f"plan at the caps does not fit ({r['phase']})"
    return "CLAIM FAILS"


def table(rows: list[dict]) -> str:
    """Measured rows: the measured and planned peak reserved; fits / oom rows: the GPU's usable memory and the
    plan's device total."""
    lines = [
        "| row | workload | model | config | measured GiB (claims: GPU usable) | planner GiB | kind | error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['row']} | {r['workload']} | {r['model']} | {r['config']} | {r['measured_gib']:.1f} | "
            f"{r['predicted_gib']:.1f} | {r['kind']} | {verdict(r)} |"
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
    claims = [r for r in rows if r["kind"] in ("fits", "oom")]
    print(
        f"{len(claims)} fits / oom claims: {sum(r['holds'] for r in claims)} agree, "
        f"{sum(not r['holds'] and r['capped'] and r['kind'] == 'fits' for r in claims)} fits at the caps the plan "
        f"does not fit, {sum(not r['holds'] and not (r['capped'] and r['kind'] == 'fits') for r in claims)} fail"
    )
    print(f"{len(skipped)} rows not expressible:")
    for row_id, why in skipped:
        print(f"- {row_id}: {why}")


if __name__ == "__main__":
    main()
