"""Hybrid recurrent/attention models: parameter totals against published counts, the recurrent state by hand,
vLLM's hybrid pool against published startup logs, the all-attention invariant and the pattern errors.
Shapes and counts: the research notes docs/hybrid.md §1-§3 and §6."""

import dataclasses

import pytest
from conftest import TINY
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import PlanError
from planner.formats.hf_config import model_from_hf_config
from planner.memory import estimate
from planner.memory.activations import attention_acts, layer_acts, recurrent_acts
from planner.memory.inference import kv_bytes_per_token, kv_cache_bytes, weight_bytes
from planner.memory.recurrent import hybrid_pool, layer_state_bytes, prefill_peak, state_bytes_per_sequence
from planner.perf.flops import forward_flops_per_token
from planner.perf.serving import _decode_read_bytes
from planner.plan.codec import plan_from_dict, plan_from_query, plan_to_query
from planner.plan.models import Model, gdn_params, mamba2_params, model_from_dict, model_to_dict, presets
from planner.units import GiB

NEMOTRON_8B_PATTERN = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
# Qwen3.5-35B-A3B's text tower (transformers Qwen3_5MoeTextConfig defaults, docs/hybrid.md §1.3): 30 GDN + 10 attention
QWEN35_MOE = dict(
    num_layers=40,
    hidden_size=2048,
    num_attention_heads=16,
    num_kv_heads=2,
    head_dim=256,
    intermediate_size=512,
    vocab_size=248320,
    qk_norm=True,
    attn_output_gate=True,
    num_experts=256,
    experts_per_token=8,
    moe_intermediate_size=512,
    shared_experts=1,
    shared_expert_gate=True,
    layer_pattern="GGG*" * 10,
    linear_num_key_heads=16,
    linear_num_value_heads=32,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    ssm_state_dtype="fp32",
)


def serve(model, **inference):
    return plan_from_dict({"model": model, "workload": {"task": "inference", "inference": inference}})


@pytest.mark.parametrize(
    "preset, total, active",
    [
        # a third-party test quotes 79,674,391,296 / 3,874,929,408 for the same dimensions "from the published total"
        ("qwen3-next-80b-a3b", 79_674_391_296, 3_874_929_408),
        ("nemotron-h-8b", 8_100_852_736, 8_100_852_736),  # "8B"
        ("granite-4.0-h-small", 32_207_337_984, 8_803_121_664),  # IBM: 32B total, 9B active
    ],
)
def test_presets_reproduce_the_layer_by_layer_totals(preset, total, active):
    p = presets()[preset].model.params
    assert (p.total, p.active) == (total, active)


def test_mixer_params_by_hand():
    nemotron, qwen = presets()["nemotron-h-8b"].model, presets()["qwen3-next-80b-a3b"].model
    # in_proj 4096 × (2·8192 + 2·8·128 + 128) + conv (8192 + 2048) × (4 + 1) + 3·128 + 8192 + out 8192 × 4096
    assert mamba2_params(nemotron) == 4096 * 18560 + 10240 * 5 + 384 + 8192 + 8192 * 4096 == 109_635_968
    # qkvz 2048 × (2·2048 + 2·4096) + ba 2048 × 64 + conv 8192 × 4 + 2·32 + 128 + out 4096 × 2048
    assert gdn_params(qwen) == 2048 * 12288 + 2048 * 64 + 8192 * 4 + 64 + 128 + 4096 * 2048 == 33_718_464
    # tensor parallelism splits the heads: the mixer's matrices halve
    assert gdn_params(qwen, 2) == 2048 * 6144 + 2048 * 32 + 4096 * 4 + 32 + 128 + 2048 * 2048


def test_nano_9b_v2_and_granite_micro_from_their_configs():
    nano = {
        "model_type": "nemotron_h",
        "hidden_size": 4480,
        "num_hidden_layers": 56,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 15680,
        "vocab_size": 131072,
        "tie_word_embeddings": False,
        "mamba_num_heads": 128,
        "mamba_head_dim": 80,
        "ssm_state_size": 128,
        "n_groups": 8,
        "conv_kernel": 4,
        "mamba_ssm_cache_dtype": "float32",
        "hybrid_override_pattern": "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-",
    }
    assert model_from_hf_config(nano).params.total == 8_888_227_328  # "9B"; 27 Mamba, 25 MLP, 4 attention
    micro = {
        "model_type": "granitemoehybrid",
        "hidden_size": 2048,
        "num_hidden_layers": 40,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 8192,
        "shared_intermediate_size": 8192,
        "num_local_experts": 0,
        "vocab_size": 100352,
        "tie_word_embeddings": True,
        "mamba_n_heads": 64,
        "mamba_d_head": "auto",
        "mamba_expand": 2,
        "mamba_d_state": 128,
        "mamba_n_groups": 1,
        "mamba_d_conv": 4,
        "layer_types": (["mamba"] * 5 + ["attention"] + ["mamba"] * 4) * 4,
    }
    assert model_from_hf_config(micro).params.total == 3_191_396_096  # "3B"


@pytest.mark.parametrize(
    "preset, config",
    [
        (
            "qwen3-next-80b-a3b",
            {
                "model_type": "qwen3_next",
                "hidden_size": 2048,
                "num_hidden_layers": 48,
                "num_attention_heads": 16,
                "num_key_value_heads": 2,
                "head_dim": 256,
                "intermediate_size": 5120,
                "vocab_size": 151936,
                "tie_word_embeddings": False,
                "num_experts": 512,
                "num_experts_per_tok": 10,
                "moe_intermediate_size": 512,
                "shared_expert_intermediate_size": 512,
                "mlp_only_layers": [],
                "full_attention_interval": 4,
                "linear_num_key_heads": 16,
                "linear_num_value_heads": 32,
                "linear_key_head_dim": 128,
                "linear_value_head_dim": 128,
                "linear_conv_kernel_dim": 4,
            },
        ),
        (
            "nemotron-h-8b",
            {
                "model_type": "nemotron_h",
                "hidden_size": 4096,
                "num_hidden_layers": 52,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "attention_head_dim": 128,
                "intermediate_size": 21504,
                "vocab_size": 131072,
                "tie_word_embeddings": False,
                "mamba_num_heads": 128,
                "mamba_head_dim": 64,
                "ssm_state_size": 128,
                "n_groups": 8,
                "conv_kernel": 4,
                "mamba_ssm_cache_dtype": "float32",
                "hybrid_override_pattern": NEMOTRON_8B_PATTERN,
            },
        ),
        (
            "granite-4.0-h-small",
            {
                "model_type": "granitemoehybrid",
                "hidden_size": 4096,
                "num_hidden_layers": 40,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "intermediate_size": 768,
                "shared_intermediate_size": 1536,
                "num_local_experts": 72,
                "num_experts_per_tok": 10,
                "vocab_size": 100352,
                "tie_word_embeddings": True,
                "mamba_n_heads": 128,
                "mamba_d_head": 64,
                "mamba_d_state": 128,
                "mamba_n_groups": 1,
                "mamba_d_conv": 4,
                "layer_types": (["mamba"] * 5 + ["attention"] + ["mamba"] * 4) * 4,
            },
        ),
    ],
)
def test_hf_configs_give_the_preset_counts(preset, config):
    m, want = model_from_hf_config(config), presets()[preset].model
    assert (m.params.total, m.params.active, m.layer_pattern) == (
        want.params.total,
        want.params.active,
        want.layer_pattern,
    )
    assert m.ssm_state_dtype == want.ssm_state_dtype


@pytest.mark.parametrize("preset", ["qwen3-next-80b-a3b", "nemotron-h-8b", "granite-4.0-h-small"])
def test_plan_files_round_trip_the_hybrid_keys(preset):
    m = presets()[preset].model
    assert model_from_dict(model_to_dict(m)) == m and "layer_pattern" in model_to_dict(m)
    assert "layer_pattern" not in model_to_dict(presets()["llama-3.1-8b"].model)


@pytest.mark.parametrize(
    "preset, kind, engine, conv, state",
    [
        # vLLM (0.33 mamba_utils): conv (K − 1) × channels in bf16; the SSM state in the model dtype or the config's
        ("qwen3-next-80b-a3b", "G", "vllm", 3 * (2 * 2048 + 4096) * 2, 32 * 128 * 128 * 2),  # 49,152 + 1,048,576
        ("granite-4.0-h-small", "M", "vllm", 3 * (8192 + 2 * 128) * 2, 128 * 64 * 128 * 2),  # 50,688 + 2,097,152
        ("nemotron-h-8b", "M", "vllm", 3 * (8192 + 2 * 8 * 128) * 2, 128 * 64 * 128 * 4),  # 61,440 + 4,194,304 (fp32)
        # HF generate(): the conv state keeps all K columns; fla returns the GDN state in fp32
        ("qwen3-next-80b-a3b", "G", "hf", 4 * 8192 * 2, 32 * 128 * 128 * 4),
    ],
)
def test_state_bytes_per_layer_by_hand(preset, kind, engine, conv, state):
    assert layer_state_bytes(serve({"preset": preset}), kind, engine) == (conv, state)


@pytest.mark.parametrize(
    "preset, block", [("qwen3-next-80b-a3b", 544), ("granite-4.0-h-small", 528), ("nemotron-h-8b", 1040)]
)
def test_vllm_attention_block_size(preset, block):
    # Granite's 528 is quoted by vllm-project/vllm-gaudi PR #1564; 544 is the "Setting attention block size" of
    # a Qwen GDN model in vllm PR #55096
    plan = serve({"preset": preset})
    pool = hybrid_pool(plan, kv_bytes_per_token(plan) // plan.model.pattern_count("*"))
    assert pool.block_tokens == block


@pytest.mark.parametrize(
    "available_gib, blocks, tokens",
    [
        (5.98, 299, 567_978),  # noonghunna/club-3090 issue #612: 5.98 GiB → 567,978 tokens, 4.33x
        (6.01, 300, 569_878),  # the same repository's issue #652: 6.01 GiB → 569,878 tokens, 4.35x
    ],
)
def test_vllm_0_24_logs_for_qwen3_6_35b_a3b(available_gib, blocks, tokens):
    # vLLM 0.24 on an RTX 5090, kv_cache_dtype fp8, prefix caching on, max_model_len 131,072; the log's "GPU KV
    # cache size" is num_blocks / blocks per request × max_model_len (get_kv_cache_capacity, vLLM >= 0.25 wording)
    plan = plan_from_dict(
        {
            "model": QWEN35_MOE,
            "precision": {"kv_cache": "fp8"},
            "workload": {
                "task": "inference",
                "inference": {"prompt_tokens": 131_072 - 256, "output_tokens": 256, "prefix_caching": True},
            },
        }
    )
    pool = hybrid_pool(plan, kv_bytes_per_token(plan) // 10)
    assert (pool.block_tokens, pool.page_bytes, pool.group_size) == (2096, 2_146_304, 10)
    assert pool.num_blocks(int(available_gib * GiB)) == blocks
    per_request = pool.blocks_per_sequence(131_072)
    assert per_request == 63 + 3 * 2
    assert int(blocks / per_request * 131_072) == tokens


def test_generate_keeps_a_constant_state_and_kv_only_for_attention():
    short, long = (serve({"preset": "qwen3-next-80b-a3b"}, prompt_tokens=p) for p in (1000, 100_000))
    assert kv_bytes_per_token(short) == 12 * 2 * 2 * 256 * 2  # 12 attention layers × K, V × 2 KV heads × 256 × bf16
    per_seq = 36 * (65_536 + 2_097_152)
    assert state_bytes_per_sequence(short, "hf") == state_bytes_per_sequence(long, "hf") == per_seq
    items = {i.name: i.bytes for i in estimate(short).items}
    assert items["recurrent_state"] == per_seq
    assert "state" not in {i.name for i in estimate(serve({"preset": "llama-3.1-8b"})).items}


def test_recurrent_layers_cut_attention_flops():
    plan = serve({"preset": "qwen3-next-80b-a3b"})
    attention_only = dataclasses.replace(plan, model=dataclasses.replace(plan.model, layer_pattern="*" * 48))
    assert forward_flops_per_token(plan, 8192) < forward_flops_per_token(attention_only, 8192)


@settings(max_examples=40, deadline=None)
@given(
    layers=st.integers(1, 6),
    task=st.sampled_from(["pretrain", "lora", "inference", "serving"]),
    pipeline=st.sampled_from([1, 2]),
    tensor=st.sampled_from([1, 2]),
)
def test_an_all_attention_pattern_is_the_plain_model(layers, task, pipeline, tensor):
    plain = {**TINY, "num_layers": max(layers, pipeline)}
    workload = (
        {"task": "inference", "inference": {"gpu_memory_utilization": 0.9}} if task == "serving" else {"task": task}
    )
    base = {"workload": workload, "parallelism": {"pipeline": pipeline, "tensor": tensor}}
    a = estimate(plan_from_dict({"model": plain, **base}))
    b = estimate(plan_from_dict({"model": {**plain, "layer_pattern": "*" * plain["num_layers"]}, **base}))
    assert [(i.name, i.bytes) for i in a.items] == [(i.name, i.bytes) for i in b.items]


LLAMA_LIKE = dict(num_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=512, vocab_size=1000)


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"layer_pattern": "**M"}, "model.layer_pattern: '**M' has 3 characters; model.num_layers is 4"),
        (
            {"layer_pattern": "**X*"},
            "model.layer_pattern: '**X*' has 'X' at position 2; mixer_ffn patterns use only * M G",
        ),
        (
            {
                "layer_pattern": "*M-*",
                "pattern_style": "one_sublayer",
                "mamba_num_heads": 8,
                "mamba_head_dim": 64,
                "ssm_state_size": 16,
            },
            None,
        ),
        (
            {
                "layer_pattern": "GGGG",
                "linear_num_key_heads": 2,
                "linear_num_value_heads": 4,
                "linear_key_head_dim": 64,
                "linear_value_head_dim": 64,
            },
            "model.layer_pattern: 'GGGG' has no attention layer (*); pure recurrent models are not modelled",
        ),
        ({"layer_pattern": "M*M*"}, "model.mamba_num_heads: None must be set: model.layer_pattern has M layers"),
        ({"mamba_num_heads": 8}, "model.mamba_num_heads: 8 needs model.layer_pattern (a hybrid model)"),
        (
            {
                "layer_pattern": "M*M*",
                "mamba_num_heads": 6,
                "mamba_head_dim": 64,
                "ssm_state_size": 16,
                "mamba_n_groups": 4,
            },
            "model.mamba_n_groups: 4 must divide model.mamba_num_heads (6)",
        ),
        (
            {
                "layer_pattern": "G*G*",
                "linear_num_key_heads": 3,
                "linear_num_value_heads": 4,
                "linear_key_head_dim": 64,
                "linear_value_head_dim": 64,
            },
            "model.linear_num_key_heads: 3 must divide model.linear_num_value_heads (4)",
        ),
    ],
)
def test_pattern_errors_name_field_value_and_rule(extra, message):
    if message is None:  # a valid one-sublayer pattern: one norm per block, the MLP only in `-` blocks
        m = Model(**LLAMA_LIKE, **extra)
        plain = Model(**LLAMA_LIKE).params
        assert m.params.layers == 2 * plain.attention + mamba2_params(m) + plain.mlp + 4 * plain.norms // 2
        return
    with pytest.raises(PlanError) as err:
        Model(**LLAMA_LIKE, **extra)
    assert str(err.value) == message


def test_share_links_carry_the_hybrid_keys():
    model = {k: v for k, v in model_to_dict(presets()["nemotron-h-8b"].model).items() if k != "preset"}
    plan = plan_from_dict(
        {
            "model": model,
            "workload": {"task": "inference", "inference": {"prefix_caching": True, "gpu_memory_utilization": 0.9}},
        }
    )
    query = plan_to_query(plan)
    assert query["layer_pattern"] == NEMOTRON_8B_PATTERN and query["prefix_caching"] == "true"
    assert "linear_conv_kernel_dim" not in query  # a Mamba-2 model writes no Gated DeltaNet keys
    assert plan_from_query(query, {"model": {"preset": "llama-3.1-8b"}}) == (plan, [])


def test_prefill_peak_of_a_mamba_2_layer_by_hand():
    # Nemotron-H-8B over 512 tokens: zxbcdt (2·8192 + 2·1024 + 128), the conv output (8192 + 2·1024) and the scan
    # output (8192) in bf16, and 2 chunks of fp32 states 128 × 64 × 128
    plan = serve({"preset": "nemotron-h-8b"})
    assert prefill_peak(plan, 512, 2) == 512 * 36_992 * 2 + 2 * 128 * 64 * 128 * 4 == 46_268_416
    assert prefill_peak(serve(TINY), 512, 2) == 0


def test_training_saves_of_the_recurrent_mixers_by_hand():
    # docs/hybrid.md §4: fused Mamba-2 2(h + 3I + 2GN + H) + 4G per token (Nemotron-H-8B: 61,696 + 32), the in_proj
    # input h counted with the norms; GDN on the HF path ≈ 74 KiB per token for Qwen3-Next (74,304 with the input)
    nemotron = plan_from_dict({"model": {"preset": "nemotron-h-8b"}})
    assert recurrent_acts(nemotron, 2, "M")[0] == 61_696 + 32 - 2 * 4096
    qwen = plan_from_dict({"model": {"preset": "qwen3-next-80b-a3b"}})
    assert recurrent_acts(qwen, 2, "G")[0] == 74_304 - 2 * 2048
    # a stage's layer is the mean over its own layers: 36 GDN + 12 attention of Qwen3-Next, pipeline 1
    acts, attention = layer_acts(qwen), attention_acts(qwen, 2)[0]
    assert acts.attention == (36 * recurrent_acts(qwen, 2, "G")[0] + 12 * attention) // 48


def test_a_decode_step_reads_and_rewrites_the_state():
    plan = serve({"preset": "nemotron-h-8b"}, batch_size=4, prompt_tokens=1000, output_tokens=100)
    cache = (kv_cache_bytes(plan, 1000) + kv_cache_bytes(plan, 1100)) / 2
    # HF generate(): K = 4 conv columns over x, B, C and the Mamba-2 state in bf16 (HF ignores the fp32 hint)
    state = 24 * (4 * (8192 + 2 * 8 * 128) * 2 + 128 * 64 * 128 * 2)
    assert state_bytes_per_sequence(plan, "hf") == state
    assert _decode_read_bytes(plan) == weight_bytes(plan)[0] + 4 * (cache + 2 * state)


def test_qwen3_5_moe_text_config_reads_its_layer_types_and_fp32_state():
    # transformers Qwen3_5MoeTextConfig defaults (Qwen/Qwen3.5-35B-A3B), nested in text_config; docs/hybrid.md §2.4
    text = {
        "model_type": "qwen3_5_moe_text",
        "hidden_size": 2048,
        "num_hidden_layers": 40,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "vocab_size": 248320,
        "num_experts": 256,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "mamba_ssm_dtype": "float32",
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 10,
    }
    m = model_from_hf_config({"model_type": "qwen3_5_moe", "text_config": text, "vision_config": {}})
    assert (m.params.total, m.params.active) == (34_660_610_688, 3_454_988_928)
    assert m == Model(**{**QWEN35_MOE, "intermediate_size": 4 * 2048})  # no intermediate_size: 4h, unused (all MoE)
