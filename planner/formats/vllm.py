"""vLLM's server command line (`vllm serve MODEL --flag value ...`, `python -m vllm.entrypoints.openai.api_server
--model MODEL ...`) and the YAML file its `--config` takes (the same flags as keys without the dashes).

Flag names, spellings and defaults are vLLM's own (vllm/engine/arg_utils.py EngineArgs.add_cli_args and the
config classes of vllm/config/ it reads them into: CacheConfig, ParallelConfig, SchedulerConfig, ModelConfig).
Underscores are accepted for dashes (vllm/utils FlexibleArgumentParser), as are the short forms -tp, -pp, -dp.

The context: vLLM has one length, --max-model-len, the most tokens (prompt + output) a request may hold; the
plan has two. Reading takes the output as the plan's default 256 tokens (at most half the length) and the prompt
as the rest, so the plan's context_tokens is --max-model-len exactly; writing sets --max-model-len to the plan's
prompt + output.
"""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from typing import Any

from planner.errors import bad, short
from planner.formats.base import (
    RELEASE_WHY,
    Document,
    Format,
    Imported,
    KeyRead,
    checkpoint,
    document,
    marked,
    serving_defaults,
    set_key,
)
from planner.formats.cmdline import (
    SERVER_CANNOT_SAY,
    Engine,
    Flag,
    among,
    command_line,
    fraction,
    one,
    read_flags,
    split_flags,
    switch,
    write_command,
)
from planner.formats.reading import as_int, quiet_mapping
from planner.plan.config import Inference, Plan, default_weights

# the plan's default output tokens (Inference.output_tokens), taken as a request's output when a length is read
DEFAULT_OUTPUT = Inference().output_tokens
# --dtype (vllm/config/model.py _STR_DTYPE_TO_TORCH_DTYPE; "auto" is the checkpoint's torch_dtype: not written)
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}
# --kv-cache-dtype (vllm/config/cache.py CacheDType; "auto" is the model dtype: not written)
KV_DTYPES = {
    "fp8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "fp8_inc": "fp8",
    "fp8_ds_mla": "fp8",
    "bfloat16": "bf16",
}
# --quantization methods that load weights in a plan's dtype (vllm/model_executor/layers/quantization/__init__.py
# QUANTIZATION_METHODS): fp8 quantizes a 16-bit checkpoint at load; AWQ and GPTQ checkpoints are 4-bit (GPTQ's
# default bits); bitsandbytes loads 4-bit NF4 (vllm bitsandbytes_loader: load_in_4bit unless the checkpoint says 8)
QUANTIZATION = {
    "fp8": "fp8",
    "fbgemm_fp8": "fp8",
    "ptpc_fp8": "fp8",
    "modelopt": "fp8",
    "awq": "int4",
    "awq_marlin": "int4",
    "gptq": "int4",
    "gptq_marlin": "int4",
    "marlin": "int4",
    "bitsandbytes": "nf4",
}
# what a checkpoint's name says of its weights (Hugging Face naming of quantized releases: "-AWQ", "-FP8",
# "-GPTQ-Int8", "-w8a8", "-bnb-4bit"); checked in order, the first match wins
NAME_WEIGHTS = (
    (re.compile(r"gptq-int8|w8a8|int8", re.I), "int8"),
    (re.compile(r"fp8", re.I), "fp8"),
    (re.compile(r"awq|gptq|w4a16|int4", re.I), "int4"),
    (re.compile(r"bnb-4bit|nf4", re.I), "nf4"),
)
# what --enforce-eager and --max-model-len set
_EAGER = "workload.inference.cuda_graphs"


def name_weights(name: str) -> tuple[tuple[str, Any], ...]:
    """precision.weights a quantized checkpoint's repo name says, if any."""
    last = name.rstrip("/").split("/")[-1]
    return next(((("precision.weights", dtype),) for pattern, dtype in NAME_WEIGHTS if pattern.search(last)), ())


def context(name: str, text: Any) -> tuple[tuple[str, Any], ...]:
    """--max-model-len as the plan's prompt + output (see the module's docstring)."""
    length = as_int(name, text)
    if length < 2:
        raise bad(name, text, "must be an integer ≥ 2 (a prompt token and an output token)")
    output = min(DEFAULT_OUTPUT, length // 2)
    return (("workload.inference.prompt_tokens", length - output), ("workload.inference.output_tokens", output))


FLAGS = {
    "--gpu-memory-utilization": one("workload.inference.gpu_memory_utilization", fraction),
    "--max-num-seqs": one("workload.inference.max_num_seqs", as_int),
    "--max-num-batched-tokens": one("workload.inference.prefill_chunk_tokens", as_int),
    "--max-model-len": Flag(read=context),
    "--dtype": one("precision.compute", among({**DTYPES, "auto": None})),
    "--kv-cache-dtype": one("precision.kv_cache", among({**KV_DTYPES, "auto": None})),
    "--quantization": one("precision.weights", among(QUANTIZATION)),
    "--tensor-parallel-size": one("parallelism.tensor", as_int),
    "--pipeline-parallel-size": one("parallelism.pipeline", as_int),
    "--data-parallel-size": one("parallelism.data", as_int),
    "--enforce-eager": switch(_EAGER, lambda on: not on),
    "--enable-prefix-caching": switch("workload.inference.prefix_caching"),
}
ALIASES = {
    "-tp": "--tensor-parallel-size",
    "-pp": "--pipeline-parallel-size",
    "-dp": "--data-parallel-size",
    "-dcp": "--decode-context-parallel-size",
    "-q": "--quantization",
    "-O": "--compilation-config",
}
UNMODELLED = {
    "--block-size": "the planner pages the KV cache in vLLM's default 16-token blocks",
    "--swap-space": "host RAM (GiB per GPU) for preempted sequences' KV blocks (V0); GPU memory unchanged",
    "--cpu-offload-gb": "weights kept in host memory and streamed in: fewer bytes of weights on the GPU",
    "--kv-offloading-size": "KV blocks offloaded to host memory",
    "--kv-offloading-backend": "KV blocks offloaded to host memory",
    "--kv-cache-memory": "a fixed KV budget in bytes instead of the utilization's",
    "--kv-cache-memory-bytes": "a fixed KV budget in bytes instead of the utilization's",
    "--num-gpu-blocks-override": "a fixed number of KV blocks instead of the utilization's",
    "--max-seq-len-to-capture": "the CUDA graphs captured (the planner takes a fixed graph pool)",
    "--cuda-graph-sizes": "the CUDA graphs captured (the planner takes a fixed graph pool)",
    "--compilation-config": "the CUDA graphs captured and the compile passes (the planner takes a fixed graph pool)",
    "--enable-expert-parallel": "vLLM shards whole experts over tensor × data ranks; the planner splits each "
    "expert over the tensor ranks (the same bytes per GPU at data 1)",
    "--enable-chunked-prefill": "off (V0 only): a prefill of the whole prompt instead of --max-num-batched-tokens",
    "--disable-custom-all-reduce": "no custom all-reduce buffers (the planner counts 2 × 8 MiB at tensor 2-8)",
    "--speculative-config": "a draft model's weights, KV cache and activations",
    "--enable-lora": "LoRA adapters' slots and their buffers",
    "--max-loras": "LoRA adapters' slots and their buffers",
    "--max-lora-rank": "LoRA adapters' slots and their buffers",
    "--max-cpu-loras": "LoRA adapters' slots and their buffers",
    "--limit-mm-per-prompt": "the multimodal encoder's profile run and cache",
    "--mm-processor-cache-gb": "the multimodal processor cache",
    "--hf-overrides": "the model's architecture as overridden",
    "--rope-scaling": "the model's context as overridden",
    "--max-num-partial-prefills": "concurrent partial prefills within the token budget",
    "--config": "the flags in that YAML file are not read here: read the file itself as a vllm config",
    "--load-format": "a load format other than the checkpoint's (dummy, sharded_state, ...) may load other bytes",
    "--calculate-kv-scales": "fp8 KV scales computed on the first forward",
    "--mamba-ssm-cache-dtype": "the recurrent state's dtype (the planner takes the model's)",
    "--language-model-only": "a multimodal checkpoint without its encoder's weights",
    # vllm/config/parallel.py decode_context_parallel_size: the KV cache split by tokens over this many of the
    # tensor ranks (for MLA and few-KV-head models, whose KV heads the tensor ranks would otherwise repeat)
    "--decode-context-parallel-size": "each GPU holds 1/this of the tokens' KV cache; the planner holds all of "
    "them on each tensor rank (an upper bound)",
    "--mm-processor-cache-type": "where the multimodal processor cache lives (lru in process, shm shared memory)",
}
SWITCHES = frozenset(
    {
        "--enable-expert-parallel",
        "--disable-custom-all-reduce",
        "--enable-lora",
        "--enable-chunked-prefill",
        "--trust-remote-code",
        "--disable-log-requests",
        "--disable-log-stats",
        "--enable-auto-tool-choice",
        "--async-scheduling",
        "--calculate-kv-scales",
        "--language-model-only",
        "--enable-log-requests",
        "--disable-fastapi-docs",
        "--enable-request-id-headers",
        "--disable-frontend-multiprocessing",
        "--headless",
        "--skip-tokenizer-init",
        "--enable-sleep-mode",
        "--disable-uvicorn-access-log",
        "--disable-cascade-attn",
    }
)
IGNORED = frozenset(
    {
        "--host",
        "--port",
        "--api-key",
        "--served-model-name",
        "--trust-remote-code",
        "--disable-log-requests",
        "--disable-log-stats",
        "--enable-log-requests",
        "--uvicorn-log-level",
        "--disable-uvicorn-access-log",
        "--tokenizer",
        "--tokenizer-mode",
        "--revision",
        "--tokenizer-revision",
        "--code-revision",
        "--download-dir",
        "--seed",
        "--chat-template",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "--reasoning-parser",
        "--generation-config",
        "--override-generation-config",
        "--default-chat-template-kwargs",
        "--max-logprobs",
        "--distributed-executor-backend",
        "--async-scheduling",
        "--attention-backend",
        "--api-server-count",
        "--disable-fastapi-docs",
        "--enable-request-id-headers",
        "--response-role",
        "--ssl-keyfile",
        "--ssl-certfile",
        "--allowed-origins",
        "--root-path",
        "--middleware",
        "--config-format",
        "--guided-decoding-backend",
        "--structured-outputs-config",
        "--disable-frontend-multiprocessing",
        "--headless",
        "--skip-tokenizer-init",
        "--enable-sleep-mode",
        "--otlp-traces-endpoint",
        "--collect-detailed-traces",
        "--scheduling-policy",
        "--max-num-partial-prefills",
        "--long-prefill-token-threshold",
        "--data-parallel-address",
        "--data-parallel-rpc-port",
        "--data-parallel-size-local",
        "--data-parallel-start-rank",
        "--node-rank",
        "--nnodes",
        "--master-addr",
        "--master-port",
        "--kv-transfer-config",
        "--kv-events-config",
        "--task",
        "--runner",
        "--convert",
        "--model-impl",
        "--mm-encoder-tp-mode",
        "--chat-template-content-format",
        "--model-tag",
        "--tool-parser-plugin",
        "--lora-modules",
        "--log-config-file",
        "--max-log-len",
        "--enable-prompt-tokens-details",
        "--disable-cascade-attn",  # the attention kernel for shared prefixes: no memory of its own
        "--logits-processors",
        "--allowed-local-media-path",
        "--reasoning-parser-plugin",
    }
)
ENGINE = Engine(
    name="vllm",
    framework="vllm",
    program=re.compile(r"\bvllm\s+serve\b|vllm\.entrypoints\.openai\.api_server"),
    starts=(("vllm", "serve"), ("-m", "vllm.entrypoints.openai.api_server")),
    model_flags=("--model",),
    flags=FLAGS,
    aliases=ALIASES,
    switches=SWITCHES,
    unmodelled=UNMODELLED,
    ignored=IGNORED - set(UNMODELLED),
    underscores=True,
    dotted=True,
    model_key=name_weights,
)


def _yaml_config(text: str | Document) -> dict[str, Any] | None:
    """A `--config` YAML's flags ({key: value}), or None when the text is not one (a mapping whose keys are vLLM
    flags without their dashes: at least 4 in 5 known ones, which tells it from a training YAML that shares a few
    names such as `model` or `dtype`)."""
    data = quiet_mapping(text)
    if not data or not all(isinstance(k, str) for k in data):
        return None
    known = set(FLAGS) | set(UNMODELLED) | IGNORED | {"--model", "--no-enable-prefix-caching"}
    share = sum(f"--{key.replace('_', '-')}" in known for key in data) / len(data)
    return data if share >= 0.8 else None


def detect(text: str | Document) -> bool:
    doc = document(text)
    return bool(ENGINE.program.search(doc.text)) or (
        "sglang" not in doc.text and _yaml_config(doc) is not None and "_component_" not in doc.text
    )


def read_mapping(config: dict[str, Any], *, gpus: int | None = None) -> Imported:
    """Flags given as a mapping (the --config YAML, the "non-default args" a vLLM log prints): each key is a flag
    without its dashes, true a switch given, false its --no- form."""
    args = [
        a
        for key, value in config.items()
        for a in (
            (f"--{key}",) if value is True else (f"--no-{key}",) if value is False else (f"--{key}", _flag_text(value))
        )
    ]
    return _prefix_default(read_flags(split_flags(args, ENGINE), [], ENGINE, gpus=gpus))


def _flag_text(value: Any) -> str:
    """A mapping's value as its flag's text: text as it is; anything else as an error quotes it (a list or
    mapping cut to a line: aliases can make a structure's whole text gigabytes)."""
    return value if isinstance(value, str) else short(value)


def read(text: str | Document, *, gpus: int | None = None) -> Imported:
    doc = document(text)
    config = _yaml_config(doc) if not ENGINE.program.search(doc.text) else None
    if config is not None:
        return marked(read_mapping(config, gpus=gpus), serving_defaults("max-model-len", "vLLM"))
    env, args, others = command_line(doc.text, ENGINE)
    return marked(
        _prefix_default(read_flags(split_flags(args, ENGINE), env, ENGINE, gpus=gpus, others=others)),
        serving_defaults("--max-model-len", "vLLM"),
    )


def _prefix_default(imported: Imported) -> Imported:
    """vLLM's V1 engine caches prefixes unless told not to (vllm/config/cache.py enable_prefix_caching, on by
    default from 0.8's V1), while the plan's default is off: a command that does not say is read as on."""
    if any(r.plan_key == "workload.inference.prefix_caching" for r in imported.read):
        return imported
    plan = copy.deepcopy(imported.plan)
    set_key(plan, "workload.inference.prefix_caching", True)
    return replace(
        imported,
        plan=plan,
        read=imported.read
        + (
            KeyRead(
                source="--enable-prefix-caching (vLLM's default)",
                plan_key="workload.inference.prefix_caching",
                value=True,
            ),
        ),
    )


def _weights_flag(plan: Plan) -> str | None:
    """--quantization for the plan's served weights (None: the checkpoint's own dtype)."""
    prec = plan.precision
    if prec.weights in (default_weights("inference", prec.activation_dtype, plan.model), prec.activation_dtype):
        return None
    writes = {"fp8": "fp8", "int4": "awq", "nf4": "bitsandbytes"}
    if prec.weights not in writes:
        raise bad(
            "precision.weights",
            prec.weights,
            f"has no vLLM --quantization that loads it (with --dtype "
            f"{_dtype_flag(plan)}); serve a checkpoint in it by its name",
        )
    return writes[prec.weights]


def _dtype_flag(plan: Plan) -> str:
    compute = plan.precision.activation_dtype
    return {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[compute]


def _kv_flag(plan: Plan) -> str | None:
    kv = plan.precision.kv_cache
    if kv == plan.precision.activation_dtype:
        return None
    if kv not in ("fp8", "bf16"):
        raise bad(
            "precision.kv_cache",
            kv,
            f"is not a vLLM --kv-cache-dtype beside --dtype {_dtype_flag(plan)} (auto, fp8, bfloat16)",
        )
    return {"fp8": "fp8", "bf16": "bfloat16"}[kv]


def model_arg(plan: Plan) -> str:
    """The model a command names: the preset's Hugging Face repo (base.checkpoint), else the plan's name, else a
    placeholder."""
    return checkpoint(plan) or plan.name or "MODEL_PATH"


def write(plan: Plan) -> str:
    inf, par = plan.workload.inference, plan.parallelism
    if plan.precision.compute == "fp8":
        raise bad("precision.compute", "fp8", "is not a vLLM --dtype; serve fp8 weights with --quantization fp8")
    args = [
        ("--dtype", _dtype_flag(plan)),
        ("--quantization", _weights_flag(plan)),
        ("--kv-cache-dtype", _kv_flag(plan)),
        ("--max-model-len", inf.context_tokens),
        ("--gpu-memory-utilization", inf.gpu_memory_utilization),
        ("--max-num-seqs", inf.max_num_seqs),
        ("--max-num-batched-tokens", inf.prefill_chunk_tokens),
        ("--tensor-parallel-size", par.tensor if par.tensor > 1 else None),
        ("--pipeline-parallel-size", par.pipeline if par.pipeline > 1 else None),
        ("--data-parallel-size", par.data * par.context if par.data * par.context > 1 else None),
        ("--enforce-eager", True if not inf.cuda_graphs else None),
        ("--enable-prefix-caching" if inf.prefix_caching else "--no-enable-prefix-caching", True),
    ]
    return write_command(f"vllm serve {model_arg(plan)}", [(f, v) for f, v in args if v is not None])


SAYS = (
    "model.preset",
    "workload.task",
    "workload.inference.gpu_memory_utilization",
    "workload.inference.max_num_seqs",
    "workload.inference.prefill_chunk_tokens",
    "workload.inference.cuda_graphs",
    "workload.inference.prefix_caching",
    "precision.compute",
    "precision.weights",
    "precision.kv_cache",
    "parallelism.tensor",
    "parallelism.pipeline",
    "parallelism.data",
)
CANNOT_SAY = {
    **SERVER_CANNOT_SAY,
    "framework_release": RELEASE_WHY,
    "parallelism.sequence_parallel": "no sequence parallelism",
    "techniques.compile": "vLLM's own compilation (-O, --compilation-config) is not read back",
    "workload.inference.batch_size": "a server takes the requests that arrive; --max-num-seqs caps them",
    "workload.inference.prompt_tokens": "one length, --max-model-len (prompt + output); read back as the prompt "
    "with 256 output tokens",
    "workload.inference.output_tokens": "one length, --max-model-len (prompt + output); read back as 256",
    "workload.inference.fraction_scope": "what the fraction covers follows the vLLM release (framework_release)",
    "parallelism.expert": "--enable-expert-parallel shards experts over tensor × data ranks, not a degree of its own",
    "precision.quant_group_size": "the quantized checkpoint's own group size",
    "techniques.attention": "vLLM's attention is always fused (FlashAttention, FlashInfer, ...)",
}
FORMAT = Format(
    name="vllm",
    label="vLLM server command line (vllm serve)",
    framework="vllm",
    suffix=".sh",
    detect=detect,
    read=read,
    write=write,
    says=SAYS,
    cannot_say=CANNOT_SAY,
)
