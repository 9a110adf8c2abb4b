"""The plan's forms and the one way between them: dict, YAML text, flat leaf keys, share link."""

import pytest
from conftest import ROOT, TINY
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import NO_VALUE, PlanError
from planner.loader import PLAN
from planner.plan.codec import (
    LEAVES,
    leaf_text,
    plan_from_dict,
    plan_from_query,
    plan_from_yaml,
    plan_to_dict,
    plan_to_query,
    plan_to_yaml,
)


def test_yaml_round_trip_is_exact():
    plan = plan_from_dict(
        {"model": {"preset": "llama-3.1-8b"}, "name": "8B on 8×H100", "parallelism": {"data": 8, "zero_stage": 3}}
    )
    text = plan_to_yaml(plan)
    assert text.startswith(
        "schema: vram-planner/v1\nname: 8B on 8×H100\nframework: generic\nmodel:\n  preset: llama-3.1-8b\n"
    )
    assert plan_from_yaml(text) == plan


def test_example_plan_file_reads():
    plan = plan_from_yaml((ROOT / "examples" / "llama-3.1-8b-8xh100.yaml").read_text())
    assert plan.parallelism.zero_stage == 3 and plan.hardware.count == 8


@pytest.mark.parametrize(
    "text, message",
    [
        ("model: {num_layers: 2}\nmodel: {num_layers: 3}\n", "model: duplicated key (line 2)"),
        (
            "model: [\n",
            "plan: not valid YAML at line 2, column 1 (expected the node content, but found '<stream end>')",
        ),
        (
            "- 1\n- 2\n",
            "plan: must be a mapping with the keys schema, name, framework, framework_release, model, workload, "
            "precision, techniques,"
            " parallelism, hardware",
        ),
    ],
)
def test_bad_yaml_messages(text, message):
    with pytest.raises(PlanError) as err:
        plan_from_yaml(text)
    assert str(err.value) == message


def test_size_cap():
    with pytest.raises(PlanError, match=r"^plan: 262,145 bytes is larger than the 262,144-byte limit$"):
        plan_from_yaml("#" * (PLAN.max_bytes + 1))


def test_python_tags_are_refused():
    with pytest.raises(PlanError, match=r"^plan: not valid YAML"):
        plan_from_yaml("model: !!python/object/apply:os.system ['true']\n")


@pytest.mark.parametrize(
    "data, message, field, value",
    [
        ({}, "model: missing; give a model.preset or the architecture keys", "model", NO_VALUE),
        (
            {"model": TINY, "hardwares": {}},
            "hardwares: unknown key; allowed keys are: framework, framework_release, hardware, model, name, "
            "parallelism, precision, schema, techniques, workload",
            "hardwares",
            NO_VALUE,
        ),
        ({"model": TINY, "workload": 3}, "workload: 3 must be a mapping", "workload", 3),
        (
            {"model": TINY, "workload": {"lora": {"rank": 0}}},
            "workload.lora.rank: 0 is out of range; must be from 1 to 65,536",
            "workload.lora.rank",
            0,
        ),
        (
            ["model"],
            "plan: must be a mapping with the keys schema, name, framework, framework_release, model, workload, "
            "precision, "
            "techniques, parallelism, hardware",
            "plan",
            NO_VALUE,
        ),
    ],
)
def test_plan_dict_errors_carry_field_and_value(data, message, field, value):
    with pytest.raises(PlanError) as err:
        plan_from_dict(data)
    assert (str(err.value), err.value.field, err.value.value) == (message, field, value)


def test_dict_round_trip_writes_only_the_task_s_block():
    lora = plan_from_dict({"model": TINY, "workload": {"task": "lora"}})
    d = plan_to_dict(lora)
    assert "lora" in d["workload"] and "inference" not in d["workload"] and plan_from_dict(d) == lora


def test_leaf_keys_are_unique_paths_of_the_file_format():
    assert LEAVES["sequence_length"] == ("workload", "sequence_length")
    assert LEAVES["rank"] == ("workload", "lora", "rank")
    assert LEAVES["gpu_memory_utilization"] == ("workload", "inference", "gpu_memory_utilization")
    assert LEAVES["preset"] == ("model", "preset") and LEAVES["params"] == ("model", "params")
    assert LEAVES["gpu"] == ("hardware", "gpu") and LEAVES["framework"] == ("framework",)
    assert len(set(LEAVES.values())) == len(LEAVES)
    assert [leaf_text(v) for v in (True, ["q", "v"], 2.0, 0.5, 8)] == ["true", "q,v", "2", "0.5", "8"]


# --- share links -------------------------------------------------------------------------------------------------
DEFAULT = {"model": {"preset": "llama-3.1-8b"}}


@pytest.mark.parametrize(
    "d, query",
    [
        (
            {
                "model": {"preset": "llama-3.1-8b"},
                "workload": {"sequence_length": 8192, "micro_batch_size": 2},
                "parallelism": {"data": 8, "zero_stage": 3},
            },
            {
                "preset": "llama-3.1-8b",
                "sequence_length": "8192",
                "micro_batch_size": "2",
                "global_batch_size": "16",
                "data": "8",
                "zero_stage": "3",
            },
        ),
        (
            {
                "model": {"preset": "llama-3.1-8b"},
                "workload": {"task": "qlora", "lora": {"rank": 16, "targets": ["q", "v", "down"]}},
            },
            {"preset": "llama-3.1-8b", "task": "qlora", "rank": "16", "targets": "q,v,down"},
        ),
        (
            {"model": TINY},
            {
                "num_layers": "2",
                "hidden_size": "64",
                "num_attention_heads": "4",
                "num_kv_heads": "2",
                "intermediate_size": "128",
                "vocab_size": "1000",
            },
        ),
    ],
)
def test_share_link_is_short_readable_and_exact(d, query):
    plan = plan_from_dict(d)
    assert plan_to_query(plan) == query
    assert plan_from_query(query, {"model": {"preset": "gpt2"}}) == (plan, [])


def test_tampered_links_warn_and_fall_back_per_parameter():
    plan, warnings = plan_from_query(
        {"sequence_length": "abc", "tensor": "3", "foo": "1", "zero_stage": ["1", "2"], "micro_batch_size": "0"},
        DEFAULT,
    )
    assert warnings == [
        "sequence_length: 'abc' is not a valid value; the default is used",
        "foo: unknown link parameter, ignored",
        "zero_stage: given 2 times; the last one is used",
        "micro_batch_size: workload.micro_batch_size: 0 is out of range; must be from 1 to 1,048,576; the default is "
        "used",
        "tensor: parallelism.tensor: 3 does not divide model.num_attention_heads (32); allowed: 1, 2, 4, 8, 16, 32; "
        "the default is used",
    ]
    assert plan.parallelism.zero_stage == 2 and plan.parallelism.tensor == 1 and plan.workload.sequence_length == 4096


def test_a_rule_between_two_keys_drops_the_one_the_link_set():
    # the error names parallelism.tensor (from the default plan); the link set only the sequence length
    default = {"model": {"preset": "llama-3.1-8b"}, "parallelism": {"tensor": 2, "sequence_parallel": True}}
    plan, warnings = plan_from_query({"sequence_length": "1001"}, default)
    assert warnings == [
        "sequence_length: parallelism.tensor: 2 does not divide the tokens per context rank (1001) "
        "for sequence parallelism; the default is used"
    ]
    assert plan == plan_from_dict(default)


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "preset",
                "sequence_length",
                "tensor",
                "gpu",
                "task",
                "targets",
                "rank",
                "zero_stage",
                "compute",
                "weights",
                "batch_size",
                "num_layers",
                "xyz",
            ]
        ),
        st.text(max_size=12),
    )
)
def test_no_link_raises_and_its_plan_links_back_to_itself(params):
    plan, warnings = plan_from_query(params, DEFAULT)
    assert len(warnings) <= len(params) + 1 and all(isinstance(w, str) for w in warnings)
    # compared as files: a block the task does not use (e.g. rank=1 on a pretrain link) is kept by the Plan but
    # neither written to a file nor to a link
    back, back_warnings = plan_from_query(plan_to_query(plan), DEFAULT)
    assert (plan_to_dict(back), back_warnings) == (plan_to_dict(plan), [])


def test_fuzz_regressions_are_answers_not_crashes():
    plan, warnings = plan_from_query(
        {"params": "inf", "gpu": "tpu-v9"}, {"model": {"preset": "gpt2"}}, gpus={"h100-sxm-80gb"}
    )
    assert warnings == [
        "gpu: 'tpu-v9' is not in the GPU catalog; the default is used",
        "params: model.params: 'inf' must be a parameter count like 13B, 770M or 1.5e9; the default is used",
    ]
    # a link that names its model is the whole plan: nothing leaks in from the default it is read against
    app_default = {"name": "default", "model": {"preset": "llama-3.1-8b"}, "parallelism": {"data": 8, "zero_stage": 3}}
    mine = plan_from_dict(
        {
            "model": {"preset": "gpt2"},
            "precision": {"compute": "fp16", "weights": "bf16"},
            "workload": {"task": "inference"},
        }
    )
    assert plan_from_query(plan_to_query(mine), app_default) == (mine, [])


def test_a_job_length_in_tokens_takes_the_suffixes_a_parameter_count_takes():
    """Issue 30: `train_tokens: 1T` was refused while `params: 13B` was read."""

    def tokens(value):
        return plan_from_dict({"model": {"preset": "llama-3.1-8b"}, "workload": {"train_tokens": value}}).workload

    assert tokens("1T").train_tokens == 10**12 and tokens("500b").train_tokens == 5 * 10**11
    assert tokens("1.5e9").train_tokens == 1_500_000_000 and tokens(2_000).train_tokens == 2_000
    assert tokens("2,000K").train_tokens == 2_000_000
    for bad_value in ("lots", "inf", "nan", ""):
        with pytest.raises(PlanError, match="workload.train_tokens"):
            tokens(bad_value)
