"""What the serving engines' command-line formats share (vLLM, SGLang): finding the command in a pasted script,
splitting it into flags, reading each flag through a table, and writing a plan back as one command.

A table (`Engine`) says, for every flag the reader knows, which plan keys it sets (`Flag`), or why it is
unmodelled, or that it leaves memory alone; a flag in none of them is unknown. Nothing is dropped silently.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planner.errors import bad
from planner.formats.base import Imported, set_key
from planner.formats.reading import Reading, as_bool, as_number, choice
from planner.formats.shell import ASSIGNMENT, environment, lines, words

# environment variables that change a serving engine's memory but have no plan key
ENV_UNMODELLED = {
    "PYTORCH_CUDA_ALLOC_CONF": "the caching allocator's settings (expandable segments) change the engine's "
    "reserve, which the serving model does not itemize",
    "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "vLLM >= 0.20 counts the CUDA graphs inside the fraction unless 0 "
    "(the plan's fraction_scope follows framework_release)",
    "VLLM_ATTENTION_BACKEND": "the attention backend's workspace",
}

# environment variables that choose devices, credentials, caches, logging or loading speed, none of which changes
# a GPU's memory (the device list is the user's --gpus)
ENV_IGNORED = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "HF_TOKEN",
        "HF_HOME",
        "HF_HUB_OFFLINE",
        "HF_HUB_ENABLE_HF_TRANSFER",
        "SAFETENSORS_FAST_GPU",
        "NCCL_DEBUG",
        "VLLM_LOGGING_LEVEL",
        "TOKENIZERS_PARALLELISM",
        "OMP_NUM_THREADS",
    }
)


# What a server's command line cannot say of a plan, for every serving engine (each format adds its own)
SERVER_CANNOT_SAY = {
    "parallelism.context": "no context parallelism: its GPUs serve as data-parallel replicas",
    "parallelism.data": "its context-parallel GPUs serve as data-parallel replicas",
    **dict.fromkeys(
        ("parallelism.pipeline_schedule", "parallelism.virtual_stages"), "a server's pipeline runs one stage per rank"
    ),
    "parallelism.pipeline_layers": "the server cuts the layers over its pipeline ranks itself",
    "techniques.expandable_segments": "an environment variable, not an argument",
    "workload.inference.gpu_memory_utilization": "none (a generate() loop): a server always claims its fraction "
    "of the GPU",
    **dict.fromkeys(
        (
            "workload.inference.static_cache",
            "workload.inference.mask_buffer",
            "workload.inference.expand_kv",
            "workload.inference.math_sdpa_decode",
        ),
        "a generate() loop's: a server pages its KV cache",
    ),
    **dict.fromkeys(
        ("workload.inference.quantize_on_load", "workload.inference.dynamic_activation_quant"),
        "torchao generate.py's: a server loads its checkpoint as it is stored",
    ),
    "parallelism.async_tp": "a training technique",
}


@dataclass(frozen=True, kw_only=True)
class Flag:
    """A flag that sets plan keys: `read(flag, value)` turns the flag's value (text, or a bool for a switch) into
    (plan key, value) pairs; it raises PlanError (planner/formats/reading.py's checks) for a value it refuses."""

    read: Callable[[str, Any], tuple[tuple[str, Any], ...]]
    switch: bool = False  # takes no value (argparse store_true; "--no-FLAG" gives False)


def one(plan_key: str, convert: Callable[[str, Any], Any]) -> Flag:
    """A flag whose value, converted by `convert(flag, value)`, sets one plan key (a value converted to None, like
    "auto", sets nothing)."""
    return Flag(read=lambda name, value: tuple((plan_key, v) for v in (convert(name, value),) if v is not None))


def switch(plan_key: str, convert: Callable[[bool], Any] = bool) -> Flag:
    return Flag(read=lambda name, on: ((plan_key, convert(on)),), switch=True)


def among(table: Mapping[str, Any]) -> Callable[[str, Any], Any]:
    """A converter through a table of the engine's spellings."""
    return lambda name, value: choice(name, value, table)


def fraction(name: str, value: Any) -> float:
    """A share of the GPU's memory (vLLM --gpu-memory-utilization, SGLang --mem-fraction-static)."""
    return as_number(name, value, 0.05, 1)


@dataclass(frozen=True, kw_only=True)
class Engine:
    """One engine's command line: where it starts and how each of its flags reads."""

    name: str  # the format's name
    framework: str
    program: re.Pattern[str]  # finds the line that runs the engine
    starts: tuple[tuple[str, ...], ...]  # the tokens that start the command, up to its arguments
    model_flags: tuple[str, ...]  # flags that name the model
    flags: Mapping[str, Flag]
    aliases: Mapping[str, str]  # short or old spellings → the flag above
    switches: frozenset[str]  # unmodelled or ignored flags that take no value
    unmodelled: Mapping[str, str]  # flag → why it changes memory but no plan key says
    ignored: frozenset[str]  # flags that leave memory and step time alone
    underscores: bool = False  # flags may be spelt with underscores (vLLM's FlexibleArgumentParser)
    # a JSON-valued flag's field given alone, `--speculative-config.method eagle` (vLLM's FlexibleArgumentParser
    # dot notation): read as its flag's (noted or ignored as the flag is)
    dotted: bool = False
    # a flag may be cut to a prefix of one flag (argparse's allow_abbrev, on by default: SGLang's --mem-frac)
    abbreviations: bool = False
    model_key: Callable[[str], tuple[tuple[str, Any], ...]] = field(default=lambda name: ())  # what a name says


def command_line(text: str, engine: Engine) -> tuple[list[str], list[str], list[str]]:
    """(the environment variables set before the command, its arguments after the program, other lines) of the
    first line of `text` that runs the engine (planner/formats/shell.py: continuations joined, comments dropped)."""
    found = lines(text)
    start = next((i for i, line in enumerate(found) if engine.program.search(line)), None)
    runs = f"does not run {engine.name} ({' or '.join(map(' '.join, engine.starts))})"
    if start is None:
        raise bad("command", text.strip()[:60], runs)
    env = [m.group(1) for line in found[:start] if (m := ASSIGNMENT.match(line))]
    others = [line for line in found[:start] if not ASSIGNMENT.match(line)] + found[start + 1 :]
    assignments, tokens = environment(words(found[start]))
    head = _head(tokens, engine.starts)
    if head is None:
        raise bad("command", found[start][:60], runs)
    return env + [m.group(1) for a in assignments if (m := ASSIGNMENT.match(a))], tokens[head:], others


def _head(tokens: list[str], starts: tuple[tuple[str, ...], ...]) -> int | None:
    """The index just after the first of `starts` in `tokens` (a program may be named by its path)."""
    for i in range(len(tokens)):
        for start in starts:
            window = tokens[i : i + len(start)]
            if len(window) == len(start) and all(
                t == s or t.endswith("/" + s) for t, s in zip(window, start, strict=True)
            ):
                return i + len(start)
    return None


def split_flags(args: list[str], engine: Engine) -> list[tuple[str, Any]]:
    """The arguments as (flag, value) pairs: value None for a switch given alone, False for "--no-FLAG"; a
    positional argument is ("", text)."""
    out: list[tuple[str, Any]] = []
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if not token.startswith("-") or re.fullmatch(r"-\d+(\.\d+)?", token):
            out.append(("", token))
            continue
        name, eq, value = token.partition("=")
        name = _canonical(name, engine)
        negated = name.startswith("--no-") and _canonical("--" + name[5:], engine) in _switches(engine)
        if negated:
            out.append((_canonical("--" + name[5:], engine), False))
        elif eq:
            out.append((name, value))
        elif (
            name in _switches(engine)
            or i >= len(args)
            or (args[i].startswith("-") and not re.fullmatch(r"-\d+(\.\d+)?", args[i]))
        ):
            out.append((name, None))
        else:
            out.append((name, args[i]))
            i += 1
    return out


def _canonical(name: str, engine: Engine) -> str:
    if engine.underscores and name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    name = engine.aliases.get(name, name)
    if engine.abbreviations and name.startswith("--") and name not in _known(engine):
        whole = [flag for flag in _known(engine) if flag.startswith(name)]
        return whole[0] if len(whole) == 1 else name  # argparse takes a prefix of one flag alone
    return name


def _known(engine: Engine) -> set[str]:
    """Every flag the engine's tables name."""
    return {
        *engine.flags,
        *engine.aliases.values(),
        *engine.switches,
        *engine.unmodelled,
        *engine.ignored,
        *engine.model_flags,
    }


def _base(name: str, engine: Engine) -> str:
    """The flag a dotted field belongs to (`--compilation-config.pass-config.x` → `--compilation-config`)."""
    return name.split(".", 1)[0] if engine.dotted else name


def _switches(engine: Engine) -> frozenset[str]:
    return engine.switches | {name for name, flag in engine.flags.items() if flag.switch}


def read_flags(
    pairs: list[tuple[str, Any]], env: list[str], engine: Engine, *, gpus: int | None, others: Sequence[str] = ()
) -> Imported:
    """Each flag read through the engine's table into a partial plan with the framework set."""
    out = Reading(
        format=engine.name, plan={"framework": engine.framework}, unknown=[f"line: {line[:80]}" for line in others]
    )
    out.set(f"{engine.name} (a server: it serves the model)", "workload.task", "inference")
    named = False
    for name, value in pairs:
        if name in engine.model_flags or (name == "" and not named):
            named = True
            out.model(name or "MODEL", str(value))
            for key, val in engine.model_key(str(value)):
                out.set(f"{name or 'MODEL'} (name)", key, val)
        elif name in engine.flags:
            for key, val in _convert(name, value, engine.flags[name]):
                out.set(name, key, val)
        elif _base(name, engine) in engine.unmodelled:
            out.note(name, engine.unmodelled[_base(name, engine)])
        elif _base(name, engine) in engine.ignored:
            out.ignored.append(name)
        else:
            out.unknown.append(name or f"argument {value!r}")
    for var in env:
        if var in ENV_UNMODELLED:
            out.note(var, ENV_UNMODELLED[var])
        else:
            (out.ignored if var in ENV_IGNORED else out.unknown).append(f"env {var}")
    if gpus is not None:
        set_key(out.plan, "hardware.count", gpus)
    return out.imported()


def _convert(name: str, value: Any, flag: Flag) -> tuple[tuple[str, Any], ...]:
    if flag.switch:
        value = value is None or as_bool(name, value)
    elif value is None:
        raise bad(name, None, "needs a value")
    return flag.read(name, value)


def write_command(head: str, args: list[tuple[str, Any]]) -> str:
    """`head` and one flag a line: (flag, value) with value True for a switch alone."""
    parts = [head] + [flag if value is True else f"{flag} {shlex.quote(str(value))}" for flag, value in args]
    return " \\\n  ".join(parts) + "\n"
