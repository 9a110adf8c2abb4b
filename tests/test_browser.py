"""End to end in a real browser: `streamlit run app.py` on localhost, driven in Debian's Chromium by Playwright.

Skipped only where Chromium is absent; `.ci/run` installs it. With VRAM_SCREENSHOT=path the test also saves the
screenshot the README shows.

It asserts what the page shows, never how fast: every wait (Playwright's actions, its expect(), the server's start)
is the one generous WAIT, after which a step is called stuck, not slow. Charts are read from their SVG (the charts
ask Streamlit for Vega's SVG renderer): each bar's box on the screen and the axis labels a person can see."""

import os
import re
from itertools import pairwise
from pathlib import Path

import app_speed
import pytest

from planner.catalog import load_catalog
from planner.memory import estimate
from planner.perf import plan_time
from planner.plan.codec import plan_from_dict
from ui.state import DEFAULT_PLAN

CHROMIUM = "/usr/bin/chromium"
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium (.ci/run installs it)"),
]
VERDICT = re.compile(r"^(fits on|does not fit on) ")
WAIT_S = 300  # how long any one step may take before the test calls it stuck (under load, not a speed limit)
WAIT = WAIT_S * 1000  # the same, in Playwright's milliseconds
ROW_MIN_PX = 15  # a bar a person can see and point at (the charts draw rows 28 px apart)
# The bars and visible axis labels of one Vega SVG, each with its box on the screen. Vega hides a label that
# would overlap another by setting its opacity to 0; a bar's aria-label is its datum ("field: value; ...").
READ_CHART = """svg => {
  const box = e => { const r = e.getBoundingClientRect(); return {x: r.x, y: r.y, w: r.width, h: r.height}; };
  const shown = e => e.getAttribute('opacity') !== '0' && getComputedStyle(e).opacity !== '0';
  const texts = g => [...g.querySelectorAll('text')].filter(shown).map(t => ({text: t.textContent, ...box(t)}));
  const yAxis = [...svg.querySelectorAll('g.role-axis[aria-label^="Y-axis"] g.role-axis-label')];
  return {labels: yAxis.flatMap(texts), marks: [...svg.querySelectorAll('g.mark-text.role-mark')].flatMap(texts),
          bars: [...svg.querySelectorAll('g.mark-rect.role-mark path')].map(p => ({
            datum: Object.fromEntries(p.getAttribute('aria-label').split('; ').map(f => f.split(': '))), ...box(p)}))};
}"""


@pytest.fixture(scope="module")
def server():
    try:
        proc, url = app_speed.serve(WAIT_S)
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield url
    proc.terminate()
    proc.wait(timeout=20)


def test_plan_change_and_share_link_in_chromium(server, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-gpu"],
        )
        sync_api.expect.set_options(timeout=WAIT)
        page = _page(browser)
        page.goto(server)
        page.get_by_text(VERDICT).first.wait_for()
        assert page.get_by_text(VERDICT).first.inner_text().startswith("fits on NVIDIA H100 SXM 80GB ×8")
        assert page.get_by_role("button", name="Deploy").count() == 0  # .streamlit/config.toml: toolbarMode minimal
        page.get_by_text("Import a Hugging Face config.json").click()  # the paste box is wider than the sidebar
        paste = page.get_by_role("textbox", name="Paste config.json")
        paste.wait_for()
        assert paste.bounding_box()["width"] >= 500
        page.keyboard.press("Escape")
        page.evaluate("() => document.activeElement.blur()")  # no focus ring in the screenshot
        page.locator(".vega-embed").first.wait_for()  # the breakdown chart rendered
        assert page.locator(".vega-embed canvas, .vega-embed svg").count() >= 1
        page.wait_for_timeout(1000)
        shot = os.environ.get("VRAM_SCREENSHOT") or str(tmp_path / "app.png")
        page.screenshot(path=shot)
        assert os.path.getsize(shot) > 10_000
        _memory_over_the_step_reads_in_step_order(page, tmp_path)

        _time_chart_has_a_readable_bar_per_item(page, tmp_path)
        page.get_by_role("tab", name="Breakdown").click()

        first = page.get_by_text(VERDICT).first.inner_text()
        box = page.get_by_role("spinbutton", name="Sequence length")
        box.fill("16384")
        box.press("Enter")
        page.wait_for_url(re.compile(r"sequence_length=16384"))
        page.wait_for_function("t => !document.body.innerText.includes(t)", arg=first)  # the rerun's verdict
        verdict = page.get_by_text(VERDICT).first.inner_text()
        link = page.url

        fresh = _page(browser)  # a new browser session: only the link carries the plan
        fresh.goto(link)
        fresh.get_by_text(VERDICT).first.wait_for()
        assert fresh.get_by_text(VERDICT).first.inner_text() == verdict
        # the widgets fill in after the verdict is drawn; expect() waits for the value
        sync_api.expect(fresh.get_by_role("spinbutton", name="Sequence length")).to_have_value("16384")
        _a_closed_group_opens(fresh, sync_api)
        _make_it_fit_and_compare(browser, server, tmp_path)
        _configs_in_and_out(browser, server, tmp_path)
        _cheapest_within_a_deadline(browser, server, tmp_path)
        browser.close()


DEFAULT = plan_from_dict(DEFAULT_PLAN)  # the first page's plan
# Streamlit's "running" indicator is gone: the page's script run has finished drawing
RUN_DONE = "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"


def _a_closed_group_opens(page, sync_api) -> None:
    """issue 30: the Precision group draws its widgets only once opened (a rerun); a value chosen there is kept
    in the link after the group closes again."""
    optimizer = page.get_by_role("combobox", name="Optimizer", exact=True)
    assert optimizer.count() == 0
    page.get_by_text("Precision", exact=True).click()
    optimizer.wait_for()
    page.wait_for_function(RUN_DONE)  # the rerun that opened the group has drawn all of it
    optimizer.click()
    page.keyboard.type("lion")
    page.get_by_role("option", name="lion", exact=True).click()
    # the link is rewritten in place (history.replaceState): poll it rather than wait for a navigation
    page.wait_for_function("() => location.search.includes('optimizer=lion')")
    page.get_by_text("Precision", exact=True).click()
    sync_api.expect(optimizer).to_have_count(0)
    box = page.get_by_role("spinbutton", name="Sequence length")
    box.fill("8192")
    box.press("Enter")
    page.wait_for_function("() => location.search.includes('sequence_length=8192')")
    assert "optimizer=lion" in page.url


def _chart(svg) -> dict:
    """What a person sees of one chart: its bars (datum and screen box), visible y labels and text marks."""
    chart = svg.evaluate(READ_CHART)
    for bar in chart["bars"]:
        bar["mid"] = bar["y"] + bar["h"] / 2
    return chart


def _rows(chart: dict) -> list[str]:
    """The y labels top to bottom, after checking each is whole and none covers the next."""
    labels = sorted(chart["labels"], key=lambda t: t["y"])
    assert all(a["y"] + a["h"] <= b["y"] for a, b in pairwise(labels)), labels
    assert not [t for t in labels if t["text"].endswith("…")]  # truncated
    return [t["text"] for t in labels]


def _row_of(chart: dict, mid: float) -> str:
    """The y label level with a screen height (a bar's middle): the row the bar is drawn in."""
    return next(t["text"] for t in chart["labels"] if t["y"] <= mid <= t["y"] + t["h"])


def _memory_over_the_step_reads_in_step_order(page, tmp_path) -> None:
    """Issue 30: the moments of the step read in the order the step reaches them (not alphabetically), every one
    labelled, a bar a row high each, its length its live memory, the peak's label in the peak's row."""
    est = estimate(DEFAULT, load_catalog())
    stage = next(s for s in est.stages if s.index == est.stage)
    svg = page.locator(".vega-embed svg").nth(1)  # the tab's second chart, after the breakdown's bar
    svg.wait_for()
    chart = _chart(svg)
    assert _rows(chart) == [ph.name for ph in stage.phases]
    assert min(b["h"] for b in chart["bars"]) >= ROW_MIN_PX
    px = {
        ph.name: sum(b["w"] for b in chart["bars"] if _row_of(chart, b["mid"]) == ph.name) / ph.allocated_bytes
        for ph in stage.phases
    }
    assert max(px.values()) / min(px.values()) < 1.01, px  # one scale: each row's length is its live bytes
    (peak,) = [t for t in chart["marks"] if t["text"].startswith("peak ")]
    assert _row_of(chart, peak["y"] + peak["h"] / 2) == est.phase
    page.get_by_role("heading", name="Memory over the step").evaluate("h => h.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(500)
    _shot(page, tmp_path, "timeline.png")


def _time_chart_has_a_readable_bar_per_item(page, tmp_path) -> None:
    """Issue 30: the Time tab's chart draws each item of the step as a bar a row high, in the planner's order, its
    length its seconds on one scale, each row labelled with the item's whole label."""
    step = plan_time(DEFAULT, estimate(DEFAULT, load_catalog()).gpu)
    page.get_by_role("tab", name="Time").click()
    panel = page.get_by_role("tabpanel").filter(has_text="Matmuls and attention")
    panel.locator(".vega-embed svg").first.wait_for()
    chart = _chart(panel.locator(".vega-embed svg").first)
    assert _rows(chart) == [i.label for i in step.items]
    assert len(chart["bars"]) == sum(bool(i.seconds) + bool(i.hidden_s) for i in step.items)
    assert min(b["h"] for b in chart["bars"]) >= ROW_MIN_PX
    assert all(_row_of(chart, b["mid"]) == b["datum"]["item"] for b in chart["bars"])
    wide = [b for b in chart["bars"] if b["w"] >= 20]  # a pixel's rounding is under 5 % of these
    scale = [b["w"] / float(b["datum"]["seconds"]) for b in wide]
    assert len(wide) >= 2 and max(scale) / min(scale) < 1.05, scale
    panel.locator(".vega-embed svg").first.scroll_into_view_if_needed()
    _shot(page, tmp_path, "time.png")


def _page(browser, **context):
    """A page in a new browser session (only a link carries a plan between them), every wait in it WAIT long."""
    page = browser.new_context(viewport={"width": 1500, "height": 1100}, **context).new_page()
    page.set_default_timeout(WAIT)
    return page


def _shot(page, tmp_path, name: str) -> None:
    """A screenshot into docs/ when VRAM_SCREENSHOT names the app's (refreshing the README's pictures)."""
    folder = os.path.dirname(os.environ.get("VRAM_SCREENSHOT", "")) or str(tmp_path)
    page.screenshot(path=os.path.join(folder, name), full_page=False)


def _make_it_fit_and_compare(browser, server, tmp_path) -> None:
    """Issue 17's views in a real browser: a plan that does not fit offers a change that makes it fit, one click
    applies it; a pinned plan then stands beside the edited one."""
    page = _page(browser)
    page.goto(f"{server}?preset=llama-3.1-70b&task=qlora&sequence_length=8192&global_batch_size=1")
    page.get_by_text(re.compile(r"^does not fit on ")).first.wait_for()
    fix = page.get_by_role("button", name=re.compile(r"^full activation checkpointing: saves "))
    fix.wait_for()
    page.wait_for_timeout(500)
    _shot(page, tmp_path, "make-it-fit.png")
    fix.click()
    page.get_by_text(re.compile(r"^fits on NVIDIA H100 SXM 80GB ×1")).first.wait_for()
    page.get_by_role("tab", name="Compare").click()
    page.get_by_role("button", name="Pin this plan to compare").click()
    page.get_by_role("button", name="Unpin pinned 1").wait_for()
    box = page.get_by_role("spinbutton", name="Sequence length")
    box.fill("4096")
    box.press("Enter")
    page.get_by_text(re.compile(r"^Llama 3\.1 70B QLoRA")).first.wait_for()
    page.wait_for_timeout(2000)  # the rerun finishes drawing
    page.get_by_role("tab", name="Compare").click()
    assert "cmp1=" in page.url
    page.wait_for_timeout(1000)
    _shot(page, tmp_path, "compare.png")


def _configs_in_and_out(browser, server, tmp_path) -> None:
    """Issue 18 in a real browser: the plan downloads as its framework's config file, and a pasted torchtune config
    becomes the plan."""
    page = _page(browser, accept_downloads=True)
    page.goto(f"{server}?framework=torchtitan")
    page.get_by_text(VERDICT).first.wait_for()
    page.get_by_role("tab", name="Share and export").click()
    button = page.get_by_role("button", name=re.compile(r"^Download torchtitan job config"))
    button.wait_for()
    with page.expect_download() as download:
        button.click()
    saved = tmp_path / download.value.suggested_filename
    download.value.save_as(saved)
    assert saved.suffix == ".toml" and "[parallelism]" in saved.read_text()
    config = Path(__file__).parent / "data" / "configs" / "torchtune" / "llama3_1_8B_lora_single_device.yaml"
    page.get_by_role("textbox", name="…or paste it").fill(config.read_text())
    page.get_by_role("button", name="Load the pasted config").click()
    page.get_by_text(re.compile(r"^Loaded pasted config as torchtune")).first.wait_for()
    page.wait_for_url(re.compile(r"framework=torchtune"))
    assert "task=lora" in page.url
    page.get_by_role("button", name=re.compile(r"^Download torchtune recipe config")).wait_for()
    page.get_by_role("heading", name="Load a framework config").scroll_into_view_if_needed()
    page.mouse.wheel(0, 420)
    page.wait_for_timeout(1000)
    _shot(page, tmp_path, "configs.png")


def _cheapest_within_a_deadline(browser, server, tmp_path) -> None:
    """Issue 26 in a real browser: a trillion-token pre-training run gets a recommendation within its deadline from
    the whole catalog, the cost-time frontier draws at a readable size, and a shorter deadline changes the
    answer."""
    page = _page(browser)
    page.goto(f"{server}?train_tokens=1000000000000&global_batch_size=512")
    page.get_by_text(VERDICT).first.wait_for()
    page.get_by_role("tab", name="Cheapest hardware").click()
    answer = page.get_by_text(re.compile(r"^Recommended: ")).first
    answer.wait_for()
    first = answer.inner_text()
    panel = page.get_by_role("tabpanel").filter(has_text="cost-time frontier")
    charts = panel.locator(".vega-embed")
    charts.nth(1).locator("canvas, svg").first.wait_for()
    assert charts.nth(1).bounding_box()["height"] >= 300  # the frontier: one line per GPU type, days by dollars
    assert page.get_by_text(re.compile(r"not searched")).count() == 0
    charts.nth(1).scroll_into_view_if_needed()
    page.wait_for_timeout(1000)
    _shot(page, tmp_path, "cheapest.png")
    box = page.get_by_role("spinbutton", name="Finish within, days (0: no deadline)")
    box.fill("3")
    box.press("Enter")
    page.wait_for_function("t => !document.body.innerText.includes(t)", arg=first)
    assert page.get_by_text(re.compile(r"^Recommended: ")).first.inner_text() != first
