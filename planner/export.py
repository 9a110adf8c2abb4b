"""Text forms of plans and estimates: plan YAML in and out, estimate as JSON-ready dict, YAML or a table."""

from __future__ import annotations

import json
from dataclasses import fields
from collections.abc import Callable, Collection
from typing import Any

import yaml

from planner.errors import PlanError
from planner.memory import TOTALS_MEANING, Estimate
from planner.models import Preset, approximate_note
from planner.plan import Plan, plan_from_dict, plan_to_dict, section_keys
from planner.recommend import Candidate, Recommendation
from planner.units import format_bytes

MAX_PLAN_BYTES = 256 * 1024  # a plan is a few hundred bytes; anything near this is not a plan


class _StrictLoader(yaml.SafeLoader):
    """safe_load that refuses duplicated keys instead of silently keeping the last one."""


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise PlanError(str(key), f"duplicated key (line {key_node.start_mark.line + 1})")
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def load_yaml(text: str, what: str = "plan") -> Any:
    if len(text.encode()) > MAX_PLAN_BYTES:
        raise PlanError(what, f"{len(text.encode()):,} bytes is larger than the {MAX_PLAN_BYTES:,}-byte limit")
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:  # PyYAML composes recursively: thousands of nested brackets exhaust the stack
        raise PlanError(what, "nested too deeply to be a plan") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise PlanError(what, f"not valid YAML{where} ({getattr(exc, 'problem', None) or exc})") from None


def plan_from_yaml(text: str) -> Plan:
    return plan_from_dict(load_yaml(text))


def plan_to_yaml(plan: Plan) -> str:
    return yaml.safe_dump(plan_to_dict(plan), sort_keys=False, allow_unicode=True)


def estimate_to_dict(est: Estimate) -> dict[str, Any]:
    """The JSON form (CLI `--format json`): totals, verdict, items at the peak, per-stage phases, the plan."""
    note = approximate_note(est.plan.model)
    return ({"approximate_model": note} if note else {}) | {
        "peak_allocated_bytes": est.peak_allocated_bytes,
        "peak_reserved_bytes": est.peak_reserved_bytes,
        "device_bytes": est.device_bytes,
        "fits": est.fits,
        "phase": est.phase,
        "items": [{"name": i.name, "label": i.label, "bytes": i.bytes, "formula": i.formula, "note": i.note,
                   "level": i.level} for i in est.items],
        "totals_meaning": TOTALS_MEANING,
        "usable_bytes": est.usable_bytes,
        "headroom_bytes": est.headroom_bytes,
        "reason": est.reason,
        "stage": est.stage,
        "host_bytes": est.host_bytes,
        "serving": None if est.serving is None else {
            "kv_budget_bytes": est.serving.kv_budget_bytes, "kv_bytes_per_token": est.serving.kv_bytes_per_token,
            "max_concurrent_sequences": est.serving.max_concurrent_sequences,
            "max_context_tokens": est.serving.max_context_tokens},
        "gpu": est.gpu.id,
        "stages": [{"index": s.index, "layers": s.layers, "micro_batches_in_flight": s.micro_batches_in_flight,
                    "peak_phase": s.peak.name, "peak_allocated_bytes": s.peak_allocated_bytes,
                    "peak_reserved_bytes": s.reserved_bytes, "device_bytes": s.device_bytes,
                    "phases": [{"name": ph.name, "allocated_bytes": ph.allocated_bytes} for ph in s.phases]}
                   for s in est.stages],
        "plan": plan_to_dict(est.plan),
    }


def estimate_to_json(est: Estimate) -> str:
    return json.dumps(estimate_to_dict(est), indent=2)


def estimate_to_yaml(est: Estimate) -> str:
    return yaml.safe_dump(estimate_to_dict(est), sort_keys=False, allow_unicode=True)


def _framework_line(plan: Plan) -> str | None:
    """Which values the plan's framework set, and which the plan changed."""
    if plan.framework == "generic":
        return None
    from planner.frameworks import load_frameworks, provenance

    settings = provenance(plan)
    kept = ", ".join(f"{x.key.split('.')[-1]}={_text(x.value)}" for x, k in settings if k) or "nothing"
    changed = ", ".join(x.key.split(".")[-1] for x, k in settings if not k)
    return (f"framework {load_frameworks()[plan.framework].label} set: {kept}"
            + (f"; the plan changed: {changed}" if changed else ""))


def frameworks_to_list() -> dict[str, Any]:
    """The framework recipes with every setting's condition and source, for `python -m planner frameworks`."""
    from planner.frameworks import load_frameworks

    return {name: {"label": r.label, "summary": r.summary,
                   "settings": [{"key": x.key, "value": x.value, "when": dict(x.when), "source": x.source}
                                for x in r.settings]}
            for name, r in load_frameworks().items()}


def frameworks_to_table() -> str:
    """The framework recipes as a Markdown table (the README's), from planner/data/frameworks.yaml."""
    from planner.frameworks import load_frameworks

    lines = ["| `framework` | what it keeps in which dtype, and where | settings it makes |", "|---|---|---|"]
    for name, r in load_frameworks().items():
        settings = "; ".join(f"`{x.key}: {_text(x.value)}`" + (f" when {x.condition}" if x.when else "")
                             for x in r.settings) or "none"
        lines.append(f"| `{name}` ({r.label}) | {r.summary} | {settings} |")
    return "\n".join(lines) + "\n"


def _approx_label(plan: Plan) -> str | None:
    n = plan.model.approx_params
    return f"~{n / 1e9:,.3g}B-parameter model" if n else None


def estimate_to_table(est: Estimate) -> str:
    """A plain-text report: verdict, the itemized peak, the three totals, and the phases of each stage."""
    plan = est.plan
    par = plan.parallelism
    lines = [
        plan.name or f"{plan.model.preset or _approx_label(plan) or 'custom model'} — {plan.workload.task}",
        *filter(None, [approximate_note(plan.model)]),
        f"{est.reason}",
        f"peak at: {est.phase}" + (f", pipeline stage {est.stage}" if par.pipeline > 1 else ""),
        *filter(None, [_framework_line(plan)]),
        "",
    ]
    name_w = max(len(i.label) for i in est.items)
    lines.append(f"{'item':<{name_w}}  {'GiB':>9}  formula — note")
    for i in est.items:
        if i.bytes == 0:
            continue
        lines.append(f"{i.label:<{name_w}}  {format_bytes(i.bytes, 'GiB', 3).removesuffix(' GiB'):>9}  "
                     f"{i.formula} — {i.note}")
    lines.append("")
    for key, value in (("peak_allocated_bytes", est.peak_allocated_bytes),
                       ("peak_reserved_bytes", est.peak_reserved_bytes), ("device_bytes", est.device_bytes)):
        lines.append(f"{key:<21} {format_bytes(value):>12}  {TOTALS_MEANING[key]}")
    if est.serving is not None:
        lines.append(f"{'engine budget':<21} {format_bytes(est.usable_bytes):>12}  gpu_memory_utilization × "
                     f"{format_bytes(est.gpu.usable_bytes)} usable on {est.gpu.name}")
        lines.append(f"{'KV cache capacity':<21} {est.serving.max_concurrent_sequences:>12,}  sequences of "
                     f"{est.plan.workload.inference.context_tokens:,} tokens "
                     f"({format_bytes(est.serving.kv_budget_bytes)} at {est.serving.kv_bytes_per_token:,} B/token)")
    else:
        lines.append(f"{'usable':<21} {format_bytes(est.usable_bytes):>12}  {est.gpu.name} "
                     f"({est.gpu.usable_memory_source})")
    if est.host_bytes:
        lines.append(f"{'host memory':<21} {format_bytes(est.host_bytes):>12}  per GPU, for what is offloaded")
    lines.append("")
    for s in est.stages:
        head = f"stage {s.index} ({s.layers} layers, {s.micro_batches_in_flight:g} in flight)" \
            if par.pipeline > 1 else "phases"
        phases = ", ".join(f"{ph.name} {format_bytes(ph.allocated_bytes)}" for ph in s.phases)
        lines.append(f"{head}: {phases}")
    return "\n".join(lines) + "\n"


def candidate_to_dict(c: Candidate) -> dict[str, Any]:
    par, tech = c.plan.parallelism, c.plan.techniques
    return {
        "gpu": c.gpu.id,
        "gpu_name": c.gpu.name,
        "count": c.count,
        "parallelism": {key: getattr(par, key) for key in section_keys("parallelism")},
        "techniques": {"activation_checkpointing": tech.activation_checkpointing, "offload": tech.offload},
        "micro_batch_size": c.plan.workload.micro_batch_size,
        "device_bytes": c.device_bytes,
        "usd_per_hour": c.usd_per_hour,
        "job_hours": c.job_hours,
        "job_usd": c.job_usd,
        "strategy": c.strategy,
        "why": c.why,
    }


def recommendation_to_list(rec: Recommendation, top: int | None = None) -> list[dict[str, Any]]:
    """The JSON form of `recommend`: the candidates, cheapest first."""
    return [candidate_to_dict(c) for c in rec.candidates[:top]]


def presets_to_list(presets: dict[str, Preset]) -> list[dict[str, Any]]:
    """The preset table with computed and published parameter counts, for `python -m planner models`."""
    rows = []
    for key, p in presets.items():
        m, counts = p.model, p.model.params
        grouped = m.num_kv_heads < m.num_attention_heads and not m.mla
        features = ([("MQA" if m.num_kv_heads == 1 else "GQA")] if grouped else []) + (
            [f"MoE {m.num_experts}×top-{m.experts_per_token}"] if m.num_experts else []) + (
            ["MLA"] if m.mla else []) + ([f"window {m.sliding_window:,}"] if m.sliding_window else [])
        rows.append({"id": key, "name": p.name, "hf_id": p.hf_id, "params": counts.total,
                     "active_params": counts.active, "published_params": p.published_params,
                     "layers": m.num_layers, "hidden_size": m.hidden_size, "features": features})
    return rows


def presets_to_table(presets: dict[str, Preset]) -> str:
    lines = [f"{'id':<20} {'params':>9} {'active':>9}  {'layers':>6} {'hidden':>6}  features",
             f"{'':<20} {'(B)':>9} {'(B)':>9}"]
    for r in presets_to_list(presets):
        lines.append(f"{r['id']:<20} {r['params'] / 1e9:>9.2f} {r['active_params'] / 1e9:>9.2f}  {r['layers']:>6} "
                     f"{r['hidden_size']:>6}  {', '.join(r['features']) or 'dense'}")
    return "\n".join(lines) + "\n"


def _money(x: float | None, digits: int = 2) -> str:
    return "no price" if x is None else f"${x:,.{digits}f}"


def recommendation_to_table(rec: Recommendation, top: int | None = 10) -> str:
    cents = 2 if rec.job_tokens_source.startswith("inference") else 0
    lines = [f"job: {rec.job_tokens:,} tokens ({rec.job_tokens_source}); {rec.flops_per_token:.3g} FLOPs/token; "
             f"{rec.mfu:.0%} model FLOPs utilization; {rec.headroom:.0%} memory headroom; ranked by "
             f"{'cost of the job' if rec.rank_by == 'job' else 'cost per hour'}", ""]
    if not rec.candidates:
        lines.append("no GPU in the catalog fits this plan")
    else:
        best = rec.candidates[0]
        lines.append(f"cheapest: {best.count} × {best.gpu.name}, {_money(best.usd_per_hour)}/h, "
                     f"{best.job_hours:,.1f} h, {_money(best.job_usd, cents)} for the job")
        lines.append("")
        lines.append(f"{'#':>3}  {'GPU':<20} {'count':>5}  {'GiB/GPU':>8}  {'$/hour':>10}  {'hours':>9}  {'job $':>10}  strategy")
        for i, c in enumerate(rec.candidates[:top], 1):
            lines.append(f"{i:>3}  {c.gpu.id:<20} {c.count:>5}  {c.device_bytes / 2**30:>8.1f}  "
                         f"{_money(c.usd_per_hour):>10}  {c.job_hours:>9,.1f}  {_money(c.job_usd, cents):>10}  "
                         f"{c.strategy}")
        if top is not None and len(rec.candidates) > top:
            lines.append(f"     … {len(rec.candidates) - top} more (--top N)")
    if rec.rejected:
        lines += ["", "does not fit:"] + [f"  {r.reason}" for r in rec.rejected]
    return "\n".join(lines) + "\n"


# --- The share link: a plan as URL query parameters ------------------------------------------------------------
# Parameter names are the file format's leaf keys (`?preset=llama-3.1-8b&sequence_length=8192&gpu=…`), so links
# stay readable. Only values that differ from what the plan would otherwise be are written (the model's
# architecture keys when they differ from the preset's), so a link is short and reproduces the plan exactly.
_LEAVES: dict[str, tuple[str, ...]] = {}  # leaf key -> its path in the plan dict


def _leaf_paths() -> dict[str, tuple[str, ...]]:
    if not _LEAVES:
        from planner.models import MODEL_KEYS
        from planner.plan import _NESTED, _SECTIONS

        _LEAVES["name"] = ("name",)
        _LEAVES["framework"] = ("framework",)
        for key in (*MODEL_KEYS, "params"):
            _LEAVES[key] = ("model", key)
        for section, cls in _SECTIONS.items():
            for key in section_keys(section):
                nested = _NESTED.get((section, key))
                if nested is None:
                    _LEAVES[key] = (section, key)
                else:
                    for sub in (f.name for f in fields(nested)):
                        _LEAVES[sub] = (section, key, sub)
    return _LEAVES


def _flatten(d: dict, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    out = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(_flatten(value, prefix + (key,)))
        else:
            out[prefix + (key,)] = value
    return out


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# keys the comparison base is built with, so written whenever they differ from the planner's own default
_ALWAYS = {("workload", "task"): ("pretrain",), ("framework",): ("generic",), ("parallelism", "data"): (1,),
           ("parallelism", "tensor"): (1,), ("parallelism", "pipeline"): (1,), ("parallelism", "context"): (1,)}


def plan_to_query(plan: Plan) -> dict[str, str]:
    """The plan as query parameters: the preset and task, the architecture keys that differ from the preset's
    (or from a model given by its required keys alone), and every other value that differs from the default
    plan of the same model and task."""
    from planner.models import Model, model_to_dict

    model = model_to_dict(plan.model)
    required = ("num_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
    if plan.model.approx_params:  # the count alone rebuilds the architecture
        always, reference = ("params",), {}
    elif plan.model.preset:
        always = ("preset",)
        reference = model_to_dict(plan_from_dict({"model": {"preset": plan.model.preset}}).model)
    else:
        always = required
        reference = model_to_dict(Model(**{k: model[k] for k in required}))
    query = {key: _text(value) for key, value in model.items()
             if value is not None and (key in always or reference.get(key) != value)}
    # the default plan of the same model, task, framework and degrees (framework settings can depend on them)
    par = plan.parallelism
    base = _flatten(plan_to_dict(plan_from_dict({
        "model": model, "framework": plan.framework, "workload": {"task": plan.workload.task},
        "parallelism": {"data": par.data, "tensor": par.tensor, "pipeline": par.pipeline, "context": par.context}})))
    paths = {path: leaf for leaf, path in _leaf_paths().items()}
    for path, value in _flatten(plan_to_dict(plan)).items():
        if path[0] in ("schema", "model") or path not in paths or value is None:
            continue
        if path in _ALWAYS and value not in _ALWAYS[path] or path not in _ALWAYS and base.get(path) != value:
            query[paths[path]] = _text(value)
    # Defaults that follow other values (the served weights' dtype follows the compute dtype, ...) can hide a
    # value the comparison above dropped: read the link back and add whatever it does not reproduce.
    target = _flatten(plan_to_dict(plan))
    for _ in range(3):
        back = _flatten(plan_to_dict(plan_from_query(query, {"model": model})[0]))
        missed = [path for path, value in target.items() if back.get(path) != value and path in paths]
        if not missed:
            break
        query.update({paths[path]: _text(target[path]) for path in missed})
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


def plan_from_query(params: dict[str, str | list[str]], default: dict[str, Any],
                    gpus: Collection[str] | None = None) -> tuple[Plan, list[str]]:
    """The plan a share link describes, and one warning per parameter that was ignored.

    `default` is the plan dict a link without its own model is laid over. A parameter that is unknown,
    repeated, malformed or out of range, that names a GPU not in `gpus` (the catalog in use), or that breaks a
    rule with the others, is dropped with a warning that names it, and its field keeps its default; the
    function never raises for bad input."""
    warnings: list[str] = []
    leaves = _leaf_paths()
    gpu = params.get("gpu")
    if gpus is not None and gpu is not None and (gpu[-1] if isinstance(gpu, list) and gpu else gpu) not in gpus:
        warnings.append(f"gpu: {str(gpu)[:60]!r} is not in the GPU catalog; the default is used")
        params = {k: v for k, v in params.items() if k != "gpu"}
    base_flat = _flatten(plan_to_dict(plan_from_dict(default)))
    chosen: dict[str, Any] = {}
    for key, raw in params.items():
        if key not in leaves:
            warnings.append(f"{key}: unknown link parameter, ignored")
            continue
        values = raw if isinstance(raw, list) else [raw]
        if len(values) != 1:
            warnings.append(f"{key}: given {len(values)} times; the last one is used")
        text = str(values[-1])[:200]
        path = leaves[key]
        current = base_flat.get(path, _block_default(path))
        try:
            chosen[key] = _parse(text, current) if current is not None else (
                yaml.safe_load(text) if len(text) < 100 else text)
        except (ValueError, yaml.YAMLError):
            warnings.append(f"{key}: {text!r} is not a valid value; the default is used")
    for _ in range(len(chosen) + 1):
        # a link with a preset, or with architecture keys and no preset (a custom model), brings its own model
        own_model = any(leaves[key][0] == "model" for key in chosen)
        d = _build(default, chosen, leaves, preset_given=own_model)
        try:
            return plan_from_dict(d), warnings
        except PlanError as exc:
            culprit = _culprit(exc, chosen, lambda keys: _build(default, keys, leaves, preset_given=own_model))
            if culprit is None:
                warnings.append(f"link: {exc}; the default plan is used")
                return plan_from_dict(default), warnings
            warnings.append(f"{culprit}: {exc}; the default is used")
            del chosen[culprit]
    return plan_from_dict(default), warnings


def _block_default(path: tuple[str, ...]) -> Any:
    """The default of a key in a task-specific block (absent from plans of other tasks), for its type."""
    from planner.plan import _NESTED

    if len(path) == 3 and (path[0], path[1]) in _NESTED:
        return getattr(_NESTED[(path[0], path[1])](), path[2])
    return None


def _build(default: dict, chosen: dict[str, Any], leaves: dict[str, tuple[str, ...]], preset_given: bool) -> dict:
    # A link that names its model describes a whole plan: it is laid over the planner's defaults, as
    # plan_to_query wrote it. One without a model tweaks the default plan.
    d = {"model": {}} if preset_given else json.loads(json.dumps(default))  # a deep copy of plain data
    for key, value in chosen.items():
        node = d
        path = leaves[key]
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
