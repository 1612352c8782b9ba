"""What a caller holds: `SpeechHandle` (chunks as they come, the final result, cancel); the result types it
gives are results.py's and the callback thread it posts to is dispatch.py's (both re-exported here).

Owns: `TextHandle` (a `SpeechHandle` whose text arrives in pieces: `feed`, `end_text`, and their async
forms), the per-request chunk log (every chunk kept, so an iterator or subscriber attached at any time
sees all of them from the first), added loops' events (`events`, `subscribe_events`: v2/runtime/added.py),
sync and async iteration, subscriber callbacks (each on its own thread,
never the engine's: a slow subscriber stalls neither the engine nor other subscribers; each may fall at
most `max_behind` chunks behind, past that `deliver` reports the overflow and the runtime aborts the
request), done callbacks (on the runtime's shared callback `Dispatcher`: a slow one delays only other done
callbacks; results are published on a thread no user code runs on, so `result()` never waits for a
callback), anything a callback raises (`BaseException` included) recorded, never raised, `result(timeout)`,
`cancel()`; async iteration that cancels the request when its consumer goes away.
Thread-safe: the engine thread delivers, any thread or event loop consumes.
Must not know: models, slots, scheduling, what a result is made of (results.py).
"""

from __future__ import annotations

import asyncio
import threading
from functools import partial
from typing import Any, AsyncIterator, Callable, Iterator, Sequence

from v2.contracts import AudioChunk
from v2.errors import RequestError
from v2.fields import encoding_problem
from v2.runtime.added import AddedEvent, EventLog
from v2.runtime.dispatch import Dispatcher  # re-exported: its home is dispatch.py
from v2.runtime.results import Metrics, SegmentMark, SpeechResult, SpeechSegment  # re-exported: results.py's


_END = object()


class _Subscriber:
    """A callback with its own thread: a slow one holds up nobody else's chunks."""

    def __init__(self, callback: Callable[[AudioChunk], None], runtime_lanes: Dispatcher, bounded: bool = True,
                 on_end: Callable[[], None] | None = None) -> None:
        self.callback = callback
        self.bounded = bounded  # held to the handle's max_behind
        self.on_end = on_end    # run on its thread after the last chunk
        self.behind = 0  # chunks posted, not yet handed to the callback (changed under the handle's lock)
        self.lane = runtime_lanes.lane("v2-subscriber")  # joined with the runtime's callback thread at close

    def end(self) -> None:
        if self.on_end is not None:
            self.lane.post(self.on_end)
        self.lane.stop()


class SpeechHandle:
    def __init__(self, request_id: int, cancel: Callable[[int], None], dispatcher: Dispatcher,
                 max_behind: int = 64) -> None:
        self.request_id = request_id
        self._cancel = cancel
        self._dispatcher = dispatcher
        self._max_behind = max_behind
        self._cond = threading.Condition()
        self._chunks: list[AudioChunk] = []
        self._subscribers: list[_Subscriber] = []
        self._done_callbacks: list[Callable[[SpeechResult], None]] = []
        self._result: SpeechResult | None = None
        self._marks: list[SegmentMark] = []
        self.callback_errors: list[str] = []
        self._events = EventLog(self._dispatcher.post)  # added loops' output (v2/runtime/added.py)
        # a long text's progress as its family reports it: (segments ended, segments planned); (0, 1) for a text
        # spoken as one prompt (and for open text, whose segments are its marks); for a progress display
        self.segments: tuple[int, int] = (0, 1)

    # ----- consumer side ---------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        with self._cond:
            return self._result is not None

    def cancel(self) -> None:
        """Abort the request at its next step (a finished request is left as it is)."""
        if not self.done:
            self._cancel(self.request_id)

    def result(self, timeout: float | None = None) -> SpeechResult:
        with self._cond:
            if not self._cond.wait_for(lambda: self._result is not None, timeout):
                raise TimeoutError(f"request {self.request_id} not finished within {timeout} s")
            assert self._result is not None
            return self._result

    def marks(self) -> list[SegmentMark]:
        """The segments begun so far, in order. A mark is made before any chunk that holds a frame of the next
        segment is delivered, so a reader of chunks sees a segment's end by the time it reads past it."""
        with self._cond:
            return list(self._marks)

    def subscribe(self, callback: Callable[[AudioChunk], None]) -> None:
        """Call `callback(chunk)` for every chunk, from the first, on the runtime's callback thread."""
        sub = _Subscriber(callback, self._dispatcher)
        with self._cond:
            for chunk in self._chunks:
                self._post(sub, chunk)
            if self._result is None:
                self._subscribers.append(sub)
            else:
                sub.end()

    def events(self, start: int = 0) -> list[AddedEvent]:
        """What the request's added loops made so far (e.g. an aligner's words), in the order they were made;
        from the `start`-th on (the log only grows: a reader that keeps its place reads only what is new)."""
        return self._events.snapshot(start)

    def subscribe_events(self, callback: Callable[[AddedEvent], None]) -> None:
        """Call `callback(event)` for every added-loop event, from the first, on the runtime's callback thread
        (in order, with the done callbacks: an event made before the request ended comes before them)."""
        self._events.subscribe(lambda e: self._call(callback, e))

    def on_done(self, callback: Callable[[SpeechResult], None]) -> None:
        """Call `callback(result)` once the request has ended, on the runtime's callback thread."""
        with self._cond:
            if self._result is None:
                self._done_callbacks.append(callback)
                return
            result = self._result
        self._dispatcher.post(lambda: self._call(callback, result))

    def __iter__(self) -> Iterator[AudioChunk]:
        seen = 0
        while True:
            with self._cond:
                self._cond.wait_for(lambda: len(self._chunks) > seen or self._result is not None)
                fresh, finished = self._chunks[seen:], self._result is not None
            yield from fresh
            seen += len(fresh)
            if finished and not fresh:
                return

    async def __aiter__(self) -> AsyncIterator[AudioChunk]:
        """Chunks on the event loop. If the consuming task is cancelled or the iterator is closed before
        the last chunk, the request is cancelled (its slots are freed at the next step)."""
        loop = asyncio.get_running_loop()
        queue_: asyncio.Queue[Any] = asyncio.Queue()

        def put(item: Any) -> None:  # any thread; a closed loop has nobody left to read
            try:
                loop.call_soon_threadsafe(queue_.put_nowait, item)
            except RuntimeError:
                pass

        # the loop's queue takes chunks at once: no lag limit
        sub = _Subscriber(put, self._dispatcher, False, lambda: put(_END))
        with self._cond:
            backlog = list(self._chunks)
            finished = self._result is not None
            if not finished:
                self._subscribers.append(sub)
        complete = False
        try:
            for chunk in backlog:
                yield chunk
            if not finished:
                while (item := await queue_.get()) is not _END:
                    yield item
            complete = True
        finally:
            if not complete:
                self._detach(sub)
                self.cancel()

    def _detach(self, sub: _Subscriber) -> None:
        with self._cond:
            if sub in self._subscribers:
                self._subscribers.remove(sub)
                sub.end()

    # ----- engine side -----------------------------------------------------------------------------
    def deliver(self, chunks: list[AudioChunk]) -> bool:
        """Log the chunks and post them to every subscriber. False when a subscriber is more than
        `max_behind` chunks behind (the caller then aborts the request)."""
        with self._cond:
            ok = True
            for chunk in chunks:
                self._chunks.append(chunk)
                for sub in self._subscribers:
                    ok &= not sub.bounded or sub.behind < self._max_behind
                    self._post(sub, chunk)
            self._cond.notify_all()
            return ok

    def publish(self, loop: str, items: Sequence[object]) -> None:
        """An added loop's new items (engine thread)."""
        self._events.publish(loop, items)

    def mark(self, mark: SegmentMark) -> None:
        """A segment began (a new index) or ended (the same index again, with its end)."""
        with self._cond:
            if self._marks and self._marks[-1].index == mark.index:
                self._marks[-1] = mark
            else:
                self._marks.append(mark)

    def finish(self, result: SpeechResult) -> None:
        with self._cond:
            self._result = result
            for callback in self._done_callbacks:
                self._dispatcher.post(partial(self._call, callback, result))
            for sub in self._subscribers:
                sub.end()
            self._subscribers.clear()
            self._done_callbacks.clear()
            self._cond.notify_all()

    def _post(self, sub: _Subscriber, chunk: AudioChunk) -> None:
        sub.behind += 1
        sub.lane.post(lambda: self._run(sub, chunk))

    def _run(self, sub: _Subscriber, chunk: AudioChunk) -> None:
        self._call(sub.callback, chunk)
        with self._cond:
            sub.behind -= 1

    def _call(self, callback: Callable[..., None], arg: Any) -> None:
        try:
            callback(arg)
        except BaseException as e:  # noqa: BLE001 - a callback's bug (SystemExit included) reaches nobody else
            self.callback_errors.append(f"{type(e).__name__}: {e}")


class TextHandle(SpeechHandle):
    """The handle of an open request (`Runtime.open`): one stream and one result, like any handle, with its
    text given piece by piece. `feed(text)` adds a piece; `end_text()` says the text is complete (the rest is
    spoken and the request ends once it has been). A refused piece (a lone surrogate, which UTF-8 cannot
    encode, on every family; the family's own refusals) raises `RequestError` naming `text` and is not
    taken; the request goes on. Feeding a request that has ended raises `RuntimeError`."""

    def __init__(self, request_id: int, cancel: Callable[[int], None], dispatcher: Dispatcher,
                 max_behind: int = 64, *, give: Callable[[str, bool], None]) -> None:
        super().__init__(request_id, cancel, dispatcher, max_behind)
        self._give = give  # hands a piece (or the end) to the runtime
        self._lock = threading.Lock()  # pieces are taken in the order they are fed

    def feed(self, text: str) -> None:
        """Add a piece of the text (any length; sentences may span pieces)."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected a string, got {type(text).__name__}")
        if (why := encoding_problem(text)) is not None:  # refused here, whatever the family's tokenizer would do
            raise RequestError(f"text: {why} (in this piece)", field="text")
        self._send(text, False)

    def end_text(self) -> None:
        """The text is complete: what is left of it is spoken, then the request ends."""
        self._send("", True)

    async def afeed(self, text: str) -> None:
        """`feed` off the event loop (a piece that completes a sentence is laid out as a prompt)."""
        await asyncio.to_thread(self.feed, text)

    async def aend_text(self) -> None:
        await asyncio.to_thread(self.end_text)

    def _send(self, text: str, end: bool) -> None:
        with self._lock:
            self._give(text, end)
