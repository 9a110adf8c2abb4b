"""Every document the code cites ships with the project."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CITED = re.compile(r"docs/[\w.-]+\.(?:md|png)")


def test_every_cited_doc_exists():
    cited = {
        m
        for path in [*ROOT.glob("planner/**/*.py"), *ROOT.glob("planner/data/*.yaml"), ROOT / "README.md"]
        for m in CITED.findall(path.read_text(encoding="utf-8"))
    }
    assert {"docs/hybrid.md", "docs/gpu-prices.md"} <= cited
    assert sorted(c for c in cited if not (ROOT / c).is_file()) == []


def test_hybrid_notes_have_every_cited_section():
    sections = set(re.findall(r"^#+ (§[\d.]+)", (ROOT / "docs/hybrid.md").read_text(encoding="utf-8"), re.M))
    cited = {
        m
        for path in ROOT.glob("planner/**/*.py")
        for m in re.findall(r"hybrid\.md (§[\d.]+)", path.read_text(encoding="utf-8"))
    }
    assert cited and cited <= sections
