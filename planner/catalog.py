"""The GPU catalog: loading and validating `planner/data/gpu_catalog.yaml` (or a user's own file)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache
from pathlib import Path
from typing import Any

from planner.errors import PlanError, bad
from planner.loader import CATALOG, load_yaml
from planner.units import from_gib

CATALOG_PATH = Path(__file__).resolve().parent / "data" / "gpu_catalog.yaml"
CATALOG_SCHEMA = "vram-planner-catalog/v1"


@dataclass(frozen=True, kw_only=True)
class Gpu:
    id: str
    name: str
    vendor: str
    memory_gb: float  # as sold, decimal GB
    usable_memory_gib: float  # what CUDA can hand out (cudaMemGetInfo's total: nvidia-smi's Total less Reserved), GiB
    usable_memory_source: str
    memory_type: str
    memory_bandwidth_tb_per_s: float
    bf16_tflops: float | None  # dense; None where the GPU has no such tensor-core path
    fp16_tflops: float | None
    fp8_tflops: float | None
    fp32_tflops: float
    interconnect: str
    gpus_per_node: int
    price_usd_per_hour: float | None  # on-demand, per GPU
    price_provider: str | None
    price_date: str | None
    price_url: str | None
    spec_source: str
    # What the time model needs beyond the datasheet (planner/perf/rates.py), each measured or stated with its
    # source in perf_source. Optional in a user's catalog: the time model then says which default it took.
    # fraction of the dense bf16/fp16 peak large GEMMs sustain (above 1 where the datasheet's figure is the
    # half-rate one of a GeForce-class card)
    matmul_efficiency: float | None = None
    fp8_matmul_efficiency: float | None = None  # the same for fp8 GEMMs
    link_gb_per_s: float | None = None  # per GPU and direction into the fast domain (NVLink, xGMI; else PCIe)
    peer_gb_per_s: float | None = None  # to one peer, where less than the link (a mesh of point-to-point links)
    fast_domain_gpus: int | None = None  # GPUs that reach each other at link_gb_per_s
    pcie_gb_per_s: float | None = None  # host link per direction
    network_gb_per_s: float | None = None  # scale-out network per GPU and direction
    allreduce_busbw_gb_per_s: float | None = None  # measured all-reduce bus bandwidth over the whole fast domain
    perf_source: str | None = None

    @property
    def usable_bytes(self) -> int:
        return from_gib(self.usable_memory_gib)


_FIELDS = {f.name: f for f in fields(Gpu)}
_TEXT = {"id", "name", "vendor", "usable_memory_source", "memory_type", "interconnect", "spec_source"}
_OPTIONAL_TEXT = {"price_provider", "price_date", "price_url", "perf_source"}
_MAY_BE_ABSENT = {"matmul_efficiency", "fp8_matmul_efficiency", "link_gb_per_s", "peer_gb_per_s", "fast_domain_gpus",
                  "pcie_gb_per_s", "network_gb_per_s", "allreduce_busbw_gb_per_s", "perf_source"}
_POSITIVE = {"memory_gb", "usable_memory_gib", "memory_bandwidth_tb_per_s", "fp32_tflops"}
_OPTIONAL_POSITIVE = {"bf16_tflops", "fp16_tflops", "fp8_tflops", "price_usd_per_hour", "link_gb_per_s", "peer_gb_per_s",
                      "pcie_gb_per_s", "network_gb_per_s", "allreduce_busbw_gb_per_s"}
_FRACTIONS = {"matmul_efficiency", "fp8_matmul_efficiency"}


def _check_entry(index: int, entry: Any) -> Gpu:
    label = f"gpu_catalog gpus[{index}]"
    if not isinstance(entry, dict):
        raise PlanError(label, "must be a mapping of GPU fields")
    if isinstance(entry.get("id"), str):
        label = f"gpu_catalog {entry['id']}"
    for key in entry:
        if key not in _FIELDS:
            raise PlanError(f"{label}.{key}", f"unknown field; allowed fields are: {', '.join(_FIELDS)}")
    for key in _FIELDS:
        if key not in entry and key not in _MAY_BE_ABSENT:
            raise PlanError(f"{label}.{key}", "missing (use null where a figure does not exist)")
    for key, value in entry.items():
        where = f"{label}.{key}"
        if key in _TEXT and (not isinstance(value, str) or not value):
            raise bad(where, value, "must be non-empty text")
        if key in _OPTIONAL_TEXT and value is not None and not isinstance(value, str):
            raise bad(where, value, "must be text or null")
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if key in _POSITIVE and not (is_number and value > 0):
            raise bad(where, value, "must be a positive number in the unit its name gives")
        if key in _OPTIONAL_POSITIVE and value is not None and not (is_number and value > 0):
            raise bad(where, value, "must be a positive number or null")
        if key in _FRACTIONS and value is not None and not (is_number and 0 < value <= 2):
            raise bad(where, value, "must be a fraction of the dense peak above 0 and at most 2, or null")
    for key in ("gpus_per_node", "fast_domain_gpus"):
        value = entry.get(key, 1)
        if key == "fast_domain_gpus" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1024:
            raise bad(f"{label}.{key}", value, "must be an integer from 1 to 1024")
    # vendors' "80 GB" HBM is 80 GiB physically, so the usable GiB can approach but never pass the label's number
    if entry["usable_memory_gib"] > entry["memory_gb"]:
        raise bad(f"{label}.usable_memory_gib", entry["usable_memory_gib"], f"exceeds memory_gb "
                  f"({entry['memory_gb']}); usable memory is a GiB (2^30 B) figure below the label")
    return Gpu(**entry)


def parse_catalog(text: str) -> dict[str, Gpu]:
    """Validate catalog YAML text; the result maps GPU id to its entry, in file order."""
    raw = load_yaml(text, CATALOG)
    if not isinstance(raw, dict) or set(raw) != {"schema", "gpus"}:
        raise PlanError("gpu_catalog", "must be a mapping with exactly the keys 'schema' and 'gpus'")
    if raw["schema"] != CATALOG_SCHEMA:
        raise bad("gpu_catalog.schema", raw["schema"], f"is not {CATALOG_SCHEMA!r}")
    if not isinstance(raw["gpus"], list) or not raw["gpus"]:
        raise PlanError("gpu_catalog.gpus", "must be a non-empty list")
    catalog: dict[str, Gpu] = {}
    for index, entry in enumerate(raw["gpus"]):
        gpu = _check_entry(index, entry)
        if gpu.id in catalog:
            raise PlanError(f"gpu_catalog {gpu.id}", "duplicate id")
        catalog[gpu.id] = gpu
    return catalog


@cache
def _load_default() -> dict[str, Gpu]:
    return parse_catalog(CATALOG_PATH.read_text())


def load_catalog(path: str | Path | None = None) -> dict[str, Gpu]:
    """The project's catalog, or the user's file at `path`."""
    if path is None:
        return _load_default()
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise PlanError("--catalog", f"cannot read {str(path)!r} ({exc.strerror})") from None
    return parse_catalog(text)
