"""The OpenAI speech request: the checks that belong to HTTP, and what the server resolves for the family.

Owns: `SpeechBody` (the body of `POST /v1/audio/speech`: `v2.params.SpeechParams`, OpenAI's fields plus the
peers' extensions, strictly typed), the checks that belong to HTTP (model name, input length, speed, format
and rate, streaming mode: every format streams unless `stream: false`, one value under two names, reference
audio sources, an input the family does not take), and `plan()`: a `SpeechPlan` holding the parsed params,
the reference recording's bytes, the context turns' recordings (`context`: each turn's `audio` read as
`ref_audio` is; a turn with a stored `voice` takes nothing else but its speaker), the output spec and how to
answer; `resolved()` (what the server resolved, for the family's mapping: a context turn's stored voice
becomes its transcript and codes through the caller's lookup), `family_params(runtime)` (how the runtime's
family takes `SpeechParams`, the `SpeechFamily` protocol: it maps them onto its request and names its fields'
parameters) and `param_names` (its field table in the names the client sent). The server never builds a
family's request itself.
Reference audio is read from base64 or a data URL; a `file://` path only inside the allow-listed folder, a
regular file read only up to the cap (every path that cannot be one, NUL bytes, overlong names and symlink
loops included, is a 400 naming `ref_audio`, or `context` for a turn's audio, whose message holds no server path);
never a URL on the network.
Must not know: FastAPI, the engine, handles, encoders beyond their spec, any family or its request fields.
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Collection, Mapping, Protocol, runtime_checkable
from urllib.parse import unquote, urlparse

from pydantic import ValidationError

from v2.errors import FieldError, explain_unknown
from v2.params import ContextTurn, FamilyParams, Resolved, ResolvedTurn, SpeechParams
from v2.server.audio import OutputSpec, output_spec
from v2.server.errors import ApiError

if TYPE_CHECKING:
    from v2.runtime import Runtime

OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse")
OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
NO_CLONING = "voice cloning is not available on this runtime"
RUNTIME_INPUTS = ("reference_audio", "voice")  # what the runtime layer takes besides text: recordings, stored voices

SpeechBody = SpeechParams  # the body of POST /v1/audio/speech (and of a WebSocket's session.config, less `input`)


@dataclass(frozen=True)
class Limits:
    model_names: tuple[str, ...]           # accepted `model` values (the first is the served name)
    max_input_chars: int = 4096            # OpenAI's cap on `input`
    allowed_media_path: Path | None = None  # `file://` reference audio only under this folder
    max_reference_bytes: int = 16 * 2**20  # a `file://` reference over this is refused before it is read


@dataclass(frozen=True)
class SpeechPlan:
    params: SpeechParams      # the body, checked (the family maps it onto its request)
    reference: bytes | None   # `ref_audio`'s bytes, read
    voice: str | None         # a voice name still to resolve against the voice store
    spec: OutputSpec
    streaming: bool
    sse: bool
    context: tuple[tuple[ContextTurn, bytes | None], ...] | None = None  # each turn, with its recording's bytes


StoredTurn = Callable[[str, str], tuple[Any, str]]
"""A context turn's stored voice (name, where in the body) -> (its codes, its transcript); refuses an
ApiError naming `context` (voices.py `VoiceBook.turn_voice`)."""


_INTEGERS = frozenset(name for name, f in SpeechParams.model_fields.items() if f.annotation in (int, int | None))


def _whole(value: Any) -> Any:
    """A float with no fraction as the int it is (JSON has one number type, and JSON Schema's `integer` is
    `7.0` as well as `7`); anything else as it is, for the strict model to judge."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def integral(raw: dict[str, Any]) -> dict[str, Any]:
    """The body with the integer fields' whole floats as ints (a context turn's `speaker` and `text_ids` too)."""
    out = {k: _whole(v) if k in _INTEGERS else v for k, v in raw.items()}
    turns = out.get("context")
    if isinstance(turns, list):
        out["context"] = [_integral_turn(t) if isinstance(t, dict) else t for t in turns]
    return out


def _integral_turn(turn: dict[str, Any]) -> dict[str, Any]:
    """A context turn with a whole-float `speaker` and `text_ids` list's whole floats as ints; a value of any
    other shape as it is (the model names it)."""
    out = dict(turn)
    if isinstance(out.get("speaker"), float):
        out["speaker"] = _whole(out["speaker"])
    if isinstance(out.get("text_ids"), list):
        out["text_ids"] = [_whole(x) for x in out["text_ids"]]
    return out


def parse_body(raw: dict[str, Any]) -> SpeechParams:
    try:
        return SpeechParams.model_validate(integral(raw))
    except ValidationError as e:
        err = explain_unknown(e.errors()[0], e.title)  # an unknown field: the closest known one, the fields' page
        param = ".".join(str(x) for x in err["loc"]) or None
        param = param.split(".")[0] if param else None
        where = _turn_path(err["loc"]) if param == "context" else param
        raise ApiError(400, f"{where or 'body'}: {err['msg']}", param=param, code="invalid_value") from None


def _turn_path(loc: tuple[Any, ...]) -> str:
    """A pydantic location inside `context` as the client writes it: `context[1].speaker` (union tags left out)."""
    path = "context"
    for x in loc[1:]:
        if isinstance(x, int):
            path += f"[{x}]"
        elif x in ContextTurn.model_fields:
            path += f".{x}"
    return path


def runtime_supports(field: str) -> bool:
    """Whether the runtime layer takes an input besides text: reference recordings (`reference_audio`: it
    encodes them) and stored voices (`voice`); which of them a family honours is its `FamilyParams.takes`."""
    return field in RUNTIME_INPUTS


@runtime_checkable
class SpeechFamily(Protocol):
    """A bound family a server can serve: how it takes `SpeechParams` (each shipped family's class attribute
    `speech_params`, from its params.py)."""

    @property
    def speech_params(self) -> FamilyParams: ...


def _chat_card(params: SpeechParams, resolved: Resolved) -> dict[str, Any]:
    raise ApiError(404, "model: a chat model speaks its own reply: use POST /v1/chat/completions", param="model",
                   code="model_not_supported")


CHAT_CARD = FamilyParams(request=_chat_card, fields={}, takes=frozenset())
"""What a chat card (its request takes `messages`) without `speech_params` gives the speech routes: nothing
to map (they refuse before it is asked: chat.py `refusals`), no optional input."""


def family_params(runtime: Runtime) -> FamilyParams:
    """How the runtime's family takes `SpeechParams` (its bound family's `speech_params`); a family without
    one cannot be served (a TypeError naming `speech_params`), unless its request takes `messages` (a chat
    card: `CHAT_CARD`)."""
    family = runtime.family
    if not isinstance(family, SpeechFamily) and "messages" in getattr(runtime, "request_fields", ()):
        return CHAT_CARD  # a chat card speaks its own reply: the speech routes refuse it before any mapping
    if not isinstance(family, SpeechFamily) or not isinstance(family.speech_params, FamilyParams):
        raise TypeError(f"the {type(family).__name__} family gives no `speech_params` (a v2.params.FamilyParams), "
                        "so a server cannot map a speech request onto its request")
    return family.speech_params


def param_names(family: FamilyParams, params: SpeechParams) -> dict[str, str]:
    """The family's request fields -> the parameter each came from, as the client named it (`max_frames` or
    `max_new_tokens`, whichever it sent)."""
    return {field: params.named(param) for field, param in family.fields.items()}


def resolved(p: SpeechPlan, voice: Mapping[str, str], *, stream: bool | None = None, text_later: bool = False,
             stored: StoredTurn | None = None) -> Resolved:
    """What the family's mapping takes besides the params. `voice`: the voice book's answer for the plan's
    voice ({"speaker": name}, {"voice": name} or {}); `stream`: whether the audio streams (default: as planned);
    `stored`: how a context turn's stored voice is looked up (needed when a turn names one)."""
    return Resolved(stream=p.streaming if stream is None else stream, reference_audio=p.reference,
                    voice=voice.get("voice"), speaker=voice.get("speaker"), text_later=text_later,
                    context=context_turns(p.context, stored))


def context_turns(turns: tuple[tuple[ContextTurn, bytes | None], ...] | None,
                  stored: StoredTurn | None) -> tuple[ResolvedTurn, ...] | None:
    """The planned context turns as the family takes them: a stored voice's transcript and codes in place of
    its name (looked up through `stored`)."""
    if turns is None:
        return None
    out = []
    for i, (turn, audio) in enumerate(turns):
        text, codes = turn.text, None
        if turn.voice is not None:
            if stored is None:
                raise ApiError(400, f"context[{i}].voice: this server looks up no stored voices", param="context",
                               code="unsupported")
            codes, text = stored(turn.voice, f"context[{i}].voice")
        ids = None if turn.text_ids is None else tuple(turn.text_ids)
        out.append(ResolvedTurn(turn.speaker, text, ids, audio, codes))
    return tuple(out)


def plan(body: SpeechParams, limits: Limits, *, native_rate: int, native_channels: int,
         takes: Collection[str] | None = None) -> SpeechPlan:
    """`takes`: the optional inputs the family honours (`FamilyParams.takes`; None: not known, all)."""
    if body.model is not None and body.model not in limits.model_names:
        raise ApiError(404, f"model: {body.model!r} is not served here (served: {', '.join(limits.model_names)})",
                       param="model", code="model_not_found")
    if len(body.input) > limits.max_input_chars:
        raise ApiError(400, f"input: {len(body.input)} characters, over this server's limit of "
                       f"{limits.max_input_chars} (--max-input-chars)",
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
    try:
        body.frame_limits()  # ours and the peers' name for one value: two different values are refused
    except FieldError as e:
        raise ApiError(400, str(e), param=e.field, code="invalid_value") from None
    return SpeechPlan(body, _reference(body, limits, takes), body.voice_name(), spec, streaming, sse,
                      _context(body, limits, takes))


def _takes(takes: Collection[str] | None, name: str) -> bool:
    return takes is None or name in takes


def _reference(body: SpeechParams, limits: Limits, takes: Collection[str] | None) -> bytes | None:
    if body.ref_audio is None:
        for name in ("ref_text", "x_vector_only_mode"):
            if getattr(body, name) is not None:
                raise ApiError(400, f"{name}: give it with ref_audio", param=name, code="invalid_value")
        return None
    if not (runtime_supports("reference_audio") and _takes(takes, "ref_audio")):
        raise ApiError(400, f"ref_audio: {NO_CLONING}", param="ref_audio", code="unsupported")
    data = read_reference(body.ref_audio, limits.allowed_media_path, limits.max_reference_bytes)
    if body.x_vector_only_mode is not None and not _takes(takes, "x_vector_only_mode"):
        raise ApiError(400, "x_vector_only_mode: this model's clones have no x-vector-only mode (omit it)",
                       param="x_vector_only_mode", code="unsupported")
    return data


def _context(body: SpeechParams, limits: Limits,
             takes: Collection[str] | None) -> tuple[tuple[ContextTurn, bytes | None], ...] | None:
    """Each context turn with its recording read (as `ref_audio` is); a stored voice is the turn's text and
    audio, so it goes with nothing but the speaker. Refusals name `context` (the message: which turn)."""
    if body.context is None:
        return None
    if not _takes(takes, "context"):
        raise ApiError(400, "context: this model takes no conversation context (earlier turns); omit it",
                       param="context", code="unsupported")
    return tuple((turn, read_turn(turn, limits, where=f"context[{i}].", param="context"))
                 for i, turn in enumerate(body.context))


def read_turn(turn: ContextTurn, limits: Limits, *, where: str = "", param: str | None = None) -> bytes | None:
    """A context turn's recording, read as `ref_audio` is; a stored voice is the turn's text and audio, so it
    goes with nothing but the speaker. Refusals name `param` (default: the turn's field), the message the
    field at `where` (e.g. `context[1].audio`)."""
    if turn.voice is not None and (turn.text is not None or turn.text_ids is not None or turn.audio is not None):
        raise ApiError(400, f"{where}voice: a stored voice is the turn's text and audio; give voice alone (with its "
                       "speaker), or text with audio", param=param or "voice", code="invalid_value")
    if turn.audio is None:
        return None
    return read_reference(turn.audio, limits.allowed_media_path, limits.max_reference_bytes, name=f"{where}audio",
                          param=param or "audio")


def read_reference(value: str, allowed: Path | None, max_bytes: int = 16 * 2**20, *, name: str = "ref_audio",
                   param: str = "ref_audio") -> bytes:
    """The bytes of a reference audio file from base64, a base64 data URL, or an allow-listed `file://` path
    (a regular file of at most `max_bytes`; every path that cannot be one is a 400 naming `param`, its message
    starting with `name`)."""
    if value.startswith("data:"):
        head, sep, data = value.partition(",")
        if not sep or not head.endswith(";base64"):
            raise _bad(name, "a data URL must be base64 (data:audio/wav;base64,...)", param)
        return _b64(data, name, param)
    if value.startswith("file://"):
        return _local(value, allowed, max_bytes, name, param)
    if "://" in value[:16]:
        raise _bad(name, "URLs are not fetched; send base64 or a data URL", param)
    return _b64(value, name, param)


def _bad(name: str, why: str, param: str, code: str = "invalid_value") -> ApiError:
    return ApiError(400, f"{name}: {why}", param=param, code=code)


def _b64(data: str, name: str, param: str) -> bytes:
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise _bad(name, "not valid base64", param) from None
    if not raw:
        raise _bad(name, "empty", param)
    return raw


def _local(url: str, allowed: Path | None, max_bytes: int, name: str, param: str) -> bytes:
    if allowed is None:
        raise _bad(name, "file:// is off on this server (see --allowed-local-media-path)", param)
    try:  # a NUL byte (ValueError), a name too long (OSError), a symlink loop (RuntimeError)
        path = Path(unquote(urlparse(url).path)).resolve()
        inside = path.is_relative_to(allowed.resolve()) and path.is_file()
    except (OSError, ValueError, RuntimeError) as e:
        raise _bad(name, f"not a usable file path ({_reason(e)})", param) from None
    if not inside:
        raise _bad(name, "not a file inside the allowed folder", param)
    try:  # no blocking on a FIFO swapped in since the check, no symlink swapped in as the last part
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise _bad(name, f"cannot open the file ({_reason(e)})", param) from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise _bad(name, "not a regular file", param)
        if info.st_size > max_bytes:
            raise _bad(name, f"the file is {info.st_size} bytes, over the limit of {max_bytes}", param,
                       "reference_too_large")
        data = f.read(max_bytes + 1)  # the file may have grown since fstat
    if len(data) > max_bytes:
        raise _bad(name, f"the file is over the limit of {max_bytes} bytes", param, "reference_too_large")
    if not data:
        raise _bad(name, "the file is empty", param)
    return data


def _reason(e: BaseException) -> str:
    """Why a path is unusable, in words that never hold the path: an exception's own text may quote it (Python
    3.11's symlink loop names the folder), and the server's folders are not the client's to see."""
    if isinstance(e, OSError) and e.errno:
        return os.strerror(e.errno)
    if isinstance(e, RuntimeError):
        return "a symlink loop"
    if isinstance(e, ValueError):
        return "a NUL byte in the path"
    return "the system refused it"
