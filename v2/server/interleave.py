"""One request's audio chunks and chosen added-loop events, merged on the event loop in the order they come.

Owns: `interleave`, the one place the server reads a handle's chunks and its events together (the chat stream's
text deltas beside its audio, the speech bodies' and the WebSocket's aligned sentences beside theirs): each event
given once (by its loop and `seq`), every event published before a chunk was delivered given before that chunk
(read from the request's log, which the engine thread appends to before it delivers a later chunk: the events'
callback thread and the chunks' are two threads, and the first may lag; a long text's first segment's words
must not wait for the end), every event published before the request ended given before the stream ends, the
request cancelled when the stream stops early, and what a read error of the chunks does (each caller says).
The log is read from where the last read stopped (`handle.events(start)`): each event copied once, not the
whole log before every chunk (a long stream's cost stays linear in its events).
Must not know: which events a caller wants (it passes `pick`), how anything is encoded or sent, routes, any family.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Protocol, TypeVar

from v2.contracts import AudioChunk
from v2.runtime.added import AddedEvent

T = TypeVar("T")
_END = object()


class EventSource(Protocol):
    """What `interleave` reads of a request's handle (the runtime's `SpeechHandle`)."""

    def subscribe_events(self, callback: Callable[[AddedEvent], None]) -> None: ...
    def events(self, start: int = 0) -> list[AddedEvent]: ...  # the log from its `start`-th event on
    def cancel(self) -> None: ...
    def __aiter__(self) -> AsyncIterator[AudioChunk]: ...


@dataclass(frozen=True)
class _Picked:
    """A picked event on the queue: its identity (its loop, its `seq` there) and what `pick` made of it."""

    key: tuple[str, int]
    item: Any


async def interleave(handle: EventSource, pick: Callable[[AddedEvent], T | None], *,
                     raise_read_error: bool) -> AsyncIterator[AudioChunk | T]:
    """The handle's chunks and, of its added-loop events (`AddedEvent`s), what `pick(event)` makes of them (None:
    skipped), as they reach the event loop; before each chunk, those in the request's log not given yet (read
    from where the last read stopped: `handle.events(start)`), so an event published before a chunk was
    delivered comes before it even where its callback lags. After the last chunk the request has ended and its events are all published: every picked event not
    yet given follows, in order. Stopping early cancels the request.

    A read error (the handle's chunk iteration raising) ends the stream and cancels the request; then
    `raise_read_error`: True raises it to the caller: the speech bodies and the WebSocket's utterances need that,
    since a raw audio stream has no in-band place for it (the body fails) and a session logs it. False ends the
    stream quietly: the chat stream needs that, since it reports the request's ending in-band (`data: {"error"}`,
    here "cancelled") from the final result it reads once this stream is done."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()

    def put(item: Any) -> None:  # the runtime's callback thread; a closed loop has nobody left to read
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:
            pass

    def picked(event: AddedEvent) -> None:
        item = pick(event)
        if item is not None:
            put(_Picked((event.loop, event.seq), item))

    handle.subscribe_events(picked)

    async def pump() -> None:
        try:
            async for chunk in handle:
                queue.put_nowait(chunk)
        finally:
            queue.put_nowait(_END)

    task = asyncio.ensure_future(pump())
    given: set[tuple[str, int]] = set()
    logged = 0  # the request's log read up to here (it only grows)

    def unseen() -> list[T]:
        """Picked events in the request's log not given yet, in order (marked given)."""
        nonlocal logged
        fresh = handle.events(logged)  # only what is new: the log only grows
        logged += len(fresh)
        items: list[T] = []
        for event in fresh:
            item = pick(event)
            if item is not None and (event.loop, event.seq) not in given:
                given.add((event.loop, event.seq))
                items.append(item)
        return items

    try:
        while (entry := await queue.get()) is not _END:
            if isinstance(entry, _Picked):
                if entry.key not in given:
                    given.add(entry.key)
                    yield entry.item
            else:
                for item in unseen():  # published before this chunk was delivered: their callbacks may lag
                    yield item
                yield entry
        try:
            await task
        except Exception:
            if raise_read_error:
                raise
            return
        for item in unseen():
            yield item
    finally:
        task.cancel()
        handle.cancel()  # idempotent; a finished request is left as it is
