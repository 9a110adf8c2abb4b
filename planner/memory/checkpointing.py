"""What one micro-batch of a stage keeps for backward under each activation-checkpointing strategy, activation
offloading and autocast's weight casts, and what a checkpointed layer recomputes."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from planner.memory.activations import (
    NVFP4_BYTES,
    LayerActs,
    causal_mask_bytes,
    final_norm_bytes,
    layer_acts,
    sac_op_acts,
)
from planner.memory.layout import StageContext
from planner.memory.result import Item
from planner.memory.terms import Described, Factor, Product, Size, count, fixed, item
from planner.search.memo import Memo, remembered

CASTS_NOTE = "torch.autocast caches 16-bit copies of matmul weights; the graph keeps them until backward"


@dataclass(frozen=True, kw_only=True)
class Kept:
    """Activations one micro-batch leaves on this stage for backward."""

    acts: LayerActs  # what a layer saves per token without checkpointing
    per_layer: int  # bytes a dense layer keeps
    moe_layer: int  # bytes an MoE layer keeps
    full_layer: int  # bytes the stage's largest layer saves without checkpointing (what a recompute regenerates)
    kept_input: int  # bytes of one layer's input
    input_bytes: int  # bytes per element of a layer's input (fp32 residual under autocast)
    share: float  # share of the layers checkpointed by every_k
    final_norm: int
    mask: int
    micro_batch: int  # everything one micro-batch keeps on the stage
    layer_formula: str


def _layer_formula(ctx: StageContext, acts: LayerActs) -> str:
    ckpt = ctx.plan.techniques.activation_checkpointing
    return (
        f"T × [norms {acts.norm_formula}{' ÷ t' if ctx.seq_div > 1 else ''}; attention "
        f"{acts.attention_formula}"
        f"{'; scores recomputed (selective)' if ckpt == 'selective' and acts.scores else ''}"
        f"; MLP {acts.mlp_formula}]"
    )


def _per_layer(
    ctx: StageContext, acts: LayerActs, kept_input: int, input_bytes: int, share: float
) -> tuple[int, int, str]:
    """(bytes a dense layer keeps, bytes an MoE layer keeps, formula) under the plan's checkpointing."""
    ckpt, tokens, div = ctx.plan.techniques.activation_checkpointing, ctx.tokens, ctx.seq_div
    if ckpt == "full":
        return kept_input, kept_input, f"T × {input_bytes}h (layer input kept by checkpointing)"
    if ckpt == "selective_op":
        rep_b, attn_b, mlp_b = sac_op_acts(ctx.plan, input_bytes)
        return (
            tokens * (rep_b // div + attn_b + mlp_b),
            tokens * (rep_b // div + attn_b + acts.moe_mlp),
            f"T × [op-level SAC: input and kept projection outputs {count(rep_b)} B{' ÷ t' if div > 1 else ''}"
            f" + attention output, lse and kept q/v {count(attn_b)} B + kept gate {count(mlp_b)} B]",
        )
    kept_scores = 0 if ckpt == "selective" else acts.scores
    per_layer = tokens * (acts.norms // div + acts.attention + kept_scores + acts.mlp)
    moe_layer = tokens * (acts.norms // div + acts.attention + kept_scores + acts.moe_mlp)
    formula = _layer_formula(ctx, acts)
    if ckpt == "every_k":  # every k-th layer keeps only its input, the others everything (averaged)
        return (
            round(kept_input * share + per_layer * (1 - share)),
            round(kept_input * share + moe_layer * (1 - share)),
            f"{share:.3g} of layers checkpointed (T × {input_bytes}h), the others " + formula,
        )
    return per_layer, moe_layer, formula


def kept_key(ctx: StageContext) -> tuple:
    """Everything `kept` reads, the key of what is memoized from it: the stage's cut of the model, the precision,
    autocast, the techniques that change what a layer saves, and the micro-batch's tokens and their split (not the
    GPU count, ZeRO or offload)."""
    plan = ctx.plan
    tech, wl = plan.techniques, plan.workload
    return (
        ctx.layout,
        ctx.index,
        plan.precision,
        ctx.autocast,
        tech.activation_checkpointing,
        tech.checkpoint_every,
        tech.attention,
        tech.compiled_blocks,
        tech.moe_capacity_factor,
        wl.sequences_per_forward,
        wl.sequence_length,
        plan.parallelism.context,
        ctx.seq_div,
    )


def kept(ctx: StageContext) -> Kept:
    plan, sp = ctx.plan, ctx.sp
    tech = plan.techniques
    acts = layer_acts(plan, ctx.index)
    dense, moe = sp.dense_layers, sp.moe_layers
    full_layer = ctx.tokens * (
        acts.norms // ctx.seq_div
        + acts.attention
        + acts.scores
        + max(acts.mlp if dense else 0, acts.moe_mlp if moe else 0)
    )
    # every_k: torchtitan wraps block n (counted from 1) when n % k == 0, so ⌊L/k⌋ of the stage's L layers
    n_layers = dense + moe
    share = (n_layers // tech.checkpoint_every) / n_layers if tech.activation_checkpointing == "every_k" else 0.0
    input_bytes = 4 if ctx.autocast else ctx.bc
    kept_input = ctx.tokens * input_bytes * plan.model.hidden_size // ctx.seq_div
    per_layer, moe_layer, formula = _per_layer(ctx, acts, kept_input, input_bytes, share)
    final_norm, mask = final_norm_bytes(ctx), causal_mask_bytes(ctx)
    micro_batch = dense * per_layer + moe * moe_layer + final_norm + mask
    if plan.precision.fp8_recipe == "nvfp4" and tech.activation_checkpointing not in ("full", "selective_op"):
        # NVFP4 linears also save their weight's 4-bit codes (Wt_fp4, Wt_sf) for backward, in every layer whose
        # activations are kept (op-level SAC recomputes them with the block)
        micro_batch += round(NVFP4_BYTES * sp.linear * n_layers * (1 - share) / n_layers)
    return Kept(
        acts=acts,
        per_layer=per_layer,
        moe_layer=moe_layer,
        full_layer=full_layer,
        kept_input=kept_input,
        input_bytes=input_bytes,
        share=share,
        final_norm=final_norm,
        mask=mask,
        micro_batch=micro_batch,
        layer_formula=formula,
    )


def _stage_text(ctx: StageContext) -> str:
    """A template of the stage's layers, e.g. "1 layers × {:MiB.1} + 29 MoE layers × {:MiB.1}"."""
    dense, moe = ctx.sp.dense_layers, ctx.sp.moe_layers
    return " + ".join(
        x
        for x in (f"{dense} layers × {{:MiB.1}}" if dense else "", f"{moe} MoE layers × {{:MiB.1}}" if moe else "")
        if x
    )


def activations(ctx: StageContext, k: Kept) -> tuple[Item, int]:
    """(the activations item at the end of forward, bytes offloaded to the host)."""
    sp, in_flight, detail = ctx.sp, ctx.in_flight, ctx.detail
    ckpt = ctx.plan.techniques.activation_checkpointing
    if ctx.plan.techniques.activation_offload:
        # torchtune OffloadActivations: every saved tensor of 1 KiB or more but the output head's goes to pinned
        # host memory; the last 5 packed tensors stay on the GPU until their copy is done. Under full
        # checkpointing the saved tensors are the layer inputs; otherwise about one layer's worth stays.
        n_layers = sp.dense_layers + sp.moe_layers
        largest_layer = max(k.per_layer if sp.dense_layers else 0, k.moe_layer if sp.moe_layers else 0)
        resident = min(5, n_layers) * k.kept_input if ckpt == "full" else largest_layer
        host = round((k.micro_batch - k.final_norm - k.mask) * in_flight)
        text = (
            f"min(5, {n_layers}) layer inputs T × {k.input_bytes}h" if ckpt == "full" else "one layer's activations"
        ) + " still being copied + the final norm; {} on the host"
        return item(
            "activations",
            "Activations (offloaded)",
            Described(resident + k.final_norm + k.mask, text, (Size(host),)),
            "Activation offloading: saved tensors live in pinned host memory between forward and backward",
            detail,
        ), host
    sizes = tuple(Size(b) for b, n in ((k.per_layer, sp.dense_layers), (k.moe_layer, sp.moe_layers)) if n)
    text = (
        (
            "{:g} micro-batch"
            + ("es" if in_flight != 1 else "")
            + " × ("
            + _stage_text(ctx)
            + (" + final norm" if k.final_norm else "")
            + (" + causal mask" if k.mask else "")
            + "); T = {:,}, per layer {}"
        )
        if detail
        else ""
    )
    return item(
        "activations",
        "Activations",
        Described(round(k.micro_batch * in_flight), text, (in_flight, *sizes, ctx.tokens, k.layer_formula)),
        "Tensors autograd saves between forward and backward (HF-style eager ops)"
        + (
            f". The {ctx.plan.parallelism.pipeline_schedule} pipeline schedule keeps earlier micro-batches in flight"
            if in_flight > 1
            else ""
        ),
        detail,
    ), 0


def weight_casts(ctx: StageContext, k: Kept) -> tuple[Item | None, Item | None, Item | None]:
    """Autocast's cached 16-bit weight copies: (at the end of forward, during the layers' backward, during the
    loss's and the output head's backward)."""
    if not ctx.autocast:
        return None, None, None
    keep = 1 - k.share
    factors: tuple[Factor, ...] = (
        Factor(ctx.sp.matmul, "matmul params"),
        Factor(2, "B"),
        Factor(ctx.in_flight, spec="g"),
    )
    if keep < 1:
        factors += (Factor(keep, "(layers not checkpointed)", ".3g"),)
    casts = item("weight_casts", "Weight casts (autocast)", Product(factors), CASTS_NOTE, ctx.detail)
    if ctx.plan.techniques.activation_checkpointing != "full":
        return casts, casts, casts
    # The output head is not checkpointed: its matmul saved autocast's 16-bit copy of the weight (PyTorch
    # tools/autograd/derivatives.yaml: mm's input gradient reads mat2) until the head's backward, long after
    # autocast exited. MemTracker on HF LlamaForCausalLM, AMP + full checkpointing (bench/data/oracle-train.csv),
    # holds exactly these V·h × 2 B beside the loss's fp32 buffers.
    head = item(
        "weight_casts",
        "Weight casts (autocast)",
        Product((Factor(ctx.sp.head, "output head params"), Factor(2, "B"), Factor(ctx.in_flight, spec="g"))),
        "The output head's 16-bit copy, saved by its matmul until the head's backward",
        ctx.detail,
    )
    return (
        casts,
        item(
            "weight_casts",
            "Weight casts (autocast)",
            fixed(0, "0 (freed when autocast exits)"),
            "Checkpointed layers keep no casts; the recomputed layer makes its own",
            ctx.detail,
        ),
        head,
    )


def backward_activations(ctx: StageContext, k: Kept) -> tuple[Item, Item | None, Item]:
    """What is left as backward proceeds: (activations and autocast casts at the stage's first layer, activations
    at the embedding's backward)."""
    sp, in_flight, detail = ctx.sp, ctx.in_flight, ctx.detail
    ckpt, offloaded = ctx.plan.techniques.activation_checkpointing, ctx.plan.techniques.activation_offload
    first_layer = k.per_layer if sp.dense_layers else k.moe_layer
    others = round(k.micro_batch * (in_flight - 1))
    if offloaded:  # brought back one autograd node at a time: the layer being differentiated and its input
        rest = item(
            "activations",
            "Activations (offloaded)",
            fixed(2 * k.kept_input, "2 layer inputs brought back")
            if ckpt == "full"
            else fixed(first_layer, "the layer brought back"),
            "Activation offloading: the rest is on the host",
            detail,
        )
    else:
        rest = item(
            "activations",
            "Activations",
            Described(others + first_layer, "{:g} other micro-batches + the first layer's", (in_flight - 1,))
            if in_flight > 1
            else fixed(others + first_layer, "the first layer's, still to be differentiated"),
            "Earlier layers' activations have been freed by now",
            detail,
        )
    rest_casts = (
        item(
            "weight_casts",
            "Weight casts (autocast)",
            fixed(
                round(sp.matmul * 2 * (in_flight - 1)) + sp.layer * 2, "other micro-batches + the first layer's casts"
            ),
            CASTS_NOTE,
            detail,
        )
        if ctx.autocast and ckpt != "full"
        else None
    )
    freed = item(
        "activations",
        "Activations",
        Described(0 if offloaded else others, "{:g} other micro-batches", (in_flight - 1,))
        if in_flight > 1
        else fixed(0 if offloaded else others, "0 (all freed)"),
        "This micro-batch's activations are freed",
        detail,
    )
    return rest, rest_casts, freed


@dataclass(frozen=True, kw_only=True)
class Saved:
    """The activations of a stage across the step: what one micro-batch keeps, and the items at each moment."""

    kept: Kept
    forward: Item  # at the end of forward
    host: int  # bytes offloaded to the host
    casts: Item | None  # autocast's weight copies at the end of forward
    casts_bwd: Item | None  # and during the layers' backward
    head_casts: Item | None  # and during the loss's and the output head's backward
    rest: Item  # at the stage's first layer's backward
    rest_casts: Item | None
    freed: Item  # at the embedding's backward


_SAVED = Memo(4096)  # _saved by all it reads (see saved)


def saved(ctx: StageContext) -> Saved:
    """The stage's activation items, kept by what they read: what `kept` reads, the micro-batches in flight,
    activation offload, the pipeline schedule (its note) and detail."""
    par, tech = ctx.plan.parallelism, ctx.plan.techniques
    key = kept_key(ctx) + (ctx.in_flight, tech.activation_offload, par.pipeline_schedule, ctx.detail)
    return remembered(_SAVED, key, partial(_saved, ctx))


def _saved(ctx: StageContext) -> Saved:
    k = kept(ctx)
    forward, host = activations(ctx, k)
    casts, casts_bwd, head_casts = weight_casts(ctx, k)
    rest, rest_casts, freed = backward_activations(ctx, k)
    return Saved(
        kept=k,
        forward=forward,
        host=host,
        casts=casts,
        casts_bwd=casts_bwd,
        head_casts=head_casts,
        rest=rest,
        rest_casts=rest_casts,
        freed=freed,
    )
