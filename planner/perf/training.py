"""How long a training step takes on one GPU of the most loaded pipeline stage, item by item.

A step is `m` micro-batches (gradient accumulation, or the pipeline's micro-batches). Each runs forward and
backward: matmuls and attention at the GPU's achievable rates (planner/perf/work.py), elementwise ops at its
HBM bandwidth, and recomputation where checkpointing asks for it. Tensor-, context- and expert-parallel
collectives and pipeline sends happen inside each micro-batch; data-parallel gradient (and FSDP parameter)
collectives overlap the compute they are scheduled beside, and only what is left over is on the critical
path. The pipeline bubble, the optimizer step and offload transfers follow. Collective costs are
planner/perf/rates.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache, partial

from planner.catalog import Gpu
from planner.errors import PlanError
from planner.memory.distillation import teacher_plan
from planner.memory.layout import Layout, layout, unsharded_under_pipelining
from planner.memory.rollout import rollout_wave
from planner.perf.flops import model_flops_per_token
from planner.perf.gemm import Gemm, gemms_backward_s, gemms_s
from planner.perf.ppo import ppo_items
from planner.perf.rates import Collective, Group, Rates, collective_s, mfu_reference, rates, supported_rates
from planner.perf.result import Seconds, StepTime, TimeItem, step_of
from planner.perf.serving import serving_time
from planner.perf.work import (
    ATTENTION_BACKWARD,
    BACKWARD_ELEMENTWISE,
    ROWWISE_KERNEL_FRACTION,
    TP_SIDES,
    TpSides,
    keys_per_query,
    layer_work,
    matmul_elem,
    torchao_rowwise,
)
from planner.plan.config import ADAPTER_TASKS, RL_OBJECTIVES, Parallelism, Plan, Rl
from planner.plan.dtypes import QUANTIZED, bits, nbytes
from planner.plan.models import attention_widths, lora_params_per_layer
from planner.plan.sac import op_sac_projections
from planner.search.memo import Memo, remembered

# Cross-entropy bytes per logit: upcast to fp32 (r2 w4), log-softmax (r4 w4), its gradient (r4 w4) and the
# downcast of the gradient (r4 w2) = 28 whether or not it runs in chunks; Liger's fused kernel keeps the
# softmax on chip and writes the gradient in place (r2 w2 ≈ 4, + the bf16 logits it makes chunk by chunk: 6).
LOSS_BYTES = {"full": 28, "chunked": 28, "fused": 6}
# Optimizer state elements per parameter, each read and written by the step
STATES = {
    "adamw": 2,
    "paged_adamw": 2,
    "adamw_8bit": 2,
    "paged_adamw_8bit": 2,
    "adafactor": 0,
    "lion": 1,
    "muon": 1,
    "sgd": 0,
    "sgd_momentum": 1,
}
STATE_BYTES_8BIT = 1
# An offloaded optimizer steps on the host, streaming its states through host memory: a dual-socket server's
# DDR5 (2 × 8 channels × 4,800 MT/s × 8 B = 614 GB/s, ~70 % achievable) shared by 8 GPUs gives ~50 GB/s per
# GPU (DeepSpeed's CPU-Adam is bandwidth-bound, Ren et al. 2021, ZeRO-Offload §5).
HOST_BYTES_PER_S_PER_GPU = 50e9
# Pipeline bubble: (p − 1) idle micro-batch slots per step under GPipe and 1F1B, 1/v of that with v interleaved
# chunks (Narayanan et al. 2021), about a third with zero-bubble ZB-H1 (Qi et al. 2023).
BUBBLE_DIVISOR = {"interleaved_1f1b": None, "zero_bubble": 3}


@dataclass(frozen=True, kw_only=True)
class _Work:
    """What one micro-batch asks of one GPU of the most loaded stage, before any rate: the same on every GPU
    type, so the recommender computes it once per strategy."""

    layer_gemms: tuple[Gemm, ...]  # the stage's layers, forward
    op_sac_gemms: tuple[Gemm, ...]  # those of them op-level selective checkpointing runs again (planner/plan/sac.py)
    tp_sides: TpSides  # the stage's layers' matmuls beside each of a layer's tensor-parallel collectives
    other_gemms: tuple[Gemm, ...]  # the output head and LoRA adapters, forward
    attention_flops: float  # the stage's attention cores, forward
    attention_work: float  # what their kernels take the time of (LayerWork.attention_work)
    elementwise_bytes: float  # the stage's layers, forward
    fp8_cast_bytes: tuple[float, ...]  # three: the stage's layers' float8 casts (LayerWork's)
    loss_bytes: float
    dequant_bytes: float  # quantized frozen weights made 16-bit again, per pass
    frozen: bool  # the base weights get no weight gradient (LoRA, QLoRA)
    dense_layers: int
    moe_layers: int
    params: float  # on this GPU before ZeRO
    trainable: float


_WORK = Memo(4096)  # _work_of by the plan parts it reads (see _work)


def _work(plan: Plan) -> _Work:
    """The plan's work, kept by what it reads: the model's cut (with the adapters), the framework (its float8
    casts), the precision, the micro-batch's tokens and their split, and the attention, compile and loss settings
    (the same for every GPU type, count, ZeRO stage and recomputation a search tries)."""
    par, tech, wl, lay = plan.parallelism, plan.techniques, plan.workload, layout(plan)
    key = (
        lay,
        plan.framework,
        plan.precision,
        tech.attention,
        tech.compiled_blocks,
        tech.loss,
        wl.sequences_per_forward,
        wl.sequence_length,
        wl.logit_positions,
        par.context,
        par.sequence_parallel,
    )
    return remembered(_WORK, key, partial(_work_of, plan, lay))


def _work_of(plan: Plan, lay: Layout) -> _Work:
    m, par, wl = plan.model, plan.parallelism, plan.workload
    tokens = wl.sequences_per_forward * wl.sequence_length / par.context
    keys = keys_per_query(plan, wl.sequence_length)
    dense, moe = lay.largest
    works = [(n, layer_work(plan, tokens, keys, is_moe)) for n, is_moe in ((dense, False), (moe, True)) if n]
    vocab = -(-m.vocab_size // par.tensor)
    # the head and loss run over the positions whose logits are kept (GRPO: the completions, Workload.logit_positions)
    logit_tokens = min(tokens, wl.sequences_per_forward * wl.logit_positions)
    params, trainable = _stage_params(plan, lay, dense, moe)
    return _Work(
        layer_gemms=tuple(g._replace(repeats=n * g.repeats) for n, w in works for g in w.gemms),
        op_sac_gemms=tuple(g._replace(repeats=n * g.repeats) for n, w in works for g in w.op_sac_gemms),
        tp_sides=tuple(
            tuple(g._replace(repeats=n * g.repeats) for n, w in works for g in w.tp_sides[side])
            for side in range(len(TP_SIDES))
        ),
        # a reward model's score head (h × 1) replaces the vocabulary head (planner/memory/layout.py)
        other_gemms=(
            Gemm(1, logit_tokens, m.hidden_size, 1 if lay.score_head else vocab, matmul_elem(plan)),
            *_adapter_gemms(plan, lay, tokens, dense + moe),
        ),
        attention_flops=sum(n * w.attention_flops for n, w in works),
        attention_work=sum(n * w.attention_work for n, w in works),
        elementwise_bytes=sum(n * w.elementwise_bytes for n, w in works),
        fp8_cast_bytes=tuple(sum(n * w.fp8_cast_bytes[i] for n, w in works) for i in range(3)),
        loss_bytes=0 if lay.score_head else logit_tokens * vocab * LOSS_BYTES[plan.techniques.loss],
        dequant_bytes=_dequant_bytes(plan, lay, dense + moe),
        frozen=wl.task in ADAPTER_TASKS,
        dense_layers=dense,
        moe_layers=moe,
        params=params,
        trainable=trainable,
    )


@dataclass(frozen=True, kw_only=True)
class _MicroBatch:
    """One micro-batch's work on one GPU (seconds)."""

    forward_compute: float  # matmuls and attention
    backward_compute: float
    forward_memory: float  # elementwise traffic
    backward_memory: float
    recompute: float
    flops: float  # forward + backward FLOPs run (no recomputation)
    layers: int  # layers on this GPU's stage
    tp_side_s: tuple[float, ...]  # forward matmuls beside each of a layer's TP collectives, all layers (async TP)


def _micro_batch(plan: Plan, w: _Work, r: Rates) -> _MicroBatch:
    fwd = replace(r, matmul_flops=r.matmul_flops * ROWWISE_KERNEL_FRACTION) if torchao_rowwise(plan) else r
    layer_mm, layer_flops = gemms_s(w.layer_gemms, fwd)
    other_mm, other_flops = gemms_s(w.other_gemms, r)
    attention = w.attention_work / r.attention_flops
    elementwise = w.elementwise_bytes / r.hbm_bytes
    dequant = w.dequant_bytes / r.hbm_bytes
    activation_casts, weight_casts, backward_casts = w.fp8_cast_bytes
    par = plan.parallelism  # a weight all-gathered in float8 is cast on its shard
    weight_casts /= par.data * par.context if plan.precision.fp8_all_gather else 1
    casts = (activation_casts + weight_casts) / r.hbm_bytes
    grads = 0 if w.frozen else 1  # frozen weights get no weight gradient: backward is the input gradient alone
    backward_mm = gemms_backward_s(w.layer_gemms, r, not w.frozen) + gemms_backward_s(w.other_gemms, r, True)
    op_sac = gemms_s(w.op_sac_gemms, fwd)[0] if plan.techniques.activation_checkpointing == "selective_op" else 0.0
    async_tp = par.async_tp and par.tensor > 1  # only async TP reads the matmuls beside each collective
    return _MicroBatch(
        forward_compute=layer_mm + other_mm + attention,
        backward_compute=backward_mm + ATTENTION_BACKWARD * attention,
        forward_memory=elementwise + casts + w.loss_bytes / r.hbm_bytes + dequant,
        backward_memory=BACKWARD_ELEMENTWISE * elementwise + backward_casts / r.hbm_bytes + dequant,
        recompute=_recompute_s(plan, layer_mm + attention, attention, op_sac, elementwise + casts + dequant),
        flops=(2 + grads) * layer_flops + 3 * other_flops + 3 * w.attention_flops,
        layers=w.dense_layers + w.moe_layers,
        tp_side_s=tuple(gemms_s(side, fwd)[0] for side in w.tp_sides) if async_tp else (),
    )


def _recompute_s(plan: Plan, layers_s: float, attention_s: float, op_sac_s: float, elementwise_s: float) -> float:
    """Forward work checkpointing runs again in backward: every layer (full), every k-th (every_k), the
    attention core of eager attention (selective), or the projections torchtitan's op-level policy does not
    keep and the elementwise ops between them (selective_op, `op_sac_s`: planner/plan/sac.py)."""
    tech = plan.techniques
    ckpt = tech.activation_checkpointing
    if ckpt == "full":
        return layers_s + elementwise_s
    if ckpt == "every_k":
        layers = plan.model.num_layers
        return (layers_s + elementwise_s) * (layers // tech.checkpoint_every) / layers
    if ckpt == "selective" and tech.attention == "eager":
        return attention_s
    if ckpt == "selective_op":
        return op_sac_s + elementwise_s
    return 0.0


def _adapter_gemms(plan: Plan, lay: Layout, tokens: float, layers: int) -> tuple[Gemm, ...]:
    """The LoRA adapters' forward on the stage: two skinny matmuls per target and layer."""
    if plan.workload.task not in ADAPTER_TASKS:
        return ()
    shapes, rank = lay.shapes, plan.workload.lora.rank
    elem = nbytes(plan.precision.activation_dtype)
    return tuple(
        Gemm(layers, tokens, a, b, elem)
        for t in plan.workload.lora.targets
        for a, b in ((shapes[t][0], rank), (rank, shapes[t][1]))
    )


def _dequant_bytes(plan: Plan, lay: Layout, layers: int) -> float:
    """Quantized frozen weights (QLoRA's NF4, int4, int8) are dequantized to the compute dtype before each matmul
    (bitsandbytes' dequantize then matmul): read the packed weights, write the 16-bit copy, once per pass."""
    weights = plan.precision.weights
    if plan.workload.task not in ADAPTER_TASKS or weights not in QUANTIZED:
        return 0.0
    params = sum(k * n for k, n in lay.shapes.values())
    return layers * params * (bits(weights) / 8 + nbytes(plan.precision.activation_dtype))


# --- communication ------------------------------------------------------------------------------------------------
# keyed by the parallelism section, all the communicators read: a search times each layout on every GPU type
@lru_cache(maxsize=1024)
def _groups(par: Parallelism) -> dict[str, Group]:
    """Each parallel dimension's communicator, in the rank order tensor, context, data, pipeline."""
    t, c, d = par.tensor, par.context, par.data
    return {
        "tensor": Group(size=t, stride=1),
        "context": Group(size=c, stride=t),
        "data": Group(size=d * c, stride=t),
        "expert": Group(size=par.expert, stride=t),
        "pipeline": Group(size=par.pipeline, stride=t * c * d),
    }


def _exposed(name: str, label: str, comm: tuple[float, float, str], formula: str, note: str) -> TimeItem:
    """A communication item from (seconds, seconds of compute it overlaps, the link it runs over): what the
    compute cannot hide stays on the critical path."""
    comm_s, overlap_s, over = comm
    exposed = max(0.0, comm_s - overlap_s)
    return TimeItem(
        name=name,
        label=label,
        kind="communication",
        seconds=exposed,
        hidden_s=comm_s - exposed,
        formula=f"{formula} = {comm_s:.4g} s, of which {comm_s - exposed:.4g} s hidden",
        note=note,
        over=over,
    )


def _model_parallel_items(plan: Plan, r: Rates, mb: _MicroBatch, steps: int, moe_layers: int) -> list[TimeItem]:
    """Tensor-, context-, expert- and pipeline-parallel communication of the step's `steps` micro-batches."""
    m, par, wl = plan.model, plan.parallelism, plan.workload
    g = _groups(par)
    tokens = wl.sequences_per_forward * wl.sequence_length / par.context
    act = tokens * m.hidden_size * nbytes(plan.precision.activation_dtype)
    passes = 3 if plan.techniques.activation_checkpointing == "full" else 2  # forward, backward (+ recomputation)
    items = []
    if par.tensor > 1 and par.async_tp:
        items.append(_async_tp_item(plan, r, mb, steps, act, passes))
    elif par.tensor > 1:  # two all-reduces (or all-gather + reduce-scatter with SP) per layer and pass
        one = collective_s("all_reduce", act, g["tensor"], r)
        comm = steps * mb.layers * 2 * passes * one
        items.append(
            _exposed(
                "tensor_parallel",
                "Tensor-parallel collectives",
                (comm, 0.0, g["tensor"].where(r)),
                f"{steps} × {mb.layers} layers × 2 × {passes} passes × {one:.3g} s "
                f"(all-reduce of {act:,.0f} B over {par.tensor} on the {g['tensor'].where(r)})",
                "exposed: Megatron-style TP waits for each collective, unless async TP overlaps it with the matmuls",
            )
        )
    if par.context > 1:  # ring attention passes K and V blocks round the ring, overlapped with attention
        _, k_width, v_width, _ = attention_widths(m, par.tensor)
        kv = tokens * (k_width + v_width) * nbytes(plan.precision.activation_dtype)
        one = collective_s("send", kv, g["context"], r)
        comm = steps * mb.layers * 3 * (par.context - 1) * one  # forward, and K, V + their gradients backward
        items.append(
            _exposed(
                "context_parallel",
                "Context-parallel ring exchange",
                (comm, steps * (mb.forward_compute + mb.backward_compute), g["context"].where(r)),
                f"{steps} × {mb.layers} layers × 3 × ({par.context} − 1) hops × {one:.3g} s",
                "overlapped with the attention of the block in hand (ring attention)",
            )
        )
    if par.expert > 1 and m.num_experts:
        routed = act * m.experts_per_token
        one = collective_s("all_to_all", routed, g["expert"], r)
        comm = steps * moe_layers * 2 * passes * one
        items.append(
            _exposed(
                "expert_parallel",
                "Expert-parallel all-to-all",
                (comm, 0.0, g["expert"].where(r)),
                f"{steps} × MoE layers × 2 (dispatch, combine) × {passes} passes × {one:.3g} s",
                "exposed: the experts wait for their tokens",
            )
        )
    if par.pipeline > 1:
        one = collective_s("send", act / par.tensor if par.sequence_parallel else act, g["pipeline"], r)
        items.append(
            _exposed(
                "pipeline_parallel",
                "Pipeline sends",
                (steps * 2 * one, 0.0, g["pipeline"].where(r)),
                f"{steps} micro-batches × 2 (activation forward, gradient backward) × {one:.3g} s",
                "exposed between stages",
            )
        )
    return items


def _async_tp_item(plan: Plan, r: Rates, mb: _MicroBatch, steps: int, act: float, passes: int) -> TimeItem:
    """Async TP (torch's micro-pipelined all-gather-matmul and matmul-reduce-scatter): each of a layer's four
    collectives of the forward (and of a full recomputation's forward) is split into t chunks that move while
    the chunks of the matmul beside it run (Wang et al., ASPLOS 2023, "Overlap Communication with Dependent
    Computation via Decomposition"): (t − 1) × max(0, c/(t − 1) − m/t) of each stays exposed. Only the matmuls
    beside a collective hide it: attention and the elementwise ops do not. Backward's collectives stay exposed:
    the column-parallel weight gradient contracts over the gathered tokens, which the decomposition does not
    split (published: ~29 % faster forward but ~8 % end to end for Llama 3 8B and 70B, PyTorch dev-discuss
    "Introducing Async Tensor Parallelism in PyTorch", 2024)."""
    t, group = plan.parallelism.tensor, _groups(plan.parallelism)["tensor"]
    one = collective_s("all_gather", act, group, r)  # an all-gather or a reduce-scatter of the activations
    overlapped = passes - 1  # the forward, and a full recomputation's
    exposed_fwd = sum((t - 1) * max(0.0, one / (t - 1) - side_s / mb.layers / t) for side_s in mb.tp_side_s)
    comm = steps * mb.layers * len(mb.tp_side_s) * passes * one
    exposed = steps * mb.layers * (overlapped * exposed_fwd + len(mb.tp_side_s) * one)
    return _exposed(
        "tensor_parallel",
        "Tensor-parallel collectives",
        (comm, comm - exposed, group.where(r)),
        f"{steps} × {mb.layers} layers × {len(mb.tp_side_s)} × {passes} passes × {one:.3g} s "
        f"(all-gather or reduce-scatter of {act:,.0f} B over {t} on the {group.where(r)})",
        "async TP hides a forward collective behind the matmul beside it, chunk by chunk; backward's stay exposed",
    )


def _stage_params(plan: Plan, lay: Layout, dense: int, moe: int) -> tuple[float, float]:
    """(parameters on one GPU of the stage of `dense` and `moe` layers before ZeRO, of which trainable)."""
    m, par, counts = plan.model, plan.parallelism, lay.counts
    # the first stage's table, or the last stage's head and final norm
    ends = (counts.embedding + counts.lm_head + counts.final_norm) / (1 if par.pipeline == 1 else 2)
    params = dense * counts.layer + moe * counts.moe_layer + ends
    if plan.workload.task not in ADAPTER_TASKS:
        return params, params
    lora = plan.workload.lora
    return params, (dense + moe) * lora_params_per_layer(m, lora.targets, lora.rank, par.tensor)


def _data_parallel_item(plan: Plan, r: Rates, w: _Work, mb: _MicroBatch, steps: int) -> TimeItem | None:
    """Gradient (and ZeRO-3 parameter) collectives over the data × context ranks, overlapped with the compute
    they run beside: DDP's bucketed all-reduce with the last backward; ZeRO-2's reduce-scatter with each
    backward; FSDP's all-gathers with the layer before (prefetch) and its reduce-scatter with backward, all
    but the first unit's gather. Under a torch pipelining schedule (planner/memory/layout.py,
    unsharded_under_pipelining) FSDP reduces once a step, after the last micro-batch, and gathers a stage's
    weights once a step where they stay gathered from the first forward (torchtitan), or in every forward and
    the first backward where they stay gathered from the first backward (PyTorch's default)."""
    par, prec = plan.parallelism, plan.precision
    group = _groups(par)["data"]
    if group.size == 1:
        return None
    params, trainable = w.params, w.trainable
    grads = trainable * nbytes(prec.gradients)
    gathered = params * (1 if prec.fp8_all_gather else nbytes(prec.activation_dtype))
    fwd, bwd = mb.forward_compute + mb.forward_memory, mb.backward_compute + mb.backward_memory
    z = par.zero_stage
    once, kept_from = unsharded_under_pipelining(plan)
    if z == 3:
        ag, rs = collective_s("all_gather", gathered, group, r), collective_s("reduce_scatter", grads, group, r)
        fg, bg = {"forward": (1, 0), "backward": (steps, 1)}.get(kept_from, (steps, steps))  # gathers fwd, bwd
        reduces = 1 if once else steps  # the last backwards reduce
        both = max(0, bg + reduces - steps)  # backwards that gather and reduce
        comm = (fg + bg) * ag + reduces * rs
        exposed = (
            fg * max(0.0, ag - fwd)
            + both * max(0.0, ag + rs - bwd)
            + (bg - both) * max(0.0, ag - bwd)
            + (reduces - both) * max(0.0, rs - bwd)
            + ag / max(mb.layers, 1)
        )
        formula = (
            f"{steps} × (2 all-gathers × {ag:.3g} s + reduce-scatter {rs:.3g} s)"
            if not once
            else f"{fg + bg} all-gathers × {ag:.3g} s + {reduces} reduce-scatter × {rs:.3g} s"
        )
    elif z == 2:
        rs, ag = collective_s("reduce_scatter", grads, group, r), collective_s("all_gather", gathered, group, r)
        reduces = 1 if once else steps
        comm, exposed = reduces * rs + ag, reduces * max(0.0, rs - bwd) + ag
        formula = f"{reduces} × reduce-scatter {rs:.3g} s + all-gather of the updated weights {ag:.3g} s"
    else:
        kind: Collective = "all_reduce" if z == 0 else "reduce_scatter"
        sync = collective_s(kind, grads, group, r)
        ag = collective_s("all_gather", gathered, group, r) if z == 1 else 0.0
        comm, exposed = sync + ag, max(0.0, sync - bwd) + ag
        formula = f"{kind.replace('_', '-')} of the gradients {sync:.3g} s" + (
            f" + all-gather of the updated weights {ag:.3g} s" if z == 1 else ""
        )
    exposed = min(exposed, comm)
    return TimeItem(
        name="data_parallel",
        label="Data-parallel collectives",
        kind="communication",
        seconds=exposed,
        hidden_s=comm - exposed,
        over=group.where(r),
        formula=f"{formula} = {comm:.4g} s over {group.size} ranks on the {group.where(r)}, "
        f"{comm - exposed:.4g} s hidden",
        note=f"ZeRO-{z}: gradients in {prec.gradients}, weights gathered in "
        f"{'fp8' if prec.fp8_all_gather else prec.activation_dtype}",
    )


def _optimizer_item(plan: Plan, r: Rates, w: _Work) -> TimeItem:
    """The optimizer step streams its shard of master weights, gradients and states through HBM once."""
    prec, par = plan.precision, plan.parallelism
    shard = w.trainable / (par.data * par.context if par.zero_stage else 1)
    state = STATE_BYTES_8BIT if prec.optimizer.endswith("8bit") else nbytes(prec.optimizer_state)
    # read and write the fp32 master and write its 16-bit copy, or read and write the 16-bit weights themselves
    weights = 8 + nbytes(prec.activation_dtype) if prec.master_weights == "fp32" else 2 * nbytes(prec.activation_dtype)
    per_param = weights + nbytes(prec.gradients) + 2 * STATES[prec.optimizer] * state
    host = plan.techniques.offload != "none"
    cost = Seconds(
        amount=shard * per_param, unit="B", rate=HOST_BYTES_PER_S_PER_GPU if host else r.hbm_bytes, rate_unit="B/s"
    )
    return TimeItem(
        name="optimizer",
        label="Optimizer step",
        kind="host" if host else "memory",
        seconds=cost.seconds,
        hidden_s=0.0,
        formula=f"{shard:,.0f} params × {per_param} B ({cost.text})",
        note=f"{prec.optimizer} on the {'host (offloaded)' if host else 'GPU'}: master weights, gradient "
        f"and states read and written once",
    )


def _offload_item(plan: Plan, r: Rates, w: _Work, steps: int) -> TimeItem | None:
    """Offloaded states cross PCIe: gradients down and updated weights up once per step; offloaded weights come
    up for every micro-batch's forward and backward."""
    off = plan.techniques.offload
    if off == "none":
        return None
    par = plan.parallelism
    shard = w.params / (par.data * par.context)
    moved = w.trainable / (par.data * par.context) * 4 * 2 + (
        2 * steps * shard * 2 if off == "optimizer_and_params" else 0
    )
    cost = Seconds(amount=moved, unit="B", rate=r.pcie_bytes, rate_unit="B/s")
    return TimeItem(
        name="offload",
        label="Offload transfers (PCIe)",
        kind="host",
        seconds=cost.seconds,
        hidden_s=0.0,
        formula=cost.text,
        note="exposed: the step waits for the gradients and the updated weights",
    )


def _compute_items(plan: Plan, r: Rates, mb: _MicroBatch, steps: int) -> list[TimeItem]:
    compute = steps * (mb.forward_compute + mb.backward_compute)
    memory = steps * (mb.forward_memory + mb.backward_memory)
    items = [
        TimeItem(
            name="compute",
            label="Matmuls and attention",
            kind="compute",
            seconds=compute,
            hidden_s=0.0,
            formula=f"{steps} micro-batches × ({mb.forward_compute:.4g} s forward + "
            f"{mb.backward_compute:.4g} s backward); {steps * mb.flops:,.4g} FLOP at "
            f"{r.matmul_flops / 1e12:,.0f} TFLOP/s achievable where compute-bound",
            note=f"each matmul by roofline; {r.matmul_efficiency:.0%} of the dense peak ({r.efficiency_source})",
        ),
        TimeItem(
            name="elementwise",
            label="Norms, activations, loss",
            kind="memory",
            seconds=memory,
            hidden_s=0.0,
            formula=f"{steps} × ({mb.forward_memory:.4g} s + {mb.backward_memory:.4g} s) "
            f"at {r.hbm_bytes / 1e12:.2f} TB/s",
            note="bytes moved by the elementwise ops (fused by torch.compile where it is on)",
        ),
    ]
    items += _no_grad_items(plan, mb, steps)
    if mb.recompute:
        items.append(
            TimeItem(
                name="recompute",
                label="Recomputation",
                kind="compute",
                seconds=steps * mb.recompute,
                hidden_s=0.0,
                formula=f"{steps} × {mb.recompute:.4g} s",
                note=_recompute_note(plan),
            )
        )
    return items


def _no_grad_items(plan: Plan, mb: _MicroBatch, steps: int) -> list[TimeItem]:
    """The no-grad forwards over the policy's micro-batch, no backward: the reference's (a separate reference, or
    the policy's base with adapters off: huggingface/trl@f2cd577 trl/trainer/dpo_trainer.py _compute_loss
    `with torch.no_grad(): ref_model(...)`), two for KTO (its KL batch and its completions) and KTO's policy
    forward on the KL batch (trl@f2cd577 trl/trainer/kto_trainer.py _compute_loss, _compute_kl_logps). PPO's
    reference runs once per rollout, in its experience item (planner/perf/ppo.py)."""
    wl = plan.workload
    kto = wl.objective == "preference" and wl.preference.loss_type == "kto"
    one = mb.forward_compute + mb.forward_memory
    counts = (
        ("reference_forward", "Reference forward", 2 if kto else 1, _steps_reference(plan)),
        ("kl_forward", "Policy KL forward", 1, kto),
    )
    return [
        TimeItem(
            name=name,
            label=label,
            kind="compute",
            seconds=steps * n * one,
            hidden_s=0.0,
            formula=f"{steps} × {n} × ({mb.forward_compute:.4g} s + {mb.forward_memory:.4g} s) forward only",
            note=f"{n} no-grad forward(s) over the micro-batch's {wl.sequences_per_forward} sequences",
        )
        for name, label, n, on in counts
        if on
    ]


def _teacher_item(plan: Plan, r: Rates, steps: int) -> TimeItem | None:
    """The distillation teacher's no-grad forward over the student's micro-batch (pytorch/torchtune@bd2a0fc
    recipes/knowledge_distillation_single_device.py _loss_step), timed as the teacher model's own forward."""
    if plan.workload.objective != "distillation":
        return None
    tp = teacher_plan(plan)
    mb = _micro_batch(tp, _work(tp), r)
    return TimeItem(
        name="teacher_forward",
        label="Teacher forward",
        kind="compute",
        seconds=steps * (mb.forward_compute + mb.forward_memory),
        hidden_s=0.0,
        formula=f"{steps} × ({mb.forward_compute:.4g} s + {mb.forward_memory:.4g} s) {tp.model.preset} forward only",
        note="the frozen teacher's no-grad forward over the student's tokens",
    )


def _steps_reference(plan: Plan) -> bool:
    """A reference forward runs in each step: a separate reference, or the policy's base with adapters off."""
    wl = plan.workload
    return wl.reference in ("separate", "adapters_disabled") and wl.objective != "ppo"


def _recompute_note(plan: Plan) -> str:
    ckpt = plan.techniques.activation_checkpointing
    if ckpt != "selective_op":
        return f"{ckpt} checkpointing runs forward work again"
    again = [" ".join(names) for names, fate in op_sac_projections(plan) if fate == "recomputed"]
    experts = "; MoE layers' router and routed experts" if plan.model.num_experts else ""
    return (
        f"op-level selective checkpointing runs again the projections it does not keep ({', '.join(again)}"
        f"{experts}) and the elementwise ops (planner/plan/sac.py)"
    )


def _bubble_item(plan: Plan, per_micro_batch_s: float) -> TimeItem | None:
    par = plan.parallelism
    if par.pipeline == 1:
        return None
    divisor = {"interleaved_1f1b": par.virtual_stages, "zero_bubble": 3}.get(par.pipeline_schedule, 1)
    seconds = (par.pipeline - 1) / divisor * per_micro_batch_s
    return TimeItem(
        name="bubble",
        label="Pipeline bubble",
        kind="bubble",
        seconds=seconds,
        hidden_s=0.0,
        formula=f"({par.pipeline} − 1) / {divisor} × {per_micro_batch_s:.4g} s per micro-batch",
        note=f"{par.pipeline_schedule}: stages idle while the pipeline fills and drains",
    )


@dataclass(frozen=True, kw_only=True)
class Rollout:
    """One step's generation on one engine replica: its batch in waves of what its KV cache holds at once."""

    wave: Plan  # the serving plan at one wave's batch
    waves: int
    holds: int  # completions its KV cache holds at once
    wave_s: float

    @property
    def seconds(self) -> float:
        return self.waves * self.wave_s


def rollout_time(plan: Plan, gpu: Gpu, rl: Rl | None = None, count: int | None = None) -> Rollout | None:
    """The rollout of a GRPO plan's step (`rl`, `count`: a probe's engine layout and training GPUs, as
    planner/memory/rollout.py rollout_wave): the serving model's time (planner/perf/serving.py) of each wave.
    None: no tensor cores for the engine's dtype."""
    one, waves, holds = rollout_wave(plan, gpu, rl, count)
    t = serving_time(one, gpu)
    return None if t is None else Rollout(wave=one, waves=waves, holds=holds, wave_s=t.step_time_s)


def _rollout_item(plan: Plan, gpu: Gpu, step_s: float) -> TimeItem | None:
    """GRPO's generation of the step's completions (`step_s`: the policy's step without it), on one engine
    replica (rollout_time). It runs before the policy's step, not overlapped with it (TRL
    _generate_and_score_completions runs in training_step: huggingface/trl@f2cd577 trl/trainer/grpo_trainer.py;
    in server mode the main process waits on vllm_client.generate: trl/generation/vllm_generation.py generate),
    unless a server engine generates the next step's completions meanwhile (workload.rl.async_rollout:
    volcengine/verl@b178a3c verl/experimental/one_step_off_policy/ray_trainer.py fit, OpenRLHF/OpenRLHF@021d1b0
    openrlhf/cli/train_ppo_ray.py `--async_train`): then only what outlasts the step shows. A server's engine is
    on GPUs like the trainer's. ppo: one rollout feeds epochs × mini_batches optimizer steps, its time shared
    among them."""
    wl = plan.workload
    if wl.objective not in RL_OBJECTIVES:
        return None
    rl, ro = wl.rl, rollout_time(plan, gpu)
    if ro is None:
        return None
    inf = ro.wave.workload.inference
    shared = wl.ppo.epochs * wl.ppo.mini_batches if wl.objective == "ppo" else 1
    hidden = min(ro.seconds / shared, step_s) if rl.async_rollout else 0.0
    where = (
        f"{rl.engine_replicas} replica(s) on {rl.engine_gpus} engine GPU(s)"
        + (", overlapping the policy's step (one step off policy)" if rl.async_rollout else ", idle while it trains")
        if rl.engine == "server"
        else "on the training GPUs"
    )
    return TimeItem(
        name="rollout",
        label="Rollout (generation)",
        kind="rollout",
        seconds=ro.seconds / shared - hidden,
        hidden_s=hidden,
        formula=f"{ro.waves} wave(s) × {ro.wave_s:.4g} s: {inf.batch_size} completions of {inf.prompt_tokens} + "
        f"{inf.output_tokens} tokens on TP {ro.wave.parallelism.tensor}"
        + (f", ÷ {shared} optimizer steps per rollout (ppo epochs × mini-batches)" if shared > 1 else "")
        + (f" − {hidden:.4g} s overlapped" if hidden else ""),
        note=f"{rl.num_generations} completions per prompt; an engine replica's KV cache holds {ro.holds:,} at "
        f"once; {where}",
    )


def step_time(plan: Plan, gpu: Gpu) -> StepTime | None:
    """One optimizer step of a training plan on `gpu` (None: the GPU has no tensor cores for its dtype)."""
    r = rates(gpu, plan.precision.compute)
    if r is None:
        return None
    steps = plan.micro_batches_per_step
    w = _work(plan)
    mb = _micro_batch(plan, w, r)
    items = _compute_items(plan, r, mb, steps) + _model_parallel_items(plan, r, mb, steps, w.moe_layers)
    bubble = _bubble_item(plan, sum(i.seconds for i in items) / steps)
    extra = [
        bubble,
        _data_parallel_item(plan, r, w, mb, steps),
        _optimizer_item(plan, r, w),
        _offload_item(plan, r, w, steps),
        _teacher_item(plan, r, steps),
    ]
    extra += ppo_items(plan, sum(i.seconds for i in items))
    items += [i for i in extra if i is not None]
    rollout = _rollout_item(plan, gpu, sum(i.seconds for i in items))
    items += [rollout] if rollout is not None else []
    wl = plan.workload
    peak, note = mfu_reference(r)
    # a pair's chosen and rejected sequences are both trained on (Workload.sequences_per_forward)
    pairs = wl.sequences_per_forward // wl.micro_batch_size
    return step_of(
        items,
        tokens=wl.global_batch_size * pairs * wl.sequence_length,
        gpus=plan.hardware.count,
        model_flops_per_token=model_flops_per_token(plan),
        peak_flops=peak,
        efficiency_note=note,
    )


def elementwise_floor_hours(plan: Plan, gpu: Gpu, tokens: int, count: int) -> float:
    """A lower bound of the job's elementwise hours on `count` GPUs, for any strategy: every layer's norms,
    activations and residual adds forward and backward, and the loss, over the job's tokens, computed for the
    whole model on one rank (tensor, context and sequence parallelism split this traffic or replicate it,
    never shrink its sum), shared by the GPUs at the achievable HBM bandwidth. 0 where the plan's model cannot
    be laid out on one rank."""
    whole = _on_one_rank(plan)
    if whole is None:
        return 0.0
    m, s = plan.model, plan.workload.sequence_length
    keys = keys_per_query(whole, s)
    layers = ((m.num_layers - m.moe_layers, False), (m.moe_layers, True))
    per_sequence = sum(n * layer_work(whole, s, keys, moe).elementwise_bytes for n, moe in layers if n)
    per_token = per_sequence / s * (1 + BACKWARD_ELEMENTWISE) + m.vocab_size * LOSS_BYTES[plan.techniques.loss]
    return tokens * per_token / (count * supported_rates(gpu, plan.precision.compute).hbm_bytes) / 3600


@lru_cache(maxsize=256)
def _on_one_rank(plan: Plan) -> Plan | None:
    """The plan on one GPU with no parallelism (None: a setting of it needs parallelism)."""
    try:
        return replace(
            plan,
            parallelism=Parallelism(data=1),
            hardware=replace(plan.hardware, count=1, offering=None),
            precision=replace(plan.precision, fp8_all_gather=False),
        )
    except PlanError:
        return None
