"""TRL's DPO step, re-written with the ops TRL runs, so that a measured preference step allocates what TRL's does
(huggingface/trl@f2cd577 trl/trainer/dpo_trainer.py `DPOTrainer._compute_loss`, loss_type sigmoid, f_divergence
reverse_kl, ld_alpha None; trl/trainer/utils.py `selective_log_softmax` and `entropy_from_logits`). Used by
`planner/measure/run.py` (a real GPU) and `bench/oracle_dpo.py` (the no-GPU oracle); imports torch only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

BETA = 0.1  # TRL DPOConfig beta default (trl@f2cd577 trl/trainer/dpo_config.py)
ENTROPY_ROWS = 128  # entropy_from_logits' chunk_size default


def label_logps(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """logits (rows, positions, vocab), labels (rows, positions) → each position's log-probability of its label.

    In fp32/fp64 the labels' logits are gathered at once, less a logsumexp taken sequence by sequence; in 16 bits a
    log-softmax of one sequence at a time, its labels gathered. The 16-bit row is held in a name until the next one
    replaces it, as TRL's loop holds it (two rows are live while the next is made)."""
    labels = labels.unsqueeze(-1)
    if logits.dtype in (torch.float32, torch.float64):
        label_logits = torch.gather(logits, dim=-1, index=labels)  # before the norms, as TRL orders them
        norms = torch.stack([torch.logsumexp(seq, dim=-1) for seq in logits])
        return (label_logits - norms.unsqueeze(-1)).squeeze(-1)
    picked = []
    for seq, seq_labels in zip(logits, labels, strict=True):
        seq_logps = F.log_softmax(seq, dim=-1)
        picked.append(seq_logps.gather(dim=-1, index=seq_labels))
    return torch.stack(picked).squeeze(-1)


def chunked_entropy(logits: torch.Tensor, rows: int = ENTROPY_ROWS) -> torch.Tensor:
    """Each position's entropy, `rows` positions of the flattened logits at a time (TRL entropy_from_logits: the
    reshape copies a strided input whole)."""
    flat = logits.reshape(-1, logits.shape[-1])
    parts = []
    for chunk in flat.split(rows, dim=0):
        chunk_logps = F.log_softmax(chunk, dim=-1)
        parts.append(-(torch.exp(chunk_logps) * chunk_logps).sum(-1))
    return torch.cat(parts).reshape(logits.shape[:-1])


def masked_rows(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """TRL's `logits[mask.bool()]`: a copy of the masked positions' logits."""
    return logits[mask.bool()]


def dpo_loss(model, reference, input_ids, completion_mask, metrics: bool = True, select=masked_rows):
    """One DPO loss as TRL's _compute_loss makes it: the policy's forward on chosen + rejected, its log-probs, the
    reference's (`reference()`: its no-grad forward's output, a frozen model's or the policy's with its adapters
    disabled), −logsigmoid(β × margin), then (metrics) what TRL logs: the entropy, the chosen and rejected logits'
    masked means (`select`: the oracle's fake tensors take no data-dependent shape and pass a copy of the same
    bytes) and the chosen token accuracy. Both models' outputs stay referenced to the end, as in TRL."""
    outputs = model(input_ids=input_ids, use_cache=False)
    shift_logits = outputs.logits[..., :-1, :]
    shift_labels = input_ids[..., 1:]
    shift_completion_mask = completion_mask[..., 1:]
    per_token_logps = label_logps(shift_logits, shift_labels)
    per_token_logps[shift_completion_mask == 0] = 0.0
    chosen_logps, rejected_logps = per_token_logps.sum(dim=1).chunk(2, dim=0)
    with torch.no_grad():
        ref_outputs = reference()
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
        chosen_mask, rejected_mask = shift_completion_mask.chunk(2, dim=0)
        select(chosen_logits, chosen_mask).mean(-1).sum()
        select(rejected_logits, rejected_mask).mean(-1).sum()
        chosen_logits.argmax(dim=-1)
    return loss
