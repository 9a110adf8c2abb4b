"""FLOPs: per token of training (forward, backward, recomputation) and of a forward pass.

Model FLOPs (what MFU counts) are forward + backward without recomputation: 3 × forward, less the weight
gradients a frozen base skips (LoRA, QLoRA: 2 × its matmul parameters); the FLOPs a step runs add what
checkpointing recomputes.
"""

from __future__ import annotations

from functools import lru_cache

from planner.plan.config import ADAPTER_TASKS, Plan
from planner.plan.models import GDN_CHUNK, MAMBA_CHUNK, Model, attention_widths, mamba2_widths, param_counts


def forward_flops_per_token(plan: Plan, sequence_length: int | None = None) -> float:
    """Forward FLOPs per token: 2 × the matmul parameters the token passes through (active experts only, plus
    the output head; Kaplan et al. 2020) and attention, 2 × (q + v widths) × keys per layer (QKᵀ and PV), over the
    keys a query sees: causal halves them where fused kernels skip the masked half (PaLM, Chowdhery et al.
    2022, App. B), sliding windows cap them."""
    return _forward_flops(
        plan.model, sequence_length or plan.workload.sequence_length, plan.techniques.attention == "flash"
    )


# keyed by (model, sequence length, fused attention), all the forward FLOPs read; a search asks again per strategy
@lru_cache(maxsize=1024)
def _forward_flops(m: Model, s: int, flash: bool) -> float:
    window = min(s, m.sliding_window or s)
    per_query = s / 2 if flash else s  # eager computes the masked half too
    keys = (m.pattern_count("*") - m.sliding_layers) * per_query + m.sliding_layers * (
        min(window, per_query) if flash else s
    )
    q, _, _, out = attention_widths(m)
    return 2 * _matmul_params(m) + 2 * (q + out) * keys + _recurrent_flops(m)


def recurrent_flops_per_token(plan: Plan) -> float:
    """The recurrent mixers' scans beyond their projections (docs/hybrid.md §5, from the kernels' structure): Mamba-2's
    chunked SSD ≈ 2Q(GN + HP) + 4HPN (CB, the intra-chunk product, chunk states and their readout); Gated
    DeltaNet per value head ≈ 6·Dk·Dv + C(6Dk + 4Dv) + 2C²/3 (kkᵀ and qkᵀ, the triangular solve, w and u, the
    intra-chunk output, the state update and readout)."""
    return _recurrent_flops(plan.model)


def _recurrent_flops(m: Model) -> float:
    flops = 0.0
    if m.pattern_count("M"):
        _, inner, groups_n = mamba2_widths(m)
        flops += m.pattern_count("M") * (2 * MAMBA_CHUNK * (groups_n + inner) + 4 * inner * m.mamba_dims[2])
    if m.pattern_count("G"):
        (_, hv, dk, dv), c = m.gdn_dims, GDN_CHUNK
        flops += m.pattern_count("G") * hv * (6 * dk * dv + c * (6 * dk + 4 * dv) + 2 * c * c / 3)
    return flops


def matmul_params(plan: Plan) -> int:
    """Matmul parameters a token passes through: the layers' projections (active experts only) and the output
    head; norms and the embedding lookup do no matmul."""
    return _matmul_params(plan.model)


# keyed by the model, all the count reads (its layers' norms are summed one by one: worth keeping)
@lru_cache(maxsize=256)
def _matmul_params(m: Model) -> int:
    counts = param_counts(m)
    norms = sum(counts.layer_norms(i) for i in range(m.num_layers))
    return counts.active - counts.embedding - counts.lm_head - norms - counts.final_norm + m.vocab_size * m.hidden_size


def flops_per_token(plan: Plan) -> float:
    """Training FLOPs per token: forward + backward (3 × forward), plus one more forward under full
    recomputation (its ⌊L/k⌋ / L share for every k-th layer, or the attention scores' forward under selective
    recomputation of eager attention)."""
    forward = forward_flops_per_token(plan)
    ckpt = plan.techniques.activation_checkpointing
    attention = forward - 2 * matmul_params(plan)
    layers = plan.model.num_layers
    share = (layers // plan.techniques.checkpoint_every) / layers  # the layers every_k checkpoints
    recompute = (
        forward
        if ckpt == "full"
        else forward * share
        if ckpt == "every_k"
        else attention
        if (ckpt == "selective" and plan.techniques.attention == "eager")
        else 0
    )
    return model_flops_per_token(plan) + recompute


def model_flops_per_token(plan: Plan) -> float:
    """Forward + backward FLOPs per token without recomputation, the numerator of MFU: 3 × forward (a backward
    is an input gradient and a weight gradient, each the forward's matmuls), less 2 × the matmul parameters
    where the base is frozen (LoRA, QLoRA: no weight gradient; its adapters' own are a few per mil, counted in
    the forward only)."""
    frozen = 2 * matmul_params(plan) if plan.workload.task in ADAPTER_TASKS else 0
    return 3 * forward_flops_per_token(plan) - frozen
