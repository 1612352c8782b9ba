"""A bad value of any HTTP field is refused naming that field as OpenAI's `param` (and the message starts with
it), whichever layer refuses it: the body's schema, the server's own checks, or the runtime (whose
`RequestError.field` the server maps through its table); and the server hands the runtime a typed request."""

from __future__ import annotations

import base64
import io
import string

import httpx
import numpy as np
import pytest
import soundfile as sf
from hypothesis import given, settings, strategies as st

from serverkit import CARD, TEXT, LiveServer, shared_runtime
from v2.families.moss_tts_local.request import SpeechRequest
from v2.server import ServerConfig
from v2.server.audio import FORMATS, RATES
from v2.server.schema import OPENAI_VOICES, SpeechBody

SPEECH = "/v1/audio/speech"
CAP = 600  # the tiny card's max_frames (checked below)
MODELS = ServerConfig.for_card(CARD).model_names


@pytest.fixture(scope="module")
def live():
    with LiveServer(shared_runtime()) as server:
        yield server


def _wav() -> str:
    """One second of noise as a base64 WAV: a usable reference recording."""
    buffer = io.BytesIO()
    sf.write(buffer, np.random.default_rng(0).uniform(-0.3, 0.3, 24000).astype(np.float32), 24000, format="WAV")
    return base64.b64encode(buffer.getvalue()).decode()


JSON = st.one_of(st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False, allow_infinity=False),
                 st.text(max_size=12), st.lists(st.integers(), max_size=3),
                 st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))


def _int(v: object) -> bool:
    """What an integer field takes: an int, or a whole float (JSON has one number type; JSON Schema's `integer`
    is 7.0 too, and the server takes it as 7)."""
    return isinstance(v, int) and not isinstance(v, bool) or isinstance(v, float) and v.is_integer()


def _wrong(ok) -> st.SearchStrategy:
    """JSON values of a type the field does not take."""
    return JSON.filter(lambda v: not ok(v))


NUMBER = lambda v: _int(v) or isinstance(v, float)  # noqa: E731
TEXTUAL = lambda v: isinstance(v, str)  # noqa: E731
LONG = st.integers(20_001, 20_100).map(lambda n: "w" * n)  # over the card's max_text_chars
NEVER_A_VOICE = st.text(string.ascii_letters, min_size=1, max_size=10).map(lambda s: "nobody-" + s)
FRAMES = st.integers(1, CAP)


def _bad(value: st.SearchStrategy, ok=NUMBER) -> st.SearchStrategy:
    return st.one_of(value, _wrong(ok))


def _one(field: str, values: st.SearchStrategy) -> st.SearchStrategy:
    return values.map(lambda v: {field: v})


def _two_values(a: str, b: str) -> st.SearchStrategy:
    return st.tuples(FRAMES, FRAMES).filter(lambda p: p[0] != p[1]).map(lambda p: {a: p[0], b: p[1]})


def _min_over_max(low: str, high: str) -> st.SearchStrategy:
    return st.tuples(FRAMES, FRAMES).filter(lambda p: p[0] > p[1]).map(lambda p: {low: p[0], high: p[1]})


# every HTTP field -> bodies (over {"input": TEXT}) that are bad because of that field alone
BAD: dict[str, st.SearchStrategy] = {
    "model": _one("model", _bad(st.text(max_size=24).filter(lambda s: s not in MODELS), TEXTUAL)),
    "input": _one("input", st.one_of(st.just(""), st.text(" \t\n\r", max_size=8), st.integers(4097, 5000).map(
        lambda n: "x" * n), st.none(), _wrong(TEXTUAL))),
    "voice": _one("voice", st.one_of(NEVER_A_VOICE, NEVER_A_VOICE.map(lambda s: {"id": s}), _wrong(TEXTUAL))),
    "instructions": _one("instructions", _bad(LONG, TEXTUAL)),
    "language": _one("language", _bad(LONG, TEXTUAL)),
    "response_format": _one("response_format", _bad(st.text(max_size=8).filter(lambda s: s not in FORMATS), TEXTUAL)),
    "speed": _one("speed", _bad(st.floats(-1e6, 1e6).filter(lambda x: x != 1.0))),
    "stream_format": _one("stream_format", _bad(st.text(max_size=8).filter(lambda s: s not in ("audio", "sse")),
                                                TEXTUAL)),
    "stream": st.one_of(st.just({"stream": False, "stream_format": "sse"}),
                        _one("stream", _wrong(lambda v: isinstance(v, bool)))),
    "seed": _one("seed", _bad(st.one_of(st.integers(-2**70, -1), st.integers(2**63, 2**70)), _int)),
    "temperature": _one("temperature", _bad(st.one_of(st.floats(-1e6, -1e-9),  # (-0.0 is 0: greedy)
                                                      st.floats(0, 0.25, exclude_min=True, exclude_max=True),
                                                      st.floats(3, 1e6, exclude_min=True)))),
    "top_p": _one("top_p", _bad(st.one_of(st.floats(-1e6, 0), st.floats(1, 1e6, exclude_min=True)))),
    "top_k": _one("top_k", _bad(st.one_of(st.integers(-2**70, -1), st.integers(2**31, 2**70)), _int)),
    "repetition_penalty": _one("repetition_penalty", _bad(st.one_of(st.floats(-1e6, 0.8, exclude_max=True),
                                                                    st.floats(2, 1e6, exclude_min=True)))),
    "max_new_tokens": _one("max_new_tokens", _bad(st.one_of(st.integers(-2**70, 0), st.integers(CAP + 1, 2**70)),
                                                  _int)),
    "max_frames": st.one_of(_one("max_frames", _bad(st.one_of(st.integers(-2**70, 0), st.integers(CAP + 1, 2**70)),
                                                    _int)), _two_values("max_frames", "max_new_tokens")),
    "min_new_tokens": st.one_of(_one("min_new_tokens", _bad(st.one_of(st.integers(-2**70, -1),
                                                                      st.integers(CAP + 1, 2**70)), _int)),
                                _min_over_max("min_new_tokens", "max_new_tokens")),
    "min_frames": st.one_of(_one("min_frames", _bad(st.one_of(st.integers(-2**70, -1), st.integers(CAP + 1, 2**70)),
                                                    _int)), _min_over_max("min_frames", "max_frames")),
    "ref_audio": _one("ref_audio", _bad(st.one_of(
        st.sampled_from(["", "file:///etc/passwd", "http://127.0.0.1/a.wav", "data:audio/wav,abc"]),
        st.text(string.ascii_letters, max_size=8).map(lambda s: "!" + s),  # not base64
        st.binary(min_size=1, max_size=256).map(lambda b: base64.b64encode(b).decode())), TEXTUAL)),  # not audio
    "ref_text": st.one_of(_one("ref_text", st.text(max_size=12)),  # without ref_audio
                          st.text(" \t\n", max_size=4).map(lambda s: {"ref_text": s, "ref_audio": _wav()}),
                          _one("ref_text", _wrong(TEXTUAL)).map(lambda b: {**b, "ref_audio": _wav()})),
    "x_vector_only_mode": st.one_of(_one("x_vector_only_mode", st.booleans()),  # without ref_audio
                                    _one("x_vector_only_mode", _wrong(lambda v: isinstance(v, bool))),
                                    st.booleans().map(lambda b: {"x_vector_only_mode": b, "ref_audio": _wav()})),
    "sample_rate": _one("sample_rate", _bad(st.integers(-2**40, 2**40).filter(lambda r: r not in RATES["mp3"]),
                                            _int)),
    # MOSS-TTS-Local takes no context: any value is refused naming it (a well-formed one as unsupported)
    "context": _one("context", st.one_of(JSON, st.lists(st.fixed_dictionaries({"text": st.text(max_size=8)}, optional={
        "speaker": st.integers(0, 3), "audio": st.just(_wav())}), max_size=2))),
    # the shared runtime has no aligner: any value is refused naming it ("word" as unsupported)
    "timestamps": _one("timestamps", st.one_of(st.just("word"), JSON)),
}


def test_every_http_field_has_bad_values():
    assert set(BAD) == set(SpeechBody.model_fields)
    assert shared_runtime().card.loops.ar_decode.max_frames == CAP


@pytest.mark.parametrize("field", sorted(BAD))
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_a_bad_value_of_any_field_names_that_field(live, field, data):
    body = {"input": TEXT, **data.draw(BAD[field], label="body")}
    r = httpx.post(live.url + SPEECH, json=body, timeout=60)
    assert r.status_code in (400, 404), (r.status_code, r.text[:300])
    err = r.json()["error"]
    assert err["param"] == field and err["message"].startswith(field), err


def test_the_server_hands_the_runtime_the_familys_fields(live, monkeypatch):
    """The body mapped onto the family's field names, parsed once, by the runtime (test_speech.py)."""
    rt = shared_runtime()
    seen: list[object] = []
    submit = type(rt).submit
    monkeypatch.setattr(rt, "submit", lambda request: seen.append(request) or submit(rt, request))
    body = {"input": TEXT, "seed": 4, "top_k": 5, "max_new_tokens": 3, "response_format": "wav", "stream": False}
    r = httpx.post(live.url + SPEECH, json=body, timeout=120)
    assert r.status_code == 200, r.text
    (fields,) = seen
    assert isinstance(fields, dict)
    request = rt.family.parse(fields)
    assert isinstance(request, SpeechRequest)
    assert (request.text, request.seed, request.sampling.audio.top_k, request.max_frames) == (TEXT, 4, 5, 3)
    assert r.content[:4] == b"RIFF" and request.stream is False
