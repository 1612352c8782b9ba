"""Paged KV policy: each request's block table, admission by free blocks, growth before every step with
preemption of the newest request when the pool runs dry, a group's prompt shared without copies, and the
prefix cache's lookups and entries.

Owns: `KVPager`. A request holds a table of block ids (row p of its KV lives in block `table[p // size]`
at offset `p % size`). `admit` finds the longest cached prefix of the prompt (its full blocks, keyed by
chained hashes; at least one row is always left to compute, since its output decodes the first frame)
and takes blocks for the rest of the prompt only. `grow` gives each request, oldest first, the blocks its
next writes need, and a private copy of a block it would write that others share (copy-on-write); when
the pool is dry it preempts the newest request holding blocks (possibly the asker), whose blocks go back
and who recomputes its rows later. `fork` shares a group leader's prompt blocks with a member. Prompt
blocks enter the cache as soon as they are computed (`commit`) and stay cached after release until
evicted (least recently used first). What the device must do is queued as plain data (`DeviceOps`).
The common calls of a step cost O(1) (checked first, the general path otherwise): a write that stays in one
block the request holds alone, a commit with nothing left to enter (`uncommitted` names the requests that
have some).
Must not know: tensors, the engine's records, loops, threads. Pure Python, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from v2.runtime.blocks import BlockManager


@dataclass(slots=True)
class Table:
    """One request's blocks."""

    slot: int                      # its row of the device block table
    keys: list[bytes]              # chained keys of its prompt's full blocks
    blocks: list[int] = field(default_factory=list)
    committed: int = 0             # leading prompt blocks already handled by the cache


@dataclass
class DeviceOps:
    """What the device does before the step: block copies first, then table entries."""

    copies: list[tuple[int, int]] = field(default_factory=list)        # (source block, destination block)
    entries: list[tuple[int, int, int]] = field(default_factory=list)  # (slot, index, block) into the tables


class KVPager:
    def __init__(self, num_blocks: int, block_size: int, *, max_blocks: int, prefix_cache: bool = True,
                 watermark: int = 0, fast_paths: bool = True) -> None:
        """`max_blocks`: blocks one request may hold (its table's width); `watermark`: blocks a new admission
        must leave free while anything runs (headroom for the running requests' next blocks); `fast_paths`:
        False takes the general path always (the reference the tests compare the fast paths with)."""
        if max_blocks > num_blocks:
            raise ValueError(f"KV: {num_blocks} blocks cannot hold one request of {max_blocks} blocks")
        self.blocks = BlockManager(num_blocks, block_size)
        self.block_size = block_size
        self.max_blocks = max_blocks
        self.prefix_cache = prefix_cache
        self.watermark = watermark
        self.fast_paths = fast_paths
        self.tables: dict[int, Table] = {}
        self.uncommitted: set[int] = set()  # requests with prompt blocks not yet handled by the cache
        self.ops = DeviceOps()
        self.hits = self.misses = self.preemptions = self.copies = 0

    # ----- admission -----------------------------------------------------------------------------
    def _lookup(self, keys: list[bytes], rows: int) -> list[int]:
        if not self.prefix_cache:
            return []
        return self.blocks.match(keys[: (rows - 1) // self.block_size])  # leave at least one row to compute

    def can_admit(self, keys: list[bytes], rows: int) -> bool:
        """Whether a request whose first `rows` rows are to be computed (prompt keys `keys`) fits now."""
        hits = self._lookup(keys, rows)
        reserve = self.watermark if self.tables else 0
        return self.blocks.can_allocate(self.blocks.blocks_for(rows) - len(hits) + reserve, hits)

    def admit(self, rid: int, slot: int, keys: list[bytes], rows: int) -> int:
        """Blocks for a request's first `rows` rows: the cached prefix shared, the rest new. Returns the rows
        served from the cache (the request computes rows from there on)."""
        if rid in self.tables:
            raise RuntimeError(f"KV: request {rid} already holds blocks")
        hits = self._lookup(keys, rows)
        new = self.blocks.blocks_for(rows) - len(hits)
        if not self.blocks.can_allocate(new, hits):
            raise RuntimeError(f"KV: request {rid} does not fit ({new} blocks, {self.blocks.num_free} free)")
        self.blocks.share(hits)
        table = self.tables[rid] = Table(slot, keys, hits + self.blocks.allocate(new), committed=len(hits))
        self._track(rid, table)
        if self.prefix_cache:
            self.hits += len(hits)
            self.misses += len(keys) - len(hits)
        self._write_entries(table, 0)
        return len(hits) * self.block_size

    def fork(self, src: int, dst: int, slot: int, rows: int) -> None:
        """Request `dst` shares `src`'s blocks for rows 0 .. rows - 1 (a group's prompt): no copy; a partly
        filled last block is copied when one of them first writes into it."""
        if dst in self.tables:
            raise RuntimeError(f"KV: request {dst} already holds blocks")
        source = self.tables[src]
        shared = source.blocks[: self.blocks.blocks_for(rows)]
        self.blocks.share(shared)
        table = self.tables[dst] = Table(slot, source.keys, list(shared), min(source.committed, len(shared)))
        self._track(dst, table)
        self._write_entries(table, 0)

    # ----- each step -----------------------------------------------------------------------------
    def grow(self, writes: list[tuple[int, int, int]]) -> list[int]:
        """writes: (request, first row, end row) each request writes this step, oldest request first. Gives
        each the blocks it lacks and private copies of shared blocks it writes into; when the pool is dry,
        preempts the newest request holding blocks until the asker fits (or is itself preempted). Returns
        the preempted requests: their blocks are back in the pool and their writes must not run."""
        preempted: list[int] = []
        tables, size = self.tables, self.block_size
        limit = self.max_blocks * size if self.fast_paths else -1  # -1: no fast path
        needs_copy = self.blocks.needs_copy
        for rid, start, end in writes:
            table = tables.get(rid)
            if table is None:
                continue
            i = start // size
            if (end <= limit and end <= len(table.blocks) * size and (end - 1) // size == i
                    and not needs_copy(table.blocks[i])):
                continue  # one block it holds alone: nothing to take, nothing to copy
            while rid in self.tables and not self._grow(self.tables[rid], start, end):
                victim = max(self.tables)
                self.release(victim)
                self.preemptions += 1
                preempted.append(victim)
        return preempted

    def _grow(self, table: Table, start: int, end: int) -> bool:
        need = self.blocks.blocks_for(end)
        if need > self.max_blocks:
            raise RuntimeError(f"KV: {end} rows exceed a request's {self.max_blocks} blocks")
        written = range(start // self.block_size, min(need, len(table.blocks)))
        cow = [i for i in written if self.blocks.needs_copy(table.blocks[i])]
        new = need - len(table.blocks)
        if not self.blocks.can_allocate(max(new, 0) + len(cow)):
            return False
        for i in cow:
            fresh = self.blocks.copy_on_write(table.blocks[i])
            self.ops.copies.append((table.blocks[i], fresh))
            table.blocks[i] = fresh
            self.ops.entries.append((table.slot, i, fresh))
            self.copies += 1
        if new > 0:
            first = len(table.blocks)
            table.blocks += self.blocks.allocate(new)
            self._write_entries(table, first)
        return True

    def commit(self, rid: int, rows: int) -> None:
        """Rows 0 .. rows - 1 of the request are computed: its full prompt blocks among them enter the cache."""
        if self.fast_paths and rid not in self.uncommitted:
            return  # no table, no cache, or every prompt block handled already
        table = self.tables.get(rid)
        if table is None or not self.prefix_cache:
            return
        done = min(rows // self.block_size, len(table.keys), len(table.blocks))
        for i in range(table.committed, done):
            self.blocks.commit(table.blocks[i], table.keys[i])
        table.committed = max(table.committed, done)
        self._track(rid, table)

    def release(self, rid: int) -> None:
        """The request's blocks go back (keyed prompt blocks stay cached until evicted)."""
        table = self.tables.pop(rid, None)
        self.uncommitted.discard(rid)
        if table is not None:
            self.blocks.release(table.blocks)

    def clear_cache(self) -> None:
        """New weights: no cached block may be reused."""
        self.blocks.clear_cache()
        for table in self.tables.values():
            table.committed = len(table.keys)  # what they hold is never entered again
        self.uncommitted.clear()

    def _track(self, rid: int, table: Table) -> None:
        """Keep `uncommitted` in step with the request's table: a commit for a request not named is a no-op."""
        if self.prefix_cache and table.committed < len(table.keys):
            self.uncommitted.add(rid)
        else:
            self.uncommitted.discard(rid)

    @property
    def has_ops(self) -> bool:
        """Whether the device has work queued (`take_ops` would return something)."""
        return bool(self.ops.copies or self.ops.entries)

    def take_ops(self) -> DeviceOps:
        ops, self.ops = self.ops, DeviceOps()
        return ops

    def _write_entries(self, table: Table, first: int) -> None:
        self.ops.entries += [(table.slot, i, b) for i, b in enumerate(table.blocks[first:], start=first)]

    def stats(self) -> dict[str, int]:
        b = self.blocks
        return {"kv_blocks": b.num_blocks, "kv_blocks_free": b.num_free, "kv_blocks_held": b.num_held,
                "kv_block_size": self.block_size, "prefix_cache_hits": self.hits, "prefix_cache_misses": self.misses,
                "prefix_cache_blocks": b.num_cached, "prefix_cache_evictions": b.evictions,
                "kv_preemptions": self.preemptions, "kv_block_copies": self.copies}
