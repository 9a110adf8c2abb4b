"""Memory beside the model's tensors, for training and inference alike: the CUDA context and NCCL buffers
(outside PyTorch's allocator), the cuBLAS workspaces, async TP's symmetric memory, and the caching
allocator's reserve."""

from __future__ import annotations

from functools import lru_cache

from planner.memory.result import Item, Phase
from planner.memory.terms import Factor, Product, Size, fixed, item
from planner.plan.config import Plan
from planner.plan.dtypes import nbytes
from planner.units import MiB

# --- Physical constants, each with its reason -------------------------------------------------------------
# CUDA context, loaded kernels and library handles, outside the allocator. With CUDA >= 12.2 lazy module
# loading (the default) PyTorch processes show ~0.4-0.6 GiB on an H100; older stacks without lazy loading
# show up to 1.3 GiB (HF "model memory anatomy": 1,343 MB on a V100 after a 1-element tensor).
CUDA_CONTEXT_BYTES = 512 * MiB
# NCCL buffers per communicator, outside the allocator: each channel keeps a 4 MiB FIFO per protocol and peer
# (NCCL_BUFFSIZE); on NVLink, NCCL opens 16-32 channels. NVIDIA/nccl#1685 and #864 report ~0.5-1 GB per
# communicator on 8-GPU nodes; 0.5 GiB is taken per communicator a rank uses.
NCCL_BYTES_PER_COMMUNICATOR = 512 * MiB
# cuBLAS workspace: 32 MiB per handle on Hopper (cuBLAS docs, cublasSetWorkspace; 4 MiB before Hopper),
# allocated through PyTorch's caching allocator; the forward thread and autograd's backward thread each hold a
# handle.
CUBLAS_WORKSPACE_BYTES = 2 * 32 * MiB
# The caching allocator's reserve (planner/memory/allocator.py replays its rules). Weights and optimizer states
# are allocated once; what churns (allocated and freed every step: activations, gradients, gathered layers,
# temporaries) leaves freed blocks that later requests of other sizes cannot all reuse. Replaying twelve recorded
# Hugging Face training steps op by op (bench/allocator_replay.py on bench/data/traces; results in
# bench/data/allocator-replay.csv) gives the reserve as a fraction of the churning bytes at the peak: the median
# is taken, 0.131 without and 0.084 with expandable segments (range 0.02-0.57: a fp32 logits gradient a little
# larger than a freed logits block leaves the most).
RESERVE_FRACTION = {False: 0.13, True: 0.08}  # max_memory_reserved with memory to spare, by expandable_segments
# Near capacity a failed cudaMalloc releases every cached segment with no live block and retries, so a run
# fits in less: the least memory each trace runs in, over its churning bytes (median 0.094 and 0.084).
LEAST_FRACTION = {False: 0.09, True: 0.08}

_CONTEXT = Product((Factor(Size(CUDA_CONTEXT_BYTES), "MiB.0"),))
_CUBLAS = Product((Factor(2, "handles"), Factor(Size(CUBLAS_WORKSPACE_BYTES // 2), "MiB.0")))

# Items allocated once, before the first step, that stay live: they do not churn.
ALLOCATED_ONCE = frozenset(
    {"weights", "adapters", "master_weights", "optimizer_states", "ddp_buckets", "reduce_bucket", "cublas_workspace"}
)


def _communicators(plan: Plan) -> list[str]:
    """The NCCL communicators one rank uses. Training reduces gradients over data × context ranks (context
    ranks see different tokens of one sequence); a served replica talks only within its tensor/pipeline group
    (replicas, `data`, do not communicate)."""
    par = plan.parallelism
    if plan.workload.task == "inference":
        return ["tensor/pipeline group"] if par.tensor * par.pipeline > 1 else []
    return [
        name
        for name, size in (
            ("data", par.data * par.context),
            ("tensor", par.tensor),
            ("pipeline", par.pipeline),
            ("context", par.context),
        )
        if size > 1
    ]


def _symmetric_workspace(plan: Plan, detail: bool) -> Item:
    """Async TP's symmetric-memory workspace: one per tensor-parallel group, grown to the largest fused op —
    the reduce-scatter of an h-wide output keeps two chunks of T/t rows (torch/distributed/_symmetric_memory
    get_symm_mem_workspace, _pipelined_produce_and_all2all); allocated through CUDA virtual memory, outside
    PyTorch's caching allocator."""
    wl, t = plan.workload, plan.parallelism.tensor
    rows = -(-wl.sequences_per_forward * wl.sequence_length // plan.parallelism.context // t)
    b = nbytes(plan.precision.activation_dtype)
    h = plan.model.hidden_size
    term = Product((Factor(2), Factor(rows), Factor(h), Factor(b)), prefix=f"2 × T/t × h × {b} B = ")
    return item(
        "symmetric_memory",
        "Async-TP symmetric memory",
        term,
        "Workspace of the fused all-gather/reduce-scatter matmuls (torch symmetric memory)",
        detail,
        "device",
    )


def runtime_items(plan: Plan, detail: bool) -> tuple[Item, ...]:
    """What every rank holds outside PyTorch's allocator, the same on every stage."""
    items = _context_and_nccl(tuple(_communicators(plan)), detail)
    return items + ((_symmetric_workspace(plan, detail),) if plan.parallelism.async_tp else ())


# keyed by (the rank's communicators, detail), all the two items read: a search meets a handful of combinations
@lru_cache(maxsize=64)
def _context_and_nccl(groups: tuple[str, ...], detail: bool) -> tuple[Item, Item]:
    nccl = (
        Product(
            (
                Factor(len(groups), f"communicator{'s' if len(groups) > 1 else ''} ({', '.join(groups)})"),
                Factor(Size(NCCL_BYTES_PER_COMMUNICATOR), "MiB.0"),
            )
        )
        if groups
        else fixed(0, "no communication")
    )
    return (
        item(
            "cuda_context",
            "CUDA context",
            _CONTEXT,
            "Driver context, kernels and library handles, outside PyTorch's allocator (CUDA 12, lazy loading)",
            detail,
            "device",
        ),
        item(
            "nccl",
            "NCCL buffers",
            nccl,
            "Per-channel FIFOs of each NCCL communicator this rank uses (NVIDIA/nccl#1685, #864)",
            detail,
            "device",
        ),
    )


def churn_bytes(phase: Phase, once: frozenset[str] = ALLOCATED_ONCE) -> int:
    """The allocated bytes at a moment that were allocated during the step (not once, before it)."""
    return sum([i.bytes for i in phase.items if i.level == "allocated" and i.name not in once])


def held_bytes(phase: Phase, expandable: bool, once: frozenset[str] = ALLOCATED_ONCE) -> tuple[int, int]:
    """(reserved with memory to spare, the least the allocator runs in) at a moment: live bytes plus the
    replay-derived fractions of its churning bytes."""
    churn = churn_bytes(phase, once)
    return (
        phase.allocated_bytes + round(RESERVE_FRACTION[expandable] * churn),
        phase.allocated_bytes + round(LEAST_FRACTION[expandable] * churn),
    )


def within_device(reserved: int, least: int, outside: int, usable: int) -> tuple[int, bool]:
    """The reserved peak on a device with `usable` bytes, and whether the allocator must release its cache
    to get there: a cudaMalloc that fails frees the cached segments and retries, so the reserve shrinks to what
    the device has left as long as the least the run needs fits."""
    if reserved + outside <= usable or least + outside > usable:
        return reserved, False
    return usable - outside, True


def reserve_formula(expandable: bool, flushed: bool) -> str:
    mode = "expandable segments" if expandable else "default segments"
    if flushed:
        return (
            f"device left − peak live: the cache is released near capacity (at least "
            f"{LEAST_FRACTION[expandable]:.0%} of the memory churning each step, {mode})"
        )
    return (
        f"max over moments of (live + {RESERVE_FRACTION[expandable]:.0%} of the memory churning each step, {mode})"
        " − peak live"
    )


def allocator_reserve(label: str, reserve: int, formula: str, note: str, detail: bool) -> Item:
    """The reserved-level item: what the allocator (or a serving engine) holds beyond the live tensors."""
    return item("allocator_reserve", label, fixed(reserve, formula), note, detail, "reserved")


# keyed by (note, detail), all the item reads: one per caller
@lru_cache(maxsize=16)
def cublas_workspace(note: str, detail: bool) -> Item:
    """The cuBLAS workspaces, one per handle (`note` says whose handles)."""
    return item("cublas_workspace", "cuBLAS workspaces", _CUBLAS, note, detail)
