"""Hugging Face config.json import: real configs give the presets' architectures; errors name what is missing."""

import dataclasses
import json

import pytest
from conftest import ROOT

from planner.errors import PlanError
from planner.formats.hf_config import model_from_hf_config, shaped_model
from planner.plan.models import presets

CONFIGS = ROOT / "tests" / "data" / "hf_configs"


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")), ids=lambda p: p.stem)
def test_published_configs_give_the_preset_architecture(path):
    # GQA, untied heads, MoE (Mixtral, Qwen3-MoE), MLA + shared experts + dense-first (DeepSeek-V3), Gemma 2's
    # alternating windows with its implicit tied embeddings, GPT-2's n_* keys and 4h default, Mistral's window
    assert model_from_hf_config(path.read_text()) == dataclasses.replace(presets()[path.stem].model, preset=None)


LLAMA = json.loads((CONFIGS / "llama-3.1-8b.json").read_text())


def test_a_config_shaped_like_a_preset_is_named_as_it():
    """Llama 3.1 8B's config.json under another name is the preset llama-3.1-8b (every architecture field equal);
    a vocabulary one token larger is no preset's, and the model stays unnamed."""
    named = shaped_model({**LLAMA, "_name_or_path": "someone/llama-finetune"})
    assert named == presets()["llama-3.1-8b"].model and named.preset == "llama-3.1-8b"
    wider = shaped_model({**LLAMA, "vocab_size": 128_257})
    assert wider.preset is None and wider.vocab_size == 128_257


def test_layer_types_multimodal_text_config_and_shared_expert_width():
    text = {
        **LLAMA,
        "model_type": "gemma3_text",
        "sliding_window": 1024,
        "tie_word_embeddings": True,
        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 5 + ["sliding_attention"] * 2,
    }
    m = model_from_hf_config({"model_type": "gemma3", "text_config": text, "vision_config": {"hidden_size": 1152}})
    assert (m.sliding_window, m.global_attention_every, m.tie_embeddings) == (1024, 6, True)
    assert (
        model_from_hf_config({**LLAMA, "layer_types": ["full_attention"] * 32, "sliding_window": 4096}).sliding_window
        is None
    )
    qwen2_moe = {
        **LLAMA,
        "model_type": "qwen2_moe",
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "mlp_only_layers": [],
    }
    m = model_from_hf_config(qwen2_moe)
    assert (m.num_experts, m.experts_per_token, m.shared_experts, m.first_dense_layers) == (60, 4, 4, 0)
    falcon = {
        "model_type": "falcon",
        "hidden_size": 4544,
        "num_hidden_layers": 32,
        "num_attention_heads": 71,
        "multi_query": True,
        "vocab_size": 65024,
        "bias": False,
    }
    m = model_from_hf_config(falcon)
    assert (m.num_kv_heads, m.intermediate_size, m.mlp, m.bias, m.tie_embeddings) == (1, 4 * 4544, "gelu", False, True)


def test_unknown_llama_like_family_is_read_and_others_are_refused():
    assert model_from_hf_config({**LLAMA, "model_type": "my_llama"}) == model_from_hf_config(LLAMA)
    with pytest.raises(
        PlanError,
        match=r"^hf_config: model_type 'bert' is not a known family and its keys do not "
        r"describe a Llama-like decoder \(rms_norm_eps and hidden_act silu\); known "
        r"families: cohere, deepseek_v2, ",
    ):
        model_from_hf_config({"model_type": "bert", "hidden_size": 768})


@pytest.mark.parametrize(
    "config, message",
    [
        ("{not json", "hf_config: not valid JSON (Expecting property name enclosed in double quotes at line 1)"),
        ("[1, 2]", "hf_config: must be a JSON object, got list"),
        (
            {"model_type": "llama", "hidden_size": 4096},
            "hf_config: missing num_hidden_layers or n_layer or num_layers or n_layers; num_attention_heads or n_head "
            "or "
            "num_heads or n_heads; vocab_size or padded_vocab_size (model_type 'llama')",
        ),
        (
            {**LLAMA, "num_key_value_heads": 7},
            "hf_config: model.num_kv_heads: 7 must divide model.num_attention_heads (32)",
        ),
    ],
)
def test_errors_name_the_key_and_the_rule(config, message):
    with pytest.raises(PlanError) as err:
        model_from_hf_config(config)
    assert str(err.value) == message


def test_oversized_and_deeply_nested_configs_are_refused():
    with pytest.raises(PlanError, match=r"^hf_config: nested too deeply to be a config.json$"):
        model_from_hf_config('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(PlanError, match=r"^hf_config: 2,000,009 bytes is larger than the 1,048,576-byte limit"):
        model_from_hf_config('{"a": "' + "x" * 2_000_000 + '"}')


def test_a_hidden_size_that_is_no_integer_is_the_models_error_not_a_crash():
    """Found by the fuzzer: a GPT-2 config without n_inner derived 4 × n_embd before n_embd was checked."""
    with pytest.raises(PlanError, match=r"^hf_config: model.hidden_size: \{\} must be an integer from 1 to "):
        model_from_hf_config({"model_type": "gpt2", "n_embd": {}, "n_layer": 2, "n_head": 2, "vocab_size": 10})


@pytest.mark.parametrize(
    "keys, window",
    [
        (
            {
                "max_position_embeddings": 131072,
                "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192},
            },
            131072,
        ),
        # Qwen2.5-Instruct's long-text recipe: YaRN factor 4 over 32,768
        (
            {
                "max_position_embeddings": 32768,
                "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
            },
            131072,
        ),
        ({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 4}}, 16384),  # scaled by vLLM
        ({"max_position_embeddings": 4096, "n_positions": 2048}, 2048),  # the smallest length key wins
        ({"max_position_embeddings": 4096, "model_max_length": 8192}, 8192),  # Command-R's key overrides
        ({}, None),  # no length: not known (vLLM would assume 2,048)
    ],
)
def test_context_window_is_the_length_vllm_derives(keys, window):
    config = {
        "model_type": "llama",
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 512,
        "vocab_size": 1000,
        **keys,
    }
    assert model_from_hf_config(config).context_window == window


def test_gemma3_length_is_not_scaled_again():
    config = {
        "model_type": "gemma3",
        "text_config": {
            "model_type": "gemma3_text",
            "hidden_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "intermediate_size": 512,
            "vocab_size": 1000,
            "head_dim": 64,
            "max_position_embeddings": 131072,
            "rope_scaling": {"rope_type": "linear", "factor": 8.0},
        },
    }
    assert model_from_hf_config(config).context_window == 131072


@pytest.mark.parametrize(
    "family, keys, activation",
    [
        ("gpt2", {}, "gelu_new"),  # GPT2Config's default activation_function
        ("gpt2", {"activation_function": "gelu_pytorch_tanh"}, "gelu_pytorch_tanh"),
        ("gpt_neox", {"hidden_act": "gelu"}, "gelu"),  # Pythia's config.json
        ("gpt_neox", {}, "gelu"),  # GPTNeoXConfig's default
        ("falcon", {}, "gelu"),  # Falcon's config.json names none: FalconConfig's default
        ("gpt_bigcode", {}, "gelu_pytorch_tanh"),
        ("phi", {"hidden_act": "gelu_new"}, "gelu_new"),
        ("opt", {"activation_function": "relu"}, "gelu_new"),  # not told apart: the most an elementwise op saves
    ],
)
def test_a_gelu_familys_activation_is_its_configs_or_its_class_default(family, keys, activation):
    config = {"model_type": family, "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 100, **keys}
    assert model_from_hf_config(config).activation == activation
