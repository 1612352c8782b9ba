"""A long text of short sentences is always speakable: runs of blank lines or spaces between sentences (and
around the text) cost a segment nothing, leading whitespace never makes an empty first segment, and every
segment says non-whitespace text within the cap, all of the text's words in order."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import wait_idle
from v2.card import build_model, build_tokenizer, load_card
from v2.families.moss_tts_local.prepare import prepare
from v2.families.moss_tts_local.request import parse_request
from v2.runtime import Runtime
from v2.sentences import segments, sentences, spoken

CAP = 300  # the tiny card's max_segment_chars
S48 = "This is a sentence of exactly forty-eight chars."
WORD = st.text(alphabet=st.sampled_from(list("abcxyz019,'-\u4f60\u597d")), min_size=1, max_size=12)
END = st.sampled_from([".", "!", "?", ";", "\u3002", "\uff01", "\uff1f"])
SPACE = st.text(alphabet=st.sampled_from([" ", "\n", "\t", "\r", "\u3000", "\xa0"]), min_size=1, max_size=400)


@st.composite
def short_sentences_text(draw: st.DrawFn, cap: int) -> tuple[str, list[str]]:
    """Sentences each saying at most `cap` characters, joined by arbitrary whitespace runs, with leading and
    trailing whitespace (maybe none); the text and its sentences."""
    said = []
    for _ in range(draw(st.integers(1, 25))):
        words = draw(st.lists(WORD, min_size=1, max_size=40))
        sentence = (" ".join(words))[:cap - 1].rstrip() + draw(END)  # cut inside a word: no end mark added
        said.append(sentence)
    text = draw(st.one_of(st.just(""), SPACE))
    for i, sentence in enumerate(said):
        text += sentence + (draw(SPACE) if i < len(said) - 1 else "")
    return text + draw(st.one_of(st.just(""), SPACE)), said


def check_segments(text: str, said: list[str], spans: list[tuple[int, int]], cap: int) -> None:
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1))  # they tile the text
    words = [spoken(text[s:e]) for s, e in spans]
    assert all(0 < len(w) <= cap for w in words), [len(w) for w in words]
    assert re.sub(r"\s", "", "".join(words)) == re.sub(r"\s", "", "".join(said))  # all of it, in order
    ends = dict(sentences(text))  # start -> end
    assert all(e in ends.values() for _, e in spans)  # never inside a sentence
    for (s, e), (nxt, _) in zip(spans, spans[1:]):  # greedy: the next sentence, plus one for the gap, did not fit
        assert len(spoken(text[s:e])) + 1 + len(spoken(text[nxt:ends[nxt]])) > cap


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 80).flatmap(lambda cap: st.tuples(st.just(cap), short_sentences_text(cap))))
def test_short_sentences_joined_by_any_whitespace_split_into_non_empty_segments_within_the_cap(case):
    cap, (text, said) = case
    check_segments(text, said, segments(text, cap), cap)


@pytest.fixture(scope="module")
def tiny():
    card = load_card("moss_tts_local_tiny")
    return card, build_model(card, device="cpu").cfg, build_tokenizer(card, None)


@settings(max_examples=60, deadline=None)
@given(short_sentences_text(CAP))
def test_every_such_text_is_accepted_at_submit_each_prompt_saying_its_segment(tiny, case):
    card, cfg, tokenizer = tiny
    text, said = case
    p = prepare(parse_request({"text": text}), card, cfg, tokenizer)
    spans = [(seg.start, seg.end) for seg in p.segments]
    if len(text) <= CAP:  # within the cap: one prompt, as written
        assert spans == [(0, len(text))] and p.segments[0].text == text
        return
    check_segments(text, said, spans, CAP)
    assert [seg.text for seg in p.segments] == [spoken(text[s:e]) for s, e in spans]
    assert len(p.rows) <= card.loops.ar_decode.max_prompt_rows
    assert all(seg.rows is None or len(seg.rows) < card.loops.ar_decode.max_prompt_rows for seg in p.segments)


CASES = {  # each refused before ("unsplittable", or an empty first segment)
    "301 newlines between sentences": ("\n" * 301).join([S48] * 4),
    "400 spaces between sentences": (" " * 400).join([S48] * 6),
    "280 trailing newlines": " ".join([S48] * 16) + "\n" * 280,
    "leading blank lines": "\n" * 299 + " ".join([S48] * 8),
}


@pytest.fixture(scope="module")
def rt():
    runtime = Runtime.from_card("moss_tts_local_tiny", device="cpu")
    yield runtime
    runtime.close()


@pytest.mark.parametrize("name", list(CASES))
def test_whitespace_between_and_around_sentences_is_spoken_not_refused(rt, name):
    text = CASES[name]
    r = rt.submit({"text": text, "seed": 2, "max_frames": 4}).result(120)
    assert r.error is None and r.finish_reason in ("stop", "length")
    spans = [(s.text_start, s.text_end) for s in r.segments]
    assert spans == segments(text, CAP)
    check_segments(text, [S48] * text.count(S48), spans, CAP)
    assert r.segments[-1].frame_end == len(r.codes) and np.asarray(r.audio).shape[1] > 0
    wait_idle(rt)
