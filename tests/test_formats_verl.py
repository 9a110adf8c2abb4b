"""planner/formats/verl.py: verl main_ppo command lines read as grpo and ppo plans, verl's defaults named where
taken (volcengine/verl@b178a3c verl/trainer/config/_generated_ppo_trainer.yaml)."""

import pytest

from planner.errors import PlanError
from planner.formats import FORMATS, detect, plan_from_config, read_config
from planner.formats.base import get_key
from planner.plan.codec import plan_to_dict

# small command lines written for these tests
GRPO = """set -x
VLLM_USE_V1=1 python3 -m verl.trainer.main_ppo \\
    algorithm.adv_estimator=grpo \\
    data.train_batch_size=64 \\
    data.max_prompt_length=256 \\
    data.max_response_length=768 \\
    actor_rollout_ref.model.path=Qwen/Qwen2.5-3B \\
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \\
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \\
    actor_rollout_ref.actor.use_kl_loss=True \\
    actor_rollout_ref.actor.kl_loss_coef=0.01 \\
    actor_rollout_ref.actor.fsdp_config.param_offload=True \\
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=True \\
    actor_rollout_ref.rollout.n=8 \\
    actor_rollout_ref.rollout.gpu_memory_utilization=0.4 \\
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \\
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 \\
    trainer.project_name=mine \\
    trainer.n_gpus_per_node=4 $@
"""
PPO = (
    "python -m verl.trainer.main_ppo data.train_batch_size=512 actor_rollout_ref.actor.ppo_mini_batch_size=128 "
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 actor_rollout_ref.actor.ppo_epochs=2 "
    "critic.model.fsdp_config.param_offload=True critic.model.fsdp_config.optimizer_offload=True "
    "actor_rollout_ref.rollout.free_cache_engine=False algorithm.use_kl_in_reward=True +trainer.nnodes=2 "
    "actor_rollout_ref.model.enable_gradient_checkpointing=False some.new.key=3"
)


def _read(text):
    imported = read_config(text)
    return imported, {r.plan_key: (r.source, r.value) for r in imported.read}


def test_a_main_ppo_command_line_is_verl():
    assert detect(GRPO) is FORMATS["verl"]
    with pytest.raises(PlanError, match="is a config of verl: only `python -m verl.trainer.main_ppo`"):
        read_config("torchrun -m verl.trainer.fsdp_sft_trainer data.micro_batch_size_per_gpu=4\n")


def test_a_grpo_command_line_plans_its_values():
    imported, read = _read(GRPO)
    plan = plan_to_dict(plan_from_config(imported, gpu="h100-sxm-80gb"))
    expected = {
        "model.preset": "qwen2.5-3b",
        "workload.task": "finetune",
        "workload.objective": "grpo",
        "workload.sequence_length": 256 + 768,
        "workload.micro_batch_size": 4,
        "workload.global_batch_size": 16 * 8,  # ppo_mini_batch_size prompts × rollout.n completions
        "workload.rl.num_generations": 8,
        "workload.rl.completion_length": 768,
        "workload.rl.beta": 0.01,
        "workload.rl.engine": "colocate",
        "workload.rl.gpu_memory_utilization": 0.4,
        "workload.rl.tensor_parallel": 1,
        "workload.rl.sleep_level": 2,  # free_cache_engine's default true, vLLM >= 0.8.5
        "workload.rl.offload_during_rollout": True,
        "hardware.count": 4 * 1,
        "parallelism.data": 4,
        "parallelism.zero_stage": 3,
        "techniques.activation_checkpointing": "full",  # enable_gradient_checkpointing's default true
    }
    assert {key: get_key(plan, key) for key in expected} == expected
    assert read["hardware.count"][0] == (
        "trainer.n_gpus_per_node=4 × trainer.nnodes (absent: verl ppo_trainer.yaml's 1)"
    )
    assert (
        "a rollout of data.train_batch_size 64 prompts feeds 4 optimizer steps of 16: planned per optimizer step"
        in (imported.notes)
    )
    assert any(
        n.startswith("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8:") for n in imported.unmodelled
    )
    assert "trainer.project_name=mine" in imported.ignored
    assert imported.unknown == ()


def test_a_gae_command_line_is_ppo_with_verls_defaults_named():
    imported, read = _read(PPO)
    assert read["workload.objective"] == ("algorithm.adv_estimator (absent: verl ppo_trainer.yaml's gae)", "ppo")
    assert read["workload.sequence_length"] == (
        "data.max_prompt_length (absent: verl ppo_trainer.yaml's 512) + "
        "data.max_response_length (absent: verl ppo_trainer.yaml's 512)",
        1024,
    )
    assert read["workload.rl.num_generations"][1] == 1
    assert read["workload.global_batch_size"][1] == 128
    assert read["workload.ppo.mini_batches"][1] == 512 // 128
    assert read["workload.ppo.epochs"][1] == 2
    assert read["workload.ppo.critic_offload"][1] is True
    assert read["workload.ppo.reward"][1] == "rule"
    assert read["workload.rl.sleep_level"][1] == 0
    assert read["workload.rl.gpu_memory_utilization"][1] == 0.5
    assert read["workload.rl.tensor_parallel"][1] == 2
    assert read["workload.rl.beta"] == ("algorithm.kl_ctrl.kl_coef (absent: verl ppo_trainer.yaml's 0.001)", 0.001)
    assert read["hardware.count"][1] == 8 * 2
    assert read["techniques.activation_checkpointing"][1] == "none"
    assert imported.unknown == ("some.new.key=3",)
    assert imported.model_name == "" and "model" not in imported.plan  # the default ~/models path is not named
    with pytest.raises(PlanError, match="^model: the verl config names no model"):
        plan_from_config(imported, gpu="h100-sxm-80gb")


def test_lora_and_megatron_and_a_critic_free_estimator():
    text = (
        "python3 -m verl.trainer.main_ppo --config-name=ppo_megatron_trainer algorithm.adv_estimator=rloo "
        "actor_rollout_ref.model.lora_rank=32 actor_rollout_ref.rollout.n=4 "
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2 actor_rollout_ref.rollout.layered_summon=True"
    )
    imported, read = _read(text)
    assert imported.plan["framework"] == "megatron"
    assert read["workload.objective"][1] == "grpo"
    assert "algorithm.adv_estimator rloo: critic-free, a group per prompt; planned as grpo" in imported.notes
    assert (read["workload.task"][1], read["workload.lora.rank"][1], read["workload.lora.alpha"][1]) == ("lora", 32, 16)
    assert read["workload.lora.targets"][1] == ["q", "k", "v", "o", "gate", "up", "down"]
    assert (read["parallelism.tensor"][1], read["parallelism.pipeline"][1]) == (2, 1)
    assert read["parallelism.zero_stage"] == ("(verl ppo_megatron_trainer.yaml: use_distributed_optimizer true)", 1)
    assert read["workload.rl.sleep_level"][1] == 1
    assert read["workload.global_batch_size"][1] == 256 * 4


def test_a_mini_batch_that_does_not_divide_the_batch_and_an_unknown_estimator_are_refused():
    with pytest.raises(PlanError, match="must be a multiple of ppo_mini_batch_size 256"):
        read_config("python3 -m verl.trainer.main_ppo data.train_batch_size=300")
    with pytest.raises(PlanError, match="'dpo' is not a verl estimator|dpo is not a verl estimator"):
        read_config("python3 -m verl.trainer.main_ppo algorithm.adv_estimator=dpo")


def test_config_name_is_read_as_a_separate_word_too():
    imported, read = _read("python3 -m verl.trainer.main_ppo --config-name ppo_megatron_trainer trainer.nnodes=1")
    assert imported.plan["framework"] == "megatron"
    assert read["parallelism.zero_stage"][1] == 1
    assert (
        read["hardware.count"][0]
        == "trainer.n_gpus_per_node (absent: verl ppo_megatron_trainer.yaml's 8) × trainer.nnodes=1"
    )


def test_named_verl_without_its_command_is_refused():
    with pytest.raises(PlanError, match="is not a verl command line"):
        read_config("python train.py --lr 1e-5\n", format="verl")
