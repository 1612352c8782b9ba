"""What `/openapi.json` says of `POST /v1/chat/completions`: its body, its two answers and its errors.

Owns: `ChatBody`'s JSON schema (with its messages and parts) as the request body, `model` bounded to the served
names, `audio.voice` to the card's speakers and, where the family says them (`ChatFamily`), an `input_audio`
part's `format` to those it decodes (its own list, the one its check refuses others by) and the token caps to
its reply's; the whole answer (`chat.completion`: the message's `content`, or
`audio` with `content: null` when spoken, `finish_reason`, `usage`) and the streamed one (`text/event-stream`:
each event one `data:` block holding a `chat.completion.chunk`, an `error`, or `[DONE]`); the route's own
error answers (`CHAT_ERRORS`); on a chat card, the 404 every speech operation answers and the voice store's
operations left out (`refusals`).
Must not know: the engine, how the route does its work.
"""

from __future__ import annotations

import copy
from typing import Any, Protocol, runtime_checkable

from v2.card import TakesRecordings
from v2.server.chat_schema import CHAT, ChatBody, is_chat_card

__all__ = ("CHAT", "CHAT_ERRORS", "components", "operation", "refusals")
VOICES, VOICE = "/v1/audio/voices", "/v1/audio/voices/{name}"

CHAT_ERRORS = {400: "a field is invalid or not supported here (`param` names it: `messages[1].content[0].type`, "
                    "`audio.voice`, `tools`), or the body is not a JSON object or is too complex",
               404: "`model` is not served here, or this card is no chat model",
               415: "the body is not application/json", 429: "the server is busy (see Retry-After)"}
_INT = {"type": "integer", "minimum": 0}
_USAGE = {"type": "object", "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
          "properties": {"prompt_tokens": _INT, "completion_tokens": _INT, "total_tokens": _INT,
                         "completion_tokens_details": {"type": "object", "properties": {
                             "text_tokens": _INT, "audio_tokens": _INT, "reasoning_tokens": _INT}}}}
_FINISH = {"enum": ["stop", "length"]}
_AUDIO = {"type": "object", "required": ["id", "data", "transcript", "expires_at"], "additionalProperties": False,
          "properties": {"id": {"type": "string"}, "transcript": {"type": "string"},
                         "data": {"type": "string", "contentEncoding": "base64",
                                  "description": "the spoken reply, a whole file in `audio.format`"},
                         "expires_at": {"type": "integer", "description": "the server keeps no audio to name in a "
                                        "later turn: the answer's creation time"}}}
_MESSAGE = {"type": "object", "required": ["role", "content"],
            "properties": {"role": {"const": "assistant"}, "content": {"type": ["string", "null"],
                                                                       "description": "null when spoken"},
                           "refusal": {"type": "null"}, "audio": _AUDIO}}
_COMPLETION = {"type": "object", "required": ["id", "object", "created", "model", "choices", "usage"],
               "properties": {"id": {"type": "string"}, "object": {"const": "chat.completion"},
                              "created": {"type": "integer"}, "model": {"type": "string"},
                              "choices": {"type": "array", "minItems": 1, "maxItems": 1, "items": {
                                  "type": "object", "required": ["index", "message", "finish_reason"],
                                  "properties": {"index": {"const": 0}, "message": _MESSAGE,
                                                 "logprobs": {"type": "null"}, "finish_reason": _FINISH}}},
                              "usage": _USAGE}}
_DELTA_AUDIO = {"type": "object", "additionalProperties": False, "properties": {
    "id": {"type": "string"}, "expires_at": {"type": "integer"}, "transcript": {"type": "string"},
    "data": {"type": "string", "contentEncoding": "base64",
             "description": "the next audio: pcm16 (24 kHz mono s16le), whatever `audio.format` says"}}}
_CHUNK = {"type": "object", "required": ["id", "object", "created", "model", "choices"],
          "properties": {"id": {"type": "string"}, "object": {"const": "chat.completion.chunk"},
                         "created": {"type": "integer"}, "model": {"type": "string"},
                         "choices": {"type": "array", "maxItems": 1, "items": {
                             "type": "object", "required": ["index", "delta", "finish_reason"],
                             "properties": {"index": {"const": 0}, "logprobs": {"type": "null"},
                                            "finish_reason": {"anyOf": [_FINISH, {"type": "null"}]},
                                            "delta": {"type": "object", "properties": {
                                                "role": {"const": "assistant"},
                                                "content": {"type": ["string", "null"]},
                                                "refusal": {"type": "null"}, "audio": _DELTA_AUDIO}}}}},
                         "usage": {"anyOf": [_USAGE, {"type": "null"}],
                                   "description": "with stream_options.include_usage: null, and in the last chunk "
                                                  "(no choices) the request's"}}}
_ERROR_EVENT = {"type": "object", "required": ["error"], "description": "the request ended badly mid-stream",
                "properties": {"error": {"type": "object", "required": ["message", "type", "param", "code"]}}}
_EVENT = {"type": "object", "required": ["data"],
          "description": "one SSE event: a `data:` line holding a chunk, an error, or `[DONE]` (the last)",
          "properties": {"data": {"oneOf": [
              {"const": "[DONE]"},
              {"type": "string", "not": {"const": "[DONE]"}, "contentMediaType": "application/json",
               "contentSchema": {"oneOf": [_CHUNK, _ERROR_EVENT]}}]}}}
_OK = ("the reply: with `stream: true`, SSE chunks as it is made (text as `delta.content`, or, spoken, "
       "`delta.audio.transcript` and `delta.audio.data`), then `data: [DONE]`; else the whole `chat.completion`")


@runtime_checkable
class ChatFamily(TakesRecordings, Protocol):
    """What the schema reads of a chat card's bound family: the formats an `input_audio` part may name
    (`input_audio_formats`: v2/card.py `TakesRecordings`, the route `v2 chat` reads too) and the reply's
    text-token cap (`max_reply_tokens`, the card's). A family without them leaves `format` any string and the
    caps at INT64_MAX."""

    @property
    def max_reply_tokens(self) -> int: ...


def components(server: Any) -> dict[str, Any]:
    """The body's schemas, bounded by `server` (its `ServerState`): the served names, the card's speakers, what
    its family says (`ChatFamily`)."""
    body = ChatBody.model_json_schema(ref_template="#/components/schemas/Chat{model}")
    defs = {f"Chat{name}": schema for name, schema in body.pop("$defs", {}).items()}
    body = copy.deepcopy(body)
    body["properties"]["model"] = {"enum": list(server.config.model_names),
                                   "description": "the served model (any of its names); another is a 404"}
    speakers = list(getattr(server.runtime, "speakers", None) or ())
    if "ChatAudioOutput" in defs and speakers:
        voice = defs["ChatAudioOutput"]["properties"]["voice"]
        defs["ChatAudioOutput"]["properties"]["voice"] = {**voice, "enum": sorted(
            {v for s in speakers for v in (s, s.lower(), s.upper(), s.capitalize())})}
    family = getattr(server.runtime, "family", None)
    if isinstance(family, ChatFamily):
        _family_bounds(body, defs, family)
    return {**defs, "ChatBody": {**body, "title": "ChatBody"}}


def _family_bounds(body: dict[str, Any], defs: dict[str, Any], family: ChatFamily) -> None:
    """The formats an `input_audio` part names and the caps of `max_tokens` / `max_completion_tokens`, as the
    family refuses others (a 400 naming the part's `format`, or the cap the client sent)."""
    formats = list(family.input_audio_formats)
    if "ChatInputAudio" in defs:
        defs["ChatInputAudio"]["properties"]["format"] = {
            "type": "string", "enum": formats, "title": "Format",
            "description": f"its container: {', '.join(formats)} (what this model decodes)"}
    for name in ("max_tokens", "max_completion_tokens"):
        for option in body["properties"][name]["anyOf"]:
            if option.get("type") == "integer":
                option["maximum"] = family.max_reply_tokens


def operation(op: dict[str, Any]) -> None:
    """The chat route's request body and its 200."""
    op["requestBody"] = {"required": True, "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/ChatBody"}}}}
    op.setdefault("responses", {})["200"] = {"description": _OK, "content": {
        "application/json": {"schema": _COMPLETION}, "text/event-stream": {"schema": _EVENT}}}



def refusals(spec: dict[str, Any], server: Any) -> None:
    """On a chat card, every speech operation (a POST under /v1/audio/speech, /dev/captioned_speech) declares the
    404 that names /v1/chat/completions, and the voice store's operations are not published: it stores no voices
    (POST and DELETE /v1/audio/voices answer 405), GET lists its speakers (`server`: the app's `ServerState`)."""
    if not is_chat_card(getattr(server.runtime, "request_fields", ())):
        return
    paths = spec.get("paths", {})
    paths.pop(VOICE, None)
    voices = paths.get(VOICES, {})
    for method in ("post", "delete"):
        voices.pop(method, None)
    for name in [n for n in spec.get("components", {}).get("schemas", {}) if n.startswith("Body_add_voice")]:
        del spec["components"]["schemas"][name]
    if "get" in voices:
        voices["get"]["responses"]["200"]["description"] = (
            "the model's speakers: the voices `audio.voice` takes (a chat model stores no voices); `?legacy=true`: "
            "the names alone")
    for path, item in spec.get("paths", {}).items():
        op = item.get("post")
        if op is not None and (path.startswith("/v1/audio/speech") or path == "/dev/captioned_speech"):
            op.setdefault("responses", {})["404"] = {
                "description": "a chat model speaks its own reply: use POST /v1/chat/completions",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
