"""The recommender's question for GRPO (planner/search/rollout.py): colocated or split, worked on two real models at
8 H100s (the count, GPU and offering kept, so the search answers the layout alone), and invariants over what it
recommends. Steps: 100 of the plan's global batch."""

from dataclasses import replace

import pytest

from planner.catalog import load_catalog
from planner.memory.rollout import rollout_plan
from planner.perf import job_time, rollout_time, step_time
from planner.plan.codec import plan_from_dict
from planner.search.recommend import SearchOptions, recommend
from planner.search.rollout import FRACTIONS, RolloutSearch, server
from planner.search.strategies import Limits

CATALOG = load_catalog()
H100 = CATALOG["h100-sxm-80gb"]
KEPT = frozenset({"gpu", "offering", "count"})
LIMITS = Limits(int(H100.usable_bytes * 0.9), 10**13)


def grpo(preset, seq, completion, batch, rl=None, count=8, task="finetune"):
    return plan_from_dict(
        {
            "model": {"preset": preset},
            "workload": {
                "task": task,
                "objective": "grpo",
                "sequence_length": seq,
                "micro_batch_size": 8,
                "global_batch_size": batch,
                "steps": 100,
                "rl": {"completion_length": completion, **(rl or {})},
            },
            "hardware": {"gpu": "h100-sxm-80gb", "count": count},
        }
    )


def best(plan, fixed=KEPT):
    return recommend(plan, CATALOG, SearchOptions(fixed=fixed, deadline_hours=None)).best


def seconds_per_step(plan):
    return job_time(plan, H100, plan.job_tokens)[0] * 3600 / plan.workload.steps


def test_small_model_prefers_colocate():
    """Qwen2.5 0.5B, 64 completions (8 prompts × G 8) of 512 + 1024 tokens a step. Colocated on all 8 GPUs, each
    engine generates 64 / 8 = 8 completions, then all 8 train. The split 4 + 4 (the only split the batch
    divides: 64 is not a multiple of 7 or 6 training ranks × micro-batch) gives each of its 4 replicas 2 prompts
    = 16 completions, twice the colocated engine's, and trains on half the GPUs, one after the other: both terms
    grow, so colocating is faster on the same 8 GPUs, and cheaper."""
    plan = grpo("qwen2.5-0.5b", 1536, 1024, 64)
    chosen = best(plan)
    assert chosen.plan.workload.rl == plan.workload.rl  # TRL's defaults: 0.3 of the GPU, no sleep, TP 1
    assert chosen.count == chosen.plan.hardware.count == 8
    assert rollout_plan(chosen.plan).workload.inference.batch_size == 8
    rs = RolloutSearch(plan, CATALOG, KEPT)
    splits = [(rl, n) for rl, n in rs.layouts(H100, 8) if rl.engine == "server" and rl.tensor_parallel == 1]
    timed = {n: rs.timed(H100, rl, n, LIMITS, plan.job_tokens, None) for rl, n in splits}
    assert timed[7] is None and timed[6] is None  # no layout: 64 completions over 7 or 6 ranks
    split = timed[4].estimate.plan
    assert rollout_plan(split).workload.inference.batch_size == 16
    # the split's step: its training step on 4 GPUs, then its rollout (the trainer waits: TRL server mode)
    train = step_time(split, H100).step_time_s - rollout_time(split, H100).seconds
    assert seconds_per_step(split) == pytest.approx(train + rollout_time(split, H100).seconds)
    assert train > step_time(chosen.plan, H100).step_time_s - rollout_time(chosen.plan, H100).seconds
    assert rollout_time(split, H100).seconds > rollout_time(chosen.plan, H100).seconds
    assert chosen.job_hours < timed[4].hours


def test_async_split_is_cheaper_than_any_colocated_layout():
    """Qwen2.5 7B with verl-style one-step-off rollouts (async_rollout), 256 completions (32 prompts × G 8) of
    1024 + 3072 tokens. Colocated, generation and training alternate on the 8 GPUs; split 4 + 4, the engine
    generates the next step's completions while 4 GPUs train, so a step takes the longer of the two, not their
    sum: here the rollout, on one TP-4 replica of all 256 completions."""
    plan = grpo(
        "qwen2.5-7b", 4096, 3072, 256, rl={"engine": "server", "async_rollout": True, "engine_gpus": 4}, count=4
    )
    chosen = best(plan)
    rl = chosen.plan.workload.rl
    assert (rl.engine, rl.async_rollout, chosen.plan.hardware.count, rl.engine_gpus) == ("server", True, 4, 4)
    assert chosen.count == 8 and chosen.paid_gpus == 8
    ro = rollout_time(chosen.plan, H100)
    train = step_time(chosen.plan, H100).step_time_s - step_time(chosen.plan, H100).items[-1].seconds
    assert ro.seconds > train  # the rollout binds: the training hides behind it
    assert chosen.job_hours == pytest.approx(100 * ro.seconds / 3600)
    rs = RolloutSearch(plan, CATALOG, KEPT)
    colocated = [rs.timed(H100, x, n, LIMITS, plan.job_tokens, None) for x, n in rs.layouts(H100, 8)]
    colocated = [f for (x, _), f in zip(rs.layouts(H100, 8), colocated, strict=True) if x.engine == "colocate" and f]
    assert colocated and min(f.hours for f in colocated) > chosen.job_hours
    assert "4 training + 4 engine GPUs (1 × TP 4, async)" in chosen.strategy


def test_sleeps_deeper_only_where_the_engine_slows_the_step():
    """Llama 3.1 8B on 4 GPUs: awake through the step, the engine's 30 % leaves the policy a slower strategy than
    with no engine; asleep (level 2) it frees that memory for the step, which is faster. On 8 GPUs of Qwen2.5 0.5B
    the engine slows nothing: the plan's own level (0) stays."""
    plan = grpo("llama-3.1-8b", 2048, 1024, 64, count=4)
    chosen = best(plan)
    rl = chosen.plan.workload.rl
    assert rl.engine == "colocate" and rl.sleep_level == 2
    rs = RolloutSearch(plan, CATALOG, KEPT)
    awake = rs.timed(H100, replace(rl, sleep_level=0), 4, LIMITS, plan.job_tokens, None)
    assert awake is None or awake.hours > chosen.job_hours


def test_kept_rollout_keeps_the_plans_layout():
    plan = grpo("qwen2.5-0.5b", 1536, 1024, 64, rl={"engine": "server", "engine_gpus": 4}, count=4)
    chosen = best(plan, KEPT | {"rollout"})
    assert chosen.plan.workload.rl == plan.workload.rl and chosen.count == 8 and chosen.plan.hardware.count == 4


def test_layouts_searched():
    """At 8 GPUs: each fraction (the plan's own and FRACTIONS) at the plan's sleep level and 2, at every TP that
    holds a completion and divides 8; splits of M = TP × 1, 2, 4 … below 8."""
    plan = grpo("qwen2.5-0.5b", 1536, 1024, 64)
    rs = RolloutSearch(plan, CATALOG, frozenset())
    layouts = rs.layouts(H100, 8)
    assert layouts[0] == (plan.workload.rl, 8)  # the plan's own first: it wins ties
    placed = {
        (x.gpu_memory_utilization, x.sleep_level, x.tensor_parallel) for x, _ in layouts if x.engine == "colocate"
    }
    assert {f for f, _, _ in placed} == set(FRACTIONS) and {s for _, s, _ in placed} == {0, 2}
    split = sorted((x.tensor_parallel, x.engine_gpus, n) for x, n in layouts if x.engine == "server")
    assert split[:3] == [(1, 1, 7), (1, 2, 6), (1, 4, 4)]
    assert all(
        x == server(plan.workload.rl, x.tensor_parallel, x.engine_gpus) for x, _ in layouts if x.engine == "server"
    )


@pytest.mark.parametrize(
    ("preset", "seq", "completion", "batch", "rl"),
    [
        ("qwen2.5-0.5b", 1536, 1024, 64, {}),
        ("qwen2.5-7b", 4096, 3072, 256, {"engine": "server", "async_rollout": True}),
        ("llama-3.1-8b", 2048, 1024, 128, {"sleep_level": 1}),
    ],
)
def test_invariants(preset, seq, completion, batch, rl):
    """Every recommended layout fits in each phase (the training GPUs' and a server engine's); its GPUs are the
    training GPUs and the engine's; its job time is the time model's for its plan; no layout's bound is above
    its time (what stopping at the first bound no better than the fastest relies on)."""
    plan = grpo(preset, seq, completion, batch, rl)
    gpus = ("h100-sxm-80gb", "a100-40gb", "l4-24gb")
    rec = recommend(plan, CATALOG, SearchOptions(gpus=gpus, deadline_hours=None))
    assert rec.candidates
    for c in rec.candidates:
        est = c.estimate
        assert c.count == c.plan.total_gpus == c.plan.hardware.count + c.plan.workload.rl.engine_gpus
        assert est.fits and all(ph.allocated_bytes <= est.usable_bytes for s in est.stages for ph in s.phases)
        assert (est.engine is None) == (c.plan.workload.rl.engine == "colocate")
        assert est.engine is None or est.engine.device_bytes <= est.engine.usable_bytes
        assert c.job_hours == pytest.approx(job_time(c.plan, c.gpu, rec.job_tokens)[0])
    rs = RolloutSearch(plan, CATALOG, frozenset())
    for x, n in rs.layouts(H100, 8):
        found = rs.timed(H100, x, n, LIMITS, rec.job_tokens, None)
        assert found is None or rs.bound(H100, x, n, LIMITS, rec.job_tokens, None) <= found.hours * (1 + 1e-9)


def test_kept_server_that_cannot_hold_its_weights_is_no_candidate():
    """Llama 3.1 8B in bf16 on a T4 server engine of TP 1: the training GPUs hold their LoRA share, the engine's
    0.9 of a T4 not its 16.1 GB of weights, so the plan's own layout is no candidate."""
    plan = plan_from_dict(
        {
            "model": {"preset": "llama-3.1-8b"},
            "workload": {
                "task": "lora",
                "objective": "grpo",
                "sequence_length": 1024,
                "rl": {"completion_length": 512, "engine": "server"},
            },
            "precision": {"compute": "fp16"},
            "parallelism": {"data": 8, "zero_stage": 3},
            "hardware": {"gpu": "t4-16gb", "count": 8},
        }
    )
    assert best(plan, KEPT | {"rollout"}) is None


# --- PPO: the same question, its rollout shared by epochs × mini-batches optimizer steps --------------------------
def ppo(rl=None, ppo_keys=None, count=8):
    return plan_from_dict(
        {
            "model": {"preset": "qwen2.5-0.5b"},
            "workload": {
                "task": "finetune",
                "objective": "ppo",
                "sequence_length": 1536,
                "micro_batch_size": 8,
                "global_batch_size": 64,
                "steps": 100,
                "rl": {"completion_length": 1024, "num_generations": 1, **(rl or {})},
                "ppo": {"epochs": 1, "mini_batches": 1, **(ppo_keys or {})},
            },
            "hardware": {"gpu": "h100-sxm-80gb", "count": count},
        }
    )


def test_ppo_engine_layouts_are_searched_and_timed_like_the_plans():
    """OpenRLHF-style PPO (a vLLM engine) on 8 H100s: the layouts are GRPO's; the pick's time is the plan's own."""
    plan = ppo()
    chosen = best(plan)
    assert chosen.plan.workload.objective == "ppo" and chosen.plan.workload.rl.engine in ("colocate", "server")
    assert chosen.job_hours == pytest.approx(job_time(chosen.plan, H100, plan.job_tokens)[0])
    assert "engine" in chosen.strategy  # the layout is said (rollout_text)
    rs = RolloutSearch(plan, CATALOG, KEPT)
    assert {rl.engine for rl, _ in rs.layouts(H100, 8)} == {"colocate", "server"}


def test_ppo_rollout_hours_are_shared_by_its_optimizer_steps():
    """Two epochs over two mini-batches: one rollout (of 2 × 64 completions) feeds 4 optimizer steps of 64 × 1,536
    tokens, so each step carries a quarter of it (planner/perf/training.py _rollout_item)."""
    once, shared = ppo(), ppo(ppo_keys={"epochs": 2, "mini_batches": 2})
    rl, tokens = once.workload.rl, 10**9
    for plan, steps_per_rollout in ((once, 1), (shared, 4)):
        hours = RolloutSearch(plan, CATALOG, KEPT)._rollout_hours(H100, rl, 8, tokens, None)
        rollout_s = rollout_time(plan, H100, rl, 8).seconds
        assert hours == pytest.approx(tokens / (64 * 1536) / steps_per_rollout * rollout_s / 3600)


def test_ppo_with_the_policys_own_generate_has_no_engine_to_place():
    plan = ppo(rl={"engine": "generate"})
    chosen = best(plan)
    assert chosen.plan.workload.rl == plan.workload.rl and "engine" not in chosen.strategy
