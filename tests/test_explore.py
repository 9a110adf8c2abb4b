"""Exploring around a plan (planner/search/explore.py): settings that change nothing, and what techniques save."""

import pytest

from planner.accuracy import time_accuracy
from planner.catalog import load_catalog
from planner.memory import estimate
from planner.plan.codec import plan_from_dict
from planner.search.explore import idle_settings, make_it_fit, room, savings

CATALOG = load_catalog()
EIGHT_B = {
    "model": {"preset": "llama-3.1-8b"},
    "parallelism": {"data": 8, "zero_stage": 3},
    "workload": {"sequence_length": 8192, "micro_batch_size": 2, "global_batch_size": 16},
}


def test_selective_checkpointing_under_flash_attention_says_it_changes_nothing():
    """Issue 17: 8B, FSDP 8, seq 8192, micro-batch 2 needs the same memory with selective as with none."""
    plan = plan_from_dict({**EIGHT_B, "techniques": {"activation_checkpointing": "selective"}})
    device = estimate(plan, CATALOG).device_bytes
    assert idle_settings(plan, CATALOG) == [
        f"techniques.activation_checkpointing: selective changes no memory in this plan (the same "
        f"{device / 2**30:.2f} GiB as none): Megatron's selective recomputation drops the attention scores, which "
        "flash attention never keeps"
    ]


def test_a_setting_that_saves_memory_is_not_called_idle():
    for ckpt in ("full", "selective_op"):
        plan = plan_from_dict({**EIGHT_B, "techniques": {"activation_checkpointing": ckpt}})
        assert idle_settings(plan, CATALOG) == []
    eager = plan_from_dict({**EIGHT_B, "techniques": {"attention": "eager", "activation_checkpointing": "selective"}})
    assert not any("activation_checkpointing" in line for line in idle_settings(eager, CATALOG))


def test_savings_rank_the_techniques_the_plan_does_not_use_yet():
    plan = plan_from_dict(EIGHT_B)
    found = savings(plan, CATALOG)
    assert found[0].saved_bytes == max(s.saved_bytes for s in found) > 0
    assert {"full activation checkpointing", "offload the optimizer to CPU"} <= {s.technique for s in found}


def test_a_plan_that_does_not_fit_is_shown_the_changes_that_make_it_fit():
    """Issue 17: Llama 3.1 70B QLoRA at 8k on one H100 fits with full checkpointing (its recomputation costs a
    forward: the step is slower), and every fix listed fits."""
    plan = plan_from_dict(
        {"model": {"preset": "llama-3.1-70b"}, "workload": {"task": "qlora", "sequence_length": 8192}}
    )
    assert not estimate(plan, CATALOG).fits
    fixes = make_it_fit(plan, CATALOG)
    assert fixes[0].change == "full activation checkpointing" and fixes[0].time_factor > 1.2
    assert all(estimate(f.plan, CATALOG).fits and f.saved_bytes > 0 for f in fixes)
    assert [f.time_factor for f in fixes] == sorted(f.time_factor for f in fixes)  # one GPU each: time is cost
    assert all(f.gpu_hours_factor == f.time_factor for f in fixes)


def test_more_gpus_that_finish_sooner_for_as_many_gpu_hours_rank_after_a_free_change():
    """Issue 30: make-it-fit ranked '8 GPUs, 0.13x the time per token' above a free 'micro-batch 1, 1.01x': it
    read time per token alone. Eight GPUs for an eighth of the time are as many GPU-hours; within the time model's
    error (its median error on a ratio of two predictions) the change needing no more GPUs comes first."""
    plan = plan_from_dict(
        {
            "model": {"preset": "llama-3.2-3b"},
            "precision": {"optimizer": "adamw_8bit"},
            "workload": {"task": "finetune", "sequence_length": 4096, "micro_batch_size": 2, "global_batch_size": 16},
        }
    )
    assert not estimate(plan, CATALOG).fits
    fixes = {f.change: f for f in make_it_fit(plan, CATALOG)}
    eight, mb1 = fixes["8 GPUs (data parallel 8, ZeRO-3)"], fixes["micro-batch 1 (same global batch)"]
    assert eight.time_factor < 0.13 and eight.gpu_hours_factor == pytest.approx(8 * eight.time_factor)
    assert mb1.gpu_hours_factor == mb1.time_factor < 1 + time_accuracy().pair_median_pct / 100
    assert list(fixes)[:2] == ["micro-batch 1 (same global batch)", "2 GPUs (data parallel 2, ZeRO-3)"]
    assert list(fixes)[-1] == "offload the optimizer to CPU"  # over twice the GPU-hours: last


def test_more_gpus_make_a_full_fine_tune_fit():
    plan = plan_from_dict({"model": {"preset": "llama-3.1-8b"}, "workload": {"global_batch_size": 8}})
    changes = {f.change: f for f in make_it_fit(plan, CATALOG)}
    assert "2 GPUs (data parallel 2, ZeRO-3)" in changes or "4 GPUs (data parallel 4, ZeRO-3)" in changes
    assert all(f.plan.hardware.count == f.plan.parallelism.data for f in changes.values())


def test_room_says_what_free_memory_buys():
    plan = plan_from_dict(
        EIGHT_B | {"workload": {"sequence_length": 1024, "micro_batch_size": 1, "global_batch_size": 16}}
    )
    said = room(plan, CATALOG)
    assert said.startswith("The free memory buys micro-batch up to ") and "sequences up to " in said


def _served(preset: str, batch: int, prompt: int, output: int, **extra) -> object:
    return plan_from_dict(
        {
            "framework": "vllm",
            "model": {"preset": preset},
            "workload": {
                "task": "inference",
                "inference": {
                    "batch_size": batch,
                    "prompt_tokens": prompt,
                    "output_tokens": output,
                    "gpu_memory_utilization": 0.92,
                    **extra,
                },
            },
            "hardware": {"gpu": "h100-sxm-80gb", "count": 1},
        }
    )


def test_serving_concurrency_is_vllms_blocks_over_a_requests_blocks():
    """vLLM's "Maximum concurrency for 8,192 tokens per request": the pool's whole 16-token blocks over the 512 a
    request takes. Llama 3.1 8B: K and V × 32 layers × 8 KV heads × 128 × 2 B = 131,072 B a token, 2 MiB a block."""
    serving = estimate(_served("llama-3.1-8b", 1, 7936, 256), CATALOG).serving
    assert serving.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131_072
    blocks = serving.kv_budget_bytes // (16 * 131_072)
    assert serving.max_concurrency == blocks / 512 and serving.max_concurrent_sequences == blocks // 512


def test_llama_3_1_serving_limit_is_its_context_window():
    """Issue 30: "up to 430,528 tokens each" outran Llama 3.1's 131,072-token window."""
    est = estimate(_served("llama-3.1-8b", 1, 7936, 256), CATALOG)
    assert est.serving.cache_context_tokens > 131_072 == est.serving.max_context_tokens
    assert est.reason.endswith(
        f"(batch 1: up to 131,072 tokens each, the model's context window; the cache holds "
        f"{est.serving.cache_context_tokens:,})"
    )


def test_qwen_32b_at_32k_on_one_h100_gets_tensor_parallel_with_its_concurrency():
    """Issue 30: three options that all read "saves 2.40 GiB, needs 73.35 GiB", none tensor parallel."""
    plan = _served("qwen2.5-32b", 2, 31744, 1024)
    fixes = make_it_fit(plan, CATALOG)
    tp2 = next(f for f in fixes if f.change == "tensor parallel 2 (2 GPUs)")
    serving = estimate(tp2.plan, CATALOG).serving
    # 64 layers × (K + V) × 4 of the 8 KV heads × 128 × 2 B = 131,072 B a token on each GPU; 2,048 blocks a request
    assert serving.kv_bytes_per_token == 64 * 2 * 4 * 128 * 2
    assert tp2.concurrency == (serving.kv_budget_bytes // (16 * 131_072)) / 2048 > 2
    assert f"{tp2.concurrency:.2f}x concurrency at 32,768 tokens per request" in tp2.text
    assert "(2 GPUs × " in tp2.text and tp2.plan.parallelism.tensor == 2
    assert len({f.text for f in fixes}) == len(fixes) and len({f.concurrency for f in fixes}) == len(fixes)
    assert {"fp8 KV cache", "int8 weights"} <= {f.change for f in fixes}
    assert any(f.change.startswith("max_model_len ") for f in fixes)


def test_a_plan_just_short_of_room_is_offered_the_smallest_memory_fraction_that_fits():
    plan = _served("llama-3.1-8b", 56, 7936, 256)  # 56 requests of 8,192 tokens: 0.92's cache holds 55.5
    assert not estimate(plan, CATALOG).fits
    raised = [f for f in make_it_fit(plan, CATALOG) if f.change.startswith("gpu_memory_utilization")]
    assert len(raised) == 1 and raised[0].change == "gpu_memory_utilization 0.93 (from 0.92)"
    assert raised[0].concurrency >= 56 and "x concurrency at 8,192 tokens per request" in raised[0].text
