"""Numeric formats the planner knows and their storage size, quantization scales included."""

from __future__ import annotations

from typing import Literal, get_args

DType = Literal["fp32", "bf16", "fp16"]  # gradients, optimizer states, activations
DTYPES: tuple[str, ...] = get_args(DType)
ComputeDType = Literal["fp32", "bf16", "fp16", "fp8"]  # fp8: float8 matmuls, bf16 activations (torchao)
COMPUTE_DTYPES: tuple[str, ...] = get_args(ComputeDType)
WeightDType = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4", "nf4"]  # frozen or served weights
WEIGHT_DTYPES: tuple[str, ...] = get_args(WeightDType)
KvDType = Literal["fp32", "bf16", "fp16", "fp8", "int8"]
KV_DTYPES: tuple[str, ...] = get_args(KvDType)
QUANTIZED = ("fp8", "int8", "int4", "nf4")
# what torchao's quantize_ makes of a served model on the GPU (float8_weight_only, int8_weight_only, int4_weight_only)
TORCHAO_WEIGHTS = ("fp8", "int8", "int4")

_BITS: dict[str, int] = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4, "nf4": 4}

# Default quantization group (block) sizes: GPTQ/AWQ int4 use 128 columns per scale; bitsandbytes NF4 uses
# blocks of 64 (bitsandbytes.functional.quantize_4bit, blocksize=64).
DEFAULT_GROUP_SIZE = {"int4": 128, "nf4": 64}


def nbytes(dtype: str) -> int:
    """Bytes per element of a compute/state dtype (whole bytes)."""
    return _BITS[dtype] // 8


def bits(dtype: str) -> int:
    return _BITS[dtype]


def quantized_bytes(
    params: int, dtype: str, *, rows: int, group_size: int | None = None, double_quant: bool = False
) -> int:
    """Bytes of `params` weights stored as `dtype`, with the scales each format keeps.

    - fp8: 1 byte each + one fp32 scale per output row (per-channel scaling).
    - int8 (LLM.int8, bitsandbytes): 1 byte each + one fp32 scale per output row (row-wise absmax).
    - int4 (GPTQ/AWQ): 4 bits each + per group of `group_size` input columns an fp16 scale and a packed 4-bit
      zero point (torchao's own int4 layout: tinygemm_int4_bytes).
    - nf4 (bitsandbytes): 4 bits each + one fp32 absmax per block of `group_size`; with double quantization the
      absmax is stored in 8 bits with one fp32 scale per 256 absmax values (Dettmers et al. 2023, §2).
    `rows` is the number of output rows (for per-row scales).
    """
    if dtype in ("fp32", "bf16", "fp16"):
        return params * nbytes(dtype)
    if dtype in ("fp8", "int8"):
        return params + 4 * rows
    group = group_size or DEFAULT_GROUP_SIZE[dtype]
    packed = -(-params // 2)
    groups = -(-params // group)
    if dtype == "int4":
        return packed + groups * 2 + -(-groups // 2)
    if double_quant:
        return packed + groups + 4 * -(-groups // 256)
    return packed + 4 * groups


# torchao's int4_weight_only (TensorCoreTiledLayout, the tinygemm kernel; torchao v0.8.0) pads each weight to
# in_features a multiple of 1024 and out_features a multiple of 8 (dtypes/uintx/tensor_core_tiled_layout.py
# pre_process: find_multiple(in, 1024), find_multiple(out, 8)), packs two 4-bit values a byte
# (aten._convert_weight_to_int4pack) and keeps a scale and a zero point in the weight's 16-bit dtype per group
# of each padded row (quantization/utils.py pack_tinygemm_scales_and_zeros: [in/group, out, 2]).
TINYGEMM_IN_MULTIPLE = 1024
TINYGEMM_OUT_MULTIPLE = 8


def tinygemm_int4_bytes(in_features: int, out_features: int, group_size: int, scale_bytes: int) -> int:
    """Bytes of one weight in torchao's int4 tinygemm layout: packed 4-bit values of the padded matrix, and a
    scale and a zero point (`scale_bytes` each) per group of each padded row."""
    i = -(-in_features // TINYGEMM_IN_MULTIPLE) * TINYGEMM_IN_MULTIPLE
    o = -(-out_features // TINYGEMM_OUT_MULTIPLE) * TINYGEMM_OUT_MULTIPLE
    return i * o // 2 + -(-i // group_size) * o * 2 * scale_bytes
