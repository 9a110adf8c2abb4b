"""PPO's time beside the policy's step (workload.objective ppo), per optimizer step: the experience passes (a
no-grad forward of the policy, the reference, the value and the reward model over each rollout, shared by the
ppo.epochs × ppo.mini_batches steps it feeds: each completion is scored once and trained on `epochs` times,
huggingface/trl@f2cd577 trl/experimental/ppo/ppo_trainer.py train) and the value model's update (its forward and
backward over the step's sequences, run after the policy's: OpenRLHF/OpenRLHF@3c3be62
openrlhf/trainer/ppo_trainer.py, volcengine/verl@b178a3c verl/trainer/ppo/ray_trainer.py fit). Both are scaled
from the policy's own compute time by the models' FLOPs per token; a forward is a third of a training pass
(backward ≈ 2 × forward: Kaplan et al. 2020, the 6N vs 2N FLOPs per token)."""

from __future__ import annotations

from planner.memory.ppo import companion_plan
from planner.perf.flops import model_flops_per_token
from planner.perf.result import TimeItem
from planner.plan.config import Plan

FORWARD_SHARE = 1 / 3  # a forward's share of a training pass: 2N of 6N FLOPs per token (Kaplan et al. 2020)


def ppo_items(plan: Plan, compute_s: float) -> list[TimeItem]:
    """The experience passes and the value model's update of one optimizer step, from `compute_s` (the policy's
    forward and backward time of the step). Empty unless the plan is ppo."""
    wl = plan.workload
    if wl.objective != "ppo":
        return []
    ppo, policy = wl.ppo, model_flops_per_token(plan)
    critic = model_flops_per_token(companion_plan(plan, ppo.critic_model)) / policy
    forwards = [("policy", 1.0)] if wl.rl.engine != "generate" else []  # TRL reads generate's scores
    forwards += [("reference", 1.0)] if wl.reference != "none" else []
    forwards += [("value", critic)]
    forwards += [("reward", model_flops_per_token(companion_plan(plan, ppo.reward_model)) / policy)] * (
        ppo.reward == "model"
    )
    ratio = sum(r for _, r in forwards)
    experience = compute_s * FORWARD_SHARE * ratio / ppo.epochs
    names = " + ".join(f"{n} {r:.3g}" for n, r in forwards)
    return [
        TimeItem(
            name="experience",
            label="Experience (no-grad forwards)",
            kind="compute",
            seconds=experience,
            hidden_s=0.0,
            formula=f"{compute_s:.4g} s × 1/3 (a forward) × ({names}) ÷ {ppo.epochs} epochs",
            note="each completion scored once per rollout, trained on once per epoch",
        ),
        TimeItem(
            name="value_update",
            label="Value model update",
            kind="compute",
            seconds=compute_s * critic,
            hidden_s=0.0,
            formula=f"{compute_s:.4g} s × {critic:.3g} (value model's FLOPs per token ÷ the policy's)",
            note="after the policy's update, not overlapped",
        ),
    ]
