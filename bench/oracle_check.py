"""Physics check against PyTorch's MemTracker on real Hugging Face model code (bench/data/oracle-*.csv).

The rows are not measurements: they come from the team's no-GPU oracle (HF transformers 5.18 + torch 2.13,
FakeTensors on a fake CUDA device, two training steps under torch.distributed._tools.mem_tracker), which
counts exactly the tensors a CUDA run allocates, without the allocator's reserve, CUDA context or cuBLAS
workspace. Comparing with `peak_allocated_bytes` minus the cuBLAS workspace tests each activation, loss and
optimizer term op by op across precisions (autocast, pure bf16, fp32), attention kernels, checkpointing and
optimizers.

    python bench/oracle_check.py                 # the statistics by model family (docs/accuracy.md's table)
    python bench/oracle_check.py --rows [--all]  # first, the rows off by more than 3 % (or all rows)
    python bench/oracle_check.py --write-docs    # and the table in docs/accuracy.md
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

import _path  # noqa: F401  (the checkout first on sys.path)

import doc_tables

from planner.memory import CUBLAS_WORKSPACE_BYTES, estimate
from planner.plan.codec import plan_from_dict
from planner.units import GiB

DATA = Path(__file__).resolve().parent / "data" / "oracle-train.csv"
MLA_DATA = Path(__file__).resolve().parent / "data" / "oracle-mla.csv"  # DeepSeek-V3 code: training and generate
DPO_DATA = Path(__file__).resolve().parent / "data" / "oracle-dpo.csv"  # a TRL DPO step: bench/oracle_dpo.py
GRPO_DATA = Path(__file__).resolve().parent / "data" / "oracle-grpo.csv"  # a TRL GRPO step: bench/oracle_grpo.py


def plan_for(row: dict) -> dict:
    model = {
        "num_layers": int(row["layers"]),
        "hidden_size": int(row["hidden"]),
        "num_attention_heads": int(row["heads"]),
        "num_kv_heads": int(row["kv_heads"]),
        "intermediate_size": int(row["intermediate"]),
        "vocab_size": int(row["vocab"]),
        "tie_embeddings": row["tie_embeddings"] == "True",
    }
    if row["arch"] == "gpt2":
        model.update(mlp="gelu", norm="layernorm", bias=True)
    mixed = row["mixed_precision"] == "True"
    optimizer = row["optimizer"]
    if optimizer == "sgd" and float(row["sgd_momentum"] or 0) > 0:
        optimizer = "sgd_momentum"
    return {
        "model": model,
        "workload": {"sequence_length": int(row["seq_len"]), "micro_batch_size": int(row["micro_batch"])},
        "precision": {
            "compute": row["dtype"],
            "master_weights": "fp32" if mixed or row["dtype"] == "fp32" else "none",
            "optimizer": optimizer,
            "optimizer_impl": row["optimizer_impl"] or "foreach",
        },
        "techniques": {
            "activation_checkpointing": row["activation_checkpointing"],
            "attention": "flash" if row["attention"] == "sdpa" else "eager",
        },
    }


def plan_for_mla(row: dict) -> dict:
    """A row of oracle-mla.csv (HF DeepseekV3ForCausalLM: latent attention, MoE from layer `first_dense`)."""
    model = {
        "num_layers": int(row["layers"]),
        "hidden_size": int(row["hidden"]),
        "num_attention_heads": int(row["heads"]),
        "num_kv_heads": int(row["heads"]),
        "head_dim": int(row["nope"]),
        "intermediate_size": int(row["intermediate"]),
        "vocab_size": int(row["vocab"]),
        "tie_embeddings": False,
        "kv_lora_rank": int(row["kv_lora_rank"]),
        "qk_rope_head_dim": int(row["rope"]),
        "v_head_dim": int(row["v"]),
    }
    if row["q_lora_rank"]:
        model["q_lora_rank"] = int(row["q_lora_rank"])
    if int(row["first_dense"]) < int(row["layers"]):
        model.update(
            num_experts=int(row["num_experts"]),
            experts_per_token=int(row["experts_per_tok"]),
            moe_intermediate_size=int(row["moe_intermediate"]),
            shared_experts=int(row["shared_experts"]),
            first_dense_layers=int(row["first_dense"]),
        )
    s, b = int(row["seq_len"]), int(row["micro_batch"])
    if row["task"] == "inference":
        return {
            "model": model,
            "precision": {"compute": row["dtype"]},
            "workload": {
                "task": "inference",
                "inference": {"prompt_tokens": s, "output_tokens": int(row["gen_tokens"]), "batch_size": b},
            },
        }
    mixed = row["mixed_precision"] == "True"
    return {
        "model": model,
        "workload": {"sequence_length": s, "micro_batch_size": b},
        "precision": {"compute": row["dtype"], "master_weights": "fp32" if mixed else "none", "optimizer": "adamw"},
        "techniques": {
            "activation_checkpointing": row["activation_checkpointing"],
            "attention": "flash" if row["attention"] == "sdpa" else "eager",
        },
    }


# the oracle's peft targets → the plan's (bench/oracle_dpo.py builds LoRA on q_proj and v_proj)
LORA_TARGETS = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o"}


def plan_for_dpo(row: dict) -> dict:
    """A row of oracle-dpo.csv: the training plan of its model with the preference objective of the row (LoRA rows:
    peft's adapters at the oracle's alpha 32, fp32 under autocast, on a bf16 base)."""
    plan = plan_for(row)
    preference = {"loss_type": row["loss_type"], "reference": row["reference"]}
    lora = row["task"] == "lora"
    plan["workload"].update(task="lora" if lora else "finetune", objective=row["objective"], preference=preference)
    if lora:
        targets = [LORA_TARGETS[t] for t in row["lora_targets"].split()]
        plan["workload"]["lora"] = {"rank": int(row["lora_rank"]), "alpha": 32, "targets": targets}
    return plan


def plan_for_grpo(row: dict) -> dict:
    """A row of oracle-grpo.csv: a GRPO step of its micro-batch, one group, TRL's defaults (beta 0: no reference),
    the rollout engine on a GPU of its own (the oracle runs only the policy's step)."""
    plan = plan_for({**row, "seq_len": int(row["prompt"]) + int(row["completion"])})
    b = int(row["micro_batch"])
    rl = {"completion_length": int(row["completion"]), "num_generations": b, "beta": 0.0, "engine": "server"}
    plan["workload"].update(task="finetune", objective="grpo", global_batch_size=b, rl=rl)
    return plan


def run(
    path: Path = DATA, mla_path: Path = MLA_DATA, dpo_path: Path = DPO_DATA, grpo_path: Path = GRPO_DATA
) -> list[dict]:
    rows = [(row, plan_for(row)) for row in csv.DictReader(path.open())]
    rows += [(row, plan_for_mla(row)) for row in csv.DictReader(mla_path.open())]
    rows += [({**row, "arch": "llama-dpo"}, plan_for_dpo(row)) for row in csv.DictReader(dpo_path.open())]
    rows += [({**row, "arch": "llama-grpo"}, plan_for_grpo(row)) for row in csv.DictReader(grpo_path.open())]
    out = []
    for row, plan in rows:
        est = estimate(plan_from_dict(plan))
        predicted = est.peak_allocated_bytes - CUBLAS_WORKSPACE_BYTES
        oracle = int(row["peak_bytes"])
        out.append(
            {
                "label": row["label"],
                "arch": row["arch"],
                "task": row.get("task", "train"),  # oracle-mla.csv has generate rows too ("inference")
                "oracle_gib": oracle / GiB,
                "predicted_gib": predicted / GiB,
                "error_pct": 100 * (predicted - oracle) / oracle,
                "oracle_at": f"{row['peak_phase']}:{row['peak_op'].removeprefix('aten.')}",
                "predicted_at": est.phase,
            }
        )
    return out


def _pct(value: float) -> str:
    return f"{value:.2f} %" if value < 1 else f"{value:.1f} %"


def summary(rows: list[dict]) -> str:
    """A row of the table: rows, median, p90 and max |error|."""
    errors = sorted(abs(r["error_pct"]) for r in rows)
    p90 = errors[round(0.9 * (len(errors) - 1))]
    return f"{len(rows)} | {_pct(statistics.median(errors))} | {_pct(p90)} | {_pct(errors[-1])}"


GROUPS = {
    "Llama/Qwen-shaped": ("llama", "qwen2"),
    "DeepSeek-V3-shaped (MLA, MoE; {training} training, {generate} generate)": ("deepseek_v3",),
    "GPT-2": ("gpt2",),
    "Llama-shaped, a TRL DPO step (a separate reference, or LoRA's adapters off)": ("llama-dpo",),
    "Llama-shaped, a TRL GRPO policy step (no reference)": ("llama-grpo",),
}


def print_rows(rows: list[dict], show_all: bool) -> None:
    print("| config | oracle GiB | predicted GiB | error % | oracle peak at | planner peak at |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if show_all or abs(r["error_pct"]) > 3:
            print(
                f"| {r['label']} | {r['oracle_gib']:.3f} | {r['predicted_gib']:.3f} | {r['error_pct']:+.1f} | "
                f"{r['oracle_at']} | {r['predicted_at']} |"
            )
    print()


def main() -> None:
    """The table docs/accuracy.md shows: |error| by model family."""
    rows = run()
    print("| models | rows | median \\|error\\| | p90 | max |")
    print("|---|---|---|---|---|")
    for name, arches in GROUPS.items():
        group = [r for r in rows if r["arch"] in arches]
        generate = sum(r["task"] == "inference" for r in group)
        print(f"| {name.format(training=len(group) - generate, generate=generate)} | {summary(group)} |")


if __name__ == "__main__":
    if "--rows" in sys.argv:
        print_rows(run(), "--all" in sys.argv)
    doc_tables.run(main)
