"""The work of one layer on one GPU for a batch of tokens: matmuls timed by roofline, attention, and the bytes
the elementwise ops move.

A matmul of (T × k) by (k × n) does 2Tkn FLOPs and moves (Tk + kn + Tn) elements; planner/perf/gemm.py times
it by its shape.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.perf.gemm import Gemm
from planner.plan.config import Plan
from planner.plan.dtypes import nbytes
from planner.plan.models import attention_widths, projection_shapes
from planner.plan.sac import op_sac_projections

# Bytes an elementwise op moves per element of its output, in Hugging Face's eager modelling code and when
# torch.compile fuses each chain into one kernel (read the inputs once, write the output once):
# - RMSNorm (LlamaRMSNorm.forward): upcast (r2 w4), square (r4 w4), mean (r4), scale (r4 w4), downcast (r4 w2),
#   weight (r2 w2) = 36 eager; fused 4 (r2 w2). LayerNorm is one native kernel either way: 4.
# - residual add: r2 r2 w2 = 6 either way.
# - SwiGLU act(gate) × up per intermediate element: silu (r2 w2) + mul (r2 r2 w2) = 10 eager; fused 6. GeLU 4.
# - RoPE per q/k element (apply_rotary_pos_emb: q·cos + rotate_half(q)·sin): 4 products and a cat ≈ 24 eager;
#   fused ≈ 6 (q, cos, sin read, out written).
# - eager attention per score element: QKᵀ written (2), mask add (r2 r2 w2), softmax in fp32 (r2 w4), downcast
#   (r4 w2), read by PV (2) = 22; flash attention keeps scores on chip: 0.
NORM_BYTES = {"rmsnorm": (36, 4), "layernorm": (4, 4)}  # (eager, fused)
RESIDUAL_BYTES = 6
# relu2 (relu(x)²) reads its input and writes its output like gelu: the same traffic
ACT_BYTES = {"swiglu": (10, 6), "gelu": (4, 4), "relu2": (4, 4)}
ROPE_BYTES = (24, 6)
EAGER_SCORE_BYTES = 22
# MoE token permutation per token and MoE layer (Megatron-Core's permute/unpermute, HF's index_select and
# index_add): dispatch reads the token's hidden state and writes its k copies in expert order (r h, w k·h);
# combine reads the k expert outputs and writes their weighted sum (r k·h, w h): 2 (k + 1) h elements of
# 2 bytes moved, fused or not.
MOE_PERMUTE_BYTES_PER_ELEMENT = 4
# Backward elementwise work reads the saved inputs and the incoming gradient and writes the input gradient:
# about twice the forward's traffic.
BACKWARD_ELEMENTWISE = 2.0
# FlashAttention's backward runs 5 matmuls to the forward's 2 (it recomputes the scores): 2.5 × the forward
# FLOPs (Dao 2023, FlashAttention-2, §3.2).
ATTENTION_BACKWARD = 2.5
# A fused attention kernel's fixed work per block of queries (loading Q, the softmax's last rescale, writing O)
# shows at short sequences as a fixed number of keys' worth of time: measured forward TFLOP/s on an H100 (head
# dim 128, batch × sequence 16k; pytorch/benchmark commit ff65cb67, "Fix dimension order for FlashAttention-3"):
# FlashAttention-3 430, 517, 566, 590, 614, 621 and Triton's FlashAttention-2 329, 390, 434, 458, 471, 477 at
# 512, 1k, 2k, 4k, 8k, 16k keys, both the long-sequence rate × s / (s + 230).
ATTENTION_OVERHEAD_KEYS = 230


# Float8 training's casts, bytes per element of each matmul operand:
# - torchao.float8's dynamic scaling (hp_tensor_to_float8_dynamic; torchtitan and the PyTorch-native stacks): a
#   cast takes the tensor's amax (a reduction reading its 16-bit elements: 2 B), then scales it and writes 8 bits
#   (r2 w1): 5 B per orientation; torch.compile fuses the amax into the kernel that produced the tensor: 3 B. The
#   backward's matmuls take each operand in the other orientation: tensorwise scales serve both, so that is a
#   copy of the 8-bit tensor (r1 w1: 2 B); rowwise, MXFP8 and NVFP4 scale along the other axis: a second cast.
# - Transformer Engine (Megatron): the kernel that produces an operand (LayerNormLinear's norm, the fused
#   activation, the gradient's bias/activation backward) writes it in 8 bits, both orientations at once
#   (cast_transpose) from an amax known beforehand (delayed scaling's history, or the producer's own reduction):
#   w1 per orientation and no extra read.
FP8_CAST_BYTES = {"torchao": ((5, 3), 2), "transformer_engine": ((1, 1), 1)}  # ((eager, compiled), the other
# orientation where the scales serve both; a second cast otherwise)
# The stacks whose float8 is torchao's (torchtitan's and torchtune's quantize converters, axolotl's torchao
# integration); the others (Megatron, NeMo, DeepSpeed, accelerate's default TE backend, and the generic plan,
# as most published float8 runs) cast in their producers' kernels.
TORCHAO_FP8 = ("torchtitan", "torchtune", "axolotl")
# torchao's rowwise recipe (torchao/float8/float8_ops.py, addmm_float8_unwrapped, v0.8-v0.13): the backward's
# matmuls run without fast accumulation, where PyTorch's rowwise CUTLASS kernel is "so slow" that torchao runs the
# tensorwise cuBLAS kernel at unit scales and rescales the output afterwards (`output *= a_scale⁻¹ · b_scale⁻¹`):
# each backward output read and written again (r2 w2), with the outer product of the scales materialized in fp32
# (w4 r4) unless compiled.
ROWWISE_RESCALE_BYTES = (12, 4)  # (eager, compiled) per element of a backward matmul's output
# The forward's rowwise matmuls (fast accumulation) run PyTorch's CUTLASS rowwise kernel: "most shapes within
# 90-100 % of tensor-wise efficiency, but a long tail going down to 50 %" on an H100 (pytorch/pytorch#147971,
# 2025-02): the bottom of the bulk, as the tail pulls the mean below it.
ROWWISE_KERNEL_FRACTION = 0.9

MLP_PROJECTIONS = {"gate", "up", "down"}
# A layer's four tensor-parallel collectives and the projections beside each: the attention's input all-gather
# feeds q, k, v, its output reduce-scatter follows o; the MLP's feeds gate and up (an MoE layer's: the experts'
# first matmuls and the router) and follows down (Megatron's and torchtitan's column- then row-parallel pairs).
TP_SIDES = (("q", "k", "v"), ("o",), ("gate", "up"), ("down",))
TpSides = tuple[tuple[Gemm, ...], ...]


@dataclass(frozen=True, kw_only=True)
class LayerWork:
    """Forward work of one layer on one GPU for a batch of tokens, before any rate is applied."""

    gemms: tuple[Gemm, ...]  # projections (and experts, and the router)
    op_sac_gemms: tuple[Gemm, ...]  # those op-level selective checkpointing runs again
    tp_sides: TpSides  # the matmuls beside each tensor-parallel collective (TP_SIDES)
    fp8_cast_bytes: tuple[float, float, float]  # bytes float8 training's casts move: (forward's of the
    # activations, forward's of the weights, backward's)
    attention_flops: float  # the attention core (QKᵀ, PV)
    attention_work: float  # the FLOPs its kernel takes the time of: with a fused kernel's fixed work per query block
    elementwise_bytes: float


def matmul_elem(plan: Plan) -> int:
    """Bytes per element a matmul reads and writes: fp8 matmuls take 8-bit operands."""
    return 1 if plan.precision.compute == "fp8" else nbytes(plan.precision.activation_dtype)


def _projections(plan: Plan, tokens: float, moe: bool) -> tuple[tuple[Gemm, ...], tuple[Gemm, ...], TpSides]:
    """One layer's projections (attention, and the MLP or the routed and shared experts and the router); those of
    them that op-level selective checkpointing runs again in backward (planner/plan/sac.py); and the four sides of
    its tensor-parallel collectives (the matmuls right after the attention's and the MLP's input all-gather and
    right before their output reduce-scatter)."""
    m, par = plan.model, plan.parallelism
    elem = matmul_elem(plan)
    again = {name for names, fate in op_sac_projections(plan) if fate == "recomputed" for name in names}
    named = {
        name: Gemm(1, tokens, k, n, elem)
        for name, (k, n) in projection_shapes(m, par.tensor).items()
        if not (moe and name in MLP_PROJECTIONS)
    }
    gemms, recomputed = list(named.values()), [g for name, g in named.items() if name in again]
    sides: list[list[Gemm]] = [[named[n] for n in names if n in named] for names in TP_SIDES]
    if moe:  # each rank runs its experts, one grouped matmul each, on the tokens routed to them: tokens × top-k
        e = m.expert_intermediate_size // par.tensor
        mats = 3 if m.mlp == "swiglu" else 2
        local = m.num_experts // par.expert
        routed = tokens * m.experts_per_token / local  # tokens per local expert
        router = Gemm(1, tokens, m.hidden_size, m.num_experts, elem)
        first = Gemm(mats - 1, routed, m.hidden_size, e, elem, local)  # gate and up (or fc1)
        down = Gemm(1, routed, e, m.hidden_size, elem, local)
        gemms += [first, down, router]
        recomputed += [first, down, router]  # the router's gate forced, the experts' grouped matmuls unlisted
        sides[2] += [first, router]
        sides[3].append(down)
        if m.shared_experts:  # a dense MLP each, its projections counted like a dense layer's
            s = m.shared_experts
            first_names = ("gate", "up") if mats == 3 else ("up",)
            shared = {name: Gemm(s, tokens, m.hidden_size, e, elem) for name in first_names}
            shared["down"] = Gemm(s, tokens, e, m.hidden_size, elem)
            gemms += shared.values()
            recomputed += [g for name, g in shared.items() if name in again]
            sides[2] += [g for name, g in shared.items() if name != "down"]
            sides[3].append(shared["down"])
    return tuple(gemms), tuple(recomputed), tuple(tuple(side) for side in sides)


def fp8_cast_bytes(plan: Plan, gemms: tuple[Gemm, ...]) -> tuple[float, float, float]:
    """Bytes float8 training's casts move for a layer's matmuls (FP8_CAST_BYTES): the forward casts each
    matmul's input and weight (returned apart: a weight all-gathered in float8 is cast on its FSDP shard), the
    backward its output's gradient, and each operand again in the other orientation (and, under torchao's rowwise
    recipe, rescales its matmuls' outputs)."""
    prec = plan.precision
    if prec.compute != "fp8":
        return 0.0, 0.0, 0.0
    casts, transpose = FP8_CAST_BYTES["torchao" if plan.framework in TORCHAO_FP8 else "transformer_engine"]
    cast = casts[1 if plan.techniques.compiled_blocks else 0]
    other = transpose if prec.fp8_recipe == "tensorwise" else cast
    inputs = sum(g.repeats * g.groups * g.tokens * g.k for g in gemms)
    weights = sum(g.repeats * g.groups * g.k * g.n for g in gemms)
    grads = sum(g.repeats * g.groups * g.tokens * g.n for g in gemms)
    rescale = ROWWISE_RESCALE_BYTES[1 if plan.techniques.compiled_blocks else 0] if torchao_rowwise(plan) else 0
    return (
        cast * inputs,
        cast * weights,
        other * (inputs + weights) + (cast + other) * grads + rescale * (inputs + weights),
    )


def torchao_rowwise(plan: Plan) -> bool:
    """torchao's float8 rowwise recipe: its forward matmuls run the CUTLASS rowwise kernel, its backward's are
    rescaled afterwards (ROWWISE_RESCALE_BYTES, ROWWISE_KERNEL_FRACTION)."""
    return plan.precision.fp8_recipe == "rowwise" and plan.framework in TORCHAO_FP8


def layer_work(plan: Plan, tokens: float, keys: float, moe: bool) -> LayerWork:
    """One layer's forward on one GPU: `tokens` queries (after context parallelism), each attending to `keys`
    keys on average."""
    m, par, tech = plan.model, plan.parallelism, plan.techniques
    q, k, _, out = attention_widths(m, par.tensor)
    fused = 1 if tech.compiled_blocks else 0
    h_here = m.hidden_size / (par.tensor if par.sequence_parallel else 1)
    inter = m.expert_intermediate_size * (m.experts_per_token + m.shared_experts) if moe else m.intermediate_size
    per_token = (
        2 * NORM_BYTES[m.norm][fused] * h_here
        + 2 * RESIDUAL_BYTES * h_here
        + ACT_BYTES[m.mlp][fused] * inter / par.tensor
        + ROPE_BYTES[fused] * (q + k)
    )
    if tech.attention == "eager":
        per_token += EAGER_SCORE_BYTES * (m.num_attention_heads // par.tensor) * keys
    if moe:
        per_token += MOE_PERMUTE_BYTES_PER_ELEMENT * (m.experts_per_token + 1) * m.hidden_size
    gemms, op_sac_gemms, tp_sides = _projections(plan, tokens, moe)
    attention = 2 * (q + out) * tokens * keys
    overhead = (keys + ATTENTION_OVERHEAD_KEYS) / keys if tech.attention == "flash" and keys else 1.0
    return LayerWork(
        gemms=gemms,
        op_sac_gemms=op_sac_gemms,
        tp_sides=tp_sides,
        fp8_cast_bytes=fp8_cast_bytes(plan, gemms),
        attention_flops=attention,
        attention_work=attention * overhead,
        elementwise_bytes=per_token * tokens,
    )


def keys_per_query(plan: Plan, sequence_length: int) -> float:
    """Keys a query's attention kernel computes against, averaged over the layers: causal flash kernels skip the
    masked half (s/2), eager computes it (s); sliding windows cap it."""
    m, s = plan.model, sequence_length
    flash = plan.techniques.attention == "flash"
    per_query = s / 2 if flash else s
    window = min(per_query, m.sliding_window or s) if flash else s
    # hybrid models: only the attention layers attend; their keys are spread over all the layers
    return ((m.pattern_count("*") - m.sliding_layers) * per_query + m.sliding_layers * window) / m.num_layers
