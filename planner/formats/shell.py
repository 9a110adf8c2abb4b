"""Shell text as the command-line formats read it (torchtitan, Megatron-LM, Hugging Face scripts, vLLM, SGLang):
backslash continuations joined, comments dropped, words split as the shell splits them (shlex), and the
`VAR=value` assignments before a program split off."""

from __future__ import annotations

import re
import shlex

from planner.errors import bad

# a shell variable assignment (`CUDA_VISIBLE_DEVICES=0,1 vllm serve ...`, `export NCCL_DEBUG=INFO`)
ASSIGNMENT = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=")


def joined(text: str) -> str:
    """The text with its backslash continuations joined."""
    return text.replace("\\\r\n", " ").replace("\\\n", " ")


def lines(text: str) -> list[str]:
    """The text's logical lines (continuations joined), stripped, without blank and comment lines."""
    stripped = (line.strip() for line in joined(text).splitlines())
    return [line for line in stripped if line and not line.startswith("#")]


def words(text: str) -> list[str]:
    """The text's words as the shell splits them (continuations joined, comments dropped); PlanError naming
    `config` where shlex cannot split it (an unclosed quote)."""
    try:
        return shlex.split(joined(text), comments=True)
    except ValueError as error:
        raise bad("config", text.strip()[:80], f"is not shell text shlex can split ({error})") from None


def environment(tokens: list[str]) -> tuple[list[str], list[str]]:
    """(the `VAR=value` assignments that start the command, the rest of its words)."""
    count = next((i for i, token in enumerate(tokens) if not ASSIGNMENT.match(token)), len(tokens))
    return tokens[:count], tokens[count:]
