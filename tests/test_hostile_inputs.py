"""Inputs a stranger can send a hosted planner (tests/data/hostile/, each a reproduction of a failure found by
trying; and the larger ones of issue 27, made here): every one ends in one PlanError line naming the field, never
a traceback or a runaway. Their speed is bench/fuzz.py's to measure (a shared CI machine's clock is not a
test): each input here is big enough that a quadratic reader would take many seconds."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from planner.cli import main

HOSTILE = ROOT / "tests" / "data" / "hostile"
FILE = "FILE"  # where a command line takes the reproduction
PLAN = str(ROOT / "examples" / "llama-3.1-8b-8xh100.yaml")
NESTED = "config: nested too deeply to be a framework config"
LONG_INT = "holds an integer of more than 30 digits; that is not"

CASES = [
    ("framework-rule-reads-a-list-section.yaml", ["estimate", FILE], "hardware: ['a', 'b'] must be a mapping"),
    (
        "framework-rule-multiplies-a-string.yaml",
        ["estimate", FILE],
        "parallelism.tensor: 'xxxxxxxxxxxxxxxx' must be an integer from 1 to 65,536",
    ),
    ("preset-is-a-list.yaml", ["estimate", FILE], "model.preset: ['a', 'b'] must be text"),
    (
        "list-as-a-mapping-key.yaml",
        ["estimate", FILE],
        "plan: not valid YAML at line 1, column 3 (found unhashable key)",
    ),
    (
        "alias-bomb-in-a-value.yaml",
        ["estimate", FILE],
        "plan: expands to more than 100,000 values through its aliases; that is not a plan",
    ),
    (
        "config-5000-digit-integer.json",
        ["estimate", "--hf-config", FILE],
        "hf_config: holds an integer of 5,000 digits; no value of a config.json has more than 30",
    ),
    ("config-nan.json", ["estimate", "--hf-config", FILE], "hf_config: not valid JSON (NaN is not a JSON number)"),
    (
        "config-int-where-a-list-is-expected.json",
        ["estimate", "--hf-config", FILE],
        "hf_config.mlp_only_layers: 5 must be a list of layer indices",
    ),
    # issue 27: tracebacks, hexadecimal integers past the digit cap, nesting and expansion that ran away
    ("vllm-log-figure-1.2.3.log", ["vllm-log", FILE], "log: '1.2.3' is not a figure vLLM prints (weights)"),
    ("vllm-log-count-without-digits.log", ["vllm-log", FILE], "log: ',' is not a figure vLLM prints (kv tokens)"),
    ("vllm-log-400-digit-figure.log", ["vllm-log", FILE], "log: '1111111111111111111111111111111111111..."),
    ("vllm-log-5000-digit-version.log", ["vllm-log", FILE], "log: '1111111111111111111111111111111111111..."),
    ("vllm-log-args-key-is-a-call.log", ["vllm-log", FILE], "non-default args: 'f(x)' is not an argument's name"),
    ("vllm-log-args-key-is-a-list.log", ["vllm-log", FILE], "non-default args: '[1]' is not an argument's name"),
    ("vllm-log-args-double-star.log", ["vllm-log", FILE], "non-default args: '**kw' is not an argument's name"),
    ("torchtitan-model-name-is-a-list.toml", ["import", FILE], "model.name: ['llama3'] must be text"),
    ("torchtitan-converters-is-an-integer.toml", ["import", FILE], "model.converters: 5 must be a list of text"),
    ("torchtitan-converters-is-a-boolean.toml", ["import", FILE], "model.converters: True must be a list of text"),
    (
        "torchtitan-converters-is-a-date.toml",
        ["import", FILE],
        "model.converters: datetime.date(1979, 5, 27) must be a list of text",
    ),
    (
        "torchtitan-nested-compile-components.toml",
        ["import", FILE],
        "compile.components: [['model']] must name model, loss or both",
    ),
    ("torchtitan-5000-dotted-levels.toml", ["import", FILE], NESTED),
    ("torchtitan-3000-nested-inline-tables.toml", ["import", FILE], NESTED),
    ("torchtitan-5000-digit-integer.toml", ["import", FILE], f"config: {LONG_INT} a framework config"),
    (
        "torchtitan-4000-hex-digits.toml",
        ["import", "--framework", "torchtitan", FILE],
        f"config: {LONG_INT} a framework config",
    ),
    ("plan-4000-hex-digits.yaml", ["estimate", FILE], f"plan: {LONG_INT} a plan"),
    ("catalog-4000-hex-digits.yaml", ["estimate", PLAN, "--catalog", FILE], f"gpu_catalog: {LONG_INT} a catalog"),
    ("plan-2000-braces.yaml", ["estimate", FILE], "plan: nested too deeply to be a plan"),
    ("import-2000-braces.txt", ["import", FILE], NESTED),
    (
        "megatron-variables-double-each-line.sh",
        ["import", FILE],
        "config: substitutes shell variables more than 10,000 times or into more than 262,144 characters; that is "
        "not a script",
    ),
]


def _argv(argv: list[str], path: str) -> list[str]:
    return [path if arg == FILE else arg for arg in argv]


@pytest.mark.parametrize("name, argv, message", CASES)
def test_hostile_input_is_one_error_line(name, argv, message, capsys):
    assert main(_argv(argv, str(HOSTILE / name))) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1 and len(err) < 400


def test_every_reproduction_file_is_tested():
    assert {p.name for p in HOSTILE.iterdir()} == {case[0] for case in CASES}


LOADED = "INFO [gpu_model_runner.py:1] Model loading took 14.99 GiB and 3.1 seconds\n"
# the issue's 700 kB value aliased 30,000 times (21 GB written out) cut to 100 kB and 3,000 (300 MB): a reader
# that wrote it out again would fail here without exhausting a CI machine's memory
ALIASED = (
    "model: &a " + "x" * 100_000 + "\nmax_num_seqs: [" + ", ".join(["*a"] * 3_000) + "]\n"
    "tensor_parallel_size: 1\ngpu_memory_utilization: 0.9\n"
)


@pytest.mark.parametrize(
    "command, text, message",
    [
        # 1: a figure's regex tried at each position of a run, each time taking the rest of it (40 kB: 35-45 s)
        ("vllm-log", LOADED + "1" * 40_000 + "\n", "log: names no model; give a PLAN.yaml to compare with"),
        ("vllm-log", LOADED + "." * 40_000 + "\n", "log: names no model; give a PLAN.yaml to compare with"),
        ("vllm-log", LOADED + "non-default args: {" * 20_000 + "\n", "log: names no model; give a PLAN.yaml"),
        # Megatron's ${NAME:-default} scanned to the line's end from each ${ (80 kB: 29 s)
        ("import", "--num-layers 2 --seq-length 8 " + "${a:-" * 16_000 + "\n", "--seq-length: ['8', '${a:-${a:-"),
        # 2: a long value aliased many times, under every cap but the one on what its aliases expand to
        ("import", ALIASED, "config: expands to more than 262,144 characters of text through its aliases"),
        # 3: one 900 kB word, split a character at a time by shlex three times over (45 s): over the size cap, and
        # within it one pass of each parse
        ("import", "vllm serve " + "a" * 900_000 + "\n", "config: 900,012 bytes is larger than the 262,144-byte limit"),
        ("import", "vllm serve " + "a" * 250_000 + "\n", "model: the vllm config names 'aaaaaaaaaaaaaaaaaaaaaaaaaaa"),
    ],
)
def test_issue_27_inputs_are_one_error_line(command, text, message, capsys, tmp_path):
    path = tmp_path / "input.txt"
    path.write_text(text)
    assert main([command, str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1 and len(err) < 400


# VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss across exec, so a child of a 500 MiB pytest process
# reported pytest's own peak (CI failed on 521 MiB that were not the readers'); VmHWM is this process's own
_MEASURE = """
import json, sys
from planner.cli import main
for argv in json.loads(sys.argv[1]):
    main(argv)
print(next(line for line in open("/proc/self/status") if line.startswith("VmHWM:")))
"""


@pytest.mark.cli
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="VmHWM is Linux's")
def test_all_hostile_inputs_together_stay_under_256_mib():
    """The process that reads every reproduction peaks under 256 MiB resident (Linux reports kB)."""
    commands = json.dumps([_argv(argv, str(HOSTILE / name)) for name, argv, _ in CASES])
    run = subprocess.run(
        [sys.executable, "-c", _MEASURE, commands], capture_output=True, text=True, cwd=ROOT, timeout=120, check=True
    )
    peak_kib = int(run.stdout.split()[-2])
    assert peak_kib < 256 * 1024, f"peak resident memory {peak_kib / 1024:,.0f} MiB"
