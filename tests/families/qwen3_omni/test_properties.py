"""Qwen3-Omni's properties on the runtime (fixture checkpoint, float32): batched == alone (beside a Qwen3-TTS
runtime in one process too), cascaded == sequential (and the talker's frames overlap the thinker's
tokens), streamed == whole, cached == uncached (a repeated conversation reuses the thinker's blocks), preempted
== alone, nothing leaks (finish, cancel, timeout), refusals name the field."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from tests.families.qwen3_omni.conftest import CARD, request, wait_idle
from tests.models.qwen3_omni.conftest import CHECKPOINT
from v2.card import load_card
from v2.errors import RequestError
from v2.runtime import Runtime
from v2.runtime.handles import SpeechResult

pytestmark = pytest.mark.exact
KEYS = ("a", "b", "c", "d")


def same(a: SpeechResult, b: SpeechResult) -> None:
    assert a.error is None and b.error is None, (a.error, b.error)
    assert a.text_ids == b.text_ids and a.finish_reason == b.finish_reason
    np.testing.assert_array_equal(a.codes, b.codes)
    np.testing.assert_array_equal(a.audio, b.audio)


@pytest.fixture(scope="module")
def alone(rt: Runtime, fixture: tuple[dict, dict]) -> dict[str, SpeechResult]:
    ref, meta = fixture
    return {k: rt.submit(request(ref, meta, k)).result() for k in KEYS}


def test_batched_equals_alone(rt: Runtime, fixture: tuple[dict, dict], alone: dict[str, SpeechResult]) -> None:
    ref, meta = fixture
    handles = [rt.submit(request(ref, meta, k)) for k in KEYS * 2]
    for k, h in zip(KEYS * 2, handles):
        same(h.result(), alone[k])
    assert rt.stats()["kinds"]["think_token"]["mean_batch"] > 1


def test_cascaded_equals_sequential(rt: Runtime, fixture: tuple[dict, dict], alone: dict[str, SpeechResult]) -> None:
    ref, meta = fixture
    loop = rt.family.talk_loop  # type: ignore[attr-defined]
    before = loop.overlapped
    cascaded = rt.submit(request(ref, meta, "c")).result()
    assert loop.overlapped > before  # the talker spoke while the thinker was still writing
    loop.sequential = True
    try:
        sequential = rt.submit(request(ref, meta, "c")).result()
    finally:
        loop.sequential = False
    same(cascaded, sequential)
    same(cascaded, alone["c"])


@pytest.mark.parametrize("key", ["a", "c"])
def test_streamed_equals_whole(rt: Runtime, fixture: tuple[dict, dict], alone: dict[str, SpeechResult],
                               key: str) -> None:
    ref, meta = fixture
    h = rt.submit(request(ref, meta, key, stream=True))
    chunks = list(h)
    r = h.result()
    assert len(chunks) > 1
    np.testing.assert_array_equal(np.concatenate([c.audio for c in chunks], axis=1), r.audio)
    same(r, alone[key])
    text = [e.item for e in h.events() if e.loop == "thinker"]
    assert tuple(i for d in text for i in d.ids) == r.text_ids  # type: ignore[attr-defined]


def test_cached_equals_uncached(rt: Runtime, fixture: tuple[dict, dict], alone: dict[str, SpeechResult]) -> None:
    """A conversation's second turn (its first turn's prompt, the model's own reply, a new user turn) reuses the
    first turn's full prompt blocks from the prefix cache, and speaks exactly as a runtime without the cache."""
    ref, meta = fixture
    same(rt.submit(request(ref, meta, "d")).result(), alone["d"])  # the same conversation again: cached blocks
    d = next(p for p in meta["prompts"] if p["key"] == "d")["input_ids"]
    turn1 = d[:3] + d[3:7] * 4 + d[7:12]  # a user turn of 16 stand-in ids, then the generation prompt: 24 rows
    reply = rt.submit({"prompt_ids": turn1, "modalities": ["text"], "max_tokens": 6}).result().text_ids
    turn2 = turn1 + list(reply or ()) + [151645, 198] + d[19:]
    before = rt.stats()["prefix_cache_hits"]
    cached = rt.submit({"prompt_ids": turn2, "talker_temperature": 0.0, "max_tokens": 8, "max_frames": 12}).result()
    assert rt.stats()["prefix_cache_hits"] > before
    data = load_card(CARD).model_dump(by_alias=True)
    data["loops"]["thinker"]["prefix_cache"] = False
    card = type(load_card(CARD)).model_validate(data)
    with Runtime.from_card(card, checkpoint=str(CHECKPOINT), device="cpu", dtype=torch.float32) as fresh:
        same(cached, fresh.submit({"prompt_ids": turn2, "talker_temperature": 0.0, "max_tokens": 8,
                                   "max_frames": 12}).result())


def test_audio_blocks_are_not_shared(rt: Runtime, fixture: tuple[dict, dict], alone: dict[str, SpeechResult]) -> None:
    """The same prompt with other audio: no block of the first's audio rows is reused (its tag differs)."""
    ref, meta = fixture
    other = ref["c_audio_wave_16k"][::-1].copy()
    r = rt.submit(request(ref, meta, "c", audio=[(other, 16000)])).result()
    assert r.error is None and (r.text_ids != alone["c"].text_ids or not np.array_equal(r.codes, alone["c"].codes))
    same(rt.submit(request(ref, meta, "c")).result(), alone["c"])


def test_preempted_equals_alone(fixture: tuple[dict, dict], alone: dict[str, SpeechResult]) -> None:
    """Pools of 6 thinker blocks and 6 talker blocks of 16 rows: four requests take turns."""
    ref, meta = fixture
    data = load_card(CARD).model_dump(by_alias=True)
    for loop in ("thinker", "talker"):
        data["loops"][loop].update(kv_blocks=6, max_prompt_rows=64, max_frames=32)
    card = type(load_card(CARD)).model_validate(data)
    with Runtime.from_card(card, checkpoint=str(CHECKPOINT), device="cpu", dtype=torch.float32) as small:
        handles = [small.submit(request(ref, meta, k)) for k in KEYS]
        for k, h in zip(KEYS, handles):
            same(h.result(), alone[k])
        assert small.stats()["kv_preemptions"] > 0
        wait_idle(small)


def test_nothing_leaks(rt: Runtime, fixture: tuple[dict, dict], monkeypatch: pytest.MonkeyPatch) -> None:
    """Finish, cancel while streaming, cancel while its audio encodes or waits, a timeout, a failing talker and
    a text-only request give every slot, front slot and block back."""
    ref, meta = fixture
    loop = rt.family.talk_loop  # type: ignore[attr-defined]
    real = loop.advance
    doomed: set[int] = set()
    # the request submitted after `known` is filled: its first talker frame takes longer than its timeout, so it
    # cannot stop before it however fast the host is (marked before it is submitted)
    known: set[int] = set()
    slept: set[int] = set()
    paced: set[int] = set()  # the streamed request: 10 ms a frame at least, so its cancel comes while it runs

    def advance(state: object, plan: object, row: object) -> bool:
        rid = getattr(state, "request_id", None)
        if rid in doomed:
            raise RuntimeError("injected")
        if rid in paced:
            time.sleep(0.01)
        if known and rid not in known and rid not in slept:
            slept.add(rid)  # type: ignore[arg-type]
            time.sleep(0.2)
        return bool(real(state, plan, row))

    monkeypatch.setattr(loop, "advance", advance)
    started = threading.Event()
    streaming = rt.submit(request(ref, meta, "a", stream=True))
    paced.add(streaming.request_id)
    streaming.subscribe(lambda chunk: started.set())
    failing = rt.submit(request(ref, meta, "d"))
    doomed.add(failing.request_id)
    encoding = rt.submit(request(ref, meta, "c"))
    encoding.cancel()
    known.update(h.request_id for h in (streaming, failing, encoding))
    late = rt.submit(request(ref, meta, "b", timeout=0.05))
    text = rt.submit(request(ref, meta, "d", modalities=["text"], speaker=None))
    assert started.wait(60)
    streaming.cancel()
    results = [h.result() for h in (streaming, failing, encoding, late, text)]
    assert [r.finish_reason for r in results[:4]] == ["abort", "error", "abort", "abort"]
    assert "injected" in (results[1].error or "")
    assert results[4].error is None and results[4].codes.shape[0] == 0
    s = wait_idle(rt)
    assert s["encoding"] == 0


BAD = [
    ({"prompt_ids": [1, 2]}, "prompt_ids"),  # speech needs the generation prompt at the end
    ({"prompt_ids": [151644, 872, 198, 151655, 151645, 198, 151644, 77091, 198]}, "prompt_ids"),  # an image
    ({"prompt_ids": [151644, 872, 198, 151675, 151645, 198, 151644, 77091, 198]}, "audio"),  # no clip
    ({"prompt_ids": [10**6]}, "prompt_ids"),
    ({"prompt_ids": [151644, 77091, 198], "speaker": "nobody"}, "speaker"),
    ({"prompt_ids": [151644, 77091, 198], "modalities": ["audio"]}, "modalities"),
    ({"prompt_ids": [151644, 77091, 198], "max_tokens": 10**6}, "max_tokens"),
    ({"prompt_ids": [151644, 77091, 198], "temperature": -1.0}, "temperature"),
    ({"prompt_ids": [151644, 77091, 198], "talker_top_p": 0.0}, "talker_top_p"),
    ({"prompt_ids": [151644, 77091, 198], "audio": [(np.zeros(10), 5)]}, "audio"),
    ({"prompt_ids": [151644, 77091, 198], "voice": "mine"}, "voice"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "messages"),
    ({"messages": [{"role": "user", "content": "hi"}], "prompt_ids": [1]}, "messages"),
]


@pytest.mark.parametrize("fields, name", BAD)
def test_bad_request_names_the_field(rt: Runtime, fields: dict, name: str) -> None:
    with pytest.raises(RequestError) as e:
        rt.submit(fields).result()
    assert e.value.field == name or str(e.value).startswith(name), (e.value.field, str(e.value))


def test_batched_equals_alone_next_to_qwen3_tts(rt: Runtime, fixture: tuple[dict, dict],
                                               alone: dict[str, SpeechResult]) -> None:
    """A Qwen3-TTS runtime in the same process, its requests running while these run."""
    ref, meta = fixture
    with Runtime.from_card("qwen3_tts_tiny", device="cpu") as tts:
        tts_reqs = [{"text": f"Hello number {i}.", "speaker": "vivian", "seed": i, "max_frames": 6} for i in range(2)]
        tts_alone = [tts.submit(r).result() for r in tts_reqs]
        tts_handles = [tts.submit(r) for r in tts_reqs]
        handles = [rt.submit(request(ref, meta, k)) for k in KEYS]
        for k, h in zip(KEYS, handles):
            same(h.result(), alone[k])
        for h, b in zip(tts_handles, tts_alone):
            np.testing.assert_array_equal(h.result().codes, b.codes)


def test_sampled_batched_equals_alone(rt: Runtime, fixture: tuple[dict, dict]) -> None:
    """Sampled thinker and talker (noise keyed by each request's seed and step): together == alone; codes only
    (decode_audio false) runs no code2wav and makes the same codes."""
    ref, meta = fixture
    reqs = [request(ref, meta, k, seed=5 + i, temperature=1.0, top_k=50, top_p=0.9, talker_temperature=0.9)
            for i, k in enumerate(KEYS)]
    alone = [rt.submit(r).result() for r in reqs]
    handles = [rt.submit(r) for r in reqs]
    for h, a in zip(handles, alone):
        same(h.result(), a)
    codes_only = rt.submit(reqs[0] | {"decode_audio": False}).result()
    np.testing.assert_array_equal(codes_only.codes, alone[0].codes)
    assert codes_only.audio.shape == (1, 0) and codes_only.text_ids == alone[0].text_ids


def test_shared_prompt_equals_alone(rt: Runtime, fixture: tuple[dict, dict]) -> None:
    """A group (one prompt prefilled once, e.g. RL samples of one prompt), each member sampled with its own
    seed: each equals the same request alone; a prompt with audio is refused naming `audio`."""
    ref, meta = fixture
    reqs = [request(ref, meta, "d", seed=s, temperature=1.0, talker_temperature=0.9) for s in (1, 2, 3)]
    alone = [rt.submit(r).result() for r in reqs]
    before = rt.stats()["shared_prefills"]
    for h, a in zip(rt.submit_many(reqs, share_prompt=True), alone):
        same(h.result(), a)
    assert rt.stats()["shared_prefills"] > before
    with pytest.raises(RequestError) as e:
        rt.submit_many([request(ref, meta, "c")] * 2, share_prompt=True)
    assert e.value.field == "audio"
