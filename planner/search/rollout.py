"""The recommender's question for GRPO: where the rollout engine runs, for the cheapest run.

At a total GPU count T (what the job pays for) a GRPO plan lays out as:
- colocated: the engine on the T training GPUs, at a memory fraction (FRACTIONS and the plan's own) and a sleep
  level (the plan's own, or 2: the engine frees its weights and KV cache while the policy trains);
- split: N = T − M training GPUs beside a server engine of M = TP × replicas GPUs of its own (replicas doubling).
Each layout's fastest training strategy comes from planner/search/strategies.py, its job time with the rollout
from planner/perf/training.py. The fastest layout at T is also its cheapest (the same GPUs paid), so the
offering's count ladder (recommend.py) is unchanged. Layouts are taken in the order of a lower bound of their
time: the training FLOPs on their N training GPUs at the achievable matmul rate (compute_floor_hours) with their
exact rollout added (overlapped under async_rollout); the search stops at the first bound no better than the
fastest layout found, so it times a handful of layouts per count, not all of them.

The engine's tensor parallelism is any degree the strategies may take (within a node, splitting the heads) at which
one replica holds a completion's KV cache beside its weights; a server's further GPUs are replicas, which share
the prompts (trl@f2cd577 trl/scripts/vllm_serve.py: data_parallel_size workers, each a whole engine).
Sleep level and fraction cost no time beyond the rollout's waves (docs/limits.md).
"""

from __future__ import annotations

from dataclasses import replace

from planner.catalog import Gpu
from planner.memory import Estimate
from planner.memory.inference import inference_estimate
from planner.memory.rollout import rollout_wave
from planner.perf import compute_floor_hours, job_time, rollout_time
from planner.plan.config import Plan, Rl, SleepLevel
from planner.search.strategies import Found, Limits, StrategySearch

# the colocated engine's memory fractions searched, besides the plan's own: TRL's colocate default 0.3
# (huggingface/trl@f2cd577 trl/trainer/grpo_config.py vllm_gpu_memory_utilization), verl's rollout default 0.5
# (volcengine/verl@b178a3c verl/trainer/config/rollout/rollout.yaml gpu_memory_utilization) and 0.7, the upper end
# of what verl's GRPO examples set (examples/grpo_trainer/*.sh: 0.6 in 28 scripts, 0.7 in 7)
FRACTIONS = (0.3, 0.5, 0.7)
# sleep level 2 frees the engine's weights and KV cache during the policy's step (TRL vllm_enable_sleep_mode,
# verl's hybrid engine): the most memory any level saves, at no host RAM (level 1 keeps the weights there)
DEEPEST_SLEEP: SleepLevel = 2


def colocated(rl: Rl, fraction: float, sleep: SleepLevel, tensor: int) -> Rl:
    """The engine on the training GPUs at this fraction, sleep level and tensor parallelism."""
    return replace(
        rl,
        engine="colocate",
        gpu_memory_utilization=fraction,
        sleep_level=sleep,
        tensor_parallel=tensor,
        engine_gpus=0,
        async_rollout=False,
    )


def server(rl: Rl, tensor: int, gpus: int) -> Rl:
    """A server engine on `gpus` GPUs of its own, replicas of `tensor` each (the plan's async_rollout kept)."""
    return replace(
        rl, engine="server", tensor_parallel=tensor, engine_gpus=gpus, sleep_level=0, offload_during_rollout=False
    )


def rollout_text(plan: Plan) -> str:
    """Where a GRPO plan's engine runs, in a few words ("" for other plans)."""
    wl = plan.workload
    if wl.objective != "grpo":
        return ""
    rl = wl.rl
    if rl.engine == "colocate":
        return (
            f"engine colocated (TP {rl.tensor_parallel}, {rl.gpu_memory_utilization:.0%} of memory, "
            f"sleep {rl.sleep_level})"
        )
    mode = "async" if rl.async_rollout else "sync"
    return (
        f"{plan.hardware.count} training + {rl.engine_gpus} engine GPUs ({rl.engine_replicas} × TP "
        f"{rl.tensor_parallel}, {mode})"
    )


def gpus_text(plan: Plan) -> str:
    """A plan's GPUs: "6 + 2" where a GRPO server engine has GPUs of its own beside the training GPUs."""
    engine = plan.total_gpus - plan.hardware.count
    return f"{plan.hardware.count:,} + {engine:,}" if engine else f"{plan.hardware.count:,}"


class RolloutSearch:
    """Every engine layout of one GRPO plan at the counts the recommender asks, each layout's strategies searched
    once (same interface as StrategySearch's first_fit and best_at, counts meaning every GPU the job holds)."""

    def __init__(self, plan: Plan, catalog, fixed: frozenset[str], stop_at: float = float("inf")) -> None:
        self.plan, self.catalog, self.fixed, self.stop_at = plan, catalog, fixed, stop_at
        self.search = StrategySearch(plan, catalog, fixed, stop_at)  # the plan's own, for its strategy space
        self._searches: dict[tuple[Rl, str | None], StrategySearch] = {}
        self._best: dict[tuple, Found | None] = {}
        self._tensor: dict[tuple[Rl, str, int], tuple[int, ...]] = {}
        self.steps_per_token = 1 / (plan.workload.global_batch_size * plan.workload.sequence_length)

    def _strategies(self, rl: Rl, gpu: Gpu) -> StrategySearch:
        """The strategy search of the plan with this engine layout: one per GPU type where the engine is
        colocated (its fraction is of that GPU's memory), one for every GPU where it is a server."""
        key = (rl, gpu.id if rl.engine == "colocate" else None)
        if key not in self._searches:
            memory_gpu = self.catalog[gpu.id] if rl.engine == "colocate" else None
            self._searches[key] = StrategySearch(self.plan, self.catalog, self.fixed, self.stop_at, rl, memory_gpu)
        return self._searches[key]

    def _tensors(self, rl: Rl, gpu: Gpu, count: int) -> tuple[int, ...]:
        """The tensor-parallel degrees at which one engine replica of layout `rl` holds a completion on this GPU (a
        server's within its own fraction), dividing `count` where colocated: those the strategies may take (within
        a node, splitting the heads); the plan's own where 'rollout' is fixed."""
        key = (rl, gpu.id, count)
        if key not in self._tensor:
            own = self.plan.workload.rl.tensor_parallel
            tensors = (own,) if "rollout" in self.fixed else self.search.tensors(gpu)
            self._tensor[key] = tuple(t for t in tensors if self._holds(rl, gpu, count, t))
        return self._tensor[key]

    def _holds(self, rl: Rl, gpu: Gpu, count: int, t: int) -> bool:
        if rl.engine == "colocate":
            return count % t == 0 and rollout_wave(self.plan, gpu, replace(rl, tensor_parallel=t), count)[2] >= 1
        probe = server(rl, t, t)
        return inference_estimate(rollout_wave(self.plan, gpu, probe, count)[0], gpu, False).fits

    def layouts(self, gpu: Gpu, total: int) -> list[tuple[Rl, int]]:
        """(engine layout, training GPUs) of every layout at `total` GPUs, the plan's own first: with 'rollout'
        fixed its own alone. A colocated engine alternates with the step; a split one overlaps it where the plan's
        framework does (its async_rollout)."""
        rl = self.plan.workload.rl
        if "rollout" in self.fixed:
            own = [(rl, total - rl.engine_gpus)] if total > rl.engine_gpus else []
            return [(x, n) for x, n in own if rl.engine == "server" or total % rl.tensor_parallel == 0]
        out: list[tuple[Rl, int]] = []
        own_sleep = rl.sleep_level if rl.engine == "colocate" else 0
        for f in dict.fromkeys((rl.gpu_memory_utilization, *sorted(FRACTIONS))):
            for s in dict.fromkeys((own_sleep, DEEPEST_SLEEP)):
                probe = colocated(rl, f, s, 1)
                out += [(replace(probe, tensor_parallel=t), total) for t in self._tensors(probe, gpu, total)]
        for t in self._tensors(server(rl, 1, 1), gpu, 1):
            out += [(server(rl, t, m), total - m) for m in (t << k for k in range(total.bit_length())) if m < total]
        return sorted(out, key=lambda x: x[0] != rl)  # stable: the plan's own layout first

    def bound(self, gpu: Gpu, rl: Rl, n: int, tokens: int, mfu: float | None) -> float:
        """Hours no strategy of this layout beats: training FLOPs on its n GPUs at the achievable matmul rate and
        its rollout (added, or overlapped when asynchronous); an MFU override times the training alone."""
        train = compute_floor_hours(self.plan, gpu, tokens, n, mfu)
        ro = None if mfu is not None else rollout_time(self.plan, gpu, rl, n)
        rollout = 0.0 if ro is None else tokens * self.steps_per_token * ro.seconds / 3600
        return max(train, rollout) if rl.async_rollout else train + rollout

    def best_at(self, gpu: Gpu, total: int, limits: Limits, tokens: int, mfu: float | None) -> Found | None:
        """The fastest layout and strategy that fit `total` GPUs shaped as `gpu` (None: none fits)."""
        key = (gpu, total, limits, tokens, mfu)
        if key not in self._best:
            ranked = sorted(
                ((self.bound(gpu, rl, n, tokens, mfu), i, rl, n) for i, (rl, n) in enumerate(self.layouts(gpu, total))),
                key=lambda x: x[:2],
            )
            best: Found | None = None
            for bound, _, rl, n in ranked:
                if best is not None and bound >= best.hours:
                    break  # in the order of their bound: no later layout is faster
                found = self.timed(gpu, rl, n, limits, tokens, mfu)
                best = found if found is not None and (best is None or found.hours < best.hours) else best
            self._best[key] = best
        return self._best[key]

    def timed(self, gpu: Gpu, rl: Rl, n: int, limits: Limits, tokens: int, mfu: float | None) -> Found | None:
        """The fastest strategy of one layout on its n training GPUs. A server's replicas change the rollout, not
        the training GPUs' memory nor their fastest strategy (the rollout adds to it, or hides behind it): its
        strategies are searched once, with one replica, and timed again with the layout's."""
        if rl.engine == "colocate":
            return self._strategies(rl, gpu).best_at(gpu, n, limits, tokens, mfu)
        found = self._strategies(server(rl, rl.tensor_parallel, rl.tensor_parallel), gpu).best_at(
            gpu, n, limits, tokens, mfu
        )
        if found is None or rl.engine_replicas == 1:
            return found
        plan = found.estimate.plan
        plan = replace(plan, workload=replace(plan.workload, rl=rl))
        return Found(estimate=replace(found.estimate, plan=plan), hours=job_time(plan, gpu, tokens, mfu)[0])

    def first_fit(self, gpu: Gpu, counts: tuple[int, ...], limits: Limits) -> tuple[int | None, Estimate | None]:
        """(the fewest of `counts` at which some layout fits with its most memory-saving strategies, else the
        closest miss at the most GPUs): colocated at its deepest sleep and least fraction, or split with the
        fewest engine GPUs."""
        closest: Estimate | None = None
        for total in counts:
            saving = self._most_saving(gpu, total)
            for rl, n in saving:
                fit, miss = self._strategies(rl, gpu).first_fit(gpu, (n,), limits)
                if fit is not None:
                    return total, None
                closest = miss if miss is not None and total == counts[-1] else closest
        return None, closest

    def _most_saving(self, gpu: Gpu, total: int) -> list[tuple[Rl, int]]:
        """The layouts at `total` that leave the training GPUs the most memory: the colocated one at the deepest
        sleep and the least fraction, and the split with the fewest engine GPUs (searched with one replica)."""
        layouts = self.layouts(gpu, total)
        placed = [x for x in layouts if x[0].engine == "colocate"]
        least = min(placed, key=lambda x: (-x[0].sleep_level, x[0].gpu_memory_utilization), default=None)
        split = min((x for x in layouts if x[0].engine == "server"), key=lambda x: x[0].engine_gpus, default=None)
        return [x for x in (least, split) if x is not None]
