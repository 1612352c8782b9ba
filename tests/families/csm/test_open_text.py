"""Open requests in the CSM family (`Runtime.open`: the spoken turn's text in pieces, spoken once complete) on
the seeded `csm_tiny` card: whatever the pieces, the result equals `submit` of the whole text bit for bit
(codes and audio, with a context recording encoded while the text arrives), one segment marked on the handle;
nothing said ends with `stop`; a piece that makes the prompt too long is refused naming the field and the
request goes on; an earlier result's codes (spare ids included) are a context turn as they are; what an open
request cannot be is refused naming the field (also on the fixture checkpoint, which has no tokenizer)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from v2.errors import RequestError

from .conftest import wait_idle

pytestmark = pytest.mark.exact
TEXT = "Hello there, how are you today?"


@pytest.fixture(scope="module")
def tiny():
    from v2.runtime import Runtime

    rt = Runtime.from_card("csm_tiny", device="cpu")
    yield rt
    rt.close()


@pytest.fixture(scope="module")
def wav() -> tuple[np.ndarray, int]:
    t = np.arange(int(0.5 * 16000)) / 16000
    return (0.3 * np.sin(2 * np.pi * 330 * t)).astype(np.float32), 16000


def pieces(text: str, seed: int) -> list[str]:
    rng, out, pos = random.Random(seed), [], 0
    while pos < len(text):
        n = rng.randint(1, 7)
        out.append(text[pos:pos + n])
        pos += n
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_an_open_request_speaks_what_submit_speaks(tiny, wav, seed):
    request = {"speaker": 1, "seed": 5, "max_frames": 6, "stream": True,
               "context": [{"speaker": 0, "text": "Good morning.", "audio": wav}]}
    whole = tiny.submit({**request, "text": TEXT}).result()
    h = tiny.open(request)
    for piece in pieces(TEXT, seed):
        h.feed(piece)
    h.end_text()
    streamed = np.concatenate([c.audio for c in h], axis=1)
    got = h.result(120)
    np.testing.assert_array_equal(got.codes, whole.codes)
    np.testing.assert_array_equal(got.audio, whole.audio)
    np.testing.assert_array_equal(streamed, whole.audio)
    (seg,) = got.segments
    assert (seg.text_start, seg.text_end, seg.frame_start, seg.frame_end) == (0, len(TEXT), 0, len(got.codes))
    (mark,) = h.marks()
    assert (mark.text_end, mark.frame_end, mark.finish_reason) == (len(TEXT), len(got.codes), got.finish_reason)
    wait_idle(tiny)


def test_the_first_piece_may_come_with_the_request_and_nothing_said_stops(tiny):
    whole = tiny.submit({"text": TEXT, "seed": 2, "max_frames": 4}).result()
    h = tiny.open({"text": TEXT[:9], "seed": 2, "max_frames": 4})
    h.feed(TEXT[9:])
    h.end_text()
    np.testing.assert_array_equal(h.result(120).codes, whole.codes)
    quiet = tiny.open({"seed": 2})
    quiet.feed("  \n")
    quiet.end_text()
    r = quiet.result(120)
    assert r.finish_reason == "stop" and r.codes.shape == (0, 32) and r.audio.shape[1] == 0
    wait_idle(tiny)


def test_a_piece_past_the_prompt_cap_is_refused_and_the_request_goes_on(tiny):
    cap = tiny.card.loops.backbone.max_prompt_rows
    context = [{"speaker": 0, "text": "Hi.", "codes": np.zeros((cap - 30, 32), np.int64)}]
    h = tiny.open({"seed": 3, "max_frames": 3, "context": context})
    h.feed("Short.")
    with pytest.raises(RequestError) as e:
        h.feed(" and then a great deal more")  # [0]Short. and then ... is one row per byte
    assert e.value.field == "context" and "max_prompt_rows" in str(e.value)
    h.end_text()
    expected = tiny.submit({"text": "Short.", "seed": 3, "max_frames": 3, "context": context}).result()
    np.testing.assert_array_equal(h.result(120).codes, expected.codes)
    with pytest.raises(RuntimeError, match="ended"):
        h.feed("more")
    wait_idle(tiny)


def test_an_earlier_result_s_codes_are_a_context_turn_as_they_are(tiny):
    first = tiny.submit({"text": TEXT, "seed": 9, "max_frames": 5}).result()
    spare = first.codes.copy()
    spare[0, :3] = [2048, 2049, 2050]  # ids past the codec's: what a sampled frame may hold
    a = tiny.submit({"text": "Yes.", "seed": 1, "max_frames": 3,
                     "context": [{"text": TEXT, "codes": spare}]}).result()
    b = tiny.submit({"text": "Yes.", "seed": 1, "max_frames": 3,
                     "context": [{"text": TEXT, "codes": np.minimum(spare, 2047)}]}).result()
    assert a.finish_reason == b.finish_reason == "length"
    assert not np.array_equal(a.codes, b.codes)  # embedded as given, not clamped to codec codes
    wait_idle(tiny)


@pytest.mark.parametrize("fields, name", [
    ({"text_ids": [5]}, "text_ids"),
    ({"profile": "rollout"}, "profile"),
    ({"speaker": -1}, "speaker"),
    ({"context": [{"speaker": 0}]}, "context.text"),
])
def test_what_an_open_request_cannot_be_is_refused_naming_it(tiny, fields, name):
    with pytest.raises(RequestError) as e:
        tiny.open(fields)
    assert e.value.field == name


def test_a_checkpoint_without_a_tokenizer_refuses_an_open_request(crt):
    with pytest.raises(RequestError) as e:
        crt.open({"seed": 0})
    assert e.value.field == "text" and "tokenizer" in str(e.value)
