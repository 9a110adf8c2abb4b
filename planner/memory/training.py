"""One training step, phase by phase: the moments of each pipeline stage assembled from the model states,
activations, loss and backward transients, and the estimate of the most loaded stage."""

from __future__ import annotations

from functools import lru_cache, partial

from planner.catalog import Gpu
from planner.memory import checkpointing, ppo, techniques
from planner.memory.distillation import kd_loss, student_logits, teacher_forward, teacher_weights
from planner.memory.layout import Layout, StageContext, layout, stage_context
from planner.memory.losses import Loss, loss
from planner.memory.optimizers import Optimizer, optimizer, trainable
from planner.memory.preference import kl_forward, reference_forward, reference_weights
from planner.memory.quantize_load import zero3_whole_load_reserved
from planner.memory.result import Estimate, Item, Phase, Stage, phase
from planner.memory.rollout import Engine, engine, engine_gpu, weight_sync
from planner.memory.runtime import (
    ALLOCATED_ONCE,
    allocator_reserve,
    held_bytes,
    reserve_formula,
    runtime_items,
    within_device,
)
from planner.memory.states import States, flat_elements, model_states
from planner.memory.terms import fixed, item
from planner.plan.config import RL_OBJECTIVES, Plan
from planner.plan.dtypes import nbytes
from planner.units import format_bytes


def _last_stage_phases(
    ctx: StageContext,
    lo: Loss,
    held: tuple[Item | None, ...],
    casts_bwd: Item | None,
    gather: Item | None,
    fresh: partial[Item],
    kd: Item | None,
) -> list[Phase]:
    """The loss's backward (with the KD loss's saved tensors when distilling) and the output head's backward (the
    last stage only)."""
    logits = partial(item, "logits_loss", "Logits and loss", detail=ctx.detail)
    return [
        phase(
            "loss backward",
            "backward of the log-softmax over the vocabulary",
            *held,
            casts_bwd,
            gather,
            logits(lo.backward, lo.backward_note),
            kd,
        ),
        phase(
            "output head backward",
            "gradients of the output projection",
            *held,
            casts_bwd,
            gather,
            logits(lo.head, "Input of the output head's backward"),
            fresh(ctx.sp.head, counted=ctx.accum > 1) if lo.head_grad and not ctx.lora else None,
        ),
    ]


def _rollout_phases(ctx: StageContext, st: States, eng: Engine | None, ref: Item | None) -> list[Phase]:
    """GRPO's moments outside the policy's step: the rollout (the engine awake beside the policy's resident
    states, gradients freed by zero_grad; none of them with verl's param_offload and optimizer_offload, which move
    them to the host before the engine wakes: volcengine/verl@b178a3c verl/workers/fsdp_workers.py rollout_mode),
    then the reference's no-grad forward over the completions with the engine asleep again (TRL computes the
    reference log-probs in _generate_and_score_completions, after generation, before the step:
    huggingface/trl@f2cd577 trl/trainer/grpo_trainer.py)."""
    if eng is None and ref is None:
        return []
    static = (*st.static, reference_weights(ctx))
    policy = () if ctx.plan.workload.rl.offload_during_rollout else st.static
    phases = []
    if eng is not None:
        desc = "the engine awake: its weights and KV cache at its memory fraction beside the policy's resident states"
        phases.append(phase("rollout", desc, *policy, reference_weights(ctx), *eng.awake, weight_sync(ctx)))
    if ref is not None:
        asleep = eng.asleep if eng else ()
        desc = "the frozen reference's no-grad forward over the completions, before the policy's step"
        phases.append(phase("reference forward", desc, *static, *asleep, ref))
    return phases


def _phases(ctx: StageContext, st: States, opt: Optimizer, total: int, eng: Engine | None) -> tuple[list[Phase], int]:
    """The moments of the step on one stage, and the bytes of activations offloaded to the host."""
    sp, plan = ctx.sp, ctx.plan
    sv = checkpointing.saved(ctx)
    grads_held = st.grads if ctx.accum > 1 else _first_grads(ctx.detail)
    # a colocated engine holds what its sleep keeps through the step (everything without sleep mode); ppo's value
    # and reward models what they keep on the GPU
    critic, reward = ppo.companion(plan, "critic", ctx.detail), ppo.companion(plan, "reward", ctx.detail)
    static = (
        *st.static,
        reference_weights(ctx),
        teacher_weights(ctx),
        *(eng.asleep if eng else ()),
        *ppo.resident(ctx, critic, reward),
    )
    held = (*static, grads_held, sv.forward)
    tx = techniques.transients(ctx, sv.kept)
    # FSDP under pipelining keeps the stage's units gathered from a moment on, in place of the per-unit gather:
    # `gather` when backward ends, `early` until then (resharded after each forward unless kept from forward)
    per_unit = techniques.zero3_gather(ctx, st.stored)
    gather = techniques.unsharded_params(ctx, st.stored) or per_unit
    early = per_unit if ctx.unsharded_from == "backward" else gather
    copy = techniques.reduce_scatter_copy(ctx, nbytes(plan.precision.gradients), total)  # the bucket's dtype
    fresh = partial(techniques.fresh_gradients, ctx, st.grad_dtype_bytes, opt.temp, total)
    # a reward model's score head makes one number per sequence: no vocabulary logits, no loss over them
    lo = loss(ctx) if ctx.last and not ctx.layout.score_head else None
    logits = item("logits_loss", "Logits and loss", lo.forward, lo.forward_note, ctx.detail) if lo else None
    kl = kl_forward(ctx, sv.kept)
    desc = "KTO: the policy's no-grad forward on the KL batch, before its graph"
    phases = [phase("KL forward", desc, *static, grads_held, early, tx.dequant, kl)] if kl else []
    phases.append(
        phase(
            "forward",
            "end of forward: everything saved for backward is live",
            *held,
            sv.casts,
            early,
            tx.dequant,
            tx.fp8,
            tx.dora,
            logits,
            kd_loss(ctx, backward=False) if lo else None,
        )
    )
    if teacher := teacher_forward(ctx):
        desc = "the frozen teacher's no-grad forward while the student's graph and logits are held"
        phases.insert(
            -1, phase("teacher forward", desc, *held, sv.casts, early, tx.dequant, student_logits(ctx), teacher)
        )
    ref = reference_forward(ctx, sv.kept)
    objective = plan.workload.objective
    if ref and objective not in RL_OBJECTIVES:
        phases.append(
            phase(
                "reference forward",
                "the frozen reference's no-grad forward while the policy's graph is held",
                *held,
                sv.casts,
                early,
                tx.dequant,
                logits,
                ref,
            )
        )
    if lo:
        # Liger's fused loss runs the head inside its forward: no head matmul saved for backward
        casts = sv.head_casts if lo.head_grad else sv.casts_bwd
        phases += _last_stage_phases(ctx, lo, held, casts, early, fresh, kd_loss(ctx, backward=True))
    # a frozen layer's only gradients are its adapters' (FSDP1 flat parameters: the whole unit's)
    layer_unit = (
        sp.layer
        if not ctx.lora
        else sp.adapters // ctx.layers
        + (flat_elements(ctx, sp.layer, st.stored) if plan.parallelism.flat_params else 0)
    )
    phases.append(
        phase(
            "backward of the last layer",
            "the first layer backward reaches: all activations still live",
            *held,
            sv.casts_bwd,
            early,
            copy,
            *tx.work,
            fresh(layer_unit, counted=ctx.accum > 1, largest=sp.largest_matrix),
        )
    )
    phases.append(
        phase(
            "backward of the first layer",
            "the last layer backward reaches: gradients nearly all produced",
            *static,
            st.grads,
            sv.rest,
            sv.rest_casts,
            gather,
            copy,
            *tx.work,
            fresh(layer_unit, counted=True, largest=sp.largest_matrix),
        )
    )
    if ctx.first and not ctx.lora:  # a frozen embedding has no backward
        tied = plan.model.tie_embeddings and plan.parallelism.pipeline == 1
        phases.append(
            phase(
                "embedding backward",
                "dense gradient of the embedding table",
                *static,
                st.grads,
                sv.freed,
                gather,
                copy,
                fresh(sp.embedding, counted=not tied),
                techniques.tied_gradient_sum(ctx, sp.embedding, st.grad_dtype_bytes) if tied else None,
            )
        )
    if not plan.techniques.optimizer_in_backward:  # optimizer in backward has no separate step
        phases.append(
            phase(
                "optimizer step",
                "activations freed; the optimizer updates the weights",
                *static,
                st.step_grads,
                techniques.optimizer_temp(ctx, opt.temp, st.grad_dtype_bytes, total),
            )
        )
    if objective == "ppo":
        step_of = partial(_value_step, ctx.detail)
        return ppo.phases(ctx, st, eng, sv.kept, step_of) + phases, sv.host
    return _rollout_phases(ctx, st, eng, ref if objective == "grpo" else None) + phases, sv.host


def _value_step(detail: bool, plan: Plan, lay: Layout) -> Phase:
    """The peak moment of PPO's value-model update (planner/memory/ppo.py), its bytes as allocated."""
    return stage(plan, lay, 0, 0, 1 << 62, detail).peak


# keyed by detail, all the item reads
@lru_cache(maxsize=2)
def _first_grads(detail: bool) -> Item:
    """Gradients during the first micro-batch of a step: none yet."""
    return item(
        "gradients",
        "Gradients",
        fixed(0, "0 (not yet produced)"),
        "First micro-batch of the step: .grad was freed by zero_grad",
        detail,
    )


def stage(
    plan: Plan,
    lay: Layout,
    index: int,
    runtime_bytes: int,
    usable_bytes: int,
    detail: bool = True,
    eng: Engine | None = None,
) -> Stage:
    """One stage's phases on a device of `usable_bytes` (`lay`: the plan's model cut; `eng`: a colocated rollout
    engine); `detail=False` skips writing out formulas (for searches that need only bytes)."""
    ctx = stage_context(plan, lay, index, detail)
    tr, opt = trainable(lay, index), optimizer(lay, index, plan.precision)
    phases, host = _phases(ctx, model_states(ctx, tr, opt), opt, tr.total, eng)
    peak = max(phases, key=lambda ph: ph.allocated_bytes)
    # the allocator's reserve only grows, so the reserved peak is the largest over the phases
    # a colocated engine's memory is allocated once per wake-up, in its own pool: no churn in PyTorch's cache
    once = ALLOCATED_ONCE | {i.name for i in eng.awake} if eng else ALLOCATED_ONCE
    held = [held_bytes(ph, plan.techniques.expandable_segments, once) for ph in phases]
    outside = runtime_bytes + max(ph.outside_bytes for ph in phases)
    # what the model's load left reserved is a floor: the step's tensors reuse its free blocks, never release it
    floor, stepped = zero3_whole_load_reserved(plan), max(r for r, _ in held)
    reserved, flushed = within_device(
        max(stepped, floor), max(max(least for _, least in held), floor), outside, usable_bytes
    )
    return Stage(
        index=index,
        layers=ctx.layers,
        micro_batches_in_flight=ctx.in_flight,
        phases=tuple(phases),
        peak=peak,
        reserved_bytes=reserved,
        device_bytes=reserved + outside,
        host_bytes=host,
        cache_flushed=flushed,
        loaded_bytes=max(0, floor - stepped),
    )


def _all_stages(plan: Plan, runtime_bytes: int, usable_bytes: int, eng: Engine | None) -> tuple[Stage, ...]:
    lay = layout(plan)
    return tuple(stage(plan, lay, i, runtime_bytes, usable_bytes, True, eng) for i in range(plan.parallelism.pipeline))


def host_bytes(plan: Plan, lay: Layout) -> int:
    """CPU memory per GPU holding what `techniques.offload` moved off the GPU (`lay`: the plan's model cut)."""
    if plan.techniques.offload == "none":
        return 0
    prec, par = plan.precision, plan.parallelism
    index = max(range(par.pipeline), key=lambda i: lay.stages[i].total)
    sp, tr = lay.stages[index], trainable(lay, index)
    states = optimizer(lay, index, prec).states.bytes
    # fp32 master (if any) and fp32 gradients the CPU step reads, the optimizer states (+ the parameters)
    host = tr.total * ((4 if prec.master_weights == "fp32" else 0) + 4) + states
    if plan.techniques.offload == "optimizer_and_params":
        host += sp.total * nbytes(prec.activation_dtype)
    return -(-host // (par.data * par.context))


def training_estimate(plan: Plan, gpu: Gpu, detail: bool = True) -> Estimate:
    runtime = runtime_items(plan, detail)
    runtime_bytes = sum(i.bytes for i in runtime)
    # A middle stage of as many layers as the first holds a subset of its items, each no larger (no embedding,
    # fewer micro-batches in flight), so the most loaded stage is the first, the last, or, where the split is
    # uneven, the first of the middle stages with the most layers.
    p, lay = plan.parallelism.pipeline, layout(plan)
    split = lay.split
    middle = max(range(1, p - 1), key=lambda i: (split[i], -i), default=None)
    indices = [0] + ([p - 1] if p > 1 else []) + ([middle] if middle is not None and split[middle] > split[0] else [])
    eng = engine(plan, gpu, detail)
    edges = tuple(stage(plan, lay, i, runtime_bytes, gpu.usable_bytes, detail, eng) for i in indices)
    worst = max(edges, key=lambda s: (s.device_bytes, -s.index))
    reserve = allocator_reserve(
        "Allocator reserve",
        worst.reserved_bytes - worst.peak_allocated_bytes - worst.loaded_bytes,
        reserve_formula(plan.techniques.expandable_segments, worst.cache_flushed),
        "Freed blocks the caching allocator keeps (its rules replayed on recorded steps: bench/allocator_replay.py)",
        detail,
    )
    loaded = _whole_load(plan, worst.loaded_bytes, detail)
    return Estimate(
        plan=plan,
        gpu=gpu,
        items=worst.peak.items + loaded + (reserve,) + runtime,
        phase=worst.peak.name,
        stage=worst.index,
        peak_allocated_bytes=worst.peak_allocated_bytes,
        peak_reserved_bytes=worst.reserved_bytes,
        device_bytes=worst.device_bytes,
        usable_bytes=gpu.usable_bytes,
        # a level-1 sleeping engine's weights wait in host memory
        host_bytes=host_bytes(plan, lay) + max(s.host_bytes for s in edges) + (eng.host_bytes if eng else 0),
        runtime_bytes=runtime_bytes,
        all_stages=partial(_all_stages, plan, runtime_bytes, gpu.usable_bytes, eng),
        cache_flushed=worst.cache_flushed,
        engine=engine_gpu(plan, gpu, detail),
    )


def _whole_load(plan: Plan, loaded: int, detail: bool) -> tuple[Item, ...]:
    """The reserved bytes a ZeRO-3 rank keeps from loading the whole quantized model, beyond the step's own
    reserve (planner/memory/quantize_load.py zero3_whole_load_reserved)."""
    if not loaded:
        return ()
    floor = zero3_whole_load_reserved(plan)
    formula = (
        f"{format_bytes(floor)} reserved once ZeRO-3 partitioned the {plan.precision.weights} model each "
        f"rank loaded whole (replayed) − the step's own {format_bytes(floor - loaded)}"
    )
    return (
        item(
            "zero3_load",
            "Segments left by loading the whole model",
            fixed(loaded, formula),
            "bitsandbytes models skip zero.Init: each rank quantizes the whole model, then DeepSpeed keeps its "
            "partitions in the segments the whole tensors held; empty_cache frees only empty segments",
            detail,
            "reserved",
        ),
    )


def states_floor(plan: Plan) -> int:
    """A lower bound of the plan's device bytes, a fraction of an estimate's work: the model states its first
    stage holds at every moment of the step (`States.static`: weights, master weights, optimizer states,
    buckets, workspaces) and the runtime outside PyTorch. Every moment holds them, and the device total is at
    least the largest moment plus the runtime, so a search skips a layout whose floor exceeds a GPU."""
    lay = layout(plan)
    ctx = stage_context(plan, lay, 0, False)
    tr, opt = trainable(lay, 0), optimizer(lay, 0, plan.precision)
    return sum(i.bytes for i in model_states(ctx, tr, opt).static) + sum(i.bytes for i in runtime_items(plan, False))
