"""A request's added-loop event log: each loop's events numbered from 0 in publish order, and publishing costs
the new events only (the log is not read back to number them)."""

from __future__ import annotations

from typing import Callable, Iterator

from v2.runtime.added import AddedEvent, EventLog


class _Unread(list[AddedEvent]):
    """A log that fails if anything walks it."""

    def __iter__(self) -> Iterator[AddedEvent]:
        raise AssertionError("the whole log was read to publish")


def test_each_loop_numbers_its_events_without_reading_the_log() -> None:
    posted: list[Callable[[], None]] = []
    log = EventLog(posted.append)
    seen: list[AddedEvent] = []
    log.subscribe(seen.append)
    log.events = _Unread()
    log.publish("words", ["a", "b"])
    log.publish("captions", ["x"])
    log.publish("words", ["c"])
    log.publish("captions", [])
    log.publish("captions", ["y", "z"])
    for call in posted:
        call()
    assert [(e.loop, e.seq, e.item) for e in seen] == [
        ("words", 0, "a"), ("words", 1, "b"), ("captions", 0, "x"), ("words", 2, "c"),
        ("captions", 1, "y"), ("captions", 2, "z")]
    assert [(e.loop, e.seq) for e in log.snapshot(4)] == [("captions", 1), ("captions", 2)]
