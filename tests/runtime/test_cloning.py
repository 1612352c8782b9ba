"""Voice cloning through the runtime: reference audio encoded as batched ENCODE work, clone and continuation
prompts, the voice store on disk, and bad audio refused naming the field."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import soundfile as sf
import torch

from conftest import wait_idle
from holds import Hold
from v2.contracts import WorkUnitKind
from v2.models.moss_codec.audio_in import prepare_reference
from v2.errors import RequestError
from v2.runtime import Runtime
from v2.voices.store import VoiceError, VoiceStore

RATE = 48000


def speech_like(seconds: float, seed: int, rate: int = RATE) -> np.ndarray:
    """[2, n] float32: a gliding harmonic tone under a syllable envelope, a little noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    pitch = 140 + 30 * np.sin(2 * np.pi * 0.7 * t + seed)
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    tone = sum(np.sin(k * phase) / k for k in range(1, 6)) * (0.35 + 0.65 * np.abs(np.sin(2 * np.pi * 4 * t)))
    left = 0.3 * tone + 0.003 * rng.standard_normal(len(t))
    return np.stack([left, 0.8 * left]).astype(np.float32)


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    rt = Runtime.from_card("moss_tts_local_tiny", device="cpu", voices_dir=str(tmp_path_factory.mktemp("voices")))
    yield rt
    rt.close()


@pytest.fixture(scope="module")
def wav_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("audio") / "speaker.wav"
    sf.write(path, speech_like(1.3, 1, 44100).T, 44100)  # another rate: resampled on the way in
    return path


def encoder_codes(runtime, source) -> np.ndarray:
    """What the encoder gives for one recording, called directly (no engine)."""
    wav = prepare_reference(source, sample_rate=RATE)
    codes, lengths = runtime.family.encoder.encode(torch.from_numpy(wav)[None])
    return codes[0, :, : int(lengths[0])].T.numpy()  # [N, 12]


def test_reference_audio_gives_exactly_the_codes_of_its_encoded_reference(runtime, wav_file):
    codes = encoder_codes(runtime, str(wav_file))
    assert codes.shape[1] == 12 and len(codes) == int(1.3 * 12.5)
    request = {"text": "Clone this voice.", "seed": 5, "max_frames": 12}
    by_audio = runtime.submit({**request, "reference_audio": str(wav_file)}).result(60)
    by_bytes = runtime.submit({**request, "reference_audio": wav_file.read_bytes()}).result(60)
    by_codes = runtime.submit({**request, "reference_codes": codes}).result(60)
    assert by_audio.error is None and np.array_equal(by_audio.codes, by_codes.codes)
    assert np.array_equal(by_bytes.codes, by_codes.codes)
    assert by_audio.metrics.prompt_rows == by_codes.metrics.prompt_rows


def test_references_of_concurrent_requests_are_encoded_in_one_batch_each_as_alone(runtime):
    sources = [(speech_like(0.5 + 0.3 * i, 10 + i), RATE) for i in range(4)]
    alone = [encoder_codes(runtime, s) for s in sources]
    before = runtime.stats()["kinds"]["encode"]
    handles = runtime.submit_many([{"text": "batched", "reference_audio": s, "seed": i, "max_frames": 4, "min_frames": 4}
                                   for i, s in enumerate(sources)])
    results = [h.result(60) for h in handles]
    after = runtime.stats()["kinds"]["encode"]
    assert after["calls"] - before["calls"] == 1 and after["rows"] - before["rows"] == 4  # one call, four requests
    for i, (r, codes) in enumerate(zip(results, alone)):
        expected = runtime.submit({"text": "batched", "reference_codes": codes, "seed": i, "max_frames": 4,
                                   "min_frames": 4}).result(60)
        assert np.array_equal(r.codes, expected.codes)


def test_continuation_lays_the_reference_out_as_assistant_audio_after_transcript_and_text(runtime):
    cfg = runtime.model.cfg
    codes = np.arange(36, dtype=np.int64).reshape(3, 12) * 7 % 1024
    rows = runtime.submit({"text": " and then more.", "reference_codes": codes, "reference_text": "What was said",
                           "max_frames": 1, "profile": "rollout"}).result(60).trajectory.prompt_rows
    plain = runtime.submit({"text": "What was said and then more.", "max_frames": 1,
                            "profile": "rollout"}).result(60).trajectory.prompt_rows
    # the prompt of section 1 with "None" as reference and transcript + text, then the 3 assistant rows
    assert np.array_equal(rows[:-3], plain)
    assert plain[-1, 0] == cfg.ids.audio_start
    assert (rows[-3:, 0] == cfg.ids.audio_assistant_slot).all() and np.array_equal(rows[-3:, 1:], codes)
    clone = runtime.submit({"text": "x", "reference_codes": codes, "max_frames": 1,
                            "profile": "rollout"}).result(60).trajectory.prompt_rows
    user_rows = clone[(clone[:, 0] == cfg.ids.audio_user_slot)]
    assert np.array_equal(user_rows[:, 1:], codes)  # clone mode: the codes sit in the user turn instead


def test_a_voice_survives_a_restart_and_speaks_like_its_codes(tmp_path, wav_file):
    first = Runtime.from_card("moss_tts_local_tiny", device="cpu", voices_dir=str(tmp_path))
    try:
        voice = first.voices.add("alice", str(wav_file))
        first.voices.add("bob", voice.codes[:5], text="Hello, I am Bob.")
    finally:
        first.close()
    second = Runtime.from_card("moss_tts_local_tiny", device="cpu", voices_dir=str(tmp_path))
    try:
        assert [v.name for v in second.voices.list()] == ["alice", "bob"] and not second.voices.errors
        assert np.array_equal(second.voices.get("alice").codes, encoder_codes(second, str(wav_file)))
        calls = second.stats()["kinds"]["encode"]["calls"]
        request = {"text": " Nice to meet you.", "seed": 2, "max_frames": 8}
        by_voice = second.submit({**request, "voice": "alice"}).result(60)
        by_codes = second.submit({**request, "reference_codes": voice.codes}).result(60)
        assert np.array_equal(by_voice.codes, by_codes.codes)
        bob = second.submit({**request, "voice": "bob"}).result(60)  # a transcript: continuation
        bob_codes = second.submit({**request, "reference_codes": voice.codes[:5],
                                   "reference_text": "Hello, I am Bob."}).result(60)
        assert np.array_equal(bob.codes, bob_codes.codes)
        assert second.stats()["kinds"]["encode"]["calls"] == calls  # a stored voice is never encoded again
        second.voices.remove("bob")
        with pytest.raises(RequestError, match="voice: no stored voice named 'bob'"):
            second.submit({**request, "voice": "bob"})
    finally:
        second.close()


def test_the_store_skips_corrupt_entries_validates_names_and_takes_concurrent_adds(tmp_path):
    def refuse(_audio):
        raise AssertionError("codes only here")

    store = VoiceStore(tmp_path, encode=refuse, width=12)
    codes = np.ones((4, 12), np.int64)
    threads = [threading.Thread(target=store.add, args=(f"v{i % 4}", codes * i), kwargs={"replace": True})
               for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [v.name for v in store.list()] == ["v0", "v1", "v2", "v3"]
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "meta.json").write_text("{not json")
    (tmp_path / "pickled").mkdir()
    np.save(tmp_path / "pickled" / "codes.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (tmp_path / "pickled" / "meta.json").write_text('{"format": 1, "name": "pickled", "text": null}')
    reloaded = VoiceStore(tmp_path, encode=refuse, width=12)
    assert [v.name for v in reloaded.list()] == ["v0", "v1", "v2", "v3"]
    assert sorted(e.split(":")[0] for e in reloaded.errors) == ["broken", "pickled"]
    for bad in ("../x", "a/b", ".hidden", "", "x" * 65, "a\\b"):
        with pytest.raises(VoiceError, match="voice: name"):
            store.add(bad, codes)
    with pytest.raises(VoiceError, match=r"codes: codes must lie in \[0, 1024\)"):
        store.add("bad", codes * 5000)


def test_bad_audio_is_refused_naming_the_field_and_harms_nothing(runtime, tmp_path):
    bystander = runtime.submit({"text": "I keep going.", "seed": 1, "max_frames": 40, "min_frames": 40})
    ok = (speech_like(0.3, 3), RATE)
    silent_file = tmp_path / "empty.wav"
    sf.write(silent_file, np.zeros((0, 2), np.float32), RATE)
    cases = [
        ({"reference_audio": b"this is not audio"}, "reference_audio: the bytes are not decodable as audio"),
        ({"reference_audio": b""}, "reference_audio: is empty"),
        ({"reference_audio": str(silent_file)}, "reference_audio"),
        ({"reference_audio": (np.zeros(0, np.float32), RATE)}, "reference_audio: has no samples"),
        ({"reference_audio": (np.full(4800, np.nan, np.float32), RATE)}, "reference_audio: contains NaN"),
        ({"reference_audio": (np.full(4800, np.inf, np.float32), RATE)}, "reference_audio: contains NaN or infinite"),
        ({"reference_audio": (np.zeros(4800, np.float32), 0)}, "reference_audio: sample rate"),
        ({"reference_audio": (speech_like(31, 4), RATE)}, "reference_audio: is 31.00 s long; at most 30 s"),
        ({"reference_audio": [ok] * 5}, "reference_audio: 5 recordings, over the card's max_references"),
        ({"reference_audio": [ok, (np.zeros(10, np.float32), RATE)]}, "reference_audio[1]"),
        ({"reference_audio": str(tmp_path / "missing.wav")}, "reference_audio: no such file"),
        ({"reference_audio": 42}, "reference_audio: expected a path"),
        ({"reference_audio": ok, "reference_codes": [[1] * 12]}, "reference_audio: give only one"),
        ({"reference_audio": [ok, ok], "reference_text": "two"}, "reference_text: continuation needs exactly one"),
        ({"voice": "nobody"}, "voice: no stored voice named 'nobody'"),
    ]
    deadline = time.time() + 120  # a hang check
    while runtime.stats()["waiting"]:  # the bystander admitted: a count taken now is the refusals' alone to change
        assert time.time() < deadline, runtime.stats()
        time.sleep(0.005)
    before = runtime.stats()
    for fields, message in cases:
        with pytest.raises(RequestError) as e:
            runtime.submit({"text": "x", **fields})
        assert str(e.value).startswith(message), (fields.keys(), str(e.value))
    assert runtime.stats()["waiting"] == before["waiting"]
    with pytest.raises(RequestError, match="reference_audio: a group shares one prompt"):
        runtime.rollout([{"text": "x", "reference_audio": ok}], n=2)
    assert bystander.result(60).finish_reason == "length"


def test_a_request_cancelled_while_its_reference_waits_is_freed(runtime, monkeypatch):
    encode = runtime.engine.executors[WorkUnitKind.ENCODE]
    real, encoding, release = encode.launch, threading.Event(), threading.Event()

    def launch(work):  # its reference's first chunk waits for the cancel: the request cannot end before it
        if not release.is_set():
            encoding.set()
            release.wait(60)
        return real(work)

    monkeypatch.setattr(encode, "launch", launch)
    handle = runtime.submit({"text": "x", "reference_audio": (speech_like(2.0, 8), RATE), "max_frames": 4})
    try:
        assert encoding.wait(60)  # a hang check
        handle.cancel()
    finally:
        release.set()
    assert handle.result(60).finish_reason == "abort"
    s = wait_idle(runtime)
    assert s["encoding"] == 0 and s["encode_slots_in_use"] == 0


def test_a_long_reference_is_encoded_a_chunk_per_step_while_frames_keep_flowing(tmp_path, monkeypatch):
    from v2.card import load_card

    card = load_card("moss_tts_local_tiny")
    encode = card.loops.encode.model_copy(update={"chunk_frames": 4, "max_streams": 4, "max_references": 2})
    rt = Runtime.from_card(card.model_copy(update={"loops": card.loops.model_copy(update={"encode": encode})}),
                           device="cpu", voices_dir=str(tmp_path))
    try:
        long_ref = (speech_like(6.0, 21), RATE)  # 75 frames: 19 chunks of 4
        # the bystander is held at its 10th frame until the references are queued: its 290 frames to come take
        # 290 steps, far more than the ~25 steps of the encodes, however fast the host or slow the test's thread
        hold = Hold(rt.family.ar_loop, monkeypatch, lambda state: len(state.codes) >= 10)
        bystander = rt.submit({"text": "frames keep coming", "seed": 1, "max_frames": 300, "min_frames": 300})
        try:
            hold.wait()
            frames_before = rt.stats()["kinds"]["ar_frame"]["calls"]
            handles = rt.submit_many([{"text": "x", "reference_audio": [long_ref, (speech_like(1.0, 22), RATE)],
                                       "seed": 3, "max_frames": 3, "min_frames": 3}]
                                     + [{"text": "y", "reference_audio": (speech_like(0.6, 23 + i), RATE),
                                         "max_frames": 2} for i in range(3)])  # 2 + 3 recordings for 4 slots
        finally:
            hold.release()
        results = [h.result(120) for h in handles]
        kinds = rt.stats()["kinds"]
        assert kinds["encode"]["calls"] >= 19 and kinds["ar_frame"]["calls"] - frames_before >= 19
        whole = [encoder_codes(rt, long_ref), encoder_codes(rt, (speech_like(1.0, 22), RATE))]
        by_codes = rt.submit({"text": "x", "reference_codes": whole, "seed": 3, "max_frames": 3,
                              "min_frames": 3}).result(60)
        assert np.array_equal(results[0].codes, by_codes.codes)  # chunked == whole, through the prompt
        assert all(r.finish_reason in ("length", "stop") for r in results)
        bystander.cancel()
        s = wait_idle(rt)
        assert s["encode_slots_in_use"] == 0 and s["encoding"] == 0
    finally:
        rt.close()
