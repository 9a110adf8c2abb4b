"""A Hugging Face `config.json` read into a `Model`.

Each family's keys are mapped explicitly (transformers' configuration classes are the reference for the key
names and their defaults); a family not listed is read as Llama-like only when its keys say so (RMSNorm
epsilon, SiLU activation), else it is refused with the keys that are missing. Multimodal configs are read
from their `text_config`: the planner models the language decoder.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, get_args

from planner.errors import PlanError, bad, short
from planner.loader import HF_CONFIG, load_json
from planner.plan.models import Activation, Model, preset_of_shape

# Families whose MLP is gated (SwiGLU/GeGLU: gate, up, down) with RMSNorm, and those with a plain GeLU MLP and
# LayerNorm with biases.
GATED = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "gemma3_text",
    "phi3",
    "olmo",
    "olmo2",
    "deepseek_v2",
    "deepseek_v3",
    "granite",
    "cohere",
    "internlm2",
    "smollm3",
    "ministral",
    "mistral3_text",
    "glm",
    "exaone",
    "nemotron_h",
    "granitemoehybrid",
    "qwen3_next",
    "qwen3_5_text",
    "qwen3_5_moe_text",
)
PLAIN = ("gpt2", "gpt_neox", "gpt_bigcode", "phi", "starcoder2", "falcon", "opt", "gptj")
# a GeLU family's activation when its config.json omits it: its transformers configuration class's default
ACTIVATION_DEFAULTS = {
    "gpt2": "gelu_new",
    "gptj": "gelu_new",
    "phi": "gelu_new",
    "gpt_neox": "gelu",
    "falcon": "gelu",
    "gpt_bigcode": "gelu_pytorch_tanh",
    "starcoder2": "gelu_pytorch_tanh",
}
# what transformers assumes when a config omits tie_word_embeddings (PretrainedConfig's default is True)
UNTIED_BY_DEFAULT = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "phi3",
    "olmo",
    "olmo2",
    "deepseek_v2",
    "deepseek_v3",
    "gpt_neox",
    "phi",
    "granite",
    "internlm2",
    "qwen3_next",
    "qwen3_5_text",
    "qwen3_5_moe_text",
    "nemotron_h",
)
# Hybrid recurrent/attention families (docs/hybrid.md §1): Qwen3-Next / Qwen3.5 (Gated DeltaNet), Granite-4.0-H and
# Nemotron-H (Mamba-2)
QWEN_NEXT = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")
# HF layer_types values → planner pattern characters (Qwen3-Next "linear_attention", Granite "mamba")
LAYER_TYPES = {"full_attention": "*", "attention": "*", "linear_attention": "G", "mamba": "M"}
# Mamba-2 keys: planner field → (Nemotron-H key, Granite/Bamba key); HF nemotron_h also remaps the legacy
# mamba_n_groups → n_groups and mamba_d_conv → conv_kernel
MAMBA_KEYS = {
    "mamba_num_heads": ("mamba_num_heads", "mamba_n_heads"),
    "mamba_head_dim": ("mamba_head_dim", "mamba_d_head"),
    "ssm_state_size": ("ssm_state_size", "mamba_d_state"),
    "mamba_n_groups": ("n_groups", "mamba_n_groups"),
    "mamba_conv_kernel": ("conv_kernel", "mamba_d_conv"),
}
GDN_KEYS = (
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)
# config dtype names of the served SSM state (Nemotron-H mamba_ssm_cache_dtype, Qwen3.5 mamba_ssm_dtype)
STATE_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
# The keys vLLM reads a config's length from, the smallest given wins (vllm/config/model.py _get_and_verify_max_len:
# possible_keys; its `model_max_length`, Command-R's, overrides them); rope types whose factor vLLM does not apply
# again (their max_position_embeddings is already the scaled length); YaRN's length is
# original_max_position_embeddings × factor
LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
UNSCALED_ROPE = ("su", "longrope", "llama3", "default")
# key aliases, first present wins
ALIASES = {
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "hidden_size": ("hidden_size", "n_embd", "d_model", "dim"),
    "num_attention_heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
}


def model_from_hf_config(config: Mapping[str, Any] | str) -> Model:
    """A `Model` from a config.json (a mapping or its JSON text). Raises PlanError naming what is missing."""
    if isinstance(config, str):
        config = load_json(config, HF_CONFIG)
    if not isinstance(config, Mapping):
        raise PlanError("hf_config", f"must be a JSON object, got {type(config).__name__}")
    if isinstance(config.get("text_config"), Mapping):  # Gemma 3, Llama 4, Mistral 3: the language decoder
        config = {
            **config["text_config"],
            "model_type": config["text_config"].get("model_type", config.get("model_type")),
        }
    family = str(config.get("model_type", ""))
    gated = family in GATED or (family not in PLAIN and _llama_like(config))
    if family not in GATED and family not in PLAIN and not gated:
        raise PlanError(
            "hf_config",
            f"model_type {short(family or None)} is not a known family and its keys do not "
            f"describe a Llama-like decoder (rms_norm_eps and hidden_act silu); known families: "
            f"{', '.join(sorted(GATED + PLAIN))}",
        )

    out: dict[str, Any] = {}
    missing = []
    for field, keys in ALIASES.items():
        key = next((k for k in keys if config.get(k) is not None), None)
        if key is None:
            missing.append(" or ".join(keys))
        else:
            out[field] = config[key]
    if missing:
        raise PlanError("hf_config", f"missing {'; '.join(missing)} (model_type {short(family or None)})")
    h, heads = out["hidden_size"], out["num_attention_heads"]
    out["num_kv_heads"] = _first(
        config, "num_key_value_heads", "num_kv_heads", "n_head_kv", default=1 if config.get("multi_query") else heads
    )
    if config.get("head_dim") is not None:
        out["head_dim"] = config["head_dim"]
    inter = _first(config, "intermediate_size", "n_inner", "ffn_hidden_size", "ffn_dim", "ff_dim")
    # GPT-2, Falcon: 4h when unset (a hidden size that is no integer is left for the model's own check)
    out["intermediate_size"] = inter if inter is not None else 4 * h if type(h) is int else h
    out["mlp"] = "swiglu" if gated else "gelu"
    if not gated:
        out.update(_activation(config, family))
    out["norm"] = "rmsnorm" if gated else "layernorm"
    out["tie_embeddings"] = bool(config.get("tie_word_embeddings", family not in UNTIED_BY_DEFAULT))
    # biases: GeLU families carry them on every linear (Falcon: only when `bias`); gated ones only when both the
    # attention and the MLP have them (Qwen2's q/k/v biases alone are 0.1 % and left out)
    if gated:
        out["bias"] = bool(config.get("attention_bias") and config.get("mlp_bias"))
    else:
        out["bias"] = bool(config.get("bias", True)) if family == "falcon" else bool(config.get("use_bias", True))
    out.update(_moe(config, family))
    out.update(_window(config, family, out["num_layers"]))
    out.update(_mla(config))
    if family in ("qwen3", "qwen3_moe", "gemma3_text") + QWEN_NEXT:  # per-head q_norm / k_norm (OLMo 2's: full-width)
        out["qk_norm"] = True
    out.update(_hybrid(config, family))
    out["context_window"] = context_window(config, family)
    if out.get("kv_lora_rank"):
        out["num_kv_heads"] = heads
    try:
        return Model(**out)
    except PlanError as exc:  # the value read breaks a rule of the architecture (names the planner's field)
        raise PlanError("hf_config", str(exc)) from None


def shaped_model(config: Mapping[str, Any] | str) -> Model:
    """model_from_hf_config's model, named as the preset whose architecture it has exactly (preset_of_shape) where
    one has: a renamed fine-tune or a re-upload plans as its preset (its preset is None where none has)."""
    model = model_from_hf_config(config)
    return replace(model, preset=preset_of_shape(model))


def context_window(config: Mapping[str, Any], family: str) -> int | None:
    """The longest sequence vLLM serves from this config without an override (None: the config gives no length;
    vLLM then assumes 2,048, which is no property of the model)."""
    lengths = [config[k] for k in LENGTH_KEYS if _count(config.get(k))]
    override = config.get("model_max_length")
    window = override if _count(override) else min(lengths, default=None)
    rope = config.get("rope_scaling") or config.get("rope_parameters")
    if window is None or not isinstance(rope, Mapping) or "gemma3" in family:
        return window
    kind = rope.get("rope_type", rope.get("type"))
    factor = rope.get("factor")
    if kind in UNSCALED_ROPE or not isinstance(factor, (int, float)) or isinstance(factor, bool) or factor <= 0:
        return window
    if kind == "yarn" and _count(rope.get("original_max_position_embeddings")):
        window = rope["original_max_position_embeddings"]
    return int(window * factor)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _first(config: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    return next((config[k] for k in keys if config.get(k) is not None), default)


def _size(config: Mapping[str, Any], key: str) -> int | float:
    """A width the mapping divides by: a positive finite number (JSON has no NaN; a mapping passed in may)."""
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise bad(f"hf_config.{key}", value, "must be a positive number")
    return value


def _activation(config: Mapping[str, Any], family: str) -> dict[str, Any]:
    """A GeLU family's activation: its config's (GPT-2, GPT-J, StarCoder: `activation_function`; NeoX, Phi,
    StarCoder2: `hidden_act`; Falcon: `activation`), else its configuration class's default. Others (OPT's relu,
    gelu_fast, quick_gelu) are planned as gelu_new's unfused ops, the most an elementwise activation saves here."""
    act = _first(config, "activation_function", "hidden_act", "activation", default=ACTIVATION_DEFAULTS.get(family))
    return {"activation": act if act in get_args(Activation) else "gelu_new"}


def _llama_like(config: Mapping[str, Any]) -> bool:
    return "rms_norm_eps" in config and str(config.get("hidden_act", "")).lower() in ("silu", "swish")


def _moe(config: Mapping[str, Any], family: str) -> dict[str, Any]:
    experts = _first(config, "num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts")
    if not experts:
        return {}
    out = {"num_experts": experts, "experts_per_token": _first(config, "num_experts_per_tok", "top_k", default=2)}
    moe_inter = _first(config, "moe_intermediate_size")
    if moe_inter is not None:
        out["moe_intermediate_size"] = moe_inter
    if config.get("n_shared_experts"):  # DeepSeek: shared experts of the routed experts' size
        out["shared_experts"] = config["n_shared_experts"]
    elif config.get("shared_expert_intermediate_size") and moe_inter:  # Qwen2-MoE: one wide shared expert
        shared = _size(config, "shared_expert_intermediate_size") / _size(config, "moe_intermediate_size")
        out["shared_experts"] = max(1, round(shared))
    first_dense = _first(config, "first_k_dense_replace", default=0)
    if family in ("qwen2_moe", "qwen3_moe") + QWEN_NEXT:
        dense_layers = config.get("mlp_only_layers") or []
        if not isinstance(dense_layers, list):
            raise bad("hf_config.mlp_only_layers", dense_layers, "must be a list of layer indices")
        first_dense = len(dense_layers)
    if first_dense:
        out["first_dense_layers"] = first_dense
    return out


def _window(config: Mapping[str, Any], family: str, layers: int) -> dict[str, Any]:
    """Sliding-window attention: every layer (Mistral v0.1), or all but every n-th (Gemma 2: 2, Gemma 3: 6),
    from `layer_types` when the config lists them."""
    window = config.get("sliding_window")
    if not window or config.get("use_sliding_window") is False:
        return {}
    types = config.get("layer_types")
    if isinstance(types, list) and types:
        full = [i for i, t in enumerate(types) if t == "full_attention"]
        if not full:
            return {"sliding_window": window}
        if len(full) == len(types):
            return {}
        every = full[0] + 1
        return {"sliding_window": window, "global_attention_every": every}
    pattern = _first(config, "sliding_window_pattern", "_sliding_window_pattern")
    if pattern:
        return {"sliding_window": window, "global_attention_every": pattern}
    if family == "gemma2":
        return {"sliding_window": window, "global_attention_every": 2}
    return {"sliding_window": window}


def _mla(config: Mapping[str, Any]) -> dict[str, Any]:
    if not config.get("kv_lora_rank"):
        return {}
    return {
        "kv_lora_rank": config["kv_lora_rank"],
        "q_lora_rank": config.get("q_lora_rank"),
        "qk_rope_head_dim": config.get("qk_rope_head_dim", 0),
        "head_dim": config.get("qk_nope_head_dim"),
        "v_head_dim": config.get("v_head_dim"),
    }


def _hybrid(config: Mapping[str, Any], family: str) -> dict[str, Any]:
    """The layer pattern and the recurrent mixer's shape of a hybrid family ({} for the others)."""
    if family in QWEN_NEXT:
        out = {
            "layer_pattern": _layer_types(config),
            "attn_output_gate": True,
            "shared_expert_gate": bool(config.get("shared_expert_intermediate_size")),
        }
        out.update({k: config[k] for k in GDN_KEYS if config.get(k) is not None})
    elif family == "granitemoehybrid":
        out = {"layer_pattern": _layer_types(config), **_mamba(config, 1)}
        shared = config.get("shared_intermediate_size")
        if not config.get("num_local_experts"):  # dense: the shared_mlp is the layer's MLP
            out["intermediate_size"] = shared or config.get("intermediate_size")
        elif shared:  # the shared_mlp as shared experts of the routed experts' width (intermediate_size)
            out["shared_experts"] = max(1, round(shared / _size(config, "intermediate_size")))
    elif family == "nemotron_h":
        pattern = config.get("hybrid_override_pattern")
        if not isinstance(pattern, str) or "E" in pattern:
            raise bad(
                "hf_config.hybrid_override_pattern",
                pattern,
                "must be a string of M, *, - (MoE blocks E are not modelled)",
            )
        out = {"layer_pattern": pattern, "pattern_style": "one_sublayer", "mlp": "relu2", **_mamba(config, 0)}
        if config.get("attention_head_dim") is not None:
            out["head_dim"] = config["attention_head_dim"]
    else:
        return {}
    dtype = _first(config, "mamba_ssm_cache_dtype", "mamba_ssm_dtype")
    if dtype in STATE_DTYPES:
        out["ssm_state_dtype"] = STATE_DTYPES[dtype]
    return out


def _layer_types(config: Mapping[str, Any]) -> str:
    """HF layer_types as a pattern; Qwen3-Next without it: every full_attention_interval-th layer attends."""
    types = _first(config, "layer_types", "layers_block_type")
    if isinstance(types, list):
        wrong = [t for t in types if t not in LAYER_TYPES]
        if wrong:
            raise bad("hf_config.layer_types", wrong[0], f"is not one of {', '.join(LAYER_TYPES)}")
        return "".join(LAYER_TYPES[t] for t in types)
    interval, layers = config.get("full_attention_interval", 4), config.get("num_hidden_layers", 0)
    return "".join("G" if (i + 1) % interval else "*" for i in range(layers))


def _mamba(config: Mapping[str, Any], style: int) -> dict[str, Any]:
    """Mamba-2 fields under the family's key names (`style` 0: Nemotron-H, 1: Granite); a head dim "auto" is
    expand × hidden / heads (HF GraniteMoeHybridConfig)."""
    out = {field: config[keys[style]] for field, keys in MAMBA_KEYS.items() if config.get(keys[style]) is not None}
    if out.get("mamba_head_dim") == "auto":
        out["mamba_head_dim"] = config.get("mamba_expand", 2) * config["hidden_size"] // out["mamba_num_heads"]
    return out
