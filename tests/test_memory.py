"""Golden values worked out by hand on TINY (conftest), plus invariants over generated plans."""

import pytest
from conftest import TINY
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from planner.catalog import load_catalog
from planner.errors import PlanError
from planner.memory import CUBLAS_WORKSPACE_BYTES, estimate
from planner.memory.activations import layer_acts
from planner.plan.codec import plan_from_dict

P = 202_048  # TINY's parameters (test_models.py)
T = 64  # tokens: micro-batch 2 × sequence 32
WS = CUBLAS_WORKSPACE_BYTES


def tiny(**sections):
    sections.setdefault("workload", {"sequence_length": 32, "micro_batch_size": 2})
    return plan_from_dict({"model": TINY, **sections})


PURE = {"compute": "bf16", "master_weights": "none"}


def items(est):
    return {i.name: i.bytes for i in est.items}


def phase(est, name, stage=0):
    return next(ph for ph in est.stages[stage].phases if ph.name == name)


def test_the_moments_read_in_the_order_backward_reaches_them():
    """Issue 17: backward starts at the stage's last layer, so its moment comes before the first layer's."""
    names = [ph.name for ph in estimate(tiny(precision=PURE)).stages[0].phases]
    assert names == [
        "forward",
        "loss backward",
        "output head backward",
        "backward of the last layer",
        "backward of the first layer",
        "embedding backward",
        "optimizer step",
    ]


def test_pure_bf16_golden_values():
    est = estimate(tiny(precision=PURE))
    # per layer per token: norms 2 × (4 + 2 + 2) × 64 = 1024; attention 2 × (2×64 + 2×32) + 4 × 4 heads = 400;
    # SwiGLU 4 × 2 × 128 = 1024  →  2448 B/token; final norm (4 + 2 + 2) × 64 = 512 B/token
    acts = 2 * 2448 * T + 512 * T
    assert acts == 346_112
    got = items(est)
    assert got["weights"] == 2 * P and got["optimizer_states"] == 2 * 2 * P and got["activations"] == acts
    assert got["logits_loss"] == 12 * T * 1000  # loss backward: three fp32 T×V buffers
    assert est.phase == "loss backward"
    assert est.peak_allocated_bytes == 2 * P + 4 * P + WS + acts + 12 * T * 1000 == 69_435_264
    assert phase(est, "forward").allocated_bytes == 2 * P + 4 * P + WS + acts + (2 + 4 + 4) * T * 1000
    # layer backward: half the SwiGLU (2 × 2 B × 128) + 2 × 2 B × 64 per token; on the first micro-batch the
    # last layer's bf16 gradients (36,992 params) are the first .grad produced
    assert phase(est, "backward of the last layer").allocated_bytes == 6 * P + WS + acts + (512 + 256) * T + 2 * 36_992
    assert phase(est, "backward of the first layer").allocated_bytes == 8 * P + WS + 2448 * T + 768 * T
    # output head: gradient of the bf16 logits, and the head's 64,000 new bf16 gradients
    assert phase(est, "output head backward").allocated_bytes == 6 * P + WS + acts + 2 * T * 1000 + 2 * 64_000
    assert phase(est, "embedding backward").allocated_bytes == 8 * P + WS  # its gradient becomes .grad itself
    assert phase(est, "optimizer step").allocated_bytes == 2 * P + 4 * P + WS + 2 * P + 2 * P  # + sqrt temp


def test_items_add_up_to_the_three_totals():
    est = estimate(tiny(parallelism={"data": 2, "tensor": 2}))
    by_level = {lvl: sum(i.bytes for i in est.items if i.level == lvl) for lvl in ("allocated", "reserved", "device")}
    assert by_level["allocated"] == est.peak_allocated_bytes
    assert by_level["allocated"] + by_level["reserved"] == est.peak_reserved_bytes
    assert est.peak_reserved_bytes + by_level["device"] == est.device_bytes
    assert all(i.formula and i.note for i in est.items)


@pytest.mark.parametrize(
    "parallelism, runtime_mib",
    [
        ({}, 512),  # one GPU: the CUDA context only, no communicator
        ({"data": 8, "zero_stage": 3}, 512 + 512),  # FSDP over 8: the context + one data communicator
        ({"data": 2, "tensor": 2, "pipeline": 2}, 512 + 3 * 512),  # 8 GPUs: data, tensor and pipeline communicators
    ],
)
def test_device_adds_the_cuda_context_and_nccl_to_reserved(parallelism, runtime_mib):
    # nvidia-smi's figure is the allocator's reserve plus what lives outside it: 512 MiB of CUDA context and
    # 512 MiB per NCCL communicator (a regression once dropped both from every plan without async TP)
    est = estimate(tiny(parallelism=parallelism))
    assert est.device_bytes - est.peak_reserved_bytes == runtime_mib * 2**20 == est.runtime_bytes
    assert {i.name for i in est.items if i.level == "device"} == {"cuda_context", "nccl"}


def test_tensor_and_sequence_parallel_split_activations():
    def acts(**par):
        return items(estimate(tiny(precision=PURE, parallelism=par)))["activations"]

    # per layer per token on each of 2 ranks: norms 1024 (replicated), attention 2 × (2×32 + 2×16) + 4 × 2 = 200,
    # SwiGLU 4 × 2 × 64 = 512; final norm 512. Sequence parallelism splits the norms too.
    assert acts(tensor=2) == 2 * T * (1024 + 200 + 512) + 512 * T
    assert acts(tensor=2, sequence_parallel=True) == 2 * T * (512 + 200 + 512) + 256 * T


def test_context_parallel_splits_tokens():
    def acts(**par):
        fwd = phase(estimate(tiny(precision=PURE, parallelism=par)), "forward")
        return next(i.bytes for i in fwd.items if i.name == "activations")

    assert acts(context=2) == acts() // 2


def test_autocast_keeps_fp32_params_and_16bit_casts():
    got = {i.name: i.bytes for i in phase(estimate(tiny()), "forward").items}
    matmul = 2 * (12_288 + 24_576) + 64_000  # layers' linears + the output head
    assert got["weights"] == 4 * P and got["master_weights"] == 0 and got["weight_casts"] == 2 * matmul


def test_zero_stages_shard_what_they_promise():
    def states(z):
        return items(estimate(tiny(parallelism={"data": 4, "zero_stage": z})))

    assert states(0)["optimizer_states"] == 8 * P and states(0)["ddp_buckets"] == 4 * P
    assert states(1)["optimizer_states"] == 8 * P // 4 and states(1)["master_weights"] == 4 * P // 4
    assert states(1)["weights"] == 2 * P  # persistent 16-bit copy
    assert states(3)["weights"] == 4 * P // 4  # fp32 shards are the master


def test_pipeline_first_stage_holds_in_flight_micro_batches():
    est = estimate(
        tiny(
            parallelism={"pipeline": 2}, workload={"sequence_length": 32, "micro_batch_size": 1, "global_batch_size": 8}
        )
    )
    first, last = est.stages
    assert first.micro_batches_in_flight == 2 and last.micro_batches_in_flight == 1
    assert "loss backward" in [ph.name for ph in last.phases]
    assert "loss backward" not in [ph.name for ph in first.phases]


def test_full_checkpointing_keeps_layer_inputs_only():
    got = items(estimate(tiny(precision=PURE, techniques={"activation_checkpointing": "full"})))
    assert got["activations"] == 2 * T * 2 * 64 + 512 * T


def test_eager_attention_adds_scores():
    flash = items(estimate(tiny(precision=PURE)))["activations"]
    eager = items(estimate(tiny(precision=PURE, techniques={"attention": "eager"})))["activations"]
    # per layer per token: +4 heads × 32 keys × (4 + 2) and q-sized copies (4×2×64 vs 2×(2×64+2×32)+16);
    # once per forward, the 2 × 32 × 32 bf16 causal mask
    assert eager - flash == 2 * T * (4 * 32 * 6 + 4 * 2 * 64 - 400) + 2 * 32 * 32 * 2


def test_offload_moves_states_to_host():
    est = estimate(tiny(parallelism={"data": 2, "zero_stage": 3}, techniques={"offload": "optimizer"}))
    got = items(est)
    assert got["optimizer_states"] == 0 and got["gradients"] == 0
    assert est.host_bytes == -(-P * (4 + 4 + 8) // 2)


def test_unknown_gpu_is_a_plan_error():
    with pytest.raises(PlanError, match=r"^hardware.gpu: 'tpu' is not in the GPU catalog; known: h100-sxm-80gb"):
        estimate(tiny(hardware={"gpu": "tpu"}))


def test_fits_and_reason():
    est = estimate(tiny())
    assert est.fits and est.headroom_bytes > 0 and est.reason.startswith("fits on NVIDIA H100 SXM 80GB ×1")
    big = estimate(plan_from_dict({"model": {"preset": "llama-3.1-70b"}, "hardware": {"gpu": "rtx-4090-24gb"}}))
    assert not big.fits and "does not fit on NVIDIA GeForce RTX 4090 ×1" in big.reason


def test_reproduces_oracle_llama_8b():
    # PyTorch MemTracker on HF Llama-3-8B code (shared oracle, results.csv: train, s4096 b4, AMP bf16, sdpa,
    # foreach AdamW): 245.90 GiB at _log_softmax_backward_data; s512 b1: 149.57 GiB at _foreach_sqrt.
    def peak(s, b):
        est = estimate(
            plan_from_dict(
                {"model": {"preset": "llama-3.1-8b"}, "workload": {"sequence_length": s, "micro_batch_size": b}}
            )
        )
        return (est.peak_allocated_bytes - WS) / 2**30, est.phase

    assert peak(4096, 4)[0] == pytest.approx(245.90, rel=0.005) and peak(4096, 4)[1] == "loss backward"
    assert peak(512, 1)[0] == pytest.approx(149.57, rel=0.005) and peak(512, 1)[1] == "optimizer step"


# --- invariants over generated plans ---------------------------------------------------------------------
@st.composite
def plans(draw):
    heads = draw(st.sampled_from([4, 8, 16]))
    model = {
        "num_layers": draw(st.sampled_from([2, 4, 8, 16])),
        "hidden_size": heads * draw(st.sampled_from([16, 32])),
        "num_attention_heads": heads,
        "num_kv_heads": draw(st.sampled_from([1, 2, 4])),
        "intermediate_size": draw(st.sampled_from([64, 256])),
        "vocab_size": draw(st.integers(100, 5000)),
        "mlp": draw(st.sampled_from(["swiglu", "gelu"])),
        "norm": draw(st.sampled_from(["rmsnorm", "layernorm"])),
        "tie_embeddings": draw(st.booleans()),
        "bias": draw(st.booleans()),
    }
    tensor = draw(st.sampled_from([1, 2, 4]))
    return {
        "model": model,
        "workload": {
            "sequence_length": draw(st.sampled_from([64, 256, 1024])),
            "micro_batch_size": draw(st.integers(1, 4)),
        },
        "precision": {
            "compute": draw(st.sampled_from(["bf16", "fp16", "fp32"])),
            "master_weights": draw(st.sampled_from(["fp32", "none"])),
            "optimizer": draw(st.sampled_from(["adamw", "sgd", "sgd_momentum"])),
            "optimizer_impl": draw(st.sampled_from(["foreach", "fused", "forloop"])),
        },
        "techniques": {
            "activation_checkpointing": draw(st.sampled_from(["none", "selective", "full"])),
            "attention": draw(st.sampled_from(["flash", "eager"])),
        },
        "parallelism": {
            "data": draw(st.sampled_from([1, 2, 8])),
            "zero_stage": draw(st.integers(0, 3)),
            "tensor": tensor,
            "sequence_parallel": tensor > 1 and draw(st.booleans()),
            "pipeline": draw(st.sampled_from([1, 2])),
            "context": draw(st.sampled_from([1, 2])),
        },
    }


def _with(d, section, **changes):
    return {**d, section: {**d[section], **changes}}


@settings(max_examples=150, deadline=None)
@given(plans())
def test_valid_plans_never_raise_and_items_add_up(d):
    est = estimate(plan_from_dict(d))
    assert all(i.bytes >= 0 for i in est.items)
    assert sum(i.bytes for i in est.items if i.level == "allocated") == est.peak_allocated_bytes
    assert est.peak_allocated_bytes <= est.peak_reserved_bytes <= est.device_bytes


@settings(max_examples=150, deadline=None)
@given(plans())
def test_more_batch_or_sequence_never_needs_less(d):
    base = estimate(plan_from_dict(d)).device_bytes
    wl = d["workload"]
    more_batch = _with(d, "workload", micro_batch_size=wl["micro_batch_size"] + 1)
    longer = _with(d, "workload", sequence_length=wl["sequence_length"] * 2)
    assert estimate(plan_from_dict(more_batch)).device_bytes >= base
    assert estimate(plan_from_dict(longer)).device_bytes >= base


def _few_units(d):
    """A stage with under 8 layers, or one dominated by its embedding table: ZeRO-3's two gathered units are
    then most of the stage, so sharding cannot pay for them."""
    m = d["model"]
    layers = m["num_layers"] // d["parallelism"]["pipeline"]
    layer = 4 * m["hidden_size"] ** 2 + 3 * m["hidden_size"] * m["intermediate_size"]
    return layers < 8 or m["vocab_size"] * m["hidden_size"] * 2 > layers * layer


@st.composite
def shardable_plans(draw):
    """Plans in the scope of the ZeRO comparison, physically: more than one rank to shard over, 8 or more layers
    a stage (ZeRO-3 gathers whole units, so a stage of few units cannot pay for them), and ZeRO 0 only without
    fp32 masters (with them, stage 0 → 1 changes recipe: autocast → ZeRO's persistent 16-bit copy)."""
    d = draw(plans())
    d = _with(_with(d, "model", num_layers=16), "parallelism", data=draw(st.sampled_from([2, 8])))
    prec = d["precision"]
    mixed = prec["master_weights"] == "fp32" and prec["compute"] != "fp32"
    return _with(d, "parallelism", zero_stage=draw(st.integers(1 if mixed else 0, 2)))


@settings(max_examples=150, deadline=None)
@given(shardable_plans())
def test_higher_zero_stage_never_needs_more_per_gpu(d):
    assume(not _few_units(d))  # a model dominated by its embedding table can cost more under ZeRO-3
    z = d["parallelism"]["zero_stage"]
    # FSDP under pipelining keeps every unit gathered beside its shard once backward starts (layout.py
    # unsharded_under_pipelining): ZeRO-3's shards then come on top of a whole 16-bit copy, as ZeRO-2 holds
    assume(not (z == 2 and d["parallelism"]["pipeline"] > 1))
    lower = estimate(plan_from_dict(d))
    higher = estimate(plan_from_dict(_with(d, "parallelism", zero_stage=z + 1)))
    assert higher.peak_allocated_bytes <= lower.peak_allocated_bytes
    # ZeRO-3's gather buffers come and go each layer: the caching allocator's reserve for that churn may grow by
    # more than a tiny model's sharding saves (317 B on a 16-layer, 256-wide model), never by more than it grows
    reserve = {e: next(i.bytes for i in e.items if i.name == "allocator_reserve") for e in (lower, higher)}
    assert higher.device_bytes <= lower.device_bytes + max(0, reserve[higher] - reserve[lower])


@settings(max_examples=100, deadline=None)
@given(plans())
def test_more_gpus_under_zero3_never_need_more(d):
    # from 2 data ranks on: going from 1 to 2 GPUs adds an NCCL communicator, which is real memory
    d = _with(d, "parallelism", zero_stage=3, data=2 * d["parallelism"]["data"])
    fewer = estimate(plan_from_dict(d)).device_bytes
    more = estimate(plan_from_dict(_with(d, "parallelism", data=d["parallelism"]["data"] * 2))).device_bytes
    assert more <= fewer


def test_catalog_argument_is_used():
    catalog = load_catalog()
    assert estimate(tiny(), catalog).gpu is catalog["h100-sxm-80gb"]


# --- LoRA / QLoRA and the optimizer menu, by hand on TINY -----------------------------------------------------
LORA = {"task": "lora", "sequence_length": 32, "micro_batch_size": 2, "lora": {"rank": 4, "targets": ["q", "v"]}}
ADAPTERS = 2 * (4 * (64 + 64) + 4 * (64 + 32))  # 2 layers × (q: A 4×64 + B 64×4, v: A 4×64 + B 32×4) = 1,792


def test_lora_golden_values():
    est = estimate(plan_from_dict({"model": TINY, "workload": LORA, "precision": PURE}))
    fwd = {i.name: i.bytes for i in phase(est, "forward").items}
    assert fwd["weights"] == 2 * P  # frozen bf16 base
    assert fwd["adapters"] == 2 * ADAPTERS and fwd["optimizer_states"] == 2 * 2 * ADAPTERS  # bf16 Adam states
    # per layer per token: norms 2 × fp32 input 4h + the shared attn-norm output 2h = 640; attention 400 + the
    # rank-4 intermediates 2 × 2 × 4 = 416; SwiGLU without the (frozen) down input 3 × 2 × 128 = 768
    # final norm: fp32 input 4h = 256 per token
    assert fwd["activations"] == 2 * T * (640 + 416 + 768) + 256 * T
    assert "embedding backward" not in [ph.name for ph in est.stages[0].phases]  # frozen embedding


def test_lora_with_parameters_offloaded_keeps_no_base_on_the_gpu():
    """FSDP CPUOffload(offload_params=True) / ZeRO-3 offload_param: the frozen base's and the adapters' shards live
    in host memory; only the gathered units come to the GPU."""
    par = {"data": 2, "zero_stage": 3}
    kept = estimate(plan_from_dict({"model": TINY, "workload": LORA, "precision": PURE, "parallelism": par}))
    moved = estimate(
        plan_from_dict(
            {
                "model": TINY,
                "workload": LORA,
                "precision": PURE,
                "parallelism": par,
                "techniques": {"offload": "optimizer_and_params"},
            }
        )
    )
    before, after = ({i.name: i.bytes for i in phase(e, "forward").items} for e in (kept, moved))
    assert before["weights"] == P and before["adapters"] == ADAPTERS  # bf16 shards of 2 ranks
    assert after["weights"] == after["adapters"] == after["optimizer_states"] == 0
    assert after["zero3_gather"] == before["zero3_gather"] > 0


def test_mixed_precision_lora_keeps_fp32_adapters_and_copies_their_inputs():
    est = estimate(plan_from_dict({"model": TINY, "workload": LORA}))  # master fp32: PEFT fp32 adapters
    fwd = {i.name: i.bytes for i in phase(est, "forward").items}
    assert fwd["adapters"] == 4 * ADAPTERS and fwd["optimizer_states"] == 8 * ADAPTERS
    # each adapter saves its own bf16 copy of its input (2 × 64 B for q and v) instead of the shared output
    assert fwd["activations"] == 2 * T * (512 + 416 + 2 * 2 * 64 + 768) + 256 * T


def test_qlora_nf4_storage_and_saved_inputs():
    linear = 2 * (12_288 + 24_576)  # projection params of the two layers
    blocks = linear // 64
    for dq, scales in ((False, 4 * blocks), (True, blocks + 4 * -(-blocks // 256))):
        est = estimate(
            plan_from_dict(
                {"model": TINY, "workload": {**LORA, "task": "qlora"}, "precision": {**PURE, "double_quant": dq}}
            )
        )
        fwd = {i.name: i.bytes for i in phase(est, "forward").items}
        assert fwd["weights"] == linear // 2 + scales + (P - linear) * 2
        assert fwd["dequantized_weight"] == 64 * 128 * 2  # the largest projection, in bf16
        # quantized projections save no inputs (bitsandbytes keeps only the packed weight): as under LoRA
        assert fwd["activations"] == 2 * T * (640 + 416 + 768) + 256 * T


@pytest.mark.parametrize("preset", ["llama-2-7b", "llama-3.1-8b", "mistral-7b"])
@pytest.mark.parametrize("tokens", [(512, 1), (2048, 4)])
def test_qlora_never_above_lora_for_the_same_plan(preset, tokens):
    def device(task):
        return estimate(
            plan_from_dict(
                {
                    "model": {"preset": preset},
                    "workload": {"task": task, "sequence_length": tokens[0], "micro_batch_size": tokens[1]},
                }
            )
        ).device_bytes

    assert device("qlora") < device("lora")


def test_optimizer_menu_state_bytes():
    def states(optimizer, **prec):
        est = estimate(
            plan_from_dict({"model": TINY, "workload": LORA, "precision": {**PURE, "optimizer": optimizer, **prec}})
        )
        return next(i for i in est.items if i.name == "optimizer_states")

    n = ADAPTERS
    assert states("adamw_8bit").bytes == 2 * n * 4  # every adapter matrix is under 4,096 values: fp32 states
    assert states("lion").bytes == n * 2 and states("sgd_momentum").bytes == n * 2 and states("sgd").bytes == 0
    # Adafactor factors each matrix: q's A (4×64) and B (64×4), v's A (4×64) and B (32×4), per layer
    assert states("adafactor").bytes == 2 * 4 * ((4 + 64) + (64 + 4) + (4 + 64) + (32 + 4))
    paged = states("paged_adamw")
    assert paged.bytes == 2 * n * 4 and paged.level == "device"  # managed memory, outside the allocator


@pytest.mark.parametrize(
    "precision, expected",
    [
        # per layer q, o (4,096 values: 16 blocks of 256) and gate, up, down (8,192: 32 blocks) quantize; k and v
        # (2,048) and the 320 norm values keep fp32 states; embedding and head (64,000: 250 blocks) quantize.
        # 2 B × 193,536 + 2 × 4 B × 756 blocks + 2 × 4 B × 8,512
        ({}, 2 * 193_536 + 8 * 756 + 8 * 8_512),
        # blocks of 2,048 (bitsandbytes < 0.44): 2 per q and o, 4 per MLP matrix, 32 per table (64,000 rounded up)
        ({"optimizer_block_size": 2048}, 2 * 193_536 + 8 * (2 * (2 * 2 + 3 * 4) + 2 * 32) + 8 * 8_512),
        # HF Trainer keeps the embedding's states in 32 bits
        ({"fp32_embedding_states": True}, 2 * 129_536 + 8 * 506 + 8 * 72_512),
        # torchao: the same codes and scales, a 1 KiB map per state of each of 12 quantized tensors
        ({"optimizer_library": "torchao"}, 2 * 193_536 + 8 * 756 + 8 * 8_512 + 2 * 1024 * 12),
    ],
)
def test_eight_bit_adamw_layouts_by_hand(precision, expected):
    plan = plan_from_dict({"model": TINY, "precision": {"optimizer": "adamw_8bit", **precision}})
    assert next(i.bytes for i in estimate(plan).items if i.name == "optimizer_states") == expected


def test_torchao_keeps_full_precision_states_in_the_parameters_dtype():
    def states(library):
        plan = plan_from_dict(
            {"model": TINY, "precision": {**PURE, "optimizer": "adamw_8bit", "optimizer_library": library}}
        )
        return next(i.bytes for i in estimate(plan).items if i.name == "optimizer_states")

    assert states("bitsandbytes") - states("torchao") == 8_512 * 2 * (4 - 2) - 2 * 1024 * 12  # bf16, not fp32


@pytest.mark.parametrize(
    "precision, message",
    [
        (
            {"optimizer_library": "torchao"},
            "precision.optimizer_library: 'torchao' applies to precision.optimizer adamw_8bit or paged_adamw_8bit",
        ),
        (
            {"optimizer": "paged_adamw_8bit", "optimizer_library": "torchao"},
            "precision.optimizer: 'paged_adamw_8bit' is bitsandbytes only (precision.optimizer_library torchao)",
        ),
        (
            {"optimizer": "adamw_8bit", "optimizer_block_size": 8},
            "precision.optimizer_block_size: 8 is out of range; must be from 16 to 65,536",
        ),
    ],
)
def test_eight_bit_settings_messages(precision, message):
    with pytest.raises(PlanError) as err:
        plan_from_dict({"model": TINY, "precision": precision})
    assert str(err.value) == message


# --- MoE, expert parallelism, FP8 -----------------------------------------------------------------------------
MOE = {**TINY, "num_experts": 4, "experts_per_token": 2, "moe_intermediate_size": 64}


def test_moe_parameters_and_activations_by_hand():
    from planner.plan.models import Model

    p = Model(**MOE).params
    expert = 3 * 64 * 64
    assert p.expert == expert and p.experts == 4 * expert and p.router == 64 * 4
    assert p.total == 64_000 + 2 * (12_288 + 4 * expert + 256 + 128) + 64 + 64_000
    assert p.active == p.total - 2 * 2 * expert  # two of four experts idle per token
    est = estimate(
        plan_from_dict({"model": MOE, "workload": {"sequence_length": 32, "micro_batch_size": 2}, "precision": PURE})
    )
    fwd = {i.name: i.bytes for i in phase(est, "forward").items}
    # per MoE layer per token: norms 1024 + attention 400 + router (fp32 softmax 4 × 4 + indices and weights
    # 12 × 2 + 4) + 2 routed tokens × (2 B × (2h + 4 × I_e) + 28 B of routing weight and indices)
    assert fwd["activations"] == 2 * T * (1024 + 400 + 16 + 28 + 2 * (2 * (128 + 256) + 28)) + 512 * T


def test_capacity_factor_pads_the_routed_slots():
    def fwd(**techniques):
        est = estimate(
            plan_from_dict(
                {
                    "model": MOE,
                    "workload": {"sequence_length": 32, "micro_batch_size": 2},
                    "precision": PURE,
                    "techniques": techniques,
                    "parallelism": {"data": 2, "expert": 2},
                }
            )
        )
        items = {i.name: i.bytes for ph in est.stages[0].phases for i in ph.items}
        return items | {"activations": next(i.bytes for i in phase(est, "forward").items if i.name == "activations")}

    dropless, padded = fwd(), fwd(moe_capacity_factor=1.5)
    # 2 MoE layers × T tokens × 0.5 × 2 routed slots more × (2 B × (2h + 4 I_e) + 28 B)
    assert padded["activations"] - dropless["activations"] == 2 * T * 1 * (2 * (128 + 256) + 28)
    assert padded["expert_dispatch"] == T * 3 * 64 * 2 and dropless["expert_dispatch"] == T * 2 * 64 * 2


@given(st.integers(1, 4), st.sampled_from(["pretrain", "lora", "inference"]))
@settings(max_examples=20, deadline=None)
def test_more_experts_same_active_params_more_weights_same_activations(factor, task):
    # Same top-k and expert width: active parameters unchanged but for the router's row per expert, total grows
    # with the expert count. Activations differ only by the router's softmax (4 B per expert, token and layer).
    def est(experts):
        return estimate(
            plan_from_dict(
                {
                    "model": {**MOE, "num_experts": experts},
                    "precision": PURE,
                    "workload": {"task": task, "sequence_length": 32, "micro_batch_size": 2},
                }
            )
        )

    small, large = est(4), est(4 * factor + 4)
    from planner.plan.models import Model

    active = [Model(**{**MOE, "num_experts": e}).params.active for e in (4, 4 * factor + 4)]
    assert active[1] - active[0] == 2 * 64 * 4 * factor
    weights = [next(i.bytes for i in e.items if i.name == "weights") for e in (small, large)]
    assert weights[1] > weights[0]
    if task != "inference":
        acts = [next(i.bytes for i in phase(e, "forward").items if i.name == "activations") for e in (small, large)]
        assert acts[1] - acts[0] == 2 * T * 4 * (4 * factor)


def test_expert_parallelism_splits_experts_and_shards_the_rest():
    def weights(**par):
        est = estimate(
            plan_from_dict({"model": MOE, "workload": {"sequence_length": 32}, "precision": PURE, "parallelism": par})
        )
        return next(i.bytes for i in est.items if i.name == "weights")

    # TINY with 4 experts of 12,288: embedding 64,000 + 2 × (attention 12,288 + experts 49,152 + router 256 +
    # norms 128) + final norm 64 + head 64,000 = 251,712 params, in bf16
    assert weights(data=4) == 2 * 251_712
    assert weights(data=4, expert=2) == 2 * (251_712 - 2 * 2 * 12_288)  # half the experts per GPU
    # ZeRO-3 with EP 2 over 4 ranks: the 153,408 other params ÷ 4, the 49,152 local expert params ÷ 2 more
    assert weights(data=4, expert=2, zero_stage=3) == 2 * 153_408 // 4 + 2 * 49_152 // 2


def test_fp8_training_keeps_bf16_activations_and_adds_casts():
    base = {"model": TINY, "workload": {"sequence_length": 32, "micro_batch_size": 2}}
    bf16 = estimate(plan_from_dict(base))
    fp8 = estimate(plan_from_dict({**base, "precision": {"compute": "fp8"}}))
    acts = [next(i.bytes for i in phase(e, "forward").items if i.name == "activations") for e in (bf16, fp8)]
    assert acts[0] == acts[1]
    casts = next(i.bytes for i in phase(fp8, "forward").items if i.name == "fp8_casts")
    assert casts == 2 * 64 * 128 + T * 128


def test_latent_attention_activations_by_hand():
    # HF DeepseekV3 shape, pure bf16, fused attention, 2 × 1024 tokens. Per layer and token: norms 2 × (4 + 2 + 2)h;
    # attention 2 × (q 16×96 + keys 16×96 + kv_b's output 16×(64+64) + out 16×64) + lse 4 × 16 heads
    # + latent norms (4 + 2 + 2) × (384 + 256); SwiGLU 4 × 2 × 2048. Final norm 8h per token.
    model = {
        "num_layers": 4,
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "intermediate_size": 2048,
        "vocab_size": 32000,
        "head_dim": 64,
        "kv_lora_rank": 256,
        "q_lora_rank": 384,
        "qk_rope_head_dim": 32,
        "v_head_dim": 64,
    }
    plan = plan_from_dict(
        {
            "model": model,
            "workload": {"sequence_length": 1024, "micro_batch_size": 2},
            "precision": {"compute": "bf16", "master_weights": "none"},
        }
    )
    acts = next(i.bytes for i in estimate(plan).items if i.name == "activations")
    per_layer = 16 * 1024 + 2 * (1536 + 1536 + 2048 + 1024) + 64 + 8 * 640 + 16_384
    assert acts == 2048 * (4 * per_layer + 8 * 1024) == 428_343_296  # MemTracker on HF's code: 428,617,728


def test_paged_states_are_outside_the_allocator_but_on_the_device():
    def est(optimizer):
        return estimate(
            plan_from_dict({"model": TINY, "workload": {"sequence_length": 32}, "precision": {"optimizer": optimizer}})
        )

    paged, plain = est("paged_adamw"), est("adamw")
    states = next(i.bytes for i in paged.items if i.name == "optimizer_states")
    assert sum(i.bytes for i in paged.items if i.level == "allocated") == paged.peak_allocated_bytes
    assert paged.peak_allocated_bytes < plain.peak_allocated_bytes  # bitsandbytes' managed memory is not counted
    assert paged.device_bytes - paged.peak_reserved_bytes >= states  # context + NCCL + the paged states


def test_optimizer_in_backward_by_hand():
    def phases(flag):
        est = estimate(
            plan_from_dict(
                {
                    "model": TINY,
                    "workload": {"sequence_length": 32, "micro_batch_size": 2},
                    "precision": PURE,
                    "techniques": {"optimizer_in_backward": flag},
                }
            )
        )
        return {ph.name: {i.name: i.bytes for i in ph.items} for ph in est.stages[0].phases}

    plain, fused = phases(False), phases(True)
    assert "optimizer step" in plain and "optimizer step" not in fused  # no separate step, no full gradients
    assert all(ph["gradients"] == 0 for ph in fused.values())
    # foreach AdamW in bf16 makes 2 B/param of temporaries (404,096 B for TINY's 202,048 params); in backward
    # the step runs one tensor at a time: the output head 64,000 × (2 B gradient + 2 B temporaries), the
    # largest layer matrix 64 × 128 × (2 + 2)
    assert plain["optimizer step"]["optimizer_temp"] == 2 * 202_048
    assert fused["output head backward"]["fresh_gradients"] == 64_000 * 4
    assert fused["backward of the first layer"]["fresh_gradients"] == 8_192 * 4
    assert plain["backward of the first layer"]["gradients"] == 2 * 202_048


def test_chunked_loss_by_hand():
    # MemTracker on fake tensors (torchtune's CEWithChunkedOutputLoss pattern) peaked at T·V × (6 + 4/n) at the
    # end of the forward for n = 4, 8, 32, against 12 T·V in HF's loss backward
    def loss_items(**techniques):
        est = estimate(
            plan_from_dict(
                {
                    "model": TINY,
                    "workload": {"sequence_length": 32, "micro_batch_size": 2},
                    "precision": PURE,
                    "techniques": techniques,
                }
            )
        )
        return {
            ph.name: next(i.bytes for i in ph.items if i.name == "logits_loss")
            for ph in est.stages[0].phases
            if any(i.name == "logits_loss" for i in ph.items)
        }

    tv = T * 1000
    assert loss_items() == {"forward": 10 * tv, "loss backward": 12 * tv, "output head backward": 2 * tv}
    assert loss_items(loss="chunked", loss_chunks=4) == {
        "forward": 6 * tv + tv,
        "loss backward": 4 * tv + 3 * tv,
        "output head backward": tv // 2,
    }


def logits_loss(est):
    return {
        ph.name: next(i.bytes for i in ph.items if i.name == "logits_loss")
        for ph in est.stages[0].phases
        if any(i.name == "logits_loss" for i in ph.items)
    }


@pytest.mark.parametrize(
    "precision, forward, head",
    [
        # HF ForCausalLMLoss / torchtitan cross_entropy_loss on TINY (T 64, V 1000). Forward, at nll_loss: the 16-bit
        # logits, their fp32 upcast and the fp32 log-softmax; fp32 logits are their own upcast (.float() returns them)
        (PURE, (2 + 4 + 4), 2),
        ({"compute": "bf16", "master_weights": "fp32"}, (2 + 4 + 4), 2),  # autocast: the head's output is bf16
        ({"compute": "fp32", "master_weights": "fp32"}, (4 + 4), 4),
    ],
)
def test_eager_cross_entropy_by_hand(precision, forward, head):
    # backward, at _log_softmax_backward_data: the saved log-softmax, nll_loss's gradient of it and the gradient
    # of the upcast, all fp32 (MemTracker: 12.000 T·V at vocabulary 128,256 and 8,192 tokens); then the
    # gradient of the logits in their dtype is the head's input
    tv = T * 1000
    assert logits_loss(estimate(tiny(precision=precision))) == {
        "forward": forward * tv,
        "loss backward": 12 * tv,
        "output head backward": head * tv,
    }


def test_the_output_head_keeps_its_autocast_copy_under_full_checkpointing():
    # AMP + full checkpointing: the layers' casts go when autocast exits, but the head's matmul saved its bf16
    # copy of the 64,000-parameter head for its backward: 128,000 B beside the loss's 12 T·V (MemTracker on HF
    # Llama: +V·h × 2 B exactly, e.g. 0.1223 GiB at V 128,256, h 512)
    est = estimate(tiny(techniques={"activation_checkpointing": "full"}))
    casts = {
        ph.name: next((i.bytes for i in ph.items if i.name == "weight_casts"), None) for ph in est.stages[0].phases
    }
    assert casts["forward"] == 2 * (2 * (12_288 + 24_576) + 64_000)  # every cast while autocast is on
    assert casts["loss backward"] == casts["output head backward"] == 2 * 64_000
    assert casts["backward of the last layer"] == 0  # the head's backward freed it
    assert phase(est, "loss backward").allocated_bytes - phase(est, "output head backward").allocated_bytes == (
        (12 - 2) * T * 1000 - 64_000 * 4
    )  # the head's fresh fp32 gradient
    # Liger's fused loss runs the head inside the loss's forward: no copy saved for backward
    fused = estimate(tiny(techniques={"activation_checkpointing": "full", "loss": "fused"}))
    assert not any(i.name == "weight_casts" and i.bytes for i in phase(fused, "loss backward").items)


@pytest.mark.parametrize(
    "precision, oracle_bytes",
    [
        ({"compute": "bf16", "master_weights": "none"}, 63_569_920),
        ({"compute": "bf16", "master_weights": "fp32"}, 63_569_920),  # autocast: the same tensors
        ({"compute": "fp32", "master_weights": "fp32"}, 84_541_440),
    ],
)
def test_qk_norm_activations_match_memtracker(precision, oracle_bytes):
    # MemTracker on HF Qwen3 vs Llama code (4 layers, h 1024, 16 heads / 4 KV of 64, 2 × 1024 tokens): the
    # decoders' saved tensors differ by exactly these bytes, T·L × ((4 + b)(q + k) + 4 × (heads + KV heads))
    model = {
        "num_layers": 4,
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "num_kv_heads": 4,
        "head_dim": 64,
        "intermediate_size": 2816,
        "vocab_size": 32000,
    }

    def acts(qk_norm):
        est = estimate(
            plan_from_dict(
                {
                    "model": {**model, "qk_norm": qk_norm},
                    "precision": precision,
                    "workload": {"sequence_length": 1024, "micro_batch_size": 2},
                }
            )
        )
        return next(i.bytes for i in phase(est, "forward").items if i.name == "activations")

    assert acts(True) - acts(False) == oracle_bytes


def test_every_k_checkpointing_between_none_and_full():
    def forward_acts(**techniques):
        est = estimate(
            plan_from_dict(
                {
                    "model": TINY,
                    "workload": {"sequence_length": 32, "micro_batch_size": 2},
                    "precision": PURE,
                    "techniques": techniques,
                }
            )
        )
        return next(i.bytes for i in phase(est, "forward").items if i.name == "activations"), est.peak_allocated_bytes

    none, full = forward_acts(), forward_acts(activation_checkpointing="full")
    assert forward_acts(activation_checkpointing="every_k", checkpoint_every=1) == full
    assert forward_acts(activation_checkpointing="every_k", checkpoint_every=3) == none  # ⌊2/3⌋ = 0 layers
    # k = 2 on TINY's 2 layers: one layer checkpointed, one not; the final norm is the same in both plans
    assert forward_acts(activation_checkpointing="every_k", checkpoint_every=2)[0] == (none[0] + full[0]) // 2


def forward_item(name, **sections):
    est = estimate(tiny(**sections))
    return next(i.bytes for i in phase(est, "forward").items if i.name == name)


def test_fused_loss_by_hand():
    # Liger fused linear cross-entropy on TINY (T 64, h 64, V 1000): ⌈V/h⌉ = 16 → rows next_pow2(⌈64/16⌉) = 4;
    # saved: input gradient T·h·2 + head gradient V·h·2 (bf16 parameters) + 4T; plus one chunk of logits 4·V·2
    saved = 64 * 64 * 2 + 1000 * 64 * 2 + 4 * 64
    est = estimate(tiny(precision=PURE, techniques={"loss": "fused"}))
    loss = {ph.name: next((i.bytes for i in ph.items if i.name == "logits_loss"), None) for ph in est.stages[0].phases}
    assert loss["forward"] == saved + 4 * 1000 * 2
    assert loss["loss backward"] == loss["output head backward"] == saved
    # the head's gradient exists already: no fresh gradient in the output head's backward
    head = phase(est, "output head backward")
    assert not any(i.name == "fresh_gradients" for i in head.items)


@pytest.mark.parametrize(
    "schedule, extra, stage0",
    [
        ({}, {}, 4),
        ({"pipeline_schedule": "gpipe"}, {}, 8),
        # Megatron interleaving, v = 2: (2(p - 1) + (v - 1)p + 1) / v = (6 + 4 + 1) / 2 chunks of half a stage
        ({"pipeline_schedule": "interleaved_1f1b", "virtual_stages": 2}, {}, 5.5),
        ({"pipeline_schedule": "zero_bubble"}, {}, 4),
    ],
)
def test_pipeline_schedules_hold_what_they_promise(schedule, extra, stage0):
    model = {**TINY, "num_layers": 8}
    plan = plan_from_dict(
        {
            "model": model,
            "workload": {"sequence_length": 32, "global_batch_size": 8},
            "parallelism": {"pipeline": 4, "pipeline_microbatches": 8, **schedule},
        }
    )
    assert plan.micro_batches_per_step == 8
    stages = estimate(plan).stages
    assert stages[0].micro_batches_in_flight == stage0
    assert stages[3].micro_batches_in_flight == (
        8 if schedule.get("pipeline_schedule") == "gpipe" else 2.5 if schedule.get("virtual_stages") else 1
    )  # (v - 1)p + 1 chunks


def test_activation_offload_keeps_five_layer_inputs_on_the_gpu():
    # full checkpointing on 8 layers: min(5, 8) layer inputs T·2h stay while their copies run; the rest of the
    # 8 inputs goes to the host; the final norm stays
    model = {**TINY, "num_layers": 8}

    def acts(**techniques):
        est = estimate(
            plan_from_dict(
                {
                    "model": model,
                    "precision": PURE,
                    "workload": {"sequence_length": 32, "micro_batch_size": 2},
                    "techniques": {"activation_checkpointing": "full", **techniques},
                }
            )
        )
        return next(i.bytes for i in phase(est, "forward").items if i.name == "activations"), est.host_bytes

    on, host = acts(activation_offload=True)
    off, no_host = acts()
    final_norm = 512 * T
    assert (on, off) == (5 * T * 2 * 64 + final_norm, 8 * T * 2 * 64 + final_norm)
    assert (host, no_host) == (8 * T * 2 * 64, 0)


def test_async_tp_workspace_outside_the_allocator():
    est = estimate(
        tiny(parallelism={"tensor": 2, "sequence_parallel": True, "async_tp": True}, techniques={"compile": True})
    )
    item = next(i for i in est.items if i.name == "symmetric_memory")
    assert (item.bytes, item.level) == (2 * (T // 2) * 64 * 2, "device")


def test_fp8_all_gather_gathers_layers_in_one_byte():
    # TINY under ZeRO-3: the largest neighbouring units are the embedding (64,000) and a layer (36,992 params)
    fp8 = {"compute": "fp8", "master_weights": "fp32"}
    bf16 = forward_item("zero3_gather", precision=fp8, parallelism={"zero_stage": 3})
    one_byte = forward_item("zero3_gather", precision={**fp8, "fp8_all_gather": True}, parallelism={"zero_stage": 3})
    assert bf16 - one_byte == 36_992


def test_an_fp32_lora_base_is_gathered_in_the_compute_dtype():
    # TINY LoRA under ZeRO-3, base loaded in fp32 (the peft SFT example's torch_dtype): the shards hold 4 B a
    # parameter, FSDP's MixedPrecision all-gathers the largest neighbouring units (embedding 64,000 + a layer
    # 36,992 params) in bf16, 2 B each, as for a bf16 base
    def forward(weights):
        return forward_item(
            "zero3_gather",
            workload=LORA,
            parallelism={"zero_stage": 3, "data": 2},
            precision={**PURE, "weights": weights},
        )

    assert forward("fp32") == forward("bf16") == (64_000 + 36_992) * 2


def test_fp8_recipes_scale_their_casts():
    def casts(recipe):
        return forward_item("fp8_casts", precision={"compute": "fp8", "fp8_recipe": recipe})

    elements = 2 * 128 * 64 + T * 128  # two copies of the largest matrix + T × max(h, I)
    assert casts("tensorwise") == elements
    assert casts("rowwise") == elements + 4 * (T + 128)
    assert casts("mxfp8") == round(elements * 33 / 32)
    assert casts("nvfp4") == round(elements * 9 / 16)


def test_nvfp4_saves_four_bit_linear_inputs_and_weights():
    # per layer per token, linear inputs go from 16 bits to 9/16 B: norm outputs 2 × 2h → 5 consumers × 9h/16,
    # o_proj input 2 × 64 → 9/16 × 64, down input 2 × 128 → 9/16 × 128; each layer also keeps its linears'
    # weights (36,864 params) as NVFP4
    def acts(recipe):
        return forward_item(
            "activations",
            precision={"compute": "fp8", "master_weights": "none", "fp8_recipe": recipe},
            parallelism={"zero_stage": 3},
        )

    per_token = (2 * 2 * 64 - 5 * 64 * 9 / 16) + (2 - 9 / 16) * 64 + (2 - 9 / 16) * 128
    assert acts("tensorwise") - acts("nvfp4") == round(2 * T * per_token) - 2 * round(36_864 * 9 / 16)


def test_dora_saves_two_outputs_per_adapted_projection():
    # MemTracker on peft 0.21: DoRA saves the base and adapter outputs, 2 × 2 B × d_out per token per target
    def acts(variant):
        return forward_item(
            "activations",
            workload={
                "task": "lora",
                "sequence_length": 32,
                "micro_batch_size": 2,
                "lora": {"targets": ["q", "v"], "variant": variant},
            },
            precision=PURE,
        )

    assert acts("dora") - acts("lora") == 2 * T * 2 * 2 * (64 + 32)
    # the row-norm temporaries of the largest adapted projection, q (64 → 64), r 8: 2(d_in² + d_in·r + 3 d_in·d_out)
    assert forward_item(
        "dora_weight_norm",
        workload={
            "task": "lora",
            "sequence_length": 32,
            "micro_batch_size": 2,
            "lora": {"targets": ["q", "v"], "variant": "dora"},
        },
        precision=PURE,
    ) == 2 * (64 * 64 + 64 * 8 + 3 * 64 * 64)


def test_paged_8bit_states_like_8bit_outside_the_allocator():
    def states(optimizer):
        est = estimate(tiny(precision={"optimizer": optimizer}))
        return next((i.bytes, i.level) for i in phase(est, "optimizer step").items if i.name == "optimizer_states")

    assert states("paged_adamw_8bit") == (states("adamw_8bit")[0], "device")


@pytest.mark.parametrize(
    "techniques, per_token",
    [
        # the oracle and inductor's partitioner on HF Llama code: eager 16h + 4q + 4kv + 4a + 8I + 8 (the planner
        # leaves out the 8 B of rstd); with h 64, q 64, kv 32, a 4, I 128:
        ({}, 2448),
        (
            {"activation_checkpointing": "selective_op"},
            4 * 64 + 4 * 64 + 2 * 32 + 4 * 4 + 2 * 128,
        ),  # q, v, gate, down kept
        ({"compile": True}, 8 * 64 + 4 * 64 + 4 * 32 + 4 * 4 + 6 * 128 + 8),
        ({"compile": True, "activation_checkpointing": "selective_op"}, 2 * 64 + 4 * 64 + 2 * 32 + 4 * 4 + 2 * 128),
    ],
)
def test_op_level_checkpointing_and_compile_by_hand(techniques, per_token):
    acts = forward_item("activations", precision=PURE, techniques=techniques)
    assert acts == 2 * T * per_token + 512 * T  # two layers + the final norm


def test_compiled_loss_keeps_no_fp32_logits():
    est = estimate(tiny(precision=PURE, techniques={"compile": True}))
    tv = T * 1000
    loss = {
        ph.name: next(i.bytes for i in ph.items if i.name == "logits_loss")
        for ph in est.stages[0].phases
        if any(i.name == "logits_loss" for i in ph.items)
    }
    assert loss == {"forward": 2 * tv + 8 * T, "loss backward": 4 * tv, "output head backward": 2 * tv}


def test_selective_op_recomputes_what_it_did_not_keep():
    est = estimate(tiny(precision=PURE, techniques={"activation_checkpointing": "selective_op"}))
    recompute = next(i.bytes for i in phase(est, "backward of the last layer").items if i.name == "recompute")
    assert recompute == T * (2448 - 848)


def test_fsdp1_flat_parameters_give_the_frozen_base_gradients():
    """LoRA on Llama 3.1 8B, FSDP over 2 ranks, pure bf16: FSDP2 keeps gradients of the adapters only; FSDP1's flat
    parameters (use_orig_params=True, one unit per block) get a bf16 gradient for every element, sharded."""
    d = {
        "model": {"preset": "llama-3.1-8b"},
        "workload": {"task": "lora", "sequence_length": 2048, "global_batch_size": 4},  # accumulation: .grad is held
        "precision": {"master_weights": "none"},
        "parallelism": {"data": 2, "zero_stage": 3},
    }
    per_param = estimate(plan_from_dict(d))
    flat = estimate(plan_from_dict({**d, "parallelism": {**d["parallelism"], "flat_params": True}}))
    grads = {e: next(i.bytes for i in x.items if i.name == "gradients") for e, x in (("2", per_param), ("1", flat))}
    adapters = 32 * 8 * ((4096 + 4096) + (4096 + 1024))  # rank 8 on q (4096→4096) and v (4096→1024)
    assert grads["2"] == adapters * 2 // 2
    assert grads["1"] == (8_030_261_248 + adapters) * 2 // 2
    with pytest.raises(PlanError, match="^parallelism.flat_params: True applies to lora and qlora under "):
        plan_from_dict(
            {**d, "workload": {"task": "finetune"}, "parallelism": {**d["parallelism"], "flat_params": True}}
        )


def test_nvfp4_under_op_level_sac_keeps_less_than_bf16():
    """Issue 16: torchao's NVFP4 linears (an autograd Function of scaled_mm and Triton quantize kernels) are outside
    torchtitan's SAC save list, so their outputs and 4-bit codes are recomputed with the block: only the block
    input and the attention output stay, and NVFP4 needs less than bf16 (it was predicted more)."""
    d = {
        "framework": "torchtitan",
        "model": {"preset": "llama-3.1-8b"},
        "workload": {"sequence_length": 8192},
        "techniques": {"compile": True},
        "parallelism": {"data": 8},
        "hardware": {"gpu": "b200-180gb"},
    }
    bf16 = estimate(plan_from_dict(d))
    nvfp4 = estimate(plan_from_dict({**d, "precision": {"compute": "fp8", "fp8_recipe": "nvfp4"}}))
    acts = {e: next(i.bytes for i in x.items if i.name == "activations") for e, x in (("bf16", bf16), ("fp4", nvfp4))}
    assert nvfp4.peak_allocated_bytes < bf16.peak_allocated_bytes and acts["fp4"] < acts["bf16"] / 2


def test_deepspeed_holds_its_reduce_bucket_at_every_stage():
    """DeepSpeed's default reduce_bucket_size (5e8 elements) of bf16 gradients: a 1 GB flat bucket at every ZeRO
    stage (stage_1_and_2.py ipg_buffer, stage3.py __ipg_bucket_flat_buffer)."""
    d = {"framework": "deepspeed", "model": {"preset": "llama-3.2-1b"}, "parallelism": {"data": 8, "zero_stage": 2}}
    for stage in (1, 2, 3):
        plan = plan_from_dict({**d, "parallelism": {"data": 8, "zero_stage": stage}})
        assert {i.name: i.bytes for i in estimate(plan).items}["reduce_bucket"] == 500_000_000 * 2
    with pytest.raises(PlanError) as err:
        plan_from_dict({"model": {"preset": "llama-3.2-1b"}, "parallelism": {"reduce_bucket_elements": 1000}})
    assert str(err.value) == (
        "parallelism.reduce_bucket_elements: 1000 applies to DeepSpeed ZeRO stage 1, 2 or 3 (parallelism.zero_stage)"
    )


def test_deepspeed_zero3_copies_its_bucket_to_reduce_and_steps_a_sub_group_in_fp32():
    """TINY has 202,048 trainable parameters. ZeRO-3 on 2 ranks with bf16 gradients: backward concatenates the
    1,000-element bucket before reduce-scattering it (2 B each); the step flattens a sub-group of 50,000 of the
    rank's 101,024 gradient elements (2 B) and casts it to fp32 (4 B)."""
    par = {"data": 2, "zero_stage": 3, "reduce_bucket_elements": 1000, "sub_group_elements": 50_000}
    fused = {"optimizer_impl": "fused"}  # no foreach temporaries beside the sub-group
    plan = plan_from_dict({"model": TINY, "precision": {**fused, "gradients": "bf16"}, "parallelism": par})
    phases = {ph.name: {i.name: i.bytes for i in ph.items} for ph in estimate(plan).all_stages()[0].phases}
    assert phases["backward of the first layer"]["reduce_copy"] == 1000 * 2
    assert "reduce_copy" not in phases["forward"]
    assert phases["optimizer step"]["optimizer_temp"] == 50_000 * (2 + 4)
    whole = plan_from_dict({"model": TINY, "precision": fused, "parallelism": {**par, "sub_group_elements": 10**6}})
    steps = {ph.name: {i.name: i.bytes for i in ph.items} for ph in estimate(whole).all_stages()[0].phases}
    assert steps["optimizer step"]["optimizer_temp"] == 101_024 * 4  # fp32 gradients: flattened, no cast


# --- FSDP under pipeline parallelism (layout.py unsharded_under_pipelining) ---------------------------------------
def _pipelined_fsdp(framework, pipeline=2, **parallelism):
    """TINY on pipeline × 2 data ranks under FSDP (ZeRO-3), 4 micro-batches a step; bf16 compute over fp32
    master shards, fp32 gradient reduction (torchtitan's recipe, written out for both frameworks)."""
    return estimate(
        plan_from_dict(
            {
                "model": TINY,
                "framework": framework,
                "workload": {"sequence_length": 32, "micro_batch_size": 1, "global_batch_size": 8},
                "precision": {"compute": "bf16", "master_weights": "fp32", "gradients": "fp32"},
                "parallelism": {"pipeline": pipeline, "data": 2, "zero_stage": 3, **parallelism},
            }
        )
    )


def _by_phase(stage, names=("weights", "gradients", "unsharded_weights", "zero3_gather", "fresh_gradients")):
    return {ph.name: {i.name: i.bytes for i in ph.items if i.name in names} for ph in stage.phases}


def test_torchtitan_keeps_a_stage_unsharded_under_pipelining_by_hand():
    # Stage 0 of TINY on 2 stages: the embedding (1,000 × 64 = 64,000) and one layer (36,992): 100,992 params.
    # torchtitan does not reshard after forward under PP: 16-bit copies of all of them from the first forward
    # to the reduction; the schedule sums unsharded fp32 gradients over the 4 micro-batches and reduce-scatters
    # them once, so only the optimizer step sees the shard. The fp32 master shards stay as they are.
    stage = 100_992
    phases = _by_phase(_pipelined_fsdp("torchtitan").stages[0])
    for name in ("forward", "backward of the last layer", "backward of the first layer", "embedding backward"):
        assert phases[name]["unsharded_weights"] == stage * 2
        assert phases[name]["gradients"] == stage * 4  # unsharded fp32
        assert phases[name]["weights"] == stage * 4 // 2  # the fp32 shard
        assert "zero3_gather" not in phases[name]  # the gathered units are the unsharded copies
    # a fresh bf16 gradient of the layer is summed into the fp32 one: no reduce-scatter copy beside it
    assert phases["backward of the first layer"]["fresh_gradients"] == 36_992 * 2
    assert phases["optimizer step"] == {"weights": stage * 4 // 2, "gradients": stage * 4 // 2}


def test_pytorch_pipelining_reshards_after_forward_but_not_after_backward():
    # fully_shard's default reshards after forward: the per-unit gather (the embedding and the layer, both
    # neighbours: 100,992 × 2 B) until backward ends, then every unit stays gathered
    phases = _by_phase(_pipelined_fsdp("generic").stages[0])
    for name in ("forward", "backward of the last layer"):
        assert phases[name]["zero3_gather"] == 100_992 * 2 and "unsharded_weights" not in phases[name]
    for name in ("backward of the first layer", "embedding backward"):
        assert phases[name]["unsharded_weights"] == 100_992 * 2 and "zero3_gather" not in phases[name]
    assert phases["backward of the first layer"]["gradients"] == 100_992 * 4


def test_without_pipelining_fsdp_shards_gradients_as_it_goes():
    phases = _by_phase(_pipelined_fsdp("torchtitan", pipeline=1).stages[0])
    assert all("unsharded_weights" not in p for p in phases.values())
    assert phases["backward of the first layer"]["gradients"] == P * 4 // 2


def test_fp8_all_gather_keeps_the_stage_layers_in_one_byte():
    # stage 0: the layer's 36,992 params travel and stay as float8, the embedding as bf16
    fp8 = {"compute": "fp8", "master_weights": "fp32", "gradients": "fp32", "fp8_all_gather": True}
    est = estimate(
        plan_from_dict(
            {
                "model": TINY,
                "framework": "torchtitan",
                "precision": fp8,
                "workload": {"sequence_length": 32, "micro_batch_size": 1, "global_batch_size": 8},
                "parallelism": {"pipeline": 2, "data": 2, "zero_stage": 3},
            }
        )
    )
    assert _by_phase(est.stages[0])["forward"]["unsharded_weights"] == 64_000 * 2 + 36_992


def test_llama_405b_stage_under_torchtitan_pp8_tp8_holds_its_unsharded_parameters_and_gradients():
    # Issue 29: a 405B stage at PP 8 × TP 8 (× 8 data ranks): the stage's 16-bit parameters and fp32 gradients,
    # unsharded, are more than the shards and the per-unit gather the estimate held before (23.5 GiB; now 55.6)
    plan = plan_from_dict(
        {
            "model": {"preset": "llama-3.1-405b"},
            "framework": "torchtitan",
            "workload": {"sequence_length": 8192, "micro_batch_size": 1, "global_batch_size": 64},
            "techniques": {"activation_checkpointing": "full"},
            "parallelism": {"tensor": 8, "pipeline": 8, "data": 8},
        }
    )
    est = estimate(plan)
    held = {i.name: i.bytes for i in est.items}
    stage = next(s for s in est.stages if s.index == est.stage)
    params = held["unsharded_weights"] // 2
    assert held["gradients"] == params * 4 and held["weights"] == params * 4 // 8
    assert params * 6 > 0.6 * est.peak_allocated_bytes  # they dominate the peak
    assert est.device_bytes > 50 * 2**30 and stage.peak.name.startswith("backward")


GELU = {**TINY, "mlp": "gelu", "norm": "layernorm", "bias": True}


@pytest.mark.parametrize(
    "precision, fused, unfused",
    [
        # I = 128. Fused: x and the output (down's input) 2 × 2 B. gelu_new: x, tanh, 0.5x, 1 + tanh and the output
        (PURE, 2 * 2 * 128, 5 * 2 * 128),
        # autocast: pow runs in fp32, so x, tanh and 1 + tanh are fp32; 0.5x and down's cast input 16-bit
        ({}, 2 * 2 * 128, (3 * 4 + 2 + 2) * 128),
        ({"compute": "fp32"}, 2 * 4 * 128, 5 * 4 * 128),
    ],
)
def test_gelu_new_saves_five_tensors_by_hand(precision, fused, unfused):
    """HF GPT-2's NewGELUActivation is elementwise ops that each save their inputs (MemTracker on HF GPT-2: 6 B
    per element more than the fused kernel in bf16, 12 B under autocast and in fp32)."""

    def mlp(activation):
        return layer_acts(plan_from_dict({"model": {**GELU, "activation": activation}, "precision": precision})).mlp

    assert mlp("gelu") == mlp("gelu_pytorch_tanh") == fused and mlp("gelu_new") == unfused
    acts = {a: items(phase(estimate(_gelu_plan(a, precision)), "forward"))["activations"] for a in ("gelu", "gelu_new")}
    assert acts["gelu_new"] - acts["gelu"] == 2 * T * (unfused - fused)  # both layers, every token


def _gelu_plan(activation, precision):
    return plan_from_dict(
        {
            "model": {**GELU, "activation": activation},
            "workload": {"sequence_length": 32, "micro_batch_size": 2},
            "precision": precision,
        }
    )


def test_gelu_new_under_lora_keeps_what_its_ops_save():
    """A frozen c_fc and c_proj save no inputs: the activation's own tensors remain (bf16: x alone when fused;
    x, tanh, 0.5x and 1 + tanh for gelu_new)."""

    def mlp(activation):
        plan = {
            "model": {**GELU, "activation": activation},
            "workload": {"task": "lora", "lora": {"rank": 8, "targets": ["q", "v"]}},
            "precision": PURE,
        }
        return layer_acts(plan_from_dict(plan)).mlp

    assert mlp("gelu") == 2 * 128 and mlp("gelu_new") == 4 * 2 * 128


def test_a_tied_tables_two_gradients_and_their_sum_at_the_embeddings_backward():
    """TINY with its table tied (V 1,000 × h 64 = 64,000 params), fp32, fused AdamW: at the embedding's backward the
    head's buffered gradient (as the table's .grad-to-be, in Gradients), the embedding's (fresh, 4 B) and their
    out-of-place sum (4 B) are live; an untied model has neither extra. The H200's 1B run of this step: 20.62 GiB
    allocated, planned 20.43 with the sum and 19.46 without."""

    def embedding_backward(tied):
        plan = plan_from_dict(
            {
                "model": {**TINY, "tie_embeddings": tied},
                "workload": {"sequence_length": 32, "micro_batch_size": 2},
                "precision": {"compute": "fp32", "master_weights": "fp32", "optimizer_impl": "fused"},
            }
        )
        ph = next(p for p in estimate(plan).stages[0].phases if p.name == "embedding backward")
        return {i.name: i for i in ph.items}

    tied, untied = embedding_backward(True), embedding_backward(False)
    assert tied["tied_gradient_sum"].bytes == 64_000 * 4 and tied["fresh_gradients"].bytes == 64_000 * 4
    assert tied["fresh_gradients"].formula == "64,000 params × (4 B .grad)"
    assert "tied_gradient_sum" not in untied
