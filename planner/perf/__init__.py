"""How long a step, a job and a served batch take, item by item: the planner's time model.

- `flops.py`: FLOPs per token (model FLOPs, and what recomputation adds).
- `rates.py`: what a GPU sustains (the catalog's measured matmul fractions, HBM, links) and the α-β cost of
  a collective over a group of ranks.
- `work.py`: one layer's matmuls (roofline), attention and elementwise bytes.
- `training.py`: a training step on the most loaded GPU: compute, elementwise, recomputation, exposed
  tensor/context/expert/pipeline/data-parallel communication, bubble, optimizer, offload.
- `serving.py`: one batch of generation: prefill, decode, tensor-parallel all-reduces.
- `result.py`: the step and its items, each with formula and note.

A user who knows their cluster's efficiency can override the model with one model-FLOPs utilization
(`job_hours(..., mfu=0.45)`, CLI `--mfu`): job time is then model FLOPs at that fraction of the dense peak.
"""

from __future__ import annotations

from planner.catalog import Gpu
from planner.perf.flops import flops_per_token, forward_flops_per_token, model_flops_per_token
from planner.perf.rates import no_tensor_cores, rates, supported_rates
from planner.perf.result import StepTime, TimeItem
from planner.perf.serving import Latency, Throughput, latency, serving_time, throughput
from planner.perf.training import Rollout, elementwise_floor_hours, rollout_time, step_time
from planner.plan.config import ADAPTER_TASKS, Plan

__all__ = [
    "Latency",
    "Rollout",
    "StepTime",
    "Throughput",
    "elementwise_floor_hours",
    "latency",
    "TimeItem",
    "compute_floor_hours",
    "flops_per_token",
    "forward_flops_per_token",
    "job_hours",
    "job_time",
    "model_flops_per_token",
    "peak_flops",
    "plan_time",
    "rollout_time",
    "serving_time",
    "step_time",
    "throughput",
    "unsupported_compute",
]


def peak_flops(gpu: Gpu, dtype: str) -> float | None:
    """Dense peak FLOP/s of the GPU's matmuls in `dtype` (None: no such tensor cores)."""
    r = rates(gpu, dtype)
    return None if r is None else r.peak_flops


def unsupported_compute(plan: Plan, gpu: Gpu) -> str | None:
    """Why `gpu` cannot run the plan's matmuls as written (no tensor cores for its compute dtype), else None."""
    dtype = plan.precision.compute
    if peak_flops(gpu, dtype) is not None:
        return None
    runs = [d for d in ("bf16", "fp16", "fp8") if d != dtype and peak_flops(gpu, d) is not None]
    return f"{gpu.name}: no {dtype} tensor cores; plan another compute dtype" + (
        f" ({' or '.join(runs)} runs there)" if runs else ""
    )


def plan_time(plan: Plan, gpu: Gpu) -> StepTime | None:
    """A training step or a served batch, whichever the plan's task is."""
    return serving_time(plan, gpu) if plan.workload.task == "inference" else step_time(plan, gpu)


def _override_hours(plan: Plan, gpu: Gpu, tokens: int, count: int, mfu: float) -> float:
    """Hours under a user's MFU: the model FLOPs of `tokens` at that fraction of `count` GPUs' dense peak."""
    peak = supported_rates(gpu, plan.precision.compute).peak_flops
    return tokens * model_flops_per_token(plan) / (count * peak * mfu) / 3600


def job_time(plan: Plan, gpu: Gpu, tokens: int, mfu: float | None = None) -> tuple[float, float]:
    """(wall-clock hours to train on `tokens` tokens, of which compute and memory work): steps × the modelled
    step, or, with `mfu`, model FLOPs at that fraction of the dense peak of the compute dtype (all work)."""
    if mfu is not None:
        hours = _override_hours(plan, gpu, tokens, plan.hardware.count, mfu)
        return hours, hours
    step = step_time(plan, gpu)
    if step is None:
        raise no_tensor_cores(gpu, plan.precision.compute)
    steps = tokens / (plan.workload.global_batch_size * plan.workload.sequence_length)
    return steps * step.step_time_s / 3600, steps * step.work_s / 3600


def job_hours(plan: Plan, gpu: Gpu, tokens: int, mfu: float | None = None) -> float:
    """Wall-clock hours to train on `tokens` tokens (see `job_time`)."""
    return job_time(plan, gpu, tokens, mfu)[0]


def compute_floor_hours(
    plan: Plan, gpu: Gpu, tokens: int, count: int, mfu: float | None = None, offload: str = "none"
) -> float:
    """A lower bound of the job's hours on `count` GPUs, for any strategy: forward and backward FLOPs (the backward
    of frozen weights is its input gradient alone) at the achievable matmul rate, and with `offload` the
    gradients and weights that must cross PCIe once per step (each GPU's share of them at best); with `mfu`,
    the override's job time, which no strategy changes."""
    if mfu is not None:
        return _override_hours(plan, gpu, tokens, count, mfu)
    r = supported_rates(gpu, plan.precision.compute)
    passes = 2 if plan.workload.task in ADAPTER_TASKS else 3
    compute = tokens * passes * forward_flops_per_token(plan) / (count * r.matmul_flops)
    if offload == "none":
        return compute / 3600
    steps = tokens / (plan.workload.global_batch_size * plan.workload.sequence_length)
    return (compute + steps * 8 * plan.model.params.total / count / r.pcie_bytes) / 3600
