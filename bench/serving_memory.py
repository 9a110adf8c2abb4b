"""Serving-engine startup memory: the planner's accounting against vLLM's and SGLang's own startup logs
(bench/data/serving-memory.csv; serving-memory-sources.md quotes each row's source).

Each row becomes a serving plan by general rules (`plan_of`): the engine picks the plan's framework (vLLM V0/V1:
`vllm`, SGLang: `sglang`), and the logged settings its keys: tensor parallelism, GPU, gpu_memory_utilization
(SGLang: mem_fraction_static), max_model_len as the context of one sequence, max_num_seqs,
max_num_batched_tokens (SGLang: chunked_prefill_size) as the prefill chunk, enforce_eager as
`workload.inference.cuda_graphs: false`, and the weight and KV dtypes. Settings a log does not state are left to
the framework's defaults. The planner's weights, activation peak, KV budget and KV tokens are compared per rank
with the logged ones; the error is that of the KV budget, or of the KV tokens where the budget is not logged.
Rows that cannot be planned are listed with the reason, never dropped.

    python bench/serving_memory.py
"""

from __future__ import annotations

import csv
import re
import statistics
from pathlib import Path

import _path  # noqa: F401  (the checkout first on sys.path)

import doc_tables

from planner.catalog import load_catalog
from planner.errors import PlanError
from planner.frameworks import load_frameworks
from planner.memory import estimate
from planner.memory.inference import KV_BLOCK_TOKENS, SERVING_PREFILL_TOKENS
from planner.plan.codec import plan_from_dict
from planner.plan.models import presets
from planner.units import GiB

DATA = Path(__file__).resolve().parent / "data" / "serving-memory.csv"
# the plan's framework for each engine column
FRAMEWORKS = {"V1": "vllm", "V0": "vllm", "sglang": "sglang"}
ENGINE_LABELS = {"V1": "vLLM V1", "V0": "vLLM V0", "sglang": "SGLang"}
# an engine's defaults that the planner's framework recipe does not have: vLLM V0's EngineArgs.max_num_seqs was
# 256 on every GPU (V1's depends on the GPU, which is the planner's default)
ENGINE_DEFAULTS = {"V0": {"max_num_seqs": 256}}
# tokens per KV page when the row does not log its block size: vLLM's default block, SGLang's page_size 1
PAGE_TOKENS = {"vllm": KV_BLOCK_TOKENS, "sglang": 1}
# checkpoints whose config.json has a preset's architecture under another name
SAME_ARCHITECTURE = {
    "Qwen/Qwen2-7B-Instruct": "qwen2.5-7b",  # 28 layers, 3584 wide, 28 heads / 4 KV, I 18944, V 152064: as Qwen2.5
    "meta-llama/Meta-Llama-3-8B": "llama-3.1-8b",  # Llama 3 and 3.1 8B differ only in RoPE scaling
    "meta-llama/Meta-Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic": "llama-3.1-70b",  # Llama 3.3 70B has 3.1 70B's architecture
    "Qwen/QwQ-32B": "qwen2.5-32b",  # QwQ-32B is a fine-tune of Qwen2.5-32B
}
# suffixes of fine-tuned or quantized checkpoints of a preset's base model
CHECKPOINT_SUFFIXES = ("-Instruct", "-FP8")
# the GPU column's name (before any parenthesis) → catalog id; the A100 80GB rows do not say SXM or PCIe,
# which have the same memory
GPUS = {
    "H100-80GB": "h100-sxm-80gb",
    "A100-80GB": "a100-sxm-80gb",
    "L4-24GB": "l4-24gb",
    "RTX 3090 24GB": "rtx-3090-24gb",
}
# (column, needle, reason): checked in order, the first match makes the row unplannable
NOT_PLANNABLE = [
    ("model_hf_id", "unknown", "the model is not stated"),
    (
        "dtype_quant",
        "mxfp4",
        "MXFP4 expert weights (4.25 bits, attention left in bf16) and attention sinks: "
        "no weight dtype or attention the plan describes",
    ),
    (
        "notes",
        "multimodal",
        "multimodal: the vision encoder's weights and the engine's encoder-cache profiling are not in the plan",
    ),
]


def number(text: str) -> float | None:
    """The leading number of a cell ('256(default-inferred)' → 256, '-1.44' → -1.44), None when blank."""
    found = re.match(r"\s*(-?\d+(?:\.\d+)?)", text or "")
    return float(found.group(1)) if found else None


def preset_of(hf_id: str) -> str | None:
    """The preset whose architecture the checkpoint has: by name, or its base model's hf_id."""
    if hf_id in SAME_ARCHITECTURE:
        return SAME_ARCHITECTURE[hf_id]
    base = hf_id
    for suffix in CHECKPOINT_SUFFIXES:
        base = base.removesuffix(suffix)
    return next((p.id for p in presets().values() if p.hf_id == base), None)


def gpu_of(row: dict) -> str | None:
    """The catalog id of the row's GPU (its name before any parenthesis), None when the table lacks it."""
    return GPUS.get(row["gpu"].split("(")[0].strip())


def unplannable(row: dict) -> str | None:
    """Why a row cannot become a plan, or None."""
    for column, needle, why in NOT_PLANNABLE:
        if needle in row[column].lower():
            return why
    if preset_of(row["model_hf_id"]) is None:
        return f"no preset has the architecture of {row['model_hf_id']}"
    if gpu_of(row) not in load_catalog():
        return f"GPU {row['gpu']} is not in the catalog"
    return None


def _precision(dtype: str) -> dict:
    """Served weights in their dtype (fp8 checkpoints: fp8 projections, bf16 activations); KV in the model dtype
    unless the row says fp8 KV."""
    compute = "fp16" if dtype.startswith("fp16") else "bf16"
    weights = "fp8" if dtype.startswith("fp8") else compute
    return {"compute": compute, "weights": weights, "kv_cache": "fp8" if "kv fp8" in dtype else compute}


def _inference(row: dict) -> dict:
    """The serving keys the log states; the context is one sequence of max_model_len (unstated: one prefill
    chunk, so that the plan's forward is the profile run's whole token batch; the context does not enter the
    KV budget)."""
    chunk = number(row["max_num_batched_tokens"])
    context = number(row["max_model_len"]) or (chunk or SERVING_PREFILL_TOKENS) + 1
    keys = {
        **ENGINE_DEFAULTS.get(row["engine"], {}),
        "batch_size": 1,
        "prompt_tokens": int(context) - 1,
        "output_tokens": 1,
        "cuda_graphs": row["enforce_eager"].strip().lower() != "true",
    }
    for key, column in (
        ("gpu_memory_utilization", "gpu_mem_util"),
        ("max_num_seqs", "max_num_seqs"),
        ("prefill_chunk_tokens", "max_num_batched_tokens"),
    ):
        value = number(row[column])
        if value is not None:
            keys[key] = value if key == "gpu_memory_utilization" else int(value)
    return keys


def row_id(row: dict) -> str:
    return row["_id"]


def release_of(row: dict) -> dict:
    """The vLLM V1 release a row names (its first version number, as the recipe's release table has it, e.g.
    '0.11.0(inferred)' or 'unknown(~0.9.2-0.10.0)'), which selects the accounting of that release; none for V0
    and SGLang rows, whose accounting the recipe's latest release stands for."""
    found = re.search(r"\d+\.\d+\.\d+(?:\.\d+)?", row["vllm_version"])
    known = load_frameworks()["vllm"].releases
    return {"framework_release": found.group()} if row["engine"] == "V1" and found and found.group() in known else {}


def plan_of(row: dict) -> dict:
    """The plan dict of a plannable row."""
    return {
        "name": row_id(row),
        "framework": FRAMEWORKS[row["engine"]],
        **release_of(row),
        "model": {"preset": preset_of(row["model_hf_id"])},
        "parallelism": {"tensor": int(row["tp"])},
        "hardware": {"gpu": gpu_of(row)},
        "precision": _precision(row["dtype_quant"]),
        "workload": {"task": "inference", "inference": _inference(row)},
    }


def _page(row: dict, framework: str) -> int:
    """The KV page the engine counts tokens in: the block size the row logs, else the engine's default."""
    block = re.search(r"\bblock (\d+)", row["notes"])
    return int(block.group(1)) if block else PAGE_TOKENS[framework]


def _error(logged_gib: float | None, logged_tokens: float | None, budget: int, tokens: int) -> tuple:
    """(signed error, basis): of the KV budget when logged and positive, else of the tokens; a negative logged
    budget is an engine that could not start (no error, basis 'failed')."""
    if logged_gib is not None and logged_gib <= 0:
        return None, "failed"
    if logged_gib is not None:
        return budget / GiB / logged_gib - 1, "budget"
    if logged_tokens:
        return tokens / logged_tokens - 1, "tokens"
    return None, "nothing logged"


def compare(row: dict) -> dict:
    """The planned and logged figures of one plannable row."""
    plan = plan_from_dict(plan_of(row))
    est = estimate(plan)
    items = {i.name: i.bytes for i in est.items}
    s = est.serving
    page = _page(row, plan.framework)
    tokens = s.kv_budget_bytes // (s.kv_bytes_per_token * page) * page
    logged_gib, logged_tokens = number(row["kv_cache_gib"]), number(row["kv_tokens"])
    error, basis = _error(logged_gib, logged_tokens, s.kv_budget_bytes, tokens)
    gpu = plan.hardware.gpu + (" (implied)" if "implied" in row["gpu"] else "")
    return {
        "row": row_id(row),
        "source": row["source"],
        "model": row["model_hf_id"],
        "engine": row["engine"],
        "version": row["vllm_version"],
        "gpu": gpu,
        "tensor": plan.parallelism.tensor,
        "fraction": plan.workload.inference.gpu_memory_utilization,
        "weights": (number(row["weights_gib"]), items["weights"] / GiB),
        "activations": (number(row["activation_peak_gib"]), items["activations"] / GiB),
        "kv_gib": (logged_gib, s.kv_budget_bytes / GiB),
        "kv_tokens": (logged_tokens, tokens),
        "error": error,
        "basis": basis,
        "fits": est.fits,
    }


def rows_with_ids() -> list[dict]:
    """The data rows, each with an id: its source and its place among that source's rows (B.3)."""
    rows, seen = list(csv.DictReader(DATA.open())), {}
    for row in rows:
        seen[row["source"]] = seen.get(row["source"], 0) + 1
        row["_id"] = f"{row['source']}.{seen[row['source']]}"
    return rows


def run() -> tuple[list[dict], list[tuple[str, str]]]:
    """(compared rows, (row id, reason) of each row that cannot be planned)."""
    compared, skipped = [], []
    for row in rows_with_ids():
        why = unplannable(row)
        if why is None:
            try:
                compared.append(compare(row))
                continue
            except PlanError as exc:
                why = str(exc)
        skipped.append((row_id(row), why))
    return compared, skipped


def _pair(values: tuple, fmt: str) -> str:
    """'logged / planned', a dash for what the log does not state."""
    return " / ".join("–" if v is None else format(v, fmt) for v in values)


def _error_cell(r: dict) -> str:
    if r["error"] is not None:
        return f"{r['error']:+.1%}" + (" (tokens)" if r["basis"] == "tokens" else "")
    if r["basis"] == "failed":
        return "engine failed; planner: " + ("no KV room" if r["kv_gib"][1] == 0 else f"{r['kv_gib'][1]:.2f} GiB")
    return r["basis"]


def table(rows: list[dict]) -> list[str]:
    lines = [
        "| row | model | engine | version | GPU | TP | fraction | weights GiB | activation peak GiB | "
        "KV budget GiB | KV tokens | KV error |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['row']} | {r['model'].split('/')[-1]} | {ENGINE_LABELS[r['engine']]} | {r['version']} | "
            f"{r['gpu']} | {r['tensor']} | {r['fraction']:.2f} | {_pair(r['weights'], '.2f')} | "
            f"{_pair(r['activations'], '.2f')} | {_pair(r['kv_gib'], '.2f')} | "
            f"{_pair(r['kv_tokens'], ',.0f')} | {_error_cell(r)} |"
        )
    return lines


def summary(rows: list[dict]) -> list[str]:
    """Median |error| and signed median of the KV budget (tokens where no budget is logged), per engine; a
    failed start counts apart (does the planner leave no KV room too?)."""
    lines = []
    for engine in sorted({r["engine"] for r in rows}):
        mine = [r for r in rows if r["engine"] == engine]
        errors = [r["error"] for r in mine if r["error"] is not None]
        failed = [r for r in mine if r["basis"] == "failed"]
        line = (
            (
                f"{ENGINE_LABELS[engine]}: {len(errors)} rows, KV budget median |error| "
                f"{statistics.median(abs(e) for e in errors):.1%}, signed median {statistics.median(errors):+.1%}, "
                f"max |error| {max(abs(e) for e in errors):.1%}"
            )
            if errors
            else f"{ENGINE_LABELS[engine]}: no errors"
        )
        if failed:
            agree = sum(r["kv_gib"][1] == 0 for r in failed)
            line += f"; {len(failed)} failed start(s), {agree} of them planned with no KV room"
        lines.append(line)
    return lines


def main() -> None:
    rows, skipped = run()
    print("Per rank; each cell is logged / planned.\n")
    print("\n".join(table(rows)))
    print()
    print("\n".join(summary(rows)))
    models = {row_id(row): row["model_hf_id"] for row in rows_with_ids()}
    print(f"\nNot planned ({len(skipped)} of {len(rows) + len(skipped)} rows):")
    for row, why in skipped:
        print(f"- {row} ({models[row]}): {why}")


if __name__ == "__main__":
    doc_tables.run(main)
