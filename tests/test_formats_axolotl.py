"""planner/formats/axolotl.py: Axolotl's shipped example configs read as plans, errors, detect and the round trip."""

import itertools
from pathlib import Path

import pytest

from planner.codec import plan_from_dict
from planner.errors import PlanError
from planner.formats import detect, overlay, round_trip
from planner.formats.axolotl import FORMAT, read, write

DATA = Path(__file__).parent / "data" / "configs" / "axolotl"
ALL = ["q", "k", "v", "o", "gate", "up", "down"]
NO_GPUS = "gradient_accumulation_steps: the global batch needs the GPU count (give gpus)"


def _read(name, gpus=None):
    return read((DATA / name).read_text(), gpus=gpus)


def test_lora_8bit_is_qlora_on_int8():
    imported = _read("lora-8b.yml")
    assert imported.model_name == "NousResearch/Meta-Llama-3-8B"  # Llama 3 (not 3.1): no preset
    assert "model" not in imported.plan
    assert imported.plan["workload"] == {"task": "qlora", "lora": {"rank": 32, "alpha": 16, "dropout": 0.05,
                                                                   "targets": ALL},
                                         "sequence_length": 4096, "micro_batch_size": 2}
    assert imported.plan["precision"] == {"weights": "int8", "compute": "bf16", "optimizer": "adamw_8bit",
                                          "optimizer_library": "bitsandbytes"}
    assert imported.plan["techniques"] == {"activation_checkpointing": "full", "attention": "flash"}
    assert imported.unmodelled == (NO_GPUS, "lora_modules_to_save: these modules (often embed_tokens and lm_head) "
                                            "train fully: gradients and optimizer states for them too")
    assert imported.unknown == () and "base_model" not in imported.ignored


def test_qlora_nf4_double_quant_paged():
    imported = _read("qlora.yml", gpus=1)
    assert imported.plan["precision"] == {"weights": "nf4", "double_quant": True, "compute": "bf16",
                                          "optimizer": "paged_adamw"}
    assert imported.plan["workload"]["global_batch_size"] == 8
    assert imported.plan["hardware"] == {"count": 1}
    assert imported.unmodelled == () and imported.unknown == ()


def test_full_fine_tune_names_llama_3_1():
    imported = _read("fft-8b.yaml")
    assert imported.plan["model"] == {"preset": "llama-3.1-8b"}  # NousResearch/Meta-Llama-3.1-8B
    assert imported.plan["workload"] == {"task": "finetune", "sequence_length": 8192, "micro_batch_size": 1}
    assert imported.plan["precision"] == {"compute": "bf16", "optimizer": "paged_adamw_8bit",
                                          "optimizer_library": "bitsandbytes"}
    plan_from_dict(overlay({"hardware": {"gpu": "h100-sxm-80gb"}}, imported.plan))  # it plans


def test_liger_fsdp():
    imported = _read("fft-8b-liger-fsdp.yaml", gpus=8)
    assert imported.plan["techniques"] == {"activation_checkpointing": "full", "attention": "flash", "loss": "fused",
                                           "offload": "optimizer_and_params"}
    assert imported.plan["parallelism"] == {"zero_stage": 3}
    assert imported.plan["workload"]["global_batch_size"] == 64
    assert imported.unmodelled == ("liger_rope: Liger's fused RoPE saves fewer intermediates",
                                   "liger_rms_norm: Liger's fused RMSNorm saves fewer intermediates",
                                   "liger_glu_activation: Liger's fused SwiGLU saves fewer intermediates")
    assert "fsdp_config.sync_module_states" in imported.ignored and imported.unknown == ()
    assert {k.source.split(" ")[0] for k in imported.read} >= {"plugins", "fsdp_config", "gradient_accumulation_steps"}


def test_qlora_fsdp_70b():
    imported = _read("qlora-fsdp-70b.yaml", gpus=8)
    assert imported.model_name == "casperhansen/llama-3-70b-fp16"
    assert imported.plan["workload"]["sequence_length"] == 512
    assert imported.plan["parallelism"] == {"zero_stage": 3}
    assert imported.unmodelled[-1].startswith("sample_packing: false: each batch is padded")


def test_deepspeed_file_name_and_defaults():
    text = (DATA / "fft-8b.yaml").read_text() + "deepspeed: deepspeed_configs/zero3_bf16_cpuoffload_all.json\n"
    text = text.replace("gradient_checkpointing: true\n", "").replace("optimizer: paged_adamw_8bit\n", "")
    imported = read(text)
    assert imported.plan["parallelism"] == {"zero_stage": 3}
    assert imported.plan["techniques"]["offload"] == "optimizer_and_params"
    assert imported.plan["techniques"]["activation_checkpointing"] == "none"  # schema default false
    assert imported.plan["precision"] == {"compute": "bf16", "optimizer": "adamw", "optimizer_impl": "fused"}
    assert imported.unmodelled[0] == ("deepspeed: deepspeed_configs/zero3_bf16_cpuoffload_all.json: the stage is "
                                       "read from the file's name, not the file (its buckets and precision are the "
                                       "DeepSpeed defaults)")


@pytest.mark.parametrize("edit, message", [
    (("adapter: qlora", "adapter: prefix"), "adapter: 'prefix' must be lora or qlora (or absent: full fine-tuning)"),
    (("load_in_4bit: true", "load_in_4bit: false"), "adapter: 'qlora' needs load_in_4bit: true"),
    (("lora_r: 32", "lora_r: -1"), "lora_r: -1 must be an integer ≥ 1"),
    (("gradient_checkpointing: true", "gradient_checkpointing: sometimes"),
     "gradient_checkpointing: 'sometimes' must be true, false, offload or offload_disk"),
])
def test_bad_values_name_the_key(edit, message):
    with pytest.raises(PlanError) as err:
        read((DATA / "qlora.yml").read_text().replace(*edit))
    assert str(err.value) == message


def test_detect():
    for path in DATA.glob("*.y*ml"):
        assert FORMAT.detect(path.read_text()), path
        assert detect(path.read_text()) is FORMAT
    for path in (DATA.parent / "torchtune").glob("*.yaml"):
        assert not FORMAT.detect(path.read_text()), path
    assert not FORMAT.detect("base_model: x") and not FORMAT.detect(": [")
    with pytest.raises(PlanError, match=r"^config: is not valid YAML"):
        read("a: [")


GRID = [dict(task=t, gpus=g, zero=z, opt=o, loss=loss, ckpt=c)
        for t, g, z, o, loss, c in itertools.product(("finetune", "lora", "qlora"), (1, 4), (0, 1, 2, 3),
                                                     ("adamw", "paged_adamw_8bit", "adamw_8bit", "paged_adamw"),
                                                     ("full", "fused"), ("none", "full"))]


@pytest.mark.parametrize("case", GRID, ids=lambda c: "-".join(map(str, c.values())))
def test_round_trip(case):
    data = {"framework": "axolotl", "model": {"preset": "qwen2.5-7b"},
            "workload": {"task": case["task"], "sequence_length": 2048, "micro_batch_size": 2, "steps": 30,
                         "global_batch_size": 8 * case["gpus"],
                         "lora": {"rank": 16, "alpha": 32, "targets": ["q", "k", "down"], "dropout": 0.1}},
            "precision": {"optimizer": case["opt"]}, "hardware": {"count": case["gpus"]},
            "techniques": {"activation_checkpointing": case["ckpt"], "loss": case["loss"], "compile": True,
                           "attention": "eager", "activation_offload": True},
            "parallelism": {"zero_stage": case["zero"]}}
    if case["task"] not in ("lora", "qlora"):
        del data["workload"]["lora"]
    assert round_trip(plan_from_dict(data), FORMAT) == {}


def test_round_trip_int8_dora_fsdp_offload():
    plan = plan_from_dict({"framework": "axolotl", "model": {"preset": "llama-3.1-70b"},
                           "workload": {"task": "qlora", "lora": {"variant": "dora"}}, "hardware": {"count": 8},
                           "precision": {"weights": "int8", "compute": "fp16"},
                           "techniques": {"offload": "optimizer_and_params"}, "parallelism": {"zero_stage": 3}})
    assert round_trip(plan, FORMAT) == {}


def test_write_refuses_what_it_cannot_say():
    plan = plan_from_dict({"framework": "axolotl", "model": {"preset": "llama-3.1-8b"},
                           "techniques": {"loss": "chunked"}})
    with pytest.raises(PlanError) as err:
        write(plan)
    assert str(err.value) == ("techniques.loss: 'chunked' cannot be said: Axolotl's losses are HF's (full) or fused "
                              "(Liger, Cut Cross Entropy)")
