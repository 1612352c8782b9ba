"""What callers tell the engine: typed messages, posted from any thread and taken by the engine thread at
the top of its next step (`receive`), so no caller writes the engine's queues.

Owns: the messages (`Submit`: records to queue, with their deadlines and idle timeouts; `Feed`: an open
request got text or its end; `Cancel`; `Encode`: a job for the front loop), `Inbox` (post under the
engine's lock, waking it; how many records are posted and not yet queued, which admission control and
`stats()` count as waiting) and applying a drained batch to the engine's queues (`deliver`).
Must not know: families, models, devices, scheduling.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Union

from v2.runtime.encoding import EncodeJob, EncodeStage
from v2.runtime.lifecycle import Requests
from v2.runtime.records import RequestRecord


@dataclass(frozen=True)
class Submit:
    records: tuple[RequestRecord, ...]
    idle_s: float | None = None  # an open request's input idle timeout (None: not open)


@dataclass(frozen=True)
class Feed:
    record: RequestRecord
    new: bool     # the family laid out new input (a segment, text rows) the engine hands over
    ended: bool   # the text is complete
    idle_s: float


@dataclass(frozen=True)
class Cancel:
    request_id: int           # a request's, or an encode job's (which then fails with `reason`)
    reason: str = "cancelled"


@dataclass(frozen=True)
class Encode:
    request_id: int
    job: EncodeJob


Message = Union[Submit, Feed, Cancel, Encode]


class Inbox:
    """Post with the engine's lock held by `post` itself; the engine drains it on its own thread."""

    def __init__(self, cond: threading.Condition) -> None:
        self.cond = cond
        self._messages: deque[Message] = deque()
        self.queued = 0  # records in posted `Submit`s not yet delivered

    def __bool__(self) -> bool:
        return bool(self._messages)

    def post(self, message: Message) -> None:
        """Called with the lock held (the caller checked the engine is open and the queue has room)."""
        self._messages.append(message)
        if isinstance(message, Submit):
            self.queued += len(message.records)
        self.cond.notify_all()

    def drain(self) -> list[Message]:
        """Every message posted so far, in order (the caller holds the lock)."""
        messages, self._messages = list(self._messages), deque()
        self.queued = 0
        return messages


def deliver(messages: list[Message], q: Requests, encoding: EncodeStage) -> None:
    """Apply drained messages to the engine's queues, in the order they were posted (the lock held)."""
    for m in messages:
        if isinstance(m, Submit):
            for record in m.records:
                if record.front is not None:
                    encoding.requests[record.id] = record
                timeout = record.request.timeout
                if timeout is not None:
                    q.deadlines[record.id] = record.submitted + timeout
                if m.idle_s is not None:
                    q.idle[record.id] = (record.submitted + m.idle_s, m.idle_s)
                q.waiting.append(record)
        elif isinstance(m, Feed):
            record = m.record
            if record.ended:
                continue
            if m.ended:
                record.input_ended = True
                q.idle.pop(record.id, None)
            elif record.id in q.idle:
                q.idle[record.id] = (time.perf_counter() + m.idle_s, m.idle_s)
            if m.new or m.ended:
                q.inputs.add(record.id)
        elif isinstance(m, Cancel):
            if not encoding.fail(m.request_id, m.reason):  # not a job: a request's cancel
                q.cancels.add(m.request_id)
        else:
            encoding.jobs[m.request_id] = m.job


__all__ = ["Cancel", "Encode", "Feed", "Inbox", "Message", "Submit", "deliver"]
