"""torchtitan's op-level selective checkpointing (planner/plan/sac.py): which projections it keeps and which it runs
again, and the recomputation the time model charges for them."""

import pytest

from planner.catalog import load_catalog
from planner.memory.activations import sac_op_acts
from planner.perf import step_time
from planner.perf.gemm import MAMF_SHAPE_FACTOR, shape_efficiency
from planner.perf.rates import rates
from planner.perf.work import keys_per_query, layer_work
from planner.plan.codec import plan_from_dict
from planner.plan.sac import op_sac_projections

H100 = load_catalog()["h100-sxm-80gb"]


def _plan(model: dict | None = None, **sections) -> object:
    return plan_from_dict(
        {
            "model": model or {"preset": "llama-3.1-8b"},
            "techniques": {"activation_checkpointing": "selective_op", **sections.pop("techniques", {})},
            **sections,
        }
    )


def _fates(plan) -> dict[str, str]:
    return {" ".join(names): fate for names, fate in op_sac_projections(plan)}


def test_every_second_matmul_of_a_llama_block_runs_again():
    assert _fates(_plan()) == {
        "q": "kept",
        "k": "recomputed",
        "v": "kept",
        "o": "recomputed",
        "gate": "kept",
        "up": "recomputed",
        "down": "kept",
    }


def test_compile_drops_the_last_projection_and_a_gelu_block_fuses_qkv():
    assert _fates(_plan(techniques={"compile": True}))["down"] == "dropped"
    gelu = {
        "num_layers": 2,
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "intermediate_size": 4096,
        "vocab_size": 50257,
        "mlp": "gelu",
        "norm": "layernorm",
    }
    assert _fates(_plan(gelu)) == {"q k v": "kept", "o": "recomputed", "up": "kept", "down": "recomputed"}


GPT2 = {
    "num_layers": 2,
    "hidden_size": 768,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "vocab_size": 50257,
    "mlp": "gelu",
    "norm": "layernorm",
    "bias": True,
}


@pytest.mark.parametrize(
    "change",
    [
        {"model": GPT2},  # biased linears run as aten.addmm: neither kept nor counted
        {"precision": {"compute": "fp8", "fp8_recipe": "nvfp4"}},
    ],
)
def test_projections_outside_the_save_list_all_run_again(change):
    assert set(_fates(_plan(**change)).values()) == {"recomputed"}


def test_what_memory_keeps_is_what_time_does_not_recompute():
    """Llama 3.1 8B, bf16: kept outputs q 4096 + v 1024 (attention), gate 14,336 (MLP), down 4096 (replicated)
    at 2 B, beside the block input (2 B × 4096) and the attention output (2 × 4096) with its lse (4 B × 32)."""
    assert sac_op_acts(_plan(), 2) == (2 * 4096 + 2 * 4096, 2 * 4096 + 4 * 32 + 2 * (4096 + 1024), 2 * 14336)


def test_the_recomputation_by_hand():
    """Llama 3.1 8B on one H100, sequence 4,096: op-level SAC runs again k (4096 × 1024), o (4096²) and up
    (4096 × 14,336) of each of 32 layers: 2 × 4,096 tokens × 79,691,776 parameters × 32 = 2.0891e13 FLOPs at
    the measured matmul rate × each shape's factor (planner/perf/gemm.py), and the layers' elementwise traffic
    once more."""
    plan = _plan(workload={"sequence_length": 4096})
    r = rates(H100, "bf16")
    recompute = next(i for i in step_time(plan, H100).items if i.name == "recompute")
    elementwise = 32 * layer_work(plan, 4096, keys_per_query(plan, 4096), False).elementwise_bytes / r.hbm_bytes
    matmuls = sum(
        2
        * 4096
        * k
        * n
        * 32
        / (r.matmul_flops * min(1.0, shape_efficiency(1, 4096, n, k, 132, 989 / 3.35) / MAMF_SHAPE_FACTOR))
        for k, n in ((4096, 1024), (4096, 4096), (4096, 14336))
    )
    assert recompute.seconds == pytest.approx(matmuls + elementwise, rel=1e-9)
    assert "k, o, up" in recompute.note


def test_an_moe_layer_runs_its_router_and_routed_experts_again():
    plan = _plan({"preset": "mixtral-8x7b"}, parallelism={"data": 8, "expert": 8, "zero_stage": 3})
    step = step_time(plan, H100)
    dense = step_time(
        _plan(
            {"preset": "mixtral-8x7b"},
            parallelism={"data": 8, "expert": 8, "zero_stage": 3},
            techniques={"activation_checkpointing": "none"},
        ),
        H100,
    )
    recompute = next(i for i in step.items if i.name == "recompute")
    compute = next(i for i in dense.items if i.name == "compute")
    assert "router and routed experts" in recompute.note
    # the experts hold most of the layer's matmuls: their forward alone is over a fifth of forward + backward
    assert recompute.seconds > compute.seconds / 5
