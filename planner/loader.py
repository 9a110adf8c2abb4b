"""The one strict reader of YAML and JSON: plans, GPU catalogs, config.json and the package's own data files.

Every document is read the same way: a size cap, a safe loader, duplicated keys refused at every depth (a
second `usable_memory_gib:` under a catalog entry must not silently win), deep nesting refused. Each problem
is a PlanError that names the document (`plan`, `gpu_catalog`, `hf_config`) and, for a duplicated key, its
path in the document.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from planner.errors import PlanError


@dataclass(frozen=True, kw_only=True)
class Kind:
    """A kind of document: the name its errors start with, its size cap and what it is called."""

    what: str  # plan | gpu_catalog | hf_config | the data file's name
    noun: str  # in "nested too deeply to be …"
    max_bytes: int
    prefix: str  # before a key path in a duplicated key's field: a plan's keys stand alone ("model.x")
    size_hint: str = ""  # after the size-cap message


PLAN = Kind(what="plan", noun="a plan", max_bytes=256 * 1024, prefix="")
# the project's catalog is ~30 KB; a megabyte is far beyond any real one
CATALOG = Kind(what="gpu_catalog", noun="a catalog", max_bytes=1024 * 1024, prefix="gpu_catalog ")
HF_CONFIG = Kind(what="hf_config", noun="a config.json", max_bytes=1024 * 1024, prefix="hf_config ",
                 size_hint=" (a config.json is a few KB)")
# a framework's config (planner/formats: a torchtune YAML, a DeepSpeed JSON, ...) is a few KB; the cap only stops
# a huge paste early
CONFIG = Kind(what="config", noun="a framework config", max_bytes=1024 * 1024, prefix="config ")


def _duplicate(kind: Kind, path: str, line: int | None = None) -> PlanError:
    return PlanError(f"{kind.prefix}{path}", "duplicated key" + (f" (line {line})" if line else ""))


# What a document may expand to through its aliases: a plan or a catalog has a few hundred nodes; an alias bomb
# (`b: [*a, *a, …]` nested) has billions, and anything that walks it (a repr, a copy) runs for minutes.
MAX_EXPANDED_NODES = 100_000
# Digits of an integer: no real value has more than 20, and Python refuses to read more than 4,300.
MAX_INT_DIGITS = 30


def _expanded_nodes(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many nodes `node` stands for with every alias expanded (each shared node counted once per use)."""
    if id(node) not in sizes:
        sizes[id(node)] = 1  # a recursive alias counts once
        children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else \
            node.value if isinstance(node, yaml.SequenceNode) else []
        sizes[id(node)] = 1 + sum(_expanded_nodes(child, sizes) for child in children)
    return sizes[id(node)]


def _check_keys(loader: yaml.SafeLoader, kind: Kind, node: yaml.Node, path: str, done: set[int]) -> None:
    """Refuse a key given twice in any mapping under `node`, naming its path (keys as the loader reads them).
    A node reached again through an alias is checked once (`done`), so alias bombs stay cheap."""
    if id(node) in done:
        return
    done.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):  # a list or mapping as a key: PyYAML's own words for it
                raise yaml.constructor.ConstructorError(None, None, "found unhashable key", key_node.start_mark)
            where = f"{path}.{key}" if path else str(key)
            if key in seen:
                raise _duplicate(kind, where, key_node.start_mark.line + 1)
            seen.add(key)
            _check_keys(loader, kind, value_node, where, done)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _check_keys(loader, kind, item, f"{path}[{index}]", done)


def _load(text: str, kind: Kind) -> Any:
    """safe_load, refusing duplicated keys instead of silently keeping the last one."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_nodes(node, {}) > MAX_EXPANDED_NODES:
            raise PlanError(kind.what, f"expands to more than {MAX_EXPANDED_NODES:,} values through its aliases; "
                                       f"that is not {kind.noun}")
        _check_keys(loader, kind, node, "", set())
        return loader.construct_document(node)
    finally:
        loader.dispose()


def load_yaml(text: str, kind: Kind = PLAN) -> Any:
    """YAML text as plain data, strictly (see the module's docstring)."""
    _check_size(text, kind)
    try:
        return _load(text, kind)
    except RecursionError:  # PyYAML composes recursively: thousands of nested brackets exhaust the stack
        raise PlanError(kind.what, f"nested too deeply to be {kind.noun}") from None
    except PlanError:
        raise
    except ValueError:  # PyYAML's int() of more digits than Python reads
        raise PlanError(kind.what, f"holds an integer of more than {MAX_INT_DIGITS} digits; that is not "
                                   f"{kind.noun}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise PlanError(kind.what, f"not valid YAML{where} ({getattr(exc, 'problem', None) or exc})") from None


def _no_duplicates(kind: Kind) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise _duplicate(kind, key)
            out[key] = value
        return out
    return hook


def _int_of(kind: Kind) -> Callable[[str], int]:
    def parse(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise PlanError(kind.what, f"holds an integer of {len(digits.lstrip('-')):,} digits; no value of "
                                       f"{kind.noun} has more than {MAX_INT_DIGITS}")
        return int(digits)
    return parse


def _no_constant(kind: Kind) -> Callable[[str], float]:
    def parse(constant: str) -> float:  # NaN, Infinity, -Infinity: Python's extension, not JSON (RFC 8259 §6)
        raise PlanError(kind.what, f"not valid JSON ({constant} is not a JSON number)")
    return parse


def load_json(text: str, kind: Kind = HF_CONFIG) -> Any:
    """JSON text as plain data, refusing a key given twice in any object."""
    _check_size(text, kind)
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates(kind), parse_int=_int_of(kind),
                          parse_constant=_no_constant(kind))
    except json.JSONDecodeError as exc:
        raise PlanError(kind.what, f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise PlanError(kind.what, f"nested too deeply to be {kind.noun}") from None


def _check_size(text: str, kind: Kind) -> None:
    size = len(text.encode())
    if size > kind.max_bytes:
        raise PlanError(kind.what, f"{size:,} bytes is larger than the {kind.max_bytes:,}-byte limit{kind.size_hint}")


def load_data_file(path: Path) -> Any:
    """One of the package's own data files (planner/data/*.yaml), as strictly as a user's file."""
    return load_yaml(path.read_text(), Kind(what=path.name, noun="a data file", max_bytes=1024 * 1024,
                                            prefix=f"{path.name} "))
