"""The planner against the estimators a user could pick instead, on the measured rows of bench/accuracy.py.

Every peer is reimplemented offline from its published formula (each function cites its source) and gets the
same inputs, taken from the row's plan: the parameter count from our `Model.params`, layers, hidden size, heads,
sequence, micro-batch, dtype, ZeRO stage, GPU count and task. So the comparison is about the formulas, not
about how each tool counts parameters. A peer that cannot describe a row (no LoRA, no inference, ...) shows
"n/a" there and is scored only on the rows it covers. Each prediction is compared with the statistic the row
measured (allocated / reserved / device), as in bench/accuracy.py; the peers predict one number whatever the
statistic.

    python bench/peers.py                 # per-tool median / p90 |error| and time per estimate (docs/accuracy.md)
    python bench/peers.py --rows          # first, the per-row table
    python bench/peers.py --time          # time every tool again into bench/data/peer-timings.csv
    python bench/peers.py --write-docs    # and the table in docs/accuracy.md

The errors are the same on any machine; the times are not, so the table takes them from
bench/data/peer-timings.csv, which says when and on what machine they were measured.
"""

from __future__ import annotations

import csv
import datetime
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import _path  # noqa: F401  (the checkout first on sys.path)

import accuracy
import doc_tables

from planner.memory import estimate
from planner.plan.codec import plan_from_dict
from planner.plan.config import Plan
from planner.units import GiB

PLANNER = "planner"
TOOLS = ("16 B/param rule", "accelerate", "DeepSpeed ZeRO", "Megatron-LM", "llm-analysis", PLANNER)
# How the table names each tool
LABELS = {
    "accelerate": "accelerate `estimate-memory`",
    "DeepSpeed ZeRO": "DeepSpeed ZeRO estimators",
    "Megatron-LM": "Megatron-LM theoretical memory",
}
TIMINGS = Path(__file__).resolve().parent / "data" / "peer-timings.csv"
BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5, "nf4": 0.5}


@dataclass(frozen=True)
class Inputs:
    """What every peer is given, derived from a row's plan."""

    params: int  # total parameters (our Model.params)
    embedding: int  # input embedding + untied output head
    largest_layer: int  # largest single module's own parameters (DeepSpeed ZeRO-3's gather buffer)
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    seq: int  # training sequence, or inference prompt tokens
    batch: int
    new_tokens: int  # inference: generated tokens
    task: str  # pretrain | finetune | lora | qlora | inference
    compute: str  # bf16 | fp16 | fp32 | fp8
    weights: str  # dtype of the stored weights (nf4 for QLoRA / 4-bit inference)
    master: str  # fp32 | none
    optimizer: str
    zero: int
    gpus: int  # data-parallel GPUs (the ZeRO group)
    tensor: int
    pipeline: int
    recompute: str  # none | selective | full
    flash: bool


def inputs(plan: Plan) -> Inputs:
    m, w, p, par = plan.model, plan.workload, plan.precision, plan.parallelism
    counts = m.params
    inference = w.task == "inference"
    largest = max(counts.embedding, counts.lm_head, m.hidden_size * m.intermediate_size, m.hidden_size * m.q_width)
    return Inputs(
        params=counts.total,
        embedding=counts.embedding + counts.lm_head,
        largest_layer=largest,
        layers=m.num_layers,
        hidden=m.hidden_size,
        heads=m.num_attention_heads,
        kv_heads=m.num_kv_heads,
        ffn=m.intermediate_size,
        vocab=m.vocab_size,
        seq=w.inference.prompt_tokens if inference else w.sequence_length,
        batch=w.inference.batch_size if inference else w.micro_batch_size,
        new_tokens=w.inference.output_tokens if inference else 0,
        task=w.task,
        compute=p.compute,
        weights=p.weights or p.activation_dtype,
        master=p.master_weights,
        optimizer=p.optimizer,
        zero=par.zero_stage,
        gpus=par.data,
        tensor=par.tensor,
        pipeline=par.pipeline,
        recompute=plan.techniques.activation_checkpointing,
        flash=plan.techniques.attention != "eager",
    )


def _full_training(x: Inputs) -> bool:
    return x.task in ("pretrain", "finetune")


# --- 1. "16 bytes per parameter" -------------------------------------------------------------------------------
def rule16(x: Inputs) -> float | None:
    """Mixed-precision Adam: 2 (bf16 weights) + 2 (bf16 grads) + 4 (fp32 master) + 8 (Adam moments) = 16 B per
    parameter, no activations (Ultra-Scale Playbook, "Memory for weights/grads/optimizer states",
    https://huggingface.co/spaces/nanotron/ultrascale-playbook; /work/shared/research/peers.md "Model states").
    Its usual inference variant is 1.2 × the weights in their dtype (EleutherAI "Transformer Math 101",
    https://blog.eleuther.ai/transformer-math/, quoted by accelerate's docs
    `docs/source/usage_guides/model_size_estimator.md`: "add up to an additional 20%"). LoRA/QLoRA: no
    published variant of the rule → n/a. Applied whatever the optimizer: the rule has no optimizer input."""
    if _full_training(x):
        return 16.0 * x.params
    if x.task == "inference":
        return 1.2 * x.params * BYTES[x.weights]
    return None


# --- 2. accelerate estimate-memory -----------------------------------------------------------------------------
def accelerate_estimate(x: Inputs) -> float | None:
    """`accelerate estimate-memory` (huggingface/accelerate `src/accelerate/commands/estimate.py`,
    `estimate_training_usage` and `gather_data`). Loading: the model's fp32 size ÷2 (float16), ÷4 (int8), ÷8 (int4).
    "Training using Adam" = the largest of model / gradients / optimizer / step, from the fp32 size `4P`:
    float32 → model 4P, gradients 4P, optimizer 8P, step 16P (max 16P); float16/bfloat16 (and fp8 without
    MS-AMP) → model 4P, gradients 4P + 2P, optimizer 8P, step 8P (max 8P), i.e. 4× the model in its dtype.
    No activations, no batch, no sequence, no parallelism, no LoRA (→ n/a)."""
    fp32_size = 4.0 * x.params
    if x.task == "inference":
        return fp32_size * BYTES[x.weights] / 4  # the --dtypes choice matching the weights (nf4 → int4)
    if not _full_training(x):
        return None
    if x.compute == "fp32":
        sizes = {"model": fp32_size, "gradients": fp32_size, "optimizer": 2 * fp32_size, "step": 4 * fp32_size}
    else:
        half = fp32_size / 2
        sizes = {"model": fp32_size, "gradients": fp32_size + half, "optimizer": 2 * fp32_size, "step": 2 * fp32_size}
    return max(sizes.values())


# --- 3. DeepSpeed ZeRO model-state estimators ------------------------------------------------------------------
def deepspeed_zero(x: Inputs) -> float | None:
    """Per-GPU model states only (no activations), no offload (deepspeedai/DeepSpeed):
    ZeRO-2 `deepspeed/runtime/zero/stage_1_and_2.py: estimate_zero2_model_states_mem_needs`:
    `2·P + 18·P/N` ("18 = 2_grads_16bit + 4_grads_32bit + 4_params_32bit + 8_optimizer_states_32bit"; the form
    since PR #5099, earlier `4·P + 16·P/N`, equal at N = 1);
    ZeRO-3 `deepspeed/runtime/zero/stage3.py: estimate_zero3_model_states_mem_needs`:
    `4·largest_layer_params + 18·P/N`. N = GPUs of the ZeRO group. ZeRO stage 0 (plain data parallel) is the
    ZeRO-2 formula with nothing partitioned (N = 1). No ZeRO-1 estimator; training only, every parameter
    assumed trainable (LoRA/QLoRA, inference → n/a)."""
    if not _full_training(x):
        return None
    if x.zero == 3:
        return 4.0 * x.largest_layer + 18.0 * x.params / x.gpus
    if x.zero == 2:
        return 2.0 * x.params + 18.0 * x.params / x.gpus
    if x.zero == 0:
        return 2.0 * x.params + 18.0 * x.params
    return None


# --- 4. Megatron-LM theoretical memory -------------------------------------------------------------------------
def megatron(x: Inputs) -> float | None:
    """NVIDIA/Megatron-LM `megatron/training/theoretical_memory_usage.py` (`report_theoretical_memory`).
    Weights + optimizer (`compute_weight_and_optimizer_memory`): most-loaded shard
    `(transformer params / p + embedding) / t` (+ the untied output head when p = 1) × 18 B/param, or
    × (6 + 12/d) with the distributed optimizer (taken for ZeRO-1/2; ZeRO-3 has no Megatron counterpart → n/a).
    Activations: the SP + selective path (`compute_activation_memory`, Korthikanti et al. 2022 Table 2,
    `s·b·h·(18 + 4·ffn/h)` per layer) needs sequence parallelism, i.e. t > 1; every other setting, the row's
    recompute included, goes through `compute_activation_memory_without_sp`:
    `s·b·h·(10 + 24/t)·L + 8·s·b·p + s·b·h·p`, + `(s·b·V/t + s·b·h)·2` when p = 1, × 1.05.
    Training only, full-parameter Adam (LoRA/QLoRA, inference → n/a)."""
    if not _full_training(x) or x.zero == 3:
        return None
    t, p, s, b, h, L, V = x.tensor, x.pipeline, x.seq, x.batch, x.hidden, x.layers, x.vocab
    table = x.vocab * x.hidden
    head = x.embedding - table  # untied output head (0 when tied)
    transformer = x.params - x.embedding
    shard = (transformer / p + table) / t + (head / t if p == 1 else 0)
    per_param = 6 + 12 / x.gpus if x.zero in (1, 2) else 18
    weights_and_optimizer = shard * per_param
    if t > 1 and x.recompute == "selective":  # sequence parallel assumed with t > 1
        act = s * b * h * (18 + 4 * x.ffn / h) * L + 8 * s * b * p + s * b * h * p
        if p == 1:
            act += s * b * h * 4 * (1 + V / h)
        act /= t
    else:
        act = s * b * h * (10 + 24 / t) * L + 8 * s * b * p + s * b * h * p
        if p == 1:
            act += (s * b * V / t + s * b * h) * 2
        act *= 1.05
    return weights_and_optimizer + act


# --- 5. llm-analysis -------------------------------------------------------------------------------------------
def llm_analysis(x: Inputs) -> float | None:
    """cli99/llm-analysis `llm_analysis/analysis.py` (the version read: commit
    08d7f8f6958619070d6b0484730a0f0054f042ed), `LLMAnalysis.training` / `LLMAnalysis.inference`, with our
    parameter count in place of its own.
    Training: "(weight+op_state+grad+act)_memory_per_gpu" = weights (`get_weight_memory_per_layer`,
    `get_memory_embedding`; weight bits, embedding bits, ÷d under ZeRO-3) + optimizer state (`(master +
    other_op_bytes)·P`, Adam default 4 + 8; ÷d for ZeRO ≥ 1) + gradients (`master·P`, ÷d for ZeRO ≥ 2) +
    activations (`get_activation_memory_per_layer` × L + logits `V·b·s·2/t` + one LayerNorm `s·b·h·4`).
    Per layer: attention `(s·b·h + 4·s·b·h/t)·2 + attn_compute + s·b·h` (dropout mask), attn_compute =
    `(2·s·b·h + 4·a·s·b)·2/t` with flash_attn, else `2·a·s²·b·2/t`;
    MLP `2·s·b·h + (2 + 2)·(ffn/h)·s·b·h/t`; two LayerNorms `2·s·b·h·4`; full recompute `s·b·h·2/t`;
    selective (ATTN_COMPUTE) drops attn_compute.
    Our plan's optimizer maps to its options: AdamW → defaults; SGD without state → other_op_bytes 0; no fp32
    master → master_weights_dtype_bytes = 2.
    Inference: the fit checks of `inference()` imply the peak `weights + max(prefill activations, KV cache +
    decode activations)`; activations per layer are the max of attention `max(3·2·s·b·h/t, attn_compute)`, MLP
    `max(2, 2·ffn/h)·s·b·h/t` and LayerNorm `s·b·h·2`, against the logits `V·b·s·2/t`; KV cache
    `2·b·(s + new)·(h/a)·max(kv/t, 1)·2` × L/p. Weight dtype wXa16e16: nf4 → 4-bit layers, 16-bit embedding.
    No LoRA/QLoRA (README: "PEFT is in future support") → n/a."""
    act_bytes, t, L = 2, x.tensor, x.layers
    h, a, V = x.hidden, x.heads, x.vocab
    ratio = x.ffn / h
    embed_bytes = 4 if x.compute == "fp32" else 2
    layer_bytes = BYTES[x.weights] if x.task == "inference" else embed_bytes
    if x.compute == "fp32":
        act_bytes = 4
    weights = ((x.params - x.embedding) * layer_bytes + x.embedding * embed_bytes) / t

    def per_layer(s: int, b: int, inference: bool) -> float:
        if not inference and x.recompute == "full":
            return s * b * h * act_bytes / t
        if not inference and x.recompute == "selective":
            compute = 0.0
        elif x.flash:
            compute = (2 * s * b * h + 4 * a * s * b) * act_bytes / t
        else:
            compute = 2 * a * s**2 * b * act_bytes / t
        if inference:
            attn = max(3 * act_bytes * s * b * h / t, compute)
            mlp = max(act_bytes, act_bytes * ratio) * s * b * h / t
            return max(attn, mlp, s * b * h * 2)  # inference layernorm_dtype_bytes = 2
        attn = (s * b * h + 4 * s * b * h / t) * act_bytes + compute + s * b * h
        mlp = act_bytes * s * b * h + 2 * act_bytes * ratio * s * b * h / t
        return attn + mlp + 2 * s * b * h * 4

    if x.task == "inference":
        s, b = x.seq, x.batch
        prefill = max(per_layer(s, b, True), V * b * s * act_bytes / t)
        decode = max(per_layer(1, b, True), V * b * act_bytes / t)
        kv = 2 * b * (s + x.new_tokens) * (h / a) * max(x.kv_heads / t, 1) * act_bytes * (L // x.pipeline)
        return weights + max(prefill, kv + decode)
    if not _full_training(x):
        return None
    d = x.gpus
    master = 4 if x.master == "fp32" else 2
    other = 0 if x.optimizer == "sgd" else 8
    if x.zero == 3:
        weights /= d
    optimizer = (master + other) * x.params / t / (d if x.zero >= 1 else 1)
    gradients = master * x.params / t / (d if x.zero >= 2 else 1)
    s, b = x.seq, x.batch
    activations = per_layer(s, b, False) * L + V * b * s * act_bytes / t + s * b * h * 4
    return weights + optimizer + gradients + activations


PEERS = {
    "16 B/param rule": rule16,
    "accelerate": accelerate_estimate,
    "DeepSpeed ZeRO": deepspeed_zero,
    "Megatron-LM": megatron,
    "llm-analysis": llm_analysis,
}


def _cases() -> list[tuple[dict, dict, Plan]]:
    cases = []
    for row in csv.DictReader(accuracy.DATA.open()):
        plan_dict, _ = accuracy.express(row)
        if plan_dict is not None:
            cases.append((row, plan_dict, plan_from_dict(plan_dict)))
    return cases


def run() -> list[dict]:
    """Per expressed row: the measured GiB and, per tool, the predicted GiB and signed error % (None: n/a)."""
    out = []
    for row, plan_dict, plan in _cases():
        stat = accuracy.statistic(row)
        measured = float(row["measured_gib"])
        x = inputs(plan)
        predicted = {name: f(x) for name, f in PEERS.items()}
        predicted[PLANNER] = accuracy.predict(plan_dict, stat)
        tools = {}
        for name in TOOLS:
            value = predicted[name]
            gib = None if value is None else value / GiB
            tools[name] = {"gib": gib, "error_pct": None if gib is None else 100 * (gib - measured) / measured}
        out.append(
            {
                "row": row["row_id"],
                "model": row["model"],
                "task": plan.workload.task,
                "stat": stat,
                "measured_gib": measured,
                "tools": tools,
            }
        )
    return out


def timings(repeats: int = 20) -> dict[str, float]:
    """Mean seconds per estimate, time.perf_counter over `repeats` passes over the rows each tool covers.
    Peers: their formula on prepared inputs; planner: `estimate(plan)` on the parsed plan."""
    cases = [(plan, inputs(plan)) for _, _, plan in _cases()]
    out = {}
    for name, f in PEERS.items():
        xs = [x for _, x in cases if f(x) is not None]
        start = time.perf_counter()
        for _ in range(repeats):
            for x in xs:
                f(x)
        out[name] = (time.perf_counter() - start) / (repeats * len(xs))
    plans = [plan for plan, _ in cases]
    start = time.perf_counter()
    for _ in range(repeats):
        for plan in plans:
            estimate(plan)
    out[PLANNER] = (time.perf_counter() - start) / (repeats * len(plans))
    return out


def summary(rows: list[dict], seconds: dict[str, float] | None = None) -> list[dict]:
    """Per tool: rows covered, median and p90 |error| over them, and the planner's median |error| on the same rows."""
    out = []
    for name in TOOLS:
        covered = [r for r in rows if r["tools"][name]["gib"] is not None]
        errors = [abs(r["tools"][name]["error_pct"]) for r in covered]
        planner_same = [abs(r["tools"][PLANNER]["error_pct"]) for r in covered]
        out.append(
            {
                "tool": name,
                "rows": len(covered),
                "row_ids": [r["row"] for r in covered],
                "median_abs_error_pct": statistics.median(errors) if errors else None,
                "p90_abs_error_pct": accuracy.p90(errors) if errors else None,
                "planner_median_same_rows": statistics.median(planner_same) if planner_same else None,
                "seconds_per_estimate": (seconds or {}).get(name),
            }
        )
    return out


def write_timings(seconds: dict[str, float]) -> None:
    """bench/data/peer-timings.csv: each tool's mean time per estimate, when and on what machine."""
    machine = f"{os.cpu_count()} CPUs ({doc_tables._cpu()}), load average {os.getloadavg()[0]:.1f}"
    with TIMINGS.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["tool", "microseconds_per_estimate", "measured", "machine"])
        for name in TOOLS:
            writer.writerow([name, f"{seconds[name] * 1e6:.2f}", datetime.date.today().isoformat(), machine])


def read_timings() -> dict[str, float]:
    with TIMINGS.open() as f:
        return {row["tool"]: float(row["microseconds_per_estimate"]) / 1e6 for row in csv.DictReader(f)}


def _cell(tool: dict) -> str:
    return "n/a" if tool["gib"] is None else f"{tool['gib']:.2f} ({tool['error_pct']:+.0f} %)"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} %"


def _micro(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs" if seconds < 1e-5 else f"{seconds * 1e6:.0f} µs"


def print_rows(rows: list[dict]) -> None:
    print("| row | model | task | statistic | measured GiB | " + " | ".join(TOOLS) + " |")
    print("|---|---|---|---|---|" + "---|" * len(TOOLS))
    for r in rows:
        print(
            f"| {r['row']} | {r['model']} | {r['task']} | {r['stat']} | {r['measured_gib']:.2f} | "
            + " | ".join(_cell(r["tools"][t]) for t in TOOLS)
            + " |"
        )
    print("\nCells: predicted GiB (signed error %); n/a = the tool cannot describe the row.\n")


def main() -> None:
    """The table docs/accuracy.md shows: per tool, the rows it covers, its errors, the planner's on the same rows,
    and the time per estimate of bench/data/peer-timings.csv."""
    rows = run()
    print(
        "| tool | rows covered | median \\|error\\| | p90 \\|error\\| | planner median on the same rows "
        "| time per estimate |"
    )
    print("|---|---|---|---|---|---|")
    for s in summary(rows, read_timings()):
        print(
            f"| {LABELS.get(s['tool'], s['tool'])} | {s['rows']} / {len(rows)} | {_fmt(s['median_abs_error_pct'])} | "
            f"{_fmt(s['p90_abs_error_pct'])} | {_fmt(s['planner_median_same_rows'])} | "
            f"{_micro(s['seconds_per_estimate'])} |"
        )


if __name__ == "__main__":
    if "--rows" in sys.argv:
        print_rows(run())
    if "--time" in sys.argv:
        write_timings(timings())
    doc_tables.run(main)
