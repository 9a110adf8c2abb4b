"""torchtitan's op-level selective activation checkpointing (`selective_op`): which projections of a block it
keeps for backward and which it runs again, the one rule the memory (planner/memory/activations.py) and the time
(planner/perf/work.py) models read.

torchtitan/distributed/activation_checkpoint.py (`_apply_op_sac` in v0.1.0-v0.2.2; `SelectiveAC` since 2026-03):
the outputs of the ops in its save list (aten.mm, the SDPA kernels, reduce-scatter, max) are kept, except every
second aten.mm of a block, counted in execution order; every other op, aten.mm's second ones included, runs again
in backward. A Llama block's matmuls run q, k, v, o, then the MLP's w1 (gate), w3 (up), w2 (down)
(`w2(silu(w1(x)) * w3(x))`): q, v, gate and down are kept, k, o and up recomputed. A GeLU block runs a fused qkv,
o, up and down: qkv and up kept. Biased projections run as aten.addmm, neither saved nor counted: all recomputed.
torch.compile drops the last projection's output where the policy would keep it (backward never reads it):
neither kept nor recomputed.
Under NVFP4, torchao's linears are an autograd Function of scaled_mm and Triton kernels outside the list: all
recomputed. An MoE layer's router gate is recomputed by `force_recompute_mm_shapes_by_fqns` (default
["moe.router.gate"]) and its routed experts run as aten._grouped_mm, outside the list: recomputed with it.
"""

from __future__ import annotations

from typing import Literal

from planner.plan.config import Plan

Fate = Literal["kept", "recomputed", "dropped"]
# a block's projections in torchtitan's execution order (planner.plan.models.projection_shapes' names; GeLU's fused
# qkv is one aten.mm)
SWIGLU_ORDER: tuple[tuple[str, ...], ...] = (("q",), ("k",), ("v",), ("o",), ("gate",), ("up",), ("down",))
GELU_ORDER: tuple[tuple[str, ...], ...] = (("q", "k", "v"), ("o",), ("up",), ("down",))


def op_sac_projections(plan: Plan) -> tuple[tuple[tuple[str, ...], Fate], ...]:
    """Each aten.mm of a block in execution order (the projections it computes) and what op-level SAC does with
    its output."""
    order = SWIGLU_ORDER if plan.model.mlp == "swiglu" else GELU_ORDER
    counted = not plan.model.bias and plan.precision.fp8_recipe != "nvfp4"
    last = len(order) - 1

    def fate(n: int) -> Fate:
        if not counted or n % 2:
            return "recomputed"
        return "dropped" if plan.techniques.compiled_blocks and n == last else "kept"

    return tuple((names, fate(n)) for n, names in enumerate(order))
