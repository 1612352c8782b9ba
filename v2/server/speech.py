"""`POST /v1/audio/speech`: an OpenAI speech request in, audio out (streamed, SSE, or the whole file).

Owns: reading the body (JSON only: 415 otherwise; 400 for malformed JSON, or JSON too deep or with too many
members, refused before it is parsed: jsonbody.py), then in a worker thread (the event loop never waits on
parsing, reference audio or the runtime) planning it (schema.py), resolving the voice (a speaker of the
checkpoint, a stored voice, or an OpenAI name; a context turn's stored voice: voices.py), having the family
map the params onto its request's fields (`FamilyParams.request`), submitting those (the runtime parses them
into the family's typed request, once), mapping refusals (a `RequestError` -> 400 naming the OpenAI param by its
`field` through the family's table, overload -> 429 with Retry-After, a closed runtime -> 503), recording
every request's result in the metrics, and choosing the response: a watched stream (every format, unless
`stream: false`) or the whole file with its Content-Length, rate, channels and timings in headers; with word
timestamps (timestamps.py), SSE events of each sentence's words, or one JSON answer of the audio and its words.
Must not know: the engine's internals, how formats are encoded (audio.py), how bodies stream (streaming.py).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Collection, Mapping

import anyio
from fastapi import APIRouter, Request, Response

from v2.errors import OverloadedError, RequestError
from v2.params import FamilyParams
from v2.server import audio
from v2.server import captioned as captioned_speech
from v2.server.audio import Encoder
from v2.server.chat_schema import refuse_chat_card
from v2.server.errors import ApiError, runtime_field_error
from v2.server.jsonbody import MAX_MEMBERS, read_object
from v2.server.schema import SpeechBody, SpeechPlan, family_params, param_names, parse_body, plan, resolved
from v2.server.state import ServerState, server_state
from v2.server.streaming import WatchedStreamingResponse, audio_body, good_whole_result
from v2.server.timestamps import ask, captioned, has_aligner, plan_words

router = APIRouter()


def read_json(raw: bytes, content_type: str, *, known: Collection[str] = SpeechBody.model_fields,
              max_members: int = MAX_MEMBERS, lists: Mapping[str, int] | None = None) -> dict[str, Any]:
    """A JSON object body (415 for another type; jsonbody.py's bounds, `max_members` and `lists` of them)."""
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise ApiError(415, f"the body must be application/json, not {content_type or 'unlabelled'}",
                       code="unsupported_media_type")
    return read_object(raw, known=known, max_members=max_members, lists=lists)


def _accept(st: ServerState, raw: bytes, content_type: str) -> tuple[SpeechPlan, Encoder | None, Any]:
    """Parse, plan, resolve the voice and submit: in a worker thread (JSON of megabytes, base64 reference
    audio, a store lookup and the runtime's tokenising must not hold up the event loop). The plan, the
    stream's encoder (made before submitting: nothing can fail between submit and the response) and the handle."""
    return accept_body(st, read_json(raw, content_type))


def accept_body(st: ServerState, body: dict[str, Any],
                adjust: Callable[[SpeechPlan], SpeechPlan] | None = None) -> tuple[SpeechPlan, Encoder | None, Any]:
    """`_accept` of a body read already (`adjust`: what a route makes of the plan before it is submitted)."""
    family = family_params(st.runtime)
    p = plan(parse_body(body), st.config.limits(), native_rate=st.native_rate,
             native_channels=st.native_channels, takes=family.takes)
    p = adjust(p) if adjust is not None else p
    p = plan_words(p, has_aligner(st.runtime))  # `timestamps`: refused without an aligner; no raw stream of them
    encoder = audio.make_encoder(p.spec, st.native_rate, st.native_channels, streaming=True) if p.streaming else None
    return p, encoder, submit_plan(st, family, p)


def submit_plan(st: ServerState, family: FamilyParams, p: SpeechPlan) -> Any:
    """Resolve a plan's voice, have the family map it onto its request and submit that: the handle (its result
    recorded in the metrics). Refusals are ApiErrors: a field (400, named as the client sent it), overload
    (429), a closed runtime (503). In a worker thread (a store lookup, the runtime's tokenising)."""
    # + a speaker, a stored voice, or neither; a context turn's stored voice as its codes and transcript
    given = resolved(p, st.voices.voice_fields(p.voice), stored=st.voices.turn_voice)
    fields = ask(family.request(p.params, given), p.params.timestamps is not None)  # + the aligner's field
    try:
        handle = st.runtime.submit(fields)  # parsed once, into its typed request, there
    except RequestError as e:
        raise runtime_field_error(e, {**param_names(family, p.params), "timestamps": "timestamps"}) from None
    except OverloadedError as e:
        raise ApiError(429, f"the server is busy: {e}", code="overloaded",
                       headers={"Retry-After": str(st.config.retry_after_s)}) from None
    except RuntimeError as e:  # the runtime is closed
        raise ApiError(503, f"the runtime is not taking requests: {e}", code="shutting_down") from None
    handle.on_done(st.metrics.observe)
    return handle


@router.post("/v1/audio/speech")
async def create_speech(request: Request) -> Response:
    st = server_state(request)
    raw = await request.body()
    p, encoder, handle = await anyio.to_thread.run_sync(_accept, st, raw, request.headers.get("content-type", ""))
    return await answer(st, request, p, encoder, handle)


@router.post(captioned_speech.PATH)
async def create_captioned_speech(request: Request) -> Response:
    """Kokoro-FastAPI's captioned speech (captioned.py): the whole answer as JSON, the words beside the audio."""
    st = server_state(request)
    raw, ctype = await request.body(), request.headers.get("content-type", "")
    def accept() -> tuple[SpeechPlan, Encoder | None, Any]:
        refuse_chat_card(st.runtime)  # a chat card speaks its own reply: /v1/chat/completions
        return accept_body(st, captioned_speech.speech_body(read_json(raw, ctype, known=captioned_speech.KNOWN)))
    p, encoder, handle = await anyio.to_thread.run_sync(accept)
    return await answer(st, request, p, encoder, handle, captions=True)


async def answer(st: ServerState, request: Request, p: SpeechPlan, encoder: Encoder | None, handle: Any,
                 captions: bool = False) -> Response:
    """The response to a submitted plan: streamed (with SSE, each sentence's words where asked), or whole: the
    file, or with `timestamps` (or `captions`: the captioned-speech path) the JSON of Kokoro-FastAPI's captioned
    speech, the audio in base64 beside the words."""
    spec = p.spec
    headers = {"X-Sample-Rate": str(spec.sample_rate), "X-Channels": str(spec.channels),
               "X-Request-Id": str(handle.request_id)}
    if spec.format in ("pcm", "wav", "flac"):
        headers["X-Bits-Per-Sample"] = "16"
    if encoder is not None:
        media = "text/event-stream" if p.sse else audio.CONTENT_TYPES[spec.format]
        if p.sse:
            headers["Cache-Control"] = "no-cache"
        body_iter = audio_body(handle, encoder, sse=p.sse, offload=spec.format not in audio.CHEAP,
                               words=p.sse and p.params.timestamps is not None)
        st.metrics.streams.inc()
        handle.on_done(lambda _: st.metrics.streams.dec())
        return WatchedStreamingResponse(body_iter, on_disconnect=handle.cancel, media_type=media, headers=headers)
    result = await good_whole_result(handle, request.receive)
    if result is None:
        return Response(status_code=499)  # the client left; nobody reads this
    data = await anyio.to_thread.run_sync(audio.encode_whole, result.audio, spec, result.sample_rate)
    m = result.metrics
    headers.update({"X-Finish-Reason": result.finish_reason, "X-Audio-Seconds": f"{m.audio_seconds:.4f}",
                    "X-Frames": str(m.frames)})
    if m.ttfa_s is not None:
        headers["X-TTFA-Ms"] = f"{m.ttfa_s * 1e3:.1f}"
    if captions or p.params.timestamps is not None:
        words = list(result.words) if p.params.timestamps is not None else None
        body = json.dumps(captioned(data, audio.CONTENT_TYPES[spec.format], words)) + "\n"  # one JSON line
        return Response(body, media_type="application/json", headers=headers)
    return Response(data, media_type=audio.CONTENT_TYPES[spec.format], headers=headers)

