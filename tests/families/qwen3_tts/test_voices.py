"""Stored voices for Qwen3-TTS on the tiny card (seeded weights, CPU): `rt.voices.add(name, audio, text=...)`
encodes the recording through both encoders (reference codes and the x-vector, kept as the store's named array
`x_vector`), and `{"voice": name}` clones from it: in context with its transcript, from the x-vector alone
without one (or with `x_vector_only`), the same codes and audio as passing the same recording directly with
the same seed; a voice lacking the x-vector is refused naming it; nothing leaks."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from v2.errors import RequestError
from v2.runtime import Runtime
from v2.voices.store import VoiceError, VoiceStore

from .conftest import wait_idle

WAV = (np.random.default_rng(8).standard_normal(30000) * 0.1).astype(np.float32)  # 1.25 s at 24 kHz
OTHER = (np.random.default_rng(9).standard_normal(20000) * 0.2).astype(np.float32)
TEXT = "Some words here."


@pytest.fixture(scope="module")
def rt(tmp_path_factory):
    runtime = Runtime.from_card("qwen3_tts_tiny", device="cpu", voices_dir=str(tmp_path_factory.mktemp("voices")))
    runtime.voices.add("alice", (WAV, 24000), text=TEXT)
    runtime.voices.add("bob", (OTHER, 24000))  # no transcript: x-vector only
    yield runtime
    runtime.close()


def same(a, b) -> None:
    assert a.error is None and b.error is None and a.finish_reason == b.finish_reason
    assert np.array_equal(a.codes, b.codes) and np.array_equal(a.audio, b.audio)


def test_add_encodes_the_codes_and_the_x_vector_and_a_fresh_store_reads_them_back(rt):
    alice = rt.voices.get("alice")
    assert np.array_equal(alice.codes, rt.encode_audio((WAV, 24000)))  # the codec encoder's codes
    assert alice.codes.shape == (-(-len(WAV) // 1920), 16) and alice.text == TEXT
    assert alice.arrays["x_vector"].shape == (64,) and alice.arrays["x_vector"].dtype == np.float32
    assert alice.info()["arrays"] == ["x_vector"]
    fresh = VoiceStore(rt.voices.directory, encode=lambda _: None, width=16, codebook_size=2048,
                       arrays=rt.family.voice_arrays)
    again = fresh.get("alice")
    assert np.array_equal(again.codes, alice.codes) and np.array_equal(again.arrays["x_vector"], alice.arrays["x_vector"])
    assert fresh.errors == []


@pytest.mark.parametrize("fields, direct", [
    ({"voice": "alice"}, {"reference_audio": (WAV, 24000), "reference_text": TEXT}),           # in context
    ({"voice": "alice", "reference_text": "Other words."}, {"reference_audio": (WAV, 24000), "reference_text": "Other words."}),
    ({"voice": "alice", "x_vector_only": True}, {"reference_audio": (WAV, 24000), "x_vector_only": True}),
    ({"voice": "bob"}, {"reference_audio": (OTHER, 24000), "x_vector_only": True}),            # no transcript
])
def test_a_stored_voice_equals_passing_its_recording(rt, fields, direct):
    base = {"text": "Hello there, friend.", "seed": 4, "max_frames": 8, "temperature": 0.9}
    same(rt.submit({**base, **fields}).result(60), rt.submit({**base, **direct}).result(60))
    wait_idle(rt)


def test_a_voice_batches_streams_shares_a_prompt_and_speaks_long_text(rt):
    reqs = [{"text": "Good day to you.", "voice": "alice", "seed": s, "max_frames": 6} for s in (1, 2, 3)]
    alone = [rt.submit(r).result(60) for r in reqs]
    for a, b in zip(alone, [h.result(60) for h in rt.submit_many(reqs)]):
        same(a, b)
    for a, b in zip(alone, [h.result(60) for h in rt.submit_many(reqs, share_prompt=True)]):  # nothing to encode
        same(a, b)
    handle = rt.submit({**reqs[0], "stream": True})
    assert np.array_equal(np.concatenate([c.audio for c in handle], axis=1), alone[0].audio)
    text = "One short sentence here. " * 20  # 500 characters: segments of at most 300
    r = rt.submit({"text": text, "voice": "alice", "seed": 1, "max_frames": 3}).result(60)
    assert r.error is None and len(r.segments) == 2
    wait_idle(rt)


def test_a_voice_without_its_x_vector_is_refused_naming_it(rt):
    codes = rt.voices.get("alice").codes
    with pytest.raises(VoiceError, match="^x_vector: this runtime's voices carry it"):
        rt.voices.add("codes-only", codes)
    with pytest.raises(VoiceError, match=r"^x_vector: expected finite float32 of shape \[64\]"):
        rt.voices.add("short", codes, arrays={"x_vector": np.zeros(63)})
    with pytest.raises(VoiceError, match=r"^arrays: \['speaker'\] are not arrays"):
        rt.voices.add("other", codes, arrays={"x_vector": np.zeros(64), "speaker": np.zeros(2)})
    with pytest.raises(VoiceError, match="^arrays: given with audio"):
        rt.voices.add("audio", (WAV, 24000), arrays={"x_vector": np.zeros(64)})
    given = rt.voices.add("given", codes, text=TEXT, arrays={"x_vector": rt.voices.get("alice").arrays["x_vector"]})
    same(rt.submit({"text": "Hi.", "voice": "given", "seed": 2, "max_frames": 4}).result(60),
         rt.submit({"text": "Hi.", "voice": "alice", "seed": 2, "max_frames": 4}).result(60))
    entry = rt.voices.directory / "given"
    codes_only = VoiceStore(rt.voices.directory, encode=lambda _: None, width=16, codebook_size=2048)
    codes_only.add("given", codes, text=TEXT, replace=True)  # the same name written by a store of codes alone
    assert not (entry / "x_vector.npy").exists()
    with pytest.raises(RequestError, match="^voice: the stored entry 'given' .* x_vector.npy: missing"):
        rt.submit({"text": "Hi.", "voice": "given"})
    assert any(e.startswith("given:") for e in (rt.voices.list(), rt.voices.errors)[1])
    shutil.rmtree(entry)
    assert json.loads((rt.voices.directory / "alice" / "meta.json").read_text())["arrays"] == ["x_vector"]


@pytest.mark.parametrize("request_, field", [
    ({"text": "Hi.", "voice": "alice", "reference_audio": (WAV, 24000)}, "voice"),
    ({"text": "Hi.", "voice": "alice", "speaker": "ryan"}, "speaker"),
    ({"text": "Hi.", "voice": "alice", "instruction": "Loud."}, "instruction"),
    ({"text": "Hi.", "voice": "nobody"}, "voice"),
    ({"text": "Hi.", "voice": "../alice"}, "voice"),
    ({"text": "Hi.", "voice": 3}, "voice"),
])
def test_bad_voice_requests_are_refused_naming_the_field(rt, request_, field):
    with pytest.raises(RequestError) as e:
        rt.submit(request_)
    assert str(e.value).startswith(f"{field}:"), str(e.value)
    wait_idle(rt)
