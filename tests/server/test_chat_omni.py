"""`POST /v1/chat/completions` on the real chat card, qwen3_omni_tiny (seeded weights: noise, not speech), through
the official `openai` client on a real server: text and a decodable wav equal to the runtime's own answer, the
streamed pcm16 deltas and transcript equal to the whole answer under one seed, a text-only reply, a turn
carrying audio, the published input_audio formats and token cap (the family's; a format or cap outside them
refused naming it), data not in its stated format refused naming it while another reply runs on unharmed, and
the speech routes refused naming /v1/chat/completions. The card is copied with the talker's frame cap lowered to
keep each spoken reply short on a CPU (raised for the client that leaves)."""

from __future__ import annotations

import base64
import io
import json
import time
from typing import Any

import httpx
import jsonschema
import numpy as np
import openai
import pytest
import soundfile as sf

from holds import slow_frames
from serverkit import LiveServer, s16
from v2.card import ModelCard, load_card
from v2.runtime import Runtime
from v2.server import ServerConfig

CARD = "qwen3_omni_tiny"
FRAMES = 20  # the talker's cap in the copied card: 1.6 s of audio a reply
HELLO = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello, who are you?"}]
TONE = base64.b64encode(b"RIFF").decode()  # never decoded: the format is refused first
SPOKEN: dict[str, Any] = {"modalities": ["text", "audio"], "audio": {"voice": "Chelsie", "format": "wav"}}


def card_copy(frames: int) -> ModelCard:
    """The card with its talker's frame cap set to `frames`."""
    card: Any = load_card(CARD)  # the omni card (its loops: thinker, talker, code2wav)
    talker = card.loops.talker.model_copy(update={"max_frames": frames})
    return card.model_copy(update={"loops": card.loops.model_copy(update={"talker": talker})})


@pytest.fixture(scope="module")
def live():
    with Runtime.from_card(card_copy(FRAMES), device="cpu") as runtime:
        with LiveServer(runtime, ServerConfig.for_card(CARD)) as server:
            server.runtime = runtime
            yield server


def client(live: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def test_text_and_a_wav_equal_to_the_runtimes_own_answer(live):
    answer = client(live).chat.completions.create(model=CARD, messages=HELLO, seed=4, max_tokens=6, **SPOKEN)
    audio = answer.choices[0].message.audio
    assert answer.choices[0].message.content is None and audio is not None
    wav, rate = sf.read(io.BytesIO(base64.b64decode(audio.data)), dtype="int16", always_2d=True)
    own = live.runtime.submit({"messages": HELLO, "modalities": ["text", "audio"], "speaker": "Chelsie", "seed": 4,
                               "max_tokens": 6}).result(timeout=300)
    assert rate == 24000 and np.array_equal(wav, s16(own.audio)) and len(wav) > 0
    assert audio.transcript == own.text
    assert answer.usage.completion_tokens_details.text_tokens == len(own.text_ids)
    assert answer.usage.completion_tokens_details.audio_tokens == own.metrics.frames
    assert answer.choices[0].finish_reason in ("stop", "length")


def test_streamed_pcm16_and_transcript_equal_the_whole_answer(live):
    c = client(live)
    whole = c.chat.completions.create(model=CARD, messages=HELLO, seed=9, max_tokens=5, **SPOKEN)
    transcript, pcm, finish, usage = [], b"", None, None
    for chunk in c.chat.completions.create(model=CARD, messages=HELLO, seed=9, max_tokens=5, stream=True,
                                           stream_options={"include_usage": True}, **SPOKEN):
        usage = chunk.usage or usage
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        if delta.audio is not None:
            transcript.append(delta.audio.transcript or "")
            pcm += base64.b64decode(delta.audio.data or "")
        finish = chunk.choices[0].finish_reason or finish
    spoken = whole.choices[0].message.audio
    wav, _ = sf.read(io.BytesIO(base64.b64decode(spoken.data)), dtype="int16")
    assert pcm == wav.astype("<i2").tobytes() and len(pcm) > 0
    assert "".join(transcript) == spoken.transcript
    assert finish == whole.choices[0].finish_reason and usage == whole.usage


def test_text_only_runs_the_thinker_alone(live):
    c = client(live)
    answer = c.chat.completions.create(model=CARD, messages=HELLO, seed=1, max_completion_tokens=4)
    assert answer.choices[0].message.audio is None and answer.choices[0].message.content is not None
    assert answer.usage.completion_tokens == answer.usage.completion_tokens_details.text_tokens <= 4
    assert answer.usage.completion_tokens_details.audio_tokens == 0
    streamed = c.chat.completions.create(model=CARD, messages=HELLO, seed=1, max_completion_tokens=4, stream=True)
    assert "".join(ch.choices[0].delta.content or "" for ch in streamed if ch.choices) == \
        answer.choices[0].message.content


def test_a_conversation_is_answered_as_the_runtime_answers_it(live):
    messages = [*HELLO, {"role": "assistant", "content": "I am a model."}, {"role": "user", "content": "Again?"}]
    answer = client(live).chat.completions.create(model=CARD, messages=messages, seed=6, max_tokens=5)
    own = live.runtime.submit({"messages": messages, "modalities": ["text"], "seed": 6,
                               "max_tokens": 5}).result(timeout=300)
    assert answer.choices[0].message.content == own.text
    assert answer.usage.prompt_tokens == own.metrics.prompt_rows and answer.usage.completion_tokens == len(own.text_ids)


def test_a_turn_carrying_audio(live):
    wav = io.BytesIO()
    t = np.arange(8000) / 16000
    sf.write(wav, (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000, format="WAV")
    part = {"type": "input_audio", "input_audio": {"data": base64.b64encode(wav.getvalue()).decode(), "format": "wav"}}
    messages = [{"role": "user", "content": [part, {"type": "text", "text": "What do you hear?"}]}]
    answer = client(live).chat.completions.create(model=CARD, messages=messages, seed=2, max_tokens=4, **SPOKEN)
    own = live.runtime.submit({"messages": messages, "modalities": ["text", "audio"], "speaker": "Chelsie", "seed": 2,
                               "max_tokens": 4}).result(timeout=300)
    wav_out, _ = sf.read(io.BytesIO(base64.b64decode(answer.choices[0].message.audio.data)), dtype="int16",
                         always_2d=True)
    assert np.array_equal(wav_out, s16(own.audio)) and answer.usage.prompt_tokens == own.metrics.prompt_rows


def test_a_bad_recording_is_refused_naming_its_part(live):
    part = {"type": "input_audio", "input_audio": {"data": base64.b64encode(b"not audio").decode(), "format": "wav"}}
    with pytest.raises(openai.BadRequestError) as e:
        client(live).chat.completions.create(model=CARD, messages=[{"role": "user", "content": [part]}])
    assert e.value.param is not None and e.value.param.startswith("messages[0].content[0]"), e.value.body


def _recording(container: str) -> str:
    buf = io.BytesIO()
    t = np.arange(4800) / 16000
    sf.write(buf, (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000, format=container)
    return base64.b64encode(buf.getvalue()).decode()


def test_data_not_in_its_format_is_refused_naming_it_and_a_running_reply_goes_on(live):
    """A wav sent as mp3, a flac sent as wav and bytes that are no audio file: each a 400 in OpenAI's shape naming
    the part's `data`, refused at submit while another reply streams; that reply is the runtime's own answer, and
    the audio encoder ran for none of the refused (the reply carries no audio)."""
    param = "messages[0].content[1].input_audio.data"
    refused = [(_recording("WAV"), "mp3", f"{param}: holds wav audio, not mp3 as its format says"),
               (_recording("FLAC"), "wav", f"{param}: holds flac audio, not wav as its format says"),
               (base64.b64encode(b"not audio " * 50).decode(), "wav", f"{param}: the bytes are not decodable as audio")]
    encoded = live.runtime.stats()["kinds"]["audio_encode"]["rows"]
    body = {"model": CARD, "messages": HELLO, "seed": 3, "max_tokens": 5, "stream": True, **SPOKEN}
    pcm = b""
    with httpx.stream("POST", live.url + "/v1/chat/completions", json=body, timeout=300) as r:
        lines = r.iter_lines()
        events = [next(line for line in lines if '"data"' in line)]  # its first audio: the reply is running
        for data, fmt, message in refused:
            part = {"type": "input_audio", "input_audio": {"data": data, "format": fmt}}
            sent = {"model": CARD, "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}, part]}],
                    **SPOKEN}
            answer = httpx.post(live.url + "/v1/chat/completions", json=sent, timeout=60)
            assert answer.status_code == 400, answer.text
            error = answer.json()["error"]
            assert error["param"] == param, answer.text
            assert error["type"] == "invalid_request_error" and error["code"] == "invalid_value"
            assert error["message"].startswith(message), error["message"]
        events.extend(lines)
    for line in events:
        if line.startswith("data: {"):
            delta = json.loads(line[len("data: "):])["choices"]
            audio = delta[0]["delta"].get("audio") if delta else None
            pcm += base64.b64decode((audio or {}).get("data") or "")
    own = live.runtime.submit({"messages": HELLO, "modalities": ["text", "audio"], "speaker": "Chelsie", "seed": 3,
                               "max_tokens": 5}).result(timeout=300)
    assert len(pcm) > 0 and np.array_equal(np.frombuffer(pcm, "<i2"), s16(own.audio)[:, 0])
    assert live.runtime.stats()["kinds"]["audio_encode"]["rows"] == encoded
    assert not busy(live.runtime.stats()), live.runtime.stats()


def test_the_published_input_audio_formats_and_token_cap_are_the_familys_and_another_is_refused_by_name(live):
    """The schema lists exactly the formats the family decodes (its own list) and caps max_tokens at the card's
    reply cap; a format outside the list (another case included) is refused in OpenAI's shape naming the part's
    `format`, and the published body forbids it too."""
    spec = httpx.get(live.url + "/openapi.json", timeout=60).json()
    schemas = spec["components"]["schemas"]
    assert schemas["ChatInputAudio"]["properties"]["format"]["enum"] == ["wav", "mp3", "flac", "ogg"]
    assert schemas["ChatInputAudio"]["properties"]["format"]["enum"] == list(live.runtime.family.input_audio_formats)
    caps = [o["maximum"] for name in ("max_tokens", "max_completion_tokens")
            for o in schemas["ChatBody"]["properties"][name]["anyOf"] if o.get("type") == "integer"]
    assert caps == [256, 256]  # the card's thinker max_frames
    body = jsonschema.Draft202012Validator({"$ref": "#/components/schemas/ChatBody", "components": spec["components"]})
    for fmt in ("WAV", "aiff", "pcm16"):
        part = {"type": "input_audio", "input_audio": {"data": TONE, "format": fmt}}
        sent = {"model": CARD, "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}, part]}]}
        assert not body.is_valid(sent)
        r = httpx.post(live.url + "/v1/chat/completions", json=sent, timeout=60)
        error = r.json()["error"]
        assert r.status_code == 400 and error["param"] == "messages[0].content[1].input_audio.format", r.text
        assert error["type"] == "invalid_request_error" and error["code"] == "invalid_value"
        assert error["message"].startswith("messages[0].content[1].input_audio.format: expected one of wav, mp3")
    r = httpx.post(live.url + "/v1/chat/completions", json={"model": CARD, "messages": HELLO, "max_tokens": 257},
                   timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens", r.text
    assert not body.is_valid({"model": CARD, "messages": HELLO, "max_tokens": 257})
    assert body.is_valid({"model": CARD, "messages": HELLO, "max_tokens": 256})


def test_the_speech_routes_name_chat_completions(live):
    r = httpx.post(live.url + "/v1/audio/speech", json={"model": CARD, "input": "hello"}, timeout=60)
    assert r.status_code == 404 and "/v1/chat/completions" in r.json()["error"]["message"]
    spec = httpx.get(live.url + "/openapi.json", timeout=60)
    assert spec.status_code == 200 and "/v1/chat/completions" in spec.json()["paths"]


def test_a_client_that_leaves_frees_everything_its_request_held(monkeypatch):
    """A reply of up to 4,000 frames (each made to take >= 5 ms: >= 20 s on any host): the client reads its first
    audio and leaves; the runtime holds nothing well before the reply could have ended, and the request is counted
    as aborted."""
    with Runtime.from_card(card_copy(4000), device="cpu") as runtime:
        slow_frames(runtime.family.talk_loop, monkeypatch, 0.005)
        with LiveServer(runtime, ServerConfig.for_card(CARD)) as server:
            body = {"model": CARD, "messages": HELLO, "stream": True, "max_tokens": 200, **SPOKEN}
            with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=300) as r:
                assert next(line for line in r.iter_lines() if '"data"' in line)  # the first audio
            deadline = time.monotonic() + 60
            while busy(runtime.stats()) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not busy(runtime.stats()), runtime.stats()
            metrics = httpx.get(server.url + "/metrics", timeout=60).text
    assert 'v2_requests_total{finish_reason="abort"} 1.0' in metrics


def busy(stats: dict[str, Any]) -> bool:
    return bool(stats["running"] or stats["waiting"] or any(v for k, v in stats.items() if k.endswith("_in_use")))
