"""planner/formats/deepspeed.py: DeepSpeed config JSON read from the stored configs, written back, and its errors."""

import json

import pytest
from config_data import accounted, built, config_files, config_text
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import PlanError
from planner.formats import FORMATS, detect, round_trip
from planner.formats.deepspeed import FORMAT, read
from planner.plan.codec import plan_from_dict

AUTO = "'auto': the HF integration fills it from TrainingArguments; read as absent"
GATHER = "ZeRO-3 keeps gathered parameters on the GPU"

# each stored config read for 4 GPUs: the plan it says (hand-checked against the file) and its unmodelled keys
EXPECTED = {
    "zero2_micro8_accum3.json": (
        # micro 8 × accumulation 3 × 4 GPUs = 96
        {
            "workload": {"micro_batch_size": 8, "global_batch_size": 96},
            "precision": {"compute": "fp16"},
            "parallelism": {"zero_stage": 2, "reduce_bucket_elements": 7_000_000},
        },
        [
            "zero_optimization.allgather_bucket_size",
            "activation_checkpointing",
            "activation_checkpointing.partition_activations",
            "activation_checkpointing.contiguous_memory_optimization",
        ],
    ),
    "zero2_legacy_cpu_offload.json": (
        # train_batch_size 4 over 4 GPUs, accumulation 1: micro-batch 1; legacy cpu_offload: the optimizer
        {
            "workload": {"micro_batch_size": 1, "global_batch_size": 4},
            "precision": {"compute": "fp16"},
            "parallelism": {"zero_stage": 2, "reduce_bucket_elements": 7_000_000},
            "techniques": {"offload": "optimizer"},
        },
        ["zero_optimization.allgather_bucket_size"],
    ),
    "zero3_buckets.json": (
        {
            "workload": {"micro_batch_size": 1, "global_batch_size": 4},
            "precision": {"compute": "bf16", "optimizer": "adamw"},
            "parallelism": {"zero_stage": 3, "reduce_bucket_elements": 50_000_000, "sub_group_elements": 10**12},
        },
        [
            "zero_optimization.overlap_comm",
            "zero_optimization.stage3_max_live_parameters",
            "zero_optimization.stage3_max_reuse_distance",
            "zero_optimization.stage3_prefetch_bucket_size",
            "zero_optimization.stage3_param_persistence_threshold",
        ],
    ),
    "zero2_torch_adam_auto.json": (
        # torch_adam: torch.optim.AdamW with PyTorch's foreach default; the batch and bucket are "auto"
        {
            "precision": {"compute": "fp16", "optimizer": "adamw", "optimizer_impl": "foreach"},
            "parallelism": {"zero_stage": 2},
        },
        [
            "train_batch_size",
            "train_micro_batch_size_per_gpu",
            "zero_optimization.reduce_bucket_size",
            "zero_optimization.allgather_bucket_size",
            "zero_optimization.overlap_comm",
        ],
    ),
    "zero3_offload_auto.json": (
        {
            "precision": {"compute": "fp16", "optimizer": "adamw"},
            "parallelism": {"zero_stage": 3, "sub_group_elements": 10**9},
            "techniques": {"offload": "optimizer_and_params"},
        },
        [
            "train_batch_size",
            "train_micro_batch_size_per_gpu",
            "zero_optimization.reduce_bucket_size",
            "zero_optimization.overlap_comm",
            "zero_optimization.stage3_prefetch_bucket_size",
            "zero_optimization.stage3_param_persistence_threshold",
            "zero_optimization.stage3_max_live_parameters",
            "zero_optimization.stage3_max_reuse_distance",
        ],
    ),
    "zero2_offload_auto.json": (
        # fp16 and bf16 "auto": the compute dtype is left to the recipe
        {
            "precision": {"optimizer": "adamw"},
            "parallelism": {"zero_stage": 2, "reduce_bucket_elements": 200_000_000},
            "techniques": {"offload": "optimizer"},
        },
        [
            "train_batch_size",
            "train_micro_batch_size_per_gpu",
            "gradient_accumulation_steps",
            "fp16.enabled",
            "bf16.enabled",
            "zero_optimization.allgather_bucket_size",
            "zero_optimization.overlap_comm",
        ],
    ),
    "zero3_offload_zero_buckets.json": (
        # reduce_bucket_size 0: the plan's smallest bucket (1 element); sub_group_size 1e14: the whole partition
        {
            "precision": {"compute": "fp16", "optimizer": "adamw"},
            "parallelism": {"zero_stage": 3, "reduce_bucket_elements": 1, "sub_group_elements": 10**13},
            "techniques": {"offload": "optimizer_and_params"},
        },
        [
            "zero_optimization.overlap_comm",
            "zero_optimization.stage3_prefetch_bucket_size",
            "zero_optimization.stage3_param_persistence_threshold",
            "zero_optimization.stage3_max_live_parameters",
            "zero_optimization.stage3_max_reuse_distance",
        ],
    ),
    "zero2_zenflow.json": (
        # train_batch_size 32 over 4 GPUs × accumulation 1: micro-batch 8
        {
            "workload": {"micro_batch_size": 8, "global_batch_size": 32},
            "precision": {"compute": "bf16", "optimizer": "adamw"},
            "parallelism": {"zero_stage": 2},
            "techniques": {"offload": "optimizer"},
        },
        ["zero_optimization.zenflow"],
    ),
    "zero2_autotp.json": (
        {"precision": {"optimizer": "adamw"}, "parallelism": {"zero_stage": 2, "tensor": 4}},
        ["train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "bf16.enabled"],
    ),
}


def test_every_stored_config_has_expectations():
    assert sorted(EXPECTED) == config_files("deepspeed")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_stored_configs_read(name):
    plan, unmodelled = EXPECTED[name]
    imported = read(config_text("deepspeed", name), gpus=4)
    assert imported.plan == {"framework": "deepspeed", "hardware": {"count": 4}, **plan}
    assert [note.split(": ", 1)[0] for note in imported.unmodelled] == unmodelled
    assert imported.unknown == ()
    assert imported.model_name == ""
    assert built(imported).framework == "deepspeed"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_key_is_accounted_for(name):
    """Each leaf of the config (or its section, for sections read whole) is read, unmodelled or ignored."""
    config = json.loads(config_text("deepspeed", name))
    said = accounted(read(config_text("deepspeed", name), gpus=4))
    for key, value in config.items():
        leaves = [f"{key}.{sub}" for sub in value] if isinstance(value, dict) and key not in ("scheduler",) else [key]
        for leaf in leaves:
            assert leaf in said or any(s.startswith(f"{leaf}.") for s in said) or key in said, leaf


def test_notes_say_why():
    imported = read(config_text("deepspeed", "zero2_offload_auto.json"))
    assert f"bf16.enabled: {AUTO}" in imported.unmodelled
    imported = read(config_text("deepspeed", "zero3_buckets.json"), gpus=4)
    assert (
        f"zero_optimization.stage3_max_live_parameters: {GATHER}: up to this many elements gathered at once"
        in imported.unmodelled
    )
    # what an 'auto' of the HF integration leaves unknown is said with the key's reason
    imported = read(config_text("deepspeed", "zero3_offload_auto.json"))
    assert (
        "zero_optimization.stage3_prefetch_bucket_size: 'auto' (the HF integration fills it from the model): "
        f"{GATHER}: parameters fetched ahead of use, up to this many elements"
    ) in imported.unmodelled


def test_without_the_gpu_count_the_batch_is_partly_said():
    imported = read(config_text("deepspeed", "zero2_micro8_accum3.json"))
    assert imported.plan["workload"] == {"micro_batch_size": 8}
    assert (
        "gradient_accumulation_steps: the global batch is micro-batch × accumulation × GPUs: give the "
        "micro-batch and the GPU count"
    ) in imported.unmodelled
    assert "hardware" not in imported.plan


def test_no_precision_section_is_deepspeeds_fp32():
    imported = read('{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1}}', gpus=2)
    assert imported.plan["precision"] == {"compute": "fp32"}
    assert built(imported).precision.compute == "fp32"


def test_alias_and_legacy_keys():
    imported = read(
        '{"bfloat16": {"enabled": true}, "train_batch_size": 16, "gradient_accumulation_steps": 2,'
        ' "data_types": {"grad_accum_dtype": "fp32"},'
        ' "optimizer": {"type": "Lion", "params": {"lr": 1e-4}}, "zero_optimization": {"stage": 3,'
        ' "cpu_offload": true, "cpu_offload_param": true, "contiguous_gradients": false}}',
        gpus=4,
    )
    assert imported.plan == {
        "framework": "deepspeed",
        "hardware": {"count": 4},
        "workload": {"micro_batch_size": 2, "global_batch_size": 16},
        "precision": {"compute": "bf16", "gradients": "fp32", "optimizer": "lion"},
        "parallelism": {"zero_stage": 3, "reduce_bucket_elements": 1},
        "techniques": {"offload": "optimizer_and_params"},
    }


def test_unplanned_choices_are_noted():
    imported = read(
        '{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "OneBitAdam"}, "amp": '
        '{"enabled": true}, "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}, '
        '"offload_optimizer": {"device": "nvme", "ratio": 0.3}}, "mystery": 1}',
        gpus=2,
    )
    nvme = (
        "NVMe (ZeRO-Infinity) is planned as CPU offload: the GPU holds the same; "
        "the NVMe transfers' time is not planned"
    )
    assert imported.unmodelled == (
        "optimizer.type: 'OneBitAdam' has no plan optimizer",
        "amp: NVIDIA Apex AMP keeps its own casts and master copies (opt level)",
        "zero_optimization.offload_optimizer.ratio: only this share of the optimizer step runs on the CPU",
        f"zero_optimization.offload_optimizer.device: {nvme}",
        f"zero_optimization.offload_param.device: {nvme}",
    )
    assert imported.plan["techniques"] == {"offload": "optimizer_and_params"}
    assert imported.unknown == ("mystery",)


def test_train_batch_size_alone_needs_the_gpu_count():
    imported = read('{"train_batch_size": 16}')
    assert imported.plan["workload"] == {"global_batch_size": 16}
    assert imported.unmodelled == (
        "train_batch_size: the micro-batch is train_batch_size ÷ (GPUs × accumulation): give the GPU count",
    )


@pytest.mark.parametrize(
    "text, gpus, message",
    [
        ("{", None, "config: not valid JSON (Expecting property name enclosed in double quotes at line 1)"),
        ("[1, 2]", None, "config: must be a mapping of config keys to values (YAML or JSON)"),
        (
            '{"zero_optimization": {"stage": 4}}',
            None,
            "zero_optimization.stage: 4 is not a ZeRO stage; allowed: 0, 1, 2, 3",
        ),
        (
            '{"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}',
            None,
            "zero_optimization.offload_param.device: 'cpu' needs zero_optimization.stage 3, not 2",
        ),
        (
            '{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "disk"}}}',
            None,
            "zero_optimization.offload_optimizer.device: 'disk' is not one of: none, cpu, nvme",
        ),
        (
            '{"zero_optimization": {"stage": 2, "offload_optimizer": "cpu"}}',
            None,
            "zero_optimization.offload_optimizer: 'cpu' must be a section with a `device`",
        ),
        (
            '{"bf16": {"enabled": true}, "fp16": {"enabled": true}}',
            None,
            "fp16.enabled: True and bf16.enabled are both true; DeepSpeed runs one",
        ),
        (
            '{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}',
            8,
            "train_batch_size: 32 must equal train_micro_batch_size_per_gpu × gradient_accumulation_steps × "
            "data-parallel GPUs = 4 × 2 × 8 = 64",
        ),
        (
            '{"train_batch_size": 4}',
            8,
            "train_batch_size: 4 is less than one sequence per GPU over 8 data-parallel GPUs × 1 accumulation steps",
        ),
        (
            '{"train_batch_size": 32}',
            3,
            "train_batch_size: 32 is not a multiple of data-parallel GPUs × accumulation "
            "steps (3 × 1); DeepSpeed's batch check would fail",
        ),
        ('{"train_micro_batch_size_per_gpu": 1.5}', None, "train_micro_batch_size_per_gpu: 1.5 must be an integer ≥ 1"),
        (
            '{"tensor_parallel": {"autotp_size": 3}}',
            8,
            "tensor_parallel.autotp_size: 3 does not divide the GPU count (8)",
        ),
        (
            '{"data_types": {"grad_accum_dtype": "fp64"}}',
            None,
            "data_types.grad_accum_dtype: 'fp64' is not one of: fp32, bf16, fp16",
        ),
        ('{"bf16": true}', None, "bf16: True must be a section with an `enabled` key"),
    ],
)
def test_bad_configs_name_the_key(text, gpus, message):
    with pytest.raises(PlanError) as caught:
        read(text, gpus=gpus)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_detect_stored_configs(name):
    assert detect(config_text("deepspeed", name)) is FORMAT


@pytest.mark.parametrize(
    "text",
    [
        '{"architectures": ["LlamaForCausalLM"], "hidden_size": 4096}',  # a HF config.json
        '{"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2}',  # TrainingArguments as JSON
        "zero_optimization:\n  stage: 3\n",  # YAML
        "not json",
    ],
)
def test_detect_rejects_others(text):
    assert not FORMAT.detect(text)


def test_registered():
    assert FORMATS["deepspeed"] is FORMAT


# Every combination of these axes DeepSpeed can say comes back as it went (a property over the 6,912
# combinations, 2,112 of them sayable, drawn by hypothesis; _sayable excludes what DeepSpeed cannot say)
AXES = {
    "framework": ("deepspeed", "generic"),
    "stage": (0, 1, 2, 3),
    "compute": ("fp32", "bf16", "fp16"),
    "optimizer": ("adamw", "lion"),
    "impl": ("fused", "foreach", "forloop"),
    "offload": ("none", "optimizer", "optimizer_and_params"),
    "gradients": (None, "fp32"),
    "tensor": (1, 2),
    "gpus": (8,),
    "micro": (1, 4),
    "steps": (1, 3),
}
PLANS = st.fixed_dictionaries({name: st.sampled_from(values) for name, values in AXES.items()})


def _plan(p):
    parallelism = {"zero_stage": p["stage"], "tensor": p["tensor"]}
    if p["stage"] == 3:
        parallelism["sub_group_elements"] = 123_456
    if p["stage"]:
        parallelism["reduce_bucket_elements"] = 777
    precision = {"compute": p["compute"], "optimizer": p["optimizer"], "optimizer_impl": p["impl"]}
    if p["gradients"]:
        precision["gradients"] = p["gradients"]
    data = p["gpus"] // p["tensor"]
    return plan_from_dict(
        {
            "model": {"preset": "llama-3.1-8b"},
            "framework": p["framework"],
            "workload": {"micro_batch_size": p["micro"], "global_batch_size": p["micro"] * p["steps"] * data},
            "precision": precision,
            "techniques": {"offload": p["offload"]},
            "parallelism": parallelism,
            "hardware": {"count": p["gpus"]},
        }
    )


def _sayable(p):
    return (
        (p["offload"] != "optimizer_and_params" or p["stage"] == 3)
        and (p["framework"] == "deepspeed" or p["stage"] == 0)
        and (p["optimizer"] == "adamw" or p["impl"] == "fused")
    )


FIRST = {name: values[0] for name, values in AXES.items()}  # a plan DeepSpeed can say


@settings(max_examples=80)
@given(p=PLANS.filter(_sayable))
def test_round_trip(p):
    assert round_trip(_plan(p), FORMAT) == {}


def test_round_trip_catches_what_it_cannot_say():
    plan = _plan({**FIRST, "optimizer": "lion", "impl": "foreach"})
    assert round_trip(plan, FORMAT) == {"precision.optimizer_impl": ("foreach", "fused")}


def test_written_config_is_deepspeeds_spelling():
    text = FORMAT.write(
        _plan(
            {
                "framework": "deepspeed",
                "stage": 3,
                "compute": "bf16",
                "optimizer": "adamw",
                "impl": "fused",
                "offload": "optimizer_and_params",
                "gradients": None,
                "tensor": 2,
                "gpus": 8,
                "micro": 2,
                "steps": 4,
            }
        )
    )
    assert json.loads(text) == {
        "train_batch_size": 32,
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 4,
        "bf16": {"enabled": True},
        "data_types": {"grad_accum_dtype": "bf16"},
        "optimizer": {"type": "AdamW", "params": {}},
        "zero_optimization": {
            "stage": 3,
            "offload_optimizer": {"device": "cpu", "pin_memory": True},
            "offload_param": {"device": "cpu", "pin_memory": True},
            "contiguous_gradients": True,
            "reduce_bucket_size": 777,
            "sub_group_size": 123_456,
        },
        "tensor_parallel": {"autotp_size": 2},
    }


def test_the_three_batch_keys_give_the_gpu_count():
    """train_batch_size = micro × accumulation × data-parallel GPUs: all three given say the GPUs."""
    three = {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4}
    imported = read(json.dumps(three))
    assert imported.plan["hardware"] == {"count": 4}
    assert imported.plan["workload"] == {"micro_batch_size": 2, "global_batch_size": 32}
    with pytest.raises(
        PlanError,
        match=r"^train_batch_size: 30 is not a multiple of train_micro_batch_size_per_gpu × "
        r"gradient_accumulation_steps \(2 × 4\); DeepSpeed's batch check would fail$",
    ):
        read(json.dumps(three | {"train_batch_size": 30}))
