"""OpenRLHF's trainers launched on a command line (`deepspeed --module openrlhf.cli.train_sft ...`, `ray job submit
... -- python3 -m openrlhf.cli.train_ppo_ray ...`) as plans: train_sft is next-token fine-tuning, train_dpo preference
training (dpo or ipo), train_rm reward-model training, train_ppo_ray ppo (gae: a critic) or grpo (a critic-free
estimator). Read only; OpenRLHF's other entry points (train_kto, train_prm, train_kd, ...) stay refused by name
(planner/formats/unread.py).

Both spellings of its flags are read: the dotted ones of OpenRLHF/OpenRLHF@3c3be623 (`--ds.zero_stage`, since
ed62d0e2, 2026-04) and the flat ones of the release before, @c1ba971c (`--zero_stage`), whose defaults are the same
for every flag read here; and `--bf16`, `--flash_attn`, `--prompt_max_len` and `--generate_max_len` of the releases
before cd7a434f (2026-01) and d0e088b6 (2026-03). Sources (@3c3be623 unless named): openrlhf/cli/train_sft.py,
train_dpo.py, train_rm.py, train_ppo_ray.py (every default below; train_ppo_ray.py: a critic only for estimator
gae, its path the reward model's else the actor's); openrlhf/trainer/dpo_trainer.py concatenated_forward (chosen
and rejected in one forward) and train_dpo.py (a reference Actor always loaded, LoRA or not);
openrlhf/trainer/ppo_utils/samples_generator.py (the rollout runs on vLLM engines only; their `sleep()` is vLLM's
level 1, vllm_engine.py); openrlhf/trainer/ppo_trainer.py (`--ds.enable_sleep` reloads and offloads the actor's and
the critic's DeepSpeed states around their fit); openrlhf/trainer/ray/ppo_actor.py (micro-batches of
`--train.micro_batch_size` samples, `train.batch_size` samples an optimizer step, `max_epochs` passes over the
replay buffer of `rollout.batch_size` × `n_samples_per_prompt` samples); openrlhf/utils/deepspeed/deepspeed_utils.py
(`--adam_offload`: offload_optimizer cpu).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from planner.errors import PlanError, bad
from planner.formats.base import Document, Format, Imported, document, resolve_model
from planner.formats.hf_trainer import ALL_LINEAR, ATTENTION, GRPO_PROMPT, MODULES
from planner.formats.reading import Reading, as_bool, as_int, as_number, choice
from planner.formats.shell import environment, lines, words

COMMAND = re.compile(r"\bopenrlhf\.cli\.(train_sft|train_dpo|train_rm|train_ppo_ray)\b")
SOURCE = "OpenRLHF@3c3be623 openrlhf/cli/"
FLAT_SOURCE = "OpenRLHF@c1ba971c openrlhf/cli/"  # the flat flags' release: the same defaults
# the dotted flags (@3c3be623) as the flat ones of @c1ba971c they renamed; the reader reads flat names
DOTTED = {
    "ds.zero_stage": "zero_stage",
    "ds.param_dtype": "param_dtype",
    "ds.adam_offload": "adam_offload",
    "ds.attn_implementation": "attn_implementation",
    "ds.packing_samples": "packing_samples",
    "ds.load_in_4bit": "load_in_4bit",
    "ds.lora.rank": "lora_rank",
    "ds.lora.alpha": "lora_alpha",
    "ds.lora.target_modules": "target_modules",
    "ds.lora.dropout": "lora_dropout",
    "ds.ring_attn_size": "ring_attn_size",
    "ds.tensor_parallel_size": "ds_tensor_parallel_size",
    "ds.enable_sleep": "deepspeed_enable_sleep",
    "model.gradient_checkpointing_enable": "gradient_checkpointing",
    "actor.gradient_checkpointing_enable": "gradient_checkpointing",
    "model.model_name_or_path": "pretrain",
    "actor.model_name_or_path": "pretrain",
    "ref.model_name_or_path": "ref_pretrain",
    "reward.model_name_or_path": "reward_pretrain",
    "critic.model_name_or_path": "critic_pretrain",
    "reward.remote_url": "remote_rm_url",
    "train.agent_func_path": "agent_func_path",
    "ref.offload": "ref_offload",
    "reward.offload": "reward_offload",
    "data.max_len": "max_len",
    "train.micro_batch_size": "micro_train_batch_size",
    "train.batch_size": "train_batch_size",
    "train.max_epochs": "max_epochs",
    "rollout.batch_size": "rollout_batch_size",
    "rollout.micro_batch_size": "micro_rollout_batch_size",
    "rollout.n_samples_per_prompt": "n_samples_per_prompt",
    "rollout.max_new_tokens": "max_new_tokens",
    "vllm.num_engines": "vllm_num_engines",
    "vllm.tensor_parallel_size": "vllm_tensor_parallel_size",
    "vllm.gpu_memory_utilization": "vllm_gpu_memory_utilization",
    "vllm.enable_sleep": "vllm_enable_sleep",
    "train.colocate_all": "colocate_all_models",
    "train.colocate_actor_ref": "colocate_actor_ref",
    "train.colocate_critic_reward": "colocate_critic_reward",
    "train.async_enable": "async_train",
    "algo.kl.init_coef": "init_kl_coef",
    "algo.advantage.estimator": "advantage_estimator",
    "model.ipo_enable": "ipo",
    "train.dynamic_batch_enable": "use_dynamic_batch",
    "vllm.enforce_eager": "enforce_eager",
    "vllm.enable_prefix_caching": "enable_prefix_caching",
    **{
        f"{group}.{key}": f"{group}_{key}"
        for group in ("actor", "ref", "critic", "reward")
        for key in ("num_nodes", "num_gpus_per_node")
    },
}
# the flat name's dotted spelling where an entry point's differs from DOTTED's first (train_ppo_ray's actor.*)
PPO_DOTTED = {"gradient_checkpointing": "actor.gradient_checkpointing_enable", "pretrain": "actor.model_name_or_path"}
# each entry point's defaults, @3c3be623 and @c1ba971c alike (argparse add_argument default=)
COMMON: dict[str, Any] = {
    "zero_stage": 2,
    "param_dtype": "bf16",
    "gradient_checkpointing": False,
    "adam_offload": False,
    "attn_implementation": "flash_attention_2",
    "packing_samples": False,
    "load_in_4bit": False,
    "lora_rank": 0,
    "lora_alpha": 16,
    "target_modules": "all-linear",
    "train_batch_size": 128,
}
DEFAULTS: dict[str, dict[str, Any]] = {
    "train_sft": {**COMMON, "micro_train_batch_size": 8, "max_len": 2048},
    "train_dpo": {**COMMON, "micro_train_batch_size": 8, "max_len": 512, "ipo": False},
    "train_rm": {**COMMON, "micro_train_batch_size": 1, "max_len": 512},
    "train_ppo_ray": {
        **COMMON,
        "micro_train_batch_size": 1,
        "max_len": 2048,
        "max_epochs": 1,
        "rollout_batch_size": 1024,
        "n_samples_per_prompt": 1,
        "vllm_tensor_parallel_size": 1,
        "vllm_gpu_memory_utilization": 0.95,
        "init_kl_coef": 0.01,
        "advantage_estimator": "gae",
        "actor_num_nodes": 1,
        "actor_num_gpus_per_node": 8,
        **dict.fromkeys(("colocate_all_models", "vllm_enable_sleep", "deepspeed_enable_sleep", "async_train"), False),
        **dict.fromkeys(("ref_reward_offload", "ref_offload", "reward_offload"), False),
        **dict.fromkeys(("colocate_actor_ref", "colocate_critic_reward"), False),
        # d0e088b6^ (before 2026-03): the prompt and the response, each 1024
        "prompt_max_len": 1024,
        "generate_max_len": 1024,
    },
}
# train_ppo_ray.py --advantage_estimator choices: gae trains a critic (ppo); the rest are critic-free (grpo)
ESTIMATORS = ("gae", "reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo")
DTYPES = {"bf16": "bf16", "fp16": "fp16"}  # --param_dtype choices
# the launchers' GPU counts (deepspeed's --num_gpus/--num_nodes, torchrun's --nproc_per_node/--nnodes)
LAUNCHER = {"--num_gpus": "per_node", "--nproc_per_node": "per_node", "--num_nodes": "nodes", "--nnodes": "nodes"}
UNMODELLED = {
    "ring_attn_size": "ring attention over a group of GPUs: planned without context parallelism",
    "ds_tensor_parallel_size": "DeepSpeed AutoTP: planned without tensor parallelism",
    "use_dynamic_batch": "micro-batches packed to a token budget: planned at the micro-batch",
    "train_max_tokens_per_gpu": "the token budget of packed micro-batches: planned at the micro-batch",
    "rollout_max_tokens_per_gpu": "the token budget of packed micro-batches: planned at the micro-batch",
    "micro_rollout_batch_size": "the experience passes' micro-batch: planned at the training micro-batch",
    "grad_accum_dtype": "DeepSpeed's gradient accumulation dtype: planned as the recipe's",
    "deepcompile": "DeepCompile's own prefetch and offload schedule is not planned",
    "use_liger_kernel": "Liger's fused kernels (no whole logits): planned with the logits",
    "enforce_eager": "the engine's CUDA graphs: its share is its gpu_memory_utilization",
    "enable_prefix_caching": "the engine's prefix cache: its share is its gpu_memory_utilization",
    "enable_ema": "an EMA copy of the policy's weights is not planned",
    "max_images_per_prompt": "images in the prompts (a vision model) are not planned",
}
# flags that leave memory and time alone (rates, losses' weights, data, logging, checkpoints, seeds), by their flat
# name or a dotted flag's last part; IGNORED_GROUPS: the dotted groups whose every flag left unread does
IGNORED = re.compile(
    r"(.*(learning_rate|_lr|lr_.*|\.lr|adam_betas|\.betas|\.eps|weight_decay|l2|max_norm|momentum|nesterov|ns_steps)"
    r"|.*(wandb.*|tensorboard.*|logging_steps|save_steps|eval_steps|ckpt.*|save_path|save_hf.*|load_checkpoint"
    r"|disable_ds_ckpt|max_ckpt_.*|use_universal_ckpt|output_dir|best_metric_key)"
    r"|.*(dataset.*|prompt_data.*|input_key|output_key|label_key|chosen_key|rejected_key|prompt_key|image_key"
    r"|input_template|apply_chat_template|tokenizer_chat_template|max_samples|multiturn|.*_split|disable_fast_tokenizer"
    r"|dataloader_num_workers)"
    r"|seed|full_determinism.*|local_rank|use_ms|perf|zpg|overlap_comm|lora_dropout|value_head_prefix|aux_loss_coef"
    r"|beta|nll_loss_coef|label_smoothing|loss|loss_type|compute_fp32_loss.*|margin_loss.*|pretrain_mode.*|optim"
    r"|eps_clip.*|dual_clip|value_clip|lambd|gamma|ptx_coef|normalize_reward|top_p|temperature|kl_target|kl_horizon"
    r"|kl_estimator|use_kl_loss|policy_loss_type|entropy_loss_coef|reward_clip_range|no_advantage_std_norm"
    r"|overlong_.*|stop_properly_penalty_coef|dynamic_filtering.*|freezing_actor_steps|save_value_network|num_episodes"
    r"|vllm_sync_backend|vllm_sync_with_ray|async_queue_size|partial_rollout|vllm_generate_batch_size|ring_head_stride"
    r"|enable_vllm_is_correction|vllm_is_.*|gradient_checkpointing_use_reentrant|actor_init_on_gpu|experts_impl.*"
    r"|attn_implementation|freeze_visual_encoder|(ref|reward|critic)_num_(nodes|gpus_per_node))"
)
IGNORED_GROUPS: tuple[str, ...] = (
    "logger.",
    "ckpt.",
    "eval.",
    "muon.",
    "adam.",
    "actor.adam.",
    "actor.muon.",
    "critic.adam.",
)
IGNORED_GROUPS += ("critic.muon.", "algo.kl.", "algo.advantage.", "algo.dynamic_filtering", "reward.")


@dataclass(frozen=True, kw_only=True)
class Flags:
    """An OpenRLHF command's flags: {flat name: its values} ([] for a switch), each as written, the entry point
    (train_sft, ...) and the flags read so far (`taken`)."""

    entry: str
    values: dict[str, list[str]]
    written: dict[str, str]
    dotted: bool
    taken: set[str]

    def has(self, name: str) -> bool:
        return name in self.values

    def spelled(self, name: str) -> str:
        """The flag as the command writes it, or as its release spells it where absent."""
        if name in self.written:
            return self.written[name]
        if not self.dotted:
            return f"--{name}"
        own = PPO_DOTTED.get(name) if self.entry == "train_ppo_ray" else None
        return "--" + (own or next((d for d, flat in DOTTED.items() if flat == name), name))

    def source(self, name: str) -> str:
        if name in self.values:
            return " ".join([self.written[name], *self.values[name]])
        default = DEFAULTS[self.entry][name]
        where = SOURCE if self.dotted else FLAT_SOURCE
        return f"{self.spelled(name)} (absent: OpenRLHF's default {default}, {where}{self.entry}.py)"

    def raw(self, name: str) -> Any:
        self.taken.add(name)
        if name not in self.values:
            return DEFAULTS[self.entry][name]
        given = self.values[name]
        return True if not given else given[0] if len(given) == 1 else given

    def int(self, name: str, low: int = 1) -> int:
        return as_int(self.source(name), self.raw(name), low)

    def number(self, name: str, low: float = 0.0) -> float:
        return as_number(self.source(name), self.raw(name), low)

    def bool(self, name: str) -> bool:
        return as_bool(self.source(name), self.raw(name))


def detect(text: str | Document) -> bool:
    return COMMAND.search(document(text).text) is not None


def flags(text: str) -> tuple[Flags, dict[str, int]]:
    """The command's flags (those after the entry point's module) and the launcher's GPU counts before it
    ({"per_node": n, "nodes": n}), from the first logical line that names the module."""
    line = next((line for line in lines(text) if COMMAND.search(line)), None)
    if line is None:
        raise PlanError("config", "is not an OpenRLHF command line: it does not run openrlhf.cli.train_*")
    _, tokens = environment(words(line))
    start = next(i for i, token in enumerate(tokens) if COMMAND.search(token))
    entry = COMMAND.search(tokens[start])[1]  # type: ignore[index]
    launch = tokens[:start] or _launch_line(text)
    launcher: dict[str, int] = {}
    for i, token in enumerate(launch):
        flag, equals, value = token.partition("=")
        if flag in LAUNCHER:
            text_value = value if equals else (launch[i + 1] if i + 1 < len(launch) else "")
            launcher[LAUNCHER[flag]] = as_int(flag, text_value)
    values: dict[str, list[str]] = {}
    written: dict[str, str] = {}
    name = ""
    for token in tokens[start + 1 :]:
        if token.startswith("--"):
            flag, equals, value = token.partition("=")
            name = DOTTED.get(flag[2:], flag[2:])
            written[name], values[name] = flag, [value] if equals else []
        elif name:
            values[name].append(token)
    found = Flags(
        entry=entry, values=values, written=written, dotted=any("." in f for f in written.values()), taken=set()
    )
    return found, launcher


def _launch_line(text: str) -> list[str]:
    """The words of the deepspeed or torchrun line that runs a command kept in a variable (OpenRLHF's scripts:
    `read -r -d '' training_commands <<EOF ... EOF`, then `deepspeed --module $training_commands`), else none."""
    for line in lines(text):
        _, tokens = environment(words(line))
        if tokens and tokens[0] in ("deepspeed", "torchrun") and any("$" in token for token in tokens):
            return tokens
    return []


def read(text: str | Document, *, gpus: int | None = None) -> Imported:
    """An OpenRLHF train_* command line as a plan of its objective."""
    flag, launcher = flags(document(text).text)
    led = Reading(format=FORMAT.name)
    led.plan["framework"] = FORMAT.framework
    if flag.has("pretrain"):
        led.model(flag.source("pretrain"), str(flag.raw("pretrain")))
    _task(led, flag)
    _training(led, flag)
    if flag.entry == "train_ppo_ray":
        _rl(led, flag)
    else:
        _supervised(led, flag, launcher, gpus)
    _rest(led, flag)
    return led.imported()


def _task(led: Reading, flag: Flags) -> None:
    """Full fine-tuning, or LoRA where --lora_rank > 0 (QLoRA on nf4 with --load_in_4bit: OpenRLHF's Actor loads
    bitsandbytes nf4 with double quantization), its adapters on --target_modules (all-linear by default)."""
    rank, four = flag.int("lora_rank", 0), flag.bool("load_in_4bit")
    if not rank:
        if four:
            raise bad(flag.source("load_in_4bit"), True, "needs --lora_rank > 0: a 4-bit model trains only adapters")
        led.set(flag.source("lora_rank"), "workload.task", "finetune")
        return
    led.set(flag.source("lora_rank"), "workload.task", "qlora" if four else "lora")
    if four:
        led.set(flag.source("load_in_4bit"), "precision.weights", "nf4")
    led.set(flag.source("lora_rank"), "workload.lora.rank", rank)
    led.set(flag.source("lora_alpha"), "workload.lora.alpha", flag.number("lora_alpha"))
    targets = flag.raw("target_modules")
    names = [targets] if isinstance(targets, str) else list(targets)
    if names == ["all-linear"]:
        chosen = list(ALL_LINEAR)
    else:
        unknown = [n for n in names if n not in MODULES]
        if unknown:
            raise bad(flag.source("target_modules"), unknown[0], f"is not one of: all-linear, {', '.join(MODULES)}")
        chosen = [MODULES[n] for n in names]
    led.set(flag.source("target_modules"), "workload.lora.targets", chosen)


def _training(led: Reading, flag: Flags) -> None:
    """The DeepSpeed strategy: ZeRO stage, Adam offload, dtype, checkpointing, attention, the micro-batch."""
    led.set(flag.source("zero_stage"), "parallelism.zero_stage", flag.int("zero_stage", 0))
    if flag.int("zero_stage", 0) > 3:
        raise bad(flag.source("zero_stage"), flag.raw("zero_stage"), "is not a ZeRO stage (0 to 3)")
    offload = flag.bool("adam_offload")
    led.set(flag.source("adam_offload"), "techniques.offload", "optimizer" if offload else "none")
    _dtype(led, flag)
    checkpointing = flag.bool("gradient_checkpointing")
    led.set(
        flag.source("gradient_checkpointing"),
        "techniques.activation_checkpointing",
        "full" if checkpointing else "none",
    )
    if flag.has("flash_attn"):  # before c250c21a (2025-08): a switch, else transformers' default attention
        flag.taken.add("flash_attn")
        led.set(flag.source("flash_attn"), "techniques.attention", "flash")
    else:
        attention = choice(flag.source("attn_implementation"), flag.raw("attn_implementation"), ATTENTION)
        led.set(flag.source("attn_implementation"), "techniques.attention", attention)
    micro = "micro_train_batch_size"
    led.set(flag.source(micro), "workload.micro_batch_size", flag.int(micro))


def _dtype(led: Reading, flag: Flags) -> None:
    """--param_dtype (bf16 or fp16); --bf16 of the releases before cd7a434f, which without it trained in fp32."""
    if flag.has("bf16"):
        flag.taken.add("bf16")
        led.set(flag.source("bf16"), "precision.compute", "bf16")
        return
    legacy = [f for f in ("flash_attn", "prompt_max_len", "generate_max_len") if flag.has(f)]
    if legacy and not flag.has("param_dtype"):
        raise bad(
            flag.spelled(legacy[0]),
            " ".join(flag.values[legacy[0]]) or True,
            "marks an OpenRLHF command of before 2026-01 (cd7a434f), which trains in fp32 without --bf16: "
            "not planned; give --bf16 or --param_dtype",
        )
    dtype = choice(flag.source("param_dtype"), flag.raw("param_dtype"), DTYPES)
    led.set(flag.source("param_dtype"), "precision.compute", dtype)


def _supervised(led: Reading, flag: Flags, launcher: dict[str, int], gpus: int | None) -> None:
    """train_sft, train_dpo or train_rm: the objective, the sequence (--max_len: a DPO pair's chosen and rejected
    each), the global batch and the launcher's GPUs."""
    objective = {"train_sft": "next_token", "train_dpo": "preference", "train_rm": "reward"}[flag.entry]
    led.set(f"(the entry point openrlhf.cli.{flag.entry})", "workload.objective", objective)
    led.set(flag.source("max_len"), "workload.sequence_length", flag.int("max_len"))
    led.set(flag.source("train_batch_size"), "workload.global_batch_size", flag.int("train_batch_size"))
    if flag.bool("packing_samples"):
        led.ignored.append(flag.source("packing_samples"))  # packed rows of up to micro-batch × max_len tokens
    else:
        led.note(flag.source("packing_samples"), "each batch padded to its longest, up to --max_len: planned at it")
    if "per_node" in launcher:
        count = launcher["per_node"] * launcher.get("nodes", 1)
        led.set("the launcher's GPUs per node × nodes", "hardware.count", count)
        if gpus is not None and gpus != count:
            led.notes.append(f"the command runs {count} GPUs: planned at its count, not {gpus}")
    if flag.entry == "train_dpo":
        ipo = flag.bool("ipo")
        led.set(flag.source("ipo"), "workload.preference.loss_type", "ipo" if ipo else "dpo")
        led.set(f"({SOURCE}train_dpo.py: a reference Actor always loaded)", "workload.preference.reference", "separate")
        # models/actor.py Actor.forward casts the logits to fp32 (`output["logits"].to(torch.float32)`) before
        # log_probs_from_logits' fp32 branch: planned as upcast, an upper bound (that branch saves only the logits)
        actor = "(OpenRLHF@3c3be623 openrlhf/models/actor.py: the logits cast to fp32)"
        led.set(actor, "workload.preference.log_probs", "upcast")
        if flag.has("ref_offload"):
            flag.taken.add("ref_offload")
            led.note(flag.source("ref_offload"), "the reference's weights in host memory: planned on the GPU")
        _other_model(led, flag, "ref_pretrain", "the reference")


def _other_model(led: Reading, flag: Flags, name: str, what: str) -> str | None:
    """A second model's preset where the command names one other than the policy's, else None (noted)."""
    if not flag.has(name):
        return None
    flag.taken.add(name)
    path = str(flag.raw(name))
    found = resolve_model(path)
    policy = led.plan.get("model", {}).get("preset")
    if found is not None and found.preset == policy:
        return None
    if found is None:
        led.note(flag.source(name), f"{what} planned with the policy's architecture ({path} is not a preset)")
        return None
    return found.preset


def _rest(led: Reading, flag: Flags) -> None:
    """Every flag not read: unmodelled where it changes memory, ignored where it leaves it alone, else unknown."""
    for name, written in flag.written.items():
        if name in flag.taken:
            continue
        text = flag.source(name)
        if name in UNMODELLED:
            led.note(text, UNMODELLED[name])
        elif (
            IGNORED.fullmatch(name)
            or IGNORED.fullmatch(written.rsplit(".", 1)[-1])
            or written[2:].startswith(IGNORED_GROUPS)
        ):
            led.ignored.append(text)
        else:
            led.unknown.append(text)


def _rl(led: Reading, flag: Flags) -> None:
    """train_ppo_ray: the objective (a critic for gae only), the sequence and completion, the batches, the vLLM
    engines, the KL coefficient (0: no reference) and, for ppo, the critic, the reward and their offload."""
    estimator = flag.raw("advantage_estimator")
    if estimator not in ESTIMATORS:
        raise bad(flag.source("advantage_estimator"), estimator, f"is not one of: {', '.join(ESTIMATORS)}")
    objective = "ppo" if estimator == "gae" else "grpo"
    led.set(flag.source("advantage_estimator"), "workload.objective", objective)
    group = flag.int("n_samples_per_prompt")
    if objective == "grpo" and group < 2:
        raise bad(
            flag.source("n_samples_per_prompt"),
            group,
            f"with --advantage_estimator {estimator}: a critic-free plan (grpo) samples 2 or more per prompt",
        )
    led.set(flag.source("n_samples_per_prompt"), "workload.rl.num_generations", group)
    _lengths(led, flag)
    _batches(led, flag, objective)
    count = flag.int("actor_num_nodes") * flag.int("actor_num_gpus_per_node")
    both = f"{flag.source('actor_num_nodes')} × {flag.source('actor_num_gpus_per_node')}"
    led.set(both, "hardware.count", count)
    _engine(led, flag, count, objective)
    beta = flag.number("init_kl_coef")
    led.set(flag.source("init_kl_coef") + ("" if beta else ": no reference"), "workload.rl.beta", beta)
    _placement(led, flag, objective, beta > 0)
    if objective == "ppo":
        _ppo(led, flag)
    elif remote := next((name for name in ("remote_rm_url", "agent_func_path") if flag.has(name)), None):
        flag.taken.add(remote)
        led.ignored.append(flag.source(remote))  # a rule or a remote server: nothing on the GPUs
    elif flag.has("reward_pretrain"):
        flag.taken.add("reward_pretrain")
        led.note(flag.source("reward_pretrain"), "a reward model's forward: a grpo plan scores with a rule")


def _lengths(led: Reading, flag: Flags) -> None:
    """The sequence and the completion: --prompt_max_len + --generate_max_len (before d0e088b6: a --max_len then
    overrides their sum), else --max_len (prompt + response) with --max_new_tokens the response, or without it a
    response up to --max_len less its prompt: a GRPO_PROMPT-token prompt assumed (OpenRLHF has no prompt cap)."""
    if flag.has("prompt_max_len") or flag.has("generate_max_len"):
        prompt, response = flag.int("prompt_max_len"), flag.int("generate_max_len")
        both = f"{flag.source('prompt_max_len')} + {flag.source('generate_max_len')}"
        total = flag.int("max_len") if flag.has("max_len") else prompt + response
        led.set(flag.source("max_len") if flag.has("max_len") else both, "workload.sequence_length", total)
        led.set(flag.source("generate_max_len"), "workload.rl.completion_length", response)
        return
    total = flag.int("max_len")
    led.set(flag.source("max_len"), "workload.sequence_length", total)
    if flag.has("max_new_tokens"):
        flag.taken.add("max_new_tokens")
        response = as_int(flag.source("max_new_tokens"), flag.raw("max_new_tokens"))
        led.set(flag.source("max_new_tokens"), "workload.rl.completion_length", response)
        return
    response = total - min(GRPO_PROMPT, total // 2)
    led.set(
        f"{flag.spelled('max_new_tokens')} (absent: OpenRLHF's None, each response up to {flag.spelled('max_len')} "
        f"less its prompt; the planner assumes a {min(GRPO_PROMPT, total // 2)}-token prompt)",
        "workload.rl.completion_length",
        response,
    )


def _batches(led: Reading, flag: Flags, objective: str) -> None:
    """--train_batch_size samples an optimizer step; a rollout of --rollout_batch_size prompts × samples feeds
    their quotient of steps each epoch (ppo's mini_batches; --max_epochs its epochs)."""
    step, prompts = flag.int("train_batch_size"), flag.int("rollout_batch_size")
    samples = prompts * flag.int("n_samples_per_prompt")
    if samples < step:
        raise bad(
            flag.source("train_batch_size"),
            step,
            f"is more than a rollout's {samples} samples (--rollout_batch_size × --n_samples_per_prompt)",
        )
    led.set(flag.source("train_batch_size"), "workload.global_batch_size", step)
    if objective == "ppo":
        rollout = f"{flag.source('rollout_batch_size')} × {flag.source('n_samples_per_prompt')}"
        led.set(f"{rollout} ÷ {flag.source('train_batch_size')}", "workload.ppo.mini_batches", samples // step)
        led.set(flag.source("max_epochs"), "workload.ppo.epochs", flag.int("max_epochs"))
    elif samples > step or flag.int("max_epochs") > 1:
        led.notes.append(
            f"a rollout of {samples} samples feeds {samples // step} optimizer steps of {step} × "
            f"{flag.int('max_epochs')} epochs: planned per optimizer step"
        )


def _engine(led: Reading, flag: Flags, count: int, objective: str) -> None:
    """The vLLM engines: on the actor's GPUs with --colocate_all_models (not async: OpenRLHF then keeps them
    apart), their fraction, tensor degree and sleep (level 1); else a server on engines × tensor GPUs of their own,
    async with --async_train. --deepspeed_enable_sleep offloads the actor's states while the engines generate."""
    rl = "workload.rl."
    if not flag.has("vllm_num_engines") or as_int(flag.source("vllm_num_engines"), flag.raw("vllm_num_engines"), 0) < 1:
        raise PlanError(
            flag.spelled("vllm_num_engines"),
            "unset or 0: OpenRLHF's rollout generates on vLLM engines only (ppo_utils/samples_generator.py); "
            "name their count",
        )
    engines, tp = int(flag.raw("vllm_num_engines")), flag.int("vllm_tensor_parallel_size")
    flag.taken.add("vllm_num_engines")
    led.set(flag.source("vllm_tensor_parallel_size"), rl + "tensor_parallel", tp)
    colocated = flag.bool("colocate_all_models") and not flag.bool("async_train")
    sleeping = flag.bool("deepspeed_enable_sleep")
    if colocated:
        if engines * tp != count:
            raise bad(
                flag.source("vllm_num_engines"),
                engines,
                f"× --vllm_tensor_parallel_size {tp} must equal the actor's {count} GPUs with --colocate_all_models",
            )
        led.set(flag.source("colocate_all_models"), rl + "engine", "colocate")
        util = "vllm_gpu_memory_utilization"
        led.set(flag.source(util), rl + "gpu_memory_utilization", flag.number(util))
        level = 1 if flag.bool("vllm_enable_sleep") else 0
        led.set(flag.source("vllm_enable_sleep"), rl + "sleep_level", level)
        led.set(flag.source("deepspeed_enable_sleep"), rl + "offload_during_rollout", sleeping)
        if objective == "ppo":
            led.set(flag.source("deepspeed_enable_sleep"), "workload.ppo.critic_offload", sleeping)
        return
    led.set(flag.source("colocate_all_models") + " (or --async_train)", rl + "engine", "server")
    led.set(
        f"{flag.source('vllm_num_engines')} × {flag.source('vllm_tensor_parallel_size')}",
        rl + "engine_gpus",
        engines * tp,
    )
    led.set(flag.source("async_train"), rl + "async_rollout", flag.bool("async_train"))
    for name in ("vllm_gpu_memory_utilization", "vllm_enable_sleep", "deepspeed_enable_sleep"):
        if flag.has(name):
            flag.taken.add(name)
            led.note(flag.source(name), "the engines run on GPUs of their own: planned at the plan's server engine")


def _placement(led: Reading, flag: Flags, objective: str, reference: bool) -> None:
    """Models on GPUs of their own (not --colocate_all_models): planned on the actor's GPUs, which the plan gives
    every model (an upper bound there; the other GPUs are not counted)."""
    together = flag.bool("colocate_all_models")
    groups = [("ref", "the reference", reference and not (together or flag.bool("colocate_actor_ref")))]
    if objective == "ppo":
        remote = flag.has("remote_rm_url") or flag.has("agent_func_path")
        groups += [("critic", "the critic", not together), ("reward", "the reward model", not (together or remote))]
    for group, what, apart in groups:
        keys = (f"{group}_num_nodes", f"{group}_num_gpus_per_node")
        flag.taken.update(keys)
        if apart:
            led.note(
                f"{flag.spelled(keys[0])} × {flag.spelled(keys[1])}",
                f"{what} on GPUs of its own: planned on the actor's GPUs (an upper bound there)",
            )


def _ppo(led: Reading, flag: Flags) -> None:
    """The reward (--remote_rm_url or --agent_func_path: a rule; else --reward_pretrain's model), the critic
    (--critic_pretrain, else the reward model's, else the actor's: train_ppo_ray.py) and the frozen models' offload
    (--ref_reward_offload; @3c3be623 --ref.offload and --reward.offload)."""
    ppo = "workload.ppo."
    remote = next((name for name in ("remote_rm_url", "agent_func_path") if flag.has(name)), None)
    if remote is not None:
        flag.taken.add(remote)
        led.set(flag.source(remote), ppo + "reward", "rule")
    elif not flag.has("reward_pretrain"):
        raise PlanError(flag.spelled("reward_pretrain"), "is required for gae without --remote_rm_url: no reward")
    else:
        led.set(flag.source("reward_pretrain"), ppo + "reward", "model")
        reward = _other_model(led, flag, "reward_pretrain", "the reward model")
        if reward is not None:
            led.set(flag.source("reward_pretrain"), ppo + "reward_model", reward)
    critic_flag = "critic_pretrain" if flag.has("critic_pretrain") else "reward_pretrain" if remote is None else ""
    critic = _other_model(led, flag, critic_flag, "the critic") if critic_flag else None
    if critic is not None:
        led.set(flag.source(critic_flag), ppo + "critic_model", critic)
    split = flag.dotted or flag.has("ref_offload") or flag.has("reward_offload")  # @3c3be623: two flags
    if split:
        both = flag.bool("ref_offload"), flag.bool("reward_offload")
        source = f"{flag.source('ref_offload')} and {flag.source('reward_offload')}"
        led.set(source, ppo + "frozen_offload", all(both))
        if any(both) and not all(both):
            led.note(source, "one of the two offloaded: planned with neither")
    else:
        led.set(flag.source("ref_reward_offload"), ppo + "frozen_offload", flag.bool("ref_reward_offload"))


FORMAT = Format(
    name="openrlhf",
    label="OpenRLHF train_sft/dpo/rm/ppo_ray command line (read only)",
    framework="deepspeed",  # OpenRLHF trains every model through its DeepSpeed strategy (openrlhf/utils/deepspeed)
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
        "workload.preference.loss_type",
        "workload.preference.reference",
        "workload.preference.log_probs",
        "workload.rl.num_generations",
        "workload.rl.completion_length",
        "workload.rl.beta",
        "workload.rl.engine",
        "workload.rl.gpu_memory_utilization",
        "workload.rl.tensor_parallel",
        "workload.rl.sleep_level",
        "workload.rl.offload_during_rollout",
        "workload.rl.engine_gpus",
        "workload.rl.async_rollout",
        "workload.ppo.epochs",
        "workload.ppo.mini_batches",
        "workload.ppo.critic_model",
        "workload.ppo.critic_offload",
        "workload.ppo.frozen_offload",
        "workload.ppo.reward",
        "workload.ppo.reward_model",
        "precision.compute",
        "precision.weights",
        "parallelism.zero_stage",
        "techniques.activation_checkpointing",
        "techniques.attention",
        "techniques.offload",
        "hardware.count",
    ),
    cannot_say={"export": "OpenRLHF command lines are read, not written"},
)
