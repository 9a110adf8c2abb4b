"""planner/formats/llamafactory.py: LLaMA-Factory training YAMLs (the project's own small configs, and the held-out
corpus where it is present) read as plans, with every default named; what the plan cannot describe refused."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from planner.catalog import load_catalog
from planner.errors import PlanError
from planner.formats import FORMATS, detect, export_config, formats_for, plan_from_config, read_config
from planner.formats.llamafactory import FORMAT, RL_WHY, RM_WHY, read
from planner.memory import estimate

DATA = Path(__file__).parent / "data" / "configs" / "llamafactory"
CORPUS = Path("/work/shared/configs/unsupported/llamafactory")
ALL = ["q", "k", "v", "o", "gate", "up", "down"]


def _read(name, **kwargs):
    return read((DATA / name).read_text(), **kwargs)


def _sources(imported):
    return {k.plan_key: k.source for k in imported.read}


def test_qlora_keys_spelled_out():
    imported = _read("qlora_qwen3.yaml", gpus=4)
    assert imported.plan == {
        "framework": "hf_trainer",
        "hardware": {"count": 4},
        "model": {"preset": "qwen3-4b"},
        # quantization_bit 4 with the default method bnb: nf4, double_quantization as given
        "precision": {"compute": "bf16", "double_quant": False, "weights": "nf4"},
        # checkpointing on by default; fa2 a fused kernel; Liger's fused linear cross-entropy for sft
        "techniques": {"activation_checkpointing": "full", "attention": "flash", "loss": "fused"},
        "workload": {
            "task": "qlora",
            "lora": {"alpha": 32, "dropout": 0.05, "rank": 16, "targets": ["q", "v"]},
            "micro_batch_size": 2,
            "sequence_length": 4096,
            "steps": 500,
            "global_batch_size": 2 * 4 * 4,
        },
    }  # per-device 2 × accumulation 4 × 4 GPUs
    assert imported.unmodelled == () and imported.unknown == ()
    assert "packing" in imported.ignored  # packing: true, the plan's every-sequence-at-cutoff_len
    assert _sources(imported)["techniques.activation_checkpointing"] == "disable_gradient_checkpointing (absent: false)"


def test_every_default_is_named():
    imported = _read("lora_defaults.yaml", gpus=2)
    assert imported.plan["workload"] == {
        "task": "lora",
        "lora": {"rank": 8, "alpha": 16, "dropout": 0.0, "targets": ALL},
        "sequence_length": 2048,
        "micro_batch_size": 8,
    }
    assert imported.plan["precision"] == {"compute": "bf16", "weights": "bf16"}
    sources = _sources(imported)
    assert sources == {
        "model.preset": "model_name_or_path",
        "workload.task": "finetuning_type",
        "workload.lora.rank": "lora_rank (absent: 8)",
        "workload.lora.alpha": "lora_alpha (absent: lora_rank × 2)",
        "workload.lora.dropout": "lora_dropout (absent: 0)",
        "workload.lora.targets": "lora_target (absent: all)",
        "precision.compute": "bf16 (absent: the model loads in its checkpoint's dtype, planned as bf16)",
        "precision.weights": "bf16/fp16 (the frozen base loads in compute_dtype)",
        "techniques.activation_checkpointing": "disable_gradient_checkpointing (absent: false)",
        "techniques.attention": "flash_attn (absent: auto, transformers' sdpa)",
        "workload.sequence_length": "cutoff_len (absent: 2048)",
        "hardware.count": "gpus",
        "workload.micro_batch_size": "(TrainingArguments' default per_device_train_batch_size)",
    }
    assert imported.unmodelled[1].startswith("packing (absent: off for sft): each batch is padded")


def test_finetuning_type_absent_is_lora():
    text = (DATA / "lora_defaults.yaml").read_text().replace("finetuning_type: lora\n", "")
    imported = read(text)
    assert imported.plan["workload"]["task"] == "lora"
    assert _sources(imported)["workload.task"] == "finetuning_type (absent: the default lora)"


def test_full_zero3_offload_by_the_examples_file_name():
    imported = _read("full_zero3_offload.yaml", gpus=8)
    assert imported.plan == {
        "framework": "deepspeed",
        "hardware": {"count": 8},
        "model": {"preset": "llama-3.1-8b"},
        "parallelism": {"zero_stage": 3},
        "precision": {"compute": "fp16", "optimizer": "adamw", "optimizer_impl": "foreach"},
        "techniques": {"activation_checkpointing": "none", "attention": "flash", "offload": "optimizer_and_params"},
        # stage pt packs by default: no padding note
        "workload": {"task": "finetune", "micro_batch_size": 4, "sequence_length": 1024, "global_batch_size": 64},
    }
    assert imported.unmodelled[0].startswith("deepspeed: examples/deepspeed/ds_z3_offload_config.json is not beside")


def test_deepspeed_file_beside_the_config_is_read():
    """A ZeRO-2 JSON whose name says nothing: its stage and optimizer offload come from the file."""
    ds = {
        "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}, "reduce_bucket_size": 2e8},
        "bf16": {"enabled": "auto"},
        "train_micro_batch_size_per_gpu": "auto",
    }
    text = (
        (DATA / "full_zero3_offload.yaml")
        .read_text()
        .replace("examples/deepspeed/ds_z3_offload_config.json", "my_ds.json")
    )
    files = {"my_ds.json": json.dumps(ds)}
    imported = read_config(text, gpus=8, files=files.get)
    assert imported.format == "llamafactory"
    assert imported.plan["parallelism"] == {"zero_stage": 2, "reduce_bucket_elements": 200_000_000}
    assert imported.plan["techniques"]["offload"] == "optimizer"
    assert not any("HF integration" in note for note in imported.unmodelled)  # 'auto': filled from the YAML
    with pytest.raises(PlanError) as err:
        read(text, files=lambda name: None)
    assert str(err.value).startswith("deepspeed: 'my_ds.json' is not beside the config, and its name is none of")


def test_pure_bf16_full_has_no_fp32_master():
    text = (DATA / "full_zero3_offload.yaml").read_text()
    text = text.replace("fp16: true\n", "pure_bf16: true\n").replace(
        "deepspeed: examples/deepspeed/ds_z3_offload_config.json\n", ""
    )
    assert read(text).plan["precision"] == {
        "compute": "bf16",
        "master_weights": "none",
        "optimizer": "adamw",
        "optimizer_impl": "foreach",
    }


@pytest.mark.parametrize(
    "edit, message",
    [
        (("stage: sft", "stage: kto"), f"stage: kto: {RL_WHY}"),
        (("stage: sft", "stage: ppo"), f"stage: ppo: {RL_WHY}"),
        (("stage: sft", "stage: rm"), f"stage: rm: {RM_WHY}"),
        (("stage: sft", "stage: grpo"), "stage: 'grpo' is not one of: sft, pt, dpo, kto, ppo, rm"),
        (
            ("finetuning_type: lora", "finetuning_type: oft"),
            "finetuning_type: oft: OFT's orthogonal adapters; the plan trains every weight (full) or LoRA adapters",
        ),
        (
            ("quantization_bit: 4", "quantization_bit: 2"),
            "quantization_bit: 2 with quantization_method bnb: the plan's "
            "quantized weights are 4-bit (nf4) or 8-bit (int8)",
        ),
        (
            ("finetuning_type: lora", "finetuning_type: full"),
            "quantization_bit: 4 needs finetuning_type lora: a quantized model trains adapters only (model/adapter.py)",
        ),
        (
            ("bf16: true", "bf16: true\nuse_galore: true"),
            "use_galore: True: GaLore projects the gradients and optimizer "
            "states to rank galore_rank: no plan optimizer says it",
        ),
        (
            ("bf16: true", "bf16: true\npipeline_model_parallel_size: 4"),
            "pipeline_model_parallel_size: 4: a Megatron-Core run (mcore_adapter, USE_MCA=1): write it as a megatron "
            "command line",
        ),
        (("flash_attn: fa2", "flash_attn: fa9"), "flash_attn: 'fa9' is not one of: auto, disabled, sdpa, fa2, fa3"),
    ],
)
def test_refusals_name_the_key_and_why(edit, message):
    with pytest.raises(PlanError) as err:
        read((DATA / "qlora_qwen3.yaml").read_text().replace(*edit))
    assert str(err.value) == message


def test_freeze_is_refused():
    with pytest.raises(PlanError) as err:
        _read("freeze.yaml")
    assert str(err.value) == (
        "finetuning_type: freeze: trains the last freeze_trainable_layers layers (default 2) "
        "in full and freezes the rest; the plan trains every weight (full) or LoRA adapters"
    )


def test_eight_bit_and_other_methods():
    text = (DATA / "qlora_qwen3.yaml").read_text().replace("quantization_bit: 4", "quantization_bit: 8")
    assert read(text).plan["precision"]["weights"] == "int8"
    hqq = read(text.replace("quantization_bit: 8", "quantization_bit: 4\nquantization_method: hqq"))
    assert hqq.plan["precision"] == {"weights": "nf4", "compute": "bf16"}
    assert hqq.unmodelled[0] == (
        "quantization_method: hqq's 4-bit weights are planned as bitsandbytes' nf4 (the same bits, other scales)"
    )


def test_detected_before_hf_trainer_and_read_only():
    for path in DATA.glob("*.yaml"):
        assert detect(path.read_text()) is FORMAT, path
        assert not FORMATS["hf_trainer"].detect(path.read_text()), path
    plan = plan_from_config(_read("qlora_qwen3.yaml", gpus=1))
    assert FORMAT not in formats_for(plan)
    with pytest.raises(PlanError) as err:
        export_config(plan, FORMAT)
    assert str(err.value) == "--to: 'llamafactory' is read only: its configs are imported, not exported"
    with pytest.raises(PlanError) as err:
        FORMAT.written(plan)  # the writer's own guard, for a caller that skips export_config's checks
    assert str(err.value) == "--to: 'llamafactory' is read only: its configs are imported, not exported"


def test_qwen3_4b_qlora_plans_as_qlora():
    """Issue 31: the 4-bit LoRA config was read as TrainingArguments, a full fine-tune at 1,024 tokens (80.5 GiB on
    one H100, not fitting). As QLoRA at cutoff_len 4,096 (hand check: the nf4 base of Qwen3-4B is its 3.63B
    projection parameters at 4.5 bits with double quantization off, 2.04 GB, + 389M others × 2 B)."""
    est = estimate(plan_from_config(_read("qlora_qwen3.yaml", gpus=1), gpu="h100-sxm-80gb"), load_catalog())
    base = next(i for i in est.items if i.label == "Weights (frozen base)")
    assert base.bytes == 3_633_325_056 // 2 + 3_633_325_056 // 64 * 4 + 389_143_040 * 2
    assert est.fits


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.is_dir(), reason="the held-out LLaMA-Factory corpus is not on this machine")
@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.y*ml")) if CORPUS.is_dir() else [], ids=lambda p: p.name)
def test_corpus_plans_or_refuses_with_a_reason(path):
    try:
        plan_from_config(read_config(path.read_text(), gpus=8), gpu="h100-sxm-80gb")
    except PlanError as exc:
        field, _, why = str(exc).partition(": ")
        assert field and len(why) > 20, str(exc)


def test_dpo_stage_reads_as_preference():
    """finetuning_args.py stage dpo (pref_loss sigmoid: DPO, the LoRA base as reference)."""
    text = (DATA / "qlora_qwen3.yaml").read_text().replace("stage: sft", "stage: dpo")
    wl = plan_from_config(read(text), model={"preset": "qwen3-4b"}).workload
    assert wl.objective == "preference" and wl.preference.reference == "adapters_disabled"


def test_dpo_stage_takes_its_log_probs_over_fp32_logits():
    """CustomDPOTrainer casts the logits to fp32 and takes one log_softmax over them (get_batch_logps), unlike TRL's
    row-by-row selective_log_softmax: the plan says so, and holds 8 B a logit where TRL's holds 4."""
    text = (DATA / "qlora_qwen3.yaml").read_text().replace("stage: sft", "stage: dpo")
    text = text.replace("enable_liger_kernel: true", "enable_liger_kernel: false")  # Liger's fused loss aside
    plan = plan_from_config(read(text), model={"preset": "qwen3-4b"})
    assert plan.workload.preference.log_probs == "upcast"
    trl = replace(
        plan, workload=replace(plan.workload, preference=replace(plan.workload.preference, log_probs="selective"))
    )
    logits = [
        max(i.bytes for ph in estimate(p).stages[0].phases for i in ph.items if i.name == "logits_loss")
        for p in (plan, trl)
    ]
    # the peak of each: upcast's backward (12 B a logit), TRL's forward under LoRA autocast (2 + 4 fp32 log-softmax)
    assert logits[0] * 6 == logits[1] * 12
