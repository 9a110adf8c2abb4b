"""planner/formats/openrlhf.py: OpenRLHF train_sft, train_dpo, train_rm and train_ppo_ray command lines read as
plans, OpenRLHF's defaults named where taken (OpenRLHF/OpenRLHF@3c3be623 openrlhf/cli/*.py, @c1ba971c for the flat
flags). The command lines are the project's own (tests/data/configs/openrlhf/SOURCES.md)."""

import pytest
from conftest import ROOT

from planner.errors import PlanError
from planner.formats import FORMATS, detect, plan_from_config, read_config
from planner.formats.base import get_key
from planner.plan.codec import plan_to_dict

DATA = ROOT / "tests" / "data" / "configs" / "openrlhf"
GPU = "h100-sxm-80gb"


def _plan(name):
    imported = read_config((DATA / name).read_text())
    plan = plan_to_dict(plan_from_config(imported, gpu=GPU))
    return imported, plan, {r.plan_key: r.source for r in imported.read}


def _expect(plan, expected):
    assert {key: get_key(plan, key) for key in expected} == expected


def test_each_entry_point_is_openrlhf_and_others_are_refused_by_name():
    for path in sorted(DATA.glob("*.sh")):
        assert detect(path.read_text()) is FORMATS["openrlhf"], path.name
    with pytest.raises(PlanError) as caught:
        read_config("deepspeed --module openrlhf.cli.train_kto --pretrain meta-llama/Llama-3.1-8B\n")
    assert str(caught.value) == (
        "config: is a config of OpenRLHF: only its train_sft, train_dpo, train_rm and train_ppo_ray command lines "
        "are read (not train_kto, train_prm, train_kd, ...)"
    )


def test_sft_lora_in_a_heredoc_takes_the_launchers_gpus():
    imported, plan, sources = _plan("sft_lora.sh")
    _expect(
        plan,
        {
            "framework": "deepspeed",
            "model.preset": "llama-3.1-8b",
            "workload.task": "lora",
            "workload.sequence_length": 4096,
            "workload.micro_batch_size": 2,
            "workload.global_batch_size": 64,
            "workload.lora.rank": 32,
            "workload.lora.alpha": 64.0,
            "workload.lora.targets": ["q", "k", "v", "o", "gate", "up", "down"],
            "parallelism.zero_stage": 3,
            "precision.compute": "bf16",
            "techniques.activation_checkpointing": "full",
            "techniques.offload": "none",
            "hardware.count": 4,
        },
    )
    assert sources["workload.objective"] == "(the entry point openrlhf.cli.train_sft)"
    assert sources["workload.lora.targets"] == (
        "--ds.lora.target_modules (absent: OpenRLHF's default all-linear, OpenRLHF@3c3be623 openrlhf/cli/train_sft.py)"
    )
    assert "--ds.packing_samples" in imported.ignored and "--adam.lr 2e-5" in imported.ignored
    assert not imported.unknown and not imported.unmodelled


def test_dpo_in_flat_flags_is_ipo_with_a_separate_reference():
    imported, plan, sources = _plan("dpo_flat.sh")
    _expect(
        plan,
        {
            "model.preset": "qwen2.5-7b",
            "workload.task": "finetune",
            "workload.objective": "preference",
            "workload.preference.loss_type": "ipo",
            "workload.preference.reference": "separate",
            "workload.preference.log_probs": "upcast",  # Actor.forward casts the logits to fp32
            "workload.sequence_length": 2048,
            "workload.micro_batch_size": 1,
            "workload.global_batch_size": 128,
            "techniques.offload": "optimizer",
            "parallelism.zero_stage": 3,
        },
    )
    assert sources["techniques.attention"].endswith("OpenRLHF@c1ba971c openrlhf/cli/train_dpo.py)")
    assert "--ref_offload: the reference's weights in host memory: planned on the GPU" in imported.unmodelled
    assert {"--beta 0.1", "--learning_rate 5e-7", "--dataset my/pairs"} <= set(imported.ignored)


def test_rm_takes_openrlhfs_defaults_and_names_them():
    imported, plan, sources = _plan("rm.sh")
    _expect(
        plan,
        {
            "workload.objective": "reward",
            "workload.sequence_length": 512,
            "workload.micro_batch_size": 1,
            "workload.global_batch_size": 128,
        },
    )
    for key, default in (("sequence_length", 512), ("micro_batch_size", 1), ("global_batch_size", 128)):
        assert (
            f"(absent: OpenRLHF's default {default}, OpenRLHF@3c3be623 openrlhf/cli/train_rm.py)"
            in sources[f"workload.{key}"]
        )


def test_ppo_colocated_with_both_sleeps():
    imported, plan, sources = _plan("ppo_hybrid.sh")
    _expect(
        plan,
        {
            "workload.objective": "ppo",
            "workload.sequence_length": 3072,
            "workload.rl.completion_length": 2048,
            "workload.rl.num_generations": 2,
            "workload.micro_batch_size": 4,
            "workload.global_batch_size": 128,
            # 512 prompts × 2 samples ÷ 128 a step
            "workload.ppo.mini_batches": 8,
            "workload.ppo.epochs": 1,
            "workload.ppo.reward": "model",
            "workload.ppo.reward_model": "llama-3.2-1b",
            "workload.ppo.critic_model": "llama-3.2-1b",  # train_ppo_ray.py: the critic starts from the reward model
            "workload.ppo.critic_offload": True,
            "workload.ppo.frozen_offload": False,
            "workload.rl.engine": "colocate",
            "workload.rl.gpu_memory_utilization": 0.5,
            "workload.rl.tensor_parallel": 2,
            "workload.rl.sleep_level": 1,  # vllm_engine.py sleep(level=1)
            "workload.rl.offload_during_rollout": True,
            "workload.rl.beta": 0.01,
            "hardware.count": 8,
        },
    )
    assert sources["workload.objective"].startswith("--algo.advantage.estimator (absent: OpenRLHF's default gae")
    assert sources["workload.ppo.frozen_offload"].startswith("--ref.offload (absent")
    assert not imported.unknown and not imported.unmodelled


def test_grpo_in_flat_flags_with_a_server_engine_and_no_reference():
    imported, plan, _ = _plan("grpo_flat.sh")
    _expect(
        plan,
        {
            "workload.objective": "grpo",
            "workload.rl.num_generations": 8,
            "workload.sequence_length": 4096,
            "workload.rl.completion_length": 3072,
            "workload.global_batch_size": 256,
            "workload.rl.engine": "server",
            "workload.rl.engine_gpus": 4,
            "workload.rl.tensor_parallel": 2,
            "workload.rl.async_rollout": True,
            "workload.rl.beta": 0.0,
            "techniques.offload": "optimizer",
            "parallelism.zero_stage": 2,
            "hardware.count": 4,
        },
    )
    assert "--remote_rm_url http://localhost:5000/get_reward" in imported.ignored
    assert not imported.unknown and not imported.unmodelled


PPO = "python3 -m openrlhf.cli.train_ppo_ray --pretrain meta-llama/Llama-3.1-8B --vllm_num_engines 8 "


def test_a_response_without_max_new_tokens_and_separate_groups_are_named():
    imported = read_config(PPO + "--reward_pretrain meta-llama/Llama-3.1-8B\n")
    read = {r.plan_key: (r.source, r.value) for r in imported.read}
    # --max_len 2048 (OpenRLHF's default) less an assumed 512-token prompt
    assert read["workload.rl.completion_length"] == (
        "--max_new_tokens (absent: OpenRLHF's None, each response up to --max_len less its prompt; the planner "
        "assumes a 512-token prompt)",
        1536,
    )
    assert read["workload.rl.engine"][1] == "server"
    assert read["workload.ppo.reward"][1] == "model" and "workload.ppo.reward_model" not in read
    notes = [note.split(": ", 1)[1] for note in imported.unmodelled]
    assert notes == [
        f"{what} on GPUs of its own: planned on the actor's GPUs (an upper bound there)"
        for what in ("the reference", "the critic", "the reward model")
    ]


def test_legacy_lengths_and_bf16_are_read():
    imported = read_config(
        PPO + "--prompt_max_len 512 --generate_max_len 1536 --bf16 --flash_attn --colocate_all_models "
        "--remote_rm_url http://r --vllm_enable_sleep\n"
    )
    read = {r.plan_key: r.value for r in imported.read}
    assert (read["workload.sequence_length"], read["workload.rl.completion_length"]) == (2048, 1536)
    assert (read["precision.compute"], read["techniques.attention"], read["workload.ppo.reward"]) == (
        "bf16",
        "flash",
        "rule",
    )


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (
            "python3 -m openrlhf.cli.train_ppo_ray --pretrain meta-llama/Llama-3.1-8B --remote_rm_url x\n",
            "--vllm_num_engines: unset or 0: OpenRLHF's rollout generates on vLLM engines only "
            "(ppo_utils/samples_generator.py); name their count",
        ),
        (PPO + "\n", "--reward_pretrain: is required for gae without --remote_rm_url: no reward"),
        (
            PPO + "--remote_rm_url x --advantage_estimator reinforce\n",
            "--n_samples_per_prompt (absent: OpenRLHF's default 1, OpenRLHF@c1ba971c openrlhf/cli/train_ppo_ray.py): "
            "1 with --advantage_estimator reinforce: a critic-free plan (grpo) samples 2 or more per prompt",
        ),
        (
            PPO + "--remote_rm_url x --colocate_all_models --vllm_tensor_parallel_size 2\n",
            "--vllm_num_engines 8: 8 × --vllm_tensor_parallel_size 2 must equal the actor's 8 GPUs with "
            "--colocate_all_models",
        ),
        (
            PPO + "--remote_rm_url x --advantage_estimator grpo\n",
            "--advantage_estimator grpo: 'grpo' is not one of: gae, reinforce, rloo, reinforce_baseline, "
            "group_norm, dr_grpo",
        ),
        (
            "deepspeed --module openrlhf.cli.train_sft --pretrain meta-llama/Llama-3.1-8B --flash_attn\n",
            "--flash_attn: True marks an OpenRLHF command of before 2026-01 (cd7a434f), which trains in fp32 without "
            "--bf16: not planned; give --bf16 or --param_dtype",
        ),
        (
            "deepspeed --module openrlhf.cli.train_sft --pretrain meta-llama/Llama-3.1-8B --load_in_4bit\n",
            "--load_in_4bit: True needs --lora_rank > 0: a 4-bit model trains only adapters",
        ),
    ],
)
def test_what_the_plan_cannot_say_is_refused_naming_the_flag(command, message):
    with pytest.raises(PlanError) as caught:
        read_config(command)
    assert str(caught.value) == message
