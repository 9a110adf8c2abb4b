"""Inference memory: golden values by hand on TINY, and invariants."""

import csv

import pytest
from conftest import ROOT, TINY
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.catalog import load_catalog
from planner.errors import PlanError
from planner.memory import CUBLAS_WORKSPACE_BYTES, estimate
from planner.memory.inference import eager_score_bytes, kv_bytes_per_token, vllm_batch_defaults, weight_bytes
from planner.plan.codec import plan_from_dict
from planner.search.recommend import recommend

P = 202_048
WS = CUBLAS_WORKSPACE_BYTES


def infer(batch=2, prompt=32, output=8, **extra):
    inference = {"batch_size": batch, "prompt_tokens": prompt, "output_tokens": output, **extra.pop("inference", {})}
    return plan_from_dict(
        {
            "model": TINY,
            "workload": {"task": "inference", "inference": inference},
            "precision": {"compute": "bf16", **extra.pop("precision", {})},
            **extra,
        }
    )


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
    assert (
        weight_bytes(infer(precision={"weights": "int8"}))[0]
        == linear + 4 * 2 * (64 + 32 + 32 + 64 + 128 + 64 + 128) + (P - linear) * 2
    )
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
    per = [
        kv_bytes_per_token(
            plan_from_dict({"model": big, "workload": {"task": "inference"}, "parallelism": {"tensor": t}})
        )
        for t in (1, 2, 8, 16)
    ]
    assert per == [2 * 32 * 1024 * 2, 2 * 32 * 512 * 2, 2 * 32 * 128 * 2, 2 * 32 * 128 * 2]  # 8 KV heads


def test_serving_capacity():
    plan = plan_from_dict(
        {
            "model": {"preset": "llama-3.1-8b"},
            "workload": {
                "task": "inference",
                "inference": {
                    "batch_size": 8,
                    "prompt_tokens": 1000,
                    "output_tokens": 24,
                    "gpu_memory_utilization": 0.9,
                },
            },
        }
    )
    est = estimate(plan)
    s = est.serving
    # the engine claims its fraction, and its CUDA context made before vLLM's snapshot comes on top
    assert est.fits and est.usable_bytes == int(est.gpu.usable_bytes * 0.9) + 512 * 2**20
    assert s.kv_bytes_per_token == 131_072 and s.max_concurrent_sequences == s.kv_budget_bytes // (64 * 16 * 131_072)
    assert est.reason.startswith(
        f"fits on NVIDIA H100 SXM 80GB ×1: the engine's 71.76 GiB hold the weights and KV "
        f"cache for {s.max_concurrent_sequences:,} sequences of 1,024 tokens"
    )
    tight = plan_from_dict(
        {
            "model": {"preset": "llama-3.1-70b"},
            "workload": {"task": "inference", "inference": {"gpu_memory_utilization": 0.9}},
        }
    )
    assert not estimate(tight).fits and estimate(tight).serving.max_concurrent_sequences == 0


def test_inference_recommendation_ranks_by_cost_per_million_tokens():
    plan = plan_from_dict(
        {
            "model": {"preset": "llama-3.1-8b"},
            "workload": {
                "task": "inference",
                "inference": {"batch_size": 16, "prompt_tokens": 512, "output_tokens": 256},
            },
        }
    )
    rec = recommend(plan)
    assert rec.job_tokens == 10**6 and rec.job_tokens_source.startswith("serving")
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


def test_serving_an_all_windowed_model_has_no_cache_limit_but_its_context_window():
    plan = plan_from_dict(
        {
            "model": {"preset": "mistral-7b"},
            "workload": {"task": "inference", "inference": {"gpu_memory_utilization": 0.9}},
        }
    )
    serving = estimate(plan).serving
    assert serving.cache_context_tokens == 16_777_216 and serving.max_context_tokens == 32_768  # config.json's


def test_latent_attention_caches_the_latent_on_every_rank():
    # DeepSeek-V3: (kv latent 512 + RoPE key 64) × 61 layers × bf16, not split by tensor parallelism
    for tensor in (1, 8):
        plan = plan_from_dict(
            {
                "model": {"preset": "deepseek-v3"},
                "parallelism": {"tensor": tensor},
                "workload": {"task": "inference"},
                "precision": {"compute": "bf16"},
            }
        )
        assert kv_bytes_per_token(plan) == 576 * 61 * 2


def _gpt_fast(**inference) -> dict:
    return {
        "framework": "gpt_fast",
        "model": {"preset": "llama-3.1-8b"},
        "techniques": {"compile": True},
        "workload": {"task": "inference", "inference": {"prompt_tokens": 6, "output_tokens": 200, **inference}},
    }


def test_a_compiled_static_cache_loop_by_hand():
    """gpt-fast / torchao generate.py on Llama 3.1 8B, prompt 6 + 200 new: the cache is preallocated for 208 tokens
    (206 rounded up to 8) at 32 layers × 2 × 8 heads × 128 × 2 B = 131,072 B a token; the bool mask is 208²; one
    layer's K and V repeated to 32 heads is 2 × 32 × 128 × 208 × 2 B; the graph pool keeps one decode step."""
    est = estimate(plan_from_dict(_gpt_fast()))
    items = {i.name: i.bytes for i in est.items}
    assert items["kv_cache"] == 208 * 131_072
    assert items["mask_buffer"] == 208 * 208
    assert items["expanded_kv"] == 2 * 32 * 128 * 208 * 2
    assert items["cuda_graphs"] == 128_256 * (2 + 4) + 4 * 14_336 * 2  # last-token logits (bf16 + fp32) + 4 × I
    assert est.phase == "prefill"  # the static cache is as large at the prompt as at the end
    # allocated once, the static cache, its mask and the graph pool do not add to the allocator's reserve
    churn = items["activations"] + items["expanded_kv"]
    assert est.peak_reserved_bytes - est.peak_allocated_bytes == round(
        0.13 * churn
    )  # default segments (RESERVE_FRACTION)


def test_a_static_cache_is_as_large_without_compile_and_has_no_growth_copy():
    eager = estimate(plan_from_dict({**_gpt_fast(), "techniques": {"compile": False}}))
    decode = next(p for p in eager.stages[0].phases if p.name.startswith("decode"))
    assert {i.name for i in decode.items} >= {"kv_cache", "mask_buffer", "activations"}
    assert "cuda_graphs" not in {i.name for i in eager.items}


def test_an_eager_decode_on_the_math_backend_copies_the_repeated_cache_to_fp32_by_hand():
    """torchao generate.py's long-context table (Llama 3.1 8B, prompt 6 + 131,066 new, no --compile): the cache is
    preallocated for 131,072 tokens; each decode step runs SDPA's math backend over one layer's K and V repeated to
    32 heads, which holds key and value upcast to fp32 and the scaled key (3 × 128 × 4 B a head and token) beside
    the fp32 score row (4 B a head and token): 32 × 131,072 × 385 × 4 B = 6.02 GiB, in the decode phase only."""
    est = estimate(
        plan_from_dict(
            {
                **_gpt_fast(),
                "techniques": {"compile": False},
                "workload": {
                    "task": "inference",
                    "inference": {"prompt_tokens": 6, "output_tokens": 131_066, "mask_buffer": False},
                },
            }
        )
    )
    items = {i.name: i.bytes for i in est.items}
    assert items["math_sdpa"] == 32 * 131_072 * (3 * 128 + 1) * 4 == 6_459_228_160
    assert est.phase.startswith("decode")
    prefill = next(p for p in est.stages[0].phases if p.name == "prefill")
    assert "math_sdpa" not in {i.name for i in prefill.items}


@pytest.mark.parametrize(
    "change",
    [
        {"techniques": {"compile": True}},
        {"precision": {"compute": "fp32"}},
        {"workload": {"inference": {"math_sdpa_decode": False}}},
    ],
)
def test_no_fp32_copies_compiled_in_fp32_or_off_the_math_backend(change):
    base = {**_gpt_fast(), "techniques": {"compile": False}}
    plan = {
        key: {**base.get(key, {}), **value}
        if key != "workload"
        else {**base["workload"], "inference": {**base["workload"]["inference"], **value["inference"]}}
        for key, value in change.items()
    }
    est = estimate(plan_from_dict({**base, **plan}))
    assert "math_sdpa" not in {i.name for i in est.items}


@pytest.mark.parametrize(
    "inference, message",
    [
        (
            {"static_cache": False, "mask_buffer": True},
            "workload.inference.mask_buffer: True needs workload.inference.static_cache (the mask is sized to the "
            "preallocated cache)",
        ),
        (
            {"static_cache": True, "gpu_memory_utilization": 0.9},
            "workload.inference.static_cache: True applies to a generate() loop; a serving engine "
            "(gpu_memory_utilization) "
            "pages its KV cache",
        ),
    ],
)
def test_static_cache_messages(inference, message):
    with pytest.raises(PlanError) as err:
        plan_from_dict({"model": {"preset": "llama-3.1-8b"}, "workload": {"task": "inference", "inference": inference}})
    assert str(err.value) == message


def _vllm(gpu: str = "h100-sxm-80gb", tensor: int = 1, **inference) -> dict:
    return {
        "framework": "vllm",
        "model": {"preset": "llama-3.1-8b"},
        "parallelism": {"tensor": tensor},
        "hardware": {"gpu": gpu},
        "workload": {
            "task": "inference",
            "inference": {"batch_size": 16, "prompt_tokens": 4096, "output_tokens": 1024, **inference},
        },
    }


def test_vllm_startup_accounting_by_hand():
    """Llama 3.1 8B under the latest vLLM on one H100: the profile run's peak is the sampler warm-up of 1,024
    requests (vLLM's default on a GPU of 70 GiB or more) over the 128,256-token vocabulary at 14 B a logit (bf16
    logits, their fp32 copy, FlashInfer's masked logits and their softmax) with the forward's 8,192 × 4,096 bf16
    hidden states still held, larger than the 8,192-token forward; the KV cache gets 92 % of the device less
    weights, cuBLAS, that peak and the graph pool. The CUDA context, made before vLLM's snapshot, is not charged to
    the fraction but is on the device."""
    est = estimate(plan_from_dict(_vllm()))
    items = {i.name: i.bytes for i in est.items}
    assert items["activations"] == 8192 * 4096 * 2 + 1024 * 128_256 * (2 + 4 + 4 + 4)
    assert "custom_all_reduce" not in items and items["nccl"] == 0
    total = int(est.gpu.usable_bytes * 0.92)
    charged = items["weights"] + items["cublas_workspace"] + items["activations"] + items["cuda_graphs"]
    assert est.serving.kv_budget_bytes == total - charged
    assert est.device_bytes == total + items["cuda_context"] == est.usable_bytes


def test_vllm_defaults_follow_the_gpu_and_tensor_parallel_adds_its_buffers():
    def formula(d: dict) -> str:
        return next(i.formula for i in estimate(plan_from_dict(d)).items if i.name == "activations")

    assert "sampler 256 requests" in formula(_vllm("a100-sxm-80gb"))  # the A100 keeps vLLM's smaller default
    assert "sampler 64 requests" in formula(_vllm(max_num_seqs=64, gpu_memory_utilization=0.9))
    tp2 = {i.name: i.bytes for i in estimate(plan_from_dict(_vllm(tensor=2))).items}
    assert tp2["custom_all_reduce"] == 2 * 8 * 2**20 and tp2["nccl"] == 512 * 2**20


@pytest.mark.parametrize(
    "gpu, release, defaults",
    [
        ("h100-sxm-80gb", "", (8192, 1024)),  # 79 GiB: the 70 GiB tier
        ("a100-sxm-80gb", "", (2048, 256)),  # from 0.9.0 the A100 keeps the small defaults (PR #17885)
        ("a100-sxm-80gb", "0.8.5", (8192, 1024)),  # 0.8.5 gave it the large ones by memory (PR #17073)
        ("h100-sxm-80gb", "0.8.0", (8192, 256)),  # 0.8.0: H100 and H200 by name for tokens; 256 sequences
        ("l4-24gb", "", (2048, 256)),
        ("b200-180gb", "", (16384, 1024)),  # 160 GiB or more from 0.28.0 (PR #51726)
        ("b200-180gb", "0.25.0", (8192, 1024)),
        ("h200-sxm-141gb", "", (8192, 1024)),  # 141 GB is 131 GiB: below the 160 GiB tier
    ],
)
def test_vllm_batch_defaults_by_gpu_memory_and_release(gpu, release, defaults):
    assert vllm_batch_defaults(load_catalog()[gpu], release) == defaults


def test_vllm_profiles_its_whole_token_budget_whatever_the_requests():
    """One short request still leaves vLLM's budget a forward of max_num_batched_tokens (8,192) aside: the
    profile run (_dummy_run(max_num_tokens)) does not know the workload."""
    short = _vllm(batch_size=1, prompt_tokens=128, max_num_seqs=1)
    formula = next(i.formula for i in estimate(plan_from_dict(short)).items if i.name == "activations")
    assert formula.startswith("max(forward of 8,192 tokens")
    chunked = _vllm(batch_size=1, prompt_tokens=128, max_num_seqs=1, prefill_chunk_tokens=2048)
    assert "forward of 2,048 tokens" in next(
        i.formula for i in estimate(plan_from_dict(chunked)).items if i.name == "activations"
    )


@pytest.mark.parametrize(
    "release, per_logit",
    [
        ("0.8.5", 38),
        ("0.11.0", 38),
        ("0.14.0", 38),
        ("2026-03-06", 38),  # PyTorch's sort: 2 + 4 + 8 + 12 + 4 + 8
        ("0.17.0", 14),
        ("0.20.0", 14),
        ("0.21.0", 14),
        ("", 14),  # Triton's pivot, then FlashInfer: 2 + 4 + 4 + 4
    ],
)
def test_vllm_sampler_warm_up_by_release(release, per_logit):
    """Releases before 0.17.0 sort the fp32 logits (an int64 iota in, CUB's alternate key and value buffers, the
    sorted values and int64 indices out); from 0.17.0 nothing is sorted."""
    plan = {**_vllm(), **({"framework_release": release} if release else {})}
    est = estimate(plan_from_dict(plan))
    assert next(i.bytes for i in est.items if i.name == "activations") == 8192 * 4096 * 2 + 1024 * 128_256 * per_logit
    assert est.items[[i.name for i in est.items].index("activations")].formula.endswith(
        f"× 128,256 vocab × {per_logit} B)"
    )


def test_vllm_profile_forward_when_few_requests():
    """At 8 requests the sampler is small and the forward of 8,192 tokens is the peak: SwiGLU's gate-up output
    (2 × 14,336) and its product (14,336) with the residual and the normed input (2 × 4,096), bf16; no logits (the
    forward computes none: compute_logits runs in the sampler warm-up)."""
    est = estimate(plan_from_dict(_vllm(batch_size=8, max_num_seqs=8)))
    assert next(i.bytes for i in est.items if i.name == "activations") == 8192 * (3 * 14_336 + 2 * 4096) * 2


def test_pipeline_stages_hold_the_embedding_first_and_the_head_last():
    """vLLM puts the embedding on the first stage and the head (with the final norm) on the last: Llama 3.1 8B on 2
    stages of 16 layers holds one 128,256 × 4,096 table per stage, not both on one; a tied model (Llama 3.2 1B)
    holds its table on both end stages."""

    def weights(preset: str, pipeline: int) -> int:
        plan = {**_vllm(), "model": {"preset": preset}, "parallelism": {"pipeline": pipeline}}
        return next(i.bytes for i in estimate(plan_from_dict(plan)).items if i.name == "weights")

    table = 128_256 * 4096 * 2
    layer = (4096 * (4096 + 2 * 1024 + 4096) + 3 * 4096 * 14_336 + 2 * 4096) * 2  # q, k, v, o; gate, up, down; 2 norms
    assert weights("llama-3.1-8b", 1) == 32 * layer + 2 * table + 4096 * 2
    assert weights("llama-3.1-8b", 2) == 16 * layer + table + 4096 * 2  # the last stage: its head and final norm
    ends = 128_256 * 2048 * 2 + 2048 * 2  # the tied table and the final norm
    assert weights("llama-3.2-1b", 2) == (weights("llama-3.2-1b", 1) - ends) // 2 + ends  # 8 of 16 layers each


@pytest.mark.parametrize(
    "release, fraction, scope",
    [
        ("", 0.92, "all"),
        ("0.20.0", 0.92, "all"),
        ("0.19.0", 0.9, "all_but_graphs"),
        ("0.9.1", 0.9, "all_but_graphs"),
        ("0.9.0", 0.9, "device"),
        ("0.8.0", 0.9, "device"),
    ],
)
def test_vllm_releases_account_as_they_did(release, fraction, scope):
    """0.8.0-0.9.0 charge the device's whole use (the CUDA context too) to the fraction; 0.9.1-0.19 a snapshot's
    growth, with the CUDA graphs captured after the KV cache, on top; from 0.20.0 the graphs are inside and the
    default fraction is 0.92. The KV budget differs by exactly those terms."""

    def estimate_at(rel: str):
        return estimate(plan_from_dict({**_vllm(), **({"framework_release": rel} if rel else {})}))

    est = estimate_at(release)
    inf = est.plan.workload.inference
    assert (inf.gpu_memory_utilization, inf.fraction_scope) == (fraction, scope)
    items = {i.name: i.bytes for i in est.items}
    total = int(est.gpu.usable_bytes * fraction)
    charged = items["weights"] + items["cublas_workspace"] + items["activations"]
    also_charged = {"all": items["cuda_graphs"], "all_but_graphs": 0, "device": items["cuda_context"]}[scope]
    assert est.serving.kv_budget_bytes == total - charged - also_charged
    assert est.device_bytes == total + (0 if scope == "device" else items["cuda_context"]) + (
        0 if scope == "all" else items["cuda_graphs"]
    )


@pytest.mark.parametrize(
    "inference, message",
    [
        (
            {"max_num_seqs": 8, "gpu_memory_utilization": 0.9},
            "workload.inference.max_num_seqs: 8 is below batch_size (16): the engine runs at most this many at once",
        ),
        (
            {"max_num_seqs": 64},
            "workload.inference.max_num_seqs: 64 applies to a serving engine "
            "(workload.inference.gpu_memory_utilization)",
        ),
    ],
)
def test_max_num_seqs_messages(inference, message):
    with pytest.raises(PlanError) as err:
        plan_from_dict(
            {
                "model": {"preset": "llama-3.1-8b"},
                "workload": {"task": "inference", "inference": {"batch_size": 16, **inference}},
            }
        )
    assert str(err.value) == message


def test_sglang_static_fraction_by_hand():
    """SGLang at TP 2: mem_fraction_static 0.87 is a fraction of the memory free after distributed init (the CUDA
    context and NCCL already made); it holds the weights and the KV pool (with cuBLAS and the custom all-reduce
    buffers); the forward activations and the CUDA graphs come on top."""
    plan = plan_from_dict({**_vllm(tensor=2), "framework": "sglang"})
    assert plan.workload.inference.gpu_memory_utilization == 0.87
    est = estimate(plan)
    items = {i.name: i.bytes for i in est.items}
    made_first = items["cuda_context"] + items["nccl"]
    total = int((est.gpu.usable_bytes - made_first) * 0.87)
    assert (
        est.serving.kv_budget_bytes == total - items["weights"] - items["cublas_workspace"] - items["custom_all_reduce"]
    )
    assert est.device_bytes == total + made_first + items["activations"] + items["cuda_graphs"] == est.usable_bytes
    with pytest.raises(PlanError, match=r"^workload.inference.fraction_scope: 'static' applies to a serving engine"):
        plan_from_dict(
            {
                "model": {"preset": "llama-3.1-8b"},
                "workload": {"task": "inference", "inference": {"fraction_scope": "static"}},
            }
        )


def test_an_eager_engine_has_no_graph_pool():
    """vLLM --enforce-eager (SGLang --disable-cuda-graph): no CUDA-graph pool, and the KV cache gets its 512 MiB."""
    graphs, eager = (estimate(plan_from_dict(_vllm(cuda_graphs=on))) for on in (True, False))
    assert "cuda_graphs" not in {i.name for i in eager.items}
    assert eager.serving.kv_budget_bytes - graphs.serving.kv_budget_bytes == 512 * 2**20
    with pytest.raises(PlanError, match=r"^workload.inference.cuda_graphs: False applies to a serving engine"):
        plan_from_dict(
            {
                "model": {"preset": "llama-3.1-8b"},
                "workload": {"task": "inference", "inference": {"cuda_graphs": False}},
            }
        )


@pytest.mark.parametrize(
    "preset, hf_id, tensor",
    [
        ("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", 1),
        ("qwen3-32b", "Qwen/Qwen3-32B", 1),
        ("qwen3-32b", "Qwen/Qwen3-32B", 2),
        ("qwen3-0.6b", "Qwen/Qwen3-0.6B", 1),
    ],
)
def test_vllm_kv_budget_against_published_startup_logs(preset, hf_id, tensor):
    """vLLM 0.11 on an H100 at gpu_memory_utilization 0.9 (llm-d-benchmark's profiling notes, bench/data/
    serving-memory.csv): the weights and the profile run's activation peak per rank are within 1 % and 2 % of the
    logged figures, and the KV budget within 1 % of the 71.3 GiB the engine claims (Qwen3-32B on one GPU keeps
    only 4.45 GiB for its cache, so a relative bound on the budget itself would read noise)."""
    row = next(
        r
        for r in csv.DictReader((ROOT / "bench/data/serving-memory.csv").open())
        if r["model_hf_id"] == hf_id and r["tp"] == str(tensor) and r["source"].startswith("B")
    )
    plan = {
        **_vllm(tensor=tensor, batch_size=1, prompt_tokens=1000, output_tokens=1000, gpu_memory_utilization=0.9),
        "model": {"preset": preset},
        "framework_release": "0.11.0",
    }  # graphs on top of the fraction
    est = estimate(plan_from_dict(plan))
    weights = next(i.bytes for i in est.items if i.name == "weights") / 2**30
    activations = next(i.bytes for i in est.items if i.name == "activations") / 2**30
    assert abs(weights / float(row["weights_gib"]) - 1) < 0.01
    assert abs(activations / float(row["activation_peak_gib"]) - 1) < 0.02
    claimed = est.gpu.usable_bytes * 0.9 / 2**30
    assert abs(est.serving.kv_budget_bytes / 2**30 - float(row["kv_cache_gib"])) < 0.01 * claimed


@pytest.mark.parametrize(
    "compute, per_score",
    [
        # bf16: softmax(dtype=float32) converts the masked bf16 scores first: 2 + 4 (copy) + 4 (softmax)
        ("bf16", 10),
        # fp16: CUDA's fused half→float softmax; then the masked scores, the fp32 softmax and its fp16 cast
        ("fp16", 8),
        # fp32: the matmul's output beside its scaled copy (no conversion later)
        ("fp32", 8),
    ],
)
def test_eager_prefill_by_hand(compute, per_score):
    """HF eager attention under no_grad (MemTracker on HF Llama generate peaks at its softmax): per layer the
    b × heads × p × p scores at `per_score` B, the b × 1 × p × p causal mask in the compute dtype, the query and
    repeat_kv's copies of K and V at every query head (TINY: 2 KV heads for 4 query heads)."""
    b = 4 if compute == "fp32" else 2
    est = estimate(infer(precision={"compute": compute}, techniques={"attention": "eager"}))
    assert eager_score_bytes(compute) == per_score
    prefill = est.stages[0].phases[0]
    attention = 64 * (64 + 2 * 64) * b + 2 * 32 * 32 * (4 * per_score + b)  # > SwiGLU's 3 × 64 × 128 × b
    assert prefill.allocated_bytes == b * P + WS + 2 * 32 * 128 * b + attention + 3 * 64 * 64 * b + 1000 * 2 * (b + 4)


def test_gelu_new_prefill_holds_four_intermediates():
    """No gradients: NewGELUActivation's last product has x, 0.5·x, 1 + tanh and its output alive (a fused GeLU
    its input and output). TINY as a GeLU model, 64 prompt tokens, I = 128, bf16."""

    def prefill(activation):
        model = {**TINY, "mlp": "gelu", "norm": "layernorm", "activation": activation}
        plan = plan_from_dict(
            {
                "model": model,
                "workload": {
                    "task": "inference",
                    "inference": {"batch_size": 2, "prompt_tokens": 32, "output_tokens": 8},
                },
                "precision": {"compute": "bf16"},
            }
        )
        return estimate(plan).stages[0].phases[0].allocated_bytes

    assert prefill("gelu_new") - prefill("gelu") == (4 - 2) * 64 * 128 * 2
