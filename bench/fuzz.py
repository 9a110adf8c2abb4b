"""Fuzz the planner's inputs: generated plans, malformed YAML, tampered share links, structurally mutated plans
and config.json files (one node replaced by a value of another shape: containers, nesting, huge and special
numbers, long text), and hostile shapes of text (long runs of one character, doubling expansions, deep nesting,
every integer notation) sent to every reader of a stranger's text, each under a time limit and, for the
structural and hostile ones, a memory limit (the peak of Python's heap while the input is handled, by
tracemalloc). The hostile shapes are measured at growing sizes: a table gives each shape's largest CPU time and
heap growth per input, and how its time grows with its size (a reader quadratic in its input is a bug).

Plans are drawn across the whole plan space (every task, precision, optimizer, technique, parallelism and
model kind, in and out of range). A valid plan must estimate without raising, with integer non-negative
items that add up and allocated ≤ reserved ≤ device, and a step time of finite, non-negative items that add
up; an invalid one may raise only the planner's own
`PlanError`. Malformed YAML (mutated, truncated, wrong types, alias bombs, deep nesting, duplicated keys,
oversized) may only raise `PlanError`; a tampered link never raises. Anything else is a bug and is printed.

    python bench/fuzz.py [--plans 10000] [--inputs 2000] [--seed 0] [--hostile-sizes 1000,62500,1000000]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import resource
import sys
import time
import traceback
import tracemalloc
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import _path  # noqa: F401  (the checkout first on sys.path)

from planner.catalog import load_catalog, parse_catalog
from planner.errors import PlanError
from planner.formats import plan_from_config, read_config
from planner.formats.hf_config import model_from_hf_config
from planner.formats.vllm_log import vllm_log_table
from planner.loader import load_yaml
from planner.memory import estimate
from planner.perf import StepTime, plan_time
from planner.plan.codec import plan_from_dict, plan_from_query, plan_from_yaml, plan_to_query, plan_to_yaml
from planner.plan.models import presets
from planner.search.recommend import recommend

PRESETS = sorted(presets())
GPUS = frozenset(load_catalog())
TASKS = ["pretrain", "finetune", "lora", "qlora", "inference"]
# what a link is read against, as the app does: a plan that differs from the planner's defaults everywhere a
# link could silently inherit from it
DEFAULT = {
    "name": "default",
    "model": {"preset": "llama-3.1-8b"},
    "workload": {"sequence_length": 4096, "micro_batch_size": 2, "global_batch_size": 64},
    "precision": {"optimizer": "adamw_8bit"},
    "techniques": {"activation_checkpointing": "full"},
    "parallelism": {"data": 8, "zero_stage": 3},
    "hardware": {"gpu": "a100-sxm-80gb"},
}


def _sometimes_wrong(rng: random.Random, value, wrong=(0, -1, 10**12, "x", None, 1.5, [], {})):
    """The value, or (one time in 25) something of the wrong type or out of range."""
    return rng.choice(wrong) if rng.random() < 0.04 else value


def random_plan(rng: random.Random) -> dict:
    w = lambda v: _sometimes_wrong(rng, v)  # noqa: E731
    task = rng.choice(TASKS)
    if rng.random() < 0.6:
        model = {"preset": rng.choice(PRESETS)}
    elif rng.random() < 0.5:
        model = {"params": rng.choice(["125M", "1B", "7B", "13B", "70B", "5", "1e13", "3.3b"])}
    else:
        heads = rng.choice([1, 2, 4, 8, 12, 16, 32])
        model = {
            "num_layers": w(rng.randint(1, 64)),
            "hidden_size": w(heads * rng.choice([16, 32, 64, 128])),
            "num_attention_heads": heads,
            "num_kv_heads": w(rng.choice([1, 2, heads])),
            "intermediate_size": w(rng.randint(8, 20000)),
            "vocab_size": w(rng.randint(2, 200_000)),
            "mlp": rng.choice(["swiglu", "gelu"]),
            "norm": rng.choice(["rmsnorm", "layernorm"]),
            "tie_embeddings": rng.random() < 0.5,
            "bias": rng.random() < 0.3,
        }
        if rng.random() < 0.2:
            model.update(
                num_experts=rng.choice([2, 4, 8, 16]),
                experts_per_token=rng.choice([1, 2, 4]),
                moe_intermediate_size=rng.randint(8, 4000),
                shared_experts=rng.randint(0, 2),
            )
        if rng.random() < 0.1:
            model.update(
                kv_lora_rank=rng.choice([32, 64, 512]),
                qk_rope_head_dim=rng.choice([0, 16, 64]),
                num_kv_heads=heads,
                q_lora_rank=rng.choice([None, 64, 1536]),
            )
        if rng.random() < 0.1:
            model.update(sliding_window=rng.choice([16, 4096]), global_attention_every=rng.choice([0, 2, 6]))
    workload: dict = {
        "task": task,
        "sequence_length": w(rng.choice([16, 128, 1024, 4096, 32768, 131072])),
        "micro_batch_size": w(rng.randint(1, 64)),
    }
    if rng.random() < 0.3:
        workload["global_batch_size"] = w(rng.choice([8, 64, 1024]))
    if task in ("lora", "qlora"):
        workload["lora"] = {
            "rank": w(rng.choice([1, 8, 64])),
            "targets": rng.sample(["q", "k", "v", "o", "gate", "up", "down"], rng.randint(1, 7)),
            "dropout": rng.choice([0.0, 0.05]),
            "variant": rng.choice(["lora", "lora", "dora"]),
        }
    if task == "inference":
        workload = {
            "task": task,
            "inference": {
                "batch_size": w(rng.randint(1, 256)),
                "prompt_tokens": w(rng.choice([1, 128, 4096, 100_000])),
                "output_tokens": w(rng.choice([1, 64, 2048])),
                **(
                    {
                        "gpu_memory_utilization": w(rng.choice([0.5, 0.9])),
                        "max_num_seqs": w(rng.choice([None, None, 512])),
                        "cuda_graphs": rng.random() < 0.8,
                    }
                    if rng.random() < 0.4
                    else {}
                ),
                **({"static_cache": True, "mask_buffer": rng.random() < 0.5} if rng.random() < 0.2 else {}),
            },
        }
    precision = {
        "compute": rng.choice(["bf16", "fp16", "fp32", "fp8"]),
        "master_weights": rng.choice(["fp32", "none"]),
        "optimizer": rng.choice(
            [
                "adamw",
                "adamw_8bit",
                "paged_adamw",
                "paged_adamw_8bit",
                "adafactor",
                "lion",
                "muon",
                "sgd",
                "sgd_momentum",
            ]
        ),
        "optimizer_impl": rng.choice(["foreach", "fused", "forloop"]),
    }
    if precision["optimizer"] in ("adamw_8bit", "paged_adamw_8bit") or rng.random() < 0.02:
        precision.update(
            optimizer_library=rng.choice(["bitsandbytes", "torchao"]),
            optimizer_block_size=w(rng.choice([256, 2048])),
            fp32_embedding_states=rng.random() < 0.5,
        )
    if precision["compute"] == "fp8" or rng.random() < 0.02:
        precision["fp8_recipe"] = rng.choice(["tensorwise", "rowwise", "mxfp8", "nvfp4"])
        precision["fp8_all_gather"] = rng.random() < 0.3
    if task in ("qlora", "inference") and rng.random() < 0.7:
        precision["weights"] = rng.choice(["bf16", "fp8", "int8", "int4", "nf4"])
    if task == "inference" and rng.random() < 0.5:
        precision["kv_cache"] = rng.choice(["bf16", "fp16", "fp8", "int8"])
    techniques = {
        "activation_checkpointing": rng.choice(["none", "selective", "selective_op", "full", "every_k"]),
        "checkpoint_every": w(rng.choice([1, 2, 4, 100])),
        "attention": rng.choice(["flash", "eager"]),
        "offload": rng.choice(["none", "none", "optimizer", "optimizer_and_params"]),
        "optimizer_in_backward": rng.random() < 0.1,
        "loss": rng.choice(["full", "full", "chunked", "fused"]),
        "loss_chunks": w(rng.choice([1, 8, 32])),
        "compile": rng.random() < 0.3,
        "compile_scope": rng.choice(["blocks", "loss", "blocks_and_loss"]),
        "activation_offload": rng.random() < 0.15,
        "expandable_segments": rng.random() < 0.3,
    }
    moe = bool(model.get("num_experts")) or ("preset" in model and presets()[model["preset"]].model.num_experts)
    if rng.random() < (0.3 if moe else 0.02):  # mostly where it applies; now and then where it does not
        techniques["moe_capacity_factor"] = w(rng.choice([1.0, 1.25, 2.0]))
    tensor = rng.choice([1, 1, 2, 4, 8])
    data = w(rng.choice([1, 2, 8, 64]))
    parallelism = {
        "data": data,
        "zero_stage": w(rng.randint(0, 3)),
        "tensor": tensor,
        "sequence_parallel": tensor > 1 and rng.random() < 0.5,
        "pipeline": rng.choice([1, 1, 2, 4]),
        "context": rng.choice([1, 1, 2]),
        "expert": rng.choice([1, 2, 8]) if moe or rng.random() < 0.02 else 1,
        "async_tp": tensor > 1 and rng.random() < 0.1,
        "flat_params": rng.random() < (0.3 if task in ("lora", "qlora") else 0.01),
    }
    if parallelism["async_tp"] and rng.random() < 0.9:  # mostly with what it needs
        parallelism["sequence_parallel"] = techniques["compile"] = True
    if parallelism["zero_stage"] in (1, 2, 3) and rng.random() < 0.2:
        parallelism["reduce_bucket_elements"] = w(rng.choice([16_777_216, 500_000_000]))
        parallelism["sub_group_elements"] = w(rng.choice([None, 1_000_000_000]))
    if (precision.get("fp8_all_gather") or parallelism["flat_params"]) and rng.random() < 0.9:
        parallelism["zero_stage"] = 3  # mostly with what it needs
    if parallelism["pipeline"] > 1 or rng.random() < 0.02:
        schedule = rng.choice(["1f1b", "interleaved_1f1b", "gpipe", "zero_bubble"])
        parallelism["pipeline_schedule"] = schedule
        parallelism["virtual_stages"] = rng.choice([2, 3]) if schedule == "interleaved_1f1b" else 1
        parallelism["pipeline_split"] = rng.choice(["auto", "auto", "even", "weighted"])
        if rng.random() < 0.1:  # a list of layers, often of the wrong length or sum
            chunks = parallelism["pipeline"] * parallelism["virtual_stages"]
            parallelism["pipeline_layers"] = [rng.randint(1, 8) for _ in range(chunks + rng.choice([0, 0, 1]))]
        if rng.random() < 0.3:
            parallelism["pipeline_microbatches"] = w(rng.choice([1, 4, 8]))
    if (
        "global_batch_size" in workload
        and type(data) is int
        and type(workload["micro_batch_size"]) is int
        and rng.random() < 0.8
    ):
        workload["global_batch_size"] = workload["micro_batch_size"] * data * rng.choice([1, 4])
    serving = task == "inference" or rng.random() < 0.02  # now and then a framework that does not fit the task
    framework = rng.choice(
        ["generic"] * 3
        + (
            ["vllm", "sglang", "hf_generate", "gpt_fast"]
            if serving
            else ["hf_trainer", "accelerate_fsdp", "deepspeed", "torchtune", "torchtitan", "megatron", "axolotl"]
        )
    )
    plan = {
        "framework": framework,
        "model": model,
        "workload": workload,
        "precision": precision,
        "techniques": techniques,
        "parallelism": parallelism,
        **(
            {"framework_release": rng.choice(["2025-01-15", "0.2.0", "9.9"])}
            if framework != "generic" and rng.random() < 0.1
            else {}
        ),
        "hardware": {"gpu": rng.choice(["h100-sxm-80gb", "a100-sxm-80gb", "l4-24gb", "mi300x-192gb", "tpu"])},
    }
    if rng.random() < 0.02:  # an unknown key somewhere
        rng.choice([plan, plan["workload"], plan["precision"]])["bogus"] = 1
    return plan


def check_time(time: StepTime | None) -> None:
    """The time model's invariants: finite, non-negative items that add up, exposed within the total."""
    if time is None:  # the GPU has no tensor cores for the compute dtype
        return
    seconds = [time.step_time_s, *(i.seconds for i in time.items), *(i.hidden_s for i in time.items)]
    assert all(math.isfinite(x) and x >= 0 for x in seconds), "a time that is negative or not finite"
    assert math.isclose(time.step_time_s, sum(i.seconds for i in time.items)), "time items do not add up"
    assert time.step_time_s > 0 and 0 < time.mfu < 2, "a step of no time or an MFU beyond reason"


def check_plan(d: dict, with_recommend: bool) -> str:
    """'ok', 'invalid' (PlanError), or raises AssertionError / any bug."""
    try:
        plan = plan_from_dict(d)
    except PlanError:
        return "invalid"
    try:
        est = estimate(plan)
    except PlanError:  # a GPU the catalog lacks is the one user error left at this point
        return "invalid"
    ints = [est.peak_allocated_bytes, est.peak_reserved_bytes, est.device_bytes] + [i.bytes for i in est.items]
    assert all(isinstance(n, int) and n >= 0 for n in ints), "non-integer or negative bytes"
    assert sum(i.bytes for i in est.items if i.level == "allocated") == est.peak_allocated_bytes, "items do not add up"
    assert est.peak_allocated_bytes <= est.peak_reserved_bytes <= est.device_bytes, "totals out of order"
    assert est.fits == (est.device_bytes <= est.usable_bytes and not est.host_short), (
        "verdict disagrees with the totals"
    )
    assert plan_from_yaml(plan_to_yaml(plan)) == plan, "YAML round trip changed the plan"
    assert plan_from_query(plan_to_query(plan), DEFAULT)[0] == plan, "share link round trip changed the plan"
    check_time(plan_time(plan, est.gpu))
    if with_recommend:
        rec = recommend(plan)
        assert all(c.device_bytes <= c.gpu.usable_bytes for c in rec.candidates), "a recommendation does not fit"
    return "ok"


def malformed_inputs(rng: random.Random, valid_yaml: list[str]) -> tuple[str, object]:
    """('yaml', text) or ('link', params)."""
    kind = rng.random()
    if kind < 0.55:
        text = rng.choice(valid_yaml)
        choice = rng.randrange(8)
        if choice == 0:  # truncation
            text = text[: rng.randrange(len(text))]
        elif choice == 1:  # byte noise
            chars = list(text)
            for _ in range(rng.randint(1, 8)):
                chars[rng.randrange(len(chars))] = rng.choice(":{}[]-&*!|>'\"\t\n#%@`\x00é")
            text = "".join(chars)
        elif choice == 2:  # alias bomb
            text = (
                "a: &a [x, x, x, x, x, x, x, x, x]\n"
                + "".join(
                    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
                )
                + "model: *i\n"
            )
        elif choice == 3:  # deep nesting
            depth = rng.choice([100, 1000, 5000])
            text = "model: " + "[" * depth + "]" * depth
        elif choice == 4:  # duplicated key
            text = text + "\nmodel: {preset: gpt2}\n"
        elif choice == 5:  # a document that is not a mapping
            text = rng.choice(["- 1\n- 2\n", "42\n", "null\n", "'plan'\n", "", "---\n---\n"])
        elif choice == 6:  # oversized
            text = "name: " + "x" * rng.choice([300_000, 2_000_000]) + "\n"
        else:  # a wrong type in a known place
            key = rng.choice(["sequence_length", "micro_batch_size", "tensor", "optimizer", "num_layers", "rank"])
            text = text.replace(
                f"{key}:", f"{key}: {rng.choice(['[1, 2]', '{a: 1}', 'true', '-3', '1e400', 'nan'])} #", 1
            )
        return "yaml", text
    keys = [
        "preset",
        "task",
        "sequence_length",
        "micro_batch_size",
        "tensor",
        "zero_stage",
        "gpu",
        "rank",
        "targets",
        "num_layers",
        "hidden_size",
        "params",
        "batch_size",
        "gpu_memory_utilization",
        "bogus",
        "expert",
        "kv_lora_rank",
        "moe_capacity_factor",
        "optimizer",
        "count",
    ]
    values = [
        "1",
        "0",
        "-1",
        "1e99",
        "nan",
        "inf",
        "",
        "x" * 300,
        "llama-3.1-8b",
        "qlora",
        "q,,zz",
        "[1]",
        "{a: 1}",
        "true",
        "7B",
        "h100-sxm-80gb",
        "0.95",
        "&a [*a]",
        "%00",
        "é",
    ]
    params = {}
    for _ in range(rng.randint(1, 6)):
        key = rng.choice(keys)
        params[key] = (
            [rng.choice(values) for _ in range(rng.randint(1, 2))] if rng.random() < 0.2 else rng.choice(values)
        )
    return "link", params


def check_input(kind: str, payload) -> str:
    if kind == "yaml":
        try:
            data = load_yaml(payload)
            plan = plan_from_dict(data)
            estimate(plan)
        except PlanError:
            return "rejected"
        return "accepted"
    plan, _ = plan_from_query(payload, DEFAULT, gpus=GPUS)  # must never raise
    estimate(plan)  # and what it returns must estimate
    return "accepted"


# Structural mutation (issue 14): a valid document with one node replaced by a value of another shape: a
# container where a scalar was, a scalar where a container was, nesting, huge and special numbers, long text.
HOSTILE_VALUES = (
    lambda v: [v, v],
    lambda v: {"a": v},
    lambda v: [[[[v]]]],
    lambda v: 10**40,
    lambda v: -(10**18),
    lambda v: float("nan"),
    lambda v: float("inf"),
    lambda v: "x" * 100_000,
    lambda v: True,
    lambda v: None,
    lambda v: list(range(100_000)),
    lambda v: "",
    lambda v: 2**31,
    lambda v: 0.5,
)
HF_CONFIGS = [
    json.loads(p.read_text())
    for p in sorted((Path(__file__).resolve().parent.parent / "tests" / "data" / "hf_configs").glob("*.json"))
]
SLOW_S = 2.0  # an input that takes longer than this is a bug: a hosted page must answer
MEMORY_LIMIT_BYTES = 512 * 2**20  # an input that makes the heap grow more than this is a bug (a hosted worker)


def _paths(node, prefix=()):
    """Every path to a node of a plain document (mappings and lists)."""
    yield prefix
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in children:
        yield from _paths(child, prefix + (key,))


def mutate(rng: random.Random, document):
    """A deep copy of `document` with one node (not the root) replaced by a hostile value of another shape."""
    out = json.loads(json.dumps(document))
    path = rng.choice([p for p in _paths(out) if p])
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = rng.choice(HOSTILE_VALUES)(node[path[-1]])
    return out


def check_structural(rng: random.Random, valid_plans: list[dict]) -> str:
    """A mutated plan (half the time under a framework whose rules read it) or config.json: only PlanError."""
    if rng.random() < 0.7:
        d = mutate(rng, rng.choice(valid_plans))
        if rng.random() < 0.5:
            d["framework"] = rng.choice(["torchtune", "torchtitan", "megatron", "deepspeed"])
        try:
            estimate(plan_from_dict(d))
        except PlanError:
            return "rejected"
        return "accepted"
    config = mutate(rng, rng.choice(HF_CONFIGS))
    try:
        model_from_hf_config(config)
        model_from_hf_config(json.dumps(config, allow_nan=True))
    except PlanError:
        return "rejected"
    return "accepted"


def run(plans: int, inputs: int, seed: int, recommend_every: int = 50, slow_s: float | None = SLOW_S) -> dict:
    rng = random.Random(seed)
    counts = {"ok": 0, "invalid": 0, "accepted": 0, "rejected": 0, "structural accepted": 0, "structural rejected": 0}
    bugs: list[str] = []
    valid_yaml = []
    for i in range(plans):
        d = random_plan(rng)
        try:
            outcome = check_plan(d, with_recommend=i % recommend_every == 0)
        except Exception:  # noqa: BLE001 - anything but PlanError is what the fuzzer is for
            bugs.append(f"plan {d!r}\n{traceback.format_exc(limit=3)}")
            continue
        counts[outcome] += 1
        if outcome == "ok" and len(valid_yaml) < 200:
            valid_yaml.append(plan_to_yaml(plan_from_dict(d)))
    valid_yaml = valid_yaml or [plan_to_yaml(plan_from_dict(DEFAULT))]
    for _ in range(inputs):
        kind, payload = malformed_inputs(rng, valid_yaml)
        try:
            counts[check_input(kind, payload)] += 1
        except Exception:  # noqa: BLE001
            bugs.append(f"{kind} {str(payload)[:300]!r}\n{traceback.format_exc(limit=3)}")
    valid_plans = [load_yaml(text) for text in valid_yaml]
    peak_bytes = _structural(rng, valid_plans, inputs, seed, counts, bugs, slow_s)
    return {"counts": counts, "bugs": bugs, "structural_peak_bytes": peak_bytes}


def _structural(
    rng: random.Random,
    valid_plans: list[dict],
    inputs: int,
    seed: int,
    counts: dict,
    bugs: list[str],
    slow_s: float | None,
) -> int:
    """The structural mutations, each under the memory limit and `slow_s` (None: untimed, as in the test suite,
    where a busy machine must not fail it); returns the largest heap growth of one."""
    worst = 0
    tracemalloc.start()
    try:
        for i in range(inputs):
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            start = time.perf_counter()
            try:
                outcome = check_structural(rng, valid_plans)
            except Exception:  # noqa: BLE001
                bugs.append(f"structural input {i} (seed {seed})\n{traceback.format_exc(limit=3)}")
                continue
            counts["structural " + outcome] += 1
            grown = tracemalloc.get_traced_memory()[1] - base
            worst = max(worst, grown)
            if slow_s is not None and time.perf_counter() - start > slow_s:
                bugs.append(f"structural input {i} took {time.perf_counter() - start:.1f} s (limit {slow_s:g} s)")
            if grown > MEMORY_LIMIT_BYTES:
                bugs.append(
                    f"structural input {i} grew the heap by {grown / 2**20:,.0f} MiB "
                    f"(limit {MEMORY_LIMIT_BYTES / 2**20:,.0f} MiB)"
                )
    finally:
        tracemalloc.stop()
    return worst


# --- hostile shapes (issue 27) ----------------------------------------------------------------------------------------
# Text built to a size: long runs of one character, doubling expansions, deep nesting, every integer notation in
# YAML, TOML and a command line. Each goes to every reader of a stranger's text (READERS), which must answer or
# refuse with PlanError within SLOW_S and HOSTILE_MEMORY_BYTES, its time growing about linearly with the size.
def _indented(n: int) -> str:
    """Block mappings nested by indentation alone (no bracket shows it): depth²/2 characters."""
    return "".join(f"{' ' * i}k:\n" for i in range(int(math.sqrt(2 * n))))


def _alias_bomb(n: int) -> str:
    """Each line's list holds the previous one twice: 2^lines values once expanded."""
    return "a0: &a0 [x, x]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]\n" for i in range(1, max(2, n // 24)))


# an integer of n digits in each notation (YAML 1.1 reads 0777 as octal and 1:30 in base 60, TOML 0o777)
NOTATIONS: dict[str, Callable[[int], str]] = {
    "decimal": lambda n: "1" * n,
    "hex": lambda n: "0x" + "f" * n,
    "octal 0": lambda n: "0" + "7" * n,
    "octal 0o": lambda n: "0o" + "7" * n,
    "binary": lambda n: "0b" + "1" * n,
    "underscores": lambda n: "1_" * (n // 2) + "1",
    "base 60": lambda n: "1:" * (n // 2) + "1",
}
# where an integer goes: a plan's field, a torchtitan TOML's, a command line's flag
HOLDERS: dict[str, Callable[[str], str]] = {
    "YAML": lambda number: f"model: {{preset: gpt2}}\nworkload: {{micro_batch_size: {number}}}\n",
    "TOML": lambda number: f'[model]\nflavor = "8B"\n[training]\nseq_len = {number}\n',
    "command line": lambda number: f"vllm serve m --max-num-seqs {number}\n",
}
SHAPES: dict[str, Callable[[int], str]] = {
    "run of digits": lambda n: "1" * n,
    "run of dots": lambda n: "." * n,
    "run of {": lambda n: "{" * n,
    "run of [": lambda n: "[" * n,
    "run of $": lambda n: "$" * n,
    "run of ${a:-": lambda n: "${a:-" * (n // 5),
    "run of quotes": lambda n: "'\"" * (n // 2),
    "run of backslashes": lambda n: "\\" * n,
    "run of '- '": lambda n: "- " * (n // 2),
    "run of #": lambda n: "#" * n,
    "run of []": lambda n: "[]" * (n // 2),
    "run of newlines": lambda n: "\n" * n,
    "log figures' digits": lambda n: f"Model loading took {'1' * n} GiB\nGPU KV cache size: {'1' * n} tokens\n",
    "log args: {": lambda n: "non-default args: {" * (n // 19),
    "log args: unary chain": lambda n: "non-default args: {'a': " + "-" * n + "1}",
    "log args: not literals": lambda n: (
        "non-default args: {" + ", ".join(f"'k{i}': f(x)" for i in range(n // 14)) + "}"
    ),
    "one word": lambda n: "vllm serve " + "a" * n,
    "many words": lambda n: "vllm serve m " + "a " * (n // 2),
    "many flags": lambda n: "--num-layers 2 " + "--a " * (n // 4),
    "flag values": lambda n: "--a " + "x " * (n // 2),
    "doubling A=$A$A": lambda n: "A=x\n" + "A=$A$A\n" * n.bit_length() + "--seq-length $A --num-layers 2\n",
    "aliases of a long text": lambda n: "model: &a " + "x" * (n // 2) + "\nmax_num_seqs: [" + "*a, " * (n // 8) + "]\n",
    "alias bomb": _alias_bomb,
    "flow nesting": lambda n: "a: " + "[" * (n // 2) + "]" * (n // 2),
    "flow mappings": lambda n: "a: " + "{b: " * (n // 4) + "1" + "}" * (n // 4),
    "block nesting": _indented,
    "flow values": lambda n: "[" + "1, " * (n // 3) + "1]",
    "block keys": lambda n: "".join(f"k{i}: {i}\n" for i in range(n // 10)),
    "TOML dotted key": lambda n: "a" + ".a" * (n // 2) + " = 1\n",
    "TOML inline tables": lambda n: "x = " + "{a = " * (n // 6) + "1" + "}" * (n // 6),
    "JSON nesting": lambda n: '{"a": ' + "[" * (n // 2) + "]" * (n // 2) + "}",
    "JSON integer": lambda n: '{"hidden_size": ' + "1" * n + "}",
    **{
        f"integer: {name} in {holder}": (lambda n, number=number, put=put: put(number(n)))
        for name, number in NOTATIONS.items()
        for holder, put in HOLDERS.items()
    },
}
GPU_CATALOG = load_catalog()  # what a log is compared against
READERS: dict[str, Callable[[str], object]] = {
    "plan": lambda text: estimate(plan_from_yaml(text)),
    "catalog": parse_catalog,
    "config.json": model_from_hf_config,
    "framework config": lambda text: plan_from_config(read_config(text), default_model={"preset": "gpt2"}),
    "vLLM log": lambda text: vllm_log_table(text, None, GPU_CATALOG),
}
# characters: up to a framework config's cap (256 KiB), then a catalog's and a config.json's (1 MiB)
HOSTILE_SIZES = (1_000, 16_000, 250_000, 1_000_000)
HOSTILE_MEMORY_BYTES = 256 * 2**20  # issue 27: every hostile input is handled in under 256 MiB
# a reader whose CPU time grows faster than size^SUPERLINEAR from one size to the next is a bug (linear: 1,
# quadratic: 2), once its time at the larger is above GROWTH_FLOOR_S (below it, timer noise decides the ratio)
SUPERLINEAR, GROWTH_FLOOR_S = 1.5, 0.05


def _measured(reader: Callable[[str], object], text: str) -> tuple[str, float, int]:
    """(outcome, CPU seconds, heap growth in bytes) of one reading: timed untraced, then traced for its memory."""
    start = time.process_time()
    outcome = _outcome(reader, text)
    cpu = time.process_time() - start
    tracemalloc.start()
    try:
        _outcome(reader, text)
        return outcome, cpu, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _outcome(reader: Callable[[str], object], text: str) -> str:
    try:
        reader(text)
    except PlanError:
        return "refused"
    return "accepted"


def hostile(sizes: tuple[int, ...] = HOSTILE_SIZES, slow_s: float | None = SLOW_S) -> dict:
    """Every shape at every size through every reader: {"rows": {shape: (inputs, refused, max CPU s, max heap
    bytes, fastest growth of a reader's time or None)}, "bugs": [...]}."""
    rows, bugs = {}, []
    for shape, build in SHAPES.items():
        cpu = {name: {} for name in READERS}
        refused = heap = 0
        for size in sizes:
            text = build(size)
            for name, reader in READERS.items():
                where = f"{shape} ({size:,} characters) read as a {name}"
                try:
                    outcome, cpu[name][size], grown = _measured(reader, text)
                except Exception:  # noqa: BLE001 - anything but PlanError is what the fuzzer is for
                    bugs.append(f"{where}\n{traceback.format_exc(limit=3)}")
                    continue
                refused, heap = refused + (outcome == "refused"), max(heap, grown)
                if slow_s is not None and cpu[name][size] > slow_s:
                    bugs.append(f"{where}: {cpu[name][size]:.2f} s of CPU (limit {slow_s:g} s)")
                if grown > HOSTILE_MEMORY_BYTES:
                    bugs.append(f"{where}: {grown / 2**20:,.0f} MiB (limit {HOSTILE_MEMORY_BYTES / 2**20:,.0f} MiB)")
        growth = max((g for seconds in cpu.values() for g in _growth(seconds)), default=None)
        if growth is not None and growth > SUPERLINEAR:
            bugs.append(f"{shape}: a reader's CPU time grows as size^{growth:.1f}")
        rows[shape] = (
            len(sizes) * len(READERS),
            refused,
            max((t for seconds in cpu.values() for t in seconds.values()), default=0.0),
            heap,
            growth,
        )
    return {"rows": rows, "bugs": bugs}


def _growth(seconds: dict[int, float]) -> list[float]:
    """The exponents of a reader's CPU time in size from each size to the next (where the larger is above
    GROWTH_FLOOR_S)."""
    sizes = sorted(seconds)
    return [
        math.log(seconds[large] / max(seconds[small], 1e-4)) / math.log(large / small)
        for small, large in pairwise(sizes)
        if seconds[large] >= GROWTH_FLOOR_S
    ]


def hostile_table(rows: dict) -> str:
    """The shapes' table: inputs, refused, the largest CPU time and heap growth of one input, the time's growth."""
    lines = [f"{'shape':<36}{'inputs':>7}{'refused':>8}{'max CPU s':>10}{'max MiB':>9}{'growth':>8}"]
    for shape, (inputs, refused, cpu, heap, growth) in rows.items():
        grows = f"n^{growth:.1f}" if growth is not None else "-"
        lines.append(f"{shape:<36}{inputs:>7}{refused:>8}{cpu:>10.3f}{heap / 2**20:>9.1f}{grows:>8}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=int, default=10_000)
    parser.add_argument("--inputs", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--hostile-sizes",
        default=",".join(map(str, HOSTILE_SIZES)),
        help="sizes (characters) of each hostile shape, comma-separated",
    )
    args = parser.parse_args()
    start = time.perf_counter()
    result = run(args.plans, args.inputs, args.seed)
    shapes = hostile(tuple(int(size) for size in args.hostile_sizes.split(",")))
    result["bugs"] += shapes["bugs"]
    c = result["counts"]
    print(f"{args.plans:,} generated plans: {c['ok']:,} valid and checked, {c['invalid']:,} refused with PlanError")
    print(
        f"{args.inputs:,} malformed YAML / link inputs: {c['rejected']:,} refused with PlanError, "
        f"{c['accepted']:,} accepted (links fall back field by field)"
    )
    print(
        f"{args.inputs:,} structurally mutated plans and config.json files: {c['structural rejected']:,} refused "
        f"with PlanError, {c['structural accepted']:,} accepted; each under {SLOW_S:g} s, the largest heap growth "
        f"of one {result['structural_peak_bytes'] / 2**20:,.1f} MiB (limit {MEMORY_LIMIT_BYTES / 2**20:,.0f} MiB)"
    )
    print(f"{len(SHAPES)} hostile shapes at {args.hostile_sizes} characters, each read as {', '.join(READERS)}:")
    print(hostile_table(shapes["rows"]))
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print(f"peak resident memory of the whole run: {peak_rss_mib:,.0f} MiB")
    print(f"bugs: {len(result['bugs'])}   ({time.perf_counter() - start:.0f} s, seed {args.seed})")
    for bug in result["bugs"][:20]:
        print("\n" + bug)
    sys.exit(1 if result["bugs"] else 0)


if __name__ == "__main__":
    main()
