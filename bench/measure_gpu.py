"""GPU measurement grid: run many plans' workloads on a real GPU and record what PyTorch and the driver report.

A grid driver over the package's measuring code (`vram-planner measure` measures one plan): each configuration
is a plan (the `vram-planner/v1` dict) plus the Hugging Face architecture that realizes its `model` block
(llama, qwen2, gpt2, mixtral); `planner/measure/plan.py` turns it into a transformers config and
`planner/measure/run.py` builds the model with random weights and runs the workload (see there), here in a fresh
subprocess per configuration, so the CUDA context and the caching allocator start clean for every row.
QLoRA and 8-bit AdamW rows are skipped with a reason when bitsandbytes is absent.

Recorded per row: `torch.cuda.max_memory_allocated`, `torch.cuda.max_memory_reserved` and the device memory the
process uses, next to the planner's three predictions (`peak_allocated_bytes`, `peak_reserved_bytes`,
`device_bytes`).

    python bench/measure_gpu.py --grid --jobs 3             # ~70 configurations, rows to bench/measurements/
    python bench/measure_gpu.py --config '{"arch": "llama", "plan": {...}}' --out my.csv
    python bench/measure_gpu.py --grid --dry-run            # no torch needed: validate plans, print predictions
    python bench/measure_gpu.py --grid --device cpu         # harness check: tiny shapes run end to end on CPU

torch is imported only by the child process that runs a workload, so `--dry-run` works without it.
"""

from __future__ import annotations

import argparse
import copy
import datetime as _dt
import json
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from _path import ROOT

import yaml

from planner.measure.plan import MEASURED_KEYS, append_csv, load_runner, normalize, nvidia_smi, predict, versions
from planner.plan.codec import plan_from_dict

MEASUREMENTS = ROOT / "bench" / "measurements"
CHILD_TIMEOUT_S = 300
RESULT_PREFIX = "MEASURE_GPU_RESULT "

COLUMNS = [
    "name",
    "arch",
    "status",
    "error",
    "plan_yaml",
    "measured_peak_allocated_bytes",
    "measured_peak_reserved_bytes",
    "measured_device_bytes",
    "device_bytes_source",
    "predicted_peak_allocated_bytes",
    "predicted_peak_reserved_bytes",
    "predicted_device_bytes",
    "device",
    "driver_version",
    "cuda_version",
    "torch_version",
    "transformers_version",
    "peft_version",
    "bitsandbytes_version",
    "children_at_once",
    "wall_s",
    "step_s",
    "timestamp",
]

# --- Models: plan `model` blocks, each with the HF architecture that realizes it (planner.measure.plan.hf_config) ---
MODELS: dict[str, tuple[str, dict]] = {
    "gpt2-124m": (
        "gpt2",
        {
            "num_layers": 12,
            "hidden_size": 768,
            "num_attention_heads": 12,
            "intermediate_size": 3072,
            "vocab_size": 50257,
            "mlp": "gelu",
            "norm": "layernorm",
            "bias": True,
            "tie_embeddings": True,
        },
    ),
    "gpt2-355m": (
        "gpt2",
        {
            "num_layers": 24,
            "hidden_size": 1024,
            "num_attention_heads": 16,
            "intermediate_size": 4096,
            "vocab_size": 50257,
            "mlp": "gelu",
            "norm": "layernorm",
            "bias": True,
            "tie_embeddings": True,
        },
    ),
    "llama-134m": (
        "llama",
        {
            "num_layers": 12,
            "hidden_size": 768,
            "num_attention_heads": 12,
            "num_kv_heads": 12,
            "intermediate_size": 2048,
            "vocab_size": 32000,
        },
    ),
    "qwen2-0.5b": (
        "qwen2",
        {
            "num_layers": 24,
            "hidden_size": 896,
            "num_attention_heads": 14,
            "num_kv_heads": 2,
            "intermediate_size": 4864,
            "vocab_size": 151936,
            "tie_embeddings": True,
        },
    ),
    "llama-1b": (
        "llama",
        {
            "num_layers": 16,
            "hidden_size": 2048,
            "num_attention_heads": 32,
            "num_kv_heads": 8,
            "head_dim": 64,
            "intermediate_size": 8192,
            "vocab_size": 128256,
            "tie_embeddings": True,
        },
    ),
    "llama-3b": (
        "llama",
        {
            "num_layers": 28,
            "hidden_size": 3072,
            "num_attention_heads": 24,
            "num_kv_heads": 8,
            "head_dim": 128,
            "intermediate_size": 8192,
            "vocab_size": 128256,
            "tie_embeddings": True,
        },
    ),
    "mixtral-0.6b": (
        "mixtral",
        {
            "num_layers": 8,
            "hidden_size": 1024,
            "num_attention_heads": 16,
            "num_kv_heads": 4,
            "intermediate_size": 2816,
            "vocab_size": 32000,
            "num_experts": 8,
            "experts_per_token": 2,
        },
    ),
}

# precision modes: plan precision keys
PRECISIONS = {
    "bf16": {"compute": "bf16", "master_weights": "none"},  # pure bf16 weights, grads, states
    "amp": {"compute": "bf16", "master_weights": "fp32"},  # fp32 weights + bf16 autocast
    "fp32": {"compute": "fp32", "master_weights": "fp32"},
}
# optimizer modes: plan precision keys
OPTIMIZERS = {
    "adamw": {"optimizer": "adamw", "optimizer_impl": "foreach"},
    "adamw_fused": {"optimizer": "adamw", "optimizer_impl": "fused"},
    "sgd": {"optimizer": "sgd", "optimizer_impl": "foreach"},
    "adamw_8bit": {"optimizer": "adamw_8bit"},
}
ALL_TARGETS = ["q", "k", "v", "o", "gate", "up", "down"]


def train_config(
    model: str,
    *,
    precision: str = "amp",
    optimizer: str = "adamw",
    ckpt: str = "none",
    attention: str = "flash",
    seq: int = 1024,
    batch: int = 1,
    task: str = "pretrain",
    lora: dict | None = None,
    double_quant: bool = False,
    objective: str = "next_token",
) -> dict:
    arch, model_dict = MODELS[model]
    prec = {**PRECISIONS[precision], **OPTIMIZERS[optimizer]}
    workload: dict[str, Any] = {"task": task, "sequence_length": seq, "micro_batch_size": batch}
    if objective != "next_token":
        workload["objective"] = objective
    if task in ("lora", "qlora"):
        workload["lora"] = lora or {"rank": 16, "alpha": 32, "targets": ["q", "v"]}
    if task == "qlora":
        prec.update(weights="nf4", double_quant=double_quant)
    parts = [
        model,
        task if objective == "next_token" else f"{task}-{'dpo' if objective == 'preference' else objective}",
        precision,
        optimizer,
        f"ckpt-{ckpt}",
        "sdpa" if attention == "flash" else attention,
        f"s{seq}",
        f"b{batch}",
    ]
    if task in ("lora", "qlora"):
        parts.insert(2, f"r{workload['lora']['rank']}-{''.join(t[0] for t in workload['lora']['targets'])}")
        if double_quant:
            parts.insert(3, "dq")
    plan = {
        "name": "_".join(parts),
        "model": copy.deepcopy(model_dict),
        "workload": workload,
        "precision": prec,
        "techniques": {"activation_checkpointing": ckpt, "attention": attention},
    }
    return {"name": plan["name"], "arch": arch, "plan": plan}


def post_training() -> list[dict]:
    """DPO (a separate reference, or LoRA with adapters disabled) and reward-model steps (issue 33)."""
    dpo = {"task": "finetune", "objective": "preference"}
    return [
        train_config("llama-1b", precision="bf16", seq=1024, batch=1, **dpo),
        train_config("llama-1b", precision="bf16", seq=1024, batch=4, **dpo),
        train_config("llama-1b", precision="bf16", ckpt="full", seq=2048, batch=2, **dpo),
        train_config("llama-1b", precision="amp", seq=1024, batch=1, **dpo),
        train_config("qwen2-0.5b", precision="bf16", seq=2048, batch=2, **dpo),
        train_config("qwen2-0.5b", precision="amp", ckpt="full", seq=2048, batch=2, **dpo),
        train_config("llama-3b", precision="bf16", ckpt="full", seq=2048, batch=1, **dpo),
        train_config("llama-1b", task="lora", objective="preference", seq=2048, batch=2),
        train_config(
            "qwen2-0.5b",
            task="lora",
            objective="preference",
            ckpt="full",
            seq=2048,
            batch=4,
            lora={"rank": 16, "alpha": 32, "targets": ALL_TARGETS},
        ),
        train_config("llama-1b", task="finetune", objective="reward", precision="bf16", seq=2048, batch=2),
        train_config("qwen2-0.5b", task="finetune", objective="reward", precision="amp", seq=1024, batch=4),
        train_config("llama-3b", task="finetune", objective="reward", precision="bf16", ckpt="full", seq=2048, batch=2),
    ]


def inference_config(model: str, *, batch: int, prompt: int, output: int = 128, attention: str = "flash") -> dict:
    arch, model_dict = MODELS[model]
    plan = {
        "name": f"{model}_inference_bf16_{'sdpa' if attention == 'flash' else attention}_b{batch}_p{prompt}_o{output}",
        "model": copy.deepcopy(model_dict),
        "workload": {
            "task": "inference",
            "inference": {"batch_size": batch, "prompt_tokens": prompt, "output_tokens": output},
        },
        "precision": {"compute": "bf16", "master_weights": "none"},
        "techniques": {"attention": attention},
    }
    return {"name": plan["name"], "arch": arch, "plan": plan}


def grid() -> list[dict]:
    """About 70 configurations, each fitting one H100 (80 GB): training, LoRA, DPO, reward models, generation."""
    out: list[dict] = []
    # precision × optimizer on a small Llama
    for precision in PRECISIONS:
        for optimizer in OPTIMIZERS:
            out.append(train_config("llama-134m", precision=precision, optimizer=optimizer, seq=1024, batch=4))
    # checkpointing × attention kernel
    for model in ("llama-1b", "qwen2-0.5b"):
        for ckpt in ("none", "full"):
            for attention in ("flash", "eager"):
                out.append(train_config(model, ckpt=ckpt, attention=attention, seq=2048, batch=1))
    # batch and sequence sweeps
    for batch in (1, 2, 4, 8):
        out.append(train_config("llama-1b", precision="bf16", seq=1024, batch=batch))
    for seq in (512, 2048, 4096, 8192):
        out.append(train_config("llama-1b", precision="bf16", seq=seq, batch=1))
    # model sizes, pure bf16 AdamW
    for model in ("gpt2-124m", "gpt2-355m", "llama-134m", "qwen2-0.5b", "llama-1b", "llama-3b", "mixtral-0.6b"):
        out.append(train_config(model, precision="bf16", seq=2048, batch=2))
    out.append(train_config("llama-3b", precision="amp", ckpt="full", seq=2048, batch=2))
    out.append(train_config("mixtral-0.6b", precision="amp", ckpt="full", seq=2048, batch=2))
    out.append(train_config("gpt2-124m", precision="amp", attention="eager", seq=1024, batch=4))
    out.append(train_config("gpt2-124m", precision="fp32", attention="eager", seq=1024, batch=4))
    out.append(train_config("llama-1b", precision="fp32", optimizer="adamw_fused", seq=1024, batch=1))
    out.append(train_config("gpt2-355m", precision="amp", optimizer="adamw_fused", ckpt="full", seq=1024, batch=8))
    # LoRA and QLoRA
    out.append(train_config("llama-1b", task="lora", seq=2048, batch=2))
    out.append(
        train_config("llama-1b", task="lora", seq=2048, batch=2, lora={"rank": 16, "alpha": 32, "targets": ALL_TARGETS})
    )
    out.append(
        train_config(
            "llama-3b",
            task="lora",
            ckpt="full",
            seq=2048,
            batch=4,
            lora={"rank": 64, "alpha": 128, "targets": ALL_TARGETS},
        )
    )
    out.append(
        train_config(
            "qwen2-0.5b", task="lora", seq=4096, batch=1, lora={"rank": 8, "alpha": 16, "targets": ["q", "k", "v", "o"]}
        )
    )
    out.append(
        train_config(
            "llama-1b", task="qlora", seq=2048, batch=2, lora={"rank": 16, "alpha": 32, "targets": ALL_TARGETS}
        )
    )
    out.append(
        train_config(
            "llama-3b",
            task="qlora",
            seq=2048,
            batch=2,
            double_quant=True,
            lora={"rank": 16, "alpha": 32, "targets": ALL_TARGETS},
        )
    )
    out.append(train_config("qwen2-0.5b", task="qlora", ckpt="full", seq=2048, batch=4, double_quant=True))
    out += post_training()
    # inference: batch × context
    for batch in (1, 8, 32):
        for prompt in (512, 2048):
            out.append(inference_config("llama-1b", batch=batch, prompt=prompt))
    out.append(inference_config("llama-1b", batch=8, prompt=2048, attention="eager"))
    out.append(inference_config("llama-3b", batch=1, prompt=1024, output=256))
    out.append(inference_config("llama-3b", batch=16, prompt=1024, output=256))
    out.append(inference_config("qwen2-0.5b", batch=4, prompt=4096))
    out.append(inference_config("gpt2-124m", batch=8, prompt=512, output=256))
    out.append(inference_config("mixtral-0.6b", batch=4, prompt=1024))
    return out


def tiny(config: dict) -> dict:
    """The same configuration on a model and workload small enough for a CPU check (same family and features)."""
    config = copy.deepcopy(config)
    plan = config["plan"]
    config["name"] = plan["name"] = f"tiny_{config['name']}"
    m = plan["model"]
    small = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 512}
    mha = m.get("num_kv_heads", m["num_attention_heads"]) == m["num_attention_heads"]
    m.pop("head_dim", None)
    m.update(small)
    if "num_kv_heads" in m:
        m["num_kv_heads"] = 4 if mha else 2
    if m.get("num_experts"):
        m.update(num_experts=4, experts_per_token=2)
    wl = plan["workload"]
    if wl.get("task") == "inference":
        wl["inference"] = {**wl.get("inference", {}), "batch_size": 2, "prompt_tokens": 16, "output_tokens": 4}
    else:
        wl.update(sequence_length=32, micro_batch_size=2)
    return config


# --- Running a workload: planner/measure/run.py, in a fresh process per configuration ------------------------
def run_child(config: dict, device: str, timeout: int = CHILD_TIMEOUT_S) -> dict:
    """run_config in a fresh Python process (clean CUDA context and allocator); its result, or an error row."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_child", json.dumps(config), "--device", device]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(ROOT), check=False)
    except subprocess.TimeoutExpired:
        return {"status": "error", "error": f"timed out after {timeout} s"}
    for line in reversed(res.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
    return {"status": "error", "error": f"exit {res.returncode}: {' | '.join(tail)}"[:2000]}


def _child_main(config_json: str, device: str) -> int:
    config = json.loads(config_json)
    try:
        result = load_runner("run").run_config(config, device)
    except Exception as exc:  # noqa: BLE001 - every failure becomes the row's status
        oom = "out of memory" in str(exc).lower()
        result = {"status": "oom" if oom else "error", "error": f"{type(exc).__name__}: {exc}"[:2000], **versions()}
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


# --- Rows and output ---------------------------------------------------------------------------------------
def plan_yaml(plan: dict) -> str:
    return yaml.safe_dump(plan, sort_keys=False, default_flow_style=None)


def make_row(config: dict, measured: dict, predicted: dict | None = None, jobs: int = 1) -> dict:
    """One CSV row from a configuration, its run's result and the planner's prediction; `jobs` children ran at
    once (memory is per process; step_s is the device's alone only with 1)."""
    predicted = predicted if predicted is not None else predict(config["plan"])
    row = {c: "" for c in COLUMNS}
    row.update(
        name=config["name"],
        arch=config["arch"],
        plan_yaml=plan_yaml(config["plan"]),
        children_at_once=jobs,
        timestamp=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    )
    for key in (
        "status",
        "error",
        "device",
        "driver_version",
        "cuda_version",
        "torch_version",
        "transformers_version",
        "peft_version",
        "bitsandbytes_version",
        "wall_s",
        "step_s",
        "device_bytes_source",
    ):
        if measured.get(key) is not None:
            row[key] = measured[key]
    for key in MEASURED_KEYS:
        if measured.get(key) is not None:
            row[f"measured_{key}"] = int(measured[key])
        row[f"predicted_{key}"] = int(predicted[key])
    return row


def default_out(device: str) -> Path:
    if device.startswith("cuda"):
        names = nvidia_smi("name")
        label = names[0] if names else "cuda"
    else:
        label = "cpu"
    slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-") or "device"
    return MEASUREMENTS / f"{slug}-{_dt.date.today().isoformat()}.csv"


def _gib(n: int | str) -> str:
    return f"{int(n) / 2**30:7.2f}" if n != "" else "      -"


def dry_run(configs: list[dict], stream=None) -> list[dict]:
    """Validate every plan with the planner and print what would run with its predictions. No torch."""
    stream = stream or sys.stdout
    rows = []
    print(f"{'#':>3}  {'name':<58} {'arch':<8} {'alloc GiB':>9} {'resv GiB':>9} {'device GiB':>10}", file=stream)
    for i, config in enumerate(configs, 1):
        plan_from_dict(config["plan"])  # raises PlanError on an invalid plan
        pred = predict(config["plan"])
        rows.append({"name": config["name"], "arch": config["arch"], **pred})
        print(
            f"{i:>3}  {config['name']:<58} {config['arch']:<8} {_gib(pred['peak_allocated_bytes']):>9} "
            f"{_gib(pred['peak_reserved_bytes']):>9} {_gib(pred['device_bytes']):>10}",
            file=stream,
        )
    print(f"{len(rows)} configurations, every plan valid", file=stream)
    return rows


def measure(
    configs: list[dict], device: str, out: Path, *, subprocesses: bool = True, jobs: int = 1, stream=None
) -> list[dict]:
    """Run each configuration (CPU mode: tiny shapes) and append its row to `out`, `jobs` children at a time.

    The allocator's statistics are per process, so concurrent children measure what they would alone; so is
    nvidia-smi's per-process memory. The fallback (the device's used memory) is not, and with jobs > 1 it is left
    out. Rows are written as children finish."""
    stream = stream or sys.stdout
    out.parent.mkdir(parents=True, exist_ok=True)
    configs = [tiny(c) if device == "cpu" else c for c in configs]

    def one(config: dict) -> tuple[dict, dict]:
        t0 = time.perf_counter()
        result = run_child(config, device) if subprocesses else _in_process(config, device)
        result.setdefault("wall_s", round(time.perf_counter() - t0, 3))
        if jobs > 1 and "nvidia-smi" not in result.get("device_bytes_source", "nvidia-smi"):
            result = {**result, "device_bytes": None, "device_bytes_source": "not measured: children ran together"}
        return config, result

    rows = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for i, done in enumerate(as_completed([pool.submit(one, c) for c in configs]), 1):
            config, result = done.result()
            row = make_row(config, result, predict(config["plan"]), jobs)
            append_csv(out, [row], COLUMNS)  # row by row: a crashed grid keeps its finished rows
            rows.append(row)
            print(_progress(i, len(configs), config, row), file=stream, flush=True)
    print(f"{len(rows)} rows → {out}", file=stream)
    return rows


def _progress(i: int, n: int, config: dict, row: dict) -> str:
    text = f"[{i}/{n}] {config['name']}: {row['status']}"
    if row["measured_peak_allocated_bytes"] != "":
        text += (
            f" alloc {_gib(row['measured_peak_allocated_bytes']).strip()} GiB"
            f" (predicted {_gib(row['predicted_peak_allocated_bytes']).strip()})"
        )
    return text + (f" — {row['error']}" if row["error"] else "")


def _in_process(config: dict, device: str) -> dict:
    try:
        return load_runner("run").run_config(config, device)
    except Exception as exc:  # noqa: BLE001
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:2000]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--grid", action="store_true", help="the ~70-configuration grid (the default)")
    what.add_argument("--config", help='one configuration as JSON: a plan dict, or {"arch": ..., "plan": {...}}')
    what.add_argument("--_child", help=argparse.SUPPRESS)
    ap.add_argument("--dry-run", action="store_true", help="validate the plans and print predictions; no torch")
    ap.add_argument("--device", default="cuda", help="cuda (measure) or cpu (tiny shapes, end-to-end check only)")
    ap.add_argument("--out", type=Path, help="CSV to append rows to; default bench/measurements/<device>-<date>.csv")
    ap.add_argument("--filter", help="run only configurations whose name contains this text")
    ap.add_argument("--jobs", type=int, default=1, help="children run at once (memory is per process; default 1)")
    args = ap.parse_args(argv)
    if args._child:
        return _child_main(args._child, args.device)
    configs = [normalize(args.config)] if args.config else grid()
    if args.filter:
        configs = [c for c in configs if args.filter in c["name"]]
    if args.dry_run:
        dry_run(configs)
        return 0
    try:
        runner = load_runner("run")
    except ModuleNotFoundError as exc:
        print(
            f'measure_gpu: {exc.name} is not installed; use --dry-run, or pip install "vram-planner[measure]"',
            file=sys.stderr,
        )
        return 2
    if args.device.startswith("cuda") and not runner.cuda_available():
        print("measure_gpu: no CUDA device; use --device cpu for an end-to-end check", file=sys.stderr)
        return 2
    measure(configs, args.device, args.out or default_out(args.device), jobs=args.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
