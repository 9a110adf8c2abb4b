"""What the YAML config readers (torchtune, Axolotl) share: the reading in progress and the value checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from planner.errors import PlanError, bad
from planner.formats.base import KeyRead, set_key


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


def load_mapping(text: str, framework: str) -> dict[str, Any]:
    """A YAML config's text as its top-level mapping."""
    try:
        cfg = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PlanError("config", f"is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(cfg, dict):
        raise PlanError("config", f"must be a YAML mapping of {framework} config keys")
    return cfg
