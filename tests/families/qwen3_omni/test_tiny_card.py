"""The seeded embedded card `qwen3_omni_tiny` (no files): a chat turn with text and audio in, text and speech
out; the streamed text deltas add up to the result's text; a text-only turn takes no talker slot."""

from __future__ import annotations

import base64
import io
import wave

import numpy as np
import pytest

from v2.events import TextDelta
from v2.runtime import Runtime

pytestmark = pytest.mark.exact


def wav_bytes(seconds: float = 0.5, rate: int = 16000) -> str:
    t = np.arange(int(seconds * rate)) / rate
    pcm = (0.3 * np.sin(2 * np.pi * 220 * t) * 32767).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return base64.b64encode(out.getvalue()).decode()


@pytest.fixture(scope="module")
def tiny() -> Runtime:
    with Runtime.from_card("qwen3_omni_tiny", device="cpu") as rt:
        yield rt


def test_chat_turn_with_audio(tiny: Runtime) -> None:
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                             {"type": "input_audio", "input_audio": {"data": wav_bytes(),
                                                                                     "format": "wav"}}]}]
    h = tiny.submit({"messages": messages, "max_tokens": 6, "max_frames": 10, "speaker": "Chelsie", "stream": True})
    chunks = list(h)
    r = h.result()
    assert r.error is None and len(r.text_ids or ()) == 6 and r.codes.shape == (10, 16)
    assert r.audio.shape == (1, 10 * 1920 - 555) and r.sample_rate == 24000
    np.testing.assert_array_equal(np.concatenate([c.audio for c in chunks], axis=1), r.audio)
    deltas = [e.item for e in h.events() if e.loop == "thinker"]
    assert all(isinstance(d, TextDelta) for d in deltas)
    assert "".join(d.text for d in deltas) == r.text  # type: ignore[attr-defined]
    same = tiny.submit({"messages": messages, "max_tokens": 6, "max_frames": 10, "speaker": "Chelsie"}).result()
    np.testing.assert_array_equal(same.audio, r.audio)


def test_text_only(tiny: Runtime) -> None:
    r = tiny.submit({"messages": [{"role": "user", "content": "Hi"}], "modalities": ["text"], "max_tokens": 5}).result()
    assert r.error is None and len(r.text_ids or ()) <= 5 and r.codes.shape == (0, 16) and r.audio.shape == (1, 0)
    assert r.finish_reason == r.text_finish_reason


def test_the_seeded_card_makes_finite_audible_noise(tiny: Runtime) -> None:
    """Every seeded part stays finite (convolutions, transposed convolutions and stacked experts drawn by their
    fan-in, not as norm scales): the tiny card's audio is noise, never NaN or silence."""
    r = tiny.submit({"messages": [{"role": "user", "content": "Say something."}], "max_tokens": 4, "max_frames": 8,
                     "seed": 1}).result()
    assert r.audio.size > 0 and np.isfinite(r.audio).all()
    assert 1e-4 < float(np.abs(r.audio).max()) <= 1.0
