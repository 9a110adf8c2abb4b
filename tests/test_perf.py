"""The time model's FLOPs, its MFU override and serving throughput, by hand."""

import pytest
from conftest import TINY

from planner.catalog import load_catalog
from planner.errors import PlanError
from planner.memory.inference import kv_bytes_per_token, weight_bytes
from planner.perf import flops_per_token, job_hours, throughput
from planner.plan.codec import plan_from_dict
from planner.plan.models import param_counts

CATALOG = load_catalog()


def tiny(**sections):
    sections.setdefault("workload", {"sequence_length": 32, "micro_batch_size": 1})
    return plan_from_dict({"model": TINY, **sections})


def test_flops_per_token_by_hand():
    # matmul params: 2 layers × (12,288 + 24,576) + output head 64,000 = 137,728; attention forward with causal
    # flash: 2 × s × q × L = 2 × 32 × 64 × 2 = 8,192; forward = 2 × 137,728 + 8,192; training = 3 × forward
    assert flops_per_token(tiny()) == 3 * (2 * 137_728 + 8_192)
    full = tiny(techniques={"activation_checkpointing": "full"})
    assert flops_per_token(full) == 4 * (2 * 137_728 + 8_192)  # one more forward


def test_job_hours_under_an_mfu_override_by_hand():
    a40 = CATALOG["a40-48gb"]
    hours = job_hours(tiny(hardware={"gpu": "a40-48gb"}), a40, 10**9, 0.4)
    assert hours == pytest.approx(1e9 * 3 * (2 * 137_728 + 8_192) / (149.7e12 * 0.4) / 3600)


def test_decode_is_bandwidth_bound():
    h100 = load_catalog()["h100-sxm-80gb"]
    plan = plan_from_dict(
        {
            "model": {"preset": "llama-3.1-8b"},
            "workload": {"task": "inference", "inference": {"batch_size": 1, "prompt_tokens": 1, "output_tokens": 1}},
        }
    )
    speed = throughput(plan, h100)
    read = weight_bytes(plan)[0] + 1.5 * kv_bytes_per_token(plan)
    assert speed.decode_tokens_per_second == pytest.approx(3.35e12 * 0.8 / read)


def test_moe_decode_reads_only_routed_experts():
    h100 = load_catalog()["h100-sxm-80gb"]
    plan = plan_from_dict(
        {
            "model": {"preset": "mixtral-8x7b"},
            "workload": {"task": "inference", "inference": {"batch_size": 1, "prompt_tokens": 1, "output_tokens": 1}},
        }
    )
    w_bytes, w_params = weight_bytes(plan)
    idle = 32 * param_counts(plan.model).expert * 6  # batch 1: 2 of 8 experts per layer are read
    read = w_bytes - idle * w_bytes / w_params + 1.5 * kv_bytes_per_token(plan)
    assert throughput(plan, h100).decode_tokens_per_second == pytest.approx(3.35e12 * 0.8 / read)


def test_a_job_time_on_a_gpu_without_the_dtypes_tensor_cores_is_refused():
    """A V100 has no bf16 tensor cores (catalog: no bf16_tflops): a job time there is a PlanError naming the key,
    with or without an MFU override, not an AttributeError on a missing rate."""
    plan = plan_from_dict({"model": TINY, "hardware": {"gpu": "v100-sxm2-32gb"}})
    for mfu in (None, 0.4):
        with pytest.raises(PlanError, match="precision.compute: 'bf16' has no tensor cores on"):
            job_hours(plan, CATALOG["v100-sxm2-32gb"], 10**9, mfu)
