"""The bounds `/openapi.json` publishes on a speech request: what this server enforces, field by field.

Owns: `bounded(body, server)`: the published `SpeechBody` (pydantic's schema of `SpeechParams`) with every
bound the server checks written into it, so a client generator (or a fuzzer) knows what is refused before it
sends: `model` one of the served names; `input` non-empty, not only whitespace, at most --max-input-chars;
`voice` one of the voices served when the schema is asked for (OpenAI's names, the checkpoint's speakers, the
stored voices; `POST /v1/audio/voices` adds more); `speed` 1; the sampling knobs' ranges and `seed`'s (v2.fields),
the frame limits up to the card's cap; `sample_rate` each format's rates (with `response_format`'s default,
mp3); `ref_text` and `x_vector_only_mode` only with `ref_audio`, a stored voice not with it, `stream_format: sse`
only with a stream; an input the family takes none of (`ref_audio`, `x_vector_only_mode`, `context`) published
as null only. `batch_item` is the same fields, none required, for a batch's items and defaults; `context_turn`
a turn whose `voice` is a stored one, given alone; `voice_form` the voice form (its `name` as the store takes
one, `ref_text` not blank, a recording or, where the model takes one, a speaker embedding).
What JSON Schema cannot say stays in the descriptions and is the server's to refuse (400 naming the field):
a frame floor over the limit (`min_frames` > `max_frames`), one value given two different values under its two
names, a recording that is not audio.
Must not know: FastAPI, the engine, how the routes do their work.
"""

from __future__ import annotations

import copy
from typing import Any

from v2.fields import INT64_MAX, PENALTY_MAX, PENALTY_MIN, TEMPERATURE_MAX, TEMPERATURE_MIN, TOP_K_MAX
from v2.params import TWO_NAMES
from v2.voices.store import NAME as VOICE_NAME
from v2.server.audio import FLAC_HZ_MAX, FORMATS, MAX_RATE, MIN_RATE, RATES
from v2.server.openapi_words import body_field
from v2.server.schema import OPENAI_VOICES, family_params
from v2.server.timestamps import has_aligner

NULL = {"type": "null"}
_SPACE = "".join(f"\\u{c:04x}" for c in range(0x10000) if chr(c).isspace())  # what Python's `.strip()` strips
NOT_BLANK = f"[^{_SPACE}]"  # a character `.strip()` keeps (ECMA's \S differs: U+0085, U+FEFF)


def _optional(schema: dict[str, Any], doc: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"anyOf": [schema, NULL], "default": None}
    if doc:
        out["description"] = doc
    return out


def frame_cap(runtime: Any) -> int | None:
    """The card's cap on a request's frames (its decoding loop's `max_frames`), or None where none is known."""
    loops = getattr(getattr(runtime, "card", None), "loops", None)
    caps = [getattr(getattr(loops, name, None), "max_frames", None) for name in type(loops).model_fields] \
        if loops is not None and hasattr(type(loops), "model_fields") else []
    found = [c for c in caps if isinstance(c, int)]
    return max(found) if found else None


def voices_served(server: Any) -> list[str]:
    """The names `voice` takes now: the stored voices, the checkpoint's speakers, OpenAI's names."""
    return sorted({e["id"] for e in server.voices.listing()} | set(OPENAI_VOICES))


def bounded(body: dict[str, Any], server: Any) -> dict[str, Any]:
    """`body` (the SpeechBody schema) with this server's bounds; `server`: its `ServerState`."""
    out = copy.deepcopy(body)
    p = out["properties"]
    cfg, takes = server.config, family_params(server.runtime).takes
    p["model"] = _optional({"enum": list(cfg.model_names)}, "the served model (any of its names); another is a 404")
    p["input"] = {"type": "string", "minLength": 1, "maxLength": cfg.max_input_chars, "pattern": NOT_BLANK,
                  "description": f"the text to speak: not only whitespace, at most {cfg.max_input_chars} characters "
                                 "(--max-input-chars)"}
    names = voices_served(server)
    p["voice"] = {**_voice(names), "default": None,
                  "description": "a voice served here (GET /v1/audio/voices lists them; OpenAI's names speak with "
                                 "the card's default voice; a built-in speaker in any case), as a name or OpenAI's "
                                 "{\"id\": name}"}
    p["speed"] = {"type": "number", "minimum": 1, "maximum": 1, "default": 1.0,
                  "description": "only 1.0 (OpenAI's field; other speeds are refused)"}
    p["seed"] = _optional({"type": "integer", "minimum": 0, "maximum": INT64_MAX})
    p["temperature"] = _optional({"anyOf": [{"const": 0}, {"type": "number", "minimum": TEMPERATURE_MIN,
                                                           "maximum": TEMPERATURE_MAX}]}, "0 is greedy")
    p["top_p"] = _optional({"type": "number", "exclusiveMinimum": 0, "maximum": 1})
    p["top_k"] = _optional({"type": "integer", "minimum": 0, "maximum": TOP_K_MAX})
    p["repetition_penalty"] = _optional({"type": "number", "minimum": PENALTY_MIN, "maximum": PENALTY_MAX},
                                        "1 is off")
    cap = frame_cap(server.runtime) or INT64_MAX
    for name in TWO_NAMES[0]:
        p[name] = _optional({"type": "integer", "minimum": 1, "maximum": cap}, "frames at most (up to the card's "
                            "cap; under its two names, one value)")
    for name in TWO_NAMES[1]:
        p[name] = _optional({"type": "integer", "minimum": 0, "maximum": cap}, "frames before a stop may end it "
                            "(at most the frame limit; under its two names, one value)")
    p["ref_text"] = _optional({"type": "string", "pattern": NOT_BLANK}, "the reference's transcript (with ref_audio)")
    for name in ("ref_audio", "x_vector_only_mode", "context"):
        if name not in takes:
            p[name] = {"type": "null", "default": None, "description": "this model takes none (a value is refused)"}
    if "ref_audio" in takes:
        p["ref_audio"] = _optional({"type": "string", "minLength": 1, "contentMediaType": "audio/*"},
                                   p["ref_audio"].get("description"))
    words = body_field(p, has_aligner(server.runtime))  # `timestamps`: null only without an aligner
    out["allOf"] = [*_rates(), *_together(), *_one_voice(names, server.voices.stored_names()), *words]
    return out


def _one_voice(names: list[str], stored: list[str]) -> list[dict[str, Any]]:
    """A stored voice is a recording: with `ref_audio` it would be two (the family refuses it naming `voice`), so
    `voice` is then one of the others (`names`: every voice served)."""
    others = [n for n in names if n not in stored]
    if not stored:
        return []
    return [{"if": {"required": ["ref_audio"], "properties": {"ref_audio": {"type": "string"}}},
             "then": {"properties": {"voice": _voice(others)}}}]


def _voice(names: list[str]) -> dict[str, Any]:
    return {"anyOf": [{"type": "string", "enum": names},
                      {"type": "object", "required": ["id"], "additionalProperties": False,
                       "properties": {"id": {"type": "string", "enum": names}}}, NULL]}


def context_turn(turn: dict[str, Any], server: Any) -> dict[str, Any]:
    """A context turn (`ContextTurn`'s schema) whose `voice` is one of the voices stored now, given alone (with
    its speaker): a stored voice is the turn's text and audio."""
    out = copy.deepcopy(turn)
    stored = server.voices.stored_names()
    out["properties"]["voice"] = {**_optional({"type": "string", "enum": stored} if stored else NULL),
                                  "description": turn["properties"]["voice"].get("description", "")}
    out["allOf"] = [{"if": {"required": ["voice"], "properties": {"voice": {"type": "string"}}},
                     "then": {"properties": {k: NULL for k in ("text", "text_ids", "audio")}}}]
    return out


def _rates() -> list[dict[str, Any]]:
    """`sample_rate` per `response_format` (mp3 when none is given)."""
    out = []
    for fmt in FORMATS:
        rates: dict[str, Any] = {"type": "integer", "enum": list(RATES[fmt])} if fmt in RATES else {
            "type": "integer", "minimum": MIN_RATE, "maximum": MAX_RATE}
        if fmt == "flac":  # over FLAC_HZ_MAX, tens of Hz only
            rates = {"anyOf": [{**rates, "maximum": FLAC_HZ_MAX}, {**rates, "minimum": FLAC_HZ_MAX + 1,
                                                                   "multipleOf": 10}]}
        when: dict[str, Any] = {"properties": {"response_format": {"const": fmt}}}
        if fmt != "mp3":
            when["required"] = ["response_format"]
        out.append({"if": when, "then": {"properties": {"sample_rate": {"anyOf": [rates, NULL]}}}})
    return out


def _together() -> list[dict[str, Any]]:
    """The fields that go only with another: `ref_text` and `x_vector_only_mode` with `ref_audio`, SSE with a
    stream."""
    return [
        {"if": {"required": ["ref_text"], "properties": {"ref_text": {"type": "string"}}},
         "then": {"required": ["ref_audio"], "properties": {"ref_audio": {"type": "string"}}}},
        {"if": {"required": ["x_vector_only_mode"], "properties": {"x_vector_only_mode": {"type": "boolean"}}},
         "then": {"required": ["ref_audio"], "properties": {"ref_audio": {"type": "string"}}}},
        {"if": {"required": ["stream_format"], "properties": {"stream_format": {"const": "sse"}}},
         "then": {"not": {"required": ["stream"], "properties": {"stream": {"const": False}}}}},
    ]


def batch_item(bounded_body: dict[str, Any]) -> dict[str, Any]:
    """The bounded fields with none required: a batch's request-level defaults, or one item's overrides."""
    return {k: copy.deepcopy(v) for k, v in bounded_body.items() if k not in ("required", "title")}


def voice_form(form: dict[str, Any], embeddings: bool) -> dict[str, Any]:
    """The voice form (FastAPI's schema of it): a form field is never null (left out, it takes its default);
    `name` as the voice store takes one; `audio_sample` an audio file, or `speaker_embedding` instead where the
    model's voices can be one (`embeddings`; else that field takes no value and the recording is required)."""
    out = copy.deepcopy(form)
    props = out.get("properties", {})
    for name, prop in props.items():
        kinds = prop.get("anyOf") if isinstance(prop, dict) else None
        if kinds:
            kept = [k for k in kinds if k != NULL]
            prop.pop("anyOf")
            prop.update(kept[0] if len(kept) == 1 else {"anyOf": kept})
            if prop.get("default", 0) is None:
                prop.pop("default")
    if "name" in props:
        props["name"].update({"pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]*$", "minLength": 1, "maxLength": 64,
                              "description": "letters, digits, '_', '-', '.', starting with a letter or digit"})
    if "ref_text" in props:
        props["ref_text"].update({"pattern": NOT_BLANK, "description": "the recording's transcript: not only "
                                  "whitespace"})
    if "audio_sample" in props:
        props["audio_sample"] = {"type": "string", "format": "binary", "contentMediaType": "audio/wav",
                                 "description": "a recording of the voice (an audio file)"}
    if not embeddings:
        if "speaker_embedding" in props:
            props["speaker_embedding"] = {"not": {}, "description": "this model's voices are what a recording "
                                          "encodes to: it takes no speaker embedding (give audio_sample)"}
        out["required"] = [*out.get("required", []), "audio_sample"]
    elif "audio_sample" in props and "speaker_embedding" in props:
        out["oneOf"] = [{"required": ["audio_sample"]}, {"required": ["speaker_embedding"]}]
    return out
