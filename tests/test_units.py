from planner.units import GB, GiB, MiB, counted, format_bytes, from_gb, from_gib, to_unit


def test_binary_and_decimal_units_are_kept_apart():
    assert GiB == 1_073_741_824 and GB == 1_000_000_000
    assert format_bytes(80 * GB, "GB") == "80.00 GB"
    assert format_bytes(80 * GB, "GiB") == "74.51 GiB"


def test_format_bytes_units_and_digits():
    assert format_bytes(3 * MiB + MiB // 2, "MiB", 1) == "3.5 MiB"
    assert format_bytes(1234, "B") == "1,234 B"
    assert format_bytes(0) == "0.00 GiB"


def test_conversions_round_trip():
    assert from_gib(1.5) == 3 * GiB // 2
    assert from_gb(0.5) == 500_000_000
    assert to_unit(GiB, "MiB") == 1024.0


def test_a_count_reads_with_its_noun():
    assert [counted(n, "sequence") for n in (0, 1, 2, 2048)] == [
        "0 sequences",
        "1 sequence",
        "2 sequences",
        "2,048 sequences",
    ]
