"""The backbone's KV caches: a contiguous slot cache and a paged block pool, behind one view per call.

Owns: `KVCache` (one [layers, slots + 1, kv_heads, max_len, head_dim] tensor each for K and V: a slot per
sequence, the reference form that `generate_batch` uses), `PagedKVCache` (the same layout over fixed-size
blocks, [layers, num_blocks + 1, kv_heads, block_size, head_dim]: a sequence's row p lives in block
`table[p // block_size]` at offset `p % block_size`), and `CacheView`: where one batched call writes
(block and offset per token; padding writes the dummy block) and which blocks each row reads. A slot of the
contiguous cache is one block of `max_len` rows, so both caches share every write and read path. The
last block of each (the dummy) belongs to nobody: padded tokens write there.
Must not know: layers, requests, which blocks a sequence holds (the caller's block tables say).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from v2.models.config import BackboneConfig


def _zeroed_kv(cfg: BackboneConfig, units: int, rows: int, dtype: torch.dtype,
               device: torch.device | str) -> tuple[Tensor, Tensor]:
    """Zeroed K and V [layers, units, kv_heads, rows, head_dim]: a unit is a slot or a block (dummy included)."""
    shape = (cfg.num_layers, units, cfg.num_kv_heads, rows, cfg.head_dim)
    return torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device)


@dataclass
class KVCache:
    """Backbone K/V for every layer: k, v are [layers, num_slots + 1, kv_heads, max_len, head_dim].

    Slot `dummy_slot` (the last) belongs to nobody: padded rows write there so that real slots are
    never touched by them.
    """

    k: Tensor
    v: Tensor

    @classmethod
    def allocate(cls, cfg: BackboneConfig, num_slots: int, max_len: int, *,
                 dtype: torch.dtype, device: torch.device | str) -> "KVCache":
        if num_slots < 1 or max_len < 1:
            raise ValueError(f"KVCache needs num_slots >= 1 and max_len >= 1, got {num_slots}, {max_len}")
        return cls(*_zeroed_kv(cfg, num_slots + 1, max_len, dtype, device))

    @property
    def num_slots(self) -> int:
        return self.k.shape[1] - 1

    @property
    def dummy_slot(self) -> int:
        return self.k.shape[1] - 1

    @property
    def max_len(self) -> int:
        return self.k.shape[3]

    @property
    def block_size(self) -> int:
        return self.k.shape[3]  # a slot is one block of max_len rows

    @property
    def dummy_block(self) -> int:
        return self.dummy_slot

    def tables(self, slots: Tensor) -> Tensor:
        """slots [B] (or one-block tables [B, 1]) -> the one-block tables [B, 1] that read them."""
        return slots[:, None] if slots.dim() == 1 else slots


@dataclass
class PagedKVCache:
    """Backbone K/V in blocks: k, v are [layers, num_blocks + 1, kv_heads, block_size, head_dim].

    Block `dummy_block` (the last) belongs to nobody: padded tokens write there, and unused table entries
    point there."""

    k: Tensor
    v: Tensor

    @classmethod
    def allocate(cls, cfg: BackboneConfig, num_blocks: int, block_size: int, *,
                 dtype: torch.dtype, device: torch.device | str) -> "PagedKVCache":
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"PagedKVCache needs num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}")
        return cls(*_zeroed_kv(cfg, num_blocks + 1, block_size, dtype, device))

    @staticmethod
    def block_bytes(cfg: BackboneConfig, block_size: int, dtype: torch.dtype) -> int:
        """Bytes one block takes, K and V of every layer."""
        return 2 * cfg.num_layers * cfg.num_kv_heads * block_size * cfg.head_dim * dtype.itemsize

    @property
    def num_blocks(self) -> int:
        return self.k.shape[1] - 1

    @property
    def dummy_block(self) -> int:
        return self.k.shape[1] - 1

    @property
    def block_size(self) -> int:
        return self.k.shape[3]

    def tables(self, tables: Tensor) -> Tensor:
        return tables

    def copy_blocks(self, src: Tensor, dst: Tensor) -> None:
        """Block dst[i] takes block src[i]'s rows in every layer (copy-on-write); src, dst [N] on the device."""
        self.k[:, dst] = self.k[:, src]
        self.v[:, dst] = self.v[:, src]

    @staticmethod
    def block_ops(copies: Sequence[tuple[int, int]], entries: Sequence[tuple[int, int, int]]) -> Tensor | None:
        """Block copies (source, destination) and table entries (slot, index, block; the last one for a place
        wins) as one host tensor [n, 3] (a copy's third column is -1), for one upload; None when there are none."""
        if not copies and not entries:
            return None
        last = {(s, i): b for s, i, b in entries}
        return torch.tensor([[s, d, -1] for s, d in copies] + [[s, i, b] for (s, i), b in last.items()],
                            dtype=torch.long)  # [n, 3]

    def apply_block_ops(self, ops: Tensor, copies: int, tables: Tensor) -> None:
        """`block_ops`' rows on the device: the first `copies` rows copy blocks in every layer (all read before
        any is written), the rest write `tables` [S, W] entries; no sync."""
        if copies:
            self.copy_blocks(ops[:copies, 0], ops[:copies, 1])
        if ops.shape[0] > copies:
            e = ops[copies:]
            tables[e[:, 0], e[:, 1]] = e[:, 2]


Cache = KVCache | PagedKVCache


def gather_pages(pages: Tensor, tables: Tensor, context: int) -> Tensor:
    """Rows 0 .. context - 1 of each table's blocks, in one copy: pages [N + 1, Hkv, S, D], tables [B, n]
    -> [B, Hkv, C, D], a view whose [C, D] matrices are dense (as a slot cache's slice is). Of the forms
    measured on a CPU (designs/perf.md) the closest to a slot cache's one gather."""
    x = pages.transpose(0, 1)[:, tables]  # [Hkv, B, n, S, D]: the only copy
    return x.permute(1, 0, 2, 3, 4).flatten(2, 3)[:, :, :context]  # [B, Hkv, n * S, D] (a view), first C


@dataclass
class CacheView:
    """Where one batched call reads and writes."""

    cache: Cache
    tables: Tensor        # [B, W] the blocks row b reads, in order (contiguous cache: W = 1, its slot)
    write_blocks: Tensor  # [B, T] block each token writes (the dummy block for padding)
    write_pos: Tensor     # [B, T] offset in that block (0 for padding)
    context_len: int      # keys read per row: positions 0 .. context_len - 1
    lengths: Tensor | None = None  # [B] decode only: row b reads keys 0 .. lengths[b] - 1 (the decode kernel)

    @classmethod
    def build(cls, cache: Cache, index: Tensor, positions: Tensor, valid: Tensor, context_len: int,
              lengths: Tensor | None) -> "CacheView":
        """index: slots [B] (contiguous) or block tables [B, W] (paged); positions [B, T] (0 where not valid)."""
        tables = cache.tables(index)
        size = cache.block_size
        blocks = tables.gather(1, torch.div(positions, size, rounding_mode="floor"))  # [B, T]
        return cls(cache, tables, torch.where(valid, blocks, torch.full_like(blocks, cache.dummy_block)),
                   positions % size, context_len, lengths)

    def keys(self, layer: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """K and V of positions 0 .. context_len - 1 of every row: [B, Hkv, C, D] each."""
        kc, vc = self.cache.k[layer], self.cache.v[layer]  # [N + 1, Hkv, S, D]
        size, c = self.cache.block_size, self.context_len
        if self.tables.shape[1] == 1:  # one block per row (a contiguous slot): read its first C rows
            rows = self.tables[:, 0]
            return kc[rows, :, :c].to(dtype), vc[rows, :, :c].to(dtype)
        used = self.tables[:, : -(-c // size)]  # [B, n] the blocks that hold positions below C
        return gather_pages(kc, used, c).to(dtype), gather_pages(vc, used, c).to(dtype)
