"""The runtime as callers see it: `submit()` from any thread, handles, rollouts, weight updates, stats, close.

Owns: building a runtime from a card, validating and queueing requests (errors name the field; a group of
requests sharing one prompt), encode-only jobs (`encode_audio`, for the voice store), weight-update calls
(handed to the engine's gate), cancels, `stats()` and `close()`. Everything it queues is run by the engine
thread (`Engine`, engine.py), which it starts last.
Must not know: steps, executors, the device stream's workings, loop logic.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import numpy as np
import torch

from v2.card import DEFAULT_CARD, ModelCard, build_codec, build_encoder, build_model, build_tokenizer, load_card
from v2.prepare import CodecSpec, prepare, prepare_recording
from v2.request import OverloadedError, RequestError, SpeechRequest, parse_request
from v2.runtime import shutdown, weight_updates
from v2.runtime.device import Stream
from v2.runtime.encoding import EncodeJob
from v2.runtime.engine import Engine
from v2.runtime.groups import Group
from v2.runtime.handles import SpeechHandle
from v2.runtime.records import RequestRecord
from v2.runtime.voices import VoiceError, VoiceStore, default_directory


class Runtime(Engine):
    def __init__(self, card: ModelCard, model: Any, codec: Any, tokenizer: Any, *, graphs: bool = True,
                 encoder: Any = None, voices_dir: str | None = None, stream: Stream | None = None) -> None:
        """`graphs`: capture and replay CUDA graphs for AR_FRAME and AUDIO_CHUNK steps (on CUDA only).
        `encoder`: the codec's encoder (reference audio -> codes); without it reference audio is refused.
        `voices_dir`: the voice store's directory (default: the card's, else the user's cache).
        `stream`: the device stream the engine launches on (default: the model device's; the runtime owns
        it and closes it); e.g. `SimulatedStream(latency)` to run a CPU like an asynchronous device."""
        super().__init__(card, model, codec, tokenizer, encoder, graphs=graphs, stream=stream)
        self._codec_spec = CodecSpec(encoder.sample_rate, encoder.cfg.hop) if encoder is not None else None
        self.voices = VoiceStore(voices_dir or card.runtime.voices_dir or default_directory(card.name),
                                 encode=self.encode_audio, width=model.cfg.n_vq, codebook_size=model.cfg.codebook_size)
        self._ids = itertools.count()
        self._thread.start()
        shutdown.track(self)  # closed at interpreter exit if still open (shutdown.py)

    @classmethod
    def from_card(cls, card: str | ModelCard = DEFAULT_CARD, *, checkpoint: str | None = None,
                  codec_checkpoint: str | None = None, device: str | None = None, dtype: torch.dtype | None = None,
                  graphs: bool = True, voices_dir: str | None = None, stream: Stream | None = None) -> "Runtime":
        """`card`: a card name in cards/, a path, or a loaded card. Default device: CUDA when present."""
        card = card if isinstance(card, ModelCard) else load_card(card)
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        model = build_model(card, checkpoint=checkpoint, dtype=dtype, device=device)
        codec = build_codec(card, checkpoint=codec_checkpoint, dtype=dtype, device=device)
        encoder = (build_encoder(card, checkpoint=codec_checkpoint, dtype=dtype, device=device, decoder=codec)
                   if card.experts.vocoder.encoder else None)
        return cls(card, model, codec, build_tokenizer(card, checkpoint), graphs=graphs, encoder=encoder,
                   voices_dir=voices_dir, stream=stream)

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
                if req.timeout is not None:
                    self._deadlines[rid] = record.submitted + req.timeout
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
        """n samples per prompt (sample i of prompt g seeded `v2.rl.batch.sample_seed(seed, g, i)`, one shared
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
            return self._stats()

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
