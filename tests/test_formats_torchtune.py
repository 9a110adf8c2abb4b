"""planner/formats/torchtune.py: recipe configs (tests/data/configs/torchtune) read, errors, detect, round trip."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import PlanError
from planner.formats import FORMATS, axolotl, detect, overlay, round_trip
from planner.formats.torchtune import FORMAT, read, write
from planner.memory import estimate
from planner.plan.codec import plan_from_dict

DATA = Path(__file__).parent / "data" / "configs" / "torchtune"
NO_CAP = (
    "tokenizer.max_seq_len: null: no cap, each batch is as long as its longest sample; the plan keeps its own "
    "sequence_length"
)
UNPACKED = (
    "dataset.packed: False: each batch is padded to its longest sample, up to max_seq_len; the plan takes "
    "every sequence at its sequence_length (an upper bound)"
)
ADAPTERS = {"rank": 8, "alpha": 16, "dropout": 0.0, "targets": ["q", "v", "o", "gate", "up", "down"]}


def _read(name, gpus=None):
    return read((DATA / name).read_text(), gpus=gpus)


def test_full_single_device():
    imported = _read("llama3_1_8B_full_single_device.yaml")
    assert imported.plan == {
        "framework": "torchtune",
        "model": {"preset": "llama-3.1-8b"},
        "workload": {"task": "finetune", "micro_batch_size": 2, "global_batch_size": 2},
        "hardware": {"count": 1},
        "precision": {"compute": "bf16", "optimizer": "paged_adamw_8bit", "optimizer_library": "bitsandbytes"},
        "techniques": {
            "activation_checkpointing": "full",
            "activation_offload": False,
            "compile": False,
            "optimizer_in_backward": True,
            "loss": "chunked",
        },
    }
    assert imported.unmodelled == (NO_CAP, UNPACKED)
    assert imported.unknown == ()
    assert "optimizer.lr" in imported.ignored and "profiler" in imported.ignored
    plan_from_dict(overlay({"hardware": {"gpu": "h100-sxm-80gb"}}, imported.plan))  # it plans


@pytest.mark.parametrize(
    "name, task", [("llama3_1_8B_lora_single_device.yaml", "lora"), ("llama3_1_8B_qlora_single_device.yaml", "qlora")]
)
def test_adapters_single_device(name, task):
    imported = _read(name)
    assert imported.plan["workload"] == {"task": task, "lora": ADAPTERS, "micro_batch_size": 2, "global_batch_size": 16}
    assert imported.plan["precision"] == {"compute": "bf16", "optimizer": "adamw", "optimizer_impl": "fused"}
    assert imported.plan["hardware"] == {"count": 1}
    assert "parallelism" not in imported.plan
    assert imported.unknown == ()


def test_70b_full_distributed_on_8():
    imported = _read("llama3_1_70B_full.yaml", gpus=8)
    assert imported.plan["parallelism"] == {"zero_stage": 3, "tensor": 1, "sequence_parallel": False}
    assert imported.plan["hardware"] == {"count": 8}
    assert imported.plan["workload"]["global_batch_size"] == 16
    assert imported.plan["precision"]["optimizer_impl"] == "foreach"  # fused: False
    assert imported.plan["techniques"]["offload"] == "optimizer_and_params"
    assert imported.plan["techniques"]["optimizer_in_backward"] is False
    assert imported.unmodelled == (
        NO_CAP,
        UNPACKED,
        "custom_sharded_layers: shards these modules as FSDP units "
        "of their own (their gathered copy is freed sooner); the plan gathers one layer "
        "at a time",
    )
    assert "tensor_parallel_plan" in imported.ignored and imported.unknown == ()


@pytest.mark.parametrize(
    "name, preset", [("llama3_1_8B_lora.yaml", "llama-3.1-8b"), ("qwen2_5_7B_lora.yaml", "qwen2.5-7b")]
)
def test_lora_distributed_takes_the_header_gpus(name, preset):
    imported = _read(name)  # "tune run --nproc_per_node 2 lora_finetune_distributed"
    assert imported.plan["model"] == {"preset": preset}
    assert imported.plan["hardware"] == {"count": 2}
    assert imported.plan["parallelism"] == {"zero_stage": 3, "sequence_parallel": False}
    assert imported.plan["techniques"]["activation_checkpointing"] == "none"
    assert imported.plan["workload"]["global_batch_size"] == 32
    assert imported.read[0].source == "model._component_"


def test_absent_keys_take_the_recipes_defaults():
    text = (DATA / "llama3_1_8B_full_single_device.yaml").read_text()
    text = text.replace("enable_activation_checkpointing: True", "").replace("optimizer_in_bwd: True", "")
    text = text.replace("_component_: bitsandbytes.optim.PagedAdamW8bit", "_component_: torch.optim.AdamW")
    imported = read(text)
    assert imported.plan["techniques"]["activation_checkpointing"] == "none"
    assert imported.plan["techniques"]["optimizer_in_backward"] is False
    assert imported.plan["precision"]["optimizer_impl"] == "foreach"


def test_output_adapter_is_unmodelled_and_packing_is_read():
    text = (DATA / "llama3_1_8B_lora_single_device.yaml").read_text()
    text = text.replace("apply_lora_to_output: False", "apply_lora_to_output: True")
    text = text.replace("max_seq_len: null", "max_seq_len: 2048").replace("packed: False", "packed: True")
    imported = read(text)
    assert imported.plan["workload"]["sequence_length"] == 2048
    assert imported.unmodelled == (
        "model.apply_lora_to_output: an adapter on the output projection; plan targets "
        "name the layers' projections only",
    )


@pytest.mark.parametrize(
    "edit, message",
    [
        (("lora_rank: 8", "lora_rank: 0"), "model.lora_rank: 0 must be an integer ≥ 1"),
        (("dtype: bf16", "dtype: fp16"), "dtype: 'fp16' must be bf16 or fp32 (torchtune's recipes refuse fp16)"),
        (
            ("['q_proj', 'v_proj', 'output_proj']", "['qkv']"),
            "model.lora_attn_modules: ['qkv'] must be a list of q_proj, k_proj, v_proj, output_proj",
        ),
        (
            (
                "lora_finetune_single_device --config llama3_1/8B_lora_single_device\n",
                "full_finetune_single_device --config x\n",
            ),
            "model._component_: 'torchtune.models.llama3_1.lora_llama3_1_8b' is not a full model builder, but recipe "
            "full_finetune_single_device trains every weight",
        ),
        (
            ("LinearCrossEntropyLoss", "KLDivLoss"),
            "loss._component_: 'torchtune.modules.loss.KLDivLoss' is not a loss "
            "this reader knows; allowed: torchtune.modules.loss.CEWithChunkedOutputLoss, "
            "torchtune.modules.loss.LinearCrossEntropyLoss, torch.nn.CrossEntropyLoss",
        ),
    ],
)
def test_bad_values_name_the_key(edit, message):
    text = (DATA / "llama3_1_8B_lora_single_device.yaml").read_text().replace(*edit)
    with pytest.raises(PlanError) as err:
        read(text)
    assert str(err.value) == message


# a small DPO config of this test's own: the recipe on the header line, the loss, the rest as a fine-tune's
DPO = """# tune run --nproc_per_node 2 {recipe} --config ./dpo.yaml
model:
  _component_: torchtune.models.llama3_2.{builder}
tokenizer:
  _component_: torchtune.models.llama3.llama3_tokenizer
  max_seq_len: 512
dataset:
  _component_: torchtune.datasets.stack_exchange_paired_dataset
batch_size: 2
gradient_accumulation_steps: 4
optimizer:
  _component_: torch.optim.AdamW
loss:
  _component_: torchtune.rlhf.loss.{loss}
  beta: 0.1
dtype: bf16
"""
LORA_1B = "lora_llama3_2_1b\n  lora_attn_modules: [q_proj, v_proj]"


@pytest.mark.parametrize(
    "recipe, builder, loss, reference",
    [
        ("lora_dpo_distributed", LORA_1B, "DPOLoss", "adapters_disabled"),  # disable_adapter: the base, adapters off
        ("full_dpo_distributed", "llama3_2_1b", "RSOLoss", "separate"),  # ref_checkpointer: a second model
    ],
)
def test_dpo_recipes_plan_a_preference_step(recipe, builder, loss, reference):
    imported = read(DPO.format(recipe=recipe, builder=builder, loss=loss))
    workload = imported.plan["workload"]
    assert (workload["objective"], workload["preference"]) == (
        "preference",
        {"loss_type": "dpo", "reference": reference},
    )
    assert (workload["micro_batch_size"], workload["global_batch_size"], workload["sequence_length"]) == (2, 16, 512)
    assert imported.plan["techniques"]["loss"] == "full"  # concatenated_forward keeps all_logits unchunked
    assert imported.plan["parallelism"]["zero_stage"] == 3
    assert "loss.beta" in imported.ignored and imported.unknown == ()
    assert any(note.startswith("loss._component_: RSOLoss") for note in imported.unmodelled) == (loss == "RSOLoss")
    plan = plan_from_dict(overlay({"hardware": {"gpu": "h100-sxm-80gb"}}, imported.plan))
    names = {i.name for stage in estimate(plan).stages for ph in stage.phases for i in ph.items}
    assert ("reference_weights" in names) == (reference == "separate")


def test_dpo_reference_without_a_header_follows_the_task_and_losses_match_recipes():
    text = DPO.format(recipe="lora_dpo_single_device", builder=LORA_1B, loss="DPOLoss").split("\n", 1)[1]
    read_ = {r.plan_key: r.source for r in read(text).read}
    assert read_["workload.preference.reference"] == (
        "disable_adapter (absent: no tune run line; the lora DPO recipe's)"
    )
    with pytest.raises(PlanError, match="^loss._component_: 'torchtune.rlhf.loss.DPOLoss' is a preference loss, but"):
        read(DPO.format(recipe="lora_finetune_distributed", builder=LORA_1B, loss="DPOLoss"))
    with pytest.raises(PlanError, match="^loss._component_: 'torchtune.modules.loss.LinearCrossEntropyLoss' must be"):
        read(
            DPO.format(recipe="lora_dpo_distributed", builder=LORA_1B, loss="x").replace(
                "torchtune.rlhf.loss.x", "torchtune.modules.loss.LinearCrossEntropyLoss"
            )
        )


def test_bad_text_and_gpu_count():
    with pytest.raises(PlanError, match=r"^config: not valid YAML at line 1, column 9 "):
        read("model: [")
    with pytest.raises(PlanError) as err:
        read("[" * 5000)
    assert str(err.value) == "config: nested too deeply to be a framework config"
    assert not FORMAT.detect("[" * 5000)
    with pytest.raises(PlanError) as err:
        read("- a list")
    assert str(err.value) == "config: must be a mapping of config keys to values (YAML or JSON)"
    with pytest.raises(PlanError) as err:
        read("model: {_component_: torchtune.models.llama3_1.llama3_1_8b}\noptimizer: 3\n")
    assert str(err.value) == "optimizer._component_: missing: the config must name its optimizer"
    with pytest.raises(PlanError) as err:
        _read("llama3_1_8B_lora_single_device.yaml", gpus=4)
    assert str(err.value) == "gpus: 4 must be 1: the recipe lora_finetune_single_device runs on a single device"
    text = (DATA / "llama3_1_70B_full.yaml").read_text().replace("tensor_parallel_dim: 1", "tensor_parallel_dim: 3")
    with pytest.raises(PlanError) as err:
        read(text, gpus=8)
    assert str(err.value) == (
        "tensor_parallel_dim: 3 × context_parallel_dim × data_parallel_replicate_dim = 3 must divide the GPU count (8)"
    )


def test_detect():
    for path in DATA.glob("*.yaml"):
        assert FORMAT.detect(path.read_text()), path
        assert detect(path.read_text()) is FORMAT
    for path in (DATA.parent / "axolotl").glob("*.y*ml"):
        assert not FORMAT.detect(path.read_text()), path
    assert not FORMAT.detect("model: llama") and not FORMAT.detect(": [")
    assert FORMATS["torchtune"] is FORMAT and FORMATS["axolotl"] is axolotl.FORMAT


# Every combination of these axes torchtune can run comes back as it went (a property over the 432 combinations,
# 180 of them runnable, drawn by hypothesis): a GPU count with ZeRO only on several GPUs, TP only beside them.
AXES = {
    "task": ("finetune", "lora", "qlora"),
    "gpus": (1, 8),
    "zero": (0, 2, 3),
    "tp": (1, 2),
    "ckpt": ("none", "full"),
    "opt": ("adamw", "paged_adamw_8bit", "adamw_8bit"),
    "loss": ("chunked", "full"),
}
CASES = st.fixed_dictionaries({name: st.sampled_from(values) for name, values in AXES.items()}).filter(
    lambda c: (c["gpus"] == 1) == (c["zero"] == 0) and (c["tp"] == 1 or c["gpus"] > 1)
)


@settings(max_examples=60)
@given(case=CASES)
def test_round_trip(case):
    data = {
        "framework": "torchtune",
        "model": {"preset": "llama-3.1-8b"},
        "workload": {
            "task": case["task"],
            "sequence_length": 2048,
            "micro_batch_size": 2,
            "steps": 50,
            "global_batch_size": 4 * case["gpus"] // case["tp"],
            "lora": {"rank": 16, "alpha": 32, "targets": ["q", "k", "v", "o"], "dropout": 0.05, "variant": "dora"},
        },
        "precision": {"optimizer": case["opt"]},
        "hardware": {"count": case["gpus"]},
        "techniques": {
            "activation_checkpointing": case["ckpt"],
            "loss": case["loss"],
            "loss_chunks": 16 if case["loss"] == "chunked" else 8,
            "compile": True,
            "optimizer_in_backward": False,
        },
        "parallelism": {"zero_stage": case["zero"], "tensor": case["tp"], "sequence_parallel": case["tp"] > 1},
    }
    if case["task"] not in ("lora", "qlora"):
        del data["workload"]["lora"]
    if case["opt"] == "adamw_8bit":
        data["precision"]["optimizer_library"] = "torchao"
    plan = plan_from_dict(data)
    assert round_trip(plan, FORMAT) == {}


def test_round_trip_single_device_optimizer_in_backward():
    plan = plan_from_dict(
        {
            "framework": "torchtune",
            "model": {"preset": "qwen2.5-7b"},
            "workload": {"task": "finetune"},
            "hardware": {"count": 1},
        }
    )
    assert plan.techniques.optimizer_in_backward
    assert round_trip(plan, FORMAT) == {}
    assert "tune run full_finetune_single_device --config" in write(plan)


def test_write_refuses_what_it_cannot_say():
    plan = plan_from_dict(
        {
            "framework": "torchtune",
            "model": {"preset": "llama-3.1-8b"},
            "workload": {"task": "lora", "lora": {"targets": ["q", "gate"]}},
        }
    )
    with pytest.raises(PlanError) as err:
        write(plan)
    assert str(err.value) == (
        "workload.lora.targets: ['q', 'gate'] cannot be said: apply_lora_to_mlp adapts all of gate, up and down or none"
    )
    plan = plan_from_dict(
        {
            "framework": "torchtune",
            "model": {"preset": "llama-3.1-8b"},
            "workload": {"task": "qlora"},
            "precision": {"weights": "int4", "double_quant": False},
        }
    )
    with pytest.raises(PlanError) as err:
        write(plan)
    assert str(err.value) == "precision.weights: 'int4' cannot be said: torchtune's qlora weights are nf4"
    plan = plan_from_dict({"framework": "torchtune", "model": {"preset": "falcon-7b"}})
    with pytest.raises(PlanError, match=r"^model.preset: 'falcon-7b' has no torchtune model builder; allowed: "):
        write(plan)


def test_fsdp_variants_of_the_70b_config():
    text = (DATA / "llama3_1_70B_full.yaml").read_text()
    text = text.replace("optimizer_in_bwd: False", "optimizer_in_bwd: True").replace("tensor_parallel_dim: 1", "")
    text += "fsdp_reshard_after_forward: False\ndata_parallel_shard_dim: 4\ndata_parallel_replicate_dim: 2\n"
    imported = read(text)  # no gpus: the dims give 8
    assert imported.plan["hardware"] == {"count": 8}
    assert imported.plan["parallelism"] == {"zero_stage": 2, "sequence_parallel": False}
    assert imported.plan["techniques"]["optimizer_in_backward"] is False
    assert imported.unmodelled[:2] == (
        "data_parallel_replicate_dim: HSDP shards over 4 ranks and replicates 2 times; the plan shards over every "
        "data rank",
        "optimizer_in_bwd: True: the plan models the optimizer in backward without FSDP only; planned with a full "
        "set of gradients",
    )
    with pytest.raises(PlanError) as err:
        read(text, gpus=16)
    assert str(err.value) == (
        "data_parallel_shard_dim: 4 × data_parallel_replicate_dim × tensor_parallel_dim × "
        "context_parallel_dim = 8 must equal the GPU count (16)"
    )


def test_optimizers_and_notes():
    text = (DATA / "llama3_1_8B_lora_single_device.yaml").read_text()
    text = text.replace(
        "_component_: torch.optim.AdamW\n  fused: True", "_component_: torchao.optim.AdamW8bit\n  block_size: 2048"
    )
    text += "ac_mode: selective\nfrobnicate: 1\n"
    imported = read(text)
    assert imported.plan["precision"] == {
        "compute": "bf16",
        "optimizer": "adamw_8bit",
        "optimizer_library": "torchao",
        "optimizer_block_size": 2048,
    }
    assert imported.unmodelled[-1] == (
        "ac_mode: torchtune's selective activation checkpointing; the plan reads enable_activation_checkpointing"
    )
    assert imported.unknown == ("frobnicate",)
    sgd = read(text.replace("torchao.optim.AdamW8bit\n  block_size: 2048", "torch.optim.SGD\n  momentum: 0.9"))
    assert sgd.plan["precision"] == {"compute": "bf16", "optimizer": "sgd_momentum", "optimizer_impl": "foreach"}


def test_a_header_line_of_many_flags_is_read_in_linear_time():
    """The header's regex read `--a=1` two ways: a line of 26 such flags and no recipe took 2^26 steps to fail."""
    text = (DATA / "llama3_1_8B_lora.yaml").read_text()
    imported = read("# tune run " + "--a=1 " * 26 + "x\n" + text.replace("tune run", "tune  ran"))
    assert imported.plan["hardware"] == {"count": 1}  # no recipe named: a single-device one
    header = text.replace("tune run --nproc_per_node 2", "tune run --nnodes=1 --nproc_per_node 4")
    assert read(header).plan["hardware"] == {"count": 4}
