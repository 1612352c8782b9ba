"""The seam of a loop that a card or a deployment adds to any family's graph, the family knowing nothing of it
(e.g. a word aligner of the audio): what such a loop gives the runtime and what the runtime gives it. No torch.

Owns: `AddedLoopFactory` (what the registry finds by name, `v2.registry.added_loop`: what the loop `takes` and
`gives`, and `build`), `Host` (what a built loop learns of the runtime it joins), `AddedLoop` (the built loop:
its driven `FedLoop`, its executors by work kind, batched across requests like any kind, their batch buckets,
its slot pools, and `start`, its per-request state), `AddedContext` (what `start` is handed of a request: its
id, its pools' slots, the audio's format, the text / ids the request speaks as its family exposes them,
`spoken()`, its segments as its family marks them, `segments()`, and the typed request), `Spoken` and the
family capability that gives it (`SpokenInput`; without it: the typed request's `text` and `text_ids`, where it has them),
and what a request's subscribers get of it: `AddedEvent`s (`EventLog`, held by a handle).
What flows: the loop named in the declaration's `after` (by default the one that gives what it takes: the
audio loop, whose `fresh` are `AudioChunk`s) feeds it through `FedLoop.feed`, in the read half of the step
that made them, in order, with how that loop ended once it has; its plans batch with other requests' by
their kind; each row goes back to its `advance`; what an `advance` leaves in `state.fresh` streams to the
request's subscribers as events (`SpeechHandle.events`, `subscribe_events`), and what `finalize` returns is
the request's `SpeechResult.added[name]`. Only the added loop writes its state; a failure in its loop code or
its executor fails the requests whose rows it held, and no other; a cancel ends it with the request and gives
back its slots.
Must not know: any family, tensors, models, the engine's queues.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Callable, Hashable, Mapping, Protocol, Sequence, runtime_checkable

from v2.contracts import LoopState
from v2.runtime.loops import AnyExecutor, AnyFedLoop

if TYPE_CHECKING:
    import torch

    from v2.runtime.results import SegmentMark
    from v2.runtime.records import RequestRecord


@dataclass(frozen=True)
class Spoken:
    """What a request speaks, as its family exposes it: its text (None: not known, e.g. an open request whose
    text has not arrived) and its text's token ids where the family has them."""

    text: str | None = None
    ids: tuple[int, ...] | None = None


@runtime_checkable
class SpokenInput(Protocol):
    """A family capability: what a request speaks (so far, for an open request)."""

    def spoken(self, record: RequestRecord) -> Spoken: ...


def spoken_of(family: object, record: RequestRecord, open_text: bool) -> Spoken:
    """The family's `spoken(record)`, or else the typed request's `text` (a str) and `text_ids` (ints); nothing
    for an open request (`open_text`: its text arrives in pieces the family keeps, which only it can tell)."""
    if isinstance(family, SpokenInput):
        return family.spoken(record)
    if open_text:
        return Spoken()
    text = getattr(record.request, "text", None)
    ids = getattr(record.request, "text_ids", None)
    return Spoken(text if isinstance(text, str) else None,
                  tuple(ids) if isinstance(ids, (list, tuple)) and all(isinstance(i, int) for i in ids) else None)


@dataclass(frozen=True)
class Host:
    """What an added loop learns of the runtime it joins: the family's name, the audio's format, the device."""

    family: str
    sample_rate: int
    channels: int
    device: torch.device


@dataclass(frozen=True)
class AddedContext:
    """What an added loop's `start` is handed for one request: its id, a slot of each of its pools (by the
    pool's own name), the audio's format, `spoken()` (read when needed: an open request's text grows) and
    `segments()` (the request's `SegmentMark`s so far: text spans and their frames, where its family marks
    them, e.g. open text's sentences; empty otherwise)."""

    request_id: int
    slots: Mapping[str, int]
    sample_rate: int
    channels: int
    spoken: Callable[[], Spoken]
    segments: Callable[[], Sequence[SegmentMark]] = list  # the segments begun so far, as its family marks them
    request: object = None  # the typed request, read only: its common fields (`RequestTail`, e.g. `timestamps`)


class AddedLoop(Protocol):
    """A built added loop. `loop`: a stateless `FedLoop` whose plans carry `loop=` its name (the name it was
    built with); `executors`: its work kinds' executors (kinds no family uses: a clash is refused);
    `buckets`: their batch-size buckets (absent: unpadded); `pools`: its slot pools, name -> slots (a request
    holds one slot of each from admission until the loop ends); `start`: a request's state."""

    @property
    def loop(self) -> AnyFedLoop: ...
    @property
    def executors(self) -> Mapping[Hashable, AnyExecutor]: ...
    @property
    def buckets(self) -> Mapping[Hashable, list[int]]: ...
    @property
    def pools(self) -> Mapping[str, int]: ...

    def start(self, context: AddedContext) -> LoopState: ...


class AddedLoopFactory(Protocol):
    """What `v2.registry.added_loop(name)` gives: `takes` (the kind of item it feeds on, as a card's loops say:
    "audio" for the chunks of an audio loop), `gives` (what it makes for a loop added after it; None: nothing),
    and `build(name, settings, host)` (its models, on the host's device; `settings`: the declaration's own,
    refused by raising `ValueError` naming the key)."""

    takes: str
    gives: str | None

    def build(self, name: str, settings: Mapping[str, object], host: Host) -> AddedLoop: ...


@dataclass(frozen=True)
class AddedEvent:
    """One item an added loop made for a request (`item`: the loop's own; `seq`: its index among that loop's
    events of the request)."""

    loop: str
    seq: int
    item: object


@dataclass
class EventLog:
    """A request's added-loop events: every event kept (a subscriber attached at any time sees all from the
    first), each subscriber called in order through `post` (the runtime's callback thread). Thread-safe: the
    engine thread publishes, any thread reads."""

    post: Callable[[Callable[[], None]], None]
    events: list[AddedEvent] = field(default_factory=list)
    subscribers: list[Callable[[AddedEvent], None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    counts: dict[str, int] = field(default_factory=dict)  # events published per loop: the next one's seq

    def publish(self, loop: str, items: Sequence[object]) -> None:
        with self.lock:
            seq = self.counts.get(loop, 0)
            self.counts[loop] = seq + len(items)
            for i, item in enumerate(items):
                event = AddedEvent(loop, seq + i, item)
                self.events.append(event)
                for sub in self.subscribers:
                    self.post(partial(sub, event))

    def subscribe(self, callback: Callable[[AddedEvent], None]) -> None:
        with self.lock:
            for event in self.events:
                self.post(partial(callback, event))
            self.subscribers.append(callback)

    def snapshot(self, start: int = 0) -> list[AddedEvent]:
        """The events from the `start`-th on (a reader that keeps its place copies only what is new)."""
        with self.lock:
            return self.events[start:]
