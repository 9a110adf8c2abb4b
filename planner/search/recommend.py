"""The cheapest hardware for a plan: offering × GPU count × strategy, against a deadline.

What is searched:
- Offerings, not bare GPUs (gpu_catalog.yaml): a GPU type in an instance shape, with the network between
  instances, the largest cluster sold that way and its prices. A plan on more GPUs than one instance needs an
  offering with a network; offloaded states need the instance's host RAM; whole instances are paid for.
- For each offering, the GPU counts a cluster of it can have (whole instances, doubling, up to the offering's
  largest cluster and `max_gpus`), from the fewest that fit upward, with the fastest strategy at each count
  (planner/search/strategies.py). At one count the fastest is also the cheapest, so these points make the offering's
  cost-time frontier. The ladder stops where more GPUs no longer shorten the job, or, once the deadline is met,
  where the GPU-hours pass twice the fewest found (every larger count costs over twice as much).
- The recommendation is the cheapest candidate that finishes within the deadline (30 days unless told), or,
  where none does, the fastest found. Serving plans are sized to a throughput target at latency bounds instead:
  the largest batch each layout can take within the bounds, and as many replicas as the target needs.
- Job cost = hours × GPUs paid × price of the chosen kind (on-demand, reserved, spot), each price dated and
  sourced; hours from the step-time model (planner/perf/), or a user's MFU.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Literal, get_args

from planner.accuracy import likely_seconds, time_accuracy, time_bands
from planner.catalog import (
    Catalog,
    Gpu,
    Offering,
    Price,
    PriceKind,
    ProviderClass,
    generic_offering,
    load_catalog,
    offering_view,
    plan_gpu,
)
from planner.errors import PlanError, bad
from planner.memory import Estimate, estimate
from planner.perf import compute_floor_hours, flops_per_token, unsupported_compute
from planner.perf.rates import rates
from planner.plan.config import MAX_BATCH, MAX_SEQUENCE, RL_OBJECTIVES, Hardware, Parallelism, Plan
from planner.plan.validate import check_choice
from planner.search.rollout import RolloutSearch, rollout_text, searched
from planner.search.strategies import Found, Limits, OutOfTime, StrategySearch
from planner.units import format_bytes, format_hours, from_gib

DEFAULT_HEADROOM = 0.10  # memory kept free for what no model predicts (fragmentation spikes, library buffers)
DEFAULT_JOB_TOKENS = 10**9  # without workload.steps or train_tokens, costs are per billion training tokens
DEFAULT_DEADLINE_HOURS = 30 * 24.0  # "finish within 30 days": a month is what a training run is planned around
MAX_GPUS = 1_048_576  # the most GPUs a search may plan (the plan's own limit)
# The count ladder of an offering stops, once the deadline is met, where scaling efficiency (the fewest GPU-hours
# found over this count's) falls below one half: every larger count costs over twice as much for the same job;
# or at the first count that runs the job in under an hour: bringing up a multi-node job (scheduling, image and
# checkpoint loading, NCCL set-up) takes minutes, so more GPUs beyond it buy a person nothing.
MIN_SCALING_EFFICIENCY = 0.5
# A doubling of the GPUs can run the job slower than the count below it, and the next doubling faster again: the
# layouts that fit change with the count (a ZeRO-3 stage holding its whole parameters under pipelining, an
# optimizer offload, a deeper pipeline that fits only further up). The ladder passes over this many counts in a
# row that are no faster before it stops.
SLOWER_COUNTS_TRIED = 1
MIN_USEFUL_JOB_HOURS = 1.0
# An offering whose least possible cost (the plan's FLOPs at its GPU's achievable matmul rate, which no strategy
# beats) is over this many times the best candidate within the deadline is not searched: it cannot be the
# answer nor a tie, and is listed with that least cost (every_offering searches it anyway).
OUTRANKED_RATIO = 2.0
SERVING_TOKENS = 10**6  # serving costs are per million generated tokens

SEARCH_KEYS = (
    "gpu",
    "offering",
    "count",
    "zero_stage",
    "tensor",
    "pipeline",
    "context",
    "expert",
    "activation_checkpointing",
    "offload",
    "micro_batch_size",
    "rollout",  # a GRPO or PPO plan's engine layout: colocated or split, its fraction, sleep level and GPUs
)
RankBy = Literal["job", "hour"]
# what the deadline is checked against: the time model's job time, or the slow end of the time band of the plan's
# class (planner/accuracy.py: 8 in 10 published runs took at most that many times the model's time)
DeadlineAt = Literal["model", "slow_end"]


@dataclass(frozen=True, kw_only=True)
class SearchOptions:
    """What the recommender is asked: the deadline, the GPU cap, which prices, what it may change, and for
    serving the throughput target and latency bounds. Every field is checked where it is set."""

    deadline_hours: float | None = DEFAULT_DEADLINE_HOURS  # None: no deadline, the cheapest at any speed
    deadline_at: DeadlineAt = "model"
    max_gpus: int = MAX_GPUS
    price_kind: PriceKind = "on_demand"
    # your prices, USD per GPU-hour, by GPU id (every offering of it) or offering id
    prices: tuple[tuple[str, float], ...] = ()
    headroom: float = DEFAULT_HEADROOM
    host_memory_gib_per_gpu: float | None = None  # replaces every offering's host RAM
    mfu: float | None = None  # job time at this model FLOPs utilization instead of the time model
    mfu_by_gpu: tuple[tuple[str, float], ...] = ()
    fixed: frozenset[str] = frozenset()  # plan keys the search keeps (SEARCH_KEYS)
    rank_by: RankBy = "job"
    gpus: tuple[str, ...] = ()  # GPU types searched; () every one
    provider_classes: tuple[ProviderClass, ...] = ()  # () every class
    requests_per_s: float | None = None  # serving: the throughput the fleet must sustain, in requests
    output_tokens_per_s: float | None = None  # or in generated tokens (both: the fleet meets each)
    ttft_s: float | None = None  # serving: time to first token at most
    tpot_s: float | None = None  # serving: time per output token at most
    budget_s: float | None = None  # stop after this many seconds with what was found, saying so
    every_offering: bool = False  # also search offerings a lower bound proves cannot win (OUTRANKED_RATIO)

    def __post_init__(self) -> None:
        _check_positive("deadline_hours", self.deadline_hours, 1e7)
        _check_positive("requests_per_s", self.requests_per_s, 1e9)
        _check_positive("output_tokens_per_s", self.output_tokens_per_s, 1e12)
        _check_positive("ttft_s", self.ttft_s, 86_400)
        _check_positive("tpot_s", self.tpot_s, 86_400)
        _check_positive("budget_s", self.budget_s, 86_400)
        if isinstance(self.max_gpus, bool) or not isinstance(self.max_gpus, int) or not 1 <= self.max_gpus <= MAX_GPUS:
            raise bad("max_gpus", self.max_gpus, f"must be an integer from 1 to {MAX_GPUS:,}")
        if not 0 <= self.headroom < 1:
            raise bad("headroom", self.headroom, "must be a fraction from 0 to below 1 (e.g. 0.1 for 10 %)")
        if self.host_memory_gib_per_gpu is not None and not 0 <= self.host_memory_gib_per_gpu <= 1_000_000:
            raise bad("host_memory_gib_per_gpu", self.host_memory_gib_per_gpu, "must be from 0 to 1,000,000 GiB")
        for key, value in (("mfu", self.mfu), *((f"mfu.{g}", v) for g, v in self.mfu_by_gpu)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1
            ):
                raise bad(key, value, "must be a fraction above 0 and at most 1 (e.g. 0.4)")
        for key, price in self.prices:
            if isinstance(price, bool) or not isinstance(price, (int, float)) or not 0 < price <= 10_000:
                raise bad(f"prices.{key}", price, "must be a positive price in USD per GPU-hour (at most 10,000)")
        check_choice("rank_by", self.rank_by, get_args(RankBy))
        check_choice("deadline_at", self.deadline_at, get_args(DeadlineAt))
        check_choice("price_kind", self.price_kind, get_args(PriceKind))
        for c in self.provider_classes:
            check_choice("provider_classes", c, get_args(ProviderClass))
        for key in self.fixed:
            if key not in SEARCH_KEYS:
                raise bad("fixed", key, f"is not a searchable key; searchable: {', '.join(SEARCH_KEYS)}")

    @property
    def serving_target(self) -> bool:
        return any(x is not None for x in (self.requests_per_s, self.output_tokens_per_s, self.ttft_s, self.tpot_s))

    @property
    def fleet_target(self) -> bool:
        """A throughput the serving fleet is sized to."""
        return self.requests_per_s is not None or self.output_tokens_per_s is not None


def _check_positive(key: str, value: float | None, most: float) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= most):
        raise bad(key, value, f"must be a number above 0 and at most {most:,g}")


@dataclass(frozen=True, kw_only=True)
class Candidate:
    offering: Offering
    gpu: Gpu  # the GPU as the offering shapes it (instance, links, network)
    count: int  # GPUs of one replica (serving) or of the job
    plan: Plan  # the whole plan, ready to adopt (hardware.offering set)
    device_bytes: int
    host_bytes: int
    price: Price | None  # the catalog's price applied, with its date and source (None: the user's, or none)
    usd_per_gpu_hour: float | None  # None when neither the catalog nor the user gives a price
    usd_per_hour: float | None  # every GPU paid for: whole instances, every replica
    job_hours: float  # training: the job; serving: generating a million tokens with the fleet
    job_usd: float | None
    tokens_per_s_per_gpu: float  # training tokens, or generated tokens when serving
    strategy: str  # short: "ZeRO-3, TP 2 + SP, full recomputation, micro-batch 1"
    why: str
    meets_deadline: bool  # training within the deadline (serving: the target and bounds are met)
    paid_gpus: int  # whole instances of every replica
    replicas: int = 1
    ttft_s: float | None = None  # serving
    tpot_s: float | None = None
    catalog: Mapping[str, Gpu] = field(repr=False, compare=False)

    @cached_property
    def estimate(self) -> Estimate:
        """The full itemized breakdown (made when asked: the search itself needs only the totals)."""
        return estimate(self.plan, self.catalog)


RejectionKind = Literal["unfit", "outranked", "unsearched"]


@dataclass(frozen=True, kw_only=True)
class Rejection:
    """A GPU type without a candidate: none of its offerings fits the plan ("unfit"), none could cost less than
    twice the recommendation or finish in time where it does ("outranked": proven by a lower bound, not searched),
    or the search's time budget ran out before it ("unsearched")."""

    gpu: Gpu
    reason: str
    kind: RejectionKind = "unfit"


@dataclass(frozen=True, kw_only=True)
class Recommendation:
    candidates: tuple[Candidate, ...]  # ranked: within the deadline cheapest first, then the rest fastest first
    rejected: tuple[Rejection, ...]  # GPU types with no candidate, and why
    options: SearchOptions
    job_tokens: int
    job_tokens_source: str
    flops_per_token: float  # of the base plan, without recomputation
    tie_band: float  # candidates within this fraction of the best's cost are ties (the time model's error)
    price_dates: tuple[str, str] | None  # the oldest and newest date of the catalog's prices
    cut_after_s: float | None = None  # the time budget ran out: the best answers found by then
    model_deadline_hours: float | None = None  # the deadline the model's job time was held to (model_deadline_hours)

    @property
    def best(self) -> Candidate | None:
        """The recommendation: the cheapest within the deadline, else the fastest found."""
        return self.candidates[0] if self.candidates else None

    @property
    def serving(self) -> bool:
        return self.job_tokens_source.startswith("serving")

    @property
    def ranked_by_hour(self) -> bool:
        """Ranked by cost per hour: asked so, or a serving fleet sized to a throughput target."""
        return _by_hour(self.options, self.serving)

    @property
    def time_basis(self) -> str:
        if self.options.mfu is None:
            return "job time from the step-time model (each GPU's measured matmul rate, HBM and links)"
        return f"job time at {self.options.mfu:.0%} model FLOPs utilization of each GPU's dense peak (override)"

    def per_type(self) -> list[Candidate]:
        """The best candidate of each GPU type, in rank order."""
        best: dict[str, Candidate] = {}
        for c in self.candidates:
            best.setdefault(c.gpu.id, c)
        return list(best.values())

    def ties(self) -> list[Candidate]:
        """Other GPU types' best candidates whose cost is within the time model's error of the best's: the
        model cannot tell them apart."""
        best = self.best
        if best is None or best.job_usd is None:
            return []
        metric = _metric(self.options, self.serving)
        return [
            c
            for c in self.per_type()[1:]
            if c.meets_deadline == best.meets_deadline
            and metric(c) is not None
            and metric(c) <= metric(best) * (1 + self.tie_band)
        ]

    def frontier(self, gpu_id: str | None = None) -> list[Candidate]:
        """The cost-time frontier (of one GPU type, or of all): the priced candidates no other is both as fast
        and as cheap as, fastest first."""
        pool = sorted(
            ((c, usd) for c in self.candidates if (usd := c.job_usd) is not None and gpu_id in (None, c.gpu.id)),
            key=lambda priced: (priced[0].job_hours, priced[1]),
        )
        out: list[Candidate] = []
        cheapest = 0.0
        for c, usd in pool:
            if not out or usd < cheapest:
                out.append(c)
                cheapest = usd
        return out

    def caveats(self, c: Candidate) -> list[str]:
        """Where the time model is least sure of this candidate (measured against published runs), and the job
        time 8 in 10 published runs of its class would have taken."""
        band = [] if self.serving else [job_time_caveat(c, self.options.deadline_hours)]
        return time_caveats(c.plan, c.gpu) + [line for line in band if line]


def _by_hour(options: SearchOptions, serving: bool) -> bool:
    """Ranked by cost per hour: asked so, or a serving fleet sized to a throughput target (else by the job's)."""
    return options.rank_by == "hour" or (serving and options.fleet_target)


def _metric(options: SearchOptions, serving: bool):
    """The cost a candidate is ranked by."""
    return (lambda c: c.usd_per_hour) if _by_hour(options, serving) else (lambda c: c.job_usd)


def job_time_caveat(c: Candidate, deadline_hours: float | None) -> str | None:
    """The candidate's job time as 8 in 10 published runs of its class came out (planner/accuracy.py), and
    whether its slow end misses the deadline."""
    likely = likely_seconds(c.plan, c.job_hours * 3600)
    if likely is None:
        return None
    low, high, band = likely
    late = ""
    if deadline_hours is not None and high / 3600 > deadline_hours:
        late = f", past the deadline ({format_hours(deadline_hours)}) at the slow end"
    return (
        f"8 in 10 published {band.kind} runs took {1 + band.low_pct / 100:.2f}–{1 + band.high_pct / 100:.2f} × "
        f"the time model's time: this job likely takes {format_hours(low / 3600)}–{format_hours(high / 3600)}" + late
    )


def time_caveats(plan: Plan, gpu: Gpu) -> list[str]:
    """The time model's known weak spots for this plan on this GPU, each with the measured error behind it."""
    acc = time_accuracy()
    out = []
    if gpu.id not in acc.gpus:
        out.append(
            f"no published throughput of {gpu.name} checks the time model (only its datasheet and measured "
            f"matmul rate): {acc.vendor_note(gpu.vendor)}"
        )
    if plan.model.num_experts and plan.workload.task != "inference":
        out.append(f"MoE training: the time model has been {acc.moe}")
    elif (outside := _outside_band(plan, gpu)) is not None:
        out.append(outside)
    r = rates(gpu, plan.precision.compute)
    if plan.precision.compute == "fp8" and gpu.fp8_matmul_efficiency is None and r is not None:
        out.append(f"no measured fp8 matmul rate for {gpu.name}: {r.matmul_efficiency:.0%} of its fp8 peak assumed")
    return out


def _outside_band(plan: Plan, gpu: Gpu) -> str | None:
    """A line where the GPU's own published dense training runs lean outside their class's band: its median
    measured time over the model's."""
    band, signed = time_bands().get("dense training"), dict(time_accuracy().gpu_signed_pct).get(gpu.id)
    if plan.workload.task == "inference" or band is None or signed is None or band.low_pct <= signed <= band.high_pct:
        return None
    return (
        f"published dense training runs on {gpu.name} took {1 + signed / 100:.2f} × the time model's time "
        f"(median), outside the {1 + band.low_pct / 100:.2f}–{1 + band.high_pct / 100:.2f} × of all GPUs"
    )


# --- The search ---------------------------------------------------------------------------------------------
def _price(offering: Offering, options: SearchOptions) -> tuple[Price | None, float | None]:
    """(the catalog's price of the asked kind, the USD per GPU-hour applied: the user's where given)."""
    mine = dict(options.prices)
    listed = offering.price(options.price_kind)
    own = mine.get(offering.id, mine.get(offering.gpu))
    return (None, own) if own is not None else (listed, None if listed is None else listed.usd_per_gpu_hour)


def _counts(offering: Offering, plan: Plan, options: SearchOptions) -> tuple[int, ...]:
    """GPU counts of this offering: part of one instance (paid whole: for a plan that cannot use all of it), then
    whole instances, doubling, up to its largest cluster and the cap; with 'count' fixed the plan's own alone."""
    if "count" in options.fixed:
        return (plan.total_gpus,)
    g, top = offering.gpus_per_instance, min(offering.max_gpus or options.max_gpus, options.max_gpus)
    return tuple(
        n for n in [1 << k for k in range(g.bit_length()) if 1 << k < g] + [g << k for k in range(21)] if n <= top
    )


def _limits(gpu: Gpu, offering: Offering, plan: Plan, options: SearchOptions) -> Limits:
    """The GPU less the headroom, and the host RAM per GPU the estimate of the candidate's plan holds it to: the
    search's figure, else the plan's own (kept in every candidate's plan), else the offering's."""
    own = options.host_memory_gib_per_gpu
    own = plan.hardware.host_memory_gib_per_gpu if own is None else own
    host = offering.host_bytes() if own is None else from_gib(own)
    return Limits(int(gpu.usable_bytes * (1 - options.headroom)), host)


@dataclass(frozen=True)
class _Job:
    """What every offering's search shares: the plan's strategies, the job's tokens, the options."""

    search: StrategySearch
    tokens: int
    options: SearchOptions
    rollout: RolloutSearch | None = None  # a GRPO or PPO plan's engine layouts (planner/search/rollout.py)


def _train_offering(job: _Job, offering: Offering, gpu: Gpu) -> tuple[list[Candidate], str]:
    """The fastest strategy at each count of the offering's ladder, from the fewest GPUs that fit upward."""
    search, options = job.rollout or job.search, job.options
    limits = _limits(gpu, offering, search.plan, options)
    mfu = dict(options.mfu_by_gpu).get(gpu.id, options.mfu)
    counts = tuple(n for n in _counts(offering, search.plan, options) if offering.refuses(n) is None)
    if not counts:
        return [], offering.refuses(_counts(offering, search.plan, options)[0]) or f"{offering.id}: no count"
    first, closest = search.first_fit(gpu, counts, limits)
    if first is None:
        return [], _no_fit(gpu, offering, limits, closest, counts[-1])
    found: list[tuple[int, Found]] = []
    slower = 0
    for n in (c for c in counts if c >= first):
        best = search.best_at(gpu, n, limits, job.tokens, mfu)
        if best is None:
            continue
        fastest = min((f.hours for _, f in found), default=math.inf)
        if best.hours >= fastest:  # more GPUs, no faster: not a candidate
            slower += 1
            if slower > SLOWER_COUNTS_TRIED:
                break
            continue
        if found and _past_useful(found, n, best, fastest, options.deadline_hours):
            break
        slower = 0
        found.append((n, best))
        if best.hours < MIN_USEFUL_JOB_HOURS and (options.deadline_hours or 0) >= MIN_USEFUL_JOB_HOURS:
            break
    if not found:
        return [], f"{gpu.name} ({offering.id}): no strategy fits from {first:,} GPUs up"
    return [_candidate(job, offering, gpu, n, f, first) for n, f in found], ""


def _past_useful(found: list[tuple[int, Found]], n: int, best: Found, fastest: float, deadline: float | None) -> bool:
    """Whether the ladder stops at count `n`, faster than every count below it (`fastest`, the fastest of them):
    the deadline is met and the GPU-hours run past twice the fewest found."""
    met = deadline is None or fastest <= deadline
    return met and n * best.hours > min(c * f.hours for c, f in found) / MIN_SCALING_EFFICIENCY


def _no_fit(gpu: Gpu, offering: Offering, limits: Limits, closest: Estimate | None, most: int) -> str:
    allowed = (
        f"{format_bytes(limits.device)} allowed ({format_bytes(gpu.usable_bytes)} usable less the headroom) "
        f"and {format_bytes(limits.host)} of host RAM per GPU"
    )
    if closest is None:
        return f"{gpu.name} ({offering.id}): no layout of the plan on {most:,} GPU(s) or fewer"
    if closest.device_bytes <= limits.device and closest.host_bytes > limits.host:  # the device holds it
        return (
            f"{gpu.name} ({offering.id}) ×{closest.plan.hardware.count:,}: host RAM is why: offloading fits "
            f"{format_bytes(closest.device_bytes)} per GPU but needs {format_bytes(closest.host_bytes)} of host "
            f"RAM per GPU, {format_bytes(limits.host)} there (the plan's host RAM per GPU, else the offering's)"
        )
    return (
        f"{gpu.name} ({offering.id}) ×{closest.plan.hardware.count:,}: needs {format_bytes(closest.device_bytes)} "
        f"per GPU and {format_bytes(closest.host_bytes)} of host RAM even with the most memory-saving strategy, "
        f"{allowed}"
    )


def _strategy_text(plan: Plan) -> str:
    par, tech, wl = plan.parallelism, plan.techniques, plan.workload
    parts = [f"ZeRO-{par.zero_stage}" if par.zero_stage else ("DDP" if par.data > 1 else "one replica")]
    parts += [f"TP {par.tensor}" + (" + SP" if par.sequence_parallel else "")] if par.tensor > 1 else []
    parts += [f"PP {par.pipeline}"] if par.pipeline > 1 else []
    parts += [f"CP {par.context}"] if par.context > 1 else []
    parts += [f"EP {par.expert}"] if par.expert > 1 else []
    parts += [f"{tech.activation_checkpointing} recomputation"] if tech.activation_checkpointing != "none" else []
    parts += [f"offload {tech.offload.replace('_', ' ')}"] if tech.offload != "none" else []
    parts += [f"micro-batch {wl.micro_batch_size}"]
    return ", ".join(parts + ([rollout] if (rollout := rollout_text(plan)) else []))


def _hardware(plan: Plan, offering: Offering, count: int, catalog: Catalog) -> Hardware:
    """`count` GPUs of the offering (none named where it is a GPU's usual server, which the catalog does not
    list; the user's own host RAM figure kept)."""
    listed = offering.id if offering.id in catalog.offerings else None
    return Hardware(
        gpu=offering.gpu, count=count, offering=listed, host_memory_gib_per_gpu=plan.hardware.host_memory_gib_per_gpu
    )


def _candidate(job: _Job, offering: Offering, gpu: Gpu, n: int, found: Found, first: int) -> Candidate:
    est, hours = found.estimate, found.hours
    price, usd = _price(offering, job.options)
    paid = offering.paid_gpus(n)
    per_hour = None if usd is None else usd * paid
    deadline = job.options.deadline_hours
    strategy = _strategy_text(est.plan)
    lead = f"fewest {gpu.name} that fit" if n == first else f"{n:,} × {gpu.name}"
    why = (
        f"{lead} ({offering.provider}, {offering.instance}): {strategy}; {format_bytes(est.device_bytes)} per GPU"
        f"; fastest strategy at this count; {format_hours(hours)}"
    )
    # the plan's own host RAM figure kept; a GRPO server engine's GPUs are of the n, beside the training GPUs
    hardware = _hardware(job.search.plan, offering, est.plan.hardware.count, job.search.catalog)
    return Candidate(
        offering=offering,
        gpu=gpu,
        count=n,
        plan=replace(est.plan, hardware=hardware),
        device_bytes=est.device_bytes,
        host_bytes=est.host_bytes,
        price=price,
        usd_per_gpu_hour=usd,
        usd_per_hour=per_hour,
        job_hours=hours,
        job_usd=None if per_hour is None else hours * per_hour,
        tokens_per_s_per_gpu=job.tokens / (hours * 3600) / n,
        strategy=strategy,
        why=why,
        meets_deadline=deadline is None or hours <= deadline,
        paid_gpus=paid,
        catalog=job.search.catalog,
    )


# --- Serving ------------------------------------------------------------------------------------------------
def _serving_plans(job: _Job, offering: Offering, gpu: Gpu) -> list[Plan]:
    """One replica of each layout the offering can hold: tensor parallelism within an instance, pipeline
    stages across instances (where it has a network); deeper pipelines only while no shallower one fits."""
    search, plan, fixed = job.search, job.search.plan, job.options.fixed
    tensors = (plan.parallelism.tensor,) if "tensor" in fixed else search.tensors(gpu)
    pipelines = (plan.parallelism.pipeline,) if "pipeline" in fixed else search.pipelines
    own = plan.parallelism
    out = []
    for p in pipelines:
        for t in tensors:
            n = t * p
            if ("count" in fixed and n != plan.hardware.count) or offering.refuses(n) or n > job.options.max_gpus:
                continue
            layers = own.pipeline_layers if p == own.pipeline and own.virtual_stages == 1 else None
            try:
                out.append(
                    replace(
                        plan,
                        parallelism=Parallelism(
                            data=1, tensor=t, pipeline=p, pipeline_split=own.pipeline_split, pipeline_layers=layers
                        ),
                        hardware=_hardware(plan, offering, n, search.catalog),
                    )
                )
            except PlanError:
                continue
    return out


def _serves(est: Estimate, limits: Limits) -> bool:
    """An inference estimate fits: within the engine's own budget when it serves, else within the allowance."""
    return est.device_bytes <= (est.usable_bytes if est.serving is not None else limits.device)


def _with_batch(plan: Plan, batch: int) -> Plan:
    return replace(plan, workload=replace(plan.workload, inference=replace(plan.workload.inference, batch_size=batch)))


def _capacity(job: _Job, plan: Plan, est: Estimate, limits: Limits) -> int:
    """The most sequences one replica holds at once: the engine's KV capacity, else the largest batch that fits
    (0: not even one)."""
    if est.serving is not None:
        return est.serving.max_concurrent_sequences
    return _largest(lambda b: _serves(job.search.served(_with_batch(plan, b)), limits), 1, MAX_BATCH) or 0


def _within_bounds(job: _Job, plan: Plan, gpu: Gpu, capacity: int) -> int | None:
    """The largest batch up to `capacity` whose time to first token and per output token stay within the bounds
    (both grow with the batch); None: even one sequence misses a bound."""
    options = job.options

    def within(b: int) -> bool:
        lat = job.search.latency(_with_batch(plan, b), gpu)
        return (options.ttft_s is None or lat.ttft_s <= options.ttft_s) and (
            options.tpot_s is None or lat.tpot_s <= options.tpot_s
        )

    return _largest(within, 1, capacity)


def _serve_offering(job: _Job, offering: Offering, gpu: Gpu) -> tuple[list[Candidate], str]:
    """Replicas of the model on the offering: one candidate per layout that fits; with a target or bounds, at the
    largest batch within the bounds and its memory, with as many replicas as the target needs."""
    limits = _limits(gpu, offering, job.search.plan, job.options)
    found: list[Candidate] = []
    closest, why = None, f"{gpu.name} ({offering.id}): no tensor × pipeline layout of the model on it"
    for plan in _serving_plans(job, offering, gpu):
        if found and plan.parallelism.pipeline > found[-1].plan.parallelism.pipeline:
            break  # pipeline stages add latency and buy nothing once a shallower layout fits
        est = job.search.served(plan)
        capacity = _capacity(job, plan, est, limits) if job.options.serving_target else int(_serves(est, limits))
        if not capacity:
            closest = est if closest is None or est.device_bytes < closest.device_bytes else closest
            continue
        batch = (
            _within_bounds(job, plan, gpu, capacity)
            if job.options.serving_target
            else plan.workload.inference.batch_size
        )
        if batch is None:
            lat = job.search.latency(_with_batch(plan, 1), gpu)
            why = (
                f"{gpu.name} ({offering.id}) ×{plan.hardware.count}: one sequence alone takes TTFT "
                f"{lat.ttft_s:.3g} s and TPOT {lat.tpot_s * 1000:.3g} ms, over the bounds"
            )
            continue
        chosen = _with_batch(plan, batch)
        found.append(_serving_candidate(job, offering, gpu, chosen, job.search.served(chosen)))
    if found or closest is None:
        return found, "" if found else why
    return [], (
        f"{gpu.name} ({offering.id}) ×{closest.plan.hardware.count}: needs "
        f"{format_bytes(closest.device_bytes)} per GPU, {format_bytes(limits.device)} allowed"
    )


def _serving_paid(offering: Offering, n: int, replicas: int) -> int:
    """GPUs paid for `replicas` replicas of `n` GPUs: as many replicas to an instance as it holds (they need no
    network between them), whole instances each; a replica wider than an instance rents its own."""
    g = offering.gpus_per_instance
    if n > g:
        return replicas * offering.paid_gpus(n)
    return -(-replicas // (g // n)) * g


def _serving_candidate(job: _Job, offering: Offering, gpu: Gpu, plan: Plan, est: Estimate) -> Candidate:
    lat, n, par = job.search.latency(plan, gpu), plan.hardware.count, plan.parallelism
    o = job.options
    replicas = max(
        1,
        math.ceil((o.requests_per_s or 0) / lat.requests_per_s),
        math.ceil((o.output_tokens_per_s or 0) / lat.output_tokens_per_s),
    )
    paid = _serving_paid(offering, n, replicas)
    price, usd = _price(offering, job.options)
    per_hour = None if usd is None else usd * paid
    tokens_per_s = replicas * lat.output_tokens_per_s
    hours = SERVING_TOKENS / tokens_per_s / 3600
    batch = plan.workload.inference.batch_size
    layout = f"TP {par.tensor}" + (f" × PP {par.pipeline}" if par.pipeline > 1 else "") if n > 1 else "one GPU"
    strategy = f"{layout}, {plan.precision.weights} weights, batch {batch:,}"
    why = (
        f"{replicas:,} × {n} × {gpu.name} ({offering.provider}, {offering.instance}), {strategy}: "
        f"{format_bytes(est.device_bytes)} per GPU; TTFT {lat.ttft_s:.3g} s, TPOT {lat.tpot_s * 1000:.3g} ms, "
        f"{lat.requests_per_s:,.3g} requests/s and {lat.output_tokens_per_s:,.0f} output tokens/s per replica"
    )
    return Candidate(
        offering=offering,
        gpu=gpu,
        count=n,
        plan=plan,
        device_bytes=est.device_bytes,
        host_bytes=est.host_bytes,
        price=price,
        usd_per_gpu_hour=usd,
        usd_per_hour=per_hour,
        job_hours=hours,
        job_usd=None if per_hour is None else per_hour * hours,
        tokens_per_s_per_gpu=tokens_per_s / (replicas * n),
        strategy=strategy,
        why=why,
        meets_deadline=True,
        paid_gpus=paid,
        replicas=replicas,
        ttft_s=lat.ttft_s,
        tpot_s=lat.tpot_s,
        catalog=job.search.catalog,
    )


# --- The whole catalog ----------------------------------------------------------------------------------------
def _check(plan: Plan, catalog: Catalog, options: SearchOptions) -> None:
    """The options' ids, each against the catalog, with the field it came in."""
    known = ", ".join(catalog)
    for key, gpu_id in [
        *(("prices", k) for k, _ in options.prices),
        *(("mfu", k) for k, _ in options.mfu_by_gpu),
        *(("gpus", k) for k in options.gpus),
    ]:
        if gpu_id not in catalog and not (key == "prices" and gpu_id in catalog.offerings):
            raise bad(key, gpu_id, f"is not a GPU (or, for a price, an offering) of the catalog; GPUs: {known}")
    if {"gpu", "offering"} & options.fixed:
        plan_gpu(catalog, plan.hardware.gpu, plan.hardware.offering, plan.hardware.count)
    if "count" in options.fixed and plan.total_gpus > options.max_gpus:
        raise bad(
            "max_gpus",
            options.max_gpus,
            f"is below the plan's own count ({plan.total_gpus:,}), which 'count' keeps",
        )


def _offerings(catalog: Catalog, gpu_id: str, plan: Plan, options: SearchOptions) -> list[Offering]:
    """The offerings of a GPU type searched: the plan's own where 'offering' is kept; else those of the asked
    provider classes, or, for a type the catalog offers no way to rent, its usual server unpriced."""
    own = plan.hardware.offering
    if "offering" in options.fixed:
        return [catalog.offerings[own] if own else generic_offering(catalog[gpu_id])]
    listed = catalog.offerings_of(gpu_id)
    if not listed:
        return [generic_offering(catalog[gpu_id])]
    return [o for o in listed if not options.provider_classes or o.provider_class in options.provider_classes]


def _job_tokens(plan: Plan) -> tuple[int, str]:
    if plan.workload.task == "inference":
        return SERVING_TOKENS, "serving: costs per million generated tokens"
    if plan.job_tokens:
        return plan.job_tokens, (
            "workload.train_tokens" if plan.workload.train_tokens else "workload.steps × global batch × sequence length"
        )
    return DEFAULT_JOB_TOKENS, f"default {DEFAULT_JOB_TOKENS:,} tokens: costs are per billion training tokens"


@dataclass(frozen=True)
class _Least:
    """What no strategy on an offering beats: the plan's FLOPs at its GPU's achievable matmul rate, whole
    instances paid."""

    meets: bool  # some count could finish within the deadline
    usd: float  # the least the job (or an hour of it, ranked per hour) could cost there
    hours: float  # the least time, on its largest cluster
    most: int  # GPUs of that cluster


def _least(job: _Job, offering: Offering, gpu: Gpu) -> _Least | None:
    """The offering's least cost and time (None: no price, or serving: searched whatever the best)."""
    usd = _price(offering, job.options)[1]
    counts = [n for n in _counts(offering, job.search.plan, job.options) if offering.refuses(n) is None]
    if usd is None or not counts or job.search.plan.workload.task == "inference":
        return None
    mfu, deadline = dict(job.options.mfu_by_gpu).get(gpu.id, job.options.mfu), job.options.deadline_hours
    floors = [(n, compute_floor_hours(job.search.plan, gpu, job.tokens, n, mfu)) for n in counts]
    meets = [(n, h) for n, h in floors if deadline is None or h <= deadline]
    per_hour = job.options.rank_by == "hour"
    return _Least(
        meets=bool(meets),
        usd=min(usd * offering.paid_gpus(n) * (1 if per_hour else h) for n, h in meets or floors),
        hours=floors[-1][1],
        most=counts[-1],
    )


def _outranked(least: _Least | None, best: Candidate | None, options: SearchOptions) -> str:
    """Why an offering cannot beat the best candidate found, or "" (it must be searched)."""
    if least is None or best is None or not best.meets_deadline or options.every_offering:
        return ""
    best_cost = best.usd_per_hour if options.rank_by == "hour" else best.job_usd
    if not least.meets:
        return (
            f"cannot finish within the deadline: even its largest cluster ({least.most:,} GPUs) at its full "
            f"matmul rate takes {format_hours(least.hours)}"
        )
    if best_cost is not None and least.usd > OUTRANKED_RATIO * best_cost:
        per = "an hour" if options.rank_by == "hour" else "for the job"
        return (
            f"at least ${least.usd:,.2f} {per} at its full matmul rate, over {OUTRANKED_RATIO:g} × the "
            f"recommendation's ${best_cost:,.2f}"
        )
    return ""


def _searched_offerings(job: _Job, gpu_ids: list[str]) -> list[tuple[str, Offering, Gpu, _Least | None]]:
    """Every offering to search with its GPU's view and least cost, likeliest winners first; a GPU type without
    tensor cores for the plan's dtype is left out (`_unsupported` says why)."""
    catalog, options = job.search.catalog, job.options
    rows = []
    for gpu_id in gpu_ids:
        if unsupported_compute(job.search.plan, catalog[gpu_id]):
            continue
        for offering in _offerings(catalog, gpu_id, job.search.plan, options):
            gpu = offering_view(catalog[gpu_id], offering)
            rows.append((gpu_id, offering, gpu, _least(job, offering, gpu)))
    return sorted(rows, key=lambda r: (1, False, 0.0) if r[3] is None else (0, not r[3].meets, r[3].usd))


def _search_all(job: _Job, gpu_ids: list[str]) -> tuple[list[Candidate], dict[str, list[tuple[RejectionKind, str]]]]:
    """Every offering's candidates, and per GPU type the reasons its offerings gave none."""
    rank = _rank_key(job.options, job.search.plan.workload.task == "inference")
    found: list[Candidate] = []
    reasons: dict[str, list[tuple[RejectionKind, str]]] = {g: [] for g in gpu_ids}
    best: Candidate | None = None
    for gpu_id, offering, gpu, least in _searched_offerings(job, gpu_ids):
        if time.perf_counter() > job.search.stop_at:
            reasons[gpu_id].append(("unsearched", f"the {job.options.budget_s:g} s budget ran out"))
            continue
        if why := _outranked(least, best, job.options):
            reasons[gpu_id].append(("outranked", f"{gpu.name} ({offering.id}): {why}"))
            continue
        try:
            more, why = (_serve_offering if job.search.plan.workload.task == "inference" else _train_offering)(
                job, offering, gpu
            )
        except OutOfTime:
            reasons[gpu_id].append(("unsearched", f"the {job.options.budget_s:g} s budget ran out"))
            continue
        found += more
        reasons[gpu_id] += [("unfit", why)] if why else []
        best = min([c for c in [best, *more] if c is not None], key=rank, default=None)
    return found, reasons


def _rejection(job: _Job, gpu_id: str, reasons: list[tuple[RejectionKind, str]]) -> Rejection:
    """A GPU type's one line: no tensor cores, else an offering's misfit (the one naming the memory first), else
    why it could not win, else the budget."""
    gpu = job.search.catalog[gpu_id]
    if why := unsupported_compute(job.search.plan, gpu):
        return Rejection(gpu=gpu, reason=why)
    for kind in ("unfit", "outranked", "unsearched"):
        lines = [r for k, r in reasons if k == kind]
        if lines and kind == "unsearched":
            return Rejection(gpu=gpu, kind=kind, reason=f"{gpu.name}: not searched ({lines[0]})")
        if lines:
            return Rejection(gpu=gpu, kind=kind, reason=min(lines, key=lambda r: ("needs" not in r, len(r))))
    return Rejection(gpu=gpu, reason=f"{gpu.name}: no offering of the provider classes asked")


def model_deadline_hours(plan: Plan, options: SearchOptions) -> float | None:
    """The deadline the time model's job time must meet: the one asked, or with deadline_at slow_end that over the
    slow end of the time band of the plan's class, so that 8 in 10 published runs of its kind would have met it
    (not for serving, nor under an MFU override: the band is the time model's record)."""
    deadline = options.deadline_hours
    if (
        deadline is None
        or options.deadline_at == "model"
        or options.mfu is not None
        or plan.workload.task == "inference"
    ):
        return deadline
    likely = likely_seconds(plan, 3600.0)  # one hour of the model's time, at the band's ends
    return deadline if likely is None else deadline * 3600.0 / likely[1]


def recommend(
    plan: Plan, catalog: Mapping[str, Gpu] | None = None, options: SearchOptions = SearchOptions()
) -> Recommendation:
    """Every offering's cost-time frontier for the plan, ranked: within the deadline the cheapest first (the
    recommendation), then the rest fastest first; each GPU type without a candidate says why."""
    start = time.perf_counter()
    catalog = load_catalog() if catalog is None else catalog if isinstance(catalog, Catalog) else Catalog(catalog)
    _check(plan, catalog, options)
    tokens, source = _job_tokens(plan)
    stop_at = start + options.budget_s if options.budget_s is not None else float("inf")
    held = model_deadline_hours(plan, options)
    rollout = RolloutSearch(plan, catalog, options.fixed, stop_at) if searched(plan) else None
    search = rollout.search if rollout else StrategySearch(plan, catalog, options.fixed, stop_at)
    job = _Job(search, tokens, replace(options, deadline_hours=held), rollout)
    gpu_ids = [plan.hardware.gpu] if {"gpu", "offering"} & options.fixed else list(options.gpus or catalog)
    candidates, reasons = _search_all(job, gpu_ids)
    typed = {c.gpu.id for c in candidates}
    rejected = [_rejection(job, g, reasons[g]) for g in gpu_ids if g not in typed]
    ranked = sorted(candidates, key=_rank_key(options, plan.workload.task == "inference"))
    base = replace(plan, techniques=replace(plan.techniques, activation_checkpointing="none"))
    cut = any(r.kind == "unsearched" for r in rejected)
    return Recommendation(
        candidates=tuple(ranked),
        rejected=tuple(rejected),
        options=options,
        job_tokens=tokens,
        job_tokens_source=source,
        flops_per_token=flops_per_token(base) / (3 if plan.workload.task == "inference" else 1),
        tie_band=time_accuracy().pair_median_pct / 100,
        price_dates=catalog.price_dates(),
        cut_after_s=round(time.perf_counter() - start, 2) if cut else None,
        model_deadline_hours=held,
    )


def _rank_key(options: SearchOptions, serving: bool):
    metric = _metric(options, serving)

    def key(c: Candidate) -> tuple:
        money = metric(c)
        order = (money if money is not None else 0.0, c.job_hours) if c.meets_deadline else (c.job_hours, 0.0)
        return (not c.meets_deadline, money is None, *order, c.gpu.id, c.offering.id, c.count)

    return key


# --- Inverse questions ---------------------------------------------------------------------------------------
def _plan_limits(plan: Plan, catalog: Mapping[str, Gpu], headroom: float) -> Limits:
    """The plan's own GPU less the headroom, and its host RAM (the plan's figure, else its offering's)."""
    gpu, host = plan_gpu(catalog, plan.hardware.gpu, plan.hardware.offering, plan.hardware.count)
    own = plan.hardware.host_memory_gib_per_gpu
    return Limits(int(gpu.usable_bytes * (1 - headroom)), host if own is None else from_gib(own))


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


def max_micro_batch(
    plan: Plan, catalog: Mapping[str, Gpu] | None = None, *, headroom: float = DEFAULT_HEADROOM
) -> int | None:
    """The largest micro-batch that fits the plan's GPU and strategy (gradient accumulation steps kept)."""
    catalog = catalog if catalog is not None else load_catalog()
    limits = _plan_limits(plan, catalog, headroom)
    accum, data = plan.micro_batches_per_step, plan.parallelism.data

    def fits(mb: int) -> bool:
        wl = replace(plan.workload, micro_batch_size=mb, global_batch_size=mb * data * accum)
        return limits.fits(estimate(replace(plan, workload=wl), catalog, detail=False))

    # a GRPO step (a PPO rollout) trains whole groups of num_generations completions
    groups = plan.workload.rl.num_generations if plan.workload.objective in RL_OBJECTIVES else 1
    return _largest(fits, groups // math.gcd(groups, data * accum), 1_048_576)


def max_sequence_length(
    plan: Plan, catalog: Mapping[str, Gpu] | None = None, *, headroom: float = DEFAULT_HEADROOM
) -> int | None:
    """The longest sequence that fits the plan's GPU and strategy, in steps the parallelism can split."""
    catalog = catalog if catalog is not None else load_catalog()
    limits, par = _plan_limits(plan, catalog, headroom), plan.parallelism
    step = par.context * (par.tensor if par.sequence_parallel else 1)

    # a GRPO or PPO sequence is its prompt and a completion of workload.rl.completion_length: the prompt grows
    fixed = plan.workload.rl.completion_length if plan.workload.objective in RL_OBJECTIVES else 0

    def fits(s: int) -> bool:
        p = replace(plan, workload=replace(plan.workload, sequence_length=fixed + s))
        return limits.fits(estimate(p, catalog, detail=False))

    longest = _largest(fits, step, 16_777_216 - fixed)
    return None if longest is None else fixed + longest


def _inference_limit(plan: Plan, catalog: Mapping[str, Gpu] | None, headroom: float, key: str, high: int) -> int | None:
    """The largest value of an inference key (workload.inference.`key`) that fits the plan's GPUs."""
    catalog = catalog if catalog is not None else load_catalog()
    limits, inf = _plan_limits(plan, catalog, headroom), plan.workload.inference

    def fits(n: int) -> bool:
        changed: dict[str, Any] = {key: n}  # the key is a parameter: each of its fields is an int
        p = replace(plan, workload=replace(plan.workload, inference=replace(inf, **changed)))
        return _serves(estimate(p, catalog, detail=False), limits)

    return _largest(fits, 1, high)


def max_batch_size(
    plan: Plan, catalog: Mapping[str, Gpu] | None = None, *, headroom: float = DEFAULT_HEADROOM
) -> int | None:
    """Inference: the most sequences of the plan's prompt and output length generated together that fit."""
    return _inference_limit(plan, catalog, headroom, "batch_size", MAX_BATCH)


def max_prompt_tokens(
    plan: Plan, catalog: Mapping[str, Gpu] | None = None, *, headroom: float = DEFAULT_HEADROOM
) -> int | None:
    """Inference: the longest prompt that fits with the plan's batch and output tokens, within the model's context
    window where it is known."""
    longest = min(MAX_SEQUENCE, plan.model.context_window or MAX_SEQUENCE)
    return _inference_limit(plan, catalog, headroom, "prompt_tokens", longest - plan.workload.inference.output_tokens)


def min_gpus(
    plan: Plan,
    catalog: Mapping[str, Gpu] | None = None,
    *,
    headroom: float = DEFAULT_HEADROOM,
    fixed: frozenset[str] | set[str] = frozenset(),
    budget_s: float | None = None,
) -> tuple[Candidate | None, bool]:
    """(the fewest GPUs of the plan's GPU type, on its offering (its usual server where it names none), that fit,
    with the fastest strategy at that count; whether `budget_s` cut the search: fewer might fit)."""
    rec = recommend(
        plan,
        catalog,
        SearchOptions(
            headroom=headroom, deadline_hours=None, budget_s=budget_s, fixed=frozenset(fixed) | {"gpu", "offering"}
        ),
    )
    return min(rec.candidates, key=lambda c: c.count, default=None), rec.cut_after_s is not None
