"""Configs of stacks the planner does not read yet, recognised so that a refusal names the stack and why, rather
than "not a config this planner reads" (issue 31: "at least a clear 'not read yet' today").

Each entry: the stack, what marks its config (top-level YAML keys that stack's config schema has and no read
format's has, or a launch line's command), and why it is not read. A config of a read format never reaches this
table: `detect` tries every read format first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from planner.formats.base import Document
from planner.formats.reading import quiet_mapping


@dataclass(frozen=True, kw_only=True)
class Unread:
    stack: str
    keys: frozenset[str] = frozenset()  # every one of these top-level keys marks the stack's config
    command: str = ""  # or a launch line matching this pattern
    why: str


# Marks read from each stack's own config schema:
# - verl (volcengine/verl, trainer/config/ppo_trainer.yaml): actor_rollout_ref, algorithm; `python -m verl.trainer.*`
#   other than main_ppo, whose command lines planner/formats/verl.py reads
# - OpenRLHF (OpenRLHF/OpenRLHF, openrlhf/cli/*.py): launched as `openrlhf.cli.*` other than the four entry
#   points planner/formats/openrlhf.py reads
# - litgpt (Lightning-AI/litgpt, config_hub/finetune/*.yaml): checkpoint_dir, out_dir, precision, devices
#   (finetune) or model_name, initial_checkpoint_dir (pretrain)
# - MaxText (AI-Hypercomputer/maxtext, configs/base.yml): per_device_batch_size, max_target_length, or a
#   model file's base_emb_dim, base_num_decoder_layers
# - nanotron (huggingface/nanotron, examples/config_*.yaml): general, parallelism, tokens, data_stages
# - NeMo (NVIDIA/NeMo): a Hydra config's trainer, exp_manager, model; `nemo llm pretrain|finetune --factory`
# - Megatron-Bridge (NVIDIA-NeMo/Megatron-Bridge, ConfigContainer): train, ddp, dist, rng beside model
UNREAD = (
    Unread(
        stack="verl",
        keys=frozenset({"actor_rollout_ref", "algorithm"}),
        command=r"\bverl\.trainer\.",
        why="only `python -m verl.trainer.main_ppo` command lines are read (not its YAML, nor its other trainers)",
    ),
    Unread(
        stack="OpenRLHF",
        command=r"\bopenrlhf\.cli\.",
        why="only its train_sft, train_dpo, train_rm and train_ppo_ray command lines are read (not train_kto, "
        "train_prm, train_kd, ...)",
    ),
    Unread(
        stack="litgpt",
        keys=frozenset({"checkpoint_dir", "out_dir", "precision", "devices"}),
        why="litgpt's config hub YAML is not read yet",
    ),
    Unread(
        stack="litgpt",
        keys=frozenset({"model_name", "initial_checkpoint_dir", "out_dir"}),
        why="litgpt's config hub YAML is not read yet",
    ),
    Unread(
        stack="MaxText",
        keys=frozenset({"per_device_batch_size", "max_target_length"}),
        why="MaxText (JAX) configs are not read yet",
    ),
    Unread(
        stack="MaxText",
        keys=frozenset({"base_emb_dim", "base_num_decoder_layers"}),
        why="MaxText (JAX) model files are not read yet",
    ),
    Unread(
        stack="nanotron",
        keys=frozenset({"general", "parallelism", "tokens", "data_stages"}),
        why="nanotron configs are not read yet",
    ),
    Unread(
        stack="NeMo", keys=frozenset({"trainer", "exp_manager", "model"}), why="NeMo's Hydra configs are not read yet"
    ),
    Unread(
        stack="NeMo",
        command=r"\bnemo\s+llm\s+(pretrain|finetune)\b",
        why="NeMo 2 recipes (Python factories) are not read yet",
    ),
    Unread(
        stack="Megatron-Bridge",
        keys=frozenset({"train", "ddp", "dist", "rng"}),
        why="Megatron-Bridge's ConfigContainer overrides are not read yet",
    ),
)


def unread_stack(doc: Document) -> Unread | None:
    """The stack whose config this is, where the planner recognises it but does not read it."""
    top = set(quiet_mapping(doc))
    for entry in UNREAD:
        if entry.keys and entry.keys <= top or entry.command and re.search(entry.command, doc.text):
            return entry
    return None
