"""Framework configs in and out: read a framework's own config as a plan, and write a plan as that config.

Each format is one module of this package with one `FORMAT` (planner/formats/base.py says what a format
holds); FORMATS lists them. A config read becomes a partial plan dict that `overlay` lays over a base plan (the
default plan, or a plan file the user gives), so a config that does not name the model still plans. An export
reads its own config back and names every key the plan's memory and time read (in_effect) that the config does not
carry, with what it runs instead (export_config).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from planner.errors import PlanError, bad, short
from planner.formats import (
    accelerate,
    axolotl,
    deepspeed,
    hf_trainer,
    llamafactory,
    megatron,
    openrlhf,
    sglang,
    torchtitan,
    torchtune,
    unsloth,
    verl,
    vllm,
)
from planner.formats.base import READ_ONLY, Document, Format, Imported, document, get_key
from planner.formats.edit import Edited, check_parsed, delta, edit_text, for_syntax, syntax, written_keys
from planner.formats.unread import unread_stack
from planner.plan.codec import plan_from_dict, plan_to_dict
from planner.plan.config import (
    EIGHT_BIT_OPTIMIZERS,
    FROZEN_WEIGHTS,
    INFERENCE_FRAMEWORKS,
    SECTIONS,
    TRAINING_TASKS,
    Plan,
)
from planner.plan.dtypes import DEFAULT_GROUP_SIZE, TORCHAO_WEIGHTS
from planner.plan.models import MODEL_KEYS
from planner.plan.pipeline import chunk_split

FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        torchtitan.FORMAT,
        torchtune.FORMAT,
        axolotl.FORMAT,
        deepspeed.FORMAT,
        llamafactory.FORMAT,
        unsloth.FORMAT,
        hf_trainer.FORMAT,
        accelerate.FORMAT,
        megatron.FORMAT,
        vllm.FORMAT,
        sglang.FORMAT,
        verl.FORMAT,
        openrlhf.FORMAT,
    )
}


def formats_for(plan: Plan) -> list[Format]:
    """The formats that can run the plan (those that export): serving engines' for inference, training frameworks'
    otherwise."""
    serving = plan.workload.task == "inference"
    return [f for f in FORMATS.values() if f.write and (f.framework in INFERENCE_FRAMEWORKS) == serving]


def format_named(name: str) -> Format:
    if name not in FORMATS:
        raise bad("--framework", name, f"is not a config format; allowed: {', '.join(FORMATS)}")
    return FORMATS[name]


def detect(text: str | Document) -> Format:
    """The format a config's text is in (the first whose `detect` accepts it; every detector looks at the one
    Document, so each kind of parse runs once)."""
    doc = document(text)
    for fmt in FORMATS.values():
        if fmt.detect(doc):
            return fmt
    if (known := unread_stack(doc)) is not None:
        raise PlanError("config", f"is a config of {known.stack}: {known.why}")
    raise doc.over_limit() or PlanError(
        "config", f"is not a config this planner reads ({', '.join(FORMATS)}); name its format with --framework"
    )


def read_config(
    text: str,
    *,
    format: str | None = None,
    gpus: int | None = None,
    files: Callable[[str], str | None] | None = None,
    entry: str = "",
) -> Imported:
    """A framework config's text read as a plan (its format detected unless named; detection and reading share
    the text's parses); `files` gives the text of a file the config names, for a format that reads_files;
    `entry` picks the config of a torchtitan config registry (its launch line's --config)."""
    doc = document(text)
    fmt = format_named(format) if format else detect(doc)
    if entry:
        if fmt is not torchtitan.FORMAT:
            raise bad(
                "--entry", entry, f"names a torchtitan config_registry.py function, and the config is {fmt.name}'s"
            )
        return torchtitan.read(doc, gpus=gpus, entry=entry)
    return fmt.read(doc, gpus=gpus, files=files) if fmt.reads_files else fmt.read(doc, gpus=gpus)


def plan_from_config(
    imported: Imported,
    *,
    model: dict[str, Any] | None = None,
    default_model: dict[str, Any] | None = None,
    gpu: str | None = None,
    gpus: int | None = None,
    name: str = "",
) -> Plan:
    """The plan a config read says, with what it leaves open: `model` (a plan's model block; replaces the config's)
    or `default_model` (the model where the config names none), `gpu` (a catalog id), `gpus` (the count, where the
    config does not fix it) and a `name` where it has none."""
    data = copy.deepcopy(imported.plan)
    if model is not None or ("model" not in data and default_model is not None):
        data["model"] = model if model is not None else default_model
    elif "model" not in data:
        named = (
            f"names {short(imported.model_name)}, which is not a preset" if imported.model_name else "names no model"
        )
        raise PlanError("model", f"the {imported.format} config {named}; give the model (a preset or a config.json)")
    hardware = data.setdefault("hardware", {})
    if gpu is not None:
        hardware["gpu"] = gpu
    if gpus is not None:
        hardware.setdefault("count", gpus)
    if name:
        data.setdefault("name", name)
    return plan_from_dict(data)


def read_lines(imported: Imported) -> list[str]:
    """Each config key read and the plan key and value it became, a line each, then how the reader took what it
    says (a model name resolved by a rule)."""
    return [f"{r.source} -> {r.plan_key}: {r.value}" for r in imported.read] + [f"note: {n}" for n in imported.notes]


def unused_lines(imported: Imported) -> list[str]:
    """Each config key the plan could not use: those that change memory with no plan key, then the unknown ones."""
    return [f"not modelled: {item}" for item in imported.unmodelled] + [
        f"unknown key, not used: {key}" for key in imported.unknown
    ]


def overlay(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`base` with every key of `over` laid over it, section by section (a copy of both)."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = overlay(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# the hardware a config does not say: the GPU and how it is bought are the planner's, kept on reading back
KEPT_HARDWARE = ("gpu", "offering", "host_memory_gib_per_gpu")
# keys that follow others and are compared as what they make: the layers of each pipeline chunk as cut
# (parallelism.pipeline_layers) and the micro-batches per step (the global batch ÷ micro-batch × data)
DERIVED = ("parallelism.pipeline_split", "parallelism.pipeline_microbatches")
# keys that tune another key and are read only while it uses them: key → (that key, the values that use it);
# what training alone reads is unread by a serving plan
TUNES: dict[str, tuple[str, tuple[Any, ...]]] = {
    "techniques.loss_chunks": ("techniques.loss", ("chunked",)),
    "techniques.checkpoint_every": ("techniques.activation_checkpointing", ("every_k",)),
    "techniques.compile_scope": ("techniques.compile", (True,)),
    "precision.fp8_recipe": ("precision.compute", ("fp8",)),
    "precision.fp8_all_gather": ("precision.compute", ("fp8",)),
    **{
        f"precision.{key}": ("precision.optimizer", EIGHT_BIT_OPTIMIZERS)
        for key in ("optimizer_library", "optimizer_block_size", "fp32_embedding_states")
    },
    "precision.weights": ("workload.task", tuple(FROZEN_WEIGHTS)),
    "precision.quant_group_size": ("precision.weights", tuple(DEFAULT_GROUP_SIZE)),
    "precision.double_quant": ("precision.weights", ("nf4",)),
    "workload.inference.quantize_on_load": ("precision.weights", TORCHAO_WEIGHTS),
    "workload.inference.dynamic_activation_quant": ("workload.inference.quantize_on_load", (True,)),
    "precision.kv_cache": ("workload.task", ("inference",)),
    "precision.optimizer_impl": ("precision.optimizer", ("adamw",)),
    **{
        key: ("workload.task", TRAINING_TASKS)
        for key in (
            "workload.sequence_length",
            "workload.micro_batch_size",
            "workload.global_batch_size",
            "workload.steps",
            "workload.train_tokens",
            "precision.master_weights",
            "precision.gradients",
            "precision.optimizer",
            "precision.optimizer_state",
            "techniques.activation_checkpointing",
            "techniques.offload",
            "techniques.moe_capacity_factor",
            "techniques.optimizer_in_backward",
            "techniques.loss",
            "techniques.activation_offload",
            "parallelism.zero_stage",
            "parallelism.flat_params",
            "parallelism.reduce_bucket_elements",
            "parallelism.sub_group_elements",
        )
    },
}


def in_effect(plan: Plan, own: bool) -> dict[str, Any]:
    """The plan's keys its memory and time read, flat ({"parallelism.data": 8, ...}): the model's architecture,
    each section's keys (those of TUNES only while what they tune uses them), the pipeline's layers as cut, and,
    where `own` (a plan of the config's own framework), the framework and its release."""
    data, par = plan_to_dict(plan), plan.parallelism
    # (the context window bounds the plan's lengths; no memory or time reads it)
    flat = {f"model.{key}": getattr(plan.model, key) for key in MODEL_KEYS if key not in ("preset", "context_window")}
    for section in SECTIONS:
        flat.update(_leaves(data[section], f"{section}."))
    flat["parallelism.pipeline_layers"] = list(
        chunk_split(plan.model.num_layers, par.pipeline * par.virtual_stages, par.pipeline_split, par.pipeline_layers)
    )
    if own:
        flat.update(framework=plan.framework, framework_release=plan.framework_release)
    return {key: value for key, value in flat.items() if key not in DERIVED and _read(flat, key)}


def _leaves(section: dict[str, Any], prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in section.items():
        out.update(_leaves(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return out


def _read(flat: dict[str, Any], key: str) -> bool:
    """Whether the plan reads `key`: it tunes nothing (TUNES), or what it tunes is read and uses it."""
    if key not in TUNES:
        return True
    tuned, values = TUNES[key]
    return flat[tuned] in values and _read(flat, tuned)


def read_back(plan: Plan, fmt: Format, text: str) -> Plan:
    """The plan `fmt`'s config `text` says, read for the plan's GPU count over what a config does not say: the
    plan's GPU (KEPT_HARDWARE) and, where the config names none, its model."""
    imported = fmt.read(text, gpus=plan.hardware.count)
    planned = plan_to_dict(plan)
    data = overlay({"hardware": {key: planned["hardware"][key] for key in KEPT_HARDWARE}}, imported.plan)
    data.setdefault("model", planned["model"])
    return plan_from_dict(data)


def round_trip(plan: Plan, fmt: Format, keys: tuple[str, ...] | None = None) -> dict[str, tuple[Any, Any]]:
    """The keys (default `fmt.says`) whose value changes on plan → config → plan, as {key: (planned, read back)};
    the config is read over a plan that keeps only the original's model and GPU (read_back), so a key counts as
    said only if the config itself says it."""
    planned, back = plan_to_dict(plan), plan_to_dict(read_back(plan, fmt, fmt.written(plan)))
    return {
        key: (get_key(planned, key), get_key(back, key))
        for key in (fmt.says if keys is None else keys)
        if get_key(planned, key) != get_key(back, key)
    }


def changes(plan: Plan, fmt: Format, text: str) -> dict[str, tuple[Any, Any]]:
    """Every key the plan's memory or time reads (in_effect) whose value its config `text` does not carry, as
    {key: (planned, what the config runs)}: the config read back (read_back) and compared key by key. A key that
    only tunes another is compared where both plans use it (the other is named where it changes)."""
    own = plan.framework == fmt.framework
    planned, back = in_effect(plan, own), in_effect(read_back(plan, fmt, text), own)
    return {key: (value, back[key]) for key, value in planned.items() if key in back and back[key] != value}


def export_config(plan: Plan, fmt: Format) -> tuple[str, dict[str, tuple[Any, Any]]]:
    """The plan as `fmt`'s config, and every key whose planned value it does not carry ({key: (planned, what the
    config runs)}; each is a key of `fmt.cannot_say`, which says why); a format whose framework does not run the
    plan's task is refused."""
    _exportable(plan, fmt)
    return _carried(plan, fmt, fmt.written(plan))


def _carried(plan: Plan, fmt: Format, text: str) -> tuple[str, dict[str, tuple[Any, Any]]]:
    """The config `text`, and the keys whose planned value it does not carry (changes)."""
    try:
        return text, changes(plan, fmt, text)
    except PlanError as exc:  # the config runs a plan this planner refuses (a cut it cannot make, ...)
        raise bad("--to", fmt.name, f"writes a config whose plan does not hold: {exc}") from None


def _exportable(plan: Plan, fmt: Format) -> None:
    """Refuse a read-only format, and one whose framework does not run the plan's task."""
    if fmt.write is None:
        raise bad("--to", fmt.name, READ_ONLY)
    offered = formats_for(plan)
    if fmt not in offered:
        kind = "serves models" if fmt.framework in INFERENCE_FRAMEWORKS else "trains models"
        allowed = ", ".join(f.name for f in offered)
        raise bad("--to", fmt.name, f"{kind}, and the plan's task is {plan.workload.task}; allowed: {allowed}")


# the command a flag the original lacks is added to, and each flag's other spellings, of the command-line formats
PROGRAMS: dict[str, re.Pattern[str]] = {
    "vllm": vllm.ENGINE.program,
    "sglang": sglang.ENGINE.program,
    "megatron": re.compile(r"pretrain_\w+\.py"),
    "hf_trainer": re.compile(r"\.py\b|\btrl\b"),
    "torchtitan": re.compile(r"torchrun|run_train\.sh|train\.py"),
}
ALIASES: dict[str, dict[str, tuple[str, ...]]] = {
    engine.name: {
        flag: tuple(a for a, f in engine.aliases.items() if f == flag)
        + ((flag.replace("-", "_").replace("__", "--", 1),) if engine.underscores else ())
        for flag in {*engine.flags, *engine.aliases.values()}
    }
    for engine in (vllm.ENGINE, sglang.ENGINE)
}


def imported_plan(plan: Plan, fmt: Format, original: str) -> Plan:
    """The plan the original config says, which an edit compares the plan with: read with the GPU count it names
    (the plan's where it names none), over the plan's GPU and, where it names none, the plan's model."""
    try:
        imported = fmt.read(original)
    except PlanError:  # a config that needs the count to read (a global batch over the data ranks)
        imported = None
    if imported is None or get_key(imported.plan, "hardware.count") is None:
        imported = fmt.read(original, gpus=plan.hardware.count)
    planned = plan_to_dict(plan)
    data = overlay({"hardware": {key: planned["hardware"][key] for key in KEPT_HARDWARE}}, imported.plan)
    data.setdefault("model", planned["model"])
    return plan_from_dict(data)


def export_onto(
    plan: Plan, fmt: Format, original: str, base: Plan | None = None
) -> tuple[Edited, dict[str, tuple[Any, Any]]]:
    """The original config the plan was read from with only the keys whose planned value differs from `base` (the
    plan the original says; read from it where not given) edited (planner/formats/edit.py), what it changed, and
    the keys whose planned value the edited config does not carry (as export_config)."""
    _exportable(plan, fmt)
    if not fmt.detect(original):
        raise PlanError("--onto", f"the config is not a {fmt.label}: give the config the plan was imported from")
    base = imported_plan(plan, fmt, original) if base is None else base
    try:
        before = fmt.written(base)
    except PlanError as exc:
        raise bad(
            "--onto",
            fmt.name,
            f"cannot be edited: the plan the original says cannot be written ({exc}); export without the original",
        ) from None
    kind = syntax(original, fmt.suffix)
    if kind == "python":
        raise bad(
            "--onto",
            fmt.name,
            "config registries are Python functions, which an export does not edit; export "
            "without the original (a TOML)",
        )
    moved = delta(written_keys(before, fmt.suffix), written_keys(fmt.written(plan), fmt.suffix))
    edited = edit_text(
        original, kind, for_syntax(moved, kind), program=PROGRAMS.get(fmt.name), aliases=ALIASES.get(fmt.name)
    )
    check_parsed(kind, edited.text)
    return edited, _carried(plan, fmt, edited.text)[1]
