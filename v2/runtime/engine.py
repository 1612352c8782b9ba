"""The runtime: `submit()` from any thread, one engine thread that runs every request's work as batched steps.

Owns: the request lifecycle (waiting -> admitted with a KV slot and a codec slot -> running -> finished,
cancelled or failed, every slot released exactly once), the engine step (admit; collect every running
request's plans; schedule; run each batch as one call; one device-to-host copy; scatter rows back into
the loops; deliver chunks; finish), groups that share one prefill, weight updates between requests
(`wait` or `abort`), containment of failures to the requests they touch, and `stats()`.
Must not know: model internals (executors.py), batching policy (scheduler.py), loop logic (loops/).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from typing import Any

import numpy as np
import torch

from v2.card import DEFAULT_CARD, ModelCard, build_codec, build_encoder, build_model, build_tokenizer, load_card
from v2.contracts import FinishReason, LoopKind, StepResult, WorkPlan, WorkUnitKind
from v2.loops.ar_decode import ARDecodeLoop, FrameRow
from v2.loops.encode import EncodeLoop
from v2.loops.vocoder import VocoderLoop
from v2.prepare import CodecSpec, build_rows, prepare, prepare_recording
from v2.request import OverloadedError, RequestError, SpeechRequest, parse_request
from v2.runtime import weight_updates
from v2.runtime.encoding import EncodeExecutor, EncodeJob, EncodeStage
from v2.runtime.executors import ARExecutor, CodecExecutor, to_host
from v2.runtime.kv import RequestKV, pool_blocks
from v2.runtime.results import publish
from v2.runtime.segments import next_segment
from v2.runtime.scheduler import Batch, schedule
from v2.runtime.slots import SlotPool
from v2.runtime.records import Group, RequestRecord, share_prefixes
from v2.runtime.handles import Dispatcher, SpeechHandle
from v2.runtime.voices import VoiceError, VoiceStore, default_directory


class Runtime:
    def __init__(self, card: ModelCard, model: Any, codec: Any, tokenizer: Any, *, graphs: bool = True,
                 encoder: Any = None, voices_dir: str | None = None) -> None:
        """`graphs`: capture and replay CUDA graphs for AR_FRAME and AUDIO_CHUNK steps (on CUDA only).
        `encoder`: the codec's encoder (reference audio -> codes); without it reference audio is refused.
        `voices_dir`: the voice store's directory (default: the card's, else the user's cache)."""
        ar, voc = card.loops.ar_decode, card.loops.vocoder
        self.card, self.model, self.codec, self.tokenizer, self.encoder = card, model, codec, tokenizer, encoder
        self.ar_loop, self.voc_loop = ARDecodeLoop(ar), VocoderLoop(voc)
        self.ar_exec = ARExecutor(model, num_slots=ar.max_running, max_len=ar.max_prompt_rows + ar.max_frames,
                                  batch_buckets=ar.batch_buckets, graphs=graphs, num_blocks=pool_blocks(ar, model),
                                  block_size=ar.block_size)
        self.kv = RequestKV.build(ar, self.ar_exec, model.cfg.ids.audio_assistant_slot)  # paged KV: blocks, cache
        self.codec_exec = CodecExecutor(codec, num_slots=voc.max_streams, batch_buckets=voc.batch_buckets,
                                        frame_buckets=voc.frame_buckets, graphs=graphs)
        self.pools = {"kv": SlotPool("kv", ar.max_running), "codec": SlotPool("codec", voc.max_streams)}
        self._buckets = {WorkUnitKind.AR_FRAME: ar.batch_buckets, WorkUnitKind.AUDIO_CHUNK: voc.batch_buckets}
        enc = card.loops.encode
        self.pools["encode"] = SlotPool("encode", enc.max_streams)
        self._codec_spec = CodecSpec(encoder.sample_rate, encoder.cfg.hop) if encoder is not None else None
        self._encoding = EncodeStage(EncodeLoop(enc.chunk_frames), self.pools["encode"],
                                     EncodeExecutor(encoder, enc.max_streams) if encoder is not None else None)
        self.voices = VoiceStore(voices_dir or card.runtime.voices_dir or default_directory(card.name),
                                 encode=self.encode_audio, width=model.cfg.n_vq, codebook_size=model.cfg.codebook_size)
        self._cond = threading.Condition()
        self._results = Dispatcher("v2-results")     # publishes results: runs no user code
        self._callbacks = Dispatcher("v2-callbacks")  # runs done callbacks: user code
        self._waiting: deque[RequestRecord] = deque()
        self._running: dict[int, RequestRecord] = {}
        self._cancels: set[int] = set()
        self._ids = itertools.count()
        self._closed = False
        self._drain = False
        self._counters = {k: {"calls": 0, "rows": 0, "padded_rows": 0, "seconds": 0.0} for k in WorkUnitKind}
        self._steps = 0
        self._gate = weight_updates.UpdateGate(self._cond)
        self._shared_prefills = 0
        self._prefilled_rows = 0
        self._thread = threading.Thread(target=self._serve, name="v2-engine", daemon=True)
        self._thread.start()

    @classmethod
    def from_card(cls, card: str | ModelCard = DEFAULT_CARD, *, checkpoint: str | None = None,
                  codec_checkpoint: str | None = None, device: str | None = None, dtype: torch.dtype | None = None,
                  graphs: bool = True, voices_dir: str | None = None) -> "Runtime":
        """`card`: a card name in cards/, a path, or a loaded card. Default device: CUDA when present."""
        card = card if isinstance(card, ModelCard) else load_card(card)
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        model = build_model(card, checkpoint=checkpoint, dtype=dtype, device=device)
        codec = build_codec(card, checkpoint=codec_checkpoint, dtype=dtype, device=device)
        encoder = (build_encoder(card, checkpoint=codec_checkpoint, dtype=dtype, device=device, decoder=codec)
                   if card.experts.vocoder.encoder else None)
        return cls(card, model, codec, build_tokenizer(card, checkpoint), graphs=graphs, encoder=encoder,
                   voices_dir=voices_dir)

    # ----- caller side -----------------------------------------------------------------------------
    def submit(self, request: SpeechRequest | dict[str, Any]) -> SpeechHandle:
        """Validate (errors name the field), queue, and return a handle at once."""
        return self.submit_many([request])[0]

    def submit_many(self, requests: list[SpeechRequest | dict[str, Any]], *, share_prompt: bool = False,
                    group_id: int = 0) -> list[SpeechHandle]:
        """Validate every request first (one bad request queues none), then queue them all at once, so
        they are admitted together while slots last. `share_prompt`: the requests have the same prompt;
        it is prefilled once and its KV blocks are shared by all (they are admitted all together)."""
        prepared = []
        for request in requests:
            req = parse_request(request)
            prepared.append((req, prepare(req, self.card, self.model.cfg, self.tokenizer, codec=self._codec_spec,
                                          voice=self._voice(req.voice))))
        if share_prompt:
            if len(prepared) > self.card.loops.ar_decode.max_running:
                raise ValueError(f"n: a group of {len(prepared)} exceeds the card's max_running")
            if sum(r.decode_audio for r, _ in prepared) > self.card.loops.vocoder.max_streams:
                raise ValueError(f"n: a group decoding audio needs a codec stream each; the card has "
                                 f"{self.card.loops.vocoder.max_streams}")
            if any(not torch.equal(p.rows, prepared[0][1].rows) for _, p in prepared):
                raise ValueError("prompts: a shared prompt must be the same for every request of the group")
            if prepared[0][1].audio:
                raise RequestError("reference_audio: a group shares one prompt; store the voice once "
                                   "(rt.voices.add) and pass voice=NAME, or pass reference_codes")
            if len(prepared[0][1].segments) > 1:
                raise RequestError("text: a group shares one prompt; this text is spoken as "
                                   f"{len(prepared[0][1].segments)} segments (max_segment_chars)")
        handles = []
        limits = self.card.loops.ar_decode
        with self._cond:
            if self._closed:
                raise RuntimeError("the runtime is closed")
            if len(self._waiting) + len(prepared) > limits.max_waiting:
                raise OverloadedError(f"queue: {len(self._waiting)} requests are already waiting for a slot "
                                      f"(max_waiting {limits.max_waiting}); nothing was queued, try again later")
            group = Group([]) if share_prompt else None
            for i, (req, p) in enumerate(prepared):
                rid = next(self._ids)
                handle = SpeechHandle(rid, self._request_cancel, self._callbacks, limits.max_buffered_chunks)
                record = RequestRecord(rid, handle, req, p.rows, p.sampling, p.max_frames, time.perf_counter(),
                                       group=group, group_id=group_id, sample_id=i, transcript=p.transcript,
                                       enc=self._encode_state(rid, p.audio), segments=p.segments)
                if group is not None:
                    group.members.append(rid)
                if record.enc is not None:
                    self._encoding.requests[rid] = record
                self._waiting.append(record)
                handles.append(handle)
            self._cond.notify_all()
        return handles

    def encode_audio(self, audio: Any, *, timeout: float | None = None) -> np.ndarray:
        """One recording (a path, file bytes or (samples, sample_rate)) -> its codes [N, 12], encoded on the
        engine as ENCODE work batched with requests' references (this thread waits)."""
        wav = prepare_recording(audio, self.card, self._codec_spec)
        with self._cond:
            if self._closed:
                raise RuntimeError("the runtime is closed")
            rid = next(self._ids)
            job = self._encoding.jobs[rid] = EncodeJob(self._encode_state(rid, (wav,)))
            self._cond.notify_all()
        if not job.done.wait(timeout):
            with self._cond:
                withdrawn = self._encoding.fail(rid, "timed out")
            if withdrawn:
                raise TimeoutError(f"reference encode not finished within {timeout} s")
        if job.error is not None:
            raise RuntimeError(f"encode failed: {job.error}")
        assert job.codes is not None
        return job.codes[0]

    def _encode_state(self, rid: int, audio: tuple[np.ndarray, ...]) -> Any:
        return self._encoding.loop.init(rid, audio, self._codec_spec.hop) if audio and self._codec_spec else None

    def _voice(self, name: str | None) -> Any:
        if name is None:
            return None
        try:
            return self.voices.get(name)
        except VoiceError as e:
            raise RequestError(str(e)) from None

    def rollout(self, prompts: list[Any], *, n: int = 1, seed: int = 0, **options: Any) -> Any:
        """n samples per prompt (sample i of prompt g seeded `rollouts.sample_seed(seed, g, i)`, one shared
        prefill per prompt): a `RolloutBatch` to iterate as trajectories finish, or `.trajectories()` in
        prompt-major, sample-minor order."""
        from v2.rl.batch import start_rollout

        return start_rollout(self, prompts, n=n, seed=seed, **options)

    @property
    def weight_version(self) -> int:
        return self._gate.version

    def update_weights(self, named_tensors: dict[str, torch.Tensor], version: int, *, mode: str = "wait",
                       timeout: float | None = None) -> None:
        """Copy new weights into the model in place (names as in the model or the release checkpoint).

        mode "wait": requests in flight finish on the old weights first; "abort": they end with "abort".
        Requests waiting for admission start on the new weights. Returns once applied. All or nothing: every
        name, shape and value (finite, floating; cast to the parameter's dtype) is checked first, and a failure
        part-way restores what was written. `version`: an int above the current one. On `timeout` the
        update is withdrawn (TimeoutError) and never applied later.
        """
        self._gate.check(version, mode)
        self._gate.request(weight_updates.from_tensors(self.model, named_tensors), version, mode, timeout,
                           closed=lambda: self._closed)

    def update_weights_from_disk(self, path: str, version: int, *, mode: str = "wait",
                                 timeout: float | None = None) -> None:
        """`update_weights` from a safetensors checkpoint directory, read one tensor at a time."""
        self._gate.check(version, mode)
        self._gate.request(weight_updates.from_disk(self.model, path), version, mode, timeout, closed=lambda: self._closed)

    def stats(self) -> dict[str, Any]:
        with self._cond:
            kinds = {k.value: dict(c, mean_batch=(c["rows"] / c["calls"] if c["calls"] else 0.0))
                     for k, c in self._counters.items()}
            graphs = {"ar_frame": self.ar_exec.graphs.stats(), "audio_chunk": self.codec_exec.graphs.stats()}
            return {"steps": self._steps, "kinds": kinds, "waiting": len(self._waiting), "running": len(self._running),
                    "kv_slots_in_use": self.pools["kv"].in_use, "codec_slots_in_use": self.pools["codec"].in_use,
                    **self.kv.stats(), "kv_preempted": sum(bool(r.ar and r.ar.paused) for r in self._running.values()),
                    "graphs": graphs, "shared_prefills": self._shared_prefills, "prefilled_rows": self._prefilled_rows,
                    "weight_version": self._gate.version,
                    "encoding": self._encoding.pending,
                    "encode_slots_in_use": self.pools["encode"].in_use}

    def close(self, *, drain: bool = False, timeout: float | None = None) -> None:
        """Stop taking requests; finish the ones in flight (`drain`) or abort them; free everything.

        Waits up to `timeout` for that; past it, the engine goes on ending every request in the background
        and every handle still gets its result. Callable from any thread, callbacks included."""
        with self._cond:
            self._closed, self._drain = True, drain
            self._cond.notify_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        left = lambda: None if deadline is None else max(0.0, deadline - time.monotonic())  # noqa: E731
        if threading.current_thread() is not self._thread:
            self._thread.join(left())
        self._results.join(left())
        self._callbacks.join(left())

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request_cancel(self, rid: int) -> None:
        with self._cond:
            self._cancels.add(rid)
            self._cond.notify_all()

    # ----- engine thread ---------------------------------------------------------------------------
    def _serve(self) -> None:
        threads = self.card.runtime.cpu_threads
        if threads is not None and self.model.device.type == "cpu":
            torch.set_num_threads(threads)  # this thread's intra-op threads (OpenMP settings are per thread)
        if self.model.device.type == "cuda":
            torch.cuda.set_device(self.model.device)  # the current device is per thread: kernels, copies, replays
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or self._waiting or self._running or self._cancels
                                    or self._gate.pending is not None or self._encoding.jobs)
                if self._closed and not self._drain:
                    self._cancels.update(r.id for r in (*self._waiting, *self._running.values()))
                    self._encoding.fail_all("the runtime is closed")
                idle = not (self._waiting or self._running or self._cancels or self._gate.pending
                            or self._encoding.jobs)
            if self._closed and idle:
                break
            try:
                self._step()
            except Exception as e:  # a fault in the engine's own code: end what is in flight, keep serving
                self._fail_everything(f"engine step failed: {type(e).__name__}: {e}")
        self._results.post(self._callbacks.stop)  # after the last result: its done callbacks, then the end
        self._results.stop()

    def _fail_everything(self, message: str) -> None:
        with self._cond:
            waiting, self._waiting = list(self._waiting), deque()
            self._encoding.fail_all(message)
        for req in (*waiting, *list(self._running.values())):
            req.error = message
            self._finish(req, FinishReason.ERROR)

    def _step(self) -> None:
        self._apply_cancels()
        self._expire()
        if self._gate.pending is not None:  # admit nothing until the update is applied
            self._gate.progress(self.model, self._running, lambda req: self._finish(req, FinishReason.ABORT))
        else:
            self._admit()
        plans: list[WorkPlan] = []
        for req in list(self._running.values()):
            try:
                plans.extend(self._plans_of(req))
            except Exception as e:  # one request's loop code fails that request alone
                self._fail(req.id, f"{type(e).__name__}: {e}")
        plans, _ = self.kv.before_step(self._running, plans)  # KV blocks for every write (may preempt)
        self.kv.flush()
        with self._cond:
            plans.extend(self._encoding.plans())
        prefill_rows = {p.request_id: int(p.payload.rows.shape[0]) for p in plans
                        if p.signature.kind is WorkUnitKind.PREFILL}
        batches = schedule(plans, prefill_budget=self.card.loops.ar_decode.prefill_chunk_rows,
                           prefill_rows=prefill_rows, buckets=self._buckets)
        ran: list[tuple[Batch, torch.Tensor | None]] = []
        for batch in batches:
            start = time.perf_counter()
            try:
                ran.append((batch, self._execute(batch)))
            except Exception as e:  # a failing batched call fails only its requests
                for plan in batch.plans:
                    self._fail_any(plan.request_id, f"{batch.kind.value} failed: {type(e).__name__}: {e}")
            with self._cond:  # host time of the call (on a GPU: launch time; the step's sync comes later)
                self._counters[batch.kind]["seconds"] += time.perf_counter() - start
        outputs = iter(to_host([t for _, t in ran if t is not None]))
        for batch, tensor in ran:
            host = next(outputs) if tensor is not None else None
            if batch.kind is WorkUnitKind.ENCODE:
                with self._cond:
                    self._encoding.scatter(batch.plans, host, self._encoded, self._fail_any)
                continue
            if batch.kind is WorkUnitKind.AR_FRAME:
                host = host.tolist()  # one conversion per batch: rows of Python floats
            for i, plan in enumerate(batch.plans):
                req = self._running.get(plan.request_id)
                if req is not None:
                    try:
                        self._advance(req, plan, host, i)
                    except Exception as e:
                        self._fail(req.id, f"{type(e).__name__}: {e}")
        for req in list(self._running.values()):
            try:
                self._settle(req)
            except Exception as e:
                self._fail(req.id, f"{type(e).__name__}: {e}")
        self._share_prefixes()
        with self._cond:
            self._steps += 1

    def _plans_of(self, req: RequestRecord) -> list[WorkPlan]:
        assert req.ar is not None and req.voc is not None
        plans = [self.ar_loop.next(req.ar), self.voc_loop.next(req.voc)]
        return [p for p in plans if isinstance(p, WorkPlan)]

    def _execute(self, batch: Batch) -> torch.Tensor | None:
        payloads = [p.payload for p in batch.plans]
        with self._cond:
            counter = self._counters[batch.kind]
            counter["calls"] += 1
            counter["rows"] += len(payloads)
            counter["padded_rows"] += batch.bucket
        if batch.kind is WorkUnitKind.PREFILL:
            self.ar_exec.prefill(payloads)
            with self._cond:
                self._prefilled_rows += sum(int(p.rows.shape[0]) for p in payloads)
            return None
        if batch.kind is WorkUnitKind.AR_FRAME:
            return self.ar_exec.frame(payloads, batch.bucket)
        if batch.kind is WorkUnitKind.ENCODE:
            assert self._encoding.executor is not None
            return self._encoding.executor.encode(payloads)
        return self.codec_exec.chunk(payloads, batch.bucket, batch.plans[0].signature.bucket)

    def _advance(self, req: RequestRecord, plan: WorkPlan, host: Any, i: int) -> None:
        """Hand row i of a batch's host result to the loop that planned it."""
        assert req.ar is not None and req.voc is not None
        if plan.loop is LoopKind.AR_DECODE:
            frame = plan.signature.kind is WorkUnitKind.AR_FRAME
            row = host[i] if frame else None
            data = FrameRow(row[0] > 0.5, tuple(map(int, row[1:13])), tuple(row[13:])) if frame else None
            self.ar_loop.advance(req.ar, StepResult(plan, data))
            self.voc_loop.feed(req.voc, req.ar.fresh, req.ar.finish)
            return
        frames = len(plan.payload.codes)
        audio = np.ascontiguousarray(host[i][:, : frames * self.codec.cfg.hop])
        self.voc_loop.advance(req.voc, StepResult(plan, audio))
        if req.first_audio is None:
            req.first_audio = time.perf_counter()
        if req.request.stream and not req.handle.deliver(req.voc.fresh):
            req.error = (f"stream: a subscriber fell more than {self.card.loops.ar_decode.max_buffered_chunks} "
                         "chunks behind; the request was aborted")
            self._finish(req, FinishReason.ABORT)

    def _settle(self, req: RequestRecord) -> None:
        """Release the KV slot as soon as the AR loop ends; finish the request when the vocoder loop is done."""
        assert req.ar is not None and req.voc is not None
        self.kv.computed([req])  # its computed full prompt blocks enter the prefix cache
        if req.ar.switching:  # long text: the next segment's prompt, prefilled once KV blocks are given
            next_segment(req, self.ar_loop, self.kv, self.ar_exec)
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
        self.ar_exec.admit(req.ar.slot, req.sampling, req.request.seed)
        if need.codec_stream:
            self.codec_exec.admit(req.voc.slot)

    def _share_prefixes(self) -> None:
        share_prefixes(self._running, lambda leader, f: self._guard(f, lambda: self._fork(leader, f)))

    def _fork(self, leader: RequestRecord, follower: RequestRecord) -> None:
        self.kv.fork(leader, follower)  # the leader's prompt blocks, shared: no copy
        with self._cond:
            self._shared_prefills += 1

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
        now = time.perf_counter()
        with self._cond:
            late = [r for r in (*self._waiting, *self._running.values())
                    if r.request.timeout is not None and now - r.submitted > r.request.timeout]
            for r in late:
                if r in self._waiting:
                    self._waiting.remove(r)
        for r in late:
            r.error = f"timeout: not finished within {r.request.timeout} s of submit"
            self._finish(r, FinishReason.ABORT)

    def _guard(self, req: RequestRecord, work: Any) -> None:
        """Run one request's loop code; an exception fails that request alone."""
        try:
            work()
        except Exception as e:
            self._fail(req.id, f"{type(e).__name__}: {e}")

    def _fail(self, rid: int, message: str) -> None:
        req = self._running.get(rid)
        if req is not None:
            req.error = message
            self._finish(req, FinishReason.ERROR)

    def _encoded(self, req: RequestRecord) -> None:
        """A waiting request's recordings are encoded: lay its prompt out with the real codes (it is admissible)."""
        assert req.enc is not None and req.enc.codes is not None
        references = tuple(torch.from_numpy(c) for c in req.enc.codes)
        req.rows = build_rows(req.request, self.model.cfg, self.tokenizer, references, req.transcript,
                              req.segments[0].text if req.segments else None)

    def _fail_any(self, rid: int, message: str) -> None:
        """Fail a running request, a waiting one (its encode failed) or an encode job."""
        if rid in self._running or self._encoding.fail(rid, message):
            self._fail(rid, message)
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
        """End a request exactly once: free its slots, build its result, wake its consumers."""
        if req.ended:
            return
        req.ended = True
        with self._cond:
            self._running.pop(req.id, None)
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
