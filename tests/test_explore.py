"""Exploring around a plan (planner/search/explore.py): settings that change nothing, and what techniques save."""

from dataclasses import replace

import pytest

from planner.accuracy import time_accuracy
from planner.catalog import load_catalog
from planner.memory import estimate
from planner.plan.codec import plan_from_dict
from planner.plan.config import Preference
from planner.search.explore import _engine_variants, _objective_variants, idle_settings, make_it_fit, room, savings

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


def _post_trained(gpu: str, preset: str, **workload) -> object:
    wl = {"task": "finetune", "sequence_length": 1024, "micro_batch_size": 1, **workload}
    return plan_from_dict({"model": {"preset": preset}, "workload": wl, "hardware": {"gpu": gpu, "count": 1}})


def _grpo(mb: int, **rl) -> object:
    rl = {"completion_length": 512, **rl}
    return _post_trained(
        "h100-sxm-80gb", "qwen2.5-1.5b", objective="grpo", micro_batch_size=mb, global_batch_size=16, rl=rl
    )


def _items(plan, phase: str) -> dict[str, int]:
    phases = estimate(plan, CATALOG).stages[0].phases
    return {i.name: i.bytes for i in next(p for p in phases if p.name == phase).items}


NEW_FIXES = (
    "rollout gpu_memory_utilization",
    "vLLM sleep level",
    "offload the policy's",
    "offload the value",
    "offload the reference",
    "precomputed reference",
    "int8 teacher",
    "nf4 teacher",
)


def test_a_colocated_engine_is_offered_a_lower_fraction_and_sleep_level_2():
    """Qwen2.5 1.5B GRPO on one H100, the engine at 0.5 awake through the policy's step (sleep 0): the step binds.
    Each 0.05 of the fraction is 0.05 of the usable 79.18 GiB: 0.45 leaves the plan over, 0.40 (0.10 of it, one wave
    still) fits and is the one offered; sleep level 2 frees the engine's weights and KV cache during the step.
    Offloading the policy during the rollout cannot help: the rollout is not the peak."""
    plan = _grpo(4, gpu_memory_utilization=0.5)
    assert not estimate(plan, CATALOG).fits
    fixes = {f.change.split(" (")[0]: f for f in make_it_fit(plan, CATALOG)}
    lower = fixes["rollout gpu_memory_utilization 0.40"]
    assert lower.change.endswith("the rollout runs in 1 wave)")
    assert abs(lower.saved_bytes - CATALOG["h100-sxm-80gb"].usable_bytes // 10) <= 1
    assert [c for c in fixes if c.startswith("rollout")] == ["rollout gpu_memory_utilization 0.40"]
    sleep = fixes["vLLM sleep level 2"]
    assert sleep.plan.workload.rl.sleep_level == 2 and "engine_weights" not in _items(sleep.plan, "loss backward")
    assert not any(c.startswith("offload the policy's") for c in fixes)


def test_offloading_the_policy_during_the_rollout_saves_its_resident_states():
    """The engine at 0.8 with sleep level 2: the rollout binds (its pool beside the policy's weights and AdamW
    states); offloaded (verl param_offload, optimizer_offload), the rollout phase drops the policy's resident
    states: 1,543,656,960 parameters × (4 B fp32 weights + 8 B AdamW moments) + the trainer's two 32 MiB cuBLAS
    workspaces = 18,590,992,384 B, and the step (sleep level 2) stays below the rollout that is left."""
    plan = _grpo(2, gpu_memory_utilization=0.8, sleep_level=2)
    assert not estimate(plan, CATALOG).fits
    fixes = {f.change: f for f in make_it_fit(plan, CATALOG)}
    off = fixes["offload the policy's parameters and optimizer states to CPU during the rollout"]
    resident = ("weights", "master_weights", "optimizer_states", "ddp_buckets", "cublas_workspace")
    assert (
        off.saved_bytes == 1_543_656_960 * (4 + 8) + 2 * 32 * 2**20 == sum(_items(plan, "rollout")[k] for k in resident)
    )
    assert not any(k in _items(off.plan, "rollout") for k in resident)
    assert not any(c.startswith("vLLM sleep level") for c in fixes)  # already 2


def _ppo(mb: int) -> object:
    rl = {"completion_length": 512, "num_generations": 1, "beta": 0.05, "sleep_level": 2}
    return _post_trained(
        "h100-sxm-80gb", "qwen2.5-1.5b", objective="ppo", micro_batch_size=mb, global_batch_size=2 * mb, rl=rl
    )


def test_ppo_is_offered_the_value_model_and_the_frozen_models_offloaded():
    """Qwen2.5 1.5B PPO at micro-batch 5: the policy's step binds beside the value model's weights and AdamW
    states and the reference's and reward model's weights. Offloading either set makes it fit; at micro-batch 6
    only the value model's (the larger) does: with the frozen models offloaded the allocator would have to release
    its cache."""
    fixes = {f.change: f for f in make_it_fit(_ppo(5), CATALOG)}
    critic = fixes["offload the value model's parameters and optimizer states to CPU outside its passes"]
    frozen = fixes["offload the reference and reward model weights to CPU (one layer on the GPU at a time)"]
    assert critic.plan.workload.ppo.critic_offload and frozen.plan.workload.ppo.frozen_offload
    assert "critic_optimizer_states" not in _items(critic.plan, "loss backward")
    assert not {"reference_weights", "reward_weights"} & set(_items(frozen.plan, "loss backward"))
    assert not estimate(_ppo(6), CATALOG).fits
    changes = [f.change for f in make_it_fit(_ppo(6), CATALOG)]
    assert critic.change in changes and frozen.change not in changes


def test_a_separate_reference_is_offered_precomputed_log_probs_as_a_different_run():
    """Llama 3.1 8B LoRA DPO with a separate reference at micro-batch 2 on one H100: the reference's 8.03B bf16
    weights (16,060,522,496 B) leave the GPU when TRL precomputes its log-probs before training."""
    plan = _post_trained(
        "h100-sxm-80gb",
        "llama-3.1-8b",
        task="lora",
        objective="preference",
        sequence_length=2048,
        micro_batch_size=2,
        preference={"reference": "separate"},
    )
    assert not estimate(plan, CATALOG).fits
    fix = next(f for f in make_it_fit(plan, CATALOG) if f.change.startswith("precomputed reference"))
    assert "a different run" in fix.text and fix.plan.workload.preference.reference == "precomputed"
    assert fix.saved_bytes >= 16_060_522_496 == _items(plan, "forward")["reference_weights"]
    adapters = replace(plan, workload=replace(plan.workload, preference=Preference()))
    assert not any(f.change.startswith("precomputed") for f in make_it_fit(adapters, CATALOG))


def test_a_distillation_teacher_is_offered_int8_and_nf4():
    """Llama 3.2 1B distilled from Llama 3.1 8B on an A100 40GB: the bf16 teacher (16,060,522,496 B) is what
    binds; int8 and nf4 teachers fit, nf4 the smaller. A teacher already nf4 is offered neither."""
    plan = _post_trained(
        "a100-40gb",
        "llama-3.2-1b",
        objective="distillation",
        sequence_length=2048,
        distillation={"teacher": "llama-3.1-8b"},
    )
    assert not estimate(plan, CATALOG).fits
    fixes = {f.change: f for f in make_it_fit(plan, CATALOG)}
    int8, nf4 = fixes["int8 teacher weights (from bf16)"], fixes["nf4 teacher weights (from bf16)"]
    teacher = [_items(p, "forward")["teacher_weights"] for p in (plan, int8.plan, nf4.plan)]
    assert teacher[0] == 8_030_261_248 * 2 and teacher[0] > teacher[1] > teacher[2]
    assert nf4.saved_bytes > int8.saved_bytes > 0
    quantized = replace(
        plan, workload=replace(plan.workload, distillation=replace(plan.workload.distillation, teacher_weights="nf4"))
    )
    assert not any("teacher" in f.change for f in make_it_fit(quantized, CATALOG))


def test_no_post_training_fix_is_offered_where_it_does_not_apply():
    """A next-token plan is offered none of them (and none that does not fit); a GRPO plan whose engine is a
    server (its own GPUs) has no colocated engine to change, and GRPO no objective change."""
    plan = plan_from_dict(
        {"model": {"preset": "llama-3.1-70b"}, "workload": {"task": "qlora", "sequence_length": 8192}}
    )
    assert _engine_variants(plan, CATALOG["h100-sxm-80gb"]) == [] == _objective_variants(plan)
    assert not any(f.change.startswith(NEW_FIXES) for f in make_it_fit(plan, CATALOG))
    server = _grpo(16, engine="server")
    assert _engine_variants(server, CATALOG["h100-sxm-80gb"]) == [] == _objective_variants(server)
    assert [label for label, _ in _engine_variants(_grpo(16), CATALOG["h100-sxm-80gb"])][-2:] == [
        "vLLM sleep level 2 (from 0: the engine frees its weights and KV cache while the policy trains)",
        "offload the policy's parameters and optimizer states to CPU during the rollout",
    ]
