"""What `/openapi.json` says of the speech stream, `WS /v1/audio/speech/stream`.

OpenAPI 3.1 has no WebSocket operations, so the stream is published the way its handshake is made: a
`GET /v1/audio/speech/stream` operation whose description says it upgrades to a WebSocket, answered `101
Switching Protocols` (its refusals are HTTP answers: the gate's 401 / 403 / 503, uvicorn's 400 for a
handshake without the WebSocket headers, 404 for a plain GET), with the protocol in an `x-websocket`
extension (the client messages, the server events, the binary audio frames and the close codes) and each
message a JSON schema in `components` (`Stream*`: `StreamClientMessage` and `StreamServerEvent` are the
`oneOf` of the kinds, told apart by `type`). The protocol is designs/server.md's "The speech stream".
Owns: those schemas, the operation and its description.
Must not know: the session's code, the runtime; the message kinds come from ws_messages.py's `KINDS`.
"""

from __future__ import annotations

from typing import Any

from v2.params import ContextTurn
from v2.server.ws_messages import KINDS

STREAM = "/v1/audio/speech/stream"
_REF = "#/components/schemas/"
_INT, _STR, _BOOL = {"type": "integer"}, {"type": "string"}, {"type": "boolean"}
_UTTERANCE = {"type": "integer", "minimum": 0, "description": "the utterance's place in the session, from 0"}
_SENTENCE = {"type": "integer", "minimum": 0, "description": "the sentence's place in its utterance, from 0"}
_CANCELLED = {"const": True, "description": "present when `input.cancel` ended it"}

# client messages: (component, kind, description)
_CLIENT = {
    "session.config": ("StreamSessionConfig", "the session's config: the fields of POST /v1/audio/speech less "
                       "`input`, plus `stream_audio` and `split_granularity`. Sent again between utterances, it "
                       "replaces the config. Checked whole (REST's checks, then the family's) before "
                       "`session.ready`; a refused one gets an `error` naming the field and the previous config "
                       "stays"),
    "input.text": ("StreamInputText", "a piece of the current utterance's text (the first piece begins an utterance)"),
    "input.done": ("StreamInputDone", "the utterance's text is complete: the rest is spoken, `session.done` ends "
                   "it. While it is spoken `input.cancel` is taken at once; every other message waits, in order, "
                   "for its `session.done`"),
    "input.cancel": ("StreamInputCancel", "barge-in: the utterance being written or spoken ends now (its "
                     "`audio.done` and `session.done` with `cancelled: true`, then `input.cancelled`; no audio of "
                     "it after them); the session and its config stay. With none under way it is harmless "
                     "(`input.cancelled` with `cancelled: false`)"),
    "session.close": ("StreamSessionClose", "ends the current utterance as `input.done` does, then closes (1000) "
                      "once it is spoken"),
    "context.append": ("StreamContextAppend", "one more turn of the conversation (the other party's), between "
                       "utterances; a family that takes no `context` refuses it (`error`, code `unsupported`)"),
}

# server events: (component, kind, description, properties, required)
_EVENTS: list[tuple[str, str, str, dict[str, Any], list[str]]] = [
    ("StreamSessionReady", "session.ready", "the config is taken",
     {"incremental": {**_BOOL, "description": "audio starts before `input.done`"}, "stream_audio": _BOOL,
      "format": _STR, "sample_rate": _INT, "channels": _INT,
      "split_granularity": {"enum": ["none", "sentence", "clause"]}},
     ["incremental", "stream_audio", "format", "sample_rate", "channels", "split_granularity"]),
    ("StreamAudioStart", "audio.start", "a sentence (a segment of the utterance's request) begins; its audio "
     "follows in binary frames", {"utterance_index": _UTTERANCE, "sentence_index": _SENTENCE,
                                  "sentence_text": _STR, "format": _STR, "sample_rate": _INT},
     ["utterance_index", "sentence_index", "sentence_text", "format", "sample_rate"]),
    ("StreamAudioDone", "audio.done", "the sentence ended (`error: true`: its request ended early)",
     {"utterance_index": _UTTERANCE, "sentence_index": _SENTENCE,
      "total_bytes": {"type": "integer", "minimum": 0, "description": "its audio's bytes sent"}, "error": _BOOL,
      "cancelled": _CANCELLED}, ["utterance_index", "sentence_index", "total_bytes", "error"]),
    ("StreamSessionDone", "session.done", "the utterance is spoken (or cancelled); the session goes on",
     {"utterance_index": _UTTERANCE, "total_sentences": {"type": "integer", "minimum": 0},
      "cancelled": _CANCELLED}, ["utterance_index", "total_sentences"]),
    ("StreamInputCancelled", "input.cancelled", "the acknowledgement of `input.cancel`, one per `input.cancel`",
     {"utterance_index": {"type": ["integer", "null"], "description": "the utterance it ended; null: none was "
                          "under way"}, "cancelled": _BOOL}, ["utterance_index", "cancelled"]),
    ("StreamContextAppended", "context.appended", "the turn of `context.append` is taken",
     {"context_turns": {"type": "integer", "minimum": 0, "description": "turns the conversation now holds"}},
     ["context_turns"]),
    ("StreamError", "error", "a bad message (`param` names its field) or the utterance ending early (`code`: its "
     "finish reason); the session goes on. `code: config_timeout` comes before the close (1008) of a connection "
     "that sent no `session.config` within the server's --ws-config-timeout",
     {"message": _STR, "param": {"type": ["string", "null"]}, "code": _STR}, ["message", "param", "code"]),
]

_DESCRIPTION = """Upgrades to a WebSocket (send the WebSocket handshake: `Connection: Upgrade`, `Upgrade: websocket`);
a plain GET is answered 404. Text goes in as it is written, audio comes out sentence by sentence: one session a
connection, each utterance one open request. The messages are JSON text frames, told apart by `type`
(`StreamClientMessage`, `StreamServerEvent`; the `x-websocket` extension lists them); the audio comes in
binary frames.

Client messages: `session.config`, `input.text`, `input.done`, `input.cancel`, `session.close`, `context.append`.
Server events: `session.ready`, `audio.start`, binary audio frames, `audio.done` (`cancelled`), `session.done`
(`cancelled`), `input.cancelled`, `context.appended`, `error`.

An utterance: `input.text` pieces, then `input.done`; for each sentence `audio.start`, its binary frames,
`audio.done`; then `session.done`. `input.cancel` ends the utterance being written or spoken at once: the open
sentence's `audio.done` and `session.done`, both with `cancelled: true`, then `input.cancelled`; no audio of it
after them; the next `input.text` begins a new utterance under the same config. The API key, the Origin rule
(any handshake from another origin, see --allow-origin) and draining apply at the handshake."""


def _message(kind: str, properties: dict[str, Any], required: list[str], description: str,
             closed: bool = True) -> dict[str, Any]:
    return {"type": "object", "description": description, "required": ["type", *required],
            "properties": {"type": {"const": kind}, **properties}, "additionalProperties": not closed}


def schemas(speech_body: dict[str, Any], turn: dict[str, Any] | None = None) -> dict[str, Any]:
    """The stream's components (`speech_body`: the published SpeechBody, whose fields a config takes; `turn`:
    the published ContextTurn, whose fields `context.append` takes, default pydantic's)."""
    out: dict[str, Any] = {}
    config_fields = {k: v for k, v in speech_body["properties"].items() if k != "input"}
    if turn is None:
        turn = ContextTurn.model_json_schema(ref_template=_REF + "{model}")
        out.update(turn.pop("$defs", {}))
    fields: dict[str, dict[str, Any]] = {
        "session.config": {**config_fields, "stream_audio": {
            **_BOOL, "default": False, "description": "raw pcm s16le chunks as they are made (response_format pcm); "
            "else each sentence's whole file in one binary frame when it ends"},
            "split_granularity": {"enum": ["sentence", "clause", "none"], "default": "sentence", "description":
                                  "where sentences end; none: nothing is spoken before input.done"}},
        "input.text": {"text": {**_STR, "description": "the piece (the utterance is capped by --max-input-chars)"}},
        "context.append": turn["properties"],
    }
    required = {"input.text": ["text"]}
    for kind in KINDS:
        name, doc = _CLIENT[kind]
        out[name] = _message(kind, fields.get(kind, {}), required.get(kind, []), doc)
    for name, kind, doc, props, needed in _EVENTS:
        out[name] = _message(kind, props, needed, doc)
    out["StreamClientMessage"] = _union([(_CLIENT[k][0], k) for k in KINDS], "a client message (a JSON text frame)")
    out["StreamServerEvent"] = _union([(e[0], e[1]) for e in _EVENTS], "a server event (a JSON text frame); the "
                                      "audio comes in binary frames between `audio.start` and `audio.done`")
    return out


def _union(kinds: list[tuple[str, str]], description: str) -> dict[str, Any]:
    return {"description": description, "oneOf": [{"$ref": _REF + name} for name, _ in kinds],
            "discriminator": {"propertyName": "type", "mapping": {kind: _REF + name for name, kind in kinds}}}


def path_item() -> dict[str, Any]:
    """The `GET` operation the handshake is, with the protocol in `x-websocket`."""
    return {"get": {
        "summary": "Speech stream (WebSocket): text in as it is written, audio out sentence by sentence",
        "operationId": "speech_stream", "description": _DESCRIPTION,
        "responses": {
            "101": {"description": "Switching Protocols: the WebSocket is open; the session's messages follow "
                                   "(x-websocket)"},
            "400": {"description": "a handshake without the WebSocket headers it needs (the HTTP server's answer)",
                    "content": {"text/plain": {"schema": _STR}}}},
        "x-websocket": {
            "clientMessages": {"$ref": _REF + "StreamClientMessage"},
            "serverMessages": {"$ref": _REF + "StreamServerEvent"},
            "binaryMessages": "server to client only: the audio of the sentence open (between its `audio.start` "
                              "and `audio.done`): with `stream_audio`, pcm s16le chunks as they are made; else "
                              "the sentence's whole file in the config's response_format, one frame when it ends. "
                              "A binary frame from the client is refused with an `error` (param `message`)",
            "close": {"1000": "after `session.close`, once its utterance is spoken",
                      "1008": "no `session.config` within the server's --ws-config-timeout (after an `error` "
                              "with code config_timeout); or a refused handshake where the HTTP server cannot "
                              "answer it over HTTP"},
            "messages": {"client": list(KINDS), "server": [kind for _, kind, *_ in _EVENTS]}}}}
