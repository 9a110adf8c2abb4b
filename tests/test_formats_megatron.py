"""planner/formats/megatron.py: launch scripts (tests/data/configs/megatron) and command lines."""

from pathlib import Path

import pytest

from planner.errors import OverLimit, PlanError
from planner.formats import megatron as mg
from planner.formats import overlay, round_trip
from planner.plan.codec import plan_from_dict

CONFIGS = Path(__file__).parent / "data" / "configs"


def text(name: str) -> str:
    return (CONFIGS / "megatron" / name).read_text()


def test_llama3_8b_fp8_script():
    imported = mg.read(text("llama3_8b_fp8.sh"), gpus=8)
    assert imported.plan == {
        "framework": "megatron",
        "hardware": {"count": 8},
        "workload": {
            "sequence_length": 8192,
            "micro_batch_size": 1,
            "global_batch_size": 128,
            "train_tokens": 1953125000 * 8192,
        },
        "parallelism": {"tensor": 1, "context": 1, "zero_stage": 1},
        "techniques": {"attention": "flash"},
        "precision": {"gradients": "bf16", "compute": "fp8"},
        "model": {
            "num_layers": 32,
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "intermediate_size": 14336,
            "head_dim": 128,
            "num_kv_heads": 8,
            "mlp": "swiglu",
            "norm": "rmsnorm",
            "tie_embeddings": False,
            "bias": False,
            "qk_norm": False,
            "vocab_size": 128256,
        },
    }
    assert imported.unmodelled == (
        "--cross-entropy-loss-fusion: the fused vocab-parallel cross-entropy keeps fewer fp32 copies of the logits "
        "than the plan's full loss",
        "--empty-unused-memory-level: emptying the allocator's cache between steps is not modelled",
        "--fp8-param-gather: float8 parameters all-gathered without a bf16 copy have no plan key",
    )
    assert imported.unknown == () and imported.model_name == ""
    assert {
        "--lr",
        "--save",
        "--overlap-grad-reduce",
        "--sequence-parallel",
        "--nproc_per_node",
        "--position-embedding-type",
    } <= set(imported.ignored)
    plan = plan_from_dict(imported.plan)
    assert plan.model.params.total == 8_030_261_248  # Llama 3.1 8B


def test_gpt3_175b_script_lacks_its_vocabulary():
    imported = mg.read(text("gpt_175b_tp8_pp16.sh"), gpus=1024)
    assert imported.plan == {
        "framework": "megatron",
        "hardware": {"count": 1024},
        "workload": {"sequence_length": 2048, "micro_batch_size": 1, "global_batch_size": 1536, "steps": 500000},
        "parallelism": {"tensor": 8, "pipeline": 16, "zero_stage": 0, "sequence_parallel": False},
        "techniques": {"attention": "flash"},
        "precision": {"compute": "fp16"},
    }
    assert imported.model_name == "Megatron-LM GPT model"
    assert imported.unmodelled == (
        "--num-layers, --hidden-size, --num-attention-heads: an incomplete architecture (no vocab_size); give the "
        "model as a preset or its keys",
        "--step-batch-size-schedule: the global batch ramps up; the plan's is the final one",
    )
    assert imported.unknown == ()


def test_mixtral_script():
    imported = mg.read(text("moe_8x7b_ep8.sh"), gpus=64)
    assert imported.plan["parallelism"] == {"tensor": 1, "pipeline": 4, "expert": 8, "zero_stage": 1}
    assert imported.plan["precision"] == {"compute": "bf16"}
    assert imported.model_name == "Megatron-LM GPT model" and "model" not in imported.plan
    assert imported.unmodelled[0] == (
        "--tokenizer-model: the tokenizer ($2) sets the vocabulary; give model.vocab_size"
    )
    plan = plan_from_dict(overlay({"model": {"preset": "mixtral-8x7b"}}, imported.plan))
    assert plan.parallelism.data == 16


def test_plain_command_line_with_megatron_defaults():
    imported = mg.read(
        "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 24 --hidden-size 2048 "
        "--num-attention-heads 16 --seq-length 4096 --vocab-size 50257 --tensor-model-parallel-size 2 "
        "--bf16 --recompute-granularity full --recompute-method block --recompute-num-layers 2",
        gpus=8,
    )
    assert imported.plan["model"] == {
        "num_layers": 24,
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "intermediate_size": 8192,
        "mlp": "gelu",
        "norm": "layernorm",
        "tie_embeddings": True,
        "bias": True,
        "qk_norm": False,
        "vocab_size": 50432,
    }
    assert imported.plan["parallelism"] == {"tensor": 2, "zero_stage": 0, "sequence_parallel": False}
    assert imported.plan["techniques"] == {"activation_checkpointing": "full"}
    assert imported.unmodelled == (
        "--recompute-method: block with --recompute-num-layers 2 recomputes groups or some layers; modelled as "
        "every layer (full)",
        "--position-embedding-type: absent: arguments.py default learned_absolute adds a position table the model "
        "keys do not count",
    )
    plan_from_dict(imported.plan)


def test_uneven_and_virtual_pipelines():
    imported = mg.read(
        "--num-layers 30 --pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 6 "
        "--decoder-last-pipeline-num-layers 6"
    )
    assert imported.plan["parallelism"]["pipeline_layers"] == [6, 9, 9, 6]
    imported = mg.read(
        "--num-layers 32 --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 2 "
        "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split"
    )
    assert imported.plan["parallelism"] == {
        "pipeline": 4,
        "zero_stage": 0,
        "virtual_stages": 4,
        "pipeline_schedule": "interleaved_1f1b",
        "pipeline_split": "weighted",
    }


def test_shell_variables_and_moe():
    script = (
        'NUM_LAYERS=${NUM_LAYERS:-"4"}\nEP=4\nARGS=(\n    --num-layers $NUM_LAYERS  # layers\n'
        "    --hidden-size 1024 --num-attention-heads 8 --vocab-size 32000 --swiglu\n"
        "    --num-experts 8 --moe-ffn-hidden-size 512 --moe-shared-expert-intermediate-size 1024\n"
        "    --expert-model-parallel-size ${EP} --moe-expert-capacity-factor 1.25 --use-torch-fsdp2\n)\n"
        "torchrun pretrain_gpt.py ${ARGS[@]} --position-embedding-type rope\n"
    )
    imported = mg.read(script, gpus=8)
    assert imported.plan["model"]["num_layers"] == 4
    assert imported.plan["model"]["shared_experts"] == 2 and imported.plan["model"]["experts_per_token"] == 2
    assert imported.plan["model"]["intermediate_size"] == 2688  # int(8 × 1024 / 3 / 64) × 64
    assert imported.plan["parallelism"] == {"expert": 4, "zero_stage": 3}
    assert imported.plan["techniques"] == {"moe_capacity_factor": 1.25}
    plan_from_dict(imported.plan)


@pytest.mark.parametrize(
    "config, message",
    [
        ("--num-layers $NUM_LAYERS --bf16", "--num-layers: '$NUM_LAYERS' must be an integer ≥ 1"),
        ("--recompute-granularity some", "--recompute-granularity: 'some' is not one of: full, selective"),
        (
            "--fp8-format hybrid --fp8-recipe delayed_scaling",
            "--fp8-recipe: 'delayed_scaling' is not one of: delayed, tensorwise, mxfp8, blockwise",
        ),
        (
            "--num-layers 30 --pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 7",
            "--decoder-first-pipeline-num-layers: [7] leaves 23 of --num-layers (30) for 3 middle stages: they must "
            "share "
            "them evenly",
        ),
        ("--micro-batch-size 0", "--micro-batch-size: '0' must be an integer ≥ 1"),
        (
            '--data-path "unclosed',
            "config: '--data-path \"unclosed' is not shell text shlex can split (No closing quotation)",
        ),
    ],
)
def test_errors(config, message):
    with pytest.raises(PlanError) as error:
        mg.read(config)
    assert str(error.value) == message


BASE = {"model": {"preset": "llama-3.1-8b"}, "framework": "megatron", "hardware": {"count": 16}}


@pytest.mark.parametrize(
    "over",
    [
        {},
        {"workload": {"sequence_length": 8192, "micro_batch_size": 2, "global_batch_size": 256, "steps": 100}},
        {"workload": {"train_tokens": 4096 * 1000}},
        {"precision": {"compute": "fp8", "fp8_recipe": "mxfp8", "gradients": "bf16"}},
        {"precision": {"compute": "fp16", "optimizer": "sgd_momentum"}},
        {"precision": {"compute": "fp32"}, "techniques": {"attention": "eager"}},
        {"techniques": {"activation_checkpointing": "full", "offload": "optimizer"}},
        {"techniques": {"activation_checkpointing": "selective"}},
        {"parallelism": {"zero_stage": 0, "tensor": 2, "sequence_parallel": False}},
        {"parallelism": {"zero_stage": 2}},
        {"parallelism": {"zero_stage": 3, "context": 2}},
        {"parallelism": {"tensor": 4, "pipeline": 2, "pipeline_split": "weighted"}},
        {
            "parallelism": {"pipeline": 4, "pipeline_schedule": "interleaved_1f1b", "virtual_stages": 2},
            "workload": {"global_batch_size": 64},
        },
        {"parallelism": {"pipeline": 4, "pipeline_layers": [7, 9, 9, 7]}},
        {"model": {"preset": "mixtral-8x7b"}, "parallelism": {"expert": 8}, "techniques": {"moe_capacity_factor": 1.5}},
    ],
)
def test_round_trip(over):
    plan = plan_from_dict(overlay(BASE, over))
    assert round_trip(plan, mg.FORMAT) == {}


def test_written_script_reads_back_its_model():
    for preset in ("llama-3.1-8b", "deepseek-v3", "qwen3-30b-a3b", "gpt2"):
        plan = plan_from_dict(overlay(BASE, {"model": {"preset": preset}, "hardware": {"count": 8}}))
        imported = mg.read(mg.write(plan), gpus=8)
        assert imported.unknown == () and imported.model_name == ""
        back = plan_from_dict(imported.plan).model
        assert back.params.total == plan.model.params.total, preset


def test_write_names_what_it_cannot_say():
    plan = plan_from_dict(overlay(BASE, {"techniques": {"activation_checkpointing": "selective_op"}}))
    written = mg.write(plan)
    assert written.startswith("#!/bin/bash\n")
    assert (
        f"# not said: techniques.activation_checkpointing ({mg.CANNOT_SAY['techniques.activation_checkpointing']})"
    ) in written
    assert "    --use-distributed-optimizer \\\n" in written


# --- issue 27: linear in the script, whatever its variables ---------------------------------------------------------
def test_a_default_that_never_closes_is_scanned_once():
    """`${a:-` 16,000 times with no closing brace: the regex scanned to the line's end from each (80 kB: 29 s)."""
    assert mg.parse("--x " + "${a:-" * 16_000) == {"x": "${a:-" * 16_000}
    assert mg.parse("--x ${a:-b}" + "${a:-" * 16_000) == {"x": "b" + "${a:-" * 16_000}
    assert mg.parse("A=1\nB=${A}2$A\n--seq-length ${B} --y ${C:-3} --z $C")["seq-length"] == "121"


@pytest.mark.parametrize(
    "script",
    [
        "A=x\n" + "A=$A$A\n" * 20 + "--seq-length $A\n",  # doubles each line: a megabyte by line 20 (43 s)
        "--x " + "$a " * 10_001,  # more substitutions than a script makes
    ],
)
def test_variables_expand_within_a_budget(script):
    with pytest.raises(OverLimit) as error:
        mg.parse(script)
    assert error.value.field == "config" and error.value.rule.startswith("substitutes shell variables more than")


def test_a_flags_values_are_found_without_copying_the_line():
    """Each of 200,000 flags used to copy the rest of its line to look for its values."""
    assert mg.parse("--a " * 200_000) == {"a": True}
    assert mg.parse("--a 1 2 --b 3 pretrain_gpt.py 4") == {"a": ["1", "2"], "b": "3"}


QUOTED_OVER_LINES = """#!/bin/bash
GPUS_PER_NODE=8
MODEL_ARGS="
    --num-layers 32
    --hidden-size 4096
    --seq-length 4096
"
TRAINING_ARGS="--micro-batch-size 1 --global-batch-size 256
    --train-iters 1000 --bf16"
torchrun --nproc_per_node $GPUS_PER_NODE pretrain_gpt.py \\
    $MODEL_ARGS $TRAINING_ARGS --tensor-model-parallel-size 2
"""


def test_quoted_option_strings_over_several_lines_are_read():
    """Option strings quoted over several lines (and a quoted one that starts with --) expand into their flags."""
    args = mg.parse(QUOTED_OVER_LINES)
    assert (args["num-layers"], args["hidden-size"], args["seq-length"]) == ("32", "4096", "4096")
    assert (args["micro-batch-size"], args["global-batch-size"], args["train-iters"], args["bf16"]) == (
        "1",
        "256",
        "1000",
        True,
    )
    plan = mg.read(QUOTED_OVER_LINES).plan
    assert plan["workload"] == {"sequence_length": 4096, "micro_batch_size": 1, "global_batch_size": 256, "steps": 1000}
    assert plan["parallelism"]["tensor"] == 2
