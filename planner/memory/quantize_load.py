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

from planner.dtypes import DEFAULT_GROUP_SIZE, nbytes
from planner.memory.allocator import CachingAllocator
from planner.memory.layout import stage_split
from planner.models import Model, param_counts, projection_shapes
from planner.plan import Plan

# What quantize_ allocates and frees for one weight, in order: ("a", name, bytes in units of the 16-bit weight's
# bytes; None: the quantization parameters) or ("f", name). A temporary of an expression is freed once the next
# one exists; a local lives until its function returns.
# - int8 (int8_weight_only, int8_dynamic_activation_int8_weight: symmetric per row, integer zero point):
#   quant_primitives.py _quantize_affine_no_dtype_cast: torch.clamp(torch.round(input * (1.0 / scale)) +
#   zero_point, ...) makes four bf16 tensors, then _quantize_affine's .to(torch.int8) the stored one (half).
# - fp8 (float8_weight_only: no zero point): torch.clamp(input * scale.reciprocal(), ...) makes two, then
#   .to(torch.float8_e4m3fn) (half).
# - int4 (int4_weight_only, TensorCoreTiledLayout): from_hp_to_intx keeps the padded copy (pre_process: F.pad)
#   to its end; the float zero-point domain makes four (torch.clamp(torch.round((input - min_val) / scale),
#   ...)), then .to(torch.int32) (double); from_plain computes int_data[::, ::2] << 4 | int_data[::, 1::2] (two
#   int32 tensors of half the columns: one unit each) and .to(torch.uint8) (a quarter), and
#   _convert_weight_to_int4pack the packed weight (a quarter).
_CHAIN4 = (("a", "t1", 1), ("a", "t2", 1), ("f", "t1"), ("a", "t3", 1), ("f", "t2"), ("a", "t4", 1), ("f", "t3"))
PROGRAMS = {
    "int8": _CHAIN4 + (("a", "q", 0.5), ("a", "params", None), ("f", "t4")),
    "fp8": (("a", "t1", 1), ("a", "t2", 1), ("f", "t1"), ("a", "q", 0.5), ("a", "params", None), ("f", "t2")),
    "int4": (("a", "padded", 1),) + _CHAIN4 + (
        ("a", "int32", 2), ("f", "t4"), ("a", "shifted", 1), ("a", "ored", 1), ("f", "shifted"), ("a", "uint8", 0.25),
        ("f", "ored"), ("a", "q", 0.25), ("f", "uint8"), ("a", "params", None), ("f", "int32"), ("f", "padded")),
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
    return o * (bc + (ZERO_POINT_BYTES if dtype == "int8" else 0))


def held_beyond_live(plan: Plan) -> int:
    """Bytes the allocator holds beyond the live tensors once torchao's quantize_ has run on the GPU: the free
    remainder of the segments that hold quantized weights after a CUDA graph capture's empty_cache (with
    techniques.compile), else every freed byte of the load."""
    m, prec, t = plan.model, plan.precision, plan.parallelism.tensor
    counts = param_counts(m, t)
    vocab = counts.embedding // m.hidden_size
    return _replayed(_linears(m, t), max(stage_split(plan)), m.hidden_size, vocab,
                     counts.lm_head > 0, prec.weights, prec.quant_group_size or DEFAULT_GROUP_SIZE["int4"], nbytes(prec.activation_dtype),
                     plan.techniques.compile)


@lru_cache(maxsize=64)
def _replayed(linears: tuple[tuple[int, int], ...], layers: int, h: int, vocab: int, head: bool, dtype: str,
              group: int, bc: int, captured: bool) -> int:
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
        size, live = i * o * bc, {}
        for op in PROGRAMS[dtype]:
            if op[0] == "f":
                alloc.free(live.pop(op[1]))
            else:
                live[op[1]] = alloc.malloc(_params_bytes(i, o, dtype, group, bc) if op[2] is None else round(size * op[2]))
        alloc.free(weight)  # the Linear's weight is replaced: the 16-bit one goes
    if captured:
        alloc.empty_cache()
    return alloc.reserved_bytes - alloc.allocated_bytes
