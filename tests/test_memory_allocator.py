"""The caching-allocator replay against hand-worked cases of PyTorch's rules (c10/cuda/CUDACachingAllocator.cpp)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.memory.allocator import CachingAllocator, pool_of, replay, round_size, segment_size
from planner.units import MiB


def test_rounding_pools_and_segments():
    assert [round_size(n) for n in (1, 512, 513, 1000)] == [512, 512, 1024, 1024]
    assert [pool_of(n) for n in (MiB, MiB + 1)] == ["small", "large"]
    # small pool: 2 MiB segments; under 10 MiB: 20 MiB segments; from 10 MiB: the request rounded to 2 MiB
    assert [segment_size(n) for n in (MiB, 9 * MiB, 10 * MiB, 11 * MiB + 1)] == [2 * MiB, 20 * MiB, 10 * MiB, 12 * MiB]


def test_small_requests_share_a_2_mib_segment():
    a = CachingAllocator()
    for _ in range(4):
        a.malloc(MiB // 2)
    assert (a.allocated_bytes, a.reserved_bytes) == (2 * MiB, 2 * MiB)
    a.malloc(MiB // 2)
    assert a.reserved_bytes == 4 * MiB


def test_medium_requests_share_a_20_mib_segment():
    a = CachingAllocator()
    for _ in range(3):  # 6 + 6 + 6 MiB split off one 20 MiB segment; the 2 MiB left is a block of its own
        a.malloc(6 * MiB)
    assert a.reserved_bytes == 20 * MiB
    a.malloc(6 * MiB)
    assert a.reserved_bytes == 40 * MiB


def test_a_hole_smaller_than_the_request_is_not_reused():
    a = CachingAllocator()
    first = a.malloc(12 * MiB)
    a.malloc(12 * MiB)
    a.free(first)
    a.malloc(14 * MiB)  # the freed 12 MiB segment cannot serve 14 MiB: a new segment
    assert (a.allocated_bytes, a.reserved_bytes, a.peak_allocated_bytes) == (26 * MiB, 38 * MiB, 26 * MiB)


def test_freed_neighbours_merge_and_serve_a_larger_request():
    a = CachingAllocator()
    blocks = [a.malloc(5 * MiB) for _ in range(4)]  # one 20 MiB segment, no remainder
    for b in blocks:
        a.free(b)
    a.malloc(20 * MiB)
    assert a.reserved_bytes == 20 * MiB


def test_best_fit_takes_the_smallest_block_that_serves():
    a = CachingAllocator()
    big, small = a.malloc(30 * MiB), a.malloc(14 * MiB)
    a.free(big)
    a.free(small)
    a.malloc(13 * MiB)  # served by the 14 MiB block, leaving the 30 MiB one whole
    a.malloc(30 * MiB)
    assert a.reserved_bytes == 44 * MiB


def test_near_capacity_the_cache_is_released_and_the_request_retried():
    a = CachingAllocator(capacity_bytes=40 * MiB)
    a.free(a.malloc(12 * MiB))
    a.malloc(30 * MiB)  # 12 + 30 > 40: the cached segment goes back to the driver first
    assert (a.reserved_bytes, a.peak_reserved_bytes, a.cache_flushes) == (30 * MiB, 30 * MiB, 1)


def test_a_split_segment_with_a_live_block_cannot_be_released():
    a = CachingAllocator(capacity_bytes=40 * MiB)
    a.malloc(3 * MiB)
    a.free(a.malloc(3 * MiB))  # the 20 MiB segment still holds a live 3 MiB block
    with pytest.raises(MemoryError, match="CUDA out of memory"):
        a.malloc(22 * MiB)


def test_empty_cache_gives_back_only_segments_that_hold_no_live_block():
    a = CachingAllocator()
    first, second = a.malloc(12 * MiB), a.malloc(14 * MiB)
    a.free(first)
    a.malloc(4 * MiB)  # split off the freed 12 MiB segment (best fit; the 8 MiB left is over 1 MiB)
    a.free(second)
    a.empty_cache()  # the 14 MiB segment goes back; the 12 MiB one holds 4 MiB and stays whole
    assert (a.allocated_bytes, a.reserved_bytes, a.peak_reserved_bytes, a.cache_flushes) == (
        4 * MiB,
        12 * MiB,
        26 * MiB,
        0,
    )


def test_expandable_segments_grow_in_pages_and_leave_no_gap_between_segments():
    a = CachingAllocator(expandable=True)
    first = a.malloc(12 * MiB)
    a.malloc(12 * MiB)
    assert a.reserved_bytes == 40 * MiB  # two 20 MiB pages of the large pool's one segment
    a.free(first)
    a.malloc(14 * MiB)  # the free 16 MiB at the segment's end serves it
    assert a.reserved_bytes == 40 * MiB


def test_expandable_pages_given_back_under_pressure_are_mapped_again_when_used():
    a = CachingAllocator(expandable=True, capacity_bytes=80 * MiB)
    first = a.malloc(40 * MiB)
    a.malloc(12 * MiB)  # a third page; 8 MiB of it free at the end
    a.free(first)  # 40 MiB free at the start: two whole pages
    last = a.malloc(50 * MiB)  # 60 + 60 > 80: the two free pages are unmapped, then the end grows by three
    assert (a.cache_flushes, a.reserved_bytes) == (1, 80 * MiB)
    a.free(last)
    a.malloc(40 * MiB)  # the unmapped start serves it, mapped again after the free end's pages go back
    assert (a.cache_flushes, a.reserved_bytes) == (2, 60 * MiB)


def test_replay_frees_by_id():
    a = replay([("a", 1, 12 * MiB), ("a", 2, 12 * MiB), ("f", 1, 0), ("a", 3, 12 * MiB)])
    assert (a.allocated_bytes, a.reserved_bytes) == (24 * MiB, 24 * MiB)


_sizes = st.one_of(st.integers(min_value=1, max_value=MiB), st.integers(min_value=1, max_value=64 * MiB))  # both pools


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.booleans(), _sizes), max_size=60), st.booleans())
def test_reserved_covers_allocated_and_returns_when_all_is_freed(ops, expandable):
    a, live = CachingAllocator(expandable=expandable), []
    for do_free, size in ops:
        if do_free and live:
            a.free(live.pop(len(live) // 2))
        else:
            live.append(a.malloc(size))
        assert a.allocated_bytes <= a.reserved_bytes <= a.peak_reserved_bytes
    for block in live:
        a.free(block)
    assert a.allocated_bytes == 0
    reserved, largest = a.reserved_bytes, max((s for f, s in ops if not f), default=0)
    if largest:  # freed blocks merged back: the largest request is served from the cache again
        a.malloc(largest)
        assert a.reserved_bytes == reserved
