"""The Streamlit app through streamlit.testing (AppTest): every input group, the share link, files, errors."""

import pytest
from streamlit.testing.v1 import AppTest

from conftest import ROOT
from planner.export import plan_from_query, plan_to_yaml
from planner.plan import plan_from_dict

APP = str(ROOT / "app.py")
DEFAULT = {"model": {"preset": "llama-3.1-8b"}}


def app(query=None):
    at = AppTest.from_file(APP, default_timeout=60)
    if query:
        at.query_params.update(query)
    return at.run()


def table(at, column):
    return next(df.value for df in at.dataframe if column in df.value.columns)


def test_first_page_shows_a_real_plan():
    at = app()
    assert not at.exception
    assert at.success[0].value.startswith("fits on NVIDIA H100 SXM 80GB ×8: needs ")
    assert [m.label for m in at.metric] == ["peak allocated", "peak reserved", "device", "usable"]
    assert "Optimizer states" in set(table(at, "formula")["item"])
    assert at.query_params["preset"] == "llama-3.1-8b" and at.query_params["zero_stage"] == "3"


def test_share_link_round_trip():
    query = {"preset": "llama-3.1-70b", "task": "qlora", "rank": "16", "targets": "q,v,down",
             "sequence_length": "2048", "gpu": "a100-sxm-80gb"}
    at = app(query)
    assert not at.exception and not at.warning
    assert at.selectbox(key="preset").value == "llama-3.1-70b" and at.number_input(key="rank").value == 16
    plan, warnings = plan_from_query(dict(at.query_params), DEFAULT)
    assert warnings == [] and plan.workload.lora.targets == ("q", "v", "down")
    assert plan.hardware.gpu == "a100-sxm-80gb" and plan.precision.weights == "nf4"
    at.number_input(key="rank").set_value(32).run()
    assert at.query_params["rank"] == "32"


@pytest.mark.parametrize("query", [
    {"tensor": "7", "sequence_length": "-5", "bogus": "1"},
    {"preset": "no-such-model", "gpu": "tpu"},
    {"task": "inference", "batch_size": "1e99", "gpu_memory_utilization": "lots"},
    {"targets": "q,,zz", "task": "lora", "rank": "0"},
])
def test_tampered_links_warn_and_never_crash(query):
    at = app(query)
    assert not at.exception
    assert at.warning and all(w.value.startswith("Share link: ") for w in at.warning)
    assert at.success or at.error


def test_each_input_group_changes_the_plan():
    at = app()
    at.selectbox(key="task").select("lora").run()
    assert not at.exception and "LoRA adapters" in set(table(at, "formula")["item"])
    at.selectbox(key="task").select("qlora").run()
    weights = table(at, "formula").set_index("item").loc["Weights (frozen base)", "formula"]
    assert not at.exception and "in nf4 + scales" in weights
    at.selectbox(key="task").select("inference").run()
    at.checkbox(key="serving").check().run()
    assert not at.exception and "sequences of 1,280 tokens" in at.success[0].value
    at.selectbox(key="task").select("pretrain").run()
    at.selectbox(key="compute").select("fp8").run()
    at.selectbox(key="activation_checkpointing").select("full").run()
    at.selectbox(key="optimizer").select("adamw_8bit").run()
    assert not at.exception and at.success
    at.selectbox(key="preset").select("mixtral-8x7b").run()
    at.number_input(key="expert").set_value(8).run()
    assert not at.exception and "EP" not in at.error  # valid: 8 experts over 8 data-parallel GPUs
    dispatch = table(at, "formula").set_index("item").loc["Expert all-to-all buffers", "formula"]
    at.number_input(key="moe_capacity_factor").set_value(1.25).run()
    assert not at.exception and at.query_params["moe_capacity_factor"] == "1.25"
    assert "2.5 routed slots" in table(at, "formula").set_index("item").loc["Expert all-to-all buffers", "formula"]
    assert "2 routed slots" in dispatch
    at.selectbox(key="preset").select("custom").run()
    at.number_input(key="num_layers").set_value(4).run()
    assert not at.exception and at.query_params["num_layers"] == "4"


def test_invalid_combination_is_an_error_message_not_a_traceback():
    at = app()
    at.selectbox(key="preset").select("gpt2").run()
    at.selectbox(key="tensor").select(8).run()
    assert not at.exception
    assert at.error[0].value == "parallelism.tensor: 8 does not divide model.num_attention_heads (12)"


def test_adopting_a_recommendation():
    at = app()
    at.button(key="adopt_0").click().run()
    assert not at.exception
    assert at.selectbox(key="gpu").value != "h100-sxm-80gb" or at.number_input(key="data").value != 8


def test_price_override_reorders_candidates():
    at = app()
    at.number_input(key="price").set_value(0.01).run()
    assert not at.exception and table(at, "job_usd")["gpu"][0] == "h100-sxm-80gb"


def test_plan_upload_and_a_bad_file():
    at = app()
    text = plan_to_yaml(plan_from_dict({"model": {"preset": "qwen2.5-0.5b"}, "workload": {"sequence_length": 1024}}))
    at.file_uploader(key="plan_upload").upload("plan.yaml", text.encode(), "application/x-yaml").run()
    assert not at.exception and at.selectbox(key="preset").value == "qwen2.5-0.5b"
    assert at.number_input(key="sequence_length").value == 1024
    at = app()
    at.file_uploader(key="plan_upload").upload("bad.yaml", b"model: [", "application/x-yaml").run()
    assert not at.exception and any(e.value.startswith("Plan file: plan: not valid YAML") for e in at.error)


def test_uploaded_catalog_and_a_bad_one():
    at = app()
    at.file_uploader(key="catalog_upload").upload("mine.yaml", (ROOT / "gpu_catalog.yaml").read_bytes(),
                                                  "application/x-yaml").run()
    assert not at.exception and any("Using your catalog" in c.value for c in at.caption)
    at = app()
    at.file_uploader(key="catalog_upload").upload("bad.yaml", b"gpus: 3", "application/x-yaml").run()
    assert not at.exception
    assert any(e.value == "gpu_catalog: must be a mapping with exactly the keys 'schema' and 'gpus'" for e in at.error)


def test_downloads_and_share_link_are_offered():
    at = app()
    labels = {b.label for b in at.get("download_button")}
    assert {"Plan (YAML)", "Breakdown (CSV)", "Breakdown (JSON)"} <= labels
    assert any("preset=llama-3.1-8b" in c.value for c in at.code)


def test_custom_latent_attention_model_keeps_its_fields_and_link():
    at = app()
    at.selectbox(key="preset").select("deepseek-v2-lite").run()
    preset_total = at.metric[0].value
    at.selectbox(key="preset").select("custom").run()
    assert not at.exception and at.number_input(key="kv_lora_rank").value == 512
    assert at.number_input(key="q_lora_rank").value == 0 and at.metric[0].value == preset_total
    assert at.query_params["kv_lora_rank"] == "512" and "q_lora_rank" not in at.query_params
    at.number_input(key="q_lora_rank").set_value(1536).run()
    assert not at.exception and at.query_params["q_lora_rank"] == "1536"
    plan, warnings = plan_from_query(dict(at.query_params), DEFAULT)
    assert not warnings and plan.model.q_lora_rank == 1536 and plan.model.qk_rope_head_dim == 64


def test_pasted_hf_config_becomes_the_custom_model_and_errors_show():
    at = app()
    at.text_area(key="hf_text").input((ROOT / "tests" / "data" / "hf_configs" / "qwen3-30b-a3b.json").read_text())
    at.button(key="hf_import").click().run()
    assert not at.exception and at.selectbox(key="preset").value == "custom"
    assert at.number_input(key="num_experts").value == 128 and at.number_input(key="head_dim").value == 128
    assert at.query_params["num_experts"] == "128" and at.query_params["zero_stage"] == "3"  # the rest is kept
    at.text_area(key="hf_text").input('{"model_type": "llama", "hidden_size": 4096}')
    at.button(key="hf_import").click().run()
    assert not at.exception and any(e.value.startswith("config.json: hf_config: missing num_hidden_layers or n_layer")
                                    for e in at.error)
    assert at.number_input(key="num_experts").value == 128  # a bad config changes nothing


def test_parameter_count_mode_is_marked_approximate_and_shareable():
    at = app()
    at.selectbox(key="preset").select("params").run()
    at.text_input(key="params_text").input("13B").run()
    assert not at.exception and at.warning[0].value.startswith("APPROXIMATE: architecture guessed from 13B parameters")
    assert at.query_params["params"] == "13000000000" and "num_layers" not in at.query_params
    plan, warnings = plan_from_query(dict(at.query_params), DEFAULT)
    assert not warnings and plan.model.approx_params == 13_000_000_000
    at.text_input(key="params_text").input("lots").run()
    assert not at.exception and any(e.value == "model.params: 'lots' must be a parameter count like 13B, 770M or 1.5e9"
                                    for e in at.error)
    linked = app({"params": "70B", "task": "lora"})
    assert linked.selectbox(key="preset").value == "params" and linked.text_input(key="params_text").value == "70B"
    assert linked.warning[0].value.startswith("APPROXIMATE: architecture guessed from 70B parameters (63 layers")


def test_random_tampered_links_never_show_an_exception():
    import random
    import sys
    sys.path.insert(0, str(ROOT / "bench"))
    import fuzz
    rng = random.Random(3)
    links = [p for kind, p in (fuzz.malformed_inputs(rng, ["model: {preset: gpt2}\n"]) for _ in range(40))
             if kind == "link"]
    for params in links[:6]:  # bench/fuzz.py's link generator: unknown keys, repeats, NaN, 1e99, YAML in values
        query = {k: v[-1] if isinstance(v, list) else v for k, v in params.items()}
        at = app(query)
        assert not at.exception, query
        assert at.success or at.error


def test_optimizer_in_backward_checkbox():
    at = app({"preset": "llama-3.2-1b", "gpu": "h100-sxm-80gb"})
    at.checkbox(key="optimizer_in_backward").check().run()
    assert not at.exception and at.query_params["optimizer_in_backward"] == "true"
    plan, warnings = plan_from_query(dict(at.query_params), DEFAULT)
    assert not warnings and plan.techniques.optimizer_in_backward
    at.selectbox(key="activation_checkpointing").select("every_k").run()
    at.number_input(key="checkpoint_every").set_value(4).run()
    assert not at.exception and at.query_params["checkpoint_every"] == "4"
    at.selectbox(key="loss").select("chunked").run()
    at.number_input(key="loss_chunks").set_value(16).run()
    assert not at.exception and at.query_params["loss"] == "chunked" and at.query_params["loss_chunks"] == "16"
    at.number_input(key="global_batch_size").set_value(4).run()  # accumulation: refused with the rule
    assert not at.exception and any("needs one micro-batch per step" in e.value for e in at.error)


def test_custom_from_a_qwen3_preset_keeps_its_qk_norms():
    at = app()
    at.selectbox(key="preset").select("qwen3-8b").run()
    total = at.metric[0].value
    at.selectbox(key="preset").select("custom").run()
    assert not at.exception and at.checkbox(key="qk_norm").value and at.metric[0].value == total
    assert at.query_params["qk_norm"] == "true"


def test_framework_sets_its_recipe_and_shows_what_it_set():
    at = app()
    at.selectbox(key="framework").set_value("torchtune").run()
    assert not at.exception and not at.error
    # the default plan runs on 8 GPUs: torchtune's distributed recipe (FSDP2, pure bf16, chunked loss, full AC)
    assert at.selectbox(key="loss").value == "chunked" and at.selectbox(key="master_weights").value == "none"
    assert at.selectbox(key="activation_checkpointing").value == "full" and at.selectbox(key="zero_stage").value == 3
    assert at.query_params["framework"] == "torchtune"
    settings = table(at, "source")
    assert set(settings["in this plan"]) == {"from the framework"}
    # a value the user changes wins, and is reported as changed
    at.selectbox(key="loss").set_value("full").run()
    settings = table(at, "source")
    assert settings.set_index("key").loc["techniques.loss", "in this plan"] == "changed by you"
    # back to generic: the keys torchtune governed return to the planner's defaults, the rest stays
    at.selectbox(key="framework").set_value("generic").run()
    assert at.selectbox(key="master_weights").value == "fp32" and at.selectbox(key="loss").value == "full"
    assert at.number_input(key="data").value == 8


def test_new_technique_widgets_reach_the_plan():
    at = app({"preset": "llama-3.1-8b", "pipeline": "4", "data": "2", "tensor": "1", "zero_stage": "1",
              "global_batch_size": "16"})
    at.selectbox(key="pipeline_schedule").set_value("interleaved_1f1b").run()
    at.checkbox(key="compile").check().run()
    at.selectbox(key="activation_checkpointing").set_value("selective_op").run()
    assert not at.exception and not at.error
    assert at.query_params["pipeline_schedule"] == "interleaved_1f1b" and at.query_params["virtual_stages"] == "2"
    assert at.query_params["compile"] == "true" and at.query_params["activation_checkpointing"] == "selective_op"
