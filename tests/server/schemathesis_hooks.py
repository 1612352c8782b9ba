"""Schemathesis hooks for tests/server/test_schemathesis.py (loaded by the CLI through SCHEMATHESIS_HOOKS).

A schema can say a form part is an audio file (`contentMediaType: audio/wav`) but not what makes one: the
part gets a real one (a quarter second of a tone, 16-bit wav). And a batch's negative cases: an item whose
fields break the schema fails alone, in its result (designs/server.md, the batch), so the batch answers 200;
`negative_data_rejection_by_item` is schemathesis's `negative_data_rejection` (which the test runs in its
place) but for such a case holds that some item's result is an error naming a field."""

from __future__ import annotations

import base64
import io

import numpy as np
import schemathesis
import soundfile as sf
from hypothesis import strategies as st
from schemathesis.specs.openapi.checks import negative_data_rejection


def tone_wav() -> bytes:
    t = np.arange(6000) / 24000
    buf = io.BytesIO()
    sf.write(buf, 0.3 * np.sin(2 * np.pi * 220 * t), 24000, format="WAV", subtype="PCM_16")
    return buf.getvalue()


schemathesis.openapi.media_type("audio/wav", st.just(tone_wav()))


BATCH = "/v1/audio/speech/batch"
CAPTIONED = "/dev/captioned_speech"  # the speech route's alias with word timestamps: a speech body too


@schemathesis.check
def negative_data_rejection_by_item(ctx, response, case) -> bool | None:
    """schemathesis's `negative_data_rejection`, but a batch case the schema forbids may be answered 200 when
    some item's result is an error naming its field (the item refused alone)."""
    try:
        return negative_data_rejection(ctx, response, case)
    except Exception as e:
        if case.path != BATCH or response.status_code != 200:
            raise
        why = str(e)
    refused = [r for r in response.json()["results"] if r["status"] == "error" and r["error"]["param"]]
    assert refused, f"a schema-violating batch ({why}) was answered 200 with no item refused"
    return None


SPEECH = "/v1/audio/speech"
CHAT = "/v1/chat/completions"
VOICES = "/v1/audio/voices"
TONE_B64 = base64.b64encode(tone_wav()).decode()


def tone(container: str) -> str:
    """The tone in another container, base64 (an input_audio part's data must be in the format it names)."""
    buf = io.BytesIO()
    t = np.arange(6000) / 24000
    sf.write(buf, 0.3 * np.sin(2 * np.pi * 220 * t), 24000, format=container)
    return base64.b64encode(buf.getvalue()).decode()


TONES = {"wav": TONE_B64, "mp3": tone("MP3"), "flac": tone("FLAC"), "ogg": tone("OGG")}  # the omni family's formats


def _frames(body: dict, ours: str, peers: str) -> int | None:
    value = body.get(ours) if body.get(ours) is not None else body.get(peers)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _positive(case) -> bool:
    return case.meta is not None and case.meta.generation.mode.is_positive


@schemathesis.hook
def filter_case(ctx, case) -> bool:
    """What JSON Schema cannot say, left out of the speech route's positive cases and of a batch's where an item
    meets it (the server refuses each naming its field; test_errors.py holds those refusals): a frame floor over the frame limit (`min_frames` >
    `max_frames`, under either name), and one value under its two names given two different values."""
    body = case.body
    if case.path == VOICES and case.method.upper() == "POST" and isinstance(body, dict) and body.get("name") == "":
        return False  # schemathesis's coverage phase fills a required part of a form that has a custom part
        # strategy with "" whatever its schema says, and calls it either mode (4.32, coverage/_operation.py);
        # the empty name's 400 is test_schema_bounds.py's
    if case.path not in (SPEECH, BATCH, CAPTIONED) or not isinstance(body, dict) or not _positive(case):
        return True
    if case.path == BATCH:  # each item is a speech request: its own fields over the request-level ones
        items = body.get("items")
        defaults = {k: v for k, v in body.items() if k != "items"}
        return not isinstance(items, list) or all(_speakable({**defaults, **item}) for item in items
                                                  if isinstance(item, dict))
    return _speakable(body)


def _speakable(body: dict) -> bool:
    """What the schema cannot say of a speech request holds: no frame floor over the limit, no value given two
    different values under its two names."""
    for ours, peers in (("max_frames", "max_new_tokens"), ("min_frames", "min_new_tokens")):
        if body.get(ours) is not None and body.get(peers) is not None and body[ours] != body[peers]:
            return False
    floor, limit = _frames(body, "min_frames", "min_new_tokens"), _frames(body, "max_frames", "max_new_tokens")
    if body.get("timestamps") == "word" and body.get("stream") is True and body.get("stream_format") != "sse":
        return False  # word timestamps on a raw audio stream (the schema's description says it; openapi_words.py)
    return floor is None or limit is None or floor <= limit


def _recorded(message):
    """A chat message whose `input_audio` parts carry a real recording in the format each names (a wav where it
    names another)."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return message
    return {**message, "content": [
        _with_tone(part) if isinstance(part, dict) and isinstance(part.get("input_audio"), dict) else part
        for part in content]}


def _with_tone(part: dict) -> dict:
    audio = part["input_audio"]
    return {**part, "input_audio": {**audio, "data": TONES.get(audio.get("format"), TONE_B64)}}


@schemathesis.hook
def map_case(ctx, case):
    """In a positive case, a string `ref_audio` is a real recording (the schema says it is an audio file, not
    what makes one), a batch's default and items' too; so is a chat message's `input_audio` part's `data`."""
    body = case.body
    if not _positive(case) or not isinstance(body, dict):
        return case
    if case.path == CHAT and isinstance(body.get("messages"), list):
        case.body = {**body, "messages": [_recorded(m) for m in body["messages"]]}
    if case.path in (SPEECH, CAPTIONED) and isinstance(body.get("ref_audio"), str):
        case.body = {**body, "ref_audio": TONE_B64}
    if case.path == BATCH:  # the request-level default and each item's own
        recorded = {**body, "ref_audio": TONE_B64} if isinstance(body.get("ref_audio"), str) else dict(body)
        if isinstance(body.get("items"), list):
            recorded["items"] = [{**item, "ref_audio": TONE_B64} if isinstance(item, dict) and
                                 isinstance(item.get("ref_audio"), str) else item for item in body["items"]]
        case.body = recorded
    return case
