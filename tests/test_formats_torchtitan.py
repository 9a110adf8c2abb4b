"""planner/formats/torchtitan.py: job config TOMLs (tests/data/configs/torchtitan) and command lines."""

from pathlib import Path

import pytest

from planner.errors import PlanError
from planner.formats import overlay, plan_from_config, round_trip
from planner.formats import torchtitan as tt
from planner.plan.codec import plan_from_dict
from planner.plan.models import presets

CONFIGS = Path(__file__).parent / "data" / "configs"


def text(name: str) -> str:
    return (CONFIGS / "torchtitan" / name).read_text()


def test_llama3_8b_toml():
    imported = tt.read(text("llama3_8b.toml"), gpus=64)
    assert imported.plan == {
        "framework": "torchtitan",
        "hardware": {"count": 64},
        "model": {"preset": "llama-3.1-8b"},
        "precision": {"optimizer": "adamw"},
        "techniques": {
            "activation_checkpointing": "selective_op",
            "compile": False,
            "compile_scope": "blocks_and_loss",
        },
        "parallelism": {"tensor": 1, "pipeline": 1, "context": 1, "data": 64, "zero_stage": 3},
        "workload": {"sequence_length": 8192, "steps": 1000, "micro_batch_size": 1},
    }
    assert imported.unmodelled == () and imported.unknown == () and imported.model_name == ""
    assert {
        "optimizer.lr",
        "lr_scheduler.warmup_steps",
        "checkpoint.folder",
        "model.hf_assets_path",
        "quantize.linear.float8.filter_fqns",
        "validation.enable",
    } <= set(imported.ignored)
    plan = plan_from_dict(overlay({"hardware": {"gpu": "a100-sxm-80gb"}}, imported.plan))
    assert plan.precision.optimizer_impl == "fused" and plan.parallelism.data == 64


def test_debug_model_is_its_architecture_and_every_second_layer():
    imported = tt.read(text("llama3_debug.toml"), gpus=8)
    assert imported.plan["model"] == {
        "num_layers": 6,
        "hidden_size": 256,
        "num_attention_heads": 16,
        "intermediate_size": 768,
        "vocab_size": 2048,
    }
    assert imported.plan["techniques"]["activation_checkpointing"] == "every_k"
    assert imported.plan["techniques"]["checkpoint_every"] == 2
    assert "pipeline_schedule" not in imported.plan["parallelism"]  # Interleaved1F1B with no pipeline
    assert "parallelism.pipeline_parallel_schedule" in imported.ignored
    assert imported.plan["workload"] == {"sequence_length": 2048, "steps": 10, "micro_batch_size": 8}


def test_405b_float8_and_async_tp():
    imported = tt.read(text("llama3_405b.toml"), gpus=512)
    assert imported.plan["precision"] == {"optimizer": "adamw", "compute": "fp8", "fp8_all_gather": True}
    assert imported.plan["parallelism"] == {
        "tensor": 8,
        "pipeline": 1,
        "context": 1,
        "async_tp": True,
        "data": 64,
        "zero_stage": 3,
    }
    assert imported.plan["techniques"]["activation_checkpointing"] == "full"
    assert imported.unmodelled == (
        "quantize.linear.float8.filter_fqns: the linear layers it keeps in bf16 are modelled in low precision",
    )
    plan_from_dict(imported.plan | {"model": {"preset": "llama-3.1-405b"}})


def test_float8_all_gather_without_fsdp_is_left_out():
    """On 8 GPUs the 405B config is TP 8 on one data rank: no FSDP, so its float8 all-gather setting does nothing
    (and the plan would refuse it)."""
    imported = tt.read(text("llama3_405b.toml"), gpus=8)
    assert imported.plan["parallelism"]["zero_stage"] == 0 and "fp8_all_gather" not in imported.plan["precision"]
    assert (
        "quantize.linear.float8.enable_fsdp_float8_all_gather (no FSDP on one data × context rank: nothing is "
        "all-gathered)"
    ) in imported.ignored
    plan_from_dict(imported.plan | {"model": {"preset": "llama-3.1-405b"}})


@pytest.mark.parametrize(
    "name, preset, expert, scope",
    [
        ("deepseek_v3_671b.toml", "deepseek-v3", 1, "loss"),
        ("deepseek_v3_16b.toml", "deepseek-v2-lite", 8, "loss"),
        ("qwen3_32b.toml", "qwen3-32b", None, "blocks_and_loss"),
    ],
)
def test_moe_and_qwen_configs(name, preset, expert, scope):
    imported = tt.read(text(name), gpus=64)
    assert imported.plan["model"] == {"preset": preset}
    assert imported.plan["parallelism"].get("expert") == expert
    assert imported.plan["techniques"]["compile_scope"] == scope
    assert imported.unknown == () and imported.unmodelled == ()
    plan_from_dict(imported.plan)


def test_v0_1_0_spellings():
    imported = tt.read(text("llama3_70b_old_keys.toml"), gpus=64)
    assert imported.plan["techniques"] == {"activation_checkpointing": "full", "compile": False}
    assert [r.plan_key for r in imported.read if r.source == "training.compile"] == ["techniques.compile"]
    assert {"float8.filter_fqns", "checkpoint.enable_checkpoint", "model.tokenizer_path"} <= set(imported.ignored)
    assert imported.unknown == ()


def test_flavors_are_torchtitans_architectures():
    """Each flavor's preset has the architecture torchtitan's model args give it (v0.2.2, hand-copied)."""
    args = {  # n_layers, dim, n_heads, n_kv_heads, vocab_size, (MoE) num_experts, top_k, moe_inter_dim
        ("llama3", "8B"): (32, 4096, 32, 8, 128256, 0, 0, None),
        ("llama3", "70B"): (80, 8192, 64, 8, 128256, 0, 0, None),
        ("llama3", "405B"): (126, 16384, 128, 8, 128256, 0, 0, None),
        ("qwen3", "0.6B"): (28, 1024, 16, 8, 151936, 0, 0, None),
        ("qwen3", "32B"): (64, 5120, 64, 8, 151936, 0, 0, None),
        ("qwen3", "30B-A3B"): (48, 2048, 32, 4, 151936, 128, 8, 768),
        ("qwen3", "235B-A22B"): (94, 4096, 64, 4, 151936, 128, 8, 1536),
        ("deepseek_v3", "16B"): (27, 2048, 16, 16, 102400, 64, 6, 1408),
        ("deepseek_v3", "236B"): (60, 5120, 128, 128, 102400, 160, 6, 1536),
        ("deepseek_v3", "671B"): (61, 7168, 128, 128, 129280, 256, 8, 2048),
    }
    for key, shape in args.items():
        m = presets()[tt.FLAVORS[key]].model
        assert (
            m.num_layers,
            m.hidden_size,
            m.num_attention_heads,
            m.num_kv_heads,
            m.vocab_size,
            m.num_experts,
            m.experts_per_token,
            m.moe_intermediate_size,
        ) == shape, key
    # llama3 FeedForward: int(2 × 4 dim / 3 × ffn_dim_multiplier) rounded up to multiple_of
    assert presets()["llama-3.1-8b"].model.intermediate_size == 1024 * -(-int(1.3 * int(2 * 4 * 4096 / 3)) // 1024)


def test_overrides_over_the_toml():
    command = (
        "CONFIG_FILE=./torchtitan/models/llama3/train_configs/llama3_8b.toml ./run_train.sh "
        "--parallelism.tensor_parallel_degree 2 --training.seq_len=16384 --compile.enable "
        "--activation_checkpoint.selective_ac_option 3 --parallelism.no-enable-async-tensor-parallel"
    )
    imported = tt.read(text("llama3_8b.toml"), gpus=16, overrides=command)
    assert imported.plan["parallelism"] == {
        "tensor": 2,
        "pipeline": 1,
        "context": 1,
        "async_tp": False,
        "data": 8,
        "zero_stage": 3,
    }
    assert imported.plan["workload"]["sequence_length"] == 16384
    assert imported.plan["techniques"] == {
        "activation_checkpointing": "every_k",
        "checkpoint_every": 3,
        "compile": True,
        "compile_scope": "blocks_and_loss",
    }
    assert "CONFIG_FILE" in imported.ignored and imported.unmodelled == ()


def test_command_line_alone():
    command = (
        "torchrun --nproc_per_node=8 -m torchtitan.train --job.config_file ./llama3_8b.toml "
        "--model.name llama3 --model.flavor 70B --activation_checkpoint.mode full "
        "--training.local_batch_size 2 --parallelism.data_parallel_replicate_degree 2 "
        "--parallelism.data_parallel_shard_degree 4"
    )
    imported = tt.read(command, gpus=8)
    assert imported.plan["model"] == {"preset": "llama-3.1-70b"}
    assert imported.plan["parallelism"] == {"data": 8, "zero_stage": 3}
    assert imported.unmodelled == (
        "parallelism.data_parallel_replicate_degree: HSDP shards over 4 of the 8 data ranks; the plan shards over "
        "all of them (parallelism.zero_stage 3)",
        "job.config_file: the TOML it names (./llama3_8b.toml) is not read here; read its text with this command "
        "line as overrides",
    )
    assert "--nproc_per_node" in imported.ignored


def test_absent_checkpointing_is_torchtitans_default():
    imported = tt.read("--training.seq_len 1024")
    assert imported.plan["techniques"] == {"activation_checkpointing": "every_k", "checkpoint_every": 2}
    assert "model" not in imported.plan and imported.model_name == ""


def test_pipeline_microbatches():
    imported = tt.read(
        "--parallelism.pipeline_parallel_degree 2 --parallelism.pipeline_parallel_microbatch_size 2 "
        "--training.local_batch_size 8 --parallelism.pipeline_parallel_schedule Interleaved1F1B",
        gpus=8,
    )
    assert imported.plan["workload"] == {"micro_batch_size": 2, "sequence_length": 2048}
    assert imported.plan["parallelism"] == {
        "pipeline": 2,
        "data": 4,
        "zero_stage": 3,
        "virtual_stages": 2,
        "pipeline_schedule": "interleaved_1f1b",
        "pipeline_microbatches": 4,
    }


def test_absent_batch_and_sequence_are_jobconfigs_defaults():
    """JobConfig Training: local_batch_size 8, seq_len 2048 (not the plan's 1 and 4096), with where they came from."""
    imported = tt.read("--parallelism.tensor_parallel_degree 2")
    assert imported.plan["workload"] == {"micro_batch_size": 8, "sequence_length": 2048}
    sources = {r.plan_key: r.source for r in imported.read}
    assert sources["workload.micro_batch_size"] == "training.local_batch_size (absent: JobConfig default 8)"
    assert sources["workload.sequence_length"] == "training.seq_len (absent: JobConfig default 2048)"
    plan = plan_from_config(imported, model={"preset": "llama-3.1-8b"}, gpus=2)
    assert (plan.workload.micro_batch_size, plan.workload.sequence_length) == (8, 2048)
    piped = tt.read(
        "--parallelism.pipeline_parallel_degree 2 --parallelism.pipeline_parallel_microbatch_size 2", gpus=2
    )
    assert piped.plan["parallelism"]["pipeline_microbatches"] == 4  # the default local batch of 8 in micro-batches of 2
    given = tt.read("--training.local_batch_size 2 --training.seq_len 8192")
    assert given.plan["workload"] == {"micro_batch_size": 2, "sequence_length": 8192}


def test_unknown_flavor_names_the_model():
    imported = tt.read('[model]\nname = "llama4"\nflavor = "17bx16e"\n[training]\nseq_len = 8192\n')
    assert imported.model_name == "llama4 17bx16e" and "model" not in imported.plan
    imported = tt.read('[model]\nname = "llama3"\nflavor = "custom"\nhf_assets_path = "./assets/hf/Llama-3.1-8B"\n')
    assert imported.plan["model"] == {"preset": "llama-3.1-8b"}


@pytest.mark.parametrize(
    "config, gpus, message",
    [
        (
            "--activation_checkpoint.selective_ac_option every",
            None,
            "activation_checkpoint.selective_ac_option: 'every' must be an integer ≥ 1",
        ),
        (
            "--activation_checkpoint.mode some",
            None,
            "activation_checkpoint.mode: 'some' is not one of: selective, full, memory_budget, none",
        ),
        ("--optimizer.name Lion", None, "optimizer.name: 'Lion' is not one of: AdamW, Adam"),
        (
            "--compile.components model,optimizer",
            None,
            "compile.components: 'model,optimizer' must name model, loss or both",
        ),
        (
            "--parallelism.tensor_parallel_degree 3",
            8,
            "parallelism.data_parallel_shard_degree: -1 leaves no whole degree: 8 GPUs are not a multiple of "
            "replicate × "
            "tensor × pipeline × context (1 × 3)",
        ),
        (
            "--parallelism.data_parallel_shard_degree 0",
            None,
            "parallelism.data_parallel_shard_degree: 0 must be -1 (the rest of the GPUs) or at least 1",
        ),
        ("[training]\nseq_len = true\n", None, "training.seq_len: True must be an integer ≥ 1"),
        (
            "--model.converters float8,mx",
            None,
            "model.converters: 'float8,mx' names both a float8 and an mx converter for the linear layers",
        ),
    ],
)
def test_errors(config, gpus, message):
    with pytest.raises(PlanError) as error:
        tt.read(config, gpus=gpus)
    assert str(error.value) == message


BASE = {"model": {"preset": "llama-3.1-8b"}, "framework": "torchtitan", "hardware": {"count": 8}}


@pytest.mark.parametrize(
    "over",
    [
        {},
        {"workload": {"sequence_length": 8192, "micro_batch_size": 2, "global_batch_size": 64, "steps": 500}},
        {"precision": {"compute": "fp8", "fp8_recipe": "rowwise", "fp8_all_gather": True}},
        {"precision": {"compute": "fp8", "fp8_recipe": "mxfp8"}},
        {"precision": {"compute": "fp32", "optimizer_impl": "foreach"}},
        {"precision": {"master_weights": "none", "gradients": "bf16", "optimizer_state": "bf16"}},
        {
            "techniques": {
                "activation_checkpointing": "every_k",
                "checkpoint_every": 4,
                "compile": True,
                "compile_scope": "blocks",
            }
        },
        {"techniques": {"activation_checkpointing": "none", "offload": "optimizer_and_params"}},
        {
            "techniques": {"activation_checkpointing": "full", "optimizer_in_backward": True},
            "parallelism": {"zero_stage": 0},
        },
        {"parallelism": {"zero_stage": 0}},
        {"parallelism": {"tensor": 2, "async_tp": True}, "techniques": {"compile": True}},
        {"parallelism": {"pipeline": 2, "pipeline_schedule": "gpipe"}, "workload": {"global_batch_size": 32}},
        {
            "parallelism": {"pipeline": 2, "pipeline_schedule": "interleaved_1f1b", "virtual_stages": 2},
            "workload": {"micro_batch_size": 2, "global_batch_size": 64},
        },
        {"parallelism": {"context": 2, "tensor": 2}},
        {"model": {"preset": "qwen3-30b-a3b"}, "parallelism": {"expert": 4}},
    ],
)
def test_round_trip(over):
    plan = plan_from_dict(overlay(BASE, over))
    assert round_trip(plan, tt.FORMAT) == {}


def test_write_names_what_it_cannot_say():
    plan = plan_from_dict(
        overlay(
            BASE,
            {"model": {"preset": "mistral-7b"}, "parallelism": {"zero_stage": 1}, "techniques": {"loss": "chunked"}},
        )
    )
    written = tt.write(plan)
    assert "# model: no torchtitan flavor has this architecture" in written
    assert f"# not said: parallelism.zero_stage ({tt.CANNOT_SAY['parallelism.zero_stage']})" in written
    assert f"# not said: techniques.loss ({tt.CANNOT_SAY['techniques.loss']})" in written
    assert round_trip(plan, tt.FORMAT) == {"parallelism.zero_stage": (1, 3)}


# --- issue 27: a value of another type, or TOML beyond the loader's bounds: the config's error --------------------
TOML = '[model]\nname = "llama3"\nflavor = "8B"\n'


@pytest.mark.parametrize(
    "extra, field, rule",
    [
        ('[model]\nname = ["llama3"]\n', "model.name", "must be text"),
        (TOML + "converters = 5\n", "model.converters", "must be a list of text"),
        (TOML + "converters = true\n", "model.converters", "must be a list of text"),
        (TOML + "converters = 1979-05-27\n", "model.converters", "must be a list of text"),
        (TOML + '[compile]\ncomponents = [["model"]]\n', "compile.components", "must name model, loss or both"),
        (
            TOML + "[training]\nseq_len = 0x" + "f" * 4000 + "\n",
            "config",
            "holds an integer of more than 30 digits; that is not a framework config",
        ),
        (
            TOML + "[training]\nseq_len = " + "1" * 5000 + "\n",
            "config",
            "holds an integer of more than 30 digits; that is not a framework config",
        ),
        (TOML + "a" + ".a" * 5000 + " = 1\n", "config", "nested too deeply to be a framework config"),
        (
            TOML + "x = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n",
            "config",
            "nested too deeply to be a framework config",
        ),
    ],
)
def test_values_of_another_type_and_hostile_toml_are_errors(extra, field, rule):
    with pytest.raises(PlanError) as err:
        tt.read(extra)
    assert (err.value.field, err.value.rule) == (field, rule)


def test_detection_of_hostile_toml_says_no_without_recursing():
    """5,000 dotted levels or 3,000 nested tables raised RecursionError in detection too."""
    assert not tt.detect(TOML + "a" + ".a" * 5000 + " = 1\n")
    assert not tt.detect(TOML + "x = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n")
