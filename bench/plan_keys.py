"""The plan-key table of docs/plan-keys.md, made from the docstrings under the plan's fields (planner/plan/docs.py).

python bench/plan_keys.py            # print the table
python bench/plan_keys.py --write    # put it in docs/plan-keys.md (tests/test_plan_docs.py checks it is current)
"""

from __future__ import annotations

import sys
from pathlib import Path

import _path  # noqa: F401  (the checkout first on sys.path)

from planner.plan.docs import keys_to_table

DOC = Path(__file__).resolve().parent.parent / "docs" / "plan-keys.md"
HEADER = "| key | default | meaning |"


def updated(doc: str, table: str) -> str:
    """The document with its plan-key table (the lines from HEADER to the next blank line) replaced by `table`."""
    start = doc.index(HEADER)
    end = doc.find("\n\n", start)
    return doc[:start] + table + (doc[end:] if end >= 0 else "\n")


def main() -> None:
    table = keys_to_table()
    if "--write" in sys.argv[1:]:
        DOC.write_text(updated(DOC.read_text(), table))
    else:
        print(table)


if __name__ == "__main__":
    main()
