"""The read half of an engine step: a launched step's results back to the loops that planned them.

Owns: `InFlight` (a launched step: its batches, their device results and their copy to the host) and
`Scatter`, which reads one back: it waits for the host copy (that wait is reported, not counted as host
work), has each batch's rows read by the executor registered for its kind and hands each row to the loop
that planned it (the front loop's rows to the encode stage; a prefill's read to the group sharing, under the
request's guard), feeds what a loop made along the card's edges to the loops it feeds (a loop waiting for
its input settles: a fed paged loop's first prompt is laid out by its family), delivers the audio
loop's output to the caller (the graph's `audio`; none when the card declares no loop that makes audio;
aborting a stream whose subscriber fell too far behind) and an added loop's to the request's event log
(`LoopSpec.publishes`), and settles each
request that moved: computed prompt blocks into the prefix cache, new input for a loop that waits for it (a
long text's next segment, text fed to an open request), each ended loop's slots back, and the request's end
once every loop has ended.
Must not know: any family (it is handed one), scheduling and launching (engine.py, scheduler.py), loop
logic, how requests are admitted and ended (lifecycle.py).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Hashable, Mapping

from v2.contracts import FinishReason, WorkPlan
from v2.runtime.device import Pending
from v2.runtime.encoding import EncodeStage
from v2.runtime.family import AnyExecutor, EngineFamily, Publishing
from v2.runtime.groups import GroupSharing
from v2.runtime.paged_loops import PagedLoops
from v2.runtime.lifecycle import Requests
from v2.runtime.records import RequestRecord
from v2.runtime.scheduler import Batch


@dataclass
class InFlight:
    """A launched step: its batches with each one's device result, and their copy to the host."""

    batches: list[tuple[Batch, Pending[Any]]]
    host: Pending[list[Any]]


class Scatter:
    """Reads launched steps back into the loops and requests of one engine (its thread alone calls it)."""

    def __init__(self, family: EngineFamily, executors: Mapping[Hashable, AnyExecutor], requests: Requests,
                 encoding: EncodeStage, groups: GroupSharing, kv: PagedLoops | None, cond: threading.Condition) -> None:
        self.family, self.graph, self.executors = family, family.graph, executors
        self.requests, self.encoding, self.groups, self.kv, self.cond = requests, encoding, groups, kv, cond
        self._sink = family.graph.sink
        audio = family.graph.audio
        self._audio = family.graph.specs[audio] if audio is not None else None  # its output streams to the caller
        self._prefills = kv.prefill_kinds if kv is not None else frozenset()
        self._first = kv.first.name if kv is not None else None  # the paged loop a group shares

    def read(self, step: InFlight) -> float:
        """Read a launched step back: each batch's rows to the loops that planned them, then settle. Returns
        the seconds spent waiting for the device's results."""
        start = time.perf_counter()
        outcomes = step.host.wait()
        waited = time.perf_counter() - start
        q = self.requests
        q.check_state_calls()  # queued before this step's copy or the next step's work: done, or nearly
        touched: dict[int, RequestRecord] = {}
        for (batch, _), out in zip(step.batches, outcomes):
            if isinstance(out, BaseException):
                q.fail_batch(batch, out, read=True)
                continue
            rows = self.executors[batch.kind].read(out, batch)
            if self.graph.is_front(batch.plans[0].loop):  # the front loop's (encodes)
                with self.cond:
                    self.encoding.scatter(batch.plans, rows, q.encoded, q.fail_id)
            elif batch.kind in self._prefills:
                for plan, row in zip(batch.plans, rows):
                    if plan.loop == self._first:
                        self.groups.prefill_read(plan, failed=False)
                    req = q.running.get(plan.request_id)
                    if req is not None:
                        q.guard(req, partial(self._advance, req, plan, row, touched, True))
            else:
                for plan, row in zip(batch.plans, rows):
                    req = q.running.get(plan.request_id)
                    if req is None:
                        continue  # ended meanwhile: its row is dropped
                    try:
                        self._advance(req, plan, row, touched, False)
                    except Exception as e:
                        q.fail(req, e)
        for req in touched.values():
            if not req.ended:
                q.guard(req, partial(self.settle, req))
        return waited

    def _advance(self, req: RequestRecord, plan: WorkPlan, row: Any, touched: dict[int, RequestRecord],
                 settle: bool) -> None:
        """One row to the loop that planned it; what it made to the loops it feeds, or, from the audio loop,
        to the caller. `settle`: the request settles after this read whatever happened (a prefill read)."""
        spec = self.graph.specs[plan.loop]
        state = req.states[plan.loop]
        if not spec.loop.advance(state, plan, row):
            return
        moved = settle or state.finish is not None or state.wants_input
        for name, loop in self.graph.feeding[plan.loop]:
            down = req.states[name]
            waited = down.wants_input
            loop.feed(down, state.fresh, state.finish)
            moved = moved or waited or down.finish is not None  # a loop that waited for input may have it now
        if spec is self._audio and not self._deliver(req, state):
            return
        if spec.publishes:  # an added loop's output, or what a family loop publishes: to the subscribers, as events
            items = spec.loop.published(state) if isinstance(spec.loop, Publishing) else state.fresh
            if items:
                req.handle.publish(str(spec.name), items)
        if moved:
            touched[req.id] = req

    def _deliver(self, req: RequestRecord, state: Any) -> bool:
        """The audio loop's new output to the caller (a streaming request's chunks); False when the request
        was aborted for a subscriber that fell too far behind."""
        if req.first_audio is None:
            req.first_audio = time.perf_counter()
        if req.request.stream and not req.handle.deliver(state.fresh):
            req.error = (f"stream: a subscriber fell more than {self.family.max_buffered_chunks} "
                         "chunks behind; the request was aborted")
            self.requests.finish(req, FinishReason.ABORT)
            return False
        return True

    def settle(self, req: RequestRecord) -> None:
        """A request whose loops moved on (or that got new input): computed prompt blocks into the prefix
        cache, new input for a loop that waits for it (a long text's next segment, text fed to an open request;
        a loop whose input has ended ends, and the loops it feeds are told), each ended loop's slots back, and
        the request's end once every loop has ended."""
        if self.kv is not None:
            self.kv.computed([req])
        ended = True
        for spec in self.graph.loops:
            state = req.states[spec.name]
            if state.wants_input:
                rows = self.family.more_input(req, spec.name)
                if rows is not None and self.kv is not None and spec.name in self.kv.by_name:
                    self.kv.new_prompt(req, spec.name, rows)  # prefilled once KV blocks are given
                if state.finish is not None:  # its input ended: the loops it feeds learn it (made nothing more)
                    for name, loop in self.graph.feeding[spec.name]:
                        loop.feed(req.states[name], [], state.finish)
            if state.finish is not None:
                for pool in spec.pools:
                    self.requests.release(req, pool)
            else:
                ended = False
        if ended:
            self.requests.finish(req, req.states[self._sink.name].finish or FinishReason.ABORT)
