"""The GPU measurement harness: its grid is valid plans covering every dimension, rows are written as measured,
and (where torch is installed) each workload kind runs end to end on CPU for tiny shapes."""

import csv
import io

import measure_gpu
import pytest
import yaml

from planner.measure.plan import append_csv, predict
from planner.plan.codec import plan_from_dict


def test_module_does_not_import_torch():
    assert "torch" not in vars(measure_gpu)


def test_dry_run_validates_every_plan_of_the_grid():
    configs = measure_gpu.grid()
    out = io.StringIO()
    rows = measure_gpu.dry_run(configs, stream=out)
    assert 60 <= len(rows) == len(configs) <= 80
    assert len({c["name"] for c in configs}) == len(configs)  # names identify rows
    assert all(r["peak_allocated_bytes"] <= r["peak_reserved_bytes"] <= r["device_bytes"] for r in rows)
    assert all(r["device_bytes"] < 78 * 2**30 for r in rows)  # each fits one H100
    assert f"{len(configs)} configurations, every plan valid" in out.getvalue()


def test_main_dry_run_needs_no_torch(capsys):
    assert measure_gpu.main(["--grid", "--dry-run", "--filter", "inference"]) == 0
    assert "every plan valid" in capsys.readouterr().out
    one = (
        '{"model": {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,'
        ' "vocab_size": 512, "mlp": "gelu", "norm": "layernorm", "bias": true}}'
    )
    assert measure_gpu.main(["--config", one, "--dry-run"]) == 0
    assert "gpt2" in capsys.readouterr().out  # arch inferred from the gelu MLP


def test_grid_covers_each_dimension():
    plans = [(c["arch"], plan_from_dict(c["plan"])) for c in measure_gpu.grid()]
    train = [p for _, p in plans if p.workload.task != "inference"]
    assert {a for a, _ in plans} == {"llama", "qwen2", "gpt2", "mixtral"}
    sizes = [
        p.model.num_layers * p.model.hidden_size**2 * 12 + p.model.vocab_size * p.model.hidden_size for _, p in plans
    ]
    assert min(sizes) < 200e6 and max(sizes) > 2.5e9  # ~100M to ~3B
    assert {(p.precision.compute, p.precision.master_weights) for p in train} >= {
        ("bf16", "none"),
        ("bf16", "fp32"),
        ("fp32", "fp32"),
    }
    assert {p.techniques.activation_checkpointing for p in train} == {"none", "full"}
    assert {p.techniques.attention for p in train} == {"flash", "eager"}
    assert {(p.precision.optimizer, p.precision.optimizer_impl) for p in train} >= {
        ("adamw", "foreach"),
        ("adamw", "fused"),
        ("sgd", "foreach"),
    }
    assert "adamw_8bit" in {p.precision.optimizer for p in train}
    assert {p.workload.task for _, p in plans} == {"pretrain", "finetune", "lora", "qlora", "inference"}
    assert all(p.precision.weights == "nf4" for p in train if p.workload.task == "qlora")
    llama_1b = [p for p in train if p.model.hidden_size == 2048 and p.workload.task == "pretrain"]
    assert len({p.workload.micro_batch_size for p in llama_1b}) >= 4
    assert len({p.workload.sequence_length for p in llama_1b}) >= 4
    inference = [p.workload.inference for _, p in plans if p.workload.task == "inference"]
    assert len({i.batch_size for i in inference}) >= 3 and len({i.prompt_tokens for i in inference}) >= 3


def test_writer_puts_measured_values_in_their_columns(tmp_path):
    config = measure_gpu.grid()[0]
    measured = {
        "status": "ok",
        "error": "",
        "peak_allocated_bytes": 111,
        "peak_reserved_bytes": 222,
        "device_bytes": 333,
        "device_bytes_source": "nvidia-smi process used_memory",
        "device": "NVIDIA H100",
        "driver_version": "570.1",
        "torch_version": "2.13.0",
        "transformers_version": "5.18.0",
        "peft_version": "0.21.2",
        "bitsandbytes_version": "",
        "wall_s": 1.5,
    }
    path = tmp_path / "sub" / "rows.csv"
    path.parent.mkdir()
    for _ in range(2):  # appends, header once
        append_csv(path, [measure_gpu.make_row(config, measured)], measure_gpu.COLUMNS)
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 2 and list(rows[0]) == measure_gpu.COLUMNS
    row = rows[0]
    assert (
        row["measured_peak_allocated_bytes"],
        row["measured_peak_reserved_bytes"],
        row["measured_device_bytes"],
    ) == ("111", "222", "333")
    assert row["device"] == "NVIDIA H100" and row["driver_version"] == "570.1" and row["wall_s"] == "1.5"
    assert yaml.safe_load(row["plan_yaml"]) == config["plan"]
    predicted = predict(config["plan"])
    assert int(row["predicted_peak_reserved_bytes"]) == predicted["peak_reserved_bytes"]
    assert int(row["predicted_device_bytes"]) == predicted["device_bytes"]
    skipped = measure_gpu.make_row(config, {"status": "skipped", "error": "no bitsandbytes"})
    assert skipped["measured_device_bytes"] == "" and skipped["predicted_device_bytes"] != ""


def test_cpu_mode_runs_each_workload_end_to_end(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    by_name = {c["name"]: c for c in measure_gpu.grid()}
    picks = [
        by_name["llama-1b_pretrain_amp_adamw_ckpt-full_eager_s2048_b1"],
        by_name["qwen2-0.5b_lora_r8-qkvo_amp_adamw_ckpt-none_sdpa_s4096_b1"],
        by_name["mixtral-0.6b_inference_bf16_sdpa_b4_p1024_o128"],
        by_name["llama-1b_qlora_r16-qkvogud_amp_adamw_ckpt-none_sdpa_s2048_b2"],
    ]
    rows = measure_gpu.measure(picks, "cpu", tmp_path / "cpu.csv", subprocesses=False, stream=io.StringIO())
    assert [r["status"] for r in rows[:3]] == ["ok"] * 3, [r["error"] for r in rows]
    assert rows[3]["status"] == "skipped" and "bitsandbytes" in rows[3]["error"]
    assert all(r["name"].startswith("tiny_") and r["device"] in ("cpu", "") for r in rows)


def test_the_grid_measures_dpo_and_reward_steps():
    plans = {c["name"]: c["plan"]["workload"] for c in measure_gpu.grid()}
    objectives = [w.get("objective", "next_token") for w in plans.values()]
    assert objectives.count("preference") == 9 and objectives.count("reward") == 3
    lora_dpo = [w for w in plans.values() if w.get("objective") == "preference" and w["task"] == "lora"]
    assert len(lora_dpo) == 2  # the reference is the policy with its adapters disabled


def test_a_row_records_how_many_children_ran_at_once(tmp_path):
    config = measure_gpu.grid()[0]
    row = measure_gpu.make_row(config, {"status": "ok", "peak_allocated_bytes": 1}, jobs=3)
    assert row["children_at_once"] == 3
