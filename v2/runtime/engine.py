"""The engine thread: every request's work as batched steps, the host half of step N+1 overlapping the device
half of step N.

Owns: the engine thread and the step, in this order:
collect (every running request's next plans, KV blocks for their writes, encodes) -> launch (schedule;
each batch's host half, then its device half on the stream; the loops told what went) -> scatter (read the
oldest step still on the device; each row back to its loop; chunks delivered; requests settled). On an
asynchronous stream (`depth` 1) the step launched last stays on the device while the one before it is read,
so the device never waits for the host; on a CPU (`depth` 0) each step is read at once. Also: a weight
update applied between steps on an idle device, a fault in the engine's own code ending what is in flight,
and the engine's host time per step.
Must not know: model internals (executors.py), batching policy (scheduler.py), loop logic (loops/), how
requests are admitted and ended (lifecycle.py), the caller's API (runtime.py).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import torch

from v2.card import ModelCard
from v2.contracts import FinishReason, WorkPlan, WorkUnitKind
from v2.runtime.device import Pending, Stream
from v2.families.moss_tts_local.ar_executor import FrameBatch
from v2.runtime.lifecycle import Lifecycle
from v2.runtime.records import RequestRecord
from v2.runtime.scheduler import Batch, schedule
from v2.families.moss_tts_local.segments import next_segment


@dataclass
class InFlight:
    """A launched step: its batches with each one's device result, and their copy to the host."""

    batches: list[tuple[Batch, Pending[Any]]]
    host: Pending[list[Any]]


class Engine(Lifecycle):
    """The engine thread over the state and lifecycle of `Lifecycle`."""

    def __init__(self, card: ModelCard, model: Any, codec: Any, tokenizer: Any, encoder: Any, *, graphs: bool,
                 stream: Stream | None) -> None:
        super().__init__(card, model, codec, tokenizer, encoder, graphs=graphs, stream=stream)
        self._inflight: deque[InFlight] = deque()
        self._thread = threading.Thread(target=self._serve, name="v2-engine", daemon=True)

    # ----- the loop --------------------------------------------------------------------------------
    def _serve(self) -> None:
        threads = self.card.runtime.cpu_threads
        if threads is not None and self.model.device.type == "cpu":
            torch.set_num_threads(threads)  # this thread's intra-op threads (OpenMP settings are per thread)
        if self.model.device.type == "cuda":
            torch.cuda.set_device(self.model.device)  # the current device is per thread: kernels, copies, replays
        busy = lambda: (self._waiting or self._running or self._cancels or self._gate.pending  # noqa: E731
                        or self._encoding.jobs or self._inflight)
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or busy())
                if self._closed and not self._drain:
                    self._cancels.update(r.id for r in (*self._waiting, *self._running.values()))
                    self._encoding.fail_all("the runtime is closed")
                idle = not busy()
            if self._closed and idle:
                break
            try:
                self._step()
            except Exception as e:  # a fault in the engine's own code: end what is in flight, keep serving
                self._fail_everything(f"engine step failed: {type(e).__name__}: {e}")
        self.stream.close()
        self._results.post(self._callbacks.stop)  # after the last result: its done callbacks, then the end
        self._results.stop()

    def _fail_everything(self, message: str) -> None:
        with self._cond:
            waiting, self._waiting = list(self._waiting), deque()
            self._encoding.fail_all(message)
        for req in (*waiting, *list(self._running.values())):
            req.error = message
            self._finish(req, FinishReason.ERROR)
        try:  # what is still on the device belongs to requests that just ended
            self.stream.sync()
        finally:
            self._inflight.clear()
            self._state_calls.clear()
            self._groups.clear()

    def _step(self) -> None:
        start, self._waited = time.perf_counter(), 0.0
        self._step_work()
        with self._cond:
            self._steps += 1
            self._host_seconds += time.perf_counter() - start - self._waited

    def _step_work(self) -> None:
        self._apply_cancels()
        self._expire()
        if self._gate.pending is not None:  # admit nothing until the update is applied, on an idle device
            self._read_all()
            self._gate.progress(self.model, self._running, lambda req: self._finish(req, FinishReason.ABORT))
        else:
            self._admit()
        launched = self._launch(self._collect())  # step N's prefills, frames and encodes go first
        keep = max(0, self.stream.depth - 1) if launched else 0
        while len(self._inflight) > keep:  # read step N - 1 while the device runs them
            self._scatter(self._inflight.popleft())
        launched += self._launch(self._collect_audio())  # chunks of the frames just read, in step N too
        if launched:
            self._inflight.append(InFlight(launched, self.stream.fetch([p for _, p in launched])))
        while len(self._inflight) > self.stream.depth:
            self._scatter(self._inflight.popleft())
        self._groups.step(self._running, self.kv, self._guard)

    def _read_all(self) -> None:
        """Read every step still on the device; then the device is idle."""
        while self._inflight:
            self._scatter(self._inflight.popleft())
        self.stream.sync()
        self._check_state_calls()

    def _check_state_calls(self) -> None:
        """What queued state changes raised: a request's fails that request; another is the engine's fault."""
        calls, self._state_calls = self._state_calls, []
        for owner, call in calls:
            if call.error is None:
                continue
            if owner is None:
                raise call.error
            self._fail_id(owner, f"{type(call.error).__name__}: {call.error}")

    # ----- collect -> launch -> scatter ------------------------------------------------------------
    def _collect(self) -> list[WorkPlan]:
        """Every running request's next AR plan, KV blocks for their writes (may preempt), and encodes."""
        plans: list[WorkPlan] = []
        ar_next = self.ar_loop.next
        for req in list(self._running.values()):
            try:
                plan = ar_next(req.ar)
                if plan is not None:
                    plans.append(plan)
            except Exception as e:  # one request's loop code fails that request alone
                self._fail(req, e)
        plans, preempted = self.kv.before_step(self._running, plans)  # KV blocks for every write
        for rid in preempted:
            req = self._running[rid]
            self.ar_loop.preempted(req.ar)
            self.kv.pause(req)
        self.kv.flush()
        with self._cond:
            plans.extend(self._encoding.plans())
        return plans

    def _collect_audio(self) -> list[WorkPlan]:
        """Every running request's due audio chunk (of the frames read so far)."""
        plans: list[WorkPlan] = []
        voc_next = self.voc_loop.next
        for req in list(self._running.values()):
            if req.voc.pending:
                try:
                    plan = voc_next(req.voc)
                    if plan is not None:
                        plans.append(plan)
                except Exception as e:
                    self._fail(req, e)
        return plans

    def _launch(self, plans: list[WorkPlan]) -> list[tuple[Batch, Pending[Any]]]:
        """Schedule the plans; per batch, the host half, then the device half on the stream; the loops
        learn what went. Returns each launched batch with its device result."""
        if not plans:
            return []
        prefill_rows = {p.request_id: int(p.payload.rows.shape[0]) for p in plans
                        if p.signature.kind is WorkUnitKind.PREFILL}
        batches = schedule(plans, prefill_budget=self.card.loops.ar_decode.prefill_chunk_rows,
                           prefill_rows=prefill_rows, buckets=self._buckets)
        launched = []
        for batch in batches:
            start = time.perf_counter()
            try:
                work = self._device_work(batch)
            except Exception as e:  # its host half failed: only its requests
                self._fail_batch(batch, e, read=False)
                continue
            launched.append((batch, self.stream.launch(work)))
            self._launched(batch)
            with self._cond:  # host time of the call (on a GPU: launch time; the read comes later)
                counter = self._counters[batch.kind]
                counter["calls"] += 1
                counter["rows"] += len(batch.plans)
                counter["padded_rows"] += batch.bucket
                counter["seconds"] += time.perf_counter() - start
        return launched

    def _device_work(self, batch: Batch) -> Callable[[], Any]:
        """The batch's host half now; its device half as a callable for the stream."""
        payloads = [p.payload for p in batch.plans]
        if batch.kind is WorkUnitKind.AR_FRAME:
            frames = self.ar_exec.prepare(payloads, batch.bucket)
            return lambda: self.ar_exec.launch(frames)
        if batch.kind is WorkUnitKind.AUDIO_CHUNK:
            chunks = self.codec_exec.prepare(payloads, batch.bucket, batch.plans[0].signature.bucket)
            return lambda: self.codec_exec.launch(chunks)
        if batch.kind is WorkUnitKind.PREFILL:
            with self._cond:
                self._prefilled_rows += sum(int(p.rows.shape[0]) for p in payloads)
            return lambda: self.ar_exec.prefill(payloads)
        executor = self._encoding.executor
        assert executor is not None
        return lambda: executor.encode(payloads)

    def _launched(self, batch: Batch) -> None:
        """Tell the loops what went to the device (a request ended by an earlier batch's failure is skipped)."""
        if batch.kind is WorkUnitKind.ENCODE:
            self._encoding.launched(batch.plans)
            return
        running = self._running
        for plan in batch.plans:
            req = running.get(plan.request_id)
            if req is None:
                continue
            if batch.kind is WorkUnitKind.AUDIO_CHUNK:
                self.voc_loop.launched(req.voc, plan)
            else:
                self.ar_loop.launched(req.ar, plan)

    def _scatter(self, step: InFlight) -> None:
        """Read a launched step back: each batch's rows to the loops that planned them, then settle."""
        start = time.perf_counter()
        outcomes = step.host.wait()
        self._waited += time.perf_counter() - start
        self._check_state_calls()  # queued before this step's copy or the next step's work: done, or nearly
        touched: dict[int, RequestRecord] = {}
        for (batch, _), out in zip(step.batches, outcomes):
            if isinstance(out, BaseException):
                self._fail_batch(batch, out, read=True)
            elif batch.kind is WorkUnitKind.ENCODE:
                assert self._encoding.executor is not None
                codes = self._encoding.executor.read(out, [p.payload for p in batch.plans])
                with self._cond:
                    self._encoding.scatter(batch.plans, codes, self._encoded, self._fail_id)
            elif batch.kind is WorkUnitKind.AR_FRAME:
                self._scatter_frames(batch, FrameBatch.read(out, len(batch.plans)), touched)
            elif batch.kind is WorkUnitKind.PREFILL:
                for plan in batch.plans:
                    self._groups.prefill_read(plan, failed=False)
                    req = self._running.get(plan.request_id)
                    if req is not None:
                        self._guard(req, lambda req=req, plan=plan: self._advance_prefill(req, plan, touched))
            else:
                self._scatter_chunks(batch, self.codec_exec.read(out, [p.payload for p in batch.plans]), touched)
        for req in touched.values():
            if not req.ended:
                self._guard(req, lambda req=req: self._settle(req))

    def _advance_prefill(self, req: RequestRecord, plan: WorkPlan, touched: dict[int, RequestRecord]) -> None:
        if self.ar_loop.advance(req.ar, plan, None):
            touched[req.id] = req

    def _scatter_frames(self, batch: Batch, rows: FrameBatch, touched: dict[int, RequestRecord]) -> None:
        running, advance, feed = self._running, self.ar_loop.advance, self.voc_loop.feed
        for i, plan in enumerate(batch.plans):
            req = running.get(plan.request_id)
            if req is None:
                continue  # ended meanwhile: its frame is dropped
            ar, voc = req.ar, req.voc
            try:
                if not advance(ar, plan, rows.row(i)):
                    continue
                feed(voc, ar.fresh, ar.finish)
            except Exception as e:
                self._fail(req, e)
                continue
            if ar.finish is not None or ar.switching or voc.finish is not None:
                touched[req.id] = req

    def _scatter_chunks(self, batch: Batch, chunks: Any, touched: dict[int, RequestRecord]) -> None:
        for i, plan in enumerate(batch.plans):
            req = self._running.get(plan.request_id)
            if req is None:
                continue
            try:
                self.voc_loop.advance(req.voc, plan, chunks.audio(i))
            except Exception as e:
                self._fail(req, e)
                continue
            if req.first_audio is None:
                req.first_audio = time.perf_counter()
            if req.request.stream and not req.handle.deliver(req.voc.fresh):
                req.error = (f"stream: a subscriber fell more than {self.card.loops.ar_decode.max_buffered_chunks} "
                             "chunks behind; the request was aborted")
                self._finish(req, FinishReason.ABORT)
            elif req.voc.finish is not None:
                touched[req.id] = req

    def _settle(self, req: RequestRecord) -> None:
        """A request whose loops moved on: computed prompt blocks into the prefix cache, the next segment,
        its KV slot back once the AR loop ends, and its end once the vocoder loop is done."""
        assert req.ar is not None and req.voc is not None
        self.kv.computed([req])
        if req.ar.switching:  # long text: the next segment's prompt, prefilled once KV blocks are given
            next_segment(req, self.ar_loop, self.kv, self.ar_calls)
        if req.ar.finish is not None:
            self._release(req, "kv")
        if req.voc.finish is not None:
            self._finish(req, req.voc.finish)

    def _stats(self) -> dict[str, Any]:
        return {**super()._stats(), "steps_in_flight": len(self._inflight), "device_depth": self.stream.depth}
