import dataclasses
import math
import typing

import pytest
from conftest import TINY
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import PlanError
from planner.plan.codec import LEAVES, plan_from_dict
from planner.plan.config import NESTED, SECTIONS, Plan
from planner.plan.models import MAX_LAYERS, Model
from planner.plan.validate import Rule, between, check_mapping, rules

PLAN_CLASSES = (Plan, Model, *SECTIONS.values(), *NESTED.values())


def test_every_plan_field_declares_its_rule():
    for cls in PLAN_CLASSES:
        hints = typing.get_type_hints(cls)
        for name, rule in rules(cls).items():
            if rule is None:
                assert dataclasses.is_dataclass(hints[name]), (cls, name)  # a nested section
            elif rule.kind in ("int", "float"):
                assert rule.lo <= rule.hi, (cls, name)
            elif rule.kind == "text":
                # names and ids stay short; a layer pattern has one character per layer
                assert 0 < rule.max_len <= (MAX_LAYERS if name == "layer_pattern" else 200), (cls, name)


def test_a_number_without_bounds_is_a_development_error():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Undeclared:
        width: int = 1

    with pytest.raises(TypeError, match=r"Undeclared.width declares no bounds: give it metadata=between\(lo, hi\)"):
        rules(Undeclared)


def test_declared_bounds_are_the_ones_checked():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Box:
        width: int = dataclasses.field(default=1, metadata=between(1, 9))

    assert rules(Box)["width"] == Rule(kind="int", optional=False, lo=1, hi=9)
    with pytest.raises(PlanError) as err:
        check_mapping({"width": 10}, Box, "box")
    assert str(err.value) == "box.width: 10 is out of range; must be from 1 to 9"


def test_a_raw_document_is_checked_before_the_framework_reads_it():
    with pytest.raises(PlanError) as err:
        plan_from_dict(
            {
                "model": TINY,
                "framework": "torchtune",
                "parallelism": {"tensor": "x" * 16, "pipeline": 10**9, "context": 10**9},
            }
        )
    assert str(err.value) == "parallelism.tensor: 'xxxxxxxxxxxxxxxx' must be an integer from 1 to 65,536"


def test_a_bool_is_not_a_choice_of_numbers():
    with pytest.raises(PlanError) as err:
        plan_from_dict({"model": TINY, "parallelism": {"zero_stage": True}})
    assert str(err.value) == "parallelism.zero_stage: True is not one of: 0, 1, 2, 3"


_WRONG = st.sampled_from([[1, 2], {"a": 1}, 10**40, -(10**40), math.nan, math.inf, "x" * 10_000, True, 3.5])
_SKIP = {"name", "preset", "params"}  # text fields take any short text; params is its own parser


@settings(max_examples=300, deadline=None)
@given(leaf=st.sampled_from(sorted(set(LEAVES) - _SKIP)), value=_WRONG)
def test_every_leaf_refuses_a_wrong_value_with_its_own_name(leaf, value):
    """A list, mapping, huge or special number, long text or wrong type in any key is refused naming that key
    (or the value is one the field accepts: a bool where a bool belongs, a float where a float does)."""
    data: dict = {"model": dict(TINY)}
    node = data
    path = LEAVES[leaf]
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value
    field = ".".join(path)
    try:
        plan_from_dict(data)
    except PlanError as err:
        if str(err).startswith(field + ":"):
            return
        # an accepted value may break a rule between keys, which names one of them
        assert isinstance(value, (bool, float)) and not math.isnan(value) and not math.isinf(value), (field, str(err))
    else:
        assert isinstance(value, (bool, float)), (field, value)


def test_a_resolved_field_takes_none_and_is_resolved_at_construction():
    # declared `int` (validate.resolved): None means "the default", which __post_init__ works out
    assert rules(Model)["num_kv_heads"].optional
    m = Model(num_layers=2, hidden_size=64, num_attention_heads=8, intermediate_size=128, vocab_size=100)
    assert (m.num_kv_heads, m.head_dim) == (8, 8)


def test_required_reads_a_conditional_key_or_says_it_is_unset():
    dense = Model(num_layers=2, hidden_size=64, num_attention_heads=8, intermediate_size=128, vocab_size=100)
    moe = dataclasses.replace(dense, num_experts=4, experts_per_token=2)
    assert moe.expert_intermediate_size == 128  # resolved to intermediate_size
    with pytest.raises(ValueError, match="model.moe_intermediate_size is unset"):
        _ = dense.expert_intermediate_size
