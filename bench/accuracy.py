"""Accuracy against published measured peak memory (bench/data/measured-dev.csv).

Every row is mapped to a plan by the general rules in `express()`: no per-row values. A row the plan format
cannot describe yet is listed with the reason. Each prediction is compared with the statistic the row
measured: max_memory_allocated → peak_allocated_bytes, max_memory_reserved → peak_reserved_bytes,
nvidia-smi → device_bytes.

    python bench/accuracy.py            # table, then median and p90 absolute error
    python bench/accuracy.py --write    # and planner/data/accuracy.yaml, the per-class figures the app shows
"""

from __future__ import annotations

import csv
import re
import statistics
import sys
from pathlib import Path

import _path  # noqa: F401  (the checkout first on sys.path)

import doc_tables
import yaml
from stats import ALL, error_table, groups, p90

from planner.accuracy import ACCURACY_PATH, workload_class
from planner.memory import estimate
from planner.plan.codec import plan_from_dict
from planner.units import GiB

DATA = Path(__file__).resolve().parent / "data" / "measured-dev.csv"

# (substring in a column, reason) — checked in order; the first match makes the row inexpressible.
NOT_YET = [
    ("task", "adapter", "LLaMA-Adapter (prefix adapters) is not a LoRA variant the plan describes"),
    ("task", "weights-only", "a weights-only load is not a training step"),
    ("arch_family", "bert", "encoder with a classification head: the plan describes decoder-only LMs"),
    ("arch_family", "t5", "encoder-decoder: the plan describes decoder-only LMs"),
    ("optimizer", "unclear", "optimizer not stated by the source"),
    ("seq_len", "variable", "sequence length varies with the data (unpacked dataset)"),
    ("act_ckpt", "unclear", "activation checkpointing not stated by the source"),
]


def statistic(row: dict) -> str | None:
    metric = row["measured_metric"].lower()
    if "nvidia-smi" in metric:
        return "device"
    if "reserved" in metric:
        return "reserved"
    if "allocated" in metric or "peak mem" in metric:
        return "allocated"
    return None


def _first_int(text: str) -> int:
    return int(re.match(r"\s*~?(\d+)", text).group(1))


def _lora(config: str) -> dict:
    """LoRA settings from a row's peft_config text, e.g. 'LoRA r=8 alpha=16 dropout 0.05 on q,v only'."""
    rank = int(re.search(r"r=(\d+)", config).group(1))
    alpha = float(re.search(r"alpha=(\d+)", config).group(1))
    dropout = re.search(r"dropout ([\d.]+)", config)
    if "all-linear" in config or "MLP" in config:
        targets = ["q", "k", "v", "o", "gate", "up", "down"]
    else:
        named = re.search(r" on ([a-z_,]+)", config).group(1).split(",")
        targets = [{"output_proj": "o"}.get(t, t) for t in named]
    return {"rank": rank, "alpha": alpha, "targets": targets, "dropout": float(dropout.group(1)) if dropout else 0.0}


def framework(row: dict) -> str:
    """The plan's framework for the stack a row names (lit-gpt and bare scripts: generic)."""
    stack, sharding = row["framework"].lower(), row["fsdp_or_zero"].lower()
    if "gpt-fast" in stack:
        return "gpt_fast"
    if "torchtitan" in stack or "torchtune" in stack:
        return "torchtitan" if "torchtitan" in stack else "torchtune"
    if "hf trainer" in stack or "accelerate" in stack:
        return "deepspeed" if "deepspeed" in sharding else "accelerate_fsdp" if "fsdp" in sharding else "hf_trainer"
    return "generic"


def _served_weights(quant: str) -> dict:
    """precision keys of a served model's quantization text (weight-only or dynamic: the weights' dtype; the
    activations' dynamic quantization is transient)."""
    keys: dict = {}
    if "nf4" in quant:
        keys |= {"weights": "nf4", "double_quant": "dq" in quant}
    for needle, dtype in (
        ("int8 weight", "int8"),
        ("int8 dynamic", "int8"),
        ("int4 weight", "int4"),
        ("float8 weight", "fp8"),
        ("float8 dynamic", "fp8"),
    ):
        if needle in quant:
            keys["weights"] = dtype
    group = re.search(r"group (\d+)", quant)
    if group:
        keys["quant_group_size"] = int(group.group(1))
    if "int8 kv cache" in quant:
        keys["kv_cache"] = "int8"
    return keys


def _dtype(text: str) -> str:
    text = text.lower()
    return next(d for d in ("bf16", "fp16", "fp32") if d in text)


def express(row: dict) -> tuple[dict | None, str]:
    """The plan dict for a measured row, or None and why it cannot be expressed yet."""
    for column, needle, why in NOT_YET:
        if needle in row[column].lower():
            return None, why
    if "lit-gpt" in row["framework"].lower() and "fsdp" in row["fsdp_or_zero"].lower():
        return None, (
            "lit-gpt's FSDP runs (Fabric at 8641822) materialize the whole model on every rank before "
            "sharding it: their peak (above the unsharded weights on 4 ranks) is that load, not a step"
        )
    if statistic(row) is None:
        return None, f"statistic not known ({row['measured_metric']})"
    family = row["arch_family"].lower()
    model = {
        "num_layers": int(row["n_layers"]),
        "hidden_size": int(row["hidden"]),
        "num_attention_heads": int(row["n_heads"]),
        "num_kv_heads": int(row["n_kv_heads"]),
        "intermediate_size": int(row["ffn_dim"]),
        "vocab_size": int(row["vocab"]),
        "tie_embeddings": row["tied_embeddings"] == "yes",
    }
    if "neox" in family or "gelu" in family:
        # the activation a `vram-planner measure` row names; else one fused GeLU kernel: HF GPT-NeoX (config
        # hidden_act gelu), lit-gpt's GptNeoxMLP (F.gelu, its Pythia, StableLM, Phi and Falcon)
        activation = "gelu_new" if "activation gelu_new" in family else "gelu"
        model.update(mlp="gelu", activation=activation, norm="layernorm", bias="falcon" not in family)
    quant = row["quantization"].lower()
    training = not row["task"].lower().startswith("inference")
    compute = "fp8" if "float8" in quant and training else _dtype(row["compute_dtype"])  # torchao float8 linears
    master = "fp32" if "fp32" in row["master_weights"].lower() else "none"
    opt_text = row["optimizer"].lower()
    paged, eight_bit = "paged" in opt_text, "8bit" in opt_text
    optimizer = (
        "sgd"
        if "no adam state" in opt_text
        else "paged_adamw_8bit"
        if paged and eight_bit
        else "paged_adamw"
        if paged
        else "adamw_8bit"
        if eight_bit
        else "adamw"
    )
    task = row["task"].lower()
    workload = {
        "task": "pretrain",
        "sequence_length": _first_int(row["seq_len"]),
        "micro_batch_size": _first_int(row["micro_batch"]),
    }
    precision = {"compute": compute, "master_weights": master, "optimizer": optimizer}
    if "fused" in opt_text:
        precision["optimizer_impl"] = "fused"
    if compute == "fp8":
        precision["fp8_recipe"] = "rowwise" if "rowwise" in quant else "tensorwise"
    if task.startswith("inference"):
        prompt, new = (int(x) for x in re.search(r"(\d+) prompt \+ (\d+) new", row["seq_len"]).groups())
        workload = {
            "task": "inference",
            "inference": {"batch_size": _first_int(row["micro_batch"]), "prompt_tokens": prompt, "output_tokens": new},
        }
        if "linear mask" in row["attention_impl"].lower():  # torchao --linear_causal_mask
            workload["inference"]["mask_buffer"] = False
        precision.update(_served_weights(quant))
        if "dynamic activation" in quant:  # torchao int8dq / float8dq: the matmuls run in int8 / float8
            workload["inference"]["dynamic_activation_quant"] = True
    if task in ("lora", "qlora"):
        workload.update(task=task, lora=_lora(row["peft_config"]))
        if task == "qlora":
            precision.update(weights="nf4", double_quant="dq" in quant or "double" in quant)
        elif row["param_dtype"].lower().startswith("fp32"):  # a frozen base loaded in fp32 stays fp32
            precision["weights"] = "fp32"
    ckpt = (row["act_ckpt"].split() or ["none"])[0].lower()
    ckpt = "selective_op" if "op-level" in row["act_ckpt"].lower() else ckpt
    offload = (
        "optimizer_and_params" if ("cpu" in row["offload"].lower() or "offload" in row["offload"].lower()) else "none"
    )
    sharding = row["fsdp_or_zero"].lower().replace("_", " ")
    zero = 3 if ("full shard" in sharding or "zero-3" in sharding or "zero3" in sharding) else 0
    plan = {
        "name": row["row_id"],
        "model": model,
        "workload": workload,
        "precision": precision,
        "framework": framework(row),
        "techniques": {
            "activation_checkpointing": ckpt if ckpt in ("none", "full", "selective", "selective_op") else "none",
            "attention": "eager" if "eager" in row["attention_impl"].lower() else "flash",
            "offload": offload,
            "compile": row["compile"].lower() == "yes",
            "optimizer_in_backward": "optimizer_in_bwd=true" in opt_text.replace(" ", ""),
            "loss": "chunked" if "chunked" in row["loss_impl"].lower() else "full",
        },
        "parallelism": {
            "data": int(row["dp_shard"]) * int(row["dp_replicate"]),
            "zero_stage": zero,
            # FSDP1 with use_orig_params: frozen and trainable weights share each block's flat parameter
            "flat_params": "fsdp1" in sharding
            and "use_orig_params=false" not in row["fsdp_or_zero"].lower().replace(" ", "")
            and task in ("lora", "qlora")
            and zero == 3,
            "tensor": int(row["tp"]),
            "pipeline": int(row["pp"]),
            "context": int(row["cp"]),
        },
    }
    return plan, ""


def summaries(rows: list[dict]) -> list[dict]:
    """Median and p90 |error| and the signed median per workload class × statistic, and overall."""
    groups: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        for key in ((r["workload"], r["stat"]), ("all", "all")):
            groups.setdefault(key, []).append(r["error_pct"])
    order = sorted(groups.items(), key=lambda g: (g[0][0] == "all", g[0]))  # the overall line last
    return [
        {
            "workload": w,
            "stat": st,
            "rows": len(e),
            "median": statistics.median(abs(x) for x in e),
            "p90": p90([abs(x) for x in e]),
            "signed": statistics.median(e),
        }
        for (w, st), e in order
    ]


def predict(plan_dict: dict, stat: str) -> int:
    est = estimate(plan_from_dict(plan_dict))
    return {"allocated": est.peak_allocated_bytes, "reserved": est.peak_reserved_bytes, "device": est.device_bytes}[
        stat
    ]


def run(path: Path = DATA) -> tuple[list[dict], list[tuple[str, str]]]:
    rows, skipped = [], []
    for row in csv.DictReader(path.open()):
        plan, why = express(row)
        if plan is None:
            skipped.append((row["row_id"], why))
            continue
        stat = statistic(row)
        measured = float(row["measured_gib"])
        predicted = predict(plan, stat) / GiB
        rows.append(
            {
                "row": row["row_id"],
                "source": row["source_id"],
                "model": row["model"],
                "quality": row["quality"],
                "stat": stat,
                "framework": plan["framework"],
                "workload": workload_class(plan["workload"]["task"]),
                "config": f"s{row['seq_len']} b{row['micro_batch']} {row['attention_impl']}",
                "measured_gib": measured,
                "predicted_gib": predicted,
                "error_pct": 100 * (predicted - measured) / measured,
                "error": predicted / measured - 1,
            }
        )
    return rows, skipped


def by_source(rows: list[dict]) -> str:
    """The markdown table of the errors per source (a source_id of measured-dev.csv: one publication, one
    benchmark script), after the line over every row: bench/stats.py's, the one the time benches print."""
    return error_table(groups(rows, lambda r: r["source"]), [("planner", "error", ALL)])


def by_class(rows: list[dict]) -> dict[str, dict]:
    """The summary per workload class over every statistic: what planner/data/accuracy.yaml holds."""
    groups: dict[str, list[float]] = {}
    for r in rows:
        groups.setdefault(r["workload"], []).append(r["error_pct"])
    return {
        w: {
            "rows": len(e),
            "median_pct": round(statistics.median(abs(x) for x in e), 1),
            "p90_pct": round(p90([abs(x) for x in e]), 1),
            "signed_pct": round(statistics.median(e), 1),
        }
        for w, e in sorted(groups.items())
    }


def write_accuracy(rows: list[dict]) -> None:
    header = (
        "# Written by `python bench/accuracy.py --write` from bench/data/measured-dev.csv: how far the\n"
        "# planner's memory has been off, per workload class over every statistic, in percent of the measured\n"
        "# value (the error is (predicted - measured) / measured). planner/accuracy.py reads it.\n"
    )
    ACCURACY_PATH.write_text(header + yaml.safe_dump({"classes": by_class(rows)}, sort_keys=False))


def main() -> None:
    rows, skipped = run()
    if "--write" in sys.argv:
        write_accuracy(rows)
    print("| row | model | framework | quality | config | statistic | measured GiB | predicted GiB | error % |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['row']} | {r['model']} | {r['framework']} | {r['quality']} | {r['config']} | {r['stat']} | "
            f"{r['measured_gib']:.2f} | {r['predicted_gib']:.2f} | {r['error_pct']:+.1f} |"
        )
    errors = [abs(r["error_pct"]) for r in rows]
    if errors:
        print(
            f"\n{len(rows)} rows expressed: median |error| {statistics.median(errors):.1f} %, "
            f"p90 |error| {p90(errors):.1f} %"
        )
        print(
            "\n| workload | statistic | rows | median abs error | p90 abs error | signed median |\n"
            "|---|---|---|---|---|---|"
        )
        for g in summaries(rows):
            print(
                f"| {g['workload']} | {g['stat']} | {g['rows']} | {g['median']:.1f} % | {g['p90']:.1f} % | "
                f"{g['signed']:+.1f} % |"
            )
        print("\nBy source (bench/data/measured-dev-sources.md):\n\n" + by_source(rows))
    reasons: dict[str, list[str]] = {}
    for row_id, why in skipped:
        reasons.setdefault(why, []).append(row_id)
    print(f"\n{len(skipped)} rows not expressible yet:")
    for why, ids in reasons.items():
        print(f"- {why}: {', '.join(ids)}")


if __name__ == "__main__":
    doc_tables.run(main)
