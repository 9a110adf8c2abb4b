"""The planner's one error type for bad user input."""

from __future__ import annotations

import reprlib
from collections.abc import Iterable
from typing import Any

NO_VALUE = object()  # an error about a key or a whole input, not about one value
# An integer wider than this is named by its width: its decimal text costs time quadratic in its length, and
# Python refuses to write more than 4,300 digits (2**10_000 has 3,011)
_WRITTEN_INT_BITS = 10_000


class _Short(reprlib.Repr):
    """reprlib's cut repr, with an integer too wide to write in decimal named by its width instead."""

    def repr_int(self, x: int, level: int) -> str:
        return (
            super().repr_int(x, level)
            if x.bit_length() <= _WRITTEN_INT_BITS
            else f"<an integer of {x.bit_length():,} bits>"
        )


# A value reads in full up to these sizes and is cut beyond them ("[1, 2, 3, ...]", "'xxxx...xxx'"), so that
# an error about a huge value (a list of a million items, a megabyte of text) stays one line and is cheap.
_VALUE_REPR = _Short()
_VALUE_REPR.maxlevel, _VALUE_REPR.maxstring, _VALUE_REPR.maxother, _VALUE_REPR.maxlong = 3, 80, 80, 40
_VALUE_REPR.maxlist = _VALUE_REPR.maxtuple = _VALUE_REPR.maxdict = 12


def short(value: Any) -> str:
    """A value as an error quotes it: in full when small, cut to one short line when huge."""
    return _VALUE_REPR.repr(value)


class PlanError(ValueError):
    """A plan, a catalog or a command line that breaks a rule.

    It carries `field` (the dotted key, file or option it is about), `value` (the value it had, or NO_VALUE)
    and `rule` (what that breaks), and reads as one line naming all three, e.g.
    ``parallelism.tensor: 3 does not divide model.num_attention_heads (32)``. Callers read the attributes;
    they never parse the text.
    """

    def __init__(self, field: str, rule: str, *, value: Any = NO_VALUE) -> None:
        self.field, self.rule, self.value = field, rule, value
        super().__init__(f"{field}: {rule}" if value is NO_VALUE else f"{field}: {short(value)} {rule}")

    def __reduce__(self) -> tuple:
        """Pickled as its fields (the app reads a stranger's text in a worker process, ui/worker.py, and the
        error comes back): the keyword-only value and NO_VALUE's identity survive."""
        return _rebuilt, (
            type(self),
            self.field,
            self.rule,
            self.value is NO_VALUE,
            None if self.value is NO_VALUE else self.value,
        )


def _rebuilt(cls: type[PlanError], field: str, rule: str, no_value: bool, value: Any) -> PlanError:
    return cls(field, rule) if no_value else cls(field, rule, value=value)


class OverLimit(PlanError):
    """A document refused for its bulk, not its content: more bytes, nesting, values or digits than the planner
    reads, or aliases or variables that expand beyond them. Whatever format the document is in, this is the
    answer (a format's detector that cannot parse it reports it rather than "not this format")."""


def bad(field: str, value: Any, rule: str) -> PlanError:
    return PlanError(field, rule, value=value)


def unknown_key(section: str, key: str, allowed: Iterable[str]) -> PlanError:
    return PlanError(
        f"{section}.{key}" if section else key, f"unknown key; allowed keys are: {', '.join(sorted(allowed))}"
    )
