"""The page's body for a valid plan: the verdict, then one function per tab."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, get_args
from urllib.parse import urlencode

import altair as alt
import pandas as pd
import streamlit as st

from planner.accuracy import time_note
from planner.catalog import Catalog, PriceKind, ProviderClass
from planner.errors import PlanError
from planner.frameworks import load_frameworks, provenance
from planner.memory import TOTALS_MEANING, Estimate, estimate
from planner.perf import StepTime, plan_time, unsupported_compute
from planner.plan.codec import plan_from_yaml, plan_to_query, plan_to_yaml
from planner.plan.config import Plan
from planner.search.explore import Fix, current_value, idle_settings, make_it_fit, room, savings, sweep, sweep_keys
from planner.search.recommend import (
    DEFAULT_HEADROOM,
    MAX_GPUS,
    SEARCH_KEYS,
    Candidate,
    RankBy,
    Recommendation,
    SearchOptions,
    recommend,
)
from planner.search.rollout import gpus_text, searched
from planner.units import counted, format_bytes, format_hours, to_unit
from planner.views.export import compare_rows, estimate_to_json, file_stem, plan_title
from ui import worker
from ui.charts import breakdown_chart, frontier_chart, recommendation_chart, sweep_chart, time_chart, timeline_chart
from ui.configs import config_export, config_import, vllm_log
from ui.state import COMPARE_KEYS, link_query, load_into_widgets, pinned_plans
from ui.verdict import headline

RANK_LABELS = {"job": "cost of the job", "hour": "cost per hour"}
PRICE_LABELS = {"on_demand": "on-demand", "reserved": "reserved", "spot": "spot"}


# A hosted page must answer, and every session shares the server's CPU: past this, the search stops and the
# page names the GPU types it did not search (the whole catalog takes about a second; the CLI allows 60 s)
APP_SEARCH_BUDGET_S = 10.0
# beyond the budget, for the worker to start, finish the estimate under way and send its answer back
WORKER_GRACE_S = 10.0


@st.cache_data(max_entries=64, show_spinner=False)
def _recommend(plan: Plan, _catalog: Catalog, catalog_key: str, options: SearchOptions) -> Recommendation | str:
    """The recommender in a worker process (ui/worker.py), remembered per plan, catalog and options; what the
    page says instead where the worker ran past its limits."""
    try:
        return worker.run(recommend, plan, _catalog, options, wait_s=(options.budget_s or 0) + WORKER_GRACE_S)
    except worker.WorkerFailed as exc:
        return f"No recommendation: {exc}."


def draw_chart(chart: alt.TopLevelMixin, **kwargs: Any) -> None:
    """An Altair chart as its Vega-Lite spec, not checked against the Vega-Lite JSON schema again: that check is two
    thirds of a chart's cost on every rerun, and tests/test_charts.py checks each chart's spec (`to_dict()`)."""
    st.vega_lite_chart(spec=chart.to_dict(validate=False), **kwargs)


def search_options(plan: Plan, price: float) -> SearchOptions:
    """The options the Cheapest hardware tab last set (defaults before it is opened), with your price for the
    plan's offering (or GPU type): one set for every view, so they all show one recommendation."""
    s = st.session_state
    mine = ((plan.hardware.offering or plan.hardware.gpu, price),) if price > 0 else ()
    return replace(s.get("search_options", SearchOptions(budget_s=APP_SEARCH_BUDGET_S)), prices=mine)


def recommendation(plan: Plan, catalog: Catalog, catalog_key: str, price: float) -> Recommendation | str:
    """The recommender with the options the Cheapest hardware tab last set (the Explore tab's capacity lines);
    a sentence where its worker failed."""
    return _recommend(plan, catalog, catalog_key, search_options(plan, price))


def _objective(plan: Plan) -> dict:
    """The tab's question: the deadline, or for serving the throughput target and latency bounds."""
    c1, c2, c3 = st.columns(3)
    if plan.workload.task != "inference":
        days = c1.number_input(
            "Finish within, days (0: no deadline)",
            0.0,
            100_000.0,
            30.0,
            1.0,
            key="deadline_days",
            help="The recommendation is the cheapest configuration that trains the job's tokens within this",
        )
        slow = c2.toggle(
            "Meet it at the slow end of published runs",
            key="deadline_slow_end",
            help="Hold the time model's job time to the deadline over the slowest of 8 in 10 published "
            "runs of the plan's kind (see the Time tab's band), so the job is likely to finish",
        )
        return {"deadline_hours": days * 24 if days else None, "deadline_at": "slow_end" if slow else "model"}
    rps = c1.number_input(
        "Requests per second (0: one replica)",
        0.0,
        1e6,
        0.0,
        key="target_rps",
        help="The fleet is sized to sustain this many requests of the plan's prompt and output",
    )
    tokens = c1.number_input("or output tokens per second (0: none)", 0.0, 1e9, 0.0, key="target_tokens")
    ttft = c2.number_input("Time to first token at most, s (0: any)", 0.0, 3600.0, 0.0, key="target_ttft")
    tpot = c3.number_input("Time per output token at most, ms (0: any)", 0.0, 60_000.0, 0.0, key="target_tpot")
    return {
        "requests_per_s": rps or None,
        "output_tokens_per_s": tokens or None,
        "ttft_s": ttft or None,
        "tpot_s": tpot / 1000 or None,
    }


def _search_inputs(plan: Plan, catalog: Catalog) -> dict:
    """The CLI's recommend options: GPU types (by vendor), provider classes, keys kept, an MFU, most GPUs."""
    with st.expander("Search options"):
        vendors = sorted({g.vendor for g in catalog.values()})
        chosen = st.multiselect("Vendors", vendors, default=vendors, key="search_vendors")
        types = [k for k, g in catalog.items() if g.vendor in chosen]
        gpus = st.multiselect(
            "GPU types (none: every type of those vendors)",
            types,
            key="search_gpus",
            format_func=lambda k: catalog[k].name,
        )
        classes = st.multiselect(
            "Providers (none: all)",
            get_args(ProviderClass),
            key="search_providers",
            help="hyperscaler: AWS, GCP, Azure, OCI; neocloud: GPU clouds; marketplace: hosts "
            "renting their machines; own: offerings you added",
        )
        fixed = st.multiselect(
            "Keep as the plan has them",
            SEARCH_KEYS,
            key="search_fixed",
            help="As the CLI's --fix: the search does not change these",
        )
        c1, c2 = st.columns(2)
        mfu = c1.number_input(
            "MFU (0: the time model)",
            0.0,
            1.0,
            0.0,
            0.05,
            key="search_mfu",
            help="As --mfu: job time is model FLOPs at this fraction of the dense peak",
        )
        most = c2.number_input("Most GPUs", 1, MAX_GPUS, 100_000, key="search_max_gpus")
    return {
        "gpus": tuple(gpus or types) if len(types) < len(catalog) or gpus else (),
        "provider_classes": tuple(classes),
        "fixed": frozenset(fixed),
        "mfu": mfu or None,
        "max_gpus": int(most),
    }


def verdict(plan: Plan, result: Estimate, time: StepTime | None, catalog: Catalog, catalog_key: str) -> None:
    """The plan's name, size, task and GPUs, its approximation warning, whether it fits, and how fast it runs."""
    headline(plan, result)
    verdict_details(plan, result, time, catalog, catalog_key)


def verdict_details(plan: Plan, result: Estimate, time: StepTime | None, catalog: Catalog, catalog_key: str) -> None:
    """Under the headline: settings that do nothing, what makes it fit (or what the free memory buys), the speed."""
    for line in idle_settings(plan, catalog):
        st.info(line)
    _fit_or_room(plan, result, catalog, catalog_key)
    if time is None:
        st.error(f"{unsupported_compute(plan, result.gpu)}: the plan cannot run as written (no time estimate).")
        return
    serving = plan.workload.task == "inference"
    cols = st.columns(3)
    cols[0].metric("seconds per batch" if serving else "seconds per step", f"{time.step_time_s:,.3g}")
    cols[1].metric("generated tokens/s per GPU" if serving else "tokens/s per GPU", f"{time.tokens_per_s_per_gpu:,.0f}")
    cols[2].metric(
        "MFU", f"{time.mfu:.1%}", help="model FLOPs per second over the dense peak of the dtype the matmuls run in"
    )
    # a metric's large value is cut to its column's width ('memory b…' at 1280 px): the bound is a line of text
    st.caption(f"Bound by **{time.bound}**: the largest kind of the step's time (the Time tab itemizes it).")


@st.cache_data(max_entries=64, show_spinner=False)
def _fixes_and_room(plan: Plan, _catalog: Catalog, catalog_key: str, fits: bool) -> tuple[list[Fix], str | None]:
    """make_it_fit or room for a plan (remembered: the room's searches run a few dozen estimates)."""
    return ([], room(plan, _catalog)) if fits else (make_it_fit(plan, _catalog), None)


def _fit_or_room(plan: Plan, result: Estimate, catalog: Catalog, catalog_key: str) -> None:
    """When the plan does not fit: the single changes that make it fit, fewest GPU-hours first, each one click
    away. When it fits: what the free memory buys."""
    fixes, buys = _fixes_and_room(plan, catalog, catalog_key, result.fits)
    if buys:
        st.caption(buys)
    if result.fits:
        return
    if not fixes:
        st.warning("No single change makes it fit this GPU: see Cheapest hardware for layouts and GPU types.")
        return
    with st.expander(f"{counted(len(fixes), 'way')} to make it fit, fewest GPU-hours first", expanded=True):
        for n, f in enumerate(fixes[:8]):
            st.button(f.text, key=f"fix_{n}", on_click=load_into_widgets, args=(f.plan,))


def timing(plan: Plan, time: StepTime | None) -> None:
    """The step's time, item by item: a chart and the table of formulas."""
    if time is None:
        st.info("No time estimate: the GPU has no tensor cores for the plan's compute dtype.")
        return
    st.caption(time.efficiency_note)
    st.caption(time_note(plan, time.step_time_s))
    draw_chart(time_chart(time), width="stretch")
    st.table(
        pd.DataFrame(
            [
                {
                    "item": i.label,
                    "seconds": round(i.seconds, 5),
                    "hidden s": round(i.hidden_s, 5),
                    "formula": i.formula,
                    "note": i.note,
                }
                for i in time.items
            ]
        ),
        hide_index=True,
    )


def _framework_settings(plan: Plan) -> None:
    recipe = load_frameworks()[plan.framework]
    with st.expander(f"What {recipe.label} set", expanded=False):
        st.caption(recipe.summary)
        st.table(
            pd.DataFrame(
                [
                    {
                        "key": x.key,
                        "value": str(x.value),
                        "in this plan": "from the framework" if kept else "changed by you",
                        "when": x.condition or "always",
                        "source": x.source,
                    }
                    for x, kept in provenance(plan)
                ]
            ),
            hide_index=True,
        )


def breakdown(plan: Plan, result: Estimate) -> None:
    """Totals, the stacked bar, the items at the peak, the moments or stages, and what the framework set."""
    cols = st.columns(4)
    for col, key in zip(cols, ("peak_allocated_bytes", "peak_reserved_bytes", "device_bytes"), strict=False):
        col.metric(
            key.removesuffix("_bytes").replace("_", " "), format_bytes(getattr(result, key)), help=TOTALS_MEANING[key]
        )
    cols[3].metric(
        "usable" if result.serving is None else "engine budget",
        format_bytes(result.usable_bytes),
        delta=format_bytes(result.headroom_bytes) + (" free" if result.fits else " short"),
    )
    draw_chart(breakdown_chart(result), width="stretch", height=190)
    pipelined = plan.parallelism.pipeline > 1
    st.subheader(f"At the peak: {result.phase}" + (f", pipeline stage {result.stage}" if pipelined else ""))
    st.table(
        pd.DataFrame(
            [
                {
                    "item": i.label,
                    "GiB": round(to_unit(i.bytes), 3),
                    "formula": i.formula,
                    "note": i.note,
                    "counts in": i.level,
                }
                for i in result.items
                if i.bytes
            ]
        ),
        hide_index=True,
    )
    worst = next(s for s in result.stages if s.index == result.stage)
    st.subheader("Memory over the step" + (f" (stage {worst.index})" if pipelined else ""))
    draw_chart(timeline_chart(worst), width="stretch")
    st.subheader("Pipeline stages" if pipelined else "Moments of the step")
    st.table(
        pd.DataFrame(
            [
                {
                    "stage": s.index,
                    "layers": s.layers,
                    "in flight": s.micro_batches_in_flight,
                    "moment": ph.name,
                    "GiB": round(to_unit(ph.allocated_bytes), 3),
                    "peak": "●" if ph is s.peak else "",
                }
                for s in result.stages
                for ph in s.phases
            ]
        ),
        hide_index=True,
    )
    if result.engine is not None:  # a GRPO server engine's GPUs: their own device, the serving plan at one wave
        st.subheader("Engine GPUs (rollout server)")
        rl = plan.workload.rl
        (st.info if result.engine.fits else st.error)(
            f"One of the {rl.engine_gpus} engine GPU(s) ({rl.engine_replicas} replica(s) of TP {rl.tensor_parallel}): "
            f"{result.engine.reason}"
        )
        st.table(
            pd.DataFrame(
                [
                    {"engine item": i.label, "GiB": round(to_unit(i.bytes), 3), "formula": i.formula, "note": i.note}
                    for i in result.engine.items
                    if i.bytes
                ]
            ),
            hide_index=True,
        )
    if result.host_bytes:
        (st.error if result.host_short else st.info)(
            f"Offloading needs {format_bytes(result.host_bytes)} of host RAM per GPU, of "
            f"{format_bytes(result.host_limit_bytes or 0)} there (the plan's host RAM per GPU, else its offering's)."
        )
    if plan.framework != "generic":
        _framework_settings(plan)


def _candidates_frame(candidates: list[Candidate], serving: bool) -> pd.DataFrame:
    """Candidates in a person's units: GiB, dollars, hours or days (serving: per million generated tokens)."""
    per = " per M tokens" if serving else " (job)"
    return pd.DataFrame(
        [
            {
                "GPU": c.gpu.name,
                "offering": f"{c.offering.provider}: {c.offering.instance}",
                "GPUs": c.count if c.replicas == 1 else f"{c.replicas} × {c.count}",
                # of a GRPO or PPO plan's GPUs, those of a server engine (the rest train)
                **({"engine GPUs": c.plan.total_gpus - c.plan.hardware.count} if searched(c.plan) else {}),
                "strategy": c.strategy,
                "GiB per GPU": round(to_unit(c.device_bytes), 1),
                "$ per GPU-hour": None if c.usd_per_gpu_hour is None else round(c.usd_per_gpu_hour, 2),
                "$ per hour": None if c.usd_per_hour is None else round(c.usd_per_hour, 2),
                f"time{per}": format_hours(c.job_hours),
                f"${per}": None if c.job_usd is None else round(c.job_usd, 2),
                "within": "yes" if c.meets_deadline else "no",
                "why": c.why,
            }
            for c in candidates
        ]
    )


def _headline(rec: Recommendation) -> None:
    """The recommendation in one sentence, its price's date and source, the time model's caveats, the ties."""
    best = rec.best
    per = "per million tokens" if rec.serving else "for the job"
    fleet = f"{best.replicas} replicas of {best.count}" if best.replicas > 1 else gpus_text(best.plan)
    money = "no price" if best.job_usd is None else f"${best.job_usd:,.2f} {per}"
    text = (
        f"{fleet} × {best.gpu.name} on {best.offering.provider} ({best.offering.instance}): {best.strategy}; "
        f"{format_hours(best.job_hours)}, {money}"
    )
    if best.meets_deadline:
        st.success(f"**Recommended:** {text}")
    else:
        st.warning(f"**Nothing meets the deadline; the fastest found:** {text}")
    if best.price is not None:
        st.caption(
            f"Price ${best.price.usd_per_gpu_hour:,.2f} per GPU-hour, {PRICE_LABELS[best.price.kind]}, "
            f"dated {best.price.date} ([source]({best.price.source}))"
            + (f"; paid for {best.paid_gpus:,} GPUs (whole instances)" if best.paid_gpus > best.count else "")
        )
    for caveat in rec.caveats(best):
        st.caption(f"⚠ The time model's weak spot: {caveat}.")
    ties = rec.ties()
    if ties:
        st.info(
            f"As good within the time model's error ({rec.tie_band:.0%}, its median error on the speed ratio of "
            f"two GPUs): "
            + "; ".join(f"{c.count:,} × {c.gpu.name} ({c.offering.provider}) ${c.job_usd:,.2f}" for c in ties)
        )


def cheapest(plan: Plan, catalog: Catalog, catalog_key: str, price: float) -> Recommendation | str:
    """The recommendation, the frontier, the best of each GPU type, buttons adopting candidates, and the GPU types
    without a candidate (unsearched ones named apart); what went wrong where the search's worker failed."""
    asked = _objective(plan)
    c1, c2, c3 = st.columns(3)
    rank_by = c1.radio("Rank by", get_args(RankBy), horizontal=True, key="rank_by", format_func=RANK_LABELS.get)
    kind = c2.radio("Prices", get_args(PriceKind), horizontal=True, key="price_kind", format_func=PRICE_LABELS.get)
    headroom = c3.slider(
        "Memory headroom", 0.0, 0.5, DEFAULT_HEADROOM, 0.01, key="headroom", help="Fraction of usable memory kept free"
    )
    st.session_state["search_options"] = SearchOptions(
        rank_by=rank_by,
        price_kind=kind,
        headroom=headroom,
        budget_s=APP_SEARCH_BUDGET_S,
        **asked,
        **_search_inputs(plan, catalog),
    )
    rec = recommendation(plan, catalog, catalog_key, price)
    if isinstance(rec, str):
        st.error(rec)
        return rec
    st.caption(
        f"Job: {rec.job_tokens:,} tokens ({rec.job_tokens_source}); {rec.time_basis}; "
        f"{rec.options.headroom:.0%} of memory kept free; "
        + (f"prices dated {rec.price_dates[0]} to {rec.price_dates[1]}." if rec.price_dates else "no prices.")
    )
    if rec.cut_after_s is not None:
        st.warning(
            f"The search stopped after {rec.cut_after_s:g} s: the GPU types listed as not searched below "
            "were not tried. `vram-planner recommend` searches the whole catalog."
        )
    if rec.best is None:
        unfit = [r.reason for r in rec.rejected if r.kind == "unfit"]
        st.warning(
            "Nothing fits this workload, even with every memory-saving technique"
            + (f": {unfit[0]}" if len(unfit) == 1 else " (each GPU type's reason below)")
            + "."
        )
    else:
        _recommendation_body(plan, rec)
    _rejected(rec)
    return rec


def _recommendation_body(plan: Plan, rec: Recommendation) -> None:
    _headline(rec)
    serving = plan.workload.task == "inference"
    bars = recommendation_chart(rec)
    draw_chart(bars, width="stretch", height=bars.height)
    if not serving:
        st.caption(
            "The cost-time frontier: each GPU type's cheapest configuration at each job time it can reach, "
            "one point per GPU count (hover for it); each type's best labelled, the deadline dashed"
        )
        frontier = frontier_chart(rec)
        draw_chart(frontier, width="stretch", height=frontier.height)
    st.dataframe(
        _candidates_frame(rec.per_type(), serving),
        hide_index=True,
        width="stretch",
        column_config={"why": st.column_config.TextColumn(width="large")},
    )
    with st.expander(f"All {len(rec.candidates)} candidates"):
        st.dataframe(_candidates_frame(list(rec.candidates), serving), hide_index=True, width="stretch")
    st.write("Adopt a candidate as the current plan:")
    for n, c in enumerate(rec.candidates[:5]):
        st.button(
            f"{c.count} × {c.gpu.name} ({c.offering.provider}): {c.strategy}",
            key=f"adopt_{n}",
            on_click=load_into_widgets,
            args=(c.plan,),
        )


REJECTION_HEADS = {
    "unfit": "GPU types have no candidate",
    "outranked": "GPU types cannot win (their least possible cost, proven, is over twice the answer's)",
    "unsearched": "GPU types not searched (the time budget ran out)",
}


def _rejected(rec: Recommendation) -> None:
    for kind, head in REJECTION_HEADS.items():
        rows = [r for r in rec.rejected if r.kind == kind]
        if rows:
            with st.expander(f"{len(rows)} {head}"):
                for r in rows:
                    st.write(r.reason)


def explore(plan: Plan, result: Estimate, catalog: dict, rec: Recommendation | str) -> None:
    """Memory against each sweep axis with capacity lines (the recommendation's GPU too, where there is one), and
    what each technique saves."""
    capacities = {result.gpu.name: result.usable_bytes}
    if not isinstance(rec, str) and rec.best is not None and rec.best.gpu.id != result.gpu.id:
        capacities[f"{rec.best.gpu.name} (recommended)"] = rec.best.gpu.usable_bytes
    for key, col in zip(sweep_keys(plan), st.columns(2), strict=True):
        with col:
            st.subheader(f"Memory vs {key.replace('_', ' ')}")
            draw_chart(
                sweep_chart(sweep(plan, catalog, key), key, current_value(plan, key), capacities), width="stretch"
            )
    st.subheader("What each technique saves")
    st.table(
        pd.DataFrame(
            [
                {
                    "technique": s.technique,
                    "saves GiB": round(to_unit(s.saved_bytes), 2),
                    "then needs GiB": round(to_unit(s.device_bytes), 2),
                    "fits": s.device_bytes <= result.usable_bytes,
                }
                for s in savings(plan, catalog)
            ]
        ),
        hide_index=True,
    )


def _pin(query: str) -> None:
    st.session_state["compare"] = [*st.session_state.get("compare", []), query][-len(COMPARE_KEYS) :]


def _unpin(n: int) -> None:
    st.session_state["compare"] = [q for i, q in enumerate(st.session_state.get("compare", [])) if i != n]


def compare(plan: Plan, result: Estimate, time: StepTime | None, catalog: dict) -> None:
    """This plan beside up to three pinned ones, the rows where they differ highlighted; the share link
    carries the pinned plans."""
    st.button(
        "Pin this plan to compare",
        key="pin",
        on_click=_pin,
        args=(urlencode(plan_to_query(plan)),),
        help=f"Up to {len(COMPARE_KEYS)} pinned plans stay here, and in the share link, while you edit",
    )
    pinned, warnings = pinned_plans()
    for w in warnings:
        st.warning(w)
    if not pinned:
        st.caption("Pin a plan, change the inputs, and the two appear side by side.")
        return
    plans = [plan, *pinned]
    ests = [result, *(estimate(p, catalog) for p in pinned)]
    rows = compare_rows(plans, ests, [time, *(plan_time(p, e.gpu) for p, e in zip(pinned, ests[1:], strict=True))])
    frame = pd.DataFrame(rows).rename(
        columns={"plan 1": "this plan", **{f"plan {n + 2}": f"pinned {n + 1}" for n in range(len(pinned))}}
    )
    shade = frame.pop("differs")
    st.dataframe(
        frame.style.apply(lambda r: ["background-color: #fff3cd" if shade[r.name] else ""] * len(r), axis=1),
        hide_index=True,
        width="stretch",
    )
    for n in range(len(pinned)):
        st.button(f"Unpin pinned {n + 1}", key=f"unpin_{n}", on_click=_unpin, args=(n,))


def _plan_upload() -> None:
    st.subheader("Load a plan file")
    plan_file = st.file_uploader(
        "Plan YAML (schema vram-planner/v1, as the CLI reads)", type=["yaml", "yml"], key="plan_upload"
    )
    if plan_file is not None and st.session_state.get("plan_upload_seen") != plan_file.file_id:
        st.session_state["plan_upload_seen"] = plan_file.file_id
        try:
            text = plan_file.getvalue().decode("utf-8", errors="replace")
            st.session_state["pending_plan"] = worker.read("plan", plan_from_yaml, text)
            st.session_state.pop("imported_config", None)  # the plan is the file's now: no config to edit
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
    c1.download_button(
        "Plan (YAML)",
        plan_to_yaml(plan),
        file_name=f"{stem}.yaml",
        mime="application/x-yaml",
        key="download_plan",
        on_click="ignore",
    )
    table = pd.DataFrame(
        [
            {"item": i.name, "label": i.label, "bytes": i.bytes, "formula": i.formula, "note": i.note, "level": i.level}
            for i in result.items
        ]
    )
    c2.download_button(
        "Breakdown (CSV)",
        table.to_csv(index=False),
        file_name="breakdown.csv",
        mime="text/csv",
        key="download_csv",
        on_click="ignore",
    )
    c3.download_button(
        "Breakdown (JSON)",
        estimate_to_json(result, time),
        file_name="breakdown.json",
        mime="application/json",
        key="download_json",
        on_click="ignore",
    )
    _plan_upload()
    config_export(plan, stem)
    config_import(plan)
    vllm_log(plan, catalog)
