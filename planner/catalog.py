"""The GPU catalog: GPU types (specs, usable memory, measured rates) and the offerings they are rented as
(instance shape, network between instances, largest cluster, dated prices).

The catalog a user edits is `gpu_catalog.yaml` at the top of a checkout; the installed package ships the same
file as `planner/data/gpu_catalog.yaml` (a link to it in the checkout), read where there is no checkout. A
user's own catalog replaces it (`--catalog`), and a file of offerings adds to it (`--offerings`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, fields, replace
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Literal, get_args

from planner.errors import PlanError, bad
from planner.loader import CATALOG, DATA_DIR, load_yaml
from planner.units import from_gib

PACKAGED_CATALOG = DATA_DIR / "gpu_catalog.yaml"
CHECKOUT_CATALOG = Path(__file__).resolve().parent.parent / "gpu_catalog.yaml"
CATALOG_PATH = CHECKOUT_CATALOG if CHECKOUT_CATALOG.is_file() else PACKAGED_CATALOG
CATALOG_SCHEMA = "vram-planner-catalog/v2"
OFFERINGS_SCHEMA = "vram-planner-offerings/v1"
# Host RAM per GPU where neither the plan nor its offering says: cloud 8-GPU instances come with 1-2 TB
# (AWS p5 2 TiB, Lambda 8x H100 1.8 TiB: 128-256 GiB per GPU); the smaller end, so offload is not over-promised.
DEFAULT_HOST_GIB_PER_GPU = 128

PriceKind = Literal["on_demand", "reserved", "spot"]
ProviderClass = Literal["hyperscaler", "neocloud", "marketplace", "own"]
# fabric: the GPUs of one instance reach each other over the GPU's own scale-up links (NVLink, Infinity Fabric,
# Gaudi's scale-up RoCE) at the speed its GPU entry gives; pcie: over the host's PCIe only
InstanceLink = Literal["fabric", "pcie"]
Network = Literal["none", "ethernet", "infiniband", "roce", "efa"]


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
    gpus_per_node: int  # of the GPU's usual server; an offering's instance shape replaces it
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
    # scale-out network per GPU and direction of the GPU's usual cluster; an offering's network replaces it
    network_gb_per_s: float | None = None
    allreduce_busbw_gb_per_s: float | None = None  # measured all-reduce bus bandwidth over the whole fast domain
    perf_source: str | None = None
    sm_count: int | None = None  # streaming multiprocessors (AMD: compute units): a matmul's tiles run on them
    sm_source: str | None = None

    @property
    def usable_bytes(self) -> int:
        return from_gib(self.usable_memory_gib)

    def __hash__(self) -> int:  # a GPU keys the time model's caches: its fields are hashed once
        if "_hash" not in self.__dict__:
            object.__setattr__(self, "_hash", hash(tuple(getattr(self, f.name) for f in fields(self))))
        return self.__dict__["_hash"]


@dataclass(frozen=True, kw_only=True)
class Price:
    kind: PriceKind
    usd_per_gpu_hour: float
    date: str  # as the source states it: YYYY-MM-DD, or YYYY-MM
    source: str
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class Offering:
    """A GPU type as it is rented: instances of `gpus_per_instance` GPUs, joined by `network` into clusters of
    up to `max_gpus`, at dated prices. A plan on more GPUs than one instance needs a network; a plan on fewer
    still rents (and pays for) the whole instance."""

    id: str
    gpu: str  # a GPU id of the catalog
    provider: str
    provider_class: ProviderClass
    instance: str  # the instance type's name as sold
    gpus_per_instance: int
    instance_link: InstanceLink
    host_memory_gib_per_gpu: float | None  # instance RAM ÷ GPUs; None: not published (the default is assumed)
    cpu_cores_per_gpu: float | None
    network: Network
    # scale-out line rate per GPU; None where network is none, or not published (the GPU's usual network is
    # then assumed)
    network_gbit_per_s_per_gpu: float | None
    max_gpus: int | None  # the largest cluster sold this way (one instance where network is none); None: unpublished
    spec_source: str
    prices: tuple[Price, ...]
    note: str = ""

    def price(self, kind: PriceKind) -> Price | None:
        return next((p for p in self.prices if p.kind == kind), None)

    def instances(self, count: int) -> int:
        """Instances rented for `count` GPUs (whole instances: part of one is paid in full)."""
        return -(-count // self.gpus_per_instance)

    def paid_gpus(self, count: int) -> int:
        return self.instances(count) * self.gpus_per_instance

    def refuses(self, count: int) -> str | None:
        """Why `count` GPUs cannot be rented this way (None: they can)."""
        if count > self.gpus_per_instance and self.network == "none":
            return (
                f"{self.id} sells single {self.gpus_per_instance}-GPU instances with no network between them: "
                f"{count:,} GPUs would span {self.instances(count):,}"
            )
        if self.max_gpus is not None and count > self.max_gpus:
            return f"{self.id} sells clusters of at most {self.max_gpus:,} GPUs"
        return None

    def host_bytes(self) -> int:
        return from_gib(self.host_memory_gib_per_gpu or DEFAULT_HOST_GIB_PER_GPU)


@lru_cache(maxsize=4096)
def offering_view(gpu: Gpu, offering: Offering) -> Gpu:
    """The GPU as the time model sees it on this offering: its node is the instance (NVLink-class links only
    where the instance has them, PCIe otherwise), its scale-out network the offering's (the GPU's usual one
    where the offering does not publish its rate)."""
    fabric = offering.instance_link == "fabric"
    per_instance, rate = offering.gpus_per_instance, offering.network_gbit_per_s_per_gpu
    network = None if offering.network == "none" else gpu.network_gb_per_s if rate is None else rate / 8
    return replace(
        gpu,
        gpus_per_node=per_instance,
        fast_domain_gpus=min(gpu.fast_domain_gpus or 1, per_instance) if fabric else per_instance,
        link_gb_per_s=gpu.link_gb_per_s if fabric else None,
        peer_gb_per_s=gpu.peer_gb_per_s if fabric else None,
        allreduce_busbw_gb_per_s=gpu.allreduce_busbw_gb_per_s if fabric else None,
        network_gb_per_s=network,
    )


def generic_offering(gpu: Gpu) -> Offering:
    """The GPU in its usual server, unpriced: what a plan naming no offering runs on (its view is the GPU
    itself), and what the recommender searches for a GPU type the catalog lists no offering of."""
    net = gpu.network_gb_per_s
    return Offering(
        id=f"{gpu.id}.server",
        gpu=gpu.id,
        provider="no offering in the catalog",
        provider_class="own",
        instance=f"{gpu.gpus_per_node}-GPU server",
        gpus_per_instance=gpu.gpus_per_node,
        instance_link="fabric",
        host_memory_gib_per_gpu=None,
        cpu_cores_per_gpu=None,
        network="none" if net is None else "infiniband" if net >= 25 else "ethernet",
        network_gbit_per_s_per_gpu=None if net is None else net * 8,
        max_gpus=gpu.gpus_per_node if net is None else 1_048_576,
        spec_source=gpu.spec_source,
        prices=(),
    )


class Catalog(Mapping[str, Gpu]):
    """GPU types by id (read like a dict of them) and the offerings they are rented as, by id."""

    def __init__(self, gpus: Mapping[str, Gpu], offerings: Mapping[str, Offering] | None = None) -> None:
        self.gpus, self.offerings = dict(gpus), dict(offerings or {})
        for o in self.offerings.values():
            if o.gpu not in self.gpus:
                raise bad(f"offering {o.id}.gpu", o.gpu, f"is not a GPU of the catalog; known: {', '.join(self.gpus)}")

    def __getitem__(self, gpu_id: str) -> Gpu:
        return self.gpus[gpu_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self.gpus)

    def __len__(self) -> int:
        return len(self.gpus)

    def offerings_of(self, gpu_id: str) -> list[Offering]:
        return [o for o in self.offerings.values() if o.gpu == gpu_id]

    def subset(self, gpu_ids: Iterable[str]) -> Catalog:
        """The catalog of these GPU types and their offerings."""
        keep = set(gpu_ids)
        return Catalog(
            {k: g for k, g in self.gpus.items() if k in keep},
            {k: o for k, o in self.offerings.items() if o.gpu in keep},
        )

    def with_offerings(self, extra: Iterable[Offering]) -> Catalog:
        """This catalog with `extra` offerings added (one with an id already listed replaces it)."""
        return Catalog(self.gpus, {**self.offerings, **{o.id: o for o in extra}})

    def price_dates(self) -> tuple[str, str] | None:
        """(oldest, newest) date of the offerings' prices, as written (None: no prices)."""
        dates = sorted(p.date for o in self.offerings.values() for p in o.prices)
        return (dates[0], dates[-1]) if dates else None


def offerings_of(catalog: Mapping[str, Gpu]) -> dict[str, Offering]:
    """The catalog's offerings (a bare mapping of GPUs, as tests build, has none)."""
    return catalog.offerings if isinstance(catalog, Catalog) else {}


def plan_gpu(catalog: Mapping[str, Gpu], gpu_id: str, offering_id: str | None, count: int) -> tuple[Gpu, int]:
    """(the plan's GPU as its offering shapes it, the host RAM per GPU in bytes the offering gives, or the default)
    for the plan keys hardware.gpu, hardware.offering and hardware.count (which the offering must rent)."""
    if gpu_id not in catalog:
        raise bad("hardware.gpu", gpu_id, f"is not in the GPU catalog; known: {', '.join(catalog)}")
    gpu = catalog[gpu_id]
    if offering_id is None:
        return gpu, from_gib(DEFAULT_HOST_GIB_PER_GPU)
    offering = offerings_of(catalog).get(offering_id)
    if offering is None or offering.gpu != gpu_id:
        known = [o.id for o in offerings_of(catalog).values() if o.gpu == gpu_id]
        raise bad(
            "hardware.offering",
            offering_id,
            f"is not an offering of {gpu_id} in the catalog; known: {', '.join(known) or 'none'}",
        )
    if why := offering.refuses(count):
        raise bad("hardware.count", count, f"cannot be rented as planned: {why}")
    return offering_view(gpu, offering), offering.host_bytes()


# --- Reading and checking a catalog file ---------------------------------------------------------------------
_FIELDS = {f.name: f for f in fields(Gpu)}
_TEXT = {"id", "name", "vendor", "usable_memory_source", "memory_type", "interconnect", "spec_source"}
_MAY_BE_ABSENT = {
    "matmul_efficiency",
    "fp8_matmul_efficiency",
    "link_gb_per_s",
    "peer_gb_per_s",
    "fast_domain_gpus",
    "pcie_gb_per_s",
    "network_gb_per_s",
    "allreduce_busbw_gb_per_s",
    "perf_source",
    "sm_count",
    "sm_source",
}
_POSITIVE = {"memory_gb", "usable_memory_gib", "memory_bandwidth_tb_per_s", "fp32_tflops"}
_OPTIONAL_POSITIVE = {
    "bf16_tflops",
    "fp16_tflops",
    "fp8_tflops",
    "link_gb_per_s",
    "peer_gb_per_s",
    "pcie_gb_per_s",
    "network_gb_per_s",
    "allreduce_busbw_gb_per_s",
}
_FRACTIONS = {"matmul_efficiency", "fp8_matmul_efficiency"}
_ID = re.compile(r"[a-z0-9][a-z0-9.-]{0,99}")
_DATE = re.compile(r"20\d\d-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01]))?")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_keys(label: str, entry: Any, allowed: Iterable[str], required: Iterable[str], noun: str) -> None:
    if not isinstance(entry, dict):
        raise PlanError(label, f"must be a mapping of {noun} fields")
    allowed = list(allowed)
    for key in entry:
        if key not in allowed:
            raise PlanError(f"{label}.{key}", f"unknown field; allowed fields are: {', '.join(allowed)}")
    for key in required:
        if key not in entry:
            raise PlanError(f"{label}.{key}", "missing (use null where a figure does not exist)")


def _check_entry(index: int, entry: Any) -> Gpu:
    label = f"gpu_catalog gpus[{index}]"
    if isinstance(entry, dict) and isinstance(entry.get("id"), str):
        label = f"gpu_catalog {entry['id']}"
    _check_keys(label, entry, _FIELDS, (k for k in _FIELDS if k not in _MAY_BE_ABSENT), "GPU")
    for key, value in entry.items():
        where = f"{label}.{key}"
        if key in _TEXT and (not isinstance(value, str) or not value):
            raise bad(where, value, "must be non-empty text")
        if key in ("perf_source", "sm_source") and value is not None and not isinstance(value, str):
            raise bad(where, value, "must be text or null")
        if key in _POSITIVE and not (_is_number(value) and value > 0):
            raise bad(where, value, "must be a positive number in the unit its name gives")
        if key in _OPTIONAL_POSITIVE and value is not None and not (_is_number(value) and value > 0):
            raise bad(where, value, "must be a positive number or null")
        if key in _FRACTIONS and value is not None and not (_is_number(value) and 0 < value <= 2):
            raise bad(where, value, "must be a fraction of the dense peak above 0 and at most 2, or null")
    for key in ("gpus_per_node", "fast_domain_gpus", "sm_count"):
        value = entry.get(key, 1)
        if key in ("fast_domain_gpus", "sm_count") and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1024:
            raise bad(f"{label}.{key}", value, "must be an integer from 1 to 1024")
    # vendors' "80 GB" HBM is 80 GiB physically, so the usable GiB can approach but never pass the label's number
    if entry["usable_memory_gib"] > entry["memory_gb"]:
        raise bad(
            f"{label}.usable_memory_gib",
            entry["usable_memory_gib"],
            f"exceeds memory_gb ({entry['memory_gb']}); usable memory is a GiB (2^30 B) figure below the label",
        )
    return Gpu(**entry)


_OFFERING_FIELDS = [f.name for f in fields(Offering)]
_PRICE_FIELDS = [f.name for f in fields(Price)]
_CHOICES = {"provider_class": ProviderClass, "instance_link": InstanceLink, "network": Network}


def _check_text(where: str, value: Any, optional: bool = False) -> None:
    if optional and value == "":
        return
    if not isinstance(value, str) or not value or len(value) > 2000:
        raise bad(where, value, "must be non-empty text of at most 2,000 characters")


def _check_price(label: str, entry: Any) -> Price:
    _check_keys(label, entry, _PRICE_FIELDS, ("kind", "usd_per_gpu_hour", "date", "source"), "price")
    if entry["kind"] not in get_args(PriceKind):
        raise bad(f"{label}.kind", entry["kind"], f"must be one of: {', '.join(get_args(PriceKind))}")
    usd = entry["usd_per_gpu_hour"]
    if not (_is_number(usd) and 0 < usd <= 10_000):
        raise bad(f"{label}.usd_per_gpu_hour", usd, "must be a price above 0 and at most 10,000 USD per GPU-hour")
    if not isinstance(entry["date"], str) or not _DATE.fullmatch(entry["date"]):
        raise bad(f"{label}.date", entry["date"], "must be a quoted date YYYY-MM-DD or YYYY-MM")
    _check_text(f"{label}.source", entry["source"])
    _check_text(f"{label}.note", entry.get("note", ""), optional=True)
    return Price(**entry)


def _check_shape(label: str, entry: dict) -> None:
    """The instance shape and network of an offering entry (its keys already checked)."""
    for key, choices in _CHOICES.items():
        if entry[key] not in get_args(choices):
            raise bad(f"{label}.{key}", entry[key], f"must be one of: {', '.join(get_args(choices))}")
    for key in ("gpus_per_instance", "max_gpus"):
        value = entry[key]
        if key == "max_gpus" and value is None and entry["network"] != "none":
            continue  # not published
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1_048_576:
            raise bad(
                f"{label}.{key}",
                value,
                "must be an integer from 1 to 1,048,576"
                + (" (or null where the largest cluster is not published)" if key == "max_gpus" else ""),
            )
    for key in ("host_memory_gib_per_gpu", "cpu_cores_per_gpu"):
        if entry[key] is not None and not (_is_number(entry[key]) and 0 < entry[key] <= 1_000_000):
            raise bad(f"{label}.{key}", entry[key], "must be a positive number or null")
    rate, network = entry["network_gbit_per_s_per_gpu"], entry["network"]
    if network == "none" and rate is not None:
        raise bad(f"{label}.network_gbit_per_s_per_gpu", rate, "must be null where network is none")
    if network != "none" and rate is not None and not (_is_number(rate) and 0 < rate <= 100_000):
        raise bad(
            f"{label}.network_gbit_per_s_per_gpu",
            rate,
            f"must be a positive Gb/s figure, or null where the {network} network's rate is not published",
        )
    if network == "none" and entry["max_gpus"] != entry["gpus_per_instance"]:
        raise bad(
            f"{label}.max_gpus",
            entry["max_gpus"],
            f"must equal gpus_per_instance ({entry['gpus_per_instance']}) where network is none",
        )
    if entry["max_gpus"] is not None and entry["max_gpus"] < entry["gpus_per_instance"]:
        raise bad(
            f"{label}.max_gpus", entry["max_gpus"], f"must be at least gpus_per_instance ({entry['gpus_per_instance']})"
        )


def check_offering(label: str, entry: Any) -> Offering:
    """One offering entry of a catalog or offerings file, every field checked with its path."""
    if isinstance(entry, dict) and isinstance(entry.get("id"), str):
        label = f"offering {entry['id']}"
    _check_keys(label, entry, _OFFERING_FIELDS, [k for k in _OFFERING_FIELDS if k != "note"], "offering")
    if not isinstance(entry["id"], str) or not _ID.fullmatch(entry["id"]):
        raise bad(f"{label}.id", entry["id"], "must be lowercase letters, digits, '.' and '-' (at most 100)")
    for key in ("gpu", "provider", "instance", "spec_source"):
        _check_text(f"{label}.{key}", entry[key])
    _check_text(f"{label}.note", entry.get("note", ""), optional=True)
    _check_shape(label, entry)
    if not isinstance(entry["prices"], list) or len(entry["prices"]) > 20:
        raise bad(f"{label}.prices", entry["prices"], "must be a list of at most 20 prices (empty: not priced)")
    prices = tuple(_check_price(f"{label}.prices[{i}]", p) for i, p in enumerate(entry["prices"]))
    kinds = [p.kind for p in prices]
    if len(set(kinds)) < len(kinds):
        raise PlanError(f"{label}.prices", "has two prices of one kind; keep the one the offering is rented at")
    return Offering(**{**entry, "prices": prices})


def _offerings(label: str, entries: Any) -> dict[str, Offering]:
    if not isinstance(entries, list):
        raise PlanError(label, "must be a list of offerings")
    found: dict[str, Offering] = {}
    for index, entry in enumerate(entries):
        offering = check_offering(f"{label}[{index}]", entry)
        if offering.id in found:
            raise PlanError(f"offering {offering.id}", "duplicate id")
        found[offering.id] = offering
    return found


def parse_catalog(text: str) -> Catalog:
    """Validate catalog YAML text: GPU entries by id (in file order) and their offerings."""
    raw = load_yaml(text, CATALOG)
    if isinstance(raw, dict) and raw.get("schema") == "vram-planner-catalog/v1":
        raise PlanError(
            "gpu_catalog.schema",
            "vram-planner-catalog/v1 is the old format: move each GPU's price_* "
            "fields into an entry of 'offerings' and write schema "
            f"{CATALOG_SCHEMA} (see the project's gpu_catalog.yaml)",
        )
    if not isinstance(raw, dict) or set(raw) != {"schema", "gpus", "offerings"}:
        raise PlanError("gpu_catalog", "must be a mapping with exactly the keys 'schema', 'gpus' and 'offerings'")
    if raw["schema"] != CATALOG_SCHEMA:
        raise bad("gpu_catalog.schema", raw["schema"], f"is not {CATALOG_SCHEMA!r}")
    if not isinstance(raw["gpus"], list) or not raw["gpus"]:
        raise PlanError("gpu_catalog.gpus", "must be a non-empty list")
    gpus: dict[str, Gpu] = {}
    for index, entry in enumerate(raw["gpus"]):
        gpu = _check_entry(index, entry)
        if gpu.id in gpus:
            raise PlanError(f"gpu_catalog {gpu.id}", "duplicate id")
        gpus[gpu.id] = gpu
    return Catalog(gpus, _offerings("gpu_catalog.offerings", raw["offerings"]))


def parse_offerings(text: str, catalog: Catalog) -> Catalog:
    """The catalog with the offerings of an offerings file (schema vram-planner-offerings/v1) added."""
    raw = load_yaml(text, CATALOG)
    if not isinstance(raw, dict) or set(raw) != {"schema", "offerings"}:
        raise PlanError("offerings", "must be a mapping with exactly the keys 'schema' and 'offerings'")
    if raw["schema"] != OFFERINGS_SCHEMA:
        raise bad("offerings.schema", raw["schema"], f"is not {OFFERINGS_SCHEMA!r}")
    return catalog.with_offerings(_offerings("offerings", raw["offerings"]).values())


@cache
def _load_default() -> Catalog:
    return parse_catalog(CATALOG_PATH.read_text())


def _read(path: str | Path, option: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise PlanError(option, f"cannot read {str(path)!r} ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise PlanError(option, f"{str(path)!r} is not a text file") from None


def load_catalog(path: str | Path | None = None, offerings: Iterable[str | Path] = ()) -> Catalog:
    """The project's catalog, or the user's file at `path`, with the offerings of each `offerings` file added."""
    catalog = _load_default() if path is None else parse_catalog(_read(path, "--catalog"))
    for file in offerings:
        catalog = parse_offerings(_read(file, "--offerings"), catalog)
    return catalog
