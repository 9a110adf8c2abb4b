"""planner/formats/unread.py: configs of stacks the planner recognises but does not read are refused by name."""

from pathlib import Path

import pytest
from conftest import ROOT

from planner.errors import PlanError
from planner.formats import read_config

# Small configs written for these tests, each with the marks of its stack's schema.
SAMPLES = {
    "verl": (
        "actor_rollout_ref:\n  model:\n    path: Qwen/Qwen2.5-7B\nalgorithm:\n  adv_estimator: grpo\n",
        "is a config of verl: only `python -m verl.trainer.main_ppo` command lines are read (not its YAML, nor its "
        "other trainers)",
    ),
    "OpenRLHF": (
        "deepspeed --module openrlhf.cli.train_kto --pretrain meta-llama/Llama-3.1-8B --zero_stage 3\n",
        "is a config of OpenRLHF: only its train_sft, train_dpo, train_rm and train_ppo_ray command lines are read "
        "(not train_kto, train_prm, train_kd, ...)",
    ),
    "litgpt": (
        "checkpoint_dir: checkpoints/org/model\nout_dir: out/lora\nprecision: bf16-true\ndevices: 1\n",
        "is a config of litgpt: litgpt's config hub YAML is not read yet",
    ),
    "MaxText": (
        "base_config: base.yml\nper_device_batch_size: 4\nmax_target_length: 4096\n",
        "is a config of MaxText: MaxText (JAX) configs are not read yet",
    ),
    "nanotron": (
        "general:\n  project: p\nparallelism:\n  dp: 2\ntokens:\n  sequence_length: 2048\ndata_stages: []\n",
        "is a config of nanotron: nanotron configs are not read yet",
    ),
    "NeMo": (
        "trainer:\n  devices: 8\nexp_manager:\n  name: run\nmodel:\n  micro_batch_size: 1\n",
        "is a config of NeMo: NeMo's Hydra configs are not read yet",
    ),
    "Megatron-Bridge": (
        "model:\n  seq_length: 4096\ntrain:\n  global_batch_size: 64\nddp: {}\ndist: {}\nrng:\n  seed: 1\n",
        "is a config of Megatron-Bridge: Megatron-Bridge's ConfigContainer overrides are not read yet",
    ),
}


@pytest.mark.parametrize("stack", SAMPLES)
def test_a_recognised_stack_is_refused_by_name(stack):
    text, message = SAMPLES[stack]
    with pytest.raises(PlanError) as caught:
        read_config(text)
    assert str(caught.value) == f"config: {message}"


def test_an_unknown_config_still_says_what_is_read():
    with pytest.raises(PlanError, match="is not a config this planner reads"):
        read_config("learning_rate_schedule: cosine\nwidth: 3\n")


CORPUS = ROOT.parent / "shared" / "configs" / "unsupported"
STACKS = {
    "litgpt": "litgpt",
    "maxtext": "MaxText",
    "nanotron": "nanotron",
    "nemo": "NeMo",
    "megatron_bridge": "Megatron-Bridge",
}


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared config corpus (../shared/configs) is not here")
@pytest.mark.parametrize("folder", STACKS)
def test_the_corpus_configs_of_unread_stacks_are_refused_by_name(folder):
    files = [p for p in sorted((CORPUS / folder).iterdir()) if p.name != "SOURCES.md"]
    assert files
    for path in files:
        with pytest.raises(PlanError) as caught:
            read_config(Path(path).read_text())
        assert f"is a config of {STACKS[folder]}: " in str(caught.value), path.name
