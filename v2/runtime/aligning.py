"""Word timestamps through the added loop named "aligner": `ALIGNER`, `WordAligner` (what that loop offers
besides its loop), `with_aligner` (a runtime's added loops with the aligner read from a source) and
`Aligning`, the part of `Runtime` (runtime.py) that answers `has_aligner` and `align`.
Must not know: any aligner's workings (it is found through the added-loop registry like any added loop), any
family, the engine, the voice store.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

from v2.card import CardError
from v2.card_added import AddedLoopDecl, added_decls
from v2.events import WordTime
from v2.runtime.added_graph import AddLoops

ALIGNER = "aligner"  # the added loop that gives word timestamps (`timestamps: "word"`, `Runtime.align`)


@runtime_checkable
class WordAligner(Protocol):
    """What the added loop named "aligner" offers besides its loop: aligning any recording with its text."""

    def align(self, audio: Any, sample_rate: int, text: str | None = None, *, words: Sequence[str] | None = None,
              word_ids: Sequence[Sequence[int]] | None = None, language: str | None = None) -> list[WordTime]: ...


def with_aligner(add_loops: AddLoops, source: str) -> dict[str, AddedLoopDecl]:
    """`add_loops` with the added loop "aligner" reading the aligner `source` (an aligner card's name or path,
    a checkpoint directory or a hub id), through the registry like any added loop."""
    if not isinstance(source, str) or not source.strip():
        raise CardError(f"aligner: an aligner card's name or path, a directory or a hub id, got {source!r}")
    try:
        decls = added_decls(add_loops)
    except ValueError as e:
        raise CardError(str(e)) from None
    if ALIGNER in decls:
        raise CardError(f"aligner: add_loops already adds a loop named {ALIGNER!r}")
    return {**decls, ALIGNER: AddedLoopDecl(loop=ALIGNER, settings={"card": source})}


class Aligning:
    """`Runtime`'s word timestamps: the aligner it holds (`_aligner`, set when it is built)."""

    _aligner: WordAligner | None

    @property
    def has_aligner(self) -> bool:
        """Whether requests may ask for `timestamps: "word"` and `align` answers (an added loop "aligner")."""
        return self._aligner is not None

    def align(self, audio: Any, sample_rate: int, text: str | None = None, *, words: Sequence[str] | None = None,
              word_ids: Sequence[Sequence[int]] | None = None, language: str | None = None) -> list[WordTime]:
        """Each word of `text` (or the given `words`) in a recording (samples [n] or [channels, n] at
        `sample_rate`): its start and end in seconds from the recording's start, as the aligner places them
        (not clamped to the recording). `word_ids`: each word's token ids (no tokenizer is used);
        `language`: the aligner's word rule for that language (an unsupported one is refused, naming it).
        Runs on the caller's thread. ValueError naming the field for bad input; RuntimeError without an
        aligner."""
        if self._aligner is None:
            raise RuntimeError("align: this runtime has no aligner (Runtime.from_card(..., aligner=...) or a card's "
                               "[added_loops.aligner])")
        return self._aligner.align(audio, sample_rate, text, words=words, word_ids=word_ids, language=language)
