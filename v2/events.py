"""What a request's streaming subscribers receive beside its audio: plain data, no torch.

Owns: `WordTime` (one word and when it is spoken, in seconds), `SentenceWords` (the words of one sentence or
long-text segment, as soon as its audio has been aligned; times absolute from the start of the request's
audio), and `TextDelta` (the text a speaking LLM adds: the token ids of one step and the text they complete).
They arrive as `AddedEvent.item`s (`SpeechHandle.events`, `subscribe_events`), named by the loop that made them.
Must not know: tensors, models, the engine, HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WordTime:
    """One word and its start / end in seconds (from the start of its clip, or of the request's audio)."""

    word: str
    start: float
    end: float


@dataclass(frozen=True)
class SentenceWords:
    """The words of one aligned span of a request: its index among the request's spans, its span of the text
    spoken (`text[text_start:text_end]`, None where the family gives ids only), and its words in order."""

    index: int
    text_start: int | None
    text_end: int | None
    words: tuple[WordTime, ...]


@dataclass(frozen=True)
class TextDelta:
    """The text one step of a speaking LLM added: its token ids and the text they complete (possibly empty
    while a multi-byte character is unfinished)."""

    ids: tuple[int, ...]
    text: str
