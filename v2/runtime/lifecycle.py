"""How requests enter and leave the engine: `Requests`, the queues and each request's life on the engine side.

Owns: the queues of waiting and running requests, cancels, deadlines, and the request lifecycle:
admission (preempted requests first, then waiting ones in order while slots and KV blocks last, the
scheduler's `admissible`; a group all together; with several paged loops, the first one's prompt
fits and no loop has a request waiting for blocks), starting a request's loops (its family makes their states
with the slots it was given), cancels, deadlines, device state changes queued on behalf of a request (a
failure fails that request), the one way a request fails (`fail`: ERROR with the message; a failed batch
fails only its requests, and a group leader's failed prompt fails the members that took it), and the end
of a request (`finish`: exactly once; every slot released; its result built by its family and published
by publishing.py).
Its work still on the device is dropped when read, since nothing reads a request that is no longer running.
Must not know: the step's order and overlap (engine.py), any family, scheduling policy, loop logic, the
caller's API.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from functools import partial
from typing import Any, Callable, Hashable, Mapping

from v2.contracts import FinishReason
from v2.runtime.device import Pending, Stream
from v2.runtime.encoding import EncodeStage
from v2.runtime.family import EngineFamily
from v2.runtime.groups import GroupSharing
from v2.runtime.handles import Dispatcher
from v2.runtime.paged_loops import PagedLoops
from v2.runtime.publishing import publish
from v2.runtime.records import RequestRecord
from v2.runtime.scheduler import Batch, admissible
from v2.runtime.slots import SlotPool
from v2.runtime.weight_updates import UpdateGate


class Requests:
    def __init__(self, family: EngineFamily, stream: Stream, kv: PagedLoops | None, encoding: EncodeStage,
                 pools: Mapping[str, SlotPool], groups: GroupSharing, gate: UpdateGate, cond: threading.Condition,
                 results: Dispatcher) -> None:
        self.family, self.stream, self.kv, self.encoding = family, stream, kv, encoding
        self.pools, self.groups, self.gate, self.cond, self.results = pools, groups, gate, cond, results
        self.graph = family.graph
        self.waiting: deque[RequestRecord] = deque()
        self.running: dict[int, RequestRecord] = {}
        self.cancels: set[int] = set()
        self.deadlines: dict[int, float] = {}  # request id -> when it times out (perf_counter), if it has one
        # open requests: new input to hand to them (ids), and when each times out waiting for input
        self.inputs: set[int] = set()
        self.idle: dict[int, tuple[float, float]] = {}  # request id -> (deadline, the idle timeout in s)
        self.changes = 0  # admissions and ends so far (a step that changes nothing else may wait for news)
        # state changes queued on the stream (with the request they belong to), checked at each read
        self.state_calls: list[tuple[int | None, Pending[Any]]] = []
        self._owner: int | None = None  # the request whose loop code `guard` runs now

    def launch_state(self, work: Callable[[], Any]) -> None:
        """Queue a state change on the stream (a slot's settings, block tables, a fork, fresh codec state).
        Made inside `guard`, it belongs to that request: if it fails, that request fails (now, or when the
        engine next reads); otherwise its failure is the engine's."""
        pending = self.stream.launch(work)
        if pending.ready and pending.error is not None:
            raise pending.error
        self.state_calls.append((self._owner, pending))

    def check_state_calls(self) -> None:
        """What queued state changes raised: a request's fails that request; another is the engine's fault."""
        if not self.state_calls:
            return
        calls, self.state_calls = self.state_calls, []
        for owner, call in calls:
            if call.error is None:
                continue
            if owner is None:
                raise call.error
            self.fail_id(owner, f"{type(call.error).__name__}: {call.error}")

    # ----- lifecycle -------------------------------------------------------------------------------
    def admit(self) -> None:
        """Preempted requests get their KV back first (oldest first); then waiting requests, in order, while
        slots and KV blocks for their prompts (what the prefix cache lacks) last."""
        kv = self.kv
        if kv is not None:
            kv.set_weights(self.gate.version)  # new weights invalidate the prefix cache
            if not kv.resume(self.running):
                return
        if not self.waiting:  # (only the engine thread fills it, when it takes what callers posted)
            return
        needs, fits = self.family.needs, (kv.fits if kv is not None else lambda r: True)
        while True:
            with self.cond:
                free = {name: pool.free_count for name, pool in self.pools.items()}
                batch = admissible(self.waiting, group=lambda r: r.group, needs=lambda r: needs(r).slots,
                                   free=free, fits=fits)
                if not batch:
                    return
                for r in batch:
                    self.waiting.remove(r)
                    self.running[r.id] = r
                self.changes += len(batch)
            for r in batch:
                r.admitted = time.perf_counter()
                self.guard(r, partial(self.start, r))
            head = batch[0]
            if head.group is not None:
                self.groups.admitted(head.group)

    def start(self, req: RequestRecord) -> None:
        """Slots for the request; its loops' states (made by its family); KV blocks for its prompt; its device
        state (settings, fresh codec state)."""
        req.version = self.gate.version
        need = self.family.needs(req)
        if self.kv is not None:
            for name, rows in ((self.kv.first.name, need.kv_rows), *need.loop_rows.items()):
                most = self.kv.by_name[name].max_rows
                if rows > most:
                    raise RuntimeError(f"needs {rows} KV rows in loop {name!r}; a request may hold {most}")
        group = req.group
        leader = group.members[0] if group is not None and group.members[0] != req.id and not group.shared else None
        with self.cond:
            for pool, n in need.slots.items():
                if n:
                    req.slots[pool] = self.pools[pool].allocate(req.id)
        req.states = self.family.start(req, dict(req.slots), leader)
        if self.kv is not None and leader is None:  # a group member shares its leader's blocks instead
            self.kv.first.admit(req)
        self.family.admitted(req)

    def apply_cancels(self) -> None:
        if not self.cancels:  # (only the engine thread adds to it: no lock to see it empty)
            return
        with self.cond:
            cancels, self.cancels = self.cancels, set()
            waiting = [r for r in self.waiting if r.id in cancels]
            for r in waiting:
                self.waiting.remove(r)
        for req in waiting:
            self.finish(req, FinishReason.ABORT)
        for rid in cancels:
            if rid in self.running:
                self.finish(self.running[rid], FinishReason.ABORT)

    def expire(self) -> None:
        """End every request past its deadline (`timeout` seconds after submit), waiting or running, and every
        open request that got no input for its idle timeout."""
        if not self.deadlines and not self.idle:
            return
        now = time.perf_counter()
        with self.cond:
            late = [r for r in (*self.waiting, *self.running.values())
                    if self.deadlines.get(r.id, now) < now or self.idle.get(r.id, (now, 0.0))[0] < now]
            idle = {r.id: self.idle[r.id][1] for r in late if r.id in self.idle and self.deadlines.get(r.id, now) >= now}
            for r in late:
                if r in self.waiting:
                    self.waiting.remove(r)
        for r in late:
            r.error = (f"text: no text arrived for {idle[r.id]:g} s (the card's input_idle_timeout_s); the request "
                       "was ended" if r.id in idle else f"timeout: not finished within {r.request.timeout} s of submit")
            self.finish(r, FinishReason.ABORT)

    def next_deadline(self) -> float | None:
        """The soonest deadline (perf_counter) of any request, timeouts and idle timeouts (the caller holds the lock)."""
        times = [*self.deadlines.values(), *(d for d, _ in self.idle.values())]
        return min(times) if times else None

    def apply_inputs(self, settle: Callable[[RequestRecord], None]) -> None:
        """Hand new input to the open requests that got some: a running one settles (its waiting loop asks its
        family for the input); a waiting one may now have its first prompt (then it is admissible)."""
        if not self.inputs:  # (only the engine thread adds to it: no lock to see it empty)
            return
        with self.cond:
            ids, self.inputs = self.inputs, set()
            waiting = [r for r in self.waiting if r.id in ids and r.unprompted]
        for rid in ids:
            req = self.running.get(rid)
            if req is not None and not req.ended:
                self.guard(req, partial(settle, req))
        for req in waiting:
            if req.front is not None and req.front.finish is None:
                continue  # its prompt is laid out once its references are encoded (`encoded`)
            try:
                rows = self.family.more_input(req, None)
            except Exception as e:  # its family could not lay the prompt out: it ends, nothing else does
                self.fail_waiting(req, f"{type(e).__name__}: {e}")
                continue
            with self.cond:
                req.rows, req.unprompted = rows, rows is None
            self.wordless(req)

    def wordless(self, req: RequestRecord) -> None:
        """An open request whose input ended before it gave a first prompt (no words at all) ends, with nothing
        to say: `stop`, no audio."""
        if req.unprompted and req.input_ended and (req.front is None or req.front.finish is not None):
            with self.cond:
                if req in self.waiting:
                    self.waiting.remove(req)
            self.finish(req, FinishReason.STOP)

    def guard(self, req: RequestRecord, work: Callable[[], None]) -> None:
        """Run one request's loop code; an exception fails that request alone (so does a failure of the
        device state changes it queues)."""
        owner, self._owner = self._owner, req.id
        try:
            work()
        except Exception as e:
            self.fail(req, e)
        finally:
            self._owner = owner

    def fail(self, req: RequestRecord, error: BaseException | str) -> None:
        """The one way a request fails: it ends with ERROR and the message."""
        if self.running.get(req.id) is req:
            req.error = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
            self.finish(req, FinishReason.ERROR)

    def fail_batch(self, batch: Batch, error: BaseException, *, read: bool) -> None:
        """A batched call failed: every request in it fails, and the members that took a group leader's
        prompt from that prefill. `read`: it failed on the device (else its host half failed before launch);
        a row its loop no longer waits for (a frame past a stop, work from before a preemption or of an
        ended segment) fails nobody."""
        message = f"{getattr(batch.kind, 'value', batch.kind)} failed: {type(error).__name__}: {error}"
        specs = self.graph.specs
        first = self.kv.first.name if self.kv is not None else None
        for plan in batch.plans:
            if plan.loop == first and batch.kind == self.kv.first.prefill:  # type: ignore[union-attr]
                for member in self.groups.prefill_read(plan, failed=True):
                    self.fail(member, message)  # it took the leader's prompt
            req = self.running.get(plan.request_id)
            spec = specs.get(plan.loop)
            if read and req is not None and spec is not None and not spec.loop.expects(req.states[plan.loop], plan):
                continue
            self.fail_id(plan.request_id, message)

    def encoded(self, req: RequestRecord) -> None:
        """A waiting request's front work is done: its family lays out its prompt (it is admissible; an open
        request: once its input gives one)."""
        rows = self.family.encoded(req)
        if req.unprompted:
            req.unprompted = rows is None
        req.rows = rows
        self.wordless(req)

    def fail_id(self, rid: int, message: str) -> None:
        """Fail a running request, a waiting one (its encode failed) or an encode job."""
        if rid in self.running:
            self.fail(self.running[rid], message)
            return
        if self.encoding.fail(rid, message):
            return
        with self.cond:
            req = next((r for r in self.waiting if r.id == rid), None)
        if req is not None:
            self.fail_waiting(req, message)

    def fail_waiting(self, req: RequestRecord, message: str) -> None:
        with self.cond:
            if req in self.waiting:
                self.waiting.remove(req)
        req.error = message
        self.finish(req, FinishReason.ERROR)

    def release(self, req: RequestRecord, pool: str) -> None:
        slot = req.slots.pop(pool, None)
        if slot is not None:
            kv = self.kv.by_pool.get(pool) if self.kv is not None else None
            if kv is not None:
                kv.release(req)  # its blocks in that loop's pool (prompt blocks stay cached until evicted)
            with self.cond:
                self.pools[pool].release(slot, req.id)

    def finish(self, req: RequestRecord, reason: FinishReason) -> None:
        """End a request exactly once: free its slots, build its result, wake its consumers. Its work still
        on the device is dropped when read (nothing reads a request that is no longer running)."""
        if req.ended:
            return
        req.ended = True
        with self.cond:
            self.changes += 1
            self.running.pop(req.id, None)
            self.deadlines.pop(req.id, None)
            self.idle.pop(req.id, None)
            self.inputs.discard(req.id)
            self.encoding.release(req.front)  # an encode cut short gives its slots back
        for pool in list(req.slots):
            self.release(req, pool)
        outputs: dict[Hashable, Any] | None
        try:
            outputs = {name: self.graph.specs[name].loop.finalize(state) for name, state in req.states.items()}
        except Exception as e:  # the request still ends, as an error
            outputs = None
            req.error, reason = f"finalize failed: {type(e).__name__}: {e}", FinishReason.ERROR
        now = time.perf_counter()
        self.results.post(lambda: publish(self.family, req, outputs, reason, now))

    def stats(self) -> dict[str, Any]:
        """The queues' counters (the caller holds the lock)."""
        kv = self.kv
        return {"waiting": len(self.waiting), "running": len(self.running),
                **{f"{name}_slots_in_use": pool.in_use for name, pool in self.pools.items()},
                **(kv.stats() if kv is not None else {}),
                "kv_preempted": kv.preempted_count(self.running.values()) if kv is not None else 0,
                "shared_prefills": self.groups.shared, "weight_version": self.gate.version,
                "encoding": self.encoding.pending}
