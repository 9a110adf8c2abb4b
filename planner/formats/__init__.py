"""Framework configs in and out: read a framework's own config as a plan, and write a plan as that config.

Each format is one module of this package with one `FORMAT` (planner/formats/base.py says what a format
holds); FORMATS lists them. A config read becomes a partial plan dict that `overlay` lays over a base plan (the
default plan, or a plan file the user gives), so a config that does not name the model still plans.
"""

from __future__ import annotations

import copy
from typing import Any

from planner.codec import plan_from_dict, plan_to_dict
from planner.errors import PlanError, bad, short
from planner.formats import accelerate, axolotl, deepspeed, hf_trainer, megatron, sglang, torchtitan, torchtune, vllm
from planner.formats.base import Document, Format, Imported, document, get_key
from planner.plan import INFERENCE_FRAMEWORKS, Plan

FORMATS: dict[str, Format] = {f.name: f for f in (
    torchtitan.FORMAT, torchtune.FORMAT, axolotl.FORMAT, deepspeed.FORMAT, hf_trainer.FORMAT, accelerate.FORMAT,
    megatron.FORMAT, vllm.FORMAT, sglang.FORMAT)}


def formats_for(plan: Plan) -> list[Format]:
    """The formats that can run the plan: serving engines' for inference, training frameworks' otherwise."""
    serving = plan.workload.task == "inference"
    return [f for f in FORMATS.values() if (f.framework in INFERENCE_FRAMEWORKS) == serving]


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
    raise doc.over_limit() or PlanError("config", f"is not a config this planner reads ({', '.join(FORMATS)}); name "
                                                  "its format with --framework")


def read_config(text: str, *, format: str | None = None, gpus: int | None = None) -> Imported:
    """A framework config's text read as a plan (its format detected unless named; detection and reading share
    the text's parses)."""
    doc = document(text)
    fmt = format_named(format) if format else detect(doc)
    return fmt.read(doc, gpus=gpus)


def plan_from_config(imported: Imported, *, model: dict[str, Any] | None = None,
                     default_model: dict[str, Any] | None = None, gpu: str | None = None, gpus: int | None = None,
                     name: str = "") -> Plan:
    """The plan a config read says, with what it leaves open: `model` (a plan's model block; replaces the config's)
    or `default_model` (the model where the config names none), `gpu` (a catalog id), `gpus` (the count, where the
    config does not fix it) and a `name` where it has none."""
    data = copy.deepcopy(imported.plan)
    if model is not None or ("model" not in data and default_model is not None):
        data["model"] = model if model is not None else default_model
    elif "model" not in data:
        named = (f"names {short(imported.model_name)}, which is not a preset" if imported.model_name
                 else "names no model")
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
    """Each config key read and the plan key and value it became, a line each."""
    return [f"{r.source} -> {r.plan_key}: {r.value}" for r in imported.read]


def unused_lines(imported: Imported) -> list[str]:
    """Each config key the plan could not use: those that change memory with no plan key, then the unknown ones."""
    return ([f"not modelled: {item}" for item in imported.unmodelled] +
            [f"unknown key, not used: {key}" for key in imported.unknown])


def overlay(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`base` with every key of `over` laid over it, section by section (a copy of both)."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = overlay(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def round_trip(plan: Plan, fmt: Format, keys: tuple[str, ...] | None = None) -> dict[str, tuple[Any, Any]]:
    """The keys (default `fmt.says`) whose value changes on plan → config → plan, as {key: (planned, read back)};
    the config is read over a plan that keeps only the original's model and GPU, so a key counts as said only if
    the config itself says it."""
    return _changed(plan, fmt, fmt.write(plan), fmt.says if keys is None else keys)


def _changed(plan: Plan, fmt: Format, text: str, keys: tuple[str, ...]) -> dict[str, tuple[Any, Any]]:
    """The `keys` whose value differs between the plan and its config `text` read back (see round_trip)."""
    imported = fmt.read(text, gpus=plan.hardware.count)
    planned = plan_to_dict(plan)
    base = {"model": planned["model"], "hardware": {"gpu": plan.hardware.gpu}}
    back = plan_to_dict(plan_from_dict(overlay(base, imported.plan)))
    return {key: (get_key(planned, key), get_key(back, key)) for key in keys
            if get_key(planned, key) != get_key(back, key)}


def export_config(plan: Plan, fmt: Format) -> tuple[str, dict[str, tuple[Any, Any]]]:
    """The plan as `fmt`'s config, and the keys of `fmt.cannot_say` whose planned value it does not carry ({key:
    (planned, what the config runs)}); a format whose framework does not run the plan's task is refused."""
    offered = formats_for(plan)
    if fmt not in offered:
        kind = "serves models" if fmt.framework in INFERENCE_FRAMEWORKS else "trains models"
        allowed = ", ".join(f.name for f in offered)
        raise bad("--to", fmt.name, f"{kind}, and the plan's task is {plan.workload.task}; allowed: {allowed}")
    text = fmt.write(plan)
    return text, _changed(plan, fmt, text, tuple(fmt.cannot_say))
