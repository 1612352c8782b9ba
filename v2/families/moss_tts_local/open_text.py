"""Open requests in the MOSS family: a text that arrives in pieces, spoken as consecutive segments as it does.

Owns: `OpenWork` (an open request's work: its checked settings, its references, the text so far and its
cuts (`v2.text_feed.TextFeed`) and every segment laid out so far, under one lock: the caller's thread adds,
the engine's reads) and `OpenText`: checking an open request (`open_text`: the request checked as `prepare`
checks it, with a placeholder text; refused: `prompt_rows`, a rollout, a duration target), taking a piece
(`feed`, on the caller's thread: the segments it completes cut and laid out, refusals naming `text` before
anything of the piece is taken), the first prompt once its segment and its references are there
(`first_prompt`), and the next segment when one has ended (`next_segment`).
Each segment is laid out as long text's are (designs/runtime.md, "Long text"): the first is the request's
own prompt with its text; segment i >= 1 the continuation layout, `{text}` = segment i-1's text + its
own, then segment i-1's codes as assistant rows, seeded `segment_seed(seed, i)`. What differs: a segment's
frame cap is the request's `max_frames` (the next segment's text is not known yet when a segment starts),
and a segment whose codes do not all fit in the next prompt carries its last frames only (as many as
`max_prompt_rows` leaves after the text rows); a segment that leaves no room for one frame is refused at
`feed`, naming `text`.
Must not know: the engine, its queues and threads, KV blocks, devices.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from v2.contracts import ExecutionProfile
from v2.errors import RequestError
from v2.families.moss_tts_local.ar_decode import ARDecodeLoop, ARState
from v2.families.moss_tts_local.card import MossCard
from v2.families.moss_tts_local.prepare import CodecSpec, prepare, reference_codes
from v2.families.moss_tts_local.request import SpeechRequest, parse_request
from v2.families.moss_tts_local.segments import carried_rows, segment_seed
from v2.families.moss_tts_local.vocoder import VocoderLoop, VocoderState
from v2.families.moss_tts_local.long_text import TextSegment, build_rows, later_rows
from v2.models.moss_tts_local.config import MossTTSLocalConfig
from v2.models.moss_tts_local.prompt import PromptError
from v2.models.moss_tts_local.tokenizer import TextTokenizer
from v2.runtime.handles import SegmentMark
from v2.sampling_settings import SamplingSettings
from v2.sentences import spoken
from v2.text_feed import SPLITS, TextFeed

PLACEHOLDER = "."  # the text an open request is checked with (its own text is `OpenWork.text`)


@dataclass
class OpenWork:
    """What the family prepared of an open request; `segments` grows as the text arrives (under `lock`)."""

    sampling: SamplingSettings
    max_frames: int                       # every segment's frame cap
    audio: tuple[Any, ...]                # recordings to encode before admission (as `Prepared.audio`)
    transcript: str | None
    references: tuple[torch.Tensor, ...]  # the codes the first prompt carries (placeholders while `audio` waits)
    text: TextFeed
    segments: list[TextSegment] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    rows: Any = None                      # no prompt until the first segment is cut

    @property
    def inputs(self) -> tuple[Any, ...]:
        return self.audio


class OpenText:
    def __init__(self, card: MossCard, cfg: MossTTSLocalConfig, tokenizer: TextTokenizer, codec: CodecSpec | None,
                 ar_loop: ARDecodeLoop, voc_loop: VocoderLoop | None, ar_calls: Any) -> None:
        self.card, self.cfg, self.tokenizer, self.codec = card, cfg, tokenizer, codec
        self.ar_loop, self.voc_loop, self.ar_calls = ar_loop, voc_loop, ar_calls
        self.limits = card.loops.ar_decode

    # ----- the caller's thread -------------------------------------------------------------------
    def open_text(self, request: Any, *, voice: Any = None, split: str = "sentence") -> tuple[SpeechRequest, OpenWork]:
        if split not in SPLITS:
            raise RequestError(f"split: {split!r} is not one of {', '.join(SPLITS)}", field='split')
        rows = request.get("prompt_rows") if isinstance(request, dict) else getattr(request, "prompt_rows", None)
        if rows is not None:
            raise RequestError("prompt_rows: an open request takes text, in pieces", field='prompt_rows')
        # its text is the first piece (checked at `feed`); the rest of the request is checked with a placeholder
        req = parse_request({**request, "text": PLACEHOLDER} if isinstance(request, dict) else request)
        if req.profile is ExecutionProfile.ROLLOUT:
            raise RequestError("profile: a rollout trajectory is one prompt; an open request is spoken as segments", field='profile')
        if req.duration_frames is not None:
            raise RequestError("duration_frames: a duration target is for one prompt; an open request is spoken "
                               "as segments", field='duration_frames')
        checked = prepare(req.model_copy(update={"text": PLACEHOLDER}), self.card, self.cfg, self.tokenizer,
                          codec=self.codec, voice=voice)
        references = reference_codes(req, checked.audio, voice, self.codec, self.cfg)
        work = OpenWork(checked.sampling, checked.max_frames, checked.audio, checked.transcript, references,
                        TextFeed(self.limits.open_segment_chars, split))
        return req, work

    def feed(self, request: SpeechRequest, work: OpenWork, piece: str, *, end: bool) -> bool:
        """Take a piece: the segments it completes are cut and laid out. Returns whether any was (or the text
        ended). Refused (RequestError naming `text`, nothing taken): after the end, over `max_text_chars`, a
        segment whose prompt does not fit."""
        with work.lock:
            feed = work.text
            if feed.ended:
                raise RequestError("text: the text has already ended (end_text)", field='text')
            if len(feed.text) + len(piece) > self.limits.max_text_chars:
                raise RequestError(f"text: {len(feed.text) + len(piece)} characters, over the card's max_text_chars "
                                   f"({self.limits.max_text_chars})", field='text')
            text, spans = feed.trial(piece, end=end)
            laid, before = [], work.segments[-1].start if work.segments else 0
            for i, (s, e) in enumerate(spans, len(work.segments)):
                laid.append(self._layout(request, work, text, i, s, e, before))
                before = s
            feed.commit(text, spans, end=end)
            work.segments += laid
            if end and work.segments and work.segments[-1].end < len(text):  # a blank rest joins the last one
                work.segments[-1] = replace(work.segments[-1], end=len(text))
            return bool(laid) or end

    def _layout(self, request: SpeechRequest, work: OpenWork, text: str, i: int, s: int, e: int,
                before: int) -> TextSegment:
        """Segment i = text[s:e] laid out (`before`: where segment i - 1 starts)."""
        said = spoken(text[s:e])
        limit = self.limits.max_prompt_rows
        if i == 0:
            try:
                rows = build_rows(request, self.cfg, self.tokenizer, work.references, work.transcript, said)
            except (PromptError, ValueError) as err:
                raise RequestError(f"text: {err}", field='text') from None
            if len(rows) > limit:
                raise RequestError(f"text: the first segment's prompt (characters {s}-{e}) is {len(rows)} rows, over "
                                   f"the card's max_prompt_rows ({limit})", field='text')
            return TextSegment(s, e, said, rows, work.max_frames)
        rows = later_rows(request, self.cfg, self.tokenizer, text[before:e])
        if limit - len(rows) < 1:
            raise RequestError(f"text: segment {i + 1} (characters {s}-{e}) lays out {len(rows)} prompt rows, leaving "
                               f"no room within max_prompt_rows ({limit}) for the previous segment's frames: lower the "
                               "card's open_segment_chars", field='text')
        return TextSegment(s, e, spoken(text[s:e]), rows, work.max_frames)

    # ----- the engine's thread -------------------------------------------------------------------
    def first_prompt(self, record: Any, references: tuple[torch.Tensor, ...] | None) -> torch.Tensor | None:
        """The first segment's prompt, with `references` (the encoded codes; None: those it was opened with),
        or None while no segment is cut."""
        work: OpenWork = record.work
        with work.lock:
            first = work.segments[0] if work.segments else None
        if first is None:
            return None
        if references is None:
            return first.rows
        return build_rows(record.request, self.cfg, self.tokenizer, references, work.transcript, first.text)

    def started(self, record: Any) -> None:
        """Admitted: its first segment begins (a mark on its handle)."""
        first = record.work.segments[0]
        record.handle.mark(SegmentMark(0, first.start, first.end, 0))

    def _ended(self, record: Any, ar: ARState) -> int:
        """The segment that just ended, marked on the handle (once); the frames made so far."""
        frames = len(ar.done_codes) + len(ar.codes)
        last = record.handle.marks()[-1]
        if last.frame_end is not None:
            return frames
        with record.work.lock:
            segment = record.work.segments[ar.segment]
        record.handle.mark(SegmentMark(ar.segment, segment.start, segment.end, last.frame_start, frames,
                                       ar.ended[-1][2].value))
        return frames

    def next_segment(self, record: Any, ar: ARState, voc: VocoderState | None) -> torch.Tensor | None:
        """A segment has ended: the next one's prompt (the AR loop begins it), or None: the text has ended
        (the AR loop ends) or the next segment is not cut yet (it waits; the audio made so far goes out)."""
        work: OpenWork = record.work
        with work.lock:
            nxt = work.segments[ar.segment + 1] if len(work.segments) > ar.segment + 1 else None
            ended = work.text.ended
        if nxt is None:
            self._ended(record, ar)
            if ended:
                self.ar_loop.end_input(ar)
            elif self.voc_loop is not None and voc is not None:  # (a card without a vocoder: no audio to hold)
                self.voc_loop.hold(voc)
            return None
        assert nxt.rows is not None
        frames = self._ended(record, ar)
        record.handle.mark(SegmentMark(ar.segment + 1, nxt.start, nxt.end, frames))
        room = self.limits.max_prompt_rows - int(nxt.rows.shape[0])  # >= 1, checked at feed
        rows = carried_rows(nxt.rows, ar.codes[-room:], self.cfg.ids.audio_assistant_slot)
        self.ar_loop.begin_segment(ar, rows, cap=nxt.max_frames)
        self.ar_calls.admit(ar.slot, work.sampling, segment_seed(record.request.seed, ar.segment))
        return rows
