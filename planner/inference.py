"""Inference and serving: per-GPU memory of generation and the serving KV-cache capacity.

Conventions (beside those of planner/memory.py):
- A replica is the tensor × pipeline group that holds one copy of the model; `parallelism.data` counts
  independent replicas (each serves its own requests), so per-GPU memory does not depend on it.
- Generation is Hugging Face `generate()`-style: prefill of `batch_size` prompts at once (or in chunks of
  `prefill_chunk_tokens`), then one decode step per output token with a KV cache that grows by
  concatenation. The serving mode (`gpu_memory_utilization`) is vLLM-style: the engine claims that fraction
  of the GPU and fills what weights and activations leave with paged KV-cache blocks.
- Throughput is planner/perf.py's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from planner.catalog import Gpu
from planner.dtypes import QUANTIZED, nbytes, quantized_bytes
from planner.memory import (CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES, NCCL_BYTES_PER_COMMUNICATOR, Estimate,
                            Item, Phase, Stage, _n, _stage_layers)
from planner.models import attention_widths, param_counts, projection_shapes
from planner.plan import Plan
from planner.units import MiB, format_bytes

# Serving engines round the KV cache to blocks of tokens (vLLM's default block size is 16).
KV_BLOCK_TOKENS = 16
# vLLM captures CUDA graphs for decode batch sizes; their pools take ~0.5-1 GiB outside the KV budget
# (vLLM docs, "CUDA graphs"; varies with model and batch sizes captured).
CUDA_GRAPH_BYTES = 512 * MiB
# A serving engine prefills at most this many tokens per forward unless told otherwise (vLLM's V1 engine
# default max_num_batched_tokens for online serving is 8,192).
SERVING_PREFILL_TOKENS = 8192
KV_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}


@dataclass(frozen=True, kw_only=True)
class Serving:
    """What a serving engine can hold: the KV cache left after weights and activations."""

    kv_budget_bytes: int
    kv_bytes_per_token: int  # per sequence token, on one GPU
    max_concurrent_sequences: int  # at prompt + output tokens each
    max_context_tokens: int  # for batch_size sequences


def kv_bytes_per_token(plan: Plan) -> int:
    """KV-cache bytes one token of one sequence takes on one GPU (K and V of each of its layers), for layers
    that attend globally; sliding-window layers stop growing at the window (see kv_cache_bytes)."""
    m, par = plan.model, plan.parallelism
    if m.mla:
        # latent attention caches the kv latent and the shared RoPE key, (d_c + d_h^R) per layer (DeepSeek-V2
        # paper §2.1.2), the same on every tensor-parallel rank: vLLM's MLA backends and HF transformers 5
        # (DeepseekV3Attention updates the cache before expand_kv)
        width = m.kv_lora_rank + m.qk_rope_head_dim
    else:  # K and V per KV head on this rank (≥ one head)
        _, k, v, _ = attention_widths(m, par.tensor)
        width = k + v
    return (m.num_layers // par.pipeline) * width * KV_BYTES[plan.precision.kv_cache]


def kv_cache_bytes(plan: Plan, tokens: int) -> int:
    """KV-cache bytes of one sequence of `tokens` on one GPU; sliding-window layers keep only the window."""
    m = plan.model
    per_layer = kv_bytes_per_token(plan) // m.num_layers  # per layer per token (pipeline split already in)
    windowed = m.sliding_layers
    cap = min(tokens, m.sliding_window or tokens)
    return per_layer * ((m.num_layers - windowed) * tokens + windowed * cap)


def layer_split(plan: Plan) -> tuple[int, int]:
    """(dense, MoE) layers of the pipeline stage with the most parameters, split as training splits them."""
    m, p = plan.model, plan.parallelism.pipeline
    counts = param_counts(m, plan.parallelism.tensor)
    return max((_stage_layers(m, i, p) for i in range(p)), key=lambda s: s[0] * counts.layer + s[1] * counts.moe_layer)


def weight_bytes(plan: Plan) -> tuple[int, int]:
    """(bytes of the weights on one GPU, their parameter count): projections (and experts) in precision.weights
    with their scales; embeddings, norms and the output head in the compute dtype (quantizers leave them).
    Experts are split across the replica's tensor-parallel ranks."""
    m, par, prec = plan.model, plan.parallelism, plan.precision
    counts = param_counts(m, par.tensor)
    dense, moe = layer_split(plan)
    linear = dense * (counts.attention + counts.mlp) + moe * (counts.attention + counts.experts + counts.shared
                                                              + counts.router)
    shapes = projection_shapes(m, par.tensor)
    rows = (dense + moe) * sum(o for _, o in shapes.values())  # per-row scales: close enough for experts too
    tables = counts.embedding + counts.lm_head  # whole on one stage; the largest stage is the answer
    others = (dense + moe) * counts.norms + counts.final_norm + tables
    return (quantized_bytes(linear, prec.weights, rows=rows, group_size=prec.quant_group_size,
                            double_quant=prec.double_quant) + others * nbytes(prec.activation_dtype), linear + others)


def inference_estimate(plan: Plan, gpu: Gpu, detail: bool = True) -> Estimate:
    m, prec, par = plan.model, plan.precision, plan.parallelism
    inf = plan.workload.inference
    t = par.tensor
    bc = nbytes(prec.activation_dtype)
    b = inf.batch_size
    serving = inf.gpu_memory_utilization is not None
    counts = param_counts(m, t)
    shapes = projection_shapes(m, t)
    h, inter = m.hidden_size, shapes["up"][1]
    q, k, v, out = attention_widths(m, t)
    vocab_r = counts.embedding // h
    layers = m.num_layers // par.pipeline

    def item(name: str, label: str, n: int, formula: Callable[[], str], note: str, level="allocated") -> Item:
        return Item(name=name, label=label, bytes=n, formula=formula() if detail else "", note=note, level=level)

    w_bytes, w_params = weight_bytes(plan)
    weights = item("weights", "Weights", w_bytes,
                   lambda: f"{_n(w_params)} params: projections in {prec.weights}"
                           + (" with scales" if prec.weights in QUANTIZED else "") + f", the rest in {prec.activation_dtype}",
                   "Served weights, split over tensor- and pipeline-parallel ranks")
    workspace = item("cublas_workspace", "cuBLAS workspaces", CUBLAS_WORKSPACE_BYTES, lambda: "2 handles × 32 MiB",
                     "Allocated through PyTorch's caching allocator")
    per_token = kv_bytes_per_token(plan)
    ctx = inf.context_tokens

    # Prefill: one forward over the prompt tokens (or a chunk). Without gradients each intermediate is freed
    # when consumed; the largest moment is SwiGLU's silu(gate), up and their product (GeLU: fc and gelu(fc)),
    # with the residual, the normed input and the layer output alive; eager attention's fp32 scores compete.
    default_chunk = SERVING_PREFILL_TOKENS if serving else b * inf.prompt_tokens
    chunk = min(inf.prefill_chunk_tokens or default_chunk, b * inf.prompt_tokens)
    mlp_peak = (3 if m.mlp == "swiglu" else 2) * chunk * inter * bc
    if m.num_experts:  # fused MoE: intermediate caches of the routed tokens (T·k × (2I_e, I_e, h)), router logits
        e_inter = m.moe_intermediate_size // t
        moe_peak = chunk * m.experts_per_token * (3 * e_inter + h) * bc + chunk * m.num_experts * 4
        mlp_peak = max(mlp_peak if m.moe_layers < m.num_layers else 0, moe_peak)
    # Latent attention (HF DeepseekV3Attention) holds, until o_proj, every local of its forward: the projected
    # and the RoPE-concatenated queries (2q), the decompressed keys (k) and kv_b's output (heads × (nope + v),
    # the values are a view of it), the rotated query part, the compressed kv latent + RoPE key and its norm.
    v_alive = (m.num_attention_heads // t) * (m.head_dim + m.v_head_dim) if m.mla else v
    if m.mla:
        a_r = m.num_attention_heads // t
        attn_peak = chunk * (2 * q + k + v_alive + out + a_r * m.qk_rope_head_dim
                             + 2 * m.kv_lora_rank + m.qk_rope_head_dim) * bc
    else:
        attn_peak = chunk * (q + k + v + out) * bc
    if plan.techniques.attention == "eager":
        seqs = max(1, chunk // inf.prompt_tokens)
        attn_peak += seqs * (m.num_attention_heads // t) * min(chunk, inf.prompt_tokens) * inf.prompt_tokens * (4 + bc)
    prefill_act = max(mlp_peak, attn_peak) + 3 * chunk * h * bc
    if prec.weights in QUANTIZED:  # a batch of more than a few tokens dequantizes each matrix for its matmul
        prefill_act += max(i * o for i, o in shapes.values()) * bc
    logits = b * vocab_r * (bc + 4)  # last position only (logits_to_keep=1), and its fp32 copy for sampling

    if serving:
        total = int(gpu.usable_bytes * inf.gpu_memory_utilization)
        runtime = CUDA_CONTEXT_BYTES + (NCCL_BYTES_PER_COMMUNICATOR if t * par.pipeline > 1 else 0)
        fixed = w_bytes + CUBLAS_WORKSPACE_BYTES + prefill_act + logits + CUDA_GRAPH_BYTES + runtime
        budget = max(0, total - fixed)
        blocks_per_seq = -(-ctx // KV_BLOCK_TOKENS)
        seq_bytes = kv_cache_bytes(plan, blocks_per_seq * KV_BLOCK_TOKENS)
        serving_info = Serving(kv_budget_bytes=budget, kv_bytes_per_token=per_token,
                               max_concurrent_sequences=budget // seq_bytes if seq_bytes else 0,
                               max_context_tokens=_longest(plan, budget // b))
        needed = b * seq_bytes
        kv_item = item("kv_cache", "KV cache (paged)", needed,
                       lambda: f"{b} seq × {blocks_per_seq} blocks × {KV_BLOCK_TOKENS} tokens"
                               + (f" (windowed layers capped at {m.sliding_window:,})" if m.sliding_window else ""),
                       f"{prec.kv_cache} {'kv latents + RoPE keys' if m.mla else 'K and V'} for the batch at "
                       f"full context; the engine preallocates "
                       f"{format_bytes(budget)} for {serving_info.max_concurrent_sequences} such sequences")
        items = (weights, workspace, kv_item,
                 item("activations", "Prefill activations", prefill_act + logits,
                      lambda: f"{_n(chunk)} tokens per forward: largest MLP moment + 3 × T·h + last-token logits",
                      "What the engine reserves for one forward of its largest token batch"),
                 item("cuda_graphs", "CUDA graphs", CUDA_GRAPH_BYTES, lambda: format_bytes(CUDA_GRAPH_BYTES, "MiB", 0),
                      "Captured decode graphs and their memory pool (vLLM)"))
        phase = Phase(name="serving", description="engine steady state: weights, activation reserve, KV cache",
                      items=items)
        # The engine claims `total` whatever it holds; if the batch needs more, it cannot start. Its budget is
        # the memory it may use, so fits means: the batch's KV cache fits beside the weights.
        device = max(total, phase.allocated_bytes + runtime)
        stage = Stage(index=0, layers=layers, micro_batches_in_flight=1, phases=(phase,), peak=phase,
                      reserved_bytes=device - runtime, device_bytes=device)
        reserve_item = Item(name="allocator_reserve", label="Engine reserve (free KV blocks)",
                            bytes=device - runtime - phase.allocated_bytes,
                            formula=(f"{inf.gpu_memory_utilization:.0%} of usable memory − the items above"
                                     if detail else ""),
                            note="KV blocks preallocated for further sequences", level="reserved")
        return Estimate(plan=plan, gpu=gpu, items=items + (reserve_item,) + _runtime(plan, detail), phase="serving",
                        stage=0, peak_allocated_bytes=phase.allocated_bytes, peak_reserved_bytes=device - runtime,
                        device_bytes=device, usable_bytes=total, host_bytes=0, runtime_bytes=runtime,
                        serving=serving_info, inference_stages=(stage,))

    prompt_kv = b * kv_cache_bytes(plan, inf.prompt_tokens)
    final_kv = b * kv_cache_bytes(plan, max(ctx - 1, inf.prompt_tokens))  # the last token is sampled, not cached
    layer_kv = b * max(ctx - 1, inf.prompt_tokens) * per_token // layers  # a global layer's K, V grow by torch.cat
    # HF latent attention re-expands one layer's cached latents each step: kv_b's output and the full keys
    expand = b * ctx * (v_alive + k) * bc if m.mla else 0
    prefill = Phase(name="prefill", description="forward over the prompts; the cache holds the prompt", items=(
        weights, workspace,
        item("kv_cache", "KV cache", prompt_kv,
             lambda: f"{b} seq × {_n(inf.prompt_tokens)} tokens × {_n(per_token)} B/token"
                     + (f", windowed layers capped at {m.sliding_window:,}" if m.sliding_window else ""),
             f"{prec.kv_cache} " + (f"kv latent + RoPE key of {layers} layers, whole on every rank" if m.mla
                                    else f"K and V of {layers} layers, {k // m.head_dim} KV head(s) per rank")),
        item("activations", "Prefill activations", prefill_act + logits,
             lambda: f"{_n(chunk)} tokens: max(MLP {format_bytes(mlp_peak, 'MiB', 0)}, attention "
                     f"{format_bytes(attn_peak, 'MiB', 0)}) + 3 × T·h + last-token logits",
             "Transient: freed as each op's output is consumed (no gradients kept)")))
    decode = Phase(name="decode (last step)", description="the cache at full length, growing one layer", items=(
        weights, workspace,
        item("kv_cache", "KV cache", final_kv,
             lambda: f"{b} seq × {_n(max(ctx - 1, inf.prompt_tokens))} tokens × {_n(per_token)} B/token"
                     + (f", windowed layers capped at {m.sliding_window:,}" if m.sliding_window else ""),
             f"{prec.kv_cache} K and V, grown by concatenation (Hugging Face DynamicCache)"),
        item("activations", "Cache growth copy and decode activations",
             layer_kv + expand + logits + 4 * b * max(h, inter) * bc,
             lambda: "one layer's cache re-allocated one token longer + last-token logits"
                     + (f" + that layer's keys and values decompressed over the context "
                        f"({format_bytes(expand, 'MiB', 0)})" if m.mla else ""),
             "torch.cat builds the longer cache beside the old one")))
    peak = max((prefill, decode), key=lambda ph: ph.allocated_bytes)
    runtime_items = _runtime(plan, detail)
    runtime = sum(i.bytes for i in runtime_items)
    reserved = peak.allocated_bytes + round(0.10 * (peak.allocated_bytes - w_bytes - CUBLAS_WORKSPACE_BYTES))
    stage = Stage(index=0, layers=layers, micro_batches_in_flight=1, phases=(prefill, decode), peak=peak,
                  reserved_bytes=reserved, device_bytes=reserved + runtime)
    reserve_item = Item(name="allocator_reserve", label="Allocator reserve", bytes=reserved - peak.allocated_bytes,
                        formula="10 % of the KV cache and activations" if detail else "",
                        note="Cached blocks of the growing cache and freed activations", level="reserved")
    return Estimate(plan=plan, gpu=gpu, items=peak.items + (reserve_item,) + runtime_items, phase=peak.name,
                    stage=0, peak_allocated_bytes=peak.allocated_bytes, peak_reserved_bytes=reserved,
                    device_bytes=stage.device_bytes, usable_bytes=gpu.usable_bytes, host_bytes=0,
                    runtime_bytes=runtime, inference_stages=(stage,))


def _longest(plan: Plan, budget: int) -> int:
    """The most tokens one sequence's KV cache can hold within `budget` bytes, in whole blocks."""
    if kv_cache_bytes(plan, 16_777_216) <= budget:
        return 16_777_216  # windowed layers only: the cache stops growing
    lo, hi = 0, 16_777_216  # kv_cache_bytes grows with tokens
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if kv_cache_bytes(plan, mid) <= budget else (lo, mid)
    return lo // KV_BLOCK_TOKENS * KV_BLOCK_TOKENS


def _runtime(plan: Plan, detail: bool) -> tuple[Item, ...]:
    ranks = plan.parallelism.tensor * plan.parallelism.pipeline
    return (Item(name="cuda_context", label="CUDA context", bytes=CUDA_CONTEXT_BYTES,
                 formula=format_bytes(CUDA_CONTEXT_BYTES, "MiB", 0) if detail else "",
                 note="Driver context, kernels and library handles, outside PyTorch's allocator (CUDA 12, lazy loading)",
                 level="device"),
            Item(name="nccl", label="NCCL buffers", bytes=NCCL_BYTES_PER_COMMUNICATOR if ranks > 1 else 0,
                 formula=(f"1 communicator (tensor/pipeline group) × {format_bytes(NCCL_BYTES_PER_COMMUNICATOR, 'MiB', 0)}"
                          if ranks > 1 else "no communication") if detail else "",
                 note="Per-channel FIFOs of each NCCL communicator this rank uses (NVIDIA/nccl#1685, #864)",
                 level="device"))
