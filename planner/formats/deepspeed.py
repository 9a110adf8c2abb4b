"""DeepSpeed's config JSON (`deepspeed.initialize(config=...)`, `--deepspeed ds_config.json` of the HF Trainer):
the batch, the precision, the ZeRO stage with its offload and buckets, the optimizer, AutoTP.

Key names, aliases and defaults are DeepSpeed's own (deepspeedai/DeepSpeed at edaa722, 2026-08-22):
docs/_pages/config-json.md, deepspeed/runtime/config.py and constants.py, deepspeed/runtime/zero/config.py and
offload_config.py, deepspeed/runtime/engine.py. A value "auto" is the HF integration's (transformers
integrations/deepspeed.py fills it from TrainingArguments): it is read as absent, and said so.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from planner.errors import bad
from planner.formats.base import (
    RELEASE_WHY,
    Document,
    Format,
    Imported,
    KeyRead,
    accumulation,
    document,
    marked,
    training_defaults,
)
from planner.formats.reading import Reading, as_bool, as_int, choice, mapping, quiet_mapping
from planner.plan.config import Plan

FRAMEWORK = "deepspeed"
AUTO = "auto"
AUTO_WHY = "'auto': the HF integration fills it from TrainingArguments; read as absent"
# the plan's bound for "the whole partition" (planner/data/frameworks.yaml: 1e13 stands for all of it)
WHOLE_PARTITION = 10**13

# runtime/constants.py FP16 = "fp16", BFLOAT16 = "bf16", BFLOAT16_OLD = "bfloat16"
PRECISION_SECTIONS = {"fp16": "fp16", "bf16": "bf16", "bfloat16": "bf16"}
# data_types.grad_accum_dtype: runtime/config.py DtypeEnum names
DTYPES = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16"}
# optimizer.type (runtime/config.py DEEPSPEED_OPTIMIZERS, matched lower-case): the plan optimizer it is.
# engine.py _configure_basic_optimizer: Adam and AdamW are FusedAdam (or torch.optim with torch_adam), Lion and
# Muon their own; OneBitAdam, Lamb, Adagrad, MuAdam, ... have no plan optimizer
OPTIMIZERS = {"adam": "adamw", "adamw": "adamw", "lion": "lion", "muon": "muon"}
OPTIMIZER_TYPES = {"adamw": "AdamW", "lion": "Lion", "muon": "Muon"}  # how shipped configs spell them
# offload_config.py OffloadDeviceEnum
OFFLOAD_DEVICES = ("none", "cpu", "nvme")

# top-level keys known to leave memory and step time alone (scheduling, logging, monitoring, checkpoints)
IGNORED = frozenset(
    {
        "scheduler",
        "gradient_clipping",
        "steps_per_print",
        "wall_clock_breakdown",
        "prescale_gradients",
        "gradient_predivide_factor",
        "zero_allow_untested_optimizer",
        "zero_force_ds_cpu_optimizer",
        "tensorboard",
        "wandb",
        "csv_monitor",
        "comet",
        "flops_profiler",
        "dump_state",
        "checkpoint",
        "seed",
        "memory_breakdown",
        "elasticity",
        "autotuning",
        "disable_allgather",
        "sparse_gradients",
        "graph_harvesting",
        "use_node_local_storage",
    }
)
# top-level keys that change memory in a way no plan key says
UNMODELLED = {
    "amp": "NVIDIA Apex AMP keeps its own casts and master copies (opt level)",
    "communication_data_type": "gradients are reduced in this dtype: a cast copy of each bucket",
    "sparse_attention": "block-sparse attention kernels change the attention activations",
    "compression_training": "quantization-aware training and pruning keep extra weight copies",
    "data_efficiency": "curriculum learning and random-LTD change the tokens of each step",
    "curriculum_learning": "the sequence length grows during training; the plan takes one length",
    "pipeline": "DeepSpeed's pipeline engine (PipelineModule) is not read; give parallelism.pipeline",
    "sequence_parallel_size": "Ulysses sequence parallelism (all-to-all over heads) is not the plan's context "
    "parallelism",
    "compile": "DeepCompile schedules ZeRO-3 prefetch and offload itself",
    "aio": "NVMe offload I/O buffers (host memory)",
    "hybrid_engine": "the RLHF hybrid engine switches the model to inference kernels for generation",
}
# zero_optimization keys known to leave memory and step time alone
ZERO_IGNORED = frozenset(
    {
        "allgather_partitions",
        "reduce_scatter",
        "round_robin_gradients",
        "load_from_fp32_weights",
        "elastic_checkpoint",
        "ignore_unused_parameters",
        "legacy_stage1",
        "gather_16bit_weights_on_model_save",
        "stage3_gather_16bit_weights_on_model_save",
        "stage3_gather_fp16_weights_on_model_save",
        "use_multi_rank_bucket_allreduce",
        "memory_efficient_linear",
        "override_module_apply",
        "log_trace_cache_warnings",
        "enable_sanity_checks",
        "pipeline_loading_checkpoint",
        "cpu_offload_use_pin_memory",
        "save_muon_momentum_buffer_in_memory",
    }
)
# zero_optimization keys that change memory with no plan key (each listed with its alias from zero/config.py)
_GATHER = "ZeRO-3 keeps gathered parameters on the GPU"
ZERO_UNMODELLED = {
    "overlap_comm": "gradient reduction overlaps backward on a side stream (stage 1/2 then keep a second reduce "
    "bucket, stage_1_and_2.py ipg_buffer)",
    "allgather_bucket_size": "stage 1/2 all-gather the updated partitions in buckets of this many elements",
    "stage3_prefetch_bucket_size": f"{_GATHER}: parameters fetched ahead of use, up to this many elements",
    "prefetch_bucket_size": f"{_GATHER}: parameters fetched ahead of use, up to this many elements",
    "stage3_max_live_parameters": f"{_GATHER}: up to this many elements gathered at once",
    "max_live_parameters": f"{_GATHER}: up to this many elements gathered at once",
    "stage3_max_reuse_distance": f"{_GATHER}: a parameter used again within this many elements stays gathered",
    "max_reuse_distance": f"{_GATHER}: a parameter used again within this many elements stays gathered",
    "stage3_param_persistence_threshold": f"{_GATHER}: parameters under this many elements are never partitioned",
    "param_persistence_threshold": f"{_GATHER}: parameters under this many elements are never partitioned",
    "stage3_model_persistence_threshold": f"{_GATHER}: persistent parameters up to this many elements in all",
    "model_persistence_threshold": f"{_GATHER}: persistent parameters up to this many elements in all",
    "stage3_module_granularity_threshold": f"{_GATHER}: small modules are fetched as one leaf",
    "zero_hpz_partition_size": "ZeRO++ hpZ keeps a second copy of the parameters partitioned within a node",
    "zero_quantized_weights": "ZeRO++ qwZ all-gathers int8 weights (quantization buffers)",
    "zero_quantized_nontrainable_weights": "frozen weights are kept quantized",
    "zero_quantized_gradients": "ZeRO++ qgZ reduces int4 gradients (quantization buffers)",
    "mics_shard_size": "MiCS shards over groups of this many GPUs, not over all data-parallel ranks",
    "zenflow": "ZenFlow steps the important gradients on the GPU and the rest on the CPU asynchronously",
    "zeropp_loco_param": "ZeRO++ LoCo keeps error-feedback buffers for the quantized gradients",
}
# zero_optimization keys used at some stages only (stage_1_and_2.py reads allgather_bucket_size, stage3.py the
# stage3_* and ZeRO++ keys); at the other stages they are ignored
_STAGE3 = (3,)
STAGE_KEYS = {
    "allgather_bucket_size": (1, 2),
    **{key: _STAGE3 for key in ZERO_UNMODELLED if key not in ("overlap_comm", "allgather_bucket_size", "zenflow")},
}
# offload_optimizer / offload_param keys known to leave GPU memory alone (host pinning, NVMe paths and buffers)
OFFLOAD_IGNORED = frozenset(
    {
        "pin_memory",
        "nvme_path",
        "buffer_count",
        "buffer_size",
        "max_in_cpu",
        "fast_init",
        "pipeline",
        "pipeline_read",
        "pipeline_write",
        "cpuadam_cores_perc",
    }
)
# activation_checkpointing switches that change memory (runtime/activation_checkpointing/config.py)
CHECKPOINT_UNMODELLED = {
    "partition_activations": "each checkpoint is split over the model-parallel ranks",
    "cpu_checkpointing": "checkpoints are kept in host memory (needs partition_activations)",
    "contiguous_memory_optimization": "checkpoints are copied into one preallocated buffer",
}
CHECKPOINT_WHY = (
    "tunes deepspeed.checkpointing.checkpoint, which the model's code must call; it does not turn "
    "checkpointing on (give techniques.activation_checkpointing)"
)


def _given(led: Reading, key: str, value: Any) -> bool:
    """False for "auto" (noted: the HF integration fills it), else True."""
    if value == AUTO:
        led.note(key, AUTO_WHY)
        return False
    return True


# --- the batch ----------------------------------------------------------------------------------------------------
BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


def _batch(led: Reading, config: dict[str, Any], data: int | None) -> None:
    """runtime/config.py _set_batch_related_parameters: train_batch_size = micro × accumulation × data-parallel
    GPUs; any two give the third, and accumulation is 1 where only one of the others is given."""
    tbs, mb, gas = (as_int(k, config[k], 1) if k in config and _given(led, k, config[k]) else None for k in BATCH_KEYS)
    if tbs is not None and mb is not None and gas is not None and data is not None and tbs != mb * gas * data:
        raise bad(
            "train_batch_size",
            tbs,
            f"must equal train_micro_batch_size_per_gpu × gradient_accumulation_steps"
            f" × data-parallel GPUs = {mb} × {gas} × {data} = {mb * gas * data}",
        )
    if mb is None and tbs is not None and data is not None:
        mb = tbs // data // (gas or 1)
        if mb < 1:
            raise bad(
                "train_batch_size",
                tbs,
                f"is less than one sequence per GPU over {data} data-parallel GPUs × {gas or 1} accumulation steps",
            )
        if mb * (gas or 1) * data != tbs:
            raise bad(
                "train_batch_size",
                tbs,
                f"is not a multiple of data-parallel GPUs × accumulation steps "
                f"({data} × {gas or 1}); DeepSpeed's batch check would fail",
            )
        led.set("train_batch_size", "workload.micro_batch_size", mb)  # ÷ (GPUs × accumulation)
    elif mb is not None:
        led.set("train_micro_batch_size_per_gpu", "workload.micro_batch_size", mb)
    if tbs is None and mb is not None and data is not None:
        tbs = mb * (gas or 1) * data
    if tbs is not None:
        led.set(
            "train_batch_size"
            if "train_batch_size" in config and config["train_batch_size"] != AUTO
            else "train_micro_batch_size_per_gpu",
            "workload.global_batch_size",
            tbs,
        )
        if mb is None:
            led.note(
                "train_batch_size", "the micro-batch is train_batch_size ÷ (GPUs × accumulation): give the GPU count"
            )
        if gas is not None:  # it divides or multiplies the other two
            led.read.append(
                KeyRead(source="gradient_accumulation_steps", plan_key="workload.global_batch_size", value=tbs)
            )
    elif gas == 1 and mb is None:
        led.ignored.append("gradient_accumulation_steps")  # 1: the global batch is the plan's default
    elif gas is not None or mb is not None:
        led.note(
            "gradient_accumulation_steps" if gas is not None else "train_micro_batch_size_per_gpu",
            "the global batch is micro-batch × accumulation × GPUs: give the micro-batch and the GPU count",
        )


def _gpus_of_batch(led: Reading, config: dict[str, Any], tensor: int) -> int | None:
    """The GPU count the three batch keys imply when all are given (train_batch_size = micro × accumulation ×
    data-parallel GPUs, the check DeepSpeed makes at start-up), else None."""
    if not all(k in config and _given(led, k, config[k]) for k in BATCH_KEYS):
        return None
    tbs, mb, gas = (as_int(k, config[k], 1) for k in BATCH_KEYS)
    if tbs % (mb * gas):
        raise bad(
            "train_batch_size",
            tbs,
            f"is not a multiple of train_micro_batch_size_per_gpu × "
            f"gradient_accumulation_steps ({mb} × {gas}); DeepSpeed's batch check "
            f"would fail",
        )
    return tbs // (mb * gas) * tensor


# --- precision ----------------------------------------------------------------------------------------------------
# precision section keys that change memory with no plan key (runtime/config.py, bf16 and fp16 sections)
PRECISION_UNMODELLED = {
    "bf16_master_weights_and_grads": "master weights and gradients kept in bf16 (no fp32 copy)",
    "bf16_optimizer_states": "optimizer moments kept in bf16",
    "fp16_master_weights_and_grads": "master weights and gradients kept in fp16 (no fp32 copy)",
}


def _precision(led: Reading, config: dict[str, Any]) -> None:
    """bf16.enabled / fp16.enabled (runtime/config.py get_bfloat16_enabled, get_fp16_enabled); neither is fp32."""
    enabled: list[str] = []
    auto = False
    for name in PRECISION_SECTIONS:
        section = config.get(name)
        if section is None:
            continue
        if not isinstance(section, dict):
            raise bad(name, section, "must be a section with an `enabled` key")
        for key, value in section.items():
            if key == "enabled":
                auto |= not _given(led, f"{name}.enabled", value)
                if value != AUTO and as_bool(f"{name}.enabled", value):
                    enabled.append(name)
            elif key in PRECISION_UNMODELLED and value not in (False, AUTO):
                led.note(f"{name}.{key}", PRECISION_UNMODELLED[key])
            else:  # loss scaling, immediate_grad_update, check_grad_overflow, auto_cast: no memory
                led.ignored.append(f"{name}.{key}")
    if len(enabled) > 1:
        raise bad(f"{enabled[0]}.enabled", True, f"and {enabled[1]}.enabled are both true; DeepSpeed runs one")
    if enabled:
        led.set(f"{enabled[0]}.enabled", "precision.compute", PRECISION_SECTIONS[enabled[0]])
    elif not auto:
        # DeepSpeed's own default is fp32 (neither enabled), the recipe's bf16 is what its configs run: written
        led.set("(no bf16 or fp16 enabled)", "precision.compute", "fp32")


def _data_types(led: Reading, section: Any) -> None:
    if not isinstance(section, dict):
        raise bad("data_types", section, "must be a section")
    for key, value in section.items():
        if key == "grad_accum_dtype":  # engine.py get_data_types: gradients accumulate in this dtype
            led.set(
                "data_types.grad_accum_dtype",
                "precision.gradients",
                choice("data_types.grad_accum_dtype", value, DTYPES, any_case=True),
            )
        elif key == "param_dtype":  # must match bf16/fp16 (engine.py _assert_valid_mixed_precision_config)
            led.ignored.append("data_types.param_dtype")
        else:
            led.unknown.append(f"data_types.{key}")


# --- the optimizer ------------------------------------------------------------------------------------------------
def _optimizer(led: Reading, section: Any) -> None:
    """optimizer.type and, for Adam/AdamW, engine.py's choice of implementation: torch.optim with torch_adam
    (PyTorch's foreach default, or fused / for-loop as its params say), else DeepSpeed FusedAdam."""
    if not isinstance(section, dict):
        raise bad("optimizer", section, "must be a section with a `type`")
    kind = str(section.get("type", ""))
    optimizer = OPTIMIZERS.get(kind.lower())
    if optimizer is None:
        led.note("optimizer.type", f"{kind!r} has no plan optimizer")
    else:
        led.set("optimizer.type", "precision.optimizer", optimizer)
    params = section.get("params") or {}
    if not isinstance(params, dict):
        raise bad("optimizer.params", params, "must be a section")
    for key in section:
        if key not in ("type", "params"):
            led.unknown.append(f"optimizer.{key}")
    if optimizer == "adamw" and as_bool("optimizer.params.torch_adam", params.get("torch_adam", False)):
        impl = "fused" if params.get("fused") else "forloop" if params.get("foreach") is False else "foreach"
        led.set("optimizer.params.torch_adam", "precision.optimizer_impl", impl)
    for key in params:
        if key == "amsgrad" and params[key]:
            led.note("optimizer.params.amsgrad", "AMSGrad keeps a third state (the running maximum)")
        elif key != "torch_adam":  # lr, betas, eps, weight_decay, adam_w_mode, bias_correction, fused, foreach
            led.ignored.append(f"optimizer.params.{key}")


# --- ZeRO ---------------------------------------------------------------------------------------------------------
def _offload_device(led: Reading, key: str, value: Any) -> str:
    """An offload section's device (offload_config.py), its other keys accounted for."""
    if not isinstance(value, dict):
        raise bad(f"zero_optimization.{key}", value, "must be a section with a `device`")
    for sub, item in value.items():
        if sub == "ratio" and item != 1:  # offload_config.py ratio: the share of the optimizer offloaded
            led.note(f"zero_optimization.{key}.ratio", "only this share of the optimizer step runs on the CPU")
        elif sub != "device":
            led.ignored.append(f"zero_optimization.{key}.{sub}")
    device = str(value.get("device", "none")).lower()
    if device not in OFFLOAD_DEVICES:
        raise bad(
            f"zero_optimization.{key}.device", value.get("device"), f"is not one of: {', '.join(OFFLOAD_DEVICES)}"
        )
    if device == "nvme":  # off the GPU as with cpu; the host and NVMe side is not planned
        led.note(
            f"zero_optimization.{key}.device",
            "NVMe (ZeRO-Infinity) is planned as CPU offload: the GPU holds "
            "the same; the NVMe transfers' time is not planned",
        )
    return "none" if device == "none" else "cpu"


def _offload(led: Reading, zero: dict[str, Any], stage: int) -> None:
    """offload_optimizer (or the legacy cpu_offload) → techniques.offload optimizer; with offload_param (or the
    legacy cpu_offload_param), ZeRO-3 only, → optimizer_and_params."""
    devices = {}
    for key, legacy in (("offload_optimizer", "cpu_offload"), ("offload_param", "cpu_offload_param")):
        devices[key] = (
            (f"zero_optimization.{key}.device", _offload_device(led, key, zero[key]))
            if key in zero
            else (f"zero_optimization.{legacy}", "cpu")
            if as_bool(f"zero_optimization.{legacy}", zero.get(legacy, False))
            else ("", "none")
        )
    (optimizer_key, optimizer), (param_key, params) = devices["offload_optimizer"], devices["offload_param"]
    if params == "cpu" and stage != 3:
        raise bad(param_key, "cpu", f"needs zero_optimization.stage 3, not {stage}")
    if params == "cpu" and optimizer != "cpu":
        led.note(param_key, "parameters offloaded without the optimizer: the plan's offload moves the optimizer too")
    elif params == "cpu":
        led.set(param_key, "techniques.offload", "optimizer_and_params")
    elif optimizer == "cpu":
        led.set(optimizer_key, "techniques.offload", "optimizer")
    elif optimizer_key or param_key:
        led.set(optimizer_key or param_key, "techniques.offload", "none")


def _buckets(led: Reading, zero: dict[str, Any], stage: int) -> None:
    """reduce_bucket_size (with contiguous_gradients, stage_1_and_2.py ipg_buffer, stage3.py bucket.buffer) and,
    at stage 3, sub_group_size (stage3.py: the fp32 gradients of one sub-group at a time)."""
    if stage == 0:
        return  # no ZeRO optimizer: zero/config.py's buckets are not used
    size = zero.get("reduce_bucket_size")
    if size is not None and _given(led, "zero_optimization.reduce_bucket_size", size):
        # 0: an empty bucket; the plan's smallest is 1 element (no memory to speak of)
        led.set(
            "zero_optimization.reduce_bucket_size",
            "parallelism.reduce_bucket_elements",
            max(1, as_int("zero_optimization.reduce_bucket_size", size, 0)),
        )
    if not as_bool("zero_optimization.contiguous_gradients", zero.get("contiguous_gradients", True)):
        led.set("zero_optimization.contiguous_gradients", "parallelism.reduce_bucket_elements", 1)
    size = zero.get("sub_group_size")
    if size is not None and stage == 3 and _given(led, "zero_optimization.sub_group_size", size):
        # larger than any model is the whole partition, which the plan bounds at 1e13
        led.set(
            "zero_optimization.sub_group_size",
            "parallelism.sub_group_elements",
            min(WHOLE_PARTITION, max(1, as_int("zero_optimization.sub_group_size", size, 0))),
        )


# zero_optimization keys the functions above read
ZERO_READ = frozenset(
    {
        "stage",
        "offload_optimizer",
        "offload_param",
        "cpu_offload",
        "cpu_offload_param",
        "reduce_bucket_size",
        "contiguous_gradients",
        "sub_group_size",
    }
)


def _zero(led: Reading, zero: Any) -> None:
    if not isinstance(zero, dict):
        raise bad("zero_optimization", zero, "must be a section")
    stage = zero.get("stage", 0)  # zero/config.py: stage defaults to 0
    if stage == AUTO or isinstance(stage, bool) or stage not in (0, 1, 2, 3):
        raise bad("zero_optimization.stage", stage, "is not a ZeRO stage; allowed: 0, 1, 2, 3")
    if "stage" in zero:
        led.set("zero_optimization.stage", "parallelism.zero_stage", stage)
    else:  # the recipe leaves the stage to the plan; DeepSpeed's own default is 0: written
        led.set("zero_optimization (no stage)", "parallelism.zero_stage", 0)
    _offload(led, zero, stage)
    _buckets(led, zero, stage)
    for key, value in zero.items():
        if key in ZERO_READ:
            name = f"zero_optimization.{key}"
            if not any(r.source.startswith(name) for r in led.read) and not any(
                n.startswith(name) for n in led.unmodelled + led.ignored
            ):
                # the defaults (contiguous_gradients true, offload none), and sub_group_size below ZeRO-3
                # (stage_1_and_2.py steps whole partitions)
                led.ignored.append(name)
        elif key in ZERO_UNMODELLED and value is not False and (key not in STAGE_KEYS or stage in STAGE_KEYS[key]):
            led.note(
                f"zero_optimization.{key}",
                (f"{AUTO!r} (the HF integration fills it from the model): " if value == AUTO else "")
                + ZERO_UNMODELLED[key],
            )
        elif key in ZERO_IGNORED or key in ZERO_UNMODELLED:  # off, or not used at this stage
            led.ignored.append(f"zero_optimization.{key}")
        else:
            led.unknown.append(f"zero_optimization.{key}")


# --- the rest -----------------------------------------------------------------------------------------------------
def _checkpointing(led: Reading, section: Any) -> None:
    if not isinstance(section, dict):
        raise bad("activation_checkpointing", section, "must be a section")
    led.note("activation_checkpointing", CHECKPOINT_WHY)
    for key, value in section.items():
        if key in CHECKPOINT_UNMODELLED and value:
            led.note(f"activation_checkpointing.{key}", CHECKPOINT_UNMODELLED[key])
        else:  # number_checkpoints, synchronize_checkpoint_boundary, profile, and the switches when off
            led.ignored.append(f"activation_checkpointing.{key}")


def _tensor_parallel(led: Reading, section: Any) -> int:
    """tensor_parallel.autotp_size (runtime/tensor_parallel/config.py): AutoTP's degree; the rest is tuning."""
    if not isinstance(section, dict):
        raise bad("tensor_parallel", section, "must be a section")
    degree = 1
    for key, value in section.items():
        if key == "autotp_size":
            degree = as_int("tensor_parallel.autotp_size", value, 1)
            led.set("tensor_parallel.autotp_size", "parallelism.tensor", degree)
        else:
            led.ignored.append(f"tensor_parallel.{key}")
    return degree


SECTIONS: dict[str, Callable[[Reading, Any], Any]] = {
    "zero_optimization": _zero,
    "optimizer": _optimizer,
    "data_types": _data_types,
    "activation_checkpointing": _checkpointing,
}


def read(text: str | Document, *, gpus: int | None = None) -> Imported:
    config = mapping(text)
    led = Reading(format="deepspeed", plan={"framework": FRAMEWORK})
    tensor = _tensor_parallel(led, config["tensor_parallel"]) if "tensor_parallel" in config else 1
    if gpus is None:
        gpus = _gpus_of_batch(led, config, tensor)
    elif gpus % tensor:
        raise bad("tensor_parallel.autotp_size", tensor, f"does not divide the GPU count ({gpus})")
    if gpus is not None:
        led.plan["hardware"] = {"count": gpus}
    _batch(led, config, gpus // tensor if gpus is not None else None)
    _precision(led, config)
    for key, value in config.items():
        if key in SECTIONS:
            SECTIONS[key](led, value)
        elif key not in BATCH_KEYS and key not in PRECISION_SECTIONS and key != "tensor_parallel":
            led.other(key, unmodelled=UNMODELLED, ignored=IGNORED)
    return marked(led.imported(), training_defaults("DeepSpeed"))


def read_into(led: Reading, key: str, config: str | dict[str, Any]) -> None:
    """A DeepSpeed JSON another config names (its text, or the mapping given inline) read into that config's reading:
    its ZeRO stage, offload and parallelism, each under `key` (the batch and precision are the other config's)."""
    inner = read(config if isinstance(config, str) else json.dumps(config))
    for item in inner.read:
        if item.plan_key.startswith(("parallelism.", "techniques.offload")):
            led.set(f"{key}: {item.source}", item.plan_key, item.value)
    led.unmodelled.extend(f"{key}: {n}" for n in inner.unmodelled if "HF integration fills it" not in n)


# --- writing ------------------------------------------------------------------------------------------------------
def _zero_section(plan: Plan) -> dict[str, Any]:
    par, offload = plan.parallelism, plan.techniques.offload
    zero: dict[str, Any] = {"stage": par.zero_stage}
    if offload != "none":
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if offload == "optimizer_and_params":
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    if par.zero_stage and par.reduce_bucket_elements is not None:
        zero["contiguous_gradients"] = True
        zero["reduce_bucket_size"] = par.reduce_bucket_elements
    if par.zero_stage == 3 and par.sub_group_elements is not None:
        zero["sub_group_size"] = par.sub_group_elements
    return zero


def write(plan: Plan) -> str:
    wl, pr, par = plan.workload, plan.precision, plan.parallelism
    data = plan.hardware.count // par.tensor  # every GPU outside the AutoTP groups is a data-parallel rank
    steps = accumulation(plan, data)
    config: dict[str, Any] = {
        "train_batch_size": wl.micro_batch_size * steps * data,
        "train_micro_batch_size_per_gpu": wl.micro_batch_size,
        "gradient_accumulation_steps": steps,
    }
    if pr.compute in ("bf16", "fp16"):
        config[pr.compute] = {"enabled": True}
    config["data_types"] = {"grad_accum_dtype": pr.gradients}
    if pr.optimizer in OPTIMIZER_TYPES:
        params: dict[str, Any] = {}
        if pr.optimizer == "adamw" and pr.optimizer_impl != "fused":
            params = {"torch_adam": True, **({"foreach": False} if pr.optimizer_impl == "forloop" else {})}
        config["optimizer"] = {"type": OPTIMIZER_TYPES[pr.optimizer], "params": params}
    config["zero_optimization"] = _zero_section(plan)
    if par.tensor > 1:
        config["tensor_parallel"] = {"autotp_size": par.tensor}
    return json.dumps(config, indent=4) + "\n"


def detect(text: str | Document) -> bool:
    """A JSON object with DeepSpeed's own top-level keys (and none of a TrainingArguments JSON's)."""
    doc = document(text)
    data = quiet_mapping(doc) if doc.text.lstrip().startswith("{") else {}
    return "per_device_train_batch_size" not in data and bool(
        {"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size", "zero_allow_untested_optimizer"}
        & set(data)
    )


# what a DeepSpeed config leaves to the training script (its model, data and loop)
SCRIPT_KEYS = (
    "workload.task",
    "workload.sequence_length",
    "workload.steps",
    "workload.train_tokens",
    "workload.lora.rank",
    "workload.lora.alpha",
    "workload.lora.targets",
    "workload.lora.dropout",
    "workload.lora.variant",
    "precision.weights",
    "precision.quant_group_size",
    "precision.double_quant",
    "precision.optimizer_library",
    "precision.optimizer_block_size",
    "precision.fp32_embedding_states",
    "techniques.attention",
    "techniques.loss",
    "techniques.loss_chunks",
    "techniques.compile",
    "techniques.compile_scope",
    "techniques.checkpoint_every",
    "techniques.activation_offload",
    "techniques.optimizer_in_backward",
    "techniques.moe_capacity_factor",
    "techniques.expandable_segments",
)
FORMAT = Format(
    name="deepspeed",
    label="DeepSpeed config (JSON)",
    framework=FRAMEWORK,
    suffix=".json",
    detect=detect,
    read=read,
    write=write,
    says=(
        "workload.micro_batch_size",
        "workload.global_batch_size",
        "precision.compute",
        "precision.gradients",
        "precision.optimizer",
        "precision.optimizer_impl",
        "parallelism.zero_stage",
        "parallelism.tensor",
        "parallelism.reduce_bucket_elements",
        "parallelism.sub_group_elements",
        "techniques.offload",
    ),
    cannot_say={
        "precision.compute": "fp8: DeepSpeed's config enables bf16 or fp16 only (fp8 comes from Transformer Engine "
        "in the model's code)",
        "precision.master_weights": "DeepSpeed's ZeRO and mixed-precision optimizers always keep fp32 master weights",
        "precision.optimizer_state": "the optimizer's states follow its master weights (fp32)",
        "precision.optimizer": "8-bit, paged, Adafactor and SGD optimizers have no DeepSpeed optimizer type: they "
        "are passed to deepspeed.initialize as a client optimizer",
        "precision.optimizer_impl": "only Adam/AdamW choose one (optimizer.params.torch_adam); Lion and Muon are "
        "DeepSpeed's own",
        "techniques.activation_checkpointing": CHECKPOINT_WHY.replace("tunes", "the config's section tunes"),
        "parallelism.pipeline": "DeepSpeed's pipeline engine is configured in code (PipelineModule), not here",
        "parallelism.sub_group_elements": "at ZeRO stage 1/2 DeepSpeed steps each group's whole partition",
        "parallelism.reduce_bucket_elements": "none (no bucket, as under FSDP): DeepSpeed ZeRO always fills one "
        "(reduce_bucket_size, default 5e8)",
        **dict.fromkeys(SCRIPT_KEYS, "the training script's: DeepSpeed's config holds the engine's settings only"),
        **dict.fromkeys(
            ("precision.fp8_recipe", "precision.fp8_all_gather"),
            "fp8 comes from Transformer Engine in the model's code",
        ),
        **dict.fromkeys(
            ("parallelism.pipeline_layers", "parallelism.pipeline_schedule", "parallelism.virtual_stages"),
            "DeepSpeed's pipeline engine is configured in code (PipelineModule), not here",
        ),
        "parallelism.context": "Ulysses sequence parallelism is set up in code, not here",
        "parallelism.expert": "MoE expert parallelism is set up in the model's code (deepspeed.moe), not here",
        **dict.fromkeys(
            ("parallelism.sequence_parallel", "parallelism.async_tp"),
            "AutoTP (tensor_parallel.autotp_size) shards the linear layers only",
        ),
        "parallelism.data": "every GPU outside the AutoTP groups is a data-parallel rank",
        "parallelism.flat_params": "FSDP's: DeepSpeed's ZeRO-3 partitions each parameter",
        "framework_release": RELEASE_WHY,
        "workload.global_batch_size": "train_batch_size = micro-batch × accumulation × data-parallel GPUs: the "
        "accumulation keeps the planned batch where their micro-batches divide it",
    },
)
