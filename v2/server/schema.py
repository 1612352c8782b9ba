"""The OpenAI speech request and how it maps onto the runtime's `SpeechRequest` fields.

Owns: `SpeechBody` (OpenAI's `POST /v1/audio/speech` fields plus the peers' extensions, strictly typed:
a bool is not a number, unknown fields are refused), the checks that belong to HTTP (model name, input
length, speed, format and rate, streaming mode: every format streams unless `stream: false`, reference audio
sources), and `plan()`: a `SpeechPlan` holding the runtime request's fields (the runtime parses them into its
family's typed request), the output spec and how to answer.
Reference audio is read from base64 or a data URL; a `file://` path only inside the allow-listed folder, a
regular file read only up to the cap (every path that cannot be one, NUL bytes, overlong names and symlink
loops included, is a 400 naming `ref_audio`); never a URL on the network.
Must not know: FastAPI, the engine, handles, encoders beyond their spec.
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Literal
from urllib.parse import unquote, urlparse

from pydantic import BaseModel, ConfigDict, ValidationError

from v2.fields import FieldError
from v2.request import SpeechRequest
from v2.server.audio import OutputSpec, output_spec
from v2.server.errors import ApiError

OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse")
OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
NO_CLONING = "voice cloning is not available on this runtime"


class VoiceId(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)
    id: str


class SpeechBody(BaseModel):
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


@dataclass(frozen=True)
class Limits:
    model_names: tuple[str, ...]           # accepted `model` values (the first is the served name)
    max_input_chars: int = 4096            # OpenAI's cap on `input`
    allowed_media_path: Path | None = None  # `file://` reference audio only under this folder
    max_reference_bytes: int = 16 * 2**20  # a `file://` reference over this is refused before it is read


@dataclass(frozen=True)
class SpeechPlan:
    request: dict[str, Any]   # the runtime request's fields, less the voice (`runtime.parse` makes them typed)
    voice: str | None         # a voice name still to resolve against the voice store
    spec: OutputSpec
    streaming: bool
    sse: bool
    aliases: dict[str, str]   # runtime fields the client named its own way (for error messages)


def parse_body(raw: dict[str, Any]) -> SpeechBody:
    try:
        return SpeechBody.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        param = ".".join(str(x) for x in err["loc"]) or None
        param = param.split(".")[0] if param else None
        raise ApiError(400, f"{param or 'body'}: {err['msg']}", param=param, code="invalid_value") from None


def runtime_supports(field: str) -> bool:
    """Whether the runtime's request schema has a field (reference audio and voices arrive with the voice store)."""
    return field in SpeechRequest.model_fields


def request_fields(runtime: Any) -> Collection[str] | None:
    """The request fields a runtime's family takes (`runtime.request_fields`), None where it does not say."""
    return getattr(runtime, "request_fields", None) or None


def family_takes(fields: Collection[str] | None, field: str) -> bool:
    """Whether the family takes a request field: one of its `fields` (True where they are not known)."""
    return fields is None or field in fields


def plan(body: SpeechBody, limits: Limits, *, native_rate: int, native_channels: int,
         fields: Collection[str] | None = None) -> SpeechPlan:
    """`fields`: the request fields the runtime takes (`request_fields`)."""
    if body.model is not None and body.model not in limits.model_names:
        raise ApiError(404, f"model: {body.model!r} is not served here (served: {', '.join(limits.model_names)})",
                       param="model", code="model_not_found")
    if len(body.input) > limits.max_input_chars:
        raise ApiError(400, f"input: {len(body.input)} characters, over the limit of {limits.max_input_chars}",
                       param="input", code="string_above_max_length")
    if body.speed != 1.0:
        raise ApiError(400, f"speed: only 1.0 is supported, got {body.speed}", param="speed", code="invalid_value")
    try:
        spec = output_spec(body.response_format, body.sample_rate, native_rate, native_channels)
    except FieldError as e:
        raise ApiError(400, str(e), param=e.field, code="invalid_value") from None
    sse = body.stream_format == "sse"
    streaming = body.stream is not False  # every format streams unless `stream: false` asks for the whole file
    if sse and not streaming:
        raise ApiError(400, "stream: stream_format 'sse' needs a stream", param="stream", code="invalid_value")
    aliases = {"max_frames": "max_frames" if body.max_frames is not None else "max_new_tokens",
               "min_frames": "min_frames" if body.min_frames is not None else "min_new_tokens"}
    request: dict[str, Any] = {"text": body.input, "stream": streaming}
    optional = {"instruction": body.instructions, "language": body.language, "seed": body.seed,
                "max_frames": _one_of(body.max_frames, body.max_new_tokens, "max_frames", "max_new_tokens"),
                "min_frames": _one_of(body.min_frames, body.min_new_tokens, "min_frames", "min_new_tokens")}
    request.update({k: v for k, v in optional.items() if v is not None})
    audio = {k: v for k, v in (("temperature", body.temperature), ("top_p", body.top_p), ("top_k", body.top_k))
             if v is not None}
    sampling: dict[str, Any] = {"audio": audio} if audio else {}
    if body.repetition_penalty is not None:
        sampling["repetition_penalty"] = body.repetition_penalty
    if sampling:
        request["sampling"] = sampling
    request.update(_reference(body, limits, fields))
    voice = body.voice.id if isinstance(body.voice, VoiceId) else body.voice
    return SpeechPlan(request, voice, spec, streaming, sse, aliases)


def _one_of(a: int | None, b: int | None, name_a: str, name_b: str) -> int | None:
    """A value that two names can give (ours and the peers'); two different values are refused."""
    if a is not None and b is not None and a != b:
        raise ApiError(400, f"{name_a}: give {name_a} or {name_b}, not two different values", param=name_a,
                       code="invalid_value")
    return a if a is not None else b


def _reference(body: SpeechBody, limits: Limits, fields: Collection[str] | None) -> dict[str, Any]:
    if body.ref_audio is None:
        for name in ("ref_text", "x_vector_only_mode"):
            if getattr(body, name) is not None:
                raise ApiError(400, f"{name}: give it with ref_audio", param=name, code="invalid_value")
        return {}
    if not (runtime_supports("reference_audio") and family_takes(fields, "reference_audio")):
        raise ApiError(400, f"ref_audio: {NO_CLONING}", param="ref_audio", code="unsupported")
    out: dict[str, Any] = {"reference_audio": read_reference(body.ref_audio, limits.allowed_media_path,
                                                                   limits.max_reference_bytes)}
    if body.ref_text is not None:
        out["reference_text"] = body.ref_text
    if body.x_vector_only_mode is not None:
        if not family_takes(fields, "x_vector_only"):
            raise ApiError(400, "x_vector_only_mode: this model's clones have no x-vector-only mode (omit it)",
                           param="x_vector_only_mode", code="unsupported")
        out["x_vector_only"] = body.x_vector_only_mode
    return out


def read_reference(value: str, allowed: Path | None, max_bytes: int = 16 * 2**20) -> bytes:
    """The bytes of a reference audio file from base64, a base64 data URL, or an allow-listed `file://` path
    (a regular file of at most `max_bytes`; every path that cannot be one is a 400 naming `ref_audio`)."""
    if value.startswith("data:"):
        head, sep, data = value.partition(",")
        if not sep or not head.endswith(";base64"):
            raise ApiError(400, "ref_audio: a data URL must be base64 (data:audio/wav;base64,...)", param="ref_audio",
                           code="invalid_value")
        return _b64(data)
    if value.startswith("file://"):
        return _local(value, allowed, max_bytes)
    if "://" in value[:16]:
        raise ApiError(400, "ref_audio: URLs are not fetched; send base64 or a data URL", param="ref_audio",
                       code="invalid_value")
    return _b64(value)


def _b64(data: str) -> bytes:
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, "ref_audio: not valid base64", param="ref_audio", code="invalid_value") from None
    if not raw:
        raise ApiError(400, "ref_audio: empty", param="ref_audio", code="invalid_value")
    return raw


def _local(url: str, allowed: Path | None, max_bytes: int) -> bytes:
    if allowed is None:
        raise ApiError(400, "ref_audio: file:// is off on this server (see --allowed-local-media-path)",
                       param="ref_audio", code="invalid_value")
    try:  # a NUL byte (ValueError), a name too long (OSError), a symlink loop (RuntimeError)
        path = Path(unquote(urlparse(url).path)).resolve()
        inside = path.is_relative_to(allowed.resolve()) and path.is_file()
    except (OSError, ValueError, RuntimeError) as e:
        raise ApiError(400, f"ref_audio: not a usable file path ({_reason(e)})", param="ref_audio",
                       code="invalid_value") from None
    if not inside:
        raise ApiError(400, "ref_audio: not a file inside the allowed folder", param="ref_audio", code="invalid_value")
    try:  # no blocking on a FIFO swapped in since the check, no symlink swapped in as the last part
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise ApiError(400, f"ref_audio: cannot open the file ({_reason(e)})", param="ref_audio",
                       code="invalid_value") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ApiError(400, "ref_audio: not a regular file", param="ref_audio", code="invalid_value")
        if info.st_size > max_bytes:
            raise ApiError(400, f"ref_audio: the file is {info.st_size} bytes, over the limit of {max_bytes}",
                           param="ref_audio", code="reference_too_large")
        data = f.read(max_bytes + 1)  # the file may have grown since fstat
    if len(data) > max_bytes:
        raise ApiError(400, f"ref_audio: the file is over the limit of {max_bytes} bytes", param="ref_audio",
                       code="reference_too_large")
    if not data:
        raise ApiError(400, "ref_audio: the file is empty", param="ref_audio", code="invalid_value")
    return data


def _reason(e: BaseException) -> str:
    return e.strerror if isinstance(e, OSError) and e.strerror else str(e)[:120]
