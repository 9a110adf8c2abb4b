"""Measuring a plan on a GPU, the part that needs no torch: the plan → Hugging Face config, what a run would do,
the device facts from nvidia-smi, and the measured rows.

A plan is measured on a model built from its architecture with random weights (nothing downloaded) by
`planner/measure/run.py` (torch, transformers; the `measure` extra), or by vLLM for a serving plan
(`planner/measure/serve.py`). The `vram-planner measure` command and `bench/measure_gpu.py`'s grid both run
through here. A configuration is a dict {"name", "arch", "plan"}: the plan dict with explicit architecture keys
and the Hugging Face architecture (llama, qwen2, gpt2, mixtral) that realizes it.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as _dt
import importlib
import importlib.util
import json
import subprocess
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, get_args

from planner.catalog import Gpu, load_catalog
from planner.errors import PlanError, bad
from planner.memory import estimate
from planner.plan.codec import plan_from_dict, plan_to_dict
from planner.plan.config import Plan
from planner.plan.models import model_from_dict, model_to_dict, param_counts

Arch = Literal["llama", "qwen2", "gpt2", "mixtral"]
ARCHS: tuple[str, ...] = get_args(Arch)
TRAIN_STEPS = 2  # the second step is the steady state: the optimizer states exist at its peak
MEASURED_KEYS = ("peak_allocated_bytes", "peak_reserved_bytes", "device_bytes")
VERSIONED = ("torch", "transformers", "peft", "bitsandbytes", "vllm")
GiB = 2**30

# What the runner builds: one GPU, the plan's model on it whole. Key: (allowed values, why others are not run).
RUNNABLE: dict[str, tuple[tuple[Any, ...], str]] = {
    "hardware.count": ((1,), "the runner measures one GPU"),
    "parallelism.data": ((1,), "the runner measures one GPU"),
    "parallelism.tensor": ((1,), "the runner measures one GPU"),
    "parallelism.pipeline": ((1,), "the runner measures one GPU"),
    "parallelism.context": ((1,), "the runner measures one GPU"),
    "parallelism.expert": ((1,), "the runner measures one GPU"),
    "precision.compute": (("bf16", "fp16", "fp32"), "fp8 training needs torchao, which the runner does not drive"),
    "precision.optimizer": (("adamw", "adamw_8bit", "sgd", "sgd_momentum"), "the runner builds these optimizers"),
    "techniques.activation_checkpointing": (("none", "full"), "HF gradient checkpointing is per layer (full)"),
    "techniques.offload": (("none",), "offloading needs DeepSpeed or FSDP, which the runner does not drive"),
    "techniques.compile": ((False,), "the runner runs eager PyTorch"),
    "techniques.loss": (("full",), "HF's loss is the full-logits cross-entropy"),
    "techniques.optimizer_in_backward": ((False,), "the runner steps the optimizer after backward"),
    "techniques.activation_offload": ((False,), "the runner does not offload activations"),
}
# Served weights: the runner loads bf16/fp16/fp32 models (QLoRA's NF4 base aside); KV cache in the model dtype.
RUNNABLE_INFERENCE: dict[str, tuple[tuple[Any, ...], str]] = {
    "precision.weights": (("bf16", "fp16", "fp32"), "quantized serving needs its engine's kernels"),
    "precision.kv_cache": (("bf16", "fp16", "fp32"), "HF's cache keeps K and V in the model dtype"),
}

# bench/data/measured-dev.csv's columns (bench/data/measured-dev-sources.md explains each; bench/accuracy.py
# reads them back into a plan with `express`).
DEV_COLUMNS = [
    "row_id",
    "source_id",
    "source_ref",
    "table_or_section",
    "model",
    "arch_family",
    "n_layers",
    "hidden",
    "n_heads",
    "n_kv_heads",
    "ffn_dim",
    "vocab",
    "tied_embeddings",
    "params_b",
    "task",
    "seq_len",
    "micro_batch",
    "tokens_per_microbatch_per_gpu",
    "global_batch",
    "grad_accum",
    "pp_microbatches",
    "param_dtype",
    "compute_dtype",
    "master_weights",
    "grad_dtype",
    "optimizer",
    "optimizer_state_dtype",
    "act_ckpt",
    "attention_impl",
    "compile",
    "loss_impl",
    "quantization",
    "peft_config",
    "framework",
    "dp_replicate",
    "fsdp_or_zero",
    "dp_shard",
    "tp",
    "pp",
    "cp",
    "offload",
    "gpu_type",
    "gpu_capacity_gib",
    "n_gpus",
    "measured_value",
    "measured_unit",
    "measured_gib",
    "measured_metric",
    "quality",
    "notes",
]
# the statistic each measurement is, as bench/accuracy.py's `statistic` reads measured_metric
METRICS = {
    "peak_allocated_bytes": "torch.cuda.max_memory_allocated",
    "peak_reserved_bytes": "torch.cuda.max_memory_reserved",
    "device_bytes": "nvidia-smi (device memory of the process)",
}
ARCH_FAMILY = {
    "llama": "llama (RMSNorm, SwiGLU, RoPE)",
    "qwen2": "qwen2 (RMSNorm, SwiGLU, RoPE)",
    "gpt2": "gpt2 (GELU, LayerNorm, learned positions)",
    "mixtral": "mixtral (MoE, RMSNorm, SwiGLU)",
}
OPTIMIZER_TEXT = {
    "adamw": "AdamW (torch)",
    "adamw_8bit": "AdamW 8bit (bitsandbytes)",
    "sgd": "SGD (torch, no Adam state)",
    "sgd_momentum": "SGD momentum (torch, no Adam state)",
}


def normalize(config: Any) -> dict:
    """A configuration from {"plan"[, "arch", "name"]} or a bare plan dict (its arch inferred from the model):
    the plan's model resolved to explicit architecture keys, which the runner builds from."""
    if isinstance(config, str):
        config = json.loads(config)
    if not isinstance(config, dict):
        raise bad("config", config, 'must be a JSON object: a plan dict or {"arch": ..., "plan": {...}}')
    if "plan" not in config:
        config = {"plan": config}
    plan = json.loads(json.dumps(config["plan"]))
    if not isinstance(plan, dict) or "model" not in plan:
        raise PlanError("model", "the plan needs a model block")
    m = model_from_dict(plan["model"])
    if m.mla or m.sliding_window is not None or m.shared_experts or m.first_dense_layers or m.layer_pattern:
        raise bad(
            "model",
            m.preset or "the plan's model",
            "is not built by the runner: latent attention, sliding "
            "windows, shared experts, leading dense layers and hybrid layers are not llama, qwen2, gpt2 or "
            "mixtral shapes",
        )
    plan["model"] = model_to_dict(dataclasses.replace(m, preset=None, approx_params=None))
    for section in ("workload", "precision", "techniques"):
        plan[section] = plan.get(section) or {}
    arch = config.get("arch") or ("gpt2" if m.mlp == "gelu" else "mixtral" if m.num_experts else "llama")
    if arch not in ARCHS:
        raise bad("arch", arch, f"must be one of {', '.join(ARCHS)}")
    plan_from_dict(plan)  # fail early on an invalid plan
    return {"name": config.get("name") or plan.get("name") or "config", "arch": arch, "plan": plan}


def setup(plan: Plan) -> dict:
    """The configuration that measures a plan, or a PlanError naming the first plan key the runner cannot run."""
    data = plan_to_dict(plan)
    serving = plan.workload.task == "inference"
    for key, (allowed, why) in {**RUNNABLE, **(RUNNABLE_INFERENCE if serving else {})}.items():
        section, name = key.split(".")
        if data[section][name] not in allowed:
            raise bad(key, data[section][name], f"is not measured by vram-planner measure ({why})")
    return normalize({"name": plan.name or "plan", "plan": data})


def serving_engine(config: dict) -> bool:
    """A serving engine's plan (gpu_memory_utilization set): measured with vLLM, not a generate() loop."""
    return config["plan"]["workload"].get("inference", {}).get("gpu_memory_utilization") is not None


def max_positions(plan: dict) -> int:
    wl = plan["workload"]
    inf = wl.get("inference", {})
    if wl.get("task") == "inference":
        return inf.get("prompt_tokens", 1024) + inf.get("output_tokens", 256)
    return wl.get("sequence_length", 4096)


def hf_config(arch: str, model: dict, positions: int) -> tuple[str, dict]:
    """The transformers config class and its arguments for a plan's model (random weights are built from it).

    Qwen2 puts biases on q/k/v only; the plan format's `bias` means every linear, so it is left false (the q/k/v
    biases are 0.1 % of the parameters). GPT-2's learned position table (n_positions × hidden) is not in the plan.
    """
    n_kv = model.get("num_kv_heads") or model["num_attention_heads"]
    head_dim = model.get("head_dim") or model["hidden_size"] // model["num_attention_heads"]
    common = {"vocab_size": model["vocab_size"], "tie_word_embeddings": bool(model.get("tie_embeddings", False))}
    if arch == "gpt2":
        return "GPT2Config", {
            "n_embd": model["hidden_size"],
            "n_layer": model["num_layers"],
            "n_head": model["num_attention_heads"],
            "n_inner": model["intermediate_size"],
            "n_positions": max(positions, 1024),
            "resid_pdrop": 0.0,
            "embd_pdrop": 0.0,
            "attn_pdrop": 0.0,
            # the plan's GeLU (model.activation); unset, GPT2Config's own default gelu_new is the planner's too
            **({"activation_function": model["activation"]} if model.get("activation") else {}),
            **common,
        }
    kwargs = {
        "hidden_size": model["hidden_size"],
        "num_hidden_layers": model["num_layers"],
        "num_attention_heads": model["num_attention_heads"],
        "num_key_value_heads": n_kv,
        "intermediate_size": model["intermediate_size"],
        "head_dim": head_dim,
        "max_position_embeddings": max(positions, 4096),
        **common,
    }
    if arch == "llama":
        return "LlamaConfig", {"attention_bias": bool(model.get("bias")), "mlp_bias": bool(model.get("bias")), **kwargs}
    if arch == "qwen2":
        return "Qwen2Config", {"use_sliding_window": False, **kwargs}
    return "MixtralConfig", {
        "num_local_experts": model["num_experts"],
        "num_experts_per_tok": model["experts_per_token"],
        **kwargs,
    }


def attn_implementation(plan: dict) -> str:
    """HF's attention implementation for the plan's kernel: SDPA (flash or memory-efficient) or eager."""
    return "eager" if plan["techniques"].get("attention", "flash") == "eager" else "sdpa"


def predict(plan: dict, catalog: Mapping[str, Gpu] | None = None) -> dict[str, int]:
    est = estimate(plan_from_dict(plan), catalog if catalog is not None else load_catalog(None))
    return {
        "peak_allocated_bytes": est.peak_allocated_bytes,
        "peak_reserved_bytes": est.peak_reserved_bytes,
        "device_bytes": est.device_bytes,
    }


def workload_text(config: dict, steps: int = TRAIN_STEPS) -> str:
    """What a run does, in one line."""
    wl = config["plan"]["workload"]
    if wl.get("task") != "inference":
        return (
            f"{steps} training steps ({wl.get('task', 'pretrain')}): micro-batch "
            f"{wl.get('micro_batch_size', 1)} × {wl.get('sequence_length', 4096):,} tokens, forward with HF's "
            "loss, backward, clip_grad_norm_, optimizer step"
        )
    inf = wl.get("inference", {})
    what = (
        f"vLLM serving, gpu_memory_utilization {inf['gpu_memory_utilization']}"
        if serving_engine(config)
        else "greedy generate with the KV cache"
    )
    return (
        f"{what}: batch {inf.get('batch_size', 1)}, {inf.get('prompt_tokens', 1024):,} prompt + "
        f"{inf.get('output_tokens', 256):,} new tokens"
    )


def dry_run_text(config: dict, predicted: dict[str, int], steps: int = TRAIN_STEPS) -> str:
    """What `vram-planner measure --dry-run` prints: the model it would build, the run, the prediction."""
    cls, kwargs = hf_config(config["arch"], config["plan"]["model"], max_positions(config["plan"]))
    lines = [
        f"{config['name']}: would build transformers.{cls} with random weights "
        f"(attn_implementation {attn_implementation(config['plan'])}):",
        *(f"  {k}: {v}" for k, v in kwargs.items()),
        f"run: {workload_text(config, steps)}",
        "predicted:",
        *(f"  {label:<14}{predicted[key] / GiB:9.2f} GiB" for key, label in STAT_LABELS.items()),
    ]
    return "\n".join(lines) + "\n"


STAT_LABELS = {
    "peak_allocated_bytes": "max allocated",
    "peak_reserved_bytes": "max reserved",
    "device_bytes": "device memory",
}


def result_text(config: dict, measured: dict, predicted: dict[str, int]) -> str:
    """Measured next to predicted, with the error in percent of the measured value."""
    lines = [
        f"{config['name']} on {measured.get('device', '?')}: {workload_text(config)}",
        f"  {'':<14}{'measured GiB':>13}{'predicted GiB':>15}{'error':>9}",
    ]
    for key, label in STAT_LABELS.items():
        got = measured.get(key)  # None where the run cannot see it (a vLLM engine's allocator)
        shown, error = (f"{got / GiB:.2f}", f"{100 * (predicted[key] - got) / got:+.1f}%") if got else ("-", "-")
        lines.append(f"  {label:<14}{shown:>13}{predicted[key] / GiB:15.2f}{error:>9}")
    lines.append(f"  device memory read from: {measured.get('device_bytes_source', '-')}")
    return "\n".join(lines) + "\n"


def versions() -> dict[str, str]:
    out = {}
    for pkg in VERSIONED:
        try:
            out[f"{pkg}_version"] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[f"{pkg}_version"] = ""
    return out


def nvidia_smi(query: str, *, apps: bool = False) -> list[str] | None:
    """nvidia-smi's answer to a --query-gpu (or, with apps, --query-compute-apps) query; None without it."""
    flag = "--query-compute-apps" if apps else "--query-gpu"
    try:
        res = subprocess.run(
            ["nvidia-smi", f"{flag}={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if res.returncode:
        return None
    return [line.strip() for line in res.stdout.splitlines() if line.strip()]


def needs_skip(config: dict, device: str) -> str | None:
    """Why a configuration cannot run here (missing bitsandbytes, CPU), or None."""
    plan = config["plan"]
    wants_bnb = plan["workload"].get("task") == "qlora" or plan["precision"].get("optimizer") == "adamw_8bit"
    if wants_bnb and importlib.util.find_spec("bitsandbytes") is None:
        return "skipped: bitsandbytes is not installed (QLoRA / adamw_8bit need it)"
    if wants_bnb and device == "cpu":
        return "skipped: bitsandbytes 4-bit / 8-bit kernels need a CUDA device"
    return None


NO_TORCH = (
    "needs PyTorch and transformers with a CUDA GPU, and {name} is not installed: "
    'pip install "vram-planner[measure]" (--dry-run shows the run and the prediction without them)'
)
NO_CUDA = (
    "needs a CUDA GPU, and torch finds none (torch.cuda.is_available() is false); --dry-run shows the run "
    "and the prediction"
)
NO_VLLM = (
    "a serving plan (workload.inference.gpu_memory_utilization) is measured with vLLM, which is not "
    "installed: pip install vllm, or leave gpu_memory_utilization out to measure a generate() loop"
)
RUNNER_PACKAGES = ("torch", "transformers", "vllm")  # what a runner module imports at its top


def load_runner(name: Literal["run", "serve"]) -> ModuleType:
    """The one place a runner module is imported: they import torch (and vLLM) at their top, which only a real
    run may need, so importing them with the rest of the planner would make every command need the `measure`
    extra. Raises ModuleNotFoundError when torch (or vLLM) is not installed."""
    return importlib.import_module(f"planner.measure.{name}")


def runner_for(config: dict) -> ModuleType:
    """The runner that measures a configuration on this machine's GPU, or a PlanError saying why none can."""
    serving = serving_engine(config)
    if serving and importlib.util.find_spec("vllm") is None:
        raise PlanError("measure", NO_VLLM)
    try:
        runner = load_runner("serve" if serving else "run")
    except ModuleNotFoundError as exc:
        if exc.name not in RUNNER_PACKAGES:
            raise
        raise PlanError("measure", NO_TORCH.format(name=exc.name)) from None
    if not runner.cuda_available():
        raise PlanError("measure", NO_CUDA)
    return runner


def _peft_text(lora: dict) -> str:
    """peft_config as bench/accuracy.py's `_lora` reads it: 'LoRA r=16 alpha=32 dropout 0.0 on q,v'."""
    return (
        f"LoRA r={lora.get('rank', 8)} alpha={lora.get('alpha', 16):g} dropout {lora.get('dropout', 0.0):g} "
        f"on {','.join(lora.get('targets', ['q', 'v']))}"
    )


def _plan_columns(config: dict) -> dict[str, Any]:
    """The measured-dev.csv columns that describe the run's plan (one GPU, no sharding, eager PyTorch)."""
    plan = config["plan"]
    m, wl, prec, tech = plan["model"], plan["workload"], plan["precision"], plan["techniques"]
    task = wl.get("task", "pretrain")
    inf = wl.get("inference", {})
    seq = (
        f"{inf.get('prompt_tokens', 1024)} prompt + {inf.get('output_tokens', 256)} new"
        if task == "inference"
        else wl.get("sequence_length", 4096)
    )
    batch = inf.get("batch_size", 1) if task == "inference" else wl.get("micro_batch_size", 1)
    compute, master = prec.get("compute", "bf16"), prec.get("master_weights", "fp32")
    quant = ("nf4" + (" dq" if prec.get("double_quant") else "")) if task == "qlora" else "none"
    params = param_counts(model_from_dict(m)).total
    return {
        "model": plan.get("name") or config["name"],
        # a GeLU model's row names its activation (bench/accuracy.py reads it back)
        "arch_family": ARCH_FAMILY[config["arch"]] + (f"; activation {m['activation']}" if m.get("activation") else ""),
        "n_layers": m["num_layers"],
        "hidden": m["hidden_size"],
        "n_heads": m["num_attention_heads"],
        "n_kv_heads": m.get("num_kv_heads") or m["num_attention_heads"],
        "ffn_dim": m["intermediate_size"],
        "vocab": m["vocab_size"],
        "tied_embeddings": "yes" if m.get("tie_embeddings") else "no",
        "params_b": f"{params / 1e9:.3f}",
        "task": task,
        "seq_len": seq,
        "micro_batch": batch,
        "tokens_per_microbatch_per_gpu": batch * (max_positions(plan) if task == "inference" else seq),
        "global_batch": batch,
        "grad_accum": 1,
        "param_dtype": "fp32" if master == "fp32" and task not in ("lora", "qlora", "inference") else compute,
        "compute_dtype": compute,
        "master_weights": "fp32" if master == "fp32" else "none",
        "grad_dtype": prec.get("gradients", "") if task != "inference" else "",
        "optimizer": (
            (
                OPTIMIZER_TEXT[prec.get("optimizer", "adamw")]
                + (" fused" if prec.get("optimizer_impl") == "fused" else "")
            )
            if task != "inference"
            else ""
        ),
        "optimizer_state_dtype": prec.get("optimizer_state", "") if task != "inference" else "",
        "act_ckpt": tech.get("activation_checkpointing", "none"),
        "attention_impl": "eager" if attn_implementation(plan) == "eager" else "SDPA",
        "compile": "no",
        "loss_impl": "CE full logits (HF)",
        "quantization": quant,
        "peft_config": _peft_text(wl.get("lora", {})) if task in ("lora", "qlora") else "",
        "framework": "HF transformers (vram-planner measure)",
        "dp_replicate": 1,
        "fsdp_or_zero": "none",
        "dp_shard": 1,
        "tp": 1,
        "pp": 1,
        "cp": 1,
        "offload": "none",
        "n_gpus": 1,
    }


def dev_rows(config: dict, measured: dict, *, row_id: str = "new") -> list[dict[str, Any]]:
    """Rows in bench/data/measured-dev.csv's format, one per statistic measured (the file holds one statistic
    a row): the run's plan, device and versions, ready to contribute. bench/accuracy.py reads them back."""
    facts = "; ".join(f"{pkg} {measured[f'{pkg}_version']}" for pkg in VERSIONED if measured.get(f"{pkg}_version"))
    source = f"{facts}; driver {measured.get('driver_version') or '-'}; CUDA {measured.get('cuda_version') or '-'}"
    plan_json = json.dumps(config["plan"], sort_keys=True, separators=(",", ":"))
    capacity = measured.get("device_total_bytes")
    run = workload_text(config, measured.get("steps", TRAIN_STEPS)).split(":")[0]
    rows = []
    for key, metric in METRICS.items():
        value = measured.get(key)
        if value is None:
            continue
        from_smi = key != "device_bytes" or "nvidia-smi" in measured.get("device_bytes_source", "")
        rows.append(
            {c: "" for c in DEV_COLUMNS}
            | _plan_columns(config)
            | {
                "row_id": f"{row_id}-{key.split('_')[-2]}",
                "source_id": "vram-planner-measure",
                "source_ref": source,
                "table_or_section": measured.get("timestamp", ""),
                "gpu_type": measured.get("device", ""),
                "gpu_capacity_gib": f"{capacity / GiB:.2f}" if capacity else "",
                "measured_value": int(value),
                "measured_unit": "bytes",
                "measured_gib": f"{value / GiB:.3f}",
                "measured_metric": metric if from_smi else f"{metric}: {measured['device_bytes_source']}",
                "quality": "A",
                "notes": f"{run}; random weights; plan: {plan_json}",
            }
        )
    return rows


def append_csv(path: Path, rows: list[dict[str, Any]], columns: list[str] = DEV_COLUMNS) -> None:
    """Append rows to a CSV, with the header when the file is new or empty."""
    path = Path(path)
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        if new:
            writer.writeheader()
        writer.writerows(rows)


def now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
