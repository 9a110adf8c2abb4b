"""Every plan key that takes one of a fixed set of values, and those values, read from the plan's `Literal` types.

The app's choice lists, the CLI's `choices` command and the README's table come from here, so none of them can
drift from what the plan accepts.
"""

from __future__ import annotations

from typing import Any, Literal, get_args, get_origin, get_type_hints

from planner.plan.config import Inference, Lora, Parallelism, Plan, Precision, Techniques, Workload
from planner.plan.models import Model

# the plan's blocks with the dotted prefix of their keys ("" for the top level)
_BLOCKS: dict[str, type] = {
    "": Plan,
    "model": Model,
    "workload": Workload,
    "workload.lora": Lora,
    "workload.inference": Inference,
    "precision": Precision,
    "techniques": Techniques,
    "parallelism": Parallelism,
}


def literal_values(annotation: Any) -> tuple:
    """The values of the `Literal` in a type, also inside `X | None` or `tuple[X, ...]`; () when it has none."""
    if get_origin(annotation) is Literal:
        return get_args(annotation)
    for arg in get_args(annotation):
        if values := literal_values(arg):
            return values
    return ()


def _choices() -> dict[str, tuple]:
    out = {}
    for block, cls in _BLOCKS.items():
        for key, annotation in get_type_hints(cls).items():
            if values := literal_values(annotation):
                out[f"{block}.{key}".lstrip(".")] = values
    return out


CHOICES: dict[str, tuple] = _choices()  # dotted plan key -> its values, in the Literal's order
# keys whose value is a list of those values (workload.lora.targets)
LISTS = frozenset(
    f"{block}.{key}".lstrip(".")
    for block, cls in _BLOCKS.items()
    for key, annotation in get_type_hints(cls).items()
    if get_origin(annotation) is tuple
)


def choices_to_table() -> str:
    """The README's table of every key with a fixed set of values (`python -m planner choices`)."""
    lines = ["| key | values |", "|---|---|"]
    for key, values in CHOICES.items():
        listed = ", ".join(f"`{v}`" for v in values)
        lines.append(f"| `{key}` | {'a list of ' if key in LISTS else ''}{listed} |")
    return "\n".join(lines) + "\n"
