"""What `/openapi.json` publishes: FastAPI's description of the routes, amended to say what the server does.

Owns: the speech request body (`SpeechBody`'s JSON schema, `application/json`), the content types of its
200 (each `response_format`'s, `text/event-stream` for SSE), when it streams, and its headers, the batch's
body (`SpeechBatchBody`: SpeechBody's fields as defaults and `items`) and its JSON answer, the voice form's
`speaker_embedding` (FastAPI's form schema), the model
listing (with `seeded_noise`), the voice listing (both shapes), every error answer of every operation in
OpenAI's error shape (the gate's: 503 while draining and 500 on every operation, 401 on `/v1/*`, 403 on state-changing methods, 413 where a body is
taken; the routes' own: 400, 404, 409, 415, 429), `/metrics` as Prometheus text, `/health`'s 503; and no 422 (validation errors are answered as 400);
the speech stream's WebSocket as its handshake's GET, with its protocol (openapi_ws.py); chat completions
(openapi_chat.py); every field's bounds
as this server enforces them (openapi_body.py: built when asked for, from the server's config, its runtime's
card and family, its voices), SSE answers as events, DELETE's required `name`; word timestamps (the captioned
JSON answer and path, the SSE event, a batch item's words, the stream's: openapi_words.py).
Must not know: the engine, how the routes do their work.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from v2.runtime.family import VoiceEmbedding
from v2.voices.store import NAME as VOICE_NAME
from v2.server import openapi_chat
from v2.server import openapi_words as words
from v2.server.audio import CONTENT_TYPES
from v2.server.middleware import SAFE_METHODS
from v2.server.openapi_body import batch_item, bounded, context_turn, voice_form
from v2.server.openapi_ws import STREAM
from v2.server.openapi_ws import path_item as stream_path
from v2.server.openapi_ws import schemas as stream_schemas
from v2.server.schema import SpeechBody
from v2.server.timestamps import has_aligner

ERROR = {"$ref": "#/components/schemas/Error"}
_ERROR_SCHEMA = {
    "type": "object", "required": ["error"], "additionalProperties": False,
    "properties": {"error": {
        "type": "object", "required": ["message", "type", "param", "code"], "additionalProperties": False,
        "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                       "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}}}
_HEALTH_SCHEMA = {"type": "object", "required": ["status", "engine", "version"],
                  "properties": {"status": {"enum": ["ok", "draining", "unresponsive"]}, "engine": {"type": "string"},
                                 "version": {"type": "string"}}}
_MODEL = {"type": "object", "required": ["id", "object", "created", "owned_by", "seeded_noise", "chat"],
          "properties": {"id": {"type": "string"}, "object": {"enum": ["model"]}, "created": {"type": "integer"},
                         "owned_by": {"type": "string"},
                         "seeded_noise": {"type": "boolean", "description": "the weights are seeded (random): the "
                                          "audio is noise, not speech"},
                         "chat": {"type": "boolean", "description": "a chat model: it answers POST "
                                  "/v1/chat/completions (and speaks its own reply, never a given text)"}}}
_MODELS_SCHEMA = {"type": "object", "required": ["object", "data"],
                  "properties": {"object": {"enum": ["list"]}, "data": {"type": "array", "items": _MODEL}}}
_AUDIO_HEADERS = {name: {"description": doc, "schema": {"type": "string"}} for name, doc in (
    ("X-Sample-Rate", "samples per second"), ("X-Channels", "channels"), ("X-Request-Id", "the runtime's id"))}
_VOICE = {"type": "object", "required": ["id", "name", "kind"],
          "properties": {"id": {"type": "string"}, "name": {"type": "string"}, "kind": {"enum": ["speaker", "stored", "builtin"]}}}
_VOICES_SCHEMA = {"oneOf": [
    {"type": "object", "required": ["voices", "cloning"], "additionalProperties": False,
     "properties": {"voices": {"type": "array", "items": _VOICE}, "cloning": {"type": "boolean"}}},
    {"type": "object", "required": ["voices"], "additionalProperties": False, "description": "`?legacy=true`",
     "properties": {"voices": {"type": "array", "items": {"type": "string"}}}}]}
_SPEECH_200 = ("the audio, streamed as it is made in every format (chunked, no Content-Length) unless `stream` is "
               "false: then the whole file, with Content-Length, X-Finish-Reason, X-Audio-Seconds and X-Frames; or "
               "SSE events (`stream_format: sse`), each one `data: {json}` block whose `type` names it")
_INT = {"type": "integer", "minimum": 0}
_SSE_DATA = {"oneOf": [
    {"type": "object", "required": ["type", "audio"], "additionalProperties": False, "properties": {
        "type": {"const": "speech.audio.delta"}, "audio": {"type": "string", "contentEncoding": "base64",
                                                           "description": "the next bytes of the audio, base64"}}},
    {"type": "object", "required": ["type", "usage"], "additionalProperties": False, "properties": {
        "type": {"const": "speech.audio.done"}, "usage": {
            "type": "object", "required": ["input_tokens", "output_tokens", "total_tokens"],
            "properties": {"input_tokens": _INT, "output_tokens": _INT, "total_tokens": _INT}}}},
    {"type": "object", "required": ["type", "error"], "additionalProperties": False, "properties": {
        "type": {"const": "error"}, "error": _ERROR_SCHEMA["properties"]["error"]}},  # type: ignore[index]
    words.SSE_WORDS]}
_SSE_EVENT = {"type": "object", "required": ["data"], "description": "one SSE event: a `data:` line holding a JSON "
              "object whose `type` names it (no `event:` line)",
              "properties": {"data": {"type": "string", "contentMediaType": "application/json",
                                      "contentSchema": _SSE_DATA}}}
_BATCH_RESULT = {
    "type": "object", "required": ["index", "id", "status"],
    "properties": {"index": {"type": "integer", "description": "the item's place in `items`"},
                   "id": {"type": ["string", "null"], "description": "the item's `id`, as given"},
                   "status": {"enum": ["success", "error"]},
                   "audio_data": {"type": "string", "contentEncoding": "base64",
                                  "description": "the whole file in the item's response_format, base64"},
                   "media_type": {"type": "string"}, "response_format": {"type": "string"},
                   "sample_rate": {"type": "integer"}, "channels": {"type": "integer"},
                   "finish_reason": {"enum": ["stop", "length"]}, "audio_seconds": {"type": "number"},
                   "frames": {"type": "integer"}, "words": words.BATCH_WORDS,
                   "error": {**_ERROR_SCHEMA["properties"]["error"],  # type: ignore[index]
                             "description": "why this item failed (`param` names its field); the others ran"}}}
_BATCH_SCHEMA = {"type": "object", "required": ["id", "object", "results", "total", "succeeded", "failed"],
                 "properties": {"id": {"type": "string"}, "object": {"enum": ["speech.batch"]},
                                "results": {"type": "array", "items": _BATCH_RESULT},
                                "total": {"type": "integer"}, "succeeded": {"type": "integer"},
                                "failed": {"type": "integer"}}}
_BATCH_200 = ("every item's result in the order given, once all have ended: its audio (base64, in its "
              "response_format) or its error in OpenAI's shape; a bad item fails alone")
_BODY_ERRORS = {400: "a field is invalid (`param` names it), or the body is not a JSON object, or it is nested "
                     "too deep or has too many members"}

# the answers each route gives itself, beyond the gate's
ROUTE_ERRORS: dict[tuple[str, str], dict[int, str]] = {
    ("post", "/v1/audio/speech"): {
        **_BODY_ERRORS, 404: "`model` is not served here", 415: "the body is not application/json",
        429: "the server is busy (see Retry-After)"},
    ("post", words.CAPTIONED): {
        **_BODY_ERRORS, 404: "`model` is not served here", 415: "the body is not application/json",
        429: "the server is busy (see Retry-After)"},
    ("post", "/v1/audio/speech/batch"): {
        400: "`items` is missing, empty or over --max-batch-items, a request-level field is invalid (`param` "
             "names it), or the body is not a JSON object or is too complex",
        415: "the body is not application/json"},
    ("post", openapi_chat.CHAT): openapi_chat.CHAT_ERRORS,
    ("get", "/v1/audio/voices"): {400: "`legacy` is not a boolean"},
    ("post", "/v1/audio/voices"): {400: "a form field is missing or invalid (a `speaker_embedding` of the wrong "
                                        "width or with non-finite values; one this model takes none of), or this "
                                        "runtime has no voice store",
                                   409: "a voice of that name is stored already"},
    ("delete", "/v1/audio/voices"): {400: "no name given, or this runtime has no voice store",
                                     404: "no stored voice of that name"},
    ("delete", "/v1/audio/voices/{name}"): {400: "this runtime has no voice store",
                                            404: "no stored voice of that name"},
    ("get", STREAM): {403: "a handshake from another origin (any handshake is held to the Origin rule, as a "
                           "state-changing method is: see --allow-origin)",
                      404: "a plain GET, not a WebSocket handshake"},
}


def describe(app: FastAPI) -> dict[str, Any]:
    """The schema, built when asked for: the voices `voice` takes are those served then."""
    spec = get_openapi(title=app.title, version=app.version, routes=app.routes,
                       description="OpenAI-compatible speech. HEAD is answered wherever GET is.")
    amend(spec, app.state.server)
    return spec


def amend(spec: dict[str, Any], server: Any) -> None:
    """`server`: the app's `ServerState` (its config, runtime and voices bound the published fields)."""
    components = spec.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    components["Error"] = _ERROR_SCHEMA
    body = SpeechBody.model_json_schema(ref_template="#/components/schemas/{model}")
    components.update(body.pop("$defs", {}))
    components["ContextTurn"] = context_turn(components["ContextTurn"], server)
    body = bounded(body, server)
    components["SpeechBody"] = {**body, "title": "SpeechBody"}  # v2.params.SpeechParams, published as the body
    optional = batch_item(body)
    for name, form in components.items():
        if name.startswith("Body_add_voice"):
            components[name] = voice_form(form, isinstance(getattr(server.runtime, "family", None),
                                                           VoiceEmbedding))
    components["SpeechBatchItem"] = {
        **optional, "title": "SpeechBatchItem", "description": "one item: the fields of SpeechBody, each "
        "overriding the request-level one (`input` where none is given there), and an `id` echoed in its result",
        "properties": {**optional["properties"],
                       "id": {"type": ["string", "null"], "description": "echoed in the result"}}}
    whole = {"stream": {"anyOf": [{"const": False}, {"type": "null"}], "default": None,
                        "description": "a batch answers whole files: false or omitted"},
             "stream_format": {"type": "null", "default": None, "description": "a batch answers whole files: omit it"}}
    optional["properties"].update(whole)
    components["SpeechBatchItem"]["properties"].update(whole)
    components["SpeechBatchBody"] = {
        **optional, "title": "SpeechBatchBody", "required": ["items"],
        "description": "the fields of SpeechBody as every item's defaults (none required) and `items`; a batch "
                       "answers whole files (`stream: true` and `stream_format` are refused)",
        "properties": {**optional["properties"], "items": {
            "type": "array", "minItems": 1, "maxItems": server.config.max_batch_items,
            "items": {"$ref": "#/components/schemas/SpeechBatchItem"},
            "description": "the requests, run together; at most the server's --max-batch-items (default 32)"}}}
    components.update(stream_schemas(components["SpeechBody"], components["ContextTurn"]))
    components.update(openapi_chat.components(server))
    spec.setdefault("paths", {})[STREAM] = stream_path()
    aligner = has_aligner(server.runtime)
    words.stream_messages(spec, components, aligner)
    words.captioned_path(spec, components, aligner)
    for path, item in spec.get("paths", {}).items():
        for method, op in item.items():
            _amend_operation(path, method, op)
    words.speech_answer(spec, aligner)
    openapi_chat.refusals(spec, server)


def _amend_operation(path: str, method: str, op: dict[str, Any]) -> None:
    responses: dict[str, Any] = op.setdefault("responses", {})
    responses.pop("422", None)
    if (method, path) == ("post", "/v1/audio/speech"):
        op["requestBody"] = {"required": True, "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/SpeechBody"}}}}
        media: dict[str, Any] = {t: {"schema": {"type": "string", "format": "binary"}}
                                 for t in dict.fromkeys(CONTENT_TYPES.values())}
        media["text/event-stream"] = {"schema": _SSE_EVENT}
        responses["200"] = {"description": _SPEECH_200, "content": media, "headers": _AUDIO_HEADERS}
    elif (method, path) == ("post", "/v1/audio/speech/batch"):
        op["requestBody"] = {"required": True, "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/SpeechBatchBody"}}}}
        responses["200"] = {"description": _BATCH_200, "content": {"application/json": {"schema": _BATCH_SCHEMA}}}
    elif (method, path) == ("post", openapi_chat.CHAT):
        openapi_chat.operation(op)
    elif (method, path) == ("get", "/v1/audio/voices"):
        responses["200"] = {"description": "stored voices, then OpenAI's names; `?legacy=true`: the names alone",
                            "content": {"application/json": {"schema": _VOICES_SCHEMA}}}
    elif (method, path) == ("post", "/v1/audio/voices"):
        form = op.get("requestBody", {}).get("content", {}).get("multipart/form-data")
        if form is not None:
            form["encoding"] = {"audio_sample": {"contentType": "audio/wav"}}
    elif path.startswith("/v1/audio/voices") and method == "delete":
        for param in op.get("parameters", []):
            if param.get("name") == "name":
                param.update({"required": True, "schema": {"type": "string", "pattern": f"^{VOICE_NAME.pattern}$"},
                              "description": "the stored voice to delete"})
    elif (method, path) == ("get", "/v1/models"):
        responses["200"] = {"description": "the served names (aliases included), all one model",
                            "content": {"application/json": {"schema": _MODELS_SCHEMA}}}
    elif path == "/metrics":
        responses["200"] = {"description": "Prometheus text exposition",
                            "content": {"text/plain": {"schema": {"type": "string"}}}}
    elif path == "/health":
        responses["200"] = {"description": "the engine answers",
                            "content": {"application/json": {"schema": _HEALTH_SCHEMA}}}
        responses["503"] = {"description": "the engine did not answer `stats()` within 2 s (the health object), "
                                           "or the server is shutting down (an error)",
                            "content": {"application/json": {"schema": {"oneOf": [_HEALTH_SCHEMA, ERROR]}}}}
    errors = dict(ROUTE_ERRORS.get((method, path), {}))
    errors[500] = "an unexpected failure (logged), or a whole-file request that ended with an error"
    if path.startswith("/v1"):
        errors[401] = "an API key is set and `Authorization: Bearer KEY` is missing or wrong"
    if method.upper() not in SAFE_METHODS:
        errors[403] = "a browser sent it from another origin (see --allow-origin)"
    if "requestBody" in op:
        errors[413] = "the body is over the size limit"
    for status, doc in sorted(errors.items()):
        answer: dict[str, Any] = {"description": doc, "content": {"application/json": {"schema": ERROR}}}
        if status == 429:
            answer["headers"] = {"Retry-After": {"description": "seconds", "schema": {"type": "string"}}}
        if status == 401:
            answer["headers"] = {"WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}}
        responses.setdefault(str(status), answer)
    if "503" not in responses:
        responses["503"] = {"description": "the server is shutting down, or the runtime is not taking requests",
                            "content": {"application/json": {"schema": ERROR}}}
