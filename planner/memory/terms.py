"""Terms: an item's bytes and its formula text computed from the same named values, so they cannot drift.

A `Product` multiplies named factors ("1,234 params", "2 B (bf16)") and reads them joined by " × "; a `Sum`
adds terms and reads " + "; `Sharded` splits a term over ZeRO ranks (routed experts over their own ranks) and
reads the split; `Described` is bytes worked out elsewhere with a formula written as a template of the same
values, filled only when read. An `Item` keeps its term; `item()` renders the formula only when asked for
detail, so searches (`detail=False`) build terms but never strings. Terms are named tuples rather than frozen
dataclasses because searches build them by the thousand: construction must stay cheap.
"""

from __future__ import annotations

from math import prod
from typing import NamedTuple

from planner.memory.result import Item, Level
from planner.units import format_bytes


def count(x: int) -> str:
    """An integer as the formulas write it: 1,234,567."""
    return f"{x:,}"


class Factor(NamedTuple):
    """A named number of a product: `value` `unit`, e.g. 1,234 params or 2 B (bf16)."""

    value: int | float
    unit: str = ""
    spec: str = ""  # how the value reads (format spec); default 1,234 for integers, :g for fractions

    def text(self) -> str:
        if isinstance(self.value, Size):  # a size reads in its unit: Factor(Size(512 * MiB), "MiB.0")
            return format(self.value, self.unit)
        if self.spec:
            number = format(self.value, self.spec)
        else:
            number = count(self.value) if isinstance(self.value, int) else f"{self.value:g}"
        return f"{number} {self.unit}" if self.unit else number


class Product(NamedTuple):
    """The product of its factors, rounded to bytes; `prefix` and `suffix` say more about it without changing
    it (e.g. the symbols the factors stand for)."""

    factors: tuple[Factor, ...]
    suffix: str = ""
    prefix: str = ""

    @property
    def bytes(self) -> int:
        return round(prod([f[0] for f in self.factors]))

    def formula(self) -> str:
        return self.prefix + " × ".join(f.text() for f in self.factors) + self.suffix


class Sum(NamedTuple):
    """The sum of its terms."""

    terms: tuple[Term, ...]
    suffix: str = ""

    @property
    def bytes(self) -> int:
        return sum(t.bytes for t in self.terms)

    def formula(self) -> str:
        return " + ".join(t.formula() for t in self.terms) + self.suffix


class Sharded(NamedTuple):
    """A term split over `shards` ranks (ZeRO/FSDP), of whose bytes `expert_bytes` belong to routed experts and
    are split over `expert_shards` ranks instead; each share rounded up. `note` reads the split when there is
    one."""

    term: Term
    shards: int
    expert_bytes: int
    expert_shards: int
    note: str

    @property
    def bytes(self) -> int:
        whole = self.term.bytes
        return -(-(whole - self.expert_bytes) // self.shards) + -(-self.expert_bytes // self.expert_shards)

    def formula(self) -> str:
        return self.term.formula() + (self.note if self.shards > 1 else "")


class Described(NamedTuple):
    """Bytes computed by the technique's own arithmetic, with its formula as a template of the same values
    (`str.format` of `args`), filled only when read."""

    bytes: int
    template: str
    args: tuple = ()

    def formula(self) -> str:
        return self.template.format(*self.args) if self.args else self.template


Term = Product | Sum | Sharded | Described


def item(name: str, label: str, term: Term, note: str, detail: bool, level: Level = "allocated") -> Item:
    """An item of `term`'s bytes; its formula is rendered only with `detail`."""
    return Item(
        name=name,
        label=label,
        bytes=term.bytes,
        formula=term.formula() if detail else "",
        note=note,
        level=level,
        term=term,
    )


def fixed(nbytes: int, text: str) -> Described:
    """Bytes with a formula that has no values to fill (a constant, or a word such as "0 (on CPU)")."""
    return Described(nbytes, text)


class Size(int):
    """A byte count that a `Described` template writes as format_bytes does: "{}" → 1.23 GiB, "{:MiB.1}" →
    123.4 MiB."""

    def __format__(self, spec: str) -> str:
        if not spec:
            return format_bytes(int(self))
        unit, digits = spec.split(".")
        return format_bytes(int(self), unit, int(digits))  # type: ignore[arg-type]
