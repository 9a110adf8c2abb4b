"""GPU measurement harness: run a plan's workload on a real GPU and record what PyTorch and the driver report.

Each configuration is a plan (the `vram-planner/v1` dict `planner.codec.plan_from_dict` reads) plus the Hugging
Face architecture that realizes its `model` block (llama, qwen2, gpt2, mixtral). The model is built from a
config in code (`AutoModelForCausalLM.from_config`, random weights, nothing downloaded) and runs the plan's
workload in a fresh subprocess, so the CUDA context and the caching allocator start clean for every row:

- training (pretrain / finetune / lora / qlora): two steps of forward with HF's loss (labels), backward,
  clip_grad_norm_, optimizer.step, zero_grad(set_to_none=True), so the optimizer states exist at the peak;
  LoRA through peft, QLoRA through a bitsandbytes NF4 base (skipped with a reason when bitsandbytes is absent);
- inference: prefill + greedy `generate` with the KV cache, for exactly `output_tokens` new tokens.

Recorded per row: `torch.cuda.max_memory_allocated`, `torch.cuda.max_memory_reserved` (peak stats reset after
the model is built and the cache emptied) and the device memory the process uses (nvidia-smi's per-process
figure when it can be matched, else `mem_get_info` used at the end minus what was used before CUDA started),
next to the planner's three predictions (`peak_allocated_bytes`, `peak_reserved_bytes`, `device_bytes`).

    python bench/measure_gpu.py --grid                      # ~60 configurations, rows to bench/measurements/
    python bench/measure_gpu.py --config '{"arch": "llama", "plan": {...}}' --out my.csv
    python bench/measure_gpu.py --grid --dry-run            # no torch needed: validate plans, print predictions
    python bench/measure_gpu.py --grid --device cpu         # harness check: tiny shapes run end to end on CPU

torch is imported only inside the functions that run a workload, so `--dry-run` works without it.
"""

from __future__ import annotations

import argparse
import copy
import csv
import dataclasses
import datetime as _dt
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml

from planner.memory import estimate
from planner.models import model_from_dict, model_to_dict
from planner.codec import plan_from_dict

MEASUREMENTS = ROOT / "bench" / "measurements"
ARCHS = ("llama", "qwen2", "gpt2", "mixtral")
CHILD_TIMEOUT_S = 300
RESULT_PREFIX = "MEASURE_GPU_RESULT "

COLUMNS = [
    "name", "arch", "status", "error", "plan_yaml",
    "measured_peak_allocated_bytes", "measured_peak_reserved_bytes", "measured_device_bytes", "device_bytes_source",
    "predicted_peak_allocated_bytes", "predicted_peak_reserved_bytes", "predicted_device_bytes",
    "device", "driver_version", "cuda_version", "torch_version", "transformers_version", "peft_version",
    "bitsandbytes_version", "wall_s", "timestamp",
]
MEASURED_KEYS = ("peak_allocated_bytes", "peak_reserved_bytes", "device_bytes")

# --- Models: plan `model` blocks, each with the HF architecture that realizes it ------------------------------
# Qwen2 puts biases on q/k/v only; the plan format's `bias` means every linear, so it is left false (the q/k/v
# biases are 0.1 % of the parameters). GPT-2's learned position table (n_positions × hidden) is not in the plan.
MODELS: dict[str, tuple[str, dict]] = {
    "gpt2-124m": ("gpt2", {"num_layers": 12, "hidden_size": 768, "num_attention_heads": 12,
                           "intermediate_size": 3072, "vocab_size": 50257, "mlp": "gelu", "norm": "layernorm",
                           "bias": True, "tie_embeddings": True}),
    "gpt2-355m": ("gpt2", {"num_layers": 24, "hidden_size": 1024, "num_attention_heads": 16,
                           "intermediate_size": 4096, "vocab_size": 50257, "mlp": "gelu", "norm": "layernorm",
                           "bias": True, "tie_embeddings": True}),
    "llama-134m": ("llama", {"num_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "num_kv_heads": 12,
                             "intermediate_size": 2048, "vocab_size": 32000}),
    "qwen2-0.5b": ("qwen2", {"num_layers": 24, "hidden_size": 896, "num_attention_heads": 14, "num_kv_heads": 2,
                             "intermediate_size": 4864, "vocab_size": 151936, "tie_embeddings": True}),
    "llama-1b": ("llama", {"num_layers": 16, "hidden_size": 2048, "num_attention_heads": 32, "num_kv_heads": 8,
                           "head_dim": 64, "intermediate_size": 8192, "vocab_size": 128256, "tie_embeddings": True}),
    "llama-3b": ("llama", {"num_layers": 28, "hidden_size": 3072, "num_attention_heads": 24, "num_kv_heads": 8,
                           "head_dim": 128, "intermediate_size": 8192, "vocab_size": 128256, "tie_embeddings": True}),
    "mixtral-0.6b": ("mixtral", {"num_layers": 8, "hidden_size": 1024, "num_attention_heads": 16, "num_kv_heads": 4,
                                 "intermediate_size": 2816, "vocab_size": 32000, "num_experts": 8,
                                 "experts_per_token": 2}),
}

# precision modes: plan precision keys
PRECISIONS = {
    "bf16": {"compute": "bf16", "master_weights": "none"},  # pure bf16 weights, grads, states
    "amp": {"compute": "bf16", "master_weights": "fp32"},  # fp32 weights + bf16 autocast
    "fp32": {"compute": "fp32", "master_weights": "fp32"},
}
# optimizer modes: plan precision keys
OPTIMIZERS = {
    "adamw": {"optimizer": "adamw", "optimizer_impl": "foreach"},
    "adamw_fused": {"optimizer": "adamw", "optimizer_impl": "fused"},
    "sgd": {"optimizer": "sgd", "optimizer_impl": "foreach"},
    "adamw_8bit": {"optimizer": "adamw_8bit"},
}
LORA_NAMES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj",
              "down": "down_proj"}
ALL_TARGETS = ["q", "k", "v", "o", "gate", "up", "down"]


def train_config(model: str, *, precision: str = "amp", optimizer: str = "adamw", ckpt: str = "none",
                 attention: str = "flash", seq: int = 1024, batch: int = 1, task: str = "pretrain",
                 lora: dict | None = None, double_quant: bool = False) -> dict:
    arch, model_dict = MODELS[model]
    prec = {**PRECISIONS[precision], **OPTIMIZERS[optimizer]}
    workload: dict[str, Any] = {"task": task, "sequence_length": seq, "micro_batch_size": batch}
    if task in ("lora", "qlora"):
        workload["lora"] = lora or {"rank": 16, "alpha": 32, "targets": ["q", "v"]}
    if task == "qlora":
        prec.update(weights="nf4", double_quant=double_quant)
    parts = [model, task, precision, optimizer, f"ckpt-{ckpt}", "sdpa" if attention == "flash" else attention,
             f"s{seq}", f"b{batch}"]
    if task in ("lora", "qlora"):
        parts.insert(2, f"r{workload['lora']['rank']}-{''.join(t[0] for t in workload['lora']['targets'])}")
        if double_quant:
            parts.insert(3, "dq")
    plan = {"name": "_".join(parts), "model": copy.deepcopy(model_dict), "workload": workload, "precision": prec,
            "techniques": {"activation_checkpointing": ckpt, "attention": attention}}
    return {"name": plan["name"], "arch": arch, "plan": plan}


def inference_config(model: str, *, batch: int, prompt: int, output: int = 128, attention: str = "flash") -> dict:
    arch, model_dict = MODELS[model]
    plan = {"name": f"{model}_inference_bf16_{'sdpa' if attention == 'flash' else attention}_b{batch}_p{prompt}_o{output}",
            "model": copy.deepcopy(model_dict),
            "workload": {"task": "inference",
                         "inference": {"batch_size": batch, "prompt_tokens": prompt, "output_tokens": output}},
            "precision": {"compute": "bf16", "master_weights": "none"},
            "techniques": {"attention": attention}}
    return {"name": plan["name"], "arch": arch, "plan": plan}


def grid() -> list[dict]:
    """About 60 configurations sized to finish in under 10 minutes on one H100 (80 GB)."""
    out: list[dict] = []
    # precision × optimizer on a small Llama
    for precision in PRECISIONS:
        for optimizer in OPTIMIZERS:
            out.append(train_config("llama-134m", precision=precision, optimizer=optimizer, seq=1024, batch=4))
    # checkpointing × attention kernel
    for model in ("llama-1b", "qwen2-0.5b"):
        for ckpt in ("none", "full"):
            for attention in ("flash", "eager"):
                out.append(train_config(model, ckpt=ckpt, attention=attention, seq=2048, batch=1))
    # batch and sequence sweeps
    for batch in (1, 2, 4, 8):
        out.append(train_config("llama-1b", precision="bf16", seq=1024, batch=batch))
    for seq in (512, 2048, 4096, 8192):
        out.append(train_config("llama-1b", precision="bf16", seq=seq, batch=1))
    # model sizes, pure bf16 AdamW
    for model in ("gpt2-124m", "gpt2-355m", "llama-134m", "qwen2-0.5b", "llama-1b", "llama-3b", "mixtral-0.6b"):
        out.append(train_config(model, precision="bf16", seq=2048, batch=2))
    out.append(train_config("llama-3b", precision="amp", ckpt="full", seq=2048, batch=2))
    out.append(train_config("mixtral-0.6b", precision="amp", ckpt="full", seq=2048, batch=2))
    out.append(train_config("gpt2-124m", precision="amp", attention="eager", seq=1024, batch=4))
    out.append(train_config("gpt2-124m", precision="fp32", attention="eager", seq=1024, batch=4))
    out.append(train_config("llama-1b", precision="fp32", optimizer="adamw_fused", seq=1024, batch=1))
    out.append(train_config("gpt2-355m", precision="amp", optimizer="adamw_fused", ckpt="full", seq=1024, batch=8))
    # LoRA and QLoRA
    out.append(train_config("llama-1b", task="lora", seq=2048, batch=2))
    out.append(train_config("llama-1b", task="lora", seq=2048, batch=2, lora={"rank": 16, "alpha": 32,
                                                                               "targets": ALL_TARGETS}))
    out.append(train_config("llama-3b", task="lora", ckpt="full", seq=2048, batch=4,
                            lora={"rank": 64, "alpha": 128, "targets": ALL_TARGETS}))
    out.append(train_config("qwen2-0.5b", task="lora", seq=4096, batch=1, lora={"rank": 8, "alpha": 16,
                                                                                "targets": ["q", "k", "v", "o"]}))
    out.append(train_config("llama-1b", task="qlora", seq=2048, batch=2, lora={"rank": 16, "alpha": 32,
                                                                                "targets": ALL_TARGETS}))
    out.append(train_config("llama-3b", task="qlora", seq=2048, batch=2, double_quant=True,
                            lora={"rank": 16, "alpha": 32, "targets": ALL_TARGETS}))
    out.append(train_config("qwen2-0.5b", task="qlora", ckpt="full", seq=2048, batch=4, double_quant=True))
    # inference: batch × context
    for batch in (1, 8, 32):
        for prompt in (512, 2048):
            out.append(inference_config("llama-1b", batch=batch, prompt=prompt))
    out.append(inference_config("llama-1b", batch=8, prompt=2048, attention="eager"))
    out.append(inference_config("llama-3b", batch=1, prompt=1024, output=256))
    out.append(inference_config("llama-3b", batch=16, prompt=1024, output=256))
    out.append(inference_config("qwen2-0.5b", batch=4, prompt=4096))
    out.append(inference_config("gpt2-124m", batch=8, prompt=512, output=256))
    out.append(inference_config("mixtral-0.6b", batch=4, prompt=1024))
    return out


def normalize(config: Any) -> dict:
    """A `--config` value: {"arch", "plan"[, "name"]} or a bare plan dict (its arch inferred from the model)."""
    if isinstance(config, str):
        config = json.loads(config)
    if not isinstance(config, dict):
        raise TypeError("--config must be a JSON object: a plan dict or {\"arch\": ..., \"plan\": {...}}")
    if "plan" not in config:
        config = {"plan": config}
    plan = copy.deepcopy(config["plan"])
    if not isinstance(plan, dict) or "model" not in plan:
        raise ValueError("--config: the plan needs a model block")
    # Resolve a preset or a parameter count to explicit architecture keys: the harness builds from them.
    m = model_from_dict(plan["model"])
    if m.mla or m.sliding_window is not None or m.shared_experts or m.first_dense_layers:
        raise ValueError("--config: latent attention, sliding windows, shared experts and leading dense layers"
                         " are not built by this harness (llama, qwen2, gpt2, mixtral shapes only)")
    plan["model"] = model_to_dict(dataclasses.replace(m, preset=None, approx_params=None))
    for section in ("workload", "precision", "techniques"):
        plan[section] = plan.get(section) or {}
    arch = config.get("arch") or ("gpt2" if m.mlp == "gelu" else "mixtral" if m.num_experts else "llama")
    if arch not in ARCHS:
        raise ValueError(f"arch {arch!r}: one of {', '.join(ARCHS)}")
    name = config.get("name") or plan.get("name") or "config"
    plan_from_dict(plan)  # fail early on an invalid plan
    return {"name": name, "arch": arch, "plan": plan}


def predict(plan: dict) -> dict[str, int]:
    est = estimate(plan_from_dict(plan))
    return {"peak_allocated_bytes": est.peak_allocated_bytes, "peak_reserved_bytes": est.peak_reserved_bytes,
            "device_bytes": est.device_bytes}


def tiny(config: dict) -> dict:
    """The same configuration on a model and workload small enough for a CPU check (same family and features)."""
    config = copy.deepcopy(config)
    plan = config["plan"]
    config["name"] = plan["name"] = f"tiny_{config['name']}"
    m = plan["model"]
    small = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
             "vocab_size": 512}
    mha = m.get("num_kv_heads", m["num_attention_heads"]) == m["num_attention_heads"]
    m.pop("head_dim", None)
    m.update(small)
    if "num_kv_heads" in m:
        m["num_kv_heads"] = 4 if mha else 2
    if m.get("num_experts"):
        m.update(num_experts=4, experts_per_token=2)
    wl = plan["workload"]
    if wl.get("task") == "inference":
        wl["inference"] = {**wl.get("inference", {}), "batch_size": 2, "prompt_tokens": 16, "output_tokens": 4}
    else:
        wl.update(sequence_length=32, micro_batch_size=2)
    return config


# --- Running a workload (torch imported here only) ------------------------------------------------------------
def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for pkg in ("torch", "transformers", "peft", "bitsandbytes"):
        try:
            out[f"{pkg}_version"] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[f"{pkg}_version"] = ""
    return out


def _nvidia_smi(query: str, *, apps: bool = False) -> list[str] | None:
    flag = "--query-compute-apps" if apps else "--query-gpu"
    try:
        res = subprocess.run(["nvidia-smi", f"{flag}={query}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if res.returncode:
        return None
    return [line.strip() for line in res.stdout.splitlines() if line.strip()]


def _hf_config(arch: str, model: dict, attention: str, max_positions: int):
    import transformers

    n_kv = model.get("num_kv_heads") or model["num_attention_heads"]
    head_dim = model.get("head_dim") or model["hidden_size"] // model["num_attention_heads"]
    common = {"vocab_size": model["vocab_size"], "tie_word_embeddings": bool(model.get("tie_embeddings", False))}
    if arch == "gpt2":
        cfg = transformers.GPT2Config(n_embd=model["hidden_size"], n_layer=model["num_layers"],
                                      n_head=model["num_attention_heads"], n_inner=model["intermediate_size"],
                                      n_positions=max(max_positions, 1024), resid_pdrop=0.0, embd_pdrop=0.0,
                                      attn_pdrop=0.0, **common)
    else:
        kwargs = dict(hidden_size=model["hidden_size"], num_hidden_layers=model["num_layers"],
                      num_attention_heads=model["num_attention_heads"], num_key_value_heads=n_kv,
                      intermediate_size=model["intermediate_size"], head_dim=head_dim,
                      max_position_embeddings=max(max_positions, 4096), **common)
        if arch == "llama":
            cfg = transformers.LlamaConfig(attention_bias=bool(model.get("bias")), mlp_bias=bool(model.get("bias")),
                                           **kwargs)
        elif arch == "qwen2":
            cfg = transformers.Qwen2Config(use_sliding_window=False, **kwargs)
        elif arch == "mixtral":
            cfg = transformers.MixtralConfig(num_local_experts=model["num_experts"],
                                             num_experts_per_tok=model["experts_per_token"], **kwargs)
        else:
            raise ValueError(f"arch {arch!r}")
    cfg._attn_implementation = "sdpa" if attention == "flash" else "eager"
    return cfg


def _build(cfg, dtype, device, attention: str):
    import torch
    from transformers import AutoModelForCausalLM

    attn = "sdpa" if attention == "flash" else "eager"
    with torch.device(device):
        try:
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, dtype=dtype)
        except TypeError:  # transformers < 4.56 names it torch_dtype
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, torch_dtype=dtype)
    return model.to(device=device, dtype=dtype)


def _build_nf4(cfg, plan: dict, device):
    """A bitsandbytes NF4 base: the random bf16 model saved to a temporary folder and loaded 4-bit."""
    import tempfile

    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    prec = plan["precision"]
    quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16,
                               bnb_4bit_use_double_quant=bool(prec.get("double_quant")),
                               bnb_4bit_quant_storage=torch.uint8)
    with tempfile.TemporaryDirectory() as tmp:
        model = _build(cfg, torch.bfloat16, device, "flash" if cfg._attn_implementation == "sdpa" else "eager")
        model.save_pretrained(tmp)  # random init on the GPU is fast; the CPU is slow for billions of weights
        del model
        if str(device).startswith("cuda"):
            torch.cuda.empty_cache()
        try:
            return AutoModelForCausalLM.from_pretrained(tmp, quantization_config=quant, device_map={"": 0 if device == "cuda" else device},
                                                        attn_implementation=cfg._attn_implementation,
                                                        dtype=torch.bfloat16)
        except TypeError:
            return AutoModelForCausalLM.from_pretrained(tmp, quantization_config=quant, device_map={"": 0 if device == "cuda" else device},
                                                        attn_implementation=cfg._attn_implementation,
                                                        torch_dtype=torch.bfloat16)


def _optimizer(params, prec: dict, device: str):
    import torch

    opt, impl = prec.get("optimizer", "adamw"), prec.get("optimizer_impl", "foreach")
    if opt == "adamw":
        kwargs = {"fused": True} if impl == "fused" else {"foreach": impl == "foreach"}
        return torch.optim.AdamW(params, lr=1e-5, **kwargs)
    if opt == "sgd":
        return torch.optim.SGD(params, lr=1e-5, foreach=impl == "foreach")
    if opt == "sgd_momentum":
        return torch.optim.SGD(params, lr=1e-5, momentum=0.9, foreach=impl == "foreach")
    if opt == "adamw_8bit":
        import bitsandbytes as bnb

        return bnb.optim.AdamW8bit(params, lr=1e-5)
    raise ValueError(f"precision.optimizer {opt!r} is not run by this harness")


def needs_skip(config: dict, device: str) -> str | None:
    """Why a configuration cannot run here (missing bitsandbytes, CPU), or None."""
    import importlib.util

    plan = config["plan"]
    wants_bnb = plan["workload"].get("task") == "qlora" or plan["precision"].get("optimizer") == "adamw_8bit"
    if wants_bnb and importlib.util.find_spec("bitsandbytes") is None:
        return "skipped: bitsandbytes is not installed (QLoRA / adamw_8bit need it)"
    if wants_bnb and device == "cpu":
        return "skipped: bitsandbytes 4-bit / 8-bit kernels need a CUDA device"
    return None


def run_config(config: dict, device: str = "cuda") -> dict:
    """Run one configuration in this process; return {status, error, measured values, device facts}."""
    result: dict[str, Any] = {"status": "ok", "error": "", **_versions()}
    skip = needs_skip(config, device)
    if skip:
        return {**result, "status": "skipped", "error": skip}
    cuda = device.startswith("cuda")
    baseline_used = None
    if cuda:
        used = _nvidia_smi("memory.used")
        baseline_used = int(used[0]) * 2**20 if used else None  # before this process opens a CUDA context
    import torch

    plan, arch = config["plan"], config["arch"]
    wl, prec, tech = plan["workload"], plan.get("precision", {}), plan.get("techniques", {})
    task = wl.get("task", "pretrain")
    attention = tech.get("attention", "flash")
    compute = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}[prec.get("compute", "bf16")]
    master = prec.get("master_weights", "fp32")
    if cuda:
        torch.cuda.init()
        result.update(device=torch.cuda.get_device_name(0), cuda_version=torch.version.cuda or "")
        driver = _nvidia_smi("driver_version")
        result["driver_version"] = driver[0] if driver else ""
    else:
        result.update(device="cpu", cuda_version="", driver_version="")
    torch.manual_seed(0)
    inf = wl.get("inference", {})
    max_positions = (inf.get("prompt_tokens", 1024) + inf.get("output_tokens", 256) if task == "inference"
                     else wl.get("sequence_length", 4096))
    cfg = _hf_config(arch, plan["model"], attention, max_positions)
    vocab = plan["model"]["vocab_size"]

    if task == "qlora":
        model = _build_nf4(cfg, plan, device)
    elif task in ("lora", "inference"):
        model = _build(cfg, compute, device, attention)  # frozen / served weights in the compute dtype
    else:
        weights = torch.float32 if master == "fp32" else compute
        model = _build(cfg, weights, device, attention)
    autocast = (task in ("lora", "qlora") or master == "fp32") and compute != torch.float32

    if task in ("lora", "qlora"):
        from peft import LoraConfig, get_peft_model

        lora = wl.get("lora", {})
        targets = lora.get("targets", ["q", "v"])
        if arch == "gpt2":
            names = sorted({"c_attn" if t in ("q", "k", "v") else "attn.c_proj" if t == "o" else
                            "c_fc" if t == "up" else "mlp.c_proj" for t in targets})  # GPT-2: fused qkv, no gate
        elif arch == "mixtral":
            names = sorted({{"gate": "w1", "up": "w3", "down": "w2"}.get(t, LORA_NAMES[t]) for t in targets})
        else:
            names = [LORA_NAMES[t] for t in targets]
        # No prepare_model_for_kbit_training: it upcasts every non-quantized weight (embeddings, norms, head) to
        # fp32, while the plan keeps the frozen base in 16 bits; checkpointing is enabled below as for any model.
        model = get_peft_model(model, LoraConfig(r=lora.get("rank", 8), lora_alpha=lora.get("alpha", 16),
                                                 lora_dropout=lora.get("dropout", 0.0), target_modules=names,
                                                 task_type="CAUSAL_LM"))
        for p in model.parameters():  # adapters: fp32 masters (peft's default), or the compute dtype when pure
            if p.requires_grad:
                p.data = p.data.to(torch.float32 if master == "fp32" else compute)

    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    gen = torch.Generator(device="cpu").manual_seed(0)
    if task == "inference":
        model.eval()
        model.generation_config.eos_token_id = None
        b, p, n = inf.get("batch_size", 1), inf.get("prompt_tokens", 1024), inf.get("output_tokens", 256)
        ids = torch.randint(0, vocab, (b, p), generator=gen).to(device)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                                 min_new_tokens=n, do_sample=False, use_cache=True, pad_token_id=0)
        if out.shape[1] != p + n:
            raise RuntimeError(f"generate returned {out.shape[1] - p} new tokens, wanted {n}")
    else:
        model.train()
        model.config.use_cache = False
        if tech.get("activation_checkpointing", "none") == "full":
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        elif tech.get("activation_checkpointing", "none") not in ("none", "full"):
            raise ValueError("only activation_checkpointing none/full are run by this harness")
        params = [p for p in model.parameters() if p.requires_grad]
        opt = _optimizer(params, prec, device)
        b, s = wl.get("micro_batch_size", 1), wl.get("sequence_length", 4096)
        for _ in range(2):
            ids = torch.randint(0, vocab, (b, s), generator=gen).to(device)
            with torch.autocast(device_type="cuda" if cuda else "cpu", dtype=compute, enabled=autocast):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
        if not torch.isfinite(loss.detach().float()):
            raise RuntimeError(f"loss is not finite: {loss.item()}")
    if cuda:
        torch.cuda.synchronize()
    result["wall_s"] = round(time.perf_counter() - t0, 3)
    if cuda:
        result["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        result["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
        free, total = torch.cuda.mem_get_info()
        apps = _nvidia_smi("pid,used_memory", apps=True) or []
        mine = [int(a.split(",")[1]) * 2**20 for a in apps if a.split(",")[0].strip() == str(os.getpid())]
        if mine:
            result.update(device_bytes=mine[0], device_bytes_source="nvidia-smi process used_memory")
        else:
            result.update(device_bytes=total - free - (baseline_used or 0),
                          device_bytes_source="mem_get_info used at end" +
                                              (" minus nvidia-smi used before" if baseline_used is not None else ""))
    else:
        result["device_bytes_source"] = "cpu: not tracked (end-to-end check only)"
    return result


def run_child(config: dict, device: str, timeout: int = CHILD_TIMEOUT_S) -> dict:
    """run_config in a fresh Python process (clean CUDA context and allocator); its result, or an error row."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_child", json.dumps(config), "--device", device]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(ROOT),
                             check=False)
    except subprocess.TimeoutExpired:
        return {"status": "error", "error": f"timed out after {timeout} s"}
    for line in reversed(res.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
    return {"status": "error", "error": f"exit {res.returncode}: {' | '.join(tail)}"[:2000]}


def _child_main(config_json: str, device: str) -> int:
    config = json.loads(config_json)
    try:
        result = run_config(config, device)
    except Exception as exc:  # noqa: BLE001 - every failure becomes the row's status
        oom = "out of memory" in str(exc).lower()
        result = {"status": "oom" if oom else "error", "error": f"{type(exc).__name__}: {exc}"[:2000],
                  **_versions()}
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


# --- Rows and output ---------------------------------------------------------------------------------------
def plan_yaml(plan: dict) -> str:
    return yaml.safe_dump(plan, sort_keys=False, default_flow_style=None)


def make_row(config: dict, measured: dict, predicted: dict | None = None) -> dict:
    """One CSV row from a configuration, its run's result and the planner's prediction."""
    predicted = predicted if predicted is not None else predict(config["plan"])
    row = {c: "" for c in COLUMNS}
    row.update(name=config["name"], arch=config["arch"], plan_yaml=plan_yaml(config["plan"]),
               timestamp=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"))
    for key in ("status", "error", "device", "driver_version", "cuda_version", "torch_version",
                "transformers_version", "peft_version", "bitsandbytes_version", "wall_s", "device_bytes_source"):
        if measured.get(key) is not None:
            row[key] = measured[key]
    for key in MEASURED_KEYS:
        if measured.get(key) is not None:
            row[f"measured_{key}"] = int(measured[key])
        row[f"predicted_{key}"] = int(predicted[key])
    return row


class RowWriter:
    """Appends rows to a CSV (header once), flushing each so a crashed grid keeps its finished rows."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists() or self.path.stat().st_size == 0
        self._fh = self.path.open("a", newline="")
        self._writer = csv.DictWriter(self._fh, fieldnames=COLUMNS)
        if new:
            self._writer.writeheader()
            self._fh.flush()

    def write(self, row: dict) -> None:
        self._writer.writerow(row)
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def default_out(device: str) -> Path:
    if device.startswith("cuda"):
        names = _nvidia_smi("name")
        label = names[0] if names else "cuda"
    else:
        label = "cpu"
    slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-") or "device"
    return MEASUREMENTS / f"{slug}-{_dt.date.today().isoformat()}.csv"


def _gib(n: int | str) -> str:
    return f"{int(n) / 2**30:7.2f}" if n != "" else "      -"


def dry_run(configs: list[dict], stream=None) -> list[dict]:
    """Validate every plan with the planner and print what would run with its predictions. No torch."""
    stream = stream or sys.stdout
    rows = []
    print(f"{'#':>3}  {'name':<58} {'arch':<8} {'alloc GiB':>9} {'resv GiB':>9} {'device GiB':>10}", file=stream)
    for i, config in enumerate(configs, 1):
        plan_from_dict(config["plan"])  # raises PlanError on an invalid plan
        pred = predict(config["plan"])
        rows.append({"name": config["name"], "arch": config["arch"], **pred})
        print(f"{i:>3}  {config['name']:<58} {config['arch']:<8} {_gib(pred['peak_allocated_bytes']):>9} "
              f"{_gib(pred['peak_reserved_bytes']):>9} {_gib(pred['device_bytes']):>10}", file=stream)
    print(f"{len(rows)} configurations, every plan valid", file=stream)
    return rows


def measure(configs: list[dict], device: str, out: Path, *, subprocesses: bool = True,
            stream=None) -> list[dict]:
    """Run each configuration (CPU mode: tiny shapes) and append its row to `out`."""
    stream = stream or sys.stdout
    writer = RowWriter(out)
    rows = []
    try:
        for i, config in enumerate(configs, 1):
            if device == "cpu":
                config = tiny(config)
            predicted = predict(config["plan"])
            t0 = time.perf_counter()
            result = run_child(config, device) if subprocesses else _in_process(config, device)
            result.setdefault("wall_s", round(time.perf_counter() - t0, 3))
            row = make_row(config, result, predicted)
            writer.write(row)
            rows.append(row)
            print(f"[{i}/{len(configs)}] {config['name']}: {row['status']}"
                  + (f" alloc {_gib(row['measured_peak_allocated_bytes']).strip()} GiB"
                     f" (predicted {_gib(predicted['peak_allocated_bytes']).strip()})"
                     if row["measured_peak_allocated_bytes"] != "" else "")
                  + (f" — {row['error']}" if row["error"] else ""), file=stream, flush=True)
    finally:
        writer.close()
    print(f"{len(rows)} rows → {out}", file=stream)
    return rows


def _in_process(config: dict, device: str) -> dict:
    try:
        return run_config(config, device)
    except Exception as exc:  # noqa: BLE001
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:2000]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--grid", action="store_true", help="the ~60-configuration grid (the default)")
    what.add_argument("--config", help='one configuration as JSON: a plan dict, or {"arch": ..., "plan": {...}}')
    what.add_argument("--_child", help=argparse.SUPPRESS)
    ap.add_argument("--dry-run", action="store_true", help="validate the plans and print predictions; no torch")
    ap.add_argument("--device", default="cuda", help="cuda (measure) or cpu (tiny shapes, end-to-end check only)")
    ap.add_argument("--out", type=Path, help="CSV to append rows to; default bench/measurements/<device>-<date>.csv")
    ap.add_argument("--filter", help="run only configurations whose name contains this text")
    args = ap.parse_args(argv)
    if args._child:
        return _child_main(args._child, args.device)
    configs = [normalize(args.config)] if args.config else grid()
    if args.filter:
        configs = [c for c in configs if args.filter in c["name"]]
    if args.dry_run:
        dry_run(configs)
        return 0
    try:
        import torch
    except ImportError:
        print("measure_gpu: torch is not installed; use --dry-run, or install torch + transformers + peft",
              file=sys.stderr)
        return 2
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("measure_gpu: no CUDA device; use --device cpu for an end-to-end check", file=sys.stderr)
        return 2
    measure(configs, args.device, args.out or default_out(args.device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
