"""Hybrid recurrent/attention models at inference: the recurrent layers' per-sequence state and vLLM's paged
pool that holds it beside the attention KV cache (research: docs/hybrid.md §3, vLLM 0.11-0.33 sources).

A recurrent layer (Mamba-2 `M`, Gated DeltaNet `G`) keeps, per sequence, a conv state (the last K − 1 inputs of
its depthwise conv) and a recurrent state (Mamba-2: heads × head_dim × state; GDN: value heads × Dv × Dk),
constant in the context length. Shapes per tensor-parallel rank follow vLLM's MambaStateShapeCalculator
(mamba_utils.py mamba2_state_shape, gated_delta_net_state_shape).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.memory.layout import stage_layer_indices
from planner.plan.config import Plan
from planner.plan.dtypes import nbytes
from planner.plan.models import GDN_CHUNK, MAMBA_CHUNK, RECURRENT, Model, gdn_widths, mamba2_widths

# vLLM raises the attention block size to a multiple of 16 tokens until one attention page holds a Mamba page
# (0.11 HybridAttentionMambaModelConfig.verify_and_update_config: attn_block_size = 16 * cdiv(mamba_page,
# 16 * attn_page_1_token); 0.33 Platform._align_hybrid_block_size, the kernels' minimum block of 16)
VLLM_HYBRID_BLOCK_MULTIPLE = 16
# Blocks of state a running request holds per Mamba group: 1 without prefix caching (mamba_cache_mode "none");
# 2 with it ("align" mode, vLLM 0.20-0.30: the running state and the last block-aligned checkpoint)
MAMBA_BLOCKS = {False: 1, True: 2}


def layer_state_bytes(plan: Plan, kind: str, engine: str) -> tuple[int, int]:
    """(conv state, recurrent state) bytes of one sequence in one layer of `kind` (M or G) on one rank.

    vLLM: the conv state keeps K − 1 columns in the model dtype; the recurrent state is in model.ssm_state_dtype
    (default the model dtype: mamba_ssm_cache_dtype "auto"). Hugging Face generate() (cache_utils
    LinearAttentionLayer): the conv state keeps all K columns; the recurrent state is what the kernel returns,
    fp32 for GDN (fla chunk_delta_h: final_state dtype=torch.float32) and the model dtype for Mamba-2."""
    m, t = plan.model, plan.parallelism.tensor
    act = nbytes(plan.precision.activation_dtype)
    # HF reads no state-dtype hint (docs/hybrid.md §3.1): fla's GDN state is fp32, mamba_ssm's the model dtype
    state = (
        nbytes(m.ssm_state_dtype or plan.precision.activation_dtype)
        if engine == "vllm"
        else (4 if kind == "G" else act)
    )
    if kind == "M":
        heads, inner, gn = mamba2_widths(m, t)
        _, head_dim, state_size = m.mamba_dims
        channels, cells, kernel = inner + 2 * gn, heads * head_dim * state_size, m.mamba_conv_kernel
    else:
        hv, key, value = gdn_widths(m, t)
        channels, kernel = 2 * key + value, m.linear_conv_kernel_dim
        _, _, dk, dv = m.gdn_dims
        cells = hv * dv * dk
    columns = kernel if engine == "hf" else kernel - 1
    return channels * columns * act, cells * state


def state_bytes_per_sequence(plan: Plan, engine: str) -> int:
    """One sequence's recurrent state over the recurrent layers of the stage that holds the most (0: no pattern)."""
    m = plan.model
    if not m.layer_pattern:
        return 0
    per_kind = {k: sum(layer_state_bytes(plan, k, engine)) for k in RECURRENT if k in m.layer_pattern}
    return max(
        sum(per_kind.get(m.layer_pattern[i], 0) for i in stage_layer_indices(plan, s))
        for s in range(plan.parallelism.pipeline)
    )


def prefill_peak(plan: Plan, chunk: int, bc: int) -> int:
    """The largest moment of a recurrent mixer's forward over `chunk` tokens without gradients (0: no pattern),
    from the shapes its kernels allocate (docs/hybrid.md §4): Mamba-2, in_proj's output zxbcdt (2I + 2GN + H), the
    conv output over x, B, C, the scan output (I) and its fp32 chunk states (H·P·N per chunk of MAMBA_CHUNK
    tokens); Gated DeltaNet, the projections (q, k, v, z, β, a), the conv output, q and k repeated to the value
    heads, the output (Hv·Dv) and the per-chunk states (Hv·Dk·Dv per GDN_CHUNK tokens, activation dtype)."""
    m, t = plan.model, plan.parallelism.tensor
    peaks = [0]
    if m.pattern_count("M"):
        heads, inner, gn = mamba2_widths(m, t)
        _, head_dim, state_size = m.mamba_dims
        states = -(-chunk // MAMBA_CHUNK) * heads * head_dim * state_size * 4
        peaks.append(chunk * (2 * inner + 2 * gn + heads + inner + 2 * gn + inner) * bc + states)
    if m.pattern_count("G"):
        hv, key, value = gdn_widths(m, t)
        _, _, dk, dv = m.gdn_dims
        states = -(-chunk // GDN_CHUNK) * hv * dk * dv * bc
        projected = 2 * key + 2 * value + 2 * hv
        peaks.append(chunk * (projected + 2 * key + value + 2 * hv * dk + value) * bc + states)
    return max(peaks)


def state_formula(m: Model) -> str:
    """What the recurrent-state item sums, in words."""
    kinds = " + ".join(
        f"{m.pattern_count(k)} {name} layers" for k, name in (("M", "Mamba-2"), ("G", "GDN")) if m.pattern_count(k)
    )
    return f"conv + SSM state of {kinds}, constant in context length"


@dataclass(frozen=True, kw_only=True)
class HybridPool:
    """vLLM V1's paged pool for a hybrid model on one GPU (docs/hybrid.md §3.4)."""

    block_tokens: int  # attention block size, raised so one attention page holds a Mamba page
    page_bytes: int  # one page: block_tokens × one attention layer's K and V per token (Mamba pages padded to it)
    group_size: int  # layers per KV-cache group; the pool has group_size tensors of num_blocks pages
    attention_groups: int
    mamba_groups: int
    mamba_blocks: int  # blocks a request holds per Mamba group

    def blocks_per_sequence(self, tokens: int) -> int:
        return self.attention_groups * -(-tokens // self.block_tokens) + self.mamba_groups * self.mamba_blocks

    def sequence_bytes(self, tokens: int) -> int:
        """Pool bytes one sequence of `tokens` holds: its blocks across the group_size shared tensors."""
        return self.blocks_per_sequence(tokens) * self.page_bytes * self.group_size

    def num_blocks(self, budget: int) -> int:
        return budget // (self.page_bytes * self.group_size)


def _group_size(counts: list[int]) -> int:
    """vLLM _get_kv_cache_groups_uniform_page_size: the fewest layers of a type, or the most when the most are
    under 1.5 × the fewest (groups are then padded to that size)."""
    few, most = min(counts), max(counts)
    return most if most < 1.5 * few else few


def hybrid_pool(plan: Plan, attention_bytes_per_token_layer: int) -> HybridPool:
    """The pool's block and group layout; `attention_bytes_per_token_layer` is one attention layer's K and V of
    one token on this rank."""
    m = plan.model
    mamba_page = max(sum(layer_state_bytes(plan, k, "vllm")) for k in RECURRENT if m.pattern_count(k))
    unit = VLLM_HYBRID_BLOCK_MULTIPLE * attention_bytes_per_token_layer
    block = VLLM_HYBRID_BLOCK_MULTIPLE * -(-mamba_page // unit)
    attn, recurrent = m.pattern_count("*"), m.pattern_count(RECURRENT)
    size = _group_size([attn, recurrent])
    return HybridPool(
        block_tokens=block,
        page_bytes=block * attention_bytes_per_token_layer,
        group_size=size,
        attention_groups=-(-attn // size),
        mamba_groups=-(-recurrent // size),
        mamba_blocks=MAMBA_BLOCKS[plan.workload.inference.prefix_caching],
    )
