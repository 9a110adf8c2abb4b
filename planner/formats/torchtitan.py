"""torchtitan job configs: the TOML files of its releases up to the config-registry refactor (torchtitan PR #2386;
e.g. torchtitan/models/llama3/train_configs/llama3_8b.toml), the Python config registries since
(torchtitan/models/llama3/config_registry.py, run as `--module llama3 --config llama3_8b`; read without running them,
planner/formats/torchtitan_registry.py), and the `--section.key value` command-line overrides every release
accepts (`./run_train.sh --parallelism.tensor_parallel_degree 2`, `torchrun ... -m torchtitan.train
--job.config_file X.toml --model.flavor 8B`).

A registry holds many configs: `read` takes the one `entry` names, else the one the `--config` of `overrides` names
(the launch line), else the registry's only one, and refuses naming them all where there are more. Its model module
is the launch line's `--module`, else the module its model_registry is imported from, else the entry's name's
prefix (torchtitan names each entry after its module: llama3_8b, qwen3_32b), each said in the read's source.

How `read` takes them: `text` is either a TOML document or a command line (text that does not parse as TOML is
read as one); the keyword `overrides` is a command line whose `--section.key` arguments are laid over `text`'s
keys, as torchtitan's ConfigManager lays the command line over the TOML that --job.config_file names
(torchtitan/config/manager.py parse_args). A command line read alone cannot see the TOML its --job.config_file
names: that key is reported unmodelled; read the TOML's text with the command line as `overrides` instead.
Command lines follow tyro's spellings: `--key value` or `--key=value`, `--section.flag` for true and
`--section.no_flag` / `--section.no-flag` for false, lists comma-separated ("model,loss").

Keys and defaults are those of torchtitan's JobConfig (torchtitan/config/job_config.py at v0.2.2, 73a0e69;
torchtitan/config_manager.py at v0.1.0, f7084fc, for the older spellings: training.batch_size, training.compile,
[float8], [mx], model.converters ["float8"]).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from planner.errors import PlanError, bad
from planner.formats.base import (
    RELEASE_WHY,
    Document,
    Format,
    Imported,
    document,
    get_key,
    marked,
    preset_for,
    set_key,
    training_defaults,
)
from planner.formats.reading import Reading, as_bool, as_int, as_text, as_texts, choice
from planner.formats.shell import environment, words
from planner.formats.torchtitan_registry import Models, Registry, entry_keys, registry
from planner.loader import CONFIG, parse_toml
from planner.plan.config import Plan
from planner.plan.models import Model, presets

# model.name and model.flavor → a preset with torchtitan's architecture for that flavor (torchtitan/models/
# llama3/__init__.py llama3_args, qwen3/__init__.py qwen3_args, deepseek_v3/__init__.py deepseekv3_args at
# v0.2.2; tests/test_formats_torchtitan.py checks each preset against the flavor's args)
FLAVORS: dict[tuple[str, str], str] = {
    ("llama3", "8B"): "llama-3.1-8b",
    ("llama3", "8B_flex"): "llama-3.1-8b",
    ("llama3", "8B_varlen"): "llama-3.1-8b",
    ("llama3", "70B"): "llama-3.1-70b",
    ("llama3", "405B"): "llama-3.1-405b",
    ("qwen3", "0.6B"): "qwen3-0.6b",
    ("qwen3", "1.7B"): "qwen3-1.7b",
    ("qwen3", "4B"): "qwen3-4b",
    ("qwen3", "8B"): "qwen3-8b",
    ("qwen3", "14B"): "qwen3-14b",
    ("qwen3", "32B"): "qwen3-32b",
    ("qwen3", "30B-A3B"): "qwen3-30b-a3b",
    ("qwen3", "235B-A22B"): "qwen3-235b-a22b",
    # deepseek_v3's "16B" and "236B" are DeepSeek-V2-Lite's and DeepSeek-V2's shapes (MLA, 64 / 160 experts)
    ("deepseek_v3", "16B"): "deepseek-v2-lite",
    ("deepseek_v3", "236B"): "deepseek-v2",
    ("deepseek_v3", "671B"): "deepseek-v3",
}
WRITE_FLAVOR = {preset: key for key, preset in reversed(FLAVORS.items())}  # the plain flavor of each preset

# the debug flavors, which no preset has: their architecture (llama3 debugmodel: dim 256, 6 layers, 16 heads,
# vocab 2048, FeedForward hidden int(2 × 4 × 256 / 3) = 682 rounded up to multiple_of 256 = 768; qwen3
# debugmodel: as written in qwen3_args)
_LLAMA3_DEBUG = {
    "num_layers": 6,
    "hidden_size": 256,
    "num_attention_heads": 16,
    "intermediate_size": 768,
    "vocab_size": 2048,
}
ARCHITECTURES: dict[tuple[str, str], dict[str, Any]] = {
    ("llama3", "debugmodel"): _LLAMA3_DEBUG,
    ("llama3", "debugmodel_flex_attn"): _LLAMA3_DEBUG,
    ("llama3", "debugmodel_varlen_attn"): _LLAMA3_DEBUG,
    ("qwen3", "debugmodel"): {
        "num_layers": 8,
        "hidden_size": 256,
        "num_attention_heads": 16,
        "num_kv_heads": 8,
        "head_dim": 128,
        "intermediate_size": 3072,
        "vocab_size": 2048,
        "qk_norm": True,
        "tie_embeddings": True,
    },
}

# training.mixed_precision_param (JobConfig Literal["bfloat16", "float32"]) → precision.compute
PARAM_DTYPES = {"bfloat16": "bf16", "float32": "fp32"}
# training.dtype: float32 keeps fp32 parameters (the FSDP master); bfloat16 puts parameters, gradients and
# optimizer states in bf16 with no fp32 copy (job_config.py Training.dtype docstring)
TRAINING_DTYPES = {"float32": "fp32", "bfloat16": "none"}
# optimizer.name: components/optimizer.py build_optimizers {"Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW};
# both keep two fp32 moments per parameter
OPTIMIZERS = {"AdamW": "adamw", "Adam": "adamw"}
IMPLEMENTATIONS = {"fused": "fused", "foreach": "foreach", "for-loop": "forloop"}
AC_MODES = ("selective", "full", "memory_budget", "none")
# parallelism.pipeline_parallel_schedule (torch.distributed.pipelining schedule names) → the plan's schedule;
# the multi-stage schedules hold 2 stages per rank unless pipeline_parallel_layers_per_stage says otherwise
# (distributed/pipeline_parallel.py pipeline_llm: stages_per_rank = 1 if single-stage else 2)
SCHEDULES = {
    "1F1B": ("1f1b", 1),
    "GPipe": ("gpipe", 1),
    "Interleaved1F1B": ("interleaved_1f1b", 2),
    "InterleavedZeroBubble": ("zero_bubble", 1),
    "ZBVZeroBubble": ("zero_bubble", 1),
}
WRITE_SCHEDULE = {
    "1f1b": "1F1B",
    "gpipe": "GPipe",
    "interleaved_1f1b": "Interleaved1F1B",
    "zero_bubble": "InterleavedZeroBubble",
}
# quantize.linear.float8.recipe_name (None: torchao Float8LinearConfig's tensorwise default)
FP8_RECIPES = {"tensorwise": "tensorwise", "rowwise": "rowwise", "rowwise_with_gw_hp": "rowwise"}
# model.converters: v0.2 registers "quantize.linear.float8" / "quantize.linear.mx" (components/quantization),
# v0.1.0 "float8" / "mx"
FLOAT8_CONVERTERS = ("float8", "quantize.linear.float8")
MX_CONVERTERS = ("mx", "quantize.linear.mx")
COMPILE_SCOPES = {
    frozenset({"model"}): "blocks",
    frozenset({"loss"}): "loss",
    frozenset({"model", "loss"}): "blocks_and_loss",
}
WRITE_COMPILE = {"blocks": ["model"], "loss": ["loss"], "blocks_and_loss": ["model", "loss"]}

# the task of a torchtitan config, which names none
TASK_WHY = (
    "torchtitan trains every parameter of the model it builds: read as pretrain (a run from a checkpoint "
    "holds the same memory)"
)
# JobConfig's own defaults where they differ from the torchtitan recipe's (planner/data/frameworks.yaml leaves
# them to the plan's defaults, micro_batch_size 1 and sequence_length 4096): Training.local_batch_size 8,
# Training.seq_len 2048 (torchtitan/config/job_config.py at v0.2.2, 73a0e69); written where a config leaves them out
TRAINING_DEFAULTS = {"training.local_batch_size": 8, "training.seq_len": 2048}

# older spellings → the v0.2 key (v0.1.0 config_manager.py: [float8], [mx]; before 2025-05 training.batch_size)
ALIASES = {"training.batch_size": "training.local_batch_size"}
ALIAS_SECTIONS = {"float8.": "quantize.linear.float8.", "mx.": "quantize.linear.mx."}

# keys that change memory with no plan key: their JobConfig default (a config that gives the default changes
# nothing) and why
UNMODELLED: dict[str, tuple[Any, str]] = {
    "validation.enable": (False, "validation forward passes between steps (their batch and sequence) are not modelled"),
    "fault_tolerance.enable": (False, "TorchFT replica groups are not modelled"),
    "parallelism.disable_loss_parallel": (
        False,
        "the logits gathered over the tensor-parallel ranks before the loss are not modelled",
    ),
    "parallelism.enable_compiled_autograd": (False, "compiled autograd's backward graph is not modelled"),
    "parallelism.expert_tensor_parallel_degree": (1, "experts split over tensor ranks have no plan key"),
    "parallelism.expert_parallel_comm_backend": ("standard", "DeepEP's dispatch buffers are not modelled"),
    "parallelism.pipeline_parallel_first_stage_less_layers": (
        1,
        "the plan's weighted split gives the first stage one layer less",
    ),
    "parallelism.pipeline_parallel_last_stage_less_layers": (
        1,
        "the plan's weighted split gives the last stage one layer less",
    ),
    "parallelism.pipeline_parallel_layers_per_stage": (
        None,
        "stages per rank from the layer count: give parallelism.virtual_stages",
    ),
    "parallelism.module_fqns_per_model_part": (None, "a split by module names: give parallelism.pipeline_layers"),
    "parallelism.pipeline_parallel_split_points": ([], "a split by module names: give parallelism.pipeline_layers"),
    "parallelism.pipeline_parallel_schedule_csv": ("", "a schedule read from a CSV file"),
    "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns": (
        ["moe.router.gate"],
        "matmuls the op-level policy recomputes are fixed in the plan",
    ),
    "quantize.linear.float8.force_recompute_fp8_weight_in_bwd": (False, "recomputed float8 weights are not modelled"),
    # since 2026-08 (configs.py ParallelismConfig at b5bcd76c): sequence parallelism can be turned off
    "parallelism.enable_sequence_parallel": (
        True,
        "off, the norms' activations are not sharded over the tensor ranks; the plan shards them",
    ),
}
# sections whose every key leaves memory and step time alone (paths, logging, schedules of the learning rate,
# checkpoint I/O, timeouts, seeds)
# (and the registry's trainer-config fields of the same kind: profiler, dataloader, validator, tokenizer, override)
IGNORED_SECTIONS = (
    "job.",
    "profiling.",
    "metrics.",
    "lr_scheduler.",
    "checkpoint.",
    "comm.",
    "memory_estimation.",
    "profiler.",
    "dataloader.",
    "validator.",
    "tokenizer.",
    "override.",
    "experimental.",
    "debug.",
    "validation.",
    "fault_tolerance.",
    "training.dataloader.",
)
IGNORED = (
    "optimizer.lr",
    "optimizer.beta1",
    "optimizer.beta2",
    "optimizer.eps",
    "optimizer.weight_decay",
    "training.max_norm",
    "training.dataset",
    "training.dataset_path",
    "training.gc_freq",
    "training.gc_debug",
    "training.seed",
    "training.deterministic",
    "model.print_after_conversion",
    "compile.backend",
    "parallelism.context_parallel_rotate_method",
    "parallelism.context_parallel_load_balancer",
    "parallelism.pipeline_parallel_expert_parallel_overlap",
    "activation_checkpoint.preserve_rng_state",
    "activation_checkpoint.determinism_check",
    "activation_checkpoint.debug",
    "activation_checkpoint.early_stop",
    "activation_checkpoint.visualize_memory_budget_pareto",
    "quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp",
    "quantize.linear.float8.emulate",
    "quantize.linear.mx.mxfp8_dim1_cast_kernel_choice",
    "quantize.linear.mx.use_fp8_dim1_cast_triton_kernel",
    # the registry's: the attention kernel (flex, varlen: the same activations as SDPA's fused kernel), the
    # tensor-parallel GEMM backend, the converters' compile flag, the SPMD bookkeeping backend
    "model.attn_backend",
    "model.tp_gemm_backend",
    "quantize.linear.float8.model_compile_enabled",
    "quantize.linear.mx.model_compile_enabled",
    "parallelism.spmd_backend",
    # the grouped-GEMM settings act only with their converter, which model.converters reports
    "quantize.grouped_mm.mx.recipe_name",
    "quantize.grouped_mm.float8.fqns",
    "quantize.grouped_mm.mx.fqns",
)

Config = dict[str, tuple[str, Any]]  # canonical key → (the key as the config spelled it, its value)
# run_train.sh's environment variables → the keys they set: CONFIG_FILE up to v0.2.2; MODULE and CONFIG since the
# registry (9810191b run_train.sh: `--module ${MODULE} --config ${CONFIG}`)
LAUNCH_VARIABLES = {"CONFIG_FILE": "job.config_file", "MODULE": "registry.module", "CONFIG": "registry.config"}


def _canonical(key: str) -> str:
    for old, new in ALIAS_SECTIONS.items():
        if key.startswith(old):
            return new + key[len(old) :]
    return ALIASES.get(key, key)


def _flatten(table: dict[str, Any], prefix: str = "") -> Config:
    out: Config = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[_canonical(prefix + key)] = (prefix + key, value)
    return out


def _args(text: str) -> tuple[Config, list[str]]:
    """The `--section.key value` arguments of a command line, and its other flags (the launcher's)."""
    env, tokens = environment(words(text))
    config: Config = {}
    launcher: list[str] = []
    value: str | bool  # a flag's text, or True for a switch given alone
    for assignment in env:
        variable, _, value = assignment.partition("=")
        if variable in LAUNCH_VARIABLES:  # run_train.sh's environment variables for --job.config_file, --module, ...
            config[LAUNCH_VARIABLES[variable]] = (variable, value)
    i = 0
    while i < len(tokens):
        token, i = tokens[i], i + 1
        if not token.startswith("--"):
            continue
        name, eq, value = token[2:].partition("=")
        if name in ("module", "config"):  # ConfigManager._load_config: the registry module and its entry
            value, i = (value, i) if eq else (tokens[i], i + 1) if i < len(tokens) else ("", i)
            config[f"registry.{name}"] = (f"--{name}", value)
            continue
        if "." not in name:
            launcher.append(token.partition("=")[0])
            continue
        if not eq:
            taken = i < len(tokens) and not tokens[i].startswith("--")
            value, i = (tokens[i], i + 1) if taken else (True, i)
        section, _, leaf = name.replace("-", "_").rpartition(".")
        if value is True and leaf.startswith("no_"):
            leaf, value = leaf[3:], False
        config[_canonical(f"{section}.{leaf}")] = (name, value)
    return config, launcher


def _config(text: str) -> tuple[Config, list[str]]:
    """A TOML document's keys (planner/loader.py: its nesting and integers bounded), or a command line's."""
    toml = parse_toml(text, CONFIG)
    return (_flatten(toml), []) if toml is not None else _args(text)


def read(text: str | Document, *, gpus: int | None = None, overrides: str = "", entry: str = "") -> Imported:
    """A torchtitan TOML, config registry (its `entry`) or command line, with `overrides` laid over it, as a partial
    plan."""
    doc = document(text)
    over, launcher = _args(overrides) if overrides else ({}, [])
    out = Reading(format="torchtitan", plan={"framework": "torchtitan"})
    found = doc.parse(_registry)
    if found is not None:
        config = _registry_config(found, over, entry, out)
    elif entry:
        raise bad("--entry", entry, "names a config_registry.py function, and this config is a TOML or command line")
    else:
        parsed, launched = doc.parse(_config)
        config, launcher = dict(parsed), list(launched) + launcher  # the steps below take keys out of them
        if doc.text.strip() and "job.config_file" in over:  # the TOML it names is `text`
            out.ignored.append(over.pop("job.config_file")[0])
    config.update(over)
    out.ignored.extend(launcher)
    if gpus is not None:
        set_key(out.plan, "hardware.count", gpus)
    model_name = _model(config, out)
    for step in (_precision, _checkpointing, _compile, _float8):
        step(config, out)
    pipeline = _parallel(config, out, gpus)
    _gather_needs_fsdp(out)
    _batch(config, out, pipeline)
    _rest(config, out)
    if model_name:
        out.model_name.append(model_name)
    return marked(out.imported(), training_defaults("torchtitan", task=TASK_WHY))


def _registry(text: str) -> Registry | None:
    """A torchtitan config registry's entries (planner/formats/torchtitan_registry.py), or None."""
    return registry(text) if "torchtitan" in text or "model_registry" in text else None


def _inert(key: str) -> bool:
    """A key known to leave memory and time alone (IGNORED, IGNORED_SECTIONS)."""
    key = _canonical(key)
    return key in IGNORED or f"{key}.".startswith(IGNORED_SECTIONS)


# torchtitan's model modules (FLAVORS, ARCHITECTURES): an entry named after one ("llama3_8b") is of that module
MODULES = sorted({name for name, _ in (*FLAVORS, *ARCHITECTURES)}, key=len, reverse=True)


def _registry_config(found: Registry, over: Config, entry: str, out: Reading) -> Config:
    """The registry entry `entry` (else the launch line's --config, else the only one) as TOML keys; its
    unread parts noted. The launch line's --module says the model module of a relative model_registry import."""
    _, launched, _ = _take(over, "registry.config", "")
    msrc, module, mgiven = _take(over, "registry.module", "")
    name = entry or launched
    if not name:
        if len(found.names()) != 1:
            raise PlanError(
                "config",
                f"the config registry defines {len(found.names())} configs: "
                f"{', '.join(found.names())}; name one (--entry, or torchtitan's --config)",
            )
        name = found.names()[0]
    if name in found.refused:
        raise bad("--config", name, f"is not read: {found.refused[name]}")
    if name not in found.entries:
        raise bad("--config", name, f"is not a config of the registry; its configs: {', '.join(found.names())}")
    prefix = next((m for m in MODULES if name == m or name.startswith(m + "_")), "")
    why = (
        f"{msrc} {module}"
        if mgiven
        else f"model.name {prefix}: the entry's name {name}"
        if prefix
        else "the module is not named: give --module"
    )
    models = Models(calls=found.models, module=str(module) if mgiven else prefix or "unknown-module", why=why)
    try:
        keys, unread = entry_keys(found.entries[name], models, _inert)
    except ValueError as error:
        raise bad("--config", name, str(error)) from None
    out.unmodelled.extend(unread)
    out.ignored.append(f"--config {name} (the registry's entry read)")
    return {_canonical(key): value for key, value in keys.items()}


def _take(config: Config, key: str, default: Any = None) -> tuple[str, Any, bool]:
    """Pop a key: (its spelling, its value or `default`, whether the config gave it)."""
    if key in config:
        source, value = config.pop(key)
        return source, value, True
    return key, default, False


def _model(config: Config, out: Reading) -> str:
    """model.name and model.flavor → a preset or the flavor's architecture; else the HF assets' name."""
    name_src, name, has_name = _take(config, "model.name", "llama3")
    flavor_src, flavor, has_flavor = _take(config, "model.flavor", "debugmodel")
    paths = [
        (src, value)
        for src, value, given in (_take(config, "model.hf_assets_path"), _take(config, "model.tokenizer_path"))
        if given
    ]
    out.ignored.extend(src for src, _ in paths)
    if not (has_name or has_flavor):
        return ""
    name, flavor = as_text(name_src, name), as_text(flavor_src, flavor)
    source = f"{name_src}, {flavor_src}"
    if (name, flavor) in FLAVORS:
        out.set(source, "model.preset", FLAVORS[name, flavor])
        return ""
    if (name, flavor) in ARCHITECTURES:
        for key, value in ARCHITECTURES[name, flavor].items():
            out.set(source, f"model.{key}", value)
        return ""
    for src, path in paths:
        if isinstance(path, str) and preset_for(path):
            out.ignored.remove(src)
            out.set(src, "model.preset", preset_for(path))
            return ""
    return f"{name} {flavor}"


def _precision(config: Config, out: Reading) -> None:
    src, param, given = _take(config, "training.mixed_precision_param")
    if given:
        out.set(src, "precision.compute", choice(src, param, PARAM_DTYPES))
    src, dtype, given = _take(config, "training.dtype", "float32")
    if given:
        master = choice(src, dtype, TRAINING_DTYPES)
        out.set(src, "precision.master_weights", master)
        if master == "none":  # bf16 parameters: gradients and optimizer states are bf16 too
            out.set(src, "precision.gradients", "bf16")
            out.set(src, "precision.optimizer_state", "bf16")
    src, reduce, given = _take(config, "training.mixed_precision_reduce")
    if given and dtype == "float32":
        out.set(src, "precision.gradients", choice(src, reduce, {"float32": "fp32"}))
    elif given:
        out.ignored.append(src)  # no mixed precision with bf16 parameters
    for key, plan_key, table in (
        ("optimizer.name", "precision.optimizer", OPTIMIZERS),
        ("optimizer.implementation", "precision.optimizer_impl", IMPLEMENTATIONS),
    ):
        src, value, given = _take(config, key)
        if given:
            out.set(src, plan_key, choice(src, value, table))
    src, value, given = _take(config, "optimizer.early_step_in_backward")
    if given:
        out.set(src, "techniques.optimizer_in_backward", as_bool(src, value))
    src, value, given = _take(config, "training.enable_cpu_offload")
    if given:  # FSDP2 CPUOffloadPolicy: parameters, gradients and optimizer states on the host
        out.set(src, "techniques.offload", "optimizer_and_params" if as_bool(src, value) else "none")


def _checkpointing(config: Config, out: Reading) -> None:
    """activation_checkpoint.mode and selective_ac_option ("op", or every k-th layer)."""
    mode_src, mode, has_mode = _take(config, "activation_checkpoint.mode", "selective")
    option_src, option, has_option = _take(config, "activation_checkpoint.selective_ac_option", "2")
    budget_src, _, has_budget = _take(config, "activation_checkpoint.memory_budget")
    mode = choice(mode_src, mode, {m: m for m in AC_MODES})
    # absent, torchtitan's JobConfig runs mode "selective" with selective_ac_option "2" (every 2nd layer), not the
    # llama3 recipes' "op" that frameworks.yaml lays under a plan: the code default is written
    source = mode_src if has_mode else f"{mode_src} (absent: JobConfig default 'selective', option '2')"
    if mode == "selective":
        if option == "op":
            out.set(f"{source}, {option_src}", "techniques.activation_checkpointing", "selective_op")
        else:
            every = as_int(option_src, option)
            out.set(f"{source}, {option_src}", "techniques.activation_checkpointing", "every_k")
            every_src = option_src if has_option else f"{option_src} (absent: JobConfig default '2')"
            out.set(every_src, "techniques.checkpoint_every", every)
    elif mode == "memory_budget":
        out.unmodelled.append(
            f"{mode_src}: memory_budget (the compiler's min-cut recomputation) has no plan key; "
            "the plan keeps the recipe's checkpointing"
        )
    else:
        out.set(source, "techniques.activation_checkpointing", mode)
    out.ignored.extend(
        src for src, given in ((option_src, has_option and mode != "selective"), (budget_src, has_budget)) if given
    )


def _compile(config: Config, out: Reading) -> None:
    for key in ("compile.enable", "training.compile"):  # training.compile: v0.1.0
        src, value, given = _take(config, key)
        if given:
            out.set(src, "techniques.compile", as_bool(src, value))
    src, components, given = _take(config, "compile.components")
    if given:
        names = components.split(",") if isinstance(components, str) else components
        texts = isinstance(names, list) and all(isinstance(name, str) for name in names)
        scope = COMPILE_SCOPES.get(frozenset(names)) if texts else None
        if scope is None:
            raise bad(src, components, "must name model, loss or both")
        out.set(src, "techniques.compile_scope", scope)


def _float8(config: Config, out: Reading) -> None:
    """model.converters float8 / mx and their [quantize.linear.*] settings."""
    src, converters, _ = _take(config, "model.converters", [])
    names = converters.split(",") if isinstance(converters, str) else as_texts(src, converters)
    float8 = any(n in FLOAT8_CONVERTERS for n in names)
    mx = any(n in MX_CONVERTERS for n in names)
    if float8 and mx:
        raise bad(src, converters, "names both a float8 and an mx converter for the linear layers")
    out.unmodelled.extend(
        f"{src}: {n} converts layers the plan does not model in low precision"
        for n in names
        if n not in FLOAT8_CONVERTERS + MX_CONVERTERS
    )
    if float8 or mx:
        out.set(src, "precision.compute", "fp8")
    if mx:
        out.set(src, "precision.fp8_recipe", "mxfp8")
    _float8_settings(config, out, float8, mx)


def _float8_settings(config: Config, out: Reading, float8: bool, mx: bool) -> None:
    prefix = "quantize.linear.float8."
    src, recipe, given = _take(config, prefix + "recipe_name")
    if given and float8:
        out.set(src, "precision.fp8_recipe", choice(src, recipe, FP8_RECIPES))
        if recipe == "rowwise_with_gw_hp":
            out.unmodelled.append(
                f"{src}: rowwise_with_gw_hp keeps the weight gradient's matmul in high precision; modelled as rowwise"
            )
    src_ag, all_gather, given_ag = _take(config, prefix + "enable_fsdp_float8_all_gather")
    if given_ag and float8:
        out.set(src_ag, "precision.fp8_all_gather", as_bool(src_ag, all_gather))
    for key, default, active in (
        (prefix + "filter_fqns", [], float8),
        ("quantize.linear.mx.filter_fqns", ["output"], mx),
    ):
        fsrc, fqns, fgiven = _take(config, key, default)
        if fgiven and active and fqns != default:
            out.unmodelled.append(f"{fsrc}: the linear layers it keeps in bf16 are modelled in low precision")
        elif fgiven:
            out.ignored.append(fsrc)
    msrc, mx_recipe, mgiven = _take(config, "quantize.linear.mx.recipe_name")
    if mgiven and mx and not str(mx_recipe).startswith("mxfp8"):
        out.unmodelled.append(f"{msrc}: {mx_recipe} is not an MXFP8 recipe; modelled as mxfp8")
    out.ignored.extend(
        s
        for s, g in (
            (src, given and not float8),
            (src_ag, given_ag and not float8),
            (msrc, mgiven and (not mx or str(mx_recipe).startswith("mxfp8"))),
        )
        if g
    )


def _gather_needs_fsdp(out: Reading) -> None:
    """enable_fsdp_float8_all_gather does nothing without FSDP (one data × context rank: torchtitan's
    parallelize applies fully_shard only when fsdp_enabled): left out of the plan, which refuses it there."""
    read = next((r for r in out.read if r.plan_key == "precision.fp8_all_gather"), None)
    if read is None or get_key(out.plan, "parallelism.zero_stage") != 0:
        return
    del out.plan["precision"]["fp8_all_gather"]
    out.read.remove(read)
    out.ignored.append(f"{read.source} (no FSDP on one data × context rank: nothing is all-gathered)")


_DEGREES = (
    ("parallelism.tensor_parallel_degree", "parallelism.tensor"),
    ("parallelism.pipeline_parallel_degree", "parallelism.pipeline"),
    ("parallelism.context_parallel_degree", "parallelism.context"),
    ("parallelism.expert_parallel_degree", "parallelism.expert"),
)


def _parallel(config: Config, out: Reading, gpus: int | None) -> int:
    """The degrees, FSDP or DDP from the data-parallel shard and replicate degrees; returns the pipeline degree."""
    degrees = {}
    for key, plan_key in _DEGREES:
        src, value, given = _take(config, key, 1)
        degrees[plan_key] = as_int(src, value)
        if given:
            out.set(src, plan_key, degrees[plan_key])
    src, value, given = _take(config, "parallelism.enable_async_tensor_parallel")
    if given:
        out.set(src, "parallelism.async_tp", as_bool(src, value))
    tp, pp, cp = degrees["parallelism.tensor"], degrees["parallelism.pipeline"], degrees["parallelism.context"]
    _data(config, out, gpus, tp * pp * cp, cp)
    src, schedule, given = _take(config, "parallelism.pipeline_parallel_schedule")
    if given and pp > 1:
        plan_schedule, stages = choice(src, schedule, SCHEDULES)
        out.set(src, "parallelism.pipeline_schedule", plan_schedule)
        if stages > 1:
            out.set(src, "parallelism.virtual_stages", stages)
        if schedule in ("InterleavedZeroBubble", "ZBVZeroBubble"):
            out.unmodelled.append(f"{src}: {schedule} holds 2 stages per rank; the plan's zero_bubble holds one")
    elif given:
        out.ignored.append(src)  # no pipeline
    src, reshard, given = _take(config, "parallelism.fsdp_reshard_after_forward")
    if given and reshard == "never":
        out.unmodelled.append(f"{src}: never (parameters stay gathered from forward to backward) is not modelled")
    elif given:
        out.ignored.append(src)
    return pp


def _data(config: Config, out: Reading, gpus: int | None, model_parallel: int, cp: int) -> None:
    """parallelism.data = replicate × shard (shard -1: the rest of the GPUs); FSDP when shard × context > 1."""
    rsrc, replicate, rgiven = _take(config, "parallelism.data_parallel_replicate_degree", 1)
    ssrc, shard, sgiven = _take(config, "parallelism.data_parallel_shard_degree", -1)
    replicate = as_int(rsrc, replicate)
    shard = as_int(ssrc, shard, -1)
    if shard == 0 or shard < -1:
        raise bad(ssrc, shard, "must be -1 (the rest of the GPUs) or at least 1")
    source = ", ".join(s for s, g in ((rsrc, rgiven), (ssrc, sgiven)) if g) or f"{ssrc} (absent: JobConfig default -1)"
    if shard == -1:
        if gpus is None:
            if replicate > 1:
                out.unmodelled.append(f"{ssrc}: -1 with {rsrc} {replicate} needs the GPU count to tell FSDP from DDP")
            return
        if gpus % (replicate * model_parallel):
            raise bad(
                ssrc,
                -1,
                f"leaves no whole degree: {gpus} GPUs are not a multiple of replicate × tensor × "
                f"pipeline × context ({replicate} × {model_parallel})",
            )
        shard = gpus // (replicate * model_parallel)
    out.set(source, "parallelism.data", replicate * shard)
    # FSDP shards over the dp_shard × cp mesh when either is > 1 (distributed/parallel_dims.py fsdp_enabled)
    out.set(source, "parallelism.zero_stage", 3 if shard * cp > 1 else 0)
    if replicate > 1 and shard > 1:
        out.unmodelled.append(
            f"{rsrc}: HSDP shards over {shard} of the {replicate * shard} data ranks; the plan "
            f"shards over all of them (parallelism.zero_stage 3)"
        )


def _batch(config: Config, out: Reading, pipeline: int) -> None:
    """Sequences: local batch (per data rank and step), global batch, pipeline micro-batches, sequence, steps."""
    src, length, given = _take(config, "training.seq_len", TRAINING_DEFAULTS["training.seq_len"])
    out.set(
        src if given else f"{src} (absent: JobConfig default {length})", "workload.sequence_length", as_int(src, length)
    )
    src, steps, given = _take(config, "training.steps")
    if given:
        out.set(src, "workload.steps", as_int(src, steps))
    lsrc, local, lgiven = _take(config, "training.local_batch_size", TRAINING_DEFAULTS["training.local_batch_size"])
    lsource = lsrc if lgiven else f"{lsrc} (absent: JobConfig default {local})"
    gsrc, total, ggiven = _take(config, "training.global_batch_size", -1)
    msrc, micro, mgiven = _take(config, "parallelism.pipeline_parallel_microbatch_size", 1)
    total = as_int(gsrc, total, -1)
    if total not in (-1, 0):  # -1: local_batch_size × data-parallel degree
        out.set(gsrc, "workload.global_batch_size", as_int(gsrc, total))
    elif ggiven:
        out.ignored.append(gsrc)
    if pipeline == 1:
        out.set(lsource, "workload.micro_batch_size", as_int(lsrc, local))
        out.ignored.extend([msrc] if mgiven else [])
        return
    # a pipeline splits each rank's local batch into micro-batches of pipeline_parallel_microbatch_size
    micro = as_int(msrc, micro)
    out.set(msrc if mgiven else f"{msrc} (absent: JobConfig default 1)", "workload.micro_batch_size", micro)
    if total in (-1, 0):
        local = as_int(lsrc, local)
        if local % micro:
            raise bad(lsrc, local, f"is not a multiple of {msrc} ({micro})")
        out.set(lsource, "parallelism.pipeline_microbatches", local // micro)
    elif lgiven:
        out.ignored.append(lsrc)  # the global batch and the micro-batch size say it


def _rest(config: Config, out: Reading) -> None:
    """The keys no step took: unmodelled (with why), ignored or unknown."""
    for key, (src, value) in config.items():
        if key in UNMODELLED:
            default, why = UNMODELLED[key]
            if value == default:
                out.ignored.append(src)
            else:
                out.unmodelled.append(f"{src}: {why}")
        elif key == "job.config_file":
            out.unmodelled.append(
                f"{src}: the TOML it names ({value}) is not read here; read its text with this "
                "command line as overrides"
            )
        elif key == "registry.config":
            out.unmodelled.append(
                f"{src}: the config_registry.py entry it names ({value}) is not read here; read "
                "the registry with this command line as overrides (or the entry with --entry)"
            )
        elif key == "registry.module":
            out.ignored.append(f"{src} {value}")
        elif key in IGNORED or key.startswith(IGNORED_SECTIONS):
            out.ignored.append(src)
        else:
            out.unknown.append(src)


# --- write ---------------------------------------------------------------------------------------------------------
CANNOT_SAY = {
    "workload.task": "lora, qlora and inference: torchtitan trains every parameter",
    "workload.train_tokens": "torchtitan counts training.steps",
    "precision.compute": "fp16: training.mixed_precision_param is bfloat16 or float32",
    "precision.gradients": "follows training.dtype: fp32 reduction (mixed_precision_reduce allows only float32), "
    "bf16 with bf16 parameters",
    "precision.optimizer_state": "follows training.dtype: fp32, or bf16 with bf16 parameters",
    "precision.optimizer": "other than AdamW: optimizer.name is Adam or AdamW",
    "precision.fp8_recipe": "nvfp4: torchtitan's float8 recipes are tensorwise, rowwise and MXFP8",
    "techniques.activation_checkpointing": "selective (Megatron's attention-core recompute): torchtitan's selective "
    "modes are per op or every k-th layer",
    "techniques.attention": "eager: torchtitan runs SDPA or FlexAttention",
    "techniques.loss": "chunked or fused: torchtitan's cross-entropy takes the whole fp32 logits",
    "techniques.activation_offload": "JobConfig has no activation offloading",
    "techniques.offload": "optimizer alone: training.enable_cpu_offload moves parameters, gradients and optimizer "
    "states, and only under FSDP (more than one data × context rank)",
    "techniques.optimizer_in_backward": "under FSDP (context parallelism shards with it): the plan models the "
    "early step without ZeRO, so it is not written",
    "techniques.moe_capacity_factor": "torchtitan's MoE is dropless",
    "techniques.expandable_segments": "run_train.sh sets PYTORCH_ALLOC_CONF, not the job config",
    "parallelism.zero_stage": "1 and 2 (FSDP shards everything, DDP nothing), 3 on one data × context rank, and 0 "
    "with context parallelism (FSDP shards over data × context)",
    "precision.master_weights": "none with fp32 compute: training.dtype float32 keeps fp32 parameters, the master",
    "precision.fp8_all_gather": "with MXFP8 (quantize.linear.mx gathers 16-bit weights) or without FSDP",
    "parallelism.flat_params": "FSDP2 shards each parameter: no flat parameters",
    **dict.fromkeys(
        ("parallelism.reduce_bucket_elements", "parallelism.sub_group_elements"),
        "DeepSpeed's: FSDP2 has no such buckets",
    ),
    "framework_release": RELEASE_WHY,
    "parallelism.sequence_parallel": "off with tensor parallelism: torchtitan always shards the norms' activations",
    "parallelism.virtual_stages": "more than 2 per rank: pipeline_parallel_layers_per_stage sets them from the "
    "layer count",
    "parallelism.pipeline_split": "even or auto: torchtitan's split gives the first and last stage one layer less",
    "parallelism.pipeline_layers": "module_fqns_per_model_part names modules, not layer counts; torchtitan's own "
    "split gives the first and last stage one layer less",
}
# when a plan's value is one the written config cannot run (its comment then says so)
UNSAID: tuple[tuple[str, Callable[[Plan], bool]], ...] = (
    ("workload.task", lambda p: p.workload.task not in ("pretrain", "finetune")),
    ("workload.train_tokens", lambda p: p.workload.train_tokens is not None),
    ("precision.compute", lambda p: p.precision.compute == "fp16"),
    ("precision.optimizer", lambda p: p.precision.optimizer != "adamw"),
    ("precision.fp8_recipe", lambda p: p.precision.fp8_recipe == "nvfp4"),
    ("techniques.activation_checkpointing", lambda p: p.techniques.activation_checkpointing == "selective"),
    ("techniques.attention", lambda p: p.techniques.attention == "eager"),
    ("techniques.loss", lambda p: p.techniques.loss != "full"),
    ("techniques.activation_offload", lambda p: p.techniques.activation_offload),
    (
        "techniques.offload",
        lambda p: p.techniques.offload == "optimizer" or p.techniques.offload != "none" and not _fsdp(p),
    ),
    ("techniques.optimizer_in_backward", lambda p: p.techniques.optimizer_in_backward and _fsdp(p)),
    ("techniques.moe_capacity_factor", lambda p: p.techniques.moe_capacity_factor is not None),
    (
        "parallelism.zero_stage",
        lambda p: (
            p.parallelism.zero_stage in (1, 2)
            or (p.parallelism.zero_stage == 3 and p.parallelism.data * p.parallelism.context == 1)
        ),
    ),
    ("parallelism.sequence_parallel", lambda p: p.parallelism.tensor > 1 and not p.parallelism.sequence_parallel),
    ("parallelism.virtual_stages", lambda p: p.parallelism.virtual_stages > 2),
    ("parallelism.pipeline_layers", lambda p: p.parallelism.pipeline_layers is not None),
    ("parallelism.pipeline_split", lambda p: p.parallelism.pipeline > 1 and p.parallelism.pipeline_split != "weighted"),
)
WRITE_PARAM = {"bf16": "bfloat16", "fp8": "bfloat16", "fp32": "float32", "fp16": "bfloat16"}
WRITE_IMPL = {plan: name for name, plan in IMPLEMENTATIONS.items()}
WRITE_AC = {
    "none": "none",
    "full": "full",
    "selective_op": "selective",
    "every_k": "selective",
    "selective": "selective",
}


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(map(_toml, value)) + "]"
    return json.dumps(value) if isinstance(value, str) else str(value)


def _write_model(plan: Plan) -> dict[str, Any]:
    preset = plan.model.preset
    if preset is None or preset not in WRITE_FLAVOR or plan.model != _preset_model(preset):
        return {}
    name, flavor = WRITE_FLAVOR[preset]
    return {"name": name, "flavor": flavor}


def _preset_model(preset: str) -> Model:
    return presets()[preset].model


def _write_training(plan: Plan) -> dict[str, Any]:
    wl, prec, par = plan.workload, plan.precision, plan.parallelism
    local = wl.micro_batch_size * (plan.micro_batches_per_step if par.pipeline > 1 else 1)
    training = {
        "local_batch_size": local,
        "global_batch_size": wl.global_batch_size,
        "seq_len": wl.sequence_length,
        "mixed_precision_param": WRITE_PARAM[prec.compute],
        "dtype": "bfloat16" if prec.master_weights == "none" and prec.compute != "fp32" else "float32",
        "enable_cpu_offload": plan.techniques.offload == "optimizer_and_params" and _fsdp(plan),
    }
    if training["dtype"] == "float32":
        training["mixed_precision_reduce"] = "float32"
    if wl.steps is not None:
        training["steps"] = wl.steps
    return training


def _fsdp(plan: Plan) -> bool:
    """Whether the config runs FSDP: torchtitan shards over the data-parallel shard × context mesh when it has more
    than one rank (distributed/parallel_dims.py fsdp_enabled), and offloads (enable_cpu_offload) only under it."""
    par = plan.parallelism
    return (par.data if par.zero_stage else 1) * par.context > 1


def _write_parallelism(plan: Plan) -> dict[str, Any]:
    par = plan.parallelism
    sharded = par.zero_stage != 0
    out: dict[str, Any] = {
        "data_parallel_replicate_degree": 1 if sharded else par.data,
        "data_parallel_shard_degree": par.data if sharded else 1,
        "tensor_parallel_degree": par.tensor,
        "enable_async_tensor_parallel": par.async_tp,
        "pipeline_parallel_degree": par.pipeline,
        "context_parallel_degree": par.context,
        "expert_parallel_degree": par.expert,
    }
    if par.pipeline > 1:
        out["pipeline_parallel_schedule"] = WRITE_SCHEDULE[par.pipeline_schedule]
        out["pipeline_parallel_microbatch_size"] = plan.workload.micro_batch_size
    return out


def _write_quantize(plan: Plan) -> dict[str, dict[str, Any]]:
    prec = plan.precision
    if prec.compute != "fp8":
        return {}
    if prec.fp8_recipe == "mxfp8":
        return {"quantize.linear.mx": {"recipe_name": "mxfp8_cublas"}}
    return {
        "quantize.linear.float8": {
            "recipe_name": prec.fp8_recipe if prec.fp8_recipe != "nvfp4" else "tensorwise",
            "enable_fsdp_float8_all_gather": prec.fp8_all_gather,
        }
    }


def write(plan: Plan) -> str:
    """The torchtitan TOML that runs the plan (torchtitan's v0.2 keys, as its train_configs write them)."""
    tech = plan.techniques
    quantize = _write_quantize(plan)
    model = _write_model(plan)
    if quantize:
        model["converters"] = [next(iter(quantize))]
    checkpoint = {"mode": WRITE_AC[tech.activation_checkpointing]}
    if checkpoint["mode"] == "selective":
        every_k = tech.activation_checkpointing == "every_k"
        checkpoint["selective_ac_option"] = str(tech.checkpoint_every) if every_k else "op"
    sections = {
        "model": model,
        "optimizer": {
            "name": "AdamW",
            "implementation": WRITE_IMPL[plan.precision.optimizer_impl],
            "early_step_in_backward": tech.optimizer_in_backward and not _fsdp(plan),
        },
        "training": _write_training(plan),
        "parallelism": _write_parallelism(plan),
        "compile": {"enable": tech.compile, "components": WRITE_COMPILE[tech.compile_scope]},
        "activation_checkpoint": checkpoint,
        **quantize,
    }
    lines = [f"# torchtitan job config for {plan.name or 'a VRAM Planner plan'} (written by VRAM Planner)"]
    if not model.get("flavor"):
        lines.append("# model: no torchtitan flavor has this architecture; add one to the model's args")
    lines += [f"# not said: {key} ({CANNOT_SAY[key]})" for key, unsaid in UNSAID if unsaid(plan)]
    for name, keys in sections.items():
        lines += ["", f"[{name}]"] + [f"{key} = {_toml(value)}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


# keys only a torchtitan config has (the TOML's sections, or a command line's --section.key)
MARKERS = (
    "model.flavor",
    "training.seq_len",
    "training.local_batch_size",
    "training.batch_size",
    "parallelism.data_parallel_shard_degree",
    "parallelism.tensor_parallel_degree",
    "activation_checkpoint.mode",
    "job.config_file",
    "job.dump_folder",
)


def detect(text: str | Document) -> bool:
    """A torchtitan config registry, a TOML or command line with torchtitan's keys, or a command line that runs
    torchtitan."""
    doc = document(text)
    if doc.parse(_registry) is not None:
        return True
    try:
        config, _ = doc.parse(_config)
    except ValueError:  # PlanError: not a command line either, or TOML beyond the loader's bounds
        return False
    return any(key in config for key in MARKERS) or "torchtitan.train" in doc.text or "run_train.sh" in doc.text


SAYS = (
    "workload.sequence_length",
    "workload.micro_batch_size",
    "workload.global_batch_size",
    "workload.steps",
    "precision.compute",
    "precision.master_weights",
    "precision.optimizer_impl",
    "precision.fp8_recipe",
    "precision.fp8_all_gather",
    "techniques.activation_checkpointing",
    "techniques.checkpoint_every",
    "techniques.compile",
    "techniques.compile_scope",
    "techniques.offload",
    "techniques.optimizer_in_backward",
    "parallelism.data",
    "parallelism.zero_stage",
    "parallelism.tensor",
    "parallelism.pipeline",
    "parallelism.context",
    "parallelism.expert",
    "parallelism.async_tp",
    "parallelism.pipeline_schedule",
    "parallelism.virtual_stages",
    "parallelism.pipeline_microbatches",
    "hardware.count",
)

FORMAT = Format(
    name="torchtitan",
    label="torchtitan job config (TOML or config_registry.py) or --section.key command line",
    framework="torchtitan",
    suffix=".toml",
    detect=detect,
    read=read,
    write=write,
    says=SAYS,
    cannot_say=CANNOT_SAY,
)
