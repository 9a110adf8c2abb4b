"""Every document the code cites ships with the project, and every link of the README and docs/ lands."""

import re
import tomllib
from pathlib import Path

from planner.catalog import load_catalog

ROOT = Path(__file__).resolve().parent.parent
CITED = re.compile(r"docs/[\w.-]+\.(?:md|png)")
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```$", re.M | re.S)


def test_every_cited_doc_exists():
    cited = {
        m
        for path in [*ROOT.glob("planner/**/*.py"), *ROOT.glob("planner/data/*.yaml"), *DOCS]
        for m in CITED.findall(path.read_text(encoding="utf-8"))
    }
    assert {"docs/hybrid.md", "docs/gpu-prices.md", "docs/screenshot.png"} <= cited
    assert sorted(c for c in cited if not (ROOT / c).is_file()) == []


def test_hybrid_notes_have_every_cited_section():
    sections = set(re.findall(r"^#+ (§[\d.]+)", (ROOT / "docs/hybrid.md").read_text(encoding="utf-8"), re.M))
    cited = {
        m
        for path in ROOT.glob("planner/**/*.py")
        for m in re.findall(r"hybrid\.md (§[\d.]+)", path.read_text(encoding="utf-8"))
    }
    assert cited and cited <= sections


def anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    headings = re.findall(r"^#+ (.+)$", FENCE.sub("", text), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_anchors_are_githubs():
    assert anchors("# Framework configs in and out\n## The catalog (`gpu_catalog.yaml`)\n") == {
        "framework-configs-in-and-out",
        "the-catalog-gpu_catalogyaml",
    }


def broken_links(path: Path) -> list[str]:
    """The relative links of a Markdown file whose file, or whose heading anchor, is not there."""
    broken = []
    for target in LINK.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        if target.startswith(("http://", "https://")):
            continue
        name, _, anchor = target.partition("#")
        linked = (path.parent / name).resolve() if name else path
        if not linked.is_file() or (anchor and anchor not in anchors(linked.read_text(encoding="utf-8"))):
            broken.append(target)
    return broken


def test_every_link_of_the_readme_and_docs_lands():
    assert {path.name: broken_links(path) for path in DOCS} == {path.name: [] for path in DOCS}


def test_a_link_to_a_missing_anchor_is_broken(tmp_path):
    doc = tmp_path / "a.md"
    doc.write_text("# Here\n[ok](#here) [file](a.md#here) [gone](#framework-recipes) [none](b.md)\n")
    assert broken_links(doc) == ["#framework-recipes", "b.md"]


def test_the_readme_is_short_and_its_numbers_are_the_datas():
    """Issue 32: a README of at most 250 lines; the catalog's size and the Python it names are the shipped ones."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    catalog = load_catalog()
    assert len(readme.splitlines()) <= 250
    assert f"{len(catalog.offerings)} offerings of {len(catalog)} accelerators" in readme
    python = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert python == ">=3.11" and "(Python 3.11 or newer." in readme
