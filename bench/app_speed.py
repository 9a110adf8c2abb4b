"""Server time of the app per rerun after an input change (target: under 300 ms for a typical plan).

Drives app.py through streamlit's AppTest (the same script run as a browser session triggers) and times
Streamlit's own script run (ScriptRunner._run_script), so AppTest's polling is not counted. Only the open tab
runs: the page as it opens (estimate, verdict, breakdown, charts), with Cheapest hardware open (the
recommender, cached per plan), and with Share and export open (the link, the files, the plan as a framework
config).

    python bench/app_speed.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from streamlit.runtime.scriptrunner.script_runner import ScriptRunner
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


RUNS: list[float] = []
_original = ScriptRunner._run_script


def _timed(self, *args, **kwargs):
    start = time.perf_counter()
    try:
        return _original(self, *args, **kwargs)
    finally:
        RUNS.append((time.perf_counter() - start) * 1000)


def _reruns(view: str) -> tuple[list[float], list[float]]:
    """Rerun times with the tab `view` open: each input value once (caches cold), then again (cached)."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.session_state["view"] = view
    at.run()
    changes = [("sequence_length", v) for v in (2048, 8192, 4096, 16384, 1024, 4096)] + \
              [("micro_batch_size", v) for v in (2, 4, 1, 8, 1)]
    fresh, cached = [], []
    for times in (fresh, cached):
        for key, value in changes:
            at.number_input(key=key).set_value(value).run()
            times.append(RUNS[-1])
    return fresh, cached


def main() -> None:
    ScriptRunner._run_script = _timed
    print("| rerun after an input change | median ms | p90 ms |")
    print("|---|---|---|")
    for view, label in (("Breakdown", "the page as it opens (Breakdown)"),
                        ("Cheapest hardware", "Cheapest hardware open (the recommender runs)"),
                        ("Share and export", "Share and export open (the plan written as its framework's config)")):
        fresh, cached = _reruns(view)
        for name, times in ((f"{label}, new plan", fresh), (f"{label}, plan seen before", cached)):
            times = sorted(times)
            print(f"| {name} | {statistics.median(times):.0f} | {times[round(0.9 * (len(times) - 1))]:.0f} |")


if __name__ == "__main__":
    main()
