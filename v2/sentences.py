"""Splitting a long text into segments at sentence ends: spans that tile the text, none over a character cap.

Owns: where a sentence ends (`.`, `!`, `?`, `;` followed by whitespace or the end of the text; the CJK
`。`, `！`, `？`, `；` and a newline anywhere; closing quotes and brackets and the whitespace that follow
stay with the sentence they close) and packing whole sentences greedily into segments of at most
`max_chars` characters. A text is never cut inside a sentence, hence never inside a word.
A segment's length is the length of what it says (`spoken`: trimmed, every whitespace run one character), so
runs of blank lines or spaces between sentences cost one character, and whitespace alone never makes a
segment: it stays with the sentence before it (leading whitespace with the first).
Must not know: tokenizers, prompts, cards, requests. Pure Python.
"""

from __future__ import annotations

import re

# A sentence: the shortest run of characters up to an end mark (ASCII marks only before whitespace or the
# end), then closing quotes/brackets, then whitespace; or the rest of the text.
END_MARK = r"(?:[.!?;](?=[\s\"'\)\]\u201d\u2019]|$)|[\u3002\uff01\uff1f\uff1b\n])"  # a sentence's end mark
CLOSERS = r"[\"'\)\]\u201d\u2019\u300d\u300f\uff09]*"  # closing quotes and brackets that stay with it
_SENTENCE = re.compile(r".*?" + END_MARK + CLOSERS + r"\s*|.+", re.DOTALL)


_RUN = re.compile(r"\s+")


class SplitError(ValueError):
    """A sentence longer than a segment may be: the text cannot be split to fit."""

    def __init__(self, start: int, end: int, max_chars: int, length: int) -> None:
        super().__init__(f"a sentence of {length} characters (characters {start}-{end}) is longer than a "
                         f"segment may be ({max_chars}); end sentences with . ! ? ; or a newline")
        self.start, self.end = start, end


def spoken(text: str) -> str:
    """What a segment says of `text`: trimmed, each whitespace run as one character (a newline if it has one)."""
    return _RUN.sub(lambda m: "\n" if "\n" in m.group() else " ", text.strip())


def sentences(text: str) -> list[tuple[int, int]]:
    """Spans (start, end) of the text's sentences, in order; they tile the text."""
    spans: list[tuple[int, int]] = []
    pos = 0
    while pos < len(text):
        m = _SENTENCE.match(text, pos)
        assert m is not None and m.end() > pos  # the pattern's second branch matches any non-empty rest
        spans.append((pos, m.end()))
        pos = m.end()
    return spans


def segments(text: str, max_chars: int) -> list[tuple[int, int]]:
    """Spans of consecutive whole sentences, each saying at most `max_chars` characters (`spoken`), greedily
    filled; they tile the text, and each holds some non-whitespace text unless the whole text is whitespace.
    A text within the cap is one segment. Raises `SplitError` for a sentence over the cap."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")
    if len(text) <= max_chars:
        return [(0, len(text))]
    out: list[tuple[int, int]] = []
    start = end = length = 0  # the open segment text[start:end] and the length of what it says
    for s, e in sentences(text):
        words = text[s:e].split()
        n = sum(map(len, words)) + len(words) - 1 if words else 0  # len(spoken(text[s:e]))
        if n > max_chars:
            raise SplitError(s, e, max_chars, n)
        if n and not length:  # the first words of the open segment (whitespace before them stays with it)
            length = n
        elif n:  # a whitespace-only sentence says nothing: it stays with the open segment
            gap = text[s - 1].isspace() or text[s].isspace()  # whitespace since the last words: one character
            if length + gap + n > max_chars:
                out.append((start, end))
                start, length = s, n
            else:
                length += gap + n
        end = e
    out.append((start, end))
    return out
