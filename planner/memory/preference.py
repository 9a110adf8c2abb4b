"""Pairwise preference training (DPO and its family, workload.objective preference): the frozen reference model's
weights and its no-grad forward, beside the policy's step. The policy's own terms (states, activations, logits)
are the training step's at 2 × micro_batch_size sequences (Workload.sequences_per_forward): TRL's collator puts
the chosen and the rejected completions of each pair in one batch (huggingface/trl@f2cd577
trl/trainer/dpo_trainer.py DataCollatorForPreference, `prompts * 2` and `torch.cat` of chosen and rejected), and
_compute_loss runs one forward of the policy over it.

KTO (loss_type kto) is unpaired: one completion per example, micro_batch_size sequences, and a KL batch of as
many mismatched prompt/completion pairs (trl@f2cd577 trl/trainer/kto_trainer.py KTOTrainer._compute_loss:
`_compute_kl_logps(model, batch)` under torch.no_grad before the policy's forward, then `_compute_kl_logps
(self.ref_model, batch)` and `self.ref_model(**ref_model_kwargs)` under torch.no_grad while the policy's graph
is held): four forwards a step, one with grad. Each no-grad forward's logits live only inside it (a local of
_compute_kl_logps, or ref_outputs reduced to log-probs before the next), so the reference's two forwards peak
one at a time."""

from __future__ import annotations

from typing import cast

from planner.memory.checkpointing import Kept
from planner.memory.layout import StageContext, StageParams
from planner.memory.losses import ENTROPY_CHUNK_ROWS, logit_sizes, softmax_bytes
from planner.memory.result import Item
from planner.memory.states import trained_weight_dtype
from planner.memory.terms import Described, Factor, Product, Sum, Term, item
from planner.plan.config import RL_OBJECTIVES
from planner.plan.dtypes import QUANTIZED, WeightDType, quantized_bytes


def reference_weights(ctx: StageContext) -> Item | None:
    """A separate reference model's weights (workload.preference.reference separate), frozen, in the dtype the
    policy was loaded in: TRL builds it from the policy's model_init_kwargs, dtype and quantization_config
    included (trl@f2cd577 dpo_trainer.py DPOTrainer.__init__ `create_model_from_path(ref_model_path,
    **ref_model_init_kwargs)`), so a QLoRA plan's reference is NF4 too, and a full fine-tune with fp32 weights
    (mixed precision) has an fp32 reference (measured on an H200: bench/data/measured-gpu.csv, llama-1b DPO AMP);
    projections in that dtype with their scales, embeddings, norms and the head in the compute dtype (as the
    frozen base of lora/qlora), or in fp32 with fp32 weights. Under ZeRO-3 /
    FSDP it is sharded like the policy, else every rank holds all of it (trl@f2cd577 trl/models/utils.py
    prepare_deepspeed: "If ZeRO-3 is used, we shard both the active and reference model", other stages run it
    at stage 0; prepare_fsdp wraps it with the policy's FSDP plugin). None without a separate reference
    (adapters_disabled: the policy's base with its adapters off; precomputed: log-probs computed before training;
    none: a reference-free loss)."""
    wl = ctx.plan.workload
    # PPO's frozen_offload keeps it in host memory outside its forward (planner/memory/ppo.py)
    if wl.reference != "separate" or (wl.objective == "ppo" and wl.ppo.frozen_offload):
        return None
    wdt = ctx.plan.precision.weights if ctx.lora else cast(WeightDType, trained_weight_dtype(ctx))
    return frozen_weights(
        ctx, "reference_weights", "Reference model (frozen)", "A frozen copy of the starting model", wdt
    )


def frozen_weights(ctx: StageContext, name: str, label: str, lead: str, wdt: WeightDType | None = None) -> Item:
    """A frozen model's weights on one GPU (`ctx`: that model's stage), in `wdt` (default the plan's
    frozen-weights dtype; reference_weights says why), sharded under ZeRO-3 / FSDP."""
    zero3 = ctx.plan.parallelism.zero_stage == 3
    return item(
        name,
        label,
        frozen_model(ctx, ctx.sp, wdt or ctx.plan.precision.weights),
        f"{lead}, no gradients or optimizer states; "
        + (
            "sharded with the policy (TRL prepare_deepspeed / prepare_fsdp)"
            if zero3
            else "every rank holds all of it (TRL runs it at ZeRO stage 0 unless the policy is at 3)"
        ),
        ctx.detail,
    )


def frozen_model(ctx: StageContext, sp: StageParams, wdt: WeightDType) -> Term:
    """A frozen model's parameters (`sp`) on one GPU: its projections in `wdt` with their scales where quantized,
    the rest (embeddings, norms, the head) in the compute dtype, as the frozen base of lora/qlora, or in fp32 with
    fp32 projections; ZeRO-3 / FSDP shards it."""
    prec = ctx.plan.precision
    others = 4 if wdt == "fp32" else ctx.bc
    projections = Described(
        quantized_bytes(
            sp.linear, wdt, rows=sp.linear_rows, group_size=prec.quant_group_size, double_quant=prec.double_quant
        ),
        "{:,} projection params in {}" + (" + scales" if wdt in QUANTIZED else ""),
        (sp.linear, wdt),
    )
    whole = Sum((projections, Product((Factor(sp.total - sp.linear, "others"), Factor(others, "B")))))
    zero3 = ctx.plan.parallelism.zero_stage == 3
    return ctx.sharded(whole, round(whole.bytes * sp.experts / sp.total), zero3)


def _no_grad_forward(ctx: StageContext, kept: Kept) -> Described:
    """A no-grad forward over the micro-batch: a no-grad layer frees its intermediates as it goes, so at most one
    layer's activations exist (bounded by what the largest layer saves with grad), then its logits over the
    sequences in the compute dtype and selective_log_softmax's one row of log-softmax at a time (trl@f2cd577
    trl/trainer/utils.py selective_log_softmax: "loop to reduce peak mem consumption", one sequence's S × V per
    iteration); GRPO's over the completions only (Workload.logit_positions)."""
    wl = ctx.plan.workload
    tokens, vocab, _ = logit_sizes(ctx)
    row = tokens // wl.sequences_per_forward  # one sequence's logits on this GPU
    return Described(
        kept.full_layer + (tokens + row) * vocab * ctx.bc,
        "one layer's activations {:,} + (T + one sequence's {:,}) × V × {} (logits and one row's "
        "log-softmax) = {:,} + ({:,} + {:,}) × {:,} × {}",
        (kept.full_layer, row, ctx.bc, kept.full_layer, tokens, row, vocab, ctx.bc),
    )


def reference_forward(ctx: StageContext, kept: Kept) -> Item | None:
    """The reference's forward under torch.no_grad, run after the policy's forward while the policy's graph and
    logits are held (trl@f2cd577 dpo_trainer.py _compute_loss: `outputs = model(...)`, then
    `with torch.no_grad(): ref_outputs = self.ref_model(...)` or the PEFT model under `use_adapter(...)` with its
    adapters disabled; KTO's two, on the KL batch then the completions, one at a time). None without a reference
    forward during training (precomputed or none)."""
    wl = ctx.plan.workload
    if wl.reference not in ("separate", "adapters_disabled"):
        return None
    if wl.objective in RL_OBJECTIVES:
        note = "The reference's no-grad forward over the completions, before the policy's step"
    elif wl.preference.loss_type == "kto":
        note = "Its no-grad forwards over the KL batch, then the completions, while the policy's graph is held"
    else:
        note = (
            "The reference's no-grad forward over the chosen and rejected sequences, while the policy's graph is held"
        )
    if wl.objective == "preference":
        return item(
            "reference_forward", "Reference forward (no grad)", _preference_reference(ctx, kept), note, ctx.detail
        )
    return logprob_forward(ctx, kept, "reference_forward", "Reference forward (no grad)", note)


def _preference_reference(ctx: StageContext, kept: Kept) -> Described:
    """The reference's part of a preference step, the policy's graph, logits and saved log-softmax held
    (trl@f2cd577 dpo_trainer.py _compute_loss, kto_trainer.py): its no-grad layers free their intermediates as
    they go (at most one layer's, bounded by what the layer saves with grad), then its logits, which
    `ref_outputs` holds to the end of _compute_loss, beside the larger of
    - selective_log_softmax's rows: the one held in a name and the next (under autocast each also has its fp32
      cast; on fp32 logits one row's logsumexp temporary);
    - DPOTrainer's metrics (dpo, ipo): entropy_from_logits reshapes the shifted logits, a strided view, so copies
      them whole (trl/trainer/utils.py `logits.reshape(-1, num_classes)`), and takes chunks of 128 rows
      (log-softmax, exp and their product); the chosen logits' boolean-mask copy (half) comes after it is freed.
    Checked on the oracle's TRL DPO step (bench/data/oracle-dpo.csv) and on an H200 (bench/data/measured-gpu.csv).
    """
    wl = ctx.plan.workload
    tokens, vocab, logits_b = logit_sizes(ctx)
    if wl.preference.log_probs == "upcast":  # LLaMA-Factory: its fp32 logits and their whole log-softmax, then freed
        return Described(
            max(kept.full_layer, tokens * vocab * 8),
            "max(one layer's activations {:,}, T·V × 8 (fp32 logits + their log-softmax) = {:,} × {:,} × 8)",
            (kept.full_layer, tokens, vocab),
        )
    soft = softmax_bytes(ctx)
    row = tokens // wl.sequences_per_forward * vocab  # one sequence's logits on this GPU
    rows = 4 * row if logits_b == 4 else (2 * soft + (4 if soft == 4 else 0)) * row
    metrics = 0
    if wl.preference.loss_type in ("dpo", "ipo"):
        metrics = tokens * vocab * logits_b + ENTROPY_CHUNK_ROWS * vocab * 3 * soft
    tail = tokens * vocab * logits_b + max(rows, metrics)
    return Described(
        max(kept.full_layer, tail),
        "max(one layer's activations {:,}, T·V × {} logits + max(log-prob rows {:,}, metrics {:,}))",
        (kept.full_layer, logits_b, rows, metrics),
    )


def logprob_forward(ctx: StageContext, kept: Kept, name: str, label: str, note: str) -> Item:
    """A no-grad forward that ends in log-probs over the vocabulary (`_no_grad_forward` says what it holds)."""
    return item(name, label, _no_grad_forward(ctx, kept), note, ctx.detail)


def kl_forward(ctx: StageContext, kept: Kept) -> Item | None:
    """KTO's policy forward on the KL batch (mismatched prompt/completion pairs) under torch.no_grad, before the
    policy's own forward builds its graph (trl@f2cd577 kto_trainer.py _compute_loss → _compute_kl_logps). None for
    every other loss."""
    wl = ctx.plan.workload
    if wl.objective != "preference" or wl.preference.loss_type != "kto":
        return None
    return item(
        "kl_forward",
        "Policy KL forward (no grad)",
        _no_grad_forward(ctx, kept),
        "The policy's no-grad forward over the KL batch, each completion beside another example's prompt",
        ctx.detail,
    )
