"""Command line.

    vram-planner estimate PLAN.yaml [--format table|json|yaml] [--catalog FILE]
    vram-planner recommend PLAN.yaml [--deadline 30d] [--max-gpus N] [--price-kind on_demand|reserved|spot]
                            [--providers CLASS,...] [--gpu-types ID,...] [--rps R --ttft 2s --tpot 50ms]
                            [--frontier] [--top N] [--headroom 0.1] [--rank job|hour] [--mfu 0.4]
                            [--price ID=USD ...] [--fix KEY,...] [--host-gib G] [--format table|json|yaml]
    vram-planner limits PLAN.yaml [--headroom 0.1] [--catalog FILE]
    vram-planner models [--format table|json]
    vram-planner frameworks [--format text|markdown|json]
    vram-planner choices [--format table|json]
    vram-planner formats
    vram-planner import CONFIG [--framework FORMAT] [--entry NAME] [--gpus N] [--gpu ID] [--preset ID] [--hf-config C]
    vram-planner export PLAN.yaml --to FORMAT [--onto CONFIG]
    vram-planner vllm-log LOG [PLAN.yaml] [--catalog FILE]
    vram-planner measure PLAN.yaml [--dry-run] [--csv FILE] [--steps N] [--catalog FILE]

`python -m planner ...` is the same command (the installed console script `vram-planner` calls `main`).

Each plan command also takes --catalog FILE (instead of the project's gpu_catalog.yaml) and --offerings FILE
(offerings added to it, e.g. your own cluster), and --hf-config CONFIG.json: the model read from a Hugging Face
config.json replaces the plan's (and the plan file may then be left out: the default plan for that model). Instead of a
plan file, a plan command takes --from CONFIG: a framework's own config (planner/formats), with --gpus, --gpu and
--preset for what the config leaves open; `import` prints the plan such a config says, `export` writes a plan as one.

User errors (a bad plan, a missing file) print one line on stderr and exit 2; anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import get_args

import yaml

from planner.catalog import DEFAULT_HOST_GIB_PER_GPU, Catalog, Gpu, PriceKind, ProviderClass, load_catalog
from planner.errors import PlanError, bad
from planner.formats import (
    FORMATS,
    export_config,
    export_onto,
    format_named,
    plan_from_config,
    read_config,
    read_lines,
    unused_lines,
)
from planner.formats.base import Imported
from planner.formats.hf_config import shaped_model
from planner.formats.vllm_log import vllm_log_table
from planner.measure import plan as measure
from planner.memory import estimate
from planner.perf import plan_time
from planner.plan.choices import CHOICES, choices_to_table
from planner.plan.codec import plan_from_dict, plan_from_yaml, plan_to_dict, plan_to_yaml
from planner.plan.config import Plan, context_note
from planner.plan.docs import key_doc
from planner.plan.models import approximate_note, model_to_dict, presets, shape_note
from planner.plan.validate import check_choice
from planner.search.recommend import (
    DEFAULT_HEADROOM,
    MAX_GPUS,
    SEARCH_KEYS,
    RankBy,
    SearchOptions,
    max_batch_size,
    max_micro_batch,
    max_prompt_tokens,
    max_sequence_length,
    min_gpus,
    recommend,
)
from planner.views.export import (
    estimate_to_json,
    estimate_to_table,
    estimate_to_yaml,
    formats_to_table,
    frameworks_to_list,
    frameworks_to_table,
    frameworks_to_text,
    frontier_to_table,
    presets_to_list,
    presets_to_table,
    recommendation_to_dict,
    recommendation_to_table,
)

CATALOG_HELP = "GPU catalog YAML to use instead of the project's gpu_catalog.yaml"
CLI_BUDGET_S = 60.0  # a command line can wait for a big search; the app cannot (ui/tabs.py)
ESTIMATE_FORMATS = {"table": estimate_to_table, "json": estimate_to_json, "yaml": estimate_to_yaml}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vram-planner",
        description="Per-GPU memory of training a language model, and the cheapest hardware that fits it.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help_: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_)
        sub.add_argument("plan", nargs="?", help="plan YAML (schema vram-planner/v1); '-' reads standard input")
        _plan_options(sub)
        sub.add_argument(
            "--from",
            dest="config",
            metavar="CONFIG",
            help="instead of a plan file: a framework's config (see `import`)",
        )
        return sub

    est = command("estimate", "itemized per-GPU memory of a plan")
    est.add_argument("--format", choices=sorted(ESTIMATE_FORMATS), default="table")

    _recommend_arguments(
        command(
            "recommend",
            "cheapest offering, GPU count and strategy that fit the plan and "
            "finish within the deadline (serving: meet the throughput target "
            "within the latency bounds)",
        )
    )

    lim = command(
        "limits",
        "what the plan can grow to on its GPU (training: micro-batch and sequence; inference: "
        "sequences at once and prompt) and the fewest GPUs",
    )
    lim.add_argument("--headroom", type=float, default=DEFAULT_HEADROOM)
    lim.add_argument(
        "--budget",
        type=float,
        default=CLI_BUDGET_S,
        metavar="SECONDS",
        help=f"time the fewest-GPUs search may take (default {CLI_BUDGET_S:g})",
    )

    mea = command(
        "measure",
        "run the plan on this machine's CUDA GPU (its model with random weights; the measure "
        "extra) and print the memory measured next to the prediction",
    )
    mea.add_argument(
        "--dry-run",
        action="store_true",
        help="validate the plan, show the model and the run it would do, and the prediction (no torch)",
    )
    mea.add_argument(
        "--csv",
        metavar="FILE",
        type=Path,
        help="append the measurement to FILE as rows in bench/data/measured-dev.csv's format (one per statistic)",
    )
    mea.add_argument(
        "--steps",
        type=int,
        default=measure.TRAIN_STEPS,
        metavar="N",
        help=f"training steps to run (default {measure.TRAIN_STEPS}; inference runs one generate)",
    )

    mod = commands.add_parser("models", help="the model presets with their parameter counts")
    mod.add_argument("--format", choices=("table", "json"), default="table")
    fw = commands.add_parser("frameworks", help="the framework recipes and the plan values each sets")
    fw.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    cho = commands.add_parser("choices", help="every plan key with a fixed set of values, and its values")
    cho.add_argument("--format", choices=("table", "json"), default="table")
    _config_commands(commands)
    return parser


def _recommend_arguments(rec: argparse.ArgumentParser) -> None:
    """The recommend command's options: what is asked (deadline, cap, prices, providers, serving target), how
    it is shown, and the search's knobs."""
    rec.add_argument("--format", choices=("table", "json", "yaml"), default="table")
    rec.add_argument("--top", type=int, default=10, help="candidates to show (default 10)")
    rec.add_argument(
        "--deadline",
        default="30d",
        metavar="DURATION",
        help="finish within, e.g. 30d, 72h, 2w, or 'none' for the cheapest at any speed (default 30d)",
    )
    rec.add_argument(
        "--deadline-at",
        choices=("model", "slow-end"),
        default="model",
        help="check the deadline against the time model's job time (default), or against the slow end "
        "of what published runs of the plan's kind took (8 in 10 at most that slow)",
    )
    rec.add_argument("--max-gpus", type=int, default=MAX_GPUS, metavar="N", help="the most GPUs to plan")
    rec.add_argument(
        "--price-kind",
        choices=get_args(PriceKind),
        default="on_demand",
        help="which of an offering's prices to pay (default on_demand)",
    )
    rec.add_argument(
        "--providers",
        default="",
        metavar="CLASS,...",
        help=f"provider classes to search: {', '.join(get_args(ProviderClass))} (default all)",
    )
    rec.add_argument("--gpu-types", default="", metavar="ID,...", help="GPU types to search (default all)")
    rec.add_argument(
        "--rps", type=float, metavar="REQUESTS", help="serving: requests per second the fleet must sustain"
    )
    rec.add_argument(
        "--tokens-per-s",
        type=float,
        metavar="TOKENS",
        help="serving: generated tokens per second the fleet must sustain",
    )
    rec.add_argument("--ttft", metavar="DURATION", help="serving: time to first token at most, e.g. 500ms or 2s")
    rec.add_argument("--tpot", metavar="DURATION", help="serving: time per output token at most, e.g. 50ms")
    rec.add_argument("--frontier", action="store_true", help="print each GPU type's cost-time frontier too")
    rec.add_argument(
        "--every-offering",
        action="store_true",
        help="search also the offerings a lower bound proves cannot cost within twice the answer",
    )
    rec.add_argument(
        "--headroom",
        type=float,
        default=DEFAULT_HEADROOM,
        help=f"fraction of usable memory kept free (default {DEFAULT_HEADROOM})",
    )
    rec.add_argument("--rank", choices=get_args(RankBy), default="job", help="rank by cost of the job or per hour")
    rec.add_argument(
        "--mfu",
        action="append",
        default=[],
        metavar="FRACTION or GPU=FRACTION",
        help="override the time model with a model FLOPs utilization, for all GPUs or one (repeatable)",
    )
    rec.add_argument(
        "--host-gib",
        type=float,
        metavar="GIB",
        help=f"host RAM per GPU for offloading, GiB (default: each offering's, else {DEFAULT_HOST_GIB_PER_GPU})",
    )
    rec.add_argument(
        "--price",
        action="append",
        default=[],
        metavar="ID=USD",
        help="your price per GPU-hour for a catalog GPU type or offering (repeatable)",
    )
    rec.add_argument(
        "--fix", default="", metavar="KEY,...", help=f"plan values the search keeps; any of: {', '.join(SEARCH_KEYS)}"
    )
    rec.add_argument(
        "--budget",
        type=float,
        default=CLI_BUDGET_S,
        metavar="SECONDS",
        help=f"time the search may take, then it answers with the best found (default {CLI_BUDGET_S:g})",
    )


def _config_commands(commands: argparse._SubParsersAction) -> None:
    """The commands that read or write a framework's own config or log."""
    commands.add_parser("formats", help="the framework config formats: what each says and cannot say (Markdown)")
    imp = commands.add_parser(
        "import",
        help="the plan a framework's own config says (its YAML on standard "
        "output; the config keys it could not use on standard error)",
    )
    imp.add_argument("config", metavar="CONFIG", help="the config file; '-' reads standard input")
    _plan_options(imp)
    exp = commands.add_parser("export", help="a plan as a framework's own config")
    exp.add_argument("plan", help="plan YAML; '-' reads standard input")
    exp.add_argument("--to", required=True, metavar="FORMAT", help=f"one of: {', '.join(FORMATS)}")
    exp.add_argument(
        "--onto",
        metavar="CONFIG",
        help="the config the plan was imported from: written back with "
        "only the keys the plan changes edited (each change on "
        "standard error)",
    )
    vlog = commands.add_parser("vllm-log", help="vLLM's start-up memory log beside the planner's figures")
    vlog.add_argument("log", help="the log as vLLM printed it; '-' reads standard input")
    vlog.add_argument("plan", nargs="?", help="plan YAML to compare with (default: the plan the log's arguments say)")
    vlog.add_argument("--catalog", help=CATALOG_HELP)


def _plan_options(sub: argparse.ArgumentParser) -> None:
    """The options of every command that reads a plan, or a framework config as one."""
    sub.add_argument(
        "--hf-config",
        metavar="CONFIG.json",
        help="a Hugging Face config.json (a path, or a Hub repo id with huggingface_hub "
        "installed) whose architecture replaces the plan's model",
    )
    sub.add_argument("--catalog", help=CATALOG_HELP)
    sub.add_argument(
        "--offerings",
        action="append",
        default=[],
        metavar="FILE",
        help="offerings YAML (schema vram-planner-offerings/v1) added to the catalog, e.g. your own "
        "cluster (repeatable)",
    )
    sub.add_argument(
        "--framework",
        dest="config_format",
        metavar="FORMAT",
        help=f"the config's format, when its text does not tell: {', '.join(FORMATS)}",
    )
    sub.add_argument(
        "--entry",
        metavar="NAME",
        help="the config of a torchtitan config_registry.py to read (its "
        "--config NAME), where the file defines more than one",
    )
    sub.add_argument(
        "--gpus", type=int, metavar="N", help=_key_help("hardware.count", "for a config that leaves the count open")
    )
    sub.add_argument("--gpu", metavar="ID", help=_key_help("hardware.gpu", "the GPU a config runs on"))
    sub.add_argument(
        "--preset", metavar="ID", help=_key_help("model.preset", "for a config that names no model the planner knows")
    )


def _key_help(key: str, use: str) -> str:
    """The help of an option that sets a plan key: what the option is for, then the key's doc (planner/plan/docs.py)."""
    return f"sets {key}, {use}. {key_doc(key)}".replace("%", "%%")  # argparse %-formats help


def _plan(args: argparse.Namespace) -> Plan:
    """The plan file (or the plan of --from's config), its model replaced by --hf-config's; or the default plan of
    the --hf-config model."""
    if args.config is not None:
        return _plan_of_config(args)[0]
    if args.plan is None and args.hf_config is None:
        raise PlanError(
            "plan", "give a plan file, --from CONFIG, or --hf-config CONFIG.json for the default plan of that model"
        )
    for option in ("config_format", "gpus", "gpu", "preset", "entry"):
        if getattr(args, option) is not None:
            raise PlanError(
                f"--{option.replace('config_format', 'framework')}", "applies to a framework config (--from CONFIG)"
            )
    if args.hf_config is None:
        return plan_from_yaml(_read(args.plan))
    plan = plan_from_yaml(_read(args.plan)) if args.plan is not None else None
    name = plan.name if plan and plan.name else Path(args.hf_config).name  # what the output heading names
    return plan_from_dict({**(plan_to_dict(plan) if plan else {}), "model": _hf_model(args.hf_config), "name": name})


def _hf_model(source: str) -> dict:
    """--hf-config's model; where its architecture is exactly a preset's, it names that preset (noted on standard
    error)."""
    model = shaped_model(_hf_config_text(source))
    if model.preset:
        print(f"note: {shape_note(source, model.preset)}", file=sys.stderr)
    return model_to_dict(model)


def _plan_of_config(args: argparse.Namespace) -> tuple[Plan, Imported]:
    """The plan a framework config says, with the options for what it leaves open; what it could not use goes to
    standard error."""
    if getattr(args, "plan", None) is not None:
        raise PlanError("--from", "replaces the plan file; give one or the other")
    path = args.config
    imported = read_config(
        _read(path), format=args.config_format, gpus=args.gpus, files=partial(_beside, path), entry=args.entry or ""
    )
    model = (
        _hf_model(args.hf_config)
        if args.hf_config is not None
        else {"preset": args.preset}
        if args.preset is not None
        else None
    )
    plan = plan_from_config(
        imported, model=model, gpu=args.gpu, gpus=args.gpus, name=Path(path).name if path != "-" else ""
    )
    print("".join(f"{line}\n" for line in unused_lines(imported)), file=sys.stderr, end="")
    return plan, imported


def _beside(config: str, name: str) -> str | None:
    """The text of a file a config names (its DeepSpeed JSON), or None where there is none: the name as the framework
    opens it (from the directory it is launched in: here the current one), else beside the config."""
    places = [Path(name)] + ([Path(config).parent / name] if config != "-" else [])
    found = next((p for p in places if p.is_file()), None)
    return _read(str(found)) if found else None


def _imported_yaml(args: argparse.Namespace) -> str:
    """`import`: the plan's YAML, headed by what each config key read became."""
    plan, imported = _plan_of_config(args)
    head = [f"# the plan of {args.config} ({imported.format}); the config's keys read:"]
    head += [f"#   {line}" for line in read_lines(imported)]
    return "\n".join(head) + "\n" + plan_to_yaml(plan)


def _export(args: argparse.Namespace) -> str:
    """`export`: the plan as a framework config; each planned value it does not carry goes to standard error, with
    why and what the config runs instead."""
    fmt = format_named(args.to)
    plan = plan_from_yaml(_read(args.plan))
    if args.onto is None:
        text, lost = export_config(plan, fmt)
    else:
        edited, lost = export_onto(plan, fmt, _read(args.onto))
        text = edited.text
        print(
            "".join(f"changed {c.line()}\n" for c in edited.changes)
            or f"unchanged: the plan changes none of {args.onto}'s keys\n",
            file=sys.stderr,
            end="",
        )
    for key, (planned, runs) in lost.items():
        print(
            f"{fmt.name} cannot say {key} = {planned} ({fmt.cannot_say[key]}); the config runs {runs}", file=sys.stderr
        )
    return text


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise PlanError(str(path), f"cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise PlanError(str(path), "not a text file") from None


def _hf_config_text(source: str) -> str:
    """--hf-config: a config.json path or '-', or a Hub repo id (org/name) when huggingface_hub is installed and
    the machine is online (an optional dependency: nothing else needs the network)."""
    if source == "-" or Path(source).exists() or not re.fullmatch(r"[\w.-]+/[\w.-]+", source):
        return _read(source)
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise bad(
            "--hf-config",
            source,
            "is not a file; reading a Hub repo id needs huggingface_hub (pip install huggingface_hub)",
        ) from None
    try:
        return Path(hf_hub_download(source, "config.json")).read_text()
    except Exception as exc:  # offline, gated, missing: every failure of the fetch is the user's to fix
        raise PlanError(
            "--hf-config",
            f"cannot fetch config.json of {source!r} from the Hugging Face Hub "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no detail'})",
        ) from None


def _per_gpu(option: str, pairs: list[str], example: str) -> dict[str, float]:
    """GPU=NUMBER pairs of a repeatable option."""
    values = {}
    for pair in pairs:
        gpu, sep, number = pair.partition("=")
        try:
            if not sep:
                raise ValueError
            values[gpu] = float(number)
        except ValueError:
            raise bad(option, pair, f"must look like GPU=NUMBER, e.g. {example}") from None
    return values


def _mfu(values: list[str]) -> tuple[float | None, dict[str, float]]:
    overall = [v for v in values if "=" not in v]
    try:
        mfu = float(overall[-1]) if overall else None
    except ValueError:
        raise bad("--mfu", overall[-1], "must be a fraction like 0.4 or GPU=FRACTION") from None
    return mfu, _per_gpu("--mfu", [v for v in values if "=" in v], "mi300x-192gb=0.3")


def _run(args: argparse.Namespace) -> str:
    if args.command == "choices":
        return choices_to_table() if args.format == "table" else json.dumps(CHOICES, indent=2) + "\n"
    if args.command == "frameworks":
        return {
            "text": frameworks_to_text,
            "markdown": frameworks_to_table,
            "json": lambda: json.dumps(frameworks_to_list(), indent=2) + "\n",
        }[args.format]()
    if args.command == "formats":
        return formats_to_table()
    if args.command == "models":
        rows = presets_to_list(presets())
        return presets_to_table(presets()) if args.format == "table" else json.dumps(rows, indent=2) + "\n"
    if args.command == "export":
        return _export(args)
    if args.command == "import":
        return _imported_yaml(args)
    if args.command == "vllm-log":
        return vllm_log_table(_read(args.log), _read(args.plan) if args.plan else None, load_catalog(args.catalog))
    plan = _plan(args)
    catalog = load_catalog(args.catalog, args.offerings)
    if args.command == "estimate":
        est = estimate(plan, catalog)
        return ESTIMATE_FORMATS[args.format](est, plan_time(plan, est.gpu))
    if args.command == "recommend":
        return _recommend(plan, catalog, args)
    if args.command == "measure":
        return _measure(plan, catalog, args)
    return _limits(plan, catalog, args.headroom, args.budget)


_UNITS_H = {"ms": 1 / 3_600_000, "s": 1 / 3600, "min": 1 / 60, "m": 1 / 60, "h": 1, "d": 24, "w": 168}


def duration_hours(option: str, text: str) -> float | None:
    """A duration with its unit ("30d", "72h", "500ms") in hours; 'none' is no limit."""
    if text.strip().lower() == "none":
        return None
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|min|m|h|d|w)\s*", text)
    if not match or float(match[1]) <= 0:
        raise bad(option, text, "must be a positive number with a unit: ms, s, min, h, d or w (e.g. 30d), or none")
    return float(match[1]) * _UNITS_H[match[2]]


def _seconds(option: str, text: str | None) -> float | None:
    hours = None if text is None else duration_hours(option, text)
    return None if hours is None else hours * 3600


def _listed(text: str) -> tuple[str, ...]:
    return tuple(k.strip() for k in text.split(",") if k.strip())


def _provider_classes(text: str) -> tuple[ProviderClass, ...]:
    """--providers: the provider classes it lists, each checked as SearchOptions checks them."""
    return tuple(check_choice("provider_classes", c, get_args(ProviderClass)) for c in _listed(text))


def _search_options(args: argparse.Namespace) -> SearchOptions:
    """recommend's options from its command line, each checked with the option it came in."""
    if args.top < 1:
        raise bad("--top", args.top, "must be at least 1")
    mfu, mfu_by_gpu = _mfu(args.mfu)
    return SearchOptions(
        deadline_hours=duration_hours("--deadline", args.deadline),
        deadline_at=args.deadline_at.replace("-", "_"),
        max_gpus=args.max_gpus,
        price_kind=args.price_kind,
        provider_classes=_provider_classes(args.providers),
        gpus=_listed(args.gpu_types),
        requests_per_s=args.rps,
        output_tokens_per_s=args.tokens_per_s,
        ttft_s=_seconds("--ttft", args.ttft),
        tpot_s=_seconds("--tpot", args.tpot),
        headroom=args.headroom,
        rank_by=args.rank,
        mfu=mfu,
        mfu_by_gpu=tuple(mfu_by_gpu.items()),
        host_memory_gib_per_gpu=args.host_gib,
        prices=tuple(_per_gpu("--price", args.price, "h100-sxm-80gb=2.10").items()),
        fixed=frozenset(_listed(args.fix)),
        budget_s=args.budget,
        every_offering=args.every_offering,
    )


def _recommend(plan: Plan, catalog: Catalog, args: argparse.Namespace) -> str:
    rec = recommend(plan, catalog, _search_options(args))
    note = approximate_note(plan.model)
    if args.format == "table":
        frontier = "\ncost-time frontier of each GPU type:\n" + frontier_to_table(rec) if args.frontier else ""
        return (f"{note}\n" if note else "") + recommendation_to_table(rec, args.top) + frontier
    if note:  # machine formats stay the recommendation's fields; the caveat goes to the reader
        print(note, file=sys.stderr)
    data = recommendation_to_dict(rec, args.top)
    return json.dumps(data, indent=2) + "\n" if args.format == "json" else yaml.safe_dump(data, sort_keys=False)


def _measure(plan: Plan, catalog: Mapping[str, Gpu], args: argparse.Namespace) -> str:
    """The `measure` command: the dry run's description, or the run's measurements next to the prediction."""
    if args.steps < 1:
        raise bad("--steps", args.steps, "must be at least 1")
    config = measure.setup(plan)
    predicted = measure.predict(config["plan"], catalog)
    if args.dry_run:
        return measure.dry_run_text(config, predicted, args.steps)
    result = measure.runner_for(config).measure(config, "cuda", args.steps) | {
        "timestamp": measure.now(),
        "steps": args.steps,
    }
    if result["status"] != "ok":
        raise PlanError("measure", f"{result['status']}: {result['error']}")
    out = measure.result_text(config, result, predicted)
    if args.csv:
        rows = measure.dev_rows(config, result, row_id=re.sub(r"[^a-z0-9]+", "-", config["name"].lower()).strip("-"))
        measure.append_csv(args.csv, rows)
        out += f"{len(rows)} rows appended to {args.csv}\n"
    return out


def _limits(plan: Plan, catalog: Mapping[str, Gpu], headroom: float, budget_s: float) -> str:
    """The `limits` command's answer: what the plan's task can grow to on its GPUs, and the fewest GPUs."""
    gpu = catalog[plan.hardware.gpu].name
    if plan.workload.task == "inference":
        batch, prompt = (
            max_batch_size(plan, catalog, headroom=headroom),
            max_prompt_tokens(plan, catalog, headroom=headroom),
        )
        grow = [
            f"  most sequences at once: {f'{batch:,}' if batch else 'none fits'} "
            f"({plan.workload.inference.context_tokens:,} tokens each)",
            f"  longest prompt:         {f'{prompt:,} tokens' if prompt else 'none fits'} "
            f"(batch {plan.workload.inference.batch_size:,}, {plan.workload.inference.output_tokens:,} output"
            + (
                ", the model's context window"
                if prompt and prompt + plan.workload.inference.output_tokens == plan.model.context_window
                else ""
            )
            + ")",
        ]
    else:
        mb, seq = (
            max_micro_batch(plan, catalog, headroom=headroom),
            max_sequence_length(plan, catalog, headroom=headroom),
        )
        grow = [
            f"  largest micro-batch: {mb if mb else 'none fits'}",
            f"  longest sequence:    {f'{seq:,} tokens' if seq else 'none fits'}",
        ]
    fewest, cut = min_gpus(plan, catalog, headroom=headroom, budget_s=budget_s)
    none = f"none found within the {budget_s:g} s budget (--budget)" if cut else "none fits"
    return (
        "\n".join(
            [
                *filter(None, [approximate_note(plan.model), context_note(plan)]),
                f"on {plan.hardware.count} × {gpu} with the plan's strategy and {headroom:.0%} headroom:",
                *grow,
                f"fewest {gpu}: "
                + (f"{fewest.count} ({fewest.why.split(': ', 1)[1]})" if fewest else none)
                + (" (the search was cut by its budget: fewer may fit)" if fewest and cut else ""),
            ]
        )
        + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        out = _run(args)
    except PlanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(out)
    return 0
