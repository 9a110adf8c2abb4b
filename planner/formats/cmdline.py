"""What the serving engines' command-line formats share (vLLM, SGLang): finding the command in a pasted script,
splitting it into flags, reading each flag through a table, and writing a plan back as one command.

A table (`Engine`) says, for every flag the reader knows, which plan keys it sets (`Flag`), or why it is
unmodelled, or that it leaves memory alone; a flag in none of them is unknown. Nothing is dropped silently.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.errors import bad
from planner.formats.base import Imported, KeyRead, preset_for, set_key

# a shell variable assignment before the program (`CUDA_VISIBLE_DEVICES=0,1 vllm serve ...`)
_ENV = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=")
# environment variables that change a serving engine's memory but have no plan key
ENV_UNMODELLED = {
    "PYTORCH_CUDA_ALLOC_CONF": "the caching allocator's settings (expandable segments) change the engine's "
                               "reserve, which the serving model does not itemize",
    "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "vLLM >= 0.20 counts the CUDA graphs inside the fraction unless 0 "
                                                "(the plan's fraction_scope follows framework_release)",
    "VLLM_ATTENTION_BACKEND": "the attention backend's workspace",
}


@dataclass(frozen=True, kw_only=True)
class Flag:
    """A flag that sets plan keys: `read` turns the flag's value (text, or a bool for a switch) into
    (plan key, value) pairs; it raises ValueError with the rule the value breaks."""

    read: Callable[[Any], tuple[tuple[str, Any], ...]]
    switch: bool = False  # takes no value (argparse store_true; "--no-FLAG" gives False)


def one(plan_key: str, convert: Callable[[Any], Any]) -> Flag:
    """A flag whose value sets one plan key (a value converted to None, like "auto", sets nothing)."""
    return Flag(read=lambda value: tuple((plan_key, v) for v in (convert(value),) if v is not None))


def switch(plan_key: str, convert: Callable[[bool], Any] = bool) -> Flag:
    return Flag(read=lambda on: ((plan_key, convert(on)),), switch=True)


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
    model_key: Callable[[str], tuple[tuple[str, Any], ...]] = field(default=lambda name: ())  # what a name says


def positive_int(text: Any) -> int:
    try:
        value = int(str(text).replace("_", ""))
    except ValueError:
        raise ValueError("must be a whole number") from None
    if value < 1:
        raise ValueError("must be at least 1")
    return value


def fraction(text: Any) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("must be a fraction like 0.9") from None
    if not 0.05 <= value <= 1:
        raise ValueError("must be a fraction from 0.05 to 1")
    return value


def choice(table: Mapping[str, Any]) -> Callable[[Any], Any]:
    """A converter through a table of the engine's spellings."""
    def convert(text: Any) -> Any:
        if str(text) not in table:
            raise ValueError(f"is not one of {', '.join(table)}")
        return table[str(text)]
    return convert


def command_line(text: str, engine: Engine) -> tuple[list[str], list[str], list[str]]:
    """(the environment assignments before the command, its arguments after the program, other lines) of the first
    line of `text` that runs the engine; backslash continuations joined, comments dropped."""
    lines = [line.strip() for line in text.replace("\\\r\n", " ").replace("\\\n", " ").splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    start = next((i for i, line in enumerate(lines) if engine.program.search(line)), None)
    if start is None:
        raise bad("command", text.strip()[:60], f"does not run {engine.name} ({' or '.join(map(' '.join, engine.starts))})")
    env = [_ENV.match(line).group(1) for line in lines[:start] if _ENV.match(line)]
    others = [line for line in lines[:start] if not _ENV.match(line)] + lines[start + 1:]
    try:
        tokens = shlex.split(lines[start], comments=True)
    except ValueError as exc:
        raise bad("command", lines[start][:60], f"is not a shell command line ({exc})") from None
    head = _head(tokens, engine.starts)
    if head is None:
        raise bad("command", lines[start][:60], f"does not run {engine.name} ({' or '.join(map(' '.join, engine.starts))})")
    env += [_ENV.match(t).group(1) for t in tokens[:head] if _ENV.match(t)]
    return env, tokens[head:], others


def _head(tokens: list[str], starts: tuple[tuple[str, ...], ...]) -> int | None:
    """The index just after the first of `starts` in `tokens` (a program may be named by its path)."""
    for i in range(len(tokens)):
        for start in starts:
            window = tokens[i:i + len(start)]
            if len(window) == len(start) and all(t == s or t.endswith("/" + s) for t, s in zip(window, start)):
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
        elif name in _switches(engine) or i >= len(args) or (args[i].startswith("-")
                                                             and not re.fullmatch(r"-\d+(\.\d+)?", args[i])):
            out.append((name, None))
        else:
            out.append((name, args[i]))
            i += 1
    return out


def _canonical(name: str, engine: Engine) -> str:
    if engine.underscores and name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return engine.aliases.get(name, name)


def _switches(engine: Engine) -> frozenset[str]:
    return engine.switches | {name for name, flag in engine.flags.items() if flag.switch}


def read_flags(pairs: list[tuple[str, Any]], env: list[str], engine: Engine, *, gpus: int | None,
               others: list[str] = ()) -> Imported:
    """Each flag read through the engine's table into a partial plan with the framework set."""
    plan: dict[str, Any] = {"framework": engine.framework, "workload": {"task": "inference"}}
    read, unmodelled, ignored, unknown = [], [], [], [f"line: {line[:80]}" for line in others]
    model_name = ""
    for name, value in pairs:
        if name in engine.model_flags or (name == "" and not model_name):
            model_name = str(value)
            preset = preset_for(model_name)
            if preset:
                set_key(plan, "model.preset", preset)
                read.append(KeyRead(source=name or "MODEL", plan_key="model.preset", value=preset))
            for key, val in engine.model_key(model_name):
                set_key(plan, key, val)
                read.append(KeyRead(source=f"{name or 'MODEL'} (name)", plan_key=key, value=val))
        elif name in engine.flags:
            for key, val in _convert(name, value, engine.flags[name]):
                set_key(plan, key, val)
                read.append(KeyRead(source=name, plan_key=key, value=val))
        elif name in engine.unmodelled:
            unmodelled.append(f"{name}: {engine.unmodelled[name]}")
        elif name in engine.ignored:
            ignored.append(name)
        else:
            unknown.append(name or f"argument {value!r}")
    for var in env:
        (unmodelled.append(f"{var}: {ENV_UNMODELLED[var]}") if var in ENV_UNMODELLED else unknown.append(f"env {var}"))
    if gpus is not None:
        set_key(plan, "hardware.count", gpus)
    preset = plan.get("model", {}).get("preset")
    return Imported(format=engine.name, plan=plan, read=tuple(read), model_name="" if preset else model_name,
                    unmodelled=tuple(unmodelled), ignored=tuple(ignored), unknown=tuple(unknown))


def _convert(name: str, value: Any, flag: Flag) -> tuple[tuple[str, Any], ...]:
    if flag.switch:
        value = value is None or value is True or str(value).lower() == "true"
    elif value is None:
        raise bad(name, None, "needs a value")
    try:
        return flag.read(value)
    except ValueError as exc:
        raise bad(name, value, str(exc)) from None


def write_command(head: str, args: list[tuple[str, Any]]) -> str:
    """`head` and one flag a line: (flag, value) with value True for a switch alone."""
    parts = [head] + [flag if value is True else f"{flag} {shlex.quote(str(value))}" for flag, value in args]
    return " \\\n  ".join(parts) + "\n"
