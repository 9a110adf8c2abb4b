"""The documented examples run as written (issue 30): every `vram-planner` command of the ```bash blocks of
README.md and docs/*.md, and each worked example of the README (a command in backquotes followed by its ```text
output), runs in-process through planner.cli's
main, from a directory where `examples/` is the checkout's, on the shipped files alone.

A command ends with its documented exit status: 0, except `measure` without --dry-run where no CUDA GPU with
torch and transformers is found (the README: "it says so and exits 2"). The one command that needs the network,
`--hf-config Qwen/Qwen3-8B`, runs with huggingface_hub's download replaced by the shipped copy of that repo's
config.json (examples/qwen3-8b-config.json): the command line, the repo-id path and the plan it gives are the
README's; only the fetch is not. Lines of the bash blocks that are not the planner's (pip, streamlit, python
bench/...) are other programs' and are not run here.
"""

import importlib
import importlib.util
import io
import re
import shlex
import sys
import types
from pathlib import Path

import pytest
import yaml

from planner.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
# the README and the topic files it links to: every command any of them shows runs here
DOCUMENTED = "\n".join([README, *(path.read_text() for path in sorted((ROOT / "docs").glob("*.md")))])
PROGRAM = ("vram-planner",)
HUB_REPO, HUB_COPY = "Qwen/Qwen3-8B", ROOT / "examples" / "qwen3-8b-config.json"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
# a worked example: "`vram-planner ...`:" then its output in a text block
WORKED = re.compile(r"`(vram-planner [^`]+)`:\n\n```text\n(.*?)^```$", re.M | re.S)


def _blocks(language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(DOCUMENTED) if lang == language]


def block_commands() -> list[str]:
    """Each line of the documents' bash blocks that runs the planner (its trailing comment dropped by shlex)."""
    return [
        line.strip()
        for body in _blocks("bash")
        for line in body.splitlines()
        if "vram-planner" in line and not line.lstrip().startswith("#")
    ]


def worked_examples() -> list[tuple[str, list[str]]]:
    return [
        (command, [line for line in output.splitlines() if line.strip()]) for command, output in WORKED.findall(README)
    ]


def _argv(line: str) -> tuple[list[str], str | None, str | None]:
    """The planner's arguments, the text piped in from `echo '...' |`, and the file `> FILE` writes."""
    words = shlex.split(line, comments=True)
    stdin = out = None
    if "|" in words:
        bar = words.index("|")
        assert words[0] == "echo" and bar == 2, line  # the only pipe the README shows
        stdin, words = words[1] + "\n", words[bar + 1 :]
    if len(words) > 2 and words[-2] == ">":
        out, words = words[-1], words[:-2]
    assert tuple(words[:1]) == PROGRAM, line
    return words[1:], stdin, out


def _hub_download(repo_id: str, filename: str) -> str:
    assert (repo_id, filename) == (HUB_REPO, "config.json")
    return str(HUB_COPY)


def _gpu_measures() -> bool:
    """Whether `measure` can run here: torch, transformers and peft installed, and a CUDA GPU."""
    if not all(importlib.util.find_spec(name) for name in ("torch", "transformers", "peft")):
        return False
    return importlib.import_module("torch").cuda.is_available()


def run(line: str, tmp_path: Path, monkeypatch, capsys) -> tuple[int, str, str]:
    """The command run in-process from tmp_path (examples/ linked in), its exit status, stdout and stderr."""
    argv, stdin, out = _argv(line)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin or ""))
    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(hf_hub_download=_hub_download))
    capsys.readouterr()
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse: a usage error
        rc = exc.code
    stdout, stderr = capsys.readouterr()
    if out is not None:
        Path(out).write_text(stdout)
    return rc, stdout, stderr


@pytest.mark.parametrize("line", block_commands())
def test_each_command_runs_as_written(line, tmp_path, monkeypatch, capsys):
    rc, stdout, stderr = run(line, tmp_path, monkeypatch, capsys)
    argv = _argv(line)[0]
    if argv[0] == "measure" and "--dry-run" not in argv and not _gpu_measures():
        assert (rc, stderr.startswith("error: measure: needs ")) == (2, True), stderr
        return
    assert rc == 0, stderr
    assert stdout.strip()


@pytest.mark.parametrize("command, shown", worked_examples(), ids=lambda v: v if isinstance(v, str) else "")
def test_each_worked_example_prints_what_the_readme_shows(command, shown, tmp_path, monkeypatch, capsys):
    """Each line the README shows is a line of the output; one the README cuts at '…' begins one."""
    rc, stdout, stderr = run(command, tmp_path, monkeypatch, capsys)
    assert rc == 0, stderr
    lines = stdout.splitlines()
    for want in shown:
        head, cut, _ = want.partition("…")
        assert any(got.startswith(head.rstrip()) if cut else got == want for got in lines), want


def test_the_readme_has_the_examples_the_tests_run():
    """The extraction finds every planner line of the bash blocks (none is left unparsed) and the README's worked
    examples; documents whose examples moved out of reach fail here rather than running nothing."""
    commands = block_commands()
    assert len(commands) >= 30 and all(_argv(line)[0] for line in commands)
    cli = (ROOT / "docs" / "cli.md").read_text()
    assert all(line in commands for line in cli.splitlines() if line.startswith("vram-planner "))
    assert [c.split()[1] for c, _ in worked_examples()] == ["recommend", "recommend", "recommend"]
    assert {c for c in commands if "Qwen/Qwen3-8B" in c} == {"vram-planner estimate --hf-config Qwen/Qwen3-8B"}


def test_the_hub_example_plans_the_shipped_config(monkeypatch, capsys):
    """The Hub example's stand-in is the file the offline example reads: both plan Qwen3 8B's architecture."""
    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(hf_hub_download=_hub_download))
    models = []
    for source in (HUB_REPO, str(HUB_COPY)):
        assert main(["estimate", "--hf-config", source, "--format", "yaml"]) == 0
        models.append(yaml.safe_load(capsys.readouterr().out)["plan"]["model"])
    assert models[0] == models[1]
    assert (models[0]["num_layers"], models[0]["hidden_size"], models[0]["vocab_size"]) == (36, 4096, 151_936)


def test_the_readme_offerings_block_is_the_shipped_file():
    offerings = next(body for body in _blocks("yaml") if "vram-planner-offerings/v1" in body)
    assert yaml.safe_load(offerings) == yaml.safe_load((ROOT / "examples" / "our-cluster-offerings.yaml").read_text())


# each worked example's lead sentence in the README, and the plan values its numbers state
LEADS = {
    "llama-3.1-8b-pretrain-1t-tokens.yaml": (
        "Llama 3.1 8B on a trillion tokens (sequence 8,192, global batch 512)",
        {"sequence_length": 8192, "global_batch_size": 512, "train_tokens": 10**12},
    ),
    "llama-3.1-70b-qlora.yaml": (
        "Llama 3.1 70B QLoRA on 100M tokens at 4,096 tokens",
        {"task": "qlora", "train_tokens": 10**8, "sequence_length": 4096},
    ),
    "llama-3.1-70b-serving.yaml": (
        "Llama 3.1 70B on vLLM (90 % of memory), prompts of 2,048 and 512 output",
        {"inference": {"batch_size": 32, "prompt_tokens": 2048, "output_tokens": 512, "gpu_memory_utilization": 0.9}},
    ),
}


@pytest.mark.parametrize("name", LEADS)
def test_each_worked_examples_lead_states_its_plan(name):
    lead, workload = LEADS[name]
    plan = yaml.safe_load((ROOT / "examples" / name).read_text())
    assert " ".join(README.split()).count(lead) == 1 and f"examples/{name}" in " ".join(c for c, _ in worked_examples())
    assert {key: plan["workload"][key] for key in workload} == workload
