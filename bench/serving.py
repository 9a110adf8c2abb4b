"""The serving time model against published generation throughput at a fixed batch (bench/data/serving.csv).

Rows with a stated batch (gpt-fast's batch-1 table, TensorRT-LLM v0.6.1's static-batch table) become inference
plans by general rules (`plan_of`); the prediction is the model's generated tokens per second (per GPU or for
the server, as the row states). Rows of max-throughput runs with no fixed batch are listed, not compared.
Beside it, the peer rule (`roofline`): decode as a pure weight-bandwidth roofline.

    python bench/serving.py          # table, then the errors' statistics by source, engine, GPU and dense/MoE
    python bench/serving.py --write  # and planner/data/serving_accuracy.yaml, the band the serving time states
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import _path  # noqa: F401  (the checkout first on sys.path)

import doc_tables
import yaml
from stats import ALL, band, error_table, groups

from planner.accuracy import SERVING_ACCURACY_PATH
from planner.catalog import Gpu, load_catalog
from planner.errors import PlanError
from planner.memory.inference import kv_cache_bytes, weight_bytes
from planner.perf import throughput
from planner.plan.codec import plan_from_dict
from planner.plan.config import Plan

DATA = Path(__file__).resolve().parent / "data" / "serving.csv"
# the preset of each checkpoint family the rows name
PRESETS = {
    "Llama-2-7b": "llama-2-7b",
    "Llama-2-70b": "llama-2-70b",
    "Llama-3.1-8B": "llama-3.1-8b",
    "Llama-3.1-70B": "llama-3.1-70b",
    "Llama-3.1-405B": "llama-3.1-405b",
}
# gpt-fast's generate.py generates 200 tokens unless told otherwise (its README does not say)
GPT_FAST_OUTPUT_TOKENS = 200
# The peer rule, the rule of thumb for generation speed: every decode step reads each GPU's weights and each
# sequence's KV cache (at the mean decode length) once, at this fraction of the datasheet HBM bandwidth; prefill,
# matmul time and communication are left out.
ROOFLINE_BANDWIDTH_FRACTION = 0.8


def _preset(hf_id: str) -> str | None:
    return next((p for key, p in PRESETS.items() if key.lower() in hf_id.lower()), None)


def plan_of(row: dict) -> dict:
    weights = row["weights_dtype"]
    compute = "fp8" if weights == "fp8" else "fp16" if weights == "fp16" else "bf16"  # int8/int4: weight-only
    output = int(row["output_tokens"]) if row["output_tokens"] else GPT_FAST_OUTPUT_TOKENS
    return {
        "name": row["id"],
        "model": {"preset": _preset(row["hf_model_id"])},
        "workload": {
            "task": "inference",
            "inference": {
                "batch_size": int(row["batch_size"]),
                "prompt_tokens": int(row["input_tokens"]),
                "output_tokens": output,
            },
        },
        "precision": {"compute": compute, "weights": weights, "kv_cache": row["kv_cache_dtype"] or compute},
        "parallelism": {"tensor": int(row["tensor_parallel"])},
        "hardware": {"gpu": row["gpu"]},
    }


def roofline(plan: Plan, gpu: Gpu) -> float:
    """The peer rule's generated tokens per second per GPU: a replica's batch of tokens per decode step, the step
    reading each GPU's share of the weights and of the cache in parallel."""
    inf = plan.workload.inference
    mean_context = inf.prompt_tokens + inf.output_tokens // 2
    step_bytes = weight_bytes(plan)[0] + inf.batch_size * kv_cache_bytes(plan, mean_context)
    bandwidth = ROOFLINE_BANDWIDTH_FRACTION * gpu.memory_bandwidth_tb_per_s * 1e12
    return inf.batch_size * bandwidth / step_bytes / plan.parallelism.tensor


def run(peer: bool = False) -> tuple[list[dict], list[tuple[str, str]]]:
    """The compared rows and the skipped ones with why; with `peer`, each row also has its source, whether the
    model is MoE and the peer rule's error (tests/snapshot.py records the rows without them)."""
    catalog = load_catalog()
    rows, skipped = [], []
    for row in csv.DictReader(DATA.open()):
        if not row["batch_size"]:
            skipped.append((row["id"], "a max-throughput run: no fixed batch"))
            continue
        if _preset(row["hf_model_id"]) is None or row["gpu"] not in catalog:
            skipped.append((row["id"], f"no preset or GPU for {row['hf_model_id']} on {row['gpu']}"))
            continue
        try:
            plan = plan_from_dict(plan_of(row))
        except PlanError as exc:
            skipped.append((row["id"], str(exc)))
            continue
        gpu = catalog[row["gpu"]]
        gpus = plan.parallelism.tensor if row["per"] == "server" else 1  # the GPUs the row's figure is for
        predicted = throughput(plan, gpu).output_tokens_per_second_per_gpu * gpus
        measured = float(row["output_tokens_per_s"])
        rows.append(
            {
                "row": row["id"],
                "engine": row["engine"],
                "model": row["model"],
                "gpu": row["gpu"],
                "tensor": plan.parallelism.tensor,
                "weights": row["weights_dtype"],
                "batch": plan.workload.inference.batch_size,
                "per": row["per"],
                "measured": measured,
                "predicted": predicted,
                "error": predicted / measured - 1,
            }
        )
        if peer:
            rows[-1] |= {
                "source": row["source_id"],
                "moe": bool(plan.model.num_experts),
                "roofline": roofline(plan, gpu) * gpus / measured - 1,
            }
    return rows, skipped


def table(rows: list[dict]) -> str:
    """The errors' statistics, the planner's beside the peer rule's, over every row, per source, per engine, per
    GPU type and for dense and MoE rows."""
    grouped = groups(
        rows,
        lambda r: f"source {r['source']}",
        lambda r: f"engine {r['engine']}",
        lambda r: f"GPU {r['gpu']}",
        lambda r: "MoE rows" if r["moe"] else "dense rows",
    )
    return error_table(grouped, [("planner", "error", ALL), ("bandwidth roofline", "roofline", ALL)])


def serving_accuracy(rows: list[dict]) -> dict:
    """What planner/data/serving_accuracy.yaml holds: the band of the generation rows' errors."""
    return {"classes": {"generation": band([r["error"] for r in rows])}}


def write_serving_accuracy(rows: list[dict]) -> None:
    header = (
        "# Written by `python bench/serving.py --write` from bench/data/serving.csv: how far the serving time\n"
        "# model's generated tokens/s has been off (predicted / measured - 1, in percent) over the fixed-batch\n"
        "# rows. planner/accuracy.py reads it.\n"
    )
    SERVING_ACCURACY_PATH.write_text(header + yaml.safe_dump(serving_accuracy(rows), sort_keys=False))


def main() -> list[dict]:
    rows, skipped = run(peer=True)
    print(
        "| row | engine | model | GPU | TP | weights | batch | tokens/s per | measured | predicted | error "
        "| bandwidth roofline error |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['row']} | {r['engine']} | {r['model']} | {r['gpu']} | {r['tensor']} | {r['weights']} | "
            f"{r['batch']} | {r['per']} | {r['measured']:,.1f} | {r['predicted']:,.1f} | {r['error']:+.0%} | "
            f"{r['roofline']:+.0%} |"
        )
    print()
    print(table(rows))
    print()
    for row, why in skipped:
        print(f"skipped {row}: {why}")
    return rows


if __name__ == "__main__":
    measured = doc_tables.run(main)
    if "--write" in sys.argv:
        write_serving_accuracy(measured)
