"""A slice of bench/fuzz.py in CI: generated plans, malformed YAML, tampered links, structural mutations and
hostile shapes of text give answers or PlanError."""

import fuzz
import pytest

pytestmark = pytest.mark.fuzz


def test_fuzz_slice_finds_no_bugs():
    """Untimed: the time limit is the bench's (python bench/fuzz.py), a busy machine must not fail a test."""
    result = fuzz.run(plans=300, inputs=300, seed=7, recommend_every=100, slow_s=None)
    counts = result["counts"]
    assert result["bugs"] == []
    assert counts["ok"] > 50 and counts["invalid"] > 50 and counts["rejected"] > 50 and counts["accepted"] > 50
    assert counts["structural rejected"] > 50 and counts["structural accepted"] > 20
    assert 0 < result["structural_peak_bytes"] < fuzz.MEMORY_LIMIT_BYTES


def test_a_mutation_replaces_one_node_with_another_shape():
    rng = fuzz.random.Random(0)
    doc = {"model": {"preset": "gpt2"}, "workload": {"sequence_length": 128}}
    changed = [fuzz.mutate(rng, doc) for _ in range(20)]
    assert doc == {"model": {"preset": "gpt2"}, "workload": {"sequence_length": 128}}  # the original is kept
    assert all(c != doc for c in changed)


def test_hostile_shapes_slice_finds_no_bugs():
    """Every shape once, at 2 kB, through every reader (the sizes where time would grow quadratically are the
    bench's: python bench/fuzz.py, which also holds each to its time limit)."""
    result = fuzz.hostile(sizes=(2048,), slow_s=None)
    assert result["bugs"] == []
    assert set(result["rows"]) == set(fuzz.SHAPES)
    assert all(inputs == len(fuzz.READERS) for inputs, *_ in result["rows"].values())
