"""`POST /v1/chat/completions`: OpenAI's chat completions, with the reply spoken when `modalities` asks for audio.

Owns: the route: the body read (JSON only, its size and shape bounded before it is parsed: jsonbody.py), then
in a worker thread checked (chat_schema.py), refused on a card that is no chat card (404 naming it: its request
takes no `messages`), and submitted as the chat card's request fields (the runtime parses them into the
family's typed request, once; a `RequestError` is a 400 naming the parameter the client sent, overload a
429 with Retry-After, a closed runtime a 503); the answer: the whole `chat.completion` (the spoken reply's
file encoded in a worker thread, base64, in `audio.format`) or, with `stream: true`, SSE chunks
(chat_stream.py) over a response that cancels the request when the client leaves. A chat card's served
names (`chat_names`): OpenAI's speaking chat models as its aliases in place of the speech models'. On a chat
card, the speech routes' refusals (`refusals`, put before them when the app is made).
Must not know: the engine's internals, any family, how formats are encoded (audio.py), how chunks are framed.
"""

from __future__ import annotations

import base64
from dataclasses import replace
from typing import Any

import anyio
from fastapi import APIRouter, Request, Response, WebSocket
from fastapi.responses import JSONResponse

from v2.errors import FieldError, OverloadedError, RequestError
from v2.server import audio
from v2.server.audio import Encoder
from v2.server.chat_schema import CHAT, ChatBody, ChatPlan, chat_only, field_param, is_chat_card, not_chat, \
    parse_chat, plan_chat, request_fields
from v2.server.chat_stream import Answer, chat_body, completion
from v2.server.errors import ApiError
from v2.server.speech import read_json
from v2.server.schema import OPENAI_MODELS
from v2.server.state import ServerConfig, ServerState, server_state
from v2.server.streaming import WatchedStreamingResponse, good_whole_result

router = APIRouter()
refusals = APIRouter()  # put before the speech routes on a chat card: it speaks its own reply, never a given text
SPEECH_ROUTES = ("/v1/audio/speech", "/v1/audio/speech/batch")
STREAM = "/v1/audio/speech/stream"
PROTOCOL = "v2.speech"  # the stream's subprotocol, echoed when offered (ws.py)
OPENAI_CHAT_MODELS = ("gpt-4o-audio-preview", "gpt-4o-mini-audio-preview", "gpt-audio", "gpt-audio-mini")
MAX_MEMBERS = 4096  # a conversation's messages and parts: more than a speech body's


def chat_names(config: ServerConfig) -> ServerConfig:
    """A chat card's served names: OpenAI's speaking chat models in place of its speech models, where the
    config holds OpenAI's names (`--no-openai-aliases` leaves them out)."""
    if not set(OPENAI_MODELS) & set(config.model_names):
        return config
    names = [n for n in config.model_names if n not in OPENAI_MODELS]
    return replace(config, model_names=tuple(names + [n for n in OPENAI_CHAT_MODELS if n not in names]))


def _accept(st: ServerState, raw: bytes, content_type: str) -> tuple[ChatPlan, Encoder | None, Any]:
    """Parse, check and submit, in a worker thread (base64 recordings in the body, the family's rendering and
    tokenising must not hold up the event loop): the plan, the stream's pcm16 encoder (spoken streams only,
    made before submitting: nothing can fail between submit and the response) and the handle."""
    body, messages = parse_chat(read_json(raw, content_type, known=ChatBody.model_fields, max_members=MAX_MEMBERS))
    if not is_chat_card(st.runtime.request_fields):
        raise not_chat(st.runtime.card.name)
    p = plan_chat(body, messages, st.config.model_names, tuple(st.runtime.speakers))
    encoder = None
    if p.streaming and p.audio:
        spec = audio.output_spec("pcm", None, st.native_rate, st.native_channels)
        encoder = audio.make_encoder(spec, st.native_rate, st.native_channels, streaming=True)
    try:
        handle = st.runtime.submit(request_fields(p))  # parsed once, into the family's typed request, there
    except (RequestError, FieldError) as e:  # a refusal of the family's: its field, the client's parameter
        message = str(e)
        param = field_param(e.field, message, p)
        if param is not None and e.field is not None and message.startswith(e.field + ":"):
            message = param + message[len(e.field):]
        raise ApiError(400, message, param=param, code="invalid_value") from None
    except OverloadedError as e:
        raise ApiError(429, f"the server is busy: {e}", code="overloaded",
                       headers={"Retry-After": str(st.config.retry_after_s)}) from None
    except RuntimeError as e:  # the runtime is closed
        raise ApiError(503, f"the runtime is not taking requests: {e}", code="shutting_down") from None
    handle.on_done(st.metrics.observe)
    return p, encoder, handle


@router.post(CHAT)
async def create_chat_completion(request: Request) -> Response:
    st = server_state(request)
    raw = await request.body()
    p, encoder, handle = await anyio.to_thread.run_sync(_accept, st, raw, request.headers.get("content-type", ""))
    answer = Answer(model=p.body.model, spoken=p.audio)
    if p.streaming:
        body = chat_body(handle, answer, encoder, include_usage=p.include_usage)
        st.metrics.streams.inc()
        handle.on_done(lambda _: st.metrics.streams.dec())
        return WatchedStreamingResponse(body, on_disconnect=handle.cancel, media_type="text/event-stream",
                                        headers={"Cache-Control": "no-cache", "X-Request-Id": str(handle.request_id)})
    result = await good_whole_result(handle, request.receive)
    if result is None:
        return Response(status_code=499)  # the client left; nobody reads this
    data = None
    if p.audio:
        spec = audio.output_spec(p.format, None, st.native_rate, st.native_channels)
        encoded = await anyio.to_thread.run_sync(audio.encode_whole, result.audio, spec, result.sample_rate)
        data = base64.b64encode(encoded).decode()
    return JSONResponse(completion(answer, result, handle, data), headers={"X-Request-Id": str(handle.request_id)})


async def _refused(request: Request) -> Response:
    raise chat_only(server_state(request).runtime.card.name)


for _path in SPEECH_ROUTES:
    refusals.add_api_route(_path, _refused, methods=["POST"], include_in_schema=False)


@refusals.websocket(STREAM)
async def _refused_stream(ws: WebSocket) -> None:
    """The speech stream on a chat card: taken, one `error` naming /v1/chat/completions, closed (1008)."""
    error = chat_only(ws.app.state.server.runtime.card.name)
    await ws.accept(subprotocol=PROTOCOL if PROTOCOL in ws.scope.get("subprotocols", ()) else None)
    await ws.send_json({"type": "error", "message": error.message, "param": error.param, "code": error.code})
    await ws.close(code=1008, reason="a chat model: use /v1/chat/completions")
