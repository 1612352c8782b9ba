"""`RequestKV`'s step calls with the pager's fast paths == without them: the same plans run, the same
requests are preempted and resumed, the same device work and pool; `flush` with nothing queued touches
no device; `computed` over every running request at once == one at a time."""

from __future__ import annotations

from types import SimpleNamespace as NS

import torch
from hypothesis import given, settings, strategies as st

from v2.contracts import WorkUnitKind
from v2.families.moss_tts_local.kinds import LoopKind
from v2.families.moss_tts_local.ar_decode import ARDecodeLoop
from v2.families.moss_tts_local.segments import recompute_rows
from v2.runtime.kv import RequestKV
from v2.runtime.paging import KVPager

from test_blocks import pool_state

SIZE, WIDTH = 4, 13


class Device:
    def __init__(self) -> None:
        self.calls: list[tuple[list, list]] = []

    def apply(self, copies, entries) -> None:
        self.calls.append((list(copies), list(entries)))


class OldestFirst(KVPager):
    """With fast paths: `grow` must be given the writes sorted (oldest request first)."""

    def grow(self, writes):
        assert writes == sorted(writes), "writes not oldest first"
        return super().grow(writes)


class Reference(KVPager):
    """The general path, the writes sorted here as before (whatever order they come in)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs, fast_paths=False)

    def grow(self, writes):
        return super().grow(sorted(writes))


def world(fast: bool, blocks: int, prompts: list[int]) -> tuple[RequestKV, dict]:
    kv = RequestKV((OldestFirst if fast else Reference)(blocks, SIZE, max_blocks=8), Device(), ARDecodeLoop(None),
                   LoopKind.AR_DECODE, lambda state: recompute_rows(state, 3))
    running = {}
    for rid, n in enumerate(prompts):
        rows = torch.arange(n * WIDTH).reshape(n, WIDTH) % (7 + rid % 2)  # some prompts repeat: cache hits
        ar = NS(slot=rid, paused=False, prefilled=0, computed=0, launched_frames=0, prompt_len=n, rows=rows, codes=[])
        running[rid] = NS(id=rid, ar=ar, states={LoopKind.AR_DECODE: ar}, version=0, rows=rows, kv_keys=None)
    return kv, running


def frame(rid: int, position: int) -> NS:
    return NS(request_id=rid, loop=LoopKind.AR_DECODE, signature=NS(kind=WorkUnitKind.AR_FRAME),
              payload=NS(position=position))


def chunk(rid: int, start: int, n: int) -> NS:
    return NS(request_id=rid, loop=LoopKind.AR_DECODE, signature=NS(kind=WorkUnitKind.PREFILL),
              payload=NS(start=start, rows=torch.zeros(n, WIDTH)))


def other(rid: int) -> NS:
    return NS(request_id=rid, loop=LoopKind.VOCODER, signature=NS(kind=WorkUnitKind.AUDIO_CHUNK), payload=None)


def step(kv: RequestKV, running: dict, order: list[int], use_all: bool) -> tuple:
    """Each live request in `order`: its prompt's rest as one chunk, else one frame; a vocoder plan too."""
    plans = []
    for rid in order:
        ar = running[rid].ar
        if ar.paused:
            continue
        length = ar.prompt_len + len(ar.codes)
        plans.append(chunk(rid, ar.prefilled, length - ar.prefilled) if ar.prefilled < length else frame(rid, length))
        plans.append(other(rid))
    ran, preempted = kv.before_step(running, plans)
    for rid in preempted:  # what the engine does with them (ARDecodeLoop.preempted)
        running[rid].ar.paused, running[rid].ar.prefilled, running[rid].ar.computed = True, 0, 0
        kv.pause(running[rid])
    kv.flush()
    for plan in ran:
        if plan.loop is LoopKind.AR_DECODE:
            ar = running[plan.request_id].ar
            if plan.signature.kind is WorkUnitKind.PREFILL:
                ar.prefilled = ar.computed = plan.payload.start + int(plan.payload.rows.shape[0])
            else:
                ar.codes.append(tuple(range(12)))
                ar.launched_frames = len(ar.codes)
                ar.prefilled = ar.computed = plan.payload.position + 1
    if use_all:
        kv.computed(running.values())
    else:
        for req in running.values():
            kv.computed([req])
    return [(p.request_id, p.loop) for p in ran], preempted, [(r.ar.paused, r.ar.prefilled) for r in running.values()]


@settings(max_examples=60, deadline=None)
@given(blocks=st.integers(8, 24), prompts=st.lists(st.integers(1, 9), min_size=1, max_size=5),
       data=st.data(), use_all=st.booleans())
def test_step_calls_with_fast_paths_equal_the_general_path(blocks, prompts, data, use_all):
    fast, ref = world(True, blocks, prompts), world(False, blocks, prompts)
    for kv, running in (fast, ref):
        for rid, req in running.items():
            if kv.fits(req):
                kv.admit(req)
            else:
                req.ar.paused = True
                kv.pause(req)
    for _ in range(data.draw(st.integers(1, 14), label="steps")):
        if not fast[1]:
            break
        order = data.draw(st.permutations(sorted(fast[1])), label="plan order")
        ends = data.draw(st.lists(st.sampled_from(sorted(fast[1])), max_size=1), label="ends")
        got = []
        for kv, running in (fast, ref):
            for rid in ends:
                if running[rid].ar.prefilled >= running[rid].ar.prompt_len + 6:  # long enough: it finishes
                    kv.release(running.pop(rid))
            got.append(step(kv, running, [r for r in order if r in running], use_all))
        assert got[0] == got[1]
        assert pool_state(fast[0].pager) == pool_state(ref[0].pager)
        assert fast[0].executor.calls == [c for c in ref[0].executor.calls if c != ([], [])]


def test_flush_with_nothing_queued_touches_no_device_and_computed_commits_everyone():
    kv, running = world(True, 16, [9, 9])
    for req in running.values():
        kv.admit(req)
    kv.flush()
    assert len(kv.executor.calls) == 1
    kv.flush()
    assert len(kv.executor.calls) == 1  # nothing queued: no call
    assert kv.pager.uncommitted == {0, 1}
    for req in running.values():
        req.ar.prefilled = req.ar.computed = 9
    kv.computed(running.values())
    assert not kv.pager.uncommitted and kv.pager.blocks.num_cached == 4  # two full blocks of each prompt
    assert [t.committed for t in kv.pager.tables.values()] == [2, 2]
