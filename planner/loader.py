"""The one strict reader of YAML, JSON and TOML: plans, GPU catalogs, config.json, framework configs and the
package's own data files.

Every document is read the same way: a size cap, a safe loader, duplicated keys refused at every depth (a
second `usable_memory_gib:` under a catalog entry must not silently win), deep nesting refused before a parser
recurses into it, integers of more than MAX_INT_DIGITS digits refused whatever their notation, and a YAML
document's aliases refused where they expand to more values or text than the document could hold written out.
Each problem is a PlanError that names the document (`plan`, `gpu_catalog`, `hf_config`) and, for a duplicated
key, its path in the document. Every check is linear in the document's size: a stranger's paste cannot make a
hosted planner spin.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from planner.errors import OverLimit, PlanError

# the package's own data files (presets, aliases, recipes, the catalog, the accuracy bands), shipped with it
DATA_DIR = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True, kw_only=True)
class Kind:
    """A kind of document: the name its errors start with, its size cap and what it is called."""

    what: str  # plan | gpu_catalog | hf_config | the data file's name
    noun: str  # in "nested too deeply to be …"
    max_bytes: int
    prefix: str  # before a key path in a duplicated key's field: a plan's keys stand alone ("model.x")
    size_hint: str = ""  # after the size-cap message


PLAN = Kind(what="plan", noun="a plan", max_bytes=256 * 1024, prefix="")
# the project's catalog is ~150 KB; a megabyte is far beyond any real one
CATALOG = Kind(what="gpu_catalog", noun="a catalog", max_bytes=1024 * 1024, prefix="gpu_catalog ")
HF_CONFIG = Kind(
    what="hf_config",
    noun="a config.json",
    max_bytes=1024 * 1024,
    prefix="hf_config ",
    size_hint=" (a config.json is a few KB)",
)
# a framework's config (planner/formats: a torchtune YAML, a DeepSpeed JSON, a Megatron script, ...) is a few KB
# (the longest of tests/data/configs: 11 KB); every reader's time is linear in it, and the cap bounds it (a
# framework config is parsed as YAML, TOML and shell text to detect its format)
CONFIG = Kind(what="config", noun="a framework config", max_bytes=256 * 1024, prefix="config ")
# a vLLM start-up log is a few hundred lines; a paste that runs on into the request log stays under a few MB
LOG = Kind(what="log", noun="a vLLM log", max_bytes=4 * 1024 * 1024, prefix="log ")


def _duplicate(kind: Kind, path: str, line: int | None = None) -> PlanError:
    return PlanError(f"{kind.prefix}{path}", "duplicated key" + (f" (line {line})" if line else ""))


# What a document may expand to through its aliases: a plan or a catalog has a few hundred nodes; an alias bomb
# (`b: [*a, *a, …]` nested) has billions, and anything that walks it (a repr, a copy) runs for minutes. Its text
# may expand to no more than the document's own size cap: an alias stands for text the document could write out.
MAX_EXPANDED_NODES = 100_000
# Values written in one YAML document: the project's GPU catalog has 7,000; PyYAML's pure-Python parser takes
# ~25 µs a value, so this bounds a document's parse to about a second
MAX_NODES = 50_000
# Nesting: a plan or a config is 3 to 6 levels deep; PyYAML's scanner costs O(depth) a token and every parser
# recurses, so a document is refused beyond this before a parser sees it
MAX_DEPTH = 64
# An integer's decimal digits, whatever notation it is written in (0x, 0o, 0b, underscores, YAML's 1:30): no
# real value has more than 20, and Python refuses to read more than 4,300 decimal digits
MAX_INT_DIGITS = 30
_INT_LIMIT = 10**MAX_INT_DIGITS
# An integer's text longer than this is refused before it is read: 30 digits in any base with room for a sign,
# underscores and leading zeros (PyYAML reads 1:2:3:… by one multiplication a part: quadratic in its length)
MAX_INT_TEXT = 200


def int_fits(value: int) -> bool:
    """Whether an integer, however it was written, has at most MAX_INT_DIGITS digits (compared, never written out:
    a hexadecimal literal of 4,000 digits reads in linear time, its decimal text would not)."""
    return -_INT_LIMIT < value < _INT_LIMIT


def _long_int(kind: Kind) -> OverLimit:
    return OverLimit(kind.what, f"holds an integer of more than {MAX_INT_DIGITS} digits; that is not {kind.noun}")


def _too_deep(kind: Kind) -> OverLimit:
    return OverLimit(kind.what, f"nested too deeply to be {kind.noun}")


# what the nesting pre-scan passes over: everything but brackets and braces, in one C-speed substitution
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


def _check_brackets(text: str, kind: Kind) -> None:
    """Refuse brackets and braces nested deeper than MAX_DEPTH before a parser sees them: one pass, quoted and
    commented brackets counted too (an upper bound on the nesting, never below it)."""
    depth = 0
    for bracket in _NOT_BRACKETS.sub("", text):
        depth = depth + 1 if bracket in "[{" else max(depth - 1, 0)
        if depth > MAX_DEPTH:
            raise _too_deep(kind)


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing as it composes (before anything walks the document): more than MAX_NODES
    values written; nesting deeper than MAX_DEPTH (indented blocks, which the bracket pre-scan cannot see, or an
    alias that puts a node deeper, or contains itself); aliases that expand the document beyond
    MAX_EXPANDED_NODES values or its own size cap in text; an integer of more than MAX_INT_DIGITS digits in any
    of YAML's notations."""

    def __init__(self, text: str, kind: Kind) -> None:
        super().__init__(text)
        self.kind, self.written, self.depth = kind, 0, 0
        self.values = self.characters = 0  # composed so far, each alias counted as all it stands for
        self.sizes: dict[int, tuple[int, int, int]] = {}  # a composed node's (values, characters, levels)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self.written += 1
        if self.written > MAX_NODES:
            raise OverLimit(self.kind.what, f"holds more than {MAX_NODES:,} values; that is not {self.kind.noun}")
        alias = self.check_event(yaml.AliasEvent)
        target = self.anchors.get(self.peek_event().anchor) if alias else None
        if self.depth == MAX_DEPTH or (target is not None and id(target) not in self.sizes):  # or within itself
            raise _too_deep(self.kind)
        self.depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        if alias:
            values, characters, levels = self.sizes[id(node)]
            if self.depth + levels > MAX_DEPTH:
                raise _too_deep(self.kind)
        else:
            values, characters = 1, len(node.value) if isinstance(node, yaml.ScalarNode) else 0
            self.sizes[id(node)] = self._size(node)
        self._expand(values, characters)
        return node

    def _size(self, node: yaml.Node) -> tuple[int, int, int]:
        """A node's (values, characters, levels) with every alias expanded, from its children's."""
        if isinstance(node, yaml.ScalarNode):
            return 1, len(node.value), 1
        children = (
            [self.sizes[id(n)] for pair in node.value for n in pair]
            if isinstance(node, yaml.MappingNode)
            else [self.sizes[id(n)] for n in node.value]
        )
        return (
            1 + sum(c[0] for c in children),
            sum(c[1] for c in children),
            1 + max((c[2] for c in children), default=0),
        )

    def _expand(self, values: int, characters: int) -> None:
        self.values, self.characters = self.values + values, self.characters + characters
        if self.values > MAX_EXPANDED_NODES:
            raise OverLimit(
                self.kind.what,
                f"expands to more than {MAX_EXPANDED_NODES:,} values through its aliases; that is not {self.kind.noun}",
            )
        if self.characters > self.kind.max_bytes:
            raise OverLimit(
                self.kind.what,
                f"expands to more than {self.kind.max_bytes:,} characters of text "
                f"through its aliases; that is not {self.kind.noun}",
            )

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        if len(node.value) > MAX_INT_TEXT:
            raise _long_int(self.kind)
        value = super().construct_yaml_int(node)
        if not int_fits(value):
            raise _long_int(self.kind)
        return value


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


def _check_keys(loader: yaml.SafeLoader, kind: Kind, node: yaml.Node, path: tuple[str, ...], done: set[int]) -> None:
    """Refuse a key given twice in any mapping under `node`, naming its path (keys as the loader reads them; the
    path's text made only for the error). A node reached again through an alias is checked once (`done`), so
    alias bombs stay cheap."""
    if id(node) in done:
        return
    done.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):  # a list or mapping as a key: PyYAML's own words for it
                raise yaml.constructor.ConstructorError(None, None, "found unhashable key", key_node.start_mark)
            where = (*path, f".{key}" if path else str(key))
            if key in seen:
                raise _duplicate(kind, "".join(where), key_node.start_mark.line + 1)
            seen.add(key)
            _check_keys(loader, kind, value_node, where, done)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _check_keys(loader, kind, item, (*path, f"[{index}]"), done)


def _load(text: str, kind: Kind) -> Any:
    """safe_load, refusing duplicated keys instead of silently keeping the last one (and what _Loader refuses)."""
    loader = _Loader(text, kind)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_keys(loader, kind, node, (), set())
        return loader.construct_document(node)
    finally:
        loader.dispose()


def load_yaml(text: str, kind: Kind = PLAN) -> Any:
    """YAML text as plain data, strictly (see the module's docstring)."""
    check_size(text, kind)
    _check_brackets(text, kind)
    try:
        return _load(text, kind)
    except PlanError:
        raise
    except ValueError as exc:  # a constructor's: a date that is no date (2024-02-30)
        raise PlanError(kind.what, f"not valid YAML ({exc})") from None
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
            raise PlanError(
                kind.what,
                f"holds an integer of {len(digits.lstrip('-')):,} digits; no value of "
                f"{kind.noun} has more than {MAX_INT_DIGITS}",
            )
        return int(digits)

    return parse


def _no_constant(kind: Kind) -> Callable[[str], float]:
    def parse(constant: str) -> float:  # NaN, Infinity, -Infinity: Python's extension, not JSON (RFC 8259 §6)
        raise PlanError(kind.what, f"not valid JSON ({constant} is not a JSON number)")

    return parse


def load_json(text: str, kind: Kind = HF_CONFIG) -> Any:
    """JSON text as plain data, refusing a key given twice in any object."""
    check_size(text, kind)
    _check_brackets(text, kind)
    try:
        return json.loads(
            text, object_pairs_hook=_no_duplicates(kind), parse_int=_int_of(kind), parse_constant=_no_constant(kind)
        )
    except json.JSONDecodeError as exc:
        raise PlanError(kind.what, f"not valid JSON ({exc.msg} at line {exc.lineno})") from None


# A run of more than MAX_DEPTH dotted TOML key parts (bare, "basic" with its escapes, 'literal'), anywhere in the
# text: tomllib takes time quadratic in a key's parts. A run starts only where no part goes on, so each is tried
# once, and no part gives back what it took
_PART = r"""(?:[\w-]++|"(?:[^"\\\n]++|\\.)*+"|'[^'\n]*+')"""
_DEEP_KEY = re.compile(rf"""(?<![\w"'.-])(?:{_PART}[ \t]*+\.[ \t]*+){{{MAX_DEPTH}}}""")


def parse_toml(text: str, kind: Kind = CONFIG) -> dict[str, Any] | None:
    """TOML text as plain data, None where it is not TOML (a command line, to a reader that takes either); TOML
    beyond the size cap, MAX_DEPTH levels (tables, arrays, dotted keys) or MAX_INT_DIGITS digits is refused."""
    check_size(text, kind)
    _check_brackets(text, kind)
    if _DEEP_KEY.search(text):
        raise _too_deep(kind)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    except ValueError:  # tomllib's int() of more digits than Python reads
        raise _long_int(kind) from None
    _check_values(data, kind)
    return data


def _check_values(data: Any, kind: Kind) -> None:
    """Refuse an integer of more than MAX_INT_DIGITS digits (a hexadecimal one reads at any length), or nesting
    deeper than MAX_DEPTH, anywhere in parsed data: one pass, without recursion."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, int) and not int_fits(value):
            raise _long_int(kind)
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        if children and depth == MAX_DEPTH:
            raise _too_deep(kind)
        stack.extend((child, depth + 1) for child in children)


def check_size(text: str, kind: Kind) -> None:
    """Refuse a text over its kind's size cap (the first check of every reader: each later one is linear in it)."""
    size = len(text.encode())
    if size > kind.max_bytes:
        raise OverLimit(kind.what, f"{size:,} bytes is larger than the {kind.max_bytes:,}-byte limit{kind.size_hint}")


def load_data_file(path: Path) -> Any:
    """One of the package's own data files (planner/data/*.yaml), as strictly as a user's file."""
    return load_yaml(
        path.read_text(), Kind(what=path.name, noun="a data file", max_bytes=1024 * 1024, prefix=f"{path.name} ")
    )
