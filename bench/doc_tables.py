"""The bench figures docs/ shows are the benches' own output. A paragraph of a bench's report (its output split at
blank lines) is shown where a paragraph of the document has the same first line but for its numbers: a table's
header, or a summary line such as "68 rows expressed: ...". `python bench/X.py --write-docs` puts the report's
paragraphs in their places (docs/accuracy.md, or the document the bench names); tests/test_bench.py checks that
none is stale. A wall-clock table cannot be checked for its numbers: its bench prints `machine()` above it (the
date and the machine it ran on), and the test checks only that the document shows both (`timed_table`)."""

from __future__ import annotations

import contextlib
import datetime
import io
import os
import platform
import re
import sys
from collections.abc import Callable
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"
DOC = DOCS / "accuracy.md"
CPUINFO = Path("/proc/cpuinfo")
BREAK = re.compile(r"(\n[ \t]*\n)")
NUMBER = re.compile(r"[+-]?\d[\d,.]*")


def paragraphs(text: str) -> list[str]:
    return [p for p in BREAK.split(text.strip("\n")) if p.strip()]


def key(paragraph: str) -> str:
    """The paragraph's first line with each number replaced: what a new run of the bench keeps."""
    return NUMBER.sub("#", paragraph.split("\n", 1)[0])


def places(doc: str, report: str) -> dict[int, str]:
    """Each report paragraph the document shows, by the index of its place in BREAK.split(doc). A table must have
    one place; a line with none is not shown (a list of skipped rows the document leaves out)."""
    parts, found = BREAK.split(doc), {}
    for para in paragraphs(report):
        where = [i for i, part in enumerate(parts) if part.strip() and key(part) == key(para)]
        if len(where) > 1 or (not where and para.startswith("|")):
            raise ValueError(f"{DOC.name}: {len(where)} places for the paragraph {key(para)!r}")
        if where:
            found[where[0]] = para
    return found


def updated(doc: str, report: str) -> str:
    parts = BREAK.split(doc)
    for i, para in places(doc, report).items():
        parts[i] = para
    return "".join(parts)


def stale(doc: str, report: str) -> list[str]:
    """The first lines of the report's paragraphs that the document shows otherwise."""
    parts = BREAK.split(doc)
    return [para.split("\n", 1)[0] for i, para in places(doc, report).items() if parts[i] != para]


def report(main: Callable[[], object]) -> tuple[str, object]:
    """What main prints, and what it returns."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = main()
    return out.getvalue(), result


def run(main: Callable[[], object], doc: Path = DOC) -> object:
    """Run a bench's main as a script: print its report; with --write-docs, also put it in `doc`."""
    text, result = report(main)
    print(text, end="")
    if "--write-docs" in sys.argv:
        doc.write_text(updated(doc.read_text(encoding="utf-8"), text), encoding="utf-8")
    return result


def _cpu() -> str:
    models = [
        line.split(":", 1)[1].strip() for line in CPUINFO.read_text().splitlines() if line.startswith("model name")
    ]
    return models[0] if models else platform.processor() or platform.machine()


def machine() -> str:
    """The paragraph above a wall-clock table: the day it ran, the cores, the load, then the CPU and Python (on a
    line of their own: a paragraph's place is its first line but for numbers, the same on any machine)."""
    load = os.getloadavg()[0]
    return (
        f"Last run {datetime.date.today().isoformat()}: {os.cpu_count()} CPUs, load average {load:.1f}.\n"
        f"CPU: {_cpu()}; Python {platform.python_version()} ({platform.system()})."
    )


def timed_table(doc: str, header: str) -> list[str]:
    """The rows of the wall-clock table with this header line that `doc` shows under a `machine()` paragraph;
    ValueError where it shows none, or one of another shape."""
    parts = paragraphs(doc)
    where = [i for i, part in enumerate(parts) if key(part) == key(header)]
    if len(where) != 1 or not any(key(part) == key(machine()) for part in parts[: where[0]]):
        raise ValueError(f"{len(where)} tables {header!r} under a line {key(machine())!r}")
    lines = parts[where[0]].split("\n")
    if lines[0] != header or len(lines) < 3 or any(line.count("|") != header.count("|") for line in lines):
        raise ValueError(f"the table {header!r} has another header or shape")
    return lines[2:]
