"""planner/formats: the shared reader helpers and the registry."""

import contextlib
from pathlib import Path

import pytest

from planner.errors import OverLimit, PlanError
from planner.formats import FORMATS, detect, format_named, megatron, overlay, read_config, reading, torchtitan
from planner.formats.base import (
    Imported,
    KeyRead,
    get_key,
    marked,
    preset_for,
    serving_defaults,
    set_key,
    training_defaults,
)


@pytest.mark.parametrize(
    "name, preset",
    [
        ("meta-llama/Llama-3.1-8B", "llama-3.1-8b"),
        ("meta-llama/llama-3.1-8b-instruct", "llama-3.1-8b"),  # any case; an instruct release is the base's shape
        ("./assets/hf/Llama-3.1-8B", "llama-3.1-8b"),  # a local copy named for the repo
        ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
        ("google/gemma-2-9b-it", "gemma-2-9b"),
        ("neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8", "llama-3.1-70b"),  # a quantized release
        ("Qwen/Qwen2.5-7B-Instruct-AWQ", "qwen2.5-7b"),
        ("NousResearch/Meta-Llama-3-8B", "llama-3.1-8b"),  # a mirror of a repo of the preset's architecture
        ("casperhansen/llama-3-70b-fp16", "llama-3.1-70b"),
        ("meta-llama/Llama-3.3-70B-Instruct", "llama-3.1-70b"),
        ("llama-3.1-70b", "llama-3.1-70b"),  # a preset id
        ("acme/secret-model-7b", None),
    ],
)
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
    assert out == {
        "model": {"preset": "llama-3.1-8b"},
        "workload": {"task": "pretrain", "sequence_length": 8192},
        "framework": "torchtitan",
    }
    assert base["workload"]["sequence_length"] == 4096


def test_unknown_format_and_undetectable_text():
    with pytest.raises(PlanError, match=r"^--framework: 'nemo' is not a config format; allowed: "):
        format_named("nemo")
    with pytest.raises(PlanError, match=r"^config: is not a config this planner reads"):
        detect("hello world")


CONFIGS = Path(__file__).parent / "data" / "configs"
STORED = sorted((path.parent.name, path) for path in CONFIGS.glob("*/*") if path.name != "SOURCES.md")
# small configs of each format: detected as their own format only
OWN = [
    ("torchtune", "model:\n  _component_: torchtune.models.llama3_1.lora_llama3_1_8b\nbatch_size: 2\n"),
    ("deepspeed", '{"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 1}'),
    ("vllm", "vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size 2 --max-model-len 8192"),
]


@pytest.mark.parametrize("name, path", STORED, ids=[f"{n}/{p.name}" for n, p in STORED])
def test_each_stored_config_is_detected_as_its_format_only(name, path):
    text = path.read_text()
    assert detect(text) is FORMATS[name]
    assert [fmt.name for fmt in FORMATS.values() if fmt.detect(text)] == [name]


@pytest.mark.parametrize("name, text", OWN, ids=[name for name, _ in OWN])
def test_a_small_config_is_detected_as_its_format_only(name, text):
    assert [fmt.name for fmt in FORMATS.values() if fmt.detect(text)] == [name]


def test_plan_from_config_fills_or_replaces_the_model():
    from planner.formats import plan_from_config, read_config

    named = read_config("vllm serve Qwen/Qwen2.5-7B-Instruct", gpus=1)
    silent = read_config('{"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 1}', gpus=8)
    llama = {"preset": "llama-3.1-8b"}
    assert plan_from_config(named, default_model=llama).model.preset == "qwen2.5-7b"  # the config's own model
    assert plan_from_config(named, model=llama).model.preset == "llama-3.1-8b"  # replaced
    assert plan_from_config(silent, default_model=llama).model.preset == "llama-3.1-8b"  # filled
    with pytest.raises(PlanError, match=r"^model: the deepspeed config names no model; give the model"):
        plan_from_config(silent)


# --- issue 27: one parse of each kind per document, and what a parse refuses is the answer --------------------------
def _counting(monkeypatch, module, name):
    calls = []
    original = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *args, **kwargs: calls.append(1) or original(*args, **kwargs))
    return calls


@pytest.mark.parametrize("name, path", STORED, ids=[f"{n}/{p.name}" for n, p in STORED])
def test_detecting_and_reading_a_config_parses_it_once(monkeypatch, name, path):
    """The six YAML detectors, torchtitan's and Megatron's each used to parse the text again (and read once more).
    A torchtitan config registry is parsed once as Python and is known before any TOML parse."""
    yaml_loads = _counting(monkeypatch, reading, "load_yaml")
    toml_loads = _counting(monkeypatch, torchtitan, "parse_toml")
    scripts = _counting(monkeypatch, megatron, "parse")
    registries = _counting(monkeypatch, torchtitan, "registry")
    with contextlib.suppress(PlanError):  # a config that needs the GPU count given: its reading is not the point
        read_config(path.read_text())
    python = path.suffix == ".py" and name == "torchtitan"  # a registry (an Unsloth script is no TOML either)
    assert len(yaml_loads) <= 1 and len(toml_loads) == (0 if python else 1) and len(scripts) <= 1
    assert len(registries) <= 1 and (len(registries) == 1 or not python)


@pytest.mark.parametrize(
    "text, message",
    [
        ("{" * 2000, "config: nested too deeply to be a framework config"),
        (
            "model: &a " + "x" * 100_000 + "\nmax_num_seqs: [" + ", ".join(["*a"] * 3_000) + "]\n",
            "config: expands to more than 262,144 characters of text through its aliases; that is not a framework "
            "config",
        ),
        (
            "A=x\n" + "A=$A$A\n" * 20 + "--num-layers 2 --seq-length $A\n",
            "config: substitutes shell variables more than 10,000 times or into more than 262,144 characters; that is "
            "not a script",
        ),
        ("x" * (2 * 1024 * 1024), "config: 2,097,152 bytes is larger than the 262,144-byte limit"),
    ],
)
def test_a_document_over_a_limit_is_refused_for_it_not_as_no_config(text, message):
    with pytest.raises(OverLimit) as err:
        detect(text)
    assert str(err.value) == message


def test_a_name_too_long_for_a_repo_is_no_preset():
    """The variant suffixes' regex is quadratic in a name's length: a 100 kB name is not tried."""
    assert preset_for("Llama-3.1-8B" + "-1234" * 20_000 + "x") is None
    assert preset_for("x" * 255) is None and preset_for("a/" * 300_000 + "Llama-3.1-8B") == "llama-3.1-8b"


def test_marked_names_each_default_taken_and_leaves_the_plan_silent():
    """A key the config sets stays as read; one it does not is read as its default, "(absent: why)"; the plan dict
    stays silent on it, so a base plan laid under it keeps its own."""
    from_config = Imported(
        format="x",
        plan={"workload": {"task": "lora"}},
        read=(KeyRead(source="adapter", plan_key="workload.task", value="lora"),),
    )
    out = marked(from_config, training_defaults("X"))
    assert out.plan == from_config.plan
    assert [(r.source, r.plan_key, r.value) for r in out.read] == [
        ("adapter", "workload.task", "lora"),
        (
            "(absent: the X config does not say the sequence length: the plan's default 4096)",
            "workload.sequence_length",
            4096,
        ),
        ("(absent: the X config does not say the micro-batch: the plan's default 1)", "workload.micro_batch_size", 1),
    ]
    serving = marked(Imported(format="y", plan={}), serving_defaults("--len", "E"))
    assert {r.plan_key: r.value for r in serving.read} == {
        "workload.inference.prompt_tokens": 1024,
        "workload.inference.output_tokens": 256,
        "workload.inference.batch_size": 1,
    }
