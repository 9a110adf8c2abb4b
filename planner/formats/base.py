"""What every framework config format shares: the result of reading one, and the small helpers the readers use.

A reader turns a framework's own config (a torchtitan TOML, a DeepSpeed JSON, a `vllm serve` command line, ...)
into a partial plan dict in the file format of planner/plan/codec.py, with `framework` set so that the framework's
recipe (planner/data/frameworks.yaml) fills what the config leaves out. Nothing is dropped silently: each key of
the config is either read (and says which plan key it set), known to leave memory alone, known to change memory
in a way no plan key says (`unmodelled`, with why), or unknown to the reader.

Every format's `detect` and `read` take the config's text or its `Document`, which holds each parse made of the
text (a YAML mapping, a TOML table, a script's flags) so that it is made once: detecting a document's format
among nine costs one parse of each kind, and a hostile paste costs the same.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from planner.errors import OverLimit, PlanError, bad
from planner.loader import CONFIG, check_size
from planner.plan.config import Inference, Plan, Workload
from planner.plan.models import aliases, presets

Parsed = TypeVar("Parsed")


@dataclass(frozen=True, kw_only=True)
class KeyRead:
    """One config key the reader used: where it was, and the plan key and value it became."""

    source: str  # the config's own key, e.g. "parallelism.tensor_parallel_degree" or "--tensor-parallel-size"
    plan_key: str  # dotted plan key, e.g. "parallelism.tensor"
    value: Any  # the plan value it set


@dataclass(frozen=True, kw_only=True)
class Imported:
    """A framework config read as a (partial) plan."""

    format: str  # the format's name (planner.formats.FORMATS)
    plan: dict[str, Any]  # the plan dict the config says (file format; `framework` set; may lack `model`)
    read: tuple[KeyRead, ...] = ()
    # the config's model name where it names one that is not a preset (the plan then needs --preset/--hf-config)
    model_name: str = ""
    unmodelled: tuple[str, ...] = ()  # "key: why" for keys that change memory but no plan key says
    notes: tuple[str, ...] = ()  # how the reader took what the config says (the rule a model name resolved by)
    ignored: tuple[str, ...] = ()  # keys known to leave memory and time alone (learning rate, logging, ...)
    unknown: tuple[str, ...] = ()  # keys the reader does not know


@dataclass(frozen=True)
class Document:
    """A config's text (within the config size cap) and what it parses into: each parse (a YAML or JSON mapping,
    a TOML table, a script's flags) runs once, however many formats' `detect` and `read` ask for it, so that
    detecting the format of a document costs one parse of each kind, not one a format."""

    text: str
    _parses: dict[Callable[[str], Any], Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_size(self.text, CONFIG)

    def parse(self, parser: Callable[[str], Parsed]) -> Parsed:
        """parser(text), run once: its result again (the same object: a reader copies what it changes), or the
        PlanError it raised again."""
        if parser not in self._parses:
            try:
                self._parses[parser] = parser(self.text)
            except PlanError as error:
                self._parses[parser] = error
        parsed = self._parses[parser]
        if isinstance(parsed, PlanError):
            raise parsed
        return parsed

    def over_limit(self) -> OverLimit | None:
        """The first parse refused for the document's bulk (planner/errors.py OverLimit), if any."""
        return next((p for p in self._parses.values() if isinstance(p, OverLimit)), None)


def document(text: str | Document) -> Document:
    """The Document of a config's text (a reader given text makes one; one given a Document shares its parses)."""
    return text if isinstance(text, Document) else Document(text)


@dataclass(frozen=True, kw_only=True)
class Format:
    """One framework config format: how to recognise, read and write it, and what it can say."""

    name: str  # e.g. "torchtitan"
    label: str  # e.g. "torchtitan job config (TOML)"
    framework: str  # the plan's framework value its plans get
    suffix: str  # the file suffix its export gets, e.g. ".toml", ".json", ".sh"
    detect: Callable[[str | Document], bool]  # does this text look like the format
    read: Callable[..., Imported]  # read(text or Document, *, gpus=None) -> Imported
    write: Callable[[Plan], str] | None  # the config that runs the plan as planned (None: read only, no export)
    says: tuple[str, ...]  # dotted plan keys the format writes and reads back exactly (read only: those it reads)
    # every plan key an export may change (export_config names each, with what the config runs): why
    cannot_say: dict[str, str] = field(default_factory=dict)
    # read also takes files=, a function giving the text of a file the config names (None where there is none)
    reads_files: bool = False

    def written(self, plan: Plan) -> str:
        """`write` of the plan (a PlanError naming --to where the format is read only)."""
        if self.write is None:
            raise bad("--to", self.name, READ_ONLY)
        return self.write(plan)


READ_ONLY = "is read only: its configs are imported, not exported"


# the plan's own defaults, which a config that does not say a key gets (issue 31: each is named where taken)
_WORKLOAD, _INFERENCE = Workload(), Inference()


def training_defaults(fmt: str, *, task: str = "", sequence: str = "") -> dict[str, tuple[Any, str]]:
    """What a training plan takes for the keys every plan needs (the task, the sequence length, the micro-batch)
    where a `fmt` config does not say them, with why: {plan key: (value, why)}; `task` and `sequence` replace the
    why of those two where the format has its own reason."""
    return {
        "workload.task": (
            _WORKLOAD.task,
            task or f"the {fmt} config does not say what it trains: the plan's default {_WORKLOAD.task}",
        ),
        "workload.sequence_length": (
            _WORKLOAD.sequence_length,
            sequence
            or f"the {fmt} config does not say the sequence length: the plan's default {_WORKLOAD.sequence_length}",
        ),
        "workload.micro_batch_size": (
            _WORKLOAD.micro_batch_size,
            f"the {fmt} config does not say the micro-batch: the plan's default {_WORKLOAD.micro_batch_size}",
        ),
    }


def serving_defaults(flag: str, engine: str) -> dict[str, tuple[Any, str]]:
    """What a serving plan takes where a server's command line does not say its context (`flag`: the engine then
    takes the model's whole context) or how many requests run at once: {plan key: (value, why)}."""
    context = f"{flag} unset, {engine} takes the model's whole context: planned as the plan's default"
    return {
        "workload.inference.prompt_tokens": (_INFERENCE.prompt_tokens, f"{context} {_INFERENCE.prompt_tokens}"),
        "workload.inference.output_tokens": (_INFERENCE.output_tokens, f"{context} {_INFERENCE.output_tokens}"),
        "workload.inference.batch_size": (
            _INFERENCE.batch_size,
            f"the {engine} command line does not say how many "
            f"requests run at once: the plan's default {_INFERENCE.batch_size}",
        ),
    }


def marked(imported: Imported, defaults: Mapping[str, tuple[Any, str]]) -> Imported:
    """The import with each key of `defaults` that the config does not set read as its default, "(absent: why)",
    so that no value a plan needs comes from a default unnamed. The plan dict stays silent on it: laid over a base
    plan (overlay), the base's value stands."""
    reads = tuple(
        KeyRead(source=f"(absent: {why})", plan_key=key, value=value)
        for key, (value, why) in defaults.items()
        if get_key(imported.plan, key) is None
    )
    return replace(imported, read=imported.read + reads)


# why a config's framework_release reads back as the latest: no config names the release it runs under
RELEASE_WHY = "a config does not name its framework's release: read back as the latest"


def checkpoint(plan: Plan) -> str | None:
    """The Hugging Face repo a config names for the plan's model: its preset's, where the model has that preset's
    architecture exactly (a preset with other layers has no checkpoint to name)."""
    preset = plan.model.preset
    return presets()[preset].hf_id if preset and plan.model == presets()[preset].model else None


def accumulation(plan: Plan, data: int) -> int:
    """The gradient accumulation steps of a config that runs `data` data-parallel ranks (more than the plan's
    where it cannot say the plan's other degrees): those that keep the plan's global batch, else the plan's own."""
    wl = plan.workload
    steps, left = divmod(wl.global_batch_size, wl.micro_batch_size * data)
    return steps if steps and not left else plan.micro_batches_per_step


def set_key(plan: dict[str, Any], dotted: str, value: Any) -> None:
    """Set a dotted plan key ("workload.lora.rank") in a plan dict, making the sections on the way."""
    *path, leaf = dotted.split(".")
    node = plan
    for part in path:
        node = node.setdefault(part, {})
    node[leaf] = copy.deepcopy(value)


def get_key(plan: dict[str, Any], dotted: str, default: Any = None) -> Any:
    """A dotted key of a plan dict, or `default` where any part of the path is missing."""
    node: Any = plan
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


# the longest last part of a model name that can name a repo: a Hugging Face repo's name has at most 96
# characters, a file name at most 255 (and _VARIANT takes time quadratic in a name's length)
MAX_NAME = 255
# suffixes of a fine-tuned release that keeps its base model's architecture ("Llama-3.1-8B-Instruct",
# "Qwen3-235B-A22B-Thinking-2507", "smollm2-1.7B-sft") and of a quantized repack of one
# ("Meta-Llama-3.1-70B-Instruct-quantized.w8a8", "Qwen2.5-7B-Instruct-AWQ", "Qwen3-30B-A3B-NVFP4"; Unsloth's
# "llama-3-8b-bnb-4bit" and "-unsloth-bnb-4bit": unslothai/unsloth@015bdef unsloth/models/mapper.py maps each to
# its 16-bit original). The weights' quantization is the config's to say, not the name's.
_VARIANT = re.compile(
    r"(-(instruct|chat|it|base|hf|pt|sft|thinking|fp16|bf16|fp8(-dynamic)?|nvfp4|awq|"
    r"gptq(-int[48])?|(unsloth-)?bnb-4bit|\d{4}|quantized\.\w+|w\d+a\d+))+$"
)
ALIAS_RULE = "the alias table (planner/data/model_aliases.yaml: its config.json has the preset's architecture)"


@dataclass(frozen=True, kw_only=True)
class Resolution:
    """The preset a config's model name means, and the rule that found it ("" where the name is the preset's own
    id or repo)."""

    preset: str
    rule: str = ""


def preset_for(name: str) -> str | None:
    """The preset id a config's model name means (resolve_model), or None."""
    found = resolve_model(name)
    return found.preset if found else None


def resolve_model(name: str) -> Resolution | None:
    """The preset a config's model name means: a preset id or its Hugging Face repo id (any case, with or without
    its organisation, as a local path or a URL ending in one); a repo of the alias table (planner/data/
    model_aliases.yaml); or either with its fine-tune or repack suffixes dropped (_VARIANT; Meta's "Meta-" prefix).
    None when it names none."""
    wanted = name.strip().rstrip("/").lower()
    last = wanted.split("/")[-1]
    if len(last) > MAX_NAME:
        return None
    if wanted in presets():
        return Resolution(preset=wanted)
    repos = [(p.id, p.hf_id, "") for p in presets().values()] + [
        (a.preset, a.repo, ALIAS_RULE) for a in aliases().values()
    ]
    for preset_id, repo, rule in repos:
        if last == repo.lower().split("/")[-1]:
            return Resolution(preset=preset_id, rule=rule)
    bare = _bare(last)
    found = next(
        ((preset_id, repo, rule) for preset_id, repo, rule in repos if bare == _bare(repo.split("/")[-1])), None
    )
    if found is None:
        return None
    meta = " and Meta's prefix" if "meta-" in (last[:5], found[1].lower().split("/")[-1][:5]) else ""
    return Resolution(
        preset=found[0],
        rule=f"its name and {found[1]}'s alike without fine-tune or repack suffixes"
        f"{meta} (both {bare}; the weights' quantization is the config's, not "
        f"the name's)" + (f", then {found[2]}" if found[2] else ""),
    )


def _bare(repo: str) -> str:
    """A repo's name without its variant suffixes and Meta's "Meta-" prefix (Meta-Llama-3-8B-Instruct: llama-3-8b)."""
    return _VARIANT.sub("", repo.lower().removeprefix("meta-"))
