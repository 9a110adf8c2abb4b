"""`vram-planner measure`: the dry run (no torch), exit 2 without a GPU, and rows in measured-dev.csv's format
that bench/accuracy.py reads back as the same plan."""

import csv
import importlib.util
import sys

import accuracy
import pytest
import yaml
from conftest import ROOT

from planner import cli
from planner.measure import plan as measure
from planner.plan.codec import plan_from_dict

LORA = "model: {preset: llama-3.2-1b}\nworkload: {task: lora, sequence_length: 2048, micro_batch_size: 2}\n"
MEASURED = {
    "status": "ok",
    "peak_allocated_bytes": 10 * 2**30,
    "peak_reserved_bytes": 11 * 2**30,
    "device_bytes": 12 * 2**30,
    "device_bytes_source": "nvidia-smi process used_memory",
    "device": "NVIDIA H100 80GB HBM3",
    "device_total_bytes": 85_017_755_648,
    "driver_version": "570.86",
    "cuda_version": "12.8",
    "torch_version": "2.7.0",
    "transformers_version": "4.56.0",
    "peft_version": "0.17.0",
    "bitsandbytes_version": "",
    "timestamp": "2026-11-25T20:00:00+00:00",
}


def _plan_file(tmp_path, text=LORA):
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    return str(path)


def test_dry_run_shows_the_model_the_run_and_the_prediction(tmp_path, capsys):
    assert cli.main(["measure", _plan_file(tmp_path), "--dry-run", "--steps", "3"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "plan: would build transformers.LlamaConfig with random weights (attn_implementation sdpa):"
    assert "  num_hidden_layers: 16" in lines and "  num_key_value_heads: 8" in lines and "  head_dim: 64" in lines
    assert (
        "run: 3 training steps (lora): micro-batch 2 × 2,048 tokens, forward with HF's loss, backward, "
        "clip_grad_norm_, optimizer step"
    ) in lines
    predicted = measure.predict(
        measure.setup(
            plan_from_dict(
                {
                    "model": {"preset": "llama-3.2-1b"},
                    "workload": {"task": "lora", "sequence_length": 2048, "micro_batch_size": 2},
                }
            )
        )["plan"]
    )
    assert f"  max allocated {predicted['peak_allocated_bytes'] / 2**30:9.2f} GiB" in lines
    assert f"  device memory {predicted['device_bytes'] / 2**30:9.2f} GiB" in lines


def test_dry_run_of_an_inference_plan_and_of_gpt2(tmp_path, capsys):
    text = (
        "model: {num_layers: 2, hidden_size: 64, num_attention_heads: 4, intermediate_size: 128, vocab_size: 512,"
        " mlp: gelu, norm: layernorm, bias: true}\nworkload: {task: inference, inference: {batch_size: 4}}\n"
        "techniques: {attention: eager}\n"
    )
    assert cli.main(["measure", _plan_file(tmp_path, text), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "transformers.GPT2Config with random weights (attn_implementation eager)" in out
    assert "run: greedy generate with the KV cache: batch 4, 1,024 prompt + 256 new tokens" in out


@pytest.mark.parametrize(
    "text, message",
    [
        (
            LORA + "hardware: {count: 2}\nparallelism: {data: 2}\n",
            "error: hardware.count: 2 is not measured by vram-planner measure (the runner measures one GPU)\n",
        ),
        (
            LORA + "techniques: {offload: optimizer}\n",
            "error: techniques.offload: 'optimizer' is not measured by vram-planner measure (offloading needs "
            "DeepSpeed or "
            "FSDP, which the runner does not drive)\n",
        ),
        (
            "model: {preset: deepseek-v2-lite}\n",
            "error: model: 'deepseek-v2-lite' is not built by the runner: latent attention, sliding windows, shared "
            "experts, leading dense layers and hybrid layers are not llama, qwen2, gpt2 or mixtral shapes\n",
        ),
    ],
)
def test_what_the_runner_cannot_build_is_refused(tmp_path, capsys, text, message):
    assert cli.main(["measure", _plan_file(tmp_path, text), "--dry-run"]) == 2
    assert capsys.readouterr().err == message


def test_no_torch_exits_2_with_the_reason(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ModuleNotFoundError, as without it
    monkeypatch.delitem(sys.modules, "planner.measure.run", raising=False)
    assert cli.main(["measure", _plan_file(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "error: measure: needs PyTorch and transformers with a CUDA GPU, and torch is not installed: pip install "
        '"vram-planner[measure]" (--dry-run shows the run and the prediction without them)\n'
    )


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
def test_a_machine_without_torch_is_told_what_to_install(tmp_path, capsys):
    """The runners import torch at their top: the one place that imports them names the missing package (a
    wrong module path would be a crash here, not this message)."""
    with pytest.raises(ModuleNotFoundError) as missing:
        measure.load_runner("run")
    assert missing.value.name == "torch"
    assert cli.main(["measure", _plan_file(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith(
        "error: measure: needs PyTorch and transformers with a CUDA GPU, and torch is not installed"
    )


class NoCuda:
    @staticmethod
    def cuda_available():
        return False


def test_torch_without_cuda_exits_2_with_the_reason(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(measure, "load_runner", lambda name: NoCuda)
    assert cli.main(["measure", _plan_file(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "error: measure: needs a CUDA GPU, and torch finds none (torch.cuda.is_available() is false); --dry-run "
        "shows the run and the prediction\n"
    )


def test_a_serving_plan_without_vllm_exits_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(measure.importlib.util, "find_spec", lambda name: None)
    text = "model: {preset: llama-3.2-1b}\nworkload: {task: inference, inference: {gpu_memory_utilization: 0.9}}\n"
    assert cli.main(["measure", _plan_file(tmp_path, text)]) == 2
    assert capsys.readouterr().err == (
        "error: measure: a serving plan (workload.inference.gpu_memory_utilization) is measured with vLLM, which is "
        "not installed: pip install vllm, or leave gpu_memory_utilization out to measure a generate() loop\n"
    )


class FakeRunner:
    @staticmethod
    def cuda_available():
        return True

    @staticmethod
    def measure(config, device, steps):
        return dict(MEASURED)


def test_a_run_prints_measured_next_to_predicted_and_appends_rows(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(measure, "load_runner", lambda name: FakeRunner)
    out_csv = tmp_path / "mine.csv"
    plan = _plan_file(tmp_path, "name: Llama 1B LoRA\n" + LORA)
    for _ in range(2):
        assert cli.main(["measure", plan, "--csv", str(out_csv)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Llama 1B LoRA on NVIDIA H100 80GB HBM3: 2 training steps (lora)")
    assert lines[1] == "                 measured GiB  predicted GiB    error"
    predicted = measure.predict(measure.setup(plan_from_dict(yaml.safe_load(LORA)))["plan"])["peak_allocated_bytes"]
    error = 100 * (predicted - 10 * 2**30) / (10 * 2**30)
    assert lines[2] == f"  max allocated         10.00{predicted / 2**30:15.2f}{f'{error:+.1f}%':>9}"
    assert lines[-1] == f"3 rows appended to {out_csv}"
    with out_csv.open() as fh:
        assert next(csv.reader(fh)) == measure.DEV_COLUMNS  # the header once
        rows = list(csv.DictReader(out_csv.open()))
    assert len(rows) == 6 and [r["row_id"] for r in rows[:3]] == [
        "llama-1b-lora-allocated",
        "llama-1b-lora-reserved",
        "llama-1b-lora-device",
    ]


def test_dev_columns_are_measured_dev_csv_header():
    with (ROOT / "bench" / "data" / "measured-dev.csv").open() as fh:
        assert next(csv.reader(fh)) == measure.DEV_COLUMNS


PLANS = [
    LORA,
    "model: {preset: qwen2.5-0.5b}\nworkload: {task: pretrain, sequence_length: 1024, micro_batch_size: 4}\n"
    "precision: {master_weights: none, optimizer_impl: fused}\ntechniques: {activation_checkpointing: full}\n",
    "model: {preset: llama-3.2-1b}\nworkload: {task: qlora, lora: {rank: 16, alpha: 32, targets: [q, k, v, o, gate,"
    " up, down]}}\nprecision: {weights: nf4, double_quant: true}\n",
    "model: {preset: llama-3.2-1b}\nworkload: {task: inference, inference: {batch_size: 8, prompt_tokens: 2048, "
    "output_tokens: 128}}\nprecision: {master_weights: none}\ntechniques: {attention: eager}\n",
    "model: {preset: gpt2}\nworkload: {task: pretrain, sequence_length: 1024}\nprecision: {compute: fp32, "
    "optimizer: sgd}\n",
]


@pytest.mark.parametrize("text", PLANS)
def test_bench_accuracy_reads_a_row_back_as_the_same_prediction(text):
    """A contributed row is one bench/accuracy.py can use: `express` turns it into a plan whose prediction of
    each row's statistic is the prediction of the plan that was measured."""
    config = measure.setup(plan_from_dict(yaml.safe_load(text)))
    rows = measure.dev_rows(config, MEASURED, row_id="x")
    assert [accuracy.statistic(r) for r in rows] == ["allocated", "reserved", "device"]
    predicted = measure.predict(config["plan"])
    for row, key in zip(rows, measure.MEASURED_KEYS, strict=True):
        plan, why = accuracy.express({k: str(v) for k, v in row.items()})
        assert why == "" and accuracy.predict(plan, accuracy.statistic(row)) == predicted[key]
        assert float(row["measured_gib"]) == pytest.approx(MEASURED[key] / 2**30, abs=1e-3)
    assert "torch 2.7.0; transformers 4.56.0; peft 0.17.0; driver 570.86; CUDA 12.8" == rows[0]["source_ref"]
    assert rows[0]["notes"].startswith(measure.workload_text(config).split(":")[0] + "; random weights; plan: {")
    assert yaml.safe_load(rows[0]["notes"].split("; plan: ")[1]) == config["plan"]


def test_a_measurement_the_run_cannot_see_is_a_dash():
    config = measure.setup(plan_from_dict(yaml.safe_load(LORA)))
    measured = MEASURED | {"peak_allocated_bytes": None, "peak_reserved_bytes": None}
    lines = measure.result_text(config, measured, measure.predict(config["plan"])).splitlines()
    assert lines[2].split()[:3] == ["max", "allocated", "-"] and lines[2].endswith(" -")
    assert len(measure.dev_rows(config, measured)) == 1


def test_the_run_builds_the_plans_gelu():
    """GPT2Config gets the plan's activation (an unset one is GPT2Config's own default, gelu_new, as planned)."""
    model = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}
    assert measure.hf_config("gpt2", {**model, "activation": "gelu"}, 64)[1]["activation_function"] == "gelu"
    assert "activation_function" not in measure.hf_config("gpt2", model, 64)[1]
    assert measure.normalize({"model": {**model, "mlp": "gelu"}})["plan"]["model"]["activation"] == "gelu_new"
