"""A handle's chunks and events merged on the event loop (v2/server/interleave.py), as its two callers use it,
without a server or a model: each event given once though it comes both as it is made and in the request's log,
those in the log only given before the next chunk (their callback may lag behind it) or before the end; a read error of the chunks raised to the speech bodies (`merged`)
and ended quietly for the chat stream (`replies`), the request cancelled either way so its result says so."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import numpy as np
import pytest

from v2.contracts import AudioChunk
from v2.events import SentenceWords, TextDelta
from v2.runtime.added import AddedEvent
from v2.server.chat_stream import replies
from v2.server.timestamps import ALIGNER, merged

GUARD_S = 60.0  # only a broken stream that never ends reaches it


C0, C1 = (AudioChunk(i, np.zeros((1, 4), np.float32), 1000, 1, False) for i in range(2))


class Broken(RuntimeError):
    pass


class Handle:
    """Plays `script`: chunks are yielded, `("event", loop, item)` published (to subscribers unless `late`: then
    only in the log), an exception raised as a read error. Like the runtime's handle, the request ends (its done
    callbacks run) when the script ends or when it is cancelled."""

    def __init__(self, script: list[Any]) -> None:
        self.script, self.log, self.subs = script, [], []
        self.dones: list[Callable[[Any], None]] = []
        self.cancelled = False

    def subscribe_events(self, callback: Callable[[AddedEvent], None]) -> None:
        self.subs.append(callback)
        for e in self.log:
            callback(e)

    def events(self, start: int = 0) -> list[AddedEvent]:
        return self.log[start:]

    def on_done(self, callback: Callable[[Any], None]) -> None:
        self.dones.append(callback)

    def _end(self) -> None:
        dones, self.dones = self.dones, []
        for cb in dones:
            cb(None)

    async def __aiter__(self) -> Any:
        for step in self.script:
            await asyncio.sleep(0)
            if isinstance(step, BaseException):
                raise step
            if isinstance(step, tuple):
                _, loop, item, late = (*step, False)[:4]
                e = AddedEvent(loop, sum(x.loop == loop for x in self.log), item)
                self.log.append(e)
                for cb in ([] if late else self.subs):
                    cb(e)
            else:
                yield step
        self._end()

    def cancel(self) -> None:
        self.cancelled = True
        self._end()


def collect(stream: Any) -> list[Any]:
    async def run() -> list[Any]:
        return [x async for x in stream]
    return asyncio.run(asyncio.wait_for(run(), GUARD_S))


def test_each_event_once_and_those_only_in_the_log_before_the_next_chunk_or_the_end():
    a, b, c, d = TextDelta((1,), "a"), TextDelta((2,), "b"), TextDelta((3,), "c"), TextDelta((4,), "d")
    h = Handle([("event", "thinker", a), C0, ("event", "thinker", b), ("event", "thinker", c, True),
                C1, ("event", "thinker", d, True)])
    got = collect(replies(h))
    # c, d: logged, never delivered (their callback lags): c was in the log when C1 came, d only at the end
    assert got == [a, C0, b, c, C1, d]


def test_a_read_error_reaches_the_speech_body_and_the_request_is_cancelled():
    s0 = SentenceWords(0, None, None, ())
    h = Handle([C0, ("event", ALIGNER, s0), Broken("lost"), C1])
    seen: list[Any] = []

    async def run() -> None:
        async for x in merged(h, True):
            seen.append(x)
    with pytest.raises(Broken):
        asyncio.run(asyncio.wait_for(run(), GUARD_S))
    assert seen == [C0, s0] and h.cancelled


def test_a_read_error_ends_the_chat_stream_quietly_with_the_request_cancelled():
    a = TextDelta((1,), "a")
    h = Handle([("event", "thinker", a), C0, Broken("lost"), C1])
    assert collect(replies(h)) == [a, C0]
    assert h.cancelled  # the chat body's final result then reports the ending in-band
