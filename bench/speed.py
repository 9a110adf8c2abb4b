"""Speed of the planner: one estimate, and the recommender's search of the whole catalog (every offering of every
GPU type, the default 30-day deadline, no time budget).

    python bench/speed.py                # per plan: estimate, search, search cost over one estimate, in milliseconds
    python bench/speed.py --write-docs   # and the table in docs/catalog.md, dated, with the machine it ran on

The figure that matters is the search's cost over one estimate, measured in the same run: what a person waits
for beyond the breakdown. Goals (issue 26): median at most 100 ms over these plans, at most 300 ms for the 405B
and DeepSeek-V3 plans. The first search of each plan in a fresh process ("cold") is shown beside the median of
the repeats ("warm": the time model's per-strategy work is remembered across searches).
"""

from __future__ import annotations

import statistics
import time
from functools import partial

import _path  # noqa: F401  (the checkout first on sys.path)

import doc_tables

from planner.catalog import load_catalog
from planner.memory import estimate
from planner.plan.codec import plan_from_dict
from planner.search.recommend import recommend

PLANS = {
    "Llama 3.2 1B, seq 2048, 1 GPU": {
        "model": {"preset": "llama-3.2-1b"},
        "workload": {"sequence_length": 2048, "micro_batch_size": 4},
    },
    "Llama 3.1 8B, seq 4096, batch 64": {
        "model": {"preset": "llama-3.1-8b"},
        "workload": {"sequence_length": 4096, "micro_batch_size": 2, "global_batch_size": 64},
    },
    "Llama 3.1 8B on 1T tokens": {
        "model": {"preset": "llama-3.1-8b"},
        "workload": {"sequence_length": 8192, "global_batch_size": 512, "train_tokens": 10**12},
    },
    "Qwen2.5 7B QLoRA": {"model": {"preset": "qwen2.5-7b"}, "workload": {"task": "qlora", "sequence_length": 4096}},
    "Llama 3.1 70B, seq 8192, batch 512": {
        "model": {"preset": "llama-3.1-70b"},
        "workload": {"sequence_length": 8192, "global_batch_size": 512},
    },
    "Llama 3.1 70B serving (vLLM)": {
        "model": {"preset": "llama-3.1-70b"},
        "framework": "vllm",
        "workload": {"task": "inference", "inference": {"batch_size": 32, "gpu_memory_utilization": 0.9}},
        "parallelism": {"zero_stage": 0},
    },
    "Llama 3.1 405B, seq 8192, batch 1024": {
        "model": {"preset": "llama-3.1-405b"},
        "workload": {"sequence_length": 8192, "global_batch_size": 1024},
    },
    "DeepSeek-V3, seq 4096, batch 1920": {
        "model": {"preset": "deepseek-v3"},
        "workload": {"sequence_length": 4096, "global_batch_size": 1920},
    },
}
HEADER = (
    "| plan | estimate ms | search ms, cold | search ms, warm | search over one estimate, warm | candidates "
    "| recommended |"
)
DOC = doc_tables.DOCS / "catalog.md"
LARGE = ("Llama 3.1 405B, seq 8192, batch 1024", "DeepSeek-V3, seq 4096, batch 1920")


def timed(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return sorted(times)


def main(repeat: int = 5) -> None:
    catalog = load_catalog()
    print(doc_tables.machine() + "\n")
    print(
        f"Catalog: {len(catalog)} GPU types, {len(catalog.offerings)} offerings; default 30-day deadline, no budget.\n"
    )
    print(HEADER)
    print("|---" * (HEADER.count("|") - 1) + "|")
    over: dict[str, float] = {}
    for name, data in PLANS.items():
        plan = plan_from_dict(data)
        cold = timed(partial(recommend, plan, catalog), 1)[0]
        est = statistics.median(timed(partial(estimate, plan, catalog), 20))
        rec = recommend(plan, catalog)
        warm = statistics.median(timed(partial(recommend, plan, catalog), repeat))
        over[name] = warm - est
        best = rec.best
        answer = "none" if best is None else f"{best.count * best.replicas:,} × {best.gpu.id} ({best.offering.id})"
        print(f"| {name} | {est:.2f} | {cold:.0f} | {warm:.0f} | {over[name]:.0f} | {len(rec.candidates)} | {answer} |")
    print(
        f"\nSearch over one estimate: median {statistics.median(over.values()):.0f} ms over the plans (goal ≤ 100); "
        + ", ".join(f"{n.split(',')[0]} {over[n]:.0f} ms" for n in LARGE)
        + " (goal ≤ 300 each)"
    )


if __name__ == "__main__":
    doc_tables.run(main, DOC)
