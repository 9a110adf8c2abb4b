"""The planner's numbers, pinned: every preset across a grid of plans, a few recommendations and limits, and the
accuracy bench's per-row predictions.

    python tests/snapshot.py            # rewrite tests/snapshots/ from the current planner
    git diff --stat tests/snapshots     # what moved; the commit message says what and why

tests/test_snapshot.py recomputes every entry and compares it with the stored files: any change to a number
shows up there and in the diff of these files. Every plan of the grid pins its verdict, totals, each item's
bytes, each stage's phases and each time item's seconds; the formula and note text, the plan as resolved and
the messages are pinned for TEXT_PRESETS only, so a change of wording rewrites three files, not one per preset.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import _checkout  # noqa: F401  (the checkout and bench/ first on sys.path)

import accuracy
import gpu_accuracy
import serving as serving_bench
import throughput as throughput_bench

from planner.errors import PlanError
from planner.memory import estimate
from planner.perf import StepTime, flops_per_token, job_hours, plan_time, throughput
from planner.plan.codec import plan_from_dict
from planner.plan.config import Plan
from planner.plan.models import presets
from planner.search.recommend import (
    SearchOptions,
    max_micro_batch,
    max_sequence_length,
    min_gpus,
    recommend,
)
from planner.views.export import candidate_to_dict, estimate_to_dict

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
# The presets whose grid keeps every text (formulas, notes, the verdict's sentence, the resolved plan): a dense
# GQA model, a mixture of experts, and latent attention with shared experts
TEXT_PRESETS = ("llama-3.1-8b", "mixtral-8x7b", "deepseek-v2-lite")

# Each variant is laid over {"model": {"preset": ...}} for every preset; a variant a preset cannot take (a degree
# that does not divide its heads, expert parallelism on a dense model) pins the error message instead.
VARIANTS: dict[str, dict[str, Any]] = {
    "pretrain-1gpu": {},
    "finetune-fsdp8-full-ckpt": {
        "workload": {"task": "finetune", "sequence_length": 8192, "micro_batch_size": 2},
        "parallelism": {"data": 8, "zero_stage": 3},
        "techniques": {"activation_checkpointing": "full"},
    },
    "autocast-ddp2-eager-accum": {
        "workload": {"sequence_length": 1024, "micro_batch_size": 2, "global_batch_size": 8},
        "parallelism": {"data": 2},
        "techniques": {"attention": "eager", "activation_checkpointing": "selective"},
    },
    "lora-all-linear-dropout": {
        "workload": {
            "task": "lora",
            "sequence_length": 2048,
            "micro_batch_size": 2,
            "lora": {"rank": 16, "targets": ["q", "k", "v", "o", "gate", "up", "down"], "dropout": 0.05},
        },
        "techniques": {"activation_checkpointing": "selective"},
    },
    "qlora-nf4-paged-8bit": {
        "workload": {"task": "qlora", "sequence_length": 4096},
        "precision": {"double_quant": True, "optimizer": "paged_adamw_8bit"},
        "techniques": {"activation_checkpointing": "full", "loss": "chunked"},
    },
    "dora-zero3-every-k": {
        "workload": {"task": "lora", "lora": {"variant": "dora", "targets": ["q", "v", "down"]}},
        "parallelism": {"data": 4, "zero_stage": 3},
        "techniques": {"activation_checkpointing": "every_k", "checkpoint_every": 3},
    },
    "tp2-sp-pp2-interleaved-zero1": {
        "workload": {"global_batch_size": 32},
        "parallelism": {
            "data": 2,
            "zero_stage": 1,
            "tensor": 2,
            "sequence_parallel": True,
            "pipeline": 2,
            "pipeline_schedule": "interleaved_1f1b",
            "virtual_stages": 2,
        },
    },
    "pp4-gpipe-zero2-lion": {
        "workload": {"global_batch_size": 16},
        "precision": {"optimizer": "lion", "optimizer_impl": "forloop"},
        "parallelism": {"data": 2, "zero_stage": 2, "pipeline": 4, "pipeline_schedule": "gpipe"},
    },
    "deepspeed-zero2-reduce-bucket": {"framework": "deepspeed", "parallelism": {"data": 8, "zero_stage": 2}},
    "nvfp4-torchtitan-sac-fsdp8": {
        "framework": "torchtitan",
        "workload": {"sequence_length": 8192},
        "techniques": {"compile": True},
        "precision": {"compute": "fp8", "fp8_recipe": "nvfp4"},
        "parallelism": {"data": 8},
        "hardware": {"gpu": "b200-180gb"},
    },
    "fp8-rowwise-compile-sac-fsdp4": {
        "workload": {"sequence_length": 8192},
        "precision": {"compute": "fp8", "fp8_recipe": "rowwise", "fp8_all_gather": True},
        "parallelism": {"data": 4, "zero_stage": 3},
        "techniques": {"compile": True, "activation_checkpointing": "selective_op"},
    },
    "nvfp4-fused-loss-muon": {
        "precision": {"compute": "fp8", "fp8_recipe": "nvfp4", "optimizer": "muon"},
        "techniques": {"loss": "fused"},
    },
    "cp2-offload-zero2-adafactor": {
        "workload": {"sequence_length": 16384},
        "precision": {"optimizer": "adafactor"},
        "parallelism": {"data": 2, "zero_stage": 2, "context": 2},
        "techniques": {"offload": "optimizer"},
    },
    "offload-params-zero3-act-offload": {
        "parallelism": {"data": 2, "zero_stage": 3},
        "techniques": {
            "offload": "optimizer_and_params",
            "activation_offload": True,
            "activation_checkpointing": "full",
        },
    },
    "pure-bf16-opt-in-bwd-sgd": {
        "precision": {"master_weights": "none", "optimizer": "sgd_momentum"},
        "techniques": {"optimizer_in_backward": True},
    },
    "async-tp-compile-torchtitan": {
        "framework": "torchtitan",
        "workload": {"sequence_length": 8192},
        "parallelism": {"data": 2, "tensor": 2, "zero_stage": 3, "async_tp": True},
        "techniques": {"compile": True},
    },
    "torchtune-finetune": {"framework": "torchtune", "workload": {"task": "finetune"}},
    "deepspeed-zero3-lora": {
        "framework": "deepspeed",
        "workload": {"task": "lora"},
        "parallelism": {"data": 8, "zero_stage": 3},
    },
    "moe-ep4-capacity": {
        "parallelism": {"data": 4, "expert": 4, "zero_stage": 1},
        "techniques": {"moe_capacity_factor": 1.25},
    },
    "inference-hf-generate": {
        "framework": "hf_generate",
        "workload": {"task": "inference", "inference": {"batch_size": 4, "prompt_tokens": 2048, "output_tokens": 512}},
    },
    "inference-gpt-fast-compiled-int8": {
        "framework": "gpt_fast",
        "techniques": {"compile": True},
        "precision": {"weights": "int8"},
        "workload": {"task": "inference", "inference": {"batch_size": 2, "prompt_tokens": 2000, "output_tokens": 200}},
    },
    "inference-int4-eager-chunked": {
        "workload": {
            "task": "inference",
            "inference": {"batch_size": 2, "prompt_tokens": 1024, "prefill_chunk_tokens": 512},
        },
        "precision": {"weights": "int4", "kv_cache": "fp8"},
        "techniques": {"attention": "eager"},
    },
    "inference-pp2-batch8": {
        "workload": {"task": "inference", "inference": {"batch_size": 8, "prompt_tokens": 512, "output_tokens": 512}},
        "parallelism": {"pipeline": 2},
    },
    "serving-vllm-tp2": {
        "framework": "vllm",
        "hardware": {"gpu": "h100-sxm-80gb"},
        "workload": {
            "task": "inference",
            "inference": {
                "batch_size": 16,
                "prompt_tokens": 4096,
                "output_tokens": 1024,
                "gpu_memory_utilization": 0.9,
            },
        },
        "parallelism": {"tensor": 2},
    },
}

# Plans whose recommendations, limits and job time are pinned too (the search is slower than an estimate).
SEARCHED: dict[str, dict[str, Any]] = {
    "llama-3.1-8b-fsdp8": {
        "model": {"preset": "llama-3.1-8b"},
        "workload": {"sequence_length": 8192, "micro_batch_size": 2, "steps": 1000},
        "parallelism": {"data": 8, "zero_stage": 3},
        "techniques": {"activation_checkpointing": "full"},
    },
    "qwen2.5-7b-qlora": {"model": {"preset": "qwen2.5-7b"}, "workload": {"task": "qlora", "train_tokens": 10**8}},
    "mixtral-8x7b-lora": {"model": {"preset": "mixtral-8x7b"}, "workload": {"task": "lora"}},
    "llama-3.1-70b-serving": {
        "model": {"preset": "llama-3.1-70b"},
        "framework": "vllm",
        "workload": {"task": "inference", "inference": {"batch_size": 32, "gpu_memory_utilization": 0.9}},
    },
    "qwen3-8b-generate": {
        "model": {"preset": "qwen3-8b"},
        "workload": {"task": "inference", "inference": {"batch_size": 8}},
    },
    "llama-3.1-8b-pretrain-1t-tokens": {
        "model": {"preset": "llama-3.1-8b"},
        "workload": {"sequence_length": 8192, "global_batch_size": 512, "train_tokens": 10**12},
    },
}
# The recommender's options of the plans above that are not asked with the defaults (a 30-day deadline)
SEARCH_OPTIONS: dict[str, SearchOptions] = {
    "llama-3.1-8b-pretrain-1t-tokens": SearchOptions(deadline_hours=14 * 24),
    "llama-3.1-70b-serving": SearchOptions(requests_per_s=20, ttft_s=2.0, tpot_s=0.05),
}


def _time_entry(time: StepTime | None) -> dict[str, Any] | None:
    """The time model's numbers, compactly: the step, its rates and each item's seconds (exposed, hidden)."""
    if time is None:
        return None
    return {
        "step_time_s": time.step_time_s,
        "tokens_per_s_per_gpu": time.tokens_per_s_per_gpu,
        "mfu": time.mfu,
        "bound": time.bound,
        "items": {i.name: [i.seconds, i.hidden_s] for i in time.items},
    }


def _full_entry(plan: Plan) -> dict[str, Any]:
    est = estimate(plan)
    return {**estimate_to_dict(est), "time": _time_entry(plan_time(plan, est.gpu))}


def _numbers_entry(plan: Plan) -> dict[str, Any]:
    """The estimate's numbers without its text: the verdict, the totals, each item's bytes, each stage's phases
    and the step's seconds."""
    est = estimate(plan)
    full = estimate_to_dict(est)
    return {
        **{k: full[k] for k in NUMBER_KEYS},
        "items": {i.name: i.bytes for i in est.items},
        "stages": [
            {
                **{k: v for k, v in s.items() if k != "phases"},
                "phases": {p["name"]: p["allocated_bytes"] for p in s["phases"]},
            }
            for s in full["stages"]
        ],
        "time": _time_entry(plan_time(plan, est.gpu)),
    }


# What a numbers-only entry keeps of estimate_to_dict's top level (items and stages are re-keyed by name)
NUMBER_KEYS = (
    "fits",
    "gpu",
    "phase",
    "stage",
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "device_bytes",
    "usable_bytes",
    "headroom_bytes",
    "host_bytes",
    "host_limit_bytes",
    "serving",
)


def _estimate_entry(data: dict[str, Any], text: bool) -> dict[str, Any]:
    """An estimate, or the plan's error: the whole JSON form (`text`) or its numbers; an error's message
    (`text`) or the field it names."""
    try:
        plan = plan_from_dict(data)
        return _full_entry(plan) if text else _numbers_entry(plan)
    except PlanError as e:
        return {"error": str(e) if text else e.field}


def estimates(preset: str) -> dict[str, Any]:
    """The grid of one preset: variant → its entry (the whole JSON form for TEXT_PRESETS), or the plan's error."""
    text = preset in TEXT_PRESETS
    return {name: _estimate_entry({"model": {"preset": preset}, **variant}, text) for name, variant in VARIANTS.items()}


def searched() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, data in SEARCHED.items():
        plan = plan_from_dict(data)
        est = estimate(plan)
        rec = recommend(plan, options=SEARCH_OPTIONS.get(name, SearchOptions()))
        entry: dict[str, Any] = {
            "flops_per_token": flops_per_token(plan),
            "recommend": [candidate_to_dict(c) for c in rec.candidates[:5]],
            "frontier": [candidate_to_dict(c) for c in rec.frontier()],
            "ties": [c.offering.id for c in rec.ties()],
            "max_micro_batch": max_micro_batch(plan),
        }
        fewest, _ = min_gpus(plan)
        entry["min_gpus"] = None if fewest is None else candidate_to_dict(fewest)
        if plan.workload.task == "inference":
            entry["throughput"] = throughput(plan, est.gpu).__dict__
        else:
            entry["job_hours"] = job_hours(plan, est.gpu, 10**9)
            entry["job_hours_at_mfu_0.4"] = job_hours(plan, est.gpu, 10**9, 0.4)
            entry["max_sequence_length"] = max_sequence_length(plan)
        out[name] = entry
    return out


def accuracy_rows() -> dict[str, Any]:
    rows, skipped = accuracy.run()
    return {
        "rows": {r["row"]: {k: v for k, v in r.items() if k != "row"} for r in rows},
        "skipped": [[row, why] for row, why in skipped],
    }


def gpu_rows() -> dict[str, Any]:
    """The planner's predictions for the project's own GPU runs (bench/gpu_accuracy.py)."""
    return {r["name"]: {k: v for k, v in r.items() if k not in ("name", "plan")} for r in gpu_accuracy.run()}


def throughput_rows() -> dict[str, Any]:
    rows, skipped = throughput_bench.run()
    return {
        "rows": {r["row"]: {k: v for k, v in r.items() if k != "row"} for r in rows},
        "skipped": [[row, why] for row, why in skipped],
    }


def serving_rows() -> dict[str, Any]:
    rows, skipped = serving_bench.run()
    return {
        "rows": {r["row"]: {k: v for k, v in r.items() if k != "row"} for r in rows},
        "skipped": [[row, why] for row, why in skipped],
    }


def files() -> dict[str, Any]:
    """Every snapshot file's name and content."""
    out = {f"estimates/{preset}.json": estimates(preset) for preset in presets()}
    out["searched.json"] = searched()
    out["accuracy.json"] = accuracy_rows()
    out["gpu-accuracy.json"] = gpu_rows()
    out["throughput.json"] = throughput_rows()
    out["serving.json"] = serving_rows()
    return out


# A list of scalars (a time item's [seconds, hidden seconds], a range): on one line
SCALAR_LIST = re.compile(r"\[\n\s*([^\[\]{}]*?)\n\s*\]")


def dumps(content: Any) -> str:
    text = json.dumps(content, indent=1, sort_keys=True, ensure_ascii=False)
    return SCALAR_LIST.sub(lambda m: "[" + re.sub(r",\n\s*", ", ", m.group(1)) + "]", text) + "\n"


def main() -> None:
    written = files()
    for name, content in written.items():
        path = SNAPSHOTS / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dumps(content), encoding="utf-8")
    print(f"wrote {len(written)} files under {SNAPSHOTS}")


if __name__ == "__main__":
    main()
