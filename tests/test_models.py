import pytest
from conftest import TINY

from planner.errors import PlanError
from planner.plan.models import Model, model_from_dict, model_to_dict, presets


def test_tiny_param_counts_by_hand():
    p = Model(**TINY).params
    assert p.embedding == 1000 * 64
    assert p.attention == 64 * 64 + 2 * 64 * 32 + 64 * 64  # q, k, v (2 kv heads × 16), o
    assert p.mlp == 3 * 64 * 128
    assert p.norms == 2 * 64
    assert p.layer == 36_992
    assert p.total == 64_000 + 2 * 36_992 + 64 + 64_000 == 202_048


def test_tied_biased_gelu_layernorm_counts():
    m = Model(**{**TINY, "num_kv_heads": 4}, mlp="gelu", norm="layernorm", bias=True, tie_embeddings=True)
    p = m.params
    assert p.attention == 4 * 64 * 64 + (64 + 2 * 64 + 64)
    assert p.mlp == 2 * 64 * 128 + 128 + 64
    assert p.norms == 4 * 64 and p.final_norm == 128
    assert p.lm_head == 0


@pytest.mark.parametrize("preset", sorted(presets()))
def test_every_preset_matches_its_published_count_within_1_percent(preset):
    entry = presets()[preset]
    assert abs(entry.model.params.total - entry.published_params) <= 0.01 * entry.published_params


def test_llama_3_1_8b_exact():
    assert presets()["llama-3.1-8b"].model.params.total == 8_030_261_248


def test_defaults_kv_heads_and_head_dim():
    m = Model(num_layers=1, hidden_size=512, num_attention_heads=8, intermediate_size=1024, vocab_size=10)
    assert m.num_kv_heads == 8 and m.head_dim == 64


def test_preset_with_override_rederives_head_dim():
    m = model_from_dict({"preset": "llama-3.1-8b", "hidden_size": 2048})
    assert m.head_dim == 64 and m.num_layers == 32 and m.preset == "llama-3.1-8b"


def test_model_round_trip_writes_every_key():
    d = model_to_dict(model_from_dict({"preset": "gpt2"}))
    assert d["mlp"] == "gelu" and d["num_kv_heads"] == 12
    assert model_from_dict(d) == model_from_dict({"preset": "gpt2"})


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"num_layers": 0}, "model.num_layers: 0 is out of range; must be from 1 to 1,024"),
        ({"hidden_size": "4096"}, "model.hidden_size: '4096' must be an integer from 1 to 131,072"),
        ({"num_kv_heads": 3}, "model.num_kv_heads: 3 must divide model.num_attention_heads (4)"),
        ({"mlp": "relu"}, "model.mlp: 'relu' is not one of: swiglu, gelu, relu2"),
        (
            {"hidden_size": 66},
            "model.hidden_size: 66 is not a multiple of model.num_attention_heads (4); give model.head_dim",
        ),
        ({"bias": "yes"}, "model.bias: 'yes' must be true or false"),
    ],
)
def test_validation_messages(changes, message):
    with pytest.raises(PlanError) as err:
        Model(**{**TINY, **changes})
    assert str(err.value) == message


def test_unknown_model_key_lists_allowed():
    with pytest.raises(
        PlanError,
        match=r"^model.layers: unknown key; allowed keys are: activation, attn_output_gate, bias, context_window, "
        r"experts_per_token, ",
    ):
        model_from_dict({**TINY, "layers": 2})


def test_unknown_preset_and_missing_fields():
    with pytest.raises(
        PlanError,
        match=r"^model.preset: 'llama-9' is not a known preset; known: deepseek-v2, deepseek-v2-lite, deepseek-v3, "
        r"falcon-40b, falcon-7b, gemma-2-27b, ",
    ):
        model_from_dict({"preset": "llama-9"})
    with pytest.raises(PlanError) as err:
        model_from_dict({"num_layers": 2})
    assert str(err.value) == (
        "model: missing hidden_size, num_attention_heads, intermediate_size, vocab_size (give them, or a model.preset)"
    )


def test_tensor_parallel_counts_per_rank():
    from planner.plan.models import param_counts

    p = param_counts(Model(**TINY), tensor=2)
    assert p.attention == 64 * 32 + 2 * 64 * 16 + 32 * 64  # 2 of 4 heads, 1 of 2 KV heads
    assert p.mlp == 3 * 64 * 64 and p.norms == 128 and p.embedding == 500 * 64
    four = param_counts(Model(**TINY), tensor=4)
    assert four.attention == 64 * 16 + 2 * 64 * 16 + 16 * 64  # 2 KV heads over 4 ranks: one replicated per rank


def test_latent_attention_counts_by_hand():
    # DeepSeek-V3's attention, from its config: q_a 7168×1536 + q_a norm 1536 + q_b 1536×128×(128+64)
    # + kv_a 7168×(512+64) + kv_a norm 512 + kv_b 512×128×(128+128) + o 128×128×7168
    m = presets()["deepseek-v3"].model
    assert (
        m.params.attention
        == (7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168)
        == 187_107_328
    )
    # 37B active per token (DeepSeek-V3 report): 8 routed + 1 shared expert, embeddings included here
    assert 37e9 < m.params.active < 38e9
    lite = presets()["deepseek-v2-lite"].model  # no q latent: q is one h × heads × 192 projection
    assert lite.params.attention == 2048 * 16 * 192 + 2048 * 576 + 512 + 512 * 16 * 256 + 16 * 128 * 2048
    small = Model(
        num_layers=4,
        hidden_size=1024,
        num_attention_heads=16,
        intermediate_size=2048,
        vocab_size=32000,
        head_dim=64,
        kv_lora_rank=256,
        q_lora_rank=384,
        qk_rope_head_dim=32,
        v_head_dim=64,
    )
    assert small.params.total == 102_116_864  # HF DeepseekV3ForCausalLM of this config, counted by torch


def test_latent_attention_round_trips_and_is_validated():
    m = presets()["deepseek-v2-lite"].model
    d = model_to_dict(m)
    assert d["kv_lora_rank"] == 512 and d["q_lora_rank"] is None and model_from_dict(d) == m
    assert "kv_lora_rank" not in model_to_dict(presets()["llama-3.1-8b"].model)
    with pytest.raises(
        PlanError,
        match=r"^model.kv_lora_rank: None must be set for q_lora_rank, qk_rope_head_dim "
        r"or v_head_dim \(latent attention\)$",
    ):
        Model(**TINY, qk_rope_head_dim=64)
    with pytest.raises(PlanError, match=r"^model.num_kv_heads: 2 must equal num_attention_heads with latent "):
        Model(**TINY, kv_lora_rank=32)


def test_parameter_count_mode_follows_its_shape_rules():
    from planner.plan.models import model_from_param_count, parse_param_count

    assert [parse_param_count(v) for v in ("13B", "770m", "1.5e9", 7_000_000_000, "1,000M")] == [
        13_000_000_000,
        770_000_000,
        1_500_000_000,
        7_000_000_000,
        1_000_000_000,
    ]
    eight = model_from_param_count(8_000_000_000)  # the rules rebuild Llama 3 8B's shape exactly
    assert (eight.num_layers, eight.hidden_size, eight.num_kv_heads, eight.intermediate_size, eight.vocab_size) == (
        32,
        4096,
        8,
        14336,
        128_256,
    ) and not eight.tie_embeddings
    small = model_from_param_count(125_000_000)  # GPT-2-small-like: 12 × 768, MHA, tied 32k vocabulary
    assert (small.num_layers, small.hidden_size, small.num_kv_heads, small.tie_embeddings) == (12, 768, 12, True)
    for target in (50e6, 350e6, 3e9, 70e9, 405e9, 5e12):
        m = model_from_param_count(int(target))
        assert abs(m.params.total - target) <= 0.01 * target and m.approx_params == int(target)
    assert model_from_dict({"params": "70B"}) == model_from_param_count(70_000_000_000)
    assert model_to_dict(model_from_dict({"params": "70B"})) == {"params": 70_000_000_000}


@pytest.mark.parametrize(
    "data, message",
    [
        ({"params": "13 GB"}, "model.params: '13 GB' must be a parameter count like 13B, 770M or 1.5e9"),
        ({"params": "7M"}, "model.params: '7M' is out of range; must be from 50M to 5T parameters"),
        (
            {"params": "7B", "preset": "gpt2"},
            "model.params: '7B' stands alone (an approximate architecture); drop preset or drop params",
        ),
    ],
)
def test_parameter_count_errors(data, message):
    with pytest.raises(PlanError) as err:
        model_from_dict(data)
    assert str(err.value) == message


def test_keys_a_rule_requires_read_without_none_in_their_branch():
    """Optional keys that a rule requires in one branch (latent attention, Mamba-2 and Gated DeltaNet layers) read
    as plain integers there, and raise where read outside it (a rule that let them through unset)."""
    dense = Model(**TINY)
    assert dense.pattern == "**"  # TINY's two layers, both attention
    for read, key in (
        (lambda: dense.latent_rank, "model.kv_lora_rank"),
        (lambda: dense.mamba_dims, "model.mamba_num_heads"),
        (lambda: dense.gdn_dims, "model.linear_num_key_heads"),
        (lambda: dense.expert_intermediate_size, "model.moe_intermediate_size"),
    ):
        with pytest.raises(ValueError, match=f"{key} is unset where its rules require it"):
            read()
    # the presets' config.json values (HF nemotron_h, qwen3_next)
    assert presets()["nemotron-h-8b"].model.mamba_dims == (128, 64, 128)
    assert presets()["qwen3-next-80b-a3b"].model.gdn_dims == (16, 32, 128, 128)


def test_a_gelu_mlp_defaults_to_gpt2s_unfused_gelu_and_other_mlps_take_no_activation():
    assert model_from_dict({**TINY, "mlp": "gelu"}).activation == "gelu_new"
    assert model_from_dict({**TINY, "mlp": "gelu", "activation": "gelu"}).composite_gelu is False
    assert model_from_dict(TINY).activation is None
    with pytest.raises(PlanError, match=r"^model.activation: .*names a gelu MLP's activation; model.mlp is swiglu"):
        model_from_dict({**TINY, "activation": "gelu"})
    # written out for a GeLU model only (a plan file does not depend on the default)
    assert model_to_dict(model_from_dict({**TINY, "mlp": "gelu"}))["activation"] == "gelu_new"
    assert "activation" not in model_to_dict(model_from_dict(TINY))
