"""Text forms of estimates, recommendations, presets and framework recipes: JSON-ready dicts, YAML and tables.

The plan's own forms (dict, YAML, share link) are planner/plan/codec.py's.
"""

from __future__ import annotations

import json
import re
import textwrap
from typing import Any

import yaml

from planner.accuracy import likely_seconds, time_note, timed
from planner.formats import FORMATS
from planner.frameworks import load_frameworks, provenance
from planner.memory import TOTALS_MEANING, Estimate
from planner.perf import StepTime
from planner.plan.codec import LEAVES, flatten, leaf_text, plan_to_dict, plan_to_query
from planner.plan.config import RL_OBJECTIVES, Plan, context_note, section_keys
from planner.plan.models import Preset, approximate_note
from planner.search.recommend import Candidate, Recommendation
from planner.search.rollout import gpus_text
from planner.units import format_bytes, format_hours
from planner.views.title import plan_title


def time_to_dict(time: StepTime, plan: Plan) -> dict[str, Any]:
    """The time model's view: the step, what 8 in 10 published runs of its class would have taken
    (planner/accuracy.py), its rates, what bounds it, and its items."""
    likely = likely_seconds(plan, time.step_time_s)
    return {
        "step_time_s": time.step_time_s,
        "likely_step_time_s": None if likely is None else [likely[0], likely[1]],
        "time_accuracy": time_note(plan, time.step_time_s),
        "tokens_per_step": time.tokens_per_step,
        "gpus": time.gpus,
        "tokens_per_s_per_gpu": time.tokens_per_s_per_gpu,
        "model_flops_per_s_per_gpu": time.model_flops_per_s_per_gpu,
        "mfu": time.mfu,
        "bound": time.bound,
        "efficiency": time.efficiency_note,
        "items": [
            {
                "name": i.name,
                "label": i.label,
                "kind": i.kind,
                "seconds": i.seconds,
                "hidden_seconds": i.hidden_s,
                "formula": i.formula,
                "note": i.note,
            }
            for i in time.items
        ],
    }


def estimate_to_dict(est: Estimate, time: StepTime | None = None) -> dict[str, Any]:
    """The JSON form (CLI `--format json`): totals, verdict, items at the peak, per-stage phases, the step's time
    (when given), the plan."""
    note, window = approximate_note(est.plan.model), context_note(est.plan)
    return (
        ({"approximate_model": note} if note else {})
        | ({"context_window": window} if window else {})
        | {
            "peak_allocated_bytes": est.peak_allocated_bytes,
            "peak_reserved_bytes": est.peak_reserved_bytes,
            "device_bytes": est.device_bytes,
            "fits": est.fits,
            "phase": est.phase,
            "items": [
                {
                    "name": i.name,
                    "label": i.label,
                    "bytes": i.bytes,
                    "formula": i.formula,
                    "note": i.note,
                    "level": i.level,
                }
                for i in est.items
            ],
            "totals_meaning": TOTALS_MEANING,
            "usable_bytes": est.usable_bytes,
            "headroom_bytes": est.headroom_bytes,
            "reason": est.reason,
            "stage": est.stage,
            "host_bytes": est.host_bytes,
            "host_limit_bytes": est.host_limit_bytes,
            "serving": None
            if est.serving is None
            else {
                "kv_budget_bytes": est.serving.kv_budget_bytes,
                "kv_bytes_per_token": est.serving.kv_bytes_per_token,
                "max_concurrent_sequences": est.serving.max_concurrent_sequences,
                "max_concurrency": est.serving.max_concurrency,
                "max_context_tokens": est.serving.max_context_tokens,
                "cache_context_tokens": est.serving.cache_context_tokens,
                "context_window": est.serving.context_window,
            },
            "gpu": est.gpu.id,
            "stages": [
                {
                    "index": s.index,
                    "layers": s.layers,
                    "micro_batches_in_flight": s.micro_batches_in_flight,
                    "peak_phase": s.peak.name,
                    "peak_allocated_bytes": s.peak_allocated_bytes,
                    "peak_reserved_bytes": s.reserved_bytes,
                    "device_bytes": s.device_bytes,
                    "phases": [{"name": ph.name, "allocated_bytes": ph.allocated_bytes} for ph in s.phases],
                }
                for s in est.stages
            ],
            # a GRPO server engine's GPU: its own device, the serving plan at one wave
            **({"engine": estimate_to_dict(est.engine)} if est.engine is not None else {}),
            **({"time": time_to_dict(time, est.plan)} if time is not None else {}),
            "plan": plan_to_dict(est.plan),
        }
    )


def estimate_to_json(est: Estimate, time: StepTime | None = None) -> str:
    return json.dumps(estimate_to_dict(est, time), indent=2)


def estimate_to_yaml(est: Estimate, time: StepTime | None = None) -> str:
    return yaml.safe_dump(estimate_to_dict(est, time), sort_keys=False, allow_unicode=True)


def time_to_table(time: StepTime, plan: Plan) -> list[str]:
    """The time model's lines of the text report."""
    tokens = "generated tokens" if plan.workload.task == "inference" else "tokens"
    lines = [
        f"time of {timed(plan)}: {time.step_time_s:,.4g} s, bound by {time.bound}; "
        f"{time.tokens_per_s_per_gpu:,.0f} {tokens}/s per GPU; MFU {time.mfu:.1%} ({time.efficiency_note})",
        time_note(plan, time.step_time_s),
    ]
    name_w = max(len(i.label) for i in time.items)
    lines.append(f"{'item':<{name_w}}  {'seconds':>9}  formula — note")
    lines += [
        f"{i.label:<{name_w}}  {i.seconds:>9.4g}  {i.formula} — {i.note}" for i in time.items if i.seconds or i.hidden_s
    ]
    return lines


def _framework_line(plan: Plan) -> str | None:
    """Which values the plan's framework set, and which the plan changed."""
    if plan.framework == "generic":
        return None
    settings = provenance(plan)
    kept = ", ".join(f"{x.key.split('.')[-1]}={leaf_text(x.value)}" for x, k in settings if k) or "nothing"
    changed = ", ".join(x.key.split(".")[-1] for x, k in settings if not k)
    return f"framework {load_frameworks()[plan.framework].label} set: {kept}" + (
        f"; the plan changed: {changed}" if changed else ""
    )


def frameworks_to_list() -> dict[str, Any]:
    """The framework recipes with every setting's condition and source, for `python -m planner frameworks`."""
    return {
        name: {
            "label": r.label,
            "summary": r.summary,
            "releases": {k: v.isoformat() for k, v in r.releases.items()},
            "settings": [
                {
                    "key": x.key,
                    "value": x.value,
                    "when": dict(x.when),
                    "source": x.source,
                    **{k: d.isoformat() for k, d in (("since", x.since), ("until", x.until)) if d},
                }
                for x in r.settings
            ],
        }
        for name, r in load_frameworks().items()
    }


def frameworks_to_text(width: int = 100) -> str:
    """The framework recipes for a terminal (`python -m planner frameworks`): each recipe's summary, its tagged
    releases and one line per setting with its condition."""
    blocks = []
    for name, r in load_frameworks().items():
        lines = [f"{name} ({r.label})", *textwrap.wrap(r.summary, width, initial_indent="  ", subsequent_indent="  ")]
        if r.releases:
            lines += textwrap.wrap(
                "releases: " + ", ".join(f"{k} ({v})" for k, v in r.releases.items()),
                width,
                initial_indent="  ",
                subsequent_indent="    ",
            )
        lines += [
            f"  {x.key}: {leaf_text(x.value)}" + (f"  [when {x.condition}]" if x.condition else "") for x in r.settings
        ] or ["  (no settings)"]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def frameworks_to_table() -> str:
    """The framework recipes as a Markdown table (the README's), from planner/data/frameworks.yaml."""
    lines = ["| `framework` | what it keeps in which dtype, and where | settings it makes |", "|---|---|---|"]
    for name, r in load_frameworks().items():
        settings = (
            "; ".join(
                f"`{x.key}: {leaf_text(x.value)}`" + (f" when {x.condition}" if x.condition else "") for x in r.settings
            )
            or "none"
        )
        releases = ", ".join(f"{k} ({v})" for k, v in r.releases.items())
        summary = r.summary + (f" Tagged releases: {releases}." if releases else "")
        lines.append(f"| `{name}` ({r.label}) | {summary} | {settings} |")
    return "\n".join(lines) + "\n"


def formats_to_table() -> str:
    """The framework config formats as a Markdown table (the README's): what each reads and writes back exactly,
    and the plan keys it cannot say."""
    lines = [
        "| format | `framework` | plan keys it says (read and written back exactly) | what it cannot say |",
        "|---|---|---|---|",
    ]
    for f in FORMATS.values():
        says = ("read only (no export); reads " if f.write is None else "") + ", ".join(f"`{key}`" for key in f.says)
        lines.append(f"| `{f.name}` ({f.label}) | `{f.framework}` | {says} | {_cannot_say(f.cannot_say)} |")
    return "\n".join(lines) + "\n"


def _cannot_say(reasons: dict[str, str]) -> str:
    """A format's cannot_say for the table: the keys that share a reason together, in order, then the reason."""
    keys: dict[str, list[str]] = {}
    for key, why in reasons.items():
        keys.setdefault(why, []).append(f"`{key}`")
    return "; ".join(f"{', '.join(names)} ({why})" for why, names in keys.items()) or "—"


def file_stem(title: str) -> str:
    """A title as a file name: lower-case words joined by hyphens ("llama-3.1-70b-qlora-on-1-nvidia-h100...")."""
    return "-".join(re.findall(r"[a-z0-9.]+", title.lower()))[:80].strip("-.") or "plan"


def estimate_to_table(est: Estimate, time: StepTime | None = None) -> str:
    """A plain-text report: verdict, the itemized peak, the three totals, the phases of each stage, and the
    step's time (when given)."""
    plan = est.plan
    par = plan.parallelism
    lines = [
        plan.name or plan_title(plan, est.gpu.name),
        *filter(None, [approximate_note(plan.model), context_note(plan)]),
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
        lines.append(
            f"{i.label:<{name_w}}  {format_bytes(i.bytes, 'GiB', 3).removesuffix(' GiB'):>9}  {i.formula} — {i.note}"
        )
    lines.append("")
    for key, value in (
        ("peak_allocated_bytes", est.peak_allocated_bytes),
        ("peak_reserved_bytes", est.peak_reserved_bytes),
        ("device_bytes", est.device_bytes),
    ):
        lines.append(f"{key:<21} {format_bytes(value):>12}  {TOTALS_MEANING[key]}")
    if est.serving is not None:
        lines.append(
            f"{'engine budget':<21} {format_bytes(est.usable_bytes):>12}  gpu_memory_utilization × "
            f"{format_bytes(est.gpu.usable_bytes)} usable on {est.gpu.name}"
        )
        lines.append(
            f"{'KV cache capacity':<21} {est.serving.max_concurrent_sequences:>12,}  sequences of "
            f"{est.plan.workload.inference.context_tokens:,} tokens "
            f"({format_bytes(est.serving.kv_budget_bytes)} at {est.serving.kv_bytes_per_token:,} B/token)"
        )
    else:
        lines.append(
            f"{'usable':<21} {format_bytes(est.usable_bytes):>12}  {est.gpu.name} ({est.gpu.usable_memory_source})"
        )
    if est.host_bytes:
        lines.append(
            f"{'host memory':<21} {format_bytes(est.host_bytes):>12}  per GPU, for what is offloaded, of "
            f"{format_bytes(est.host_limit_bytes or 0)} there"
        )
    lines.append("")
    for s in est.stages:
        head = (
            f"stage {s.index} ({s.layers} layers, {s.micro_batches_in_flight:g} in flight)"
            if par.pipeline > 1
            else "phases"
        )
        phases = ", ".join(f"{ph.name} {format_bytes(ph.allocated_bytes)}" for ph in s.phases)
        lines.append(f"{head}: {phases}")
    lines += engine_lines(est)
    if time is not None:
        lines += ["", *time_to_table(time, plan)]
    return "\n".join(lines) + "\n"


def engine_lines(est: Estimate) -> list[str]:
    """A GRPO server engine's GPU, its own phase: the serving plan's items at one wave ([] without one)."""
    if est.engine is None:
        return []
    rl, eng = est.plan.workload.rl, est.engine
    items = ", ".join(f"{i.label} {format_bytes(i.bytes)}" for i in eng.items if i.bytes)
    return [
        f"engine GPUs: {rl.engine_gpus} ({rl.engine_replicas} replica(s) of TP {rl.tensor_parallel}); one holds "
        f"{format_bytes(eng.device_bytes)} of {format_bytes(eng.usable_bytes)} "
        f"({'fits' if eng.fits else 'does not fit'}): {items}"
    ]


def candidate_to_dict(c: Candidate) -> dict[str, Any]:
    par, tech = c.plan.parallelism, c.plan.techniques
    o = c.offering
    return {
        "gpu": c.gpu.id,
        "gpu_name": c.gpu.name,
        "offering": o.id,
        "provider": o.provider,
        "instance": o.instance,
        "network": o.network,
        "count": c.count,
        **(
            {"training_gpus": c.plan.hardware.count, "engine_gpus": c.plan.workload.rl.engine_gpus}
            if c.plan.workload.objective in RL_OBJECTIVES
            else {}
        ),
        "replicas": c.replicas,
        "paid_gpus": c.paid_gpus,
        "parallelism": {key: getattr(par, key) for key in section_keys("parallelism")},
        "techniques": {"activation_checkpointing": tech.activation_checkpointing, "offload": tech.offload},
        "micro_batch_size": c.plan.workload.micro_batch_size,
        "device_bytes": c.device_bytes,
        "host_bytes": c.host_bytes,
        "usd_per_gpu_hour": c.usd_per_gpu_hour,
        "price": None if c.price is None else {"kind": c.price.kind, "date": c.price.date, "source": c.price.source},
        "usd_per_hour": c.usd_per_hour,
        "job_hours": c.job_hours,
        "job_usd": c.job_usd,
        "meets_deadline": c.meets_deadline,
        "tokens_per_s_per_gpu": c.tokens_per_s_per_gpu,
        **({"ttft_s": c.ttft_s, "tpot_s": c.tpot_s} if c.ttft_s is not None else {}),
        "strategy": c.strategy,
        "why": c.why,
    }


def recommendation_to_dict(rec: Recommendation, top: int | None = None) -> dict[str, Any]:
    """The JSON form of `recommend`: the question, the recommendation with its caveats and ties, the frontier,
    every candidate ranked (the first `top`), and the GPU types without one."""
    o, best = rec.options, rec.best
    return {
        "job_tokens": rec.job_tokens,
        "job_tokens_source": rec.job_tokens_source,
        "deadline_hours": o.deadline_hours,
        "deadline_at": o.deadline_at,
        "model_deadline_hours": rec.model_deadline_hours,
        "price_kind": o.price_kind,
        "time_basis": rec.time_basis,
        "tie_band": rec.tie_band,
        "recommended": None if best is None else {**candidate_to_dict(best), "caveats": rec.caveats(best)},
        "ties": [candidate_to_dict(c) for c in rec.ties()],
        "frontier": [candidate_to_dict(c) for c in rec.frontier()],
        "candidates": [candidate_to_dict(c) for c in rec.candidates[:top]],
        "rejected": [{"gpu": r.gpu.id, "kind": r.kind, "reason": r.reason} for r in rec.rejected],
        "cut_after_s": rec.cut_after_s,
    }


def presets_to_list(presets: dict[str, Preset]) -> list[dict[str, Any]]:
    """The preset table with computed and published parameter counts, for `python -m planner models`."""
    rows = []
    for key, p in presets.items():
        m, counts = p.model, p.model.params
        grouped = m.num_kv_heads < m.num_attention_heads and not m.mla
        features = (
            ([("MQA" if m.num_kv_heads == 1 else "GQA")] if grouped else [])
            + ([f"MoE {m.num_experts}×top-{m.experts_per_token}"] if m.num_experts else [])
            + (["MLA"] if m.mla else [])
            + ([f"window {m.sliding_window:,}"] if m.sliding_window else [])
        )
        rows.append(
            {
                "id": key,
                "name": p.name,
                "hf_id": p.hf_id,
                "params": counts.total,
                "active_params": counts.active,
                "published_params": p.published_params,
                "layers": m.num_layers,
                "hidden_size": m.hidden_size,
                "features": features,
            }
        )
    return rows


def presets_to_table(presets: dict[str, Preset]) -> str:
    lines = [
        f"{'id':<20} {'params':>9} {'active':>9}  {'layers':>6} {'hidden':>6}  features",
        f"{'':<20} {'(B)':>9} {'(B)':>9}",
    ]
    for r in presets_to_list(presets):
        lines.append(
            f"{r['id']:<20} {r['params'] / 1e9:>9.2f} {r['active_params'] / 1e9:>9.2f}  {r['layers']:>6} "
            f"{r['hidden_size']:>6}  {', '.join(r['features']) or 'dense'}"
        )
    return "\n".join(lines) + "\n"


def _money(x: float | None, digits: int = 2) -> str:
    return "no price" if x is None else f"${x:,.{digits}f}"


def _question(rec: Recommendation) -> list[str]:
    """What was asked: the job, the deadline or serving target, the prices, the ranking."""
    o = rec.options
    dated = rec.price_dates
    prices = f"{o.price_kind.replace('_', '-')} prices" + (f" dated {dated[0]} to {dated[1]}" if dated else "")
    if rec.serving:
        targets = ([f"{o.requests_per_s:g} requests/s"] if o.requests_per_s else []) + (
            [f"{o.output_tokens_per_s:,g} output tokens/s"] if o.output_tokens_per_s else []
        )
        goal = " and ".join(targets) or "one replica"
        goal += "".join(
            [f", TTFT ≤ {o.ttft_s:g} s" if o.ttft_s else "", f", TPOT ≤ {o.tpot_s * 1000:g} ms" if o.tpot_s else ""]
        )
    else:
        goal = "no deadline" if o.deadline_hours is None else f"deadline {format_hours(o.deadline_hours)}"
        if rec.model_deadline_hours != o.deadline_hours and rec.model_deadline_hours is not None:
            goal += (
                f" at the slow end of published runs (the time model's job time within "
                f"{format_hours(rec.model_deadline_hours)})"
            )
    return [
        f"job: {rec.job_tokens:,} tokens ({rec.job_tokens_source}); {rec.flops_per_token:.3g} FLOPs/token; "
        f"{rec.time_basis}; {o.headroom:.0%} memory headroom",
        f"{goal}; {prices}; ranked by {'cost per hour' if rec.ranked_by_hour else 'cost of the job'}",
    ]


def _candidate_line(c: Candidate, cents: int) -> str:
    fleet = f"{c.replicas:,} × {c.count}" if c.replicas > 1 else gpus_text(c.plan)
    return (
        f"{c.gpu.id:<18} {c.offering.id:<28} {fleet:>9} {c.paid_gpus:>6,}  {c.device_bytes / 2**30:>7.1f}  "
        f"{_money(c.usd_per_hour):>11}  {format_hours(c.job_hours):>11}  {_money(c.job_usd, cents):>11}  "
        f"{'yes' if c.meets_deadline else 'no':>4}  {c.strategy}"
    )


def _best_lines(rec: Recommendation, best: Candidate, cents: int) -> list[str]:
    per = " per million tokens" if rec.serving else " for the job"
    fleet = f"{best.replicas:,} replicas of {best.count}" if best.replicas > 1 else gpus_text(best.plan)
    head = "recommended" if best.meets_deadline else "nothing meets the deadline; fastest found"
    price = (
        "no price in the catalog"
        if best.usd_per_gpu_hour is None
        else (
            f"${best.usd_per_gpu_hour:,.2f} per GPU-hour"
            + (
                f" ({best.price.kind.replace('_', '-')}, {best.price.date}, {best.price.source})"
                if best.price
                else " (yours)"
            )
        )
    )
    lines = [
        f"{head}: {fleet} × {best.gpu.name} on {best.offering.provider} {best.offering.instance} "
        f"({best.offering.id}), {_money(best.usd_per_hour)}/h, {format_hours(best.job_hours)}, "
        f"{_money(best.job_usd, cents)}{per}",
        f"  {best.why}",
        f"  price: {price}",
    ]
    lines += [f"  caveat: {c}" for c in rec.caveats(best)]
    ties = rec.ties()
    if ties:
        lines.append(
            f"  as good within the time model's error ({rec.tie_band:.0%}, its median error on the speed "
            f"ratio of two GPUs): "
            + "; ".join(f"{c.count:,} × {c.gpu.name} ({c.offering.id}) {_money(c.job_usd, cents)}" for c in ties)
        )
    return lines


def recommendation_to_table(rec: Recommendation, top: int | None = 10) -> str:
    cents = 2 if rec.serving else 0
    lines = _question(rec) + [""]
    if rec.cut_after_s is not None:
        lines[2:2] = [
            f"search cut after {rec.cut_after_s:g} s by its time budget: the best found by then "
            f"({sum(r.kind == 'unsearched' for r in rec.rejected)} GPU types not searched)"
        ]
    if rec.best is None:
        lines.append("no GPU in the catalog fits this plan")
    else:
        lines += _best_lines(rec, rec.best, cents) + [""]
        lines.append(
            f"{'#':>3}  {'GPU':<18} {'offering':<28} {'GPUs':>9} {'paid':>6}  {'GiB/GPU':>7}  {'$/hour':>11}  "
            f"{'time' if not rec.serving else '1M tokens':>11}  {'$ job' if not rec.serving else '$ per M':>11}  "
            f"{'ok':>4}  strategy"
        )
        lines += [f"{i:>3}  {_candidate_line(c, cents)}" for i, c in enumerate(rec.candidates[:top], 1)]
        if top is not None and len(rec.candidates) > top:
            lines.append(f"     … {len(rec.candidates) - top} more (--top N)")
    for kind, head in (
        ("unfit", "no candidate:"),
        ("outranked", "cannot win (a lower bound proves it; --every-offering searches them):"),
        ("unsearched", "not searched (budget):"),
    ):
        lines += (
            ["", head] + [f"  {r.reason}" for r in rec.rejected if r.kind == kind]
            if any(r.kind == kind for r in rec.rejected)
            else []
        )
    return "\n".join(lines) + "\n"


def frontier_to_table(rec: Recommendation) -> str:
    """Each GPU type's cost-time frontier: the cheapest configuration at each job time it can reach."""
    cents = 2 if rec.serving else 0
    lines = [f"{'GPU':<18} {'offering':<28} {'GPUs':>9} {'time':>11}  {'$':>11}  strategy"]
    for best in rec.per_type():
        for c in rec.frontier(best.gpu.id):
            fleet = f"{c.replicas:,} × {c.count}" if c.replicas > 1 else gpus_text(c.plan)
            lines.append(
                f"{c.gpu.id:<18} {c.offering.id:<28} {fleet:>9} {format_hours(c.job_hours):>11}  "
                f"{_money(c.job_usd, cents):>11}  {c.strategy}"
            )
    return "\n".join(lines) + "\n"


def compare_rows(plans: list[Plan], estimates: list[Estimate], times: list[StepTime | None]) -> list[dict[str, Any]]:
    """Plans side by side: what each needs and how fast it runs, then every plan key on which they differ (as
    share links write them); `differs` marks the rows whose values are not all the same."""

    def row(what: str, values: list[Any]) -> dict[str, Any]:
        return {
            "": what,
            **{f"plan {n + 1}": v for n, v in enumerate(values)},
            "differs": len({str(v) for v in values}) > 1,
        }

    rows = [
        row("title", [p.name or plan_title(p, e.gpu.name) for p, e in zip(plans, estimates, strict=True)]),
        row("fits", ["yes" if e.fits else "no" for e in estimates]),
        row("device per GPU", [format_bytes(e.device_bytes) for e in estimates]),
        row("peak allocated", [format_bytes(e.peak_allocated_bytes) for e in estimates]),
        row(
            "seconds per step" if plans[0].workload.task != "inference" else "seconds per batch",
            [f"{t.step_time_s:,.3g}" if t else "–" for t in times],
        ),
        row("tokens/s per GPU", [f"{t.tokens_per_s_per_gpu:,.0f}" if t else "–" for t in times]),
    ]
    queries = [plan_to_query(p) for p in plans]
    keys = list(dict.fromkeys(k for q in queries for k in q))
    values = [flatten(plan_to_dict(p)) for p in plans]  # each plan's own value, given or default
    return rows + [
        row(key_label(LEAVES[k]), [_value_text(v.get(LEAVES[k])) for v in values])
        for k in keys
        if len({q.get(k) for q in queries}) > 1
    ]


def key_label(path: tuple[str, ...]) -> str:
    """A plan key in words: 'Parallelism: zero stage', 'Workload lora: rank', 'Name'."""
    *sections, leaf = path
    words = leaf.replace("_", " ")
    return f"{' '.join(sections).capitalize()}: {words}" if sections else words.capitalize()


def _value_text(value: Any) -> str:
    return "not set" if value is None else leaf_text(value)
