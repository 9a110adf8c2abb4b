"""What the YAML config readers (torchtune, Axolotl) share: the reading in progress and the value checks."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from planner.errors import PlanError, bad
from planner.formats.base import KeyRead, set_key
from planner.loader import Kind, load_yaml


@dataclass(frozen=True, kw_only=True)
class Reading:
    """What reading a config found so far (its lists grow as the keys are read)."""

    plan: dict[str, Any] = field(default_factory=dict)
    read: list[KeyRead] = field(default_factory=list)
    unmodelled: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    def set(self, source: str, plan_key: str, value: Any) -> None:
        set_key(self.plan, plan_key, value)
        self.read.append(KeyRead(source=source, plan_key=plan_key, value=value))

    def sort_rest(self, cfg: dict[str, Any], *, known: frozenset[str], ignored: frozenset[str],
                  unmodelled: dict[str, str]) -> None:
        """Account for each top-level key of `cfg` that no read or note names yet: `unmodelled` where it is set
        (not null, false, empty or a degree of 1), ignored where it is known (read, and left as the recipe has
        it) or known to leave memory alone, else unknown."""
        named = {_top(part) for k in self.read for part in re.split(r" \+ | × ", k.source)}
        named |= {_top(note) for note in (*self.unmodelled, *self.ignored)}
        for key, value in cfg.items():
            if key in named:
                continue
            if key in unmodelled and not _unset(value):
                self.unmodelled.append(f"{key}: {unmodelled[key]}")
            elif key in known or key in ignored or key in unmodelled:
                self.ignored.append(key)
            else:
                self.unknown.append(key)


def _top(source: str) -> str:
    """The top-level config key a read's source or a note starts with ("optimizer.fused (absent...)" -> optimizer)."""
    return re.split(r"[ .:(]", source, maxsplit=1)[0]


def as_int(key: str, value: Any, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise bad(key, value, f"must be an integer ≥ {low}")
    return value


def as_bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise bad(key, value, "must be True or False")
    return value


def as_number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad(key, value, "must be a number")
    return value


def as_text(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise bad(key, value, "must be a string")
    return value


def as_texts(key: str, value: Any) -> list[str]:
    """A list of strings (one string counts as a list of one)."""
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise bad(key, value, "must be a list of strings")
    return values


def as_mapping(key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise bad(key, value, "must be a mapping")
    return value


# a framework's config is a few KB; a megabyte is far beyond any real one
CONFIG = Kind(what="config", noun="a framework config", max_bytes=1024 * 1024, prefix="config ")


def load_mapping(text: str, framework: str) -> dict[str, Any]:
    """A YAML config's text as its top-level mapping, read as strictly as a plan (planner/loader.py: a size cap,
    duplicated keys and deep nesting refused)."""
    cfg = load_yaml(text, CONFIG)
    if not isinstance(cfg, dict):
        raise PlanError("config", f"must be a YAML mapping of {framework} config keys")
    return cfg


def parses_to(text: str, test: Callable[[dict[str, Any]], bool]) -> bool:
    """Whether the text is a YAML mapping that passes `test` (for a format's detect)."""
    try:
        return test(load_mapping(text, ""))
    except PlanError:
        return False


def _unset(value: Any) -> bool:
    """A config value that turns its feature off: null, false, an empty list, or a degree of 1."""
    return value is None or value is False or value == [] or (type(value) is int and value == 1)
