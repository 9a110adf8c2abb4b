"""planner/formats/axolotl.py: configs (tests/data/configs/axolotl) read as plans, errors, detect, round trip."""

import copy
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import PlanError
from planner.formats import FORMATS, detect, overlay, round_trip
from planner.formats.axolotl import FORMAT, OPTIMIZERS, read, write
from planner.formats.hf_trainer import OPTIMS
from planner.plan.codec import plan_from_dict

DATA = Path(__file__).parent / "data" / "configs" / "axolotl"
ALL = ["q", "k", "v", "o", "gate", "up", "down"]
NO_GPUS = "gradient_accumulation_steps: the global batch needs the GPU count (give gpus)"


def _read(name, gpus=None):
    return read((DATA / name).read_text(), gpus=gpus)


def test_lora_8bit_is_qlora_on_int8():
    imported = _read("lora_int8_8b.yaml")
    # Llama 3's architecture is Llama 3.1's (models.yaml same_architecture)
    assert imported.model_name == "" and imported.plan["model"] == {"preset": "llama-3.1-8b"}
    assert imported.plan["workload"] == {
        "task": "qlora",
        "lora": {"rank": 32, "alpha": 16, "dropout": 0.05, "targets": ALL},
        "sequence_length": 4096,
        "micro_batch_size": 2,
    }
    assert imported.plan["precision"] == {
        "weights": "int8",
        "compute": "bf16",
        "optimizer": "adamw_8bit",
        "optimizer_library": "bitsandbytes",
    }
    assert imported.plan["techniques"] == {"activation_checkpointing": "full", "attention": "flash"}
    assert imported.unmodelled == (
        NO_GPUS,
        "lora_modules_to_save: these modules (often embed_tokens and lm_head) "
        "train fully: gradients and optimizer states for them too",
    )
    assert imported.unknown == () and "base_model" not in imported.ignored


def test_qlora_nf4_double_quant_paged():
    imported = _read("qlora_8b.yaml", gpus=1)
    assert imported.plan["precision"] == {
        "weights": "nf4",
        "double_quant": True,
        "compute": "bf16",
        "optimizer": "paged_adamw",
    }
    assert imported.plan["workload"]["global_batch_size"] == 8
    assert imported.plan["hardware"] == {"count": 1}
    assert imported.unmodelled == () and imported.unknown == ()


def test_full_fine_tune_names_llama_3_1():
    imported = _read("full_8b.yaml")
    assert imported.plan["model"] == {"preset": "llama-3.1-8b"}  # NousResearch/Meta-Llama-3.1-8B
    assert imported.plan["workload"] == {"task": "finetune", "sequence_length": 8192, "micro_batch_size": 1}
    assert imported.plan["precision"] == {
        "compute": "bf16",
        "optimizer": "paged_adamw_8bit",
        "optimizer_library": "bitsandbytes",
    }
    plan_from_dict(overlay({"hardware": {"gpu": "h100-sxm-80gb"}}, imported.plan))  # it plans


def test_liger_fsdp():
    imported = _read("full_8b_liger_fsdp.yaml", gpus=8)
    assert imported.plan["techniques"] == {
        "activation_checkpointing": "full",
        "attention": "flash",
        "loss": "fused",
        "offload": "optimizer_and_params",
    }
    assert imported.plan["parallelism"] == {"zero_stage": 3}
    assert imported.plan["workload"]["global_batch_size"] == 64
    assert imported.unmodelled == (
        "liger_rope: Liger's fused RoPE saves fewer intermediates",
        "liger_rms_norm: Liger's fused RMSNorm saves fewer intermediates",
        "liger_glu_activation: Liger's fused SwiGLU saves fewer intermediates",
    )
    assert "fsdp_config.sync_module_states" in imported.ignored and imported.unknown == ()
    assert {k.source.split(" ")[0] for k in imported.read} >= {"plugins", "fsdp_config", "gradient_accumulation_steps"}


def test_qlora_fsdp_70b():
    imported = _read("qlora_fsdp_70b.yaml", gpus=8)
    assert imported.model_name == "" and imported.plan["model"] == {"preset": "llama-3.1-70b"}
    assert imported.plan["workload"]["sequence_length"] == 512
    assert imported.plan["parallelism"] == {"zero_stage": 3}
    assert imported.unmodelled[-1].startswith("sample_packing: false: each batch is padded")


def test_deepspeed_file_name_and_defaults():
    text = (DATA / "full_8b.yaml").read_text() + "deepspeed: deepspeed_configs/zero3_bf16_cpuoffload_all.json\n"
    text = text.replace("gradient_checkpointing: true\n", "").replace("optimizer: paged_adamw_8bit\n", "")
    imported = read(text)
    assert imported.plan["parallelism"] == {"zero_stage": 3}
    assert imported.plan["techniques"]["offload"] == "optimizer_and_params"
    assert imported.plan["techniques"]["activation_checkpointing"] == "none"  # schema default false
    assert imported.plan["precision"] == {"compute": "bf16", "optimizer": "adamw", "optimizer_impl": "fused"}
    assert imported.unmodelled[0] == (
        "deepspeed: deepspeed_configs/zero3_bf16_cpuoffload_all.json is not beside the config: its stage and "
        "offload are axolotl's zero3_bf16_cpuoffload_all.json's"
    )


ZERO2_CPU = '{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}, "bf16": {"enabled": "auto"}}'


def test_deepspeed_file_beside_the_config_is_read_not_its_name():
    """A file named zero3 whose contents say ZeRO-2 with the optimizer on the CPU: the contents win; absent, axolotl's
    own zero2.json (which offloads the optimizer) and a name it does not ship say where each came from."""
    text = (DATA / "full_8b.yaml").read_text()
    files = {"ds/zero3.json": ZERO2_CPU}.get
    imported = read(text + "deepspeed: ds/zero3.json\n", files=files)
    assert imported.plan["parallelism"] == {"zero_stage": 2}
    assert imported.plan["techniques"]["offload"] == "optimizer"
    assert [r.source for r in imported.read if r.plan_key == "parallelism.zero_stage"] == [
        "deepspeed: zero_optimization.stage"
    ]
    shipped = read(text + "deepspeed: deepspeed_configs/zero2.json\n", files=files)
    assert (shipped.plan["parallelism"], shipped.plan["techniques"]["offload"]) == ({"zero_stage": 2}, "optimizer")
    named = read(text + "deepspeed: my/zero3_custom.json\n", files=files)
    assert named.plan["parallelism"] == {"zero_stage": 3}
    assert (
        "deepspeed: my/zero3_custom.json: not beside the config: the stage was taken from its name"
        in (named.unmodelled[0])
    )


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            ("adapter: qlora", "adapter: prefix"),
            "adapter: 'prefix' must be lora or qlora (or absent: full fine-tuning)",
        ),
        (("load_in_4bit: true", "load_in_4bit: false"), "adapter: 'qlora' needs load_in_4bit: true"),
        (("lora_r: 32", "lora_r: -1"), "lora_r: -1 must be an integer ≥ 1"),
        (("lora_target_linear: true", "lora_target_modules: 3"), "lora_target_modules: 3 must be a list of text"),
        (("optimizer: paged_adamw_32bit", "optimizer: [adamw]"), "optimizer: ['adamw'] must be text"),
        (
            ("adapter: qlora", "adapter:"),
            "load_in_4bit: True needs an adapter (lora or qlora): a quantized base trains adapters only",
        ),
        (
            ("gradient_checkpointing: true", "gradient_checkpointing: sometimes"),
            "gradient_checkpointing: 'sometimes' must be true, false, offload or offload_disk",
        ),
    ],
)
def test_bad_values_name_the_key(edit, message):
    with pytest.raises(PlanError) as err:
        read((DATA / "qlora_8b.yaml").read_text().replace(*edit))
    assert str(err.value) == message


def test_detect():
    for path in DATA.glob("*.y*ml"):
        assert FORMAT.detect(path.read_text()), path
        assert detect(path.read_text()) is FORMAT
    for path in (DATA.parent / "torchtune").glob("*.yaml"):
        assert not FORMAT.detect(path.read_text()), path
    assert not FORMAT.detect("base_model: x") and not FORMAT.detect(": [")
    with pytest.raises(PlanError) as err:
        read("a: [")
    assert str(err.value) == (
        "config: not valid YAML at line 1, column 5 (expected the node content, but found '<stream end>')"
    )
    with pytest.raises(PlanError) as err:
        read("a: 1\na: 2\n")
    assert str(err.value) == "config a: duplicated key (line 2)"  # planner/loader.py refuses it


# Every combination of these axes comes back as it went (a property over the 384 combinations, drawn by
# hypothesis)
AXES = {
    "task": ("finetune", "lora", "qlora"),
    "gpus": (1, 4),
    "zero": (0, 1, 2, 3),
    "opt": ("adamw", "paged_adamw_8bit", "adamw_8bit", "paged_adamw"),
    "loss": ("full", "fused"),
    "ckpt": ("none", "full"),
}


@settings(max_examples=60)
@given(case=st.fixed_dictionaries({name: st.sampled_from(values) for name, values in AXES.items()}))
def test_round_trip(case):
    data = {
        "framework": "axolotl",
        "model": {"preset": "qwen2.5-7b"},
        "workload": {
            "task": case["task"],
            "sequence_length": 2048,
            "micro_batch_size": 2,
            "steps": 30,
            "global_batch_size": 8 * case["gpus"],
            "lora": {"rank": 16, "alpha": 32, "targets": ["q", "k", "down"], "dropout": 0.1},
        },
        "precision": {"optimizer": case["opt"]},
        "hardware": {"count": case["gpus"]},
        "techniques": {
            "activation_checkpointing": case["ckpt"],
            "loss": case["loss"],
            "compile": True,
            "attention": "eager",
            "activation_offload": True,
        },
        "parallelism": {"zero_stage": case["zero"]},
    }
    if case["task"] not in ("lora", "qlora"):
        del data["workload"]["lora"]
    assert round_trip(plan_from_dict(data), FORMAT) == {}


def test_round_trip_int8_dora_fsdp_offload():
    plan = plan_from_dict(
        {
            "framework": "axolotl",
            "model": {"preset": "llama-3.1-70b"},
            "workload": {"task": "qlora", "lora": {"variant": "dora"}},
            "hardware": {"count": 8},
            "precision": {"weights": "int8", "compute": "fp16"},
            "techniques": {"offload": "optimizer_and_params"},
            "parallelism": {"zero_stage": 3},
        }
    )
    assert round_trip(plan, FORMAT) == {}


def test_write_refuses_what_it_cannot_say():
    plan = plan_from_dict(
        {"framework": "axolotl", "model": {"preset": "llama-3.1-8b"}, "techniques": {"loss": "chunked"}}
    )
    with pytest.raises(PlanError) as err:
        write(plan)
    assert str(err.value) == (
        "techniques.loss: 'chunked' cannot be said: Axolotl's losses are HF's (full) or fused "
        "(Liger, Cut Cross Entropy)"
    )


@pytest.mark.parametrize(
    "extra, plan_keys, note",
    [
        (
            "gradient_checkpointing: offload\n",
            {"techniques.activation_checkpointing": "full", "techniques.activation_offload": True},
            None,
        ),
        (
            "attn_implementation: eager\ntorch_compile: auto\n",
            {"techniques.attention": "eager", "techniques.compile": True},
            None,
        ),
        (
            "plugins:\n  - axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin\n",
            {"techniques.loss": "fused"},
            None,
        ),
        (
            "fp8: true\nfp8_enable_fsdp_float8_all_gather: true\n",
            {"precision.compute": "fp8", "precision.fp8_all_gather": True},
            None,
        ),
        (
            "deepspeed: deepspeed_configs/zero2.json\n",
            {"parallelism.zero_stage": 2, "techniques.offload": "optimizer"},  # axolotl's zero2.json offloads it
            "deepspeed: deepspeed_configs/zero2.json is not beside the config: its stage and offload are axolotl's "
            "zero2.json's",
        ),
        (
            "deepspeed: my_ds.json\n",
            {},
            "deepspeed: my_ds.json: the ZeRO stage is in that file, which is not beside the config",
        ),
        (
            "unfrozen_parameters: ['lm_head.*']\n",
            {},
            "unfrozen_parameters: only these parameters train; the plan trains every weight",
        ),
        (
            "lora_target_modules: [q_proj, gate_up_proj]\nlora_target_linear: false\n",
            {"workload.lora.targets": ["q"]},
            "lora_target_modules: 'gate_up_proj' is no projection the plan's targets name",
        ),
    ],
)
def test_keys_in_a_config(extra, plan_keys, note):
    text = (DATA / "qlora_8b.yaml").read_text().replace("gradient_checkpointing: true\n", "")
    text = text.replace("lora_target_linear: true\n", "").replace("attn_implementation: flash_attention_2\n", "")
    text += extra
    imported = read(text, gpus=2)
    for key, value in plan_keys.items():
        found = imported.plan
        for part in key.split("."):
            found = found[part]
        assert found == value, key
    assert imported.unmodelled == ((note,) if note else ())
    assert imported.unknown == ()


def test_unknown_keys_are_listed():
    imported = read((DATA / "qlora_8b.yaml").read_text() + "frobnicate: 3\n")
    assert imported.unknown == ("frobnicate",)


def test_round_trip_fp8_context_parallel():
    plan = plan_from_dict(
        {
            "framework": "axolotl",
            "model": {"preset": "llama-3.1-8b"},
            "hardware": {"count": 8},
            "workload": {"task": "finetune", "sequence_length": 16384},
            "precision": {"compute": "fp8", "fp8_all_gather": True},
            "parallelism": {"zero_stage": 3, "context": 2},
        }
    )
    assert round_trip(plan, FORMAT) == {}


HOSTILE = [None, -1, 10**30, 2.5, "x", [[1]], ["q_proj", [1]], {"_component_": 5, "zero_optimization": 5}]
STORED = {
    "torchtune": ("llama3_1_8B_lora_single_device.yaml", "llama3_1_70B_full.yaml"),
    "axolotl": ("lora_int8_8b.yaml", "full_8b_liger_fsdp.yaml"),
}


def _hostile_cases(fmt):
    """(header, config, key) for each key of the format's two stored configs (and of their sections)."""
    cases = []
    for path in (DATA.parent / fmt / name for name in STORED[fmt]):
        header = "".join(line + "\n" for line in path.read_text().splitlines() if line.startswith("#"))
        original = yaml.safe_load(path.read_text())
        keys = [(k,) for k in original] + [(k, s) for k, v in original.items() if isinstance(v, dict) for s in v]
        keys += [("plugins",), ("deepspeed",), ("fsdp_config",), ("bnb_config_kwargs",), ("tensor_parallel_dim",)]
        cases += [(header, original, key) for key in keys]
    return cases


@pytest.mark.fuzz
@pytest.mark.parametrize("fmt", sorted(STORED))
@settings(max_examples=150)
@given(data=st.data())
def test_hostile_values_raise_plan_errors_only(fmt, data):
    """A key of a stored config (or of its sections) set to a hostile value: read either plans or raises
    PlanError, never another exception (a property over every key and value, drawn by hypothesis)."""
    header, original, key = data.draw(st.sampled_from(HOSTILE_CASES[fmt]), label="key")
    cfg = copy.deepcopy(original)
    (cfg[key[0]] if len(key) == 2 else cfg)[key[-1]] = data.draw(st.sampled_from(HOSTILE), label="value")
    try:
        FORMATS[fmt].read(header + yaml.safe_dump(cfg), gpus=3)
    except PlanError:
        pass


HOSTILE_CASES = {fmt: _hostile_cases(fmt) for fmt in STORED}


def test_a_deepspeed_file_name_is_read_in_linear_time():
    """`zero0` 20,000 times and no `.json` at the end: the regex scanned the rest of the name from each (15 s)."""
    text = (DATA / "full_8b.yaml").read_text()
    imported = read(text + "deepspeed: " + "zero0" * 20_000 + ".jsonx\n")
    assert "parallelism" not in imported.plan
    assert read(text + "deepspeed: ./configs/my_zero2-offload.json\n").plan["parallelism"] == {"zero_stage": 2}


def test_nulls_read_as_absent():
    """optimizer: null and gradient_checkpointing: null are Axolotl's None, its default: read as absent."""
    r = read("base_model: meta-llama/Llama-3.1-8B\nadapter: lora\noptimizer: null\ngradient_checkpointing: null\n")
    reads = {(k.source, k.plan_key): k.value for k in r.read}
    assert reads["optimizer (absent: the schema's adamw_torch_fused)", "precision.optimizer"] == "adamw"
    assert reads["gradient_checkpointing (absent: false)", "techniques.activation_checkpointing"] == "none"
    assert "optimizer: null (read as absent)" in r.ignored


def test_lora_targets_by_module_path_and_the_mlp():
    """A module path names its projection by its last part (routed experts' are not the dense MLP's);
    lora_target_linear on a GeLU MLP (Falcon) has no gate."""
    r = read(
        "base_model: meta-llama/Llama-3.1-8B\nadapter: lora\nlora_target_modules: [self_attn.q_proj, "
        "mlp.down_proj, mlp.experts.down_proj]\n"
    )
    assert r.plan["workload"]["lora"]["targets"] == ["q", "down"]
    assert any(n.startswith("lora_target_modules: 'mlp.experts.down_proj'") for n in r.unmodelled)
    falcon = read("base_model: tiiuae/falcon-7b\nadapter: lora\nlora_target_linear: true\n")
    assert falcon.plan["workload"]["lora"]["targets"] == ["q", "k", "v", "o", "up", "down"]
    llama = read("base_model: meta-llama/Llama-3.1-8B\nadapter: lora\nlora_target_linear: true\n")
    assert llama.plan["workload"]["lora"]["targets"] == ["q", "k", "v", "o", "gate", "up", "down"]


def test_expert_parallel_size():
    """expert_parallel_size: experts over that many data ranks; without a GPU count, the fewest it runs on."""
    text = "base_model: Qwen/Qwen3-30B-A3B\nexpert_parallel_size: 4\n"
    alone, counted = read(text), read(text, gpus=8)
    assert (alone.plan["parallelism"]["expert"], alone.plan["hardware"]["count"]) == (4, 4)
    assert (counted.plan["parallelism"]["expert"], counted.plan["hardware"]["count"]) == (4, 8)
    assert plan_from_dict(counted.plan).parallelism.data == 8


def test_absent_micro_batch_is_named():
    r = read("base_model: meta-llama/Llama-3.1-8B\n")
    assert [k.source for k in r.read if k.plan_key == "workload.micro_batch_size"] == [
        "(absent: the Axolotl config does not say the micro-batch: the plan's default 1)"
    ]


@pytest.mark.parametrize(
    "name, precision",
    [
        # transformers' own AdamW (optimization.py before v4.50) stepped one parameter at a time: a for-loop
        ("adamw_hf", {"optimizer": "adamw", "optimizer_impl": "forloop"}),
        ("adamw_torch", {"optimizer": "adamw", "optimizer_impl": "foreach"}),
        ("adamw_apex_fused", {"optimizer": "adamw", "optimizer_impl": "fused"}),
        ("ao_adamw_8bit", {"optimizer": "adamw_8bit", "optimizer_library": "torchao"}),
        ("muon", {"optimizer": "muon"}),
    ],
)
def test_optimizer_names_are_training_arguments_optim(name, precision):
    """Axolotl hands `optimizer:` to TrainingArguments.optim: the names read as hf_trainer reads `optim`, plus
    Axolotl's own (CustomSupportedOptimizers) the plan names."""
    imported = read(f"base_model: meta-llama/Llama-3.1-8B\noptimizer: {name}\nbf16: true\n")
    assert imported.plan["precision"] == {"compute": "bf16", **precision}
    assert {k: OPTIMIZERS[k] for k in OPTIMS} == OPTIMS


def test_a_for_loop_adamw_is_written_as_adamw_hf():
    plan = plan_from_dict(
        {
            "framework": "axolotl",
            "model": {"preset": "llama-3.1-8b"},
            "workload": {"task": "finetune"},
            "precision": {"optimizer": "adamw", "optimizer_impl": "forloop"},
        }
    )
    assert "optimizer: adamw_hf\n" in write(plan) and round_trip(plan, FORMAT) == {}
