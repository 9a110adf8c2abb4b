"""The app's state: widget keys (the plan's leaf keys, as in a share link) ↔ the plan.

No plan rules live here. `widget_values` lays a plan out as widget values; `plan_dict` builds the plan file's dict
back from the widgets the last run drew, faithfully, and an invalid combination reaches the plan, whose error the
page shows. A plan key whose widget is hidden (the training settings of an inference plan, the pipeline schedule
without a pipeline) keeps the value it was loaded with, so an uploaded plan is downloaded exactly, as long as the
plan accepts it beside what is drawn: `current_plan_dict` drops, one by one, the hidden values the plan's errors
name (a derived count after a degree changed, a training setting of a plan turned to inference).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import fields, replace
from typing import Any
from urllib.parse import parse_qsl

import streamlit as st

from planner.catalog import Catalog, load_catalog
from planner.errors import PlanError
from planner.loader import CONFIG
from planner.plan.choices import CHOICES
from planner.plan.codec import (
    integers,
    leaf_text,
    plan_from_dict,
    plan_from_query,
    plan_to_dict,
    plan_to_query,
    takes_integers,
)
from planner.plan.config import Distillation, Inference, Lora, Plan, Preference, Rl, section_keys
from planner.plan.docs import key_doc
from planner.plan.models import MODEL_KEYS
from planner.plan.ppo import Ppo

DEFAULT_PLAN = {
    "model": {"preset": "llama-3.1-8b"},
    "workload": {"sequence_length": 4096, "micro_batch_size": 1, "global_batch_size": 64},
    "parallelism": {"zero_stage": 3},
    "hardware": {"gpu": "h100-sxm-80gb", "count": 8},
}
# plan keys the app derives instead of asking: data parallelism is what the other degrees leave of the GPU count
DERIVED = frozenset({"data"})
CUSTOM, PARAMS = "custom", "params"  # the preset choices "your own architecture" and "from a parameter count"
ARCH_INTS = {
    "num_layers": "Layers",
    "hidden_size": "Hidden size",
    "num_attention_heads": "Attention heads",
    "num_kv_heads": "KV heads",
    "head_dim": "Head dim",
    "intermediate_size": "MLP intermediate size",
    "vocab_size": "Vocabulary",
}
MOE_INTS = {
    "num_experts": "Experts (0: dense)",
    "experts_per_token": "Experts per token",
    "moe_intermediate_size": "Expert intermediate size",
    "shared_experts": "Shared experts",
    "first_dense_layers": "Dense layers first",
}
MLA_INTS = {
    "kv_lora_rank": "KV latent rank (0: standard attention)",
    "q_lora_rank": "Query latent rank (0: none)",
    "qk_rope_head_dim": "RoPE key dim per head",
    "v_head_dim": "Value dim per head",
}
# Hybrid models' recurrent mixers (0: not set; the pattern says which are used)
HYBRID_INTS = {
    "mamba_num_heads": "Mamba-2 heads (0: none)",
    "mamba_head_dim": "Mamba-2 head dim",
    "ssm_state_size": "Mamba-2 state size",
    "mamba_n_groups": "Mamba-2 groups",
    "mamba_conv_kernel": "Mamba-2 conv taps",
    "linear_num_key_heads": "Gated DeltaNet key heads (0: none)",
    "linear_num_value_heads": "Gated DeltaNet value heads",
    "linear_key_head_dim": "Gated DeltaNet key dim",
    "linear_value_head_dim": "Gated DeltaNet value dim",
    "linear_conv_kernel_dim": "Gated DeltaNet conv taps",
}
# A group of model widgets switched off by a 0 in its first one (as each label says)
GROUPS = {
    "num_experts": tuple(MOE_INTS),
    "sliding_window": ("sliding_window", "global_attention_every"),
    "kv_lora_rank": tuple(MLA_INTS),
    "serving": ("gpu_memory_utilization", "max_num_seqs", "fraction_scope", "cuda_graphs"),
}
# Plan keys a plan may leave out or set to None (unused MoE, windows, latent attention; "no limit" counts), and
# the widget value that stands for "not set": a widget holding it adds nothing to the plan
WIDGET_WHEN_ABSENT = {
    **dict.fromkeys(MOE_INTS, 0),
    "sliding_window": 0,
    "global_attention_every": 0,
    "context_window": 0,
    "qk_norm": False,
    **dict.fromkeys(MLA_INTS, 0),
    "moe_capacity_factor": 0.0,
    "rl_engine_gpus": 0,  # a server engine's GPUs: 0 is its default, one replica
    "steps": 0,
    "quant_group_size": 0,
    "prefill_chunk_tokens": 0,
    "pipeline_layers": "",
    "max_num_seqs": 0,
    "reduce_bucket_elements": 0,
    "optimizer_block_size": 0,
    "sub_group_elements": 0,
    "layer_pattern": "",
    "offering": "",
    "host_memory_gib_per_gpu": 0.0,
    "train_tokens": "",
    **dict.fromkeys(
        (
            "mamba_num_heads",
            "mamba_head_dim",
            "ssm_state_size",
            "linear_num_key_heads",
            "linear_num_value_heads",
            "linear_key_head_dim",
            "linear_value_head_dim",
        ),
        0,
    ),
    # the model's defaults stand for themselves
    "mamba_n_groups": 1,
    "mamba_conv_kernel": 4,
    "linear_conv_kernel_dim": 4,
}


def _paths() -> dict[str, tuple[str, ...]]:
    """Widget key -> its path in the plan dict."""
    paths = {
        "name": ("name",),
        "framework": ("framework",),
        "framework_release": ("framework_release",),
        "params_text": ("model", "params"),
    }
    paths.update({key: ("model", key) for key in MODEL_KEYS if key != "preset"})
    blocks = {"lora": Lora, "inference": Inference}
    # the objective's blocks: the preference loss, its reference (None: the loss and task's default) and log-probs,
    # and GRPO's keys (prefixed: gpu_memory_utilization is also a serving key)
    paths["loss_type"] = ("workload", "preference", "loss_type")
    paths["pref_reference"] = ("workload", "preference", "reference")
    paths["pref_log_probs"] = ("workload", "preference", "log_probs")
    paths.update({f"rl_{f.name}": ("workload", "rl", f.name) for f in fields(Rl)})
    # distillation's and ppo's keys are prefixed too: loss_chunks is also a techniques key
    paths.update({f"kd_{f.name}": ("workload", "distillation", f.name) for f in fields(Distillation)})
    paths.update({f"ppo_{f.name}": ("workload", "ppo", f.name) for f in fields(Ppo)})
    for section in ("workload", "precision", "techniques", "parallelism", "hardware"):
        for key in section_keys(section):
            if key in ("preference", "rl", "distillation", "ppo"):
                continue
            if key in blocks:
                paths.update({f.name: (section, key, f.name) for f in fields(blocks[key])})
            else:
                paths[key] = (section, key)
    return paths


PATHS = _paths()
WIDGET_OF = {".".join(path): key for key, path in PATHS.items()}  # dotted plan key -> its widget's key
# each plan input's help: its key's doc, the docstring under the plan's field (planner/plan/docs.py)
HELP = {key: key_doc(".".join(path)) for key, path in PATHS.items()}
# keys whose widget is a text box of comma-separated integers (a plan list of numbers)
INTEGER_LISTS = tuple(key for key, path in PATHS.items() if takes_integers(path))


def _integers(text: str) -> list[int] | str:
    """A text box's comma-separated integers; the text itself where it is not that (the plan says why)."""
    try:
        return integers(text)
    except ValueError:
        return text


BLOCK_PREFIX = {
    "rl": "rl_",
    "distillation": "kd_",
    "ppo": "ppo_",
}  # the widget keys of an objective's block (as the links')
# choices whose None is a value of its own: the teacher's compute dtype, the reference the loss and task resolve
NONE_CHOSEN = ("kd_teacher_weights", "pref_reference")


def widget_values(plan: Plan) -> dict[str, Any]:
    """Every widget's value for `plan`; blocks its task does not use keep their defaults for when it changes."""
    d, m = plan_to_dict(plan), plan.model
    out = {
        **{f.name: getattr(Lora(), f.name) for f in fields(Lora)},
        **{f.name: getattr(Inference(), f.name) for f in fields(Inference)},
        **{f"rl_{f.name}": getattr(Rl(), f.name) for f in fields(Rl)},
        **{f"kd_{f.name}": getattr(Distillation(), f.name) for f in fields(Distillation)},
        **{f"ppo_{f.name}": getattr(Ppo(), f.name) for f in fields(Ppo)},
        "loss_type": "dpo",
        "pref_reference": None,
        "pref_log_probs": Preference().log_probs,
        "name": d.get("name", ""),
        "framework": d["framework"],
        "framework_release": d.get("framework_release", ""),
        "preset": m.preset or (PARAMS if m.approx_params else CUSTOM),
    }
    out.update({k: v for k, v in d["model"].items() if k not in ("preset", "params")})
    if m.approx_params:  # the guessed architecture fills the custom fields, for editing from there
        out.update({k: getattr(m, k) for k in (*ARCH_INTS, "mlp", "norm", "tie_embeddings", "bias")})
    out["params_text"] = f"{(m.approx_params or m.params.total) / 1e9:,.3g}B"
    for section in ("workload", "precision", "techniques", "parallelism", "hardware"):
        for key, value in d[section].items():
            if key in BLOCK_PREFIX:
                value = {BLOCK_PREFIX[key] + k: v for k, v in value.items()}
            out.update(value if isinstance(value, dict) else {key: value})
    out.update({key: out.get(key) or absent for key, absent in WIDGET_WHEN_ABSENT.items()})
    out["train_tokens"] = str(out["train_tokens"])  # a text box: a count with or without a suffix (1T)
    if plan.workload.objective == "preference":
        out.update(_preference_widgets(plan))
    # a choice the plan leaves unset (the fp8 recipe of a bf16 plan) shows its first value
    out.update(
        {
            key: CHOICES[".".join(path)][0]
            for key, path in PATHS.items()
            if out.get(key) is None and ".".join(path) in CHOICES and key not in NONE_CHOSEN
        }
    )
    out.update({key: leaf_text(out[key]) if out.get(key) else "" for key in INTEGER_LISTS})
    out["serving"] = out["gpu_memory_utilization"] is not None
    out["gpu_memory_utilization"] = out["gpu_memory_utilization"] or 0.9
    return {key: list(value) if isinstance(value, tuple) else value for key, value in out.items()}


def _preference_widgets(plan: Plan) -> dict[str, Any]:
    """The preference block's widgets: its reference None where it is what the loss and task resolve (so a change
    of loss or task moves it along), else as the plan sets it."""
    pref = plan.workload.preference
    unset = replace(plan, workload=replace(plan.workload, preference=replace(pref, reference=None)))
    default = plan_from_dict(plan_to_dict(unset)).workload.reference
    reference = None if plan.workload.reference == default else plan.workload.reference
    return {"loss_type": pref.loss_type, "pref_reference": reference, "pref_log_probs": pref.log_probs}


def load_into_widgets(plan: Plan) -> None:
    """Set every widget from `plan` (before the widgets are drawn: on a first run or in a callback)."""
    values = widget_values(plan)
    st.session_state.update(values)
    st.session_state["plan_keys"] = tuple(values)
    st.session_state["framework_loaded"] = plan.framework


def plan_dict(values: Mapping[str, Any], shown: Collection[str]) -> dict[str, Any]:
    """The plan file's dict from the values of the widgets `shown`, each as it is."""
    off = {key for switch, group in GROUPS.items() if not values.get(switch, True) for key in group}
    out: dict[str, Any] = {"model": {}}
    for key in shown:
        value = _integers(values[key]) if key in INTEGER_LISTS else values[key]
        if key == "preset" and value not in (CUSTOM, PARAMS):
            out["model"]["preset"] = value
        if key not in PATHS or key in off or (not value and (key in WIDGET_WHEN_ABSENT or isinstance(value, list))):
            continue  # not a plan key, switched off, or "not set"
        *parents, leaf = PATHS[key]
        node = out
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = list(value) if isinstance(value, (list, tuple)) else value
    return out


def with_hidden(values: Mapping[str, Any], shown: Collection[str], keys: Collection[str]) -> dict[str, Any]:
    """The plan dict of the widgets `shown` and of the hidden plan keys among `keys` (not the model's: the preset
    and the drawn architecture say it whole), less each hidden value the plan refuses beside the others."""
    hidden = [
        k for k in keys if k not in shown and k not in DERIVED and k in values and k in PATHS and PATHS[k][0] != "model"
    ]
    for _ in range(len(hidden) + 1):
        d = plan_dict(values, [*shown, *hidden])
        try:
            plan_from_dict(d)
            return d
        except PlanError as exc:
            culprit = next((k for k in hidden if ".".join(PATHS[k]) == exc.field), None)
            if culprit is None:  # an error about what is drawn: the page shows it
                break
            hidden.remove(culprit)
    return plan_dict(values, shown)


def current_plan_dict() -> dict[str, Any]:
    """The plan dict of the widgets as the last run drew them, with the hidden values the plan accepts."""
    state = st.session_state
    return with_hidden(state, state.get("shown", ()), state.get("plan_keys", ()))


def early_plan() -> tuple[Plan, Catalog, str] | None:
    """The plan of this run's widget values as the last run drew them, in that run's catalog (on a session's first
    run: the plan the link loaded, in the project's catalog), so the page can draw the verdict before the sidebar,
    whose hundred-odd widgets the browser takes longest over; the page draws it again where the sidebar's plan
    differs. None where it does not read as a plan."""
    s = st.session_state
    s["error_field"] = None
    try:
        plan = plan_from_dict(current_plan_dict()) if "shown" in s else s.pop("link_plan", None)
    except PlanError as exc:
        s["error_field"] = exc.field  # its widget gets a slot for the error (`drawn`)
        return None
    return None if plan is None else (plan, *(s.get("drawn_catalog") or (project_catalog(), "project")))


# The most text a paste box holds: the readers' own cap (planner/loader.py). The browser stops typing and pasting
# there, and Streamlit cuts a longer value from any client to it, so no reader is handed more.
PASTE_MAX_CHARS = CONFIG.max_bytes


# share-link parameters holding the plans pinned for comparison, each a whole plan's own link query
COMPARE_KEYS = ("cmp1", "cmp2", "cmp3")


def pinned_plans() -> tuple[list[Plan], list[str]]:
    """The plans pinned for comparison, and a warning per pinned link that no longer reads as a plan."""
    plans, warnings = [], []
    for n, query in enumerate(st.session_state.get("compare", []), start=1):
        plan, bad = plan_from_query(dict(parse_qsl(query)), DEFAULT_PLAN, gpus=project_catalog())
        plans.append(plan)
        warnings += [f"compared plan {n}: {w}" for w in bad]
    return plans, warnings


def link_query(plan: Plan) -> dict[str, str]:
    """The page's link: the plan's own parameters and those of the plans pinned for comparison."""
    return {**plan_to_query(plan), **dict(zip(COMPARE_KEYS, st.session_state.get("compare", []), strict=False))}


def drawn(widget: Callable, *args: Any, key: str, **kwargs: Any) -> Any:
    """Draw an input widget and note its key: the plan is built from the widgets drawn. A plan input's help is its
    key's doc (HELP) unless the call gives one. Under the widget of the field the plan's error names (as
    `early_plan` found it), a slot takes that error once the plan is built (`show_error_at`); the other widgets get
    none, which would be a hundred empty elements for the browser. Inside a closed input group (ui/sidebar.py
    `group`) the key is noted and its value returned, undrawn: the plan is the same whether the group is open or
    not."""
    st.session_state.setdefault("drawing", []).append(key)
    if st.session_state.get("group_closed"):  # its key counts as drawn; the closed group shows no widget
        return st.session_state.get(key)
    kwargs.setdefault("help", HELP.get(key))
    value = widget(*args, key=key, **kwargs)
    if ".".join(PATHS.get(key, ())) == st.session_state.get("error_field"):
        st.session_state.setdefault("slots", {})[key] = st.empty()  # this run's slot under the widget
    return value


def show_error_at(exc: PlanError) -> bool:
    """Show a plan error under the widget of the key it names; False when no drawn widget holds that key."""
    slots = st.session_state.get("slots", {})
    key = next((k for k, path in PATHS.items() if ".".join(path) == exc.field and k in slots), None)
    if key is None:
        return False
    slots[key].error(str(exc))
    return True


@st.cache_resource
def project_catalog() -> Catalog:
    return load_catalog()


def start_session() -> None:
    """On a session's first run the URL (or the default plan) fills the widgets; an uploaded plan file waiting
    from the last run fills them now; every widget value is kept for when its widget returns."""
    if "loaded" not in st.session_state:
        params = {key: st.query_params.get_all(key) for key in st.query_params if key not in COMPARE_KEYS}
        plan, warnings = (
            plan_from_query(params, DEFAULT_PLAN, gpus=project_catalog())
            if params
            else (plan_from_dict(DEFAULT_PLAN), [])
        )
        load_into_widgets(plan)
        pinned = [st.query_params[key] for key in COMPARE_KEYS if key in st.query_params]
        st.session_state.update(link_warnings=warnings, price=0.0, loaded=True, compare=pinned, link_plan=plan)
    if "pending_plan" in st.session_state:  # an uploaded plan file, loaded before any widget exists
        load_into_widgets(st.session_state.pop("pending_plan"))
    # Streamlit forgets the state of widgets not drawn in a run (the training inputs while the task is
    # inference); re-assigning every plan key keeps each value for when its widget returns.
    for key in [k for k in st.session_state.get("plan_keys", ()) if k in st.session_state]:
        st.session_state[key] = st.session_state[key]
