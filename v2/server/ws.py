"""`/v1/audio/speech/stream`: text in over a WebSocket as it is written, audio out sentence by sentence.

Owns: the session of one connection in vllm-omni's protocol (designs/server.md has the messages and events):
reading messages (ws_messages.py: bounded before parsing, every string encodable; a bad one gets an `error`
naming its field and ends nothing; a text frame that is not UTF-8 is uvicorn's to close, 1007, logged here
in one line), taking a config (ws_config.py) or a conversation turn, the order messages
are taken in, the pre-config timeout, and leaving (a client that goes is logged in one line, never a
traceback; what it held is freed). Its utterances are ws_utterances.py's, its sends ws_speak.py's `Outbox`.
Each utterance is one open request (`Runtime.open`), opened when the config is taken: that open is the
config's last check (the family's own: sampling ranges, limits, the reference recording decoded), made
before `session.ready`, so a refused config gets an `error` and the session keeps its previous config (and
its opened utterance), or none. Pieces are fed as they come (`split_granularity` "none": held until
`input.done`), its sentences are the request's segments, its audio goes out by ws_speak.py.
After `input.done` the utterance is spoken while the session goes on reading: `input.cancel` is taken at
once; every other message waits, in order, until the utterance's `session.done`.
A conversation, for a family that takes `context` (`FamilyParams.takes`): the session holds earlier turns
(the config's `context`, turns a `context.append` adds, and each utterance it spoke; conversation.py makes
turns ready, ws_utterances.py bounds them).
The API key, the Origin rule and draining apply at the handshake (middleware.py; a browser, which can set no
header there, offers the key as a subprotocol entry and `PROTOCOL` beside it, which is echoed back so the
browser takes the connection).
Must not know: the engine's internals, how formats are encoded (audio.py), how the text is cut (the family).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import anyio
from fastapi import APIRouter, WebSocket

from v2.server import ws_config
from v2.server.conversation import appended_turn
from v2.server.errors import ApiError
from v2.server.state import ServerState
from v2.server.ws_messages import KINDS, read_message
from v2.server.ws_speak import LEFT, Cancelled, Gone, Outbox
from v2.server.ws_utterances import Speaker

router = APIRouter()
log = logging.getLogger("v2.server")
PROTOCOL = "v2.speech"  # the subprotocol echoed back when offered (never the entry that carries the key)
MAX_WAITING = 256  # messages held while an utterance is spoken (more: refused, naming `message`)


class _NotUtf8(logging.Filter):
    """A text frame that is not UTF-8 is closed (1007) by uvicorn before the session sees it, and uvicorn logs
    it with a traceback: a client's behaviour, so one line here."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and str(record.msg).startswith("Invalid UTF-8 sequence received from client"):
            record.msg, record.args = "speech stream: the client sent a text frame that is not UTF-8 (closed: 1007)", ()
            record.exc_info, record.exc_text, record.levelno, record.levelname = None, None, logging.INFO, "INFO"
        return True


logging.getLogger("uvicorn.error").addFilter(_NotUtf8())


class Session:
    def __init__(self, ws: WebSocket, st: ServerState) -> None:
        self.ws, self.st = ws, st
        self.out = Outbox(ws)
        self.sp = Speaker(st, self.out)  # the config, the utterances, the conversation
        self.waiting: list[tuple[dict[str, Any], int]] = []  # messages (and their sizes) held while one is spoken

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        limit = self.st.config.ws_config_timeout_s
        deadline = loop.time() + limit
        receiving: asyncio.Future[Any] | None = None
        try:
            while True:
                if self.sp.finishing is None and self.waiting and await self.replay():
                    return
                if self.sp.config is None and loop.time() >= deadline:  # busy or not: no config in time
                    await self.out.error(f"session.config: none came within {limit:g} s of connecting; closing",
                                         "type", "config_timeout")
                    await self.ws.close(1008, "no session.config in time")
                    return
                if receiving is None:
                    receiving = asyncio.ensure_future(self.ws.receive())
                waits: set[asyncio.Future[Any]] = {receiving}
                if self.sp.finishing is not None:  # its end lets the messages that wait for it be taken
                    waits.add(self.sp.finishing)
                timeout = None if self.sp.config is not None else max(0.0, deadline - loop.time())
                done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if self.sp.finishing is not None and self.sp.finishing.done():
                    self.sp.finishing = None
                if receiving in done:
                    msg, receiving = receiving.result(), None
                    if msg["type"] == "websocket.disconnect" or await self.take(msg):
                        return
        except (Gone, *LEFT) as e:
            log.info("speech stream: the client left (%s)", type(e).__name__)
        finally:
            if receiving is not None:
                receiving.cancel()
            await self.sp.end()
            self.waiting = []

    async def take(self, msg: dict[str, Any]) -> bool:
        """One frame from the client; True once the session is over."""
        raw = msg.get("text")
        try:
            data = read_message(raw, self.st.config.max_body_bytes)
        except ApiError as e:
            await self.out.error(e.message, e.param, e.code or "invalid_value")
            return False
        if data.get("type") != "input.cancel" and (self.sp.finishing is not None or self.waiting):
            size = len(raw or "")
            held = sum(n for _, n in self.waiting) + size
            if len(self.waiting) >= MAX_WAITING or held > self.st.config.max_body_bytes:
                await self.out.error(f"message: {len(self.waiting)} messages already wait for the utterance being "
                                     "spoken (its session.done); send fewer", "message", "too_many_messages")
                return False
            self.waiting.append((data, size))  # taken, in order, once the utterance being spoken is
            return False
        return await self.handle(data)

    async def replay(self) -> bool:
        """The messages that waited for the last utterance, in order, until one starts another wait."""
        while self.waiting and self.sp.finishing is None:
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
                await self.sp.cancel(msg.get("played_ms"))
            elif kind in ("input.text", "input.done", "session.close"):
                if self.sp.config is None:
                    await self.out.error(f"type: send session.config before {kind}", "type")
                elif kind == "input.text":
                    await self.sp.text(msg.get("text"))
                elif kind == "input.done":
                    await self.sp.done()
                else:
                    return await self.close(msg)
            else:
                await self.out.error(f"type: {str(kind)[:60]!r} is not one of {', '.join(KINDS)}", "type")
        except (Gone, Cancelled, *LEFT):
            raise
        except Exception as e:  # noqa: BLE001 - a bug of ours: said to the client, the session goes on
            log.exception("speech stream: %s failed", str(kind)[:60])
            await self.out.error(f"internal error: {type(e).__name__}", None, "internal_error")
        return False

    async def take_config(self, msg: dict[str, Any]) -> None:
        """session.config: checked whole (REST's checks, then the family's as its first utterance opens), then
        session.ready; refused: an error, and the previous config (and its opened utterance) stays."""
        u = self.sp.utterance
        if u is not None and u.begun:
            await self.out.error("session.config: an utterance is under way; send input.done first", "type")
            return
        try:
            config = await anyio.to_thread.run_sync(ws_config.configure, self.st, msg)
        except ApiError as e:
            await self.out.error(e.message, e.param, e.code or "invalid_value")
            return
        # a config's context replaces the conversation (kept as it was if the family refuses it)
        opened = await self.sp.open(config, None if config.context is None else self.sp.bounded(list(config.context)))
        if opened is None:
            return
        self.sp.withdraw()
        self.sp.config = config
        try:
            await self.out.send(ws_config.ready(config))
        except BaseException:  # the client left (or the session ends) before ready: its request is not kept
            opened[0].cancel()
            raise
        self.sp.start(*opened)

    async def append(self, msg: dict[str, Any]) -> None:
        """context.append: one more turn of the conversation (the other party's), between utterances; the
        utterance opened already is opened again with it, which is how the family checks it (and drops the
        oldest turns while it refuses the conversation)."""
        if self.sp.config is None:
            await self.out.error("type: send session.config before context.append", "type")
            return
        if not self.sp.config.takes_context:
            await self.out.error("type: this model takes no conversation context (context.append)", "type",
                                 "unsupported")
            return
        u = self.sp.utterance
        if u is not None and u.begun:
            await self.out.error("context.append: an utterance is under way; send input.done first", "type")
            return
        try:
            turn = await anyio.to_thread.run_sync(appended_turn, self.st, msg)
        except ApiError as e:
            await self.out.error(e.message, e.param, e.code or "invalid_value")
            return
        # the oldest turns are dropped while the family refuses the conversation as too long, as when an
        # utterance opens; the new turn is refused only where the family refuses it alone
        opened = await self.sp.open(self.sp.config, self.sp.bounded([*self.sp.history, turn]), keep=1)
        if opened is None:
            return
        self.sp.withdraw()
        self.sp.start(*opened)
        await self.out.send({"type": "context.appended", "context_turns": len(self.sp.history)})

    async def close(self, msg: dict[str, Any]) -> bool:
        """session.close: the utterance being written is ended and spoken first; then the connection closes."""
        u = self.sp.utterance
        if u is not None and u.begun and not u.ended:
            await self.sp.done()
        if self.sp.finishing is not None:
            self.waiting.insert(0, (msg, 0))  # taken again once the utterance is spoken
            return False
        await self.ws.close(1000)
        return True


@router.websocket("/v1/audio/speech/stream")
async def speech_stream(ws: WebSocket) -> None:
    try:
        await ws.accept(subprotocol=PROTOCOL if PROTOCOL in ws.scope.get("subprotocols", ()) else None)
    except LEFT as e:  # gone during the handshake
        log.info("speech stream: the client left (%s)", type(e).__name__)
        return
    await Session(ws, ws.app.state.server).run()
