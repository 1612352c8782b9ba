"""The errors a request or a command meets, in no family's terms.

Owns: `CliError` (an expected failure of a command, shown as its one line: raised by the command line and by
`serve`'s socket binding in the server, so neither imports the other for it), `RequestError` (a request field
is invalid; its `field` names the field to blame), `FieldError` (a value a validator or converter cannot use,
raised inside a schema's checks), `OverloadedError` (the queue is full), and turning a pydantic validation
error into a `RequestError` (`from_validation`: its `field` comes from the first error's location, or from the
`FieldError` a rule raised, never from the message; every error is in the message; `describe`, `blamed_field`
and `reason` for one error of it; an unknown field with the closest known one, `did_you_mean`, and the page of
the fields). A family's request schema and the server both use these; none of them knows the other.
Must not know: any family, the runtime, the server, pydantic's import (only the shape of its errors and models:
an unknown field's neighbours are the fields of the model the error names, found among those loaded).
"""

from __future__ import annotations

import difflib
import sys
from typing import TYPE_CHECKING, Any, Iterable, Sequence

if TYPE_CHECKING:
    from pydantic import ValidationError


FIELDS_PAGE = "designs/request_fields.md"  # every field of a request, in Python, over HTTP and on the command line


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`did you mean 'x'?` for the known name closest to a mistyped `name`, or "" where none is close."""
    close = difflib.get_close_matches(name, [k for k in known if k != name], n=1, cutoff=0.75)
    return f"did you mean {close[0]!r}?" if close else ""


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


class CliError(Exception):
    """An expected failure of a command; its message is the one line the user sees (`error: ...`)."""


def from_validation(error: ValidationError, *, at: Sequence[str | int] = ()) -> RequestError:
    """A RequestError of `error`'s first error's field, every error described in the message. `at`: the
    location of the validated value inside the request (e.g. ("sampling",) for a nested model validated alone)."""
    errors = [explain_unknown(err, error.title, top=not at) for err in error.errors()]
    errors = [{**err, "loc": (*at, *err["loc"])} for err in errors]
    return RequestError("; ".join(describe(err) for err in errors), field=blamed_field(errors[0]))


def explain_unknown(err: Any, title: str, *, top: bool = True) -> Any:
    """One pydantic error of a model named `title` (`ValidationError.title`): an unknown field's with its
    message naming the closest field of the model it is in (and, at the request's `top`, the page of the
    fields); any other error as it is."""
    if err["type"] != "extra_forbidden" or not err["loc"]:
        return err
    hint = did_you_mean(str(err["loc"][-1]), _fields_at(title, err["loc"][:-1]))
    see = f"the fields: {FIELDS_PAGE}" if top and len(err["loc"]) == 1 else ""
    extra = " ".join(x for x in (hint, see) if x)
    return {**err, "msg": f"{err['msg']} ({extra})" if extra else err["msg"]}


def _fields_at(title: str, path: Sequence[Any]) -> set[str]:
    """The field names of the model(s) named `title` (the validated model's class name), with those of its
    `sampling` (the knobs a request may give flat), or of the model reached from it along `path` (field names;
    list indices and union tags are passed over)."""
    pydantic = sys.modules.get("pydantic")
    if pydantic is None:
        return set()
    models, seen, todo = [], set(), [pydantic.BaseModel]
    while todo:  # every loaded model class (a validation error means its model is loaded)
        for sub in todo.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
                if sub.__name__ == title:
                    models.append(sub)
    names: set[str] = set()
    if not path:  # the top: its own fields and the sampling knobs, which a request may give flat
        names = {name for m in models for name in m.model_fields}
        path = ("sampling",)
    for step in path:
        inner = [m.model_fields[step].annotation for m in models if isinstance(step, str) and step in m.model_fields]
        if inner:
            models = [m for a in inner for m in _models_in(a, pydantic.BaseModel)]
    return names | {name for m in models for name in m.model_fields}


def _models_in(annotation: Any, base: type) -> list[Any]:
    """The model classes inside a field's annotation (`Head | None`, `list[Turn]`, `Annotated[...]`)."""
    import typing

    if isinstance(annotation, type) and issubclass(annotation, base):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg, base)]


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
