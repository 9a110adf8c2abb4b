import contextlib
import io
import json
import os
import subprocess
import sys
from typing import get_args

import pytest
from conftest import ROOT

from planner.cli import main
from planner.plan.choices import CHOICES, LISTS, choices_to_table
from planner.plan.codec import plan_from_yaml, plan_to_dict
from planner.plan.config import Optimizer
from planner.views.export import formats_to_table, frameworks_to_table

EXAMPLE = str(ROOT / "examples" / "llama-3.1-8b-8xh100.yaml")

pytestmark = pytest.mark.cli


def run(*args, stdin=None):
    """The command's main run in this process from the checkout's root, as the console script calls it: its exit
    status, stdout and stderr (a process start costs a second of imports; `run_process` pays it where a test is
    about the process itself)."""
    out, err, cwd, given = io.StringIO(), io.StringIO(), os.getcwd(), sys.stdin
    sys.stdin = io.StringIO(stdin or "")
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse: a usage error, or --help
                code = exc.code or 0
    finally:
        os.chdir(cwd)
        sys.stdin = given
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def run_process(*args, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "planner", *args], cwd=ROOT, capture_output=True, text=True, input=stdin, timeout=60
    )


def test_the_command_runs_as_a_process_reading_stdin_and_exiting_2_on_an_error():
    out = run_process("estimate", "-", "--format", "json", stdin="model: {preset: gpt2}\n")
    assert out.returncode == 0 and json.loads(out.stdout)["plan"]["model"]["preset"] == "gpt2"
    bad = run_process("estimate", "-", stdin="model: {preset: gpt2}\nparallelism: {tensor: 5}\n")
    assert bad.returncode == 2 and bad.stdout == "" and bad.stderr.startswith("error: parallelism.tensor: 5 ")
    assert run_process().returncode == 2  # argparse's usage error


def test_estimate_json():
    out = run("estimate", EXAMPLE, "--format", "json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["fits"] is True and d["phase"] == "loss backward"
    assert sum(i["bytes"] for i in d["items"] if i["level"] == "allocated") == d["peak_allocated_bytes"]


def test_estimate_table_and_yaml():
    assert "device_bytes" in run("estimate", EXAMPLE).stdout
    assert run("estimate", EXAMPLE, "--format", "yaml").stdout.startswith("peak_allocated_bytes: ")


def test_user_errors_exit_2_with_one_line():
    out = run("estimate", "-", stdin="model: {preset: gpt2}\nparallelism: {tensor: 5}\n")
    assert out.returncode == 2 and out.stdout == ""
    assert (
        out.stderr
        == "error: parallelism.tensor: 5 does not divide model.num_attention_heads (12); allowed: 1, 2, 3, 4, 6, 12\n"
    )
    missing = run("estimate", "missing.yaml")
    assert missing.returncode == 2 and missing.stderr.startswith("error: missing.yaml: cannot read")
    assert run("estimate", EXAMPLE, "--catalog", "nope.yaml").returncode == 2


def test_bad_arguments_exit_2():
    assert run("estimate", EXAMPLE, "--format", "xml").returncode == 2
    assert run().returncode == 2


def test_recommend_json_contract():
    out = run("recommend", EXAMPLE, "--format", "json", "--top", "3", "--price", "h100-sxm-80gb=1.5")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert {"recommended", "ties", "frontier", "candidates", "rejected", "deadline_hours", "price_kind"} <= set(data)
    rows = data["candidates"]
    assert len(rows) == 3 and data["recommended"] == {**rows[0], "caveats": data["recommended"]["caveats"]}
    for row in rows:
        assert {
            "gpu",
            "offering",
            "count",
            "paid_gpus",
            "parallelism",
            "device_bytes",
            "usd_per_hour",
            "job_hours",
            "job_usd",
            "meets_deadline",
            "price",
        } <= set(row)
    assert [r["job_usd"] for r in rows] == sorted(r["job_usd"] for r in rows)
    h100 = [r for r in data["candidates"] if r["gpu"] == "h100-sxm-80gb"]
    assert all(r["usd_per_gpu_hour"] == 1.5 and r["price"] is None for r in h100)  # yours: no catalog source


def test_recommend_table_and_fixed_gpu():
    out = run("recommend", EXAMPLE, "--fix", "gpu", "--top", "2", "--rank", "hour")
    assert out.returncode == 0 and "recommended: " in out.stdout and "NVIDIA H100 SXM 80GB" in out.stdout
    assert "ranked by cost per hour" in out.stdout and "deadline 30.0 days; on-demand prices dated " in out.stdout


def test_recommend_deadline_gpu_cap_and_frontier(tmp_path):
    plan = tmp_path / "pretrain.yaml"
    plan.write_text(
        "model: {preset: llama-3.1-8b}\nworkload: {sequence_length: 4096, global_batch_size: 512, "
        "train_tokens: 1000000000000}\n"
    )
    out = run("recommend", str(plan), "--deadline", "14d", "--frontier", "--top", "3")
    assert out.returncode == 0, out.stderr
    assert "deadline 14.0 days" in out.stdout and "recommended: " in out.stdout
    assert "cost-time frontier of each GPU type:" in out.stdout
    data = json.loads(run("recommend", str(plan), "--deadline", "14d", "--format", "json").stdout)
    assert data["recommended"]["meets_deadline"] and data["recommended"]["job_hours"] <= 14 * 24
    none = json.loads(run("recommend", str(plan), "--deadline", "none", "--format", "json").stdout)
    assert none["deadline_hours"] is None and none["recommended"]["job_usd"] <= data["recommended"]["job_usd"]
    capped = run("recommend", str(plan), "--deadline", "1d", "--max-gpus", "8")
    assert "nothing meets the deadline; fastest found: 8 × " in capped.stdout
    held = json.loads(
        run("recommend", str(plan), "--deadline", "14d", "--deadline-at", "slow-end", "--format", "json").stdout
    )
    assert held["deadline_at"] == "slow_end" and held["model_deadline_hours"] < held["deadline_hours"] == 14 * 24
    assert held["recommended"]["job_hours"] <= held["model_deadline_hours"]


def test_recommend_with_your_own_offering(tmp_path):
    ours = tmp_path / "ours.yaml"
    ours.write_text(
        "schema: vram-planner-offerings/v1\nofferings:\n- {id: our-cluster, gpu: h100-sxm-80gb, "
        "provider: us, provider_class: own, instance: 8x node, gpus_per_instance: 8, instance_link: "
        "fabric, host_memory_gib_per_gpu: 256, cpu_cores_per_gpu: 16, network: infiniband, "
        "network_gbit_per_s_per_gpu: 400, max_gpus: 512, spec_source: our wiki, prices: [{kind: "
        "on_demand, usd_per_gpu_hour: 0.5, date: '2026-11-01', source: our finance team}]}\n"
    )
    out = run("recommend", EXAMPLE, "--offerings", str(ours), "--providers", "own", "--format", "json")
    assert out.returncode == 0, out.stderr
    best = json.loads(out.stdout)["recommended"]
    assert (best["offering"], best["usd_per_gpu_hour"], best["price"]["source"]) == (
        "our-cluster",
        0.5,
        "our finance team",
    )
    estimated = run(
        "estimate",
        "-",
        "--offerings",
        str(ours),
        stdin="model: {preset: llama-3.2-1b}\nhardware: {gpu: h100-sxm-80gb, count: 8, offering: our-cluster}\n",
    )
    assert estimated.returncode == 0, estimated.stderr


def test_recommend_serving_target_and_latency_bounds(tmp_path):
    plan = tmp_path / "serve.yaml"
    plan.write_text(
        "model: {preset: llama-3.1-8b}\nworkload: {task: inference, inference: {batch_size: 8, "
        "gpu_memory_utilization: 0.9}}\n"
    )
    out = run("recommend", str(plan), "--rps", "10", "--ttft", "2s", "--tpot", "50ms", "--format", "json")
    assert out.returncode == 0, out.stderr
    best = json.loads(out.stdout)["recommended"]
    assert best["ttft_s"] <= 2 and best["tpot_s"] <= 0.05 and best["replicas"] >= 1
    table = run("recommend", str(plan), "--rps", "10", "--ttft", "2s", "--tpot", "50ms").stdout
    assert "10 requests/s, TTFT ≤ 2 s, TPOT ≤ 50 ms" in table and "ranked by cost per hour" in table


def test_recommend_user_errors():
    bad_price = run("recommend", EXAMPLE, "--price", "h100")
    assert bad_price.returncode == 2
    assert bad_price.stderr == "error: --price: 'h100' must look like GPU=NUMBER, e.g. h100-sxm-80gb=2.10\n"
    assert run("recommend", EXAMPLE, "--top", "0").stderr == "error: --top: 0 must be at least 1\n"
    assert run("recommend", EXAMPLE, "--mfu", "2").stderr.startswith("error: mfu: 2.0 must be a fraction")
    assert run("recommend", EXAMPLE, "--deadline", "soon").stderr == (
        "error: --deadline: 'soon' must be a positive number with a unit: ms, s, min, h, d or w (e.g. 30d), or none\n"
    )
    assert run("recommend", EXAMPLE, "--providers", "cheap").stderr.startswith(
        "error: provider_classes: 'cheap' is not one of: hyperscaler, neocloud"
    )
    assert run("estimate", EXAMPLE, "--offerings", "nope.yaml").stderr.startswith("error: --offerings: cannot read")


def test_limits():
    out = run("limits", EXAMPLE)
    assert out.returncode == 0, out.stderr
    assert "largest micro-batch: " in out.stdout and "longest sequence:" in out.stdout
    assert "fewest NVIDIA H100 SXM 80GB: " in out.stdout


def test_hf_config_replaces_the_model_or_makes_the_default_plan():
    config = str(ROOT / "tests" / "data" / "hf_configs" / "mixtral-8x7b.json")
    result = run("estimate", EXAMPLE, "--hf-config", config, "--format", "json")
    model = json.loads(result.stdout)["plan"]["model"]
    # its architecture is the preset's exactly: it names the preset, and says so
    # (planner/plan/models.py preset_of_shape)
    assert model["preset"] == "mixtral-8x7b" and model["num_experts"] == 8 and model["experts_per_token"] == 2
    assert result.stderr == (
        f"note: model {config} resolved as preset mixtral-8x7b by shape (its layers, hidden "
        "size, heads, kv heads, head dim, intermediate size, vocabulary and every other "
        "architecture field are mixtral-8x7b's)\n"
    )
    with_plan = json.loads(result.stdout)
    assert with_plan["plan"]["parallelism"]["zero_stage"] == 3  # the rest of the example plan is kept
    alone = run("estimate", "--hf-config", config)
    assert alone.returncode == 0 and alone.stdout.startswith("mixtral-8x7b.json\ndoes not fit on NVIDIA H100")
    neither = run("limits")
    assert neither.returncode == 2
    assert neither.stderr == (
        "error: plan: give a plan file, --from CONFIG, or --hf-config CONFIG.json for the default plan of that model\n"
    )
    bad = run("estimate", "--hf-config", "-", stdin='{"model_type": "bert"}')
    assert bad.returncode == 2 and bad.stderr.startswith("error: hf_config: model_type 'bert' is not a known family")


def test_models_lists_every_preset_with_counts():
    rows = json.loads(run("models", "--format", "json").stdout)
    by_id = {r["id"]: r for r in rows}
    assert by_id["llama-3.1-8b"]["params"] == 8_030_261_248 and by_id["deepseek-v3"]["features"] == [
        "MoE 256×top-8",
        "MLA",
    ]
    assert all(abs(r["params"] - r["published_params"]) <= 0.01 * r["published_params"] for r in rows)
    table = run("models").stdout.splitlines()
    assert (
        table[0].split() == ["id", "params", "active", "layers", "hidden", "features"] and len(table) == len(rows) + 2
    )


def test_a_parameter_count_plan_is_marked_approximate_in_every_format():
    plan = "model: {params: 13B}\n"
    note = "APPROXIMATE: architecture guessed from 13B parameters (35 layers × 5,120 hidden"
    table = run("estimate", "-", stdin=plan).stdout.splitlines()
    assert table[0] == "~13B-parameter model pre-training on 1 × NVIDIA H100 SXM 80GB" and table[1].startswith(note)
    assert json.loads(run("estimate", "-", "--format", "json", stdin=plan).stdout)["approximate_model"].startswith(note)
    assert run("limits", "-", stdin=plan).stdout.startswith(note)
    assert run("recommend", "-", "--top", "1", stdin=plan).stdout.startswith(note)
    machine = run("recommend", "-", "--top", "1", "--format", "json", stdin=plan)
    assert json.loads(machine.stdout)["candidates"][0]["count"] >= 1 and machine.stderr.startswith(note)


def test_hf_config_by_hub_repo_id_is_optional_and_offline_testable(monkeypatch, tmp_path, capsys):
    import types

    from planner import cli

    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # not installed
    assert cli.main(["estimate", "--hf-config", "mistralai/Mixtral-8x7B-v0.1"]) == 2
    assert capsys.readouterr().err == (
        "error: --hf-config: 'mistralai/Mixtral-8x7B-v0.1' is not a file; reading a "
        "Hub repo id needs huggingface_hub (pip install huggingface_hub)\n"
    )
    asked = []

    def download(repo_id, filename):
        asked.append((repo_id, filename))
        if repo_id.startswith("gated/"):
            raise OSError("401 Client Error: access to the repository is restricted")
        return str(ROOT / "tests" / "data" / "hf_configs" / "mixtral-8x7b.json")

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(hf_hub_download=download))
    assert cli.main(["estimate", "--hf-config", "mistralai/Mixtral-8x7B-v0.1", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["model"]["num_experts"] == 8
    assert cli.main(["estimate", "--hf-config", "gated/model"]) == 2
    assert capsys.readouterr().err == (
        "error: --hf-config: cannot fetch config.json of 'gated/model' from the Hugging "
        "Face Hub (OSError: 401 Client Error: access to the repository is restricted)\n"
    )
    assert asked == [("mistralai/Mixtral-8x7B-v0.1", "config.json"), ("gated/model", "config.json")]


def test_frameworks_lists_each_setting_with_its_source():
    out = run("frameworks", "--format", "json")
    assert out.returncode == 0, out.stderr
    torchtune = json.loads(out.stdout)["torchtune"]
    loss = next(s for s in torchtune["settings"] if s["key"] == "techniques.loss")
    assert loss["value"] == "chunked" and loss["when"] == {} and "CEWithChunkedOutputLoss" in loss["source"]
    text = run("frameworks")  # for a terminal: one line per setting, no Markdown
    assert text.returncode == 0 and text.stdout.startswith("generic (") and "|" not in text.stdout
    assert "  techniques.compile_scope: blocks  [when release from 2024-12-18 before 2025-04-02]" in text.stdout
    assert run("frameworks", "--format", "markdown").stdout == frameworks_to_table()


def test_choices_come_from_the_plans_types_and_match_the_docs():
    out = run("choices")
    assert out.returncode == 0 and out.stdout == choices_to_table()
    assert choices_to_table() in (ROOT / "docs" / "plan-keys.md").read_text()
    assert json.loads(run("choices", "--format", "json").stdout)["precision.optimizer"] == list(get_args(Optimizer))
    assert CHOICES["parallelism.zero_stage"] == (0, 1, 2, 3) and "workload.lora.targets" in LISTS
    assert "--rank {job,hour}" in run("recommend", "--help").stdout


# the issue-14 link: 128 layers of 256 experts at micro-batch 8,192, a search no budget-free run finishes soon
HEAVY = (
    "model: {preset: qwen3-235b-a22b, num_layers: 128, num_experts: 256}\n"
    "workload: {micro_batch_size: 8192, global_batch_size: 8192}\ntechniques: {attention: eager}\n"
)


def test_recommend_budget_cuts_the_search_and_the_table_says_so(tmp_path):
    heavy = tmp_path / "heavy.yaml"
    heavy.write_text(HEAVY)
    out = run("recommend", str(heavy), "--budget", "0.3")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[2].startswith("search cut after ") and "not searched (budget):" in out.stdout


def test_limits_of_an_inference_plan_speak_of_sequences_and_prompts(tmp_path):
    plan = tmp_path / "serve.yaml"
    plan.write_text("model: {preset: llama-3.2-1b}\nworkload: {task: inference, inference: {batch_size: 4}}\n")
    out = run("limits", str(plan))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[1].startswith("  most sequences at once: ") and lines[1].endswith(" (1,280 tokens each)")
    # Llama 3.2 1B's cache would hold more: its 131,072-token context window less the output caps the prompt
    assert lines[2] == "  longest prompt:         130,816 tokens (batch 4, 256 output, the model's context window)"
    assert "micro-batch" not in out.stdout


CONFIGS = ROOT / "tests" / "data" / "configs"
TORCHTITAN_8B = str(CONFIGS / "torchtitan" / "llama3_8b.toml")


def test_import_prints_the_plan_a_config_says_and_what_each_key_became():
    out = run("import", TORCHTITAN_8B, "--gpus", "64")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"# the plan of {TORCHTITAN_8B} (torchtitan); the config's keys read:\n")
    assert "#   parallelism.tensor_parallel_degree -> parallelism.tensor: 1\n" in out.stdout
    plan = plan_from_yaml(out.stdout)  # the output is a plan file
    assert (
        plan.model.preset,
        plan.framework,
        plan.hardware.count,
        plan.parallelism.data,
        plan.parallelism.zero_stage,
    ) == ("llama-3.1-8b", "torchtitan", 64, 64, 3)
    assert plan.name == "llama3_8b.toml"


def test_import_lists_the_keys_it_could_not_use_on_stderr():
    out = run("import", "-", "--gpus", "1", stdin="vllm serve Qwen/Qwen2.5-7B-Instruct --cpu-offload-gb 4 --frob 2")
    assert out.returncode == 0
    lines = out.stderr.splitlines()
    assert lines[-1] == "unknown key, not used: --frob"
    assert any(line.startswith("not modelled: --cpu-offload-gb") for line in lines)


def test_a_config_without_a_model_takes_preset_gpu_and_count_from_options():
    ds = str(CONFIGS / "deepspeed" / "zero3_offload_zero_buckets.json")
    missing = run("estimate", "--from", ds)
    assert missing.returncode == 2 and missing.stderr == (
        "error: model: the deepspeed config names no model; give the model (a preset or a config.json)\n"
    )
    out = run(
        "estimate",
        "--from",
        ds,
        "--preset",
        "llama-3.1-8b",
        "--gpu",
        "a100-sxm-80gb",
        "--gpus",
        "4",
        "--format",
        "json",
    )
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)["plan"]
    assert (plan["framework"], plan["model"]["preset"], plan["hardware"], plan["parallelism"]["zero_stage"]) == (
        "deepspeed",
        "llama-3.1-8b",
        {"gpu": "a100-sxm-80gb", "count": 4, "offering": None, "host_memory_gib_per_gpu": None},
        3,
    )


def test_from_and_a_plan_file_are_one_or_the_other():
    both = run("estimate", EXAMPLE, "--from", TORCHTITAN_8B)
    assert both.returncode == 2 and both.stderr == "error: --from: replaces the plan file; give one or the other\n"
    stray = run("estimate", EXAMPLE, "--gpus", "8")
    assert stray.returncode == 2 and stray.stderr == "error: --gpus: applies to a framework config (--from CONFIG)\n"
    unknown = run("import", TORCHTITAN_8B, "--framework", "nemo")
    assert unknown.returncode == 2 and unknown.stderr.startswith("error: --framework: 'nemo' is not a config format;")


def test_export_writes_the_config_and_names_what_it_cannot_carry(tmp_path):
    out = run("export", EXAMPLE, "--to", "torchtitan")
    assert out.returncode == 0 and "[parallelism]\n" in out.stdout
    assert "torchtitan cannot say techniques.expandable_segments = False" in out.stderr
    config = tmp_path / "job.toml"
    config.write_text(out.stdout)
    back = run("import", str(config), "--gpus", "8")
    example = plan_to_dict(plan_from_yaml((ROOT / "examples" / "llama-3.1-8b-8xh100.yaml").read_text()))
    imported = plan_to_dict(plan_from_yaml(back.stdout))
    for section, key in (
        ("workload", "sequence_length"),
        ("workload", "micro_batch_size"),
        ("parallelism", "zero_stage"),
        ("techniques", "activation_checkpointing"),
    ):
        assert imported[section][key] == example[section][key]
    wrong = run("export", EXAMPLE, "--to", "vllm")
    assert wrong.returncode == 2 and wrong.stderr == (
        "error: --to: 'vllm' serves models, and the plan's task is pretrain; allowed: torchtitan, torchtune, "
        "axolotl, deepspeed, hf_trainer, accelerate, megatron\n"
    )


def test_formats_prints_the_docs_table():
    out = run("formats")
    assert out.returncode == 0 and out.stdout == formats_to_table()
    assert formats_to_table() in (ROOT / "docs" / "formats.md").read_text()


def test_limits_answer_within_their_budget(tmp_path):
    """Issue 27: the fewest-GPUs search of `limits` had no budget; cut, it says so instead of "none fits"."""
    heavy = tmp_path / "heavy.yaml"
    heavy.write_text(HEAVY)
    out = run("limits", str(heavy), "--budget", "0.01")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "fewest NVIDIA H100 SXM 80GB: none found within the 0.01 s budget (--budget)"
