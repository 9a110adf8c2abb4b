"""What the optimizer updates on one GPU and what it keeps: one table entry per optimizer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from planner.dtypes import nbytes
from planner.memory.layout import StageParams
from planner.memory.terms import Described, Factor, Product, Sum, Term, fixed
from planner.models import projection_shapes
from planner.plan import Plan

# bitsandbytes 8-bit optimizers quantize each state blockwise with one fp32 absmax per 2,048 values
# (Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization").
ADAM8BIT_BLOCK = 2048
# bitsandbytes optimizers whose states live in CUDA managed memory, outside PyTorch's allocator
PAGED_OPTIMIZERS = ("paged_adamw", "paged_adamw_8bit")


@dataclass(frozen=True, kw_only=True)
class Trainable:
    """Parameters the optimizer updates on one GPU's model shard (before ZeRO), by shape."""

    matrices: tuple[tuple[int, int, int], ...]  # (rows, cols, how many)
    vectors: int  # elements in 1-D parameters (norms, biases)
    embedding_like: int  # elements of embedding and output tables (Muon leaves them to AdamW)
    total: int = -1  # derived: every trainable element
    largest: int = -1  # derived: the largest matrix (the vectors when there is none)

    def __post_init__(self) -> None:
        object.__setattr__(self, "total", sum(r * c * n for r, c, n in self.matrices) + self.vectors)
        object.__setattr__(self, "largest", max((r * c for r, c, _ in self.matrices), default=self.vectors))


def _expert_shapes(plan: Plan, sp: StageParams) -> tuple[dict[str, tuple[int, int]], int]:
    """(shapes of one expert's projections, experts on this rank) of the stage's MoE layers."""
    m, par = plan.model, plan.parallelism
    if not sp.moe_layers:
        return {}, 0
    e, h = m.moe_intermediate_size // par.tensor, m.hidden_size
    shapes = {"gate": (h, e), "up": (h, e), "down": (e, h)} if m.mlp == "swiglu" else {"up": (h, e), "down": (e, h)}
    return shapes, m.num_experts // par.expert + m.shared_experts


def _lora_trainable(plan: Plan, sp: StageParams) -> Trainable:
    shapes = projection_shapes(plan.model, plan.parallelism.tensor)
    expert_shapes, experts_here = _expert_shapes(plan, sp)
    r, mats = plan.workload.lora.rank, []
    for t in plan.workload.lora.targets:
        if t in expert_shapes:  # an MLP target: dense layers, and every expert of the MoE layers
            pieces = ((shapes[t], sp.dense_layers), (expert_shapes[t], sp.moe_layers * experts_here))
        else:
            pieces = ((shapes[t], sp.dense_layers + sp.moe_layers),)
        mats += [x for (i, o), n in pieces if n for x in ((r, i, n), (o, r, n))]
    return Trainable(matrices=tuple(mats), vectors=0, embedding_like=0)


def trainable(plan: Plan, sp: StageParams) -> Trainable:
    if plan.workload.task in ("lora", "qlora"):
        return _lora_trainable(plan, sp)
    m = plan.model
    shapes = projection_shapes(m, plan.parallelism.tensor)
    layers = sp.dense_layers + sp.moe_layers
    expert_shapes, experts_here = _expert_shapes(plan, sp)
    attention = ("q", "k", "v", "o")
    layer_mats = tuple((o, i, sp.dense_layers if name not in attention else layers)
                       for name, (i, o) in shapes.items() if sp.dense_layers or name in attention)
    if sp.moe_layers:
        layer_mats += tuple((o, i, sp.moe_layers * experts_here) for i, o in expert_shapes.values())
        layer_mats += ((m.num_experts, m.hidden_size, sp.moe_layers),)  # routers
    tables = tuple((sp.embedding // m.hidden_size, m.hidden_size, 1) for _ in range(bool(sp.embedding))) + \
        tuple((sp.head_own // m.hidden_size, m.hidden_size, 1) for _ in range(bool(sp.head_own)))
    vectors = sp.total - sum(r * c * n for r, c, n in layer_mats + tables)
    return Trainable(matrices=layer_mats + tables, vectors=vectors, embedding_like=sp.embedding + sp.head_own)


@dataclass(frozen=True, kw_only=True)
class Optimizer:
    """An optimizer over one GPU's trainable parameters, before ZeRO sharding."""

    states: Term  # the states it keeps
    temp: int  # bytes its step allocates besides the states
    note: str


def _params(n: int, states: int, each: int, unit: str = "B", suffix: str = "") -> Product:
    return Product((Factor(n, "params"), Factor(states, "states" if states > 1 else "state"), Factor(each, unit)),
                   suffix)


def _adamw(plan: Plan, tr: Trainable, bs: int) -> Optimizer:
    prec = plan.precision
    temp = {"foreach": tr.total * bs, "forloop": tr.largest * bs, "fused": 0}[prec.optimizer_impl]
    return Optimizer(states=_params(tr.total, 2, bs, f"B ({prec.optimizer_state})"), temp=temp,
                     note="AdamW exp_avg and exp_avg_sq; foreach materializes sqrt(exp_avg_sq) for all parameters at the step")


def _adamw_8bit(plan: Plan, tr: Trainable, bs: int) -> Optimizer:
    paged = plan.precision.optimizer in PAGED_OPTIMIZERS
    absmax = Described(2 * 4 * -(-tr.total // ADAM8BIT_BLOCK), "fp32 absmax per {:,}", (ADAM8BIT_BLOCK,))
    return Optimizer(states=Sum((_params(tr.total, 2, 1), absmax), ", in CUDA managed memory" if paged else ""),
                     temp=0, note="bitsandbytes 8-bit AdamW: blockwise-quantized states, updated in place by a fused "
                     "kernel" + ("; paged: outside PyTorch's allocator, evicted to host under pressure" if paged else ""))


def _paged_adamw(plan: Plan, tr: Trainable, bs: int) -> Optimizer:
    return Optimizer(states=_params(tr.total, 2, 4, suffix=", in CUDA managed memory"), temp=0,
                     note="bitsandbytes paged AdamW: states in unified memory outside PyTorch's allocator, evicted "
                     "to host under pressure")


def _adafactor(plan: Plan, tr: Trainable, bs: int) -> Optimizer:
    factored = sum(4 * (r + c) * k for r, c, k in tr.matrices) + 4 * tr.vectors
    return Optimizer(states=Described(factored, "4 B × (rows + columns) per matrix + 4 B per vector element"),
                     temp=2 * tr.largest * 4,
                     note="Adafactor (HF, beta1=None): factored second moment only; the step squares one gradient at a time")


def _lion(plan: Plan, tr: Trainable, bs: int) -> Optimizer:
    return Optimizer(states=_params(tr.total, 1, bs), temp=tr.largest * bs, note="Lion keeps one momentum buffer")


def _muon(plan: Plan, tr: Trainable, bs: int) -> Optimizer:
    hidden = tr.total - tr.vectors - tr.embedding_like
    others = tr.total - hidden
    states = Sum((Product((Factor(hidden, "matrix params"), Factor(1), Factor(bs, "B"))),
                  Product((Factor(others, "other params"), Factor(2), Factor(bs, "B")))))
    return Optimizer(states=states, temp=3 * tr.largest * 2,
                     note="Muon momentum for hidden matrices, AdamW for embeddings, head and vectors; Newton-Schulz on bf16 copies")


def _sgd_momentum(plan: Plan, tr: Trainable, bs: int) -> Optimizer:
    return Optimizer(states=_params(tr.total, 1, bs), temp=0, note="SGD momentum buffer")


def _sgd(plan: Plan, tr: Trainable, bs: int) -> Optimizer:
    return Optimizer(states=fixed(0, "0 (sgd keeps no state)"), temp=0, note="Plain SGD keeps no state")


OPTIMIZERS: dict[str, Callable[[Plan, Trainable, int], Optimizer]] = {
    "adamw": _adamw, "adamw_8bit": _adamw_8bit, "paged_adamw_8bit": _adamw_8bit, "paged_adamw": _paged_adamw,
    "adafactor": _adafactor, "lion": _lion, "muon": _muon, "sgd_momentum": _sgd_momentum, "sgd": _sgd}


def optimizer(plan: Plan, tr: Trainable) -> Optimizer:
    """The optimizer of `plan` over `tr`, before ZeRO sharding."""
    return OPTIMIZERS[plan.precision.optimizer](plan, tr, nbytes(plan.precision.optimizer_state))
