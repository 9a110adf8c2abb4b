"""The plan: what is trained, how, and on what. One typed object whose sections validate themselves.

Every key but the architecture has a default, documented beside the field and in the README. The plan's file
format, its YAML and its share link are planner/codec.py's; the key structure they share (SECTIONS, NESTED,
TOP_KEYS) is here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Literal, get_args

from planner.dtypes import (COMPUTE_DTYPES, DEFAULT_GROUP_SIZE, DTYPES, KV_DTYPES, QUANTIZED, WEIGHT_DTYPES,
                            ComputeDType, DType, KvDType, WeightDType)
from planner.errors import bad
from planner.models import Model
from planner.validate import check_bool, check_choice, check_float, check_int, check_str

SCHEMA = "vram-planner/v1"

Task = Literal["pretrain", "finetune", "lora", "qlora", "inference"]
TRAINING_TASKS = ("pretrain", "finetune", "lora", "qlora")
ADAPTER_TASKS = ("lora", "qlora")  # tasks that train low-rank adapters (workload.lora) on a frozen base
# precision.weights each task with frozen or served weights allows (pretrain and finetune train theirs and keep
# them in the activation dtype)
FROZEN_WEIGHTS: dict[str, tuple[str, ...]] = {"lora": tuple(d for d in WEIGHT_DTYPES if d not in QUANTIZED),
                                              "qlora": QUANTIZED, "inference": WEIGHT_DTYPES}
MasterWeights = Literal["fp32", "none"]
ZeroStage = Literal[0, 1, 2, 3]
Optimizer = Literal["adamw", "adamw_8bit", "paged_adamw", "paged_adamw_8bit", "adafactor", "lion", "muon", "sgd", "sgd_momentum"]
LoraTarget = Literal["q", "k", "v", "o", "gate", "up", "down"]
OptimizerImpl = Literal["foreach", "fused", "forloop"]
Checkpointing = Literal["none", "selective", "selective_op", "full", "every_k"]
Attention = Literal["flash", "eager"]
Offload = Literal["none", "optimizer", "optimizer_and_params"]
Loss = Literal["full", "chunked", "fused"]
LoraVariant = Literal["lora", "dora"]
Fp8Recipe = Literal["tensorwise", "rowwise", "mxfp8", "nvfp4"]
PipelineSchedule = Literal["1f1b", "interleaved_1f1b", "gpipe", "zero_bubble"]
Framework = Literal["generic", "hf_trainer", "accelerate_fsdp", "deepspeed", "torchtune", "torchtitan", "megatron",
                    "axolotl", "vllm", "hf_generate"]
INFERENCE_FRAMEWORKS = ("vllm", "hf_generate")

MAX_SEQUENCE = 16_777_216
MAX_BATCH = 1_048_576
MAX_DEGREE = 65_536
MAX_GPUS = 1_048_576


@dataclass(frozen=True, kw_only=True)
class Lora:
    """Low-rank adapters (Hu et al. 2021) on the named projections of every layer."""

    rank: int = 8
    alpha: float = 16.0  # scaling = alpha / rank; no effect on memory
    targets: tuple[LoraTarget, ...] = ("q", "v")  # q k v o (attention), gate up down (MLP)
    dropout: float = 0.0  # > 0 keeps a dropped-out copy of each targeted input for backward
    variant: LoraVariant = "lora"  # lora | dora (weight-decomposed: a learned magnitude per output row)

    def __post_init__(self) -> None:
        check_int("workload.lora.rank", self.rank, lo=1, hi=65_536)
        check_choice("workload.lora.variant", self.variant, get_args(LoraVariant))
        check_float("workload.lora.alpha", self.alpha, lo=0, hi=1e6)
        check_float("workload.lora.dropout", self.dropout, lo=0, hi=0.99)
        targets = self.targets
        if isinstance(targets, str) or not isinstance(targets, (list, tuple)) or not targets:
            raise bad("workload.lora.targets", targets, f"must be a non-empty list of: {', '.join(get_args(LoraTarget))}")
        for target in targets:
            check_choice("workload.lora.targets", target, get_args(LoraTarget))
        if len(set(targets)) != len(targets):
            raise bad("workload.lora.targets", list(targets), "names a projection twice")
        object.__setattr__(self, "targets", tuple(t for t in get_args(LoraTarget) if t in targets))


@dataclass(frozen=True, kw_only=True)
class Inference:
    """Generation: prefill of the prompts, then decode token by token with a KV cache."""

    batch_size: int = 1  # sequences generated together
    prompt_tokens: int = 1024
    output_tokens: int = 256
    # Serving engine (vLLM): the fraction of GPU memory the engine claims; the KV cache fills what weights and
    # activations leave. None: a plain generate() loop whose cache grows with the tokens.
    gpu_memory_utilization: float | None = None
    prefill_chunk_tokens: int | None = None  # chunked prefill: tokens per forward; default the whole prompt batch

    def __post_init__(self) -> None:
        check_int("workload.inference.batch_size", self.batch_size, lo=1, hi=MAX_BATCH)
        check_int("workload.inference.prompt_tokens", self.prompt_tokens, lo=1, hi=MAX_SEQUENCE)
        # at least one: generation produces a token (the time model divides by them)
        check_int("workload.inference.output_tokens", self.output_tokens, lo=1, hi=MAX_SEQUENCE)
        if self.gpu_memory_utilization is not None:
            check_float("workload.inference.gpu_memory_utilization", self.gpu_memory_utilization, lo=0.05, hi=1.0)
        if self.prefill_chunk_tokens is not None:
            check_int("workload.inference.prefill_chunk_tokens", self.prefill_chunk_tokens, lo=1, hi=MAX_SEQUENCE)

    @property
    def context_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens


@dataclass(frozen=True, kw_only=True)
class Workload:
    task: Task = "pretrain"  # pretrain | finetune (full) | lora | qlora | inference
    sequence_length: int = 4096  # tokens per sequence
    micro_batch_size: int = 1  # sequences per GPU per forward/backward
    global_batch_size: int | None = None  # sequences per optimizer step; default micro_batch_size × data
    steps: int | None = None  # optimizer steps of the whole job (for its cost); or give train_tokens
    train_tokens: int | None = None  # tokens of the whole job; default: steps × global batch × sequence
    lora: Lora = field(default_factory=Lora)  # used by task lora and qlora
    inference: Inference = field(default_factory=Inference)  # used by task inference

    def __post_init__(self) -> None:
        check_choice("workload.task", self.task, get_args(Task))
        check_int("workload.sequence_length", self.sequence_length, lo=1, hi=MAX_SEQUENCE)
        check_int("workload.micro_batch_size", self.micro_batch_size, lo=1, hi=MAX_BATCH)
        if self.global_batch_size is not None:
            check_int("workload.global_batch_size", self.global_batch_size, lo=1, hi=MAX_BATCH * MAX_DEGREE)
        if self.steps is not None:
            check_int("workload.steps", self.steps, lo=1, hi=10**12)
        if self.train_tokens is not None:
            check_int("workload.train_tokens", self.train_tokens, lo=1, hi=10**16)
            if self.steps is not None:
                raise bad("workload.train_tokens", self.train_tokens, "and workload.steps both set the job's"
                                                                      " length; give one")


@dataclass(frozen=True, kw_only=True)
class Precision:
    compute: ComputeDType = "bf16"  # dtype of matmuls and activations; fp8: float8 matmuls, bf16 activations
    master_weights: MasterWeights = "fp32"  # fp32 copy the optimizer updates | none (pure low precision)
    gradients: DType | None = None  # default: fp32 with fp32 master weights, else the compute dtype
    optimizer: Optimizer = "adamw"
    optimizer_state: DType | None = None  # default: fp32 with fp32 master weights, else the compute dtype
    optimizer_impl: OptimizerImpl = "foreach"  # PyTorch's default on CUDA | fused | forloop
    weights: WeightDType | None = None  # frozen or served weights; default: nf4 for qlora, else compute
    quant_group_size: int | None = None  # int4 and nf4 block size; default 128 (int4), 64 (nf4)
    double_quant: bool = False  # nf4: quantize the block scales too (QLoRA)
    kv_cache: KvDType | None = None  # inference KV cache; default: the compute dtype
    # float8 training (compute fp8): how tensors are scaled. tensorwise / rowwise: torchao Float8Linear with one
    # scale per tensor / per row; mxfp8: 8-bit with one e8m0 scale per 32 values; nvfp4: 4-bit with one fp8
    # scale per 16 values. Default tensorwise when compute is fp8.
    fp8_recipe: Fp8Recipe | None = None
    fp8_all_gather: bool = False  # FSDP2 all-gathers the float8 weights instead of 16-bit ones (torchao)

    def __post_init__(self) -> None:
        check_choice("precision.compute", self.compute, COMPUTE_DTYPES)
        check_choice("precision.master_weights", self.master_weights, get_args(MasterWeights))
        default = "fp32" if self.master_weights == "fp32" else self.activation_dtype
        if self.gradients is None:
            object.__setattr__(self, "gradients", default)
        if self.optimizer_state is None:
            object.__setattr__(self, "optimizer_state", default)
        check_choice("precision.gradients", self.gradients, DTYPES)
        check_choice("precision.optimizer", self.optimizer, get_args(Optimizer))
        check_choice("precision.optimizer_state", self.optimizer_state, DTYPES)
        check_choice("precision.optimizer_impl", self.optimizer_impl, get_args(OptimizerImpl))
        if self.weights is not None:
            check_choice("precision.weights", self.weights, WEIGHT_DTYPES)
        if self.kv_cache is None:
            object.__setattr__(self, "kv_cache", self.activation_dtype)
        check_choice("precision.kv_cache", self.kv_cache, KV_DTYPES)
        if self.quant_group_size is not None:
            check_int("precision.quant_group_size", self.quant_group_size, lo=1, hi=1_048_576)
        check_bool("precision.double_quant", self.double_quant)
        if self.fp8_recipe is None and self.compute == "fp8":
            object.__setattr__(self, "fp8_recipe", "tensorwise")
        if self.fp8_recipe is not None:
            check_choice("precision.fp8_recipe", self.fp8_recipe, get_args(Fp8Recipe))
            if self.compute != "fp8":
                raise bad("precision.fp8_recipe", self.fp8_recipe, "applies to precision.compute fp8")
        check_bool("precision.fp8_all_gather", self.fp8_all_gather)
        if self.fp8_all_gather and self.compute != "fp8":
            raise bad("precision.fp8_all_gather", True, "applies to precision.compute fp8")

    @property
    def mixed(self) -> bool:
        """Low-precision compute with an fp32 master copy of the weights."""
        return self.master_weights == "fp32" and self.compute != "fp32"

    @property
    def activation_dtype(self) -> str:
        """Dtype of activations and of weights stored for compute: float8 training (torchao Float8Linear) casts
        to fp8 inside each matmul and keeps bf16 tensors around it."""
        return "bf16" if self.compute == "fp8" else self.compute


@dataclass(frozen=True, kw_only=True)
class Techniques:
    # none | selective (Megatron: the attention core) | selective_op (torchtitan's op-level policy: matmul and
    # attention outputs are saved, the rest recomputed) | full (every layer) | every_k (every
    # `checkpoint_every`-th layer, as torchtitan's selective layer AC with ac_freq = k does)
    activation_checkpointing: Checkpointing = "none"
    checkpoint_every: int = 2
    attention: Attention = "flash"  # fused SDPA/FlashAttention | eager (scores materialized)
    offload: Offload = "none"  # none | optimizer (states + master on CPU) | optimizer_and_params
    # MoE training with token dropping (GShard, Switch, Megatron --moe-expert-capacity-factor): each expert's
    # buffer is padded to capacity_factor × its even share of the routed tokens. None: dropless (HF, MegaBlocks).
    moe_capacity_factor: float | None = None
    # The optimizer steps each parameter from a post-accumulate-grad hook as soon as its gradient is ready,
    # and the gradient is freed (torchtune optimizer_in_bwd; PyTorch "How to save memory by fusing the
    # optimizer step into the backward pass"): no full set of gradients ever exists.
    optimizer_in_backward: bool = False
    # Cross-entropy over the vocabulary: `full` (HF: the whole logits upcast to fp32), `chunked` (torchtune
    # CEWithChunkedOutputLoss: the output projection and the fp32 loss run on `loss_chunks` slices of tokens) or
    # `fused` (Liger fused linear cross-entropy: logits exist one chunk at a time, gradients made in forward).
    loss: Loss = "full"
    loss_chunks: int = 8
    compile: bool = False  # torch.compile: fused elementwise ops, fewer saved intermediates
    # saved activations are copied to host memory after use in forward and brought back for backward
    # (torchtune OffloadActivations); what stays on the GPU is itemized
    activation_offload: bool = False

    def __post_init__(self) -> None:
        check_choice("techniques.activation_checkpointing", self.activation_checkpointing,
                     get_args(Checkpointing))
        check_choice("techniques.attention", self.attention, get_args(Attention))
        check_int("techniques.checkpoint_every", self.checkpoint_every, lo=1, hi=1024)
        check_choice("techniques.offload", self.offload, get_args(Offload))
        check_bool("techniques.optimizer_in_backward", self.optimizer_in_backward)
        check_choice("techniques.loss", self.loss, get_args(Loss))
        check_int("techniques.loss_chunks", self.loss_chunks, lo=1, hi=1024)
        check_bool("techniques.compile", self.compile)
        check_bool("techniques.activation_offload", self.activation_offload)
        if self.moe_capacity_factor is not None:
            object.__setattr__(self, "moe_capacity_factor",
                               check_float("techniques.moe_capacity_factor", self.moe_capacity_factor, lo=0.1, hi=64))


@dataclass(frozen=True, kw_only=True)
class Parallelism:
    data: int | None = None  # default: hardware.count / (tensor × pipeline × context)
    zero_stage: ZeroStage = 0  # 0 (DDP) | 1 optimizer states | 2 + gradients | 3 + parameters (FSDP full shard)
    tensor: int = 1
    sequence_parallel: bool = False
    pipeline: int = 1
    context: int = 1
    expert: int = 1  # expert parallelism: MoE experts split over this many of the data × context ranks
    # how micro-batches flow through the pipeline stages (what each stage holds in flight)
    pipeline_schedule: PipelineSchedule = "1f1b"
    virtual_stages: int = 1  # model chunks per pipeline rank (interleaved 1F1B)
    pipeline_microbatches: int | None = None  # micro-batches per step; default global batch ÷ (micro-batch × data)
    async_tp: bool = False  # all-gather/reduce-scatter overlapped with the matmuls (torchtitan, needs compile)

    def __post_init__(self) -> None:
        if self.data is not None:
            check_int("parallelism.data", self.data, lo=1, hi=MAX_DEGREE)
        check_int("parallelism.zero_stage", self.zero_stage, lo=0, hi=3)
        check_int("parallelism.tensor", self.tensor, lo=1, hi=MAX_DEGREE)
        check_bool("parallelism.sequence_parallel", self.sequence_parallel)
        check_int("parallelism.pipeline", self.pipeline, lo=1, hi=MAX_DEGREE)
        check_int("parallelism.context", self.context, lo=1, hi=MAX_DEGREE)
        check_int("parallelism.expert", self.expert, lo=1, hi=MAX_DEGREE)
        check_choice("parallelism.pipeline_schedule", self.pipeline_schedule, get_args(PipelineSchedule))
        check_int("parallelism.virtual_stages", self.virtual_stages, lo=1, hi=1024)
        if self.pipeline_microbatches is not None:
            check_int("parallelism.pipeline_microbatches", self.pipeline_microbatches, lo=1, hi=MAX_BATCH)
        check_bool("parallelism.async_tp", self.async_tp)
        if (self.virtual_stages > 1) != (self.pipeline_schedule == "interleaved_1f1b"):
            raise bad("parallelism.virtual_stages", self.virtual_stages,
                      "must be 2 or more with pipeline_schedule interleaved_1f1b, and 1 with any other schedule")

    @property
    def model_parallel(self) -> int:
        return self.tensor * self.pipeline * self.context


@dataclass(frozen=True, kw_only=True)
class Hardware:
    gpu: str = "h100-sxm-80gb"  # an id from gpu_catalog.yaml
    count: int | None = None  # default: data × tensor × pipeline × context

    def __post_init__(self) -> None:
        check_str("hardware.gpu", self.gpu, max_len=100)
        if self.count is not None:
            check_int("hardware.count", self.count, lo=1, hi=MAX_GPUS)


@dataclass(frozen=True, kw_only=True)
class Plan:
    model: Model
    workload: Workload = field(default_factory=Workload)
    precision: Precision = field(default_factory=Precision)
    techniques: Techniques = field(default_factory=Techniques)
    parallelism: Parallelism = field(default_factory=Parallelism)
    hardware: Hardware = field(default_factory=Hardware)
    name: str = ""
    # the training or serving stack; its recipes' defaults are laid under the plan's keys by
    # codec.plan_from_dict (planner/frameworks.py), so a Plan built directly only records it
    framework: Framework = "generic"

    def __post_init__(self) -> None:
        check_str("name", self.name, max_len=200)
        check_choice("framework", self.framework, get_args(Framework))
        self._resolve_degrees()
        self._check_splits()
        self._resolve_batch()
        self._check_schedule()
        self._check_optimizer_in_backward()
        if self.techniques.offload == "optimizer_and_params" and self.parallelism.zero_stage != 3:
            raise bad("techniques.offload", "optimizer_and_params",
                      "needs parallelism.zero_stage 3 (parameters are fetched layer by layer)")
        self._check_weights()
        wl = self.workload
        if wl.task in ADAPTER_TASKS and self.model.mlp != "swiglu" and "gate" in wl.lora.targets:
            raise bad("workload.lora.targets", list(wl.lora.targets), "names gate, but a GeLU MLP has no gate projection")

    def _resolve_degrees(self) -> None:
        """Resolve parallelism.data and hardware.count from each other, then check they agree."""
        par, hw = self.parallelism, self.hardware
        if par.data is None:
            if hw.count is None:
                par = replace(par, data=1)
            elif hw.count % par.model_parallel:
                raise bad("hardware.count", hw.count, f"is not a multiple of tensor × pipeline × context "
                                                      f"({par.tensor} × {par.pipeline} × {par.context})")
            else:
                par = replace(par, data=hw.count // par.model_parallel)
        expected = par.data * par.model_parallel
        if hw.count is None:
            hw = replace(hw, count=expected)
        elif hw.count != expected:
            raise bad("hardware.count", hw.count, f"must equal data × tensor × pipeline × context "
                                                  f"= {par.data} × {par.tensor} × {par.pipeline} × {par.context}"
                                                  f" = {expected}")
        object.__setattr__(self, "parallelism", par)
        object.__setattr__(self, "hardware", hw)

    def _check_splits(self) -> None:
        """Each degree divides what it splits: heads, MLP width, experts, layers, tokens."""
        par, m, seq = self.parallelism, self.model, self.workload.sequence_length
        t = par.tensor
        if m.num_attention_heads % t:
            raise bad("parallelism.tensor", t, f"does not divide model.num_attention_heads ({m.num_attention_heads})")
        if m.num_kv_heads % t and t % m.num_kv_heads:
            raise bad("parallelism.tensor", t, f"and model.num_kv_heads ({m.num_kv_heads}) must divide one another"
                                               " (fewer KV heads than ranks are replicated)")
        if m.intermediate_size % t:
            raise bad("parallelism.tensor", t, f"does not divide model.intermediate_size ({m.intermediate_size})")
        if par.sequence_parallel and t == 1:
            raise bad("parallelism.sequence_parallel", True, "needs parallelism.tensor > 1 (it splits the"
                                                            " tensor-parallel group's activations)")
        if self.techniques.moe_capacity_factor is not None and not m.num_experts:
            raise bad("techniques.moe_capacity_factor", self.techniques.moe_capacity_factor,
                      "needs a mixture-of-experts model (model.num_experts)")
        if par.expert > 1:
            if not m.num_experts or m.num_experts % par.expert:
                raise bad("parallelism.expert", par.expert, f"does not divide model.num_experts ({m.num_experts})")
            if (par.data * par.context) % par.expert:
                raise bad("parallelism.expert", par.expert, f"does not divide data × context ({par.data} × "
                                                            f"{par.context}); expert ranks are carved from them")
        if m.num_layers % par.pipeline:
            raise bad("parallelism.pipeline", par.pipeline, f"does not divide model.num_layers ({m.num_layers})")
        if seq % par.context:
            raise bad("parallelism.context", par.context, f"does not divide workload.sequence_length ({seq})")
        if par.sequence_parallel and (seq // par.context) % t:
            raise bad("parallelism.tensor", t, "does not divide the tokens per context rank "
                                               f"({seq // par.context}) for sequence parallelism")

    def _resolve_batch(self) -> None:
        """Resolve workload.global_batch_size, and check it against the micro-batches and pipeline_microbatches."""
        wl, par = self.workload, self.parallelism
        per_step = wl.micro_batch_size * par.data
        pm = par.pipeline_microbatches
        if wl.global_batch_size is None:
            object.__setattr__(self, "workload", replace(wl, global_batch_size=per_step * (pm or 1)))
        elif wl.global_batch_size % per_step:
            raise bad("workload.global_batch_size", wl.global_batch_size,
                      f"must be a multiple of micro_batch_size × data ({wl.micro_batch_size} × {par.data}"
                      f" = {per_step})")
        elif pm is not None and wl.global_batch_size != per_step * pm:
            raise bad("parallelism.pipeline_microbatches", pm,
                      f"must equal workload.global_batch_size ÷ (micro_batch_size × data) = {wl.global_batch_size}"
                      f" ÷ {per_step} = {wl.global_batch_size // per_step}")

    def _check_optimizer_in_backward(self) -> None:
        """No gradient survives backward, so nothing can accumulate, be clipped globally, or be all-reduced as a
        whole (torchtune allows it only without accumulation; here also without ZeRO or offload)."""
        if not self.techniques.optimizer_in_backward:  # (inference refuses it with the other training settings)
            return
        if self.micro_batches_per_step > 1:
            raise bad("techniques.optimizer_in_backward", True,
                      f"needs one micro-batch per step (gradient accumulation {self.micro_batches_per_step}): "
                      f"gradients are freed as they are applied")
        if self.parallelism.zero_stage or self.techniques.offload != "none":
            raise bad("techniques.optimizer_in_backward", True, "is modelled without ZeRO and offload "
                                                                 "(parallelism.zero_stage 0, techniques.offload none)")

    def _check_schedule(self) -> None:
        """Pipeline schedule, async TP, and the techniques and frameworks that apply to training only."""
        par, tech, task = self.parallelism, self.techniques, self.workload.task
        if par.pipeline_schedule != "1f1b" and par.pipeline == 1:
            raise bad("parallelism.pipeline_schedule", par.pipeline_schedule, "needs parallelism.pipeline > 1")
        if self.model.num_layers % (par.pipeline * par.virtual_stages):
            raise bad("parallelism.virtual_stages", par.virtual_stages,
                      f"× pipeline ({par.pipeline}) does not divide model.num_layers ({self.model.num_layers})")
        if par.async_tp and not (par.sequence_parallel and tech.compile):
            raise bad("parallelism.async_tp", True, "needs parallelism.sequence_parallel and techniques.compile"
                                                    " (torchtitan's micro-pipelined TP is an inductor pass)")
        if self.precision.fp8_all_gather and par.zero_stage != 3:
            raise bad("precision.fp8_all_gather", True, "needs parallelism.zero_stage 3 (FSDP all-gathers weights)")
        if task == "inference":  # what inference does not model: a setting of training, refused rather than ignored
            for key, value, unset in (("techniques.compile", tech.compile, False),
                                      ("techniques.activation_offload", tech.activation_offload, False),
                                      ("techniques.optimizer_in_backward", tech.optimizer_in_backward, False),
                                      ("techniques.offload", tech.offload, "none"),
                                      ("precision.fp8_all_gather", self.precision.fp8_all_gather, False),
                                      ("parallelism.zero_stage", par.zero_stage, 0)):
                if value != unset:
                    raise bad(key, value, "applies to training, not inference")
        inference_framework = self.framework in INFERENCE_FRAMEWORKS
        if inference_framework and task != "inference":
            raise bad("framework", self.framework, f"serves models: workload.task must be inference, not {task}")
        if task == "inference" and self.framework != "generic" and not inference_framework:
            raise bad("framework", self.framework, "is a training framework; for inference use vllm, hf_generate "
                                                   "or generic")

    def _check_weights(self) -> None:
        """Resolve and check precision.weights against the task (quantized weights must be frozen)."""
        prec, task = self.precision, self.workload.task
        weights = prec.weights or default_weights(task, prec.activation_dtype)
        if task not in FROZEN_WEIGHTS and weights != prec.activation_dtype:
            raise bad("precision.weights", weights, "applies to frozen or served weights (task lora, qlora or "
                                                    "inference); full training keeps compute and master_weights")
        if task == "lora" and weights not in FROZEN_WEIGHTS["lora"]:
            raise bad("precision.weights", weights, "is quantized; a quantized frozen base is task qlora")
        if task == "qlora" and weights not in FROZEN_WEIGHTS["qlora"]:
            raise bad("precision.weights", weights,
                      f"must be quantized for qlora: one of {', '.join(FROZEN_WEIGHTS['qlora'])}")
        if prec.quant_group_size is not None and weights not in DEFAULT_GROUP_SIZE:
            raise bad("precision.quant_group_size", prec.quant_group_size, "applies to int4 and nf4 weights only")
        if prec.double_quant and weights != "nf4":
            raise bad("precision.double_quant", True, "applies to nf4 weights only")
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


def default_weights(task: str, activation_dtype: str) -> str:
    """precision.weights when a plan leaves it out: NF4 for qlora (the QLoRA base), else the activation dtype."""
    return "nf4" if task == "qlora" else activation_dtype


SECTIONS: dict[str, type] = {"workload": Workload, "precision": Precision, "techniques": Techniques,
                             "parallelism": Parallelism, "hardware": Hardware}
NESTED: dict[tuple[str, str], type] = {("workload", "lora"): Lora, ("workload", "inference"): Inference}
TOP_KEYS = ("schema", "name", "framework", "model", *SECTIONS)


def section_keys(section: str) -> tuple[str, ...]:
    return tuple(f.name for f in fields(SECTIONS[section]))
