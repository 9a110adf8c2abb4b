"""What the torchtitan and Megatron-LM readers share: the plan a reader builds key by key, with the account of
every config key it met, and the checked conversions of a config's values (which may be typed, from a TOML, or
text, from a command line)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.errors import bad
from planner.formats.base import Imported, KeyRead, set_key

TRUE_TEXT = ("true", "True", "1")
FALSE_TEXT = ("false", "False", "0")


@dataclass(frozen=True, kw_only=True)
class Collected:
    """A reader's work in progress: the partial plan and where each config key went."""

    plan: dict[str, Any]
    read: list[KeyRead] = field(default_factory=list)
    unmodelled: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    def set(self, source: str, plan_key: str, value: Any) -> None:
        """Set a plan key from a config key, and record it."""
        set_key(self.plan, plan_key, value)
        self.read.append(KeyRead(source=source, plan_key=plan_key, value=value))

    def imported(self, fmt: str, model_name: str = "") -> Imported:
        return Imported(format=fmt, plan=self.plan, read=tuple(self.read), model_name=model_name,
                        unmodelled=tuple(self.unmodelled), ignored=tuple(self.ignored), unknown=tuple(self.unknown))


def as_int(key: str, value: Any, lo: int = 1) -> int:
    """A config value as an integer of at least `lo` (a command line gives it as text)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).lstrip("-").isdigit():
        raise bad(key, value, "is not an integer")
    if int(value) < lo:
        raise bad(key, value, f"must be at least {lo}")
    return int(value)


def as_float(key: str, value: Any) -> float:
    """A config value as a number (a command line gives it as text)."""
    try:
        if isinstance(value, bool):
            raise ValueError
        return float(value)
    except (TypeError, ValueError):
        raise bad(key, value, "is not a number") from None


def as_bool(key: str, value: Any) -> bool:
    """A config value as true or false (a command line gives it as text)."""
    if isinstance(value, bool):
        return value
    if value in TRUE_TEXT or value in FALSE_TEXT:
        return value in TRUE_TEXT
    raise bad(key, value, "is not true or false")


def choice(key: str, value: Any, table: Mapping[Any, Any]) -> Any:
    """The plan value a config value names in `table`, or an error listing the config values allowed."""
    if isinstance(value, (list, dict)) or value not in table:
        raise bad(key, value, f"is not one of: {', '.join(map(str, table))}")
    return table[value]
