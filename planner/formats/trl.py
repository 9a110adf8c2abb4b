"""TRL's post-training trainers: which one a command line or config runs, and its preference keys as the plan's
workload.objective and workload.preference (pairwise preference and reward training); the trainers the plan does not
describe yet (unpaired preference, online RL, distillation) are refused naming issue 33.

Sources: huggingface/trl@f2cd577 (2026-07-24) trl/trainer/dpo_config.py (beta, loss_type default ["sigmoid"],
precompute_ref_log_probs, max_length 1024), trl/trainer/dpo_trainer.py (DPOTrainer.__init__: the reference is
None, the adapters disabled, where the model is a PEFT model or precompute_ref_log_probs is set; else a second
copy loaded from the model's path), trl/trainer/reward_trainer.py (chosen and rejected scored in one batch),
trl/experimental/cpo/cpo_trainer.py and trl/experimental/orpo/orpo_trainer.py (no reference model), and
examples/scripts/*.py (the trainer each script builds).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from planner.errors import PlanError, bad
from planner.formats.reading import Reading, as_bool, as_texts
from planner.formats.trl_ppo import PPO_KEYS
from planner.plan.config import Plan

ISSUE = "not a workload the plan describes yet (issue 33, post-training plans)"
_UNPAIRED = f"unpaired preference training (one completion per example, labelled good or bad) is {ISSUE}"
_ONLINE = f"online RL (completions generated each step, then scored) is {ISSUE}"
_DISTILL = f"distillation (a teacher model's forward each step beside the student's) is {ISSUE}"
# examples/scripts/<family>[_variant].py, trl/scripts/<family>.py, `trl <family>`: the trainer each family builds
TRAINERS = {
    "dpo": "dpo",  # dpo.py, dpo_vlm.py: DPOTrainer
    "mpo": "dpo",  # mpo_vlm.py: DPOTrainer with loss_type [sigmoid, bco_pair, sft]
    "orpo": "orpo",  # experimental ORPOTrainer
    "cpo": "cpo",  # experimental CPOTrainer (loss_type simpo is SimPO)
    "reward": "reward",  # reward_modeling.py: RewardTrainer
    "kto": "kto",  # kto.py: KTOTrainer (unpaired completions, workload.preference.loss_type kto)
    "ppo": "ppo",  # ppo/ppo.py, ppo/ppo_tldr.py: experimental PPOTrainer (planner/formats/trl_ppo.py)
}
REFUSED = {
    "bco": _UNPAIRED,
    **dict.fromkeys(("rloo", "grpo", "gspo", "online", "nash", "xpo", "sdpo", "gfpo", "dapo"), _ONLINE),
    **dict.fromkeys(("gkd", "gold", "distillation"), _DISTILL),
    "prm": f"a process reward model (PRMTrainer: one score per reasoning step, token classification) is {ISSUE}",
    "tpo": f"TPO (three ranked completions per prompt, trl/experimental/tpo) is {ISSUE}",
}
REFERENCE = "workload.preference.reference"
# DPOConfig loss_type → workload.preference.loss_type: sigmoid is DPO, ipo IPO; every other DPOTrainer loss (hinge,
# exo_pair, nca_pair, robust, bco_pair, sppo_hard, aot, aot_unpaired, apo_zero, apo_down, discopop, sft,
# sigmoid_norm) is computed from the same policy and reference log-probabilities of the chosen and rejected
# completions, so it costs what dpo does
DPO_LOSSES: tuple[str, ...] = (
    "sigmoid",
    "hinge",
    "ipo",
    "exo_pair",
    "nca_pair",
    "robust",
    "bco_pair",
    "sppo_hard",
    "aot",
)
DPO_LOSSES += ("aot_unpaired", "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm")
# keys that say a YAML with no script is a DPOConfig (SFTConfig has a loss_type too: nll or dft)
DPO_KEYS = ("beta", "precompute_ref_log_probs", "ref_model_init_kwargs")


def family(script: str) -> str:
    """A script's trainer family: the first word of its file name (grpo_agent.py → grpo; `trl dpo` → dpo)."""
    stem = script.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".py")
    return stem.split("_", 1)[0].lower()


def trainer(script: str, values: dict[str, Any], name: Callable[[str], str]) -> tuple[str, str]:
    """The trainer a config runs and what says so: its script's family where it names one, else dpo where
    DPOConfig's keys are given (a YAML names no script), else sft; a trainer the plan does not describe is refused."""
    kind = family(script) if script else ""
    if "num_generations" in values:  # GRPOConfig's group size: hf_trainer.read_grpo plans it (workload.rl)
        return "grpo", ""
    if kind in REFUSED:
        raise PlanError("script", f"{script}: {REFUSED[kind]}")
    if kind in TRAINERS:
        return TRAINERS[kind], f"(the script {script})"
    said = [key for key in DPO_KEYS if key in values]
    if kind != "sft" and (said or any(loss in DPO_LOSSES for loss in _listed(values.get("loss_type")))):
        return "dpo", f"{name((said or ['loss_type'])[0])} (a DPOConfig key)"
    return "sft", ""


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)] if value else []


def dpo_loss(source: str, value: Any) -> tuple[str, str | None]:
    """A DPOConfig loss_type (one or a list) as the plan's loss, and a note where it is not plain dpo or ipo."""
    losses = as_texts(source, value)
    unknown = [loss for loss in losses if loss not in DPO_LOSSES]
    if unknown:
        raise PlanError(source, f"{unknown[0]} is not a DPOTrainer loss_type ({', '.join(DPO_LOSSES)})")
    if losses == ["ipo"]:
        return "ipo", None
    if losses == ["sigmoid"]:
        return "dpo", None
    return "dpo", f"{'+'.join(losses)}: computed from the policy's and the reference's log-probabilities, as dpo"


def read(led: Reading, values: dict[str, Any], name: Callable[[str], str], script: str, task: str) -> frozenset[str]:
    """A preference or reward trainer's keys into workload.objective and workload.preference; the keys read.
    `name` writes a key as the config does (`--beta` on a command line)."""
    kind, source = trainer(script, values, name)
    if kind in ("sft", "grpo"):
        return frozenset()
    if kind == "ppo":  # hf_trainer reads its keys after the batch (trl_ppo.read_ppo)
        return PPO_KEYS
    led.set(source, "workload.objective", "reward" if kind == "reward" else "preference")
    if kind == "orpo":
        led.set(source, "workload.preference.loss_type", "orpo")
    elif kind == "cpo":
        loss = values.get("loss_type", "sigmoid")
        led.set(name("loss_type") if "loss_type" in values else source, "workload.preference.loss_type", "simpo")
        if loss != "simpo":
            led.note(
                name("loss_type") if "loss_type" in values else "(CPOConfig's loss_type)",
                f"{loss}: CPO keeps no reference model either; planned as simpo, its memory",
            )
    elif kind == "dpo":
        _dpo(led, values, name, task)
    elif kind == "kto":
        _kto(led, values, name, task)
    if kind in ("orpo", "cpo", "dpo", "kto") and "beta" in values:
        led.ignored.append(name("beta"))  # the loss's temperature: no memory
    led.ignored.extend(name(key) for key in KTO_WEIGHTS if key in values)  # a loss's weights: no memory
    return PREFERENCE_KEYS | KTO_WEIGHTS


PREFERENCE_KEYS = frozenset({"beta", "loss_type", "precompute_ref_log_probs", "ref_model_init_kwargs"})
KTO_WEIGHTS = frozenset({"desirable_weight", "undesirable_weight"})  # KTOConfig's weights of the two labels
# KTOConfig loss_type (huggingface/trl@f2cd577 trl/trainer/kto_config.py): kto estimates the KL term with a KL
# batch (kto_trainer.py `calculate_kl`); apo_zero_unpaired runs no KL forward
KTO_LOSSES = ("kto", "apo_zero_unpaired")


def _kto(led: Reading, values: dict[str, Any], name: Callable[[str], str], task: str) -> None:
    """KTOConfig's loss_type and reference, read as DPOConfig's (KTOTrainer.__init__: a PEFT model or
    precompute_ref_log_probs keeps no second model)."""
    loss = values.get("loss_type", "kto")
    if loss not in KTO_LOSSES:
        raise bad(name("loss_type"), loss, f"is not a KTOTrainer loss_type ({', '.join(KTO_LOSSES)})")
    led.set(
        name("loss_type") if "loss_type" in values else "(the script kto.py)", "workload.preference.loss_type", "kto"
    )
    if loss == "apo_zero_unpaired":
        led.note(name("loss_type"), "apo_zero_unpaired: no KL forward; planned as kto, one no-grad forward more")
    _reference(led, values, name, task)


def _dpo(led: Reading, values: dict[str, Any], name: Callable[[str], str], task: str) -> None:
    """DPOConfig's loss_type, then its reference (dpo_trainer.py: PEFT or precompute_ref_log_probs → no second
    model)."""
    loss, note = dpo_loss(name("loss_type"), values.get("loss_type", "sigmoid"))
    led.set(
        name("loss_type") if "loss_type" in values else "loss_type (absent: DPOConfig's sigmoid)",
        "workload.preference.loss_type",
        loss,
    )
    if note:
        led.note(name("loss_type"), note)
    _reference(led, values, name, task)


def _reference(led: Reading, values: dict[str, Any], name: Callable[[str], str], task: str) -> None:
    """The reference DPOTrainer and KTOTrainer keep: none precomputed, the adapters disabled, or a second model."""
    if as_bool(name("precompute_ref_log_probs"), values.get("precompute_ref_log_probs", False)):
        led.set(name("precompute_ref_log_probs"), "workload.preference.reference", "precomputed")
    elif task in ("lora", "qlora"):
        led.set("(DPOTrainer: a PEFT model's reference is itself, adapters disabled)", REFERENCE, "adapters_disabled")
    else:
        led.set("(DPOTrainer: a second copy of the model, loaded from its path)", REFERENCE, "separate")
    if "ref_model_init_kwargs" in values:
        led.note(name("ref_model_init_kwargs"), "the reference's load arguments: the plan loads it as the policy")


def write(plan: Plan, out: dict[str, Any]) -> None:
    """A preference plan's DPOConfig keys (beta at DPOConfig's 0.1 says the trainer); what a YAML cannot say (the
    trainer a script picks: reward, CPO, ORPO; a separate reference beside PEFT adapters) is refused."""
    wl = plan.workload
    if wl.objective == "next_token":
        return
    if wl.objective == "reward":
        raise bad("workload.objective", "reward", "cannot be said in an arguments file: RewardTrainer is its script's")
    if wl.preference.loss_type not in ("dpo", "ipo"):
        raise bad(
            "workload.preference.loss_type",
            wl.preference.loss_type,
            "cannot be said in an arguments file: CPOTrainer and ORPOTrainer are their scripts' "
            "(examples/scripts/cpo.py, orpo.py); a file with beta reads as DPOConfig",
        )
    if wl.preference.reference == "separate" and wl.task in ("lora", "qlora"):
        raise bad(REFERENCE, "separate", "cannot be said: DPOTrainer disables a PEFT model's adapters for it")
    out.update(beta=0.1, loss_type="sigmoid" if wl.preference.loss_type == "dpo" else "ipo")
    if wl.preference.reference == "precomputed":
        out["precompute_ref_log_probs"] = True
