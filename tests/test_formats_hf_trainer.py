"""planner/formats/hf_trainer.py: TrainingArguments (TRL / alignment-handbook YAML, command lines) read from the
stored configs, written back, and their errors."""

import random

import pytest
import yaml
from config_data import accounted, built, config_files, config_text

from planner.errors import PlanError
from planner.formats import FORMATS, detect, round_trip
from planner.formats.accelerate import HYBRID_WHY
from planner.formats.hf_trainer import FORMAT, read
from planner.plan.codec import plan_from_dict

EPOCHS = "the job's length in epochs needs the dataset's size: give workload.steps or train_tokens"
QLORA_DTYPE = (
    "torch_dtype: with 4-bit loading it is the dequantized matmuls' dtype and the unquantized layers' "
    "(embeddings, norms)"
)
ALL = ["q", "k", "v", "o", "gate", "up", "down"]

# each stored config read for 8 GPUs: the plan it says (hand-checked against the file), the model it names when no
# preset has it, and its unmodelled keys
EXPECTED = {
    "sft_full_mistral.yaml": (
        # 16 × accumulation 1 × 8 GPUs; torch_dtype bfloat16: a full fine-tune of bf16 parameters (no fp32 master)
        {
            "model": {"preset": "mistral-7b"},
            "workload": {"task": "finetune", "global_batch_size": 128, "sequence_length": 2048, "micro_batch_size": 16},
            "precision": {"master_weights": "none", "compute": "bf16"},
            "techniques": {"attention": "flash", "activation_checkpointing": "full"},
        },
        "",
        (f"num_train_epochs: {EPOCHS}",),
    ),
    "sft_qlora_mistral.yaml": (
        {
            "model": {"preset": "mistral-7b"},
            "workload": {
                "task": "qlora",
                "global_batch_size": 64,
                "sequence_length": 2048,
                "micro_batch_size": 4,
                "lora": {"targets": ALL, "rank": 16, "alpha": 16.0, "dropout": 0.05},
            },
            "precision": {"weights": "nf4", "compute": "bf16"},
            "techniques": {"attention": "flash", "activation_checkpointing": "full"},
        },
        "",
        (QLORA_DTYPE, f"num_train_epochs: {EPOCHS}"),
    ),
    "dpo_qlora.yaml": (
        # DPO's max_length 1024; paged_adamw_32bit: bitsandbytes' paged AdamW
        {
            "workload": {
                "task": "qlora",
                # beta makes it a DPOConfig (loss_type sigmoid); a PEFT model's reference is its adapters disabled
                "objective": "preference",
                "preference": {"loss_type": "dpo", "reference": "adapters_disabled"},
                "global_batch_size": 128,
                "sequence_length": 1024,
                "micro_batch_size": 4,
                "lora": {"targets": ALL, "rank": 128, "alpha": 128.0, "dropout": 0.05},
            },
            "precision": {"weights": "nf4", "compute": "bf16", "optimizer": "paged_adamw"},
            "techniques": {"attention": "flash", "activation_checkpointing": "full"},
        },
        "example-org/chat-7b-sft-qlora",
        (QLORA_DTYPE, f"num_train_epochs: {EPOCHS}"),
    ),
    "sft_long_liger.yaml": (
        # use_liger_kernel: Liger's fused linear cross-entropy
        {
            "workload": {"task": "finetune", "global_batch_size": 16, "sequence_length": 65536, "micro_batch_size": 1},
            "precision": {"master_weights": "none", "compute": "bf16"},
            "techniques": {"attention": "flash", "activation_checkpointing": "full", "loss": "fused"},
        },
        "HuggingFaceTB/SmolLM3-3B-checkpoints",
        (f"num_train_epochs: {EPOCHS}",),
    ),
    "model_only.yaml": (
        # only the model is said: TrainingArguments' micro-batch 8 and TRL's max_length 1024 are written
        {
            "model": {"preset": "qwen2.5-0.5b"},
            "workload": {"task": "finetune", "micro_batch_size": 8, "sequence_length": 1024},
        },
        "",
        (),
    ),
    "sft_full_cli.sh": (  # Qwen2-0.5B has Qwen2.5-0.5B's architecture (models.yaml same_architecture)
        {
            "model": {"preset": "qwen2.5-0.5b"},
            "workload": {"task": "finetune", "global_batch_size": 128, "sequence_length": 1024, "micro_batch_size": 2},
        },
        "",
        (f"--num_train_epochs: {EPOCHS}",),
    ),
    "sft_lora_cli.sh": (
        # lora_dropout absent: TRL's 0.05
        {
            "model": {"preset": "qwen2.5-0.5b"},
            "workload": {
                "task": "lora",
                "lora": {"dropout": 0.05, "rank": 32, "alpha": 16.0},
                "global_batch_size": 128,
                "sequence_length": 1024,
                "micro_batch_size": 2,
            },
        },
        "",
        (f"--num_train_epochs: {EPOCHS}",),
    ),
}


def test_every_stored_config_has_expectations():
    assert sorted(EXPECTED) == config_files("hf_trainer")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_stored_configs_read(name):
    plan, model_name, unmodelled = EXPECTED[name]
    imported = read(config_text("hf_trainer", name), gpus=8)
    assert imported.plan == {"framework": "hf_trainer", "hardware": {"count": 8}, **plan}
    assert imported.model_name == model_name
    assert imported.unmodelled == unmodelled
    assert imported.unknown == ()
    assert built(imported).workload.task == plan["workload"]["task"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_key_is_accounted_for(name):
    text = config_text("hf_trainer", name)
    keys = (
        [f"--{token[2:]}" for token in text.split() if token.startswith("--")]
        if name.endswith(".sh")
        else list(yaml.safe_load(text))
    )
    imported = read(text, gpus=8)
    said = accounted(imported) | ({"model_name_or_path", "--model_name_or_path"} if imported.model_name else set())
    assert [key for key in keys if key not in said] == []


def test_command_line_with_launcher_and_environment():
    imported = read(
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True WANDB_PROJECT=x accelerate launch "
        "--num_processes 4 --use_fsdp --fsdp_sharding_strategy SHARD_GRAD_OP train.py "
        "--model_name_or_path meta-llama/Llama-3.1-8B --bf16 --per_device_train_batch_size=2 "
        "--gradient_checkpointing True --optim adamw_torch --lora_target_modules q_proj k_proj "
        "--use_peft --max_steps 500 --torch_compile false --tf32 true"
    )
    assert imported.plan == {
        "framework": "accelerate_fsdp",
        "model": {"preset": "llama-3.1-8b"},
        "hardware": {"count": 4},
        "techniques": {"expandable_segments": True, "activation_checkpointing": "full", "compile": False},
        "parallelism": {"zero_stage": 2},
        "workload": {
            "task": "lora",
            "lora": {"rank": 16, "alpha": 32.0, "dropout": 0.05, "targets": ["q", "k"]},
            "steps": 500,
            "sequence_length": 1024,
            "micro_batch_size": 2,
        },
        "precision": {"compute": "bf16", "optimizer": "adamw", "optimizer_impl": "foreach"},
    }
    assert imported.ignored[:1] == ("WANDB_PROJECT",)
    assert imported.unmodelled == (
        "--tf32: TF32 matmuls speed up fp32 compute; the time model does not tell them apart",
    )
    assert built(imported).parallelism.zero_stage == 2


def test_accelerate_launch_deepspeed_plugin_options():
    imported = read(
        "accelerate launch --use_deepspeed --zero_stage 3 --offload_optimizer_device cpu "
        "--num_processes 8 --mixed_precision bf16 --zero3_init_flag true train.py "
        "--per_device_train_batch_size 1 --bf16 --gradient_accumulation_steps 2"
    )
    assert imported.plan == {
        "framework": "deepspeed",
        "parallelism": {"zero_stage": 3},
        "techniques": {"offload": "optimizer"},
        "hardware": {"count": 8},
        "precision": {"compute": "bf16"},
        "workload": {"task": "finetune", "sequence_length": 1024, "micro_batch_size": 1, "global_batch_size": 16},
    }
    assert set(imported.ignored) == {"--use_deepspeed", "--mixed_precision", "--zero3_init_flag"}
    assert imported.unknown == imported.unmodelled == ()


def test_fsdp_arguments_and_flat_parameters():
    # transformers' fsdp_config use_orig_params defaults to true: FSDP1 full sharding of a LoRA plan has flat params
    imported = read(
        "model_name_or_path: meta-llama/Llama-3.1-8B\nuse_peft: true\nfsdp: full_shard auto_wrap offload\n"
        "per_device_train_batch_size: 1\n",
        gpus=8,
    )
    assert imported.plan["framework"] == "accelerate_fsdp"
    assert imported.plan["parallelism"] == {"zero_stage": 3, "flat_params": True}
    assert imported.plan["techniques"] == {"offload": "optimizer_and_params"}
    assert built(imported).parallelism.flat_params
    imported = read(
        "use_peft: true\nfsdp: hybrid_shard\nfsdp_config:\n  version: 2\n  backward_prefetch: "
        "backward_pre\nper_device_train_batch_size: 1\n"
    )
    assert "parallelism" not in imported.plan
    assert imported.unmodelled[0] == f"fsdp: {HYBRID_WHY}"
    assert imported.unmodelled[1].startswith("fsdp_config.backward_prefetch: the next unit's parameters")


def test_deepspeed_argument_names_its_file():
    imported = read("per_device_train_batch_size: 4\ndeepspeed: configs/ds_zero3.json\n")
    assert imported.plan["framework"] == "deepspeed"
    assert "parallelism" not in imported.plan
    assert imported.unmodelled == (
        "deepspeed: configs/ds_zero3.json is not beside the config: its ZeRO stage, offload and buckets are not "
        "read (give the file, or read it with the deepspeed format)",
    )


def test_deepspeed_file_beside_the_config_is_read():
    """The file's contents (ZeRO-3, parameters and optimizer on the CPU), not its name (zero2), on a command line."""
    zero3 = (
        '{"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, '
        '"offload_param": {"device": "cpu"}}}'
    )
    imported = read(
        "deepspeed --num_gpus 8 train.py --per_device_train_batch_size 2 --deepspeed ds/zero2.json",
        files={"ds/zero2.json": zero3}.get,
    )
    assert imported.plan["parallelism"] == {"zero_stage": 3}
    assert imported.plan["techniques"]["offload"] == "optimizer_and_params"
    assert {r.source for r in imported.read if r.plan_key.startswith(("parallelism", "techniques.offload"))} == {
        "--deepspeed: zero_optimization.stage",
        "--deepspeed: zero_optimization.offload_param.device",
    }


def test_optimizers_and_dtypes():
    imported = read(
        "per_device_train_batch_size: 1\noptim: adamw_torch_8bit\nuse_peft: true\ndtype: float16\n"
        "load_in_8bit: false\nfp16: true\nbf16: false\n"
    )
    assert imported.plan["precision"] == {
        "weights": "fp16",
        "compute": "fp16",
        "optimizer": "adamw_8bit",
        "optimizer_library": "torchao",
    }
    imported = read("per_device_train_batch_size: 1\noptim: ademamix\ntorch_dtype: auto\n")
    assert imported.unmodelled == (
        "torch_dtype: 'auto' loads the checkpoint's own dtype (its config.json): give "
        "precision.master_weights none for a 16-bit checkpoint",
        "optim: 'ademamix' has no plan optimizer",
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("per_device_train_batch_size: 0\n", "per_device_train_batch_size: 0 must be an integer ≥ 1"),
        (
            "per_device_train_batch_size: 1\nbf16: true\nfp16: true\n",
            "bf16: True and fp16 are both true; the Trainer runs one",
        ),
        (
            "per_device_train_batch_size: 1\nload_in_4bit: true\n",
            "load_in_4bit: True needs use_peft: a quantized model trains only through adapters",
        ),
        (
            "per_device_train_batch_size: 1\nuse_peft: true\nload_in_4bit: true\nload_in_8bit: true\n",
            "load_in_4bit: True and load_in_8bit are both true; TRL loads one",
        ),
        (
            "per_device_train_batch_size: 1\nuse_peft: true\nload_in_4bit: true\nbnb_4bit_quant_type: int4\n",
            "bnb_4bit_quant_type: 'int4' is not one of: nf4, fp4",
        ),
        (
            "per_device_train_batch_size: 1\nattn_implementation: paged\n",
            "attn_implementation: 'paged' is not one of: eager, sdpa, flash_attention_2",
        ),
        (
            "per_device_train_batch_size: 1\nfsdp: quarter_shard\n",
            "fsdp: 'quarter_shard' is not a list of fsdp options",
        ),
        (
            "per_device_train_batch_size: 1\ngradient_checkpointing: sometimes\n",
            "gradient_checkpointing: 'sometimes' must be true or false",
        ),
        ("per_device_train_batch_size: 1\ndtype: float64\n", "dtype: 'float64' is not one of: bfloat16, float16"),
        (
            "python train.py --per_device_train_batch_size 'two",
            'config: "python train.py --per_device_train_batch_size \'two" is not shell text shlex can split '
            "(No closing quotation)",
        ),
        ("echo --per_device_train_batch_size 2", "config: is not a training command line: it names no script"),
        ("torchrun --nproc_per_node 8 train.py --per_device_train_batch_size 2", None),
    ],
)
def test_bad_configs_name_the_key(text, message):
    if message is None:  # the launcher's count against the one given
        with pytest.raises(PlanError, match=r"^--num_processes: 8 differs from the GPU count given \(4\)$"):
            read(text, gpus=4)
        return
    with pytest.raises(PlanError) as caught:
        read(text)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_detect_stored_configs(name):
    assert detect(config_text("hf_trainer", name)) is FORMAT


@pytest.mark.parametrize(
    "text",
    [
        "base_model: meta-llama/Llama-3.1-8B\nsequence_len: 4096\nmicro_batch_size: 2\ngradient_accumulation_steps: "
        "4\n",
        "model:\n  _component_: torchtune.models.llama3_1.llama3_1_8b\nbatch_size: 2\nmax_steps_per_epoch: 10\n"
        "output_dir: /tmp\n",
        "distributed_type: MULTI_GPU\nnum_processes: 8\n",
        '{"train_micro_batch_size_per_gpu": 4}',
        "vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size 2",
    ],
)
def test_detect_rejects_others(text):
    assert not FORMAT.detect(text)


def test_registered():
    assert FORMATS["hf_trainer"] is FORMAT


OPTIMIZERS = [
    ("adamw", "fused", None),
    ("adamw", "foreach", None),
    ("adamw", "forloop", None),
    ("adamw_8bit", None, "bitsandbytes"),
    ("adamw_8bit", None, "torchao"),
    ("paged_adamw", None, None),
    ("paged_adamw_8bit", None, None),
    ("adafactor", None, None),
    ("lion", None, None),
    ("sgd", None, None),
]


def _random_plan(rng):
    """A plan whose every `says` key TrainingArguments can say."""
    task, framework = rng.choice(["finetune", "lora", "qlora"]), rng.choice(["hf_trainer", "accelerate_fsdp"])
    stage = rng.choice([0, 2, 3]) if framework == "accelerate_fsdp" else 0
    compute = rng.choice(["fp32", "bf16", "fp16"])
    optimizer, impl, library = rng.choice(OPTIMIZERS)
    precision = {
        "compute": compute,
        "optimizer": optimizer,
        **({"optimizer_impl": impl} if impl else {}),
        **({"optimizer_library": library} if library else {}),
    }
    if task == "finetune":
        precision["master_weights"] = rng.choice(["fp32", "none"]) if compute != "fp32" else "fp32"
    elif task == "lora":
        precision["weights"] = rng.choice(["bf16", "fp16", "fp32"])
    else:
        precision["weights"] = rng.choice(["nf4", "int8"])
        precision["double_quant"] = precision["weights"] == "nf4" and rng.random() < 0.5
    gpus, micro, steps = rng.choice([1, 2, 8]), rng.choice([1, 3]), rng.choice([1, 4])
    workload = {
        "task": task,
        "micro_batch_size": micro,
        "global_batch_size": micro * steps * gpus,
        "sequence_length": rng.choice([512, 4096]),
        "steps": rng.choice([None, 100]),
    }
    if task != "finetune":
        workload["lora"] = {
            "rank": rng.choice([4, 64]),
            "alpha": rng.choice([8.0, 32.0]),
            "dropout": rng.choice([0.0, 0.1]),
            "targets": rng.choice([["q", "v"], ALL, ["o"]]),
            "variant": rng.choice(["lora", "dora"]),
        }
    techniques = {
        "activation_checkpointing": rng.choice(["none", "full"]),
        "compile": rng.random() < 0.5,
        "loss": rng.choice(["full", "fused"]),
        "attention": rng.choice(["flash", "eager"]),
        "activation_offload": rng.random() < 0.5,
        "offload": rng.choice(["none", "optimizer_and_params"]) if stage == 3 else "none",
    }
    flat = stage == 3 and task != "finetune" and rng.random() < 0.5
    return plan_from_dict(
        {
            "model": {"preset": "llama-3.1-8b"},
            "framework": framework,
            "workload": workload,
            "precision": precision,
            "techniques": techniques,
            "parallelism": {"zero_stage": stage, "flat_params": flat},
            "hardware": {"count": gpus},
        }
    )


@pytest.mark.parametrize("seed", range(150))
def test_round_trip(seed):
    assert round_trip(_random_plan(random.Random(seed)), FORMAT) == {}


def test_round_trip_catches_what_it_cannot_say():
    plan = plan_from_dict({"model": {"preset": "llama-3.1-8b"}, "techniques": {"loss": "chunked"}})
    assert round_trip(plan, FORMAT) == {
        "workload.task": ("pretrain", "finetune"),
        "techniques.loss": ("chunked", "full"),
    }


def test_written_config_is_trls_spelling():
    plan = plan_from_dict(
        {
            "model": {"preset": "llama-3.1-8b"},
            "framework": "accelerate_fsdp",
            "workload": {
                "task": "qlora",
                "micro_batch_size": 2,
                "global_batch_size": 32,
                "sequence_length": 2048,
                "lora": {"rank": 16, "targets": ["q", "v"]},
            },
            "precision": {"optimizer": "paged_adamw_8bit", "double_quant": True},
            "techniques": {"activation_checkpointing": "full"},
            "parallelism": {"zero_stage": 3, "flat_params": True},
            "hardware": {"count": 8},
        }
    )
    assert yaml.safe_load(FORMAT.write(plan)) == {
        "model_name_or_path": "meta-llama/Llama-3.1-8B",
        "use_peft": True,
        "lora_r": 16,
        "lora_alpha": 16.0,
        "lora_dropout": 0.0,
        "lora_target_modules": ["q_proj", "v_proj"],
        "load_in_4bit": True,
        "bnb_4bit_quant_type": "nf4",
        "use_bnb_nested_quant": True,
        "bf16": True,
        "fp16": False,
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 2,
        "max_length": 2048,
        "max_steps": -1,
        "gradient_checkpointing": True,
        "attn_implementation": "flash_attention_2",
        "optim": "paged_adamw_8bit",
        "fsdp": "full_shard auto_wrap",
        "fsdp_config": {"version": 1, "use_orig_params": True},
    }


def test_a_flag_of_many_values_is_read_in_linear_time():
    """Each value of a flag made a new list of all before it: 100,000 values, 5 billion copies."""
    imported = read("python train.py --per_device_train_batch_size 2 --report_to " + "x " * 100_000)
    assert imported.plan["workload"]["micro_batch_size"] == 2


def test_null_dtype_is_from_pretrained_default():
    """torch_dtype: null (alignment-handbook's DPO configs) is HfArgumentParser's None: as when absent."""
    r = read("model_name_or_path: meta-llama/Llama-3.1-8B\ntorch_dtype: null\n")
    assert "master_weights" not in r.plan.get("precision", {})
    assert r.plan["workload"]["task"] == "finetune"


def test_grpo_config_reads_as_a_grpo_plan():
    """A GRPOConfig (TRL's grpo_config.py keys) with colocated vLLM and sleep mode: objective grpo and workload.rl."""
    text = """
model_name_or_path: Qwen/Qwen2.5-1.5B-Instruct
bf16: true
per_device_train_batch_size: 8
num_generations: 8
max_completion_length: 1024
beta: 0.04
use_vllm: true
vllm_mode: colocate
vllm_gpu_memory_utilization: 0.4
vllm_enable_sleep_mode: true
"""
    imported = read(text, gpus=8)
    wl = imported.plan["workload"]
    assert wl["objective"] == "grpo" and wl["sequence_length"] == 512 + 1024
    assert wl["rl"] == {
        "num_generations": 8,
        "completion_length": 1024,
        "beta": 0.04,
        "engine": "colocate",
        "gpu_memory_utilization": 0.4,
        "sleep_level": 2,
    }
    assert imported.unknown == () and not any(u.startswith("beta") for u in imported.unmodelled)
    plan = built(imported)
    assert plan.workload.rl.sleep_level == 2 and plan.workload.reference == "separate"


def test_grpo_without_vllm_plans_a_server_and_says_so():
    imported = read("num_generations: 4\nper_device_train_batch_size: 4\n", gpus=2)
    assert imported.plan["workload"]["rl"]["engine"] == "server"
    assert any(u.startswith("use_vllm: false") for u in imported.unmodelled)
