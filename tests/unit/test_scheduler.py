"""The step policy and the slot pools, on plain data (no model)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from v2.families.moss_tts_local.kinds import LoopKind
from v2.contracts import ShapeSignature, WorkPlan, WorkUnitKind, bucket_for as batch_bucket
from v2.runtime.scheduler import schedule
from v2.runtime.slots import SlotPool

AR, AUDIO, PRE = WorkUnitKind.AR_FRAME, WorkUnitKind.AUDIO_CHUNK, WorkUnitKind.PREFILL
BUCKETS = {AR: [1, 2, 4, 8], AUDIO: [1, 2, 4]}


def plan(rid: int, kind: WorkUnitKind, bucket: int = 0) -> WorkPlan:
    loop = LoopKind.VOCODER if kind is AUDIO else LoopKind.AR_DECODE
    return WorkPlan(rid, loop, ShapeSignature(kind, "vocoder" if kind is AUDIO else "backbone", bucket), None)


def test_equal_keys_run_as_one_batch_in_kind_order():
    plans = [plan(0, AUDIO, 32), plan(1, AR), plan(2, AUDIO, 4), plan(3, AR), plan(4, PRE), plan(5, AUDIO, 32)]
    batches = schedule(plans, prefill_budget=100, prefill_rows={(4, LoopKind.AR_DECODE): 10}, buckets=BUCKETS)
    assert [(b.kind, [p.request_id for p in b.plans], b.bucket) for b in batches] == [
        (PRE, [4], 1), (AR, [1, 3], 2), (AUDIO, [2], 1), (AUDIO, [0, 5], 2)]


def test_prefill_budget_lets_the_first_chunk_through_and_defers_the_rest():
    plans = [plan(i, PRE) for i in range(4)]
    rows = {(i, LoopKind.AR_DECODE): r for i, r in enumerate([300, 150, 100, 50])}  # by (request, loop)
    batches = schedule(plans, prefill_budget=256, prefill_rows=rows, buckets=BUCKETS)
    assert [p.request_id for p in batches[0].plans] == [0]  # over budget alone, yet it runs
    batches = schedule(plans[1:], prefill_budget=256, prefill_rows=rows, buckets=BUCKETS)
    assert [p.request_id for p in batches[0].plans] == [1, 2]  # 150 + 100 fit; 50 more would not


def test_groups_beyond_the_largest_bucket_split():
    batches = schedule([plan(i, AR) for i in range(19)], prefill_budget=1, prefill_rows={}, buckets=BUCKETS)
    assert [(len(b.plans), b.bucket) for b in batches] == [(8, 8), (8, 8), (3, 4)]


def test_batch_bucket():
    assert [batch_bucket(n, [1, 2, 4, 8]) for n in (1, 2, 3, 5, 8)] == [1, 2, 4, 8, 8]
    with pytest.raises(ValueError):
        batch_bucket(9, [1, 2, 4, 8])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([PRE, AR, AUDIO]), st.sampled_from([1, 4, 32]), st.integers(1, 300)),
                max_size=40), st.integers(1, 600))
def test_every_plan_runs_at_most_once_and_only_prefill_waits(specs, budget):
    plans = [plan(i, kind, bucket if kind is AUDIO else 0) for i, (kind, bucket, _) in enumerate(specs)]
    rows = {i: r for i, (kind, _, r) in enumerate(specs) if kind is PRE}
    keyed = {(i, LoopKind.AR_DECODE): r for i, r in rows.items()}
    batches = schedule(plans, prefill_budget=budget, prefill_rows=keyed, buckets=BUCKETS)
    ran = [p.request_id for b in batches for p in b.plans]
    assert len(ran) == len(set(ran))
    assert {p.request_id for p in plans if p.signature.kind is not PRE} <= set(ran)
    prefilled = [rows[i] for i in ran if i in rows]
    assert not rows or prefilled  # the first prefill always runs
    assert sum(prefilled) <= budget or len(prefilled) == 1
    for b in batches:
        assert len({p.signature.batch_key for p in b.plans}) == 1
        if b.kind is not PRE:
            assert len(b.plans) <= b.bucket == batch_bucket(len(b.plans), BUCKETS[b.kind])


def test_slot_pool_hands_out_lowest_first_and_refuses_misuse():
    pool = SlotPool("kv", 3)
    assert [pool.allocate(owner) for owner in (10, 11)] == [0, 1]
    pool.release(0, 10)
    assert pool.allocate(12) == 0 and pool.in_use == 2 and pool.free_count == 1
    with pytest.raises(RuntimeError, match="not held"):
        pool.release(1, 99)
    pool.allocate(13)
    with pytest.raises(RuntimeError, match="no free slot"):
        pool.allocate(14)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 50)), max_size=80))
def test_slot_pool_never_gives_one_slot_to_two_owners(ops):
    pool, held = SlotPool("codec", 4), {}
    for grab, owner in ops:
        if grab and pool.can_allocate() and owner not in held:
            slot = pool.allocate(owner)
            assert slot not in held.values()
            held[owner] = slot
        elif not grab and held:
            victim = sorted(held)[owner % len(held)]
            pool.release(held.pop(victim), victim)
        assert pool.in_use == len(held) and pool.free_count == 4 - len(held)
