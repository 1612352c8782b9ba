"""Splitting a long text into segments at sentence ends: spans that tile the text, none over a character cap.

Owns: where a sentence ends (`.`, `!`, `?`, `;` followed by whitespace or the end of the text; the CJK
`。`, `！`, `？`, `；` and a newline anywhere; closing quotes and brackets and the whitespace that follow
stay with the sentence they close) and packing whole sentences greedily into segments of at most
`max_chars` characters. A text is never cut inside a sentence, hence never inside a word.
Must not know: tokenizers, prompts, cards, requests. Pure Python.
"""

from __future__ import annotations

import re

# A sentence: the shortest run of characters up to an end mark (ASCII marks only before whitespace or the
# end), then closing quotes/brackets, then whitespace; or the rest of the text.
_SENTENCE = re.compile(
    r".*?(?:[.!?;](?=[\s\"'\)\]\u201d\u2019]|$)|[\u3002\uff01\uff1f\uff1b\n])"
    r"[\"'\)\]\u201d\u2019\u300d\u300f\uff09]*\s*"
    r"|.+",
    re.DOTALL,
)


class SplitError(ValueError):
    """A sentence longer than a segment may be: the text cannot be split to fit."""

    def __init__(self, start: int, end: int, max_chars: int) -> None:
        super().__init__(f"a sentence of {end - start} characters (characters {start}-{end}) is longer than a "
                         f"segment may be ({max_chars}); end sentences with . ! ? ; or a newline")
        self.start, self.end = start, end


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
    """Spans of consecutive whole sentences, each at most `max_chars` characters, greedily filled; they tile
    the text. A text within the cap is one segment. Raises `SplitError` for a sentence over the cap."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")
    if len(text) <= max_chars:
        return [(0, len(text))]
    out: list[tuple[int, int]] = []
    start = end = 0
    for s, e in sentences(text):
        if e - s > max_chars:
            raise SplitError(s, e, max_chars)
        if e - start > max_chars:
            out.append((start, end))
            start = s
        end = e
    out.append((start, end))
    return out
