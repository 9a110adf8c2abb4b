"""Measuring a serving plan (workload.inference.gpu_memory_utilization) with vLLM: the plan's model with random
weights saved to a temporary folder, served with the plan's fraction, batch and context, and the device memory
nvidia-smi reports for the whole GPU once the batch is generated, less what was used before. vLLM's engine runs
in its own process, so the allocator's peaks of this process say nothing: only device memory is measured.
Imported only through `planner.measure.plan.load_runner` (vLLM installed beside the `measure` extra).
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

import torch
import transformers
import vllm

from planner.measure.plan import hf_config, max_positions, nvidia_smi, versions
from planner.measure.run import DTYPES, build, cuda_available

__all__ = ["cuda_available", "measure"]  # what planner.measure.plan.runner_for asks of a runner

VLLM_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}  # vllm.LLM's dtype names


def measure(config: dict, device: str = "cuda", steps: int = 0) -> dict:
    """Serve the plan's batch once; `steps` is the training runner's and unused by a serving run."""
    plan = config["plan"]
    inf, prec = plan["workload"]["inference"], plan["precision"]
    used = nvidia_smi("memory.used")
    baseline = int(used[0]) * 2**20 if used else 0
    cls, kwargs = hf_config(config["arch"], plan["model"], max_positions(plan))
    result: dict[str, Any] = {
        "status": "ok",
        "error": "",
        **versions(),
        "device": torch.cuda.get_device_name(0),
        "cuda_version": torch.version.cuda or "",
        "device_total_bytes": torch.cuda.mem_get_info()[1],
    }
    with tempfile.TemporaryDirectory() as tmp:
        model = build(getattr(transformers, cls)(**kwargs), DTYPES[prec.get("compute", "bf16")], device, "sdpa")
        model.save_pretrained(tmp)
        del model
        torch.cuda.empty_cache()
        llm = vllm.LLM(
            model=tmp,
            skip_tokenizer_init=True,
            dtype=VLLM_DTYPES[prec.get("compute", "bf16")],
            gpu_memory_utilization=inf["gpu_memory_utilization"],
            max_model_len=max_positions(plan),
            max_num_seqs=inf.get("max_num_seqs") or inf.get("batch_size", 1),
            enforce_eager=not inf.get("cuda_graphs", True),
        )
        prompts = [
            {"prompt_token_ids": [i % plan["model"]["vocab_size"]] * inf.get("prompt_tokens", 1024)}
            for i in range(inf.get("batch_size", 1))
        ]
        t0 = time.perf_counter()
        llm.generate(
            prompts, vllm.SamplingParams(max_tokens=inf.get("output_tokens", 256), ignore_eos=True, detokenize=False)
        )
        result["wall_s"] = round(time.perf_counter() - t0, 3)
        now_used = nvidia_smi("memory.used")
    driver = nvidia_smi("driver_version")
    return result | {
        "driver_version": driver[0] if driver else "",
        "device_bytes": int(now_used[0]) * 2**20 - baseline if now_used else None,
        "device_bytes_source": "nvidia-smi memory.used with the engine up, minus before",
    }
