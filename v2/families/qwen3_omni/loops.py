"""Qwen3-Omni's driven loops: the thinker (the kit's paged AR sequence, one text token a step) and the talker (a
paged AR sequence fed the thinker's tokens, one frame a step); code2wav is the kit's chunk loop.

Owns: `ThinkerState` / `ThinkerLoop` (a token is a one-code frame; `<|im_end|>` is the stop decision: no frame,
so it is never spoken and not in the text; every token it makes is published to the request's subscribers as
a `TextDelta`, its text decoded incrementally: the tokens since the last whole character), `TalkerState` /
`TalkerLoop` (its prompt is laid out when the thinker's first token exists (family.py); frame t is fed text
row t: the thinker's token t + 1, then tts_eos once the thinker has ended, then tts_pad; a frame whose row is
not known yet waits, holding no batch row, so the talker never runs ahead of its text and its frames do not
depend on when the text arrived), and the rows each recomputes after a preemption (its prompt, then a row per
frame it made).
Must not know: tensors on a device (beyond the rows' layout), batching, other requests, the models.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from v2.contracts import FinishReason, Kind
from v2.events import TextDelta
from v2.kit.sequence import ARLoop, ARSequence

THINKER, TALKER, CODE2WAV = "thinker", "talker", "code2wav"


class Work(Kind):
    THINK_PREFILL = "think_prefill"
    THINK_TOKEN = "think_token"
    TALK_PREFILL = "talk_prefill"
    TALK_FRAME = "talk_frame"


@dataclass
class ThinkerState(ARSequence):
    held: list[int] = field(default_factory=list)  # tokens whose text waits for a whole character
    deltas: list[TextDelta] = field(default_factory=list)  # made by the last advance


class ThinkerLoop(ARLoop[ThinkerState]):
    """`decode`: ids -> text (None: no tokenizer, the deltas' text is empty)."""

    def __init__(self, settings: Any, decode: Callable[[list[int]], str] | None) -> None:
        super().__init__(settings, THINKER, "thinker", prefill=Work.THINK_PREFILL, frame=Work.THINK_TOKEN)
        self.decode = decode

    def advance(self, state: ThinkerState, plan: Any, row: Any) -> bool:
        taken = super().advance(state, plan, row)
        state.deltas = []
        if taken and state.fresh:
            ids = tuple(c[0] for c in state.fresh)
            text = ""
            if self.decode is not None:  # byte-level ids: text ending on a whole character decodes on its own
                state.held += ids
                piece = self.decode(state.held)
                if not piece.endswith("\ufffd"):  # an incomplete character waits for its next byte
                    text, state.held = piece, []
            state.deltas = [TextDelta(ids, text)]
        return taken

    def published(self, state: ThinkerState) -> Sequence[object]:
        """What the last advance streams to the request's subscribers."""
        return state.deltas


@dataclass
class TalkerState(ARSequence):
    tokens: list[int] = field(default_factory=list)  # the thinker's tokens fed so far
    upstream: FinishReason | None = None            # how the thinker ended, once it has
    eos_text: int = 0                               # tts_eos, tts_pad (thinker ids)
    pad_text: int = 0

    @property
    def wants_input(self) -> bool:
        """No prompt yet: it waits for the thinker's first token."""
        return self.rows is None


class TalkerLoop(ARLoop[TalkerState]):
    """`sequential`: it waits for the thinker's end before its prompt (the reference a cascade equals);
    `overlapped` counts the frames launched while the thinker was still running."""

    sequential = False
    overlapped = 0

    def __init__(self, settings: Any) -> None:
        super().__init__(settings, TALKER, "talker", prefill=Work.TALK_PREFILL, frame=Work.TALK_FRAME)

    def launched(self, state: TalkerState, plan: Any) -> None:
        super().launched(state, plan)
        if plan.signature.kind is Work.TALK_FRAME and state.upstream is None:
            self.overlapped += 1

    def frame_feed(self, state: TalkerState, frame: int) -> int:
        n = frame + 1
        if n < len(state.tokens):
            return state.tokens[n]
        return state.eos_text if n == len(state.tokens) else state.pad_text

    def next(self, state: TalkerState) -> Any:
        if state.rows is None or (self.sequential and state.upstream is None):
            return None
        decoding = state.prefilled >= int(state.rows.shape[0])
        if decoding and state.upstream is None and state.launched_frames + 1 >= len(state.tokens):
            return None  # its next frame's text row is not there yet
        return super().next(state)

    def feed(self, state: TalkerState, items: Sequence[tuple[int, ...]], upstream: FinishReason | None) -> None:
        state.tokens += [item[0] for item in items]
        if upstream is not None and state.upstream is None:
            state.upstream = upstream
            if not state.tokens and state.finish is None:
                state.finish = FinishReason.STOP  # no text: nothing to speak


def thinker_rows(state: ARSequence) -> torch.Tensor:
    """The thinker's rows to recompute: its prompt, then a row of each token it made."""
    made = torch.tensor([[c[0], -1, 0] for c in state.codes], dtype=torch.long).reshape(-1, 3)
    return torch.cat([state.rows[: state.prompt_len], made])


def talker_rows(loop: TalkerLoop, state: TalkerState) -> torch.Tensor:
    """The talker's rows to recompute: its prompt, then (the text row it was fed, its codes) per frame."""
    prompt = state.rows[: state.prompt_len]
    frames = torch.full((len(state.codes), prompt.shape[1]), -1, dtype=torch.long)  # [F, 3 + G]
    if state.codes:
        frames[:, 0] = torch.tensor([loop.frame_feed(state, t) for t in range(len(state.codes))])
        frames[:, 3:] = torch.tensor(state.codes, dtype=torch.long)
    return torch.cat([prompt, frames])


__all__ = ["CODE2WAV", "TALKER", "THINKER", "TalkerLoop", "TalkerState", "ThinkerLoop", "ThinkerState",
           "Work", "talker_rows", "thinker_rows"]
