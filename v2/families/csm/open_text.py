"""Open requests in the CSM family: the spoken turn's text arrives in pieces (`Runtime.open`, a WebSocket's
utterance) and the turn is spoken once its text is complete.

Owns: `OpenWork` (an open request's work: what `prepare` checked with a placeholder for the spoken turn, the
text so far, whether it has ended, the spoken turn's plan, the context recordings' codes once encoded, under
one lock: the caller's thread adds, the engine's reads) and `OpenText`: checking an open request
(`open_text`: the request checked as `prepare` checks it, its text aside; refused: `text_ids`, a rollout, a
checkpoint without a tokenizer), taking a piece (`feed`, caller's thread: the prompt's rows checked against
the card's cap with every piece, so a piece that makes it too long is refused and the end never is: at most
one row per byte of `[{speaker}]{text}` (a byte-level tokenizer's bound), tokenised for the exact count only
once that bound passes the cap, and at the end), the prompt once the text has ended and the recordings are
encoded (`first_prompt`), the text an open request spoke (`spoken_text`).
This family speaks a turn as one prompt: the backbone reads `[{speaker}]{text}` whole, then makes the frames,
so no audio comes before the text's end. Until then the request holds no slot (the runtime admits it once
its first prompt exists) and its context recordings are encoded meanwhile.
Must not know: the engine, its queues and threads, KV blocks, devices.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields
from typing import Any, Callable

import numpy as np
import torch

from v2.errors import RequestError
from v2.kit.checks import check_open
from v2.families.csm.prepare import Prepared, TurnPlan, check_rows, rows_of, turn_ids, with_encoded
from v2.families.csm.request import CsmRequest, parse
from v2.fields import check_text_chars
from v2.models.csm.config import CsmConfig

PLACEHOLDER = "."  # the spoken turn's text an open request is checked with (its own is `OpenWork.text`)


@dataclass
class OpenWork(Prepared):
    """What the family prepared of an open request; `text`, `ended` and `spoken` change under `lock`."""

    text: str = ""
    ended: bool = False
    spoken: TurnPlan | None = None          # the spoken turn for the text so far (None: nothing said yet)
    codes: list[np.ndarray] | None = None   # the recordings' codes, once encoded (in `recordings`' order)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class OpenText:
    def __init__(self, card: Any, cfg: CsmConfig, tokenizer: Any,
                 prepare: Callable[..., Prepared]) -> None:
        self.card, self.cfg, self.tokenizer, self.prepare = card, cfg, tokenizer, prepare
        self.limits = card.loops.backbone

    # ----- the caller's thread -------------------------------------------------------------------
    def open_text(self, request: Any, *, voice: Any = None) -> tuple[CsmRequest, OpenWork]:
        """The request checked as `submit` checks it, its spoken text aside (the first piece, if `request`
        has `text`, is fed by the runtime)."""
        given = request if isinstance(request, dict) else request.model_dump(exclude_unset=True)
        if given.get("text_ids") is not None:
            raise RequestError("text_ids: an open request takes its text in pieces (text)", field="text_ids")
        req = parse({**given, "text": PLACEHOLDER})
        check_open(req, self.tokenizer, "no tokenizer.json")
        checked = self.prepare(req, voice=voice)
        work = OpenWork(**{f.name: getattr(checked, f.name) for f in fields(Prepared)})
        work.rows = None  # type: ignore[assignment]  # no prompt until its text has ended
        return req, work

    def feed(self, work: OpenWork, piece: str, *, end: bool) -> bool:
        """Take a piece (and the end). Returns whether the engine has something new: the end of the text.
        Refused (a RequestError naming `text`, or `context` when the context leaves no room; nothing taken):
        after the end, past `max_text_chars`, a prompt past `max_prompt_rows`."""
        with work.lock:
            if work.ended:
                raise RequestError("text: the text has already ended (end_text)", field="text")
            text = work.text + piece
            check_text_chars([("text", text)], self.limits.max_text_chars)
            spoken = None if piece else work.spoken  # the spoken turn's plan, for the text so far
            context = work.turns[:-1]
            most = sum(len(t.ids) + 2 + (t.frames + 1 if t.frames else 0) for t in context)
            most += len(f"[{work.speaker}]{text}".encode()) + 2  # at most one id per byte
            if spoken is None and text.strip() and (end or most > self.limits.max_prompt_rows):
                spoken = TurnPlan(turn_ids(self.tokenizer, work.speaker, text, None, "text"), 0, "text")
                check_rows((*context, spoken), self.limits.max_prompt_rows)
            work.text, work.ended, work.spoken = text, end, spoken  # whitespace alone: nothing to speak
            return end

    # ----- the engine's thread -------------------------------------------------------------------
    def encoded(self, work: OpenWork, codes: list[np.ndarray]) -> torch.Tensor | None:
        with work.lock:
            work.codes = codes
        return self.first_prompt(work)

    def first_prompt(self, work: OpenWork) -> torch.Tensor | None:
        """The prompt's rows (the context recordings' codes in place), or None while the text has not ended, or
        said nothing, or a recording is still being encoded."""
        with work.lock:
            if not work.ended or work.spoken is None or (work.recordings and work.codes is None):
                return None
            work.turns, codes = (*work.turns[:-1], work.spoken), work.codes
        return rows_of(self.cfg, work.turns) if codes is None else with_encoded(work, self.cfg, codes)


def spoken_text(work: Any, request: CsmRequest) -> str:
    """The text a request spoke: an open request's as fed, else its `text` (`text_ids`: none)."""
    return work.text if isinstance(work, OpenWork) else request.text or ""
