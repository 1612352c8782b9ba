"""The speech stream's client messages as a session reads them: bounded before they are parsed, every string
in them encodable.

Owns: the message kinds (`KINDS`), `read_message(raw, max_bytes)`: one WebSocket frame -> the message's dict,
or an `ApiError` naming what is wrong (a binary frame, more than `max_bytes` bytes, nesting deeper or members
more than REST bodies may have (jsonbody.py's bounds, checked before anything is built), not JSON, not an
object, a string anywhere in it that cannot be encoded as UTF-8: a lone surrogate, which JSON's `\\ud800`
escape can carry), and `unencodable(value)`: where the first such string is in a parsed value.
Must not know: the runtime, the session's state, audio, what a message's fields mean beyond their names.
"""

from __future__ import annotations

import json
from typing import Any

from v2.params import ContextTurn, SpeechParams
from v2.server.errors import ApiError
from v2.server.jsonbody import MAX_DEPTH, MAX_MEMBERS, check_shape

KINDS = ("session.config", "input.text", "input.done", "input.cancel", "session.close", "context.append")
# every field a message may have (a refusal names another first)
FIELDS = frozenset({"type", "text", "stream_audio", "split_granularity", "word_timestamps", "played_ms",
                    *SpeechParams.model_fields, *ContextTurn.model_fields})


def read_message(raw: str | None, max_bytes: int) -> dict[str, Any]:
    """The message in one text frame (`raw`; None: a binary frame), refused with an ApiError whose `param`
    names the field the problem is in (the top-level key), else `message`."""
    if raw is None:
        raise ApiError(400, "message: send JSON text messages, not binary ones", param="message",
                       code="invalid_value")
    if len(raw) > max_bytes or (not raw.isascii() and len(raw.encode("utf-8", "surrogatepass")) > max_bytes):
        raise ApiError(400, f"message: over the limit of {max_bytes} bytes", param="message",
                       code="request_too_large")
    try:
        check_shape(raw, known=FIELDS, max_depth=MAX_DEPTH, max_members=MAX_MEMBERS, whole="message")
    except ApiError as e:
        e.param = e.param if e.param is not None else "message"
        raise
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as e:
        why = e.msg if isinstance(e, json.JSONDecodeError) else str(e)[:200]
        raise ApiError(400, f"message: not JSON ({why})", param="message", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "message: a JSON object with a `type`", param="message", code="invalid_json")
    where = unencodable(data)
    if where is not None:
        path, at = where
        top = path.split(".")[0].split("[")[0] or "message"
        raise ApiError(400, f"{path or 'message'}: character {at} is a lone surrogate, which cannot be encoded as "
                       "UTF-8", param=top, code="invalid_value")
    return data


def unencodable(value: Any, path: str = "") -> tuple[str, int] | None:
    """(where, the character's index) of the first string in `value` (a parsed JSON value: its keys too) that
    UTF-8 cannot encode; None when every one can. ASCII strings, the common case, are not copied."""
    if isinstance(value, str):
        return None if value.isascii() else _bad_at(value, path)
    if isinstance(value, dict):
        for k, v in value.items():
            at = f"{path}.{k}" if path else str(k)
            if isinstance(k, str) and (bad := unencodable(k, at)) is not None:
                return bad
            if (bad := unencodable(v, at)) is not None:
                return bad
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if (bad := unencodable(v, f"{path}[{i}]")) is not None:
                return bad
    return None


def _bad_at(text: str, path: str) -> tuple[str, int] | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return path, e.start
    return None
