"""Each plan key's meaning, written once: the docstring under its field (torchtitan's and vLLM's config style; vLLM's
`get_attr_docs` reads them the same way, with `ast`). The plan-key table of docs/plan-keys.md, the app's widget
help and the CLI's help for options that set a plan key are made from them."""

from __future__ import annotations

import ast
import inspect
import sys
from dataclasses import MISSING, Field, fields, is_dataclass
from functools import cache
from typing import Any, get_type_hints

from planner.plan.config import Plan

# fields the plan file names otherwise: a guessed model keeps its parameter count as `params` (models.model_to_dict)
FILE_KEYS = {"model.approx_params": "model.params"}
DEFAULT = " Default: "  # where a docstring says a default the field's own value does not show (None: worked out)


@cache
def _classes(module: str) -> dict[str, ast.ClassDef]:
    """The top-level classes of a module's source by name (each module parsed once)."""
    tree = ast.parse(inspect.getsource(sys.modules[module]))
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


@cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each annotated field of a top-level class, by field name, its lines joined into one."""
    node = _classes(cls.__module__).get(cls.__qualname__)
    if node is None:
        raise TypeError(f"{cls.__qualname__} is not a top-level class of {cls.__module__}")
    out = {}
    for field, after in zip(node.body, node.body[1:], strict=False):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            out[field.target.id] = " ".join(after.value.value.split())
    return out


@cache
def key_fields() -> dict[str, tuple[type, Field]]:
    """Every field of the plan by its dotted key (sections before their keys, in declaration order)."""
    out: dict[str, tuple[type, Field]] = {}

    def walk(cls: type, prefix: str) -> None:
        hints = get_type_hints(cls)
        for f in fields(cls):
            key = prefix + f.name
            out[key] = (cls, f)
            if is_dataclass(hints[f.name]):
                walk(hints[f.name], key + ".")

    walk(Plan, "")
    return out


def is_section(key: str) -> bool:
    cls, f = key_fields()[key]
    return is_dataclass(get_type_hints(cls)[f.name])


@cache
def key_docs() -> dict[str, str]:
    """Each plan key's doc by its dotted key as the plan file writes it (sections included)."""
    return {FILE_KEYS.get(key, key): field_docs(cls).get(f.name, "") for key, (cls, f) in key_fields().items()}


def key_doc(key: str) -> str:
    """One plan key's doc (the dotted key as the plan file writes it)."""
    return key_docs()[key]


def meaning_and_default(key: str) -> tuple[str, str]:
    """(what the key means, its default as the table shows it): the doc's `Default:` sentence where it has one,
    else the field's own default."""
    doc = key_doc(FILE_KEYS.get(key, key))
    meaning, said, default = doc.partition(DEFAULT)
    if said:
        return meaning, default.removesuffix(".")
    _, f = key_fields()[key]
    return doc, "required" if f.default is MISSING else _written(f.default)


def _written(value: Any) -> str:
    """A default as the plan file writes it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple):
        return f"`[{', '.join(map(str, value))}]`"
    return f"`{value}`" if value != "" else "empty"


def keys_to_table() -> str:
    """The plan-key table of docs/plan-keys.md: every key, its default and its meaning, in the plan's order."""
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for key in key_fields():
        if not is_section(key):
            meaning, default = meaning_and_default(key)
            cells = (f"`{FILE_KEYS.get(key, key)}`", default, meaning)
            rows.append("| " + " | ".join(c.replace("|", r"\|") for c in cells) + " |")
    return "\n".join(rows)
