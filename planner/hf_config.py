"""A Hugging Face `config.json` read into a `Model`.

Each family's keys are mapped explicitly (transformers' configuration classes are the reference for the key
names and their defaults); a family not listed is read as Llama-like only when its keys say so (RMSNorm
epsilon, SiLU activation), else it is refused with the keys that are missing. Multimodal configs are read
from their `text_config`: the planner models the language decoder.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.errors import PlanError, bad
from planner.loader import HF_CONFIG, load_json
from planner.models import Model

# Families whose MLP is gated (SwiGLU/GeGLU: gate, up, down) with RMSNorm, and those with a plain GeLU MLP and
# LayerNorm with biases.
GATED = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3_text",
         "phi3", "olmo", "olmo2", "deepseek_v2", "deepseek_v3", "granite", "cohere", "internlm2", "smollm3",
         "ministral", "mistral3_text", "glm", "exaone", "nemotron_h")
PLAIN = ("gpt2", "gpt_neox", "gpt_bigcode", "phi", "starcoder2", "falcon", "opt", "gptj")
# what transformers assumes when a config omits tie_word_embeddings (PretrainedConfig's default is True)
UNTIED_BY_DEFAULT = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3", "olmo",
                     "olmo2", "deepseek_v2", "deepseek_v3", "gpt_neox", "phi", "granite", "internlm2")
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
        config = {**config["text_config"], "model_type": config["text_config"].get("model_type", config.get("model_type"))}
    family = str(config.get("model_type", ""))
    gated = family in GATED or (family not in PLAIN and _llama_like(config))
    if family not in GATED and family not in PLAIN and not gated:
        raise PlanError("hf_config", f"model_type {family or None!r} is not a known family and its keys do not "
                        f"describe a Llama-like decoder (rms_norm_eps and hidden_act silu); known families: "
                        f"{', '.join(sorted(GATED + PLAIN))}")

    out: dict[str, Any] = {}
    missing = []
    for field, keys in ALIASES.items():
        key = next((k for k in keys if config.get(k) is not None), None)
        if key is None:
            missing.append(" or ".join(keys))
        else:
            out[field] = config[key]
    if missing:
        raise PlanError("hf_config", f"missing {'; '.join(missing)} (model_type {family or None!r})")
    h, heads = out["hidden_size"], out["num_attention_heads"]
    out["num_kv_heads"] = _first(config, "num_key_value_heads", "num_kv_heads", "n_head_kv",
                                 default=1 if config.get("multi_query") else heads)
    if config.get("head_dim") is not None:
        out["head_dim"] = config["head_dim"]
    inter = _first(config, "intermediate_size", "n_inner", "ffn_hidden_size", "ffn_dim", "ff_dim")
    # GPT-2, Falcon: 4h when unset (a hidden size that is no integer is left for the model's own check)
    out["intermediate_size"] = inter if inter is not None else 4 * h if type(h) is int else h
    out["mlp"] = "swiglu" if gated else "gelu"
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
    if family in ("qwen3", "qwen3_moe", "gemma3_text"):  # per-head q_norm / k_norm (OLMo 2's are full-width)
        out["qk_norm"] = True
    if out.get("kv_lora_rank"):
        out["num_kv_heads"] = heads
    try:
        return Model(**out)
    except PlanError as exc:  # the value read breaks a rule of the architecture (names the planner's field)
        raise PlanError("hf_config", str(exc)) from None


def _first(config: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    return next((config[k] for k in keys if config.get(k) is not None), default)


def _size(config: Mapping[str, Any], key: str) -> int | float:
    """A width the mapping divides by: a positive finite number (JSON has no NaN; a mapping passed in may)."""
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise bad(f"hf_config.{key}", value, "must be a positive number")
    return value


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
    if family == "qwen2_moe" or family == "qwen3_moe":
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
    return {"kv_lora_rank": config["kv_lora_rank"], "q_lora_rank": config.get("q_lora_rank"),
            "qk_rope_head_dim": config.get("qk_rope_head_dim", 0), "head_dim": config.get("qk_nope_head_dim"),
            "v_head_dim": config.get("v_head_dim")}
