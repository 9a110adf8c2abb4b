"""The two generated tables of docs/plan-keys.md: the plan keys, made from the docstrings under the plan's fields
(planner/plan/docs.py), and the choices of each key (planner/plan/choices.py, what `vram-planner choices` prints).

python bench/plan_keys.py            # print the tables
python bench/plan_keys.py --write    # put them in docs/plan-keys.md (tests/test_plan_docs.py and test_cli.py check)
"""

from __future__ import annotations

import sys
from pathlib import Path

import _path  # noqa: F401  (the checkout first on sys.path)

from planner.plan.choices import choices_to_table
from planner.plan.docs import keys_to_table

DOC = Path(__file__).resolve().parent.parent / "docs" / "plan-keys.md"
HEADER = "| key | default | meaning |"
CHOICES_HEADER = "| key | values |"


def updated(doc: str, table: str, header: str = HEADER) -> str:
    """The document with the table that starts at `header` (its lines up to the next blank line or the end)
    replaced by `table`."""
    start = doc.index(header)
    end = doc.find("\n\n", start)
    return doc[:start] + table.rstrip("\n") + (doc[end:] if end >= 0 else "\n")


def main() -> None:
    keys, choices = keys_to_table(), choices_to_table()
    if "--write" in sys.argv[1:]:
        DOC.write_text(updated(updated(DOC.read_text(), keys), choices, CHOICES_HEADER))
    else:
        print(keys + "\n" + choices)


if __name__ == "__main__":
    main()
