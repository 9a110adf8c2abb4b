"""What an estimate returns: items, the moments of the step (phases), pipeline stages and the totals' meaning."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Literal

from planner.catalog import Gpu
from planner.plan.config import Plan
from planner.plan.validate import required
from planner.units import counted, format_bytes

if TYPE_CHECKING:
    from planner.memory.terms import Term

Level = Literal["allocated", "reserved", "device"]

TOTALS_MEANING = {
    "peak_allocated_bytes": "live tensors at the peak: what torch.cuda.max_memory_allocated() reads",
    "peak_reserved_bytes": "plus the caching allocator's held blocks: torch.cuda.max_memory_reserved()",
    "device_bytes": "plus CUDA context and NCCL buffers: what nvidia-smi shows for the process",
}


@dataclass(frozen=True, kw_only=True)
class Item:
    """One line of the breakdown: bytes at a given moment, with how they were computed and why."""

    name: str  # stable key, e.g. "optimizer_states"
    label: str
    bytes: int
    formula: str
    note: str
    level: Level = "allocated"  # the total it first counts in (allocated ⊂ reserved ⊂ device)
    term: Term | None = field(default=None, compare=False, repr=False)  # what computed bytes and formula


@dataclass(frozen=True, kw_only=True)
class Phase:
    """Live memory at one moment of the step; its allocator-level items add up to `allocated_bytes`, and
    device-level ones (paged optimizer states in CUDA managed memory) to `outside_bytes`."""

    name: str  # e.g. "forward", "loss backward", "backward of the last layer", "optimizer step"
    description: str
    items: tuple[Item, ...]
    allocated_bytes: int = -1  # derived: the sum of the allocated items
    outside_bytes: int = -1  # derived: the sum of the device-level items (outside PyTorch's allocator)

    def __post_init__(self) -> None:
        allocated = outside = 0
        for i in self.items:  # one pass: searches build phases by the thousand
            if i.level == "allocated":
                allocated += i.bytes
            elif i.level == "device":
                outside += i.bytes
        object.__setattr__(self, "allocated_bytes", allocated)
        object.__setattr__(self, "outside_bytes", outside)


def phase(name: str, description: str, *parts: Item | None) -> Phase:
    """A phase of the items that apply (None: a technique the plan does not use)."""
    return Phase(name=name, description=description, items=tuple([i for i in parts if i is not None]))


@dataclass(frozen=True, kw_only=True)
class Stage:
    """One pipeline stage (the whole model when pipeline = 1)."""

    index: int
    layers: int
    micro_batches_in_flight: float  # in units of one micro-batch through the whole stage
    phases: tuple[Phase, ...]
    peak: Phase
    reserved_bytes: int
    device_bytes: int
    host_bytes: int = 0  # pinned host memory of offloaded activations
    loaded_bytes: int = 0  # reserved beyond the step's own peak: segments the model's load left (zero3_load)
    cache_flushed: bool = False  # fits only because the allocator releases its cache near capacity

    @property
    def peak_allocated_bytes(self) -> int:
        return self.peak.allocated_bytes


@dataclass(frozen=True, kw_only=True)
class Serving:
    """What a serving engine can hold: the KV cache left after weights and activations."""

    kv_budget_bytes: int
    kv_bytes_per_token: int  # per sequence token, on one GPU
    max_concurrent_sequences: int  # at prompt + output tokens each
    # vLLM's "Maximum concurrency for N tokens per request: X" (v1/core/kv_cache_utils.py
    # get_max_concurrency_for_kv_cache_config): the pool's blocks over the blocks one request of N tokens takes
    max_concurrency: float
    max_context_tokens: int  # for batch_size sequences, at most the model's context window
    cache_context_tokens: int  # what the KV cache would hold for each of batch_size sequences, window or not
    context_window: int | None  # the model's (None: not known)

    @property
    def window_capped(self) -> bool:
        return self.max_context_tokens < self.cache_context_tokens


@dataclass(frozen=True, kw_only=True)
class Estimate:
    plan: Plan
    gpu: Gpu
    items: tuple[Item, ...]  # at the peak of the most loaded stage; allocated, then reserved, then device items
    phase: str  # the moment that sets the peak
    stage: int  # the most loaded pipeline stage
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    device_bytes: int
    usable_bytes: int
    host_bytes: int  # CPU memory per GPU for offloaded states (not part of device_bytes)
    runtime_bytes: int  # CUDA context + NCCL, the same on every stage
    all_stages: Callable[[], tuple[Stage, ...]] = field(compare=False, repr=False)  # computes `stages`
    serving: Serving | None = None  # inference with a serving engine: its KV-cache capacity
    cache_flushed: bool = False  # fits only because the allocator releases its cache near capacity (slower)
    # host RAM one GPU's share of its machine gives offloaded states (hardware.host_memory_gib_per_gpu, else the
    # offering's, else the default); None: not a limit (inference)
    host_limit_bytes: int | None = None
    # one GPU of a GRPO server engine (workload.rl.engine server): the serving plan at one wave, its own device
    engine: Estimate | None = None

    @cached_property
    def stages(self) -> tuple[Stage, ...]:
        """Every pipeline stage (computed when asked: the peak needs only the first and the last)."""
        return self.all_stages()

    @property
    def served(self) -> Serving:
        """`serving` of an estimate whose plan runs a serving engine (workload.inference.gpu_memory_utilization)."""
        return required(self.serving, "workload.inference.gpu_memory_utilization")

    @property
    def fits(self) -> bool:
        """Within the GPU and the host's RAM, and a server engine's GPU within its own."""
        return (
            self.device_bytes <= self.usable_bytes and not self.host_short and (self.engine is None or self.engine.fits)
        )

    @property
    def host_short(self) -> bool:
        """Offloaded states need more host RAM than the GPU's share of its machine."""
        return self.host_limit_bytes is not None and self.host_bytes > self.host_limit_bytes

    @property
    def headroom_bytes(self) -> int:
        """Usable memory left (negative: the shortfall)."""
        return self.usable_bytes - self.device_bytes

    @property
    def reason(self) -> str:
        gpu = f"{self.gpu.name} ×{self.plan.hardware.count}"
        need, have = format_bytes(self.device_bytes), format_bytes(self.usable_bytes)
        if self.serving is not None:
            inf, s = self.plan.workload.inference, self.serving
            if self.fits:
                longest = (
                    f"up to {s.max_context_tokens:,} tokens each, the model's context window; the cache "
                    f"holds {s.cache_context_tokens:,}"
                    if s.window_capped
                    else f"up to {s.max_context_tokens:,} tokens each"
                )
                return (
                    f"fits on {gpu}: the engine's {have} hold the weights and KV cache for "
                    f"{counted(s.max_concurrent_sequences, 'sequence')} of {inf.context_tokens:,} tokens "
                    f"(batch {inf.batch_size}: {longest})"
                )
            return (
                f"does not fit on {gpu}: the engine's {have} leave no room for the KV cache of "
                f"{counted(inf.batch_size, 'sequence')} of {inf.context_tokens:,} tokens (needs {need})"
            )
        if self.fits and self.cache_flushed:
            return (
                f"fits on {gpu} only by releasing the allocator's cache: fills the {have} usable, and "
                f"cudaFree/cudaMalloc calls in every step slow it down"
            )
        if self.fits:
            return (
                f"fits on {gpu}: needs {need} per GPU of {have} usable ({format_bytes(self.headroom_bytes)} free)"
                + self._engine_note
            )
        short = (
            [f"needs {need} per GPU, {have} usable (short by {format_bytes(-self.headroom_bytes)})"]
            if self.headroom_bytes < 0
            else []
        )
        short += (
            [
                f"offloaded states need {format_bytes(self.host_bytes)} of host RAM per GPU, "
                f"{format_bytes(self.host_limit_bytes or 0)} there (hardware.host_memory_gib_per_gpu, else the "
                f"offering's)"
            ]
            if self.host_short
            else []
        )
        short += [self._engine_note.removeprefix("; ")] if self.engine is not None and not self.engine.fits else []
        return f"does not fit on {gpu}: " + "; and ".join(short)

    @property
    def _engine_note(self) -> str:
        """A server engine's GPUs, after the training GPUs' verdict ("" without one)."""
        if self.engine is None:
            return ""
        rl = self.plan.workload.rl
        return (
            f"; its server engine, {rl.engine_replicas} replica(s) of TP {rl.tensor_parallel} on {rl.engine_gpus} more "
            f"GPU(s): one replica {self.engine.reason}"
        )
