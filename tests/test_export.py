import json

import pytest

from conftest import TINY
from planner.errors import PlanError
from planner.export import (MAX_PLAN_BYTES, estimate_to_dict, estimate_to_json, estimate_to_table,
                            plan_from_yaml, plan_to_yaml)
from planner.memory import estimate
from planner.plan import plan_from_dict


def test_yaml_round_trip_is_exact():
    plan = plan_from_dict({"model": {"preset": "llama-3.1-8b"}, "name": "8B on 8×H100",
                           "parallelism": {"data": 8, "zero_stage": 3}})
    text = plan_to_yaml(plan)
    assert text.startswith("schema: vram-planner/v1\nname: 8B on 8×H100\nframework: generic\nmodel:\n  preset: llama-3.1-8b\n")
    assert plan_from_yaml(text) == plan


def test_example_plan_file_reads(tmp_path):
    from conftest import ROOT
    plan = plan_from_yaml((ROOT / "examples" / "llama-3.1-8b-8xh100.yaml").read_text())
    assert plan.parallelism.zero_stage == 3 and plan.hardware.count == 8


@pytest.mark.parametrize("text, message", [
    ("model: {num_layers: 2}\nmodel: {num_layers: 3}\n", "model: duplicated key (line 2)"),
    ("model: [\n", "plan: not valid YAML at line 2, column 1 (expected the node content, but found '<stream end>')"),
    ("- 1\n- 2\n", "plan: must be a mapping with the keys schema, name, framework, model, workload, precision, techniques,"
                   " parallelism, hardware"),
])
def test_bad_yaml_messages(text, message):
    with pytest.raises(PlanError) as err:
        plan_from_yaml(text)
    assert str(err.value) == message


def test_size_cap():
    with pytest.raises(PlanError, match=r"^plan: 262,145 bytes is larger than the 262,144-byte limit$"):
        plan_from_yaml("#" * (MAX_PLAN_BYTES + 1))


def test_python_tags_are_refused():
    with pytest.raises(PlanError, match=r"^plan: not valid YAML"):
        plan_from_yaml("model: !!python/object/apply:os.system ['true']\n")


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


# --- share links -------------------------------------------------------------------------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from planner.export import plan_from_query, plan_to_query  # noqa: E402

DEFAULT = {"model": {"preset": "llama-3.1-8b"}}


@pytest.mark.parametrize("d, query", [
    ({"model": {"preset": "llama-3.1-8b"}, "workload": {"sequence_length": 8192, "micro_batch_size": 2},
      "parallelism": {"data": 8, "zero_stage": 3}},
     {"preset": "llama-3.1-8b", "sequence_length": "8192", "micro_batch_size": "2", "global_batch_size": "16",
      "data": "8", "zero_stage": "3"}),
    ({"model": {"preset": "llama-3.1-8b"}, "workload": {"task": "qlora", "lora": {"rank": 16,
                                                                                   "targets": ["q", "v", "down"]}}},
     {"preset": "llama-3.1-8b", "task": "qlora", "rank": "16", "targets": "q,v,down"}),
    ({"model": TINY}, {"num_layers": "2", "hidden_size": "64", "num_attention_heads": "4", "num_kv_heads": "2",
                       "intermediate_size": "128", "vocab_size": "1000"}),
])
def test_share_link_is_short_readable_and_exact(d, query):
    plan = plan_from_dict(d)
    assert plan_to_query(plan) == query
    assert plan_from_query(query, {"model": {"preset": "gpt2"}}) == (plan, [])


def test_tampered_links_warn_and_fall_back_per_parameter():
    plan, warnings = plan_from_query({"sequence_length": "abc", "tensor": "3", "foo": "1", "zero_stage": ["1", "2"],
                                      "micro_batch_size": "0"}, DEFAULT)
    assert warnings == [
        "sequence_length: 'abc' is not a valid value; the default is used",
        "foo: unknown link parameter, ignored",
        "zero_stage: given 2 times; the last one is used",
        "micro_batch_size: workload.micro_batch_size: 0 is out of range; must be from 1 to 1,048,576; the default is used",
        "tensor: parallelism.tensor: 3 does not divide model.num_attention_heads (32); the default is used",
    ]
    assert plan.parallelism.zero_stage == 2 and plan.parallelism.tensor == 1 and plan.workload.sequence_length == 4096


def test_a_rule_between_two_keys_drops_the_one_the_link_set():
    # the error names parallelism.tensor (from the default plan); the link set only the sequence length
    default = {"model": {"preset": "llama-3.1-8b"}, "parallelism": {"tensor": 2, "sequence_parallel": True}}
    plan, warnings = plan_from_query({"sequence_length": "1001"}, default)
    assert warnings == ["sequence_length: parallelism.tensor: 2 does not divide the tokens per context rank (1001) "
                        "for sequence parallelism; the default is used"]
    assert plan == plan_from_dict(default)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(["preset", "sequence_length", "tensor", "gpu", "task", "targets", "rank",
                                        "zero_stage", "compute", "weights", "batch_size", "num_layers", "xyz"]),
                       st.text(max_size=12)))
def test_no_link_raises_and_its_plan_links_back_to_itself(params):
    plan, warnings = plan_from_query(params, DEFAULT)
    assert len(warnings) <= len(params) + 1 and all(isinstance(w, str) for w in warnings)
    assert plan_from_query(plan_to_query(plan), DEFAULT) == (plan, [])


def test_fuzz_regressions_are_answers_not_crashes():
    from planner.export import load_yaml, plan_from_query, plan_to_query
    with pytest.raises(PlanError, match=r"^plan: nested too deeply to be a plan$"):
        load_yaml("model: " + "[" * 5000 + "]" * 5000)
    plan, warnings = plan_from_query({"params": "inf", "gpu": "tpu-v9"}, {"model": {"preset": "gpt2"}},
                                     gpus={"h100-sxm-80gb"})
    assert warnings == ["gpu: 'tpu-v9' is not in the GPU catalog; the default is used",
                        "params: model.params: 'inf' must be a parameter count like 13B, 770M or 1.5e9; the default is used"]
    # a link that names its model is the whole plan: nothing leaks in from the default it is read against
    app_default = {"name": "default", "model": {"preset": "llama-3.1-8b"}, "parallelism": {"data": 8, "zero_stage": 3}}
    mine = plan_from_dict({"model": {"preset": "gpt2"}, "precision": {"compute": "fp16", "weights": "bf16"},
                           "workload": {"task": "inference"}})
    assert plan_from_query(plan_to_query(mine), app_default) == (mine, [])
