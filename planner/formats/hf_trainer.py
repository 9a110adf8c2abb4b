"""Hugging Face TrainingArguments, as TRL and alignment-handbook recipe YAMLs write them (with TRL's ModelConfig
and SFTConfig keys beside them) or as a command line (`python run_clm.py --bf16 ...`, `accelerate launch ...
train.py --...`, `trl sft --...`).

Key names and defaults: huggingface/transformers src/transformers/training_args.py (TrainingArguments,
OptimizerNames, FSDPOption) and trainer.py get_optimizer_cls_and_kwargs; huggingface/trl at f2cd577 (2026-07-24)
trl/trainer/model_config.py (ModelConfig: dtype, use_peft, lora_*, load_in_4bit, ...) and sft_config.py; PEFT
tuners/tuners_utils.py for lora_target_modules "all-linear".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from planner.errors import PlanError, bad
from planner.formats import accelerate, deepspeed, trl
from planner.formats.base import (
    RELEASE_WHY,
    Document,
    Format,
    Imported,
    KeyRead,
    accumulation,
    checkpoint,
    document,
    marked,
    training_defaults,
)
from planner.formats.reading import Reading, as_bool, as_int, as_number, choice, quiet_mapping
from planner.formats.shell import environment, words
from planner.formats.trl_ppo import read_ppo
from planner.plan.config import Plan

FRAMEWORK = "hf_trainer"


@dataclass(frozen=True, kw_only=True)
class Args:
    """The arguments read, as a mapping, and how their keys are written (`--key` on a command line)."""

    values: dict[str, Any]
    dash: str  # "" for YAML/JSON, "--" for a command line
    gpus: int | None
    script: str = ""  # the script a command line runs (examples/scripts/dpo.py; `trl dpo` → dpo), "" for a file
    files: Callable[[str], str | None] | None = None  # the text of a file the arguments name (the DeepSpeed JSON)

    def name(self, key: str) -> str:
        return f"{self.dash}{key}"

    def has(self, key: str) -> bool:
        return key in self.values


# --- tables -------------------------------------------------------------------------------------------------------
# optim (transformers training_args.py OptimizerNames; trainer.py get_optimizer_cls_and_kwargs) → (precision.optimizer,
# optimizer_impl, optimizer_library). One table for every reader of the name: Axolotl passes its `optimizer:` through
# to TrainingArguments.optim (axolotl.OPTIMIZERS adds its own few). adamw_torch is torch.optim.AdamW with no foreach
# argument: PyTorch's foreach default on CUDA; adamw_torch_fused and apex's FusedAdam are fused kernels. adamw_hf was
# transformers' own AdamW (optimization.py), a Python loop over the parameters one at a time (forloop); it exists up
# to v4.49: huggingface/transformers#36177 (merged 2025-03, v4.50.0) removed the class and the name, and
# TrainingArguments since refuses 'adamw_hf'. adamw_bnb_8bit and adamw_8bit are bitsandbytes' AdamW8bit (the second
# "just an alias"), paged_* bitsandbytes' paged optimizers, adamw_torch_8bit torchao's AdamW8bit, lion_32bit
# bitsandbytes' Lion, sgd torch.optim.SGD.
OPTIMS: dict[str, tuple[str, str | None, str | None]] = {
    "adamw_torch": ("adamw", "foreach", None),
    "adamw_torch_fused": ("adamw", "fused", None),
    "adamw_apex_fused": ("adamw", "fused", None),
    "adamw_hf": ("adamw", "forloop", None),
    "adamw_bnb_8bit": ("adamw_8bit", None, "bitsandbytes"),
    "adamw_8bit": ("adamw_8bit", None, "bitsandbytes"),
    "adamw_torch_8bit": ("adamw_8bit", None, "torchao"),
    "paged_adamw_32bit": ("paged_adamw", None, None),
    "paged_adamw_8bit": ("paged_adamw_8bit", None, "bitsandbytes"),
    "adafactor": ("adafactor", None, None),
    "lion_32bit": ("lion", None, None),
    "sgd": ("sgd", None, None),
}
# the spelling a plan's optimizer is written in (the first of OPTIMS that reads back as it)
OPTIM_NAMES = {spec: name for name, spec in reversed(OPTIMS.items())}
# dtype / torch_dtype (ModelConfig; from_pretrained) → the plan's dtype
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "bf16": "bf16", "fp16": "fp16", "fp32": "fp32"}
TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# attn_implementation (transformers AttentionInterface): eager materializes the scores; the rest are fused
ATTENTION = {
    "eager": "eager",
    "sdpa": "flash",
    "flash_attention_2": "flash",
    "flash_attention_3": "flash",
    "flex_attention": "flash",
    "kernels-community/vllm-flash-attn3": "flash",
}
# PEFT module names of the projections (Llama-style models); "all-linear": every linear layer but the output head
MODULES = {
    "q_proj": "q",
    "k_proj": "k",
    "v_proj": "v",
    "o_proj": "o",
    "gate_proj": "gate",
    "up_proj": "up",
    "down_proj": "down",
}
ALL_LINEAR = ("q", "k", "v", "o", "gate", "up", "down")
# TRL ModelConfig defaults where use_peft is on (lora_r 16, lora_alpha 32, lora_dropout 0.05): the plan's are
# 8, 16 and 0, so they are written
TRL_LORA = {
    "lora_r": ("workload.lora.rank", 16),
    "lora_alpha": ("workload.lora.alpha", 32.0),
    "lora_dropout": ("workload.lora.dropout", 0.05),
}
# TrainingArguments per_device_train_batch_size defaults to 8 (the plan's 1 is written over)
DEFAULT_MICRO_BATCH = 8
# the sequence length where no key gives it: TRL SFTConfig/DPOConfig max_length 1024, run_clm.py block_size
# min(tokenizer.model_max_length, 1024)
DEFAULT_SEQUENCE = 1024
SEQUENCE_KEYS = ("max_length", "max_seq_length", "block_size")
# TrainingArguments fsdp words (trainer_utils.py FSDPOption): the ZeRO stage each is
FSDP_WORDS = {"full_shard": 3, "shard_grad_op": 2, "no_shard": 0}


def _switch(on: Any, off: Any) -> Callable[[str, Any], Any]:
    return lambda key, value: on if as_bool(key, value) else off


def _count(key: str, value: Any) -> int:
    return as_int(key, value, 1)


def _fraction(key: str, value: Any) -> float:
    return float(as_number(key, value))


# keys read straight into one plan key: (plan key, converter)
SIMPLE: dict[str, tuple[str, Callable[[str, Any], Any]]] = {
    "per_device_train_batch_size": ("workload.micro_batch_size", _count),
    "gradient_checkpointing": ("techniques.activation_checkpointing", _switch("full", "none")),
    "torch_compile": ("techniques.compile", _switch(True, False)),
    "use_liger_kernel": ("techniques.loss", _switch("fused", "full")),  # Liger fused linear cross-entropy
    "activation_offloading": ("techniques.activation_offload", _switch(True, False)),  # TRL SFTConfig
    "attn_implementation": ("techniques.attention", lambda key, value: choice(key, value, ATTENTION, any_case=True)),
    "use_bnb_nested_quant": ("precision.double_quant", _switch(True, False)),
    "use_dora": ("workload.lora.variant", _switch("dora", "lora")),
    "lora_r": ("workload.lora.rank", _count),
    "lora_alpha": ("workload.lora.alpha", _fraction),
    "lora_dropout": ("workload.lora.dropout", _fraction),
    **{key: ("workload.sequence_length", _count) for key in SEQUENCE_KEYS},
}
# keys that change memory with no plan key
UNMODELLED = {
    "tf32": "TF32 matmuls speed up fp32 compute; the time model does not tell them apart",
    "lora_modules_to_save": "these modules are trained in full beside the adapters",
    "lora_target_parameters": "adapters on parameters (MoE experts) are not planned",
    "optim_target_modules": "GaLore/APOLLO projections of the named modules",
    "optim_args": "optimizer arguments are not read",
    "model_init_kwargs": "from_pretrained arguments given here (dtype, quantization) are not read",
    "padding_free": "batches are flattened without padding; the plan counts micro-batch × max_length tokens",
    "bnb_4bit_quant_storage": "the 4-bit weights' storage dtype (for FSDP sharding of QLoRA)",
    "torch_empty_cache_steps": "the caching allocator is emptied every this many steps",
}
# keys known to leave memory and step time alone
IGNORED = frozenset(
    {
        "output_dir",
        "overwrite_output_dir",
        "run_name",
        "seed",
        "data_seed",
        "learning_rate",
        "lr_scheduler_type",
        "lr_scheduler_kwargs",
        "warmup_ratio",
        "warmup_steps",
        "weight_decay",
        "adam_beta1",
        "adam_beta2",
        "adam_epsilon",
        "max_grad_norm",
        "do_train",
        "do_eval",
        "do_predict",
        "eval_strategy",
        "evaluation_strategy",
        "eval_steps",
        "per_device_eval_batch_size",
        "eval_accumulation_steps",
        "logging_steps",
        "logging_strategy",
        "logging_first_step",
        "logging_dir",
        "log_level",
        "save_strategy",
        "save_steps",
        "save_total_limit",
        "save_only_model",
        "push_to_hub",
        "hub_model_id",
        "hub_strategy",
        "hub_private_repo",
        "hub_model_revision",
        "report_to",
        "remove_unused_columns",
        "label_names",
        "chat_template",
        "chat_template_path",
        "eos_token",
        "pad_token",
        "dataset_mixture",
        "dataset_mixer",
        "dataset_splits",
        "dataset_name",
        "dataset_config",
        "dataset_train_split",
        "dataset_test_split",
        "dataset_num_proc",
        "dataset_text_field",
        "dataset_kwargs",
        "preprocessing_num_workers",
        "assistant_only_loss",
        "completion_only_loss",
        "average_tokens_across_devices",
        "neftune_noise_alpha",
        "max_prompt_length",
        "max_completion_length",
        "model_revision",
        "trust_remote_code",
        "gradient_checkpointing_kwargs",
        "packing_strategy",
        "torch_compile_backend",
        "torch_compile_mode",
        "ddp_timeout",
        "ddp_find_unused_parameters",
        "ddp_backend",
        "dataloader_num_workers",
        "dataloader_pin_memory",
        "dataloader_drop_last",
        "disable_tqdm",
        "include_tokens_per_second",
        "lora_task_type",
        "use_rslora",
        "train_file",
        "validation_file",
        "dataset_config_name",
        "cache_dir",
        "tokenizer_name",
        "use_fast_tokenizer",
        "validation_split_percentage",
        "group_by_length",
        "bf16_full_eval",
        "fp16_full_eval",
        "load_best_model_at_end",
        "metric_for_best_model",
        "greater_is_better",
        "resume_from_checkpoint",
        "hub_token",
        "label_smoothing_factor",
        "loss_type",
        "truncation_mode",
        "warmup_lr",
        "ignore_data_skip",
    }
)


# --- the keys read together -----------------------------------------------------------------------------------------
def read_batch(led: Reading, args: Args) -> None:
    """per_device_train_batch_size (default 8) × gradient_accumulation_steps × GPUs = the global batch."""
    if not args.has("per_device_train_batch_size"):
        led.set(
            "(TrainingArguments' default per_device_train_batch_size)", "workload.micro_batch_size", DEFAULT_MICRO_BATCH
        )
    if not args.has("gradient_accumulation_steps"):
        return
    key = args.name("gradient_accumulation_steps")
    steps = as_int(key, args.values["gradient_accumulation_steps"], 1)
    micro = (
        led.plan["workload"]["micro_batch_size"]
        if "per_device_train_batch_size" not in args.values
        else as_int(args.name("per_device_train_batch_size"), args.values["per_device_train_batch_size"], 1)
    )
    if args.gpus is None:
        if steps > 1:
            led.note(key, "the global batch is micro-batch × accumulation × GPUs: give the GPU count")
        return
    led.set(key, "workload.global_batch_size", micro * steps * args.gpus)


def read_steps(led: Reading, args: Args) -> None:
    """max_steps (> 0 wins over num_train_epochs, training_args.py)."""
    steps = args.values.get("max_steps", -1)
    if as_int(args.name("max_steps"), steps, -1) > 0:
        led.set(args.name("max_steps"), "workload.steps", as_int(args.name("max_steps"), steps, 1))
    elif args.has("max_steps"):
        led.ignored.append(args.name("max_steps"))  # -1: num_train_epochs sets the length
    if args.has("num_train_epochs"):
        if args.has("max_steps") and as_int(args.name("max_steps"), steps, -1) > 0:
            led.ignored.append(args.name("num_train_epochs"))
        else:
            led.note(
                args.name("num_train_epochs"),
                "the job's length in epochs needs the dataset's size: give workload.steps or train_tokens",
            )


def read_precision(led: Reading, args: Args) -> None:
    """bf16 / fp16 (torch.autocast over the loaded parameters); both false is fp32."""
    given = [key for key in ("bf16", "fp16") if args.has(key)]
    on = [key for key in given if as_bool(args.name(key), args.values[key])]
    if len(on) > 1:
        raise bad(args.name("bf16"), True, f"and {args.name('fp16')} are both true; the Trainer runs one")
    if on:
        led.set(args.name(on[0]), "precision.compute", on[0])
    elif given:
        led.set(args.name(given[0]), "precision.compute", "fp32")


def _dtype(led: Reading, args: Args, task: str) -> None:
    """dtype (torch_dtype before TRL 0.20): the dtype from_pretrained loads the parameters in. A full fine-tune then
    steps 16-bit parameters (no fp32 master); LoRA keeps the frozen base in it; 4-bit loading computes in it."""
    key = next((k for k in ("dtype", "torch_dtype") if args.has(k)), None)
    if key is None or args.values[key] is None:  # a YAML null: from_pretrained's default, as when absent
        return
    if str(args.values[key]).lower() == "auto":
        led.note(
            args.name(key),
            "'auto' loads the checkpoint's own dtype (its config.json): give "
            "precision.master_weights none for a 16-bit checkpoint",
        )
        return
    dtype = choice(args.name(key), args.values[key], DTYPES, any_case=True)
    if task == "qlora":
        led.note(
            args.name(key),
            "with 4-bit loading it is the dequantized matmuls' dtype and the unquantized layers' (embeddings, norms)",
        )
    elif task == "lora":
        led.set(args.name(key), "precision.weights", dtype)
    else:
        led.set(args.name(key), "precision.master_weights", "fp32" if dtype == "fp32" else "none")


def read_optim(led: Reading, args: Args) -> None:
    if not args.has("optim"):
        return
    name = str(args.values["optim"]).lower()
    if name not in OPTIMS:
        led.note(args.name("optim"), f"{args.values['optim']!r} has no plan optimizer")
        return
    optimizer, impl, library = OPTIMS[name]
    led.set(args.name("optim"), "precision.optimizer", optimizer)
    if impl:
        led.set(args.name("optim"), "precision.optimizer_impl", impl)
    if library:
        led.set(args.name("optim"), "precision.optimizer_library", library)


def _task(led: Reading, args: Args) -> str:
    """use_peft with load_in_4bit / load_in_8bit (TRL ModelConfig, get_quantization_config)."""
    peft, four, eight = (
        as_bool(args.name(k), args.values.get(k, False)) for k in ("use_peft", "load_in_4bit", "load_in_8bit")
    )
    if four and eight:
        raise bad(args.name("load_in_4bit"), True, f"and {args.name('load_in_8bit')} are both true; TRL loads one")
    quant = "load_in_4bit" if four else "load_in_8bit" if eight else ""
    if quant and not peft:
        raise bad(
            args.name(quant), True, f"needs {args.name('use_peft')}: a quantized model trains only through adapters"
        )
    task = "qlora" if quant else "lora" if peft else "finetune"
    led.set(args.name("use_peft") if args.has("use_peft") else "(no use_peft)", "workload.task", task)
    if eight:
        led.set(args.name("load_in_8bit"), "precision.weights", "int8")
    if four:
        kind = str(args.values.get("bnb_4bit_quant_type", "nf4")).lower()
        if kind not in ("nf4", "fp4"):
            raise bad(args.name("bnb_4bit_quant_type"), args.values["bnb_4bit_quant_type"], "is not one of: nf4, fp4")
        led.set(
            args.name("bnb_4bit_quant_type" if args.has("bnb_4bit_quant_type") else "load_in_4bit"),
            "precision.weights",
            "nf4",
        )
        if kind == "fp4":
            led.note(args.name("bnb_4bit_quant_type"), "fp4 is read as nf4: the same 4 bits and block scales")
    if peft:
        for key, (plan_key, default) in TRL_LORA.items():
            if not args.has(key):
                led.set(f"(TRL's default {key})", plan_key, default)
    return task


def _targets(led: Reading, args: Args) -> None:
    """lora_target_modules: the projections' PEFT names, or "all-linear" (absent: PEFT's per-model default, q and
    v for Llama-style models, the plan's own)."""
    if not args.has("lora_target_modules"):
        return
    key, value = args.name("lora_target_modules"), args.values["lora_target_modules"]
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise bad(key, value, "must be a list of module names or all-linear")
    if names == ["all-linear"]:
        led.set(key, "workload.lora.targets", list(ALL_LINEAR))
        return
    others = [n for n in names if n.split(".")[-1] not in MODULES]
    if others:
        led.note(key, f"{', '.join(others)} are not Llama-style projection names (q_proj ... down_proj)")
    targets = [MODULES[n.split(".")[-1]] for n in names if n.split(".")[-1] in MODULES]
    if targets:
        led.set(key, "workload.lora.targets", sorted(set(targets), key=ALL_LINEAR.index))


def read_fsdp(led: Reading, args: Args) -> None:
    """fsdp: its words (trainer_utils.py FSDPOption; true is full_shard) → the framework accelerate_fsdp, the ZeRO
    stage and CPU offload; fsdp_config: the FSDP options accelerate's config has (planner/formats/accelerate.py)."""
    value = args.values.get("fsdp", "")
    words = (
        ["full_shard"]
        if value is True
        else []
        if value in (False, None)
        else str(value).split()
        if isinstance(value, str)
        else [str(w) for w in value]
    )
    if words:
        led.plan["framework"] = "accelerate_fsdp"
    key = args.name("fsdp")
    stage = next((FSDP_WORDS[w] for w in words if w in FSDP_WORDS), None)
    if stage is not None:
        led.set(key, "parallelism.zero_stage", stage)
    if any(w.startswith("hybrid_shard") for w in words):
        led.note(key, accelerate.HYBRID_WHY)
    if "offload" in words and stage == 3:
        led.set(key, "techniques.offload", "optimizer_and_params")
    elif "offload" in words:
        led.note(key, "offload with shard_grad_op: the plan offloads parameters only under full sharding")
    unknown = [
        w
        for w in words
        if w not in FSDP_WORDS and w not in ("offload", "auto_wrap") and not w.startswith("hybrid_shard")
    ]
    if unknown:
        raise bad(
            key,
            value,
            "is not a list of fsdp options (full_shard, shard_grad_op, hybrid_shard, "
            "hybrid_shard_zero2, offload, auto_wrap)",
        )
    options = args.values.get("fsdp_config")
    if isinstance(options, str):
        led.note(args.name("fsdp_config"), "a file: its options are not read")
    elif options is not None and not isinstance(options, dict):
        raise bad(args.name("fsdp_config"), options, "must be a mapping or a file")
    elif words:  # transformers training_args.py: use_orig_params defaults to true
        adapters = led.plan["workload"]["task"] in ("lora", "qlora")
        accelerate.fsdp_options(
            led, options or {}, f"{args.name('fsdp_config')}.", adapters=adapters, orig_default=True
        )


def _deepspeed(led: Reading, args: Args) -> None:
    """deepspeed: the JSON's path (or, in a YAML or JSON file, the config inline): its ZeRO stage and offload read
    from the file where `files` finds it beside the config."""
    value = args.values.get("deepspeed")
    if not value:
        return
    led.plan["framework"] = "deepspeed"
    text = args.files(value) if args.files is not None and isinstance(value, str) else None
    if isinstance(value, dict) or text is not None:
        deepspeed.read_into(led, args.name("deepspeed"), text if text is not None else value)
    else:
        led.note(
            args.name("deepspeed"),
            f"{value} is not beside the config: its ZeRO stage, offload and buckets are not read (give the file, or "
            "read it with the deepspeed format)",
        )


def _sequence(led: Reading, args: Args) -> None:
    """The sequence length's default where no key gives it."""
    if not any(args.has(key) for key in SEQUENCE_KEYS):
        led.set("(TRL's default max_length)", "workload.sequence_length", DEFAULT_SEQUENCE)


def _packing(led: Reading, args: Args) -> None:
    if args.has("packing") and not as_bool(args.name("packing"), args.values["packing"]):
        led.note(
            args.name("packing"),
            "sequences are padded to the longest of each batch, up to max_length; the plan takes max_length",
        )


# the keys the functions above read (each gets a KeyRead or a note where it says something)
# TRL GRPOConfig's keys (huggingface/trl@f2cd577 trl/trainer/grpo_config.py), read together where
# num_generations marks a GRPO config; a plan sequence is a prompt and a completion, and GRPOConfig has no prompt
# length (max_prompt_length was deprecated: datasets are filtered instead), so one of 512 tokens is assumed
GRPO_KEYS = frozenset(
    {
        "num_generations",
        "max_completion_length",
        "max_prompt_length",
        "beta",
        "use_vllm",
        "vllm_mode",
        "vllm_gpu_memory_utilization",
        "vllm_enable_sleep_mode",
        "vllm_tensor_parallel_size",
    }
)
GRPO_PROMPT = 512


def read_grpo(led: Reading, args: Args) -> None:
    """A GRPOConfig: objective grpo and workload.rl from its keys, at TRL's defaults where absent (num_generations 8,
    max_completion_length 512, beta 0.0, vllm_mode colocate at vllm_gpu_memory_utilization 0.3); sleep mode is
    vLLM's level 2 (trl@f2cd577 trl/generation/vllm_generation.py `self.llm.sleep(level=2)`)."""
    if not args.has("num_generations"):
        return
    v, rl = args.values, "workload.rl."
    led.set(args.name("num_generations"), "workload.objective", "grpo")
    led.set(
        args.name("num_generations"),
        rl + "num_generations",
        as_int(args.name("num_generations"), v["num_generations"], 2),
    )
    completion = as_int(args.name("max_completion_length"), v.get("max_completion_length", 512), 1)
    led.set(args.name("max_completion_length"), rl + "completion_length", completion)
    prompt_key = "max_prompt_length" if v.get("max_prompt_length") is not None else f"(no prompt length: {GRPO_PROMPT})"
    prompt = as_int(prompt_key, v.get("max_prompt_length", GRPO_PROMPT) or GRPO_PROMPT, 1)
    led.set(prompt_key, "workload.sequence_length", prompt + completion)
    _whole_groups(led, args, as_int(args.name("num_generations"), v["num_generations"], 2))
    if args.has("beta"):
        led.set(args.name("beta"), rl + "beta", as_number(args.name("beta"), v["beta"]))
    if not as_bool(args.name("use_vllm"), v.get("use_vllm", False)):
        led.note(
            args.name("use_vllm"),
            "false: TRL generates with transformers' generate in the trainer; the plan's "
            "rollout engine is a vLLM server off these GPUs",
        )
        led.set(args.name("use_vllm"), rl + "engine", "server")
        return
    mode = choice(args.name("vllm_mode"), v.get("vllm_mode", "colocate"), {"colocate": "colocate", "server": "server"})
    led.set(args.name("vllm_mode"), rl + "engine", mode)
    if args.has("vllm_tensor_parallel_size"):
        led.set(
            args.name("vllm_tensor_parallel_size"),
            rl + "tensor_parallel",
            as_int(args.name("vllm_tensor_parallel_size"), v["vllm_tensor_parallel_size"], 1),
        )
    if mode == "colocate" and args.has("vllm_gpu_memory_utilization"):
        led.set(
            args.name("vllm_gpu_memory_utilization"),
            rl + "gpu_memory_utilization",
            as_number(args.name("vllm_gpu_memory_utilization"), v["vllm_gpu_memory_utilization"]),
        )
    if mode == "colocate" and as_bool(args.name("vllm_enable_sleep_mode"), v.get("vllm_enable_sleep_mode", False)):
        led.set(args.name("vllm_enable_sleep_mode"), rl + "sleep_level", 2)


def _ppo(led: Reading, args: Args) -> None:
    """A PPO script's keys (trl_ppo.read_ppo), once the batch is read: the plan's step is one of its mini-batches."""
    if args.script and trl.family(args.script) == "ppo":
        read_ppo(led, args.values, args.name, args.script)


def _whole_groups(led: Reading, args: Args, groups: int) -> None:
    """TRL refuses a step that is not whole groups: num_processes × per_device_train_batch_size ×
    gradient_accumulation_steps must be divisible by num_generations (trl@f2cd577 grpo_config.py
    num_generations). With no GPU count given, and a micro-batch of partial groups, the plan takes the fewest GPUs
    whose micro-batches make whole groups."""
    key = "per_device_train_batch_size"
    micro = as_int(args.name(key), args.values.get(key, DEFAULT_MICRO_BATCH), 1)
    count = groups // math.gcd(groups, micro)
    if args.gpus is None and count > 1:
        led.set(f"(no GPU count: the fewest for whole groups of {groups})", "hardware.count", count)


TOGETHER: tuple[Callable[[Reading, Args], Any], ...] = (
    read_batch,
    read_steps,
    _sequence,
    read_precision,
    read_optim,
    _targets,
    read_fsdp,
    _deepspeed,
    _packing,
    read_grpo,
    _ppo,
)
READ_TOGETHER = frozenset(
    {
        "gradient_accumulation_steps",
        "max_steps",
        "num_train_epochs",
        "bf16",
        "fp16",
        "dtype",
        "torch_dtype",
        "optim",
        "use_peft",
        "load_in_4bit",
        "load_in_8bit",
        "bnb_4bit_quant_type",
        "lora_target_modules",
        "fsdp",
        "fsdp_config",
        "deepspeed",
        "packing",
        "model_name_or_path",
    }
)


def _mentioned(led: Reading, name: str) -> bool:
    return any(r.source == name for r in led.read) or any(n.startswith(f"{name}: ") for n in led.unmodelled)


def read_args(args: Args, led: Reading) -> Imported:
    """TrainingArguments (with TRL's ModelConfig and SFTConfig keys) as a plan."""
    if args.has("model_name_or_path"):
        led.model(args.name("model_name_or_path"), str(args.values["model_name_or_path"]))
    if args.gpus is not None:
        led.plan.setdefault("hardware", {})["count"] = args.gpus
    task = _task(led, args)
    taken = READ_TOGETHER | trl.read(led, args.values, args.name, args.script, task)
    _dtype(led, args, task)
    for step in TOGETHER:
        step(led, args)
    for key, value in args.values.items():
        name = args.name(key)
        if key in taken or (key in GRPO_KEYS and args.has("num_generations")):
            if (
                not _mentioned(led, name)
                and not (key == "model_name_or_path" and led.model_name)
                and not any(n == name or n.startswith(f"{name}.") for n in led.ignored + led.unknown)
            ):
                led.ignored.append(name)  # read, and it says what the plan has anyway
        elif key in SIMPLE and value is None:
            led.note(name, "null: no limit; give the plan's key")
        elif key in SIMPLE:
            plan_key, convert = SIMPLE[key]
            led.set(name, plan_key, convert(name, value))
        else:
            led.other(key, unmodelled=UNMODELLED, ignored=IGNORED, name=name)
    return led.imported()


# --- command lines ------------------------------------------------------------------------------------------------
# launcher options (accelerate launch, torchrun, deepspeed) that give the number of GPU processes
LAUNCHER_COUNT = ("num_processes", "nproc_per_node", "nproc-per-node", "num_gpus")
# launcher options known to leave memory alone (where the processes start; the Trainer's own bf16/fp16 wins over
# accelerate's --mixed_precision)
LAUNCHER_IGNORED = frozenset(
    {
        "multi_gpu",
        "num_machines",
        "machine_rank",
        "main_process_ip",
        "main_process_port",
        "rdzv_backend",
        "same_network",
        "nnodes",
        "node_rank",
        "master_addr",
        "master_port",
        "standalone",
        "rdzv_endpoint",
        "rdzv_id",
        "rdzv-backend",
        "rdzv-endpoint",
        "rdzv-id",
        "max_restarts",
        "max-restarts",
        "monitor_interval",
        "mixed_precision",
        "num_nodes",
        "hostfile",
        "include",
        "exclude",
        "master-addr",
        "master-port",
        "node-rank",
        "gpu_ids",
        "module",
        "m",
    }
)
LAUNCHERS = ("python", "python3", "accelerate", "launch", "torchrun", "deepspeed")
# where PyTorch's caching allocator reads its settings (PyTorch >= 2.1; PYTORCH_ALLOC_CONF from 2.8)
ALLOC_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def _scalar(text: str) -> Any:
    """A command-line value as HfArgumentParser reads it: an int, a float, a boolean word, else the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def _flags(tokens: list[str]) -> dict[str, Any]:
    """--key value / --key=value / --key (true) / --key v1 v2 (a list)."""
    out: dict[str, Any] = {}
    key = None
    for token in tokens:
        if token.startswith("--"):
            key, _, value = token[2:].partition("=")
            out[key] = _scalar(value) if value else True
            key = None if value else key
        elif key is not None and out[key] is True:
            out[key] = _scalar(token)
        elif key is not None:  # a list: extended in place (a new list a value is quadratic in the values)
            out[key] = out[key] if isinstance(out[key], list) else [out[key]]
            out[key].append(_scalar(token))
    return out


def _split(text: str) -> tuple[list[str], list[str], str, list[str]]:
    """A command line's environment assignments, launcher tokens, script (`trl sft` → sft) and its arguments."""
    env, tokens = environment(words(text))
    for i, token in enumerate(tokens):
        if token.endswith(".py") or token == "trl" or i and tokens[i - 1] == "-m":
            start = i + 2 if token == "trl" else i + 1  # `trl sft --...`: the subcommand names the trainer
            module = i and tokens[i - 1] == "-m" and not token.endswith(".py")  # -m trl.scripts.dpo
            script = " ".join(tokens[i + 1 : start]) if token == "trl" else token.replace(".", "/") if module else token
            return env, tokens[:i], script, tokens[start:]
    raise PlanError("config", "is not a training command line: it names no script (train.py, -m module, trl sft)")


def _environment(led: Reading, env: list[str]) -> None:
    for assignment in env:
        name, _, value = assignment.partition("=")
        if name in ALLOC_ENV and "expandable_segments:true" in value.lower():
            led.set(name, "techniques.expandable_segments", True)
        else:
            led.ignored.append(name)


def _launcher(led: Reading, tokens: list[str], gpus: int | None) -> int | None:
    """The launcher's options: the process count, and accelerate's FSDP or DeepSpeed plugin options."""
    options = _flags(tokens)
    count = next((as_int(f"--{k}", options[k], 1) for k in LAUNCHER_COUNT if k in options), None)
    if count is not None and gpus is not None and count != gpus:
        raise bad("--num_processes", count, f"differs from the GPU count given ({gpus})")
    if options.get("use_fsdp"):
        led.plan["framework"] = "accelerate_fsdp"
        accelerate.fsdp_options(
            led, {k: v for k, v in options.items() if k.startswith("fsdp_")}, "--", adapters=None, orig_default=False
        )
    if options.get("use_deepspeed"):
        led.plan["framework"] = "deepspeed"
        accelerate.deepspeed_plugin(led, {k: v for k, v in options.items() if k in accelerate.DEEPSPEED_KEYS}, "--")
    for key in options:
        if key == "config_file":
            led.note("--config_file", "the accelerate config: read it with the accelerate format")
        elif key in LAUNCHER_COUNT:
            led.read.append(KeyRead(source=f"--{key}", plan_key="hardware.count", value=count))
        elif key in LAUNCHER_IGNORED or key in ("use_fsdp", "use_deepspeed"):
            led.ignored.append(f"--{key}")
        elif not (
            key.startswith("fsdp_")
            and options.get("use_fsdp")
            or key in accelerate.DEEPSPEED_KEYS
            and options.get("use_deepspeed")
        ):  # read by the plugin
            led.unknown.append(f"--{key}")
    return gpus if count is None else count


def read(
    text: str | Document, *, gpus: int | None = None, files: Callable[[str], str | None] | None = None
) -> Imported:
    """TrainingArguments as a YAML/JSON file or a command line; `files` gives the text of the DeepSpeed file named."""
    led = Reading(format="hf_trainer", plan={"framework": FRAMEWORK})
    doc = document(text)
    data = quiet_mapping(doc)
    if data:
        args = Args(values=data, dash="", gpus=gpus, files=files)
        return marked(read_args(args, led), training_defaults("TrainingArguments"))
    env, launcher, script, arguments = _split(doc.text)
    _environment(led, env)
    count = _launcher(led, launcher, gpus)
    args = Args(values=_flags(arguments), dash="--", gpus=count, script=script, files=files)
    return marked(read_args(args, led), training_defaults("TrainingArguments"))


# --- writing ------------------------------------------------------------------------------------------------------
def _write_model(plan: Plan, out: dict[str, Any]) -> None:
    """The model, the task's adapters and quantization (TRL ModelConfig), and the load dtype."""
    pr, wl = plan.precision, plan.workload
    if checkpoint(plan):
        out["model_name_or_path"] = checkpoint(plan)
    if wl.task in ("lora", "qlora"):
        lora = wl.lora
        out.update(
            {
                "use_peft": True,
                "lora_r": lora.rank,
                "lora_alpha": lora.alpha,
                "lora_dropout": lora.dropout,
                "lora_target_modules": [name for name, short in MODULES.items() if short in lora.targets],
            }
        )
        if lora.variant == "dora":
            out["use_dora"] = True
    if wl.task == "qlora":
        out.update(
            {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4"} if pr.weights == "nf4" else {"load_in_8bit": True}
        )
        if pr.double_quant:
            out["use_bnb_nested_quant"] = True
    elif wl.task == "lora":
        out["dtype"] = TORCH_DTYPES.get(pr.weights, "bfloat16")
    elif pr.master_weights == "none":
        out["dtype"] = TORCH_DTYPES.get(pr.activation_dtype, "bfloat16")


def write(plan: Plan) -> str:
    wl, pr, tech, par = plan.workload, plan.precision, plan.techniques, plan.parallelism
    out: dict[str, Any] = {}
    _write_model(plan, out)
    out.update(
        {
            "bf16": pr.compute == "bf16",
            "fp16": pr.compute == "fp16",
            "per_device_train_batch_size": wl.micro_batch_size,
            "gradient_accumulation_steps": accumulation(plan, plan.hardware.count),  # every GPU a data rank
            "max_length": wl.sequence_length,
            "max_steps": wl.steps or -1,
            "gradient_checkpointing": tech.activation_checkpointing != "none",
            "attn_implementation": "eager" if tech.attention == "eager" else "flash_attention_2",
        }
    )
    optim = OPTIM_NAMES.get(
        (pr.optimizer, pr.optimizer_impl if pr.optimizer == "adamw" else None, pr.optimizer_library)
    )
    if optim:
        out["optim"] = optim
    out.update(
        {
            key: True
            for key, on in (
                ("torch_compile", tech.compile),
                ("use_liger_kernel", tech.loss == "fused"),
                ("activation_offloading", tech.activation_offload),
            )
            if on
        }
    )
    trl.write(plan, out)
    if plan.framework == "deepspeed":
        out["deepspeed"] = "ds_config.json"  # written by the deepspeed format
    elif par.zero_stage in (2, 3):
        words = ["full_shard" if par.zero_stage == 3 else "shard_grad_op", "auto_wrap"]
        out["fsdp"] = " ".join(words + (["offload"] if tech.offload == "optimizer_and_params" else []))
        out["fsdp_config"] = {"version": 1, "use_orig_params": True} if par.flat_params else {"version": 2}
    return yaml.safe_dump(out, sort_keys=False)


# keys a TrainingArguments file has and no torchtune, axolotl or accelerate config does (and OTHER_KEYS: keys of
# configs that are not TrainingArguments files, LLaMA-Factory's finetuning_type among them)
TRAINING_KEYS = frozenset(
    {
        "per_device_train_batch_size",
        "model_name_or_path",
        "gradient_checkpointing_kwargs",
        "lr_scheduler_type",
        "per_device_eval_batch_size",
        "use_peft",
        "max_seq_length",
    }
)
OTHER_KEYS = frozenset(
    {"base_model", "sequence_len", "micro_batch_size", "distributed_type", "compute_environment", "finetuning_type"}
)


def detect(text: str | Document) -> bool:
    """A YAML/JSON mapping with TrainingArguments' own keys (not torchtune's `_component_`, axolotl's or accelerate's),
    or a command line that passes them to a script."""
    doc = document(text)
    data = quiet_mapping(doc)
    if data:
        return bool(TRAINING_KEYS & set(data)) and not OTHER_KEYS & set(data) and "_component_" not in doc.text
    return any(f"--{key}" in doc.text for key in TRAINING_KEYS) and (".py" in doc.text or "trl " in doc.text)


NO_TENSOR = "the Trainer's data-parallel arguments have no tensor parallelism"
FORMAT = Format(
    name="hf_trainer",
    label="Hugging Face TrainingArguments / TRL recipe (YAML or command line)",
    framework=FRAMEWORK,
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
        "workload.micro_batch_size",
        "workload.global_batch_size",
        "workload.steps",
        "workload.sequence_length",
        "workload.lora.rank",
        "workload.lora.alpha",
        "workload.lora.dropout",
        "workload.lora.targets",
        "workload.lora.variant",
        "precision.compute",
        "precision.master_weights",
        "precision.weights",
        "precision.double_quant",
        "precision.optimizer",
        "precision.optimizer_impl",
        "precision.optimizer_library",
        "techniques.activation_checkpointing",
        "techniques.compile",
        "techniques.loss",
        "techniques.attention",
        "techniques.activation_offload",
        "techniques.offload",
        "parallelism.zero_stage",
        "parallelism.flat_params",
    ),
    cannot_say={
        "workload.task": "pretrain reads back as finetune (from_pretrained weights; the same memory)",
        "precision.compute": "fp8: TrainingArguments has no fp8 switch (accelerate's mixed_precision fp8 does)",
        "precision.master_weights": "LoRA adapters stay fp32 under PEFT (autocast_adapter_dtype)",
        "precision.optimizer": "muon and sgd with momentum have no optim name",
        "precision.optimizer_impl": "only the AdamW names choose one",
        "precision.optimizer_block_size": "bitsandbytes' and torchao's block size is not an argument",
        "techniques.activation_checkpointing": "gradient_checkpointing checkpoints every layer (full) or none",
        "techniques.loss": "chunked: no argument (Liger's fused loss is use_liger_kernel)",
        "techniques.optimizer_in_backward": "the Trainer steps after backward",
        "techniques.expandable_segments": "an environment variable: only a command line says it",
        "parallelism.zero_stage": "1: FSDP has no optimizer-only sharding; DeepSpeed's stage is in its own config",
        "parallelism.tensor": NO_TENSOR,
        "parallelism.sequence_parallel": NO_TENSOR,
        "parallelism.async_tp": NO_TENSOR,
        "parallelism.context": "the Trainer's data-parallel arguments have no context parallelism",
        "parallelism.expert": "the Trainer's data-parallel arguments have no expert parallelism",
        **dict.fromkeys(
            (
                "parallelism.pipeline",
                "parallelism.pipeline_layers",
                "parallelism.pipeline_schedule",
                "parallelism.virtual_stages",
            ),
            "the Trainer has no pipeline parallelism",
        ),
        "parallelism.data": "the Trainer runs every GPU as a data-parallel rank",
        "workload.global_batch_size": "per-device batch × accumulation × GPUs: the accumulation keeps the planned "
        "batch where the GPUs' micro-batches divide it",
        **dict.fromkeys(
            ("parallelism.reduce_bucket_elements", "parallelism.sub_group_elements"),
            "DeepSpeed's: in the JSON the deepspeed argument names (export it --to deepspeed); FSDP has none",
        ),
        "techniques.offload": "FSDP's offload moves the parameters with the optimizer; optimizer-only offload is "
        "DeepSpeed's, in its JSON",
        "framework": "the fsdp argument runs accelerate's FSDP plugin (accelerate_fsdp), the deepspeed argument "
        "DeepSpeed (deepspeed)",
        "framework_release": RELEASE_WHY,
        **dict.fromkeys(
            ("precision.gradients", "precision.optimizer_state"),
            "no argument: they follow the parameters' dtype (dtype; fp32 without one)",
        ),
        "precision.weights": "bitsandbytes loads nf4 (load_in_4bit) or int8 (load_in_8bit); LoRA's frozen base "
        "loads in bf16, fp16 or fp32 (dtype)",
        "precision.fp32_embedding_states": "no argument: the Trainer's 32-bit nn.Embedding states with a "
        "bitsandbytes 8-bit optimizer (the hf_trainer recipe's)",
        "techniques.compile_scope": "torch_compile compiles the model with its loss",
        "techniques.moe_capacity_factor": "Transformers' MoE layers are dropless",
        "parallelism.flat_params": "FSDP1's (fsdp_config use_orig_params); a DeepSpeed plan's JSON has none",
    },
)
