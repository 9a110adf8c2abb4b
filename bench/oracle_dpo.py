"""A TRL DPO step on the oracle: writes bench/data/oracle-dpo.csv (rows that bench/oracle_check.py compares).

Runs in the oracle's own environment (../shared/tools/oracle, its README: torch 2.13 CPU + transformers 5.18) and
uses its fake-CUDA model builder and MemTracker subclass; nothing here is imported by planner/.

    ../shared/tools/oracle/.venv/bin/python bench/oracle_dpo.py [--write]

The step follows huggingface/trl@f2cd577 trl/trainer/dpo_trainer.py `_compute_loss` (loss_type sigmoid, a separate
ref_model, no precompute): one forward of the policy on the 2 × micro_batch sequences (chosen then rejected),
`selective_log_softmax` of the shifted logits (trl/trainer/utils.py, re-written in planner/measure/logps.py
with the same ops: its bf16 branch loops over the rows), the frozen reference's forward and log-probs under
torch.no_grad, -logsigmoid(beta × margin), then the oracle's backward, clip_grad_norm_, AdamW (foreach) step and
zero_grad, two steps. `metrics` adds what `_compute_loss` logs
before it returns (entropy_from_logits in 128-row chunks, the chosen/rejected logits' boolean-mask means).
"""

from __future__ import annotations

import csv
import gc
import json
import sys
from pathlib import Path

ORACLE = Path(__file__).resolve().parents[2] / "shared" / "tools" / "oracle"
sys.path.insert(0, str(ORACLE))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # planner.measure.logps needs torch only

import fakecuda  # noqa: E402  (the oracle's, from ORACLE)
import oracle  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

from planner.measure.logps import label_logps  # noqa: E402

OUT = Path(__file__).resolve().parent / "data" / "oracle-dpo.csv"
MODEL = dict(arch="llama", hidden=512, layers=4, heads=8, kv_heads=2, intermediate=1536, vocab=32000)  # oracle "T"
MODES = {"PURE": dict(dtype="bf16", mixed_precision=False), "AMP": dict(dtype="bf16", mixed_precision=True)}
MODES["FP32"] = dict(dtype="fp32", mixed_precision=False)
CONFIGS = [
    dict(mode="PURE", seq_len=s, micro_batch=b, activation_checkpointing=ac, metrics=m)
    for s, b in ((512, 1), (1024, 2))
    for ac in ("none", "full")
    for m in (False, True)
] + [
    dict(mode=mode, seq_len=512, micro_batch=1, activation_checkpointing="none", metrics=False)
    for mode in ("AMP", "FP32")
]
COLUMNS = [
    "label", "arch", "hidden", "layers", "heads", "kv_heads", "intermediate", "vocab", "tie_embeddings", "dtype",
    "mixed_precision", "attention", "activation_checkpointing", "optimizer", "optimizer_impl", "sgd_momentum",
    "seq_len", "micro_batch", "objective", "loss_type", "reference", "trl_metrics", "n_params", "peak_bytes",
    "peak_phase", "peak_op", "peak_module", "step_peaks_gib",
]  # fmt: skip
BETA = 0.1  # TRL DPOConfig beta default


def chunked_entropy(logits, rows=128):
    """Each position's entropy, `rows` positions at a time (TRL entropy_from_logits, the metric _compute_loss logs)."""
    flat = logits.reshape(-1, logits.shape[-1])
    parts = []
    for chunk in flat.split(rows, dim=0):
        chunk_logps = F.log_softmax(chunk, dim=-1)
        parts.append(-(torch.exp(chunk_logps) * chunk_logps).sum(-1))
    return torch.cat(parts).reshape(logits.shape[:-1])


def compute_loss(model, ref_model, input_ids, completion_mask, metrics):
    """trl@f2cd577 DPOTrainer._compute_loss, loss_type sigmoid, f_divergence reverse_kl, ld_alpha None."""
    outputs = model(input_ids=input_ids, use_cache=False)
    shift_logits = outputs.logits[..., :-1, :]
    shift_labels = input_ids[..., 1:]
    shift_completion_mask = completion_mask[..., 1:]
    per_token_logps = label_logps(shift_logits, shift_labels)
    per_token_logps[shift_completion_mask == 0] = 0.0
    chosen_logps, rejected_logps = per_token_logps.sum(dim=1).chunk(2, dim=0)
    with torch.no_grad():
        ref_outputs = ref_model(input_ids=input_ids, use_cache=False)
    ref_shift_logits = ref_outputs.logits[..., :-1, :]
    ref_per_token_logps = label_logps(ref_shift_logits, shift_labels)
    ref_per_token_logps[shift_completion_mask == 0] = 0.0
    ref_chosen_logps, ref_rejected_logps = ref_per_token_logps.sum(dim=1).chunk(2, dim=0)
    delta_score = (chosen_logps - ref_chosen_logps) - (rejected_logps - ref_rejected_logps)
    loss = (-F.logsigmoid(BETA * delta_score)).mean()
    if metrics:
        entropy = chunked_entropy(shift_logits.detach())
        (entropy * shift_completion_mask).sum()
        chosen_logits, rejected_logits = shift_logits.detach().chunk(2, dim=0)
        # TRL's chosen_logits[chosen_mask.bool()] copies the masked rows; fake tensors cannot take a data-dependent
        # shape, and with every completion token masked in, the copy is the whole half: a clone of the same bytes
        chosen_logits.reshape(-1, chosen_logits.shape[-1]).clone().mean(-1).sum()
        rejected_logits.reshape(-1, rejected_logits.shape[-1]).clone().mean(-1).sum()
        chosen_logits.argmax(dim=-1)
    return loss


def run(c: dict) -> dict:
    c = {**oracle.DEFAULTS, **MODEL, **MODES[c["mode"]], **c}
    fakecuda.install()
    oracle.hf_fake_patches()
    torch.manual_seed(0)
    gc.collect()
    gc.disable()
    try:
        with FakeTensorMode(allow_non_fake_inputs=False):
            model = oracle.build_model(c, "cuda")
            # the reference: the policy's model_init_kwargs (fp32 weights under AMP), eval, frozen, no checkpointing
            # (TRL creates it like the policy and prepares it for evaluation)
            ref_model = oracle.build_model({**c, "activation_checkpointing": "none"}, "cuda")
            ref_model.eval().requires_grad_(False)
            n_params, _ = oracle.count_params(model)
            b, s = c["micro_batch"], c["seq_len"]
            input_ids = torch.randint(0, c["vocab"], (2 * b, s), device="cuda")
            completion_mask = torch.ones((2 * b, s), dtype=torch.long, device="cuda")
            opt = oracle.make_optimizer(c, model)
            tr = oracle.OracleTracker()
            tr.track_external(model, ref_model, opt, input_ids, completion_mask)
            step_peaks = []
            with tr:
                for step in range(c["steps"]):
                    tr.step_tag = str(step)
                    with oracle.autocast_ctx(c, "cuda"):  # the Trainer's compute_loss_context_manager
                        loss = compute_loss(model, ref_model, input_ids, completion_mask, c["metrics"])
                    loss.backward()
                    del loss
                    torch.nn.utils.clip_grad_norm_(list(model.parameters()), c["grad_clip"], foreach=True)
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    step_peaks.append(tr.peak()["Total"])
                    if step == 0:
                        tr.reset_mod_stats()
                    gc.collect(1)
            peak = tr.peak()
    finally:
        gc.enable()
    return {"c": c, "n_params": n_params, "peak": peak, "where": tr.peak_where, "step_peaks": step_peaks}


def row(res: dict) -> dict:
    c, where = res["c"], res["where"]
    ac, s, b = c["activation_checkpointing"], c["seq_len"], c["micro_batch"]
    label = f"T/{c['mode']}/dpo/sdpa/ac{ac}/s{s}b{b}/adamw-foreach" + ("/trl-metrics" if c["metrics"] else "")
    return {
        "label": label, **{k: c[k] for k in COLUMNS[1:18] if k in c},
        "objective": "preference", "loss_type": "dpo", "reference": "separate", "trl_metrics": c["metrics"],
        "n_params": res["n_params"], "peak_bytes": res["peak"]["Total"], "peak_phase": where["phase"],
        "peak_op": where["op"], "peak_module": where["module"],
        "step_peaks_gib": " ".join(f"{x / 2**30:.4f}" for x in res["step_peaks"]),
    }  # fmt: skip


def main() -> None:
    rows = []
    for c in CONFIGS:
        res = run(c)
        rows.append(row(res))
        print(json.dumps({**rows[-1], "breakdown": {str(k): v for k, v in res["peak"].items()}}), flush=True)
    if "--write" in sys.argv:
        with OUT.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
