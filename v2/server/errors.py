"""Errors as OpenAI shapes them: `{"error": {"message", "type", "param", "code"}}`, with the HTTP status.

Owns: `ApiError` (what a route raises), the JSON body and response, and mapping a family's field errors onto
the parameter a client sent: by the error's `field` (`RequestError.field`, a request field's dotted name)
through the table the family gives (`FamilyParams.fields`, in the client's names: schema.py `param_names`);
the message's leading field name is put in the client's terms too, except a field inside the parameter
(`context.audio` under `context`, or `context.0.speaker` with its index), whose path already is. A field the
table does not hold (or None) names no parameter.
Must not know: FastAPI routes, the runtime object, audio, any family's fields.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from v2.errors import RequestError

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


def runtime_field_error(error: RequestError, names: Mapping[str, str] | None = None, *,
                        aliases: Mapping[str, str] | None = None) -> ApiError:
    """A 400 from a family's `RequestError`: `param` is its `field` through `names` (the family's request
    fields -> the client's parameters; None when it names no field the client sent), and the message starts
    with that parameter instead of the field. `aliases`: entries that override `names`."""
    field = error.field
    names = {**(names or {}), **(aliases or {})}
    param = None if field is None else names.get(field)
    message = str(error)
    # a field inside the parameter (`context.audio`, or `context.0.speaker` with its index): the path says more
    inside = field is not None and param is not None and field.startswith(param + ".")
    if param is not None and field is not None and not (inside and message.startswith(param + ".")):
        message = param + message[len(field):] if message.startswith(field) else f"{param}: {message}"
    return ApiError(400, _client_names(message, names), param=param, code="invalid_value")


def _client_names(message: str, names: Mapping[str, str]) -> str:
    """The request fields a message mentions (e.g. "or pass x_vector_only: true") in the client's terms; only
    names with an underscore, which cannot be ordinary words (`text` stays text)."""
    for field, param in names.items():
        if "_" in field and "." not in field and field != param:
            message = re.sub(rf"(?<![\w.]){re.escape(field)}(?![\w.])", param, message)
    return message
