"""GRPO's rollout engine (workload.objective grpo): a vLLM engine that samples the completions, colocated on the
training GPUs or on its own. Colocated, a GPU holds two phases that do not peak together: the rollout (the
engine awake: its weights, its KV cache at its memory fraction, beside the policy's resident states) and the
policy's training step on the completions (beside what the sleeping engine still holds). Between them TRL empties
PyTorch's cache before it wakes the engine (huggingface/trl@f2cd577 trl/generation/vllm_generation.py
sync_weights and generate: `empty_cache()  # required to avoid OOM in some cases`, then `llm.wake_up`), and verl
likewise (volcengine/verl@b178a3c verl/workers/fsdp_workers.py rollout_mode: `aggressive_empty_cache`), so the
training step's cached blocks are not kept through the rollout."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from planner.catalog import Gpu
from planner.memory.inference import inference_estimate
from planner.memory.layout import StageContext
from planner.memory.result import Estimate, Item
from planner.memory.runtime import runtime_items
from planner.memory.terms import Described, item
from planner.plan.config import RL_OBJECTIVES, Inference, Parallelism, Plan, Precision, Rl, Workload
from planner.plan.dtypes import WeightDType

# what vLLM's sleep keeps on the GPU: CuMemAllocator.sleep unmaps only the memory allocated in its pool under the
# "weights" and "kv_cache" tags (vllm-project/vllm vllm/device_allocator/cumem.py sleep: offload_tags "weights" at
# level 1, none at level 2; vllm/v1/worker/gpu_worker.py load_model and initialize_from_config allocate under
# those tags); the CUDA graphs' pool and the custom all-reduce's IPC buffers are allocated outside it
_KEPT_ASLEEP = ("cuda_graphs", "custom_all_reduce")
# TRL builds the colocated LLM with max_num_batched_tokens=4096 (trl@f2cd577 vllm_generation.py: "Latest vLLM v1
# memory profiler is misled by the high default value")
_TRL_BATCHED_TOKENS = 4096


@dataclass(frozen=True, kw_only=True)
class Engine:
    """A colocated engine on one training GPU: what it holds awake and asleep, and what its sleep put on the host."""

    awake: tuple[Item, ...]
    asleep: tuple[Item, ...]
    host_bytes: int


def engine_batch(plan: Plan, rl: Rl, count: int) -> int:
    """Completions one engine replica generates per step: a colocated engine serves its tensor-parallel group's
    ranks (trl@f2cd577 vllm_generation.py generate: prompts all-gathered over the TP group), global_batch / GPUs
    each; a server's replicas share the step's prompts, each with its G completions (trl@f2cd577
    trl/scripts/vllm_serve.py generate: `chunk_list(prompts, data_parallel_size)`, the largest chunk
    ⌈prompts / replicas⌉). `rl` and `count`: the engine's layout and the training GPUs (the plan's, or a probe's)."""
    wl = plan.workload
    samples = wl.rollout_samples
    if rl.engine == "server":
        prompts = samples // rl.num_generations
        return -(-prompts // rl.engine_replicas) * rl.num_generations
    return samples * rl.tensor_parallel // count


def rollout_wave(plan: Plan, gpu: Gpu, rl: Rl | None = None, count: int | None = None) -> tuple[Plan, int, int]:
    """(the engine's serving plan at one wave: the completions its KV cache holds at once, at least one; the waves
    of the replica's batch; the completions its KV cache holds). vLLM runs what its KV blocks hold and queues the
    rest. `rl` and `count` probe another engine layout and training GPU count than the plan's (the recommender)."""
    return _wave(rollout_plan(plan, rl, count), gpu)


# keyed by the serving plan and GPU: every strategy of a plan shares its engine (the recommender's searches)
@lru_cache(maxsize=256)
def _wave(rp: Plan, gpu: Gpu) -> tuple[Plan, int, int]:
    inf = rp.workload.inference
    fits = _serving(rp, gpu, False).served.max_concurrent_sequences
    wave = max(1, min(inf.batch_size, fits))
    one = replace(rp, workload=replace(rp.workload, inference=replace(inf, batch_size=wave)))
    return one, -(-inf.batch_size // wave), fits


@lru_cache(maxsize=256)
def _serving(rp: Plan, gpu: Gpu, detail: bool) -> Estimate:
    return inference_estimate(rp, gpu, detail)


def engine_gpu(plan: Plan, gpu: Gpu, detail: bool) -> Estimate | None:
    """One GPU of a server engine (workload.rl.engine server), a GPU like the trainer's: the serving plan's
    estimate at one wave, so it fits where one completion's KV cache does beside the weights within vLLM's
    fraction. None unless a grpo plan's engine is a server."""
    wl = plan.workload
    if wl.objective not in RL_OBJECTIVES or wl.rl.engine != "server":
        return None
    return _serving(rollout_wave(plan, gpu)[0], gpu, detail)


def rollout_plan(plan: Plan, rl: Rl | None = None, count: int | None = None) -> Plan:
    """The engine as a serving plan: the policy's model in its compute dtype (a QLoRA policy's base as vLLM's
    bitsandbytes NF4: trl@f2cd577 vllm_generation.py `quantization = "bitsandbytes"`), TP workload.rl.tensor_parallel,
    the step's completions as one batch (TRL sets max_num_seqs to them) of prompt + completion tokens (`rl`,
    `count`: see rollout_wave)."""
    wl, prec = plan.workload, plan.precision
    rl = rl or wl.rl
    batch = engine_batch(plan, rl, count or plan.hardware.count)
    colocated = rl.engine == "colocate"
    inference = Inference(
        batch_size=batch,
        prompt_tokens=wl.sequence_length - rl.completion_length,
        output_tokens=rl.completion_length,
        # a server: vLLM's own default fraction 0.9 (vllm/engine/arg_utils.py EngineArgs.gpu_memory_utilization)
        gpu_memory_utilization=rl.gpu_memory_utilization if colocated else 0.9,
        prefill_chunk_tokens=_TRL_BATCHED_TOKENS if colocated else None,
        max_num_seqs=batch,
    )
    weights: WeightDType = prec.weights if wl.task == "qlora" else prec.activation_dtype
    return Plan(
        model=plan.model,
        workload=Workload(task="inference", sequence_length=wl.sequence_length, inference=inference),
        precision=Precision(compute=prec.activation_dtype, master_weights="none", weights=weights),
        parallelism=Parallelism(tensor=rl.tensor_parallel),
        hardware=replace(plan.hardware, count=rl.tensor_parallel),
        framework="vllm",
    )


def engine(plan: Plan, gpu: Gpu, detail: bool) -> Engine | None:
    """The colocated engine's items on one GPU: its serving estimate at its fraction and one wave of completions
    (what its KV cache holds at once; the rest wait their turn), less the runtime the training
    process already holds (CUDA context, NCCL, cuBLAS: one process). The preallocated KV blocks are live memory to
    the trainer (vLLM allocates the whole pool as one tensor), so every item counts as allocated. None unless a
    grpo plan's engine is colocated."""
    wl = plan.workload
    if wl.objective not in RL_OBJECTIVES or wl.rl.engine != "colocate":
        return None
    # vLLM runs what its KV blocks hold within its fraction and queues the rest: the engine at one wave, as a
    # server's (engine_gpu) and as the rollout's time (planner/perf/training.py rollout_time)
    serving = rollout_wave(plan, gpu)[0]
    # one process: the trainer's cuBLAS handles serve the engine too
    shared = {i.name for i in runtime_items(serving, False)} | {"cublas_workspace"}
    own = [i for i in _serving(serving, gpu, detail).items if i.name not in shared]
    awake = tuple(
        replace(i, name=f"engine_{i.name}", label=f"Engine: {i.label}", level="allocated") for i in own if i.bytes
    )
    level = wl.rl.sleep_level
    asleep = awake if level == 0 else tuple(i for i in awake if i.name.removeprefix("engine_") in _KEPT_ASLEEP)
    weights = sum(i.bytes for i in awake if i.name == "engine_weights")
    return Engine(awake=awake, asleep=asleep, host_bytes=weights if level == 1 else 0)


def weight_sync(ctx: StageContext) -> Item | None:
    """The gathered copy of one parameter while the policy's weights are loaded into the engine: a sharded policy
    (ZeRO-3 / FSDP) is gathered tensor by tensor (trl@f2cd577 vllm_generation.py _sync_fsdp2_params_to_vllm:
    `full_param = param.full_tensor()` per parameter; DeepSpeed `GatheredParameters` per module), bounded here by
    the largest projection matrix in the compute dtype. None when the policy is not sharded (its tensors are
    copied in place)."""
    if ctx.plan.parallelism.zero_stage != 3:
        return None
    term = Described(
        ctx.sp.largest_matrix * ctx.bc,
        "largest matrix {:,} params × {} B",
        (ctx.sp.largest_matrix, ctx.bc),
    )
    return item(
        "weight_sync",
        "Weight-sync buffer",
        term,
        "One policy parameter gathered whole to load into the engine",
        ctx.detail,
    )
