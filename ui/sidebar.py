"""The sidebar: one function per input group. Choices come from the plan's Literals (planner.plan.choices) and what
a task or model offers from the plan module's tables; every plan input is drawn through `state.drawn`."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from functools import partial
from typing import get_args

import streamlit as st

from planner.catalog import Catalog, check_offering, parse_catalog
from planner.errors import PlanError
from planner.formats.hf_config import shaped_model
from planner.frameworks import load_frameworks, lookup, without_keys
from planner.plan.choices import CHOICES
from planner.plan.codec import plan_from_dict
from planner.plan.config import (
    ADAPTER_TASKS,
    EIGHT_BIT_OPTIMIZERS,
    FROZEN_WEIGHTS,
    INFERENCE_FRAMEWORKS,
    MAX_BATCH,
    MAX_DEGREE,
    MAX_GPUS,
    MAX_SEQUENCE,
    OBJECTIVE_TASKS,
    TRAINING_TASKS,
    LogProbs,
    Plan,
    Precision,
    PreferenceLoss,
    Reference,
    RolloutEngine,
    SleepLevel,
    default_weights,
)
from planner.plan.dtypes import DEFAULT_GROUP_SIZE
from planner.plan.models import MAX_CONTEXT, Preset, model_to_dict, presets
from planner.plan.ppo import PpoReward
from ui import worker
from ui.state import (
    ARCH_INTS,
    CUSTOM,
    HELP,
    HYBRID_INTS,
    MLA_INTS,
    MOE_INTS,
    PARAMS,
    PASTE_MAX_CHARS,
    WIDGET_OF,
    current_plan_dict,
    drawn,
    load_into_widgets,
    project_catalog,
    widget_values,
)


def _on_preset() -> None:
    """A preset fills the architecture (so that 'custom' starts from it); the rest of the plan is kept when it
    is valid for the new model, else the preset's defaults are used. A served model's weights follow its
    checkpoint (DeepSeek-V3 ships in fp8)."""
    preset = st.session_state["preset"]
    st.session_state.pop("hf_note", None)  # the imported config.json's preset is no longer the model
    if preset == CUSTOM:
        return
    model = {"params": st.session_state["params_text"]} if preset == PARAMS else {"preset": preset}
    d = current_plan_dict()
    if d.get("workload", {}).get("task") == "inference":
        d.get("precision", {}).pop("weights", None)
    try:
        load_into_widgets(plan_from_dict({**d, "model": model}))
    except PlanError:
        try:
            load_into_widgets(plan_from_dict({"model": model, "hardware": {"gpu": st.session_state["gpu"]}}))
        except PlanError:  # an unreadable count: the page shows the plan's error, the widgets stay
            pass


def _on_hf_import() -> None:
    """The architecture of a pasted or uploaded config.json replaces the model; the rest of the plan stays."""
    upload = st.session_state.get("hf_file")
    text = upload.getvalue().decode("utf-8", errors="replace") if upload is not None else st.session_state["hf_text"]
    st.session_state.pop("hf_note", None)
    try:
        model = worker.read("hf_config", shaped_model, text)
        load_into_widgets(plan_from_dict({**current_plan_dict(), "model": model_to_dict(model)}))
        st.session_state.pop("hf_error", None)
    except PlanError as exc:
        st.session_state["hf_error"] = str(exc)
        return
    if model.preset:
        st.session_state["hf_note"] = shaped_like(model.preset)


def shaped_like(preset: str) -> str:
    """What the page says of a config.json whose architecture is exactly a preset's (the CLI's shape_note)."""
    return (
        f"config.json: shaped like {presets()[preset].name} ({preset}): its layers, hidden size, heads, kv heads, "
        "head dim, intermediate size, vocabulary and every other architecture field are the preset's, so the plan "
        "uses the preset"
    )


def _on_framework() -> None:
    """A new framework re-derives the keys it or the previous framework governs (from its recipes, or the
    planner's defaults); every other key of the plan stays. A serving framework brings task inference, a
    training one leaves it for pretraining."""
    recipes = load_frameworks()
    new, old = st.session_state["framework"], st.session_state.get("framework_loaded", "generic")
    d = without_keys(current_plan_dict(), {x.key for name in (new, old) for x in recipes[name].settings})
    d.pop("framework_release", None)  # a release names a version of the framework it was given with
    if new in INFERENCE_FRAMEWORKS:
        d["workload"] = {"task": "inference"}
    elif d["workload"]["task"] not in TRAINING_TASKS and new != "generic":
        d["workload"] = {"task": "pretrain"}
    _reload({**d, "framework": new})


def _on_task() -> None:
    """A new task re-derives the framework's keys that still hold what the framework (or the planner) gave for
    the previous task, so that the plan does not depend on whether the framework or the task was chosen first;
    a key you changed stays, and so does every other widget."""
    s = st.session_state
    governed = {x.key for x in load_frameworks()[s["framework"]].settings}
    if not governed:
        return
    d = current_plan_dict()
    before = _accepted(without_keys({**d, "workload": {**d["workload"], "task": s["task_drawn"]}}, governed))
    given = {} if isinstance(before, PlanError) else widget_values(before)  # refused: all of them re-derived
    keys = {key for key in governed if (widget := WIDGET_OF.get(key)) in given and given[widget] == s.get(widget)}
    after = _accepted(without_keys(d, keys if given else governed))
    if not isinstance(after, PlanError):
        s.update(
            {
                WIDGET_OF[key]: value
                for key in (keys if given else governed)
                if (value := widget_values(after).get(WIDGET_OF.get(key))) is not None
            }
        )


def _on_release() -> None:
    """Another release of the framework re-derives the keys its recipe governs (settings that changed between
    releases); every other key stays."""
    framework = st.session_state["framework"]
    _reload(without_keys(current_plan_dict(), {x.key for x in load_frameworks()[framework].settings}))


# what a re-derivation never drops to make the plan valid: what was just chosen, the GPUs and the model
KEPT = frozenset({"framework", "framework_release", "workload.task", "hardware.gpu", "hardware.count", "model"})


def _accepted(d: dict) -> Plan | PlanError:
    """The plan `d` less, one by one, the values it refuses beside what was chosen (ZeRO under a serving
    framework), back to the planner's defaults; the error where a chosen value itself is refused. (Each pass
    drops a key `d` has, so it ends.)"""
    while True:
        try:
            return plan_from_dict(d)
        except PlanError as exc:
            if exc.field in KEPT or exc.field.split(".")[0] in KEPT or not lookup(d, exc.field)[0]:
                return exc
            d = without_keys(d, {exc.field})


def _reload(d: dict) -> None:
    """Fill the widgets from the plan `d` (a framework's keys re-derived) as the plan accepts it; where what was
    chosen is refused, the widgets stay and the sidebar says why, once."""
    plan = _accepted(d)
    if isinstance(plan, PlanError):
        st.session_state["framework_error"] = str(plan)
    else:
        load_into_widgets(plan)


def plan_inputs() -> None:
    """The plan's name and its framework."""
    st.title("VRAM Planner")
    drawn(st.text_input, "Plan name", key="name", max_chars=200, placeholder="empty: named from the plan")
    recipes = load_frameworks()
    drawn(
        st.selectbox,
        "Framework",
        CHOICES["framework"],
        key="framework",
        on_change=_on_framework,
        format_func=lambda k: recipes[k].label,
        help=HELP["framework"] + " The Breakdown tab lists what it set.",
    )
    if st.session_state["framework"] != "generic":
        releases = ", ".join(recipes[st.session_state["framework"]].releases)
        drawn(
            st.text_input,
            "Framework release (optional)",
            key="framework_release",
            max_chars=40,
            on_change=_on_release,
            placeholder="latest",
            help=HELP["framework_release"] + f" This framework's releases: {releases or 'none listed'}.",
        )
    if error := st.session_state.pop("framework_error", None):  # shown once: the next change is a new plan
        st.error(f"Framework: {error}")


@contextmanager
def group(label: str, key: str) -> Iterator[bool]:
    """A collapsed input group whose widgets are drawn only while it is open (opening it reruns the page): each
    widget drawn costs the browser a render on every rerun, and a closed group's would be a third of the sidebar.
    Its plan widgets are still run, undrawn (`drawn`), so the plan and its rules see them as when open; their
    values stay in the session (ui/state.start_session). Yields whether it is open."""
    with st.expander(label, key=key, on_change="rerun") as box:
        st.session_state["group_closed"] = not box.open
        try:
            yield bool(box.open)
        finally:
            st.session_state["group_closed"] = False


@st.cache_resource(max_entries=8)
def _uploaded_catalog(text: str) -> Catalog:
    """An uploaded catalog, read once in a worker process (ui/worker.py) rather than on every rerun."""
    return worker.read("gpu_catalog", parse_catalog, text)


def _on_catalog_upload() -> None:
    """Keep an uploaded catalog's text in the session: its uploader is drawn only while its group is open."""
    upload = st.session_state["catalog_upload"]
    st.session_state["catalog_text"] = None if upload is None else upload.getvalue().decode("utf-8", errors="replace")


def _uploaded(text: str | None) -> tuple[Catalog, str, str | None]:
    """The catalog in use, its cache key, and why an uploaded one could not be read."""
    if text is not None:
        try:
            return _uploaded_catalog(text), hashlib.sha256(text.encode()).hexdigest(), None
        except PlanError as exc:
            return project_catalog(), "project", str(exc)
    return project_catalog(), "project", None


def catalog_inputs() -> tuple[Catalog, str]:
    """The GPU catalog (the project's, or an uploaded one) with the offerings you added, and a key naming it for
    caches."""
    text = st.session_state.get("catalog_text")
    catalog, catalog_key, error = _uploaded(text)
    with group("GPU catalog and prices", "group_catalog") as shown:
        if shown:
            st.file_uploader(
                "Your own catalog (same format as gpu_catalog.yaml)",
                type=["yaml", "yml"],
                key="catalog_upload",
                on_change=_on_catalog_upload,
            )
            if error is not None:
                st.error(error)
            elif text is not None:
                st.caption(f"Using your catalog: {len(catalog)} GPUs, {len(catalog.offerings)} offerings.")
                st.button("Use the project's catalog", on_click=st.session_state.pop, args=("catalog_text",))
            dates = catalog.price_dates()
            st.caption(
                f"{len(catalog.offerings)} offerings; prices dated {dates[0]} to {dates[1]}"
                if dates
                else "No prices in this catalog."
            )
            _own_offering_form(catalog)
    own = st.session_state.get("own_offerings", [])
    if own:
        catalog = catalog.with_offerings(own)
        catalog_key += "+" + hashlib.sha256(repr(own).encode()).hexdigest()
    if st.session_state["gpu"] not in catalog:
        st.session_state["gpu"] = next(iter(catalog))
    return catalog, catalog_key


def _own_offering_form(catalog: Catalog) -> None:
    """Your own cluster or quote as an offering ("512 × H100, 8 per node, 400 Gb/s per GPU, $2.10/h")."""
    with st.form("own_offering", border=False):
        st.write("Add your own offering")
        gpu = st.selectbox("GPU", list(catalog), format_func=lambda k: catalog[k].name, key="own_gpu")
        name = st.text_input("Name", "our cluster", max_chars=60, key="own_name")
        c1, c2 = st.columns(2)
        per_node = c1.number_input("GPUs per node", 1, 1024, 8, key="own_per_node")
        most = c2.number_input("Most GPUs", 1, 1_048_576, 512, key="own_max")
        network = c1.number_input("Network per GPU, Gb/s (0: none)", 0.0, 100_000.0, 400.0, key="own_network")
        host = c2.number_input("Host RAM per GPU, GiB (0: unknown)", 0.0, 1_000_000.0, 0.0, key="own_host")
        usd = st.number_input("Price, USD per GPU-hour", 0.0, 10_000.0, 2.10, key="own_price")
        if st.form_submit_button("Add offering"):
            _add_own_offering(gpu, name, int(per_node), int(most), network, host, usd)
    if st.session_state.get("own_offering_error"):
        st.error(st.session_state["own_offering_error"])
    for n, o in enumerate(st.session_state.get("own_offerings", [])):
        st.button(
            f"Remove {o.provider} ({o.max_gpus:,} × {catalog[o.gpu].name})",
            key=f"own_remove_{n}",
            on_click=_remove_own_offering,
            args=(n,),
        )


def _add_own_offering(gpu: str, name: str, per_node: int, most: int, network: float, host: float, usd: float) -> None:
    """The form's offering, checked as a catalog entry is; an error shows under the form."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "own"
    entry = {
        "id": f"own-{slug}",
        "gpu": gpu,
        "provider": name or "own",
        "provider_class": "own",
        "instance": f"{per_node}-GPU node",
        "gpus_per_instance": per_node,
        "instance_link": "fabric",
        "host_memory_gib_per_gpu": host or None,
        "cpu_cores_per_gpu": None,
        "network": "infiniband" if network else "none",
        "network_gbit_per_s_per_gpu": network or None,
        "max_gpus": most if network else per_node,
        "spec_source": "entered in the app",
        "prices": [
            {
                "kind": "on_demand",
                "usd_per_gpu_hour": usd,
                "date": date.today().isoformat(),
                "source": "entered in the app",
            }
        ]
        if usd
        else [],
    }
    try:
        offering = check_offering("your offering", entry)
    except PlanError as exc:
        st.session_state["own_offering_error"] = str(exc)
        return
    st.session_state["own_offering_error"] = ""
    kept = [o for o in st.session_state.get("own_offerings", []) if o.id != offering.id]
    st.session_state["own_offerings"] = [*kept, offering]


def _remove_own_offering(n: int) -> None:
    own = list(st.session_state.get("own_offerings", []))
    st.session_state["own_offerings"] = own[:n] + own[n + 1 :]


def _hf_import() -> None:
    with st.popover("Import a Hugging Face config.json", width="stretch"):
        st.text_area(
            "Paste config.json",
            key="hf_text",
            height=320,
            width=640,
            max_chars=PASTE_MAX_CHARS,
            placeholder='{"model_type": "llama", ...}',
        )
        st.file_uploader("…or upload it", type=["json"], key="hf_file")
        st.button(
            "Import architecture",
            key="hf_import",
            on_click=_on_hf_import,
            help="GQA, MoE, MLA, sliding-window and hybrid (Mamba-2, Gated DeltaNet) keys are read; an architecture "
            "that is exactly a preset's plans as that preset, any other becomes a custom one",
        )
    if st.session_state.get("hf_error"):
        st.error(f"config.json: {st.session_state['hf_error']}")
    elif st.session_state.get("hf_note"):
        st.info(st.session_state["hf_note"])


def _architecture() -> None:
    for key, label in ARCH_INTS.items():
        drawn(st.number_input, label, 1, 4_194_304, key=key)
    drawn(st.selectbox, "MLP", CHOICES["model.mlp"], key="mlp")
    if st.session_state["mlp"] == "gelu":
        drawn(st.selectbox, "GeLU", CHOICES["model.activation"], key="activation")
    drawn(st.selectbox, "Norm", CHOICES["model.norm"], key="norm")
    drawn(st.checkbox, "Tied embeddings", key="tie_embeddings")
    drawn(st.checkbox, "Biases", key="bias")
    drawn(st.checkbox, "Per-head q/k norms", key="qk_norm")
    for key, label in MOE_INTS.items():
        drawn(st.number_input, label, 0, 1_048_576, key=key)
    drawn(st.number_input, "Sliding window (0: none)", 0, MAX_SEQUENCE, key="sliding_window")
    drawn(st.number_input, "Global attention every n-th layer (0: none)", 0, 1024, key="global_attention_every")
    drawn(
        st.number_input,
        "Context window (0: not known)",
        0,
        MAX_CONTEXT,
        key="context_window",
    )
    for key, label in MLA_INTS.items():
        drawn(
            st.number_input,
            label,
            0,
            1_048_576,
            key=key,
        )
    drawn(
        st.text_input,
        "Layer pattern (empty: all attention)",
        key="layer_pattern",
    )
    drawn(st.selectbox, "Pattern style", CHOICES["model.pattern_style"], key="pattern_style")
    for key, label in HYBRID_INTS.items():
        drawn(st.number_input, label, 0, 1_048_576, key=key)


def model_inputs(models: dict[str, Preset]) -> None:
    """A preset, a parameter count, an imported config.json, or a custom architecture."""
    with st.expander("Model", expanded=True):
        drawn(
            st.selectbox,
            "Preset",
            [CUSTOM, PARAMS, *models],
            key="preset",
            on_change=_on_preset,
            format_func=lambda k: (
                {CUSTOM: "Custom architecture", PARAMS: "From a parameter count (approximate)"}.get(k) or models[k].name
            ),
            help="A published model, your own architecture, or just a size such as 13B",
        )
        if st.session_state["preset"] == PARAMS:
            drawn(
                st.text_input,
                "Parameters",
                key="params_text",
            )
        _hf_import()
        if st.session_state["preset"] == CUSTOM:
            _architecture()


def _inference_workload() -> None:
    drawn(st.number_input, "Concurrent sequences", 1, MAX_BATCH, key="batch_size")
    drawn(st.number_input, "Prompt tokens", 1, MAX_SEQUENCE, step=256, key="prompt_tokens")
    drawn(st.number_input, "Output tokens", 1, MAX_SEQUENCE, step=64, key="output_tokens")
    st.checkbox(
        "Serving engine (vLLM-style)",
        key="serving",
        help="The engine claims a fraction of GPU memory; the KV cache fills what is left",
    )
    if st.session_state["serving"]:
        drawn(st.slider, "GPU memory fraction", 0.05, 1.0, step=0.01, key="gpu_memory_utilization")
        drawn(
            st.selectbox,
            "The fraction covers",
            CHOICES["workload.inference.fraction_scope"],
            key="fraction_scope",
        )
        drawn(
            st.checkbox,
            "CUDA graphs",
            key="cuda_graphs",
        )
        drawn(
            st.number_input,
            "Max running sequences (0: vLLM's default)",
            0,
            MAX_BATCH,
            key="max_num_seqs",
        )
    else:
        drawn(
            st.checkbox,
            "Static KV cache",
            key="static_cache",
        )
        if st.session_state["static_cache"]:
            drawn(
                st.checkbox,
                "Causal mask buffer",
                key="mask_buffer",
            )
        drawn(
            st.checkbox,
            "K and V repeated to the query heads",
            key="expand_kv",
        )
        drawn(
            st.checkbox,
            "Decode on SDPA's math backend",
            key="math_sdpa_decode",
        )
        drawn(
            st.checkbox,
            "Quantized on the GPU after loading",
            key="quantize_on_load",
        )
    drawn(st.number_input, "Prefill chunk tokens (0: whole prompt batch)", 0, MAX_SEQUENCE, key="prefill_chunk_tokens")


def _training_workload() -> None:
    drawn(st.number_input, "Sequence length", 1, MAX_SEQUENCE, step=512, key="sequence_length")
    drawn(
        st.number_input,
        "Micro-batch size",
        1,
        MAX_BATCH,
        key="micro_batch_size",
    )
    drawn(
        st.number_input,
        "Global batch size",
        1,
        1 << 30,
        key="global_batch_size",
    )
    drawn(st.number_input, "Steps of the job (0: not given)", 0, 10**12, key="steps")
    drawn(
        st.text_input,
        "or tokens of the job (e.g. 1T, 500B)",
        key="train_tokens",
        max_chars=40,
        placeholder="neither: priced per billion tokens",
    )


def _lora() -> None:
    drawn(st.number_input, "LoRA rank", 1, 65_536, key="rank")
    drawn(st.number_input, "LoRA alpha", 0.0, 1e6, key="alpha")
    drawn(st.multiselect, "LoRA targets", CHOICES["workload.lora.targets"], key="targets")
    drawn(st.number_input, "LoRA dropout", 0.0, 0.99, step=0.05, key="dropout")
    drawn(
        st.selectbox,
        "Adapter variant",
        CHOICES["workload.lora.variant"],
        key="variant",
    )


def _objective() -> None:
    """What a fine-tune optimizes, and the few keys of its objective."""
    drawn(
        st.selectbox,
        "Objective",
        CHOICES["workload.objective"],
        key="objective",
    )
    objective = st.session_state["objective"]
    if objective == "preference":
        drawn(st.selectbox, "Preference loss", get_args(PreferenceLoss), key="loss_type")
        drawn(
            st.selectbox,
            "Reference",
            (None, *get_args(Reference)),
            key="pref_reference",
            format_func=lambda r: "the loss and task's default" if r is None else r,
        )
        drawn(st.selectbox, "Log-probs", get_args(LogProbs), key="pref_log_probs")
    if objective == "distillation":
        drawn(st.selectbox, "Teacher", sorted(presets()), key="kd_teacher", help="the frozen teacher's preset")
        drawn(st.number_input, "KD loss chunks", 1, 1024, key="kd_loss_chunks")
    if objective == "ppo":
        _ppo()
    if objective not in ("grpo", "ppo"):
        return
    drawn(st.number_input, "Generations per prompt (G)", 1 if objective == "ppo" else 2, 1024, key="rl_num_generations")
    drawn(st.number_input, "Completion length", 1, MAX_SEQUENCE, key="rl_completion_length")
    drawn(st.number_input, "KL beta (0: no reference)", 0.0, 1e6, step=0.01, key="rl_beta")
    drawn(st.selectbox, "Rollout engine", get_args(RolloutEngine), key="rl_engine")
    drawn(st.number_input, "Engine tensor parallel", 1, MAX_DEGREE, key="rl_tensor_parallel")
    if st.session_state["rl_engine"] == "colocate":
        drawn(st.slider, "Engine memory fraction", 0.05, 0.95, step=0.05, key="rl_gpu_memory_utilization")
        drawn(
            st.selectbox,
            "Engine sleep level",
            get_args(SleepLevel),
            key="rl_sleep_level",
        )
        drawn(st.checkbox, "Offload the policy during rollout", key="rl_offload_during_rollout")
    else:
        drawn(st.number_input, "Engine GPUs (0: one replica)", 0, MAX_GPUS, key="rl_engine_gpus")
        drawn(st.checkbox, "Overlap rollout and training (one step off policy)", key="rl_async_rollout")


def _ppo() -> None:
    """PPO's loop and where its other models wait (workload.ppo)."""
    drawn(st.number_input, "PPO epochs", 1, 1000, key="ppo_epochs")
    drawn(st.number_input, "Mini-batches per rollout", 1, 4096, key="ppo_mini_batches")
    drawn(st.selectbox, "Reward", get_args(PpoReward), key="ppo_reward", help="rule: a function, no reward model")
    drawn(st.checkbox, "Offload the value model outside its passes", key="ppo_critic_offload")
    drawn(st.checkbox, "Offload the reference and reward weights", key="ppo_frozen_offload")


def workload_inputs() -> None:
    """The task, then its sequences and batches (training), generation (inference) and adapters (LoRA)."""
    with st.expander("Workload", expanded=True):
        drawn(
            st.selectbox,
            "Task",
            CHOICES["workload.task"],
            key="task",
            on_change=_on_task,
        )
        task = st.session_state["task_drawn"] = st.session_state["task"]
        if task in TRAINING_TASKS:
            _training_workload()
        else:
            _inference_workload()
        if task in OBJECTIVE_TASKS:
            _objective()
        if task in ADAPTER_TASKS:
            _lora()


def _frozen_weights(task: str) -> None:
    """The dtype of frozen or served weights, among those the task allows (the task's default when the
    current one is not)."""
    s = st.session_state
    allowed = FROZEN_WEIGHTS[task]
    if s["weights"] not in allowed:
        s["weights"] = default_weights(task, Precision(compute=s["compute"]).activation_dtype)
    drawn(st.selectbox, "Weights (frozen or served)", allowed, key="weights")
    if s["weights"] in DEFAULT_GROUP_SIZE:
        drawn(st.number_input, "Quantization block size (0: default)", 0, 65_536, key="quant_group_size")
    if s["weights"] == "nf4":
        drawn(st.checkbox, "Double quantization", key="double_quant")


def _training_precision() -> None:
    drawn(
        st.selectbox,
        "Master weights",
        CHOICES["precision.master_weights"],
        key="master_weights",
    )
    drawn(st.selectbox, "Gradients", CHOICES["precision.gradients"], key="gradients")
    drawn(st.selectbox, "Optimizer", CHOICES["precision.optimizer"], key="optimizer")
    drawn(st.selectbox, "Optimizer states", CHOICES["precision.optimizer_state"], key="optimizer_state")
    drawn(
        st.selectbox,
        "Optimizer implementation",
        CHOICES["precision.optimizer_impl"],
        key="optimizer_impl",
    )
    if st.session_state["optimizer"] in EIGHT_BIT_OPTIMIZERS:
        drawn(
            st.selectbox,
            "8-bit optimizer library",
            CHOICES["precision.optimizer_library"],
            key="optimizer_library",
        )
        drawn(
            st.number_input,
            "Values per scale (0: default 256)",
            0,
            65_536,
            key="optimizer_block_size",
        )
        if st.session_state["optimizer_library"] == "bitsandbytes":
            drawn(
                st.checkbox,
                "32-bit states for embeddings",
                key="fp32_embedding_states",
            )


def precision_inputs() -> None:
    """Compute dtype and its float8 recipe, frozen or served weights, then the KV cache (inference) or the
    master weights, gradients and optimizer (training)."""
    task = st.session_state["task"]
    with group("Precision", "group_precision"):
        drawn(
            st.selectbox,
            "Compute",
            CHOICES["precision.compute"],
            key="compute",
        )
        if st.session_state["compute"] == "fp8":
            drawn(
                st.selectbox,
                "Low-precision recipe",
                CHOICES["precision.fp8_recipe"],
                key="fp8_recipe",
            )
            if task in TRAINING_TASKS:
                drawn(
                    st.checkbox,
                    "Float8 all-gather",
                    key="fp8_all_gather",
                )
        if task in FROZEN_WEIGHTS:
            _frozen_weights(task)
        if task in TRAINING_TASKS:
            _training_precision()
        else:
            drawn(st.selectbox, "KV cache", CHOICES["precision.kv_cache"], key="kv_cache")


def _training_techniques() -> None:
    drawn(
        st.selectbox,
        "Loss",
        CHOICES["techniques.loss"],
        key="loss",
    )
    if st.session_state["loss"] == "chunked":
        drawn(st.number_input, "Loss chunks", 1, 1024, key="loss_chunks")
    drawn(
        st.checkbox,
        "Optimizer in backward",
        key="optimizer_in_backward",
    )
    if st.session_state["compile"]:
        drawn(
            st.selectbox,
            "Compiled",
            CHOICES["techniques.compile_scope"],
            key="compile_scope",
        )
    drawn(
        st.checkbox,
        "Activation offloading",
        key="activation_offload",
    )


def _has_experts(models: dict[str, Preset]) -> bool:
    s = st.session_state
    if s["preset"] == PARAMS:
        return False
    return bool(s["num_experts"] if s["preset"] == CUSTOM else models[s["preset"]].model.num_experts)


def technique_inputs(models: dict[str, Preset]) -> None:
    """Checkpointing, attention and offload; the loss and training-only techniques; MoE capacity."""
    with group("Techniques", "group_techniques"):
        drawn(
            st.selectbox,
            "Activation checkpointing",
            CHOICES["techniques.activation_checkpointing"],
            key="activation_checkpointing",
        )
        if st.session_state["activation_checkpointing"] == "every_k":
            drawn(st.number_input, "Checkpoint every k-th layer", 1, 1024, key="checkpoint_every")
        drawn(
            st.selectbox,
            "Attention",
            CHOICES["techniques.attention"],
            key="attention",
        )
        drawn(
            st.checkbox,
            "torch.compile",
            key="compile",
        )
        if st.session_state["task"] in TRAINING_TASKS:
            drawn(
                st.selectbox,
                "Offload",
                CHOICES["techniques.offload"],
                key="offload",
            )
            _training_techniques()
        drawn(
            st.checkbox,
            "Expandable segments",
            key="expandable_segments",
        )
        if _has_experts(models):
            drawn(
                st.number_input,
                "MoE capacity factor (0: dropless)",
                0.0,
                64.0,
                step=0.25,
                key="moe_capacity_factor",
            )


def _pipeline() -> None:
    drawn(st.number_input, "Pipeline parallel", 1, 1024, key="pipeline")
    if st.session_state["pipeline"] > 1:
        drawn(st.selectbox, "Pipeline schedule", CHOICES["parallelism.pipeline_schedule"], key="pipeline_schedule")
        if st.session_state["pipeline_schedule"] == "interleaved_1f1b":
            drawn(st.number_input, "Virtual stages per GPU", 1, 1024, key="virtual_stages")
        drawn(
            st.selectbox,
            "Layer split",
            CHOICES["parallelism.pipeline_split"],
            key="pipeline_split",
        )
        drawn(
            st.text_input,
            "Layers per chunk (optional)",
            key="pipeline_layers",
            placeholder="e.g. 12,17,17,12",
        )


def _data_degree() -> str:
    """The data-parallel degree the GPU count leaves, as text ("–" where the degrees do not divide the count)."""
    s = st.session_state
    split = s["tensor"] * s["pipeline"] * s["context"]
    return str(s["count"] // split) if s["count"] % split == 0 else "–"


def _zero() -> None:
    """ZeRO's stage and DeepSpeed's buffers, where there are ranks to shard over (data × context > 1)."""
    s = st.session_state
    if s["count"] // (s["tensor"] * s["pipeline"]) <= 1:
        return
    drawn(st.selectbox, "ZeRO stage", CHOICES["parallelism.zero_stage"], key="zero_stage")
    if s["zero_stage"]:
        drawn(
            st.number_input,
            "DeepSpeed reduce bucket, elements (0: none)",
            0,
            10**11,
            step=10**8,
            key="reduce_bucket_elements",
        )
        drawn(
            st.number_input,
            "DeepSpeed step sub-group, elements (0: none)",
            0,
            10**13,
            step=10**8,
            key="sub_group_elements",
        )
    if s["zero_stage"] == 3 and s["task"] in ADAPTER_TASKS:
        drawn(
            st.checkbox,
            "FSDP1 flat parameters",
            key="flat_params",
        )


def _offering_label(catalog: Catalog, key: str) -> str:
    if not key:
        return "the GPU's usual server (no price)"
    o = catalog.offerings[key]
    price = o.price("on_demand") or (o.prices[0] if o.prices else None)
    return f"{o.provider}: {o.instance}" + (f" (${price.usd_per_gpu_hour:,.2f}/GPU-h)" if price else "")


def _offering(catalog: Catalog) -> None:
    """How the GPUs are rented (the instance shape, network, host RAM and price), host RAM, and your price."""
    ids = [o.id for o in catalog.offerings_of(st.session_state["gpu"])]
    if st.session_state.get("offering") not in ["", *ids]:
        st.session_state["offering"] = ""
    drawn(
        st.selectbox,
        "Offering",
        ["", *ids],
        key="offering",
        format_func=partial(_offering_label, catalog),
    )
    drawn(
        st.number_input,
        "Host RAM per GPU, GiB (0: the offering's)",
        0.0,
        1_000_000.0,
        step=16.0,
        key="host_memory_gib_per_gpu",
    )
    st.number_input(
        "Your price, USD per GPU-hour (0: the catalog's)",
        0.0,
        1000.0,
        key="price",
        help="Applied to this offering (or, without one, every offering of this GPU type) when the "
        "Cheapest hardware tab searches",
    )


def parallelism_inputs(catalog: Catalog) -> None:
    """The GPU, the parallel degrees and their options, and your price."""
    with st.expander("Parallelism and hardware", expanded=True):
        drawn(st.selectbox, "GPU", list(catalog), key="gpu", format_func=lambda k: catalog[k].name)
        drawn(
            st.number_input,
            "GPUs",
            1,
            MAX_DEGREE,
            key="count",
        )
        if st.session_state["task"] in TRAINING_TASKS:  # sharding of training states
            _zero()
        drawn(st.selectbox, "Tensor parallel", [1, 2, 4, 8, 16], key="tensor")
        drawn(st.checkbox, "Sequence parallel", key="sequence_parallel")
        drawn(
            st.checkbox,
            "Async tensor parallel",
            key="async_tp",
        )
        _pipeline()
        drawn(st.number_input, "Context parallel", 1, 1024, key="context")
        drawn(st.number_input, "Expert parallel", 1, 4096, key="expert")
        st.caption(f"Data parallel: {_data_degree()} (GPUs ÷ tensor × pipeline × context)")
        _offering(catalog)


def sidebar(models: dict[str, Preset]) -> tuple[dict, str]:
    """Every input group; returns the catalog and its cache key. The keys drawn become `shown`, from which
    the plan is built."""
    st.session_state["drawing"], st.session_state["slots"] = [], {}
    with st.sidebar:
        plan_inputs()
        catalog, catalog_key = catalog_inputs()
        model_inputs(models)
        workload_inputs()
        precision_inputs()
        technique_inputs(models)
        parallelism_inputs(catalog)
    st.session_state["shown"] = st.session_state.pop("drawing")
    return catalog, catalog_key
