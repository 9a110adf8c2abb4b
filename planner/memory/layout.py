"""Where the model's parameters and a step's tokens land: the pipeline layer split, the parameters one GPU
holds, the micro-batches a stage keeps in flight, ZeRO sharding, and the per-stage context every term reads.

What depends only on the model and how it is cut over the tensor, expert and pipeline ranks (parameter counts,
projection shapes, each stage's layers and parameters) is resolved once per distinct cut into a `Layout`, which
the memory terms and the time model read instead of re-deriving it from the model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import pairwise
from types import MappingProxyType

from planner.memory.terms import Sharded, Term
from planner.plan.config import Lora, Plan
from planner.plan.dtypes import nbytes
from planner.plan.models import Model, ParamCounts, lora_params_per_layer, param_counts, projection_shapes
from planner.plan.pipeline import chunk_split


@dataclass(frozen=True, kw_only=True)
class StageParams:
    total: int  # parameters on this GPU's model shard (tensor- and pipeline-parallel split), before ZeRO
    experts: int  # of which are routed MoE experts (split by expert parallelism; ZeRO shards them over
    #              the expert-data-parallel ranks)
    matmul: int  # of which are inputs to matmuls (autocast casts them to 16-bit)
    dense_layers: int  # layers of this stage with a dense MLP
    moe_layers: int  # layers of this stage with an MoE MLP
    layer: int  # the largest transformer layer on this rank
    largest_unit: int  # largest FSDP/ZeRO-3 unit: a layer, the embedding or the output head
    gathered_pair: int  # largest two neighbouring units (the one in use and the one prefetched)
    gathered_pair_layers: int  # of which transformer-layer parameters
    embedding: int  # embedding rows on this rank when the stage holds the embedding, else 0
    head: int  # output-projection parameters used on this stage (tied or not), else 0
    head_own: int  # output-head parameters stored on this stage beside the embedding (untied, or a PP copy)
    linear: int  # parameters of the layers' projections (what weight quantization applies to)
    linear_rows: int  # their output rows (per-row quantization scales)
    largest_matrix: int  # largest projection matrix of a layer (a dequantized copy is made for each matmul)
    adapters: int  # LoRA parameters on this stage (task lora/qlora), else 0


@dataclass(frozen=True, kw_only=True, eq=False)
class Layout:
    """The model cut over a plan's tensor, expert and pipeline ranks, with its LoRA adapters: everything that
    depends on nothing else, resolved once per distinct cut (`layout`) and read by the terms instead of being
    re-derived from the model in each. Compared by identity: the cache hands out one object per cut."""

    model: Model
    tensor: int
    expert: int
    lora: Lora | None  # the adapters of task lora and qlora, else None
    counts: ParamCounts  # one rank's parameters (tensor × expert split)
    shapes: Mapping[str, tuple[int, int]]  # (input, output) width of each projection on one tensor rank
    pipeline: int
    chunks: tuple[int, ...]  # layers of each of the pipeline × virtual_stages model chunks
    split: tuple[int, ...]  # layers of each pipeline stage
    indices: tuple[tuple[int, ...], ...]  # the model's layers (0-based) each stage runs
    layers: tuple[tuple[int, int], ...]  # (dense, MoE) layers of each stage
    largest: tuple[int, int]  # (dense, MoE) layers of the stage with the most layer parameters
    # hybrid models, each stage layer by layer on one rank: (layer parameters, of which norms, largest layer)
    patterns: tuple[tuple[int, int, int], ...]
    # a reward model (AutoModelForSequenceClassification): a score head of h × 1 replaces the vocabulary head
    # (huggingface/transformers LlamaForSequenceClassification: `self.score = nn.Linear(h, num_labels, bias=False)`,
    # no lm_head; TRL RewardTrainer loads it with num_labels=1, huggingface/trl@f2cd577 trl/trainer/reward_trainer.py)
    score_head: bool = False
    stages: tuple[StageParams, ...] = ()  # the parameters each stage's GPUs hold


def layout(plan: Plan) -> Layout:
    """The plan's model cut over its ranks (one cached object per cut)."""
    par, wl = plan.parallelism, plan.workload
    return _layout(
        plan.model,
        par.tensor,
        par.expert,
        par.pipeline,
        chunks_of(plan),
        wl.lora if wl.task in ("lora", "qlora") else None,
        wl.objective == "reward",
    )


def score_layout(plan: Plan) -> Layout:
    """The plan's model cut with a score head in place of the vocabulary head: PPO's value and reward models
    (AutoModelForSequenceClassification with num_labels 1, huggingface/trl@f2cd577 trl/experimental/ppo/
    ppo_trainer.py PolicyAndValueWrapper `value_model.score`; OpenRLHF/OpenRLHF@3c3be62 openrlhf/models/model.py
    get_llm_for_sequence_regression: `nn.Linear(config.hidden_size, 1, bias=False)`)."""
    par, wl = plan.parallelism, plan.workload
    lora = wl.lora if wl.task in ("lora", "qlora") else None
    return _layout(plan.model, par.tensor, par.expert, par.pipeline, chunks_of(plan), lora, True)


# keyed by (model, tensor, expert, pipeline, chunks, adapters, score head), all a cut reads: a search tries a few
# dozen cuts
@lru_cache(maxsize=256)
def _layout(
    m: Model, tensor: int, expert: int, p: int, chunks: tuple[int, ...], lora: Lora | None, score_head: bool = False
) -> Layout:
    layers = tuple(_stage_layers(m, chunks, p, s) for s in range(p))
    unsplit = param_counts(m, tensor)  # the experts unsplit: which stage holds the most layer parameters
    counts = param_counts(m, tensor, expert)
    indices = tuple(
        tuple(i for c in range(s, len(chunks), p) for i in range(sum(chunks[:c]), sum(chunks[: c + 1])))
        for s in range(p)
    )
    base = Layout(
        model=m,
        tensor=tensor,
        expert=expert,
        lora=lora,
        counts=counts,
        shapes=MappingProxyType(projection_shapes(m, tensor)),
        pipeline=p,
        chunks=chunks,
        split=tuple(sum(chunks[i::p]) for i in range(p)),
        indices=indices,
        layers=layers,
        largest=max(layers, key=lambda s: _stage_weight(s, unsplit.layer, unsplit.moe_layer)),
        patterns=tuple(_pattern_params(counts, i) for i in indices) if m.layer_pattern else (),
        score_head=score_head,
    )
    return replace(base, stages=tuple(_stage_params(base, s) for s in range(p)))


# --- The pipeline layer split (planner/plan/pipeline.py) ---------------------------------------------------------
def model_params(m: Model, tensor: int) -> StageParams:
    """A whole second model (a distillation teacher) on one stage, cut over `tensor` ranks, without adapters."""
    return _layout(m, tensor, 1, 1, (m.num_layers,), None).stages[0]


def chunks_of(plan: Plan) -> tuple[int, ...]:
    """Layers of each of the plan's pipeline × virtual_stages model chunks, by its split rule or list."""
    par = plan.parallelism
    return chunk_split(
        plan.model.num_layers, par.pipeline * par.virtual_stages, par.pipeline_split, par.pipeline_layers
    )


def stage_split(plan: Plan) -> tuple[int, ...]:
    """Layers of each pipeline stage: its chunks i, i + p, i + 2p, … (interleaved schedules give each stage v of
    the model's p × v chunks)."""
    return layout(plan).split


def _stage_layers(m: Model, chunks: tuple[int, ...], p: int, stage: int) -> tuple[int, int]:
    dense_total, dense, total = m.num_layers - m.moe_layers, 0, 0
    for c in range(stage, len(chunks), p):
        start = sum(chunks[:c])
        dense += max(0, min(dense_total, start + chunks[c]) - start)
        total += chunks[c]
    return dense, total - dense


def stage_layers(plan: Plan, stage: int) -> tuple[int, int]:
    """(dense, MoE) layers of a pipeline stage over its chunks; MoE models put their dense layers first."""
    return layout(plan).layers[stage]


def stage_layer_indices(plan: Plan, stage: int) -> tuple[int, ...]:
    """The model's layers (0-based) that pipeline stage `stage` runs, over its chunks."""
    return layout(plan).indices[stage]


def attention_layers(plan: Plan) -> int:
    """Attention layers (those with a KV cache) of the pipeline stage that has the most."""
    return layout_attention_layers(layout(plan))


def layout_attention_layers(lay: Layout) -> int:
    """`attention_layers` of a resolved cut."""
    pattern = lay.model.layer_pattern
    if not pattern:
        return max(lay.split)
    return max(sum(pattern[i] == "*" for i in indices) for indices in lay.indices)


def _pattern_params(counts: ParamCounts, layers: tuple[int, ...]) -> tuple[int, int, int]:
    return (
        sum(counts.layer_at(i) for i in layers),
        sum(counts.layer_norms(i) for i in layers),
        max(counts.layer_at(i) for i in layers),
    )


def _stage_weight(split: tuple[int, int], layer: int, moe_layer: int) -> int:
    return split[0] * layer + split[1] * moe_layer


def largest_stage_layers(plan: Plan) -> tuple[int, int]:
    """(dense, MoE) layers of the pipeline stage with the most layer parameters."""
    return layout(plan).largest


# --- Parameters held by one GPU -----------------------------------------------------------------------------
def _gathered_pair(runs: list[tuple[int, bool, int]]) -> tuple[int, int]:
    """ZeRO-3/FSDP units in execution order, as runs of (params, is a layer, how many): a unit is all-gathered
    while its neighbour is prefetched; (largest neighbouring pair, of which layer parameters). Neighbours are
    two units of one run or the ends of two adjacent runs."""
    pairs = [(2 * u, 2 * u * la) for u, la, n in runs if n > 1]
    pairs += [(a + b, a * la + b * lb) for (a, la, _), (b, lb, _) in pairwise(runs)]
    return max(pairs or [(runs[0][0], runs[0][0] * runs[0][1])])


def _rows_and_largest(lay: Layout, dense: int, moe: int) -> tuple[int, int]:
    """(output rows of the stage's projections, largest projection matrix)."""
    m, t, ep, shapes = lay.model, lay.tensor, lay.expert, lay.shapes
    rows = dense * sum(o for _, o in shapes.values())
    largest = max(i * o for i, o in shapes.values())
    if moe:
        e_inter = m.expert_intermediate_size // t
        per_expert_rows = (2 * e_inter if m.mlp == "swiglu" else e_inter) + m.hidden_size
        experts_here = m.num_experts // ep + m.shared_experts
        rows += moe * (sum(shapes[k][1] for k in ("q", "k", "v", "o")) + experts_here * per_expert_rows + m.num_experts)
        largest = max(largest, m.hidden_size * e_inter)
    return rows, largest


def _adapter_params(lay: Layout, stage: int, dense: int, moe: int) -> int:
    """LoRA parameters of the stage's layers (0 unless the task is lora or qlora). Hybrid models: the targets are
    the attention layers' q, k, v, o and the FFNs' projections; recurrent mixers get no adapter."""
    if lay.lora is None:
        return 0
    m, lora, t, ep = lay.model, lay.lora, lay.tensor, lay.expert
    attn_targets = tuple(x for x in lora.targets if x in ("q", "k", "v", "o"))
    mlp_targets = tuple(x for x in lora.targets if x not in attn_targets)
    attn_layers = dense + moe
    if m.layer_pattern:
        kinds = [m.layer_pattern[i] for i in lay.indices[stage]]
        attn_layers = kinds.count("*")
        dense = kinds.count("-") if m.pattern_style == "one_sublayer" else dense
    adapters = attn_layers * lora_params_per_layer(m, attn_targets, lora.rank, t) + dense * lora_params_per_layer(
        m, mlp_targets, lora.rank, t
    )
    if moe:  # MLP adapters on every expert of this rank (PEFT targets each expert's projections by name)
        e, h = m.expert_intermediate_size // t, m.hidden_size
        expert_shapes = {"gate": (h, e), "up": (h, e), "down": (e, h)}
        per_expert = sum(lora.rank * sum(expert_shapes[x]) for x in mlp_targets)
        adapters += moe * per_expert * (m.num_experts // ep + m.shared_experts)
    return adapters


def _stage_params(lay: Layout, stage: int) -> StageParams:
    m, p, counts = lay.model, lay.pipeline, lay.counts
    table = counts.embedding  # vocab-parallel rows of the embedding (and of the output head)
    last = stage == p - 1
    dense, moe = lay.layers[stage]
    embedding = table if stage == 0 else 0
    # the output head: its own table when untied; with tied embeddings and pipeline > 1 the last stage keeps a
    # copy of the embedding (Megatron), with pipeline = 1 it is the embedding itself
    head_params = table if last and (not m.tie_embeddings or p > 1) else 0
    if lay.score_head:  # the h × 1 score head, its own weight (never tied), in place of the vocabulary head
        table_head = head_params = m.hidden_size if last else 0
    else:
        table_head = table if last else 0
    layer_units = [(counts.layer, True, dense), (counts.moe_layer, True, moe)]
    if m.layer_pattern:  # hybrid: each layer's own mixer; its mixers' vectors count as linear (a few per mil)
        layer_params, norms, biggest = lay.patterns[stage]
        linear = layer_params - norms
        layer_units = [(counts.layer_at(i), True, 1) for i in lay.indices[stage]]
    else:
        layer_params, biggest = (
            dense * counts.layer + moe * counts.moe_layer,
            max(counts.layer if dense else 0, counts.moe_layer if moe else 0),
        )
        linear = dense * (counts.attention + counts.mlp) + moe * (
            counts.attention + counts.experts + counts.shared + counts.router
        )
    total = layer_params + embedding + head_params + (counts.final_norm if last else 0)
    units = [
        (u, layer, n) for u, layer, n in [(embedding, False, 1)] + layer_units + [(head_params, False, 1)] if u and n
    ]
    pair, pair_layers = _gathered_pair(units)
    rows, largest = _rows_and_largest(lay, dense, moe)
    return StageParams(
        total=total,
        experts=moe * counts.experts,
        matmul=linear + table_head,
        dense_layers=dense,
        moe_layers=moe,
        layer=biggest,
        largest_unit=max(u for u, _, _ in units),
        gathered_pair=pair,
        gathered_pair_layers=pair_layers,
        embedding=embedding,
        head=table_head,
        head_own=head_params,
        linear=linear,
        linear_rows=rows,
        largest_matrix=largest,
        adapters=_adapter_params(lay, stage, dense, moe),
    )


# --- Micro-batches, routing and the mixed-precision recipe ---------------------------------------------------
def in_flight(plan: Plan, index: int) -> float:
    """Micro-batches whose activations pipeline stage `index` holds at once, in units of one micro-batch through
    the whole stage."""
    par, m = plan.parallelism, plan.micro_batches_per_step
    p = par.pipeline
    if par.pipeline_schedule == "gpipe":  # every forward before any backward (Huang et al. 2019)
        return m
    if par.pipeline_schedule == "interleaved_1f1b":
        # Megatron forward_backward_pipelining_with_interleaving: 2(p - i - 1) + (v - 1)p warm-up forwards of
        # model chunks (1/v of the stage each), one more in the steady state; stage 0 holds p + (p - 1)/v
        # micro-batches (Narayanan et al. 2021, §2.2)
        v = par.virtual_stages
        return min(2 * (p - index - 1) + (v - 1) * p + 1, m * v) / v
    # 1F1B: stage i holds up to p - i micro-batches (Narayanan et al. 2021); zero-bubble ZB-H1 splits backward
    # into input- and weight-gradient passes within the same peak (Qi et al. 2023, §3)
    return min(p - index, m)


def routed_slots(plan: Plan) -> float:
    """Expert slots one token's activations occupy in a MoE layer: top-k when dropless; with a capacity factor
    every expert's buffer is padded to capacity_factor × T·k/E tokens (Lepikhin et al. 2020, GShard §2.2), so
    k × capacity_factor on average whatever the routing."""
    return plan.model.experts_per_token * (plan.techniques.moe_capacity_factor or 1)


def autocast(plan: Plan) -> bool:
    """PyTorch autocast recipe: fp32 parameters, 16-bit compute, no ZeRO (see the package docstring). LoRA
    keeps its frozen base in 16 bits, so only the small adapters are fp32 and the activations stay 16-bit."""
    return (
        plan.precision.mixed
        and plan.parallelism.zero_stage == 0
        and plan.techniques.offload == "none"
        and plan.workload.task in ("pretrain", "finetune")
    )


# --- FSDP under pipeline parallelism -------------------------------------------------------------------------
# Frameworks whose pipeline is torch.distributed.pipelining over FSDP2 (fully_shard): torchtitan, and a generic
# plan's PyTorch. Its stage runs every micro-batch's backward with set_requires_gradient_sync(False) and
# set_reshard_after_backward(False), and reduces and reshards once, after the last (pytorch/pytorch@0138610
# torch/distributed/pipelining/stage.py backward_maybe_with_nosync, _post_backward; perform_reduce_grad, the
# schedule's REDUCE_GRAD action, in later releases). Without a gradient
# sync, FSDP2 keeps each micro-batch's unsharded gradient, upcast to the reduce dtype and summed
# (pytorch/pytorch@002a76f torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py post_backward:
# to_accumulated_grad_if_needed, accumulate_unsharded_grad_if_needed). Megatron runs its own schedule (its
# distributed optimizer already keeps full fp32 main_grad buffers per stage, ZeRO-1 here) and DeepSpeed's
# pipeline engine refuses ZeRO-2 and -3 (plan.py), so neither is listed.
TORCH_PIPELINING = frozenset({"generic", "torchtitan"})
# Frameworks that do not reshard parameters after forward under pipelining, so a stage's parameters stay
# all-gathered from its first forward to the step's gradient reduction: torchtitan's apply_fsdp, policy
# "default" -> reshard_after_forward = not pp_enabled, in every release (pytorch/torchtitan@f7084fc v0.1.0 and
# @73a0e69 v0.2.2 torchtitan/models/llama3/infra/parallelize.py apply_fsdp; @b5bcd76 main
# torchtitan/distributed/fsdp.py get_fsdp_reshard_after_forward_policy: "For PP, by default do not reshard
# after forward to avoid per-microbatch all-gathers"). PyTorch's fully_shard default reshards after forward.
KEEPS_GATHERED_UNDER_PP = frozenset({"torchtitan"})


def unsharded_under_pipelining(plan: Plan) -> tuple[bool, str]:
    """(gradients accumulate unsharded until the step's reduction, from which moment the stage's parameters stay
    unsharded: "forward", "backward" or "" for never) for FSDP (ZeRO-2/3) under a torch pipelining schedule."""
    par = plan.parallelism
    if par.pipeline == 1 or par.zero_stage < 2 or plan.framework not in TORCH_PIPELINING:
        return False, ""
    if par.zero_stage == 2:  # FSDP2 without resharding after forward: the 16-bit weights are held whole already
        return True, ""
    return True, "forward" if plan.framework in KEEPS_GATHERED_UNDER_PP else "backward"


# --- What every term of one stage reads ---------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class StageContext:
    """One pipeline stage of a training plan: the values its terms share."""

    plan: Plan
    index: int
    detail: bool  # render formulas (False: bytes only, for searches)
    first: bool
    last: bool
    layers: int  # layers of this stage
    layout: Layout  # the model cut over the plan's ranks
    sp: StageParams
    bc: int  # bytes of the activation (compute) dtype
    autocast: bool
    lora: bool
    accum: int  # micro-batches per step
    in_flight: float
    tokens: int  # T: tokens of one micro-batch on this GPU (sequence split over context ranks)
    seq_div: int  # sequence parallelism splits the replicated activations over tensor ranks
    shard: int  # ZeRO/FSDP shard over data × context ranks, as Megatron and torchtitan do
    edp: int  # expert-data-parallel ranks: ZeRO shards the experts over these
    shard_note: str
    unsharded_grads: bool  # FSDP under pipelining: gradients accumulate unsharded until the step's reduction
    unsharded_from: str  # FSDP under pipelining: "forward" or "backward", the moment from which the stage's
    #                      parameters stay unsharded until the reduction; "" when they are resharded as used

    def sharded(self, term: Term, expert_bytes: int, on: bool) -> Term:
        """`term` ZeRO-sharded over this stage's ranks if `on` (its `expert_bytes` over the expert ranks)."""
        return Sharded(term, self.shard, expert_bytes, self.edp, self.shard_note) if on else term


def stage_context(plan: Plan, lay: Layout, index: int, detail: bool) -> StageContext:
    """Stage `index` of `plan`, whose model cut is `lay`."""
    wl, par = plan.workload, plan.parallelism
    shard = par.data * par.context
    note = f" ÷ {shard} (ZeRO-{par.zero_stage} over data × context)" + (
        f"; experts ÷ {shard // par.expert} (the ranks beside each expert-parallel group)" if par.expert > 1 else ""
    )
    unsharded_grads, unsharded_from = unsharded_under_pipelining(plan)
    return StageContext(
        plan=plan,
        index=index,
        detail=detail,
        first=index == 0,
        last=index == par.pipeline - 1,
        layers=lay.split[index],
        layout=lay,
        sp=lay.stages[index],
        bc=nbytes(plan.precision.activation_dtype),
        autocast=autocast(plan),
        lora=wl.task in ("lora", "qlora"),
        accum=plan.micro_batches_per_step,
        in_flight=in_flight(plan, index),
        tokens=wl.sequences_per_forward * wl.sequence_length // par.context,
        seq_div=par.tensor if par.sequence_parallel else 1,
        shard=shard,
        edp=shard // par.expert,
        shard_note=note,
        unsharded_grads=unsharded_grads,
        unsharded_from=unsharded_from,
    )
