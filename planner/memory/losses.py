"""Logits and loss on the last stage: HF ForCausalLMLoss / torch cross_entropy on fp32 logits, chunked
(torchtune), compiled (inductor) and fused (Liger) — one function per variant, each giving the bytes held at
the end of forward, in the loss's backward and in the output head's backward."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import partial
from math import ceil

from planner.memory.layout import StageContext
from planner.memory.terms import Described, Factor, Product, Term, fixed
from planner.search.memo import Memo, remembered


@dataclass(frozen=True, kw_only=True)
class Loss:
    forward: Term  # end of forward: logits and what the loss saves
    backward: Term  # backward of the log-softmax
    head: Term  # backward of the output head: the gradient of the logits
    forward_note: str
    backward_note: str
    head_grad: bool  # the output head gets its gradient in the head's backward (not made in forward)


def logit_tokens(ctx: StageContext) -> int:
    """T of the logits: the micro-batch's tokens on this GPU, but for GRPO only the completions' (Workload
    logit_positions: TRL's logits_to_keep, which also cuts the hidden states the head reads)."""
    wl = ctx.plan.workload
    return min(ctx.tokens, wl.sequences_per_forward * wl.logit_positions)


def logit_sizes(ctx: StageContext) -> tuple[int, int, int]:
    """(T of the logits, V per tensor rank, bytes of one logit: the compute dtype, fp32 unless 16-bit)."""
    m = ctx.plan.model
    return logit_tokens(ctx), -(-m.vocab_size // ctx.plan.parallelism.tensor), 2 if ctx.bc == 2 else 4


def _head(ctx: StageContext, chunks: int) -> Term:
    tokens, vocab_r, logits_b = logit_sizes(ctx)
    tv = tokens * vocab_r
    return Described(
        -(-tv * logits_b // chunks) if chunks else tv * logits_b,
        "T·V × {}" + (" / {} (one slice's" if chunks else " (the") + " gradient of the logits)",
        (logits_b, chunks) if chunks else (logits_b,),
    )


def _plain(ctx: StageContext) -> Loss:
    """Uncompiled cross-entropy on the whole logits: HF ForCausalLMLoss (transformers >= 4.50 loss_utils.py:
    `logits.float()`, labels padded rather than logits shifted) and torchtitan's cross_entropy_loss
    (components/loss.py: `pred.float()`), both F.cross_entropy = log_softmax + nll_loss. Forward peaks in nll_loss
    with the logits, their fp32 upcast (the logits themselves when fp32) and the fp32 log-softmax, which
    autograd saves (PyTorch derivatives.yaml: _log_softmax's backward reads its result). Backward peaks in
    _log_softmax_backward_data: the saved log-softmax, nll_loss's gradient of it (a zeroed T·V tensor) and the
    new input gradient, fp32; the upcast's backward then casts the gradient to the logits' dtype for the head.
    MemTracker on HF Llama code (bench/data/oracle-train.csv, V 128,256 at 8,192 × 1-2 tokens): 12.000 T·V."""
    tokens, vocab_r, logits_b = logit_sizes(ctx)
    per_tv = logits_b + 8 if logits_b < 4 else 8
    size = (Factor(tokens), Factor(vocab_r))
    forward = Product(
        size + (Factor(per_tv),),
        prefix=f"T·V × ({logits_b} logits + 4 fp32 upcast + 4 log-softmax) = "
        if logits_b < 4
        else "T·V × (4 logits + 4 log-softmax) = ",
    )
    backward = Product(
        size + (Factor(12),), prefix="T·V × 12 (saved log-softmax + its gradient + input gradient, fp32) = "
    )
    return Loss(
        forward=forward,
        backward=backward,
        head=_head(ctx, 0),
        head_grad=True,
        forward_note="Cross-entropy upcasts logits to fp32 and keeps log_softmax for backward",
        backward_note="fp32 buffers of _log_softmax_backward_data",
    )


def softmax_bytes(ctx: StageContext) -> int:
    """Bytes of one log-softmax element: fp32 under autocast (torch.autocast runs log_softmax and cross_entropy in
    fp32: PyTorch autocast op reference, "CUDA Ops that can autocast to float32"; LoRA on a 16-bit base runs
    under it too), else the logits' own dtype."""
    autocast = ctx.autocast or (ctx.lora and ctx.plan.precision.mixed)
    return 4 if autocast or ctx.bc == 4 else 2


def _upcast_logprobs(ctx: StageContext) -> Loss:
    """Log-probs over fp32 logits (workload.preference.log_probs upcast: hiyouga/LLaMA-Factory@ff6d4d1
    train/dpo/trainer.py concatenated_forward `.logits.to(torch.float32)`, trainer_utils.py get_batch_logps
    `torch.gather(logits.log_softmax(-1), ...)`): the fp32 copy, which the returned dict holds (the 16-bit logits
    die with the model's output), and the fp32 log-softmax autograd saves. Backward: the saved log-softmax, the
    gather's scattered zeros and the input gradient, fp32, as cross-entropy's."""
    tokens, vocab_r, _ = logit_sizes(ctx)
    size = (Factor(tokens), Factor(vocab_r))
    return Loss(
        forward=Product(size + (Factor(8),), prefix="T·V × (4 fp32 logits + 4 log-softmax) = "),
        backward=Product(
            size + (Factor(12),), prefix="T·V × 12 (saved log-softmax + its gradient + input gradient) = "
        ),
        head=_head(ctx, 0),
        head_grad=True,
        forward_note="Log-probs over the logits cast to fp32: the fp32 logits and their log-softmax",
        backward_note="fp32 buffers of the log-softmax's backward",
    )


def _logprobs(ctx: StageContext) -> Loss:
    """The preference losses' log-probs (huggingface/trl@f2cd577 dpo_trainer.py _compute_loss, kto_trainer.py,
    experimental/cpo and orpo get_batch_logps): `selective_log_softmax` (trl/trainer/utils.py) of the logits,
    which `outputs` holds to the end of _compute_loss. On 16-bit logits it loops over the sequences: each row's
    log_softmax, which autograd saves (its backward reads the result), and a gather; on fp32 logits it gathers the
    labels' logits and takes a logsumexp per row, which saves only the logits. CPO (simpo) and ORPO add an NLL
    cross-entropy on the chosen half (`logits[..., :-1, :].contiguous()`, then F.cross_entropy, which saves its
    log-softmax): TRL's cpo_alpha default 1.0. Backward: each row's gradient of the gather and the log-softmax,
    stacked into the logits' gradient (16-bit: 2 × logit bytes; fp32: the saved logits, the gather's scattered
    zeros, each row's logsumexp gradient until UnbindBackward stacks them, and the stacked gradient, 16; the
    oracle's TRL step peaks there, in scatter_add: bench/data/oracle-dpo.csv)."""
    tokens, vocab_r, logits_b = logit_sizes(ctx)
    soft = softmax_bytes(ctx)
    saved = 0 if logits_b == 4 else soft  # TRL's fp32 branch saves no log-softmax
    nll = ctx.plan.workload.preference.loss_type in ("simpo", "orpo")
    half = Fraction(logits_b + soft, 2) if nll else Fraction(0)
    per_tv = logits_b + saved + half
    forward = Described(
        ceil(tokens * vocab_r * per_tv),
        "T·V × ({} logits + {} saved log-softmax"
        + (" + ({} copy + {} log-softmax) / 2 NLL on the chosen" if nll else "")
        + ") = {:,} × {:,} × {:g}",
        ((logits_b, saved, logits_b, soft) if nll else (logits_b, saved)) + (tokens, vocab_r, float(per_tv)),
    )
    back = 16 if logits_b == 4 else 2 * logits_b
    backward = Product(
        (Factor(tokens), Factor(vocab_r), Factor(back)),
        prefix=f"T·V × {back} (each row's log-softmax gradient, stacked into the logits' gradient) = ",
    )
    return Loss(
        forward=forward,
        backward=backward,
        head=_head(ctx, 0),
        head_grad=True,
        forward_note="TRL's selective_log_softmax: the logits and each row's saved log-softmax",
        backward_note="each row's gradient of the log-softmax, stacked into the logits' gradient",
    )


# TRL entropy_from_logits (trl/trainer/utils.py) takes the entropy 128 rows of the flattened logits at a time
ENTROPY_CHUNK_ROWS = 128


def _grpo_logprobs(ctx: StageContext) -> Loss:
    """GRPO's log-probs (huggingface/trl@f2cd577 grpo_trainer.py _get_per_token_logps_and_entropies, in
    _compute_loss): the completion's logits (logits_to_keep + 1, the last dropped), divided by the temperature in
    place, `selective_log_softmax` (each row's saved log-softmax, fp32 under autocast), and under no_grad
    `entropy_from_logits`, whose reshape copies the strided slice whole before its 128-row chunks (log-softmax, exp,
    product); the log-prob loop's own rows (the new one and its fp32 cast under autocast) are smaller. Backward:
    the rows' gradients stacked, the two slices' zero-filled gradients and the division's result: 4 × the logits'
    bytes (the oracle's TRL step peaks in that division's backward, bench/data/oracle-grpo.csv)."""
    tokens, vocab_r, logits_b = logit_sizes(ctx)
    soft = softmax_bytes(ctx)
    tv = tokens * vocab_r
    entropy = tv * logits_b + ENTROPY_CHUNK_ROWS * vocab_r * 3 * soft
    forward = Described(
        tv * (logits_b + soft) + entropy,
        "T·V × ({} logits + {} saved log-softmax + {} entropy's copy) + 128 rows × V × 3 × {} (entropy chunk) = "
        "{:,} × {:,} × {} + 128 × {:,} × {}",
        (logits_b, soft, logits_b, soft, tokens, vocab_r, 2 * logits_b + soft, vocab_r, 3 * soft),
    )
    backward = Product(
        (Factor(tokens), Factor(vocab_r), Factor(4 * logits_b)),
        prefix=f"T·V × {4 * logits_b} (rows' gradients stacked, two slices' zero-filled gradients, the division) = ",
    )
    return Loss(
        forward=forward,
        backward=backward,
        head=_head(ctx, 0),
        head_grad=True,
        forward_note="TRL's GRPO log-probs: the completion's logits, each row's saved log-softmax, the entropy's copy",
        backward_note="the log-probs' gradients through the slices and the temperature division",
    )


def _chunked(ctx: StageContext) -> Loss:
    """Chunked cross-entropy (torchtune CEWithChunkedOutputLoss), checked with MemTracker on fake tensors: the
    recipe holds every chunk's logits while the losses are computed, each chunk's log-softmax (fp32) is saved,
    and only one chunk's fp32 upcast exists at a time: T·V × (logits + 4 + 4/n) at the end of the forward, the
    peak of the loss; backward then holds the saved 4·T·V and one chunk's buffers."""
    tokens, vocab_r, logits_b = logit_sizes(ctx)
    chunks, tv = ctx.plan.techniques.loss_chunks, tokens * vocab_r
    upcast = 4 if logits_b < 4 else 0  # .float() of fp32 logits is the same tensor
    forward = Described(
        tv * (logits_b + 4) + -(-tv * upcast // chunks),
        "T·V × ({} logits + 4 log-softmax + {}/{} one chunk's fp32 upcast) = {:,} × {:,} × {:g}",
        (logits_b, upcast, chunks, tokens, vocab_r, logits_b + 4 + upcast / chunks),
    )
    backward = Described(
        4 * tv + -(-tv * 12 // chunks),
        "T·V × (4 saved log-softmax + 12/{} one slice's backward buffers), fp32",
        (chunks,),
    )
    return Loss(
        forward=forward,
        backward=backward,
        head=_head(ctx, chunks),
        head_grad=True,
        forward_note=f"Chunked cross-entropy over {chunks} slices of tokens keeps every slice's log-softmax",
        backward_note="fp32 buffers of _log_softmax_backward_data",
    )


def _compiled(ctx: StageContext) -> Loss:
    """A compiled cross-entropy saves only the logits and fuses its backward into a gradient in the logits'
    dtype: no fp32 T·V buffer (inductor's partition of HF and torchtitan losses; torchtitan and torchtune
    compile the loss with the model, HF computes it inside the model's forward)."""
    tokens, vocab_r, logits_b = logit_sizes(ctx)
    tech, tv = ctx.plan.techniques, tokens * vocab_r
    chunks = tech.loss_chunks if tech.loss == "chunked" else 0
    forward = Described(
        tv * logits_b + 8 * tokens,
        "T·V × {} logits + 8T (compiled loss) = {:,} × {:,} × {} + 8 × {:,}",
        (logits_b, tokens, vocab_r, logits_b, tokens),
    )
    backward = Described(
        tv * logits_b + (-(-tv * logits_b // chunks) if chunks else tv * logits_b),
        "T·V × {} saved logits + their gradient" + (f" (one slice's of {chunks})" if chunks else "") + " (compiled)",
        (logits_b,),
    )
    return Loss(
        forward=forward,
        backward=backward,
        head=_head(ctx, chunks),
        head_grad=True,
        forward_note="A compiled cross-entropy saves only the logits",
        backward_note="A compiled cross-entropy's backward writes the logits' gradient in their dtype: no fp32 buffer",
    )


def _fused(ctx: StageContext) -> Loss:
    """Liger fused linear cross-entropy (ops/fused_linear_cross_entropy.py): tokens go through the head in chunks
    of next_pow2(⌈T / ⌈V/h⌉⌉) rows, whose logits (compute dtype; the fp32 upcast stays in registers) are
    overwritten by their gradient; the gradients of the hidden states (T·h) and of the head's weight (V·h,
    parameter dtype; none for a frozen head) are made in forward and saved for backward."""
    tokens, vocab_r, _ = logit_sizes(ctx)
    h, bc = ctx.plan.model.hidden_size, ctx.bc
    rows = min(1 << (-(-tokens // -(-vocab_r // h)) - 1).bit_length(), tokens)
    head_each = 0 if ctx.lora else (4 if ctx.autocast else bc)
    saved = tokens * h * bc + vocab_r * h * head_each + 4 * tokens
    made = fixed(saved, "the gradients made in forward")
    forward = Described(
        saved + rows * vocab_r * bc,
        "T·h × {} input gradient + "
        + ("V·h × {} head gradient + " if head_each else "")
        + "{:,} rows × V × {} chunk logits + 4T",
        (bc, head_each, rows, bc) if head_each else (bc, rows, bc),
    )
    return Loss(
        forward=forward,
        backward=made,
        head=made,
        head_grad=False,
        forward_note="Fused linear cross-entropy: logits exist one chunk at a time; gradients are made in forward",
        backward_note="Liger's fused loss made these gradients in forward",
    )


_LOSSES = Memo(1024)  # _loss by all it reads (see loss)


def loss(ctx: StageContext) -> Loss:
    """The last stage's loss, kept by what it reads: the tokens, the model's cut (vocabulary, width, adapters), the
    compute dtype, autocast and the loss settings."""
    tech, wl = ctx.plan.techniques, ctx.plan.workload
    objective = (wl.preference.loss_type, wl.preference.log_probs) if wl.objective == "preference" else wl.objective
    key = (
        *(ctx.layout, logit_tokens(ctx), ctx.bc, ctx.autocast, tech.loss, tech.compiled_loss, tech.loss_chunks),
        *(objective, ctx.lora and ctx.plan.precision.mixed),
    )
    return remembered(_LOSSES, key, partial(_loss, ctx))


def _loss(ctx: StageContext) -> Loss:
    tech = ctx.plan.techniques
    if tech.loss == "fused":
        return _fused(ctx)
    if ctx.plan.workload.objective == "preference":
        return _upcast_logprobs(ctx) if ctx.plan.workload.preference.log_probs == "upcast" else _logprobs(ctx)
    if ctx.plan.workload.objective == "grpo":
        return _grpo_logprobs(ctx)
    if tech.compiled_loss:
        return _compiled(ctx)
    return _chunked(ctx) if tech.loss == "chunked" else _plain(ctx)
