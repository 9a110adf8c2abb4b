"""Every form of a plan and the one way between them: plan ↔ nested dict ↔ YAML text ↔ flat leaf keys ↔ share link.

The dict form is the public file format (`schema: vram-planner/v1`), shared by the CLI, the app's export and
import, and its share link. Every key but the architecture has a default, documented beside the field (in
planner/plan/config.py) and in the README; `plan_to_dict` writes every key out, resolved, so a saved plan never
depends on defaults that might change. A plan's framework lays its recipes' settings under the keys the dict
gives (planner/frameworks.py) before the plan is built.

The share link's parameter names are the file format's leaf keys (`?preset=llama-3.1-8b&sequence_length=8192&
gpu=…`), so links stay readable. Only values that differ from what the plan would otherwise be are written (the
model's architecture keys when they differ from the preset's), so a link is short and reproduces the plan
exactly.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import fields
from functools import partial
from typing import Any

import yaml

from planner.errors import PlanError, bad, unknown_key
from planner.frameworks import apply_framework
from planner.loader import load_yaml
from planner.plan.config import ADAPTER_TASKS, NESTED, RL_OBJECTIVES, SCHEMA, SECTIONS, TOP_KEYS, Plan, section_keys
from planner.plan.models import MODEL_KEYS, Model, model_from_dict, model_to_dict
from planner.plan.validate import check_mapping, rules
from planner.units import parse_count


# --- plan ↔ nested dict ↔ YAML ------------------------------------------------------------------------------------
def _section(name: str, cls: type, raw: Any) -> Any:
    """A dataclass from its mapping, refusing unknown keys; nested mappings become their own dataclasses."""
    if not isinstance(raw, dict):
        raise bad(name, raw, "must be a mapping")
    allowed = tuple(f.name for f in fields(cls))
    values = {}
    for key, value in raw.items():
        if key not in allowed:
            raise unknown_key(name, key, allowed)
        nested = NESTED.get((name, key))
        values[key] = _section(f"{name}.{key}", nested, value if value is not None else {}) if nested else value
    return cls(**{key: tuple(value) if isinstance(value, list) else value for key, value in values.items()})


def plan_from_dict(data: Any) -> Plan:
    """Build and validate a Plan from the file format's plain dict."""
    if not isinstance(data, dict):
        raise PlanError("plan", f"must be a mapping with the keys {', '.join(TOP_KEYS)}")
    for key in data:
        if key not in TOP_KEYS:
            raise unknown_key("", key, TOP_KEYS)
    schema = data.get("schema", SCHEMA)
    if schema != SCHEMA:
        raise bad("schema", schema, f"is not supported; this planner reads {SCHEMA!r}")
    if "model" not in data:
        raise PlanError("model", "missing; give a model.preset or the architecture keys")
    data = _token_count(data)
    check_mapping(data, Plan, "")  # types, ranges and lengths first: the framework's rules read these values
    data = apply_framework(data)
    sections = {name: _section(name, cls, data.get(name) or {}) for name, cls in SECTIONS.items()}
    name = data.get("name") or ""
    return Plan(
        model=model_from_dict(data["model"]),
        name=name,
        framework=data.get("framework") or "generic",
        framework_release=data.get("framework_release") or "",
        **sections,
    )


def _token_count(data: dict) -> dict:
    """The plan dict with a job length written as a count ('1T', '500B', as model.params is) read as an integer."""
    workload = data.get("workload")
    if not isinstance(workload, dict) or not isinstance(workload.get("train_tokens"), str):
        return data
    tokens = workload["train_tokens"]
    try:
        return {**data, "workload": {**workload, "train_tokens": parse_count(tokens)}}
    except ValueError:
        raise bad("workload.train_tokens", tokens, "must be a token count like 1T, 500B or 1e12") from None


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """Every key, resolved, in the file format's order."""
    out: dict[str, Any] = {"schema": SCHEMA}
    if plan.name:
        out["name"] = plan.name
    out["framework"] = plan.framework
    if plan.framework_release:
        out["framework_release"] = plan.framework_release
    out["model"] = model_to_dict(plan.model)
    for name in SECTIONS:
        out[name] = _plain(getattr(plan, name))
    # a task-specific block is written for the task that uses it
    task = plan.workload.task
    if task not in ADAPTER_TASKS:
        del out["workload"]["lora"]
    if task != "inference":
        del out["workload"]["inference"]
    objective = plan.workload.objective
    if objective == "next_token":  # the objective's keys are written for a post-training plan
        del out["workload"]["objective"]
    for key, used_by in (
        ("preference", ("preference",)),
        ("rl", RL_OBJECTIVES),
        ("ppo", ("ppo",)),
        ("distillation", ("distillation",)),
    ):  # an objective's block, for its plans
        if objective not in used_by:
            del out["workload"][key]
    return out


def _plain(section: Any) -> Any:
    """A dataclass as a plain mapping (tuples as lists), recursively."""
    if hasattr(section, "__dataclass_fields__"):
        return {f.name: _plain(getattr(section, f.name)) for f in fields(section)}
    return list(section) if isinstance(section, tuple) else section


def plan_from_yaml(text: str) -> Plan:
    return plan_from_dict(load_yaml(text))


def plan_to_yaml(plan: Plan) -> str:
    return yaml.safe_dump(plan_to_dict(plan), sort_keys=False, allow_unicode=True)


# --- flat leaf keys ----------------------------------------------------------------------------------------------
def _leaf_paths() -> dict[str, tuple[str, ...]]:
    """Each leaf key of the file format (`sequence_length`) and its path in the plan dict."""
    leaves: dict[str, tuple[str, ...]] = {
        "name": ("name",),
        "framework": ("framework",),
        "framework_release": ("framework_release",),
    }
    for key in (*MODEL_KEYS, "params"):
        leaves[key] = ("model", key)
    for section in SECTIONS:
        for key in section_keys(section):
            nested = NESTED.get((section, key))
            if nested is None:
                leaves[key] = (section, key)
            else:
                # the post-training keys are prefixed: gpu_memory_utilization is also a serving key, loss_chunks a
                # techniques key, ppo's reward is no model's
                prefix = {"rl": "rl_", "ppo": "ppo_", "distillation": "kd_"}.get(key, "")
                leaves.update({prefix + sub.name: (section, key, sub.name) for sub in fields(nested)})
    return leaves


LEAVES: dict[str, tuple[str, ...]] = _leaf_paths()  # leaf key -> its path in the plan dict
_LEAF_OF = {path: leaf for leaf, path in LEAVES.items()}


def flatten(d: dict, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """A plan dict's leaves by their paths."""
    out = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(flatten(value, prefix + (key,)))
        else:
            out[prefix + (key,)] = value
    return out


def leaf_text(value: Any) -> str:
    """A plan value as a link (and table) writes it: true/false, comma-separated lists, 2 for 2.0."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# --- the share link: a plan as URL query parameters ------------------------------------------------------------
# keys the comparison base is built with, so written whenever they differ from the planner's own default
_ALWAYS = {
    ("workload", "task"): ("pretrain",),
    ("framework",): ("generic",),
    ("framework_release",): ("",),
    ("parallelism", "data"): (1,),
    ("parallelism", "tensor"): (1,),
    ("parallelism", "pipeline"): (1,),
    ("parallelism", "context"): (1,),
    ("parallelism", "pipeline_schedule"): ("1f1b",),
    ("parallelism", "virtual_stages"): (1,),
    ("parallelism", "pipeline_split"): ("auto",),
    ("parallelism", "pipeline_layers"): (None,),
}


def plan_to_query(plan: Plan) -> dict[str, str]:
    """The plan as query parameters: the preset and task, the architecture keys that differ from the preset's
    (or from a model given by its required keys alone), and every other value that differs from the default
    plan of the same model and task."""
    model = model_to_dict(plan.model)
    required = ("num_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
    always: tuple[str, ...]
    if plan.model.approx_params:  # the count alone rebuilds the architecture
        always, reference = ("params",), {}
    elif plan.model.preset:
        always = ("preset",)
        reference = model_to_dict(plan_from_dict({"model": {"preset": plan.model.preset}}).model)
    else:
        always = required
        reference = model_to_dict(Model(**{k: model[k] for k in required}))
    query = {
        key: leaf_text(value)
        for key, value in model.items()
        if value is not None and (key in always or reference.get(key) != value)
    }
    # the default plan of the same model, task, framework and degrees (framework settings can depend on them)
    par = plan.parallelism
    base = flatten(
        plan_to_dict(
            plan_from_dict(
                {
                    "model": model,
                    "framework": plan.framework,
                    "framework_release": plan.framework_release,
                    "workload": {"task": plan.workload.task},
                    "parallelism": {
                        key: getattr(par, key)
                        for key in (
                            "data",
                            "tensor",
                            "pipeline",
                            "context",
                            "pipeline_schedule",
                            "virtual_stages",
                            "pipeline_split",
                            "pipeline_layers",
                        )
                    },
                }
            )
        )
    )
    for path, value in flatten(plan_to_dict(plan)).items():
        if path[0] in ("schema", "model") or path not in _LEAF_OF or value is None:
            continue
        if path in _ALWAYS and value not in _ALWAYS[path] or path not in _ALWAYS and base.get(path) != value:
            query[_LEAF_OF[path]] = leaf_text(value)
    # Defaults that follow other values (the served weights' dtype follows the compute dtype, ...) can hide a
    # value the comparison above dropped: read the link back and add whatever it does not reproduce.
    target = flatten(plan_to_dict(plan))
    for _ in range(3):
        back = flatten(plan_to_dict(plan_from_query(query, {"model": model})[0]))
        missed = [path for path, value in target.items() if back.get(path) != value and path in _LEAF_OF]
        if not missed:
            break
        query.update({_LEAF_OF[path]: leaf_text(target[path]) for path in missed})
    return query


def _parse(value: str, current: Any) -> Any:
    """A query string value in the type of the plan value it replaces (or YAML's reading of it)."""
    if isinstance(current, bool):
        if value.lower() in ("true", "1", "yes"):
            return True
        if value.lower() in ("false", "0", "no"):
            return False
        raise ValueError
    if isinstance(current, int):
        return int(value)
    if isinstance(current, float):
        return float(value)
    if isinstance(current, (list, tuple)):
        return [v for v in value.split(",") if v]
    parsed = yaml.safe_load(value) if len(value) < 100 else value
    return parsed if isinstance(parsed, (int, float, bool)) and not isinstance(current, str) else value


def plan_from_query(
    params: Mapping[str, str | list[str]], default: dict[str, Any], gpus: Collection[str] | None = None
) -> tuple[Plan, list[str]]:
    """The plan a share link describes, and one warning per parameter that was ignored.

    `default` is the plan dict a link without its own model is laid over. A parameter that is unknown,
    repeated, malformed or out of range, that names a GPU not in `gpus` (the catalog in use), or that breaks a
    rule with the others, is dropped with a warning that names it, and its field keeps its default; the
    function never raises for bad input."""
    warnings: list[str] = []
    gpu = params.get("gpu")
    if gpus is not None and gpu is not None and (gpu[-1] if isinstance(gpu, list) and gpu else gpu) not in gpus:
        warnings.append(f"gpu: {str(gpu)[:60]!r} is not in the GPU catalog; the default is used")
        params = {k: v for k, v in params.items() if k != "gpu"}
    base_flat = flatten(plan_to_dict(plan_from_dict(default)))
    chosen: dict[str, Any] = {}
    for key, raw in params.items():
        if key not in LEAVES:
            warnings.append(f"{key}: unknown link parameter, ignored")
            continue
        values = raw if isinstance(raw, list) else [raw]
        if len(values) != 1:
            warnings.append(f"{key}: given {len(values)} times; the last one is used")
        text = str(values[-1])[:200]
        path = LEAVES[key]
        current = base_flat.get(path, _block_default(path))
        try:
            if takes_integers(path):
                chosen[key] = integers(text)
            else:
                chosen[key] = (
                    _parse(text, current)
                    if current is not None
                    else (yaml.safe_load(text) if len(text) < 100 else text)
                )
        except (ValueError, yaml.YAMLError):
            warnings.append(f"{key}: {text!r} is not a valid value; the default is used")
    for _ in range(len(chosen) + 1):
        # a link with a preset, or with architecture keys and no preset (a custom model), brings its own model
        own_model = any(LEAVES[key][0] == "model" for key in chosen)
        d = _build(default, chosen, preset_given=own_model)
        try:
            return plan_from_dict(d), warnings
        except PlanError as exc:
            culprit = _culprit(exc, chosen, partial(_build, default, preset_given=own_model))
            if culprit is None:
                warnings.append(f"link: {exc}; the default plan is used")
                return plan_from_dict(default), warnings
            warnings.append(f"{culprit}: {exc}; the default is used")
            del chosen[culprit]
    return plan_from_dict(default), warnings


def integers(text: str) -> list[int]:
    """A list of integers as a link (or a text box) writes it, comma-separated; ValueError if it is not one."""
    return [int(v) for v in text.split(",") if v.strip()]


def takes_integers(path: tuple[str, ...]) -> bool:
    """Whether the plan key at `path` is a list of integers (a link writes it comma-separated)."""
    owner = SECTIONS.get(path[0]) if len(path) == 2 else NESTED.get(path[:2]) if len(path) == 3 else None
    rule = rules(owner).get(path[-1]) if owner else None
    return rule is not None and rule.kind == "ints"


def _block_default(path: tuple[str, ...]) -> Any:
    """The default of a key a plan's dict may leave out (a task-specific block's, an empty release), for its type."""
    if len(path) == 3 and (path[0], path[1]) in NESTED:
        return getattr(NESTED[(path[0], path[1])](), path[2])
    if len(path) == 1:
        return next((f.default for f in fields(Plan) if f.name == path[0] and isinstance(f.default, str)), None)
    return None


def _build(default: dict, chosen: dict[str, Any], preset_given: bool) -> dict:
    # A link that names its model describes a whole plan: it is laid over the planner's defaults, as
    # plan_to_query wrote it. One without a model tweaks the default plan.
    d = {"model": {}} if preset_given else json.loads(json.dumps(default))  # a deep copy of plain data
    for key, value in chosen.items():
        node = d
        path = LEAVES[key]
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return d


def _culprit(exc: PlanError, chosen: dict[str, Any], build: Callable[[dict[str, Any]], dict]) -> str | None:
    """The link parameter a plan error is about: the one its field names, else the last one whose removal makes
    that error go away (a rule between two keys, e.g. a pipeline degree against the layers a link also set)."""
    named = exc.field.rsplit(".", 1)[-1]
    if named in chosen:
        return named
    for key in reversed(list(chosen)):
        try:
            plan_from_dict(build({k: v for k, v in chosen.items() if k != key}))
        except PlanError as other:
            if (other.field, other.rule) == (exc.field, exc.rule):
                continue
        return key
    return None
