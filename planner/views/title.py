"""A plan's title, for a heading when it has no name (apart from export.py, so the app's first verdict does not
wait for the framework readers that export imports)."""

from __future__ import annotations

from planner.plan.config import Plan
from planner.plan.models import presets

_TASK_WORDS = {"pretrain": "pre-training", "finetune": "full fine-tune", "lora": "LoRA", "qlora": "QLoRA"}


def plan_title(plan: Plan, gpu_name: str) -> str:
    """What a plan is, for a heading when it has no name: model, task and hardware, e.g. "Llama 3.1 70B QLoRA on
    1 × NVIDIA H100 SXM 80GB"."""
    m = plan.model
    model = (
        presets()[m.preset].name
        if m.preset
        else f"~{m.approx_params / 1e9:,.3g}B-parameter model"
        if m.approx_params
        else f"custom {m.params.total / 1e9:,.3g}B model"
    )
    task = _TASK_WORDS.get(plan.workload.task) or (
        "serving" if plan.workload.inference.gpu_memory_utilization is not None else "generation"
    )
    return f"{model} {task} on {plan.hardware.count} × {gpu_name}"
