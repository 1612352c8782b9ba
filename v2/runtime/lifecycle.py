"""What the engine holds, and how requests enter and leave it.

Owns: the engine's state (executors, the device stream, loops, slot pools, paged KV, the encode stage,
queues of waiting and running requests, cancels, deadlines, counters, the weight-update gate) and the
request lifecycle on the engine side: admission (preempted requests first, then waiting ones in order while
slots, codec streams and KV blocks last; a group all together), starting a request's loops, cancels,
deadlines, the one way a request fails (`_fail`: ERROR with the message; a failed batch fails only its
requests, and a group leader's failed prompt fails the members that took it), and the end of a request
(`_finish`: exactly once; every slot released; its result published). Its work still on the device is
dropped when read, since nothing reads a request that is no longer running.
Must not know: the step's order and overlap (engine.py), model internals, scheduling policy, loop logic,
the caller's API.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable

import torch

from v2.card import ModelCard
from v2.contracts import FinishReason, LoopKind, WorkUnitKind
from v2.families.moss_tts_local.ar_decode import ARDecodeLoop
from v2.families.moss_tts_local.encode import EncodeLoop
from v2.families.moss_tts_local.vocoder import VocoderLoop
from v2.families.moss_tts_local.prepare import build_rows
from v2.runtime import weight_updates
from v2.runtime.device import Pending, Stream, default_stream
from v2.runtime.encoding import EncodeExecutor, EncodeStage
from v2.families.moss_tts_local.codec_executor import CodecExecutor
from v2.families.moss_tts_local.ar_executor import ARExecutor, OnStream
from v2.runtime.groups import GroupSharing
from v2.runtime.handles import Dispatcher
from v2.runtime.kv import RequestKV, pool_blocks
from v2.runtime.records import RequestRecord
from v2.families.moss_tts_local.results import publish
from v2.runtime.scheduler import Batch
from v2.runtime.slots import SlotPool


class Lifecycle:
    def __init__(self, card: ModelCard, model: Any, codec: Any, tokenizer: Any, encoder: Any, *, graphs: bool,
                 stream: Stream | None) -> None:
        ar, voc, enc = card.loops.ar_decode, card.loops.vocoder, card.loops.encode
        self.card, self.model, self.codec, self.tokenizer, self.encoder = card, model, codec, tokenizer, encoder
        self.stream = stream or default_stream(model.device)
        self.ar_loop, self.voc_loop = ARDecodeLoop(ar), VocoderLoop(voc)
        self.ar_exec = ARExecutor(model, num_slots=ar.max_running, max_len=ar.max_prompt_rows + ar.max_frames,
                                  batch_buckets=ar.batch_buckets, graphs=graphs, num_blocks=pool_blocks(ar, model),
                                  block_size=ar.block_size)
        # state changes queued on the stream (with the request they belong to), checked at each read
        self._state_calls: list[tuple[int | None, Pending[Any]]] = []
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
        self._closed = False
        self._drain = False
        self._counters = {k: {"calls": 0, "rows": 0, "padded_rows": 0, "seconds": 0.0} for k in WorkUnitKind}
        self._steps = 0
        self._host_seconds = 0.0  # engine thread time in steps, less the waits for the device's results
        self._waited = 0.0
        self._gate = weight_updates.UpdateGate(self._cond)
        self._groups = GroupSharing()
        self._owner: int | None = None  # the request whose loop code `_guard` runs now
        self._prefilled_rows = 0

    def _launch_state(self, work: Callable[[], Any]) -> None:
        """Queue a state change on the stream (a slot's settings, block tables, a fork, fresh codec state).
        Made inside `_guard`, it belongs to that request: if it fails, that request fails (now, or when the
        engine next reads); otherwise its failure is the engine's."""
        pending = self.stream.launch(work)
        if pending.ready and pending.error is not None:
            raise pending.error
        self._state_calls.append((self._owner, pending))

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
        """Run one request's loop code; an exception fails that request alone (so does a failure of the
        device state changes it queues)."""
        owner, self._owner = self._owner, req.id
        try:
            work()
        except Exception as e:
            self._fail(req, e)
        finally:
            self._owner = owner

    def _fail(self, req: RequestRecord, error: BaseException | str) -> None:
        """The one way a request fails: it ends with ERROR and the message."""
        if self._running.get(req.id) is req:
            req.error = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
            self._finish(req, FinishReason.ERROR)

    def _fail_batch(self, batch: Batch, error: BaseException, *, read: bool) -> None:
        """A batched call failed: every request in it fails, and the members that took a group leader's
        prompt from that prefill. `read`: it failed on the device (else its host half failed before launch);
        a row its loop no longer waits for (a frame past a stop, work from before a preemption or of an
        ended segment) fails nobody."""
        message = f"{batch.kind.value} failed: {type(error).__name__}: {error}"
        for plan in batch.plans:
            if batch.kind is WorkUnitKind.PREFILL:
                for member in self._groups.prefill_read(plan, failed=True):
                    self._fail(member, message)  # it took the leader's prompt
            req = self._running.get(plan.request_id)
            if read and req is not None and plan.loop is LoopKind.AR_DECODE and not self.ar_loop.expects(req.ar, plan):
                continue
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
                "encode_slots_in_use": self.pools["encode"].in_use}
