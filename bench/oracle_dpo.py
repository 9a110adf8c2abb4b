"""A TRL DPO step on the oracle: writes bench/data/oracle-dpo.csv (rows that bench/oracle_check.py compares).

Runs in the oracle's own environment (../shared/tools/oracle, its README: torch 2.13 CPU + transformers 5.18) and
uses its fake-CUDA model builder and MemTracker subclass; nothing here is imported by planner/.

    ../shared/tools/oracle/.venv/bin/python bench/oracle_dpo.py [--write]

The step follows huggingface/trl@f2cd577 trl/trainer/dpo_trainer.py `_compute_loss` (loss_type sigmoid, a separate
ref_model, no precompute): one forward of the policy on the 2 × micro_batch sequences (chosen then rejected),
`selective_log_softmax` of the shifted logits (trl/trainer/utils.py, re-written in planner/measure/dpo_step.py
with the same ops: its bf16 branch loops over the rows), the frozen reference's forward and log-probs under
torch.no_grad, -logsigmoid(beta × margin), then the oracle's backward, clip_grad_norm_, AdamW (foreach) step and
zero_grad, two steps. `metrics` adds what `_compute_loss` logs
before it returns (entropy_from_logits in 128-row chunks, the chosen/rejected logits' boolean-mask means).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import oracle_steps
import torch
from oracle_steps import MODEL, measured, traced

from planner.measure.dpo_step import dpo_loss

OUT = Path(__file__).resolve().parent / "data" / "oracle-dpo.csv"
MODES = {"PURE": dict(dtype="bf16", mixed_precision=False), "AMP": dict(dtype="bf16", mixed_precision=True)}
MODES["FP32"] = dict(dtype="fp32", mixed_precision=False)
# LoRA (peft, q and v at rank 16, fp32 adapters under autocast on a bf16 base): the reference is the policy with its
# adapters disabled (TRL with a PEFT model and ref_model None)
MODES["LORA"] = dict(dtype="bf16", mixed_precision=True, task="lora", lora_rank=16, lora_targets=["q_proj", "v_proj"])
CONFIGS = (
    [
        dict(mode="PURE", seq_len=s, micro_batch=b, activation_checkpointing=ac, metrics=m)
        for s, b in ((512, 1), (1024, 2))
        for ac in ("none", "full")
        for m in (False, True)
    ]
    + [
        dict(mode=mode, seq_len=512, micro_batch=1, activation_checkpointing="none", metrics=False)
        for mode in ("AMP", "FP32")
    ]
    + [
        dict(mode="LORA", seq_len=s, micro_batch=b, activation_checkpointing=ac, metrics=True)
        for s, b, ac in ((512, 1, "none"), (1024, 2, "full"))
    ]
)
COLUMNS = [
    "label", "arch", "hidden", "layers", "heads", "kv_heads", "intermediate", "vocab", "tie_embeddings", "dtype",
    "mixed_precision", "attention", "activation_checkpointing", "optimizer", "optimizer_impl", "sgd_momentum",
    "seq_len", "micro_batch", "objective", "loss_type", "reference", "trl_metrics", "n_params", "peak_bytes",
    "peak_phase", "peak_op", "peak_module", "step_peaks_gib", "task", "lora_rank", "lora_targets",
]  # fmt: skip


def whole_half(logits, mask):
    """TRL's chosen_logits[mask.bool()] copies the masked rows; fake tensors cannot take a data-dependent shape, and
    with every completion token masked in, the copy is the whole half: a clone of the same bytes."""
    return logits.reshape(-1, logits.shape[-1]).clone()


def run(c: dict) -> dict:
    c = {**oracle_steps.oracle.DEFAULTS, **MODEL, **MODES[c["mode"]], **c}
    return traced(c, _setup)


def _setup(c: dict):
    model = oracle_steps.oracle.build_model(c, "cuda")
    b, s = c["micro_batch"], c["seq_len"]
    input_ids = torch.randint(0, c["vocab"], (2 * b, s), device="cuda")
    ref_model, reference = _reference(c, model, input_ids)
    completion_mask = torch.ones((2 * b, s), dtype=torch.long, device="cuda")
    step = partial(dpo_loss, model, reference, input_ids, completion_mask, c["metrics"], whole_half)
    return model, (ref_model, input_ids, completion_mask), step


def _reference(c: dict, model, input_ids):
    """(the module MemTracker must know for the reference, the call that runs the reference's forward). Full
    fine-tuning: a frozen copy built with the policy's model_init_kwargs (fp32 weights under AMP), eval, no
    checkpointing (TRL creates it like the policy and prepares it for evaluation); LoRA: the policy with its
    adapters disabled, called through a root module of its own (MemTracker refuses a root module's second forward
    in one step, not a submodule's)."""
    if c.get("task") == "lora":
        wrapper = AdaptersOff(model)
        return wrapper, partial(wrapper, input_ids)
    ref_model = oracle_steps.oracle.build_model({**c, "activation_checkpointing": "none"}, "cuda")
    ref_model.eval().requires_grad_(False)
    return ref_model, partial(ref_model, input_ids=input_ids, use_cache=False)


class AdaptersOff(torch.nn.Module):
    """The LoRA policy's base: its forward with the adapters disabled (peft disable_adapter)."""

    def __init__(self, policy):
        super().__init__()
        self.policy = policy

    def forward(self, input_ids):
        with self.policy.disable_adapter():
            return self.policy(input_ids=input_ids, use_cache=False)


def row(res: dict) -> dict:
    c = res["c"]
    ac, s, b = c["activation_checkpointing"], c["seq_len"], c["micro_batch"]
    label = f"T/{c['mode']}/dpo/sdpa/ac{ac}/s{s}b{b}/adamw-foreach" + ("/trl-metrics" if c["metrics"] else "")
    lora = c.get("task") == "lora"
    return {
        "label": label, **{k: c[k] for k in COLUMNS[1:18] if k in c},
        "objective": "preference", "loss_type": "dpo", "reference": "adapters_disabled" if lora else "separate",
        "trl_metrics": c["metrics"], "task": "lora" if lora else "train",
        "lora_rank": c["lora_rank"] if lora else "", "lora_targets": " ".join(c["lora_targets"]) if lora else "",
        **measured(res),
    }  # fmt: skip


if __name__ == "__main__":
    oracle_steps.main(CONFIGS, run, row, OUT, COLUMNS)
