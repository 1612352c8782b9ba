"""Response bodies over a request's handle: raw audio bytes or SSE events as chunks arrive, or the whole result.

Owns: the streamed body (each chunk encoded as it arrives, in a worker thread for the costly formats; SSE
`speech.audio.delta` events with base64 audio and exactly one `speech.audio.done` with OpenAI's `usage`, each
one `data:` block with its type in the JSON; with word timestamps, a `speech.timestamps` event per sentence
once the audio its words span has gone out), what a stream does when its request ends badly (SSE: an `error`
event; raw audio: the connection is cut without the closing chunk, so the client sees a truncated body, not a
short file), a streaming response that watches the socket so a client that leaves cancels its request at
once, and waiting for a whole result while watching for the same.
Must not know: the engine's internals, request mapping, routes.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from typing import Any, AsyncIterator, Callable

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from v2.events import SentenceWords
from v2.server.audio import Encoder
from v2.server.errors import ApiError
from v2.server.timestamps import EVENT, merged, sentence_json

log = logging.getLogger("v2.server")
GOOD_ENDINGS = ("stop", "length")


class StreamAborted(Exception):
    """The request ended with abort or error after the response had started."""


def sse_event(kind: str, payload: dict[str, Any]) -> bytes:
    """One SSE block, OpenAI's way: a single `data: {json}` line whose `type` names the event, then a blank
    line; no `event:` line (parsers that split on blank lines and keep `data:` blocks find every event)."""
    return f"data: {json.dumps({'type': kind, **payload})}\n\n".encode()


def bad_ending(result: Any) -> str | None:
    """How a request that ended badly ended (and why, where the runtime says); None for a good ending."""
    if result.finish_reason in GOOD_ENDINGS:
        return None
    return f"the request ended with {result.finish_reason}" + (f": {result.error}" if result.error else "")


def ending_error(result: Any) -> ApiError | None:
    """A bad ending as the client's error: 503 for an abort, 500 otherwise, naming it; None for a good one."""
    message = bad_ending(result)
    if message is None:
        return None
    return ApiError(503 if result.finish_reason == "abort" else 500, message, code=result.finish_reason)


async def final_result(handle: Any) -> Any:
    """The handle's result once its chunks are consumed (waiting in a worker thread if it is not set yet)."""
    if handle.done:
        return handle.result()
    return await anyio.to_thread.run_sync(handle.result)


async def _run(fn: Callable[..., bytes], *args: Any, offload: bool) -> bytes:
    return await anyio.to_thread.run_sync(fn, *args) if offload else fn(*args)


def _spoken(s: SentenceWords, sent_s: float) -> bool:
    """The sentence's words lie in the audio sent so far (`sent_s` seconds)."""
    return not s.words or s.words[-1].end <= sent_s + 1e-9


async def audio_body(handle: Any, encoder: Encoder, *, sse: bool, offload: bool,
                     words: bool = False) -> AsyncIterator[bytes]:
    """The streamed body; the request is cancelled when the body stops early for any reason. `words` (SSE): each
    aligned sentence's `speech.timestamps` event, after the audio its words span."""
    wrap: Callable[[bytes], bytes] = (lambda b: sse_event("speech.audio.delta", {"audio": base64.b64encode(b).decode()})
                                      ) if sse else (lambda b: b)
    held: list[SentenceWords] = []
    try:
        async for item in (merged(handle, True) if words else handle):
            if isinstance(item, SentenceWords):
                held.append(item)
            else:
                data = await _run(encoder.feed, item.audio, offload=offload)
                if data:
                    yield wrap(data)
            while held and _spoken(held[0], encoder.samples / encoder.spec.sample_rate):  # the samples encoded
                yield sse_event(EVENT, sentence_json(held.pop(0)))
        result = await final_result(handle)
        message = bad_ending(result)
        if message is not None:
            if not sse:
                raise StreamAborted(message)
            yield sse_event("error", {"error": {"message": message, "type": "server_error", "param": None,
                                                "code": result.finish_reason}})
            return
        tail = await _run(encoder.finish, offload=offload)
        if tail:
            yield wrap(tail)
        for rest in held:
            yield sse_event(EVENT, sentence_json(rest))
        if sse:
            m = result.metrics
            yield sse_event("speech.audio.done", {"usage": {"input_tokens": m.prompt_rows, "output_tokens": m.frames,
                                                            "total_tokens": m.prompt_rows + m.frames}})
    finally:
        handle.cancel()  # idempotent; a finished request is left as it is


class WatchedStreamingResponse(StreamingResponse):
    """A streaming response that listens for the client leaving while it streams, and says so at once."""

    def __init__(self, content: AsyncIterator[bytes], *, on_disconnect: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.on_disconnect = on_disconnect

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as group:
            async def stream() -> None:
                try:
                    await self.stream_response(send)
                except OSError:
                    self.on_disconnect()
                except StreamAborted as e:  # leave without the closing chunk: the client sees a cut body
                    log.warning("stream cut: %s", e)
                group.cancel_scope.cancel()

            group.start_soon(stream)
            await self.listen_for_disconnect(receive)
            self.on_disconnect()
            group.cancel_scope.cancel()


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def whole_result(handle: Any, receive: Receive) -> Any | None:
    """The request's result, or None if the client left first (the request is then cancelled)."""
    async def consume() -> Any:
        async for _ in handle:
            pass
        return await final_result(handle)

    result_task = asyncio.ensure_future(consume())
    watch_task = asyncio.ensure_future(_disconnected(receive))
    try:
        done, _ = await asyncio.wait({result_task, watch_task}, return_when=asyncio.FIRST_COMPLETED)
        return result_task.result() if result_task in done else None
    finally:
        watch_task.cancel()
        result_task.cancel()
        handle.cancel()


async def good_whole_result(handle: Any, receive: Receive) -> Any | None:
    """`whole_result`, and a request that ended badly as the client's error: 503 for an abort, 500 otherwise,
    naming how it ended (and why, where the runtime says)."""
    result = await whole_result(handle, receive)
    error = None if result is None else ending_error(result)
    if error is not None:
        raise error
    return result
