"""What the caching allocator keeps after weights are quantized on the GPU (torchao's generate.py).

torchao's generate.py (_models/llama/generate.py at v0.8.0, `main`) loads the checkpoint in the compute dtype onto
the GPU (`_load_model`: `model.to(device=device, dtype=precision)`, one copy per parameter in module order) and
then calls `quantize_(model, ...)`, which replaces the weight of every nn.Linear, the output head's included
(quant_api.py `_is_linear`, `_replace_with_custom_fn_if_matches_filter`), one module at a time: the quantized
weight is computed through temporaries the size of the 16-bit weight, and the 16-bit weight is freed only once its
replacement exists (`_get_linear_subclass_inserter`: `lin.weight = Parameter(constructor(lin.weight))`). The
caching allocator serves each new tensor from the best-fitting freed block, so the quantized weights end up split
off the segments of weights and temporaries freed before them.

Nothing returns those segments to the driver before `torch.cuda.empty_cache()`. With `--compile`,
torch.compile(mode="reduce-overhead") captures the decode step as a CUDA graph in the warm-up sample, and
`torch.cuda.graph.__enter__` calls `torch.cuda.empty_cache()` (torch/cuda/graphs.py), which gives back only the
segments that hold no live block; generate.py resets the peak statistics after that warm-up
(`torch.cuda.reset_peak_memory_stats()` at sample 0), so `max_memory_reserved()` starts from the segments that
still hold quantized weights, whole. Without a capture nothing is given back and it starts from every segment the
load and the quantization reserved. This module replays that sequence with planner/memory/allocator.py and
returns what is reserved beyond the live tensors.
"""

from __future__ import annotations

from functools import lru_cache

from planner.memory.allocator import Block, CachingAllocator
from planner.memory.layout import stage_split
from planner.plan.config import Plan
from planner.plan.dtypes import DEFAULT_GROUP_SIZE, nbytes
from planner.plan.models import Model, param_counts, projection_shapes

# What quantize_ allocates and frees for one weight, in order: ("a", name, bytes in units of the 16-bit weight's
# bytes; None: the quantization parameters) or ("f", name). A temporary of an expression is freed once the next
# one exists; a local lives until its function returns.
# - int8 (int8_weight_only, int8_dynamic_activation_int8_weight: symmetric per row, integer zero point):
#   quant_primitives.py _quantize_affine_no_dtype_cast: torch.clamp(torch.round(input * (1.0 / scale)) +
#   zero_point, ...) makes four bf16 tensors, then _quantize_affine's .to(torch.int8) the stored one (half).
# - fp8 (float8_weight_only: no zero point): torch.clamp(input * scale.reciprocal(), ...) makes two, then
#   .to(torch.float8_e4m3fn) (half). float8_dynamic_activation_float8_weight asks for float32 scales
#   (quant_api.py: scale_dtype=torch.float32), and a 16-bit weight times a float32 scale of shape [rows, 1] or
#   [1, 1] promotes to float32: its two are twice the size ("fp8_fp32_scale").
# - int4 (int4_weight_only, TensorCoreTiledLayout): from_hp_to_intx keeps the padded copy (pre_process: F.pad)
#   to its end; the float zero-point domain makes four (torch.clamp(torch.round((input - min_val) / scale),
#   ...)), then .to(torch.int32) (double); from_plain computes int_data[::, ::2] << 4 | int_data[::, 1::2] (two
#   int32 tensors of half the columns: one unit each) and .to(torch.uint8) (a quarter), and
#   _convert_weight_to_int4pack the packed weight (a quarter).
Op = tuple[str, str, float | None] | tuple[str, str]  # an allocation (3 items) or a free (2)
_CHAIN4: tuple[Op, ...] = (
    ("a", "t1", 1),
    ("a", "t2", 1),
    ("f", "t1"),
    ("a", "t3", 1),
    ("f", "t2"),
    ("a", "t4", 1),
    ("f", "t3"),
)
PROGRAMS: dict[str, tuple[Op, ...]] = {
    "int8": _CHAIN4 + (("a", "q", 0.5), ("a", "params", None), ("f", "t4")),
    "fp8": (("a", "t1", 1), ("a", "t2", 1), ("f", "t1"), ("a", "q", 0.5), ("a", "params", None), ("f", "t2")),
    "fp8_fp32_scale": (
        ("a", "t1", 2),
        ("a", "t2", 2),
        ("f", "t1"),
        ("a", "q", 0.5),
        ("a", "params", None),
        ("f", "t2"),
    ),
    "int4": (("a", "padded", 1),)
    + _CHAIN4
    + (
        ("a", "int32", 2),
        ("f", "t4"),
        ("a", "shifted", 1),
        ("a", "ored", 1),
        ("f", "shifted"),
        ("a", "uint8", 0.25),
        ("f", "ored"),
        ("a", "q", 0.25),
        ("f", "uint8"),
        ("a", "params", None),
        ("f", "int32"),
        ("f", "padded"),
    ),
}
# Bytes of the per-row (int4: per-group) quantization parameters kept beside each weight: int8 keeps a scale in
# the weight's dtype and an int64 zero point per row (int8_weight_only: zero_point_dtype=torch.int64); fp8 a
# scale per row; int4 a bf16 scale and zero per group of each row (pack_tinygemm_scales_and_zeros).
ZERO_POINT_BYTES = 8


def _linears(m: Model, tensor: int) -> tuple[tuple[int, int], ...]:
    """(input, output) of each Linear of a layer in module order: gpt-fast's Attention holds one fused wqkv and
    wo, its FeedForward w1, w3, w2 (torchao _models/llama/model.py); other projections as the model lists them."""
    shapes = projection_shapes(m, tensor)
    fused = (shapes["q"][0], shapes["q"][1] + shapes["k"][1] + shapes["v"][1])
    mlp = tuple(shapes[k] for k in ("gate", "up", "down") if k in shapes)
    return ((fused,) if not m.mla else (shapes["q"], shapes["k"], shapes["v"])) + (shapes["o"],) + mlp


def _params_bytes(i: int, o: int, dtype: str, group: int, bc: int) -> int:
    if dtype == "int4":
        return -(-i // group) * o * 2 * bc
    if dtype == "fp8_fp32_scale":  # a float32 scale per row (PerRow; PerTensor keeps one)
        return o * 4
    return o * (bc + (ZERO_POINT_BYTES if dtype == "int8" else 0))


def held_beyond_live(plan: Plan) -> int:
    """Bytes the allocator holds beyond the live tensors once torchao's quantize_ has run on the GPU: the free
    remainder of the segments that hold quantized weights after a CUDA graph capture's empty_cache (with
    techniques.compile), else every freed byte of the load."""
    m, prec, t = plan.model, plan.precision, plan.parallelism.tensor
    counts = param_counts(m, t)
    vocab = counts.embedding // m.hidden_size
    fp32_scale = prec.weights == "fp8" and plan.workload.inference.dynamic_activation_quant
    return _replayed(
        _linears(m, t),
        max(stage_split(plan)),
        m.hidden_size,
        vocab,
        counts.lm_head > 0,
        "fp8_fp32_scale" if fp32_scale else prec.weights,
        prec.quant_group_size or DEFAULT_GROUP_SIZE["int4"],
        nbytes(prec.activation_dtype),
        plan.techniques.compile,
    )


@lru_cache(maxsize=64)
def _replayed(
    linears: tuple[tuple[int, int], ...],
    layers: int,
    h: int,
    vocab: int,
    head: bool,
    dtype: str,
    group: int,
    bc: int,
    captured: bool,
) -> int:
    alloc = CachingAllocator()
    alloc.malloc(vocab * h * bc)  # the embedding table: not a Linear, stays 16-bit
    weights = []
    for _ in range(layers):
        weights += [((i, o), alloc.malloc(i * o * bc)) for i, o in linears]
        for _norm in range(2):  # the layer's two RMSNorm weights
            alloc.malloc(h * bc)
    alloc.malloc(h * bc)  # the final norm
    if head:
        weights.append(((h, vocab), alloc.malloc(h * vocab * bc)))
    for (i, o), weight in weights:
        size, live = i * o * bc, dict[str, Block]()
        for op in PROGRAMS[dtype]:
            if len(op) == 2:
                alloc.free(live.pop(op[1]))
            else:
                live[op[1]] = alloc.malloc(
                    _params_bytes(i, o, dtype, group, bc) if op[2] is None else round(size * op[2])
                )
        alloc.free(weight)  # the Linear's weight is replaced: the 16-bit one goes
    if captured:
        alloc.empty_cache()
    return alloc.reserved_bytes - alloc.allocated_bytes


# --- A bitsandbytes 4-bit model that DeepSpeed ZeRO-3 partitions after loading it whole ----------------------------
# transformers builds a quantized model without deepspeed.zero.Init (modeling_utils.py from_pretrained: `if
# is_deepspeed_zero3_enabled() and not is_quantized`; huggingface/peft#1844, bitsandbytes#1249: "parameters first be
# fully loaded to each GPU and then be sharded"), so every rank quantizes the whole model on its GPU
# (bitsandbytes 0.43 nn.Params4bit._quantize: the 16-bit weight copied to the GPU, then functional.quantize_4bit
# allocates an fp32 absmax per block, the packed output (two values a byte, in quant_storage) and, with
# compress_statistics, the 8-bit absmax (quantize_blockwise), frees the fp32 absmax and returns; the 16-bit copy
# goes once Params4bit holds the packed one). deepspeed.initialize then partitions every parameter in module order
# (runtime/zero/partition_parameters.py _partition_param at v0.14.0: torch.empty(the rank's partition), a copy,
# free_param of the whole); the quantization state is an attribute of the weight, not a parameter, and stays whole
# on every rank. DeepSpeedZeroOptimizer_Stage3.__init__ defragments the trainable partitions and calls
# get_accelerator().empty_cache() (runtime/zero/stage3.py defragment), which gives back only the segments that
# hold no live block: every segment a partition was split off stays reserved whole.
NF4_PROGRAM: tuple[tuple[str, str, int | None] | tuple[str, str], ...] = (
    ("a", "absmax", 4),
    ("a", "packed", None),
    ("a", "qabsmax", 1),
    ("f", "absmax"),
)


def zero3_whole_load_reserved(plan: Plan) -> int:
    """Bytes reserved after DeepSpeed ZeRO-3 partitioned a bitsandbytes nf4 model each rank loaded whole and
    Stage 3 emptied the cache (the floor of every later reserved peak), or 0 where that does not happen:
    another framework or stage, other weights, or partitions offloaded to the host."""
    m, prec, par = plan.model, plan.precision, plan.parallelism
    if not (
        plan.framework == "deepspeed"
        and par.zero_stage == 3
        and prec.weights == "nf4"
        and plan.techniques.offload == "none"
    ):
        return 0
    counts = param_counts(m, 1)
    shapes = projection_shapes(m, 1)
    order = tuple(shapes[k] for k in ("q", "k", "v", "o", "gate", "up", "down") if k in shapes)
    return _partitioned(
        order,
        m.num_layers,
        m.hidden_size,
        counts.embedding // m.hidden_size,
        counts.lm_head > 0,
        prec.quant_group_size or DEFAULT_GROUP_SIZE["nf4"],
        prec.double_quant,
        nbytes(prec.activation_dtype),
        par.data * par.context,
    )


@lru_cache(maxsize=64)
def _partitioned(
    linears: tuple[tuple[int, int], ...],
    layers: int,
    h: int,
    vocab: int,
    head: bool,
    block: int,
    double_quant: bool,
    bc: int,
    world: int,
) -> int:
    alloc = CachingAllocator()
    params = [alloc.malloc(vocab * h * bc)]  # the embedding table (16-bit, as checkpointed)
    for _ in range(layers):
        for i, o in linears:
            n = i * o
            weight, live = alloc.malloc(n * bc), dict[str, Block]()
            for op in NF4_PROGRAM if double_quant else NF4_PROGRAM[:2]:
                if len(op) == 2:
                    alloc.free(live.pop(op[1]))
                else:
                    live[op[1]] = alloc.malloc(-(-n // 2) if op[2] is None else -(-n // block) * op[2])
            alloc.free(weight)
            params.append(live.pop("packed"))  # the quantization state stays whole beside it
        params += [alloc.malloc(h * bc), alloc.malloc(h * bc)]  # the layer's two norms
    params.append(alloc.malloc(h * bc))  # the final norm
    if head:
        params.append(alloc.malloc(vocab * h * bc))
    for whole in params:  # module order; each partition is allocated before the whole tensor goes
        alloc.malloc(-(-whole.size // world))
        alloc.free(whole)
    alloc.empty_cache()
    return alloc.reserved_bytes
