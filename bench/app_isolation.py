"""What one session's heavy search costs another session of the same server: a light rerun's work (100
estimates, ~0.2 s alone) timed while other threads, as Streamlit runs other sessions, search a heavy plan
(the 128-layer, 256-expert link), once in the server process itself and once in worker processes (ui/worker.py,
as the app does).

    python bench/app_isolation.py
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.catalog import load_catalog  # noqa: E402
from planner.codec import plan_from_dict  # noqa: E402
from planner.memory import estimate  # noqa: E402
from planner.recommend import SearchOptions, recommend  # noqa: E402
from ui import worker  # noqa: E402

HEAVY = plan_from_dict({"model": {"preset": "qwen3-235b-a22b", "num_layers": 128, "num_experts": 256},
                        "workload": {"micro_batch_size": 8192, "global_batch_size": 8192},
                        "techniques": {"attention": "eager"}})
LIGHT = plan_from_dict({"model": {"preset": "llama-3.1-8b"}, "parallelism": {"data": 8, "zero_stage": 3}})
CATALOG = load_catalog()
SEEN = [0]  # sequence lengths used so far: each light plan is new, as a changed input's is


def _light() -> float:
    """Seconds of a light rerun's planner work: the estimates of 100 plans (sequence lengths none seen before)."""
    start = time.perf_counter()
    for _ in range(100):
        SEEN[0] += 1
        estimate(replace(LIGHT, workload=replace(LIGHT.workload, sequence_length=1024 + SEEN[0])), CATALOG)
    return time.perf_counter() - start


def _heavy_inline(stop: threading.Event) -> None:
    while not stop.is_set():
        recommend(HEAVY, CATALOG, SearchOptions(budget_s=10))


def _heavy_worker(stop: threading.Event) -> None:
    while not stop.is_set():
        worker.run(recommend, HEAVY, CATALOG, SearchOptions(budget_s=10), wait_s=60)


def _with(heavy, sessions: int, repeat: int = 9) -> float:
    """The light rerun's median while `sessions` threads run `heavy`."""
    stop = threading.Event()
    threads = [threading.Thread(target=heavy, args=(stop,), daemon=True) for _ in range(sessions)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # the heavy searches under way
    times = [_light() for _ in range(repeat)]
    stop.set()
    return statistics.median(times)


def main() -> None:
    worker.run(divmod, 1, 1, wait_s=60)  # the fork server and a worker started
    alone = statistics.median(_light() for _ in range(5))
    print("| other sessions searching the heavy plan | light rerun, searches in the server process (s) | "
          "light rerun, searches in worker processes (s) |")
    print("|---|---|---|")
    print(f"| none | {alone:.2f} | {alone:.2f} |")
    for sessions in (1, 4):
        print(f"| {sessions} | {_with(_heavy_inline, sessions):.2f} | {_with(_heavy_worker, sessions):.2f} |")


if __name__ == "__main__":
    main()
