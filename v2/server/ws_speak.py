"""A speech-stream utterance and its audio out: sentence by sentence as its request's segment marks split it.

Owns: `Outbox` (a session's sends: one at a time, none of a cancelled utterance, none once the client has
left, several together for a cancel's events), `Utterance` (one open request of a session: the text fed,
pieces held for `input.done`, its sender task, whether the client has begun it, ended its text, cancelled
it, whether its end was refused and its session.done sent), `Sentences` (the audio's chunks split at the
segments' frames, each sentence framed by `audio.start` and `audio.done`; streamed pcm as it is made, else
the sentence's whole file in one binary frame; the audio sent so far, `sent_s`; each aligned sentence's
`speech.timestamps` after its `audio.done`, where asked; every message through `out`, which ws_vllm_words.py
shapes and holds), the events that close a cancelled utterance (`cancelled_events`: `audio.done` with
`"cancelled": true` for each sentence begun and not closed, then `session.done` with `"cancelled": true`), and the two ways a send ends the sender: `Cancelled` (the utterance was cancelled:
nothing more of it goes out) and `Gone` (the client has left: `LEFT`, what the WebSocket raises then).
Must not know: the session's messages in, its config beyond its output, the engine, how formats are encoded
(audio.py), how the text is cut (the family).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import anyio
import numpy as np
from fastapi import WebSocket
from starlette.websockets import WebSocketDisconnect, WebSocketDisconnected

from v2.events import SentenceWords, WordTime
from v2.server import audio
from v2.server.timestamps import EVENT, sentence_json, sentences
from v2.server.ws_config import Config


class Cancelled(Exception):
    """The utterance was cancelled (`input.cancel`): the send was not made, nor will any other of it be."""


class Gone(Exception):
    """The client has left: the connection is closed."""


LEFT = (WebSocketDisconnect, WebSocketDisconnected, OSError)  # what a send or receive raises once the client left


@dataclass
class Utterance:
    index: int
    handle: Any
    text: str = ""            # what was fed (the marks' spans index into it)
    fed: str = ""             # what its request has taken of `text` (pieces held for input.done are not yet)
    held: list[str] = field(default_factory=list)  # pieces waiting for input.done (not fed as written)
    sender: asyncio.Task[None] | None = None
    out: Sentences | None = None
    silent: bool = False      # withdrawn or idle before the client began it: nothing is sent for it
    ended: bool = False       # input.done taken: its text is complete
    cancelled: bool = False   # input.cancel taken: nothing more of it is sent
    refused: bool = False     # its text's end was refused (said already): it ended at once
    spoken: bool = False      # its session.done has gone out

    @property
    def begun(self) -> bool:
        """The client has begun it: text was given or its text was ended."""
        return bool(self.text or self.held) or self.ended


Send = Callable[[dict[str, Any] | bytes, Utterance], Awaitable[None]]  # raises Cancelled or Gone


class Outbox:
    """A session's sends, one at a time (its lock): a message of a cancelled utterance is not sent (Cancelled),
    nor any once the client has left (Gone, for every send after the first that found it gone)."""

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws
        self.lock = asyncio.Lock()
        self.gone = False

    async def send(self, message: dict[str, Any] | bytes, of: Utterance | None = None) -> None:
        """Send one message; `of`: the utterance it belongs to (Cancelled once that is cancelled)."""
        async with self.lock:
            await self._send(message, of)

    async def send_all(self, messages: Callable[[], list[dict[str, Any]]]) -> None:
        """Several messages with nothing between them, made once any send under way has gone (`messages()`
        sees what it left)."""
        async with self.lock:
            for message in messages():
                await self._send(message, None)

    async def error(self, message: str, param: str | None = None, code: str = "invalid_value",
                    of: Utterance | None = None) -> None:
        await self.send({"type": "error", "message": message, "param": param, "code": code}, of)

    async def _send(self, message: dict[str, Any] | bytes, of: Utterance | None) -> None:
        if of is not None and of.cancelled:
            raise Cancelled
        if self.gone:
            raise Gone
        try:
            if isinstance(message, bytes):
                await self.ws.send_bytes(message)
            else:
                await self.ws.send_text(json.dumps(message))
        except LEFT:
            self.gone = True
            raise Gone from None


class Sentences:
    """Splits an utterance's audio at its segments' frames into sentences, each framed by audio.start/done."""

    def __init__(self, send: Send, u: Utterance, config: Config, hop: int, native_rate: int,
                 native_channels: int) -> None:
        self.send, self.u, self.c = send, u, config
        self.hop, self.native_rate, self.native_channels = hop, native_rate, native_channels
        self.frames = 0          # frames of audio seen so far
        self.current = -1        # the sentence open now (-1: none)
        self.count = 0           # sentences begun
        self.bytes = 0
        self.parts: list[np.ndarray] = []
        self.encoder: audio.Encoder | None = None
        self.sent = 0            # frames whose audio has gone out (a barge-in's words sent end within them)
        self.held: list[SentenceWords] = []  # aligned sentences whose `speech.timestamps` waits for their audio.done
        self.kept: list[np.ndarray] = []     # the audio so far, where the runtime has an aligner (a cancel's words)

    async def chunk(self, samples: np.ndarray) -> None:
        if self.c.aligner:
            self.kept.append(samples)
        hop = self.hop
        n, pos = samples.shape[1] // hop, 0
        while pos < n:
            marks = self.u.handle.marks()
            index = self.current if self.current >= 0 else self.count
            mark = marks[index] if index < len(marks) else None
            end = mark.frame_end if mark is not None and mark.frame_end is not None else None
            if end is not None and end <= self.frames:  # the open sentence ended exactly here
                await self.close(False)
                continue
            take = n - pos if end is None else min(n - pos, end - self.frames)
            await self.open(mark)
            await self.emit(samples[:, pos * hop:(pos + take) * hop])
            pos += take
            self.frames += take
            if self.encoder is not None:  # streamed: its bytes are out
                self.sent = self.frames
            if end is not None and self.frames >= end:
                await self.close(False)

    async def open(self, mark: Any) -> None:
        if self.current >= 0:
            return
        text = self.u.text[mark.text_start:mark.text_end].strip() if mark is not None else ""
        await self.out({"type": "audio.start", "utterance_index": self.u.index, "sentence_index": self.count,
                        "sentence_text": text, "format": self.c.spec.format, "sample_rate": self.c.spec.sample_rate})
        self.current, self.count, self.bytes, self.parts = self.count, self.count + 1, 0, []
        if self.c.stream_audio:
            self.encoder = audio.make_encoder(self.c.spec, self.native_rate, self.native_channels, streaming=True)

    async def emit(self, samples: np.ndarray) -> None:
        if self.encoder is not None:
            await self.bytes_out(self.encoder.feed(samples))
        else:
            self.parts.append(samples)

    async def bytes_out(self, data: bytes) -> None:
        if data:
            await self.out(data)
            self.bytes += len(data)

    async def close(self, failed: bool) -> None:
        """End the open sentence: its (last) bytes, then audio.done."""
        if self.current < 0:
            return
        if self.encoder is not None:
            await self.bytes_out(self.encoder.finish())
            self.encoder = None
        elif self.parts:
            whole = np.concatenate(self.parts, axis=1)  # [channels, samples]
            self.parts = []
            data = await anyio.to_thread.run_sync(audio.encode_whole, whole, self.c.spec, self.native_rate)
            await self.bytes_out(data)
        self.sent = self.frames
        await self.out({"type": "audio.done", "utterance_index": self.u.index, "sentence_index": self.current,
                        "total_bytes": self.bytes, "error": failed})
        self.current = -1

    async def out(self, message: dict[str, Any] | bytes) -> None:
        """One message of the utterance's audio out (a subclass may shape or hold it: ws_vllm_words.py)."""
        await self.send(message, self.u)

    def unfinished(self) -> list[tuple[int, int]]:
        """The sentences whose `audio.start` went out and `audio.done` did not, with their bytes sent."""
        return [(self.current, self.bytes)] if self.current >= 0 else []

    @property
    def begun(self) -> int:
        """Sentences whose `audio.start` went out."""
        return self.count

    @property
    def sent_s(self) -> float:
        """Seconds of the utterance's audio that have gone out."""
        return self.sent * self.hop / self.native_rate

    async def words(self, every: bool = False) -> None:
        """`speech.timestamps` of each aligned sentence held whose audio is done (`every`: all held, at the end)."""
        while self.held and (every or self.held[0].index < self.count and self.held[0].index != self.current):
            s = self.held.pop(0)
            await self.send({"type": EVENT, "utterance_index": self.u.index, **sentence_json(s)}, self.u)


def late_words(runtime: Any, u: Utterance) -> list[SentenceWords]:
    """The words of each sentence whose audio went out whole but whose words had not come when the utterance was
    cancelled (its aligner loop ends with it): aligned here (`runtime.align`, in the caller's thread, a worker's),
    times from the utterance's start as the loop gives them. A sentence the aligner refuses is left out."""
    out = u.out
    if out is None or not out.kept:
        return []
    have = {s.index for s in sentences(u.handle.events())}
    audio = np.concatenate(out.kept, axis=1)  # [channels, samples] of the utterance so far
    late = []
    for m in u.handle.marks():
        if m.index in have or m.frame_end is None or m.frame_end * out.hop > out.sent_s * out.native_rate + 0.5:
            continue
        start = m.frame_start * out.hop / out.native_rate
        try:
            words = runtime.align(audio[:, m.frame_start * out.hop:m.frame_end * out.hop], out.native_rate,
                                  u.text[m.text_start:m.text_end], language=out.c.params.language)
        except (ValueError, RuntimeError):
            continue
        late.append(SentenceWords(m.index, m.text_start, m.text_end,
                                  tuple(WordTime(w.word, w.start + start, w.end + start) for w in words)))
    return late


def cancelled_events(u: Utterance) -> list[dict[str, Any]]:
    """What closes a cancelled utterance for its client: `audio.done` (`"cancelled": true`) for the sentence
    open, if one is, then `session.done` (`"cancelled": true`); nothing if its session.done went out."""
    out = u.out
    events: list[dict[str, Any]] = []
    if u.spoken:
        return events
    for index, sent in ([] if out is None else out.unfinished()):
        events.append({"type": "audio.done", "utterance_index": u.index, "sentence_index": index,
                       "total_bytes": sent, "error": False, "cancelled": True})
    events.append({"type": "session.done", "utterance_index": u.index,
                   "total_sentences": 0 if out is None else out.begun, "cancelled": True})
    return events
