"""The serving time model against published generation throughput at a fixed batch (bench/data/serving.csv).

Rows with a stated batch (gpt-fast's batch-1 table, TensorRT-LLM v0.6.1's static-batch table) become inference
plans by general rules (`plan_of`); the prediction is the model's generated tokens per second (per GPU or for
the server, as the row states). Rows of max-throughput runs with no fixed batch are listed, not compared.

    python bench/serving.py
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from accuracy import p90  # noqa: E402

from planner.catalog import load_catalog  # noqa: E402
from planner.codec import plan_from_dict  # noqa: E402
from planner.errors import PlanError  # noqa: E402
from planner.perf import throughput  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "serving.csv"
# the preset of each checkpoint family the rows name
PRESETS = {"Llama-2-7b": "llama-2-7b", "Llama-2-70b": "llama-2-70b", "Llama-3.1-8B": "llama-3.1-8b",
           "Llama-3.1-70B": "llama-3.1-70b", "Llama-3.1-405B": "llama-3.1-405b"}
# gpt-fast's generate.py generates 200 tokens unless told otherwise (its README does not say)
GPT_FAST_OUTPUT_TOKENS = 200


def _preset(hf_id: str) -> str | None:
    return next((p for key, p in PRESETS.items() if key.lower() in hf_id.lower()), None)


def plan_of(row: dict) -> dict:
    weights = row["weights_dtype"]
    compute = "fp8" if weights == "fp8" else "fp16" if weights == "fp16" else "bf16"  # int8/int4: weight-only
    output = int(row["output_tokens"]) if row["output_tokens"] else GPT_FAST_OUTPUT_TOKENS
    return {"name": row["id"], "model": {"preset": _preset(row["hf_model_id"])},
            "workload": {"task": "inference", "inference": {
                "batch_size": int(row["batch_size"]), "prompt_tokens": int(row["input_tokens"]),
                "output_tokens": output}},
            "precision": {"compute": compute, "weights": weights, "kv_cache": row["kv_cache_dtype"] or compute},
            "parallelism": {"tensor": int(row["tensor_parallel"])}, "hardware": {"gpu": row["gpu"]}}


def run() -> tuple[list[dict], list[tuple[str, str]]]:
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
        speed = throughput(plan, catalog[row["gpu"]])
        predicted = speed.output_tokens_per_second_per_gpu * (plan.parallelism.tensor if row["per"] == "server" else 1)
        measured = float(row["output_tokens_per_s"])
        rows.append({"row": row["id"], "engine": row["engine"], "model": row["model"], "gpu": row["gpu"],
                     "tensor": plan.parallelism.tensor, "weights": row["weights_dtype"],
                     "batch": plan.workload.inference.batch_size, "per": row["per"], "measured": measured,
                     "predicted": predicted, "error": predicted / measured - 1})
    return rows, skipped


def main() -> None:
    rows, skipped = run()
    print("| row | engine | model | GPU | TP | weights | batch | tokens/s per | measured | predicted | error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['row']} | {r['engine']} | {r['model']} | {r['gpu']} | {r['tensor']} | {r['weights']} | "
              f"{r['batch']} | {r['per']} | {r['measured']:,.1f} | {r['predicted']:,.1f} | {r['error']:+.0%} |")
    errors = [abs(r["error"]) for r in rows]
    print(f"\nall: {len(rows)} rows, median |error| {statistics.median(errors):.1%}, p90 {p90(errors):.1%}, "
          f"signed median {statistics.median(r['error'] for r in rows):+.1%}")
    for engine in sorted({r["engine"] for r in rows}):
        errors = sorted(abs(r["error"]) for r in rows if r["engine"] == engine)
        signed = statistics.median(r["error"] for r in rows if r["engine"] == engine)
        print(f"\n{engine}: {len(errors)} rows, median |error| {statistics.median(errors):.1%}, max {errors[-1]:.1%}, "
              f"signed median {signed:+.1%}")
    print()
    for row, why in skipped:
        print(f"skipped {row}: {why}")


if __name__ == "__main__":
    main()
