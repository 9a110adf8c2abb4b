"""PPO (workload.objective ppo): four models on the policy's GPUs, in phases that do not peak together. The policy
is trained; the value model (critic, a score head in place of the vocabulary head) is trained; the reference
(none when rl.beta is 0, the policy's base with adapters off under LoRA) and the reward model (a score head; none
with a rule-based reward) are frozen. All four share the training GPUs, as OpenRLHF's --train.colocate_all and
verl's hybrid engine place them (OpenRLHF/OpenRLHF@3c3be62 openrlhf/cli/train_ppo_ray.py: actor, ref, critic and
reward groups in one placement group, `num_gpus_per_actor=0.2`; volcengine/verl@b178a3c
verl/trainer/config/ppo_trainer.yaml) and TRL's PPOTrainer does (one process per GPU holding all four:
huggingface/trl@f2cd577 trl/experimental/ppo/ppo_trainer.py). An iteration: the rollout (a colocated vLLM engine
as GRPO's, planner/memory/rollout.py, or TRL's own generate), experience making (a no-grad forward of each model
over the completions: log-probs, reference log-probs, values, scores; trl@f2cd577 ppo_trainer.py train, under
`torch.no_grad()`), then the policy's and the value model's updates, one after the other (OpenRLHF
openrlhf/trainer/ppo_trainer.py, verl ray_trainer.py fit: update_critic, then update_actor).

Precision and sharding: the value model is trained like the policy (its plan's precision, ZeRO stage and task:
OpenRLHF's one --ds.zero_stage and --ds.lora.rank build both); the frozen models are in the plan's frozen-weights
dtype, sharded under ZeRO-3 / FSDP and whole on each rank otherwise (OpenRLHF openrlhf/utils/deepspeed/
deepspeed.py get_ds_eval_config: `stage=self.stage if self.stage == 3 else 0`; TRL prepare_deepspeed likewise)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from planner.memory.checkpointing import Kept, saved
from planner.memory.inference import kv_bytes_per_token
from planner.memory.layout import Layout, StageContext, score_layout, stage_context
from planner.memory.optimizers import optimizer, trainable
from planner.memory.preference import frozen_weights, logprob_forward, reference_forward, reference_weights
from planner.memory.result import Item, Phase, phase
from planner.memory.rollout import Engine, weight_sync
from planner.memory.states import States, model_states
from planner.memory.terms import Described, item
from planner.plan.config import Plan, Rl
from planner.plan.models import presets
from planner.plan.ppo import Ppo

# bytes of one logit HF generate keeps per generated token: `next_token_logits = outputs.logits[:, -1, :].to(
# copy=True, dtype=torch.float32)` (huggingface/transformers src/transformers/generation/utils.py _sample), stacked
# into output.scores, which TRL's generate returns (trl@f2cd577 ppo_trainer.py generate: `output_scores=True`)
_SCORE_BYTES = 4
# the items a model needs on the GPU for a forward when offloaded otherwise (its weights, its adapters)
_FORWARD_STATES = ("weights", "adapters")

StepOf = Callable[[Plan, Layout], Phase]  # a plan's training step on its cut: its peak phase


@dataclass(frozen=True, kw_only=True)
class Companion:
    """The value or reward model beside the policy: its stage context (its own model, a score head)."""

    ctx: StageContext
    role: str  # "critic" or "reward"


def companion_plan(plan: Plan, preset: str | None) -> Plan:
    """A companion model as its own next-token plan (the score head comes from its cut, score_layout): the named
    preset's architecture or the policy's, the policy's precision, parallelism and task."""
    model = presets()[preset].model if preset else plan.model
    return replace(plan, model=model, workload=replace(plan.workload, objective="next_token", rl=Rl(), ppo=Ppo()))


def companion(plan: Plan, role: str, detail: bool) -> Companion | None:
    """The value model ("critic") or the reward model ("reward"; None with a rule-based reward) of a ppo plan."""
    ppo = plan.workload.ppo
    if plan.workload.objective != "ppo" or (role == "reward" and ppo.reward == "rule"):
        return None
    return Companion(
        ctx=_companion_ctx(plan, ppo.critic_model if role == "critic" else ppo.reward_model, detail), role=role
    )


def _companion_ctx(plan: Plan, preset: str | None, detail: bool) -> StageContext:
    cp = companion_plan(plan, preset)
    return stage_context(cp, score_layout(cp), 0, detail)


def _renamed(items: tuple[Item, ...], role: str) -> tuple[Item, ...]:
    label = "Value model" if role == "critic" else "Reward model"
    return tuple(replace(i, name=f"{role}_{i.name}", label=f"{label}: {i.label}") for i in items)


def critic_states(c: Companion) -> tuple[Item, ...]:
    """The value model's weights, master weights and optimizer states (its model_states), renamed critic_*."""
    lay = c.ctx.layout
    st = model_states(c.ctx, trainable(lay, 0), optimizer(lay, 0, c.ctx.plan.precision))
    # one process per GPU shares its cuBLAS workspace (TRL; OpenRLHF's colocated actors are counted the same)
    return _renamed(tuple(i for i in st.static if i.name != "cublas_workspace"), "critic")


def reward_weights(plan: Plan, c: Companion | None) -> Item | None:
    """The reward model's frozen weights on the GPU (None with a rule-based reward, or in host memory)."""
    if c is None or plan.workload.ppo.frozen_offload:
        return None
    return frozen_weights(c.ctx, "reward_weights", "Reward model (frozen)", "The reward model, a score head")


def resident(ctx: StageContext, critic: Companion | None, reward: Companion | None) -> tuple[Item, ...]:
    """What the value and reward models hold on the GPU through the policy's update: the critic's states unless
    ppo.critic_offload (verl critic.model.fsdp_config param_offload / optimizer_offload move them to the host
    after its update: verl@b178a3c verl/workers/fsdp_workers.py CriticWorker update_critic), the reward model's
    weights unless ppo.frozen_offload. Empty for other objectives."""
    if critic is None:
        return ()
    kept = () if ctx.plan.workload.ppo.critic_offload else critic_states(critic)
    return tuple(i for i in (*kept, reward_weights(ctx.plan, reward)) if i is not None)


def _score_forward(c: Companion) -> Item:
    """A score-head model's no-grad forward: one layer's intermediates (freed layer by layer), then the last
    hidden states the score head reads, T × h (values per token, or one score per sequence)."""
    ctx, m = c.ctx, c.ctx.plan.model
    kept = saved(ctx).kept
    hidden = ctx.tokens * m.hidden_size * ctx.bc
    term = Described(
        kept.full_layer + hidden,
        "one layer's activations {:,} + T {:,} × h {:,} × {} B (last hidden states)",
        (kept.full_layer, ctx.tokens, m.hidden_size, ctx.bc),
    )
    what = "values per token" if c.role == "critic" else "the sequence's score"
    label = "Value forward (no grad)" if c.role == "critic" else "Reward forward (no grad)"
    return item(f"{c.role}_forward", label, term, f"No-grad forward over the completions for {what}", ctx.detail)


def _offloaded_layer(ctx: StageContext, what: str, offloaded: bool) -> Item | None:
    """One layer of an offloaded frozen model (`ctx`: its stage) brought in for its forward (DeepSpeed
    offload_param / FSDP CPUOffload copy a unit in as it is used)."""
    if not offloaded:
        return None
    term = Described(ctx.sp.layer * ctx.bc, "largest layer {:,} params × {} B", (ctx.sp.layer, ctx.bc))
    return item(f"{what}_layer", f"{what.capitalize()}: layer brought in", term, "From host memory", ctx.detail)


def _generate(ctx: StageContext) -> tuple[Item, ...]:
    """TRL's rollout with the policy's own Hugging Face generate (rl.engine generate): under ZeRO-3 the whole
    policy gathered for generation (trl@f2cd577 ppo_config.py ds3_gather_for_generation True:
    unwrap_model_for_generation gathers every parameter), the KV cache of one chunk of micro_batch_size sequences
    (batch_generation runs local_rollout_forward_batch_size at a time), and the scores of every completion of the
    GPU's rollout kept in fp32 until the log-probs are taken (batch_generation appends each chunk's logits)."""
    plan, sp, bc = ctx.plan, ctx.sp, ctx.bc
    wl = plan.workload
    gathered = None
    if plan.parallelism.zero_stage == 3:
        term = Described(sp.total * bc, "{:,} params × {} B (the whole policy)", (sp.total, bc))
        gathered = item(
            "generate_weights", "Policy gathered for generate", term, "ds3_gather_for_generation", ctx.detail
        )
    per_token = kv_bytes_per_token(plan)
    kv = Described(
        wl.micro_batch_size * wl.sequence_length * per_token,
        "{} sequences × {:,} tokens × {:,} B per token",
        (wl.micro_batch_size, wl.sequence_length, per_token),
    )
    rows = -(-wl.rollout_samples // plan.hardware.count)
    vocab = -(-plan.model.vocab_size // plan.parallelism.tensor)
    scores = Described(
        rows * wl.rl.completion_length * vocab * _SCORE_BYTES,
        "{:,} completions × {:,} tokens × V {:,} × {} B (fp32)",
        (rows, wl.rl.completion_length, vocab, _SCORE_BYTES),
    )
    return tuple(
        i
        for i in (
            gathered,
            item("generate_kv", "Generate: KV cache", kv, "HF generate's cache for one chunk", ctx.detail),
            item("generate_scores", "Generate: kept scores", scores, "output_scores of the GPU's rollout", ctx.detail),
        )
        if i is not None
    )


def _policy_forward(st: States, offloaded: bool) -> tuple[Item, ...]:
    """The policy's states during a pass of its own that trains nothing: its weights (and adapters) when its
    states wait in host memory otherwise (verl compute_log_prob loads the parameters only)."""
    return tuple(i for i in st.static if i.name in _FORWARD_STATES) if offloaded else st.static


@dataclass(frozen=True, kw_only=True)
class _Held:
    """What waits on the GPU while another model computes: the policy's states (none with
    rl.offload_during_rollout), the value model's (none with ppo.critic_offload), the frozen models' weights, and
    what a sleeping engine keeps."""

    policy: tuple[Item, ...]
    critic: tuple[Item, ...]
    frozen: tuple[Item | None, ...]
    asleep: tuple[Item, ...]


def _rollout(ctx: StageContext, st: States, eng: Engine | None, held: _Held) -> list[Phase]:
    """The generation phase on the training GPUs: TRL's generate, a colocated engine awake, or none (a server)."""
    if ctx.plan.workload.rl.engine == "generate":
        desc = "the policy's own generate: its KV cache and the kept scores beside every model's resident states"
        return [phase("rollout", desc, *st.static, *held.critic, *held.frozen, *_generate(ctx))]
    if eng is None:
        return []
    desc = "the engine awake: its weights and KV cache at its memory fraction beside the models' resident states"
    return [phase("rollout", desc, *held.policy, *held.critic, *held.frozen, *eng.awake, weight_sync(ctx))]


def _experience(
    ctx: StageContext, st: States, kept: Kept, models: tuple[Companion, Companion | None], held: _Held
) -> list[Phase]:
    """One phase per no-grad forward over the completions, each beside what the other models keep."""
    wl = ctx.plan.workload
    critic, reward = models
    offload = wl.ppo.frozen_offload
    rest = (*held.frozen, *held.asleep)
    out = []
    if wl.rl.engine != "generate":  # TRL takes the log-probs from generate's scores
        fwd = logprob_forward(ctx, kept, "policy_forward", "Policy log-probs (no grad)", "Old log-probs")
        policy = _policy_forward(st, wl.rl.offload_during_rollout)
        out.append(
            phase("experience: policy log-probs", "the policy's no-grad forward", *policy, *held.critic, *rest, fwd)
        )
    ref = reference_forward(ctx, kept)
    if ref is not None:
        layer = _offloaded_layer(ctx, "reference", offload)
        out.append(
            phase(
                "experience: reference log-probs",
                "the frozen reference's no-grad forward",
                *held.policy,
                *held.critic,
                *rest,
                layer,
                ref,
            )
        )
    own = held.critic or tuple(i for i in critic_states(critic) if i.name.removeprefix("critic_") in _FORWARD_STATES)
    out.append(
        phase(
            "experience: values", "the value model's no-grad forward", *held.policy, *rest, *own, _score_forward(critic)
        )
    )
    if reward is not None:
        layer = _offloaded_layer(reward.ctx, "reward", offload)
        out.append(
            phase(
                "experience: reward",
                "the reward model's no-grad forward",
                *held.policy,
                *held.critic,
                *rest,
                layer,
                _score_forward(reward),
            )
        )
    return out


def phases(ctx: StageContext, st: States, eng: Engine | None, kept: Kept, step_of: StepOf) -> list[Phase]:
    """PPO's moments outside the policy's update (`step_of`: a plan's training step, for the value model's)."""
    plan = ctx.plan
    wl = plan.workload
    critic = Companion(ctx=_companion_ctx(plan, wl.ppo.critic_model, ctx.detail), role="critic")
    reward = companion(plan, "reward", ctx.detail)
    held = _Held(
        policy=() if wl.rl.offload_during_rollout else st.static,
        critic=() if wl.ppo.critic_offload else critic_states(critic),
        frozen=(reference_weights(ctx), reward_weights(plan, reward)),
        asleep=eng.asleep if eng else (),
    )
    out = _rollout(ctx, st, eng, held) + _experience(ctx, st, kept, (critic, reward), held)
    peak = step_of(critic.ctx.plan, critic.ctx.layout)
    desc = f"the value model's update at its {peak.name}, beside the policy's resident states"
    own = _renamed(tuple(i for i in peak.items if i.name != "cublas_workspace"), "critic")
    out.append(phase(f"value update: {peak.name}", desc, *held.policy, *held.frozen, *held.asleep, *own))
    return out
