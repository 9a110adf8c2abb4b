"""The bench figures docs/accuracy.md shows are the benches' own output. A paragraph of a bench's report (its
output split at blank lines) is shown where a paragraph of the document has the same first line but for its
numbers: a table's header, or a summary line such as "68 rows expressed: ...". `python bench/X.py --write-docs`
puts the report's paragraphs in their places; tests/test_bench.py checks that none is stale."""

from __future__ import annotations

import contextlib
import io
import re
import sys
from collections.abc import Callable
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "accuracy.md"
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


def run(main: Callable[[], object]) -> object:
    """Run a bench's main as a script: print its report; with --write-docs, also put it in docs/accuracy.md."""
    text, result = report(main)
    print(text, end="")
    if "--write-docs" in sys.argv:
        DOC.write_text(updated(DOC.read_text(encoding="utf-8"), text), encoding="utf-8")
    return result
