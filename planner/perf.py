"""How long a step and a job take: FLOPs per token, the GPU's peak FLOP/s, job hours, serving throughput.

Training time is the job's FLOPs (`flops_per_token`) at an assumed model FLOPs utilization, stretched by the
pipeline bubble and the PCIe traffic of offloading. Serving decode is bounded by HBM bandwidth (a step reads
every weight and the KV cache once), prefill by compute. This is the one home of the time model.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.catalog import Gpu
from planner.memory.inference import kv_cache_bytes, weight_bytes
from planner.memory.layout import largest_stage_layers
from planner.models import attention_widths, param_counts
from planner.plan import Plan

# Fraction of the GPU's dense peak that training sustains. Llama 3 reports 38-43 % BF16 MFU on 16K H100s
# (Dubey et al. 2024, Table 4); well-tuned runs on one node reach 40-55 %. Adjustable per call.
DEFAULT_MFU = 0.40
# Host-device copies for offloading: PCIe Gen4 x16 moves ~25 GB/s in practice (32 GB/s theoretical).
PCIE_BYTES_PER_SECOND = 25e9
# Decode kernels reach ~80 % of the HBM bandwidth on the spec sheet (memory-bound GEMV; vendor STREAM-like
# measurements are 85-92 %, attention over a paged cache is lower).
BANDWIDTH_EFFICIENCY = 0.80


@dataclass(frozen=True, kw_only=True)
class Throughput:
    decode_tokens_per_second: float  # per replica, all batch sequences together
    prefill_tokens_per_second: float  # per replica
    seconds_per_batch: float  # prefill + every decode step of one batch
    output_tokens_per_second_per_gpu: float


# --- Training FLOPs and time ---------------------------------------------------------------------------
def forward_flops_per_token(plan: Plan, sequence_length: int | None = None) -> float:
    """Forward FLOPs per token: 2 × the matmul parameters the token passes through (active experts only, plus
    the output head; Kaplan et al. 2020) and attention, 2 × (q + v widths) × keys per layer (QKᵀ and PV), over the
    keys a query sees: causal halves them where fused kernels skip the masked half (PaLM, Chowdhery et al.
    2022, App. B), sliding windows cap them."""
    m = plan.model
    s = sequence_length or plan.workload.sequence_length
    flash = plan.techniques.attention == "flash"
    window = min(s, m.sliding_window or s)
    per_query = s / 2 if flash else s  # eager computes the masked half too
    keys = (m.num_layers - m.sliding_layers) * per_query + m.sliding_layers * (min(window, per_query) if flash else s)
    q, _, _, out = attention_widths(m)
    return 2 * _matmul_params(plan) + 2 * (q + out) * keys


def _matmul_params(plan: Plan) -> int:
    """Matmul parameters a token passes through: the layers' projections (active experts only) and the output
    head; norms and the embedding lookup do no matmul."""
    m = plan.model
    counts = param_counts(m)
    return (counts.active - counts.embedding - counts.lm_head - m.num_layers * counts.norms - counts.final_norm
            + m.vocab_size * m.hidden_size)


def flops_per_token(plan: Plan) -> float:
    """Training FLOPs per token: forward + backward (3 × forward), plus one more forward under full
    recomputation (its ⌊L/k⌋ / L share for every k-th layer, or the attention scores' forward under selective
    recomputation of eager attention)."""
    forward = forward_flops_per_token(plan)
    ckpt = plan.techniques.activation_checkpointing
    attention = forward - 2 * _matmul_params(plan)
    layers = plan.model.num_layers
    share = (layers // plan.techniques.checkpoint_every) / layers  # the layers every_k checkpoints
    recompute = (forward if ckpt == "full" else forward * share if ckpt == "every_k" else
                 attention if (ckpt == "selective" and plan.techniques.attention == "eager") else 0)
    return 3 * forward + recompute


def peak_flops(gpu: Gpu, dtype: str) -> float | None:
    """Dense peak FLOP/s of the GPU's matmuls in `dtype` (None: no such tensor cores)."""
    tflops = {"bf16": gpu.bf16_tflops, "fp16": gpu.fp16_tflops, "fp8": gpu.fp8_tflops, "fp32": gpu.fp32_tflops}[dtype]
    return None if tflops is None else tflops * 1e12


def job_hours(plan: Plan, gpu: Gpu, tokens: int, mfu: float) -> float:
    """Wall-clock hours of the job on `plan.hardware.count` GPUs of type `gpu`."""
    par, wl = plan.parallelism, plan.workload
    n = plan.hardware.count
    compute = tokens * flops_per_token(plan) / (n * peak_flops(gpu, plan.precision.compute) * mfu)
    m = plan.micro_batches_per_step
    # pipeline bubble: (p - 1) idle slots per m micro-batches under 1F1B and GPipe, 1/v of that with v interleaved
    # chunks (Narayanan et al. 2021), about a third with zero-bubble ZB-H1 (Qi et al. 2023)
    bubble = (par.pipeline - 1) / m / {"interleaved_1f1b": par.virtual_stages, "zero_bubble": 3}.get(
        par.pipeline_schedule, 1)
    compute *= 1 + bubble
    offload = plan.techniques.offload
    if offload != "none":  # gradients down, updated weights up, once per step; weights per pass when offloaded
        steps = tokens / (wl.global_batch_size * wl.sequence_length)
        params_gpu = param_counts(plan.model, par.tensor).total / (par.pipeline * par.data * par.context)
        moved = params_gpu * 4 * (1 + (2 * m if offload == "optimizer_and_params" else 0))
        compute += steps * moved / PCIE_BYTES_PER_SECOND
    return compute / 3600



def throughput(plan: Plan, gpu: Gpu, mfu: float) -> Throughput:
    """Tokens per second of one replica: decode bounded by HBM bandwidth, prefill by compute."""
    m, par = plan.model, plan.parallelism
    inf = plan.workload.inference
    b, ranks = inf.batch_size, par.tensor * par.pipeline
    w_bytes, w_params = weight_bytes(plan)
    if m.num_experts:  # a step reads only the experts its tokens were routed to: E(1 - (1 - k/E)^b) per layer
        counts = param_counts(m, par.tensor)
        _, moe = largest_stage_layers(plan)
        touched = m.num_experts * (1 - (1 - m.experts_per_token / m.num_experts) ** b)
        idle = moe * counts.expert * (m.num_experts - touched)
        w_bytes -= idle * w_bytes / w_params
    # the cache a step reads grows from the prompt to the full context: take the mean of the two ends
    mean_cache = (kv_cache_bytes(plan, inf.prompt_tokens) + kv_cache_bytes(plan, inf.context_tokens)) / 2
    read_per_step = w_bytes + b * mean_cache  # per GPU (each rank reads its shard)
    step = read_per_step / (gpu.memory_bandwidth_tb_per_s * 1e12 * BANDWIDTH_EFFICIENCY)
    if par.pipeline > 1:
        step *= par.pipeline  # one batch passes the stages in turn
    prefill_flops = b * inf.prompt_tokens * forward_flops_per_token(plan, inf.prompt_tokens)
    prefill_s = prefill_flops / (ranks * peak_flops(gpu, plan.precision.compute) * mfu)
    total = prefill_s + inf.output_tokens * step
    return Throughput(decode_tokens_per_second=b / step, prefill_tokens_per_second=b * inf.prompt_tokens / prefill_s,
                      seconds_per_batch=total,
                      output_tokens_per_second_per_gpu=b * inf.output_tokens / total / ranks if total else 0.0)
