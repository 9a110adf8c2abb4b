"""Knowledge distillation (workload.objective distillation, planner/memory/distillation.py), worked by hand: the
student is TINY's shape (conftest) with SmolLM2's vocabulary of 49,152 (the KD loss needs the teacher's), the
teacher the smollm2-135m preset (30 layers, h 576, I 1,536, tied: 134,515,008 parameters); full fine-tune in pure
bf16, micro-batch 2 of 32 tokens (T 64), one GPU; plus invariants over generated plans and the torchtune import."""

from pathlib import Path

import pytest
from conftest import ROOT, TINY
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.catalog import load_catalog
from planner.errors import PlanError
from planner.formats import torchtune
from planner.memory import estimate
from planner.perf import step_time
from planner.plan.codec import plan_from_dict, plan_from_query, plan_from_yaml, plan_to_query, plan_to_yaml

V = 49_152
T = 64
TEACHER = 134_515_008  # embedding 49,152 × 576 + 30 × (attention 884,736 + MLP 2,654,208 + norms 1,152) + 576
STUDENT = {**TINY, "vocab_size": V}
PURE = {"compute": "bf16", "master_weights": "none"}
H100 = load_catalog()["h100-sxm-80gb"]
SHARED = ROOT.parent / "shared" / "configs" / "torchtune"


def kd(task="finetune", teacher="smollm2-135m", mb=2, objective="distillation", **sections):
    wl = {"task": task, "sequence_length": 32, "micro_batch_size": mb, "objective": objective}
    if objective == "distillation":
        wl["distillation"] = {"teacher": teacher, **sections.pop("distillation", {})}
    return plan_from_dict({"model": STUDENT, "workload": wl, "precision": PURE, **sections})


def phase_items(est, name):
    return {i.name: i.bytes for i in next(ph for ph in est.stages[0].phases if ph.name == name).items}


def names(est):
    return {i.name for ph in est.stages[0].phases for i in ph.items}


def test_teacher_items_by_hand():
    est = estimate(kd())
    fwd, tf = phase_items(est, "forward"), phase_items(est, "teacher forward")
    assert fwd["teacher_weights"] == TEACHER * 2  # bf16, every GPU holds all of it (no FSDP)
    # one teacher layer's MLP (h + 3 I) and the teacher's logits, bf16, beside the student's logits
    assert tf["teacher_forward"] == T * (576 + 3 * 1_536 + V) * 2 == 6_955_008
    assert tf["student_logits"] == T * V * 2
    # the teacher's logits 2 + saved 9 (teacher probs 4, student log-probs 4, inf mask 1) + one chunk's 8 / 8
    assert fwd["kd_loss"] == T * V * (2 + 9 + 1) == 37_748_736
    assert phase_items(est, "loss backward")["kd_loss"] == T * V * 9  # the teacher's logits deleted
    assert "kd_loss" not in phase_items(est, "output head backward")


def test_student_terms_are_sft():
    kd_fwd, sft_fwd = (
        phase_items(estimate(kd()), "forward"),
        phase_items(estimate(kd(objective="next_token")), "forward"),
    )
    for name in ("weights", "optimizer_states", "activations", "logits_loss"):
        assert kd_fwd[name] == sft_fwd[name]


def test_quantized_and_sharded_teacher():
    bf16 = phase_items(estimate(kd()), "forward")["teacher_weights"]
    nf4 = phase_items(estimate(kd(distillation={"teacher_weights": "nf4"})), "forward")["teacher_weights"]
    assert nf4 < bf16 / 2
    sharded = kd(parallelism={"data": 2, "zero_stage": 3}, hardware={"count": 2})
    assert phase_items(estimate(sharded), "forward")["teacher_weights"] == TEACHER * 2 // 2


def test_more_loss_chunks_hold_less():
    four, sixteen = (phase_items(estimate(kd(distillation={"loss_chunks": n})), "forward")["kd_loss"] for n in (4, 16))
    assert four - sixteen == T * V * 8 // 4 - T * V * 8 // 16


def test_teacher_forward_time_is_the_teachers():
    small, large = (
        {i.name: i.seconds for i in step_time(kd(teacher=t), H100).items} for t in ("smollm2-135m", "smollm2-360m")
    )
    assert 0 < small["teacher_forward"] < large["teacher_forward"]
    assert small["compute"] == large["compute"]  # the student's own step does not change
    assert "teacher_forward" not in {i.name for i in step_time(kd(objective="next_token"), H100).items}


@pytest.mark.parametrize(
    "workload, field, rule",
    [
        ({"distillation": {"teacher": "smollm2-135m"}}, "workload.distillation", "applies to workload.objective"),
        ({"objective": "distillation"}, "workload.distillation.teacher", "is required"),
        (
            {"objective": "distillation", "distillation": {"teacher": "nope"}},
            "workload.distillation.teacher",
            "is not a",
        ),
        (
            {"objective": "distillation", "distillation": {"teacher": "gpt2"}},
            "workload.distillation.teacher",
            "has vocab",
        ),
    ],
)
def test_validation(workload, field, rule):
    with pytest.raises(PlanError) as err:
        plan_from_dict({"model": STUDENT, "workload": {"task": "lora", **workload}})
    assert err.value.field == field and err.value.rule.startswith(rule)


def test_round_trips():
    plan = kd("lora", distillation={"loss_chunks": 4, "teacher_weights": "nf4"})
    assert plan_from_yaml(plan_to_yaml(plan)) == plan
    assert plan_from_query(plan_to_query(plan), {"model": STUDENT})[0] == plan


@settings(max_examples=20, deadline=None)
@given(
    task=st.sampled_from(["finetune", "lora", "qlora"]),
    mb=st.integers(1, 3),
    zero=st.sampled_from([0, 3]),
    chunks=st.sampled_from([1, 8]),
    teacher=st.sampled_from(["smollm2-135m", "smollm2-360m"]),
)
def test_invariants(task, mb, zero, chunks, teacher):
    par = {"data": 2, "zero_stage": zero}
    est = estimate(kd(task, teacher, mb, parallelism=par, distillation={"loss_chunks": chunks}))
    for ph in est.stages[0].phases:  # items add up
        assert ph.allocated_bytes == sum(i.bytes for i in ph.items if i.level == "allocated")
    sft = estimate(kd(task, mb=mb, objective="next_token", parallelism=par))
    assert not {n for n in names(sft) if n.startswith(("teacher", "kd_", "student_"))}  # kd off: no teacher terms
    assert est.peak_allocated_bytes > sft.peak_allocated_bytes


TUNE_CONFIGS = {
    "qwen2__1.5_to_0.5B_KD_lora_single_device.yaml": ("qwen2.5-0.5b", "qwen2.5-1.5b"),
    "llama3_2__8B_to_1B_KD_lora_distributed.yaml": ("llama-3.2-1b", "llama-3.1-8b"),
    "qwen2_5__14B_to_7B_KD_lora_single_device.yaml": ("qwen2.5-7b", "qwen2.5-14b"),
}


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"no config corpus at {SHARED}")
@pytest.mark.parametrize("name", sorted(TUNE_CONFIGS))
def test_torchtune_kd_configs_import_as_distillation(name):
    read = torchtune.read(Path(SHARED, name).read_text())
    student, teacher = TUNE_CONFIGS[name]
    assert read.plan["model"]["preset"] == student
    assert read.plan["workload"]["objective"] == "distillation"
    assert read.plan["workload"]["distillation"]["teacher"] == teacher
    assert not read.unknown


def test_torchtune_teacher_builders():
    base = "model:\n  _component_: torchtune.models.qwen2.lora_qwen2_0_5b\n  lora_attn_modules: ['q_proj']\n"
    base += "optimizer:\n  _component_: torch.optim.AdamW\n"
    base += "loss:\n  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss\n"
    qlora = torchtune.read(base + "teacher_model:\n  _component_: torchtune.models.qwen2.qlora_qwen2_1_5b\n")
    assert qlora.plan["workload"]["distillation"] == {"teacher": "qwen2.5-1.5b", "teacher_weights": "nf4"}
    chunks = "kd_loss:\n  _component_: torchtune.modules.loss.ForwardKLWithChunkedOutputLoss\n  num_output_chunks: 4\n"
    read = torchtune.read(base + "teacher_model:\n  _component_: torchtune.models.qwen2.qwen2_1_5b\n" + chunks)
    assert read.plan["workload"]["distillation"]["loss_chunks"] == 4
    with pytest.raises(PlanError) as err:
        torchtune.read(base + "teacher_model:\n  _component_: my.teacher\n")
    assert err.value.field == "teacher_model._component_"
    plan = {"framework": "torchtune", "model": {"preset": "qwen2.5-0.5b"}}
    plan["workload"] = {"task": "lora", "objective": "distillation", "distillation": {"teacher": "qwen2.5-1.5b"}}
    with pytest.raises(PlanError) as err:
        torchtune.write(plan_from_dict(plan))
    assert err.value.field == "workload.objective"
