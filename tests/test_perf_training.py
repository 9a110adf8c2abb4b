"""The step-time model: collectives and matmuls by hand, a compute-bound step by hand, and invariants over
plans (items add up, exposed ≤ communication, more bandwidth never slower, more GPUs never slower in total)."""

import dataclasses

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from planner.catalog import load_catalog
from planner.errors import PlanError
from planner.perf import plan_time, step_time
from planner.perf.gemm import Gemm, forward_s
from planner.perf.rates import (
    DEFAULT_MATMUL_EFFICIENCY,
    FP8_FRACTION_OF_16BIT,
    HOP_LATENCY_S,
    LATENCY_BASE_S,
    NETWORK_EFFICIENCY,
    Group,
    collective_s,
    rates,
)
from planner.perf.work import fp8_cast_bytes, layer_work
from planner.plan.codec import plan_from_dict

CATALOG = load_catalog()
H100 = CATALOG["h100-sxm-80gb"]


def test_a_ring_all_reduce_by_hand():
    """8 H100s on NVSwitch: the measured all-reduce bus bandwidth, 370 GB/s; NCCL's 8.4 µs + 3.4 µs per step."""
    r = rates(H100, "bf16")
    group = Group(size=8, stride=1)
    assert group.where(r) == "link"
    assert collective_s("all_reduce", 1e9, group, r) == pytest.approx(2 * 7 / 8 * 1e9 / 370e9 + 8.4e-6 + 14 * 3.4e-6)
    assert collective_s("all_gather", 1e9, group, r) == pytest.approx(7 / 8 * 1e9 / 370e9 + 8.4e-6 + 7 * 3.4e-6)
    assert collective_s("all_reduce", 1e9, Group(size=1, stride=1), r) == 0
    assert (LATENCY_BASE_S, HOP_LATENCY_S["link"]) == (8.4e-6, 3.4e-6)


def test_a_mesh_gives_a_small_group_only_its_peers_links():
    """MI300X: 448 GB/s into the 8-GPU xGMI mesh, 64 GB/s to each peer, 312.9 GB/s measured all-reduce bus
    bandwidth: a pair gets one peer link at the measured fraction (64 × 312.9/448 ≈ 44.7 GB/s)."""
    r = rates(CATALOG["mi300x-192gb"], "bf16")
    assert Group(size=8, stride=1).bandwidth(r) == pytest.approx(312.9e9)
    assert Group(size=2, stride=1).bandwidth(r) == pytest.approx(64e9 * 312.9 / 448)


def test_a_pcie_card_collects_over_its_pcie_path():
    r = rates(CATALOG["l40s-48gb"], "bf16")
    assert Group(size=4, stride=1).where(r) == "pcie" and Group(size=4, stride=1).bandwidth(r) == pytest.approx(
        32e9 * 0.44
    )


def test_the_default_matmul_fraction_is_the_catalogs_median():
    fractions = sorted(g.matmul_efficiency for g in CATALOG.values())
    assert DEFAULT_MATMUL_EFFICIENCY == fractions[len(fractions) // 2]


def test_the_float8_fallback_is_the_catalogs_median_ratio():
    ratios = sorted(
        g.fp8_matmul_efficiency / g.matmul_efficiency
        for g in CATALOG.values()
        if g.fp8_matmul_efficiency and g.matmul_efficiency
    )
    assert len(ratios) == 9 and FP8_FRACTION_OF_16BIT == round(ratios[len(ratios) // 2], 2)


def test_an_unmeasured_float8_rate_follows_the_gpus_own_16_bit_fraction():
    """MI300X: 16-bit 0.51 measured, float8 not: 0.51 × 0.91 of its 2,615 float8 TFLOP/s, 1.8 × its bf16 rate."""
    mi300x = CATALOG["mi300x-192gb"]
    fp8, bf16 = rates(mi300x, "fp8"), rates(mi300x, "bf16")
    assert fp8.matmul_efficiency == pytest.approx(0.51 * 0.91) and "16-bit fraction 0.51" in fp8.efficiency_source
    assert fp8.matmul_flops / bf16.matmul_flops == pytest.approx(2615 / 1307 * 0.91, rel=1e-3)


def test_a_group_that_leaves_the_fast_domain_uses_the_network():
    r = rates(H100, "bf16")
    across = Group(size=2, stride=8)  # data-parallel pairs of 8-GPU tensor-parallel groups
    assert across.where(r) == "network"
    assert across.bandwidth(r) == pytest.approx(50e9 * NETWORK_EFFICIENCY)


def test_a_group_across_nodes_shares_its_members_nics():
    """32 H100s (4 nodes of 8): NCCL runs a channel per NIC, so each node's 8 members share 8 × 50 GB/s at 85 %
    = 340 GB/s, under the 370 GB/s of NVLink; one member per node (TP 8 inside) gets its own NIC's 42.5."""
    r = rates(H100, "bf16")
    assert Group(size=32, stride=1).where(r) == "network"
    assert Group(size=32, stride=1).bandwidth(r) == pytest.approx(8 * 50e9 * 0.85)
    assert Group(size=4, stride=8).bandwidth(r) == pytest.approx(50e9 * 0.85)


def test_matmuls_by_roofline():
    """4096³ in bf16 on an H100: 128 × 256 tiles, 32 × 16 = 512 of them in 4 waves of 132 SMs (512 / 528);
    K0 = 2 B × 791.2 TFLOP/s / (2 × 2.68 TB/s) = 295.2; over MAMF's own shape factor 0.958."""
    r = rates(H100, "bf16")
    big = forward_s(Gemm(1, 4096, 4096, 4096, 2), r)
    factor = 512 / 528 * 4096 / (4096 + 2 * 989e12 * 0.8 / (2 * 3.35e12 * 0.8)) / 0.958
    assert big == pytest.approx(2 * 4096**3 / (r.matmul_flops * factor))  # compute-bound
    skinny = forward_s(Gemm(1, 4096, 4096, 8, 2), r)  # a LoRA adapter: bound by its bytes
    assert skinny == pytest.approx((4096 * 4096 + 4096 * 8 + 4096 * 8) * 2 / r.hbm_bytes)


def _shape_factor(m: int, n: int, k: int) -> float:
    """planner/perf/gemm.py's law on an H100 in bf16, written out: the best of the four tiles' wave efficiency
    over 132 SMs × K / (K + 295.2), over MAMF's 0.958, at most 1."""
    waves = max(
        m * n / (-(-(-(-m // tm) * -(-n // tn)) // 132) * 132 * tm * tn)
        for tm, tn in ((128, 256), (128, 128), (64, 256), (64, 128))
    )
    return min(1.0, waves * k / (k + 989 * 0.8 / 3.35 / 0.8) / 0.958)


def test_a_compute_bound_step_by_hand():
    """Llama 3.1 8B, one H100, sequence 4,096, micro-batch 1. Per layer the projections (in, out) are q 4096²,
    k and v 4096 × 1024, o 4096², gate and up 4096 × 14,336, down 14,336 × 4096; the head 4096 × 128,256. Each
    runs forward (4,096 tokens × in by in × out), and backward its input gradient (tokens × out by out × in)
    and its weight gradient (in × tokens by tokens × out), each at 989 TFLOP/s × 0.80 measured = 791.2 TFLOP/s
    × its shape's factor (_shape_factor). Attention (causal flash): 2 × (4,096 + 4,096) × 4,096 × 2,048 keys ×
    32 layers = 4.398e12 forward, × 3.5 with FlashAttention's 2.5 × backward, at 0.6 of the GEMM rate, its
    kernel's fixed work per query block 230 keys' worth beside the 2,048 (× 2,278 / 2,048): 474.7 TFLOP/s."""
    plan = plan_from_dict({"model": {"preset": "llama-3.1-8b"}, "workload": {"sequence_length": 4096}})
    step = step_time(plan, H100)
    compute = next(i for i in step.items if i.name == "compute")
    t = 4096

    def three(k: int, n: int) -> float:  # forward, input gradient, weight gradient
        return sum(2 * t * k * n / (791.2e12 * _shape_factor(a, b, c)) for a, b, c in ((t, n, k), (t, k, n), (k, n, t)))

    layer = sum(
        three(k, n)
        for k, n in (
            (4096, 4096),
            (4096, 1024),
            (4096, 1024),
            (4096, 4096),
            (4096, 14336),
            (4096, 14336),
            (14336, 4096),
        )
    )
    matmuls = 32 * layer + three(4096, 128256)
    attention = 3.5 * 2 * 8192 * 4096 * 2048 * 32 / 474.72e12 * 2278 / 2048
    assert compute.seconds == pytest.approx(matmuls + attention, rel=1e-9)
    assert step.step_time_s == pytest.approx(sum(i.seconds for i in step.items))
    assert step.bound == "compute" and step.tokens_per_s_per_gpu == pytest.approx(4096 / step.step_time_s)


PLANS = [
    {
        "model": {"preset": "llama-3.1-8b"},
        "parallelism": {"data": 8, "zero_stage": 3},
        "workload": {"sequence_length": 8192, "global_batch_size": 32},
        "techniques": {"activation_checkpointing": "full"},
    },
    {
        "model": {"preset": "llama-3.1-70b"},
        "parallelism": {"data": 4, "tensor": 8, "pipeline": 4, "sequence_parallel": True},
        "workload": {"global_batch_size": 64},
        "techniques": {"activation_checkpointing": "selective_op"},
    },
    {
        "model": {"preset": "mixtral-8x7b"},
        "parallelism": {"data": 8, "expert": 8, "zero_stage": 1, "context": 2},
        "workload": {"sequence_length": 8192, "global_batch_size": 16},
    },
    {
        "model": {"preset": "llama-3.1-70b"},
        "workload": {"task": "qlora"},
        "techniques": {"activation_checkpointing": "full"},
    },
    {
        "model": {"preset": "qwen2.5-7b"},
        "parallelism": {"data": 2, "zero_stage": 2},
        "techniques": {"offload": "optimizer"},
    },
    {
        "model": {"preset": "llama-3.2-1b"},
        "parallelism": {"data": 2, "pipeline": 2, "pipeline_schedule": "interleaved_1f1b", "virtual_stages": 2},
        "workload": {"global_batch_size": 16},
    },
    {
        "model": {"preset": "qwen3-14b"},
        "parallelism": {"tensor": 2},
        "workload": {"task": "inference", "inference": {"batch_size": 16}},
    },
]


@pytest.mark.parametrize("data", PLANS)
def test_items_add_up_and_exposed_is_at_most_the_communication(data):
    plan = plan_from_dict(data)
    step = plan_time(plan, H100)
    assert step.step_time_s == pytest.approx(sum(i.seconds for i in step.items)) and step.step_time_s > 0
    for item in step.items:
        assert item.seconds >= 0 and item.hidden_s >= 0, item
        assert item.kind == "communication" or item.hidden_s == 0, item
    assert 0 < step.mfu < 1


@pytest.mark.parametrize("data", PLANS)
def test_more_bandwidth_is_never_slower(data):
    plan = plan_from_dict(data)
    fast = dataclasses.replace(
        H100,
        memory_bandwidth_tb_per_s=2 * H100.memory_bandwidth_tb_per_s,
        link_gb_per_s=2 * H100.link_gb_per_s,
        network_gb_per_s=2 * H100.network_gb_per_s,
        pcie_gb_per_s=2 * H100.pcie_gb_per_s,
    )
    assert plan_time(plan, fast).step_time_s <= plan_time(plan, H100).step_time_s


def test_more_gpus_never_train_fewer_tokens_per_second_in_total():
    totals = []
    for n in (1, 2, 4, 8):
        plan = plan_from_dict(
            {
                "model": {"preset": "llama-3.1-8b"},
                "parallelism": {"data": n, "zero_stage": 3},
                "workload": {"global_batch_size": 64},
            }
        )
        step = step_time(plan, H100)
        totals.append(step.tokens_per_s_per_gpu * n)
    assert totals == sorted(totals)


def test_a_gpu_without_the_dtype_has_no_time():
    plan = plan_from_dict({"model": {"preset": "llama-3.2-1b"}, "precision": {"compute": "fp8"}})
    assert step_time(plan, CATALOG["a100-sxm-80gb"]) is None


def test_a_communication_bound_step_names_its_link():
    """Llama 3.1 70B with TP 8 over L40S's PCIe: the tensor-parallel all-reduces bound the step."""
    plan = plan_from_dict(
        {
            "model": {"preset": "llama-3.1-70b"},
            "hardware": {"gpu": "l40s-48gb"},
            "parallelism": {"data": 2, "tensor": 8, "sequence_parallel": True},
            "workload": {"global_batch_size": 16},
            "techniques": {"activation_checkpointing": "full"},
        }
    )
    step = step_time(plan, CATALOG["l40s-48gb"])
    assert step.bound == "communication over PCIe"
    assert max(step.items, key=lambda i: i.seconds).name == "tensor_parallel"


def _item(step, name):
    return next(i for i in step.items if i.name == name)


def test_the_optimizer_step_by_hand():
    """AdamW with fp32 master weights on one GPU: read and write the fp32 master (8 B), write its bf16 copy
    (2 B), read the fp32 gradient (4 B), read and write two fp32 states (16 B) = 30 B per parameter at 80 % of
    3.35 TB/s."""
    plan = plan_from_dict({"model": {"preset": "llama-3.2-1b"}, "workload": {"sequence_length": 1024}})
    step = step_time(plan, H100)
    params = plan.model.params.total
    assert _item(step, "optimizer").seconds == pytest.approx(params * 30 / (3.35e12 * 0.8))


def test_the_bubble_by_hand():
    """Interleaved 1F1B, 2 stages, 2 chunks each: (2 − 1) / 2 of one micro-batch's time."""
    plan = plan_from_dict(
        {
            "model": {"preset": "llama-3.2-1b"},
            "workload": {"global_batch_size": 8},
            "parallelism": {"pipeline": 2, "pipeline_schedule": "interleaved_1f1b", "virtual_stages": 2},
        }
    )
    step = step_time(plan, H100)
    per_micro_batch = (
        sum(i.seconds for i in step.items if i.name not in ("bubble", "data_parallel", "optimizer", "offload")) / 8
    )
    assert _item(step, "bubble").seconds == pytest.approx(per_micro_batch / 2)


def test_ddp_hides_its_all_reduce_behind_the_last_backward():
    """DDP on 8 H100: the fp32 gradient all-reduce of a 1B model (≈ 5 GB at 370 GB/s ≈ 24 ms) overlaps the last
    micro-batch's backward (longer): nothing is exposed, and the item says how much was hidden."""
    plan = plan_from_dict(
        {
            "model": {"preset": "llama-3.2-1b"},
            "parallelism": {"data": 8},
            "workload": {"sequence_length": 4096, "global_batch_size": 8},
        }
    )
    dp = _item(step_time(plan, H100), "data_parallel")
    grads = plan.model.params.total * 4
    assert dp.seconds == 0 and dp.hidden_s == pytest.approx(2 * 7 / 8 * grads / 370e9 + 8.4e-6 + 14 * 3.4e-6)
    assert dp.over == "link"


def test_moe_layers_move_their_tokens_to_the_experts_and_back():
    """A MoE layer's elementwise bytes exceed a dense layer's of the same widths by the token permutation:
    4 B × (top-k + 1) × hidden per token (Mixtral: top-2, hidden 4,096 → 49,152 B per token)."""
    plan = plan_from_dict({"model": {"preset": "mixtral-8x7b"}})
    dense, moe = layer_work(plan, 1.0, 1.0, moe=False), layer_work(plan, 1.0, 1.0, moe=True)
    m = plan.model
    activation = (moe.elementwise_bytes - dense.elementwise_bytes) - 4 * 3 * 4096
    # the rest of the difference is the SwiGLU of the top-2 experts against the dense MLP's
    assert activation == pytest.approx(10 * (m.moe_intermediate_size * m.experts_per_token - m.intermediate_size))


@settings(max_examples=120, deadline=None)
@given(
    st.sampled_from(
        ["llama-3.2-1b", "llama-3.1-8b", "qwen3-30b-a3b", "gemma-2-9b", "deepseek-v2-lite", "nemotron-h-8b"]
    ),
    st.sampled_from(["pretrain", "finetune", "lora", "qlora", "inference"]),
    st.sampled_from(
        ["h100-sxm-80gb", "b200-180gb", "a100-sxm-80gb", "rtx-5090-32gb", "rtx-4090-24gb", "mi300x-192gb", "l40s-48gb"]
    ),
    st.sampled_from(["bf16", "fp8"]),
    st.sampled_from([512, 4096]),
    st.sampled_from([1, 8]),
    st.booleans(),
)
def test_no_step_runs_above_its_peak(preset, task, gpu, compute, sequence, micro_batch, compiled):
    """Issue 27: MFU counts the FLOPs the step runs (a frozen base computes no weight gradient: LoRA once read
    111 %) against the peak of the dtype its matmuls run in (an fp8 step against bf16's passed 100 %), so it
    stays at most 1 for every plan."""
    try:
        plan = plan_from_dict(
            {
                "model": {"preset": preset},
                "hardware": {"gpu": gpu},
                "workload": {
                    "task": task,
                    "sequence_length": sequence,
                    "micro_batch_size": micro_batch,
                    "inference": {"batch_size": micro_batch},
                },
                "precision": {"compute": compute},
                "techniques": {"compile": compiled},
            }
        )
    except PlanError:
        assume(False)
    time = plan_time(plan, CATALOG[gpu])
    assume(time is not None)
    assert 0 < time.mfu <= 1


def _async_tp_plan(preset: str, async_tp: bool, micro_batch: int = 12) -> object:
    return plan_from_dict(
        {
            "framework": "torchtitan",
            "model": {"preset": preset},
            "workload": {
                "sequence_length": 8192,
                "micro_batch_size": micro_batch,
                "global_batch_size": 8 * micro_batch,
            },
            "parallelism": {"data": 8, "tensor": 8, "zero_stage": 3, "async_tp": async_tp, "sequence_parallel": True},
            "techniques": {"activation_checkpointing": "selective_op", "compile": True},
        }
    )


def test_async_tp_hides_a_forward_collective_behind_the_matmul_beside_it_by_hand():
    """Llama 3.1 8B, TP 8, 12 × 8,192 tokens: each all-gather or reduce-scatter moves 805,306,368 B. Beside
    them, per layer and rank (each matmul by roofline: k and v are bound by their bytes): q 4096 × 512, k and v
    4096 × 128, o 512 × 4096, gate and up 4096 × 1792, down 1792 × 4096. Each collective of c seconds, cut in 8
    chunks beside a matmul of m, leaves 7 × max(0, c/7 − m/8) exposed in the forward; backward's four stay exposed."""
    plan = _async_tp_plan("llama-3.1-8b", True)
    r = rates(H100, "bf16")
    step = step_time(plan, H100)
    c = collective_s("all_gather", 12 * 8192 * 4096 * 2, Group(size=8, stride=1), r)
    tokens = 12 * 8192
    sides = [
        sum(forward_s(Gemm(1, tokens, k, n, 2), r) for k, n in side)
        for side in (
            ((4096, 512), (4096, 128), (4096, 128)),
            ((512, 4096),),
            ((4096, 1792), (4096, 1792)),
            ((1792, 4096),),
        )
    ]
    forward = sum(7 * max(0.0, c / 7 - m / 8) for m in sides)
    assert _item(step, "tensor_parallel").seconds == pytest.approx(32 * (forward + 4 * c), rel=1e-9)


@pytest.mark.parametrize("preset", ["llama-3.1-8b", "llama-3.1-70b"])
def test_async_tp_gains_what_runs_measured(preset):
    """Published: async TP ~8 % faster end to end for Llama 3 8B and 70B on H100s at TP 8 (forward ~20-29 %;
    PyTorch dev-discuss, "Introducing Async Tensor Parallelism in PyTorch", 2024); the model said 1.34-1.43
    before it kept backward's collectives exposed and hid each only behind the matmul beside it."""
    gain = (
        step_time(_async_tp_plan(preset, False), H100).step_time_s
        / step_time(_async_tp_plan(preset, True), H100).step_time_s
    )
    assert 1.03 < gain < 1.2


def _fp8_plan(framework: str, recipe: str, compiled: bool = True) -> object:
    return plan_from_dict(
        {
            "framework": framework,
            "model": {"preset": "llama-3.1-8b"},
            "workload": {"sequence_length": 8192, "micro_batch_size": 1, "global_batch_size": 8},
            "parallelism": {"data": 8, "zero_stage": 3},
            "precision": {"compute": "fp8", "fp8_recipe": recipe},
            "techniques": {"compile": compiled, "activation_checkpointing": "none"},
        }
    )


@pytest.mark.parametrize(
    "framework, recipe, compiled, cast, other, rescale",
    [
        ("torchtitan", "tensorwise", True, 3, 2, 0),  # amax fused into the producer; the transpose a copy of 8 bits
        ("torchtitan", "tensorwise", False, 5, 2, 0),  # amax read (2), cast read (2) and write (1)
        # rowwise scales serve one orientation: a second cast; the backward's outputs rescaled (r2 w2 compiled,
        # + the scales' fp32 outer product written and read eager)
        ("torchtitan", "rowwise", True, 3, 3, 4),
        ("torchtitan", "rowwise", False, 5, 5, 12),
        ("generic", "rowwise", True, 1, 1, 0),  # Transformer Engine-style: the producer writes 8 bits, both ways
    ],
)
def test_float8_casts_by_hand(framework, recipe, compiled, cast, other, rescale):
    """A Llama 3.1 8B layer, 8,192 tokens: its matmuls' inputs are 3 × 4096 (q, k, v read the same x) + 4096 (o)
    + 2 × 4096 (gate, up) + 14,336 (down) = 38,912 per token, their outputs' gradients 4096 + 2 × 1024 + 4096 +
    2 × 14,336 + 4096 = 43,008 per token, their weights 218,103,808. The forward casts inputs and weights; the
    backward the gradients, and each operand again in the other orientation; torchao's rowwise backward
    rescales its outputs, the input gradients (as many as the inputs) and the weight gradients."""
    plan = _fp8_plan(framework, recipe, compiled)
    gemms = layer_work(plan, 8192, 4096, False).gemms
    inputs, grads, weights = 38_912 * 8192, 43_008 * 8192, 218_103_808
    assert fp8_cast_bytes(plan, gemms) == (
        cast * inputs,
        cast * weights,
        (other + rescale) * (inputs + weights) + (cast + other) * grads,
    )


def _titan_8b(recipe: str) -> object:
    """torchao's float8 training benchmark: Llama 3 8B on 8 H100s, batch 1 × 8,192, FSDP2, compile, per-op SAC."""
    sections = {
        "framework": "torchtitan",
        "model": {"preset": "llama-3.1-8b"},
        "workload": {"sequence_length": 8192, "micro_batch_size": 1, "global_batch_size": 8},
        "parallelism": {"data": 8, "zero_stage": 3},
        "techniques": {"compile": True, "activation_checkpointing": "selective_op"},
    }
    if recipe != "bf16":
        sections["precision"] = {"compute": "fp8", "fp8_recipe": recipe, "fp8_all_gather": recipe == "tensorwise"}
    return plan_from_dict(sections)


def test_rowwise_float8_gains_what_runs_measured():
    """Published pairs, Llama 3 8B on 8 H100s with torchtitan (FSDP2, compile): tensorwise with float8 all-gathers
    1.25 × bf16 and rowwise with bf16 all-gathers 1.10 × (torchao/float8/README.md before 50865d5c7: 6,150,
    7,689.5 and 6,768 tokens/s, per-op SAC); 1.248 × and 1.114 × (torchtitan commit 7a04053: 5,760, 7,186 and
    6,412-6,424). Rowwise casts each operand twice, runs its forward on the CUTLASS rowwise kernel and rescales
    its backward's outputs; its weights are gathered in 16 bits. The model said 1.29 × and 1.24 × before the
    kernel and the rescale."""
    speed = {
        recipe: step_time(_titan_8b(recipe), H100).tokens_per_s_per_gpu for recipe in ("bf16", "tensorwise", "rowwise")
    }
    assert speed["tensorwise"] / speed["bf16"] == pytest.approx(1.25, abs=0.05)
    assert speed["rowwise"] / speed["bf16"] == pytest.approx(1.11, abs=0.06)
    assert 0.85 < speed["rowwise"] / speed["tensorwise"] < 0.93  # published 0.88 and 0.89


def _pipelined_fsdp(framework: str) -> object:
    return plan_from_dict(
        {
            "framework": framework,
            "model": {"preset": "llama-3.1-8b"},
            "workload": {"sequence_length": 4096, "micro_batch_size": 1, "global_batch_size": 16},
            "parallelism": {"data": 4, "pipeline": 2, "zero_stage": 3},
            "techniques": {"activation_checkpointing": "full"},
        }
    )


@pytest.mark.parametrize("framework, gathers", [("torchtitan", 1), ("generic", 4 + 1)])
def test_fsdp_under_pipelining_reduces_once_a_step(framework, gathers):
    """A global batch of 16 over 4 FSDP ranks: 4 micro-batches on a stage of a 2-stage pipeline. A torch
    pipelining schedule reduces the accumulated gradients once, after the last backward; torchtitan keeps the
    stage's weights gathered from the first forward (one all-gather a step), PyTorch's default reshards after
    each forward and keeps them from the first backward (4 + 1). Without pipelining (8 ranks, 2 micro-batches)
    FSDP gathers twice and reduces once per micro-batch."""
    plan = _pipelined_fsdp(framework)
    item = _item(step_time(plan, H100), "data_parallel")
    assert item.formula.startswith(f"{gathers} all-gathers × ") and " + 1 reduce-scatter × " in item.formula
    flat = dataclasses.replace(plan, parallelism=dataclasses.replace(plan.parallelism, pipeline=1, data=8))
    assert _item(step_time(flat, H100), "data_parallel").formula.startswith("2 × (2 all-gathers × ")
