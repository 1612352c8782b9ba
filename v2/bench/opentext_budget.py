"""The frame budget of `python -m v2.bench.opentext`'s requests: `--frames` frames for each sentence, whatever
the family does with an open request's text.

Owns: `segments_per_sentence(rt)` (whether the family speaks an open request a segment per sentence, each
segment capped by the request's `max_frames`, or as one sequence under one cap: asked of the runtime with a
two-sentence open request of one frame, never by the family's name; and whether it takes `min_frames` at
all: a family with no frame floor refuses it, naming the field), the card's cap on a request's frames
(`frame_cap`), and `budget(rt, frames, sentences, text_bytes)`: the `max_frames` (= `min_frames` where the
family takes it: a fixed workload) a reply's requests carry, open and whole, so that a one-sequence family's
request is not ended by its cap while its text is still coming: the reply's frames, and at least one more
than the longest reply's UTF-8 bytes (a family that feeds a text row with every frame needs a frame per
token, and a token holds at least a byte), at most the card's cap.
Must not know: the engine's internals, any family's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from v2.card import LoopTable, PagedLoopDecl
from v2.errors import RequestError

PROBE = "One. Two."  # two sentences, the second cut at the text's end


@dataclass(frozen=True)
class Budget:
    frames: int           # max_frames = min_frames of each request
    per: str              # "segment": the cap applies to each sentence's segment; "request": to the whole reply
    card_cap: int         # the card's cap on a request's frames
    floor: bool = True    # the family takes `min_frames` (else a request ends at its stop or its cap)

    def fields(self) -> dict[str, Any]:
        return {"frames_per_request": self.frames, "frame_cap_per": self.per, "card_max_frames": self.card_cap,
                "min_frames_taken": self.floor}

    def request(self) -> dict[str, int]:
        """The budget's fields of a request."""
        return {"max_frames": self.frames, **({"min_frames": self.frames} if self.floor else {})}


def frame_cap(rt: Any) -> int:
    """The card's cap on a request's frames: its first driven AR loop's `max_frames`."""
    loops = getattr(rt.card, "loops", None)
    if isinstance(loops, LoopTable):
        for _, decl in loops.driven():
            if isinstance(decl, PagedLoopDecl):
                return decl.max_frames
    raise ValueError(f"card {rt.card.name}: no driven AR loop declares max_frames")


def takes_min_frames(rt: Any) -> bool:
    """Whether the family takes `min_frames` (one without a frame floor refuses it, naming the field)."""
    try:
        rt.open({"seed": 0, "max_frames": 1, "min_frames": 1}).cancel()
    except RequestError as e:
        if e.field != "min_frames":
            raise
        return False
    return True


def segments_per_sentence(rt: Any) -> bool:
    """Whether an open request's sentences are segments of their own, each under `max_frames`: a one-frame
    open request of two sentences ends with two segments then, with one otherwise (one sequence, or one
    prompt spoken once the text is complete; such a request may end at its cap before `end_text`)."""
    h = rt.open({"text": PROBE, "seed": 0, "max_frames": 1})
    try:
        h.end_text()
    except RuntimeError:  # the one frame was made, and the request ended, before the text did
        pass
    return len(h.result(120).segments) >= 2


def budget(rt: Any, frames: int, sentences: int, text_bytes: int = 0) -> Budget:
    """`frames` for each of `sentences` sentences: per segment where the family cuts one per sentence, else
    over the whole request, and then at least `text_bytes` + 1 (at most the card's cap)."""
    if frames < 1 or sentences < 1:
        raise ValueError(f"--frames and --sentences must be at least 1, got {frames} and {sentences}")
    cap, floor = frame_cap(rt), takes_min_frames(rt)
    if segments_per_sentence(rt):
        return Budget(min(frames, cap), "segment", cap, floor)
    return Budget(min(max(frames * sentences, text_bytes + 1), cap), "request", cap, floor)
