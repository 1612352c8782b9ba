"""A speech request in no family's terms (`SpeechParams`), and what a family gives to take one (`FamilyParams`).

Owns: `SpeechParams`, what the server parses a body (or a WebSocket's config) into: OpenAI's
`POST /v1/audio/speech` fields (`model`, `input`, `voice`, `instructions`, `response_format`, `speed`,
`stream_format`) and v2's documented extensions (designs/request_fields.md: `stream`, `seed`, the sampling
knobs under their flat names, frame limits under ours and the peers' names, `language`, `ref_audio`,
`ref_text`, `x_vector_only_mode`, `sample_rate`, `context`: earlier turns of a conversation, each a
`ContextTurn`, and `timestamps`: word times from an aligner), strictly typed (a bool is not a number, `"7"` is
not an int, unknown fields are refused); which of a value's two names the client used (`named`) and the value
(`frame_limits`, refusing two different ones); `Resolved`, what the server made of the parts only it can resolve (the recording's bytes,
which voice a name means, whether the answer streams, whether the text comes later, the context's turns
with their audio read and their stored voices looked up: `ResolvedTurn`); and `FamilyParams`, which each
family gives as its bound family's `speech_params`: `request(params, resolved)` (its request's fields, which
`Runtime.parse` / `Runtime.open` make typed), `fields` (its request fields, as a `RequestError.field` names
them, -> the `SpeechParams` field each comes from: how a refusal names the client's parameter) and `takes`
(the optional inputs it honours). `common_fields` / `COMMON_FIELDS`: those fields under v2's Python names,
which a family may start from.
Must not know: HTTP status codes and routes, the runtime, any family.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field

from v2.errors import FieldError

TWO_NAMES = (("max_frames", "max_new_tokens"), ("min_frames", "min_new_tokens"))
"""Values with two names: (ours, the peers' (vllm-omni's, sglang-omni's)); a body may give either, or both alike."""


class VoiceId(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)
    id: str


class ContextTurn(BaseModel):
    """An earlier turn of the conversation (`context`): who spoke, what, and how it sounded. What a turn must
    hold (text or its ids, a speaker of the family's) is the family's to check; the server reads `audio` and
    looks up `voice`."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)
    speaker: int | str | None = Field(None, description="who spoke it: one of the model's speakers (an id or a name)")
    text: str | None = Field(None, description="what was said")
    text_ids: list[int] | None = Field(None, description="what was said as the model's token ids (instead of text)")
    audio: str | None = Field(None, description="how it sounded: an audio file as ref_audio takes it (base64, a "
                              "base64 data URL, or file:// inside the allowed folder)")
    voice: str | None = Field(None, description="a stored voice: its transcript and recording are the turn's text "
                              "and audio (with speaker only)")


class SpeechParams(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    model: str | None = None
    input: str
    voice: str | VoiceId | None = None
    instructions: str | None = None
    response_format: Literal["mp3", "opus", "aac", "flac", "wav", "pcm"] = "mp3"
    speed: float = 1.0
    stream_format: Literal["audio", "sse"] | None = None
    # extensions (vllm-omni / sglang-omni names)
    stream: bool | None = None
    seed: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    repetition_penalty: float | None = None
    max_new_tokens: int | None = None
    max_frames: int | None = None
    min_new_tokens: int | None = None
    min_frames: int | None = None
    language: str | None = None
    ref_audio: str | None = None
    ref_text: str | None = None
    x_vector_only_mode: bool | None = None  # vllm-omni's name: clone from the speaker embedding alone
    sample_rate: int | None = None
    context: list[ContextTurn] | None = Field(None, description=(
        "earlier turns of the conversation, oldest first, before the turn `input` speaks (a model that takes no "
        "context refuses it naming `context`)"))
    timestamps: Literal["word"] | None = Field(None, description=(
        "\"word\": when each word is spoken, from the server's aligner (a server without one refuses it naming "
        "`timestamps`): SSE events beside the audio, or a JSON answer with the audio in base64"))

    def voice_name(self) -> str | None:
        """`voice` as a name (`{"id": name}` is OpenAI's other spelling)."""
        return self.voice.id if isinstance(self.voice, VoiceId) else self.voice

    def named(self, param: str) -> str:
        """The name the client sent `param`'s value under: of a value with two names (`TWO_NAMES`), ours
        where the body gives it, else the peers'."""
        for ours, peers in TWO_NAMES:
            if param in (ours, peers):
                return ours if getattr(self, ours) is not None else peers
        return param

    def frame_limits(self) -> tuple[int | None, int | None]:
        """(max, min) frames, each from ours or the peers' name; two different values of one are refused
        naming ours (a `FieldError`)."""
        limit, floor = (self._one(ours, peers) for ours, peers in TWO_NAMES)
        return limit, floor

    def _one(self, ours: str, peers: str) -> int | None:
        a, b = getattr(self, ours), getattr(self, peers)
        if a is not None and b is not None and a != b:
            raise FieldError(f"{ours}: give {ours} or {peers}, not two different values", field=ours)
        return a if a is not None else b


@dataclass(frozen=True)
class ResolvedTurn:
    """A context turn as the server resolved it: `audio` the recording's file bytes (read as `ref_audio` is),
    or `codes` its frames (a stored voice's, or an utterance the same WebSocket session spoke); a stored
    voice's transcript as `text`."""

    speaker: int | str | None = None
    text: str | None = None
    text_ids: tuple[int, ...] | None = None
    audio: bytes | None = None
    codes: Any = None                     # int [frames, codebooks] (numpy), when known


@dataclass(frozen=True)
class Resolved:
    """What the server resolved of a request for its family: what only it can (files, its voice book, the
    transport)."""

    stream: bool                          # the audio is streamed (HTTP: unless `stream: false`; a WebSocket: always)
    reference_audio: bytes | None = None  # `ref_audio`'s file bytes (base64, a data URL or an allowed file, read)
    voice: str | None = None              # `voice` names a stored voice
    speaker: str | None = None            # `voice` names a built-in speaker of the checkpoint (as it spells it)
    text_later: bool = False              # an open request: the text arrives in pieces, none now
    context: tuple[ResolvedTurn, ...] | None = None  # earlier turns, oldest first (None: no context given)


@dataclass(frozen=True)
class FamilyParams:
    """How a family takes `SpeechParams` (its bound family's `speech_params`)."""

    request: Callable[[SpeechParams, Resolved], dict[str, Any]]  # -> the fields of its request
    fields: Mapping[str, str]  # its request fields (a RequestError's `field`) -> the SpeechParams field
    takes: frozenset[str]      # of `ref_audio`, `x_vector_only_mode`, `voice` (a stored voice or a speaker),
                               # `context` (earlier turns, each with file bytes or codes): those it honours
    speaks_while_written: bool = True  # an open request's audio may start before its text has ended (False:
                                       # the family reads the text whole, so no audio comes before its end)


COMMON_FIELDS: dict[str, str] = {
    "text": "input", "instruction": "instructions", "language": "language", "seed": "seed", "voice": "voice",
    "speaker": "voice", "stream": "stream", "max_frames": "max_new_tokens", "min_frames": "min_new_tokens",
    "reference_audio": "ref_audio", "reference_text": "ref_text",
}
"""The fields `common_fields` sets -> the `SpeechParams` field each comes from."""


def common_fields(params: SpeechParams, resolved: Resolved) -> dict[str, Any]:
    """The request fields under v2's Python names (designs/request_fields.md) that every shipped family
    takes alike: `text`, `stream`, `instruction`, `language`, `seed`, `max_frames`, `min_frames`,
    `reference_audio`, `reference_text`, `voice`, `speaker`; a field left out where its value is."""
    limit, floor = params.frame_limits()
    out: dict[str, Any] = {} if resolved.text_later else {"text": params.input}
    out["stream"] = resolved.stream
    optional = {"instruction": params.instructions, "language": params.language, "seed": params.seed,
                "max_frames": limit, "min_frames": floor, "reference_audio": resolved.reference_audio,
                "reference_text": params.ref_text if resolved.reference_audio is not None else None,
                "voice": resolved.voice, "speaker": resolved.speaker}
    out.update({k: v for k, v in optional.items() if v is not None})
    return out
