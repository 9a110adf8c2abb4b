"""planner/memory/layout.py: the one pipeline layer split, used by training and inference alike."""

import pytest

from planner.memory.inference import weight_bytes
from planner.memory.layout import largest_stage_layers, stage_layers
from planner.models import presets
from planner.codec import plan_from_dict


@pytest.mark.parametrize("preset", ["deepseek-v2", "deepseek-v3", "mixtral-8x7b", "llama-3.1-8b"])
@pytest.mark.parametrize("pipeline", [1, 2, 4])
def test_every_stage_holds_its_share_of_layers_dense_first(preset, pipeline):
    m = presets()[preset].model
    splits = [stage_layers(m, i, pipeline) for i in range(pipeline)]
    assert all(d + e == m.num_layers // pipeline for d, e in splits)
    dense = [d for d, _ in splits]
    assert dense == sorted(dense, reverse=True)  # MoE models put their dense layers first
    assert sum(dense) == min(m.num_layers - m.moe_layers, pipeline * (m.num_layers // pipeline))


def test_served_weights_take_the_largest_stage_of_the_training_split():
    # deepseek-v2: 60 layers, the first dense, 59 MoE. At pipeline 2 each stage has 30 layers: stage 0 one dense
    # and 29 MoE, stage 1 30 MoE (the largest). The old inference split gave (60 - 59) // 2 = 0 dense and
    # 59 // 2 = 29 MoE layers: a layer short on either stage.
    plan = plan_from_dict({"model": {"preset": "deepseek-v2"}, "workload": {"task": "inference"},
                           "parallelism": {"pipeline": 2}})
    assert largest_stage_layers(plan) == (0, 30)
    assert weight_bytes(plan)[1] == 120_212_075_520  # 30 MoE layers; the old split served 116,239,959,040
