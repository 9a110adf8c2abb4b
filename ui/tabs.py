"""The page's body for a valid plan: the verdict, then one function per tab."""

from __future__ import annotations

from functools import lru_cache
from typing import get_args
from urllib.parse import urlencode

import pandas as pd
import streamlit as st

from planner.accuracy import confidence_note
from planner.catalog import Gpu
from planner.codec import plan_from_dict, plan_to_query, plan_to_yaml
from planner.errors import PlanError
from planner.explore import Fix, current_value, idle_settings, make_it_fit, room, savings, sweep, sweep_keys
from planner.export import compare_rows, estimate_to_json, file_stem, plan_title
from planner.frameworks import load_frameworks, provenance
from planner.loader import load_yaml
from planner.memory import TOTALS_MEANING, Estimate, estimate
from planner.models import approximate_note
from planner.perf import StepTime, plan_time, unsupported_compute
from planner.plan import Plan
from planner.recommend import DEFAULT_HEADROOM, MAX_COUNT, SEARCH_KEYS, Candidate, RankBy, Recommendation, recommend
from planner.units import counted, format_bytes, to_unit
from ui.configs import config_export, config_import, vllm_log
from ui.charts import breakdown_chart, count_chart, recommendation_chart, sweep_chart, time_chart, timeline_chart
from ui.state import COMPARE_KEYS, link_query, load_into_widgets, pinned_plans

RANK_LABELS = {"job": "cost of the job", "hour": "cost per hour"}


# A hosted page must answer: the search stops here and shows what it found (the CLI allows 60 s)
APP_SEARCH_BUDGET_S = 0.8


@st.cache_data(max_entries=64, show_spinner=False)
def _recommend(plan: Plan, _catalog: dict, catalog_key: str, price: float, headroom: float, rank_by: str,
               search: tuple = ((), (), 0.0, MAX_COUNT)):
    """The recommender over the GPU types `search` keeps, with its fixed keys, MFU (0: the time model) and most
    GPUs; remembered per plan and options."""
    gpus, fixed, mfu, max_count = search
    kept = {k: g for k, g in _catalog.items() if not gpus or k in gpus}
    prices = {plan.hardware.gpu: price} if price > 0 and plan.hardware.gpu in kept else {}
    return recommend(plan, kept, prices=prices, headroom=headroom, rank_by=rank_by, budget_s=APP_SEARCH_BUDGET_S,
                     fixed=frozenset(fixed), mfu=mfu or None, max_count=max_count)


def recommendation(plan: Plan, catalog: dict, catalog_key: str, price: float) -> Recommendation:
    """The recommender with the options the Cheapest hardware tab last set (the Explore tab's capacity lines)."""
    s = st.session_state
    return _recommend(plan, catalog, catalog_key, price, s.get("headroom", DEFAULT_HEADROOM), s.get("rank_by", "job"),
                      s.get("search_options", ((), (), 0.0, MAX_COUNT)))


def _search_options(catalog: dict) -> tuple:
    """The CLI's recommend options: GPU types (by vendor), keys kept as the plan has them, an MFU, most GPUs."""
    with st.expander("Search options"):
        vendors = sorted({g.vendor for g in catalog.values()})
        chosen = st.multiselect("Vendors", vendors, default=vendors, key="search_vendors")
        types = [k for k, g in catalog.items() if g.vendor in chosen]
        gpus = st.multiselect("GPU types (none: every type of those vendors)", types, key="search_gpus",
                              format_func=lambda k: catalog[k].name)
        fixed = st.multiselect("Keep as the plan has them", SEARCH_KEYS, key="search_fixed",
                               help="As the CLI's --fix: the search does not change these")
        c1, c2 = st.columns(2)
        mfu = c1.number_input("MFU (0: the time model)", 0.0, 1.0, 0.0, 0.05, key="search_mfu",
                              help="As --mfu: job time is model FLOPs at this fraction of the dense peak")
        most = c2.number_input("Most GPUs", 1, MAX_COUNT, MAX_COUNT, key="search_max_count")
    return tuple(gpus or types), tuple(fixed), float(mfu), int(most)


def verdict(plan: Plan, result: Estimate, time: StepTime | None) -> None:
    """The plan's name, size, task and GPUs, its approximation warning, whether it fits, and how fast it runs."""
    st.header(plan.name or plan_title(plan, result.gpu.name))
    st.caption(f"{plan.model.params.total / 1e9:.2f} B parameters"
               + (f" ({plan.model.params.active / 1e9:.2f} B active)" if plan.model.num_experts else "")
               + f" · {plan.workload.task} · {plan.hardware.count} × {result.gpu.name}")
    if note := approximate_note(plan.model):
        st.warning(note)
    (st.success if result.fits else st.error)(result.reason)
    st.caption(confidence_note(result))
    for line in idle_settings(plan, {result.gpu.id: result.gpu}):
        st.info(line)
    _fit_or_room(plan, result)
    if time is None:
        st.error(f"{unsupported_compute(plan, result.gpu)}: the plan cannot run as written (no time estimate).")
        return
    serving = plan.workload.task == "inference"
    cols = st.columns(4)
    cols[0].metric("seconds per batch" if serving else "seconds per step", f"{time.step_time_s:,.3g}")
    cols[1].metric("generated tokens/s per GPU" if serving else "tokens/s per GPU", f"{time.tokens_per_s_per_gpu:,.0f}")
    cols[2].metric("MFU", f"{time.mfu:.1%}", help="model FLOPs per second over the dense bf16 peak")
    cols[3].metric("bound by", time.bound)


@lru_cache(maxsize=64)
def _fixes_and_room(plan: Plan, gpu: Gpu, fits: bool) -> tuple[list[Fix], str | None]:
    """make_it_fit or room for a plan (remembered: the room's searches run a few dozen estimates)."""
    catalog = {gpu.id: gpu}
    return ([], room(plan, catalog)) if fits else (make_it_fit(plan, catalog), None)


def _fit_or_room(plan: Plan, result: Estimate) -> None:
    """When the plan does not fit: the single changes that make it fit, least slowdown first, each one click
    away. When it fits: what the free memory buys."""
    fixes, buys = _fixes_and_room(plan, result.gpu, result.fits)
    if buys:
        st.caption(buys)
    if result.fits:
        return
    if not fixes:
        st.warning("No single change makes it fit this GPU: see Cheapest hardware for layouts and GPU types.")
        return
    with st.expander(f"{counted(len(fixes), 'way')} to make it fit", expanded=True):
        for n, f in enumerate(fixes[:6]):
            slower = "time not modelled" if f.time_factor is None else f"{f.time_factor:.2f}× the time per token"
            st.button(f"{f.change}: saves {format_bytes(f.saved_bytes)}, needs {format_bytes(f.device_bytes)}; "
                      f"{slower}", key=f"fix_{n}", on_click=load_into_widgets, args=(f.plan,))


def timing(plan: Plan, time: StepTime | None) -> None:
    """The step's time, item by item: a chart and the table of formulas."""
    if time is None:
        st.info("No time estimate: the GPU has no tensor cores for the plan's compute dtype.")
        return
    st.caption(time.efficiency_note)
    st.altair_chart(time_chart(time), width="stretch")
    st.dataframe(pd.DataFrame([{"item": i.label, "seconds": round(i.seconds, 5), "hidden s": round(i.hidden_s, 5),
                                "formula": i.formula, "note": i.note} for i in time.items]),
                 hide_index=True, width="stretch")


def _framework_settings(plan: Plan) -> None:
    recipe = load_frameworks()[plan.framework]
    with st.expander(f"What {recipe.label} set", expanded=False):
        st.caption(recipe.summary)
        st.dataframe(pd.DataFrame([{"key": x.key, "value": str(x.value),
                                    "in this plan": "from the framework" if kept else "changed by you",
                                    "when": x.condition or "always", "source": x.source}
                                   for x, kept in provenance(plan)]), hide_index=True, width="stretch")


def breakdown(plan: Plan, result: Estimate) -> None:
    """Totals, the stacked bar, the items at the peak, the moments or stages, and what the framework set."""
    cols = st.columns(4)
    for col, key in zip(cols, ("peak_allocated_bytes", "peak_reserved_bytes", "device_bytes")):
        col.metric(key.removesuffix("_bytes").replace("_", " "), format_bytes(getattr(result, key)),
                   help=TOTALS_MEANING[key])
    cols[3].metric("usable" if result.serving is None else "engine budget", format_bytes(result.usable_bytes),
                   delta=format_bytes(result.headroom_bytes) + (" free" if result.fits else " short"))
    st.altair_chart(breakdown_chart(result), width="stretch", height=190)
    pipelined = plan.parallelism.pipeline > 1
    st.subheader(f"At the peak: {result.phase}" + (f", pipeline stage {result.stage}" if pipelined else ""))
    st.dataframe(pd.DataFrame([{"item": i.label, "GiB": round(to_unit(i.bytes), 3), "formula": i.formula,
                                "note": i.note, "counts in": i.level} for i in result.items if i.bytes]),
                 hide_index=True, width="stretch")
    worst = next(s for s in result.stages if s.index == result.stage)
    st.subheader("Memory over the step" + (f" (stage {worst.index})" if pipelined else ""))
    st.altair_chart(timeline_chart(worst), width="stretch")
    st.subheader("Pipeline stages" if pipelined else "Moments of the step")
    st.dataframe(pd.DataFrame([{"stage": s.index, "layers": s.layers, "in flight": s.micro_batches_in_flight,
                                "moment": ph.name, "GiB": round(to_unit(ph.allocated_bytes), 3),
                                "peak": "●" if ph is s.peak else ""} for s in result.stages for ph in s.phases]),
                 hide_index=True, width="stretch")
    if result.host_bytes:
        st.info(f"Offloading needs {format_bytes(result.host_bytes)} of host memory per GPU.")
    if plan.framework != "generic":
        _framework_settings(plan)


def _candidates_frame(candidates: list[Candidate], serving: bool) -> pd.DataFrame:
    """Candidates in a person's units: GiB, dollars, hours (serving: per million generated tokens)."""
    per = " per M tokens" if serving else ""
    return pd.DataFrame([{"GPU": c.gpu.name, "GPUs": c.count, "strategy": c.strategy,
                          "GiB per GPU": round(to_unit(c.device_bytes), 1),
                          "$ per GPU-hour": c.usd_per_hour, f"hours{per or ' (job)'}": round(c.job_hours, 3),
                          f"${per or ' (job)'}": None if c.job_usd is None else round(c.job_usd, 2),
                          "why": c.why} for c in candidates])


def cheapest(plan: Plan, catalog: dict, catalog_key: str, price: float) -> Recommendation:
    """The recommender's candidates, a chart, buttons adopting the best five, and the GPUs that do not fit."""
    c1, c2 = st.columns(2)
    rank_by = c1.radio("Rank by", get_args(RankBy), horizontal=True, key="rank_by",
                       format_func=RANK_LABELS.get)
    headroom = c2.slider("Memory headroom", 0.0, 0.5, DEFAULT_HEADROOM, 0.01, key="headroom",
                         help="Fraction of usable memory kept free")
    st.session_state["search_options"] = _search_options(catalog)
    rec = _recommend(plan, catalog, catalog_key, price, headroom, rank_by, st.session_state["search_options"])
    st.caption(f"Job: {rec.job_tokens:,} tokens ({rec.job_tokens_source}); {rec.time_basis}; "
               f"{rec.headroom:.0%} of memory kept free.")
    if rec.cut_after_s is not None:
        st.warning(f"The search stopped after {rec.cut_after_s:g} s: these are the best answers found by then. "
                   "`python -m planner recommend` searches the whole catalog.")
    if rec.best is None:
        st.warning("No GPU in the catalog fits this workload, even with every memory-saving technique.")
    else:
        st.altair_chart(recommendation_chart(rec), width="stretch")
        st.caption("How many GPUs: the job's cost against the count, for the best strategy at each count")
        st.altair_chart(count_chart(rec), width="stretch")
        best: dict[str, Candidate] = {}
        for c in rec.candidates:  # the best of each GPU type, in rank order
            best.setdefault(c.gpu.id, c)
        serving = plan.workload.task == "inference"
        st.dataframe(_candidates_frame(list(best.values()), serving), hide_index=True,
                     width="stretch", column_config={"why": st.column_config.TextColumn(width="large")})
        with st.expander(f"All {len(rec.candidates)} candidates"):
            st.dataframe(_candidates_frame(rec.candidates, serving), hide_index=True, width="stretch")
        st.write("Adopt a candidate as the current plan:")
        for n, c in enumerate(rec.candidates[:5]):
            st.button(f"{c.count} × {c.gpu.name}: {c.strategy}", key=f"adopt_{n}", on_click=load_into_widgets,
                      args=(c.plan,))
    if rec.rejected:
        with st.expander(f"{len(rec.rejected)} GPU types do not fit"):
            for r in rec.rejected:
                st.write(r.reason)
    return rec


def explore(plan: Plan, result: Estimate, catalog: dict, rec: Recommendation) -> None:
    """Memory against each sweep axis with capacity lines, and what each technique saves."""
    capacities = {result.gpu.name: result.usable_bytes}
    if rec.best is not None and rec.best.gpu.id != result.gpu.id:
        capacities[f"{rec.best.gpu.name} (recommended)"] = rec.best.gpu.usable_bytes
    for key, col in zip(sweep_keys(plan), st.columns(2)):
        with col:
            st.subheader(f"Memory vs {key.replace('_', ' ')}")
            st.altair_chart(sweep_chart(sweep(plan, catalog, key), key, current_value(plan, key), capacities),
                            width="stretch")
    st.subheader("What each technique saves")
    st.dataframe(pd.DataFrame([{"technique": s.technique, "saves GiB": round(to_unit(s.saved_bytes), 2),
                                "then needs GiB": round(to_unit(s.device_bytes), 2),
                                "fits": s.device_bytes <= result.usable_bytes} for s in savings(plan, catalog)]),
                 hide_index=True, width="stretch")


def _pin(query: str) -> None:
    st.session_state["compare"] = [*st.session_state.get("compare", []), query][-len(COMPARE_KEYS):]


def _unpin(n: int) -> None:
    st.session_state["compare"] = [q for i, q in enumerate(st.session_state.get("compare", [])) if i != n]


def compare(plan: Plan, result: Estimate, time: StepTime | None, catalog: dict) -> None:
    """This plan beside up to three pinned ones, the rows where they differ highlighted; the share link
    carries the pinned plans."""
    st.button("Pin this plan to compare", key="pin", on_click=_pin, args=(urlencode(plan_to_query(plan)),),
              help=f"Up to {len(COMPARE_KEYS)} pinned plans stay here, and in the share link, while you edit")
    pinned, warnings = pinned_plans()
    for w in warnings:
        st.warning(w)
    if not pinned:
        st.caption("Pin a plan, change the inputs, and the two appear side by side.")
        return
    plans = [plan, *pinned]
    ests = [result, *(estimate(p, catalog) for p in pinned)]
    rows = compare_rows(plans, ests, [time, *(plan_time(p, e.gpu) for p, e in zip(pinned, ests[1:]))])
    frame = pd.DataFrame(rows).rename(columns={"plan 1": "this plan", **{f"plan {n + 2}": f"pinned {n + 1}"
                                                                           for n in range(len(pinned))}})
    shade = frame.pop("differs")
    st.dataframe(frame.style.apply(lambda r: ["background-color: #fff3cd" if shade[r.name] else ""] * len(r),
                                   axis=1), hide_index=True, width="stretch")
    for n in range(len(pinned)):
        st.button(f"Unpin pinned {n + 1}", key=f"unpin_{n}", on_click=_unpin, args=(n,))


def _plan_upload() -> None:
    st.subheader("Load a plan file")
    plan_file = st.file_uploader("Plan YAML (schema vram-planner/v1, as the CLI reads)", type=["yaml", "yml"],
                                 key="plan_upload")
    if plan_file is not None and st.session_state.get("plan_upload_seen") != plan_file.file_id:
        st.session_state["plan_upload_seen"] = plan_file.file_id
        try:
            text = plan_file.getvalue().decode("utf-8", errors="replace")
            st.session_state["pending_plan"] = plan_from_dict(load_yaml(text))
            st.session_state.pop("upload_error", None)
            st.rerun()
        except PlanError as exc:
            st.session_state["upload_error"] = str(exc)
    if st.session_state.get("upload_error"):
        st.error(f"Plan file: {st.session_state['upload_error']}")


def share(plan: Plan, result: Estimate, time: StepTime | None, catalog: dict) -> None:
    """The share link, the downloads, a plan file upload, framework configs out and in, and a vLLM log."""
    query = urlencode(link_query(plan))
    base = getattr(st.context, "url", None) or ""
    st.subheader("Share link")
    st.code(f"{base.split('?')[0]}?{query}", language=None)
    st.caption("The link holds the whole plan: opening it in a fresh browser reproduces this page.")
    c1, c2, c3 = st.columns(3)
    stem = file_stem(plan.name or plan_title(plan, result.gpu.name))
    c1.download_button("Plan (YAML)", plan_to_yaml(plan), file_name=f"{stem}.yaml", mime="application/x-yaml",
                       key="download_plan", on_click="ignore")
    table = pd.DataFrame([{"item": i.name, "label": i.label, "bytes": i.bytes, "formula": i.formula, "note": i.note,
                           "level": i.level} for i in result.items])
    c2.download_button("Breakdown (CSV)", table.to_csv(index=False), file_name="breakdown.csv", mime="text/csv",
                       key="download_csv", on_click="ignore")
    c3.download_button("Breakdown (JSON)", estimate_to_json(result, time), file_name="breakdown.json",
                       mime="application/json", key="download_json", on_click="ignore")
    _plan_upload()
    config_export(plan, stem)
    config_import(plan)
    vllm_log(plan, catalog)
