"""torchao's on-GPU quantization replayed through the caching allocator: hand-worked cases."""

from __future__ import annotations

import pytest

from planner.codec import plan_from_dict
from planner.errors import PlanError
from planner.memory import estimate
from planner.memory.inference import weight_bytes
from planner.memory.quantize_load import _replayed, held_beyond_live
from planner.units import KiB, MiB

# one layer of one Linear 1,024 → 8,192 (16 MiB in bf16), hidden 1,024, a 256-token embedding, no output head
ONE = ((1024, 8192),)


def test_the_int8_weight_keeps_the_temporary_segment_it_was_split_off():
    """Load: the 512 KiB embedding, three 2 KiB norms and int8's 80 KiB scales and zero points share one 2 MiB
    small-pool segment; the weight W is a 16 MiB segment. int8 quantize_: t1 and t2 take new 16 MiB segments A
    and B; t3 reuses A, t4 reuses B; the int8 weight (8 MiB) is split off A, the best fit; then t4 and W are
    freed. Reserved: 2 + 3 × 16 MiB, of which live: 8 MiB + the small tensors. A graph capture's empty_cache gives
    back B and W's segments, which hold nothing, and keeps A whole for its 8 MiB."""
    live = 8 * MiB + 512 * KiB + 3 * 2 * KiB + 8192 * (2 + 8)
    assert _replayed(ONE, 1, 1024, 256, False, "int8", 128, 2, captured=True) == 2 * MiB + 16 * MiB - live
    assert _replayed(ONE, 1, 1024, 256, False, "int8", 128, 2, captured=False) == 2 * MiB + 48 * MiB - live


def test_int4_packs_into_a_quarter_and_keeps_its_segment():
    """int4: the padded copy and t1 take new 16 MiB segments, t2 a third; t3 reuses t1's, t4 t2's; the int32
    copy (32 MiB) takes a fourth; the two half-column int32 tensors (16 MiB each) take t3's and t4's segments
    (equal sizes: the lower address first); the uint8 (4 MiB) is split off the first once freed, and the packed
    weight (4 MiB) off its 12 MiB remainder, the best fit. Everything else is freed: that one 16 MiB segment
    stays for the packed weight."""
    group_bytes = 1024 // 128 * 8192 * 2 * 2  # a bf16 scale and zero per group of 128 of each row: 256 KiB
    live = 4 * MiB + group_bytes + 512 * KiB + 3 * 2 * KiB
    assert _replayed(ONE, 1, 1024, 256, False, "int4", 128, 2, captured=True) == 2 * MiB + 16 * MiB - live


def _torchao(weights: str, compile: bool = True) -> dict:
    return {"framework": "gpt_fast", "model": {"preset": "llama-3.1-8b"}, "techniques": {"compile": compile},
            "precision": {"weights": weights},
            "workload": {"task": "inference", "inference": {"prompt_tokens": 6, "output_tokens": 200}}}


def test_torchao_quantizes_the_output_head_too():
    """Llama 3.1 8B's head, 128,256 × 4,096, is an nn.Linear that quantize_ converts: int8, 1 B a weight and a
    4 B scale a row, instead of 2 B a weight."""
    on = plan_from_dict(_torchao("int8"))
    off = plan_from_dict({**_torchao("int8"), "workload": {"task": "inference", "inference": {
        "prompt_tokens": 6, "output_tokens": 200, "quantize_on_load": False}}})
    assert on.workload.inference.quantize_on_load and not off.workload.inference.quantize_on_load
    head = 128_256 * 4096
    assert weight_bytes(off)[0] - weight_bytes(on)[0] == head * 2 - (head + 4 * 128_256)


def test_the_held_segments_are_a_reserved_item_of_the_estimate():
    est = estimate(plan_from_dict(_torchao("int8")))
    held = {i.name: i for i in est.items}["quantized_load"]
    assert held.level == "reserved" and held.bytes == held_beyond_live(est.plan) > 0
    reserve = {i.name: i.bytes for i in est.items}["allocator_reserve"]
    assert est.peak_reserved_bytes == est.peak_allocated_bytes + reserve + held.bytes
    # without the graph capture nothing is given back: every freed 16-bit weight and temporary stays cached
    eager = estimate(plan_from_dict(_torchao("int8", compile=False)))
    assert {i.name: i.bytes for i in eager.items}["quantized_load"] > 8 * 1024 * MiB > held.bytes


def test_bf16_weights_are_not_quantized_on_load():
    est = estimate(plan_from_dict(_torchao("bf16")))
    assert not est.plan.workload.inference.quantize_on_load and "quantized_load" not in {i.name for i in est.items}


def test_torchao_int4_prefill_does_not_dequantize():
    """tinygemm's _weight_int4pack_mm reads the packed weight: no 16-bit copy of a matrix during prefill, which
    int8 weight-only makes (w_vals_int8_t.to(input.dtype)), the head (1 GiB) the largest."""
    def prefill(weights: str) -> int:
        est = estimate(plan_from_dict(_torchao(weights)))
        return next(i.bytes for i in est.stages[0].phases[0].items if i.name == "activations")
    assert prefill("int8") - prefill("int4") == 128_256 * 4096 * 2


def test_quantize_on_load_applies_to_what_torchao_quantizes():
    with pytest.raises(PlanError) as err:
        plan_from_dict({"model": {"preset": "llama-3.1-8b"}, "precision": {"weights": "nf4"},
                        "workload": {"task": "inference", "inference": {"quantize_on_load": True}}})
    assert str(err.value) == ("workload.inference.quantize_on_load: True applies to served fp8, int8, int4 weights "
                              "(torchao quantize_); the plan has task inference, weights nf4")
