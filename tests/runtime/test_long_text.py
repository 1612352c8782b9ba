"""Long text on the tiny card: split at sentence ends (CJK included) and spoken as consecutive segments of one
request (one handle, one stream, one result); each later segment's prompt carries the previous segment's
text and codes (continuation layout); streamed == final; cancel mid-way frees everything; short text is
unchanged; text that cannot be split to fit is refused naming the field."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from v2.card import load_card
from v2.models.moss_tts_local.prompt import build_prompt
from v2.errors import RequestError
from v2.runtime import Runtime
from v2.families.moss_tts_local.segments import segment_seed
from v2.sentences import SplitError, segments, sentences, spoken

from conftest import wait_idle
from holds import Hold

SEGMENT_CHARS = 250
VOICE = np.random.default_rng(11).integers(0, 1024, (20, 12))
ENDS = [". ", "! ", "? ", "; ", "\n", "\u3002", "\uff01", "\uff1f", "\uff1b"]


def long_text(n: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    words = "alpha beta gamma delta epsilon zeta eta theta \u4f60\u597d \u4e16\u754c".split()
    out = ""
    while len(out) < n:
        out += " ".join(rng.choice(words) for _ in range(rng.randint(3, 14))).capitalize() + rng.choice(ENDS)
    return out[:n].rstrip() + "."


@pytest.fixture(scope="module")
def rt():
    card = load_card("moss_tts_local_tiny")
    ar = card.loops.ar_decode.model_copy(update={"max_segment_chars": SEGMENT_CHARS})
    runtime = Runtime.from_card(card.model_copy(update={"loops": card.loops.model_copy(update={"ar_decode": ar})}),
                                device="cpu")
    yield runtime
    runtime.close()


def leak_free(rt: Runtime) -> None:
    s = wait_idle(rt)
    rt.engine.kv.pager.blocks.check()
    assert not rt.engine.kv.pager.tables and s["kv_blocks_free"] == s["kv_blocks"] and s["kv_preempted"] == 0


def test_5000_characters_are_one_result_of_several_segments_streamed_equals_final(rt):
    text = long_text(5000)
    handle = rt.submit({"text": text, "seed": 3, "max_frames": 6, "stream": True})
    chunks = list(handle)
    r = handle.result(120)
    assert r.finish_reason in ("stop", "length") and r.error is None
    assert len(r.segments) == len(segments(text, SEGMENT_CHARS)) >= 15
    assert np.array_equal(np.concatenate([c.audio for c in chunks], axis=1), r.audio)  # bit for bit
    assert [c.seq for c in chunks] == list(range(len(chunks))) and chunks[-1].final and not any(c.final for c in chunks[:-1])
    frame = 0
    for s in r.segments:  # frame ranges tile the codes; text spans tile the text
        assert s.frame_start == frame and 1 <= s.frame_end - s.frame_start <= 6
        frame = s.frame_end
    assert frame == len(r.codes) == r.metrics.frames
    assert [(s.text_start, s.text_end) for s in r.segments] == segments(text, SEGMENT_CHARS)
    assert r.audio.shape[1] == len(r.codes) * rt.family.codec.cfg.hop
    assert r.metrics.prompt_rows == sum(s.prompt_rows for s in r.segments)
    leak_free(rt)


def test_each_segment_is_the_continuation_of_the_previous_one(rt):
    """Segment 0: the user's clone prompt; segment i: transcript (segment i-1) + its text, then segment i-1's
    codes as assistant rows, sampled with `segment_seed`. Each equals that prompt run alone."""
    text = long_text(700, seed=1)
    r = rt.submit({"text": text, "seed": 5, "max_frames": 6, "reference_codes": VOICE}).result(60)
    spans = segments(text, SEGMENT_CHARS)
    assert len(r.segments) == len(spans) >= 3
    cfg, tok, slot = rt.model.cfg, rt.family.tokenizer, rt.model.cfg.ids.audio_assistant_slot
    for i, s in enumerate(r.segments):
        codes = r.codes[s.frame_start:s.frame_end]
        if i == 0:
            prompt = build_prompt(tok, cfg, text[spans[0][0]:spans[0][1]].strip(), reference_codes=torch.from_numpy(VOICE))
        else:
            p = r.segments[i - 1]
            carried = torch.cat([torch.full((p.frame_end - p.frame_start, 1), slot),
                                 torch.from_numpy(r.codes[p.frame_start:p.frame_end])], dim=1)
            prompt = torch.cat([build_prompt(tok, cfg, text[spans[i - 1][0]:spans[i][1]].strip()), carried])
        assert s.prompt_rows == len(prompt)
        last = i == len(r.segments) - 1
        alone = rt.submit({"prompt_rows": prompt, "seed": segment_seed(5, i), "max_frames": 6,
                           "min_frames": 0 if last else 1, "decode_audio": False}).result(60)
        assert np.array_equal(alone.codes, codes), i
        assert alone.finish_reason == s.finish_reason
    leak_free(rt)


def test_a_short_text_is_one_segment_with_the_codes_of_before(rt):
    text = "Hello there. A second sentence; and a third!"
    r = rt.submit({"text": text, "seed": 7, "max_frames": 20}).result(60)
    plain = rt.submit({"prompt_rows": build_prompt(rt.family.tokenizer, rt.model.cfg, text), "seed": 7, "max_frames": 20}).result(60)
    assert np.array_equal(r.codes, plain.codes) and np.array_equal(r.audio, plain.audio)  # the whole text, one prompt
    assert r.metrics.prompt_rows == plain.metrics.prompt_rows
    (s,) = r.segments
    assert (s.text_start, s.text_end, s.frame_start, s.frame_end) == (0, len(text), 0, len(r.codes))
    assert s.finish_reason == r.finish_reason and s.prompt_rows == r.metrics.prompt_rows
    leak_free(rt)


def test_cancel_mid_way_frees_everything(rt, monkeypatch):
    # the engine is held at its 20th frame row (in its third of ~20 segments; the second chunk is made by the
    # 13th) until the cancel is posted: the request cannot end first however fast the host is
    rows = iter(range(1, 10**6))
    hold = Hold(rt.family.ar_loop, monkeypatch, lambda state: next(rows) >= 20)
    handle = rt.submit({"text": long_text(5000, seed=2), "seed": 9, "max_frames": 6, "stream": True})
    seen = 0
    try:
        for _ in handle:
            seen += 1
            if seen == 2:
                handle.cancel()
                hold.release()
    finally:
        hold.release()
    r = handle.result(60)
    assert r.finish_reason == "abort"
    assert 1 <= len(r.segments) < len(segments(long_text(5000, seed=2), SEGMENT_CHARS))
    assert r.segments[-1].frame_end == len(r.codes)
    leak_free(rt)


@pytest.mark.parametrize("request_, field", [
    ({"text": "word " * 400}, "text"),                 # one 2,000-character sentence: no split, over one prompt
    ({"text": long_text(600), "profile": "rollout", "decode_audio": False}, "text"),
    ({"text": long_text(600), "duration_frames": 50}, "duration_frames"),
    ({"text": long_text(600), "max_frames": 700}, "max_frames"),         # over the card's cap, as before
])
def test_text_that_cannot_be_split_to_fit_is_refused_naming_the_field(rt, request_, field):
    with pytest.raises(RequestError) as e:
        rt.submit(request_)
    assert str(e.value).startswith(f"{field}:"), str(e.value)


def test_a_sentence_too_long_to_split_is_one_prompt_when_it_fits_and_refused_saying_why_when_not(rt):
    r = rt.submit({"text": "word " * 100, "seed": 1, "max_frames": 4}).result(60)  # 500 characters, no end mark
    assert len(r.segments) == 1 and (r.segments[0].text_start, r.segments[0].text_end) == (0, 500)
    with pytest.raises(RequestError, match=r"^text: the prompt is \d+ rows.*cannot be split.*a sentence of 1999 characters"):
        rt.submit({"text": "word " * 400})
    leak_free(rt)


def test_a_segment_prompt_with_no_room_for_carried_frames_is_refused_naming_text():
    card = load_card("moss_tts_local_tiny")
    ar = card.loops.ar_decode.model_copy(update={"max_segment_chars": 480, "max_prompt_rows": 1024})
    with Runtime.from_card(card.model_copy(update={"loops": card.loops.model_copy(update={"ar_decode": ar})}),
                           device="cpu") as rt:
        text = ("a" * 470 + ". ") * 3  # two segments of 472 bytes: the second prompt leaves no room
        with pytest.raises(RequestError, match=r"^text: segment 2 .*max_segment_chars"):
            rt.submit({"text": text})
        with pytest.raises(RequestError, match=r"^text: a group shares one prompt"):
            rt.submit_many([{"text": long_text(500)}] * 2, share_prompt=True)


def test_sentences_split_at_ascii_and_cjk_ends_never_inside_a_number():
    text = "Pi is 3.14. Yes! \u4f60\u597d\u3002\u4e16\u754c\uff01Why? ok"
    parts = [text[s:e] for s, e in sentences(text)]
    assert parts == ["Pi is 3.14. ", "Yes! ", "\u4f60\u597d\u3002", "\u4e16\u754c\uff01", "Why? ", "ok"]
    assert segments(text, 12) == [(0, 12), (12, 23), (23, 30)]
    assert segments(text, len(text)) == [(0, len(text))]
    with pytest.raises(SplitError):
        segments("no end mark in this long sentence at all", 10)


pieces = st.lists(st.tuples(st.text(alphabet=st.sampled_from(list("ab xyz\u4f60\u597d.3")), min_size=0, max_size=20),
                            st.sampled_from(ENDS + ["", ".", "\"\n"])), min_size=0, max_size=30)


@settings(max_examples=300, deadline=None)
@given(pieces, st.integers(min_value=1, max_value=60))
def test_segments_rejoin_to_the_text_each_within_the_cap_at_sentence_ends(parts, cap):
    text = "".join(a + b for a, b in parts)
    ends = {e for _, e in sentences(text)}
    assert "".join(text[s:e] for s, e in sentences(text)) == text
    try:
        spans = segments(text, cap)
    except SplitError as err:
        assert err.end - err.start > cap and (err.start, err.end) in sentences(text)
        return
    assert "".join(text[s:e] for s, e in spans) == text
    if len(text) > cap:
        assert all(0 < len(spoken(text[s:e])) <= cap or not text.strip() for s, e in spans)  # what each says
        assert all(e in ends for _, e in spans)
        assert all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1))
