"""planner/formats/vllm.py: vLLM command lines and --config files."""

from pathlib import Path

import pytest

from planner.errors import PlanError
from planner.formats import FORMATS, detect, plan_from_config, round_trip
from planner.formats.vllm import FORMAT, read, read_mapping
from planner.plan.codec import plan_from_dict

DATA = Path(__file__).parent / "data" / "configs" / "vllm"


def test_command_with_environment():
    r = read((DATA / "moe_tp4_env.sh").read_text())
    assert r.plan == {
        "framework": "vllm",
        "model": {"preset": "qwen3-235b-a22b"},
        "parallelism": {"tensor": 4},
        "workload": {
            "task": "inference",
            "inference": {
                "prefill_chunk_tokens": 32768,
                "prompt_tokens": 32512,
                "output_tokens": 256,
                "prefix_caching": False,
                "gpu_memory_utilization": 0.8,
            },
        },
    }
    assert r.unmodelled == (
        "--swap-space: host RAM (GiB per GPU) for preempted sequences' KV blocks (V0); GPU memory unchanged",
    )
    assert r.ignored == (
        "--trust-remote-code",
        "--disable-log-requests",
        "--distributed-executor-backend",
        "env HIP_VISIBLE_DEVICES",
        "env SAFETENSORS_FAST_GPU",
    )  # devices and load speed
    assert r.unknown == ("env VLLM_USE_V1", "env VLLM_ROCM_USE_AITER")


def test_config_yaml():
    r = read((DATA / "fp8_kv.yaml").read_text())
    assert r.plan["precision"] == {"kv_cache": "fp8"}
    assert r.plan["workload"]["inference"] == {"prefix_caching": False, "prefill_chunk_tokens": 8192}
    assert r.ignored == ("--async-scheduling",)


def test_a_quantized_release_is_its_presets_architecture_in_its_weights_dtype():
    r = read((DATA / "w8a8_one_gpu.sh").read_text(), gpus=1)
    assert r.plan["model"] == {"preset": "llama-3.1-70b"} and r.model_name == ""
    assert r.plan["precision"] == {"weights": "int8"}
    assert r.plan["hardware"] == {"count": 1}
    assert r.plan["workload"]["inference"]["gpu_memory_utilization"] == 0.98
    assert r.plan["workload"]["inference"]["prefix_caching"] is True  # vLLM's default, the plan's is off


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "vllm serve m --gpu-memory-utilization 1.5",
            "--gpu-memory-utilization: '1.5' must be a number from 0.05 to 1",
        ),
        ("vllm serve m -tp 0", "--tensor-parallel-size: '0' must be an integer ≥ 1"),
        (
            "vllm serve m --kv-cache-dtype int3",
            "--kv-cache-dtype: 'int3' is not one of: fp8, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla, bfloat16, auto",
        ),
        (
            "vllm serve m --max-model-len 1",
            "--max-model-len: '1' must be an integer ≥ 2 (a prompt token and an output token)",
        ),
        ("vllm serve m --max-num-seqs", "--max-num-seqs: None needs a value"),
        ("vllm serve 'm", 'config: "vllm serve \'m" is not shell text shlex can split (No closing quotation)'),
    ],
)
def test_errors(text, message):
    with pytest.raises(PlanError) as exc:
        read(text)
    assert str(exc.value) == message


def test_detect():
    assert detect((DATA / "moe_tp4_env.sh").read_text()) is FORMAT
    assert detect((DATA / "fp8_kv.yaml").read_text()) is FORMAT
    assert not FORMAT.detect("python -m sglang.launch_server --model-path m")
    assert not FORMAT.detect("batch_size: 4\n_component_: torchtune.x\n")


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"precision": {"weights": "fp8", "kv_cache": "fp8"}},
        {"precision": {"weights": "int4"}},
        {"precision": {"compute": "fp16", "weights": "nf4"}},
        {"parallelism": {"tensor": 4, "data": 2}},
        {"parallelism": {"tensor": 2, "pipeline": 2}},
        {
            "workload": {
                "inference": {
                    "gpu_memory_utilization": 0.7,
                    "max_num_seqs": 64,
                    "prefill_chunk_tokens": 2048,
                    "cuda_graphs": False,
                    "prefix_caching": True,
                }
            }
        },
    ],
)
def test_round_trip(extra):
    base = {"model": {"preset": "llama-3.1-8b"}, "framework": "vllm", "workload": {"task": "inference"}}
    for key, value in extra.items():
        base[key] = {**base.get(key, {}), **value}
    assert round_trip(plan_from_dict(base), FORMATS["vllm"]) == {}


def test_write_refuses_int8_weights():
    plan = plan_from_dict(
        {
            "model": {"preset": "llama-3.1-8b"},
            "framework": "vllm",
            "workload": {"task": "inference"},
            "precision": {"weights": "int8"},
        }
    )
    with pytest.raises(PlanError, match=r"^precision.weights: 'int8' has no vLLM --quantization"):
        FORMAT.write(plan)


# --- issue 27 ---------------------------------------------------------------------------------------------------------
def test_a_mapping_value_is_never_written_out_whole():
    """A --config value that is a list of a long text aliased 30,000 times was str()-ed: 21 GB (300 MB here). A
    list or mapping now becomes its flag's text as an error quotes it, cut to a line."""
    with pytest.raises(PlanError) as err:
        read_mapping({"max_num_seqs": ["x" * 100_000] * 3_000})
    assert err.value.field == "--max-num-seqs" and len(str(err.value)) < 300
    assert read_mapping({"max_num_seqs": 8, "tensor_parallel_size": "2"}).plan["parallelism"] == {"tensor": 2}


def test_a_250_kb_word_is_read_in_one_pass():
    """shlex split it a character at a time, three times over (900 kB: 45 s); the model name is quoted cut."""
    imported = read("vllm serve " + "a" * 250_000)
    assert imported.model_name == "a" * 250_000
    with pytest.raises(PlanError) as err:
        plan_from_config(imported)
    assert err.value.field == "model" and len(str(err.value)) < 300


def test_decode_context_parallel_and_dotted_json_fields_are_noted_not_unknown():
    """-dcp (vllm/config/parallel.py decode_context_parallel_size, the KV cache split over tensor ranks) and a JSON
    flag's field in dot notation (FlexibleArgumentParser) are read as their flags: noted, not unknown."""
    imported = read(
        "vllm serve deepseek-ai/DeepSeek-V3 -tp 8 -dcp 8 --speculative-config.method mtp "
        "--compilation_config.pass_config.fuse_allreduce_rms true --disable-cascade-attn"
    )
    assert imported.unknown == ()
    assert imported.plan["parallelism"] == {"tensor": 8}
    assert [n.split(":")[0] for n in imported.unmodelled] == [
        "--decode-context-parallel-size",
        "--speculative-config.method",
        "--compilation-config.pass-config.fuse-allreduce-rms",
    ]
    assert imported.ignored == ("--disable-cascade-attn",)
