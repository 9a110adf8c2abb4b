import pytest
import yaml

from planner.catalog import CATALOG_PATH, load_catalog, parse_catalog
from planner.errors import PlanError

RAW = yaml.safe_load(CATALOG_PATH.read_text())


def text(gpus):
    return yaml.safe_dump({"schema": "vram-planner-catalog/v1", "gpus": gpus})


def test_project_catalog_loads():
    catalog = load_catalog()
    h100 = catalog["h100-sxm-80gb"]
    assert h100.usable_bytes == round(79.18 * 2**30)  # what CUDA sees: nvidia-smi's 81,559 MiB less ~480 reserved
    # the driver reserves part of every card: CUDA sees less than its label read as GiB (Gaudi 3: no reading yet)
    assert all(g.usable_memory_gib < g.memory_gb for g in catalog.values() if g.id != "gaudi3-128gb")
    assert len(catalog) >= 25
    # a price comes with its provider, date and URL, or none of them does (no verified on-demand price)
    for g in catalog.values():
        fields = (g.price_usd_per_hour, g.price_provider, g.price_date, g.price_url)
        assert all(f is not None for f in fields) or all(f is None for f in fields), g.id
    assert catalog["v100-sxm2-16gb"].bf16_tflops is None and catalog["v100-sxm2-16gb"].fp16_tflops


def test_missing_unknown_duplicate_and_unit_errors_name_entry_and_field():
    entry = dict(RAW["gpus"][0])
    missing = {k: v for k, v in entry.items() if k != "fp32_tflops"}
    with pytest.raises(PlanError) as err:
        parse_catalog(text([missing]))
    assert str(err.value) == ("gpu_catalog h100-sxm-80gb.fp32_tflops: missing (use null where a figure does"
                              " not exist)")
    with pytest.raises(PlanError, match=r"^gpu_catalog h100-sxm-80gb.memory_tb: unknown field"):
        parse_catalog(text([{**entry, "memory_tb": 1}]))
    with pytest.raises(PlanError, match=r"^gpu_catalog h100-sxm-80gb: duplicate id$"):
        parse_catalog(text([entry, entry]))
    with pytest.raises(PlanError) as err:
        parse_catalog(text([{**entry, "usable_memory_gib": 85.5}]))
    assert str(err.value) == ("gpu_catalog h100-sxm-80gb.usable_memory_gib: 85.5 exceeds memory_gb (80); "
                              "usable memory is a GiB (2^30 B) figure below the label")
    with pytest.raises(PlanError, match=r"memory_bandwidth_tb_per_s: '3 TB/s' must be a positive number"):
        parse_catalog(text([{**entry, "memory_bandwidth_tb_per_s": "3 TB/s"}]))


def test_file_level_errors(tmp_path):
    with pytest.raises(PlanError, match=r"^gpu_catalog: must be a mapping with exactly the keys"):
        parse_catalog("- 1")
    with pytest.raises(PlanError, match=r"^gpu_catalog.schema: 'v0' is not"):
        parse_catalog(yaml.safe_dump({"schema": "v0", "gpus": []}))
    with pytest.raises(PlanError, match=r"^gpu_catalog: nested too deeply to be a catalog$"):
        parse_catalog("gpus: " + "[" * 5000 + "]" * 5000)
    with pytest.raises(PlanError, match=r"^gpu_catalog: 2,000,006 bytes is larger than the 1,048,576-byte limit$"):
        parse_catalog("gpus: " + "x" * 2_000_000)
    with pytest.raises(PlanError, match=r"^--catalog: cannot read"):
        load_catalog(tmp_path / "none.yaml")
    own = tmp_path / "mine.yaml"
    own.write_text(text([{**RAW["gpus"][0], "id": "my-h100", "price_usd_per_hour": 1.5}]))
    assert load_catalog(own)["my-h100"].price_usd_per_hour == 1.5


def test_a_duplicated_key_in_an_entry_is_refused_not_the_last_one_kept():
    entry = yaml.safe_dump({"schema": "vram-planner-catalog/v1", "gpus": [RAW["gpus"][0]]}, sort_keys=False)
    doubled = entry.replace("  usable_memory_gib: 79.18\n", "  usable_memory_gib: 79.18\n  usable_memory_gib: 10\n")
    assert doubled != entry
    with pytest.raises(PlanError) as err:
        parse_catalog(doubled)
    line = doubled.splitlines().index("  usable_memory_gib: 10") + 1
    assert str(err.value) == f"gpu_catalog gpus[0].usable_memory_gib: duplicated key (line {line})"
