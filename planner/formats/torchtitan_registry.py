"""torchtitan's Python config registry (`config_registry.py`, since torchtitan PR #2386, 9810191b, 2026-02-23: "TOML
to Python Dataclass Registry"), read without running it: the file is parsed with `ast` and only literals are
evaluated, so nothing in it is imported or executed.

A registry is a module of functions that take no argument and each return one trainer config (torchtitan's
ConfigManager._load_config calls `getattr(module, config_name)()` for `--module M --config NAME`):

    def llama3_8b() -> Trainer.Config:
        return Trainer.Config(model_spec=model_registry("8B"), training=TrainingConfig(local_batch_size=1, ...),
                              parallelism=ParallelismConfig(...), activation_checkpoint=..., compile=..., ...)

    def llama3_8b_float8() -> Trainer.Config:       # derived: another entry, then attribute assignments
        config = llama3_8b()
        config.compile = CompileConfig(enable=True)
        return config

Each call becomes a `Built` (the callee's dotted name, its positional and keyword arguments); local names, module-
level constants, arithmetic on numbers, lists, tuples and dicts are evaluated; everything else (a helper's result,
a comprehension, a condition, a loop) is `Unread`, with its source text, and every statement the entry does not
read is listed. torchtitan.py turns an entry into the `section.key` keys its TOML reader takes (registry_config).
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from planner.loader import int_fits

# the most expression nodes and copied values one file's entries may cost together: the largest of torchtitan's
# 33 registries at 9810191b and b5bcd76c costs 1,136; an entry that doubles its base's size at each step runs away
MAX_STEPS = 20_000


@dataclass(frozen=True, kw_only=True)
class Built:
    """A call the registry makes: `kind` is the callee as written ("TrainingConfig", "Trainer.Config",
    "model_registry"), `args` its positional arguments, `fields` its keyword arguments (assignments to an attribute
    of the result later in the entry add to them)."""

    kind: str
    args: tuple[Any, ...] = ()
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Unread:
    """A value the registry computes in a way this reader does not evaluate: its source text."""

    text: str


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One registry function: what it returns (a Built, or Unread) and the statements it did not read."""

    name: str
    value: Any
    unread: tuple[str, ...] = ()


class Refused(Exception):
    """An entry this reader cannot evaluate at all (a cycle of entries, or one beyond MAX_STEPS)."""


def _clip(text: str, limit: int = 80) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def dotted(node: ast.expr) -> str | None:
    """The dotted name an expression spells (`Trainer.Config`, `tt.config.TrainingConfig`), or None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


@dataclass(frozen=True, kw_only=True)
class _Module:
    """The file's functions and constants, and the entries evaluated so far (each once: an entry that calls another
    gets a copy of its result)."""

    functions: dict[str, ast.FunctionDef]
    constants: dict[str, Any] = field(default_factory=dict)
    done: dict[str, Entry] = field(default_factory=dict)
    active: list[str] = field(default_factory=list)
    spent: list[int] = field(default_factory=lambda: [0])  # the steps taken so far (one number)

    def spend(self, n: int = 1) -> None:
        self.spent[0] += n
        if self.spent[0] > MAX_STEPS:
            raise Refused(f"evaluating it takes more than {MAX_STEPS:,} steps")


def _size(value: Any, limit: int) -> int:
    """The values a copy of `value` makes (what copying an entry's result costs), counted up to `limit`."""
    stack, n = [value], 0
    while stack and n <= limit:
        item = stack.pop()
        n += 1
        if isinstance(item, Built):
            stack += [*item.args, *item.fields.values()]
        elif isinstance(item, (list, tuple)):
            stack += list(item)
        elif isinstance(item, dict):
            stack += list(item.values())
    return n


_NUMBER_OPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Div: lambda a, b: a / b,
    ast.Mod: lambda a, b: a % b,
}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _arithmetic(node: ast.BinOp, left: Any, right: Any) -> Any:
    """Arithmetic on two numbers (8 * 2048), an integer result within the loader's digits; else Unread."""
    op = _NUMBER_OPS.get(type(node.op))
    divides = isinstance(node.op, (ast.FloorDiv, ast.Div, ast.Mod))
    if op is None or not (_number(left) and _number(right)) or (divides and right == 0):
        return Unread(text=_clip(ast.unparse(node)))
    try:
        result = op(left, right)
    except ArithmeticError:  # a float beyond range
        return Unread(text=_clip(ast.unparse(node)))
    return result if not isinstance(result, int) or int_fits(result) else Unread(text=_clip(ast.unparse(node)))


def evaluate(node: ast.expr, env: dict[str, Any], module: _Module) -> Any:
    """An expression's value: a literal, a name bound before, a call as a Built, or Unread."""
    module.spend()
    if isinstance(node, ast.Constant):
        ok = isinstance(node.value, (str, bool, float, type(None))) or (
            type(node.value) is int and int_fits(node.value)
        )
        return node.value if ok else Unread(text=_clip(ast.unparse(node)))
    if isinstance(node, (ast.List, ast.Tuple)):
        return [evaluate(item, env, module) for item in node.elts]
    if isinstance(node, ast.Dict):
        keys = [k for k in node.keys if isinstance(k, ast.Constant)]
        if len(keys) == len(node.keys):  # every key a literal (no ** unpacking, no computed key)
            return {k.value: evaluate(v, env, module) for k, v in zip(keys, node.values, strict=True)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = evaluate(node.operand, env, module)
        if _number(operand):
            return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp):
        return _arithmetic(node, evaluate(node.left, env, module), evaluate(node.right, env, module))
    if isinstance(node, ast.Name):
        for scope in (env, module.constants):
            if node.id in scope:
                return scope[node.id]
    if isinstance(node, ast.Attribute):
        base = evaluate(node.value, env, module)
        if isinstance(base, Built) and node.attr in base.fields:
            return base.fields[node.attr]
    if isinstance(node, ast.Subscript):
        base, key = evaluate(node.value, env, module), evaluate(node.slice, env, module)
        if isinstance(base, dict) and isinstance(key, (str, int)) and key in base:
            return base[key]
    if isinstance(node, ast.Call):
        return _call(node, env, module)
    return Unread(text=_clip(ast.unparse(node)))


def _call(node: ast.Call, env: dict[str, Any], module: _Module) -> Any:
    """A call: another entry of the file (a copy of its result), or a Built of the callee's name."""
    name = dotted(node.func)
    if name is None or any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        return Unread(text=_clip(ast.unparse(node)))
    if name in module.functions:
        if node.args or node.keywords or not is_entry(module.functions[name]):
            return Unread(text=_clip(ast.unparse(node)))
        value = entry(name, module).value
        module.spend(_size(value, MAX_STEPS - module.spent[0] + 1))
        return copy.deepcopy(value)
    return Built(
        kind=name,
        args=tuple(evaluate(a, env, module) for a in node.args),
        fields={k.arg: evaluate(k.value, env, module) for k in node.keywords if k.arg},
    )


def _assign(target: ast.expr, value: Any, env: dict[str, Any], module: _Module) -> bool:
    """Bind a local name, or set an attribute of a Built the entry holds (`config.training.steps = 5`; a section
    not built yet is made, as the trainer config's default instance). False where the target is not one of those."""
    if isinstance(target, ast.Name):
        env[target.id] = value
        return True
    if not isinstance(target, ast.Attribute):
        return False
    holder = evaluate(target.value, env, module) if isinstance(target.value, ast.Name) else None
    if isinstance(target.value, ast.Attribute):
        parent = evaluate(target.value.value, env, module)
        if isinstance(parent, Built):
            holder = parent.fields.setdefault(target.value.attr, Built(kind=target.value.attr))
    if not isinstance(holder, Built):
        return False
    holder.fields[target.attr] = value
    return True


# statements an entry may hold that set nothing its config carries
_INERT = (ast.Assert, ast.Pass, ast.Import, ast.ImportFrom, ast.FunctionDef)


def _run(function: ast.FunctionDef, module: _Module) -> Entry:
    """Evaluate an entry's statements in order, up to its return."""
    env: dict[str, Any] = {}
    unread: list[str] = []
    for statement in function.body:
        if isinstance(statement, ast.Return):
            value = evaluate(statement.value, env, module) if statement.value else Unread(text="return")
            return Entry(name=function.name, value=value, unread=tuple(unread))
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # its docstring
        if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            value = evaluate(statement.value, env, module)
            if len(targets) == 1 and _assign(targets[0], value, env, module):
                continue
        if not isinstance(statement, _INERT):
            unread.append(f"line {statement.lineno}: {_clip(ast.unparse(statement))}")
    return Entry(name=function.name, value=Unread(text="no return statement"), unread=tuple(unread))


def entry(name: str, module: _Module) -> Entry:
    """An entry's result, evaluated once."""
    if name in module.active:
        raise Refused(f"it calls itself through {' -> '.join([*module.active, name])}")
    if name not in module.done:
        module.active.append(name)
        try:
            module.done[name] = _run(module.functions[name], module)
        finally:
            module.active.pop()
    return module.done[name]


def is_entry(function: ast.FunctionDef) -> bool:
    """A function torchtitan can call as a config: public, with no parameter it must be given."""
    args = function.args
    required = len(args.posonlyargs) + len(args.args) - len(args.defaults)
    no_default = [d for d in args.kw_defaults if d is None]
    return not function.name.startswith("_") and required == 0 and not no_default


def _returns_config(function: ast.FunctionDef) -> bool:
    """Whether the function says it returns a config (`-> Trainer.Config`, `-> FluxTrainer.Config`)."""
    annotation = function.returns
    name = dotted(annotation) if annotation is not None else None
    return name is not None and name.split(".")[-1].endswith("Config")


@dataclass(frozen=True, kw_only=True)
class Registry:
    """A config_registry.py as read: each entry's Entry, or why it could not be read."""

    entries: dict[str, Entry]
    refused: dict[str, str]
    # each name the file binds to a model_registry: the torchtitan model module it comes from ("" for `from .
    # import model_registry`, the registry's own package, which its text does not name)
    models: dict[str, str] = field(default_factory=dict)

    def names(self) -> list[str]:
        return [*self.entries, *self.refused]


def registry(text: str) -> Registry | None:
    """A config registry's entries, or None where the text is not Python that defines at least one function
    returning a config (`-> ...Config`)."""
    if "def " not in text or "Config" not in text:
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):  # ValueError: a literal Python will not read
        return None
    functions = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
    module = _Module(functions=functions)
    _constants(tree, module)
    entries: dict[str, Entry] = {}
    refused: dict[str, str] = {}
    for name, function in functions.items():
        if not (is_entry(function) and _returns_config(function)):
            continue
        try:
            entries[name] = entry(name, module)
        except Refused as why:
            refused[name] = str(why)
        except RecursionError:
            refused[name] = "its expressions nest too deeply to read"
    return Registry(entries=entries, refused=refused, models=_models(tree)) if entries or refused else None


def _models(tree: ast.Module) -> dict[str, str]:
    """The names bound to a model module's model_registry (`from torchtitan.models.qwen3 import model_registry as
    qwen3_model_registry`: qwen3)."""
    out = {}
    for statement in tree.body:
        if isinstance(statement, ast.ImportFrom):
            package = (statement.module or "").split(".")[-1] if not statement.level else ""
            out.update(
                {alias.asname or alias.name: package for alias in statement.names if alias.name == "model_registry"}
            )
    return out or {"model_registry": ""}


def _constants(tree: ast.Module, module: _Module) -> None:
    """The module-level `NAME = value` assignments, in order (a value the reader cannot evaluate stays Unread)."""
    for statement in tree.body:
        if (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
        ):
            try:
                module.constants[statement.targets[0].id] = evaluate(statement.value, {}, module)
            except (Refused, RecursionError):
                module.constants[statement.targets[0].id] = Unread(text=_clip(ast.unparse(statement.value)))


# --- an entry as the `section.key` keys of torchtitan's TOML ------------------------------------------------------
# The trainer config's fields hold the old JobConfig's sections under the same names (torchtitan/trainer.py
# Trainer.Config at 9810191b: training, parallelism, activation_checkpoint, compile, optimizer, ... with the same
# keys as job_config.py at v0.2.2); what moved: the model is `model_spec=model_registry(flavor)` (torchtitan/models/
# <module>/__init__.py), quantization is a list of converter configs (in `model_converters` at 9810191b, in
# model_registry(flavor, converters=[...]) since 6348d93d, 2026-04-27), activation checkpointing is a policy class
# since c5d93d10 (2026-06-15), and since 73aed7f6 (2026-08-20) batches are counted in tokens.
Keys = dict[str, tuple[str, Any]]  # torchtitan's `section.key` → (where the registry says it, its value)

# converter config → the TOML's quantize section (torchtitan/components/quantization/{float8,mx}.py)
CONVERTERS = {
    "Float8LinearConverter": "quantize.linear.float8",
    "MXLinearConverter": "quantize.linear.mx",
    "MXFP8LinearConverter": "quantize.linear.mx",
    "Float8GroupedMMConverter": "quantize.grouped_mm.float8",
    "MXGroupedMMConverter": "quantize.grouped_mm.mx",
    "Float8GroupedExpertsConverter": "quantize.grouped_mm.float8",
    "MXFP8GroupedExpertsConverter": "quantize.grouped_mm.mx",
}
# activation-checkpointing policy config (torchtitan/distributed/activation_checkpoint.py since c5d93d10) → the
# TOML's mode and selective option: SelectiveAC is the per-op policy ("Per-op selective activation checkpointing")
AC_POLICIES = {"SelectiveAC": ("selective", "op"), "FullAC": ("full", None), "MemoryBudgetAC": ("memory_budget", None)}
# the token-counted batch (TrainingConfig at 73aed7f6): its defaults, num_tokens_per_microbatch_per_dp_rank 16384 and
# max_context_length 2048, are the old local_batch_size 8 × seq_len 2048; num_pp_microbatches 1 (one micro-batch a
# step). Each one a plan takes is read with "(absent: default N)" in its source.
TOKEN_DEFAULTS = {
    "training.num_tokens_per_microbatch_per_dp_rank": 16384,
    "training.max_context_length": 2048,
    "parallelism.num_pp_microbatches": 1,
}
# since 6348d93d the float8 converter's recipe_name defaults to rowwise (before: None, torchao's tensorwise)
FLOAT8_DEFAULT = "rowwise"


def _shown(value: Any) -> str:
    """A value as a note quotes it: an unread expression's text, a call's callee, else its repr."""
    return (
        value.text if isinstance(value, Unread) else f"{value.kind}(...)" if isinstance(value, Built) else repr(value)
    )


def _kind(built: Built) -> str:
    """A config class's own name: "Float8LinearConverter" for `Float8LinearConverter.Config`."""
    parts = built.kind.split(".")
    return parts[-2] if parts[-1] == "Config" and len(parts) > 1 else parts[-1]


@dataclass(frozen=True, kw_only=True)
class _Keys:
    """The keys an entry says, and what of it is not read (unmodelled: `where: why`)."""

    keys: Keys = field(default_factory=dict)
    unmodelled: list[str] = field(default_factory=list)
    inert: Callable[[str], bool] = lambda key: False  # a key known to leave memory alone, whatever its value

    def put(self, key: str, source: str, value: Any) -> None:
        if self.inert(key):
            self.keys[key] = (source, value.text if isinstance(value, Unread) else value)
        elif isinstance(value, Unread):
            self.unmodelled.append(f"{source}: `{value.text}` is not a literal; not read")
        elif isinstance(value, Built):
            self.unmodelled.append(f"{source}: {value.kind}(...) where a value belongs; not read")
        else:
            self.keys[key] = (source, value)

    def section(self, name: str, value: Any, prefix: str | None = None) -> None:
        """A config dataclass's fields as `prefix.field` keys (prefix: the section's name)."""
        prefix = prefix or name
        if not isinstance(value, Built) or value.args:
            self.put(prefix, name, value if not isinstance(value, Built) else Unread(text=f"{value.kind}(...)"))
            return
        for key, item in value.fields.items():
            if isinstance(item, Built):  # a nested component's config (a data loader's dataset, ...)
                self.keys[f"{prefix}.{key}"] = (f"{name}.{key}", item.kind)
            else:
                self.put(f"{prefix}.{key}", f"{name}.{key}", item)


@dataclass(frozen=True, kw_only=True)
class Models:
    """Where an entry's model module comes from: the names bound to a model_registry (Registry.models), and, for
    one imported from the registry's own package, the module the launch line or the entry's name says (and how)."""

    calls: dict[str, str]
    module: str
    why: str


def entry_keys(found: Entry, models: Models, inert: Callable[[str], bool]) -> tuple[Keys, list[str]]:
    """An entry's config as torchtitan's TOML keys, and what it holds that is not read (a value it does not
    evaluate is noted, unless its key is `inert`: known to leave memory alone)."""
    out = _Keys(
        unmodelled=[f"{found.name} {line}: a statement this reader does not run" for line in found.unread], inert=inert
    )
    config = found.value
    if not isinstance(config, Built):
        raise ValueError(f"returns {config.text if isinstance(config, Unread) else repr(config)}, not a config call")
    for name, value in config.fields.items():
        handler = _FIELDS.get(name)
        if handler is not None:
            handler(out, name, value, models)
        elif name in ("hf_assets_path", "dump_folder"):
            out.put(f"{'model' if name == 'hf_assets_path' else 'job'}.{name}", name, value)
        else:
            out.section(name, value)
    _tokens(out)
    return out.keys, out.unmodelled


def _model(out: _Keys, name: str, spec: Any, models: Models) -> None:
    """model_spec=model_registry(flavor, converters=[...], attn_backend=...): model.name (the module) and flavor."""
    if not (isinstance(spec, Built) and spec.kind in models.calls):
        out.unmodelled.append(f"{name}: `{_shown(spec)}` is not model_registry(flavor); the model is not read")
        return
    flavor = spec.args[0] if spec.args else spec.fields.get("flavor", Unread(text="model_registry()"))
    call = f"{name}={spec.kind}({_shown(flavor)})"
    if not isinstance(flavor, str):  # no flavor read: no model (the JobConfig default's debug model is not taken)
        out.unmodelled.append(f"{call}: the flavor is not a literal; the model is not read")
        return
    out.put("model.flavor", call, flavor)
    module = models.calls[spec.kind]
    source = f"{call} (imported from torchtitan.models.{module})" if module else f"{call} ({models.why})"
    out.keys["model.name"] = (source, module or models.module)
    for key, value in spec.fields.items():
        if key == "converters":
            _converters(out, f"{name}.converters", value, FLOAT8_DEFAULT)
        elif key != "flavor":
            out.put(f"model.{key}", f"{name}.{key}", value)


def _container(out: _Keys, name: str, value: Any, _models: Models) -> None:
    """model_converters=ModelConvertersContainer.Config(converters=[...]) (9810191b to 6348d93d)."""
    if isinstance(value, Built) and set(value.fields) <= {"converters"} and not value.args:
        _converters(out, f"{name}.converters", value.fields.get("converters", []), None)
    else:
        out.put(name, name, Unread(text=f"{value.kind}(...)") if isinstance(value, Built) else value)


def _converters(out: _Keys, source: str, value: Any, float8_default: str | None) -> None:
    """A list of converter configs: model.converters names and each one's settings as its quantize section's."""
    if not isinstance(value, list):
        out.put("model.converters", source, value if not isinstance(value, Built) else Unread(text=value.kind))
        return
    names = []
    for item in value:
        kind = _kind(item) if isinstance(item, Built) else ""
        if kind not in CONVERTERS:
            out.unmodelled.append(f"{source}: {_shown(item)} changes the model in a way the plan does not model")
            continue
        section = CONVERTERS[kind]
        names.append(section)
        out.section(f"{source}[{kind}]", item, section)
        if (
            section == "quantize.linear.float8"
            and float8_default
            and not isinstance(item.fields.get("recipe_name"), str)
        ):
            out.keys.setdefault(
                f"{section}.recipe_name",
                (f"{source}[{kind}].recipe_name (absent: default {float8_default})", float8_default),
            )
    out.keys["model.converters"] = (source, names)


def _checkpointing(out: _Keys, name: str, value: Any, _models: Models) -> None:
    """activation_checkpoint=ActivationCheckpointConfig(mode=...) (to c5d93d10) or a policy's config (since):
    SelectiveAC (per op), FullAC, MemoryBudgetAC, or None (none)."""
    if value is None:
        out.keys["activation_checkpoint.mode"] = (f"{name}=None", "none")
        return
    kind = _kind(value) if isinstance(value, Built) else ""
    if kind in AC_POLICIES:
        mode, option = AC_POLICIES[kind]
        out.keys["activation_checkpoint.mode"] = (f"{name}={value.kind}", mode)
        if option:
            out.keys["activation_checkpoint.selective_ac_option"] = (f"{name}={value.kind}", option)
        fields = {
            ("per_op_sac_" + k if k == "force_recompute_mm_shapes_by_fqns" else k): v for k, v in value.fields.items()
        }
        value = Built(kind=value.kind, fields=fields)
    out.section(name, value)


def _optimizer(out: _Keys, name: str, value: Any, _models: Models) -> None:
    """optimizer=OptimizersContainer.Config(name=..., implementation=...), its in-backward subclass, or
    default_adamw(lr=...) (a catch-all AdamW group, since 632f67f1); param_groups are not read."""
    kind = _kind(value) if isinstance(value, Built) else ""
    if kind == "default_adamw":
        out.keys["optimizer.name"] = (f"{name}=default_adamw", "AdamW")
    elif kind == "OptimizersInBackwardContainer":
        out.keys["optimizer.early_step_in_backward"] = (f"{name}={value.kind}", True)
    if isinstance(value, Built) and "param_groups" in value.fields:
        out.unmodelled.append(
            f"{name}.param_groups: optimizers per parameter group are not read; the plan keeps the recipe's AdamW"
        )
        value = Built(kind=value.kind, fields={k: v for k, v in value.fields.items() if k != "param_groups"})
    out.section(name, value)


def _compile(out: _Keys, name: str, value: Any, _models: Models) -> None:
    """compile=CompileConfig(...): since 73759474 it also holds enable_async_tensor_parallel."""
    out.section(name, value)
    if "compile.enable_async_tensor_parallel" in out.keys:
        out.keys["parallelism.enable_async_tensor_parallel"] = out.keys.pop("compile.enable_async_tensor_parallel")


def _loss(out: _Keys, name: str, value: Any, _models: Models) -> None:
    """loss=CrossEntropyLoss.Config(...) (the whole logits, as the plan's full loss), or a chunked wrapper."""
    kind = _kind(value) if isinstance(value, Built) else ""
    if kind != "CrossEntropyLoss":
        out.unmodelled.append(
            f"{name}: {_shown(value)} is not read; the plan takes the whole fp32 logits (techniques.loss full)"
        )


_FIELDS = {
    "model_spec": _model,
    "model_converters": _container,
    "activation_checkpoint": _checkpointing,
    "optimizer": _optimizer,
    "compile": _compile,
    "loss": _loss,
}


def _tokens(out: _Keys) -> None:
    """The token-counted batch (since 73aed7f6) as the old keys: seq_len = max_context_length; per data rank,
    num_tokens_per_microbatch_per_dp_rank ÷ max_context_length sequences a micro-batch (the pipeline's micro-batch
    size under a pipeline, whose num_pp_microbatches make the local batch); the global batch likewise."""
    token_keys = (
        "training.num_tokens_per_microbatch_per_dp_rank",
        "training.max_context_length",
        "training.num_tokens_per_train_step",
        "parallelism.num_pp_microbatches",
    )
    if not any(key in out.keys for key in token_keys):
        return
    given = {key: out.keys.pop(key) for key in token_keys if key in out.keys}
    context_src, context = _token_key(given, token_keys[1])
    tokens_src, tokens = _token_key(given, token_keys[0])
    counts = [(k, v) for k, v in ((context_src, context), (tokens_src, tokens)) if type(v) is not int or v < 1]
    if counts:
        out.unmodelled.append(f"{counts[0][0]}: {counts[0][1]!r} is not a count of tokens; the batch is not read")
        return
    out.keys["training.seq_len"] = (context_src, context)
    if tokens % context:
        out.unmodelled.append(
            f"{tokens_src}: {tokens} tokens are not whole sequences of {context}; the batch is not read"
        )
        return
    per_rank = f"{tokens_src} ÷ {context_src}"
    pipeline = out.keys.get("parallelism.pipeline_parallel_degree", ("", 1))[1]
    micro_src, micro = _token_key(given, token_keys[3])
    if pipeline != 1 and type(micro) is int:
        out.keys["parallelism.pipeline_parallel_microbatch_size"] = (per_rank, tokens // context)
        out.keys["training.local_batch_size"] = (f"{per_rank} × {micro_src}", tokens // context * micro)
    else:
        out.keys["training.local_batch_size"] = (per_rank, tokens // context)
    step_src, step = given.get(token_keys[2], ("", -1))
    if step_src and step != -1:
        whole = type(step) is int and step > 0 and not step % context
        if whole:
            out.keys["training.global_batch_size"] = (f"{step_src} ÷ {context_src}", step // context)
        else:
            out.unmodelled.append(f"{step_src}: {step!r} is not whole sequences of {context}; not read")


def _token_key(given: Keys, key: str) -> tuple[str, Any]:
    """A token-batch key as the entry gives it, else its TrainingConfig default, said absent in its source."""
    return given.get(key, (f"{key} (absent: default {TOKEN_DEFAULTS[key]})", TOKEN_DEFAULTS[key]))
