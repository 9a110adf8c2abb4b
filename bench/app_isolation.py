"""What one session's heavy work costs another session of the same server: a light rerun's work (1,000
estimates, ~0.2 s alone) timed while other threads, as Streamlit runs other sessions,
- search a heavy plan (the 128-layer, 256-expert link), or
- read hostile pastes (every shape of bench/fuzz.py, cut to what a paste box holds, read as a framework config
  and as a vLLM log, as the two paste boxes do),
once in the server process itself and once in worker processes (ui/worker.py, as the app does).

    python bench/app_isolation.py                  # the table
    python bench/app_isolation.py --write-docs     # and the table in docs/hosting.md, dated, with the machine
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import _path  # noqa: F401  (the checkout first on sys.path)

import doc_tables
from fuzz import SHAPES

from planner.catalog import load_catalog
from planner.errors import PlanError
from planner.formats import read_config
from planner.formats.vllm_log import parse_vllm_log
from planner.memory import estimate
from planner.plan.codec import plan_from_dict
from planner.search.recommend import SearchOptions, recommend
from ui import worker
from ui.state import PASTE_MAX_CHARS

HEADER = (
    "| other sessions | light rerun, their work in the server process (s) | "
    "light rerun, their work in worker processes (s) |"
)
DOC = doc_tables.DOCS / "hosting.md"
HEAVY = plan_from_dict(
    {
        "model": {"preset": "qwen3-235b-a22b", "num_layers": 128, "num_experts": 256},
        "workload": {"micro_batch_size": 8192, "global_batch_size": 8192},
        "techniques": {"attention": "eager"},
    }
)
LIGHT = plan_from_dict({"model": {"preset": "llama-3.1-8b"}, "parallelism": {"data": 8, "zero_stage": 3}})
CATALOG = load_catalog()
SEEN = [0]  # sequence lengths used so far: each light plan is new, as a changed input's is


def _light() -> float:
    """Seconds of a light rerun's planner work: the estimates of 1,000 plans (sequence lengths none seen before)."""
    start = time.perf_counter()
    for _ in range(1_000):
        SEEN[0] += 1
        estimate(replace(LIGHT, workload=replace(LIGHT.workload, sequence_length=1024 + SEEN[0])), CATALOG)
    return time.perf_counter() - start


def _heavy_inline(stop: threading.Event) -> None:
    while not stop.is_set():
        recommend(HEAVY, CATALOG, SearchOptions(budget_s=10))


def _heavy_worker(stop: threading.Event) -> None:
    while not stop.is_set():
        worker.run(recommend, HEAVY, CATALOG, SearchOptions(budget_s=10), wait_s=60)


# each shape as 1 MB would be pasted, and as the paste box hands it on (Streamlit cuts it to max_chars)
PASTES = [build(1_000_000)[:PASTE_MAX_CHARS] for build in SHAPES.values()]
READS = (("config", read_config), ("log", parse_vllm_log))


def _pastes(stop: threading.Event, read: Callable[[str, Callable[[str], object], str], object]) -> None:
    """Read every paste in turn (as a session rerun with each) until `stop`."""
    while True:
        for text in PASTES:
            for field, reader in READS:
                if stop.is_set():
                    return
                try:
                    read(field, reader, text)
                except PlanError:
                    pass


def _paste_inline(stop: threading.Event) -> None:
    _pastes(stop, lambda field, reader, text: reader(text))


def _paste_worker(stop: threading.Event) -> None:
    _pastes(stop, worker.read)


def _slowest_read() -> tuple[float, str]:
    """The CPU seconds of the slowest paste read in this process, and its shape."""
    slowest = (0.0, "")
    for shape, text in zip(SHAPES, PASTES, strict=True):
        for _, reader in READS:
            start = time.process_time()
            try:
                reader(text)
            except PlanError:
                pass
            slowest = max(slowest, (time.process_time() - start, shape))
    return slowest


def _with(heavy, sessions: int, repeat: int = 9) -> float:
    """The light rerun's median while `sessions` threads run `heavy`."""
    stop = threading.Event()
    threads = [threading.Thread(target=heavy, args=(stop,), daemon=True) for _ in range(sessions)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # the heavy searches under way
    times = [_light() for _ in range(repeat)]
    stop.set()
    for t in threads:  # none runs on into the next measurement
        t.join()
    return statistics.median(times)


def main() -> None:
    worker.run(divmod, 1, 1, wait_s=60)  # the fork server and a worker started, for each pool
    worker.read("config", str, "")
    alone = statistics.median(_light() for _ in range(5))
    seconds, shape = _slowest_read()
    print(doc_tables.machine() + "\n")
    print(
        f"{len(PASTES)} paste shapes of {PASTE_MAX_CHARS:,} characters; the slowest read: {seconds:.2f} s of CPU,\n"
        f"the shape {shape}.\n"
    )
    print(HEADER)
    print("|---" * (HEADER.count("|") - 1) + "|")
    print(f"| none | {alone:.2f} | {alone:.2f} |")
    for what, inline, in_worker in (
        ("searching the heavy plan", _heavy_inline, _heavy_worker),
        ("reading hostile pastes", _paste_inline, _paste_worker),
    ):
        for sessions in (1, 4):
            print(f"| {sessions} {what} | {_with(inline, sessions):.2f} | {_with(in_worker, sessions):.2f} |")


if __name__ == "__main__":
    doc_tables.run(main, DOC)
