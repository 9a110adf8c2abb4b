"""Per-GPU memory of a training step or of inference, itemized, phase by phase.

Conventions (stated once):
- Bytes are integers. `T` is the tokens one GPU processes per micro-batch: micro_batch × sequence / context.
  `h` hidden size, `a` attention heads, `q` = heads × head_dim, `kv` = kv_heads × head_dim (latent attention:
  models.attention_widths), `I` intermediate size, `V` vocabulary, all per tensor-parallel rank where the
  layer is split.
- Three totals. `peak_allocated_bytes` is what `torch.cuda.max_memory_allocated()` reads: live tensors at the
  peak moment. `peak_reserved_bytes` (`torch.cuda.max_memory_reserved()`) adds what the caching allocator holds
  but has not handed out. `device_bytes` (nvidia-smi) adds the CUDA context and NCCL buffers, which live
  outside PyTorch's allocator. `fits` compares `device_bytes` with the GPU's usable memory.
- The peak is found, not summed: each pipeline stage is evaluated at the moments where its live memory can
  be largest (end of forward, loss backward, output-head backward, backward of its last and of its first
  layer, embedding backward, optimizer step) and the largest moment of the most loaded stage is the answer.
- Mixed precision (16-bit compute, fp32 master weights) follows what the mainstream implementation of each
  ZeRO stage does. Stage 0: PyTorch autocast (fp32 parameters, 16-bit copies cached by autocast for the
  backward, fp32 residual stream). Stages 1-2: the ZeRO recipe (a persistent 16-bit copy of the weights, fp32
  master weights sharded with the optimizer states; DeepSpeed, Megatron's distributed optimizer). Stage 3:
  FSDP2 / DeepSpeed ZeRO-3 (fp32 shards are the master; 16-bit layers are all-gathered when used).
- Activations are the tensors autograd saves in Hugging Face-style eager PyTorch code (unfused norms with an
  fp32 upcast, SDPA/FlashAttention, the fp32 logits upcast of `ForCausalLMLoss`), counted op by op. Derived
  from the PyTorch autograd formulas and checked against PyTorch's MemTracker on real HF model code
  (bench/oracle_check.py).

Where each part lives (one module per topic):
- result.py: Item, Phase, Stage, Serving, Estimate and the totals' meaning (TOTALS_MEANING).
- terms.py: a term computes an item's bytes and renders its formula from the same named values.
- layout.py: the pipeline layer split (one, for training and inference), the parameters one GPU holds,
  micro-batches in flight, ZeRO sharding, and the per-stage context every term reads.
- activations.py: what one layer saves for backward (norms, attention, MLP, MoE, LoRA, op-level SAC, compile).
- checkpointing.py: what a stage keeps under each checkpointing strategy, activation offload, autocast casts.
- states.py: weights, master weights, optimizer states, gradients, DDP buckets; optimizers.py: one table entry
  per optimizer; losses.py: one function per loss variant; techniques.py: the transients of backward (ZeRO-3
  gather, fresh gradients, dequantized weights, expert all-to-all, fp8 casts, DoRA, recompute).
- runtime.py: CUDA context, NCCL, cuBLAS, async-TP symmetric memory and the allocator reserve, for both tasks;
  allocator.py: PyTorch's caching allocator replayed from its rules (where the reserve's fractions come from);
  quantize_load.py: what it keeps after torchao quantizes a 16-bit load on the GPU.
- training.py: the phases of a training step; inference.py: generation and serving.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from planner.catalog import Gpu, load_catalog, plan_gpu
from planner.memory.inference import inference_estimate, kv_bytes_per_token, kv_cache_bytes, weight_bytes
from planner.memory.result import TOTALS_MEANING, Estimate, Item, Level, Phase, Serving, Stage
from planner.memory.runtime import (
    CUBLAS_WORKSPACE_BYTES,
    CUDA_CONTEXT_BYTES,
    LEAST_FRACTION,
    NCCL_BYTES_PER_COMMUNICATOR,
    RESERVE_FRACTION,
)
from planner.memory.training import states_floor, training_estimate
from planner.plan.config import Plan
from planner.units import from_gib

__all__ = [
    "CUBLAS_WORKSPACE_BYTES",
    "CUDA_CONTEXT_BYTES",
    "LEAST_FRACTION",
    "NCCL_BYTES_PER_COMMUNICATOR",
    "RESERVE_FRACTION",
    "TOTALS_MEANING",
    "Estimate",
    "Item",
    "Level",
    "Phase",
    "Serving",
    "Stage",
    "estimate",
    "states_floor",
    "kv_bytes_per_token",
    "kv_cache_bytes",
    "weight_bytes",
]


def estimate(plan: Plan, catalog: Mapping[str, Gpu] | None = None, *, detail: bool = True) -> Estimate:
    """Itemized per-GPU memory of one training step (or of inference) of `plan` and whether it fits its GPU.

    `detail=False` leaves the items' formulas empty: the same bytes, several times faster, for searches."""
    catalog = catalog if catalog is not None else load_catalog()
    hw = plan.hardware
    gpu, offered_host = plan_gpu(catalog, hw.gpu, hw.offering, hw.count)
    host = offered_host if hw.host_memory_gib_per_gpu is None else from_gib(hw.host_memory_gib_per_gpu)
    if plan.workload.task == "inference":
        return inference_estimate(plan, gpu, detail)
    return replace(training_estimate(plan, gpu, detail), host_limit_bytes=host)
