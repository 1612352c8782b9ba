"""The engine thread: every request's work as batched steps, the host half of step N+1 overlapping the device
half of step N.

Owns: the request lifecycle on the engine side (waiting -> admitted with a KV slot and a codec slot ->
running -> finished, cancelled or failed, every slot released exactly once), the step and its order:
collect (every running request's next plans, KV blocks for their writes, encodes) -> launch (schedule;
each batch's host half, then its device half on the stream; the loops told what went) -> scatter (read the
oldest step still on the device; each row back to its loop; chunks delivered; requests settled). On an
asynchronous stream (`depth` 1) the step launched last stays on the device while the one before it is read,
so the device never waits for the host; on a CPU (`depth` 0) each step is read at once. Also: weight
updates between requests on an idle device, deadlines, cancels, and containment: every per-request failure
goes through `_fail`, a failed batch fails only its requests.
Must not know: model internals (executors.py), batching policy (scheduler.py), loop logic (loops/), the
caller's API (runtime.py).
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
from v2.loops.ar_decode import ARDecodeLoop
from v2.loops.encode import EncodeLoop
from v2.loops.vocoder import VocoderLoop
from v2.prepare import build_rows
from v2.runtime import weight_updates
from v2.runtime.device import Pending, Stream, default_stream
from v2.runtime.encoding import EncodeExecutor, EncodeStage
from v2.runtime.executors import ARExecutor, CodecExecutor, FrameBatch, OnStream
from v2.runtime.groups import GroupSharing
from v2.runtime.handles import Dispatcher
from v2.runtime.kv import RequestKV, pool_blocks
from v2.runtime.records import RequestRecord
from v2.runtime.results import publish
from v2.runtime.scheduler import Batch, schedule
from v2.runtime.segments import next_segment
from v2.runtime.slots import SlotPool


@dataclass
class InFlight:
    """A launched step: its batches with each one's device result, and their copy to the host."""

    batches: list[tuple[Batch, Pending[Any]]]
    host: Pending[list[Any]]


class Engine:
    def __init__(self, card: ModelCard, model: Any, codec: Any, tokenizer: Any, encoder: Any, *, graphs: bool,
                 stream: Stream | None) -> None:
        ar, voc, enc = card.loops.ar_decode, card.loops.vocoder, card.loops.encode
        self.card, self.model, self.codec, self.tokenizer, self.encoder = card, model, codec, tokenizer, encoder
        self.stream = stream or default_stream(model.device)
        self.ar_loop, self.voc_loop = ARDecodeLoop(ar), VocoderLoop(voc)
        self.ar_exec = ARExecutor(model, num_slots=ar.max_running, max_len=ar.max_prompt_rows + ar.max_frames,
                                  batch_buckets=ar.batch_buckets, graphs=graphs, num_blocks=pool_blocks(ar, model),
                                  block_size=ar.block_size)
        self._state_calls: list[Pending[Any]] = []  # state changes queued on the stream, checked at each read
        self.ar_calls = OnStream(self.ar_exec, self._launch_state)
        self.kv = RequestKV.build(ar, self.ar_calls, model.cfg.ids.audio_assistant_slot)  # paged KV: blocks, cache
        self.codec_exec = CodecExecutor(codec, num_slots=voc.max_streams, batch_buckets=voc.batch_buckets,
                                        frame_buckets=voc.frame_buckets, graphs=graphs)
        self.pools = {"kv": SlotPool("kv", ar.max_running), "codec": SlotPool("codec", voc.max_streams),
                      "encode": SlotPool("encode", enc.max_streams)}
        self._buckets = {WorkUnitKind.AR_FRAME: ar.batch_buckets, WorkUnitKind.AUDIO_CHUNK: voc.batch_buckets}
        self._encoding = EncodeStage(EncodeLoop(enc.chunk_frames), self.pools["encode"],
                                     EncodeExecutor(encoder, enc.max_streams) if encoder is not None else None,
                                     self._launch_state)
        self._cond = threading.Condition()
        self._results = Dispatcher("v2-results")     # publishes results: runs no user code
        self._callbacks = Dispatcher("v2-callbacks")  # runs done callbacks: user code
        self._waiting: deque[RequestRecord] = deque()
        self._running: dict[int, RequestRecord] = {}
        self._cancels: set[int] = set()
        self._deadlines: dict[int, float] = {}  # request id -> when it times out (perf_counter), if it has one
        self._inflight: deque[InFlight] = deque()
        self._closed = False
        self._drain = False
        self._counters = {k: {"calls": 0, "rows": 0, "padded_rows": 0, "seconds": 0.0} for k in WorkUnitKind}
        self._steps = 0
        self._host_seconds = 0.0  # engine thread time in steps, less the waits for the device's results
        self._waited = 0.0
        self._gate = weight_updates.UpdateGate(self._cond)
        self._groups = GroupSharing()
        self._prefilled_rows = 0
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
        launched = self._launch(self._collect())
        if launched is not None:
            self._inflight.append(launched)
        keep = self.stream.depth if launched is not None else 0
        while len(self._inflight) > keep:
            self._scatter(self._inflight.popleft())
        self._groups.step(self._running, self.kv, self._guard)

    def _read_all(self) -> None:
        while self._inflight:
            self._scatter(self._inflight.popleft())
        self.stream.sync()

    def _launch_state(self, work: Callable[[], Any]) -> None:
        """Queue a state change on the stream (a slot's settings, block tables, a fork, fresh codec state)."""
        pending = self.stream.launch(work)
        if pending.ready and pending.error is not None:
            raise pending.error
        self._state_calls.append(pending)

    # ----- collect -> launch -> scatter ------------------------------------------------------------
    def _collect(self) -> list[WorkPlan]:
        """Every running request's next plans, KV blocks for their writes (may preempt), and encodes."""
        plans: list[WorkPlan] = []
        ar_next, voc_next = self.ar_loop.next, self.voc_loop.next
        for req in list(self._running.values()):
            try:
                plan = ar_next(req.ar)
                if plan is not None:
                    plans.append(plan)
                plan = voc_next(req.voc)
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

    def _launch(self, plans: list[WorkPlan]) -> InFlight | None:
        """Schedule the plans; per batch, the host half, then the device half on the stream; the loops
        learn what went. None when nothing runs."""
        if not plans:
            return None
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
                self._fail_batch(batch, e)
                continue
            launched.append((batch, self.stream.launch(work)))
            self._launched(batch)
            with self._cond:  # host time of the call (on a GPU: launch time; the read comes later)
                counter = self._counters[batch.kind]
                counter["calls"] += 1
                counter["rows"] += len(batch.plans)
                counter["padded_rows"] += batch.bucket
                counter["seconds"] += time.perf_counter() - start
        return InFlight(launched, self.stream.fetch([p for _, p in launched]))

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
        if batch.kind is WorkUnitKind.ENCODE:
            self._encoding.launched(batch.plans)
            return
        running = self._running
        if batch.kind is WorkUnitKind.AUDIO_CHUNK:
            for plan in batch.plans:
                self.voc_loop.launched(running[plan.request_id].voc, plan)
        elif batch.kind is WorkUnitKind.AR_FRAME:
            for plan in batch.plans:
                running[plan.request_id].ar.launched_frames = plan.payload.step + 1  # ARDecodeLoop.launched
        else:
            for plan in batch.plans:
                self.ar_loop.launched(running[plan.request_id].ar, plan)

    def _scatter(self, step: InFlight) -> None:
        """Read a launched step back: each batch's rows to the loops that planned them, then settle."""
        start = time.perf_counter()
        outcomes = step.host.wait()
        self._waited += time.perf_counter() - start
        calls, self._state_calls = self._state_calls, []
        for call in calls:  # done: everything launched before the step's copy has run
            if call.error is not None:
                raise call.error
        touched: dict[int, RequestRecord] = {}
        for (batch, _), out in zip(step.batches, outcomes):
            if isinstance(out, BaseException):
                self._fail_batch(batch, out)
            elif batch.kind is WorkUnitKind.ENCODE:
                assert self._encoding.executor is not None
                codes = self._encoding.executor.read(out, [p.payload for p in batch.plans])
                with self._cond:
                    self._encoding.scatter(batch.plans, codes, self._encoded, self._fail_id)
            elif batch.kind is WorkUnitKind.AR_FRAME:
                self._scatter_frames(batch, FrameBatch.read(out, len(batch.plans)), touched)
            elif batch.kind is WorkUnitKind.PREFILL:
                for plan in batch.plans:
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

    # ----- lifecycle -------------------------------------------------------------------------------
    def _admit(self) -> None:
        """Preempted requests get their KV back first (oldest first); then waiting requests, in order, while
        slots, codec streams and KV blocks for their prompts (what the prefix cache lacks) last."""
        self.kv.set_weights(self._gate.version)  # new weights invalidate the prefix cache
        if not self.kv.resume(self._running):
            return
        while True:
            with self._cond:
                head = next((r for r in self._waiting if r.ready), None)
                if head is None:
                    return
                batch = [r for r in self._waiting if r.group is head.group] if head.group else [head]
                audio = sum(r.request.decode_audio for r in batch)
                if (self.pools["kv"].free_count < len(batch) or self.pools["codec"].free_count < audio
                        or not self.kv.fits(head)):
                    return
                for r in batch:
                    self._waiting.remove(r)
                    self._running[r.id] = r
            for r in batch:
                r.admitted = time.perf_counter()
                self._guard(r, lambda r=r: self._start(r))
            if head.group is not None:
                self._groups.admitted(head.group)

    def _start(self, req: RequestRecord) -> None:
        audio = req.request.decode_audio
        req.version = self._gate.version
        req.ar = self.ar_loop.init(req.id, req.rows, max_frames=req.max_frames, min_frames=req.request.min_frames,
                                   segment_caps=tuple(s.max_frames for s in req.segments[1:]))
        req.voc = self.voc_loop.init(req.id, sample_rate=self.codec.sample_rate, enabled=audio)
        if req.group is not None and req.group.members[0] != req.id and not req.group.shared:
            req.ar.prefix_from = req.group.members[0]
        need = self.ar_loop.resources(req.ar, decode_audio=audio)
        if need.kv_rows > self.kv.max_rows:
            raise RuntimeError(f"needs {need.kv_rows} KV rows; a request may hold {self.kv.max_rows}")
        with self._cond:
            req.ar.slot = req.slots["kv"] = self.pools["kv"].allocate(req.id)
            if need.codec_stream:
                req.voc.slot = req.slots["codec"] = self.pools["codec"].allocate(req.id)
        if req.ar.prefix_from is None:  # a group member shares its leader's blocks instead
            self.kv.admit(req)
        self.ar_calls.admit(req.ar.slot, req.sampling, req.request.seed)
        if need.codec_stream:
            slot = req.voc.slot
            self._launch_state(lambda: self.codec_exec.admit(slot))

    def _apply_cancels(self) -> None:
        with self._cond:
            cancels, self._cancels = self._cancels, set()
            waiting = [r for r in self._waiting if r.id in cancels]
            for r in waiting:
                self._waiting.remove(r)
        for req in waiting:
            self._finish(req, FinishReason.ABORT)
        for rid in cancels:
            if rid in self._running:
                self._finish(self._running[rid], FinishReason.ABORT)

    def _expire(self) -> None:
        """End every request past its deadline (`timeout` seconds after submit), waiting or running."""
        if not self._deadlines:
            return
        now = time.perf_counter()
        with self._cond:
            late = [r for r in (*self._waiting, *self._running.values())
                    if self._deadlines.get(r.id, now) < now]
            for r in late:
                if r in self._waiting:
                    self._waiting.remove(r)
        for r in late:
            r.error = f"timeout: not finished within {r.request.timeout} s of submit"
            self._finish(r, FinishReason.ABORT)

    def _guard(self, req: RequestRecord, work: Callable[[], None]) -> None:
        """Run one request's loop code; an exception fails that request alone."""
        try:
            work()
        except Exception as e:
            self._fail(req, e)

    def _fail(self, req: RequestRecord, error: BaseException | str) -> None:
        """The one way a request fails: it ends with ERROR and the message."""
        if self._running.get(req.id) is req:
            req.error = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
            self._finish(req, FinishReason.ERROR)

    def _fail_batch(self, batch: Batch, error: BaseException) -> None:
        """A batched call failed: every request in it fails (and a group leader's prompt fails its members)."""
        message = f"{batch.kind.value} failed: {type(error).__name__}: {error}"
        for plan in batch.plans:
            req = self._running.get(plan.request_id)
            if req is not None and batch.kind is WorkUnitKind.PREFILL and req.group is not None:
                for member in req.group.members:
                    m = self._running.get(member)
                    if m is not None and m is not req and m.ar is not None and m.ar.prefix_from is None:
                        self._fail(m, message)  # it took the leader's prompt
            self._fail_id(plan.request_id, message)

    def _encoded(self, req: RequestRecord) -> None:
        """A waiting request's recordings are encoded: lay its prompt out with the real codes (it is admissible)."""
        assert req.enc is not None and req.enc.codes is not None
        references = tuple(torch.from_numpy(c) for c in req.enc.codes)
        req.rows = build_rows(req.request, self.model.cfg, self.tokenizer, references, req.transcript,
                              req.segments[0].text if req.segments else None)

    def _fail_id(self, rid: int, message: str) -> None:
        """Fail a running request, a waiting one (its encode failed) or an encode job."""
        if rid in self._running:
            self._fail(self._running[rid], message)
            return
        if self._encoding.fail(rid, message):
            return
        with self._cond:
            req = next((r for r in self._waiting if r.id == rid), None)
            if req is not None:
                self._waiting.remove(req)
        if req is not None:
            req.error = message
            self._finish(req, FinishReason.ERROR)

    def _release(self, req: RequestRecord, pool: str) -> None:
        slot = req.slots.pop(pool, None)
        if slot is not None:
            if pool == "kv":
                self.kv.release(req)  # its blocks (prompt blocks stay cached until evicted)
            with self._cond:
                self.pools[pool].release(slot, req.id)

    def _finish(self, req: RequestRecord, reason: FinishReason) -> None:
        """End a request exactly once: free its slots, build its result, wake its consumers. Its work still
        on the device is dropped when read (nothing reads a request that is no longer running)."""
        if req.ended:
            return
        req.ended = True
        with self._cond:
            self._running.pop(req.id, None)
            self._deadlines.pop(req.id, None)
            self._encoding.release(req.enc)  # an encode cut short gives its slots back
        for pool in list(req.slots):
            self._release(req, pool)
        try:
            ar = self.ar_loop.finalize(req.ar) if req.ar else None
            voc = self.voc_loop.finalize(req.voc) if req.voc else None
        except Exception as e:  # the request still ends, as an error
            ar = voc = None
            req.error, reason = f"finalize failed: {type(e).__name__}: {e}", FinishReason.ERROR
        now = time.perf_counter()
        self._results.post(lambda: publish(req, ar, voc, reason, now, channels=self.codec.cfg.channels,
                                           sample_rate=self.codec.sample_rate))

    def _stats(self) -> dict[str, Any]:
        """The engine's counters (the caller holds the lock)."""
        kinds = {k.value: dict(c, mean_batch=(c["rows"] / c["calls"] if c["calls"] else 0.0))
                 for k, c in self._counters.items()}
        graphs = {"ar_frame": self.ar_exec.graphs.stats(), "audio_chunk": self.codec_exec.graphs.stats()}
        return {"steps": self._steps, "host_seconds": self._host_seconds, "kinds": kinds, "waiting": len(self._waiting), "running": len(self._running),
                "kv_slots_in_use": self.pools["kv"].in_use, "codec_slots_in_use": self.pools["codec"].in_use,
                **self.kv.stats(), "kv_preempted": sum(bool(r.ar and r.ar.paused) for r in self._running.values()),
                "graphs": graphs, "shared_prefills": self._groups.shared, "prefilled_rows": self._prefilled_rows,
                "weight_version": self._gate.version, "encoding": self._encoding.pending,
                "encode_slots_in_use": self.pools["encode"].in_use, "steps_in_flight": len(self._inflight),
                "device_depth": self.stream.depth}
