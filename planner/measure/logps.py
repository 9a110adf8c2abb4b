"""Per-token log-probabilities of the labels, computed by the ops TRL runs, so that a measured preference step
allocates what TRL's does (huggingface/trl@f2cd577 trl/trainer/utils.py `selective_log_softmax`, re-written here).

In fp32/fp64 the labels' logits are gathered at once, less a logsumexp taken sequence by sequence; in 16 bits a
log-softmax of one sequence at a time, its labels gathered. The 16-bit row is held in a name until the next one
replaces it, as TRL's loop holds it (two rows are live while the next is made). Used by
`planner/measure/run.py` (a real GPU) and `bench/oracle_dpo.py` (the no-GPU oracle); imports torch only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def label_logps(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """logits (rows, positions, vocab), labels (rows, positions) → each position's log-probability of its label."""
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
