"""Reading a JSON request body with its cost bounded before anything is built: depth and member count.

Owns: `read_object(raw, ...)`: the body decoded as JSON's own loader decodes it (UTF-8/16/32), then one scan
of its structure that stops at the first bound it passes (nesting deeper than `max_depth`, more than
`max_members` keys and array elements in all), then `json.loads`. The scan visits tokens, not characters: a
regex finds the next structural character and each string is skipped by the json module's own C scanner,
so refusing a body of a million keys or a hundred thousand brackets costs O(limit) steps, never O(body).
A refusal is a 400 naming the top-level member it happened in (for too many top-level keys: the first one
the caller does not know, as the schema would name it; a lone surrogate in the name as its escape, so the
answer can be encoded); its message calls the document `whole` ("body"; a WebSocket's messages say
"message").
Must not know: FastAPI, the speech fields (the caller passes the names it knows), the runtime.
"""

from __future__ import annotations

import json
import re
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import Any, Collection

from v2.server.errors import ApiError

MAX_DEPTH = 16      # a speech body is 2 deep (`voice: {"id": ...}`)
MAX_MEMBERS = 256   # keys and array elements in all; a speech body has at most ~25
_NEXT = re.compile(r'[\[\]{}:,"]')  # the only characters with meaning outside a string
_KEY_CHARS = 200                    # longer keys are cut in the message


def read_object(raw: bytes, *, known: Collection[str] = (), max_depth: int = MAX_DEPTH,
                max_members: int = MAX_MEMBERS) -> dict[str, Any]:
    """The JSON object in `raw`, or an ApiError 400 (`invalid_json`, or `too_complex` naming the member)."""
    try:
        text = raw.decode(json.detect_encoding(raw), "surrogatepass")
    except (UnicodeDecodeError, LookupError) as e:
        raise ApiError(400, f"the body is not valid JSON: {e}", code="invalid_json") from None
    check_shape(text, known=known, max_depth=max_depth, max_members=max_members)
    try:
        body = json.loads(text)
    except ValueError as e:
        raise ApiError(400, f"the body is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object", code="invalid_json")
    return body


def check_shape(text: str, *, known: Collection[str] = (), max_depth: int = MAX_DEPTH,
                max_members: int = MAX_MEMBERS, whole: str = "body") -> int:
    """Refuse `text` at the first bound it passes; the number of tokens visited otherwise. Depth: arrays and
    objects open at once. Members: every key, and every array element after each array's first (the `,`
    of arrays and the `:` of objects). Tokens (strings, brackets, separators): a valid document within both
    bounds has fewer than `token_limit(...)` (each member brings a few, each first element a chain of at
    most `max_depth` arrays), so one with more is invalid or over a bound: refused too. So the scan visits
    O(max_members * max_depth) tokens at most, however long the text. Other malformed JSON is left for
    `json.loads` to describe: the scan stops where it stops making sense."""
    open_: list[str] = []              # the containers the scan is in (at most max_depth)
    members = tokens = pos = 0
    most = token_limit(max_depth, max_members)
    top: str | None = None             # the top-level key whose value the scan is in
    first_unknown: str | None = None   # the first top-level key the caller does not know
    last: str | None = None            # the last string read at depth 1 (a key once ':' follows)
    while (m := _NEXT.search(text, pos)) is not None:
        tokens += 1
        if tokens > most:
            raise _refusal(top, f"more than {most} strings, brackets and separators", whole)
        c, pos = m.group(), m.end()
        if c == '"':
            try:
                value, pos = scanstring(text, pos, True)
            except ValueError:
                return tokens
            if len(open_) == 1:  # a refusal may name it: a lone surrogate (`\ud800`) as its escape
                last = value[:_KEY_CHARS].encode("utf-8", "backslashreplace").decode("utf-8")
        elif c in "[{":
            open_.append(c)
            if len(open_) > max_depth:
                raise _refusal(top, f"nested deeper than {max_depth} levels", whole)
        elif c in "]}":
            if not open_:
                return tokens
            open_.pop()
        elif c == ":" or open_ and open_[-1] == "[":
            members += 1
            if c == ":" and len(open_) == 1:
                top = last
                if first_unknown is None and top not in known:
                    first_unknown = top
            if members > max_members:  # passed by the top-level keys: blame the one the schema would
                top_level = c == ":" and len(open_) == 1
                raise _refusal(first_unknown or top if top_level else top,
                               f"the {whole} has more than {max_members} keys and array elements", whole)
    return tokens


def token_limit(max_depth: int, max_members: int) -> int:
    """More tokens than a valid document within both bounds can have: per member (a key or an element) its
    separator, at most two strings, and a chain of at most `max_depth` first-element containers."""
    return (max_members + 1) * (2 * max_depth + 4) + 2 * max_depth + 8


def _refusal(param: str | None, what: str, whole: str) -> ApiError:
    return ApiError(400, f"{param if param is not None else whole}: {what} (refused before parsing)", param=param,
                    code="too_complex")
