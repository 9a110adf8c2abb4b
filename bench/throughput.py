"""The time model against published measured training throughput (bench/data/throughput.csv).

Every row is mapped to a plan by the general rules in `plan_of()`: the architecture from the row's columns,
the parallelism and batch as published, no per-row values. A row the plan format cannot describe yet is listed
with the reason. The prediction is the step-time model's tokens per second per GPU; MFU is shown beside.

    python bench/throughput.py          # table, then the errors' statistics by source, GPU and dense/MoE
    python bench/throughput.py --write  # and planner/data/time_accuracy.yaml, the figures the recommender states
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

import _path  # noqa: F401  (the checkout first on sys.path)

import doc_tables
import yaml
from stats import ALL, band, error_table, groups, p90, pct

from planner.accuracy import TIME_ACCURACY_PATH
from planner.catalog import load_catalog
from planner.errors import PlanError
from planner.perf import flops_per_token, model_flops_per_token, peak_flops, step_time
from planner.plan.codec import plan_from_dict

DATA = Path(__file__).resolve().parent / "data" / "throughput.csv"
# The peers' time models on the same plans:
# - "40 % MFU": model FLOPs (6N + attention) at 40 % of the dense peak, the planner's model before its step-time
#   model (and the rule of thumb people use);
# - llm-analysis (cli-ai-lab/llm-analysis, analysis.py): a layer's compute latency is its FLOPs (recomputation
#   included) at the peak × flops_efficiency, default 0.5; communication is left out here (it adds TP
#   collectives only, and the rows' DP/FSDP collectives are overlapped in its model).
PEER_MFU = 0.40
LLM_ANALYSIS_FLOPS_EFFICIENCY = 0.5
# Sources whose stacks run tensor parallelism with sequence parallelism (Megatron-Core and NeMo recipes).
MEGATRON_SOURCES = ("megatron", "nemo2407", "mbridge")


def _int(row: dict, key: str, default: int) -> int:
    return int(row[key]) if row[key].strip() else default


def model_of(row: dict) -> dict:
    """The architecture from the row's columns; the notes say GeLU (MPT, GPT: LayerNorm, 4 × hidden MLP) and
    tied embeddings where the model has them; otherwise a Llama-style SwiGLU/RMSNorm model."""
    notes = row["notes"].lower()
    gelu = "gelu" in notes or row["model"].upper().startswith(("GPT-", "GPT3", "MPT"))
    model = {
        "num_layers": int(row["num_layers"]),
        "hidden_size": int(row["hidden_size"]),
        "num_attention_heads": int(row["num_attention_heads"]),
        "num_kv_heads": _int(row, "num_kv_heads", int(row["num_attention_heads"])),
        "intermediate_size": int(row["intermediate_size"]),
        "vocab_size": int(row["vocab_size"]),
        "mlp": "gelu" if gelu else "swiglu",
        "norm": "layernorm" if gelu else "rmsnorm",
        "tie_embeddings": "tied emb" in notes,
    }
    experts = _int(row, "num_experts", 0)
    if experts:
        model |= {
            "num_experts": experts,
            "experts_per_token": int(row["experts_per_token"]),
            "moe_intermediate_size": int(row["intermediate_size"]),
        }
    return model


def plan_of(row: dict) -> dict:
    tp, pp, vp = _int(row, "tensor", 1), _int(row, "pipeline", 1), _int(row, "virtual_stages", 1)
    parallelism = {
        "data": _int(row, "data", 1),
        "tensor": tp,
        "pipeline": pp,
        "context": _int(row, "context", 1),
        "expert": _int(row, "expert", 1),
        "zero_stage": _int(row, "zero_stage", 0),
        "sequence_parallel": tp > 1 and row["source_id"] in MEGATRON_SOURCES,
    }
    if vp > 1:
        parallelism |= {"pipeline_schedule": "interleaved_1f1b", "virtual_stages": vp}
    precision = {"compute": row["precision"]}
    if row["fp8_recipe"].strip():
        precision |= {"fp8_recipe": row["fp8_recipe"], "fp8_all_gather": row["fp8_all_gather"] == "true"}
    plan = {
        "name": row["id"],
        "model": model_of(row),
        "workload": {
            "sequence_length": int(row["sequence_length"]),
            "micro_batch_size": _int(row, "micro_batch_size", 1),
            "global_batch_size": int(row["global_batch_size"]),
        },
        "precision": precision,
        "techniques": {
            "activation_checkpointing": row["activation_checkpointing"].strip() or "none",
            "compile": row["compile"] == "true",
        },
        "parallelism": parallelism,
        "hardware": {"gpu": row["gpu"]},
    }
    return plan | {"framework": row["plan_framework"]} if row["plan_framework"].strip() else plan


def run() -> tuple[list[dict], list[tuple[str, str]]]:
    catalog = load_catalog()
    rows, skipped = [], []
    for row in csv.DictReader(DATA.open()):
        if row["gpu"] not in catalog:
            skipped.append((row["id"], f"GPU {row['gpu']!r} is not in the catalog"))
            continue
        try:
            plan = plan_from_dict(plan_of(row))
        except PlanError as exc:
            skipped.append((row["id"], str(exc)))
            continue
        gpu = catalog[plan.hardware.gpu]
        step = step_time(plan, gpu)
        measured = float(row["tokens_per_s_per_gpu"])
        peak = peak_flops(gpu, plan.precision.compute)
        rows.append(
            {
                "row": row["id"],
                "source": row["source_id"],
                "model": row["model"],
                "gpu": row["gpu"],
                "vendor": gpu.vendor,
                "moe": bool(plan.model.num_experts),
                "gpus": int(row["num_gpus"]),
                "precision": row["precision"],
                "sequence_length": int(row["sequence_length"]),
                "measured": measured,
                "predicted": step.tokens_per_s_per_gpu,
                "error": step.tokens_per_s_per_gpu / measured - 1,
                "mfu_measured": row["mfu"],
                "mfu_predicted": step.mfu,
                "bound": step.bound,
                "rule40": peak * PEER_MFU / model_flops_per_token(plan) / measured - 1,
                "llm_analysis": peak * LLM_ANALYSIS_FLOPS_EFFICIENCY / flops_per_token(plan) / measured - 1,
            }
        )
    return rows, skipped


def table(rows: list[dict]) -> str:
    """The errors' statistics, the planner's beside its peers', over every row, per source, per GPU type and
    for dense and MoE rows."""
    grouped = groups(
        rows,
        lambda r: f"source {r['source']}",
        lambda r: f"GPU {r['gpu']}",
        lambda r: "MoE rows" if r["moe"] else "dense rows",
    )
    return error_table(
        grouped, [("planner", "error", ALL), ("40 % MFU", "rule40", ALL), ("llm-analysis", "llm_analysis", ("median",))]
    )


def relative_speeds(rows: list[dict]) -> list[dict]:
    """Pairs of rows of the same model, sequence and dtype on two GPU types: the measured speed ratio against the
    predicted one (the question a buyer asks: how much faster is this GPU on my job?)."""
    pairs = []
    for a in rows:
        for b in rows:
            same = all(a[k] == b[k] for k in ("model", "sequence_length", "precision"))
            if same and a["gpu"] < b["gpu"]:
                pairs.append(
                    {
                        "model": a["model"],
                        "sequence_length": a["sequence_length"],
                        "gpus": (a["gpu"], b["gpu"]),
                        "measured": a["measured"] / b["measured"],
                        "predicted": a["predicted"] / b["predicted"],
                    }
                )
    return pairs


def main() -> list[dict]:
    rows, skipped = run()
    print(
        "| row | source | model | GPU | GPUs | dtype | measured tok/s/GPU | predicted | error | MFU published "
        "| MFU predicted | bound | 40 % MFU error | llm-analysis error |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['row']} | {r['source']} | {r['model']} | {r['gpu']} | {r['gpus']} | {r['precision']} | "
            f"{r['measured']:,.0f} | {r['predicted']:,.0f} | {r['error']:+.0%} | {r['mfu_measured'] or '—'} | "
            f"{r['mfu_predicted']:.2f} | {r['bound']} | {r['rule40']:+.0%} | {r['llm_analysis']:+.0%} |"
        )
    print()
    print(table(rows))
    print()
    for row, why in skipped:
        print(f"skipped {row}: {why}")
    pairs = relative_speeds(rows)
    print()
    print("| model | sequence | GPU A / GPU B | measured speed ratio | predicted | error |")
    print("|---|---|---|---|---|---|")
    for p in pairs:
        print(
            f"| {p['model']} | {p['sequence_length']:,} | {p['gpus'][0]} / {p['gpus'][1]} | {p['measured']:.2f} | "
            f"{p['predicted']:.2f} | {p['predicted'] / p['measured'] - 1:+.0%} |"
        )
    errors = sorted(abs(p["predicted"] / p["measured"] - 1) for p in pairs)
    if errors:
        print(
            f"\n{len(pairs)} GPU pairs: median |error| of the speed ratio {statistics.median(errors):.1%}, "
            f"max {errors[-1]:.1%}"
        )
    return rows


def time_accuracy(rows: list[dict]) -> dict:
    """What planner/data/time_accuracy.yaml holds: the errors over every row, of the GPU pairs, and per class of
    run (dense and MoE training: bench/stats.py's band); each GPU's median signed error on its dense rows."""
    errors, pairs = [abs(r["error"]) for r in rows], relative_speeds(rows)
    classes = {
        kind: [r["error"] for r in rows if r["moe"] == moe]
        for kind, moe in (("dense training", False), ("MoE training", True))
    }
    return {
        "rows": len(rows),
        "median_pct": pct(statistics.median(errors)),
        "p90_pct": pct(p90(errors)),
        "signed_pct": pct(statistics.median(r["error"] for r in rows)),
        "pairs": len(pairs),
        "pair_median_pct": pct(statistics.median(abs(p["predicted"] / p["measured"] - 1) for p in pairs)),
        "gpus": sorted({r["gpu"] for r in rows}),
        "vendors": sorted({r["vendor"] for r in rows}),
        "gpu_signed_pct": {
            gpu: pct(statistics.median(r["error"] for r in rows if r["gpu"] == gpu and not r["moe"]))
            for gpu in sorted({r["gpu"] for r in rows if not r["moe"]})
        },
        "classes": {kind: band(e) for kind, e in classes.items() if e},
    }


def write_time_accuracy(rows: list[dict]) -> None:
    header = (
        "# Written by `python bench/throughput.py --write` from bench/data/throughput.csv: how far the step-time\n"
        "# model's training tokens/s per GPU has been off (predicted / measured - 1, in percent), over every\n"
        "# row, on the speed ratio of two GPU types running the same job, and per class of run; the GPUs and\n"
        "# vendors some published run measured. planner/accuracy.py reads it.\n"
    )
    TIME_ACCURACY_PATH.write_text(header + yaml.safe_dump(time_accuracy(rows), sort_keys=False))


if __name__ == "__main__":
    measured = doc_tables.run(main)
    if "--write" in sys.argv:
        write_time_accuracy(measured)
