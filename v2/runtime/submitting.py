"""The caller's side of `Runtime` (runtime.py): `Submitting`, its requests' way in: `parse`, `submit`,
`submit_many` (a group sharing one prompt), `open` (text fed through the handle, each piece handed to the
family on the caller's thread, then the engine told there is input), the checks every request passes
(`stream` and `timestamps` against what the card makes), and cancels. Each request becomes a `RequestRecord`
posted to the engine's inbox under the engine's lock.
Must not know: any family (it calls the bound family's seam), the voice store (a voice is looked up by
`Runtime._voice`), steps, executors, the device stream, loop logic.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

from v2.card import ModelCard
from v2.errors import OverloadedError, RequestError
from v2.runtime.aligning import WordAligner
from v2.runtime.family import Family, FrontState, Request, StoredVoice, TextInput
from v2.runtime.groups import Group
from v2.runtime.handles import SpeechHandle, TextHandle
from v2.runtime.inbox import Cancel, Feed, Submit
from v2.runtime.records import RequestRecord

if TYPE_CHECKING:
    from v2.runtime.engine import Engine


class Submitting:
    """`Runtime`'s requests: what it holds that they use is set when it is built (runtime.py)."""

    card: ModelCard
    family: Family
    engine: Engine
    _cond: threading.Condition
    _ids: Iterator[int]
    _text_input: TextInput | None
    _aligner: WordAligner | None
    _voice: Callable[[str | None], StoredVoice | None]  # a stored voice by name (`RequestError` naming `voice`)

    # ----- caller side -----------------------------------------------------------------------------
    def parse(self, fields: Any) -> Request:
        """The family's typed request (its request model) from a dict of fields;
        a `RequestError` whose `field` names the field to blame. `submit` takes what this returns (and checks
        it again: a caller may have changed what it holds)."""
        return self.family.parse(fields)

    def submit(self, request: Any) -> SpeechHandle:
        """Validate (errors name the field), queue, and return a handle at once. `request`: the family's typed
        request (`parse`) or a dict of its fields."""
        return self.submit_many([request])[0]

    def submit_many(self, requests: list[Any], *, share_prompt: bool = False,
                    group_id: int = 0) -> list[SpeechHandle]:
        """Validate every request first (one bad request queues none), then queue them all at once, so
        they are admitted together while slots last. `share_prompt`: the requests have the same prompt;
        it is prefilled once and its KV blocks are shared by all (they are admitted all together)."""
        family = self.family
        prepared = []
        for request in requests:
            req = family.parse(request)
            self._check_stream(req)
            prepared.append((req, family.prepare(req, voice=self._voice(req.voice))))
        if share_prompt:
            family.check_group(prepared)
        handles = []
        engine = self.engine
        with self._cond:
            if engine.closed:
                raise RuntimeError("the runtime is closed")
            waiting = engine.waiting_count()
            if waiting + len(prepared) > family.max_waiting:
                raise OverloadedError(f"queue: {waiting} requests are already waiting for a slot "
                                      f"(max_waiting {family.max_waiting}); nothing was queued, try again later")
            group = Group([]) if share_prompt else None
            records = []
            for i, (req, p) in enumerate(prepared):
                rid = next(self._ids)
                handle = SpeechHandle(rid, self._request_cancel, engine.callbacks, family.max_buffered_chunks)
                record = RequestRecord(rid, handle, req, p, p.rows, time.perf_counter(), group=group,
                                       group_id=group_id, sample_id=i, front=self._front_state(rid, p.inputs))
                if group is not None:
                    group.members.append(rid)
                records.append(record)
                handles.append(handle)
            engine.inbox.post(Submit(tuple(records)))
        return handles

    def open(self, request: Any, *, split: str = "sentence") -> TextHandle:
        """An open request: like `submit` (voice, references, sampling, seed, limits), but its text arrives in
        pieces through the handle (`feed`, `end_text`; `request`'s `text`, if given, is the first piece). The
        family speaks it as the text allows (e.g. a segment per sentence, `v2.text_feed`; `split="clause"`
        also cuts at clause marks); one stream, one result. Refusals name the field, as at `submit`."""
        family = self.family
        text_input = self._text_input
        if text_input is None:
            raise RequestError(f"text: the {family.name} family does not take text while a request runs", field='text')
        voice = request.get("voice") if isinstance(request, dict) else getattr(request, "voice", None)
        req, work = text_input.open_text(request, voice=self._voice(voice), split=split)
        self._check_stream(req)
        first = request.get("text") if isinstance(request, dict) else getattr(request, "text", None)
        engine, idle = self.engine, self.card.runtime.input_idle_timeout_s
        with self._cond:
            if engine.closed:
                raise RuntimeError("the runtime is closed")
            waiting = engine.waiting_count()
            if waiting + 1 > family.max_waiting:
                raise OverloadedError(f"queue: {waiting} requests are already waiting for a slot "
                                      f"(max_waiting {family.max_waiting}); nothing was queued, try again later")
            rid = next(self._ids)
            handle = TextHandle(rid, self._request_cancel, engine.callbacks, family.max_buffered_chunks,
                                give=lambda text, end: self._give(record, text, end))
            record = RequestRecord(rid, handle, req, work, None, time.perf_counter(),
                                   front=self._front_state(rid, work.inputs), unprompted=True)
            engine.inbox.post(Submit((record,), idle_s=idle))
        if first:
            try:
                handle.feed(first)
            except BaseException:  # a refused first piece: the request is withdrawn, not left to its idle timeout
                handle.cancel()
                raise
        return handle

    def _give(self, record: RequestRecord, text: str, end: bool) -> None:
        """A piece of an open request's text (the handle serialises calls): its family takes it here, on the
        caller's thread (refusals raise, naming the field); the engine hands it over at its next step."""
        if record.ended:
            raise RuntimeError(f"request {record.id} has ended" + (f": {record.error}" if record.error else ""))
        assert self._text_input is not None  # an open request exists only where the family takes text
        new = self._text_input.feed(record.request, record.work, text, end=end)
        with self._cond:
            if not record.ended:
                self.engine.inbox.post(Feed(record, bool(new), end, self.card.runtime.input_idle_timeout_s))

    def _front_state(self, rid: int, inputs: tuple[object, ...]) -> FrontState | None:
        return self.family.front_state(rid, inputs) if inputs else None

    def _check_stream(self, request: Request) -> None:
        """A card whose loops make no audio (its graph has no audio loop) streams nothing: `stream` is refused;
        so is `timestamps` without an aligner."""
        timestamps = getattr(request, "timestamps", None)
        if timestamps is not None and self._aligner is None:
            raise RequestError(f"timestamps: this runtime has no aligner (serve with --aligner, or "
                               f"Runtime.from_card(..., aligner=...)); the card {self.card.name!r} alone gives "
                               "no word times", field="timestamps")
        if timestamps is not None and not getattr(request, "decode_audio", True):
            raise RequestError("timestamps: word times are read from the audio, so they need decode_audio",
                               field="timestamps")
        if request.stream and self.family.graph.audio is None:
            raise RequestError(f"stream: the card {self.card.name!r} declares no loop that makes audio (it gives "
                               "codes, and trajectories under rollout); nothing would stream: submit with "
                               "stream false", field="stream")

    def _request_cancel(self, rid: int) -> None:
        with self._cond:
            self.engine.inbox.post(Cancel(rid))
