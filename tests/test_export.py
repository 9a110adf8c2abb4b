import json

import pytest
from conftest import TINY

from planner.memory import estimate
from planner.plan.codec import plan_from_dict
from planner.views.export import (
    compare_rows,
    estimate_to_dict,
    estimate_to_json,
    estimate_to_table,
    file_stem,
    plan_title,
)


def test_json_contract():
    est = estimate(plan_from_dict({"model": TINY}))
    d = json.loads(estimate_to_json(est))
    for key in ("peak_allocated_bytes", "peak_reserved_bytes", "device_bytes", "fits", "phase", "items"):
        assert key in d
    assert set(d["items"][0]) >= {"name", "bytes", "formula", "note"}
    assert d == estimate_to_dict(est) | {}  # JSON-serializable as is
    assert d["plan"]["model"]["num_layers"] == 2


def test_table_lists_items_and_totals():
    est = estimate(plan_from_dict({"model": TINY}))
    table = estimate_to_table(est)
    assert "Optimizer states" in table and "peak_reserved_bytes" in table
    assert "torch.cuda.max_memory_allocated()" in table and table.endswith("\n")


@pytest.mark.parametrize(
    "data, title",
    [
        ({"model": {"preset": "llama-3.1-70b"}, "workload": {"task": "qlora"}}, "Llama 3.1 70B QLoRA on 1 × H100"),
        ({"model": {"params": "7B"}, "hardware": {"count": 8}}, "~7B-parameter model pre-training on 8 × H100"),
        (
            {
                "model": {"preset": "qwen3-32b"},
                "workload": {"task": "inference", "inference": {"gpu_memory_utilization": 0.9}},
            },
            "Qwen3 32B serving on 1 × H100",
        ),
        ({"model": {"preset": "gpt2"}, "workload": {"task": "inference"}}, "GPT-2 (124M) generation on 1 × H100"),
    ],
)
def test_a_plan_is_titled_from_what_it_is(data, title):
    assert plan_title(plan_from_dict(data), "H100") == title


def test_a_title_makes_a_file_name():
    assert (
        file_stem("Llama 3.1 70B QLoRA on 1 × NVIDIA H100 SXM 80GB") == "llama-3.1-70b-qlora-on-1-nvidia-h100-sxm-80gb"
    )
    assert file_stem("×××") == "plan"


def test_compared_plans_list_their_totals_then_the_keys_on_which_they_differ():
    plans = [
        plan_from_dict({"model": {"preset": "llama-3.1-8b"}, "parallelism": {"data": 8, "zero_stage": 3}}),
        plan_from_dict(
            {
                "model": {"preset": "llama-3.1-8b"},
                "parallelism": {"data": 8, "zero_stage": 3},
                "techniques": {"activation_checkpointing": "full"},
            }
        ),
    ]
    ests = [estimate(p) for p in plans]
    rows = {r[""]: r for r in compare_rows(plans, ests, [None, None])}
    assert list(rows)[:6] == [
        "title",
        "fits",
        "device per GPU",
        "peak allocated",
        "seconds per step",
        "tokens/s per GPU",
    ]
    # issue 30: each plan's own value (not '(default)') under the key in words
    assert rows["Techniques: activation checkpointing"] == {
        "": "Techniques: activation checkpointing",
        "plan 1": "none",
        "plan 2": "full",
        "differs": True,
    }
    assert not rows["title"]["differs"] and rows["device per GPU"]["differs"]
    assert not any("zero stage" in key for key in rows)
