"""Two paged loops and a chunk loop in one request (tests/runtime/twoloop: a tiny thinker whose tokens feed a tiny
talker while both decode, each a Qwen3 stack with its own KV pool, the talker's frames feeding a chunk loop),
driven by the engine from the card's graph: batched == alone, cascaded == sequential, preempted == alone under
pools that force preemption mid-hand-off, cached == uncached across two turns in both loops, a cancel at every
step frees every block of both loops and every slot, one prefill budget keeps a long thinker prompt from
stalling other requests' talker frames with each kind launched at most once a step, and the load-time
refusals. Exact on every CPU path (the `exact` marker)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from v2 import registry
from v2.card import CardError
from v2.runtime import Runtime

sys.path.insert(0, str(Path(__file__).parent))

from twoloop.card import TwoLoopCard, card  # noqa: E402
from twoloop.family import TALKER, THINKER, Work  # noqa: E402

pytestmark = pytest.mark.exact

REQUESTS = [{"prompt": [(7 * i + k) % 48 for k in range(4 + 5 * i)], "talker_prefix": list(range(i, i + 3 + 2 * i)),
             "tokens": 5 + 3 * i} for i in range(4)]


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    registry.register("twoloop", "twoloop")
    try:
        yield
    finally:
        registry.unregister("twoloop")


def run(rt: Runtime, requests: list[dict[str, Any]], *, together: bool = True) -> list[tuple[Any, ...]]:
    """Each request's thinker tokens and logprobs, talker codes and logprobs, and audio."""
    handles = rt.submit_many(requests) if together else []
    out = []
    for i, request in enumerate(requests):
        h = handles[i] if together else rt.submit(request)
        r = h.result(120)
        assert r.error is None and r.finish_reason == "length", r.error
        o = rt.family.outputs[h.request_id]
        out.append((o[THINKER].codes, o[THINKER].logprobs, o[TALKER].codes, o[TALKER].logprobs, r.audio))
        streamed = list(h)
        np.testing.assert_array_equal(np.concatenate([c.audio for c in streamed], axis=1), r.audio)
    return out


def same(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x[:4] == y[:4]  # tokens, codes and every logprob, bit for bit
        np.testing.assert_array_equal(x[4], y[4])


def leak_free(rt: Runtime) -> None:
    s = rt.stats()
    assert s["running"] == s["waiting"] == s["kv_preempted"] == 0
    assert s["think_slots_in_use"] == s["talk_slots_in_use"] == s["codec_slots_in_use"] == 0
    for kv in rt.engine.paged.kvs:  # type: ignore[union-attr]
        kv.pager.blocks.check()
        assert not kv.pager.tables and not kv.paused and kv.pager.blocks.num_held == 0
    assert s["kv_blocks_free"] == s["kv_blocks"]


@pytest.fixture(scope="module")
def alone() -> list[tuple[Any, ...]]:
    registry.register("twoloop", "twoloop")
    with Runtime(card()) as rt:
        return run(rt, REQUESTS, together=False)


def test_the_card_and_its_family_are_found_through_the_registry_and_both_loops_page():
    with Runtime(card()) as rt:
        assert isinstance(rt.card, TwoLoopCard)
        assert tuple(rt.engine.paged.by_name) == (THINKER, TALKER)  # type: ignore[union-attr]
        assert rt.engine.graph.feeding[THINKER][0][0] == TALKER and rt.engine.graph.audio == "codec"


def test_batched_equals_alone_and_the_loops_overlap(alone):
    with Runtime(card()) as rt:
        rt.family.talk_loop.overlapped = 0
        same(run(rt, [dict(r, stream=True) for r in REQUESTS]), alone)
        assert rt.family.talk_loop.overlapped > 0  # talker frames ran while their thinker still decoded
        calls = [n for k, n in rt.family.think.calls if k is Work.THINK_TOKEN]
        assert max(calls) > 1  # requests' tokens batched together
        leak_free(rt)


def test_cascaded_equals_sequential(alone):
    with Runtime(card()) as rt:
        rt.family.talk_loop.sequential = True  # the thinker runs to its end before the talker starts
        rt.family.talk_loop.overlapped = 0
        sequential = run(rt, REQUESTS)
        assert rt.family.talk_loop.overlapped == 0
        leak_free(rt)
    same(sequential, alone)


def test_preempted_equals_alone_under_pools_that_force_it_mid_hand_off(alone):
    long = [dict(r, tokens=24, talker_prefix=list(range(20))) for r in REQUESTS]
    with Runtime(card()) as rt:
        reference = run(rt, long, together=False)
    with Runtime(card(think_blocks=8, talk_blocks=8, prefill_chunk_rows=16)) as rt:
        got = run(rt, long)
        s = rt.stats()
        loops = s["kv_loops"]
        assert loops["talker"]["kv_preemptions"] > 0 and s["kv_preemptions"] > 0
        assert rt.family.talk_loop.overlapped > 0
        leak_free(rt)
    same(got, reference)


def test_cached_equals_uncached_a_second_turn_reuses_both_loops_blocks():
    first = {"prompt": list(range(20)), "talker_prefix": list(range(5, 25)), "tokens": 6}
    outs = []
    for cache in (True, False):
        with Runtime(card(prefix_cache=cache)) as rt:
            (turn,) = run(rt, [first])
            tokens = [c[0] for c in turn[0]]
            second = {"prompt": first["prompt"] + tokens + [3, 4], "talker_prefix": first["talker_prefix"] + [9] * 4,
                      "tokens": 6}
            outs.append(run(rt, [second]))
            loops = rt.stats()["kv_loops"]
            hits = [loops[name]["prefix_cache_hits"] for name in ("thinker", "talker")]
            assert all(h > 0 for h in hits) if cache else hits == [0, 0]
            leak_free(rt)
    same(outs[0], outs[1])


def test_a_cancel_at_every_step_frees_every_block_of_both_loops_and_every_slot(alone):
    with Runtime(card(think_blocks=8, talk_blocks=8, prefill_chunk_rows=16)) as rt:
        engine, step = rt.engine, rt.engine.step
        target: dict[str, Any] = {}

        def counted() -> bool:
            target["steps"] = target.get("steps", 0) + 1
            if target["steps"] == target.get("at") and target.get("handle") is not None:
                target["handle"].cancel()
            return step()

        engine.step = counted  # type: ignore[method-assign]
        requests = [dict(r, tokens=12, talker_prefix=list(range(18))) for r in REQUESTS[:3]]
        reasons = []
        for at in range(1, 30):
            with rt._cond:  # the engine takes them (and counts their steps) once the target is set
                handles = rt.submit_many(requests)
                target.update(steps=0, at=at, handle=handles[1])
            results = [h.result(120) for h in handles]
            assert results[0].error is None and results[2].error is None
            assert results[1].finish_reason in ("abort", "length")
            reasons.append(results[1].finish_reason)
            leak_free(rt)
        assert reasons.count("abort") >= 10  # cancelled at many points of its life, not only once it ended


def test_a_long_thinker_prefill_does_not_stall_talker_frames_and_each_kind_launches_once_a_step():
    with Runtime(card(prefill_chunk_rows=16)) as rt:
        engine, step, family = rt.engine, rt.engine.step, rt.family
        launches: list[list[tuple[Any, int]]] = []

        def recorded() -> bool:
            before = len(family.think.calls), len(family.talk.calls), len(family.codec.calls)
            did = step()
            launches.append(family.think.calls[before[0]:] + family.talk.calls[before[1]:]
                            + family.codec.calls[before[2]:])
            if not submitted.is_set() and any(k is Work.TALK_FRAME for k, _ in launches[-1]):
                talking.set()  # a's talker decodes: held here until b is queued, however fast the host is
                submitted.wait(60)
            return did

        talking, submitted = threading.Event(), threading.Event()
        engine.step = recorded  # type: ignore[method-assign]
        a = rt.submit({"prompt": [1, 2, 3], "talker_prefix": [4, 5], "tokens": 24})
        try:
            assert talking.wait(60), "request a's talker never decoded"
            b = rt.submit({"prompt": [(5 * k) % 48 for k in range(96)], "tokens": 2})  # six prefill chunks
        finally:
            submitted.set()
        assert a.result(120).error is None and b.result(120).error is None
        for s in launches:
            paged = [k for k, _ in s if isinstance(k, Work)]
            assert len(paged) == len(set(paged))  # each of the paged loops' kinds at most once a step
        prefilling = [s for s in launches if any(k is Work.THINK_PREFILL for k, _ in s)]
        assert len(prefilling) >= 6
        busy = [s for s in prefilling if any(k is Work.TALK_FRAME for k, _ in s)]
        assert len(busy) >= 5  # a's talker frames went on beside b's prefill chunks
        leak_free(rt)


def test_refused_at_load_naming_the_field():
    base = card().model_dump(by_alias=True)
    cyclic = dict(base, loops=dict(base["loops"], talker=dict(base["loops"]["talker"], feeds=["thinker"])))
    with pytest.raises((CardError, ValueError), match=r"loops\.\w+\.feeds: a cycle"):
        TwoLoopCard.model_validate(cyclic)
    wrong = dict(base, loops=dict(base["loops"], thinker=dict(base["loops"]["thinker"], feeds=["codec"]),
                                  talker=dict(base["loops"]["talker"], feeds=[])))
    with pytest.raises((CardError, ValueError), match=r"loops\.thinker\.feeds: 'codec' \(CodecLoop\) takes frames; "
                                                      r"'thinker' \(ThinkerLoop\) gives tokens"):
        TwoLoopCard.model_validate(wrong)
    from twoloop.family import TwoLoopFamily
    family = TwoLoopFamily(card())
    family.kv_specs[TALKER] = family.kv_specs[THINKER]  # one KV spec for both loops, by accident
    with pytest.raises(ValueError, match=r"loops\.talker\.kv: the KV of loops\.thinker too"):
        Runtime(card(), family=family)  # type: ignore[arg-type]


def test_the_engine_bench_times_the_two_paged_loops_card():
    from v2.bench.engine import two_paged_loops
    from v2.card import load_card

    report = two_paged_loops(load_card(str(Path(__file__).parent / "twoloop" / "twoloop.toml")), 4, 1)
    assert report["paged_loops"] == ["thinker", "talker"] and [r["rows"] for r in report["rows"]] == [1, 16, 64]
    at64 = report["rows"][-1]["best"]
    assert at64["rows_per_step"] > 64  # both loops' rows (and chunks) in the same steps


def test_a_graph_refuses_a_paged_loop_named_twice_or_not_paged_and_a_request_too_long_for_the_talker():
    from types import SimpleNamespace

    from v2.runtime.family import LoopGraph, LoopSpec
    from v2.kit.sequence import ARLoop

    a = ARLoop(SimpleNamespace(prefill_chunk_rows=16), "a", "e")
    with pytest.raises(ValueError, match="paged: 'a' is named twice"):
        LoopGraph((LoopSpec("a", a),), paged=("a", "a"))
    with pytest.raises(ValueError, match="paged: 'b' is no loop of the graph"):
        LoopGraph((LoopSpec("a", a),), paged=("a", "b"))
    with Runtime(card()) as rt:  # 96 + 1 + 32 talker rows: one more than the talker's 8 blocks of 16
        r = rt.submit({"prompt": [1], "talker_prefix": [2] * 96, "tokens": 32}).result(60)
        assert r.finish_reason == "error" and "KV rows in loop 'talker'" in (r.error or "")
        leak_free(rt)


def test_a_loop_after_the_audio_loop_takes_its_chunks_and_changes_nothing_it_consumes(alone):
    """The card adds `aligner` after the audio loop (`codec` feeds it): it takes every chunk, batched across
    requests, and the requests' tokens, codes, logprobs and audio are those without it."""
    from twoloop.family import ALIGNER, energy

    with Runtime(card(aligner=True)) as rt:
        assert rt.engine.graph.audio == "codec" and rt.engine.graph.sink.name == ALIGNER
        handles = rt.submit_many([dict(r, stream=True) for r in REQUESTS])
        got = []
        for h in handles:
            r = h.result(120)
            assert r.error is None and r.finish_reason == "length"
            chunks = list(h)
            o = rt.family.outputs[h.request_id]
            assert o[ALIGNER] == [energy(c.audio) for c in chunks] and len(chunks) > 1  # every chunk, in order
            got.append((o[THINKER].codes, o[THINKER].logprobs, o[TALKER].codes, o[TALKER].logprobs, r.audio))
        s = rt.stats()
        assert s["kinds"]["align"]["calls"] < s["kinds"]["align"]["rows"]  # chunks of several requests at once
        leak_free(rt)
    same(got, alone)
