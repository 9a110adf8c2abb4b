"""Preference (DPO family) and reward plans, worked by hand on TINY (conftest: 2 layers, h 64, I 128, V 1,000,
202,048 parameters of which the untied output head is V·h = 64,000), plus invariants over generated plans."""

import pytest
from conftest import TINY
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.catalog import load_catalog
from planner.errors import PlanError
from planner.memory import estimate
from planner.perf import step_time
from planner.plan.codec import plan_from_dict, plan_from_query, plan_from_yaml, plan_to_query, plan_to_yaml

P, V, H = 202_048, 1_000, 64
PURE = {"compute": "bf16", "master_weights": "none"}
LAYER = 128 * 2_448  # one layer's activations at T = 128: norms 16h + attention 400 + MLP 1,024 per token


def tiny(task="finetune", objective="next_token", mb=2, preference=None, **sections):
    wl = {"task": task, "sequence_length": 32, "micro_batch_size": mb, "objective": objective}
    if preference:
        wl["preference"] = preference
    return plan_from_dict({"model": TINY, "workload": wl, "precision": PURE, **sections})


def items(est):
    return {i.name: i.bytes for i in est.items}


def phase_items(est, name):
    return {i.name: i.bytes for i in next(ph for ph in est.stages[0].phases if ph.name == name).items}


def test_dpo_full_finetune_items_by_hand():
    """Micro-batch 2 of 32 tokens: 2 × 2 sequences (chosen + rejected) = T 128 tokens through the policy."""
    est = estimate(tiny(objective="preference"))
    ref = phase_items(est, "reference forward")
    assert ref["weights"] == P * 2 and ref["optimizer_states"] == P * 2 * 2
    assert ref["reference_weights"] == P * 2  # a bf16 copy of every parameter, unsharded (ZeRO 0)
    assert ref["activations"] == 2 * LAYER + 128 * 8 * H  # 2 layers + the final norm's fp32 input and output
    assert ref["logits_loss"] == 128 * V * (2 + 2)  # TRL's bf16 logits and each row's saved log-softmax
    # the reference's logits, then the larger of two log-softmax rows (32 · V each) and DPOTrainer's metrics: the
    # entropy's copy of the shifted logits and its 128-row chunk (log-softmax, exp, product)
    metrics = 128 * V * 2 + 128 * V * 3 * 2
    assert ref["reference_forward"] == 128 * V * 2 + max(2 * 2 * 32 * V, metrics) == 1_280_000 > LAYER


def test_dpo_with_fp32_weights_has_an_fp32_reference_and_autocast_log_softmax():
    """AMP: TRL builds the reference with the policy's model_init_kwargs (fp32), and autocast runs log_softmax in
    fp32: 2 B logits + 4 B saved log-softmax; each log-prob row is its fp32 cast, the new row and the held one."""
    amp = {"compute": "bf16", "master_weights": "fp32"}
    plan = plan_from_dict({"model": TINY, "workload": {"task": "finetune", "sequence_length": 32,
        "micro_batch_size": 2, "objective": "preference"}, "precision": amp})  # fmt: skip
    est = estimate(plan)
    ref = phase_items(est, "reference forward")
    assert ref["reference_weights"] == P * 4
    assert ref["logits_loss"] == 128 * V * (2 + 4)
    metrics = 128 * V * 2 + 128 * V * 3 * 4
    assert ref["reference_forward"] == 128 * V * 2 + max(12 * 32 * V, metrics)


def test_dpo_in_fp32_keeps_only_the_logits_and_peaks_in_the_log_probs_backward():
    """TRL's fp32 branch gathers and takes a logsumexp per row: the logits alone are saved (4 B); its backward
    holds them, the gather's scattered zeros, the rows' gradients and their stack: 16 B a logit."""
    fp32 = {"compute": "fp32", "master_weights": "fp32"}
    plan = plan_from_dict({"model": TINY, "workload": {"task": "finetune", "sequence_length": 32,
        "micro_batch_size": 2, "objective": "preference"}, "precision": fp32})  # fmt: skip
    est = estimate(plan)
    assert phase_items(est, "forward")["logits_loss"] == 128 * V * 4
    assert phase_items(est, "loss backward")["logits_loss"] == 128 * V * 16


def test_simpo_adds_the_nll_cross_entropy_on_the_chosen_half():
    """CPO's simpo (cpo_alpha 1.0): a contiguous copy of the chosen half's logits and its saved log-softmax."""
    simpo = phase_items(estimate(tiny(objective="preference", preference={"loss_type": "simpo"})), "forward")
    assert simpo["logits_loss"] == 128 * V * (2 + 2) + 128 * V * (2 + 2) // 2


def test_dpo_policy_terms_are_sft_at_twice_the_micro_batch():
    dpo, sft = items(estimate(tiny(objective="preference"))), items(estimate(tiny(mb=4)))
    assert dpo["activations"] == sft["activations"]


def test_reward_model_has_a_score_head_and_no_logits():
    est = estimate(tiny(objective="reward"))
    got = items(est)
    assert got["weights"] == (P - V * H + H) * 2  # the vocabulary head replaced by h × 1
    assert "logits_loss" not in got
    assert all("logits_loss" not in {i.name for i in ph.items} for ph in est.stages[0].phases)


@pytest.mark.parametrize(
    ("task", "preference", "reference"),
    [
        ("finetune", None, "separate"),
        ("lora", None, "adapters_disabled"),
        ("qlora", None, "adapters_disabled"),
        ("lora", {"loss_type": "simpo"}, "none"),
        ("finetune", {"loss_type": "orpo"}, "none"),
        ("finetune", {"reference": "precomputed"}, "precomputed"),
    ],
)
def test_the_reference_defaults_follow_loss_and_task(task, preference, reference):
    assert tiny(task, "preference", preference=preference).workload.preference.reference == reference


def test_no_reference_bytes_or_forward_without_a_separate_reference():
    for plan in (tiny("lora", "preference"), tiny(objective="preference", preference={"reference": "precomputed"})):
        names = {i.name for ph in estimate(plan).stages[0].phases for i in ph.items}
        assert "reference_weights" not in names
    assert "reference forward" in [ph.name for ph in estimate(tiny("lora", "preference")).stages[0].phases]


def test_reference_is_sharded_under_zero3():
    est = estimate(tiny(objective="preference", parallelism={"data": 2, "zero_stage": 3}))
    assert phase_items(est, "reference forward")["reference_weights"] == P * 2 // 2


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        (
            {"task": "pretrain", "objective": "preference"},
            "workload.objective: 'preference' post-trains a pretrained model: workload.task must be finetune, lora or "
            "qlora, not pretrain",
        ),
        (
            {"task": "finetune", "objective": "preference", "preference": {"reference": "adapters_disabled"}},
            "workload.preference.reference: 'adapters_disabled' needs adapters to disable (workload.task lora or "
            "qlora, "
            "not finetune)",
        ),
        (
            {"task": "lora", "objective": "preference", "preference": {"loss_type": "simpo", "reference": "separate"}},
            "workload.preference.reference: 'separate' must be none: the simpo loss uses no reference model",
        ),
        (
            {"task": "lora", "objective": "preference", "preference": {"reference": "none"}},
            "workload.preference.reference: 'none' needs a reference for the dpo loss (separate, adapters_disabled or "
            "precomputed)",
        ),
    ],
)
def test_validation_messages(workload, message):
    with pytest.raises(PlanError) as err:
        plan_from_dict({"model": TINY, "workload": workload})
    assert str(err.value) == message


def test_preference_keys_need_the_preference_objective():
    with pytest.raises(PlanError, match="applies to workload.objective preference"):
        plan_from_dict({"model": TINY, "workload": {"task": "lora", "preference": {"loss_type": "ipo"}}})


def test_pipeline_is_refused():
    with pytest.raises(PlanError, match="is not modelled for workload.objective reward"):
        tiny(objective="reward", parallelism={"pipeline": 2})


@pytest.mark.parametrize(
    "plan",
    [
        tiny("lora", "preference", preference={"loss_type": "ipo"}),
        tiny(objective="reward"),
        tiny("qlora", "preference", preference={"loss_type": "orpo"}),
    ],
)
def test_round_trips(plan):
    assert plan_from_yaml(plan_to_yaml(plan)) == plan
    assert plan_from_query(plan_to_query(plan), {"model": TINY})[0] == plan


def test_reference_forward_time_and_reward_head():
    gpu = load_catalog()["h100-sxm-80gb"]
    dpo = {i.name: i.seconds for i in step_time(tiny(objective="preference"), gpu).items}
    pre = {
        i.name: i.seconds
        for i in step_time(tiny(objective="preference", preference={"reference": "precomputed"}), gpu).items
    }
    assert dpo["reference_forward"] > 0 and "reference_forward" not in pre
    assert dpo["compute"] == pre["compute"]


@settings(max_examples=25, deadline=None)
@given(
    task=st.sampled_from(["finetune", "lora", "qlora"]),
    mb=st.integers(1, 4),
    zero=st.sampled_from([0, 3]),
    loss=st.sampled_from(["dpo", "ipo"]),
)
def test_invariants(task, mb, zero, loss):
    par = {"data": 2, "zero_stage": zero}
    plans = {
        ref: tiny(task, "preference", mb, {"loss_type": loss, "reference": ref}, parallelism=par)
        for ref in ("separate", "precomputed")
    }
    ests = {ref: estimate(p) for ref, p in plans.items()}
    for est in ests.values():
        for ph in est.stages[0].phases:  # items add up
            assert ph.allocated_bytes == sum(i.bytes for i in ph.items if i.level == "allocated")
    assert ests["precomputed"].peak_allocated_bytes <= ests["separate"].peak_allocated_bytes
    # the policy's step holds at least SFT's at the same micro-batch, but for the loss: TRL's log-probs keep 4 B a
    # logit at twice the sequences where HF's cross-entropy keeps 10
    sft = estimate(tiny(task, "next_token", mb, parallelism=par))
    sft_loss = max((i.bytes for ph in sft.stages[0].phases for i in ph.items if i.name == "logits_loss"), default=0)
    assert ests["precomputed"].peak_allocated_bytes >= sft.peak_allocated_bytes - sft_loss
    reward = estimate(tiny(task, "reward", mb, parallelism=par))
    assert all(i.name != "logits_loss" for ph in reward.stages[0].phases for i in ph.items)


# --- KTO: unpaired completions, a KL batch through the policy (no grad) and the reference ----------------------
def kto(mb=2, **kw):
    return tiny(kw.pop("task", "finetune"), "preference", mb, {"loss_type": "kto", **kw.pop("preference", {})}, **kw)


def test_kto_items_by_hand():
    """Micro-batch 2 of 32 tokens, unpaired: T 64 through the policy (not DPO's 128); the KL forward and the
    reference's forward each hold one layer at T 64 and the logits of the 2 sequences + one row."""
    est = estimate(kto())
    kl, ref = phase_items(est, "KL forward"), phase_items(est, "reference forward")
    layer = 64 * 2_448
    assert kl["kl_forward"] == layer + (64 + 32) * V * 2 == 348_672
    assert "activations" not in kl and "logits_loss" not in kl  # before the policy's graph
    assert ref["reference_forward"] == 64 * V * 2 + 2 * 2 * 32 * V  # its logits and two rows; no DPO metrics
    assert ref["activations"] == 2 * layer + 64 * 8 * H and ref["logits_loss"] == 64 * V * (2 + 2)
    assert ref["reference_weights"] == P * 2


def test_kto_policy_terms_are_sft_at_the_micro_batch():
    kto_fwd, sft_fwd = phase_items(estimate(kto()), "forward"), phase_items(estimate(tiny(mb=2)), "forward")
    assert kto_fwd["activations"] == sft_fwd["activations"]
    assert kto_fwd["logits_loss"] == 64 * V * (2 + 2) < sft_fwd["logits_loss"]  # TRL's log-probs, not HF's loss


def test_kto_forwards_in_time():
    """Four forwards a step: the policy's with grad, its KL forward, and the reference's two."""
    step = {i.name: i.seconds for i in step_time(kto(), load_catalog()["h100-sxm-80gb"]).items}
    assert step["reference_forward"] == pytest.approx(2 * step["kl_forward"]) and step["kl_forward"] > 0


def test_kto_needs_two_examples_per_micro_batch():
    with pytest.raises(PlanError) as err:
        kto(mb=1)
    assert (err.value.field, err.value.value) == ("workload.micro_batch_size", 1)
    assert err.value.rule.startswith("must be at least 2 for the kto loss")


def test_kto_with_adapters_disabled_and_precomputed():
    def names(plan):
        return {i.name for ph in estimate(plan).stages[0].phases for i in ph.items}

    lora = names(kto(task="lora"))
    assert "reference_weights" not in lora and "reference_forward" in lora
    pre = names(kto(preference={"reference": "precomputed"}))
    assert "reference_forward" not in pre and "kl_forward" in pre  # the policy's KL forward stays
    assert plan_from_yaml(plan_to_yaml(kto(task="lora"))) == kto(task="lora")


@settings(max_examples=20, deadline=None)
@given(task=st.sampled_from(["finetune", "lora", "qlora"]), mb=st.integers(2, 4), zero=st.sampled_from([0, 3]))
def test_kto_invariants(task, mb, zero):
    est = estimate(kto(mb, task=task, parallelism={"data": 2, "zero_stage": zero}))
    for ph in est.stages[0].phases:  # items add up
        assert ph.allocated_bytes == sum(i.bytes for i in ph.items if i.level == "allocated")
    names = [ph.name for ph in est.stages[0].phases]
    assert names.index("KL forward") < names.index("forward") < names.index("reference forward")
    # the KL forward holds no graph: never above the reference forward, which holds it
    kl, ref = (next(p for p in est.stages[0].phases if p.name == n) for n in ("KL forward", "reference forward"))
    assert kl.allocated_bytes <= ref.allocated_bytes


def test_upcast_log_probs_by_hand():
    """LLaMA-Factory's get_batch_logps: the logits cast to fp32 (4 B) and their whole log-softmax (4 B), held; the
    reference's the same, freed once its log-probs are taken; backward as cross-entropy's 12 B a logit."""
    est = estimate(tiny(objective="preference", preference={"log_probs": "upcast"}))
    ref = phase_items(est, "reference forward")
    assert ref["logits_loss"] == 128 * V * 8 and ref["reference_forward"] == max(LAYER, 128 * V * 8) == 1_024_000
    assert phase_items(est, "loss backward")["logits_loss"] == 128 * V * 12
