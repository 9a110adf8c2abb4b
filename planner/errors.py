"""The planner's one error type for bad user input."""

from __future__ import annotations

from typing import Any, Iterable

NO_VALUE = object()  # an error about a key or a whole input, not about one value


class PlanError(ValueError):
    """A plan, a catalog or a command line that breaks a rule.

    It carries `field` (the dotted key, file or option it is about), `value` (the value it had, or NO_VALUE)
    and `rule` (what that breaks), and reads as one line naming all three, e.g.
    ``parallelism.tensor: 3 does not divide model.num_attention_heads (32)``. Callers read the attributes;
    they never parse the text.
    """

    def __init__(self, field: str, rule: str, *, value: Any = NO_VALUE) -> None:
        self.field, self.rule, self.value = field, rule, value
        super().__init__(f"{field}: {rule}" if value is NO_VALUE else f"{field}: {value!r} {rule}")


def bad(field: str, value: Any, rule: str) -> PlanError:
    return PlanError(field, rule, value=value)


def unknown_key(section: str, key: str, allowed: Iterable[str]) -> PlanError:
    return PlanError(f"{section}.{key}" if section else key,
                     f"unknown key; allowed keys are: {', '.join(sorted(allowed))}")
