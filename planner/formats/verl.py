"""verl's RL trainer launched on a command line (`python3 -m verl.trainer.main_ppo key=value ...`: Hydra overrides of
verl/trainer/config/ppo_trainer.yaml, or ppo_megatron_trainer.yaml with --config-name) as a grpo or ppo plan. Read
only: a plan is not written back as a verl command line; verl's YAML configs and its other entry points
(fsdp_sft_trainer, main_generation) stay refused by name (planner/formats/unread.py).

Sources, volcengine/verl@b178a3c (2026-01-29): verl/trainer/config/_generated_ppo_trainer.yaml and
_generated_ppo_megatron_trainer.yaml (every default below, each named where a plan takes it); verl/trainer/ppo/
utils.py (need_critic: a value model only for adv_estimator gae unless critic.enable; need_reference_policy: a
reference only where use_kl_loss or use_kl_in_reward); verl/workers/config/actor.py (ppo_mini_batch_size counts
prompts, × rollout.n completions per optimizer step); verl/workers/rollout/vllm_rollout/vllm_rollout.py and
verl/third_party/vllm/__init__.py (free_cache_engine sleeps the engine at level 2 on vLLM >= 0.8.5, level 1 with
layered_summon); verl/trainer/ppo/core_algos.py (AdvantageEstimator: gae and the critic-free estimators).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from planner.errors import PlanError, bad
from planner.formats.base import Document, Format, Imported, document
from planner.formats.hf_trainer import ALL_LINEAR
from planner.formats.reading import Reading, as_bool, as_int, as_number
from planner.formats.shell import environment, lines, words

COMMAND = re.compile(r"\bverl\.trainer\.main_ppo\b")
YAML = "ppo_trainer.yaml"
# verl@b178a3c verl/trainer/config/_generated_ppo_trainer.yaml: the value each key takes where the command is silent
ACTOR, ROLLOUT, ARR = "actor_rollout_ref.actor.", "actor_rollout_ref.rollout.", "actor_rollout_ref."
DEFAULTS: dict[str, Any] = {
    "algorithm.adv_estimator": "gae",
    "data.train_batch_size": 1024,
    "data.max_prompt_length": 512,
    "data.max_response_length": 512,
    ROLLOUT + "n": 1,
    ROLLOUT + "gpu_memory_utilization": 0.5,
    ROLLOUT + "tensor_model_parallel_size": 2,
    ROLLOUT + "free_cache_engine": True,
    ROLLOUT + "layered_summon": False,
    ACTOR + "ppo_mini_batch_size": 256,
    ACTOR + "ppo_epochs": 1,
    ACTOR + "use_kl_loss": False,
    ACTOR + "kl_loss_coef": 0.001,
    ACTOR + "fsdp_config.param_offload": False,
    ACTOR + "fsdp_config.optimizer_offload": False,
    ACTOR + "megatron.tensor_model_parallel_size": 1,
    ACTOR + "megatron.pipeline_model_parallel_size": 1,
    ARR + "ref.fsdp_config.param_offload": False,
    ARR + "model.enable_gradient_checkpointing": True,
    ARR + "model.lora_rank": 0,
    ARR + "model.lora_alpha": 16,
    "algorithm.use_kl_in_reward": False,
    "algorithm.kl_ctrl.kl_coef": 0.001,
    "critic.model.fsdp_config.param_offload": False,
    "critic.model.fsdp_config.optimizer_offload": False,
    "reward_model.enable": False,
    "trainer.n_gpus_per_node": 8,
    "trainer.nnodes": 1,
}
# the advantage estimators with no value model (core_algos.py AdvantageEstimator; need_critic): each samples a group
# of completions per prompt and is planned as grpo; gae trains a critic and is ppo
CRITIC_FREE = (
    "grpo",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "remax",
    "rloo",
    "opo",
    "grpo_passk",
    "gpg",
    "rloo_vectorized",
    "grpo_vectorized",
    "optimal_token_baseline",
    "tir_optimal_token_baseline",
)
NO_GRAD_MICRO = "a no-grad log-prob pass's micro-batch: the plan runs its passes at the training micro-batch"
UNMODELLED = {
    ROLLOUT + "log_prob_micro_batch_size_per_gpu": NO_GRAD_MICRO,
    ARR + "ref.log_prob_micro_batch_size_per_gpu": NO_GRAD_MICRO,
    "critic.ppo_micro_batch_size_per_gpu": "the value model's micro-batch: planned at the policy's",
    ACTOR + "use_dynamic_bsz": "micro-batches packed to a token budget: planned at the micro-batch",
    ACTOR + "ppo_max_token_len_per_gpu": "the token budget of packed micro-batches: planned at the micro-batch",
    ACTOR + "ulysses_sequence_parallel_size": "Ulysses sequence parallelism of the policy is not planned",
    ARR + "model.use_fused_kernels": "log-probs from fused kernels (no whole logits): planned with the logits",
    ARR + "model.enable_activation_offload": "activation offload of the policy is not planned",
    ARR + "ref.fsdp_config.param_offload": "the reference's weights in host memory: a grpo plan keeps them on the GPU",
    **{
        f"{ARR}ref.megatron.{degree}_model_parallel_size": "the reference's own degree: planned with the policy's"
        for degree in ("tensor", "pipeline")
    },
    ROLLOUT + "max_num_batched_tokens": "the engine's prefill budget: its share is its gpu_memory_utilization",
    ROLLOUT + "max_num_seqs": "the engine's batch: its share is its gpu_memory_utilization",
    ROLLOUT + "enforce_eager": "the engine's CUDA graphs: its share is its gpu_memory_utilization",
}
# keys that leave memory and time alone: data files, optimizer rates, loss weights, logging, checkpoint cadence
IGNORED = re.compile(
    r"(data\.(train_files|val_files|filter_overlong_prompts|truncation|shuffle|return_raw_chat|prompt_key)"
    r"|.*\.optim\..*|.*entropy_coeff|.*kl_loss_type|.*clip_ratio.*|.*loss_agg_mode|.*use_remove_padding"
    r"|.*\.rollout\.(name|mode|load_format|temperature|top_p|top_k)|.*\.strategy|algorithm\.(gamma|lam|norm_.*)"
    r"|custom_reward_function\..*|reward_model\.reward_manager"
    r"|trainer\.(logger|project_name|experiment_name|save_freq|test_freq|total_epochs|total_training_steps"
    r"|critic_warmup|val_before_train|use_legacy_worker_impl|default_local_dir|resume_mode|device|log_val_generations)"
    r"|critic\.model\.(path|enable_gradient_checkpointing))"
)


@dataclass(frozen=True, kw_only=True)
class Overrides:
    """A main_ppo command's Hydra overrides ({key: text}, `+`/`++` prefixes dropped), the config it names, and the
    keys read so far (`taken`)."""

    values: dict[str, str]
    config: str
    taken: set[str]

    def source(self, key: str) -> str:
        return (
            f"{key}={self.values[key]}"
            if key in self.values
            else f"{key} (absent: verl {self.config}'s {self.raw(key)})"
        )

    def raw(self, key: str) -> Any:
        self.taken.add(key)
        return self.values[key] if key in self.values else DEFAULTS[key]

    def int(self, key: str, low: int = 1) -> int:
        return as_int(self.source(key), self.raw(key), low)

    def bool(self, key: str) -> bool:
        return as_bool(self.source(key), self.raw(key))

    def number(self, key: str) -> float:
        return as_number(self.source(key), self.raw(key), 0.0)


def detect(text: str | Document) -> bool:
    return COMMAND.search(document(text).text) is not None


def overrides(text: str) -> Overrides:
    """The main_ppo command's overrides, from the first logical line that runs it; --config-name (`=` or a word
    apart) names the YAML its defaults are verl's of."""
    line = next((line for line in lines(text) if COMMAND.search(line)), None)
    if line is None:
        raise PlanError("config", "is not a verl command line: it does not run python -m verl.trainer.main_ppo")
    _, tokens = environment(words(line))
    start = next(i for i, token in enumerate(tokens) if COMMAND.search(token)) + 1
    values: dict[str, str] = {}
    flags: dict[str, str] = {}
    rest = iter(tokens[start:])
    for token in rest:
        if token.startswith("--"):
            flag, equals, value = token.partition("=")
            flags[flag] = value if equals else next(rest, "")
        elif "=" in token:
            key, _, value = token.lstrip("+").partition("=")
            values[key] = value
    config = flags.get("--config-name", YAML)
    return Overrides(values=values, config=config if config.endswith(".yaml") else f"{config}.yaml", taken=set())


def read(text: str | Document, *, gpus: int | None = None) -> Imported:
    """A main_ppo command line as a grpo (a critic-free estimator) or ppo (gae) plan."""
    over = overrides(document(text).text)
    led = Reading(format=FORMAT.name)
    led.plan["framework"] = "megatron" if "megatron" in over.config else FORMAT.framework
    if ARR + "model.path" in over.values:
        led.model(over.source(ARR + "model.path"), str(over.raw(ARR + "model.path")))
    _task(led, over)
    objective = _objective(led, over)
    _hardware(led, over, gpus)
    _batch(led, over, objective)
    _rollout(led, over)
    _kl(led, over)
    if objective == "ppo":
        _ppo(led, over)
    _rest(led, over)
    return led.imported()


def _task(led: Reading, over: Overrides) -> None:
    """Full fine-tuning, or LoRA where model.lora_rank > 0 (verl's PEFT on every linear layer: all-linear)."""
    rank = over.int(ARR + "model.lora_rank", 0)
    if not rank:
        led.set(over.source(ARR + "model.lora_rank"), "workload.task", "finetune")
        return
    led.set(over.source(ARR + "model.lora_rank"), "workload.task", "lora")
    led.set(over.source(ARR + "model.lora_rank"), "workload.lora.rank", rank)
    led.set(over.source(ARR + "model.lora_alpha"), "workload.lora.alpha", over.number(ARR + "model.lora_alpha"))
    if ARR + "model.target_modules" in over.values:
        led.note(over.source(ARR + "model.target_modules"), "planned as all-linear, verl's default")
        over.taken.add(ARR + "model.target_modules")
    led.set(
        f"{ARR}model.target_modules (absent: verl {over.config}'s all-linear)",
        "workload.lora.targets",
        list(ALL_LINEAR),
    )


def _objective(led: Reading, over: Overrides) -> str:
    estimator = str(over.raw("algorithm.adv_estimator"))
    if estimator != "gae" and estimator not in CRITIC_FREE:
        raise bad("algorithm.adv_estimator", estimator, f"is not a verl estimator (gae, {', '.join(CRITIC_FREE)})")
    objective = "ppo" if estimator == "gae" else "grpo"
    led.set(over.source("algorithm.adv_estimator"), "workload.objective", objective)
    if estimator not in ("gae", "grpo"):
        led.notes.append(f"algorithm.adv_estimator {estimator}: critic-free, a group per prompt; planned as grpo")
    return objective


def _hardware(led: Reading, over: Overrides, gpus: int | None) -> None:
    """The GPUs (n_gpus_per_node × nnodes), the policy's sharding (FSDP: fully sharded over every GPU; Megatron:
    its tensor and pipeline degrees, the distributed optimizer) and its activation checkpointing."""
    nodes, per_node = "trainer.nnodes", "trainer.n_gpus_per_node"
    count = over.int(nodes) * over.int(per_node)
    led.set(f"{over.source(per_node)} × {over.source(nodes)}", "hardware.count", count)
    if gpus is not None and gpus != count:
        led.notes.append(f"the command runs {count} GPUs: planned at its count, not {gpus}")
    if "megatron" in over.config:
        tp, pp = ACTOR + "megatron.tensor_model_parallel_size", ACTOR + "megatron.pipeline_model_parallel_size"
        led.set(over.source(tp), "parallelism.tensor", over.int(tp))
        led.set(over.source(pp), "parallelism.pipeline", over.int(pp))
        led.set(f"(verl {over.config}: use_distributed_optimizer true)", "parallelism.zero_stage", 1)
    else:
        led.set(f"(verl {over.config}: actor strategy fsdp, fsdp_size -1: every GPU)", "parallelism.zero_stage", 3)
    checkpointing = over.bool(ARR + "model.enable_gradient_checkpointing")
    led.set(
        over.source(ARR + "model.enable_gradient_checkpointing"),
        "techniques.activation_checkpointing",
        "full" if checkpointing else "none",
    )


def _batch(led: Reading, over: Overrides, objective: str) -> None:
    """The sequence (prompt + response), the micro-batch, and one optimizer step's completions:
    ppo_mini_batch_size prompts × rollout.n (verl normalises the mini-batch so in actor.py)."""
    prompt, response = over.int("data.max_prompt_length"), over.int("data.max_response_length")
    both = f"{over.source('data.max_prompt_length')} + {over.source('data.max_response_length')}"
    led.set(both, "workload.sequence_length", prompt + response)
    led.set(over.source("data.max_response_length"), "workload.rl.completion_length", response)
    group = over.int(ROLLOUT + "n")
    led.set(over.source(ROLLOUT + "n"), "workload.rl.num_generations", group)
    micro = ACTOR + "ppo_micro_batch_size_per_gpu"
    if micro in over.values:
        over.taken.add(micro)
        led.set(over.source(micro), "workload.micro_batch_size", as_int(over.source(micro), over.values[micro]))
    else:
        led.set(f"{micro} (absent: verl's null; the plan's default 1)", "workload.micro_batch_size", 1)
    prompts, mini = over.int("data.train_batch_size"), over.int(ACTOR + "ppo_mini_batch_size")
    if prompts % mini:
        raise bad(over.source("data.train_batch_size"), prompts, f"must be a multiple of ppo_mini_batch_size {mini}")
    mini_source = over.source(ACTOR + "ppo_mini_batch_size")
    led.set(f"{mini_source} × {over.source(ROLLOUT + 'n')}", "workload.global_batch_size", mini * group)
    if objective == "ppo":
        led.set(f"{over.source('data.train_batch_size')} ÷ {mini_source}", "workload.ppo.mini_batches", prompts // mini)
        led.set(over.source(ACTOR + "ppo_epochs"), "workload.ppo.epochs", over.int(ACTOR + "ppo_epochs"))
    elif prompts > mini:
        led.notes.append(
            f"a rollout of data.train_batch_size {prompts} prompts feeds {prompts // mini} optimizer steps of "
            f"{mini}: planned per optimizer step"
        )


def _rollout(led: Reading, over: Overrides) -> None:
    """The hybrid engine: vLLM colocated on the training GPUs, its fraction and tensor degree, its sleep level
    (free_cache_engine) and the policy's offload while it generates."""
    rl = "workload.rl."
    led.set(f"(verl {over.config}: hybrid_engine true)", rl + "engine", "colocate")
    util = ROLLOUT + "gpu_memory_utilization"
    led.set(over.source(util), rl + "gpu_memory_utilization", over.number(util))
    tp = ROLLOUT + "tensor_model_parallel_size"
    led.set(over.source(tp), rl + "tensor_parallel", over.int(tp))
    free, layered = ROLLOUT + "free_cache_engine", ROLLOUT + "layered_summon"
    level = (1 if over.bool(layered) else 2) if over.bool(free) else 0
    led.set(f"{over.source(free)}, {over.source(layered)}", rl + "sleep_level", level)
    params, states = ACTOR + "fsdp_config.param_offload", ACTOR + "fsdp_config.optimizer_offload"
    both = over.bool(params), over.bool(states)
    led.set(f"{over.source(params)} and {over.source(states)}", rl + "offload_during_rollout", all(both))
    if any(both) and not all(both):
        led.note(f"{params}, {states}", "one of the two offloaded: planned with neither")


def _kl(led: Reading, over: Overrides) -> None:
    """The KL coefficient, which loads the reference: the actor's kl_loss_coef where use_kl_loss, else
    algorithm.kl_ctrl.kl_coef where use_kl_in_reward, else none (no reference model)."""
    in_loss, in_reward = over.bool(ACTOR + "use_kl_loss"), over.bool("algorithm.use_kl_in_reward")
    if in_loss:
        led.set(over.source(ACTOR + "kl_loss_coef"), "workload.rl.beta", over.number(ACTOR + "kl_loss_coef"))
    elif in_reward:
        coef = "algorithm.kl_ctrl.kl_coef"
        led.set(over.source(coef), "workload.rl.beta", over.number(coef))
    else:
        sources = f"{over.source(ACTOR + 'use_kl_loss')}, {over.source('algorithm.use_kl_in_reward')}"
        led.set(f"{sources}: no reference", "workload.rl.beta", 0.0)


def _ppo(led: Reading, over: Overrides) -> None:
    """gae's value model (critic.model.path, default the actor's), its offload, the reference's offload and the
    reward (a model where reward_model.enable, else verl's rule-based reward manager)."""
    ppo = "workload.ppo."
    params, states = "critic.model.fsdp_config.param_offload", "critic.model.fsdp_config.optimizer_offload"
    both = over.bool(params), over.bool(states)
    led.set(f"{over.source(params)} and {over.source(states)}", ppo + "critic_offload", all(both))
    ref = ARR + "ref.fsdp_config.param_offload"
    led.set(over.source(ref), ppo + "frozen_offload", over.bool(ref))
    led.set(over.source("reward_model.enable"), ppo + "reward", "model" if over.bool("reward_model.enable") else "rule")
    critic = over.values.get("critic.model.path")
    over.taken.add("critic.model.path")
    if critic is not None and critic != over.values.get(ARR + "model.path"):
        led.note("critic.model.path", f"{critic}: the value model planned with the policy's architecture")


def _rest(led: Reading, over: Overrides) -> None:
    """Every override not read: unmodelled where it changes memory, ignored where it leaves it alone, else
    unknown."""
    for key, value in over.values.items():
        if key in over.taken:
            continue
        name = f"{key}={value}"
        if key in UNMODELLED:
            led.note(name, UNMODELLED[key])
        elif IGNORED.fullmatch(key):
            led.ignored.append(name)
        else:
            led.unknown.append(name)


FORMAT = Format(
    name="verl",
    label="verl main_ppo command line (Hydra overrides; read only)",
    framework="accelerate_fsdp",  # verl's default actor strategy fsdp (torch FSDP); ppo_megatron_trainer: megatron
    suffix=".sh",
    detect=detect,
    read=read,
    write=None,
    says=(
        "workload.task",
        "workload.objective",
        "workload.sequence_length",
        "workload.micro_batch_size",
        "workload.global_batch_size",
        "workload.lora.rank",
        "workload.lora.alpha",
        "workload.lora.targets",
        "workload.rl.num_generations",
        "workload.rl.completion_length",
        "workload.rl.beta",
        "workload.rl.engine",
        "workload.rl.gpu_memory_utilization",
        "workload.rl.tensor_parallel",
        "workload.rl.sleep_level",
        "workload.rl.offload_during_rollout",
        "workload.ppo.epochs",
        "workload.ppo.mini_batches",
        "workload.ppo.critic_offload",
        "workload.ppo.frozen_offload",
        "workload.ppo.reward",
        "parallelism.tensor",
        "parallelism.pipeline",
        "parallelism.zero_stage",
        "techniques.activation_checkpointing",
        "hardware.count",
    ),
    cannot_say={"export": "verl command lines are read, not written"},
)
