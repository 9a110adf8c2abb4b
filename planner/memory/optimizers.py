"""What the optimizer updates on one GPU and what it keeps: one table entry per optimizer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from planner.memory.layout import Layout, StageParams
from planner.memory.terms import Described, Factor, Product, Sum, Term, fixed
from planner.plan.config import Lora, Precision
from planner.plan.dtypes import nbytes

# 8-bit AdamW (bitsandbytes Optimizer2State.init_state; torchao optim/adam.py _new_buffer): two uint8 states per
# element with one fp32 scale per block (`precision.optimizer_block_size`). Tensors under 4,096 elements keep
# full-precision states: fp32 in bitsandbytes, the parameter's dtype in torchao, which also keeps them for a
# tensor whose size the block does not divide, and builds a 256-entry fp32 quantization map per state of every
# quantized tensor (bitsandbytes shares two per optimizer).
MIN_8BIT_ELEMENTS = 4096  # min_8bit_size (bitsandbytes), "only quantize tensors >= 4096 values" (torchao)
QMAP_BYTES = 256 * 4
# bitsandbytes optimizers whose states live in CUDA managed memory, outside PyTorch's allocator
PAGED_OPTIMIZERS = ("paged_adamw", "paged_adamw_8bit")


@dataclass(frozen=True, kw_only=True)
class Trainable:
    """Parameters the optimizer updates on one GPU's model shard (before ZeRO), by shape."""

    matrices: tuple[tuple[int, int, int], ...]  # (rows, cols, how many)
    vectors: int  # elements in 1-D parameters (norms, biases)
    embedding_like: int  # elements of embedding and output tables (Muon leaves them to AdamW)
    embedding: int = 0  # elements of the input embedding table (HF Trainer's 32-bit override for 8-bit states)
    total: int = -1  # derived: every trainable element
    largest: int = -1  # derived: the largest matrix (the vectors when there is none)

    def __post_init__(self) -> None:
        object.__setattr__(self, "total", sum(r * c * n for r, c, n in self.matrices) + self.vectors)
        object.__setattr__(self, "largest", max((r * c for r, c, _ in self.matrices), default=self.vectors))


def _expert_shapes(lay: Layout, sp: StageParams) -> tuple[dict[str, tuple[int, int]], int]:
    """(shapes of one expert's projections, experts on this rank) of the stage's MoE layers."""
    m = lay.model
    if not sp.moe_layers:
        return {}, 0
    e, h = m.expert_intermediate_size // lay.tensor, m.hidden_size
    shapes = {"gate": (h, e), "up": (h, e), "down": (e, h)} if m.mlp == "swiglu" else {"up": (h, e), "down": (e, h)}
    return shapes, m.num_experts // lay.expert + m.shared_experts


def _lora_trainable(lay: Layout, lora: Lora, sp: StageParams) -> Trainable:
    shapes = lay.shapes
    expert_shapes, experts_here = _expert_shapes(lay, sp)
    r, mats = lora.rank, []
    for t in lora.targets:
        pieces: tuple[tuple[tuple[int, int], int], ...]
        if t in expert_shapes:  # an MLP target: dense layers, and every expert of the MoE layers
            pieces = ((shapes[t], sp.dense_layers), (expert_shapes[t], sp.moe_layers * experts_here))
        else:
            pieces = ((shapes[t], sp.dense_layers + sp.moe_layers),)
        mats += [x for (i, o), n in pieces if n for x in ((r, i, n), (o, r, n))]
    return Trainable(matrices=tuple(mats), vectors=0, embedding_like=0)


# keyed by (layout, stage): a stage's trainable parameters read only its cut of the model and its adapters, and the
# layout cache hands out one object per cut
@lru_cache(maxsize=1024)
def trainable(lay: Layout, stage: int) -> Trainable:
    sp = lay.stages[stage]
    if lay.lora is not None:
        return _lora_trainable(lay, lay.lora, sp)
    m, shapes = lay.model, lay.shapes
    layers = sp.dense_layers + sp.moe_layers
    expert_shapes, experts_here = _expert_shapes(lay, sp)
    attention = ("q", "k", "v", "o")
    layer_mats = tuple(
        (o, i, sp.dense_layers if name not in attention else layers)
        for name, (i, o) in shapes.items()
        if sp.dense_layers or name in attention
    )
    if sp.moe_layers:
        layer_mats += tuple((o, i, sp.moe_layers * experts_here) for i, o in expert_shapes.values())
        layer_mats += ((m.num_experts, m.hidden_size, sp.moe_layers),)  # routers
    tables = tuple((sp.embedding // m.hidden_size, m.hidden_size, 1) for _ in range(bool(sp.embedding))) + tuple(
        (sp.head_own // m.hidden_size, m.hidden_size, 1) for _ in range(bool(sp.head_own))
    )
    vectors = sp.total - sum(r * c * n for r, c, n in layer_mats + tables)
    return Trainable(
        matrices=layer_mats + tables, vectors=vectors, embedding_like=sp.embedding + sp.head_own, embedding=sp.embedding
    )


@dataclass(frozen=True, kw_only=True)
class Optimizer:
    """An optimizer over one GPU's trainable parameters, before ZeRO sharding."""

    states: Term  # the states it keeps
    temp: int  # bytes its step allocates besides the states
    note: str


def _params(n: int, states: int, each: int, unit: str = "B", suffix: str = "") -> Product:
    return Product(
        (Factor(n, "params"), Factor(states, "states" if states > 1 else "state"), Factor(each, unit)), suffix
    )


def _adamw(prec: Precision, tr: Trainable, bs: int) -> Optimizer:
    temp = {"foreach": tr.total * bs, "forloop": tr.largest * bs, "fused": 0}[prec.optimizer_impl]
    return Optimizer(
        states=_params(tr.total, 2, bs, f"B ({prec.optimizer_state})"),
        temp=temp,
        note="AdamW exp_avg and exp_avg_sq; foreach materializes sqrt(exp_avg_sq) for all parameters at the step",
    )


def _adamw_8bit(prec: Precision, tr: Trainable, bs: int) -> Optimizer:
    paged, torchao = prec.optimizer in PAGED_OPTIMIZERS, prec.optimizer_library == "torchao"
    block = prec.eight_bit_block_size
    kept = [(r * c, n) for r, c, n in tr.matrices if r * c >= MIN_8BIT_ELEMENTS and not (torchao and r * c % block)]
    if prec.fp32_embedding_states and tr.embedding:  # HF Trainer: nn.Embedding weights keep 32-bit states
        kept.remove((tr.embedding, 1))
    quantized = sum(e * n for e, n in kept)
    # the fallback state's bytes: fp32 (bitsandbytes), the parameter's dtype (torchao: zeros_like)
    full_each = 4 if not torchao or prec.master_weights == "fp32" else nbytes(prec.activation_dtype)
    blocks = sum(-(-e // block) * n for e, n in kept)
    terms: list[Term] = [
        _params(quantized, 2, 1),
        Described(2 * 4 * blocks, "2 × 4 B × {:,} blocks of {:,}", (blocks, block)),
    ]
    if tr.total > quantized:
        terms.append(_params(tr.total - quantized, 2, full_each, "B", " (full-precision states)"))
    if torchao:
        terms.append(
            Described(
                2 * QMAP_BYTES * sum(n for _, n in kept), "2 × 1 KiB map × {:,} tensors", (sum(n for _, n in kept),)
            )
        )
    library = "torchao" if torchao else "bitsandbytes"
    return Optimizer(
        states=Sum(tuple(terms), ", in CUDA managed memory" if paged else ""),
        temp=0,
        note=f"{library} 8-bit AdamW: blockwise-quantized states of tensors of {MIN_8BIT_ELEMENTS:,} "
        "values or more, updated in place by a fused kernel"
        + ("; paged: outside PyTorch's allocator, evicted to host under pressure" if paged else ""),
    )


def _paged_adamw(prec: Precision, tr: Trainable, bs: int) -> Optimizer:
    return Optimizer(
        states=_params(tr.total, 2, 4, suffix=", in CUDA managed memory"),
        temp=0,
        note="bitsandbytes paged AdamW: states in unified memory outside PyTorch's allocator, evicted "
        "to host under pressure",
    )


def _adafactor(prec: Precision, tr: Trainable, bs: int) -> Optimizer:
    factored = sum(4 * (r + c) * k for r, c, k in tr.matrices) + 4 * tr.vectors
    return Optimizer(
        states=Described(factored, "4 B × (rows + columns) per matrix + 4 B per vector element"),
        temp=2 * tr.largest * 4,
        note="Adafactor (HF, beta1=None): factored second moment only; the step squares one gradient at a time",
    )


def _lion(prec: Precision, tr: Trainable, bs: int) -> Optimizer:
    return Optimizer(states=_params(tr.total, 1, bs), temp=tr.largest * bs, note="Lion keeps one momentum buffer")


def _muon(prec: Precision, tr: Trainable, bs: int) -> Optimizer:
    hidden = tr.total - tr.vectors - tr.embedding_like
    others = tr.total - hidden
    states = Sum(
        (
            Product((Factor(hidden, "matrix params"), Factor(1), Factor(bs, "B"))),
            Product((Factor(others, "other params"), Factor(2), Factor(bs, "B"))),
        )
    )
    return Optimizer(
        states=states,
        temp=3 * tr.largest * 2,
        note="Muon momentum for hidden matrices, AdamW for embeddings, head and vectors; Newton-Schulz on bf16 copies",
    )


def _sgd_momentum(prec: Precision, tr: Trainable, bs: int) -> Optimizer:
    return Optimizer(states=_params(tr.total, 1, bs), temp=0, note="SGD momentum buffer")


def _sgd(prec: Precision, tr: Trainable, bs: int) -> Optimizer:
    return Optimizer(states=fixed(0, "0 (sgd keeps no state)"), temp=0, note="Plain SGD keeps no state")


OPTIMIZERS: dict[str, Callable[[Precision, Trainable, int], Optimizer]] = {
    "adamw": _adamw,
    "adamw_8bit": _adamw_8bit,
    "paged_adamw_8bit": _adamw_8bit,
    "paged_adamw": _paged_adamw,
    "adafactor": _adafactor,
    "lion": _lion,
    "muon": _muon,
    "sgd_momentum": _sgd_momentum,
    "sgd": _sgd,
}


# keyed by (layout, stage, precision): the optimizer reads the stage's trainable parameters and the precision only
@lru_cache(maxsize=1024)
def optimizer(lay: Layout, stage: int, prec: Precision) -> Optimizer:
    """The plan's optimizer over a stage's trainable parameters, before ZeRO sharding."""
    return OPTIMIZERS[prec.optimizer](prec, trainable(lay, stage), nbytes(prec.optimizer_state))
