"""planner/formats/unsloth.py: Unsloth scripts (the project's own, in tests/data/configs/unsloth) read with ast and
unsloth-cli.py command lines, with Unsloth's defaults named and non-literal arguments said as not read."""

from pathlib import Path

import pytest

from planner.catalog import load_catalog
from planner.errors import PlanError
from planner.formats import FORMATS, detect, export_config, plan_from_config, read_config
from planner.formats.unsloth import FORMAT, read
from planner.memory import estimate

DATA = Path(__file__).parent / "data" / "configs" / "unsloth"
CORPUS = Path("/work/shared/configs/unsupported/unsloth/unsloth-cli__L10.sh")
ALL = ["q", "k", "v", "o", "gate", "up", "down"]
PADDED = (
    "each batch is padded to its longest sample, up to the maximum length; the plan takes every sequence at it "
    "(an upper bound)"
)
KERNELS = (
    "(Unsloth's kernels): its Triton RMSNorm, SwiGLU and RoPE kernels save fewer intermediates than the eager "
    "layers planned (kernels/*.py): the activations are an upper bound"
)


def _read(name, **kwargs):
    return read((DATA / name).read_text(), **kwargs)


def _sources(imported):
    return {k.plan_key: k.source for k in imported.read}


def test_qlora_script():
    imported = _read("qlora_llama3.py", gpus=2)
    assert imported.plan == {
        "framework": "hf_trainer",
        "hardware": {"count": 2},
        "model": {"preset": "llama-3.1-8b"},
        "precision": {
            "weights": "nf4",
            "double_quant": True,
            "compute": "bf16",
            "optimizer": "adamw_8bit",
            "optimizer_library": "bitsandbytes",
        },
        "techniques": {
            "activation_checkpointing": "full",
            "activation_offload": True,
            "loss": "fused",
            "attention": "flash",
        },
        "workload": {
            "task": "qlora",
            "lora": {"rank": 32, "alpha": 64, "dropout": 0, "targets": ["q", "k", "v", "o"]},
            "sequence_length": 4096,  # max_seq_length = 4096, a top-level name read through
            "global_batch_size": 2 * 4 * 2,
            "micro_batch_size": 2,
            "steps": 60,
        },
    }
    sources = _sources(imported)
    assert sources["workload.sequence_length"] == "FastLanguageModel.from_pretrained(max_seq_length=) line 9"
    assert sources["techniques.activation_offload"] == (
        "FastLanguageModel.get_peft_model(use_gradient_checkpointing=) line 15 (layer inputs copied to CPU buffers)"
    )
    assert imported.unmodelled == (
        "FastLanguageModel.from_pretrained (line 45): a later call than line 9's: not read",
        "SFTConfig(bf16=) line 30: not a literal: not read (the dtype planned is from_pretrained's)",
        "SFTConfig(fp16=) line 30: not a literal: not read (the dtype planned is from_pretrained's)",
        f"packing (absent: off): {PADDED}",
        KERNELS,
    )
    assert imported.notes == (
        "model unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit resolved as preset llama-3.1-8b by its name and "
        "meta-llama/Llama-3.1-8B's alike without fine-tune or repack suffixes and Meta's prefix (both llama-3.1-8b; "
        "the weights' quantization is the config's, not the name's)",
    )
    assert imported.unknown == () and "SFTConfig(learning_rate=) line 30" in imported.ignored


def test_every_default_is_named():
    imported = _read("defaults.py")
    assert imported.plan["workload"] == {
        "task": "qlora",
        "lora": {"rank": 16, "alpha": 16, "dropout": 0.0, "targets": ALL},
        "sequence_length": 2048,
        "micro_batch_size": 8,
        "steps": 10,
    }
    assert _sources(imported) == {
        "model.preset": "FastLanguageModel.from_pretrained(model_name=) line 5",
        "workload.task": "from_pretrained load_in_4bit (absent: Unsloth's default True)",
        "precision.weights": "from_pretrained load_in_4bit (absent: Unsloth's default True)",
        "precision.double_quant": "from_pretrained load_in_4bit (absent: Unsloth's default True) (Unsloth's "
        "BitsAndBytesConfig: nf4, double quantization)",
        "workload.lora.rank": "get_peft_model r (absent: Unsloth's default 16)",
        "workload.lora.alpha": "get_peft_model lora_alpha (absent: Unsloth's default 16)",
        "workload.lora.dropout": "get_peft_model lora_dropout (absent: Unsloth's default 0.0)",
        "workload.lora.targets": "get_peft_model target_modules (absent: Unsloth's default ['q_proj', 'k_proj', "
        "'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'])",
        "precision.compute": "from_pretrained dtype (absent: Unsloth's default None) (None: bfloat16 where the GPU "
        "supports it, else float16; planned as bf16)",
        "workload.sequence_length": "from_pretrained max_seq_length (absent: Unsloth's default 2048)",
        "techniques.activation_checkpointing": "get_peft_model use_gradient_checkpointing (absent: Unsloth's "
        "default 'unsloth')",
        "techniques.activation_offload": "get_peft_model use_gradient_checkpointing (absent: Unsloth's default "
        "'unsloth') (layer inputs copied to CPU buffers)",
        "techniques.loss": "(Unsloth's unsloth_fused_ce_loss: the output head and loss in chunks of tokens)",
        "techniques.attention": "(Unsloth's attention: flash-attn, xformers or SDPA, a fused kernel)",
        "workload.micro_batch_size": "(TrainingArguments' default per_device_train_batch_size)",
        "workload.steps": "max_steps",
    }


def test_full_finetune_with_a_non_literal():
    imported = _read("full_finetune.py", gpus=1)
    assert imported.plan["workload"] == {
        "task": "finetune",
        "sequence_length": 128,  # the trainer's, under 256
        "micro_batch_size": 8,
        "global_batch_size": 16,
    }
    # bf16 full fine-tuning steps bf16 parameters (vision.py); 128 tokens: plain checkpointing, no offload
    assert imported.plan["precision"] == {
        "compute": "bf16",
        "master_weights": "none",
        "optimizer": "adamw",
        "optimizer_impl": "fused",
    }
    assert imported.plan["techniques"] == {"activation_checkpointing": "full", "loss": "fused", "attention": "flash"}
    assert _sources(imported)["techniques.activation_checkpointing"] == (
        "from_pretrained use_gradient_checkpointing (absent: Unsloth's default 'unsloth') (under 512 tokens: plain "
        "checkpointing)"
    )
    assert (
        "TrainingArguments(per_device_train_batch_size=) line 22: not a literal: not read; planned as if absent "
        "(the Trainer's default)"
    ) in imported.unmodelled


def test_the_corpus_command_line(tmp_path):
    line = (
        "python unsloth-cli.py --model_name unsloth/mistral-7b-bnb-4bit --max_seq_length 256 --r 8 "
        "--use_gradient_checkpointing True --learning_rate 1e-4 --save_gguf"
    )
    imported = read(line, gpus=1)
    # unsloth-cli.py's --load_in_4bit is a switch, off unless given: a 16-bit LoRA
    assert imported.plan["workload"] == {
        "task": "lora",
        "lora": {"rank": 8, "alpha": 16, "dropout": 0.0, "targets": ALL, "variant": "lora"},
        "sequence_length": 256,
        "micro_batch_size": 2,
        "global_batch_size": 8,
        "steps": 400,
    }
    assert imported.plan["precision"] == {
        "compute": "bf16",
        "weights": "bf16",
        "optimizer": "adamw_8bit",
        "optimizer_library": "bitsandbytes",
    }
    assert imported.plan["techniques"]["activation_checkpointing"] == "full"
    assert "activation_offload" not in imported.plan["techniques"]
    assert _sources(imported)["workload.task"] == "--load_in_4bit (absent: unsloth-cli.py's default False)"
    assert imported.unknown == () and {"--learning_rate", "--save_gguf"} <= set(imported.ignored)


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.is_file(), reason="the shared corpus is absent")
def test_the_shared_corpus_line_is_qlora():
    imported = read_config(CORPUS.read_text(), gpus=1)
    assert imported.format == "unsloth" and imported.plan["workload"]["task"] == "qlora"
    assert imported.plan["model"] == {"preset": "llama-3.1-8b"} and imported.plan["workload"]["sequence_length"] == 8192


def test_plans_and_fits():
    imported = _read("qlora_llama3.py", gpus=1)
    plan = plan_from_config(imported, gpu="h100-sxm-80gb")
    est = estimate(plan, load_catalog())
    assert plan.techniques.activation_offload and est.fits


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "from unsloth import FastLanguageModel\nm, t = FastLanguageModel.from_pretrained(model_name='x/y')\n",
            "get_peft_model: absent, and full_finetuning is false: Unsloth trains LoRA adapters (get_peft_model) or "
            "every "
            "weight (full_finetuning=True)",
        ),
        (
            "import unsloth\nFastLanguageModel.from_pretrained(model_name='x/y', load_in_8bit=True, "
            "load_in_4bit=True)\n"
            "FastLanguageModel.get_peft_model(m)\n",
            "load_in_8bit: True with another of load_in_4bit / load_in_16bit: Unsloth loads one",
        ),
        ("import unsloth\nFastLanguageModel.from_pretrained(\n", "script: is not Python that parses (SyntaxError)"),
    ],
)
def test_refused_with_why(text, message):
    with pytest.raises(PlanError) as err:
        read(text)
    assert str(err.value) == message


def test_detected_before_training_arguments():
    assert detect((DATA / "qlora_llama3.py").read_text()) is FORMAT
    assert detect("python unsloth-cli.py --per_device_train_batch_size 2") is FORMAT
    assert detect("python train.py --per_device_train_batch_size 2") is FORMATS["hf_trainer"]


def test_read_only():
    with pytest.raises(PlanError, match="^--to: 'unsloth' is read only"):
        export_config(plan_from_config(_read("defaults.py"), gpu="h100-sxm-80gb"), FORMAT)
