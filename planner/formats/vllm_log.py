"""Reading vLLM's start-up log: the memory figures it prints, the plan its arguments say, and the planner's figures
for the same items beside them.

The messages, by release (each pattern below names where vLLM prints it):
- V0 (vllm/worker/worker.py determine_num_available_blocks, 0.6.5-0.9) and V1 before 0.9.1 (v1/worker/gpu_worker.py):
  "Memory profiling takes T seconds / the current vLLM instance can use total_gpu_memory (X GiB) x
  gpu_memory_utilization (U) = Y GiB / model weights take W GiB; non_torch_memory takes N GiB; PyTorch activation
  peak memory takes A GiB; the rest of the memory reserved for KV Cache is K GiB." (one line or three; 0.6.5's
  "Memory profiling results:" table has the same names), then "# GPU blocks: B" (executor_base.py; "# cuda blocks"
  or "# CUDA blocks" in some releases).
- V1 from 0.9.1: "Model loading took W GiB and T seconds" (gpu_model_runner.py; "Loading model weights took W GB"
  before 0.8, in GiB despite its label: model_memory_usage / float(2**30)), "Available KV cache memory: K GiB"
  (gpu_worker.py), "GPU KV cache size: N tokens" and "Maximum concurrency for L tokens per request: Cx"
  (v1/core/kv_cache_utils.py), "Graph capturing finished in T secs, took G GiB" (gpu_model_runner.py), from 0.11
  "Free memory on device (F/X GiB) on startup. Desired GPU memory utilization is (U, Y GiB). Actual usage is W GiB
  for weight, A GiB for peak activation, N GiB for non-torch memory, and G GiB for CUDAGraph memory."
- The API server's "non-default args: {...}" (vllm/entrypoints/utils.py log_non_default_args, from 0.10).
Worker lines carry prefixes such as "(VllmWorker rank=1 pid=...)" or "(Worker_TP1 pid=...)": the figures are
read from rank 0's lines where ranks are named.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from planner.catalog import Gpu, load_catalog
from planner.errors import PlanError, bad, short
from planner.formats.base import Imported, set_key
from planner.formats.vllm import read, read_mapping
from planner.frameworks import load_frameworks
from planner.loader import LOG, check_size
from planner.memory import estimate
from planner.memory.inference import KV_BLOCK_TOKENS, kv_bytes_per_token
from planner.plan.codec import plan_from_dict, plan_from_yaml
from planner.plan.config import Plan
from planner.plan.models import model_from_dict
from planner.units import GiB, counted, format_bytes

# a GPU is the catalog's when its usable memory is within this fraction of the log's total
GPU_MATCH = 0.01
# the plan's weights per GPU are the log's when within this fraction of them: the planner's weights item is vLLM's
# own figure within 1 % for the log's model and layout (tests/data/vllm-logs: Llama 3 8B 14.96 vs 14.96 GiB, Llama 3.1
# 70B w8a8 67.72 vs 67.69 GiB), while the next size of a family (presets: Qwen3 0.6/1.72/4.02/8.19/14.77/32.76 B
# parameters, 1.8 × apart at the least; Llama 3.x 1.24/3.21/8.03/70.55 B, 2.5 ×), another tensor-parallel degree
# (2 × at least) or another weight dtype (bf16 beside 8 or 4 bits: 2 × at least) moves them by 1.8 × or more
WEIGHTS_MATCH = 0.25
# worker lines of ranks other than 0 (V0 "(VllmWorkerProcess pid=...)" names no rank: kept)
_OTHER_RANK = re.compile(r"^\((?:VllmWorker rank=|VllmWorker TP|Worker_TP|Worker_PP\d+_TP)([1-9]\d*)\b")
# a figure: a run of digits and dots taken whole where it starts (a search that tried every position of a run,
# each taking the rest of it, is quadratic in the run's length)
_NUM = r"(?<![\d.])(-?[\d.]++)"
# figure → its messages, the most precise first (vLLM prints GiB with 2 decimals, the weights' own line with 4)
GIB_PATTERNS = {
    "weights": (
        rf"(?:Model loading|Loading model weights) took {_NUM} ?Gi?B",
        rf"model weights take\s*{_NUM}\s*GiB",
        rf"Actual usage is {_NUM} GiB for weight",
    ),
    "non_torch": (rf"non_torch_memory(?: takes)?\s*{_NUM}\s*GiB", rf"{_NUM} GiB for non-torch memory"),
    "activation": (rf"PyTorch activation peak memory(?: takes)?\s*{_NUM}\s*GiB", rf"{_NUM} GiB for peak activation"),
    "kv_cache": (
        rf"Available KV cache memory: {_NUM} GiB",
        rf"reserved for KV Cache is\s*{_NUM}\s*GiB",
        rf"available_kv_cache_memory\s*{_NUM}\s*GiB",
        rf"Current kv cache memory in use is {_NUM} GiB",
    ),
    "cuda_graph": (rf"Graph capturing finished in [\d.]+ secs?, took {_NUM} GiB", rf"{_NUM} GiB for CUDAGraph memory"),
    "total": (rf"total_gpu_memory\s*\(?{_NUM}\s*GiB", rf"Free memory on device \([\d.]+/{_NUM} GiB\)"),
}
OTHER_PATTERNS = {
    "utilization": (rf"gpu_memory_utilization\s*\(?{_NUM}", rf"Desired GPU memory utilization is \({_NUM}"),
    "gpu_blocks": (r"# (?:GPU|CUDA|cuda) blocks: (\d+)", r"num_gpu_blocks is: (\d+)"),
    "kv_tokens": (r"GPU KV cache size: ([\d,]+) tokens",),
    "version": (r"vLLM API server version (\S+)", r"LLM engine \(v([^)\s]++)\)"),
}
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_ARGS = re.compile(r"non-default args: (\{.*)")  # to the line's end, where the dict must close
# the longest "non-default args" dict read: vLLM's run to a few KB (config objects' reprs included), and CPython's
# parser takes some 250 bytes of heap a character of one
MAX_ARGS = 64 * 1024
# a figure as vLLM prints it: GiB and fractions with 2 to 4 decimals, counts with or without thousands' commas
# (a longer one is no figure: 400 digits overflow a float, 5,000 are more than Python reads)
_DECIMAL = re.compile(r"-?\d{1,15}(?:\.\d{1,15})?")
_COUNT = re.compile(r"\d{1,15}|\d{1,3}(?:,\d{3}){1,4}")
# a release's leading numbers ("0.6.4.post1"): vLLM's have 1 to 3 digits each, one of more than 9 is no version
_RELEASE = re.compile(r"\d++(?:\.\d++)*+")
_RELEASE_DIGITS = 9
# a `vllm serve` command pasted with its log (older releases print no "non-default args")
_COMMAND = re.compile(r"\bvllm serve\s.*$")


@dataclass(frozen=True, kw_only=True)
class VllmLog:
    """The figures a vLLM start-up log prints (bytes per GPU, from GiB with the log's precision), None where absent."""

    version: str = ""
    total_bytes: int | None = None  # the GPU's memory as CUDA reports it
    utilization: float | None = None
    weights_bytes: int | None = None
    non_torch_bytes: int | None = None  # CUDA context (V0 and V1 before 0.9.1), NCCL, custom all-reduce
    activation_bytes: int | None = None  # the profile run's PyTorch peak
    kv_cache_bytes: int | None = None
    cuda_graph_bytes: int | None = None
    gpu_blocks: int | None = None
    kv_tokens: int | None = None
    concurrency_tokens: int | None = None  # the tokens per request of the "Maximum concurrency" line
    max_concurrency: float | None = None
    args: dict[str, Any] = field(default_factory=dict)  # the "non-default args" (non-literal values as text)
    command: str = ""  # a `vllm serve ...` line pasted with the log


def _first(text: str, patterns: tuple[str, ...]) -> str | None:
    for pattern in patterns:
        match = re.search(pattern, text)
        if match:
            return match.group(1)
    return None


def _args(line: str) -> dict[str, Any]:
    """The dict of a "non-default args" line (one line: no line breaks); a value that is not a literal (a config
    object) kept as its text."""
    if len(line) > MAX_ARGS:
        raise PlanError(
            "non-default args",
            f"{len(line):,} characters is longer than the {MAX_ARGS:,}-character limit (vLLM's are a few KB)",
        )
    try:
        node = ast.parse(line, mode="eval").body
    except (SyntaxError, RecursionError, MemoryError):  # CPython's parser: MemoryError for `- - - … 1` too deep
        raise PlanError("non-default args", f"cannot be read as a Python dict: {line[:80]}") from None
    if not isinstance(node, ast.Dict):
        raise PlanError("non-default args", f"is not a dict: {line[:80]}")
    source = line.encode()  # the AST's columns count bytes of UTF-8
    out = {}
    for key, value in zip(node.keys, node.values, strict=True):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            raise bad(
                "non-default args",
                _source(source, key) if key else f"**{_source(source, value)}",
                "is not an argument's name",
            )
        try:
            out[key.value] = ast.literal_eval(value)
        except (ValueError, TypeError):  # not a literal, or a literal dict or set of lists
            out[key.value] = _source(source, value)
    return out


def _source(line: bytes, node: ast.expr) -> str:
    """A node's text in its one-line source (ast.get_source_segment splits the whole source again each time)."""
    return line[node.col_offset : node.end_col_offset].decode()


def _figure(name: str, text: str | None, form: re.Pattern[str]) -> str | None:
    """A figure's text where the log prints it (else None), if it is one vLLM prints in that form."""
    if text is not None and not form.fullmatch(text):
        raise bad("log", text, f"is not a figure vLLM prints ({name.replace('_', ' ')})")
    return text


def parse_vllm_log(text: str) -> VllmLog:
    """The start-up figures of a pasted vLLM log (rank 0's where ranks are named)."""
    check_size(text, LOG)
    lines = [line for line in text.splitlines() if not _OTHER_RANK.match(line.strip())]
    kept = "\n".join(lines)
    gib = {name: _figure(name, _first(kept, patterns), _DECIMAL) for name, patterns in GIB_PATTERNS.items()}
    other = {name: _first(kept, patterns) for name, patterns in OTHER_PATTERNS.items()}
    counts = {name: _figure(name, other[name], _COUNT) for name in ("gpu_blocks", "kv_tokens")}
    found = _CONCURRENCY.search(kept)
    concurrency = (
        (_figure("concurrency", found.group(1), _COUNT), _figure("concurrency", found.group(2), _DECIMAL))
        if found
        else (None, None)
    )
    args = next(
        (_args(m.group(1).rstrip()) for m in map(_ARGS.search, lines) if m and m.group(1).rstrip().endswith("}")), {}
    )
    command = next((m.group(0) for m in map(_COMMAND.search, lines) if m), "")
    if not any(gib.values()) and not any(counts.values()) and not args:
        raise PlanError(
            "log",
            'has none of vLLM\'s start-up memory lines ("Model loading took", "Available KV '
            'cache memory", "model weights take", "# GPU blocks", "GPU KV cache size") nor '
            'its "non-default args"',
        )
    as_int = lambda v: int(v.replace(",", "")) if v else None  # noqa: E731
    utilization = _figure("utilization", other["utilization"], _DECIMAL)
    return VllmLog(
        version=other["version"] or "",
        utilization=float(utilization) if utilization else None,
        **{f"{name}_bytes": round(float(v) * GiB) if v else None for name, v in gib.items()},
        gpu_blocks=as_int(counts["gpu_blocks"]),
        kv_tokens=as_int(counts["kv_tokens"]),
        concurrency_tokens=as_int(concurrency[0]),
        max_concurrency=float(concurrency[1]) if concurrency[1] else None,
        args=args,
        command=command,
    )


def catalog_gpu(total_bytes: int | None, catalog: Mapping[str, Gpu]) -> str | None:
    """The catalog GPU whose usable memory is nearest the log's total, if within GPU_MATCH of it."""
    if not total_bytes:
        return None
    near = min(catalog.values(), key=lambda g: abs(g.usable_bytes - total_bytes))
    return near.id if abs(near.usable_bytes - total_bytes) <= GPU_MATCH * near.usable_bytes else None


def plan_from_vllm_log(log: VllmLog, catalog: Mapping[str, Gpu] | None = None) -> Imported:
    """The partial plan the log's arguments say (planner/formats/vllm.py reads them as flags), with the
    utilization and the context the log prints where its arguments do not say them, and the catalog GPU its
    total memory identifies."""
    args = {k: v for k, v in log.args.items() if k != "model_tag"}
    said = set(args) | {flag.lstrip("-").replace("-", "_") for flag in log.command.split() if flag.startswith("--")}
    printed = {"gpu_memory_utilization": log.utilization, "max_model_len": log.concurrency_tokens}
    extra = {key: value for key, value in printed.items() if key not in said and value is not None}
    if args or not log.command:
        imported = read_mapping({**args, **extra})
    else:  # the pasted command, and what the log printed that it does not say
        imported = read(log.command + "".join(f" --{k.replace('_', '-')} {v}" for k, v in extra.items()))
    gpu = catalog_gpu(log.total_bytes, catalog or load_catalog())
    if gpu:
        set_key(imported.plan, "hardware.gpu", gpu)
    release, note = _release(log.version)
    if release:
        set_key(imported.plan, "framework_release", release)
    return replace(imported, unmodelled=(*imported.unmodelled, note)) if note else imported


def _numbers(version: str) -> tuple[int, ...]:
    """A release's leading numbers ("0.6.4.post1" -> (0, 6, 4)); () for none."""
    match = _RELEASE.match(version)
    numbers = match.group(0).split(".") if match else []
    if any(len(number) > _RELEASE_DIGITS for number in numbers):
        raise bad("log", version, "is not a vLLM version")
    return tuple(int(n) for n in numbers)


def _release(version: str) -> tuple[str, str]:
    """(framework_release, a note or ''): the vLLM recipe's latest tagged release at or before the log's version
    (its settings change only at tagged releases); a version before them all plans as the first, and says so."""
    wanted = _numbers(version)
    if not wanted:
        return "", ""
    tagged = sorted(load_frameworks()["vllm"].releases, key=_numbers)
    at_or_before = [r for r in tagged if _numbers(r) <= wanted]
    if at_or_before:
        return at_or_before[-1], ""
    return tagged[0], (
        f"vLLM {version}: before the recipe's releases (from {tagged[0]}); planned with {tagged[0]}'s memory accounting"
    )


@dataclass(frozen=True, kw_only=True)
class Row:
    item: str
    log_bytes: int | None
    plan_bytes: int | None

    @property
    def difference(self) -> int | None:
        """The planner's bytes less the log's."""
        return None if self.log_bytes is None or self.plan_bytes is None else self.plan_bytes - self.log_bytes


@dataclass(frozen=True, kw_only=True)
class Comparison:
    rows: tuple[Row, ...]
    note: str  # weights_note: the log's weights are not the plan's size ('' where they are)
    context_tokens: int  # the plan's prompt + output
    kv_bytes_per_token: int  # the planner's, per GPU
    log_kv_tokens: int | None  # tokens the log's KV memory holds at the planner's bytes per token (whole blocks)
    log_concurrency: float | None  # sequences of the plan's context those tokens hold
    plan_kv_tokens: int
    plan_concurrency: int


def _serving(plan: Plan) -> None:
    """A plan the log can stand beside: one a serving engine runs (an engine's budget: gpu_memory_utilization)."""
    if plan.workload.task != "inference":
        raise bad(
            "workload.task",
            plan.workload.task,
            "is training: vLLM's log stands beside a serving plan (workload.task inference)",
        )
    if plan.workload.inference.gpu_memory_utilization is None:
        raise PlanError(
            "workload.inference.gpu_memory_utilization",
            "not set, so no engine serves the plan: vLLM's log stands beside a serving plan (framework vllm sets it)",
        )


def _logged_name(log: VllmLog) -> str:
    """The checkpoint the log serves as it names it: the "model" argument, else `vllm serve NAME`'s."""
    if isinstance(log.args.get("model"), str):
        return log.args["model"]
    words = log.command.split()[2:]
    return words[0] if words and not words[0].startswith("-") else ""


def same_model(plan: Plan, log: VllmLog, catalog: Mapping[str, Gpu]) -> None:
    """Refuse a plan of another architecture than the model the log's arguments name (a preset, or one of its
    architecture under another checkpoint's name): its figures are not the log's run's."""
    said = plan_from_vllm_log(log, catalog).plan.get("model")
    if said is None:
        return
    logged = model_from_dict(said)
    if replace(plan.model, preset=None) != replace(logged, preset=None):
        named = ", ".join(filter(None, (_logged_name(log), logged.preset and f"preset {logged.preset}")))
        raise bad(
            "model",
            plan.model.preset or plan.name or "the plan's architecture",
            f"is not the model the log serves ({named or 'its arguments say another'}); compare a plan of "
            f"that model, or the log's own plan",
        )


def weights_note(log: VllmLog, planned: int | None) -> str:
    """A line where the log's weights per GPU are not the plan's within WEIGHTS_MATCH ('' where they are, or
    either is absent)."""
    if not log.weights_bytes or not planned or abs(planned - log.weights_bytes) <= WEIGHTS_MATCH * log.weights_bytes:
        return ""
    return (
        f"warning: the log's weights take {format_bytes(log.weights_bytes)} per GPU, the plan's "
        f"{format_bytes(planned)} ({planned / log.weights_bytes:.2f} ×): the plan's model, tensor-parallel "
        f"degree or weight dtype is likely not the log's, and then its rows compare two different runs"
    )


def compare(plan: Plan, log: VllmLog, catalog: Mapping[str, Gpu] | None = None) -> Comparison:
    """The log's figures beside the planner's for the same items (planner/memory/inference.py's Estimate items),
    and the KV tokens and concurrency the log's KV memory holds at the planner's bytes per token. A training plan,
    or one of another model than the log names, is refused; weights of another size are noted."""
    catalog = catalog or load_catalog()
    _serving(plan)
    same_model(plan, log, catalog)
    est = estimate(plan, catalog)
    by_name = {i.name: i.bytes for i in est.items}
    # vLLM's non-torch figure: NCCL and custom all-reduce, and the CUDA context where the release counts it
    # (fraction_scope device: V0 and V1 before 0.9.1, whose figure is device memory used less torch's)
    non_torch = ("nccl", "custom_all_reduce") + (
        ("cuda_context",) if plan.workload.inference.fraction_scope == "device" else ()
    )
    planned = {
        "weights": by_name.get("weights"),
        "non-torch memory": sum(by_name.get(n, 0) for n in non_torch),
        "activation peak": by_name.get("activations"),
        "KV cache": est.served.kv_budget_bytes,
        "CUDA graphs": by_name.get("cuda_graphs", 0),
    }
    logged = {
        "weights": log.weights_bytes,
        "non-torch memory": log.non_torch_bytes,
        "activation peak": log.activation_bytes,
        "KV cache": log.kv_cache_bytes,
        "CUDA graphs": log.cuda_graph_bytes,
    }
    per_token = kv_bytes_per_token(plan)
    ctx = plan.workload.inference.context_tokens
    tokens = (
        max(0, log.kv_cache_bytes) // per_token // KV_BLOCK_TOKENS * KV_BLOCK_TOKENS
        if log.kv_cache_bytes is not None
        else None
    )
    return Comparison(
        rows=tuple(Row(item=k, log_bytes=logged[k], plan_bytes=planned[k]) for k in planned),
        note=weights_note(log, planned["weights"]),
        context_tokens=ctx,
        kv_bytes_per_token=per_token,
        log_kv_tokens=tokens,
        log_concurrency=tokens / ctx if tokens is not None else None,
        plan_kv_tokens=est.served.kv_budget_bytes // per_token // KV_BLOCK_TOKENS * KV_BLOCK_TOKENS,
        plan_concurrency=est.served.max_concurrent_sequences,
    )


def _log_plan(log: VllmLog, catalog: Mapping[str, Gpu]) -> Plan:
    """The plan the log's arguments say (on the default plan's other keys)."""
    imported = plan_from_vllm_log(log, catalog)
    if "model" not in imported.plan:
        named = f"names {short(imported.model_name)}, not a preset" if imported.model_name else "names no model"
        raise PlanError("log", f"{named}; give a PLAN.yaml to compare with")
    return plan_from_dict(imported.plan)


def comparison_rows(cmp: Comparison) -> list[dict[str, str]]:
    """Each item's log and planner figures and the planner's less the log's, formatted ('—' where absent)."""
    show = lambda b: format_bytes(b) if b is not None else "—"  # noqa: E731
    return [
        {"item": r.item, "vLLM log": show(r.log_bytes), "planner": show(r.plan_bytes), "difference": show(r.difference)}
        for r in cmp.rows
    ]


def calibration_lines(plan: Plan, gpu_name: str, cmp: Comparison, log: VllmLog) -> list[str]:
    """The plan compared, and the KV capacity of the log's KV memory beside the planner's own, in words."""
    lines = [
        f"plan: {plan.model.preset or plan.name or 'model'} on {gpu_name}, tensor {plan.parallelism.tensor}, "
        f"{cmp.context_tokens:,} tokens a sequence, {format_bytes(cmp.kv_bytes_per_token, 'B')} of KV a token "
        f"per GPU"
    ]
    if cmp.log_kv_tokens is not None:
        lines.append(
            f"the log's KV memory holds {counted(cmp.log_kv_tokens, 'token')} at the planner's bytes a token: "
            f"{cmp.log_concurrency:.2f} sequences of {cmp.context_tokens:,} tokens"
            + (f" (vLLM: {log.kv_tokens:,} tokens)" if log.kv_tokens else "")
        )
    lines.append(
        f"the planner's own KV budget holds {counted(cmp.plan_kv_tokens, 'token')}: "
        f"{counted(cmp.plan_concurrency, 'sequence')} of {cmp.context_tokens:,} tokens"
    )
    return lines


def vllm_log_table(text: str, plan_text: str | None, catalog: Mapping[str, Gpu]) -> str:
    """The `vllm-log` command's answer: the log's figures beside the plan's, and the calibrated KV capacity."""
    log = parse_vllm_log(text)
    plan = plan_from_yaml(plan_text) if plan_text is not None else _log_plan(log, catalog)
    cmp = compare(plan, log, catalog)
    lines = [cmp.note] if cmp.note else []
    lines += [f"{'item':<18}{'vLLM log':>14}{'planner':>14}{'difference':>14}"]
    lines += [
        f"{r['item']:<18}{r['vLLM log']:>14}{r['planner']:>14}{r['difference']:>14}" for r in comparison_rows(cmp)
    ]
    lines += calibration_lines(plan, catalog[plan.hardware.gpu].name, cmp, log)
    return "\n".join(lines) + "\n"
