"""Byte units and the one function that formats byte counts (and the count of anything else with its noun).

Inside the planner every quantity of memory is an integer number of bytes. Two families of units are
kept apart and always labelled: binary (MiB = 2**20, GiB = 2**30 bytes, what PyTorch and nvidia-smi
print) and decimal (GB = 1e9 bytes, what GPU vendors print on the box).
"""

from __future__ import annotations

from typing import Literal

KiB = 2**10
MiB = 2**20
GiB = 2**30
MB = 10**6
GB = 10**9

ByteUnit = Literal["B", "MiB", "GiB", "MB", "GB"]
# the suffixes of a count of parameters or tokens, as model cards write them (13B, 770M, 1T)
COUNT_SUFFIX = {"k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}
UNIT_BYTES: dict[str, int] = {"B": 1, "MiB": MiB, "GiB": GiB, "MB": MB, "GB": GB}


def parse_count(value: object) -> int:
    """'13B', '770m', '1T', '1.5e9', '2,000' or a number, as an integer; ValueError where it is not a count."""
    if isinstance(value, bool):
        raise ValueError(value)
    text = str(value).strip().lower().replace("_", "").replace(",", "")
    scale = COUNT_SUFFIX.get(text[-1:], 1) if text else 1
    try:
        return round(float(text[:-1] if scale != 1 else text) * scale)
    except OverflowError:  # infinity
        raise ValueError(value) from None


def to_unit(n_bytes: int, unit: ByteUnit = "GiB") -> float:
    """`n_bytes` expressed in `unit` (a float, for display and charts only)."""
    return n_bytes / UNIT_BYTES[unit]


def format_bytes(n_bytes: int, unit: ByteUnit = "GiB", digits: int = 2) -> str:
    """'12.34 GiB'. The only place the planner turns bytes into text."""
    if unit == "B":
        return f"{n_bytes:,} B"
    return f"{to_unit(n_bytes, unit):,.{digits}f} {unit}"


def from_gib(gib: float) -> int:
    """A GiB figure (e.g. a catalog's usable memory) as integer bytes."""
    return round(gib * GiB)


def from_gb(gb: float) -> int:
    """A decimal-GB figure (a vendor's label) as integer bytes."""
    return round(gb * GB)


def counted(n: int, noun: str) -> str:
    """A count and its noun, singular for one: "1 sequence", "2,048 sequences"."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def format_hours(hours: float) -> str:
    """A wall-clock time in a person's unit: "45 min", "12.3 h", "28.4 days"."""
    if hours < 1:
        return f"{hours * 60:,.0f} min"
    return f"{hours:,.1f} h" if hours < 48 else f"{hours / 24:,.1f} days"


def format_seconds(seconds: float) -> str:
    """A step's or a batch's time: "0.534 s", "12.3 s"; from a minute on in format_hours' units."""
    return f"{seconds:.3g} s" if seconds < 60 else format_hours(seconds / 3600)
