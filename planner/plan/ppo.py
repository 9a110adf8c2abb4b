"""PPO's own plan keys (workload.ppo, objective ppo): the value model, the reward model, the PPO loop's epochs and
mini-batches, and where the models that are not computing wait. The rollout engine and the KL coefficient are
workload.rl's (rl.beta is PPO's kl_coef). Defaults are TRL's PPOConfig (huggingface/trl@f2cd577
trl/experimental/ppo/ppo_config.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from planner.errors import bad
from planner.plan.models import presets
from planner.plan.validate import between, check_fields, text

# where the reward comes from: model (a frozen sequence-classification model with a score head: TRL
# PPOTrainer reward_model, OpenRLHF --reward.model_name_or_path, verl reward_model.enable) or rule (a function of
# the completion, no model on the GPU: OpenRLHF --reward.remote_url / reward_func, verl's default reward manager)
PpoReward = Literal["model", "rule"]
MAX_MINI_BATCHES = 4096


@dataclass(frozen=True, kw_only=True)
class Ppo:
    """PPO (workload.objective ppo): each iteration generates global_batch_size × mini_batches completions, scores
    them with the policy, the reference, the value model and the reward model, then trains the policy and the value
    model ppo_epochs times over mini_batches optimizer steps (trl@f2cd577 ppo_trainer.py train: `for ppo_epoch_idx
    in range(args.num_ppo_epochs)`, `for mini_batch_start in range(0, local_batch_size, local_mini_batch_size)`).
    workload.global_batch_size is one optimizer step's completions (TRL mini_batch_size)."""

    critic_model: str | None = field(default=None, metadata=text(100))
    """The value model's architecture, a preset id. Default: the policy's (TRL and OpenRLHF start the critic from the
    reward model or the SFT policy; verl `critic.model.path` defaults to the actor's)."""
    reward: PpoReward = "model"
    """Where the reward comes from: `model` (a frozen sequence-classification model with a score head: TRL
    PPOTrainer `reward_model`, OpenRLHF `--reward.model_name_or_path`, verl `reward_model.enable`) or `rule` (a
    function of the completion, no model on the GPU)."""
    reward_model: str | None = field(default=None, metadata=text(100))
    """The reward model's preset id. Default: the policy's architecture."""
    epochs: int = field(default=4, metadata=between(1, 1000))
    """Passes over each rollout batch (TRL `num_ppo_epochs` 4; OpenRLHF `--train.max_epochs` 1; verl `ppo_epochs`
    1)."""
    mini_batches: int = field(default=1, metadata=between(1, MAX_MINI_BATCHES))
    """Optimizer steps per epoch (TRL `num_mini_batches` 1; verl `train_batch_size / ppo_mini_batch_size`)."""
    critic_offload: bool = False
    """The value model's parameters and optimizer states wait in host memory outside its own passes (verl
    `critic.model.fsdp_config` `param_offload` and `optimizer_offload`)."""
    frozen_offload: bool = False
    """The reference's and reward model's weights wait in host memory, one layer brought in at a time in their
    forward (OpenRLHF `--ds.ref_reward_offload`: DeepSpeed offload_param; verl `ref.fsdp_config.param_offload`)."""

    def __post_init__(self) -> None:
        check_fields(self, "workload.ppo")
        for key in ("critic_model", "reward_model"):
            name = getattr(self, key)
            if name is not None and name not in presets():
                raise bad(f"workload.ppo.{key}", name, "must be a preset id (planner presets) or empty")
        if self.reward == "rule" and self.reward_model is not None:
            raise bad("workload.ppo.reward_model", self.reward_model, "needs workload.ppo.reward model, not rule")
