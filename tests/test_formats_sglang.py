"""planner/formats/sglang.py: SGLang command lines."""

from pathlib import Path

import pytest

from planner.errors import PlanError
from planner.formats import FORMATS, detect, round_trip
from planner.formats.sglang import FORMAT, read
from planner.plan.codec import plan_from_dict

DATA = Path(__file__).parent / "data" / "configs" / "sglang"


def test_own_commands():
    r = read((DATA / "moe_tp4.sh").read_text())
    assert r.plan == {
        "framework": "sglang",
        "workload": {"task": "inference"},
        "model": {"preset": "qwen3-next-80b-a3b"},
        "parallelism": {"tensor": 4},
    }
    e = read((DATA / "moe_speculative.sh").read_text())
    # --speculative-algo: argparse's abbreviation of --speculative-algorithm (allow_abbrev), read as it
    assert [u.split(":")[0] for u in e.unmodelled] == [
        "--speculative-algorithm",
        "--speculative-num-steps",
        "--speculative-eagle-topk",
        "--speculative-num-draft-tokens",
    ]
    assert e.unknown == ()
    cut = read("python -m sglang.launch_server --model-path x/y --mem-frac 0.7 --context-len 8192")
    inference = cut.plan["workload"]["inference"]
    assert (inference["gpu_memory_utilization"], inference["prompt_tokens"] + inference["output_tokens"]) == (0.7, 8192)
    ambiguous = read("python -m sglang.launch_server --model-path x/y --speculative 3")
    assert ambiguous.unknown == ("--speculative",)  # a prefix of several flags is none of them


def test_flags():
    r = read(
        "python -m sglang.launch_server --model-path acme/x-AWQ --mem-fraction-static 0.8 --context-length 4096 "
        "--chunked-prefill-size 4096 --kv-cache-dtype fp8_e5m2 --disable-cuda-graph --disable-radix-cache --port 1"
    )
    assert r.model_name == "acme/x-AWQ"
    assert r.plan["precision"] == {"weights": "int4", "kv_cache": "fp8"}
    assert r.plan["workload"]["inference"] == {
        "gpu_memory_utilization": 0.8,
        "prompt_tokens": 3840,
        "output_tokens": 256,
        "prefill_chunk_tokens": 4096,
        "cuda_graphs": False,
    }
    assert r.ignored == ("--disable-radix-cache", "--port")


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "python -m sglang.launch_server --chunked-prefill-size -1",
            "--chunked-prefill-size: '-1' (no chunking) is not modelled; give the tokens of a chunk",
        ),
        (
            "python -m sglang.launch_server --mem-fraction-static x",
            "--mem-fraction-static: 'x' must be a number from 0.05 to 1",
        ),
    ],
)
def test_errors(text, message):
    with pytest.raises(PlanError) as exc:
        read(text)
    assert str(exc.value) == message


def test_detect():
    assert detect((DATA / "moe_tp4.sh").read_text()) is FORMAT
    assert not FORMAT.detect("vllm serve m")


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"precision": {"weights": "fp8", "kv_cache": "fp8"}},
        {"precision": {"weights": "int8"}},
        {"parallelism": {"tensor": 4, "data": 2}},
        {
            "workload": {
                "inference": {
                    "gpu_memory_utilization": 0.7,
                    "max_num_seqs": 64,
                    "prefill_chunk_tokens": 2048,
                    "cuda_graphs": False,
                }
            }
        },
    ],
)
def test_round_trip(extra):
    base = {"model": {"preset": "llama-3.1-8b"}, "framework": "sglang", "workload": {"task": "inference"}}
    for key, value in extra.items():
        base[key] = {**base.get(key, {}), **value}
    assert round_trip(plan_from_dict(base), FORMATS["sglang"]) == {}
