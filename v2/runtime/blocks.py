"""KV blocks: which fixed-size blocks of the paged KV pool are free, cached or held, and by how many.

Owns: `BlockManager`: reference counts; allocation (free blocks first, then the least recently used
cached block, which is evicted); the prefix cache (a full prompt block is entered under a chained key:
the key of block i hashes block i's rows together with the key of block i - 1, so equal keys mean equal
rows from position 0 on, hence equal KV); LRU eviction of cached blocks no request holds; the
copy-on-write decision for a block about to be written that others share or the cache names; dropping the
whole cache (new weights). `chain_keys` makes the keys from a prompt's bytes.
Must not know: tensors, devices, requests, the engine. Pure Python, no torch.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from typing import Iterable, Sequence


def chain_keys(data: bytes, row_bytes: int, block_size: int, salt: bytes = b"") -> list[bytes]:
    """The chained key of every full block of rows in `data` (rows of `row_bytes` bytes each)."""
    step = row_bytes * block_size
    keys, prev = [], hashlib.blake2b(salt, digest_size=16).digest()
    for start in range(0, len(data) - step + 1, step):
        prev = hashlib.blake2b(prev + data[start : start + step], digest_size=16).digest()
        keys.append(prev)
    return keys


class BlockManager:
    """`num_blocks` blocks of `block_size` rows. Every block is in exactly one state:
    held (ref > 0, with or without a key), cached (ref 0, keyed: reusable until evicted) or free."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"a block pool needs num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._ref = [0] * num_blocks
        self._key: list[bytes | None] = [None] * num_blocks
        self._by_key: dict[bytes, int] = {}
        self._free: deque[int] = deque(range(num_blocks))
        self._lru: OrderedDict[int, None] = OrderedDict()  # cached blocks, least recently used first
        self.evictions = 0

    # ----- reading -------------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        """Blocks `allocate` can hand out: free ones and cached ones nobody holds."""
        return len(self._free) + len(self._lru)

    @property
    def num_cached(self) -> int:
        """Blocks the prefix cache names (held or not)."""
        return len(self._by_key)

    @property
    def num_held(self) -> int:
        return self.num_blocks - self.num_free

    def ref(self, block: int) -> int:
        return self._ref[block]

    def blocks_for(self, rows: int) -> int:
        return -(-rows // self.block_size)

    def match(self, keys: Sequence[bytes]) -> list[int]:
        """The blocks of the longest run of `keys`, from the first, that the cache holds (nothing changes)."""
        out = []
        for key in keys:
            block = self._by_key.get(key)
            if block is None:
                break
            out.append(block)
        return out

    def can_allocate(self, n: int, reuse: Iterable[int] = ()) -> bool:
        """Whether `n` new blocks fit after `reuse` (cached blocks about to be shared) leave the evictable set."""
        return n <= self.num_free - sum(1 for b in set(reuse) if self._ref[b] == 0)

    # ----- changing ------------------------------------------------------------------------------
    def allocate(self, n: int) -> list[int]:
        """`n` blocks held once each: free blocks first, then the least recently used cached blocks."""
        if n > self.num_free:
            raise RuntimeError(f"KV blocks: {n} asked, {self.num_free} free")
        out = []
        for _ in range(n):
            if self._free:
                block = self._free.popleft()
            else:
                block, _ = self._lru.popitem(last=False)
                key = self._key[block]
                assert key is not None
                del self._by_key[key]
                self._key[block] = None
                self.evictions += 1
            self._ref[block] = 1
            out.append(block)
        return out

    def share(self, blocks: Iterable[int]) -> None:
        """One more holder for each block (a cached block leaves the evictable set)."""
        for block in blocks:
            if self._ref[block] == 0:
                if self._key[block] is None:
                    raise RuntimeError(f"KV blocks: block {block} is free, nothing to share")
                del self._lru[block]
            self._ref[block] += 1

    def release(self, blocks: Sequence[int]) -> None:
        """One holder fewer for each block, last first: a keyed block nobody holds stays cached (the tail of a
        prompt becomes least recently used, so it is evicted before the prefix it extends), others are free."""
        for block in reversed(blocks):
            if self._ref[block] < 1:
                raise RuntimeError(f"KV blocks: block {block} released more often than held")
            self._ref[block] -= 1
            if self._ref[block] == 0:
                if self._key[block] is not None:
                    self._lru[block] = None
                else:
                    self._free.append(block)

    def commit(self, block: int, key: bytes) -> bool:
        """Enter a held, full block into the cache under `key`; False when another block already holds it."""
        if self._ref[block] < 1:
            raise RuntimeError(f"KV blocks: block {block} is not held")
        if key in self._by_key or self._key[block] is not None:
            return False
        self._by_key[key] = block
        self._key[block] = key
        return True

    def needs_copy(self, block: int) -> bool:
        """Writing into `block` would change what another holder or the cache sees."""
        return self._ref[block] > 1 or self._key[block] is not None

    def copy_on_write(self, block: int) -> int:
        """A private block to write instead of `block` (its rows copied by the caller); the old one is released."""
        (fresh,) = self.allocate(1)
        self.release([block])
        return fresh

    def clear_cache(self) -> None:
        """Forget every key: cached blocks become free, held ones stay held without a key."""
        for block in self._by_key.values():
            self._key[block] = None
        self._by_key.clear()
        self._free.extend(self._lru)
        self._lru.clear()

    def check(self) -> None:
        """Raise if the states disagree (each block in exactly one state, keys both ways)."""
        free, lru = set(self._free), set(self._lru)
        assert len(free) == len(self._free) and not free & lru, "a block is listed twice"
        for b in range(self.num_blocks):
            held = self._ref[b] > 0
            assert self._ref[b] >= 0 and held + (b in free) + (b in lru) == 1, f"block {b} is in no single state"
            assert (b in lru) <= (self._key[b] is not None) and (b in free) <= (self._key[b] is None), f"block {b}"
        assert all(self._key[b] == k for k, b in self._by_key.items()), "key map out of step"
        assert sum(k is not None for k in self._key) == len(self._by_key), "key map out of step"
