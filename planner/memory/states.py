"""Model states, allocated once and live all step: weights (or a frozen base and LoRA adapters), fp32 master
weights, optimizer states, gradients, DDP buckets and the cuBLAS workspaces."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from planner.memory.layout import StageContext
from planner.memory.optimizers import PAGED_OPTIMIZERS, Optimizer, Trainable
from planner.memory.result import Item
from planner.memory.runtime import cublas_workspace
from planner.memory.terms import Described, Factor, Product, Size, Sum, fixed, item
from planner.plan.dtypes import QUANTIZED, nbytes, quantized_bytes
from planner.search.memo import Memo, remembered


@dataclass(frozen=True, kw_only=True)
class States:
    static: tuple[Item, ...]  # live every moment: weights, adapters, master, optimizer states, buckets, cuBLAS
    grads: Item  # gradients once produced, as backward holds them
    step_grads: Item  # the gradients the optimizer step reads (FSDP under pipelining: reduce-scattered by then)
    grad_dtype_bytes: int  # bytes of one gradient as kept in .grad
    stored: float  # bytes per parameter as ZeRO-3 all-gathers it (a frozen base keeps its storage)


def _lora_weights(ctx: StageContext, tr: Trainable) -> tuple[Item, Item, Item, int, float]:
    """(frozen base, adapters, master weights, adapter gradient bytes, base bytes per parameter)."""
    plan, sp, bc = ctx.plan, ctx.sp, ctx.bc
    prec, z, mixed = plan.precision, plan.parallelism.zero_stage, plan.precision.mixed
    wdt = prec.weights
    # Frozen base: projections in the weights dtype (with their quantization scales); embeddings, norms and
    # the output head stay in the compute dtype (bitsandbytes, GPTQ and AWQ leave them unquantized).
    projections = Described(
        quantized_bytes(
            sp.linear, wdt, rows=sp.linear_rows, group_size=prec.quant_group_size, double_quant=prec.double_quant
        ),
        "{:,} projection params in {}" + (" + scales" if wdt in QUANTIZED else ""),
        (sp.linear, wdt),
    )
    base = Sum((projections, Product((Factor(sp.total - sp.linear, "others"), Factor(bc, "B")))))
    # parameters offloaded with the optimizer (FSDP CPUOffload(offload_params=True) / CPUOffloadPolicy, ZeRO-3
    # offload_param): every shard, the frozen base's and the adapters', lives in host memory; a unit is copied in
    # and all-gathered only while it is used (ZeRO-3 all-gathered layers)
    on_host = plan.techniques.offload == "optimizer_and_params"
    weights = item(
        "weights",
        "Weights (frozen base)",
        fixed(0, "0 (on CPU)") if on_host else ctx.sharded(base, round(base.bytes * sp.experts / sp.total), z == 3),
        "Shards live in host memory; a unit is fetched to the GPU when used"
        if on_host
        else "Frozen: no gradients, no optimizer state"
        + (f"; {wdt} weights are dequantized one matrix at a time for each matmul" if wdt in QUANTIZED else ""),
        ctx.detail,
    )
    adapter_dtype = "fp32" if mixed else prec.activation_dtype  # PEFT keeps adapters in fp32 under mixed precision
    lora = plan.workload.lora
    each = Factor(nbytes(adapter_dtype), f"B ({adapter_dtype})")
    own = Product(
        (Factor(tr.total, "params"), each), f": rank {lora.rank} on {', '.join(lora.targets)} × {ctx.layers} layers"
    )
    adapters = item(
        "adapters",
        "LoRA adapters",
        fixed(0, "0 (on CPU)") if on_host else ctx.sharded(own, 0, z == 3),
        "Trainable low-rank A and B matrices (Hu et al. 2021)",
        ctx.detail,
    )
    master = item(
        "master_weights",
        "Master weights",
        fixed(0, "0"),
        "Adapters are updated directly" + (" in fp32" if mixed else ""),
        ctx.detail,
    )
    # a base stored wider than the compute dtype (fp32 under a 16-bit compute) is all-gathered in the compute dtype:
    # FSDP's MixedPrecision casts each shard to param_dtype first (torch/distributed/fsdp/_flat_param.py
    # init_flat_param_attributes: _mp_shard and _full_param_padded in the low-precision dtype; FSDP2
    # MixedPrecisionPolicy.param_dtype the same), which accelerate's mixed_precision: bf16 sets
    return weights, adapters, master, nbytes(adapter_dtype), min(base.bytes / sp.total, bc)


def _weights_note(ctx: StageContext, weight_dtype: str) -> str:
    mixed, z = ctx.plan.precision.mixed, ctx.plan.parallelism.zero_stage
    if ctx.autocast:
        return "fp32 parameters; torch.autocast makes 16-bit copies for matmuls (see weight casts)"
    if mixed and z == 3:
        return "fp32 parameter shards are the master copy; 16-bit layers are all-gathered when used (FSDP2)"
    if mixed:
        return "Persistent 16-bit copy used for compute (ZeRO recipe); the fp32 master is sharded"
    return f"Parameters stored in {weight_dtype}; the optimizer updates them directly"


def trained_weight_dtype(ctx: StageContext) -> str:
    """The dtype full training stores its weights in: fp32 under mixed precision where the optimizer updates them
    in place (no ZeRO, or ZeRO-3 / FSDP sharding them), else the 16-bit compute copy (ZeRO-1/2 keep the fp32
    master apart; parameter offload keeps it on the host)."""
    prec, z, offload = ctx.plan.precision, ctx.plan.parallelism.zero_stage, ctx.plan.techniques.offload
    return "fp32" if (prec.mixed and z in (0, 3) and offload == "none") else prec.activation_dtype


def _full_weights(ctx: StageContext) -> tuple[Item, Item]:
    """(weights, master weights) of full training."""
    prec, z, offload, sp = ctx.plan.precision, ctx.plan.parallelism.zero_stage, ctx.plan.techniques.offload, ctx.sp
    mixed = prec.mixed
    params = Factor(sp.total, "params")
    if offload == "optimizer_and_params":
        weights = item(
            "weights",
            "Weights",
            fixed(0, "0 (on CPU)"),
            "Parameters live in host memory; layers are fetched to the GPU when used",
            ctx.detail,
        )
    else:
        weight_dtype = trained_weight_dtype(ctx)
        each = nbytes(weight_dtype)
        term = Product((params, Factor(each, f"B ({weight_dtype})")))
        weights = item(
            "weights",
            "Weights",
            ctx.sharded(term, sp.experts * each, z == 3),
            _weights_note(ctx, weight_dtype),
            ctx.detail,
        )
    if mixed and z in (1, 2) and offload == "none":
        master = item(
            "master_weights",
            "Master weights",
            ctx.sharded(Product((params, Factor(4, "B (fp32)"))), sp.experts * 4, True),
            "fp32 copy the optimizer updates, sharded with its states (ZeRO paper §5)",
            ctx.detail,
        )
    else:
        master = item(
            "master_weights",
            "Master weights",
            fixed(0, "0"),
            "No separate copy: the optimizer updates the stored weights"
            if not mixed
            else "On CPU with the optimizer (offload)"
            if offload != "none"
            else "The fp32 parameters (Weights) are the master copy",
            ctx.detail,
        )
    return weights, master


def _optimizer_states(ctx: StageContext, tr: Trainable, opt: Optimizer) -> Item:
    plan = ctx.plan
    state_bytes = opt.states.bytes
    if plan.techniques.offload != "none" or state_bytes == 0:
        return item(
            "optimizer_states",
            "Optimizer states",
            opt.states if not state_bytes else fixed(0, "0 (on CPU)"),
            "Offloaded with the optimizer step" if state_bytes else opt.note,
            ctx.detail,
        )
    experts = 0 if ctx.lora else ctx.sp.experts  # routed experts' parameters (adapters are not split finer)
    return item(
        "optimizer_states",
        "Optimizer states",
        ctx.sharded(opt.states, round(state_bytes * experts / tr.total), plan.parallelism.zero_stage >= 1),
        opt.note,
        ctx.detail,
        level="device" if plan.precision.optimizer in PAGED_OPTIMIZERS else "allocated",
    )


def flat_elements(ctx: StageContext, params: int, stored: float) -> int:
    """Elements of FSDP1 flat parameters holding `params` frozen parameters stored at `stored` bytes each: their
    storage in the compute dtype (bitsandbytes bnb_4bit_quant_storage packs 4-bit weights in it)."""
    return round(params * stored / ctx.bc)


def _gradients(ctx: StageContext, tr: Trainable, grad_dtype_bytes: int, stored: float, held: bool) -> Item:
    """The gradients as backward holds them (`held`), or as the optimizer step reads them: FSDP under a torch
    pipelining schedule keeps them unsharded, in the reduce dtype, until the step's reduction (layout.py)."""
    tech, z = ctx.plan.techniques, ctx.plan.parallelism.zero_stage
    whole = held and ctx.unsharded_grads
    if tech.offload != "none":
        return item(
            "gradients",
            "Gradients",
            fixed(0, "0 (moved to CPU as produced)"),
            "Gradients stream to host memory for the CPU optimizer step",
            ctx.detail,
        )
    if tech.optimizer_in_backward:  # (validated: one micro-batch per step, no ZeRO, no offload)
        return item(
            "gradients",
            "Gradients",
            fixed(0, "0 (each is applied and freed as it is produced)"),
            "Optimizer in backward: a post-accumulate-grad hook steps each parameter and frees its gradient",
            ctx.detail,
        )
    if ctx.lora and ctx.plan.parallelism.flat_params:
        flat = flat_elements(ctx, ctx.sp.total, stored) + tr.total
        return item(
            "gradients",
            "Gradients",
            ctx.sharded(
                Product((Factor(flat, "flat-parameter elements"), Factor(grad_dtype_bytes, "B"))), 0, not whole
            ),
            "FSDP1: a FlatParameter that holds any trainable parameter gets a gradient for all of its elements, the "
            "frozen base's included (its storage elements: packed weights count as their storage dtype)",
            ctx.detail,
        )
    term = Product((Factor(tr.total, "adapter params" if ctx.lora else "params"), Factor(grad_dtype_bytes, "B")))
    experts = 0 if ctx.lora else ctx.sp.experts
    return item(
        "gradients",
        "Gradients",
        ctx.sharded(term, experts * grad_dtype_bytes, z >= 2 and not whole),
        ("Held across micro-batches" if ctx.accum > 1 else "Produced during backward")
        + ("; only adapters have gradients" if ctx.lora else "")
        + (
            "; under pipelining FSDP sums them unsharded, in the reduce dtype, and reduce-scatters them after "
            "the last micro-batch"
            if whole
            else ""
            if ctx.lora
            else "; sharded from ZeRO-2 on"
        ),
        ctx.detail,
    )


def _ddp_buckets(ctx: StageContext, tr: Trainable, grad_dtype_bytes: int) -> Item:
    par, offload = ctx.plan.parallelism, ctx.plan.techniques.offload
    ddp = ctx.shard > 1 and par.zero_stage == 0 and offload == "none"
    grad_bytes = tr.total * grad_dtype_bytes  # unsharded: DDP means ZeRO-0
    term = Described(grad_bytes, "= gradients ({})", (Size(grad_bytes),)) if ddp else fixed(0, "0 (no DDP)")
    return item(
        "ddp_buckets",
        "DDP gradient buckets",
        term,
        "DDP keeps flat all-reduce buckets beside .grad (gradient_as_bucket_view=False, PyTorch's default)",
        ctx.detail,
    )


def _reduce_bucket(ctx: StageContext) -> Item | None:
    """DeepSpeed ZeRO's flat gradient bucket (stage_1_and_2.py backward: ipg_buffer = torch.empty(
    reduce_bucket_size, dtype=self.dtype); stage3.py __ipg_bucket_flat_buffer; when contiguous_gradients, its
    default), in the dtype of the trained parameters, which DeepSpeed's bf16 mode casts to bf16 (adapters too):
    the plan's gradient dtype."""
    elements = ctx.plan.parallelism.reduce_bucket_elements
    if elements is None or ctx.plan.techniques.offload != "none":
        return None
    dtype = ctx.plan.precision.gradients
    return item(
        "reduce_bucket",
        "DeepSpeed reduce bucket",
        Product((Factor(elements, "elements (reduce_bucket_size)"), Factor(nbytes(dtype), f"B ({dtype})"))),
        "Gradients are copied into this flat bucket before each reduce (contiguous_gradients)",
        ctx.detail,
    )


_STATES = Memo(4096)  # _model_states by all it reads (see model_states)


def model_states(ctx: StageContext, tr: Trainable, opt: Optimizer) -> States:
    """The stage's model states, kept by what they read: the stage's cut of the model (with `tr`; the expert
    split too) and the precision (with `opt`, its optimizer), ZeRO, offload, sharding, accumulation and FSDP's
    unsharded gradients under pipelining (a search asks again for every recomputation and micro-batch it tries)."""
    plan = ctx.plan
    par, tech = plan.parallelism, plan.techniques
    key = (
        ctx.layout,
        ctx.index,
        plan.precision,
        par.zero_stage,
        par.flat_params,
        par.reduce_bucket_elements,
        tech.offload,
        tech.optimizer_in_backward,
        ctx.shard,
        ctx.accum > 1,
        ctx.autocast,
        ctx.unsharded_grads,
        ctx.detail,
    )
    return remembered(_STATES, key, partial(_model_states, ctx, tr, opt))


def _model_states(ctx: StageContext, tr: Trainable, opt: Optimizer) -> States:
    if ctx.lora:
        weights, adapters, master, grad_dtype_bytes, stored = _lora_weights(ctx, tr)
    else:
        (weights, master), adapters = _full_weights(ctx), None
        grad_dtype_bytes, stored = nbytes(ctx.plan.precision.gradients), ctx.bc
    workspace = cublas_workspace("Forward and autograd threads each hold one (cuBLAS docs)", ctx.detail)
    static = tuple(
        i
        for i in (
            weights,
            adapters,
            master,
            _optimizer_states(ctx, tr, opt),
            _ddp_buckets(ctx, tr, grad_dtype_bytes),
            _reduce_bucket(ctx),
            workspace,
        )
        if i is not None
    )
    grads = _gradients(ctx, tr, grad_dtype_bytes, stored, held=True)
    step = _gradients(ctx, tr, grad_dtype_bytes, stored, held=False) if ctx.unsharded_grads else grads
    return States(static=static, grads=grads, step_grads=step, grad_dtype_bytes=grad_dtype_bytes, stored=stored)
