"""planner/memory/layout.py: the one pipeline layer split, used by training and inference alike."""

import pytest

from planner.memory.inference import weight_bytes
from planner.memory import estimate
from planner.memory.layout import chunk_split, largest_stage_layers, stage_layers, stage_split
from planner.models import presets
from planner.codec import plan_from_dict


@pytest.mark.parametrize("preset", ["deepseek-v2", "deepseek-v3", "mixtral-8x7b", "llama-3.1-8b"])
@pytest.mark.parametrize("pipeline", [1, 2, 4])
def test_every_stage_holds_its_share_of_layers_dense_first(preset, pipeline):
    m = presets()[preset].model
    splits = [stage_layers(m, i, pipeline) for i in range(pipeline)]
    assert [d + e for d, e in splits] == list(stage_split(m.num_layers, pipeline))
    assert sum(d + e for d, e in splits) == m.num_layers  # every layer on exactly one stage
    dense = [d for d, _ in splits]
    assert dense == sorted(dense, reverse=True)  # MoE models put their dense layers first
    assert sum(dense) == m.num_layers - m.moe_layers


def test_an_uneven_split_counts_the_embedding_and_the_head_as_layers():
    """Llama 3.1 405B: 126 layers + embedding + head = 128 units; 8 stages of 16 units are 15, 16 × 6, 15 layers;
    16 stages of 8 are 7, 8 × 14, 7. 61 layers (DeepSeek-V3) on 4 stages: 63 units = 15, 16, 16, 16 → 14, 16, 16,
    15. An even split stays even."""
    assert stage_split(126, 8) == (15, 16, 16, 16, 16, 16, 16, 15)
    assert stage_split(126, 16) == (7,) + (8,) * 14 + (7,)
    assert stage_split(61, 4) == (14, 16, 16, 15)
    assert stage_split(32, 4) == (8, 8, 8, 8)
    # interleaved: 8 stages × 8 chunks = 64 chunks of 2 units; stage 0 holds chunks 0, 8, …, 56
    assert chunk_split(126, 64)[:2] == (1, 2) and stage_split(126, 8, 8) == (15, 16, 16, 16, 16, 16, 16, 15)


def test_the_most_loaded_stage_of_an_uneven_split_is_reported():
    """405B on 16 stages: stage 1 has a layer more than stage 0 and one micro-batch fewer in flight (1F1B)."""
    plan = plan_from_dict({"model": {"preset": "llama-3.1-405b"}, "workload": {"sequence_length": 8192,
                                                                               "global_batch_size": 64},
                           "parallelism": {"data": 1, "tensor": 8, "pipeline": 16}})
    est = estimate(plan)
    assert est.stage == 1 and est.device_bytes == max(s.device_bytes for s in est.stages)


def test_served_weights_take_the_largest_stage_of_the_training_split():
    # deepseek-v2: 60 layers, the first dense, 59 MoE. At pipeline 2 each stage has 30 layers: stage 0 one dense
    # and 29 MoE, stage 1 30 MoE (the largest). The old inference split gave (60 - 59) // 2 = 0 dense and
    # 59 // 2 = 29 MoE layers: a layer short on either stage.
    plan = plan_from_dict({"model": {"preset": "deepseek-v2"}, "workload": {"task": "inference"},
                           "parallelism": {"pipeline": 2}})
    assert largest_stage_layers(plan) == (0, 30)
    assert weight_bytes(plan)[1] == 120_212_075_520  # 30 MoE layers; the old split served 116,239,959,040
