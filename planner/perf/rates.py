"""What a GPU sustains, and what a collective costs on the links between GPUs.

Rates are the catalog's measured fractions of the datasheet (planner/data/gpu_catalog.yaml: `matmul_efficiency`,
`fp8_matmul_efficiency`, with sources), never one global fraction: a GPU whose large matmuls reach 45 % of
its peak is planned at 45 %. Links come from the catalog too: `link_gb_per_s` per GPU and direction inside
the fast domain (NVLink, xGMI, or PCIe where that is all a card has) of `fast_domain_gpus` GPUs, and
`network_gb_per_s` per GPU across domains.

A collective over a group is timed with the α-β model, NCCL's latency constants and measured bus bandwidths
(Hockney 1994; Thakur, Rabenseifner & Gropp 2005, "Optimization of Collective Communication Operations in MPICH"): a
ring all-reduce of B bytes over n ranks moves 2(n−1)/n × B per rank at the group's bus bandwidth and takes 2(n−1)
latency steps; all-gather and reduce-scatter move (n−1)/n × B in n−1 steps; an all-to-all moves (n−1)/n × B; a
point-to-point send B.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from planner.catalog import Gpu
from planner.errors import PlanError, bad

# Decode and elementwise kernels reach ~80 % of the datasheet HBM bandwidth (streaming kernels measure 85-92 % on
# H100/A100 (NVIDIA's STREAM-like babelstream results); attention over a paged cache and short kernels lower).
BANDWIDTH_EFFICIENCY = 0.80
# Fused attention kernels sustain less of the peak than large GEMMs (softmax, masking and the online rescale sit
# between their matmuls): FlashAttention-2 reaches 50-73 % of the A100's peak forward and 63 % backward (Dao 2023,
# FlashAttention-2, §4.1) against GEMMs' 87 %; on H100 it reaches 35 % and FlashAttention-3 75 % (Shah et al.
# 2024, FlashAttention-3, abstract) against GEMMs' 80 %. Attention runs at 0.6 × the GPU's GEMM rate in the
# activations' dtype (16-bit even in float8 training, where only the linear layers are float8).
ATTENTION_FRACTION_OF_MATMUL = 0.6
# Where a user's catalog gives no measured matmul fraction: the median of the measured fractions in the project's
# catalog (its sources per GPU), stated in every plan that uses it.
DEFAULT_MATMUL_EFFICIENCY = 0.79
# Where a GPU's float8 fraction is unmeasured but its 16-bit one is: that fraction × the median ratio of the float8
# to the 16-bit fraction over the catalog's GPUs measured both (nine: H100 0.89, H200 0.91, B200 0.97, ...). Its own
# 16-bit fraction carries its software's maturity (MI300X's 0.51): the catalog's median float8 fraction would plan
# an MI300X's float8 at 3.1 × its bf16 rate, where the peaks differ by 2.
FP8_FRACTION_OF_16BIT = 0.91
# Bus bandwidth of large collectives as a fraction of the per-direction link, where the catalog has no measured
# all-reduce bus bandwidth (bench/data/gpu-perf-research.md, "General constants"): NVLink rings 0.76-0.82
# (A100 234.9/300, H200 367.6/450, B200 682.2/900; the NCCL maintainer: "protocol overhead (~20 %)"), a PCIe
# path 0.44 (8 × RTX 5090: 28 of 64 GB/s), across nodes 0.85 (2 × 8 A100 on 4 × 200 Gb/s: 86 of 100 GB/s).
LINK_EFFICIENCY = 0.80
PCIE_LINK_EFFICIENCY = 0.44
NETWORK_EFFICIENCY = 0.85
# NCCL's own latency model (src/graph/tuning.cc, Simple protocol, the one large messages use): a base of 8.4 µs
# per collective plus, per ring step, 3.4 µs over NVLink, 5.7 µs over PCIe, 14 µs over the network.
LATENCY_BASE_S = 8.4e-6
HOP_LATENCY_S = {"link": 3.4e-6, "pcie": 5.7e-6, "network": 14e-6}
# PCIe per direction where the catalog gives none: Gen4 x16's 32 GB/s; host-device copies reach 88 % of the
# nominal rate (8 × H200 Gen5 x16: nvbandwidth 55.4 of 63 GB/s).
DEFAULT_PCIE_GB_PER_S = 32.0
PCIE_TRANSFER_EFFICIENCY = 0.88

Where = Literal["link", "pcie", "network", "none"]


@dataclass(frozen=True, kw_only=True)
class Rates:
    """What one GPU sustains in a plan's compute dtype."""

    peak_flops: float  # dense datasheet FLOP/s of the compute dtype's matmuls
    matmul_flops: float  # achievable FLOP/s of large matmuls (peak × the measured fraction)
    matmul_efficiency: float
    efficiency_source: str  # the catalog's source, or the default's
    attention_flops: float  # achievable FLOP/s of fused attention, in the 16-bit dtype
    hbm_bytes: float  # achievable HBM bytes/s
    link_bytes: float  # per GPU per direction inside the whole fast domain, achievable by collectives
    peer_bytes: float  # to one peer, achievable (a mesh of point-to-point links gives less than the link)
    link_kind: Literal["link", "pcie"]  # what the fast domain runs over
    fast_domain_gpus: int
    network_bytes: float  # per GPU per direction across fast domains, achievable by collectives
    pcie_bytes: float  # host link per direction
    sms: int | None  # streaming multiprocessors (compute units) a matmul's tiles spread over (planner/perf/gemm.py)


def _tflops(gpu: Gpu, dtype: str) -> float | None:
    return {"bf16": gpu.bf16_tflops, "fp16": gpu.fp16_tflops, "fp8": gpu.fp8_tflops, "fp32": gpu.fp32_tflops}[dtype]


def no_tensor_cores(gpu: Gpu, dtype: str) -> PlanError:
    """The error of a time asked of a GPU with no tensor cores for the compute dtype."""
    return bad("precision.compute", dtype, f"has no tensor cores on {gpu.name}")


def supported_rates(gpu: Gpu, dtype: str) -> Rates:
    """`rates` where the caller needs them (a PlanError where the GPU has no tensor cores for `dtype`)."""
    r = rates(gpu, dtype)
    if r is None:
        raise no_tensor_cores(gpu, dtype)
    return r


@lru_cache(maxsize=1024)
def rates(gpu: Gpu, dtype: str) -> Rates | None:
    """The GPU's rates for matmuls in `dtype` (None: it has no tensor cores for it)."""
    tflops = _tflops(gpu, dtype)
    if tflops is None:
        return None
    fraction = gpu.fp8_matmul_efficiency if dtype == "fp8" else gpu.matmul_efficiency
    source = gpu.perf_source or "no measurement in the catalog"
    if fraction is None and dtype == "fp8" and gpu.matmul_efficiency is not None:
        fraction = gpu.matmul_efficiency * FP8_FRACTION_OF_16BIT
        source = (
            f"float8 unmeasured: its 16-bit fraction {gpu.matmul_efficiency:.2f} × {FP8_FRACTION_OF_16BIT}, the "
            f"catalog's median float8-to-16-bit ratio ({source})"
        )
    if fraction is None:
        fraction, source = DEFAULT_MATMUL_EFFICIENCY, "default: the median measured fraction of the project's catalog"
    attention_dtype = "bf16" if dtype == "fp8" and gpu.bf16_tflops else "fp16" if dtype == "fp8" else dtype
    attention = (
        (_tflops(gpu, attention_dtype) or tflops)
        * 1e12
        * (gpu.matmul_efficiency or DEFAULT_MATMUL_EFFICIENCY)
        * ATTENTION_FRACTION_OF_MATMUL
    )
    pcie = (gpu.pcie_gb_per_s or DEFAULT_PCIE_GB_PER_S) * 1e9
    link = gpu.link_gb_per_s * 1e9 if gpu.link_gb_per_s else pcie
    kind: Literal["link", "pcie"] = "pcie" if link <= pcie else "link"
    efficiency = PCIE_LINK_EFFICIENCY if kind == "pcie" else LINK_EFFICIENCY
    bus = gpu.allreduce_busbw_gb_per_s * 1e9 if gpu.allreduce_busbw_gb_per_s else link * efficiency
    peer = (gpu.peer_gb_per_s * 1e9 if gpu.peer_gb_per_s else link) * bus / link
    network = (gpu.network_gb_per_s or gpu.pcie_gb_per_s or DEFAULT_PCIE_GB_PER_S) * 1e9
    return Rates(
        peak_flops=tflops * 1e12,
        matmul_flops=tflops * 1e12 * fraction,
        matmul_efficiency=fraction,
        efficiency_source=source,
        attention_flops=attention,
        hbm_bytes=gpu.memory_bandwidth_tb_per_s * 1e12 * BANDWIDTH_EFFICIENCY,
        link_bytes=bus,
        peer_bytes=peer,
        link_kind=kind,
        fast_domain_gpus=gpu.fast_domain_gpus or 1,
        network_bytes=network * NETWORK_EFFICIENCY,
        pcie_bytes=pcie * PCIE_TRANSFER_EFFICIENCY,
        sms=gpu.sm_count,
    )


def mfu_reference(r: Rates) -> tuple[float, str]:
    """(the peak MFU is measured against, the note on the matmul rate). The peak is the dense one of the dtype the
    matmuls run in (fp8's for an fp8 plan: against bf16's its MFU passes 100 %), or the measured rate where a
    GeForce-class card's datasheet figure is the half-rate one below it: no step runs faster than its peak."""
    return max(r.peak_flops, r.matmul_flops), (
        f"matmuls at {r.matmul_efficiency:.0%} of {r.peak_flops / 1e12:,.0f} TFLOP/s ({r.efficiency_source})"
    )


@dataclass(frozen=True, kw_only=True)
class Group:
    """A communicator: `size` ranks, `stride` apart in the rank order (tensor innermost, then context, then
    data, then pipeline: Megatron's and torchtitan's device-mesh order)."""

    size: int
    stride: int

    def where(self, r: Rates) -> Where:
        if self.size == 1:
            return "none"
        return r.link_kind if self.size * self.stride <= r.fast_domain_gpus else "network"

    def bandwidth(self, r: Rates) -> float:
        """Bus bandwidth per rank. Inside the fast domain: the link, or what the group's peers give where the
        domain is a mesh of point-to-point links (n − 1 peers of `peer_bytes` each). Across domains, NCCL splits
        a collective over as many channels as a domain has NICs, so the k members of the group in one domain
        share k NICs' worth of network: min(link, k × network per GPU) (stas00/ml-engineering, network: 32
        H200s over EFA, 50 GB/s per GPU, measured 365 GB/s all-reduce bus bandwidth)."""
        inside = min(r.link_bytes, (min(self.size, r.fast_domain_gpus) - 1) * r.peer_bytes) if self.size > 1 else 0.0
        if self.where(r) != "network":
            return inside
        members = max(1, r.fast_domain_gpus // self.stride) if self.stride < r.fast_domain_gpus else 1
        return r.network_bytes if members == 1 else min(inside, members * r.network_bytes)


Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send"]
# (share of the buffer each rank moves per (n−1)/n, latency steps per (n−1)); send: the whole buffer, one step
_SHAPE: dict[str, tuple[float, float]] = {
    "all_reduce": (2, 2),
    "all_gather": (1, 1),
    "reduce_scatter": (1, 1),
    "all_to_all": (1, 1),
}


def collective_s(kind: Collective, nbytes: float, group: Group, r: Rates) -> float:
    """Seconds of one collective of `nbytes` (the whole buffer) over `group`, α-β model."""
    n = group.size
    if n == 1:
        return 0.0
    hop = HOP_LATENCY_S[group.where(r)]
    if kind == "send":
        return nbytes / group.bandwidth(r) + LATENCY_BASE_S + hop
    volume, steps = _SHAPE[kind]
    return volume * (n - 1) / n * nbytes / group.bandwidth(r) + LATENCY_BASE_S + steps * (n - 1) * hop
