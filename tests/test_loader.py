"""The one strict reader: duplicated keys refused at every depth, size caps, deep nesting, errors naming where."""

import pytest

from planner.errors import PlanError
from planner.loader import CATALOG, HF_CONFIG, PLAN, load_data_file, load_json, load_yaml
from planner.models import PRESETS_PATH


@pytest.mark.parametrize("text, message", [
    ("model: {num_layers: 2}\nmodel: {num_layers: 3}\n", "model: duplicated key (line 2)"),
    ("workload:\n  task: lora\n  lora:\n    rank: 8\n    rank: 16\n", "workload.lora.rank: duplicated key (line 5)"),
    ("a: [{b: 1, b: 2}]\n", "a[0].b: duplicated key (line 1)"),
    ("{[1]: 2}\n", "plan: not valid YAML at line 1, column 2 (found unhashable key)"),
    ("model: " + "[" * 5000 + "]" * 5000, "plan: nested too deeply to be a plan"),
    ("model: [\n", "plan: not valid YAML at line 2, column 1 (expected the node content, but found '<stream end>')"),
])
def test_yaml_errors_name_where(text, message):
    with pytest.raises(PlanError) as err:
        load_yaml(text)
    assert str(err.value) == message


def test_duplicated_key_carries_its_path_as_field():
    with pytest.raises(PlanError) as err:
        load_yaml("gpus:\n  - id: a\n    usable_memory_gib: 79\n    usable_memory_gib: 10\n", CATALOG)
    assert str(err.value) == "gpu_catalog gpus[0].usable_memory_gib: duplicated key (line 4)"
    assert (err.value.field, err.value.rule) == ("gpu_catalog gpus[0].usable_memory_gib", "duplicated key (line 4)")


def test_size_caps_and_whole_document_errors_name_the_document():
    with pytest.raises(PlanError) as err:
        load_yaml("#" * (PLAN.max_bytes + 1))
    assert str(err.value) == "plan: 262,145 bytes is larger than the 262,144-byte limit"
    assert (err.value.field, err.value.rule) == ("plan", "262,145 bytes is larger than the 262,144-byte limit")
    with pytest.raises(PlanError) as err:
        load_yaml("a: [b: c: d", CATALOG)
    assert str(err.value) == "gpu_catalog: not valid YAML at line 1, column 9 (expected ',' or ']', but got ':')"


def test_anchors_work_and_an_alias_bomb_is_refused_before_it_expands():
    assert load_yaml("a: &x {b: 1}\nc: *x\n") == {"a": {"b": 1}, "c": {"b": 1}}
    bomb = "a: &a [x, x]\n" + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}]\n"
                                      for i in range(20))  # 2^21 values once expanded
    with pytest.raises(PlanError) as err:
        load_yaml(bomb)
    assert str(err.value) == "plan: expands to more than 100,000 values through its aliases; that is not a plan"
    fine = "a: &a [x, x]\n" + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}]\n"
                                      for i in range(10))
    assert len(load_yaml(fine)) == 11  # 2^11 values: read


def test_empty_text_is_none():
    assert load_yaml("") is None


@pytest.mark.parametrize("text, message", [
    ('{"a": 1, "a": 2}', "hf_config a: duplicated key"),
    ('{"text_config": {"vocab_size": 1, "vocab_size": 2}}', "hf_config vocab_size: duplicated key"),
    ("{not json", "hf_config: not valid JSON (Expecting property name enclosed in double quotes at line 1)"),
    ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "hf_config: nested too deeply to be a config.json"),
])
def test_json_refuses_duplicates_at_every_depth(text, message):
    with pytest.raises(PlanError) as err:
        load_json(text, HF_CONFIG)
    assert str(err.value) == message


def test_the_package_data_files_read_strictly(tmp_path):
    assert load_data_file(PRESETS_PATH)["models"]
    bad = tmp_path / "models.yaml"
    bad.write_text("models:\n  - id: a\n    id: b\n")
    with pytest.raises(PlanError) as err:
        load_data_file(bad)
    assert str(err.value) == "models.yaml models[0].id: duplicated key (line 3)"
