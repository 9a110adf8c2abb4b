"""What every config reader shares: the reading in progress (the partial plan and where each config key went), the
checks of a config's values, and the reading of a YAML or JSON config's text.

A value may come typed (from a YAML, JSON or TOML file) or as text (from a command line), and configs write counts
as floats (DeepSpeed's 5e8): each check accepts every spelling the frameworks' own parsers accept, and words its
error the same way for every format.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.errors import PlanError, bad
from planner.formats.base import Document, Imported, KeyRead, Resolution, document, resolve_model, set_key
from planner.loader import CONFIG, int_fits, load_json, load_yaml

# how the frameworks spell booleans in text (transformers HfArgumentParser string_to_bool, accelerate str_to_bool)
TRUE_WORDS = ("true", "yes", "t", "y", "1")
FALSE_WORDS = ("false", "no", "f", "n", "0")


@dataclass(frozen=True, kw_only=True)
class Reading:
    """A reader's work in progress: the partial plan dict and, for each config key, what became of it (see
    planner/formats/base.py Imported). Its lists grow as the keys are read."""

    format: str
    plan: dict[str, Any] = field(default_factory=dict)
    read: list[KeyRead] = field(default_factory=list)
    unmodelled: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    model_name: list[str] = field(default_factory=list)  # at most one: the model a config names, not a preset
    notes: list[str] = field(default_factory=list)  # how the reader took what the config says (Imported.notes)

    def set(self, source: str, plan_key: str, value: Any) -> None:
        """Set a plan key from a config key, and record it."""
        set_key(self.plan, plan_key, value)
        self.read.append(KeyRead(source=source, plan_key=plan_key, value=value))

    def note(self, key: str, why: str) -> None:
        """A key that changes memory but no plan key says."""
        self.unmodelled.append(f"{key}: {why}")

    def other(self, key: str, *, unmodelled: dict[str, str], ignored: Collection[str], name: str | None = None) -> None:
        """A key no reader took: noted where it changes memory (`unmodelled`: why), ignored where known to leave
        it alone, else unknown (listed as `name`, the key by default)."""
        if key in unmodelled:
            self.note(name or key, unmodelled[key])
        elif key in ignored:
            self.ignored.append(name or key)
        else:
            self.unknown.append(name or key)

    def model(self, source: str, name: str) -> str | None:
        """The model a config names: its preset (returned; the rule that found it noted, resolve_model), else its
        name for the caller to resolve."""
        found = resolve_model(name)
        if found is None:
            self.model_name.append(name)
            return None
        self.set(source, "model.preset", found.preset)
        if found.rule:
            self.notes.append(model_note(name, found))
        return found.preset

    def imported(self) -> Imported:
        return Imported(
            format=self.format,
            plan=self.plan,
            read=tuple(self.read),
            model_name=self.model_name[0] if self.model_name else "",
            unmodelled=tuple(self.unmodelled),
            ignored=tuple(self.ignored),
            unknown=tuple(self.unknown),
            notes=tuple(self.notes),
        )

    def sort_rest(
        self, cfg: dict[str, Any], *, known: frozenset[str], ignored: frozenset[str], unmodelled: dict[str, str]
    ) -> None:
        """Account for each top-level key of `cfg` that no read or note names yet: `unmodelled` where it is set
        (not null, false, empty or a degree of 1), ignored where it is known (read, and left as the recipe has
        it) or known to leave memory alone, else unknown."""
        named = {_top(part) for k in self.read for part in re.split(r" \+ | × ", k.source)}
        named |= {_top(note) for note in (*self.unmodelled, *self.ignored)}
        for key, value in cfg.items():
            if key in named:
                continue
            if key in unmodelled and not _unset(value):
                self.note(key, unmodelled[key])
            elif key in known or key in ignored or key in unmodelled:
                self.ignored.append(key)
            else:
                self.unknown.append(key)


def model_note(name: str, found: Resolution) -> str:
    """The import's note of a model name resolved by a rule."""
    return f"model {name} resolved as preset {found.preset} by {found.rule}"


def _top(source: str) -> str:
    """The top-level config key a read's source or a note starts with ("optimizer.fused (absent...)" -> optimizer)."""
    return re.split(r"[ .:(]", source, maxsplit=1)[0]


def _unset(value: Any) -> bool:
    """A config value that turns its feature off: null, false, an empty list, or a degree of 1."""
    return value is None or value is False or value == [] or (type(value) is int and value == 1)


# --- the value checks -----------------------------------------------------------------------------------------------
def _whole(value: Any) -> int | None:
    """The integer a value spells (8, 8.0, "8", "2e8"), or None (for one of more digits than any value has)."""
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            try:
                value = float(value)
            except ValueError:
                return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return None
    number = int(value)
    return number if int_fits(number) else None


def as_int(key: str, value: Any, low: int = 1) -> int:
    """A count of at least `low`: typed, as text ("8"), or a whole float (DeepSpeed's 2e8, "5e8")."""
    number = _whole(value)
    if number is None or number < low:
        raise bad(key, value, f"must be an integer ≥ {low}")
    return number


def as_number(key: str, value: Any, low: float = -math.inf, high: float = math.inf) -> float:
    """A finite number from `low` to `high` (typed, or as text); a typed one is returned as it is."""
    try:
        found = math.nan if isinstance(value, bool) else value if isinstance(value, (int, float)) else float(value)
    except (TypeError, ValueError):
        found = math.nan
    if not (math.isfinite(found) and low <= found <= high):
        bounds = "" if (low, high) == (-math.inf, math.inf) else f" from {low:g} to {high:g}"
        raise bad(key, value, f"must be a number{bounds}")
    return found


def as_bool(key: str, value: Any) -> bool:
    """True or false: typed, or a word the frameworks' own parsers accept (TRUE_WORDS, FALSE_WORDS)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (str, int)) and str(value).lower() in TRUE_WORDS + FALSE_WORDS:
        return str(value).lower() in TRUE_WORDS
    raise bad(key, value, "must be true or false")


def choice(key: str, value: Any, table: Mapping[Any, Any], *, any_case: bool = False) -> Any:
    """The table's entry for a config value (compared case-insensitively with `any_case`, as the frameworks that
    lower-case their values do); PlanError naming the values allowed."""
    if any_case:
        folded = {str(k).lower(): k for k in table}
        value_key = folded.get(str(value).lower()) if isinstance(value, (str, int, float)) else None
    else:
        value_key = value if isinstance(value, (str, int, float)) and value in table else None
    if value_key is None:
        raise bad(key, value, f"is not one of: {', '.join(map(str, table))}")
    return table[value_key]


def as_text(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise bad(key, value, "must be text")
    return value


def as_texts(key: str, value: Any) -> list[str]:
    """A list of text (one text counts as a list of one)."""
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise bad(key, value, "must be a list of text")
    return values


def as_mapping(key: str, value: Any) -> dict[str, Any]:
    """A mapping (a config's section)."""
    if not isinstance(value, dict):
        raise bad(key, value, "must be a mapping")
    return value


# --- the text of a YAML or JSON config ------------------------------------------------------------------------------
def mapping(text: str | Document) -> dict[str, Any]:
    """A YAML or JSON config's text as its top-level mapping, read as strictly as a plan (planner/loader.py: a size
    cap, duplicated keys and deep nesting refused), once a Document. JSON is read as JSON first: YAML reads 5e8 as
    text."""
    return document(text).parse(_mapping)


def _mapping(text: str) -> dict[str, Any]:
    if not text.lstrip().startswith("{"):
        data = load_yaml(text, CONFIG)
    else:
        try:
            data = load_json(text, CONFIG)
        except PlanError as not_json:  # a YAML flow mapping, or broken JSON: say what JSON found
            try:
                data = load_yaml(text, CONFIG)
            except PlanError:
                raise not_json from None
    if not isinstance(data, dict):
        raise PlanError("config", "must be a mapping of config keys to values (YAML or JSON)")
    return data


def quiet_mapping(text: str | Document) -> dict[str, Any]:
    """The text as a mapping, or {} where it is not one (for `detect`, which must not raise)."""
    try:
        return mapping(text)
    except PlanError:
        return {}
