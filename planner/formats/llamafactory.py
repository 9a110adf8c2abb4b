"""LLaMA-Factory training YAMLs (`llamafactory-cli train config.yaml`), read only: no export.

LLaMA-Factory trains through the HF Trainer (its TrainingArguments extend Seq2SeqTrainingArguments, so the
Trainer's keys mean what they mean there: planner/formats/hf_trainer.py reads them), on a model it loads itself.
Key names and defaults: hiyouga/LLaMA-Factory at ff6d4d1 (2026-08-18, after v0.9.5) src/llamafactory/hparams/
model_args.py, data_args.py, finetuning_args.py, training_args.py and parser.py; what they do: model/adapter.py
(trainable parameters upcast to fp32), model/patcher.py (the model loads in compute_dtype), model/model_utils/
checkpointing.py (gradient checkpointing unless disable_gradient_checkpointing), quantization.py (bitsandbytes),
attention.py (flash_attn), liger_kernel.py, and examples/deepspeed/*.json.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from planner.errors import PlanError, bad
from planner.formats import deepspeed, hf_trainer
from planner.formats.base import Document, Format, Imported
from planner.formats.hf_trainer import ALL_LINEAR, MODULES, Args
from planner.formats.reading import Reading, as_bool, as_int, as_number, as_text, choice, mapping, quiet_mapping

FRAMEWORK = "hf_trainer"
RL_WHY = (
    "LLaMA-Factory's KTO (its own CustomKTOTrainer) and PPO stages are not read yet (issue 33); "
    "TRL's and axolotl's KTO configs are"
)
# train/rm/workflow.py loads the model with add_valuehead=True: TRL's AutoModelForCausalLMWithValueHead keeps the
# vocabulary head, whose logits its forward makes and casts to fp32 every step (`lm_logits.float()`), beside an
# h × 1 value head; the plan's reward model is a sequence-classification model (a score head, no vocabulary logits)
RM_WHY = (
    "LLaMA-Factory's reward model is a value head on the causal LM (TRL AutoModelForCausalLMWithValueHead): its "
    "vocabulary head stays and its logits are made and cast to fp32 every forward, which the plan's reward model "
    "(a score head in place of the vocabulary head) does not count; TRL's RewardTrainer and axolotl's reward "
    "configs are read"
)
# finetuning_args.py FinetuningArguments.stage: sft and pt train one model on next-token loss; dpo a pairwise
# preference loss (workload.objective preference), rm a reward model (objective reward)
STAGES = {"sft": "sft", "pt": "pt", "dpo": "dpo", "kto": "rl", "ppo": "rl", "rm": "value_head"}
# finetuning_args.py pref_loss (default sigmoid) → workload.preference.loss_type; the reference follows the plan's
# default as LLaMA-Factory's does (train/dpo/workflow.py: no ref model for lora, the adapters disabled; orpo and
# simpo use none: trainer.py `use_ref_model = pref_loss not in ["orpo", "simpo"]`)
PREF_LOSSES = {"sigmoid": "dpo", "ipo": "ipo", "simpo": "simpo", "orpo": "orpo"}
# finetuning_args.py: finetuning_type defaults to "lora"; lora_rank 8, lora_dropout 0.0, lora_target "all",
# lora_alpha None (lora_rank × 2 in __post_init__)
DEFAULT_TYPE, DEFAULT_RANK, DEFAULT_DROPOUT = "lora", 8, 0.0
# data_args.py cutoff_len default 2048; parser.py: packing defaults to stage == "pt"
DEFAULT_CUTOFF = 2048
# model_args.py flash_attn (extras/constants.py AttentionFunction): auto leaves transformers' default (sdpa);
# disabled is eager; sdpa, fa2 and fa3 are fused kernels
ATTENTION = {"auto": "flash", "disabled": "eager", "sdpa": "flash", "fa2": "flash", "fa3": "flash"}
# examples/deepspeed/*.json: what LLaMA-Factory's shipped DeepSpeed configs say (zero_optimization.stage,
# offload_optimizer / offload_param), for a config whose JSON is not beside it
DEEPSPEED_EXAMPLES = {
    "ds_z0_config.json": (0, "none"),
    "ds_z2_config.json": (2, "none"),
    "ds_z2_offload_config.json": (2, "optimizer"),
    "ds_z3_config.json": (3, "none"),
    "ds_z3_offload_config.json": (3, "optimizer_and_params"),
}
# a checkpoint quantized ahead (examples/train_qlora/*_gptq, _awq, _aqlm): LLaMA-Factory trains LoRA on it as loaded
PREQUANTIZED = re.compile(r"gptq|awq|aqlm")
# keys of LLaMA-Factory's v1 trainer configs (examples/v1: src/llamafactory/v1/config), which v0 does not have
V1_KEYS = frozenset({"model_class", "dist_config", "kernel_config", "quant_config", "train_dataset"})
# keys that make the run something the plan does not describe: why (each refuses the config)
REFUSED = {
    "use_galore": "GaLore projects the gradients and optimizer states to rank galore_rank: no plan optimizer says it",
    "use_apollo": "APOLLO keeps low-rank optimizer states: no plan optimizer says it",
    "use_badam": "BAdam trains one block of layers at a time: the plan trains every weight",
    "use_mca": "a Megatron-Core run (mcore_adapter): write it as a megatron command line",
    "use_megatron_bridge": "a Megatron Bridge run: write it as a megatron command line",
    "use_hyper_parallel": "HyperParallel's FSDP/TP backend is not read",
    "use_kt": "KTransformers runs the experts on the CPU: the plan puts every weight on the GPUs",
    "use_llama_pro": "LLaMA Pro trains the expanded blocks only: the plan trains every weight or adapters",
    "mixture_of_depths": "mixture-of-depths layers are not a plan architecture",
    **dict.fromkeys(
        ("tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size"),
        "a Megatron-Core run (mcore_adapter, USE_MCA=1): write it as a megatron command line",
    ),
}
UNMODELLED = {
    "additional_target": "these modules are trained in full beside the adapters",
    "use_adam_mini": "Adam-mini keeps one second moment per block: less than AdamW's",
    "upcast_layernorm": "the norms' weights are kept in fp32",
    "upcast_lmhead_output": "the output head's logits are cast to fp32",
    "use_unsloth": "Unsloth's patched model and kernels",
    "neat_packing": "packed sequences attend within themselves (a 4-D mask per batch)",
    "shift_attn": "LongLoRA's shifted short attention",
    "rope_scaling": "RoPE scaling lengthens the context; the plan takes cutoff_len",
}
IGNORED = frozenset(
    {  # data, templates, logging, evaluation, saving: no effect on a step's memory or time
        "trust_remote_code",
        "dataset",
        "eval_dataset",
        "dataset_dir",
        "template",
        "max_samples",
        "overwrite_cache",
        "preprocessing_num_workers",
        "dataloader_num_workers",
        "plot_loss",
        "val_size",
        "tokenized_path",
        "do_train",
        "mask_history",
        "streaming",
        "buffer_size",
        "mix_strategy",
        "interleave_probs",
        "default_system",
        "enable_thinking",
        "tool_format",
        "media_dir",
        "image_max_pixels",
        "image_min_pixels",
        "video_max_pixels",
        "video_min_pixels",
        "video_fps",
        "video_maxlen",
        "adapter_name_or_path",
        "cache_dir",
        "use_fast_tokenizer",
        "model_revision",
        "use_rslora",
        "pissa_init",
        "pissa_iter",
        "pissa_convert",
        "loraplus_lr_ratio",
        "loraplus_lr_embedding",
        "create_new_adapter",
        "train_from_scratch",
        "low_cpu_mem_usage",
        "fp8_backend",
        "fsdp_transformer_layer_cls_to_wrap",
        "compute_accuracy",
        "disable_shuffling",
        "ray_num_workers",
        "include_effective_tokens_per_second",
        "use_reentrant_gc",
        "print_param_status",
        "use_swanlab",
        "freeze_multi_modal_projector",
        "preprocessing_batch_size",
        "ignore_pad_token_for_loss",
        "eval_on_each_dataset",
        "use_dft_loss",
        "train_on_prompt",
        "freeze_vision_tower",
        "use_asft_loss",
        "use_eaft_loss",
        "asft_alpha",
        "eaft_alpha",
        "early_stopping_steps",
        *hf_trainer.IGNORED,
    }
)


def _task(cfg: dict[str, Any], r: Reading) -> str:
    """stage and finetuning_type, with quantization_bit: the plan's task (refusing what it cannot describe)."""
    stage = choice("stage", cfg.get("stage", "sft"), STAGES)
    if stage in ("rl", "value_head"):
        raise PlanError("stage", f"{cfg['stage']}: {RL_WHY if stage == 'rl' else RM_WHY}")
    kind = cfg.get("finetuning_type", DEFAULT_TYPE)
    if kind in ("freeze", "oft"):
        why = (
            "trains the last freeze_trainable_layers layers (default 2) in full and freezes the rest"
            if kind == "freeze"
            else "OFT's orthogonal adapters"
        )
        raise PlanError("finetuning_type", f"{kind}: {why}; the plan trains every weight (full) or LoRA adapters")
    choice("finetuning_type", kind, {"full": 0, "lora": 0})
    bits = cfg.get("quantization_bit")
    if bits is not None and kind != "lora":
        raise bad(
            "quantization_bit",
            bits,
            "needs finetuning_type lora: a quantized model trains adapters only (model/adapter.py)",
        )
    task = "finetune" if kind == "full" else "qlora" if bits is not None else "lora"
    r.set(
        "finetuning_type" if "finetuning_type" in cfg else "finetuning_type (absent: the default lora)",
        "workload.task",
        task,
    )
    if bits is not None:
        _quantization(cfg, r, as_int("quantization_bit", bits))
    if stage == "dpo":
        r.set("stage", "workload.objective", "preference")
    if stage == "dpo":
        r.set(
            "pref_loss" if "pref_loss" in cfg else "pref_loss (absent: the default sigmoid)",
            "workload.preference.loss_type",
            choice("pref_loss", cfg.get("pref_loss", "sigmoid"), PREF_LOSSES),
        )
        # train/dpo/trainer.py concatenated_forward: `.logits.to(torch.float32)`, then get_batch_logps' log_softmax
        r.set("stage (CustomDPOTrainer: log-probs over fp32 logits)", "workload.preference.log_probs", "upcast")
    return task


def _quantization(cfg: dict[str, Any], r: Reading, bits: int) -> None:
    """quantization_bit with quantization_method (default bnb; model_utils/quantization.py)."""
    method = as_text("quantization_method", cfg.get("quantization_method", "bnb")).lower()
    if (method, bits) not in (("bnb", 4), ("bnb", 8), ("hqq", 4), ("hqq", 8), ("eetq", 8)):
        raise bad(
            "quantization_bit",
            bits,
            f"with quantization_method {method}: the plan's quantized weights are 4-bit (nf4) or 8-bit (int8)",
        )
    r.set("quantization_bit", "precision.weights", "nf4" if bits == 4 else "int8")
    if method != "bnb":
        r.note(
            "quantization_method",
            f"{method}'s {bits}-bit weights are planned as bitsandbytes' "
            f"{'nf4' if bits == 4 else 'int8'} (the same bits, other scales)",
        )
    if bits == 4 and method == "bnb":  # BitsAndBytesConfig(bnb_4bit_use_double_quant=double_quantization)
        double = as_bool("double_quantization", cfg.get("double_quantization", True))
        r.set(
            "double_quantization" if "double_quantization" in cfg else "double_quantization (absent: true)",
            "precision.double_quant",
            double,
        )
        if str(cfg.get("quantization_type", "nf4")).lower() == "fp4":
            r.note("quantization_type", "fp4 is read as nf4: the same 4 bits and block scales")


def _lora(cfg: dict[str, Any], r: Reading) -> None:
    rank = as_int("lora_rank", cfg.get("lora_rank", DEFAULT_RANK))
    r.set("lora_rank" if "lora_rank" in cfg else "lora_rank (absent: 8)", "workload.lora.rank", rank)
    alpha = cfg.get("lora_alpha") or rank * 2
    r.set(
        "lora_alpha" if cfg.get("lora_alpha") else "lora_alpha (absent: lora_rank × 2)",
        "workload.lora.alpha",
        as_number("lora_alpha", alpha, 0),
    )
    r.set(
        "lora_dropout" if "lora_dropout" in cfg else "lora_dropout (absent: 0)",
        "workload.lora.dropout",
        as_number("lora_dropout", cfg.get("lora_dropout", DEFAULT_DROPOUT), 0, 1),
    )
    if "use_dora" in cfg:
        r.set("use_dora", "workload.lora.variant", "dora" if as_bool("use_dora", cfg["use_dora"]) else "lora")
    target = cfg.get("lora_target", "all")
    names = [n.strip() for n in as_text("lora_target", target).split(",")] if isinstance(target, str) else target
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise bad("lora_target", target, "must be all or module names separated by commas")
    source = "lora_target" if "lora_target" in cfg else "lora_target (absent: all)"
    if names == ["all"]:  # model_utils/misc.py find_all_linear_modules: every linear layer but the output head
        r.set(source, "workload.lora.targets", list(ALL_LINEAR))
        return
    others = [n for n in names if n not in MODULES]
    if others:
        r.note("lora_target", f"{', '.join(others)} are not Llama-style projection names (q_proj ... down_proj)")
    targets = sorted({MODULES[n] for n in names if n in MODULES}, key=ALL_LINEAR.index)
    if targets:
        r.set(source, "workload.lora.targets", targets)


def _precision(cfg: dict[str, Any], r: Reading, task: str) -> None:
    """bf16 / fp16 (the Trainer's autocast; parser.py makes it the model's compute_dtype), pure_bf16 (bf16
    parameters, no fp32 upcast: model/adapter.py), fp8; a LoRA's frozen base loads in compute_dtype."""
    args = Args(values=cfg, dash="", gpus=None)
    hf_trainer.read_precision(r, args)
    pure = as_bool("pure_bf16", cfg.get("pure_bf16", False))
    if pure:
        r.set("pure_bf16", "precision.compute", "bf16")
        if task == "finetune":
            r.set("pure_bf16", "precision.master_weights", "none")
    elif "precision" not in r.plan or "compute" not in r.plan["precision"]:
        r.set("bf16 (absent: the model loads in its checkpoint's dtype, planned as bf16)", "precision.compute", "bf16")
        r.note(
            "bf16",
            "absent: LLaMA-Factory loads the model in the checkpoint's dtype (patcher.py "
            "infer_optim_dtype) and the Trainer runs no autocast; planned as bf16 autocast",
        )
    if as_bool("fp8", cfg.get("fp8", False)):
        r.set("fp8", "precision.compute", "fp8")
        if cfg.get("fp8_enable_fsdp_float8_all_gather") is not None:
            r.set(
                "fp8_enable_fsdp_float8_all_gather",
                "precision.fp8_all_gather",
                as_bool("fp8_enable_fsdp_float8_all_gather", cfg["fp8_enable_fsdp_float8_all_gather"]),
            )
    compute = r.plan["precision"]["compute"]
    if task == "lora":  # patcher.py: from_pretrained(torch_dtype=compute_dtype); adapters upcast to fp32
        r.set(
            f"{'pure_bf16' if pure else 'bf16/fp16'} (the frozen base loads in compute_dtype)",
            "precision.weights",
            "fp32" if compute == "fp32" else "fp16" if compute == "fp16" else "bf16",
        )
    hf_trainer.read_optim(r, args)
    if as_bool("use_muon", cfg.get("use_muon", False)):
        r.set("use_muon", "precision.optimizer", "muon")


def _techniques(cfg: dict[str, Any], r: Reading) -> None:
    """Gradient checkpointing (on unless disable_gradient_checkpointing), Unsloth's offloaded checkpoints,
    flash_attn, Liger (its fused linear cross-entropy for sft and pt: liger_kernel.py), torch_compile."""
    disabled = as_bool("disable_gradient_checkpointing", cfg.get("disable_gradient_checkpointing", False))
    forced = as_bool("gradient_checkpointing", cfg.get("gradient_checkpointing", False))
    source = (
        "gradient_checkpointing"
        if forced
        else "disable_gradient_checkpointing"
        if "disable_gradient_checkpointing" in cfg
        else "disable_gradient_checkpointing (absent: false)"
    )
    r.set(source, "techniques.activation_checkpointing", "none" if disabled and not forced else "full")
    if as_bool("use_unsloth_gc", cfg.get("use_unsloth_gc", False)):  # saves each layer's input on the CPU
        r.set("use_unsloth_gc", "techniques.activation_offload", True)
    attention = str(cfg.get("flash_attn", "auto")).lower()
    r.set(
        "flash_attn" if "flash_attn" in cfg else "flash_attn (absent: auto, transformers' sdpa)",
        "techniques.attention",
        choice("flash_attn", attention, ATTENTION),
    )
    liger = [k for k in ("enable_liger_kernel", "use_liger_kernel") if as_bool(k, cfg.get(k, False))]
    if liger:
        r.set(liger[0], "techniques.loss", "fused")
    if "torch_compile" in cfg:
        r.set("torch_compile", "techniques.compile", as_bool("torch_compile", cfg["torch_compile"]))


def _data(cfg: dict[str, Any], r: Reading, stage: str) -> None:
    """cutoff_len and packing (neat_packing packs too; unset, packing is on for pt only: parser.py)."""
    length = as_int("cutoff_len", cfg.get("cutoff_len", DEFAULT_CUTOFF))
    r.set("cutoff_len" if "cutoff_len" in cfg else "cutoff_len (absent: 2048)", "workload.sequence_length", length)
    packing = cfg.get("packing")
    packed = (as_bool("packing", packing) if packing is not None else stage == "pt") or as_bool(
        "neat_packing", cfg.get("neat_packing", False)
    )
    if not packed:
        r.note(
            "packing" if packing is not None else "packing (absent: off for sft)",
            "each batch is padded to its longest sample, up to cutoff_len; the plan takes every sequence at "
            "cutoff_len (an upper bound)",
        )


def _deepspeed(cfg: dict[str, Any], r: Reading, files: Callable[[str], str | None] | None) -> None:
    """deepspeed: the JSON's path (read with the deepspeed format where `files` finds it; else one of
    LLaMA-Factory's examples/deepspeed files by its name) or the config inline."""
    value = cfg["deepspeed"]
    text = files(value) if files is not None and isinstance(value, str) else None
    r.plan["framework"] = "deepspeed"
    if isinstance(value, dict) or text is not None:
        deepspeed.read_into(r, "deepspeed", text if text is not None else value)
        return
    name = as_text("deepspeed", value).replace("\\", "/").split("/")[-1]
    if name not in DEEPSPEED_EXAMPLES:
        raise bad(
            "deepspeed",
            value,
            "is not beside the config, and its name is none of LLaMA-Factory's "
            f"examples/deepspeed files ({', '.join(DEEPSPEED_EXAMPLES)}): its ZeRO stage "
            "is in the file; give the file",
        )
    stage, offload = DEEPSPEED_EXAMPLES[name]
    r.set(f"deepspeed ({name}: LLaMA-Factory's examples/deepspeed file)", "parallelism.zero_stage", stage)
    r.set(f"deepspeed ({name}: LLaMA-Factory's examples/deepspeed file)", "techniques.offload", offload)
    r.note(
        "deepspeed",
        f"{value} is not beside the config: its stage and offload are those of LLaMA-Factory's "
        f"examples/deepspeed/{name}",
    )


def _batch(cfg: dict[str, Any], r: Reading, gpus: int | None) -> None:
    """per_device_train_batch_size (the Trainer's default 8) × gradient_accumulation_steps × GPUs; max_steps or
    num_train_epochs (hf_trainer.py reads them as the Trainer does)."""
    args = Args(values=cfg, dash="", gpus=gpus)
    if gpus is not None:
        r.set("gpus", "hardware.count", gpus)
    hf_trainer.read_batch(r, args)
    if "per_device_train_batch_size" in cfg:
        r.set(
            "per_device_train_batch_size",
            "workload.micro_batch_size",
            as_int("per_device_train_batch_size", cfg["per_device_train_batch_size"]),
        )
    hf_trainer.read_steps(r, args)


def _refuse(cfg: dict[str, Any]) -> None:
    """A config whose run the plan does not describe: PlanError naming the key and why."""
    if V1_KEYS & set(cfg) and "model" in cfg:
        raise PlanError(
            "config",
            f"a LLaMA-Factory v1 config ({', '.join(sorted(V1_KEYS & set(cfg)))}): its keys "
            "are not read yet; write it with the v0 keys (model_name_or_path, stage, "
            "finetuning_type, ...)",
        )
    for key, why in REFUSED.items():
        value = cfg.get(key)
        on = (
            as_int(key, value) > 1
            if key.endswith("_size") and value is not None
            else isinstance(value, str) or (value is not None and as_bool(key, value))
        )
        if on:
            raise PlanError(key, f"{value}: {why}")


# the keys the functions above read (sort_rest files each one no read or note names as ignored)
_TAKEN = frozenset(
    {
        "model_name_or_path",
        "stage",
        "finetuning_type",
        "quantization_bit",
        "quantization_method",
        "quantization_type",
        "double_quantization",
        "lora_rank",
        "lora_alpha",
        "lora_dropout",
        "lora_target",
        "use_dora",
        "bf16",
        "fp16",
        "pure_bf16",
        "fp8",
        "fp8_enable_fsdp_float8_all_gather",
        "optim",
        "use_muon",
        "disable_gradient_checkpointing",
        "gradient_checkpointing",
        "use_unsloth_gc",
        "flash_attn",
        "enable_liger_kernel",
        "use_liger_kernel",
        "torch_compile",
        "cutoff_len",
        "packing",
        "neat_packing",
        "deepspeed",
        "fsdp",
        "fsdp_config",
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "max_steps",
        "num_train_epochs",
        *REFUSED,
    }
)


def read(
    text: str | Document, *, gpus: int | None = None, files: Callable[[str], str | None] | None = None
) -> Imported:
    """A LLaMA-Factory training config read as a partial plan (see the module's docstring); `files` gives the text
    of a file the config names (its DeepSpeed JSON), or None where there is none."""
    cfg = mapping(text)
    _refuse(cfg)
    r = Reading(format="llamafactory", plan={"framework": FRAMEWORK})
    name = cfg.get("model_name_or_path")
    if not isinstance(name, str) or not name:
        raise bad("model_name_or_path", name, "must name the model (a Hugging Face repo id or path)")
    r.model("model_name_or_path", name)
    if PREQUANTIZED.search(name.lower()) and cfg.get("quantization_bit") is None:
        r.note(
            "model_name_or_path",
            f"{name} names a pre-quantized checkpoint (its quantization is in its "
            "config.json): planned with a 16-bit base",
        )
    task = _task(cfg, r)
    if task != "finetune":
        _lora(cfg, r)
    _precision(cfg, r, task)
    _techniques(cfg, r)
    _data(cfg, r, STAGES[cfg.get("stage", "sft")])
    if cfg.get("deepspeed"):
        _deepspeed(cfg, r, files)
    hf_trainer.read_fsdp(r, Args(values=cfg, dash="", gpus=gpus))
    _batch(cfg, r, gpus)
    rest = {key: value for key, value in cfg.items() if key != "model_name_or_path"}
    r.sort_rest(rest, known=_TAKEN, ignored=IGNORED, unmodelled={**hf_trainer.UNMODELLED, **UNMODELLED})
    return r.imported()


def detect(text: str | Document) -> bool:
    """A LLaMA-Factory training config: YAML with its own `stage` and `finetuning_type` keys (which no
    TrainingArguments, Axolotl or torchtune config has), or a v1 config (read to be refused with why)."""
    cfg = quiet_mapping(text)
    return "stage" in cfg and "finetuning_type" in cfg or "model" in cfg and bool(V1_KEYS & set(cfg))


FORMAT = Format(
    name="llamafactory",
    label="LLaMA-Factory training config (YAML; read only)",
    framework=FRAMEWORK,
    suffix=".yaml",
    detect=detect,
    read=read,
    write=None,
    reads_files=True,
    says=(
        "workload.task",
        "workload.objective",
        "workload.preference.loss_type",
        "workload.preference.log_probs",
        "workload.sequence_length",
        "workload.micro_batch_size",
        "workload.global_batch_size",
        "workload.steps",
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
        "precision.fp8_all_gather",
        "techniques.activation_checkpointing",
        "techniques.activation_offload",
        "techniques.attention",
        "techniques.loss",
        "techniques.compile",
        "techniques.offload",
        "parallelism.zero_stage",
        "parallelism.flat_params",
        "hardware.count",
    ),
    cannot_say={
        "export": "LLaMA-Factory configs are read, not written: export the plan --to hf_trainer, deepspeed or "
        "accelerate and run it with those"
    },
)
