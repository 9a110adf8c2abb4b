"""SGLang's server command line (`python -m sglang.launch_server --model-path MODEL --flag value ...`, `sglang serve
...`).

Flag names, spellings and defaults are SGLang's own (python/sglang/srt/server_args.py ServerArgs.add_cli_args).
--mem-fraction-static is the plan's gpu_memory_utilization with the recipe's fraction_scope static (weights and
the KV pool inside it; activations and CUDA graphs on top). --context-length is read as vLLM's --max-model-len
is (planner/formats/vllm.py): the plan's prompt + output.
"""

from __future__ import annotations

import re

from planner.errors import bad
from planner.formats.base import RELEASE_WHY, Document, Format, Imported, document, marked, serving_defaults
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
from planner.formats.reading import as_int
from planner.formats.vllm import DTYPES, context, model_arg, name_weights
from planner.plan.config import Plan, default_weights

# --kv-cache-dtype (server_args.py choices: auto, fp8_e5m2, fp8_e4m3, bf16/bfloat16, fp4_e2m1); auto: the model dtype
KV_DTYPES = {"fp8_e5m2": "fp8", "fp8_e4m3": "fp8", "bf16": "bf16", "bfloat16": "bf16"}
# --quantization (server_args.py QUANTIZATION_CHOICES) in a plan dtype: w8a8_int8 is 8-bit integer weights
QUANTIZATION = {
    "fp8": "fp8",
    "w8a8_fp8": "fp8",
    "modelopt": "fp8",
    "modelopt_fp8": "fp8",
    "awq": "int4",
    "awq_marlin": "int4",
    "gptq": "int4",
    "gptq_marlin": "int4",
    "marlin": "int4",
    "bitsandbytes": "nf4",
    "w8a8_int8": "int8",
}
WRITE_QUANTIZATION = {"fp8": "fp8", "int4": "awq", "nf4": "bitsandbytes", "int8": "w8a8_int8"}


def chunk(name: str, text: str) -> int:
    """--chunked-prefill-size: tokens per prefill forward (-1 turns chunking off: the whole prompt at once)."""
    if str(text).strip() == "-1":
        raise bad(name, text, "(no chunking) is not modelled; give the tokens of a chunk")
    return as_int(name, text)


FLAGS = {
    "--mem-fraction-static": one("workload.inference.gpu_memory_utilization", fraction),
    "--max-running-requests": one("workload.inference.max_num_seqs", as_int),
    "--chunked-prefill-size": one("workload.inference.prefill_chunk_tokens", chunk),
    "--context-length": Flag(read=context),
    "--dtype": one("precision.compute", among({**DTYPES, "auto": None})),
    "--kv-cache-dtype": one("precision.kv_cache", among({**KV_DTYPES, "auto": None})),
    "--quantization": one("precision.weights", among(QUANTIZATION)),
    "--tp-size": one("parallelism.tensor", as_int),
    "--pp-size": one("parallelism.pipeline", as_int),
    "--dp-size": one("parallelism.data", as_int),
    "--disable-cuda-graph": switch("workload.inference.cuda_graphs", lambda on: not on),
}
ALIASES = {
    "--model": "--model-path",
    "--tp": "--tp-size",
    "--tensor-parallel-size": "--tp-size",
    "--dp": "--dp-size",
    "--data-parallel-size": "--dp-size",
    "--pp": "--pp-size",
    "--pipeline-parallel-size": "--pp-size",
    "--ep": "--ep-size",
    "--expert-parallel-size": "--ep-size",
}
UNMODELLED = {
    "--ep-size": "SGLang shards whole experts over the tensor ranks; the planner splits each expert over them "
    "(the same bytes per GPU)",
    "--cuda-graph-max-bs": "the CUDA graphs captured (the planner takes a fixed graph pool)",
    "--cuda-graph-bs": "the CUDA graphs captured (the planner takes a fixed graph pool)",
    "--max-total-tokens": "a cap on the KV pool's tokens below what the fraction holds",
    "--max-prefill-tokens": "the prefill batch's token budget beside --chunked-prefill-size",
    "--page-size": "the planner takes SGLang's token pool in pages of 1",
    "--enable-dp-attention": "attention data-parallel inside the tensor group: KV heads and activations per rank",
    "--enable-torch-compile": "compiled decode graphs and their pools",
    "--torch-compile-max-bs": "compiled decode graphs and their pools",
    "--cpu-offload-gb": "weights kept in host memory: fewer bytes of weights on the GPU",
    "--speculative-algorithm": "a draft model's weights, KV pool and graphs",
    "--speculative-draft-model-path": "a draft model's weights, KV pool and graphs",
    "--speculative-num-steps": "a draft model's weights, KV pool and graphs",
    "--speculative-eagle-topk": "a draft model's weights, KV pool and graphs",
    "--speculative-num-draft-tokens": "a draft model's weights, KV pool and graphs",
    "--max-mamba-cache-size": "the recurrent-state pool of a hybrid model",
    "--mamba-ssm-dtype": "the recurrent state's dtype (the planner takes the model's)",
    "--enable-lora": "LoRA adapters' slots and buffers",
    "--max-loras-per-batch": "LoRA adapters' slots and buffers",
    "--lora-paths": "LoRA adapters' weights",
    "--enable-hierarchical-cache": "a host-memory KV cache beside the GPU pool",
    "--disable-custom-all-reduce": "no custom all-reduce buffers (the planner counts 2 × 8 MiB at tensor 2-8)",
    "--json-model-override-args": "the model's architecture as overridden",
}
SWITCHES = frozenset(
    {
        "--disable-cuda-graph",
        "--disable-radix-cache",
        "--trust-remote-code",
        "--enable-dp-attention",
        "--enable-torch-compile",
        "--enable-metrics",
        "--enable-lora",
        "--enable-hierarchical-cache",
        "--disable-custom-all-reduce",
        "--skip-tokenizer-init",
        "--enable-cache-report",
        "--log-requests",
        "--show-time-cost",
        "--disable-overlap-schedule",
        "--enable-mixed-chunk",
        "--enable-p2p-check",
        "--disable-cuda-graph-padding",
    }
)
IGNORED = frozenset(
    {
        "--host",
        "--port",
        "--trust-remote-code",
        "--log-level",
        "--log-level-http",
        "--served-model-name",
        "--tokenizer-path",
        "--tokenizer-mode",
        "--revision",
        "--download-dir",
        "--random-seed",
        "--chat-template",
        "--reasoning-parser",
        "--tool-call-parser",
        "--api-key",
        "--attention-backend",
        "--sampling-backend",
        "--enable-metrics",
        "--skip-tokenizer-init",
        "--enable-cache-report",
        "--log-requests",
        "--show-time-cost",
        "--schedule-policy",
        "--schedule-conservativeness",
        "--disable-radix-cache",
        "--disable-overlap-schedule",
        "--enable-mixed-chunk",
        "--enable-p2p-check",
        "--disable-cuda-graph-padding",
        "--nnodes",
        "--node-rank",
        "--dist-init-addr",
        "--load-format",
        "--grammar-backend",
        "--stream-interval",
        "--watchdog-timeout",
        "--decode-log-interval",
        "--mm-attention-backend",
        "--moe-runner-backend",
        "--device",
    }
)
ENGINE = Engine(
    name="sglang",
    framework="sglang",
    program=re.compile(r"sglang\.launch_server|\bsglang\s+serve\b"),
    starts=(("-m", "sglang.launch_server"), ("sglang", "serve")),
    model_flags=("--model-path",),
    flags=FLAGS,
    aliases=ALIASES,
    switches=SWITCHES,
    unmodelled=UNMODELLED,
    ignored=IGNORED,
    model_key=name_weights,
    abbreviations=True,
)


def detect(text: str | Document) -> bool:
    return bool(ENGINE.program.search(document(text).text))


def read(text: str | Document, *, gpus: int | None = None) -> Imported:
    env, args, others = command_line(document(text).text, ENGINE)
    return marked(
        read_flags(split_flags(args, ENGINE), env, ENGINE, gpus=gpus, others=others),
        serving_defaults("--context-length", "SGLang"),
    )


def _precision_args(plan: Plan) -> list[tuple[str, object]]:
    """--dtype, --quantization and --kv-cache-dtype for the plan's precision."""
    prec = plan.precision
    if prec.compute == "fp8":
        raise bad("precision.compute", "fp8", "is not an SGLang --dtype; serve fp8 weights with --quantization fp8")
    dtype = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[prec.activation_dtype]
    native = (default_weights("inference", prec.activation_dtype, plan.model), prec.activation_dtype)
    kv = None if prec.kv_cache == prec.activation_dtype else {"fp8": "fp8_e5m2", "bf16": "bfloat16"}.get(prec.kv_cache)
    if kv is None and prec.kv_cache != prec.activation_dtype:
        raise bad(
            "precision.kv_cache",
            prec.kv_cache,
            f"is not an SGLang --kv-cache-dtype beside --dtype {dtype} (auto, fp8_e5m2, fp8_e4m3, bfloat16)",
        )
    quant = None if prec.weights in native else WRITE_QUANTIZATION.get(prec.weights)
    if quant is None and prec.weights not in native:
        raise bad("precision.weights", prec.weights, f"has no SGLang --quantization beside --dtype {dtype}")
    return [("--dtype", dtype), ("--quantization", quant), ("--kv-cache-dtype", kv)]


def write(plan: Plan) -> str:
    inf, par = plan.workload.inference, plan.parallelism
    args = _precision_args(plan) + [
        ("--context-length", inf.context_tokens),
        ("--mem-fraction-static", inf.gpu_memory_utilization),
        ("--max-running-requests", inf.max_num_seqs),
        ("--chunked-prefill-size", inf.prefill_chunk_tokens),
        ("--tp-size", par.tensor if par.tensor > 1 else None),
        ("--pp-size", par.pipeline if par.pipeline > 1 else None),
        ("--dp-size", par.data * par.context if par.data * par.context > 1 else None),
        ("--disable-cuda-graph", True if not inf.cuda_graphs else None),
    ]
    return write_command(
        f"python -m sglang.launch_server --model-path {model_arg(plan)}", [(f, v) for f, v in args if v is not None]
    )


SAYS = (
    "model.preset",
    "workload.task",
    "workload.inference.gpu_memory_utilization",
    "workload.inference.max_num_seqs",
    "workload.inference.prefill_chunk_tokens",
    "workload.inference.cuda_graphs",
    "precision.compute",
    "precision.weights",
    "precision.kv_cache",
    "parallelism.tensor",
    "parallelism.pipeline",
    "parallelism.data",
)
CANNOT_SAY = {
    **SERVER_CANNOT_SAY,
    "workload.inference.prefill_chunk_tokens": "none (the whole prompt batch): SGLang chunks prefill by default "
    "(--chunked-prefill-size)",
    "framework_release": RELEASE_WHY,
    "techniques.attention": "SGLang's attention is always fused (FlashInfer, FlashAttention, Triton)",
    "techniques.compile": "--enable-torch-compile is not modelled",
    "parallelism.sequence_parallel": "no sequence parallelism",
    "workload.inference.batch_size": "a server takes the requests that arrive; --max-running-requests caps them",
    "workload.inference.prompt_tokens": "one length, --context-length (prompt + output); read back as the prompt "
    "with 256 output tokens",
    "workload.inference.output_tokens": "one length, --context-length (prompt + output); read back as 256",
    "workload.inference.fraction_scope": "SGLang's mem_fraction_static is always the static scope",
    "workload.inference.prefix_caching": "the planner's prefix_caching is vLLM's hybrid-state mode; SGLang's radix "
    "cache shares pages of the same pool",
    "parallelism.expert": "--ep-size shards experts over the tensor ranks, not a degree of its own",
    "precision.quant_group_size": "the quantized checkpoint's own group size",
}
FORMAT = Format(
    name="sglang",
    label="SGLang server command line (sglang.launch_server)",
    framework="sglang",
    suffix=".sh",
    detect=detect,
    read=read,
    write=write,
    says=SAYS,
    cannot_say=CANNOT_SAY,
)
