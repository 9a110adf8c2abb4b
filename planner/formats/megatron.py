"""Megatron-LM argument lists: the shell scripts of Megatron-LM's examples (examples/gpt3/train_gpt3_175b_
distributed.sh, examples/llama/train_llama3_8b_h100_fp8.sh, ...) or a plain `torchrun pretrain_gpt.py --num-layers
32 ...` line.

How a script is read: line by line (backslash continuations joined, comments dropped), shell variables set by
`NAME=value` are substituted as bash would at that point (`${NAME:-default}` takes the default when NAME is not
set in the script: an environment variable or a positional parameter), and every `--flag [value ...]` on a line
is taken, from bash arrays and command lines alike, whichever branch of an `if` it is in; a flag given twice
keeps its last value, as argparse does. Flags and defaults are those of megatron/training/arguments.py at
core_v0.14.0 (23e00ed); the architecture flags become the model block when they are complete.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from planner.errors import OverLimit, bad
from planner.formats.base import RELEASE_WHY, Document, Format, Imported, document, marked, set_key, training_defaults
from planner.formats.reading import Reading, as_int, as_number, choice
from planner.formats.shell import lines, words
from planner.loader import CONFIG
from planner.plan.config import Plan

Args = dict[str, Any]  # flag (without --) → its value: True for a bare flag, a string, or a list of strings

# `${NAME}`, `${NAME:-default}` / `${NAME-default}` and `$NAME`; after a line's last brace, `$NAME` alone
_VARIABLE = re.compile(r"\$\{(?P<name>\w++)(?::?-(?P<default>[^}]*))?\}|\$(?P<bare>\w+)")
_BARE = re.compile(r"\$(?P<bare>\w+)")
_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_]\w*)=(?!\()(.*)$")
_SHELL_WORDS = {")", "(", "then", "fi", "do", "done", "else", "]]", "[["}
# Variables substituted in one script: a Megatron script substitutes a few dozen; together with the characters
# they put in (at most a config's size, planner/loader.py CONFIG) this bounds what `A=$A$A` lines, each of which
# doubles a value, can expand to
MAX_SUBSTITUTIONS = 10_000


class _Shell:
    """A script's variables as bash substitutes them line by line, within MAX_SUBSTITUTIONS substitutions and
    CONFIG.max_bytes characters put in."""

    def __init__(self) -> None:
        self.variables: dict[str, str] = {}
        self.substitutions = self.characters = 0

    def substitute(self, line: str) -> str:
        """The line with its variables substituted. A `${NAME:-...}` ends at a brace: after the line's last one
        only `$NAME` is sought (each `${NAME:-` there would scan to the line's end in vain: quadratic)."""
        end = line.rfind("}") + 1
        return _VARIABLE.sub(self._value, line[:end]) + _BARE.sub(self._value, line[end:])

    def _value(self, match: re.Match) -> str:
        found = match.groupdict()
        name, default = found.get("name") or found["bare"], found.get("default")
        value = self.variables.get(name, default if default is not None else match.group(0))
        self.substitutions += 1
        self.characters += len(value)
        if self.substitutions > MAX_SUBSTITUTIONS or self.characters > CONFIG.max_bytes:
            raise OverLimit(
                "config",
                f"substitutes shell variables more than {MAX_SUBSTITUTIONS:,} times or into "
                f"more than {CONFIG.max_bytes:,} characters; that is not a script",
            )
        return value


def _words(line: str) -> list[str]:
    # a quoted "--flag value" pair (the llama example's DTYPE_ARGS) is two words
    return [part for word in words(line) for part in (words(word) if word.startswith("--") else [word])]


def parse(text: str) -> Args:
    """Every `--flag [value ...]` of a script or command line, with its shell variables substituted."""
    shell = _Shell()
    args: Args = {}
    for line in lines(text):
        line = shell.substitute(line)
        assignment = _ASSIGNMENT.match(line)
        if assignment and not line.lstrip().startswith("--"):
            # the value as one word: a quoted "--a 1 --b 2" (over lines too) is split where $VAR is substituted
            shell.variables[assignment.group(1)] = (words(assignment.group(2)) or [""])[0]
            continue
        found = _words(line)
        for i, word in enumerate(found):
            if not word.startswith("--"):
                continue
            name, eq, value = word[2:].partition("=")
            values = [value] if eq else []
            values += _following(found, i + 1)
            args[name] = values[0] if len(values) == 1 else (values or True)
    return args


def _following(words: list[str], start: int) -> list[str]:
    """A flag's values: the words from `start` up to the next flag, shell keyword, script or array (found by
    index: a copy of the rest of the line a flag is quadratic in the line's flags)."""
    end = start
    while end < len(words) and not (
        words[end].startswith("--") or words[end] in _SHELL_WORDS or words[end].endswith((".py", "[@]}"))
    ):
        end += 1
    return words[start:end]


# --- the architecture ----------------------------------------------------------------------------------------------
# Megatron's defaults (arguments.py): LayerNorm, GeLU, tied embeddings, biases on every linear layer,
# make_vocab_size_divisible_by 128, --num-query-groups 1 with --group-query-attention
NORMS = {"LayerNorm": "layernorm", "RMSNorm": "rmsnorm"}
# GPT2BPETokenizer (gpt2-vocab.json): 50257 tokens (megatron/training/tokenizer/gpt2_tokenization.py's vocab)
TOKENIZER_VOCAB = {"GPT2BPETokenizer": 50257}
ARCH_INTS = {
    "num-layers": "num_layers",
    "hidden-size": "hidden_size",
    "num-attention-heads": "num_attention_heads",
    "ffn-hidden-size": "intermediate_size",
    "kv-channels": "head_dim",
    "num-experts": "num_experts",
    "moe-ffn-hidden-size": "moe_intermediate_size",
}
REQUIRED = ("num_layers", "hidden_size", "num_attention_heads", "vocab_size")
# --multi-latent-attention: the latent ranks and head widths (arguments.py defaults: kv_lora_rank 32,
# q_lora_rank None, qk_head_dim 128, qk_pos_emb_head_dim 64, v_head_dim 128)
MLA = {
    "kv-lora-rank": ("kv_lora_rank", 32),
    "q-lora-rank": ("q_lora_rank", None),
    "qk-head-dim": ("head_dim", 128),
    "qk-pos-emb-head-dim": ("qk_rope_head_dim", 64),
    "v-head-dim": ("v_head_dim", 128),
}


def _padded_vocab(vocab: int, divisible_by: int, tensor: int) -> int:
    """megatron/training/tokenizer/tokenizer.py _vocab_size_with_padding: up to a multiple of divisible_by × TP."""
    multiple = divisible_by * tensor
    return math.ceil(vocab / multiple) * multiple


def _architecture(args: Args, out: Reading, tensor: int) -> dict[str, Any]:
    """The model keys the flags give (with Megatron's defaults for the flags a script leaves out)."""
    arch: dict[str, Any] = {key: as_int(f"--{flag}", args[flag]) for flag, key in ARCH_INTS.items() if flag in args}
    if "hidden-size" in args and "ffn-hidden-size" not in args:  # arguments.py: 4 h, or int(8 h / 3 / 64) × 64
        h = arch["hidden_size"]
        arch["intermediate_size"] = int(4 * h * 2 / 3 / 64) * 64 if "swiglu" in args else 4 * h
    if "group-query-attention" in args:
        arch["num_kv_heads"] = as_int("--num-query-groups", args.get("num-query-groups", 1))
    arch["mlp"] = "swiglu" if "swiglu" in args else "relu2" if "squared-relu" in args else "gelu"
    arch["norm"] = choice("--normalization", args.get("normalization", "LayerNorm"), NORMS)
    arch["tie_embeddings"] = "untie-embeddings-and-output-weights" not in args
    arch["bias"] = "disable-bias-linear" not in args
    arch["qk_norm"] = "qk-layernorm" in args
    if "num-experts" in args:
        arch["experts_per_token"] = as_int("--moe-router-topk", args.get("moe-router-topk", 2))
        _shared_experts(args, arch)
        _dense_layers(args, out, arch)
    if "multi-latent-attention" in args:
        for flag, (key, default) in MLA.items():
            value = args.get(flag, default)
            arch[key] = None if value is None else as_int(f"--{flag}", value)
    _vocab(args, out, arch, tensor)
    return arch


def _shared_experts(args: Args, arch: dict[str, Any]) -> None:
    """--moe-shared-expert-intermediate-size: the shared experts' total width, in experts of moe_ffn_hidden_size."""
    if "moe-shared-expert-intermediate-size" not in args:
        return
    shared = as_int("--moe-shared-expert-intermediate-size", args["moe-shared-expert-intermediate-size"])
    width = arch.get("moe_intermediate_size") or arch.get("intermediate_size")
    if width is None or shared % width:
        raise bad(
            "--moe-shared-expert-intermediate-size",
            shared,
            f"is not a whole number of experts of --moe-ffn-hidden-size ({width})",
        )
    arch["shared_experts"] = shared // width


# --moe-layer-freq "([0]*k+[1]*n)": k dense layers, then MoE (DeepSeek-V3's recipe); 1 (the default): every layer
_FIRST_DENSE = re.compile(r"^\(\[0\]\*(\d+)\+\[1\]\*(\d+)\)$")


def _dense_layers(args: Args, out: Reading, arch: dict[str, Any]) -> None:
    freq = str(args.get("moe-layer-freq", "1")).replace(" ", "")
    pattern = _FIRST_DENSE.match(freq)
    if pattern:
        arch["first_dense_layers"] = int(pattern.group(1))
    elif freq != "1":
        out.unmodelled.append(
            f"--moe-layer-freq: {freq} (a pattern of dense and MoE layers other than the first k dense) is not modelled"
        )


def _vocab(args: Args, out: Reading, arch: dict[str, Any], tensor: int) -> None:
    """--vocab-size (or the GPT-2 tokenizer's), padded as Megatron pads it; else the tokenizer is reported."""
    divisible = as_int("--make-vocab-size-divisible-by", args.get("make-vocab-size-divisible-by", 128))
    tokenizer = args.get("tokenizer-type", "")
    if "padded-vocab-size" in args:
        arch["vocab_size"] = as_int("--padded-vocab-size", args["padded-vocab-size"])
    elif "vocab-size" in args or tokenizer in TOKENIZER_VOCAB:
        vocab = as_int("--vocab-size", args["vocab-size"]) if "vocab-size" in args else TOKENIZER_VOCAB[tokenizer]
        arch["vocab_size"] = _padded_vocab(vocab, divisible, tensor)
    elif tokenizer or "tokenizer-model" in args:
        out.unmodelled.append(
            f"--tokenizer-model: the tokenizer ({args.get('tokenizer-model', tokenizer)}) sets "
            "the vocabulary; give model.vocab_size"
        )


ARCH_FLAGS = (
    *ARCH_INTS,
    *MLA,
    "group-query-attention",
    "num-query-groups",
    "swiglu",
    "squared-relu",
    "normalization",
    "untie-embeddings-and-output-weights",
    "disable-bias-linear",
    "qk-layernorm",
    "moe-router-topk",
    "moe-shared-expert-intermediate-size",
    "multi-latent-attention",
    "vocab-size",
    "padded-vocab-size",
    "make-vocab-size-divisible-by",
    "moe-layer-freq",
)


def _model(args: Args, out: Reading, tensor: int) -> str:
    """A complete architecture becomes the model block; an incomplete one names the model and what it lacks."""
    arch = _architecture(args, out, tensor)
    given = [f"--{flag}" for flag in ARCH_FLAGS if args.pop(flag, None) is not None]
    missing = [key for key in REQUIRED if key not in arch]
    if not missing:
        for key, value in arch.items():
            out.set(", ".join(given), f"model.{key}", value)
        return ""
    if given:
        out.unmodelled.append(
            f"{', '.join(given)}: an incomplete architecture (no {', '.join(missing)}); give the "
            "model as a preset or its keys"
        )
    tokenizer = args.get("tokenizer-model")
    return tokenizer if isinstance(tokenizer, str) and "$" not in tokenizer else "Megatron-LM GPT model"


# --- the training, precision and parallel flags ----------------------------------------------------------------------
def _const(value: Any) -> Callable[[str, Any], Any]:
    return lambda flag, _: value


def _table(table: dict[str, Any]) -> Callable[[str, Any], Any]:
    return lambda flag, value: choice(flag, value, table)


_INT = as_int
# flag → (plan key, its value from the flag's); sources: arguments.py core_v0.14.0
FLAGS: dict[str, tuple[str, Callable[[str, Any], Any]]] = {
    "seq-length": ("workload.sequence_length", _INT),
    "micro-batch-size": ("workload.micro_batch_size", _INT),
    "global-batch-size": ("workload.global_batch_size", _INT),
    "train-iters": ("workload.steps", _INT),
    "tensor-model-parallel-size": ("parallelism.tensor", _INT),
    "pipeline-model-parallel-size": ("parallelism.pipeline", _INT),
    "context-parallel-size": ("parallelism.context", _INT),
    "expert-model-parallel-size": ("parallelism.expert", _INT),
    "moe-expert-capacity-factor": ("techniques.moe_capacity_factor", as_number),
    # AttnBackend: flash and fused (cuDNN) kernels keep no score matrix; unfused and local materialize it
    "attention-backend": (
        "techniques.attention",
        _table({"flash": "flash", "fused": "flash", "auto": "flash", "unfused": "eager", "local": "eager"}),
    ),
    "use-flash-attn": ("techniques.attention", _const("flash")),
    # --optimizer adam (Adam/AdamW with decoupled weight decay) | sgd (with --sgd-momentum 0.9)
    "optimizer": ("precision.optimizer", _table({"adam": "adamw", "sgd": "sgd_momentum"})),
    # --optimizer-cpu-offload (with --optimizer-offload-fraction 1.0): optimizer states and fp32 main params
    "optimizer-cpu-offload": ("techniques.offload", _const("optimizer")),
    "grad-reduce-in-bf16": ("precision.gradients", _const("bf16")),  # the DDP gradient buffer in bf16
    "recompute-activations": ("techniques.activation_checkpointing", _const("selective")),
}
FP8_RECIPES = {"delayed": "tensorwise", "tensorwise": "tensorwise", "mxfp8": "mxfp8", "blockwise": "rowwise"}
# Megatron-FSDP --data-parallel-sharding-strategy → ZeRO stage (arguments.py default 'no_shard' at core_v0.14.0)
SHARDING = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
UNMODELLED = {
    "fp8-param-gather": "float8 parameters all-gathered without a bf16 copy have no plan key",
    "cross-entropy-loss-fusion": "the fused vocab-parallel cross-entropy keeps fewer fp32 copies of the logits "
    "than the plan's full loss",
    "empty-unused-memory-level": "emptying the allocator's cache between steps is not modelled",
    "mtp-num-layers": "multi-token-prediction layers are not modelled",
    "expert-tensor-parallel-size": "experts split over tensor ranks of their own have no plan key",
    "add-qkv-bias": "biases on the q, k and v projections alone (model.bias is every linear layer)",
    "moe-token-dispatcher-type": "the token dispatcher's buffers are not modelled",
    "moe-pad-expert-input-to-capacity": "padding each expert's input to capacity is not modelled",
    "step-batch-size-schedule": "the global batch ramps up; the plan's is the final one",
    "rampup-batch-size": "the global batch ramps up; the plan's is the final one",
    "cpu-offloading": "activations offloaded layer by layer are not modelled",
    "first-last-layers-bf16": "first and last layers kept in bf16 under fp8 are not modelled",
    "main-params-dtype": "fp16 main parameters have no plan key",
    "exp-avg-dtype": "low-precision Adam moments are not modelled for Megatron's optimizer",
    "exp-avg-sq-dtype": "low-precision Adam moments are not modelled for Megatron's optimizer",
}
# flags that leave memory and step time alone: learning rates, logging, data and checkpoint paths, dropout and
# initialisation, fusions of elementwise kernels, and the launcher's. --overlap-grad-reduce / --overlap-param-gather
# overlap the (bucketed) communication with compute inside the buffers the plan counts.
IGNORED = (
    "use-mcore-models",
    "max-position-embeddings",
    "rotary-base",
    "rotary-percent",
    "attention-dropout",
    "hidden-dropout",
    "apply-layernorm-1p",
    "no-masked-softmax-fusion",
    "no-position-embedding",
    "weight-decay",
    "clip-grad",
    "split",
    "mock-data",
    "num-workers",
    "tiktoken-pattern",
    "vocab-file",
    "merge-file",
    "no-create-attention-mask-in-dataloader",
    "no-mmap-bin-files",
    "manual-gc",
    "calculate-per-token-loss",
    "overlap-grad-reduce",
    "overlap-param-gather",
    "moe-grouped-gemm",
    "moe-router-load-balancing-type",
    "moe-aux-loss-coeff",
    "transformer-impl",
    "norm-epsilon",
    "fp8-amax-history-len",
    "fp8-amax-compute-algo",
    "use-distributed-optimizer",
    "sequence-parallel",
    "fp8-format",
    "fp8-recipe",
    "bf16",
    "fp16",
    "train-samples",
    "tokenizer-type",
    "tokenizer-model",
    "nproc_per_node",
    "nnodes",
    "node_rank",
    "master_addr",
    "master_port",
    "rdzv_backend",
    "rdzv_endpoint",
    "standalone",
    "use-torch-fsdp2",
    "use-megatron-fsdp",
    "use-custom-fsdp",
    "data-parallel-sharding-strategy",
)
IGNORED_PREFIXES = (
    "lr",
    "min-lr",
    "decoupled-",
    "log-",
    "wandb-",
    "tensorboard",
    "eval-",
    "save",
    "load",
    "data-",
    "profile",
    "adam-",
    "init-method",
    "no-load",
    "ckpt-",
    "distributed-",
    "exit-",
    "seed",
)


def _flags(args: Args, out: Reading) -> None:
    for flag, (plan_key, convert) in FLAGS.items():
        if flag in args:
            out.set(f"--{flag}", plan_key, convert(f"--{flag}", args[flag]))
    if "train-samples" in args and "seq-length" in args:  # samples × their length: the job's tokens
        samples = as_int("--train-samples", args["train-samples"])
        out.set("--train-samples", "workload.train_tokens", samples * as_int("--seq-length", args["seq-length"]))
    elif "train-samples" in args:
        out.unmodelled.append("--train-samples: without --seq-length the job's tokens are unknown")


def _precision(args: Args, out: Reading) -> None:
    if "fp8-format" in args:
        out.set("--fp8-format", "precision.compute", "fp8")
        if "fp8-recipe" in args:
            out.set("--fp8-recipe", "precision.fp8_recipe", choice("--fp8-recipe", args["fp8-recipe"], FP8_RECIPES))
        if args.get("fp8-recipe") == "blockwise":
            out.unmodelled.append("--fp8-recipe: blockwise (1 × 128 and 128 × 128 scales) is modelled as rowwise")
    elif "bf16" in args or "fp16" in args:
        out.set("--bf16" if "bf16" in args else "--fp16", "precision.compute", "bf16" if "bf16" in args else "fp16")
    else:  # arguments.py: params_dtype fp32 unless --bf16 / --fp16; frameworks.yaml's recipe says bf16
        out.set("--bf16 (absent: arguments.py params_dtype fp32)", "precision.compute", "fp32")


def _sharding(args: Args, out: Reading, tensor: int) -> None:
    """ZeRO stage: torch FSDP2, Megatron-FSDP's strategy, the distributed optimizer (ZeRO-1), or DDP."""
    if "use-torch-fsdp2" in args:
        out.set("--use-torch-fsdp2", "parallelism.zero_stage", 3)
    elif "use-megatron-fsdp" in args or "use-custom-fsdp" in args:
        strategy = args.get("data-parallel-sharding-strategy", "no_shard")
        out.set(
            "--use-megatron-fsdp, --data-parallel-sharding-strategy",
            "parallelism.zero_stage",
            choice("--data-parallel-sharding-strategy", strategy, SHARDING),
        )
    elif "use-distributed-optimizer" in args:
        out.set("--use-distributed-optimizer", "parallelism.zero_stage", 1)
    else:  # arguments.py: use_distributed_optimizer False; frameworks.yaml's recipe says 1
        out.set("--use-distributed-optimizer (absent: arguments.py default off)", "parallelism.zero_stage", 0)
    if tensor > 1:  # arguments.py turns --sequence-parallel off when TP = 1
        out.set(
            "--sequence-parallel" + ("" if "sequence-parallel" in args else " (absent: arguments.py default off)"),
            "parallelism.sequence_parallel",
            "sequence-parallel" in args,
        )


def _pipeline(args: Args, out: Reading, num_layers: int | None) -> None:
    """Virtual stages (interleaved 1F1B), the weighted split, and the first and last stages' layer counts."""
    pipeline = as_int("--pipeline-model-parallel-size", args.get("pipeline-model-parallel-size", 1))
    virtual = 1
    if "num-virtual-stages-per-pipeline-rank" in args:
        virtual = as_int("--num-virtual-stages-per-pipeline-rank", args["num-virtual-stages-per-pipeline-rank"])
    elif "num-layers-per-virtual-pipeline-stage" in args and num_layers is not None:
        per_stage = as_int("--num-layers-per-virtual-pipeline-stage", args["num-layers-per-virtual-pipeline-stage"])
        if num_layers % (per_stage * pipeline):
            raise bad(
                "--num-layers-per-virtual-pipeline-stage",
                per_stage,
                f"does not divide the layers of a pipeline rank ({num_layers} ÷ {pipeline})",
            )
        virtual = num_layers // (per_stage * pipeline)
    if virtual > 1:
        source = "--num-virtual-stages-per-pipeline-rank or --num-layers-per-virtual-pipeline-stage"
        out.set(source, "parallelism.virtual_stages", virtual)
        out.set(source, "parallelism.pipeline_schedule", "interleaved_1f1b")
    accounted = [
        f for f in ("account-for-embedding-in-pipeline-split", "account-for-loss-in-pipeline-split") if f in args
    ]
    if len(accounted) == 2:
        out.set(
            "--account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split",
            "parallelism.pipeline_split",
            "weighted",
        )
    elif accounted:
        out.unmodelled.append(
            f"--{accounted[0]}: one of the embedding and the loss counted as a layer has no plan "
            "split (weighted counts both)"
        )
    _uneven(args, out, num_layers, pipeline, virtual)


def _uneven(args: Args, out: Reading, num_layers: int | None, pipeline: int, virtual: int) -> None:
    """--decoder-first/last-pipeline-num-layers: those stages' layers, the rest spread evenly over the middle."""
    ends = {
        flag: as_int(f"--{flag}", args[flag])
        for flag in ("decoder-first-pipeline-num-layers", "decoder-last-pipeline-num-layers")
        if flag in args
    }
    if not ends:
        return
    source = ", ".join(f"--{flag}" for flag in ends)
    if num_layers is None or virtual > 1:
        out.unmodelled.append(f"{source}: needs --num-layers and no virtual stages to become pipeline_layers")
        return
    middle, rest = pipeline - len(ends), num_layers - sum(ends.values())
    if rest < 0 or (middle == 0 and rest) or (middle and rest % middle):
        raise bad(
            source,
            list(ends.values()),
            f"leaves {rest} of --num-layers ({num_layers}) for {middle} middle stages: they must share them evenly",
        )
    first = [ends["decoder-first-pipeline-num-layers"]] if "decoder-first-pipeline-num-layers" in ends else []
    last = [ends["decoder-last-pipeline-num-layers"]] if "decoder-last-pipeline-num-layers" in ends else []
    out.set(source, "parallelism.pipeline_layers", first + [rest // middle if middle else 0] * middle + last)


def _recompute(args: Args, out: Reading) -> None:
    """--recompute-granularity full (every layer: method uniform, 1 layer per group) or selective (core_attn)."""
    granularity = args.get("recompute-granularity")
    if granularity is None:
        return
    mode = choice("--recompute-granularity", granularity, {"full": "full", "selective": "selective"})
    out.set("--recompute-granularity", "techniques.activation_checkpointing", mode)
    method, layers = args.get("recompute-method"), args.get("recompute-num-layers", "1")
    if mode == "full" and (method == "block" or str(layers) != "1"):
        out.unmodelled.append(
            f"--recompute-method: {method} with --recompute-num-layers {layers} recomputes groups "
            "or some layers; modelled as every layer (full)"
        )
    modules = args.get("recompute-modules", "core_attn")
    if mode == "selective" and modules not in ("core_attn", ["core_attn"]):
        out.unmodelled.append(
            f"--recompute-modules: {modules} recomputes other modules than the attention core (the plan's selective)"
        )


_HANDLED = (
    "recompute-granularity",
    "recompute-method",
    "recompute-num-layers",
    "recompute-modules",
    "num-virtual-stages-per-pipeline-rank",
    "num-layers-per-virtual-pipeline-stage",
    "account-for-embedding-in-pipeline-split",
    "account-for-loss-in-pipeline-split",
    "decoder-first-pipeline-num-layers",
    "decoder-last-pipeline-num-layers",
    *FLAGS,
)


def read(text: str | Document, *, gpus: int | None = None) -> Imported:
    """A Megatron-LM script or command line as a partial plan."""
    args = dict(document(text).parse(parse))  # the steps below take flags out of it
    out = Reading(format="megatron", plan={"framework": "megatron"})
    if gpus is not None:
        set_key(out.plan, "hardware.count", gpus)
    tensor = as_int("--tensor-model-parallel-size", args.get("tensor-model-parallel-size", 1))
    num_layers = as_int("--num-layers", args["num-layers"]) if "num-layers" in args else None
    _flags(args, out)
    _precision(args, out)
    _sharding(args, out, tensor)
    _pipeline(args, out, num_layers)
    _recompute(args, out)
    model_name = _model(args, out, tensor)
    _position_embedding(args, out, bool(model_name))
    _rest(args, out)
    if model_name:
        out.model_name.append(model_name)
    return marked(out.imported(), training_defaults("Megatron-LM"))


def _position_embedding(args: Args, out: Reading, incomplete: bool) -> None:
    """GPTModel adds a learned position table (max_position_embeddings × hidden) unless rope or none."""
    kind = args.pop("position-embedding-type", None)
    if kind in (None, "learned_absolute") and not incomplete:
        out.unmodelled.append(
            f"--position-embedding-type: {kind or 'absent: arguments.py default'} learned_absolute "
            "adds a position table the model keys do not count"
        )
    elif kind is not None:
        out.ignored.append("--position-embedding-type")


def _rest(args: Args, out: Reading) -> None:
    for flag in args:
        known = flag in _HANDLED or flag in IGNORED or flag.startswith(IGNORED_PREFIXES)
        out.other(flag, unmodelled=UNMODELLED, ignored={flag} if known else set(), name=f"--{flag}")


# --- write ---------------------------------------------------------------------------------------------------------
CANNOT_SAY = {
    "workload.task": "lora, qlora and inference: pretrain_gpt.py trains every parameter",
    "precision.master_weights": "none: Megatron keeps fp32 (or fp16) main parameters",
    "precision.optimizer": "other than Adam/AdamW and SGD with momentum",
    "precision.optimizer_state": "low-precision moments (--exp-avg-dtype) are not read back",
    "precision.fp8_all_gather": "--fp8-param-gather gathers fp8 weights without ZeRO-3",
    "precision.fp8_recipe": "rowwise and nvfp4: Megatron's recipes are delayed, tensorwise, mxfp8 and blockwise",
    "techniques.activation_checkpointing": "selective_op and every_k: Megatron recomputes every layer (full) or "
    "the attention core (selective)",
    "techniques.loss": "chunked or fused: Megatron's vocab-parallel cross-entropy takes the whole logits",
    "techniques.compile": "Megatron does not torch.compile the model",
    "techniques.activation_offload": "--cpu-offloading is not modelled",
    "techniques.offload": "optimizer_and_params: --optimizer-cpu-offload moves the optimizer only",
    "techniques.optimizer_in_backward": "Megatron steps after backward",
    "techniques.expandable_segments": "an environment variable, not an argument",
    "parallelism.pipeline_schedule": "gpipe and zero_bubble: Megatron runs 1F1B, interleaved with virtual stages",
    "parallelism.pipeline_layers": "other than first and last stages around an even middle, or with virtual stages",
    "model.vocab_size": "Megatron pads the vocabulary to a multiple of --make-vocab-size-divisible-by × tensor ranks",
    **dict.fromkeys(
        ("model.sliding_window", "model.global_attention_every"),
        "sliding-window layers are not written: every layer attends to the whole sequence",
    ),
    "precision.optimizer_impl": "Megatron's Adam is Apex/Transformer Engine's fused one",
    **dict.fromkeys(
        ("precision.optimizer_library", "precision.optimizer_block_size", "precision.fp32_embedding_states"),
        "Megatron has no 8-bit optimizer",
    ),
    "parallelism.flat_params": "FSDP1's: Megatron's FSDP shards each parameter",
    "precision.gradients": "other than bf16 (--grad-reduce-in-bf16) and fp32 (main_grads)",
    "parallelism.async_tp": "Megatron overlaps tensor-parallel communication with --tp-comm-overlap (Transformer "
    "Engine userbuffers), which is not modelled",
    **dict.fromkeys(
        ("parallelism.reduce_bucket_elements", "parallelism.sub_group_elements"),
        "DeepSpeed's: Megatron's distributed optimizer has its own buckets",
    ),
    "framework_release": RELEASE_WHY,
}
UNSAID: tuple[tuple[str, Callable[[Plan], bool]], ...] = (
    ("workload.task", lambda p: p.workload.task not in ("pretrain", "finetune")),
    ("precision.master_weights", lambda p: p.precision.master_weights == "none"),
    ("precision.optimizer", lambda p: p.precision.optimizer not in ("adamw", "sgd_momentum")),
    ("precision.fp8_all_gather", lambda p: p.precision.fp8_all_gather),
    ("precision.fp8_recipe", lambda p: p.precision.fp8_recipe in ("rowwise", "nvfp4")),
    (
        "techniques.activation_checkpointing",
        lambda p: p.techniques.activation_checkpointing in ("selective_op", "every_k"),
    ),
    ("techniques.loss", lambda p: p.techniques.loss != "full"),
    ("techniques.compile", lambda p: p.techniques.compile),
    ("techniques.activation_offload", lambda p: p.techniques.activation_offload),
    ("techniques.offload", lambda p: p.techniques.offload == "optimizer_and_params"),
    ("techniques.optimizer_in_backward", lambda p: p.techniques.optimizer_in_backward),
    ("parallelism.pipeline_schedule", lambda p: p.parallelism.pipeline_schedule in ("gpipe", "zero_bubble")),
    (
        "parallelism.pipeline_layers",
        lambda p: p.parallelism.pipeline_layers is not None and _ends(p.parallelism.pipeline_layers) is None,
    ),
)
WRITE_SHARDING = {2: "optim_grads", 3: "optim_grads_params"}
WRITE_FP8 = {"tensorwise": "tensorwise", "mxfp8": "mxfp8", "rowwise": "blockwise", "nvfp4": "mxfp8"}


def _ends(layers: tuple[int, ...]) -> tuple[int, int] | None:
    """The first and last stages' layers where the middle stages hold the same count (what Megatron can say)."""
    middle = layers[1:-1]
    if len(layers) < 2 or len(set(middle)) > 1:
        return None
    return layers[0], layers[-1]


def _model_flags(plan: Plan) -> list[str]:
    m = plan.model
    if m.layer_pattern:
        raise bad(
            "model.layer_pattern",
            m.layer_pattern,
            "cannot be said: pretrain_gpt.py builds attention layers (a hybrid is pretrain_mamba.py's)",
        )
    if m.mla and not m.qk_rope_head_dim:
        raise bad(
            "model.qk_rope_head_dim",
            0,
            "cannot be said: Megatron's latent attention has a rotary part (--qk-pos-emb-head-dim of at least 1)",
        )
    flags = [
        f"--num-layers {m.num_layers}",
        f"--hidden-size {m.hidden_size}",
        f"--ffn-hidden-size {m.intermediate_size}",
        f"--num-attention-heads {m.num_attention_heads}",
        f"--kv-channels {m.head_dim}",
        "--position-embedding-type rope",
        f"--normalization {'RMSNorm' if m.norm == 'rmsnorm' else 'LayerNorm'}",
        f"--vocab-size {m.vocab_size}",
        "--make-vocab-size-divisible-by 1",
    ]
    if m.num_kv_heads != m.num_attention_heads:
        flags += ["--group-query-attention", f"--num-query-groups {m.num_kv_heads}"]
    flags += {"swiglu": ["--swiglu"], "relu2": ["--squared-relu"], "gelu": []}[m.mlp]
    flags += [
        flag
        for flag, on in (
            ("--untie-embeddings-and-output-weights", not m.tie_embeddings),
            ("--disable-bias-linear", not m.bias),
            ("--qk-layernorm", m.qk_norm),
        )
        if on
    ]
    if m.num_experts:
        flags += [
            f"--num-experts {m.num_experts}",
            f"--moe-router-topk {m.experts_per_token}",
            f"--moe-ffn-hidden-size {m.moe_intermediate_size}",
        ]
        flags += [f"--moe-shared-expert-intermediate-size {m.shared_experts * m.expert_intermediate_size}"] * bool(
            m.shared_experts
        )
        flags += [f'--moe-layer-freq "([0]*{m.first_dense_layers}+[1]*{m.moe_layers})"'] * bool(m.first_dense_layers)
    if m.mla:
        flags += [
            "--multi-latent-attention",
            f"--kv-lora-rank {m.kv_lora_rank}",
            f"--qk-head-dim {m.head_dim}",
            f"--qk-pos-emb-head-dim {m.qk_rope_head_dim}",
            f"--v-head-dim {m.v_head_dim}",
        ]
        flags += [f"--q-lora-rank {m.q_lora_rank}"] * (m.q_lora_rank is not None)
    return flags


def _training_flags(plan: Plan) -> list[str]:
    wl, prec, tech = plan.workload, plan.precision, plan.techniques
    flags = [
        f"--seq-length {wl.sequence_length}",
        f"--max-position-embeddings {wl.sequence_length}",
        f"--micro-batch-size {wl.micro_batch_size}",
        f"--global-batch-size {wl.global_batch_size}",
    ]
    if wl.steps is not None:
        flags.append(f"--train-iters {wl.steps}")
    elif wl.train_tokens is not None:
        flags.append(f"--train-samples {-(-wl.train_tokens // wl.sequence_length)}")
    flags += {"bf16": ["--bf16"], "fp16": ["--fp16"], "fp32": [], "fp8": ["--bf16", "--fp8-format hybrid"]}[
        prec.compute
    ]
    if prec.compute == "fp8":
        flags.append(f"--fp8-recipe {WRITE_FP8[prec.float8_recipe]}")
    flags += ["--grad-reduce-in-bf16"] * (prec.gradients == "bf16")
    flags += ["--optimizer sgd"] * (prec.optimizer == "sgd_momentum")
    flags += ["--optimizer-cpu-offload"] * (tech.offload != "none")
    flags.append(f"--attention-backend {'flash' if tech.attention == 'flash' else 'unfused'}")
    if tech.activation_checkpointing == "full":
        flags += ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"]
    elif tech.activation_checkpointing == "selective":
        flags.append("--recompute-granularity selective")
    if tech.moe_capacity_factor is not None:
        flags.append(f"--moe-expert-capacity-factor {tech.moe_capacity_factor}")
    return flags


def _parallel_flags(plan: Plan) -> list[str]:
    par = plan.parallelism
    flags = [
        f"--tensor-model-parallel-size {par.tensor}",
        f"--pipeline-model-parallel-size {par.pipeline}",
        f"--context-parallel-size {par.context}",
        f"--expert-model-parallel-size {par.expert}",
    ]
    flags += ["--sequence-parallel"] * par.sequence_parallel
    if par.zero_stage == 1:
        flags.append("--use-distributed-optimizer")
    elif par.zero_stage:
        flags += ["--use-megatron-fsdp", f"--data-parallel-sharding-strategy {WRITE_SHARDING[par.zero_stage]}"]
    if par.virtual_stages > 1:
        flags.append(f"--num-virtual-stages-per-pipeline-rank {par.virtual_stages}")
    uneven = plan.model.num_layers % (par.pipeline * par.virtual_stages)
    if par.pipeline_layers is None and (par.pipeline_split == "weighted" or par.pipeline_split == "auto" and uneven):
        flags += ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
    ends = _ends(par.pipeline_layers) if par.pipeline_layers is not None else None
    if ends:
        flags += [f"--decoder-first-pipeline-num-layers {ends[0]}", f"--decoder-last-pipeline-num-layers {ends[1]}"]
    return flags


def write(plan: Plan) -> str:
    """A runnable `torchrun pretrain_gpt.py` script with the plan's architecture, training and parallel flags."""
    count = plan.hardware.count
    per_node = 8 if count % 8 == 0 else count
    lines = ["#!/bin/bash", f"# Megatron-LM run for {plan.name or 'a VRAM Planner plan'} (written by VRAM Planner)"]
    lines += [f"# not said: {key} ({CANNOT_SAY[key]})" for key, unsaid in UNSAID if unsaid(plan)]
    lines += [
        "",
        "export CUDA_DEVICE_MAX_CONNECTIONS=1",
        f"GPUS_PER_NODE={per_node}",
        f"NUM_NODES={count // per_node}",
        "",
        "torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES pretrain_gpt.py \\",
    ]
    flags = [
        "--use-mcore-models",
        *_model_flags(plan),
        *_training_flags(plan),
        *_parallel_flags(plan),
        "--mock-data",
        "--tokenizer-type NullTokenizer",
    ]
    lines += [f"    {flag} \\" for flag in flags[:-1]] + [f"    {flags[-1]}"]
    return "\n".join(lines) + "\n"


# Megatron's own flags that no other framework's config spells this way
MARKERS = (
    "tensor-model-parallel-size",
    "pipeline-model-parallel-size",
    "num-layers",
    "micro-batch-size",
    "use-distributed-optimizer",
    "seq-length",
)


def detect(text: str | Document) -> bool:
    """A script or command line that runs Megatron's pretrain_*.py, or passes its model-parallel flags."""
    doc = document(text)
    if "pretrain_gpt.py" in doc.text or "pretrain_mamba.py" in doc.text:
        return True
    try:
        args = doc.parse(parse)
    except ValueError:  # PlanError: not shell text, or variables beyond the budget
        return False
    return sum(flag in args for flag in MARKERS) >= 2


SAYS = (
    "workload.sequence_length",
    "workload.micro_batch_size",
    "workload.global_batch_size",
    "workload.steps",
    "precision.compute",
    "precision.gradients",
    "precision.optimizer",
    "techniques.activation_checkpointing",
    "techniques.attention",
    "techniques.offload",
    "techniques.moe_capacity_factor",
    "parallelism.data",
    "parallelism.zero_stage",
    "parallelism.tensor",
    "parallelism.pipeline",
    "parallelism.context",
    "parallelism.expert",
    "parallelism.sequence_parallel",
    "parallelism.virtual_stages",
    "parallelism.pipeline_schedule",
    "parallelism.pipeline_split",
    "parallelism.pipeline_layers",
    "hardware.count",
)

FORMAT = Format(
    name="megatron",
    label="Megatron-LM arguments (shell script or torchrun line)",
    framework="megatron",
    suffix=".sh",
    detect=detect,
    read=read,
    write=write,
    says=SAYS,
    cannot_say=CANNOT_SAY,
)
