"""planner/formats/reading.py and shell.py: the one set of value checks, the YAML/JSON reader and the shell
tokenizer every config format uses."""

import pytest

from planner.errors import PlanError
from planner.formats import reading, shell


@pytest.mark.parametrize(
    "value, expected", [(8, 8), ("8", 8), (2e8, 200_000_000), ("5e8", 500_000_000), (8.0, 8), ("1_000", 1000)]
)
def test_as_int_takes_the_spellings_configs_use(value, expected):
    assert reading.as_int("k", value) == expected


@pytest.mark.parametrize(
    "value, low, message",
    [
        (0, 1, "k: 0 must be an integer ≥ 1"),
        (True, 1, "k: True must be an integer ≥ 1"),
        (1.5, 1, "k: 1.5 must be an integer ≥ 1"),
        ("two", 1, "k: 'two' must be an integer ≥ 1"),
        ("1e400", 1, "k: '1e400' must be an integer ≥ 1"),
        ([1], 1, "k: [1] must be an integer ≥ 1"),
        (-2, -1, "k: -2 must be an integer ≥ -1"),
    ],
)
def test_as_int_refusals(value, low, message):
    with pytest.raises(PlanError) as err:
        reading.as_int("k", value, low)
    assert str(err.value) == message


def test_as_number_and_bounds():
    assert reading.as_number("k", "0.9") == 0.9 and reading.as_number("k", 3) == 3
    for value, low, high, message in (
        (True, -1e9, 1e9, "k: True must be a number from -1e+09 to 1e+09"),
        ("nan", 0, 1, "k: 'nan' must be a number from 0 to 1"),
        ("x", -float("inf"), float("inf"), "k: 'x' must be a number"),
        (1.5, 0.05, 1, "k: 1.5 must be a number from 0.05 to 1"),
    ):
        with pytest.raises(PlanError) as err:
            reading.as_number("k", value, low, high)
        assert str(err.value) == message


@pytest.mark.parametrize(
    "value, expected",
    [(True, True), ("yes", True), ("True", True), (1, True), ("0", False), ("f", False), (False, False)],
)
def test_as_bool_takes_the_parsers_words(value, expected):
    assert reading.as_bool("k", value) is expected


def test_as_bool_refusal():
    with pytest.raises(PlanError) as err:
        reading.as_bool("k", "maybe")
    assert str(err.value) == "k: 'maybe' must be true or false"


def test_choice():
    table = {"bf16": "bf16", "auto": None}
    assert reading.choice("k", "auto", table) is None  # a table entry may be None
    assert reading.choice("k", "BF16", table, any_case=True) == "bf16"
    for value in ("BF16", ["bf16"]):
        with pytest.raises(PlanError) as err:
            reading.choice("k", value, table)
        assert str(err.value) == f"k: {value!r} is not one of: bf16, auto"


def test_text_list_and_mapping_checks():
    assert reading.as_texts("k", "a") == ["a"]
    for check, value, rule in (
        (reading.as_text, 3, "must be text"),
        (reading.as_mapping, [1], "must be a mapping"),
        (reading.as_texts, ["a", 1], "must be a list of text"),
    ):
        with pytest.raises(PlanError) as err:
            check("k", value)
        assert str(err.value) == f"k: {value!r} {rule}"


def test_mapping_reads_json_as_json_and_yaml():
    assert reading.mapping('{"reduce_bucket_size": 5e8}') == {"reduce_bucket_size": 5e8}  # YAML would read text
    assert reading.mapping("{a: 1}") == {"a": 1}  # a YAML flow mapping
    assert reading.mapping("a: 1\n") == {"a": 1}
    with pytest.raises(PlanError) as err:
        reading.mapping("a: 1\na: 2\n")
    assert str(err.value).startswith("config a: ")
    with pytest.raises(PlanError) as err:
        reading.mapping("- a\n")
    assert str(err.value) == "config: must be a mapping of config keys to values (YAML or JSON)"
    assert reading.quiet_mapping("- a\n") == {} and reading.quiet_mapping("{") == {}


def test_reading_accounts_and_names_the_model():
    r = reading.Reading(format="x", plan={"framework": "x"})
    r.set("a", "workload.steps", 3)
    r.note("b", "why")
    assert r.model("m", "meta-llama/Llama-3.1-8B") == "llama-3.1-8b"
    assert r.model("m", "my/own-model") is None
    imported = r.imported()
    assert imported.plan == {"framework": "x", "workload": {"steps": 3}, "model": {"preset": "llama-3.1-8b"}}
    assert imported.unmodelled == ("b: why",) and imported.model_name == "my/own-model"
    assert [k.source for k in imported.read] == ["a", "m"]


def test_shell_words_lines_and_environment():
    text = "# a comment\nNCCL_DEBUG=INFO CONFIG_FILE=x.toml ./run.sh \\\n  --a 1 # trailing\n\n--b '2 3'\n"
    assert shell.lines(text) == ["NCCL_DEBUG=INFO CONFIG_FILE=x.toml ./run.sh    --a 1 # trailing", "--b '2 3'"]
    env, rest = shell.environment(shell.words(text))
    assert env == ["NCCL_DEBUG=INFO", "CONFIG_FILE=x.toml"] and rest == ["./run.sh", "--a", "1", "--b", "2 3"]
    with pytest.raises(PlanError) as err:
        shell.words("run --a 'x")
    assert str(err.value) == 'config: "run --a \'x" is not shell text shlex can split (No closing quotation)'


def test_other_keys_are_noted_ignored_or_unknown():
    r = reading.Reading(format="x")
    for key in ("overlap_comm", "steps_per_print", "frobnicate"):
        r.other(key, unmodelled={"overlap_comm": "a second bucket"}, ignored={"steps_per_print"})
    r.other("flag", unmodelled={}, ignored={"flag"}, name="--flag")
    assert (r.unmodelled, r.ignored, r.unknown) == (
        ["overlap_comm: a second bucket"],
        ["steps_per_print", "--flag"],
        ["frobnicate"],
    )


@pytest.mark.parametrize("value", [10**40, "1" * 5000, 1e300, -(10**31)])
def test_an_integer_past_30_digits_is_no_integer(value):
    """One check for every notation (planner/loader.py int_fits): 10^40 is no count whatever spelt it."""
    with pytest.raises(PlanError) as err:
        reading.as_int("k", value, -(10**40))
    assert err.value.rule.startswith("must be an integer ≥")
