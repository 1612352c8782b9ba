"""The open-text segmentation rule (`v2.text_feed`): cuts depend on the text alone, never on how its pieces
arrive; segments tile the text, say something, and stay within the character cap; sentences, clauses and
word boundaries are where the rule says."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from v2.sentences import spoken
from v2.text_feed import TextFeed, next_cut

ALPHABET = st.sampled_from(list("ab cd,.!?;:\n\"')") + ["3.14", "\u3002", "\uff0c", "\u4f60", "  ", "e.g."])
TEXTS = st.lists(ALPHABET, max_size=80).map("".join)


def cuts_of(pieces: list[str], max_chars: int, split: str = "sentence") -> tuple[list[int], list[list[tuple[int, int]]]]:
    feed = TextFeed(max_chars, split)
    seen = [feed.feed(p) for p in pieces]
    seen.append(feed.feed("", end=True))
    return feed.cuts, seen


@settings(max_examples=400, deadline=None)
@given(TEXTS, st.lists(st.integers(0, 80), max_size=12), st.integers(1, 40), st.sampled_from(["sentence", "clause"]))
def test_the_same_text_gives_the_same_cuts_however_its_pieces_arrive(text, marks, max_chars, split):
    bounds = sorted({0, len(text), *(m for m in marks if m <= len(text))})
    pieces = [text[a:b] for a, b in zip(bounds, bounds[1:])]
    whole, _ = cuts_of([text], max_chars, split)
    chars, _ = cuts_of(list(text), max_chars, split)
    assert cuts_of(pieces, max_chars, split)[0] == whole == chars


@settings(max_examples=300, deadline=None)
@given(TEXTS, st.integers(1, 40))
def test_segments_tile_the_text_say_something_and_stay_within_the_cap(text, max_chars):
    cuts, _ = cuts_of([text], max_chars)
    spans = list(zip([0, *cuts], cuts))
    if not text.strip():
        assert cuts == []
        return
    assert spans[0][0] == 0 and cuts[-1] == len(text)
    for (s, e), (s2, _) in zip(spans, spans[1:]):
        assert e == s2 and s < e
    for s, e in spans:
        said = text[s:e].strip()
        assert said and len(said) <= max_chars, (text, spans)


def test_a_sentence_is_cut_once_something_follows_it():
    feed = TextFeed(100)
    assert feed.feed("Hello there.") == []          # '.' may still be '3.14', or a quote may close after it
    assert feed.feed(" ") == [(0, 12)]              # whitespace after the mark: decided
    assert feed.feed("How") == []
    assert spoken(feed.text[0:12]) == "Hello there."
    assert feed.feed(" are 3.") == []
    assert feed.feed("14 you?") == []               # '3.14' is not a sentence end
    assert feed.feed("", end=True) == [(12, len(feed.text))]
    assert spoken(feed.text[12:]) == "How are 3.14 you?"


def test_cjk_marks_newlines_and_closing_quotes():
    feed = TextFeed(100)
    assert feed.feed("\u4f60\u597d\u3002\u4e16") == [(0, 3)]
    text = 'He said "no." Then\nleft'
    cuts = TextFeed(100).feed(text, end=True)
    assert [text[s:e] for s, e in cuts] == ['He said "no."', " Then\n", "left"]


def test_past_the_cap_a_clause_then_a_word_boundary_then_a_hard_cut():
    text = "one two three, four five six seven eight"
    assert next_cut(text, 0, 20, ended=False) == len("one two three,")   # the last clause within 20
    assert next_cut("one two three four five six", 0, 10, ended=False) == len("one two")  # the last word boundary
    assert next_cut("abcdefghijklmnop", 0, 5, ended=False) == 5           # no boundary: exactly the cap
    assert next_cut("one two", 0, 10, ended=False) is None                # not past the cap: waits
    assert next_cut("  ab, cd", 0, 10, ended=False, split="clause") == len("  ab,")


def test_refusals():
    import pytest

    with pytest.raises(ValueError, match="split"):
        TextFeed(10, "word")
    with pytest.raises(ValueError, match="max_chars"):
        TextFeed(0)
