"""Framework configs in the app: a plan written as a framework's own config, and a config loaded as the plan.

The formats and every rule of reading and writing them are planner/formats'; this page only offers them.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from planner.errors import PlanError
from planner.formats import (
    FORMATS,
    export_config,
    export_onto,
    formats_for,
    plan_from_config,
    read_config,
    read_lines,
    unused_lines,
)
from planner.formats.base import Imported, get_key
from planner.formats.vllm_log import (
    VllmLog,
    calibration_lines,
    compare,
    comparison_rows,
    parse_vllm_log,
    plan_from_vllm_log,
)
from planner.plan.config import Plan
from planner.plan.models import model_to_dict
from ui import worker
from ui.state import PASTE_MAX_CHARS

AUTO = "detect from the text"
EDIT, WRITE = "edit the loaded config", "write a new config"
UPLOAD_TYPES = ["toml", "yaml", "yml", "json", "sh", "txt", "log"]


def config_export(plan: Plan, stem: str) -> None:
    """The plan as a config of a framework that runs it, to download or copy; what the format cannot carry."""
    st.subheader("As a framework config")
    offered = formats_for(plan)
    if not offered:
        return
    names = [f.name for f in offered]
    default = next((i for i, f in enumerate(offered) if f.framework == plan.framework), 0)
    # one choice per framework, so a plan loaded under another framework offers its own format first
    name = st.selectbox(
        "Format", names, index=default, format_func=lambda n: FORMATS[n].label, key=f"export_format_{plan.framework}"
    )
    fmt = FORMATS[name]
    loaded = st.session_state.get("imported_config")
    onto = (
        loaded is not None
        and loaded["format"] == fmt.name
        and st.radio("Write", [EDIT, WRITE], key="export_onto", horizontal=True) == EDIT
    )
    try:
        if onto:
            edited, lost = export_onto(plan, fmt, loaded["text"], base=loaded["plan"])
            text = edited.text
        else:
            text, lost = export_config(plan, fmt)
    except PlanError as exc:
        st.info(f"{fmt.label} cannot run this plan: {exc}")
        return
    st.download_button(
        f"Download {fmt.label}",
        text,
        file_name=loaded["name"] if onto and "." in loaded["name"] else f"{stem}{fmt.suffix}",
        key="download_config",
        on_click="ignore",
    )
    if onto:
        st.text(
            "\n".join(f"changed {c.line()}" for c in edited.changes)
            or f"unchanged: the plan changes none of {loaded['name']}'s keys"
        )
    for key, (planned, runs) in lost.items():
        st.caption(f"{fmt.name} cannot say {key} = {planned} ({fmt.cannot_say[key]}); the config runs {runs}.")
    st.code(text, language={".toml": "toml", ".json": "json", ".yaml": "yaml", ".sh": "bash"}.get(fmt.suffix))


def _queue(imported: Imported, plan: Plan, name: str) -> Plan:
    """Queue the plan a config (or a log) says for the widgets: the current model, GPU and count where it is
    silent (the config's own count wins: a single-device recipe is 1 GPU; torchtitan's "-1 = the rest" then
    resolves from the current one)."""
    st.session_state["pending_plan"] = plan_from_config(
        imported, default_model=model_to_dict(plan.model), gpu=plan.hardware.gpu, gpus=plan.hardware.count, name=name
    )
    return st.session_state["pending_plan"]


def _load(text: str, source: str, plan: Plan) -> None:
    """Read a config (in a worker process: ui/worker.py) and queue its plan; what it says and what it could not
    use is kept to show."""
    fmt = st.session_state.get("import_format", AUTO)
    imported = worker.read("config", read_config, text, format=None if fmt == AUTO else fmt)
    if get_key(imported.plan, "hardware.count") is None:  # read over the current count, as export edits it
        imported = worker.read("config", read_config, text, format=imported.format, gpus=plan.hardware.count)
    # the config itself, to export edited (ui config_export); its plan is what the plan's changes are made from
    st.session_state["imported_config"] = {
        "text": text,
        "format": imported.format,
        "name": source,
        "plan": _queue(imported, plan, source),
    }
    named = f"; the config names {imported.model_name!r}" if imported.model_name else ""
    kept = (
        []
        if "model" in imported.plan
        else [f"model: kept from the current plan ({plan.model.preset or 'custom'}{named})"]
    )
    st.session_state["import_report"] = (
        f"Loaded {source} as {FORMATS[imported.format].label}: {len(imported.read)} keys read",
        read_lines(imported),
        [*kept, *unused_lines(imported)],
    )


def config_import(plan: Plan) -> None:
    """Upload or paste a framework config; it replaces the plan (the model, GPU and count kept where it is silent)."""
    st.subheader("Load a framework config")
    st.selectbox(
        "Its format", [AUTO, *FORMATS], format_func=lambda n: n if n == AUTO else FORMATS[n].label, key="import_format"
    )
    upload = st.file_uploader(
        "A torchtitan TOML, torchtune / Axolotl / accelerate / TrainingArguments YAML, "
        "DeepSpeed JSON, or a Megatron / vLLM / SGLang command line",
        type=UPLOAD_TYPES,
        key="config_upload",
    )
    st.text_area("…or paste it", key="config_text", height=160, max_chars=PASTE_MAX_CHARS)
    pasted = st.button("Load the pasted config", key="load_config")
    try:
        if upload is not None and st.session_state.get("config_upload_seen") != upload.file_id:
            st.session_state["config_upload_seen"] = upload.file_id
            _load(upload.getvalue().decode("utf-8", errors="replace"), upload.name, plan)
            st.rerun()
        if pasted and st.session_state["config_text"].strip():
            _load(st.session_state["config_text"], "pasted config", plan)
            st.rerun()
    except PlanError as exc:
        st.error(f"Config: {exc}")
    _report()


def _report() -> None:
    if "import_report" not in st.session_state:
        return
    headline, read, unused = st.session_state["import_report"]
    st.success(headline)
    for line in unused:
        st.warning(line)
    with st.expander("What each key became"):
        st.text("\n".join(read) or "nothing")


def _load_log_plan(log: VllmLog, plan: Plan, catalog: dict) -> None:
    """Queue the plan a vLLM log's arguments say (the current model, GPU and count where it is silent)."""
    st.session_state.pop("imported_config", None)  # the plan is the log's now: no config to edit
    try:
        _queue(plan_from_vllm_log(log, catalog), plan, "vLLM log")
    except PlanError as exc:  # a callback's exception would replace the page: shown under the log instead
        st.session_state["log_plan_error"] = str(exc)


def vllm_log(plan: Plan, catalog: dict) -> None:
    """vLLM's start-up figures beside the planner's for the serving plan, and the KV capacity they calibrate."""
    st.subheader("Beside vLLM's start-up log")
    text = st.text_area(
        "Paste what vLLM printed while starting (model loading, KV cache memory, graph capture, non-default args)",
        key="vllm_log",
        height=160,
        max_chars=PASTE_MAX_CHARS,
    )
    if not text.strip():
        return
    serving = plan.workload.inference.gpu_memory_utilization is not None
    if "log_plan_error" in st.session_state:
        st.error(f"The log's plan: {st.session_state.pop('log_plan_error')}")
    try:
        log = worker.read("log", parse_vllm_log, text)
        st.button("Load the log's plan", key="load_log_plan", on_click=_load_log_plan, args=(log, plan, catalog))
        if not serving:
            st.info(
                "The plan is not a serving plan (workload.inference.gpu_memory_utilization): load the log's plan "
                "to set it beside the log."
            )
            return
        cmp = compare(plan, log, catalog)
    except PlanError as exc:
        st.error(f"vLLM log: {exc}")
        return
    if cmp.note:
        note = cmp.note.removeprefix("warning: ")
        st.warning(note[0].upper() + note[1:] + ".")
    frame = pd.DataFrame(comparison_rows(cmp)).rename(columns={"difference": "planner − log"})
    st.dataframe(frame, hide_index=True)
    for line in calibration_lines(plan, catalog[plan.hardware.gpu].name, cmp, log):
        st.caption(line[0].upper() + line[1:] + ".")
