"""The request's event log read by `interleave` (v2/server/interleave.py) from where its last read stopped: a
long stream copies each event once, not the whole log before every chunk, and gives the same items in the same
order as before. And the runtime's handle gives its log from an index (`SpeechHandle.events(start)`)."""

from __future__ import annotations

from typing import Any

from v2.events import TextDelta
from v2.runtime.dispatch import Dispatcher
from v2.runtime.handles import SpeechHandle
from v2.server.chat_stream import replies

from test_interleave import C0, Handle, collect


class Counting(Handle):
    """`Handle`, counting the events each log read copies."""

    def __init__(self, script: list[Any]) -> None:
        super().__init__(script)
        self.copied: list[int] = []

    def events(self, start: int = 0) -> list[Any]:
        out = super().events(start)
        self.copied.append(len(out))
        return out


def test_each_log_read_copies_only_the_new_events_and_the_order_is_kept():
    n = 200
    deltas = [TextDelta((i,), str(i)) for i in range(n)]
    script: list[Any] = []
    for i, d in enumerate(deltas):  # every other event only in the log (its callback lags past the chunk)
        script += [("event", "thinker", d, i % 2 == 1), C0]
    h = Counting(script)
    got = collect(replies(h))
    assert got == [x for d in deltas for x in (d, C0)]  # each event before the chunk it was published before
    assert sum(h.copied) == n  # each event copied once; a whole-log read per chunk copies n (n + 1) / 2
    assert max(h.copied) <= 1


def test_the_runtime_handle_gives_its_log_from_an_index():
    lane = Dispatcher("test-events")
    try:
        h = SpeechHandle(1, lambda _: None, lane)
        h._events.publish("thinker", ["a", "b", "c"])
        assert [e.item for e in h.events()] == ["a", "b", "c"]
        assert [(e.seq, e.item) for e in h.events(1)] == [(1, "b"), (2, "c")]
        assert h.events(3) == [] and h.events(7) == []
    finally:
        lane.stop()


def test_an_event_source_without_events_after_the_last_chunk_ends_cleanly():
    h = Counting([C0, C0])
    assert collect(replies(h)) == [C0, C0]
    assert sum(h.copied) == 0
