"""planner/formats/vllm_log.py: vLLM's start-up log read, planned and compared; the `vllm-log` command."""

from pathlib import Path

import pytest

from planner.catalog import load_catalog
from planner.cli import main
from planner.errors import PlanError
from planner.formats.hf_config import model_from_hf_config
from planner.formats.vllm_log import compare, parse_vllm_log, plan_from_vllm_log, weights_note
from planner.plan.codec import plan_from_dict
from planner.plan.models import model_to_dict
from planner.units import GiB

LOGS = Path(__file__).parent / "data" / "vllm-logs"
EXAMPLES = Path(__file__).parent.parent / "examples"
# vLLM PR 10511's V0 table, `vllm serve meta-llama/Meta-Llama-3-8B` (14.96 GiB weights): the README's example
V0_TABLE = EXAMPLES / "vllm-llama-3-8b-h100.log"


def _gib(x: float) -> int:
    return round(x * GiB)


def test_v0_worker_lines_with_tensor_parallel_workers():
    log = parse_vllm_log((LOGS / "v0-tp4-pr14447.log").read_text())
    assert (log.total_bytes, log.utilization) == (_gib(23.58), 0.99)
    assert (log.weights_bytes, log.non_torch_bytes, log.activation_bytes, log.kv_cache_bytes) == (
        _gib(21.21),
        _gib(0.20),
        _gib(0.37),
        _gib(1.57),
    )
    imported = plan_from_vllm_log(log)
    assert imported.plan["hardware"] == {"gpu": "rtx-3090-24gb"}  # 23.59 GiB: the nearest within 1 %
    assert imported.plan["workload"]["inference"]["gpu_memory_utilization"] == 0.99


def test_v0_profiling_table():
    log = parse_vllm_log(V0_TABLE.read_text())
    assert (log.total_bytes, log.weights_bytes, log.non_torch_bytes, log.activation_bytes, log.kv_cache_bytes) == (
        _gib(79.22),
        _gib(14.96),
        _gib(1.79),
        _gib(1.26),
        _gib(53.29),
    )
    assert plan_from_vllm_log(log).plan["hardware"] == {"gpu": "h100-sxm-80gb"}


def test_a_command_pasted_with_the_log_says_the_model():
    log = parse_vllm_log(V0_TABLE.read_text())
    assert log.command == "vllm serve meta-llama/Meta-Llama-3-8B" and log.args == {}
    plan = plan_from_vllm_log(log).plan  # Llama 3 8B has Llama 3.1 8B's architecture; the utilization is logged
    assert plan["model"] == {"preset": "llama-3.1-8b"} and plan["hardware"] == {"gpu": "h100-sxm-80gb"}
    assert plan["workload"]["inference"]["gpu_memory_utilization"] == 0.9


def test_v1_lines():
    early = parse_vllm_log((LOGS / "v1-0.7-pr12569.log").read_text())
    assert (early.weights_bytes, early.gpu_blocks, early.concurrency_tokens, early.max_concurrency) == (
        _gib(67.7229),
        1381,
        2048,
        10.79,
    )
    log = parse_vllm_log((LOGS / "v1-0.8-pr17122.log").read_text())
    assert (log.weights_bytes, log.kv_tokens, log.concurrency_tokens, log.max_concurrency) == (
        _gib(14.9889),
        158_656,
        32_768,
        4.84,
    )
    assert plan_from_vllm_log(log).plan["workload"]["inference"]["prompt_tokens"] == 32_512  # + 256 output


def test_v1_free_memory_line_reads_rank_0():
    log = parse_vllm_log((LOGS / "v1-club3090-1087.log").read_text())
    assert (log.total_bytes, log.utilization, log.activation_bytes, log.cuda_graph_bytes, log.kv_cache_bytes) == (
        _gib(31.4),
        0.92,
        _gib(1.59),
        _gib(0.09),
        _gib(12.26),
    )  # TP1's 12.24 GiB is not taken
    assert plan_from_vllm_log(log).plan["hardware"] == {"gpu": "rtx-5090-32gb"}


def test_non_default_args_with_a_config_object():
    log = parse_vllm_log((LOGS / "v1-lmcache-2522.log").read_text())
    assert log.args["max_model_len"] == 1024
    assert log.args["kv_transfer_config"].startswith("KVTransferConfig(kv_connector='LMCacheConnectorV1'")
    imported = plan_from_vllm_log(log)
    assert imported.plan["model"] == {"preset": "llama-3.2-1b"}
    assert imported.plan["workload"]["inference"] == {
        "prompt_tokens": 768,
        "output_tokens": 256,
        "cuda_graphs": False,
        "gpu_memory_utilization": 0.35,
        "prefix_caching": True,
    }
    assert imported.unmodelled[0].startswith("--load-format:")


def test_errors():
    with pytest.raises(PlanError, match=r"^log: has none of vLLM's start-up memory lines"):
        parse_vllm_log("hello\nworld")
    with pytest.raises(PlanError, match=r"^non-default args: cannot be read as a Python dict"):
        parse_vllm_log("INFO non-default args: {'a': 1,, }")


def test_compare_with_a_plan():
    log = parse_vllm_log(V0_TABLE.read_text())
    plan = plan_from_dict(
        {
            "model": {"preset": "llama-3.1-8b"},
            "framework": "vllm",
            "framework_release": "0.8.0",
            "workload": {"task": "inference", "inference": {"gpu_memory_utilization": 0.9, "prompt_tokens": 7936}},
            "hardware": {"gpu": "h100-sxm-80gb"},
        }
    )
    cmp = compare(plan, log, load_catalog())
    rows = {r.item: r for r in cmp.rows}
    assert abs(rows["weights"].difference) < 0.01 * GiB  # 14.96 GiB: the planner's 8.03 B params in bf16
    assert rows["CUDA graphs"].log_bytes is None and rows["CUDA graphs"].difference is None
    assert cmp.kv_bytes_per_token == 131_072  # 32 layers × 2 × 8 KV heads × 128 × 2 B
    assert cmp.log_kv_tokens == _gib(53.29) // 131_072 // 16 * 16 == 436_544
    assert cmp.log_concurrency == pytest.approx(436_544 / 8192)


def test_cli(capsys, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("model: {preset: llama-3.1-8b}\nframework: vllm\nworkload: {task: inference}\n")
    assert main(["vllm-log", str(V0_TABLE), str(plan)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].split()[:3] == ["weights", "14.96", "GiB"]
    assert "the log's KV memory holds 436,544 tokens" in out
    assert main(["vllm-log", str(LOGS / "v1-club3090-1087.log")]) == 2
    assert capsys.readouterr().err == "error: log: names no model; give a PLAN.yaml to compare with\n"


@pytest.mark.parametrize(
    "line, release, note",
    [
        (
            "INFO 08-20 10:00:00 [core.py:71] Initializing a V1 LLM engine (v0.10.1.1) with config: ...",
            "0.10.1.1",
            None,
        ),
        ("INFO 07-30 10:00:00 [api_server.py:1] vLLM API server version 0.10.0rc2", "0.10.0", None),
        ("INFO 11-01 10:00:00 [core.py:71] Initializing a V1 LLM engine (v0.11.2) with config: ...", "0.11.0", None),
        (
            "INFO 12-13 19:54:18 llm_engine.py:249] Initializing an LLM engine (v0.6.4.post1) with config: ...",
            "0.8.0",
            "vLLM 0.6.4.post1: before the recipe's releases (from 0.8.0); planned with 0.8.0's memory accounting",
        ),
    ],
)
def test_the_logs_version_is_the_plans_release(line, release, note):
    log = parse_vllm_log(line + "\nINFO [gpu_model_runner.py:1] Model loading took 14.99 GiB and 3.6 seconds\n")
    imported = plan_from_vllm_log(log)
    assert imported.plan["framework_release"] == release
    assert (note in imported.unmodelled) if note else not imported.unmodelled


# --- issue 27: a hostile paste is one error, quickly ------------------------------------------------------------------
LOADED = "INFO [gpu_model_runner.py:1] Model loading took 14.99 GiB and 3.1 seconds\n"


@pytest.mark.parametrize(
    "run", ["1" * 40_000, "." * 40_000, "-1" * 20_000, "non-default args: {" * 20_000, "LLM engine (v" * 20_000]
)
def test_a_long_run_is_read_in_one_pass(run):
    """A figure's regex was tried at each position of a run of digits, each time taking the rest of it (40 kB:
    35-45 s); the args' and the version's scanned the rest of the line (or log) from each occurrence."""
    log = parse_vllm_log(LOADED + run + "\n")
    assert log.weights_bytes == _gib(14.99) and log.args == {} and log.version == ""


@pytest.mark.parametrize(
    "text, field, value, rule",
    [
        ("Model loading took 1.2.3 GiB and 3 seconds", "log", "1.2.3", "is not a figure vLLM prints (weights)"),
        ("GPU KV cache size: , tokens", "log", ",", "is not a figure vLLM prints (kv tokens)"),
        (
            f"Model loading took {'1' * 400} GiB and 3 seconds",
            "log",
            "1" * 400,
            "is not a figure vLLM prints (weights)",
        ),
        (
            "Maximum concurrency for 2048 tokens per request: 1.2.3x",
            "log",
            "1.2.3",
            "is not a figure vLLM prints (concurrency)",
        ),
        ("non-default args: {f(x): 1}", "non-default args", "f(x)", "is not an argument's name"),
        ("non-default args: {[1]: 1}", "non-default args", "[1]", "is not an argument's name"),
        ("non-default args: {**kw}", "non-default args", "**kw", "is not an argument's name"),
    ],
)
def test_a_figure_or_argument_vllm_cannot_print_is_an_error(text, field, value, rule):
    with pytest.raises(PlanError) as err:
        parse_vllm_log(text)
    assert (err.value.field, err.value.value, err.value.rule) == (field, value, rule)


def test_a_version_of_5000_digits_is_an_error_where_it_is_read():
    log = parse_vllm_log(f"INFO vLLM API server version {'1' * 5000}\n" + LOADED)
    with pytest.raises(PlanError) as err:
        plan_from_vllm_log(log)
    assert (err.value.field, err.value.rule) == ("log", "is not a vLLM version")


@pytest.mark.parametrize(
    "args",
    ["{'a': " + "-" * 30_000 + "1}", "{'a': " + "1+" * 30_000 + "1}", "{'a': '\0'}", "{'a': " + "1" * 5000 + "}"],
)
def test_arguments_pythons_parser_refuses_are_an_error(args):
    """CPython's parser reports a deep expression as RecursionError or MemoryError, a NUL or 5,000 digits as a
    SyntaxError."""
    with pytest.raises(PlanError, match=r"^non-default args: cannot be read as a Python dict"):
        parse_vllm_log(f"INFO non-default args: {args}\n")


def test_arguments_that_are_not_literals_are_kept_as_their_text():
    """Sliced from the line by the AST's byte offsets (ast.get_source_segment splits the whole line again for each
    value), past characters of more than one byte."""
    values = ", ".join(f"'k{i}': C(x={i})" for i in range(3_000))
    log = parse_vllm_log("INFO non-default args: {'max_model_len': 1024, 'n': 0x10, 'é': 'ü', " + values + "}\n")
    assert log.args["k2999"] == "C(x=2999)" and log.args["n"] == 16 and log.args["é"] == "ü"
    assert parse_vllm_log("INFO non-default args: {'a': {[1]: 2}}\n").args == {"a": "{[1]: 2}"}
    with pytest.raises(PlanError) as err:  # 75,000 of them: CPython's parser takes 270 MB for the line
        parse_vllm_log("INFO non-default args: {" + ", ".join(f"'k{i}': f(x)" for i in range(75_000)) + "}\n")
    assert err.value.rule == "1,188,890 characters is longer than the 65,536-character limit (vLLM's are a few KB)"


def test_a_log_over_the_size_cap_is_refused():
    with pytest.raises(PlanError, match=r"^log: 4,194,305 bytes is larger than the 4,194,304-byte limit$"):
        parse_vllm_log("x" * (4 * 1024 * 1024 + 1))


# --- issue 30: a plan the log cannot stand beside is refused, one of another size noted ---------------------------


def test_a_training_plan_is_refused_with_its_task(capsys):
    """It was a traceback (the estimate of a training plan has no serving budget)."""
    assert main(["vllm-log", str(V0_TABLE), str(EXAMPLES / "llama-3.1-8b-8xh100.yaml")]) == 2
    assert capsys.readouterr().err == (
        "error: workload.task: 'pretrain' is training: vLLM's log stands beside a "
        "serving plan (workload.task inference)\n"
    )
    log = parse_vllm_log(V0_TABLE.read_text())
    with pytest.raises(PlanError) as err:
        compare(plan_from_dict({"model": {"preset": "llama-3.1-8b"}, "workload": {"task": "lora"}}), log)
    assert (err.value.field, err.value.value) == ("workload.task", "lora")


def test_an_inference_plan_no_engine_serves_is_refused(capsys, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("model: {preset: llama-3.1-8b}\nworkload: {task: inference}\n")
    assert main(["vllm-log", str(V0_TABLE), str(plan)]) == 2
    assert capsys.readouterr().err == (
        "error: workload.inference.gpu_memory_utilization: not set, so no engine "
        "serves the plan: vLLM's log stands beside a serving plan (framework vllm "
        "sets it)\n"
    )


def test_a_plan_of_another_model_than_the_log_names_is_refused(capsys):
    """It compared silently: 70B's weights beside 8B's."""
    assert main(["vllm-log", str(V0_TABLE), str(EXAMPLES / "llama-3.1-70b-serving.yaml")]) == 2
    assert capsys.readouterr().err == (
        "error: model: 'llama-3.1-70b' is not the model the log serves "
        "(meta-llama/Meta-Llama-3-8B, preset llama-3.1-8b); compare a plan of that "
        "model, or the log's own plan\n"
    )
    log = parse_vllm_log("INFO non-default args: {'model': 'Qwen/Qwen3-8B'}\n" + LOADED)
    with pytest.raises(PlanError) as err:
        compare(
            plan_from_dict(
                {
                    "name": "mine",
                    "model": model_to_dict(
                        model_from_hf_config(
                            (Path(__file__).parent / "data" / "hf_configs" / "llama-3.1-8b.json").read_text()
                        )
                    ),
                    "framework": "vllm",
                    "workload": {"task": "inference"},
                }
            ),
            log,
        )
    assert (err.value.field, err.value.value, err.value.rule) == (
        "model",
        "mine",
        "is not the model the log serves (Qwen/Qwen3-8B, preset qwen3-8b); compare a plan of that "
        "model, or the log's own plan",
    )


def test_the_logs_architecture_under_another_name_is_the_same_model():
    """Llama 3 8B is served as the llama-3.1-8b preset; a plan of that architecture read from a config.json (no
    preset) is the same model, and its weights match: no note."""
    log = parse_vllm_log(V0_TABLE.read_text())
    model = model_to_dict(
        model_from_hf_config((Path(__file__).parent / "data" / "hf_configs" / "llama-3.1-8b.json").read_text())
    )
    plan = plan_from_dict(
        {"model": model, "framework": "vllm", "workload": {"task": "inference"}, "hardware": {"gpu": "h100-sxm-80gb"}}
    )
    assert plan.model.preset is None and compare(plan, log).note == ""


def test_weights_of_another_size_than_a_nameless_logs_are_noted(capsys):
    """A log that names no model (Llama 3.1 8B on an L40S, 14.99 GiB) beside a plan of 70B on TP 4 (70.55 B × 2 B / 4
    = 32.86 GiB a GPU): 2.19 ×, past WEIGHTS_MATCH (25 %), so the table is headed by a warning."""
    log = LOGS / "v1-0.8-pr17122.log"
    assert main(["vllm-log", str(log), str(EXAMPLES / "llama-3.1-70b-serving.yaml")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "warning: the log's weights take 14.99 GiB per GPU, the plan's 32.86 GiB (2.19 ×): the plan's model, "
        "tensor-parallel degree or weight dtype is likely not the log's, and then its rows compare two different runs"
    )
    logged = parse_vllm_log(log.read_text())
    assert logged.weights_bytes == _gib(14.9889)
    assert weights_note(logged, logged.weights_bytes + logged.weights_bytes // 4) == ""  # 25 % more: the same
    assert weights_note(logged, logged.weights_bytes - logged.weights_bytes // 4) == ""
    assert weights_note(logged, logged.weights_bytes + logged.weights_bytes // 4 + 2**20).startswith("warning: ")
    assert weights_note(logged, None) == ""
