"""`/v1/audio/speech/stream`: text in over a WebSocket as it is written, audio out sentence by sentence.

Owns: the session of one connection in vllm-omni's protocol. Client messages: `session.config` (the REST
fields of `POST /v1/audio/speech` less `input`, parsed and planned by schema.py exactly as REST does, plus
`stream_audio` and `split_granularity`; the family maps them onto its request as over REST), `input.text {text}`, `input.done` (ends the utterance; the
connection stays open for the next, the config stays), `session.close`. Server messages: `session.ready`
(the config taken, and `incremental`: whether audio starts before `input.done`), then per sentence
`audio.start {utterance_index, sentence_index, sentence_text, format, sample_rate}`, binary audio frames
(`stream_audio`: raw pcm chunks as they are made; otherwise the sentence's whole file in one frame),
`audio.done {utterance_index, sentence_index, total_bytes, error}`, and per utterance `session.done
{utterance_index, total_sentences}`; `error {message, param, code}` for a bad message, which ends nothing.
Each utterance is one open request (`Runtime.open`): pieces are fed as they come (`split_granularity`
"none": held until `input.done`, vllm-omni's own default), its sentences are the request's segments (the
handle's marks split the audio at their frames), and it is opened as soon as the config is taken, so its
reference audio encodes while the text is still being written. The API key, the Origin rule and draining
apply at the handshake (middleware.py); `max_input_chars` caps an utterance's text, `max_body_bytes` a message.
A conversation, for a family that takes `context` (`FamilyParams.takes`): the session holds earlier turns
(the config's `context`, turns a `context.append {speaker, text | text_ids, audio | voice}` adds, answered
`context.appended {context_turns}`, and each utterance it spoke: its text in the config's speaker with its
codes), and each utterance is opened with them as its context; recordings are encoded once
(`rt.encode_audio`), stored voices looked up once; at most `conversation_turns` turns and
`conversation_seconds` of their audio are kept, the oldest dropped, and more of the oldest while the family
refuses the context (as too long) when an utterance opens. A config with `context` replaces the
conversation; one without keeps it (a new `voice` changes who speaks next). Turns are made ready by
conversation.py.
Must not know: the engine's internals, how formats are encoded (audio.py), how the text is cut (the family).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
import numpy as np
from fastapi import APIRouter, WebSocket

from v2.errors import OverloadedError, RequestError
from v2.params import FamilyParams, Resolved, ResolvedTurn, SpeechParams
from v2.server import audio
from v2.server.audio import OutputSpec
from v2.server.errors import ApiError, runtime_field_error
from v2.server.conversation import appended_turn, bounded, config_turns
from v2.server.schema import family_params, param_names, parse_body, plan, resolved
from v2.server.state import ServerState
from v2.server.streaming import GOOD_ENDINGS

router = APIRouter()
SPLITS = ("none", "sentence", "clause")
KINDS = ("session.config", "input.text", "input.done", "session.close", "context.append")


@dataclass(frozen=True)
class Config:
    params: SpeechParams      # the config, as REST parses it
    given: Resolved           # what the server resolved of it, less the context (the session's, per utterance)
    family: FamilyParams
    spec: OutputSpec
    stream_audio: bool
    split: str                # the runtime's split ("sentence" / "clause")
    incremental: bool         # pieces are fed as they come (False: held until input.done)
    names: dict[str, str]     # the family's request fields -> the parameters the client sent
    context: tuple[ResolvedTurn, ...] | None = None  # the config's `context`, its audio encoded (None: not given)

    @property
    def takes_context(self) -> bool:
        return "context" in self.family.takes

    def request(self, context: tuple[ResolvedTurn, ...] | None) -> dict[str, Any]:
        """The family's request fields, less its text, with `context` (None: none)."""
        return self.family.request(self.params, replace(self.given, context=context))


def configure(st: ServerState, msg: dict[str, Any]) -> Config:
    """A `session.config` message -> the session's config (REST's parsing and planning; ApiError names the field)."""
    ours = {k: msg[k] for k in ("stream_audio", "split_granularity") if k in msg}
    fields = {k: v for k, v in msg.items() if k not in ("type", *ours)}
    if "input" in fields:
        raise ApiError(400, "input: the text comes in input.text messages", param="input", code="invalid_value")
    stream_audio, split = ours.get("stream_audio", False), ours.get("split_granularity", "sentence")
    if not isinstance(stream_audio, bool):
        raise ApiError(400, "stream_audio: must be true or false", param="stream_audio", code="invalid_value")
    if split not in SPLITS:
        raise ApiError(400, f"split_granularity: one of {', '.join(SPLITS)}", param="split_granularity",
                       code="invalid_value")
    family = family_params(st.runtime)
    p = plan(parse_body({**fields, "input": "."}), st.config.limits(), native_rate=st.native_rate,
             native_channels=st.native_channels, takes=family.takes)
    if stream_audio and p.spec.format != "pcm":
        raise ApiError(400, "stream_audio: streamed sentences are raw pcm (response_format: pcm)",
                       param="stream_audio", code="invalid_value")
    if not hasattr(st.runtime, "open"):
        raise ApiError(400, "type: this server's runtime does not take text as it is written", param="type",
                       code="unsupported")
    # a speaker of the checkpoint, a stored voice, or neither; the text comes in input.text messages
    given = resolved(replace(p, context=None), st.voices.voice_fields(p.voice), stream=True, text_later=True)
    return Config(p.params, given, family, p.spec, stream_audio, "sentence" if split == "none" else split,
                  split != "none", param_names(family, p.params), config_turns(st, p))


@dataclass
class Utterance:
    index: int
    handle: Any
    text: str = ""            # what was fed (the marks' spans index into it)
    held: list[str] = field(default_factory=list)  # pieces waiting for input.done (not incremental)
    sender: asyncio.Task[None] | None = None
    silent: bool = False      # withdrawn before any text (a new session.config): nothing is sent for it


class Session:
    def __init__(self, ws: WebSocket, st: ServerState) -> None:
        self.ws, self.st = ws, st
        self.config: Config | None = None
        self.utterance: Utterance | None = None
        self.count = 0  # utterances begun
        self.history: list[ResolvedTurn] = []  # the conversation so far (a family that takes context)
        self.lock = asyncio.Lock()
        self.hop = int(round(st.runtime.sample_rate / st.runtime.frame_rate))  # samples per frame

    async def send(self, message: dict[str, Any] | bytes) -> None:
        async with self.lock:
            if isinstance(message, bytes):
                await self.ws.send_bytes(message)
            else:
                await self.ws.send_text(json.dumps(message))

    async def error(self, message: str, param: str | None = None, code: str = "invalid_value") -> None:
        await self.send({"type": "error", "message": message, "param": param, "code": code})

    async def run(self) -> None:
        try:
            while True:
                msg = await self.ws.receive()
                if msg["type"] == "websocket.disconnect":
                    return
                raw = msg.get("text")
                if raw is None:
                    await self.error("message: send JSON text messages, not binary ones", "message")
                    continue
                if len(raw) > self.st.config.max_body_bytes:
                    await self.error(f"message: over the limit of {self.st.config.max_body_bytes} bytes", "message",
                                     "request_too_large")
                    continue
                try:
                    data = json.loads(raw)
                except json.JSONDecodeError as e:
                    await self.error(f"message: not JSON ({e.msg})", "message")
                    continue
                if not isinstance(data, dict):
                    await self.error("message: a JSON object with a `type`", "message")
                    continue
                if await self.handle(data):
                    return
        finally:
            if self.utterance is not None:
                self.utterance.handle.cancel()
                if self.utterance.sender is not None:
                    self.utterance.sender.cancel()

    async def handle(self, msg: dict[str, Any]) -> bool:
        """One client message; True once the session is over."""
        kind = msg.get("type")
        if kind == "session.config":
            u = self.utterance
            if u is not None and (u.text or u.held):
                await self.error("session.config: an utterance is under way; send input.done first", "type")
                return False
            self.withdraw()  # opened at the last config, nothing said yet: the new config replaces it
            try:
                self.config = await anyio.to_thread.run_sync(configure, self.st, msg)
            except ApiError as e:
                await self.error(e.message, e.param, e.code or "invalid_value")
                return False
            c = self.config
            await self.send({"type": "session.ready", "incremental": c.incremental, "stream_audio": c.stream_audio,
                             "format": c.spec.format, "sample_rate": c.spec.sample_rate, "channels": c.spec.channels,
                             "split_granularity": msg.get("split_granularity", "sentence")})
            # a config's context replaces the conversation (kept as it was if the family refuses it)
            await self.begin(None if c.context is None else self.bounded(list(c.context)))
        elif kind == "context.append":
            await self.append(msg)
        elif kind in ("input.text", "input.done", "session.close"):
            if self.config is None:
                await self.error(f"type: send session.config before {kind}", "type")
                return False
            if kind == "input.text":
                await self.text(msg.get("text"))
            else:
                await self.done()
                if kind == "session.close":
                    await self.ws.close(1000)
                    return True
        else:
            await self.error(f"type: {kind!r} is not one of {', '.join(KINDS)}", "type")
        return False

    async def append(self, msg: dict[str, Any]) -> None:
        """context.append: one more turn of the conversation (the other party's), between utterances; the
        utterance opened already is opened again with it, which is how the family checks it."""
        if self.config is None:
            await self.error("type: send session.config before context.append", "type")
            return
        if not self.config.takes_context:
            await self.error("type: this model takes no conversation context (context.append)", "type", "unsupported")
            return
        u = self.utterance
        if u is not None and (u.text or u.held):
            await self.error("context.append: an utterance is under way; send input.done first", "type")
            return
        try:
            turn = await anyio.to_thread.run_sync(appended_turn, self.st, msg)
        except ApiError as e:
            await self.error(e.message, e.param, e.code or "invalid_value")
            return
        self.withdraw()
        if await self.begin(self.bounded([*self.history, turn])):
            await self.send({"type": "context.appended", "context_turns": len(self.history)})

    def withdraw(self) -> None:
        """The utterance opened for text that has not come: cancelled, nothing sent for it."""
        u = self.utterance
        if u is not None:
            u.silent = True
            u.handle.cancel()
            self.utterance = None

    def bounded(self, turns: list[ResolvedTurn]) -> list[ResolvedTurn]:
        return bounded(turns, self.st.config.conversation_turns, self.st.config.conversation_seconds,
                       float(self.st.runtime.frame_rate))

    async def begin(self, history: list[ResolvedTurn] | None = None) -> bool:
        """Open the next utterance's request (at once: references encode while its text is written), with the
        conversation as its context where the family takes one. `history`: a new conversation to open it with,
        kept only if the family takes it; without, the session's, less its oldest turns while the family refuses
        it as context (a conversation grown past the family's own caps)."""
        config = self.config
        assert config is not None
        strict = history is not None
        turns = list(self.history if history is None else history) if config.takes_context else []
        while True:
            fields = config.request(tuple(turns) if turns else None)
            try:
                handle = await anyio.to_thread.run_sync(lambda: self.st.runtime.open(fields, split=config.split))
                break
            except RequestError as e:
                err = runtime_field_error(e, config.names)
                if turns and not strict and err.param == "context":
                    turns = turns[1:]
                    continue
                await self.error(err.message, err.param)
                return False
            except OverloadedError as e:
                await self.error(f"the server is busy: {e}", None, "overloaded")
                return False
            except RuntimeError as e:
                await self.error(f"the runtime is not taking requests: {e}", None, "shutting_down")
                return False
        self.history = turns
        handle.on_done(self.st.metrics.observe)
        u = self.utterance = Utterance(self.count, handle)
        self.count += 1
        u.sender = asyncio.create_task(self.speak(u))
        return True

    async def text(self, piece: Any) -> None:
        if not isinstance(piece, str):
            await self.error("text: a string", "text")
            return
        if self.utterance is None and not await self.begin():
            return
        u = self.utterance
        assert u is not None
        limit = self.st.config.max_input_chars
        if len(u.text) + len(piece) > limit:
            await self.error(f"text: the utterance would be {len(u.text) + len(piece)} characters, over the limit of "
                             f"{limit}; send input.done", "text", "string_above_max_length")
            return
        if not self.config or self.config.incremental:
            if not await self.feed(u, piece, False):
                return
        else:
            u.held.append(piece)
            await self.feed(u, "", False)  # nothing to say yet; the request is not idle
        u.text += piece

    async def feed(self, u: Utterance, piece: str, end: bool) -> bool:
        try:
            await anyio.to_thread.run_sync(lambda: u.handle.end_text() if end else u.handle.feed(piece))
        except RequestError as e:
            err = runtime_field_error(e, self.config.names if self.config is not None else None)
            await self.error(err.message, err.param)
            return False
        except RuntimeError as e:  # the request has ended (its sender reports why)
            await self.error(f"text: {e}", "text", "ended")
            return False
        return True

    async def done(self) -> None:
        """input.done: the utterance's text is complete; wait until it is spoken (session.done sent)."""
        if self.utterance is None and not await self.begin():
            return
        u = self.utterance
        assert u is not None and u.sender is not None
        if u.held:
            held, u.held = "".join(u.held), []
            await self.feed(u, held, False)
        await self.feed(u, "", True)
        await u.sender
        self.utterance = None

    # ----- audio out -----------------------------------------------------------------------------
    async def speak(self, u: Utterance) -> None:
        """The utterance's audio, sentence by sentence as the handle's marks split it; then session.done."""
        assert self.config is not None
        out = _Sentences(self, u)
        try:
            async for chunk in u.handle:
                await out.chunk(chunk.audio)
            result = await anyio.to_thread.run_sync(u.handle.result)
            if u.silent:
                return
            failed = result.finish_reason not in GOOD_ENDINGS
            if not failed and self.config.takes_context and u.text.strip():  # the next utterance's context
                codes = result.codes if len(result.codes) else None
                self.history = self.bounded([*self.history, ResolvedTurn(self.config.given.speaker, u.text,
                                                                         codes=codes)])
            await out.close(failed)
            if failed:
                await self.error(f"the utterance ended with {result.finish_reason}" +
                                 (f": {result.error}" if result.error else ""), None, result.finish_reason)
            await self.send({"type": "session.done", "utterance_index": u.index, "total_sentences": out.count})
        finally:
            u.handle.cancel()  # the client left or the send failed: free it (a finished request is left alone)
            if self.utterance is u:  # it ended on its own (idle timeout, a failure): the next text opens another
                self.utterance = None


class _Sentences:
    """Splits an utterance's audio at its segments' frames into sentences, each framed by audio.start/done."""

    def __init__(self, session: Session, u: Utterance) -> None:
        assert session.config is not None
        self.s, self.u, self.c = session, u, session.config
        self.frames = 0          # frames of audio seen so far
        self.current = -1        # the sentence open now (-1: none)
        self.count = 0           # sentences begun
        self.bytes = 0
        self.parts: list[np.ndarray] = []
        self.encoder: audio.Encoder | None = None

    async def chunk(self, samples: np.ndarray) -> None:
        hop = self.s.hop
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
            if end is not None and self.frames >= end:
                await self.close(False)

    async def open(self, mark: Any) -> None:
        if self.current >= 0:
            return
        self.current, self.count, self.bytes, self.parts = self.count, self.count + 1, 0, []
        text = self.u.text[mark.text_start:mark.text_end].strip() if mark is not None else ""
        if self.c.stream_audio:
            self.encoder = audio.make_encoder(self.c.spec, self.s.st.native_rate, self.s.st.native_channels,
                                              streaming=True)
        await self.s.send({"type": "audio.start", "utterance_index": self.u.index, "sentence_index": self.current,
                           "sentence_text": text, "format": self.c.spec.format,
                           "sample_rate": self.c.spec.sample_rate})

    async def emit(self, samples: np.ndarray) -> None:
        if self.encoder is not None:
            await self.bytes_out(self.encoder.feed(samples))
        else:
            self.parts.append(samples)

    async def bytes_out(self, data: bytes) -> None:
        if data:
            self.bytes += len(data)
            await self.s.send(data)

    async def close(self, failed: bool) -> None:
        """End the open sentence: its (last) bytes, then audio.done."""
        if self.current < 0:
            return
        if self.encoder is not None:
            await self.bytes_out(self.encoder.finish())
            self.encoder = None
        elif self.parts:
            whole = np.concatenate(self.parts, axis=1)
            data = await anyio.to_thread.run_sync(audio.encode_whole, whole, self.c.spec, self.s.st.native_rate)
            await self.bytes_out(data)
        await self.s.send({"type": "audio.done", "utterance_index": self.u.index, "sentence_index": self.current,
                           "total_bytes": self.bytes, "error": failed})
        self.current = -1


@router.websocket("/v1/audio/speech/stream")
async def speech_stream(ws: WebSocket) -> None:
    await ws.accept()
    await Session(ws, ws.app.state.server).run()
