"""What a caller holds: `SpeechHandle` (chunks as they come, the final result, cancel) and the result types.

Owns: the per-request chunk log (every chunk kept, so an iterator or subscriber attached at any time
sees all of them from the first), sync and async iteration, subscriber callbacks (run on the engine
thread; an exception in one is recorded, never raised into the engine), `result(timeout)`, `cancel()`.
Thread-safe: the engine thread delivers, any thread or event loop consumes.
Must not know: models, slots, scheduling.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Iterator

import numpy as np

from v2.loops.vocoder import AudioChunk


@dataclass(frozen=True)
class Metrics:
    prompt_rows: int
    frames: int
    audio_seconds: float
    ttfa_s: float | None  # submit -> first audio chunk made (None when no audio)
    total_s: float        # submit -> finished
    queue_s: float        # submit -> admitted

    @property
    def rtf(self) -> float | None:
        """Real-time factor = generation time / audio duration (lower is better)."""
        return self.total_s / self.audio_seconds if self.audio_seconds > 0 else None


@dataclass(frozen=True)
class SpeechResult:
    audio: np.ndarray        # float32 [channels, samples]
    sample_rate: int
    codes: np.ndarray        # int64 [F, 12]
    finish_reason: str       # stop | length | abort | error
    metrics: Metrics
    trajectory: Any = None  # a v2.rollout.Trajectory under the ROLLOUT profile
    error: str | None = None


_END = object()


class SpeechHandle:
    def __init__(self, request_id: int, cancel: Callable[[int], None]) -> None:
        self.request_id = request_id
        self._cancel = cancel
        self._cond = threading.Condition()
        self._chunks: list[AudioChunk] = []
        self._subscribers: list[Callable[[AudioChunk], None]] = []
        self._done_callbacks: list[Callable[[SpeechResult], None]] = []
        self._result: SpeechResult | None = None
        self.callback_errors: list[str] = []

    # ----- consumer side ---------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        with self._cond:
            return self._result is not None

    def cancel(self) -> None:
        """Abort the request at its next step (a finished request is left as it is)."""
        if not self.done:
            self._cancel(self.request_id)

    def result(self, timeout: float | None = None) -> SpeechResult:
        with self._cond:
            if not self._cond.wait_for(lambda: self._result is not None, timeout):
                raise TimeoutError(f"request {self.request_id} not finished within {timeout} s")
            assert self._result is not None
            return self._result

    def subscribe(self, callback: Callable[[AudioChunk], None]) -> None:
        """Call `callback(chunk)` for every chunk: those already made at once, later ones on the engine thread."""
        with self._cond:
            for chunk in self._chunks:
                self._call(callback, chunk)
            self._subscribers.append(callback)

    def on_done(self, callback: Callable[[SpeechResult], None]) -> None:
        """Call `callback(result)` once the request has ended: at once if it has, else on the engine thread."""
        with self._cond:
            if self._result is None:
                self._done_callbacks.append(callback)
                return
            result = self._result
        try:
            callback(result)
        except Exception as e:
            self.callback_errors.append(f"{type(e).__name__}: {e}")

    def __iter__(self) -> Iterator[AudioChunk]:
        seen = 0
        while True:
            with self._cond:
                self._cond.wait_for(lambda: len(self._chunks) > seen or self._result is not None)
                fresh, finished = self._chunks[seen:], self._result is not None
            yield from fresh
            seen += len(fresh)
            if finished and not fresh:
                return

    async def __aiter__(self) -> AsyncIterator[AudioChunk]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        with self._cond:
            backlog = list(self._chunks)
            finished = self._result is not None
            if not finished:
                self._subscribers.append(lambda c: loop.call_soon_threadsafe(queue.put_nowait, c))
                self._done_callbacks.append(lambda _: loop.call_soon_threadsafe(queue.put_nowait, _END))
        for chunk in backlog:
            yield chunk
        if finished:
            return
        while (item := await queue.get()) is not _END:
            yield item

    # ----- engine side -----------------------------------------------------------------------------
    def deliver(self, chunks: list[AudioChunk]) -> None:
        with self._cond:
            for chunk in chunks:
                self._chunks.append(chunk)
                for callback in self._subscribers:
                    self._call(callback, chunk)
            self._cond.notify_all()

    def finish(self, result: SpeechResult) -> None:
        with self._cond:
            self._result = result
            for callback in self._done_callbacks:
                try:
                    callback(result)
                except Exception as e:  # a callback's bug must not reach the engine
                    self.callback_errors.append(f"{type(e).__name__}: {e}")
            self._subscribers.clear()
            self._done_callbacks.clear()
            self._cond.notify_all()

    def _call(self, callback: Callable[[AudioChunk], None], chunk: AudioChunk) -> None:
        try:
            callback(chunk)
        except Exception as e:  # a subscriber's bug must not reach the engine
            self.callback_errors.append(f"{type(e).__name__}: {e}")

