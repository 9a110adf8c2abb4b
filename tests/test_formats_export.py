"""planner/formats export_config: a plan written as a framework's config and read back is the plan, but for the keys
the export names, each with what the config runs and why (Format.cannot_say). A property over generated plans of
every format, then the cases issue 27 reported."""

import math

import pytest
from conftest import TINY
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from planner.catalog import load_catalog
from planner.cli import main
from planner.errors import PlanError
from planner.formats import DERIVED, FORMATS, TUNES, export_config, in_effect, read_back
from planner.formats.base import Format, get_key, set_key
from planner.memory import estimate
from planner.perf import plan_time
from planner.plan.codec import plan_from_dict, plan_to_dict
from planner.plan.config import FROZEN_WEIGHTS, INFERENCE_FRAMEWORKS, SECTIONS, TRAINING_TASKS, tensor_degrees

CATALOG = load_catalog()
# presets of every kind a config meets: dense GQA, MHA, ungated GeLU, sliding windows, MoE, latent attention, hybrid
PRESETS = (
    "llama-3.2-1b",
    "llama-3.1-8b",
    "qwen2.5-0.5b",
    "gpt2",
    "gemma-3-1b",
    "mistral-7b",
    "mixtral-8x7b",
    "qwen3-30b-a3b",
    "deepseek-v2-lite",
    "nemotron-h-8b",
)
OPTIMIZERS = (
    "adamw",
    "adamw",
    "adamw_8bit",
    "paged_adamw",
    "paged_adamw_8bit",
    "adafactor",
    "lion",
    "muon",
    "sgd",
    "sgd_momentum",
)


@st.composite
def models(draw) -> dict:
    """A preset (now and then with more layers), a parameter count, or a small custom architecture."""
    kind = draw(st.sampled_from(("preset",) * 5 + ("layers", "params", "custom")))
    if kind == "params":
        return {"params": draw(st.sampled_from(("1B", "7B")))}
    if kind == "custom":
        return {**TINY, "mlp": draw(st.sampled_from(("swiglu", "gelu"))), "num_layers": draw(st.sampled_from((2, 6)))}
    model = {"preset": draw(st.sampled_from(PRESETS))}
    return {**model, "num_layers": draw(st.sampled_from((12, 36)))} if kind == "layers" else model


@st.composite
def plans(draw, fmt: Format) -> dict:
    """A plan file the format's framework (now and then no framework: generic) runs: a recipe's plain plan, or one
    with its model's degrees and settings of every section in combinations the plan allows."""
    if not draw(st.integers(0, 3)):
        return draw(recipe_plans(fmt))
    model_data = draw(models())
    model = _built({"model": model_data}).model
    serving = fmt.framework in INFERENCE_FRAMEWORKS
    plan = {
        "model": model_data,
        "framework": fmt.framework if draw(st.integers(0, 7)) else "generic",
        "parallelism": _parallelism(draw, model, serving),
        "hardware": {"gpu": draw(st.sampled_from(("h100-sxm-80gb", "a100-sxm-80gb")))},
        "workload": {"task": "inference" if serving else draw(st.sampled_from(TRAINING_TASKS))},
    }
    (_serving if serving else _training)(draw, plan, model)
    if plan["framework"] != "generic" and not draw(st.integers(0, 9)):
        plan["framework_release"] = "2025-01-15"
    return plan


@st.composite
def recipe_plans(draw, fmt: Format) -> dict:
    """A preset's plan of the format's framework that gives its task, batch and data-parallel degree only: the
    framework's recipe sets the rest."""
    plan = {
        "model": {"preset": draw(st.sampled_from(("llama-3.2-1b", "llama-3.1-8b", "qwen2.5-7b")))},
        "framework": fmt.framework,
        "parallelism": {"data": draw(st.sampled_from((1, 2, 8)))},
    }
    if fmt.framework in INFERENCE_FRAMEWORKS:
        plan["workload"] = {
            "task": "inference",
            "inference": {"prompt_tokens": draw(st.sampled_from((1024, 7936))), "gpu_memory_utilization": 0.9},
        }
        return plan
    micro = draw(st.sampled_from((1, 2, 4)))
    plan["workload"] = {
        "task": draw(st.sampled_from(TRAINING_TASKS)),
        "micro_batch_size": micro,
        "sequence_length": draw(st.sampled_from((2048, 8192))),
        "steps": 1000,
        "global_batch_size": micro * plan["parallelism"]["data"] * draw(st.sampled_from((1, 4))),
    }
    return plan


def _parallelism(draw, model, serving: bool) -> dict:
    tensor = draw(st.sampled_from([1, 1, *tensor_degrees(model, 4)]))
    pipeline, data, context = (draw(st.sampled_from(v)) for v in ((1, 1, 1, 2, 4), (1, 2, 4, 8), (1, 1, 1, 2)))
    parallelism = {
        "tensor": tensor,
        "pipeline": pipeline,
        "data": data,
        "context": context,
        **_some(
            draw,
            {
                "zero_stage": 0 if serving else draw(st.integers(0, 3)),
                "sequence_parallel": tensor > 1 and draw(st.booleans()),
            },
        ),
    }
    if model.num_experts:
        parallelism["expert"] = draw(
            st.sampled_from([e for e in (1, 2, 4) if not math.gcd(model.num_experts, data * context) % e])
        )
    if pipeline > 1 and draw(st.booleans()):
        parallelism.update(pipeline_schedule="interleaved_1f1b", virtual_stages=2)
    elif pipeline > 1:
        parallelism["pipeline_schedule"] = draw(st.sampled_from(("1f1b", "gpipe", "zero_bubble")))
    parallelism.update(_some(draw, {"pipeline_split": draw(st.sampled_from(("auto", "even", "weighted")))}))
    return parallelism


def _serving(draw, plan: dict, model) -> None:
    batch = draw(st.sampled_from((1, 1, 8, 64)))
    plan["workload"]["inference"] = {
        "batch_size": batch,
        "prompt_tokens": draw(st.sampled_from((128, 4096))),
        "output_tokens": draw(st.sampled_from((64, 256, 256))),
        "gpu_memory_utilization": draw(st.sampled_from((0.85, 0.9, None))),
        "cuda_graphs": draw(st.booleans()),
        "prefix_caching": draw(st.booleans()),
    }
    if plan["workload"]["inference"]["gpu_memory_utilization"] is not None:
        plan["workload"]["inference"].update(
            max_num_seqs=draw(st.sampled_from((None, 256))), prefill_chunk_tokens=draw(st.sampled_from((None, 2048)))
        )
    else:
        plan["workload"]["inference"]["cuda_graphs"] = True
    plan["precision"] = {
        "compute": draw(st.sampled_from(("bf16", "fp16"))),
        "weights": draw(st.sampled_from((None, None, None, "bf16", "fp8", "int8", "int4"))),
        "kv_cache": draw(st.sampled_from(("fp8", None))),
    }
    plan["techniques"] = {
        "attention": draw(st.sampled_from(("flash", "eager"))),
        "compile": draw(st.booleans()),
        "expandable_segments": draw(st.booleans()),
    }


def _training(draw, plan: dict, model) -> None:
    wl, par = plan["workload"], plan["parallelism"]
    micro, steps = draw(st.sampled_from((1, 2, 4))), draw(st.sampled_from((1, 1, 2, 4)))
    wl.update(
        sequence_length=draw(st.sampled_from((1024, 4096))),
        micro_batch_size=micro,
        global_batch_size=micro * par["data"] * steps,
        steps=draw(st.sampled_from((None, 1000))),
    )
    if wl["task"] in ("lora", "qlora"):
        targets = draw(st.lists(st.sampled_from(("q", "k", "v", "o", "gate", "up", "down")), min_size=1, unique=True))
        wl["lora"] = {
            "rank": draw(st.sampled_from((8, 64))),
            "alpha": draw(st.sampled_from((16.0, 32.0))),
            "targets": [t for t in targets if t != "gate" or model.mlp == "swiglu"] or ["q"],
            "dropout": draw(st.sampled_from((0.0, 0.05))),
            "variant": draw(st.sampled_from(("lora", "dora"))),
        }
    plan["precision"] = _some(draw, _precision(draw, wl["task"], par))
    plan["techniques"] = _some(draw, _techniques(draw, model, par, steps == 1))
    par["flat_params"] = wl["task"] in ("lora", "qlora") and par.get("zero_stage") == 3 and draw(st.booleans())
    if par.get("zero_stage") and draw(st.booleans()):
        par.update(
            reduce_bucket_elements=draw(st.sampled_from((16_777_216, 500_000_000))),
            sub_group_elements=draw(st.sampled_from((None, 1_000_000_000))),
        )


def _precision(draw, task: str, par: dict) -> dict:
    prec = {
        "compute": draw(st.sampled_from(("bf16", "bf16", "fp16", "fp32", "fp8"))),
        "master_weights": draw(st.sampled_from(("fp32", "fp32", "none"))),
        "optimizer": draw(st.sampled_from(OPTIMIZERS)),
        "optimizer_impl": draw(st.sampled_from(("foreach", "fused", "forloop"))),
    }
    if prec["optimizer"] in ("adamw_8bit", "paged_adamw_8bit"):
        prec["optimizer_library"] = (
            "bitsandbytes"
            if prec["optimizer"] == "paged_adamw_8bit"
            else draw(st.sampled_from(("bitsandbytes", "torchao")))
        )
    if prec["compute"] == "fp8":
        prec.update(
            fp8_recipe=draw(st.sampled_from(("tensorwise", "rowwise", "mxfp8", "nvfp4"))),
            fp8_all_gather=par.get("zero_stage") == 3 and draw(st.booleans()),
        )
    if task == "qlora":
        prec["weights"] = draw(st.sampled_from(("nf4", "nf4", "int8", "int4")))
        prec["double_quant"] = prec["weights"] == "nf4" and draw(st.booleans())
    elif task == "lora":
        prec["weights"] = draw(st.sampled_from(("bf16", "fp16")))
    if draw(st.integers(0, 3)) == 0:
        prec["gradients"] = draw(st.sampled_from(("fp32", "bf16")))
    return prec


def _techniques(draw, model, par: dict, one_step: bool) -> dict:
    tech = {
        "activation_checkpointing": draw(
            st.sampled_from(("none", "full", "full", "selective", "selective_op", "every_k"))
        ),
        "checkpoint_every": draw(st.sampled_from((2, 4))),
        "attention": draw(st.sampled_from(("flash", "eager"))),
        "offload": draw(st.sampled_from(("none", "none", "optimizer", "optimizer_and_params"))),
        "loss": draw(st.sampled_from(("full", "full", "chunked", "fused"))),
        "loss_chunks": draw(st.sampled_from((8, 16))),
        "compile": draw(st.booleans()),
        "compile_scope": draw(st.sampled_from(("blocks", "loss", "blocks_and_loss"))),
        "activation_offload": not draw(st.integers(0, 5)),
        "expandable_segments": draw(st.booleans()),
    }
    if tech["offload"] == "optimizer_and_params":
        par["zero_stage"] = 3
    if model.num_experts and draw(st.booleans()):
        tech["moe_capacity_factor"] = draw(st.sampled_from((1.0, 1.25)))
    if one_step and not par.get("zero_stage") and tech["offload"] == "none":
        tech["optimizer_in_backward"] = draw(st.booleans())
    par["async_tp"] = (
        par.get("sequence_parallel", False)
        and tech["compile"]
        and tech["compile_scope"] != "loss"
        and draw(st.booleans())
    )
    return tech


def _some(draw, settings: dict) -> dict:
    """None of the settings (the framework's recipe sets them), some, or all."""
    kept = draw(st.sampled_from(("none", "some", "all")))
    return {key: value for key, value in settings.items() if kept == "all" or kept == "some" and draw(st.booleans())}


def _built(data: dict):
    try:
        return plan_from_dict(data)
    except PlanError:
        reject()


def _value(plan, key: str):
    """A key of in_effect as the plan holds it (the property's own reading, from the plan file)."""
    if key.startswith("model."):
        return getattr(plan.model, key.removeprefix("model."))
    if key == "parallelism.pipeline_layers":
        return in_effect(plan, own=False)[key]
    return get_key(plan_to_dict(plan), key, plan.framework_release if key == "framework_release" else None)


def _tunes_lost(key: str, lost: dict) -> bool:
    """Whether `key` tunes (TUNES, step by step) a key the export names, or is what the pipeline's cut derives from."""
    if key in DERIVED or key == "parallelism.pipeline_layers":
        return "parallelism.pipeline_layers" in lost
    while key in TUNES:
        key = TUNES[key][0]
        if key in lost:
            return True
    return False


def _carried(plan, back, lost: dict):
    """The plan with the read-back plan's value in every key the export does not name (nor tunes one it names):
    what the export says the config carries, laid over the plan."""
    data, theirs = plan_to_dict(plan), plan_to_dict(back)
    follows = () if plan.workload.task in FROZEN_WEIGHTS else ("precision.weights",)  # the compute dtype
    if not any(key.startswith("model.") for key in lost):
        data["model"] = theirs["model"]
    for section in SECTIONS:
        for key, value in _leaves(theirs[section], section):
            if key not in lost and not _tunes_lost(key, lost) and key not in follows:
                set_key(data, key, value)
    set_key(data, "parallelism.pipeline_microbatches", None)  # follows the batch
    return plan_from_dict(data)


def _leaves(section: dict, prefix: str):
    for key, value in section.items():
        yield from _leaves(value, f"{prefix}.{key}") if isinstance(value, dict) else [(f"{prefix}.{key}", value)]


def _footprint(plan) -> tuple:
    est = estimate(plan, CATALOG, detail=False)
    time = plan_time(plan, est.gpu)
    return (
        est.peak_allocated_bytes,
        est.peak_reserved_bytes,
        est.device_bytes,
        est.host_bytes,
        None if time is None else time.step_time_s,
    )


def check_export(plan, fmt: Format) -> None:
    """Exported, the plan reads back as itself but for the keys named, each with what the config runs and a why;
    with those keys set as planned, the read-back plan has the plan's memory and step time."""
    try:
        text, lost = export_config(plan, fmt)
    except PlanError as exc:  # refused, by the writer or for the plan its config would run
        assert exc.field.startswith(("--to", "model", "workload", "precision", "techniques", "parallelism")), exc
        return
    back = read_back(plan, fmt, text)
    assert set(lost) <= set(fmt.cannot_say), set(lost) - set(fmt.cannot_say)
    for key, (planned, runs) in lost.items():
        assert planned == _value(plan, key) != runs == _value(back, key), key
    assert _footprint(_carried(plan, back, lost)) == _footprint(plan)


@pytest.mark.parametrize("name", [name for name, fmt in FORMATS.items() if fmt.write])
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(data=st.data())
def test_export_changes_nothing_silently(name, data):
    fmt = FORMATS[name]
    check_export(_built(data.draw(plans(fmt))), fmt)


def _plan(framework: str, **sections) -> object:
    return plan_from_dict(
        {"model": {"preset": "llama-3.1-8b"}, "framework": framework, "hardware": {"count": 8}, **sections}
    )


def test_hf_trainer_pipeline_is_named_and_the_batch_kept():
    """Issue 27: pipeline 2 came back as pipeline 1, data 8 and twice the global batch, with no note."""
    plan = _plan(
        "hf_trainer",
        parallelism={"pipeline": 2, "data": 4},
        workload={"task": "finetune", "micro_batch_size": 2, "global_batch_size": 16},
    )
    text, lost = export_config(plan, FORMATS["hf_trainer"])
    assert "gradient_accumulation_steps: 1\n" in text  # 2 per GPU × 8 GPUs: the planned 16
    assert lost == {
        "parallelism.data": (4, 8),
        "parallelism.pipeline": (2, 1),
        "parallelism.pipeline_layers": ([16, 16], [32]),
    }
    assert read_back(plan, FORMATS["hf_trainer"], text).workload.global_batch_size == 16


def test_accelerate_optimizer_offload_runs_deepspeed_and_says_so():
    """Issue 27: FSDP has no optimizer-only offload; the DeepSpeed plugin that runs it is named, with what it
    changes."""
    plan = _plan("accelerate_fsdp", parallelism={"zero_stage": 3}, techniques={"offload": "optimizer"})
    text, lost = export_config(plan, FORMATS["accelerate"])
    assert "distributed_type: DEEPSPEED\n" in text
    assert lost == {
        "precision.gradients": ("fp32", "bf16"),
        "parallelism.reduce_bucket_elements": (None, 500_000_000),
        "parallelism.sub_group_elements": (None, 1_000_000_000),
        "framework": ("accelerate_fsdp", "deepspeed"),
    }
    fsdp = _plan("accelerate_fsdp", parallelism={"zero_stage": 3}, techniques={"offload": "optimizer_and_params"})
    assert export_config(fsdp, FORMATS["accelerate"])[1] == {}


def test_deepspeed_runs_the_gpus_it_cannot_pipeline_as_data_ranks():
    plan = _plan(
        "deepspeed",
        parallelism={"pipeline": 2, "data": 4, "zero_stage": 1},
        workload={"micro_batch_size": 1, "global_batch_size": 16},
    )
    text, lost = export_config(plan, FORMATS["deepspeed"])
    assert '"train_batch_size": 16,' in text and '"gradient_accumulation_steps": 2,' in text
    assert {"parallelism.pipeline": (2, 1), "parallelism.data": (4, 8)}.items() <= lost.items()


def test_megatron_carries_an_uneven_cut_and_a_parameter_count_model():
    plan = plan_from_dict({"model": {"params": "7B"}, "hardware": {"count": 8}, "parallelism": {"pipeline": 4}})
    assert plan.model.num_layers % 4  # the auto split is weighted: the embedding and the loss count as layers
    text, lost = export_config(plan, FORMATS["megatron"])
    assert "--account-for-embedding-in-pipeline-split" in text
    assert not [key for key in lost if key.startswith(("model.", "parallelism."))]


def test_a_preset_with_other_layers_names_no_checkpoint():
    plan = plan_from_dict({"model": {"preset": "llama-3.1-8b", "num_layers": 12}, "framework": "hf_trainer"})
    text, lost = export_config(plan, FORMATS["hf_trainer"])
    assert "model_name_or_path" not in text and not any(key.startswith("model.") for key in lost)
    with pytest.raises(PlanError, match=r"^model.preset: 'llama-3.1-8b' is needed, with its own architecture"):
        export_config(
            plan_from_dict({"model": {"preset": "llama-3.1-8b", "num_layers": 12}, "framework": "axolotl"}),
            FORMATS["axolotl"],
        )


def test_cli_export_prints_every_key_it_changes(tmp_path, capsys):
    path = tmp_path / "plan.yaml"
    path.write_text(
        "model: {preset: llama-3.1-8b}\nframework: hf_trainer\nhardware: {count: 8}\n"
        "parallelism: {pipeline: 2, data: 4}\nworkload: {micro_batch_size: 2, global_batch_size: 16}\n"
        "techniques: {expandable_segments: true}\n"
    )
    assert main(["export", str(path), "--to", "hf_trainer"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "hf_trainer cannot say workload.task = pretrain (pretrain reads back as finetune (from_pretrained weights; "
        "the same memory)); the config runs finetune",
        "hf_trainer cannot say techniques.expandable_segments = True (an environment variable: only a command line "
        "says it); the config runs False",
        "hf_trainer cannot say parallelism.data = 4 (the Trainer runs every GPU as a data-parallel rank); the config "
        "runs 8",
        "hf_trainer cannot say parallelism.pipeline = 2 (the Trainer has no pipeline parallelism); the config runs 1",
        "hf_trainer cannot say parallelism.pipeline_layers = [16, 16] (the Trainer has no pipeline parallelism); the "
        "config runs [32]",
    ]
