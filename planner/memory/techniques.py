"""Transients of one moment of backward, one function per technique: the ZeRO-3 gather, fresh gradients, a
dequantized weight (QLoRA), the expert all-to-all, fp8 casts, DoRA's weight norm, the layer's backward
temporaries and the recompute of checkpointing; and the optimizer step's temporaries."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache, partial

from planner.memory.activations import NVFP4_BYTES
from planner.memory.checkpointing import Kept, kept_key
from planner.memory.layout import StageContext, routed_slots
from planner.memory.result import Item
from planner.memory.terms import Described, Factor, Product, Size, fixed, item
from planner.plan.dtypes import QUANTIZED
from planner.plan.models import projection_shapes
from planner.search.memo import Memo, remembered

# MXFP8 (OCP microscaling): 8-bit values with one 1-byte e8m0 scale per 32.
MXFP8_BYTES = 1 + 1 / 32
# bytes per element of each low-precision recipe's casts (tensorwise and rowwise: 1)
FP8_RECIPE_BYTES = {"mxfp8": MXFP8_BYTES, "nvfp4": NVFP4_BYTES}


def zero3_gather(ctx: StageContext, stored: float) -> Item | None:
    """The unit in use plus the one prefetched, unsharded (ZeRO-3/FSDP); `stored` bytes per parameter as
    all-gathered (a frozen base keeps its storage)."""
    if ctx.plan.parallelism.zero_stage != 3:
        return None
    sp = ctx.sp
    return _zero3_gather(
        sp.gathered_pair, sp.gathered_pair_layers, stored, ctx.plan.precision.fp8_all_gather, ctx.detail
    )


def _gathered(params: int, layer_params: int, stored: float, fp8: bool, what: str) -> Described:
    """`params` all-gathered at `stored` bytes each, of which `layer_params` in layers."""
    gathered = round(params * stored)
    if fp8:  # torchao WeightWithDynamicFloat8CastTensor: layers' linears travel as float8, 1 B each
        # (no 16-bit unsharded copy is made); the embedding and the output head stay 16-bit
        gathered -= round(layer_params * (stored - 1))
    text = what + " {:,} params × {:.3g} B" + (", of which {:,} layer params as float8 (1 B)" if fp8 else "")
    return Described(gathered, text, (params, stored, layer_params))


# keyed by all the item reads (typed: the stored bytes are an integer or a fraction); a search meets each stage's
# units under several strategies
@lru_cache(maxsize=1024, typed=True)
def _zero3_gather(pair: int, pair_layers: int, stored: float, fp8: bool, detail: bool) -> Item:
    return item(
        "zero3_gather",
        "ZeRO-3 all-gathered layers",
        _gathered(pair, pair_layers, stored, fp8, "largest neighbouring units"),
        "The unit in use plus the one prefetched, unsharded",
        detail,
    )


def unsharded_params(ctx: StageContext, stored: float) -> Item | None:
    """FSDP under a torch pipelining schedule (layout.py unsharded_under_pipelining): every unit of the stage
    stays all-gathered until the step's gradient reduction, from its first forward (torchtitan) or its first
    backward (set_reshard_after_backward(False)); they replace the per-unit gather at the moments they cover."""
    if not ctx.unsharded_from:
        return None
    sp = ctx.sp
    layers = sp.total - sp.embedding - sp.head_own - (ctx.layout.counts.final_norm if ctx.last else 0)
    return _unsharded_params(
        sp.total, layers, stored, ctx.plan.precision.fp8_all_gather, ctx.unsharded_from, ctx.detail
    )


# keyed by all the item reads (typed as _zero3_gather)
@lru_cache(maxsize=256, typed=True)
def _unsharded_params(params: int, layer_params: int, stored: float, fp8: bool, since: str, detail: bool) -> Item:
    return item(
        "unsharded_weights",
        "FSDP unsharded parameters (pipelining)",
        _gathered(params, layer_params, stored, fp8, "the stage's"),
        f"Kept all-gathered from the {since} pass to the reduction after the last micro-batch: "
        + (
            "torchtitan does not reshard after forward under pipelining"
            if since == "forward"
            else "the pipeline schedule turns off resharding after backward"
        ),
        detail,
    )


def produced_bytes(ctx: StageContext, grad_bytes: int) -> int:
    """Bytes of a gradient element as autograd makes it: the dtype of the parameters it sees (fp32 under autocast,
    the adapters' gradient dtype under LoRA, else the compute dtype)."""
    return 4 if ctx.autocast else grad_bytes if ctx.lora else ctx.bc


def fresh_gradients(
    ctx: StageContext,
    grad_bytes: int,
    opt_temp: int,
    trainable: int,
    unit: int,
    counted: bool,
    largest: int | None = None,
) -> Item:
    """Fresh gradients of the unit being differentiated, beyond those already counted in Gradients. Autograd
    produces them in the dtype of the parameters it sees (fp32 under autocast, else the compute dtype). They
    become .grad directly on the first micro-batch without ZeRO-2; otherwise they are a transient (added into
    .grad, or reduce-scattered), plus a cast copy when the gradient dtype differs."""
    tech = ctx.plan.techniques
    produced = produced_bytes(ctx, grad_bytes)
    # reduce-scattered as produced from ZeRO-2 on, unless FSDP under pipelining sums them unsharded (layout.py)
    scattered = ctx.plan.parallelism.zero_stage >= 2 and not ctx.unsharded_grads
    return _fresh_gradients(
        produced,
        grad_bytes,
        opt_temp,
        trainable,
        unit,
        counted,
        largest,
        scattered,
        tech.offload,
        tech.optimizer_in_backward,
        ctx.accum > 1,
        ctx.detail,
    )


# keyed by all the item reads; a search asks for the same units under many strategies
@lru_cache(maxsize=4096)
def _fresh_gradients(
    produced: int,
    grad_bytes: int,
    opt_temp: int,
    trainable: int,
    unit: int,
    counted: bool,
    largest: int | None,
    scattered: bool,
    offload: str,
    in_backward: bool,
    accumulated: bool,
    detail: bool,
) -> Item:
    if in_backward:  # one parameter's gradient at a time, and its step's temporaries
        one = min(unit, largest or unit)
        step = -(-opt_temp * one // max(1, trainable))
        return item(
            "fresh_gradients",
            "Fresh gradient (stepped in backward)",
            Described(
                one * produced + step,
                "largest parameter {:,} × {} B + its step temporaries {:,} B",
                (one, produced, step),
            ),
            "The optimizer steps each parameter as soon as its gradient is ready, then frees it",
            detail,
        )
    cast = produced != grad_bytes and offload == "none"
    # (bytes per parameter, what they are): the gradient as autograd makes it where it is a transient (cast,
    # reduce-scattered, added into .grad or copied to the host), its cast copy for the reduce-scatter, and the
    # .grad it becomes on the first micro-batch where Gradients does not count it yet
    parts = [(produced, "as produced")] if (cast or scattered or accumulated or offload != "none") else []
    parts += [(grad_bytes, "cast copy")] if (scattered and cast) else []
    parts += [(grad_bytes, ".grad")] if (not counted and not scattered and offload == "none") else []
    return item(
        "fresh_gradients",
        "Fresh gradients",
        Described(
            unit * sum(b for b, _ in parts),
            "{:,} params × (" + " + ".join(f"{b} B {what}" for b, what in parts) + ")",
            (unit,),
        ),
        "Gradients of the unit being differentiated, before accumulation, reduce-scatter or host copy",
        detail,
    )


def tied_gradient_sum(ctx: StageContext, unit: int, grad_bytes: int) -> Item:
    """A table shared by the embedding and the output head gets two gradients: the head's, made in the head's
    backward and buffered until the embedding's dense gradient arrives at the end of backward, then their sum,
    made out of place before it reaches .grad (torch/csrc/autograd/input_buffer.cpp InputBuffer::accumulate: `old
    + new` unless the buffered tensor may be added into). At that moment the two and their sum are live: one more
    table-sized gradient than an untied model's (the oracle on HF Llama, fp32, fused AdamW: aten.add at the peak;
    an H200 run of the same step: bench/data/measured-gpu.csv)."""
    produced = produced_bytes(ctx, grad_bytes)
    return item(
        "tied_gradient_sum",
        "Tied table's gradient sum",
        Described(
            unit * produced, "{:,} params × {} B (the head's and the embedding's gradients, summed)", (unit, produced)
        ),
        "The shared embedding/head table's two gradients and their out-of-place sum",
        ctx.detail,
    )


def dequantized_weight(ctx: StageContext) -> Item | None:
    prec = ctx.plan.precision
    if not (ctx.lora and prec.weights in QUANTIZED):
        return None
    return item(
        "dequantized_weight",
        "Dequantized weight",
        Product((Factor(ctx.sp.largest_matrix, "params"), Factor(ctx.bc, "B")), prefix="largest projection "),
        f"{prec.weights} weights are dequantized to {prec.activation_dtype} for each matmul, forward and backward",
        ctx.detail,
    )


def expert_dispatch(ctx: StageContext) -> Item | None:
    """All-to-all send buffer of the routed tokens (the receive side is the experts' saved input)."""
    if not (ctx.sp.moe_layers and ctx.plan.parallelism.expert > 1):
        return None
    slots, h = routed_slots(ctx.plan), ctx.plan.model.hidden_size
    return item(
        "expert_dispatch",
        "Expert all-to-all buffers",
        Described(round(ctx.tokens * slots * h * ctx.bc), "T × {:g} routed slots × h × {} B", (slots, ctx.bc)),
        "Tokens permuted for the all-to-all to expert-parallel ranks",
        ctx.detail,
    )


def fp8_casts(ctx: StageContext) -> Item | None:
    """Float8 linears (torchao): 8-bit casts of the input, the weight and its transpose for each matmul, made and
    freed per matmul; tensorwise, rowwise and mxfp8 save the bf16 input as bf16 training does (torchao
    matmul_with_hp_or_float8_args, mx_mm: save_for_backward(input_hp, weight_hp); torchao README: Llama-3-8B
    peak 47.65 GB bf16, 47.77 tensorwise, 47.79 rowwise)."""
    prec, m = ctx.plan.precision, ctx.plan.model
    if prec.compute != "fp8":
        return None
    width = max(m.hidden_size, m.intermediate_size // ctx.plan.parallelism.tensor)
    recipe, largest = prec.float8_recipe, ctx.sp.largest_matrix
    per = FP8_RECIPE_BYTES.get(recipe, 1)
    scales = 4 * (ctx.tokens + width) if recipe == "rowwise" else 0  # one fp32 scale per row of each operand
    text = "(2 × largest matrix {:,} + T × {:,}) × {:g} B" + (" + fp32 row scales 4 × (T + {:,})" if scales else "")
    return item(
        "fp8_casts",
        f"Low-precision casts ({recipe})",
        Described(round(per * (2 * largest + ctx.tokens * width)) + scales, text, (largest, width, per, width)),
        "Per-matmul low-precision copies of the weight (and its transpose) and of the input, with their scales",
        ctx.detail,
    )


def _dora_bytes(ctx: StageContext, d_in: int, d_out: int) -> int:
    r = ctx.plan.workload.lora.rank
    if ctx.plan.precision.mixed:
        return 2 * d_in * d_in + 2 * d_in * r + 16 * d_in * d_out
    return ctx.bc * (d_in * d_in + d_in * r + 3 * d_in * d_out)


def dora_weight_norm(ctx: StageContext) -> Item | None:
    """DoRA recomputes ‖W + s·BA‖ per output row in every training forward: weight-sized temporaries of the
    projection being adapted (peft dora.py get_lora_weight, get_weight_norm; MemTracker): an identity
    d_in × d_in, B·A, the weight plus it — in fp32 with fp32 adapters."""
    lora = ctx.plan.workload.lora
    if not (ctx.lora and lora.variant == "dora"):
        return None
    shapes = projection_shapes(ctx.plan.model, ctx.plan.parallelism.tensor)
    target = max(lora.targets, key=lambda x: _dora_bytes(ctx, *shapes[x]))
    d_in, d_out = shapes[target]
    text = "largest adapted projection ({}, {:,} → {:,}): " + (
        "2d_in² + 2d_in·r + 16 d_in·d_out" if ctx.plan.precision.mixed else f"{ctx.bc}(d_in² + d_in·r + 3 d_in·d_out)"
    )
    return item(
        "dora_weight_norm",
        "DoRA weight-norm temporaries",
        Described(_dora_bytes(ctx, d_in, d_out), text, (target, d_in, d_out)),
        "DoRA recomputes the adapted weight's row norms in each forward (and in a checkpointed recompute)",
        ctx.detail,
    )


def _sac_recompute(ctx: StageContext, k: Kept) -> int:
    """Op-level SAC regenerates what a whole layer saves, less what it kept: the larger of a dense and an MoE
    layer of the stage."""
    acts, sp = k.acts, ctx.sp
    rest = ctx.tokens * (acts.norms // ctx.seq_div + acts.attention + acts.scores)
    return max(
        rest + ctx.tokens * acts.mlp - k.per_layer if sp.dense_layers else 0,
        rest + ctx.tokens * acts.moe_mlp - k.moe_layer if sp.moe_layers else 0,
        0,
    )


def _recompute(ctx: StageContext, k: Kept) -> Item | None:
    """Checkpointing recomputes one layer at a time during backward (every_k with k > L checkpoints nothing)."""
    ckpt = ctx.plan.techniques.activation_checkpointing
    if ckpt == "none" or (ckpt == "every_k" and k.share == 0):
        return None
    layerwise = ckpt in ("full", "every_k")  # a checkpointed layer is recomputed whole
    recompute = (
        k.full_layer + ctx.sp.layer * 2 * ctx.autocast
        if layerwise
        else _sac_recompute(ctx, k)
        if ckpt == "selective_op"
        else ctx.tokens * k.acts.scores
    )
    return item(
        "recompute",
        "Recomputed layer",
        fixed(
            recompute,
            "one layer's full activations"
            if layerwise
            else "one layer's activations less those kept"
            if ckpt == "selective_op"
            else "one layer's attention scores",
        ),
        "Checkpointing recomputes one layer at a time during backward",
        ctx.detail,
    )


def layer_work(
    ctx: StageContext, k: Kept, dequant: Item | None, fp8: Item | None, dora: Item | None
) -> tuple[Item | None, ...]:
    """What differentiating one layer adds: the recompute, the largest intermediates' gradients, and the
    per-matmul transients."""
    acts, bc, tokens = k.acts, ctx.bc, ctx.tokens
    mlp_of = acts.mlp if ctx.sp.dense_layers else acts.moe_mlp  # the MLP term of the stage's largest layer kind
    layer_bwd = max(tokens * mlp_of // 2, tokens * acts.scores) + 2 * tokens * bc * ctx.plan.model.hidden_size
    transient = item(
        "backward_transient",
        "Layer backward temporaries",
        Described(layer_bwd, "max(half the saved MLP, eager score gradients) + 2 × {}T·h", (bc,)),
        "Gradients of the largest intermediates of the layer being differentiated",
        ctx.detail,
    )
    ckpt = ctx.plan.techniques.activation_checkpointing
    return (_recompute(ctx, k), transient, dequant, expert_dispatch(ctx), fp8, dora if ckpt != "none" else None)


def reduce_scatter_copy(ctx: StageContext, grad_bytes: int, trainable: int) -> Item | None:
    """DeepSpeed ZeRO-3 reduces a full gradient bucket through reduce_scatter_coalesced, which first
    concatenates the bucket's padded partitions into a new flat tensor (stage3.py __avg_scatter_grads,
    comm/coalesced_collectives.py): a second copy of the bucket, or of the gradients there are, during
    backward. ZeRO-1/2 reduce the bucket in place."""
    elements = ctx.plan.parallelism.reduce_bucket_elements
    if elements is None or ctx.plan.parallelism.zero_stage != 3 or ctx.plan.techniques.offload != "none":
        return None
    return _reduce_copy(min(elements, trainable), grad_bytes, ctx.detail)


# keyed by all the item reads
@lru_cache(maxsize=256)
def _reduce_copy(copied: int, grad_bytes: int, detail: bool) -> Item:
    return item(
        "reduce_copy",
        "DeepSpeed reduce-scatter copy",
        Product((Factor(copied, "elements (the bucket, or every gradient when fewer)"), Factor(grad_bytes, "B"))),
        "reduce_scatter_coalesced concatenates the bucket's partitions before reducing them",
        detail,
    )


def optimizer_temp(ctx: StageContext, opt_temp: int, grad_bytes: int, trainable: int) -> Item:
    """Buffers the optimizer step allocates besides its states, ZeRO-sharded with them; under DeepSpeed the
    gradients of one sub-group, flattened and cast to fp32 (stage3.py _prepare_fp32_grad_for_sub_group,
    stage_1_and_2.py step: flatten, then .to(float32) when they are not fp32 already; both live at once)."""
    par = ctx.plan.parallelism
    return _optimizer_temp(
        opt_temp,
        grad_bytes,
        trainable,
        ctx.shard if par.zero_stage >= 1 else 1,
        ctx.plan.techniques.offload != "none",
        par.sub_group_elements,
        ctx.shard_note,
        ctx.detail,
    )


# keyed by all the item reads; a search meets each stage's optimizer under several layouts
@lru_cache(maxsize=1024)
def _optimizer_temp(
    opt_temp: int,
    grad_bytes: int,
    trainable: int,
    s_shard: int,
    offloaded: bool,
    sub_group: int | None,
    shard_note: str,
    detail: bool,
) -> Item:
    temp = 0 if offloaded else -(-opt_temp // s_shard)
    group = 0 if offloaded or sub_group is None else min(sub_group, -(-trainable // s_shard))
    each = grad_bytes + (4 if grad_bytes != 4 else 0)
    if not temp and not group:
        term = fixed(0, "0 (the step updates in place)")
    elif not group:
        term = Described(temp, "{} of step temporaries" + (shard_note if s_shard > 1 else ""), (Size(opt_temp),))
    else:
        text = "sub-group {:,} elements × {} B (flat gradients and their fp32 copy)"
        term = (
            Described(temp + group * each, "{} of step temporaries + " + text, (Size(temp), group, each))
            if temp
            else Described(group * each, text, (group, each))
        )
    return item(
        "optimizer_temp",
        "Optimizer temporaries",
        term,
        "Buffers the optimizer step allocates besides its states (see Optimizer states)",
        detail,
    )


@dataclass(frozen=True, kw_only=True)
class Transients:
    """The backward transients of a stage that depend on neither its gradients nor their sharding: the per-matmul
    copies, and what differentiating one layer adds."""

    dequant: Item | None
    fp8: Item | None
    dora: Item | None
    work: tuple[Item | None, ...]


_TRANSIENTS = Memo(4096)  # _transients by all they read (see transients)


def transients(ctx: StageContext, k: Kept) -> Transients:
    """The stage's transients, kept by what they read: what `k` reads (its key) and detail."""
    return remembered(_TRANSIENTS, kept_key(ctx) + (ctx.detail,), partial(_transients, ctx, k))


def _transients(ctx: StageContext, k: Kept) -> Transients:
    dequant, fp8, dora = dequantized_weight(ctx), fp8_casts(ctx), dora_weight_norm(ctx)
    return Transients(dequant=dequant, fp8=fp8, dora=dora, work=layer_work(ctx, k, dequant, fp8, dora))
