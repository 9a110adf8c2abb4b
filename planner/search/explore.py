"""Exploring around a plan: how memory grows with sequence length and batch, and what each technique saves."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from planner.accuracy import time_accuracy
from planner.catalog import Gpu
from planner.errors import PlanError
from planner.memory import Estimate, Serving, estimate
from planner.memory.rollout import rollout_wave
from planner.perf import plan_time
from planner.plan.config import RL_OBJECTIVES, Plan, Techniques
from planner.plan.dtypes import bits
from planner.search.recommend import DEFAULT_HEADROOM, max_micro_batch, max_sequence_length
from planner.units import counted, format_bytes

SweepKey = Literal["sequence_length", "micro_batch_size", "batch_size", "context_tokens"]


@dataclass(frozen=True, kw_only=True)
class Point:
    value: int
    estimate: Estimate


def _with(plan: Plan, key: SweepKey, value: int) -> Plan:
    wl = plan.workload
    if key == "sequence_length":
        return replace(plan, workload=replace(wl, sequence_length=value))
    if key == "micro_batch_size":
        per_step = plan.micro_batches_per_step
        return replace(
            plan,
            workload=replace(wl, micro_batch_size=value, global_batch_size=value * plan.parallelism.data * per_step),
        )
    inf = wl.inference
    if key == "batch_size":
        return replace(plan, workload=replace(wl, inference=replace(inf, batch_size=value)))
    prompt = max(1, value - inf.output_tokens)
    return replace(
        plan, workload=replace(wl, inference=replace(inf, prompt_tokens=prompt, output_tokens=value - prompt))
    )


def sweep_keys(plan: Plan) -> tuple[SweepKey, SweepKey]:
    """The two axes worth sweeping for the plan's task: length and batch."""
    if plan.workload.task == "inference":
        return "context_tokens", "batch_size"
    return "sequence_length", "micro_batch_size"


def current_value(plan: Plan, key: SweepKey) -> int:
    wl = plan.workload
    return {
        "sequence_length": wl.sequence_length,
        "micro_batch_size": wl.micro_batch_size,
        "batch_size": wl.inference.batch_size,
        "context_tokens": wl.inference.context_tokens,
    }[key]


def sweep_values(plan: Plan, key: SweepKey, points: int = 9) -> list[int]:
    """Powers of two around the plan's current value (which is always included), in steps the plan can split."""
    now = current_value(plan, key)
    par = plan.parallelism
    step = par.context * (par.tensor if par.sequence_parallel else 1) if key == "sequence_length" else 1
    low = max(step, 1 << max(0, now.bit_length() - 1 - points // 2))
    values = {now}
    value = low
    while len(values) < points and value <= 16_777_216:
        values.add(max(step, value // step * step))
        value *= 2
    return sorted(values)


def sweep(plan: Plan, catalog: Mapping[str, Gpu], key: SweepKey, values: list[int] | None = None) -> list[Point]:
    """The plan's estimate at each value of `key` (values the plan cannot take are skipped)."""
    points = []
    for value in values or sweep_values(plan, key):
        try:
            varied = _with(plan, key, value)
        except PlanError:
            continue
        points.append(Point(value=value, estimate=estimate(varied, catalog, detail=False)))
    return points


@dataclass(frozen=True, kw_only=True)
class Saving:
    technique: str  # what changes, e.g. "full activation checkpointing"
    plan: Plan
    device_bytes: int
    saved_bytes: int  # device bytes of the current plan minus this one (negative: costs memory)


def _variants(plan: Plan) -> list[tuple[str, dict]]:
    tech, par, prec, wl = plan.techniques, plan.parallelism, plan.precision, plan.workload
    out: list[tuple[str, dict]] = []
    if wl.task == "inference":
        if prec.kv_cache in ("bf16", "fp16", "fp32"):
            out.append(("fp8 KV cache", {"precision": {"kv_cache": "fp8"}}))
        for weights in ("int8", "int4"):
            if prec.weights not in ("int4", "nf4") and prec.weights != weights:
                out.append((f"{weights} weights", {"precision": {"weights": weights}}))
        return out
    if tech.activation_checkpointing != "full":
        out.append(("full activation checkpointing", {"techniques": {"activation_checkpointing": "full"}}))
    if tech.attention == "eager":
        out.append(("flash attention", {"techniques": {"attention": "flash"}}))
    if par.data * par.context > 1:
        for stage in range(par.zero_stage + 1, 4):
            out.append((f"ZeRO stage {stage}", {"parallelism": {"zero_stage": stage}}))
    if tech.offload == "none":
        out.append(("offload the optimizer to CPU", {"techniques": {"offload": "optimizer"}}))
    if wl.task == "lora":
        out.append(("4-bit base (QLoRA)", {"workload": {"task": "qlora"}, "precision": {"weights": "nf4"}}))
    if prec.optimizer == "adamw":
        out.append(("8-bit AdamW", {"precision": {"optimizer": "adamw_8bit"}}))
        if prec.optimizer_impl == "foreach":
            out.append(("fused AdamW", {"precision": {"optimizer_impl": "fused"}}))
    if wl.micro_batch_size > 1:
        out.append(("micro-batch 1 (same global batch)", {"workload": {"micro_batch_size": 1}}))
    return out


def _apply(plan: Plan, change: dict[str, dict]) -> Plan:
    """The plan with a variant's keys, every section at once: a half-changed plan may be invalid (qlora with
    bf16 weights; more GPUs without the data degree)."""
    return replace(plan, **{section: replace(getattr(plan, section), **values) for section, values in change.items()})


def savings(plan: Plan, catalog: Mapping[str, Gpu]) -> list[Saving]:
    """What each technique the plan does not use yet would change, largest saving first."""
    now = estimate(plan, catalog, detail=False).device_bytes
    out = []
    for label, change in _variants(plan):
        try:
            varied = _apply(plan, change)
            device = estimate(varied, catalog, detail=False).device_bytes
        except PlanError:
            continue
        out.append(Saving(technique=label, plan=varied, device_bytes=device, saved_bytes=now - device))
    return sorted(out, key=lambda s: (-s.saved_bytes, s.technique))


def idle_settings(plan: Plan, catalog: Mapping[str, Gpu]) -> list[str]:
    """The plan's memory techniques that change no memory here: each non-default `techniques` key whose default
    gives the same device total and peak (selective checkpointing under flash attention, say), one line each."""
    now = estimate(plan, catalog, detail=False)
    default, out = Techniques(), []
    for f in fields(Techniques):
        value, plain = getattr(plan.techniques, f.name), getattr(default, f.name)
        if value == plain or isinstance(value, (int, float)) and not isinstance(value, bool):
            continue  # a count (checkpoint_every, loss_chunks) only tunes its technique
        try:
            other = estimate(
                replace(plan, techniques=replace(plan.techniques, **{f.name: plain})), catalog, detail=False
            )
        except PlanError:
            continue
        if (other.device_bytes, other.peak_allocated_bytes) == (now.device_bytes, now.peak_allocated_bytes):
            why = _IDLE_WHY.get((f.name, value, plan.techniques.attention), "")
            out.append(
                f"techniques.{f.name}: {value} changes no memory in this plan (the same "
                f"{format_bytes(now.device_bytes)} as {plain}){why}"
            )
    return out


# why a setting can change nothing, where the plan's other settings explain it
_IDLE_WHY = {
    (
        "activation_checkpointing",
        "selective",
        "flash",
    ): ": Megatron's selective recomputation drops the attention scores, which flash attention never keeps"
}


@dataclass(frozen=True, kw_only=True)
class Fix:
    """One change that makes a plan fit its GPU, what it saves and what it costs in time."""

    change: str
    plan: Plan
    device_bytes: int
    saved_bytes: int
    time_factor: float | None  # seconds per token with the change over without (None: no time model here)
    # GPU-hours per token with the change over without: what the job costs, the time factor times the GPUs'
    gpu_hours_factor: float | None
    # a serving engine's: the KV-cache budget with the change and vLLM's maximum concurrency at the plan's (new)
    # max_model_len (None for training)
    kv_budget_bytes: int | None = None
    concurrency: float | None = None

    @property
    def text(self) -> str:
        """One line: what the change gives and what it costs (serving: the KV budget and the concurrency)."""
        gpus = self.plan.hardware.count
        cost = (
            "time not modelled"
            if self.gpu_hours_factor is None
            else (
                f"{self.gpu_hours_factor:.2f}× the GPU-hours per token ({counted(gpus, 'GPU')} × "
                f"{self.time_factor:.2f}× the time)"
            )
        )
        if self.concurrency is None:
            return (
                f"{self.change}: saves {format_bytes(self.saved_bytes)}, needs "
                f"{format_bytes(self.device_bytes)}; {cost}"
            )
        ctx = self.plan.workload.inference.context_tokens
        return (
            f"{self.change}: KV cache {format_bytes(self.kv_budget_bytes or 0)} per GPU, "
            f"{self.concurrency:.2f}x concurrency at {ctx:,} tokens per request; {cost}"
        )


def _seconds_per_token(plan: Plan, gpu: Gpu) -> float | None:
    t = plan_time(plan, gpu)
    return None if t is None else t.step_time_s / t.tokens_per_step


def _more_gpus(plan: Plan) -> list[tuple[str, dict]]:
    """Twice, four and eight times the data-parallel GPUs, sharded with ZeRO-3 (training; the batch kept)."""
    par, count = plan.parallelism, plan.hardware.count
    if plan.workload.task == "inference":
        return []
    return [
        (
            f"{count * k} GPUs (data parallel {par.data * k}, ZeRO-3)",
            {"parallelism": {"data": par.data * k, "zero_stage": 3}, "hardware": {"count": count * k}},
        )
        for k in (2, 4, 8)
    ]


# a serving engine's memory fraction is a fraction of the device: below 1 (SGLang's mem_fraction_static must be;
# vLLM's gpu_memory_utilization may be 1.0, vllm/config/cache.py, but the engine's claim must fit what is free)
FRACTION_STEP, MAX_FRACTION = 0.01, 0.99


def _serving_variants(plan: Plan, serving: Serving) -> list[tuple[str, dict]]:
    """A serving engine's single changes: the replica split tensor-parallel over 2, 4 and 8 times its GPUs (the same
    GPU type), the engine's memory fraction raised (each step up to MAX_FRACTION; make_it_fit keeps the smallest
    that fits), max_model_len cut to the longest the batch's KV cache holds, then the generation variants (fp8 KV
    cache, quantized weights)."""
    par, count, inf = plan.parallelism, plan.hardware.count, plan.workload.inference
    out: list[tuple[str, dict[str, Any]]] = [
        (
            f"tensor parallel {par.tensor * k} ({count * k} GPUs)",
            {"parallelism": {"tensor": par.tensor * k}, "hardware": {"count": count * k}},
        )
        for k in (2, 4, 8)
    ]
    name = "mem_fraction_static" if inf.fraction_scope == "static" else "gpu_memory_utilization"
    steps = int(round((MAX_FRACTION - inf.engine_fraction) / FRACTION_STEP))
    out += [
        (
            f"{name} {u:.2f} (from {inf.engine_fraction:.2f})",
            {"workload": {"inference": replace(inf, gpu_memory_utilization=u)}},
        )
        for u in (round(MAX_FRACTION - i * FRACTION_STEP, 2) for i in reversed(range(steps)))
    ]
    ctx = serving.max_context_tokens
    if inf.output_tokens < ctx < inf.context_tokens:
        out.append(
            (
                f"max_model_len {ctx:,} (from {inf.context_tokens:,}; prompt {ctx - inf.output_tokens:,})",
                {"workload": {"inference": replace(inf, prompt_tokens=ctx - inf.output_tokens)}},
            )
        )
    return out + _variants(plan)


# a colocated rollout engine's memory fraction is tried lower in steps of this much of the GPU, down to the smallest
# workload.rl accepts (planner/plan/config.py Rl); make_it_fit keeps the largest that fits (the fewest rollout waves)
ENGINE_FRACTION_STEP, MIN_ENGINE_FRACTION = 0.05, 0.05
# the fix labels that try one fraction in steps: only the first that fits is kept
_FRACTION_KEYS = ("gpu_memory_utilization", "mem_fraction_static", "rollout gpu_memory_utilization")


def _engine_variants(plan: Plan, gpu: Gpu) -> list[tuple[str, dict]]:
    """A colocated GRPO/PPO engine's single changes: its memory fraction lowered (each step that still holds one
    completion beside its weights, largest first), sleep level 2 (vLLM frees its weights and KV cache: TRL
    vllm_enable_sleep_mode), the policy's states offloaded during the rollout (verl param_offload and
    optimizer_offload)."""
    wl, out = plan.workload, list[tuple[str, dict[str, Any]]]()
    rl = wl.rl
    if wl.objective not in RL_OBJECTIVES or rl.engine != "colocate":
        return []
    steps = int(round((rl.gpu_memory_utilization - MIN_ENGINE_FRACTION) / ENGINE_FRACTION_STEP))
    for u in (round(rl.gpu_memory_utilization - (i + 1) * ENGINE_FRACTION_STEP, 2) for i in range(steps)):
        lower = replace(rl, gpu_memory_utilization=u)
        _, waves, held = rollout_wave(plan, gpu, lower)
        if held >= 1:
            label = (
                f"rollout gpu_memory_utilization {u:.2f} (from {rl.gpu_memory_utilization:.2f}; the engine's KV cache "
                f"holds {counted(held, 'completion')}, the rollout runs in {counted(waves, 'wave')})"
            )
            out.append((label, {"workload": {"rl": lower}}))
    if rl.sleep_level < 2:
        out.append(
            (
                f"vLLM sleep level 2 (from {rl.sleep_level}: the engine frees its weights and KV cache while the "
                "policy trains)",
                {"workload": {"rl": replace(rl, sleep_level=2)}},
            )
        )
    if not rl.offload_during_rollout:
        out.append(
            (
                "offload the policy's parameters and optimizer states to CPU during the rollout",
                {"workload": {"rl": replace(rl, offload_during_rollout=True)}},
            )
        )
    return out


def _objective_variants(plan: Plan) -> list[tuple[str, dict]]:
    """A post-training objective's single changes: PPO's value model offloaded (verl critic param_offload and
    optimizer_offload) and its frozen models' weights (OpenRLHF --ds.ref_reward_offload), a separate preference
    reference replaced by log-probs precomputed before training (TRL precompute_ref_log_probs: a different run), the
    distillation teacher quantized to int8 or nf4 (where its weights are wider)."""
    wl, out = plan.workload, list[tuple[str, dict[str, Any]]]()
    if wl.objective == "ppo":
        if not wl.ppo.critic_offload:
            out.append(
                (
                    "offload the value model's parameters and optimizer states to CPU outside its passes",
                    {"workload": {"ppo": replace(wl.ppo, critic_offload=True)}},
                )
            )
        if not wl.ppo.frozen_offload and (wl.rl.beta > 0 or wl.ppo.reward == "model"):
            out.append(
                (
                    "offload the reference and reward model weights to CPU (one layer on the GPU at a time)",
                    {"workload": {"ppo": replace(wl.ppo, frozen_offload=True)}},
                )
            )
    if wl.objective == "preference" and wl.preference.reference == "separate":
        out.append(
            (
                "precomputed reference log-probs (TRL precompute_ref_log_probs: a different run, the reference "
                "scores the dataset in a pass before training and is not on the GPU during it)",
                {"workload": {"preference": replace(wl.preference, reference="precomputed")}},
            )
        )
    if wl.objective == "distillation":
        teacher = wl.distillation.teacher_weights or plan.precision.activation_dtype
        for w in ("int8", "nf4"):
            if bits(w) < bits(teacher):
                out.append(
                    (
                        f"{w} teacher weights (from {teacher})",
                        {"workload": {"distillation": replace(wl.distillation, teacher_weights=w)}},
                    )
                )
    return out


def make_it_fit(plan: Plan, catalog: Mapping[str, Gpu]) -> list[Fix]:
    """The single changes (a technique, the micro-batch with accumulation, more GPUs; a colocated rollout engine's
    and a post-training objective's, see _engine_variants and _objective_variants; a serving engine's, see
    _serving_variants) after which the plan fits its GPU without the allocator releasing its cache, cheapest
    first: fewest GPU-hours per token (what the job costs: more GPUs that shorten it pay for each of theirs), the
    fewest GPUs among those that tie, then least time, then most memory saved. A serving fix says its KV-cache
    budget and concurrency, which tell changes of the same memory apart."""
    gpu, now = catalog[plan.hardware.gpu], estimate(plan, catalog, detail=False)
    base = _seconds_per_token(plan, gpu)
    variants = (
        _serving_variants(plan, now.serving)
        if now.serving is not None
        else _engine_variants(plan, gpu) + _objective_variants(plan) + _variants(plan) + _more_gpus(plan)
    )
    fixes: list[Fix] = []
    for label, change in variants:
        fraction = next((k for k in _FRACTION_KEYS if label.startswith(k)), None)
        if fraction and any(f.change.startswith(fraction) for f in fixes):
            continue  # a smaller change of the fraction already fits
        try:
            varied = _apply(plan, change)
            est = estimate(varied, catalog, detail=False)
        except PlanError:
            continue
        if not est.fits or est.cache_flushed:
            continue
        after = _seconds_per_token(varied, gpu)
        factor = after / base if base and after else None
        s = est.serving
        fixes.append(
            Fix(
                change=label,
                plan=varied,
                device_bytes=est.device_bytes,
                saved_bytes=now.device_bytes - est.device_bytes,
                time_factor=factor,
                gpu_hours_factor=None if factor is None else factor * varied.hardware.count / plan.hardware.count,
                kv_budget_bytes=None if s is None else s.kv_budget_bytes,
                concurrency=None if s is None else s.max_concurrency,
            )
        )
    return sorted(fixes, key=_cost_order(fixes))


def _cost_order(fixes: list[Fix]):
    """Fixes within the time model's error of the fewest GPU-hours cost the same (its median error on the ratio of
    two predicted speeds, planner/accuracy.py, as the recommender's ties): the fewest GPUs among them first, the one
    needing none added before more GPUs that finish sooner for about as many GPU-hours; then by GPU-hours."""
    unknown = float("inf")
    cheapest = min((f.gpu_hours_factor for f in fixes if f.gpu_hours_factor), default=unknown)
    band = cheapest * (1 + time_accuracy().pair_median_pct / 100)

    def key(f: Fix) -> tuple:
        tied = (f.gpu_hours_factor or unknown) <= band
        return (
            not tied,
            f.plan.hardware.count if tied else 0,
            f.gpu_hours_factor or unknown,
            f.time_factor or unknown,
            -f.saved_bytes,
            f.change,
        )

    return key


def room(plan: Plan, catalog: Mapping[str, Gpu]) -> str | None:
    """What a training plan's free memory buys on its GPUs: the largest micro-batch and the longest sequence
    that still fit with the recommender's headroom (None for inference, or when the plan does not fit)."""
    if plan.workload.task == "inference" or not estimate(plan, catalog, detail=False).fits:
        return None
    mb, seq, wl = max_micro_batch(plan, catalog), max_sequence_length(plan, catalog), plan.workload
    grow = []
    if mb and mb > wl.micro_batch_size:
        grow.append(f"micro-batch up to {mb:,}")
    if seq and seq > wl.sequence_length:
        grow.append(f"sequences up to {seq:,} tokens")
    return (f"The free memory buys {' or '.join(grow)} ({DEFAULT_HEADROOM:.0%} kept free).") if grow else None
