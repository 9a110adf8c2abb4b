"""Knowledge distillation (workload.objective distillation), as torchtune's recipes run it
(pytorch/torchtune@bd2a0fc recipes/knowledge_distillation_single_device.py and _distributed.py): the student's
step (its states, activations and chunked cross-entropy are the training step's), a frozen teacher on the same
GPUs, and in _loss_step the student's forward, then the teacher's under torch.no_grad over the same tokens, then
the forward-KL loss on both models' chunked logits and the student's cross-entropy, then `del logits` and
`del teacher_logits` before backward."""

from __future__ import annotations

from dataclasses import replace

from planner.memory.layout import StageContext, StageParams, model_params
from planner.memory.losses import logit_sizes, logit_tokens
from planner.memory.preference import frozen_model
from planner.memory.result import Item
from planner.memory.terms import Described, item
from planner.plan.config import Distillation, Plan
from planner.plan.models import Model, presets

# bytes per logit the forward KL saves for backward, summed over its chunks (torchtune@bd2a0fc
# torchtune/modules/loss/kd_losses.py ForwardKLLoss: `teacher_prob = F.softmax(teacher_logits, dtype=float32)`,
# saved by the product `teacher_prob * student_logprob` for the student's gradient; `student_logprob =
# F.log_softmax(student_logits, dtype=float32)`, saved by that product and by log_softmax's own backward, one
# tensor; `torch.masked_fill(..., inf_mask, 0)` saves the bool `inf_mask`): 4 + 4 + 1
_KD_SAVED = 9
# bytes per logit of one chunk's transients while its loss is computed: the fp32 product and its masked copy
_KD_CHUNK = 8


def teacher_model(plan: Plan) -> Model:
    """The teacher's architecture, by its preset (workload.distillation.teacher)."""
    return presets()[plan.workload.distillation.teacher_preset].model


def teacher_plan(plan: Plan) -> Plan:
    """The teacher as a plan of its own for the time model: its model over the student's micro-batch, full weights
    in the compute dtype (a quantized teacher's dequantization is not timed: docs/limits.md)."""
    wl = plan.workload
    return replace(
        plan,
        model=teacher_model(plan),
        workload=replace(wl, task="finetune", objective="next_token", distillation=Distillation()),
        precision=replace(plan.precision, weights=plan.precision.activation_dtype),
    )


def _teacher_params(ctx: StageContext) -> StageParams:
    """The teacher cut over the plan's tensor ranks (one pipeline stage: distillation plans have none)."""
    return model_params(teacher_model(ctx.plan), ctx.plan.parallelism.tensor)


def teacher_weights(ctx: StageContext) -> Item | None:
    """The frozen teacher's weights on this GPU: in the recipe's dtype (torchtune `_setup_teacher_model`:
    `set_default_dtype(self._dtype)`, validate_expected_param_dtype) or workload.distillation.teacher_weights for a
    quantized teacher (its projections in that dtype with their scales, the rest in the compute dtype, as a QLoRA
    base). Sharded like the student under FSDP (ZeRO-3): the distributed recipe shards the teacher with the
    student's shard conditions (knowledge_distillation_distributed.py `_setup_teacher_model` →
    training.shard_model). None unless the plan distills."""
    if ctx.plan.workload.objective != "distillation":
        return None
    wdt = ctx.plan.workload.distillation.teacher_weights or ctx.plan.precision.activation_dtype
    zero3 = ctx.plan.parallelism.zero_stage == 3
    return item(
        "teacher_weights",
        "Teacher model (frozen)",
        frozen_model(ctx, _teacher_params(ctx), wdt),
        f"The {ctx.plan.workload.distillation.teacher} teacher, no gradients or optimizer states; "
        + ("sharded with the student (torchtune shard_model)" if zero3 else "every GPU holds all of it"),
        ctx.detail,
    )


def teacher_forward(ctx: StageContext) -> Item | None:
    """The teacher's no-grad forward while the student's graph and logits are held: one teacher layer's largest
    working set (a no-grad layer frees its intermediates as it goes; its MLP holds the input, the gate and up
    projections and their product, T × (h + 3 × I / t)) and the teacher's logits, T × V in the compute dtype (its
    output projection's dtype; all of the chunks at once: the recipe sets num_output_chunks on the teacher too).
    None unless the plan distills."""
    if ctx.plan.workload.objective != "distillation":
        return None
    m, t = teacher_model(ctx.plan), ctx.plan.parallelism.tensor
    tokens, vocab = logit_tokens(ctx), -(-m.vocab_size // t)
    width = m.hidden_size + 3 * -(-m.intermediate_size // t)
    term = Described(
        tokens * (width + vocab) * ctx.bc,
        "T × (h + 3 × I one teacher layer's MLP {:,} + V logits {:,}) × {} B = {:,} × {:,} × {}",
        (width, vocab, ctx.bc, tokens, width + vocab, ctx.bc),
    )
    return item(
        "teacher_forward",
        "Teacher forward (no grad)",
        term,
        "The teacher's no-grad forward over the student's tokens: one layer at a time, then its logits",
        ctx.detail,
    )


def student_logits(ctx: StageContext) -> Item | None:
    """The student's logits while the teacher runs: the recipe holds them (`logits = self._model(...)` before the
    teacher's forward) before either loss has read them, in the compute dtype. None unless the plan distills."""
    if ctx.plan.workload.objective != "distillation":
        return None
    tokens, vocab, logit_b = logit_sizes(ctx)  # as the loss's
    term = Described(tokens * vocab * logit_b, "T·V × {} = {:,} × {:,} × {}", (logit_b, tokens, vocab, logit_b))
    return item("student_logits", "Student logits", term, "The student's logits, before the losses", ctx.detail)


def kd_loss(ctx: StageContext, backward: bool) -> Item | None:
    """The forward-KL loss over the chunks (ForwardKLWithChunkedOutputLoss, workload.distillation.loss_chunks):
    at the end of the forward the teacher's logits (compute dtype) and what every chunk saved for backward
    (_KD_SAVED bytes per logit) beside one chunk's transients; in the loss's backward what it saved (the
    teacher's logits are deleted after the loss: `del teacher_logits`). None unless the plan distills."""
    wl = ctx.plan.workload
    if wl.objective != "distillation":
        return None
    tokens, vocab, _ = logit_sizes(ctx)
    chunks, tv = wl.distillation.loss_chunks, tokens * vocab
    if backward:
        term = Described(_KD_SAVED * tv, "T·V × 9 (saved teacher probs 4 + student log-probs 4 + inf mask 1)", ())
    else:
        term = Described(
            tv * (ctx.bc + _KD_SAVED) + -(-tv * _KD_CHUNK // chunks),
            "T·V × ({} teacher logits + 9 saved (teacher probs 4 + student log-probs 4 + inf mask 1) + 8/{} one "
            "chunk's fp32 product and its masked copy) = {:,} × {:,} × {:g}",
            (ctx.bc, chunks, tokens, vocab, ctx.bc + _KD_SAVED + _KD_CHUNK / chunks),
        )
    return item(
        "kd_loss",
        "KD loss (forward KL)",
        term,
        "What the forward KL saved for backward" + ("" if backward else ", beside the teacher's logits"),
        ctx.detail,
    )
