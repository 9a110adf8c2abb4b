"""GRPO with a colocated rollout engine, worked by hand on TINY (conftest: 2 layers, h 64, 2 KV heads of 16, I 128,
V 1,000, 202,048 parameters), plus invariants over generated plans. The plan: full fine-tune in pure bf16, sequences
of 64 tokens (32 prompt + 32 completion), micro-batch 8 completions = one group of G 8, on one H100."""

from dataclasses import fields

import pytest
from conftest import TINY
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.catalog import load_catalog
from planner.errors import PlanError
from planner.memory import estimate
from planner.memory.inference import CUDA_GRAPH_BYTES
from planner.memory.rollout import rollout_plan
from planner.perf import rollout_time, serving_time, step_time
from planner.plan.codec import LEAVES, plan_from_dict, plan_from_query, plan_from_yaml, plan_to_query, plan_to_yaml
from planner.plan.config import NESTED

P = 202_048
PURE = {"compute": "bf16", "master_weights": "none"}
T = 8 * 64  # tokens of one micro-batch
# logits at the completion's 32 + 1 positions of each sequence (TRL logits_to_keep + 1: Workload.logit_positions)
LOGIT_T = 8 * 33
LAYER = T * 2_448  # one layer's activations at T (tests/test_memory_preference.py: norms, attention, MLP per token)
H100 = load_catalog()["h100-sxm-80gb"]
TRAINING = "forward"


def grpo(task="finetune", mb=8, rl=None, **sections):
    wl = {"task": task, "sequence_length": 64, "micro_batch_size": mb, "objective": "grpo"}
    wl["rl"] = {"completion_length": 32, **(rl or {})}
    return plan_from_dict({"model": TINY, "workload": wl, "precision": PURE, **sections})


def phase_items(est, name):
    return {i.name: i.bytes for i in next(ph for ph in est.stages[0].phases if ph.name == name).items}


def names(est):
    return {i.name for ph in est.stages[0].phases for i in ph.items}


def test_rollout_phase_by_hand():
    """The engine awake beside the policy's weights and AdamW states (no gradients: zero_grad freed them)."""
    ro = phase_items(estimate(grpo()), "rollout")
    assert ro["weights"] == P * 2 and ro["optimizer_states"] == P * 2 * 2 and "gradients" not in ro
    assert ro["engine_weights"] == P * 2  # the engine's own bf16 copy
    assert ro["engine_kv_cache"] == 8 * 64 * 2 * 2 * 2 * 16 * 2  # 8 completions × 64 tokens × layers × K,V × kv × 2 B
    assert ro["engine_cuda_graphs"] == CUDA_GRAPH_BYTES
    # the engine claims its fraction of the GPU whatever the batch needs (one GPU: no NCCL charged), the cuBLAS
    # workspace it counts included: that one is the trainer's, shared in the one process
    engine = sum(b for n, b in ro.items() if n.startswith("engine_"))
    assert engine + ro["cublas_workspace"] == int(H100.usable_bytes * 0.3)


def test_training_phase_by_hand_with_sleep():
    """Asleep (level 2) the engine keeps only its CUDA graphs' pool; the step is SFT's on the 8 completions."""
    fwd = phase_items(estimate(grpo(rl={"sleep_level": 2})), TRAINING)
    assert fwd["engine_cuda_graphs"] == CUDA_GRAPH_BYTES
    assert not {n for n in fwd if n.startswith("engine_")} - {"engine_cuda_graphs"}
    assert fwd["activations"] == 2 * LAYER + T * 8 * 64  # 2 layers + the final norm's fp32 input and output
    # the completions' logits only, TRL's log-probs: bf16 logits, each row's saved log-softmax, the entropy's copy of
    # the logits, and its 128-row chunk (log-softmax, exp, product)
    assert fwd["logits_loss"] == LOGIT_T * 1_000 * (2 + 2 + 2) + 128 * 1_000 * 3 * 2 == 2_352_000


def test_without_sleep_the_engine_stays_through_the_step():
    est = estimate(grpo())
    ro, fwd = phase_items(est, "rollout"), phase_items(est, TRAINING)
    assert all(fwd[n] == b for n, b in ro.items() if n.startswith("engine_"))
    assert est.phase != "rollout"  # the step adds its activations to everything the rollout holds


def test_sleep_makes_the_rollout_bind():
    est = estimate(grpo(rl={"sleep_level": 2}))
    assert est.phase == "rollout"
    assert est.peak_allocated_bytes == sum(phase_items(est, "rollout").values())


def test_reference_forward_with_beta():
    """beta > 0, full fine-tune: a separate bf16 reference; its no-grad forward over the completions runs before the
    step (one layer's activations, the logits and one row's log-softmax), with the engine asleep."""
    est = estimate(grpo(rl={"beta": 0.04, "sleep_level": 1}))
    ref = phase_items(est, "reference forward")
    assert ref["reference_weights"] == P * 2
    assert ref["reference_forward"] == LAYER + (LOGIT_T + 33) * 1_000 * 2  # the completions' logits + one row
    assert "activations" not in ref and "gradients" not in ref
    assert phase_items(est, "rollout")["reference_weights"] == P * 2  # it stays on the GPU through the rollout


def test_lora_reference_is_the_base_with_adapters_off():
    est = estimate(grpo("lora", rl={"beta": 0.04}))
    assert "reference_weights" not in names(est) and "reference_forward" in names(est)


def test_level_one_keeps_the_weights_on_the_host():
    one, two = estimate(grpo(rl={"sleep_level": 1})), estimate(grpo(rl={"sleep_level": 2}))
    assert one.host_bytes - two.host_bytes == P * 2
    assert one.device_bytes == two.device_bytes


def test_offload_during_rollout_drops_the_policy_states():
    ro = phase_items(estimate(grpo(rl={"sleep_level": 2, "offload_during_rollout": True})), "rollout")
    assert "weights" not in ro and "optimizer_states" not in ro and "engine_weights" in ro


def test_weight_sync_buffer_under_zero3():
    ro = phase_items(estimate(grpo(parallelism={"data": 2, "zero_stage": 3})), "rollout")
    assert ro["weight_sync"] == 64 * 128 * 2  # the largest projection (h × I), gathered whole in bf16
    assert "weight_sync" not in phase_items(estimate(grpo()), "rollout")


def test_server_engine_is_not_on_the_training_gpus():
    est = estimate(grpo(rl={"engine": "server"}))
    assert not any(n.startswith("engine_") for n in names(est)) and "rollout" not in [
        ph.name for ph in est.stages[0].phases
    ]


def test_engine_tensor_parallel_serves_its_group():
    plan = grpo(mb=4, rl={"tensor_parallel": 2}, parallelism={"data": 2})
    rp = rollout_plan(plan)
    assert rp.parallelism.tensor == 2 and rp.workload.inference.batch_size == 8  # 2 ranks × 4 completions
    ro = phase_items(estimate(plan), "rollout")
    assert ro["engine_weights"] < P * 2  # split over the two ranks


def test_server_engine_gpus_hold_the_serving_plan():
    """A server on 2 GPUs of TP 1 (2 replicas) beside 2 training GPUs: the step's 16 completions are 2 prompts of
    G 8, one prompt's group to each replica (vllm_serve's chunk_list); one engine GPU holds the bf16 weights and
    the 8 completions' KV cache at vLLM's fraction 0.9, nothing of the trainer's."""
    plan = grpo(rl={"engine": "server", "engine_gpus": 2}, parallelism={"data": 2})
    assert plan.total_gpus == 4 and plan.workload.rl.engine_replicas == 2
    est = estimate(plan)
    engine = {i.name: i.bytes for i in est.engine.items}
    assert est.engine.plan.workload.inference.batch_size == 8
    assert engine["weights"] == P * 2 and engine["kv_cache"] == 8 * 64 * 2 * 2 * 2 * 16 * 2
    assert est.engine.plan.workload.inference.gpu_memory_utilization == 0.9 and est.engine.fits and est.fits
    assert not any(n.startswith("engine_") for n in names(est))
    assert "its server engine, 2 replica(s) of TP 1 on 2 more GPU(s): one replica fits" in est.reason


def test_server_engine_default_is_one_replica_and_splits_prompts_unevenly():
    """3 prompts over 2 replicas: the larger chunk, 2 prompts × G 4, sets the rollout's batch."""
    one = grpo(rl={"engine": "server"})
    assert one.workload.rl.engine_gpus == 1 and one.total_gpus == 2
    plan = grpo(mb=12, rl={"engine": "server", "engine_gpus": 4, "tensor_parallel": 2, "num_generations": 4})
    assert rollout_plan(plan).workload.inference.batch_size == 8 and rollout_plan(plan).parallelism.tensor == 2


def test_engine_gpu_that_cannot_hold_its_weights_does_not_fit():
    """Llama 3.1 8B in bf16 (16.1 GB) does not fit vLLM's 0.9 of a T4: the plan does not fit, though its training
    GPUs hold their share."""
    plan = plan_from_dict(
        {
            "model": {"preset": "llama-3.1-8b"},
            "workload": {
                "task": "lora",
                "objective": "grpo",
                "sequence_length": 1024,
                "rl": {"completion_length": 512, "engine": "server"},
            },
            "precision": {"compute": "fp16"},
            "parallelism": {"data": 8, "zero_stage": 3},
            "hardware": {"gpu": "t4-16gb", "count": 8},
        }
    )
    est = estimate(plan)
    assert est.device_bytes <= est.usable_bytes and not est.engine.fits and not est.fits
    assert "one replica does not fit on NVIDIA T4" in est.reason


def test_server_rollout_adds_to_the_step_unless_async():
    """Synchronous (TRL server mode) the trainer waits for the whole rollout; asynchronous (verl one step off
    policy, OpenRLHF --async_train) the rollout hides behind the policy's step up to the step's length."""
    sync, overlap = (grpo(rl={"engine": "server", "async_rollout": a}) for a in (False, True))
    ro = rollout_time(sync, H100).seconds
    items = {i.name: i for i in step_time(sync, H100).items}
    assert items["rollout"].seconds == pytest.approx(ro) and items["rollout"].hidden_s == 0
    rest = sum(i.seconds for n, i in items.items() if n != "rollout")
    hidden = {i.name: i for i in step_time(overlap, H100).items}["rollout"]
    assert hidden.hidden_s == pytest.approx(min(ro, rest)) and hidden.seconds == pytest.approx(max(0.0, ro - rest))
    assert step_time(overlap, H100).step_time_s == pytest.approx(max(ro, rest))


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        (
            {"task": "pretrain", "objective": "grpo"},
            "workload.objective: 'grpo' post-trains a pretrained model: workload.task must be finetune, lora or "
            "qlora, not pretrain",
        ),
        (
            {"task": "lora", "objective": "grpo", "sequence_length": 512},
            "workload.rl.completion_length: 512 must be below workload.sequence_length (512: prompt + completion)",
        ),
        (
            {"task": "lora", "objective": "grpo", "micro_batch_size": 4},
            "workload.global_batch_size: 4 must be a multiple of workload.rl.num_generations (8): "
            "whole groups per step",
        ),
        (
            {"task": "lora", "objective": "grpo", "micro_batch_size": 8, "rl": {"prompts_per_step": 2}},
            "workload.rl.prompts_per_step: 2 × num_generations (8) must equal workload.global_batch_size (8)",
        ),
        (
            {"task": "lora", "objective": "grpo", "micro_batch_size": 8, "rl": {"tensor_parallel": 2}},
            "workload.rl.tensor_parallel: 2 must divide hardware.count (1): colocated engines tile the training GPUs",
        ),
        (
            {"task": "lora", "objective": "grpo", "micro_batch_size": 8, "rl": {"engine": "server", "sleep_level": 1}},
            "workload.rl.engine: 'server' runs on other GPUs: sleep_level and offload_during_rollout apply to a "
            "colocated engine",
        ),
        (
            {"task": "lora", "objective": "grpo", "micro_batch_size": 8, "rl": {"engine_gpus": 2}},
            "workload.rl.engine_gpus: 2 applies to engine server: a colocated engine shares the training GPUs",
        ),
        (
            {"task": "lora", "objective": "grpo", "micro_batch_size": 8, "rl": {"async_rollout": True}},
            "workload.rl.async_rollout: True applies to engine server: a colocated engine shares the training GPUs",
        ),
        (
            {
                "task": "lora",
                "objective": "grpo",
                "micro_batch_size": 8,
                "rl": {"engine": "server", "tensor_parallel": 2, "engine_gpus": 3},
            },
            "workload.rl.engine_gpus: 3 must be a positive multiple of workload.rl.tensor_parallel (2): replicas of "
            "tensor_parallel GPUs each",
        ),
        (
            {"task": "lora", "rl": {"beta": 0.1}},
            "workload.rl: {'async_rollout': False, 'beta': 0.1, 'completion_length': 512, 'engine': 'colocate', "
            "'engine_gpus': 0, 'gpu_memory_utilization': 0.3, 'num_generations': 8, 'offload_during_rollout': False, "
            "'prompts_per_step': None, 'sleep_level': 0, 'tensor_parallel': 1} applies to workload.objective grpo or "
            "ppo",
        ),
    ],
)
def test_validation_messages(workload, message):
    with pytest.raises(PlanError) as err:
        plan_from_dict({"model": TINY, "workload": workload})
    assert str(err.value) == message


@pytest.mark.parametrize(
    "plan",
    [
        grpo(rl={"beta": 0.04, "sleep_level": 1, "gpu_memory_utilization": 0.5}),
        grpo("qlora", rl={"engine": "server", "tensor_parallel": 2, "num_generations": 4, "prompts_per_step": 2}),
        grpo(rl={"engine": "server", "engine_gpus": 4, "async_rollout": True}),
    ],
)
def test_round_trips(plan):
    assert "rl" in plan_to_yaml(plan)
    assert plan_from_yaml(plan_to_yaml(plan)) == plan
    assert plan_from_query(plan_to_query(plan), {"model": TINY})[0] == plan


def test_rl_block_is_written_only_for_grpo():
    assert "rl:" not in plan_to_yaml(plan_from_dict({"model": TINY, "workload": {"task": "lora"}}))


def test_rollout_time_is_the_serving_model_and_the_split_is_itemized():
    step = {i.name: i for i in step_time(grpo(rl={"beta": 0.04}), H100).items}
    assert step["rollout"].seconds == pytest.approx(serving_time(rollout_plan(grpo()), H100).step_time_s)
    assert step["rollout"].kind == "rollout" and step["reference_forward"].seconds > 0
    assert "reference_forward" not in {i.name for i in step_time(grpo(), H100).items}


def test_rollout_runs_in_waves_when_the_kv_cache_is_short():
    """A 1% engine on a 64k-token sequence holds fewer completions than the batch: vLLM queues the rest."""
    plan = plan_from_dict(
        {
            "model": {**TINY, "num_layers": 64},
            "workload": {
                "task": "lora",
                "objective": "grpo",
                "sequence_length": 65_536,
                "micro_batch_size": 64,
                "rl": {"completion_length": 32_768, "num_generations": 64, "gpu_memory_utilization": 0.05},
            },
        }
    )
    assert "wave(s)" in (item := next(i for i in step_time(plan, H100).items if i.name == "rollout")).formula
    assert not item.formula.startswith("1 wave")


@settings(max_examples=25, deadline=None)
@given(
    task=st.sampled_from(["finetune", "lora", "qlora"]),
    groups=st.integers(1, 3),
    zero=st.sampled_from([0, 3]),
    beta=st.sampled_from([0.0, 0.04]),
    util=st.sampled_from([0.1, 0.3, 0.6]),
)
def test_invariants(task, groups, zero, beta, util):
    par = {"data": 2, "zero_stage": zero}
    ests = {
        level: estimate(
            grpo(
                task, 4 * groups, {"beta": beta, "sleep_level": level, "gpu_memory_utilization": util}, parallelism=par
            )
        )
        for level in (0, 1, 2)
    }
    for est in ests.values():
        phases = est.stages[0].phases
        for ph in phases:  # a phase's items add up
            assert ph.allocated_bytes == sum(i.bytes for i in ph.items if i.level == "allocated")
        rollout = next(ph for ph in phases if ph.name == "rollout").allocated_bytes
        training = max(ph.allocated_bytes for ph in phases if ph.name != "rollout")
        assert (est.phase == "rollout") == (rollout >= training)  # the binding phase is the larger
        assert est.peak_allocated_bytes == max(rollout, training)
        if beta == 0:
            assert not {"reference_weights", "reference_forward"} & names(est)
    for level in (1, 2):  # sleep mode never increases the peak
        assert ests[level].peak_allocated_bytes <= ests[0].peak_allocated_bytes
        assert ests[level].device_bytes <= ests[0].device_bytes


def test_every_nested_key_has_its_own_share_link_name():
    """workload.rl.gpu_memory_utilization and workload.inference.gpu_memory_utilization both reach the link."""
    paths = {(section, key, sub.name) for (section, key), nested in NESTED.items() for sub in fields(nested)}
    assert paths <= set(LEAVES.values())


def test_logits_cover_the_completions_only():
    """TRL keeps the logits of the completion's positions + 1 (logits_to_keep): the training phase's logits term is
    the same whatever the prompt's length, and its backward 8 B a logit (the rows' gradients stacked, two slices'
    zero-filled gradients, the temperature division)."""
    for length in (64, 256):
        wl = {"task": "finetune", "sequence_length": length, "micro_batch_size": 8, "objective": "grpo"}
        wl["rl"] = {"completion_length": 32}
        g = phase_items(estimate(plan_from_dict({"model": TINY, "workload": wl, "precision": PURE})), TRAINING)
        est = estimate(plan_from_dict({"model": TINY, "workload": wl, "precision": PURE}))
        assert g["logits_loss"] == LOGIT_T * 1_000 * 6 + 128 * 1_000 * 6
        assert phase_items(est, "loss backward")["logits_loss"] == LOGIT_T * 1_000 * 8


def test_a_colocated_engine_holds_one_wave_within_its_fraction():
    """Qwen2.5 7B on one H100 at TRL's 0.3: 256 completions of 512 + 4,096 tokens need ~62 GiB of KV cache, far
    beyond the 0.3 × 79 GiB vLLM takes; it runs the waves its KV blocks hold and queues the rest, so the awake
    engine is its fraction, as with a small batch, and the rollout's time counts the waves."""
    plan = plan_from_dict(
        {
            "model": {"preset": "qwen2.5-7b"},
            "workload": {
                "task": "lora",
                "objective": "grpo",
                "sequence_length": 4608,
                "micro_batch_size": 8,
                "global_batch_size": 256,
                "rl": {"completion_length": 4096},
            },
            "hardware": {"gpu": "h100-sxm-80gb", "count": 1},
        }
    )
    ro = phase_items(estimate(plan), "rollout")
    engine = sum(b for n, b in ro.items() if n.startswith("engine_"))
    assert engine + ro["cublas_workspace"] == int(H100.usable_bytes * 0.3)
    assert rollout_time(plan, H100).waves > 1
