"""The project's own framework configs stored under tests/data/configs/<format>/ (SOURCES.md says what each
folder exercises), and the checks every format's tests share."""

from __future__ import annotations

from pathlib import Path

from planner.formats import overlay
from planner.formats.base import Imported
from planner.plan.codec import plan_from_dict
from planner.plan.config import Plan

CONFIGS = Path(__file__).parent / "data" / "configs"


def config_files(fmt: str) -> list[str]:
    return sorted(p.name for p in (CONFIGS / fmt).iterdir() if p.name != "SOURCES.md")


def config_text(fmt: str, name: str) -> str:
    return (CONFIGS / fmt / name).read_text()


def accounted(imported: Imported) -> set[str]:
    """Every config key the reader says something about: read, unmodelled, ignored or unknown."""
    return (
        {r.source for r in imported.read}
        | {n.split(": ", 1)[0] for n in imported.unmodelled}
        | set(imported.ignored)
        | set(imported.unknown)
    )


def built(imported: Imported, preset: str = "llama-3.1-8b") -> Plan:
    """The imported plan laid over a plan of a preset (the model the config names wins)."""
    return plan_from_dict(overlay({"model": {"preset": preset}}, imported.plan))
