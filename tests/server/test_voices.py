"""The voice routes and reference audio. The runtime's voice store (`rt.voices`) and its `voice` and
`reference_audio` request fields arrive with voice cloning: the round trips through them run once the runtime
has them and are skipped before; until then the server says cloning is not available, and the routes are
checked against an in-memory store with the same methods."""

from __future__ import annotations

import base64
import io
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf

from serverkit import CARD, TEXT, LiveServer, in_process, s16, shared_runtime
from v2.card import load_card
from v2.runtime import Runtime
from v2.voices.store import VoiceError, VoiceExists
from v2.server import schema as schema_module
from v2.server import voices as voices_module
from v2.server.schema import OPENAI_VOICES, runtime_supports

VOICES = "/v1/audio/voices"
SPEECH = "/v1/audio/speech"
HAS_STORE = hasattr(shared_runtime(), "voices") and runtime_supports("voice")


@pytest.fixture(scope="module")
def live():
    with LiveServer(shared_runtime()) as server:
        yield server


@pytest.fixture(scope="module")
def sample_wav() -> bytes:
    """A short recording to clone from: the tiny card's own output as a 16-bit wav."""
    result = in_process(shared_runtime(), text="A voice to keep.", seed=3, max_frames=12)
    buf = io.BytesIO()
    sf.write(buf, result.audio.T, result.sample_rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def test_listing_has_the_openai_names(live):
    data = httpx.get(live.url + VOICES).json()
    builtin = [v["id"] for v in data["voices"] if v["kind"] == "builtin"]
    assert set(OPENAI_VOICES) <= set(builtin) | {v["id"] for v in data["voices"]}
    assert all(v["id"] == v["name"] for v in data["voices"])
    assert data["cloning"] is HAS_STORE


class _WithoutStore:
    """The runtime as one from before voice cloning: no `voices` attribute."""

    def __init__(self, runtime: Any) -> None:
        self._runtime = runtime

    def __getattr__(self, name: str) -> Any:
        if name == "voices":
            raise AttributeError(name)
        return getattr(self._runtime, name)


def test_a_runtime_without_voice_cloning_says_so(monkeypatch, sample_wav):
    for module in (schema_module, voices_module):  # requests without reference_audio / voice fields
        monkeypatch.setattr(module, "runtime_supports", lambda field: False)
    with LiveServer(_WithoutStore(shared_runtime())) as server:
        url = "data:audio/wav;base64," + base64.b64encode(sample_wav).decode()
        r = httpx.post(server.url + SPEECH, json={"input": TEXT, "ref_audio": url})
        assert r.status_code == 400 and r.json()["error"]["param"] == "ref_audio"
        assert "voice cloning is not available on this runtime" in r.json()["error"]["message"]
        r = httpx.post(server.url + VOICES, files={"audio_sample": ("v.wav", sample_wav, "audio/wav")},
                       data={"name": "kept"})
        err = r.json()["error"]
        assert r.status_code == 400 and err["param"] == "audio_sample"
        assert "voice cloning is not available on this runtime" in err["message"]
        r = httpx.delete(server.url + VOICES + "/kept")
        assert r.status_code == 400 and r.json()["error"]["param"] == "name"
        listing = httpx.get(server.url + VOICES).json()
        assert listing["cloning"] is False and {v["kind"] for v in listing["voices"]} == {"builtin"}
        r = httpx.post(server.url + SPEECH, json={"input": TEXT, "voice": "alloy", "max_frames": 4,
                                                 "response_format": "wav"})
        assert r.status_code == 200  # OpenAI's names still speak, with the card's voice


def test_upload_needs_its_fields(live, sample_wav):
    r = httpx.post(live.url + VOICES, files={"audio_sample": ("v.wav", sample_wav, "audio/wav")})
    assert r.status_code == 400 and r.json()["error"]["param"] == "name"
    r = httpx.post(live.url + VOICES, data={"name": "kept"}, files={"other": ("x", b"1")})
    assert r.status_code == 400 and r.json()["error"]["param"] == "audio_sample"


@pytest.mark.skipif(not HAS_STORE, reason="needs the runtime's voice store (rt.voices, the `voice` field)")
def test_a_stored_voice_round_trips(live, sample_wav):
    rt, name = shared_runtime(), "server-test-voice"
    r = httpx.post(live.url + VOICES, files={"audio_sample": ("v.wav", sample_wav, "audio/wav")},
                   data={"name": name, "ref_text": "A voice to keep."}, timeout=120)
    assert r.status_code == 200, r.text
    try:
        assert name in [v["id"] for v in httpx.get(live.url + VOICES).json()["voices"] if v["kind"] == "stored"]
        body = {"input": TEXT, "voice": name, "seed": 4, "max_frames": 16, "response_format": "wav"}
        r = httpx.post(live.url + SPEECH, json=body, timeout=120)
        assert r.status_code == 200, r.text
        want = in_process(rt, text=TEXT, voice=name, seed=4, max_frames=16)
        assert np.array_equal(sf.read(io.BytesIO(r.content), dtype="int16")[0], s16(want.audio))
    finally:
        assert httpx.delete(live.url + VOICES + "/" + name).status_code == 200
    assert name not in [v["id"] for v in httpx.get(live.url + VOICES).json()["voices"]]
    r = httpx.post(live.url + SPEECH, json={"input": TEXT, "voice": name})
    assert r.status_code == 400 and r.json()["error"]["param"] == "voice"


@pytest.mark.skipif(not runtime_supports("reference_audio"), reason="needs the runtime's `reference_audio` field")
def test_ref_audio_as_a_data_url_clones(live, sample_wav):
    url = "data:audio/wav;base64," + base64.b64encode(sample_wav).decode()
    body = {"input": TEXT, "ref_audio": url, "seed": 6, "max_frames": 16, "response_format": "wav"}
    r = httpx.post(live.url + SPEECH, json=body, timeout=120)
    assert r.status_code == 200, r.text
    want = in_process(shared_runtime(), text=TEXT, reference_audio=sample_wav, seed=6, max_frames=16)
    assert np.array_equal(sf.read(io.BytesIO(r.content), dtype="int16")[0], s16(want.audio))
    bad = httpx.post(live.url + SPEECH, json={**body, "ref_audio": base64.b64encode(b"not audio").decode()})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "ref_audio"


@pytest.mark.skipif(not HAS_STORE, reason="needs the runtime's voice store (rt.voices, the `voice` field)")
def test_a_card_without_the_encoder_refuses_cloning_naming_the_param(sample_wav, tmp_path):
    card = load_card(CARD)
    vocoder = card.experts.vocoder.model_copy(update={"encoder": False})
    card = card.model_copy(update={"experts": card.experts.model_copy(update={"vocoder": vocoder})})
    rt = Runtime.from_card(card, voices_dir=str(tmp_path))
    try:
        with LiveServer(rt) as server:
            url = "data:audio/wav;base64," + base64.b64encode(sample_wav).decode()
            r = httpx.post(server.url + SPEECH, json={"input": TEXT, "ref_audio": url})
            assert r.status_code == 400 and r.json()["error"]["param"] == "ref_audio"
            assert "encoder" in r.json()["error"]["message"]
            r = httpx.post(server.url + VOICES, files={"audio_sample": ("v.wav", sample_wav)}, data={"name": "kept"})
            assert r.status_code == 400 and r.json()["error"]["param"] == "audio_sample"
    finally:
        rt.close()


class _MemoryStore:
    """A voice store with the runtime's methods, in memory."""

    def __init__(self) -> None:
        self.voices: dict[str, tuple[bytes, str | None]] = {}

    def add(self, name: str, audio: Any, *, text: str | None = None, replace: bool = False) -> None:
        if "/" in name:
            raise VoiceError(f"name: {name!r} has a path separator", field="name")  # the error says its field
        if name in self.voices and not replace:
            raise VoiceExists(name)
        self.voices[name] = (audio, text)

    def list(self) -> list[dict[str, Any]]:
        return [{"name": n, "text": t} for n, (_, t) in self.voices.items()]

    def get(self, name: str) -> Any:
        return self.voices.get(name)

    def remove(self, name: str) -> None:
        del self.voices[name]


class _WithStore:
    def __init__(self, runtime: Any, store: _MemoryStore) -> None:
        self._runtime, self.voices = runtime, store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)


def test_routes_over_a_store_with_the_runtimes_methods(monkeypatch, sample_wav):
    monkeypatch.setattr(voices_module, "runtime_supports", lambda field: True)
    store = _MemoryStore()
    with LiveServer(_WithStore(shared_runtime(), store)) as server:
        r = httpx.post(server.url + VOICES, files={"audio_sample": ("v.wav", sample_wav, "audio/wav")},
                       data={"name": "alloy", "ref_text": "A voice to keep."})
        assert r.status_code == 200 and r.json()["voice"]["id"] == "alloy"
        assert store.voices["alloy"] == (sample_wav, "A voice to keep.")
        again = httpx.post(server.url + VOICES, files={"audio_sample": ("v.wav", b"other", "audio/wav")},
                           data={"name": "alloy"})
        assert again.status_code == 409 and again.json()["error"]["param"] == "name"
        assert store.voices["alloy"] == (sample_wav, "A voice to keep.")
        again = httpx.post(server.url + VOICES, files={"audio_sample": ("v.wav", sample_wav, "audio/wav")},
                           data={"name": "alloy", "ref_text": "A voice to keep.", "replace": "true"})
        assert again.status_code == 200 and store.voices["alloy"] == (sample_wav, "A voice to keep.")
        listing = httpx.get(server.url + VOICES).json()["voices"]
        assert [v["id"] for v in listing if v["kind"] == "stored"] == ["alloy"]  # a stored name wins over the built-in
        assert "alloy" not in [v["id"] for v in listing if v["kind"] == "builtin"]
        legacy = httpx.get(server.url + VOICES, params={"legacy": "true"}).json()  # Kokoro's list of names
        assert legacy == {"voices": [v["id"] for v in listing]} and legacy["voices"][0] == "alloy"
        assert all(isinstance(n, str) for n in legacy["voices"]) and len(legacy["voices"]) == len(OPENAI_VOICES)
        assert httpx.get(server.url + VOICES, params={"legacy": "false"}).json()["voices"] == listing
        r = httpx.get(server.url + VOICES, params={"legacy": "maybe"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "legacy"
        r = httpx.post(server.url + VOICES, files={"audio_sample": ("v.wav", sample_wav)}, data={"name": "a/b"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "name"
        assert httpx.delete(server.url + VOICES, params={"name": "alloy"}).json()["deleted"] is True
        r = httpx.delete(server.url + VOICES + "/alloy")
        assert r.status_code == 404 and r.json()["error"]["code"] == "voice_not_found"
        assert store.voices == {}
