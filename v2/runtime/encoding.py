"""Work before admission inside the engine: requests whose inputs (reference recordings) wait for their
family's front loop (encoding), and encode-only jobs.

Owns: `EncodeJob` (a caller waiting for the output of one input, e.g. a voice being stored) and
`EncodeStage`: the front loop's state slots (an input takes one when its work starts, all of a request's
at once, and gives it back when it is done or its request ends; the family queues fresh state on the
device stream), collecting the front plans of waiting requests and jobs each step, telling their loop what
was launched, scattering the outputs back (a request's prompt is then laid out by its family and it
becomes admissible; a job's caller is woken), and failing jobs when the runtime closes.
Must not know: any family, scheduling policy, HTTP, files (inputs arrive prepared).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from v2.contracts import WorkPlan
from v2.runtime.family import FrontLoop, FrontState
from v2.runtime.slots import SlotPool

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from v2.runtime.records import RequestRecord


@dataclass
class EncodeJob:
    """Codes for recordings nobody will speak with yet (a voice being stored)."""

    state: FrontState
    done: threading.Event = field(default_factory=threading.Event)
    codes: Sequence[NDArray[np.int64]] | None = None
    error: str | None = None

    def fail(self, message: str) -> None:
        self.error = message
        self.done.set()


class EncodeStage:
    """The engine's side of encoding: slots, which states need work, and where their codes go."""

    def __init__(self, loop: FrontLoop[Any, Any] | None, pool: SlotPool | None,
                 start: Callable[[list[int]], None]) -> None:
        """`start(slots)`: fresh state in those slots (the family queues it on the engine's stream)."""
        self.loop, self.pool, self.start = loop, pool, start
        self.jobs: dict[int, EncodeJob] = {}  # by id (the engine's request-id counter)
        self.requests: dict[int, RequestRecord] = {}  # waiting requests whose recordings are not encoded yet

    @property
    def pending(self) -> int:
        """Requests and jobs with encoding left (0: `plans` is empty)."""
        return len(self.requests) + len(self.jobs)

    def plans(self) -> list[WorkPlan]:
        """This step's ENCODE plans: encodes that hold their slots, then new ones while slots last (in
        submission order: requests, then jobs)."""
        if self.loop is None or self.pool is None:
            return []
        states = [r.front for r in self.requests.values() if r.front is not None] + [j.state for j in self.jobs.values()]
        plans = []
        for state in states:
            if not state.slots:
                if self.pool.free_count < state.inputs:
                    continue  # waits for slots
                slots = [self.pool.allocate(state.request_id) for _ in range(state.inputs)]
                self.loop.started(state, slots)
                self.start(slots)
            plan = self.loop.next(state)
            if plan is not None:
                plans.append(plan)
        return plans

    def _state(self, rid: int) -> FrontState | None:
        job, record = self.jobs.get(rid), self.requests.get(rid)
        return job.state if job is not None else record.front if record is not None else None

    def launched(self, plans: Sequence[WorkPlan]) -> None:
        assert self.loop is not None
        for plan in plans:
            state = self._state(plan.request_id)
            if state is not None:
                self.loop.launched(state, plan)

    def scatter(self, plans: Sequence[WorkPlan], outputs: Iterable[object], encoded: Callable[[RequestRecord], None],
                failed: Callable[[int, str], None]) -> None:
        """outputs: per plan, its rows' outputs (the front executor's `read`): each plan's to its loop; a
        finished one gives its slots back, then `encoded(record)` for a request (which lays out its
        prompt) or the job's caller is woken. A failure fails that request or job alone."""
        assert self.loop is not None
        for plan, rows in zip(plans, outputs):
            rid = plan.request_id
            try:
                job, record = self.jobs.get(rid), self.requests.get(rid)
                state = self._state(rid)
                if state is None:
                    continue  # ended meanwhile (its slots were given back then)
                self.loop.advance(state, plan, rows)
                if state.finish is None:
                    continue
                self.release(state)  # (forgets the request)
                if job is not None:
                    del self.jobs[rid]
                    job.codes = self.loop.finalize(state)
                    job.done.set()
                elif record is not None:
                    encoded(record)
            except Exception as e:  # this request's or job's fault alone
                failed(rid, f"{type(e).__name__}: {e}")

    def release(self, state: FrontState | None) -> None:
        """Give an encode's slots back and forget it (once; a no-op for one that never started)."""
        if state is not None:
            assert self.loop is not None and self.pool is not None
            self.requests.pop(state.request_id, None)
            for slot in state.slots:
                self.pool.release(slot, state.request_id)
            if state.slots:
                self.loop.started(state, [])

    def fail(self, rid: int, message: str) -> bool:
        """Fail a job; False when `rid` is not a job."""
        job = self.jobs.pop(rid, None)
        if job is not None:
            self.release(job.state)
            job.fail(message)
        return job is not None

    def fail_all(self, message: str) -> None:
        for rid in list(self.jobs):
            self.fail(rid, message)
