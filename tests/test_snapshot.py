"""The planner's numbers do not move unnoticed: every entry of tests/snapshots/ is recomputed and compared.

A failure lists the paths that changed. If the change is intended, run `python tests/snapshot.py`, and say in
the commit message what moved and why.
"""

import json

import pytest
import snapshot


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
    changed = []
    for name, content in current.items():
        old = json.loads((snapshot.SNAPSHOTS / name).read_text(encoding="utf-8"))
        changed += [f"{name}{d}" for d in _differences(old, json.loads(snapshot.dumps(content)))]
    if changed:
        pytest.fail(f"{len(changed)} snapshot values moved:\n" + "\n".join(changed[:40]), pytrace=False)


def test_the_grid_covers_every_kind_of_plan(current):
    entries = [e for name, c in current.items() if name.startswith("estimates/") for e in c.values()]
    ok = [e for e in entries if "error" not in e]
    assert len(entries) >= 1000 and len(ok) >= 900
    tasks = {e["plan"]["workload"]["task"] for e in ok}
    assert tasks == {"pretrain", "finetune", "lora", "qlora", "inference"}
    assert {e["stage"] for e in ok} >= {0, 1, 3}  # pipeline stages other than the first set some peaks
    assert any(e["serving"] for e in ok) and any(e["host_bytes"] for e in ok)


def test_differences_name_the_path_and_both_values():
    assert list(_differences({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}], "c": 0})) == [
        "/a[1]/b: 2 → 3",
        "/c: '<absent>' → 0",
    ]
