"""The verdict's headline, apart from ui/tabs.py: its imports are light (no pandas, Altair or framework readers),
so a session's first run draws it before it imports the rest of the page (app.py)."""

from __future__ import annotations

import streamlit as st

from planner.accuracy import confidence_note
from planner.memory import Estimate
from planner.plan.config import Plan, context_note
from planner.plan.models import approximate_note
from planner.views.title import plan_title


def headline(plan: Plan, result: Estimate) -> None:
    """The plan's name, size, task and GPUs, its approximation warning and whether it fits: no widgets, so the page
    can draw it before the sidebar and draw it again when the sidebar changes the plan."""
    st.header(plan.name or plan_title(plan, result.gpu.name))
    st.caption(
        f"{plan.model.params.total / 1e9:.2f} B parameters"
        + (f" ({plan.model.params.active / 1e9:.2f} B active)" if plan.model.num_experts else "")
        + f" · {plan.workload.task} · {plan.hardware.count} × {result.gpu.name}"
    )
    for note in filter(None, (approximate_note(plan.model), context_note(plan))):
        st.warning(note)
    (st.success if result.fits else st.error)(result.reason)
    st.caption(confidence_note(result))
