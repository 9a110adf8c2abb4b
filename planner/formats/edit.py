"""Export onto the original: a config the plan was read from, written back with only the keys the plan changes.

Which keys a plan change moves is the format's writer's: the config written for the plan as imported and the one
written for the plan as it is are compared key by key (`delta`), so a key no plan value moves (a learning rate, a
path, a comment, an `auto`) is never one of them. Those keys are then edited in the original's own text, in its
own syntax (`edit_text`): YAML and TOML line by line (a key's value replaced, its trailing comment kept; a key
it lacks added beside its siblings), JSON in place (a value's characters replaced; a member added after its last
sibling with its indentation), and command lines flag by flag (a flag's value, or the shell variable it names,
replaced; a flag it lacks appended to the command). Every other byte of the original is kept.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from planner.errors import PlanError, bad
from planner.formats.shell import lines as shell_lines
from planner.formats.shell import match_end, split

Path = tuple[str, ...]


class _Removed:
    """A key the plan's config no longer has (a switch turned off, a section the plan drops)."""

    def __repr__(self) -> str:
        return "REMOVED"


REMOVED = _Removed()


@dataclass(frozen=True, kw_only=True)
class Change:
    """One key of the original edited: its name as the config spells it, its text before and after."""

    key: str  # "batch_size", "training.local_batch_size", "--max-num-seqs", "MICRO_BATCH_SIZE (--micro-batch-size)"
    old: str | None  # its text in the original; None where the original does not set it
    new: str | None  # its text now; None where it is removed

    def line(self) -> str:
        return (
            f"{self.key}: {'unset' if self.old is None else self.old} → {'removed' if self.new is None else self.new}"
        )


@dataclass(frozen=True, kw_only=True)
class Edited:
    """The original config with the plan's changes, and each change made."""

    text: str
    changes: tuple[Change, ...]


# --- which keys a plan change moves --------------------------------------------------------------------------------
def written_keys(text: str, suffix: str) -> dict[Path, Any]:
    """A writer's config (of file suffix `suffix`) as {key path: value}: a mapping's leaves (a list is one value),
    or a command's flags ({("--flag",): value or True}) and variables ({("NAME",): value})."""
    if suffix == ".sh":
        return _flags(text)
    data = json.loads(text) if suffix == ".json" else tomllib.loads(text) if suffix == ".toml" else yaml.safe_load(text)
    return _leaves(data, ())


def _leaves(data: Any, path: Path) -> dict[Path, Any]:
    if not isinstance(data, dict) or not data and path:
        return {path: data}
    out: dict[Path, Any] = {}
    for key, value in data.items():
        out.update(_leaves(value, (*path, str(key))))
    return out


_ASSIGNED = re.compile(r"^(?:export\s+)?([A-Za-z_]\w*)=(\S*)$")


def _flags(text: str) -> dict[Path, Any]:
    """A written command's flags (`--flag value`, `--flag=value`, a switch `--flag`: True) and the variables it
    assigns on lines of their own."""
    out: dict[Path, Any] = {}
    for line in shell_lines(text):
        if assigned := _ASSIGNED.match(line):
            out[(assigned[1],)] = assigned[2]
            continue
        tokens = split(line)
        for i, token in enumerate(tokens):
            if not token.startswith("--"):
                continue
            flag, _, value = token.partition("=")
            following = tokens[i + 1] if i + 1 < len(tokens) else "--"
            out[(flag,)] = value if value else True if following.startswith("--") else following
    return out


def delta(before: dict[Path, Any], after: dict[Path, Any]) -> dict[Path, Any]:
    """The keys whose value differs from `before` to `after`: {path: the value after, or REMOVED}."""
    return {
        path: after.get(path, REMOVED)
        for path in dict.fromkeys([*before, *after])
        if before.get(path, REMOVED) != after.get(path, REMOVED)
    }


# --- the original's syntax -----------------------------------------------------------------------------------------
def syntax(text: str, suffix: str) -> str:
    """The syntax the original is written in: "json" (an object), "python" (a torchtitan config registry: not
    edited), "toml" (a TOML file of a TOML format), "yaml" (a mapping), else "sh" (a command line or script)."""
    if text.lstrip().startswith("{"):
        return "json"
    if re.search(r"^(?:def|class|from \S+ import|import) ", text, re.M):
        return "python"
    if suffix == ".toml":
        try:
            tomllib.loads(text)
            return "toml"
        except tomllib.TOMLDecodeError:
            return "sh"
    try:
        return "yaml" if isinstance(yaml.safe_load(text), dict) else "sh"
    except yaml.YAMLError:
        return "sh"


def for_syntax(changes: dict[Path, Any], kind: str) -> dict[Path, Any]:
    """A writer's changed keys in the original's syntax: a flag's path is its name without dashes in a mapping
    (vLLM's YAML --config), a mapping's path is `--a.b` on a command line (torchtitan's --section.key, the
    Trainer's --key); a variable means nothing in a mapping, and a flag's text value is typed there."""
    out: dict[Path, Any] = {}
    for path, value in changes.items():
        flag = len(path) == 1 and path[0].startswith("--")
        if kind == "sh":
            out[path if flag or _variable(path) else ("--" + ".".join(path),)] = value
        elif flag:
            typed = value if value is REMOVED or value is True else yaml.safe_load(str(value))
            out[(path[0].lstrip("-"),)] = typed
        elif not _variable(path):
            out[path] = value
    return out


def _variable(path: Path) -> bool:
    """A shell variable a written script assigns (GPUS_PER_NODE)."""
    return len(path) == 1 and re.fullmatch(r"[A-Z_][A-Z0-9_]*", path[0]) is not None


def edit_text(
    original: str,
    kind: str,
    changes: dict[Path, Any],
    *,
    program: re.Pattern[str] | None = None,
    aliases: dict[str, tuple[str, ...]] | None = None,
) -> Edited:
    """The original (in syntax `kind`) with each changed key set to its value (or removed), and what changed. For a
    command line, `program` finds the command a flag it lacks is added to and `aliases` gives a flag's other
    spellings."""
    text, made = original, []
    for path, value in changes.items():
        if kind == "sh":
            text, change = _sh_set(text, path[0], value, program, (aliases or {}).get(path[0], ()))
        else:
            text, change = EDITORS[kind](text, path, value)
        made += [change] if change is not None else []
    return Edited(text=text, changes=tuple(made))


# --- YAML, line by line --------------------------------------------------------------------------------------------
_YAML_KEY = re.compile(
    r"^(?P<indent> *)(?P<key>[A-Za-z0-9_$][^:#]*?|\"[^\"]*\"|'[^']*')[ \t]*:(?=[ \t]|$)"
    r"(?P<rest>.*)$"
)
_YAML_VALUE = re.compile(
    r"^(?P<pad>[ \t]*)(?P<value>\"(?:[^\"\\]|\\.)*\"|'(?:[^']|'')*'|(?:[^#\s]|[ \t]+(?!#)\S)*)"
    r"(?P<tail>[ \t]*(?:#.*)?)$"
)


@dataclass(frozen=True, kw_only=True)
class _Entry:
    """A key's line in a YAML or TOML text: its path, where its value is, and the lines its block takes."""

    path: Path
    line: int
    indent: int
    start: int  # the value's first character in the line
    end: int  # just after the value's last character (a comment after it is kept)
    last: int  # the last line of its block (its own line for an inline value)


def _yaml_entries(rows: list[str]) -> dict[Path, _Entry]:
    """Each mapping key of a YAML text's lines, by path (nesting by indentation; a list's items are its value)."""
    entries: dict[Path, _Entry] = {}
    stack: list[tuple[int, str]] = []
    skip_deeper = None
    for n, row in enumerate(rows):
        indent = len(row) - len(row.lstrip(" "))
        if skip_deeper is not None and (not row.strip() or indent > skip_deeper):
            continue
        skip_deeper = None
        key = _YAML_KEY.match(row)
        if key is None or row.lstrip().startswith("#"):
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (*(k for _, k in stack), key["key"].strip("\"'"))
        stack.append((indent, path[-1]))
        value = _YAML_VALUE.match(key["rest"])
        offset = key.start("rest") + (value.start("value") if value else 0)
        text = value["value"] if value else key["rest"].strip()
        if text in ("|", ">", "|-", ">-", "|+", ">+"):
            skip_deeper = indent
        entries[path] = _Entry(
            path=path,
            line=n,
            indent=indent,
            start=offset,
            end=offset + len(text),
            last=_block_end(rows, n, indent) if not text or skip_deeper is not None else n,
        )
    return entries


def _block_end(rows: list[str], n: int, indent: int) -> int:
    """The last line of the block under line n (deeper lines, or a list at its own indentation), trailing blank
    and comment lines left out."""
    last = n
    for m in range(n + 1, len(rows)):
        stripped = rows[m].strip()
        depth = len(rows[m]) - len(rows[m].lstrip(" "))
        if not stripped or stripped.startswith("#"):
            continue
        if depth > indent or depth == indent and stripped.startswith("- "):
            last = m
        else:
            break
    return last


def _yaml_scalar(value: Any, like: str) -> str:
    """A value as YAML flow text, spelt as the original spells its kind (True/true, quoted strings)."""
    if isinstance(value, bool) and like[:1] in ("T", "F"):
        return str(value)
    if isinstance(value, str) and like[:1] in ("'", '"'):
        return json.dumps(value) if like[0] == '"' else "'" + value.replace("'", "''") + "'"
    return yaml.safe_dump(value, default_flow_style=True, width=1 << 30).removesuffix("\n...\n").strip()


def _yaml_set(text: str, path: Path, value: Any) -> tuple[str, Change | None]:
    rows = text.split("\n")
    entries = _yaml_entries(rows)
    key = ".".join(path)
    if path in entries:
        at = entries[path]
        row = rows[at.line]
        old = row[at.start : at.end] if at.last == at.line else _flow(yaml.safe_load(text), path)
        if value is REMOVED:
            del rows[at.line : at.last + 1]
            return "\n".join(rows), Change(key=key, old=old, new=None)
        new = _yaml_scalar(value, old)
        if new == old:
            return text, None
        head = row[: at.start] if at.start < len(row) else row.rstrip() + " "
        rows[at.line : at.last + 1] = [head + new + row[at.end :]]
        return "\n".join(rows), Change(key=key, old=old, new=new)
    if value is REMOVED:
        return text, None
    new = _yaml_scalar(value, "")
    parent = next((path[:n] for n in range(len(path) - 1, 0, -1) if path[:n] in entries), ())
    _insert(rows, entries, parent, [(k, None) for k in path[len(parent) : -1]] + [(path[-1], new)])
    return "\n".join(rows), Change(key=key, old=None, new=new)


def _insert(rows: list[str], entries: dict[Path, _Entry], parent: Path, chain: list[tuple[str, str | None]]) -> None:
    """Add `chain` (keys nested one under the next, the last with its value) at the end of the block of `parent`
    (the whole text where it is ()), indented as parent's children are."""
    children = [e for p, e in entries.items() if len(p) == len(parent) + 1 and p[:-1] == parent]
    if parent:
        at = entries[parent]
        indent, after = (children[0].indent if children else at.indent + 2), at.last
    else:
        indent = 0
        after = max((n for n, row in enumerate(rows) if row.strip()), default=-1)
    added = [
        " " * (indent + 2 * depth) + f"{key}:" + ("" if value is None else f" {value}")
        for depth, (key, value) in enumerate(chain)
    ]
    rows[after + 1 : after + 1] = added


def _flow(data: Any, path: Path) -> str:
    for part in path:
        data = data[part]
    return _yaml_scalar(data, "")


# --- TOML, line by line --------------------------------------------------------------------------------------------
_TOML_TABLE = re.compile(r"^[ \t]*\[(?P<name>[^\[\]]+)\][ \t]*(?:#.*)?$")
_TOML_KEY = re.compile(
    r"^(?P<indent>[ \t]*)(?P<key>[A-Za-z0-9_\-]+)[ \t]*=[ \t]*"
    r"(?P<value>\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^#]*?)(?P<tail>[ \t]*(?:#.*)?)$"
)


def _toml_entries(rows: list[str]) -> tuple[dict[Path, _Entry], dict[Path, int]]:
    """Each key of a TOML text's tables by path, and the last line of each table (its header where it is empty)."""
    entries: dict[Path, _Entry] = {}
    tables: dict[Path, int] = {(): -1}
    table: Path = ()
    for n, row in enumerate(rows):
        if header := _TOML_TABLE.match(row):
            table = tuple(part.strip().strip("\"'") for part in header["name"].split("."))
            tables[table] = n
        elif key := _TOML_KEY.match(row):
            path = (*table, key["key"])
            entries[path] = _Entry(
                path=path, line=n, indent=len(key["indent"]), start=key.start("value"), end=key.end("value"), last=n
            )
            tables[table] = n
    return entries, tables


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(map(_toml_value, value)) + "]"
    return json.dumps(value) if isinstance(value, str) else str(value)


def _toml_set(text: str, path: Path, value: Any) -> tuple[str, Change | None]:
    rows = text.split("\n")
    entries, tables = _toml_entries(rows)
    key = ".".join(path)
    if path in entries:
        at = entries[path]
        old = rows[at.line][at.start : at.end]
        if value is REMOVED:
            del rows[at.line]
            return "\n".join(rows), Change(key=key, old=old, new=None)
        new = _toml_value(value)
        if new == old:
            return text, None
        rows[at.line] = rows[at.line][: at.start] + new + rows[at.line][at.end :]
        return "\n".join(rows), Change(key=key, old=old, new=new)
    if value is REMOVED:
        return text, None
    new = _toml_value(value)
    table = path[:-1]
    if table in tables and table:
        rows.insert(tables[table] + 1, f"{path[-1]} = {new}")
    else:
        end = max((n for n, row in enumerate(rows) if row.strip()), default=-1)
        rows[end + 1 : end + 1] = (
            ["", f"[{'.'.join(table)}]", f"{path[-1]} = {new}"] if table else [f"{path[-1]} = {new}"]
        )
    return "\n".join(rows), Change(key=key, old=None, new=new)


# --- JSON, in place ------------------------------------------------------------------------------------------------
_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\r\n]*")


@dataclass(frozen=True, kw_only=True)
class _Span:
    key: int  # the member's key's opening quote
    start: int  # its value's first character
    end: int  # just after its value


def _json_spans(text: str) -> tuple[dict[Path, _Span], dict[Path, tuple[int, int]]]:
    """Each object member of a JSON text by path (its key's and value's place), and each object's braces."""
    members: dict[Path, _Span] = {}
    objects: dict[Path, tuple[int, int]] = {}
    _json_value(text, match_end(_SPACE, text, 0), (), members, objects)
    return members, objects


def _json_value(text: str, i: int, path: Path, members: dict[Path, _Span], objects: dict[Path, tuple[int, int]]) -> int:
    """Scan the JSON value at i (recording the members of its objects); the index just after it."""
    if text[i] not in "{[":
        return _DECODER.raw_decode(text, i)[1]
    close = "}" if text[i] == "{" else "]"
    start, i = i, match_end(_SPACE, text, i + 1)
    while text[i] != close:
        if close == "}":
            name, colon = _DECODER.raw_decode(text, i)  # the key: a JSON string
            value = match_end(_SPACE, text, match_end(_SPACE, text, colon) + 1)
            end = _json_value(text, value, (*path, name), members, objects)
            members[(*path, name)] = _Span(key=i, start=value, end=end)
        else:
            end = _json_value(text, i, (*path, "[]"), members, objects)
        i = match_end(_SPACE, text, end)
        i = match_end(_SPACE, text, i + 1) if text[i] == "," else i
    if close == "}":
        objects[path] = (start, i)
    return i + 1


def _json_set(text: str, path: Path, value: Any) -> tuple[str, Change | None]:
    members, objects = _json_spans(text)
    key = ".".join(path)
    if path in members:
        at = members[path]
        old = text[at.start : at.end]
        if value is REMOVED:
            siblings = sorted(s.key for p, s in members.items() if p[:-1] == path[:-1])
            before = [members[p].end for p in members if p[:-1] == path[:-1] and members[p].key < at.key]
            after = next((k for k in siblings if k > at.key), None)
            start, end = (
                (max(before), at.end) if before else (at.key, after) if after else (objects[path[:-1]][0] + 1, at.end)
            )
            return text[:start] + text[end:], Change(key=key, old=old, new=None)
        new = json.dumps(value)
        return (
            (text, None) if new == old else (text[: at.start] + new + text[at.end :], Change(key=key, old=old, new=new))
        )
    if value is REMOVED:
        return text, None
    parent = next(path[:n] for n in range(len(path) - 1, -1, -1) if path[:n] in objects)
    nested: Any = value
    for part in reversed(path[len(parent) + 1 :]):
        nested = {part: nested}
    return _json_add(text, members, objects, parent, path[len(parent)], nested), Change(
        key=key, old=None, new=json.dumps(value)
    )


def _json_add(
    text: str, members: dict[Path, _Span], objects: dict[Path, tuple[int, int]], parent: Path, name: str, value: Any
) -> str:
    """Add the member `name: value` after the last member of object `parent`, indented as that member is."""
    siblings = sorted(
        (s for p, s in members.items() if p[:-1] == parent and len(p) == len(parent) + 1), key=lambda s: s.key
    )
    if siblings:
        last = siblings[-1]
        indent = text[text.rfind("\n", 0, last.key) + 1 : last.key]
        at, lead = last.end, ","
    else:
        brace = objects[parent][0]
        indent = text[text.rfind("\n", 0, brace) + 1 : brace] + "    "
        at, lead = brace + 1, ""
    first = min((s for p, s in members.items() if len(p) == 1), key=lambda s: s.key, default=None)
    step = 4 if first is None else first.key - text.rfind("\n", 0, first.key) - 1
    body = json.dumps(value, indent=step or 4).replace("\n", "\n" + indent)
    return text[:at] + f"{lead}\n{indent}{json.dumps(name)}: {body}" + ("" if siblings else "\n") + text[at:]


EDITORS: dict[str, Callable[[str, Path, Any], tuple[str, Change | None]]] = {
    "yaml": _yaml_set,
    "toml": _toml_set,
    "json": _json_set,
}


# --- command lines, flag by flag -----------------------------------------------------------------------------------
_VARIABLE = re.compile(r"^\$\{?([A-Za-z_]\w*)(?::-[^}]*)?\}?$")


def _code(row: str) -> int:
    """Where a shell line's comment starts (its length where it has none)."""
    comment = re.search(r"(?:^|[ \t])#", row)
    return comment.start() if comment else len(row)


def _occurrences(rows: list[str], names: tuple[str, ...]) -> list[tuple[int, re.Match]]:
    """Each (line, match) of one of the flag `names` in the lines' code (comments left out): its value in `value`
    (None for a switch)."""
    spelled = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    pattern = re.compile(
        rf"(?<![\w-])(?P<flag>{spelled})(?:(?:=|[ \t]+)(?P<value>\"[^\"]*\"|'[^']*'|"
        rf"(?!--)[^\s\\\"')]+))?(?![\w-])"
    )
    return [(n, m) for n, row in enumerate(rows) for m in pattern.finditer(row, 0, _code(row))]


def _assignment(rows: list[str], name: str) -> tuple[int, re.Match] | None:
    """The one line that assigns the shell variable `name` a literal value, where there is one only."""
    pattern = re.compile(
        rf"^[ \t]*(?:export[ \t]+)?{re.escape(name)}=(?P<value>\"[^\"$]*\"|'[^']*'|[^\s$\"'`(]*)"
        r"(?=[ \t]|$)"
    )
    found = [(n, m) for n, row in enumerate(rows) if (m := pattern.match(row))]
    return found[0] if len(found) == 1 else None


def _sh_word(value: Any) -> str:
    return shlex.quote(str(value))


def _sh_set(
    text: str, flag: str, value: Any, program: re.Pattern[str] | None, aliases: tuple[str, ...]
) -> tuple[str, Change | None]:
    rows = text.split("\n")
    if not flag.startswith("--"):  # a variable the writer assigns (GPUS_PER_NODE=8)
        at = _assignment(rows, flag)
        if at is None or value is REMOVED:
            return text, None
        return _replace(rows, at[0], at[1].span("value"), flag, _sh_word(value))
    found = _occurrences(rows, (flag, *aliases))
    if not found:
        return (text, None) if value is REMOVED else _append(rows, flag, value, program)
    if value is REMOVED:
        for n, m in reversed(found):
            rows[n] = rows[n][: m.start()].rstrip(" \t") + rows[n][m.end() :]
        for n in sorted({n for n, _ in found}, reverse=True):
            code = rows[n][: _code(rows[n])].strip()
            if code not in ("", "\\"):
                continue
            if code == "" and n and rows[n - 1].rstrip().endswith("\\"):  # the command's last line: it ends before
                rows[n - 1] = rows[n - 1].rstrip()[:-1].rstrip()
            del rows[n]
        return "\n".join(rows), Change(key=flag, old=found[0][1]["value"] or "set", new=None)
    return _set_occurrences(text, rows, found, flag, value)


def _set_occurrences(
    text: str, rows: list[str], found: list[tuple[int, re.Match]], flag: str, value: Any
) -> tuple[str, Change | None]:
    """Each occurrence of `flag` given `value`: its value word replaced (or the variable it names, where one line
    assigns it), a switch given a value where the value is not True."""
    change = None
    for n, m in reversed(found):
        old = m["value"]
        variable = _VARIABLE.match(old) if old else None
        assigned = _assignment(rows, variable[1]) if variable else None
        if variable is not None and assigned is not None:
            text, change = _replace(
                rows, assigned[0], assigned[1].span("value"), f"{variable[1]} ({flag})", _sh_word(value)
            )
            rows = text.split("\n")
        elif old is None:
            if value is True or str(value).lower() == "true":
                continue
            rows[n] = rows[n][: m.end()] + " " + _sh_word(value) + rows[n][m.end() :]
            change = Change(key=m["flag"], old="set", new=_sh_word(value))
        elif old.strip("\"'") != str(value):
            new = "" if value is True else _sh_word(value)
            rows[n] = rows[n][: m.start("value") - (not new)] + new + rows[n][m.end("value") :]
            change = Change(key=m["flag"], old=old, new=new or "set")
    return "\n".join(rows), change


def _replace(rows: list[str], n: int, span: tuple[int, int], key: str, new: str) -> tuple[str, Change | None]:
    old = rows[n][span[0] : span[1]]
    if old.strip("\"'") == new.strip("\"'"):
        return "\n".join(rows), None
    rows[n] = rows[n][: span[0]] + new + rows[n][span[1] :]
    return "\n".join(rows), Change(key=key, old=old, new=new)


def _append(rows: list[str], flag: str, value: Any, program: re.Pattern[str] | None) -> tuple[str, Change]:
    """Add `flag value` at the end of the command (the last command that `program` finds, continuations
    followed): on a line of its own where the command runs over several."""
    word = flag if value is True else f"{flag} {_sh_word(value)}"
    starts = [n for n, row in enumerate(rows) if program is not None and program.search(row[: _code(row)])]
    code = [n for n, row in enumerate(rows) if row[: _code(row)].strip()]
    if not code:
        raise bad("config", "", f"has no command to add {flag} to")
    last = starts[-1] if starts else code[-1]
    while rows[last][: _code(rows[last])].rstrip().endswith("\\") and last + 1 < len(rows):
        last += 1
    row = rows[last]
    cut = _code(row)
    if starts and last > starts[-1]:
        indent = row[: len(row) - len(row.lstrip())]
        comment = row[cut:].strip()
        rows[last : last + 1] = [row[:cut].rstrip() + " \\", indent + word + (" " + comment if comment else "")]
    else:
        rows[last] = row[:cut].rstrip() + " " + word + (" " + row[cut:].strip() if row[cut:].strip() else "")
    return "\n".join(rows), Change(key=flag, old=None, new="set" if value is True else _sh_word(value))


def check_parsed(kind: str, text: str) -> None:
    """The edited text still parses in its syntax (a PlanError naming the syntax where an edit broke it)."""
    if kind == "sh":
        return
    try:
        {"json": json.loads, "toml": tomllib.loads, "yaml": yaml.safe_load}[kind](text)
    except (ValueError, yaml.YAMLError) as exc:
        raise PlanError("config", f"the edited {kind} no longer parses ({exc}); export without the original") from exc
