"""planner/formats/edit.py and export_onto: a config the plan was imported from, exported back, is the original byte
for byte where the plan changes nothing, and differs in exactly the lines of the keys the plan changes, each named
with its old and new text. Every stored config of a format that writes (and the shared corpus, where it is here),
then each syntax's edits by hand."""

import difflib
import re
from pathlib import Path

import pytest
from config_data import CONFIGS, config_files, config_text

from planner.errors import PlanError
from planner.formats import FORMATS, export_onto, plan_from_config, read_config
from planner.formats.base import set_key
from planner.formats.edit import REMOVED, Change, edit_text, syntax
from planner.plan.codec import plan_from_dict, plan_to_dict

SHARED = Path("/work/shared/configs")
# the GPUs and model a stored config runs on where it does not say them (as its format's own tests read it)
GPUS = {"gpt_175b_tp8_pp16.sh": 1024, "moe_8x7b_ep8.sh": 64}
MODELS = {"moe_8x7b_ep8.sh": {"preset": "mixtral-8x7b"}}
# stored configs whose own plan no writer can write: export_onto refuses them, naming why
REFUSED = {
    "w8a8_one_gpu.sh": "precision.weights: 'int8' has no vLLM --quantization",
    "registry_refactor.py": "the config registry defines 7 configs",
    "registry_tokens.py": "the config registry defines 2 configs",
    "registry_llama3_8b.py": "config registries are Python functions",
    "zero2_legacy_cpu_offload.json": "train_batch_size: 4 is less than one sequence per GPU",
}


def imported(fmt: str, text: str, name: str = ""):
    """The plan a config says, as `vram-planner import` makes it: over the GPU count it names, else 8 (or its
    format's tests' count), and over llama-3.1-8b where it names no model."""
    gpus = GPUS.get(name, 8)
    found = read_config(text, format=fmt)
    if "count" not in found.plan.get("hardware", {}):
        found = read_config(text, format=fmt, gpus=gpus)
    return plan_from_config(found, model=MODELS.get(name), default_model={"preset": "llama-3.1-8b"}, gpus=gpus)


def diff(a: str, b: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(a.split("\n"), b.split("\n"), lineterm="", n=0)
        if not line.startswith(("---", "+++", "@@"))
    ]


WRITERS = [(fmt, name) for fmt in FORMATS if FORMATS[fmt].write for name in config_files(fmt)]


@pytest.mark.parametrize(("fmt", "name"), WRITERS)
def test_an_unchanged_plan_exports_its_config_byte_for_byte(fmt, name):
    text = config_text(fmt, name)
    try:
        plan = imported(fmt, text, name)
        edited, _ = export_onto(plan, FORMATS[fmt], text)
    except PlanError as exc:
        assert name in REFUSED and REFUSED[name] in str(exc)
        return
    assert name not in REFUSED and edited.text == text and edited.changes == ()


@pytest.mark.corpus
@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared config corpus (../shared/configs) is not here")
def test_the_shared_corpus_comes_back_byte_for_byte():
    exported = 0
    for fmt in (f for f in FORMATS if FORMATS[f].write and (SHARED / f).is_dir()):
        for path in sorted(p for p in (SHARED / fmt).iterdir() if p.suffix != ".md"):
            text = path.read_text()
            try:
                edited, _ = export_onto(imported(fmt, text), FORMATS[fmt], text)
            except PlanError:  # a config it cannot import or write: the error is its format's tests'
                continue
            assert (path.name, edited.text, edited.changes) == (path.name, text, ())
            exported += 1
    assert exported > 100


def changed(fmt: str, name: str, **keys) -> tuple[list[str], list[str]]:
    """The lines that differ and the changes listed where the imported plan's keys (dotted, "__" for ".") change."""
    text = config_text(fmt, name)
    plan = imported(fmt, text, name)
    data = plan_to_dict(plan)
    for key, value in keys.items():
        set_key(data, key.replace("__", "."), value)
    edited, _ = export_onto(plan_from_dict(data), FORMATS[fmt], text, base=plan)
    return diff(text, edited.text), [c.line() for c in edited.changes]


@pytest.mark.parametrize(
    ("fmt", "name", "keys", "lines", "listed"),
    [
        (
            "torchtune",
            "llama3_1_8B_lora_single_device.yaml",
            {"workload__sequence_length": 2048},
            ["-  max_seq_len: null", "+  max_seq_len: 2048"],
            ["tokenizer.max_seq_len: null → 2048"],
        ),
        (
            "torchtune",
            "llama3_1_8B_lora_single_device.yaml",
            {"workload__micro_batch_size": 4, "workload__global_batch_size": 32},
            ["-batch_size: 2", "+batch_size: 4"],
            ["batch_size: 2 → 4"],
        ),
        (
            "axolotl",
            "lora_int8_8b.yaml",
            {"workload__sequence_length": 2048},
            ["-sequence_len: 4096", "+sequence_len: 2048"],
            ["sequence_len: 4096 → 2048"],
        ),
        (
            "hf_trainer",
            "sft_lora_cli.sh",
            {"workload__micro_batch_size": 4, "workload__global_batch_size": 256},
            ["-    --per_device_train_batch_size 2 \\", "+    --per_device_train_batch_size 4 \\"],
            ["--per_device_train_batch_size: 2 → 4"],
        ),
        (
            "deepspeed",
            "zero2_micro8_accum3.json",
            {"parallelism__zero_stage": 1},
            ['-    "stage": 2,', '+    "stage": 1,'],
            ["zero_optimization.stage: 2 → 1"],
        ),
        (
            "deepspeed",
            "zero2_offload_auto.json",
            {"workload__micro_batch_size": 4, "workload__global_batch_size": 64},
            [
                '-    "train_batch_size": "auto",',
                '-    "train_micro_batch_size_per_gpu": "auto",',
                '-    "gradient_accumulation_steps": "auto",',
                '+    "train_batch_size": 64,',
                '+    "train_micro_batch_size_per_gpu": 4,',
                '+    "gradient_accumulation_steps": 2,',
            ],
            [
                'train_batch_size: "auto" → 64',
                'train_micro_batch_size_per_gpu: "auto" → 4',
                'gradient_accumulation_steps: "auto" → 2',
            ],
        ),
        (
            "accelerate",
            "ddp_eight_gpus.yaml",
            {"hardware__count": 4, "parallelism__data": 4},
            ["-num_processes: 8", "+num_processes: 4"],
            ["num_processes: 8 → 4"],
        ),
        (
            "megatron",
            "llama3_8b_fp8.sh",
            {"workload__micro_batch_size": 2},
            ["-MICRO_BATCH_SIZE=1", "+MICRO_BATCH_SIZE=2"],
            ["MICRO_BATCH_SIZE (--micro-batch-size): 1 → 2"],
        ),
        (
            "vllm",
            "fp8_kv.yaml",
            {"workload__inference__max_num_seqs": 128},
            ["+max-num-seqs: 128"],
            ["max-num-seqs: unset → 128"],
        ),
        (
            "sglang",
            "moe_tp4.sh",
            {"workload__inference__max_num_seqs": 64},
            [
                "-python3 -m sglang.launch_server --model Qwen/Qwen3-Next-80B-A3B-Instruct --tp 4",
                "+python3 -m sglang.launch_server --model Qwen/Qwen3-Next-80B-A3B-Instruct --tp 4 "
                "--max-running-requests 64",
            ],
            ["--max-running-requests: unset → 64"],
        ),
        (
            "torchtitan",
            "llama3_8b.toml",
            {"workload__sequence_length": 4096},
            ["-seq_len = 8192", "+seq_len = 4096"],
            ["training.seq_len: 8192 → 4096"],
        ),
    ],
)
def test_a_changed_key_changes_its_line_only(fmt, name, keys, lines, listed):
    assert changed(fmt, name, **keys) == (lines, listed)


def test_a_config_of_another_format_or_a_registry_is_refused():
    text = config_text("torchtune", "llama3_1_8B_lora.yaml")
    with pytest.raises(
        PlanError,
        match=r"^--onto: the config is not a DeepSpeed config \(JSON\): give the config "
        "the plan was imported from$",
    ):
        export_onto(imported("torchtune", text), FORMATS["deepspeed"], text)
    registry = config_text("torchtitan", "registry_llama3_8b.py")
    with pytest.raises(
        PlanError,
        match="^--onto: 'torchtitan' config registries are Python functions, which an "
        r"export does not edit; export without the original \(a TOML\)$",
    ):
        export_onto(imported("torchtitan", registry), FORMATS["torchtitan"], registry)


def test_a_change_says_its_key_old_and_new():
    assert Change(key="batch_size", old="2", new="4").line() == "batch_size: 2 → 4"
    assert Change(key="--enforce-eager", old=None, new="set").line() == "--enforce-eager: unset → set"
    assert Change(key="use_dora", old="True", new=None).line() == "use_dora: True → removed"


YAML = "a: 1  # one\nmodel:\n  x: 2\n  list:\n    - p\n    - q\n  on: True\n\nz: 'w'\n"


@pytest.mark.parametrize(
    ("path", "value", "text", "line"),
    [
        (("a",), 5, "a: 5  # one\nmodel:\n  x: 2\n  list:\n    - p\n    - q\n  on: True\n\nz: 'w'\n", "a: 1 → 5"),
        (("model", "on"), False, YAML.replace("on: True", "on: False"), "model.on: True → False"),
        (("z",), "v w", YAML.replace("'w'", "'v w'"), "z: 'w' → 'v w'"),
        (("model", "list"), ["r"], YAML.replace("list:\n    - p\n    - q", "list: [r]"), "model.list: [p, q] → [r]"),
        (("model", "y"), 3, YAML.replace("  on: True\n", "  on: True\n  y: 3\n"), "model.y: unset → 3"),
        (("new", "k"), 1, YAML + "new:\n  k: 1\n", "new.k: unset → 1"),
        (("model", "list"), REMOVED, YAML.replace("  list:\n    - p\n    - q\n", ""), "model.list: [p, q] → removed"),
    ],
)
def test_yaml_edits_keep_every_other_byte(path, value, text, line):
    edited = edit_text(YAML, "yaml", {path: value})
    assert (edited.text, [c.line() for c in edited.changes]) == (text, [line])


JSON = '{\n  "a": "auto",\n  "zero": {\n    "stage": 2\n  }\n}\n'


@pytest.mark.parametrize(
    ("path", "value", "text", "line"),
    [
        (("a",), 4, JSON.replace('"auto"', "4"), 'a: "auto" → 4'),
        (
            ("zero", "offload"),
            {"device": "cpu"},
            JSON.replace('"stage": 2\n', '"stage": 2,\n    "offload": {\n      "device": "cpu"\n    }\n'),
            'zero.offload: unset → {"device": "cpu"}',
        ),
        (("zero", "stage"), REMOVED, JSON.replace('\n    "stage": 2', ""), "zero.stage: 2 → removed"),
        (("a",), REMOVED, JSON.replace('"a": "auto",\n  ', ""), 'a: "auto" → removed'),
    ],
)
def test_json_edits_in_place(path, value, text, line):
    edited = edit_text(JSON, "json", {path: value})
    assert (edited.text, [c.line() for c in edited.changes]) == (text, [line])


TOML = "[training]\nseq_len = 8192  # long\n\n[parallelism]\ntp = 2\n"


@pytest.mark.parametrize(
    ("path", "value", "text", "line"),
    [
        (("training", "seq_len"), 4096, TOML.replace("8192", "4096"), "training.seq_len: 8192 → 4096"),
        (("training", "steps"), 10, TOML.replace("# long\n", "# long\nsteps = 10\n"), "training.steps: unset → 10"),
        (("compile", "enable"), True, TOML + "\n[compile]\nenable = true\n", "compile.enable: unset → true"),
    ],
)
def test_toml_edits_line_by_line(path, value, text, line):
    edited = edit_text(TOML, "toml", {path: value})
    assert (edited.text, [c.line() for c in edited.changes]) == (text, [line])


SH = "TP=2\nvllm serve m \\\n  --tensor-parallel-size $TP \\\n  --enforce-eager  # fast start\n"


@pytest.mark.parametrize(
    ("flag", "value", "text", "line"),
    [
        ("--tensor-parallel-size", "4", SH.replace("TP=2", "TP=4"), "TP (--tensor-parallel-size): 2 → 4"),
        (
            "--enforce-eager",
            REMOVED,
            SH.replace(" \\\n  --enforce-eager  # fast start", ""),
            "--enforce-eager: set → removed",
        ),
        (
            "--max-num-seqs",
            "8",
            SH.replace("--enforce-eager  # fast start", "--enforce-eager \\\n  --max-num-seqs 8 # fast start"),
            "--max-num-seqs: unset → 8",
        ),
    ],
)
def test_command_lines_edit_flag_by_flag(flag, value, text, line):
    edited = edit_text(SH, "sh", {(flag,): value}, program=re.compile(r"vllm serve"))
    assert (edited.text, [c.line() for c in edited.changes]) == (text, [line])


@pytest.mark.parametrize(
    ("text", "kind"), [("{}", "json"), ("a: 1\n", "yaml"), ("vllm serve m\n", "sh"), ("def f():\n  pass\n", "python")]
)
def test_the_originals_syntax(text, kind):
    assert syntax(text, ".yaml") == kind


def test_the_stored_configs_are_all_checked():
    assert {fmt for fmt, _ in WRITERS} == {f for f in FORMATS if FORMATS[f].write} and CONFIGS.is_dir()
