"""Properties of the CSM family through the runtime (tiny fixture checkpoint, CPU): batched == alone (sampled,
with and without context audio), streamed == whole, cached == uncached (the same conversation twice: its
context blocks come from the prefix cache), preempted == alone, a shared prompt == each alone, nothing leaks
(finish, cancel running / waiting / encoding, timeout, failure), and bad input refused naming the field."""

from __future__ import annotations

import re
import threading
import time

import numpy as np
import pytest
import torch

from v2.errors import RequestError

from .conftest import GREEDY, KEYS, ROLLOUT, request_of, runtime, wait_idle

pytestmark = pytest.mark.exact


def same(a, b, atol: float = 0.0) -> None:
    """Equal codes and audio; logprobs within `atol` (0: bit for bit)."""
    assert a.error is None and b.error is None and a.finish_reason == b.finish_reason
    np.testing.assert_array_equal(a.codes, b.codes)
    np.testing.assert_array_equal(a.audio, b.audio)
    if a.trajectory is not None:
        np.testing.assert_array_equal(a.trajectory.codes, b.trajectory.codes)
        np.testing.assert_allclose(a.trajectory.logprobs, b.trajectory.logprobs, atol=atol, rtol=0)


@pytest.fixture(scope="module")
def sampled(crt, cref):
    """Sampled requests (the checkpoint's generation_config.json: temperature 0.9, top-k 50, both stages),
    each run alone."""
    reqs = [request_of(cref, k, seed=11 + i, max_frames=6, **ROLLOUT) for i, k in enumerate(KEYS)]
    reqs.append(request_of(cref, "s0", seed=5, max_frames=5, temperature=1.2, top_k=0,
                           depth_decoder_temperature=0.5, depth_decoder_top_p=0.8, **ROLLOUT))
    return reqs, [crt.submit(r).result() for r in reqs]


def test_batched_equals_alone(crt, sampled):
    reqs, alone = sampled
    together = [h.result() for h in crt.submit_many(reqs)]
    for a, b in zip(together, alone):
        same(a, b)
    assert crt.stats()["kinds"]["ar_frame"]["mean_batch"] > 1


def test_streamed_equals_whole(crt, cref):
    fam = crt.family
    handle = crt.submit(request_of(cref, "s0", max_frames=12, stream=True, **GREEDY))
    chunks = [c.audio for c in handle]
    result = handle.result()
    assert len(chunks) > 1 and np.array_equal(np.concatenate(chunks, axis=1), result.audio)
    whole = fam.codec.decode(torch.from_numpy(result.codes)[None])[0]
    assert torch.equal(torch.from_numpy(result.audio[0]), whole)


def test_cached_equals_uncached(crt, cref):
    """The same conversation twice: the second takes the first's full context blocks from the prefix cache."""
    req = request_of(cref, "ctx", seed=5, max_frames=6, **ROLLOUT)
    before = crt.stats()["prefix_cache_hits"]
    first = crt.submit(req).result()
    second = crt.submit(req).result()
    assert crt.stats()["prefix_cache_hits"] > before
    same(first, second, atol=1e-6)  # the cached prompt's remaining rows are a shorter prefill (its GEMMs round otherwise)


def test_next_turn_reuses_the_last(crt, cref):
    """A conversation's next turn: the context grows by the turn just spoken (its codes), and the earlier turns'
    blocks come from the cache."""
    first_req = request_of(cref, "ctx", seed=8, max_frames=6, **GREEDY)
    first = crt.submit(first_req).result()
    spoken = {"text_ids": first_req["text_ids"], "codes": first.codes}
    nxt = {**first_req, "text_ids": cref["s0_input_ids"].tolist()[1:-1], "context": [*first_req["context"], spoken]}
    before = crt.stats()["prefix_cache_hits"]
    again = crt.submit(nxt).result()
    assert crt.stats()["prefix_cache_hits"] >= before + 2 and again.error is None


def test_shared_prompt_equals_alone(crt, cref):
    reqs = [request_of(cref, "s1", seed=s, max_frames=6, **ROLLOUT) for s in (1, 2, 3)]
    alone = [crt.submit(r).result() for r in reqs]
    shared = [h.result() for h in crt.submit_many(reqs, share_prompt=True)]
    for a, b in zip(shared, alone):
        same(a, b)
    with pytest.raises(RequestError, match="^context"):
        crt.submit_many([request_of(cref, "ctx")] * 2, share_prompt=True)


def test_preempted_equals_alone(cref):
    """A KV pool of 5 blocks of 16 rows: three conversations of 32-34 prompt rows (two blocks each, a third for
    their frames) take turns."""
    with runtime(max_prompt_rows=48, max_frames=32, kv_blocks=5) as rt:
        base = request_of(cref, "ctx", max_frames=16, **GREEDY, **ROLLOUT)
        reqs = [{**base, "text_ids": base["text_ids"] + extra} for extra in ([], [13], [11, 13])]
        together = [h.result() for h in rt.submit_many(reqs)]
        assert rt.stats()["kv_preemptions"] > 0
        for r, t in zip(reqs, together):  # recomputed KV (a prefill of the frames' rows) rounds otherwise
            alone = rt.submit(r).result()
            np.testing.assert_array_equal(t.codes, alone.codes)
            np.testing.assert_allclose(t.trajectory.logprobs, alone.trajectory.logprobs, atol=5e-3, rtol=0)
        wait_idle(rt)


def test_nothing_leaks(crt, cref, monkeypatch):
    """Finish, cancel (running, waiting, encoding), timeout and a failing loop all give every slot, block
    and encode back."""
    real = crt.family.backbone_loop.advance
    doomed: set[int] = set()
    # the request submitted after `known` is filled: its first frame takes longer than its timeout, so it cannot
    # stop before it (marked before it is submitted: a frame step can run before `submit` returns)
    known: set[int] = set()
    slept: set[int] = set()
    paced: set[int] = set()  # the streamed request: 10 ms a frame at least, so its cancel comes while it runs

    def advance(state, plan, row):
        if state.request_id in doomed:
            raise RuntimeError("injected")
        if state.request_id in paced:
            time.sleep(0.01)
        if known and state.request_id not in known and state.request_id not in slept:
            slept.add(state.request_id)
            time.sleep(0.4)
        return real(state, plan, row)

    monkeypatch.setattr(crt.family.backbone_loop, "advance", advance)
    started = threading.Event()
    streaming = crt.submit(request_of(cref, "s0", max_frames=60, stream=True))
    paced.add(streaming.request_id)
    streaming.subscribe(lambda chunk: started.set())
    failing = crt.submit(request_of(cref, "s1", max_frames=30))
    doomed.add(failing.request_id)
    encoding = crt.submit(request_of(cref, "ctx", max_frames=30))
    encoding.cancel()
    known.update(h.request_id for h in (streaming, failing, encoding))
    late = crt.submit(request_of(cref, "s0", max_frames=60, timeout=0.3))
    assert started.wait(30)
    streaming.cancel()
    results = [h.result() for h in (streaming, failing, encoding, late)]
    assert [r.finish_reason for r in results] == ["abort", "error", "abort", "abort"]
    assert "injected" in results[1].error and "timeout" in results[3].error
    wait_idle(crt)


WAV = (np.zeros(4800, np.float32), 24000)
BAD = [
    ({"text": "hello"}, "text"),  # the fixture checkpoint ships no tokenizer.json
    ({"text_ids": [5], "text": "hi"}, "text"),
    ({"text_ids": []}, "text_ids"),
    ({"text_ids": [10**9]}, "text_ids"),
    ({"text_ids": [5, 128002]}, "text_ids"),  # an audio id in a turn's text
    ({"text_ids": [5], "speaker": 1}, "speaker"),  # text_ids hold the speaker tag
    ({"text_ids": [5], "speaker": -1}, "speaker"),
    ({"text_ids": [5], "context": [{"text": "hi"}]}, "context.text"),
    ({"text_ids": [5], "context": [{"text_ids": [5], "speaker": 0}]}, "context.speaker"),
    ({"text_ids": [5], "context": [{"text_ids": [5], "audio": b"not audio"}]}, "context.audio"),
    ({"text_ids": [5], "context": [{"text_ids": [5], "audio": 7}]}, "context.audio"),
    ({"text_ids": [5], "context": [{"text_ids": [5], "audio": WAV, "codes": [[0] * 32]}]}, "context.audio"),
    ({"text_ids": [5], "context": [{"text_ids": [5], "codes": [[0] * 31]}]}, "context.codes"),
    ({"text_ids": [5], "context": [{"text_ids": [5], "codes": [[2051] * 32]}]}, "context.codes"),  # past the model's ids
    ({"text_ids": [5], "context": [{"text_ids": [5], "mood": "calm"}]}, "context.mood"),
    ({"text_ids": [5], "context": [{"text_ids": [5]}] * 40}, "context"),
    ({"text_ids": [5], "reference_audio": WAV}, "reference_text"),
    ({"text_ids": [5], "reference_text_ids": [5]}, "reference_text_ids"),
    ({"text_ids": [5], "voice": "nobody"}, "voice"),
    ({"text_ids": [5], "max_frames": 10**6}, "max_frames"),
    ({"text_ids": [5], "min_frames": 2}, "min_frames"),
    ({"text_ids": [5], "temperature": -1.0}, "temperature"),
    ({"text_ids": [5], "depth_decoder_top_p": 0.0}, "depth_decoder_top_p"),
    ({"text_ids": [5], "depth_decoder_top_k": -2}, "depth_decoder_top_k"),
    ({"text_ids": [5], "sampling": {"stop": {"temperature": 1.0}}}, "sampling.stop"),
    ({"text_ids": [5], "sampling": {"repetition_penalty": 1.1}}, "sampling.repetition_penalty"),
    ({"text_ids": [5], "sampling": {"depth_decoder": {"top_k": -1}}}, "sampling.depth_decoder.top_k"),
    ({"text_ids": [5], "sampling": {"audio": {"top_k": 5}}, "top_k": 5}, "sampling.audio.top_k"),
    ({"text_ids": [5], "instruction": "whisper"}, "instruction"),
    ({"text_ids": [5], "language": "en"}, "language"),
    ({"text_ids": [5], "x_vector_only": True}, "x_vector_only"),
    ({"text_ids": [5], "stream": True, "decode_audio": False}, "stream"),
    ({"text_ids": [5] * 300}, "text_ids"),
    ({"text_ids": [5], "context": [{"text_ids": [5] * 300}]}, "context"),
]


@pytest.mark.parametrize("fields, name", BAD)
def test_bad_request_names_the_field(crt, fields, name):
    with pytest.raises(RequestError) as e:
        crt.submit(fields)
    said = re.sub(r"\.\d+(?=[.:])", "", str(e.value))  # a message may name a turn's index: context.0.mood
    assert e.value.field == name and said.startswith(f"{name}: "), (e.value.field, str(e.value))


def test_a_card_without_the_codec_makes_codes_only(cref, crt):
    """`[loops.codec]` left out: the backbone feeds nothing, the codes are the same, no audio is made."""
    from v2.runtime import Runtime

    from .conftest import CHECKPOINT, fixture_card

    data = fixture_card().model_dump(by_alias=True)
    data["loops"].pop("codec")
    data["loops"]["backbone"]["feeds"] = []
    card = type(fixture_card()).model_validate(data)
    req = request_of(cref, "ctx", max_frames=8, **GREEDY)
    with Runtime.from_card(card, checkpoint=str(CHECKPOINT), device="cpu", dtype=torch.float32) as rt:
        r = rt.submit(req).result()
        assert "codec" not in rt.family.pools and wait_idle(rt)["running"] == 0
    np.testing.assert_array_equal(r.codes, crt.submit(req).result().codes)
    assert r.audio.shape[1] == 0 and r.finish_reason == "length"
