"""A matmul's time by its shape: the output tiles it splits into, the waves those tiles run in, and the fixed
work of each tile.

A GEMM of (M × K) by (K × N) runs as tiles of TM × TN outputs, each on one SM (an AMD compute unit), each a loop
over K. The GPU runs its SMs' worth of tiles at a time, so the last wave of a GEMM whose tile count is not a
multiple of the SM count leaves SMs idle (wave quantization: NVIDIA, "Matrix Multiplication Background User's
Guide", section "Wave Quantization"); a grouped kernel (a MoE layer's experts) schedules the tiles of all its
groups together, each group rounded up to whole tiles. The library picks the tile that wastes the least
(cuBLAS's heuristics; DeepGEMM's `get_best_configs`): TILES.

Each tile also does fixed work besides its K loop, chiefly writing its output tile: at the SM's share of the
achievable HBM bandwidth that takes as long as K0 = out_bytes × FLOP/s / (2 × B/s) steps of the loop, whatever
the tile and the SM count, so the loop runs at K / (K + K0) of the rate. K0 is 524 for an H100's float8
matmuls (bf16 outputs) and 295 for its bf16 ones; DeepGEMM's own sweep on an H800 (the H100's compute and
memory) fits K0 = 489 with the K / (K + K0) law (M 4,096; K 512 to 16,384). tests/test_perf_gemm.py checks the
model against that sweep's 28 shapes.

The catalog's measured rate (MAMF: the best shape of a brute-force search) is what the model gives at that best
shape: MAMF_SHAPE_FACTOR. No shape runs faster than the best one measured.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from planner.perf.rates import Rates

# Output tiles (TM, TN) the libraries use for large bf16/fp8 matmuls: CUTLASS's Hopper and Ampere defaults
# (128 × 256, 128 × 128), and 64-row tiles where the token count is small (DeepGEMM's BLOCK_M 64; cuBLAS's
# small-M kernels).
TILES = ((128, 256), (128, 128), (64, 256), (64, 128))
# The model's factor at the best shapes MAMF published (stas00/ml-engineering, compute/accelerator/README.md,
# "Maximum Achievable Matmul FLOPS comparison table", bf16): H100 SXM 2048×2048×13312 0.949, A100 SXM
# 1024×10240×5120 0.957, A100 PCIe 2048×5120×6144 0.962, MI300X 4096×10240×4864 0.960, GH200 1024×15360×4096
# 0.912, MI250X 1024×14080×19968 0.994: the median. A matmul's rate is the catalog's × its factor / this.
MAMF_SHAPE_FACTOR = 0.958


class Gemm(NamedTuple):
    """`repeats` matmuls of (tokens × k) by (k × n) run one after another, each a grouped kernel of `groups` such
    matmuls side by side (a MoE layer's local experts; 1 for a plain matmul)."""

    repeats: float  # (not `count`, which would shadow tuple.count)
    tokens: float
    k: int
    n: int
    elem: int  # bytes per element the matmul reads and writes
    groups: int = 1


@lru_cache(maxsize=65536)
def shape_efficiency(groups: int, m: float, n: float, k: float, sms: int | None, k_fixed: float) -> float:
    """Fraction of the full rate a (m × k) by (k × n) matmul of `groups` groups reaches: its best tile's wave
    efficiency × its K loop's share of each tile's time."""
    loop = k / (k + k_fixed)
    if not sms:  # no SM count in the catalog (Gaudi's matrix engines): the K loop alone
        return loop
    best = 0.0
    for tm, tn in TILES:
        tiles = groups * -(-m // tm) * -(-n // tn)
        waves = -(-tiles // sms)
        best = max(best, groups * m * n / (waves * sms * tm * tn))
    return best * loop


def k_fixed(r: Rates, elem: int) -> float:
    """K0: the loop steps a tile's output write takes (module docstring); outputs are 16-bit, fp32 for fp32."""
    return max(elem, 2) * r.matmul_flops / (2 * r.hbm_bytes)


def matmul_s(groups: int, m: float, k: float, n: float, r: Rates, elem: int, out_elements: float) -> float:
    """Seconds of one grouped (m × k) by (k × n) matmul: the longer of its FLOPs at its shape's rate and the
    bytes it moves at the HBM rate (roofline)."""
    flops = 2 * groups * m * k * n
    moved = groups * (m * k + k * n + out_elements) * elem
    rate = r.matmul_flops * min(1.0, shape_efficiency(groups, m, n, k, r.sms, k_fixed(r, elem)) / MAMF_SHAPE_FACTOR)
    return max(flops / rate, moved / r.hbm_bytes)


def forward_s(g: Gemm, r: Rates) -> float:
    """Seconds of the forward matmuls: (tokens × k) by (k × n)."""
    return g.repeats * matmul_s(g.groups, g.tokens, g.k, g.n, r, g.elem, g.tokens * g.n)


def backward_s(g: Gemm, r: Rates, weight_grads: bool) -> float:
    """Seconds of their backward: the input gradient (tokens × n) by (n × k), and the weight gradient
    (k × tokens) by (tokens × n), which contracts over the tokens."""
    data = matmul_s(g.groups, g.tokens, g.n, g.k, r, g.elem, g.tokens * g.k)
    weight = matmul_s(g.groups, g.k, g.tokens, g.n, r, g.elem, g.k * g.n) if weight_grads else 0.0
    return g.repeats * (data + weight)


def flops(g: Gemm) -> float:
    return 2 * g.repeats * g.groups * g.tokens * g.k * g.n


def gemms_s(gemms: tuple[Gemm, ...], r: Rates) -> tuple[float, float]:
    """(seconds, FLOPs) of a list of matmuls' forward."""
    return sum(forward_s(g, r) for g in gemms), sum(flops(g) for g in gemms)


def gemms_backward_s(gemms: tuple[Gemm, ...], r: Rates, weight_grads: bool) -> float:
    return sum(backward_s(g, r, weight_grads) for g in gemms)
