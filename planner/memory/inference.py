"""Inference and serving: per-GPU memory of generation and the serving KV-cache capacity.

Conventions (beside the package's):
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
from functools import lru_cache, partial

from planner.catalog import Gpu
from planner.frameworks import load_frameworks
from planner.memory.layout import Layout, attention_layers, layout, layout_attention_layers, stage_split
from planner.memory.quantize_load import held_beyond_live
from planner.memory.recurrent import hybrid_pool, prefill_peak, state_bytes_per_sequence, state_formula
from planner.memory.result import Estimate, Item, Phase, Serving, Stage
from planner.memory.runtime import (
    ALLOCATED_ONCE,
    allocator_reserve,
    cublas_workspace,
    held_bytes,
    reserve_formula,
    runtime_items,
    within_device,
)
from planner.memory.terms import Described, Factor, Product, Size, item
from planner.plan.config import Plan, Precision
from planner.plan.dtypes import DEFAULT_GROUP_SIZE, QUANTIZED, nbytes, quantized_bytes, tinygemm_int4_bytes
from planner.plan.models import RECURRENT, attention_widths, param_counts, projection_shapes
from planner.units import MiB

# Serving engines round the KV cache to blocks of tokens (vLLM's default block size is 16).
KV_BLOCK_TOKENS = 16
# vLLM captures CUDA graphs for decode batch sizes; their pools take ~0.5-1 GiB outside the KV budget
# (vLLM docs, "CUDA graphs"; varies with model and batch sizes captured).
CUDA_GRAPH_BYTES = 512 * MiB
# vLLM's batch defaults when `vllm serve` is not told (vllm/engine/arg_utils.py _set_default_args_v1, later
# get_batch_defaults: the OpenAI API server's values), by release and by the GPU's memory as torch reports it (the
# catalog's usable memory), as (max_num_batched_tokens, max_num_seqs):
# - from 0.8.0: 8192 tokens on an H100 or H200, by name (PR #12369, 2025-01), else 2048; 256 sequences;
# - from 0.8.5: 70 GiB or more: 8192 tokens and 1024 sequences (PR #17073, merged 2025-04-23; the threshold as
#   0.9.0 writes it);
# - from 0.9.0: the A100 kept at 2048 and 256 (PR #17885, merged 2025-05-09: "Setting large
#   max_num_batched_tokens for A100 reduces throughput");
# - from 0.28.0: 160 GiB or more: 16384 tokens (PR #51726: a `device_memory >= 160 * GiB_bytes` tier that v0.28.0's
#   arg_utils.py has and v0.27.1's has not).
VLLM_LARGE_GPU_BYTES = 70 * 1024 * MiB
VLLM_HUGE_GPU_BYTES = 160 * 1024 * MiB
# vLLM's sampler warm-up (v1/worker/gpu_model_runner.py _dummy_sampler_run: min(max_num_seqs, tokens) requests,
# top_k = vocab − 1, top_p = 0.9) holds, a logit, the model-dtype logits its caller keeps and the sampler's fp32 copy
# (v1/sample/sampler.py: logits.to(torch.float32), 4 B), and beside them, by release (the wheels' sources read):
# - before 0.17.0 (read at 0.8.5, 0.9.1, 0.10.1.1, 0.11.0, 0.12.0, 0.14.0): PyTorch's sort (ops/topk_topp_sampler.py
#   apply_top_k_top_p: logits.sort). Its CUDA segmented radix sort takes an int64 iota as the values to sort (8 B),
#   CUB's alternate key and value buffers (4 + 8 B) and writes the sorted fp32 values (4 B) and int64 indices (8 B):
#   32 B. FlashInfer's sampler, which sorts nothing, was the wheel's optional `flashinfer` extra before 0.12.0 and
#   opt-in (VLLM_USE_FLASHINFER_SAMPLER=1) from 0.12.0 to 0.20.
# - from 0.17.0 (read at 0.17.0, 0.19.0, 0.20.0): Triton's pivot kernel masks the fp32 logits in place
#   (ops/topk_topp_triton.py apply_top_k_top_p_triton, batches of 8 or more), then forward_native's softmax (4 B)
#   and random_sample's exponential noise (4 B): 8 B. Its per-SM scratch rows (SMs × vocab × 4 B, 65 MiB on an H100
#   with Llama 3's vocabulary) are left out: the catalog has no SM counts.
# - from 0.21.0 (read at 0.21.0, 0.25.0, 0.28.0, 0.33.0): FlashInfer's sampler by default (envs.py
#   VLLM_USE_FLASHINFER_SAMPLER defaults to True; flashinfer 0.6.9 sampling.py top_k_top_p_sampling_from_logits:
#   top_k_mask_logits' fp32 output, 4 B, and its softmax, 4 B): 8 B.
# Llama 3.1 8B in bf16 at 1,024 requests: 2 + 4 + 32 = 38 B a logit, 4.65 GiB (vLLM 0.11 logged 4.76 GiB with the
# forward's 64 MiB of hidden states alive; bench/data/serving-memory-sources.md rows B).
SORT_BYTES_PER_LOGIT = 32
PIVOT_BYTES_PER_LOGIT = 8
SORTLESS_SAMPLER_SINCE = "0.17.0"
# vLLM custom all-reduce: CustomAllreduce(max_size=8192 * 1024) allocates a meta buffer of max_size + 256 B and
# an IPC input buffer of max_size on every rank of a tensor-parallel group of 2-8 GPUs on one node
CUSTOM_ALL_REDUCE_BYTES = 8 * MiB
# A serving engine other than vLLM prefills at most this many tokens per forward unless told otherwise (SGLang's
# chunked_prefill_size on large GPUs; its recipe says so)
SERVING_PREFILL_TOKENS = 8192
# gpt-fast and torchao round a static cache up to a multiple of 8 tokens (model.py setup_caches, find_multiple)
STATIC_CACHE_MULTIPLE = 8
# SDPA's math backend (aten/src/ATen/native/transformers/attention.cpp _scaled_dot_product_attention_math, PyTorch
# >= 2.5) copies fp16 / bf16 query, key and value to fp32 unless torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp
# (default off), then computes matmul(query, key_acc.transpose(-2, -1) * scaling_factor): while that matmul runs,
# key_acc, value_acc and the scaled key transpose are three fp32 copies of the cache it was handed, beside the fp32
# score matrix it writes (heads × new tokens × cache tokens)
MATH_SDPA_FP32_COPIES = 3
# items of a static-cache generate loop allocated once, before the first token (they do not fragment the cache)
_STATIC_CACHE_ONCE = frozenset({"kv_cache", "mask_buffer", "cuda_graphs"})
# the longest sequence a cache search tries (2^24 tokens)
_MAX_TOKENS = 16_777_216


def kv_bytes_per_token(plan: Plan) -> int:
    """KV-cache bytes one token of one sequence takes on one GPU (K and V of each of its layers), for layers
    that attend globally; sliding-window layers stop growing at the window (see kv_cache_bytes)."""
    return _kv_bytes_per_token(layout(plan), plan.precision.kv_cache)


# keyed by (the model's cut, the KV-cache dtype), all it reads: a serving estimate asks at every cache size it tries
@lru_cache(maxsize=256)
def _kv_bytes_per_token(lay: Layout, kv_dtype: str) -> int:
    m = lay.model
    if m.mla:
        # latent attention caches the kv latent and the shared RoPE key, (d_c + d_h^R) per layer (DeepSeek-V2
        # paper §2.1.2), the same on every tensor-parallel rank: vLLM's MLA backends and HF transformers 5
        # (DeepseekV3Attention updates the cache before expand_kv)
        width = m.latent_rank + m.qk_rope_head_dim
    else:  # K and V per KV head on this rank (≥ one head)
        _, k, v, _ = attention_widths(m, lay.tensor)
        width = k + v
    return layout_attention_layers(lay) * width * nbytes(kv_dtype)


def kv_cache_bytes(plan: Plan, tokens: int) -> int:
    """KV-cache bytes of one sequence of `tokens` on one GPU; sliding-window layers keep only the window."""
    m = plan.model
    attending = m.pattern_count("*")  # hybrid models: the attention layers only
    per_layer = kv_bytes_per_token(plan) // attending  # per layer per token (pipeline split already in)
    windowed = m.sliding_layers
    cap = min(tokens, m.sliding_window or tokens)
    return per_layer * ((attending - windowed) * tokens + windowed * cap)


def weight_bytes(plan: Plan) -> tuple[int, int]:
    """(bytes of the weights on one GPU, their parameter count): projections (and experts) in precision.weights
    with their scales; embeddings, norms and the output head in the compute dtype (quantizers leave them), but
    for torchao's quantize_ (workload.inference.quantize_on_load), which converts the output head, an nn.Linear,
    too. Experts are split across the replica's tensor-parallel ranks."""
    return _weight_bytes(layout(plan), plan.precision, _quantized_on_load(plan))


def _quantized_on_load(plan: Plan) -> bool:
    return plan.workload.inference.quantize_on_load  # (validated: served int8, int4 or fp8 weights)


# keyed by (the model's cut, the precision, the head's quantization), all the weights read: a serving search asks
# for each layout on every GPU
@lru_cache(maxsize=256)
def _weight_bytes(lay: Layout, prec: Precision, head: bool) -> tuple[int, int]:
    """The stage whose weights take the most bytes: its layers, and the tables it holds."""
    return max(_stage_weight_bytes(lay, prec, head, s) for s in range(lay.pipeline))


def _stage_weight_bytes(lay: Layout, prec: Precision, head: bool, stage: int) -> tuple[int, int]:
    """(bytes, parameters) of one pipeline stage's weights. The input embedding sits on the first stage, the
    output head and the final norm on the last (vLLM models/llama.py: embed_tokens on the first rank, lm_head and
    norm on the last; a tied head is the embedding held again on the last rank). `head`: an untied output head
    is quantized with the projections (torchao's quantize_)."""
    m, counts = lay.model, param_counts(lay.model, lay.tensor)
    dense, moe = lay.layers[stage]
    linear = dense * (counts.attention + counts.mlp) + moe * (
        counts.attention + counts.experts + counts.shared + counts.router
    )
    norms = (dense + moe) * counts.norms
    if m.layer_pattern:  # hybrid: layer by layer
        layer_params, norms, _ = lay.patterns[stage]
        linear = layer_params - norms
    rows = (dense + moe) * sum(o for _, o in lay.shapes.values())  # per-row scales: close enough for experts too
    last = stage == lay.pipeline - 1
    head_params = (counts.lm_head or (counts.embedding if stage else 0)) if last else 0
    quantized = counts.lm_head if head and last else 0
    linear, rows = linear + quantized, rows + quantized // m.hidden_size
    tables = (counts.embedding if stage == 0 else 0) + head_params - quantized + (counts.final_norm if last else 0)
    others = norms + tables
    if head and prec.weights == "int4" and not (moe or m.layer_pattern):  # torchao's int4: the tinygemm layout
        projections = _tinygemm_bytes(lay, prec, dense, quantized)
    else:
        projections = quantized_bytes(
            linear, prec.weights, rows=rows, group_size=prec.quant_group_size, double_quant=prec.double_quant
        )
    return projections + others * nbytes(prec.activation_dtype), linear + others


def _tinygemm_bytes(lay: Layout, prec: Precision, layers: int, head_params: int) -> int:
    """torchao int4_weight_only's bytes of `layers` dense layers' projections and of a quantized output head
    (`head_params` of them), each weight padded and with its bf16 scales and zero points (tinygemm_int4_bytes)."""
    group, bc = prec.quant_group_size or DEFAULT_GROUP_SIZE["int4"], nbytes(prec.activation_dtype)
    h = lay.model.hidden_size
    per_layer = sum(tinygemm_int4_bytes(i, o, group, bc) for i, o in lay.shapes.values())
    return layers * per_layer + (tinygemm_int4_bytes(h, head_params // h, group, bc) if head_params else 0)


# torchao's float8_weight_only at v0.8.0 runs an eager matmul as F.linear(x, weight.dequantize())
# (dtypes/floatx/float8_layout.py _linear_fp_act_fp8_weight_impl); the dequantization without a zero point is
# `dequant = input.to(output_dtype); dequant = dequant * scale` (quantization/quant_primitives.py
# _dequantize_affine_no_dtype_check), so two 16-bit copies of the weight are alive at once. int8_weight_only
# casts the weight once and scales the matmul's output instead (uintx/plain_layout.py
# _linear_fp_act_int8_weight_impl). Compiled decode steps fuse the cast into the matmul (inductor decomposes a
# one-row mm into a pointwise product and a sum under coordinate_descent_tuning, which generate.py sets).
TORCHAO_FP8_DEQUANT_COPIES = 2


@dataclass(frozen=True, kw_only=True)
class _Forward:
    """One forward's transient activations (prefill of `chunk` tokens) and the sampled logits."""

    chunk: int
    mlp_peak: int
    attn_peak: int
    prefill: int  # the largest moment of a layer's forward
    logits: int  # last position only (logits_to_keep=1), and its fp32 copy for sampling
    v_alive: int  # width of the values (latent attention: kv_b's whole output) while attention runs


def _attention_peak(plan: Plan, chunk: int, bc: int) -> tuple[int, int]:
    """(attention's largest moment over `chunk` tokens, the width of the values alive). Latent attention (HF
    DeepseekV3Attention) holds, until o_proj, every local of its forward: the projected and the
    RoPE-concatenated queries (2q), the decompressed keys (k) and kv_b's output (heads × (nope + v), the values
    are a view of it), the rotated query part, the compressed kv latent + RoPE key and its norm; eager
    attention's scores (eager_score_bytes) and causal mask compete."""
    m, t, inf = plan.model, plan.parallelism.tensor, plan.workload.inference
    q, k, v, out = attention_widths(m, t)
    a_r = m.num_attention_heads // t
    v_alive = a_r * (m.head_dim + m.latent_v_head_dim) if m.mla else v
    if m.mla:
        peak = (
            chunk * (2 * q + k + v_alive + out + a_r * m.qk_rope_head_dim + 2 * m.latent_rank + m.qk_rope_head_dim) * bc
        )
    elif plan.techniques.attention == "eager":
        # at the softmax: the query and repeat_kv's copies of the keys and values at every query head (GQA; without
        # it they are the cache's own tensors: DynamicLayer.update keeps the layer's K, V as given)
        repeated = a_r * m.head_dim if k < a_r * m.head_dim else 0
        peak = chunk * (q + 2 * repeated) * bc
    else:
        peak = chunk * (q + k + v + out) * bc
    if plan.techniques.attention == "eager":
        seqs = max(1, chunk // inf.prompt_tokens)
        rows = seqs * min(chunk, inf.prompt_tokens) * inf.prompt_tokens  # b × q × kv of the causal mask
        peak += rows * (a_r * eager_score_bytes(plan.precision.activation_dtype) + bc)
    return peak, v_alive


def eager_score_bytes(dtype: str) -> int:
    """Bytes per element of the b × heads × p × p scores at eager attention's largest moment without gradients
    (transformers eager_attention_forward: matmul · scaling, + mask, softmax(dtype=float32), .to(query dtype)).

    PyTorch's softmax(dtype=float) (aten/src/ATen/native/SoftMax.cpp) has a fused half→float kernel for fp16 on
    CUDA only; a bf16 input is converted first (toType), so the masked bf16 scores, their fp32 copy and the fp32
    softmax are alive at once: 10 B. fp16: the masked scores, the fp32 softmax and its cast back, 8 B. fp32: the
    matmul's output and its scaled copy (then the masked copy, then the softmax: no conversion), 8 B. MemTracker
    on HF Llama generate (prefill under no_grad) peaks there in all three."""
    b = nbytes(dtype)
    if b == 4:
        return 2 * 4
    return b + 4 + (4 if dtype == "bf16" else b)


def _forward(plan: Plan, gpu: Gpu) -> _Forward:
    """Prefill: one forward over the prompt tokens (or a chunk). Without gradients each intermediate is freed
    when consumed; the largest moment is SwiGLU's silu(gate), up and their product (GeLU: fc and gelu(fc); HF's
    unfused gelu_new: 4 tensors), with the residual, the normed input and the layer output alive; eager
    attention's scores, softmax and causal mask compete."""
    m, inf, t = plan.model, plan.workload.inference, plan.parallelism.tensor
    bc, h = nbytes(plan.precision.activation_dtype), m.hidden_size
    shapes = projection_shapes(m, t)
    default_chunk = (
        SERVING_PREFILL_TOKENS if inf.gpu_memory_utilization is not None else inf.batch_size * inf.prompt_tokens
    )
    chunk = min(inf.prefill_chunk_tokens or default_chunk, inf.batch_size * inf.prompt_tokens)
    if inf.gpu_memory_utilization is not None and inf.fraction_scope != "static":
        # vLLM profiles a forward of its whole token budget (gpu_model_runner profile_run: _dummy_run(
        # max_num_tokens)), whatever the requests: that is what its budget sets aside
        chunk = engine_batched_tokens(plan, gpu)
    # gelu_new (HF NewGELUActivation, op by op): x, 0.5·x, 1 + tanh and their product alive at its last mul
    mlp_peak = (3 if m.mlp == "swiglu" else 4 if m.composite_gelu else 2) * chunk * shapes["up"][1] * bc
    if m.num_experts:  # fused MoE: intermediate caches of the routed tokens (T·k × (2I_e, I_e, h)), router logits
        e_inter = m.expert_intermediate_size // t
        moe_peak = chunk * m.experts_per_token * (3 * e_inter + h) * bc + chunk * m.num_experts * 4
        mlp_peak = max(mlp_peak if m.moe_layers < m.num_layers else 0, moe_peak)
    attn_peak, v_alive = _attention_peak(plan, chunk, bc)
    attn_peak = max(attn_peak, prefill_peak(plan, chunk, bc))  # hybrid models: the mixers' larger moment
    prefill = max(mlp_peak, attn_peak) + 3 * chunk * h * bc
    # a batch of more than a few tokens dequantizes each matrix for its matmul; torchao's int4 (TensorCoreTiledLayout:
    # _linear_bf16_act_uint4_weight_impl calls the fused tinygemm torch.ops.aten._weight_int4pack_mm) does not, nor
    # its dynamic activation quantization (uintx/plain_layout.py _linear_int8_act_int8_weight_impl: int_scaled_matmul;
    # floatx/float8_layout.py _linear_fp8_act_fp8_weight_impl: torch._scaled_mm)
    torchao = _quantized_on_load(plan)
    dequantizes = not (torchao and (plan.precision.weights == "int4" or inf.dynamic_activation_quant))
    if plan.precision.weights in QUANTIZED and dequantizes:
        head = (h, param_counts(m, t).lm_head // h) if torchao else (0, 0)  # torchao's quantized head is one of them
        copies = TORCHAO_FP8_DEQUANT_COPIES if torchao and plan.precision.weights == "fp8" else 1
        prefill += copies * max(i * o for i, o in (*shapes.values(), head)) * bc
    vocab_r = param_counts(m, t).embedding // h
    return _Forward(
        chunk=chunk,
        mlp_peak=mlp_peak,
        attn_peak=attn_peak,
        prefill=prefill,
        logits=inf.batch_size * vocab_r * (bc + 4),
        v_alive=v_alive,
    )


def _weights(plan: Plan, detail: bool) -> tuple[Item, Item]:
    prec = plan.precision
    w_bytes, w_params = weight_bytes(plan)
    text = "{:,} params: projections in {}" + (" with scales" if prec.weights in QUANTIZED else "") + ", the rest in {}"
    return (
        item(
            "weights",
            "Weights",
            Described(w_bytes, text, (w_params, prec.weights, prec.activation_dtype)),
            "Served weights, split over tensor- and pipeline-parallel ranks",
            detail,
        ),
        cublas_workspace("Allocated through PyTorch's caching allocator", detail),
    )


def _windowed(plan: Plan, lead: str, end: str = "") -> str:
    """How a formula says the sliding-window layers stop growing."""
    window = plan.model.sliding_window
    return f"{lead}windowed layers capped at {window:,}{end}" if window else ""


def vllm_batch_defaults(gpu: Gpu, release: str = "") -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM chooses for the GPU at the release ('' the latest; a release
    date or tag of the vLLM recipe): see VLLM_LARGE_GPU_BYTES."""
    recipe = load_frameworks()["vllm"]
    released = recipe.release_date(release)
    since = lambda tag: released is None or released >= recipe.releases[tag]  # noqa: E731
    if not since("0.8.5"):
        return (8192 if any(name in gpu.id for name in ("h100", "h200")) else 2048), 256
    if gpu.usable_bytes >= VLLM_LARGE_GPU_BYTES and not (since("0.9.0") and "a100" in gpu.id):
        return (16384 if since("0.28.0") and gpu.usable_bytes >= VLLM_HUGE_GPU_BYTES else 8192), 1024
    return 2048, 256


def _vllm_defaults(plan: Plan, gpu: Gpu) -> tuple[int, int]:
    """vLLM's batch defaults for a serving plan (a plan of another framework is planned as the latest vLLM)."""
    return vllm_batch_defaults(gpu, plan.framework_release if plan.framework == "vllm" else "")


def engine_batched_tokens(plan: Plan, gpu: Gpu) -> int:
    """The engine's token budget per forward (vLLM max_num_batched_tokens): the plan's, else vLLM's default."""
    return plan.workload.inference.prefill_chunk_tokens or _vllm_defaults(plan, gpu)[0]


def engine_max_num_seqs(plan: Plan, gpu: Gpu) -> int:
    """The serving engine's cap on running sequences: the plan's, else vLLM's default for the GPU and release,
    at least the plan's batch."""
    inf = plan.workload.inference
    if inf.max_num_seqs is not None:
        return inf.max_num_seqs
    return max(inf.batch_size, _vllm_defaults(plan, gpu)[1])


def sampler_bytes_per_logit(plan: Plan) -> int:
    """Bytes a logit of vLLM's sampler warm-up holds at its peak, at the plan's release (see SORT_BYTES_PER_LOGIT;
    a plan of another framework is planned as the latest vLLM)."""
    release = plan.framework_release if plan.framework == "vllm" else ""
    recipe = load_frameworks()["vllm"]
    released = recipe.release_date(release)
    sortless = released is None or released >= recipe.releases[SORTLESS_SAMPLER_SINCE]
    return nbytes(plan.precision.activation_dtype) + 4 + (PIVOT_BYTES_PER_LOGIT if sortless else SORT_BYTES_PER_LOGIT)


def _profile_peak(plan: Plan, gpu: Gpu, fw: _Forward, detail: bool) -> Item:
    """The activation peak of the engine's profile run (v1/worker/gpu_model_runner.py profile_run): a forward of
    its token budget, then, with that forward's hidden states still held, the sampler warmed up on
    min(max_num_seqs, tokens) requests with top-k and top-p, whose logits are gathered to the whole vocabulary on
    every rank. The forward computes no logits (compute_logits runs in _dummy_sampler_run); a layer's largest moment
    is its MLP or attention with the residual and the normed input alive (models/llama.py LlamaDecoderLayer)."""
    bc, h, vocab = nbytes(plan.precision.activation_dtype), plan.model.hidden_size, plan.model.vocab_size
    seqs = min(engine_max_num_seqs(plan, gpu), engine_batched_tokens(plan, gpu))
    per_logit = sampler_bytes_per_logit(plan)
    hidden = fw.chunk * h * bc
    forward = max(fw.mlp_peak, fw.attn_peak) + 2 * hidden
    sampler = hidden + seqs * vocab * per_logit
    text = (
        "max(forward of {:,} tokens {:MiB.0}, its hidden states {:MiB.0} + sampler {:,} requests × {:,} vocab × {} B)"
    )
    return item(
        "activations",
        "Activation peak (profile run)",
        Described(max(forward, sampler), text, (fw.chunk, Size(forward), Size(hidden), seqs, vocab, per_logit)),
        "What the engine reserves: the larger of its largest forward and its sampler warm-up",
        detail,
    )


def _custom_all_reduce(plan: Plan, detail: bool) -> Item | None:
    """vLLM's custom all-reduce (TP 2-8 on one node): an IPC meta buffer and an input buffer of max_size each."""
    if plan.parallelism.tensor not in (2, 4, 6, 8):
        return None
    return item(
        "custom_all_reduce",
        "Custom all-reduce buffers",
        Product((Factor(2, "buffers"), Factor(Size(CUSTOM_ALL_REDUCE_BYTES), "MiB.0"))),
        "vLLM custom_all_reduce.py: meta (256 B + max_size) and buffer (max_size = 8 MiB) shared by IPC",
        detail,
    )


def _engine_items(plan: Plan, gpu: Gpu, fw: _Forward, detail: bool) -> tuple[tuple[Item, ...], tuple[Item, ...]]:
    """(items inside the engine's fraction, items outside it). vLLM's gpu_memory_utilization covers the profile
    run's activation peak, and the CUDA graphs from 0.20 (fraction_scope all); SGLang's mem_fraction_static
    covers only what is allocated before the KV pool (model_runner.profile_max_num_token: rest = available −
    total × (1 − mem_fraction_static)), so its forward activations and CUDA graphs come on top."""
    scope = plan.workload.inference.fraction_scope
    static = scope == "static"
    graphs = item(
        "cuda_graphs",
        "CUDA graphs",
        Product((Factor(Size(CUDA_GRAPH_BYTES), "MiB.0"),)),
        "Captured decode graphs and their memory pool" + ("" if scope == "all" else ", outside the fraction"),
        detail,
    )
    activations = (
        item(
            "activations",
            "Prefill activations",
            Described(
                fw.prefill + fw.logits,
                "{:,} tokens per forward: largest MLP moment + 3 × T·h + last-token logits",
                (fw.chunk,),
            ),
            "One forward of the largest token chunk, outside the static fraction",
            detail,
        )
        if static
        else _profile_peak(plan, gpu, fw, detail)
    )
    allreduce = _custom_all_reduce(plan, detail)
    inside = (allreduce,) if allreduce else ()
    pool = (graphs,) if plan.workload.inference.cuda_graphs else ()  # (eager: no pool)
    if static:
        return inside, (activations,) + pool
    return (inside + (activations,) + pool, ()) if scope == "all" else (inside + (activations,), pool)


def _serving(plan: Plan, gpu: Gpu, detail: bool) -> Estimate:
    """A serving engine's startup accounting. vLLM (v1 gpu_worker, since 0.9.1 a snapshot taken at start): the KV
    cache gets gpu_memory_utilization × device memory − (the weights and the profile run's activation peak, as
    PyTorch counts them, + the non-torch memory that grew since the snapshot: NCCL, custom all-reduce); the
    CUDA graphs' pool is counted inside since 0.20 (before, captured after the KV cache, it comes on top:
    all_but_graphs); the process's CUDA context, made before the snapshot, is not charged (before 0.9.1 the
    fraction was of the device for everything on it, the context included: device). SGLang: mem_fraction_static
    is a fraction of the memory free after distributed init (CUDA context and NCCL already made) and holds the weights
    and the KV pool; activations and graphs are outside it (see _engine_items)."""
    m, inf = plan.model, plan.workload.inference
    b, fw = inf.batch_size, _forward(plan, gpu)
    weights, workspace = _weights(plan, detail)
    runtime = runtime_items(plan, detail)
    runtime_bytes = sum(i.bytes for i in runtime)
    inside, outside = _engine_items(plan, gpu, fw, detail)
    static = inf.fraction_scope == "static"
    # made before the engine measures, and not charged to its fraction (vLLM before 0.9.1 charged all of it)
    before = (
        runtime_bytes
        if static
        else 0
        if inf.fraction_scope == "device"
        else sum(i.bytes for i in runtime if i.name == "cuda_context")
    )
    outside_bytes = sum(i.bytes for i in outside)
    total = int((gpu.usable_bytes - (before if static else 0)) * inf.engine_fraction)
    charged = runtime_bytes - before
    budget = max(0, total - weights.bytes - workspace.bytes - sum(i.bytes for i in inside) - charged)
    seq_bytes, concurrent, concurrency, text, args = _paged(plan, budget)
    longest = _longest(plan, budget // b)
    serving = Serving(
        kv_budget_bytes=budget,
        kv_bytes_per_token=kv_bytes_per_token(plan),
        max_concurrent_sequences=concurrent,
        max_concurrency=concurrency,
        max_context_tokens=min(longest, m.context_window or longest),
        cache_context_tokens=longest,
        context_window=m.context_window,
    )
    kv = item(
        "kv_cache",
        "KV cache (paged)",
        Described(b * seq_bytes, text, (b,) + args),
        f"{plan.precision.kv_cache} {'kv latents + RoPE keys' if m.mla else 'K and V'}"
        f"{' and recurrent-state pages' if m.pattern_count(RECURRENT) else ''} for the batch at full "
        f"context; the engine preallocates {Size(budget)} for {serving.max_concurrent_sequences} such sequences",
        detail,
    )
    items = (weights, workspace, kv) + inside + outside
    phase = Phase(name="serving", description="engine steady state: weights, activation reserve, KV cache", items=items)
    # The engine claims `total` (and what runs outside its fraction) whatever it holds; if the batch needs more,
    # it cannot start. So fits means: the batch's KV cache fits its budget, and the claim fits the GPU.
    device = max(total, phase.allocated_bytes - outside_bytes + charged) + before + outside_bytes
    usable = min(gpu.usable_bytes, total + before + outside_bytes)
    stage = Stage(
        index=0,
        layers=max(stage_split(plan)),
        micro_batches_in_flight=1,
        phases=(phase,),
        peak=phase,
        reserved_bytes=device - runtime_bytes,
        device_bytes=device,
    )
    reserve = allocator_reserve(
        "Engine reserve (free KV blocks)",
        device - runtime_bytes - phase.allocated_bytes,
        f"{inf.gpu_memory_utilization:.0%} of usable memory − the items above",
        "KV blocks preallocated for further sequences",
        detail,
    )
    return Estimate(
        plan=plan,
        gpu=gpu,
        items=items + (reserve,) + runtime,
        phase="serving",
        stage=0,
        peak_allocated_bytes=phase.allocated_bytes,
        peak_reserved_bytes=device - runtime_bytes,
        device_bytes=device,
        usable_bytes=usable,
        host_bytes=0,
        runtime_bytes=runtime_bytes,
        serving=serving,
        all_stages=partial(tuple, (stage,)),
    )


def _paged(plan: Plan, budget: int) -> tuple[int, int, float, str, tuple]:
    """(pool bytes of one sequence at full context, sequences the budget holds, vLLM's maximum concurrency: the
    pool's whole blocks over one sequence's, the formula and its values). Hybrid models: vLLM's shared pool of
    attention pages and recurrent-state pages padded to them (see planner/memory/recurrent.py); a sequence holds
    its attention blocks and its state blocks."""
    ctx = plan.workload.inference.context_tokens
    if plan.model.pattern_count(RECURRENT):
        pool = hybrid_pool(plan, kv_bytes_per_token(plan) // attention_layers(plan))
        blocks = pool.blocks_per_sequence(ctx)
        return (
            pool.sequence_bytes(ctx),
            pool.num_blocks(budget) // blocks,
            pool.num_blocks(budget) / blocks,
            "{} seq × {} blocks ({} attention + {} state) × {:,} B page × {} layers a group",
            (
                blocks,
                pool.attention_groups * -(-ctx // pool.block_tokens),
                pool.mamba_groups * pool.mamba_blocks,
                pool.page_bytes,
                pool.group_size,
            ),
        )
    blocks_per_seq = -(-ctx // KV_BLOCK_TOKENS)
    seq_bytes = kv_cache_bytes(plan, blocks_per_seq * KV_BLOCK_TOKENS)
    block_bytes = kv_cache_bytes(plan, KV_BLOCK_TOKENS)  # one block of every layer (vLLM: page size × layers)
    pooled = budget // block_bytes * block_bytes if block_bytes else 0
    return (
        seq_bytes,
        budget // seq_bytes if seq_bytes else 0,
        pooled / seq_bytes if seq_bytes else 0.0,
        "{} seq × {} blocks × {} tokens" + _windowed(plan, " (", ")"),
        (blocks_per_seq, KV_BLOCK_TOKENS),
    )


def _decode_acts(plan: Plan, fw: _Forward) -> int:
    """One decode step's activations: the last-token logits and a few b × max(h, I) intermediates."""
    m, b = plan.model, plan.workload.inference.batch_size
    width = max(m.hidden_size, projection_shapes(m, plan.parallelism.tensor)["up"][1])
    return fw.logits + 4 * b * width * nbytes(plan.precision.activation_dtype)


def static_cache_tokens(plan: Plan) -> int:
    """Tokens a static cache is preallocated for: the whole context, rounded up to a multiple of 8 (gpt-fast and
    torchao model.py setup_caches: find_multiple(max_seq_length, 8); HF's StaticCache takes prompt + new − 1)."""
    return -(-plan.workload.inference.context_tokens // STATIC_CACHE_MULTIPLE) * STATIC_CACHE_MULTIPLE


def _static_items(plan: Plan, fw: _Forward, detail: bool) -> tuple[Item, ...]:
    """What a static cache brings beside the cache: the mask buffer, one layer's K and V repeated to every query
    head over the whole cache, and the compiled decode's CUDA graph pool."""
    m, inf, tokens = plan.model, plan.workload.inference, static_cache_tokens(plan)
    items = []
    heads, t = m.num_attention_heads // plan.parallelism.tensor, plan.parallelism.tensor
    if inf.expand_kv and m.num_kv_heads < m.num_attention_heads and not m.mla:
        bc = nbytes(plan.precision.activation_dtype)
        items.append(
            item(
                "expanded_kv",
                "K and V repeated to the query heads",
                Described(
                    2 * inf.batch_size * heads * m.head_dim * tokens * bc,
                    "2 × {} seq × {} heads × {} × {:,} tokens × {} B",
                    (inf.batch_size, heads, m.head_dim, tokens, bc),
                ),
                "One layer's cache repeat_interleave'd to every query head before SDPA (gpt-fast, torchao "
                "model.py)" + (f"; heads per rank of {t}" if t > 1 else ""),
                detail,
            )
        )
    if inf.mask_buffer:
        items.append(
            item(
                "mask_buffer",
                "Causal mask buffer",
                Described(tokens * tokens, "{:,}² tokens × 1 B (bool)", (tokens,)),
                "torch.tril(ones(L, L, bool)) kept beside the static cache (gpt-fast, torchao model.py)",
                detail,
            )
        )
    if plan.techniques.compile:  # mode="reduce-overhead" captures the decode step over the static cache
        items.append(
            item(
                "cuda_graphs",
                "CUDA graph pool (decode)",
                Described(_decode_acts(plan, fw), "one decode step's activations and last-token logits", ()),
                "torch.compile(mode='reduce-overhead') keeps the captured decode step's intermediates in "
                "the graph's private pool between steps",
                detail,
            )
        )
    return tuple(items)


def _math_sdpa(plan: Plan, detail: bool) -> tuple[Item, ...]:
    """An eager decode step's fp32 copies of K and V inside SDPA's math backend, over the whole static cache (the
    heads SDPA is handed: every query head's when the cache was repeated to them); () where none is made."""
    m, inf, t = plan.model, plan.workload.inference, plan.parallelism.tensor
    bc = nbytes(plan.precision.activation_dtype)
    if not (inf.math_sdpa_decode and inf.static_cache) or plan.techniques.compile or bc == 4 or m.mla:
        return ()
    heads = (m.num_attention_heads if inf.expand_kv else m.num_kv_heads) // t
    b, tokens = inf.batch_size, static_cache_tokens(plan)
    return (
        item(
            "math_sdpa",
            "SDPA math backend's fp32 K and V",
            Described(
                b * heads * tokens * (MATH_SDPA_FP32_COPIES * m.head_dim + 1) * 4,
                "{} seq × {} heads × {:,} tokens × ({} × {} + 1 score) × 4 B",
                (b, heads, tokens, MATH_SDPA_FP32_COPIES, m.head_dim),
            ),
            "Decode under sdpa_kernel(MATH): key and value upcast to fp32 and the key scaled, one layer at a "
            "time (PyTorch's _scaled_dot_product_attention_math)",
            detail,
        ),
    )


def _state(plan: Plan, detail: bool) -> tuple[Item, ...]:
    """A hybrid model's recurrent state under generate() (HF cache_utils LinearAttentionLayer: one per sequence
    and layer, allocated at the prompt, the same size at every step); () for attention-only models."""
    per_seq = state_bytes_per_sequence(plan, "hf")
    if not per_seq:
        return ()
    b = plan.workload.inference.batch_size
    return (
        item(
            "recurrent_state",
            "Recurrent state",
            Described(b * per_seq, "{} seq × {:MiB.2} (" + state_formula(plan.model) + ")", (b, Size(per_seq))),
            "Conv state (K columns, activation dtype) and SSM / delta-rule state (GDN: fp32 from fla's kernel)",
            detail,
        ),
    )


def _generation_phases(plan: Plan, fw: _Forward, weights: Item, workspace: Item, detail: bool) -> tuple[Phase, Phase]:
    m, inf, bc = plan.model, plan.workload.inference, nbytes(plan.precision.activation_dtype)
    b, ctx, per_token = inf.batch_size, inf.context_tokens, kv_bytes_per_token(plan)
    layers = attention_layers(plan)
    _, k, _, _ = attention_widths(m, plan.parallelism.tensor)
    static = _static_items(plan, fw, detail) if inf.static_cache else ()
    pooled = inf.static_cache and plan.techniques.compile  # the decode step's activations live in the graph pool
    final = max(ctx - 1, inf.prompt_tokens)  # the last token is sampled, not cached
    prompt_cache, final_cache = (static_cache_tokens(plan),) * 2 if inf.static_cache else (inf.prompt_tokens, final)
    layer_kv = 0 if inf.static_cache else b * final * per_token // layers  # a global layer's K, V grow by torch.cat
    # HF latent attention re-expands one layer's cached latents each step: kv_b's output and the full keys
    expand = b * ctx * (fw.v_alive + k) * bc if m.mla else 0
    cache = "{} seq × {:,} tokens × {:,} B/token" + _windowed(plan, ", ")
    how = (
        "preallocated at the whole context, rounded up to 8 tokens (static cache)"
        if inf.static_cache
        else "grown by concatenation (Hugging Face DynamicCache)"
    )
    prefill = Phase(
        name="prefill",
        description="forward over the prompts; the cache holds the prompt",
        items=(
            weights,
            workspace,
            item(
                "kv_cache",
                "KV cache",
                Described(b * kv_cache_bytes(plan, prompt_cache), cache, (b, prompt_cache, per_token)),
                f"{plan.precision.kv_cache} "
                + (
                    f"kv latent + RoPE key of {layers} layers, whole on every rank"
                    if m.mla
                    else f"K and V of {layers} layers, {k // m.head_dim} KV head(s) per rank"
                ),
                detail,
            ),
            item(
                "activations",
                "Prefill activations",
                Described(
                    fw.prefill + fw.logits,
                    "{:,} tokens: max(MLP {:MiB.0}, {} {:MiB.0}) + 3 × T·h + last-token logits",
                    (
                        fw.chunk,
                        Size(fw.mlp_peak),
                        "mixer" if m.pattern_count(RECURRENT) else "attention",
                        Size(fw.attn_peak),
                    ),
                ),
                "Transient: freed as each op's output is consumed (no gradients kept)",
                detail,
            ),
        )
        + _state(plan, detail)
        + static,
    )
    grown = (
        ("one layer's cache re-allocated one token longer + " if layer_kv else "")
        + "last-token logits"
        + (" + that layer's keys and values decompressed over the context ({:MiB.0})" if m.mla else "")
    )
    decode_acts = item(
        "activations",
        "Cache growth copy and decode activations" if layer_kv else "Decode activations",
        Described(layer_kv + expand + _decode_acts(plan, fw), grown, (Size(expand),)),
        "torch.cat builds the longer cache beside the old one"
        if layer_kv
        else "One token per sequence through the layers",
        detail,
    )
    decode = Phase(
        name="decode (last step)",
        description="the cache at full length" + ("" if inf.static_cache else ", growing one layer"),
        items=(
            weights,
            workspace,
            item(
                "kv_cache",
                "KV cache",
                Described(b * kv_cache_bytes(plan, final_cache), cache, (b, final_cache, per_token)),
                f"{plan.precision.kv_cache} K and V, {how}",
                detail,
            ),
        )
        + _state(plan, detail)
        + (static if pooled else (decode_acts,) + static + _math_sdpa(plan, detail)),
    )
    return prefill, decode


def _generation(plan: Plan, gpu: Gpu, detail: bool) -> Estimate:
    fw = _forward(plan, gpu)
    weights, workspace = _weights(plan, detail)
    prefill, decode = _generation_phases(plan, fw, weights, workspace, detail)
    peak = max((prefill, decode), key=lambda ph: ph.allocated_bytes)
    runtime = runtime_items(plan, detail)
    runtime_bytes = sum(i.bytes for i in runtime)
    # the churning memory is the growing KV cache and the activations: not what is allocated once (the weights,
    # cuBLAS, and a static cache with its mask and graph pool)
    once = ALLOCATED_ONCE | (_STATIC_CACHE_ONCE if plan.workload.inference.static_cache else frozenset())
    expandable = plan.techniques.expandable_segments
    loaded = _load_segments(plan, detail)
    kept = sum(i.bytes for i in loaded)  # segments that hold quantized weights: no later release gives them back
    reserved, least = held_bytes(peak, expandable, once)
    reserved, flushed = within_device(reserved + kept, least + kept, runtime_bytes, gpu.usable_bytes)
    stage = Stage(
        index=0,
        layers=max(stage_split(plan)),
        micro_batches_in_flight=1,
        phases=(prefill, decode),
        peak=peak,
        reserved_bytes=reserved,
        device_bytes=reserved + runtime_bytes,
        cache_flushed=flushed,
    )
    reserve = allocator_reserve(
        "Allocator reserve",
        reserved - kept - peak.allocated_bytes,
        reserve_formula(expandable, flushed),
        "Cached blocks of the growing cache and freed activations",
        detail,
    )
    return Estimate(
        plan=plan,
        gpu=gpu,
        items=peak.items + loaded + (reserve,) + runtime,
        phase=peak.name,
        stage=0,
        peak_allocated_bytes=peak.allocated_bytes,
        peak_reserved_bytes=reserved,
        device_bytes=stage.device_bytes,
        usable_bytes=gpu.usable_bytes,
        host_bytes=0,
        runtime_bytes=runtime_bytes,
        all_stages=partial(tuple, (stage,)),
        cache_flushed=flushed,
    )


def _load_segments(plan: Plan, detail: bool) -> tuple[Item, ...]:
    """The free remainder of the segments quantize_ left its weights in (planner/memory/quantize_load.py)."""
    if not _quantized_on_load(plan):
        return ()
    captured = plan.techniques.compile
    return (
        item(
            "quantized_load",
            "Segments left by quantizing on the GPU",
            Described(
                held_beyond_live(plan),
                "{} weights replayed through torchao quantize_ after a {} load"
                + (", then the graph capture's empty_cache" if captured else ", nothing released"),
                (plan.precision.weights, plan.precision.activation_dtype),
            ),
            "Each quantized weight was split off a segment a 16-bit weight or temporary was freed from; a "
            "segment that holds one stays reserved whole"
            + (
                " (torch.cuda.graph calls empty_cache before capturing, which frees only empty segments)"
                if captured
                else ""
            ),
            detail,
            "reserved",
        ),
    )


def inference_estimate(plan: Plan, gpu: Gpu, detail: bool = True) -> Estimate:
    if plan.workload.inference.gpu_memory_utilization is not None:
        return _serving(plan, gpu, detail)
    return _generation(plan, gpu, detail)


def _longest(plan: Plan, budget: int) -> int:
    """The most tokens one sequence's KV cache can hold within `budget` bytes, in whole blocks."""
    if plan.model.pattern_count(RECURRENT):  # the blocks beside the sequence's state blocks, per attention group
        pool = hybrid_pool(plan, kv_bytes_per_token(plan) // attention_layers(plan))
        left = pool.num_blocks(budget) - pool.mamba_groups * pool.mamba_blocks
        return max(0, left // pool.attention_groups) * pool.block_tokens
    if kv_cache_bytes(plan, _MAX_TOKENS) <= budget:
        return _MAX_TOKENS  # windowed layers only: the cache stops growing
    lo, hi = 0, _MAX_TOKENS  # kv_cache_bytes grows with tokens
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if kv_cache_bytes(plan, mid) <= budget else (lo, mid)
    return lo // KV_BLOCK_TOKENS * KV_BLOCK_TOKENS
