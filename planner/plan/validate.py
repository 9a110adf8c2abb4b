"""The checks every part of the plan shares, and each field's declared rule; each raises PlanError naming field,
value and rule."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import Field, dataclass, field, fields, is_dataclass
from functools import cache
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

from planner.errors import bad


def check_int(field: str, value: Any, *, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(field, value, f"must be an integer from {lo:,} to {hi:,}")
    if not lo <= value <= hi:
        raise bad(field, value, f"is out of range; must be from {lo:,} to {hi:,}")
    return value


def check_float(field: str, value: Any, *, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise bad(field, value, f"must be a number from {lo:g} to {hi:g}")
    if not lo <= value <= hi:
        raise bad(field, value, f"is out of range; must be from {lo:g} to {hi:g}")
    return float(value)


def check_bool(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise bad(field, value, "must be true or false")
    return value


def check_choice(field: str, value: Any, choices: Iterable[Any]) -> Any:
    choices = tuple(choices)
    if isinstance(value, bool) or value not in choices:  # True == 1: a bool is never a choice
        raise bad(field, value, f"is not one of: {', '.join(str(c) for c in choices)}")
    return value


def check_str(field: str, value: Any, *, max_len: int) -> str:
    if not isinstance(value, str):
        raise bad(field, value, "must be text")
    if len(value) > max_len:
        raise bad(field, value[:40] + "…", f"is too long; at most {max_len} characters")
    return value


# --- declared field rules ----------------------------------------------------------------------------------------
# Every field of the plan's dataclasses declares what it accepts: its type annotation gives the kind (bool, int,
# float, text, one of a Literal's choices, a list of them or of integers, optional with `| None`) and its metadata
# the bounds (`between`) or the length cap (`text`). The same rules check a built object (`check_fields`, from each
# __post_init__) and a raw document before any rule reads it (`check_mapping`, from codec.plan_from_dict), so a
# framework condition never evaluates a wrong type or a huge number.
Kind = Literal["bool", "int", "float", "text", "choice", "choices", "ints"]
MAX_LIST_ITEMS = 4096  # the longest list of numbers a field takes


@dataclass(frozen=True, kw_only=True)
class Rule:
    kind: Kind
    optional: bool
    lo: float = 0
    hi: float = 0
    max_len: int = 0
    choices: tuple[Any, ...] = ()

    def accepts(self, value: Any) -> bool:
        """The fast path of `check_value`: True when the value passes (False: let check_value say why)."""
        if value is None:
            return self.optional
        kind, t = self.kind, type(value)
        if kind == "int":
            return t is int and self.lo <= value <= self.hi
        if kind == "choice":
            return t is not bool and value in self.choices
        if kind == "bool":
            return t is bool
        if kind == "float":
            return (t is float or t is int) and self.lo <= value <= self.hi  # NaN fails the comparison
        return kind == "text" and t is str and len(value) <= self.max_len


def between(lo: float, hi: float) -> dict[str, Any]:
    """A number field's declared range (dataclass field metadata)."""
    return {"bounds": (lo, hi)}


def text(max_len: int) -> dict[str, Any]:
    """A text field's declared length cap (dataclass field metadata)."""
    return {"max_len": max_len}


def resolved(metadata: dict[str, Any] | None = None) -> Any:
    """A field whose default is worked out from other keys at construction (by its own __post_init__, or by
    Plan's for keys that depend on other sections): declared with the resolved type, given as None to mean "the
    default". The way vLLM's configs declare such fields ("always int after construction"): readers need no None
    check. Typed Any so that the None default type-checks against the resolved type; None passes the field's rule."""
    return field(default=None, metadata={**(metadata or {}), "resolved": True})


T = TypeVar("T")


def required(value: T | None, key: str) -> T:
    """An optional key that the rules of a built object require in the caller's branch (model.kv_lora_rank under
    latent attention, the Mamba-2 keys of a pattern with M layers): its value, typed without None."""
    if value is None:
        raise ValueError(f"{key} is unset where its rules require it")
    return value


def _rule(owner: type, f: Field, hint: Any) -> Rule | None:
    args = get_args(hint)
    if type(None) in args:
        (hint,) = (a for a in args if a is not type(None))
    optional = type(None) in args or f.metadata.get("resolved", False)
    if is_dataclass(hint):
        return None  # a nested section: checked by its own rules
    if get_origin(hint) is Literal:
        return Rule(kind="choice", optional=optional, choices=get_args(hint))
    name = f"{owner.__name__}.{f.name}"
    if get_origin(hint) is tuple and get_args(hint)[0] is int:
        lo, hi = _bounds(name, f)
        return Rule(kind="ints", optional=optional, lo=lo, hi=hi, max_len=MAX_LIST_ITEMS)
    if get_origin(hint) is tuple:
        return Rule(kind="choices", optional=optional, choices=get_args(get_args(hint)[0]))
    if hint is bool:
        return Rule(kind="bool", optional=optional)
    if hint in (int, float):
        lo, hi = _bounds(name, f)
        return Rule(kind="int" if hint is int else "float", optional=optional, lo=lo, hi=hi)
    if hint is str:
        if "max_len" not in f.metadata:
            raise TypeError(f"{name} declares no length cap: give it metadata=text(n)")
        return Rule(kind="text", optional=optional, max_len=f.metadata["max_len"])
    raise TypeError(f"{name}: no rule for the type {hint!r}")


def _bounds(name: str, f: Field) -> tuple[float, float]:
    if "bounds" not in f.metadata:
        raise TypeError(f"{name} declares no bounds: give it metadata=between(lo, hi)")
    return f.metadata["bounds"]


@cache
def rules(cls: type) -> dict[str, Rule | None]:
    """Each field of a dataclass and its declared rule (None for a nested section)."""
    hints = get_type_hints(cls)
    return {f.name: _rule(cls, f, hints[f.name]) for f in fields(cls)}


def check_value(field: str, rule: Rule, value: Any) -> None:
    if value is None and rule.optional:
        return
    if rule.kind == "bool":
        check_bool(field, value)
    elif rule.kind == "int":
        check_int(field, value, lo=int(rule.lo), hi=int(rule.hi))
    elif rule.kind == "float":
        check_float(field, value, lo=rule.lo, hi=rule.hi)
    elif rule.kind == "text":
        check_str(field, value, max_len=rule.max_len)
    elif rule.kind == "choice":
        check_choice(field, value, rule.choices)
    elif rule.kind == "ints":
        if not isinstance(value, (list, tuple)) or not 0 < len(value) <= rule.max_len:
            raise bad(
                field,
                value if isinstance(value, (int, float, str)) else "…",
                f"must be a list of 1 to {rule.max_len:,} integers",
            )
        for item in value:
            check_int(field, item, lo=int(rule.lo), hi=int(rule.hi))
    else:
        if not isinstance(value, (list, tuple)) or not value:
            raise bad(field, value, f"must be a non-empty list of: {', '.join(rule.choices)}")
        for item in value:
            check_choice(field, item, rule.choices)


@cache
def _checked(cls: type) -> tuple[tuple[str, Rule], ...]:
    return tuple((name, rule) for name, rule in rules(cls).items() if rule is not None)


def check_fields(obj: Any, prefix: str) -> None:
    """Each field of a built dataclass against its declared rule."""
    cls: type = type(obj)
    for name, rule in _checked(cls):
        value = getattr(obj, name)
        if not rule.accepts(value):
            check_value(f"{prefix}.{name}" if prefix else name, rule, value)


def check_mapping(raw: dict, cls: type, prefix: str) -> None:
    """The keys of a raw document's section that `cls` declares, against their rules, nested sections
    included (unknown keys are left to the section's builder, which lists the known ones)."""
    for key, value in raw.items():
        declared = rules(cls)
        rule = declared.get(key)
        field = f"{prefix}.{key}" if prefix else key
        if rule is not None:
            check_value(field, rule, value)
        elif key in declared and value is not None:
            if not isinstance(value, dict):
                raise bad(field, value, "must be a mapping")
            check_mapping(value, _nested_type(cls, key), field)


@cache
def _nested_type(cls: type, key: str) -> type:
    """The section class of `cls`'s field `key` (resolved once: `get_type_hints` evaluates every annotation of the
    class, and each plan read asks for every section)."""
    return get_type_hints(cls)[key]
