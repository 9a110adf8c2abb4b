"""What one layer saves for backward, per token and tensor-parallel rank: norms, attention, MLP, MoE, LoRA
adapters; under op-level selective checkpointing and torch.compile; and what the stage adds beside its layers
(the final norm, eager attention's causal mask)."""

from __future__ import annotations

from dataclasses import dataclass

from planner.memory.layout import StageContext, autocast, routed_slots, stage_layer_indices
from planner.memory.terms import count
from planner.plan.config import Plan
from planner.plan.dtypes import nbytes
from planner.plan.models import RECURRENT, attention_widths, gdn_widths, mamba2_widths, projection_shapes
from planner.plan.sac import op_sac_projections

# NVFP4 (torchao nvfp4 training): 4-bit values with one 1-byte e4m3 scale per 16 (NVIDIA's NVFP4 format).
NVFP4_BYTES = 0.5 + 1 / 16


@dataclass(frozen=True, kw_only=True)
class LayerActs:
    norms: int  # bytes per token in the two norms (replicated across tensor-parallel ranks unless sequence parallel)
    attention: int  # bytes per token in attention (split by tensor parallelism)
    scores: int  # bytes per token of materialized attention scores (eager only; recomputed by selective AC)
    mlp: int  # bytes per token in the MLP (split)
    moe_mlp: int  # bytes per token in an MoE layer's MLP: router, routed experts, shared experts (0: dense)
    norm_formula: str
    attention_formula: str
    mlp_formula: str


def attention_acts(plan: Plan, b16: int, frozen: bool = False) -> tuple[int, int, str]:
    """Per token and layer on one rank: (bytes attention saves, bytes of its s×s scores, formula).

    Fused kernels (FlashAttention / SDPA) save q, k, v, the output and an fp32 log-sum-exp per head; no s×s
    matrix. Eager attention expands k, v to all heads (repeat_kv), saves the fp32 softmax output (HF upcasts)
    and its 16-bit copy for the second matmul, and a contiguous copy of the output.
    Latent attention (HF DeepseekV3Attention, checked against MemTracker) also keeps each latent's RMSNorm
    (fp32 input, normalized and output copies) and, because the values are a view into kv_b's output, the
    whole of it (heads × (nope + v)) under fused kernels rather than the values alone.
    """
    m, t = plan.model, plan.parallelism.tensor
    q, k, v, out = attention_widths(m, t)
    a = m.num_attention_heads // t
    # Per-head q/k RMSNorm (Qwen3 / Gemma 3, MemTracker on HF code): the fp32 upcast input and the normalized
    # tensor in the activation dtype (only the fp32 input when the norm weights are frozen: LoRA), and one fp32
    # rsqrt per query and KV head.
    qk = (4 + (0 if frozen else b16)) * (q + k) + 4 * (a + k // m.head_dim) if m.qk_norm else 0
    if plan.techniques.attention == "eager" and not m.mla:
        k = v = q  # repeat_kv expands grouped keys and values to every query head
    latents = 0
    if m.mla:
        if plan.techniques.attention == "flash":  # eager's matmul saves a contiguous copy of the values instead
            v = a * (m.head_dim + m.latent_v_head_dim)
        latents = (4 + 2 * b16) * ((m.q_lora_rank or 0) + m.latent_rank)
    attention = b16 * (q + k + v + out) + latents + qk
    formula = f"{b16}(q + k + v + out) = {b16}×({count(q)} + {count(k)} + {count(v)} + {count(out)})"
    if latents:
        formula += f" + latents (4 + 2×{b16})×{count((m.q_lora_rank or 0) + m.latent_rank)}"
    if qk:
        formula += f" + q/k norms {count(qk)}"
    if plan.techniques.attention == "flash":
        return attention + 4 * a, 0, formula + f" + 4a(lse) with a = {a}"
    s = plan.workload.sequence_length
    per = 4 if b16 == 4 else 4 + b16
    return attention, a * s * per, formula + f" + a·s·{per} scores = {a}×{count(s)}×{per}"


def gelu_saved(plan: Plan, b16: int) -> tuple[int, str]:
    """Bytes per MLP-hidden element a GeLU keeps for backward besides its output (which the down projection
    saves as its input), and the formula.

    A fused kernel (nn.functional.gelu) saves its input x. HF's NewGELUActivation (`gelu_new`, transformers
    activations.py) computes 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) op by op: pow saves x, tanh its output,
    the final product both factors, 0.5·x and 1 + tanh; products with a Python scalar and sums save nothing
    (PyTorch autograd derivatives.yaml). Under autocast pow runs in fp32 (autocast's fp32 op list) and type
    promotion keeps tanh and 1 + tanh fp32: only 0.5·x is 16-bit. MemTracker on HF GPT-2 (transformers 5.18):
    12 B per element more than the fused kernel under autocast and in fp32, 6 B in bf16."""
    if not plan.model.composite_gelu:
        return b16, f"x {b16}"
    if autocast(plan):
        return 3 * 4 + b16, f"gelu_new: fp32 x, tanh, 1 + tanh 3 × 4 + 0.5x {b16}"
    return 4 * b16, f"gelu_new: x, tanh, 0.5x, 1 + tanh 4 × {b16}"


# --- LoRA: a frozen base ------------------------------------------------------------------------------------
def _lora_adapter_acts(plan: Plan, b16: int) -> int:
    """Per token: each adapter's rank-r intermediate, own input copies, dropout copies and masks."""
    lora, own_copies = plan.workload.lora, plan.precision.mixed
    shapes = projection_shapes(plan.model, plan.parallelism.tensor)
    adapters = 0
    for target in set(lora.targets):
        width = shapes[target][0]
        adapters += b16 * lora.rank + (b16 * width if own_copies else 0)
        if lora.dropout > 0:
            adapters += (b16 + 1) * width
        if lora.variant == "dora":
            # DoRA (peft DoraLinearLayer.forward): the magnitude's two products save the base output and the
            # adapter output, T × d_out each in the matmul output dtype (MemTracker on peft 0.21)
            adapters += 2 * b16 * shapes[target][1]
    return adapters


def _lora_moe_acts(plan: Plan, b16: int) -> tuple[int, str]:
    """MoE with frozen experts: per routed token silu's input and output and up (3 × I_e), and the expert
    output (saved for the routing weights, which carry gradients back to the router's input); the router
    softmax."""
    m = plan.model
    if not m.num_experts:
        return 0, ""
    e = m.expert_intermediate_size // plan.parallelism.tensor
    kept = 3 if m.mlp == "swiglu" else 1
    slots = routed_slots(plan)
    moe_mlp = 4 * m.num_experts + round(slots * b16 * (m.hidden_size + kept * e)) + m.shared_experts * kept * b16 * e
    return moe_mlp, f"; MoE layers: router 4E + {slots:g} routed slots × {b16}(h + {kept}I_e)"


def _lora_layer_acts(plan: Plan) -> LayerActs:
    """Bytes per token one layer saves for backward under LoRA, per tensor-parallel rank.

    A frozen linear saves nothing (the gradient to its input needs only the weight), so what remains is what
    gradients must flow through: the norms' fp32 inputs, attention, the SwiGLU/GeLU intermediates, and each
    adapted projection's input and rank-r intermediate. PEFT casts each adapter's input to the adapter dtype;
    with fp32 adapters under autocast that makes one 16-bit copy per adapter (peft LoraLayer._cast_input_dtype).
    Quantized projections (QLoRA) save no input either: current bitsandbytes MatMul4Bit keeps only the packed
    weight (ctx.tensors = (None, B)); releases around 0.41 also kept the input A.
    """
    m, prec, lora = plan.model, plan.precision, plan.workload.lora
    h, b16 = m.hidden_size, nbytes(prec.activation_dtype)
    inter = projection_shapes(m, plan.parallelism.tensor)["up"][1]
    targets = set(lora.targets)
    own_copies = prec.mixed  # fp32 adapters: each adapter saves its own 16-bit copy of its input
    # norms: the fp32 upcast input (RMSNorm) or the input (LayerNorm) is always needed; the output is saved
    # only as the shared input of adapters (when they do not make their own copies)
    norm_in = 4 * h if m.norm == "rmsnorm" else b16 * h
    shared = [("q", "k", "v"), ("gate", "up")] if m.mlp == "swiglu" else [("q", "k", "v"), ("up",)]
    outs = sum(b16 * h for group in shared if not own_copies and targets & set(group))
    norm_formula = f"2 × {'fp32 input 4h' if m.norm == 'rmsnorm' else f'input {b16}h'}" + (
        f" + {outs // (b16 * h)} shared norm output(s) {b16}h" if outs else ""
    )
    attention, scores, attention_formula = attention_acts(plan, b16, frozen=True)
    # MLP: SwiGLU keeps gate, silu(gate), up; the product only if down is adapted (and shares it); GeLU keeps what
    # its activation saves (gelu_saved)
    shared_out = b16 if ("down" in targets and not own_copies) else 0
    act, act_formula = (3 * b16, f"3 × {b16}") if m.mlp == "swiglu" else gelu_saved(plan, b16)
    adapters = _lora_adapter_acts(plan, b16)
    attention_formula += f" + adapters {count(adapters)} B" + (
        " (with DoRA's 2 × d_out outputs)" if lora.variant == "dora" else ""
    )
    moe_mlp, moe_formula = _lora_moe_acts(plan, b16)
    return LayerActs(
        norms=2 * norm_in + outs,
        attention=attention + adapters,  # adapters split like attention
        scores=scores,
        mlp=(act + shared_out) * inter,
        moe_mlp=moe_mlp,
        norm_formula=norm_formula,
        attention_formula=attention_formula,
        mlp_formula=f"({act_formula}{f' + product {b16}' if shared_out else ''})I (frozen projections save no inputs)"
        + moe_formula,
    )


# --- Full training ------------------------------------------------------------------------------------------
def _norm_acts(plan: Plan, b16: int, consumers: int) -> tuple[int, str]:
    """Norms. HF RMSNorm upcasts its input to fp32 (saved), saves the normalized 16-bit tensor for the weight's
    gradient, and its output is saved by the next linear. nn.LayerNorm saves its input and output (+ stats).
    Under autocast the residual stream is fp32, norms run in fp32, and each consuming linear casts the norm's
    output to 16-bit separately (autocast caches only leaf weights), saving its own copy."""
    h, cast = plan.model.hidden_size, autocast(plan)
    if plan.model.norm == "rmsnorm":
        if cast:
            return (
                2 * (4 + 4) * h + 2 * consumers * h,
                f"2 norms × (fp32 input 4h + normalized 4h) + {consumers} autocast copies × 2h",
            )
        if b16 == 4:
            return 2 * 12 * h, "2 norms × (input 4h + normalized 4h + output 4h)"
        return 2 * (4 + 2 * b16) * h, f"2 norms × (fp32 upcast 4h + normalized {b16}h + output {b16}h)"
    if cast:
        return 2 * 4 * h + 2 * consumers * h, f"2 norms × fp32 input 4h + {consumers} autocast copies × 2h"
    return 2 * 2 * b16 * h, f"2 norms × (input {b16}h + output {b16}h)"


def _compiled_acts(plan: Plan, b16: int, inter: int) -> tuple[int, str, int, str, int, str]:
    """torch.compile's min-cut partitioner (inductor defaults) saves the layer input, the norms' outputs and
    fp32 rstd, q and k after RoPE, v, the attention output and log-sum-exp, o_proj's output, and gate, up and
    their product; the fp32 upcasts, normalized copies and silu are recomputed (partition of HF Llama code by
    inductor's own partitioner: 8h + 4q + 4kv + 4a + 6I + 8 B in bf16, exact on two shapes). Returns (norms,
    formula, attention, formula, MLP, formula)."""
    m, t = plan.model, plan.parallelism.tensor
    q, k, v, out = attention_widths(m, t)
    factor = 3 if m.mlp == "swiglu" else 2
    return (
        4 * b16 * m.hidden_size + 8,
        f"compiled: layer input, 2 norm outputs and o_proj's output 4 × {b16}h + 2 fp32 rstd",
        b16 * (q + k + v + out) + 4 * (m.num_attention_heads // t),
        f"compiled: {b16}(q + k + v + out) + 4a",
        factor * b16 * inter,
        f"compiled: {factor} × {b16}I (silu recomputed)",
    )


def _moe_acts(plan: Plan, b16: int, factor: int) -> tuple[int, str]:
    """MoE (dropless; HF transformers 5 grouped-GEMM experts, traced with saved_tensors_hooks): per token the
    router's fp32 softmax over E experts, top-k indices and normalized weights (4E + 12k + 4 B); per routed
    token the gathered input, gate_up, silu(gate), their product, the expert output kept for the routing-
    weight product, the fp32 routing weight and three int64 permutation indices (2h + 4I_e in the compute
    dtype + 28 B); shared experts as a dense MLP."""
    m = plan.model
    if not m.num_experts:
        return 0, ""
    h, e, k = m.hidden_size, m.expert_intermediate_size // plan.parallelism.tensor, m.experts_per_token
    # DeepSeek's routers (V2/V3: the latent-attention presets) run in fp32 on an fp32 copy of the input (+4h)
    router_copy = 4 * h if m.mla else 0
    slots = routed_slots(plan)
    moe_mlp = (
        4 * m.num_experts
        + 12 * k
        + 4
        + router_copy
        + round(slots * (b16 * (2 * h + factor * e) + 28))
        + m.shared_experts * factor * b16 * e
    )
    return moe_mlp, (
        f"; MoE layers: router 4E + 12k + 4{' + fp32 input 4h' if router_copy else ''}"
        f" + {slots:g} routed slots × ({b16}(2h + {factor}I_e) + 28)"
        + (f" + {m.shared_experts} shared × {factor} × {b16}I_e" if m.shared_experts else "")
    )


def layer_acts(plan: Plan, stage: int = 0) -> LayerActs:
    """Bytes per token one layer of pipeline stage `stage` saves for backward, per tensor-parallel rank."""
    if plan.workload.task in ("lora", "qlora"):
        return _lora_layer_acts(plan)
    m, prec, t = plan.model, plan.precision, plan.parallelism.tensor
    h, inter = m.hidden_size, m.intermediate_size // t
    cast = autocast(plan)
    b16 = nbytes(prec.activation_dtype)  # activation dtype (16-bit under autocast too: matmul outputs)
    # linears reading each norm's output: Llama family q, k, v and gate, up; latent attention q(_a), kv_a;
    # GPT-2 one fused qkv and one fc
    separate = m.mlp == "swiglu"
    consumers = (2 if m.mla else 3 if separate else 1) + (2 if separate else 1)
    norms, norm_formula = _norm_acts(plan, b16, consumers)
    attention, scores, attention_formula = attention_acts(plan, b16)
    # MLP. SwiGLU saves gate, silu(gate), up and their product (4 × I); GeLU what its activation saves and its
    # output (2 × I fused, gelu_saved)
    factor = 4 if m.mlp == "swiglu" else 2
    mlp, mlp_formula = factor * b16 * inter, f"{factor} × {b16}I = {factor}×{b16}×{count(inter)}"
    if m.mlp == "gelu":
        act, act_formula = gelu_saved(plan, b16)
        mlp, mlp_formula = (act + b16) * inter, f"({act_formula} + output {b16})I = {act + b16}×{count(inter)}"
    # compiled (inductor fuses a GeLU's elementwise ops into one kernel: the fused count holds)
    if plan.techniques.compiled_blocks and not cast and plan.techniques.attention == "flash" and not m.mla:
        norms, norm_formula, attention, attention_formula, mlp, mlp_formula = _compiled_acts(plan, b16, inter)
        factor = 3 if m.mlp == "swiglu" else 2
    if prec.fp8_recipe == "nvfp4":
        # torchao NVFP4 linears save 4-bit codes of their input (0.5 B + one e4m3 scale per 16 values) instead of
        # the 16-bit tensor, one copy per consuming linear (nvfp4_linear.py nvfp4_mm: x_col_codes, x_col_sf)
        out = attention_widths(m, t)[3]
        norms += round(NVFP4_BYTES * consumers * h) - (2 * consumers * h if cast else 2 * b16 * h)
        attention += round((NVFP4_BYTES - b16) * out)
        mlp += round((NVFP4_BYTES - b16) * inter)
        norm_formula += f"; linear inputs as NVFP4 ({NVFP4_BYTES:g} B × {consumers}h)"
        mlp_formula += f"; the down projection's input as NVFP4 ({NVFP4_BYTES:g} B × I)"
    moe_mlp, moe_formula = _moe_acts(plan, b16, factor)
    if m.layer_pattern:
        norms, attention, scores, mlp, moe_mlp, attention_formula = _pattern_mean(
            plan, stage, b16, (norms, attention, scores, mlp, moe_mlp), attention_formula
        )
    return LayerActs(
        norms=norms,
        attention=attention,
        scores=scores,
        mlp=mlp,
        moe_mlp=moe_mlp,
        norm_formula=norm_formula,
        attention_formula=attention_formula,
        mlp_formula=mlp_formula + moe_formula,
    )


# Values per chunk row of fla's WY matrix A that chunk_gated_delta_rule saves (chunk.py: A of B × T × Hv × 64)
GDN_A_WIDTH = 64


def recurrent_acts(plan: Plan, b16: int, kind: str) -> tuple[int, str]:
    """Bytes per token one recurrent mixer saves for backward on one rank, beyond its input (the norm's output,
    counted with the norms), and the formula (docs/hybrid.md §4).

    Mamba-2 (mamba_ssm mamba_split_conv1d_scan_combined, the HF training path with out_proj fused): in_proj's
    output zxbcdt (2I + 2GN + H), the scan output out_x (I) and the gated norm's fp32 rstd per group; the conv
    output, x, B, C and the chunk states are recomputed. Gated DeltaNet (HF Qwen3NextGatedDeltaNet with fla's
    chunk_gated_delta_rule): the conv's input (2·Hk·Dk + Hv·Dv, causal-conv1d), q and k repeated to the value
    heads (2·Hv·Dk) and v, the WY matrix A (Hv × 64), fp32 g, q_rstd, k_rstd (3 Hv), β (Hv), the gated norm's
    inputs (core output and z: 2·Hv·Dv), the fp32 softplus input a (Hv) and out_proj's input (Hv·Dv)."""
    m, t = plan.model, plan.parallelism.tensor
    if kind == "M":
        heads, inner, gn = mamba2_widths(m, t)
        groups = -(-m.mamba_n_groups // t)
        saved = b16 * (3 * inner + 2 * gn + heads) + 4 * groups
        return saved, f"Mamba-2 {b16}(3I + 2GN + H) + 4G = {count(saved)}"
    hv, key, value = gdn_widths(m, t)
    qk = 2 * hv * m.gdn_dims[2]
    saved = b16 * (2 * key + value + qk + value + GDN_A_WIDTH * hv + hv + 3 * value) + 4 * (3 * hv + hv)
    return saved, f"GDN {b16}(conv in + q, k at Hv + v + A + β + 3 Hv·Dv) + 4 × 4Hv = {count(saved)}"


def _pattern_mean(
    plan: Plan, stage: int, b16: int, acts: tuple[int, int, int, int, int], attention_formula: str
) -> tuple[int, int, int, int, int, str]:
    """A hybrid layer's saved bytes averaged over the stage's layers: each layer's mixer (attention or
    recurrent); one-sublayer blocks (Nemotron-H) have one norm and an FFN only in `-` blocks."""
    m, (norms, attention, scores, mlp, moe_mlp) = plan.model, acts
    kinds = [m.pattern[i] for i in stage_layer_indices(plan, stage)]
    n, attn_layers = len(kinds), kinds.count("*")
    mixers, parts = attn_layers * attention, [f"{attn_layers} × attention {attention_formula}"]
    for kind in RECURRENT:
        if kinds.count(kind):
            saved, formula = recurrent_acts(plan, b16, kind)
            mixers += kinds.count(kind) * saved
            parts.append(f"{kinds.count(kind)} × {formula}")
    ffn = kinds.count("-") if m.pattern_style == "one_sublayer" else n
    norm_share = 2 if m.pattern_style == "one_sublayer" else 1
    return (
        norms // norm_share,
        mixers // n,
        scores * attn_layers // n,
        mlp * ffn // n,
        moe_mlp * ffn // n,
        f"mean over {n} layers of [{'; '.join(parts)}]",
    )


def sac_op_acts(plan: Plan, input_bytes: int) -> tuple[int, int, int]:
    """Per token and layer under torchtitan's op-level selective checkpointing: (replicated bytes, attention
    bytes, MLP bytes) of what it saves.

    torchtitan/distributed/activation_checkpoint.py _apply_op_sac: the outputs of ops in its save list (mm,
    the SDPA kernels, reduce-scatter, max) are kept, except every second mm of a block; everything else is
    recomputed in backward (planner/plan/sac.py says which projections are kept). The block's input is kept by
    the checkpoint. Measured with MemTracker and the partitioner on HF Llama code: 4h + 4q + 2kv + 4a + 2I B in
    bf16. Under NVFP4 only the block input and the attention output are kept (nvfp4_linear.py's Function is
    recomputed whole).
    """
    m, t = plan.model, plan.parallelism.tensor
    b = nbytes(plan.precision.activation_dtype)
    q, k, v, out = attention_widths(m, t)
    h, inter = m.hidden_size, m.intermediate_size // t
    # where each projection's output goes: 'rep' = full h on every rank
    width = {
        "q": (q, "attn"),
        "k": (k, "attn"),
        "v": (v, "attn"),
        "o": (h, "rep"),
        "gate": (inter, "mlp"),
        "up": (inter, "mlp"),
        "down": (h, "rep"),
    }
    saved = {"rep": input_bytes * h, "attn": b * out + 4 * (m.num_attention_heads // t), "mlp": 0}
    for names, fate in op_sac_projections(plan):
        if fate == "kept":
            saved[width[names[0]][1]] += b * sum(width[name][0] for name in names)
    return saved["rep"], saved["attn"], saved["mlp"]


def final_norm_bytes(ctx: StageContext) -> int:
    """The final norm feeding the output head (last stage), never inside a checkpointed layer."""
    if not ctx.last:
        return 0
    h, bc = ctx.plan.model.hidden_size, ctx.bc
    if ctx.lora:  # frozen weight and head: only the norm's (fp32) input is needed
        per_token = 4 * h if ctx.plan.model.norm == "rmsnorm" else bc * h
    elif ctx.plan.model.norm == "rmsnorm":
        per_token = 10 * h if ctx.autocast else 12 * h if bc == 4 else (4 + 2 * bc) * h
    else:
        per_token = 6 * h if ctx.autocast else 2 * bc * h
    return ctx.tokens * per_token // ctx.seq_div


def causal_mask_bytes(ctx: StageContext) -> int:
    """HF builds one b×1×s×s additive causal mask per forward for eager attention."""
    wl = ctx.plan.workload
    if ctx.plan.techniques.attention != "eager":
        return 0
    return (
        wl.sequences_per_forward
        * wl.sequence_length**2
        * (4 if ctx.autocast else ctx.bc)
        // ctx.plan.parallelism.context
    )
