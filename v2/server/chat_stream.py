"""Chat completion answers over a request's handle: the whole `chat.completion`, or its `chat.completion.chunk`s
as SSE.

Owns: one request's text deltas (`TextDelta`s its loops publish, whatever loop makes them) and audio chunks
merged on the event loop as they come (`replies`, through interleave.py); the streamed body, OpenAI's way: a
first chunk with the role, then `delta.content` (text only) or `delta.audio.transcript` and `delta.audio.data`
(pcm16, 24 kHz mono s16le, base64, whatever format the body asked for), the audio's `id` with its first delta and its
`expires_at` alone as its last, a chunk with `finish_reason`, with `stream_options.include_usage` a last chunk of
`usage` and no choices (and `usage: null` on the others), then `data: [DONE]`; a request that ends badly
after the answer started: one `data: {"error": ...}` block and no `[DONE]`. The transcript streamed is the
result's text (what the deltas missed is sent before the end). The whole answer's message (`content`, or
`audio: {id, data, transcript, expires_at}` with `content: null` when it is spoken), `finish_reason` and
`usage` (prompt and completion tokens, the completion's text and audio tokens).
Must not know: the engine's internals, request mapping, routes, how formats are encoded (audio.py).
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from v2.contracts import AudioChunk
from v2.events import TextDelta
from v2.server.audio import Encoder
from v2.server.interleave import interleave
from v2.server.streaming import bad_ending, final_result


@dataclass(frozen=True)
class Answer:
    """What names one answer: its id, when it was made, the model as the client named it, its audio's id."""

    model: str
    spoken: bool
    id: str = field(default_factory=lambda: "chatcmpl-" + secrets.token_hex(12))
    created: int = field(default_factory=lambda: int(time.time()))
    audio_id: str = field(default_factory=lambda: "audio_" + secrets.token_hex(12))

    @property
    def expires_at(self) -> int:
        """The server keeps no audio to name in a later turn (a later turn gives the transcript as content): the
        audio is gone when the answer is made."""
        return self.created


def result_text(result: Any, handle: Any) -> tuple[str, int]:
    """The reply's text and its token count: the result's, else what its text deltas held."""
    deltas = [e.item for e in handle.events() if isinstance(e.item, TextDelta)]
    text = getattr(result, "text", None)
    ids = getattr(result, "text_ids", None)
    return (text if text is not None else "".join(d.text for d in deltas),
            len(ids) if ids is not None else sum(len(d.ids) for d in deltas))


def finish_reason(result: Any, spoken: bool) -> str:
    """OpenAI's: `length` when the text (or, spoken, the speech) hit its cap, else `stop`."""
    text_end = getattr(result, "text_finish_reason", None) or result.finish_reason
    return "length" if text_end == "length" or (spoken and result.finish_reason == "length") else "stop"


def usage(result: Any, text_tokens: int, spoken: bool) -> dict[str, Any]:
    audio_tokens = int(result.metrics.frames) if spoken else 0
    prompt = int(result.metrics.prompt_rows)
    completion = text_tokens + audio_tokens
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "completion_tokens_details": {"text_tokens": text_tokens, "audio_tokens": audio_tokens,
                                          "reasoning_tokens": 0}}


def completion(answer: Answer, result: Any, handle: Any, audio_data: str | None) -> dict[str, Any]:
    """The whole answer (`chat.completion`); `audio_data`: the spoken reply's file, base64 (spoken only)."""
    text, tokens = result_text(result, handle)
    message: dict[str, Any] = {"role": "assistant", "content": None if answer.spoken else text, "refusal": None}
    if answer.spoken:
        message["audio"] = {"id": answer.audio_id, "data": audio_data or "", "transcript": text,
                            "expires_at": answer.expires_at}
    return {"id": answer.id, "object": "chat.completion", "created": answer.created, "model": answer.model,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": finish_reason(result, answer.spoken)}],
            "usage": usage(result, tokens, answer.spoken)}


def replies(handle: Any) -> AsyncIterator[TextDelta | AudioChunk]:
    """The request's text deltas (whatever loop makes them) and audio chunks, each as it arrives, on the event
    loop; every text delta made before the request ended comes before the end. Stopping early cancels the
    request; a read error ends it quietly (the request cancelled: the final result says so, in-band)."""
    return interleave(handle, lambda e: e.item if isinstance(e.item, TextDelta) else None, raise_read_error=False)


def sse(payload: dict[str, Any] | str) -> bytes:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n".encode()


async def chat_body(handle: Any, answer: Answer, encoder: Encoder | None, *,
                    include_usage: bool) -> AsyncIterator[bytes]:
    """The streamed answer's SSE blocks. `encoder`: pcm16 for the spoken deltas (None: text only)."""
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        out: dict[str, Any] = {"id": answer.id, "object": "chat.completion.chunk", "created": answer.created,
                               "model": answer.model, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                                                   "finish_reason": finish}]}
        if include_usage:
            out["usage"] = None
        return sse(out)

    named = False

    def spoken(audio: dict[str, Any]) -> bytes:  # the audio's first delta names it
        nonlocal named
        out = audio if named else {"id": answer.audio_id, **audio}
        named = True
        return chunk({"audio": out})

    def said(text: str) -> bytes:
        return spoken({"transcript": text}) if answer.spoken else chunk({"content": text})

    sent: list[str] = []
    yield chunk({"role": "assistant", "content": None if answer.spoken else "", "refusal": None})
    try:
        async for item in replies(handle):
            if isinstance(item, TextDelta):
                if item.text:
                    sent.append(item.text)
                    yield said(item.text)
                continue
            data = encoder.feed(item.audio) if encoder is not None else b""
            if data:
                yield spoken({"data": base64.b64encode(data).decode()})
        result = await final_result(handle)
        message = bad_ending(result)
        if message is not None:
            yield sse({"error": {"message": message, "type": "server_error", "param": None,
                                 "code": result.finish_reason}})
            return
        text, tokens = result_text(result, handle)
        streamed = "".join(sent)
        if text != streamed and text.startswith(streamed):  # what the deltas did not carry
            yield said(text[len(streamed):])
        if encoder is not None:
            tail = encoder.finish()
            if tail:
                yield spoken({"data": base64.b64encode(tail).decode()})
            yield spoken({"expires_at": answer.expires_at})  # the last audio delta: its expiry alone
        yield chunk({}, finish_reason(result, answer.spoken))
        if include_usage:
            yield sse({"id": answer.id, "object": "chat.completion.chunk", "created": answer.created,
                       "model": answer.model, "choices": [], "usage": usage(result, tokens, answer.spoken)})
        yield sse("[DONE]")
    finally:
        handle.cancel()
