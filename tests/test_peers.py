"""bench/peers.py: every expressed row goes through every peer; statistics cover only the rows a tool covers; each
peer formula is pinned by a hand-worked case; the planner's median error beats every peer's on shared rows."""

import statistics

import accuracy
import peers
import pytest


@pytest.fixture(scope="module")
def rows():
    return peers.run()


def test_runs_every_expressed_row_through_every_tool(rows):
    expressed, _ = accuracy.run()
    assert [r["row"] for r in rows] == [r["row"] for r in expressed]
    for mine, theirs in zip(rows, expressed, strict=True):
        assert set(mine["tools"]) == set(peers.TOOLS)
        assert mine["measured_gib"] == theirs["measured_gib"] and mine["stat"] == theirs["stat"]
        assert mine["tools"][peers.PLANNER]["gib"] == pytest.approx(theirs["predicted_gib"])
        for tool in mine["tools"].values():
            if tool["gib"] is not None:
                assert tool["error_pct"] == pytest.approx(
                    100 * (tool["gib"] - mine["measured_gib"]) / mine["measured_gib"]
                )


def test_peers_mark_what_they_cannot_describe(rows):
    for r in rows:
        tools = r["tools"]
        assert tools[peers.PLANNER]["gib"] is not None
        if r["task"] in ("lora", "qlora"):  # no peer models LoRA adapters
            assert all(tools[name]["gib"] is None for name in peers.PEERS)
        if r["task"] == "inference":  # model-state / training-only estimators
            assert tools["DeepSpeed ZeRO"]["gib"] is None and tools["Megatron-LM"]["gib"] is None
            assert tools["llm-analysis"]["gib"] is not None and tools["accelerate"]["gib"] is not None
    assert all(any(r["tools"][name]["gib"] is not None for r in rows) for name in peers.TOOLS)


def test_statistics_cover_only_the_rows_each_tool_covers(rows):
    stats = {s["tool"]: s for s in peers.summary(rows, {name: 1e-6 for name in peers.TOOLS})}
    assert stats[peers.PLANNER]["rows"] == len(rows)
    for name in peers.TOOLS:
        covered = [r for r in rows if r["tools"][name]["gib"] is not None]
        errors = [abs(r["tools"][name]["error_pct"]) for r in covered]
        s = stats[name]
        assert s["rows"] == len(covered) and s["row_ids"] == [r["row"] for r in covered]
        assert s["median_abs_error_pct"] == pytest.approx(statistics.median(errors))
        assert s["p90_abs_error_pct"] == pytest.approx(accuracy.p90(errors))
        assert s["planner_median_same_rows"] == pytest.approx(
            statistics.median(abs(r["tools"][peers.PLANNER]["error_pct"]) for r in covered)
        )


def test_planner_median_error_is_below_every_peer_on_shared_rows(rows):
    for s in peers.summary(rows):
        if s["tool"] != peers.PLANNER:
            assert s["planner_median_same_rows"] < s["median_abs_error_pct"], s["tool"]


def test_timings_are_measured_for_every_tool():
    seconds = peers.timings(repeats=1)
    assert set(seconds) == set(peers.TOOLS) and all(v > 0 for v in seconds.values())


# A 1e9-parameter model worked by hand: s = 1024, b = 1, h = 2048, 16 layers, 16 heads (MHA), ffn = 4h,
# V = 32000 (tied: embedding 65,536,000), bf16 with fp32 master weights and AdamW, one GPU, FlashAttention.
def case(**changes):
    base = {
        "params": 10**9,
        "embedding": 32000 * 2048,
        "largest_layer": 32000 * 2048,
        "layers": 16,
        "hidden": 2048,
        "heads": 16,
        "kv_heads": 16,
        "ffn": 8192,
        "vocab": 32000,
        "seq": 1024,
        "batch": 1,
        "new_tokens": 0,
        "task": "pretrain",
        "compute": "bf16",
        "weights": "bf16",
        "master": "fp32",
        "optimizer": "adamw",
        "zero": 0,
        "gpus": 1,
        "tensor": 1,
        "pipeline": 1,
        "recompute": "none",
        "flash": True,
    }
    return peers.Inputs(**{**base, **changes})


INFER = {"task": "inference", "seq": 100, "new_tokens": 28}


def test_rule16_golden():
    assert peers.rule16(case()) == 16e9  # 2 + 2 + 4 + 8 B per parameter
    assert peers.rule16(case(**INFER)) == pytest.approx(2.4e9)  # 1.2 × 2 B weights
    assert peers.rule16(case(**INFER, weights="nf4")) == pytest.approx(0.6e9)  # 1.2 × 0.5 B
    assert peers.rule16(case(task="lora")) is None


def test_accelerate_golden():
    assert peers.accelerate_estimate(case()) == 8e9  # max(model 4P, grads 6P, optimizer 8P, step 8P)
    assert peers.accelerate_estimate(case(compute="fp32")) == 16e9  # step 4 × 4P
    assert peers.accelerate_estimate(case(**INFER)) == 2e9  # float16 load
    assert peers.accelerate_estimate(case(**INFER, weights="nf4")) == 0.5e9  # int4: fp32 size ÷ 8
    assert peers.accelerate_estimate(case(task="qlora")) is None


def test_deepspeed_golden():
    assert peers.deepspeed_zero(case()) == 20e9  # 2P + 18P, nothing partitioned
    assert peers.deepspeed_zero(case(zero=2, gpus=8)) == 4.25e9  # 2P + 18P/8
    assert peers.deepspeed_zero(case(zero=3, gpus=8, largest_layer=10**8)) == 2.65e9  # 4·1e8 + 18P/8
    assert peers.deepspeed_zero(case(zero=1, gpus=8)) is None  # no ZeRO-1 estimator
    assert peers.deepspeed_zero(case(**INFER)) is None


def test_megatron_golden():
    # 18 B/param + 1.05 × (sbh·34·16 + 8sb + sbh + (sbV + sbh)·2) with sbh = 2,097,152
    assert peers.megatron(case()) == pytest.approx(18e9 + 1_273_320_652.8)
    # distributed optimizer over 8 GPUs: 6 + 12/8 = 7.5 B/param, same activations
    assert peers.megatron(case(zero=1, gpus=8)) == pytest.approx(7.5e9 + 1_273_320_652.8)
    assert peers.megatron(case(zero=3, gpus=8)) is None and peers.megatron(case(task="lora")) is None


def test_llm_analysis_golden():
    # weights 2P + Adam (4 + 8)P + grads 4P; activations per layer: attention 10sbh + (2sbh + 4as)·2 + sbh,
    # MLP 2sbh + 16sbh, LayerNorms 8sbh → 86,114,304 × 16 layers + logits 65,536,000 + final LN 8,388,608
    assert peers.llm_analysis(case()) == pytest.approx(18e9 + 1_451_753_472)
    # inference: weights 2P + max(prefill = logits 6,400,000, KV 16,777,216 + decode logits 64,000)
    assert peers.llm_analysis(case(**INFER)) == pytest.approx(2e9 + 16_841_216)
    assert peers.llm_analysis(case(task="lora")) is None
