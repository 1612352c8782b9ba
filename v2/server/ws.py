"""`/v1/audio/speech/stream`: text in over a WebSocket as it is written, audio out sentence by sentence.

Owns: the session of one connection in vllm-omni's protocol (designs/server.md has the messages and events):
reading messages (ws_messages.py: bounded before parsing, every string encodable; a bad one gets an `error`
naming its field and ends nothing), the config (ws_config.py), the utterances and their order, cancelling one
(`input.cancel`), the conversation a family that takes `context` holds, the pre-config timeout, and leaving
(a client that goes is logged in one line, never a traceback; what it held is freed).
Each utterance is one open request (`Runtime.open`), opened when the config is taken: that open is the
config's last check (the family's own: sampling ranges, limits, the reference recording decoded), made
before `session.ready`, so a refused config gets an `error` and the session keeps its previous config (and
its opened utterance), or none. Pieces are fed as they come (`split_granularity` "none": held until
`input.done`), its sentences are the request's segments, its audio goes out by ws_speak.py.
After `input.done` the utterance is spoken while the session goes on reading: `input.cancel` is taken at
once; every other message waits, in order, until the utterance's `session.done`.
A conversation, for a family that takes `context` (`FamilyParams.takes`): the session holds earlier turns
(the config's `context`, turns a `context.append` adds, and each utterance it spoke, its codes with its
text), at most `conversation_turns` turns and `conversation_seconds` of their audio, the oldest dropped, and
more of the oldest while the family refuses them as too long (conversation.py makes turns ready).
The API key, the Origin rule and draining apply at the handshake (middleware.py).
Must not know: the engine's internals, how formats are encoded (audio.py), how the text is cut (the family).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import anyio
from fastapi import APIRouter, WebSocket
from starlette.websockets import WebSocketDisconnect, WebSocketDisconnected

from v2.errors import OverloadedError, RequestError
from v2.params import ResolvedTurn
from v2.server.conversation import appended_turn, bounded
from v2.server.errors import ApiError, runtime_field_error
from v2.server.state import ServerState
from v2.server.streaming import GOOD_ENDINGS
from v2.server import ws_config
from v2.server.ws_config import Config
from v2.server.ws_messages import KINDS, read_message
from v2.server.ws_speak import Cancelled, Gone, Sentences, Utterance, cancelled_events

router = APIRouter()
log = logging.getLogger("v2.server")
LEFT = (WebSocketDisconnect, WebSocketDisconnected, OSError)  # what a send or receive raises once the client left
MAX_WAITING = 256  # messages held while an utterance is spoken (more: refused, naming `message`)


class Session:
    def __init__(self, ws: WebSocket, st: ServerState) -> None:
        self.ws, self.st = ws, st
        self.config: Config | None = None
        self.utterance: Utterance | None = None  # opened, being written, or being spoken
        self.count = 0  # utterances begun
        self.history: list[ResolvedTurn] = []  # the conversation so far (a family that takes context)
        self.lock = asyncio.Lock()  # one send at a time; a cancel's events go out together
        self.hop = int(round(st.runtime.sample_rate / st.runtime.frame_rate))  # samples per frame
        self.finishing: asyncio.Task[None] | None = None  # the sender of the utterance being spoken after input.done
        self.waiting: list[tuple[dict[str, Any], int]] = []  # messages (and their sizes) held until it is spoken
        self.senders: set[asyncio.Task[None]] = set()
        self.gone = False

    # ----- out ------------------------------------------------------------------------------------
    async def send(self, message: dict[str, Any] | bytes, of: Utterance | None = None) -> None:
        """Send one message; `of`: the utterance it belongs to (Cancelled once that is cancelled)."""
        async with self.lock:
            await self._send(message, of)

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

    async def error(self, message: str, param: str | None = None, code: str = "invalid_value",
                    of: Utterance | None = None) -> None:
        await self.send({"type": "error", "message": message, "param": param, "code": code}, of)

    # ----- in -------------------------------------------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        limit = self.st.config.ws_config_timeout_s
        deadline = loop.time() + limit
        receiving: asyncio.Future[Any] | None = None
        try:
            while True:
                if self.finishing is None and self.waiting and await self.replay():
                    return
                if receiving is None:
                    receiving = asyncio.ensure_future(self.ws.receive())
                waits: set[asyncio.Future[Any]] = {receiving} if self.finishing is None else {receiving, self.finishing}
                timeout = None if self.config is not None else max(0.0, deadline - loop.time())
                done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if not done:  # no config in time: an open-ended connection holds nothing longer
                    await self.error(f"session.config: none came within {limit:g} s of connecting; closing", "type",
                                     "config_timeout")
                    await self.ws.close(1008, "no session.config in time")
                    return
                if self.finishing is not None and self.finishing.done():
                    self.finishing = None
                if receiving in done:
                    msg, receiving = receiving.result(), None
                    if msg["type"] == "websocket.disconnect" or await self.take(msg):
                        return
        except (Gone, *LEFT) as e:
            log.info("speech stream: the client left (%s)", type(e).__name__)
        finally:
            if receiving is not None:
                receiving.cancel()
            await self.end()

    async def end(self) -> None:
        """The session is over: its requests cancelled (freed at the engine's next step), its senders ended."""
        if self.utterance is not None:
            self.utterance.handle.cancel()
        for task in list(self.senders):
            task.cancel()
        if self.senders:
            await asyncio.gather(*self.senders, return_exceptions=True)
        self.utterance, self.finishing, self.waiting, self.history = None, None, [], []

    async def take(self, msg: dict[str, Any]) -> bool:
        """One frame from the client; True once the session is over."""
        raw = msg.get("text")
        try:
            data = read_message(raw, self.st.config.max_body_bytes)
        except ApiError as e:
            await self.error(e.message, e.param, e.code or "invalid_value")
            return False
        if data.get("type") != "input.cancel" and (self.finishing is not None or self.waiting):
            size = len(raw or "")
            if len(self.waiting) >= MAX_WAITING or sum(n for _, n in self.waiting) + size > self.st.config.max_body_bytes:
                await self.error(f"message: {len(self.waiting)} messages already wait for the utterance being spoken "
                                 "(its session.done); send fewer", "message", "too_many_messages")
                return False
            self.waiting.append((data, size))  # taken, in order, once the utterance being spoken is
            return False
        return await self.handle(data)

    async def replay(self) -> bool:
        """The messages that waited for the last utterance, in order, until one starts another wait."""
        while self.waiting and self.finishing is None:
            data, _ = self.waiting.pop(0)
            if await self.handle(data):
                return True
        return False

    async def handle(self, msg: dict[str, Any]) -> bool:
        """One client message; True once the session is over."""
        kind = msg.get("type")
        try:
            if kind == "session.config":
                await self.take_config(msg)
            elif kind == "context.append":
                await self.append(msg)
            elif kind == "input.cancel":
                await self.cancel()
            elif kind in ("input.text", "input.done", "session.close"):
                if self.config is None:
                    await self.error(f"type: send session.config before {kind}", "type")
                elif kind == "input.text":
                    await self.text(msg.get("text"))
                elif kind == "input.done":
                    await self.done()
                else:
                    return await self.close(msg)
            else:
                await self.error(f"type: {str(kind)[:60]!r} is not one of {', '.join(KINDS)}", "type")
        except (Gone, Cancelled, *LEFT):
            raise
        except Exception as e:  # noqa: BLE001 - a bug of ours: said to the client, the session goes on
            log.exception("speech stream: %s failed", str(kind)[:60])
            await self.error(f"internal error: {type(e).__name__}", None, "internal_error")
        return False

    # ----- the config and the conversation --------------------------------------------------------
    async def take_config(self, msg: dict[str, Any]) -> None:
        """session.config: checked whole (REST's checks, then the family's as its first utterance opens), then
        session.ready; refused: an error, and the previous config (and its opened utterance) stays."""
        u = self.utterance
        if u is not None and u.begun:
            await self.error("session.config: an utterance is under way; send input.done first", "type")
            return
        try:
            config = await anyio.to_thread.run_sync(ws_config.configure, self.st, msg)
        except ApiError as e:
            await self.error(e.message, e.param, e.code or "invalid_value")
            return
        # a config's context replaces the conversation (kept as it was if the family refuses it)
        opened = await self.open(config, None if config.context is None else self.bounded(list(config.context)))
        if opened is None:
            return
        self.withdraw()
        self.config = config
        await self.send(ws_config.ready(config))
        self.start(*opened)

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
        if u is not None and u.begun:
            await self.error("context.append: an utterance is under way; send input.done first", "type")
            return
        try:
            turn = await anyio.to_thread.run_sync(appended_turn, self.st, msg)
        except ApiError as e:
            await self.error(e.message, e.param, e.code or "invalid_value")
            return
        opened = await self.open(self.config, self.bounded([*self.history, turn]))
        if opened is None:
            return
        self.withdraw()
        self.start(*opened)
        await self.send({"type": "context.appended", "context_turns": len(self.history)})

    def bounded(self, turns: list[ResolvedTurn]) -> list[ResolvedTurn]:
        return bounded(turns, self.st.config.conversation_turns, self.st.config.conversation_seconds,
                       float(self.st.runtime.frame_rate))

    # ----- utterances -----------------------------------------------------------------------------
    async def open(self, config: Config, history: list[ResolvedTurn] | None = None) -> tuple[Any, list[ResolvedTurn]] | None:
        """The next utterance's request under `config` (opened at once: references encode while its text is
        written), with the conversation as its context where the family takes one: `history`, a new one, kept
        only if the family takes it whole; without, the session's, less its oldest turns while the family
        refuses it as context (grown past the family's own caps). None (an error sent) when refused."""
        strict = history is not None
        turns = list(self.history if history is None else history) if config.takes_context else []
        while True:
            fields = config.request(tuple(turns) if turns else None)
            try:
                handle = await anyio.to_thread.run_sync(lambda: self.st.runtime.open(fields, split=config.split))
                return handle, turns
            except RequestError as e:
                err = runtime_field_error(e, config.names)
                if turns and not strict and err.param == "context":
                    turns = turns[1:]
                    continue
                await self.error(err.message, err.param)
            except OverloadedError as e:
                await self.error(f"the server is busy: {e}", None, "overloaded")
            except RuntimeError as e:
                await self.error(f"the runtime is not taking requests: {e}", None, "shutting_down")
            return None

    def start(self, handle: Any, turns: list[ResolvedTurn]) -> None:
        """The utterance opened becomes the session's next, its sender started."""
        self.history = turns
        handle.on_done(self.st.metrics.observe)
        u = self.utterance = Utterance(self.count, handle)
        self.count += 1
        u.sender = asyncio.create_task(self.speak(u))
        self.senders.add(u.sender)
        u.sender.add_done_callback(self.senders.discard)

    async def begin(self) -> Utterance | None:
        """The session's next utterance: the one opened, else a new one under the config."""
        u = self.utterance
        if u is not None and not u.begun and u.handle.done:  # it ended before any text (its idle timeout)
            self.withdraw()
            u = None
        if u is None:
            assert self.config is not None
            opened = await self.open(self.config)
            if opened is None:
                return None
            self.start(*opened)
        return self.utterance

    def withdraw(self) -> None:
        """The utterance opened for text that has not come: cancelled, nothing sent for it."""
        u = self.utterance
        if u is not None:
            u.silent = True
            u.handle.cancel()
            self.utterance = None

    async def text(self, piece: Any) -> None:
        if not isinstance(piece, str):
            await self.error("text: a string", "text")
            return
        u = await self.begin()
        if u is None:
            return
        limit = self.st.config.max_input_chars
        if len(u.text) + len(piece) > limit:
            await self.error(f"text: the utterance would be {len(u.text) + len(piece)} characters, over the limit of "
                             f"{limit}; send input.done", "text", "string_above_max_length")
            return
        assert self.config is not None
        if self.config.feeds_as_written:
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
        """input.done: the utterance's text is complete; it is spoken while the session reads on (session.done
        ends it). A text whose end is refused ends the utterance at once (the error, then its session.done)."""
        u = await self.begin()
        if u is None:
            return
        ok = True
        if u.held:
            held, u.held = "".join(u.held), []
            ok = await self.feed(u, held, False)
        u.ended = True
        if not (ok and await self.feed(u, "", True)):
            u.handle.cancel()  # said already: the sender closes it without another error
            u.refused = True
        self.finishing = u.sender

    async def cancel(self) -> None:
        """input.cancel: the utterance being written or spoken ends now. Its request is cancelled (its slots
        are freed at the engine's next step), nothing more of it is sent, and its closing events and the
        acknowledgement go out at once: `audio.done` of the open sentence and `session.done`, both
        `"cancelled": true`, then `input.cancelled`. With none under way: only `input.cancelled`,
        `"cancelled": false`."""
        u = self.utterance
        if u is None or not u.begun:
            await self.send({"type": "input.cancelled", "utterance_index": None, "cancelled": False})
            return
        u.cancelled = True  # from here no send of its sender goes out (they check it under the lock)
        u.handle.cancel()
        self.utterance = None
        if self.finishing is u.sender:
            self.finishing = None
        async with self.lock:  # after any send of its under way: the events below come after its last byte
            for event in cancelled_events(u):
                await self._send(event, None)
            await self._send({"type": "input.cancelled", "utterance_index": u.index, "cancelled": True}, None)

    async def close(self, msg: dict[str, Any]) -> bool:
        """session.close: the utterance being written is ended and spoken first; then the connection closes."""
        u = self.utterance
        if u is not None and u.begun and not u.ended:
            await self.done()
        if self.finishing is not None:
            self.waiting.insert(0, (msg, 0))  # taken again once the utterance is spoken
            return False
        await self.ws.close(1000)
        return True

    # ----- audio out ------------------------------------------------------------------------------
    async def speak(self, u: Utterance) -> None:
        """The utterance's audio, sentence by sentence as the handle's marks split it; then session.done. Sends
        nothing once it is cancelled, nor for one withdrawn or ended before the client began it."""
        config = self.config
        assert config is not None
        out = u.out = Sentences(self.send, u, config, self.hop, self.st.native_rate, self.st.native_channels)
        try:
            async for chunk in u.handle:
                await out.chunk(chunk.audio)
            result = await anyio.to_thread.run_sync(u.handle.result)
            if u.silent or not u.begun:  # withdrawn, or ended on its own before any text: the next text opens another
                return
            failed = result.finish_reason not in GOOD_ENDINGS
            if not failed and config.takes_context and u.text.strip():  # the next utterance's context
                codes = result.codes if len(result.codes) else None
                self.history = self.bounded([*self.history, ResolvedTurn(config.given.speaker, u.text, codes=codes)])
            await out.close(failed)
            if failed and not u.refused:
                await self.error(f"the utterance ended with {result.finish_reason}" +
                                 (f": {result.error}" if result.error else ""), None, result.finish_reason, u)
            await self.send({"type": "session.done", "utterance_index": u.index, "total_sentences": out.count}, u)
        except (Cancelled, Gone):
            pass
        except Exception:  # noqa: BLE001 - a bug of ours: logged; the session goes on
            log.exception("speech stream: speaking utterance %d failed", u.index)
        finally:
            u.handle.cancel()  # the client left, the send failed, it was cancelled: free it (a finished one is left)
            if self.utterance is u:
                self.utterance = None


@router.websocket("/v1/audio/speech/stream")
async def speech_stream(ws: WebSocket) -> None:
    await ws.accept()
    await Session(ws, ws.app.state.server).run()
