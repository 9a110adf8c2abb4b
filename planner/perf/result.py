"""What the time model returns: a step's seconds, item by item, each with its formula and note."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["compute", "memory", "communication", "bubble", "host", "rollout"]
# what a step is bound by, from its largest kind of time
BOUND_OF_KIND = {
    "compute": "compute",
    "memory": "memory bandwidth",
    "communication": "communication",
    "bubble": "pipeline bubble",
    "host": "host transfers",
    "rollout": "rollout generation",
}
OVER = {"link": "the fast interconnect (NVLink, xGMI)", "pcie": "PCIe", "network": "the network"}


@dataclass(frozen=True, kw_only=True)
class Seconds:
    """`amount` at `rate`: the seconds and the formula text come from the same two numbers."""

    amount: float
    unit: str
    rate: float
    rate_unit: str

    @property
    def seconds(self) -> float:
        return self.amount / self.rate if self.amount else 0.0

    @property
    def text(self) -> str:
        return f"{self.amount:,.4g} {self.unit} / {self.rate:,.4g} {self.rate_unit}"


@dataclass(frozen=True, kw_only=True)
class TimeItem:
    """One term of a step: `seconds` on its critical path; `hidden_s` more that overlaps other work."""

    name: str
    label: str
    kind: Kind
    seconds: float
    hidden_s: float
    formula: str
    note: str
    over: str = ""  # communication: the link it runs over (link, pcie, network)

    @property
    def total_s(self) -> float:
        return self.seconds + self.hidden_s


@dataclass(frozen=True, kw_only=True)
class StepTime:
    items: tuple[TimeItem, ...]
    step_time_s: float  # one optimizer step (training) or one batch of generation (serving)
    tokens_per_step: int  # all GPUs together
    gpus: int
    tokens_per_s_per_gpu: float
    model_flops_per_s_per_gpu: float
    mfu: float  # model FLOPs per second per GPU over the compute dtype's dense peak (rates.mfu_reference)
    bound: str  # compute, memory bandwidth, communication, pipeline bubble or host transfers
    efficiency_note: str  # the matmul rate taken, and its source

    @property
    def work_s(self) -> float:
        """Seconds of compute and memory work: what no layout of the same work avoids."""
        return sum(i.seconds for i in self.items if i.kind in ("compute", "memory"))


def step_of(
    items: list[TimeItem],
    *,
    tokens: int,
    gpus: int,
    model_flops_per_token: float,
    peak_flops: float,
    efficiency_note: str,
) -> StepTime:
    """Sum the items into a step and its rates; the bound is the kind that takes the most time."""
    total = sum(i.seconds for i in items)
    by_kind: dict[str, float] = {}
    for i in items:
        by_kind[i.kind] = by_kind.get(i.kind, 0.0) + i.seconds
    per_gpu = tokens / gpus / total if total else 0.0
    flops = per_gpu * model_flops_per_token
    return StepTime(
        items=tuple(items),
        step_time_s=total,
        tokens_per_step=tokens,
        gpus=gpus,
        tokens_per_s_per_gpu=per_gpu,
        model_flops_per_s_per_gpu=flops,
        mfu=flops / peak_flops,
        bound=_bound(items, by_kind),
        efficiency_note=efficiency_note,
    )


def _bound(items: list[TimeItem], by_kind: dict[str, float]) -> str:
    """The kind of time that takes the most; for communication, the link its largest item runs over."""
    if not by_kind:
        return "compute"
    kind = max(by_kind, key=lambda k: by_kind[k])
    if kind != "communication":
        return BOUND_OF_KIND[kind]
    largest = max((i for i in items if i.kind == "communication"), key=lambda i: i.seconds)
    return f"communication over {OVER[largest.over]}" if largest.over in OVER else "communication"
