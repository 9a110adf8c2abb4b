"""Exploring around a plan (planner/explore.py): settings that change nothing, and what techniques save."""

import pytest

from planner.accuracy import time_accuracy
from planner.catalog import load_catalog
from planner.codec import plan_from_dict
from planner.explore import idle_settings, make_it_fit, room, savings
from planner.memory import estimate

CATALOG = load_catalog()
EIGHT_B = {"model": {"preset": "llama-3.1-8b"}, "parallelism": {"data": 8, "zero_stage": 3},
           "workload": {"sequence_length": 8192, "micro_batch_size": 2, "global_batch_size": 16}}


def test_selective_checkpointing_under_flash_attention_says_it_changes_nothing():
    """Issue 17: 8B, FSDP 8, seq 8192, micro-batch 2 needs the same memory with selective as with none."""
    plan = plan_from_dict({**EIGHT_B, "techniques": {"activation_checkpointing": "selective"}})
    device = estimate(plan, CATALOG).device_bytes
    assert idle_settings(plan, CATALOG) == [
        f"techniques.activation_checkpointing: selective changes no memory in this plan (the same "
        f"{device / 2**30:.2f} GiB as none): Megatron's selective recomputation drops the attention scores, which "
        "flash attention never keeps"]


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
    plan = plan_from_dict({"model": {"preset": "llama-3.1-70b"}, "workload": {"task": "qlora", "sequence_length": 8192}})
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
    plan = plan_from_dict({"model": {"preset": "llama-3.2-3b"}, "precision": {"optimizer": "adamw_8bit"},
                           "workload": {"task": "finetune", "sequence_length": 4096, "micro_batch_size": 2,
                                        "global_batch_size": 16}})
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
    plan = plan_from_dict(EIGHT_B | {"workload": {"sequence_length": 1024, "micro_batch_size": 1,
                                                  "global_batch_size": 16}})
    said = room(plan, CATALOG)
    assert said.startswith("The free memory buys micro-batch up to ") and "sequences up to " in said
