"""Axolotl YAML configs in and out.

Axolotl trains through the HF Trainer on a model it loads itself: `base_model` names the model, `adapter` and
`load_in_4bit` / `load_in_8bit` the task, `fsdp_config` or `deepspeed` the sharding. Defaults are the config
schema's: axolotl-ai-cloud/axolotl at 067b021 (2026-07-24), src/axolotl/utils/schemas/{config,training,peft,
fsdp}.py; loaders/model.py for the 4-bit quantization.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import yaml

from planner.errors import PlanError, bad
from planner.formats import deepspeed, hf_trainer, trl
from planner.formats.base import RELEASE_WHY, Document, Format, Imported, checkpoint, marked, training_defaults
from planner.formats.reading import (
    Reading,
    as_bool,
    as_int,
    as_mapping,
    as_number,
    as_text,
    as_texts,
    choice,
    mapping,
    quiet_mapping,
)
from planner.plan.config import Plan
from planner.plan.models import presets

# lora_target_modules names -> plan targets (HF module names of the Llama-style models)
_TARGETS = {
    "q_proj": "q",
    "k_proj": "k",
    "v_proj": "v",
    "o_proj": "o",
    "gate_proj": "gate",
    "up_proj": "up",
    "down_proj": "down",
}
# optimizer -> (precision.optimizer, optimizer_impl, optimizer_library): TrainingArguments.optim's names, which Axolotl
# passes through (hf_trainer.OPTIMS), and those of Axolotl's own CustomSupportedOptimizers (utils/schemas/enums.py)
# the plan names: muon, and ao_adamw_8bit (torchao's AdamW8bit, as adamw_torch_8bit)
OPTIMIZERS: dict[str, tuple[str, str | None, str | None]] = {
    **hf_trainer.OPTIMS,
    "muon": ("muon", None, None),
    "ao_adamw_8bit": ("adamw_8bit", None, "torchao"),
}
# the spelling a plan's optimizer is written in (the first of OPTIMIZERS that reads back as it)
_OPTIMIZER_OUT = {spec: name for name, spec in reversed(OPTIMIZERS.items())}
# attn_implementation (config.py) -> techniques.attention: every backend but eager is a fused kernel
_EAGER = ("eager",)
_LEGACY_ATTENTION = {
    "flash_attention": "flash",
    "sdp_attention": "flash",
    "xformers_attention": "flash",
    "flex_attention": "flash",
    "sage_attention": "flash",
    "eager_attention": "eager",
}
# deepspeed_configs/*.json shipped with axolotl (axolotl@067b021): zero_optimization.stage and the offload their
# offload_optimizer / offload_param say (None: the parameters only, which the plan does not describe)
DEEPSPEED_CONFIGS: dict[str, tuple[int, str | None]] = {
    "zero1.json": (1, "none"),
    "zero1_torch_compile.json": (1, "none"),
    "zero2.json": (2, "optimizer"),
    "zero2_torch_compile.json": (2, "optimizer"),
    "zero3.json": (3, "none"),
    "zero3_bf16.json": (3, "none"),
    "zero3_bf16_cpuoffload_all.json": (3, "optimizer_and_params"),
    "zero3_bf16_cpuoffload_params.json": (3, None),
}
# any other file's name: its zero<stage>
_DEEPSPEED = re.compile(r"zero(?P<stage>[0-3])(?P<rest>[\w-]*)")
# what ends a file name's last word (the one _DEEPSPEED reads: run on the whole name, it is quadratic in its length)
_NOT_WORD = re.compile(r"[^\w-]")
_LIGER = "axolotl.integrations.liger.LigerPlugin"
_CCE = "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"

IGNORED = frozenset(
    {  # data, logging, schedules, evaluation cadence, saving: no effect on a step's memory or time
        "model_type",
        "tokenizer_type",
        "base_model_config",
        "trust_remote_code",
        "datasets",
        "dataset_prepared_path",
        "val_set_size",
        "output_dir",
        "lora_model_dir",
        "wandb_project",
        "wandb_entity",
        "wandb_watch",
        "wandb_name",
        "wandb_log_model",
        "hub_model_id",
        "lr_scheduler",
        "learning_rate",
        "warmup_ratio",
        "warmup_steps",
        "evals_per_epoch",
        "saves_per_epoch",
        "eval_steps",
        "save_steps",
        "weight_decay",
        "special_tokens",
        "resume_from_checkpoint",
        "logging_steps",
        "chat_template",
        "strict",
        "seed",
        "train_on_inputs",
        "eval_sample_packing",
        "gradient_checkpointing_kwargs",
        "tf32",
        "max_grad_norm",
        "num_epochs",
        "early_stopping_patience",
        "local_rank",
        "save_total_limit",
        "group_by_length",
        "debug",
        "save_first_step",
        "xformers_attention_kwargs",
        "tokens",
        "shuffle_merged_datasets",
        "dataset_processes",
        "save_safetensors",
        "fsdp_final_state_dict_type",
        "peft_use_rslora",
        "lr_quadratic_warmup",
        "loss_watchdog_threshold",
        "loss_watchdog_patience",
    }
)
UNMODELLED = {
    "lora_modules_to_save": "these modules (often embed_tokens and lm_head) train fully: gradients and optimizer "
    "states for them too",
    "unfrozen_parameters": "only these parameters train; the plan trains every weight",
    "eval_batch_size": "evaluation runs at this micro-batch size",
    "liger_rope": "Liger's fused RoPE saves fewer intermediates",
    "liger_rms_norm": "Liger's fused RMSNorm saves fewer intermediates",
    "liger_glu_activation": "Liger's fused SwiGLU saves fewer intermediates",
    "liger_layer_norm": "Liger's fused LayerNorm saves fewer intermediates",
    "tensor_parallel_size": "DeepSpeed AutoTP; the plan's tensor parallelism is Megatron-style",
    "dp_replicate_size": "HSDP replicates the shards; the plan shards over every data rank",
    "dp_shard_size": "shards over this many ranks (HSDP where fewer than the GPUs)",
    "lora_rank_pattern": "per-module ranks",
    "peft_layers_to_transform": "adapters on some layers only",
    "layer_offloading": "layer parameters offloaded to CPU between uses",
    "selective_checkpointing": "saves attention outputs inside checkpointed layers",
}
_ALL_LINEAR = list(_TARGETS.values())  # lora_target_linear: every linear layer of the blocks (peft all-linear)
_DOUBLE_QUANT = "bnb_config_kwargs.bnb_4bit_use_double_quant"
# schemas/peft.py: lora_r, lora_alpha (None: peft's own), lora_dropout (default 0.0)
_LORA_KEYS = (
    ("lora_r", "workload.lora.rank", as_int),
    ("lora_alpha", "workload.lora.alpha", as_number),
    ("lora_dropout", "workload.lora.dropout", as_number),
)


def detect(text: str | Document) -> bool:
    """An Axolotl config: YAML naming a base_model and Axolotl's own keys (not a torchtune `_component_` config)."""
    cfg = quiet_mapping(text)
    return "base_model" in cfg and bool(
        {"sequence_len", "micro_batch_size", "adapter", "datasets", "num_epochs"} & set(cfg)
    )


def _model(cfg: dict[str, Any], r: Reading) -> None:
    name = cfg.get("base_model")
    if not isinstance(name, str) or not name:
        raise bad("base_model", name, "must name the model (a Hugging Face repo id or path)")
    r.model("base_model", name)  # preset_for reads Meta's first repo names too (NousResearch/Meta-Llama-3.1-8B)


def _task(cfg: dict[str, Any], r: Reading) -> str:
    adapter = cfg.get("adapter")
    four = as_bool("load_in_4bit", cfg.get("load_in_4bit") or False)
    eight = as_bool("load_in_8bit", cfg.get("load_in_8bit") or False)
    if adapter not in (None, "lora", "qlora"):
        raise bad("adapter", adapter, "must be lora or qlora (or absent: full fine-tuning)")
    if adapter == "qlora" and not four:
        raise bad("adapter", "qlora", "needs load_in_4bit: true")
    if adapter is None and (four or eight):
        raise bad(
            "load_in_4bit" if four else "load_in_8bit",
            True,
            "needs an adapter (lora or qlora): a quantized base trains adapters only",
        )
    if adapter is None:
        r.set("adapter (absent)", "workload.task", "finetune")
        return "finetune"
    task = "qlora" if four or eight else "lora"
    r.set("adapter", "workload.task", task)
    if task == "qlora":
        r.set("load_in_4bit" if four else "load_in_8bit", "precision.weights", "nf4" if four else "int8")
    if four:  # loaders/model.py: BitsAndBytesConfig(bnb_4bit_use_double_quant=True, quant_type nf4) unless overridden
        kwargs = as_mapping("bnb_config_kwargs", cfg.get("bnb_config_kwargs") or {})
        r.set(
            _DOUBLE_QUANT if "bnb_4bit_use_double_quant" in kwargs else "load_in_4bit (loaders/model.py)",
            "precision.double_quant",
            as_bool(_DOUBLE_QUANT, kwargs.get("bnb_4bit_use_double_quant", True)),
        )
    return task


# rl (schemas/enums.py RLType) → workload.preference.loss_type: core/builders/rl.py builds DPOTrainer for dpo and ipo
# (trainers/dpo/__init__.py: ipo sets loss_type ["ipo"], dpo passes dpo_loss_type), CPOTrainer with loss_type simpo
# for simpo, ORPOTrainer for orpo, KTOTrainer for kto
_RL = {"dpo": "dpo", "ipo": "ipo", "simpo": "simpo", "orpo": "orpo", "kto": "kto"}
_RL_REFUSED = {
    **dict.fromkeys(("grpo", "gdpo"), trl.REFUSED["grpo"]),
    "ebft": f"energy-based fine-tuning (generates and scores completions each step) is {trl.ISSUE}",
}
_RL_KEYS = ("rl", "dpo_loss_type", "rl_adapter_ref_model", "precompute_ref_log_probs", "reward_model")


def _objective(cfg: dict[str, Any], r: Reading, task: str) -> None:
    """rl (a preference loss) or reward_model: true; the reference as train.py setup_reference_model builds it (none
    for orpo and simpo; the adapters disabled for an adapter unless rl_adapter_ref_model; else a second model loaded
    like the policy) unless precompute_ref_log_probs (DPOTrainer keeps none)."""
    if cfg.get("process_reward_model"):
        raise PlanError("process_reward_model", f"a process reward model (a score per step token) is {trl.ISSUE}")
    if cfg.get("reward_model"):
        r.set("reward_model", "workload.objective", "reward")
    rl = cfg.get("rl")
    if rl in _RL_REFUSED:
        raise PlanError("rl", f"{rl}: {_RL_REFUSED[rl]}")
    if not rl:
        return
    loss = choice("rl", rl, _RL)
    r.set("rl", "workload.objective", "preference")
    if loss == "dpo" and cfg.get("dpo_loss_type") is not None:
        loss, note = trl.dpo_loss("dpo_loss_type", cfg["dpo_loss_type"])
        if note:
            r.note("dpo_loss_type", note)
    r.set("dpo_loss_type" if "dpo_loss_type" in cfg and rl == "dpo" else "rl", "workload.preference.loss_type", loss)
    if loss in ("simpo", "orpo"):
        return
    if as_bool("precompute_ref_log_probs", cfg.get("precompute_ref_log_probs") or False):
        r.set("precompute_ref_log_probs", "workload.preference.reference", "precomputed")
    elif task != "finetune" and not as_bool("rl_adapter_ref_model", cfg.get("rl_adapter_ref_model") or False):
        r.set("adapter (train.py: no reference model; TRL disables the adapters)", trl.REFERENCE, "adapters_disabled")
    else:
        why = "rl_adapter_ref_model" if task != "finetune" else "adapter (absent: train.py loads a reference model)"
        r.set(why, trl.REFERENCE, "separate")


def _lora(cfg: dict[str, Any], r: Reading) -> None:
    for key, plan_key, convert in _LORA_KEYS:
        if cfg.get(key) is not None:
            r.set(key, plan_key, convert(key, cfg[key]))
    if cfg.get("peft_use_dora") is not None:
        dora = as_bool("peft_use_dora", cfg["peft_use_dora"])
        r.set("peft_use_dora", "workload.lora.variant", "dora" if dora else "lora")
    modules = as_texts("lora_target_modules", cfg.get("lora_target_modules") or [])
    linear = as_bool("lora_target_linear", cfg.get("lora_target_linear") or False)
    targets = set(_linear_layers(r)) if linear else set()
    for module in modules:  # a module's path ("self_attn.q_proj") names the projection by its last part
        *path, last = module.split(".")
        if last in _TARGETS and "experts" not in path:  # experts.*: an MoE's routed experts, not the dense MLP
            targets.add(_TARGETS[last])
        else:
            r.unmodelled.append(f"lora_target_modules: {module!r} is no projection the plan's targets name")
    if targets:
        r.set(
            "lora_target_linear" if linear and targets == set(_linear_layers(r)) else "lora_target_modules",
            "workload.lora.targets",
            [t for t in _ALL_LINEAR if t in targets],
        )


def _linear_layers(r: Reading) -> list[str]:
    """lora_target_linear's projections (peft all-linear: every linear layer of the blocks): a preset's GeLU or
    squared-ReLU MLP has no gate projection."""
    preset = r.plan.get("model", {}).get("preset")
    gated = preset is None or presets()[preset].model.mlp == "swiglu"
    return [t for t in _ALL_LINEAR if gated or t != "gate"]


def _precision(cfg: dict[str, Any], r: Reading) -> None:
    # config.py: bf16 defaults to "auto" (bf16 where the GPU has it); fp16, fp8, bfloat16, float16 to None
    if cfg.get("fp8"):
        r.set("fp8", "precision.compute", "fp8")
    elif cfg.get("fp16") or cfg.get("float16"):
        r.set("fp16" if cfg.get("fp16") else "float16", "precision.compute", "fp16")
    elif cfg.get("bf16", "auto") is False and not cfg.get("bfloat16"):
        r.set("bf16", "precision.compute", "fp32")
    elif "bf16" in cfg or "bfloat16" in cfg:
        r.set("bfloat16" if cfg.get("bfloat16") else "bf16", "precision.compute", "bf16")
    if cfg.get("fp8_enable_fsdp_float8_all_gather"):
        r.set("fp8_enable_fsdp_float8_all_gather", "precision.fp8_all_gather", True)
    optimizer = as_text("optimizer", cfg.get("optimizer", "adamw_torch_fused"))  # schemas/training.py default
    if optimizer not in OPTIMIZERS:
        r.unmodelled.append(f"optimizer: {optimizer} is no optimizer the plan knows; planned as the recipe's")
        return
    source = "optimizer" if "optimizer" in cfg else "optimizer (absent: the schema's adamw_torch_fused)"
    name, impl, library = OPTIMIZERS[optimizer]
    r.set(source, "precision.optimizer", name)
    if impl:
        r.set(source, "precision.optimizer_impl", impl)
    if library:
        r.set(source, "precision.optimizer_library", library)


def _techniques(cfg: dict[str, Any], r: Reading) -> None:
    checkpointing = cfg.get("gradient_checkpointing", False)  # config.py default False; frameworks.yaml: full
    if checkpointing not in (True, False, "offload", "offload_disk"):
        raise bad("gradient_checkpointing", checkpointing, "must be true, false, offload or offload_disk")
    r.set(
        "gradient_checkpointing" if "gradient_checkpointing" in cfg else "gradient_checkpointing (absent: false)",
        "techniques.activation_checkpointing",
        "full" if checkpointing else "none",
    )
    offload = cfg.get("activation_offloading") or checkpointing in ("offload", "offload_disk")
    if offload or "activation_offloading" in cfg:  # offload: the checkpointed layer inputs go to host memory
        r.set(
            "activation_offloading" if cfg.get("activation_offloading") is not None else "gradient_checkpointing",
            "techniques.activation_offload",
            bool(offload),
        )
    if checkpointing == "offload_disk" or cfg.get("activation_offloading") == "disk":
        r.unmodelled.append("gradient_checkpointing: offloads to disk, not host memory")
    if cfg.get("attn_implementation") is not None:
        r.set(
            "attn_implementation", "techniques.attention", "eager" if cfg["attn_implementation"] in _EAGER else "flash"
        )
    for key, attention in _LEGACY_ATTENTION.items():
        if cfg.get(key):
            r.set(key, "techniques.attention", attention)
    if cfg.get("torch_compile") is not None:  # "auto": compiled where torch supports it
        r.set("torch_compile", "techniques.compile", bool(cfg["torch_compile"]))
    plugins = as_texts("plugins", cfg.get("plugins") or [])
    liger = _LIGER in plugins and cfg.get("liger_fused_linear_cross_entropy")
    cce = _CCE in plugins and cfg.get("cut_cross_entropy", True)  # integrations/cut_cross_entropy/args.py default
    if liger or cce:
        r.set(
            f"plugins + {'liger_fused_linear_cross_entropy' if liger else 'cut_cross_entropy'}",
            "techniques.loss",
            "fused",
        )
    r.unmodelled.extend(f"plugins: {p} is not modelled" for p in plugins if p not in (_LIGER, _CCE))


def _fsdp(cfg: dict[str, Any], r: Reading) -> None:
    """fsdp / fsdp_config (schemas/fsdp.py; the legacy fsdp_-prefixed keys too): FULL_SHARD is ZeRO-3."""
    raw = as_mapping("fsdp_config", cfg.get("fsdp_config") or {})
    fsdp = {key.removeprefix("fsdp_"): value for key, value in raw.items()}
    grad_op = fsdp.get("sharding_strategy") == "SHARD_GRAD_OP" or fsdp.get("reshard_after_forward") is False
    r.set("fsdp_config", "parallelism.zero_stage", 2 if grad_op else 3)
    if fsdp.get("offload_params") is not None:
        r.set(
            "fsdp_config.offload_params",
            "techniques.offload",
            "optimizer_and_params" if as_bool("fsdp_config.offload_params", fsdp["offload_params"]) else "none",
        )
    if fsdp.get("activation_checkpointing"):
        r.set("fsdp_config.activation_checkpointing", "techniques.activation_checkpointing", "full")
    for key in fsdp:
        if key == "use_orig_params" and cfg.get("adapter"):
            r.unmodelled.append(
                "fsdp_config.use_orig_params: FSDP1 flat parameters (parallelism.flat_params) are not read"
            )
        elif key not in (
            "sharding_strategy",
            "reshard_after_forward",
            "offload_params",
            "activation_checkpointing",
            "version",
            "use_orig_params",
        ):
            r.ignored.append(f"fsdp_config.{key}")


def _deepspeed(cfg: dict[str, Any], r: Reading, files: Callable[[str], str | None] | None) -> None:
    """deepspeed: the config inline, or a JSON's path, read with the deepspeed format where `files` finds it; else
    the stage and offload of axolotl's own deepspeed_configs file of that name, else its name's zero<stage>."""
    value = cfg["deepspeed"]
    text = files(value) if files is not None and isinstance(value, str) else None
    if isinstance(value, dict) or text is not None:
        deepspeed.read_into(r, "deepspeed", text if text is not None else value)
        return
    name = str(value).replace("\\", "/").split("/")[-1]
    if name in DEEPSPEED_CONFIGS:
        stage, offload = DEEPSPEED_CONFIGS[name]
        source = f"deepspeed ({name}: axolotl's deepspeed_configs file)"
        r.set(source, "parallelism.zero_stage", stage)
        r.set(source, "techniques.offload", offload or "none")
        r.note("deepspeed", f"{value} is not beside the config: its stage and offload are axolotl's {name}'s")
        if offload is None:
            r.note("deepspeed", "offloads the parameters only; the plan offloads the optimizer with them")
        return
    match = _zero_file(str(value))
    if not match:
        r.unmodelled.append(f"deepspeed: {value}: the ZeRO stage is in that file, which is not beside the config")
        return
    r.set("deepspeed (file name)", "parallelism.zero_stage", int(match["stage"]))
    r.unmodelled.append(
        f"deepspeed: {value}: not beside the config: the stage was taken from its name (its offload, buckets "
        "and precision are the DeepSpeed defaults)"
    )


def _zero_file(name: str) -> re.Match | None:
    """The first `zero<stage>` of a `.json` file name's last word ("deepspeed_configs/zero3_bf16.json")."""
    stem = name.removesuffix("\n")
    return _DEEPSPEED.search(_NOT_WORD.split(stem[:-5])[-1]) if stem.endswith(".json") else None


def _batch(cfg: dict[str, Any], r: Reading, gpus: int | None) -> None:
    length = cfg.get("sequence_len", 512)  # config.py default 512
    r.set(
        "sequence_len" if "sequence_len" in cfg else "sequence_len (absent: 512)",
        "workload.sequence_length",
        as_int("sequence_len", length),
    )
    if cfg.get("sample_packing") or cfg.get("pad_to_sequence_len"):
        r.ignored.extend(k for k in ("sample_packing", "pad_to_sequence_len") if k in cfg)
    else:
        r.unmodelled.append(
            "sample_packing: false: each batch is padded to its longest sample, up to sequence_len; "
            "the plan takes every sequence at sequence_len (an upper bound)"
        )
    micro = as_int("micro_batch_size", cfg.get("micro_batch_size") or 1)  # training.py defaults 1 and 1
    accumulation = as_int("gradient_accumulation_steps", cfg.get("gradient_accumulation_steps") or 1)
    if "micro_batch_size" in cfg:
        r.set("micro_batch_size", "workload.micro_batch_size", micro)
    # sequence_parallel_degree: the deprecated name of context_parallel_size
    context = cfg.get("context_parallel_size") or cfg.get("sequence_parallel_degree") or 1
    context = as_int("context_parallel_size", context)
    if context > 1:
        r.set("context_parallel_size", "parallelism.context", context)
    _experts(cfg, r, gpus, context)
    if gpus is not None:
        if gpus % context:
            raise bad("context_parallel_size", context, f"must divide the GPU count ({gpus})")
        r.set("gpus", "hardware.count", gpus)
        r.set(
            "gradient_accumulation_steps × micro_batch_size × data ranks",
            "workload.global_batch_size",
            micro * accumulation * (gpus // context),
        )
    elif accumulation > 1:
        r.unmodelled.append("gradient_accumulation_steps: the global batch needs the GPU count (give gpus)")
    if cfg.get("max_steps") is not None:
        r.set("max_steps", "workload.steps", as_int("max_steps", cfg["max_steps"]))


def _experts(cfg: dict[str, Any], r: Reading, gpus: int | None, context: int) -> None:
    """expert_parallel_size (the ExpertParallelPlugin's: routed experts sharded over that many of the data ranks);
    without a GPU count, the fewest GPUs that run it (expert × context), said so."""
    experts = as_int("expert_parallel_size", cfg.get("expert_parallel_size") or 1)
    if experts == 1:
        return
    r.set("expert_parallel_size", "parallelism.expert", experts)
    if gpus is None:
        r.set(
            "expert_parallel_size (absent a GPU count: the fewest GPUs it runs on)", "hardware.count", experts * context
        )


_TAKEN = frozenset(
    {
        "base_model",
        "adapter",
        "load_in_4bit",
        "load_in_8bit",
        "bnb_config_kwargs",
        "lora_r",
        "lora_alpha",
        "lora_dropout",
        "peft_use_dora",
        "lora_target_modules",
        "lora_target_linear",
        "fp8",
        "fp16",
        "float16",
        "bf16",
        "bfloat16",
        "fp8_enable_fsdp_float8_all_gather",
        "optimizer",
        "gradient_checkpointing",
        "activation_offloading",
        "attn_implementation",
        *_LEGACY_ATTENTION,
        "torch_compile",
        "plugins",
        "liger_fused_linear_cross_entropy",
        "cut_cross_entropy",
        "fsdp",
        "fsdp_config",
        "fsdp_version",
        "deepspeed",
        "sequence_len",
        "sample_packing",
        "pad_to_sequence_len",
        "micro_batch_size",
        "gradient_accumulation_steps",
        "context_parallel_size",
        "sequence_parallel_degree",
        "max_steps",
        "expert_parallel_size",
        *_RL_KEYS,
    }
)


def read(
    text: str | Document, *, gpus: int | None = None, files: Callable[[str], str | None] | None = None
) -> Imported:
    """An Axolotl config read as a partial plan (see the module's docstring); `files` gives the text of the
    DeepSpeed file it names."""
    r = Reading(format="axolotl", plan={"framework": "axolotl"})
    cfg = {key: value for key, value in mapping(text).items() if value is not None}
    # a YAML null is the field's None, which Axolotl's schema and trainer builder take as unset: read as absent
    r.ignored.extend(f"{key}: null (read as absent)" for key, value in mapping(text).items() if value is None)
    _model(cfg, r)
    task = _task(cfg, r)
    if task != "finetune":
        _lora(cfg, r)
    _objective(cfg, r, task)
    _precision(cfg, r)
    _techniques(cfg, r)
    if cfg.get("fsdp") or cfg.get("fsdp_config"):
        _fsdp(cfg, r)
    if cfg.get("deepspeed"):
        _deepspeed(cfg, r, files)
    _batch(cfg, r, gpus)
    rest = {key: value for key, value in cfg.items() if key != "base_model"}  # read: the preset or model_name
    r.sort_rest(rest, known=_TAKEN, ignored=IGNORED, unmodelled=UNMODELLED)
    return marked(r.imported(), training_defaults("Axolotl"))


def _write_precision(plan: Plan, cfg: dict[str, Any]) -> None:
    prec = plan.precision
    cfg.update(bf16=prec.compute in ("bf16", "fp8"), fp16=prec.compute == "fp16", tf32=False)
    if prec.compute == "fp8":
        cfg.update(fp8=True, fp8_enable_fsdp_float8_all_gather=prec.fp8_all_gather)
    key = (prec.optimizer, prec.optimizer_impl if prec.optimizer == "adamw" else None, prec.optimizer_library)
    if key not in _OPTIMIZER_OUT:
        said = key[1] or key[2]
        raise bad("precision.optimizer", prec.optimizer, f"with {said} cannot be said in an Axolotl config")
    cfg["optimizer"] = _OPTIMIZER_OUT[key]


def _write_objective(plan: Plan, cfg: dict[str, Any]) -> None:
    """reward_model, or rl with the reference's keys (the inverse of _objective)."""
    wl = plan.workload
    if wl.objective == "reward":
        cfg["reward_model"] = True
    if wl.objective != "preference":
        return
    cfg["rl"] = wl.preference.loss_type
    if wl.preference.reference == "precomputed":
        cfg["precompute_ref_log_probs"] = True
    elif wl.preference.reference == "separate" and wl.task != "finetune":
        cfg["rl_adapter_ref_model"] = True


def _write_lora(plan: Plan, cfg: dict[str, Any]) -> None:
    wl, prec = plan.workload, plan.precision
    if wl.task not in ("lora", "qlora"):
        return
    if wl.task == "qlora" and prec.weights not in ("nf4", "int8"):
        raise bad("precision.weights", prec.weights, "cannot be said: bitsandbytes loads nf4 (load_in_4bit) or int8")
    four, eight = wl.task == "qlora" and prec.weights == "nf4", wl.task == "qlora" and prec.weights == "int8"
    cfg.update(
        adapter="qlora" if four else "lora",
        load_in_4bit=four,
        load_in_8bit=eight,
        lora_r=wl.lora.rank,
        lora_alpha=wl.lora.alpha,
        lora_dropout=wl.lora.dropout,
        lora_target_modules=[m for m, t in _TARGETS.items() if t in wl.lora.targets],
    )
    if wl.lora.variant == "dora":
        cfg["peft_use_dora"] = True
    if four and not prec.double_quant:
        cfg["bnb_config_kwargs"] = {"bnb_4bit_use_double_quant": False}


def _write_sharding(plan: Plan, cfg: dict[str, Any]) -> None:
    par, offload = plan.parallelism, plan.techniques.offload
    # ZeRO-1, and ZeRO-2 with the optimizer on the CPU: axolotl's deepspeed_configs/zero1.json, zero2.json
    shipped = {(1, "none"): "zero1.json", (2, "optimizer"): "zero2.json"}.get((par.zero_stage, offload))
    if not shipped and (offload == "optimizer" or (offload != "none" and par.zero_stage < 2)):
        raise bad(
            "techniques.offload",
            offload,
            f"cannot be said with ZeRO-{par.zero_stage}: FSDP offloads parameters with the optimizer, and "
            "axolotl's deepspeed_configs offload the optimizer alone with ZeRO-2 (zero2.json)",
        )
    if shipped:
        cfg["deepspeed"] = f"deepspeed_configs/{shipped}"
    elif par.zero_stage:  # schemas/fsdp.py
        cfg.update(
            fsdp_version=2,
            fsdp_config={
                "offload_params": offload != "none",
                "reshard_after_forward": par.zero_stage == 3,
                "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                "state_dict_type": "FULL_STATE_DICT",
            },
        )
    if par.context > 1:
        cfg["context_parallel_size"] = par.context
    if par.tensor > 1 or par.pipeline > 1 or par.expert > 1:
        raise bad(
            "parallelism.tensor"
            if par.tensor > 1
            else "parallelism.pipeline"
            if par.pipeline > 1
            else "parallelism.expert",
            max(par.tensor, par.pipeline, par.expert),
            "cannot be said: Axolotl's parallelism here is FSDP or DeepSpeed over data and context ranks",
        )


def write(plan: Plan) -> str:
    """The Axolotl config that runs the plan (launch it with `axolotl train config.yaml` on the plan's GPUs)."""
    wl, tech = plan.workload, plan.techniques
    if not checkpoint(plan):
        raise bad(
            "model.preset",
            plan.model.preset,
            "is needed, with its own architecture: an Axolotl config names its base_model checkpoint",
        )
    if tech.activation_checkpointing not in ("none", "full"):
        raise bad(
            "techniques.activation_checkpointing",
            tech.activation_checkpointing,
            "cannot be said: gradient_checkpointing wraps every layer or none",
        )
    if tech.loss == "chunked":
        raise bad(
            "techniques.loss",
            "chunked",
            "cannot be said: Axolotl's losses are HF's (full) or fused (Liger, Cut Cross Entropy)",
        )
    cfg: dict[str, Any] = {"base_model": checkpoint(plan)}
    _write_lora(plan, cfg)
    cfg.update(
        datasets=[{"path": "tatsu-lab/alpaca", "type": "alpaca"}],
        output_dir="./outputs/out",
        sequence_len=wl.sequence_length,
        sample_packing=True,
        pad_to_sequence_len=True,
        micro_batch_size=wl.micro_batch_size,
        gradient_accumulation_steps=plan.micro_batches_per_step,
        num_epochs=1,
    )
    if wl.steps is not None:
        cfg["max_steps"] = wl.steps
    _write_precision(plan, cfg)
    cfg.update(
        gradient_checkpointing=tech.activation_checkpointing == "full",
        activation_offloading=tech.activation_offload,
        torch_compile=tech.compile,
        attn_implementation="eager" if tech.attention == "eager" else "flash_attention_2",
    )
    if tech.loss == "fused":
        cfg.update(plugins=[_LIGER], liger_fused_linear_cross_entropy=True)
    _write_sharding(plan, cfg)
    _write_objective(plan, cfg)
    header = (
        f"# Axolotl config written by VRAM Planner for {plan.hardware.count} GPU(s); launch: axolotl train "
        "config.yaml\n"
    )
    return header + yaml.safe_dump(cfg, sort_keys=False)


FORMAT = Format(
    name="axolotl",
    label="Axolotl config (YAML)",
    framework="axolotl",
    suffix=".yaml",
    detect=detect,
    read=read,
    write=write,
    reads_files=True,
    says=(
        "workload.task",
        "workload.objective",
        "workload.preference.loss_type",
        "workload.preference.reference",
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
        "precision.weights",
        "precision.double_quant",
        "precision.optimizer",
        "precision.optimizer_impl",
        "precision.optimizer_library",
        "precision.fp8_all_gather",
        "techniques.activation_checkpointing",
        "techniques.activation_offload",
        "techniques.attention",
        "techniques.loss",
        "techniques.compile",
        "techniques.offload",
        "parallelism.zero_stage",
        "parallelism.context",
        "parallelism.data",
        "hardware.count",
    ),
    cannot_say={
        "precision.master_weights": "the model is loaded in the bf16/fp16 flag's dtype: no fp32 master copy",
        "precision.weights": "bitsandbytes loads nf4 (load_in_4bit) or int8 (load_in_8bit); a LoRA's frozen base "
        "loads in the bf16/fp16 flag's dtype",
        "precision.gradients": "gradients are in the parameters' dtype",
        "precision.optimizer_state": "optimizer states follow the optimizer named",
        "precision.quant_group_size": "bitsandbytes NF4 blocks are 64 values",
        "techniques.checkpoint_every": "gradient_checkpointing wraps every layer",
        "techniques.loss_chunks": "the fused losses choose their own chunks",
        "techniques.compile_scope": "torch_compile compiles the model with its loss",
        "parallelism.tensor": "tensor_parallel_size is DeepSpeed AutoTP, not the plan's Megatron-style split",
        "parallelism.pipeline": "no pipeline parallelism",
        "parallelism.expert": "no expert parallelism",
        **dict.fromkeys(
            ("parallelism.reduce_bucket_elements", "parallelism.sub_group_elements"),
            "inside the DeepSpeed JSON the config points to (ZeRO-1/2); FSDP has none",
        ),
        "parallelism.flat_params": "FSDP1's use_orig_params is not read back: the config is written for FSDP2",
        "precision.fp32_embedding_states": "no option: the Trainer's 32-bit nn.Embedding states with a bitsandbytes "
        "8-bit optimizer (the axolotl recipe's)",
        "precision.fp8_recipe": "fp8: true is torchao's tensorwise recipe",
        "precision.optimizer_block_size": "the 8-bit optimizer's block size is not an option",
        "techniques.expandable_segments": "Axolotl sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True itself when "
        "it is unset",
        "techniques.optimizer_in_backward": "the Trainer steps after backward",
        "techniques.moe_capacity_factor": "Transformers' MoE layers are dropless",
        "workload.task": "pretrain reads back as finetune (the same memory)",
        "framework_release": RELEASE_WHY,
        "workload.train_tokens": "a job's length is num_epochs (of a dataset) or max_steps: give workload.steps",
    },
)
