"""The caching allocator's reserve on real allocation sequences: Hugging Face training and generation steps
recorded op by op (bench/data/traces, see its README), replayed through planner.memory.allocator.

For each trace it prints the peak of live blocks (`max_memory_allocated`), the peak the allocator reserves
with plenty of memory (`max_memory_reserved`), and the least memory the trace runs in without an
out-of-memory error (the allocator releasing its cache and retrying), with and without expandable segments.
The reserve is expressed as a fraction of the memory that churns: the peak's live bytes minus those that live
to the end (weights, optimizer states). Those fractions are where the planner's churn constants come from.

    python bench/allocator_replay.py                # the medians over the training traces (docs/memory-model.md)
    python bench/allocator_replay.py --replay       # first, replay every trace and print its row
    python bench/allocator_replay.py --write        # replay, and write bench/data/allocator-replay.csv
    python bench/allocator_replay.py --write-docs   # and the medians' table in docs/memory-model.md

The medians' table is read from the CSV (a replay takes minutes); tests/test_bench.py replays two traces
against their rows and checks the document shows the CSV's table.
"""

from __future__ import annotations

import csv
import gzip
import statistics
import sys
from pathlib import Path

import _path  # noqa: F401  (the checkout first on sys.path)

import doc_tables

from planner.memory.allocator import Event, replay, round_size
from planner.units import GiB, MiB

TRACES = Path(__file__).resolve().parent / "data" / "traces"


def read_trace(path: Path) -> list[Event]:
    """`a <id> <bytes>` and `f <id>` lines (markers `# …` skipped)."""
    events: list[Event] = []
    with gzip.open(path, "rt") as f:
        for line in f:
            if line.startswith("a "):
                _, key, size = line.split()
                events.append(("a", int(key), int(size)))
            elif line.startswith("f "):
                events.append(("f", int(line.split()[1]), 0))
    return events


def lasting_bytes(events: list[Event]) -> int:
    """Rounded bytes still live at the end of the trace: what is allocated once (weights, optimizer states)."""
    live: dict[int, int] = {}
    for kind, key, size in events:
        if kind == "a":
            live[key] = round_size(size)
        else:
            del live[key]
    return sum(live.values())


def least_capacity(events: list[Event], expandable: bool, high: int) -> int:
    """The smallest capacity (to 2 MiB) the trace runs in: bisection on `replay` raising MemoryError."""
    low = 0
    while high - low > 2 * MiB:
        mid = (low + high) // 2
        try:
            replay(events, capacity_bytes=mid, expandable=expandable)
            high = mid
        except MemoryError:
            low = mid
    return high


def measure(path: Path) -> dict[str, float]:
    events = read_trace(path)
    free = replay(events)
    allocated, lasting = free.peak_allocated_bytes, lasting_bytes(events)
    churn = allocated - lasting
    row: dict[str, float] = {"allocated_gib": allocated / GiB, "churn_gib": churn / GiB}
    for mode, expandable in (("default", False), ("expandable", True)):
        reserved = replay(events, expandable=expandable).peak_reserved_bytes
        least = least_capacity(events, expandable, reserved)
        row[f"{mode}_reserve"] = (reserved - allocated) / churn
        row[f"{mode}_least"] = (least - allocated) / churn
    return row


COLUMNS = ("allocated_gib", "churn_gib", "default_reserve", "default_least", "expandable_reserve", "expandable_least")
FRACTIONS = COLUMNS[2:]
RESULTS = Path(__file__).resolve().parent / "data" / "allocator-replay.csv"


def workload(path: Path) -> str:
    return "inference" if "_infer_" in path.name else "training"


def training_medians(rows: list[dict[str, str]]) -> dict[str, float]:
    """The median fraction over the training traces: what planner/memory/runtime.py takes."""
    training = [r for r in rows if r["workload"] == "training"]
    return {c: statistics.median(float(r[c]) for r in training) for c in FRACTIONS}


def replayed() -> list[dict[str, str]]:
    """Every trace replayed: its CSV row."""
    rows = []
    for path in sorted(TRACES.glob("*.trace.gz")):
        measured = measure(path)
        rows.append(
            {
                "trace": path.name.removesuffix(".trace.gz"),
                "workload": workload(path),
                **{c: f"{measured[c]:.3f}" for c in COLUMNS},
            }
        )
    return rows


def read_rows() -> list[dict[str, str]]:
    with RESULTS.open() as f:
        return list(csv.DictReader(f))


def write_rows(rows: list[dict[str, str]]) -> None:
    with RESULTS.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def print_rows(rows: list[dict[str, str]]) -> None:
    print("| trace | workload | " + " | ".join(COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 2) + "|")
    for r in rows:
        print("| " + " | ".join(r.values()) + " |")
    print()


MEANINGS = {"reserve": "reserved with memory to spare", "least": "least memory the step runs in"}


def main() -> None:
    """The table docs/memory-model.md shows: per measure and mode, the median fraction over the training traces of
    bench/data/allocator-replay.csv, and their range."""
    training = [r for r in read_rows() if r["workload"] == "training"]
    print(f"| over {len(training)} training traces | default segments | expandable segments |")
    print("|---|---|---|")
    for stat, meaning in MEANINGS.items():
        cells = []
        for mode in ("default", "expandable"):
            values = [float(r[f"{mode}_{stat}"]) for r in training]
            cells.append(f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})")
        print(f"| {meaning} (median, range) | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    if "--replay" in sys.argv or "--write" in sys.argv:
        rows = replayed()
        print_rows(rows)
        if "--write" in sys.argv:
            write_rows(rows)
    doc_tables.run(main, doc_tables.DOCS / "memory-model.md")
