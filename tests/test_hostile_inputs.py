"""Inputs a stranger can send a hosted planner (tests/data/hostile/, each a reproduction of a failure found by
trying): every one ends in one PlanError line naming the field, quickly, never a traceback or a runaway."""

import subprocess
import sys
import time

import pytest

from conftest import ROOT
from planner.cli import main

HOSTILE = ROOT / "tests" / "data" / "hostile"


@pytest.mark.parametrize("name, args, message", [
    ("framework-rule-reads-a-list-section.yaml", [], "hardware: ['a', 'b'] must be a mapping"),
    ("framework-rule-multiplies-a-string.yaml", [],
     "parallelism.tensor: 'xxxxxxxxxxxxxxxx' must be an integer from 1 to 65,536"),
    ("preset-is-a-list.yaml", [], "model.preset: ['a', 'b'] must be text"),
    ("list-as-a-mapping-key.yaml", [], "plan: not valid YAML at line 1, column 3 (found unhashable key)"),
    ("alias-bomb-in-a-value.yaml", [],
     "plan: expands to more than 100,000 values through its aliases; that is not a plan"),
    ("config-5000-digit-integer.json", ["--hf-config"],
     "hf_config: holds an integer of 5,000 digits; no value of a config.json has more than 30"),
    ("config-nan.json", ["--hf-config"], "hf_config: not valid JSON (NaN is not a JSON number)"),
    ("config-int-where-a-list-is-expected.json", ["--hf-config"],
     "hf_config.mlp_only_layers: 5 must be a list of layer indices"),
])
def test_hostile_input_is_one_error_line_in_under_two_seconds(name, args, message, capsys):
    start = time.perf_counter()
    assert main(["estimate", *args, str(HOSTILE / name)]) == 2
    assert time.perf_counter() - start < 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1


def test_every_reproduction_file_is_tested():
    names = {p.name for p in HOSTILE.iterdir()}
    tested = {case[0] for case in test_hostile_input_is_one_error_line_in_under_two_seconds.pytestmark[0].args[1]}
    assert names == tested


_MEASURE = """
import resource, sys
from pathlib import Path
from planner.cli import main
for path in sorted(Path(sys.argv[1]).iterdir()):
    main(["estimate", *(["--hf-config"] if path.suffix == ".json" else []), str(path)])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def test_all_hostile_inputs_together_stay_under_512_mib():
    """The process that reads every reproduction peaks under 512 MiB resident (Linux reports KiB)."""
    run = subprocess.run([sys.executable, "-c", _MEASURE, str(HOSTILE)], capture_output=True, text=True, cwd=ROOT,
                         timeout=60, check=True)
    peak_kib = int(run.stdout.split()[-1])
    assert peak_kib < 512 * 1024, f"peak resident memory {peak_kib / 1024:,.0f} MiB"
