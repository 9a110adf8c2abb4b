"""The plan: what is trained, how, and on what. One typed object whose sections validate themselves.

Every key but the architecture has a default, documented beside the field and in the README. The plan's file
format, its YAML and its share link are planner/plan/codec.py's; the key structure they share (SECTIONS, NESTED,
TOP_KEYS) is here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, get_args

from planner.errors import bad
from planner.plan.dtypes import (
    DEFAULT_GROUP_SIZE,
    QUANTIZED,
    TORCHAO_WEIGHTS,
    WEIGHT_DTYPES,
    ComputeDType,
    DType,
    KvDType,
    WeightDType,
)
from planner.plan.models import Model, presets
from planner.plan.pipeline import split_problem
from planner.plan.ppo import Ppo
from planner.plan.validate import between, check_fields, required, resolved, text

SCHEMA = "vram-planner/v1"

Task = Literal["pretrain", "finetune", "lora", "qlora", "inference"]
TRAINING_TASKS = ("pretrain", "finetune", "lora", "qlora")
ADAPTER_TASKS = ("lora", "qlora")  # tasks that train low-rank adapters (workload.lora) on a frozen base
# precision.weights each task with frozen or served weights allows (pretrain and finetune train theirs and keep
# them in the activation dtype)
FROZEN_WEIGHTS: dict[str, tuple[str, ...]] = {
    "lora": tuple(d for d in WEIGHT_DTYPES if d not in QUANTIZED),
    "qlora": QUANTIZED,
    "inference": WEIGHT_DTYPES,
}
MasterWeights = Literal["fp32", "none"]
ZeroStage = Literal[0, 1, 2, 3]
Optimizer = Literal[
    "adamw", "adamw_8bit", "paged_adamw", "paged_adamw_8bit", "adafactor", "lion", "muon", "sgd", "sgd_momentum"
]
# what the trained model optimizes: next_token (the language-model loss of pretraining and SFT), preference (a
# pairwise preference loss over chosen and rejected completions: DPO and its family) or reward (a scalar-score
# model trained on chosen/rejected pairs) or grpo (group-relative policy optimization: G sampled completions per
# prompt from a rollout engine, then a policy step on them) or ppo (proximal policy optimization with a value model,
# a reference and a reward model: workload.ppo) or distillation (a student trained on a frozen teacher's logits
# beside its own labels: torchtune's knowledge_distillation recipes).
Objective = Literal["next_token", "preference", "reward", "grpo", "ppo", "distillation"]
RL_OBJECTIVES = ("grpo", "ppo")  # the objectives that sample their completions with a rollout engine (workload.rl)
OBJECTIVE_TASKS = ("finetune", "lora", "qlora")  # the base adaptations a post-training objective combines with
# the preference losses: dpo (Rafailov et al. 2023, TRL loss_type "sigmoid"), ipo (loss_type "ipo"), simpo (Meng et
# al. 2024: length-normalized, no reference), orpo (Hong et al. 2024: SFT loss + odds ratio, no reference) and kto
# (Ethayarajh et al. 2024: unpaired completions labelled desirable or undesirable, TRL KTOTrainer loss_type "kto",
# whose KL term runs the policy and the reference over mismatched prompt/completion pairs)
PreferenceLoss = Literal["dpo", "ipo", "simpo", "orpo", "kto"]
REFERENCE_FREE = ("simpo", "orpo")
# where the reference log-probs come from: separate (a frozen copy of the model), adapters_disabled (the policy's
# base with its LoRA adapters disabled: TRL with a PEFT model and ref_model None), precomputed (TRL
# precompute_ref_log_probs: a pass before training) or none (reference-free losses)
Reference = Literal["separate", "adapters_disabled", "precomputed", "none"]
# how a preference trainer takes the completions' log-probs: selective (TRL selective_log_softmax: 16-bit logits,
# one row's log_softmax at a time) or upcast (the logits cast to fp32, one log_softmax over them all, its labels
# gathered: LLaMA-Factory's get_batch_logps)
LogProbs = Literal["selective", "upcast"]
# where GRPO's rollout engine runs: colocate (vLLM in the training processes, on the training GPUs: TRL
# vllm_mode "colocate", its default, huggingface/trl@f2cd577 trl/trainer/grpo_config.py; verl's hybrid
# actor_rollout_ref) or server (a vLLM server on other GPUs: TRL vllm_mode "server", `trl vllm-serve`) or generate
# (ppo only: the policy's own Hugging Face generate, TRL PPOTrainer's batch_generation, huggingface/trl@f2cd577
# trl/experimental/ppo/ppo_trainer.py)
RolloutEngine = Literal["colocate", "server", "generate"]
# vLLM sleep mode between phases (vllm/device_allocator/cumem.py CuMemAllocator.sleep): 0 off (the engine keeps
# its weights and KV cache through training), 1 (weights offloaded to host memory, KV cache discarded), 2 (both
# discarded; the weights are reloaded from the policy at the next sync). TRL sleeps at level 2 when
# vllm_enable_sleep_mode (trl@f2cd577 trl/generation/vllm_generation.py `self.llm.sleep(level=2)`); verl at 2 in
# its hybrid engine, 1 when colocated (volcengine/verl@b178a3c verl/workers/rollout/vllm_rollout/
# vllm_async_server.py sleep)
SleepLevel = Literal[0, 1, 2]
LoraTarget = Literal["q", "k", "v", "o", "gate", "up", "down"]
OptimizerImpl = Literal["foreach", "fused", "forloop"]
OptimizerLibrary = Literal["bitsandbytes", "torchao"]  # whose 8-bit AdamW: their state layouts differ
EIGHT_BIT_OPTIMIZERS = ("adamw_8bit", "paged_adamw_8bit")
Checkpointing = Literal["none", "selective", "selective_op", "full", "every_k"]
Attention = Literal["flash", "eager"]
Offload = Literal["none", "optimizer", "optimizer_and_params"]
Loss = Literal["full", "chunked", "fused"]
CompileScope = Literal["blocks", "loss", "blocks_and_loss"]
LoraVariant = Literal["lora", "dora"]
Fp8Recipe = Literal["tensorwise", "rowwise", "mxfp8", "nvfp4"]
PipelineSchedule = Literal["1f1b", "interleaved_1f1b", "gpipe", "zero_bubble"]
PipelineSplit = Literal["auto", "even", "weighted"]  # see planner/plan/pipeline.py
FractionScope = Literal["all", "all_but_graphs", "device", "static"]
Framework = Literal[
    "generic",
    "hf_trainer",
    "accelerate_fsdp",
    "deepspeed",
    "torchtune",
    "torchtitan",
    "megatron",
    "axolotl",
    "vllm",
    "sglang",
    "hf_generate",
    "gpt_fast",
]
INFERENCE_FRAMEWORKS = ("vllm", "sglang", "hf_generate", "gpt_fast")

MAX_SEQUENCE = 16_777_216
MAX_BATCH = 1_048_576
MAX_DEGREE = 65_536
MAX_GPUS = 1_048_576


@dataclass(frozen=True, kw_only=True)
class Lora:
    """Low-rank adapters (Hu et al. 2021) on the named projections of every layer."""

    rank: int = field(default=8, metadata=between(1, 65_536))
    """Rank r of each adapter's two matrices (d × r and r × k)."""
    alpha: float = field(default=16.0, metadata=between(0, 1e6))
    """Scaling alpha / rank of the adapters' output; no effect on memory."""
    targets: tuple[LoraTarget, ...] = ("q", "v")
    """The projections of every layer that get adapters: `q k v o` (attention), `gate up down` (MLP)."""
    dropout: float = field(default=0.0, metadata=between(0, 0.99))
    """Dropout on the adapters' input; above 0 it keeps a dropped-out copy of each targeted input for backward."""
    variant: LoraVariant = "lora"
    """`lora` or `dora` (weight-decomposed LoRA: a learned magnitude per output row)."""

    def __post_init__(self) -> None:
        check_fields(self, "workload.lora")
        targets = self.targets
        if len(set(targets)) != len(targets):
            raise bad("workload.lora.targets", list(targets), "names a projection twice")
        object.__setattr__(self, "targets", tuple(t for t in get_args(LoraTarget) if t in targets))


# how errors name the MLPs without a gate projection
UNGATED = {"gelu": "GeLU", "relu2": "squared-ReLU"}


@dataclass(frozen=True, kw_only=True)
class Inference:
    """Generation: prefill of the prompts, then decode token by token with a KV cache."""

    batch_size: int = field(default=1, metadata=between(1, MAX_BATCH))
    """Sequences generated together."""
    prompt_tokens: int = field(default=1024, metadata=between(1, MAX_SEQUENCE))
    """Tokens of each prompt (prefill)."""
    output_tokens: int = field(default=256, metadata=between(1, MAX_SEQUENCE))
    """Tokens generated per sequence (decode), at least one: the time model divides by them."""
    gpu_memory_utilization: float | None = field(default=None, metadata=between(0.05, 1.0))
    """A serving engine (vLLM-style): the fraction of GPU memory it claims; the KV cache fills what weights and
    activations leave. Default: none (a plain generate() loop whose cache grows with the tokens)."""
    prefill_chunk_tokens: int | None = field(default=None, metadata=between(1, MAX_SEQUENCE))
    """Chunked prefill: tokens per prefill forward. Default: the whole prompt batch; when serving, vLLM's
    `max_num_batched_tokens` for the GPU and release (16,384 on 160 GiB or more from 0.28.0, 8,192 on 70 GiB or more
    other than the A100, else 2,048; `vllm_batch_defaults` in planner/memory/inference.py), SGLang's 8,192."""
    max_num_seqs: int | None = field(default=None, metadata=between(1, MAX_BATCH))
    """A serving engine's cap on running sequences (vLLM `--max-num-seqs`); its sampler warm-up at startup holds logits
    for this many requests. Default: vLLM's for the GPU and release: 1,024 on 70 GiB or more other than the A100, else
    256 (256 everywhere before 0.8.5); at least `batch_size`."""
    fraction_scope: FractionScope = "all"
    """What `gpu_memory_utilization` covers: `all` (vLLM ≥ 0.20: weights, KV cache, the profile run's activations, CUDA
    graphs), `all_but_graphs` (vLLM 0.9.1–0.19: graphs captured after the KV cache, on top), `device` (vLLM < 0.9.1: a
    fraction of the device for everything on it, the CUDA context included; graphs on top) or `static` (SGLang's
    `mem_fraction_static`: weights and the KV pool; activations and graphs on top); the `vllm` recipe picks it from
    `framework_release`."""
    cuda_graphs: bool = True
    """A serving engine captures decode CUDA graphs (their pool is an item: 512 MiB); off is vLLM's `--enforce-eager`,
    SGLang's `--disable-cuda-graph`."""
    static_cache: bool = False
    """A generate() loop's KV cache preallocated for the whole context, rounded up to 8 tokens (HF
    `cache_implementation="static"`, gpt-fast and torchao `setup_caches`): no growth copy; with `techniques.compile` the
    decode step is a captured CUDA graph whose pool keeps its activations."""
    mask_buffer: bool = False
    """A bool context × context causal mask beside the static cache (gpt-fast and torchao model.py; torchao's
    `--linear_causal_mask` drops it)."""
    expand_kv: bool = False
    """Each layer's attention repeats the whole cache's K and V to every query head before SDPA (gpt-fast and torchao
    model.py `repeat_interleave`; HF eager attention's `repeat_kv`)."""
    math_sdpa_decode: bool = False
    """The decode step runs under SDPA's math backend (torchao generate.py `decode_n_tokens`: `sdpa_kernel(MATH)`),
    which upcasts fp16 or bf16 query, key and value to fp32 over the whole cache."""
    quantize_on_load: bool = False
    """The weights are loaded in the compute dtype and quantized on the GPU by torchao's `quantize_` (torchao
    generate.py): every nn.Linear is quantized, the output head's included, and the segments the quantized weights were
    split off stay reserved (all of the load's without `--compile`, whose graph capture calls `empty_cache`;
    planner/memory/quantize_load.py)."""
    dynamic_activation_quant: bool = False
    """With `quantize_on_load`, int8 or fp8 weights whose matmuls run in their own format: torchao's dynamic activation
    quantization (`int8_dynamic_activation_int8_weight`, `float8_dynamic_activation_float8_weight`: `torch._int_mm`,
    `torch._scaled_mm`), so no 16-bit copy of a weight is made and prefill dequantizes none; float8's float32 scales
    make its quantization temporaries float32."""
    prefix_caching: bool = False
    """vLLM `--enable-prefix-caching`: a hybrid model's request holds 2 state blocks per Mamba group (the align mode of
    vLLM 0.20-0.30) instead of 1; attention-only models are not affected."""

    def __post_init__(self) -> None:
        check_fields(self, "workload.inference")
        if self.max_num_seqs is not None and self.max_num_seqs < self.batch_size:
            raise bad(
                "workload.inference.max_num_seqs",
                self.max_num_seqs,
                f"is below batch_size ({self.batch_size}): the engine runs at most this many at once",
            )
        if self.mask_buffer and not self.static_cache:
            raise bad(
                "workload.inference.mask_buffer",
                True,
                "needs workload.inference.static_cache (the mask is sized to the preallocated cache)",
            )

    @property
    def context_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens

    @property
    def engine_fraction(self) -> float:
        """gpu_memory_utilization of a serving engine (read where the plan serves through one)."""
        return required(self.gpu_memory_utilization, "workload.inference.gpu_memory_utilization")


@dataclass(frozen=True, kw_only=True)
class Preference:
    """Pairwise preference training (workload.objective preference): chosen and rejected completions of each
    prompt run as one batch of 2 × micro_batch_size sequences (huggingface/trl@f2cd577
    trl/trainer/dpo_trainer.py DataCollatorForPreference: prompts repeated, chosen then rejected concatenated)."""

    loss_type: PreferenceLoss = "dpo"
    """The preference loss: `dpo` (TRL loss_type sigmoid), `ipo` and `kto` (TRL KTOTrainer: unpaired completions,
    each labelled desirable or not, with a KL term from a mismatched batch) need a reference; `simpo` and `orpo` are
    reference-free."""
    reference: Reference | None = None
    """Where the reference log-probs come from: `separate` (a frozen copy of the model), `adapters_disabled` (the
    policy's base with its LoRA adapters off: TRL with a PEFT model and ref_model None), `precomputed` (TRL
    `precompute_ref_log_probs`: a pass before training) or `none` (reference-free losses). Default: none for simpo and
    orpo; adapters_disabled for task lora and qlora; else separate."""

    log_probs: LogProbs = "selective"
    """How the trainer takes the completions' log-probs: `selective` (TRL's selective_log_softmax: the 16-bit
    logits and one row's log-softmax at a time, huggingface/trl@f2cd577 trl/trainer/utils.py) or `upcast` (the
    logits cast to fp32 and one log_softmax over all of them: LLaMA-Factory's get_batch_logps,
    hiyouga/LLaMA-Factory@ff6d4d1 src/llamafactory/train/trainer_utils.py and train/dpo/trainer.py
    concatenated_forward)."""

    def __post_init__(self) -> None:
        check_fields(self, "workload.preference")
        free = self.loss_type in REFERENCE_FREE
        if self.reference not in (None, "none") and free:
            raise bad(
                "workload.preference.reference",
                self.reference,
                f"must be none: the {self.loss_type} loss uses no reference model",
            )
        if self.reference == "none" and not free:
            raise bad(
                "workload.preference.reference",
                "none",
                f"needs a reference for the {self.loss_type} loss (separate, adapters_disabled or precomputed)",
            )


@dataclass(frozen=True, kw_only=True)
class Rl:
    """The rollout of GRPO and PPO (workload.objective grpo or ppo). GRPO: each optimizer step samples
    num_generations completions for each of its prompts with a rollout engine, then trains the policy on them.
    micro_batch_size and global_batch_size count completions, as TRL's per_device_train_batch_size does
    (trl@f2cd577 grpo_config.py: "The effective batch size ... must be evenly divisible by" num_generations);
    workload.sequence_length is prompt + completion."""

    num_generations: int = field(default=8, metadata=between(1, 1024))
    """Completions G sampled per prompt (TRL `num_generations`; 2 or more for grpo, whose `global_batch_size` must be
    a multiple of it); ppo: samples per prompt (OpenRLHF `--rollout.n_samples_per_prompt`, default 1)."""
    prompts_per_step: int | None = field(default=None, metadata=between(1, MAX_BATCH))
    """Prompts per optimizer step; × `num_generations` it must equal `global_batch_size`. Default: `global_batch_size /
    num_generations` (TRL: one generation batch a step)."""
    completion_length: int = field(default=512, metadata=between(1, MAX_SEQUENCE))
    """Tokens generated per completion (TRL `max_completion_length`); the prompt is the rest of
    `workload.sequence_length`."""
    beta: float = field(default=0.0, metadata=between(0.0, 1e6))
    """KL coefficient: 0 loads no reference model (TRL's default); above 0 a reference forward per step."""
    engine: RolloutEngine = "colocate"
    """Where the rollout engine runs: `colocate` (vLLM in the training processes, on the training GPUs: TRL vllm_mode
    colocate, its default; verl's hybrid engine), `server` (a vLLM server on other GPUs: `trl vllm-serve`) or
    `generate` (ppo only: TRL PPOTrainer's own Hugging Face generate with the policy)."""
    gpu_memory_utilization: float = field(default=0.3, metadata=between(0.05, 0.95))
    """The colocated engine's fraction of GPU memory (TRL `vllm_gpu_memory_utilization`, 0.3 in colocate)."""
    sleep_level: SleepLevel = 0
    """vLLM sleep mode between phases: 0 off (the engine keeps its weights and KV cache through training), 1 (weights to
    host memory, KV cache freed), 2 (both freed; the weights reload from the policy at the next sync). TRL sleeps at 2
    with `vllm_enable_sleep_mode`, off by default."""
    tensor_parallel: int = field(default=1, metadata=between(1, MAX_DEGREE))
    """The engine's tensor-parallel degree (TRL `vllm_tensor_parallel_size`); colocated, it must divide
    `hardware.count`."""
    offload_during_rollout: bool = False
    """The policy's parameters and optimizer states move to host memory during rollout (verl `param_offload` and
    `optimizer_offload`; TRL keeps them on the GPU)."""
    engine_gpus: int = resolved(between(0, MAX_GPUS))
    """GPUs of a `server` engine, beside the `hardware.count` training GPUs: `tensor_parallel` × its replicas (`trl
    vllm-serve --tensor_parallel_size --data_parallel_size`; OpenRLHF `vllm_num_engines` × `vllm_tensor_parallel_size`;
    verl one_step_off_policy `rollout.nnodes` × `n_gpus_per_node`). The job pays for them. Default: `tensor_parallel`
    (one replica) for a server, 0 for a colocated engine (it runs on the training GPUs)."""
    async_rollout: bool = False
    """A `server` engine generates the next step's completions while the policy trains on this step's, one step off
    policy (verl's one_step_off_policy recipe, OpenRLHF `--async_train`, TRL's experimental AsyncGRPOTrainer). Off, the
    two alternate: the trainer waits for the rollout and the engine for the step (TRL's GRPOTrainer)."""

    def __post_init__(self) -> None:
        check_fields(self, "workload.rl")
        server = self.engine == "server"
        if server and (self.sleep_level or self.offload_during_rollout):
            raise bad(
                "workload.rl.engine",
                "server",
                "runs on other GPUs: sleep_level and offload_during_rollout apply to a colocated engine",
            )
        if self.engine == "generate" and (
            self.sleep_level
            or self.gpu_memory_utilization != 0.3
            or self.tensor_parallel > 1
            or self.offload_during_rollout
        ):
            raise bad(
                "workload.rl.engine",
                "generate",
                "is the policy's own generate: sleep_level, gpu_memory_utilization, tensor_parallel and "
                "offload_during_rollout are a vLLM engine's",
            )

        if self.engine_gpus is None:
            object.__setattr__(self, "engine_gpus", self.tensor_parallel if server else 0)
        if not server and (self.engine_gpus or self.async_rollout):
            key, value = (
                ("workload.rl.engine_gpus", self.engine_gpus)
                if self.engine_gpus
                else ("workload.rl.async_rollout", True)
            )
            raise bad(key, value, "applies to engine server: a colocated engine shares the training GPUs")
        if server and (not self.engine_gpus or self.engine_gpus % self.tensor_parallel):
            raise bad(
                "workload.rl.engine_gpus",
                self.engine_gpus,
                f"must be a positive multiple of workload.rl.tensor_parallel ({self.tensor_parallel}): replicas of "
                "tensor_parallel GPUs each",
            )

    @property
    def engine_replicas(self) -> int:
        """Data-parallel copies of a server engine (0 colocated: one per tensor-parallel group of training GPUs)."""
        return self.engine_gpus // self.tensor_parallel


@dataclass(frozen=True, kw_only=True)
class Distillation:
    """Knowledge distillation (workload.objective distillation): a frozen teacher's no-grad forward over the
    student's batch, and a forward-KL loss on both models' logits beside the student's cross-entropy
    (pytorch/torchtune@bd2a0fc recipes/knowledge_distillation_single_device.py _loss_step)."""

    teacher: str | None = field(default=None, metadata=text(100))
    """The teacher model's preset id; required for objective distillation. Its vocabulary must be the student's."""
    teacher_weights: WeightDType | None = None
    """The teacher's weights: nf4, int8, fp8, ... for a quantized teacher. Default: the compute dtype (torchtune loads
    it in the recipe's dtype, `_setup_teacher_model` `set_default_dtype(self._dtype)`)."""
    loss_chunks: int = field(default=8, metadata=between(1, 1024))
    """Slices of tokens the KD loss runs over (torchtune ForwardKLWithChunkedOutputLoss `num_output_chunks`)."""

    def __post_init__(self) -> None:
        check_fields(self, "workload.distillation")
        if self.teacher is not None and self.teacher not in presets():
            raise bad(
                "workload.distillation.teacher",
                self.teacher,
                f"is not a known preset; known: {', '.join(sorted(presets()))}",
            )

    @property
    def teacher_preset(self) -> str:
        """The teacher's preset id (read where the objective is distillation, which requires it)."""
        return required(self.teacher, "workload.distillation.teacher")


@dataclass(frozen=True, kw_only=True)
class Workload:
    task: Task = "pretrain"
    """`pretrain`, `finetune` (full; the same anatomy), `lora`, `qlora` (adapters on a frozen base: 16-bit, or 4-bit) or
    `inference`."""
    sequence_length: int = field(default=4096, metadata=between(1, MAX_SEQUENCE))
    """Tokens per sequence."""
    micro_batch_size: int = field(default=1, metadata=between(1, MAX_BATCH))
    """Sequences per GPU per forward/backward."""
    global_batch_size: int = resolved(between(1, MAX_BATCH * MAX_DEGREE))
    """Sequences per optimizer step; sets gradient accumulation. Default: `micro_batch_size × data` (×
    `pipeline_microbatches` where given)."""
    steps: int | None = field(default=None, metadata=between(1, 10**12))
    """Optimizer steps of the whole job, for its cost; or give `train_tokens`. Default: none (costs per 10⁹ tokens)."""
    train_tokens: int | None = field(default=None, metadata=between(1, 10**16))
    """Tokens of the whole job, for its cost, instead of `steps` (a count or with a suffix, as `model.params`: `1T`,
    `500B`). Default: none (costs per 10⁹ tokens)."""
    lora: Lora = field(default_factory=Lora)
    """The adapters of task lora and qlora."""
    inference: Inference = field(default_factory=Inference)
    """Generation, for task inference."""
    objective: Objective = "next_token"
    """What the trained model optimizes: `next_token` (the language-model loss of pretraining and SFT), `preference`
    (DPO family: chosen + rejected in one 2 × micro-batch forward), `reward` (a reward model: an h × 1 score head, no
    vocabulary logits), `grpo` (group-relative policy optimization: G completions per prompt from a rollout engine,
    then a policy step on them), `ppo` (proximal policy optimization: a policy and a value model trained, a frozen
    reference and reward model, completions from a rollout) or `distillation` (the model trained on a frozen
    teacher's logits beside its own cross-entropy); a post-training objective needs task `finetune`, `lora` or
    `qlora`."""
    preference: Preference = field(default_factory=Preference)
    """Preference training, for objective preference."""
    rl: Rl = field(default_factory=Rl)
    """The rollout and KL settings, for objectives grpo and ppo."""
    ppo: Ppo = field(default_factory=Ppo)
    """PPO's models and updates, for objective ppo."""
    distillation: Distillation = field(default_factory=Distillation)
    """Knowledge distillation, for objective distillation."""

    def __post_init__(self) -> None:
        check_fields(self, "workload")
        self._resolve_objective()
        if self.train_tokens is not None and self.steps is not None:
            raise bad(
                "workload.train_tokens", self.train_tokens, "and workload.steps both set the job's length; give one"
            )

    def _resolve_objective(self) -> None:
        """Check the objective against the task, and resolve the preference reference's default."""
        pref = self.preference
        if self.objective not in RL_OBJECTIVES and self.rl != Rl():
            raise bad("workload.rl", _plain_fields(self.rl), "applies to workload.objective grpo or ppo")
        if self.objective != "ppo" and self.ppo != Ppo():
            raise bad("workload.ppo", _plain_fields(self.ppo), "applies to workload.objective ppo")
        if self.objective in RL_OBJECTIVES and self.rl.completion_length >= self.sequence_length:
            raise bad(
                "workload.rl.completion_length",
                self.rl.completion_length,
                f"must be below workload.sequence_length ({self.sequence_length}: prompt + completion)",
            )
        if self.objective != "next_token" and self.task not in OBJECTIVE_TASKS:
            raise bad(
                "workload.objective",
                self.objective,
                f"post-trains a pretrained model: workload.task must be finetune, lora or qlora, not {self.task}",
            )
        self._check_distillation()
        if self.objective != "preference":
            if pref != Preference():
                raise bad("workload.preference", _plain_fields(pref), "applies to workload.objective preference")
            return
        if pref.loss_type == "kto" and self.micro_batch_size < 2:
            # trl@f2cd577 trl/trainer/kto_trainer.py __init__: "Actual (not effective) batch size must be > 1"
            raise bad(
                "workload.micro_batch_size",
                self.micro_batch_size,
                "must be at least 2 for the kto loss: its KL term pairs each completion with another example's prompt",
            )
        if pref.reference == "adapters_disabled" and self.task not in ADAPTER_TASKS:
            raise bad(
                "workload.preference.reference",
                "adapters_disabled",
                f"needs adapters to disable (workload.task lora or qlora, not {self.task})",
            )
        if pref.reference is None:
            ref: Reference = (
                "none"
                if pref.loss_type in REFERENCE_FREE
                else "adapters_disabled"
                if self.task in ADAPTER_TASKS
                else "separate"
            )
            object.__setattr__(self, "preference", replace(pref, reference=ref))

    def _check_distillation(self) -> None:
        """A distillation plan names its teacher; the block belongs to that objective."""
        kd = self.distillation
        if self.objective != "distillation" and kd != Distillation():
            raise bad("workload.distillation", _plain_fields(kd), "applies to workload.objective distillation")
        if self.objective == "distillation" and kd.teacher is None:
            raise bad("workload.distillation.teacher", None, "is required: the teacher model's preset")

    @property
    def sequences_per_forward(self) -> int:
        """Sequences of one micro-batch's forward: a chosen and a rejected completion per pair for preference and
        reward training (TRL DPOTrainer and RewardTrainer concatenate them into one batch), else the micro-batch
        (KTO's completions are unpaired: trl@f2cd577 trl/trainer/kto_trainer.py _compute_loss, one example each)."""
        paired = self.objective == "reward" or (self.objective == "preference" and self.preference.loss_type != "kto")
        return self.micro_batch_size * (2 if paired else 1)

    @property
    def logit_positions(self) -> int:
        """Positions of each sequence the trainer computes logits at: all of them, but GRPO's completion only plus
        one (TRL passes `logits_to_keep + 1` with logits_to_keep the completion length and drops the last:
        huggingface/trl@f2cd577 trl/trainer/grpo_trainer.py _get_per_token_logps_and_entropies; verl computes the
        whole sequence's logits and slices the response after, volcengine/verl@b178a3c
        verl/workers/actor/dp_actor.py _forward_micro_batch, which this model does not follow: docs/limits.md)."""
        return self.rl.completion_length + 1 if self.objective == "grpo" else self.sequence_length

    @property
    def rollout_samples(self) -> int:
        """Completions one rollout generates: a grpo step's global_batch_size; a ppo iteration's global_batch_size
        × ppo.mini_batches (TRL PPOTrainer: batch_size = mini_batch_size × num_mini_batches, trl@f2cd577
        trl/experimental/ppo/ppo_trainer.py __init__)."""
        return self.global_batch_size * (self.ppo.mini_batches if self.objective == "ppo" else 1)

    @property
    def reference(self) -> str:
        """Where the reference log-probs come from: workload.preference.reference for preference training; for
        grpo with beta > 0 the policy's base with adapters off (task lora, qlora) or a separate copy (TRL
        GRPOTrainer.__init__: beta 0.0 → ref_model None; a PEFT model → None, adapters disabled; else
        create_model_from_path, trl@f2cd577 trl/trainer/grpo_trainer.py); else none."""
        if self.objective == "preference":
            return required(self.preference.reference, "workload.preference.reference")  # resolved by preference
        if self.objective in RL_OBJECTIVES and self.rl.beta > 0:
            return "adapters_disabled" if self.task in ADAPTER_TASKS else "separate"
        return "none"


@dataclass(frozen=True, kw_only=True)
class Precision:
    compute: ComputeDType = "bf16"
    """Dtype of matmuls and activations: `fp32`, `bf16`, `fp16` or `fp8` (float8 matmuls, bf16 activations)."""
    master_weights: MasterWeights = "fp32"
    """`fp32` (mixed precision: an fp32 copy the optimizer updates) or `none` (pure low-precision training)."""
    gradients: DType = resolved()
    """Dtype gradients are kept and reduced in. Default: fp32 with fp32 master weights, else the compute dtype."""
    optimizer: Optimizer = "adamw"
    """`adamw`, `adamw_8bit`, `paged_adamw`, `paged_adamw_8bit`, `adafactor`, `lion`, `muon`, `sgd` or `sgd_momentum`.
    """
    optimizer_state: DType = resolved()
    """Dtype of the optimizer's states. Default: fp32 with fp32 master weights, else the compute dtype."""
    optimizer_impl: OptimizerImpl = "foreach"
    """How the step runs: `foreach` (PyTorch's CUDA default: a temporary copy of the states at the step), `fused` or
    `forloop` (one tensor at a time)."""
    optimizer_library: OptimizerLibrary | None = None
    """Whose 8-bit AdamW (paged is bitsandbytes only): `torchao` keeps tensors its block does not divide in the
    parameter's dtype and a 1 KiB map per state of each quantized tensor; both keep tensors under 4,096 values at full
    precision. Default: bitsandbytes (8-bit AdamW)."""
    optimizer_block_size: int | None = field(default=None, metadata=between(16, 65_536))
    """8-bit AdamW: values per fp32 scale: 256 from bitsandbytes 0.44 and torchao 0.6, 2048 before. Default: 256 (8-bit
    AdamW)."""
    fp32_embedding_states: bool = False
    """HF Trainer's override: bitsandbytes 8-bit optimizers keep the states of nn.Embedding weights in 32 bits (the
    `hf_trainer` and `axolotl` recipes set it)."""
    weights: WeightDType = resolved()
    """Dtype of frozen or served weights (task lora, qlora, inference): `fp32 bf16 fp16 fp8 int8 int4 nf4`. Default: nf4
    for qlora; for inference the dtype a preset's checkpoint ships in (DeepSeek-V3: fp8); else the compute dtype."""
    quant_group_size: int | None = field(default=None, metadata=between(1, 1_048_576))
    """int4 and nf4 weights: values per quantization block. Default: 128 (int4), 64 (nf4)."""
    double_quant: bool = False
    """nf4: the block scales are quantized too (QLoRA double quantization)."""
    kv_cache: KvDType = resolved()
    """Dtype of the inference KV cache: `fp32 bf16 fp16 fp8 int8`. Default: the compute dtype."""
    fp8_recipe: Fp8Recipe | None = None
    """Float8 training (compute fp8): how tensors are scaled: `tensorwise` or `rowwise` (torchao Float8Linear: one scale
    per tensor or per row), `mxfp8` (8-bit, one e8m0 scale per 32 values) or `nvfp4` (4-bit, one e4m3 scale per 16
    values). Default: tensorwise when compute is fp8."""
    fp8_all_gather: bool = False
    """FSDP2 all-gathers the layers' weights in float8 instead of 16 bits (torchao; ZeRO-3 only)."""

    def __post_init__(self) -> None:
        check_fields(self, "precision")
        default = "fp32" if self.master_weights == "fp32" else self.activation_dtype
        if self.gradients is None:
            object.__setattr__(self, "gradients", default)
        if self.optimizer_state is None:
            object.__setattr__(self, "optimizer_state", default)
        if self.kv_cache is None:
            object.__setattr__(self, "kv_cache", self.activation_dtype)
        if self.fp8_recipe is None and self.compute == "fp8":
            object.__setattr__(self, "fp8_recipe", "tensorwise")
        if self.fp8_recipe is not None and self.compute != "fp8":
            raise bad("precision.fp8_recipe", self.fp8_recipe, "applies to precision.compute fp8")
        if self.fp8_all_gather and self.compute != "fp8":
            raise bad("precision.fp8_all_gather", True, "applies to precision.compute fp8")
        self._resolve_eight_bit()

    def _resolve_eight_bit(self) -> None:
        eight_bit = self.optimizer in EIGHT_BIT_OPTIMIZERS
        for key in ("optimizer_library", "optimizer_block_size", "fp32_embedding_states"):
            if getattr(self, key) not in (None, False) and not eight_bit:
                raise bad(
                    f"precision.{key}",
                    getattr(self, key),
                    "applies to precision.optimizer adamw_8bit or paged_adamw_8bit",
                )
        if not eight_bit:
            return
        if self.optimizer_library is None:
            object.__setattr__(self, "optimizer_library", "bitsandbytes")
        if self.optimizer_block_size is None:
            object.__setattr__(self, "optimizer_block_size", 256)
        if self.optimizer_library == "torchao" and (self.optimizer == "paged_adamw_8bit" or self.fp32_embedding_states):
            key = "optimizer" if self.optimizer == "paged_adamw_8bit" else "fp32_embedding_states"
            raise bad(
                f"precision.{key}", getattr(self, key), "is bitsandbytes only (precision.optimizer_library torchao)"
            )

    @property
    def float8_recipe(self) -> Fp8Recipe:
        """fp8_recipe of float8 compute, resolved to tensorwise when not given (read under compute fp8)."""
        return required(self.fp8_recipe, "precision.fp8_recipe")

    @property
    def eight_bit_library(self) -> OptimizerLibrary:
        """optimizer_library of an 8-bit optimizer, resolved to bitsandbytes when not given (read under adamw_8bit
        or paged_adamw_8bit)."""
        return required(self.optimizer_library, "precision.optimizer_library")

    @property
    def eight_bit_block_size(self) -> int:
        """optimizer_block_size of an 8-bit optimizer, resolved to 256 when not given (read under adamw_8bit or
        paged_adamw_8bit)."""
        return required(self.optimizer_block_size, "precision.optimizer_block_size")

    @property
    def mixed(self) -> bool:
        """Low-precision compute with an fp32 master copy of the weights."""
        return self.master_weights == "fp32" and self.compute != "fp32"

    @property
    def activation_dtype(self) -> ComputeDType:
        """Dtype of activations and of weights stored for compute: float8 training (torchao Float8Linear) casts
        to fp8 inside each matmul and keeps bf16 tensors around it."""
        return "bf16" if self.compute == "fp8" else self.compute


@dataclass(frozen=True, kw_only=True)
class Techniques:
    activation_checkpointing: Checkpointing = "none"
    """`none`, `selective` (Megatron: the attention core recomputed), `selective_op` (torchtitan's op-level policy:
    matmul and attention outputs saved, the rest recomputed), `full` (every layer keeps its input only and recomputes)
    or `every_k` (every `checkpoint_every`-th layer, torchtitan's layer AC with ac_freq = k: ⌊L/k⌋ layers)."""
    checkpoint_every: int = field(default=2, metadata=between(1, 1024))
    """k for `every_k` checkpointing."""
    attention: Attention = "flash"
    """`flash` (fused SDPA/FlashAttention: no s × s scores kept) or `eager` (scores materialized)."""
    offload: Offload = "none"
    """`none`, `optimizer` (states and master weights in CPU memory) or `optimizer_and_params` (and the parameters;
    ZeRO-3 only)."""
    moe_capacity_factor: float | None = field(default=None, metadata=between(0.1, 64))
    """Token-dropping MoE training (GShard, Switch, Megatron `--moe-expert-capacity-factor`): each expert's buffer is
    padded to this × its even share of the routed tokens. Default: none (dropless: HF, MegaBlocks, vLLM)."""
    optimizer_in_backward: bool = False
    """The optimizer steps each parameter from a post-accumulate-grad hook as soon as its gradient is ready, and frees
    the gradient (torchtune `optimizer_in_bwd`): no full set of gradients ever exists; needs one micro-batch per step,
    no ZeRO and no offload."""
    loss: Loss = "full"
    """Cross-entropy over the vocabulary: `full` (HF: the whole logits upcast to fp32), `chunked` (torchtune
    CEWithChunkedOutputLoss: the output projection and the fp32 loss run on `loss_chunks` slices of tokens) or `fused`
    (Liger fused linear cross-entropy: logits exist one chunk at a time, gradients made in forward)."""
    loss_chunks: int = field(default=8, metadata=between(1, 1024))
    """Token slices of the `chunked` loss."""
    compile: bool = False
    """torch.compile. Training: fused elementwise ops save fewer intermediates. Generation over a static cache: the
    decode step is captured as a CUDA graph."""
    compile_scope: CompileScope = "blocks_and_loss"
    """What compile covers: `blocks` (the transformer blocks: fewer saved intermediates, fused elementwise time;
    torchtitan 2024-12 to 2025-03), `loss` (a compiled cross-entropy keeps no fp32 copy of the logits) or
    `blocks_and_loss` (torchtitan from 2025-04, torchtune's compile, HF Trainer's torch_compile whose forward holds the
    loss)."""
    activation_offload: bool = False
    """Saved activations wait in pinned host memory between forward and backward (torchtune OffloadActivations); what
    stays on the GPU is itemized."""
    expandable_segments: bool = False
    """`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (PyTorch ≥ 2.1): the caching allocator maps pages into one
    growing segment per pool, so fewer freed blocks go unused (a smaller allocator reserve; torchtitan's launcher sets
    it)."""

    def __post_init__(self) -> None:
        check_fields(self, "techniques")
        if self.moe_capacity_factor is not None:
            object.__setattr__(self, "moe_capacity_factor", float(self.moe_capacity_factor))

    @property
    def compiled_blocks(self) -> bool:
        return self.compile and self.compile_scope != "loss"

    @property
    def compiled_loss(self) -> bool:
        return self.compile and self.compile_scope != "blocks"


@dataclass(frozen=True, kw_only=True)
class Parallelism:
    data: int = resolved(between(1, MAX_DEGREE))
    """Data-parallel degree. Default: `hardware.count / (tensor × pipeline × context)`."""
    zero_stage: ZeroStage = 0
    """ZeRO sharding over the data-parallel ranks: 0 (DDP), 1 (optimizer states), 2 (+ gradients), 3 (+ parameters; FSDP
    full shard)."""
    tensor: int = field(default=1, metadata=between(1, MAX_DEGREE))
    """Tensor-parallel degree: it must divide the heads and the MLP width (KV heads and ranks dividing one another)."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism: the tensor-parallel group splits the norms' and dropouts' activations (needs
    `tensor > 1`)."""
    pipeline: int = field(default=1, metadata=between(1, MAX_DEGREE))
    """Pipeline-parallel degree: stages of layers (see `pipeline_split`)."""
    context: int = field(default=1, metadata=between(1, MAX_DEGREE))
    """Context-parallel degree: it must divide `workload.sequence_length`."""
    expert: int = field(default=1, metadata=between(1, MAX_DEGREE))
    """Expert parallelism: MoE experts split over this many of the data × context ranks; it must divide `num_experts`.
    """
    pipeline_schedule: PipelineSchedule = "1f1b"
    """How micro-batches flow through the stages (what each holds in flight): `1f1b`, `interleaved_1f1b` (with 2+
    `virtual_stages`), `gpipe` or `zero_bubble`."""
    virtual_stages: int = field(default=1, metadata=between(1, 1024))
    """Model chunks per pipeline rank: 2 or more with `interleaved_1f1b`, else 1."""
    pipeline_split: PipelineSplit = "auto"
    """How the layers are spread over the pipeline × virtual-stage chunks: `even` (Megatron's default: the chunks must
    divide the layers), `weighted` (torchtitan, and Megatron's `--account-for-embedding/loss-in-pipeline-split`: the
    embedding and the output head count as a layer each, the first chunks take the remainder: 126 layers on 8 stages are
    15, 16 × 6, 15; 32 on 4 are 8, 9, 8, 7) or `auto` (even where the chunks divide the layers, else weighted). Every
    stage is evaluated and the most loaded one reported."""
    pipeline_layers: tuple[int, ...] | None = field(default=None, metadata=between(1, 100_000))
    """The layers of each chunk in order (Megatron's `--decoder-first/last-pipeline-num-layers`, torchtitan's
    `module_fqns_per_model_part`); when given it is the split and `pipeline_split` is unused. Default: none."""
    pipeline_microbatches: int | None = field(default=None, metadata=between(1, MAX_BATCH))
    """Micro-batches per step; sets `global_batch_size` when that is not given. Default: global batch ÷ (micro-batch ×
    data)."""
    async_tp: bool = False
    """torchtitan's async tensor parallelism: all-gathers and reduce-scatters overlapped with the matmuls (needs
    sequence parallelism and compiled blocks)."""
    flat_params: bool = False
    """FSDP1 flat parameters (`use_orig_params=True`, a unit per block) for lora and qlora under ZeRO-3: the frozen base
    shares each unit's FlatParameter with the adapters and gets a gradient too (FSDP2, the default, shards per
    parameter)."""
    reduce_bucket_elements: int | None = field(default=None, metadata=between(1, 10**11))
    """DeepSpeed ZeRO with `contiguous_gradients`: backward copies gradients into a flat bucket of this many elements
    (`reduce_bucket_size`) in the gradient dtype before reducing them (stage_1_and_2.py ipg_buffer, stage3.py
    `__ipg_bucket_flat_buffer`); ZeRO-3 also concatenates it into a second copy to reduce-scatter it; HF's "auto" is
    hidden_size². Default: none (no such bucket: DDP, FSDP; the `deepspeed` recipe: 5e8)."""
    sub_group_elements: int | None = field(default=None, metadata=between(1, 10**13))
    """DeepSpeed ZeRO's optimizer step flattens the gradients of at most this many partition elements at a time into an
    fp32 copy (ZeRO-3 `sub_group_size`); both copies live during the step. Default: none (the optimizer steps on the
    gradients as they are: PyTorch optimizers, FSDP; the `deepspeed` recipe: 1e9 at ZeRO-3, the whole partition at
    ZeRO-1/2)."""

    def __post_init__(self) -> None:
        check_fields(self, "parallelism")
        if (self.virtual_stages > 1) != (self.pipeline_schedule == "interleaved_1f1b"):
            raise bad(
                "parallelism.virtual_stages",
                self.virtual_stages,
                "must be 2 or more with pipeline_schedule interleaved_1f1b, and 1 with any other schedule",
            )

    @property
    def model_parallel(self) -> int:
        return self.tensor * self.pipeline * self.context


@dataclass(frozen=True, kw_only=True)
class Hardware:
    gpu: str = field(default="h100-sxm-80gb", metadata=text(100))
    """An id from gpu_catalog.yaml."""
    count: int = resolved(between(1, MAX_GPUS))
    """All the GPUs: it must equal data × tensor × pipeline × context, and an offering must rent it (a single instance
    without a network cannot be spanned). Default: `data × tensor × pipeline × context`."""
    offering: str | None = field(default=None, metadata=text(100))
    """An offering of the GPU in gpu_catalog.yaml (instance shape, network, host RAM, prices): it shapes the step time
    (links inside an instance, the network between them), the host RAM offload may use, and the cost. Default: none (the
    GPU's usual server and network, unpriced)."""
    host_memory_gib_per_gpu: float | None = field(default=None, metadata=between(0, 1_000_000))
    """Host RAM per GPU, GiB, that offloaded states may use; a plan that needs more does not fit, in `estimate` and
    `recommend` alike. Default: the offering's, else 128."""

    def __post_init__(self) -> None:
        check_fields(self, "hardware")


def _divisors(n: int, largest: int = 1 << 30) -> list[int]:
    """The divisors of `n` up to `largest` (n's own, for an error's allowed values)."""
    return [d for d in range(1, min(n, largest) + 1) if not n % d]


def tensor_degrees(m: Model, largest: int = 64) -> list[int]:
    """The tensor-parallel degrees up to `largest` that split the model's heads and MLP width (KV heads and
    ranks dividing one another)."""
    return [
        t
        for t in range(1, largest + 1)
        if not m.num_attention_heads % t
        and not m.intermediate_size % t
        and (not m.num_kv_heads % t or not t % m.num_kv_heads)
    ]


def _allowed_tensor(m: Model) -> str:
    """The tail of a tensor degree's error: the degrees that would split the model (worked out only to raise)."""
    return f"; allowed: {', '.join(map(str, tensor_degrees(m)))}"


def _allowed_experts(m: Model, ranks: int) -> str:
    """The tail of an expert degree's error: the degrees dividing both the experts and the data × context ranks."""
    return f"; allowed: {', '.join(map(str, _divisors(math.gcd(m.num_experts, ranks))))}"


@dataclass(frozen=True, kw_only=True)
class Plan:
    model: Model
    """The architecture."""
    workload: Workload = field(default_factory=Workload)
    """What is trained or served, and how much."""
    precision: Precision = field(default_factory=Precision)
    """Dtypes and the optimizer."""
    techniques: Techniques = field(default_factory=Techniques)
    """Memory-saving and speed techniques."""
    parallelism: Parallelism = field(default_factory=Parallelism)
    """How the model and the batch are split over the GPUs."""
    hardware: Hardware = field(default_factory=Hardware)
    """The GPUs."""
    name: str = field(default="", metadata=text(200))
    """A name for the plan, shown in the outputs' headings."""
    framework: Framework = "generic"
    """The training or serving stack; its recipes' defaults are laid under the plan's keys (codec.plan_from_dict,
    planner/frameworks.py; see docs/frameworks.md), and any key the plan gives wins. A Plan built directly only records
    it."""
    framework_release: str = field(default="", metadata=text(40))
    """The framework's release, a tagged version (torchtitan `0.1.0` … `0.2.2`) or a commit's date `YYYY-MM-DD`, where a
    recipe setting changed between releases (torchtitan compiled only the blocks from 2024-12-18 to 2025-04-01).
    Default: the latest."""

    def __post_init__(self) -> None:
        check_fields(self, "")
        self._resolve_degrees()
        self._check_splits()
        self._resolve_batch()
        self._check_schedule()
        self._check_optimizer_in_backward()
        if self.techniques.offload == "optimizer_and_params" and self.parallelism.zero_stage != 3:
            raise bad(
                "techniques.offload",
                "optimizer_and_params",
                "needs parallelism.zero_stage 3 (parameters are fetched layer by layer)",
            )
        self._check_weights()
        wl = self.workload
        self._check_rl()
        teacher = wl.distillation.teacher
        if teacher is not None and presets()[teacher].model.vocab_size != self.model.vocab_size:
            # the forward KL multiplies the two models' vocabulary rows elementwise (pytorch/torchtune@bd2a0fc
            # torchtune/modules/loss/kd_losses.py ForwardKLLoss: `teacher_prob * student_logprob`)
            raise bad(
                "workload.distillation.teacher",
                teacher,
                f"has vocab_size {presets()[teacher].model.vocab_size}, the student {self.model.vocab_size}: "
                "the KD loss needs one vocabulary",
            )
        if wl.objective != "next_token" and self.parallelism.pipeline > 1:
            # TRL's DPOTrainer and RewardTrainer run on accelerate (DDP, DeepSpeed ZeRO, FSDP): no pipeline stages
            raise bad(
                "parallelism.pipeline",
                self.parallelism.pipeline,
                f"is not modelled for workload.objective {wl.objective} (TRL trains without pipeline parallelism)",
            )
        if wl.task in ADAPTER_TASKS and self.model.mlp != "swiglu" and "gate" in wl.lora.targets:
            raise bad(
                "workload.lora.targets",
                list(wl.lora.targets),
                f"names gate, but a {UNGATED[self.model.mlp]} MLP has no gate projection",
            )

    def _check_rl(self) -> None:
        """A GRPO step's completions are whole groups, and a colocated engine's tensor-parallel groups tile the
        training GPUs (trl@f2cd577 trl/generation/vllm_generation.py: "tensor_parallel_size ... must divide
        world size")."""
        wl, count = self.workload, self.hardware.count
        if wl.objective not in RL_OBJECTIVES:
            return
        rl, batch = wl.rl, wl.rollout_samples
        if wl.objective == "grpo" and rl.num_generations < 2:
            raise bad("workload.rl.num_generations", rl.num_generations, "must be 2 or more: GRPO compares a group")
        if wl.objective == "grpo" and rl.engine == "generate":
            raise bad("workload.rl.engine", "generate", "is TRL PPOTrainer's: grpo samples with colocate or server")
        # ppo: one rollout feeds ppo.mini_batches optimizer steps (Workload.rollout_samples)
        what = "workload.global_batch_size" if wl.objective == "grpo" else "the rollout's completions"
        if batch % rl.num_generations:
            raise bad(
                "workload.global_batch_size",
                wl.global_batch_size,
                f"must be a multiple of workload.rl.num_generations ({rl.num_generations}): whole groups per step"
                if wl.objective == "grpo"
                else f"× ppo.mini_batches ({batch}) must be a multiple of workload.rl.num_generations "
                f"({rl.num_generations}): whole groups per rollout",
            )
        if rl.prompts_per_step is not None and rl.prompts_per_step * rl.num_generations != batch:
            raise bad(
                "workload.rl.prompts_per_step",
                rl.prompts_per_step,
                f"× num_generations ({rl.num_generations}) must equal {what} ({batch})",
            )
        if rl.engine == "colocate" and count % rl.tensor_parallel:
            raise bad(
                "workload.rl.tensor_parallel",
                rl.tensor_parallel,
                f"must divide hardware.count ({count}): colocated engines tile the training GPUs",
            )

    def _resolve_degrees(self) -> None:
        """Resolve parallelism.data and hardware.count from each other, then check they agree."""
        par, hw = self.parallelism, self.hardware
        if par.data is None:
            if hw.count is None:
                par = replace(par, data=1)
            elif hw.count % par.model_parallel:
                raise bad(
                    "hardware.count",
                    hw.count,
                    f"is not a multiple of tensor × pipeline × context ({par.tensor} × {par.pipeline} × {par.context})",
                )
            else:
                par = replace(par, data=hw.count // par.model_parallel)
        expected = par.data * par.model_parallel
        if hw.count is None:
            hw = replace(hw, count=expected)
        elif hw.count != expected:
            raise bad(
                "hardware.count",
                hw.count,
                f"must equal data × tensor × pipeline × context "
                f"= {par.data} × {par.tensor} × {par.pipeline} × {par.context}"
                f" = {expected}",
            )
        object.__setattr__(self, "parallelism", par)
        object.__setattr__(self, "hardware", hw)

    def _check_splits(self) -> None:
        """Each degree divides what it splits: heads, MLP width, experts, layers, tokens."""
        par, m, seq = self.parallelism, self.model, self.workload.sequence_length
        t = par.tensor
        if m.num_attention_heads % t:
            raise bad(
                "parallelism.tensor",
                t,
                f"does not divide model.num_attention_heads ({m.num_attention_heads})" + _allowed_tensor(m),
            )
        if m.num_kv_heads % t and t % m.num_kv_heads:
            raise bad(
                "parallelism.tensor",
                t,
                f"and model.num_kv_heads ({m.num_kv_heads}) must divide one another"
                " (fewer KV heads than ranks are replicated)" + _allowed_tensor(m),
            )
        if m.intermediate_size % t:
            raise bad(
                "parallelism.tensor",
                t,
                f"does not divide model.intermediate_size ({m.intermediate_size})" + _allowed_tensor(m),
            )
        if par.sequence_parallel and t == 1:
            raise bad(
                "parallelism.sequence_parallel",
                True,
                "needs parallelism.tensor > 1 (it splits the tensor-parallel group's activations)",
            )
        if self.techniques.moe_capacity_factor is not None and not m.num_experts:
            raise bad(
                "techniques.moe_capacity_factor",
                self.techniques.moe_capacity_factor,
                "needs a mixture-of-experts model (model.num_experts)",
            )
        if par.expert > 1:
            ranks = par.data * par.context
            if not m.num_experts or m.num_experts % par.expert:
                raise bad(
                    "parallelism.expert",
                    par.expert,
                    f"does not divide model.num_experts ({m.num_experts})"
                    + (_allowed_experts(m, ranks) if m.num_experts else ""),
                )
            if ranks % par.expert:
                raise bad(
                    "parallelism.expert",
                    par.expert,
                    f"does not divide data × context ({par.data} × "
                    f"{par.context}); expert ranks are carved from them" + _allowed_experts(m, ranks),
                )
        problem = split_problem(
            m.num_layers, par.pipeline * par.virtual_stages, par.pipeline_split, par.pipeline_layers
        )
        if problem and par.pipeline_layers is not None:
            raise bad("parallelism.pipeline_layers", list(par.pipeline_layers), problem)
        if problem:
            raise bad(
                *(
                    ("parallelism.virtual_stages", par.virtual_stages)
                    if par.virtual_stages > 1
                    else ("parallelism.pipeline", par.pipeline)
                ),
                problem,
            )
        if seq % par.context:
            raise bad(
                "parallelism.context",
                par.context,
                f"does not divide workload.sequence_length ({seq}); "
                f"allowed up to 64: {', '.join(map(str, _divisors(seq, 64)))}",
            )
        if par.sequence_parallel and (seq // par.context) % t:
            raise bad(
                "parallelism.tensor",
                t,
                f"does not divide the tokens per context rank ({seq // par.context}) for sequence parallelism",
            )

    def _resolve_batch(self) -> None:
        """Resolve workload.global_batch_size, and check it against the micro-batches and pipeline_microbatches."""
        wl, par = self.workload, self.parallelism
        per_step = wl.micro_batch_size * par.data
        pm = par.pipeline_microbatches
        if wl.global_batch_size is None:
            object.__setattr__(self, "workload", replace(wl, global_batch_size=per_step * (pm or 1)))
        elif wl.global_batch_size % per_step:
            raise bad(
                "workload.global_batch_size",
                wl.global_batch_size,
                f"must be a multiple of micro_batch_size × data ({wl.micro_batch_size} × {par.data} = {per_step})",
            )
        elif pm is not None and wl.global_batch_size != per_step * pm:
            raise bad(
                "parallelism.pipeline_microbatches",
                pm,
                f"must equal workload.global_batch_size ÷ (micro_batch_size × data) = {wl.global_batch_size}"
                f" ÷ {per_step} = {wl.global_batch_size // per_step}",
            )

    def _check_optimizer_in_backward(self) -> None:
        """No gradient survives backward, so nothing can accumulate, be clipped globally, or be all-reduced as a
        whole (torchtune allows it only without accumulation; here also without ZeRO or offload)."""
        if not self.techniques.optimizer_in_backward:  # (inference refuses it with the other training settings)
            return
        if self.micro_batches_per_step > 1:
            raise bad(
                "techniques.optimizer_in_backward",
                True,
                f"needs one micro-batch per step (gradient accumulation {self.micro_batches_per_step}): "
                f"gradients are freed as they are applied",
            )
        if self.parallelism.zero_stage or self.techniques.offload != "none":
            raise bad(
                "techniques.optimizer_in_backward",
                True,
                "is modelled without ZeRO and offload (parallelism.zero_stage 0, techniques.offload none)",
            )

    def _check_schedule(self) -> None:
        """Pipeline schedule, async TP, and the techniques and frameworks that apply to training only."""
        par, tech, task = self.parallelism, self.techniques, self.workload.task
        if par.pipeline_schedule != "1f1b" and par.pipeline == 1:
            raise bad("parallelism.pipeline_schedule", par.pipeline_schedule, "needs parallelism.pipeline > 1")
        if par.async_tp and not (par.sequence_parallel and tech.compiled_blocks):
            raise bad(
                "parallelism.async_tp",
                True,
                "needs parallelism.sequence_parallel and techniques.compile"
                " of the blocks (torchtitan's micro-pipelined TP is an inductor"
                " pass)",
            )
        for key in ("reduce_bucket_elements", "sub_group_elements"):
            if getattr(par, key) is not None and not par.zero_stage:
                raise bad(
                    f"parallelism.{key}",
                    getattr(par, key),
                    "applies to DeepSpeed ZeRO stage 1, 2 or 3 (parallelism.zero_stage)",
                )
        if par.flat_params and not (par.zero_stage == 3 and task in ADAPTER_TASKS):
            raise bad(
                "parallelism.flat_params",
                True,
                "applies to lora and qlora under parallelism.zero_stage 3 (with"
                " every parameter trainable, flat and per-parameter sharding"
                " hold the same gradients)",
            )
        if self.framework == "deepspeed" and par.pipeline > 1 and par.zero_stage >= 2:
            # deepspeedai/DeepSpeed@edaa722 deepspeed/runtime/pipe/engine.py PipelineEngine.__init__
            raise bad(
                "parallelism.zero_stage",
                par.zero_stage,
                "is refused by DeepSpeed's pipeline engine ('ZeRO-2 "
                "and ZeRO-3 are incompatible with pipeline "
                "parallelism'): use ZeRO 0 or 1 with parallelism."
                "pipeline > 1",
            )
        if self.precision.fp8_all_gather and par.zero_stage != 3:
            raise bad("precision.fp8_all_gather", True, "needs parallelism.zero_stage 3 (FSDP all-gathers weights)")
        if task == "inference":  # what inference does not model: a setting of training, refused rather than ignored
            for key, value, unset in (
                ("techniques.activation_offload", tech.activation_offload, False),
                ("techniques.optimizer_in_backward", tech.optimizer_in_backward, False),
                ("techniques.offload", tech.offload, "none"),
                ("precision.fp8_all_gather", self.precision.fp8_all_gather, False),
                ("parallelism.zero_stage", par.zero_stage, 0),
            ):
                if value != unset:
                    raise bad(key, value, "applies to training, not inference")
        if self.framework == "generic" and self.framework_release:
            raise bad("framework_release", self.framework_release, "needs a framework; generic has no releases")
        inference_framework = self.framework in INFERENCE_FRAMEWORKS
        inf = self.workload.inference
        if task == "inference" and inf.gpu_memory_utilization is None:  # settings of a serving engine
            for key, given, default, hint in (
                (
                    "cuda_graphs",
                    inf.cuda_graphs,
                    True,
                    "; a generate() loop captures graphs with techniques.compile over a static cache",
                ),
                ("fraction_scope", inf.fraction_scope, "all", ""),
                ("max_num_seqs", inf.max_num_seqs, None, ""),
            ):
                if given != default:
                    raise bad(
                        f"workload.inference.{key}",
                        given,
                        "applies to a serving engine (workload.inference.gpu_memory_utilization)" + hint,
                    )
        if task == "inference" and inf.gpu_memory_utilization is not None and inf.static_cache:
            raise bad(
                "workload.inference.static_cache",
                True,
                "applies to a generate() loop; a serving engine (gpu_memory_utilization) pages its KV cache",
            )
        if inference_framework and task != "inference":
            raise bad("framework", self.framework, f"serves models: workload.task must be inference, not {task}")
        if task == "inference" and self.framework != "generic" and not inference_framework:
            raise bad(
                "framework",
                self.framework,
                "is a training framework; for inference use vllm, sglang, hf_generate, gpt_fast or generic",
            )

    def _check_weights(self) -> None:
        """Resolve and check precision.weights against the task (quantized weights must be frozen)."""
        prec, task = self.precision, self.workload.task
        weights = prec.weights or default_weights(task, prec.activation_dtype, self.model)
        if task not in FROZEN_WEIGHTS and weights != prec.activation_dtype:
            raise bad(
                "precision.weights",
                weights,
                "applies to frozen or served weights (task lora, qlora or "
                "inference); full training keeps compute and master_weights",
            )
        if task == "lora" and weights not in FROZEN_WEIGHTS["lora"]:
            raise bad("precision.weights", weights, "is quantized; a quantized frozen base is task qlora")
        if task == "qlora" and weights not in FROZEN_WEIGHTS["qlora"]:
            raise bad(
                "precision.weights",
                weights,
                f"must be quantized for qlora: one of {', '.join(FROZEN_WEIGHTS['qlora'])}",
            )
        if prec.quant_group_size is not None and weights not in DEFAULT_GROUP_SIZE:
            raise bad("precision.quant_group_size", prec.quant_group_size, "applies to int4 and nf4 weights only")
        if prec.double_quant and weights != "nf4":
            raise bad("precision.double_quant", True, "applies to nf4 weights only")
        if self.workload.inference.quantize_on_load and (task != "inference" or weights not in TORCHAO_WEIGHTS):
            raise bad(
                "workload.inference.quantize_on_load",
                True,
                f"applies to served {', '.join(TORCHAO_WEIGHTS)} weights (torchao quantize_); the plan has "
                f"task {task}, weights {weights}",
            )
        if self.workload.inference.dynamic_activation_quant and not (
            self.workload.inference.quantize_on_load and weights in ("int8", "fp8")
        ):
            raise bad(
                "workload.inference.dynamic_activation_quant",
                True,
                "applies to int8 or fp8 weights torchao quantizes on load (workload.inference.quantize_on_load)",
            )
        if weights != prec.weights:  # resolved already (a plan's replace): the same precision, not rebuilt
            object.__setattr__(self, "precision", replace(prec, weights=weights))

    @property
    def job_tokens(self) -> int | None:
        """Tokens the whole job trains on, if the plan says (workload.train_tokens or steps)."""
        wl = self.workload
        if wl.train_tokens is not None:
            return wl.train_tokens
        if wl.steps is not None:
            return wl.steps * wl.global_batch_size * wl.sequence_length
        return None

    @property
    def micro_batches_per_step(self) -> int:
        """Micro-batches each data-parallel rank runs per optimizer step (gradient accumulation)."""
        wl = self.workload
        return wl.global_batch_size // (wl.micro_batch_size * self.parallelism.data)

    @property
    def total_gpus(self) -> int:
        """Every GPU the job holds: the training GPUs and an RL server engine's (workload.rl.engine_gpus)."""
        return self.hardware.count + (self.workload.rl.engine_gpus if self.workload.objective in RL_OBJECTIVES else 0)


def _plain_fields(section: Any) -> dict:
    """A section's fields (a dataclass instance's) as a mapping, for an error's value."""
    return {f.name: getattr(section, f.name) for f in fields(section)}


def default_weights(task: str, activation_dtype: str, model: Model | None = None) -> str:
    """precision.weights when a plan leaves it out: NF4 for qlora (the QLoRA base); for inference, the dtype a
    preset's checkpoint ships in (DeepSeek-V3: fp8); else the activation dtype."""
    checkpoint = presets()[model.preset].checkpoint_weights if model is not None and model.preset else None
    if task == "inference" and checkpoint:
        return checkpoint
    return "nf4" if task == "qlora" else activation_dtype


SECTIONS: dict[str, type] = {
    "workload": Workload,
    "precision": Precision,
    "techniques": Techniques,
    "parallelism": Parallelism,
    "hardware": Hardware,
}
NESTED: dict[tuple[str, str], type] = {
    ("workload", "lora"): Lora,
    ("workload", "inference"): Inference,
    ("workload", "preference"): Preference,
    ("workload", "rl"): Rl,
    ("workload", "distillation"): Distillation,
    ("workload", "ppo"): Ppo,
}
TOP_KEYS = ("schema", "name", "framework", "framework_release", "model", *SECTIONS)


def section_keys(section: str) -> tuple[str, ...]:
    return tuple(f.name for f in fields(SECTIONS[section]))


# what each serving engine does with a max_model_len beyond the config's length: vLLM raises ValueError unless the
# environment variable is set (vllm/config/model.py _get_and_verify_max_len); SGLang likewise unless its
# environment variable is set (sglang/srt/environ.py envs, which SGLang's own long-context tests override)
LONG_CONTEXT_OVERRIDE = {
    "vllm": "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
    "sglang": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
}


def context_note(plan: Plan) -> str | None:
    """The line every output carries when the plan's sequences outrun the model's context window (None when they do
    not, or the window is not known). A serving engine refuses such a max_model_len; a generate() loop or a
    training step runs it, on positions the model never saw (RoPE: NaN or garbage past the window)."""
    window, wl = plan.model.context_window, plan.workload
    length = wl.inference.context_tokens if wl.task == "inference" else wl.sequence_length
    if window is None or length <= window:
        return None
    head = (
        f"{length:,} tokens per sequence exceed the model's context window of {window:,} "
        f"(model.context_window, its config.json's length)"
    )
    if wl.task != "inference":
        return head + ": positions past it were never trained; extend the window (RoPE scaling) to train them"
    engine = plan.framework if plan.framework in LONG_CONTEXT_OVERRIDE else "vllm"
    if wl.inference.gpu_memory_utilization is None:
        return head + ": generation past it runs on positions the model never saw"
    return (
        head + f": {engine} refuses this max_model_len unless {LONG_CONTEXT_OVERRIDE[engine]} (outputs past the "
        f"window are unreliable); a rope_scaling override (YaRN) in the model's config extends it"
    )
