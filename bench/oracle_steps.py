"""Training steps of a post-training loss on the team's no-GPU oracle (../shared/tools/oracle: real HF code on fake
CUDA tensors under PyTorch's MemTracker), shared by bench/oracle_dpo.py and bench/oracle_grpo.py. Runs in the
oracle's own environment (its README: torch 2.13 CPU + transformers 5.18); nothing here is imported by planner/.
"""

from __future__ import annotations

import csv
import gc
import json
import sys
from collections.abc import Callable
from pathlib import Path

ORACLE = Path(__file__).resolve().parents[2] / "shared" / "tools" / "oracle"
sys.path.insert(0, str(ORACLE))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # planner.measure.dpo_step needs torch only

import fakecuda  # noqa: E402  (the oracle's, from ORACLE)
import oracle  # noqa: E402
import torch  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

# the oracle's "T" model: 4 Llama layers, h 512, GQA 8/2, V 32,000 (44.8 M parameters)
MODEL = dict(arch="llama", hidden=512, layers=4, heads=8, kv_heads=2, intermediate=1536, vocab=32000)


def traced(c: dict, setup: Callable) -> dict:
    """c["steps"] steps of the loss `setup(c)` builds under fake CUDA: (the policy, the other tensors and modules to
    track, a call that returns the step's loss); each step's backward, clip_grad_norm_, the oracle's optimizer step
    and zero_grad, as HF's Trainer runs them, the loss under the Trainer's autocast. The peak, where it happened
    and each step's peak."""
    fakecuda.install()
    oracle.hf_fake_patches()
    torch.manual_seed(0)
    gc.collect()
    gc.disable()
    try:
        with FakeTensorMode(allow_non_fake_inputs=False):
            model, tracked, step_loss = setup(c)
            n_params, _ = oracle.count_params(model)
            opt = oracle.make_optimizer(c, model)
            tr = oracle.OracleTracker()
            tr.track_external(model, *tracked, opt)
            step_peaks = []
            with tr:
                for step in range(c["steps"]):
                    tr.step_tag = str(step)
                    with oracle.autocast_ctx(c, "cuda"):  # the Trainer's compute_loss_context_manager
                        loss = step_loss()
                    loss.backward()
                    del loss
                    torch.nn.utils.clip_grad_norm_(list(model.parameters()), c["grad_clip"], foreach=True)
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    step_peaks.append(tr.peak()["Total"])
                    if step == 0:
                        tr.reset_mod_stats()
                    gc.collect(1)
            peak = tr.peak()
    finally:
        gc.enable()
    return {"c": c, "n_params": n_params, "peak": peak, "where": tr.peak_where, "step_peaks": step_peaks}


def measured(res: dict) -> dict:
    """The columns every oracle row ends with: its parameters, peak, where it happened and each step's peak."""
    where = res["where"]
    return {
        "n_params": res["n_params"],
        "peak_bytes": res["peak"]["Total"],
        "peak_phase": where["phase"],
        "peak_op": where["op"],
        "peak_module": where["module"],
        "step_peaks_gib": " ".join(f"{x / 2**30:.4f}" for x in res["step_peaks"]),
    }


def main(configs: list[dict], run: Callable, row: Callable, out: Path, columns: list[str]) -> None:
    """Run every configuration, print each row with its breakdown, and with --write put the rows in `out`."""
    rows = []
    for c in configs:
        res = run(c)
        rows.append(row(res))
        print(json.dumps({**rows[-1], "breakdown": {str(k): v for k, v in res["peak"].items()}}), flush=True)
    if "--write" in sys.argv:
        with out.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
