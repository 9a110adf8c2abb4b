"""The planner's caches never change a result: a plan computed after many others that share parts of it (warm
caches, memos keyed by what each part reads) gives what it gives with every cache emptied. Each base plan is varied
one setting at a time, so a key that missed a setting the cached computation reads would hand one variant another's
result."""

import functools
import sys
from functools import partial

import pytest

from planner.catalog import load_catalog
from planner.errors import PlanError
from planner.memory import Estimate, estimate
from planner.perf import plan_time, throughput
from planner.plan.codec import plan_from_dict
from planner.search.memo import Memo

BASES = {
    "dense": {"model": {"preset": "llama-3.2-1b"}},
    "moe": {"model": {"preset": "mixtral-8x7b"}},
    "latent-moe": {"model": {"preset": "deepseek-v2-lite"}},
    "hybrid": {"model": {"preset": "nemotron-h-8b"}},
    "hybrid-moe": {"model": {"preset": "qwen3-next-80b-a3b"}},
    "window": {"model": {"preset": "gemma-2-2b"}},
    "lora": {"model": {"preset": "llama-3.2-1b"}, "workload": {"task": "lora"}},
    "qlora": {"model": {"preset": "mixtral-8x7b"}, "workload": {"task": "qlora"}},
}
COMMON = {
    "workload": {"sequence_length": 2048, "micro_batch_size": 2, "global_batch_size": 64},
    "hardware": {"count": 8},
}
VARIATIONS = [
    {},
    {"hardware": {"count": 4}},
    {"hardware": {"count": 16}},
    {"parallelism": {"zero_stage": 1}},
    {"parallelism": {"zero_stage": 2}},
    {"parallelism": {"zero_stage": 3}},
    {"parallelism": {"tensor": 2}},
    {"parallelism": {"tensor": 2, "sequence_parallel": True}},
    {"parallelism": {"pipeline": 2}},
    {"parallelism": {"pipeline": 4, "pipeline_schedule": "gpipe"}},
    {"parallelism": {"pipeline": 2, "pipeline_schedule": "interleaved_1f1b", "virtual_stages": 2}},
    {"parallelism": {"pipeline": 2, "pipeline_schedule": "zero_bubble"}},
    {"parallelism": {"context": 2}},
    {"parallelism": {"expert": 2}},
    {"parallelism": {"zero_stage": 3, "flat_params": True}},
    {"parallelism": {"zero_stage": 3, "reduce_bucket_elements": 10**7, "sub_group_elements": 10**8}},
    {"parallelism": {"zero_stage": 1, "reduce_bucket_elements": 10**9}},
    {"techniques": {"activation_checkpointing": "selective"}},
    {"techniques": {"activation_checkpointing": "full"}},
    {"techniques": {"activation_checkpointing": "selective_op"}},
    {"techniques": {"activation_checkpointing": "every_k"}},
    {"techniques": {"activation_checkpointing": "every_k", "checkpoint_every": 3}},
    {"techniques": {"attention": "eager"}},
    {"techniques": {"offload": "optimizer"}},
    {"techniques": {"offload": "optimizer_and_params"}, "parallelism": {"zero_stage": 3}},
    {"techniques": {"activation_offload": True}},
    {"techniques": {"loss": "chunked"}},
    {"techniques": {"loss": "chunked", "loss_chunks": 4}},
    {"techniques": {"loss": "fused"}},
    {"techniques": {"loss": "fused"}, "parallelism": {"zero_stage": 1}},
    {"techniques": {"compile": True}},
    {"techniques": {"compile": True}, "parallelism": {"zero_stage": 1}},
    {"techniques": {"compile": True, "compile_scope": "loss"}},
    {"techniques": {"moe_capacity_factor": 1.25}},
    {"techniques": {"expandable_segments": True}},
    {"techniques": {"optimizer_in_backward": True}, "workload": {"global_batch_size": 16}},
    {"precision": {"compute": "fp16"}},
    {"precision": {"compute": "fp32"}},
    {"precision": {"master_weights": "none"}},
    {"precision": {"gradients": "bf16"}},
    {"precision": {"optimizer_state": "bf16"}},
    {"precision": {"optimizer": "adamw_8bit"}},
    {"precision": {"optimizer": "paged_adamw"}},
    {"precision": {"optimizer": "muon"}},
    {"precision": {"optimizer": "adafactor"}},
    {"precision": {"optimizer_impl": "fused"}},
    {"precision": {"compute": "fp8", "fp8_recipe": "rowwise"}},
    {"precision": {"compute": "fp8", "fp8_all_gather": True}, "parallelism": {"zero_stage": 3}},
    {"workload": {"micro_batch_size": 1}},
    {"workload": {"micro_batch_size": 4}},
    {"workload": {"sequence_length": 4096}},
    {"workload": {"global_batch_size": 16}},
    {"workload": {"global_batch_size": 128}},
    {"parallelism": {"pipeline": 2}, "workload": {"global_batch_size": 8}},
    {"workload": {"lora": {"rank": 64, "targets": ["q", "k", "v", "o", "gate", "up", "down"]}}},
    {"workload": {"lora": {"dropout": 0.1, "variant": "dora"}}},
    {"framework": "deepspeed"},
]
SERVING = [
    {"workload": {"task": "inference"}},
    {"workload": {"task": "inference", "inference": {"batch_size": 8}}, "parallelism": {"tensor": 2}},
    {"workload": {"task": "inference", "inference": {"gpu_memory_utilization": 0.9}}, "framework": "vllm"},
    {"workload": {"task": "inference"}, "parallelism": {"pipeline": 2}, "precision": {"kv_cache": "fp8"}},
]


def _merged(*parts: dict) -> dict:
    out: dict = {}
    for part in parts:
        for key, value in part.items():
            out[key] = _merged(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


def _plans() -> list:
    plans = []
    for base in BASES.values():
        for variation in VARIATIONS + (SERVING if "task" not in base.get("workload", {}) else []):
            try:
                plans.append(plan_from_dict(_merged(COMMON, base, variation)))
            except PlanError:
                continue  # a setting this base does not allow
    return plans


def _empty_caches() -> None:
    """Every computation cache of the planner (bounded ones; the unbounded @cache tables hold its data files)."""
    for module in [m for name, m in sys.modules.items() if name.startswith("planner")]:
        for value in vars(module).values():
            if isinstance(value, functools._lru_cache_wrapper) and value.cache_parameters()["maxsize"] is not None:
                value.cache_clear()
            elif isinstance(value, Memo):
                value.clear()


def _items(est) -> list:
    """The estimate's items and every stage's, with the terms their bytes and formulas come from."""
    items = list(est.items) + [i for stage in est.stages for ph in stage.phases for i in ph.items]
    return [(i, i.term) for i in items]


def _results(plan, catalog, between=lambda: None) -> tuple:
    """The plan's estimates (searches' and full), step or batch time and throughput, calling `between` before
    each."""
    gpu, out = catalog[plan.hardware.gpu], []
    for compute in (
        partial(estimate, plan, catalog, detail=False),
        partial(estimate, plan, catalog),
        partial(plan_time, plan, gpu),
        partial(throughput, plan, gpu) if plan.workload.task == "inference" else lambda: None,
    ):
        between()
        result = compute()
        out += [result, _items(result)] if isinstance(result, Estimate) else [result]
    return tuple(out)


@pytest.fixture(scope="module")
def plans():
    return _plans()


def test_the_variations_cover_the_kinds_of_plan(plans):
    assert len(plans) >= 250
    assert {p.workload.task for p in plans} == {"pretrain", "lora", "qlora", "inference"}
    assert {p.parallelism.zero_stage for p in plans} == {0, 1, 2, 3}
    assert {p.parallelism.pipeline for p in plans} >= {1, 2, 4}


def test_a_plan_gives_the_same_with_warm_caches_as_with_empty_ones(plans):
    catalog = load_catalog()
    _empty_caches()
    warm = [_results(p, catalog) for p in plans]  # each after the others: caches shared across the variations
    for plan, expected in zip(plans, warm, strict=True):
        assert _results(plan, catalog, _empty_caches) == expected, plan
