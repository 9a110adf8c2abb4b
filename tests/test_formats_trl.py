"""planner/formats/trl.py: the TRL trainer a config runs, its preference keys, and the trainers refused (issue 33),
through the hf_trainer and axolotl readers and writers."""

import pytest
import yaml

from planner.errors import PlanError
from planner.formats import axolotl, hf_trainer, round_trip, trl
from planner.plan.codec import plan_from_dict

MODEL = "--model_name_or_path Qwen/Qwen2.5-0.5B --per_device_train_batch_size 2 --max_length 2048"


def _workload(text):
    return hf_trainer.read(text).plan["workload"]


@pytest.mark.parametrize(
    "script,family",
    [
        ("examples/scripts/grpo_agent.py", "grpo"),
        ("trl/scripts/kto.py", "kto"),
        ("dpo", "dpo"),  # `trl dpo`
        ("trl/scripts/dpo", "dpo"),  # python -m trl.scripts.dpo
        ("examples\\scripts\\reward_modeling.py", "reward"),
    ],
)
def test_a_scripts_family_is_its_first_word(script, family):
    assert trl.family(script) == family


def test_dpo_script_with_peft_disables_the_adapters_for_its_reference():
    workload = _workload(f"python examples/scripts/dpo.py {MODEL} --use_peft")
    assert workload["objective"] == "preference"
    assert workload["preference"] == {"loss_type": "dpo", "reference": "adapters_disabled"}
    assert workload["task"] == "lora"


def test_dpo_full_fine_tune_loads_a_second_model_unless_precomputed():
    assert _workload(f"trl dpo {MODEL}")["preference"] == {"loss_type": "dpo", "reference": "separate"}
    precomputed = _workload(f"trl dpo {MODEL} --precompute_ref_log_probs --loss_type ipo")
    assert precomputed["preference"] == {"loss_type": "ipo", "reference": "precomputed"}


def test_a_yaml_with_dpo_keys_is_a_dpo_config_and_other_losses_cost_as_dpo():
    imported = hf_trainer.read("model_name_or_path: Qwen/Qwen2.5-0.5B\nbeta: 0.05\nloss_type: [sigmoid, bco_pair]\n")
    assert imported.plan["workload"]["preference"] == {"loss_type": "dpo", "reference": "separate"}
    assert any(r.source == "beta (a DPOConfig key)" and r.value == "preference" for r in imported.read)
    assert "loss_type: sigmoid+bco_pair: computed from the policy's and the reference's log-probabilities, as dpo" in (
        imported.unmodelled
    )
    # an SFTConfig loss_type (nll, dft) leaves it SFT
    assert "objective" not in _workload("model_name_or_path: Qwen/Qwen2.5-0.5B\nloss_type: dft\n")


def test_orpo_cpo_and_reward_scripts():
    orpo = _workload(f"python examples/scripts/orpo.py {MODEL} --beta 0.1")
    assert orpo["preference"] == {"loss_type": "orpo"}  # reference none: the plan's default for orpo
    cpo = _workload(f"python examples/scripts/cpo.py {MODEL}")
    assert cpo["preference"] == {"loss_type": "simpo"}
    assert _workload(f"python examples/scripts/reward_modeling.py {MODEL}")["objective"] == "reward"


@pytest.mark.parametrize(
    "script,why",
    [
        ("examples/scripts/grpo_agent.py", "online RL"),
        ("examples/scripts/gspo.py", "online RL"),
        ("examples/scripts/rloo_vlm.py", "online RL"),
        ("examples/scripts/gkd.py", "distillation"),
        ("examples/scripts/prm.py", "a process reward model"),
    ],
)
def test_trainers_the_plan_does_not_describe_are_refused_naming_issue_33(script, why):
    with pytest.raises(PlanError, match=f"^script: {script}: {why}.*issue 33"):
        hf_trainer.read(f"python {script} {MODEL}")


def test_an_unknown_dpo_loss_is_refused():
    with pytest.raises(PlanError, match="^--loss_type: wasserstein is not a DPOTrainer loss_type"):
        hf_trainer.read(f"trl dpo {MODEL} --loss_type wasserstein")


AXOLOTL = "base_model: Qwen/Qwen2.5-0.5B\nsequence_len: 1024\nmicro_batch_size: 2\n"


@pytest.mark.parametrize(
    "extra,preference",
    [
        ("rl: dpo\nadapter: lora\n", {"loss_type": "dpo", "reference": "adapters_disabled"}),
        ("rl: dpo\nadapter: lora\nrl_adapter_ref_model: true\n", {"loss_type": "dpo", "reference": "separate"}),
        ("rl: ipo\n", {"loss_type": "ipo", "reference": "separate"}),
        ("rl: dpo\nprecompute_ref_log_probs: true\n", {"loss_type": "dpo", "reference": "precomputed"}),
        ("rl: dpo\ndpo_loss_type: [ipo]\n", {"loss_type": "ipo", "reference": "separate"}),
        ("rl: simpo\n", {"loss_type": "simpo"}),
        ("rl: orpo\nadapter: lora\n", {"loss_type": "orpo"}),
        ("rl: kto\nadapter: lora\n", {"loss_type": "kto", "reference": "adapters_disabled"}),
    ],
)
def test_axolotl_rl_is_a_preference_plan(extra, preference):
    workload = axolotl.read(AXOLOTL + extra).plan["workload"]
    assert workload["objective"] == "preference" and workload["preference"] == preference


@pytest.mark.parametrize(
    "extra,message",
    [
        ("rl: grpo\n", "^rl: grpo: online RL"),
        ("rl: ebft\n", "^rl: ebft: energy-based fine-tuning"),
        ("process_reward_model: true\n", "^process_reward_model: a process reward model"),
    ],
)
def test_axolotl_rl_the_plan_does_not_describe_is_refused(extra, message):
    with pytest.raises(PlanError, match=message + ".*issue 33"):
        axolotl.read(AXOLOTL + extra)


def _plan(task, objective, preference=None):
    workload = {"task": task, "objective": objective, "sequence_length": 1024}
    if preference:
        workload["preference"] = preference
    return plan_from_dict({"model": {"preset": "qwen2.5-0.5b"}, "workload": workload})


@pytest.mark.parametrize(
    "plan",
    [
        _plan("lora", "preference", {"loss_type": "dpo"}),
        _plan("finetune", "preference", {"loss_type": "ipo", "reference": "precomputed"}),
        _plan("lora", "preference", {"loss_type": "dpo", "reference": "separate"}),
        _plan("qlora", "preference", {"loss_type": "orpo"}),
        _plan("finetune", "reward"),
    ],
)
def test_axolotl_round_trips_the_objective(plan):
    assert round_trip(plan, axolotl.FORMAT) == {}


def test_hf_trainer_writes_dpo_keys_and_refuses_what_only_a_script_says():
    written = yaml.safe_load(hf_trainer.write(_plan("finetune", "preference", {"reference": "precomputed"})))
    assert (written["beta"], written["loss_type"], written["precompute_ref_log_probs"]) == (0.1, "sigmoid", True)
    assert round_trip(_plan("lora", "preference"), hf_trainer.FORMAT) == {}
    with pytest.raises(PlanError, match="^workload.objective: 'reward' cannot be said"):
        hf_trainer.write(_plan("finetune", "reward"))
    with pytest.raises(PlanError, match="^workload.preference.loss_type: 'orpo' cannot be said"):
        hf_trainer.write(_plan("finetune", "preference", {"loss_type": "orpo"}))
    with pytest.raises(PlanError, match="^workload.preference.reference: 'separate' cannot be said"):
        hf_trainer.write(_plan("lora", "preference", {"reference": "separate"}))


@pytest.mark.parametrize(
    "args,preference",
    [
        ("", {"loss_type": "kto", "reference": "separate"}),
        (" --use_peft", {"loss_type": "kto", "reference": "adapters_disabled"}),
        (" --precompute_ref_log_probs", {"loss_type": "kto", "reference": "precomputed"}),
        (" --loss_type apo_zero_unpaired --desirable_weight 1.5", {"loss_type": "kto", "reference": "separate"}),
    ],
)
def test_trl_kto_script_is_a_kto_plan(args, preference):
    """trl/scripts/kto.py builds KTOTrainer: unpaired completions (huggingface/trl@f2cd577 kto_trainer.py)."""
    workload = _workload(f"python trl/scripts/kto.py {MODEL}{args}")
    assert workload["objective"] == "preference" and workload["preference"] == preference


def test_trl_kto_loss_type_is_checked():
    with pytest.raises(PlanError, match="is not a KTOTrainer loss_type"):
        _workload(f"python trl/scripts/kto.py {MODEL} --loss_type sigmoid")


def test_ppo_scripts_plan_ppo():
    """PPOTrainer (trl@f2cd577 trl/experimental/ppo): the policy is sft_model_path, the rollout its own generate,
    PPOConfig's defaults where silent; the plan's step is one of num_mini_batches mini-batches."""
    text = (
        "accelerate launch --num_processes 2 examples/scripts/ppo/ppo.py --sft_model_path Qwen/Qwen2.5-0.5B "
        "--per_device_train_batch_size 4 --gradient_accumulation_steps 4 --num_mini_batches 2 --response_length 64 "
        "--kl_coef 0.1"
    )
    wl = _workload(text)
    assert wl["objective"] == "ppo" and wl["sequence_length"] == 512 + 64
    assert wl["rl"] == {"engine": "generate", "num_generations": 1, "completion_length": 64, "beta": 0.1}
    assert wl["ppo"] == {"epochs": 4, "mini_batches": 2}
    assert wl["global_batch_size"] == 4 * 4 * 2 // 2
