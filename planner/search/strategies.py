"""The fastest training strategy of a plan on a given number of GPUs of one shape: the recommender's inner search.

A strategy is ZeRO stage × tensor × pipeline × context × expert parallelism × recomputation × offload ×
micro-batch (the global batch kept). How the search is organised, and why it is fast and exact:
- Memory does not depend on the GPU type, its offering or its price, so each (strategy, GPU count) is estimated
  once, on the catalog's largest GPU, and compared with every GPU's usable memory (`memory`). A plan that fits
  only by the allocator releasing its cache every step is never advised.
- Time depends on the strategy, the count and the GPU as its offering shapes it (instance size, links,
  network), so offerings of one shape share every timing (`hours`), and the fastest strategy at a count is
  found once per shape (`best_at`).
- The strategies fall into time classes (recomputation × offload × pipeline depth). Each class has a lower
  bound of its job time that no layout of it can beat: the FLOPs it runs (recomputation included) at the GPU's
  achievable matmul rate, times its least pipeline bubble, plus the PCIe traffic its offload must move. Classes
  are taken in the order of that bound, and the search stops at the first whose bound is no better than the
  fastest layout found: a proof, not a heuristic, that no later class is faster (tests/test_strategies.py
  checks it against timing every class).
- Within a class, the layout is the recommendation's policy, not a pruning: the first layout that fits with
  the fewest changes to the user's plan (a higher ZeRO stage first, then expert parallelism, then a smaller
  micro-batch, then context, then tensor parallelism), and, where its step spends over COMMUNICATION_SHARE
  beyond its work, also the one at the widest tensor-parallel degree inside an NVLink-class domain.
- Offload is tried only where no class with less offload fits at that count (the policy: offloading ties a run
  to its host's RAM and PCIe). A class whose most memory-saving layout does not fit is skipped whole, and so is
  any class of its offload level that saves no more memory than one that failed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache, partial
from typing import Any, NamedTuple

from planner.catalog import Gpu
from planner.errors import PlanError
from planner.memory import Estimate, estimate, states_floor
from planner.perf import Latency, compute_floor_hours, elementwise_floor_hours, flops_per_token, job_time, latency
from planner.perf.rates import supported_rates
from planner.plan.config import Checkpointing, Hardware, Offload, Parallelism, Plan, Rl, ZeroStage
from planner.plan.pipeline import split_problem

# recomputation and offload from the least memory saved to the most (the search's "most saving" is the last)
CHECKPOINTING_BY_SAVING: tuple[Checkpointing, ...] = ("none", "selective", "every_k", "selective_op", "full")
OFFLOADS_BY_SAVING: tuple[Offload, ...] = ("none", "optimizer", "optimizer_and_params")
# A layout whose step spends more than this share beyond its compute and memory work (exposed communication,
# bubble) has its wider tensor-parallel layouts timed too.
COMMUNICATION_SHARE = 0.10


class Strategy(NamedTuple):
    """One layout of the plan (a tuple: it keys every cache of the search)."""

    zero: ZeroStage
    tensor: int
    pipeline: int
    context: int
    ckpt: Checkpointing
    offload: Offload
    micro_batch: int
    expert: int = 1


class Limits(NamedTuple):
    """What one GPU may use: device memory less the headroom, and host RAM for offloaded states."""

    device: int
    host: int

    def fits(self, est: Estimate) -> bool:
        """Within the limits without the allocator releasing its cache every step (a slow fit, never advised)."""
        return est.device_bytes <= self.device and est.host_bytes <= self.host and not est.cache_flushed


@dataclass(frozen=True)
class Found:
    """The fastest strategy found at one count: its estimate (on the catalog's largest GPU) and job hours."""

    estimate: Estimate
    hours: float


class OutOfTime(Exception):
    """The search's time budget ran out."""


def _allows(plan: Plan, **sections) -> bool:
    """Whether the plan's other settings admit these sections (e.g. optimizer in backward admits no ZeRO)."""
    try:
        replace(plan, **sections)
    except PlanError:
        return False
    return True


def _options(fixed: frozenset[str], key: str, current, choices, order=None) -> tuple:
    """The values searched for a key: the plan's own value among them, in memory-saving order."""
    return (current,) if key in fixed else tuple(sorted({*choices, current}, key=order))


@lru_cache(maxsize=4096)
def within_one_domain(gpu: Gpu, count: int) -> Gpu:
    """The GPU's shape as `count` GPUs see it: where they all sit in one fast domain, no collective crosses it, so
    the network and the size of the node beyond them change nothing, and every offering whose instances hold
    them shares one shape (and one search)."""
    if count > (gpu.fast_domain_gpus or 1) or count > gpu.gpus_per_node:
        return gpu
    return replace(gpu, gpus_per_node=count, fast_domain_gpus=count, network_gb_per_s=None)


def _first(values: list, fits: Callable[[Any], bool]) -> Any:
    """The first of `values` for which `fits` holds, given that it holds for every value after one that does
    (None: for none): the first value, else the last, else bisection between them (the plan's own setting is
    usually first and usually fits: one estimate)."""
    if not values or fits(values[0]):
        return values[0] if values else None
    if not fits(values[-1]):
        return None
    lo, hi = 1, len(values) - 1  # values[lo - 1] does not fit, values[hi] does
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(values[mid]) else (mid + 1, hi)
    return values[lo]


class StrategySearch:
    """Every strategy of one plan the recommender may try, estimated and timed once each."""

    def __init__(
        self,
        plan: Plan,
        catalog,
        fixed: frozenset[str],
        stop_at: float = float("inf"),
        rl: Rl | None = None,
        memory_gpu: Gpu | None = None,
    ) -> None:
        """`rl`: a GRPO engine layout every strategy takes in place of the plan's own (planner/search/rollout.py);
        `memory_gpu`: the GPU estimates are made on, where memory depends on the GPU (a colocated engine claims a
        fraction of it), else the catalog's largest."""
        self.plan, self.catalog, self.fixed, self.stop_at, self.rl = plan, catalog, fixed, stop_at, rl
        self._memory: dict[tuple[Strategy, int], Estimate | None] = {}
        self._hours: dict[tuple, tuple[float, float]] = {}
        self._best: dict[tuple, Found | None] = {}
        self._plans: dict[tuple[Strategy, int], Plan | None] = {}
        self._floor: dict[tuple[Strategy, int], int | None] = {}
        self._served: dict[Plan, Estimate] = {}
        self._tensors: dict[tuple[int, bool], tuple[int, ...]] = {}
        self._saving: dict[tuple, Strategy | None] = {}
        self._latency: dict[tuple[Plan, Gpu], Latency] = {}
        # estimates are made on the largest GPU: the allocator's reserve is capped only where a plan overflows it
        self.largest = memory_gpu or max(catalog.values(), key=lambda g: g.usable_bytes)
        m, wl, tech, par = plan.model, plan.workload, plan.techniques, plan.parallelism
        self.global_batch = wl.global_batch_size
        self.zeros = _options(
            fixed,
            "zero_stage",
            par.zero_stage,
            [z for z in (0, 1, 2, 3) if _allows(plan, parallelism=replace(par, zero_stage=z))],
        )
        self.pipelines = _options(
            fixed,
            "pipeline",
            par.pipeline,
            [
                p
                for p in (1, 2, 4, 8, 16)
                if m.num_layers // p >= 2
                and split_problem(
                    m.num_layers, p * (par.virtual_stages if par.pipeline > 1 else 1), par.pipeline_split, None
                )
                is None
            ],
        )
        self.contexts = _options(
            fixed,
            "context",
            par.context,
            [c for c in (1, 2, 4, 8) if wl.sequence_length % c == 0 and wl.sequence_length // c >= 1024] or [1],
        )
        self.ckpts = _options(
            fixed,
            "activation_checkpointing",
            tech.activation_checkpointing,
            ("none", "selective", "full") if tech.attention == "eager" else ("none", "full"),
            CHECKPOINTING_BY_SAVING.index,
        )
        self.offloads = _options(
            fixed,
            "offload",
            tech.offload,
            [
                o
                for o in OFFLOADS_BY_SAVING
                if _allows(
                    plan,
                    techniques=replace(tech, offload=o),
                    parallelism=replace(par, zero_stage=3 if o == "optimizer_and_params" else par.zero_stage),
                )
            ],
            OFFLOADS_BY_SAVING.index,
        )
        halvings = [
            wl.micro_batch_size >> i
            for i in range(wl.micro_batch_size.bit_length())
            if wl.micro_batch_size % (1 << i) == 0
        ]
        self.micro_batches = _options(fixed, "micro_batch_size", wl.micro_batch_size, halvings + [1], lambda n: -n)
        self.experts = _options(
            fixed,
            "expert",
            par.expert,
            [e for e in (1, 2, 4, 8, 16, 32, 64) if m.num_experts and m.num_experts % e == 0] or [1],
        )
        self.classes = self._time_classes()

    # --- The strategy space ---------------------------------------------------------------------------------
    def tensors(self, gpu: Gpu) -> tuple[int, ...]:
        """Tensor-parallel degrees within a node that split the heads, and the plan's own on its own GPU."""
        m, own = self.plan.model, self.plan.parallelism.tensor
        if "tensor" in self.fixed:
            return (own,)
        key = (gpu.gpus_per_node, gpu.id == self.plan.hardware.gpu)
        if key not in self._tensors:
            within = {
                t
                for t in (1, 2, 4, 8)
                if t <= gpu.gpus_per_node
                and m.num_attention_heads % t == 0
                and m.intermediate_size % t == 0
                and (m.num_kv_heads % t == 0 or t % m.num_kv_heads == 0)
            }
            self._tensors[key] = tuple(sorted(within | ({own} if key[1] else set())))
        return self._tensors[key]

    def _time_classes(self) -> list[tuple[float, float, Checkpointing, Offload, int]]:
        """(FLOPs factor, least bubble factor, recomputation, offload, pipeline) of each class: its FLOPs over
        those of no recomputation, and 1 + its pipeline's idle slots at the most micro-batches a step can have
        (the global batch), under the plan's own schedule where it pipelines (interleaving and zero-bubble divide
        them), else 1F1B's."""
        plan, par = self.plan, self.plan.parallelism
        base = flops_per_token(replace(plan, techniques=replace(plan.techniques, activation_checkpointing="none")))
        divisor = (
            {"interleaved_1f1b": par.virtual_stages, "zero_bubble": 3}.get(par.pipeline_schedule, 1)
            if par.pipeline > 1
            else 1
        )
        classes = []
        for ckpt in self.ckpts:
            fpt = flops_per_token(replace(plan, techniques=replace(plan.techniques, activation_checkpointing=ckpt)))
            for offload in self.offloads:
                if offload == "optimizer_and_params" and 3 not in self.zeros:
                    continue
                for p in self.pipelines:
                    classes.append((fpt / base, 1 + (p - 1) / (divisor * self.global_batch), ckpt, offload, p))
        return classes

    def plan_for(self, s: Strategy, gpu_id: str, count: int) -> Plan | None:
        """The plan with this strategy on `count` GPUs, or None when the strategy cannot be laid out."""
        base = self.plan
        model_parallel = s.tensor * s.pipeline * s.context
        if count % model_parallel:
            return None
        data = count // model_parallel
        if self.global_batch % (s.micro_batch * data):
            return None
        wl, prec, tech = base.workload, base.precision, base.techniques
        rl = wl.rl if self.rl is None else self.rl
        try:  # sections the strategy leaves as they are are kept, not rebuilt (and checked) again
            return replace(
                base,
                workload=wl
                if (wl.micro_batch_size, wl.rl) == (s.micro_batch, rl)
                else replace(wl, micro_batch_size=s.micro_batch, rl=rl),
                # float8 all-gathers exist only where FSDP gathers (ZeRO-3 layouts)
                precision=replace(prec, fp8_all_gather=False) if prec.fp8_all_gather and s.zero != 3 else prec,
                techniques=tech
                if (tech.activation_checkpointing, tech.offload) == (s.ckpt, s.offload)
                else replace(tech, activation_checkpointing=s.ckpt, offload=s.offload),
                parallelism=self._parallelism(s, data),
                hardware=Hardware(gpu=gpu_id, count=count),
            )
        except PlanError:
            return None

    def _parallelism(self, s: Strategy, data: int) -> Parallelism:
        """The strategy's degrees over the plan's own settings: its pipeline schedule and virtual stages where the
        strategy pipelines, async TP where it keeps sequence parallelism; micro-batches per step follow the batch."""
        par, tokens_per_rank = self.plan.parallelism, self.plan.workload.sequence_length // s.context
        sequence_parallel = s.tensor > 1 and tokens_per_rank % s.tensor == 0
        pipelined = s.pipeline > 1 and par.pipeline > 1
        return replace(
            par,
            data=data,
            zero_stage=s.zero,
            tensor=s.tensor,
            pipeline=s.pipeline,
            context=s.context,
            expert=s.expert,
            sequence_parallel=sequence_parallel,
            pipeline_microbatches=None,
            pipeline_schedule=par.pipeline_schedule if pipelined else "1f1b",
            virtual_stages=par.virtual_stages if pipelined else 1,
            pipeline_layers=par.pipeline_layers if s.pipeline == par.pipeline else None,
            async_tp=par.async_tp and sequence_parallel,
        )

    # --- Memory and time, each once ---------------------------------------------------------------------------
    def _plan(self, s: Strategy, count: int) -> Plan | None:
        key = (s, count)
        if key not in self._plans:
            if time.perf_counter() > self.stop_at:
                raise OutOfTime
            self._plans[key] = self.plan_for(s, self.largest.id, count)
        return self._plans[key]

    def _laid_out(self, s: Strategy, count: int) -> Plan:
        """The plan of a strategy the search has laid out on `count` GPUs already (its plan exists)."""
        plan = self._plan(s, count)
        if plan is None:
            raise ValueError(f"{s} has no layout on {count} GPUs: only laid-out strategies are timed and kept")
        return plan

    def _estimate(self, s: Strategy, count: int) -> Estimate:
        """`memory` of a strategy the search has laid out on `count` GPUs already."""
        est = self.memory(s, count)
        if est is None:
            raise ValueError(f"{s} has no layout on {count} GPUs: only laid-out strategies are timed and kept")
        return est

    def memory(self, s: Strategy, count: int) -> Estimate | None:
        """The strategy's estimate on `count` GPUs of the catalog's largest type (None: no such layout). Memory
        depends on the GPU only near its capacity, where the allocator releases its cache, which `Limits.fits`
        never counts on, and the largest GPU caps nothing a smaller one could hold."""
        key = (s, count)
        if key not in self._memory:
            plan = self._plan(s, count)
            self._memory[key] = None if plan is None else estimate(plan, self.catalog, detail=False)
        return self._memory[key]

    def fits(self, s: Strategy, count: int, limits: Limits) -> bool:
        """Whether the strategy fits `limits` on `count` GPUs; a layout whose model states alone (its floor)
        exceed the device is refused without a full estimate."""
        key = (s, count)
        if key not in self._floor:
            plan = self._plan(s, count)
            self._floor[key] = None if plan is None else states_floor(plan)
        floor = self._floor[key]
        if floor is None or floor > limits.device:
            return False
        est = self.memory(s, count)
        return est is not None and limits.fits(est)

    def hours(self, s: Strategy, count: int, gpu: Gpu, tokens: int, mfu: float | None) -> tuple[float, float]:
        """(job hours, of which compute and memory work) of the strategy on `count` GPUs shaped as `gpu` (its
        offering's view)."""
        key = (s, count, gpu, tokens, mfu)
        if key not in self._hours:  # the time model reads the GPU it is given, not the plan's GPU id
            self._hours[key] = job_time(self._laid_out(s, count), gpu, tokens, mfu)
        return self._hours[key]

    def served(self, plan: Plan) -> Estimate:
        """A serving plan's estimate, once for every offering of its GPU (memory does not depend on the offering)."""
        key = replace(plan, hardware=replace(plan.hardware, offering=None))
        if key not in self._served:
            if time.perf_counter() > self.stop_at:
                raise OutOfTime
            self._served[key] = estimate(key, self.catalog, detail=False)
        return self._served[key]

    def latency(self, plan: Plan, gpu: Gpu) -> Latency:
        """A serving plan's latency on the GPU as its offering shapes it, once per shape."""
        key = (
            replace(plan, hardware=replace(plan.hardware, offering=None)),
            within_one_domain(gpu, plan.hardware.count),
        )
        if key not in self._latency:
            self._latency[key] = latency(key[0], key[1])
        return self._latency[key]

    def most_saving(
        self, gpu: Gpu, count: int, ckpt: Checkpointing, offload: Offload, pipeline: int
    ) -> Strategy | None:
        """The least-memory layout of a time class on `count` GPUs: the highest ZeRO stage, the smallest
        micro-batch, and the most tensor × context parallelism that can be laid out on `count` GPUs."""
        tensors = self.tensors(gpu)
        key = (tensors, count, ckpt, offload, pipeline)
        if key not in self._saving:
            splits = sorted(
                ((t, c) for t in tensors for c in self.contexts if t * c * pipeline <= count),
                key=lambda tc: (-tc[0] * tc[1], -tc[0]),
            )
            layouts = (
                Strategy(self._zeros(count, t * pipeline, offload)[-1], t, pipeline, c, ckpt, offload, mb, e)
                for t, c in splits
                for mb in reversed(self.micro_batches)  # the smallest micro-batch and
                for e in sorted(self.experts, reverse=True)
            )  # the most experts the plan admits
            self._saving[key] = next((s for s in layouts if self._plan(s, count) is not None), None)
        return self._saving[key]

    def _zeros(self, count: int, model_parallel: int, offload: Offload) -> list[ZeroStage]:
        """The ZeRO stages a layout may take, least sharding first: stage 3 alone where parameters are offloaded,
        none where its data × context ranks are one (nothing to shard), unless the plan keeps its own."""
        if count == model_parallel and "zero_stage" not in self.fixed:
            return [3] if offload == "optimizer_and_params" else [0]
        return [z for z in self.zeros if offload != "optimizer_and_params" or z == 3]

    def simplest(
        self,
        gpu: Gpu,
        count: int,
        limits: Limits,
        ckpt: Checkpointing,
        offload: Offload,
        pipeline: int,
        tensors: tuple[int, ...] | None = None,
        experts: tuple[int, ...] | None = None,
    ) -> Strategy | None:
        """The first strategy of one time class that fits, fewest changes first: ZeRO stage, then expert
        parallelism, then micro-batch, then context, then tensor parallelism (of `tensors` and `experts`, default
        every degree). Memory falls as context, expert parallelism and ZeRO stage grow and as the micro-batch
        shrinks, so each is found by bisection over the values the plan admits, the others at their most
        saving: the same strategy as trying them in order, with a handful of estimates."""
        for t in tensors or self.tensors(gpu):
            found = self._simplest_at(count, limits, ckpt, offload, pipeline, t, experts)
            if found is not None:
                return found
        return None

    def _simplest_at(
        self,
        count: int,
        limits: Limits,
        ckpt: Checkpointing,
        offload: Offload,
        pipeline: int,
        t: int,
        experts: tuple[int, ...] | None,
    ) -> Strategy | None:
        """`simplest` at one tensor-parallel degree `t` (None: no strategy of the class fits with it)."""
        zeros = self._zeros(count, t * pipeline, offload)

        def layout(c: int, mb: int | None = None, e: int | None = None, z: ZeroStage | None = None) -> Strategy | None:
            """The layout with these settings, each one not given at its most saving value the plan admits."""
            mbs = [mb] if mb is not None else reversed(self.micro_batches)  # the smallest first
            es = [e] if e is not None else sorted(experts or self.experts, reverse=True)  # the most first
            z = zeros[-1] if z is None else z
            return next(
                (
                    x
                    for m in mbs
                    for x in (Strategy(z, t, pipeline, c, ckpt, offload, m, n) for n in es)
                    if self._plan(x, count) is not None
                ),
                None,
            )

        def fits(c: int, mb: int | None = None, e: int | None = None, z: ZeroStage | None = None) -> bool:
            layout_ = layout(c, mb, e, z)
            return layout_ is not None and self.fits(layout_, count, limits)

        c = _first([c for c in self.contexts if layout(c) is not None], fits)
        if c is None:
            return None
        mb = _first([m for m in self.micro_batches if layout(c, m) is not None], partial(fits, c))
        e = _first([x for x in experts or self.experts if layout(c, mb, x) is not None], partial(fits, c, mb))
        z = _first([z for z in zeros if layout(c, mb, e, z) is not None], partial(fits, c, mb, e))
        return Strategy(z, t, pipeline, c, ckpt, offload, mb, e)

    # --- The fastest strategy at one count --------------------------------------------------------------------
    def best_at(
        self, gpu: Gpu, count: int, limits: Limits, tokens: int, mfu: float | None, exhaustive: bool = False
    ) -> Found | None:
        """The fastest strategy that fits `count` GPUs shaped as `gpu` (None: none fits), memoized per shape.
        `exhaustive` times every class instead of stopping at the bound (the proof's reference, in tests)."""
        gpu = within_one_domain(gpu, count)
        key = (gpu, count, limits, tokens, mfu, exhaustive)
        if key not in self._best:
            self._best[key] = self._fastest(gpu, count, limits, tokens, mfu, exhaustive)
        return self._best[key]

    def _fastest(
        self, gpu: Gpu, count: int, limits: Limits, tokens: int, mfu: float | None, exhaustive: bool
    ) -> Found | None:
        """Offload only where no class with less of it fits at this count (the policy: offloading ties the run to
        host RAM and PCIe); within one offload level, the classes in the order of their bound: their FLOPs at the
        achievable matmul rate and the model's elementwise traffic at the HBM rate, times their least bubble,
        plus their offload's PCIe transfers."""
        unit = compute_floor_hours(self.plan, gpu, tokens, count, mfu)
        memory = 0.0 if mfu is not None else elementwise_floor_hours(self.plan, gpu, tokens, count)
        best: tuple[float, Strategy] | None = None
        for offload in self.offloads:
            pcie = compute_floor_hours(self.plan, gpu, tokens, count, mfu, offload) - unit
            bounds = sorted(
                ((flops * unit + memory) * bubble + pcie, ckpt, p)
                for flops, bubble, ckpt, off, p in self.classes
                if off == offload
            )
            failed: list[tuple[int, int]] = []  # (recomputation rank, pipeline) whose most saving layout missed
            for bound, ckpt, p in bounds:
                if not exhaustive and best is not None and bound >= best[0]:
                    break  # classes are in the order of their bound: none later at this level is faster
                rank = self.ckpts.index(ckpt)  # later = recomputes more = less memory
                if any(fp == p and fc >= rank for fc, fp in failed):
                    continue  # a class of this offload level that saves at least as much memory failed
                extreme = self.most_saving(gpu, count, ckpt, offload, p)
                if extreme is None or not self.fits(extreme, count, limits):
                    failed.append((rank, p))
                    continue
                for s in self._layouts(gpu, count, limits, (ckpt, offload, p), tokens, mfu):
                    hours = self.hours(s, count, gpu, tokens, mfu)[0]
                    best = (hours, s) if best is None or hours < best[0] else best
            if best is not None:
                break
        return None if best is None else Found(estimate=self._estimate(best[1], count), hours=best[0])

    def _layouts(
        self,
        gpu: Gpu,
        count: int,
        limits: Limits,
        cls: tuple[Checkpointing, Offload, int],
        tokens: int,
        mfu: float | None,
    ) -> list[Strategy]:
        """The simplest layout of a class that fits, and, where its step spends more than COMMUNICATION_SHARE
        beyond its work (exposed communication, bubble), the simplest at the widest tensor-parallel degree inside
        an NVLink-class fast domain (tensor parallelism there divides the bytes each rank gathers and reduces) and,
        for MoE models, the simplest at the most expert parallelism that fits (it divides the experts each rank
        gathers and updates)."""
        s = self.simplest(gpu, count, limits, *cls)
        if s is None:
            return []
        hours, work = self.hours(s, count, gpu, tokens, mfu)
        if mfu is not None or hours <= work * (1 + COMMUNICATION_SHARE):
            return [s]
        # only over NVLink-class links: over PCIe, tensor parallelism's per-layer all-reduces cost more than the
        # gradient traffic they save
        r = supported_rates(gpu, self.plan.precision.compute)
        domain = r.fast_domain_gpus if r.link_kind == "link" else 1
        widest = max((t for t in self.tensors(gpu) if t <= domain), default=1)
        more = tuple(sorted((e for e in self.experts if e > s.expert), reverse=True))
        wider = self.simplest(gpu, count, limits, *cls, tensors=(widest,)) if widest > s.tensor else None
        most = self.simplest(gpu, count, limits, *cls, experts=more) if more else None
        return [s, *dict.fromkeys(x for x in (wider, most) if x is not None and x != s)]

    def first_fit(self, gpu: Gpu, counts: tuple[int, ...], limits: Limits) -> tuple[int | None, Estimate | None]:
        """(the fewest of `counts` on which a class with the most recomputation fits, else the closest miss at the
        most GPUs). Every offload level is tried: deeper offloading saves device memory but needs more host
        memory. (Not a bisection: the global batch caps data parallelism, so the largest counts may have no layout
        at all.)"""
        saving = [(ckpt, off, p) for _, _, ckpt, off, p in self.classes if ckpt == self.ckpts[-1]]
        missed: list[tuple[Strategy, int]] = []
        for n in counts:
            for ckpt, off, p in saving:
                s = self.most_saving(gpu, n, ckpt, off, p)
                if s is None:
                    continue
                if self.fits(s, n, limits):
                    return n, None
                missed.append((s, n))
        last = [self._estimate(s, n) for s, n in missed if n == missed[-1][1]] if missed else []
        return None, min(last, key=lambda e: e.device_bytes, default=None)
