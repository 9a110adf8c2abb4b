"""torchao's on-GPU quantization replayed through the caching allocator: hand-worked cases."""

from __future__ import annotations

import pytest

from planner.errors import PlanError
from planner.memory import estimate
from planner.memory.inference import weight_bytes
from planner.memory.quantize_load import _partitioned, _replayed, held_beyond_live, zero3_whole_load_reserved
from planner.plan.codec import plan_from_dict
from planner.plan.dtypes import tinygemm_int4_bytes
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
    return {
        "framework": "gpt_fast",
        "model": {"preset": "llama-3.1-8b"},
        "techniques": {"compile": compile},
        "precision": {"weights": weights},
        "workload": {"task": "inference", "inference": {"prompt_tokens": 6, "output_tokens": 200}},
    }


def test_torchao_quantizes_the_output_head_too():
    """Llama 3.1 8B's head, 128,256 × 4,096, is an nn.Linear that quantize_ converts: int8, 1 B a weight and a
    4 B scale a row, instead of 2 B a weight."""
    on = plan_from_dict(_torchao("int8"))
    off = plan_from_dict(
        {
            **_torchao("int8"),
            "workload": {
                "task": "inference",
                "inference": {"prompt_tokens": 6, "output_tokens": 200, "quantize_on_load": False},
            },
        }
    )
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
        plan_from_dict(
            {
                "model": {"preset": "llama-3.1-8b"},
                "precision": {"weights": "nf4"},
                "workload": {"task": "inference", "inference": {"quantize_on_load": True}},
            }
        )
    assert str(err.value) == (
        "workload.inference.quantize_on_load: True applies to served fp8, int8, int4 weights "
        "(torchao quantize_); the plan has task inference, weights nf4"
    )


def test_float8_dynamic_quantization_computes_in_float32():
    """float8_dynamic_activation_float8_weight asks for float32 scales: the 16 MiB bf16 weight times its scale
    makes two 32 MiB float32 temporaries (new segments A and B); the fp8 weight (8 MiB) is split off A once t1 is
    freed, the 32 KiB of row scales go to the small pool; t2 and W are freed. The capture's empty_cache gives back
    B and W's segments and keeps A whole."""
    live = 8 * MiB + 512 * KiB + 3 * 2 * KiB + 8192 * 4
    assert _replayed(ONE, 1, 1024, 256, False, "fp8_fp32_scale", 128, 2, captured=True) == 2 * MiB + 32 * MiB - live


def test_torchao_int4_weights_take_the_tinygemm_layout():
    """Llama-2-7B's down projection, 11,008 → 4,096: padded to 11,264 inputs (a multiple of 1,024), 4 bits a
    weight, and a bf16 scale and zero per group of 64 of each row: 23,068,672 + 176 × 4,096 × 4 bytes."""
    assert tinygemm_int4_bytes(11_008, 4096, 64, 2) == 11_264 * 4096 // 2 + 176 * 4096 * 4 == 25_952_256
    # Llama 3.1 8B needs no padding: per layer q, k, v, o, gate, up, down and the head, 4.5 bits + 64 bits / 64
    plan = plan_from_dict({**_torchao("int4"), "precision": {"weights": "int4", "quant_group_size": 64}})
    projections = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14_336) + 4096 * 128_256
    assert weight_bytes(plan)[0] == projections // 2 + projections // 64 * 4 + (128_256 * 4096 + 65 * 4096) * 2


def _prefill(plan: dict) -> int:
    est = estimate(plan_from_dict(plan))
    return next(i.bytes for i in est.stages[0].phases[0].items if i.name == "activations")


def test_torchao_fp8_weight_only_prefill_holds_two_copies_of_the_head():
    """float8_weight_only's F.linear(x, weight.dequantize()): input.to(bf16), then × scale, both alive; int8
    weight-only casts once. The head, 128,256 × 4,096 in bf16 (1 GiB), is the largest matrix."""
    assert _prefill(_torchao("fp8")) - _prefill(_torchao("int8")) == 128_256 * 4096 * 2


def test_dynamic_activation_quantization_dequantizes_nothing():
    """int8_dynamic_activation_int8_weight multiplies int8 by int8 (int_scaled_matmul): its prefill holds no
    16-bit matrix, as int4's tinygemm."""
    dynamic = _torchao("int8")
    dynamic["workload"]["inference"]["dynamic_activation_quant"] = True
    assert _prefill(dynamic) == _prefill(_torchao("int4")) == _prefill(_torchao("int8")) - 128_256 * 4096 * 2
    with pytest.raises(PlanError) as err:
        plan_from_dict(
            {**_torchao("int4"), "workload": {"task": "inference", "inference": {"dynamic_activation_quant": True}}}
        )
    assert str(err.value).startswith("workload.inference.dynamic_activation_quant: True applies to int8 or fp8")


def test_zero3_partitions_of_a_whole_loaded_model_pin_its_segments():
    """One layer of one Linear 1,024 → 8,192 in nf4 on 2 ranks. Load: the 512 KiB embedding, the fp32 absmax
    (512 KiB), the 8-bit absmax (128 KiB) and three 2 KiB norms share a 2 MiB small-pool segment; the bf16 weight
    W takes a 16 MiB segment, the packed 4 MiB a 20 MiB one (a request under 10 MiB); W is freed. Partitioning:
    the 256 KiB embedding half fits the absmax hole; the 2 MiB packed half is split off W (the free 16 MiB blocks
    tie, W's address is lower); the packed whole is freed. empty_cache gives back the packed segment, empty now,
    and keeps W's 16 MiB for the 2 MiB partition: 2 + 16 MiB reserved."""
    assert _partitioned(ONE, 1, 1024, 256, False, 64, True, 2, 2) == 18 * MiB


def _zero3_qlora(framework: str) -> dict:
    return {
        "framework": framework,
        "model": {"preset": "llama-2-70b"},
        "hardware": {"gpu": "a100-40gb", "count": 2},
        "parallelism": {"data": 2, "zero_stage": 3},
        "techniques": {"activation_checkpointing": "full"},
        "workload": {"task": "qlora", "sequence_length": 2048, "micro_batch_size": 2},
    }


def test_the_whole_load_is_a_floor_of_the_zero3_qlora_reserve():
    """DeepSpeed ZeRO-3 QLoRA on two ranks: the replayed load leaves more reserved than the step's own peak;
    the item is the difference, and the reserved peak is the load's. FSDP loads no whole model on the GPU."""
    est = estimate(plan_from_dict(_zero3_qlora("deepspeed")))
    items = {i.name: i for i in est.items}
    floor = zero3_whole_load_reserved(est.plan)
    assert items["zero3_load"].level == "reserved" and floor > 30 * 1024 * MiB
    assert (
        est.peak_reserved_bytes
        == floor
        == (est.peak_allocated_bytes + items["zero3_load"].bytes + items["allocator_reserve"].bytes)
    )
    fsdp = estimate(plan_from_dict(_zero3_qlora("accelerate_fsdp")))
    assert zero3_whole_load_reserved(fsdp.plan) == 0 and "zero3_load" not in {i.name for i in fsdp.items}
