"""Open requests in the Qwen3-TTS family: text that arrives while the request runs, fed as trailing text rows.

Owns: `OpenWork` (an open request's work: what `prepare` checked, the text so far, its ids decided so far,
the first prompt once it can be laid out, and the trailing ids, under one lock: the caller's thread adds, the
engine's reads) and `OpenText`: checking an open request (`open_text`: the request checked as `prepare`
checks it with a placeholder text, under the streaming text feed; refused: `text_ids`, `text_feed` "whole",
a rollout), taking a piece (`feed`, caller's thread), the first prompt (`first_prompt`), and handing the
talker loop the trailing ids that arrived (`more_input`).
This family's native mode: the talker feeds one trailing text row with every frame, so text arriving later
is only later rows: one prompt, one KV sequence, no segments. The rules that make the audio a function of
the text alone, whatever the pieces' sizes and pace:
- ids: the text is tokenised in chunks cut at decided word boundaries: before a space or tab that follows a
  non-space character (Qwen2's pre-tokeniser always starts a token there: no token runs on from a non-space
  character into a space or tab, only into newlines, so each chunk's ids are those of the same span of the
  whole text); the rest at the end. The same text gives the
  same ids however its pieces arrive (equal to the whole text's ids for the bytes tokeniser and for the
  release BPE's pre-tokenisation).
- rows: the first prompt is the streaming feed's layout (`v2.models.qwen3_tts.prompt`), ready once the ids
  it holds are decided (its first text id; an in-context clone's R + 1 text ids of transcript + text), or at
  the end; trailing ids are the layout's, the end-of-text id appended at the end.
- waiting: frame t is fed trailing row t; a frame whose row has not arrived is not planned (the loop waits,
  `wants_input`, holding no batch row) and never takes tts_pad in its place: pads only follow the end.
Must not know: the engine, its queues and threads, KV blocks, devices.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field, fields, replace
from typing import Any

from v2.errors import RequestError
from v2.kit.checks import check_open
from v2.families.qwen3_tts.prepare import Prepared, _ids, _template, prepare, role_ids, rows_of
from v2.families.qwen3_tts.request import Qwen3Request, parse
from v2.families.qwen3_tts.talker import TALKER, TalkerLoop, TalkerState
from v2.fields import check_text_chars
from v2.models.qwen3_tts.prompt import PromptSpec, layout
from v2.runtime.handles import SegmentMark

PLACEHOLDER = "."  # the text an open request is checked with (its own text is `OpenWork.text`)
BOUNDARY = re.compile(r"(?<=\S)[ \t]")  # a word boundary the text so far decides: a space or tab after a non-space


@dataclass
class OpenWork(Prepared):
    """What the family prepared of an open request; the text, its ids and `trailing` grow under `lock`."""

    spec: PromptSpec | None = None   # the prompt's spec (mode, voice, language, instruction, reference), text aside
    needed: int = 1                  # text ids the first prompt holds (an in-context clone's: R + 1, transcript first)
    text: str = ""
    decided: int = 0                 # characters of `text` tokenised
    body: list[int] = field(default_factory=list)  # their ids
    ended: bool = False
    ready: bool = False              # the first prompt is laid out (`layout`)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class OpenText:
    def __init__(self, card: Any, cfg: Any, tokenizer: Any, defaults: Any, codec: Any, talker: TalkerLoop) -> None:
        self.card, self.cfg, self.tokenizer, self.defaults, self.codec = card, cfg, tokenizer, defaults, codec
        self.talker, self.limits = talker, card.loops.talker

    # ----- the caller's thread -------------------------------------------------------------------
    def open_text(self, request: Any, *, split: str = "sentence") -> tuple[Qwen3Request, OpenWork]:
        """`split` is MOSS's segment rule; this family speaks the text as one sequence and takes either."""
        given = request if isinstance(request, dict) else request.model_dump(exclude_unset=True)
        if given.get("text_ids") is not None:
            raise RequestError("text_ids: an open request takes its text in pieces (text)", field='text_ids')
        if given.get("text_feed") == "whole":
            raise RequestError("text_feed: an open request feeds its text as it arrives ('streaming')", field='text_feed')
        req = parse({**given, "text": PLACEHOLDER, "text_feed": "streaming"}, languages=self.cfg.languages)
        check_open(req, self.tokenizer, "no tokenizer.json, nor vocab.json + merges.txt")
        checked = prepare(req, self.card, self.cfg, self.tokenizer, self.defaults, self.codec)
        icl = checked.mode == "voice_clone" and not req.x_vector_only
        frames = sum(1 for r in checked.layout.ref_frame if r >= 0)
        ref_ids = _ids(req, "reference_text", self.cfg, self.tokenizer) if icl else None
        spec = PromptSpec(mode=checked.mode, input_ids=(), language=req.language or "Auto",  # type: ignore[arg-type]
                          speaker=req.speaker, instruct_ids=_ids(req, "instruction", self.cfg, self.tokenizer),
                          x_vector_only=not icl, ref_ids=ref_ids, ref_frames=frames, non_streaming=False)
        needed = max(frames + 1 - len(ref_ids[3:-2]), 0) if ref_ids is not None else 1
        work = OpenWork(**{f.name: getattr(checked, f.name) for f in fields(Prepared)}, spec=spec, needed=needed)
        work.rows, work.trailing = None, ()  # type: ignore[assignment]  # no prompt until its text gives one
        return req, work

    def feed(self, work: OpenWork, piece: str, *, end: bool) -> bool:
        """Take a piece: its decided ids tokenised, the first prompt or more trailing ids laid out. Returns
        whether the engine has something new (or the text ended). Refused (RequestError naming `text`,
        nothing taken): after the end, past `max_text_chars`."""
        with work.lock:
            if work.ended:
                raise RequestError("text: the text has already ended (end_text)", field='text')
            text = work.text + piece
            check_text_chars([("text", text)], self.limits.max_text_chars)
            cuts = [m.start() for m in BOUNDARY.finditer(text, work.decided) if m.start() > work.decided]
            if end and len(text) > (cuts[-1] if cuts else work.decided):
                cuts.append(len(text))
            body, start = list(work.body), work.decided
            for cut in cuts:
                body += self.tokenizer.encode(text[start:cut])
                start = cut
            before = (work.ready, len(work.trailing))
            work.text, work.decided, work.body, work.ended = text, start, body, end
            if body and text.strip() and (len(body) >= work.needed or end):  # whitespace alone says nothing
                assert work.spec is not None
                lay = layout(self.cfg, replace(work.spec, input_ids=_template(self.cfg, role_ids(self.tokenizer),
                                                                              tuple(body), "text")))
                if not work.ready:
                    work.layout, work.ready = lay, True
                work.trailing = lay.trailing if end else lay.trailing[:-1]  # the end-of-text id once it has ended
            return (work.ready, len(work.trailing)) != before or end

    # ----- the engine's thread -------------------------------------------------------------------
    def first_prompt(self, record: Any) -> Any:
        """The first prompt's rows (with the recording's x-vector and codes once encoded), or None while the
        text has not given it."""
        work: OpenWork = record.work
        with work.lock:
            if not work.ready:
                return None
            return rows_of(work.layout, self.cfg.num_code_groups, ref_codes=work.ref_codes, xvector=work.xvector)

    def encoded(self, record: Any, xvector: Any, codes: Any) -> Any:
        record.work.xvector, record.work.ref_codes = xvector, codes
        return self.first_prompt(record)

    def started(self, record: Any, state: TalkerState) -> None:
        """Admitted: the talker loop takes the trailing ids so far (and waits for the rest); the one segment
        begins (a mark on the handle)."""
        self.more_input(record, TALKER, state)
        record.handle.mark(SegmentMark(0, 0, len(record.work.text), 0))

    def more_input(self, record: Any, loop: Any, state: TalkerState | None = None) -> Any:
        """The trailing ids that arrived, handed to the talker loop (None: no new prompt; with `loop` None, the
        first prompt once there is one)."""
        if loop is None:
            return self.first_prompt(record)
        work: OpenWork = record.work
        with work.lock:
            trailing, ended = work.trailing, work.ended
        self.talker.give_text(state if state is not None else record.states[TALKER], trailing, ended=ended)
        return None

    def finished(self, record: Any, frames: int, finish: str) -> None:
        """Its one segment's mark, ended (as `result.segments` says it)."""
        record.handle.mark(SegmentMark(0, 0, len(record.work.text), 0, frames, finish))
