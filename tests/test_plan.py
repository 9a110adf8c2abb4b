import pytest
from conftest import TINY

from planner.errors import PlanError
from planner.plan.codec import plan_from_dict, plan_to_dict
from planner.plan.config import Plan, Precision, context_note


def plan(**sections):
    return plan_from_dict({"model": TINY, **sections})


def test_defaults_resolve_and_are_written_out():
    d = plan_to_dict(plan())
    assert d["schema"] == "vram-planner/v1"
    assert d["workload"] == {
        "task": "pretrain",
        "sequence_length": 4096,
        "micro_batch_size": 1,
        "global_batch_size": 1,
        "steps": None,
        "train_tokens": None,
    }
    assert d["precision"] == {
        "compute": "bf16",
        "master_weights": "fp32",
        "gradients": "fp32",
        "optimizer": "adamw",
        "optimizer_state": "fp32",
        "optimizer_impl": "foreach",
        "optimizer_library": None,
        "optimizer_block_size": None,
        "fp32_embedding_states": False,
        "weights": "bf16",
        "quant_group_size": None,
        "double_quant": False,
        "kv_cache": "bf16",
        "fp8_recipe": None,
        "fp8_all_gather": False,
    }
    assert d["parallelism"]["data"] == 1 and d["hardware"] == {
        "gpu": "h100-sxm-80gb",
        "count": 1,
        "offering": None,
        "host_memory_gib_per_gpu": None,
    }


def test_pure_low_precision_defaults_follow_compute_dtype():
    p = Precision(compute="bf16", master_weights="none")
    assert p.gradients == "bf16" and p.optimizer_state == "bf16" and not p.mixed


def test_count_and_data_derive_each_other():
    assert plan(hardware={"count": 8}, parallelism={"tensor": 2}).parallelism.data == 4
    assert plan(parallelism={"data": 4, "pipeline": 2}).hardware.count == 8


def test_global_batch_sets_accumulation():
    p = plan(workload={"micro_batch_size": 2, "global_batch_size": 32}, parallelism={"data": 4})
    assert p.micro_batches_per_step == 4


def test_job_length_from_steps_or_tokens():
    p = plan(workload={"sequence_length": 1024, "micro_batch_size": 2, "global_batch_size": 8, "steps": 100})
    assert p.job_tokens == 100 * 8 * 1024
    assert plan(workload={"train_tokens": 10**9}).job_tokens == 10**9
    assert plan().job_tokens is None
    with pytest.raises(PlanError) as err:
        plan(workload={"steps": 10, "train_tokens": 10})
    assert str(err.value) == "workload.train_tokens: 10 and workload.steps both set the job's length; give one"


def test_round_trip():
    p = plan(name="x", workload={"sequence_length": 128}, parallelism={"data": 2, "zero_stage": 3})
    assert plan_from_dict(plan_to_dict(p)) == p


@pytest.mark.parametrize(
    "sections, message",
    [
        (
            {"hardware": {"count": 6}, "parallelism": {"data": 2, "tensor": 2}},
            "hardware.count: 6 must equal data × tensor × pipeline × context = 2 × 2 × 1 × 1 = 4",
        ),
        (
            {"hardware": {"count": 6}, "parallelism": {"tensor": 4}},
            "hardware.count: 6 is not a multiple of tensor × pipeline × context (4 × 1 × 1)",
        ),
        (
            {"parallelism": {"tensor": 3}},
            "parallelism.tensor: 3 does not divide model.num_attention_heads (4); allowed: 1, 2, 4",
        ),
        (
            {"parallelism": {"pipeline": 3}},
            "parallelism.pipeline: 3 leaves a chunk without layers: model.num_layers (2)"
            " split unevenly into 3 chunks, with the embedding and the output head"
            " counted as a layer each, fills at most 2",
        ),
        (
            {"parallelism": {"pipeline": 2, "pipeline_schedule": "interleaved_1f1b", "virtual_stages": 3}},
            "parallelism.virtual_stages: 3 leaves a chunk without layers: model.num_layers (2) split unevenly into 6"
            " chunks, with the embedding and the output head counted as a layer each, fills at most 2",
        ),
        (
            {"parallelism": {"context": 3}},
            "parallelism.context: 3 does not divide workload.sequence_length (4096); allowed up to 64: 1, 2, 4, 8, "
            "16, 32, 64",
        ),
        (
            {"parallelism": {"sequence_parallel": True}},
            "parallelism.sequence_parallel: True needs parallelism.tensor > 1 (it splits the tensor-parallel group's"
            " activations)",
        ),
        (
            {"workload": {"micro_batch_size": 2, "global_batch_size": 5}},
            "workload.global_batch_size: 5 must be a multiple of micro_batch_size × data (2 × 1 = 2)",
        ),
        (
            {"workload": {"sequence_length": 0}},
            "workload.sequence_length: 0 is out of range; must be from 1 to 16,777,216",
        ),
        ({"precision": {"compute": "fp4"}}, "precision.compute: 'fp4' is not one of: fp32, bf16, fp16, fp8"),
        ({"precision": {"gradients": "fp8"}}, "precision.gradients: 'fp8' is not one of: fp32, bf16, fp16"),
        ({"parallelism": {"expert": 2, "data": 2}}, "parallelism.expert: 2 does not divide model.num_experts (0)"),
        ({"parallelism": {"zero_stage": 4}}, "parallelism.zero_stage: 4 is not one of: 0, 1, 2, 3"),
        (
            {"techniques": {"offload": "optimizer_and_params"}},
            "techniques.offload: 'optimizer_and_params' needs parallelism.zero_stage 3 (parameters are fetched layer"
            " by layer)",
        ),
        # the task-specific blocks, quantized weights, serving, MoE techniques and the optimizer menu
        (
            {"workload": {"task": "lora", "lora": {"targets": ["q", "qq"]}}},
            "workload.lora.targets: 'qq' is not one of: q, k, v, o, gate, up, down",
        ),
        (
            {"workload": {"task": "lora", "lora": {"targets": []}}},
            "workload.lora.targets: [] must be a non-empty list of: q, k, v, o, gate, up, down",
        ),
        (
            {"workload": {"task": "lora", "lora": {"rank": 0}}},
            "workload.lora.rank: 0 is out of range; must be from 1 to 65,536",
        ),
        (
            {"workload": {"task": "lora", "lora": {"ranks": 8}}},
            "workload.lora.ranks: unknown key; allowed keys are: alpha, dropout, rank, targets, variant",
        ),
        (
            {"workload": {"task": "lora"}, "precision": {"weights": "nf4"}},
            "precision.weights: 'nf4' is quantized; a quantized frozen base is task qlora",
        ),
        (
            {"workload": {"task": "qlora"}, "precision": {"weights": "bf16"}},
            "precision.weights: 'bf16' must be quantized for qlora: one of fp8, int8, int4, nf4",
        ),
        (
            {"precision": {"weights": "int4"}},
            "precision.weights: 'int4' applies to frozen or served weights (task lora, qlora or inference); full "
            "training keeps compute and master_weights",
        ),
        (
            {"workload": {"task": "inference"}, "precision": {"weights": "int8", "double_quant": True}},
            "precision.double_quant: True applies to nf4 weights only",
        ),
        (
            {"workload": {"task": "inference", "inference": {"gpu_memory_utilization": 1.5}}},
            "workload.inference.gpu_memory_utilization: 1.5 is out of range; must be from 0.05 to 1",
        ),
        (
            {"techniques": {"moe_capacity_factor": 1.25}},
            "techniques.moe_capacity_factor: 1.25 needs a mixture-of-experts model (model.num_experts)",
        ),
        (
            {"techniques": {"moe_capacity_factor": 0}},
            "techniques.moe_capacity_factor: 0 is out of range; must be from 0.1 to 64",
        ),
        ({"precision": {"fp8_recipe": "rowwise"}}, "precision.fp8_recipe: 'rowwise' applies to precision.compute fp8"),
        (
            {"precision": {"compute": "fp8", "fp8_all_gather": True}},
            "precision.fp8_all_gather: True needs parallelism.zero_stage 3 (FSDP all-gathers weights)",
        ),
        (
            {"parallelism": {"tensor": 2, "sequence_parallel": True, "async_tp": True}},
            "parallelism.async_tp: True needs parallelism.sequence_parallel and techniques.compile of the blocks"
            " (torchtitan's micro-pipelined TP is an inductor pass)",
        ),
        (
            {
                "parallelism": {"tensor": 2, "sequence_parallel": True, "async_tp": True},
                "techniques": {"compile": True, "compile_scope": "loss"},
            },
            "parallelism.async_tp: True needs parallelism.sequence_parallel and techniques.compile of the blocks"
            " (torchtitan's micro-pipelined TP is an inductor pass)",
        ),
        (
            {"parallelism": {"pipeline": 2, "virtual_stages": 2}},
            "parallelism.virtual_stages: 2 must be 2 or more with pipeline_schedule interleaved_1f1b, and 1 with any "
            "other"
            " schedule",
        ),
        (
            {"parallelism": {"pipeline_schedule": "gpipe"}},
            "parallelism.pipeline_schedule: 'gpipe' needs parallelism.pipeline > 1",
        ),
        (
            {"parallelism": {"pipeline_microbatches": 4}, "workload": {"global_batch_size": 2}},
            "parallelism.pipeline_microbatches: 4 must equal workload.global_batch_size ÷ (micro_batch_size × data) = "
            "2 ÷ 1"
            " = 2",
        ),
        (
            {"workload": {"task": "inference"}, "techniques": {"activation_offload": True}},
            "techniques.activation_offload: True applies to training, not inference",
        ),
        (
            {"workload": {"task": "lora", "lora": {"variant": "vera"}}},
            "workload.lora.variant: 'vera' is not one of: lora, dora",
        ),
        (
            {"precision": {"optimizer": "adam"}},
            "precision.optimizer: 'adam' is not one of: adamw, adamw_8bit, paged_adamw, paged_adamw_8bit, adafactor, "
            "lion, muon, sgd,"
            " sgd_momentum",
        ),
    ],
)
def test_validation_messages(sections, message):
    with pytest.raises(PlanError) as err:
        plan(**sections)
    assert str(err.value) == message


def test_kv_heads_fewer_than_tensor_ranks_are_replicated_not_rejected():
    assert plan(parallelism={"tensor": 4}).parallelism.tensor == 4


def test_unknown_keys_name_the_key_and_the_allowed_ones():
    with pytest.raises(PlanError) as err:
        plan(workload={"seq_len": 10})
    assert str(err.value) == (
        "workload.seq_len: unknown key; allowed keys are: distillation, global_batch_size, "
        "inference, lora, micro_batch_size, objective, ppo, preference, rl, sequence_length, steps, task, "
        "train_tokens"
    )
    with pytest.raises(
        PlanError,
        match=r"^hardwares: unknown key; allowed keys are: framework, framework_release, hardware, model, name, ",
    ):
        plan_from_dict({"model": TINY, "hardwares": {}})


def test_schema_and_shape_errors():
    with pytest.raises(PlanError, match=r"^schema: 'vram-planner/v9' is not supported"):
        plan_from_dict({"schema": "vram-planner/v9", "model": TINY})
    with pytest.raises(PlanError, match=r"^plan: must be a mapping"):
        plan_from_dict(["model"])
    with pytest.raises(PlanError, match=r"^model: missing"):
        plan_from_dict({})
    with pytest.raises(PlanError, match=r"^workload: 3 must be a mapping"):
        plan_from_dict({"model": TINY, "workload": 3})


def test_plans_are_frozen():
    p = plan()
    with pytest.raises(AttributeError):
        p.name = "y"  # type: ignore[misc]
    assert isinstance(p, Plan)


def test_lora_and_inference_blocks():
    p = plan(workload={"task": "qlora", "lora": {"rank": 16, "targets": ["v", "q", "down"]}})
    assert p.precision.weights == "nf4" and p.workload.lora.targets == ("q", "v", "down")
    d = plan_to_dict(p)
    assert d["workload"]["lora"] == {
        "rank": 16,
        "alpha": 16.0,
        "targets": ["q", "v", "down"],
        "dropout": 0.0,
        "variant": "lora",
    }
    assert "inference" not in d["workload"] and plan_from_dict(d) == p
    inf = plan(workload={"task": "inference", "inference": {"batch_size": 8, "prompt_tokens": 100}})
    assert inf.workload.inference.context_tokens == 356 and "lora" not in plan_to_dict(inf)["workload"]


def test_gelu_models_have_no_gate():
    with pytest.raises(PlanError, match=r"^workload.lora.targets: \['gate'\] names gate, but a GeLU MLP"):
        plan_from_dict({"model": {"preset": "gpt2"}, "workload": {"task": "lora", "lora": {"targets": ["gate"]}}})


def test_optimizer_in_backward_rules():
    base = {"model": TINY, "techniques": {"optimizer_in_backward": True}}
    assert plan_from_dict(base).techniques.optimizer_in_backward
    with pytest.raises(
        PlanError,
        match=r"^techniques.optimizer_in_backward: True needs one micro-batch per step "
        r"\(gradient accumulation 4\): gradients are freed as they are applied$",
    ):
        plan_from_dict({**base, "workload": {"global_batch_size": 4}})
    with pytest.raises(
        PlanError, match=r"^techniques.optimizer_in_backward: True is modelled without ZeRO and offload"
    ):
        plan_from_dict({**base, "parallelism": {"data": 2, "zero_stage": 2}})
    with pytest.raises(PlanError, match=r"^techniques.optimizer_in_backward: True applies to training, not inference$"):
        plan_from_dict({**base, "workload": {"task": "inference"}})


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            {"techniques": {"offload": "optimizer"}},
            "techniques.offload: 'optimizer' applies to training, not inference",
        ),
        ({"parallelism": {"zero_stage": 3, "data": 2}}, "parallelism.zero_stage: 3 applies to training, not inference"),
    ],
)
def test_inference_refuses_training_settings_instead_of_ignoring_them(extra, message):
    # an inference plan carrying one got an empty recommendation instead of a clear refusal
    with pytest.raises(PlanError) as err:
        plan_from_dict({"model": {"preset": "llama-3.2-1b"}, "workload": {"task": "inference"}, **extra})
    assert str(err.value) == message


def test_inference_generates_at_least_one_token():
    # output_tokens 0 was accepted and divided the time model by zero
    with pytest.raises(PlanError) as err:
        plan_from_dict(
            {"model": {"preset": "llama-3.2-1b"}, "workload": {"task": "inference", "inference": {"output_tokens": 0}}}
        )
    assert str(err.value) == "workload.inference.output_tokens: 0 is out of range; must be from 1 to 16,777,216"


def test_a_quantized_checkpoint_is_served_in_its_own_dtype():
    """DeepSeek-V3 ships fp8 weights (config.json quantization_config): served in fp8 unless the plan says; trained
    adapters keep the compute dtype's base; a plan's own choice wins."""

    def weights(task, **precision):
        return plan_from_dict(
            {"model": {"preset": "deepseek-v3"}, "workload": {"task": task}, "precision": precision}
        ).precision.weights

    assert (weights("inference"), weights("lora"), weights("inference", weights="bf16")) == ("fp8", "bf16", "bf16")
    assert (
        plan_from_dict({"model": {"preset": "llama-3.1-8b"}, "workload": {"task": "inference"}}).precision.weights
        == "bf16"
    )


@pytest.mark.parametrize("zero_stage", [2, 3])
def test_deepspeed_pipeline_refuses_zero_2_and_3(zero_stage):
    # deepspeed/runtime/pipe/engine.py: "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"
    d = {
        "model": {"preset": "llama-3.1-8b"},
        "framework": "deepspeed",
        "parallelism": {"pipeline": 2, "data": 2, "zero_stage": zero_stage},
    }
    with pytest.raises(PlanError, match="pipeline engine"):
        plan_from_dict(d)
    plan_from_dict({**d, "parallelism": {"pipeline": 2, "data": 2, "zero_stage": 1}})


def _long(task_keys: dict, framework: str = "generic") -> Plan:
    return plan_from_dict(
        {
            "framework": framework,
            "model": {"preset": "qwen2.5-32b"},
            "workload": task_keys,
            "hardware": {"gpu": "h100-sxm-80gb", "count": 8},
            "parallelism": {"tensor": 8},
        }
    )


def test_a_sequence_past_the_context_window_is_said_and_how_the_engine_takes_it():
    served = _long(
        {
            "task": "inference",
            "inference": {"prompt_tokens": 40000, "output_tokens": 1000, "gpu_memory_utilization": 0.9},
        },
        "vllm",
    )
    assert context_note(served) == (
        "41,000 tokens per sequence exceed the model's context window of 32,768 (model.context_window, its "
        "config.json's length): vllm refuses this max_model_len unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (outputs past "
        "the window are unreliable); a rope_scaling override (YaRN) in the model's config extends it"
    )
    trained = _long({"task": "finetune", "sequence_length": 65536, "global_batch_size": 8, "micro_batch_size": 1})
    assert context_note(trained).endswith(
        "positions past it were never trained; extend the window (RoPE scaling) to train them"
    )
    at_window = _long({"task": "inference", "inference": {"prompt_tokens": 32768 - 256, "output_tokens": 256}})
    assert context_note(at_window) is None
    guessed = plan_from_dict(
        {"model": {"params": "8B"}, "workload": {"sequence_length": 1_000_000, "global_batch_size": 8}}
    )
    assert guessed.model.context_window is None and context_note(guessed) is None
