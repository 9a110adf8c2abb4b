"""Framework recipes: the data is well-formed, settings lie under the plan's keys, conditions hold, the table
of docs/frameworks.md is the data's."""

from dataclasses import replace
from pathlib import Path

import pytest

from planner.errors import PlanError
from planner.frameworks import apply_framework, load_frameworks, provenance
from planner.memory import estimate
from planner.plan.codec import plan_from_dict, plan_from_yaml, plan_to_dict, plan_to_yaml
from planner.plan.config import INFERENCE_FRAMEWORKS, TRAINING_TASKS
from planner.views.export import frameworks_to_table

DOC = Path(__file__).resolve().parent.parent / "docs" / "frameworks.md"
MODEL = {"preset": "llama-3.1-8b"}
TRAINING = [name for name in load_frameworks() if name not in INFERENCE_FRAMEWORKS]


def test_every_framework_has_a_label_summary_and_sourced_settings():
    for name, recipe in load_frameworks().items():
        assert recipe.label and recipe.summary
        for setting in recipe.settings:
            assert len(setting.source) > 20, (name, setting.key)


@pytest.mark.parametrize("framework", TRAINING)
@pytest.mark.parametrize("task", TRAINING_TASKS)
@pytest.mark.parametrize("count", [1, 8])
def test_training_frameworks_give_valid_plans(framework, task, count):
    plan = plan_from_dict(
        {
            "framework": framework,
            "model": MODEL,
            "hardware": {"count": count},
            "workload": {"task": task, "sequence_length": 2048},
        }
    )
    assert plan.framework == framework and estimate(plan).device_bytes > 0
    # every setting the framework makes for this plan is in it: nothing the plan wrote was overridden
    assert all(kept for _, kept in provenance(plan))


def test_torchtune_by_hand():
    single = plan_from_dict({"framework": "torchtune", "model": MODEL, "workload": {"task": "finetune"}})
    assert (single.precision.master_weights, single.precision.gradients, single.precision.optimizer) == (
        "none",
        "bf16",
        "paged_adamw_8bit",
    )
    assert single.techniques.optimizer_in_backward and single.parallelism.zero_stage == 0
    assert (single.techniques.activation_checkpointing, single.techniques.loss, single.techniques.loss_chunks) == (
        "full",
        "chunked",
        8,
    )
    # eight GPUs: FSDP2 and fused AdamW, no optimizer in backward (distributed recipes)
    multi = plan_from_dict(
        {"framework": "torchtune", "model": MODEL, "hardware": {"count": 8}, "workload": {"task": "finetune"}}
    )
    assert (multi.parallelism.zero_stage, multi.precision.optimizer, multi.techniques.optimizer_in_backward) == (
        3,
        "adamw",
        False,
    )
    qlora = plan_from_dict({"framework": "torchtune", "model": MODEL, "workload": {"task": "qlora"}})
    assert qlora.precision.weights == "nf4" and qlora.precision.double_quant


def test_a_key_the_plan_writes_wins_and_is_reported():
    plan = plan_from_dict(
        {
            "framework": "torchtitan",
            "model": MODEL,
            "hardware": {"count": 8},
            "techniques": {"activation_checkpointing": "full"},
        }
    )
    assert plan.techniques.activation_checkpointing == "full" and plan.precision.optimizer_impl == "fused"
    changed = [s.key for s, kept in provenance(plan) if not kept]
    assert changed == ["techniques.activation_checkpointing"]


def test_conditions_follow_the_plan():
    # Megatron and torchtitan turn sequence parallelism on only with tensor parallelism
    assert not plan_from_dict({"framework": "megatron", "model": MODEL}).parallelism.sequence_parallel
    assert plan_from_dict(
        {"framework": "megatron", "model": MODEL, "parallelism": {"tensor": 2}}
    ).parallelism.sequence_parallel
    # DeepSpeed keeps bf16 gradients only under ZeRO
    assert plan_from_dict({"framework": "deepspeed", "model": MODEL}).precision.gradients == "fp32"
    assert (
        plan_from_dict(
            {"framework": "deepspeed", "model": MODEL, "parallelism": {"zero_stage": 2, "data": 8}}
        ).precision.gradients
        == "bf16"
    )


def test_apply_framework_leaves_its_input_alone():
    data = {"framework": "torchtune", "model": MODEL}
    applied = apply_framework(data)
    assert data == {"framework": "torchtune", "model": MODEL}
    assert applied["techniques"]["loss"] == "chunked"


def test_serving_frameworks():
    plan = plan_from_dict({"framework": "vllm", "model": MODEL, "workload": {"task": "inference"}})
    assert plan.workload.inference.gpu_memory_utilization == 0.92
    assert plan.workload.inference.prefill_chunk_tokens is None  # vLLM's own default, by GPU and release
    plain = plan_from_dict({"framework": "hf_generate", "model": MODEL, "workload": {"task": "inference"}})
    assert plain.workload.inference.gpu_memory_utilization is None


@pytest.mark.parametrize(
    "data, message",
    [
        ({"framework": "vllm"}, "framework: 'vllm' serves models: workload.task must be inference, not pretrain"),
        (
            {"framework": "torchtune", "workload": {"task": "inference"}},
            "framework: 'torchtune' is a training framework; for inference use vllm, sglang, hf_generate, gpt_fast or "
            "generic",
        ),
        (
            {"framework": "nemo"},
            "framework: 'nemo' is not one of: generic, hf_trainer, accelerate_fsdp, deepspeed, "
            "torchtune, torchtitan, megatron, axolotl, vllm, sglang, hf_generate, gpt_fast",
        ),
        (
            {"framework": "torchtune", "workload": {"task": "finetune", "global_batch_size": 4}},
            "techniques.optimizer_in_backward: True needs one micro-batch per step (gradient accumulation 4): "
            "gradients "
            "are freed as they are applied",
        ),
    ],
)
def test_framework_messages(data, message):
    with pytest.raises(PlanError) as err:
        plan_from_dict({"model": MODEL, **data})
    assert str(err.value) == message


@pytest.mark.parametrize("framework", list(load_frameworks()))
def test_yaml_round_trip_keeps_the_framework(framework):
    task = "inference" if framework in INFERENCE_FRAMEWORKS else "lora"
    plan = plan_from_dict({"framework": framework, "model": MODEL, "workload": {"task": task}})
    back = plan_from_yaml(plan_to_yaml(plan))
    assert back == plan and plan_to_dict(back)["framework"] == framework


def test_docs_table_is_the_data():
    assert frameworks_to_table() in DOC.read_text()


@pytest.mark.parametrize(
    "release, scope",
    [
        ("", "blocks_and_loss"),
        ("2024-12-10", "blocks_and_loss"),
        ("2024-12-18", "blocks"),
        ("2025-04-01", "blocks"),
        ("2025-04-02", "blocks_and_loss"),
        ("0.1.0", "blocks_and_loss"),
    ],
)
def test_a_setting_holds_for_the_releases_that_had_it(release, scope):
    """torchtitan compiled only the transformer blocks from PR #755 (2024-12-18) until PR #1033 (2025-04-02)."""
    data = {"framework": "torchtitan", "model": MODEL, "techniques": {"compile": True}}
    plan = plan_from_dict({**data, "framework_release": release} if release else data)
    assert plan.techniques.compile_scope == scope
    setting = next(s for s, _ in provenance(plan) if s.key == "techniques.compile_scope") if scope == "blocks" else None
    assert setting is None or setting.condition == "release from 2024-12-18 before 2025-04-02"


def test_the_blocks_only_release_keeps_the_fp32_logits():
    """Issue 16: at seq 16k the Dec-2024 torchtitan holds the whole T·V fp32 loss buffer a compiled loss avoids."""
    plans = [
        plan_from_dict(
            {
                "framework": "torchtitan",
                "framework_release": release,
                "model": MODEL,
                "workload": {"sequence_length": 16384},
                "techniques": {"compile": True},
            }
        )
        for release in ("2025-01-15", "0.2.0")
    ]
    blocks, both = (estimate(p).peak_allocated_bytes for p in plans)
    assert blocks - both > 16384 * 128256 * 4 // 2  # at least half the fp32 logits more


@pytest.mark.parametrize(
    "framework, release, expandable",
    [
        ("torchtitan", "", True),
        ("torchtitan", "2024-10-21", False),
        ("torchtitan", "2024-10-22", True),
        ("torchtune", "2025-06-19", False),
        ("torchtune", "", True),
        ("axolotl", "2024-12-12", False),
        ("axolotl", "2024-12-13", True),
        ("hf_trainer", "", False),
        ("megatron", "", False),
    ],
)
def test_launchers_that_set_expandable_segments_hold_less_cache(framework, release, expandable):
    """torchtitan's run_train.sh (PR #643), torchtune's __init__ (PR #2841) and axolotl's CLI (PR #2183) set
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; the allocator then keeps less of what churns."""
    data = {"framework": framework, "model": MODEL, "workload": {"task": "finetune"}}
    plan = plan_from_dict({**data, "framework_release": release} if release else data)
    assert plan.techniques.expandable_segments is expandable
    est = estimate(plan)
    off = estimate(replace(plan, techniques=replace(plan.techniques, expandable_segments=False)))
    assert (est.peak_reserved_bytes < off.peak_reserved_bytes) is expandable


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {"framework": "torchtitan", "framework_release": "0.3"},
            "framework_release: '0.3' is not a release of torchtitan (0.1.0, 0.2.0, 0.2.1, 0.2.2) or a date YYYY-MM-DD",
        ),
        (
            {"framework": "megatron", "framework_release": "core_r0.9"},
            "framework_release: 'core_r0.9' is not a release of megatron (none tagged) or a date YYYY-MM-DD",
        ),
        (
            {"framework_release": "2025-01-01"},
            "framework_release: '2025-01-01' needs a framework; generic has no releases",
        ),
    ],
)
def test_release_messages(data, message):
    with pytest.raises(PlanError) as err:
        plan_from_dict({"model": MODEL, **data})
    assert str(err.value) == message


def test_the_table_says_when_a_release_setting_holds_and_lists_tagged_releases():
    row = next(line for line in frameworks_to_table().splitlines() if line.startswith("| `torchtitan`"))
    assert "`techniques.compile_scope: blocks` when release from 2024-12-18 before 2025-04-02" in row
    assert "Tagged releases: 0.1.0 (2025-06-17), 0.2.0 (2025-10-17)" in row
