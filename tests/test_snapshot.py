"""The planner's numbers do not move unnoticed: every entry of tests/snapshots/ is recomputed and compared.

A failure lists the paths that changed. If the change is intended, run `python tests/snapshot.py`, and say in
the commit message what moved and why.
"""

import dataclasses
import json

import pytest
import snapshot

from planner.memory import runtime


def _differences(old, new, path=""):
    """Paths at which two JSON values differ, with both sides."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(old.keys() | new.keys()):
            yield from _differences(old.get(key, "<absent>"), new.get(key, "<absent>"), f"{path}/{key}")
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            yield from _differences(a, b, f"{path}[{i}]")
    elif old != new:
        yield f"{path}: {old!r} → {new!r}"


def _moved(name, content):
    """The paths of the stored file `name` that `content` (as snapshot.files() gives it) changes."""
    old = json.loads((snapshot.SNAPSHOTS / name).read_text(encoding="utf-8"))
    return [f"{name}{d}" for d in _differences(old, json.loads(snapshot.dumps(content)))]


@pytest.fixture(scope="module")
def current():
    return snapshot.files()


def test_every_snapshot_file_is_current(current):
    stored = {p.relative_to(snapshot.SNAPSHOTS).as_posix() for p in snapshot.SNAPSHOTS.rglob("*.json")}
    if stored != set(current):
        pytest.fail(
            f"snapshot files added {sorted(set(current) - stored)}, gone {sorted(stored - set(current))}: "
            "run python tests/snapshot.py",
            pytrace=False,
        )
    changed = [d for name, content in current.items() for d in _moved(name, content)]
    if changed:
        pytest.fail(f"{len(changed)} snapshot values moved:\n" + "\n".join(changed[:40]), pytrace=False)


def test_the_grid_covers_every_kind_of_plan(current):
    grids = {name.removeprefix("estimates/").removesuffix(".json"): c for name, c in current.items() if "/" in name}
    entries = [e for c in grids.values() for e in c.values()]
    ok = [e for e in entries if "error" not in e]
    assert len(entries) >= 1000 and len(ok) >= 900
    assert {e["stage"] for e in ok} >= {0, 1, 3}  # pipeline stages other than the first set some peaks
    assert any(e["serving"] for e in ok) and any(e["host_bytes"] for e in ok)
    assert all(e["items"] and e["time"] for e in ok)
    texts = [e for preset in snapshot.TEXT_PRESETS for e in grids[preset].values() if "error" not in e]
    assert {e["plan"]["workload"]["task"] for e in texts} == {"pretrain", "finetune", "lora", "qlora", "inference"}
    assert all(i["formula"] and i["note"] for e in texts for i in e["items"])


def test_only_the_text_presets_pin_formulas_notes_and_messages(current):
    for name, content in current.items():
        if name.startswith("estimates/"):
            text = name.removeprefix("estimates/").removesuffix(".json") in snapshot.TEXT_PRESETS
            entry = content["pretrain-1gpu"]
            assert ("plan" in entry and "reason" in entry and isinstance(entry["items"], list)) is text, name
            assert all(isinstance(v, int) for v in ([] if text else entry["items"].values())), name


def _without_context_and_nccl(groups, detail):
    return tuple(dataclasses.replace(i, bytes=0) for i in _WITH_CONTEXT_AND_NCCL(groups, detail))


_WITH_CONTEXT_AND_NCCL = runtime._context_and_nccl


@pytest.mark.parametrize("preset", ["qwen3-8b", snapshot.TEXT_PRESETS[0]])
def test_context_and_nccl_dropped_from_every_training_plan_fails_the_snapshot(monkeypatch, preset):
    """The regression the numbers-only entries must still catch: the CUDA context and NCCL terms silently 0."""
    monkeypatch.setattr(runtime, "_context_and_nccl", _without_context_and_nccl)
    name, grid = f"estimates/{preset}.json", snapshot.estimates(preset)
    moved = _moved(name, grid)
    training = [v for v, e in grid.items() if "error" not in e and v in TRAINING]
    assert len(training) >= 15
    for variant in training:
        assert any(m.startswith(f"{name}/{variant}/device_bytes: ") for m in moved), variant
        if preset not in snapshot.TEXT_PRESETS:
            assert any(m.startswith(f"{name}/{variant}/items/cuda_context: 536870912 → 0") for m in moved), variant


TRAINING = [v for v, data in snapshot.VARIANTS.items() if data.get("workload", {}).get("task") != "inference"]


def test_differences_name_the_path_and_both_values():
    assert list(_differences({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}], "c": 0})) == [
        "/a[1]/b: 2 → 3",
        "/c: '<absent>' → 0",
    ]
