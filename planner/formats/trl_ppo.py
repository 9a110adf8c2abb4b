"""TRL's PPOTrainer (examples/scripts/ppo/ppo.py, ppo_tldr.py) as a ppo plan: the policy is sft_model_path (the
scripts load the tokenizer from model_name_or_path), the value and reward models are reward_model_path, and the
rollout is the policy's own generate. Sources: huggingface/trl@f2cd577 trl/experimental/ppo/ppo_config.py (defaults:
response_length 53, num_ppo_epochs 4, num_mini_batches 1, kl_coef 0.05, sft_model_path and reward_model_path
EleutherAI/pythia-160m) and trl/experimental/ppo/ppo_trainer.py (batch_size = per_device_train_batch_size ×
gradient_accumulation_steps × world, mini_batch_size = batch_size / num_mini_batches, one optimizer step each)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from planner.formats.base import resolve_model
from planner.formats.reading import Reading, as_int, as_number

PPO_DEFAULT_MODEL = "EleutherAI/pythia-160m"  # PPOConfig sft_model_path and reward_model_path
PPO_PROMPT = 512  # PPOConfig has no prompt length: the planner's assumption, as for GRPO (hf_trainer.GRPO_PROMPT)
PPO_DEFAULTS = {"response_length": 53, "num_ppo_epochs": 4, "num_mini_batches": 1, "kl_coef": 0.05}
PPO_KEYS = frozenset({*PPO_DEFAULTS, "sft_model_path", "reward_model_path", "local_rollout_forward_batch_size"})


def read_ppo(led: Reading, values: dict[str, Any], name: Callable[[str], str], script: str) -> None:
    """A PPOConfig's keys into workload.objective ppo, workload.rl (engine generate, one completion per prompt) and
    workload.ppo, at PPOConfig's defaults where absent."""
    rl, ppo = "workload.rl.", "workload.ppo."

    def src(key: str) -> str:
        return name(key) if key in values else f"(PPOConfig's default {key} {PPO_DEFAULTS[key]})"

    def get(key: str) -> Any:
        return values.get(key, PPO_DEFAULTS[key])

    led.set(f"(the script {script})", "workload.objective", "ppo")
    led.set(f"(the script {script}: PPOTrainer generates with the policy)", rl + "engine", "generate")
    led.set(f"(the script {script}: one response per query)", rl + "num_generations", 1)
    policy = values.get("sft_model_path", PPO_DEFAULT_MODEL)
    source = name("sft_model_path") if "sft_model_path" in values else f"(PPOConfig's sft_model_path {policy})"
    led.model_name.clear()
    led.model(source, str(policy))
    response = as_int(src("response_length"), get("response_length"), 1)
    led.set(src("response_length"), rl + "completion_length", response)
    led.set(f"(no prompt length: {PPO_PROMPT})", "workload.sequence_length", PPO_PROMPT + response)
    led.set(src("kl_coef"), rl + "beta", as_number(src("kl_coef"), get("kl_coef"), 0.0))
    led.set(src("num_ppo_epochs"), ppo + "epochs", as_int(src("num_ppo_epochs"), get("num_ppo_epochs")))
    minis = as_int(src("num_mini_batches"), get("num_mini_batches"))
    led.set(src("num_mini_batches"), ppo + "mini_batches", minis)
    if "local_rollout_forward_batch_size" in values:
        led.note(name("local_rollout_forward_batch_size"), "the no-grad passes are planned at the micro-batch")
    glob = led.plan.get("workload", {}).get("global_batch_size")
    if glob is not None and minis > 1:  # the plan's step is one mini-batch
        led.set(name("num_mini_batches"), "workload.global_batch_size", glob // minis)
    reward = values.get("reward_model_path", PPO_DEFAULT_MODEL)
    found = resolve_model(str(reward))
    if found is not None and found.preset != led.plan.get("model", {}).get("preset"):
        led.set(name("reward_model_path"), ppo + "critic_model", found.preset)
        led.set(name("reward_model_path"), ppo + "reward_model", found.preset)
    else:
        led.note(name("reward_model_path"), f"{reward}: value and reward models planned with the policy's architecture")
