"""A chat card for the chat completions tests without a model: `ChatRuntime`, the runtime's public face over a
scripted reply (text deltas and 24 kHz audio drawn from the seed), with real handles, cancels and results.

What it says is drawn from its seed and the last user turn, one word a step, each step's word published as a
`TextDelta` and, spoken, followed by one chunk of audio: the same body and seed give the same reply, streamed
or not. A step waits on a gate the test may hold (`hold`), so a reply can be kept running without timing."""

from __future__ import annotations

import itertools
import threading
import zlib
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from v2.contracts import AudioChunk
from v2.errors import FieldError, RequestError
from v2.events import TextDelta
from v2.runtime.handles import Dispatcher, Metrics, SpeechHandle, SpeechResult

WORDS = ("the", "river", "runs", "past", "old", "stone", "houses", "and", "quiet", "fields", "at", "dusk")
RATE, HOP = 24000, 1920
SPEAKERS = ("Ethan", "Chelsie", "Aiden")


@dataclass(frozen=True)
class ChatResult(SpeechResult):
    text: str | None = None
    text_ids: tuple[int, ...] | None = None
    text_finish_reason: str | None = None


class ChatRuntime:
    """The public face a server reads, for a card whose request takes `messages`."""

    request_fields = frozenset({"messages", "prompt_ids", "audio", "speaker", "modalities", "max_tokens",
                                "temperature", "top_p", "seed", "stream", "max_frames"})
    speakers = SPEAKERS
    sample_rate, channels = RATE, 1
    weight_version = 0

    def __init__(self, name: str = "chat_tiny", reply_words: int = 12) -> None:
        self.card = SimpleNamespace(name=name, seeded=True)
        self.family = SimpleNamespace()  # gives no speech_params: a chat card speaks its own reply
        self.voices = None
        self.reply_words = reply_words
        self.submitted: list[dict[str, Any]] = []
        self.running = 0
        self.gate = threading.Event()
        self.gate.set()
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._cancelled: set[int] = set()
        self._dispatcher = Dispatcher("chat-fake")

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"running": self.running, "waiting": 0, "steps": 0}

    def hold(self) -> None:
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    def submit(self, fields: dict[str, Any]) -> SpeechHandle:
        for i, message in enumerate(fields["messages"]):  # the family's own refusal: its field, the path said
            if message.get("content") == "<|im_end|>":
                raise FieldError(f"messages[{i}].content: holds the special token <|im_end|>", field="messages.content")
        if 0 < fields.get("temperature", 0) < 0.25:
            raise RequestError("temperature: 0 (greedy) or at least 0.25", field="temperature")
        rid = next(self._ids)
        handle = SpeechHandle(rid, self._cancel, self._dispatcher)
        self.submitted.append(fields)
        with self._lock:
            self.running += 1
        threading.Thread(target=self._run, args=(handle, fields), daemon=True).start()
        return handle

    def _cancel(self, rid: int) -> None:
        with self._lock:
            self._cancelled.add(rid)
        self.gate.set()

    def _run(self, handle: SpeechHandle, fields: dict[str, Any]) -> None:
        last = fields["messages"][-1].get("content")
        key = zlib.crc32(repr(last).encode()) ^ int(fields.get("seed", 0))
        rng = np.random.default_rng(key)
        limit = fields.get("max_tokens") or self.reply_words
        n = min(limit, self.reply_words)
        spoken = "audio" in fields["modalities"]
        ids, parts, chunks = [], [], []
        ending = "length" if limit < self.reply_words else "stop"
        failing = last == "FAIL"  # ends with an error after its first step
        for step in range(n):
            self.gate.wait()
            with self._lock:
                cancelled = handle.request_id in self._cancelled
            if cancelled:
                ending = "abort"
                break
            word = int(rng.integers(len(WORDS)))
            text = ("" if step == 0 else " ") + WORDS[word]
            ids.append(word)
            parts.append(text)
            handle.publish("thinker", [TextDelta((word,), text)])
            if failing:
                ending = "error"
                break
            if spoken:
                audio = (rng.standard_normal((1, HOP)) * 0.2).astype(np.float32)
                chunks.append(audio)
                handle.deliver([AudioChunk(step, audio, RATE, 1, step == n - 1)])
        audio = np.concatenate(chunks, axis=1) if chunks else np.zeros((1, 0), np.float32)
        frames = len(chunks)
        metrics = Metrics(prompt_rows=7, frames=frames, audio_seconds=frames * HOP / RATE, ttfa_s=0.0 if frames else None,
                          total_s=0.01, queue_s=0.0)
        result = ChatResult(audio=audio, sample_rate=RATE, codes=np.zeros((frames, 16), np.int64),
                            finish_reason=ending, metrics=metrics, text="".join(parts), text_ids=tuple(ids),
                            text_finish_reason=ending, error="the scripted failure" if failing else None)
        with self._lock:
            self.running -= 1
        handle.finish(result)
