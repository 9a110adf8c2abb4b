"""planner/formats/accelerate.py: accelerate config YAML read from the stored configs, written back, and its errors."""

import pytest
import yaml
from config_data import accounted, built, config_files, config_text
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from planner.errors import PlanError
from planner.formats import FORMATS, detect, round_trip
from planner.formats.accelerate import FLAT_WHY, FORMAT, HYBRID_WHY, layout, read
from planner.plan.codec import plan_from_dict

PREFETCH = (
    "fsdp_config.fsdp_backward_prefetch: the next unit's parameters are gathered before this unit's "
    "gradients are freed (one more unit held at the peak)"
)
FORWARD = "fsdp_config.fsdp_forward_prefetch: the next unit's parameters are gathered during this unit's forward"
FSDP_OFF = {"activation_checkpointing": "none", "offload": "none"}
FLAT = f"fsdp_config.fsdp_use_orig_params: {FLAT_WHY}"
DDP = {"framework": "accelerate_fsdp", "parallelism": {"zero_stage": 0}}

# each stored config read without a GPU count: the plan it says (hand-checked against the file), its notes
EXPECTED = {
    "deepspeed_file.yaml": (
        # the stage and offload are in the DeepSpeed config file it names; mixed_precision is left to that file
        {"framework": "deepspeed", "hardware": {"count": 2}},
        (
            "deepspeed_config.deepspeed_config_file: the ZeRO stage, offload and batch are in that file: read it with "
            "the deepspeed format",
        ),
    ),
    "fsdp1_two_gpus.yaml": (
        # FSDP1 (no fsdp_version) with use_orig_params: flat parameters, which matter for LoRA (noted)
        {
            "framework": "accelerate_fsdp",
            "techniques": FSDP_OFF,
            "parallelism": {"zero_stage": 3},
            "precision": {"compute": "bf16"},
            "hardware": {"count": 2},
        },
        (PREFETCH, FLAT),
    ),
    "ddp_two_gpus.yaml": ({**DDP, "precision": {"compute": "bf16"}, "hardware": {"count": 2}}, ()),
    "ddp_two_nodes.yaml": (
        # no mixed_precision: launch's "no", fp32; num_processes counts all machines' processes
        {**DDP, "precision": {"compute": "fp32"}, "hardware": {"count": 8}},
        (),
    ),
    "one_gpu_bf16.yaml": ({**DDP, "precision": {"compute": "bf16"}}, ()),
    "fp8_one_gpu.yaml": (
        {**DDP, "precision": {"compute": "fp8"}},
        (
            "fp8_config: the fp8 backend's scaling settings (Transformer Engine, MS-AMP, torchao); the plan's fp8 "
            "recipe is precision.fp8_recipe",
        ),
    ),
    "fsdp2_tp_hsdp.yaml": (
        # FSDP2 reshard_after_forward true: full shard; tp 2; dp_replicate 2 is hybrid sharding
        {
            "framework": "accelerate_fsdp",
            "techniques": FSDP_OFF,
            "parallelism": {"zero_stage": 3, "context": 1, "tensor": 2},
            "precision": {"compute": "bf16"},
            "hardware": {"count": 8},
        },
        (f"parallelism_config.parallelism_config_dp_replicate_size: {HYBRID_WHY}",),
    ),
    "fsdp2_cp8.yaml": (
        {
            "framework": "accelerate_fsdp",
            "techniques": {"activation_checkpointing": "full", "offload": "none"},
            "parallelism": {"zero_stage": 3, "context": 8, "tensor": 1},
            "precision": {"compute": "bf16"},
            "hardware": {"count": 8},
        },
        (),
    ),
    "ddp_eight_gpus.yaml": ({**DDP, "precision": {"compute": "bf16"}, "hardware": {"count": 8}}, ()),
    "fsdp1_prefetch.yaml": (
        {
            "framework": "accelerate_fsdp",
            "techniques": {"offload": "none"},
            "parallelism": {"zero_stage": 3},
            "precision": {"compute": "bf16"},
            "hardware": {"count": 8},
        },
        (PREFETCH, FORWARD, FLAT),
    ),
    "zero3_inline.yaml": (
        {
            "framework": "deepspeed",
            "parallelism": {"zero_stage": 3},
            "techniques": {"offload": "none"},
            "precision": {"compute": "bf16"},
            "hardware": {"count": 8},
        },
        (),
    ),
    "zero2_inline.yaml": (
        {
            "framework": "deepspeed",
            "parallelism": {"zero_stage": 2},
            "techniques": {"offload": "none"},
            "precision": {"compute": "bf16"},
            "hardware": {"count": 8},
        },
        (),
    ),
    "fsdp1_full_state.yaml": (
        # FSDP1 spells the strategy as fsdp_reshard_after_forward: FULL_SHARD
        {
            "framework": "accelerate_fsdp",
            "techniques": FSDP_OFF,
            "parallelism": {"zero_stage": 3},
            "precision": {"compute": "bf16"},
            "hardware": {"count": 8},
        },
        (PREFETCH, FORWARD, FLAT),
    ),
}


def test_every_stored_config_has_expectations():
    assert sorted(EXPECTED) == config_files("accelerate")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_stored_configs_read(name):
    plan, unmodelled = EXPECTED[name]
    imported = read(config_text("accelerate", name))
    assert imported.plan == plan
    assert imported.unmodelled == unmodelled
    assert imported.unknown == ()
    assert built(imported).framework == plan["framework"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_key_is_accounted_for(name):
    config = yaml.safe_load(config_text("accelerate", name))
    said = accounted(read(config_text("accelerate", name)))
    for key, value in config.items():
        for leaf in [f"{key}.{sub}" for sub in value] if isinstance(value, dict) else [key]:
            assert leaf in said or key in said, leaf


def test_the_gpu_count_given_must_agree():
    assert read(config_text("accelerate", "one_gpu_bf16.yaml"), gpus=4).plan["hardware"] == {"count": 4}
    with pytest.raises(PlanError, match=r"^num_processes: 8 differs from the GPU count given \(4\)$"):
        read(config_text("accelerate", "ddp_eight_gpus.yaml"), gpus=4)


def test_plugin_options_and_defaults():
    imported = read(
        "distributed_type: DEEPSPEED\ndeepspeed_config:\n  offload_optimizer_device: cpu\n"
        "  offload_param_device: cpu\n  gradient_accumulation_steps: 4\nmixed_precision: fp16\n"
        "dynamo_config:\n  dynamo_backend: INDUCTOR\n  dynamo_mode: default\n"
    )
    # no zero_stage: the plugin's default 2 is written (the recipe leaves it to the plan, whose default is 0)
    assert imported.plan == {
        "framework": "deepspeed",
        "parallelism": {"zero_stage": 2},
        "techniques": {"offload": "optimizer_and_params", "compile": True},
        "precision": {"compute": "fp16"},
    }
    assert imported.unmodelled == (
        "deepspeed_config.gradient_accumulation_steps: the global batch is micro-batch × "
        "accumulation × GPUs; the micro-batch is the script's",
    )
    imported = read("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: 2\n  fsdp_mystery: 1\n")
    assert imported.plan["parallelism"] == {"zero_stage": 2}  # 2 is SHARD_GRAD_OP (torch ShardingStrategy)
    assert imported.unknown == ("fsdp_config.fsdp_mystery",)
    imported = read("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: HYBRID_SHARD\n")
    assert imported.unmodelled == (f"fsdp_config.fsdp_sharding_strategy: {HYBRID_WHY}",)


def test_older_spellings():
    # before mixed_precision and dynamo_config (accelerate config_args.py reads fp16: true as mixed_precision fp16)
    imported = read(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nfp16: true\n"
        "dynamo_backend: INDUCTOR\nnum_processes: 2\n"
    )
    assert imported.plan == {
        **DDP,
        "precision": {"compute": "fp16"},
        "techniques": {"compile": True},
        "hardware": {"count": 2},
    }


@pytest.mark.parametrize(
    "text, message",
    [
        ("- a\n- b\n", "config: must be a mapping of config keys to values (YAML or JSON)"),
        (
            "distributed_type: MULTI_CPU\n",
            "distributed_type: 'MULTI_CPU' runs on CPUs or TPUs; this planner plans GPU memory",
        ),
        (
            "distributed_type: MULTI_GPU\nuse_cpu: true\n",
            "use_cpu: True runs on CPUs or TPUs; this planner plans GPU memory",
        ),
        ("distributed_type: ROCKET\n", "distributed_type: 'ROCKET' is not one of: NO, MULTI_GPU"),
        (
            "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: HALF_SHARD\n",
            "fsdp_config.fsdp_sharding_strategy: 'HALF_SHARD' is not an FSDP sharding strategy; allowed: FULL_SHARD, "
            "SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2",
        ),
        (
            "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 3\n",
            "fsdp_config.fsdp_version: 3 is not an FSDP version; allowed: 1, 2",
        ),
        (
            "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n  fsdp_offload_params: maybe\n",
            "fsdp_config.fsdp_offload_params: 'maybe' must be true or false",
        ),
        (
            "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 5\n",
            "deepspeed_config.zero_stage: 5 is not a ZeRO stage; allowed: 0, 1, 2, 3",
        ),
        (
            "distributed_type: DEEPSPEED\ndeepspeed_config:\n  offload_param_device: gpu\n",
            "deepspeed_config.offload_param_device: 'gpu' is not one of: none, cpu, nvme",
        ),
        (
            "distributed_type: MULTI_GPU\nmixed_precision: fp4\n",
            "mixed_precision: 'fp4' is not one of: no, fp16, bf16, fp8",
        ),
        ("distributed_type: MULTI_GPU\nnum_processes: two\n", "num_processes: 'two' must be an integer ≥ -1"),
    ],
)
def test_bad_configs_name_the_key(text, message):
    with pytest.raises(PlanError) as caught:
        read(text)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_detect_stored_configs(name):
    assert detect(config_text("accelerate", name)) is FORMAT


@pytest.mark.parametrize(
    "text",
    [
        "per_device_train_batch_size: 4\nbf16: true\n",  # TrainingArguments
        "base_model: meta-llama/Llama-3.1-8B\nsequence_len: 4096\nmicro_batch_size: 2\n",  # axolotl
        "model:\n  _component_: torchtune.models.llama3_1.llama3_1_8b\n",  # torchtune
        '{"zero_optimization": {"stage": 2}}',
    ],
)
def test_detect_rejects_others(text):
    assert not FORMAT.detect(text)


def test_registered():
    assert FORMATS["accelerate"] is FORMAT


# The axes of _plan's arguments: every combination accelerate can say comes back as it went (a property over the
# 3,072 combinations, 840 of them sayable, drawn by hypothesis; _sayable excludes what accelerate cannot say).
AXES = (
    ["accelerate_fsdp", "deepspeed"],
    [0, 1, 2, 3],
    ["fp32", "bf16", "fp16", "fp8"],
    ["none", "optimizer", "optimizer_and_params"],
    ["none", "full"],
    [False, True],
    [False],
    [1, 2],
    [1, 2],
    [1, 8],
)


def _plan(framework, stage, compute, offload, checkpointing, compile, flat, tensor, context, gpus):
    return plan_from_dict(
        {
            "model": {"preset": "llama-3.1-8b"},
            "framework": framework,
            "precision": {"compute": compute},
            "workload": {"task": "lora" if flat else "pretrain"},
            "techniques": {"offload": offload, "activation_checkpointing": checkpointing, "compile": compile},
            "parallelism": {"zero_stage": stage, "tensor": tensor, "context": context, "flat_params": flat},
            "hardware": {"count": gpus},
        }
    )


def _sayable(values):
    framework, stage, compute, offload, checkpointing, compile, flat, tensor, context, gpus = values
    if offload == "optimizer_and_params" and stage != 3 or tensor * context > gpus:
        return False
    return layout(_plan(*values)) == "FSDP" or checkpointing == "none" and not flat


@settings(max_examples=150, deadline=None)
@given(values=st.tuples(*map(st.sampled_from, AXES)))
def test_round_trip(values):
    assume(_sayable(values))
    assert round_trip(_plan(*values), FORMAT) == {}


def test_round_trip_catches_what_it_cannot_say():
    # DDP has no activation-checkpointing option: the script turns it on
    plan = _plan("accelerate_fsdp", 0, "bf16", "none", "full", False, False, 1, 1, 8)
    assert round_trip(plan, FORMAT) == {"techniques.activation_checkpointing": ("full", "none")}


def test_written_config_is_accelerates_spelling():
    fsdp1 = yaml.safe_load(FORMAT.write(_plan("accelerate_fsdp", 3, "bf16", "none", "full", False, True, 1, 1, 8)))
    assert fsdp1 == {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": "FSDP",
        "fsdp_config": {
            "fsdp_activation_checkpointing": True,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_offload_params": False,
            "fsdp_sharding_strategy": "FULL_SHARD",
            "fsdp_use_orig_params": True,
            "fsdp_version": 1,
        },
        "mixed_precision": "bf16",
        "num_machines": 1,
        "num_processes": 8,
    }
    fsdp2 = yaml.safe_load(FORMAT.write(_plan("accelerate_fsdp", 2, "bf16", "none", "none", False, False, 1, 1, 8)))
    assert fsdp2["fsdp_config"] == {
        "fsdp_activation_checkpointing": False,
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_offload_params": False,
        "fsdp_reshard_after_forward": False,
        "fsdp_version": 2,
    }
    zero1 = yaml.safe_load(FORMAT.write(_plan("accelerate_fsdp", 1, "fp32", "optimizer", "none", True, False, 2, 1, 8)))
    assert zero1 == {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": "DEEPSPEED",
        "deepspeed_config": {
            "offload_optimizer_device": "cpu",
            "offload_param_device": "none",
            "zero3_init_flag": False,
            "zero_stage": 1,
        },
        "dynamo_config": {"dynamo_backend": "INDUCTOR"},
        "mixed_precision": "no",
        "num_machines": 1,
        "num_processes": 8,
        "parallelism_config": {"parallelism_config_tp_size": 2, "parallelism_config_cp_size": 1},
    }
