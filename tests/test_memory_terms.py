"""planner/memory/terms.py: a term's bytes and its formula come from the same values.

A golden worked by hand for each kind of term, then every item of a grid of plans: the formula a product
renders, read back as numbers, multiplies to the item's bytes."""

import re

import pytest
from conftest import TINY

from planner.memory import estimate
from planner.memory.terms import Described, Factor, Product, Sharded, Size, Sum, item
from planner.plan.codec import plan_from_dict
from planner.units import MiB


def test_product_golden():
    t = Product((Factor(1_000, "params"), Factor(2, "B (bf16)")))
    assert (t.bytes, t.formula()) == (2_000, "1,000 params × 2 B (bf16)")
    casts = Product(
        (
            Factor(300, "matmul params"),
            Factor(2, "B"),
            Factor(1.5, spec="g"),
            Factor(2 / 3, "(layers not checkpointed)", ".3g"),
        )
    )
    assert casts.bytes == 600  # 300 × 2 × 1.5 × 2/3
    assert casts.formula() == "300 matmul params × 2 B × 1.5 × 0.667 (layers not checkpointed)"
    nccl = Product((Factor(2, "communicators (data, tensor)"), Factor(Size(512 * MiB), "MiB.0")))
    assert (nccl.bytes, nccl.formula()) == (1024 * MiB, "2 communicators (data, tensor) × 512 MiB")


def test_sharded_golden():
    # 1,000 params × 4 B = 4,000 B, of which 1,200 B are routed experts: the rest ÷ 4 ranks, experts ÷ 2 ranks
    t = Sharded(Product((Factor(1_000, "params"), Factor(4, "B"))), 4, 1_200, 2, " ÷ 4 (ZeRO-3)")
    assert (t.bytes, t.formula()) == (700 + 600, "1,000 params × 4 B ÷ 4 (ZeRO-3)")
    odd = Sharded(Product((Factor(7, "params"), Factor(1, "B"))), 2, 0, 1, " ÷ 2")
    assert odd.bytes == 4  # each share rounded up
    alone = Sharded(Product((Factor(7, "params"), Factor(1, "B"))), 1, 0, 1, " ÷ 1")
    assert alone.formula() == "7 params × 1 B"  # no split, no note


def test_sum_described_and_size_golden():
    t = Sum(
        (
            Product((Factor(10, "params"), Factor(2, "states"), Factor(1, "B"))),
            Described(8, "fp32 absmax per {:,}", (2048,)),
        ),
        ", in CUDA managed memory",
    )
    assert (t.bytes, t.formula()) == (28, "10 params × 2 states × 1 B + fp32 absmax per 2,048, in CUDA managed memory")
    assert (
        Described(0, "{} on the host; {:MiB.1}", (Size(3 * 2**30), Size(MiB // 2))).formula()
        == "3.00 GiB on the host; 0.5 MiB"
    )


def test_item_renders_only_with_detail():
    t = Product((Factor(3, "params"), Factor(4, "B")))
    assert item("w", "W", t, "n", True).formula == "3 params × 4 B"
    fast = item("w", "W", t, "n", False)
    assert (fast.bytes, fast.formula, fast.term) == (12, "", t)


PLANS = {
    "pure-bf16": {"precision": {"compute": "bf16", "master_weights": "none"}},
    "autocast-ddp": {
        "parallelism": {"data": 2},
        "workload": {"sequence_length": 32, "micro_batch_size": 2, "global_batch_size": 8},
    },
    "zero1-tp2": {"parallelism": {"data": 4, "tensor": 2, "zero_stage": 1}},
    "zero3-offload": {"parallelism": {"data": 4, "zero_stage": 3}, "techniques": {"offload": "optimizer"}},
    "lora-zero3": {
        "workload": {"task": "lora", "sequence_length": 32, "micro_batch_size": 2},
        "parallelism": {"data": 2, "zero_stage": 3},
    },
    "muon-pp2": {
        "precision": {"optimizer": "muon"},
        "parallelism": {"pipeline": 2},
        "workload": {"sequence_length": 32, "micro_batch_size": 1, "global_batch_size": 4},
    },
    "adam8bit": {"precision": {"optimizer": "paged_adamw_8bit"}},
    "inference-tp2": {"workload": {"task": "inference"}, "parallelism": {"tensor": 2}},
}
_UNITS = {"MiB": MiB, "GiB": 2**30}


def _product_of(text: str) -> float:
    """The product of the leading number of each ' × ' piece of a rendered product (after any '= ')."""
    value = 1.0
    for piece in text.split(" = ")[-1].split(" × "):
        number, unit = re.match(r"([\d,]+(?:\.\d+)?)\s*(\w*)", piece).groups()
        value *= float(number.replace(",", "")) * _UNITS.get(unit, 1)
    return value


def _products(term):
    """Every product inside a term (a sharded one before its split)."""
    if isinstance(term, Product):
        yield term
    elif isinstance(term, Sharded):
        yield from _products(term.term)
    elif isinstance(term, Sum):
        for t in term.terms:
            yield from _products(t)


@pytest.mark.parametrize("name", PLANS)
def test_every_items_formula_multiplies_to_its_bytes(name):
    plan = plan_from_dict({"model": TINY, "workload": {"sequence_length": 32, "micro_batch_size": 2}, **PLANS[name]})
    est, fast = estimate(plan), estimate(plan, detail=False)
    checked = 0
    for it in est.items + tuple(i for stage in est.stages for ph in stage.phases for i in ph.items):
        assert it.term is not None and it.bytes == it.term.bytes and it.formula == it.term.formula()
        for product in _products(it.term):
            text = product.formula()[len(product.prefix) :]
            text = text[: len(text) - len(product.suffix)] if product.suffix else text
            # the factors the text shows, multiplied, are the bytes (fractions shown to 3 digits)
            assert _product_of(text) == pytest.approx(product.bytes, rel=2e-3, abs=1), (it.name, it.formula)
            checked += 1
    assert checked >= 4
    assert [i.bytes for i in fast.items] == [i.bytes for i in est.items]
    assert all(i.formula == "" for i in fast.items)
