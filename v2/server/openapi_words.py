"""What `/openapi.json` says of word timestamps: the `timestamps` field as this server takes it, the SSE event of
a sentence's words, the captioned JSON answer (of `POST /v1/audio/speech` and its Kokoro-FastAPI path), a batch
item's `words`, and on the speech stream the `speech.timestamps` event, `input.cancel`'s `played_ms` and the
acknowledgement's `words_sent` / `words_heard`.
Owns: those schemas and where they go in the published document (`amend`).
Must not know: the session's code, the runtime beyond whether it has an aligner, the engine.
"""

from __future__ import annotations

import copy
from typing import Any

from v2.server.captioned import PATH as CAPTIONED
from v2.server.openapi_ws import STREAM
from v2.server.timestamps import EVENT

_REF = "#/components/schemas/"
_SECONDS = {"type": "number", "minimum": 0}
WORD = {"type": "object", "required": ["word", "start", "end"], "additionalProperties": False,
        "description": "a word and when it is spoken, in seconds from the start of the request's (the utterance's) "
                       "audio", "properties": {"word": {"type": "string"}, "start": _SECONDS, "end": _SECONDS}}
WORDS = {"type": "array", "items": WORD}
_SENTENCE = {"sentence_index": {"type": "integer", "minimum": 0, "description": "the sentence's (the segment's) "
                                "place in the request, from 0"},
             "text_start": {"type": ["integer", "null"], "description": "its span of the text: text[text_start:"
                            "text_end] (null where the model speaks token ids)"},
             "text_end": {"type": ["integer", "null"]}, "words": WORDS}
SSE_WORDS = {"type": "object", "required": ["type", "sentence_index", "text_start", "text_end", "words"],
             "additionalProperties": False, "description": "one sentence's words (`timestamps: \"word\"`), after "
             "the audio they span", "properties": {"type": {"const": EVENT}, **_SENTENCE}}
CAPTIONED_ANSWER = {
    "type": "object", "required": ["audio", "audio_format", "timestamps"], "additionalProperties": False,
    "description": "Kokoro-FastAPI's captioned speech answer (one JSON object, then a newline)",
    "properties": {
        "audio": {"type": "string", "contentEncoding": "base64", "description": "the whole file, base64"},
        "audio_format": {"type": "string", "description": "its content type (audio/mpeg, audio/wav, ...)"},
        "timestamps": {"type": ["array", "null"], "description": "each word, in seconds from the start of the "
                       "audio (null: `return_timestamps` false)", "items": {
                           "type": "object", "required": ["word", "start_time", "end_time"],
                           "additionalProperties": False,
                           "properties": {"word": {"type": "string"}, "start_time": _SECONDS, "end_time": _SECONDS}}}}}
_NO_ALIGNER = ("this server has no aligner (`v2 serve --aligner NAME`), so it knows no word times: `timestamps` is "
               "refused naming it")
_ALIGNED = ("\"word\": each word's times from the server's aligner: with `stream_format: sse`, a `speech.timestamps` "
            "event per sentence after its audio; else (`stream` false or omitted) one JSON answer, the audio in "
            "base64 beside the words (Kokoro-FastAPI's captioned shape); a raw audio stream cannot carry them "
            "(`stream: true` without SSE is refused naming it)")
_ACK_WORDS = ("present where the runtime has an aligner (every utterance is then aligned, sentence by sentence, "
              "as its audio is made); absent without one, since nothing then knows when a word was spoken")


def body_field(p: dict[str, Any], aligner: bool) -> list[dict[str, Any]]:
    """The bounded speech body's `timestamps` (`p`: its properties, changed in place) and the rules it adds: none.
    That `stream: true` without SSE is refused with it is said in its description, not as an `if`: every form of
    that rule tried (an `if` on two fields, a `then` with `anyOf` or `not` over the stream fields) beside the
    body's other rules leaves the document one schemathesis cannot generate from (jsonschema_rs canonicalises it
    to a raw schema), so the fuzzing hooks leave such cases out instead (tests/server/schemathesis_hooks.py)."""
    if not aligner:
        p["timestamps"] = {"type": "null", "default": None, "description": _NO_ALIGNER}
        return []
    p["timestamps"] = {"anyOf": [{"const": "word"}, {"type": "null"}], "default": None, "description": _ALIGNED}
    return []


def speech_answer(spec: dict[str, Any], aligner: bool) -> None:
    """`POST /v1/audio/speech`'s 200 with the captioned JSON (asked `timestamps`, not SSE), where it can be."""
    speech = spec.get("paths", {}).get("/v1/audio/speech", {}).get("post")
    if speech is not None and aligner:
        speech["responses"]["200"]["content"]["application/json"] = {"schema": CAPTIONED_ANSWER}


def captioned_path(spec: dict[str, Any], components: dict[str, Any], aligner: bool) -> None:
    """The captioned path's body (`CaptionedSpeechBody`: the bounded speech body, `stream` any boolean,
    `stream_format` audio only, and Kokoro's `return_timestamps`) and its JSON answer."""
    body = copy.deepcopy(components["SpeechBody"])
    p = body["properties"]
    p["stream"] = {"type": ["boolean", "null"], "default": None, "description": "taken, and answered whole either "
                   "way: one JSON object, which a client reading streamed JSON lines reads too"}
    p["stream_format"] = {"anyOf": [{"const": "audio"}, {"type": "null"}], "default": None}
    rules = [r for r in body.get("allOf", []) if not {"timestamps", "stream_format"} & set(
        r.get("if", {}).get("properties", {}))]
    if aligner:
        p["return_timestamps"] = {"type": "boolean", "default": True, "description": "Kokoro's: true (the default) "
                                  "answers the words, false `timestamps: null`"}
        p["timestamps"] = {"anyOf": [{"const": "word"}, {"type": "null"}], "default": None,
                           "description": "\"word\", the default here (with return_timestamps false: null only)"}
        rules.append({"if": {"required": ["return_timestamps"], "properties": {"return_timestamps": {"const": False}}},
                      "then": {"properties": {"timestamps": {"type": "null"}}}})
    else:
        p["return_timestamps"] = {"const": False, "description": "Kokoro's; " + _NO_ALIGNER + " (and the default, "
                                  "true, with it): false answers the audio with `timestamps: null`"}
        body["required"] = [*body.get("required", []), "return_timestamps"]
    body["allOf"] = rules
    components["CaptionedSpeechBody"] = {**body, "title": "CaptionedSpeechBody"}
    path = spec.get("paths", {}).get(CAPTIONED, {}).get("post")
    if path is not None:
        path["requestBody"] = {"required": True, "content": {"application/json": {
            "schema": {"$ref": _REF + "CaptionedSpeechBody"}}}}
        path["responses"]["200"] = {"description": "the whole audio, base64, and its words",
                                    "content": {"application/json": {"schema": CAPTIONED_ANSWER}}}


BATCH_WORDS = {**WORDS, "description": "the item's words (it asked `timestamps: \"word\"`)"}


def stream_messages(spec: dict[str, Any], components: dict[str, Any], aligner: bool) -> None:
    """The speech stream's schemas with the words: `input.cancel`'s `played_ms`, the acknowledgement's words, and
    where the runtime has an aligner the `speech.timestamps` event (in the server events' union and list)."""
    cancel = components["StreamInputCancel"]
    cancel["properties"]["played_ms"] = {
        "type": "number", "minimum": 0, "description": "how much of the utterance's audio the client has played, "
        "in milliseconds from its start (optional; another value is refused naming it and nothing is cancelled)"}
    ack = components["StreamInputCancelled"]
    ack["properties"]["words_sent"] = {**WORDS, "description": "the words whose audio was sent, of the sentences "
                                       "aligned (once its audio is whole; one whose words had not come yet is "
                                       "aligned at the cancel; a sentence cut by the cancel is not listed); " + _ACK_WORDS}
    ack["properties"]["words_heard"] = {**WORDS, "description": "of `words_sent`, those that end at most `played_ms`"
                                        " into the utterance's audio (all of them without `played_ms`); "
                                        + _ACK_WORDS}
    if not aligner:
        return
    components["StreamSpeechTimestamps"] = {
        "type": "object", "description": "one sentence's words (a config with `timestamps: \"word\"`), after its "
        "`audio.done`", "required": ["type", "utterance_index", "sentence_index", "text_start", "text_end", "words"],
        "additionalProperties": False,
        "properties": {"type": {"const": EVENT}, "utterance_index": {"type": "integer", "minimum": 0}, **_SENTENCE}}
    union = components["StreamServerEvent"]
    union["oneOf"].append({"$ref": _REF + "StreamSpeechTimestamps"})
    union["discriminator"]["mapping"][EVENT] = _REF + "StreamSpeechTimestamps"
    components["StreamSessionConfig"]["properties"]["word_timestamps"] = {
        "type": "boolean", "default": False, "description": "vllm-omni's: true (with stream_audio and pcm) sends "
        "the audio as `audio.chunk` events and after each sentence's audio a last `audio.chunk` with its words"}
    components["StreamAudioStart"]["properties"]["word_timestamps"] = {"const": True, "description": "present "
                                                                       "with vllm-omni's word_timestamps"}
    ms = {"type": "integer", "minimum": 0}
    stamp = {"type": "object", "required": ["word", "start_ms", "end_ms"], "additionalProperties": False,
             "properties": {"word": {"type": "string"}, "start_ms": {"type": "integer"}, "end_ms": {"type": "integer"}}}
    components["StreamAudioChunk"] = {
        "type": "object", "description": "vllm-omni's word_timestamps: a piece of the sentence's pcm (base64), or, "
        "after its audio and before its `audio.done`, no audio and the sentence's words in milliseconds from its "
        "start (null: the utterance ended before the sentence was aligned)",
        "required": ["type", "utterance_index", "sentence_index", "chunk_id", "chunk_start_ms", "chunk_end_ms",
                     "sample_rate", "channels", "audio_b64", "timestamps"], "additionalProperties": False,
        "properties": {"type": {"const": "audio.chunk"}, "utterance_index": ms, "sentence_index": ms,
                       "chunk_id": ms, "chunk_start_ms": ms, "chunk_end_ms": ms, "sample_rate": ms, "channels": ms,
                       "audio_b64": {"type": "string", "contentEncoding": "base64"},
                       "timestamps": {"type": ["array", "null"], "items": stamp}}}
    union["oneOf"].append({"$ref": _REF + "StreamAudioChunk"})
    union["discriminator"]["mapping"]["audio.chunk"] = _REF + "StreamAudioChunk"
    ws = spec.get("paths", {}).get(STREAM, {}).get("get", {}).get("x-websocket")
    if ws is not None:
        ws["messages"]["server"] += [EVENT, "audio.chunk"]
