"""Speed of the planner: one estimate, and the full recommender search over the whole catalog.

    python bench/speed.py        # median and p90 per plan, milliseconds (target: search < 100 ms median)
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.catalog import load_catalog  # noqa: E402
from planner.memory import estimate  # noqa: E402
from planner.codec import plan_from_dict  # noqa: E402
from planner.recommend import recommend  # noqa: E402

PLANS = {
    "Llama 3.2 1B, seq 2048, 1 GPU": {"model": {"preset": "llama-3.2-1b"},
                                      "workload": {"sequence_length": 2048, "micro_batch_size": 4}},
    "Llama 3.1 8B, seq 4096, batch 64": {"model": {"preset": "llama-3.1-8b"},
                                         "workload": {"sequence_length": 4096, "micro_batch_size": 2,
                                                      "global_batch_size": 64}},
    "Llama 3.1 70B, seq 8192, batch 512": {"model": {"preset": "llama-3.1-70b"},
                                           "workload": {"sequence_length": 8192, "global_batch_size": 512}},
    "Llama 3.1 405B, seq 8192, batch 1024": {"model": {"preset": "llama-3.1-405b"},
                                             "workload": {"sequence_length": 8192, "global_batch_size": 1024}},
}


def timed(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return sorted(times)


def p90(times: list[float]) -> float:
    return times[min(len(times) - 1, round(0.9 * (len(times) - 1)))]


def main() -> None:
    catalog = load_catalog()
    print(f"catalog: {len(catalog)} GPUs; counts 1 to 1,024")
    print("| plan | estimate median ms | search median ms | search p90 ms | candidates |")
    print("|---|---|---|---|---|")
    medians = []
    for name, data in PLANS.items():
        plan = plan_from_dict(data)
        est = timed(lambda: estimate(plan, catalog), 50)
        search = timed(lambda: recommend(plan, catalog), 9)
        medians.append(statistics.median(search))
        n = len(recommend(plan, catalog).candidates)
        print(f"| {name} | {statistics.median(est):.2f} | {statistics.median(search):.0f} | {p90(search):.0f} | {n} |")
    print(f"\nmedian over the plans: {statistics.median(medians):.0f} ms (target < 100 ms)")


if __name__ == "__main__":
    main()
