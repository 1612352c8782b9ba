"""The engine thread: every request's work as batched steps, the host half of step N+1 overlapping the device
half of step N, over the loops its family's card declares.

Owns: the engine (it holds the family, the scheduler, the paged KV, the executors by work kind, the slot
pools, the encode stage and the requests' queues, `Requests`), the engine thread and the step, in this order:
collect (every running request's plans from the loops no other loop feeds, KV blocks for their writes,
encodes) -> launch (the scheduler's `StepPlan`; each batch's host half, then its device half on the stream,
through the executor registered for its kind; the loops told what went) -> scatter (the oldest step still on
the device read back by `Scatter`, scatter.py) -> collect and launch again for the fed loops (chunks of the
frames just read, in the same step). On an asynchronous stream (`depth` 1) the step launched last
stays on the device while the one before it is read, so the device never waits for the host; on a CPU
(`depth` 0) each step is read at once. Also: a weight update applied between steps on an idle device, a
fault in the engine's own code ending what is in flight, and the engine's host time per step.
Must not know: any family (it is handed one), model internals, batching policy (scheduler.py), loop logic,
how a step's results reach the loops and requests settle (scatter.py), how requests are admitted and ended
(lifecycle.py), how its paged KV is built from the family's (paged_setup.py), the caller's API (runtime.py).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from functools import partial
from typing import Any

from v2.contracts import FinishReason, WorkPlan
from v2.runtime.device import Pending, Stream
from v2.runtime.encoding import EncodeStage
from v2.runtime.family import EngineFamily, LoopSpec
from v2.runtime.groups import GroupSharing
from v2.runtime.handles import Dispatcher
from v2.runtime.inbox import Inbox, deliver
from v2.runtime.lifecycle import Requests
from v2.runtime.paged_setup import paged_loops
from v2.runtime.scatter import InFlight, Scatter
from v2.runtime.scheduler import Batch, Scheduler
from v2.runtime.slots import SlotPool
from v2.runtime.weight_updates import UpdateGate


class _Condition(threading.Condition):
    """The engine's lock and condition; it counts its wake-ups, so the engine thread, after a step that did
    nothing, waits only if nothing was announced since that step began (no wake-up is missed)."""

    def __init__(self) -> None:
        super().__init__()
        self.wakes = 0

    def notify_all(self) -> None:
        self.wakes += 1
        super().notify_all()


IDLE_WAIT_S = 0.05  # at most this long asleep after a step that did nothing (deadlines wake it sooner)


class Engine:
    def __init__(self, family: EngineFamily, stream: Stream) -> None:
        self.family, self.stream, self.graph = family, stream, family.graph
        self.cond = _Condition()
        self.results = Dispatcher("v2-results")     # publishes results: runs no user code
        self.callbacks = Dispatcher("v2-callbacks")  # runs done callbacks: user code
        self.gate = UpdateGate(self.cond)
        self.groups = GroupSharing()
        self.pools = {name: SlotPool(name, size) for name, size in family.pools.items()}
        self.executors = dict(family.executors)
        self.scheduler = Scheduler(order=list(self.executors), buckets=family.buckets,
                                   prefill_budget=family.prefill_budget)
        graph = self.graph
        self.paged = paged_loops(graph, family.paged_kv())
        self.kv = self.paged.first if self.paged is not None else None  # the first paged loop's (groups share it)
        self.scheduler.prefill_kinds = self.paged.prefill_kinds if self.paged is not None else frozenset()
        self.encoding = EncodeStage(graph.front, self.pools.get(graph.front_pool or ""),
                                    family.front_start if graph.front is not None else lambda slots: None)
        self.requests = Requests(family, stream, self.paged, self.encoding, self.pools, self.groups, self.gate,
                                 self.cond, self.results)
        self.inbox = Inbox(self.cond)  # what callers post (submit, feed, cancel, encode): taken at each step's top
        family.bind(self.requests.launch_state)
        self.closed = False
        self.drain = False
        self.counters = {k: {"calls": 0, "rows": 0, "padded_rows": 0, "seconds": 0.0} for k in self.executors}
        self.steps = 0
        self.host_seconds = 0.0  # engine thread time in steps, less the waits for the device's results
        self._waited = 0.0
        self.prefilled_rows = 0
        self.inflight: deque[InFlight] = deque()
        self._front = graph.front
        self._fed_paged = self.paged is not None and any(s.name in self.paged.by_name for s in graph.fed)
        self.scatter = Scatter(family, self.executors, self.requests, self.encoding, self.groups, self.paged, self.cond)
        self.thread = threading.Thread(target=self._serve, name="v2-engine", daemon=True)

    # ----- the loop --------------------------------------------------------------------------------
    def _serve(self) -> None:
        self.family.thread_setup()  # this thread's intra-op threads, current device
        q = self.requests
        busy = lambda: (q.running or self.inbox or q.waiting or q.cancels or q.inputs  # noqa: E731
                        or self.gate.pending or self.encoding.jobs or self.inflight)
        quiet, seen = False, 0  # the last step did nothing; the wake-ups counted when it began
        while True:
            with self.cond:
                # asleep only when nothing is on the device and nothing changed (e.g. every request waits for
                # text): a step in flight is waited on through its results, never on a timer
                if quiet and not self.inflight and self.cond.wakes == seen and not self.closed:
                    deadline = q.next_deadline()
                    wait = IDLE_WAIT_S if deadline is None else min(IDLE_WAIT_S, deadline - time.perf_counter())
                    if wait > 0:
                        self.cond.wait(wait)
                if not busy():
                    self.cond.wait_for(lambda: self.closed or busy())
                if self.inbox:  # taken before a close looks at the queues: nothing posted is left behind
                    deliver(self.inbox.drain(), q, self.encoding)
                if self.closed and not self.drain:
                    q.cancels.update(r.id for r in (*q.waiting, *q.running.values()))
                    self.encoding.fail_all("the runtime is closed")
                idle = not busy()
                seen = self.cond.wakes
            if self.closed and idle:
                break
            try:
                quiet = not self.step()
            except Exception as e:  # a fault in the engine's own code: end what is in flight, keep serving
                quiet = False
                self._fail_everything(f"engine step failed: {type(e).__name__}: {e}")
        self.stream.close()
        self.results.post(self.callbacks.stop)  # after the last result: its done callbacks, then the end
        self.results.stop()

    def _fail_everything(self, message: str) -> None:
        q = self.requests
        with self.cond:
            waiting, q.waiting = list(q.waiting), deque()
            self.encoding.fail_all(message)
        for req in (*waiting, *list(q.running.values())):
            req.error = message
            q.finish(req, FinishReason.ERROR)
        try:  # what is still on the device belongs to requests that just ended
            self.stream.sync()
        finally:
            self.inflight.clear()
            q.state_calls.clear()
            self.groups.clear()

    def step(self) -> bool:
        """One step; whether it did anything (launched or read work, admitted or ended a request)."""
        start, self._waited = time.perf_counter(), 0.0
        changes = self.requests.changes
        did = self._step_work()
        with self.cond:
            self.steps += 1
            self.host_seconds += time.perf_counter() - start - self._waited
        return did or self.requests.changes != changes or self.gate.pending is not None

    def _scatter(self, step: InFlight) -> None:
        self._waited += self.scatter.read(step)

    def waiting_count(self) -> int:
        """Requests waiting for admission, those posted and not yet taken included (the caller holds the lock)."""
        return len(self.requests.waiting) + self.inbox.queued

    def receive(self) -> None:
        """What callers posted since the last step, into the engine's queues (mini-sglang's `receive_msg`)."""
        with self.cond:
            deliver(self.inbox.drain(), self.requests, self.encoding)

    def _step_work(self) -> bool:
        q = self.requests
        if self.inbox:
            self.receive()
        q.apply_cancels()
        q.expire()
        q.apply_inputs(self.scatter.settle)  # text fed to open requests since the last step
        if self.gate.pending is not None:  # admit nothing until the update is applied, on an idle device
            self._read_all()
            self.gate.progress(self.family.weights, q.running, lambda req: q.finish(req, FinishReason.ABORT))
        else:
            q.admit()
        read = bool(self.inflight)
        launched = self._launch(self._collect())  # step N's prefills, frames and encodes go first
        keep = max(0, self.stream.depth - 1) if launched else 0
        while len(self.inflight) > keep:  # read step N - 1 while the device runs them
            self._scatter(self.inflight.popleft())
        launched += self._launch(self._collect_fed())  # chunks of the frames just read, in step N too
        if launched:
            self.inflight.append(InFlight(launched, self.stream.fetch([p for _, p in launched])))
        while len(self.inflight) > self.stream.depth:
            self._scatter(self.inflight.popleft())
        if self.kv is not None:
            self.groups.step(q.running, self.kv, q.guard)
        return read or bool(launched)

    def _read_all(self) -> None:
        """Read every step still on the device; then the device is idle."""
        while self.inflight:
            self._scatter(self.inflight.popleft())
        self.stream.sync()
        self.requests.check_state_calls()

    # ----- collect -> launch (-> scatter: scatter.py) ------------------------------------------------
    def _plans(self, specs: tuple[LoopSpec, ...]) -> list[WorkPlan]:
        """Every running request's next plan from each of these loops (a failure fails that request alone)."""
        plans: list[WorkPlan] = []
        q = self.requests
        for spec in specs:
            name, loop_next = spec.name, spec.loop.next
            for req in list(q.running.values()):
                try:
                    plan = loop_next(req.states[name])
                    if plan is not None:
                        plans.append(plan)
                except Exception as e:  # one request's loop code fails that request alone
                    q.fail(req, e)
        return plans

    def _collect(self) -> list[WorkPlan]:
        """The plans of the loops no other loop feeds, KV blocks for their writes (may preempt), encodes."""
        plans = self._plans(self.graph.sources)
        if self.paged is not None:
            plans = self.paged.before_step(self.requests.running, plans)  # KV blocks for every write
        if self.encoding.pending:  # (only this thread fills its queues: no lock to see them empty)
            with self.cond:
                plans.extend(self.encoding.plans())
        return plans

    def _collect_fed(self) -> list[WorkPlan]:
        """The plans of the loops another loop feeds (of what was read so far: due audio chunks, a fed paged
        loop's prefills and steps), KV blocks for their writes (may preempt)."""
        if not self.graph.fed:
            return []
        plans = self._plans(self.graph.fed)
        if self._fed_paged and plans:
            plans = self.paged.before_step(self.requests.running, plans)  # type: ignore[union-attr]
        return plans

    def _launch(self, plans: list[WorkPlan]) -> list[tuple[Batch, Pending[Any]]]:
        """Schedule the plans; per batch, the host half, then the device half on the stream; the loops
        learn what went. Returns each launched batch with its device result."""
        if not plans:
            return []
        kinds = self.scheduler.prefill_kinds
        prefill_rows = {(p.request_id, p.loop): self._rows(p) for p in plans if p.signature.kind in kinds}
        step = self.scheduler.plan(plans, prefill_rows)
        launched = []
        for batch in step.batches:
            start = time.perf_counter()
            executor = self.executors[batch.kind]
            try:
                work = executor.pack(batch)  # its host half
            except Exception as e:  # its host half failed: only its requests
                self.requests.fail_batch(batch, e, read=False)
                continue
            launched.append((batch, self.stream.launch(partial(executor.launch, work))))
            self._launched(batch)
            with self.cond:  # host time of the call (on a GPU: launch time; the read comes later)
                counter = self.counters[batch.kind]
                counter["calls"] += 1
                counter["rows"] += len(batch.plans)
                counter["padded_rows"] += batch.bucket
                counter["seconds"] += time.perf_counter() - start
                if batch.kind in kinds:
                    self.prefilled_rows += sum(prefill_rows[p.request_id, p.loop] for p in batch.plans)
        return launched

    def _rows(self, plan: WorkPlan) -> int:
        """Prompt rows a prefill plan writes."""
        assert self.paged is not None, "prefill work needs a paged KV"
        return self.paged.kv_rows(plan)

    def _launched(self, batch: Batch) -> None:
        """Tell the loops what went to the device (a request ended by an earlier batch's failure is skipped)."""
        if self.graph.is_front(batch.plans[0].loop):
            self.encoding.launched(batch.plans)
            return
        running, specs = self.requests.running, self.graph.specs
        for plan in batch.plans:
            req = running.get(plan.request_id)
            if req is not None:
                specs[plan.loop].loop.launched(req.states[plan.loop], plan)

    def stats(self) -> dict[str, Any]:
        """The engine's counters (the caller holds the lock)."""
        kinds = {getattr(k, "value", str(k)): dict(c, mean_batch=(c["rows"] / c["calls"] if c["calls"] else 0.0))
                 for k, c in self.counters.items()}
        queue = self.requests.stats()
        queue["waiting"] += self.inbox.queued  # posted, not yet taken: waiting all the same
        return {"steps": self.steps, "host_seconds": self.host_seconds, "kinds": kinds, **queue,
                **self.family.stats(), "prefilled_rows": self.prefilled_rows,
                "steps_in_flight": len(self.inflight), "device_depth": self.stream.depth}
