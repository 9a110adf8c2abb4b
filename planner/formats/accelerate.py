"""`accelerate config` YAML (`accelerate launch --config_file x.yaml`): how the processes are laid out (DDP, FSDP,
DeepSpeed), the mixed precision, the FSDP options and the DeepSpeed plugin's ZeRO stage and offload.

Key names, spellings and defaults are accelerate's own (huggingface/accelerate at 16cb6eb, 2026-07-24):
src/accelerate/commands/config/config_args.py, utils/dataclasses.py (DistributedType, DeepSpeedPlugin,
FullyShardedDataParallelPlugin) and utils/constants.py, and the templates in examples/config_yaml_templates.
The FSDP options are shared with TrainingArguments' fsdp_config (planner/formats/hf_trainer.py), which takes the
same names with or without their `fsdp_` prefix (transformers training_args.py strips it).
"""

from __future__ import annotations

from typing import Any

import yaml

from planner.errors import bad
from planner.formats.base import RELEASE_WHY, Document, Format, Imported, marked, training_defaults
from planner.formats.reading import Reading, as_bool, as_int, as_mapping, choice, mapping, quiet_mapping
from planner.plan.config import Plan

FRAMEWORK = "accelerate_fsdp"

# utils/constants.py FSDP_SHARDING_STRATEGY; a number is its place in that list (torch ShardingStrategy values)
SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2")
# the ZeRO stage each strategy is: parameters, gradients and states sharded (3), all but the parameters (2), none
STAGES = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0}
HYBRID_WHY = (
    "shards within a node and replicates across nodes; the plan shards over all data-parallel ranks "
    "(the ZeRO stage is the recipe's 3)"
)
# FSDP options (without their fsdp_ prefix) that change memory with no plan key, and the values that do it
FSDP_UNMODELLED = {
    # torch FSDP docs, BackwardPrefetch.BACKWARD_PRE: "at the peak, it holds the current set of parameters, next set
    # of parameters, and current set of gradients"
    "backward_prefetch": (
        "BACKWARD_PRE",
        "the next unit's parameters are gathered before this unit's gradients "
        "are freed (one more unit held at the peak)",
    ),
    "forward_prefetch": (True, "the next unit's parameters are gathered during this unit's forward"),
}
# FSDP options known to leave the training step's memory alone (wrapping, loading, saving)
FSDP_IGNORED = frozenset(
    {
        "auto_wrap_policy",
        "transformer_layer_cls_to_wrap",
        "min_num_params",
        "state_dict_type",
        "sync_module_states",
        "cpu_ram_efficient_loading",
        "limit_all_gathers",
        "xla",
        "xla_fsdp_settings",
        "xla_fsdp_grad_ckpt",
        "xla_fsdp_v2",
        "ignored_modules",
    }
)

# DistributedType: the ones that run data-parallel (DDP) on accelerators; DEEPSPEED and FSDP are read apart
DDP_TYPES = (
    "NO",
    "MULTI_GPU",
    "MULTI_NPU",
    "MULTI_MLU",
    "MULTI_SDAA",
    "MULTI_MUSA",
    "MULTI_XPU",
    "MULTI_HPU",
    "MULTI_NEURON",
)
NOT_GPU = ("MULTI_CPU", "XLA")
# mixed_precision (config_args.py; "no" is fp32, launch's default)
PRECISIONS = {"no": "fp32", "fp16": "fp16", "bf16": "bf16", "fp8": "fp8"}
PRECISION_NAMES = {"fp32": "no", "fp16": "fp16", "bf16": "bf16", "fp8": "fp8"}
# DeepSpeedPlugin offload devices (dataclasses.py: "none", "cpu", "nvme")
OFFLOAD_DEVICES = ("none", "cpu", "nvme")
ZERO_STAGE_DEFAULT = 2  # dataclasses.py DeepSpeedPlugin: ACCELERATE_DEEPSPEED_ZERO_STAGE, default 2

# top-level keys known to leave memory and step time alone (where and how the processes start)
IGNORED = frozenset(
    {
        "compute_environment",
        "debug",
        "machine_rank",
        "main_process_ip",
        "main_process_port",
        "main_training_function",
        "rdzv_backend",
        "same_network",
        "gpu_ids",
        "tpu_env",
        "tpu_name",
        "tpu_zone",
        "tpu_use_cluster",
        "tpu_use_sudo",
        "commands",
        "command_file",
        "downcast_bf16",
        "enable_cpu_affinity",
        "num_machines",
        "mpirun_config",
        "ipex_config",
        "use_cpu",
        "sagemaker_metrics_file",
        "mpi_hostfile",
    }
)
UNMODELLED = {
    "megatron_lm_config": "accelerate's Megatron-LM plugin: tensor, pipeline and sequence parallelism configured "
    "there are not read",
    "fp8_config": "the fp8 backend's scaling settings (Transformer Engine, MS-AMP, torchao); the plan's fp8 recipe "
    "is precision.fp8_recipe",
}
DEEPSPEED_IGNORED = frozenset(
    {
        "zero3_init_flag",
        "zero3_save_16bit_model",
        "deepspeed_multinode_launcher",
        "deepspeed_hostfile",
        "deepspeed_exclusion_filter",
        "deepspeed_inclusion_filter",
        "gradient_clipping",
        "offload_optimizer_nvme_path",
        "offload_param_nvme_path",
        "deepspeed_moe_layer_cls_names",
    }
)
# the DeepSpeed plugin's keys (also `accelerate launch --use_deepspeed` options)
DEEPSPEED_KEYS = DEEPSPEED_IGNORED | {
    "zero_stage",
    "offload_optimizer_device",
    "offload_param_device",
    "gradient_accumulation_steps",
    "deepspeed_config_file",
}
DYNAMO_IGNORED = frozenset(
    {"dynamo_mode", "dynamo_use_fullgraph", "dynamo_use_dynamic", "dynamo_use_regional_compilation"}
)
# parallelism_config (accelerate ParallelismConfig): the degrees the plan has
PARALLEL_DEGREES = {
    "parallelism_config_tp_size": "parallelism.tensor",
    "parallelism_config_cp_size": "parallelism.context",
}


# --- FSDP options (shared with TrainingArguments' fsdp_config) -------------------------------------------------------
def _strategy(led: Reading, key: str, value: Any) -> None:
    """fsdp_sharding_strategy, or FSDP1's fsdp_reshard_after_forward, by name or number (dataclasses.py)."""
    name = SHARDING_STRATEGIES[int(value) - 1] if str(value).isdigit() and 1 <= int(value) <= 5 else str(value).upper()
    if name not in SHARDING_STRATEGIES:
        raise bad(key, value, f"is not an FSDP sharding strategy; allowed: {', '.join(SHARDING_STRATEGIES)}")
    if name in STAGES:
        led.set(key, "parallelism.zero_stage", STAGES[name])
    else:
        led.note(key, HYBRID_WHY)


FLAT_WHY = (
    "FSDP1 flat parameters: with LoRA or QLoRA under full sharding a unit's frozen base gets gradients "
    "too (give parallelism.flat_params true)"
)


def fsdp_options(
    led: Reading, options: dict[str, Any], where: str, *, adapters: bool | None, orig_default: bool
) -> None:
    """FSDP options (accelerate fsdp_config, TrainingArguments fsdp_config), each named `where` + its key.
    `adapters`: whether the plan trains LoRA adapters (None: the config does not say); `orig_default`: the
    use_orig_params an absent key means (accelerate False, transformers True)."""
    named = {key.removeprefix("fsdp_"): key for key in options}
    version = as_int(f"{where}{named['version']}", options[named["version"]], 1) if "version" in named else 1
    if version not in (1, 2):
        raise bad(f"{where}{named['version']}", version, "is not an FSDP version; allowed: 1, 2")
    for short, key in named.items():
        value, source = options[key], f"{where}{key}"
        if short == "sharding_strategy" or short == "reshard_after_forward" and version == 1:
            _strategy(led, source, value)
        elif short == "reshard_after_forward":  # FSDP2: a bool; False keeps the parameters gathered until backward
            led.set(source, "parallelism.zero_stage", 3 if as_bool(source, value) else 2)
        elif short == "offload_params":  # CPUOffload(offload_params=True): parameters, gradients, optimizer step
            led.set(source, "techniques.offload", "optimizer_and_params" if as_bool(source, value) else "none")
        elif short == "activation_checkpointing":
            led.set(source, "techniques.activation_checkpointing", "full" if as_bool(source, value) else "none")
        elif short in FSDP_UNMODELLED and str(value).upper() == str(FSDP_UNMODELLED[short][0]).upper():
            led.note(source, FSDP_UNMODELLED[short][1])
        elif short in FSDP_IGNORED or short in FSDP_UNMODELLED or short == "version":
            led.ignored.append(source)  # version: read with use_orig_params below
        elif short != "use_orig_params":
            led.unknown.append(source)
    _flat_params(led, options, where, version == 1, adapters, orig_default)


def _flat_params(
    led: Reading, options: dict[str, Any], where: str, fsdp1: bool, adapters: bool | None, orig_default: bool
) -> None:
    """use_orig_params under FSDP1 full sharding: flat parameters, which only change a LoRA plan's memory."""
    key = next((k for k in options if k.removeprefix("fsdp_") == "use_orig_params"), None)
    source = f"{where}{key}" if key else f"{where}use_orig_params (absent: {str(orig_default).lower()})"
    flat = (
        fsdp1
        and (as_bool(source, options[key]) if key else orig_default)
        and led.plan.get("parallelism", {}).get("zero_stage", 3) == 3
    )
    if adapters and flat:
        led.set(source, "parallelism.flat_params", True)
    elif flat and adapters is None and key:
        led.note(source, FLAT_WHY)
    elif key:
        led.ignored.append(source)  # FSDP2, not full sharding, or no adapters: no flat-parameter gradients


def fsdp_section(plan: Plan) -> dict[str, Any]:
    """The FSDP options that run the plan: FSDP1 with use_orig_params where it has flat parameters, else FSDP2."""
    par, tech = plan.parallelism, plan.techniques
    out: dict[str, Any] = {
        "fsdp_activation_checkpointing": tech.activation_checkpointing == "full",
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_offload_params": tech.offload == "optimizer_and_params",
    }
    if par.flat_params:
        strategy = next(name for name, stage in STAGES.items() if stage == par.zero_stage)
        out.update({"fsdp_sharding_strategy": strategy, "fsdp_use_orig_params": True})
    else:
        out["fsdp_reshard_after_forward"] = par.zero_stage == 3
    out["fsdp_version"] = 1 if par.flat_params else 2
    return out


# --- the plugins --------------------------------------------------------------------------------------------------
def deepspeed_plugin(led: Reading, section: Any, where: str = "deepspeed_config.") -> None:
    """deepspeed_config (DeepSpeedPlugin; `accelerate launch --use_deepspeed --zero_stage ...` the same keys): the
    stage and offload devices, or a DeepSpeed config file that holds them. Each key is named `where` + key."""
    section = as_mapping(where.rstrip("."), section)
    if "deepspeed_config_file" in section:
        led.note(
            f"{where}deepspeed_config_file",
            "the ZeRO stage, offload and batch are in that file: read it with the deepspeed format",
        )
    elif "zero_stage" not in section:  # the recipe leaves the stage to the plan; the plugin's default is 2: written
        led.set(f"{where}zero_stage (absent)", "parallelism.zero_stage", ZERO_STAGE_DEFAULT)
    devices = {
        key: choice(f"{where}{key}", section.get(key, "none"), {d: d for d in OFFLOAD_DEVICES}, any_case=True)
        for key in ("offload_optimizer_device", "offload_param_device")
    }
    for key, value in section.items():
        source = f"{where}{key}"
        if key == "zero_stage":
            if isinstance(value, bool) or value not in (0, 1, 2, 3):
                raise bad(source, value, "is not a ZeRO stage; allowed: 0, 1, 2, 3")
            led.set(source, "parallelism.zero_stage", value)
        elif key in devices and devices[key] == "nvme":
            led.note(
                source,
                "NVMe (ZeRO-Infinity) is planned as CPU offload: the GPU holds the same; the NVMe "
                "transfers' time is not planned",
            )
        elif key == "gradient_accumulation_steps":
            led.note(source, "the global batch is micro-batch × accumulation × GPUs; the micro-batch is the script's")
        elif key in DEEPSPEED_IGNORED or key == "deepspeed_config_file":
            led.ignored.append(source)
        elif key not in devices:
            led.unknown.append(source)
    if set(devices) & set(section):
        _deepspeed_offload(led, devices, where)
    for key in set(devices) & set(section):  # the one that did not decide the offload
        if not any(r.source == f"{where}{key}" for r in led.read) and devices[key] != "nvme":
            led.ignored.append(f"{where}{key}")


def _deepspeed_offload(led: Reading, devices: dict[str, str], where: str) -> None:
    optimizer, params = (
        ("none" if devices[k] == "none" else "cpu") for k in ("offload_optimizer_device", "offload_param_device")
    )
    if params == "cpu" and optimizer != "cpu":
        led.note(
            f"{where}offload_param_device",
            "parameters offloaded without the optimizer: the plan's offload moves the optimizer too",
        )
    elif params == "cpu":
        led.set(f"{where}offload_param_device", "techniques.offload", "optimizer_and_params")
    else:
        led.set(f"{where}offload_optimizer_device", "techniques.offload", "optimizer" if optimizer == "cpu" else "none")


def _parallelism(led: Reading, section: Any) -> None:
    section = as_mapping("parallelism_config", section)
    for key, value in section.items():
        source = f"parallelism_config.{key}"
        if key in PARALLEL_DEGREES:
            led.set(source, PARALLEL_DEGREES[key], as_int(source, value, 1))
        elif key == "parallelism_config_dp_replicate_size" and as_int(source, value, 1) > 1:
            led.note(source, HYBRID_WHY)
        elif key in (
            "parallelism_config_dp_shard_size",
            "parallelism_config_dp_replicate_size",
            "parallelism_config_cp_comm_strategy",
        ):
            led.ignored.append(source)  # the data-parallel degrees follow from the GPU count
        else:
            led.unknown.append(source)


def _dynamo_backend(led: Reading, value: Any) -> None:
    """The top-level dynamo_backend of configs before accelerate 0.18 (dynamo_config since)."""
    led.set("dynamo_backend", "techniques.compile", str(value).upper() != "NO")


def _dynamo(led: Reading, section: Any) -> None:
    section = as_mapping("dynamo_config", section)
    for key, value in section.items():
        if key == "dynamo_backend":  # dataclasses.py DynamoBackend: NO turns torch.compile off
            led.set("dynamo_config.dynamo_backend", "techniques.compile", str(value).upper() != "NO")
        elif key in DYNAMO_IGNORED:
            led.ignored.append(f"dynamo_config.{key}")
        else:
            led.unknown.append(f"dynamo_config.{key}")


def _layout(led: Reading, config: dict[str, Any]) -> str:
    """distributed_type: the framework and, for DDP, ZeRO stage 0; its plugin's section read."""
    kind = str(config.get("distributed_type", "NO")).upper()
    if kind in NOT_GPU or as_bool("use_cpu", config.get("use_cpu", False)):
        raise bad(
            "distributed_type" if kind in NOT_GPU else "use_cpu",
            kind if kind in NOT_GPU else True,
            "runs on CPUs or TPUs; this planner plans GPU memory",
        )
    if kind == "DEEPSPEED":
        led.set("distributed_type", "framework", "deepspeed")
        deepspeed_plugin(led, config.get("deepspeed_config") or {})
    elif kind == "FSDP":
        led.set("distributed_type", "framework", FRAMEWORK)
        options = as_mapping("fsdp_config", config.get("fsdp_config") or {})
        fsdp_options(led, options, "fsdp_config.", adapters=None, orig_default=False)
    elif kind in DDP_TYPES or kind == "MEGATRON_LM":
        led.set("distributed_type", "parallelism.zero_stage", 0)  # DDP replicates everything
    else:
        allowed = ", ".join(DDP_TYPES + ("FSDP", "DEEPSPEED", "MEGATRON_LM"))
        raise bad("distributed_type", config.get("distributed_type"), f"is not one of: {allowed}")
    return kind


def _precision(led: Reading, config: dict[str, Any], kind: str) -> None:
    if config.get("mixed_precision") is not None:
        led.set(
            "mixed_precision",
            "precision.compute",
            choice("mixed_precision", config["mixed_precision"], PRECISIONS, any_case=True),
        )
    elif "fp16" in config:  # config_args.py: configs before mixed_precision said fp16: true
        led.set("fp16", "precision.compute", "fp16" if as_bool("fp16", config["fp16"]) else "fp32")
    elif kind != "DEEPSPEED":  # launch's default "no" (fp32) differs from the recipe's bf16: written
        led.set("(no mixed_precision)", "precision.compute", "fp32")


def _processes(led: Reading, config: dict[str, Any], gpus: int | None) -> None:
    """num_processes: the processes of all machines together, one GPU each (config_args.py; -1: not said)."""
    count = config.get("num_processes")
    count = None if count is None else as_int("num_processes", count, -1)
    if count not in (None, -1, 0) and gpus is not None and count != gpus:
        raise bad("num_processes", count, f"differs from the GPU count given ({gpus})")
    if count not in (None, -1, 0):
        led.set("num_processes", "hardware.count", count)
    elif gpus is not None:
        led.plan["hardware"] = {"count": gpus}


SECTIONS = {"parallelism_config": _parallelism, "dynamo_config": _dynamo, "dynamo_backend": _dynamo_backend}
READ = frozenset({"distributed_type", "mixed_precision", "fp16", "num_processes", "deepspeed_config", "fsdp_config"})


def read(text: str | Document, *, gpus: int | None = None) -> Imported:
    config = mapping(text)
    led = Reading(format="accelerate", plan={"framework": FRAMEWORK})
    kind = _layout(led, config)
    _precision(led, config, kind)
    _processes(led, config, gpus)
    for key, value in config.items():
        if key in SECTIONS:
            SECTIONS[key](led, value)
        elif key in READ:
            said = [r.source for r in led.read] + led.unmodelled + led.ignored + led.unknown
            if not any(s == key or s.startswith((f"{key}.", f"{key}: ")) for s in said):
                led.ignored.append(key)  # another distributed_type's options, or fp16 beside mixed_precision
        else:
            led.other(key, unmodelled=UNMODELLED, ignored=IGNORED)
    return marked(led.imported(), training_defaults("accelerate"))


# --- writing ------------------------------------------------------------------------------------------------------
def layout(plan: Plan) -> str:
    """The distributed_type that runs the plan: DeepSpeed where it is the framework or where only it can say the
    stage or the offload (ZeRO-1, optimizer-only offload), FSDP for ZeRO-2/3, else DDP."""
    par, offload = plan.parallelism, plan.techniques.offload
    if plan.framework == "deepspeed" or par.zero_stage == 1 or offload == "optimizer":
        return "DEEPSPEED"
    if par.zero_stage >= 2:
        return "FSDP"
    return "MULTI_GPU" if plan.hardware.count > 1 else "NO"


def write(plan: Plan) -> str:
    par, offload = plan.parallelism, plan.techniques.offload
    kind = layout(plan)
    config: dict[str, Any] = {"compute_environment": "LOCAL_MACHINE", "distributed_type": kind}
    if kind == "DEEPSPEED":
        config["deepspeed_config"] = {
            "offload_optimizer_device": "cpu" if offload != "none" else "none",
            "offload_param_device": "cpu" if offload == "optimizer_and_params" else "none",
            "zero3_init_flag": par.zero_stage == 3,
            "zero_stage": par.zero_stage,
        }
    elif kind == "FSDP":
        config["fsdp_config"] = fsdp_section(plan)
    if plan.techniques.compile:
        config["dynamo_config"] = {"dynamo_backend": "INDUCTOR"}
    config.update(
        {
            "mixed_precision": PRECISION_NAMES[plan.precision.compute],
            "num_machines": 1,
            "num_processes": plan.hardware.count,
        }
    )
    if par.tensor > 1 or par.context > 1:
        config["parallelism_config"] = {
            "parallelism_config_tp_size": par.tensor,
            "parallelism_config_cp_size": par.context,
        }
    return yaml.safe_dump(config, sort_keys=False)


def detect(text: str | Document) -> bool:
    """A YAML mapping with accelerate's own top-level keys."""
    return bool({"distributed_type", "compute_environment"} & set(quiet_mapping(text)))


# what the accelerate config leaves to the training script it launches (TrainingArguments, the hf_trainer format)
SCRIPT_WHY = "the training script's (its TrainingArguments: export the plan --to hf_trainer)"
SCRIPT_KEYS = (
    "workload.task",
    "workload.sequence_length",
    "workload.micro_batch_size",
    "workload.global_batch_size",
    "workload.steps",
    "workload.train_tokens",
    "workload.lora.rank",
    "workload.lora.alpha",
    "workload.lora.targets",
    "workload.lora.dropout",
    "workload.lora.variant",
    "precision.master_weights",
    "precision.optimizer",
    "precision.optimizer_state",
    "precision.optimizer_impl",
    "precision.optimizer_library",
    "precision.optimizer_block_size",
    "precision.fp32_embedding_states",
    "precision.weights",
    "precision.quant_group_size",
    "precision.double_quant",
    "techniques.attention",
    "techniques.loss",
    "techniques.loss_chunks",
    "techniques.compile_scope",
    "techniques.checkpoint_every",
    "techniques.activation_offload",
    "techniques.optimizer_in_backward",
    "techniques.moe_capacity_factor",
)
NO_PIPELINE = "accelerate has no pipeline parallelism outside its Megatron-LM plugin"
DEEPSPEED_BUCKETS = (
    "the DeepSpeed plugin runs DeepSpeed's own buckets unless deepspeed_config_file names a JSON "
    "(export it --to deepspeed); FSDP has none"
)
FORMAT = Format(
    name="accelerate",
    label="accelerate config (YAML)",
    framework=FRAMEWORK,
    suffix=".yaml",
    detect=detect,
    read=read,
    write=write,
    says=(
        "precision.compute",
        "parallelism.zero_stage",
        "parallelism.tensor",
        "parallelism.context",
        "techniques.offload",
        "techniques.activation_checkpointing",
        "techniques.compile",
        "hardware.count",
    ),
    cannot_say={
        "techniques.activation_checkpointing": "only FSDP has an option for it (full, every layer); with DDP or "
        "DeepSpeed the training script turns it on",
        "parallelism.flat_params": "they change only a LoRA plan's memory, and the task is the script's: "
        "fsdp_use_orig_params under FSDP1 is noted",
        **dict.fromkeys(SCRIPT_KEYS, SCRIPT_WHY),
        "precision.gradients": "the script's dtype sets them (fp32 beside fp32 parameters), or DeepSpeed's ZeRO "
        "under its plugin (bf16)",
        **dict.fromkeys(
            ("precision.fp8_recipe", "precision.fp8_all_gather"),
            "mixed_precision fp8's recipe is fp8_config's, which is not read: read back as tensorwise, "
            "16-bit all-gathers",
        ),
        "framework": "FSDP has no optimizer-only sharding (ZeRO-1) or offload: the DeepSpeed plugin runs them",
        "framework_release": RELEASE_WHY,
        **dict.fromkeys(("parallelism.reduce_bucket_elements", "parallelism.sub_group_elements"), DEEPSPEED_BUCKETS),
        **dict.fromkeys(
            (
                "parallelism.pipeline",
                "parallelism.pipeline_layers",
                "parallelism.pipeline_schedule",
                "parallelism.virtual_stages",
            ),
            NO_PIPELINE,
        ),
        "parallelism.data": "every GPU outside the tensor and context groups is a data-parallel rank",
        "parallelism.expert": "accelerate has no expert parallelism outside its Megatron-LM plugin",
        **dict.fromkeys(
            ("parallelism.sequence_parallel", "parallelism.async_tp"),
            "parallelism_config's tensor parallelism is the model's tp_plan: no option for it",
        ),
        "techniques.expandable_segments": "an environment variable, not the accelerate config's",
    },
)
