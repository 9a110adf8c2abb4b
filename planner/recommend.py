"""The cheapest hardware for a plan: GPU type × count × strategy, searched for configurations that fit.

How the search is organised (and why it is fast):
- Per-GPU memory (`device_bytes`) does not depend on which GPU it runs on, so each (strategy, count) is
  estimated once, on the largest GPU type, and compared with every GPU type's usable memory (memoized). A plan
  that fits only by the allocator releasing its cache every step is never advised.
- For each GPU type the fewest GPUs that can fit is the first count on the ladder (1, 2, 4, 8, then whole
  nodes up to 1,024) at which the most memory-saving strategy fits; memory falls as sharding grows.
- At each count, strategies are tried from the fastest to the slowest (no recomputation before full
  recomputation, no offload before offload, no pipeline bubble before one); within equal time the one with
  the fewest changes to the user's plan wins: a higher ZeRO stage first, then a smaller micro-batch (the
  global batch is kept), then context parallelism, then tensor parallelism within a node.
- Cost per hour = GPUs × price. Job cost = hours × GPUs × price, with hours from planner/perf.py.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Literal, get_args

from planner.catalog import Gpu, load_catalog
from planner.errors import PlanError, bad
from planner.memory import Estimate, estimate
from planner.perf import compute_floor_hours, flops_per_token, job_time, throughput, unsupported_compute
from planner.perf.rates import rates
from planner.pipeline import split_problem
from planner.plan import MAX_BATCH, MAX_SEQUENCE, Hardware, Parallelism, Plan
from planner.units import format_bytes
from planner.validate import check_choice

DEFAULT_HEADROOM = 0.10  # memory kept free for what no model predicts (fragmentation spikes, library buffers)
# Host RAM a GPU's share of its machine can give offloaded states: cloud GPU instances come with ~100-250 GB
# of RAM per GPU (8-GPU nodes with 1-2 TB); adjustable per call.
DEFAULT_HOST_GIB_PER_GPU = 128
DEFAULT_JOB_TOKENS = 10**9  # without workload.steps or train_tokens, costs are per billion training tokens
MAX_COUNT = 1024
# The count ladder of a GPU type stops where scaling efficiency (the fewest GPU-hours found over this count's)
# falls below one half: every larger count costs over twice as much for the same job.
MIN_SCALING_EFFICIENCY = 0.5
# At one count at most this many strategy classes (recomputation × offload × pipeline depth) are timed, fastest
# compute first: a bound on the search's work where communication dominates and no class can be ruled out.
MAX_TIMED_CLASSES = 8
# A layout whose step spends more than this share beyond its compute and memory work (exposed communication,
# bubble) has its wider tensor-parallel layouts timed too.
COMMUNICATION_SHARE = 0.10
COUNT_LADDER = tuple(2**i for i in range(11))  # 1, 2, 4, 8 GPUs, then 2 ... 128 eight-GPU nodes

SEARCH_KEYS = ("gpu", "count", "zero_stage", "tensor", "pipeline", "context", "expert", "activation_checkpointing",
               "offload", "micro_batch_size")
RankBy = Literal["job", "hour"]
# recomputation and offload from the least memory saved to the most (the search's "most saving" is the last)
CHECKPOINTING_BY_SAVING = ("none", "selective", "every_k", "selective_op", "full")
OFFLOADS_BY_SAVING = ("none", "optimizer", "optimizer_and_params")


@dataclass(frozen=True, kw_only=True)
class Candidate:
    gpu: Gpu
    count: int
    plan: Plan  # the whole plan, ready to adopt
    device_bytes: int
    usd_per_hour: float | None  # None when the catalog has no price for this GPU
    job_hours: float
    job_usd: float | None
    tokens_per_s_per_gpu: float  # training tokens, or generated tokens when serving
    strategy: str  # short: "ZeRO-3, TP 2 + SP, full recomputation, micro-batch 1"
    why: str
    catalog: dict[str, Gpu] = field(repr=False, compare=False)

    @cached_property
    def estimate(self) -> Estimate:
        """The full itemized breakdown (made when asked: the search itself needs only the totals)."""
        return estimate(self.plan, self.catalog)


@dataclass(frozen=True, kw_only=True)
class Rejection:
    gpu: Gpu
    reason: str


@dataclass(frozen=True, kw_only=True)
class Recommendation:
    candidates: tuple[Candidate, ...]  # ranked, cheapest first, deterministic on ties
    rejected: tuple[Rejection, ...]
    job_tokens: int
    job_tokens_source: str
    flops_per_token: float  # of the base plan, without recomputation
    headroom: float
    mfu: float | None  # an override of the time model: job time is model FLOPs at this fraction of the peak
    rank_by: RankBy
    cut_after_s: float | None = None  # the time budget ran out: the best answers found by then

    @property
    def best(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None

    @property
    def time_basis(self) -> str:
        if self.mfu is None:
            return "job time from the step-time model (each GPU's measured matmul rate, HBM and links)"
        return f"job time at {self.mfu:.0%} model FLOPs utilization of each GPU's dense peak (override)"


# --- The search ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Strategy:
    zero: int
    tensor: int
    pipeline: int
    context: int
    ckpt: str
    offload: str
    micro_batch: int
    expert: int = 1


def _allows(plan: Plan, **sections) -> bool:
    """Whether the plan's other settings admit these sections (e.g. optimizer in backward admits no ZeRO)."""
    try:
        replace(plan, **sections)
    except PlanError:
        return False
    return True


class _OutOfTime(Exception):
    """The search's time budget ran out while it was estimating a layout; `found` holds the candidates of the GPU
    type being searched that were complete by then."""

    def __init__(self, found: list[Candidate] | None = None) -> None:
        super().__init__()
        self.found = found or []


class _Search:
    def __init__(self, plan: Plan, catalog: dict[str, Gpu], fixed: frozenset[str],
                 deadline: float = float("inf")) -> None:
        self.plan, self.catalog, self.fixed, self.deadline = plan, catalog, fixed, deadline
        self.memo: dict[tuple[_Strategy, int], Estimate | None] = {}
        # estimates are made on the largest GPU: the allocator's reserve is capped only where a plan overflows it
        self.largest = max(catalog.values(), key=lambda g: g.usable_bytes)
        m, wl, tech, par = plan.model, plan.workload, plan.techniques, plan.parallelism
        self.global_batch = wl.global_batch_size

        def options(key: str, current, choices, order=None):
            """The values searched for a key: the plan's own value among them, in memory-saving order."""
            return (current,) if key in fixed else tuple(sorted({*choices, current}, key=order))

        # ZeRO stages and offloads the plan's own settings allow (optimizer in backward: stage 0, no offload)
        self.zeros = options("zero_stage", par.zero_stage, [z for z in (0, 1, 2, 3) if _allows(
            plan, parallelism=replace(par, zero_stage=z))])
        self.pipelines = options("pipeline", par.pipeline, [p for p in (1, 2, 4, 8, 16) if m.num_layers // p >= 2 and (
            split_problem(m.num_layers, p * (par.virtual_stages if par.pipeline > 1 else 1), par.pipeline_split,
                          None) is None)])
        self.contexts = options("context", par.context,
                                [c for c in (1, 2, 4, 8) if wl.sequence_length % c == 0 and wl.sequence_length // c >= 1024]
                                or [1])
        self.ckpts = options("activation_checkpointing", tech.activation_checkpointing,
                             ("none", "selective", "full") if tech.attention == "eager" else ("none", "full"),
                             CHECKPOINTING_BY_SAVING.index)
        self.offloads = options("offload", tech.offload, [o for o in OFFLOADS_BY_SAVING
                                                          if _allows(plan, techniques=replace(tech, offload=o),
                                                                     parallelism=replace(par, zero_stage=3 if o ==
                                                                     "optimizer_and_params" else par.zero_stage))],
                                OFFLOADS_BY_SAVING.index)
        mbs, mb = [], wl.micro_batch_size
        while mb >= 1:
            mbs.append(mb)
            mb = mb // 2 if mb % 2 == 0 else 0
        self.micro_batches = options("micro_batch_size", wl.micro_batch_size, mbs + ([1] if mbs[-1] != 1 else []),
                                     lambda n: -n)  # largest first
        self.experts = options("expert", par.expert, [e for e in (1, 2, 4, 8, 16, 32, 64) if m.num_experts
                                                      and m.num_experts % e == 0] or [1])

    def tensors(self, gpu: Gpu) -> tuple[int, ...]:
        """Tensor-parallel degrees within a node that split the heads, and the plan's own on its own GPU."""
        m, own = self.plan.model, self.plan.parallelism.tensor
        if "tensor" in self.fixed:
            return (own,)
        within = {t for t in (1, 2, 4, 8) if t <= gpu.gpus_per_node and m.num_attention_heads % t == 0
                  and m.intermediate_size % t == 0 and (m.num_kv_heads % t == 0 or t % m.num_kv_heads == 0)}
        return tuple(sorted(within | ({own} if gpu.id == self.plan.hardware.gpu else set())))

    def plan_for(self, s: _Strategy, gpu: Gpu, count: int) -> Plan | None:
        """The plan with this strategy on `count` GPUs, or None when the strategy cannot be laid out."""
        base = self.plan
        model_parallel = s.tensor * s.pipeline * s.context
        if count % model_parallel:
            return None
        data = count // model_parallel
        if self.global_batch % (s.micro_batch * data):
            return None
        try:
            return replace(
                base,
                workload=replace(base.workload, micro_batch_size=s.micro_batch),
                # float8 all-gathers exist only where FSDP gathers (ZeRO-3 layouts)
                precision=replace(base.precision, fp8_all_gather=base.precision.fp8_all_gather and s.zero == 3),
                techniques=replace(base.techniques, activation_checkpointing=s.ckpt, offload=s.offload),
                parallelism=self.parallelism_for(s, data),
                hardware=Hardware(gpu=gpu.id, count=count),
            )
        except PlanError:
            return None

    def parallelism_for(self, s: _Strategy, data: int) -> Parallelism:
        """The strategy's degrees over the plan's own settings: its pipeline schedule and virtual stages where the
        strategy pipelines, async TP where it keeps sequence parallelism; micro-batches per step follow the batch."""
        par, tokens_per_rank = self.plan.parallelism, self.plan.workload.sequence_length // s.context
        sequence_parallel = s.tensor > 1 and tokens_per_rank % s.tensor == 0
        pipelined = s.pipeline > 1 and par.pipeline > 1
        return replace(par, data=data, zero_stage=s.zero, tensor=s.tensor, pipeline=s.pipeline, context=s.context,
                       expert=s.expert, sequence_parallel=sequence_parallel, pipeline_microbatches=None,
                       pipeline_schedule=par.pipeline_schedule if pipelined else "1f1b",
                       virtual_stages=par.virtual_stages if pipelined else 1,
                       pipeline_layers=par.pipeline_layers if s.pipeline == par.pipeline else None,
                       async_tp=par.async_tp and sequence_parallel)

    def evaluate(self, s: _Strategy, gpu: Gpu, count: int) -> Estimate | None:
        """Estimate of the strategy, memoized across GPU types: memory does not depend on the GPU, so the
        estimate names the catalog's largest (see `for_gpu`). Only near a device's capacity does it: there the
        allocator releases its cache, which `_Limits.fits` never counts on, and the largest GPU caps nothing a
        smaller one could hold."""
        key = (s, count)
        if key not in self.memo:
            if time.perf_counter() > self.deadline:
                raise _OutOfTime
            plan = self.plan_for(s, gpu, count)
            self.memo[key] = None if plan is None else estimate(
                replace(plan, hardware=replace(plan.hardware, gpu=self.largest.id)), self.catalog, detail=False)
        return self.memo[key]

    def most_saving(self, gpu: Gpu, count: int, ckpt: str, offload: str, pipeline: int) -> Estimate | None:
        """The least-memory layout of a time class on `count` GPUs: the highest ZeRO stage, the smallest
        micro-batch, and the most tensor × context parallelism that can be laid out on `count` GPUs."""
        zero = 3 if offload == "optimizer_and_params" else max(self.zeros)
        splits = sorted(((t, c) for t in self.tensors(gpu) for c in self.contexts if t * c * pipeline <= count),
                        key=lambda tc: (-tc[0] * tc[1], -tc[0]))
        for t, c in splits:
            for e in sorted(self.experts, reverse=True):  # the most expert parallelism the ranks allow
                est = self.evaluate(_Strategy(zero, t, pipeline, c, ckpt, offload, min(self.micro_batches), e),
                                    gpu, count)
                if est is not None:
                    return est
        return None

    def time_classes(self) -> list[tuple[float, str, str, int]]:
        """(lower bound of the time factor, recomputation, offload, pipeline), fastest first. The factor is
        job time over that of the same FLOPs without recomputation, bubble or offload."""
        base = flops_per_token(replace(self.plan, techniques=replace(self.plan.techniques,
                                                                        activation_checkpointing="none")))
        classes = []
        for ckpt in self.ckpts:
            fpt = flops_per_token(replace(self.plan, techniques=replace(self.plan.techniques,
                                                                           activation_checkpointing=ckpt)))
            for offload in self.offloads:
                if offload == "optimizer_and_params" and 3 not in self.zeros:
                    continue
                for p in self.pipelines:
                    bubble = 1 + (p - 1) / self.global_batch  # at most global-batch micro-batches per step
                    classes.append((fpt / base * bubble, ckpt, offload, p))
        return sorted(classes, key=lambda c: (c[0], self.offloads.index(c[2]), c[3]))

    def simplest(self, gpu: Gpu, count: int, limits: _Limits, ckpt: str, offload: str,
                 pipeline: int, tensors: tuple[int, ...] | None = None) -> Estimate | None:
        """The first strategy of one time class that fits, fewest changes first: ZeRO stage, then expert
        parallelism, then micro-batch, then context, then tensor parallelism (of `tensors`, default every
        degree). A layout whose highest ZeRO stage does not fit is skipped whole: lower stages hold more."""
        zeros = [z for z in self.zeros if offload != "optimizer_and_params" or z == 3]
        for t in tensors or self.tensors(gpu):
            for c in self.contexts:
                if t * pipeline * c > count:
                    continue
                if count == t * pipeline and "zero_stage" not in self.fixed:  # data × context = 1: nothing to shard
                    zeros = [3] if offload == "optimizer_and_params" else [0]
                for mb in self.micro_batches:
                    for e in self.experts:
                        top = self.evaluate(_Strategy(zeros[-1], t, pipeline, c, ckpt, offload, mb, e), gpu, count)
                        if top is None or not limits.fits(top):
                            continue
                        for z in zeros[:-1]:
                            est = self.evaluate(_Strategy(z, t, pipeline, c, ckpt, offload, mb, e), gpu, count)
                            if est is not None and limits.fits(est):
                                return est
                        return top
        return None


def _for_gpu(est: Estimate, gpu: Gpu) -> Estimate:
    """The same estimate on another GPU type."""
    if est.gpu.id == gpu.id:
        return est
    hw = Hardware(gpu=gpu.id, count=est.plan.hardware.count)
    return replace(est, plan=replace(est.plan, hardware=hw), gpu=gpu, usable_bytes=gpu.usable_bytes)


@dataclass(frozen=True)
class _Limits:
    """What one GPU may use: device memory less the headroom, and host RAM for offloaded states."""
    device: int
    host: int

    def fits(self, est: Estimate) -> bool:
        """Within the limits without the allocator releasing its cache every step (a slow fit, never advised)."""
        return est.device_bytes <= self.device and est.host_bytes <= self.host and not est.cache_flushed


def _check_arguments(plan: Plan, catalog: dict[str, Gpu], *, headroom: float, mfu: float | None, mfu_by_gpu: dict,
                     prices: dict, fixed: Collection[str], max_count: int, rank_by: str, host_gib: float,
                     budget_s: float | None) -> None:
    """recommend()'s arguments, each checked with the field it came in."""
    if budget_s is not None and not 0 < budget_s <= 86_400:
        raise bad("budget_s", budget_s, "must be a number of seconds above 0 and at most 86,400")
    if not 0 <= host_gib <= 1_000_000:
        raise bad("host_memory_gib_per_gpu", host_gib, "must be from 0 to 1,000,000 GiB")
    if not 1 <= max_count <= MAX_COUNT:
        raise bad("max_count", max_count, f"must be from 1 to {MAX_COUNT:,}")
    if not 0 <= headroom < 1:
        raise bad("headroom", headroom, "must be a fraction from 0 to below 1 (e.g. 0.1 for 10 %)")
    for key, value in (("mfu", mfu), *((f"mfu.{g}", v) for g, v in mfu_by_gpu.items())):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise bad(key, value, "must be a fraction above 0 and at most 1 (e.g. 0.4)")
    for gpu_id in mfu_by_gpu:
        if gpu_id not in catalog:
            raise bad("mfu", gpu_id, f"is not in the GPU catalog; known: {', '.join(catalog)}")
    check_choice("rank_by", rank_by, get_args(RankBy))
    for key in fixed:
        if key not in SEARCH_KEYS:
            raise bad("fixed", key, f"is not a searchable key; searchable: {', '.join(SEARCH_KEYS)}")
    for gpu_id, price in prices.items():
        if gpu_id not in catalog:
            raise bad("prices", gpu_id, f"is not in the GPU catalog; known: {', '.join(catalog)}")
        if not price > 0:
            raise bad(f"prices.{gpu_id}", price, "must be a positive price in USD per GPU-hour")
    if "gpu" in fixed and plan.hardware.gpu not in catalog:
        raise bad("hardware.gpu", plan.hardware.gpu, f"is not in the GPU catalog; known: {', '.join(catalog)}")


def recommend(plan: Plan, catalog: dict[str, Gpu] | None = None, *, headroom: float = DEFAULT_HEADROOM,
              mfu: float | None = None, prices: dict[str, float] | None = None,
              fixed: frozenset[str] | set[str] = frozenset(), max_count: int = MAX_COUNT,
              rank_by: RankBy = "job", host_memory_gib_per_gpu: float = DEFAULT_HOST_GIB_PER_GPU,
              mfu_by_gpu: dict[str, float] | None = None, budget_s: float | None = None) -> Recommendation:
    """Every feasible (GPU type, count) with its fastest strategy, ranked cheapest first.

    Job time comes from the step-time model (planner/perf/); `mfu` (all GPUs) and `mfu_by_gpu` (per GPU id)
    override it with model FLOPs at that fraction of the dense peak. `prices` override the catalog's. With
    `budget_s` the search stops when that many seconds are spent and returns what it found, saying so."""
    start = time.perf_counter()
    catalog = catalog if catalog is not None else load_catalog()
    mfu_by_gpu, prices, fixed = dict(mfu_by_gpu or {}), dict(prices or {}), frozenset(fixed)
    _check_arguments(plan, catalog, headroom=headroom, mfu=mfu, mfu_by_gpu=mfu_by_gpu, prices=prices, fixed=fixed,
                     max_count=max_count, rank_by=rank_by, host_gib=host_memory_gib_per_gpu, budget_s=budget_s)
    host = int(host_memory_gib_per_gpu * 2**30)

    tokens = plan.job_tokens
    source = ("workload.train_tokens" if plan.workload.train_tokens else
              "workload.steps × global batch × sequence length") if tokens else \
        f"default {DEFAULT_JOB_TOKENS:,} tokens: costs are per billion training tokens"
    tokens = tokens or DEFAULT_JOB_TOKENS

    gpus = [catalog[plan.hardware.gpu]] if "gpu" in fixed else list(catalog.values())
    own = {plan.hardware.count} if plan.hardware.count <= max_count else set()  # the plan's count is a candidate
    counts = (plan.hardware.count,) if "count" in fixed else tuple(sorted(
        {n for n in COUNT_LADDER if n <= max_count} | own))
    inference = plan.workload.task == "inference"
    if inference:
        tokens, source = 10**6, "inference: costs per million generated tokens"
    search = _Search(plan, catalog, fixed, start + budget_s if budget_s is not None else float("inf"))
    candidates: list[Candidate] = []
    rejected: list[Rejection] = []
    cut = False
    for gpu in gpus:
        if cut:
            rejected.append(Rejection(gpu=gpu, reason=f"{gpu.name}: not searched (the {budget_s:g} s budget ran out)"))
            continue
        args = (search, gpu, counts, headroom, host, tokens, mfu_by_gpu.get(gpu.id, mfu),
                prices.get(gpu.id, gpu.price_usd_per_hour))
        try:
            found, reason = _search_inference(*args) if inference else _search_gpu(*args)
        except _OutOfTime as out:
            found, reason, cut = out.found, f"{gpu.name}: search cut by the budget", True
        candidates.extend(found)
        if not found:
            rejected.append(Rejection(gpu=gpu, reason=reason))

    def rank(c: Candidate):
        money = (c.job_usd, c.usd_per_hour) if rank_by == "job" else (c.usd_per_hour, c.job_usd)
        return (c.usd_per_hour is None, *(x or 0.0 for x in money), c.gpu.id, c.count)

    return Recommendation(candidates=tuple(sorted(candidates, key=rank)), rejected=tuple(rejected),
                          job_tokens=tokens, job_tokens_source=source,
                          flops_per_token=flops_per_token(replace(plan, techniques=replace(
                              plan.techniques, activation_checkpointing="none"))) / (3 if inference else 1),
                          headroom=headroom, mfu=mfu, rank_by=rank_by,
                          cut_after_s=round(time.perf_counter() - start, 2) if cut else None)


def _search_gpu(search: _Search, gpu: Gpu, counts: tuple[int, ...], headroom: float, host: int, tokens: int,
                mfu: float | None, price: float | None) -> tuple[list[Candidate], str]:
    plan = search.plan
    if why := unsupported_compute(plan, gpu):
        return [], why
    limits = _Limits(int(gpu.usable_bytes * (1 - headroom)), host)
    allowed = (f"{format_bytes(limits.device)} allowed ({format_bytes(gpu.usable_bytes)} usable less {headroom:.0%}"
               f" headroom) and {format_bytes(host)} of host memory per GPU")

    classes = search.time_classes()

    # the fewest GPUs: the first count where a class with the most recomputation fits; every offload level is
    # tried, as deeper offloading saves device memory but needs more host memory. (Not a bisection: the global
    # batch caps data parallelism, so the largest counts may have no layout at all.)
    saving = [(ckpt, off, p) for _, ckpt, off, p in classes if ckpt == search.ckpts[-1]]
    first, closest = None, None
    for n in counts:
        for ckpt, off, p in saving:
            est = search.most_saving(gpu, n, ckpt, off, p)
            if est is None:
                continue
            if limits.fits(est):
                first = n
                break
            closest = est if closest is None or est.device_bytes < closest.device_bytes else closest
        if first is not None:
            break
    if first is None:
        if closest is None:
            return [], f"{gpu.name}: no layout of the plan on {counts[-1]} GPU(s) or fewer"
        return [], (f"{gpu.name} ×{closest.plan.hardware.count}: needs {format_bytes(closest.device_bytes)} per GPU "
                    f"even with the most memory-saving strategy, {allowed}")

    # beyond one GPU per sequence no gain, but the plan's own count is always tried
    last = max(first, min(counts[-1], plan.workload.global_batch_size),
               plan.hardware.count if plan.hardware.count in counts else 0)
    found: list[Candidate] = []
    stopped = False  # more GPUs no longer shorten the job, or the GPU-hours ran past twice the fewest
    try:
        for n in (c for c in counts if first <= c <= last):
            own = n == plan.hardware.count  # the plan's own count is always tried
            if stopped and not own:
                continue
            best = _best_at(search, gpu, n, limits, classes, tokens, mfu, price, first)
            if best and found and not own and (
                    best[0].job_hours >= min(c.job_hours for c in found)
                    or n * best[0].job_hours > min(c.count * c.job_hours for c in found) / MIN_SCALING_EFFICIENCY):
                stopped = True
                continue
            found.extend(best)
    except _OutOfTime:
        raise _OutOfTime(found) from None
    return found, ""


def _best_at(search: _Search, gpu: Gpu, n: int, limits: _Limits, classes: list, tokens: int, mfu: float | None,
             price: float | None, first: int) -> list[Candidate]:
    """The fastest strategy that fits on `n` GPUs, as a one-candidate list ([] if none fits)."""
    plan = search.plan
    ckpt_rank = {c: i for i, c in enumerate(search.ckpts)}  # later = recomputes more = less memory
    offload_rank = {o: i for i, o in enumerate(search.offloads)}  # later = offloads more = less memory
    best: tuple[float, Candidate] | None = None
    failed: list[tuple[int, int, int]] = []  # classes whose most memory-saving layout did not fit
    # A lower bound of a class's hours: its factor (recomputation, least bubble) × the FLOPs at the achievable
    # matmul rate. (Not a found layout's own work: another layout's matmul shapes and elementwise traffic differ.)
    unit = compute_floor_hours(plan, gpu, tokens, n, mfu)
    pcie = {o: compute_floor_hours(plan, gpu, tokens, n, mfu, o) - unit for o in search.offloads}
    timed = 0
    deepest: dict[tuple[str, str], float] = {}  # per recomputation × offload: hours at the last pipeline depth
    for bound, ckpt, offload, p in classes:
        if best is not None and (bound * unit >= best[0] or timed >= MAX_TIMED_CLASSES):
            break
        if best is not None and (bound * unit + pcie[offload] >= best[0]
                                 or offload != "none" and best[1].plan.techniques.offload == "none"):
            continue  # its PCIe transfers alone make it slower; offload is for plans that do not fit without
        if deepest.get((ckpt, offload)) == float("inf"):
            continue  # a shallower pipeline of this kind was faster than a deeper one: deeper only adds bubble
        rank = (ckpt_rank[ckpt], offload_rank[offload])
        if any(fp == p and fc >= rank[0] and fo >= rank[1] for fc, fo, fp in failed):
            continue  # a class that saves at least as much memory already failed
        extreme = search.most_saving(gpu, n, ckpt, offload, p)
        if extreme is None or not limits.fits(extreme):
            failed.append((*rank, p))
            continue
        timed += 1
        fastest = float("inf")
        for est, hours in _layouts(search, gpu, n, limits, (ckpt, offload, p), tokens, mfu):
            fastest = min(fastest, hours)
            if best is None or hours < best[0]:
                best = (hours, _candidate(_for_gpu(est, gpu), gpu, n, (hours, tokens), price, limits.device, first,
                                          search.catalog))
        previous = deepest.get((ckpt, offload))
        deepest[(ckpt, offload)] = float("inf") if previous is not None and fastest > previous else fastest
    return [] if best is None else [best[1]]


def _layouts(search: _Search, gpu: Gpu, n: int, limits: _Limits, cls: tuple[str, str, int], tokens: int,
             mfu: float | None) -> list[tuple[Estimate, float]]:
    """The simplest layout of a class that fits, and, where its step spends more than COMMUNICATION_SHARE beyond
    its work (exposed communication, bubble), the simplest layout at the widest tensor-parallel degree inside an
    NVLink-class fast domain: tensor parallelism there divides the bytes each rank gathers and reduces across it."""
    est = search.simplest(gpu, n, limits, *cls)
    if est is None:
        return []
    # the estimate may name another GPU type (memory is shared across types); the time reads only `gpu`
    hours, work = job_time(est.plan, gpu, tokens, mfu)
    found = [(est, hours)]
    # only over NVLink-class links: over PCIe, tensor parallelism's per-layer all-reduces cost more than the
    # gradient traffic they save
    r = rates(gpu, search.plan.precision.compute)
    domain = r.fast_domain_gpus if r.link_kind == "link" else 1
    widest = max((t for t in search.tensors(gpu) if t <= domain), default=1)
    if mfu is None and hours > work * (1 + COMMUNICATION_SHARE) and widest > est.plan.parallelism.tensor:
        wider = search.simplest(gpu, n, limits, *cls, tensors=(widest,))
        if wider is not None:
            found.append((wider, job_time(wider.plan, gpu, tokens, mfu)[0]))
    return found


def _search_inference(search: _Search, gpu: Gpu, counts: tuple[int, ...], headroom: float, host: int,
                      tokens: int, mfu: float | None, price: float | None) -> tuple[list[Candidate], str]:
    """Replicas of the model: tensor parallelism within a node, pipeline parallelism across nodes. More
    replicas multiply throughput at the same cost per token, so one replica of each layout is a candidate."""
    plan = search.plan
    if why := unsupported_compute(plan, gpu):
        return [], why
    limits = _Limits(int(gpu.usable_bytes * (1 - headroom)), host)
    fixed_t = (plan.parallelism.tensor,) if "tensor" in search.fixed else search.tensors(gpu)
    fixed_p = (plan.parallelism.pipeline,) if "pipeline" in search.fixed else search.pipelines
    found, closest = [], None
    for p in fixed_p:
        if found:
            break  # pipeline stages add latency and buy nothing once a layout within a node fits
        for t in fixed_t:
            n = t * p
            if n not in counts and "count" not in search.fixed:
                continue
            try:
                own = plan.parallelism  # its split rule, and its list of layers at its own depth
                layers = own.pipeline_layers if p == own.pipeline and own.virtual_stages == 1 else None
                candidate_plan = replace(plan, parallelism=Parallelism(data=1, tensor=t, pipeline=p,
                                                                       pipeline_split=own.pipeline_split,
                                                                       pipeline_layers=layers),
                                         hardware=Hardware(gpu=gpu.id, count=n))
            except PlanError:
                continue
            est = estimate(candidate_plan, search.catalog, detail=False)
            budget = est.usable_bytes if est.serving is not None else limits.device  # an engine sets its own
            if est.device_bytes > budget:
                closest = est if closest is None or est.device_bytes < closest.device_bytes else closest
                continue
            speed = throughput(candidate_plan, gpu)
            hours = tokens / (speed.output_tokens_per_second_per_gpu * n) / 3600
            usd = None if price is None else price * n
            layout = (f"TP {t}" + (f" × PP {p}" if p > 1 else "") if n > 1 else "one GPU") + \
                f", {plan.precision.weights} weights"
            why = (f"{n} × {gpu.name}, {layout}: {format_bytes(est.device_bytes)} per GPU; decode "
                   f"{speed.decode_tokens_per_second:,.0f} tok/s, prefill {speed.prefill_tokens_per_second:,.0f} "
                   f"tok/s per replica")
            found.append(Candidate(gpu=gpu, count=n, plan=candidate_plan, device_bytes=est.device_bytes,
                                   usd_per_hour=usd, job_hours=hours, job_usd=None if usd is None else usd * hours,
                                   tokens_per_s_per_gpu=speed.output_tokens_per_second_per_gpu,
                                   strategy=layout, why=why, catalog=search.catalog))
    if found:
        return found, ""
    if closest is None:
        return [], f"{gpu.name}: no tensor × pipeline layout of the model fits the GPU counts searched"
    return [], (f"{gpu.name} ×{closest.plan.hardware.count}: needs {format_bytes(closest.device_bytes)} per GPU, "
                f"{format_bytes(limits.device)} allowed")


def _candidate(est: Estimate, gpu: Gpu, n: int, job: tuple[float, int], price: float | None, limit: int, first: int,
               catalog: dict[str, Gpu]) -> Candidate:
    hours, tokens = job
    par, tech, wl = est.plan.parallelism, est.plan.techniques, est.plan.workload
    parts = [f"ZeRO-{par.zero_stage}" if par.zero_stage else ("DDP" if par.data > 1 else "one replica")]
    parts += [f"TP {par.tensor}" + (" + SP" if par.sequence_parallel else "")] if par.tensor > 1 else []
    parts += [f"PP {par.pipeline}"] if par.pipeline > 1 else []
    parts += [f"CP {par.context}"] if par.context > 1 else []
    parts += [f"EP {par.expert}"] if par.expert > 1 else []
    parts += [f"{tech.activation_checkpointing} recomputation"] if tech.activation_checkpointing != "none" else []
    parts += [f"offload {tech.offload.replace('_', ' ')}"] if tech.offload != "none" else []
    parts += [f"micro-batch {wl.micro_batch_size}"]
    lead = f"fewest {gpu.name} that fit" if n == first else f"{n} × {gpu.name}"
    strategy = ", ".join(parts)
    why = (f"{lead}: {strategy}; {format_bytes(est.device_bytes)} per GPU of {format_bytes(limit)} allowed"
           f"; fastest strategy at this count")
    usd_per_hour = None if price is None else price * n
    return Candidate(gpu=gpu, count=n, plan=est.plan, device_bytes=est.device_bytes, usd_per_hour=usd_per_hour,
                     job_hours=hours, job_usd=None if usd_per_hour is None else hours * usd_per_hour,
                     tokens_per_s_per_gpu=tokens / (hours * 3600) / n,
                     strategy=strategy, why=why, catalog=catalog)


# --- Inverse questions ---------------------------------------------------------------------------------------
def _plan_limits(plan: Plan, catalog: dict[str, Gpu], headroom: float, host_gib: float) -> _Limits:
    if plan.hardware.gpu not in catalog:
        raise bad("hardware.gpu", plan.hardware.gpu, f"is not in the GPU catalog; known: {', '.join(catalog)}")
    return _Limits(int(catalog[plan.hardware.gpu].usable_bytes * (1 - headroom)), int(host_gib * 2**30))


def _largest(fits, step: int, high: int) -> int | None:
    """Largest multiple of `step` up to `high` for which `fits` holds, given that it is monotone."""
    if not fits(step):
        return None
    lo, hi = 1, 2  # in units of step: lo fits
    while hi * step <= high and fits(hi * step):
        lo, hi = hi, hi * 2
    hi = min(hi, high // step + 1)  # first unit known (or assumed past the bound) not to fit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid * step) else (lo, mid)
    return lo * step


def max_micro_batch(plan: Plan, catalog: dict[str, Gpu] | None = None, *, headroom: float = DEFAULT_HEADROOM,
                    host_memory_gib_per_gpu: float = DEFAULT_HOST_GIB_PER_GPU) -> int | None:
    """The largest micro-batch that fits the plan's GPU and strategy (gradient accumulation steps kept)."""
    catalog = catalog if catalog is not None else load_catalog()
    limits = _plan_limits(plan, catalog, headroom, host_memory_gib_per_gpu)
    accum = plan.micro_batches_per_step
    data = plan.parallelism.data

    def fits(mb: int) -> bool:
        wl = replace(plan.workload, micro_batch_size=mb, global_batch_size=mb * data * accum)
        return limits.fits(estimate(replace(plan, workload=wl), catalog, detail=False))

    return _largest(fits, 1, 1_048_576)


def max_sequence_length(plan: Plan, catalog: dict[str, Gpu] | None = None, *, headroom: float = DEFAULT_HEADROOM,
                        host_memory_gib_per_gpu: float = DEFAULT_HOST_GIB_PER_GPU) -> int | None:
    """The longest sequence that fits the plan's GPU and strategy, in steps the parallelism can split."""
    catalog = catalog if catalog is not None else load_catalog()
    limits, par = _plan_limits(plan, catalog, headroom, host_memory_gib_per_gpu), plan.parallelism
    step = par.context * (par.tensor if par.sequence_parallel else 1)

    def fits(s: int) -> bool:
        p = replace(plan, workload=replace(plan.workload, sequence_length=s))
        return limits.fits(estimate(p, catalog, detail=False))

    return _largest(fits, step, 16_777_216)


def _serves(est: Estimate, limits: _Limits) -> bool:
    """An inference estimate fits: within the engine's own budget when it serves, else within the allowance."""
    return est.device_bytes <= (est.usable_bytes if est.serving is not None else limits.device)


def _inference_limit(plan: Plan, catalog: dict[str, Gpu] | None, headroom: float, key: str, high: int) -> int | None:
    """The largest value of an inference key (workload.inference.`key`) that fits the plan's GPUs."""
    catalog = catalog if catalog is not None else load_catalog()
    limits, inf = _plan_limits(plan, catalog, headroom, 0), plan.workload.inference

    def fits(n: int) -> bool:
        p = replace(plan, workload=replace(plan.workload, inference=replace(inf, **{key: n})))
        return _serves(estimate(p, catalog, detail=False), limits)

    return _largest(fits, 1, high)


def max_batch_size(plan: Plan, catalog: dict[str, Gpu] | None = None, *,
                   headroom: float = DEFAULT_HEADROOM) -> int | None:
    """Inference: the most sequences of the plan's prompt and output length generated together that fit."""
    return _inference_limit(plan, catalog, headroom, "batch_size", MAX_BATCH)


def max_prompt_tokens(plan: Plan, catalog: dict[str, Gpu] | None = None, *,
                      headroom: float = DEFAULT_HEADROOM) -> int | None:
    """Inference: the longest prompt that fits with the plan's batch and output tokens."""
    return _inference_limit(plan, catalog, headroom, "prompt_tokens",
                            MAX_SEQUENCE - plan.workload.inference.output_tokens)


def min_gpus(plan: Plan, catalog: dict[str, Gpu] | None = None, *, headroom: float = DEFAULT_HEADROOM,
             host_memory_gib_per_gpu: float = DEFAULT_HOST_GIB_PER_GPU,
             fixed: frozenset[str] | set[str] = frozenset()) -> Candidate | None:
    """The fewest GPUs of the plan's GPU type that fit, with the fastest strategy at that count."""
    rec = recommend(plan, catalog, headroom=headroom, host_memory_gib_per_gpu=host_memory_gib_per_gpu,
                    fixed=frozenset(fixed) | {"gpu"})
    return min(rec.candidates, key=lambda c: c.count, default=None)
