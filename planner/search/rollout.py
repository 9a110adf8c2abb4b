"""The recommender's question for GRPO and PPO: where the rollout engine runs, for the cheapest run.

At a total GPU count T (what the job pays for) a GRPO or PPO plan with a vLLM engine lays out as (a plan that
generates with the policy's own `generate`, `workload.rl.engine generate`, has no engine to place):
- colocated: the engine on the T training GPUs, at a memory fraction (FRACTIONS and the plan's own) and a sleep
  level (the plan's own, or 2: the engine frees its weights and KV cache while the policy trains);
- split: N = T − M training GPUs beside a server engine of M = TP × replicas GPUs of its own (replicas doubling).
The engine's tensor parallelism is any degree the strategies may take (within a node, splitting the heads) at which
one replica holds a completion's KV cache beside its weights; a server's further GPUs are replicas, which share
the prompts (trl@f2cd577 trl/scripts/vllm_serve.py: data_parallel_size workers, each a whole engine).

Each colocated layout's fastest training strategy comes from its own planner/search/strategies.py search (the
engine's memory changes which strategies fit); every split shares one search of the training GPUs with no engine,
timed with its rollout (planner/perf/training.py). The fastest layout at T is also its cheapest (the same GPUs
paid), so the offering's count ladder (recommend.py) is unchanged. Layouts are taken in the order of a lower bound
of their time (the training FLOPs on their N GPUs at the achievable matmul rate and the elementwise traffic at the
HBM rate, with their exact rollout; a split's, once it comes up, its time) and the search stops at the first bound
no better than the fastest found. Two policies keep it small where the model cannot tell layouts apart: a larger
fraction whose rollout is no shorter is not timed (it takes memory for nothing), and a deeper sleep than the plan's
is timed only where the engine's memory slows the step (sleep and wake-up cost no time in the model: docs/limits.md).
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import replace

from planner.catalog import Gpu
from planner.memory import Estimate
from planner.memory.inference import inference_estimate
from planner.memory.rollout import rollout_wave
from planner.perf import compute_floor_hours, elementwise_floor_hours, job_time, rollout_time
from planner.plan.config import RL_OBJECTIVES, Plan, Rl, SleepLevel
from planner.search.strategies import Found, Limits, OutOfTime, StrategySearch, within_one_domain

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


def searched(plan: Plan) -> bool:
    """Whether the recommender places the plan's rollout engine: GRPO and PPO with a vLLM engine."""
    return plan.workload.objective in RL_OBJECTIVES and plan.workload.rl.engine != "generate"


def rollout_text(plan: Plan) -> str:
    """Where a GRPO or PPO plan's engine runs, in a few words ("" for other plans)."""
    wl = plan.workload
    if not searched(plan):
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
    """A plan's GPUs: "6 + 2" where a GRPO or PPO server engine has GPUs of its own beside the training GPUs."""
    engine = plan.total_gpus - plan.hardware.count
    return f"{plan.hardware.count:,} + {engine:,}" if engine else f"{plan.hardware.count:,}"


class RolloutSearch:
    """Every engine layout of one GRPO or PPO plan at the counts the recommender asks, each layout's strategies
    searched once (same interface as StrategySearch's first_fit and best_at, counts meaning every GPU the job
    holds)."""

    def __init__(self, plan: Plan, catalog, fixed: frozenset[str], stop_at: float = float("inf")) -> None:
        self.plan, self.catalog, self.fixed, self.stop_at = plan, catalog, fixed, stop_at
        self.search = StrategySearch(plan, catalog, fixed, stop_at)  # the plan's own, for its strategy space
        self._searches: dict[tuple[Rl, str | None], StrategySearch] = {}
        self._best: dict[tuple, Found | None] = {}
        self._tensor: dict[tuple[Rl, str, int], tuple[int, ...]] = {}
        self._rollout: dict[tuple[Gpu, Rl, int], float] = {}
        wl = plan.workload
        # PPO: one rollout feeds epochs × mini_batches optimizer steps (planner/perf/training.py _rollout_item)
        shared = wl.ppo.epochs * wl.ppo.mini_batches if wl.objective == "ppo" else 1
        self.steps_per_token = 1 / (wl.global_batch_size * wl.sequence_length * shared)

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
        """Whether one replica of layout `rl` at TP `t` holds a completion beside its weights on this GPU (and,
        colocated, `t` divides the `count` training GPUs)."""
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
            n = total - rl.engine_gpus
            return [(rl, n)] if n > 0 and self._holds(rl, gpu, n, rl.tensor_parallel) else []
        out: list[tuple[Rl, int]] = []
        own_sleep = rl.sleep_level if rl.engine == "colocate" else 0
        for f in dict.fromkeys((rl.gpu_memory_utilization, *sorted(FRACTIONS))):
            for s in dict.fromkeys((own_sleep, DEEPEST_SLEEP)):
                probe = colocated(rl, f, s, 1)
                out += [(replace(probe, tensor_parallel=t), total) for t in self._tensors(probe, gpu, total)]
        for t in self._tensors(server(rl, 1, 1), gpu, 1):
            out += [(server(rl, t, m), total - m) for m in (t << k for k in range(total.bit_length())) if m < total]
        return sorted(out, key=lambda x: x[0] != rl)  # stable: the plan's own layout first

    def _rollout_hours(self, gpu: Gpu, rl: Rl, n: int, tokens: int, mfu: float | None) -> float:
        """The job's hours of rollout with this layout on n training GPUs, once per GPU shape its engine sees (0
        under an MFU override, which leaves it out, or where the engine's dtype has no tensor cores)."""
        if mfu is not None:
            return 0.0
        key = (within_one_domain(gpu, rl.tensor_parallel), rl, n)
        if key not in self._rollout:
            ro = rollout_time(self.plan, key[0], rl, n)
            self._rollout[key] = 0.0 if ro is None else ro.seconds
        return tokens * self.steps_per_token * self._rollout[key] / 3600

    def free(self, gpu: Gpu, n: int, limits: Limits, tokens: int, mfu: float | None) -> tuple[Found, float] | None:
        """(the fastest strategy on n training GPUs with no engine on them, its training hours alone), searched
        once for every split (a synchronous server's plan: its rollout adds a constant to every strategy's time,
        so the fastest is the fastest to train; with the replicas' or an async rollout, it stays the fastest).
        None: nothing fits."""
        rl = server(replace(self.plan.workload.rl, async_rollout=False), 1, 1)
        found = self._strategies(rl, gpu).best_at(gpu, n, limits, tokens, mfu)
        if found is None:
            return None
        return found, found.hours - self._rollout_hours(gpu, rl, n, tokens, mfu)

    def bound(self, gpu: Gpu, rl: Rl, n: int, limits: Limits, tokens: int, mfu: float | None) -> float:
        """Hours no strategy of this layout beats. A split's is its time: its fastest training with no engine on
        its GPUs (`free`) and its rollout, added, or overlapped when asynchronous (an MFU override times the
        training alone); inf where nothing fits. A colocated engine's is its `floor`: the memory it takes can move
        the strategy search's pick to any layout, faster or slower than the engine-free one."""
        if rl.engine == "colocate":
            return self.floor(gpu, rl, n, tokens, mfu)
        free = self.free(gpu, n, limits, tokens, mfu)
        if free is None:
            return math.inf
        rollout = self._rollout_hours(gpu, rl, n, tokens, mfu)
        return max(free[1], rollout) if rl.async_rollout else free[1] + rollout

    def floor(self, gpu: Gpu, rl: Rl, n: int, tokens: int, mfu: float | None) -> float:
        """A cheaper bound than `bound`, before any strategy is searched: the training FLOPs on n GPUs at the
        achievable matmul rate and the elementwise traffic at the HBM rate (what no strategy beats: the strategy
        search's own bound), with the rollout."""
        train = compute_floor_hours(self.plan, gpu, tokens, n, mfu)
        train += 0.0 if mfu is not None else elementwise_floor_hours(self.plan, gpu, tokens, n)
        rollout = self._rollout_hours(gpu, rl, n, tokens, mfu)
        return max(train, rollout) if rl.async_rollout else train + rollout

    def best_at(self, gpu: Gpu, total: int, limits: Limits, tokens: int, mfu: float | None) -> Found | None:
        """The fastest layout and strategy that fit `total` GPUs shaped as `gpu` (None: none fits). Layouts are taken
        in the order of their bound, the plan's own first among equals: each first at its `floor`, then, when that
        comes up, at its `bound`, then timed, until the next bound is no better than the fastest found. A colocated
        engine sleeps deeper than the plan's level only where its memory slows the step otherwise."""
        key = (gpu, total, limits, tokens, mfu)
        if key not in self._best:
            if time.perf_counter() > self.stop_at:
                raise OutOfTime
            layouts = self.layouts(gpu, total)
            kept = self._undominated(gpu, layouts, tokens, mfu)
            heap = [(self.floor(gpu, rl, n, tokens, mfu), i, False) for i, (rl, n) in enumerate(layouts) if i in kept]
            heapq.heapify(heap)
            best: Found | None = None
            unslowed: set[tuple[float, int]] = set()  # colocated (fraction, TP) whose memory slows no strategy
            while heap:
                bound, i, tight = heapq.heappop(heap)
                if bound == math.inf or (best is not None and bound >= best.hours):
                    break  # in the order of their bound: no later layout is faster
                rl, n = layouts[i]
                if not tight:
                    heapq.heappush(heap, (self.bound(gpu, rl, n, limits, tokens, mfu), i, True))
                    continue
                placed = (rl.gpu_memory_utilization, rl.tensor_parallel) if rl.engine == "colocate" else None
                if placed in unslowed:
                    continue  # sleep deeper only where the engine's memory slows the step (its cost is not modelled)
                found = self.timed(gpu, rl, n, limits, tokens, mfu)
                unslowed |= (
                    {placed} if placed is not None and self._unslowed(gpu, rl, n, limits, tokens, mfu, found) else set()
                )
                best = found if found is not None and (best is None or found.hours < best.hours) else best
            self._best[key] = best
        return self._best[key]

    def _unslowed(
        self, gpu: Gpu, rl: Rl, n: int, limits: Limits, tokens: int, mfu: float | None, found: Found | None
    ) -> bool:
        """Whether a colocated layout's pick is as fast as the fastest training with no engine on its GPUs, with
        its rollout: its memory costs the step nothing, and a deeper sleep could not make it faster."""
        free = self.free(gpu, n, limits, tokens, mfu)
        return (
            found is not None
            and free is not None
            and found.hours <= free[1] + self._rollout_hours(gpu, rl, n, tokens, mfu)
        )

    def _undominated(self, gpu: Gpu, layouts: list[tuple[Rl, int]], tokens: int, mfu: float | None) -> set[int]:
        """The layouts worth timing: a colocated engine at a larger fraction than another of its tensor parallelism
        and sleep level, whose rollout is no shorter, claims more memory for nothing, and is left out."""
        kept, shortest = set(range(len(layouts))), dict[tuple[int, int], float]()
        placed = sorted((rl.gpu_memory_utilization, i) for i, (rl, _) in enumerate(layouts) if rl.engine == "colocate")
        for _, i in placed:
            rl, n = layouts[i]
            key, hours = (rl.sleep_level, rl.tensor_parallel), self._rollout_hours(gpu, rl, n, tokens, mfu)
            if hours >= shortest.get(key, math.inf):
                kept.discard(i)
            shortest[key] = min(hours, shortest.get(key, math.inf))
        return kept

    def timed(self, gpu: Gpu, rl: Rl, n: int, limits: Limits, tokens: int, mfu: float | None) -> Found | None:
        """The fastest strategy of one layout on its n training GPUs: a colocated engine's own search; a split's
        fastest training with no engine (`free`), timed with the layout's rollout."""
        if rl.engine == "colocate":
            return self._strategies(rl, gpu).best_at(gpu, n, limits, tokens, mfu)
        free = self.free(gpu, n, limits, tokens, mfu)
        if free is None:
            return None
        plan = free[0].estimate.plan
        plan = replace(plan, workload=replace(plan.workload, rl=rl))
        return Found(estimate=replace(free[0].estimate, plan=plan), hours=job_time(plan, gpu, tokens, mfu)[0])

    def first_fit(self, gpu: Gpu, counts: tuple[int, ...], limits: Limits) -> tuple[int | None, Estimate | None]:
        """(the fewest of `counts` at which some layout fits with its most memory-saving strategies, else the
        closest miss at the most GPUs): colocated at its deepest sleep and least fraction, or split with the
        fewest engine GPUs."""
        closest: Estimate | None = None
        free = server(replace(self.plan.workload.rl, async_rollout=False), 1, 1)
        for total in counts:
            for rl, n in self._most_saving(gpu, total):
                search = self._strategies(rl if rl.engine == "colocate" else free, gpu)
                fit, miss = search.first_fit(gpu, (n,), limits)
                if fit is not None:
                    return total, None
                closest = miss if miss is not None and total == counts[-1] else closest
        return None, closest

    def _most_saving(self, gpu: Gpu, total: int) -> list[tuple[Rl, int]]:
        """The layouts at `total` that leave the training GPUs the most memory: the colocated one at the deepest
        sleep and the least fraction, and the split with the fewest engine GPUs."""
        layouts = self.layouts(gpu, total)
        placed = [x for x in layouts if x[0].engine == "colocate"]
        least = min(placed, key=lambda x: (-x[0].sleep_level, x[0].gpu_memory_utilization), default=None)
        split = min((x for x in layouts if x[0].engine == "server"), key=lambda x: x[0].engine_gpus, default=None)
        return [x for x in (least, split) if x is not None]
