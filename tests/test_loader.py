"""The one strict reader: duplicated keys refused at every depth, size caps, deep nesting, errors naming where."""

import tomllib

import pytest

from planner.errors import OverLimit, PlanError
from planner.loader import CATALOG, CONFIG, HF_CONFIG, PLAN, load_data_file, load_json, load_yaml, parse_toml
from planner.plan.models import PRESETS_PATH


@pytest.mark.parametrize(
    "text, message",
    [
        ("model: {num_layers: 2}\nmodel: {num_layers: 3}\n", "model: duplicated key (line 2)"),
        (
            "workload:\n  task: lora\n  lora:\n    rank: 8\n    rank: 16\n",
            "workload.lora.rank: duplicated key (line 5)",
        ),
        ("a: [{b: 1, b: 2}]\n", "a[0].b: duplicated key (line 1)"),
        ("{[1]: 2}\n", "plan: not valid YAML at line 1, column 2 (found unhashable key)"),
        ("model: " + "[" * 5000 + "]" * 5000, "plan: nested too deeply to be a plan"),
        (
            "model: [\n",
            "plan: not valid YAML at line 2, column 1 (expected the node content, but found '<stream end>')",
        ),
    ],
)
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
    bomb = "a: &a [x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(20)
    )  # 2^21 values once expanded
    with pytest.raises(PlanError) as err:
        load_yaml(bomb)
    assert str(err.value) == "plan: expands to more than 100,000 values through its aliases; that is not a plan"
    fine = "a: &a [x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(10)
    )
    assert len(load_yaml(fine)) == 11  # 2^11 values: read


def test_empty_text_is_none():
    assert load_yaml("") is None


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"a": 1, "a": 2}', "hf_config a: duplicated key"),
        ('{"text_config": {"vocab_size": 1, "vocab_size": 2}}', "hf_config vocab_size: duplicated key"),
        ("{not json", "hf_config: not valid JSON (Expecting property name enclosed in double quotes at line 1)"),
        ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "hf_config: nested too deeply to be a config.json"),
    ],
)
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


# --- issue 27: every check linear in the document, before anything recurses or expands ------------------------------
@pytest.mark.parametrize(
    "text, value",
    [
        ("n: 0x10\n", 16),
        ("n: 0b101\n", 5),
        ("n: 017\n", 15),
        ("n: 1_000\n", 1000),
        ("n: 1:30\n", 90),
        ("n: 0x" + "f" * 24 + "\n", 16**24 - 1),
        ("n: " + "9" * 30 + "\n", 10**30 - 1),  # 30 digits: read
    ],
)
def test_every_integer_notation_reads(text, value):
    assert load_yaml(text) == {"n": value}


@pytest.mark.parametrize(
    "text",
    [
        "n: 0x" + "f" * 4000,  # read in linear time; its decimal text is more than Python writes
        "n: 0x" + "f" * 26,
        "n: 0b1" + "0" * 100,
        "n: 0" + "7" * 34,
        "n: " + "1_" * 30 + "1",
        "n: -" + "1" * 31,
        "n: 1" + ":0" * 17,  # 60**17: YAML 1.1's base 60
        "n: " + "1:" * 100_000 + "1",  # 200 kB of base 60, one multiplication a part: refused by its length, unread
        "n: " + "1" * 5000,
    ],
)
def test_an_integer_past_30_digits_is_refused_in_every_notation(text):
    with pytest.raises(OverLimit) as err:
        load_yaml(text)
    assert (err.value.field, err.value.rule) == ("plan", "holds an integer of more than 30 digits; that is not a plan")


@pytest.mark.parametrize(
    "text",
    [
        "{" * 2000,  # PyYAML's scanner costs O(depth) a token: seconds at this depth
        "model: " + "[" * 65 + "]" * 65,
        "a: '" + "[" * 65 + "'",  # quoted brackets count too: the pre-scan bounds the nesting from above
        "".join(f"{' ' * i}k:\n" for i in range(70)),  # indented blocks, which no bracket shows
        "a: &a " + "[" * 40 + "]" * 40 + "\nb: " + "[" * 30 + "*a" + "]" * 30,  # an alias puts a deep node deeper
        "a: &a [*a]\n",  # a list that contains itself: anything that walks it recurses without end
    ],
)
def test_deep_nesting_is_refused_before_any_parser_recurses(text):
    with pytest.raises(OverLimit) as err:
        load_yaml(text)
    assert str(err.value) == "plan: nested too deeply to be a plan"


def test_nesting_within_the_limit_reads():
    nested = load_yaml("model: " + "[" * 60 + "1" + "]" * 60)["model"]
    for _ in range(59):
        nested = nested[0]
    assert nested == [1]
    assert load_yaml("a: &a [[1]]\nb: [*a, *a]\n") == {"a": [[1]], "b": [[[1]], [[1]]]}


def test_values_written_are_counted_as_they_are_composed():
    with pytest.raises(OverLimit) as err:
        load_yaml("[" + "1, " * 60_000 + "1]")  # 180 kB, under the size cap: 60,001 values
    assert str(err.value) == "plan: holds more than 50,000 values; that is not a plan"


def test_text_that_aliases_expand_beyond_the_size_cap_is_refused():
    with pytest.raises(OverLimit) as err:  # 100 kB written, 21 GB if every alias of it were written out
        load_yaml("a: &a " + "x" * 100_000 + "\nb: [" + ", ".join(["*a"] * 30_000) + "]\n", CONFIG)
    assert str(err.value) == (
        "config: expands to more than 262,144 characters of text through its aliases; that is not a framework config"
    )
    assert len(load_yaml("a: &a " + "x" * 1000 + "\nb: [*a, *a]\n")["b"]) == 2  # an alias or two: read


def test_a_constructor_error_is_not_valid_yaml():
    with pytest.raises(PlanError) as err:
        load_yaml("day: 2024-02-30\n")
    assert str(err.value) == "plan: not valid YAML (day is out of range for month)"


def test_json_nesting_is_refused_before_the_parser_recurses():
    with pytest.raises(OverLimit, match="^hf_config: nested too deeply to be a config.json$"):
        load_json("[" * 65 + "]" * 65, HF_CONFIG)


@pytest.mark.parametrize(
    "text",
    [
        "x = 0x" + "f" * 4000,
        "x = 0o" + "7" * 40,
        "x = 0b1" + "0" * 100,
        "x = " + "1_" * 30 + "1",
        "x = " + "1" * 5000,
        "x = [[" + "1" * 31 + "]]",
    ],
)
def test_toml_integers_past_30_digits_are_refused_in_every_notation(text):
    with pytest.raises(OverLimit, match="^config: holds an integer of more than 30 digits; that is not a framework"):
        parse_toml(text)


@pytest.mark.parametrize(
    "text",
    [
        "a" + ".a" * 5000 + " = 1",  # tomllib takes time quadratic in a key's parts
        '"q.q"' + '."\\""' * 70 + " = 1",  # quoted parts, escaped quotes in them
        "[t" + ".t" * 70 + "]",
        "x = " + "{a = " * 3000 + "1" + "}" * 3000,  # tomllib recurses into inline tables
        "x = " + "[" * 65 + "]" * 65,
        "x = " + "{a.b.c = " * 22 + "1" + "}" * 22,  # 67 levels of tables: 22 braces, 3 parts a key
    ],
)
def test_deep_toml_is_refused_before_tomllib_recurses(text):
    with pytest.raises(OverLimit, match="^config: nested too deeply to be a framework config$"):
        parse_toml(text)


def test_toml_reads_as_tomllib_reads_it_and_other_text_is_none():
    text = '[model]\nname = "llama3"\nflavor = "8B"\n[a.b]\nc = [1, 2]\nd = 0x10\n'
    assert parse_toml(text) == tomllib.loads(text)
    assert parse_toml("torchrun -m torchtitan.train --model.flavor 8B") is None
