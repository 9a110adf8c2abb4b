"""How long serving takes: one batch of `batch_size` sequences, prefill of the prompts then decode token by token.

Prefill is a forward pass over every prompt token (compute-bound; matmuls by roofline). Each decode step reads
every weight the step touches (MoE: only the experts its tokens were routed to) and the KV cache once, and does
2 FLOPs per active parameter per sequence: the longer of the two (memory-bound at small batches). Tensor
parallelism adds two all-reduces per layer per step (latency-bound at decode); pipeline stages take one
batch in turn. Rates are the GPU's achievable ones (planner/perf/rates.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.catalog import Gpu
from planner.memory.inference import kv_cache_bytes, weight_bytes
from planner.memory.layout import largest_stage_layers
from planner.memory.recurrent import state_bytes_per_sequence
from planner.perf.flops import forward_flops_per_token, matmul_params
from planner.perf.gemm import Gemm, forward_s, gemms_s
from planner.perf.rates import (
    ATTENTION_FRACTION_OF_MATMUL,
    Group,
    Rates,
    collective_s,
    mfu_reference,
    rates,
    supported_rates,
)
from planner.perf.result import Seconds, StepTime, TimeItem, step_of
from planner.perf.work import keys_per_query, layer_work, matmul_elem
from planner.plan.config import Plan
from planner.plan.dtypes import nbytes
from planner.plan.models import param_counts


@dataclass(frozen=True, kw_only=True)
class Throughput:
    decode_tokens_per_second: float  # per replica, all batch sequences together
    prefill_tokens_per_second: float  # per replica
    seconds_per_batch: float  # prefill + every decode step of one batch
    output_tokens_per_second_per_gpu: float


def _prefill_s(plan: Plan, r: Rates) -> tuple[float, float]:
    """(compute seconds, elementwise seconds) of the prompts' forward on one replica (stages in turn)."""
    m, inf = plan.model, plan.workload.inference
    tokens = inf.batch_size * inf.prompt_tokens
    keys = keys_per_query(plan, inf.prompt_tokens)
    dense, moe = largest_stage_layers(plan)
    compute = elementwise = 0.0
    for n, is_moe in ((dense, False), (moe, True)):
        if n:
            w = layer_work(plan, tokens, keys, is_moe)
            compute += n * (gemms_s(w.gemms, r)[0] + w.attention_work / r.attention_flops)
            elementwise += n * w.elementwise_bytes / r.hbm_bytes
    head = forward_s(
        Gemm(1, inf.batch_size, m.hidden_size, -(-m.vocab_size // plan.parallelism.tensor), matmul_elem(plan)), r
    )  # logits of each prompt's last position
    stages = plan.parallelism.pipeline
    return stages * compute + head, stages * elementwise


def _decode_read_bytes(plan: Plan) -> float:
    """Bytes one decode step moves on one GPU: the weights its tokens touch, the mean KV cache and the recurrent
    state."""
    m, par, inf = plan.model, plan.parallelism, plan.workload.inference
    b = inf.batch_size
    w_bytes, w_params = weight_bytes(plan)
    untouched = 0.0
    if m.num_experts:  # a step reads only the experts its tokens were routed to: E(1 − (1 − k/E)^b) per layer
        counts = param_counts(m, par.tensor)
        _, moe = largest_stage_layers(plan)
        touched = m.num_experts * (1 - (1 - m.experts_per_token / m.num_experts) ** b)
        untouched = moe * counts.expert * (m.num_experts - touched) * w_bytes / w_params
    # the cache a step reads grows from the prompt to the full context: the mean of the two ends
    mean_cache = (kv_cache_bytes(plan, inf.prompt_tokens) + kv_cache_bytes(plan, inf.context_tokens)) / 2
    # hybrid models: each step reads and rewrites every recurrent layer's whole state (docs/hybrid.md §5)
    state = 2 * state_bytes_per_sequence(plan, "hf" if inf.gpu_memory_utilization is None else "vllm")
    return w_bytes - untouched + b * (mean_cache + state)


def serving_items(plan: Plan, r: Rates) -> list[TimeItem]:
    """The seconds of one batch on one replica, item by item."""
    par, inf = plan.parallelism, plan.workload.inference
    prefill, prefill_mem = _prefill_s(plan, r)
    read = Seconds(amount=_decode_read_bytes(plan), unit="B", rate=r.hbm_bytes, rate_unit="B/s")
    flops = Seconds(
        amount=2 * matmul_params(plan) / (par.tensor * par.pipeline) * inf.batch_size,
        unit="FLOP",
        rate=r.matmul_flops,
        rate_unit="FLOP/s",
    )
    step = max(read.seconds, flops.seconds) * par.pipeline
    bound = "HBM reads" if read.seconds >= flops.seconds else "matmuls"
    items = [
        TimeItem(
            name="prefill",
            label="Prefill (prompts' forward)",
            kind="compute",
            seconds=prefill,
            hidden_s=0.0,
            formula=f"{inf.batch_size} × {inf.prompt_tokens} tokens through {par.pipeline} stage(s) = {prefill:.4g} s",
            note=f"matmuls by roofline, attention at {ATTENTION_FRACTION_OF_MATMUL:g} × the 16-bit matmul rate",
        ),
        TimeItem(
            name="prefill_elementwise",
            label="Prefill norms and activations",
            kind="memory",
            seconds=prefill_mem,
            hidden_s=0.0,
            formula=f"{prefill_mem:.4g} s at {r.hbm_bytes / 1e12:.2f} TB/s",
            note="elementwise bytes of the prompts' forward",
        ),
        TimeItem(
            name="decode",
            label="Decode steps",
            kind="memory" if bound == "HBM reads" else "compute",
            seconds=inf.output_tokens * step,
            hidden_s=0.0,
            formula=f"{inf.output_tokens} steps × {par.pipeline} stage(s) × max({read.text}, {flops.text})",
            note=f"each step is bound by its {bound}",
        ),
    ]
    if par.tensor > 1:
        layers, one, prompt_one = _tensor_parallel_s(plan, r)
        seconds = layers * 2 * (inf.output_tokens * one + prompt_one)
        items.append(
            TimeItem(
                name="tensor_parallel",
                label="Tensor-parallel all-reduces",
                kind="communication",
                seconds=seconds,
                hidden_s=0.0,
                over=Group(size=par.tensor, stride=1).where(r),
                formula=f"{layers} layers × 2 × ({inf.output_tokens} steps × {one:.3g} s + prefill {prompt_one:.3g} s)",
                note="exposed; latency-bound at decode",
            )
        )
    return items


def _tensor_parallel_s(plan: Plan, r: Rates) -> tuple[int, float, float]:
    """(layers of the replica, one decode step's all-reduce, the prompts' all-reduce): two per layer each."""
    par, inf = plan.parallelism, plan.workload.inference
    layers = sum(largest_stage_layers(plan)) * par.pipeline
    act = inf.batch_size * plan.model.hidden_size * nbytes(plan.precision.activation_dtype)
    group = Group(size=par.tensor, stride=1)
    return (
        layers,
        collective_s("all_reduce", act, group, r),
        collective_s("all_reduce", act * inf.prompt_tokens, group, r),
    )


@dataclass(frozen=True, kw_only=True)
class Latency:
    """What one request of a batch waits, on one replica. The batch is static: its prompts are prefilled
    together, then decoded together, so the time to first token is the whole batch's prefill (a continuous-
    batching engine at full load interleaves prefills with decodes and lands near the same figure)."""

    ttft_s: float  # time to first token: the batch's prefill
    tpot_s: float  # time per output token: one decode step of the batch
    requests_per_s: float  # batches of batch_size requests, one after another
    output_tokens_per_s: float


def latency(plan: Plan, gpu: Gpu) -> Latency:
    """Time to first token, time per output token and throughput of one replica, from its serving items."""
    r = supported_rates(gpu, plan.precision.compute)
    items = {i.name: i.seconds for i in serving_items(plan, r)}
    inf = plan.workload.inference
    layers, one, prompt_one = _tensor_parallel_s(plan, r) if plan.parallelism.tensor > 1 else (0, 0.0, 0.0)
    total = sum(items.values())
    return Latency(
        ttft_s=items["prefill"] + items["prefill_elementwise"] + layers * 2 * prompt_one,
        tpot_s=items["decode"] / inf.output_tokens + layers * 2 * one,
        requests_per_s=inf.batch_size / total,
        output_tokens_per_s=inf.batch_size * inf.output_tokens / total,
    )


def serving_time(plan: Plan, gpu: Gpu) -> StepTime | None:
    """One batch of generation on one replica (None: the GPU has no tensor cores for the compute dtype)."""
    r = rates(gpu, plan.precision.compute)
    if r is None:
        return None
    inf, par = plan.workload.inference, plan.parallelism
    peak, note = mfu_reference(r)
    flops_per_token = forward_flops_per_token(plan, inf.context_tokens) * inf.context_tokens / inf.output_tokens
    return step_of(
        serving_items(plan, r),
        tokens=inf.batch_size * inf.output_tokens,
        gpus=par.tensor * par.pipeline,
        model_flops_per_token=flops_per_token,
        peak_flops=peak,
        efficiency_note=note,
    )


def throughput(plan: Plan, gpu: Gpu) -> Throughput:
    """Tokens per second of one replica, from its serving items."""
    items = {i.name: i.seconds for i in serving_items(plan, supported_rates(gpu, plan.precision.compute))}
    inf, par = plan.workload.inference, plan.parallelism
    prefill = items["prefill"] + items["prefill_elementwise"]
    total = sum(items.values())
    decode = items["decode"] / inf.output_tokens
    return Throughput(
        decode_tokens_per_second=inf.batch_size / decode,
        prefill_tokens_per_second=inf.batch_size * inf.prompt_tokens / prefill,
        seconds_per_batch=total,
        output_tokens_per_second_per_gpu=inf.batch_size * inf.output_tokens / total / (par.tensor * par.pipeline),
    )
