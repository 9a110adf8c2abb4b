from pathlib import Path

import pytest
from hypothesis import settings

# Every property draws the same examples on every run (derandomize: a seed from the test's name, no example
# database): a run that passes once passes again, and each test's @settings fixes how many it draws.
settings.register_profile("deterministic", derandomize=True, database=None, deadline=None, print_blob=True)
settings.load_profile("deterministic")

ROOT = Path(__file__).resolve().parent.parent
# The tiers beside the unit tests (markers in pyproject.toml): each test of one is also `slow`, so that
# `python -m pytest -m "not slow"` runs the unit tests alone; `python -m pytest` (.ci/run) runs them all.
TIERS = ("fuzz", "cli", "package", "browser", "corpus")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.get_closest_marker(tier) for tier in TIERS):
            item.add_marker(pytest.mark.slow)


# A model small enough to work out by hand (see test_memory.py for the arithmetic).
TINY = {
    "num_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_kv_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 1000,
}
