"""VRAM Planner web app: a thin Streamlit page over the `planner` package, wired from `ui/`.

The plan is the one piece of state. On a session's first run it comes from the URL (a share link) and fills the
widgets (ui/state.py); the sidebar's widgets (ui/sidebar.py) build it back on every run, and it writes itself
to the URL. The tabs (ui/tabs.py) show it. Adopting a recommendation or uploading a plan file loads a plan into
the widgets the same way.

The verdict's headline (ui/verdict.py) is drawn first, from the widget values as the last run drew them
(ui/state.early_plan), so the browser shows it before it takes in the sidebar and the open tab; it is drawn again,
in its place, where the sidebar's plan differs. It is drawn before the page's heavier imports too, so a cold
server's first session sees it without waiting for pandas and Altair.
"""

from __future__ import annotations

import streamlit as st

from planner.errors import PlanError
from planner.memory import estimate
from planner.perf import plan_time
from planner.plan.codec import plan_from_dict
from planner.plan.models import presets
from ui import verdict
from ui.state import current_plan_dict, early_plan, link_query, show_error_at, start_session

st.set_page_config(page_title="VRAM Planner", page_icon="🧮", layout="wide")
start_session()
for warning in st.session_state.get("link_warnings", []):
    st.warning(f"Share link: {warning}")
notices, head = st.container(), st.empty()
early = early_plan()
try:
    if early is not None:
        with head.container():
            verdict.headline(early[0], estimate(early[0], early[1]))
except PlanError:
    early = None
# A server's first session imports the rest of the page here, after its verdict is on its way to the browser:
# pandas, Altair and the framework readers took about 3 s on a cold 2-core server (later runs find them imported)
from ui import tabs  # noqa: E402
from ui.sidebar import sidebar  # noqa: E402

catalog, catalog_key = sidebar(presets())
st.session_state["drawn_catalog"] = (catalog, catalog_key)
try:
    plan = plan_from_dict(current_plan_dict())
    result = estimate(plan, catalog)
    time = plan_time(plan, result.gpu)
    st.session_state["last_valid"] = (plan, result, time)
    st.query_params.from_dict(link_query(plan))
except PlanError as exc:
    at_field = show_error_at(exc)
    notices.error(f"{exc}" + (" (shown at the field in the sidebar)" if at_field else ""))
    if "last_valid" not in st.session_state:
        head.empty()
        st.stop()
    plan, result, time = st.session_state["last_valid"]
    notices.warning("Stale: the results below are of the last valid plan, until the error above is fixed.")
    early = None
if early is None or (early[0], early[2]) != (plan, catalog_key):
    with head.container():
        verdict.headline(plan, result)
tabs.verdict_details(plan, result, time, catalog, catalog_key)
# only the open tab runs (its search or sweeps are what a rerun would otherwise wait for)
tab_plan, tab_time, tab_explore, tab_cheapest, tab_compare, tab_share = st.tabs(
    ["Breakdown", "Time", "Explore", "Cheapest hardware", "Compare", "Share and export"], key="view", on_change="rerun"
)
price = float(st.session_state.get("price") or 0.0)
if tab_plan.open:
    with tab_plan:
        tabs.breakdown(plan, result)
if tab_time.open:
    with tab_time:
        tabs.timing(plan, time)
if tab_cheapest.open:
    with tab_cheapest:
        tabs.cheapest(plan, catalog, catalog_key, price)
if tab_explore.open:
    with tab_explore:
        tabs.explore(plan, result, catalog, tabs.recommendation(plan, catalog, catalog_key, price))
if tab_compare.open:
    with tab_compare:
        tabs.compare(plan, result, time, catalog)
if tab_share.open:
    with tab_share:
        tabs.share(plan, result, time, catalog)
