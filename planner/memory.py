"""Per-GPU memory of a training step, itemized, phase by phase.

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
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Callable, Literal

from planner.catalog import Gpu, load_catalog
from planner.dtypes import QUANTIZED, nbytes, quantized_bytes
from planner.errors import bad
from planner.models import Model, attention_widths, lora_params_per_layer, param_counts, projection_shapes
from planner.plan import Plan
from planner.units import MiB, format_bytes

if TYPE_CHECKING:
    from planner.inference import Serving

Level = Literal["allocated", "reserved", "device"]

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

# NVFP4 (torchao nvfp4 training): 4-bit values with one 1-byte e4m3 scale per 16 (NVIDIA's NVFP4 format).
NVFP4_BYTES = 0.5 + 1 / 16
# MXFP8 (OCP microscaling): 8-bit values with one 1-byte e8m0 scale per 32.
MXFP8_BYTES = 1 + 1 / 32

# bitsandbytes 8-bit optimizers quantize each state blockwise with one fp32 absmax per 2,048 values
# (Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization").
ADAM8BIT_BLOCK = 2048
# bitsandbytes optimizers whose states live in CUDA managed memory, outside PyTorch's allocator
PAGED_OPTIMIZERS = ("paged_adamw", "paged_adamw_8bit")

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


@dataclass(frozen=True, kw_only=True)
class Phase:
    """Live memory at one moment of the step; its allocator-level items add up to `allocated_bytes`, and
    device-level ones (paged optimizer states in CUDA managed memory) to `outside_bytes`."""

    name: str  # e.g. "forward", "loss backward", "backward (first layer)", "optimizer step"
    description: str
    items: tuple[Item, ...]
    allocated_bytes: int = -1  # derived: the sum of the allocated items
    outside_bytes: int = -1  # derived: the sum of the device-level items (outside PyTorch's allocator)

    def __post_init__(self) -> None:
        object.__setattr__(self, "allocated_bytes", sum(i.bytes for i in self.items if i.level == "allocated"))
        object.__setattr__(self, "outside_bytes", sum(i.bytes for i in self.items if i.level == "device"))


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

    @property
    def peak_allocated_bytes(self) -> int:
        return self.peak.allocated_bytes


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
    serving: Serving | None = None  # inference with a serving engine: its KV-cache capacity
    inference_stages: tuple[Stage, ...] = ()  # inference: its moments, computed with the estimate

    @cached_property
    def stages(self) -> tuple[Stage, ...]:
        """Every pipeline stage (computed when asked: the peak needs only the first and the last)."""
        if self.inference_stages:
            return self.inference_stages
        return tuple(_stage(self.plan, i, self.runtime_bytes) for i in range(self.plan.parallelism.pipeline))

    @property
    def fits(self) -> bool:
        return self.device_bytes <= self.usable_bytes

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
                return (f"fits on {gpu}: the engine's {have} hold the weights and KV cache for "
                        f"{s.max_concurrent_sequences:,} sequences of {inf.context_tokens:,} tokens "
                        f"(batch {inf.batch_size}: up to {s.max_context_tokens:,} tokens each)")
            return (f"does not fit on {gpu}: the engine's {have} leave no room for the KV cache of "
                    f"{inf.batch_size} sequences of {inf.context_tokens:,} tokens (needs {need})")
        if self.fits:
            return f"fits on {gpu}: needs {need} per GPU of {have} usable ({format_bytes(self.headroom_bytes)} free)"
        return f"does not fit on {gpu}: needs {need} per GPU, {have} usable (short by {format_bytes(-self.headroom_bytes)})"


def _n(x: int) -> str:
    return f"{x:,}"


# --- Parameters held by one GPU -----------------------------------------------------------------------------
@dataclass(frozen=True)
class _StageParams:
    total: int  # parameters on this GPU's model shard (tensor- and pipeline-parallel split), before ZeRO
    experts: int  # of which are routed MoE experts (split by expert parallelism; ZeRO shards them over
    #              the expert-data-parallel ranks)
    matmul: int  # of which are inputs to matmuls (autocast casts them to 16-bit)
    dense_layers: int  # layers of this stage with a dense MLP
    moe_layers: int  # layers of this stage with an MoE MLP
    layer: int  # the largest transformer layer on this rank
    largest_unit: int  # largest FSDP/ZeRO-3 unit: a layer, the embedding or the output head
    gathered_pair: int  # largest two neighbouring units (the one in use and the one prefetched)
    gathered_pair_layers: int  # of which transformer-layer parameters
    embedding: int  # embedding rows on this rank when the stage holds the embedding, else 0
    head: int  # output-projection parameters used on this stage (tied or not), else 0
    head_own: int  # output-head parameters stored on this stage beside the embedding (untied, or a PP copy)
    linear: int  # parameters of the layers' projections (what weight quantization applies to)
    linear_rows: int  # their output rows (per-row quantization scales)
    largest_matrix: int  # largest projection matrix of a layer (a dequantized copy is made for each matmul)
    adapters: int  # LoRA parameters on this stage (task lora/qlora), else 0


def _stage_layers(m: Model, stage: int, pipeline: int) -> tuple[int, int]:
    """(dense, MoE) layers of a pipeline stage; MoE models put their dense layers first."""
    per = m.num_layers // pipeline
    start = stage * per
    dense_total = m.num_layers - m.moe_layers
    dense = max(0, min(dense_total, start + per) - start)
    return dense, per - dense


def _stage_params(plan: Plan, stage: int) -> _StageParams:
    m, par = plan.model, plan.parallelism
    p, t, ep = par.pipeline, par.tensor, par.expert
    counts = param_counts(m, t, ep)
    table = counts.embedding  # vocab-parallel rows of the embedding (and of the output head)
    first, last = stage == 0, stage == p - 1
    dense, moe = _stage_layers(m, stage, p)
    embedding = table if first else 0
    # the output head: its own table when untied; with tied embeddings and pipeline > 1 the last stage keeps a
    # copy of the embedding (Megatron), with pipeline = 1 it is the embedding itself
    head_params = table if last and (not m.tie_embeddings or p > 1) else 0
    total = dense * counts.layer + moe * counts.moe_layer + embedding + head_params + (counts.final_norm if last else 0)
    moe_linear = counts.attention + counts.experts + counts.shared + counts.router
    linear = dense * (counts.attention + counts.mlp) + moe * moe_linear
    # ZeRO-3/FSDP units in execution order; a unit is all-gathered while its neighbour is prefetched
    units = [(u, layer) for u, layer in ((embedding, False), *[(counts.layer, True)] * dense,
                                           *[(counts.moe_layer, True)] * moe, (head_params, False)) if u]
    pairs = [(a + b, a * la + b * lb) for (a, la), (b, lb) in zip(units, units[1:])] or [(units[0][0], units[0][0] * units[0][1])]
    pair, pair_layers = max(pairs)
    shapes = projection_shapes(m, t)
    rows = dense * sum(o for _, o in shapes.values())
    largest = max(i * o for i, o in shapes.values())
    if moe:
        e_inter = m.moe_intermediate_size // t
        per_expert_rows = (2 * e_inter if m.mlp == "swiglu" else e_inter) + m.hidden_size
        experts_here = m.num_experts // ep + m.shared_experts
        rows += moe * (sum(shapes[k][1] for k in ("q", "k", "v", "o")) + experts_here * per_expert_rows + m.num_experts)
        largest = max(largest, m.hidden_size * e_inter)
    lora = plan.workload.lora
    adapters = 0
    if plan.workload.task in ("lora", "qlora"):
        attn_targets = tuple(x for x in lora.targets if x in ("q", "k", "v", "o"))
        mlp_targets = tuple(x for x in lora.targets if x not in attn_targets)
        adapters = dense * lora_params_per_layer(m, lora.targets, lora.rank, t)
        if moe:  # MLP adapters on every expert of this rank (PEFT targets each expert's projections by name)
            e = m.moe_intermediate_size // t
            per_expert = sum(lora.rank * (i + o) for x in mlp_targets
                             for i, o in [{"gate": (m.hidden_size, e), "up": (m.hidden_size, e), "down": (e, m.hidden_size)}[x]])
            adapters += moe * (lora_params_per_layer(m, attn_targets, lora.rank, t)
                               + per_expert * (m.num_experts // ep + m.shared_experts))
    return _StageParams(total=total, experts=moe * counts.experts,
                        matmul=dense * (counts.attention + counts.mlp) + moe * moe_linear + (table if last else 0),
                        dense_layers=dense, moe_layers=moe,
                        layer=max(counts.layer if dense else 0, counts.moe_layer if moe else 0),
                        largest_unit=max(u for u, _ in units), gathered_pair=pair, gathered_pair_layers=pair_layers,
                        embedding=embedding, head=table if last else 0,
                        head_own=head_params, linear=linear, linear_rows=rows, largest_matrix=largest,
                        adapters=adapters)


# --- Activations saved for backward, per layer ----------------------------------------------------------------
@dataclass(frozen=True)
class _LayerActs:
    norms: int  # bytes per token in the two norms (replicated across tensor-parallel ranks unless sequence parallel)
    attention: int  # bytes per token in attention (split by tensor parallelism)
    scores: int  # bytes per token of materialized attention scores (eager only; recomputed by selective AC)
    mlp: int  # bytes per token in the MLP (split)
    moe_mlp: int  # bytes per token in an MoE layer's MLP: router, routed experts, shared experts (0: dense)
    norm_formula: str
    attention_formula: str
    mlp_formula: str


def _lora_layer_acts(plan: Plan) -> _LayerActs:
    """Bytes per token one layer saves for backward under LoRA, per tensor-parallel rank.

    A frozen linear saves nothing (the gradient to its input needs only the weight), so what remains is what
    gradients must flow through: the norms' fp32 inputs, attention, the SwiGLU/GeLU intermediates, and each
    adapted projection's input and rank-r intermediate. PEFT casts each adapter's input to the adapter dtype;
    with fp32 adapters under autocast that makes one 16-bit copy per adapter (peft LoraLayer._cast_input_dtype).
    Quantized projections (QLoRA) save no input either: current bitsandbytes MatMul4Bit keeps only the packed
    weight (ctx.tensors = (None, B)); releases around 0.41 also kept the input A.
    """
    m, prec, par, wl = plan.model, plan.precision, plan.parallelism, plan.workload
    lora, t = wl.lora, par.tensor
    h, b16 = m.hidden_size, nbytes(prec.activation_dtype)
    shapes = projection_shapes(m, t)
    inter = shapes["up"][1]
    targets = set(lora.targets)
    own_copies = prec.mixed  # fp32 adapters: each adapter saves its own 16-bit copy of its input
    # norms: the fp32 upcast input (RMSNorm) or the input (LayerNorm) is always needed; the output is saved
    # only as the shared input of adapters (when they do not make their own copies)
    norm_in = 4 * h if m.norm == "rmsnorm" else b16 * h
    shared = [("q", "k", "v"), ("gate", "up")] if m.mlp == "swiglu" else [("q", "k", "v"), ("up",)]
    outs = sum(b16 * h for group in shared if not own_copies and targets & set(group))
    norms = 2 * norm_in + outs
    norm_formula = f"2 × {'fp32 input 4h' if m.norm == 'rmsnorm' else f'input {b16}h'}" + (
        f" + {outs // (b16 * h)} shared norm output(s) {b16}h" if outs else "")
    attention, scores, attention_formula = _attention_acts(plan, b16, frozen=True)
    # MLP: SwiGLU keeps gate, silu(gate), up; the product only if down is adapted (and shares it); GeLU keeps fc
    keep = 3 if m.mlp == "swiglu" else 1
    keep += 1 if ("down" in targets and not own_copies) else 0
    mlp = keep * b16 * inter
    mlp_formula = f"{keep} × {b16}I (frozen projections save no inputs)"
    # adapters: the rank-r intermediate each, own input copies, dropout copies and masks
    adapters = 0
    for target in targets:
        width = shapes[target][0]
        adapters += b16 * lora.rank + (b16 * width if own_copies else 0)
        if lora.dropout > 0:
            adapters += (b16 + 1) * width
        if lora.variant == "dora":
            # DoRA (peft DoraLinearLayer.forward): the magnitude's two products save the base output and the
            # adapter output, T × d_out each in the matmul output dtype (MemTracker on peft 0.21)
            adapters += 2 * b16 * shapes[target][1]
    attention += adapters  # split like attention: per rank
    attention_formula += f" + adapters {_n(adapters)} B" + (" (with DoRA's 2 × d_out outputs)" if lora.variant == "dora" else "")
    # MoE with frozen experts: per routed token silu's input and output and up (3 × I_e), and the expert output
    # (saved for the routing weights, which carry gradients back to the router's input); the router softmax
    moe_mlp = 0
    if m.num_experts:
        e = m.moe_intermediate_size // t
        kept = 3 if m.mlp == "swiglu" else 1
        slots = _routed_slots(plan)
        moe_mlp = (4 * m.num_experts + round(slots * b16 * (h + kept * e))
                   + m.shared_experts * kept * b16 * e)
        mlp_formula += f"; MoE layers: router 4E + {slots:g} routed slots × {b16}(h + {kept}I_e)"
    return _LayerActs(norms=norms, attention=attention, scores=scores, mlp=mlp, moe_mlp=moe_mlp,
                      norm_formula=norm_formula, attention_formula=attention_formula, mlp_formula=mlp_formula)


def _attention_acts(plan: Plan, b16: int, frozen: bool = False) -> tuple[int, int, str]:
    """Per token and layer on one rank: (bytes attention saves, bytes of its s×s scores, formula).

    Fused kernels (FlashAttention / SDPA) save q, k, v, the output and an fp32 log-sum-exp per head; no s×s
    matrix. Eager attention expands k, v to all heads (repeat_kv), saves the fp32 softmax output (HF upcasts)
    and its 16-bit copy for the second matmul, and a contiguous copy of the output.
    Latent attention (HF DeepseekV3Attention, checked against MemTracker) also keeps each latent's RMSNorm
    (fp32 input, normalized and output copies) and, because the values are a view into kv_b's output, the
    whole of it (heads × (nope + v)) under fused kernels rather than the values alone.
    """
    m, t = plan.model, plan.parallelism.tensor
    q, k, v, out = attention_widths(m, t)
    a = m.num_attention_heads // t
    # Per-head q/k RMSNorm (Qwen3 / Gemma 3, MemTracker on HF code): the fp32 upcast input and the normalized
    # tensor in the activation dtype (only the fp32 input when the norm weights are frozen: LoRA), and one fp32
    # rsqrt per query and KV head.
    qk = (4 + (0 if frozen else b16)) * (q + k) + 4 * (a + k // m.head_dim) if m.qk_norm else 0
    if plan.techniques.attention == "eager" and not m.mla:
        k = v = q  # repeat_kv expands grouped keys and values to every query head
    latents = 0
    if m.mla:
        if plan.techniques.attention == "flash":  # eager's matmul saves a contiguous copy of the values instead
            v = a * (m.head_dim + m.v_head_dim)
        latents = (4 + 2 * b16) * ((m.q_lora_rank or 0) + m.kv_lora_rank)
    attention = b16 * (q + k + v + out) + latents + qk
    formula = f"{b16}(q + k + v + out) = {b16}×({_n(q)} + {_n(k)} + {_n(v)} + {_n(out)})"
    if latents:
        formula += f" + latents (4 + 2×{b16})×{_n((m.q_lora_rank or 0) + m.kv_lora_rank)}"
    if qk:
        formula += f" + q/k norms {_n(qk)}"
    if plan.techniques.attention == "flash":
        return attention + 4 * a, 0, formula + f" + 4a(lse) with a = {a}"
    s = plan.workload.sequence_length
    per = 4 if b16 == 4 else 4 + b16
    return attention, a * s * per, formula + f" + a·s·{per} scores = {a}×{_n(s)}×{per}"


def _layer_acts(plan: Plan) -> _LayerActs:
    """Bytes per token one layer saves for backward, per tensor-parallel rank."""
    if plan.workload.task in ("lora", "qlora"):
        return _lora_layer_acts(plan)
    m, prec, par = plan.model, plan.precision, plan.parallelism
    t = par.tensor
    h = m.hidden_size
    inter = m.intermediate_size // t
    autocast = _autocast(plan)
    b16 = nbytes(prec.activation_dtype)  # activation dtype (16-bit under autocast too: matmul outputs)
    fp32 = b16 == 4
    # linears reading each norm's output: Llama family q, k, v and gate, up; latent attention q(_a), kv_a;
    # GPT-2 one fused qkv and one fc
    separate = m.mlp == "swiglu"
    consumers = (2 if m.mla else 3 if separate else 1) + (2 if separate else 1)

    # Norms. HF RMSNorm upcasts its input to fp32 (saved), saves the normalized 16-bit tensor for the weight's
    # gradient, and its output is saved by the next linear. nn.LayerNorm saves its input and output (+ stats).
    # Under autocast the residual stream is fp32, norms run in fp32, and each consuming linear casts the
    # norm's output to 16-bit separately (autocast caches only leaf weights), saving its own copy.
    if m.norm == "rmsnorm":
        if autocast:
            norms = 2 * (4 + 4) * h + 2 * consumers * h
            norm_formula = f"2 norms × (fp32 input 4h + normalized 4h) + {consumers} autocast copies × 2h"
        elif fp32:
            norms = 2 * 12 * h
            norm_formula = "2 norms × (input 4h + normalized 4h + output 4h)"
        else:
            norms = 2 * (4 + 2 * b16) * h
            norm_formula = f"2 norms × (fp32 upcast 4h + normalized {b16}h + output {b16}h)"
    else:
        if autocast:
            norms = 2 * 4 * h + 2 * consumers * h
            norm_formula = f"2 norms × fp32 input 4h + {consumers} autocast copies × 2h"
        else:
            norms = 2 * 2 * b16 * h
            norm_formula = f"2 norms × (input {b16}h + output {b16}h)"

    attention, scores, attention_formula = _attention_acts(plan, b16)

    # MLP. SwiGLU saves gate, silu(gate), up and their product (4 × I); GeLU saves fc and gelu(fc) (2 × I).
    factor = 4 if m.mlp == "swiglu" else 2
    mlp = factor * b16 * inter
    mlp_formula = f"{factor} × {b16}I = {factor}×{b16}×{_n(inter)}"
    if plan.techniques.compile and not autocast and plan.techniques.attention == "flash" and not m.mla:
        # torch.compile's min-cut partitioner (inductor defaults) saves the layer input, the norms' outputs and
        # fp32 rstd, q and k after RoPE, v, the attention output and log-sum-exp, o_proj's output, and gate, up
        # and their product; the fp32 upcasts, normalized copies and silu are recomputed (partition of HF Llama
        # code by inductor's own partitioner: 8h + 4q + 4kv + 4a + 6I + 8 B in bf16, exact on two shapes)
        q, k, v, out = attention_widths(m, t)
        a = m.num_attention_heads // t
        norms = 4 * b16 * h + 8
        norm_formula = f"compiled: layer input, 2 norm outputs and o_proj's output 4 × {b16}h + 2 fp32 rstd"
        attention = b16 * (q + k + v + out) + 4 * a
        attention_formula = f"compiled: {b16}(q + k + v + out) + 4a"
        factor = 3 if m.mlp == "swiglu" else 2
        mlp = factor * b16 * inter
        mlp_formula = f"compiled: {factor} × {b16}I (silu recomputed)"
    if prec.fp8_recipe == "nvfp4":
        # torchao NVFP4 linears save 4-bit codes of their input (0.5 B + one e4m3 scale per 16 values) instead of
        # the 16-bit tensor, one copy per consuming linear (nvfp4_linear.py nvfp4_mm: x_col_codes, x_col_sf)
        out = attention_widths(m, t)[3]
        norms += round(NVFP4_BYTES * consumers * h) - (2 * consumers * h if autocast else 2 * b16 * h)
        attention += round((NVFP4_BYTES - b16) * out)
        mlp += round((NVFP4_BYTES - b16) * inter)
        norm_formula += f"; linear inputs as NVFP4 ({NVFP4_BYTES:g} B × {consumers}h)"
        mlp_formula += f"; the down projection's input as NVFP4 ({NVFP4_BYTES:g} B × I)"
    # MoE (dropless; HF transformers 5 grouped-GEMM experts, traced with saved_tensors_hooks): per token the
    # router's fp32 softmax over E experts, top-k indices and normalized weights (4E + 12k + 4 B); per routed
    # token the gathered input, gate_up, silu(gate), their product, the expert output kept for the routing-
    # weight product, the fp32 routing weight and three int64 permutation indices (2h + 4I_e in the compute
    # dtype + 28 B); shared experts as a dense MLP.
    moe_mlp = 0
    if m.num_experts:
        e, k = m.moe_intermediate_size // t, m.experts_per_token
        # DeepSeek's routers (V2/V3: the latent-attention presets) run in fp32 on an fp32 copy of the input (+4h)
        router_copy = 4 * h if m.mla else 0
        slots = _routed_slots(plan)
        moe_mlp = (4 * m.num_experts + 12 * k + 4 + router_copy + round(slots * (b16 * (2 * h + factor * e) + 28))
                   + m.shared_experts * factor * b16 * e)
        mlp_formula += (f"; MoE layers: router 4E + 12k + 4{' + fp32 input 4h' if router_copy else ''}"
                        f" + {slots:g} routed slots × ({b16}(2h + {factor}I_e) + 28)"
                        + (f" + {m.shared_experts} shared × {factor} × {b16}I_e" if m.shared_experts else ""))
    return _LayerActs(norms=norms, attention=attention, scores=scores, mlp=mlp, moe_mlp=moe_mlp,
                      norm_formula=norm_formula, attention_formula=attention_formula, mlp_formula=mlp_formula)


def _sac_op_acts(plan: Plan, input_bytes: int) -> tuple[int, int, int]:
    """Per token and layer under torchtitan's op-level selective checkpointing: (replicated bytes, attention
    bytes, MLP bytes) of what it saves.

    torchtitan/distributed/activation_checkpoint.py _apply_op_sac: the outputs of ops in its save list (mm,
    the SDPA kernels, reduce-scatter, max) are kept, except every second mm of a block; everything else is
    recomputed in backward. A Llama block's mm's are q, k, v, o, gate, up, down: q, v, gate and down are
    kept (biased projections run as addmm, which is neither saved nor counted). The block's input is kept by
    the checkpoint. torch.compile drops the last projection's output, which backward never reads. Measured
    with MemTracker and the partitioner on HF Llama code: 4h + 4q + 2kv + 4a + 2I B in bf16.
    """
    m, t = plan.model, plan.parallelism.tensor
    b = nbytes(plan.precision.activation_dtype)
    q, k, v, out = attention_widths(m, t)
    h, inter = m.hidden_size, m.intermediate_size // t
    # (output width, where its bytes go) of each projection in execution order; 'rep' = full h on every rank
    if m.mlp == "swiglu":
        mms = [(q, "attn"), (k, "attn"), (v, "attn"), (h, "rep"), (inter, "mlp"), (inter, "mlp"), (h, "rep")]
    else:
        mms = [(q + k + v, "attn"), (h, "rep"), (inter, "mlp"), (h, "rep")]
    saved = {"rep": input_bytes * h, "attn": b * out + 4 * (m.num_attention_heads // t), "mlp": 0}
    if not m.bias:
        for n, (width, where) in enumerate(mms):
            if n % 2 == 0 and not (plan.techniques.compile and n == len(mms) - 1):
                saved[where] += b * width
    return saved["rep"], saved["attn"], saved["mlp"]


def _in_flight(plan: Plan, index: int) -> float:
    """Micro-batches whose activations pipeline stage `index` holds at once, in units of one micro-batch through
    the whole stage."""
    par, m = plan.parallelism, plan.micro_batches_per_step
    p = par.pipeline
    if par.pipeline_schedule == "gpipe":  # every forward before any backward (Huang et al. 2019)
        return m
    if par.pipeline_schedule == "interleaved_1f1b":
        # Megatron forward_backward_pipelining_with_interleaving: 2(p - i - 1) + (v - 1)p warm-up forwards of
        # model chunks (1/v of the stage each), one more in the steady state; stage 0 holds p + (p - 1)/v
        # micro-batches (Narayanan et al. 2021, §2.2)
        v = par.virtual_stages
        return min(2 * (p - index - 1) + (v - 1) * p + 1, m * v) / v
    # 1F1B: stage i holds up to p - i micro-batches (Narayanan et al. 2021); zero-bubble ZB-H1 splits backward
    # into input- and weight-gradient passes within the same peak (Qi et al. 2023, §3)
    return min(p - index, m)


def _routed_slots(plan: Plan) -> float:
    """Expert slots one token's activations occupy in a MoE layer: top-k when dropless; with a capacity factor
    every expert's buffer is padded to capacity_factor × T·k/E tokens (Lepikhin et al. 2020, GShard §2.2), so
    k × capacity_factor on average whatever the routing."""
    return plan.model.experts_per_token * (plan.techniques.moe_capacity_factor or 1)


def _autocast(plan: Plan) -> bool:
    """PyTorch autocast recipe: fp32 parameters, 16-bit compute, no ZeRO (see module docstring). LoRA keeps
    its frozen base in 16 bits, so only the small adapters are fp32 and the activations stay 16-bit."""
    return (plan.precision.mixed and plan.parallelism.zero_stage == 0 and plan.techniques.offload == "none"
            and plan.workload.task in ("pretrain", "finetune"))


# --- Trainable parameters and the optimizer ----------------------------------------------------------------
@dataclass(frozen=True)
class _Trainable:
    """Parameters the optimizer updates on one GPU's model shard (before ZeRO), by shape."""
    matrices: tuple[tuple[int, int, int], ...]  # (rows, cols, how many)
    vectors: int  # elements in 1-D parameters (norms, biases)
    embedding_like: int  # elements of embedding and output tables (Muon leaves them to AdamW)

    @property
    def total(self) -> int:
        return sum(r * c * n for r, c, n in self.matrices) + self.vectors


def _trainable(plan: Plan, sp: _StageParams) -> _Trainable:
    m, par = plan.model, plan.parallelism
    shapes = projection_shapes(m, par.tensor)
    layers = sp.dense_layers + sp.moe_layers
    expert_shapes, experts_here = {}, 0
    if sp.moe_layers:
        e, h = m.moe_intermediate_size // par.tensor, m.hidden_size
        expert_shapes = {"gate": (h, e), "up": (h, e), "down": (e, h)} if m.mlp == "swiglu" else {"up": (h, e), "down": (e, h)}
        experts_here = m.num_experts // par.expert + m.shared_experts
    if plan.workload.task in ("lora", "qlora"):
        r = plan.workload.lora.rank
        mats = []
        for t in plan.workload.lora.targets:
            if t in expert_shapes:  # an MLP target: dense layers, and every expert of the MoE layers
                pieces = ((shapes[t], sp.dense_layers), (expert_shapes[t], sp.moe_layers * experts_here))
            else:
                pieces = ((shapes[t], layers),)
            mats += [x for (i, o), n in pieces if n for x in ((r, i, n), (o, r, n))]
        return _Trainable(matrices=tuple(mats), vectors=0, embedding_like=0)
    attention = ("q", "k", "v", "o")
    layer_mats = tuple((o, i, sp.dense_layers if name not in attention else layers)
                       for name, (i, o) in shapes.items() if sp.dense_layers or name in attention)
    if sp.moe_layers:
        layer_mats += tuple((o, i, sp.moe_layers * experts_here) for i, o in expert_shapes.values())
        layer_mats += ((m.num_experts, m.hidden_size, sp.moe_layers),)  # routers
    tables = tuple((sp.embedding // m.hidden_size, m.hidden_size, 1) for _ in range(bool(sp.embedding))) + \
        tuple((sp.head_own // m.hidden_size, m.hidden_size, 1) for _ in range(bool(sp.head_own)))
    vectors = sp.total - sum(r * c * n for r, c, n in layer_mats + tables)
    return _Trainable(matrices=layer_mats + tables, vectors=vectors, embedding_like=sp.embedding + sp.head_own)


def _optimizer(plan: Plan, tr: _Trainable) -> tuple[int, int, str, str]:
    """(state bytes, step temporaries, formula, note) of the optimizer over `tr`, before ZeRO sharding."""
    prec = plan.precision
    opt, bs, n = prec.optimizer, nbytes(prec.optimizer_state), tr.total
    largest = max((r * c for r, c, _ in tr.matrices), default=tr.vectors)
    if opt == "adamw":
        temp = {"foreach": n * bs, "forloop": largest * bs, "fused": 0}[prec.optimizer_impl]
        return 2 * n * bs, temp, f"{_n(n)} params × 2 states × {bs} B ({prec.optimizer_state})", \
            "AdamW exp_avg and exp_avg_sq; foreach materializes sqrt(exp_avg_sq) for all parameters at the step"
    if opt in ("adamw_8bit", "paged_adamw_8bit"):
        blocks = -(-n // ADAM8BIT_BLOCK)
        paged = opt in PAGED_OPTIMIZERS
        return 2 * (n + 4 * blocks), 0, f"{_n(n)} params × 2 states × 1 B + fp32 absmax per {ADAM8BIT_BLOCK:,}" + (
            ", in CUDA managed memory" if paged else ""), \
            "bitsandbytes 8-bit AdamW: blockwise-quantized states, updated in place by a fused kernel" + (
                "; paged: outside PyTorch's allocator, evicted to host under pressure" if paged else "")
    if opt == "paged_adamw":
        return 2 * n * 4, 0, f"{_n(n)} params × 2 states × 4 B, in CUDA managed memory", \
            "bitsandbytes paged AdamW: states in unified memory outside PyTorch's allocator, evicted to host under pressure"
    if opt == "adafactor":
        factored = sum(4 * (r + c) * k for r, c, k in tr.matrices) + 4 * tr.vectors
        return factored, 2 * largest * 4, "4 B × (rows + columns) per matrix + 4 B per vector element", \
            "Adafactor (HF, beta1=None): factored second moment only; the step squares one gradient at a time"
    if opt == "lion":
        return n * bs, largest * bs, f"{_n(n)} params × 1 state × {bs} B", "Lion keeps one momentum buffer"
    if opt == "muon":
        hidden = n - tr.vectors - tr.embedding_like
        others = n - hidden
        return (hidden + 2 * others) * bs, 3 * largest * 2, \
            f"{_n(hidden)} matrix params × 1 × {bs} B + {_n(others)} other params × 2 × {bs} B", \
            "Muon momentum for hidden matrices, AdamW for embeddings, head and vectors; Newton-Schulz on bf16 copies"
    if opt == "sgd_momentum":
        return n * bs, 0, f"{_n(n)} params × 1 state × {bs} B", "SGD momentum buffer"
    return 0, 0, "0 (sgd keeps no state)", "Plain SGD keeps no state"


# --- The estimate --------------------------------------------------------------------------------------------
def estimate(plan: Plan, catalog: dict[str, Gpu] | None = None, *, detail: bool = True) -> Estimate:
    """Itemized per-GPU memory of one training step of `plan` and whether it fits its GPU.

    `detail=False` leaves the items' formulas empty: the same bytes, several times faster, for searches."""
    catalog = catalog if catalog is not None else load_catalog()
    if plan.hardware.gpu not in catalog:
        raise bad("hardware.gpu", plan.hardware.gpu, f"is not in the GPU catalog; known: {', '.join(catalog)}")
    gpu = catalog[plan.hardware.gpu]
    if plan.workload.task == "inference":
        from planner.inference import inference_estimate  # noqa: PLC0415 - inference builds on this module

        return inference_estimate(plan, gpu, detail)
    runtime = _runtime_items(plan)
    runtime_bytes = sum(i.bytes for i in runtime)
    # A middle stage holds a subset of the first stage's items, each no larger (no embedding, fewer
    # micro-batches in flight), so the most loaded stage is the first or the last.
    p = plan.parallelism.pipeline
    edges = (_stage(plan, 0, runtime_bytes, detail),) + ((_stage(plan, p - 1, runtime_bytes, detail),) if p > 1 else ())
    worst = max(edges, key=lambda s: (s.device_bytes, -s.index))
    reserve = worst.reserved_bytes - worst.peak_allocated_bytes
    items = worst.peak.items + (Item(
        name="allocator_reserve", label="Allocator reserve", bytes=reserve,
        formula=f"max over phases of (live + {ALLOCATOR_CHURN_FRACTION:.0%} of per-step memory) − peak live",
        note="Blocks the caching allocator keeps after freeing them; assumption pending GPU measurement",
        level="reserved"),) + runtime
    return Estimate(plan=plan, gpu=gpu, items=items, phase=worst.peak.name, stage=worst.index,
                    peak_allocated_bytes=worst.peak_allocated_bytes, peak_reserved_bytes=worst.reserved_bytes,
                    device_bytes=worst.device_bytes, usable_bytes=gpu.usable_bytes,
                    host_bytes=_host_bytes(plan) + max(s.host_bytes for s in edges), runtime_bytes=runtime_bytes)


# Items that do not fragment the allocator's cache: allocated once, or reallocated at the same size every layer
# (gathered units, dequantized weights), which the cache serves from the block it just freed.
_NO_CHURN = {"weights", "adapters", "master_weights", "gradients", "optimizer_states", "ddp_buckets",
             "cublas_workspace", "zero3_gather", "dequantized_weight", "fp8_casts"}


def _churn_reserve(phase: Phase) -> int:
    """Held-but-free blocks at a moment: a fraction of the memory that is allocated and freed every step in
    varying sizes."""
    return round(ALLOCATOR_CHURN_FRACTION * sum(i.bytes for i in phase.items
                                                if i.name not in _NO_CHURN and i.level == "allocated"))


def _runtime_items(plan: Plan) -> tuple[Item, ...]:
    par = plan.parallelism
    # gradients are reduced over data × context ranks (context ranks see different tokens of one sequence)
    groups = [name for name, size in (("data", par.data * par.context), ("tensor", par.tensor),
                                      ("pipeline", par.pipeline), ("context", par.context)) if size > 1]
    nccl = len(groups) * NCCL_BYTES_PER_COMMUNICATOR
    return (
        Item(name="cuda_context", label="CUDA context", bytes=CUDA_CONTEXT_BYTES,
             formula=format_bytes(CUDA_CONTEXT_BYTES, "MiB", 0),
             note="Driver context, kernels and library handles, outside PyTorch's allocator (CUDA 12, lazy loading)",
             level="device"),
        Item(name="nccl", label="NCCL buffers", bytes=nccl,
             formula=(f"{len(groups)} communicator{'s' if len(groups) > 1 else ''} ({', '.join(groups)}) × "
                      f"{format_bytes(NCCL_BYTES_PER_COMMUNICATOR, 'MiB', 0)}") if groups else "no communication",
             note="Per-channel FIFOs of each NCCL communicator this rank uses (NVIDIA/nccl#1685, #864)",
             level="device"),
    ) + ((_symmetric_workspace(plan),) if par.async_tp else ())


def _symmetric_workspace(plan: Plan) -> Item:
    """Async TP's symmetric-memory workspace: one per tensor-parallel group, grown to the largest fused op —
    the reduce-scatter of an h-wide output keeps two chunks of T/t rows (torch/distributed/_symmetric_memory
    get_symm_mem_workspace, _pipelined_produce_and_all2all); allocated through CUDA virtual memory, outside
    PyTorch's caching allocator."""
    wl, t = plan.workload, plan.parallelism.tensor
    rows = -(-wl.micro_batch_size * wl.sequence_length // plan.parallelism.context // t)
    b = nbytes(plan.precision.activation_dtype)
    return Item(name="symmetric_memory", label="Async-TP symmetric memory", bytes=2 * rows * plan.model.hidden_size * b,
                formula=f"2 × T/t × h × {b} B = 2 × {_n(rows)} × {_n(plan.model.hidden_size)} × {b}",
                note="Workspace of the fused all-gather/reduce-scatter matmuls (torch symmetric memory)", level="device")


def _host_bytes(plan: Plan) -> int:
    """CPU memory per GPU holding what `techniques.offload` moved off the GPU."""
    if plan.techniques.offload == "none":
        return 0
    prec, par = plan.precision, plan.parallelism
    sp = max((_stage_params(plan, i) for i in range(par.pipeline)), key=lambda s: s.total)
    trainable = _trainable(plan, sp)
    states = _optimizer(plan, trainable)[0]
    # fp32 master (if any) and fp32 gradients the CPU step reads, the optimizer states (+ the parameters)
    host = trainable.total * ((4 if prec.master_weights == "fp32" else 0) + 4) + states
    if plan.techniques.offload == "optimizer_and_params":
        host += sp.total * nbytes(prec.activation_dtype)
    return -(-host // (par.data * par.context))


def _stage(plan: Plan, index: int, runtime_bytes: int, detail: bool = True) -> Stage:
    """One stage's phases; `detail=False` skips writing out formulas (for searches that need only bytes)."""
    m, wl, prec, tech, par = plan.model, plan.workload, plan.precision, plan.techniques, plan.parallelism
    t, p, c, z = par.tensor, par.pipeline, par.context, par.zero_stage
    shard = par.data * c  # ZeRO/FSDP shard over data × context ranks, as Megatron and torchtitan do
    first, last = index == 0, index == p - 1
    layers = m.num_layers // p
    sp = _stage_params(plan, index)
    P = sp.total
    bc, bg = nbytes(prec.activation_dtype), nbytes(prec.gradients)
    offload = tech.offload
    autocast, mixed = _autocast(plan), prec.mixed
    lora = wl.task in ("lora", "qlora")
    accum = plan.micro_batches_per_step
    in_flight = _in_flight(plan, index)
    tokens = wl.micro_batch_size * wl.sequence_length // c
    seq_div = t if par.sequence_parallel else 1
    shard_note = f" ÷ {shard} (ZeRO-{z} over data × context)" + (
        f"; experts ÷ {shard // par.expert} (the ranks beside each expert-parallel group)" if par.expert > 1 else "")
    edp = shard // par.expert  # expert-data-parallel ranks: ZeRO shards the experts over these

    def sharded(count: int, experts: int, each: int, on: bool) -> int:
        """Bytes of `count` parameters (`experts` of them routed experts) on one GPU, ZeRO-sharded if `on`."""
        if not on:
            return count * each
        return -(-(count - experts) * each // shard) + -(-experts * each // edp)

    def item(name: str, label: str, nbytes_: int, formula: str | Callable[[], str], note: str) -> Item:
        text = formula if isinstance(formula, str) else formula() if detail else ""
        return Item(name=name, label=label, bytes=nbytes_, formula=text, note=note)

    # ---- Model states: allocated once, live all step ----
    tr = _trainable(plan, sp)
    T = tr.total  # parameters the optimizer updates (all of them, or the LoRA adapters)
    T_experts = 0 if lora else sp.experts  # of which routed experts (adapters are not split finer)
    s_shard = shard if z >= 1 else 1
    if lora:
        wdt = prec.weights
        # Frozen base: projections in the weights dtype (with their quantization scales); embeddings, norms and
        # the output head stay in the compute dtype (bitsandbytes, GPTQ and AWQ leave them unquantized).
        base = quantized_bytes(sp.linear, wdt, rows=sp.linear_rows, group_size=prec.quant_group_size,
                               double_quant=prec.double_quant) + (P - sp.linear) * bc
        w_shard = shard if z == 3 else 1
        weights = item("weights", "Weights (frozen base)", sharded(base, round(base * sp.experts / P), 1, z == 3),
                       lambda: (f"{_n(sp.linear)} projection params in {wdt}"
                                + (" + scales" if wdt in QUANTIZED else "") + f" + {_n(P - sp.linear)} others × {bc} B"
                                + (shard_note if w_shard > 1 else "")),
                       "Frozen: no gradients, no optimizer state" + (
                           f"; {wdt} weights are dequantized one matrix at a time for each matmul" if wdt in QUANTIZED else ""))
        adapter_dtype = "fp32" if mixed else prec.activation_dtype  # PEFT keeps adapters in fp32 under mixed precision
        adapters = item("adapters", "LoRA adapters", -(-T * nbytes(adapter_dtype) // w_shard),
                        lambda: (f"{_n(T)} params × {nbytes(adapter_dtype)} B ({adapter_dtype}): rank "
                                 f"{wl.lora.rank} on {', '.join(wl.lora.targets)} × {layers} layers"
                                 + (shard_note if w_shard > 1 else "")),
                        "Trainable low-rank A and B matrices (Hu et al. 2021)")
        master = item("master_weights", "Master weights", 0, "0", "Adapters are updated directly"
                      + (" in fp32" if mixed else ""))
        grad_dtype_bytes = nbytes(adapter_dtype)
    else:
        weight_dtype = "fp32" if (mixed and z in (0, 3) and offload == "none") else prec.activation_dtype
        adapters = None
        if offload == "optimizer_and_params":
            weights = item("weights", "Weights", 0, "0 (on CPU)",
                           "Parameters live in host memory; layers are fetched to the GPU when used")
        else:
            w_shard = shard if z == 3 else 1
            if autocast:
                w_note = "fp32 parameters; torch.autocast makes 16-bit copies for matmuls (see weight casts)"
            elif mixed and z == 3:
                w_note = "fp32 parameter shards are the master copy; 16-bit layers are all-gathered when used (FSDP2)"
            elif mixed:
                w_note = "Persistent 16-bit copy used for compute (ZeRO recipe); the fp32 master is sharded"
            else:
                w_note = f"Parameters stored in {weight_dtype}; the optimizer updates them directly"
            weights = item("weights", "Weights", sharded(P, sp.experts, nbytes(weight_dtype), z == 3),
                           lambda: (f"{_n(P)} params × {nbytes(weight_dtype)} B ({weight_dtype})"
                                    + (shard_note if w_shard > 1 else "")), w_note)
        if mixed and z in (1, 2) and offload == "none":
            master = item("master_weights", "Master weights", sharded(P, sp.experts, 4, True),
                          lambda: (f"{_n(P)} params × 4 B (fp32)" + (shard_note if shard > 1 else "")),
                          "fp32 copy the optimizer updates, sharded with its states (ZeRO paper §5)")
        else:
            master = item("master_weights", "Master weights", 0, "0",
                          "No separate copy: the optimizer updates the stored weights" if not mixed else
                          "On CPU with the optimizer (offload)" if offload != "none" else
                          "The fp32 parameters (Weights) are the master copy")
        grad_dtype_bytes = bg
    state_bytes, opt_temp, opt_formula, opt_note = _optimizer(plan, tr)
    paged = prec.optimizer in PAGED_OPTIMIZERS
    if offload != "none" or state_bytes == 0:
        states = item("optimizer_states", "Optimizer states", 0, "0 (on CPU)" if state_bytes else opt_formula,
                      "Offloaded with the optimizer step" if state_bytes else opt_note)
    else:
        states = Item(name="optimizer_states", label="Optimizer states",
                      bytes=sharded(state_bytes, round(state_bytes * T_experts / T), 1, z >= 1),
                      formula=(opt_formula + (shard_note if s_shard > 1 else "")) if detail else "", note=opt_note,
                      level="device" if paged else "allocated")
    g_shard = shard if z >= 2 else 1
    grad_bytes = 0 if offload != "none" else sharded(T, T_experts, grad_dtype_bytes, z >= 2)
    in_bwd = tech.optimizer_in_backward  # (validated: one micro-batch per step, no ZeRO, no offload)
    if offload != "none":
        grads = item("gradients", "Gradients", 0, "0 (moved to CPU as produced)",
                     "Gradients stream to host memory for the CPU optimizer step")
    elif in_bwd:
        grads = item("gradients", "Gradients", 0, "0 (each is applied and freed as it is produced)",
                     "Optimizer in backward: a post-accumulate-grad hook steps each parameter and frees its gradient")
    else:
        grads = item("gradients", "Gradients", grad_bytes,
                     lambda: (f"{_n(T)} {'adapter ' if lora else ''}params × {grad_dtype_bytes} B"
                              + (shard_note if g_shard > 1 else "")),
                     ("Held across micro-batches" if accum > 1 else "Produced during backward")
                     + ("; only adapters have gradients" if lora else "; sharded from ZeRO-2 on"))
    ddp = shard > 1 and z == 0 and offload == "none"
    ddp_buckets = item("ddp_buckets", "DDP gradient buckets", grad_bytes if ddp else 0,
                       lambda: (f"= gradients ({format_bytes(grad_bytes)})" if ddp else "0 (no DDP)"),
                       "DDP keeps flat all-reduce buckets beside .grad (gradient_as_bucket_view=False, PyTorch's default)")
    workspace = item("cublas_workspace", "cuBLAS workspaces", CUBLAS_WORKSPACE_BYTES, "2 handles × 32 MiB",
                     "Forward and autograd threads each hold one (cuBLAS docs)")
    static = tuple(i for i in (weights, adapters, master, states, ddp_buckets, workspace) if i is not None)
    grads_held = grads if accum > 1 else item("gradients", "Gradients", 0, "0 (not yet produced)",
                                              "First micro-batch of the step: .grad was freed by zero_grad")

    # ---- Activations of one micro-batch on this stage ----
    acts = _layer_acts(plan)
    ckpt = tech.activation_checkpointing
    dense_layers, moe_layers = sp.dense_layers, sp.moe_layers
    mlp_of = acts.mlp if dense_layers else acts.moe_mlp  # the MLP term of the stage's largest layer kind
    per_layer_full = tokens * (acts.norms // seq_div + acts.attention + acts.scores + max(
        acts.mlp if dense_layers else 0, acts.moe_mlp if moe_layers else 0))
    # every_k: torchtitan wraps block n (counted from 1) when n % k == 0, so ⌊L/k⌋ of the stage's L layers
    n_layers = dense_layers + moe_layers
    ck_share = (n_layers // tech.checkpoint_every) / n_layers if ckpt == "every_k" else 0.0
    input_bytes = 4 if autocast else bc
    kept_input = tokens * input_bytes * m.hidden_size // seq_div
    if ckpt == "full":
        per_layer = moe_layer_acts = kept_input
        layer_formula = f"T × {input_bytes}h (layer input kept by checkpointing)"
    elif ckpt == "selective_op":
        rep_b, attn_b, mlp_b = _sac_op_acts(plan, input_bytes)
        per_layer = tokens * (rep_b // seq_div + attn_b + mlp_b)
        moe_layer_acts = tokens * (rep_b // seq_div + attn_b + acts.moe_mlp)
        layer_formula = (f"T × [op-level SAC: input and kept projection outputs {_n(rep_b)} B{' ÷ t' if seq_div > 1 else ''}"
                         f" + attention output, lse and kept q/v {_n(attn_b)} B + kept gate {_n(mlp_b)} B]")
    else:
        kept_scores = 0 if ckpt == "selective" else acts.scores
        per_layer = tokens * (acts.norms // seq_div + acts.attention + kept_scores + acts.mlp)
        moe_layer_acts = tokens * (acts.norms // seq_div + acts.attention + kept_scores + acts.moe_mlp)
        layer_formula = (f"T × [norms {acts.norm_formula}{' ÷ t' if seq_div > 1 else ''}; attention "
                         f"{acts.attention_formula}"
                         f"{'; scores recomputed (selective)' if ckpt == 'selective' and acts.scores else ''}"
                         f"; MLP {acts.mlp_formula}]")
        if ckpt == "every_k":  # every k-th layer keeps only its input, the others everything (averaged)
            per_layer = round(kept_input * ck_share + per_layer * (1 - ck_share))
            moe_layer_acts = round(kept_input * ck_share + moe_layer_acts * (1 - ck_share))
            layer_formula = (f"{ck_share:.3g} of layers checkpointed (T × {input_bytes}h), the others "
                             + layer_formula)
    final_norm = 0
    if last:  # the final norm feeding the output head is never inside a checkpointed layer
        h = m.hidden_size
        if lora:  # frozen weight and head: only the norm's (fp32) input is needed
            per_token = 4 * h if m.norm == "rmsnorm" else bc * h
        elif m.norm == "rmsnorm":
            per_token = 10 * h if autocast else 12 * h if bc == 4 else (4 + 2 * bc) * h
        else:
            per_token = 6 * h if autocast else 2 * bc * h
        final_norm = tokens * per_token // seq_div
    mask = 0
    if tech.attention == "eager":  # HF builds one b×1×s×s additive causal mask per forward
        mask = wl.micro_batch_size * wl.sequence_length ** 2 * (4 if autocast else bc) // c
    act_mb = dense_layers * per_layer + moe_layers * moe_layer_acts + final_norm + mask
    if prec.fp8_recipe == "nvfp4" and ckpt != "full":
        # NVFP4 linears also save their weight's 4-bit codes (Wt_fp4, Wt_sf) for backward, in every layer whose
        # activations are kept
        kept_layers = n_layers * (1 - ck_share)
        act_mb += round(NVFP4_BYTES * sp.linear * kept_layers / n_layers)
    layer_text = " + ".join(x for x in (f"{dense_layers} layers × {format_bytes(per_layer, 'MiB', 1)}" if dense_layers else "",
                                        f"{moe_layers} MoE layers × {format_bytes(moe_layer_acts, 'MiB', 1)}"
                                        if moe_layers else "") if x)
    offloaded = tech.activation_offload
    host_acts = 0
    if offloaded:
        # torchtune OffloadActivations: every saved tensor of 1 KiB or more but the output head's goes to pinned
        # host memory; the last 5 packed tensors stay on the GPU until their copy is done. Under full
        # checkpointing the saved tensors are the layer inputs; otherwise about one layer's worth stays.
        largest_layer = max(per_layer if dense_layers else 0, moe_layer_acts if moe_layers else 0)
        resident = min(5, n_layers) * kept_input if ckpt == "full" else largest_layer
        host_acts = round((act_mb - final_norm - mask) * in_flight)
        activations = item("activations", "Activations (offloaded)", resident + final_norm + mask,
                           lambda: ((f"min(5, {n_layers}) layer inputs T × {input_bytes}h" if ckpt == "full" else
                                     "one layer's activations") + " still being copied + the final norm; "
                                    f"{format_bytes(host_acts)} on the host"),
                           "Activation offloading: saved tensors live in pinned host memory between forward and backward")
    else:
        activations = item(
            "activations", "Activations", round(act_mb * in_flight),
            lambda: (f"{in_flight:g} micro-batch{'es' if in_flight != 1 else ''} × ({layer_text}"
                     f"{' + final norm' if final_norm else ''}"
                     f"{' + causal mask' if mask else ''}); T = {_n(tokens)}, per layer {layer_formula}"),
            "Tensors autograd saves between forward and backward (HF-style eager ops)"
            + (f". The {par.pipeline_schedule} pipeline schedule keeps earlier micro-batches in flight" if in_flight > 1 else ""))
    casts_note = "torch.autocast caches 16-bit copies of matmul weights; the graph keeps them until backward"
    casts = casts_bwd = None
    if autocast:
        kept = 1 - ck_share
        casts = item("weight_casts", "Weight casts (autocast)", round(sp.matmul * 2 * in_flight * kept),
                     lambda: (f"{_n(sp.matmul)} matmul params × 2 B × {in_flight:g}"
                              + (f" × {kept:.3g} (layers not checkpointed)" if kept < 1 else "")), casts_note)
        casts_bwd = casts if ckpt != "full" else item(
            "weight_casts", "Weight casts (autocast)", 0, "0 (freed when autocast exits)",
            "Checkpointed layers keep no casts; the recomputed layer makes its own")

    # ---- Logits and loss (last stage): HF ForCausalLMLoss / torch cross_entropy on fp32 logits ----
    vocab_r = -(-m.vocab_size // t)
    tv = tokens * vocab_r
    logits_b = 2 if bc == 2 else 4
    per_tv = logits_b + 8 if logits_b < 4 else 8
    # Chunked cross-entropy (torchtune CEWithChunkedOutputLoss), checked with MemTracker on fake tensors: the
    # recipe holds every chunk's logits while the losses are computed, each chunk's log-softmax (fp32) is
    # saved, and only one chunk's fp32 upcast exists at a time: T·V × (logits + 4 + 4/n) at the end of the
    # forward, the peak of the loss; backward then holds the saved 4·T·V and one chunk's buffers.
    chunks = tech.loss_chunks if tech.loss == "chunked" else 0
    upcast = 4 if logits_b < 4 else 0  # .float() of fp32 logits is the same tensor
    fwd_loss = tv * (logits_b + 4) + -(-tv * upcast // chunks) if chunks else tv * per_tv
    bwd_loss = 4 * tv + -(-tv * 12 // chunks) if chunks else tv * 12
    head_loss = -(-tv * logits_b // chunks) if chunks else tv * logits_b
    if tech.compile and tech.loss != "fused":
        # a compiled cross-entropy saves only the logits and fuses its backward into a gradient in the logits'
        # dtype: no fp32 T·V buffer (inductor's partition of HF and torchtitan losses; torchtitan and torchtune
        # compile the loss with the model, HF computes it inside the model's forward)
        fwd_loss = tv * logits_b + 8 * tokens
        bwd_loss = tv * logits_b + (-(-tv * logits_b // chunks) if chunks else tv * logits_b)
    fused = tech.loss == "fused"
    if fused:
        # Liger fused linear cross-entropy (ops/fused_linear_cross_entropy.py): tokens go through the head in
        # chunks of next_pow2(⌈T / ⌈V/h⌉⌉) rows, whose logits (compute dtype; the fp32 upcast stays in registers)
        # are overwritten by their gradient; the gradients of the hidden states (T·h) and of the head's weight
        # (V·h, parameter dtype; none for a frozen head) are made in forward and saved for backward
        h = m.hidden_size
        fused_rows = min(1 << (-(-tokens // -(-vocab_r // h)) - 1).bit_length(), tokens)
        head_grad = 0 if lora else vocab_r * h * (4 if autocast else bc)
        fused_saved = tokens * h * bc + head_grad + 4 * tokens
        fwd_loss, bwd_loss, head_loss = fused_saved + fused_rows * vocab_r * bc, fused_saved, fused_saved

    # ---- Transients of one moment of backward ----
    stored = base / P if lora else bc  # bytes per parameter as all-gathered (a frozen base keeps its storage)
    gathered = round(sp.gathered_pair * stored)
    if prec.fp8_all_gather:  # torchao WeightWithDynamicFloat8CastTensor: layers' linears travel as float8, 1 B each
        # (no 16-bit unsharded copy is made); the embedding and the output head stay 16-bit
        gathered -= round(sp.gathered_pair_layers * (stored - 1))
    gather = item("zero3_gather", "ZeRO-3 all-gathered layers", gathered,
                  lambda: (f"largest neighbouring units {_n(sp.gathered_pair)} params × {stored:.3g} B"
                           + (f", of which {_n(sp.gathered_pair_layers)} layer params as float8 (1 B)"
                              if prec.fp8_all_gather else "")),
                  "The unit in use plus the one prefetched, unsharded") if z == 3 else None
    # Fresh gradients of the unit being differentiated, beyond those already counted in Gradients. Autograd
    # produces them in the dtype of the parameters it sees (fp32 under autocast, else the compute dtype).
    # They become .grad directly on the first micro-batch without ZeRO-2; otherwise they are a transient
    # (added into .grad, or reduce-scattered), plus a cast copy when the gradient dtype differs.
    bg = grad_dtype_bytes
    produced = 4 if autocast else bg if lora else bc
    cast = produced != bg and offload == "none"

    def fresh(unit: int, counted: bool, largest: int | None = None) -> Item:
        if in_bwd:  # one parameter's gradient at a time, and its optimizer step's temporaries
            one = min(unit, largest or unit)
            step = -(-opt_temp * one // max(1, T))
            return item("fresh_gradients", "Fresh gradient (stepped in backward)", one * produced + step,
                        lambda: f"largest parameter {_n(one)} × {produced} B + its step temporaries {_n(step)} B",
                        "The optimizer steps each parameter as soon as its gradient is ready, then frees it")
        transient = unit * produced if (cast or z >= 2 or accum > 1 or offload != "none") else 0
        transient += unit * bg if (z >= 2 and cast) else 0
        kept = unit * bg if (not counted and z < 2 and offload == "none") else 0
        return item("fresh_gradients", "Fresh gradients", transient + kept,
                    lambda: (f"{_n(unit)} params × ({produced} B as produced"
                    + (f" + {bg} B copy" if (z >= 2 and cast) or kept else "") + ")"),
                    "Gradients of the unit being differentiated, before accumulation, reduce-scatter or host copy")

    layer_unit = sp.adapters // layers if lora else sp.layer  # a frozen layer's only gradients are its adapters'
    dequant = None
    if lora and prec.weights in QUANTIZED:
        dequant = item("dequantized_weight", "Dequantized weight", sp.largest_matrix * bc,
                       lambda: (f"largest projection {_n(sp.largest_matrix)} params × {bc} B"),
                       f"{prec.weights} weights are dequantized to {prec.activation_dtype} for each matmul, forward and backward")

    layer_bwd = max(tokens * mlp_of // 2, tokens * acts.scores) + 2 * tokens * bc * m.hidden_size
    dispatch = None
    if moe_layers and par.expert > 1:  # all-to-all send buffer of the routed tokens (the receive side is the
        # experts' saved input)
        slots = _routed_slots(plan)
        dispatch = item("expert_dispatch", "Expert all-to-all buffers", round(tokens * slots * m.hidden_size * bc),
                        lambda: f"T × {slots:g} routed slots × h × {bc} B",
                        "Tokens permuted for the all-to-all to expert-parallel ranks")
    fp8 = None
    if prec.compute == "fp8":  # float8 linears (torchao): 8-bit casts of the input, the weight and its transpose
        # for each matmul, made and freed per matmul; tensorwise, rowwise and mxfp8 save the bf16 input as bf16
        # training does (torchao matmul_with_hp_or_float8_args, mx_mm: save_for_backward(input_hp, weight_hp);
        # torchao README: Llama-3-8B peak 47.65 GB bf16, 47.77 tensorwise, 47.79 rowwise)
        width = max(m.hidden_size, m.intermediate_size // t)
        recipe = prec.fp8_recipe
        per = {"mxfp8": MXFP8_BYTES, "nvfp4": NVFP4_BYTES}.get(recipe, 1)
        elements = 2 * sp.largest_matrix + tokens * width
        scales = 4 * (tokens + width) if recipe == "rowwise" else 0  # one fp32 scale per row of each operand
        fp8 = item("fp8_casts", f"Low-precision casts ({recipe})", round(per * elements) + scales,
                   lambda: (f"(2 × largest matrix {_n(sp.largest_matrix)} + T × {_n(width)}) × {per:g} B"
                            + (f" + fp32 row scales 4 × (T + {_n(width)})" if scales else "")),
                   "Per-matmul low-precision copies of the weight (and its transpose) and of the input, with their scales")
    dora = None
    if lora and wl.lora.variant == "dora":
        # DoRA recomputes ‖W + s·BA‖ per output row in every training forward: weight-sized temporaries of the
        # projection being adapted (peft dora.py get_lora_weight, get_weight_norm; MemTracker): an identity
        # d_in × d_in, B·A, the weight plus it — in fp32 with fp32 adapters
        shapes = projection_shapes(m, t)
        r = wl.lora.rank

        def dora_bytes(d_in: int, d_out: int) -> int:
            if mixed:
                return 2 * d_in * d_in + 2 * d_in * r + 16 * d_in * d_out
            return bc * (d_in * d_in + d_in * r + 3 * d_in * d_out)

        target = max(wl.lora.targets, key=lambda x: dora_bytes(*shapes[x]))
        d_in, d_out = shapes[target]
        dora = item("dora_weight_norm", "DoRA weight-norm temporaries", dora_bytes(d_in, d_out),
                    lambda: (f"largest adapted projection ({target}, {_n(d_in)} → {_n(d_out)}): "
                             + ("2d_in² + 2d_in·r + 16 d_in·d_out" if mixed else f"{bc}(d_in² + d_in·r + 3 d_in·d_out)")),
                    "DoRA recomputes the adapted weight's row norms in each forward (and in a checkpointed recompute)")
    layer_work = [item("backward_transient", "Layer backward temporaries", layer_bwd,
                       lambda: (f"max(half the saved MLP, eager score gradients) + 2 × {bc}T·h"),
                       "Gradients of the largest intermediates of the layer being differentiated"), dequant, dispatch,
                  fp8, dora if ckpt != "none" else None]
    if ckpt != "none" and not (ckpt == "every_k" and ck_share == 0):  # every_k with k > L checkpoints nothing
        layerwise = ckpt in ("full", "every_k")  # a checkpointed layer is recomputed whole
        recompute = (per_layer_full + sp.layer * 2 * autocast if layerwise else
                     # op-level SAC regenerates what a whole layer saves, less what it kept
                     max(0, per_layer_full - per_layer) if ckpt == "selective_op" else tokens * acts.scores)
        layer_work.insert(0, item("recompute", "Recomputed layer", recompute,
                                  lambda: ("one layer's full activations" if layerwise else
                                           "one layer's activations less those kept" if ckpt == "selective_op" else
                                           "one layer's attention scores"),
                                  "Checkpointing recomputes one layer at a time during backward"))

    # ---- The moments of the step ----
    def phase(name: str, description: str, *parts: Item | None) -> Phase:
        return Phase(name=name, description=description, items=tuple(i for i in parts if i is not None))

    held = (*static, grads_held, activations)
    phases = [phase("forward", "end of forward: everything saved for backward is live", *held, casts, gather, dequant, fp8, dora,
                    item("logits_loss", "Logits and loss", fwd_loss,
                         lambda: (f"T·h × {bc} input gradient + " + (f"V·h × {head_grad // (vocab_r * m.hidden_size)} head "
                                  "gradient + " if head_grad else "") + f"{_n(fused_rows)} rows × V × {bc} chunk logits + 4T"
                                  if fused else f"T·V × {logits_b} logits + 8T (compiled loss) = {_n(tokens)} × {_n(vocab_r)}"
                                  f" × {logits_b} + 8 × {_n(tokens)}" if tech.compile else
                                  f"T·V × ({logits_b} logits + 4 log-softmax + {upcast}/{chunks} one chunk's fp32 upcast)"
                                  f" = {_n(tokens)} × {_n(vocab_r)} × {logits_b + 4 + upcast / chunks:g}" if chunks else
                                  f"T·V × ({logits_b} logits + 4 fp32 upcast + 4 log-softmax) = {_n(tokens)} × {_n(vocab_r)} × {per_tv}"
                                  if logits_b < 4 else f"T·V × (4 logits + 4 log-softmax) = {_n(tokens)} × {_n(vocab_r)} × 8"),
                         "Fused linear cross-entropy: logits exist one chunk at a time; gradients are made in forward"
                         if fused else "A compiled cross-entropy saves only the logits" if tech.compile else
                         f"Chunked cross-entropy over {chunks} slices of tokens keeps every slice's log-softmax" if chunks
                         else "Cross-entropy upcasts logits to fp32 and keeps log_softmax for backward") if last else None)]
    if last:
        phases.append(phase("loss backward", "backward of the log-softmax over the vocabulary", *held, casts_bwd, gather,
                            item("logits_loss", "Logits and loss", bwd_loss,
                                 lambda: ("the gradients made in forward" if fused else
                                          f"T·V × {logits_b} saved logits + their gradient"
                                          + (f" (one slice's of {chunks})" if chunks else "") + " (compiled)"
                                          if tech.compile else
                                          f"T·V × (4 saved log-softmax + 12/{chunks} one slice's backward buffers), fp32"
                                          if chunks else
                                          f"T·V × 12 (saved log-softmax + its gradient + input gradient, fp32) = "
                                          f"{_n(tokens)} × {_n(vocab_r)} × 12"),
                                 "Liger's fused loss made these gradients in forward" if fused else
                                 "A compiled cross-entropy's backward writes the logits' gradient in their dtype: no "
                                 "fp32 buffer" if tech.compile else "fp32 buffers of _log_softmax_backward_data")))
        phases.append(phase("output head backward", "gradients of the output projection", *held, casts_bwd, gather,
                            item("logits_loss", "Logits and loss", head_loss,
                                 lambda: ("the gradients made in forward" if fused else f"T·V × {logits_b}"
                                          + (f" / {chunks} (one slice's" if chunks else " (the")
                                          + " gradient of the logits)"), "Input of the output head's backward"),
                            None if (lora or fused) else fresh(sp.head, counted=accum > 1)))
    phases.append(phase("backward (first layer)", "backward of the stage's last layer: all activations still live",
                        *held, casts_bwd, gather, *layer_work,
                        fresh(layer_unit, counted=accum > 1, largest=sp.largest_matrix)))
    first_layer_acts = per_layer if dense_layers else moe_layer_acts
    if offloaded:  # brought back one autograd node at a time: the layer being differentiated and its input
        rest = item("activations", "Activations (offloaded)", 2 * kept_input if ckpt == "full" else first_layer_acts,
                    "2 layer inputs brought back" if ckpt == "full" else "the layer brought back",
                    "Activation offloading: the rest is on the host")
    else:
        rest = item("activations", "Activations", round(act_mb * (in_flight - 1)) + first_layer_acts,
                    lambda: (f"{in_flight - 1:g} other micro-batches + the first layer's" if in_flight > 1 else
                             "the first layer's, still to be differentiated"),
                    "Earlier layers' activations have been freed by now")
    rest_casts = item("weight_casts", "Weight casts (autocast)", round(sp.matmul * 2 * (in_flight - 1)) + sp.layer * 2,
                      "other micro-batches + the first layer's casts", casts_note) if autocast and ckpt != "full" else None
    phases.append(phase("backward (last layer)", "backward of the stage's first layer: gradients nearly all produced",
                        *static, grads, rest, rest_casts, gather, *layer_work,
                        fresh(layer_unit, counted=True, largest=sp.largest_matrix)))
    if first and not lora:  # a frozen embedding has no backward
        others = item("activations", "Activations", 0 if offloaded else round(act_mb * (in_flight - 1)),
                      lambda: (f"{in_flight - 1:g} other micro-batches" if in_flight > 1 else "0 (all freed)"),
                      "This micro-batch's activations are freed")
        phases.append(phase("embedding backward", "dense gradient of the embedding table", *static, grads, others,
                            gather, fresh(sp.embedding, counted=not (m.tie_embeddings and p == 1))))

    temp = 0 if offload != "none" else -(-opt_temp // s_shard)
    if not in_bwd:  # optimizer in backward has no separate step
        phases.append(phase("optimizer step", "activations freed; the optimizer updates the weights", *static, grads,
                            item("optimizer_temp", "Optimizer temporaries", temp,
                                 lambda: (f"{format_bytes(opt_temp)} of step temporaries"
                                          + (shard_note if s_shard > 1 else "") if temp else "0 (the step updates in place)"),
                                 "Buffers the optimizer step allocates besides its states (see Optimizer states)")))

    peak = max(phases, key=lambda ph: ph.allocated_bytes)
    # the allocator's reserve only grows, so the reserved peak is the largest over the phases
    reserved = max(ph.allocated_bytes + _churn_reserve(ph) for ph in phases)
    device = reserved + runtime_bytes + max(ph.outside_bytes for ph in phases)
    return Stage(index=index, layers=layers, micro_batches_in_flight=in_flight, phases=tuple(phases), peak=peak,
                 reserved_bytes=reserved, device_bytes=device, host_bytes=host_acts)
