"""Errors as OpenAI shapes them: `{"error": {"message", "type", "param", "code"}}`, with the HTTP status.

Owns: `ApiError` (what a route raises), the JSON body and response, and mapping the runtime's field
errors (messages that start with a dotted field name, e.g. "sampling.audio.temperature: ...") back onto
the OpenAI parameter names a client sent, message included.
Must not know: FastAPI routes, the runtime object, audio.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

# the runtime's field -> the OpenAI (or peer extension) parameter; a longer dotted name wins
_PARAMS: dict[str, str] = {
    "text": "input", "instruction": "instructions", "seed": "seed", "language": "language", "voice": "voice",
    "sampling.audio.temperature": "temperature", "sampling.temperature": "temperature",
    "sampling.audio.top_p": "top_p", "sampling.top_p": "top_p",
    "sampling.audio.top_k": "top_k", "sampling.top_k": "top_k",
    "sampling.repetition_penalty": "repetition_penalty",
    "reference_audio": "ref_audio", "reference_text": "ref_text", "reference_codes": "ref_audio",
    "stream": "stream",
}

_FIELD = re.compile(r"([A-Za-z_][\w.]*)(?=[\[: ])")  # the dotted field a runtime message starts with

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "invalid_request_error", 413: "invalid_request_error", 415: "invalid_request_error",
          429: "rate_limit_error", 500: "server_error", 503: "service_unavailable"}


class ApiError(Exception):
    """An HTTP error in OpenAI's shape; `headers` go on the response (e.g. Retry-After)."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type_: str | None = None, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type_ or _TYPES.get(status, "invalid_request_error")
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def encoded(self) -> bytes:
        return json.dumps(self.body()).encode()


def runtime_field_error(message: str, *, aliases: Mapping[str, str] | None = None) -> ApiError:
    """A 400 from a runtime `RequestError`: the first error's dotted field mapped to the client's parameter.
    `aliases`: runtime fields the client named its own way (e.g. max_frames sent as `max_new_tokens`)."""
    first = message.split("; ")[0]
    if first.startswith("request: "):  # a whole-request check that names its field after this prefix
        first = first[len("request: "):]
    match = _FIELD.match(first)
    param = _param_for(match.group(1), aliases or {}) if match else None
    text = param + first[len(match.group(1)):] if match and param else first
    if "; " in message:
        text += " (and: " + message.split("; ", 1)[1] + ")"
    return ApiError(400, text, param=param, code="invalid_value")


def _param_for(name: str, aliases: Mapping[str, str]) -> str | None:
    mapping = {**_PARAMS, "max_frames": "max_new_tokens", "min_frames": "min_new_tokens", **aliases}
    parts = name.split(".")
    for end in range(len(parts), 0, -1):  # the longest known prefix: "reference_audio.0" -> ref_audio
        hit = mapping.get(".".join(parts[:end]))
        if hit is not None:
            return hit
    return None
