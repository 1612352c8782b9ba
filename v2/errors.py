"""The errors a request meets, in no family's terms.

Owns: `RequestError` (a request field is invalid; its `field` names the field to blame), `FieldError` (a
value a validator or converter cannot use, raised inside a schema's checks), `OverloadedError` (the queue
is full), and turning a pydantic validation error into a `RequestError` (`from_validation`: its `field`
comes from the first error's location, or from the `FieldError` a rule raised, never from the message;
every error is in the message; `describe`, `blamed_field` and `reason` for one error of it). A family's
request schema and the server both use these; none of them knows the other.
Must not know: any family, the runtime, the server, pydantic's import (only the shape of its errors).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from pydantic import ValidationError


class RequestError(ValueError):
    """A request field is invalid. `field`: the request field to blame, as a dotted name without indices
    ("text", "sampling.audio.top_k", "reference_audio"), given by every raise site; None where no one field
    is to blame, or where a raise site does not say (a server then names no parameter). The message starts
    with the field's name (and index: "reference_audio[1]: ..."), for people."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class FieldError(ValueError):
    """A value cannot be used. `field`: the field to blame, a dotted name without indices ("reference_codes",
    "sampling.audio.top_k"), or None where no one field is; the message starts with the field's name (and
    row, e.g. "reference_codes[1][3]: ..."), for people."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class OverloadedError(RuntimeError):
    """The waiting queue is full: try again later (nothing was queued)."""


def from_validation(error: ValidationError, *, at: Sequence[str | int] = ()) -> RequestError:
    """A RequestError of `error`'s first error's field, every error described in the message. `at`: the
    location of the validated value inside the request (e.g. ("sampling",) for a nested model validated alone)."""
    errors = [{**err, "loc": (*at, *err["loc"])} for err in error.errors()]
    return RequestError("; ".join(describe(err) for err in errors), field=blamed_field(errors[0]))


def _cause(err: Any) -> Any:
    """The exception a validator raised (a `FieldError` says its field), or None for pydantic's own checks."""
    return err.get("ctx", {}).get("error") if err["type"] == "value_error" else None


def reason(err: Any) -> str:
    """One pydantic error's message, without its location."""
    cause = _cause(err)
    return err["msg"] if cause is None else str(cause)


def blamed_field(err: Any) -> str | None:
    """The field one pydantic error blames: the one its rule named, else its location less list indices
    ("sampling.audio.top_k"; "reference_codes.1" -> "reference_codes"); None for a whole-request check that
    named none."""
    cause = _cause(err)
    if isinstance(cause, FieldError) and cause.field is not None:
        return cause.field
    loc = [str(x) for x in err["loc"] if not isinstance(x, int)]
    return ".".join(loc) or None


def describe(err: Any) -> str:
    """'field: message'; a rule's or converter's message that names its field (and row) is kept as it is."""
    cause = _cause(err)
    if isinstance(cause, FieldError) and cause.field is not None:
        return str(cause)
    loc = ".".join(str(x) for x in err["loc"])
    message = reason(err)
    if not loc:  # a whole-request check that named no field
        return f"request: {message}"
    return f"{loc}: {message}"
