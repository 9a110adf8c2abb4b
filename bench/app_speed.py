"""Speed of the app as a person sees it: `streamlit run app.py` driven in Debian's Chromium by Playwright.

Goals (issue 30, item 7): a sidebar change → its new verdict on screen in at most 150 ms median and 300 ms p90
with any tab open, and the first verdict at most 1.5 s after the page is asked for.

The change → verdict time is taken inside the page, in the browser's own clock: from the Enter key that commits a
new sequence length (its keydown event's timestamp) to the first animation frame after the verdict's text changed
in the DOM (Streamlit keeps the old verdict on screen, greyed, until the rerun's replaces it). The first verdict is
the page's navigation start to the first frame with a verdict. Each tab is opened, then the input changed
`--changes` times through values that give a new verdict each time (each a plan the server has not seen, then
each seen before when `--changes` passes the list's length).

    python bench/app_speed.py                 # the browser table (median and p90 ms per tab, first verdict)
    python bench/app_speed.py --write-docs    # and that table in docs/app.md, dated, with the machine it ran on
    python bench/app_speed.py --server        # Streamlit's own script run per rerun, through AppTest
    python bench/app_speed.py --cold 5        # the first verdict of a fresh server (its first session's imports)

The server mode times ScriptRunner._run_script under AppTest (the same script run a browser session triggers),
so the browser's share of the wait is the difference. On a shared 2-core machine, run it a few times.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

from _path import ROOT

import doc_tables

CHROMIUM = "/usr/bin/chromium"
HEADER = "| tab open | change → verdict, median ms | p90 ms |"
DOC = doc_tables.DOCS / "app.md"
TABS = ("Breakdown", "Time", "Explore", "Cheapest hardware", "Compare", "Share and export")
LENGTHS = (8192, 2048, 16384, 1024, 6144, 3072, 12288, 4096)  # each gives the default plan a new verdict
WAIT_MS = 120_000  # a step this slow is stuck, not slow
SERVE_WAIT_S = 240  # a server not up by then is stuck
VERDICT_JS = """() => [...document.querySelectorAll('[data-testid="stAlert"]')].map(e => e.textContent)
    .find(t => /^(fits on|does not fit on) /.test(t)) || null"""
# Resolves with ms from the next Enter keydown to the first frame after the verdict's text differs from `old`
ARM_JS = (
    """old => { const verdict = """
    + VERDICT_JS
    + """;
  window.__changed = new Promise(done => { let t0 = null;
    document.addEventListener('keydown', e => { if (e.key === 'Enter') t0 = e.timeStamp; },
                              {capture: true, once: true});
    const seen = new MutationObserver(() => { const v = verdict();
      if (t0 !== null && v !== null && v !== old) { seen.disconnect();
        requestAnimationFrame(() => done(performance.now() - t0)); } });
    seen.observe(document.body, {subtree: true, childList: true, characterData: true}); }); }"""
)
# ms from navigation start to the first frame showing a verdict
FIRST_JS = (
    """() => new Promise(done => { const verdict = """
    + VERDICT_JS
    + """;
  const check = () => verdict() ? done(performance.now()) : requestAnimationFrame(check); check(); })"""
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(wait_s: float) -> tuple[subprocess.Popen, str]:
    """`streamlit run app.py` on a free local port, once its health check answers (the browser test's server too);
    RuntimeError where it does not within `wait_s` (a machine this busy is stuck, not slow)."""
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            "app.py",
            "--server.headless=true",
            f"--server.port={port}",
            "--server.address=127.0.0.1",
            "--browser.gatherUsageStats=false",
            "--server.fileWatcherType=none",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                return proc, url
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise RuntimeError(f"streamlit did not start within {wait_s} s")


def _serve() -> tuple[subprocess.Popen, str]:
    try:
        return serve(SERVE_WAIT_S)
    except RuntimeError as exc:
        raise SystemExit(str(exc)) from None


def _p90(times: list[float]) -> float:
    times = sorted(times)
    return times[round(0.9 * (len(times) - 1))]


def _open(browser, url: str):
    """A fresh browser session on the page, and ms to its first verdict."""
    page = browser.new_context(viewport={"width": 1500, "height": 1100}).new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(url, wait_until="commit")
    first = page.evaluate(FIRST_JS)
    return page, first


def _changes(page, tab: str, count: int, start: int) -> list[float]:
    """ms from each Enter to its verdict with the tab `tab` open, the lengths taken on from the `start`-th."""
    page.get_by_role("tab", name=tab).click()
    page.wait_for_timeout(300)
    box = page.get_by_role("spinbutton", name="Sequence length")
    box.wait_for()
    times = []
    for n in range(count + 1):  # the first change only settles the tab (its own first render is not a change)
        value = LENGTHS[(start + n) % len(LENGTHS)]  # never the value the box holds
        box.fill(str(value))
        page.evaluate(ARM_JS, page.evaluate(VERDICT_JS))
        box.press("Enter")
        took = page.evaluate("() => window.__changed")
        if n:
            times.append(took)
        page.wait_for_load_state("networkidle")
        page.wait_for_timeout(150)  # the rest of the rerun (the tab's content) lands before the next change
    return times


def browser_table(changes: int, loads: int) -> None:
    from playwright.sync_api import sync_playwright

    proc, url = _serve()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=CHROMIUM,
                args=["--no-sandbox", "--disable-background-networking", "--disable-component-update"],
            )
            firsts = []
            for _ in range(loads):
                page, first = _open(browser, url)
                firsts.append(first)
                page.context.close()
            page, _ = _open(browser, url)
            print(doc_tables.machine() + "\n")
            print(f"{changes} changes per tab, {loads} fresh sessions.\n")
            print(HEADER)
            print("|---" * (HEADER.count("|") - 1) + "|")
            every = []
            for n, tab in enumerate(TABS):
                times = _changes(page, tab, changes, n * (changes + 1))
                every += times
                print(f"| {tab} | {statistics.median(times):.0f} | {_p90(times):.0f} |", flush=True)
            print(f"| every tab | {statistics.median(every):.0f} | {_p90(every):.0f} |")
            print(
                f"\nFirst verdict after the page is asked for: median {statistics.median(firsts):.0f} ms, "
                f"worst {max(firsts):.0f} ms over {loads} fresh sessions"
            )
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def cold_loads(count: int) -> None:
    """The first verdict of a fresh server's first session (its imports included), `count` servers in turn."""
    from playwright.sync_api import sync_playwright

    firsts = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        for _ in range(count):
            proc, url = _serve()
            try:
                page, first = _open(browser, url)
                firsts.append(first)
                page.context.close()
            finally:
                proc.terminate()
                proc.wait(timeout=20)
        browser.close()
    print(f"first verdict of a fresh server: median {statistics.median(firsts):.0f} ms, worst {max(firsts):.0f} ms")


def server_table() -> None:
    """Streamlit's own script run per rerun after an input change, through AppTest."""
    from streamlit.runtime.scriptrunner.script_runner import ScriptRunner
    from streamlit.testing.v1 import AppTest

    runs: list[float] = []
    original = ScriptRunner._run_script

    def timed(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            runs.append((time.perf_counter() - start) * 1000)

    ScriptRunner._run_script = timed
    print("| script run after an input change | median ms | p90 ms |")
    print("|---|---|---|")
    for view in TABS:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        at.session_state["view"] = view
        at.run()
        times = []
        for value in LENGTHS + LENGTHS:
            at.number_input(key="sequence_length").set_value(value).run()
            times.append(runs[-1])
        print(f"| {view} | {statistics.median(times):.0f} | {_p90(times):.0f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", action="store_true", help="time Streamlit's script run through AppTest instead")
    parser.add_argument("--changes", type=int, default=12, help="input changes per tab")
    parser.add_argument("--loads", type=int, default=5, help="fresh page loads for the first verdict")
    parser.add_argument("--cold", type=int, default=0, help="instead: the first verdict of this many fresh servers")
    parser.add_argument("--write-docs", action="store_true", help="also put the browser table in docs/app.md")
    args = parser.parse_args()
    if args.write_docs and (args.server or args.cold):
        parser.error("--write-docs writes the browser table only")
    if args.server:
        server_table()
    elif args.cold:
        cold_loads(args.cold)
    else:
        browser_table(args.changes, args.loads)


if __name__ == "__main__":
    doc_tables.run(main, DOC)
