"""A TRL GRPO policy step on the oracle: writes bench/data/oracle-grpo.csv (rows that bench/oracle_check.py compares).

Runs in the oracle's own environment (../shared/tools/oracle, its README: torch 2.13 CPU + transformers 5.18) and
uses its fake-CUDA model builder and MemTracker subclass; nothing here is imported by planner/.

    ../shared/tools/oracle/.venv/bin/python bench/oracle_grpo.py [--write]

The step follows huggingface/trl@f2cd577 trl/trainer/grpo_trainer.py `_compute_loss` with its defaults (beta 0.0:
no reference; loss_type dapo; epsilon 0.2; temperature 1.0; num_iterations 1, so the old log-probs are the new
ones detached): `_get_per_token_logps_and_entropies` runs the policy on prompt + completion with `logits_to_keep`
= completion + 1, drops the last position, keeps the completion's, divides them by the temperature in place,
takes `selective_log_softmax` (planner/measure/dpo_step.py's rewrite) and, under no_grad, `entropy_from_logits`;
then the clipped surrogate over the completion tokens. The oracle's backward, clip_grad_norm_, AdamW (foreach)
step and zero_grad follow, two steps. The rollout engine runs elsewhere (the plan's `rl.engine server`).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import oracle_steps
import torch
from oracle_steps import MODEL, measured, traced

from planner.measure.dpo_step import chunked_entropy, label_logps

OUT = Path(__file__).resolve().parent / "data" / "oracle-grpo.csv"
MODES = {"PURE": dict(dtype="bf16", mixed_precision=False), "AMP": dict(dtype="bf16", mixed_precision=True)}
CONFIGS = [
    dict(mode=mode, prompt=p, completion=k, micro_batch=b, activation_checkpointing=ac)
    for mode in ("PURE", "AMP")
    for p, k, b in ((256, 256, 4), (128, 896, 2))
    for ac in ("none", "full")
]
COLUMNS = [
    "label", "arch", "hidden", "layers", "heads", "kv_heads", "intermediate", "vocab", "tie_embeddings", "dtype",
    "mixed_precision", "attention", "activation_checkpointing", "optimizer", "optimizer_impl", "prompt",
    "completion", "micro_batch", "n_params", "peak_bytes", "peak_phase", "peak_op", "peak_module", "step_peaks_gib",
]  # fmt: skip
EPSILON = 0.2  # GRPOConfig epsilon default
TEMPERATURE = 1.0  # GRPOConfig temperature default


def grpo_loss(model, input_ids, completion_mask, advantages, logits_to_keep):
    """trl@f2cd577 GRPOTrainer._compute_loss (beta 0, loss_type dapo, num_iterations 1)."""
    outputs = model(input_ids=input_ids, logits_to_keep=logits_to_keep + 1, use_cache=False)
    logits = outputs.logits
    logits = logits[:, :-1, :]
    logits = logits[:, -logits_to_keep:, :]
    logits.div_(TEMPERATURE)
    completion_ids = input_ids[:, -logits_to_keep:]
    per_token_logps = label_logps(logits, completion_ids)
    with torch.no_grad():
        entropy_sum = (chunked_entropy(logits) * completion_mask).sum()
    del outputs, logits
    old = per_token_logps.detach()
    coef_1 = torch.exp(per_token_logps - old)
    coef_2 = torch.clamp(coef_1, 1 - EPSILON, 1 + EPSILON)
    per_token_loss = -torch.min(coef_1 * advantages.unsqueeze(1), coef_2 * advantages.unsqueeze(1))
    return (per_token_loss * completion_mask).sum() / completion_mask.sum().clamp(min=1.0) + 0 * entropy_sum


def run(c: dict) -> dict:
    c = {**oracle_steps.oracle.DEFAULTS, **MODEL, **MODES[c["mode"]], **c, "seq_len": c["prompt"] + c["completion"]}
    return traced(c, _setup)


def _setup(c: dict):
    model = oracle_steps.oracle.build_model(c, "cuda")
    b, k = c["micro_batch"], c["completion"]
    input_ids = torch.randint(0, c["vocab"], (b, c["seq_len"]), device="cuda")
    completion_mask = torch.ones((b, k), dtype=torch.float32, device="cuda")
    advantages = torch.ones((b,), dtype=torch.float32, device="cuda")
    step = partial(grpo_loss, model, input_ids, completion_mask, advantages, k)
    return model, (input_ids, completion_mask, advantages), step


def row(res: dict) -> dict:
    c = res["c"]
    ac, p, k, b = c["activation_checkpointing"], c["prompt"], c["completion"], c["micro_batch"]
    label = f"T/{c['mode']}/grpo/sdpa/ac{ac}/p{p}c{k}b{b}/adamw-foreach"
    return {
        "label": label, **{key: c[key] for key in COLUMNS[1:18] if key in c},
        **measured(res),
    }  # fmt: skip


if __name__ == "__main__":
    oracle_steps.main(CONFIGS, run, row, OUT, COLUMNS)
