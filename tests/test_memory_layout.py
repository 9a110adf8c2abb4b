"""planner/memory/layout.py: the one pipeline layer split, used by training and inference alike."""

import pytest

from planner.errors import PlanError
from planner.memory import estimate
from planner.memory.inference import weight_bytes
from planner.memory.layout import chunk_split, largest_stage_layers, stage_layers, stage_split
from planner.plan.codec import plan_from_dict


def _plan(preset: str, pipeline: int, **parallelism) -> object:
    return plan_from_dict(
        {
            "model": {"preset": preset},
            "workload": {"task": "inference"},
            "parallelism": {"pipeline": pipeline, **parallelism},
        }
    )


@pytest.mark.parametrize("preset", ["deepseek-v2", "deepseek-v3", "mixtral-8x7b", "llama-3.1-8b"])
@pytest.mark.parametrize("pipeline", [1, 2, 4])
@pytest.mark.parametrize("split", ["auto", "weighted"])
def test_every_stage_holds_its_share_of_layers_dense_first(preset, pipeline, split):
    plan = _plan(preset, pipeline, pipeline_split=split)
    splits = [stage_layers(plan, i) for i in range(pipeline)]
    assert [d + e for d, e in splits] == list(stage_split(plan))
    assert sum(d + e for d, e in splits) == plan.model.num_layers  # every layer on exactly one stage
    left = plan.model.num_layers - plan.model.moe_layers  # MoE models put their dense layers first
    for dense, moe in splits:
        assert dense == min(left, dense + moe)
        left -= dense
    assert left == 0


def test_an_uneven_split_counts_the_embedding_and_the_head_as_layers():
    """Llama 3.1 405B: 126 layers + embedding + head = 128 units; 8 stages of 16 units are 15, 16 × 6, 15 layers;
    16 stages of 8 are 7, 8 × 14, 7. 61 layers (DeepSeek-V3) on 4 stages: 63 units = 16, 16, 16, 15 (torchtitan
    gives the remainder to the first stages) → 15, 16, 16, 14. An even split stays even under auto."""
    assert chunk_split(126, 8) == (15, 16, 16, 16, 16, 16, 16, 15)
    assert chunk_split(126, 16) == (7,) + (8,) * 14 + (7,)
    assert chunk_split(61, 4) == (15, 16, 16, 14)
    assert chunk_split(32, 4) == (8, 8, 8, 8)
    # torchtitan counts the embedding and the head even where the stages divide the layers: 34 units = 9, 9, 8, 8
    assert chunk_split(32, 4, "weighted") == (8, 9, 8, 7)
    # interleaved: 8 stages × 8 chunks = 64 chunks of 2 units; stage 0 holds chunks 0, 8, …, 56
    assert chunk_split(126, 64)[:2] == (1, 2)
    assert stage_split(_plan("llama-3.1-405b", 8, pipeline_schedule="interleaved_1f1b", virtual_stages=8)) == (
        15,
        16,
        16,
        16,
        16,
        16,
        16,
        15,
    )


def test_a_listed_split_is_the_split():
    """Megatron's --decoder-first-pipeline-num-layers 12 --decoder-last-pipeline-num-layers 12 on 405B, PP 8:
    the six middle stages take 17 each."""
    plan = _plan("llama-3.1-405b", 8, pipeline_layers=[12, 17, 17, 17, 17, 17, 17, 12])
    assert stage_split(plan) == (12, 17, 17, 17, 17, 17, 17, 12)
    assert largest_stage_layers(plan) == (17, 0)


@pytest.mark.parametrize(
    "parallelism, field, rule",
    [
        (
            {"pipeline": 8, "pipeline_split": "even"},
            "parallelism.pipeline",
            "does not divide model.num_layers (126) into 8 even chunks (parallelism.pipeline_split even); use "
            "weighted (the "
            "embedding and the output head count as a layer each) or list parallelism.pipeline_layers",
        ),
        (
            {"pipeline": 2, "pipeline_layers": [60, 60]},
            "parallelism.pipeline_layers",
            "adds up to 120 layers; model.num_layers is 126",
        ),
        (
            {"pipeline": 2, "pipeline_layers": [126]},
            "parallelism.pipeline_layers",
            "lists 1 chunks; pipeline × virtual_stages makes 2",
        ),
        (
            {"pipeline": 2, "pipeline_layers": [126, 0]},
            "parallelism.pipeline_layers",
            "is out of range; must be from 1 to 100,000",
        ),
        (
            {"pipeline": 8, "pipeline_schedule": "interleaved_1f1b", "virtual_stages": 9},
            "parallelism.virtual_stages",
            "leaves a chunk without layers: model.num_layers (126) split unevenly into 72 chunks, with the embedding "
            "and "
            "the output head counted as a layer each, fills at most 64",
        ),
    ],
)
def test_a_split_that_cannot_be_made_names_its_field(parallelism, field, rule):
    with pytest.raises(PlanError) as err:
        plan_from_dict({"model": {"preset": "llama-3.1-405b"}, "parallelism": parallelism})
    assert (err.value.field, err.value.rule) == (field, rule)


def test_the_most_loaded_stage_of_an_uneven_split_is_reported():
    """405B on 16 stages: stage 1 has a layer more than stage 0 and one micro-batch fewer in flight (1F1B)."""
    plan = plan_from_dict(
        {
            "model": {"preset": "llama-3.1-405b"},
            "workload": {"sequence_length": 8192, "global_batch_size": 64},
            "parallelism": {"data": 1, "tensor": 8, "pipeline": 16},
        }
    )
    est = estimate(plan)
    assert est.stage == 1 and est.device_bytes == max(s.device_bytes for s in est.stages)


def test_served_weights_take_the_largest_stage_of_the_training_split():
    # deepseek-v2: 60 layers, the first dense, 59 MoE. At pipeline 2 each stage has 30 layers: stage 0 one dense
    # and 29 MoE, stage 1 30 MoE (the largest). The old inference split gave (60 - 59) // 2 = 0 dense and
    # 59 // 2 = 29 MoE layers: a layer short on either stage.
    plan = plan_from_dict(
        {"model": {"preset": "deepseek-v2"}, "workload": {"task": "inference"}, "parallelism": {"pipeline": 2}}
    )
    assert largest_stage_layers(plan) == (0, 30)
    # 30 MoE layers, the head and the final norm; the embedding (102,400 × 5,120 = 524,288,000) sits on stage 0,
    # beside its dense layer and 29 MoE layers (both tables on one stage: 120,212,075,520)
    assert weight_bytes(plan)[1] == 120_212_075_520 - 524_288_000
