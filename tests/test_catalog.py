import re
from pathlib import Path

import pytest
import yaml

from planner.catalog import (
    CATALOG_PATH,
    CHECKOUT_CATALOG,
    DEFAULT_HOST_GIB_PER_GPU,
    PACKAGED_CATALOG,
    Catalog,
    check_offering,
    generic_offering,
    load_catalog,
    offering_view,
    parse_catalog,
    parse_offerings,
    plan_gpu,
)
from planner.errors import PlanError

RAW = yaml.safe_load(CATALOG_PATH.read_text())
ROOT = Path(__file__).resolve().parent.parent
# an offering as a user writes one: "our cluster: 512 × H100, 8 per node, 400 Gb/s per GPU, $2.10/h"
OURS = {
    "id": "our-cluster",
    "gpu": "h100-sxm-80gb",
    "provider": "us",
    "provider_class": "own",
    "instance": "8x node",
    "gpus_per_instance": 8,
    "instance_link": "fabric",
    "host_memory_gib_per_gpu": 256,
    "cpu_cores_per_gpu": 16,
    "network": "infiniband",
    "network_gbit_per_s_per_gpu": 400,
    "max_gpus": 512,
    "spec_source": "our wiki",
    "prices": [{"kind": "on_demand", "usd_per_gpu_hour": 2.10, "date": "2026-11-01", "source": "our finance team"}],
}


def text(gpus, offerings=()):
    return yaml.safe_dump({"schema": "vram-planner-catalog/v2", "gpus": gpus, "offerings": list(offerings)})


def test_project_catalog_loads_from_the_top_of_the_checkout_and_the_package_ships_the_same_file():
    assert CATALOG_PATH == CHECKOUT_CATALOG == ROOT / "gpu_catalog.yaml"
    assert PACKAGED_CATALOG.read_text() == CHECKOUT_CATALOG.read_text()  # the package's copy links to it
    catalog = load_catalog()
    h100 = catalog["h100-sxm-80gb"]
    assert h100.usable_bytes == round(79.18 * 2**30)  # what CUDA sees: nvidia-smi's 81,559 MiB less ~480 reserved
    # the driver reserves part of every card: CUDA sees less than its label read as GiB (Gaudi 3: no reading yet)
    assert all(g.usable_memory_gib < g.memory_gb for g in catalog.values() if g.id != "gaudi3-128gb")
    assert len(catalog) >= 25
    assert catalog["v100-sxm2-16gb"].bf16_tflops is None and catalog["v100-sxm2-16gb"].fp16_tflops


def test_project_offerings_are_dated_sourced_and_rentable_as_described():
    catalog = load_catalog()
    assert len(catalog.offerings) >= 100
    for o in catalog.offerings.values():
        assert o.gpu in catalog
        assert all(re.fullmatch(r"20\d\d-\d\d(-\d\d)?", p.date) and p.source for p in o.prices), o.id
        if o.network == "none":  # a single instance: no plan spans two
            assert o.max_gpus == o.gpus_per_instance and o.refuses(o.gpus_per_instance + 1), o.id
    # several offerings of the GPUs people train on, from more than one kind of provider
    for gpu in ("h100-sxm-80gb", "h200-sxm-141gb", "b200-180gb", "a100-sxm-80gb", "mi300x-192gb"):
        offered = catalog.offerings_of(gpu)
        assert len(offered) >= 4 and len({o.provider_class for o in offered}) >= 2, gpu
    gh200 = catalog.offerings_of("gh200-96gb")  # rented as a single GPU with its Grace memory, no cluster network
    assert gh200 and all(o.gpus_per_instance == 1 and o.network == "none" for o in gh200)
    oldest, newest = catalog.price_dates()
    assert oldest < newest and newest >= "2026-09"


def test_an_offering_shapes_the_gpu_the_time_model_sees():
    catalog = load_catalog()
    h100 = catalog["h100-sxm-80gb"]
    ours = check_offering("x", OURS)
    view = offering_view(h100, ours)
    assert (view.gpus_per_node, view.fast_domain_gpus, view.network_gb_per_s) == (8, 8, 50.0)
    pcie = offering_view(h100, check_offering("x", {**OURS, "instance_link": "pcie"}))
    assert pcie.link_gb_per_s is None and pcie.allreduce_busbw_gb_per_s is None and pcie.fast_domain_gpus == 8
    unpublished = offering_view(h100, check_offering("x", {**OURS, "network_gbit_per_s_per_gpu": None}))
    assert unpublished.network_gb_per_s == h100.network_gb_per_s  # the GPU's usual network is assumed
    # a plan naming no offering runs on the GPU's usual server: its view is the GPU itself
    assert offering_view(h100, generic_offering(h100)) == h100


def test_whole_instances_are_rented_and_a_plan_spans_instances_only_over_a_network():
    ours = check_offering("x", OURS)
    assert (ours.instances(12), ours.paid_gpus(12), ours.paid_gpus(3)) == (2, 16, 8)
    assert ours.refuses(512) is None
    assert ours.refuses(513) == "our-cluster sells clusters of at most 512 GPUs"
    single = check_offering("x", {**OURS, "network": "none", "network_gbit_per_s_per_gpu": None, "max_gpus": 8})
    assert single.refuses(16) == (
        "our-cluster sells single 8-GPU instances with no network between them: 16 GPUs would span 2"
    )
    catalog = Catalog(load_catalog().gpus, {"our-cluster": single})
    with pytest.raises(PlanError) as err:
        plan_gpu(catalog, "h100-sxm-80gb", "our-cluster", 16)
    assert (err.value.field, err.value.value) == ("hardware.count", 16)
    assert plan_gpu(catalog, "h100-sxm-80gb", "our-cluster", 8)[1] == 256 * 2**30
    assert plan_gpu(catalog, "h100-sxm-80gb", None, 64)[1] == DEFAULT_HOST_GIB_PER_GPU * 2**30
    with pytest.raises(
        PlanError,
        match=r"^hardware.offering: 'nope' is not an offering of h100-sxm-80gb in the "
        r"catalog; known: our-cluster$",
    ):
        plan_gpu(catalog, "h100-sxm-80gb", "nope", 8)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"network": "none"},
            "offering our-cluster.network_gbit_per_s_per_gpu: 400 must be null where network is none",
        ),
        (
            {"network": "pigeon"},
            "offering our-cluster.network: 'pigeon' must be one of: none, ethernet, infiniband, roce, efa",
        ),
        ({"max_gpus": 4}, "offering our-cluster.max_gpus: 4 must be at least gpus_per_instance (8)"),
        ({"gpus_per_instance": 0}, "offering our-cluster.gpus_per_instance: 0 must be an integer from 1 to 1,048,576"),
        (
            {"prices": [{"kind": "spot", "usd_per_gpu_hour": 1, "date": "soon", "source": "x"}]},
            "offering our-cluster.prices[0].date: 'soon' must be a quoted date YYYY-MM-DD or YYYY-MM",
        ),
        (
            {"prices": [{"kind": "spot", "usd_per_gpu_hour": -1, "date": "2026-01", "source": "x"}]},
            "offering our-cluster.prices[0].usd_per_gpu_hour: -1 must be a price above 0 and at most 10,000 USD per "
            "GPU-hour",
        ),
        (
            {"prices": [{"kind": "spot", "usd_per_gpu_hour": 1, "date": "2026-01", "source": "x"}] * 2},
            "offering our-cluster.prices: has two prices of one kind; keep the one the offering is rented at",
        ),
        (
            {"id": "Our Cluster"},
            "offering Our Cluster.id: 'Our Cluster' must be lowercase letters, digits, '.' and '-' (at most 100)",
        ),
        (
            {"speed": 1},
            "offering our-cluster.speed: unknown field; allowed fields are: id, gpu, provider, provider_class, "
            "instance, gpus_per_instance, instance_link, host_memory_gib_per_gpu, cpu_cores_per_gpu, network, "
            "network_gbit_per_s_per_gpu, max_gpus, spec_source, prices, note",
        ),
    ],
)
def test_offering_errors_name_the_offering_and_field(change, message):
    with pytest.raises(PlanError) as err:
        check_offering("offerings[0]", {**OURS, **change})
    assert str(err.value) == message


def test_an_offerings_file_adds_to_the_catalog_and_names_unknown_gpus(tmp_path):
    mine = tmp_path / "ours.yaml"
    mine.write_text(yaml.safe_dump({"schema": "vram-planner-offerings/v1", "offerings": [OURS]}))
    catalog = load_catalog(offerings=[mine])
    assert catalog.offerings["our-cluster"].prices[0].usd_per_gpu_hour == 2.10
    assert len(catalog.offerings) == len(load_catalog().offerings) + 1
    with pytest.raises(PlanError) as err:
        parse_offerings(
            yaml.safe_dump({"schema": "vram-planner-offerings/v1", "offerings": [{**OURS, "gpu": "h900"}]}),
            load_catalog(),
        )
    assert str(err.value).startswith("offering our-cluster.gpu: 'h900' is not a GPU of the catalog; known: h100-sxm")
    with pytest.raises(PlanError, match=r"^offerings.schema: 'v9' is not 'vram-planner-offerings/v1'$"):
        parse_offerings(yaml.safe_dump({"schema": "v9", "offerings": []}), load_catalog())


def test_missing_unknown_duplicate_and_unit_errors_name_entry_and_field():
    entry = dict(RAW["gpus"][0])
    missing = {k: v for k, v in entry.items() if k != "fp32_tflops"}
    with pytest.raises(PlanError) as err:
        parse_catalog(text([missing]))
    assert str(err.value) == ("gpu_catalog h100-sxm-80gb.fp32_tflops: missing (use null where a figure does not exist)")
    with pytest.raises(PlanError, match=r"^gpu_catalog h100-sxm-80gb.memory_tb: unknown field"):
        parse_catalog(text([{**entry, "memory_tb": 1}]))
    with pytest.raises(PlanError, match=r"^gpu_catalog h100-sxm-80gb: duplicate id$"):
        parse_catalog(text([entry, entry]))
    with pytest.raises(PlanError) as err:
        parse_catalog(text([{**entry, "usable_memory_gib": 85.5}]))
    assert str(err.value) == (
        "gpu_catalog h100-sxm-80gb.usable_memory_gib: 85.5 exceeds memory_gb (80); "
        "usable memory is a GiB (2^30 B) figure below the label"
    )
    with pytest.raises(PlanError, match=r"memory_bandwidth_tb_per_s: '3 TB/s' must be a positive number"):
        parse_catalog(text([{**entry, "memory_bandwidth_tb_per_s": "3 TB/s"}]))
    with pytest.raises(PlanError, match=r"^offering our-cluster: duplicate id$"):
        parse_catalog(text([entry], [OURS, OURS]))


def test_file_level_errors(tmp_path):
    with pytest.raises(
        PlanError,
        match=r"^gpu_catalog: must be a mapping with exactly the keys 'schema', 'gpus' "
        r"and 'offerings'$",
    ):
        parse_catalog("- 1")
    with pytest.raises(PlanError, match=r"^gpu_catalog.schema: 'v0' is not"):
        parse_catalog(yaml.safe_dump({"schema": "v0", "gpus": [], "offerings": []}))
    with pytest.raises(
        PlanError,
        match=r"^gpu_catalog.schema: vram-planner-catalog/v1 is the old format: move each "
        r"GPU's price_\* fields into an entry of 'offerings'",
    ):
        parse_catalog(yaml.safe_dump({"schema": "vram-planner-catalog/v1", "gpus": []}))
    with pytest.raises(PlanError, match=r"^gpu_catalog: nested too deeply to be a catalog$"):
        parse_catalog("gpus: " + "[" * 5000 + "]" * 5000)
    with pytest.raises(PlanError, match=r"^gpu_catalog: 2,000,006 bytes is larger than the 1,048,576-byte limit$"):
        parse_catalog("gpus: " + "x" * 2_000_000)
    with pytest.raises(PlanError, match=r"^--catalog: cannot read"):
        load_catalog(tmp_path / "none.yaml")
    own = tmp_path / "mine.yaml"
    own.write_text(text([{**RAW["gpus"][0], "id": "my-h100"}], [{**OURS, "gpu": "my-h100"}]))
    assert load_catalog(own).offerings_of("my-h100")[0].id == "our-cluster"


def test_a_duplicated_key_in_an_entry_is_refused_not_the_last_one_kept():
    entry = yaml.safe_dump(
        {"schema": "vram-planner-catalog/v2", "gpus": [RAW["gpus"][0]], "offerings": []}, sort_keys=False
    )
    doubled = entry.replace("  usable_memory_gib: 79.18\n", "  usable_memory_gib: 79.18\n  usable_memory_gib: 10\n")
    assert doubled != entry
    with pytest.raises(PlanError) as err:
        parse_catalog(doubled)
    line = doubled.splitlines().index("  usable_memory_gib: 10") + 1
    assert str(err.value) == f"gpu_catalog gpus[0].usable_memory_gib: duplicated key (line {line})"


def test_a_hexadecimal_figure_past_30_digits_is_the_catalogs_error():
    """An uploaded catalog's figure in any integer notation: one PlanError (the page shows it), not a traceback
    from writing a 4,800-digit number into the error."""
    shipped = CATALOG_PATH.read_text()
    with pytest.raises(PlanError) as err:
        parse_catalog(shipped.replace("memory_gb: 80\n", "memory_gb: 0x" + "f" * 4000 + "\n", 1))
    assert str(err.value) == "gpu_catalog: holds an integer of more than 30 digits; that is not a catalog"
