"""Unsloth training scripts (a .py file, or a notebook exported as one) and unsloth-cli.py command lines, read
only: no export.

A script is parsed with `ast`, never imported or run. The calls read are FastLanguageModel/FastModel
.from_pretrained, .get_peft_model and the trainer: SFTTrainer/Trainer and its args (SFTConfig/TrainingArguments),
whose keys mean what they mean in the HF Trainer (planner/formats/hf_trainer.py reads them). An argument is read
where it is a literal, or a name the script assigns a literal to once at its top level; any other is named as not
read, and the default planned in its place is said. The first call of each kind is read (a notebook reloads its
saved adapters with a second from_pretrained): later ones are named as not read.

Defaults and behaviour: unslothai/unsloth@015bdef (2026-08-22) unsloth/models/loader.py FastLanguageModel
.from_pretrained (model_name "unsloth/Llama-3.2-1B-Instruct", max_seq_length 2048, dtype None, load_in_4bit True,
load_in_8bit False, full_finetuning False), llama.py FastLlamaModel.get_peft_model (r 16, the seven projections,
lora_alpha 16, lora_dropout 0, use_gradient_checkpointing "unsloth"), llama.py BitsAndBytesConfig (nf4, double
quantization), vision.py FastModel (full fine-tuning turns 4/8-bit off; bf16 full fine-tuning steps bf16 parameters
unless float32_mixed_precision), _utils.py apply_unsloth_gradient_checkpointing ("unsloth" under 512 tokens is plain
checkpointing), rl.py (the trainer's max length is capped at the model's max_seq_length, and is it where unset),
unsloth-cli.py (its flags and defaults). unslothai/unsloth-zoo@ce232d6 unsloth_zoo/gradient_checkpointing.py
(UnslothCheckpointFunction: each checkpointed layer's input is copied to a CPU buffer) and fused_losses/
cross_entropy_loss.py (unsloth_fused_ce_loss: the output head and the loss run in chunks of tokens);
unsloth/utils/attention_dispatch.py (training attention is flash-attn, xformers or SDPA).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from planner.errors import PlanError, bad
from planner.formats import hf_trainer
from planner.formats.base import Document, Format, Imported, document
from planner.formats.hf_trainer import ALL_LINEAR, MODULES, Args
from planner.formats.reading import Reading, as_bool, as_int, as_number, as_text, choice
from planner.formats.shell import environment, words

FRAMEWORK = "hf_trainer"
# the receivers whose from_pretrained / get_peft_model are Unsloth's loaders
LOADERS = ("FastLanguageModel", "FastModel", "FastVisionModel")
TRAINERS = ("SFTTrainer", "Trainer", "UnslothTrainer")
TRAINER_ARGS = ("SFTConfig", "TrainingArguments", "UnslothTrainingArguments")
# Unsloth's own defaults (loader.py, llama.py at 015bdef; see the module's docstring)
LOAD_DEFAULTS = {
    "model_name": "unsloth/Llama-3.2-1B-Instruct",
    "max_seq_length": 2048,
    "load_in_4bit": True,
    "load_in_8bit": False,
    "load_in_16bit": False,
    "full_finetuning": False,
}
PEFT_DEFAULTS = {"r": 16, "lora_alpha": 16, "lora_dropout": 0.0, "use_gradient_checkpointing": "unsloth"}
# dtype None: Unsloth loads bfloat16 where the GPU supports it (is_bfloat16_supported), else float16
DTYPES = {**hf_trainer.DTYPES, "torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}
# _utils.py apply_unsloth_gradient_checkpointing: below this many tokens "unsloth" is plain checkpointing
OFFLOAD_FROM = 512
# unsloth-cli.py's flags: flag → (the call keyword it is passed as, the CLI's default where it passes one)
CLI = {
    "model_name": ("load", "unsloth/llama-3-8b"),
    "max_seq_length": ("load", 2048),
    "dtype": ("load", None),
    "load_in_4bit": ("load", False),
    "r": ("peft", 16),
    "lora_alpha": ("peft", 16),
    "lora_dropout": ("peft", 0.0),
    "bias": ("peft", "none"),
    "use_gradient_checkpointing": ("peft", "unsloth"),
    "use_rslora": ("peft", False),
    "loftq_config": ("peft", None),
    "use_dora": ("peft", False),
    "per_device_train_batch_size": ("trainer", 2),
    "gradient_accumulation_steps": ("trainer", 4),
    "max_steps": ("trainer", 400),
    "optim": ("trainer", "adamw_8bit"),
    "packing": ("trainer", False),
}
# keywords known to leave memory and time alone, by call
IGNORED = {
    "load": frozenset(
        {
            "token",
            "device_map",
            "trust_remote_code",
            "revision",
            "fix_tokenizer",
            "rope_scaling",
            "random_state",
            "use_exact_model_name",
            "resize_model_vocab",
            "text_only",
            "attn_implementation",
        }
    ),
    "peft": frozenset(
        {
            "model",
            "random_state",
            "use_rslora",
            "init_lora_weights",
            "temporary_location",
            "max_seq_length",
            "loftq_config",
            "layers_pattern",
            "ensure_weight_tying",
        }
    ),
    # unsloth-cli.py's flags for data, saving and pushing the model, and the optimizer's schedule
    "cli": frozenset(
        {
            "dataset",
            "save_model",
            "save_path",
            "save_gguf",
            "quantization",
            "push_model",
            "push_gguf",
            "hub_path",
            "hub_token",
            "raw_text_file",
            "chunk_size",
            "stride",
            "per_device_eval_batch_size",
            "warmup_steps",
            "learning_rate",
            "logging_steps",
            "weight_decay",
            "lr_scheduler_type",
            "seed",
            "output_dir",
            "report_to",
            "random_state",
        }
    ),
    "trainer": frozenset(
        {
            "model",
            "tokenizer",
            "processing_class",
            "train_dataset",
            "eval_dataset",
            "args",
            "data_collator",
            "formatting_func",
            "callbacks",
            "dataset_text_field",
            "dataset_num_proc",
            "compute_metrics",
            *hf_trainer.IGNORED,
        }
    ),
}
UNMODELLED = {
    "bias": "trained biases beside the adapters",
    "modules_to_save": "these modules are trained in full beside the adapters",
    "finetune_last_n_layers": "adapters on the last layers only",
    "layers_to_transform": "adapters on the named layers only",
    "target_parameters": "adapters on parameters (MoE experts) are not planned",
    "offload_embedding": "the input embedding is kept on the CPU",
    "fast_inference": "a vLLM engine beside the trainer (GRPO's generation)",
    "gpu_memory_utilization": "the vLLM engine's share of the GPU",
    "load_in_fp8": "fp8 weights are not a plan weight dtype for adapters",
    "qat_scheme": "quantization-aware training's fake-quantized weights",
    "unsloth_tiled_mlp": "the MLP runs in tiles of tokens",
    "quantization_config": "a quantization config object is not read",
}
NOT_READ = object()  # an argument that is not a literal


@dataclass(frozen=True, kw_only=True)
class Arg:
    value: Any  # the literal, or NOT_READ
    source: str  # where it is: "from_pretrained(load_in_4bit=)" (line 12) or "--load_in_4bit"


Calls = dict[str, dict[str, Arg]]  # "load", "peft", "trainer" → keyword → argument


def _kind(func: ast.expr) -> tuple[str, str] | None:
    """The call a node makes, as (kind, its name): an Unsloth loader's method, or the trainer and its args."""
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in LOADERS:
        kinds = {"from_pretrained": "load", "get_peft_model": "peft"}
        return (kinds[func.attr], f"{func.value.id}.{func.attr}") if func.attr in kinds else None
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return ("trainer", name) if name in TRAINERS + TRAINER_ARGS else None


def _constants(tree: ast.Module) -> dict[str, Any]:
    """Names the script assigns a literal to at its top level, once (max_seq_length = 2048)."""
    seen: dict[str, list[Any]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            seen.setdefault(node.targets[0].id, []).append(_literal(node.value, {}))
    return {name: values[0] for name, values in seen.items() if len(values) == 1 and values[0] is not NOT_READ}


def _literal(node: ast.expr, names: dict[str, Any]) -> Any:
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
        return f"torch.{node.attr}"  # a dtype: torch.bfloat16
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return NOT_READ


def _script(text: str, r: Reading) -> Calls:
    """The first call of each kind and its keyword arguments (a trainer's with its args' beside them)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise PlanError("script", f"is not Python that parses ({type(exc).__name__})") from None
    names, calls, first = _constants(tree), Calls(), dict[str, int]()
    nodes = sorted(
        ((n, k) for n in ast.walk(tree) if isinstance(n, ast.Call) and (k := _kind(n.func))),
        key=lambda found: (found[0].lineno, found[0].col_offset),
    )
    for node, (kind, name) in nodes:
        if first.setdefault(name, node.lineno) != node.lineno:
            r.note(f"{name} (line {node.lineno})", f"a later call than line {first[name]}'s: not read")
            continue
        for kw in node.keywords:
            if kw.arg is not None:
                calls.setdefault(kind, {})[kw.arg] = Arg(
                    value=_literal(kw.value, names), source=f"{name}({kw.arg}=) line {node.lineno}"
                )
        calls.setdefault(kind, {})
    return calls


def _command(text: str) -> Calls:
    """unsloth-cli.py's flags as the calls it makes (its defaults where a flag is absent, as it passes them)."""
    _, tokens = environment(words(text))
    start = next((i + 1 for i, t in enumerate(tokens) if t.endswith("unsloth-cli.py")), None)
    if start is None:
        raise PlanError("config", "is not an unsloth-cli.py command line or an Unsloth script")
    flags = {key: None if value == "None" else value for key, value in hf_trainer._flags(tokens[start:]).items()}
    calls: Calls = {"load": {}, "peft": {}, "trainer": {}}
    for flag, (kind, default) in CLI.items():
        source = f"--{flag}" if flag in flags else f"--{flag} (absent: unsloth-cli.py's default {default})"
        calls[kind][flag] = Arg(value=flags.get(flag, default), source=source)
    calls["peft"]["target_modules"] = Arg(value=list(MODULES), source="unsloth-cli.py (its target_modules)")
    calls["trainer"]["max_length"] = Arg(
        value=calls["load"]["max_seq_length"].value, source="--max_seq_length (unsloth-cli.py passes it as max_length)"
    )
    calls["trainer"]["bf16"] = Arg(value=NOT_READ, source="unsloth-cli.py (bf16=is_bfloat16_supported())")
    calls["cli"] = {k: Arg(value=v, source=f"--{k}") for k, v in flags.items() if k not in CLI}
    return calls


def _take(r: Reading, call: dict[str, Arg], key: str, default: Any, what: str) -> tuple[Any, str]:
    """An argument's value and its source; where it is absent or not a literal, the default (said)."""
    arg = call.get(key)
    if arg is None:
        return default, f"{what} {key} (absent: Unsloth's default {default!r})"
    if arg.value is NOT_READ:
        r.note(arg.source, f"not a literal: not read; planned as Unsloth's default {default!r}")
        return default, f"{arg.source} (not read: Unsloth's default {default!r})"
    return arg.value, arg.source


def _task(r: Reading, calls: Calls) -> str:
    """full_finetuning, or adapters (get_peft_model) on a 4-bit, 8-bit or 16-bit base."""
    load = calls.get("load", {})
    full, full_src = _take(r, load, "full_finetuning", False, "from_pretrained")
    four, four_src = _take(r, load, "load_in_4bit", True, "from_pretrained")
    eight, _ = _take(r, load, "load_in_8bit", False, "from_pretrained")
    sixteen, sixteen_src = _take(r, load, "load_in_16bit", False, "from_pretrained")
    full, four, eight, sixteen = (
        as_bool(k, v)
        for k, v in (
            ("full_finetuning", full),
            ("load_in_4bit", four),
            ("load_in_8bit", eight),
            ("load_in_16bit", sixteen),
        )
    )
    if full:
        r.set(full_src, "workload.task", "finetune")
        if four or eight:
            r.note(full_src, "full fine-tuning turns 4-bit and 8-bit loading off (FastModel): 16-bit weights")
        return "finetune"
    if "peft" not in calls:
        raise PlanError(
            "get_peft_model",
            "absent, and full_finetuning is false: Unsloth trains LoRA adapters "
            "(get_peft_model) or every weight (full_finetuning=True)",
        )
    if eight and (four and "load_in_4bit" in load or sixteen):
        raise bad("load_in_8bit", True, "with another of load_in_4bit / load_in_16bit: Unsloth loads one")
    bits = "int8" if eight else None if sixteen else "nf4" if four else None
    r.set(sixteen_src if sixteen else four_src, "workload.task", "qlora" if bits else "lora")
    if bits:
        r.set(four_src if bits == "nf4" else "load_in_8bit", "precision.weights", bits)
    if bits == "nf4":  # llama.py BitsAndBytesConfig(bnb_4bit_use_double_quant=True, bnb_4bit_quant_type="nf4")
        r.set(f"{four_src} (Unsloth's BitsAndBytesConfig: nf4, double quantization)", "precision.double_quant", True)
    return "qlora" if bits else "lora"


def _lora(r: Reading, peft: dict[str, Arg]) -> None:
    """r, lora_alpha, lora_dropout, target_modules, use_dora."""
    for key, plan_key in (
        ("r", "workload.lora.rank"),
        ("lora_alpha", "workload.lora.alpha"),
        ("lora_dropout", "workload.lora.dropout"),
    ):
        value, source = _take(r, peft, key, PEFT_DEFAULTS[key], "get_peft_model")
        r.set(source, plan_key, as_int(key, value) if key == "r" else as_number(key, value, 0))
    names, source = _take(r, peft, "target_modules", list(MODULES), "get_peft_model")
    names = [names] if isinstance(names, str) else names
    if names == ["all-linear"] or names == "all-linear":
        names = list(MODULES)
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise bad("target_modules", names, "must be a list of module names")
    others = [n for n in names if n not in MODULES]
    if others:
        r.note(source, f"{', '.join(others)} are not Llama-style projection names (q_proj ... down_proj)")
    targets = sorted({MODULES[n] for n in names if n in MODULES}, key=ALL_LINEAR.index)
    if targets:
        r.set(source, "workload.lora.targets", targets)
    if "use_dora" in peft and peft["use_dora"].value is not NOT_READ:
        r.set(
            peft["use_dora"].source,
            "workload.lora.variant",
            "dora" if as_bool("use_dora", peft["use_dora"].value) else "lora",
        )


def _precision(r: Reading, calls: Calls, task: str) -> None:
    """dtype (None: bf16 where supported) as the compute and frozen-weight dtype; full fine-tuning in bf16 steps
    bf16 parameters unless float32_mixed_precision; the trainer's bf16/fp16 and optim (hf_trainer.py)."""
    load, trainer = calls.get("load", {}), calls.get("trainer", {})
    dtype, source = _take(r, load, "dtype", None, "from_pretrained")
    compute = "bf16" if dtype in (None, "None") else choice("dtype", dtype, DTYPES, any_case=True)
    if dtype in (None, "None"):
        source += " (None: bfloat16 where the GPU supports it, else float16; planned as bf16)"
    r.set(source, "precision.compute", compute)
    literal = {k: a.value for k, a in trainer.items() if a.value is not NOT_READ and k in ("bf16", "fp16", "optim")}
    dash = "--" if "cli" in calls else ""
    hf_trainer.read_precision(r, Args(values={k: v for k, v in literal.items() if k != "optim"}, dash=dash, gpus=None))
    if task == "lora":
        r.set(f"{source} (the frozen base loads in it)", "precision.weights", r.plan["precision"]["compute"])
    if task == "finetune":
        mixed, mixed_src = _take(r, load, "float32_mixed_precision", None, "from_pretrained")
        fp32 = mixed is True or (mixed is None and compute != "bf16")
        r.set(
            f"{mixed_src} (vision.py: bf16 full fine-tuning steps bf16 parameters)",
            "precision.master_weights",
            "fp32" if fp32 else "none",
        )
    hf_trainer.read_optim(r, Args(values={k: v for k, v in literal.items() if k == "optim"}, dash=dash, gpus=None))
    for key in ("bf16", "fp16", "optim"):
        if key in trainer and trainer[key].value is NOT_READ:
            r.note(trainer[key].source, "not a literal: not read (the dtype planned is from_pretrained's)")


def _techniques(r: Reading, calls: Calls, sequence: int) -> None:
    """use_gradient_checkpointing ("unsloth": each layer's input saved on the CPU, from 512 tokens), Unsloth's
    chunked output head and loss, and its fused attention (utils/attention_dispatch.py select_attention_backend)."""
    what = "get_peft_model" if "peft" in calls else "from_pretrained"
    mode, source = _take(r, calls.get("peft") or calls.get("load", {}), "use_gradient_checkpointing", "unsloth", what)
    if mode == "unsloth" and sequence >= OFFLOAD_FROM:  # gradient_checkpointing.py UnslothCheckpointFunction
        r.set(source, "techniques.activation_checkpointing", "full")
        r.set(f"{source} (layer inputs copied to CPU buffers)", "techniques.activation_offload", True)
    elif mode == "unsloth":
        r.set(
            f"{source} (under {OFFLOAD_FROM} tokens: plain checkpointing)",
            "techniques.activation_checkpointing",
            "full",
        )
    else:
        r.set(source, "techniques.activation_checkpointing", "full" if as_bool(source, mode) else "none")
    r.set("(Unsloth's unsloth_fused_ce_loss: the output head and loss in chunks of tokens)", "techniques.loss", "fused")
    r.set("(Unsloth's attention: flash-attn, xformers or SDPA, a fused kernel)", "techniques.attention", "flash")
    r.note(
        "(Unsloth's kernels)",
        "its Triton RMSNorm, SwiGLU and RoPE kernels save fewer intermediates than the "
        "eager layers planned (kernels/*.py): the activations are an upper bound",
    )


def _sequence(r: Reading, calls: Calls) -> int:
    """The trainer's max_seq_length / max_length, capped at from_pretrained's max_seq_length (which it is where
    the trainer sets none: rl.py)."""
    model_len, source = _take(r, calls.get("load", {}), "max_seq_length", 2048, "from_pretrained")
    length = as_int("max_seq_length", model_len)
    trainer = calls.get("trainer", {})
    key = next((k for k in hf_trainer.SEQUENCE_KEYS if k in trainer and trainer[k].value is not NOT_READ), None)
    if key is not None and as_int(key, trainer[key].value) < length:
        length, source = as_int(key, trainer[key].value), trainer[key].source
    r.set(source, "workload.sequence_length", length)
    packing = trainer.get("packing")
    if packing is None or packing.value is NOT_READ or not as_bool("packing", packing.value):
        r.note(
            packing.source if packing else "packing (absent: off)",
            "each batch is padded to its longest sample, up to the maximum length; the plan takes every sequence "
            "at it (an upper bound)",
        )
    return length


def _rest(r: Reading, calls: Calls) -> None:
    """Every keyword no step above took: noted, ignored or unknown."""
    taken = {
        "load": {
            "model_name",
            "max_seq_length",
            "dtype",
            "float32_mixed_precision",
            "use_gradient_checkpointing",
            *LOAD_DEFAULTS,
        },
        "peft": {*PEFT_DEFAULTS, "target_modules", "use_dora"},
        "trainer": {
            "bf16",
            "fp16",
            "optim",
            "packing",
            "per_device_train_batch_size",
            "gradient_accumulation_steps",
            "max_steps",
            "num_train_epochs",
            *hf_trainer.SEQUENCE_KEYS,
        },
    }
    for kind, call in calls.items():
        for key, arg in call.items():
            if key in taken.get(kind, ()):
                continue
            if key in UNMODELLED and arg.value not in (None, False, [], "none"):
                r.note(arg.source, UNMODELLED[key])
            elif key in IGNORED.get(kind, ()) or key in UNMODELLED:
                r.ignored.append(arg.source)
            else:
                r.unknown.append(arg.source)


def _batch(r: Reading, trainer: dict[str, Arg], gpus: int | None, dash: str) -> None:
    """per_device_train_batch_size × gradient_accumulation_steps × GPUs; max_steps or epochs (hf_trainer.py)."""
    values = {k: a.value for k, a in trainer.items() if a.value is not NOT_READ}
    for key, arg in trainer.items():
        if arg.value is NOT_READ and key in ("per_device_train_batch_size", "gradient_accumulation_steps", "max_steps"):
            r.note(arg.source, "not a literal: not read; planned as if absent (the Trainer's default)")
    args = Args(values=values, dash=dash, gpus=gpus)
    if gpus is not None:
        r.set("gpus", "hardware.count", gpus)
    hf_trainer.read_batch(r, args)
    if "per_device_train_batch_size" in values:
        r.set(
            trainer["per_device_train_batch_size"].source,
            "workload.micro_batch_size",
            as_int("per_device_train_batch_size", values["per_device_train_batch_size"]),
        )
    hf_trainer.read_steps(r, args)


def read(text: str | Document, *, gpus: int | None = None) -> Imported:
    """An Unsloth script or unsloth-cli.py command line read as a partial plan (see the module's docstring)."""
    doc = document(text)
    r = Reading(format="unsloth", plan={"framework": FRAMEWORK})
    calls = _command(doc.text) if _is_command(doc.text) else _script(doc.text, r)
    if "load" not in calls:
        raise PlanError("script", "calls no FastLanguageModel.from_pretrained / FastModel.from_pretrained")
    name, source = _take(r, calls["load"], "model_name", LOAD_DEFAULTS["model_name"], "from_pretrained")
    r.model(source, as_text("model_name", name))
    task = _task(r, calls)
    if task != "finetune":
        _lora(r, calls["peft"])
    _precision(r, calls, task)
    _techniques(r, calls, _sequence(r, calls))
    _batch(r, calls.get("trainer", {}), gpus, "--" if "cli" in calls else "")
    _rest(r, calls)
    return r.imported()


def _is_command(text: str) -> bool:
    return "unsloth-cli.py" in text and "import" not in text


def detect(text: str | Document) -> bool:
    """An unsloth-cli.py command line, or a Python script that imports unsloth and calls its loader."""
    body = document(text).text
    return _is_command(body) or (
        "unsloth" in body and "import" in body and any(f"{loader}.from_pretrained" in body for loader in LOADERS)
    )


FORMAT = Format(
    name="unsloth",
    label="Unsloth training script (.py, read with ast) or unsloth-cli.py command line (read only)",
    framework=FRAMEWORK,
    suffix=".py",
    detect=detect,
    read=read,
    write=None,
    says=(
        "workload.task",
        "workload.sequence_length",
        "workload.micro_batch_size",
        "workload.global_batch_size",
        "workload.steps",
        "workload.lora.rank",
        "workload.lora.alpha",
        "workload.lora.dropout",
        "workload.lora.targets",
        "workload.lora.variant",
        "precision.compute",
        "precision.master_weights",
        "precision.weights",
        "precision.double_quant",
        "precision.optimizer",
        "precision.optimizer_impl",
        "precision.optimizer_library",
        "techniques.activation_checkpointing",
        "techniques.activation_offload",
        "techniques.loss",
        "techniques.attention",
        "hardware.count",
    ),
    cannot_say={
        "export": "Unsloth scripts are read, not written: export the plan --to hf_trainer and run it with the Trainer"
    },
)
