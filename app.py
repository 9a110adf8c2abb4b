"""VRAM Planner web app: a thin Streamlit layer over the `planner` package.

The plan is the one piece of state. On a session's first run it comes from the URL (a share link) and fills the
widgets; the widgets build it back on every run, and it writes itself to the URL. Adopting a recommendation or
uploading a plan file loads a plan into the widgets the same way.
"""

from __future__ import annotations

import hashlib
import json
from typing import get_args
from urllib.parse import urlencode

import pandas as pd
import streamlit as st

from planner.catalog import load_catalog, parse_catalog
from planner.errors import PlanError
from planner.explore import current_value, savings, sweep, sweep_keys
from planner.export import (candidate_to_dict, estimate_to_dict, load_yaml, plan_from_query, plan_to_query,
                            plan_to_yaml)
from planner.memory import TOTALS_MEANING, estimate
from planner.hf_config import model_from_hf_config
from planner.frameworks import load_frameworks, provenance, without_keys
from planner.models import approximate_note, model_to_dict, presets
from planner.plan import (Checkpointing, Fp8Recipe, Framework, Inference, Lora, Loss, Optimizer, PipelineSchedule, Plan,
                          plan_from_dict, plan_to_dict)
from planner.recommend import recommend
from planner.units import format_bytes, to_unit
from ui.charts import breakdown_chart, recommendation_chart, sweep_chart

DEFAULT_PLAN = {"name": "Llama 3.1 8B pre-training on 8×H100", "model": {"preset": "llama-3.1-8b"},
                "workload": {"sequence_length": 4096, "micro_batch_size": 1, "global_batch_size": 64},
                "parallelism": {"data": 8, "zero_stage": 3}, "hardware": {"gpu": "h100-sxm-80gb"}}
TASKS = ["pretrain", "finetune", "lora", "qlora", "inference"]
ARCH_INTS = {"num_layers": "Layers", "hidden_size": "Hidden size", "num_attention_heads": "Attention heads",
             "num_kv_heads": "KV heads", "head_dim": "Head dim", "intermediate_size": "MLP intermediate size",
             "vocab_size": "Vocabulary"}
MOE_INTS = {"num_experts": "Experts (0: dense)", "experts_per_token": "Experts per token",
            "moe_intermediate_size": "Expert intermediate size", "shared_experts": "Shared experts",
            "first_dense_layers": "Dense layers first"}
PARAMS = "params"  # the preset choice "from a parameter count"
MLA_INTS = {"kv_lora_rank": "KV latent rank (0: standard attention)", "q_lora_rank": "Query latent rank (0: none)",
            "qk_rope_head_dim": "RoPE key dim per head", "v_head_dim": "Value dim per head"}
# Plan keys a plan may leave out or set to None (unused MoE, windows, latent attention; "no limit" counts), and
# the widget value that stands for "not set"
WIDGET_WHEN_ABSENT = {"num_experts": 0, "experts_per_token": 0, "moe_intermediate_size": 0, "shared_experts": 0,
                      "first_dense_layers": 0, "sliding_window": 0, "global_attention_every": 0, "qk_norm": False,
                      **dict.fromkeys(MLA_INTS, 0),
                      "moe_capacity_factor": 0.0, "steps": 0, "train_tokens": 0, "quant_group_size": 0,
                      "prefill_chunk_tokens": 0, "fp8_recipe": "tensorwise"}

st.set_page_config(page_title="VRAM Planner", page_icon="🧮", layout="wide")


@st.cache_resource
def _project_catalog() -> dict:
    return load_catalog()


@st.cache_data(max_entries=64, show_spinner=False)
def _recommend(plan: Plan, _catalog: dict, catalog_key: str, price: float, headroom: float, rank_by: str):
    prices = {plan.hardware.gpu: price} if price > 0 and plan.hardware.gpu in _catalog else {}
    return recommend(plan, _catalog, prices=prices, headroom=headroom, rank_by=rank_by)


def _flat(plan: Plan) -> dict:
    """The plan as widget values: leaf key -> value."""
    d = plan_to_dict(plan)
    m = plan.model
    out = {"name": d.get("name", ""), "preset": m.preset or (PARAMS if m.approx_params else "custom")}
    out.update({k: v for k, v in d["model"].items() if k not in ("preset", "params")})
    if m.approx_params:  # the guessed architecture fills the custom fields, for editing from there
        out.update({k: getattr(m, k) for k in (*ARCH_INTS, "mlp", "norm", "tie_embeddings", "bias")})
    out["params_text"] = f"{(m.approx_params or m.params.total) / 1e9:,.3g}B"
    for section in ("workload", "precision", "techniques", "parallelism", "hardware"):
        for key, value in d[section].items():
            if isinstance(value, dict):
                out.update(value)
            else:
                out[key] = value
    return out


def load_into_widgets(plan: Plan) -> None:
    """Set every widget from `plan` (before the widgets are drawn, i.e. on first run or in a callback)."""
    flat = {**{f: getattr(Lora(), f) for f in ("rank", "alpha", "targets", "dropout", "variant")},
            **{f: getattr(Inference(), f) for f in ("batch_size", "prompt_tokens", "output_tokens")},
            **_flat(plan)}  # blocks the task does not use keep their defaults for when the task changes
    for key, value in flat.items():
        st.session_state[key] = list(value) if isinstance(value, tuple) else value
    st.session_state["plan_keys"] = tuple(flat) + ("serving", "gpu_memory_utilization", *WIDGET_WHEN_ABSENT)
    inf = plan.workload.inference
    st.session_state["serving"] = inf.gpu_memory_utilization is not None
    st.session_state["gpu_memory_utilization"] = inf.gpu_memory_utilization or 0.9
    for key, absent in WIDGET_WHEN_ABSENT.items():
        st.session_state[key] = flat.get(key) or absent
    st.session_state["framework_loaded"] = plan.framework


def _on_preset() -> None:
    """A preset fills the architecture (so that 'custom' starts from it); the rest of the plan is kept when it
    is valid for the new model, else the preset's defaults are used."""
    preset = st.session_state["preset"]
    if preset == "custom":
        return
    model = {"params": st.session_state["params_text"]} if preset == PARAMS else {"preset": preset}
    try:
        load_into_widgets(plan_from_dict({**_plan_dict(), "model": model}))
    except PlanError:
        try:
            load_into_widgets(plan_from_dict({"model": model, "hardware": {"gpu": st.session_state["gpu"]}}))
        except PlanError:  # an unreadable count: the page shows the plan's error, the widgets stay
            pass


def _on_hf_import() -> None:
    """The architecture of a pasted or uploaded config.json replaces the model; the rest of the plan stays."""
    upload = st.session_state.get("hf_file")
    text = upload.getvalue().decode("utf-8", errors="replace") if upload is not None else st.session_state["hf_text"]
    try:
        model = model_to_dict(model_from_hf_config(text))
        load_into_widgets(plan_from_dict({**_plan_dict(), "model": model}))
        st.session_state.pop("hf_error", None)
    except PlanError as exc:
        st.session_state["hf_error"] = str(exc)


def _adopt(plan: Plan) -> None:
    load_into_widgets(plan)


def _on_framework() -> None:
    """A new framework re-derives the keys it or the previous framework governs (from its recipes, or the
    planner's defaults); every other key of the plan stays."""
    recipes = load_frameworks()
    new, old = st.session_state["framework"], st.session_state.get("framework_loaded", "generic")
    d = without_keys(_plan_dict(), {x.key for name in (new, old) for x in recipes[name].settings})
    if new in ("vllm", "hf_generate"):
        d["workload"] = {"task": "inference"}
    elif d["workload"]["task"] == "inference" and new != "generic":
        d["workload"] = {"task": "pretrain"}
    try:
        load_into_widgets(plan_from_dict({**d, "framework": new}))
        st.session_state.pop("framework_error", None)
    except PlanError as exc:
        st.session_state["framework_error"] = str(exc)


# --- First run of a session: the URL (or the default) fills the widgets -------------------------------------
if "loaded" not in st.session_state:
    params = {key: st.query_params.get_all(key) for key in st.query_params}
    plan0, link_warnings = (plan_from_query(params, DEFAULT_PLAN, gpus=_project_catalog()) if params
                            else (plan_from_dict(DEFAULT_PLAN), []))
    load_into_widgets(plan0)
    st.session_state["link_warnings"] = link_warnings
    st.session_state["price"] = 0.0
    st.session_state["loaded"] = True
if "pending_plan" in st.session_state:  # an uploaded plan file, loaded before any widget exists
    load_into_widgets(st.session_state.pop("pending_plan"))
# Streamlit forgets the state of widgets not drawn in a run (the training inputs while the task is inference);
# re-assigning every plan key keeps each value for when its widget returns.
for _key in [k for k in st.session_state.get("plan_keys", ()) if k in st.session_state]:
    st.session_state[_key] = st.session_state[_key]

catalog = _project_catalog()
catalog_key = "project"
models = presets()


def _has_experts() -> bool:
    s = st.session_state
    if s["preset"] == PARAMS:
        return False
    return bool(s["num_experts"] if s["preset"] == "custom" else models[s["preset"]].model.num_experts)


def _plan_dict() -> dict:
    """The plan file's dict, from the widgets."""
    s = st.session_state
    model = {"preset": s["preset"]} if s["preset"] not in ("custom", PARAMS) else {}
    if s["preset"] == PARAMS:
        model = {"params": s["params_text"]}
    if s["preset"] == "custom":
        model.update({k: int(s[k]) for k in ARCH_INTS})
        model.update({k: s[k] for k in ("mlp", "norm", "tie_embeddings", "bias", "qk_norm")})
        if s["num_experts"]:
            model.update({k: int(s[k]) for k in MOE_INTS})
        if s["sliding_window"]:
            model.update(sliding_window=int(s["sliding_window"]), global_attention_every=int(s["global_attention_every"]))
        if s["kv_lora_rank"]:
            model.update({k: int(s[k]) or None for k in MLA_INTS})  # 0: no query latent, value dim = head dim
            model["qk_rope_head_dim"] = int(s["qk_rope_head_dim"])
    task = s["task"]
    workload: dict = {"task": task}
    if task == "inference":
        workload["inference"] = {"batch_size": int(s["batch_size"]), "prompt_tokens": int(s["prompt_tokens"]),
                                 "output_tokens": int(s["output_tokens"])}
        if s["serving"]:
            workload["inference"]["gpu_memory_utilization"] = float(s["gpu_memory_utilization"])
        if s["prefill_chunk_tokens"]:
            workload["inference"]["prefill_chunk_tokens"] = int(s["prefill_chunk_tokens"])
    else:
        workload.update(sequence_length=int(s["sequence_length"]), micro_batch_size=int(s["micro_batch_size"]),
                        global_batch_size=int(s["global_batch_size"]))
        if s["steps"]:
            workload["steps"] = int(s["steps"])
    if task in ("lora", "qlora"):
        workload["lora"] = {"rank": int(s["rank"]), "alpha": float(s["alpha"]), "targets": list(s["targets"]) or ["q", "v"],
                            "dropout": float(s["dropout"]), "variant": s["variant"]}
    precision = {k: s[k] for k in ("compute", "master_weights", "gradients", "optimizer", "optimizer_state",
                                   "optimizer_impl")}
    if s["compute"] == "fp8":
        precision["fp8_recipe"] = s["fp8_recipe"]
        precision["fp8_all_gather"] = bool(s["fp8_all_gather"]) and int(s["zero_stage"]) == 3
    if task in ("lora", "qlora", "inference"):
        precision["weights"] = s["weights"]
        if s["weights"] in ("int4", "nf4") and s["quant_group_size"]:
            precision["quant_group_size"] = int(s["quant_group_size"])
        if s["weights"] == "nf4":
            precision["double_quant"] = bool(s["double_quant"])
    if task == "inference":
        precision["kv_cache"] = s["kv_cache"]
    pipeline = int(s["pipeline"])
    schedule = s["pipeline_schedule"] if pipeline > 1 else "1f1b"
    return {
        "name": s["name"],
        "framework": s["framework"],
        "model": model,
        "workload": workload,
        "precision": precision,
        "techniques": {k: s[k] for k in ("activation_checkpointing", "attention", "offload", "optimizer_in_backward",
                                         "loss", "compile", "activation_offload")} | {"loss_chunks": int(s["loss_chunks"]),
                                                     "checkpoint_every": int(s["checkpoint_every"])}
                      | ({"moe_capacity_factor": float(s["moe_capacity_factor"])}
                         if s["moe_capacity_factor"] and _has_experts() else {}),
        "parallelism": {"data": int(s["data"]), "zero_stage": int(s["zero_stage"]), "tensor": int(s["tensor"]),
                        "sequence_parallel": bool(s["sequence_parallel"]) and int(s["tensor"]) > 1,
                        "pipeline": pipeline, "context": int(s["context"]),
                        "expert": int(s["expert"]), "pipeline_schedule": schedule,
                        "virtual_stages": int(s["virtual_stages"]) if schedule == "interleaved_1f1b" else 1,
                        "async_tp": bool(s["async_tp"]) and bool(s["sequence_parallel"]) and int(s["tensor"]) > 1},
        "hardware": {"gpu": s["gpu"]},
    }


# --- Inputs ------------------------------------------------------------------------------------------------------
with st.sidebar:
    st.title("VRAM Planner")
    st.text_input("Plan name", key="name", max_chars=200)
    recipes = load_frameworks()
    st.selectbox("Framework", list(get_args(Framework)), key="framework", on_change=_on_framework,
                 format_func=lambda k: recipes[k].label,
                 help="Sets the defaults its standard recipes use (dtypes, checkpointing, loss, sharding); "
                      "any value you change wins. The Breakdown tab lists what it set.")
    if st.session_state.get("framework_error"):
        st.error(f"Framework: {st.session_state['framework_error']}")
    with st.expander("GPU catalog and prices"):
        upload = st.file_uploader("Your own catalog (same format as gpu_catalog.yaml)", type=["yaml", "yml"],
                                  key="catalog_upload")
        if upload is not None:
            try:
                text = upload.getvalue().decode("utf-8", errors="replace")
                catalog = parse_catalog(text)
                catalog_key = hashlib.sha256(text.encode()).hexdigest()
                st.caption(f"Using your catalog: {len(catalog)} GPUs.")
            except PlanError as exc:
                st.error(str(exc))
    if st.session_state["gpu"] not in catalog:
        st.session_state["gpu"] = next(iter(catalog))

    with st.expander("Model", expanded=True):
        st.selectbox("Preset", ["custom", PARAMS, *models], key="preset", on_change=_on_preset,
                     format_func=lambda k: {"custom": "Custom architecture",
                                            PARAMS: "From a parameter count (approximate)"}.get(k) or models[k].name,
                     help="A published model, your own architecture, or just a size such as 13B")
        if st.session_state["preset"] == PARAMS:
            st.text_input("Parameters", key="params_text", help="e.g. 13B, 770M or 1.5e9: a Llama-style "
                          "architecture of that size is guessed (shape rules in planner/models.py)")
        with st.popover("Import a Hugging Face config.json", width="stretch"):
            st.text_area("Paste config.json", key="hf_text", height=150, placeholder='{"model_type": "llama", ...}')
            st.file_uploader("…or upload it", type=["json"], key="hf_file")
            st.button("Import architecture", key="hf_import", on_click=_on_hf_import,
                      help="GQA, MoE, MLA and sliding-window keys are read; the model becomes a custom one")
        if st.session_state.get("hf_error"):
            st.error(f"config.json: {st.session_state['hf_error']}")
        custom = st.session_state["preset"] == "custom"
        if custom:
            for key, label in ARCH_INTS.items():
                st.number_input(label, 1, 4_194_304, key=key)
            st.selectbox("MLP", ["swiglu", "gelu"], key="mlp", help="SwiGLU (Llama family) or GeLU (GPT-2, NeoX)")
            st.selectbox("Norm", ["rmsnorm", "layernorm"], key="norm")
            st.checkbox("Tied embeddings", key="tie_embeddings")
            st.checkbox("Biases", key="bias")
            st.checkbox("Per-head q/k norms", key="qk_norm", help="RMSNorm on each query and key head (Qwen3, Gemma 3)")
            for key, label in MOE_INTS.items():
                st.number_input(label, 0, 1_048_576, key=key)
            st.number_input("Sliding window (0: none)", 0, 16_777_216, key="sliding_window")
            st.number_input("Global attention every n-th layer (0: none)", 0, 1024, key="global_attention_every")
            for key, label in MLA_INTS.items():
                st.number_input(label, 0, 1_048_576, key=key,
                                help="Multi-head latent attention (DeepSeek-V2/V3); Head dim is then the non-RoPE "
                                     "query/key dim per head")

    with st.expander("Workload", expanded=True):
        st.selectbox("Task", TASKS, key="task",
                     help="finetune = full fine-tune; lora/qlora train adapters on a frozen (4-bit) base")
        task = st.session_state["task"]
        if task == "inference":
            st.number_input("Concurrent sequences", 1, 1_048_576, key="batch_size")
            st.number_input("Prompt tokens", 1, 16_777_216, step=256, key="prompt_tokens")
            st.number_input("Output tokens", 0, 16_777_216, step=64, key="output_tokens")
            st.checkbox("Serving engine (vLLM-style)", key="serving",
                        help="The engine claims a fraction of GPU memory; the KV cache fills what is left")
            if st.session_state["serving"]:
                st.slider("GPU memory fraction", 0.05, 1.0, step=0.01, key="gpu_memory_utilization")
            st.number_input("Prefill chunk tokens (0: whole prompt batch)", 0, 16_777_216, key="prefill_chunk_tokens")
        else:
            st.number_input("Sequence length", 1, 16_777_216, step=512, key="sequence_length")
            st.number_input("Micro-batch size", 1, 1_048_576, key="micro_batch_size",
                            help="Sequences per GPU per forward/backward")
            st.number_input("Global batch size", 1, 1 << 30, key="global_batch_size",
                            help="Sequences per optimizer step; sets gradient accumulation")
            st.number_input("Steps of the job (0: price per billion tokens)", 0, 10**12, key="steps")
        if task in ("lora", "qlora"):
            st.number_input("LoRA rank", 1, 65_536, key="rank")
            st.number_input("LoRA alpha", 0.0, 1e6, key="alpha")
            st.multiselect("LoRA targets", ["q", "k", "v", "o", "gate", "up", "down"], key="targets")
            st.number_input("LoRA dropout", 0.0, 0.99, step=0.05, key="dropout")
            st.selectbox("Adapter variant", ["lora", "dora"], key="variant",
                         help="dora: weight-decomposed LoRA (a learned magnitude per output row)")

    with st.expander("Precision"):
        st.selectbox("Compute", ["bf16", "fp16", "fp32", "fp8"], key="compute",
                     help="Matmul dtype; fp8: float8 matmuls with bf16 activations")
        if st.session_state["compute"] == "fp8":
            st.selectbox("Low-precision recipe", list(get_args(Fp8Recipe)), key="fp8_recipe",
                         help="Scaling of the float8 (or 4-bit) matmul operands (torchao)")
            if st.session_state["zero_stage"] == 3:
                st.checkbox("Float8 all-gather", key="fp8_all_gather",
                            help="FSDP all-gathers layers' weights in float8 instead of 16 bits")
        if task in ("lora", "qlora", "inference"):
            choices = {"inference": ["bf16", "fp16", "fp32", "fp8", "int8", "int4", "nf4"],
                       "lora": ["bf16", "fp16", "fp32"], "qlora": ["nf4", "int4", "int8", "fp8"]}[task]
            if st.session_state["weights"] not in choices:
                st.session_state["weights"] = choices[0]
            st.selectbox("Weights (frozen or served)", choices, key="weights")
            if st.session_state["weights"] in ("int4", "nf4"):
                st.number_input("Quantization block size (0: default)", 0, 65_536, key="quant_group_size")
            if st.session_state["weights"] == "nf4":
                st.checkbox("Double quantization", key="double_quant")
        if task == "inference":
            st.selectbox("KV cache", ["bf16", "fp16", "fp32", "fp8", "int8"], key="kv_cache")
        else:
            st.selectbox("Master weights", ["fp32", "none"], key="master_weights",
                         help="fp32: mixed precision with an fp32 copy; none: pure low-precision training")
            st.selectbox("Gradients", ["fp32", "bf16", "fp16"], key="gradients")
            st.selectbox("Optimizer", list(get_args(Optimizer)), key="optimizer")
            st.selectbox("Optimizer states", ["fp32", "bf16", "fp16"], key="optimizer_state")
            st.selectbox("Optimizer implementation", ["foreach", "fused", "forloop"], key="optimizer_impl",
                         help="foreach (PyTorch's CUDA default) makes a temporary copy at the step")

    with st.expander("Techniques"):
        st.selectbox("Activation checkpointing", list(get_args(Checkpointing)), key="activation_checkpointing",
                     help="full: keep layer inputs only and recompute; selective: recompute attention scores "
                          "(Megatron); selective_op: save matmul and attention outputs, recompute the rest "
                          "(torchtitan); every_k: checkpoint every k-th layer (torchtitan)")
        if st.session_state["activation_checkpointing"] == "every_k":
            st.number_input("Checkpoint every k-th layer", 1, 1024, key="checkpoint_every")
        st.selectbox("Attention", ["flash", "eager"], key="attention",
                     help="flash: fused kernel, no s×s scores kept; eager: scores materialized")
        st.selectbox("Offload", ["none", "optimizer", "optimizer_and_params"], key="offload",
                     help="Move optimizer states (and parameters, ZeRO-3) to CPU memory")
        if st.session_state["task"] != "inference":
            st.selectbox("Loss", list(get_args(Loss)), key="loss",
                         help="full: the whole logits upcast to fp32 (HF); chunked: the output projection and "
                              "loss run on slices of tokens (torchtune); fused: Liger fused linear cross-entropy")
            if st.session_state["loss"] == "chunked":
                st.number_input("Loss chunks", 1, 1024, key="loss_chunks")
            st.checkbox("Optimizer in backward", key="optimizer_in_backward",
                        help="Step and free each gradient during backward (torchtune optimizer_in_bwd); needs one "
                             "micro-batch per step, no ZeRO, no offload")
            st.checkbox("torch.compile", key="compile", help="Fused elementwise ops save fewer intermediates")
            st.checkbox("Activation offloading", key="activation_offload",
                        help="Saved activations wait in pinned host memory between forward and backward (torchtune)")
        if _has_experts():
            st.number_input("MoE capacity factor (0: dropless)", 0.0, 64.0, step=0.25, key="moe_capacity_factor",
                            help="Token-dropping MoE training pads each expert's buffer to this multiple of its "
                                 "even share of the routed tokens (GShard, Megatron); HF and vLLM are dropless")

    with st.expander("Parallelism and hardware", expanded=True):
        st.selectbox("GPU", list(catalog), key="gpu", format_func=lambda k: catalog[k].name)
        st.number_input("Data parallel", 1, 65_536, key="data")
        st.selectbox("ZeRO stage", [0, 1, 2, 3], key="zero_stage", help="3 = FSDP full shard")
        st.selectbox("Tensor parallel", [1, 2, 4, 8, 16], key="tensor")
        st.checkbox("Sequence parallel", key="sequence_parallel", help="With tensor parallelism")
        if st.session_state["tensor"] > 1 and st.session_state["sequence_parallel"]:
            st.checkbox("Async tensor parallel", key="async_tp",
                        help="Communication overlapped with the matmuls (torchtitan; needs torch.compile)")
        st.number_input("Pipeline parallel", 1, 1024, key="pipeline")
        if st.session_state["pipeline"] > 1:
            st.selectbox("Pipeline schedule", list(get_args(PipelineSchedule)), key="pipeline_schedule")
            if st.session_state["pipeline_schedule"] == "interleaved_1f1b":
                st.session_state["virtual_stages"] = max(2, st.session_state["virtual_stages"])
                st.number_input("Virtual stages per GPU", 2, 1024, key="virtual_stages")
        st.number_input("Context parallel", 1, 1024, key="context")
        st.number_input("Expert parallel", 1, 4096, key="expert", help="MoE experts over data-parallel GPUs")
        listed = catalog[st.session_state["gpu"]].price_usd_per_hour
        st.number_input("Your price, USD per GPU-hour (0: the catalog's)", 0.0, 1000.0, key="price",
                        help=f"Catalog: {'no price' if listed is None else f'${listed:.2f}'}")

# --- The plan ------------------------------------------------------------------------------------------------------
for warning in st.session_state.get("link_warnings", []):
    st.warning(f"Share link: {warning}")
try:
    plan = plan_from_dict(_plan_dict())
    result = estimate(plan, catalog)
except PlanError as exc:
    st.error(str(exc))
    st.stop()
st.query_params.from_dict(plan_to_query(plan))

st.header(plan.name or "Your plan")
st.caption(f"{plan.model.params.total / 1e9:.2f} B parameters"
           + (f" ({plan.model.params.active / 1e9:.2f} B active)" if plan.model.num_experts else "")
           + f" · {plan.workload.task} · {plan.hardware.count} × {result.gpu.name}")
if note := approximate_note(plan.model):
    st.warning(note)
(st.success if result.fits else st.error)(result.reason)

tab_plan, tab_explore, tab_cheapest, tab_share = st.tabs(["Breakdown", "Explore", "Cheapest hardware", "Share and export"])

with tab_plan:
    cols = st.columns(4)
    for col, key in zip(cols, ("peak_allocated_bytes", "peak_reserved_bytes", "device_bytes")):
        col.metric(key.removesuffix("_bytes").replace("_", " "), format_bytes(getattr(result, key)),
                   help=TOTALS_MEANING[key])
    cols[3].metric("usable" if result.serving is None else "engine budget", format_bytes(result.usable_bytes),
                   delta=format_bytes(result.headroom_bytes) + (" free" if result.fits else " short"))
    st.altair_chart(breakdown_chart(result), width="stretch", height=190)
    st.subheader(f"At the peak: {result.phase}" + (f", pipeline stage {result.stage}" if plan.parallelism.pipeline > 1 else ""))
    st.dataframe(pd.DataFrame([{"item": i.label, "GiB": round(to_unit(i.bytes), 3), "formula": i.formula,
                                "note": i.note, "counts in": i.level} for i in result.items if i.bytes]),
                 hide_index=True, width="stretch")
    st.subheader("Moments of the step" if plan.parallelism.pipeline == 1 else "Pipeline stages")
    st.dataframe(pd.DataFrame([{"stage": s.index, "layers": s.layers, "in flight": s.micro_batches_in_flight,
                                "moment": ph.name, "GiB": round(to_unit(ph.allocated_bytes), 3),
                                "peak": "●" if ph is s.peak else ""} for s in result.stages for ph in s.phases]),
                 hide_index=True, width="stretch")
    if result.host_bytes:
        st.info(f"Offloading needs {format_bytes(result.host_bytes)} of host memory per GPU.")
    if plan.framework != "generic":
        recipe = load_frameworks()[plan.framework]
        with st.expander(f"What {recipe.label} set", expanded=False):
            st.caption(recipe.summary)
            st.dataframe(pd.DataFrame([{"key": x.key, "value": str(x.value),
                                        "in this plan": "from the framework" if kept else "changed by you",
                                        "when": x.condition or "always", "source": x.source}
                                       for x, kept in provenance(plan)]), hide_index=True, width="stretch")

price = float(st.session_state.get("price") or 0.0)
with tab_cheapest:
    c1, c2 = st.columns(2)
    rank_by = c1.radio("Rank by", ["job", "hour"], horizontal=True, key="rank_by",
                       format_func=lambda r: "cost of the job" if r == "job" else "cost per hour")
    headroom = c2.slider("Memory headroom", 0.0, 0.5, 0.10, 0.01, key="headroom",
                         help="Fraction of usable memory kept free")
    rec = _recommend(plan, catalog, catalog_key, price, headroom, rank_by)
    st.caption(f"Job: {rec.job_tokens:,} tokens ({rec.job_tokens_source}); {rec.mfu:.0%} model FLOPs utilization "
               f"of each GPU's dense peak; {rec.headroom:.0%} of memory kept free.")
    if rec.best is None:
        st.warning("No GPU in the catalog fits this workload, even with every memory-saving technique.")
    else:
        st.altair_chart(recommendation_chart(rec), width="stretch")
        st.dataframe(pd.DataFrame([{k: v for k, v in candidate_to_dict(c).items()
                                    if k not in ("parallelism", "techniques", "gpu_name")}
                                   for c in rec.candidates[:30]]), hide_index=True, width="stretch")
        st.write("Adopt a candidate as the current plan:")
        for n, c in enumerate(rec.candidates[:5]):
            st.button(f"{c.count} × {c.gpu.name}: {c.strategy}", key=f"adopt_{n}", on_click=_adopt, args=(c.plan,))
    if rec.rejected:
        with st.expander(f"{len(rec.rejected)} GPU types do not fit"):
            for r in rec.rejected:
                st.write(r.reason)

with tab_explore:
    rec_gpu = rec.best.gpu if rec.best else None
    capacities = {result.gpu.name: result.usable_bytes}
    if rec_gpu is not None and rec_gpu.id != result.gpu.id:
        capacities[f"{rec_gpu.name} (recommended)"] = rec_gpu.usable_bytes
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

with tab_share:
    query = urlencode(plan_to_query(plan))
    base = getattr(st.context, "url", None) or ""
    st.subheader("Share link")
    st.code(f"{base.split('?')[0]}?{query}", language=None)
    st.caption("The link holds the whole plan: opening it in a fresh browser reproduces this page.")
    c1, c2, c3 = st.columns(3)
    c1.download_button("Plan (YAML)", plan_to_yaml(plan), file_name="plan.yaml", mime="application/x-yaml",
                       key="download_plan", on_click="ignore")
    table = pd.DataFrame([{"item": i.name, "label": i.label, "bytes": i.bytes, "formula": i.formula, "note": i.note,
                           "level": i.level} for i in result.items])
    c2.download_button("Breakdown (CSV)", table.to_csv(index=False), file_name="breakdown.csv", mime="text/csv",
                       key="download_csv", on_click="ignore")
    c3.download_button("Breakdown (JSON)", json.dumps(estimate_to_dict(result), indent=2), file_name="breakdown.json",
                       mime="application/json", key="download_json", on_click="ignore")
    st.subheader("Load a plan file")
    plan_file = st.file_uploader("Plan YAML (schema vram-planner/v1, as the CLI reads)", type=["yaml", "yml"],
                                 key="plan_upload")
    if plan_file is not None and st.session_state.get("plan_upload_seen") != plan_file.file_id:
        st.session_state["plan_upload_seen"] = plan_file.file_id
        try:
            st.session_state["pending_plan"] = plan_from_dict(load_yaml(plan_file.getvalue().decode("utf-8",
                                                                                                  errors="replace")))
            st.session_state.pop("upload_error", None)
            st.rerun()
        except PlanError as exc:
            st.session_state["upload_error"] = str(exc)
    if st.session_state.get("upload_error"):
        st.error(f"Plan file: {st.session_state['upload_error']}")
