"""PPO with four models, worked by hand on TINY (conftest: 2 layers, h 64, 2 KV heads of 16, I 128, V 1,000,
202,048 parameters), plus invariants over generated plans. The plan: full fine-tune in pure bf16, sequences of 64
tokens (32 prompt + 32 completion), micro-batch 8 = the step, one completion per prompt, on one H100. The value and
reward models are TINY with a score head: 202,048 − the 64,000-parameter vocabulary head + h = 138,112 parameters."""

import pytest
from conftest import TINY
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.catalog import load_catalog
from planner.errors import PlanError
from planner.memory import estimate
from planner.perf import step_time
from planner.plan.codec import (
    LEAVES,
    plan_from_dict,
    plan_from_query,
    plan_from_yaml,
    plan_to_dict,
    plan_to_query,
    plan_to_yaml,
)
from planner.search.recommend import max_sequence_length

P, V = 202_048, 202_048 - 64_000 + 64  # policy, value / reward model (score head)
PURE = {"compute": "bf16", "master_weights": "none"}
T = 8 * 64  # tokens of one micro-batch
LAYER = T * 2_448  # one layer's activations at T (tests/test_memory_preference.py)
CUBLAS = 2 * 32 * 2**20  # the trainer's two cuBLAS workspaces, shared by every model in the process
H100 = load_catalog()["h100-sxm-80gb"]


def ppo(task="finetune", mb=8, rl=None, ppo_keys=None, **sections):
    wl = {"task": task, "sequence_length": 64, "micro_batch_size": mb, "objective": "ppo"}
    wl["rl"] = {"completion_length": 32, "num_generations": 1, "beta": 0.05, "engine": "generate", **(rl or {})}
    if ppo_keys:
        wl["ppo"] = ppo_keys
    return plan_from_dict({"model": TINY, "workload": wl, "precision": PURE, **sections})


def phases(est):
    return {ph.name: {i.name: i.bytes for i in ph.items} for ph in est.stages[0].phases}


# every model's states while none is being trained: policy weights + AdamW, value weights + AdamW, reference, reward
RESIDENT = {
    "weights": P * 2,
    "master_weights": 0,
    "optimizer_states": P * 2 * 2,
    "ddp_buckets": 0,
    "cublas_workspace": CUBLAS,
    "critic_weights": V * 2,
    "critic_master_weights": 0,
    "critic_optimizer_states": V * 2 * 2,
    "critic_ddp_buckets": 0,
    "reference_weights": P * 2,
    "reward_weights": V * 2,
}


def test_generate_rollout_by_hand():
    """TRL's generate: the KV cache of one chunk (8 sequences × 64 tokens × 2 layers × K,V × 2 heads × 16 × 2 B)
    and the fp32 scores of the 8 completions (8 × 32 tokens × V 1,000 × 4 B), beside every model's states."""
    ro = phases(estimate(ppo()))["rollout"]
    assert ro == {**RESIDENT, "generate_kv": 8 * 64 * 2 * 2 * 2 * 16 * 2, "generate_scores": 8 * 32 * 1_000 * 4}


def test_experience_phases_by_hand():
    """Generate's scores give the policy's log-probs (no policy forward); the reference's no-grad forward holds
    one layer's activations, its logits and one row's log-softmax; a score model's, one layer and T × h."""
    ph = phases(estimate(ppo()))
    assert "experience: policy log-probs" not in ph
    assert ph["experience: reference log-probs"] == {**RESIDENT, "reference_forward": LAYER + (T + 64) * 1_000 * 2}
    score = LAYER + T * 64 * 2
    assert ph["experience: values"] == {**RESIDENT, "critic_forward": score}
    assert ph["experience: reward"] == {**RESIDENT, "reward_forward": score}


def test_a_vllm_engine_adds_the_policy_forward():
    ph = phases(estimate(ppo(rl={"engine": "colocate", "sleep_level": 2})))
    assert ph["experience: policy log-probs"]["policy_forward"] == LAYER + (T + 64) * 1_000 * 2
    assert "engine_weights" in ph["rollout"] and "engine_weights" not in ph["experience: values"]


def test_value_update_by_hand():
    """The value model's step at its peak (no vocabulary logits: the backward of its last layer), beside the
    policy's states and the frozen models."""
    up = phases(estimate(ppo()))["value update: backward of the last layer"]
    assert up["critic_activations"] == 2 * LAYER + T * 8 * 64  # as the policy's: 2 layers + the final norm
    assert up["critic_weights"] == V * 2 and up["weights"] == P * 2 and "logits_loss" not in up
    assert not {"critic_logits_loss", "critic_cublas_workspace"} & set(up)


def test_the_policy_step_holds_the_other_models_and_binds():
    est = estimate(ppo())
    fwd = phases(est)["forward"]
    assert {k: fwd[k] for k in RESIDENT} == RESIDENT
    assert est.phase == "loss backward"


def test_offloads_drop_what_waits_on_the_host():
    ph = phases(estimate(ppo(ppo_keys={"critic_offload": True, "frozen_offload": True})))
    assert not {"critic_weights", "reference_weights", "reward_weights"} & set(ph["forward"])
    assert ph["experience: values"]["critic_weights"] == V * 2  # brought back for its forward, without its states
    assert "critic_optimizer_states" not in ph["experience: values"]
    # one TINY layer in bf16: q, o 64 × 64, k, v 64 × 32, the SwiGLU MLP 3 × 64 × 128, two norms of 64
    layer = (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64) * 2
    assert ph["experience: reference log-probs"]["reference_layer"] == layer


def test_no_reference_with_kl_zero_and_a_rule_reward():
    names = {n for ph in phases(estimate(ppo(rl={"beta": 0.0}, ppo_keys={"reward": "rule"}))).values() for n in ph}
    assert not {"reference_weights", "reference_forward", "reward_weights", "reward_forward"} & names


def test_lora_reference_is_the_base_with_adapters_off():
    ph = phases(estimate(ppo("lora")))
    assert "reference_weights" not in ph["forward"] and "reference_forward" in ph["experience: reference log-probs"]


def test_a_named_value_model():
    small = {"critic_model": "smollm2-135m", "reward_model": "smollm2-135m"}
    ph = phases(estimate(ppo(ppo_keys=small)))
    assert (
        ph["forward"]["critic_weights"] != V * 2 and ph["forward"]["reward_weights"] == ph["forward"]["critic_weights"]
    )


def test_time_items():
    """Experience: a third of the policy's training pass per model (reference, value, reward), once per rollout of
    4 epochs; the value update: the policy's pass × the FLOPs ratio (1: the same architecture)."""
    items = {i.name: i for i in step_time(ppo(), H100).items}
    own = items["compute"].seconds + items["elementwise"].seconds
    assert items["experience"].seconds == pytest.approx(own / 3 * 3 / 4)
    assert items["value_update"].seconds == pytest.approx(own)
    assert "reference_forward" not in items  # counted in the experience, once per rollout
    assert items["rollout"].kind == "rollout"


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        (
            {"task": "lora", "objective": "grpo", "ppo": {"epochs": 2}},
            "workload.ppo: {'critic_model': None, 'critic_offload': False, 'epochs': 2, 'frozen_offload': False, "
            "'mini_batches': 1, 'reward': 'model', 'reward_model': None} applies to workload.objective ppo",
        ),
        (
            {"task": "lora", "objective": "grpo", "micro_batch_size": 8, "rl": {"engine": "generate"}},
            "workload.rl.engine: 'generate' is TRL PPOTrainer's: grpo samples with colocate or server",
        ),
        (
            {"task": "lora", "objective": "grpo", "micro_batch_size": 8, "rl": {"num_generations": 1}},
            "workload.rl.num_generations: 1 must be 2 or more: GRPO compares a group",
        ),
        (
            {"task": "lora", "objective": "ppo", "ppo": {"reward": "rule", "reward_model": "gpt2"}},
            "workload.ppo.reward_model: 'gpt2' needs workload.ppo.reward model, not rule",
        ),
        (
            {"task": "lora", "objective": "ppo", "ppo": {"critic_model": "nope"}},
            "workload.ppo.critic_model: 'nope' must be a preset id (planner presets) or empty",
        ),
        (
            {"task": "lora", "objective": "ppo", "rl": {"engine": "generate", "sleep_level": 2}},
            "workload.rl.engine: 'generate' is the policy's own generate: sleep_level, gpu_memory_utilization, "
            "tensor_parallel and offload_during_rollout are a vLLM engine's",
        ),
        (
            {"task": "lora", "objective": "ppo", "micro_batch_size": 2, "rl": {"num_generations": 4}},
            "workload.global_batch_size: 2 × ppo.mini_batches (2) must be a multiple of workload.rl.num_generations "
            "(4): whole groups per rollout",
        ),
        (
            {"task": "pretrain", "objective": "ppo"},
            "workload.objective: 'ppo' post-trains a pretrained model: workload.task must be finetune, lora or "
            "qlora, not pretrain",
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
        ppo(ppo_keys={"epochs": 2, "mini_batches": 2, "critic_model": "gpt2", "frozen_offload": True}),
        ppo("qlora", rl={"engine": "colocate", "sleep_level": 1}, ppo_keys={"reward": "rule", "critic_offload": True}),
    ],
)
def test_round_trips(plan):
    assert "ppo:" in plan_to_yaml(plan) and "ppo_epochs" in LEAVES
    assert plan_from_yaml(plan_to_yaml(plan)) == plan
    assert plan_from_query(plan_to_query(plan), {"model": TINY})[0] == plan


def test_ppo_block_is_written_only_for_ppo():
    assert "ppo:" not in plan_to_yaml(plan_from_dict({"model": TINY, "workload": {"task": "lora"}}))


@settings(max_examples=20, deadline=None)
@given(
    task=st.sampled_from(["finetune", "lora"]),
    engine=st.sampled_from(["generate", "colocate", "server"]),
    zero=st.sampled_from([0, 3]),
    beta=st.sampled_from([0.0, 0.05]),
    reward=st.sampled_from(["model", "rule"]),
)
def test_invariants(task, engine, zero, beta, reward):
    rl = {"engine": engine, "beta": beta, **({"sleep_level": 2} if engine == "colocate" else {})}
    par = {"parallelism": {"data": 2, "zero_stage": zero}}
    ests = {
        off: estimate(
            ppo(task, 4, rl, {"reward": reward, "critic_offload": off, "frozen_offload": off}, **par)
            if engine != "colocate" or not off
            else ppo(
                task,
                4,
                {**rl, "offload_during_rollout": True},
                {"reward": reward, "critic_offload": True, "frozen_offload": True},
                **par,
            )
        )
        for off in (False, True)
    }
    for est in ests.values():
        phs = est.stages[0].phases
        for ph in phs:  # a phase's items add up
            assert ph.allocated_bytes == sum(i.bytes for i in ph.items if i.level == "allocated")
        top = max(phs, key=lambda ph: ph.allocated_bytes)
        assert est.peak_allocated_bytes == top.allocated_bytes  # the binding phase is the largest, and named
        assert next(ph for ph in phs if ph.name == est.phase).allocated_bytes == top.allocated_bytes
        names = {i.name for ph in phs for i in ph.items}
        if beta == 0:
            assert not {"reference_weights", "reference_forward"} & names
    assert ests[True].peak_allocated_bytes <= ests[False].peak_allocated_bytes  # offload never increases the peak


def test_limits_grow_the_prompt_and_keep_the_completion():
    """The longest sequence grows the prompt after rl.completion_length (planner/search/recommend.py): counted
    from 0 the search would try sequences shorter than the completion, which the plan refuses."""
    longest = max_sequence_length(ppo())
    assert longest is not None and longest > 32
    estimate(ppo_at(longest))  # a valid plan at that length


def ppo_at(sequence):
    d = plan_to_dict(ppo())
    return plan_from_dict({**d, "workload": {**d["workload"], "sequence_length": sequence}})


def test_a_ppo_server_engine_holds_gpus_of_its_own():
    """PPO's rollout engine as a server (OpenRLHF vllm_num_engines without colocate_all_models) is on GPUs of its
    own, as GRPO's: the job holds and pays for them, and one of them is estimated as the serving plan."""
    d = {
        "model": {"preset": "qwen2.5-0.5b"},
        "workload": {
            "task": "finetune",
            "objective": "ppo",
            "sequence_length": 1024,
            "micro_batch_size": 4,
            "global_batch_size": 32,
            "rl": {"engine": "server", "engine_gpus": 2, "num_generations": 1, "completion_length": 256},
        },
        "hardware": {"gpu": "h100-sxm-80gb", "count": 8},
    }
    plan = plan_from_dict(d)
    assert plan.total_gpus == 10
    assert estimate(plan, load_catalog()).engine is not None
