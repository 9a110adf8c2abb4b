"""A bounded memo for the parts of a plan's estimate that read only a few of its settings.

A search estimates thousands of plans that differ in one or two settings each; a computation that reads none of
those is worth keeping by a key of exactly what it reads, so the plans that share that key share the result.
The key is the memo's correctness: it names every value the computation reads (directly, or through objects that
are themselves functions of the key). Results are immutable, so sharing them is safe. A table is emptied when it
reaches its size: memory stays bounded however many users a hosted app serves, and a search's working set is far
smaller than the size.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

T = TypeVar("T")


class Memo(dict):
    """A table of results by key, emptied when it holds `size` of them."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size


def remembered(table: Memo, key: Hashable, compute: Callable[[], T]) -> T:
    """The result kept in `table` under `key`, computed (and kept) on the first ask; results are never None."""
    found = table.get(key)
    if found is None:
        if len(table) >= table.size:
            table.clear()
        found = table[key] = compute()
    return found
