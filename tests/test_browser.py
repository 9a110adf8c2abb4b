"""End to end in a real browser: `streamlit run app.py` on localhost, driven in Debian's Chromium by Playwright.

Skipped only where Chromium is absent; `.ci/run` installs it. With VRAM_SCREENSHOT=path the test also saves the
screenshot the README shows."""

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT

CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium (.ci/run installs it)")
VERDICT = re.compile(r"^(fits on|does not fit on) ")


@pytest.fixture(scope="module")
def server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless=true", f"--server.port={port}",
         "--server.address=127.0.0.1", "--browser.gatherUsageStats=false", "--server.fileWatcherType=none"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                break
        except OSError:
            time.sleep(0.5)
    else:
        proc.terminate()
        pytest.fail("streamlit did not start within 90 s")
    yield url
    proc.terminate()
    proc.wait(timeout=20)


def test_plan_change_and_share_link_in_chromium(server, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.goto(server)
        page.get_by_text(VERDICT).first.wait_for(timeout=90_000)
        assert page.get_by_text(VERDICT).first.inner_text().startswith("fits on NVIDIA H100 SXM 80GB ×8")
        assert page.get_by_role("button", name="Deploy").count() == 0  # .streamlit/config.toml: toolbarMode minimal
        page.get_by_text("Import a Hugging Face config.json").click()  # the paste box is wider than the sidebar
        paste = page.get_by_role("textbox", name="Paste config.json")
        paste.wait_for(timeout=30_000)
        assert paste.bounding_box()["width"] >= 500
        page.keyboard.press("Escape")
        page.locator(".vega-embed").first.wait_for(timeout=30_000)  # the breakdown chart rendered
        assert page.locator(".vega-embed canvas, .vega-embed svg").count() >= 1
        page.wait_for_timeout(1000)
        shot = os.environ.get("VRAM_SCREENSHOT") or str(tmp_path / "app.png")
        page.screenshot(path=shot)
        assert os.path.getsize(shot) > 10_000

        page.get_by_role("tab", name="Time").click()  # the step's time renders as a chart too
        panel = page.get_by_role("tabpanel").filter(has_text="Matmuls and attention")
        panel.locator(".vega-embed canvas, .vega-embed svg").first.wait_for(timeout=30_000)
        page.get_by_role("tab", name="Breakdown").click()

        box = page.get_by_role("spinbutton", name="Sequence length")
        box.fill("16384")
        box.press("Enter")
        page.wait_for_url(re.compile(r"sequence_length=16384"), timeout=60_000)
        page.wait_for_timeout(1500)  # the rerun finishes drawing
        verdict = page.get_by_text(VERDICT).first.inner_text()
        link = page.url

        fresh = browser.new_context().new_page()  # a new browser session: only the link carries the plan
        fresh.goto(link)
        fresh.get_by_text(VERDICT).first.wait_for(timeout=90_000)
        assert fresh.get_by_text(VERDICT).first.inner_text() == verdict
        # the widgets fill in after the verdict is drawn; expect() waits for the value
        sync_api.expect(fresh.get_by_role("spinbutton", name="Sequence length")).to_have_value("16384", timeout=30_000)
        _make_it_fit_and_compare(browser, server, tmp_path)
        _configs_in_and_out(browser, server, tmp_path)
        _cheapest_within_a_deadline(browser, server, tmp_path)
        browser.close()


def _shot(page, tmp_path, name: str) -> None:
    """A screenshot into docs/ when VRAM_SCREENSHOT names the app's (refreshing the README's pictures)."""
    folder = os.path.dirname(os.environ.get("VRAM_SCREENSHOT", "")) or str(tmp_path)
    page.screenshot(path=os.path.join(folder, name), full_page=False)


def _make_it_fit_and_compare(browser, server, tmp_path) -> None:
    """Issue 17's views in a real browser: a plan that does not fit offers a change that makes it fit, one click
    applies it; a pinned plan then stands beside the edited one."""
    page = browser.new_context(viewport={"width": 1500, "height": 1100}).new_page()
    page.goto(f"{server}?preset=llama-3.1-70b&task=qlora&sequence_length=8192&global_batch_size=1")
    page.get_by_text(re.compile(r"^does not fit on ")).first.wait_for(timeout=90_000)
    fix = page.get_by_role("button", name=re.compile(r"^full activation checkpointing: saves "))
    fix.wait_for(timeout=30_000)
    page.wait_for_timeout(500)
    _shot(page, tmp_path, "make-it-fit.png")
    fix.click()
    page.get_by_text(re.compile(r"^fits on NVIDIA H100 SXM 80GB ×1")).first.wait_for(timeout=60_000)
    page.get_by_role("tab", name="Compare").click()
    page.get_by_role("button", name="Pin this plan to compare").click()
    page.get_by_role("button", name="Unpin pinned 1").wait_for(timeout=60_000)
    box = page.get_by_role("spinbutton", name="Sequence length")
    box.fill("4096")
    box.press("Enter")
    page.get_by_text(re.compile(r"^Llama 3\.1 70B QLoRA")).first.wait_for(timeout=60_000)
    page.wait_for_timeout(2000)  # the rerun finishes drawing
    page.get_by_role("tab", name="Compare").click()
    assert "cmp1=" in page.url
    page.wait_for_timeout(1000)
    _shot(page, tmp_path, "compare.png")


def _configs_in_and_out(browser, server, tmp_path) -> None:
    """Issue 18 in a real browser: the plan downloads as its framework's config file, and a pasted torchtune config
    becomes the plan."""
    page = browser.new_context(viewport={"width": 1500, "height": 1100}, accept_downloads=True).new_page()
    page.goto(f"{server}?framework=torchtitan")
    page.get_by_text(VERDICT).first.wait_for(timeout=90_000)
    page.get_by_role("tab", name="Share and export").click()
    button = page.get_by_role("button", name=re.compile(r"^Download torchtitan job config"))
    button.wait_for(timeout=30_000)
    with page.expect_download() as download:
        button.click()
    saved = tmp_path / download.value.suggested_filename
    download.value.save_as(saved)
    assert saved.suffix == ".toml" and "[parallelism]" in saved.read_text()
    config = (Path(__file__).parent / "data" / "configs" / "torchtune" / "llama3_1_8B_lora_single_device.yaml")
    page.get_by_role("textbox", name="…or paste it").fill(config.read_text())
    page.get_by_role("button", name="Load the pasted config").click()
    page.get_by_text(re.compile(r"^Loaded pasted config as torchtune")).first.wait_for(timeout=60_000)
    page.wait_for_url(re.compile(r"framework=torchtune"), timeout=60_000)
    assert "task=lora" in page.url
    page.get_by_role("button", name=re.compile(r"^Download torchtune recipe config")).wait_for(timeout=30_000)
    page.get_by_role("heading", name="Load a framework config").scroll_into_view_if_needed()
    page.mouse.wheel(0, 420)
    page.wait_for_timeout(1000)
    _shot(page, tmp_path, "configs.png")


def _cheapest_within_a_deadline(browser, server, tmp_path) -> None:
    """Issue 26 in a real browser: a trillion-token pre-training run gets a recommendation within its deadline from
    the whole catalog, the cost-time frontier draws at a readable size, and a shorter deadline changes the
    answer."""
    page = browser.new_context(viewport={"width": 1500, "height": 1100}).new_page()
    page.goto(f"{server}?train_tokens=1000000000000&global_batch_size=512")
    page.get_by_text(VERDICT).first.wait_for(timeout=90_000)
    page.get_by_role("tab", name="Cheapest hardware").click()
    answer = page.get_by_text(re.compile(r"^Recommended: ")).first
    answer.wait_for(timeout=120_000)
    first = answer.inner_text()
    panel = page.get_by_role("tabpanel").filter(has_text="cost-time frontier")
    charts = panel.locator(".vega-embed")
    charts.nth(1).locator("canvas, svg").first.wait_for(timeout=30_000)
    assert charts.nth(1).bounding_box()["height"] >= 300  # the frontier: one line per GPU type, days by dollars
    assert page.get_by_text(re.compile(r"not searched")).count() == 0
    charts.nth(1).scroll_into_view_if_needed()
    page.wait_for_timeout(1000)
    _shot(page, tmp_path, "cheapest.png")
    box = page.get_by_role("spinbutton", name="Finish within, days (0: no deadline)")
    box.fill("3")
    box.press("Enter")
    page.wait_for_function("t => !document.body.innerText.includes(t)", arg=first, timeout=120_000)
    assert page.get_by_text(re.compile(r"^Recommended: ")).first.inner_text() != first
