"""The benchmarks run, and the exact-accounting physics they check does not regress."""

import statistics
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))

import accuracy  # noqa: E402
import oracle_check  # noqa: E402
import serving  # noqa: E402
import throughput  # noqa: E402


def test_accuracy_expresses_rows_and_explains_the_rest():
    rows, skipped = accuracy.run()
    expressed = {r["row"] for r in rows}
    assert {"m069", "m074", "m075", "m081", "m083", "m085", "m086", "m107"} <= expressed  # full, LoRA, QLoRA, ZeRO-3
    assert {f"m{i}" for i in range(117, 145)} <= expressed  # torchao generate.py: compiled, static cache, int8 KV
    assert len(rows) + len(skipped) == 95 and all(why for _, why in skipped)
    errors = [abs(r["error_pct"]) for r in rows]
    assert statistics.median(errors) < 8 and max(errors) < 30


def test_accuracy_summarizes_each_workload_class_and_statistic():
    rows, _ = accuracy.run()
    groups = {(g["workload"], g["stat"]): g for g in accuracy.summaries(rows)}
    assert {("generation", "reserved"), ("full training", "allocated"), ("adapters", "allocated")} <= set(groups)
    assert groups[("all", "all")]["rows"] == len(rows) == sum(g["rows"] for k, g in groups.items() if k[0] != "all")


def test_oracle_terms_hold_for_llama_and_qwen_shapes():
    rows = oracle_check.run()
    for arch, n in (("llama", 109), ("qwen2", 36), ("deepseek_v3", 11)):
        errors = [abs(r["error_pct"]) for r in rows if r["arch"] == arch]
        assert len(errors) == n
        assert statistics.median(errors) < 0.5 and max(errors) < 5


def test_throughput_expresses_rows_and_explains_the_rest():
    rows, skipped = throughput.run()
    assert len(rows) + len(skipped) == 58 and len(skipped) == 1 and all(why for _, why in skipped)
    assert {r["source"] for r in rows} == {"foundry", "megatron", "nemo2407", "mbridge"}
    errors = [abs(r["error"]) for r in rows]
    assert statistics.median(errors) < 0.25  # measured 19.5 % (14.8 % before collectives across nodes shared NICs)
    assert all(r["predicted"] > 0 and 0 < r["mfu_predicted"] < 1 for r in rows)


def test_serving_compares_every_fixed_batch_row():
    rows, skipped = serving.run()
    assert len(rows) == 25 and len(rows) + len(skipped) == 40
    assert all(why == "a max-throughput run: no fixed batch" for _, why in skipped)
    errors = [abs(r["error"]) for r in rows]
    assert statistics.median(errors) < 0.25  # measured 15.8 % when the serving bench landed
