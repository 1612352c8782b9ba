"""A loop a card or a deployment adds to any family's graph, the family knowing nothing of it (v2/runtime/added.py):
the test-only probe (tests/runtime/added_probe.py) measures every audio chunk of a request on its own work kind.
On the two-loop test family and on the MOSS, Qwen3-TTS and CSM tiny cards: it sees every chunk of the request's
audio in order (sample counts and SHA-256 digests equal the result audio's), its results and events are the same
batched as alone, the family's codes and audio are those without it, a cancel at any step frees every slot and
block, and a failing added loop fails its request alone. Refusals at load name the field: an unknown added
loop, an edge it cannot take, a cycle, code named by a card, and two paged loops naming one expert (one KV spec
by accident). Exact on every CPU path (the `exact` marker)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from pydantic import ValidationError

from v2 import registry
from v2.card import CardError, card_path, load_card
from v2.card_added import AddedLoopDecl
from v2.runtime import Runtime

sys.path.insert(0, str(Path(__file__).parent))

from added_probe import ChunkMark, ProbeResult, digest  # noqa: E402
from twoloop.card import TwoLoopCard, card  # noqa: E402
from twoloop.family import TALKER, THINKER  # noqa: E402

pytestmark = pytest.mark.exact

REQUESTS = [{"prompt": [(7 * i + k) % 48 for k in range(4 + 5 * i)], "talker_prefix": list(range(i, i + 3 + 2 * i)),
             "tokens": 5 + 3 * i} for i in range(4)]


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    registry.register("twoloop", "twoloop")
    for name, attr in (("probe", "FACTORY"), ("words", "WORDS"), ("chained", "CHAINED")):
        registry.register_added_loop(name, f"added_probe:{attr}")
    try:
        yield
    finally:
        registry.unregister("twoloop")
        for name in ("probe", "words", "chained"):
            registry.unregister_added_loop(name)


def checked(result: Any, chunks: list[Any], events: list[Any], name: str = "probe") -> ProbeResult:
    """The probe saw every chunk of the result's audio, in order, exactly; its events are its marks."""
    probe: ProbeResult = result.added[name]
    assert [m.seq for m in probe.marks] == list(range(len(probe.marks)))
    assert sum(m.samples for m in probe.marks) == result.audio.shape[1]
    cuts = np.cumsum([0, *[m.samples for m in probe.marks]])
    assert [digest(result.audio[:, a:b]) for a, b in zip(cuts[:-1], cuts[1:])] == [m.digest for m in probe.marks]
    if chunks:  # streamed: the chunks the caller got are the ones it measured
        assert [digest(c.audio) for c in chunks] == [m.digest for m in probe.marks]
    assert [e.item for e in events if e.loop == name] == list(probe.marks)
    assert all(isinstance(e.item, ChunkMark) for e in events if e.loop == name)
    return probe


def slots_free(rt: Runtime) -> None:
    s = rt.stats()
    assert s["running"] == s["waiting"] == s["kv_preempted"] == 0
    assert all(v == 0 for k, v in s.items() if k.endswith("_slots_in_use")), s
    assert "probe_streams_slots_in_use" in s
    for kv in rt.engine.paged.kvs if rt.engine.paged is not None else ():
        kv.pager.blocks.check()
        assert not kv.pager.tables and not kv.paused and kv.pager.blocks.num_held == 0


# ----- the two-loop test family ---------------------------------------------------------------------------------
def twoloop_run(rt: Runtime, requests: list[dict[str, Any]], *, together: bool) -> list[tuple[Any, ...]]:
    handles = rt.submit_many([dict(r, stream=True) for r in requests]) if together else []
    out = []
    for i, request in enumerate(requests):
        h = handles[i] if together else rt.submit(dict(request, stream=True))
        r = h.result(120)
        assert r.error is None and r.finish_reason == "length", r.error
        o = rt.family.outputs[h.request_id]  # type: ignore[attr-defined]
        probe = checked(r, list(h), h.events()) if r.added else None
        assert probe is None or probe.spoken.ids == tuple(request["prompt"])  # what its family exposes
        out.append((o[THINKER].codes, o[TALKER].codes, o[TALKER].logprobs, r.audio.tobytes(), probe and probe.marks))
    return out


@pytest.fixture(scope="module")
def without() -> list[tuple[Any, ...]]:
    registry.register("twoloop", "twoloop")
    with Runtime(card()) as rt:
        return twoloop_run(rt, REQUESTS, together=True)


def test_twoloop_batched_equals_alone_every_chunk_in_order_and_nothing_it_consumes_changes(without):
    with Runtime(card(), add_loops=["probe"]) as rt:
        assert rt.engine.graph.sink.name == "codec" and rt.engine.graph.specs["codec"].feeds == ("probe",)
        alone = twoloop_run(rt, REQUESTS, together=False)
        together = twoloop_run(rt, REQUESTS, together=True)
        s = rt.stats()["kinds"]["probe_measure"]
        assert s["calls"] < s["rows"]  # chunks of several requests measured in one launch
        slots_free(rt)
    assert alone == together
    assert [x[:4] for x in together] == [x[:4] for x in without]  # the family's codes and audio as without it


def test_a_card_declares_it_and_a_deployment_adds_one_by_module_and_attribute(without):
    data = card().model_dump(by_alias=True)
    declared = TwoLoopCard.model_validate(dict(data, added_loops={"probe": {"settings": {"streams": 4}}}))
    with Runtime(declared, add_loops=["second=added_probe:FACTORY"]) as rt:
        assert rt.engine.graph.specs["codec"].feeds == ("probe", "second")
        assert rt.engine.pools["probe_streams"].size == 4
        h = rt.submit(dict(REQUESTS[2], stream=True))
        r = h.result(120)
        chunks = list(h)
        assert checked(r, chunks, h.events()).marks == checked(r, chunks, h.events(), "second").marks
        slots_free(rt)


def test_a_cancel_at_every_step_frees_every_slot_and_block():
    with Runtime(card(think_blocks=8, talk_blocks=8, prefill_chunk_rows=16), add_loops=["probe"]) as rt:
        engine, step = rt.engine, rt.engine.step
        target: dict[str, Any] = {}

        def counted() -> bool:
            target["steps"] = target.get("steps", 0) + 1
            if target["steps"] == target.get("at") and target.get("handle") is not None:
                target["handle"].cancel()
            return step()

        engine.step = counted  # type: ignore[method-assign]
        requests = [dict(r, tokens=12, stream=True) for r in REQUESTS[:3]]
        reasons = []
        for at in range(1, 26):
            with rt._cond:  # the engine takes them (and counts their steps) once the target is set
                handles = rt.submit_many(requests)
                target.update(steps=0, at=at, handle=handles[1])
            results = [h.result(120) for h in handles]
            for i in (0, 2):
                assert results[i].error is None
                checked(results[i], list(handles[i]), handles[i].events())
            assert results[1].finish_reason in ("abort", "length")
            reasons.append(results[1].finish_reason)
            slots_free(rt)
        assert reasons.count("abort") >= 10


def test_a_failing_added_loop_fails_its_request_alone(without):
    fail = {"probe": AddedLoopDecl(settings={"fail_id": REQUESTS[1]["prompt"][0]})}
    with Runtime(card(), add_loops=fail) as rt:
        handles = rt.submit_many([dict(r, stream=True) for r in REQUESTS])
        results = [h.result(120) for h in handles]
        assert results[1].finish_reason == "error" and "probe: told to fail" in (results[1].error or "")
        for i in (0, 2, 3):
            assert results[i].error is None and results[i].audio.tobytes() == without[i][3]
            checked(results[i], list(handles[i]), handles[i].events())
        slots_free(rt)


# ----- the shipped families' tiny cards ------------------------------------------------------------------------
FAMILY_REQUESTS = [{"text": "Hello there.", "max_frames": 14, "seed": 1},
                   {"text": "A second, longer line.", "max_frames": 11, "seed": 2},
                   {"text": "This one says boom.", "max_frames": 9, "seed": 3}]


@pytest.mark.parametrize("name", ["moss_tts_local_tiny", "qwen3_tts_tiny", "csm_tiny"])
def test_every_family_feeds_it_every_chunk_batched_equals_alone_and_a_failure_or_cancel_stays_its_own(name):
    with Runtime.from_card(name, device="cpu") as rt:
        plain = [rt.submit(r).result(300).audio.tobytes() for r in FAMILY_REQUESTS[:2]]
    with Runtime.from_card(name, device="cpu", add_loops={"probe": AddedLoopDecl(settings={"fail_text": "boom"})}) as rt:
        alone = []
        for i, request in enumerate(FAMILY_REQUESTS[:2]):
            h = rt.submit(dict(request, stream=bool(i)))
            r = h.result(300)
            assert r.error is None and r.audio.tobytes() == plain[i]  # the family's audio as without it
            probe = checked(r, list(h) if i else [], h.events())
            assert probe.spoken.text == request["text"] and len(probe.marks) > 1
            alone.append(probe.marks)
        handles = rt.submit_many([dict(r, stream=True) for r in FAMILY_REQUESTS])
        results = [h.result(300) for h in handles]
        assert results[2].finish_reason == "error" and "probe: told to fail" in (results[2].error or "")
        for i in (0, 1):
            assert results[i].error is None and results[i].audio.tobytes() == plain[i]
            assert checked(results[i], list(handles[i]), handles[i].events()).marks == alone[i]
        slots_free(rt)
        engine, step = rt.engine, rt.engine.step
        target: dict[str, Any] = {}

        def counted() -> bool:
            target["steps"] = target.get("steps", 0) + 1
            if target["steps"] == target.get("at") and target.get("handle") is not None:
                target["handle"].cancel()
            return step()

        engine.step = counted  # type: ignore[method-assign]
        for at in (2, 4, 7, 11):
            with rt._cond:  # the engine takes them (and counts their steps) once the target is set
                handles = rt.submit_many([dict(r, stream=True) for r in FAMILY_REQUESTS[:2]])
                target.update(steps=0, at=at, handle=handles[1])
            r0, r1 = handles[0].result(300), handles[1].result(300)
            assert r0.error is None and checked(r0, list(handles[0]), handles[0].events()).marks == alone[0]
            assert r1.finish_reason in ("abort", "length")
            slots_free(rt)


@pytest.mark.parametrize("name", ["moss_tts_local_tiny", "qwen3_tts_tiny"])
def test_open_text_every_chunk_and_its_segments(name):
    with Runtime.from_card(name, device="cpu", add_loops="probe") as rt:
        h = rt.open({"seed": 1, "stream": True, "max_frames": 10})
        for piece in ("Hello there. ", "A second one."):
            h.feed(piece)
        h.end_text()
        r = h.result(300)
        assert r.error is None
        probe = checked(r, list(h), h.events())
        assert probe.segments == len(h.marks()) >= 1  # the family's marks, as the added loop can read them
        assert probe.spoken.text == "Hello there. A second one."  # the text fed, as its family tells (`SpokenInput`)
        slots_free(rt)


# ----- refused at load, naming the field -------------------------------------------------------------------------
def with_added(added: dict[str, Any], **options: Any) -> dict[str, Any]:
    return dict(card(**options).model_dump(by_alias=True), added_loops=added)


@pytest.mark.parametrize("added, options, message", [
    ({"x": {"loop": "nope"}}, {}, r"added_loops\.x\.loop: unknown added loop 'nope' \(known: "),
    ({"x": {"loop": "words"}}, {}, r"added_loops\.x\.after: it takes words .* one loop of the card must give words; "
                                   r"none does"),
    ({"x": {"loop": "words", "after": "codec"}}, {}, r"added_loops\.x\.after: 'codec' \(CodecLoop\) gives audio; 'x' "
                                                     r"takes words"),
    ({"probe": {"after": "thinker"}}, {}, r"added_loops\.probe\.after: 'thinker' \(ThinkerLoop\) gives tokens; "
                                          r"'probe' takes audio"),
    ({"probe": {"after": "nope"}}, {}, r"added_loops\.probe\.after: 'nope' no driven loop of that name"),
    ({"probe": {}}, {"codec": False}, r"added_loops\.probe\.after: it takes audio .* none does"),
    ({"a": {"loop": "chained", "after": "b"}, "b": {"loop": "chained", "after": "a"}}, {},
     r"added_loops\.\w\.after: a cycle \((a -> b -> a|b -> a -> b)\)"),
    ({"probe": {"loop": "added_probe:FACTORY"}}, {}, r"added_loops\.probe\.loop: a card names a registered added "
                                                     r"loop, never code"),
    ({"codec": {"loop": "probe"}}, {}, r"added_loops\.codec: the card's section declares a loop of that name"),
    ({"probe": {"settings": {}, "feeds": ["x"]}}, {}, r"added_loops\.probe\.feeds\s+Extra inputs"),
])
def test_a_card_adding_what_cannot_be_driven_is_refused_naming_the_field(added, options, message):
    with pytest.raises(ValidationError, match=message):
        TwoLoopCard.model_validate(with_added(added, **options))


def test_a_chain_of_added_loops_is_driven_in_order():
    chained = TwoLoopCard.model_validate(with_added({"b": {"loop": "probe", "after": "a"}, "a": {"loop": "chained"}}))
    with Runtime(chained) as rt:
        assert [s.name for s in rt.engine.graph.loops][-2:] == ["a", "b"] and rt.engine.graph.sink.name == "codec"
        h = rt.submit(dict(REQUESTS[0], stream=True))
        r = h.result(120)
        chunks = list(h)
        assert r.added["a"].marks == checked(r, chunks, h.events(), "b").marks  # "a" hands each chunk on, in order
        assert [e.item for e in h.events() if e.loop == "a"] == chunks


def test_a_deployment_adding_what_cannot_be_driven_is_refused_before_any_model_loads(tmp_path):
    text = Path(str(card_path("qwen3_tts_tiny"))).read_text()
    with pytest.raises(CardError, match=r"add_loops\.nope\.loop: unknown added loop 'nope'"):
        Runtime.from_card("qwen3_tts_tiny", device="cpu", add_loops=["nope"])
    with pytest.raises(CardError, match=r"add_loops\.x\.after: 'encode' runs before admission"):
        Runtime.from_card("qwen3_tts_tiny", device="cpu", add_loops={"x": AddedLoopDecl(loop="probe", after="encode")})
    path = tmp_path / "added.toml"
    path.write_text(text + '\n[added_loops.probe]\nsettings = { streams = 2 }\n')
    assert load_card(path).added_loops["probe"].settings == {"streams": 2}
    with pytest.raises(CardError, match=r"add_loops\.probe: the card adds a loop of that name"):
        Runtime.from_card(load_card(path), device="cpu", add_loops=["probe"])
    path.write_text(text + '\n[added_loops.probe]\nafter = "talker"\n')
    with pytest.raises(CardError, match=r"added_loops\.probe\.after: 'talker' \(TalkerLoop\) gives frames; 'probe' "
                                        r"takes audio"):
        load_card(path)


def test_two_paged_loops_naming_one_expert_are_refused_at_card_load(tmp_path):
    base = card().model_dump(by_alias=True)
    loops = base["loops"]
    shared = dict(base, loops=dict(loops, thinker=dict(loops["thinker"], expert="stack"),
                                   talker=dict(loops["talker"], expert="stack")))
    with pytest.raises(ValidationError, match=r"loops\.talker\.expert: 'stack' is the expert of loops\.thinker too; "
                                              r"two paged loops would share one KV spec by accident"):
        TwoLoopCard.model_validate(shared)
    TwoLoopCard.model_validate(dict(base, loops=dict(loops, thinker=dict(loops["thinker"], expert="think"),
                                                     talker=dict(loops["talker"], expert="talk"))))
    text = Path(str(card_path("qwen3_tts_tiny"))).read_text()
    path = tmp_path / "expert.toml"
    path.write_text(text.replace('[loops.talker]\n', '[loops.talker]\nexpert = "nope"\n'))
    with pytest.raises(CardError, match=r"loops\.talker\.expert: no expert 'nope' \(experts: talker, codec\)"):
        load_card(path)
    path.write_text(text.replace('[loops.talker]\n', '[loops.talker]\nexpert = "talker"\n'))
    assert load_card(path).loops.talker.expert == "talker"  # type: ignore[attr-defined]
