"""The account a reader keeps while it walks a config: the plan dict it builds and where each config key went.

The DeepSpeed, Hugging Face TrainingArguments and accelerate readers share it, and the small value checks their
configs need (whole counts written as 2e8, booleans written as "true", the "auto" that the HF integration fills).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planner.errors import PlanError, bad
from planner.formats.base import Imported, KeyRead, preset_for, set_key
from planner.loader import Kind, load_yaml

# a framework config is a few KB; the cap only stops a huge paste early
CONFIG = Kind(what="config", noun="a framework config", max_bytes=1024 * 1024, prefix="")

# how the frameworks spell booleans in text (transformers HfArgumentParser string_to_bool, accelerate str_to_bool)
TRUE_WORDS = ("true", "yes", "t", "y", "1")
FALSE_WORDS = ("false", "no", "f", "n", "0")


@dataclass(frozen=True, kw_only=True)
class Ledger:
    """A partial plan dict and, for each config key, what became of it (see planner/formats/base.py Imported)."""

    format: str
    plan: dict[str, Any] = field(default_factory=dict)
    read: list[KeyRead] = field(default_factory=list)
    unmodelled: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    model_name: list[str] = field(default_factory=list)  # at most one: the model a config names, not a preset

    def set(self, source: str, plan_key: str, value: Any) -> None:
        set_key(self.plan, plan_key, value)
        self.read.append(KeyRead(source=source, plan_key=plan_key, value=value))

    def note(self, key: str, why: str) -> None:
        self.unmodelled.append(f"{key}: {why}")

    def model(self, source: str, name: str) -> None:
        """The model a config names: its preset, else its name for the caller to resolve."""
        preset = preset_for(name)
        if preset:
            self.set(source, "model.preset", preset)
        else:
            self.model_name.append(name)

    def imported(self) -> Imported:
        return Imported(format=self.format, plan=self.plan, read=tuple(self.read),
                        model_name=self.model_name[0] if self.model_name else "",
                        unmodelled=tuple(self.unmodelled), ignored=tuple(self.ignored), unknown=tuple(self.unknown))


def mapping(text: str, what: str) -> dict[str, Any]:
    """A config's YAML (or JSON, which YAML reads too) text as a mapping; PlanError for anything else."""
    data = load_yaml(text, CONFIG)
    if not isinstance(data, dict):
        raise PlanError("config", f"is not a {what}: it must be a mapping of keys to values")
    return data


def quiet_mapping(text: str) -> dict[str, Any]:
    """The text as a mapping, or {} where it is not one (for `detect`, which must not raise)."""
    try:
        return mapping(text, "mapping")
    except PlanError:
        return {}


def whole(key: str, value: Any, least: int = 0) -> int:
    """A count as configs write it (2e8 as a float, "5e8" as a string): a whole number of at least `least`."""
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise bad(key, value, "must be a whole number") from None
    if isinstance(number, bool) or not isinstance(number, (int, float)) or number != number or \
            number in (float("inf"), float("-inf")) or int(number) != number:
        raise bad(key, value, "must be a whole number")
    if number < least:
        raise bad(key, value, f"must be at least {least}")
    return int(number)


def flag(key: str, value: Any) -> bool:
    """A boolean as configs write it: true/false, or a word the frameworks' own parsers accept."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (str, int)) and str(value).lower() in TRUE_WORDS + FALSE_WORDS:
        return str(value).lower() in TRUE_WORDS
    raise bad(key, value, "must be true or false")


def choice(key: str, value: Any, table: dict[str, Any]) -> Any:
    """The table's entry for a config value (compared case-insensitively); PlanError naming the allowed ones."""
    found = {str(k).lower(): v for k, v in table.items()}.get(str(value).lower())
    if found is None:
        raise bad(key, value, f"is not one of {', '.join(map(str, table))}")
    return found
