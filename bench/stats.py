"""Error statistics by group, as one markdown table: what bench/throughput.py and bench/serving.py print.

An error is predicted / measured - 1. A group's statistics: the median and the p90 of |error| and the signed
median, each over the group's rows.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

# a statistic's name: (its column header, its value over a group's errors)
STATISTICS: dict[str, tuple[str, Callable[[list[float]], float]]] = {
    "median": ("median abs error", lambda e: statistics.median(abs(x) for x in e)),
    "p90": ("p90 abs error", lambda e: p90([abs(x) for x in e])),
    "signed": ("signed median", statistics.median),
}
ALL = ("median", "p90", "signed")


def quantile(values: list[float], q: float) -> float:
    """The nearest-rank q-quantile."""
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def p90(values: list[float]) -> float:
    """The nearest-rank 90th percentile: what every bench's "p90 abs error" is of the |errors|."""
    return quantile(values, 0.9)


def pct(x: float) -> float:
    """A fraction as the data files' percent, to a tenth."""
    return round(100 * x, 1)


def band(errors: list[float]) -> dict:
    """What planner/accuracy.py's TimeBand reads for a class of runs, in percent: the median and the p90 of
    |error|, the signed median, and the 10th and 90th percentiles of the signed error (8 runs in 10 between)."""
    return {
        "rows": len(errors),
        "median_pct": pct(statistics.median(map(abs, errors))),
        "p90_pct": pct(p90([abs(e) for e in errors])),
        "signed_pct": pct(statistics.median(errors)),
        "low_pct": pct(quantile(errors, 0.1)),
        "high_pct": pct(quantile(errors, 0.9)),
    }


def groups(rows: list[dict], *labels: Callable[[dict], str]) -> list[tuple[str, list[dict]]]:
    """("all", every row), then for each labelling one group per name it gives a row, names in sorted order."""
    out = [("all", rows)]
    for label in labels:
        for name in sorted({label(r) for r in rows}):
            out.append((name, [r for r in rows if label(r) == name]))
    return out


def error_table(grouped: list[tuple[str, list[dict]]], tools: list[tuple[str, str, tuple[str, ...]]]) -> str:
    """A markdown table, a line per group: its row count, then for each tool (its name, the row key that holds
    its error, the statistics to show) those statistics of the group's errors."""
    header = [f"{tool} {STATISTICS[s][0]}" for tool, _, shown in tools for s in shown]
    lines = ["| group | rows | " + " | ".join(header) + " |", "|---" * (len(header) + 2) + "|"]
    for name, rows in grouped:
        cells = []
        for _, key, shown in tools:
            for s in shown:
                value = STATISTICS[s][1]([r[key] for r in rows])
                cells.append(f"{value:+.1%}" if s == "signed" else f"{value:.1%}")
        lines.append(f"| {name} | {len(rows)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
