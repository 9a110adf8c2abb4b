"""Inference memory: golden values by hand on TINY, and invariants."""

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import TINY
from planner.memory.inference import kv_bytes_per_token, weight_bytes
from planner.memory import CUBLAS_WORKSPACE_BYTES, estimate
from planner.codec import plan_from_dict
from planner.recommend import recommend

P = 202_048
WS = CUBLAS_WORKSPACE_BYTES


def infer(batch=2, prompt=32, output=8, **extra):
    inference = {"batch_size": batch, "prompt_tokens": prompt, "output_tokens": output, **extra.pop("inference", {})}
    return plan_from_dict({"model": TINY, "workload": {"task": "inference", "inference": inference},
                           "precision": {"compute": "bf16", **extra.pop("precision", {})}, **extra})


def test_generate_golden_values():
    est = estimate(infer())
    assert kv_bytes_per_token(infer()) == 2 * 2 * 32 * 2  # K and V × 2 layers × 2 KV heads × 16 × bf16
    prefill, decode = est.stages[0].phases
    # prefill: prompt KV 2 × 32 × 256; SwiGLU moment 3 × 64 tokens × 128 × 2 + 3 × 64 × 64 × 2; last-token
    # logits 2 × 1,000 × (2 + 4)
    assert prefill.allocated_bytes == 2 * P + WS + 2 * 32 * 256 + (49_152 + 24_576) + 12_000
    # decode: 39 cached tokens (the last one is sampled, not cached); one layer's K and V copied one longer
    assert decode.allocated_bytes == 2 * P + WS + 2 * 39 * 256 + 2 * 39 * 256 // 2 + 12_000 + 4 * 2 * 128 * 2
    assert est.phase == "prefill" and est.peak_allocated_bytes == prefill.allocated_bytes


def test_quantized_weights_and_kv_dtype():
    linear = 2 * (12_288 + 24_576)
    assert weight_bytes(infer(precision={"weights": "int8"}))[0] == linear + 4 * 2 * (64 + 32 + 32 + 64 + 128 + 64 + 128) \
        + (P - linear) * 2
    assert kv_bytes_per_token(infer(precision={"kv_cache": "fp8"})) == kv_bytes_per_token(infer()) // 2


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 64), st.integers(1, 4096), st.integers(1, 512))
def test_kv_cache_is_linear_in_tokens_and_batch(batch, prompt, output):
    def kv(b, p, o):
        est = estimate(infer(batch=b, prompt=p, output=o))
        return next(i.bytes for i in est.stages[0].phases[1].items if i.name == "kv_cache")

    per_token = kv_bytes_per_token(infer())
    assert kv(batch, prompt, output) == batch * (prompt + output - 1) * per_token
    assert kv(2 * batch, prompt, output) == 2 * kv(batch, prompt, output)


def test_kv_heads_shard_over_tensor_parallel_ranks_down_to_one():
    big = {"preset": "llama-3.1-8b"}
    per = [kv_bytes_per_token(plan_from_dict({"model": big, "workload": {"task": "inference"},
                                              "parallelism": {"tensor": t}})) for t in (1, 2, 8, 16)]
    assert per == [2 * 32 * 1024 * 2, 2 * 32 * 512 * 2, 2 * 32 * 128 * 2, 2 * 32 * 128 * 2]  # 8 KV heads


def test_serving_capacity():
    plan = plan_from_dict({"model": {"preset": "llama-3.1-8b"}, "workload": {"task": "inference", "inference": {
        "batch_size": 8, "prompt_tokens": 1000, "output_tokens": 24, "gpu_memory_utilization": 0.9}}})
    est = estimate(plan)
    s = est.serving
    assert est.fits and est.usable_bytes == int(est.gpu.usable_bytes * 0.9)
    assert s.kv_bytes_per_token == 131_072 and s.max_concurrent_sequences == s.kv_budget_bytes // (64 * 16 * 131_072)
    assert est.reason.startswith(f"fits on NVIDIA H100 SXM 80GB ×1: the engine's 71.68 GiB hold the weights and KV "
                                 f"cache for {s.max_concurrent_sequences:,} sequences of 1,024 tokens")
    tight = plan_from_dict({"model": {"preset": "llama-3.1-70b"}, "workload": {"task": "inference", "inference": {
        "gpu_memory_utilization": 0.9}}})
    assert not estimate(tight).fits and estimate(tight).serving.max_concurrent_sequences == 0


def test_inference_recommendation_ranks_by_cost_per_million_tokens():
    plan = plan_from_dict({"model": {"preset": "llama-3.1-8b"}, "workload": {"task": "inference", "inference": {
        "batch_size": 16, "prompt_tokens": 512, "output_tokens": 256}}})
    rec = recommend(plan)
    assert rec.job_tokens == 10**6 and rec.job_tokens_source.startswith("inference")
    priced = [c.job_usd for c in rec.candidates if c.job_usd is not None]
    assert priced == sorted(priced) and all(c.plan.parallelism.pipeline == 1 for c in rec.candidates)
    assert rec.best.device_bytes <= rec.best.gpu.usable_bytes * 0.9


def test_sliding_window_caps_the_kv_cache():
    from planner.memory.inference import kv_cache_bytes

    def plan(preset):
        return plan_from_dict({"model": {"preset": preset}, "workload": {"task": "inference"}})

    mistral, gemma = plan("mistral-7b"), plan("gemma-2-9b")
    per = kv_bytes_per_token(mistral)
    assert kv_cache_bytes(mistral, 2048) == 2048 * per and kv_cache_bytes(mistral, 8192) == 4096 * per
    per_layer = kv_bytes_per_token(gemma) // 42  # 42 layers: every other one global, the rest windowed
    assert kv_cache_bytes(gemma, 8192) == per_layer * (21 * 8192 + 21 * 4096)


def test_serving_an_all_windowed_model_has_no_context_limit():
    plan = plan_from_dict({"model": {"preset": "mistral-7b"}, "workload": {"task": "inference", "inference": {
        "gpu_memory_utilization": 0.9}}})
    assert estimate(plan).serving.max_context_tokens == 16_777_216


def test_latent_attention_caches_the_latent_on_every_rank():
    # DeepSeek-V3: (kv latent 512 + RoPE key 64) × 61 layers × bf16, not split by tensor parallelism
    for tensor in (1, 8):
        plan = plan_from_dict({"model": {"preset": "deepseek-v3"}, "parallelism": {"tensor": tensor},
                               "workload": {"task": "inference"}, "precision": {"compute": "bf16"}})
        assert kv_bytes_per_token(plan) == 576 * 61 * 2
