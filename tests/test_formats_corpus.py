"""The real-config corpus: every public config under ../shared/configs/<format>/ (see its README.md and
manifest.csv; skipped where that folder is absent, as in a user's clone; VRAM_PLANNER_SHARED names another
shared folder) imported as `vram-planner import` does (planner/formats read_config, then plan_from_config).

Each file imports or is refused with a PlanError naming its reason; the refusals are the ones listed in REFUSED,
each for its reason; at least 97 % of the rest of each format become plans; no plan takes its model, task,
sequence or batch from a default unnamed; and for a sample of files read by hand, each value is the config's.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from planner.errors import PlanError
from planner.formats import FORMATS, plan_from_config, read_config
from planner.formats.base import Imported, get_key
from planner.plan.codec import plan_to_dict
from planner.plan.config import Plan

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("VRAM_PLANNER_SHARED") or ROOT.parent / "shared") / "configs"
pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not SHARED.is_dir(), reason=f"no config corpus at {SHARED}")]

# the model given where a config names none or one that is not a preset (the CLI's --preset): a MoE model, so that
# a config's expert parallelism has experts to split
STAND_IN = {"preset": "qwen3-30b-a3b"}
GPU = "h100-sxm-80gb"
RATE = 0.97
# the plan keys every imported plan must read from its config or name as taken from a default ("(absent: why)");
# the global batch follows from them (micro-batch × data × the accumulation a config says, 1 where silent)
TRAINING_KEYS = ("workload.task", "workload.sequence_length", "workload.micro_batch_size")
SERVING_KEYS = (
    "workload.task",
    "workload.inference.prompt_tokens",
    "workload.inference.output_tokens",
    "workload.inference.batch_size",
)

# every file refused, by a fragment of its reason: runs the planner does not describe (evaluation, generation,
# quantization, RL and QAT recipes; GRPO-family scripts that give num_generations plan, as grpo),
# templates with placeholders, and files of another kind
NOT_A_CONFIG = "is not a config this planner reads"
ISSUE = "not a workload the plan describes yet (issue 33, post-training plans)"
TRL_REFUSED = (
    *("bco__L30", "bco__L48", "distillation__L28", "gkd__L25", "gkd__L37", "gold__L38", "grpo_agent__L26"),
    "nash_md__L26",
    *("nash_md__L41", "online_dpo__L26", "online_dpo__L38", "online_dpo_vlm__L30", "online_dpo_vlm__L50"),
    *("prm__L25", "prm__L36"),
    *("rloo_vlm__L31", "tpo__L44"),
)
REFUSED = {
    "axolotl": {
        "cloud__baseten.yaml": NOT_A_CONFIG,
        "cloud__modal.yaml": NOT_A_CONFIG,
        **{
            f"ebft__{name}.yaml": "rl: ebft: energy-based fine-tuning (generates and scores completions each step) "
            f"is {ISSUE}"
            for name in (
                "llama-1b-ebft-opencode-novllm",
                "llama-1b-ebft-opencode",
                "llama-1b-ebft-strided-structured",
                "llama-1b-ebft-strided",
                "llama-3b-ebft-strided-fft",
                "llama-8b-ebft-strided-fft",
                "qwen35-4b-ebft-structured",
                "qwen35-9b-ebft-structured",
            )
        },
        "qwen2__prm.yaml": f"process_reward_model: a process reward model (a score per step token) is {ISSUE}",
    },
    "deepspeed": {
        "dse__compression__bert__config__ds_config_TEMPLATE.json": "'BATCH_SIZE_PER_GPU' must be an integer",
        "dse__training__data_efficiency__gpt_finetuning__finetune__ds_config_gpt2-medium_1clmetric_TEMPLATE.json": (
            "'GB_SIZE' must be an integer"
        ),
        "dse__training__data_efficiency__gpt_finetuning__finetune__ds_config_gpt2_TEMPLATE.json": (
            "'GB_SIZE' must be an integer"
        ),
        "dse__training__tensor_parallel__hf_integration__configs__ds_config_temp.json": NOT_A_CONFIG,
    },
    "hf_trainer": {
        "examples__scripts__rloo__L33.sh": NOT_A_CONFIG,
        # TRL trainers the plan does not describe yet, by their script (planner/formats/trl.py)
        **dict.fromkeys((f"examples__scripts__{name}.sh" for name in TRL_REFUSED), ISSUE),
    },
    "torchtune": {
        **{
            name: "is not a recipe this reader knows"
            for name in (
                "eleuther_evaluation.yaml",
                "generation.yaml",
                "quantization.yaml",
                "llama2__1B_qat_single_device.yaml",
                "llama2__7B_qat_full.yaml",
                "llama3_1__8B_qat_full.yaml",
                "llama3_1__evaluation.yaml",
                "llama3_2__3B_qat_lora.yaml",
                "llama3_2__evaluation.yaml",
                "llama3_2_vision__11B_evaluation.yaml",
                "llama3__8B_qat_full.yaml",
                "llama3__8B_qat_lora.yaml",
                "mistral__evaluation.yaml",
                "phi3__evaluation.yaml",
                "phi4__evaluation.yaml",
                "qwen2_5__1.5B_qat_single_device.yaml",
                "qwen2_5__3B_qat_single_device.yaml",
                "qwen3__0.6B_qat_full.yaml",
                "qwen3__1.7B_qat_full.yaml",
                "qwen3__1.7B_qat_lora.yaml",
                "qwen3__32B_qat_lora.yaml",
                "qwen3__4B_qat_full.yaml",
                "qwen3__4B_qat_lora.yaml",
                "qwen3__8B_qat_full.yaml",
                "qwen3__8B_qat_lora.yaml",
                "qwen3__evaluation.yaml",
            )
        },
        **{name: "GRPOSimpleLoss' is not a loss" for name in ("dev__3B_full_grpo.yaml", "dev__qwen3B_sync_grpo.yaml")},
        **{
            name: "the config must name its optimizer"
            for name in (  # generation and async GRPO: no optimizer
                "dev__qwen3B_async_grpo.yaml",
                "llama3_1__70B_generation_distributed.yaml",
                "llama3_3__70B_generation_distributed.yaml",
                "llama3__70B_generation_distributed.yaml",
            )
        },
        "mistral__7B_full_ppo_low_memory.yaml": NOT_A_CONFIG,
    },
    "vllm": {
        "Google__Gemma4__L85.sh": "'<n_of_tokens>' must be an integer",
        "NVIDIA__Nemotron-3-Nano-30B-A3B__L102.sh": "'$KV_CACHE_DTYPE' is not one of",
        **{
            name: NOT_A_CONFIG
            for name in (  # vLLM recipes' benchmark YAMLs, not `vllm serve --config` files
                "OpenAI__GPT-OSS_Blackwell.yaml",
                "OpenAI__GPT-OSS_EAGLE3_Hopper.yaml",
                "OpenAI__GPT-OSS_Hopper.yaml",
            )
        },
    },
}


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """One corpus file imported: what it read as and the plan it made, or the PlanError that refused it."""

    name: str
    imported: Imported | None = None
    plan: Plan | None = None
    refused: PlanError | None = None


def _import(path: Path) -> Outcome:
    """A file through `vram-planner import`'s path: read (a file it names read from beside it), then planned with
    the stand-in model where it names none or one that is not a preset. Only a PlanError is caught."""

    def beside(name: str) -> str | None:
        found = path.parent / name
        return found.read_text() if found.is_file() else None

    try:
        imported = read_config(path.read_text(), files=beside)
        plan = plan_from_config(
            imported, model=STAND_IN if imported.model_name else None, default_model=STAND_IN, gpu=GPU
        )
    except PlanError as error:
        return Outcome(name=path.name, refused=error)
    return Outcome(name=path.name, imported=imported, plan=plan)


@functools.cache
def corpus() -> dict[str, list[Outcome]]:
    """Every stored file of each format's folder, imported once for all the tests."""
    return {
        folder.name: [_import(p) for p in sorted(folder.iterdir()) if p.name != "SOURCES.md"]
        for folder in sorted(SHARED.iterdir())
        if folder.name in FORMATS
    }


def test_each_file_plans_or_is_refused_for_its_listed_reason():
    for folder, outcomes in corpus().items():
        refused = {o.name: str(o.refused) for o in outcomes if o.refused is not None}
        expected = REFUSED.get(folder, {})
        assert set(refused) == set(expected), folder
        for name, reason in refused.items():
            assert expected[name] in reason, (folder, name, reason)


def test_each_format_plans_at_least_97_percent_of_what_it_reads():
    for folder, outcomes in corpus().items():
        readable = [o for o in outcomes if o.name not in REFUSED.get(folder, {})]
        planned = [o for o in readable if o.plan is not None]
        assert len(planned) >= RATE * len(readable), folder


def test_a_file_is_read_as_its_folders_format():
    for folder, outcomes in corpus().items():
        assert {o.imported.format for o in outcomes if o.imported is not None} <= {folder}, folder


def test_no_plan_takes_an_essential_value_from_an_unnamed_default():
    for folder, outcomes in corpus().items():
        for outcome in (o for o in outcomes if o.imported is not None):
            imported = outcome.imported
            serving = get_key(imported.plan, "workload.task") == "inference"
            read = {r.plan_key for r in imported.read}
            missing = [key for key in (SERVING_KEYS if serving else TRAINING_KEYS) if key not in read]
            assert not missing, (folder, outcome.name, missing)


def test_a_config_that_names_no_model_is_refused_without_one():
    for outcomes in corpus().values():
        for outcome in (o for o in outcomes if o.imported is not None):
            imported = outcome.imported
            if "model" in imported.plan:
                continue
            with pytest.raises(PlanError, match="^model: the .* config names"):
                plan_from_config(imported, gpu=GPU)


# files read by hand: each plan key's value as the config says it (its own key, or the format's default where the
# config is silent and the import names that default)
SEQ, MICRO, TASK, TP = "workload.sequence_length", "workload.micro_batch_size", "workload.task", "parallelism.tensor"
PROMPT, UTIL = "workload.inference.prompt_tokens", "workload.inference.gpu_memory_utilization"
OBJ, LOSS, REF = "workload.objective", "workload.preference.loss_type", "workload.preference.reference"
SAMPLE = {
    ("accelerate", "llamafactory__examples__accelerate__fsdp2_config.yaml"): {"parallelism.zero_stage": 3},
    ("accelerate", "llamafactory__examples__ktransformers__accelerate__fsdp2_kt_int8_8gpu.yaml"): {
        "parallelism.zero_stage": 3
    },
    ("accelerate", "trl__examples__accelerate_configs__single_gpu.yaml"): {
        "parallelism.zero_stage": 0,
        TASK: "pretrain",
    },
    ("axolotl", "llama-3__instruct-dpo-lora-8b.yml"): {
        "model.preset": "llama-3.1-8b",
        SEQ: 4096,
        MICRO: 2,
        OBJ: "preference",
        LOSS: "dpo",
        REF: "adapters_disabled",
    },
    ("axolotl", "mistral__orpo__mistral-qlora-orpo.yml"): {TASK: "qlora", OBJ: "preference", LOSS: "orpo", REF: "none"},
    ("axolotl", "qwen2__reward-model.yaml"): {OBJ: "reward"},
    ("axolotl", "cohere__command-r-7b-qlora.yml"): {TASK: "qlora", SEQ: 2048, MICRO: 1, "workload.lora.rank": 32},
    ("axolotl", "smolvlm2__smolvlm2-2B-lora.yaml"): {TASK: "lora", SEQ: 8192, MICRO: 1},
    ("axolotl", "archived__code-llama__7b__qlora.yml"): {TASK: "qlora", SEQ: 4096, MICRO: 2},
    ("axolotl", "archived__xgen-7b__xgen-7b-8k-qlora.yml"): {TASK: "qlora", SEQ: 8192, "workload.lora.rank": 64},
    ("axolotl", "archived__replit-3b__config-lora.yml"): {TASK: "lora", SEQ: 2048, MICRO: 1, "workload.lora.rank": 8},
    ("axolotl", "paddleocr-vl__paddleocr-vl-1_6-full-finetune.yaml"): {TASK: "finetune", SEQ: 4096, MICRO: 1},
    ("axolotl", "falcon-h1__falcon-h1-7b-qlora.yaml"): {TASK: "qlora", SEQ: 2048, MICRO: 1},
    ("axolotl", "voxtral__voxtral-mini-qlora.yml"): {TASK: "qlora", SEQ: 2048, "workload.lora.alpha": 16},
    ("axolotl", "archived__falcon__config-7b-lora.yml"):  # lora_target_linear on a GeLU MLP: no gate
    {"model.preset": "falcon-7b", SEQ: 2048, MICRO: 1, "workload.lora.targets": ["q", "k", "v", "o", "up", "down"]},
    ("axolotl", "expert_parallel__qwen3_30ba3b_ep_lora_4gpu.yaml"): {
        "model.preset": "qwen3-30b-a3b",
        "parallelism.expert": 4,
        TASK: "lora",
        SEQ: 2048,
    },
    ("deepspeed", "dse__training__bing_bert__1-bit_lamb__nccl__deepspeed_bsz64k_onebitlamb_config_seq128_nccl.json"): {
        MICRO: 64,
        "workload.global_batch_size": 65536,
    },
    ("deepspeed", "dse__compression__bert__config__XTC__ds_config_layer_reduction_fp16.json"): {
        MICRO: 32,
        "workload.global_batch_size": 32,
        "parallelism.zero_stage": 0,
    },
    ("deepspeed", "dse__compression__bert__config__ZeroQuant__ds_config_W8A8_Qgroup48_fp32.json"): {
        MICRO: 32,
        "parallelism.zero_stage": 0,
    },
    ("deepspeed", "dse__training__bing_bert__1-bit_lamb__nccl__deepspeed_bsz32k_onebitlamb_config_seq512_nccl.json"): {
        MICRO: 16,
        "workload.global_batch_size": 32768,
    },
    ("hf_trainer", "alignment-handbook__pref_align_scan__dpo__config_openhermes.yaml"): {
        MICRO: 8,
        OBJ: "preference",
        LOSS: "dpo",
        REF: "separate",
    },
    ("hf_trainer", "examples__scripts__reward_modeling__L25.sh"): {SEQ: 2048, MICRO: 8, OBJ: "reward"},
    # TRL's PPO scripts: ppo plans (PPOConfig's response_length 53 after a 512-token prompt assumed)
    ("hf_trainer", "examples__scripts__ppo__ppo__L40.sh"): {SEQ: 565, MICRO: 64, OBJ: "ppo", "workload.rl.beta": 0.05},
    ("hf_trainer", "examples__scripts__ppo__ppo_tldr__L56.sh"): {MICRO: 16, OBJ: "ppo", "workload.ppo.epochs": 4},
    ("hf_trainer", "alignment-handbook__smollm2__dpo__config.yaml"): {SEQ: 1024, MICRO: 2, OBJ: "preference"},
    ("hf_trainer", "examples__scripts__dpo_vlm__L29.sh"): {TASK: "lora", OBJ: "preference", REF: "adapters_disabled"},
    ("hf_trainer", "examples__scripts__orpo__L42.sh"): {TASK: "lora", OBJ: "preference", LOSS: "orpo", REF: "none"},
    ("hf_trainer", "examples__scripts__cpo__L42.sh"): {OBJ: "preference", LOSS: "simpo", REF: "none"},
    ("hf_trainer", "alignment-handbook__smollm__sft__config.yaml"): {SEQ: 2048, MICRO: 4},
    ("hf_trainer", "alignment-handbook__smollm3__dpo__apo.yaml"): {SEQ: 24576, MICRO: 1},
    ("sglang", "docs__autoregressive__Llama__Llama4__L90.sh"): {TP: 8, PROMPT: 1_000_000 - 256},
    ("sglang", "docs__autoregressive__Moonshotai__Kimi-K2__L175.sh"): {TP: 8, TASK: "inference"},
    ("sglang", "docs__autoregressive__InclusionAI__Ling-2.5-1T__L80.sh"): {TP: 8, UTIL: 0.95},  # --mem-frac
    ("sglang", "docs__autoregressive__Llama__Llama4__L79.sh"): {TP: 8, PROMPT: 1_000_000 - 256},
    ("sglang", "docs__autoregressive__Google__Gemma4__L91.sh"): {TP: 1, TASK: "inference"},
    ("torchtitan", "v0.2.2__torchtitan__experiments__vlm__train_configs__debug_model.toml"): {MICRO: 32, SEQ: 4096},
    ("torchtitan", "v0.2.2__torchtitan__models__gpt_oss__train_configs__debug_model.toml"): {MICRO: 8, SEQ: 2048},
    ("torchtune", "gemma__2B_qlora_single_device.yaml"): {TASK: "qlora", MICRO: 4, "workload.lora.rank": 64},
    ("torchtune", "llama3_1__8B_full_dpo.yaml"): {
        "model.preset": "llama-3.1-8b",
        TASK: "finetune",
        SEQ: 1024,
        MICRO: 4,
        "workload.global_batch_size": 128,
        "hardware.count": 4,
        "parallelism.zero_stage": 3,
        "techniques.activation_checkpointing": "full",
        "techniques.loss": "full",
        OBJ: "preference",
        LOSS: "dpo",
        REF: "separate",
    },
    ("torchtune", "llama2__7B_lora_dpo_single_device.yaml"): {
        TASK: "lora",
        OBJ: "preference",
        REF: "adapters_disabled",
    },
    ("torchtune", "dev__8B_full_experimental.yaml"): {TASK: "finetune", MICRO: 2},
    ("torchtune", "qwen3__32B_lora.yaml"): {
        "model.preset": "qwen3-32b",
        TASK: "lora",
        MICRO: 2,
        "workload.lora.rank": 8,
    },
    ("torchtune", "llama3__8B_dora_single_device.yaml"): {TASK: "lora", MICRO: 2, "workload.lora.variant": "dora"},
    ("vllm", "Jina__Jina-reranker-m0__L30.sh"): {TP: 2, UTIL: 0.75, "workload.inference.max_num_seqs": 32},
    ("vllm", "Qwen__Qwen3.5__L43.sh"): {TP: 8, PROMPT: 262144 - 256},
    ("vllm", "DeepSeek__DeepSeek-V3_2-Exp__L23.sh"): {"parallelism.data": 8, TP: 1},
    ("vllm", "DeepSeek__DeepSeek-V3_2-Exp__L29.sh"): {TP: 8, "parallelism.data": 1},
    ("vllm", "Llama__Llama4_Blackwell.yaml"): {
        "precision.kv_cache": "fp8",
        "workload.inference.prefill_chunk_tokens": 8192,
    },
}


@pytest.mark.parametrize("folder,name", sorted(SAMPLE))
def test_sampled_files_plan_the_values_they_say(folder, name):
    outcome = next(o for o in corpus()[folder] if o.name == name)
    planned = plan_to_dict(outcome.plan)
    assert {key: get_key(planned, key) for key in SAMPLE[folder, name]} == SAMPLE[folder, name]
