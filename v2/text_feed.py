"""Open text: where a text that arrives in pieces is cut into segments, decided by the text alone.

Owns: `TextFeed` (the text so far, the cuts made, whether it has ended) and `next_cut`, the segmentation rule
of an open request. A cut is made only where the text seen so far already decides it, so the same text gives
the same cuts however its pieces arrive (one piece or one character at a time):
- A segment is one sentence: it ends after a sentence's end mark and the closing quotes or brackets after it
  (the end marks of `v2.sentences`: `.` `!` `?` `;` before whitespace or a quote/bracket, `。` `！` `？` `；` and a
  newline anywhere), once a character after those exists (so `3.` waits for `14`, and `Hi.` for what follows)
  or the text has ended. Under `split="clause"` a clause mark ends a segment too (`,` `:` before whitespace;
  `，` `、` `：` anywhere).
- A sentence longer than `max_chars` (counted from its first non-space character) is cut, once the text
  holds more than `max_chars` characters past that start, at the last clause mark within them, else at the
  last whitespace within them (a word boundary), else after exactly `max_chars` characters.
- On `end`, the rest is the last segment (whitespace alone makes none: it joins the segment before).
Segments tile the text: segment i is `text[cuts[i-1]:cuts[i]]` (0 for the first); the whitespace between two
sentences starts the later one, and what a segment says is `spoken()` of its span.
Must not know: tokenizers, prompts, cards, requests, threads (callers hold their own lock). Pure Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from v2.sentences import CLOSERS, END_MARK

SPLITS = ("sentence", "clause")
_CLAUSE_MARK = r"[,:](?=\s)|[\uff0c\u3001\uff1a]"
_ENDS = {"sentence": re.compile(END_MARK + CLOSERS),
         "clause": re.compile(r"(?:" + END_MARK + r"|" + _CLAUSE_MARK + r")" + CLOSERS)}
_CLAUSE = re.compile(r"(?:" + END_MARK + r"|" + _CLAUSE_MARK + r")" + CLOSERS)
_SPACE = re.compile(r"\s")


def next_cut(text: str, start: int, max_chars: int, *, ended: bool, split: str = "sentence") -> int | None:
    """Where the segment that starts at `start` ends (an index into `text`), or None while the text so far
    does not decide it. With `ended`, a non-blank rest always gives a cut (len(text) at the latest)."""
    head = start
    while head < len(text) and text[head].isspace():
        head += 1
    if head == len(text):
        return None  # nothing but whitespace yet (at the end: it joins the segment before)
    m = _ENDS[split].search(text, head)
    if m is not None and m.end() - head <= max_chars and (m.end() < len(text) or ended):
        return m.end()  # a whole sentence (or clause), and a character after it exists: decided
    limit = head + max_chars
    if len(text) > limit:  # no end within max_chars can still appear: cut at a clause, else a word boundary
        window = text[head:limit + 1]  # one character more: a mark's lookahead at the window's edge is decided
        ends = [e for e in (x.end() for x in _CLAUSE.finditer(window)) if e <= max_chars]
        if ends:
            return head + ends[-1]
        spaces = [x.start() for x in _SPACE.finditer(window, 1) if x.start() <= max_chars]
        return head + (spaces[-1] if spaces else max_chars)
    return len(text) if ended else None


@dataclass
class TextFeed:
    """The text of one open request and its cuts so far. `feed` and `end` return the spans newly cut."""

    max_chars: int
    split: str = "sentence"
    text: str = ""
    cuts: list[int] = field(default_factory=list)
    ended: bool = False

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ValueError(f"split: {self.split!r} is not one of {', '.join(SPLITS)}")
        if self.max_chars < 1:
            raise ValueError(f"max_chars must be >= 1, got {self.max_chars}")

    @property
    def spans(self) -> list[tuple[int, int]]:
        """Every segment cut so far: (start, end) into `text`."""
        return list(zip([0, *self.cuts], self.cuts))

    def trial(self, piece: str = "", *, end: bool = False) -> tuple[str, list[tuple[int, int]]]:
        """What feeding `piece` (and ending, with `end`) would give: the text and the spans newly cut;
        nothing is changed (a caller checks them before `commit`)."""
        text, start = self.text + piece, self.cuts[-1] if self.cuts else 0
        new: list[tuple[int, int]] = []
        while (cut := next_cut(text, start, self.max_chars, ended=end, split=self.split)) is not None:
            new.append((start, cut))
            start = cut
        return text, new

    def commit(self, text: str, new: list[tuple[int, int]], *, end: bool = False) -> None:
        self.text, self.ended = text, self.ended or end
        self.cuts += [e for _, e in new]
        if end and self.cuts and self.cuts[-1] < len(text):  # a blank rest joins the last segment
            self.cuts[-1] = len(text)

    def feed(self, piece: str, *, end: bool = False) -> list[tuple[int, int]]:
        text, new = self.trial(piece, end=end)
        self.commit(text, new, end=end)
        return new
