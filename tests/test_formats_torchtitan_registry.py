"""planner/formats/torchtitan_registry.py (and torchtitan.py's reading of it): torchtitan's Python config registries,
read with `ast` and never run. The registries in tests/data/configs/torchtitan/registry_*.py are written for these
tests (SOURCES.md); each plan below is worked by hand from the entry's keyword arguments."""

from pathlib import Path

import pytest

from planner.errors import PlanError
from planner.formats import detect, plan_from_config, read_config
from planner.formats import torchtitan as tt
from planner.formats.torchtitan_registry import MAX_STEPS, registry
from planner.memory import estimate

CONFIGS = Path(__file__).parent / "data" / "configs" / "torchtitan"
SHARED = Path("/work/shared/configs/torchtitan")


def text(name: str) -> str:
    return (CONFIGS / name).read_text()


def test_refactor_entry_reads_its_dataclasses():
    """llama3_8b_tp2: local_batch_size 2, seq_len 2 × SEQ (4096) = 8192, TP 2 × FSDP 4 on 8 GPUs, full AC, compile
    of the model alone, foreach AdamW; the module (llama3) from the entry's name."""
    imported = tt.read(text("registry_refactor.py"), gpus=8, entry="llama3_8b_tp2")
    assert imported.plan == {
        "framework": "torchtitan",
        "hardware": {"count": 8},
        "model": {"preset": "llama-3.1-8b"},
        "precision": {"optimizer_impl": "foreach"},
        "techniques": {"activation_checkpointing": "full", "compile": True, "compile_scope": "blocks"},
        "parallelism": {"tensor": 2, "data": 4, "zero_stage": 3},
        "workload": {"sequence_length": 8192, "steps": 100, "micro_batch_size": 2},
    }
    assert imported.unmodelled == () and imported.unknown == ()
    assert any("(model.name llama3: the entry's name llama3_8b_tp2)" in r.source for r in imported.read)


def test_derived_entry_lays_its_assignments_over_its_base():
    """llama3_8b_tp2_float8 = llama3_8b_tp2 with a float8 converter (all-gather on: FSDP over 4 ranks) and 10 steps;
    the converter's recipe is torchao's default at the refactor (tensorwise: no fp8_recipe key)."""
    imported = tt.read(text("registry_refactor.py"), gpus=8, entry="llama3_8b_tp2_float8")
    assert imported.plan["precision"] == {"optimizer_impl": "foreach", "compute": "fp8", "fp8_all_gather": True}
    assert imported.plan["workload"]["steps"] == 10
    base = tt.read(text("registry_refactor.py"), gpus=8, entry="llama3_8b_tp2")
    assert base.plan["workload"]["steps"] == 100  # the base entry is not changed by the derived one


def test_optimizer_in_backward_and_a_replaced_section():
    imported = tt.read(text("registry_refactor.py"), gpus=1, entry="llama3_8b_opt_in_bwd")
    assert imported.plan["techniques"]["optimizer_in_backward"] is True
    assert imported.plan["parallelism"] == {"data": 1, "zero_stage": 0}  # ParallelismConfig(shard 1): no TP left


def test_what_is_not_literal_is_named_never_guessed():
    imported = tt.read(text("registry_refactor.py"), gpus=8, entry="llama3_8b_computed")
    assert any(note.startswith("llama3_8b_computed line 45: if SEQ > 2048:") for note in imported.unmodelled)
    assert "training.seq_len: `len('computed') * 1024` is not a literal; not read" in imported.unmodelled
    assert imported.plan["workload"]["steps"] == 100  # the `if` is not run


def test_refusals_name_their_reason():
    registry_text = text("registry_refactor.py")
    with pytest.raises(PlanError, match="defines 7 configs: llama3_8b_tp2, .*loops_forever, loops_back; name one"):
        tt.read(registry_text)
    with pytest.raises(PlanError, match=r"--config: 'llama3_from_helper' returns _helper\('8B'\), not a config"):
        tt.read(registry_text, entry="llama3_from_helper")
    with pytest.raises(PlanError, match="calls itself through loops_forever -> loops_back -> loops_forever"):
        tt.read(registry_text, entry="loops_forever")
    with pytest.raises(PlanError, match="'nope' is not a config of the registry; its configs: llama3_8b_tp2"):
        tt.read(registry_text, entry="nope")
    with pytest.raises(PlanError, match="--entry: 'x' names a torchtitan config_registry.py"):
        read_config(text("registry_refactor.py").replace("torchtitan", "tt"), format="deepspeed", entry="x")


def test_launch_line_picks_the_entry_and_overrides_it():
    """torchtitan's ConfigManager: --module and --config pick the entry, the other --section.key arguments lie over
    it (CLI args > config_registry function defaults)."""
    line = (
        "torchrun --nproc_per_node=8 -m torchtitan.train --module llama3 --config llama3_8b_tp2_float8 "
        "--training.steps 7"
    )
    imported = tt.read(text("registry_refactor.py"), gpus=8, overrides=line)
    assert imported.plan["workload"]["steps"] == 7 and imported.plan["precision"]["compute"] == "fp8"
    assert any("model_registry('8B') (--module llama3)" in r.source for r in imported.read)
    alone = tt.read("MODULE=llama3 CONFIG=llama3_8b ./run_train.sh --training.steps 3")
    assert alone.unmodelled == (
        "CONFIG: the config_registry.py entry it names (llama3_8b) is not read here; read "
        "the registry with this command line as overrides (or the entry with --entry)",
    )
    assert "MODULE llama3" in alone.ignored


def test_token_counted_batch_converters_in_model_registry_and_policies():
    """qwen3_8b_pp (the 2026-08 shape): 2 × 4096 tokens a pipeline micro-batch of 4096-token sequences = 2
    sequences; 64 × 4096 tokens a step = a global batch of 64; TP 2 × PP 2 on 16 GPUs leaves FSDP over 4; the
    model from the aliased import of torchtitan.models.qwen3; the float8 converter's rowwise default (6348d93d);
    async TP from the compile config; FullAC."""
    imported = tt.read(text("registry_tokens.py"), gpus=16, entry="qwen3_8b_pp")
    assert imported.plan == {
        "framework": "torchtitan",
        "hardware": {"count": 16},
        "model": {"preset": "qwen3-8b"},
        "precision": {"compute": "fp8", "fp8_recipe": "rowwise", "optimizer": "adamw"},
        "techniques": {"activation_checkpointing": "full", "compile": True},
        "parallelism": {
            "tensor": 2,
            "pipeline": 2,
            "async_tp": True,
            "data": 4,
            "zero_stage": 3,
            "pipeline_schedule": "1f1b",
        },
        "workload": {"sequence_length": 4096, "steps": 50, "global_batch_size": 64, "micro_batch_size": 2},
    }
    assert imported.unmodelled == () and imported.unknown == ()
    assert "model_spec.converters[Float8LinearConverter].model_compile_enabled" in imported.ignored


def test_selective_policy_is_per_op_and_tokens_without_pipeline():
    imported = tt.read(text("registry_tokens.py"), gpus=8, entry="qwen3_8b_selective")
    assert imported.plan["techniques"]["activation_checkpointing"] == "selective_op"
    assert imported.plan["workload"]["micro_batch_size"] == 2  # 8192 tokens ÷ 4096
    assert "compute" not in imported.plan.get("precision", {})  # model_spec replaced without the converter


def test_llama3_8b_registry_plans_as_the_toml():
    """The same run as llama3_8b.toml written as a registry entry: the same plan, 43.50 GiB on 8 × H100
    (read as a command line before this reader: JobConfig defaults, 94.79 GiB)."""
    plans = [
        plan_from_config(read_config(text(name), gpus=8), gpu="h100-sxm-80gb")
        for name in ("llama3_8b.toml", "registry_llama3_8b.py")
    ]
    assert plans[0].workload == plans[1].workload and plans[0].techniques == plans[1].techniques
    assert plans[0].parallelism == plans[1].parallelism and plans[0].model == plans[1].model
    device = [estimate(plan).device_bytes for plan in plans]
    assert device[0] == device[1] and round(device[1] / 2**30, 2) == 43.50
    assert detect(text("registry_llama3_8b.py")).name == "torchtitan"


def test_nothing_is_run_and_runaways_are_refused():
    assert registry("import os\nos.system('x')\n") is None  # no entry: not a registry
    doubling = "from torchtitan.trainer import Trainer\ndef f0() -> Trainer.Config:\n    return Trainer.Config()\n"
    for i in range(1, 40):
        doubling += f"def f{i}() -> Trainer.Config:\n    c = f{i - 1}()\n    c.a{i} = f{i - 1}()\n    return c\n"
    found = registry(doubling)
    assert found.refused["f39"] == f"evaluating it takes more than {MAX_STEPS:,} steps"
    assert registry("def f() -> Config:\n    return " + "(" * 150 + "1" + ")" * 150) is not None


@pytest.mark.corpus
@pytest.mark.skipif(not sorted(SHARED.glob("*.py")), reason="the shared config corpus holds no config registry")
def test_every_shared_registry_reads_or_refuses_with_a_reason():
    for path in sorted(SHARED.glob("*.py")):
        found = registry(path.read_text())
        assert found is not None, path.name
        for name in found.names():
            try:
                tt.read(path.read_text(), entry=name, gpus=8)
            except PlanError as error:
                assert error.rule, (path.name, name)


def test_a_flavor_not_written_out_reads_no_model():
    """model_registry(FLAVOR) with FLAVOR from a helper: no model is read (not JobConfig's default debug model)."""
    source = (
        "from torchtitan.trainer import Trainer\nfrom . import model_registry\n\n\n"
        "def llama3_x() -> Trainer.Config:\n    return Trainer.Config(model_spec=model_registry(pick()))\n"
    )
    imported = tt.read(source, gpus=8)
    assert "model" not in imported.plan and imported.model_name == ""
    assert imported.unmodelled == (
        "model_spec=model_registry(pick(...)): the flavor is not a literal; the model is not read",
    )


BARE = """from torchtitan.trainer import Trainer
from . import model_registry


def llama3_bare() -> Trainer.Config:
    return Trainer.Config(model_spec=model_registry("8B"))


def llama3_tokens() -> Trainer.Config:
    return Trainer.Config(
        model_spec=model_registry("8B", converters=[Float8LinearConverter.Config()]),
        training=TrainingConfig(max_context_length=4096),
        parallelism=ParallelismConfig(pipeline_parallel_degree=2),
    )
"""


def _leaves(tree: dict, prefix: str = ""):
    for key, value in tree.items():
        yield from _leaves(value, f"{prefix}{key}.") if isinstance(value, dict) else [f"{prefix}{key}"]


@pytest.mark.parametrize("name", ["registry_refactor.py", "registry_tokens.py", "registry_llama3_8b.py", "BARE"])
def test_every_value_a_plan_takes_is_read_from_somewhere(name):
    """Issue 31 item 2, never a silent default: each plan key an entry's import sets has a read naming its source
    (the GPU count is the caller's)."""
    source = BARE if name == "BARE" else text(name)
    for entry in registry(source).entries:
        if entry == "llama3_from_helper":  # refused: returns a helper's result
            continue
        imported = read_config(source, gpus=16, entry=entry)
        said = {r.plan_key for r in imported.read}
        assert [k for k in _leaves(imported.plan) if k not in said | {"framework", "hardware.count"}] == [], entry


def test_an_entry_that_says_nothing_but_its_model_takes_every_default_aloud():
    """model_spec alone: the sequence (seq_len 2048), the micro-batch (local_batch_size 8), FSDP over every GPU
    (data_parallel_shard_degree -1) and checkpointing (mode 'selective', option '2': every 2nd layer) are JobConfig's
    defaults, and the task torchtitan's only one; each read says it is absent."""
    imported = read_config(BARE, gpus=8, entry="llama3_bare")
    assert imported.plan["workload"] == {"sequence_length": 2048, "micro_batch_size": 8}
    assert imported.plan["techniques"] == {"activation_checkpointing": "every_k", "checkpoint_every": 2}
    for read in imported.read:
        if read.plan_key != "model.preset":
            assert "(absent: " in read.source, read


def test_token_batch_and_float8_defaults_are_said():
    """max_context_length 4096 given; num_tokens_per_microbatch_per_dp_rank absent (16,384): 4 sequences a
    micro-batch; under a pipeline num_pp_microbatches absent (1); the float8 converter's recipe absent (rowwise)."""
    imported = read_config(BARE, gpus=8, entry="llama3_tokens")
    sources = {r.plan_key: r.source for r in imported.read}
    assert imported.plan["workload"]["micro_batch_size"] == 4 and imported.plan["precision"]["fp8_recipe"] == "rowwise"
    assert sources["workload.micro_batch_size"] == (
        "training.num_tokens_per_microbatch_per_dp_rank (absent: default 16384) ÷ training.max_context_length"
    )
    assert "parallelism.num_pp_microbatches (absent: default 1)" in sources["parallelism.pipeline_microbatches"]
    assert sources["precision.fp8_recipe"].endswith("recipe_name (absent: default rowwise)")
    assert sources["workload.sequence_length"] == "training.max_context_length"
