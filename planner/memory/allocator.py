"""PyTorch's CUDA caching allocator, replayed from its documented rules on a sequence of allocations and frees.

`max_memory_reserved()` is what this allocator holds from cudaMalloc; `max_memory_allocated()` is the rounded
sizes of the live blocks it handed out. The difference is memory a later request could not reuse. The rules,
each from c10/cuda/CUDACachingAllocator.cpp (PyTorch 2.x; constants unchanged from 1.10 to 2.9):
- sizes round up to 512 B (`kMinBlockSize`, `round_size`);
- requests of at most 1 MiB (`kSmallSize`) use the small pool, larger ones the large pool; a stream's pools
  never lend to each other;
- a request no cached block can serve calls cudaMalloc for a new segment (`get_allocation_size`): 2 MiB
  (`kSmallBuffer`) for the small pool, 20 MiB (`kLargeBuffer`) for requests under 10 MiB (`kMinLargeAlloc`),
  otherwise the request rounded up to 2 MiB (`kRoundLarge`);
- the cached block served is the smallest that is large enough (`get_free_block`, best fit by size, then
  address); it is split when what remains is at least 512 B (small pool) or more than 1 MiB (large pool,
  `should_split`), and a freed block merges with free neighbours of its segment (`try_merge_blocks`);
- when cudaMalloc fails, the allocator frees every cached segment that holds no live block
  (`release_cached_blocks`, what `torch.cuda.empty_cache()` calls too) and retries once; only then is it out of
  memory. Reserved memory therefore never
  exceeds the device, and a run near capacity trades cache for cudaFree/cudaMalloc calls;
- with `expandable_segments:True` (PyTorch >= 2.1) each pool has one segment whose end grows by mapping pages
  of the segment granularity (2 MiB small, 20 MiB large; `ExpandableSegment`): a request that no free block
  serves grows the segment by the part the free tail does not cover, so holes between segments disappear.
The replay has one stream: the side streams of communication overlap (FSDP, NCCL) keep their own pools, which
only add to what one stream shows.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from planner.units import MiB

MIN_BLOCK_BYTES = 512  # kMinBlockSize: every block is a multiple of this
SMALL_SIZE_BYTES = 1 * MiB  # kSmallSize: largest request of the small pool
SMALL_BUFFER_BYTES = 2 * MiB  # kSmallBuffer: segment of the small pool
LARGE_BUFFER_BYTES = 20 * MiB  # kLargeBuffer: segment for large requests under kMinLargeAlloc
MIN_LARGE_ALLOC_BYTES = 10 * MiB  # kMinLargeAlloc
ROUND_LARGE_BYTES = 2 * MiB  # kRoundLarge: large segments round up to this

Pool = Literal["small", "large"]
Event = tuple[Literal["a", "f"], int, int]  # ("a", id, bytes) or ("f", id, 0)


def round_size(size_bytes: int) -> int:
    """A request rounded to the allocator's block granularity (`round_size`)."""
    return max(MIN_BLOCK_BYTES, -(-size_bytes // MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES)


def pool_of(size_bytes: int) -> Pool:
    return "small" if size_bytes <= SMALL_SIZE_BYTES else "large"


def segment_size(size_bytes: int) -> int:
    """The cudaMalloc a rounded request starts when no cached block serves it (`get_allocation_size`)."""
    if size_bytes <= SMALL_SIZE_BYTES:
        return SMALL_BUFFER_BYTES
    if size_bytes < MIN_LARGE_ALLOC_BYTES:
        return LARGE_BUFFER_BYTES
    return -(-size_bytes // ROUND_LARGE_BYTES) * ROUND_LARGE_BYTES


def _splits(pool: Pool, remaining: int) -> bool:
    """`should_split`: a remainder worth keeping as its own block."""
    return remaining >= MIN_BLOCK_BYTES if pool == "small" else remaining > SMALL_SIZE_BYTES


@dataclass(eq=False)
class Block:
    address: int
    size: int
    pool: Pool
    segment: int
    free: bool = True
    unmapped: int = 0  # expandable segments: bytes of this free block whose pages were given back
    prev: Block | None = None
    next: Block | None = None


@dataclass(kw_only=True)
class CachingAllocator:
    """One stream's pools. `capacity_bytes` is what cudaMalloc can still hand out (None: unlimited);
    `expandable` turns on expandable segments."""

    capacity_bytes: int | None = None
    expandable: bool = False
    allocated_bytes: int = 0
    reserved_bytes: int = 0
    peak_allocated_bytes: int = 0
    peak_reserved_bytes: int = 0
    cache_flushes: int = 0  # times a failed cudaMalloc released the cache and retried
    _free: dict[Pool, list[tuple[int, int, Block]]] = field(default_factory=lambda: {"small": [], "large": []})
    _tails: dict[Pool, Block] = field(default_factory=dict)  # expandable: the last block of each pool's segment
    _ends: dict[Pool, int] = field(default_factory=lambda: {"small": 0, "large": 0})  # each pool's own addresses

    def malloc(self, size_bytes: int) -> Block:
        size, pool = round_size(size_bytes), pool_of(size_bytes)
        block = self._best_fit(pool, size) or self._grow(pool, size)
        if block.unmapped:  # expandable: map pages given back under pressure again
            remap = min(block.unmapped, size)
            self._make_room(remap)
            self._account(remap)
            block.unmapped -= remap
        if _splits(pool, block.size - size):
            rest = Block(
                block.address + size,
                block.size - size,
                pool,
                block.segment,
                unmapped=block.unmapped,
                prev=block,
                next=block.next,
            )
            if block.next:
                block.next.prev = rest
            block.next, block.size, block.unmapped = rest, size, 0
            if self._tails.get(pool) is block:
                self._tails[pool] = rest
            self._cache(rest)
        block.free = False
        self.allocated_bytes += block.size
        self.peak_allocated_bytes = max(self.peak_allocated_bytes, self.allocated_bytes)
        return block

    def free(self, block: Block) -> None:
        self.allocated_bytes -= block.size
        block.free = True
        for neighbour in (block.prev, block.next):
            if neighbour is not None and neighbour.free and neighbour.segment == block.segment:
                self._uncache(neighbour)
                block = self._merge(block, neighbour)
        self._cache(block)

    def _merge(self, block: Block, other: Block) -> Block:
        first, second = (block, other) if block.address < other.address else (other, block)
        first.size += second.size
        first.unmapped += second.unmapped
        first.next = second.next
        if second.next:
            second.next.prev = first
        if self._tails.get(first.pool) is second:
            self._tails[first.pool] = first
        return first

    def _cache(self, block: Block) -> None:
        bisect.insort(self._free[block.pool], (block.size, block.address, block))

    def _uncache(self, block: Block) -> None:
        free = self._free[block.pool]
        del free[bisect.bisect_left(free, (block.size, block.address), key=lambda e: e[:2])]

    def _best_fit(self, pool: Pool, size: int) -> Block | None:
        free = self._free[pool]
        i = bisect.bisect_left(free, (size, -1), key=lambda e: e[:2])
        if i == len(free):
            return None
        return free.pop(i)[2]

    def _grow(self, pool: Pool, size: int) -> Block:
        """A new segment (or, expandable, a longer one) for a request the cache cannot serve."""
        if self.expandable:
            return self._extend(pool, size)
        new = segment_size(size)
        self._make_room(new)
        self._account(new)
        block = Block(self._ends[pool], new, pool, segment=self._ends[pool], free=False)
        self._ends[pool] += new
        return block

    def _extend(self, pool: Pool, size: int) -> Block:
        page = SMALL_BUFFER_BYTES if pool == "small" else LARGE_BUFFER_BYTES
        tail = self._tails.get(pool)
        have = tail.size if tail is not None and tail.free else 0
        grow = -(-(size - have) // page) * page
        self._make_room(grow)
        self._account(grow)
        if tail is not None and have:
            self._uncache(tail)
            tail.size += grow
            self._ends[pool] += grow
            return tail
        block = Block(self._ends[pool], grow, pool, segment=-1 if pool == "small" else -2, prev=tail)
        if tail is not None:
            tail.next = block
        self._ends[pool] += grow
        self._tails[pool] = block
        return block

    def _account(self, grown: int) -> None:
        self.reserved_bytes += grown
        self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)

    def _make_room(self, need: int) -> None:
        """A cudaMalloc that would fail first releases the cache (`release_cached_blocks`), then it retries."""
        if self.capacity_bytes is None or self.reserved_bytes + need <= self.capacity_bytes:
            return
        self.cache_flushes += 1
        self.empty_cache()
        if self.reserved_bytes + need > self.capacity_bytes:
            raise MemoryError(f"CUDA out of memory: {need} B more with {self.reserved_bytes} B reserved")

    def empty_cache(self) -> None:
        """`torch.cuda.empty_cache()` (and a failed cudaMalloc's `release_cached_blocks`): gives back every free
        block that is a whole segment, or with expandable segments every whole page inside a free block. A
        segment that still holds a live block stays reserved whole."""
        for pool, free in self._free.items():
            keep = []
            for entry in free:
                block = entry[2]
                if self.expandable:
                    released = self._whole_pages(block) - block.unmapped
                    block.unmapped += max(released, 0)
                    keep.append(entry)
                else:
                    whole = block.prev is None and block.next is None
                    released = block.size if whole else 0
                    if not whole:
                        keep.append(entry)
                self.reserved_bytes -= max(released, 0)
            self._free[pool] = keep

    @staticmethod
    def _whole_pages(block: Block) -> int:
        page = SMALL_BUFFER_BYTES if block.pool == "small" else LARGE_BUFFER_BYTES
        start, end = -(-block.address // page) * page, (block.address + block.size) // page * page
        return max(end - start, 0)


def replay(events: Iterable[Event], *, capacity_bytes: int | None = None, expandable: bool = False) -> CachingAllocator:
    """The allocator after a trace: `("a", id, bytes)` allocates, `("f", id, 0)` frees what `id` allocated."""
    alloc = CachingAllocator(capacity_bytes=capacity_bytes, expandable=expandable)
    live: dict[int, Block] = {}
    for kind, key, size in events:
        if kind == "a":
            live[key] = alloc.malloc(size)
        else:
            alloc.free(live.pop(key))
    return alloc
