"""The block manager and the KV pager on plain data: counts stay consistent, nothing leaks, and a shadow
of every block's rows proves each request reads exactly its own rows (prefix-cache hits, group forks,
copy-on-write and recomputation after preemption included)."""

from __future__ import annotations

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from v2.runtime.blocks import BlockManager, chain_keys
from v2.runtime.paging import DeviceOps, KVPager

SIZE = 4
PROMPTS = [list(range(22)), list(range(16)) + list(range(100, 107)), list(range(200, 213)), list(range(9))]


def keys_of(rows: list[int]) -> list[bytes]:
    return chain_keys(b"".join(r.to_bytes(8, "little") for r in rows), 8, SIZE)


def test_chain_keys_depend_on_every_row_before():
    a, b = keys_of(list(range(12))), keys_of([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 99])
    assert len(a) == 3 and a[:2] == b[:2] and a[2] != b[2]
    c = keys_of([99] + list(range(1, 12)))
    assert all(x != y for x, y in zip(a, c))  # a change in block 0 changes every later key
    assert keys_of(list(range(11)))[:2] == a[:2] and len(keys_of(list(range(3)))) == 0


def test_allocation_takes_free_blocks_before_evicting_the_least_recently_used_cached_one():
    m = BlockManager(4, SIZE)
    a, b = m.allocate(2)
    assert m.commit(a, b"A") and m.commit(b, b"B") and not m.commit(b, b"C") and m.num_cached == 2
    m.release([a, b])  # b (the tail) becomes least recently used
    assert m.num_free == 4 and m.match([b"A", b"B", b"X"]) == [a, b]
    m.allocate(2)  # the two never-cached blocks first
    assert m.evictions == 0 and m.num_cached == 2
    (c,) = m.allocate(1)
    assert c == b and m.evictions == 1 and m.match([b"A", b"B"]) == [a]
    m.share([a])  # a cached block nobody held is held again: not evictable
    assert m.num_free == 0 and not m.can_allocate(1)
    with pytest.raises(RuntimeError, match="released more often"):
        m.release([c, c])
    m.check()


def test_copy_on_write_gives_a_private_block_and_releases_the_shared_one():
    m = BlockManager(3, SIZE)
    (a,) = m.allocate(1)
    m.share([a])
    assert m.needs_copy(a)
    b = m.copy_on_write(a)
    assert b != a and m.ref(a) == 1 and m.ref(b) == 1 and not m.needs_copy(a) and not m.needs_copy(b)
    m.commit(a, b"K")
    assert m.needs_copy(a)  # the cache names it: writing would change what a later hit reads
    m.clear_cache()
    assert not m.needs_copy(a) and m.num_cached == 0
    m.check()


def test_the_pager_preempts_the_newest_request_when_the_pool_runs_dry():
    p = KVPager(8, SIZE, max_blocks=6)
    for rid in range(3):
        assert p.can_admit([], 8)
        assert p.admit(rid, rid, [], 8) == 0  # two blocks each: 6 of 8 taken
    assert not p.can_admit([], 12)
    assert p.grow([(0, 8, 9), (1, 8, 9)]) == []  # two new blocks: the pool is full now
    assert p.grow([(0, 9, 10), (2, 8, 9)]) == [2]  # the newest asks and is itself preempted
    assert p.grow([(0, 12, 13)]) == [] and p.grow([(0, 16, 17)]) == []  # request 2's two blocks
    assert p.grow([(0, 20, 21)]) == [1]  # the oldest grows; the newest holding blocks gives them back
    assert sorted(p.tables) == [0] and p.preemptions == 2
    with pytest.raises(RuntimeError, match="exceed"):
        p.grow([(0, 24, 25)])  # past one request's blocks
    p.release(0)
    assert p.blocks.num_free == 8


class PagerMachine(RuleBasedStateMachine):
    """Random admissions, steps, forks, preemptions, releases and cache drops against a shadow of every
    block's rows (what the device would hold)."""

    @initialize(blocks=st.integers(6, 12), cache=st.booleans())
    def start(self, blocks: int, cache: bool) -> None:
        self.pager = KVPager(blocks, SIZE, max_blocks=6, prefix_cache=cache, watermark=1)
        self.rows: dict[int, list[int | None]] = {b: [None] * SIZE for b in range(blocks)}
        self.seqs: dict[int, list[int]] = {}   # request -> the rows its KV must hold (prompt, then generated)
        self.prompts: dict[int, list[int]] = {}
        self.paused: set[int] = set()
        self.next_id = 0

    # ----- the device's side, simulated --------------------------------------------------------
    def _flush(self) -> None:
        ops = self.pager.take_ops()
        taken = [list(self.rows[s]) for s, _ in ops.copies]  # every copy reads before any writes
        for (_, d), rows in zip(ops.copies, taken):
            self.rows[d] = rows

    def _write(self, rid: int, start: int, end: int) -> None:
        table = self.pager.tables[rid].blocks
        for p in range(start, end):
            self.rows[table[p // SIZE]][p % SIZE] = self.seqs[rid][p]

    def _fill(self, rid: int, cached: int) -> None:
        """Check what the cache served, then compute (write) the rest, as prefill would."""
        self._flush()
        seq = self.seqs[rid]
        assert self._read(rid, cached) == seq[:cached], "a prefix-cache hit served other rows"
        assert self.pager.grow([(rid, cached, len(seq))]) == []  # admission took every block already
        self._flush()
        self._write(rid, cached, len(seq))
        self.pager.commit(rid, len(seq))

    def _read(self, rid: int, n: int) -> list[int | None]:
        table = self.pager.tables[rid].blocks
        return [self.rows[table[p // SIZE]][p % SIZE] for p in range(n)]

    def _preempted(self, victims: list[int]) -> None:
        self.paused.update(victims)

    # ----- rules -------------------------------------------------------------------------------
    @rule(which=st.integers(0, len(PROMPTS) - 1))
    def admit(self, which: int) -> None:
        prompt = PROMPTS[which]
        keys = keys_of(prompt)
        if not self.pager.can_admit(keys, len(prompt)):
            return
        rid, self.next_id = self.next_id, self.next_id + 1
        self.seqs[rid], self.prompts[rid] = list(prompt), prompt
        self._fill(rid, self.pager.admit(rid, rid, keys, len(prompt)))

    @precondition(lambda self: any(r not in self.paused for r in self.seqs))
    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        """Every running request that has room writes one generated row, oldest first."""
        live = sorted(r for r in self.seqs if r not in self.paused and len(self.seqs[r]) < 24)
        chosen = data.draw(st.lists(st.sampled_from(live), unique=True, min_size=1), label="writers") if live else []
        writes = sorted((r, len(self.seqs[r]), len(self.seqs[r]) + 1) for r in chosen)
        victims = self.pager.grow(writes)
        self._preempted(victims)
        self._flush()
        for rid, start, _ in writes:
            if rid not in victims:
                self.seqs[rid].append(1000 * (rid + 1) + start)
                self._write(rid, start, start + 1)

    @precondition(lambda self: bool(self.paused))
    @rule()
    def resume(self) -> None:
        rid = min(self.paused)
        keys = keys_of(self.prompts[rid])
        if self.pager.can_admit(keys, len(self.seqs[rid])):
            self.paused.discard(rid)
            self._fill(rid, self.pager.admit(rid, rid, keys, len(self.seqs[rid])))

    @precondition(lambda self: any(len(s) == len(self.prompts[r]) for r, s in self.seqs.items() if r not in self.paused))
    @rule(data=st.data())
    def fork(self, data: st.DataObject) -> None:
        """A group member shares a leader that has its prompt and no frame yet."""
        leaders = sorted(r for r, s in self.seqs.items() if r not in self.paused and len(s) == len(self.prompts[r]))
        leader = data.draw(st.sampled_from(leaders), label="leader")
        rid, self.next_id = self.next_id, self.next_id + 1
        self.seqs[rid], self.prompts[rid] = list(self.seqs[leader]), self.prompts[leader]
        self.pager.fork(leader, rid, rid, len(self.seqs[leader]))
        self._flush()

    @precondition(lambda self: bool(self.seqs))
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        """Finish, cancel or failure: the request's blocks go back."""
        rid = data.draw(st.sampled_from(sorted(self.seqs)), label="ends")
        self.pager.release(rid)
        del self.seqs[rid], self.prompts[rid]
        self.paused.discard(rid)

    @rule()
    def new_weights(self) -> None:
        self.pager.clear_cache()

    # ----- invariants --------------------------------------------------------------------------
    @invariant()
    def counts_are_consistent(self) -> None:
        if not hasattr(self, "pager"):
            return
        b = self.pager.blocks
        b.check()
        held: dict[int, int] = {}
        for table in self.pager.tables.values():
            assert len(set(table.blocks)) == len(table.blocks) <= self.pager.max_blocks
            for blk in table.blocks:
                held[blk] = held.get(blk, 0) + 1
        assert all(b.ref(blk) == held.get(blk, 0) for blk in range(b.num_blocks)), "a count disagrees with the tables"
        assert b.num_free + len(held) == b.num_blocks
        assert set(self.pager.tables) == set(self.seqs) - self.paused

    @invariant()
    def every_request_reads_its_own_rows(self) -> None:
        if not hasattr(self, "pager"):
            return
        for rid, seq in self.seqs.items():
            if rid not in self.paused:
                assert self._read(rid, len(seq)) == seq, f"request {rid} reads rows that are not its own"

    def teardown(self) -> None:
        if not hasattr(self, "pager"):
            return
        for rid in list(self.pager.tables):
            self.pager.release(rid)
        assert self.pager.blocks.num_free == self.pager.blocks.num_blocks  # every block back
        self.pager.blocks.check()


PagerMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_pager_machine = PagerMachine.TestCase


# ----- fast paths: the same ops, tables and pool as the general path --------------------------------
def pool_state(p: KVPager) -> tuple:
    b = p.blocks
    return (dict(p.tables), p.ops, list(b._ref), list(b._key), dict(b._by_key), list(b._free), list(b._lru),
            b.evictions, p.hits, p.misses, p.preemptions, p.copies, set(p.uncommitted))


class Twin:
    """Every call goes to a pager with fast paths and to one without; results and whole states must agree."""

    CALLS = {"can_admit", "admit", "fork", "grow", "commit", "release", "clear_cache", "take_ops"}

    def __init__(self, *args, **kwargs) -> None:
        self.fast = KVPager(*args, **kwargs)
        self.ref = KVPager(*args, **kwargs, fast_paths=False)

    def __getattr__(self, name: str):
        if name not in self.CALLS:
            return getattr(self.fast, name)

        def both(*args):
            out = [], []
            for pager, got in zip((self.fast, self.ref), out):
                try:
                    got.append(getattr(pager, name)(*args))
                except RuntimeError as e:
                    got.append(("raised", str(e)))
            assert out[0] == out[1], f"{name}{args}: {out[0]} with fast paths, {out[1]} without"
            assert pool_state(self.fast) == pool_state(self.ref), f"{name}{args}: the states differ"
            if isinstance(out[0][0], tuple) and out[0][0][:1] == ("raised",):
                raise RuntimeError(out[0][0][1])
            return out[0][0]

        return both


class TwinPagerMachine(PagerMachine):
    """The pager machine's random runs with every call checked against the general path."""

    @initialize(blocks=st.integers(6, 12), cache=st.booleans())
    def start(self, blocks: int, cache: bool) -> None:
        super().start(blocks, cache)
        self.pager = Twin(blocks, SIZE, max_blocks=6, prefix_cache=cache, watermark=1)

    @invariant()
    def uncommitted_names_exactly_the_requests_with_work_left(self) -> None:
        if not hasattr(self, "pager"):
            return
        p = self.pager.fast
        assert p.uncommitted == {r for r, t in p.tables.items() if p.prefix_cache and t.committed < len(t.keys)}

    @precondition(lambda self: any(r not in self.paused for r in self.seqs))
    @rule(data=st.data())
    def prefill_chunk(self, data: st.DataObject) -> None:
        """A running request writes several rows at once (a chunk), possibly into blocks others share."""
        live = sorted(r for r in self.seqs if r not in self.paused and len(self.seqs[r]) < 20)
        if not live:
            return
        rid = data.draw(st.sampled_from(live), label="chunk writer")
        start, n = len(self.seqs[rid]), data.draw(st.integers(1, 4), label="rows")
        victims = self.pager.grow([(rid, start, start + n)])
        self._preempted(victims)
        self._flush()
        if rid not in victims:
            self.seqs[rid] += [1000 * (rid + 1) + start + k for k in range(n)]
            self._write(rid, start, start + n)

    @rule(rid=st.integers(0, 8), rows=st.integers(0, 30))
    def commit_again(self, rid: int, rows: int) -> None:
        """Commits at any time, for any request (known or not), with any count of computed rows."""
        if rid in self.seqs and rid not in self.paused:
            rows = min(rows, len(self.seqs[rid]))  # only rows that are computed
        self.pager.commit(rid, rows)


TwinPagerMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_twin_pager_machine = TwinPagerMachine.TestCase


def test_a_write_into_a_block_held_alone_queues_nothing_and_changes_nothing():
    p = KVPager(8, SIZE, max_blocks=6)
    p.admit(0, 0, [], 6)  # blocks for rows 0..7
    p.take_ops()
    before = pool_state(p)
    assert p.grow([(0, 6, 7)]) == [] and p.grow([(0, 7, 8)]) == []
    assert pool_state(p) == before and not p.has_ops


def test_a_write_into_a_shared_block_copies_it_and_a_write_past_the_last_block_takes_one():
    p = KVPager(8, SIZE, max_blocks=6)
    p.admit(0, 0, [], 6)
    p.fork(0, 1, 1, 6)  # request 1 shares both blocks; the second is partly filled
    p.take_ops()
    a, b = p.tables[0].blocks
    assert p.grow([(1, 6, 7)]) == []
    (fresh,) = set(p.tables[1].blocks) - {a, b}
    assert p.tables[1].blocks == [a, fresh] and p.take_ops() == DeviceOps([(b, fresh)], [(1, 1, fresh)])
    assert p.grow([(1, 7, 8)]) == [] and not p.has_ops  # its own copy now
    assert p.grow([(0, 7, 9)]) == [] and len(p.tables[0].blocks) == 3  # crosses into a new block
    assert p.take_ops() == DeviceOps([], [(0, 2, p.tables[0].blocks[2])])
    with pytest.raises(RuntimeError, match="exceed"):
        p.grow([(0, 23, 25)])  # past one request's blocks: the fast path does not hide it


def test_a_write_into_a_cached_prompt_block_is_copied():
    p = KVPager(8, SIZE, max_blocks=6)
    keys = keys_of(list(range(8)))
    p.admit(0, 0, keys, 8)
    p.commit(0, 8)  # both prompt blocks are cached now
    p.take_ops()
    assert p.grow([(0, 7, 8)]) == [] and p.copies == 1  # rewriting a row the cache names copies the block


def test_commit_after_the_whole_prompt_leaves_nothing_to_do():
    p = KVPager(8, SIZE, max_blocks=6)
    keys = keys_of(list(range(10)))  # two full blocks
    p.admit(0, 0, keys, 10)
    assert p.uncommitted == {0}
    p.commit(0, 5)  # the first block only
    assert p.tables[0].committed == 1 and p.uncommitted == {0} and p.blocks.num_cached == 1
    p.commit(0, 10)
    assert p.tables[0].committed == 2 and not p.uncommitted and p.blocks.num_cached == 2
    p.commit(0, 12)
    p.commit(7, 12)  # unknown request
    assert p.tables[0].committed == 2 and p.blocks.num_cached == 2
    p.fork(0, 1, 1, 10)
    assert not p.uncommitted  # shares blocks already cached
    p.admit(2, 2, keys_of(list(range(50, 60))), 10)
    p.clear_cache()
    assert not p.uncommitted and p.tables[2].committed == 2
    p.release(0)
    off = KVPager(8, SIZE, max_blocks=6, prefix_cache=False)
    off.admit(0, 0, keys, 10)
    assert not off.uncommitted
