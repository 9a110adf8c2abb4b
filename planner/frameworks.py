"""Framework recipes: the defaults that each training or serving stack's standard recipes set.

A user knows their framework, not its internals. `framework: torchtune` in a plan lays the settings of
torchtune's standard recipes (pure bf16, chunked cross-entropy, activation checkpointing, ...) under the keys
the plan writes: any key the plan gives still wins. The settings, each with the code or doc it was read from,
are data in ``planner/data/frameworks.yaml``; a setting may hold only under a condition on the plan (the task,
the number of data-parallel ranks), as the frameworks' own recipes do.
"""

from __future__ import annotations

import copy
import datetime
import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import cache
from typing import Any, get_args

from planner.errors import bad
from planner.loader import DATA_DIR, load_data_file
from planner.plan.config import NESTED, SECTIONS, Framework, Plan

FRAMEWORKS_PATH = DATA_DIR / "frameworks.yaml"


@dataclass(frozen=True, kw_only=True)
class Setting:
    key: str  # dotted plan key, e.g. "techniques.loss"
    value: Any
    source: str  # the file, config or doc of the framework it was read from
    when: tuple[tuple[str, Any], ...] = ()  # (dotted key, list of values or {"min": n}) that must all hold
    # the releases it holds for, by date: from `since` (inclusive) to `until` (exclusive); a plan that names no
    # release is the latest, so a setting with an `until` does not hold for it
    since: datetime.date | None = None
    until: datetime.date | None = None

    @property
    def condition(self) -> str:
        """The condition in words, e.g. 'workload.task in finetune; parallelism.data ≥ 2' ('' when always)."""
        words = [
            f"{key} ≥ {rule['min']}"
            if isinstance(rule, dict)
            else f"{key} {'in' if len(rule) > 1 else '='} {', '.join(str(v) for v in rule)}"
            for key, rule in self.when
        ]
        if self.since or self.until:
            words.append(
                "release "
                + " ".join(w for w in (self.since and f"from {self.since}", self.until and f"before {self.until}") if w)
            )
        return "; ".join(words)


@dataclass(frozen=True, kw_only=True)
class Recipe:
    name: str  # the plan's framework value
    label: str
    summary: str  # what the framework keeps in which dtype and where, in one sentence
    settings: tuple[Setting, ...]
    releases: dict[str, datetime.date] = field(default_factory=dict)  # tagged release -> its date

    def release_date(self, release: str) -> datetime.date | None:
        """The date of a plan's `framework_release` (a tagged release or YYYY-MM-DD); None for the latest."""
        if not release:
            return None
        if release in self.releases:
            return self.releases[release]
        try:
            return datetime.date.fromisoformat(release)
        except ValueError:
            known = ", ".join(self.releases) or "none tagged"
            raise bad(
                "framework_release", release, f"is not a release of {self.name} ({known}) or a date YYYY-MM-DD"
            ) from None


def _leaf_default(key: str) -> Any:
    """A plan key's own default (the dataclass field's), for conditions on keys a plan leaves out."""
    *path, leaf = key.split(".")
    cls = SECTIONS[path[0]] if len(path) == 1 else NESTED[(path[0], path[1])]
    field = next(f for f in fields(cls) if f.name == leaf)
    return field.default


def _known_key(key: str) -> bool:
    parts = key.split(".")
    if len(parts) == 2 and parts[0] in SECTIONS:
        return parts[1] in {f.name for f in fields(SECTIONS[parts[0]])} and (parts[0], parts[1]) not in NESTED
    if len(parts) == 3 and (parts[0], parts[1]) in NESTED:
        return parts[2] in {f.name for f in fields(NESTED[(parts[0], parts[1])])}
    return False


@cache
def load_frameworks() -> dict[str, Recipe]:
    """Every framework of the plan format, in the order of its `framework` choices."""
    raw = load_data_file(FRAMEWORKS_PATH)
    recipes = {}
    for name in get_args(Framework):
        entry = raw[name]
        settings = []
        for s in entry.get("settings") or []:
            when = tuple((k, v) for k, v in (s.get("when") or {}).items())
            for key in (s["key"], *(k for k, _ in when)):
                if not _known_key(key):  # a data error, caught by the tests
                    raise ValueError(f"frameworks.yaml: {name}: {key!r} is not a plan key")
            settings.append(
                Setting(
                    key=s["key"],
                    value=s["value"],
                    source=s["source"],
                    when=when,
                    since=_optional_date(s.get("since")),
                    until=_optional_date(s.get("until")),
                )
            )
        recipes[name] = Recipe(
            name=name,
            label=entry["label"],
            summary=entry["summary"],
            settings=tuple(settings),
            releases={str(k): _date(v) for k, v in (entry.get("releases") or {}).items()},
        )
    return recipes


def _date(value: Any) -> datetime.date:
    """A date of frameworks.yaml (YAML reads an unquoted 2025-04-02 as a date already)."""
    return value if isinstance(value, datetime.date) else datetime.date.fromisoformat(str(value))


def _optional_date(value: Any) -> datetime.date | None:
    """A setting's bound of frameworks.yaml (since, until), where None leaves it open."""
    return None if value is None else _date(value)


def lookup(data: dict, key: str) -> tuple[bool, Any]:
    """(whether a plan dict gives the dotted key a value, that value)."""
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node or node[part] is None:
            return False, None
        node = node[part]
    return True, node


def _value(data: dict, key: str) -> Any:
    """The value of a dotted key in a plan dict as the plan will resolve it (data ranks from the GPU count)."""
    found, value = lookup(data, key)
    if found:
        return value
    if key == "parallelism.data":  # the document's types and ranges are checked before any rule reads them
        count = lookup(data, "hardware.count")[1]
        split = math.prod(lookup(data, f"parallelism.{degree}")[1] or 1 for degree in ("tensor", "pipeline", "context"))
        return count // split if count else 1
    return _leaf_default(key)


def _holds(setting: Setting, value_of: Callable[[str], Any], released: datetime.date | None) -> bool:
    if setting.until and (released is None or released >= setting.until):
        return False
    if setting.since and released is not None and released < setting.since:
        return False
    for key, rule in setting.when:
        value = value_of(key)
        if isinstance(rule, dict):
            if not (isinstance(value, int) and value >= rule["min"]):
                return False
        elif value not in rule:
            return False
    return True


def applicable(framework: str, value_of: Callable[[str], Any], release: str = "") -> list[Setting]:
    """The settings of `framework` at `release` whose conditions the plan meets, `value_of` giving the plan's value
    of a dotted key (a later setting of a key wins)."""
    recipe = load_frameworks().get(framework)
    if recipe is None:
        return []
    released = recipe.release_date(release)
    chosen = {s.key: s for s in recipe.settings if _holds(s, value_of, released)}
    return list(chosen.values())


def without_keys(data: dict, keys: set[str]) -> dict:
    """A copy of a plan dict without the given dotted keys (so that a framework's settings fill them)."""
    out = copy.deepcopy(data)
    for key in keys:
        *path, leaf = key.split(".")
        node: dict = out
        for part in path:
            child = node.get(part)
            node = child if isinstance(child, dict) else {}
        node.pop(leaf, None)
    return out


def apply_framework(data: dict) -> dict:
    """The plan dict with its framework's settings laid under the keys it gives (a copy; `data` is unchanged)."""
    framework = data.get("framework") or "generic"
    if not isinstance(framework, str) or framework == "generic":
        return data
    out = copy.deepcopy(data)
    for setting in applicable(framework, lambda key: _value(data, key), data.get("framework_release") or ""):
        if lookup(data, setting.key)[0]:
            continue  # the plan's own value wins
        node = out
        *path, leaf = setting.key.split(".")
        for part in path:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[leaf] = copy.deepcopy(setting.value)
    return out


def provenance(plan: Plan) -> list[tuple[Setting, bool]]:
    """Each setting the plan's framework makes for this plan, and whether the plan keeps its value (True) or
    overrides it."""
    settings = applicable(
        plan.framework, lambda key: _attribute(plan, key, default=_leaf_default(key)), plan.framework_release
    )
    return [(setting, _attribute(plan, setting.key) == setting.value) for setting in settings]


def _attribute(plan: Plan, key: str, default: Any = None) -> Any:
    """A dotted key's value in a built plan as its file form writes it (lists, not tuples); `default` for None."""
    node: Any = plan
    for part in key.split("."):
        node = getattr(node, part)
    if node is None:
        return default
    return list(node) if isinstance(node, tuple) else node
