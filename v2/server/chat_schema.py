"""OpenAI's chat completions request: `ChatBody`, its messages, the checks that belong to HTTP, and the fields a
chat card's request takes.

Owns: the body of `POST /v1/chat/completions` (OpenAI's names: `model`, `messages`, `modalities`, `audio:
{voice, format}`, `max_tokens` / `max_completion_tokens`, `temperature`, `top_p`, `seed`, `stream`,
`stream_options`, `n` (1 only), `user`), strictly typed as `SpeechParams` is; the messages (`system` /
`developer` / `user` / `assistant`, content a string or parts: `text`, and `input_audio` in a user turn),
each checked on its own so a refusal names its path (`messages[1].content[0].type`); OpenAI's parameters this
server does not honour (`tools`, `logprobs`, `response_format`, ...) refused by name; `ChatPlan` (the body
checked against the served names and the card's speakers) and `request_fields` (the request a chat card takes:
`messages`, `modalities`, `speaker`, `max_tokens`, `temperature`, `top_p`, `seed`, `stream`, the names every
chat card's request shares), `is_chat_card` (its request takes `messages`) and `field_param` (a request
field, as a refusal names it, -> the parameter the client sent).
Must not know: FastAPI, the engine, handles, encoders, any family.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Iterable, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from v2.errors import explain_unknown
from v2.fields import INT64_MAX, TEMPERATURE_MIN
from v2.server.errors import ApiError

CHAT = "/v1/chat/completions"
FORMATS = ("wav", "mp3", "flac", "opus", "aac", "pcm16")  # OpenAI's audio.format; pcm16 is the server's `pcm`
UNSUPPORTED = ("tools", "tool_choice", "functions", "function_call", "parallel_tool_calls", "logprobs",
               "top_logprobs", "response_format", "stop", "presence_penalty", "frequency_penalty", "logit_bias",
               "prediction", "reasoning_effort", "service_tier", "store", "metadata", "web_search_options",
               "verbosity", "prompt_cache_key", "safety_identifier")
"""OpenAI's parameters this server does not honour: refused by name (not ignored: an answer without what they
ask for would look like one with it)."""
PARTS = {"user": ("text", "input_audio"), "system": ("text",), "developer": ("text",), "assistant": ("text",)}


def _strict() -> ConfigDict:
    return ConfigDict(strict=True, extra="forbid", frozen=True)


class TextPart(BaseModel):
    model_config = _strict()
    type: Literal["text"]
    text: str


class InputAudio(BaseModel):
    model_config = _strict()
    data: str = Field(description="the recording, base64; a `data:audio/<type>;base64,` prefix is taken where its "
                                  "type is the format's (audio/wav, audio/x-wav for wav; audio/mpeg for mp3; ...)")
    format: str = Field(description="its container: wav or mp3 (OpenAI's), or another the model reads")


class AudioPart(BaseModel):
    model_config = _strict()
    type: Literal["input_audio"]
    input_audio: InputAudio


class SystemMessage(BaseModel):
    model_config = _strict()
    role: Literal["system", "developer"]
    content: str | list[TextPart]
    name: str | None = None


class UserMessage(BaseModel):
    model_config = _strict()
    role: Literal["user"]
    content: str | list[Annotated[TextPart | AudioPart, Field(discriminator="type")]]
    name: str | None = None


class AssistantMessage(BaseModel):
    model_config = _strict()
    role: Literal["assistant"]
    content: str | list[TextPart] = Field(description="what the assistant said (its transcript, for a spoken turn: "
                                          "this server keeps no audio to name by id, and makes no tool calls)")
    name: str | None = None


ChatMessage = Annotated[SystemMessage | UserMessage | AssistantMessage, Field(discriminator="role")]
MESSAGES: dict[str, type[BaseModel]] = {"system": SystemMessage, "developer": SystemMessage, "user": UserMessage,
                                        "assistant": AssistantMessage}


class AudioOutput(BaseModel):
    model_config = _strict()
    voice: str = Field(description="the speaker: one of the model's (e.g. Ethan, Chelsie, Aiden)")
    format: Literal["wav", "mp3", "flac", "opus", "aac", "pcm16"] = Field(
        description="the whole answer's audio format; a stream's deltas are always pcm16 (24 kHz mono s16le)")


class StreamOptions(BaseModel):
    model_config = _strict()
    include_usage: bool | None = Field(None, description="one more chunk before [DONE]: `usage`, no choices")


class ChatBody(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, json_schema_extra={
        "if": {"required": ["modalities"], "properties": {"modalities": {"contains": {"const": "audio"}}}},
        "then": {"required": ["audio"], "properties": {"audio": {"type": "object"}}},
        "not": {"required": ["max_tokens", "max_completion_tokens"]}})
    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    modalities: list[Literal["text", "audio"]] | None = Field(
        None, description='["text"] (the default) or ["text", "audio"]: the reply spoken too',
        json_schema_extra={"uniqueItems": True, "contains": {"const": "text"}})
    audio: AudioOutput | None = Field(None, description='the voice and format: required with modalities "audio"')
    max_tokens: int | None = Field(None, ge=1, le=INT64_MAX, description="the reply's text tokens at most")
    max_completion_tokens: int | None = Field(None, ge=1, le=INT64_MAX, description="max_tokens' newer name (give "
                                              "one of the two)")
    temperature: float | None = Field(None, ge=0.0, le=2.0, description=f"0: greedy (the model's default); else "
                                      f"{TEMPERATURE_MIN} to 2", json_schema_extra={"anyOf": [
                                          {"type": "null"}, {"const": 0},
                                          {"type": "number", "minimum": TEMPERATURE_MIN, "maximum": 2.0}]})
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    seed: int | None = Field(None, ge=0, le=INT64_MAX,
                             description="the same seed and body give the same answer, streamed or not")
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    n: int | None = Field(None, ge=1, le=1, description="1 only")
    user: str | None = Field(None, description="accepted, not used")


@dataclass(frozen=True)
class ChatPlan:
    body: ChatBody
    messages: list[dict[str, Any]]  # as the client sent them, checked (the family renders them)
    audio: bool                     # the reply is spoken too
    speaker: str | None             # the card's name for audio.voice
    format: str                     # the whole answer's audio format (`pcm16` as the server's `pcm`)
    max_tokens: int | None

    @property
    def streaming(self) -> bool:
        return self.body.stream is True

    @property
    def include_usage(self) -> bool:
        return self.streaming and self.body.stream_options is not None and \
            self.body.stream_options.include_usage is True


def parse_chat(raw: dict[str, Any]) -> tuple[ChatBody, list[dict[str, Any]]]:
    """The body checked: OpenAI's parameters this server does not take refused by name, each message on its
    own (a refusal names its path), then the whole strictly. The messages as sent."""
    for name in raw:
        if name in UNSUPPORTED:
            raise ApiError(400, f"{name}: not supported by this server (omit it)", param=name,
                           code="unsupported_parameter")
    messages = raw.get("messages")
    if isinstance(messages, list):
        for i, message in enumerate(messages):
            _check_message(message, f"messages[{i}]")
    try:
        body = ChatBody.model_validate({k: _whole(v) if k in ("max_tokens", "max_completion_tokens", "seed", "n")
                                        else v for k, v in raw.items()})
    except ValidationError as e:
        err = explain_unknown(e.errors()[0], e.title, top=False)
        path = _path(err["loc"])
        raise ApiError(400, f"{path or 'body'}: {err['msg']}", param=path or None, code="invalid_value") from None
    return body, list(messages) if isinstance(messages, list) else []


def _whole(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _path(loc: Iterable[Any], start: str = "") -> str:
    """A pydantic location as the client writes it (`audio.voice`, `messages[0].content`, `modalities[1]`):
    union tags (`list[...]`, `str`, a message's role) left out."""
    path = start
    for x in loc:
        if isinstance(x, int):
            path += f"[{x}]"
        elif not (str(x).startswith(("list[", "function-")) or x == "str") and not (path.endswith("]") and x in MESSAGES):
            path += f".{x}" if path else str(x)
    return path


def _check_message(message: Any, where: str) -> None:
    """One message: its role, its content's parts (those its role takes), then its fields (the path named)."""
    if not isinstance(message, dict):
        raise ApiError(400, f"{where}: a message is an object with `role` and `content`", param=where,
                       code="invalid_value")
    role = message.get("role")
    if role == "tool" or role == "function":
        raise ApiError(400, f"{where}.role: {role!r} messages answer tool calls, which this server does not make",
                       param=f"{where}.role", code="unsupported_value")
    if not isinstance(role, str) or role not in MESSAGES:
        raise ApiError(400, f"{where}.role: expected one of {', '.join(MESSAGES)}, got {role!r}",
                       param=f"{where}.role", code="invalid_value")
    if role == "assistant" and "audio" in message:
        raise ApiError(400, f"{where}.audio: this server keeps no audio to name by id; give the turn's transcript "
                       "as its content", param=f"{where}.audio", code="unsupported_value")
    content = message.get("content")
    if isinstance(content, list):
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in PARTS[role]:
                at = f"{where}.content[{j}].type"
                raise ApiError(400, f"{at}: a {role} message takes {' or '.join(PARTS[role])} parts here, not "
                               f"{kind!r}", param=at, code="unsupported_value")
            model = TextPart if kind == "text" else AudioPart
            _validate(model, part, f"{where}.content[{j}]")
    _validate(MESSAGES[role], {**message, "content": ""} if isinstance(content, list) else message, where)


def _validate(model: type[BaseModel], value: dict[str, Any], where: str) -> None:
    try:
        model.model_validate(value)
    except ValidationError as e:
        err = explain_unknown(e.errors()[0], e.title, top=False)
        at = _path(err["loc"], where)
        raise ApiError(400, f"{at}: {err['msg']}", param=at, code="invalid_value") from None


def plan_chat(body: ChatBody, messages: list[dict[str, Any]], model_names: tuple[str, ...],
              speakers: tuple[str, ...]) -> ChatPlan:
    """The HTTP checks: a served model, the modalities, the voice (one of `speakers`, matched without regard to
    case, named as the card names it), one of the two names of the token cap."""
    if body.model not in model_names:
        raise ApiError(404, f"model: {body.model!r} is not served here (served: {', '.join(model_names)})",
                       param="model", code="model_not_found")
    modalities = body.modalities or ["text"]
    if len(set(modalities)) != len(modalities) or "text" not in modalities:
        raise ApiError(400, f'modalities: ["text"] or ["text", "audio"], got {modalities}', param="modalities",
                       code="invalid_value")
    spoken = "audio" in modalities
    if spoken and body.audio is None:
        raise ApiError(400, 'audio: give {"voice", "format"} with modalities "audio"', param="audio",
                       code="invalid_value")
    voice = None if body.audio is None else _speaker(body.audio.voice, speakers)  # checked wherever given
    if body.temperature is not None and 0 < body.temperature < TEMPERATURE_MIN:
        raise ApiError(400, f"temperature: 0 (greedy) or from {TEMPERATURE_MIN} to 2, got {body.temperature}",
                       param="temperature", code="invalid_value")
    if body.n not in (None, 1):
        raise ApiError(400, "n: one choice only", param="n", code="unsupported_value")
    caps = {body.max_tokens, body.max_completion_tokens} - {None}
    if body.max_tokens is not None and body.max_completion_tokens is not None:
        raise ApiError(400, "max_completion_tokens: the same cap as max_tokens under its newer name: give one",
                       param="max_completion_tokens", code="invalid_value")
    fmt = body.audio.format if body.audio is not None else "wav"
    return ChatPlan(body, messages, spoken, voice if spoken else None, "pcm" if fmt == "pcm16" else fmt,
                    next(iter(caps)) if caps else None)


def _speaker(voice: str, speakers: tuple[str, ...]) -> str:
    if not speakers:
        return voice
    for name in speakers:
        if name.lower() == voice.lower():
            return name
    raise ApiError(400, f"audio.voice: {voice!r} is not one of this model's speakers ({', '.join(speakers)})",
                   param="audio.voice", code="invalid_value")


def request_fields(p: ChatPlan) -> dict[str, Any]:
    """The fields of a chat card's request (the runtime parses them into the family's typed request, once)."""
    fields: dict[str, Any] = {"messages": p.messages, "modalities": ["text", "audio"] if p.audio else ["text"],
                              "stream": p.streaming}
    optional = {"speaker": p.speaker, "max_tokens": p.max_tokens, "temperature": p.body.temperature,
                "top_p": p.body.top_p, "seed": p.body.seed}
    fields.update({k: v for k, v in optional.items() if v is not None})
    return fields


def field_param(field: str | None, message: str, p: ChatPlan) -> str | None:
    """A request field as a refusal names it (`speaker`, `messages.content.input_audio.data`, whose message says
    which turn and part) -> the parameter the client sent (`audio.voice`,
    `messages[1].content[0].input_audio.data`: the path the message starts with)."""
    if field is None:
        return None
    head = field.partition(".")[0]
    names: Mapping[str, str] = {"speaker": "audio.voice", "modalities": "modalities", "temperature": "temperature",
                                "top_p": "top_p", "seed": "seed", "stream": "stream",
                                "max_tokens": "max_completion_tokens" if p.body.max_tokens is None and
                                p.body.max_completion_tokens is not None else "max_tokens"}
    if head == "messages":
        path = message.partition(": ")[0]
        return path if path.startswith("messages") and " " not in path else "messages"
    return names.get(head)


def is_chat_card(request_fields: Iterable[str]) -> bool:
    """Whether a runtime's request takes a conversation (`messages`): it answers chat completions, and speaks
    its own reply, never a given text."""
    return "messages" in set(request_fields)


def not_chat(card: str) -> ApiError:
    return ApiError(404, f"model: {card} is not a chat model: /v1/chat/completions is not served for it (use "
                    "/v1/audio/speech)", param="model", code="model_not_supported")


def chat_only(card: str) -> ApiError:
    """The refusal of the speech routes on a chat card: it speaks its own reply, never a given text."""
    return ApiError(404, f"model: {card} is a chat model: it speaks its own reply, never a given text; use POST "
                    f'{CHAT} with modalities ["text", "audio"]', param="model", code="model_not_supported")


def refuse_chat_card(runtime: Any) -> None:
    """Refuse a speech route (`/v1/audio/speech`, its batch, its WebSocket stream) on a chat card."""
    if is_chat_card(getattr(runtime, "request_fields", ())):
        raise chat_only(runtime.card.name)
