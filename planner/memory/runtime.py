"""Memory beside the model's tensors, for training and inference alike: the CUDA context and NCCL buffers
(outside PyTorch's allocator), the cuBLAS workspaces, async TP's symmetric memory, and the caching
allocator's reserve."""

from __future__ import annotations

from planner.dtypes import nbytes
from planner.memory.result import Item, Phase
from planner.memory.terms import Factor, Product, Size, fixed, item
from planner.plan import Plan
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
# Caching-allocator reserve: freed blocks stay reserved, and blocks freed in one phase (forward activations,
# backward gradients, optimizer temporaries) are sized differently from the next phase's requests, so some
# cannot be reused. Only memory that churns every step fragments; weights and optimizer states are allocated
# once. The fraction of churning memory held extra is an assumption (PyTorch users report reserved 5-30 %
# above allocated) until GPU measurements in bench/measurements pin it down.
ALLOCATOR_CHURN_FRACTION = 0.10

_CONTEXT = Product((Factor(Size(CUDA_CONTEXT_BYTES), "MiB.0"),))
_CUBLAS = Product((Factor(2, "handles"), Factor(Size(CUBLAS_WORKSPACE_BYTES // 2), "MiB.0")))

# Items that do not fragment the allocator's cache: allocated once, or reallocated at the same size every layer
# (gathered units, dequantized weights), which the cache serves from the block it just freed.
_NO_CHURN = {"weights", "adapters", "master_weights", "gradients", "optimizer_states", "ddp_buckets", "reduce_bucket",
             "cublas_workspace", "zero3_gather", "dequantized_weight", "fp8_casts"}


def _communicators(plan: Plan) -> list[str]:
    """The NCCL communicators one rank uses. Training reduces gradients over data × context ranks (context
    ranks see different tokens of one sequence); a served replica talks only within its tensor/pipeline group
    (replicas, `data`, do not communicate)."""
    par = plan.parallelism
    if plan.workload.task == "inference":
        return ["tensor/pipeline group"] if par.tensor * par.pipeline > 1 else []
    return [name for name, size in (("data", par.data * par.context), ("tensor", par.tensor),
                                    ("pipeline", par.pipeline), ("context", par.context)) if size > 1]


def _symmetric_workspace(plan: Plan, detail: bool) -> Item:
    """Async TP's symmetric-memory workspace: one per tensor-parallel group, grown to the largest fused op —
    the reduce-scatter of an h-wide output keeps two chunks of T/t rows (torch/distributed/_symmetric_memory
    get_symm_mem_workspace, _pipelined_produce_and_all2all); allocated through CUDA virtual memory, outside
    PyTorch's caching allocator."""
    wl, t = plan.workload, plan.parallelism.tensor
    rows = -(-wl.micro_batch_size * wl.sequence_length // plan.parallelism.context // t)
    b = nbytes(plan.precision.activation_dtype)
    h = plan.model.hidden_size
    term = Product((Factor(2), Factor(rows), Factor(h), Factor(b)), prefix=f"2 × T/t × h × {b} B = ")
    return item("symmetric_memory", "Async-TP symmetric memory", term,
                "Workspace of the fused all-gather/reduce-scatter matmuls (torch symmetric memory)", detail, "device")


def runtime_items(plan: Plan, detail: bool) -> tuple[Item, ...]:
    """What every rank holds outside PyTorch's allocator, the same on every stage."""
    groups = _communicators(plan)
    nccl = (Product((Factor(len(groups), f"communicator{'s' if len(groups) > 1 else ''} ({', '.join(groups)})"),
                     Factor(Size(NCCL_BYTES_PER_COMMUNICATOR), "MiB.0")))
            if groups else fixed(0, "no communication"))
    items = (item("cuda_context", "CUDA context", _CONTEXT,
                  "Driver context, kernels and library handles, outside PyTorch's allocator (CUDA 12, lazy loading)",
                  detail, "device"),
             item("nccl", "NCCL buffers", nccl,
                  "Per-channel FIFOs of each NCCL communicator this rank uses (NVIDIA/nccl#1685, #864)", detail, "device"))
    return items + ((_symmetric_workspace(plan, detail),) if plan.parallelism.async_tp else ())


def churn_reserve(phase: Phase) -> int:
    """Held-but-free blocks at a moment: a fraction of the memory that is allocated and freed every step in
    varying sizes."""
    churn = 0
    for i in phase.items:
        if i.level == "allocated" and i.name not in _NO_CHURN:
            churn += i.bytes
    return round(ALLOCATOR_CHURN_FRACTION * churn)


def allocator_reserve(label: str, reserve: int, formula: str, note: str, detail: bool) -> Item:
    """The reserved-level item: what the allocator (or a serving engine) holds beyond the live tensors."""
    return item("allocator_reserve", label, fixed(reserve, formula), note, detail, "reserved")


def cublas_workspace(note: str, detail: bool) -> Item:
    """The cuBLAS workspaces, one per handle (`note` says whose handles)."""
    return item("cublas_workspace", "cuBLAS workspaces", _CUBLAS, note, detail)
