"""The planner's one error type for bad user input."""

from __future__ import annotations

import reprlib
from typing import Any, Iterable

NO_VALUE = object()  # an error about a key or a whole input, not about one value
# A value reads in full up to these sizes and is cut beyond them ("[1, 2, 3, ...]", "'xxxx...xxx'"), so that
# an error about a huge value (a list of a million items, a megabyte of text) stays one line and is cheap.
_VALUE_REPR = reprlib.Repr()
_VALUE_REPR.maxlevel, _VALUE_REPR.maxstring, _VALUE_REPR.maxother, _VALUE_REPR.maxlong = 3, 80, 80, 40
_VALUE_REPR.maxlist = _VALUE_REPR.maxtuple = _VALUE_REPR.maxdict = 12


class PlanError(ValueError):
    """A plan, a catalog or a command line that breaks a rule.

    It carries `field` (the dotted key, file or option it is about), `value` (the value it had, or NO_VALUE)
    and `rule` (what that breaks), and reads as one line naming all three, e.g.
    ``parallelism.tensor: 3 does not divide model.num_attention_heads (32)``. Callers read the attributes;
    they never parse the text.
    """

    def __init__(self, field: str, rule: str, *, value: Any = NO_VALUE) -> None:
        self.field, self.rule, self.value = field, rule, value
        super().__init__(f"{field}: {rule}" if value is NO_VALUE else f"{field}: {_VALUE_REPR.repr(value)} {rule}")


def bad(field: str, value: Any, rule: str) -> PlanError:
    return PlanError(field, rule, value=value)


def unknown_key(section: str, key: str, allowed: Iterable[str]) -> PlanError:
    return PlanError(f"{section}.{key}" if section else key,
                     f"unknown key; allowed keys are: {', '.join(sorted(allowed))}")
