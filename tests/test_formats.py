"""planner/formats: the shared reader helpers and the registry."""

import pytest

from planner.errors import PlanError
from planner.formats import detect, format_named, overlay
from planner.formats.base import get_key, preset_for, set_key


@pytest.mark.parametrize("name, preset", [
    ("meta-llama/Llama-3.1-8B", "llama-3.1-8b"),
    ("meta-llama/llama-3.1-8b-instruct", "llama-3.1-8b"),  # any case; an instruct release is the base's shape
    ("./assets/hf/Llama-3.1-8B", "llama-3.1-8b"),  # a local copy named for the repo
    ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
    ("google/gemma-2-9b-it", "gemma-2-9b"),
    ("neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8", "llama-3.1-70b"),  # a quantized release
    ("Qwen/Qwen2.5-7B-Instruct-AWQ", "qwen2.5-7b"),
    ("llama-3.1-70b", "llama-3.1-70b"),  # a preset id
    ("acme/secret-model-7b", None),
])
def test_preset_for_names(name, preset):
    assert preset_for(name) == preset


def test_set_and_get_key_make_sections():
    plan = {}
    set_key(plan, "workload.lora.rank", 16)
    assert plan == {"workload": {"lora": {"rank": 16}}}
    assert get_key(plan, "workload.lora.rank") == 16
    assert get_key(plan, "workload.inference.batch_size", "absent") == "absent"


def test_overlay_merges_sections_and_copies():
    base = {"model": {"preset": "llama-3.1-8b"}, "workload": {"task": "pretrain", "sequence_length": 4096}}
    over = {"workload": {"sequence_length": 8192}, "framework": "torchtitan"}
    out = overlay(base, over)
    assert out == {"model": {"preset": "llama-3.1-8b"}, "workload": {"task": "pretrain", "sequence_length": 8192},
                   "framework": "torchtitan"}
    assert base["workload"]["sequence_length"] == 4096


def test_unknown_format_and_undetectable_text():
    with pytest.raises(PlanError, match=r"^--framework: 'nemo' is not a config format; allowed: "):
        format_named("nemo")
    with pytest.raises(PlanError, match=r"^config: is not a config this planner reads"):
        detect("hello world")
