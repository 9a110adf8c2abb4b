"""torchtune recipe configs (YAML, `tune run <recipe> --config <file>`) in and out.

A torchtune config names its model by a builder (`model._component_: torchtune.models.llama3_1.lora_llama3_1_8b`),
which gives the preset and whether adapters are trained; the recipe that runs it (named in the config's header
comment, `tune run lora_finetune_single_device --config ...`) gives the GPUs and the sharding: a `*_distributed`
recipe shards with FSDP2 (ZeRO-3). Sources: pytorch/torchtune at bd2a0fc (2026-04-23), recipes/*.py and
recipes/configs/**; the `cfg.get(key, default)` defaults named below are the recipes'.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import yaml

from planner.errors import PlanError, bad
from planner.formats.base import (
    RELEASE_WHY,
    Document,
    Format,
    Imported,
    checkpoint,
    document,
    marked,
    training_defaults,
)
from planner.formats.reading import Reading, as_bool, as_int, as_number, mapping, quiet_mapping
from planner.plan.config import Plan

# torchtune/models/*/__init__.py: a builder's name without its lora_/qlora_ prefix (and without the _base /
# _instruct of Qwen's, which share the architecture) -> the preset it builds
BUILDERS: dict[str, str] = {
    "llama3_1_8b": "llama-3.1-8b",
    "llama3_1_70b": "llama-3.1-70b",
    "llama3_1_405b": "llama-3.1-405b",
    "llama3_2_1b": "llama-3.2-1b",
    "llama3_2_3b": "llama-3.2-3b",
    "llama2_7b": "llama-2-7b",
    "llama2_13b": "llama-2-13b",
    "llama2_70b": "llama-2-70b",
    "mistral_7b": "mistral-7b",
    "qwen2_5_0_5b": "qwen2.5-0.5b",
    "qwen2_5_1_5b": "qwen2.5-1.5b",
    "qwen2_5_3b": "qwen2.5-3b",
    "qwen2_5_7b": "qwen2.5-7b",
    "qwen2_5_14b": "qwen2.5-14b",
    "qwen2_5_32b": "qwen2.5-32b",
    "qwen2_5_72b": "qwen2.5-72b",
    "qwen3_0_6b": "qwen3-0.6b",
    "qwen3_1_7b": "qwen3-1.7b",
    "qwen3_4b": "qwen3-4b",
    "qwen3_8b": "qwen3-8b",
    "qwen3_14b": "qwen3-14b",
    "qwen3_32b": "qwen3-32b",
    "gemma2_2b": "gemma-2-2b",
    "gemma2_9b": "gemma-2-9b",
    "gemma2_27b": "gemma-2-27b",
    "phi3_mini": "phi-3-mini",
    "phi4_14b": "phi-4",
    # Qwen2's builders have Qwen2.5's shapes (torchtune/models/qwen2/_model_builders.py qwen2_0_5b, qwen2_1_5b,
    # qwen2_7b: the vocab, layers, heads, widths of qwen2_5_0_5b, qwen2_5_1_5b_base, qwen2_5_7b_base); after the
    # qwen2_5 entries, so a plan is written as the qwen2_5 builder
    "qwen2_0_5b": "qwen2.5-0.5b",
    "qwen2_1_5b": "qwen2.5-1.5b",
    "qwen2_7b": "qwen2.5-7b",
}
# the builder a preset is written as: the models package, and the suffix where the package has _base/_instruct
_WRITE_SUFFIX = {
    "qwen2.5-1.5b": "_base",
    "qwen2.5-7b": "_base",
    "qwen2.5-14b": "_base",
    "qwen2.5-32b": "_base",
    "qwen2.5-72b": "_base",
    "qwen3-0.6b": "_base",
    "qwen3-1.7b": "_base",
    "qwen3-4b": "_base",
    "qwen3-8b": "_base",
    "qwen3-14b": "_base",
}
# models package -> (tokenizer builder, checkpointer model_type), as the shipped configs write them
_FAMILIES: dict[str, tuple[str, str]] = {
    "llama3_1": ("torchtune.models.llama3.llama3_tokenizer", "LLAMA3"),
    "llama3_2": ("torchtune.models.llama3.llama3_tokenizer", "LLAMA3_2"),
    "llama2": ("torchtune.models.llama2.llama2_tokenizer", "LLAMA2"),
    "mistral": ("torchtune.models.mistral.mistral_tokenizer", "MISTRAL"),
    "qwen2_5": ("torchtune.models.qwen2_5.qwen2_5_tokenizer", "QWEN2"),
    "qwen3": ("torchtune.models.qwen3.qwen3_tokenizer", "QWEN3"),
    "gemma2": ("torchtune.models.gemma.gemma_tokenizer", "GEMMA2"),
    "phi3": ("torchtune.models.phi3.phi3_mini_tokenizer", "PHI3_MINI"),
    "phi4": ("torchtune.models.phi4.phi4_tokenizer", "PHI4"),
}
_BUILDER = re.compile(r"^torchtune\.models\.(?P<family>\w+)\.(?P<kind>q?lora_)?(?P<name>\w+?)(_base|_instruct)?$")

# recipe -> (trains adapters, runs on one GPU); recipes/*.py
RECIPES: dict[str, tuple[bool, bool]] = {
    "full_finetune_single_device": (False, True),
    "full_finetune_distributed": (False, False),
    "lora_finetune_single_device": (True, True),
    "lora_finetune_distributed": (True, False),
    "knowledge_distillation_single_device": (True, True),  # a LoRA student beside a frozen teacher
    "knowledge_distillation_distributed": (True, False),
    "lora_dpo_single_device": (True, True),
    "lora_dpo_distributed": (True, False),
    "full_dpo_distributed": (False, False),
}
# the `tune run` line of a config's header comment: its first "tune run", then each flag read one way only
# (--name, =value, a count), so that a line that is no such command fails in linear time
_HEADER = re.compile(
    r"^#(?>.*?\btune run\b)(?P<flags>(?:\s++--[^\s=]++(?:=\S*+)?(?: \d++)?)*+)\s+"
    r"(?P<recipe>[a-z_]+)\s+--config",
    re.M,
)
_NPROC = re.compile(r"--nproc_per_node[ =](\d+)")

# torchtune/modules/peft/_utils.py LORA_ATTN_MODULES -> plan targets; apply_lora_to_mlp adapts w1 w2 w3
_ATTN = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "output_proj": "o"}
_MLP = ("gate", "up", "down")

# optimizer._component_ -> (precision.optimizer, precision.optimizer_library); the configs' spellings
OPTIMIZERS: dict[str, tuple[str, str | None]] = {
    "torch.optim.AdamW": ("adamw", None),
    "torch.optim.Adam": ("adamw", None),
    "bitsandbytes.optim.PagedAdamW8bit": ("paged_adamw_8bit", "bitsandbytes"),
    "bitsandbytes.optim.AdamW8bit": ("adamw_8bit", "bitsandbytes"),
    "bitsandbytes.optim.PagedAdamW": ("paged_adamw", None),
    "bitsandbytes.optim.PagedAdamW32bit": ("paged_adamw", None),
    "torchao.optim.AdamW8bit": ("adamw_8bit", "torchao"),
    "torchao.prototype.low_bit_optim.AdamW8bit": ("adamw_8bit", "torchao"),
    "torch.optim.Adafactor": ("adafactor", None),
    "bitsandbytes.optim.Lion": ("lion", None),
}
_OPTIMIZER_OUT = {
    "adamw": "torch.optim.AdamW",
    "paged_adamw": "bitsandbytes.optim.PagedAdamW",
    "paged_adamw_8bit": "bitsandbytes.optim.PagedAdamW8bit",
    "adafactor": "torch.optim.Adafactor",
    "lion": "bitsandbytes.optim.Lion",
    "sgd": "torch.optim.SGD",
    "sgd_momentum": "torch.optim.SGD",
}
_ADAMW_8BIT_OUT = {"bitsandbytes": "bitsandbytes.optim.AdamW8bit", "torchao": "torchao.optim.AdamW8bit"}
_OPTIMIZER_IGNORED = {"lr", "weight_decay", "betas", "eps", "amsgrad", "maximize", "capturable", "differentiable"}

# loss._component_ -> techniques.loss: both torchtune losses run the output projection and the fp32
# cross-entropy on num_output_chunks slices (torchtune/modules/loss, default 8)
LOSSES = {
    "torchtune.modules.loss.CEWithChunkedOutputLoss": "chunked",
    "torchtune.modules.loss.LinearCrossEntropyLoss": "chunked",
    "torch.nn.CrossEntropyLoss": "full",
}

IGNORED = frozenset(
    {  # logging, paths, data order, schedules, evaluation: no effect on a step's memory or time
        "output_dir",
        "seed",
        "shuffle",
        "checkpointer",
        "resume_from_checkpoint",
        "save_adapter_weights_only",
        "lr_scheduler",
        "metric_logger",
        "log_every_n_steps",
        "log_peak_memory_stats",
        "log_level",
        "profiler",
        "device",
        "clip_grad_norm",
        "run_val_every_n_steps",
        "dataset_val",
        "batch_size_val",
        "tensor_parallel_plan",
        "low_cpu_ram",
        "enable_async_checkpointing",
        "cudnn_deterministic_mode",
        "collate_fn",
        "resize_token_embeddings",
        "context_parallel_rotate_method",
        "epochs",
        "max_steps_per_epoch",
    }
)
UNMODELLED = {  # keys that change memory but no plan key says
    "custom_sharded_layers": "shards these modules as FSDP units of their own (their gathered copy is freed "
    "sooner); the plan gathers one layer at a time",
    "ac_mode": "torchtune's selective activation checkpointing; the plan reads enable_activation_checkpointing",
    "ac_option": "torchtune's selective activation checkpointing; the plan reads enable_activation_checkpointing",
    "quantizer": "quantization-aware training's fake-quantized copies of activations and weights",
}


def detect(text: str | Document) -> bool:
    """A torchtune config: YAML whose model names a `_component_` builder."""
    cfg = quiet_mapping(text)
    return isinstance(cfg.get("model"), dict) and "_component_" in cfg["model"]


def _recipe(text: str, gpus: int | None) -> tuple[str, bool, int | None, str]:
    """The recipe that runs the config (its header's `tune run` line; without one: a single-device recipe on one
    GPU, else a distributed one), whether it runs on one GPU, the GPU count, and where the count came from."""
    header = _HEADER.search(text)
    if header is None:
        single = gpus in (None, 1)
        return "", single, 1 if single else gpus, "gpus"
    recipe = header["recipe"]
    if recipe not in RECIPES:
        raise bad("tune run", recipe, f"is not a recipe this reader knows; allowed: {', '.join(RECIPES)}")
    single = RECIPES[recipe][1]
    if single and gpus not in (None, 1):
        raise bad("gpus", gpus, f"must be 1: the recipe {recipe} runs on a single device")
    nproc = _NPROC.search(header["flags"] or "")
    if gpus is None and nproc and not single:
        return recipe, single, int(nproc[1]), "tune run --nproc_per_node"
    return recipe, single, 1 if single else gpus, "gpus"


def _targets(model: dict[str, Any], r: Reading) -> list[str]:
    attn = model.get("lora_attn_modules")
    if not isinstance(attn, list) or any(not isinstance(m, str) or m not in _ATTN for m in attn):
        raise bad("model.lora_attn_modules", attn, f"must be a list of {', '.join(_ATTN)}")
    mlp = as_bool("model.apply_lora_to_mlp", model.get("apply_lora_to_mlp", False))  # builders' default False
    if as_bool("model.apply_lora_to_output", model.get("apply_lora_to_output", False)):
        r.unmodelled.append(
            "model.apply_lora_to_output: an adapter on the output projection; plan targets "
            "name the layers' projections only"
        )
    return [_ATTN[m] for m in attn] + (list(_MLP) if mlp else [])


# model.<key> of a LoRA builder -> (plan key, converter); torchtune/models/*/_component_builders.py lora_*
_LORA_KEYS: dict[str, tuple[str, Callable[[str, Any], Any]]] = {
    "lora_rank": ("workload.lora.rank", as_int),
    "lora_alpha": ("workload.lora.alpha", as_number),
    "lora_dropout": ("workload.lora.dropout", as_number),
    "use_dora": ("workload.lora.variant", lambda k, v: "dora" if as_bool(k, v) else "lora"),
}
_TARGET_KEYS = ("lora_attn_modules", "apply_lora_to_mlp", "apply_lora_to_output")


def _model(model: Any, r: Reading) -> None:
    """Read the model section: the preset or model name, the task, the adapters."""
    if not isinstance(model, dict) or not isinstance(model.get("_component_"), str):
        found = model.get("_component_") if isinstance(model, dict) else model
        raise bad("model._component_", found, "must name a torchtune model builder")
    component = model["_component_"]
    match = _BUILDER.match(component)
    preset = BUILDERS.get(match["name"]) if match else None
    if preset:
        r.set("model._component_", "model.preset", preset)
    quantized = as_bool("model.quantize_base", model.get("quantize_base", False))
    task = (
        "qlora"
        if (match and match["kind"] == "qlora_") or quantized
        else "lora"
        if match and match["kind"] == "lora_"
        else "finetune"
    )
    r.set("model._component_", "workload.task", task)
    for key, value in model.items():
        if key in _LORA_KEYS and task != "finetune":
            plan_key, convert = _LORA_KEYS[key]
            r.set(f"model.{key}", plan_key, convert(f"model.{key}", value))
        elif key not in ("_component_", "quantize_base", *_TARGET_KEYS):
            r.unknown.append(f"model.{key}")
    if task != "finetune":
        r.set("model.lora_attn_modules + model.apply_lora_to_mlp", "workload.lora.targets", _targets(model, r))
    if not preset:
        r.model_name.append(component)


# kd_loss._component_ the plan models: the forward KL (torchtune/modules/loss/kd_losses.py; the shipped KD configs')
_KD_LOSS = "torchtune.modules.loss.ForwardKLWithChunkedOutputLoss"


def _distillation(cfg: dict[str, Any], r: Reading) -> None:
    """A knowledge-distillation config (recipes/knowledge_distillation_*.py): teacher_model names the teacher's
    builder, kd_loss the loss and its num_output_chunks (default 8); kd_ratio weighs the two losses, both of which
    are computed whatever it is (the recipe's _loss_step), and teacher_checkpointer names files."""
    teacher = cfg.get("teacher_model")
    if teacher is None:
        return
    component = teacher.get("_component_") if isinstance(teacher, dict) else teacher
    match = _BUILDER.match(component) if isinstance(component, str) else None
    if match is None or match["name"] not in BUILDERS:
        raise bad("teacher_model._component_", component, "must name a torchtune model builder of a preset")
    r.set("teacher_model._component_", "workload.objective", "distillation")
    r.set("teacher_model._component_", "workload.distillation.teacher", BUILDERS[match["name"]])
    if match["kind"] == "qlora_":  # a QLoRA builder's base is NF4 (torchtune/modules/peft/lora.py quantize_base)
        r.set("teacher_model._component_", "workload.distillation.teacher_weights", "nf4")
    if match["kind"]:
        r.note("teacher_model._component_", "a teacher built with LoRA adapters: their few parameters are not counted")
    kd = cfg.get("kd_loss") or {}
    loss = kd.get("_component_") if isinstance(kd, dict) else kd
    if loss != _KD_LOSS:
        r.note("kd_loss", f"{loss} is planned as the forward KL ({_KD_LOSS}), whose saved tensors it may not share")
    if isinstance(kd, dict) and "num_output_chunks" in kd:
        chunks = as_int("kd_loss.num_output_chunks", kd["num_output_chunks"])
        r.set("kd_loss.num_output_chunks", "workload.distillation.loss_chunks", chunks)
    r.ignored.extend(("kd_ratio", "teacher_checkpointer"))


# loss._component_ of the DPO recipes -> workload.preference.loss_type (pytorch/torchtune@bd2a0fc
# torchtune/rlhf/loss/dpo.py, the two PreferenceLoss modules, neither reference-free): DPOLoss is DPO's sigmoid
# loss; RSOLoss is the hinge loss on the same policy and reference log-probabilities of the chosen and rejected
# completions (TRL's loss_type hinge), so it costs what dpo does
PREFERENCE_LOSSES = {"torchtune.rlhf.loss.DPOLoss": "dpo", "torchtune.rlhf.loss.RSOLoss": "dpo"}
# the task -> the reference the DPO recipes run (pytorch/torchtune@bd2a0fc): recipes/lora_dpo_single_device.py and
# lora_dpo_distributed.py train() run the reference as the policy `with torch.no_grad(), disable_adapter(
# self._model)`; recipes/full_dpo_distributed.py loads a second model from ref_checkpointer
# (_setup_reference_model: frozen, eval, FSDP-sharded as the policy) and runs it under torch.no_grad
_DPO_REFERENCE = {
    "lora": ("disable_adapter", "adapters_disabled"),
    "qlora": ("disable_adapter", "adapters_disabled"),
    "finetune": ("ref_checkpointer", "separate"),
}


def _preference(cfg: dict[str, Any], r: Reading, recipe: str) -> bool:
    """A DPO recipe's config (recipes/*_dpo_*.py at pytorch/torchtune@bd2a0fc): the loss names the preference loss,
    the task the reference; each recipe's concatenated_forward runs the chosen and rejected completions as one
    batch of 2 × batch_size (the plan's preference step) and keeps all_logits whole, unchunked. Whether it is one."""
    loss = cfg.get("loss") or {}
    component = loss.get("_component_") if isinstance(loss, dict) else None
    dpo_recipe = "_dpo_" in recipe
    if not isinstance(component, str) or component not in PREFERENCE_LOSSES:
        if dpo_recipe:
            raise bad("loss._component_", component, f"must be a preference loss: {', '.join(PREFERENCE_LOSSES)}")
        return False
    if recipe and not dpo_recipe:
        raise bad("loss._component_", component, f"is a preference loss, but recipe {recipe} trains next tokens")
    r.set("loss._component_", "workload.objective", "preference")
    r.set("loss._component_", "workload.preference.loss_type", PREFERENCE_LOSSES[component])
    if component == "torchtune.rlhf.loss.RSOLoss":
        r.note("loss._component_", "RSOLoss (hinge) is planned as dpo: the same log-probabilities, the same memory")
    task = r.plan["workload"]["task"]
    why, reference = _DPO_REFERENCE[task]
    source = f"recipe {recipe} ({why})" if recipe else f"{why} (absent: no tune run line; the {task} DPO recipe's)"
    r.set(source, "workload.preference.reference", reference)
    r.set("loss._component_ (concatenated_forward: all_logits, no chunks)", "techniques.loss", "full")
    r.ignored.extend(f"loss.{key}" for key in loss if key != "_component_")  # beta, label_smoothing, gamma
    if "ref_checkpointer" in cfg:
        r.ignored.append("ref_checkpointer: names the reference's files")
    return True


# the sequence length of a config whose tokenizer sets no max_seq_len
SEQUENCE_WHY = (
    "tokenizer.max_seq_len unset: torchtune truncates no sample, each batch is as long as its longest; "
    "planned at the plan's default 4096"
)


def _tokenizer(cfg: dict[str, Any], r: Reading) -> int | None:
    tokenizer = cfg.get("tokenizer") or {}
    if not isinstance(tokenizer, dict):
        raise bad("tokenizer", tokenizer, "must be a mapping with _component_, path and max_seq_len")
    length = tokenizer.get("max_seq_len")
    if length is None:
        r.unmodelled.append(
            "tokenizer.max_seq_len: null: no cap, each batch is as long as its longest sample; "
            "the plan keeps its own sequence_length"
        )
    else:
        r.set("tokenizer.max_seq_len", "workload.sequence_length", as_int("tokenizer.max_seq_len", length))
    r.ignored.extend(f"tokenizer.{key}" for key in tokenizer if key != "max_seq_len")
    return length


def _dataset(cfg: dict[str, Any], r: Reading, length: int | None) -> None:
    datasets = cfg.get("dataset") or {}
    datasets = datasets if isinstance(datasets, list) else [datasets]
    packed = any(isinstance(d, dict) and as_bool("dataset.packed", d.get("packed", False)) for d in datasets)
    if packed and length is None:
        raise bad("dataset.packed", True, "needs tokenizer.max_seq_len (each pack is that long)")
    if packed:
        r.ignored.append("dataset.packed: packed sequences are max_seq_len long, as the plan takes them")
    else:
        r.unmodelled.append(
            "dataset.packed: False: each batch is padded to its longest sample, up to max_seq_len; "
            "the plan takes every sequence at its sequence_length (an upper bound)"
        )
    r.ignored.extend(f"dataset.{key}" for d in datasets if isinstance(d, dict) for key in d if key != "packed")


def _optimizer(cfg: dict[str, Any], r: Reading) -> None:
    optimizer = cfg.get("optimizer")
    if not isinstance(optimizer, dict) or not isinstance(optimizer.get("_component_"), str):
        raise PlanError("optimizer._component_", "missing: the config must name its optimizer")
    component = optimizer["_component_"]
    if component == "torch.optim.SGD":
        momentum = as_number("optimizer.momentum", optimizer.get("momentum", 0))
        r.set("optimizer._component_", "precision.optimizer", "sgd_momentum" if momentum else "sgd")
    elif component in OPTIMIZERS:
        name, library = OPTIMIZERS[component]
        r.set("optimizer._component_", "precision.optimizer", name)
        if library:
            r.set("optimizer._component_", "precision.optimizer_library", library)
    else:
        r.unmodelled.append(
            f"optimizer._component_: {component} is no optimizer the plan knows; planned as the recipe's"
        )
    if component.startswith("torch.optim."):  # torch/optim/optimizer.py: foreach on CUDA unless fused or foreach=False
        fused = as_bool("optimizer.fused", optimizer.get("fused", False))
        foreach = as_bool("optimizer.foreach", optimizer.get("foreach", True))
        impl = "fused" if fused else "foreach" if foreach else "forloop"
        r.set(
            "optimizer.fused" if "fused" in optimizer else "optimizer.fused (absent: PyTorch's foreach)",
            "precision.optimizer_impl",
            impl,
        )
    for key, value in optimizer.items():
        if key == "block_size" and component in OPTIMIZERS and OPTIMIZERS[component][1] == "torchao":
            r.set("optimizer.block_size", "precision.optimizer_block_size", as_int("optimizer.block_size", value))
        elif key in _OPTIMIZER_IGNORED:
            r.ignored.append(f"optimizer.{key}")
        elif key == "min_8bit_size":
            r.unmodelled.append("optimizer.min_8bit_size: bitsandbytes keeps 32-bit states for smaller tensors")
        elif key not in ("_component_", "fused", "foreach", "momentum"):
            r.unknown.append(f"optimizer.{key}")


def _loss(cfg: dict[str, Any], r: Reading) -> None:
    loss = cfg.get("loss") or {}
    component = loss.get("_component_") if isinstance(loss, dict) else None
    if not isinstance(component, str) or component not in LOSSES:
        raise bad("loss._component_", component, f"is not a loss this reader knows; allowed: {', '.join(LOSSES)}")
    r.set("loss._component_", "techniques.loss", LOSSES[component])
    for key, value in loss.items():
        if key == "num_output_chunks":
            r.set("loss.num_output_chunks", "techniques.loss_chunks", as_int("loss.num_output_chunks", value))
        elif key != "_component_":
            r.ignored.append(f"loss.{key}")


def _dtype(key: str, value: Any) -> str:
    # training/precision.py PRECISION_STR_TO_DTYPE; the recipes refuse fp16 ("full fp16 training is not supported")
    if value not in ("bf16", "fp32"):
        raise bad(key, value, "must be bf16 or fp32 (torchtune's recipes refuse fp16)")
    return value


def _compile(key: str, value: Any) -> bool:
    # recipes/full_finetune_distributed.py: compile is a bool, or a mapping of what to compile (model, loss, ...)
    return bool(value) if isinstance(value, dict) else as_bool(key, value)


# top-level key -> (plan key, converter), and the recipes' default where the key is absent and its plan value
# differs from the torchtune recipe in frameworks.yaml (None: absent leaves the recipe's value)
SIMPLE: dict[str, tuple[str, Callable[[str, Any], Any], Any]] = {
    "batch_size": ("workload.micro_batch_size", as_int, None),
    "dtype": ("precision.compute", _dtype, None),
    # recipes/*.py: cfg.get("enable_activation_checkpointing", False); frameworks.yaml has full (the configs')
    "enable_activation_checkpointing": (
        "techniques.activation_checkpointing",
        lambda k, v: "full" if as_bool(k, v) else "none",
        False,
    ),
    "enable_activation_offloading": ("techniques.activation_offload", as_bool, None),
    "compile": ("techniques.compile", _compile, None),
    "fsdp_cpu_offload": ("techniques.offload", lambda k, v: "optimizer_and_params" if as_bool(k, v) else "none", None),
}
# recipes/full_finetune_*.py: optimizer_in_bwd (cfg.get default False); the LoRA recipes do not read it
_FULL_ONLY = {"optimizer_in_bwd": ("techniques.optimizer_in_backward", as_bool, False)}
_DISTRIBUTED = (
    "tensor_parallel_dim",
    "context_parallel_dim",
    "data_parallel_shard_dim",
    "data_parallel_replicate_dim",
    "fsdp_reshard_after_forward",
    "fsdp_cpu_offload",
    "custom_sharded_layers",
)
_SECTIONS = (
    "model",
    "tokenizer",
    "dataset",
    "optimizer",
    "loss",
    "gradient_accumulation_steps",
    "teacher_model",
    "kd_loss",
    "ref_checkpointer",
)


def _simple(cfg: dict[str, Any], r: Reading, table: dict[str, tuple[str, Callable, Any]]) -> None:
    for key, (plan_key, convert, absent) in table.items():
        if key in cfg:
            r.set(key, plan_key, convert(key, cfg[key]))
        elif absent is not None:
            r.set(f"{key} (absent: the recipe's default {absent})", plan_key, convert(key, absent))


def _parallel(cfg: dict[str, Any], r: Reading, recipe: str, count: int | None) -> int | None:
    """FSDP2 over the data ranks (recipes/*_distributed.py, training/_distributed.py ParallelDims); returns the
    data-parallel degree where the GPU count is known."""
    tp = as_int("tensor_parallel_dim", cfg.get("tensor_parallel_dim", 1))
    cp = as_int("context_parallel_dim", cfg.get("context_parallel_dim", 1))
    replicate = as_int("data_parallel_replicate_dim", cfg.get("data_parallel_replicate_dim", 1))
    shard = cfg.get("data_parallel_shard_dim", -1)  # -1: the GPUs the other dims leave
    split = tp * cp * replicate
    if shard != -1:
        shard = as_int("data_parallel_shard_dim", shard)
        if count is not None and shard * split != count:
            raise bad(
                "data_parallel_shard_dim",
                shard,
                f"× data_parallel_replicate_dim × tensor_parallel_dim × "
                f"context_parallel_dim = {shard * split} must equal the GPU count ({count})",
            )
        count = shard * split
        r.set("data_parallel_shard_dim", "hardware.count", count)
    elif count is not None and count % split:
        raise bad(
            "tensor_parallel_dim",
            tp,
            f"× context_parallel_dim × data_parallel_replicate_dim = {split} must divide the GPU count ({count})",
        )
    reshard = as_bool("fsdp_reshard_after_forward", cfg.get("fsdp_reshard_after_forward", True))
    # reshard_after_forward False keeps each layer's gathered parameters from forward to backward (ZeRO-2)
    r.set(
        f"recipe {recipe or 'distributed'} (FSDP2)" + ("" if reshard else " + fsdp_reshard_after_forward"),
        "parallelism.zero_stage",
        3 if reshard else 2,
    )
    for key, plan_key, value in (
        ("tensor_parallel_dim", "parallelism.tensor", tp),
        ("context_parallel_dim", "parallelism.context", cp),
    ):
        if key in cfg:
            r.set(key, plan_key, value)
    # models/llama3/_parallelism.py: the TP plan runs the norms as SequenceParallel
    r.set("tensor_parallel_dim", "parallelism.sequence_parallel", tp > 1)
    if replicate > 1:
        shards = "each shard group" if count is None else f"{count // split} ranks"
        r.unmodelled.append(
            f"data_parallel_replicate_dim: HSDP shards over {shards} and replicates "
            f"{replicate} times; the plan shards over every data rank"
        )
    return count // (tp * cp) if count is not None else None


def _batch(cfg: dict[str, Any], r: Reading, data: int | None) -> None:
    accumulation = as_int("gradient_accumulation_steps", cfg.get("gradient_accumulation_steps", 1))
    micro = cfg.get("batch_size")
    if data is not None and micro is not None:
        r.set(
            "batch_size × gradient_accumulation_steps × data ranks",
            "workload.global_batch_size",
            micro * accumulation * data,
        )
    elif accumulation > 1:
        r.unmodelled.append("gradient_accumulation_steps: the global batch needs the GPU count (give gpus)")
    epochs, per_epoch = cfg.get("epochs"), cfg.get("max_steps_per_epoch")
    if per_epoch is not None:
        r.set(
            "epochs × max_steps_per_epoch",
            "workload.steps",
            as_int("epochs", epochs) * as_int("max_steps_per_epoch", per_epoch),
        )


def read(text: str | Document, *, gpus: int | None = None) -> Imported:
    """A torchtune config read as a partial plan (see the module's docstring)."""
    doc = document(text)
    cfg = mapping(doc)
    r = Reading(format="torchtune", plan={"framework": "torchtune"})
    recipe, single, count, count_source = _recipe(doc.text, gpus)
    _model(cfg.get("model"), r)
    _distillation(cfg, r)
    task = r.plan["workload"]["task"]
    if recipe and RECIPES[recipe][0] != (task != "finetune"):
        raise bad(
            "model._component_",
            cfg["model"]["_component_"],
            f"{'is' if task == 'finetune' else 'is not'} a full model builder, but recipe {recipe} trains "
            f"{'adapters' if RECIPES[recipe][0] else 'every weight'}",
        )
    if count is not None:
        r.set(count_source, "hardware.count", count)
    data = 1 if single else _parallel(cfg, r, recipe, count)
    _simple(cfg, r, SIMPLE if not single else {k: v for k, v in SIMPLE.items() if k not in _DISTRIBUTED})
    if task == "finetune" and not single and cfg.get("optimizer_in_bwd"):
        r.set("optimizer_in_bwd", "techniques.optimizer_in_backward", False)
        r.unmodelled.append(
            "optimizer_in_bwd: True: the plan models the optimizer in backward without FSDP only; "
            "planned with a full set of gradients"
        )
    elif task == "finetune":
        _simple(cfg, r, _FULL_ONLY)
    _dataset(cfg, r, _tokenizer(cfg, r))
    _optimizer(cfg, r)
    if not _preference(cfg, r, recipe):
        _loss(cfg, r)
    _batch(cfg, r, data)
    _sort(cfg, r, single, task)
    return marked(r.imported(), training_defaults("torchtune", sequence=SEQUENCE_WHY))


def _sort(cfg: dict[str, Any], r: Reading, single: bool, task: str) -> None:
    """Account for the top-level keys the readers above did not take."""
    for key in cfg:
        if single and key in _DISTRIBUTED or task != "finetune" and key in _FULL_ONLY:
            r.ignored.append(f"{key}: not read by this recipe")
    r.sort_rest(
        cfg, known=frozenset({*_SECTIONS, *SIMPLE, *_FULL_ONLY, *_DISTRIBUTED}), ignored=IGNORED, unmodelled=UNMODELLED
    )


# plan values the recipes cannot run: (plan key, allowed values, why)
_WRITABLE: tuple[tuple[str, tuple[Any, ...], str], ...] = (
    ("precision.compute", ("bf16", "fp32"), "torchtune's dtype is bf16 or fp32"),
    ("techniques.activation_checkpointing", ("none", "full"), "enable_activation_checkpointing is on or off"),
    ("techniques.loss", ("full", "chunked"), "torchtune's losses are chunked or torch.nn.CrossEntropyLoss"),
    (
        "techniques.offload",
        ("none", "optimizer_and_params"),
        "fsdp_cpu_offload moves parameters, gradients and optimizer states together",
    ),
    ("techniques.attention", ("flash",), "torchtune's attention is SDPA"),
)


def _check_writable(plan: Plan) -> None:
    for key, allowed, why in _WRITABLE:
        value = _attr(plan, key)
        if value not in allowed:
            raise bad(key, value, f"cannot be said in a torchtune config: {why}")
    wl, prec, par = plan.workload, plan.precision, plan.parallelism
    if prec.master_weights == "fp32" and prec.compute != "fp32":
        raise bad("precision.master_weights", "fp32", "cannot be said: torchtune trains in its one dtype")
    frozen = "nf4" if wl.task == "qlora" else prec.compute  # the qlora builders' torchao NF4, else the dtype
    if prec.weights != frozen:
        raise bad("precision.weights", prec.weights, f"cannot be said: torchtune's {wl.task} weights are {frozen}")
    if wl.task in ("lora", "qlora") and 0 < len(set(wl.lora.targets) & set(_MLP)) < 3:
        raise bad(
            "workload.lora.targets",
            list(wl.lora.targets),
            "cannot be said: apply_lora_to_mlp adapts all of gate, up and down or none",
        )
    if (plan.hardware.count > 1 or par.zero_stage) and par.zero_stage not in (2, 3):
        raise bad(
            "parallelism.zero_stage",
            par.zero_stage,
            "cannot be said: the distributed recipes shard with FSDP2 (3, or 2 with fsdp_reshard_after_forward False)",
        )
    if par.pipeline > 1 or par.expert > 1:
        raise bad(
            "parallelism.pipeline" if par.pipeline > 1 else "parallelism.expert",
            max(par.pipeline, par.expert),
            "cannot be said: torchtune's recipes have no such parallelism",
        )
    if wl.objective != "next_token":
        raise bad("workload.objective", wl.objective, "cannot be said: this writer writes the fine-tuning recipes")


def _attr(plan: Plan, dotted: str) -> Any:
    node: Any = plan
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def _builder(plan: Plan) -> tuple[str, str]:
    """The model builder's component and its models package."""
    preset = plan.model.preset
    names = [name for name, p in BUILDERS.items() if p == preset]
    if preset is None or not names:
        raise bad(
            "model.preset",
            preset,
            f"has no torchtune model builder; allowed: {', '.join(sorted(set(BUILDERS.values())))}",
        )
    if not checkpoint(plan):
        raise bad("model.preset", preset, "has other layers here: a torchtune builder builds the preset's own")
    family = next(f for f in sorted(_FAMILIES, key=len, reverse=True) if names[0].startswith(f))
    prefix = {"lora": "lora_", "qlora": "qlora_"}.get(plan.workload.task, "")
    return f"torchtune.models.{family}.{prefix}{names[0]}{_WRITE_SUFFIX.get(preset, '')}", family


def _write_model(plan: Plan, component: str) -> dict[str, Any]:
    model: dict[str, Any] = {"_component_": component}
    lora = plan.workload.lora
    if plan.workload.task in ("lora", "qlora"):
        model.update(
            lora_attn_modules=[m for m, t in _ATTN.items() if t in lora.targets],
            apply_lora_to_mlp="gate" in lora.targets,
            apply_lora_to_output=False,
            lora_rank=lora.rank,
            lora_alpha=lora.alpha,
            lora_dropout=lora.dropout,
        )
        if lora.variant == "dora":
            model["use_dora"] = True
    return model


def _write_optimizer(plan: Plan) -> dict[str, Any]:
    prec = plan.precision
    if prec.optimizer == "adamw_8bit":
        return {"_component_": _ADAMW_8BIT_OUT[prec.eight_bit_library], "lr": 2e-5}
    if prec.optimizer not in _OPTIMIZER_OUT:
        raise bad("precision.optimizer", prec.optimizer, "cannot be said: torchtune has no such optimizer")
    optimizer: dict[str, Any] = {"_component_": _OPTIMIZER_OUT[prec.optimizer], "lr": 2e-5}
    if prec.optimizer == "sgd_momentum":
        optimizer["momentum"] = 0.9
    if optimizer["_component_"].startswith("torch.optim."):
        optimizer["fused"] = prec.optimizer_impl == "fused"
        if prec.optimizer_impl == "forloop":
            optimizer["foreach"] = False
    return optimizer


def write(plan: Plan) -> str:
    """The torchtune config (with the `tune run` line in its header) that runs the plan."""
    _check_writable(plan)
    wl, par, tech = plan.workload, plan.parallelism, plan.techniques
    component, family = _builder(plan)
    single = plan.hardware.count == 1 and par.zero_stage == 0
    recipe = (
        ("lora" if wl.task in ("lora", "qlora") else "full")
        + "_finetune_"
        + ("single_device" if single else "distributed")
    )
    tokenizer, model_type = _FAMILIES[family]
    checkpoints = f"/tmp/{plan.model.preset}"
    cfg: dict[str, Any] = {
        "output_dir": f"/tmp/torchtune/{plan.model.preset}",
        "model": _write_model(plan, component),
        "tokenizer": {
            "_component_": tokenizer,
            "path": f"{checkpoints}/original/tokenizer.model",
            "max_seq_len": wl.sequence_length,
        },
        "checkpointer": {
            "_component_": "torchtune.training.FullModelHFCheckpointer",
            "checkpoint_dir": checkpoints,
            "checkpoint_files": {"filename_format": "model-{}-of-{}.safetensors", "max_filename": "00004"},
            "output_dir": "${output_dir}",
            "model_type": model_type,
        },
        "dataset": {"_component_": "torchtune.datasets.alpaca_cleaned_dataset", "packed": True},
        "seed": None,
        "shuffle": True,
        "batch_size": wl.micro_batch_size,
        "epochs": 1,
        "max_steps_per_epoch": wl.steps,
        "gradient_accumulation_steps": plan.micro_batches_per_step,
        "optimizer": _write_optimizer(plan),
        "loss": {"_component_": "torchtune.modules.loss.LinearCrossEntropyLoss", "num_output_chunks": tech.loss_chunks}
        if tech.loss == "chunked"
        else {"_component_": "torch.nn.CrossEntropyLoss"},
        "compile": tech.compile,
        "device": "cuda",
        "dtype": plan.precision.compute,
        "enable_activation_checkpointing": tech.activation_checkpointing == "full",
        "enable_activation_offloading": tech.activation_offload,
    }
    if wl.task not in ("lora", "qlora"):
        cfg["optimizer_in_bwd"] = tech.optimizer_in_backward
    if not single:
        cfg.update(
            tensor_parallel_dim=par.tensor,
            context_parallel_dim=par.context,
            fsdp_cpu_offload=tech.offload != "none",
            fsdp_reshard_after_forward=par.zero_stage == 3,
        )
        if par.tensor > 1:
            cfg["tensor_parallel_plan"] = {"_component_": "torchtune.models.llama3.base_llama_tp_plan"}
    launch = (
        "tune run "
        + ("" if single else f"--nproc_per_node {plan.hardware.count} ")
        + f"{recipe} --config ./config.yaml"
    )
    source = f" from the plan {plan.name!r}" if plan.name else ""
    header = f"# Config for {recipe}.py, written by VRAM Planner{source}.\n# To launch, run:\n#   {launch}\n\n"
    return header + yaml.safe_dump(cfg, sort_keys=False)


FORMAT = Format(
    name="torchtune",
    label="torchtune recipe config (YAML)",
    framework="torchtune",
    suffix=".yaml",
    detect=detect,
    read=read,
    write=write,
    says=(
        "workload.task",
        "workload.sequence_length",
        "workload.micro_batch_size",
        "workload.global_batch_size",
        "workload.steps",
        "workload.lora.rank",
        "workload.lora.alpha",
        "workload.lora.targets",
        "workload.lora.dropout",
        "workload.lora.variant",
        "precision.compute",
        "precision.optimizer",
        "precision.optimizer_impl",
        "precision.optimizer_library",
        "techniques.activation_checkpointing",
        "techniques.activation_offload",
        "techniques.optimizer_in_backward",
        "techniques.loss",
        "techniques.loss_chunks",
        "techniques.compile",
        "techniques.offload",
        "parallelism.zero_stage",
        "parallelism.tensor",
        "parallelism.sequence_parallel",
        "parallelism.context",
        "parallelism.data",
        "hardware.count",
    ),
    cannot_say={
        "precision.master_weights": "torchtune trains in its one dtype (bf16 or fp32): no fp32 master copy",
        "precision.gradients": "gradients are in the training dtype",
        "precision.optimizer_state": "optimizer states are in the training dtype (or the 8-bit optimizer's)",
        "precision.weights": "the frozen base is the training dtype (LoRA) or torchao NF4 (QLoRA)",
        "precision.quant_group_size": "torchao NF4 blocks are 64 values",
        "precision.double_quant": "torchao NF4 always quantizes its scales",
        "precision.fp32_embedding_states": "no per-module optimizer override",
        "techniques.attention": "attention is SDPA",
        "techniques.compile_scope": "compile is the model and the loss together",
        "techniques.checkpoint_every": "enable_activation_checkpointing wraps every layer",
        "parallelism.pipeline": "the recipes have no pipeline parallelism",
        "parallelism.expert": "the recipes have no expert parallelism",
        "workload.train_tokens": "a job's length is epochs × max_steps_per_epoch: give workload.steps",
        "workload.task": "pretrain reads back as finetune (the same memory)",
        **dict.fromkeys(
            ("parallelism.reduce_bucket_elements", "parallelism.sub_group_elements"),
            "DeepSpeed's: FSDP2 has no such buckets",
        ),
        "parallelism.sequence_parallel": "off with tensor parallelism: the recipes' TP plans run the norms "
        "sequence-parallel",
        "techniques.expandable_segments": "off: torchtune sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        "itself when it is unset",
        "framework_release": RELEASE_WHY,
        "parallelism.flat_params": "FSDP2 shards each parameter: no flat parameters",
    },
)
