"""Running a configuration (planner/measure/plan.py) with PyTorch and transformers: the model built from its
architecture with random weights, then the plan's workload, with what the allocator and the driver report.

- training (pretrain / finetune / lora / qlora): TRAIN_STEPS steps of forward with HF's loss (labels), backward,
  clip_grad_norm_, optimizer.step, zero_grad(set_to_none=True), so the optimizer states exist at the peak;
  LoRA through peft, QLoRA through a bitsandbytes NF4 base;
- objective preference (DPO, a reference): TRL's DPO step (planner/measure/dpo_step.py: huggingface/trl@f2cd577
  dpo_trainer.py `_compute_loss`, loss_type sigmoid, with the metrics it logs): the policy's forward on 2 ×
  micro_batch sequences (chosen then rejected), the labels' log-probs, the reference's forward and log-probs under
  no_grad (a frozen copy built like the policy, or the LoRA policy with its adapters disabled), −logsigmoid(β ×
  margin); rows measured before 2026-11-28 ran an earlier step that freed each model's logits after its
  log-probs and logged no metrics (bench/data/measured-gpu-sources.md);
- objective reward: a sequence-classification model with one label (TRL RewardTrainer: chosen and rejected in one
  batch), −logsigmoid(chosen − rejected);
- inference: prefill + greedy `generate` with the KV cache, for exactly `output_tokens` new tokens.

Peak statistics are reset after the model is built and the cache emptied. The device memory is nvidia-smi's
per-process figure when it can be matched, else `mem_get_info` used at the end minus what was used before.
Imported only through `planner.measure.plan.load_runner` (the `measure` extra: torch, transformers, peft,
bitsandbytes).
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

import torch
import torch.nn.functional as F
import transformers
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, BitsAndBytesConfig

from planner.measure.dpo_step import dpo_loss
from planner.measure.plan import (
    TRAIN_STEPS,
    attn_implementation,
    hf_config,
    max_positions,
    needs_skip,
    nvidia_smi,
    versions,
)
from planner.plan.codec import plan_from_dict

try:  # LoRA plans need peft; the others run without it
    import peft
except ImportError:
    peft = None
try:  # QLoRA's NF4 base and 8-bit AdamW need bitsandbytes (needs_skip says so when it is absent)
    import bitsandbytes
except ImportError:
    bitsandbytes = None

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}
LR = 1e-5  # any rate: the step's memory does not depend on it
PAIRED = ("preference", "reward")  # objectives whose batch is chosen + rejected: 2 × micro_batch_size rows
# plan LoRA targets → module names: Llama/Qwen2 projections, Mixtral's experts (w1 gate, w3 up, w2 down),
# GPT-2's fused c_attn (q, k, v) and its c_fc / c_proj MLP (no gate)
LORA_NAMES = {
    "q": "q_proj",
    "k": "k_proj",
    "v": "v_proj",
    "o": "o_proj",
    "gate": "gate_proj",
    "up": "up_proj",
    "down": "down_proj",
}
LORA_NAMES_BY_ARCH = {
    "mixtral": {**LORA_NAMES, "gate": "w1", "up": "w3", "down": "w2"},
    "gpt2": {"q": "c_attn", "k": "c_attn", "v": "c_attn", "o": "attn.c_proj", "up": "c_fc", "down": "mlp.c_proj"},
}


def cuda_available() -> bool:
    return torch.cuda.is_available()


def build(cfg, dtype, device: str, attn: str, auto=AutoModelForCausalLM):
    with torch.device(device):
        model = auto.from_config(cfg, attn_implementation=attn, dtype=dtype)
    return model.to(device=device, dtype=dtype)


def _build_nf4(cfg, plan: dict, device: str, attn: str):
    """A bitsandbytes NF4 base: the random bf16 model saved to a temporary folder and loaded 4-bit."""
    quant = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_compute_dtype=torch.bfloat16,
        bnb_4bit_use_double_quant=bool(plan["precision"].get("double_quant")),
        bnb_4bit_quant_storage=torch.uint8,
    )
    with tempfile.TemporaryDirectory() as tmp:
        model = build(cfg, torch.bfloat16, device, attn)
        model.save_pretrained(tmp)  # random init on the GPU is fast; the CPU is slow for billions of weights
        del model
        torch.cuda.empty_cache()
        return AutoModelForCausalLM.from_pretrained(
            tmp,
            quantization_config=quant,
            device_map={"": 0 if device == "cuda" else device},
            attn_implementation=attn,
            dtype=torch.bfloat16,
        )


def _optimizer(params, prec: dict):
    opt, foreach = prec.get("optimizer", "adamw"), prec.get("optimizer_impl", "foreach") == "foreach"
    if opt == "adamw":
        kwargs = {"fused": True} if prec.get("optimizer_impl") == "fused" else {"foreach": foreach}
        return torch.optim.AdamW(params, lr=LR, **kwargs)
    if opt == "sgd":
        return torch.optim.SGD(params, lr=LR, foreach=foreach)
    if opt == "sgd_momentum":
        return torch.optim.SGD(params, lr=LR, momentum=0.9, foreach=foreach)
    return bitsandbytes.optim.AdamW8bit(params, lr=LR)  # adamw_8bit: measure.RUNNABLE allows no other


def _with_lora(model, config: dict, master, compute):
    """The model wrapped by peft with the plan's adapters; adapters in fp32 (peft's default) or the compute dtype
    when the plan keeps no fp32 masters. No prepare_model_for_kbit_training: it upcasts every non-quantized
    weight (embeddings, norms, head) to fp32, while the plan keeps the frozen base in 16 bits."""
    lora = config["plan"]["workload"].get("lora", {})
    names = LORA_NAMES_BY_ARCH.get(config["arch"], LORA_NAMES)
    targets = sorted({names[t] for t in lora.get("targets", ["q", "v"])})
    model = peft.get_peft_model(
        model,
        peft.LoraConfig(
            r=lora.get("rank", 8),
            lora_alpha=lora.get("alpha", 16),
            lora_dropout=lora.get("dropout", 0.0),
            target_modules=targets,
            task_type="CAUSAL_LM",
        ),
    )
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.to(torch.float32 if master == "fp32" else compute)
    return model


def _weights_dtype(plan: dict):
    """The dtype a trained model's weights are kept in: fp32 masters, or the compute dtype."""
    prec = plan["precision"]
    return torch.float32 if prec.get("master_weights", "fp32") == "fp32" else DTYPES[prec.get("compute", "bf16")]


def _model(config: dict, device: str):
    """The plan's model on the device, in the dtypes the plan keeps its weights in."""
    plan = config["plan"]
    task, prec = plan["workload"].get("task", "pretrain"), plan["precision"]
    compute, master = DTYPES[prec.get("compute", "bf16")], prec.get("master_weights", "fp32")
    cfg, attn = _hf_config(config), attn_implementation(plan)
    if task == "qlora":
        model = _build_nf4(cfg, plan, device, attn)
    elif task in ("lora", "inference"):
        model = build(cfg, compute, device, attn)  # frozen / served weights in the compute dtype
    elif plan["workload"].get("objective") == "reward":
        model = build(cfg, _weights_dtype(plan), device, attn, AutoModelForSequenceClassification)
    else:
        model = build(cfg, _weights_dtype(plan), device, attn)
    if task in ("lora", "qlora"):
        model = _with_lora(model, config, master, compute)
    return model


def _hf_config(config: dict):
    """The transformers config; a reward model's has one label and a pad id (HF finds each row's last token by it;
    the runner's random ids never use it)."""
    plan = config["plan"]
    cls, kwargs = hf_config(config["arch"], plan["model"], max_positions(plan))
    if plan["workload"].get("objective") == "reward":
        kwargs |= {"num_labels": 1, "pad_token_id": plan["model"]["vocab_size"] - 1}
    return getattr(transformers, cls)(**kwargs)


def _reference(config: dict, device: str):
    """DPO's separate frozen reference: built as TRL builds it, with the policy's model_init_kwargs (so in fp32 under
    fp32 masters), eval, no grad. None when the plan has no separate reference."""
    plan = config["plan"]
    wl = plan["workload"]
    if wl.get("objective") != "preference" or plan_from_dict(plan).workload.reference != "separate":
        return None
    dtype = DTYPES[plan["precision"].get("compute", "bf16")] if wl.get("task") == "lora" else _weights_dtype(plan)
    ref = build(_hf_config(config), dtype, device, attn_implementation(plan))
    return ref.eval().requires_grad_(False)


def _generate(model, plan: dict, device: str, gen) -> None:
    inf = plan["workload"].get("inference", {})
    model.eval()
    model.generation_config.eos_token_id = None
    b, p, n = inf.get("batch_size", 1), inf.get("prompt_tokens", 1024), inf.get("output_tokens", 256)
    ids = torch.randint(0, plan["model"]["vocab_size"], (b, p), generator=gen).to(device)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            use_cache=True,
            pad_token_id=0,
        )
    if out.shape[1] != p + n:
        raise RuntimeError(f"generate returned {out.shape[1] - p} new tokens, wanted {n}")


def _batch(plan: dict, device: str, gen):
    """Random token ids: micro_batch rows, or chosen + rejected (2 × micro_batch) for a paired objective."""
    wl, vocab = plan["workload"], plan["model"]["vocab_size"]
    rows = wl.get("micro_batch_size", 1) * (2 if wl.get("objective") in PAIRED else 1)
    high = vocab - 1 if wl.get("objective") == "reward" else vocab  # the reward model's pad id stays unused
    return torch.randint(0, high, (rows, wl.get("sequence_length", 4096)), generator=gen).to(device)


def _loss(model, ref, plan: dict, ids):
    objective = plan["workload"].get("objective", "next_token")
    if objective == "reward":
        chosen, rejected = model(input_ids=ids, use_cache=False).logits.squeeze(-1).chunk(2)
        return -F.logsigmoid(chosen - rejected).mean()
    if objective != "preference":
        return model(input_ids=ids, labels=ids).loss
    if ref is not None:
        return dpo_loss(model, lambda: ref(input_ids=ids, use_cache=False), ids, torch.ones_like(ids))
    return dpo_loss(model, lambda: _adapters_off(model, ids), ids, torch.ones_like(ids))


def _adapters_off(model, ids):
    """The LoRA policy's base: TRL with a PEFT model and ref_model None (peft's disable_adapter)."""
    with model.disable_adapter():
        return model(input_ids=ids, use_cache=False)


def _train(model, ref, plan: dict, device: str, gen, steps: int) -> float:
    """Run the steps; the last step's seconds (the device synchronized at its ends; steady state from step 2)."""
    wl, prec, tech = plan["workload"], plan["precision"], plan["techniques"]
    compute = DTYPES[prec.get("compute", "bf16")]
    autocast = (
        wl.get("task") in ("lora", "qlora") or prec.get("master_weights", "fp32") == "fp32"
    ) and compute != torch.float32
    model.train()
    model.config.use_cache = False
    if tech.get("activation_checkpointing", "none") == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    params = [p for p in model.parameters() if p.requires_grad]
    opt = _optimizer(params, prec)
    for _ in range(steps):
        _synchronize(device)
        t0 = time.perf_counter()
        ids = _batch(plan, device, gen)
        with torch.autocast(
            device_type="cuda" if device.startswith("cuda") else "cpu", dtype=compute, enabled=autocast
        ):
            loss = _loss(model, ref, plan, ids)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        _synchronize(device)
        step_s = time.perf_counter() - t0
    if not torch.isfinite(loss.detach().float()):
        raise RuntimeError(f"loss is not finite: {loss.item()}")
    return step_s


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _device_facts() -> dict[str, Any]:
    torch.cuda.init()
    driver = nvidia_smi("driver_version")
    return {
        "device": torch.cuda.get_device_name(0),
        "cuda_version": torch.version.cuda or "",
        "driver_version": driver[0] if driver else "",
        "device_total_bytes": torch.cuda.mem_get_info()[1],
    }


def _device_memory(baseline_used: int | None) -> dict[str, Any]:
    """Peak allocated and reserved, and the device memory this process uses."""
    free, total = torch.cuda.mem_get_info()
    out = {
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
    }
    apps = nvidia_smi("pid,used_memory", apps=True) or []
    mine = [int(a.split(",")[1]) * 2**20 for a in apps if a.split(",")[0].strip() == str(os.getpid())]
    if mine:
        return out | {"device_bytes": mine[0], "device_bytes_source": "nvidia-smi process used_memory"}
    return out | {
        "device_bytes": total - free - (baseline_used or 0),
        "device_bytes_source": "mem_get_info used at end"
        + (" minus nvidia-smi used before" if baseline_used is not None else ""),
    }


def run_config(config: dict, device: str = "cuda", steps: int = TRAIN_STEPS) -> dict:
    """Run one configuration in this process; return {status, error, measured values, device facts}."""
    result: dict[str, Any] = {"status": "ok", "error": "", **versions()}
    skip = needs_skip(config, device)
    if skip:
        return {**result, "status": "skipped", "error": skip}
    cuda = device.startswith("cuda")
    used = nvidia_smi("memory.used") if cuda else None
    baseline_used = int(used[0]) * 2**20 if used else None  # before this process opens a CUDA context
    result |= _device_facts() if cuda else {"device": "cpu", "cuda_version": "", "driver_version": ""}
    torch.manual_seed(0)
    model, ref = _model(config, device), _reference(config, device)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    gen = torch.Generator(device="cpu").manual_seed(0)
    if config["plan"]["workload"].get("task") == "inference":
        _generate(model, config["plan"], device, gen)
    else:
        result["step_s"] = round(_train(model, ref, config["plan"], device, gen, steps), 4)
    if cuda:
        torch.cuda.synchronize()
    result["wall_s"] = round(time.perf_counter() - t0, 3)
    if cuda:
        return result | _device_memory(baseline_used)
    return result | {"device_bytes_source": "cpu: not tracked (end-to-end check only)"}


def measure(config: dict, device: str = "cuda", steps: int = TRAIN_STEPS) -> dict:
    """run_config, with running out of memory as a result (status "oom") rather than an error."""
    try:
        return run_config(config, device, steps)
    except torch.OutOfMemoryError as exc:
        return {"status": "oom", "error": f"OutOfMemoryError: {str(exc).splitlines()[0]}", **versions()}
