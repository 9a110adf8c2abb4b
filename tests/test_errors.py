"""PlanError carries field, value and rule; its text names all three."""

import pickle

import pytest

from planner.catalog import parse_catalog
from planner.errors import NO_VALUE, OverLimit, PlanError, bad, short, unknown_key
from planner.plan.codec import plan_from_dict


def test_bad_value_reads_as_one_line_and_keeps_its_parts():
    err = bad("parallelism.tensor", 3, "does not divide model.num_attention_heads (32)")
    assert str(err) == "parallelism.tensor: 3 does not divide model.num_attention_heads (32)"
    assert (err.field, err.value, err.rule) == (
        "parallelism.tensor",
        3,
        "does not divide model.num_attention_heads (32)",
    )
    assert isinstance(err, ValueError)


def test_an_error_about_a_key_has_no_value():
    err = unknown_key("techniques", "fast", ["compile", "loss"])
    assert str(err) == "techniques.fast: unknown key; allowed keys are: compile, loss"
    assert (err.field, err.value) == ("techniques.fast", NO_VALUE)
    assert (
        str(PlanError("hf_config", "must be a JSON object, got list")) == "hf_config: must be a JSON object, got list"
    )


@pytest.mark.parametrize(
    "data, field, value",
    [
        ({"model": {"preset": "llama-3.1-8b"}, "parallelism": {"tensor": 3}}, "parallelism.tensor", 3),
        ({"model": {"preset": "llama-3.1-8b"}, "workload": {"micro_batch_size": 0}}, "workload.micro_batch_size", 0),
        (
            {"model": {"preset": "llama-3.1-8b"}, "precision": {"fp8_all_gather": True}},
            "precision.fp8_all_gather",
            True,
        ),
        ({"model": {}}, "model", NO_VALUE),
    ],
)
def test_plan_errors_name_the_field_and_value(data, field, value):
    with pytest.raises(PlanError) as err:
        plan_from_dict(data)
    assert (err.value.field, err.value.value) == (field, value)
    assert str(err.value).startswith(f"{field}: ")


def test_catalog_errors_name_the_entry_field():
    with pytest.raises(PlanError) as err:
        parse_catalog("schema: vram-planner-catalog/v2\ngpus:\n  - 3\nofferings: []\n")
    assert (err.value.field, err.value.rule) == ("gpu_catalog gpus[0]", "must be a mapping of GPU fields")


def test_a_huge_value_reads_cut_to_one_short_line():
    assert str(bad("x", list(range(10**6)), "is bad")) == "x: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, ...] is bad"
    text = str(bad("name", "y" * 10**6, "is too long"))
    assert len(text) < 120 and text.endswith("yyy' is too long") and "..." in text
    assert (
        str(bad("x", ["q", "k", "v", "o", "gate", "up", "down"], "r"))
        == "x: ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] r"
    )  # ordinary values read in full


def test_an_integer_too_wide_to_write_reads_as_its_width():
    """An integer from a hexadecimal literal of 4,000 digits: its decimal text is more than Python writes."""
    assert str(bad("x", int("f" * 4000, 16), "is bad")) == "x: <an integer of 16,000 bits> is bad"
    assert str(bad("x", [10**40], "is bad")) == "x: [100000000000000000...0000000000000000000] is bad"
    assert short("y" * 10**6).endswith("yyy'") and len(short("y" * 10**6)) < 100


@pytest.mark.parametrize(
    "error",
    [PlanError("a.b", "must be x", value=[1, 2]), PlanError("c", "d", value=None), OverLimit("plan", "is too big")],
)
def test_an_error_pickles_as_its_fields(error):
    """The app's readers run in worker processes (ui/worker.py); their errors come back whole."""
    back = pickle.loads(pickle.dumps(error))
    assert (type(back), str(back), back.field, back.rule) == (type(error), str(error), error.field, error.rule)
    assert (back.value is NO_VALUE) == (error.value is NO_VALUE) and (
        error.value is NO_VALUE or back.value == error.value
    )
